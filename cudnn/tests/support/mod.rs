//! Shared by the test binaries (each uses `harness = false` and libtest-mimic,
//! so a test that cannot run here is reported as *ignored* with a reason on
//! stderr, never as passed).
//!
//! Tiers:
//! - `host(...)`: needs the real libraries, no device. When they are missing
//!   the test is skipped, unless `CUDNN_RS_REQUIRE_LIBS=1` (CI), where it fails.
//! - `gpu(...)`: needs a CUDA device. Skipped without one, unless
//!   `CUDNN_RS_REQUIRE_GPU=1` (the device check), where it fails.
#![allow(dead_code)]

pub mod fp8_graphs;
pub mod fuzz_child;
pub mod gpu_data;
pub mod gpu_sdpa;
pub mod graph_plans;
pub mod norm_attention_graphs;
pub mod plan_nodes;
#[cfg(feature = "nccl")]
pub mod rendezvous;
pub mod scan;
pub mod sdpa_plans;

use std::sync::Mutex;

use libtest_mimic::{Arguments, Failed, Trial};

pub type TestResult = Result<(), Failed>;

fn flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == "1" || v == "true")
}

/// Why host tests cannot run here, if they cannot.
pub fn libs_missing() -> Option<String> {
    let mut missing = Vec::new();
    if let Err(e) = cudnn::sys::cudart::load() {
        missing.push(e.to_string());
    }
    if let Err(e) = cudnn::sys::cudnn::load() {
        missing.push(e.to_string());
    }
    if let Err(e) = cudnn::sys::cublas::load() {
        missing.push(e.to_string());
    }
    if let Err(e) = cudnn::sys::cublas::load_lt() {
        missing.push(e.to_string());
    }
    (!missing.is_empty()).then(|| missing.join("\n"))
}

/// Why GPU tests cannot run here, if they cannot.
pub fn gpu_missing() -> Option<String> {
    if let Some(m) = libs_missing() {
        return Some(format!("libraries missing:\n{m}"));
    }
    let rt = cudnn::sys::cudart::load().ok()?;
    let mut n = 0;
    // SAFETY: valid out-pointer.
    match unsafe { rt.cudaGetDeviceCount(&mut n) } {
        Ok(st) if st == cudnn::sys::cudart::cudaError::cudaSuccess && n > 0 => None,
        Ok(st) => Some(format!(
            "no CUDA device (cudaGetDeviceCount returned {}, count {n})",
            st.0
        )),
        Err(e) => Some(e.to_string()),
    }
}

/// Whether a device is present (for host tests that assert the no-device behaviour).
pub fn has_gpu() -> bool {
    gpu_missing().is_none()
}

/// The module whose tests are being registered (their names start with it,
/// so `cargo test --test host sdpa_options::` runs one file's tests).
static MODULE: Mutex<&'static str> = Mutex::new("");
/// The trials registered so far, run together by [`run_modules`].
static TRIALS: Mutex<Vec<Trial>> = Mutex::new(Vec::new());

fn module() -> &'static str {
    *MODULE.lock().unwrap_or_else(|e| e.into_inner())
}

/// `module::name`, the full name of a test of the module being registered.
pub fn full_name(name: impl AsRef<str>) -> String {
    match module() {
        "" => name.as_ref().to_string(),
        m => format!("{m}::{}", name.as_ref()),
    }
}

/// A trial of the module being registered (its name prefixed).
pub fn trial(name: impl AsRef<str>, f: impl FnOnce() -> TestResult + Send + 'static) -> Trial {
    timed(full_name(name), f)
}

/// A trial named `name` (in full). CUDNN_RS_TEST_TIMES=1 writes each
/// test's wall time on stderr (`time NAME SECONDS`), to find what a tier
/// spends its time on.
fn timed(name: String, f: impl FnOnce() -> TestResult + Send + 'static) -> Trial {
    if std::env::var_os("CUDNN_RS_TEST_TIMES").is_none() {
        return Trial::test(name, f);
    }
    let shown = name.clone();
    Trial::test(name, move || {
        let start = std::time::Instant::now();
        let r = f();
        eprintln!("time {shown} {:.2}", start.elapsed().as_secs_f64());
        r
    })
}

