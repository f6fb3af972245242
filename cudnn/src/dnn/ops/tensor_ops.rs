//! Tensor arithmetic: [`Handle::add_tensor`] (bias add with cuDNN's
//! broadcasting), [`Handle::op_tensor`] with an [`OpTensorDescriptor`],
//! [`Handle::scale_tensor`], [`Handle::set_tensor`] and
//! [`Handle::transform_tensor`] (layout and element-type conversion).
//!
//! # Broadcasting
//! cuDNN's rule, checked before each call ([`check_broadcast`]): the
//! broadcast operand has the output's rank, and each of its dimensions
//! equals the output's or is 1 (a bias `[1, C, 1, 1]` onto `[N, C, H, W]`).

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;

use super::{DeviceTensor, DeviceTensorMut, check_broadcast, check_same_shape, scale_ptr};
use crate::check::{self, cudnn_call};
use crate::dnn::tensor::descriptor_owner;
use crate::dnn::{Handle, NanPropagation, TensorDescriptor};
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::sys::cudnn as dnn;

/// The compute type cuDNN wants for tensors of `T`: double for `f64`,
/// float otherwise.
pub(crate) fn compute_type<T: DataType>() -> dnn::cudnnDataType_t {
    if T::CUDNN == dnn::cudnnDataType_t::CUDNN_DATA_DOUBLE {
        dnn::cudnnDataType_t::CUDNN_DATA_DOUBLE
    } else {
        dnn::cudnnDataType_t::CUDNN_DATA_FLOAT
    }
}

/// The element-wise operation of [`Handle::op_tensor`]:
/// `C = op(alpha1 * A, alpha2 * B) + beta * C`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpTensorOp {
    /// `a + b` (`CUDNN_OP_TENSOR_ADD`).
    Add,
    /// `a * b` (`CUDNN_OP_TENSOR_MUL`).
    Mul,
    /// `min(a, b)` (`CUDNN_OP_TENSOR_MIN`).
    Min,
    /// `max(a, b)` (`CUDNN_OP_TENSOR_MAX`).
    Max,
    /// `sqrt(a)`; unary, `B` is not read (`CUDNN_OP_TENSOR_SQRT`).
    Sqrt,
    /// Logical not of `a` (1 where `a` is 0, else 0; on 0/1 inputs that is
    /// `1 - a`); unary, `B` is not read (`CUDNN_OP_TENSOR_NOT`).
    Not,
}

impl OpTensorOp {
    /// Every operation.
    pub const ALL: [OpTensorOp; 6] = [
        OpTensorOp::Add,
        OpTensorOp::Mul,
        OpTensorOp::Min,
        OpTensorOp::Max,
        OpTensorOp::Sqrt,
        OpTensorOp::Not,
    ];

    /// Whether the operation reads only `A`.
    pub fn is_unary(self) -> bool {
        matches!(self, OpTensorOp::Sqrt | OpTensorOp::Not)
    }

    /// The cuDNN constant.
    pub fn to_raw(self) -> dnn::cudnnOpTensorOp_t {
        use dnn::cudnnOpTensorOp_t as O;
        match self {
            OpTensorOp::Add => O::CUDNN_OP_TENSOR_ADD,
            OpTensorOp::Mul => O::CUDNN_OP_TENSOR_MUL,
            OpTensorOp::Min => O::CUDNN_OP_TENSOR_MIN,
            OpTensorOp::Max => O::CUDNN_OP_TENSOR_MAX,
            OpTensorOp::Sqrt => O::CUDNN_OP_TENSOR_SQRT,
            OpTensorOp::Not => O::CUDNN_OP_TENSOR_NOT,
        }
    }

    /// From the cuDNN constant; unknown values are an error.
    pub fn from_raw(raw: dnn::cudnnOpTensorOp_t) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|o| o.to_raw() == raw)
            .ok_or_else(|| Error::invalid("op", "unknown cudnnOpTensorOp_t", raw.0))
    }
}

