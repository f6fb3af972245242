//! cudarc memory lent to this crate's ops: guards that hold cudarc's
//! `SyncOnDrop` and lend [`DeviceSlice`] / [`DeviceSliceMut`] views.

use std::fmt;
use std::marker::PhantomData;

use ::cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceRepr,
    SyncOnDrop,
};

use super::driver::{device_of, driver_error, guarded};
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::runtime::{Device, DeviceSlice, DeviceSliceMut};

mod sealed {
    /// Implemented for cudarc's own memory types only.
    pub trait Sealed {}
}

impl<T> sealed::Sealed for CudaSlice<T> {}
impl<T> sealed::Sealed for CudaView<'_, T> {}
impl<T> sealed::Sealed for CudaViewMut<'_, T> {}

/// cudarc's own device memory, to read: [`CudaSlice`], [`CudaView`] and
/// [`CudaViewMut`]. What the safe lends ([`CudarcScope::read`]) take:
/// cudarc's `DevicePtr` is a safe trait any type can implement, with any
/// address and length, so a safe lend cannot trust another type's answer.
/// Sealed: the crate implements it for those three types only.
///
/// [`CudarcScope::read`]: super::CudarcScope::read
pub trait CudarcMemory<T>: DevicePtr<T> + sealed::Sealed {}

/// cudarc's own device memory, to write: [`CudaSlice`] and
/// [`CudaViewMut`] (what [`CudarcScope::write`] takes; sealed, as
/// [`CudarcMemory`]).
///
/// [`CudarcScope::write`]: super::CudarcScope::write
pub trait CudarcMemoryMut<T>: DevicePtrMut<T> + sealed::Sealed {}

impl<T> CudarcMemory<T> for CudaSlice<T> {}
impl<T> CudarcMemory<T> for CudaView<'_, T> {}
impl<T> CudarcMemory<T> for CudaViewMut<'_, T> {}
impl<T> CudarcMemoryMut<T> for CudaSlice<T> {}
impl<T> CudarcMemoryMut<T> for CudaViewMut<'_, T> {}

/// The checked parts of a device range cudarc handed out: the address as a
/// host `usize`, and its byte length.
///
/// # Errors
/// [`Error::InvalidArgument`] naming `what` when the address does not fit a
/// host pointer, is null for a non-empty range, is not aligned for `T`, or
/// `len * size_of::<T>()` (or the range's end) overflows.
pub(crate) fn checked_parts<T: DataType>(what: &str, addr: u64, len: usize) -> Result<usize> {
    if addr == 0 && len > 0 {
        return Err(Error::invalid(
            format!("{what} device address"),
            "must not be null for a non-empty range",
            format!("null, {len} elements"),
        ));
    }
    let a = usize::try_from(addr).map_err(|_| {
        Error::invalid(
            format!("{what} device address"),
            "must fit in a host pointer",
            format!("{addr:#x}"),
        )
    })?;
    let bytes = len.checked_mul(T::SIZE).ok_or_else(|| {
        Error::invalid(
            format!("{what} length"),
            format!("times the element size {} must fit in usize", T::SIZE),
            len,
        )
    })?;
    if bytes > isize::MAX as usize || a.checked_add(bytes).is_none() {
        return Err(Error::invalid(
            format!("{what} range"),
            "must lie within the address space",
            format!("{a:#x} + {bytes} bytes"),
        ));
    }
    if !a.is_multiple_of(std::mem::align_of::<T>()) {
        return Err(Error::invalid(
            format!("{what} device address"),
            format!(
                "must be aligned to {} bytes for {}",
                std::mem::align_of::<T>(),
                T::NAME
            ),
            format!("{a:#x}"),
        ));
    }
    Ok(a)
}

