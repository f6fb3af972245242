//! The cudarc interop where no GPU is needed (host tier: the driver library
//! is what matters here). cudarc itself panics when `libcuda` does not load;
//! `cudnn::interop` must return typed errors instead, with or without the
//! crate's planning stub in the process.

use crate::support;

use std::panic;
use std::time::{Duration, Instant};

use cudnn::Error;
use cudnn::interop;
use proptest::prelude::*;
use support::*;

pub fn main() {
    run(vec![
        // Asserts what the first look at the driver in a process finds.
        isolated(unit("cudarc_no_driver_is_a_typed_error", no_driver)),
        unit("cudarc_fuzz_context_ordinals", fuzz_ordinals),
        unit("cudarc_driver_errors_never_panic", driver_errors),
    ])
}

/// Whether `e` is one of the kinds the interop's driver entry points return.
fn typed(e: &Error) -> bool {
    matches!(
        e,
        Error::NoDevice { .. } | Error::Driver { .. } | Error::InvalidArgument { .. }
    )
}

fn no_driver() -> TestResult {
    match interop::probe_driver() {
        Ok(()) => {
            // A real driver: the no-driver path cannot be shown here; the
            // entry points must still answer without a panic.
            let n = interop::device_count();
            ensure!(
                n.as_ref().is_ok_and(|n| *n > 0) || n.as_ref().is_err_and(typed),
                "device_count with a driver: {n:?}"
            );
            eprintln!("note: a real libcuda loads here; the no-driver checks did not run");
            return Ok(());
        }
        Err(Error::NoDevice { reason, .. }) => ensure!(
            reason.contains("libcuda.so.1") && reason.contains("does not load"),
            "the probe's reason names the file: {reason}"
        ),
        Err(e) => return Err(format!("probe: unexpected error kind {e:?}").into()),
    }
    let c = interop::context(0);
    ensure!(
        matches!(c, Err(Error::NoDevice { .. })),
        "context(0) without a driver: {:?}",
        c.map(|_| ())
    );
    let n = interop::device_count();
    ensure!(
        matches!(n, Err(Error::NoDevice { .. })),
        "device_count without a driver: {n:?}"
    );
    // The independent truth that the guard is needed: cudarc's own call
    // panics here (its loader's "Unable to dynamically load").
    let hook = panic::take_hook();
    panic::set_hook(Box::new(|_| {}));
    let raw = panic::catch_unwind(|| interop::cudarc::driver::CudaContext::new(0).map(|_| ()));
    panic::set_hook(hook);
    ensure!(
        raw.is_err(),
        "cudarc's CudaContext::new was expected to panic without libcuda, got {raw:?}"
    );

    // Now with the crate's planning stub loaded (what planning a graph does
    // with no driver): cudarc would open it by its soname; the probe knows it.
    match cudnn::graph::driver::ensure() {
        Ok(cudnn::graph::driver::Driver::Stub(_)) => {
            let p = interop::probe_driver();
            ensure!(
                matches!(&p, Err(Error::NoDevice { reason, .. }) if reason.contains("planning stub")),
                "probe with the stub loaded: {p:?}"
            );
            let c = interop::context(0);
            ensure!(
                matches!(c, Err(Error::NoDevice { .. })),
                "context(0) with the stub: {:?}",
                c.map(|_| ())
            );
            eprintln!(
                "stub case run: {}",
                p.err().map(|e| e.to_string()).unwrap_or_default()
            );
        }
        Ok(cudnn::graph::driver::Driver::Real) => {
            return Err("a real driver opened after the probe found none".into());
        }
        other => {
            eprintln!("note: the planning stub is not available ({other:?}); stub case not run")
        }
    }
    Ok(())
}

fn fuzz_ordinals() -> TestResult {
    let start = Instant::now();
    let mut runner = crate::support::prop_runner(64);
    let strategy = prop_oneof![
        Just(0usize),
        Just(1usize),
        Just(i32::MAX as usize),
        Just(i32::MAX as usize + 1),
        Just(1usize << 32),
        Just(usize::MAX),
        any::<usize>(),
        0usize..64,
    ];
    runner
        .run(&strategy, |ordinal| {
            let t = Instant::now();
            match interop::context(ordinal) {
                Ok(ctx) => prop_assert_eq!(ctx.ordinal(), ordinal),
                Err(e) => prop_assert!(typed(&e), "ordinal {}: {:?}", ordinal, e),
            }
            // cudarc casts the ordinal to `int` with `as` (`1 << 32` opens
            // device 0): refused before any driver call, driver or not.
            if i32::try_from(ordinal).is_err() {
                let r = interop::context(ordinal);
                prop_assert!(
                    matches!(&r, Err(Error::InvalidArgument { .. })),
                    "ordinal {} past a C int: {:?}",
                    ordinal,
                    r.as_ref().map(|c| c.ordinal())
                );
            }
            prop_assert!(
                t.elapsed() < Duration::from_secs(30),
                "ordinal {} took {:?}",
                ordinal,
                t.elapsed()
            );
            Ok(())
        })
        .map_err(|e| format!("{e}"))?;
    ensure!(
        start.elapsed() < Duration::from_secs(120),
        "64 cases took {:?}",
        start.elapsed()
    );
    Ok(())
}

/// `driver_error` on hand-made cudarc errors: the raw code kept, the call
/// named, no panic with or without a driver (cudarc's own `error_name`
/// panics without one).
fn driver_errors() -> TestResult {
    use interop::cudarc::driver::{DriverError, sys::CUresult};
    let has_driver = interop::probe_driver().is_ok();
    for (r, code) in [
        (CUresult::CUDA_ERROR_INVALID_VALUE, 1u32),
        (CUresult::CUDA_ERROR_NOT_INITIALIZED, 3),
        (CUresult::CUDA_ERROR_NO_DEVICE, 100),
        (CUresult::CUDA_ERROR_INVALID_HANDLE, 400),
        (CUresult::CUDA_ERROR_UNKNOWN, 999),
    ] {
        match interop::driver_error("cuTest", DriverError(r)) {
            Error::Driver {
                call,
                code: c,
                name,
                ..
            } => {
                ensure!(call == "cuTest" && c == code, "{call} {c} for {code}");
                ensure!(
                    has_driver || name == "unknown",
                    "without a driver the name is unknown, got {name}"
                );
                if has_driver {
                    ensure!(name.starts_with("CUDA_ERROR_"), "driver's name {name}");
                }
            }
            other => return Err(format!("not a Driver error: {other:?}").into()),
        }
    }
    Ok(())
}