descriptor_owner!(
    /// Owns a `cudnnOpTensorDescriptor_t`.
    RawOpTensor,
    cudnnOpTensorStruct,
    cudnnCreateOpTensorDescriptor,
    cudnnDestroyOpTensorDescriptor
);

/// A cuDNN op-tensor descriptor for tensors of `T`: the operation, NaN
/// propagation, and the compute type (`f64` for `f64` tensors, `f32`
/// otherwise, chosen from `T`).
///
/// `Send` (a plain host structure, tied to no handle, stream or thread), not `Sync`.
pub struct OpTensorDescriptor<T: DataType> {
    raw: RawOpTensor,
    op: OpTensorOp,
    nan: NanPropagation,
    _t: PhantomData<T>,
}

impl<T: DataType> OpTensorDescriptor<T> {
    /// An operation on tensors of `T`.
    ///
    /// # Errors
    /// What cuDNN reports (it accepts every operation and NaN option with
    /// the float and double compute types).
    #[doc(alias = "cudnnSetOpTensorDescriptor")]
    pub fn new(op: OpTensorOp, nan: NanPropagation) -> Result<Self> {
        let raw = RawOpTensor::create()?;
        // SAFETY: `raw` is a live descriptor we own; all values are known constants.
        unsafe {
            cudnn_call!(
                check::cudnn()?,
                cudnnSetOpTensorDescriptor(
                    raw.as_ptr(),
                    op.to_raw(),
                    compute_type::<T>(),
                    nan.to_raw()
                )
            )
        }?;
        Ok(Self {
            raw,
            op,
            nan,
            _t: PhantomData,
        })
    }

    /// The operation.
    pub fn op(&self) -> OpTensorOp {
        self.op
    }

    /// NaN propagation.
    pub fn nan_propagation(&self) -> NanPropagation {
        self.nan
    }

    /// The raw descriptor, still owned by `self`. Do not set it through this
    /// pointer: the settings kept on the Rust side would no longer match.
    pub fn as_raw(&self) -> dnn::cudnnOpTensorDescriptor_t {
        self.raw.as_ptr()
    }

    /// Give up ownership of the raw descriptor (the caller destroys it).
    pub fn into_raw(self) -> dnn::cudnnOpTensorDescriptor_t {
        self.raw.into_raw()
    }

    /// Take ownership of a descriptor made elsewhere, reading its settings
    /// back from cuDNN.
    ///
    /// # Errors
    /// A null pointer, an operation this type does not know, a compute type
    /// other than `T`'s. On error the descriptor is left alone (not destroyed).
    ///
    /// # Safety
    /// `raw` was made by `cudnnCreateOpTensorDescriptor`, is not destroyed,
    /// and nothing else destroys or modifies it from now on.
    #[doc(alias = "cudnnGetOpTensorDescriptor")]
    pub unsafe fn from_raw(raw: dnn::cudnnOpTensorDescriptor_t) -> Result<Self> {
        if raw.is_null() {
            return Err(Error::invalid("raw", "must not be null", "null"));
        }
        let mut op = dnn::cudnnOpTensorOp_t(u32::MAX);
        let mut comp = dnn::cudnnDataType_t(u32::MAX);
        let mut nan = dnn::cudnnNanPropagation_t(u32::MAX);
        // SAFETY: the caller promises `raw` is a live op-tensor descriptor;
        // the out-pointers are valid.
        unsafe {
            cudnn_call!(
                check::cudnn()?,
                cudnnGetOpTensorDescriptor(raw, &mut op, &mut comp, &mut nan)
            )
        }?;
        if comp != compute_type::<T>() {
            return Err(Error::mismatch(
                format!("op-tensor compute type for {} tensors", T::NAME),
                compute_type::<T>().0,
                comp.0,
            ));
        }
        let (op, nan) = (OpTensorOp::from_raw(op)?, NanPropagation::from_raw(nan)?);
        // SAFETY: the caller hands us ownership of a live descriptor.
        let raw = unsafe { RawOpTensor::adopt(raw) }?;
        Ok(Self {
            raw,
            op,
            nan,
            _t: PhantomData,
        })
    }

