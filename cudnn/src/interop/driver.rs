//! Reaching the CUDA driver through cudarc without a panic.
//!
//! cudarc (dynamic loading) opens `libcuda` on its first driver call and
//! *panics* when no candidate opens ("Unable to dynamically load the \"cuda\"
//! shared library"), and again on every later call; a symbol the loaded
//! driver lacks panics too ("Missing symbol ..."). Its
//! `driver::sys::is_culib_present` exists only in its dynamic-loading mode,
//! which a framework may have replaced with linking. So this module probes
//! the driver itself first ([`probe_driver`]), and runs the cudarc calls it
//! makes on a caller's behalf inside `catch_unwind` (with `panic = "abort"`
//! a panic cannot be caught: the probe is then the only guard).

use std::ffi::c_int;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;

use ::cudarc::driver::{CudaContext, DriverError};

use crate::error::{Error, Result};
use crate::runtime::Device;

/// The device of a cudarc context as this crate's [`Device`].
///
/// # Errors
/// [`Error::InvalidArgument`] when the ordinal does not fit a C `int`.
pub(crate) fn device_of(ctx: &CudaContext) -> Result<Device> {
    let ordinal = ctx.ordinal();
    let o = c_int::try_from(ordinal)
        .map_err(|_| Error::invalid("cudarc context ordinal", "must fit in a C int", ordinal))?;
    Ok(Device::from_runtime(o))
}

/// The file names this probe opens, in order: the driver's soname, then the
/// development link name (cudarc's list on Linux includes both).
const DRIVER_NAMES: [&str; 2] = ["libcuda.so.1", "libcuda.so"];

/// The symbol only the project's planning stub exports (see
/// `graph::driver`): a process that loaded it has no real driver, and
/// cudarc, which opens `libcuda.so.1` by name, would get the stub.
const STUB_SYMBOL: &[u8] = b"cudnn_rs_driver_stub\0";

/// Check that a real NVIDIA driver library loads in this process, before
/// anything calls cudarc (which panics when it does not).
///
/// # Errors
/// [`Error::NoDevice`] naming the files tried and the loader's words when
/// none opens, or saying that only this crate's planning stub is loaded.
pub fn probe_driver() -> Result<()> {
    let mut tried = Vec::with_capacity(DRIVER_NAMES.len());
    for name in DRIVER_NAMES {
        // SAFETY: opening the system's driver library runs its initialisers,
        // which is what cudarc (and cuDNN) do when they load it.
        match unsafe { libloading::Library::new(name) } {
            Ok(lib) => {
                // SAFETY: only the symbol's presence is read; it is never
                // called through this typed pointer.
                let stub = unsafe { lib.get::<*const u8>(STUB_SYMBOL) }.is_ok();
                if stub {
                    return Err(Error::NoDevice {
                        reason: format!(
                            "`{name}` is the cudnn-rs planning stub (no NVIDIA driver in this \
                             process): cudarc cannot run on it; install the NVIDIA driver"
                        ),
                        detail: None,
                    });
                }
                return Ok(());
            }
            Err(e) => {
                let why = std::error::Error::source(&e)
                    .map(|s| format!("{e}: {s}"))
                    .unwrap_or_else(|| e.to_string());
                tried.push(format!("{name}: {why}"));
            }
        }
    }
    Err(Error::NoDevice {
        reason: "the NVIDIA driver library (libcuda.so.1) does not load, so cudarc cannot \
                 start; install the NVIDIA driver"
            .to_string(),
        detail: Some(format!("tried {}", tried.join("; "))),
    })
}

/// A cudarc [`DriverError`] as this crate's [`Error::Driver`], naming
/// `call` ([`Error::is_no_device`] is true for the codes that mean no usable
/// device, such as `CUDA_ERROR_NO_DEVICE`). The name and text come from the driver (`cuGetErrorName`,
/// `cuGetErrorString`) when it loads; without one (an error value made by
/// hand: cudarc would panic asking) they read "unknown".
pub fn driver_error(call: &'static str, e: DriverError) -> Error {
    let (name, text) = if probe_driver().is_ok() {
        let text_of = |r: std::result::Result<&std::ffi::CStr, DriverError>| {
            r.map(|s| s.to_string_lossy().into_owned()).ok()
        };
        (
            guarded_opt(|| text_of(e.error_name())),
            guarded_opt(|| text_of(e.error_string())),
        )
    } else {
        (None, None)
    };
    let name = name.unwrap_or_else(|| "unknown".to_string());
    let text = text.unwrap_or_else(|| "no description (no driver to ask)".to_string());
    Error::Driver {
        call,
        code: e.0 as u32,
        name,
        text,
        context: None,
    }
}

/// Run a cudarc lookup that may panic (a symbol missing): `None` then.
fn guarded_opt<R>(f: impl FnOnce() -> Option<R>) -> Option<R> {
    panic::catch_unwind(AssertUnwindSafe(f)).ok().flatten()
}

/// Run a cudarc call that may panic (library or symbol missing), turning a
/// panic into [`Error::NoDevice`] with cudarc's message and a
/// [`DriverError`] into [`Error::Driver`] ([`Error::NoDevice`] for the codes
/// that mean no usable device).
pub(crate) fn guarded<R>(
    call: &'static str,
    f: impl FnOnce() -> std::result::Result<R, DriverError>,
) -> Result<R> {
    match panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(r)) => Ok(r),
        // The crate's own entry points report "no usable device" typed.
        Ok(Err(e)) => Err(match driver_error(call, e) {
            Error::Driver {
                call,
                code,
                name,
                text,
                ..
            } if crate::no_device::driver_no_device(call, code) => Error::NoDevice {
                reason: crate::no_device::reason_for(code),
                detail: Some(format!("{call} returned {code} ({name}: {text})")),
            },
            other => other,
        }),
        Err(payload) => {
            let msg = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            Err(Error::NoDevice {
                reason: format!(
                    "cudarc could not reach the CUDA driver in {call} (a library or symbol is \
                     missing); install or update the NVIDIA driver"
                ),
                detail: Some(format!("cudarc panicked: {msg}")),
            })
        }
    }
}

/// The primary context of device `ordinal` through cudarc
/// (`CudaContext::new`), after [`probe_driver`]: a typed error where cudarc
/// itself would panic (no driver).
///
/// # Errors
/// [`Error::InvalidArgument`] for an ordinal above `i32::MAX` (cudarc casts
/// it to the driver's `int` with `as`: `1 << 32` would open device 0 and
/// label it 4294967296), checked before anything loads;
/// [`Error::NoDevice`] (no driver, or cudarc panicked), [`Error::Driver`]
/// (no such device, driver refused).
pub fn context(ordinal: usize) -> Result<Arc<CudaContext>> {
    if i32::try_from(ordinal).is_err() {
        return Err(Error::invalid(
            "ordinal",
            "must fit the driver's device number (a C int)",
            ordinal,
        ));
    }
    probe_driver()?;
    guarded("cudarc CudaContext::new", || CudaContext::new(ordinal))
}

/// The number of devices the driver sees (`cuDeviceGetCount` through
/// cudarc), after [`probe_driver`].
///
/// # Errors
/// As [`context`].
pub fn device_count() -> Result<usize> {
    probe_driver()?;
    guarded("cudarc CudaContext::device_count", || {
        ::cudarc::driver::result::init()?;
        CudaContext::device_count()
    })
    .map(|n| usize::try_from(n).unwrap_or(0))
}