/// `Ok` when the memory's cudarc context (`owner`) is the stream's: cudarc
/// records its read/write event on the stream and refuses
/// (`CUDA_ERROR_INVALID_CONTEXT`, kept silently in the context's error
/// state) when the event's context is another, so the guard's drop would
/// record nothing and later cudarc work would not wait for this crate's.
///
/// The stream's context must also be primary: this crate's launches run in
/// the primary context of the view's device (`cudaSetDevice`), where memory
/// of a non-primary context is not valid ([`CudarcRead::new`] and
/// [`CudarcWrite::new`] take any cudarc stream, unlike
/// [`CudarcStream::new`](super::CudarcStream::new), which checks this).
///
/// # Errors
/// [`Error::InvalidArgument`] naming both contexts' devices.
pub(crate) fn same_context(owner: &CudaContext, stream: &CudaStream) -> Result<()> {
    if *owner == **stream.context() && owner.is_primary() {
        return Ok(());
    }
    Err(Error::invalid(
        "cudarc slice",
        format!(
            "must belong to the stream's cudarc context, a primary one (device {}{})",
            stream.context().ordinal(),
            if stream.context().is_primary() {
                ", primary"
            } else {
                ""
            }
        ),
        format!(
            "a slice of another context (device {}{})",
            owner.ordinal(),
            if owner.is_primary() { ", primary" } else { "" }
        ),
    ))
}

/// cudarc memory lent for reading (see
/// [`CudarcStream::read`](super::CudarcStream::read)).
///
/// Holds cudarc's `SyncOnDrop` (which records the read on the stream when
/// the guard drops) and the borrow of the cudarc slice or view; lends a
/// [`DeviceSlice`] borrowed from the guard, so nothing that holds the
/// pointer (an op call, a graph plan's cached `Bindings`) outlives it.
pub struct CudarcRead<'a, T: DataType> {
    addr: usize,
    len: usize,
    device: Device,
    _sync: SyncOnDrop<'a>,
    _elem: PhantomData<&'a [T]>,
    /// Not `Send`: cudarc records the event on the stream *as named on the
    /// thread that drops the guard*, and cudarc's per-thread stream names
    /// another queue on every thread.
    _thread: PhantomData<*const ()>,
}

impl<T: DataType> fmt::Debug for CudarcRead<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CudarcRead<{}> {{ addr: {:#x}, len: {}, device: {} }}",
            T::NAME,
            self.addr,
            self.len,
            self.device.ordinal()
        )
    }
}

impl<'a, T: DataType + DeviceRepr> CudarcRead<'a, T> {
    /// Through `src.device_ptr(stream)`, after making `stream`'s context
    /// current (cudarc's `bind_to_thread`): the stream waits for cudarc's
    /// last write of `src`; the read is recorded on `stream` when the guard
    /// drops.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `src` belongs to another cudarc
    /// context than `stream` (another device), or either is not a primary
    /// context;
    /// [`Error::Driver`] from cudarc's event calls (recorded in its
    /// context); [`Error::InvalidArgument`] from the range checks.
    ///
    /// # Safety
    /// See [`CudarcStream::read`](super::CudarcStream::read): queue the work
    /// that uses the guard's views on `stream` only, drop the guard (never
    /// leak it) before cudarc uses or frees `src` elsewhere, and `src`'s
    /// address and length are true (an allocation of that many elements).
    pub unsafe fn new<S: DevicePtr<T>>(src: &'a S, stream: &'a CudaStream) -> Result<Self> {
        same_context(src.stream().context(), stream)?;
        // The stream's context current before anything is enqueued (one
        // `cuCtxGetCurrent`; a `cuCtxSetCurrent` only when another is).
        guarded("cudarc CudaContext::bind_to_thread", || {
            stream.context().bind_to_thread()
        })?;
        let device = device_of(src.stream().context())?;
        let len = src.len();
        let (ptr, sync) = src.device_ptr(stream);
        stream
            .context()
            .check_err()
            .map_err(|e| driver_error("cudarc DevicePtr::device_ptr", e))?;
        let addr = checked_parts::<T>("cudarc slice", ptr, len)?;
        Ok(CudarcRead {
            addr,
            len,
            device,
            _sync: sync,
            _elem: PhantomData,
            _thread: PhantomData,
        })
    }
}

