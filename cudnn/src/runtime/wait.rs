//! Waiting for the device before borrows end: the decision shared by
//! [`Stream::scope`](super::Stream::scope) and the cudarc scope
//! (`CudarcStream::scope`), the registry of this crate's open captures, and
//! the calling thread's capture mode exchanged to relaxed for one wait.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::check;
use crate::error::{Error, Result};
use crate::sys::cudart::{self, cudaStreamCaptureMode};

/// How long the end of a scope keeps retrying a wait refused because of a
/// capture (a capture on another thread refuses `cuCtxSynchronize`, and the
/// legacy stream's synchronization, until it ends).
pub(crate) const SCOPE_WAIT_DEADLINE: Duration = Duration::from_secs(30);

/// The first and the longest pause between two tries of the wait.
pub(crate) const FIRST_PAUSE: Duration = Duration::from_millis(1);
pub(crate) const LONGEST_PAUSE: Duration = Duration::from_millis(100);

/// Codes (the same numbers as `CUresult` and `cudaError_t`) after which
/// the context is lost for good: the CUDA driver API documents each as
/// leaving "the process in an inconsistent state and any further CUDA work
/// will return the same error", so no work of the context runs any more;
/// and the driver being unloaded at process exit. Releasing borrows then
/// cannot let the device touch memory. Every other failure could still
/// have work running. Not listed, after checking the driver API's
/// documentation: 214 (`ECC_UNCORRECTABLE`: documented only as "an
/// uncorrectable ECC error was detected during execution", not as leaving
/// the context unusable), 220 (`NVLINK_UNCORRECTABLE`: likewise) and 911 (`EXTERNAL_DEVICE`: sticky only as an
/// asynchronous error; as the answer of a call it may mean that call
/// failed, with work still running).
pub(crate) const CONTEXT_LOST: [u32; 13] = [
    4,   // CUDA_ERROR_DEINITIALIZED / cudaErrorCudartUnloading
    700, // CUDA_ERROR_ILLEGAL_ADDRESS
    702, // CUDA_ERROR_LAUNCH_TIMEOUT
    709, // CUDA_ERROR_CONTEXT_IS_DESTROYED
    710, // CUDA_ERROR_ASSERT
    714, // CUDA_ERROR_HARDWARE_STACK_ERROR
    715, // CUDA_ERROR_ILLEGAL_INSTRUCTION
    716, // CUDA_ERROR_MISALIGNED_ADDRESS
    717, // CUDA_ERROR_INVALID_ADDRESS_SPACE
    718, // CUDA_ERROR_INVALID_PC
    719, // CUDA_ERROR_LAUNCH_FAILED
    721, // CUDA_ERROR_TENSOR_MEMORY_LEAK
    810, // CUDA_ERROR_MPS_CLIENT_TERMINATED
];

/// Whether a failed wait means the context is lost (release).
pub(crate) fn context_lost(e: &Error) -> bool {
    matches!(e, Error::Driver { code, .. } | Error::Cuda { code, .. } if CONTEXT_LOST.contains(code))
}

/// Whether a failed wait was refused because a stream capture is open
/// (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` 900 to `..._WRONG_THREAD` 908,
/// the same numbers in the runtime): it can succeed once the capture ends.
pub(crate) fn capture_refused(e: &Error) -> bool {
    matches!(e, Error::Driver { code, .. } | Error::Cuda { code, .. } if (900..=908).contains(code))
}

/// The wait at the end of a scope, as steps so the decision can be tested
/// without a device.
pub(crate) trait DeviceWait {
    /// Take (and clear) an error stored earlier (cudarc's `check_err`). It
    /// is reported, but it must not replace the wait: cudarc's own
    /// `CudaContext::synchronize` returns a stored error *without
    /// synchronizing*.
    fn take_stored(&self) -> Option<Error>;
    /// One full wait: the work the borrows protect is done when it is `Ok`.
    fn wait(&self) -> Result<()>;
    /// An error a successful wait met on its way (a stream's own failure
    /// before a device-wide wait succeeded), reported as the result.
    fn take_late(&self) -> Option<Error> {
        None
    }
}

/// What [`end_scope`] decided.
#[derive(Debug)]
pub(crate) enum Ended {
    /// The guards were dropped after a wait that succeeded, or after the
    /// context was lost; the scope's result.
    Released(Result<()>),
    /// No wait succeeded: the guards were *not* dropped (they are still in
    /// the vector). The last error. The caller aborts.
    Stuck(Error),
}

