//! cudarc streams as this crate's [`Stream`].

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use ::cudarc::driver::{CudaContext, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr};

use super::driver::{device_of, guarded};
use super::memory::{CudarcRead, CudarcWrite};
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::runtime::{Device, Stream};
use crate::sys::cudart::cudaStream_t;

/// Make `ctx` current on the calling thread the way every launch of this
/// crate does (the runtime's `cudaSetDevice`, after cudarc's own
/// `bind_to_thread`), and check that the driver then reports `ctx` as the
/// current context: the proof that the runtime API calls of this crate and
/// cudarc's driver API calls work in one context.
///
/// # Errors
/// [`Error::InvalidArgument`] for a non-primary cudarc context;
/// [`Error::Driver`], [`Error::Cuda`]; [`Error::Unsupported`] when the
/// runtime's context is not cudarc's.
pub(crate) fn bind(ctx: &CudaContext) -> Result<Device> {
    if !ctx.is_primary() {
        return Err(Error::invalid(
            "stream",
            "must belong to a primary cudarc context (`CudaContext::new`): this crate's \
             CUDA runtime calls run in each device's primary context",
            "a non-primary context",
        ));
    }
    guarded("cudarc CudaContext::bind_to_thread", || {
        ctx.bind_to_thread()
    })?;
    let device = device_of(ctx)?;
    device.set_current()?;
    let current = guarded(
        "cuCtxGetCurrent",
        ::cudarc::driver::result::ctx::get_current,
    )?;
    if current != Some(ctx.cu_ctx()) {
        return Err(Error::Unsupported {
            what: format!(
                "cudarc context of device {} is not the context the CUDA runtime makes current \
                 for that device (driver reports {current:?}, cudarc holds {:?})",
                ctx.ordinal(),
                ctx.cu_ctx()
            ),
            needs: Some("a primary cudarc context (`CudaContext::new`)".to_string()),
        });
    }
    Ok(device)
}

/// A cudarc stream usable wherever this crate takes a [`Stream`].
///
/// It derefs to a [`Stream`] (so `dnn::Handle::new(&s)`,
/// `blas::Handle::new(&s)`, graph plans, collectives all take it) that
/// names cudarc's `CUstream`, records its device (the launch-time device
/// checks apply), is never destroyed by this crate, and keeps cudarc's
/// `Arc<CudaStream>` (and so its context) alive for as long as any clone of
/// that [`Stream`] lives — a handle bound to it included.
///
/// It is never captured by [`Stream::capture`] (refused: cudarc's own
/// allocations, frees and event records on it would become graph nodes
/// behind ordinary `CudaSlice`s), and the crate queues nothing on it while
/// cudarc captures it ([`Error::CaptureUnsafe`]). The exception is an
/// owned capture ([`begin_owned_capture`](Self::begin_owned_capture),
/// `unsafe`): begun and ended by this crate, its graph launched only
/// through [`OwnedGraph`](super::OwnedGraph). Inside a
/// [`Stream::capture`] closure of another stream, work on it runs at once,
/// outside the graph.
///
/// Memory of cudarc enters this crate's ops through [`read`](Self::read) and
/// [`write`](Self::write), which go through cudarc's own
/// `DevicePtr`/`DevicePtrMut` *on this stream*, so cudarc's event tracking
/// orders the crate's work with work on cudarc's other streams. Both are
/// `unsafe`: the ops that use a guard must be queued on this stream (a
/// handle bound to it) and the guard must drop, which the compiler cannot
/// check (see [`read`](Self::read)).
#[derive(Clone)]
pub struct CudarcStream {
    cudarc: Arc<CudaStream>,
    stream: Stream,
}

impl fmt::Debug for CudarcStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudarcStream")
            .field("stream", &self.stream)
            .field("ordinal", &self.cudarc.context().ordinal())
            .finish()
    }
}

