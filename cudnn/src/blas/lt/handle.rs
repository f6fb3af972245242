//! [`LtHandle`]: the cuBLASLt context with its stream, device and workspace.

use std::ffi::c_void;
use std::fmt;
use std::mem;
use std::ptr::{self, NonNull};

use super::call::*;
use crate::error::{Error, Result};
use crate::runtime::{Device, DeviceBuffer, DeviceGuard, QueueHold, Stream, check_device};
use crate::sys::cublas::{cublasLtContext, cublasLtHandle_t};

// ---------------------------------------------------------------------------
// LtHandle

/// A cuBLASLt handle (`cublasLtHandle_t`), bound to one [`Stream`], owning
/// the workspace its matmuls use.
///
/// # Threads
/// `Send`, not `Sync`, for the same reasons as the cuBLAS
/// [`Handle`](crate::blas::Handle): NVIDIA documents the library as thread safe
/// but advises one handle per thread, and the stream and workspace here
/// change only through `&mut self`.
pub struct LtHandle {
    pub(super) raw: NonNull<cublasLtContext>,
    pub(super) stream: Stream,
    /// The device current at creation; the workspace is allocated there.
    pub(super) device: Device,
    /// Freed in the order of `stream`, after the matmuls that used it.
    pub(super) workspace: Option<DeviceBuffer<u8>>,
    pub(super) owned: bool,
}

// SAFETY: cuBLAS documents (cuBLAS Library guide, "Thread Safety") that the
// library, cuBLASLt included, is thread safe and may be called from several
// host threads; moving a handle to another thread is allowed. `LtHandle` is
// not `Sync` (one user at a time, as NVIDIA advises). Its stream and
// workspace are `Send`.
unsafe impl Send for LtHandle {}

impl fmt::Debug for LtHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LtHandle")
            .field("raw", &self.raw)
            .field("stream", &self.stream)
            .field("device", &self.device.ordinal())
            .field("workspace_bytes", &self.workspace_size())
            .finish()
    }
}

impl LtHandle {
    /// Create a handle on the current device, bound to `stream`, with the
    /// workspace NVIDIA recommends for the device
    /// ([`Handle::recommended_workspace_size`](super::super::Handle::recommended_workspace_size)).
    ///
    /// # Errors
    /// [`Error::NoDevice`] without a usable device (a cuBLASLt status kept
    /// in its detail); [`Error::Cublas`] from `cublasLtCreate` otherwise;
    /// [`Error::Cuda`]; [`Error::Load`].
    #[doc(alias = "cublasLtCreate")]
    pub fn new(stream: &Stream) -> Result<Self> {
        let mut h = Self::with_workspace(stream, 0)?;
        let (major, _) = h.device.compute_capability()?;
        h.set_workspace(super::super::Handle::recommended_workspace_size(major))?;
        Ok(h)
    }

    /// Create a handle bound to `stream` with a workspace of `bytes` bytes
    /// (0: none; only algorithms that need no workspace are chosen).
    ///
    /// # Errors
    /// As [`LtHandle::new`].
    #[doc(alias = "cublasLtCreate")]
    pub fn with_workspace(stream: &Stream, bytes: usize) -> Result<Self> {
        // Held until the workspace is set: a capture of `stream` does not
        // begin in between.
        let _hold = crate::runtime::check_stream_thread("the stream of a cuBLASLt handle", stream)?;
        let api = cublas_lt()?;
        let mut raw: cublasLtHandle_t = ptr::null_mut();
        // SAFETY: `raw` is a valid, writable out-pointer.
        unsafe { lt_call!(api, cublasLtCreate(&mut raw)) }.map_err(crate::no_device::explain)?;
        let raw = NonNull::new(raw)
            .ok_or_else(|| Error::invalid("handle", "cublasLtCreate returned null", "null"))?;
        let device = match Device::current() {
            Ok(d) => d,
            Err(e) => {
                // SAFETY: `raw` was just created and is destroyed once.
                let _ = unsafe { api.cublasLtDestroy(raw.as_ptr()) };
                return Err(e);
            }
        };
        let mut h = LtHandle {
            raw,
            stream: stream.clone(),
            device,
            workspace: None,
            owned: true,
        };
        let _checked = check_lt_stream(device, stream)?;
        h.set_workspace(bytes)?;
        Ok(h)
    }

