//! The cuDNN handle: the library context, bound to a stream, with a growable
//! workspace.

use std::fmt;
use std::ptr::{self, NonNull};

use crate::check::{self, cudnn_call};
use crate::error::{Error, Result};
use crate::runtime::{
    Device, DeviceBuffer, DeviceGuard, DeviceSliceMut, Hazard, QueueHold, Stream, check_device,
};
use crate::sys::cudart::Version;
use crate::sys::cudnn::{self as dnn, cudnnContext, cudnnHandle_t};

/// A cuDNN handle (`cudnnHandle_t`), bound to one [`Stream`], owning a
/// workspace that grows on demand.
///
/// Everything queued through the handle runs on its stream, in order; the
/// handle keeps a clone of the stream, so the stream outlives it.
///
/// The handle records the device current at creation
/// ([`device`](Handle::device)). Every op on the handle runs with that
/// device current, whatever device the calling thread has made current
/// (and puts the previous one back), so a handle made on device 1 and used
/// after `Device::new(0)`, or from a new thread, still launches on device 1.
/// Its workspace is allocated there, and algorithm-cache keys use it. The
/// handle's stream and every buffer of an op must belong to that device:
/// otherwise the op fails with [`Error::DeviceMismatch`] before anything is
/// queued. A handle bound to [`Stream::per_thread`] may only be used from
/// the thread that made that stream value ([`Error::WrongThread`]).
///
/// # CUDA graphs
/// Ops on a handle are capture-safe once the workspace is large enough: run
/// the step once eagerly, or call [`reserve_workspace`](Handle::reserve_workspace)
/// with each plan's `workspace_size()`, before
/// [`Stream::capture`]. A workspace growth while the stream is capturing is
/// refused with [`Error::CaptureUnsafe`] (nothing queued, the capture still
/// usable); so is an exhaustive algorithm search.
///
/// # Threads
/// `Send`, not `Sync`: a handle may move to another thread but not be used
/// by two at once (NVIDIA: "Its functions can be called from multiple host
/// threads, so long as the threads do not share the same cuDNN handle
/// simultaneously"). Make one handle per thread (cuDNN recommends it), or
/// put one in a `Mutex`.
pub struct Handle {
    raw: NonNull<cudnnContext>,
    stream: Stream,
    /// The device current when the handle was created.
    device: Device,
    /// Device scratch memory for ops, grown by [`Handle::workspace`]. Only
    /// ever used by work queued on `stream`, so reuse is stream-ordered.
    workspace: DeviceBuffer<u8>,
    /// Whether `Drop` calls `cudnnDestroy` (false after `into_raw`).
    owned: bool,
}

// SAFETY: cuDNN documents (Developer Guide, "Thread Safety"): "The cuDNN library
// is thread-safe. Its functions can be called from multiple host threads, so
// long as the threads do not share the same cuDNN handle simultaneously." Moving
// a handle to another thread hands it over whole (no simultaneous use); `Handle`
// is deliberately not `Sync`, so `&Handle` never reaches two threads. Its stream
// and workspace are `Send`.
unsafe impl Send for Handle {}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("raw", &self.raw)
            .field("stream", &self.stream)
            .field("device", &self.device.ordinal())
            .field("workspace_bytes", &self.workspace.len())
            .finish()
    }
}

impl Handle {
    /// The oldest cuDNN this crate accepts.
    pub const MIN_VERSION: Version = Version::new(8, 9, 0);

    /// The version of the loaded cuDNN (`cudnnGetVersion`; needs no device).
    ///
    /// # Errors
    /// [`Error::Load`] when cuDNN cannot be found.
    #[doc(alias = "cudnnGetVersion")]
    pub fn library_version() -> Result<Version> {
        let api = check::cudnn()?;
        if let Some(v) = api.info().version {
            return Ok(v);
        }
        // SAFETY: cudnnGetVersion takes no arguments and needs no device.
        let v = unsafe { api.cudnnGetVersion() }?;
        Ok(dnn::decode_version(v))
    }

    /// Whether handles can be made with cuDNN `version`: `Ok` for
    /// [`Handle::MIN_VERSION`] (8.9) and newer.
    ///
    /// # Errors
    /// [`Error::Unsupported`] naming the version when it is older.
    pub fn check_supported(version: Version) -> Result<()> {
        if version < Self::MIN_VERSION {
            return Err(Error::Unsupported {
                what: format!("cuDNN {version} (the loaded library)"),
                needs: Some(format!("cuDNN {} or newer", Self::MIN_VERSION)),
            });
        }
        Ok(())
    }