impl CudarcStream {
    /// Borrow cudarc's stream `s`: bind its context (see the module docs),
    /// check it is the context the CUDA runtime uses, and wrap the stream
    /// without taking ownership.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a stream of a non-primary context;
    /// [`Error::Unsupported`] when the runtime's current context is not
    /// cudarc's; [`Error::Driver`] / [`Error::Cuda`] from the calls.
    pub fn new(s: &Arc<CudaStream>) -> Result<Self> {
        let device = bind(s.context())?;
        let raw: cudaStream_t = s.cu_stream().cast();
        let keep: Arc<dyn std::any::Any + Send + Sync> = s.clone();
        Ok(CudarcStream {
            cudarc: s.clone(),
            stream: Stream::wrap_kept(raw, false, Some(device), Some(keep), Some("cudarc")),
        })
    }

    /// This crate's view of the stream.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// cudarc's stream.
    pub fn cudarc(&self) -> &Arc<CudaStream> {
        &self.cudarc
    }

    /// Make the stream's context current on the calling thread (and check it
    /// is the runtime's), as [`new`](Self::new) did; for a thread other than
    /// the one that made this value.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn bind_to_thread(&self) -> Result<()> {
        bind(self.cudarc.context()).map(|_| ())
    }

    /// Lend cudarc memory (`CudaSlice`, `CudaView`, `CudaViewMut`) to this
    /// crate's ops for reading, through cudarc's `DevicePtr::device_ptr` on
    /// this stream (the stream first waits for cudarc's last write of it).
    /// The guard's [`view`](CudarcRead::view) (or `&guard`) is a
    /// [`DeviceSlice`](crate::runtime::DeviceSlice) every op accepts; when
    /// the guard drops, cudarc records the read on this stream, so drop it
    /// after the ops (and plan bindings) that use it are enqueued — the
    /// borrow checker makes sure of that.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for memory of another cudarc context than
    /// this stream's, or a device address or size this host cannot
    /// represent; [`Error::Driver`] from cudarc's event calls.
    ///
    /// # Safety
    /// cudarc orders its other streams and its free of `src` after this
    /// crate's work only through the event the guard records on *this*
    /// stream when it drops. The borrow checker keeps `src` alive while the
    /// guard lives, but it cannot see which stream a view is used on, nor
    /// a guard that never drops. So the caller must:
    /// - queue every piece of device work that uses the guard's views on
    ///   this stream (ops of a `dnn`/`blas` handle bound to it, plans
    ///   executed with such a handle, collectives given this stream), or
    ///   make this stream wait for any other stream that used them
    ///   ([`Stream::wait_for`], an event) before the guard drops;
    /// - let the guard drop: never leak it (`std::mem::forget`,
    ///   `Box::leak`, an `Rc` cycle) while cudarc can still use or free
    ///   `src` on another stream.
    /// - not make or drop the guard, nor queue work that uses its views,
    ///   while this stream (or a stream the work goes to) is being captured
    ///   into a CUDA graph (cudarc's `begin_capture`, another library's
    ///   capture): cudarc's wait and event record would be captured instead
    ///   of ordering anything now, its later waits for that event fail
    ///   (silently, in its stored error), and the graph keeps the address
    ///   for launches after `src` is freed. This crate refuses its own work
    ///   on a cudarc stream while it is capturing and never captures one
    ///   ([`Error::CaptureUnsafe`], [`Error::InvalidArgument`]), but it
    ///   cannot see cudarc's capture of a stream it does not wrap;
    /// - pass memory whose `DevicePtr` / `DeviceSlice` answers are true: an
    ///   allocation of `src.len()` elements at the address `device_ptr`
    ///   returns, alive while `src` is (cudarc's own types are; the traits
    ///   are safe to implement, so another type's answers are the
    ///   caller's to vouch for; [`scope`](Self::scope) takes cudarc's types
    ///   only, [`CudarcMemory`](super::CudarcMemory)).
    ///
    /// Otherwise the device may read memory cudarc has freed or is
    /// rewriting. (cudarc keeps one read event per allocation, re-recorded
    /// by each reader: memory read through guards of two different streams
    /// at once is, as in cudarc itself, waited for by a later cudarc write
    /// only on the stream whose guard dropped last.
    /// [`scope`](Self::scope) has none of these conditions.) (The crate's own stream-ordered allocation is `unsafe`
    /// for the same reason: [`DeviceBuffer::alloc_async`](crate::runtime::DeviceBuffer::alloc_async).)
    pub unsafe fn read<'a, T, S>(&'a self, src: &'a S) -> Result<CudarcRead<'a, T>>
    where
        T: DataType + DeviceRepr,
        S: DevicePtr<T>,
    {
        // SAFETY: the caller keeps this function's contract, which is
        // `CudarcRead::new`'s for this stream.
        unsafe { CudarcRead::new(src, &self.cudarc) }
    }

    /// Lend cudarc memory (`CudaSlice`, `CudaViewMut`) to this crate's ops
    /// for writing, through cudarc's `DevicePtrMut::device_ptr_mut` on this
    /// stream (which first waits for cudarc's last reads and writes of it).
    /// The guard lends a [`DeviceSliceMut`](crate::runtime::DeviceSliceMut)
    /// ([`view_mut`](CudarcWrite::view_mut) or `&mut guard`); when it drops,
    /// cudarc records the write on this stream.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    ///
    /// # Safety
    /// As [`read`](Self::read): the work that uses the guard's views is
    /// queued on this stream (or ordered before it), the guard drops,
    /// neither happens while the stream is being captured, and `dst`'s
    /// `DevicePtrMut` / `DeviceSlice` answers are true.
    pub unsafe fn write<'a, T, S>(&'a self, dst: &'a mut S) -> Result<CudarcWrite<'a, T>>
    where
        T: DataType + DeviceRepr,
        S: DevicePtrMut<T>,
    {
        // SAFETY: the caller keeps this function's contract, which is
        // `CudarcWrite::new`'s for this stream.
        unsafe { CudarcWrite::new(dst, &self.cudarc) }
    }
}