    /// Take ownership of a handle created elsewhere (destroyed on drop).
    ///
    /// On error the raw handle has been destroyed (do not destroy it again).
    ///
    /// # Safety
    /// `raw` must be a valid handle from `cublasLtCreate` that nobody else
    /// destroys or uses while this `LtHandle` lives.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for null; [`Error::Cuda`] allocating the workspace.
    pub unsafe fn from_raw(
        raw: cublasLtHandle_t,
        stream: &Stream,
        workspace: usize,
    ) -> Result<Self> {
        let raw = NonNull::new(raw)
            .ok_or_else(|| Error::invalid("raw", "must be a non-null cublasLtHandle_t", "null"))?;
        let device = match Device::current() {
            Ok(d) => d,
            Err(e) => {
                if let Ok(api) = cublas_lt() {
                    // SAFETY: we own `raw` (the caller's contract) and destroy it
                    // once, as the doc promises on error.
                    let _ = unsafe { api.cublasLtDestroy(raw.as_ptr()) };
                }
                return Err(e);
            }
        };
        let mut h = LtHandle {
            raw,
            stream: stream.clone(),
            device,
            workspace: None,
            owned: true,
        };
        let _hold = check_lt_stream(device, stream)?;
        h.set_workspace(workspace)?;
        Ok(h)
    }

    /// Give up ownership; the caller must destroy the handle
    /// (`cublasLtDestroy`). The workspace is freed after the matmuls queued
    /// on the handle's stream. A cuBLASLt handle is not bound to a stream
    /// (each `cublasLtMatmul` names one), so only the raw handle is returned.
    pub fn into_raw(mut self) -> cublasLtHandle_t {
        self.owned = false;
        self.raw.as_ptr()
    }

    /// The device current when the handle was created. Every matmul and
    /// heuristic query runs with it current, its workspace is allocated
    /// there, and the stream and buffers must belong to it.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Check that the handle's stream may be used from this thread, then
    /// make the handle's device current until the guard drops (see
    /// [`Handle::enter`](crate::blas::Handle::enter)).
    ///
    /// # Errors
    /// [`Error::WrongThread`]; [`Error::Cuda`] when the device cannot be
    /// made current.
    pub fn enter(&self) -> Result<DeviceGuard> {
        // The queue hold lasts as long as the guard, so a capture of the
        // stream cannot begin between this check and the launch.
        let hold =
            crate::runtime::check_stream_thread("the stream of a cuBLASLt handle", &self.stream)?;
        Ok(self.device.guard()?.holding(hold))
    }

    /// The raw handle, valid while `self` lives.
    pub fn as_raw(&self) -> cublasLtHandle_t {
        self.raw.as_ptr()
    }

