//! The conformance tier of `cargo xtask test`: every graph pattern built by
//! the crate and by NVIDIA's cuDNN frontend for the same targets, compared
//! (`examples/conformance`, `xtask/conformance/frontend.py`); and
//! `cargo xtask bench-planning`, the same run in a release build with the
//! host times of both sides per family; and `cargo xtask bench-launch`.

use std::path::Path;
use std::process::Command;

use crate::fetch;

/// Run the tier against the cuda13 stack in `cu13` (the frontend fetched
/// into the cache first). Missing Python or frontend is a failure here.
/// `exe`: the example as already built (by `cargo xtask test`'s first
/// stage), else `cargo run` builds it.
pub fn run(cu13: &Path, exe: Option<&Path>, finalize_memo: Option<&Path>) -> Result<(), String> {
    // The crate's side plans through the host tier's finalize memo (its
    // plans compiled in an earlier run from the same input load instead),
    // unless it is off.
    let memo: Vec<String> = match finalize_memo {
        Some(dir) => vec!["--finalize-memo".to_string(), dir.display().to_string()],
        None => Vec::new(),
    };
    conformance(
        cu13,
        exe,
        &[],
        &memo,
        "examples/conformance (stack cuda13 against NVIDIA's cuDNN frontend)",
    )
}

/// `cargo xtask conformance [--only SUBSTR] [--targets ..] [--timing] ...`:
/// the tier alone (cuda13, the frontend fetched first), the arguments passed
/// to the example; `--only` picks a subset of the patterns for a quick look.
pub fn task(args: &[String]) -> Result<(), String> {
    let cu13 = fetch::fetch(&fetch::CUDA13)?;
    conformance(
        &cu13,
        None,
        &[],
        args,
        "cargo run --example conformance (stack cuda13 against NVIDIA's cuDNN frontend)",
    )
}

/// `cargo xtask bench-planning [--reps N] [--rounds R] [--targets LIST] [--only SUBSTR]...`:
/// the conformance run in a release build with `--timing`, op-graph build,
/// heuristics and plan load timed `N` times on both sides (default 5; the
/// median counts), the whole run `R` times in turn (default 1; the median
/// of the rounds counts: the two sides run one after the other, so a
/// machine whose load changes favours one; rounds even that out), for the
/// H200 target unless `--targets` says otherwise.
/// Prints the per-pattern table and the medians per family with the ratios
/// crate / frontend, then the crate's steps split into cuDNN's own calls and
/// the crate's code, each as a share of the frontend's step. Nothing is
/// asserted on the times.
pub fn bench_planning(args: &[String]) -> Result<(), String> {
    let mut extra: Vec<String> = vec!["--timing".into()];
    let (mut reps, mut targets) = ("5".to_string(), "h200".to_string());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("bench-planning: {a} needs a value"))
        };
        match a.as_str() {
            "--reps" => reps = val()?,
            "--rounds" => {
                let v = val()?;
                extra.extend(["--rounds".to_string(), v]);
            }
            "--targets" => targets = val()?,
            "--only" => {
                let v = val()?;
                extra.extend(["--only".to_string(), v]);
            }
            other => return Err(format!("bench-planning: unknown option `{other}`")),
        }
    }
    extra.extend(["--reps".to_string(), reps, "--targets".to_string(), targets]);
    let dirs = fetch::run(&[])?;
    let cu13 = dirs
        .first()
        .ok_or("fetch-libs returned no cuda13 folder")?
        .clone();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    eprintln!(
        "bench-planning: load average {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    conformance(
        &cu13,
        None,
        &["--release"],
        &extra,
        "cargo run --release --example conformance -- --timing (planning host time, crate vs NVIDIA's cuDNN frontend)",
    )
}

/// `cargo xtask bench-launch [--rounds N]`: `examples/bench_launch` in a
/// release build against the cuda13 stack (fetched first).
pub fn bench_launch(args: &[String]) -> Result<(), String> {
    let dirs = fetch::run(&[])?;
    let cu13 = dirs
        .first()
        .ok_or("fetch-libs returned no cuda13 folder")?
        .clone();
    let what = "cargo run --release --example bench_launch";
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string()));
    cmd.args([
        "run",
        "--quiet",
        "--release",
        "-p",
        "cudnn-examples",
        "--example",
        "bench_launch",
        "--",
    ])
    .args(args)
    .env("CUDNN_RS_SEARCH_PATH", &cu13);
    eprintln!("+ {what}");
    let st = cmd.status().map_err(|e| format!("{what}: {e}"))?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({st})"))
    }
}

fn conformance(
    cu13: &Path,
    exe: Option<&Path>,
    cargo: &[&str],
    extra: &[String],
    what: &str,
) -> Result<(), String> {
    let fe = fetch::fetch_frontend()?;
    let lib = cu13.join("nvidia").join("cudnn").join("lib");
    let mut cmd = match exe {
        Some(exe) => Command::new(exe),
        None => {
            let mut c =
                Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string()));
            c.args(["run", "--quiet"]).args(cargo).args([
                "-p",
                "cudnn-examples",
                "--example",
                "conformance",
                "--",
            ]);
            c
        }
    };
    // The frontend's answers are remembered in the target folder
    // (`examples/conformance/oracle.rs`): a change to the crate asks the
    // frontend again only for the items whose request changed.
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| crate::workspace_root().join("target"));
    cmd.arg("--oracle-cache")
        .arg(target.join("conformance-oracle"))
        .arg("--frontend-dir")
        .arg(&fe)
        .arg("--cudnn-lib")
        .arg(&lib)
        .args(extra)
        .env("CUDNN_RS_REQUIRE_LIBS", "1")
        .env("CUDNN_RS_EXPECT_STACK", "cuda13")
        .env("CUDNN_RS_SEARCH_PATH", cu13);
    eprintln!("+ {what}");
    let st = cmd.status().map_err(|e| format!("{what}: {e}"))?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({st})"))
    }
}