impl Deref for CudarcStream {
    type Target = Stream;
    fn deref(&self) -> &Stream {
        &self.stream
    }
}

impl AsRef<Stream> for CudarcStream {
    fn as_ref(&self) -> &Stream {
        &self.stream
    }
}

impl Stream {
    /// This crate's [`Stream`] for cudarc's stream `s` (the `Stream` of
    /// [`CudarcStream::new`]): never destroyed by this crate, keeps `s`
    /// alive while any clone lives, device recorded.
    ///
    /// # Errors
    /// As [`CudarcStream::new`].
    pub fn from_cudarc(s: &Arc<CudaStream>) -> Result<Stream> {
        CudarcStream::new(s).map(|c| c.stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A borrowed stream value keeps its owner alive until the last clone
    /// drops, and never destroys the raw stream (not owned). No device is
    /// touched: the value is only made, cloned and dropped.
    #[test]
    fn unit_borrowed_stream_keeps_its_owner() {
        let owner: Arc<dyn std::any::Any + Send + Sync> = Arc::new(7u32);
        let weak = Arc::downgrade(&owner);
        // A made-up handle: never enqueued on, and not owned (no destroy).
        let raw = std::ptr::NonNull::<u8>::dangling().as_ptr().cast();
        let d = Device::from_runtime(0);
        let s = Stream::wrap_kept(raw, false, Some(d), Some(owner), None);
        let c = s.clone();
        assert!(!s.is_owned());
        assert_eq!(s.device(), Some(d));
        assert_eq!(s.as_raw(), raw);
        drop(s);
        assert!(weak.upgrade().is_some(), "a clone still keeps the owner");
        drop(c);
        assert!(
            weak.upgrade().is_none(),
            "the last clone released the owner"
        );
    }
}
