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

/// The first free argument (the filter) and the values of `--skip NAME`
/// (repeatable) of `args` (the program's name first).
pub fn filter_and_skips(args: &[String]) -> (String, Vec<String>) {
    let (mut filter, mut skips) = (None, Vec::new());
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        if a == "--skip" {
            skips.extend(it.next().cloned());
        } else if !a.starts_with('-') && filter.is_none() {
            filter = Some(a.clone());
        }
    }
    (filter.unwrap_or_default(), skips)
}

/// Run the trials whose name contains the first free argument (all
/// without one) and none of the `--skip NAME` values, one after the
/// other; exit 1 when one failed.
pub fn run(trials: Vec<Trial>) {
    let args: Vec<String> = std::env::args().collect();
    let (filter, skips) = filter_and_skips(&args);
    let (mut passed, mut failed, mut ignored) = (0, Vec::new(), 0);
    let chosen = |t: &Trial| t.name.contains(&filter) && !skips.iter().any(|s| t.name.contains(s));
    for t in trials.into_iter().filter(chosen) {
        if let Some(why) = &t.skip {
            eprintln!("SKIPPED {}: {why}", t.name);
            println!("test {} ... ignored", t.name);
            ignored += 1;
            continue;
        }
        let r = catch_unwind(AssertUnwindSafe(t.f));
        match r {
            Ok(Ok(())) => {
                println!("test {} ... ok", t.name);
                passed += 1;
            }
            Ok(Err(e)) => {
                println!("test {} ... FAILED: {e}", t.name);
                failed.push(t.name);
            }
            Err(_) => {
                println!("test {} ... FAILED (panicked)", t.name);
                failed.push(t.name);
            }
        }
    }
    println!(
        "\ntest result: {}. {passed} passed; {} failed; {ignored} ignored",
        if failed.is_empty() { "ok" } else { "FAILED" },
        failed.len()
    );
    if !failed.is_empty() {
        println!("failures: {failed:?}");
        std::process::exit(1);
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
