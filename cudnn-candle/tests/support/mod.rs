//! Shared by the test binaries (libtest-mimic): a test that cannot run here
//! is reported *ignored*, with the reason on stderr, never passed.
//! `CUDNN_RS_REQUIRE_LIBS=1` turns missing libraries into failures,
//! `CUDNN_RS_REQUIRE_GPU=1` a missing GPU.
#![allow(dead_code)]

use libtest_mimic::{Arguments, Failed, Trial};

pub type TestResult = Result<(), Failed>;

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
    f: impl FnOnce() -> TestResult + Send + 'static,
) -> Trial {
    let name = name.to_string();
    match why {
        None => Trial::test(name, f),
        Some(why) if flag(require) => Trial::test(name, move || {
            Err(format!("{require}=1 but it cannot run: {why}").into())
        }),
        Some(why) => {
            eprintln!("SKIPPED {name}: {why}");
            Trial::test(name, f).with_ignored_flag(true)
        }
    }
}

/// Needs the cuDNN libraries (no device).
pub fn host(name: &str, f: impl FnOnce() -> TestResult + Send + 'static) -> Trial {
    gated(name, libs_missing(), "CUDNN_RS_REQUIRE_LIBS", f)
}

/// Needs a GPU.
pub fn gpu(name: &str, f: impl FnOnce() -> TestResult + Send + 'static) -> Trial {
    gated(name, gpu_missing(), "CUDNN_RS_REQUIRE_GPU", f)
}

/// Needs nothing.
pub fn unit(name: &str, f: impl FnOnce() -> TestResult + Send + 'static) -> Trial {
    Trial::test(name, f)
}

pub fn run(trials: Vec<Trial>) {
    libtest_mimic::run(&Arguments::from_args(), trials).exit();
}

/// The typed error inside a candle error, if any.
pub fn typed(e: &candle_core::Error) -> Option<&cudnn::Error> {
    match e {
        candle_core::Error::Cuda(b) => b.downcast_ref::<cudnn::Error>(),
        candle_core::Error::WithBacktrace { inner, .. } => typed(inner),
        _ => None,
    }
}