    /// Create a handle on the current device, bound to `stream`, which must
    /// belong to that device.
    ///
    /// # Errors
    /// [`Error::WrongThread`] (first) for another thread's
    /// [`Stream::per_thread`]; [`Error::DeviceMismatch`] for a stream of
    /// another device;
    /// [`Error::Unsupported`] naming the version when the loaded cuDNN is
    /// older than 8.9; [`Error::NoDevice`] without a usable device (cuDNN's
    /// `CUDNN_STATUS_NOT_INITIALIZED` kept in its detail); [`Error::Cudnn`]
    /// from `cudnnCreate` otherwise; [`Error::Load`].
    #[doc(alias = "cudnnCreate")]
    pub fn new(stream: &Stream) -> Result<Self> {
        // Held until the handle is bound: a capture of `stream` does not
        // begin in between.
        let _hold = crate::runtime::check_stream_thread("the stream of a cuDNN handle", stream)?;
        // cudnnCreate allocates and synchronizes: not inside a capture
        // closure on this thread, nor on a capturing stream.
        crate::runtime::forbid_creation_during_capture("dnn::Handle::new", stream)?;
        Self::check_supported(Self::library_version()?)?;
        let api = check::cudnn()?;
        let mut raw: cudnnHandle_t = ptr::null_mut();
        // SAFETY: `raw` is a valid, writable out-pointer.
        // cuDNN says only NOT_INITIALIZED without a device: the runtime is
        // asked why.
        unsafe { cudnn_call!(api, cudnnCreate(&mut raw)) }.map_err(crate::no_device::explain)?;
        let raw = NonNull::new(raw)
            .ok_or_else(|| Error::invalid("handle", "cudnnCreate returned null", "null"))?;
        let device = match Device::current() {
            Ok(d) => d,
            Err(e) => {
                // SAFETY: `raw` was just created and is destroyed once.
                let _ = unsafe { api.cudnnDestroy(raw.as_ptr()) };
                return Err(e);
            }
        };
        // Owned from here on: Drop destroys it if binding the stream fails.
        let mut h = Handle {
            raw,
            stream: stream.clone(),
            device,
            workspace: empty_workspace(),
            owned: true,
        };
        h.bind(stream)?;
        Ok(h)
    }

    /// Take ownership of a handle created elsewhere, and bind it to `stream`.
    /// The device current now is recorded as the handle's device: call this
    /// with the device the handle was created on current.
    ///
    /// On error the raw handle has been destroyed (do not destroy it again).
    ///
    /// # Safety
    /// `raw` must be a valid handle from `cudnnCreate` that nobody else
    /// destroys or uses while this `Handle` lives; it is destroyed on drop.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a null handle; [`Error::Cudnn`] from
    /// `cudnnSetStream`.
    pub unsafe fn from_raw(raw: cudnnHandle_t, stream: &Stream) -> Result<Self> {
        let raw = NonNull::new(raw)
            .ok_or_else(|| Error::invalid("raw", "must be a non-null cudnnHandle_t", "null"))?;
        let device = match Device::current() {
            Ok(d) => d,
            Err(e) => {
                if let Ok(api) = check::cudnn() {
                    // SAFETY: we own `raw` (the caller's contract) and destroy
                    // it once, as the doc promises on error.
                    let _ = unsafe { api.cudnnDestroy(raw.as_ptr()) };
                }
                return Err(e);
            }
        };
        let mut h = Handle {
            raw,
            stream: stream.clone(),
            device,
            workspace: empty_workspace(),
            owned: true,
        };
        h.bind(stream)?;
        Ok(h)
    }

    /// Give up ownership: returns the raw handle, which the caller must
    /// destroy (`cudnnDestroy`), with the [`Stream`] it stays bound to. The
    /// raw handle queues work on that stream until the caller rebinds it
    /// (`cudnnSetStream`): keep the returned `Stream` (or the stream itself)
    /// alive until then, since dropping the last clone of an owned stream
    /// destroys it. The workspace is freed after the work queued on the
    /// handle's stream.
    pub fn into_raw(mut self) -> (cudnnHandle_t, Stream) {
        self.owned = false;
        (self.raw.as_ptr(), self.stream.clone())
    }