/// The named GPUs a per-target planning loop plans for: `all` (the
/// module's list), or the part of it that `CUDNN_RS_TEST_TARGETS=a,b`
/// names. `cargo xtask test` sets it to `h200,h100,a100` on the GPU
/// machine's stack (torch211: those machines are H100s and H200s, and A100
/// users load PyTorch's cuDNN too); the newest stack plans the full lists.
/// A filter that keeps nothing of `all` keeps `all`, so a loop never runs
/// empty; each filtering says so on stderr (once per list).
pub fn targets(all: &[&'static str]) -> Vec<&'static str> {
    let Ok(only) = std::env::var("CUDNN_RS_TEST_TARGETS") else {
        return all.to_vec();
    };
    let want: Vec<&str> = only.split(',').map(str::trim).collect();
    let kept: Vec<&'static str> = all.iter().copied().filter(|t| want.contains(t)).collect();
    // Said once per list and process (the loops ask per case).
    static SAID: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let first = {
        let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
        let key = format!("{all:?}");
        let first = !said.contains(&key);
        if first {
            said.push(key);
        }
        first
    };
    if kept.is_empty() {
        if first {
            eprintln!(
                "CUDNN_RS_TEST_TARGETS={only} names none of {all:?}: planning for all of them"
            );
        }
        return all.to_vec();
    }
    if first {
        eprintln!("CUDNN_RS_TEST_TARGETS={only}: planning for {kept:?} of {all:?}");
    }
    kept
}

/// Set in a child process that runs one isolated test (see [`isolated`]).
const ISOLATED: &str = "CUDNN_RS_ISOLATED_TEST";

/// A trial that runs in a process of its own: for a test whose truth
/// depends on what the process has done before it (the first load of the
/// driver, a process-wide limit), which a binary shared by many modules
/// cannot promise. The parent starts this binary again with the module
/// alone and `--exact` the test's name, and passes when that child passes
/// (its output is shown on stderr).
pub fn isolated(t: Trial) -> Trial {
    if std::env::var_os(ISOLATED).is_some() || t.has_ignored_flag() {
        return t;
    }
    let name = t.name().to_string();
    let module = module();
    Trial::test(name.clone(), move || {
        let out = std::process::Command::new(std::env::current_exe()?)
            .args(["--exact", &name, "--test-threads", "1", "--nocapture"])
            .env(ISOLATED, "1")
            .env("CUDNN_RS_TEST_MODULE", module)
            .output()?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
        if out.status.success() && stdout.contains("1 passed") {
            Ok(())
        } else {
            Err(format!("{name} in its own process ({}):\n{stdout}", out.status).into())
        }
    })
}

/// Register one ignored test standing for a module that cannot run in this
/// build, with the reason on stderr.
pub fn skipped(name: &str, why: &str) {
    eprintln!("skipped: {}: {why}", full_name(name));
    run(vec![trial(name, || Ok(())).with_ignored_flag(true)]);
}

/// A host-tier test.
pub fn host(name: &str, f: impl FnOnce() -> TestResult + Send + 'static) -> Trial {
    tiered(
        format!("host::{name}"),
        libs_missing(),
        "CUDNN_RS_REQUIRE_LIBS",
        f,
    )
}

/// A host-tier test that plans graphs without a device, which needs cuDNN
/// 9.8 or newer: on a stack with an older cuDNN it is reported as ignored
/// (with a note on stderr), never as passed.
#[allow(dead_code)]
pub fn host_planning(name: &str, f: impl FnOnce() -> TestResult + Send + 'static) -> Trial {
    if libs_missing().is_none() && cudnn::graph::require_graph_support().is_err() {
        eprintln!("skipped: host::{name}: needs cuDNN >= 9.8 (this stack has an older cuDNN)");
        return trial(format!("host::{name}"), f).with_ignored_flag(true);
    }
    host(name, f)
}

/// `text` as a test-name part: lower case, every run of other characters
/// than letters and digits one `_`.
pub fn slug(text: &str) -> String {
    let mut s = String::new();
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            s.push(c.to_ascii_lowercase());
        } else if !s.ends_with('_') {
            s.push('_');
        }
    }
    s.trim_matches('_').to_string()
}

