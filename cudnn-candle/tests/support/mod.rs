//! Shared by the test binaries (`harness = false`): a small runner, so a
//! test that cannot run here is reported *ignored*, with the reason on
//! stderr, never passed. `CUDNN_RS_REQUIRE_LIBS=1` turns missing libraries
//! into failures, `CUDNN_RS_REQUIRE_GPU=1` a missing GPU.
//!
//! Not libtest-mimic: its `clap` derive changes the features of the build
//! tools candle's kernel build uses, which made cargo build candle's CUDA
//! kernels twice (once for the library and docs, once for the tests).
#![allow(dead_code)]

use std::panic::{AssertUnwindSafe, catch_unwind};

pub type Failed = Box<dyn std::error::Error>;
pub type TestResult = Result<(), Failed>;

/// One test: its name, why it cannot run here (if it cannot), its body.
pub struct Trial {
    name: String,
    skip: Option<String>,
    f: Box<dyn FnOnce() -> TestResult>,
}

fn flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == "1" || v == "true")
}

/// Why the cuDNN libraries cannot be used here, if they cannot.
pub fn libs_missing() -> Option<String> {
    let mut missing = Vec::new();
    if let Err(e) = cudnn::sys::cudart::load() {
        missing.push(e.to_string());
    }
    if let Err(e) = cudnn::sys::cudnn::load() {
        missing.push(e.to_string());
    }
    (!missing.is_empty()).then(|| missing.join("\n"))
}

/// Why there is no GPU for candle here, if there is none.
pub fn gpu_missing() -> Option<String> {
    if let Some(m) = libs_missing() {
        return Some(format!("libraries missing:\n{m}"));
    }
    match candle_core::Device::new_cuda(0) {
        Ok(_) => None,
        // The first line (candle's error may carry a backtrace).
        Err(e) => Some(format!(
            "no CUDA device for candle: {}",
            e.to_string().lines().next().unwrap_or("")
        )),
    }
}

fn gated(
    name: &str,
    why: Option<String>,
    require: &'static str,
    f: impl FnOnce() -> TestResult + 'static,
) -> Trial {
    match why {
        Some(why) if flag(require) => Trial {
            name: name.to_string(),
            skip: None,
            f: Box::new(move || Err(format!("{require}=1 but it cannot run: {why}").into())),
        },
        skip => Trial {
            name: name.to_string(),
            skip,
            f: Box::new(f),
        },
    }
}

/// Needs the cuDNN libraries (no device).
pub fn host(name: &str, f: impl FnOnce() -> TestResult + 'static) -> Trial {
    gated(name, libs_missing(), "CUDNN_RS_REQUIRE_LIBS", f)
}

/// Needs a GPU.
pub fn gpu(name: &str, f: impl FnOnce() -> TestResult + 'static) -> Trial {
    gated(name, gpu_missing(), "CUDNN_RS_REQUIRE_GPU", f)
}

/// Needs nothing.
pub fn unit(name: &str, f: impl FnOnce() -> TestResult + 'static) -> Trial {
    gated(name, None, "", f)
}

/// libtest's options that take a value (the value is not the filter).
const VALUED: [&str; 6] = [
    "--test-threads",
    "--format",
    "--color",
    "--logfile",
    "--shuffle-seed",
    "-Z",
];

/// The first free argument (the filter) and the values of `--skip NAME`
/// (repeatable) of `args` (the program's name first).
pub fn filter_and_skips(args: &[String]) -> (String, Vec<String>) {
    let (mut filter, mut skips) = (None, Vec::new());
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        if a == "--skip" {
            skips.extend(it.next().cloned());
        } else if VALUED.contains(&a.as_str()) {
            it.next();
        } else if !a.starts_with('-') && filter.is_none() {
            filter = Some(a.clone());
        }
    }
    (filter.unwrap_or_default(), skips)
}

/// Run the trials whose name contains the first free argument (all
/// without one) and none of the `--skip NAME` values, one after the
/// other; exit 1 when one failed, or when a filter was given and no
/// trial's name contains it (a misspelt or renamed trial must not pass).
pub fn run(trials: Vec<Trial>) {
    let args: Vec<String> = std::env::args().collect();
    let code = run_with(&args, trials, &mut std::io::stdout());
    if code != 0 {
        std::process::exit(code);
    }
}

/// [`run`] on `args`, its lines to `out`: the exit code.
pub fn run_with(args: &[String], trials: Vec<Trial>, out: &mut dyn std::io::Write) -> i32 {
    // A line that cannot be written is no verdict: the exit code is.
    let mut say = |line: String| {
        let _ = writeln!(out, "{line}");
    };
    let (filter, skips) = filter_and_skips(args);
    if !filter.is_empty() && !trials.iter().any(|t| t.name.contains(&filter)) {
        say(format!(
            "\ntest result: FAILED. the filter {filter:?} matches none of the {} trials",
            trials.len()
        ));
        return 1;
    }
    let (mut passed, mut failed, mut ignored) = (0, Vec::new(), 0);
    let chosen = |t: &Trial| t.name.contains(&filter) && !skips.iter().any(|s| t.name.contains(s));
    for t in trials.into_iter().filter(chosen) {
        if let Some(why) = &t.skip {
            eprintln!("SKIPPED {}: {why}", t.name);
            say(format!("test {} ... ignored", t.name));
            ignored += 1;
            continue;
        }
        let r = catch_unwind(AssertUnwindSafe(t.f));
        match r {
            Ok(Ok(())) => {
                say(format!("test {} ... ok", t.name));
                passed += 1;
            }
            Ok(Err(e)) => {
                say(format!("test {} ... FAILED: {e}", t.name));
                failed.push(t.name);
            }
            Err(_) => {
                say(format!("test {} ... FAILED (panicked)", t.name));
                failed.push(t.name);
            }
        }
    }
    say(format!(
        "\ntest result: {}. {passed} passed; {} failed; {ignored} ignored",
        if failed.is_empty() { "ok" } else { "FAILED" },
        failed.len()
    ));
    if failed.is_empty() {
        0
    } else {
        say(format!("failures: {failed:?}"));
        1
    }
}

/// The typed error inside a candle error, if any.
pub fn typed(e: &candle_core::Error) -> Option<&cudnn::Error> {
    match e {
        candle_core::Error::Cuda(b) => b.downcast_ref::<cudnn::Error>(),
        candle_core::Error::WithBacktrace { inner, .. } => typed(inner),
        _ => None,
    }
}
