//! Batch normalization: [`BatchNormPlan`] (inference, training forward with
//! running statistics, backward), its parameter descriptor derived by cuDNN
//! ([`derive_batch_norm_descriptor`]).
//!
//! The parameters (scale, bias, means, variances and their gradients) are
//! kept in [`Float::Param`]: `f32` for `f16`, `bf16` and `f32` inputs, `f64`
//! for `f64`, as cuDNN requires. `x`, `y`, `dy` and `dx` share one
//! descriptor (the plan's `x`).
//!
//! Checked before cuDNN is called: every buffer is at least its
//! descriptor's span; `epsilon` is finite and at least cuDNN's minimum
//! ([`batch_norm_min_epsilon`]: `0` in cuDNN 8.9 and 9 alike); the
//! running-average factor is in `[0, 1]`.

use std::ffi::c_void;
use std::ptr;

use super::{Float, check_buffer, scale_ptr};
use crate::check::{self, cudnn_call};
use crate::dnn::tensor::RawTensor;
use crate::dnn::{Handle, TensorDescriptor};
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::runtime::{DeviceSlice, DeviceSliceMut};
use crate::sys::cudnn as dnn;

/// Over which elements the statistics are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BatchNormMode {
    /// One statistic per `C, spatial...` position, over `N`; parameters
    /// shaped `[1, C, spatial...]` (`CUDNN_BATCHNORM_PER_ACTIVATION`).
    PerActivation,
    /// One statistic per channel, over `N` and the spatial dimensions;
    /// parameters shaped `[1, C, 1, ...]` (`CUDNN_BATCHNORM_SPATIAL`).
    Spatial,
    /// As [`Spatial`](Self::Spatial), with a faster kernel that may
    /// overflow for some inputs (`CUDNN_BATCHNORM_SPATIAL_PERSISTENT`).
    SpatialPersistent,
}

impl BatchNormMode {
    /// The cuDNN constant.
    pub fn to_raw(self) -> dnn::cudnnBatchNormMode_t {
        use dnn::cudnnBatchNormMode_t as M;
        match self {
            BatchNormMode::PerActivation => M::CUDNN_BATCHNORM_PER_ACTIVATION,
            BatchNormMode::Spatial => M::CUDNN_BATCHNORM_SPATIAL,
            BatchNormMode::SpatialPersistent => M::CUDNN_BATCHNORM_SPATIAL_PERSISTENT,
        }
    }

    /// From the cuDNN constant; unknown values are an error.
    pub fn from_raw(raw: dnn::cudnnBatchNormMode_t) -> Result<Self> {
        use dnn::cudnnBatchNormMode_t as M;
        match raw {
            M::CUDNN_BATCHNORM_PER_ACTIVATION => Ok(BatchNormMode::PerActivation),
            M::CUDNN_BATCHNORM_SPATIAL => Ok(BatchNormMode::Spatial),
            M::CUDNN_BATCHNORM_SPATIAL_PERSISTENT => Ok(BatchNormMode::SpatialPersistent),
            other => Err(Error::invalid(
                "mode",
                "unknown cudnnBatchNormMode_t",
                other.0,
            )),
        }
    }

    /// The parameter shape for an input of `x_shape` (`[1, C, spatial...]`
    /// or `[1, C, 1, ...]`), computed in Rust.
    pub fn param_shape(self, x_shape: &[usize]) -> Vec<usize> {
        x_shape
            .iter()
            .enumerate()
            .map(|(i, &d)| match (i, self) {
                (0, _) => 1,
                (1, _) | (_, BatchNormMode::PerActivation) => d,
                _ => 1,
            })
            .collect()
    }
}

/// The smallest `epsilon` cuDNN accepts (`CUDNN_BN_MIN_EPSILON`). Both
/// supported stacks define it as `0.0`: the cuDNN 8.9 header
/// (`cudnn_ops_infer.h`) and the cuDNN 9 one (`cudnn_ops.h`).
///
/// # Errors
/// [`Error::Load`] when cuDNN cannot be found.
pub fn batch_norm_min_epsilon() -> Result<f64> {
    // Loaded only so the answer is about a library that is there.
    Handle::library_version()?;
    Ok(dnn::CUDNN_BN_MIN_EPSILON)
}