    /// Destroy the descriptor now and report cuDNN's status (dropping it
    /// ignores the status).
    #[doc(alias = "cudnnDestroyOpTensorDescriptor")]
    pub fn destroy(self) -> Result<()> {
        self.raw.destroy()
    }
}

impl<T: DataType> fmt::Debug for OpTensorDescriptor<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpTensorDescriptor")
            .field("dtype", &T::NAME)
            .field("op", &self.op)
            .field("nan", &self.nan)
            .field("raw", &self.raw)
            .finish()
    }
}

/// What [`Handle::add_tensor`] checks before calling cuDNN: `a` broadcasts
/// onto `c` ([`check_broadcast`]).
///
/// # Errors
/// As [`check_broadcast`].
pub fn check_add_tensor<T: DataType>(
    a: &TensorDescriptor<T>,
    c: &TensorDescriptor<T>,
) -> Result<()> {
    check_broadcast("a", a.shape(), "c", c.shape())
}

/// What [`Handle::op_tensor`] checks before calling cuDNN: `a` has `c`'s
/// shape; a binary operation has a `b` that broadcasts onto `c`.
///
/// # Errors
/// [`Error::Mismatch`] for `a`; [`Error::InvalidArgument`] for a missing
/// `b`; as [`check_broadcast`] for `b`.
pub fn check_op_tensor<T: DataType>(
    op: OpTensorOp,
    a: &TensorDescriptor<T>,
    b: Option<&TensorDescriptor<T>>,
    c: &TensorDescriptor<T>,
) -> Result<()> {
    check_same_shape("c", c.shape(), "a", a.shape())?;
    match b {
        Some(b) => check_broadcast("b", b.shape(), "c", c.shape()),
        None if op.is_unary() => Ok(()),
        None => Err(Error::invalid(
            "b",
            format!("must be given for the binary operation {op:?}"),
            "None",
        )),
    }
}

/// What [`Handle::transform_tensor`] checks before calling cuDNN: `y` has
/// `x`'s shape (layouts and element types may differ).
///
/// # Errors
/// [`Error::Mismatch`] naming both shapes.
pub fn check_transform_tensor<T: DataType, U: DataType>(
    x: &TensorDescriptor<T>,
    y: &TensorDescriptor<U>,
) -> Result<()> {
    check_same_shape("x", x.shape(), "y", y.shape())
}

impl Handle {
    /// `c = alpha * a + beta * c`, `a` broadcast onto `c` (a bias add).
    ///
    /// # Errors
    /// [`check_add_tensor`]'s, then what cuDNN reports.
    #[doc(alias = "cudnnAddTensor")]
    pub fn add_tensor<T: DataType>(
        &mut self,
        alpha: T::Scale,
        a: DeviceTensor<'_, T>,
        beta: T::Scale,
        mut c: DeviceTensorMut<'_, T>,
    ) -> Result<()> {
        check_add_tensor(a.desc(), c.desc())?;
        let _on = self.launch("add_tensor", &[("a", a.device()), ("c", c.device())])?;
        let api = check::cudnn()?;
        // SAFETY: live handle and descriptors; `a` and `c` hold at least their
        // spans (checked when bound), `c` is exclusive; the broadcast rule
        // was checked, so cuDNN reads `a` only inside its span.
        unsafe {
            cudnn_call!(
                api,
                cudnnAddTensor(
                    self.as_raw(),
                    scale_ptr(&alpha),
                    a.desc().as_raw(),
                    a.ptr(),
                    scale_ptr(&beta),
                    c.desc().as_raw(),
                    c.ptr()
                )
            )
        }
    }