/// The end of a scope: take the stored error, then wait, retrying a wait
/// refused because of a capture (pausing with `pause`, doubling from 1 ms
/// to 100 ms) until `expired()` says the deadline passed; drop the guards
/// only after a wait that succeeded, or when the context is lost. A stored
/// (or late) error is the result when the wait succeeded.
///
/// Any other failure of the wait ends at once as [`Ended::Stuck`]: it did
/// not prove the work done, and nothing says that retrying could (these
/// are not conditions that pass: an invalid context or handle, a driver
/// that cannot be called); releasing would let the device use memory
/// whose borrow ended, and retrying would only delay the same end by the
/// deadline while every refused `cuCtxSynchronize` could invalidate other
/// threads' global-mode captures.
pub(crate) fn end_scope<G>(
    w: &impl DeviceWait,
    guards: &mut Vec<G>,
    mut expired: impl FnMut() -> bool,
    mut pause: impl FnMut(Duration),
) -> Ended {
    let stored = w.take_stored();
    let mut step = FIRST_PAUSE;
    loop {
        match w.wait() {
            Ok(()) => {
                // The work is done: the guards may go now.
                drop(std::mem::take(guards));
                let late = w.take_late();
                return Ended::Released(stored.or(late).map_or(Ok(()), Err));
            }
            Err(e) if context_lost(&e) => {
                drop(std::mem::take(guards));
                return Ended::Released(Err(e));
            }
            Err(e) if capture_refused(&e) => {
                if expired() {
                    return Ended::Stuck(e);
                }
                pause(step);
                step = (step * 2).min(LONGEST_PAUSE);
            }
            Err(e) => return Ended::Stuck(e),
        }
    }
}

/// This crate's open [`Stream::capture`](super::Stream::capture) scopes
/// and device-wide waits in progress, counted per device (`None`: a stream
/// whose device could not be read, counted against every device). The
/// mutex is held only to read or change the counts, never across a wait
/// for the device: a wait in progress is a count, so a thread blocked in
/// `cuCtxSynchronize` (waiting for an NCCL peer, for instance) holds no
/// lock another thread needs.
#[derive(Debug, Default)]
struct Registry {
    /// `(device, open captures, waits in progress)`, one entry per device
    /// seen; an entry whose counts are both 0 is removed.
    entries: Vec<(Option<usize>, usize, usize)>,
}

impl Registry {
    /// Whether a device-wide wait on `device` and a capture on `other`
    /// conflict (the same device, or either unknown).
    fn same(device: Option<usize>, other: Option<usize>) -> bool {
        device.is_none() || other.is_none() || device == other
    }

    /// Open captures on `device`.
    fn captures(&self, device: Option<usize>) -> usize {
        self.entries
            .iter()
            .filter(|e| Self::same(device, e.0))
            .map(|e| e.1)
            .fold(0, usize::saturating_add)
    }

    /// Device-wide waits in progress on `device`.
    fn waits(&self, device: Option<usize>) -> usize {
        self.entries
            .iter()
            .filter(|e| Self::same(device, e.0))
            .map(|e| e.2)
            .fold(0, usize::saturating_add)
    }

