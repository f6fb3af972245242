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
        return Trial::test(format!("host::{name}"), f).with_ignored_flag(true);
    }
    host(name, f)
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
    Trial::test(format!("unit::{name}"), f)
}

fn tiered(
    name: String,
    missing: Option<String>,
    require: &'static str,
    f: impl FnOnce() -> TestResult + Send + 'static,
) -> Trial {
    match missing {
        None => Trial::test(name, f),
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

/// Run the trials; exits the process with the harness's status.
pub fn run(trials: Vec<Trial>) -> ! {
    let args = Arguments::from_args();
    libtest_mimic::run(&args, trials).exit()
}

/// `ensure!(cond, "message {}", x)` for tests.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+).into());
        }
    };
}
