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

/// The features every stage builds with (`nccl` comes with the examples;
/// `dnn` and `reference`, off by default, are named here as well as by
/// the examples, so the suite never runs without them; the set resolves
/// to the same as `.ci/run`'s build with `cudnn-rs/cudarc,
/// cudnn-examples/cudarc`), the same for all, so one build of the crate
/// and its three test binaries serves every stack: a stage that changes
/// only the libraries found at run time reruns the binaries, it never
/// rebuilds them.
const FEATURES: &[&str] = &[
    "--features",
    "cudnn-rs/cudarc,cudnn-rs/dnn,cudnn-rs/reference,cudnn-examples/cudarc",
];

/// The test command: fetch the stacks, run every test with the cuda13
/// stack, then the library-facing tests (the crate's own and the host tier)
/// again with the cuda12 stack
/// (cuDNN 8.9, CUDA 12), then the attention tests with cuDNN 9.10 (the
/// composite attention's cuDNN), then the graph and raw host tiers and the
/// planning examples with the GPU machine's stack (torch211). Missing
/// libraries are failures here. `--quick`: the unit and host tiers on the
/// cuda13 stack only (a contributor's check after a change).
pub fn test(args: &[String]) -> Result<(), String> {
    let memo = finalize_memo_dir();
    if let Some(dir) = &memo {
        prune_finalize_memo(dir, FINALIZE_MEMO_LIMIT);
    }
    let quick = args.iter().any(|a| a == "--quick");
    let args: Vec<String> = args.iter().filter(|a| *a != "--quick").cloned().collect();
    if quick {
        let cu13 = fetch::fetch(&fetch::CUDA13)?;
        let mut cmd = cargo_test(&["--lib", "--test", "unit", "--test", "host"], &args);
        stack_env(&mut cmd, "cuda13", &cu13);
        return status(
            cmd,
            "cargo test --lib --test unit --test host (stack cuda13, libraries required)",
        );
    }
    // The stages run the examples cargo test built where a plain debug
    // build puts them: arguments that move or rename that build would leave
    // them running stale binaries.
    if let Some(a) = args.iter().find(|a| {
        ["--release", "--profile", "--target", "--target-dir", "-r"]
            .iter()
            .any(|o| *a == o || a.starts_with(&format!("{o}=")))
    }) {
        return Err(format!(
            "cargo xtask test: `{a}` is not supported (the stages run the debug examples cargo test builds in the target folder; use CARGO_TARGET_DIR to move it)"
        ));
    }
    let dirs = fetch::run(&["--stack".to_string(), "all".to_string()])?;
    let (cu13, cu12, c910, torch) = match dirs.as_slice() {
        [a, b, c, d] => (a.clone(), b.clone(), c.clone(), d.clone()),
        _ => return Err("fetch-libs returned an unexpected set of stacks".to_string()),
    };
    // The project's tools (bindings, packaging, device check, API listing).
    let mut cmd = cargo();
    cmd.args(["test", "-p", "xtask"]).args(&args);
    status(cmd, "cargo test -p xtask")?;
    let mut cmd = cargo_test(&[], &args);
    stack_env(&mut cmd, "cuda13", &cu13);
    status(
        cmd,
        "cargo test (stack cuda13, libraries required; every test, doctests, examples built)",
    )?;
    // Issue 22: the cudarc example (plans for an H200 without a GPU).
    let mut cmd = Command::new(example("cudarc_interop"));
    stack_env(&mut cmd, "cuda13", &cu13);
    status(cmd, "examples/cudarc_interop (stack cuda13)")?;
    // The conformance example has unit tests (`test = true`), so cargo test
    // built it as a test harness: build its program (with the same features,
    // nothing else rebuilds).
    let mut cmd = cargo();
    cmd.args(["build", "--quiet"])
        .args(FEATURES)
        .args(["--example", "conformance"]);
    status(cmd, "cargo build --example conformance")?;
    crate::conformance::run(&cu13, Some(&example("conformance")), memo.as_deref())?;
    // The library-facing tests only: the unit tier, compile_fail and the
    // examples' own tests load no library (their answers cannot depend on
    // the stack); they, and the GPU tier (skipped without a device; the
    // device check runs it on one), ran in the cuda13 stage.
    let mut cmd = cargo_test(&["--lib", "--test", "host"], &args);
    stack_env(&mut cmd, "cuda12", &cu12);
    status(
        cmd,
        "cargo test --lib --test host (stack cuda12, libraries required)",
    )?;
    // cuDNN 9.10, which has no SDPA operation: the attention tests again,
    // through the composite pattern (cuBLAS and the CUDA runtime from cuda12).
    let search = std::env::join_paths([&c910, &cu12])
        .map_err(|e| format!("joining the cudnn910 and cuda12 folders: {e}"))?;
    let mut cmd = cargo_test(&["--test", "host"], &args);
    cmd.args(["--", "sdpa"])
        .env("CUDNN_RS_REQUIRE_LIBS", "1")
        .env("CUDNN_RS_EXPECT_CUDNN", "9.10")
        .env("CUDNN_RS_SEARCH_PATH", search)
        // Issue 24's attention options (their tests are all named `sdpa_*`).
        .env("CUDNN_RS_TEST_MODULE", CUDNN910_MODULES.join(","));
    status(
        cmd,
        &format!(
            "cargo test --test host -- sdpa (modules {}; stack cudnn910, libraries required)",
            CUDNN910_MODULES.join(",")
        ),
    )?;
    torch211(&torch, &args)
}

