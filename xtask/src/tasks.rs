//! `cargo xtask test` and `cargo xtask doctor`: the README's two commands,
//! each doing its own set-up on a fresh machine.

use std::path::Path;
use std::process::Command;

use crate::fetch;

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string()))
}

fn status(mut cmd: Command, what: &str) -> Result<(), String> {
    eprintln!("+ {what}");
    let st = cmd.status().map_err(|e| format!("{what}: {e}"))?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({st})"))
    }
}

/// The test command: fetch the stacks, run every test with the cuda13
/// stack, then the library-facing tests again with the cuda12 stack
/// (cuDNN 8.9, CUDA 12), then the attention tests with cuDNN 9.10 (the
/// composite attention's cuDNN), then the graph and raw host tiers and the
/// planning examples with the GPU machine's stack (torch211). Missing
/// libraries are failures here.
pub fn test(args: &[String]) -> Result<(), String> {
    let dirs = fetch::run(&["--stack".to_string(), "all".to_string()])?;
    let (cu13, cu12, c910, torch) = match dirs.as_slice() {
        [a, b, c, d] => (a.clone(), b.clone(), c.clone(), d.clone()),
        _ => return Err("fetch-libs returned an unexpected set of stacks".to_string()),
    };
    let run = |stack: &str, dir: &Path, extra: &[&str]| -> Result<(), String> {
        let mut cmd = cargo();
        cmd.args(["test", "--workspace"]).args(extra).args(args);
        cmd.env("CUDNN_RS_REQUIRE_LIBS", "1")
            .env("CUDNN_RS_EXPECT_STACK", stack)
            .env("CUDNN_RS_SEARCH_PATH", dir);
        status(
            cmd,
            &format!(
                "cargo test --workspace {} (stack {stack}, libraries required)",
                extra.join(" ")
            ),
        )
    };
    run("cuda13", &cu13, &[])?;
    cudarc(&cu13, args)?;
    crate::conformance::run(&cu13)?;
    run("cuda12", &cu12, &["--tests"])?;
    // cuDNN 9.10, which has no SDPA operation: the attention tests again,
    // through the composite pattern (cuBLAS and the CUDA runtime from cuda12).
    let search = std::env::join_paths([&c910, &cu12])
        .map_err(|e| format!("joining the cudnn910 and cuda12 folders: {e}"))?;
    let mut cmd = cargo();
    cmd.args([
        "test",
        "-p",
        "cudnn-rs",
        "--test",
        "host_graph_norm_attention",
    ])
    // Issue 24's attention options (their tests are all named `sdpa_*`).
    .args(["--test", "host_sdpa_options"])
    .args(["--test", "host_sdpa_ragged"])
    .args(["--test", "host_sdpa_seq_lengths"])
    .args(args)
    .args(["--", "sdpa"]);
    cmd.env("CUDNN_RS_REQUIRE_LIBS", "1")
        .env("CUDNN_RS_EXPECT_CUDNN", "9.10")
        .env("CUDNN_RS_SEARCH_PATH", search);
    status(
        cmd,
        "cargo test -p cudnn-rs --test host_graph_norm_attention -- sdpa (stack cudnn910, libraries required)",
    )?;
    torch211(&torch, args)
}

/// Issue 22: the `cudarc` feature, which `cargo test --workspace` leaves
/// off (its compile-fail text differs with cudarc in the build): the
/// interop's unit tests, its host, compile-fail and gpu tests (skipped
/// without a device), and the example (plans for an H200 without one).
fn cudarc(dir: &Path, args: &[String]) -> Result<(), String> {
    let env = |cmd: &mut Command| {
        cmd.env("CUDNN_RS_REQUIRE_LIBS", "1")
            .env("CUDNN_RS_EXPECT_STACK", "cuda13")
            .env("CUDNN_RS_SEARCH_PATH", dir);
    };
    let features = ["--features", "nccl,cudarc"];
    let mut cmd = cargo();
    cmd.args(["test", "-p", "cudnn-rs", "--lib"])
        .args(features)
        .args(args)
        .args(["--", "interop::"]);
    env(&mut cmd);
    status(
        cmd,
        "cargo test -p cudnn-rs --features nccl,cudarc --lib -- interop::",
    )?;
    let mut cmd = cargo();
    cmd.args(["test", "-p", "cudnn-rs"]).args(features);
    for t in ["compile_fail", "host_cudarc", "gpu_cudarc"] {
        cmd.args(["--test", t]);
    }
    cmd.args(args);
    env(&mut cmd);
    status(
        cmd,
        "cargo test -p cudnn-rs --features nccl,cudarc --test compile_fail --test host_cudarc --test gpu_cudarc",
    )?;
    let mut cmd = cargo();
    cmd.args([
        "run",
        "--quiet",
        "-p",
        "cudnn-examples",
        "--features",
        "cudarc",
        "--example",
        "cudarc_interop",
    ]);
    env(&mut cmd);
    status(
        cmd,
        "cargo run -p cudnn-examples --features cudarc --example cudarc_interop",
    )
}