/// A gpu-tier test.
pub fn gpu(name: &str, f: impl FnOnce() -> TestResult + Send + 'static) -> Trial {
    tiered(
        format!("gpu::{name}"),
        gpu_missing(),
        "CUDNN_RS_REQUIRE_GPU",
        f,
    )
}

/// A unit test (needs nothing).
pub fn unit(name: &str, f: impl FnOnce() -> TestResult + Send + 'static) -> Trial {
    trial(format!("unit::{name}"), f)
}

fn tiered(
    name: String,
    missing: Option<String>,
    require: &'static str,
    f: impl FnOnce() -> TestResult + Send + 'static,
) -> Trial {
    let name = full_name(name);
    match missing {
        None => timed(name, f),
        Some(why) if flag(require) => {
            Trial::test(name, move || Err(format!("{require}=1 but: {why}").into()))
        }
        Some(why) => {
            let first = why.lines().next().unwrap_or_default().to_string();
            eprintln!("skipped: {name}: {first}");
            Trial::test(name, f).with_ignored_flag(true)
        }
    }
}

/// Register a module's trials (each module's `main` ends with this).
pub fn run(trials: Vec<Trial>) {
    TRIALS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .extend(trials);
}

/// A test module: its name (the prefix of its tests' names) and its
/// `main`, which registers its trials with [`run`].
pub type Module = (&'static str, fn());

/// The test binary's `main`: a process started as a child of one module's
/// test (an environment variable in `children` names it) runs only that
/// module's `main`, before anything else touches the process (the loader,
/// limits); otherwise every module registers its trials and they run
/// together under one harness (only the one `CUDNN_RS_TEST_MODULE` names,
/// when set). Exits with the harness's status.
pub fn run_modules(modules: &[Module], children: &[(&str, &'static str)]) -> ! {
    let args = Arguments::from_args();
    for (var, owner) in children {
        if std::env::var_os(var).is_some()
            && let Some((name, main)) = modules.iter().find(|(n, _)| n == owner)
        {
            register(name, *main);
            let trials = std::mem::take(&mut *TRIALS.lock().unwrap_or_else(|e| e.into_inner()));
            finish(libtest_mimic::run(&args, trials))
        }
    }
    // CUDNN_RS_TEST_MODULE=a,b registers those modules only (the device
    // check runs and reports the GPU binary module by module; `cargo xtask
    // test` runs some modules against other library stacks).
    match std::env::var("CUDNN_RS_TEST_MODULE") {
        Ok(only) => {
            for want in only.split(',').map(str::trim).filter(|w| !w.is_empty()) {
                match modules.iter().find(|(n, _)| *n == want) {
                    Some((name, main)) => register(name, *main),
                    None => {
                        let names: Vec<&str> = modules.iter().map(|(n, _)| *n).collect();
                        eprintln!(
                            "CUDNN_RS_TEST_MODULE={only}: no module `{want}`; this binary has: {}",
                            names.join(", ")
                        );
                        std::process::exit(2);
                    }
                }
            }
        }
        Err(_) => {
            for (name, main) in modules {
                register(name, *main);
            }
        }
    }
    let trials = std::mem::take(&mut *TRIALS.lock().unwrap_or_else(|e| e.into_inner()));
    finish(libtest_mimic::run(&args, trials))
}

/// Exit with the trials' conclusion, after what the finalize memo saw: a
/// plan built here that does not reload fails the run (a child process's
/// too: its parent sees it fail). A worker that exits on its own skips this.
fn finish(conclusion: libtest_mimic::Conclusion) -> ! {
    if !report_finalize_memo() && !conclusion.has_failed() {
        eprintln!("failed: plans built by this run's tests do not reload (listed above)");
        std::process::exit(101);
    }
    conclusion.exit()
}

/// Where the host tier's finalize memo lives: `CUDNN_RS_FINALIZE_MEMO`
/// names a folder, or `off`; unset, a folder in this build's target
/// folder (`CARGO_TARGET_TMPDIR`).
fn finalize_memo_dir() -> Option<std::path::PathBuf> {
    match std::env::var_os("CUDNN_RS_FINALIZE_MEMO") {
        Some(v) if v == "off" => None,
        Some(v) if !v.is_empty() => Some(v.into()),
        _ => Some(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("finalize-memo")),
    }
}

/// Turn on the finalize memo (`cudnn::graph::enable_finalize_memo`): a plan
/// this tier finalized before, in any run, from the same input (everything
/// cuDNN was given, in the same environment), is loaded from cuDNN's JSON of
/// it instead of compiled again. `CUDNN_RS_FINALIZE_MEMO=off` turns it off.
pub fn enable_finalize_memo() {
    if let Some(dir) = finalize_memo_dir() {
        // SAFETY: the folder is this build's own (in its target folder) or
        // one named for the memo alone: only the memo writes there.
        unsafe { cudnn::graph::enable_finalize_memo(&dir) };
    }
}

/// What the finalize memo did in this process, on stderr (nothing when it
/// is off or nothing was finalized); whether every plan finalized passed
/// the crate's own loader's check (the memo stores only those: a plan the
/// crate builds and cannot reload is a failure of the run).
fn report_finalize_memo() -> bool {
    let s = cudnn::graph::finalize_memo_stats();
    if let Some(off) = &s.off {
        eprintln!("finalize memo: off ({off})");
    } else if let Some(folder) = &s.folder {
        eprintln!(
            "finalize memo: {} plans loaded from it, {} compiled and stored, {} without a key, \
             {} bad entries, {} not reloadable for cuDNN's score-subgraph gap (known), \
             {} refused by the crate's loader ({})",
            s.hits,
            s.stored,
            s.unkeyed,
            s.bad,
            s.score_subgraph_gap,
            s.refused,
            folder.display()
        );
        for why in &s.bad_why {
            eprintln!("  bad entry (finalized again): {why}");
        }
    }
    for why in &s.refused_why {
        eprintln!("  FAILED: a plan this run built does not reload: {why}");
    }
    s.refused == 0
}

fn register(name: &'static str, main: fn()) {
    *MODULE.lock().unwrap_or_else(|e| e.into_inner()) = name;
    main();
    *MODULE.lock().unwrap_or_else(|e| e.into_inner()) = "";
}

/// `ensure!(cond, "message {}", x)` for tests.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        {
            let ok: bool = $cond;
            if !ok {
                return Err(format!($($fmt)+).into());
            }
        }
    };
}

