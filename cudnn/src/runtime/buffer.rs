//! Owned device memory: [`DeviceBuffer`]. The overview of the memory types
//! (stream ordering, what must outlive what) is on [`DeviceBuffer`].

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::mem;
use std::ops::RangeBounds;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::check::{self, cuda_call};
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::sys::cudart::cudaMemcpyKind;

use super::copy::*;
use super::views::*;
use super::{Device, Stream};

// ---------------------------------------------------------------------------
// DeviceBuffer

/// How a buffer's memory is released.
enum Owner {
    /// Nothing to release (length 0, null pointer).
    Empty,
    /// `cudaMalloc`: released with `cudaFree`.
    Malloc,
    /// `cudaMallocAsync`: released with `cudaFreeAsync` on this stream.
    Pool(Stream),
}

/// Owned device memory holding `len` elements of `T`; freed on drop.
///
/// Dropping never panics: a failing free is ignored. Call
/// [`destroy`](DeviceBuffer::destroy) to see its status.
///
/// # Types
/// - [`DeviceBuffer<T>`]: owned device memory (`cudaMalloc`, or stream-ordered
///   `cudaMallocAsync`), freed on drop.
/// - [`DeviceSlice<'a, T>`] / [`DeviceSliceMut<'a, T>`]: borrowed views of
///   device memory, like `&[T]` / `&mut [T]`. Sub-ranges come from `slice`
///   and `slice_mut`, which check the range and return an error, never panic.
///   Views over memory someone else owns come from the `unsafe`
///   `from_raw_parts` constructors.
/// - [`HostBuffer<T>`](crate::runtime::HostBuffer): pinned (page-locked) host memory (`cudaMallocHost`),
///   which DMA reads and writes directly, so copies from and to it are truly
///   asynchronous.
///
/// Every length is an element count; byte sizes are computed with an overflow
/// check (a length whose byte size does not fit in `isize` is an
/// [`Error::InvalidArgument`]). Length 0 always works: it allocates nothing
/// (the pointer is null), and copies and memsets of it call nothing.
///
/// # Which operations are stream-ordered
/// - **Synchronous** (run on the legacy default stream and return when the
///   data has landed: host-to-device, device-to-device copies and memsets
///   wait for that stream before returning, so work queued next on any
///   stream, non-blocking ones included, sees the result):
///   [`DeviceBuffer::alloc`]/[`zeroed`](DeviceBuffer::zeroed)/[`from_host`](DeviceBuffer::from_host),
///   `copy_from_host`, `copy_to_host`, `to_vec`, `copy_from_device`, `memset`.
///   They wait for work on *blocking* streams, but not for work on
///   non-blocking ones ([`Stream::non_blocking`]): synchronize such a stream
///   before a synchronous copy reads what it wrote.
/// - **Stream-ordered** (queued on a [`Stream`]; the host does not wait):
///   `copy_from_device_async`, `memset_async`, the `unsafe`
///   [`DeviceBuffer::alloc_async`] and the free of a buffer allocated that
///   way, and the host↔device copies of a [`Stream::scope`].
///
/// # What must outlive what, and how it is enforced
/// - **A stream outlives everything queued on it.** [`Stream`] is a shared
///   handle; a stream-ordered buffer keeps a clone (it is freed on that
///   stream), as do the cuDNN and cuBLAS handles.
/// - **Device memory outlives device work that uses it.** A buffer from
///   `cudaMalloc` is released with `cudaFree`, which waits for the device
///   ("Managing memory allocations using cudaMalloc and cudaFree causes GPU to
///   synchronize across all executing CUDA streams", CUDA Programming Guide,
///   stream-ordered memory allocator). A stream-ordered buffer is freed on its
///   own stream, after the work queued there; work on *other* streams that
///   uses it must be ordered before its drop ([`Stream::wait_for`], an
///   [`Event`](crate::runtime::Event), or a synchronize). The safe API cannot
///   see other streams' use, so that allocation is `unsafe`
///   ([`DeviceBuffer::alloc_async`]) and states this contract.
/// - **Host memory outlives the DMA that reads or writes it.** This is the one
///   that can corrupt the Rust heap, so the safe API makes it impossible to
///   get wrong: asynchronous host↔device copies exist only inside
///   [`Stream::scope`]. The host side is borrowed for the scope's `'env`
///   lifetime (shared for uploads, exclusive for downloads), and `scope`
///   synchronizes the stream before it returns — also when the closure fails
///   or panics — so no borrow ends while a copy is in flight. Unlike a guard
///   object whose `Drop` synchronizes, nothing here can be leaked with
///   `mem::forget` to end the borrow early: the synchronization is in
///   `scope`'s own frame. Pinned memory ([`HostBuffer`](crate::runtime::HostBuffer), which derefs to a
///   slice) makes these copies truly asynchronous; pageable memory works too
///   but the runtime stages it.
pub struct DeviceBuffer<T: DataType> {
    ptr: *mut T,
    len: usize,
    /// The device the memory was allocated on (`None` when empty).
    device: Option<Device>,
    owner: Owner,
    /// A stream-ordered allocation on a non-blocking stream that no
    /// synchronous method has waited for yet (see [`DeviceBuffer::alloc_async`]).
    alloc_pending: AtomicBool,
}

