//! The element-wise and normalization ops (documented in the `dnn`
//! module docs).

mod activation_ops;
mod batchnorm;
mod dropout;
mod pooling_ops;
mod reduce;
mod softmax;
mod tensor_ops;

pub use activation_ops::*;
pub use batchnorm::*;
pub use dropout::*;
pub use pooling_ops::*;
pub use reduce::*;
pub use softmax::*;
pub use tensor_ops::*;

use std::ffi::c_void;
use std::fmt;

use super::tensor::{MAX_DIMS, MIN_DIMS, TensorDescriptor, check_each, check_len, packed_strides};
use crate::dtype::{DataType, Scale};
use crate::error::{Error, Result};
use crate::runtime::{DeviceSlice, DeviceSliceMut};

mod sealed {
    pub trait Sealed {}
}

/// A floating-point element type: `f32`, `f64`, `f16`, `bf16`.
///
/// Sealed. Carries the type batch normalization keeps its parameters in
/// (`f32` for half types, as cuDNN requires) and exact conversions to and
/// from `f64` (for references and tests).
pub trait Float: DataType + sealed::Sealed {
    /// The batch-normalization parameter type (scale, bias, mean, variance):
    /// `f64` for `f64`, `f32` otherwise.
    type Param: Float<Scale = Self::Scale>;
    /// Widen to `f64` (exact).
    fn to_f64(self) -> f64;
    /// Round from `f64` to the nearest value of this type.
    fn from_f64(v: f64) -> Self;
    /// Widen a scaling factor of this type to `f64` (exact).
    fn scale_to_f64(s: Self::Scale) -> f64;
}

impl sealed::Sealed for f32 {}
impl Float for f32 {
    type Param = f32;
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn scale_to_f64(s: f32) -> f64 {
        f64::from(s)
    }
}

impl sealed::Sealed for f64 {}
impl Float for f64 {
    type Param = f64;
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(v: f64) -> Self {
        v
    }
    fn scale_to_f64(s: f64) -> f64 {
        s
    }
}

impl sealed::Sealed for half::f16 {}
impl Float for half::f16 {
    type Param = f32;
    fn to_f64(self) -> f64 {
        half::f16::to_f64(self)
    }
    fn from_f64(v: f64) -> Self {
        half::f16::from_f64(v)
    }
    fn scale_to_f64(s: f32) -> f64 {
        f64::from(s)
    }
}

impl sealed::Sealed for half::bf16 {}
impl Float for half::bf16 {
    type Param = f32;
    fn to_f64(self) -> f64 {
        half::bf16::to_f64(self)
    }
    fn from_f64(v: f64) -> Self {
        half::bf16::from_f64(v)
    }
    fn scale_to_f64(s: f32) -> f64 {
        f64::from(s)
    }
}

// ---------------------------------------------------------------------------
// Buffers bound to descriptors

/// A read-only device buffer with the descriptor that lays it out; made by
/// [`DeviceTensor::new`], which checks the buffer is long enough.
pub struct DeviceTensor<'a, T: DataType> {
    desc: &'a TensorDescriptor<T>,
    data: DeviceSlice<'a, T>,
}

impl<T: DataType> Clone for DeviceTensor<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: DataType> Copy for DeviceTensor<'_, T> {}

impl<T: DataType> fmt::Debug for DeviceTensor<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceTensor")
            .field("desc", self.desc)
            .field("data", &self.data)
            .finish()
    }
}

impl<'a, T: DataType> DeviceTensor<'a, T> {
    /// Bind `data` to `desc`.
    ///
    /// # Errors
    /// [`Error::Mismatch`] when `data` is shorter than
    /// [`desc.len_required()`](TensorDescriptor::len_required).
    pub fn new(desc: &'a TensorDescriptor<T>, data: impl Into<DeviceSlice<'a, T>>) -> Result<Self> {
        let data = data.into();
        check_buffer("tensor", desc.len_required(), data.len())?;
        Ok(Self { desc, data })
    }

    /// The descriptor.
    pub fn desc(&self) -> &'a TensorDescriptor<T> {
        self.desc
    }

    /// The buffer.
    pub fn data(&self) -> DeviceSlice<'a, T> {
        self.data
    }

    /// The device the buffer is on (see [`DeviceSlice::device`]).
    pub fn device(&self) -> Option<crate::runtime::Device> {
        self.data.device()
    }

    fn ptr(&self) -> *const c_void {
        self.data.as_raw()
    }
}