impl<'a, T: DataType> CudarcRead<'a, T> {
    /// The checked address, length, device and cudarc's record-on-drop.
    pub(crate) fn into_parts(self) -> (usize, usize, Device, SyncOnDrop<'a>) {
        (self.addr, self.len, self.device, self._sync)
    }

    /// The memory as this crate's view, borrowed from the guard.
    pub fn view(&self) -> DeviceSlice<'_, T> {
        // SAFETY: `addr`/`len` come from cudarc's `device_ptr` of a live
        // `CudaSlice`/`CudaView` of `len` elements of `T` on `device`
        // (checked: fits, aligned), borrowed for `'a` by this guard; the
        // view borrows the guard, so it ends before the borrow does and
        // before cudarc records the read (the guard's drop).
        unsafe { DeviceSlice::from_raw_parts_on(self.addr as *const T, self.len, self.device) }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device the memory is on (the cudarc slice's context).
    pub fn device(&self) -> Device {
        self.device
    }
}

impl<'g, T: DataType> From<&'g CudarcRead<'_, T>> for DeviceSlice<'g, T> {
    fn from(g: &'g CudarcRead<'_, T>) -> Self {
        g.view()
    }
}

/// cudarc memory lent for writing (see
/// [`CudarcStream::write`](super::CudarcStream::write)): as [`CudarcRead`],
/// with an exclusive borrow of the cudarc slice, lending a
/// [`DeviceSliceMut`].
pub struct CudarcWrite<'a, T: DataType> {
    addr: usize,
    len: usize,
    device: Device,
    _sync: SyncOnDrop<'a>,
    _elem: PhantomData<&'a mut [T]>,
    /// Not `Send`: cudarc records the event on the stream *as named on the
    /// thread that drops the guard*, and cudarc's per-thread stream names
    /// another queue on every thread.
    _thread: PhantomData<*const ()>,
}

impl<T: DataType> fmt::Debug for CudarcWrite<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CudarcWrite<{}> {{ addr: {:#x}, len: {}, device: {} }}",
            T::NAME,
            self.addr,
            self.len,
            self.device.ordinal()
        )
    }
}

impl<'a, T: DataType + DeviceRepr> CudarcWrite<'a, T> {
    /// Through `dst.device_ptr_mut(stream)`: the stream waits for cudarc's
    /// last reads and writes of `dst`; the write is recorded on `stream`
    /// when the guard drops.
    ///
    /// # Errors
    /// As [`CudarcRead::new`].
    ///
    /// # Safety
    /// See [`CudarcStream::write`](super::CudarcStream::write): as
    /// [`CudarcRead::new`].
    pub unsafe fn new<S: DevicePtrMut<T>>(dst: &'a mut S, stream: &'a CudaStream) -> Result<Self> {
        same_context(dst.stream().context(), stream)?;
        guarded("cudarc CudaContext::bind_to_thread", || {
            stream.context().bind_to_thread()
        })?;
        let device = device_of(dst.stream().context())?;
        let len = dst.len();
        let (ptr, sync) = dst.device_ptr_mut(stream);
        stream
            .context()
            .check_err()
            .map_err(|e| driver_error("cudarc DevicePtrMut::device_ptr_mut", e))?;
        let addr = checked_parts::<T>("cudarc slice", ptr, len)?;
        Ok(CudarcWrite {
            addr,
            len,
            device,
            _sync: sync,
            _elem: PhantomData,
            _thread: PhantomData,
        })
    }
}

impl<'a, T: DataType> CudarcWrite<'a, T> {
    /// The checked address, length, device and cudarc's record-on-drop.
    pub(crate) fn into_parts(self) -> (usize, usize, Device, SyncOnDrop<'a>) {
        (self.addr, self.len, self.device, self._sync)
    }