    /// The device current when the handle was created. Every op runs with
    /// it current, the workspace is allocated there, and the handle's
    /// stream and the buffers of each op must belong to it.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Prepare to queue work through the handle: check that its stream may
    /// be used from this thread (not another thread's
    /// [`Stream::per_thread`]), then make the handle's device current until
    /// the guard drops (one `cudaGetDevice`, plus a `cudaSetDevice` only when
    /// another device is current, and one to put it back). While the guard
    /// lives the stream counts as being queued on: a [`Stream::capture`] of
    /// it waits (up to 1 s, then refuses) for the guard to drop, so work
    /// queued under it never joins a capture begun meanwhile; do not hold
    /// it across a capture of the same stream. Every op of the
    /// crate does this; call it before using [`as_raw`](Handle::as_raw) with
    /// cuDNN directly.
    ///
    /// # Errors
    /// [`Error::WrongThread`]; [`Error::Cuda`] when the device cannot be
    /// made current.
    pub fn enter(&self) -> Result<DeviceGuard> {
        let hold =
            crate::runtime::check_stream_thread("the stream of a cuDNN handle", self.stream())?;
        Ok(self.device.guard()?.holding(hold))
    }

    /// [`enter`](Handle::enter), after checking that every buffer of the op
    /// `op` is on the handle's device.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] naming the first buffer on another device;
    /// as [`enter`](Handle::enter).
    #[cfg_attr(not(any(feature = "dnn", feature = "graph")), allow(dead_code))]
    pub(crate) fn launch(&self, op: &str, args: &[(&str, Option<Device>)]) -> Result<DeviceGuard> {
        crate::runtime::check_args(op, self.device, args)?;
        self.enter()
    }

    /// The raw handle, for calling cuDNN directly. Valid while `self` lives.
    pub fn as_raw(&self) -> cudnnHandle_t {
        self.raw.as_ptr()
    }

    /// The stream the handle queues work on.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    fn bind(&mut self, stream: &Stream) -> Result<()> {
        let _hold = check_stream(self.device, stream)?;
        let api = check::cudnn()?;
        // SAFETY: the handle is valid and `stream` is alive (and stays alive: we
        // keep a clone).
        unsafe { cudnn_call!(api, cudnnSetStream(self.raw.as_ptr(), stream.as_raw())) }?;
        self.stream = stream.clone();
        Ok(())
    }

    /// Queue later work on `stream`. Work on the new stream first waits for
    /// everything already queued on the old one (it may still be using the
    /// workspace, or scratch cuDNN keeps in the handle), so reuse stays
    /// ordered.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] for a stream of another device and
    /// [`Error::WrongThread`] for another thread's per-thread stream (the
    /// handle is unchanged); [`Error::Cudnn`] from `cudnnSetStream`;
    /// [`Error::Cuda`] from the ordering event; [`Error::CaptureUnsafe`]
    /// when the streams differ and either is being captured.
    #[doc(alias = "cudnnSetStream")]
    pub fn set_stream(&mut self, stream: &Stream) -> Result<()> {
        // Held through the ordering wait queued on `stream` and the bind.
        let _hold = check_stream(self.device, stream)?;
        // Always, not only with a workspace: cuDNN may keep scratch of its
        // own in the handle (an audit's point; one event per change).
        stream.order_resource_after(
            &self.stream,
            "dnn::Handle::set_stream",
            "the cuDNN handle's workspace",
        )?;
        self.bind(stream)
    }

    /// A workspace of at least `bytes` bytes, for the next op queued on the
    /// handle's stream. Grows (never shrinks) on demand, on the handle's
    /// device; growing frees the old one after the work queued on the
    /// handle's stream (which may still use it). `bytes == 0` gives an empty
    /// view (null pointer) and allocates nothing.
    ///
    /// The view borrows the handle mutably; get the raw handle first
    /// (`let h = handle.as_raw();`) to pass both to cuDNN.
    ///
    /// Crate-private: the view could otherwise be written from another stream
    /// while a kernel on the handle's stream still reads it (cuDNN keeps
    /// indices there). Users grow it with [`reserve_workspace`](Self::reserve_workspace).
    ///
    /// # Errors
    /// [`Error::Cuda`] when the allocation fails (e.g. out of memory).
    pub(crate) fn workspace(&mut self, bytes: usize) -> Result<DeviceSliceMut<'_, u8>> {
        if bytes > self.workspace.len() {
            // Growing is a cudaMalloc (and a free after a synchronize):
            // refused while the stream is capturing, and inside any capture
            // scope on this thread, before the old workspace is released.
            let hazard = Hazard::WorkspaceGrowth {
                owner: "cuDNN",
                have: self.workspace.len(),
                need: bytes,
            };
            crate::runtime::forbid_allocation_during_capture("a cuDNN op", &self.stream, hazard)?;
            // Release the old one first, so both never need to fit at once.
            let old = std::mem::replace(&mut self.workspace, empty_workspace());
            old.destroy_after(&self.stream)?;
            let _on = self.device.guard()?;
            self.workspace = DeviceBuffer::alloc(bytes).map_err(|e| {
                e.with_context(format!("growing the cuDNN workspace to {bytes} bytes"))
            })?;
        }
        self.workspace.slice_mut(..bytes)
    }

    /// Grow the workspace to at least `bytes` now (it never shrinks), so that
    /// later ops need no allocation.
    ///
    /// # Errors
    /// [`Error::Cuda`] when the allocation fails (e.g. out of memory);
    /// [`Error::CaptureUnsafe`] when it would grow while the handle's stream
    /// is capturing a CUDA graph (reserve before the capture).
    pub fn reserve_workspace(&mut self, bytes: usize) -> Result<()> {
        self.workspace(bytes).map(|_| ())
    }

    /// Bytes currently held as workspace.
    pub fn workspace_size(&self) -> usize {
        self.workspace.len()
    }

    /// Free the workspace after the work queued on the handle's stream; it
    /// is allocated again on demand.
    ///
    /// # Errors
    /// [`Error::Cuda`] from the stream synchronize or `cudaFree`.
    pub fn release_workspace(&mut self) -> Result<()> {
        std::mem::replace(&mut self.workspace, empty_workspace()).destroy_after(&self.stream)
    }

    /// Destroy the handle now, reporting cuDNN's status.
    ///
    /// # Errors
    /// [`Error::Cudnn`] from `cudnnDestroy`; [`Error::Cuda`] from freeing the workspace.
    #[doc(alias = "cudnnDestroy")]
    pub fn destroy(mut self) -> Result<()> {
        self.owned = false;
        let _on = self.device.guard()?;
        let api = check::cudnn()?;
        // SAFETY: we own the handle; `owned` is cleared so Drop will not destroy
        // it again. The workspace is freed after (by `release_workspace`).
        let r = unsafe { cudnn_call!(api, cudnnDestroy(self.raw.as_ptr())) };
        let w = self.release_workspace();
        r.and(w)
    }
}