/// `cargo test` with the suite's features, `extra` and the caller's args.
fn cargo_test(extra: &[&str], args: &[String]) -> Command {
    let mut cmd = cargo();
    cmd.arg("test").args(FEATURES).args(extra).args(args);
    cmd
}

fn stack_env(cmd: &mut Command, stack: &str, dir: &Path) {
    cmd.env("CUDNN_RS_REQUIRE_LIBS", "1")
        .env("CUDNN_RS_EXPECT_STACK", stack)
        .env("CUDNN_RS_SEARCH_PATH", dir);
}

/// An example binary as `cargo test` left it (built with the suite's
/// features, so running it rebuilds nothing).
fn example(name: &str) -> std::path::PathBuf {
    target_dir().join("debug").join("examples").join(name)
}

fn target_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| crate::workspace_root().join("target"))
}

/// The host tier's finalize memo, as the tier finds it
/// (`cudnn/tests/support`): `CUDNN_RS_FINALIZE_MEMO` names a folder or
/// `off` (`None`); unset, the default folder in the target folder's `tmp`
/// (`CARGO_TARGET_TMPDIR`). Plans compiled in earlier runs, one file per
/// input cuDNN was given, which a changed graph leaves behind.
fn finalize_memo_dir() -> Option<std::path::PathBuf> {
    match std::env::var_os("CUDNN_RS_FINALIZE_MEMO") {
        Some(v) if v == "off" => None,
        Some(v) if !v.is_empty() => Some(v.into()),
        _ => Some(target_dir().join("tmp").join("finalize-memo")),
    }
}

/// The memo's size past which a run starts it afresh (a full run on one
/// stack stores about 110 MB).
const FINALIZE_MEMO_LIMIT: u64 = 2 << 30;

/// Remove the memo folder `dir` whole when its files pass `limit` bytes
/// (the next run compiles every plan again and stores what it uses); says
/// so on stderr. Returns whether it removed it.
fn prune_finalize_memo(dir: &Path, limit: u64) -> bool {
    fn size(p: &Path, depth: u32) -> u64 {
        let Ok(entries) = std::fs::read_dir(p) else {
            return 0;
        };
        entries
            .flatten()
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() && depth > 0 => size(&e.path(), depth - 1),
                Ok(t) if t.is_file() => e.metadata().map(|m| m.len()).unwrap_or(0),
                _ => 0,
            })
            .sum()
    }
    let bytes = size(dir, 2);
    if bytes <= limit {
        return false;
    }
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {
            eprintln!(
                "finalize memo: {} held {bytes} bytes (over {limit}): removed; this run compiles every plan",
                dir.display()
            );
            true
        }
        Err(e) => {
            eprintln!("finalize memo: removing {}: {e}", dir.display());
            false
        }
    }
}