/// Without feature `nccl`: the module's one visibly ignored trial
/// (`trial`), the reason on stderr naming `what`.
pub fn nccl_missing(what: &str, trial_name: &str) {
    eprintln!("skipped: {what}: cudnn was built without feature `nccl`");
    run(vec![trial(trial_name, || Ok(())).with_ignored_flag(true)]);
}

/// The `main` of a module that needs feature `nccl`: without it, one visibly
/// ignored trial ([`nccl_missing`]); with it, `imp::main()`. `skip` writes
/// only the first, for a module with its own `main` under `nccl`.
#[macro_export]
macro_rules! nccl_main {
    (skip $what:literal, $trial:literal) => {
        #[cfg(not(feature = "nccl"))]
        pub fn main() {
            $crate::support::nccl_missing($what, $trial);
        }
    };
    ($what:literal, $trial:literal) => {
        $crate::nccl_main!(skip $what, $trial);

        #[cfg(feature = "nccl")]
        pub fn main() {
            imp::main()
        }
    };
}

/// The fuzz seed: `PROPTEST_RNG_SEED` where set to a number, else `default`.
pub fn fuzz_seed(default: u64) -> u64 {
    std::env::var("PROPTEST_RNG_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The `CUDNN_RS_FUZZ_CASES` multiplier of every fuzz family's case count
/// (1 when unset or not a number, at least 1).
pub fn fuzz_scale() -> usize {
    std::env::var("CUDNN_RS_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(1)
        .max(1)
}

/// `n` cases times [`fuzz_scale`] (saturating).
pub fn fuzz_cases(n: u32) -> u32 {
    n.saturating_mul(u32::try_from(fuzz_scale()).unwrap_or(u32::MAX))
}

/// One SplitMix64 step (public-domain constants): reproducible random
/// numbers without a dependency.
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `got` has as many values as `want`.
pub fn same_len<T>(what: &str, got: &[T], want: &[T]) -> TestResult {
    ensure!(
        got.len() == want.len(),
        "{what}: length {} vs {}",
        got.len(),
        want.len()
    );
    Ok(())
}

/// Element-wise `|got - want| <= tol * max(1, |want|)`, naming the first
/// element that is not; NaN never passes, and an infinite `want` passes
/// only an equal `got` (the bound would be infinite).
pub fn close_each(what: &str, got: &[f64], want: &[f64], tol: f64) -> TestResult {
    same_len(what, got, want)?;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_finite() {
            (g - w).abs() <= tol * w.abs().max(1.0)
        } else {
            g == w
        };
        ensure!(ok, "{what}[{i}]: got {g}, want {w} (tol {tol})");
    }
    Ok(())
}

/// A proptest runner for `cases` cases with no failure persistence (the
/// default seed and settings otherwise).
pub fn prop_runner(cases: u32) -> proptest::test_runner::TestRunner {
    proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        cases,
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    })
}