    /// `c = op(alpha1 * a, alpha2 * b) + beta * c`, `b` broadcast onto `c`.
    /// Unary operations ([`OpTensorOp::is_unary`]) take `b = None`.
    ///
    /// # Errors
    /// [`check_op_tensor`]'s, then what cuDNN reports.
    #[allow(clippy::too_many_arguments)] // cuDNN's arguments, in cuDNN's order
    #[doc(alias = "cudnnOpTensor")]
    pub fn op_tensor<T: DataType>(
        &mut self,
        op: &OpTensorDescriptor<T>,
        alpha1: T::Scale,
        a: DeviceTensor<'_, T>,
        alpha2: T::Scale,
        b: Option<DeviceTensor<'_, T>>,
        beta: T::Scale,
        mut c: DeviceTensorMut<'_, T>,
    ) -> Result<()> {
        check_op_tensor(op.op(), a.desc(), b.as_ref().map(|b| b.desc()), c.desc())?;
        // A unary operation does not read B; cuDNN still wants a valid one.
        let b = b.unwrap_or(a);
        let _on = self.launch(
            "op_tensor",
            &[("a", a.device()), ("b", b.device()), ("c", c.device())],
        )?;
        let api = check::cudnn()?;
        // SAFETY: live handle and descriptors; every buffer holds at least its
        // span (checked when bound), `c` is exclusive; `a` matches `c` and `b`
        // obeys the broadcast rule, so cuDNN reads only inside their spans.
        unsafe {
            cudnn_call!(
                api,
                cudnnOpTensor(
                    self.as_raw(),
                    op.as_raw(),
                    scale_ptr(&alpha1),
                    a.desc().as_raw(),
                    a.ptr(),
                    scale_ptr(&alpha2),
                    b.desc().as_raw(),
                    b.ptr(),
                    scale_ptr(&beta),
                    c.desc().as_raw(),
                    c.ptr()
                )
            )
        }
    }

    /// `y = alpha * y`.
    ///
    /// # Errors
    /// What cuDNN reports.
    #[doc(alias = "cudnnScaleTensor")]
    pub fn scale_tensor<T: DataType>(
        &mut self,
        mut y: DeviceTensorMut<'_, T>,
        alpha: T::Scale,
    ) -> Result<()> {
        let _on = self.launch("scale_tensor", &[("y", y.device())])?;
        let api = check::cudnn()?;
        // SAFETY: live handle and descriptor; `y` holds at least its span
        // (checked when bound) and is exclusive; alpha is a host value of the
        // scaling type.
        unsafe {
            cudnn_call!(
                api,
                cudnnScaleTensor(self.as_raw(), y.desc().as_raw(), y.ptr(), scale_ptr(&alpha))
            )
        }
    }

    /// Every element of `y` set to `value`.
    ///
    /// For `f16` and `bf16` tensors the value is handed to cuDNN as an `f32`
    /// (their scaling type): cuDNN 9 reads four bytes there, and a 2-byte
    /// half value came out as a subnormal float, so the tensor was set to 0
    /// (first GPU run, cuDNN 9.19 on an H100). Every other type is passed as
    /// itself. `f16`/`bf16` values widen to `f32` exactly, so the stored
    /// element is `value` bit for bit.
    ///
    /// # Errors
    /// What cuDNN reports.
    #[doc(alias = "cudnnSetTensor")]
    pub fn set_tensor<T: DataType>(
        &mut self,
        mut y: DeviceTensorMut<'_, T>,
        value: T,
    ) -> Result<()> {
        let _on = self.launch("set_tensor", &[("y", y.device())])?;
        let api = check::cudnn()?;
        let host = SetTensorValue::of(value);
        // SAFETY: live handle and descriptor; `y` holds at least its span
        // (checked when bound) and is exclusive; `host` lives to the end of
        // this block and is the value in the type cuDNN reads for `T` (f32
        // for f16/bf16, `T` otherwise, see `SetTensorValue::of`).
        unsafe {
            cudnn_call!(
                api,
                cudnnSetTensor(self.as_raw(), y.desc().as_raw(), y.ptr(), host.ptr())
            )
        }
    }