    /// The stream matmuls are queued on.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Queue later matmuls on `stream`; its work first waits for what is
    /// queued on the old stream (which may still use the workspace).
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] for a stream of another device;
    /// [`Error::WrongThread`]; [`Error::Cuda`] from the ordering event;
    /// [`Error::CaptureUnsafe`] when a workspace is set, the streams differ
    /// and either is being captured.
    pub fn set_stream(&mut self, stream: &Stream) -> Result<()> {
        // Held through the ordering wait queued on `stream`.
        let _hold = check_lt_stream(self.device, stream)?;
        if self.workspace.is_some() {
            stream.order_resource_after(
                &self.stream,
                "blas::LtHandle::set_stream",
                "the cuBLASLt handle's workspace",
            )?;
        }
        self.stream = stream.clone();
        Ok(())
    }

    /// Bytes of workspace each matmul may use.
    pub fn workspace_size(&self) -> usize {
        self.workspace.as_ref().map_or(0, DeviceBuffer::len)
    }

    /// Replace the workspace with one of `bytes` bytes (0: none), allocated
    /// on the handle's [`device`](LtHandle::device). The old one is freed in
    /// the order of the handle's stream, after the matmuls queued there.
    /// Plans made for a larger workspace fail at run with an error saying so.
    ///
    /// # Errors
    /// [`Error::Cuda`] when the allocation fails; [`Error::CaptureUnsafe`]
    /// while the handle's stream is capturing or inside a
    /// [`Stream::capture`](crate::runtime::Stream::capture) closure.
    pub fn set_workspace(&mut self, bytes: usize) -> Result<()> {
        // Allocating, or freeing the old one after a synchronize: not during
        // a capture (checked before anything is released).
        if bytes != 0 || self.workspace.is_some() {
            let hazard = crate::runtime::Hazard::Allocation;
            crate::runtime::forbid_allocation_during_capture(
                "LtHandle::set_workspace",
                &self.stream,
                hazard,
            )?;
        }
        let new = if bytes == 0 {
            None
        } else {
            let _on = self.device.guard()?;
            Some(DeviceBuffer::<u8>::alloc(bytes).map_err(|e| {
                e.with_context(format!("allocating a {bytes}-byte cuBLASLt workspace"))
            })?)
        };
        if let Some(old) = mem::replace(&mut self.workspace, new) {
            old.destroy_after(&self.stream)?;
        }
        Ok(())
    }

    /// The workspace's device pointer (null when none). Only the library
    /// writes through it, in stream order.
    pub(super) fn workspace_ptr(&self) -> *mut c_void {
        self.workspace
            .as_ref()
            .map_or(ptr::null_mut(), |w| w.as_raw().cast_mut())
    }

    /// Destroy the handle now, reporting cuBLASLt's status.
    ///
    /// # Errors
    /// [`Error::Cublas`] from `cublasLtDestroy`; [`Error::Cuda`] from freeing the workspace.
    #[doc(alias = "cublasLtDestroy")]
    pub fn destroy(mut self) -> Result<()> {
        self.owned = false;
        let _on = self.device.guard()?;
        let api = cublas_lt()?;
        // SAFETY: we own the handle; `owned` is cleared so Drop will not
        // destroy it again.
        let r = unsafe { lt_call!(api, cublasLtDestroy(self.raw.as_ptr())) };
        let w = match self.workspace.take() {
            Some(ws) => ws.destroy_after(&self.stream),
            None => Ok(()),
        };
        r.and(w)
    }
}

/// A cuBLASLt handle of `device` may only queue on a stream of `device`,
/// usable from this thread; the hold counts the caller as queueing on it.
pub(super) fn check_lt_stream(device: Device, stream: &Stream) -> Result<QueueHold> {
    let hold = crate::runtime::check_stream_thread("the stream of a cuBLASLt handle", stream)?;
    check_device(
        || "the stream of a cuBLASLt handle".to_string(),
        device,
        stream.device(),
    )?;
    Ok(hold)
}

impl Drop for LtHandle {
    fn drop(&mut self) {
        // On the handle's device (nothing changes if that fails).
        let _on = self.device.guard();
        if self.owned
            && let Ok(api) = cublas_lt()
        {
            // SAFETY: we own the handle and destroy it once; the status is
            // ignored (Drop must not fail).
            let _ = unsafe { api.cublasLtDestroy(self.raw.as_ptr()) };
        }
        if let Some(ws) = self.workspace.take() {
            // After the matmuls queued on the handle's stream; ignored on failure.
            let _ = ws.destroy_after(&self.stream);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::hold_check::{PretendCurrent, assert_enter_holds_the_stream};

    /// A capture's beginning waits while the guard of `LtHandle::enter`
    /// (the entry of every matmul) lives. No CUDA call: a pretended
    /// current device, a handle value that is never destroyed.
    #[test]
    fn unit_enter_guard_holds_the_stream() {
        let _dev = PretendCurrent::device(5);
        let stream = Stream::fake_for_tests(0x3300);
        let h = LtHandle {
            raw: NonNull::dangling(),
            stream: stream.clone(),
            device: Device::from_runtime(5),
            workspace: None,
            owned: false,
        };
        assert_enter_holds_the_stream(&stream, || h.enter());
        std::mem::forget(h);
    }
}
