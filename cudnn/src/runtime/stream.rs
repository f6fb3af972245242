//! CUDA streams: ordered queues of device work (see [`Stream`]).

use std::fmt;
use std::ptr;
use std::sync::Arc;

use crate::check::{self, cuda_call};
use crate::error::Result;
use crate::sys::cudart::{self, cudaError, cudaStream_t};

use super::Event;

/// Flags for [`Stream::with_flags`] (`cudaStreamCreateWithFlags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct StreamFlags(u32);

impl StreamFlags {
    /// `cudaStreamDefault`: the stream synchronizes with the legacy default
    /// stream.
    pub const DEFAULT: StreamFlags = StreamFlags(cudart::cudaStreamDefault);
    /// `cudaStreamNonBlocking`: the stream runs concurrently with the legacy
    /// default stream (and so with this crate's synchronous copies).
    pub const NON_BLOCKING: StreamFlags = StreamFlags(cudart::cudaStreamNonBlocking);

    /// The raw flag bits.
    pub fn bits(self) -> u32 {
        self.0
    }
}

struct Inner {
    raw: cudaStream_t,
    /// Whether dropping the last clone destroys `raw`.
    owned: bool,
}

// SAFETY: the CUDA runtime API is thread-safe: a `cudaStream_t` may be used to
// enqueue work from any host thread, and concurrently from several (the CUDA
// Runtime API reference singles out only graph objects, "Graph object thread
// safety", as not internally synchronized). `Inner` is only a handle; it is
// destroyed once, by the last `Arc` owner.
unsafe impl Send for Inner {}
// SAFETY: as above; `&Inner` only hands out the raw handle for enqueueing work.
unsafe impl Sync for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        if self.owned
            && !self.raw.is_null()
            && let Ok(rt) = check::cudart()
        {
            // SAFETY: `raw` was created by cudaStreamCreate* (or handed over
            // with ownership through `from_raw_owned`) and this is the last
            // reference. Work still queued completes before the runtime
            // releases the stream. The status is ignored: Drop must not fail.
            let _ = unsafe { rt.cudaStreamDestroy(self.raw) };
        }
    }
}

/// A CUDA stream: an ordered queue of device work.
///
/// A [`Stream`] is a shared, reference-counted handle: cloning it is cheap,
/// and the underlying `cudaStream_t` is destroyed when the last clone is
/// dropped. Everything that enqueues work on a stream *and outlives the call*
/// keeps a clone — a cuDNN or cuBLAS [`Handle`](crate::dnn::Handle) bound to
/// it, a [`DeviceBuffer`](crate::runtime::DeviceBuffer) from stream-ordered
/// allocation that will be freed on it — so a stream can never be destroyed
/// while something still uses it.
///
/// Streams someone else owns (a framework's, PyTorch's current stream) are
/// wrapped with [`Stream::from_raw`] and never destroyed by this crate.
#[derive(Clone)]
pub struct Stream {
    inner: Arc<Inner>,
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.inner.raw {
            r if r.is_null() => "default (null)".to_string(),
            r if r == cudart::cudaStreamLegacy => "legacy default".to_string(),
            r if r == cudart::cudaStreamPerThread => "per-thread default".to_string(),
            r => format!("{r:p}"),
        };
        f.debug_struct("Stream")
            .field("raw", &name)
            .field("owned", &self.inner.owned)
            .finish()
    }
}

impl PartialEq for Stream {
    /// Two `Stream`s are equal when they are the same CUDA stream.
    fn eq(&self, other: &Self) -> bool {
        self.inner.raw == other.inner.raw
    }
}
impl Eq for Stream {}

impl Stream {
    fn wrap(raw: cudaStream_t, owned: bool) -> Self {
        Stream {
            inner: Arc::new(Inner { raw, owned }),
        }
    }

    /// A new stream on the current device, with default flags (it
    /// synchronizes with the legacy default stream).
    ///
    /// # Errors
    /// [`Error::Cuda`](crate::Error::Cuda) when there is no usable device or
    /// the runtime refuses.
    #[doc(alias = "cudaStreamCreate")]
    pub fn new() -> Result<Self> {
        Self::with_flags(StreamFlags::DEFAULT)
    }

    /// A new non-blocking stream on the current device. Work on it does not
    /// wait for the legacy default stream, and synchronous copies (which run
    /// on the legacy default stream) do not wait for it: synchronize it before
    /// a synchronous copy reads what it wrote.
    ///
    /// # Errors
    /// As [`Stream::new`].
    pub fn non_blocking() -> Result<Self> {
        Self::with_flags(StreamFlags::NON_BLOCKING)
    }

    /// A new stream on the current device with `flags`.
    ///
    /// # Errors
    /// As [`Stream::new`].
    #[doc(alias = "cudaStreamCreateWithFlags")]
    pub fn with_flags(flags: StreamFlags) -> Result<Self> {
        let rt = check::cudart()?;
        let mut raw: cudaStream_t = ptr::null_mut();
        // SAFETY: `raw` is a valid, writable out-pointer; flags are plain bits
        // the runtime validates.
        unsafe { cuda_call!(rt, cudaStreamCreateWithFlags(&mut raw, flags.0)) }?;
        Ok(Self::wrap(raw, true))
    }

    /// The legacy default stream (`cudaStreamLegacy`, "stream 0"). Making it
    /// calls nothing, so it works (as a value) with no device at all.
    pub fn legacy() -> Self {
        Self::wrap(cudart::cudaStreamLegacy, false)
    }