/// A handle of `device` may only be bound to a stream of `device`, usable
/// from this thread; the hold counts the caller as queueing on it.
fn check_stream(device: Device, stream: &Stream) -> Result<QueueHold> {
    let hold = crate::runtime::check_stream_thread("the stream of a cuDNN handle", stream)?;
    check_device(
        || "the stream of a cuDNN handle".to_string(),
        device,
        stream.device(),
    )?;
    Ok(hold)
}

fn empty_workspace() -> DeviceBuffer<u8> {
    // SAFETY: a null pointer with length 0 is the documented empty buffer; nothing is freed.
    unsafe { DeviceBuffer::from_raw(ptr::null_mut(), 0) }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // On the handle's device (nothing changes if that fails).
        let _on = self.device.guard();
        if self.owned
            && let Ok(api) = check::cudnn()
        {
            // SAFETY: we own the handle and destroy it once. The status is
            // ignored: Drop must not fail.
            let _ = unsafe { api.cudnnDestroy(self.raw.as_ptr()) };
        }
        // After the work queued on the handle's stream; ignored on failure.
        let _ =
            std::mem::replace(&mut self.workspace, empty_workspace()).destroy_after(&self.stream);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::hold_check::{PretendCurrent, assert_enter_holds_the_stream};

    /// A capture's beginning waits while the guard of `Handle::enter` (the
    /// entry of every cuDNN op, through `launch`) lives: work queued under
    /// it never joins a capture begun meanwhile. No CUDA call: a pretended
    /// current device, a handle value that is never destroyed.
    #[test]
    fn unit_enter_guard_holds_the_stream() {
        let _dev = PretendCurrent::device(3);
        let stream = Stream::fake_for_tests(0x3100);
        let h = Handle {
            raw: NonNull::dangling(),
            stream: stream.clone(),
            device: Device::from_runtime(3),
            workspace: empty_workspace(),
            owned: false,
        };
        assert_enter_holds_the_stream(&stream, || h.enter());
        assert_enter_holds_the_stream(&stream, || h.launch("op", &[("x", None)]));
        // Its drop would queue the (empty) workspace's free: nothing to do.
        std::mem::forget(h);
    }
}