/// Whether to skip a test that asserts the no-device behaviour (a device is
/// present); says so on stderr.
pub fn skip_if_gpu(what: &str) -> bool {
    if has_gpu() {
        eprintln!(
            "skipped: {what}: a CUDA device is present (this asserts the no-device behaviour)"
        );
        return true;
    }
    false
}

/// `n` deterministic values in `[-1, 1]` from a 64-bit LCG seeded with
/// `seed` (the high 31 bits of each state).
pub fn lcg_values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) as f64 / (1u64 << 31) as f64) * 2.0 - 1.0
        })
        .collect()
}

/// A tier binary's `main`: the modules of `mods` and of `cudarc` (declared
/// in main.rs with `mod` lines; a `cudarc` one is `#[cfg(feature =
/// "cudarc")]` there, and this makes its stub without the feature, whose
/// one ignored trial says so) run through [`run_modules`], a process started
/// with one of the `children` variables set running only its module.
#[macro_export]
macro_rules! tier_main {
    (
        mods: [$($m:ident),* $(,)?],
        cudarc: [$($c:ident),* $(,)?],
        children: [$(($var:expr, $owner:literal)),* $(,)?]
        $(, finalize_memo: $memo:literal)? $(,)?
    ) => {
        // The modules are declared in main.rs itself (`mod x;` lines), where
        // rustfmt finds their files: it does not expand macros.
        $(
            #[cfg(not(feature = "cudarc"))]
            mod $c {
                pub fn main() {
                    $crate::support::skipped("cudarc", "cudnn was built without feature `cudarc`");
                }
            }
        )*

        fn main() {
            $(if $memo {
                $crate::support::enable_finalize_memo();
            })?
            let modules: &[$crate::support::Module] =
                &[$((stringify!($m), $m::main),)* $((stringify!($c), $c::main),)*];
            // The variables that start a process as one module's child (it
            // runs only that module).
            let children: &[(&str, &'static str)] = &[$(($var, $owner)),*];
            $crate::support::run_modules(modules, children)
        }
    };
}

/// Every activation mode, the parametrised ones with a value each.
pub const ACTIVATION_MODES: [cudnn::dnn::ActivationMode; 7] = [
    cudnn::dnn::ActivationMode::Relu,
    cudnn::dnn::ActivationMode::Sigmoid,
    cudnn::dnn::ActivationMode::Tanh,
    cudnn::dnn::ActivationMode::ClippedRelu { ceiling: 2.0 },
    cudnn::dnn::ActivationMode::Elu { alpha: 0.7 },
    cudnn::dnn::ActivationMode::Swish { beta: 1.5 },
    cudnn::dnn::ActivationMode::Identity,
];