// SAFETY: the buffer uniquely owns its device allocation (like `Vec<T>`, with
// `T: Send`); the host never dereferences the pointer, and the runtime's
// allocation and copy calls are thread-safe, so it may move to another thread
// and be freed there.
unsafe impl<T: DataType> Send for DeviceBuffer<T> {}
// SAFETY: `&DeviceBuffer` only allows reads of the device memory (copies out),
// which the runtime performs thread-safely.
unsafe impl<T: DataType> Sync for DeviceBuffer<T> {}

impl<T: DataType> fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.owner {
            Owner::Empty => "empty",
            Owner::Malloc => "cudaMalloc",
            Owner::Pool(_) => "cudaMallocAsync",
        };
        write!(
            f,
            "DeviceBuffer<{}> {{ ptr: {:p}, len: {}, alloc: {kind} }}",
            T::NAME,
            self.ptr,
            self.len
        )
    }
}

impl<T: DataType> DeviceBuffer<T> {
    fn empty() -> Self {
        DeviceBuffer {
            ptr: ptr::null_mut(),
            len: 0,
            device: None,
            owner: Owner::Empty,
            alloc_pending: AtomicBool::new(false),
        }
    }

    /// Allocate `len` elements on the current device (recorded as the
    /// buffer's [`device`](DeviceBuffer::device)). The contents are
    /// unspecified (but every bit pattern is a valid `T`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the byte size overflows;
    /// [`Error::NoDevice`] without a usable device (the size in its detail);
    /// [`Error::Cuda`] (e.g. out of memory); [`Error::CaptureUnsafe`] inside a
    /// [`Stream::capture`] closure (allocate before the capture).
    #[doc(alias = "cudaMalloc")]
    pub fn alloc(len: usize) -> Result<Self> {
        let bytes = byte_len::<T>(len)?;
        if bytes == 0 {
            return Ok(Self::empty());
        }
        super::capture::forbid_in_capture_scope("DeviceBuffer::alloc", super::Hazard::Allocation)?;
        let rt = check::cudart()?;
        let mut p: *mut c_void = ptr::null_mut();
        // SAFETY: `p` is a valid, writable out-pointer; `bytes` is non-zero.
        unsafe { cuda_call!(rt, cudaMalloc(&mut p, bytes)) }.map_err(|e| {
            e.with_context(format!("allocating {len} x {} ({bytes} bytes)", T::NAME))
        })?;
        // The allocation succeeded, so the current device can be read; if
        // not, free it rather than keep memory whose device is unknown.
        let device = match Device::current() {
            Ok(d) => d,
            Err(e) => {
                // SAFETY: `p` came from the cudaMalloc above and is freed once.
                let _ = unsafe { rt.cudaFree(p) };
                return Err(e);
            }
        };
        Ok(DeviceBuffer {
            ptr: p.cast(),
            len,
            device: Some(device),
            owner: Owner::Malloc,
            alloc_pending: AtomicBool::new(false),
        })
    }

