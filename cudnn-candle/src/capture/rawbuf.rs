//! Device buffers for the lengths and block tables of a step captured on
//! candle's own stream ([`capture_step`](super::capture_step)): allocated
//! with `cuMemAlloc` (not stream-ordered), so they are ordinary memory,
//! not memory of the graph. A buffer allocated on candle's stream during
//! that capture would be an allocation node of the graph: unmapped until
//! the first launch and reallocated by each one, so the host-checked
//! values written before a launch would be lost or written out of bounds.

use std::sync::Arc;

use cudarc::driver::sys::{self, CUstreamCaptureMode};
use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, SyncOnDrop};
use cudnn::Error;

use crate::device::to_candle;

/// The calling thread's capture mode exchanged to relaxed until dropped
/// (`cuThreadExchangeStreamCaptureMode`), as PyTorch does around its
/// allocations during a capture: a `cuMemAlloc` / `cuMemFree` on this
/// thread while it captures candle's stream (thread-local mode) is then
/// allowed, and not recorded (it names no stream).
struct Relaxed(CUstreamCaptureMode);

impl Relaxed {
    fn enter() -> Option<Self> {
        let mut mode = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: `mode` is a valid in/out pointer; the call swaps only the
        // calling thread's mode, restored on drop on this thread (`Relaxed`
        // lives inside one function call).
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
            sys::cuThreadExchangeStreamCaptureMode(&mut mode)
        }));
        match r {
            Ok(sys::CUresult::CUDA_SUCCESS) => Some(Relaxed(mode)),
            _ => None,
        }
    }
}

impl Drop for Relaxed {
    fn drop(&mut self) {
        let mut mode = self.0;
        // SAFETY: as in `enter`: restores this thread's previous mode.
        let _ = unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) };
    }
}

/// `len` i32 of device memory from `cuMemAlloc`, freed with `cuMemFree`
/// when dropped. Its contents are unspecified until written: the captured
/// step writes the checked values before every launch that reads them
/// (the values are pending from the call on, and a launch whose write
/// failed does not run).
pub(crate) struct RawI32 {
    ptr: sys::CUdeviceptr,
    len: usize,
    stream: Arc<CudaStream>,
}

impl RawI32 {
    /// Allocate `len` i32 (at least one) on `stream`'s device.
    ///
    /// # Errors
    /// The size overflowing; the allocation.
    pub(crate) fn new(stream: &Arc<CudaStream>, len: usize) -> candle_core::Result<Self> {
        let bytes = len
            .max(1)
            .checked_mul(std::mem::size_of::<i32>())
            .ok_or_else(|| to_candle(Error::invalid("lengths", "byte size must fit usize", len)))?;
        stream
            .context()
            .bind_to_thread()
            .map_err(|e| to_candle(cudnn::interop::driver_error("cuCtxSetCurrent", e)))?;
        let _relaxed = Relaxed::enter();
        // SAFETY: a plain allocation of `bytes` in the current context
        // (candle's, bound above); the pointer is owned by the value.
        let ptr = unsafe { cudarc::driver::result::malloc_sync(bytes) }
            .map_err(|e| to_candle(cudnn::interop::driver_error("cuMemAlloc", e)))?;
        Ok(RawI32 {
            ptr,
            len,
            stream: stream.clone(),
        })
    }
}

impl Drop for RawI32 {
    fn drop(&mut self) {
        if self.stream.context().bind_to_thread().is_err() {
            return; // leaked: the context cannot be made current
        }
        let _relaxed = Relaxed::enter();
        // SAFETY: `ptr` came from `cuMemAlloc` in this context and is freed
        // once, here; the captured step drops its buffers only after the
        // wait for its last launch (or never launched). Status ignored:
        // Drop must not fail (a failure leaks it).
        let _ = unsafe { cudarc::driver::result::free_sync(self.ptr) };
    }
}

impl DeviceSlice<i32> for RawI32 {
    fn len(&self) -> usize {
        self.len
    }
    fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

impl DevicePtr<i32> for RawI32 {
    fn device_ptr<'a>(&'a self, _stream: &'a CudaStream) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        // Used on candle's stream only (its one stream: no event to record).
        (self.ptr, SyncOnDrop::Sync(None))
    }
}

impl DevicePtrMut<i32> for RawI32 {
    fn device_ptr_mut<'a>(
        &'a mut self,
        _stream: &'a CudaStream,
    ) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        (self.ptr, SyncOnDrop::Sync(None))
    }
}

/// A captured call's lengths or block table: on candle's stream for
/// [`capture`](super::capture) (candle's stream is not captured there), or
/// [`RawI32`] for [`capture_step`](super::capture_step).
pub(crate) enum LenBuf {
    Slice(cudarc::driver::CudaSlice<i32>),
    Raw(RawI32),
}

impl LenBuf {
    /// `len` i32 for a step: zeroed on candle's stream (`capture`), or
    /// [`RawI32`] (`capture_step`, `raw`).
    pub(crate) fn new(
        dev: &candle_core::CudaDevice,
        len: usize,
        raw: bool,
    ) -> candle_core::Result<Self> {
        if raw {
            Ok(LenBuf::Raw(RawI32::new(&dev.cuda_stream(), len)?))
        } else {
            Ok(LenBuf::Slice(dev.alloc_zeros::<i32>(len)?))
        }
    }
}

impl LenBuf {
    /// How many i32 it holds.
    pub(crate) fn len(&self) -> usize {
        match self {
            LenBuf::Slice(s) => s.len(),
            LenBuf::Raw(r) => r.len,
        }
    }
}

impl DeviceSlice<i32> for LenBuf {
    fn len(&self) -> usize {
        LenBuf::len(self)
    }
    fn stream(&self) -> &Arc<CudaStream> {
        match self {
            LenBuf::Slice(s) => DeviceSlice::stream(s),
            LenBuf::Raw(r) => &r.stream,
        }
    }
}

impl DevicePtr<i32> for LenBuf {
    fn device_ptr<'a>(&'a self, stream: &'a CudaStream) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        match self {
            LenBuf::Slice(s) => s.device_ptr(stream),
            LenBuf::Raw(r) => r.device_ptr(stream),
        }
    }
}

impl DevicePtrMut<i32> for LenBuf {
    fn device_ptr_mut<'a>(
        &'a mut self,
        stream: &'a CudaStream,
    ) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        match self {
            LenBuf::Slice(s) => s.device_ptr_mut(stream),
            LenBuf::Raw(r) => r.device_ptr_mut(stream),
        }
    }
}
