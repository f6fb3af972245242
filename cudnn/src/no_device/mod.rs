//! "There is no usable CUDA device here", as one typed error.
//!
//! Every entry point that needs a device reports the absence of one as
//! [`Error::NoDevice`]: the CUDA runtime's own "no driver / no device /
//! insufficient driver / stub driver" codes are mapped where they arise
//! (`check::cuda_status`), and libraries that only say
//! `NOT_INITIALIZED` (cuDNN's and cuBLAS's handle creation, cuDNN's
//! device-properties descriptor, NCCL's initialisation) are explained by
//! asking the runtime, after the failure, whether it sees a device
//! ([`explain`]). The reason is ours (what is missing and what would fix
//! it); the library's code and text follow as the secondary `detail`.

use std::ffi::c_int;

use codes::visible_devices;

use crate::error::Error;

#[cfg(feature = "graph")]
pub(crate) use codes::note_stub_driver;
#[cfg(test)]
use codes::{DRIVER_CODES, InitHistory, RUNTIME_CODES, history_of, runtime_no_device_in};
pub(crate) use codes::{
    driver_no_device, init_error_context, init_history, note_device_count, reason_for,
    runtime_no_device,
};

mod codes;

/// The error for a runtime that answers with a count of 0 devices.
pub(crate) fn zero_devices() -> Error {
    Error::NoDevice {
        reason: format!(
            "the NVIDIA driver is loaded but reports 0 CUDA devices ({}); check `nvidia-smi`",
            visible_devices()
        ),
        detail: Some("cudaGetDeviceCount reported 0 devices".to_string()),
    }
}

/// Ask the CUDA runtime whether it sees a device; `Some` of the no-device
/// error when it does not (a no-device code, or a count of 0), `None` when
/// it does or cannot be asked (its load error is not this question).
pub(crate) fn probe() -> Option<Error> {
    let rt = crate::check::cudart().ok()?;
    let mut n: c_int = 0;
    // SAFETY: `n` is a valid, writable out-pointer for the duration of the call.
    let st = unsafe { rt.cudaGetDeviceCount(&mut n) }.ok()?;
    let r = crate::check::cuda_status(rt, "cudaGetDeviceCount", st);
    if r.is_ok() {
        note_device_count(n);
    }
    match r {
        Err(e) if e.is_no_device() => Some(e),
        Ok(()) if n <= 0 => Some(zero_devices()),
        _ => None,
    }
}

