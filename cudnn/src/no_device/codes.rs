//! The codes that mean "no usable device", and the crate's words for each.
//! A leaf (nothing of the crate's): the error and status mapping use it.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set once the crate loaded its planning stub as the process's driver.
static STUB_DRIVER: AtomicBool = AtomicBool::new(false);

/// The planning stub is now the process's driver (`graph::driver` says so
/// when it loads it): the reasons for codes 34 and 35 say so.
pub(crate) fn note_stub_driver() {
    STUB_DRIVER.store(true, Ordering::Relaxed);
}

/// CUDA runtime codes (`cudaError_t`) that mean "no usable device here"
/// rather than "this call went wrong".
pub(crate) const RUNTIME_CODES: [u32; 8] = [
    3,   // cudaErrorInitializationError
    34,  // cudaErrorStubLibrary
    35,  // cudaErrorInsufficientDriver
    46,  // cudaErrorDevicesUnavailable
    100, // cudaErrorNoDevice
    802, // cudaErrorSystemNotReady
    803, // cudaErrorSystemDriverMismatch
    804, // cudaErrorCompatNotSupportedOnDevice
];

/// CUDA driver codes (`CUresult`) with that meaning: the runtime's numbers
/// where the driver API has the same condition (it has no 35, and its 3,
/// `CUDA_ERROR_NOT_INITIALIZED`, means `cuInit` was not called).
pub(crate) const DRIVER_CODES: [u32; 6] = [
    34,  // CUDA_ERROR_STUB_LIBRARY
    46,  // CUDA_ERROR_DEVICE_UNAVAILABLE
    100, // CUDA_ERROR_NO_DEVICE
    802, // CUDA_ERROR_SYSTEM_NOT_READY
    803, // CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
    804, // CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE
];

/// What `CUDA_VISIBLE_DEVICES` says, for the reasons below.
pub(super) fn visible_devices() -> String {
    match std::env::var("CUDA_VISIBLE_DEVICES") {
        Ok(v) => format!("CUDA_VISIBLE_DEVICES is {v:?}"),
        Err(_) => "CUDA_VISIBLE_DEVICES is not set".to_string(),
    }
}

/// The crate's own words for a no-device code (runtime or driver numbering,
/// which agree on every code of [`DRIVER_CODES`]): what is missing and what
/// would fix it.
pub(crate) fn reason_for(code: u32) -> String {
    if matches!(code, 34 | 35) && STUB_DRIVER.load(Ordering::Relaxed) {
        return "the only CUDA driver in this process is cudnn-rs's planning stub (loaded to \
                plan graphs because no NVIDIA driver opened): nothing can run on a GPU here; \
                install the NVIDIA driver"
            .to_string();
    }
    match code {
        3 => "the CUDA driver could not be initialised; check that the NVIDIA kernel module is \
              loaded (`nvidia-smi` runs)"
            .to_string(),
        34 => "the CUDA driver library in this process is a stub, not NVIDIA's driver: \
               nothing can run on a GPU (cudnn-rs loads its own stub to plan graphs when no \
               driver is installed; a toolkit's build-time `stubs` folder on LD_LIBRARY_PATH \
               does the same); install the NVIDIA driver, or remove the `stubs` folder from \
               LD_LIBRARY_PATH"
            .to_string(),
        35 => "the NVIDIA driver (libcuda.so.1) is missing or older than the loaded CUDA runtime \
               needs; install or update the driver (`nvidia-smi` prints its version), or load an \
               older CUDA stack with CUDNN_RS_SEARCH_PATH"
            .to_string(),
        46 => "every CUDA device is busy or unavailable (exclusive or prohibited compute mode); \
               see `nvidia-smi -q -d COMPUTE`"
            .to_string(),
        100 => format!(
            "the NVIDIA driver is loaded but reports no CUDA device ({}); check `nvidia-smi`",
            visible_devices()
        ),
        802 => "the system is not ready for CUDA yet (on NVSwitch systems, start the fabric \
                manager)"
            .to_string(),
        803 => "the NVIDIA driver's user-mode library does not match its kernel module; reload \
                the module or reboot after a driver update"
            .to_string(),
        804 => "the CUDA forward-compatibility libraries in use do not support this device; \
                remove them (the `compat` directory) from LD_LIBRARY_PATH"
            .to_string(),
        _ => format!("CUDA reported code {code}"),
    }
}

/// Whether a runtime code means "no usable device".
pub(crate) fn runtime_code(code: u32) -> bool {
    RUNTIME_CODES.contains(&code)
}

/// Whether a driver code means "no usable device".
pub(crate) fn driver_code(code: u32) -> bool {
    DRIVER_CODES.contains(&code)
}