/// The host test modules run against cuDNN 9.10 (their `sdpa` tests).
const CUDNN910_MODULES: &[&str] = &[
    "graph_norm_attention",
    "plan_targets",
    "sdpa_options",
    "sdpa_ragged",
    "sdpa_seq_lengths",
];

/// The GPU machine's stack (what PyTorch 2.11.0 pins: cuDNN 9.19, NVRTC
/// 13.0, cuBLAS 13.1): the graph host tier (its per-target planning loops
/// for Hopper, that machine's GPU, and Ampere), the raw layer, and the
/// examples that plan without a GPU, as the device check will run them.
fn torch211(dir: &Path, args: &[String]) -> Result<(), String> {
    let env = |cmd: &mut Command| {
        stack_env(cmd, "torch211", dir);
        cmd.env("CUDNN_RS_EXPECT_CUDNN", "9.19");
    };
    // The per-target planning loops plan for Hopper and Ampere here (issue
    // 32): the GPU machines run this stack on an H100 or an H200 (which
    // cuDNN plans alike: `plan_targets`, run here too), and PyTorch's
    // cuDNN is what A100 users load most; the cuda13 stage plans every
    // module's full list (B200 and L4 too).
    let tests_env = |cmd: &mut Command| {
        env(cmd);
        cmd.env("CUDNN_RS_TEST_TARGETS", "h200,h100,a100");
    };
    let mut cmd = cargo_test(&["--test", "host"], args);
    tests_env(&mut cmd);
    cmd.env("CUDNN_RS_TEST_MODULE", TORCH211_MODULES.join(","));
    status(
        cmd,
        &format!(
            "cargo test --test host (modules {}; stack torch211, planning loops for the H200, H100 and A100; libraries required)",
            TORCH211_MODULES.join(",")
        ),
    )?;
    for ex in TORCH211_EXAMPLES {
        let mut cmd = Command::new(example(ex));
        env(&mut cmd);
        status(
            cmd,
            &format!("examples/{ex} (stack torch211, plans for an H200)"),
        )?;
    }
    Ok(())
}

/// The host test modules run against the `torch211` stack.
const TORCH211_MODULES: &[&str] = &[
    "raw",
    "graph",
    "graph_norm_attention",
    "fp8_gemm",
    "sdpa_options",
    "sdpa_ragged",
    "sdpa_seq_lengths",
    "sdpa_softcap",
    "sdpa_softmax",
    "sdpa_combined",
    "sdpa_fp8_ops",
    "plan_targets",
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

#[cfg(test)]
mod memo_tests {
    use super::prune_finalize_memo;

    #[test]
    fn the_memo_is_removed_whole_past_its_limit_and_kept_below() {
        let dir = std::env::temp_dir().join(format!("xtask-memo-{}", std::process::id()));
        let env = dir.join("0123abcd");
        std::fs::create_dir_all(&env).unwrap();
        std::fs::write(env.join("a.plan"), vec![0u8; 600]).unwrap();
        std::fs::write(env.join("b.plan"), vec![0u8; 600]).unwrap();
        assert!(
            !prune_finalize_memo(&dir, 1200),
            "1200 bytes is not over 1200"
        );
        assert!(env.join("a.plan").exists());
        assert!(prune_finalize_memo(&dir, 1199));
        assert!(!dir.exists(), "removed whole");
        assert!(!prune_finalize_memo(&dir, 0), "nothing to remove");
    }
}