/// Check `epsilon` is finite and at least [`batch_norm_min_epsilon`].
///
/// # Errors
/// [`Error::InvalidArgument`] naming the value and the minimum.
pub fn check_batch_norm_epsilon(epsilon: f64) -> Result<()> {
    let min = batch_norm_min_epsilon()?;
    if !epsilon.is_finite() || epsilon < min {
        return Err(Error::invalid(
            "epsilon",
            format!("must be finite and >= {min} (CUDNN_BN_MIN_EPSILON of the loaded cuDNN)"),
            epsilon,
        ));
    }
    Ok(())
}

/// Check a running-average factor is in `[0, 1]`.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the value.
pub fn check_batch_norm_momentum(factor: f64) -> Result<()> {
    if !(0.0..=1.0).contains(&factor) {
        return Err(Error::invalid(
            "exponential_average_factor",
            "must be in [0, 1]",
            factor,
        ));
    }
    Ok(())
}

/// The parameter descriptor cuDNN derives for `x` in `mode`
/// (`[1, C, spatial...]` or `[1, C, 1, ...]`, packed, of [`Float::Param`]).
///
/// # Errors
/// What cuDNN reports; a derived descriptor of another element type than
/// `T::Param` (never seen) is an [`Error::Mismatch`].
#[doc(alias = "cudnnDeriveBNTensorDescriptor")]
pub fn derive_batch_norm_descriptor<T: Float>(
    x: &TensorDescriptor<T>,
    mode: BatchNormMode,
) -> Result<TensorDescriptor<T::Param>> {
    let api = check::cudnn()?;
    let raw = RawTensor::create()?;
    // SAFETY: `raw` is a live descriptor we own; `x` is live and set.
    unsafe {
        cudnn_call!(
            api,
            cudnnDeriveBNTensorDescriptor(raw.as_ptr(), x.as_raw(), mode.to_raw())
        )
    }?;
    let p = raw.into_raw();
    // SAFETY: `p` is a live descriptor we own and hand over; nothing else uses it.
    match unsafe { TensorDescriptor::<T::Param>::from_raw(p) } {
        Ok(d) => Ok(d),
        Err(e) => {
            // `from_raw` left it alone on error: take it back, so it is destroyed.
            // SAFETY: `p` is still live and ours.
            drop(unsafe { RawTensor::adopt(p) });
            Err(e)
        }
    }
}

/// Scale and bias (`gamma`, `beta`), read.
#[derive(Debug, Clone, Copy)]
pub struct BatchNormParams<'a, P: DataType> {
    /// Scale (`gamma`).
    pub scale: DeviceSlice<'a, P>,
    /// Bias (`beta`).
    pub bias: DeviceSlice<'a, P>,
}

/// Mean and variance, read: the running estimates used by inference.
#[derive(Debug, Clone, Copy)]
pub struct BatchNormStats<'a, P: DataType> {
    /// Estimated mean.
    pub mean: DeviceSlice<'a, P>,
    /// Estimated variance.
    pub variance: DeviceSlice<'a, P>,
}

/// Running mean and variance, updated by training:
/// `running = (1 - factor) * running + factor * batch` (the variance with
/// the unbiased batch variance).
#[derive(Debug)]
pub struct BatchNormRunning<'a, P: DataType> {
    /// Running mean.
    pub mean: DeviceSliceMut<'a, P>,
    /// Running variance.
    pub variance: DeviceSliceMut<'a, P>,
}

/// The batch mean and inverse standard deviation `1 / sqrt(var + epsilon)`
/// training saves for the backward pass.
#[derive(Debug)]
pub struct BatchNormSaved<'a, P: DataType> {
    /// Batch mean.
    pub mean: DeviceSliceMut<'a, P>,
    /// `1 / sqrt(batch variance + epsilon)`.
    pub inv_variance: DeviceSliceMut<'a, P>,
}

