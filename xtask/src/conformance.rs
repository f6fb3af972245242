//! The conformance tier of `cargo xtask test`: every graph pattern built by
//! the crate and by NVIDIA's cuDNN frontend for the same targets, compared
//! (`examples/conformance`, `xtask/conformance/frontend.py`).

use std::path::Path;
use std::process::Command;

use crate::fetch;

/// Run the tier against the cuda13 stack in `cu13` (the frontend fetched
/// into the cache first). Missing Python or frontend is a failure here.
pub fn run(cu13: &Path) -> Result<(), String> {
    let fe = fetch::fetch_frontend()?;
    let lib = cu13.join("nvidia").join("cudnn").join("lib");
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string()));
    cmd.args([
        "run",
        "--quiet",
        "-p",
        "cudnn-examples",
        "--example",
        "conformance",
        "--",
    ])
    .arg("--frontend-dir")
    .arg(&fe)
    .arg("--cudnn-lib")
    .arg(&lib)
    .env("CUDNN_RS_REQUIRE_LIBS", "1")
    .env("CUDNN_RS_EXPECT_STACK", "cuda13")
    .env("CUDNN_RS_SEARCH_PATH", cu13);
    let what = "cargo run --example conformance (stack cuda13 against NVIDIA's cuDNN frontend)";
    eprintln!("+ {what}");
    let st = cmd.status().map_err(|e| format!("{what}: {e}"))?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({st})"))
    }
}