    /// `y = alpha * x + beta * y`, converting the layout (NCHW to NHWC, any
    /// strides) and the element type (`f32` to `f16`, ...). The two element
    /// types share a scaling type (so `f64` converts only to `f64`).
    ///
    /// # Errors
    /// [`check_transform_tensor`]'s, then what cuDNN reports (a conversion
    /// it does not do is `CUDNN_STATUS_NOT_SUPPORTED` or `BAD_PARAM`).
    #[doc(alias = "cudnnTransformTensor")]
    pub fn transform_tensor<T: DataType, U: DataType<Scale = T::Scale>>(
        &mut self,
        alpha: T::Scale,
        x: DeviceTensor<'_, T>,
        beta: T::Scale,
        mut y: DeviceTensorMut<'_, U>,
    ) -> Result<()> {
        check_transform_tensor(x.desc(), y.desc())?;
        let _on = self.launch("transform_tensor", &[("x", x.device()), ("y", y.device())])?;
        let api = check::cudnn()?;
        // SAFETY: live handle and descriptors; `x` and `y` hold at least their
        // spans (checked when bound), `y` is exclusive; both element types
        // share one scaling type, so alpha/beta are read as what they are.
        unsafe {
            cudnn_call!(
                api,
                cudnnTransformTensor(
                    self.as_raw(),
                    scale_ptr(&alpha),
                    x.desc().as_raw(),
                    x.ptr(),
                    scale_ptr(&beta),
                    y.desc().as_raw(),
                    y.ptr()
                )
            )
        }
    }
}

/// The host value `cudnnSetTensor` reads: an `f32` for half-precision
/// tensors (their scaling type), the element itself for every other type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum SetTensorValue<T> {
    /// A half-precision element widened to `f32` (exact).
    Widened(f32),
    /// The element as it is.
    Same(T),
}

impl<T: DataType> SetTensorValue<T> {
    /// The value cuDNN must be given for `value`.
    pub(crate) fn of(value: T) -> Self {
        let any: &dyn std::any::Any = &value;
        if let Some(h) = any.downcast_ref::<half::f16>() {
            Self::Widened(h.to_f32())
        } else if let Some(b) = any.downcast_ref::<half::bf16>() {
            Self::Widened(b.to_f32())
        } else {
            Self::Same(value)
        }
    }

    /// A pointer to the value, valid while `self` lives.
    fn ptr(&self) -> *const c_void {
        match self {
            Self::Widened(f) => (f as *const f32).cast(),
            Self::Same(v) => (v as *const T).cast(),
        }
    }
}

#[cfg(test)]
mod set_tensor_value_tests {
    use super::SetTensorValue;
    use half::{bf16, f16};

    // Independent truth: the IEEE binary16 / bfloat16 encodings of 3.25
    // (0x4280 / 0x4050) and the binary32 encoding 0x40500000, by hand.
    #[test]
    fn half_types_widen_to_the_exact_f32() {
        let h = f16::from_bits(0x4280);
        assert_eq!(SetTensorValue::of(h), SetTensorValue::Widened(3.25));
        let b = bf16::from_bits(0x4050);
        assert_eq!(SetTensorValue::of(b), SetTensorValue::Widened(3.25));
        match SetTensorValue::of(h) {
            SetTensorValue::Widened(f) => assert_eq!(f.to_bits(), 0x4050_0000),
            SetTensorValue::Same(_) => panic!("f16 must widen"),
        }
    }

    #[test]
    fn other_types_pass_through() {
        assert_eq!(SetTensorValue::of(3.25f32), SetTensorValue::Same(3.25f32));
        assert_eq!(SetTensorValue::of(3.25f64), SetTensorValue::Same(3.25f64));
        assert_eq!(SetTensorValue::of(-7i8), SetTensorValue::Same(-7i8));
    }

    proptest::proptest! {
        #[test]
        fn every_f16_bit_pattern_widens_exactly(bits in 0u16..=u16::MAX) {
            let h = f16::from_bits(bits);
            if let SetTensorValue::Widened(f) = SetTensorValue::of(h) {
                // NaN stays NaN; every other value round-trips exactly.
                if h.is_nan() { proptest::prop_assert!(f.is_nan()); }
                else { proptest::prop_assert_eq!(f16::from_f32(f).to_bits(), bits); }
            } else {
                proptest::prop_assert!(false, "f16 must widen");
            }
        }
    }
}