/// What [`BatchNormSaved`] holds, read by the backward pass.
#[derive(Debug, Clone, Copy)]
pub struct BatchNormSavedRef<'a, P: DataType> {
    /// Batch mean.
    pub mean: DeviceSlice<'a, P>,
    /// `1 / sqrt(batch variance + epsilon)`.
    pub inv_variance: DeviceSlice<'a, P>,
}

/// The parameter gradients the backward pass writes.
#[derive(Debug)]
pub struct BatchNormGrads<'a, P: DataType> {
    /// Gradient of the scale.
    pub dscale: DeviceSliceMut<'a, P>,
    /// Gradient of the bias.
    pub dbias: DeviceSliceMut<'a, P>,
}

/// Batch normalization for one input shape and mode: owns the input
/// descriptor (shared by `x`, `y`, `dy`, `dx`), the derived parameter
/// descriptor and `epsilon`.
///
/// ```no_run
/// # use cudnn::dnn::*;
/// # use cudnn::runtime::{DeviceBuffer, Stream};
/// let stream = Stream::new()?;
/// let mut h = Handle::new(&stream)?;
/// let x_desc = TensorDescriptor::<half::f16>::nhwc(32, 64, 28, 28)?;
/// let bn = BatchNormPlan::new(BatchNormMode::Spatial, x_desc, 1e-5)?;
/// assert_eq!(bn.param_desc().shape(), [1, 64, 1, 1]); // f32 parameters
/// # Ok::<(), cudnn::Error>(())
/// ```
#[derive(Debug)]
pub struct BatchNormPlan<T: Float> {
    mode: BatchNormMode,
    x: TensorDescriptor<T>,
    param: TensorDescriptor<T::Param>,
    epsilon: f64,
}

impl<T: Float> BatchNormPlan<T> {
    /// Plan batch normalization of `x` in `mode` with `epsilon`.
    ///
    /// # Errors
    /// [`check_batch_norm_epsilon`]'s, then what cuDNN reports deriving the
    /// parameter descriptor.
    pub fn new(mode: BatchNormMode, x: TensorDescriptor<T>, epsilon: f64) -> Result<Self> {
        check_batch_norm_epsilon(epsilon)?;
        let param = derive_batch_norm_descriptor(&x, mode)?;
        Ok(Self {
            mode,
            x,
            param,
            epsilon,
        })
    }

    /// The mode.
    pub fn mode(&self) -> BatchNormMode {
        self.mode
    }

    /// The descriptor of `x`, `y`, `dy` and `dx`.
    pub fn x_desc(&self) -> &TensorDescriptor<T> {
        &self.x
    }

    /// The descriptor of every parameter and statistic.
    pub fn param_desc(&self) -> &TensorDescriptor<T::Param> {
        &self.param
    }

    /// `epsilon`.
    pub fn epsilon(&self) -> f64 {
        self.epsilon
    }

    fn check_x(&self, name: &str, len: usize) -> Result<()> {
        check_buffer(name, self.x.len_required(), len)
    }

    fn check_p(&self, name: &str, len: usize) -> Result<()> {
        check_buffer(name, self.param.len_required(), len)
    }