    /// Allocate `len` zeroed elements.
    ///
    /// # Errors
    /// As [`DeviceBuffer::alloc`].
    pub fn zeroed(len: usize) -> Result<Self> {
        let mut b = Self::alloc(len)?;
        b.memset(0)?;
        Ok(b)
    }

    /// Allocate and fill from a host slice (synchronous).
    ///
    /// # Errors
    /// As [`DeviceBuffer::alloc`].
    #[doc(alias = "from_slice")]
    pub fn from_host(src: &[T]) -> Result<Self> {
        let mut b = Self::alloc(src.len())?;
        b.copy_from_host(src)?;
        Ok(b)
    }

    /// Stream-ordered allocation on `stream`'s device: the memory may be used
    /// by work queued on `stream` after this call, and is freed on `stream`
    /// when the buffer is dropped (the buffer keeps a clone of the stream).
    ///
    /// # Safety
    /// The memory exists for the device only once the allocation has
    /// completed *on `stream`*; before that it may still be in use by work
    /// that freed it earlier. So:
    /// - **Before the allocation completes**, nothing may touch the memory
    ///   except work queued on `stream` after this call (or ordered after it,
    ///   with [`Stream::wait_for`] or an event). That includes the crate's
    ///   *synchronous* operations, which run on the legacy default stream: a
    ///   blocking `stream` is ordered with it, a non-blocking one is not. The
    ///   buffer's own synchronous methods (`copy_from_host`, `copy_to_host`,
    ///   `to_vec`, `copy_from_device`, `memset`, `try_clone`) first wait for
    ///   the allocation when `stream` is non-blocking, so they are safe;
    ///   synchronous methods of *views* taken from it ([`as_slice`](DeviceBuffer::as_slice),
    ///   [`slice_mut`](DeviceBuffer::slice_mut), ...) and work on other
    ///   streams do not wait: order them yourself.
    /// - **Before the buffer is dropped**, any work queued on *another*
    ///   stream that uses this buffer (a cuDNN or cuBLAS op on a handle bound
    ///   to another stream, a `*_async` copy on another stream) must be
    ///   ordered before `stream`'s later work, e.g. with `stream.wait_for(&other)`
    ///   after the last such use, since the free is queued on `stream` only;
    ///   otherwise the device may use freed memory (or free with
    ///   [`destroy_after`](DeviceBuffer::destroy_after) on the last user's stream).
    /// - **No capture of `stream` begins during this call** (from another
    ///   thread sharing the stream): a capture that is already running is
    ///   refused with [`Error::CaptureUnsafe`], but one that begins between
    ///   that check and the allocation would record the allocation into its
    ///   graph, and the memory would exist only while that graph runs.
    ///
    /// Buffers from [`DeviceBuffer::alloc`] have no such contract.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the device or driver has no memory pools;
    /// [`Error::InvalidArgument`] when the byte size overflows; [`Error::Cuda`];
    /// [`Error::CaptureUnsafe`] while `stream` is being captured into a CUDA
    /// graph (the allocation would belong to the graph).
    #[doc(alias = "cudaMallocAsync")]
    pub unsafe fn alloc_async(len: usize, stream: &Stream) -> Result<Self> {
        let bytes = byte_len::<T>(len)?;
        if bytes == 0 {
            return Ok(Self::empty());
        }
        // On a capturing stream `cudaMallocAsync` would become an allocation
        // node of the graph: its address is backed only while a launch of
        // that graph runs, so this buffer's own synchronous methods would
        // touch unmapped memory. Refused (a host-only query).
        super::stream_capture::forbid_during_capture(
            "DeviceBuffer::alloc_async",
            stream,
            super::Hazard::Allocation,
        )?;
        let rt = check::cudart()?;
        // The memory comes from the pool of the stream's device: make it
        // current for the allocation, and record it.
        let _on = stream.enter("the stream of a stream-ordered allocation")?;
        let device = match stream.device() {
            Some(d) => d,
            None => Device::current()?,
        };
        let unsupported = || Error::Unsupported {
            what: format!(
                "stream-ordered allocation (cudaMallocAsync) on device {}",
                device.ordinal()
            ),
            needs: Some(
                "a device and driver with memory pools (cudaDevAttrMemoryPoolsSupported)".into(),
            ),
        };
        if !rt.has_symbol("cudaMallocAsync")
            || !rt.has_symbol("cudaFreeAsync")
            || !device.supports_memory_pools()?
        {
            return Err(unsupported());
        }
        let mut p: *mut c_void = ptr::null_mut();
        let pending = stream.is_non_blocking()?;
        // SAFETY: `p` is a valid out-pointer, `bytes` is non-zero and the stream is valid.
        match unsafe { cuda_call!(rt, cudaMallocAsync(&mut p, bytes, stream.as_raw())) } {
            Ok(()) => Ok(DeviceBuffer {
                ptr: p.cast(),
                len,
                device: Some(device),
                owner: Owner::Pool(stream.clone()),
                alloc_pending: AtomicBool::new(pending),
            }),
            Err(Error::Cuda { code, .. })
                if code == crate::sys::cudart::cudaError::cudaErrorNotSupported.0 =>
            {
                Err(unsupported())
            }
            Err(e) => Err(e.with_context(format!(
                "allocating {len} x {} ({bytes} bytes) on a stream",
                T::NAME
            ))),
        }
    }

