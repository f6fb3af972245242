//! Device memory, borrowed device views, pinned host memory and copies.
//! The overview (stream ordering, what must outlive what) is on
//! [`DeviceBuffer`], since this module is private.

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::mem;
use std::ops::{Bound, Deref, DerefMut, RangeBounds};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::check::{self, cuda_call};
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::sys::cudart::{cudaMemcpyKind, cudaStream_t};

use super::{Device, Stream};

// ---------------------------------------------------------------------------
// Helpers

/// `len * size_of::<T>()`, checked: must fit in `isize` (Rust's limit for one
/// allocation, and far beyond any device).
fn byte_len<T: DataType>(len: usize) -> Result<usize> {
    len.checked_mul(T::SIZE)
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| {
            Error::invalid(
                "len",
                format!(
                    "len * size_of::<{}>() ({} bytes each) must not exceed isize::MAX bytes",
                    T::NAME,
                    T::SIZE
                ),
                len,
            )
        })
}

fn describe_range(range: &impl RangeBounds<usize>) -> String {
    let start = match range.start_bound() {
        Bound::Included(s) => s.to_string(),
        Bound::Excluded(s) => format!("(excluded {s})"),
        Bound::Unbounded => String::new(),
    };
    let end = match range.end_bound() {
        Bound::Included(e) => format!("..={e}"),
        Bound::Excluded(e) => format!("..{e}"),
        Bound::Unbounded => "..".to_string(),
    };
    format!("{start}{end}")
}

/// `range` resolved against `len` as `(start, end)`, or an error naming both.
fn resolve_range(range: impl RangeBounds<usize>, len: usize) -> Result<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => Some(s),
        Bound::Excluded(&s) => s.checked_add(1),
        Bound::Unbounded => Some(0),
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => Some(len),
    };
    match (start, end) {
        (Some(s), Some(e)) if s <= e && e <= len => Ok((s, e)),
        _ => Err(Error::invalid(
            "range",
            format!("must lie within 0..{len} (the view's length) with start <= end"),
            describe_range(&range),
        )),
    }
}

fn check_same_len(what: &str, expected: usize, got: usize) -> Result<()> {
    if expected == got {
        Ok(())
    } else {
        Err(Error::mismatch(what, expected, got))
    }
}

/// `ptr + offset` elements; null stays null (only for offset 0, by the callers' range checks).
fn offset<T>(ptr: *const T, off: usize) -> *const T {
    ptr.wrapping_add(off)
}

/// A synchronous `cudaMemcpy` of `bytes` bytes; nothing is called for 0.
///
/// # Safety
/// `dst` and `src` must be valid for `bytes` bytes in the memory spaces `kind`
/// names, and must not overlap.
unsafe fn memcpy(
    dst: *mut c_void,
    src: *const c_void,
    bytes: usize,
    kind: cudaMemcpyKind,
    what: &str,
) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    let rt = check::cudart()?;
    // SAFETY: the caller guarantees both ranges are valid for `bytes` bytes.
    unsafe { cuda_call!(rt, cudaMemcpy(dst, src, bytes, kind)) }
        .map_err(|e| e.with_context(what.to_string()))?;
    if kind != cudaMemcpyKind::cudaMemcpyDeviceToHost {
        // cudaMemcpy from pageable host memory, and device-to-device, may
        // return before the data has landed; wait, so that work queued next
        // on *any* stream (non-blocking ones included) sees it.
        wait_for_legacy_stream(rt).map_err(|e| e.with_context(what.to_string()))?;
    }
    Ok(())
}

/// Block until the legacy default stream (where `cudaMemcpy` and
/// `cudaMemset` run) has finished its work.
fn wait_for_legacy_stream(rt: &crate::sys::cudart::Cudart) -> Result<()> {
    // SAFETY: `cudaStreamLegacy` is the runtime's own always-valid stream handle.
    unsafe {
        cuda_call!(
            rt,
            cudaStreamSynchronize(crate::sys::cudart::cudaStreamLegacy)
        )
    }
}

/// A stream-ordered `cudaMemcpyAsync`; nothing is called for 0 bytes.
///
/// # Safety
/// As [`memcpy`], and both ranges must stay valid (and host ranges unused
/// by the host) until the copy completes on `stream`.
unsafe fn memcpy_async(
    dst: *mut c_void,
    src: *const c_void,
    bytes: usize,
    kind: cudaMemcpyKind,
    stream: cudaStream_t,
    what: &str,
) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    let rt = check::cudart()?;
    // SAFETY: the caller guarantees validity until completion on `stream`.
    unsafe { cuda_call!(rt, cudaMemcpyAsync(dst, src, bytes, kind, stream)) }
        .map_err(|e| e.with_context(what.to_string()))
}

