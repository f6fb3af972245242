//! The codes that mean "no usable device", and the crate's words for each.
//! A leaf (nothing of the crate's): the error and status mapping use it.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Set once the crate loaded its planning stub as the process's driver.
static STUB_DRIVER: AtomicBool = AtomicBool::new(false);

/// The id of the process that last saw a device count above 0 (0: none
/// seen). A `fork()`ed child inherits it with its parent's id, which is
/// how it knows that CUDA was initialised before the fork.
static DEVICE_SEEN_BY: AtomicU32 = AtomicU32::new(0);

/// The planning stub is now the process's driver (`graph::driver` says so
/// when it loads it): the reasons for codes 34 and 35 say so.
#[cfg(feature = "graph")]
pub(crate) fn note_stub_driver() {
    STUB_DRIVER.store(true, Ordering::Relaxed);
}

/// A device count was read: a count above 0 is remembered (see
/// [`init_history`]).
pub(crate) fn note_device_count(n: std::ffi::c_int) {
    if n > 0 {
        DEVICE_SEEN_BY.store(std::process::id(), Ordering::Relaxed);
    }
}

/// What this process knows about CUDA having worked before, for the
/// runtime's code 3 (`cudaErrorInitializationError`), which a `fork()`ed
/// child of a process that had initialised CUDA gets from every call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InitHistory {
    /// No device was ever seen (by this crate, here or in a parent).
    NeverSeen,
    /// This process saw a device earlier.
    SeenHere,
    /// The parent this process was `fork()`ed from saw a device.
    SeenBeforeFork,
}

/// [`InitHistory`] from the remembered process id and the current one.
pub(crate) fn history_of(seen_by: u32, me: u32) -> InitHistory {
    match seen_by {
        0 => InitHistory::NeverSeen,
        p if p == me => InitHistory::SeenHere,
        _ => InitHistory::SeenBeforeFork,
    }
}

/// This process's [`InitHistory`].
pub(crate) fn init_history() -> InitHistory {
    history_of(DEVICE_SEEN_BY.load(Ordering::Relaxed), std::process::id())
}

/// CUDA runtime codes (`cudaError_t`) that mean "no usable device here"
/// from any call, rather than "this call went wrong". Code 3 only while no
/// device was ever seen ([`runtime_no_device`]).
pub(crate) const RUNTIME_CODES: [u32; 7] = [
    3,   // cudaErrorInitializationError
    34,  // cudaErrorStubLibrary
    35,  // cudaErrorInsufficientDriver
    100, // cudaErrorNoDevice
    802, // cudaErrorSystemNotReady
    803, // cudaErrorSystemDriverMismatch
    804, // cudaErrorCompatNotSupportedOnDevice
];

/// Code 46 (`cudaErrorDevicesUnavailable`, `CUDA_ERROR_DEVICE_UNAVAILABLE`)
/// means "no usable device" only from a call that counts the devices: from
/// any other call it is one device busy (exclusive-process or prohibited
/// compute mode) or out of resources, while others may be free.
pub(crate) const UNAVAILABLE: u32 = 46;

/// The calls whose code 46 means every device is unavailable.
pub(crate) const COUNT_CALLS: &[&str] = &[
    "cudaGetDeviceCount",
    "cuDeviceGetCount",
    "cudarc CudaContext::device_count",
];

/// CUDA driver codes (`CUresult`) with that meaning from any call: the
/// runtime's numbers where the driver API has the same condition (it has
/// no 35, and its 3, `CUDA_ERROR_NOT_INITIALIZED`, means `cuInit` was not
/// called); 46 as for the runtime.
pub(crate) const DRIVER_CODES: [u32; 5] = [
    34,  // CUDA_ERROR_STUB_LIBRARY
    100, // CUDA_ERROR_NO_DEVICE
    802, // CUDA_ERROR_SYSTEM_NOT_READY
    803, // CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
    804, // CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE
];

/// Why code 3 is not "no device" in a process with `history`,
/// in the crate's words (for the error's context); `None` when it is.
pub(crate) fn init_error_context(history: InitHistory) -> Option<&'static str> {
    match history {
        InitHistory::NeverSeen => None,
        InitHistory::SeenBeforeFork => Some(
            "CUDA was initialised before fork() (the parent process used a device): a forked \
             child cannot use CUDA; start the process with spawn/exec (Python \
             multiprocessing's \"spawn\" start method) instead",
        ),
        InitHistory::SeenHere => Some(
            "this process used a CUDA device earlier, so this is not a missing device; \
             check `nvidia-smi` and the kernel log (a driver fault or a reset)",
        ),
    }
}

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
              loaded (`nvidia-smi` runs); a process fork()ed from one that had initialised \
              CUDA gets this too: start it with spawn/exec instead"
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
        46 => "every CUDA device is busy or unavailable (exclusive-process or prohibited \
               compute mode); see `nvidia-smi -q -d COMPUTE`"
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

/// Whether runtime code `code` returned by `call` means "no usable
/// device": [`RUNTIME_CODES`] (3 only while no device was ever seen), and
/// 46 from a call of [`COUNT_CALLS`].
pub(crate) fn runtime_no_device(call: &str, code: u32) -> bool {
    runtime_no_device_in(call, code, init_history())
}

/// [`runtime_no_device`] for a given history (pure).
pub(crate) fn runtime_no_device_in(call: &str, code: u32, history: InitHistory) -> bool {
    match code {
        3 => history == InitHistory::NeverSeen,
        UNAVAILABLE => COUNT_CALLS.contains(&call),
        c => RUNTIME_CODES.contains(&c),
    }
}

/// Whether driver code `code` returned by `call` means "no usable device":
/// [`DRIVER_CODES`], and 46 from a call of [`COUNT_CALLS`].
pub(crate) fn driver_no_device(call: &str, code: u32) -> bool {
    DRIVER_CODES.contains(&code) || (code == UNAVAILABLE && COUNT_CALLS.contains(&call))
}