/// `e` as [`Error::NoDevice`] when the runtime, asked now, sees no device:
/// for libraries whose own status cannot tell "no device" apart
/// (`CUDNN_STATUS_NOT_INITIALIZED` from `cudnnCreate`). The reason is the
/// runtime's answer in the crate's words; `e`'s own text is kept in the
/// detail. Any other error is returned unchanged.
pub(crate) fn explain(e: Error) -> Error {
    if e.is_no_device() {
        return e;
    }
    match probe() {
        Some(Error::NoDevice { reason, detail }) => Error::NoDevice {
            reason,
            detail: Some(match detail {
                Some(d) => format!("{e}; {d}"),
                None => e.to_string(),
            }),
        },
        _ => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The codes against the bindings' constants (the runtime's header) and
    /// the driver API's documented numbers.
    #[test]
    fn unit_codes_match_the_headers() {
        use crate::sys::cudart::cudaError as C;
        let named = [
            C::cudaErrorInitializationError,
            C::cudaErrorStubLibrary,
            C::cudaErrorInsufficientDriver,
            C::cudaErrorNoDevice,
            C::cudaErrorSystemNotReady,
            C::cudaErrorSystemDriverMismatch,
            C::cudaErrorCompatNotSupportedOnDevice,
        ];
        assert_eq!(named.map(|c| c.0), RUNTIME_CODES);
        assert_eq!(C::cudaErrorDevicesUnavailable.0, codes::UNAVAILABLE);
        // cuda.h: CUDA_ERROR_STUB_LIBRARY = 34, CUDA_ERROR_NO_DEVICE = 100,
        // CUDA_ERROR_SYSTEM_NOT_READY = 802, CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
        // = 803, CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE = 804 (and
        // CUDA_ERROR_DEVICE_UNAVAILABLE = 46, count calls only).
        assert_eq!(DRIVER_CODES, [34, 100, 802, 803, 804]);
        // Not "no device": an ordinary failure and a lost context.
        for c in [1, 2, 101, 700, 999] {
            assert!(
                !runtime_no_device("cudaTest", c) && !driver_no_device("cuTest", c),
                "{c}"
            );
        }
    }

    /// Code 46 (documented for cudaGetDeviceCount-style "all devices
    /// unavailable" and for one device busy in exclusive-process or
    /// prohibited mode): no device only from a count; `Device::new(1)` on a
    /// host whose GPU 1 is busy gets it from `cudaSetDevice` and must not
    /// read as "no usable device".
    #[test]
    fn unit_code_46_is_no_device_only_from_a_count() {
        for call in ["cudaSetDevice", "cudaMalloc", "cudaStreamCreateWithFlags"] {
            assert!(!cuda_from(call, 46).is_no_device(), "{call}");
        }
        assert!(cuda_from("cudaGetDeviceCount", 46).is_no_device());
        assert!(!driver_no_device("cudarc CudaContext::new", 46));
        assert!(driver_no_device("cudarc CudaContext::device_count", 46));
        assert!(driver_no_device("cuDeviceGetCount", 46));
    }

    /// Code 3 (cudaErrorInitializationError): no device only in a process
    /// that never saw one; a fork()ed child of a process that did is told
    /// why (its parent's id differs from its own), and so is a process that
    /// saw a device itself.
    #[test]
    fn unit_code_3_after_fork_is_not_no_device() {
        assert_eq!(history_of(0, 42), InitHistory::NeverSeen);
        assert_eq!(history_of(42, 42), InitHistory::SeenHere);
        assert_eq!(history_of(41, 42), InitHistory::SeenBeforeFork);
        assert!(runtime_no_device_in(
            "cudaMalloc",
            3,
            InitHistory::NeverSeen
        ));
        for h in [InitHistory::SeenHere, InitHistory::SeenBeforeFork] {
            assert!(!runtime_no_device_in("cudaMalloc", 3, h), "{h:?}");
            assert!(init_error_context(h).is_some(), "{h:?}");
        }
        assert_eq!(init_error_context(InitHistory::NeverSeen), None);
        let fork = init_error_context(InitHistory::SeenBeforeFork).unwrap_or_default();
        assert!(
            fork.contains("fork()") && fork.contains("spawn/exec"),
            "{fork}"
        );
        // The no-device reason names the fork case too (a parent that used
        // CUDA through another library leaves no trace here).
        assert!(reason_for(3).contains("fork()") && reason_for(3).contains("spawn/exec"));
        // The context survives a caller's context.
        let e = Error::Cuda {
            call: "cudaSetDevice",
            code: 3,
            name: "cudaErrorInitializationError".into(),
            text: "initialization error".into(),
            context: Some(fork.to_string()),
        }
        .with_context("device 0");
        let shown = e.to_string();
        assert!(
            shown.contains("fork()") && shown.ends_with("device 0"),
            "{shown}"
        );
    }

    fn cuda_from(call: &'static str, code: u32) -> Error {
        Error::Cuda {
            call,
            code,
            name: "n".into(),
            text: "t".into(),
            context: None,
        }
    }

    fn cuda(code: u32) -> Error {
        Error::Cuda {
            call: "cudaTest",
            code,
            name: "n".into(),
            text: "t".into(),
            context: None,
        }
    }

    fn driver(code: u32) -> Error {
        Error::Driver {
            call: "cuTest",
            code,
            name: "n".into(),
            text: "t".into(),
            context: None,
        }
    }

    /// `is_no_device` on every form, against the documented code lists
    /// (driver_types.h and cuda.h), and the message leads with the reason.
    #[test]
    fn unit_is_no_device_on_every_form() {
        let e = Error::NoDevice {
            reason: "why".into(),
            detail: Some("cudaMalloc returned 35 (x: y)".into()),
        };
        assert!(e.is_no_device());
        assert_eq!(
            e.to_string(),
            "no usable CUDA device: why (detail: cudaMalloc returned 35 (x: y))"
        );
        let e = e.with_context("allocating 4 x f32");
        assert_eq!(
            e.to_string(),
            "no usable CUDA device: why (detail: cudaMalloc returned 35 (x: y); allocating 4 x f32)"
        );
        let bare = Error::NoDevice {
            reason: "why".into(),
            detail: None,
        };
        assert_eq!(bare.to_string(), "no usable CUDA device: why");
        assert!(cuda(35).is_no_device() && cuda(100).is_no_device());
        assert_eq!(
            cuda(3).is_no_device(),
            init_history() == InitHistory::NeverSeen
        );
        assert!(driver(100).is_no_device() && driver(34).is_no_device());
        // The driver's 3 is "cuInit not called", not "no device".
        assert!(!driver(3).is_no_device());
        assert!(!cuda(2).is_no_device() && !cuda(700).is_no_device());
        assert!(!Error::invalid("a", "b", "c").is_no_device());
        assert!(
            !Error::Unsupported {
                what: "x".into(),
                needs: None
            }
            .is_no_device()
        );
    }

    /// An error of another kind passes `explain` unchanged when the runtime
    /// cannot be asked or sees a device; a no-device error is kept as it is.
    #[test]
    fn unit_explain_keeps_no_device_errors() {
        let e = Error::NoDevice {
            reason: "r".into(),
            detail: None,
        };
        assert_eq!(explain(e).to_string(), "no usable CUDA device: r");
        let v = explain(Error::invalid("a", "b", "c"));
        // Either unchanged, or (no device here) explained with the
        // original text in the detail.
        match &v {
            Error::InvalidArgument { .. } => {}
            Error::NoDevice {
                detail: Some(d), ..
            } => assert!(d.starts_with("invalid argument `a`"), "{d}"),
            other => panic!("{other:?}"),
        }
    }

    proptest::proptest! {
        /// Over every code: a runtime or driver error is "no device" exactly
        /// when its code is in the list, and the checked path's mapping is
        /// the same list.
        #[test]
        fn unit_property_codes_decide(code in proptest::prop_oneof![0u32..1100, proptest::num::u32::ANY]) {
            // 3 depends on the process's history (the test above); 46 on the call.
            let runtime = RUNTIME_CODES.contains(&code) && code != 3;
            if code != 3 {
                proptest::prop_assert_eq!(cuda(code).is_no_device(), runtime);
            }
            proptest::prop_assert_eq!(driver(code).is_no_device(), DRIVER_CODES.contains(&code));
            proptest::prop_assert_eq!(
                cuda_from("cudaGetDeviceCount", code).is_no_device(),
                runtime || code == 46 || (code == 3 && init_history() == InitHistory::NeverSeen)
            );
            let r = reason_for(code);
            proptest::prop_assert!(!r.is_empty());
            let e = Error::NoDevice { reason: r.clone(), detail: Some(format!("{code}")) };
            let shown = e.to_string();
            let head = format!("no usable CUDA device: {r}");
            proptest::prop_assert!(shown.starts_with(&head), "{}", shown);
        }
    }

    /// Every reason names a fix, not only the condition.
    #[test]
    fn unit_reasons_say_what_to_do() {
        for c in RUNTIME_CODES.into_iter().chain([codes::UNAVAILABLE]) {
            let r = reason_for(c);
            assert!(
                ["check", "install", "remove", "see", "reload", "start"]
                    .iter()
                    .any(|w| r.contains(w)),
                "{c}: {r}"
            );
        }
        assert!(reason_for(35).contains("driver"));
        assert!(reason_for(100).contains("CUDA_VISIBLE_DEVICES"));
    }
}