    /// The memory as this crate's writable view, borrowed from the guard.
    pub fn view_mut(&mut self) -> DeviceSliceMut<'_, T> {
        // SAFETY: as `CudarcRead::view`, and the guard holds cudarc's
        // exclusive borrow (`device_ptr_mut(&mut self)`), lent out once at a
        // time through `&mut self`.
        unsafe { DeviceSliceMut::from_raw_parts_mut_on(self.addr as *mut T, self.len, self.device) }
    }

    /// The memory as a read-only view, borrowed from the guard.
    pub fn view(&self) -> DeviceSlice<'_, T> {
        // SAFETY: as `CudarcRead::view`; reads through `&self` exclude the
        // writable view (`&mut self`).
        unsafe { DeviceSlice::from_raw_parts_on(self.addr as *const T, self.len, self.device) }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device the memory is on (the cudarc slice's context).
    pub fn device(&self) -> Device {
        self.device
    }
}

impl<'g, T: DataType> From<&'g mut CudarcWrite<'_, T>> for DeviceSliceMut<'g, T> {
    fn from(g: &'g mut CudarcWrite<'_, T>) -> Self {
        g.view_mut()
    }
}

impl<'g, T: DataType> From<&'g CudarcWrite<'_, T>> for DeviceSlice<'g, T> {
    fn from(g: &'g CudarcWrite<'_, T>) -> Self {
        g.view()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn unit_checked_parts_hand_cases() {
        assert_eq!(checked_parts::<f32>("x", 0x1000, 4).ok(), Some(0x1000));
        assert_eq!(checked_parts::<f32>("x", 0, 0).ok(), Some(0));
        // Misaligned for f32, fine for u8.
        assert!(checked_parts::<f32>("x", 0x1002, 1).is_err());
        assert_eq!(checked_parts::<u8>("x", 0x1003, 1).ok(), Some(0x1003));
        // Overflowing sizes and ends.
        assert!(checked_parts::<f64>("x", 0x1000, usize::MAX / 4).is_err());
        assert!(checked_parts::<u8>("x", u64::MAX - 7, 16).is_err());
        let e = checked_parts::<f32>("cudarc slice", 0x1002, 1)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("cudarc slice device address"), "{e}");
        // Null: only for an empty range.
        let e = checked_parts::<f32>("cudarc slice", 0, 1)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("must not be null"), "{e}");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]
        /// Random and extreme addresses, lengths and sub-ranges: a typed
        /// error or a view whose slices stay inside it; never a panic.
        #[test]
        fn unit_fuzz_views_of_cudarc_ranges(
            addr in prop_oneof![any::<u64>(), (0u64..1 << 40).prop_map(|a| a * 256)],
            len in prop_oneof![any::<usize>(), 0usize..100_000],
            start in any::<usize>(),
            end in any::<usize>(),
            mid in any::<usize>(),
        ) {
            let dev = Device::from_runtime(0);
            if let Ok(a) = checked_parts::<f32>("x", addr, len) {
                prop_assert!(a != 0 || len == 0);
                prop_assert!(a.is_multiple_of(4));
                prop_assert!(len.checked_mul(4).and_then(|b| a.checked_add(b)).is_some());
                // SAFETY: the view is never dereferenced or passed to a
                // library: only its host-side bookkeeping is exercised.
                let v = unsafe { DeviceSlice::<f32>::from_raw_parts_on(a as *const f32, len, dev) };
                match v.slice(start..end) {
                    Ok(s) => {
                        prop_assert!(start <= end && end <= len);
                        prop_assert_eq!(s.len(), end - start);
                        prop_assert_eq!(s.device(), Some(dev));
                    }
                    Err(e) => prop_assert!(matches!(e, Error::InvalidArgument { .. }), "{:?}", e),
                }
                match v.split_at(mid) {
                    Ok((l, r)) => prop_assert_eq!(l.len() + r.len(), len),
                    Err(e) => prop_assert!(mid > len && matches!(e, Error::InvalidArgument { .. }), "{:?}", e),
                }
            }
        }
    }
}