    /// Add `captures` and `waits` (each +1, 0 or -1) to `device`'s entry.
    fn add(&mut self, device: Option<usize>, captures: isize, waits: isize) {
        let i = match self.entries.iter().position(|e| e.0 == device) {
            Some(i) => i,
            None => {
                self.entries.push((device, 0, 0));
                self.entries.len() - 1
            }
        };
        let e = &mut self.entries[i];
        e.1 = e.1.saturating_add_signed(captures);
        e.2 = e.2.saturating_add_signed(waits);
        if e.1 == 0 && e.2 == 0 {
            self.entries.swap_remove(i);
        }
    }
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    entries: Vec::new(),
});
/// Signalled whenever a count drops.
static REGISTRY_CHANGED: Condvar = Condvar::new();

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Wait on the registry until `done` holds or `deadline` passed; the
/// guard, and whether `done` holds.
fn wait_until(
    deadline: Instant,
    mut done: impl FnMut(&Registry) -> bool,
) -> (MutexGuard<'static, Registry>, bool) {
    let mut r = registry();
    while !done(&r) {
        let now = Instant::now();
        if now >= deadline {
            return (r, false);
        }
        r = REGISTRY_CHANGED
            .wait_timeout(r, deadline - now)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
    (r, true)
}

/// How long a capture's beginning waits for device-wide waits of the
/// crate on its device to end before it is refused.
pub(crate) const CAPTURE_OPEN_WAIT: Duration = Duration::from_secs(1);

/// One open capture of this crate on a device, counted until dropped
/// (after `cudaStreamEndCapture`). Opening one waits, up to a deadline,
/// while a device-wide wait of the crate is in progress on that device
/// ([`no_own_captures`]), then refuses.
#[derive(Debug)]
pub(crate) struct OwnCapture {
    device: Option<usize>,
}

impl OwnCapture {
    /// Count a capture on `device` once no device-wide wait of the crate is
    /// in progress there, waiting until `deadline`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the stream (`what`) when a wait was
    /// still in progress at the deadline.
    pub(crate) fn open(device: Option<usize>, deadline: Instant, what: &str) -> Result<Self> {
        let (mut r, none) = wait_until(deadline, |r| r.waits(device) == 0);
        if !none {
            let n = r.waits(device);
            return Err(Error::invalid(
                "stream",
                format!(
                    "its device has {n} device-wide wait(s) of this crate in progress (the end \
                     of a CudarcStream::scope) that did not end by the deadline; a capture \
                     begun now would refuse (or be invalidated by) it: begin the capture \
                     after the scope ended"
                ),
                what,
            ));
        }
        r.add(device, 1, 0);
        Ok(OwnCapture { device })
    }
}

impl Drop for OwnCapture {
    fn drop(&mut self) {
        registry().add(self.device, -1, 0);
        REGISTRY_CHANGED.notify_all();
    }
}

/// A device-wide wait of this crate in progress, counted until dropped:
/// no capture of the crate begins on its device meanwhile.
// Used by the cudarc scope's device-wide wait (feature `cudarc`) and tests.
#[cfg_attr(not(any(test, feature = "cudarc")), allow(dead_code))]
#[derive(Debug)]
pub(crate) struct WaitInProgress {
    device: Option<usize>,
}

impl Drop for WaitInProgress {
    fn drop(&mut self) {
        registry().add(self.device, 0, -1);
        REGISTRY_CHANGED.notify_all();
    }
}

/// Block until none of this crate's captures is open on `device`, or
/// `deadline` passed (`None`). The returned count is held by the caller
/// for its device-wide wait: while it lives no capture of this crate
/// begins on `device` (one that tries waits up to [`CAPTURE_OPEN_WAIT`],
/// then refuses), so the wait is never refused by (nor invalidates) one
/// of them. No lock is held while it lives. Captures made with other
/// libraries (cudarc's `begin_capture`) cannot be seen.
#[cfg_attr(not(any(test, feature = "cudarc")), allow(dead_code))]
pub(crate) fn no_own_captures(device: Option<usize>, deadline: Instant) -> Option<WaitInProgress> {
    let (mut r, none) = wait_until(deadline, |r| r.captures(device) == 0);
    if !none {
        return None;
    }
    r.add(device, 0, 1);
    Some(WaitInProgress { device })
}

/// Block until none of this crate's captures is open on `device`, or
/// `deadline` passed; whether none is. Nothing is held after.
pub(crate) fn own_captures_ended(device: Option<usize>, deadline: Instant) -> bool {
    wait_until(deadline, |r| r.captures(device) == 0).1
}

/// How many captures of this crate are open on `device` (tests).
#[cfg(test)]
pub(crate) fn own_captures_open(device: Option<usize>) -> usize {
    registry().captures(device)
}

/// The calling thread's stream-capture interaction mode exchanged to
/// relaxed until dropped (`cudaThreadExchangeStreamCaptureMode`, as
/// PyTorch does around a `cudaMalloc` during capture): a wait made under it
/// is not refused because *another* thread captures in global mode, and
/// does not invalidate that capture. Calls that conflict with a capture by
/// their nature (synchronizing a capturing stream) are still refused.
/// `None` where the runtime cannot exchange it (no runtime, an old one).
pub(crate) struct RelaxedCaptureMode {
    rt: &'static cudart::Cudart,
    previous: cudaStreamCaptureMode,
    /// The mode is per thread: restored on the thread that exchanged it.
    _thread: std::marker::PhantomData<*const ()>,
}

impl RelaxedCaptureMode {
    pub(crate) fn enter() -> Option<Self> {
        let rt = check::cudart().ok()?;
        if !rt.has_symbol("cudaThreadExchangeStreamCaptureMode") {
            return None;
        }
        let mut mode = cudaStreamCaptureMode::cudaStreamCaptureModeRelaxed;
        // SAFETY: `mode` is a valid in/out pointer; the call only swaps
        // the calling thread's mode (restored on drop, on this thread: the
        // value is neither `Send` nor kept past the wait).
        match unsafe { rt.cudaThreadExchangeStreamCaptureMode(&mut mode) } {
            Ok(st) if st == cudart::cudaError::cudaSuccess => Some(RelaxedCaptureMode {
                rt,
                previous: mode,
                _thread: std::marker::PhantomData,
            }),
            _ => None,
        }
    }
}

impl Drop for RelaxedCaptureMode {
    fn drop(&mut self) {
        let mut mode = self.previous;
        // SAFETY: as in `enter`; restores the mode this thread had.
        let _ = unsafe { self.rt.cudaThreadExchangeStreamCaptureMode(&mut mode) };
    }
}

/// The message before the process aborts: no wait proved the work done,
/// and the borrows it protects cannot be kept past the scope.
pub(crate) fn stuck(who: &str, e: &Error, what: &str) -> ! {
    eprintln!(
        "cudnn: {who} could not wait for the device ({e}); releasing {what} could let the GPU \
         use memory whose borrow ended, so the process aborts. End every stream capture of the \
         device before the scope ends."
    );
    std::process::abort()
}

#[cfg(test)]
#[path = "wait_tests.rs"]
mod tests;