    /// Stream-ordered allocation, zeroed on `stream`.
    ///
    /// # Safety
    /// As [`DeviceBuffer::alloc_async`].
    ///
    /// # Errors
    /// As [`DeviceBuffer::alloc_async`].
    pub unsafe fn zeroed_async(len: usize, stream: &Stream) -> Result<Self> {
        // SAFETY: the caller takes on alloc_async's contract for the result.
        let mut b = unsafe { Self::alloc_async(len, stream) }?;
        b.memset_async(0, stream)?;
        Ok(b)
    }

    /// Take ownership of memory from `cudaMalloc` (freed with `cudaFree` on
    /// drop). The device current now is recorded as the buffer's
    /// [`device`](DeviceBuffer::device).
    ///
    /// # Safety
    /// `ptr` was returned by `cudaMalloc` (not offset) on the device current
    /// now, for at least `len * size_of::<T>()` bytes, is aligned for `T`,
    /// and nobody else frees or keeps using it. It may be null only when
    /// `len` is 0.
    pub unsafe fn from_raw(ptr: *mut T, len: usize) -> Self {
        if ptr.is_null() {
            return Self::empty();
        }
        DeviceBuffer {
            ptr,
            len,
            device: Device::current().ok(),
            owner: Owner::Malloc,
            alloc_pending: AtomicBool::new(false),
        }
    }

    /// Give up ownership: returns the pointer and length; the caller frees
    /// the memory (`cudaFree` works for both kinds of allocation).
    pub fn into_raw(self) -> (*mut T, usize) {
        let me = mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never used or dropped again; moving the owner out
        // drops its stream clone (if any) exactly once.
        let _owner = unsafe { ptr::read(&me.owner) };
        (me.ptr, me.len)
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size in bytes.
    pub fn byte_len(&self) -> usize {
        self.len * T::SIZE
    }

    /// The device the memory was allocated on; `None` for an empty buffer,
    /// which holds no memory (and so agrees with any device). Launches check
    /// that their buffers, handle, stream and communicator agree on it
    /// ([`Error::DeviceMismatch`]).
    pub fn device(&self) -> Option<Device> {
        self.device
    }

    /// Whether the memory came from stream-ordered allocation.
    pub fn is_stream_ordered(&self) -> bool {
        matches!(self.owner, Owner::Pool(_))
    }

    /// Before a synchronous (legacy default stream) operation: wait for a
    /// stream-ordered allocation on a non-blocking stream, once.
    fn settle(&self) -> Result<()> {
        if self.alloc_pending.load(Ordering::Acquire)
            && let Owner::Pool(stream) = &self.owner
        {
            stream
                .synchronize()
                .map_err(|e| e.with_context("waiting for a stream-ordered allocation"))?;
            self.alloc_pending.store(false, Ordering::Release);
        }
        Ok(())
    }

    /// The device pointer (null when empty).
    pub fn as_ptr(&self) -> *const T {
        self.ptr
    }

    /// The device pointer, for writing.
    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.ptr
    }