fn copy_what<T: DataType>(dir: &str, len: usize) -> String {
    format!("copying {len} x {} {dir}", T::NAME)
}

// ---------------------------------------------------------------------------
// DeviceSlice

/// A borrowed, read-only view of device memory: the device analogue of `&'a [T]`.
///
/// The host never dereferences the pointer; the view only carries it, with
/// its length, to copies and library calls.
pub struct DeviceSlice<'a, T: DataType> {
    ptr: *const T,
    len: usize,
    /// The device the memory is on (`None`: empty, or foreign and unnamed).
    device: Option<Device>,
    _borrow: PhantomData<&'a [T]>,
}

impl<T: DataType> Clone for DeviceSlice<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: DataType> Copy for DeviceSlice<'_, T> {}

// SAFETY: a `DeviceSlice` is a shared borrow of device memory (like `&[T]`,
// with `T: Sync`); the host never dereferences it, and the CUDA runtime calls
// that read through it are thread-safe.
unsafe impl<T: DataType> Send for DeviceSlice<'_, T> {}
// SAFETY: as above; sharing a shared view across threads only allows reads.
unsafe impl<T: DataType> Sync for DeviceSlice<'_, T> {}

impl<T: DataType> fmt::Debug for DeviceSlice<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DeviceSlice<{}> {{ ptr: {:p}, len: {} }}",
            T::NAME,
            self.ptr,
            self.len
        )
    }
}

impl<'a, T: DataType> DeviceSlice<'a, T> {
    /// A view over device memory someone else owns (another allocator, a
    /// framework's tensor).
    ///
    /// # Safety
    /// - `ptr` is a device (or managed) pointer, aligned for `T`, valid for
    ///   reads of `len` elements for all of `'a`; it may be null only when
    ///   `len` is 0;
    /// - the memory is not freed during `'a`, and nothing writes it during
    ///   `'a` except device work the caller orders with this view's uses.
    pub unsafe fn from_raw_parts(ptr: *const T, len: usize) -> Self {
        DeviceSlice {
            ptr,
            len,
            device: None,
            _borrow: PhantomData,
        }
    }

    /// As [`from_raw_parts`](DeviceSlice::from_raw_parts), for memory on
    /// `device`: launches then check that the view and the handle, stream or
    /// communicator agree on the device.
    ///
    /// # Safety
    /// As [`from_raw_parts`](DeviceSlice::from_raw_parts), and the memory is
    /// on `device`.
    pub unsafe fn from_raw_parts_on(ptr: *const T, len: usize, device: Device) -> Self {
        DeviceSlice {
            ptr,
            len,
            device: Some(device),
            _borrow: PhantomData,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device the memory is on: the owning buffer's device for a view
    /// of a [`DeviceBuffer`], the named one for a view made with
    /// `from_raw_parts_on`; `None` for a view of an empty buffer (no memory)
    /// or of foreign memory made with `from_raw_parts` (unknown: launches
    /// cannot check it, the caller's contract covers it).
    pub fn device(&self) -> Option<Device> {
        self.device
    }

    /// Size in bytes.
    pub fn byte_len(&self) -> usize {
        self.len * T::SIZE
    }

    /// The device pointer (null for an empty view of an empty buffer).
    pub fn as_ptr(&self) -> *const T {
        self.ptr
    }

    /// The device pointer, untyped, for library calls.
    pub fn as_raw(&self) -> *const c_void {
        self.ptr.cast()
    }

    /// The sub-view `range` (element indices).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the range and the length when it does
    /// not fit.
    pub fn slice(self, range: impl RangeBounds<usize>) -> Result<DeviceSlice<'a, T>> {
        let (s, e) = resolve_range(range, self.len)?;
        Ok(DeviceSlice {
            ptr: offset(self.ptr, s),
            len: e - s,
            device: self.device,
            _borrow: PhantomData,
        })
    }

    /// Split into `[0, mid)` and `[mid, len)`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `mid > len`.
    pub fn split_at(self, mid: usize) -> Result<(DeviceSlice<'a, T>, DeviceSlice<'a, T>)> {
        if mid > self.len {
            return Err(Error::invalid(
                "mid",
                format!("must be <= the view's length {}", self.len),
                mid,
            ));
        }
        Ok((
            DeviceSlice {
                ptr: self.ptr,
                len: mid,
                device: self.device,
                _borrow: PhantomData,
            },
            DeviceSlice {
                ptr: offset(self.ptr, mid),
                len: self.len - mid,
                device: self.device,
                _borrow: PhantomData,
            },
        ))
    }

    /// Copy to host memory (synchronous). `dst.len()` must equal `self.len()`.
    ///
    /// # Errors
    /// [`Error::Mismatch`] naming both lengths; [`Error::Cuda`].
    #[doc(alias = "cudaMemcpy")]
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        check_same_len(
            "copy to host: host destination length must equal the device source length",
            self.len,
            dst.len(),
        )?;
        let bytes = self.byte_len();
        // SAFETY: `dst` is a host slice of exactly `bytes` bytes; `self` is valid
        // device memory of the same size (its constructor's contract).
        unsafe {
            memcpy(
                dst.as_mut_ptr().cast(),
                self.as_raw(),
                bytes,
                cudaMemcpyKind::cudaMemcpyDeviceToHost,
                &copy_what::<T>("device to host", self.len),
            )
        }
    }