    /// Inference: `y = alpha * (scale * (x - mean) / sqrt(variance +
    /// epsilon) + bias) + beta * y`, with the running estimates.
    ///
    /// # Errors
    /// A buffer shorter than its descriptor's span (named), then what cuDNN reports.
    #[doc(alias = "cudnnBatchNormalizationForwardInference")]
    #[allow(clippy::too_many_arguments)] // cuDNN's arguments, grouped
    pub fn forward_inference<'a>(
        &self,
        handle: &mut Handle,
        alpha: T::Scale,
        beta: T::Scale,
        x: impl Into<DeviceSlice<'a, T>>,
        y: impl Into<DeviceSliceMut<'a, T>>,
        params: BatchNormParams<'_, T::Param>,
        stats: BatchNormStats<'_, T::Param>,
    ) -> Result<()> {
        let (x, mut y) = (x.into(), y.into());
        self.check_x("x", x.len())?;
        self.check_x("y", y.len())?;
        self.check_p("scale", params.scale.len())?;
        self.check_p("bias", params.bias.len())?;
        self.check_p("mean", stats.mean.len())?;
        self.check_p("variance", stats.variance.len())?;
        let _on = handle.launch(
            "batch norm forward (inference)",
            &[
                ("x", x.device()),
                ("y", y.device()),
                ("scale", params.scale.device()),
                ("bias", params.bias.device()),
                ("mean", stats.mean.device()),
                ("variance", stats.variance.device()),
            ],
        )?;
        let api = check::cudnn()?;
        // SAFETY: live handle and descriptors; every buffer holds at least its
        // descriptor's span (checked above); `y` is exclusive; alpha/beta are
        // host values of the scaling type; epsilon was checked at planning.
        unsafe {
            cudnn_call!(
                api,
                cudnnBatchNormalizationForwardInference(
                    handle.as_raw(),
                    self.mode.to_raw(),
                    scale_ptr(&alpha),
                    scale_ptr(&beta),
                    self.x.as_raw(),
                    x.as_raw(),
                    self.x.as_raw(),
                    y.as_raw_mut(),
                    self.param.as_raw(),
                    params.scale.as_raw(),
                    params.bias.as_raw(),
                    stats.mean.as_raw(),
                    stats.variance.as_raw(),
                    self.epsilon
                )
            )
        }
    }

    /// Training: normalize `x` with the batch statistics, update the running
    /// statistics with `exponential_average_factor` (1 on the first step,
    /// then the momentum), and save the batch mean and inverse standard
    /// deviation for [`backward`](Self::backward) when `saved` is given.
    ///
    /// # Errors
    /// [`check_batch_norm_momentum`]'s, a buffer shorter than its
    /// descriptor's span (named), then what cuDNN reports.
    #[doc(alias = "cudnnBatchNormalizationForwardTraining")]
    #[allow(clippy::too_many_arguments)] // cuDNN's arguments, grouped
    pub fn forward_training<'a>(
        &self,
        handle: &mut Handle,
        alpha: T::Scale,
        beta: T::Scale,
        x: impl Into<DeviceSlice<'a, T>>,
        y: impl Into<DeviceSliceMut<'a, T>>,
        params: BatchNormParams<'_, T::Param>,
        exponential_average_factor: f64,
        running: BatchNormRunning<'_, T::Param>,
        saved: Option<BatchNormSaved<'_, T::Param>>,
    ) -> Result<()> {
        check_batch_norm_momentum(exponential_average_factor)?;
        let (x, mut y) = (x.into(), y.into());
        let mut running = running;
        self.check_x("x", x.len())?;
        self.check_x("y", y.len())?;
        self.check_p("scale", params.scale.len())?;
        self.check_p("bias", params.bias.len())?;
        self.check_p("running mean", running.mean.len())?;
        self.check_p("running variance", running.variance.len())?;
        let mut saved = saved;
        let (save_mean, save_inv): (*mut c_void, *mut c_void) = match saved.as_mut() {
            Some(s) => {
                self.check_p("saved mean", s.mean.len())?;
                self.check_p("saved inverse variance", s.inv_variance.len())?;
                (s.mean.as_raw_mut(), s.inv_variance.as_raw_mut())
            }
            None => (ptr::null_mut(), ptr::null_mut()),
        };
        let _on = handle.launch(
            "batch norm forward (training)",
            &[
                ("x", x.device()),
                ("y", y.device()),
                ("scale", params.scale.device()),
                ("bias", params.bias.device()),
                ("running mean", running.mean.device()),
                ("running variance", running.variance.device()),
                ("saved mean", saved.as_ref().and_then(|s| s.mean.device())),
                (
                    "saved inverse variance",
                    saved.as_ref().and_then(|s| s.inv_variance.device()),
                ),
            ],
        )?;
        let api = check::cudnn()?;
        // SAFETY: live handle and descriptors; every buffer holds at least its
        // descriptor's span (checked above) and every written one is an
        // exclusive borrow (the saved pointers come from `saved`, which lives
        // to the end of the call); null saved pointers are documented as "not saved".
        unsafe {
            cudnn_call!(
                api,
                cudnnBatchNormalizationForwardTraining(
                    handle.as_raw(),
                    self.mode.to_raw(),
                    scale_ptr(&alpha),
                    scale_ptr(&beta),
                    self.x.as_raw(),
                    x.as_raw(),
                    self.x.as_raw(),
                    y.as_raw_mut(),
                    self.param.as_raw(),
                    params.scale.as_raw(),
                    params.bias.as_raw(),
                    exponential_average_factor,
                    running.mean.as_raw_mut(),
                    running.variance.as_raw_mut(),
                    self.epsilon,
                    save_mean,
                    save_inv
                )
            )
        }
    }

    /// Backward: `dx = alpha_data * dL/dx + beta_data * dx`, and the
    /// parameter gradients `dscale`, `dbias` blended with
    /// `(alpha_param, beta_param)`. `saved` is what
    /// [`forward_training`](Self::forward_training) saved (cuDNN recomputes
    /// the statistics from `x` without it).
    ///
    /// # Errors
    /// A buffer shorter than its descriptor's span (named), then what cuDNN reports.
    #[doc(alias = "cudnnBatchNormalizationBackward")]
    #[allow(clippy::too_many_arguments)] // cuDNN's arguments, grouped
    pub fn backward<'a>(
        &self,
        handle: &mut Handle,
        (alpha_data, beta_data): (T::Scale, T::Scale),
        (alpha_param, beta_param): (T::Scale, T::Scale),
        x: impl Into<DeviceSlice<'a, T>>,
        dy: impl Into<DeviceSlice<'a, T>>,
        dx: impl Into<DeviceSliceMut<'a, T>>,
        scale: DeviceSlice<'_, T::Param>,
        grads: BatchNormGrads<'_, T::Param>,
        saved: Option<BatchNormSavedRef<'_, T::Param>>,
    ) -> Result<()> {
        let (x, dy, mut dx) = (x.into(), dy.into(), dx.into());
        let mut grads = grads;
        self.check_x("x", x.len())?;
        self.check_x("dy", dy.len())?;
        self.check_x("dx", dx.len())?;
        self.check_p("scale", scale.len())?;
        self.check_p("dscale", grads.dscale.len())?;
        self.check_p("dbias", grads.dbias.len())?;
        let (mean, inv): (*const c_void, *const c_void) = match saved {
            Some(s) => {
                self.check_p("saved mean", s.mean.len())?;
                self.check_p("saved inverse variance", s.inv_variance.len())?;
                (s.mean.as_raw(), s.inv_variance.as_raw())
            }
            None => (ptr::null(), ptr::null()),
        };
        let _on = handle.launch(
            "batch norm backward",
            &[
                ("x", x.device()),
                ("dy", dy.device()),
                ("dx", dx.device()),
                ("scale", scale.device()),
                ("dscale", grads.dscale.device()),
                ("dbias", grads.dbias.device()),
                ("saved mean", saved.as_ref().and_then(|s| s.mean.device())),
                (
                    "saved inverse variance",
                    saved.as_ref().and_then(|s| s.inv_variance.device()),
                ),
            ],
        )?;
        let api = check::cudnn()?;
        // SAFETY: live handle and descriptors; every buffer holds at least its
        // descriptor's span (checked above); written buffers are exclusive
        // borrows; null saved pointers are documented as "recompute".
        unsafe {
            cudnn_call!(
                api,
                cudnnBatchNormalizationBackward(
                    handle.as_raw(),
                    self.mode.to_raw(),
                    scale_ptr(&alpha_data),
                    scale_ptr(&beta_data),
                    scale_ptr(&alpha_param),
                    scale_ptr(&beta_param),
                    self.x.as_raw(),
                    x.as_raw(),
                    self.x.as_raw(),
                    dy.as_raw(),
                    self.x.as_raw(),
                    dx.as_raw_mut(),
                    self.param.as_raw(),
                    scale.as_raw(),
                    grads.dscale.as_raw_mut(),
                    grads.dbias.as_raw_mut(),
                    self.epsilon,
                    mean,
                    inv
                )
            )
        }
    }
}
