//! The capture guards that ask a [`Stream`] (and `Stream::capture_status`):
//! apart from the stream-free rules in `capture.rs`, which the device and
//! stream files use, so that no file imports them in a circle.

use super::Stream;
use super::capture::{
    CaptureStatus, Hazard, capture_rule, forbid_in_capture_scope, implicit_is_capturing,
};
use crate::check::{self, cuda_call};
use crate::error::{Error, Result};
use crate::sys::cudart;

/// The guard every launch with a hazard calls, just before the unsafe step:
/// asks the runtime whether `stream` is capturing and applies
/// [`capture_rule`]. A runtime without `cudaStreamIsCapturing` cannot
/// capture, so it passes.
///
/// On the legacy default stream while a blocking stream of its device is
/// capturing (the runtime's `cudaErrorStreamCaptureImplicit`), the call is
/// refused too: its work would depend on that capture and invalidate it.
///
/// # Errors
/// [`Error::CaptureUnsafe`]; [`Error::Cuda`] from the query.
pub fn forbid_during_capture(op: &str, stream: &Stream, hazard: Hazard) -> Result<()> {
    let status = implicit_is_capturing(stream.capture_status())?;
    capture_rule(op, status, &hazard)
}

/// [`forbid_during_capture`] for a step that calls `cudaMalloc`, `cudaFree`
/// or a synchronization whatever its stream (a workspace growth): refused
/// also inside a [`Stream::capture`] closure on this thread when `stream`
/// itself is not capturing, where the runtime would refuse the call (and
/// invalidate a global-mode capture). The scope mark is read first, so
/// nothing is released or queued before the refusal.
///
/// # Errors
/// [`Error::CaptureUnsafe`]; [`Error::Cuda`] from the query.
pub(crate) fn forbid_allocation_during_capture(
    op: &str,
    stream: &Stream,
    hazard: Hazard,
) -> Result<()> {
    forbid_in_capture_scope(op, hazard.clone())?;
    forbid_during_capture(op, stream, hazard)
}

/// For creating a library handle on `stream` (`cudnnCreate`,
/// `cublasCreate` allocate and may synchronize): refused inside a capture
/// closure on this thread (no runtime call) and on a capturing stream. A
/// failed capture query is not an answer: the creation goes on and reports
/// the real failure (no device: [`Error::NoDevice`], the library's status
/// in its detail).
///
/// # Errors
/// [`Error::CaptureUnsafe`] naming `op`.
pub(crate) fn forbid_creation_during_capture(op: &str, stream: &Stream) -> Result<()> {
    forbid_in_capture_scope(op, Hazard::Allocation)?;
    match forbid_during_capture(op, stream, Hazard::Allocation) {
        Err(e @ Error::CaptureUnsafe { .. }) => Err(e),
        _ => Ok(()),
    }
}

impl Stream {
    /// The runtime's id of the capture open on this stream
    /// (`cudaStreamGetCaptureInfo`; unique among the process's captures):
    /// `None` when the stream is not capturing, or when the loaded runtime
    /// cannot say (CUDA 12's, whose declaration of the call differs from
    /// these bindings: treated as absent).
    ///
    /// # Errors
    /// [`Error::Cuda`] from the query; [`Error::WrongThread`]; [`Error::Load`].
    pub(crate) fn capture_id(&self) -> Result<Option<u64>> {
        let rt = check::cudart()?;
        if !rt.has_symbol("cudaStreamGetCaptureInfo") {
            return Ok(None);
        }
        super::stream::check_thread(
            "asking a stream's capture",
            self.thread(),
            std::thread::current().id(),
        )?;
        let _on = self.enter_unchecked()?;
        let mut st = cudart::cudaStreamCaptureStatus::cudaStreamCaptureStatusNone;
        let mut id: std::ffi::c_ulonglong = 0;
        // SAFETY: a valid stream (owned, or by `from_raw`'s contract);
        // `st` and `id` are valid out-pointers; the optional outputs are
        // null (not asked for).
        unsafe {
            cuda_call!(
                rt,
                cudaStreamGetCaptureInfo(
                    self.as_raw(),
                    &mut st,
                    &mut id,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut()
                )
            )
        }?;
        Ok(CaptureStatus::from_raw(st).is_capturing().then_some(id))
    }

    /// Whether the stream is being captured into a CUDA graph
    /// (`cudaStreamIsCapturing`; a host-side query that queues nothing).
    ///
    /// # Errors
    /// [`Error::Cuda`] from the query; [`Error::Load`].
    #[doc(alias = "cudaStreamIsCapturing")]
    pub fn capture_status(&self) -> Result<CaptureStatus> {
        let rt = check::cudart()?;
        if !rt.has_symbol("cudaStreamIsCapturing") {
            return Ok(CaptureStatus::None);
        }
        super::stream::check_thread(
            "asking whether a stream is capturing",
            self.thread(),
            std::thread::current().id(),
        )?;
        let _on = self.enter_unchecked()?;
        let mut st = cudart::cudaStreamCaptureStatus::cudaStreamCaptureStatusNone;
        // SAFETY: `as_raw` is a valid stream (owned, or by `from_raw`'s
        // contract) and `st` a valid out-pointer.
        unsafe { cuda_call!(rt, cudaStreamIsCapturing(self.as_raw(), &mut st)) }?;
        Ok(CaptureStatus::from_raw(st))
    }
}