    /// Copy into a new `Vec` (synchronous).
    ///
    /// # Errors
    /// [`Error::Cuda`].
    #[doc(alias = "cudaMemcpy")]
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut v = Vec::<T>::with_capacity(self.len);
        // SAFETY: the Vec's buffer has room for `len` elements; `self` is valid
        // device memory of `len` elements.
        unsafe {
            memcpy(
                v.as_mut_ptr().cast(),
                self.as_raw(),
                self.byte_len(),
                cudaMemcpyKind::cudaMemcpyDeviceToHost,
                &copy_what::<T>("device to host", self.len),
            )?;
            // SAFETY: the copy wrote all `len` elements, and every bit pattern is a
            // valid `T` (a `DataType` guarantee).
            v.set_len(self.len);
        }
        Ok(v)
    }
}

// ---------------------------------------------------------------------------
// DeviceSliceMut

/// A borrowed, writable view of device memory: the device analogue of `&'a mut [T]`.
pub struct DeviceSliceMut<'a, T: DataType> {
    ptr: *mut T,
    len: usize,
    /// The device the memory is on (`None`: empty, or foreign and unnamed).
    device: Option<Device>,
    _borrow: PhantomData<&'a mut [T]>,
}

// SAFETY: an exclusive borrow of device memory (like `&mut [T]`, `T: Send`); the
// host never dereferences it and the CUDA runtime calls using it are thread-safe.
unsafe impl<T: DataType> Send for DeviceSliceMut<'_, T> {}
// SAFETY: `&DeviceSliceMut` only allows reads (as `&&mut [T]` does).
unsafe impl<T: DataType> Sync for DeviceSliceMut<'_, T> {}

impl<T: DataType> fmt::Debug for DeviceSliceMut<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DeviceSliceMut<{}> {{ ptr: {:p}, len: {} }}",
            T::NAME,
            self.ptr,
            self.len
        )
    }
}

impl<'a, T: DataType> DeviceSliceMut<'a, T> {
    /// A writable view over device memory someone else owns.
    ///
    /// # Safety
    /// As [`DeviceSlice::from_raw_parts`], for reads *and* writes, and nothing
    /// else reads or writes the memory during `'a` except device work the
    /// caller orders with this view's uses.
    pub unsafe fn from_raw_parts_mut(ptr: *mut T, len: usize) -> Self {
        DeviceSliceMut {
            ptr,
            len,
            device: None,
            _borrow: PhantomData,
        }
    }

    /// As [`from_raw_parts_mut`](DeviceSliceMut::from_raw_parts_mut), for
    /// memory on `device` (see [`DeviceSlice::from_raw_parts_on`]).
    ///
    /// # Safety
    /// As [`from_raw_parts_mut`](DeviceSliceMut::from_raw_parts_mut), and the
    /// memory is on `device`.
    pub unsafe fn from_raw_parts_mut_on(ptr: *mut T, len: usize, device: Device) -> Self {
        DeviceSliceMut {
            ptr,
            len,
            device: Some(device),
            _borrow: PhantomData,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device the memory is on: the owning buffer's device for a view
    /// of a [`DeviceBuffer`], the named one for a view made with
    /// `from_raw_parts_on`; `None` for a view of an empty buffer (no memory)
    /// or of foreign memory made with `from_raw_parts` (unknown: launches
    /// cannot check it, the caller's contract covers it).
    pub fn device(&self) -> Option<Device> {
        self.device
    }

    /// Size in bytes.
    pub fn byte_len(&self) -> usize {
        self.len * T::SIZE
    }

    /// The device pointer.
    pub fn as_ptr(&self) -> *const T {
        self.ptr
    }

    /// The device pointer, for writing.
    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.ptr
    }

    /// The device pointer, untyped.
    pub fn as_raw(&self) -> *const c_void {
        self.ptr.cast()
    }

    /// The device pointer, untyped, for writing.
    pub fn as_raw_mut(&mut self) -> *mut c_void {
        self.ptr.cast()
    }

    /// A read-only view of the same memory.
    pub fn as_slice(&self) -> DeviceSlice<'_, T> {
        DeviceSlice {
            ptr: self.ptr,
            len: self.len,
            device: self.device,
            _borrow: PhantomData,
        }
    }

