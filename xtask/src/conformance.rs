//! The conformance tier of `cargo xtask test`: every graph pattern built by
//! the crate and by NVIDIA's cuDNN frontend for the same targets, compared
//! (`examples/conformance`, `xtask/conformance/frontend.py`).

use std::path::Path;
use std::process::Command;

use crate::fetch;

/// Run the tier against the cuda13 stack in `cu13` (the frontend fetched
/// into the cache first). Missing Python or frontend is a failure here.
/// `exe`: the example as already built (by `cargo xtask test`'s first
/// stage), else `cargo run` builds it.
pub fn run(cu13: &Path, exe: Option<&Path>) -> Result<(), String> {
    run_with(cu13, exe, &[])
}

/// `cargo xtask conformance [--only SUBSTR] [--targets ..] [--timing] ...`:
/// the tier alone (cuda13, the frontend fetched first), the arguments passed
/// to the example; `--only` picks a subset of the patterns for a quick look.
pub fn task(args: &[String]) -> Result<(), String> {
    let cu13 = fetch::fetch(&fetch::CUDA13)?;
    run_with(&cu13, None, args)
}

fn run_with(cu13: &Path, exe: Option<&Path>, args: &[String]) -> Result<(), String> {
    let fe = fetch::fetch_frontend()?;
    let lib = cu13.join("nvidia").join("cudnn").join("lib");
    let mut cmd = match exe {
        Some(exe) => Command::new(exe),
        None => {
            let mut c =
                Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string()));
            c.args([
                "run",
                "--quiet",
                "-p",
                "cudnn-examples",
                "--example",
                "conformance",
                "--",
            ]);
            c
        }
    };
    cmd.arg("--frontend-dir")
        .arg(&fe)
        .arg("--cudnn-lib")
        .arg(&lib)
        .args(args)
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