/// A writable device buffer with the descriptor that lays it out; made by
/// [`DeviceTensorMut::new`], which checks the buffer is long enough.
pub struct DeviceTensorMut<'a, T: DataType> {
    desc: &'a TensorDescriptor<T>,
    data: DeviceSliceMut<'a, T>,
}

impl<T: DataType> fmt::Debug for DeviceTensorMut<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceTensorMut")
            .field("desc", self.desc)
            .field("data", &self.data)
            .finish()
    }
}

impl<'a, T: DataType> DeviceTensorMut<'a, T> {
    /// Bind `data` to `desc`.
    ///
    /// # Errors
    /// [`Error::Mismatch`] when `data` is shorter than
    /// [`desc.len_required()`](TensorDescriptor::len_required).
    pub fn new(
        desc: &'a TensorDescriptor<T>,
        data: impl Into<DeviceSliceMut<'a, T>>,
    ) -> Result<Self> {
        let data = data.into();
        check_buffer("tensor", desc.len_required(), data.len())?;
        Ok(Self { desc, data })
    }

    /// The descriptor.
    pub fn desc(&self) -> &'a TensorDescriptor<T> {
        self.desc
    }

    /// The buffer, read-only.
    pub fn data(&self) -> DeviceSlice<'_, T> {
        self.data.as_slice()
    }

    /// The device the buffer is on (see [`DeviceSliceMut::device`]).
    pub fn device(&self) -> Option<crate::runtime::Device> {
        self.data.device()
    }

    /// The buffer.
    pub fn data_mut(&mut self) -> DeviceSliceMut<'_, T> {
        self.data.reborrow()
    }

    /// A read-only view of the same tensor.
    pub fn as_tensor(&self) -> DeviceTensor<'_, T> {
        DeviceTensor {
            desc: self.desc,
            data: self.data.as_slice(),
        }
    }

    /// A shorter-lived writable view of the same tensor.
    pub fn reborrow(&mut self) -> DeviceTensorMut<'_, T> {
        DeviceTensorMut {
            desc: self.desc,
            data: self.data.reborrow(),
        }
    }

    fn ptr(&mut self) -> *mut c_void {
        self.data.as_raw_mut()
    }
}

// ---------------------------------------------------------------------------
// Shared checks

/// `got` elements must be at least `required`.
pub(crate) fn check_buffer(what: &str, required: usize, got: usize) -> Result<()> {
    if got < required {
        return Err(Error::mismatch(
            format!("{what} buffer length in elements (the descriptor's len_required)"),
            format!(">= {required}"),
            got,
        ));
    }
    Ok(())
}

/// `b` (named `b_name`) must have the shape of `a` (named `a_name`).
pub(crate) fn check_same_shape(a_name: &str, a: &[usize], b_name: &str, b: &[usize]) -> Result<()> {
    if a != b {
        return Err(Error::mismatch(
            format!("{b_name} shape (must equal the {a_name} shape)"),
            format!("{a:?}"),
            format!("{b:?}"),
        ));
    }
    Ok(())
}

/// cuDNN's broadcasting rule: `src` has the rank of `dst`, and each of its
/// dimensions equals `dst`'s or is 1.
///
/// # Errors
/// [`Error::Mismatch`] for different ranks; [`Error::InvalidArgument`]
/// naming the first dimension that breaks the rule, with both values.
pub fn check_broadcast(src_name: &str, src: &[usize], dst_name: &str, dst: &[usize]) -> Result<()> {
    if src.len() != dst.len() {
        return Err(Error::mismatch(
            format!("{src_name} rank (must equal the {dst_name} rank)"),
            dst.len(),
            src.len(),
        ));
    }
    for (i, (&s, &d)) in src.iter().zip(dst).enumerate() {
        if s != d && s != 1 {
            return Err(Error::invalid(
                format!("{src_name}.shape[{i}]"),
                format!(
                    "must equal {dst_name}.shape[{i}] ({d}) or be 1 (cuDNN's broadcasting rule)"
                ),
                s,
            ));
        }
    }
    Ok(())
}