    /// The device pointer, untyped, for library calls.
    pub fn as_raw(&self) -> *const c_void {
        self.ptr.cast()
    }

    /// The device pointer, untyped, for writing.
    pub fn as_raw_mut(&mut self) -> *mut c_void {
        self.ptr.cast()
    }

    /// A read-only view of the whole buffer.
    pub fn as_slice(&self) -> DeviceSlice<'_, T> {
        DeviceSlice {
            ptr: self.ptr,
            len: self.len,
            device: self.device,
            _borrow: PhantomData,
        }
    }

    /// A writable view of the whole buffer.
    pub fn as_slice_mut(&mut self) -> DeviceSliceMut<'_, T> {
        DeviceSliceMut {
            ptr: self.ptr,
            len: self.len,
            device: self.device,
            _borrow: PhantomData,
        }
    }

    /// The read-only sub-view `range`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the range and the length.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DeviceSlice<'_, T>> {
        self.as_slice().slice(range)
    }

    /// The writable sub-view `range`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the range and the length.
    pub fn slice_mut(&mut self, range: impl RangeBounds<usize>) -> Result<DeviceSliceMut<'_, T>> {
        self.as_slice_mut().into_slice_mut(range)
    }

    /// Copy from host memory (synchronous); lengths must be equal.
    ///
    /// # Errors
    /// [`Error::Mismatch`] naming both lengths; [`Error::Cuda`].
    #[doc(alias = "cudaMemcpy")]
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        self.settle()?;
        self.as_slice_mut().copy_from_host(src)
    }

    /// Copy to host memory (synchronous); lengths must be equal.
    ///
    /// # Errors
    /// [`Error::Mismatch`] naming both lengths; [`Error::Cuda`].
    #[doc(alias = "cudaMemcpy")]
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        self.settle()?;
        self.as_slice().copy_to_host(dst)
    }

    /// Copy into a new `Vec` (synchronous).
    ///
    /// # Errors
    /// [`Error::Cuda`].
    #[doc(alias = "cudaMemcpy")]
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.settle()?;
        self.as_slice().to_vec()
    }

    /// Copy from other device memory (synchronous); lengths must be equal.
    ///
    /// # Errors
    /// [`Error::Mismatch`] naming both lengths; [`Error::Cuda`].
    pub fn copy_from_device<'b>(&mut self, src: impl Into<DeviceSlice<'b, T>>) -> Result<()> {
        self.settle()?;
        self.as_slice_mut().copy_from_device(src)
    }

    /// Queue a device-to-device copy on `stream` (stream-ordered).
    ///
    /// # Errors
    /// As [`DeviceSliceMut::copy_from_device_async`].
    pub fn copy_from_device_async<'b>(
        &mut self,
        src: impl Into<DeviceSlice<'b, T>>,
        stream: &Stream,
    ) -> Result<()> {
        self.as_slice_mut().copy_from_device_async(src, stream)
    }

    /// Set every byte to `byte` (synchronous).
    ///
    /// # Errors
    /// [`Error::Cuda`].
    #[doc(alias = "cudaMemset")]
    pub fn memset(&mut self, byte: u8) -> Result<()> {
        self.settle()?;
        self.as_slice_mut().memset(byte)
    }

    /// Queue setting every byte to `byte` on `stream` (stream-ordered).
    ///
    /// # Errors
    /// As [`DeviceSliceMut::memset_async`].
    #[doc(alias = "cudaMemsetAsync")]
    pub fn memset_async(&mut self, byte: u8, stream: &Stream) -> Result<()> {
        self.as_slice_mut().memset_async(byte, stream)
    }

    /// A new buffer (from `cudaMalloc`) on the same device, with the same
    /// contents (synchronous copy).
    ///
    /// # Errors
    /// As [`DeviceBuffer::alloc`].
    pub fn try_clone(&self) -> Result<Self> {
        self.settle()?;
        let _on = on_device(self.device)?;
        let mut b = Self::alloc(self.len)?;
        b.copy_from_device(self)?;
        Ok(b)
    }

    /// Forget the memory without freeing it (what cannot be freed safely
    /// is leaked); a stream clone the buffer held is released.
    fn leak(&mut self) {
        self.owner = Owner::Empty;
        self.ptr = ptr::null_mut();
        self.len = 0;
        self.device = None;
    }

    fn release(&mut self) -> Result<()> {
        let owner = mem::replace(&mut self.owner, Owner::Empty);
        let p = mem::replace(&mut self.ptr, ptr::null_mut());
        self.len = 0;
        #[cfg(test)]
        if !matches!(owner, Owner::Empty) {
            tests::RELEASES.with(|c| c.set(c.get() + 1));
        }
        match owner {
            Owner::Empty => Ok(()),
            Owner::Malloc => {
                // Free with the buffer's own device current, so the implicit
                // synchronization of cudaFree covers the device whose work
                // may still use the memory. If that device cannot be made
                // current, the memory is leaked (the fields are reset).
                let _on = on_device(self.device)?;
                let rt = check::cudart()?;
                // SAFETY: `p` came from cudaMalloc and is released exactly once
                // (the fields were reset above), with its device current:
                // cudaFree waits for that device, so no queued work still uses it.
                unsafe { cuda_call!(rt, cudaFree(p.cast())) }
            }
            Owner::Pool(stream) => {
                // A per-thread stream of another thread cannot be named
                // from here: the memory is leaked (the fields are reset).
                let _on = stream.enter("freeing a stream-ordered buffer")?;
                let rt = check::cudart()?;
                // SAFETY: `p` came from cudaMallocAsync and is released exactly
                // once, in stream order after the work queued on `stream`, which
                // is still alive (we held a clone until now).
                unsafe { cuda_call!(rt, cudaFreeAsync(p.cast(), stream.as_raw())) }
            }
        }
    }

    /// A device copy of `src`, for work about to be queued on `stream` only,
    /// to be released with [`destroy_after`](DeviceBuffer::destroy_after)`(stream)`.
    /// Stream-ordered (`cudaMallocAsync` and `cudaMemcpyAsync` on `stream`,
    /// no host wait) where the device has memory pools; otherwise
    /// [`from_host`](DeviceBuffer::from_host).
    ///
    /// `src` is pageable memory the crate itself allocated (a `Vec`, taken):
    /// the runtime documents that an asynchronous copy from pageable memory
    /// returns once the data is staged, so `src` may be dropped right after.
    #[cfg_attr(not(feature = "blas"), allow(dead_code))]
    pub(crate) fn scratch_from_host(src: Vec<T>, stream: &Stream) -> Result<Self> {
        // SAFETY: the buffer is used only by work queued on `stream` (the
        // caller's contract above) and freed on it, so alloc_async's
        // cross-stream and legacy-stream conditions cannot arise.
        match unsafe { Self::alloc_async(src.len(), stream) } {
            Ok(mut b) => {
                // SAFETY: `b` holds `src.len()` elements on the device, ordered
                // after its allocation on `stream`; `src` is pageable host memory
                // of the same byte size, staged by the runtime before this returns.
                unsafe {
                    memcpy_async(
                        b.as_raw_mut(),
                        src.as_ptr().cast(),
                        b.byte_len(),
                        cudaMemcpyKind::cudaMemcpyHostToDevice,
                        stream,
                        &copy_what::<T>("host to device (scratch)", src.len()),
                    )
                }?;
                Ok(b)
            }
            Err(Error::Unsupported { .. }) => Self::from_host(&src),
            Err(e) => Err(e),
        }
    }

    /// Free the memory once the work queued on `stream` so far is done, so
    /// that a buffer used by work on `stream` can be released right after
    /// queueing that work. A stream-ordered buffer is freed with
    /// `cudaFreeAsync` on `stream` (no host wait); a `cudaMalloc` one after
    /// `stream` is synchronized. (A plain drop relies on `cudaFree`
    /// synchronizing the device, as the CUDA Programming Guide states: see
    /// the type's docs; this method waits for `stream` itself first, so it
    /// can report that wait's error and leak instead of freeing.)
    ///
    /// # Errors
    /// [`Error::Cuda`] from the synchronize, the ordering event or the free;
    /// [`Error::WrongThread`] for another thread's per-thread stream. When
    /// the synchronize (a `cudaMalloc` buffer) or the ordering after the
    /// allocating stream (a stream-ordered one) fails, the memory is
    /// **leaked**, never freed under work that may still use it.
    pub fn destroy_after(mut self, stream: &Stream) -> Result<()> {
        match &self.owner {
            Owner::Empty => Ok(()),
            Owner::Malloc => {
                if let Err(e) = stream.synchronize() {
                    self.leak();
                    return Err(e.with_context("waiting for a stream before freeing its memory"));
                }
                self.release()
            }
            Owner::Pool(own) => {
                // Freeing on `stream` orders the free after `stream`'s work;
                // it must also come after the work on the allocating stream.
                if own != stream
                    && let Err(e) = stream.wait_for(own)
                {
                    // Without that order the free could overtake work on the
                    // allocating stream: leak instead of freeing (as a failed
                    // synchronize does above).
                    self.leak();
                    return Err(e.with_context(
                        "ordering a stream after the allocating stream before freeing its memory (the memory is leaked)",
                    ));
                }
                self.owner = Owner::Pool(stream.clone());
                self.release()
            }
        }
    }

    /// Free the memory now, reporting the runtime's status (stream-ordered
    /// for a buffer from [`DeviceBuffer::alloc_async`]).
    ///
    /// # Errors
    /// [`Error::Cuda`] from `cudaFree` / `cudaFreeAsync`.
    #[doc(alias = "cudaFree")]
    #[doc(alias = "cudaFreeAsync")]
    pub fn destroy(mut self) -> Result<()> {
        self.release()
    }
}