    /// A shorter-lived writable view of the same memory.
    pub fn reborrow(&mut self) -> DeviceSliceMut<'_, T> {
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
        self.reborrow().into_slice_mut(range)
    }

    /// The writable sub-view `range`, keeping the full lifetime `'a`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the range and the length.
    pub fn into_slice_mut(self, range: impl RangeBounds<usize>) -> Result<DeviceSliceMut<'a, T>> {
        let (s, e) = resolve_range(range, self.len)?;
        Ok(DeviceSliceMut {
            ptr: self.ptr.wrapping_add(s),
            len: e - s,
            device: self.device,
            _borrow: PhantomData,
        })
    }

    /// Split into two disjoint writable views `[0, mid)` and `[mid, len)`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `mid > len`.
    pub fn split_at_mut(
        self,
        mid: usize,
    ) -> Result<(DeviceSliceMut<'a, T>, DeviceSliceMut<'a, T>)> {
        if mid > self.len {
            return Err(Error::invalid(
                "mid",
                format!("must be <= the view's length {}", self.len),
                mid,
            ));
        }
        Ok((
            DeviceSliceMut {
                ptr: self.ptr,
                len: mid,
                device: self.device,
                _borrow: PhantomData,
            },
            DeviceSliceMut {
                ptr: self.ptr.wrapping_add(mid),
                len: self.len - mid,
                device: self.device,
                _borrow: PhantomData,
            },
        ))
    }

    /// Copy from host memory (synchronous). `src.len()` must equal `self.len()`.
    ///
    /// # Errors
    /// [`Error::Mismatch`] naming both lengths; [`Error::Cuda`].
    #[doc(alias = "cudaMemcpy")]
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        check_same_len(
            "copy from host: host source length must equal the device destination length",
            self.len,
            src.len(),
        )?;
        let bytes = self.byte_len();
        // SAFETY: `src` is a host slice of exactly `bytes` bytes; `self` is
        // writable device memory of the same size, exclusively borrowed.
        unsafe {
            memcpy(
                self.as_raw_mut(),
                src.as_ptr().cast(),
                bytes,
                cudaMemcpyKind::cudaMemcpyHostToDevice,
                &copy_what::<T>("host to device", self.len),
            )
        }
    }

    /// Copy to host memory (synchronous). See [`DeviceSlice::copy_to_host`].
    ///
    /// # Errors
    /// [`Error::Mismatch`] naming both lengths; [`Error::Cuda`].
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        self.as_slice().copy_to_host(dst)
    }

    /// Copy into a new `Vec` (synchronous).
    ///
    /// # Errors
    /// [`Error::Cuda`].
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.as_slice().to_vec()
    }

    /// Copy from other device memory (synchronous with respect to the host).
    /// The lengths must be equal.
    ///
    /// # Errors
    /// [`Error::Mismatch`] naming both lengths; [`Error::Cuda`].
    #[doc(alias = "cudaMemcpy")]
    pub fn copy_from_device<'b>(&mut self, src: impl Into<DeviceSlice<'b, T>>) -> Result<()> {
        let src = src.into();
        check_same_len(
            "copy device to device: source length must equal the destination length",
            self.len,
            src.len(),
        )?;
        // SAFETY: both are device ranges of `byte_len` bytes; they cannot overlap
        // because `self` is an exclusive borrow and `src` a shared one.
        unsafe {
            memcpy(
                self.as_raw_mut(),
                src.as_raw(),
                self.byte_len(),
                cudaMemcpyKind::cudaMemcpyDeviceToDevice,
                &copy_what::<T>("device to device", self.len),
            )
        }
    }

    /// Queue a device-to-device copy on `stream` (stream-ordered).
    ///
    /// # Errors
    /// [`Error::Mismatch`] naming both lengths; [`Error::Cuda`].
    #[doc(alias = "cudaMemcpyAsync")]
    pub fn copy_from_device_async<'b>(
        &mut self,
        src: impl Into<DeviceSlice<'b, T>>,
        stream: &Stream,
    ) -> Result<()> {
        let src = src.into();
        check_same_len(
            "async copy device to device: source length must equal the destination length",
            self.len,
            src.len(),
        )?;
        // SAFETY: both ranges are device memory of `byte_len` bytes and do not
        // overlap (exclusive vs shared borrow). Device memory stays valid until
        // the copy runs: cudaMalloc'd memory is freed with cudaFree, which waits
        // for the device; stream-ordered memory is freed in stream order. No host
        // memory is involved.
        unsafe {
            memcpy_async(
                self.as_raw_mut(),
                src.as_raw(),
                self.byte_len(),
                cudaMemcpyKind::cudaMemcpyDeviceToDevice,
                stream.as_raw(),
                &copy_what::<T>("device to device (async)", self.len),
            )
        }
    }

    /// Set every byte to `byte` (synchronous). `memset(0)` zeroes any `DataType`.
    ///
    /// # Errors
    /// [`Error::Cuda`].
    #[doc(alias = "cudaMemset")]
    pub fn memset(&mut self, byte: u8) -> Result<()> {
        let bytes = self.byte_len();
        if bytes == 0 {
            return Ok(());
        }
        let rt = check::cudart()?;
        // SAFETY: `self` is writable device memory of `bytes` bytes, exclusively borrowed.
        unsafe { cuda_call!(rt, cudaMemset(self.as_raw_mut(), i32::from(byte), bytes)) }
            .map_err(|e| e.with_context(format!("memset of {} x {}", self.len, T::NAME)))?;
        // cudaMemset may return before it is done; wait (see `memcpy`).
        wait_for_legacy_stream(rt)
    }

    /// Queue setting every byte to `byte` on `stream` (stream-ordered).
    ///
    /// # Errors
    /// [`Error::Cuda`].
    #[doc(alias = "cudaMemsetAsync")]
    pub fn memset_async(&mut self, byte: u8, stream: &Stream) -> Result<()> {
        let bytes = self.byte_len();
        if bytes == 0 {
            return Ok(());
        }
        let rt = check::cudart()?;
        // SAFETY: `self` is writable device memory of `bytes` bytes; it stays
        // allocated until the memset runs (see `copy_from_device_async`).
        unsafe {
            cuda_call!(
                rt,
                cudaMemsetAsync(self.as_raw_mut(), i32::from(byte), bytes, stream.as_raw())
            )
        }
        .map_err(|e| e.with_context(format!("async memset of {} x {}", self.len, T::NAME)))
    }
}