    /// The per-thread default stream (`cudaStreamPerThread`).
    pub fn per_thread() -> Self {
        Self::wrap(cudart::cudaStreamPerThread, false)
    }

    /// Wrap a stream someone else owns. It is never destroyed by this crate.
    ///
    /// # Safety
    /// `raw` must be a valid CUDA stream (or one of the special handles:
    /// null, `cudaStreamLegacy`, `cudaStreamPerThread`), and it must stay
    /// valid for as long as this `Stream`, any clone of it, or anything that
    /// keeps one (handles, stream-ordered buffers) is alive.
    pub unsafe fn from_raw(raw: cudaStream_t) -> Self {
        Self::wrap(raw, false)
    }

    /// Take ownership of a stream: it is destroyed when the last clone drops.
    ///
    /// # Safety
    /// `raw` must be a stream created by `cudaStreamCreate*` that nobody else
    /// destroys or uses after this `Stream` (and its clones) are gone.
    pub unsafe fn from_raw_owned(raw: cudaStream_t) -> Self {
        Self::wrap(raw, true)
    }

    /// The raw handle, for calling CUDA directly. Valid while `self` (or a
    /// clone) lives.
    pub fn as_raw(&self) -> cudaStream_t {
        self.inner.raw
    }

    /// Whether this crate destroys the stream when the last clone drops.
    pub fn is_owned(&self) -> bool {
        self.inner.owned
    }

    /// The stream's flags (`cudaStreamGetFlags`), e.g. whether it is
    /// [`StreamFlags::NON_BLOCKING`].
    ///
    /// # Errors
    /// [`Error::Cuda`](crate::Error::Cuda) when the runtime refuses.
    #[doc(alias = "cudaStreamGetFlags")]
    pub fn flags(&self) -> Result<StreamFlags> {
        let rt = check::cudart()?;
        let mut bits: std::ffi::c_uint = 0;
        // SAFETY: `raw` is a valid stream (see `synchronize`); `bits` is a
        // valid, writable out-pointer.
        unsafe { cuda_call!(rt, cudaStreamGetFlags(self.inner.raw, &mut bits)) }?;
        Ok(StreamFlags(bits))
    }

    /// Whether synchronous (legacy default stream) work is *not* ordered
    /// with this stream: a stream created non-blocking. The legacy and
    /// per-thread default streams are ordered with it.
    pub(crate) fn is_non_blocking(&self) -> Result<bool> {
        let r = self.inner.raw;
        if r.is_null() || r == cudart::cudaStreamLegacy || r == cudart::cudaStreamPerThread {
            return Ok(false);
        }
        Ok(self.flags()?.bits() & StreamFlags::NON_BLOCKING.bits() != 0)
    }

    /// Block the calling thread until all work queued on the stream is done.
    ///
    /// # Errors
    /// [`Error::Cuda`](crate::Error::Cuda), also for failures of earlier
    /// asynchronous work on the stream.
    #[doc(alias = "cudaStreamSynchronize")]
    pub fn synchronize(&self) -> Result<()> {
        let rt = check::cudart()?;
        // SAFETY: `raw` is a valid stream (owned, or guaranteed by `from_raw`'s contract).
        unsafe { cuda_call!(rt, cudaStreamSynchronize(self.inner.raw)) }
    }

    /// Whether all work queued on the stream is done (does not block).
    ///
    /// # Errors
    /// [`Error::Cuda`](crate::Error::Cuda) for failures other than "not ready".
    #[doc(alias = "cudaStreamQuery")]
    pub fn query(&self) -> Result<bool> {
        let rt = check::cudart()?;
        // SAFETY: `raw` is a valid stream (see `synchronize`).
        let st = unsafe { rt.cudaStreamQuery(self.inner.raw) }?;
        if st == cudaError::cudaErrorNotReady {
            return Ok(false);
        }
        check::cuda_status(rt, "cudaStreamQuery", st)?;
        Ok(true)
    }

    /// Make later work on this stream wait until `event` completes
    /// (stream-ordered; the host does not block).
    ///
    /// # Errors
    /// [`Error::Cuda`](crate::Error::Cuda) when the runtime refuses.
    #[doc(alias = "cudaStreamWaitEvent")]
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        let rt = check::cudart()?;
        // SAFETY: both handles are valid for the call; flags 0 is the documented default.
        unsafe { cuda_call!(rt, cudaStreamWaitEvent(self.inner.raw, event.as_raw(), 0)) }
    }

    /// Make later work on this stream wait for everything queued on `other`
    /// so far (records a timing-free event on `other` and waits on it).
    ///
    /// # Errors
    /// [`Error::Cuda`](crate::Error::Cuda) when the runtime refuses.
    pub fn wait_for(&self, other: &Stream) -> Result<()> {
        if self == other {
            return Ok(());
        }
        let ev = Event::with_flags(super::EventFlags::DISABLE_TIMING)?;
        ev.record(other)?;
        self.wait_event(&ev)
    }

    /// Destroy the stream now if this is the last clone and it is owned,
    /// reporting the runtime's status; otherwise just drop this clone.
    ///
    /// # Errors
    /// [`Error::Cuda`](crate::Error::Cuda) from `cudaStreamDestroy`.
    #[doc(alias = "cudaStreamDestroy")]
    pub fn destroy(self) -> Result<()> {
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) if inner.owned && !inner.raw.is_null() => {
                inner.owned = false; // Drop must not destroy it again.
                let rt = check::cudart()?;
                // SAFETY: we own `raw` and this was the last reference to it.
                unsafe { cuda_call!(rt, cudaStreamDestroy(inner.raw)) }
            }
            _ => Ok(()),
        }
    }
}
