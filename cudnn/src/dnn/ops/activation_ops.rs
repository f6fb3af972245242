//! Activation forward and backward: [`Handle::activation_forward`],
//! [`Handle::activation_forward_in_place`], [`Handle::activation_backward`].
//!
//! cuDNN's activation functions do not take
//! [`ActivationMode::Identity`] (it exists for the fused convolution); this
//! crate runs it as a copy with blending (`cudnnTransformTensor`, or
//! `cudnnScaleTensor` in place), so every mode works everywhere.

use super::{DeviceTensor, DeviceTensorMut, Float, check_same_shape, scale_ptr};
use crate::check::{self, cudnn_call};
use crate::dnn::{ActivationDescriptor, ActivationMode, Handle, TensorDescriptor};
use crate::dtype::{DataType, Scale};
use crate::error::Result;

/// What [`Handle::activation_forward`] checks before calling cuDNN: `y`
/// has `x`'s shape (strides may differ).
///
/// # Errors
/// [`Error::Mismatch`](crate::Error::Mismatch) naming both shapes.
pub fn check_activation_forward<T: DataType>(
    x: &TensorDescriptor<T>,
    y: &TensorDescriptor<T>,
) -> Result<()> {
    check_same_shape("x", x.shape(), "y", y.shape())
}

/// What [`Handle::activation_backward`] checks before calling cuDNN: `y`,
/// `dy` and `dx` have `x`'s shape.
///
/// # Errors
/// [`Error::Mismatch`](crate::Error::Mismatch) naming the first that differs.
pub fn check_activation_backward<T: DataType>(
    y: &TensorDescriptor<T>,
    dy: &TensorDescriptor<T>,
    x: &TensorDescriptor<T>,
    dx: &TensorDescriptor<T>,
) -> Result<()> {
    check_same_shape("x", x.shape(), "y", y.shape())?;
    check_same_shape("x", x.shape(), "dy", dy.shape())?;
    check_same_shape("x", x.shape(), "dx", dx.shape())
}

impl Handle {
    /// `y = alpha * f(x) + beta * y`.
    ///
    /// # Errors
    /// [`check_activation_forward`]'s, then what cuDNN reports.
    #[doc(alias = "cudnnActivationForward")]
    pub fn activation_forward<T: DataType>(
        &mut self,
        act: &ActivationDescriptor,
        alpha: T::Scale,
        x: DeviceTensor<'_, T>,
        beta: T::Scale,
        y: DeviceTensorMut<'_, T>,
    ) -> Result<()> {
        check_activation_forward(x.desc(), y.desc())?;
        if act.mode() == ActivationMode::Identity {
            return self.transform_tensor(alpha, x, beta, y);
        }
        let mut y = y;
        let _on = self.launch(
            "activation_forward",
            &[("x", x.device()), ("y", y.device())],
        )?;
        let api = check::cudnn()?;
        // SAFETY: live handle and descriptors; `x` and `y` hold at least their
        // descriptors' spans (checked when bound) and do not overlap (`y` is
        // an exclusive borrow); alpha/beta are host values of the scaling type.
        unsafe {
            cudnn_call!(
                api,
                cudnnActivationForward(
                    self.as_raw(),
                    act.as_raw(),
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

    /// `xy = alpha * f(xy) + beta * xy`, in place (cuDNN allows the input
    /// and output to be the same buffer with the same descriptor).
    ///
    /// # Errors
    /// What cuDNN reports.
    #[doc(alias = "cudnnActivationForward")]
    pub fn activation_forward_in_place<T: Float>(
        &mut self,
        act: &ActivationDescriptor,
        alpha: T::Scale,
        mut xy: DeviceTensorMut<'_, T>,
        beta: T::Scale,
    ) -> Result<()> {
        if act.mode() == ActivationMode::Identity {
            let s = T::Scale::from_f64(T::scale_to_f64(alpha) + T::scale_to_f64(beta));
            return self.scale_tensor(xy, s);
        }
        let _on = self.launch("activation_forward_in_place", &[("xy", xy.device())])?;
        let api = check::cudnn()?;
        let p = xy.ptr();
        // SAFETY: as in `activation_forward`, with input and output the same
        // buffer and descriptor, which cuDNN documents as allowed.
        unsafe {
            cudnn_call!(
                api,
                cudnnActivationForward(
                    self.as_raw(),
                    act.as_raw(),
                    scale_ptr(&alpha),
                    xy.desc().as_raw(),
                    p.cast_const(),
                    scale_ptr(&beta),
                    xy.desc().as_raw(),
                    p
                )
            )
        }
    }

    /// `dx = alpha * f'(x) * dy + beta * dx`, where `y = f(x)` is the
    /// forward output.
    ///
    /// # Errors
    /// [`check_activation_backward`]'s, then what cuDNN reports.
    #[allow(clippy::too_many_arguments)] // cuDNN's arguments, in cuDNN's order
    #[doc(alias = "cudnnActivationBackward")]
    pub fn activation_backward<T: DataType>(
        &mut self,
        act: &ActivationDescriptor,
        alpha: T::Scale,
        y: DeviceTensor<'_, T>,
        dy: DeviceTensor<'_, T>,
        x: DeviceTensor<'_, T>,
        beta: T::Scale,
        mut dx: DeviceTensorMut<'_, T>,
    ) -> Result<()> {
        check_activation_backward(y.desc(), dy.desc(), x.desc(), dx.desc())?;
        if act.mode() == ActivationMode::Identity {
            return self.transform_tensor(alpha, dy, beta, dx);
        }
        let _on = self.launch(
            "activation_backward",
            &[
                ("y", y.device()),
                ("dy", dy.device()),
                ("x", x.device()),
                ("dx", dx.device()),
            ],
        )?;
        let api = check::cudnn()?;
        // SAFETY: as in `activation_forward`: live handle and descriptors,
        // every buffer at least its span, `dx` exclusive.
        unsafe {
            cudnn_call!(
                api,
                cudnnActivationBackward(
                    self.as_raw(),
                    act.as_raw(),
                    scale_ptr(&alpha),
                    y.desc().as_raw(),
                    y.ptr(),
                    dy.desc().as_raw(),
                    dy.ptr(),
                    x.desc().as_raw(),
                    x.ptr(),
                    scale_ptr(&beta),
                    dx.desc().as_raw(),
                    dx.ptr()
                )
            )
        }
    }
}
