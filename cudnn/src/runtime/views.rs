//! Borrowed views of device memory: [`DeviceSlice`] and [`DeviceSliceMut`].

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::ops::RangeBounds;

use crate::check::{self, cuda_call};
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::sys::cudart::cudaMemcpyKind;

use super::copy::*;
use super::{Device, Stream};

// ---------------------------------------------------------------------------
// DeviceSlice

/// A borrowed, read-only view of device memory: the device analogue of `&'a [T]`.
///
/// The host never dereferences the pointer; the view only carries it, with
/// its length, to copies and library calls.
pub struct DeviceSlice<'a, T: DataType> {
    pub(super) ptr: *const T,
    pub(super) len: usize,
    /// The device the memory is on (`None`: empty, or foreign and unnamed).
    pub(super) device: Option<Device>,
    pub(super) _borrow: PhantomData<&'a [T]>,
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
    ///   `'a` except device work the caller orders with this view's uses;
    /// - the view records no device, so the crate cannot check it: the
    ///   memory is on the device of every handle and stream the view is used
    ///   with ([`from_raw_parts_on`](Self::from_raw_parts_on) records the
    ///   device, and then every launch checks it).
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
    /// of a [`DeviceBuffer`](crate::runtime::DeviceBuffer), the named one for a view made with
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
                self.device,
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
                self.device,
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
    pub(super) ptr: *mut T,
    pub(super) len: usize,
    /// The device the memory is on (`None`: empty, or foreign and unnamed).
    pub(super) device: Option<Device>,
    pub(super) _borrow: PhantomData<&'a mut [T]>,
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
    /// of a [`DeviceBuffer`](crate::runtime::DeviceBuffer), the named one for a view made with
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
                self.device,
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
                self.device,
                &copy_what::<T>("device to device", self.len),
            )
        }
    }

    /// Queue a device-to-device copy on `stream` (stream-ordered).
    ///
    /// # Errors
    /// [`Error::Mismatch`] naming both lengths; [`Error::DeviceMismatch`] when
    /// the destination or the source is not on the stream's device (peer
    /// copies between devices are not offered); [`Error::WrongThread`];
    /// [`Error::Cuda`].
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
        check_on_stream(
            || "the destination of an async device copy (the stream's device)".to_string(),
            stream,
            self.device,
        )?;
        // The source too: a peer copy from another device's memory would be
        // ordered only on this stream's device, and the source's free on its
        // own device would not wait for it.
        check_on_stream(
            || "the source of an async device copy (the stream's device)".to_string(),
            stream,
            src.device(),
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
                stream,
                &copy_what::<T>("device to device (async)", self.len),
            )
        }
    }

    /// Set every byte to `byte` (synchronous). `memset(0)` zeroes any `DataType`.
    ///
    /// # Errors
    /// [`Error::Cuda`]; [`Error::CaptureUnsafe`](crate::Error::CaptureUnsafe)
    /// inside a [`Stream::capture`](super::Stream::capture) closure (it runs
    /// on the legacy default stream and waits for it).
    #[doc(alias = "cudaMemset")]
    pub fn memset(&mut self, byte: u8) -> Result<()> {
        let bytes = self.byte_len();
        if bytes == 0 {
            return Ok(());
        }
        super::capture::forbid_in_capture_scope("memset", super::Hazard::HostSync)?;
        // On the buffer's device, whose legacy default stream runs it.
        let _on = on_device(self.device)?;
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
    /// [`Error::DeviceMismatch`] when the buffer is not on the stream's device;
    /// [`Error::WrongThread`]; [`Error::Cuda`].
    #[doc(alias = "cudaMemsetAsync")]
    pub fn memset_async(&mut self, byte: u8, stream: &Stream) -> Result<()> {
        let bytes = self.byte_len();
        if bytes == 0 {
            return Ok(());
        }
        check_on_stream(
            || "the buffer of an async memset (the stream's device)".to_string(),
            stream,
            self.device,
        )?;
        let _on = stream.enter("an async memset")?;
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

/// Check that memory on `got` may be used by work on `stream`: `Ok` when
/// `got` is unknown (empty or foreign memory), otherwise it must be the
/// stream's device (the current one for a stream whose device is unknown).
///
/// # Errors
/// [`Error::DeviceMismatch`] naming `what`; [`Error::Cuda`] when the current
/// device cannot be read.
pub(super) fn check_on_stream(
    what: impl FnOnce() -> String,
    stream: &Stream,
    got: Option<Device>,
) -> Result<()> {
    if got.is_none() {
        return Ok(());
    }
    let expected = match stream.device() {
        Some(d) => d,
        None => Device::current()?,
    };
    super::check_device(what, expected, got)
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(20_000))]

        /// Sub-views keep their device through any chain of slicing and
        /// splitting; bad ranges are typed errors, never panics. No CUDA
        /// call is made (the pointer is never dereferenced).
        #[test]
        fn unit_property_views_keep_their_device(
            dev in 0i32..8,
            len in 0usize..1000,
            ops in proptest::collection::vec((0u8..4, 0usize..1100, 0usize..1100), 0..6),
        ) {
            let device = Device::from_runtime(dev);
            // SAFETY: never dereferenced or passed to CUDA by this test.
            let mut v = unsafe { DeviceSliceMut::<f32>::from_raw_parts_mut_on(0x1000 as *mut f32, len, device) };
            for (op, a, b) in ops {
                let n = v.len();
                let same = |d: Option<Device>| assert_eq!(d, Some(device));
                let r: Result<()> = match op {
                    0 => v.slice(a..b).map(|s| same(s.device())),
                    1 => v.reborrow().split_at_mut(a).map(|(l, r)| {
                        same(l.device());
                        same(r.device());
                    }),
                    2 => v.reborrow().into_slice_mut(a..).map(|s| same(s.device())),
                    _ => v.as_slice().split_at(b).map(|(l, r)| {
                        same(l.device());
                        same(r.device());
                    }),
                };
                match r {
                    Ok(()) | Err(Error::InvalidArgument { .. }) => {}
                    Err(e) => proptest::prop_assert!(false, "untyped error {e:?}"),
                }
                if op == 2 && a <= n {
                    v = v
                        .into_slice_mut(a..)
                        .map_err(|e| proptest::test_runner::TestCaseError::fail(e.to_string()))?;
                }
                same(v.device());
                same(v.as_slice().device());
            }
        }
    }
}