impl<T: DataType> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        // Errors are ignored: Drop must not fail or panic.
        let _ = self.release();
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::error::Error;

    thread_local! {
        /// Frees this thread attempted (`release` of a non-empty buffer).
        pub(super) static RELEASES: Cell<usize> = const { Cell::new(0) };
    }

    fn releases() -> usize {
        RELEASES.with(Cell::get)
    }

    /// Another thread's per-thread stream: every use from this thread is
    /// refused before any CUDA call, so these tests call nothing with the
    /// fake pointers below.
    fn foreign_stream() -> Stream {
        std::thread::spawn(Stream::per_thread)
            .join()
            .expect("thread ran")
    }

    /// A buffer owning a fake pointer, never handed to CUDA by these tests.
    fn fake(owner: Owner) -> DeviceBuffer<u8> {
        DeviceBuffer {
            ptr: 0x1000 as *mut u8,
            len: 16,
            device: None,
            owner,
            alloc_pending: AtomicBool::new(false),
        }
    }

    #[test]
    fn unit_release_counter_counts_an_attempted_free() {
        // Control: dropping a stream-ordered buffer attempts its free (which
        // is then refused on this thread: the memory is leaked, nothing called).
        let before = releases();
        drop(fake(Owner::Pool(foreign_stream())));
        assert_eq!(releases(), before + 1);
    }

    #[test]
    fn unit_destroy_after_leaks_when_the_ordering_fails() {
        let own = foreign_stream();
        let buf = fake(Owner::Pool(own.clone()));
        assert_eq!(own.clone_count(), 2);
        let before = releases();
        let e = buf
            .destroy_after(&Stream::legacy())
            .expect_err("ordering after another thread's per-thread stream fails");
        assert!(matches!(e, Error::WrongThread { .. }), "{e:?}");
        // Leaked: no free was attempted, not even by Drop...
        assert_eq!(releases(), before, "a free was attempted");
        // ...and only the memory is leaked: the stream clone was released.
        assert_eq!(own.clone_count(), 1);
    }

    #[test]
    fn unit_destroy_after_leaks_when_the_synchronize_fails() {
        let before = releases();
        let e = fake(Owner::Malloc)
            .destroy_after(&foreign_stream())
            .expect_err("synchronizing another thread's per-thread stream fails");
        assert!(matches!(e, Error::WrongThread { .. }), "{e:?}");
        assert_eq!(releases(), before, "a free was attempted");
    }
}
