//! Softmax forward and backward: [`Handle::softmax_forward`],
//! [`Handle::softmax_backward`].

use super::{DeviceTensor, DeviceTensorMut, check_same_shape, scale_ptr};
use crate::check::{self, cudnn_call};
use crate::dnn::{Handle, TensorDescriptor};
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::sys::cudnn as dnn;

/// How the softmax is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SoftmaxAlgorithm {
    /// `e^x / sum(e^x)`, without subtracting the maximum first: may
    /// overflow for large inputs (`CUDNN_SOFTMAX_FAST`).
    Fast,
    /// `e^(x - max) / sum(e^(x - max))` (`CUDNN_SOFTMAX_ACCURATE`).
    Accurate,
    /// The log-softmax `x - max - log(sum(e^(x - max)))` (`CUDNN_SOFTMAX_LOG`).
    Log,
}

impl SoftmaxAlgorithm {
    /// The cuDNN constant.
    pub fn to_raw(self) -> dnn::cudnnSoftmaxAlgorithm_t {
        use dnn::cudnnSoftmaxAlgorithm_t as A;
        match self {
            SoftmaxAlgorithm::Fast => A::CUDNN_SOFTMAX_FAST,
            SoftmaxAlgorithm::Accurate => A::CUDNN_SOFTMAX_ACCURATE,
            SoftmaxAlgorithm::Log => A::CUDNN_SOFTMAX_LOG,
        }
    }

    /// From the cuDNN constant; unknown values are an error.
    pub fn from_raw(raw: dnn::cudnnSoftmaxAlgorithm_t) -> Result<Self> {
        use dnn::cudnnSoftmaxAlgorithm_t as A;
        match raw {
            A::CUDNN_SOFTMAX_FAST => Ok(SoftmaxAlgorithm::Fast),
            A::CUDNN_SOFTMAX_ACCURATE => Ok(SoftmaxAlgorithm::Accurate),
            A::CUDNN_SOFTMAX_LOG => Ok(SoftmaxAlgorithm::Log),
            other => Err(Error::invalid(
                "algo",
                "unknown cudnnSoftmaxAlgorithm_t",
                other.0,
            )),
        }
    }
}

/// Over which elements each softmax is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SoftmaxMode {
    /// Per instance: over all of `C, spatial...` for each `n`
    /// (`CUDNN_SOFTMAX_MODE_INSTANCE`).
    Instance,
    /// Per channel: over `C` for each `n` and spatial position
    /// (`CUDNN_SOFTMAX_MODE_CHANNEL`).
    Channel,
}

impl SoftmaxMode {
    /// The cuDNN constant.
    pub fn to_raw(self) -> dnn::cudnnSoftmaxMode_t {
        match self {
            SoftmaxMode::Instance => dnn::cudnnSoftmaxMode_t::CUDNN_SOFTMAX_MODE_INSTANCE,
            SoftmaxMode::Channel => dnn::cudnnSoftmaxMode_t::CUDNN_SOFTMAX_MODE_CHANNEL,
        }
    }

    /// From the cuDNN constant; unknown values are an error.
    pub fn from_raw(raw: dnn::cudnnSoftmaxMode_t) -> Result<Self> {
        match raw {
            dnn::cudnnSoftmaxMode_t::CUDNN_SOFTMAX_MODE_INSTANCE => Ok(SoftmaxMode::Instance),
            dnn::cudnnSoftmaxMode_t::CUDNN_SOFTMAX_MODE_CHANNEL => Ok(SoftmaxMode::Channel),
            other => Err(Error::invalid(
                "mode",
                "unknown cudnnSoftmaxMode_t",
                other.0,
            )),
        }
    }
}

/// What [`Handle::softmax_forward`] checks before calling cuDNN: `y` has
/// `x`'s shape.
///
/// # Errors
/// [`Error::Mismatch`] naming both shapes.
pub fn check_softmax_forward<T: DataType>(
    x: &TensorDescriptor<T>,
    y: &TensorDescriptor<T>,
) -> Result<()> {
    check_same_shape("x", x.shape(), "y", y.shape())
}

/// What [`Handle::softmax_backward`] checks before calling cuDNN: `dy` and
/// `dx` have `y`'s shape.
///
/// # Errors
/// [`Error::Mismatch`] naming the first that differs.
pub fn check_softmax_backward<T: DataType>(
    y: &TensorDescriptor<T>,
    dy: &TensorDescriptor<T>,
    dx: &TensorDescriptor<T>,
) -> Result<()> {
    check_same_shape("y", y.shape(), "dy", dy.shape())?;
    check_same_shape("y", y.shape(), "dx", dx.shape())
}

impl Handle {
    /// `y = alpha * softmax(x) + beta * y` (or the log-softmax).
    ///
    /// # Errors
    /// [`check_softmax_forward`]'s, then what cuDNN reports.
    #[doc(alias = "cudnnSoftmaxForward")]
    pub fn softmax_forward<T: DataType>(
        &mut self,
        algo: SoftmaxAlgorithm,
        mode: SoftmaxMode,
        alpha: T::Scale,
        x: DeviceTensor<'_, T>,
        beta: T::Scale,
        mut y: DeviceTensorMut<'_, T>,
    ) -> Result<()> {
        check_softmax_forward(x.desc(), y.desc())?;
        let _on = self.launch("softmax_forward", &[("x", x.device()), ("y", y.device())])?;
        let api = check::cudnn()?;
        // SAFETY: live handle and descriptors; `x` and `y` hold at least their
        // spans (checked when bound) and do not overlap (`y` is exclusive);
        // alpha/beta are host values of the scaling type.
        unsafe {
            cudnn_call!(
                api,
                cudnnSoftmaxForward(
                    self.as_raw(),
                    algo.to_raw(),
                    mode.to_raw(),
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

    /// `dx = alpha * softmax'(y) * dy + beta * dx`, where `y` is the forward
    /// output (for [`SoftmaxAlgorithm::Log`]: the log-softmax).
    ///
    /// # Errors
    /// [`check_softmax_backward`]'s, then what cuDNN reports.
    #[allow(clippy::too_many_arguments)] // cuDNN's arguments, in cuDNN's order
    #[doc(alias = "cudnnSoftmaxBackward")]
    pub fn softmax_backward<T: DataType>(
        &mut self,
        algo: SoftmaxAlgorithm,
        mode: SoftmaxMode,
        alpha: T::Scale,
        y: DeviceTensor<'_, T>,
        dy: DeviceTensor<'_, T>,
        beta: T::Scale,
        mut dx: DeviceTensorMut<'_, T>,
    ) -> Result<()> {
        check_softmax_backward(y.desc(), dy.desc(), dx.desc())?;
        let _on = self.launch(
            "softmax_backward",
            &[("y", y.device()), ("dy", dy.device()), ("dx", dx.device())],
        )?;
        let api = check::cudnn()?;
        // SAFETY: as in `softmax_forward`; `dx` is exclusive.
        unsafe {
            cudnn_call!(
                api,
                cudnnSoftmaxBackward(
                    self.as_raw(),
                    algo.to_raw(),
                    mode.to_raw(),
                    scale_ptr(&alpha),
                    y.desc().as_raw(),
                    y.ptr(),
                    dy.desc().as_raw(),
                    dy.ptr(),
                    scale_ptr(&beta),
                    dx.desc().as_raw(),
                    dx.ptr()
                )
            )
        }
    }
}