/// A pointer to a host scaling factor, as cuDNN takes it.
pub(crate) fn scale_ptr<S: Scale>(s: &S) -> *const c_void {
    (s as *const S).cast()
}

/// Packed strides for `shape` with dimension 1 (channels) fastest:
/// `N, spatial..., C` in memory (NHWC for 4-d, NDHWC for 5-d).
fn channels_last_strides(shape: &[usize]) -> Option<Vec<usize>> {
    let c = *shape.get(1)?;
    let mut strides = vec![0usize; shape.len()];
    strides[1] = 1;
    let mut acc = c;
    for i in (2..shape.len()).rev() {
        strides[i] = acc;
        acc = acc.checked_mul(shape[i])?;
    }
    strides[0] = acc;
    Some(strides)
}

/// The memory layout of a packed tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TensorLayout {
    /// Row-major over the logical `N, C, spatial...` order (NCHW, NCDHW).
    ChannelsFirst,
    /// Channels fastest: `N, spatial..., C` in memory (NHWC, NDHWC).
    ChannelsLast,
}

impl TensorLayout {
    /// The layout of `desc`: channels-last when its strides are the packed
    /// channels-last strides and not also the channels-first ones (as when
    /// `C` or the spatial size is 1); channels-first otherwise (also for
    /// strided tensors). Strides of dimensions of size 1 are ignored.
    pub fn of<T: DataType>(desc: &TensorDescriptor<T>) -> TensorLayout {
        let shape = desc.shape();
        let same = |other: &[usize]| {
            shape
                .iter()
                .zip(desc.strides())
                .zip(other)
                .all(|((&d, &a), &b)| d == 1 || a == b)
        };
        let first = packed_strides(shape).is_ok_and(|p| same(&p));
        let last = channels_last_strides(shape).is_some_and(|p| same(&p));
        if last && !first {
            TensorLayout::ChannelsLast
        } else {
            TensorLayout::ChannelsFirst
        }
    }
}

/// A packed tensor descriptor of `shape` (3 to 8 dimensions, `N, C,
/// spatial...`) in `layout`.
///
/// # Errors
/// As [`TensorDescriptor::new`].
#[doc(alias = "cudnnSetTensorNdDescriptor")]
pub fn packed_in_layout<T: DataType>(
    shape: &[usize],
    layout: TensorLayout,
) -> Result<TensorDescriptor<T>> {
    match layout {
        TensorLayout::ChannelsFirst => TensorDescriptor::packed(shape),
        TensorLayout::ChannelsLast => {
            check_len("dims.len()", shape.len(), MIN_DIMS, MAX_DIMS)?;
            check_each("dims", shape, 1)?;
            let strides = channels_last_strides(shape).ok_or_else(|| {
                Error::invalid(
                    "dims",
                    "the packed size overflows usize",
                    format!("{shape:?}"),
                )
            })?;
            TensorDescriptor::new(shape, &strides)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_last() {
        // [n, c, h, w] = [2, 3, 4, 5]: C stride 1, W stride C = 3,
        // H stride W*C = 15, N stride H*W*C = 60.
        assert_eq!(
            channels_last_strides(&[2, 3, 4, 5]),
            Some(vec![60, 1, 15, 3])
        );
        // 5-d [2, 3, 4, 5, 6]: C 1, W 3, H 18, D 90, N 360.
        assert_eq!(
            channels_last_strides(&[2, 3, 4, 5, 6]),
            Some(vec![360, 1, 90, 18, 3])
        );
        assert_eq!(channels_last_strides(&[2]), None);
    }

    #[test]
    fn buffer_and_broadcast_checks() {
        assert!(check_buffer("x", 10, 10).is_ok());
        assert!(check_buffer("x", 10, 11).is_ok());
        let e = check_buffer("x", 10, 9).unwrap_err().to_string();
        assert!(e.contains(">= 10") && e.contains("got 9"), "{e}");
        assert!(check_broadcast("a", &[1, 3, 1, 1], "c", &[2, 3, 4, 5]).is_ok());
        let e = check_broadcast("a", &[1, 2, 1, 1], "c", &[2, 3, 4, 5])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a.shape[1]") && e.contains("(3)") && e.contains("got 2"),
            "{e}"
        );
        assert!(check_broadcast("a", &[1, 3, 1], "c", &[2, 3, 4, 5]).is_err());
    }
}