impl<'a, T: DataType> From<&'a DeviceSliceMut<'_, T>> for DeviceSlice<'a, T> {
    fn from(v: &'a DeviceSliceMut<'_, T>) -> Self {
        v.as_slice()
    }
}

impl<'a, T: DataType> From<&'a mut DeviceSliceMut<'_, T>> for DeviceSliceMut<'a, T> {
    fn from(v: &'a mut DeviceSliceMut<'_, T>) -> Self {
        v.reborrow()
    }
}

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
/// - [`HostBuffer<T>`]: pinned (page-locked) host memory (`cudaMallocHost`),
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
///   `scope`'s own frame. Pinned memory ([`HostBuffer`], which derefs to a
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
    /// [`Error::InvalidArgument`] when the byte size overflows; [`Error::Cuda`]
    /// (e.g. out of memory, no device).
    #[doc(alias = "cudaMalloc")]
    pub fn alloc(len: usize) -> Result<Self> {
        let bytes = byte_len::<T>(len)?;
        if bytes == 0 {
            return Ok(Self::empty());
        }
        let device = Device::current()?;
        let rt = check::cudart()?;
        let mut p: *mut c_void = ptr::null_mut();
        // SAFETY: `p` is a valid, writable out-pointer; `bytes` is non-zero.
        unsafe { cuda_call!(rt, cudaMalloc(&mut p, bytes)) }.map_err(|e| {
            e.with_context(format!("allocating {len} x {} ({bytes} bytes)", T::NAME))
        })?;
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
    ///
    /// Buffers from [`DeviceBuffer::alloc`] have no such contract.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the device or driver has no memory pools;
    /// [`Error::InvalidArgument`] when the byte size overflows; [`Error::Cuda`].
    #[doc(alias = "cudaMallocAsync")]
    pub unsafe fn alloc_async(len: usize, stream: &Stream) -> Result<Self> {
        let bytes = byte_len::<T>(len)?;
        if bytes == 0 {
            return Ok(Self::empty());
        }
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
    /// [`Error::Mismatch`] naming both lengths; [`Error::Cuda`].
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
    /// [`Error::Cuda`].
    #[doc(alias = "cudaMemsetAsync")]
    pub fn memset_async(&mut self, byte: u8, stream: &Stream) -> Result<()> {
        self.as_slice_mut().memset_async(byte, stream)
    }

    /// A new buffer (from `cudaMalloc`) with the same contents (synchronous copy).
    ///
    /// # Errors
    /// As [`DeviceBuffer::alloc`].
    pub fn try_clone(&self) -> Result<Self> {
        self.settle()?;
        let mut b = Self::alloc(self.len)?;
        b.copy_from_device(self)?;
        Ok(b)
    }

    fn release(&mut self) -> Result<()> {
        let owner = mem::replace(&mut self.owner, Owner::Empty);
        let p = mem::replace(&mut self.ptr, ptr::null_mut());
        self.len = 0;
        match owner {
            Owner::Empty => Ok(()),
            Owner::Malloc => {
                let rt = check::cudart()?;
                // SAFETY: `p` came from cudaMalloc and is released exactly once
                // (the fields were reset above). cudaFree waits for the device,
                // so no queued work still uses it.
                unsafe { cuda_call!(rt, cudaFree(p.cast())) }
            }
            Owner::Pool(stream) => {
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
                        stream.as_raw(),
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
    /// `stream` is synchronized (`cudaFree` is documented only as *possibly*
    /// synchronizing, so the crate does not rely on it).
    ///
    /// # Errors
    /// [`Error::Cuda`] from the synchronize or the free. On a failed
    /// synchronize the memory is leaked, not freed under running work.
    pub fn destroy_after(mut self, stream: &Stream) -> Result<()> {
        match &self.owner {
            Owner::Empty => Ok(()),
            Owner::Malloc => {
                if let Err(e) = stream.synchronize() {
                    let _ = mem::ManuallyDrop::new(self);
                    return Err(e.with_context("waiting for a stream before freeing its memory"));
                }
                self.release()
            }
            Owner::Pool(own) => {
                // Freeing on `stream` orders the free after `stream`'s work;
                // it must also come after the work on the allocating stream.
                if own != stream {
                    stream.wait_for(own)?;
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

impl<'a, T: DataType> From<&'a DeviceBuffer<T>> for DeviceSlice<'a, T> {
    fn from(b: &'a DeviceBuffer<T>) -> Self {
        b.as_slice()
    }
}

impl<'a, T: DataType> From<&'a mut DeviceBuffer<T>> for DeviceSliceMut<'a, T> {
    fn from(b: &'a mut DeviceBuffer<T>) -> Self {
        b.as_slice_mut()
    }
}

impl<'a, T: DataType> From<&'a mut DeviceBuffer<T>> for DeviceSlice<'a, T> {
    fn from(b: &'a mut DeviceBuffer<T>) -> Self {
        b.as_slice()
    }
}

// ---------------------------------------------------------------------------
// HostBuffer

/// Pinned (page-locked) host memory holding `len` elements of `T`; derefs to
/// `[T]`. Freed with `cudaFreeHost` on drop.
///
/// Pinned memory lets host↔device copies run asynchronously; use it with
/// [`Stream::scope`], which guarantees the buffer outlives the copies.
pub struct HostBuffer<T: DataType> {
    ptr: NonNull<T>,
    len: usize,
    /// Whether `ptr` came from `cudaMallocHost` (false: dangling, length 0).
    pinned: bool,
}

// SAFETY: the buffer uniquely owns ordinary (page-locked) host memory, like
// `Box<[T]>` with `T: Send`; `cudaFreeHost` may be called from any thread (the
// CUDA runtime API is thread-safe).
unsafe impl<T: DataType> Send for HostBuffer<T> {}
// SAFETY: `&HostBuffer` only gives `&[T]`, and `T: Sync`.
unsafe impl<T: DataType> Sync for HostBuffer<T> {}

impl<T: DataType> fmt::Debug for HostBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "HostBuffer<{}> {{ ptr: {:p}, len: {} }}",
            T::NAME,
            self.ptr,
            self.len
        )
    }
}

impl<T: DataType> HostBuffer<T> {
    /// Allocate `len` zeroed elements of pinned host memory.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the byte size overflows; [`Error::Cuda`]
    /// (no device, out of pinned memory).
    #[doc(alias = "cudaMallocHost")]
    pub fn new(len: usize) -> Result<Self> {
        let bytes = byte_len::<T>(len)?;
        if bytes == 0 {
            return Ok(HostBuffer {
                ptr: NonNull::dangling(),
                len,
                pinned: false,
            });
        }
        let rt = check::cudart()?;
        let mut p: *mut c_void = ptr::null_mut();
        // SAFETY: `p` is a valid, writable out-pointer; `bytes` is non-zero.
        unsafe { cuda_call!(rt, cudaMallocHost(&mut p, bytes)) }.map_err(|e| {
            e.with_context(format!(
                "allocating {len} x {} of pinned host memory",
                T::NAME
            ))
        })?;
        let Some(nn) = NonNull::new(p.cast::<T>()) else {
            return Err(Error::invalid(
                "cudaMallocHost result",
                "must not be null",
                "null",
            ));
        };
        // SAFETY: `nn` points to `bytes` freshly allocated, writable host bytes,
        // suitably aligned (cudaMallocHost aligns to at least 256 bytes).
        // Zeroing initializes them: all-zero bytes are a valid value of every
        // `DataType`.
        unsafe { ptr::write_bytes(nn.as_ptr().cast::<u8>(), 0, bytes) };
        Ok(HostBuffer {
            ptr: nn,
            len,
            pinned: true,
        })
    }

    /// Pinned copy of a host slice.
    ///
    /// # Errors
    /// As [`HostBuffer::new`].
    pub fn from_slice(src: &[T]) -> Result<Self> {
        let mut b = Self::new(src.len())?;
        b.copy_from_slice(src);
        Ok(b)
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Free the memory now, reporting the runtime's status.
    ///
    /// # Errors
    /// [`Error::Cuda`] from `cudaFreeHost`.
    #[doc(alias = "cudaFreeHost")]
    pub fn destroy(self) -> Result<()> {
        let me = mem::ManuallyDrop::new(self);
        if !me.pinned {
            return Ok(());
        }
        let rt = check::cudart()?;
        // SAFETY: the pointer came from cudaMallocHost; `me` is never dropped,
        // so it is freed exactly once. No async copy can still use it: those
        // only exist inside `Stream::scope`, which has returned.
        unsafe { cuda_call!(rt, cudaFreeHost(me.ptr.as_ptr().cast())) }
    }
}

impl<T: DataType> Deref for HostBuffer<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` is valid (or dangling with len 0), aligned, initialized
        // for `len` elements (zeroed at allocation), and owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: DataType> DerefMut for HostBuffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` makes the borrow exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: DataType> Drop for HostBuffer<T> {
    fn drop(&mut self) {
        if self.pinned
            && let Ok(rt) = check::cudart()
        {
            // SAFETY: the pointer came from cudaMallocHost and is freed once.
            // The status is ignored: Drop must not fail.
            let _ = unsafe { rt.cudaFreeHost(self.ptr.as_ptr().cast()) };
        }
    }
}

// ---------------------------------------------------------------------------
// Stream scope: asynchronous host<->device copies

/// Asynchronous host↔device copies on one stream, whose host memory is
/// guaranteed to outlive them. Made by [`Stream::scope`]; see the
/// [`DeviceBuffer`] docs ("What must outlive what") for why this is sound.
pub struct AsyncScope<'scope, 'env: 'scope> {
    stream: &'scope Stream,
    /// Invariant in `'scope` and `'env` (as `std::thread::Scope`), so neither
    /// can be shortened to smuggle the scope or a borrow out.
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

impl fmt::Debug for AsyncScope<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncScope")
            .field("stream", self.stream)
            .finish()
    }
}

impl<'env> AsyncScope<'_, 'env> {
    /// The stream the copies are queued on (queue kernels or library calls
    /// on it to order them with the copies).
    pub fn stream(&self) -> &Stream {
        self.stream
    }

    /// Queue a host-to-device copy. `src` stays borrowed (read-only) until
    /// the scope ends; the lengths must be equal.
    ///
    /// # Errors
    /// [`Error::Mismatch`] naming both lengths; [`Error::Cuda`].
    #[doc(alias = "cudaMemcpyAsync")]
    pub fn upload<'d, T: DataType>(
        &self,
        src: &'env [T],
        dst: impl Into<DeviceSliceMut<'d, T>>,
    ) -> Result<()> {
        let mut dst = dst.into();
        check_same_len(
            "async upload: host source length must equal the device destination length",
            dst.len(),
            src.len(),
        )?;
        // SAFETY: `src` is host memory of `byte_len` bytes borrowed for 'env, which
        // outlives `Stream::scope`, and `scope` synchronizes the stream before it
        // returns, so the host memory outlives the DMA and is not written during
        // it (shared borrow). `dst` is device memory of the same size (see
        // `copy_from_device_async` for why it stays allocated).
        unsafe {
            memcpy_async(
                dst.as_raw_mut(),
                src.as_ptr().cast(),
                dst.byte_len(),
                cudaMemcpyKind::cudaMemcpyHostToDevice,
                self.stream.as_raw(),
                &copy_what::<T>("host to device (async)", src.len()),
            )
        }
    }

    /// Queue a device-to-host copy. `dst` stays exclusively borrowed until
    /// the scope ends (it cannot be read before the data has arrived); the
    /// lengths must be equal.
    ///
    /// # Errors
    /// [`Error::Mismatch`] naming both lengths; [`Error::Cuda`].
    #[doc(alias = "cudaMemcpyAsync")]
    pub fn download<'d, T: DataType>(
        &self,
        src: impl Into<DeviceSlice<'d, T>>,
        dst: &'env mut [T],
    ) -> Result<()> {
        let src = src.into();
        check_same_len(
            "async download: host destination length must equal the device source length",
            src.len(),
            dst.len(),
        )?;
        // SAFETY: `dst` is host memory of `byte_len` bytes exclusively borrowed for
        // 'env, and `scope` synchronizes the stream before that borrow can end,
        // so the DMA finishes before anyone can read, free or reuse it. Every bit
        // pattern is a valid `T`. `src` is device memory of the same size.
        unsafe {
            memcpy_async(
                dst.as_mut_ptr().cast(),
                src.as_raw(),
                src.byte_len(),
                cudaMemcpyKind::cudaMemcpyDeviceToHost,
                self.stream.as_raw(),
                &copy_what::<T>("device to host (async)", src.len()),
            )
        }
    }
}