/// The GPU machine's stack (what PyTorch 2.11.0 pins: cuDNN 9.19, NVRTC
/// 13.0, cuBLAS 13.1): the graph host tier, the raw layer, and the
/// examples that plan without a GPU, as the device check will run them.
fn torch211(dir: &Path, args: &[String]) -> Result<(), String> {
    let env = |cmd: &mut Command| {
        cmd.env("CUDNN_RS_REQUIRE_LIBS", "1")
            .env("CUDNN_RS_EXPECT_STACK", "torch211")
            .env("CUDNN_RS_EXPECT_CUDNN", "9.19")
            .env("CUDNN_RS_SEARCH_PATH", dir);
    };
    let mut cmd = cargo();
    cmd.args(["test", "-p", "cudnn-rs"]);
    for t in TORCH211_TESTS {
        cmd.args(["--test", t]);
    }
    cmd.args(args);
    env(&mut cmd);
    status(
        cmd,
        &format!(
            "cargo test -p cudnn-rs --test {} (stack torch211, libraries required)",
            TORCH211_TESTS.join(" --test ")
        ),
    )?;
    for ex in TORCH211_EXAMPLES {
        let mut cmd = cargo();
        cmd.args(["run", "--quiet", "-p", "cudnn-examples", "--example", ex]);
        env(&mut cmd);
        status(
            cmd,
            &format!("cargo run --example {ex} (stack torch211, plans for an H200)"),
        )?;
    }
    Ok(())
}

/// The test binaries run against the `torch211` stack.
const TORCH211_TESTS: &[&str] = &[
    "host_raw",
    "host_graph",
    "host_graph_norm_attention",
    "host_fp8_gemm",
    "host_sdpa_options",
    "host_sdpa_ragged",
    "host_sdpa_seq_lengths",
    "host_sdpa_softcap",
    "host_sdpa_softmax",
    "host_sdpa_combined",
];
/// The examples that plan (without a GPU: for an H200), run against it.
const TORCH211_EXAMPLES: &[&str] = &[
    "graph_conv",
    "aot",
    "attention",
    "bench_graph",
    "kv_cache_decode",
];

/// The run command: make sure the libraries are there (as `doctor`), then
/// train the `lenet` example (needs a GPU; says so and fails without one).
pub fn run(args: &[String]) -> Result<(), String> {
    let dir = ensure_libraries()?;
    let mut cmd = cargo();
    cmd.args(["run", "--release", "--quiet", "--example", "lenet", "--"])
        .args(args);
    if let Some(dir) = dir {
        cmd.env("CUDNN_RS_FALLBACK_PATH", dir);
    }
    status(cmd, "cargo run --release --example lenet")
}

/// Run `doctor`; when it reports missing libraries, fetch the cuda13 wheels
/// and return their folder (to search last).
fn ensure_libraries() -> Result<Option<std::path::PathBuf>, String> {
    let mut probe = cargo();
    probe.args(["run", "--quiet", "--example", "doctor"]);
    eprintln!("+ cargo run --example doctor");
    let st = probe.status().map_err(|e| e.to_string())?;
    if st.success() {
        return Ok(None);
    }
    eprintln!(
        "\nsome libraries were not found; fetching NVIDIA's wheels into the project's cache ...\n"
    );
    Ok(Some(fetch::fetch(&fetch::CUDA13)?))
}

/// The set-up check: `doctor`, fetching NVIDIA's wheels first when no
/// libraries are found.
pub fn doctor(args: &[String]) -> Result<(), String> {
    let verbose = args.iter().any(|a| a == "--verbose" || a == "-v");
    let mut probe = cargo();
    probe
        .args(["run", "--quiet", "--example", "doctor", "--"])
        .args(args);
    eprintln!("+ cargo run --example doctor");
    // On a new machine the first look finds nothing: keep its report (one
    // line per place) for --verbose, and go straight to the fix.
    let out = probe.output().map_err(|e| e.to_string())?;
    if out.status.success() {
        print!("{}", String::from_utf8_lossy(&out.stdout));
        return Ok(());
    }
    if verbose || out.stdout.is_empty() {
        print!("{}", String::from_utf8_lossy(&out.stdout));
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
    }
    eprintln!(
        "some libraries were not found in the usual places{}; fetching NVIDIA's wheels into the project's cache ...",
        if verbose {
            ""
        } else {
            " (`cargo xtask doctor --verbose` shows where it looked)"
        }
    );
    let dir = fetch::fetch(&fetch::CUDA13)?;
    let mut cmd = cargo();
    cmd.args(["run", "--quiet", "--example", "doctor", "--"])
        .args(args)
        .env("CUDNN_RS_FALLBACK_PATH", &dir);
    status(cmd, "cargo run --example doctor")
}