/// Synchronizes the stream when dropped (the closure panicked).
struct SyncOnUnwind<'a>(&'a Stream);

impl Drop for SyncOnUnwind<'_> {
    fn drop(&mut self) {
        if self.0.synchronize().is_err() {
            // Last resort: the stream's queue must be drained before borrows end.
            if let Ok(rt) = check::cudart() {
                // SAFETY: takes no arguments; blocks until the current device is idle.
                let _ = unsafe { rt.cudaDeviceSynchronize() };
            }
        }
    }
}

impl Stream {
    /// Run `f` with an [`AsyncScope`] for asynchronous host↔device copies on
    /// this stream, then synchronize the stream. Host memory handed to the
    /// scope is borrowed until `scope` returns, and `scope` returns only
    /// after the stream is idle — also when `f` fails or panics.
    ///
    /// ```no_run
    /// # use cudnn::runtime::{DeviceBuffer, HostBuffer, Stream};
    /// let stream = Stream::non_blocking()?;
    /// let input = HostBuffer::from_slice(&[1.0f32, 2.0, 3.0])?;
    /// let mut output = HostBuffer::<f32>::new(3)?;
    /// let mut dev = DeviceBuffer::<f32>::alloc(3)?;
    /// stream.scope(|s| {
    ///     s.upload(&input, &mut dev)?;
    ///     // ... queue work on s.stream() ...
    ///     s.download(&dev, &mut output)
    /// })?;
    /// assert_eq!(&output[..], &[1.0, 2.0, 3.0]);
    /// # Ok::<(), cudnn::Error>(())
    /// ```
    ///
    /// # Errors
    /// The first error of `f`; otherwise the synchronization's.
    pub fn scope<'env, R>(
        &self,
        f: impl for<'scope> FnOnce(&'scope AsyncScope<'scope, 'env>) -> Result<R>,
    ) -> Result<R> {
        let scope = AsyncScope {
            stream: self,
            _scope: PhantomData,
            _env: PhantomData,
        };
        let guard = SyncOnUnwind(self);
        let result = f(&scope);
        mem::forget(guard);
        let synced = self.synchronize();
        if synced.is_err() {
            // Drain the device anyway before the borrows end.
            if let Ok(rt) = check::cudart() {
                // SAFETY: takes no arguments; blocks until the current device is idle.
                let _ = unsafe { rt.cudaDeviceSynchronize() };
            }
        }
        let value = result?;
        synced?;
        Ok(value)
    }

    /// Allocate `len` elements for use on this stream (with `cudaMalloc`,
    /// whose free waits for the device, so the buffer may be used from any
    /// stream). For stream-ordered allocation see the `unsafe`
    /// [`DeviceBuffer::alloc_async`].
    ///
    /// # Errors
    /// As [`DeviceBuffer::alloc`].
    pub fn alloc<T: DataType>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        DeviceBuffer::alloc(len)
    }

    /// As [`Stream::alloc`], zeroed in stream order on this stream (work on
    /// other streams that reads it must be ordered after this stream).
    ///
    /// # Errors
    /// As [`DeviceBuffer::alloc`].
    pub fn alloc_zeroed<T: DataType>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        let mut b = self.alloc(len)?;
        b.memset_async(0, self)?;
        Ok(b)
    }
}
