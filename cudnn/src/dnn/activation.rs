//! Activation descriptors: [`ActivationDescriptor`].
//!
//! cuDNN (8.9 and 9) accepts any `double` as the coefficient, NaN and
//! infinities included. We are stricter (listed, and checked by the agreement
//! test, which expects exactly these to be "we reject, cuDNN accepts"):
//! - **clipped ReLU: the ceiling must not be NaN and must be >= 0** (a
//!   negative ceiling clamps everything to a negative constant; `+inf` is
//!   allowed and is plain ReLU);
//! - **ELU: alpha must be finite;**
//! - **swish: beta must be finite.**

use std::fmt;

use super::pooling::NanPropagation;
use super::tensor::descriptor_owner;
use crate::check::{self, cudnn_call};
use crate::error::{Error, Result};
use crate::sys::cudnn as dnn;

/// The function applied element-wise, with its coefficient.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ActivationMode {
    /// `1 / (1 + e^-x)` (`CUDNN_ACTIVATION_SIGMOID`).
    Sigmoid,
    /// `max(x, 0)` (`CUDNN_ACTIVATION_RELU`).
    Relu,
    /// `tanh(x)` (`CUDNN_ACTIVATION_TANH`).
    Tanh,
    /// `min(max(x, 0), ceiling)` (`CUDNN_ACTIVATION_CLIPPED_RELU`); ReLU6 is
    /// `ceiling: 6.0`.
    ClippedRelu {
        /// The upper clamp, `>= 0` (`+inf` allowed).
        ceiling: f64,
    },
    /// `x` for `x > 0`, else `alpha * (e^x - 1)` (`CUDNN_ACTIVATION_ELU`).
    Elu {
        /// The negative-side scale, finite.
        alpha: f64,
    },
    /// `x * sigmoid(beta * x)` (`CUDNN_ACTIVATION_SWISH`); SiLU is `beta: 1.0`.
    Swish {
        /// The slope inside the sigmoid, finite.
        beta: f64,
    },
    /// `x` (`CUDNN_ACTIVATION_IDENTITY`); cuDNN supports it only in the fused
    /// convolution + bias + activation.
    Identity,
}

impl ActivationMode {
    /// The cuDNN constant (the coefficient is not part of it).
    pub fn to_raw(self) -> dnn::cudnnActivationMode_t {
        use dnn::cudnnActivationMode_t as M;
        match self {
            ActivationMode::Sigmoid => M::CUDNN_ACTIVATION_SIGMOID,
            ActivationMode::Relu => M::CUDNN_ACTIVATION_RELU,
            ActivationMode::Tanh => M::CUDNN_ACTIVATION_TANH,
            ActivationMode::ClippedRelu { .. } => M::CUDNN_ACTIVATION_CLIPPED_RELU,
            ActivationMode::Elu { .. } => M::CUDNN_ACTIVATION_ELU,
            ActivationMode::Swish { .. } => M::CUDNN_ACTIVATION_SWISH,
            ActivationMode::Identity => M::CUDNN_ACTIVATION_IDENTITY,
        }
    }

    /// The `coef` passed to `cudnnSetActivationDescriptor` (the ceiling for
    /// clipped ReLU, alpha for ELU, 0 otherwise; swish's beta is set apart).
    pub fn coef(self) -> f64 {
        match self {
            ActivationMode::ClippedRelu { ceiling } => ceiling,
            ActivationMode::Elu { alpha } => alpha,
            _ => 0.0,
        }
    }

    /// Check the coefficient against the rules of the module docs.
    ///
    /// # Errors
    /// Names the coefficient and its value.
    pub fn validate(self) -> Result<()> {
        match self {
            ActivationMode::ClippedRelu { ceiling } if ceiling.is_nan() => {
                Err(Error::invalid("ceiling", "must not be NaN", ceiling))
            }
            ActivationMode::ClippedRelu { ceiling } if ceiling < 0.0 => {
                Err(Error::invalid("ceiling", "must be >= 0", ceiling))
            }
            ActivationMode::Elu { alpha } if !alpha.is_finite() => {
                Err(Error::invalid("alpha", "must be finite", alpha))
            }
            ActivationMode::Swish { beta } if !beta.is_finite() => {
                Err(Error::invalid("beta", "must be finite", beta))
            }
            _ => Ok(()),
        }
    }
}

descriptor_owner!(
    /// Owns a `cudnnActivationDescriptor_t`.
    RawActivation,
    cudnnActivationStruct,
    cudnnCreateActivationDescriptor,
    cudnnDestroyActivationDescriptor
);

/// A cuDNN activation descriptor: the function and NaN propagation.
///
/// `Send` (a cuDNN descriptor is a plain host structure, tied to no handle,
/// stream or thread), not `Sync` (changes go through `&mut self`).
///
/// ```no_run
/// # use cudnn::dnn::{ActivationDescriptor, ActivationMode, NanPropagation};
/// let relu6 = ActivationDescriptor::new(ActivationMode::ClippedRelu { ceiling: 6.0 }, NanPropagation::Propagate)?;
/// # Ok::<(), cudnn::Error>(())
/// ```
pub struct ActivationDescriptor {
    raw: RawActivation,
    mode: ActivationMode,
    nan: NanPropagation,
}

impl ActivationDescriptor {
    /// An activation.
    ///
    /// # Errors
    /// A coefficient the module docs rule out (checked before cuDNN is called).
    #[doc(alias = "cudnnSetActivationDescriptor")]
    #[doc(alias = "cudnnSetActivationDescriptorSwishBeta")]
    pub fn new(mode: ActivationMode, nan: NanPropagation) -> Result<Self> {
        mode.validate()?;
        let raw = RawActivation::create()?;
        let api = check::cudnn()?;
        // SAFETY: `raw` is a live descriptor we own; mode and NaN option are
        // known constants and the coefficient was checked.
        unsafe {
            cudnn_call!(
                api,
                cudnnSetActivationDescriptor(
                    raw.as_ptr(),
                    mode.to_raw(),
                    nan.to_raw(),
                    mode.coef()
                )
            )
        }?;
        if let ActivationMode::Swish { beta } = mode {
            // SAFETY: as above; beta was checked finite.
            unsafe {
                cudnn_call!(
                    api,
                    cudnnSetActivationDescriptorSwishBeta(raw.as_ptr(), beta)
                )
            }?;
        }
        Ok(Self { raw, mode, nan })
    }

    /// ReLU with NaN propagation.
    ///
    /// # Errors
    /// Only what cuDNN reports.
    pub fn relu() -> Result<Self> {
        Self::new(ActivationMode::Relu, NanPropagation::Propagate)
    }

    /// The function and its coefficient.
    pub fn mode(&self) -> ActivationMode {
        self.mode
    }

    /// NaN propagation.
    pub fn nan_propagation(&self) -> NanPropagation {
        self.nan
    }

    /// The raw descriptor, still owned by `self`. Do not set it through this
    /// pointer: the settings kept on the Rust side would no longer match.
    pub fn as_raw(&self) -> dnn::cudnnActivationDescriptor_t {
        self.raw.as_ptr()
    }

    /// Give up ownership of the raw descriptor (the caller destroys it).
    pub fn into_raw(self) -> dnn::cudnnActivationDescriptor_t {
        self.raw.into_raw()
    }

    /// Take ownership of a descriptor made elsewhere, reading its settings
    /// back from cuDNN.
    ///
    /// # Errors
    /// A null pointer, a mode this type does not know, a coefficient it
    /// rejects. On error the descriptor is left alone (not destroyed).
    ///
    /// # Safety
    /// `raw` was made by `cudnnCreateActivationDescriptor`, is not destroyed,
    /// and nothing else destroys or modifies it from now on.
    #[doc(alias = "cudnnGetActivationDescriptor")]
    pub unsafe fn from_raw(raw: dnn::cudnnActivationDescriptor_t) -> Result<Self> {
        use dnn::cudnnActivationMode_t as M;
        if raw.is_null() {
            return Err(Error::invalid("raw", "must not be null", "null"));
        }
        let api = check::cudnn()?;
        let mut mode = M(u32::MAX);
        let mut nan = dnn::cudnnNanPropagation_t(u32::MAX);
        let mut coef = 0.0f64;
        // SAFETY: the caller promises `raw` is a live activation descriptor;
        // the out-pointers are valid.
        unsafe {
            cudnn_call!(
                api,
                cudnnGetActivationDescriptor(raw, &mut mode, &mut nan, &mut coef)
            )
        }?;
        let mode = match mode {
            M::CUDNN_ACTIVATION_SIGMOID => ActivationMode::Sigmoid,
            M::CUDNN_ACTIVATION_RELU => ActivationMode::Relu,
            M::CUDNN_ACTIVATION_TANH => ActivationMode::Tanh,
            M::CUDNN_ACTIVATION_CLIPPED_RELU => ActivationMode::ClippedRelu { ceiling: coef },
            M::CUDNN_ACTIVATION_ELU => ActivationMode::Elu { alpha: coef },
            M::CUDNN_ACTIVATION_IDENTITY => ActivationMode::Identity,
            M::CUDNN_ACTIVATION_SWISH => {
                let mut beta = 0.0f64;
                // SAFETY: as above; `beta` is a valid out-pointer.
                unsafe { cudnn_call!(api, cudnnGetActivationDescriptorSwishBeta(raw, &mut beta)) }?;
                ActivationMode::Swish { beta }
            }
            other => {
                return Err(Error::invalid(
                    "mode",
                    "unknown cudnnActivationMode_t",
                    other.0,
                ));
            }
        };
        mode.validate()?;
        let nan = NanPropagation::from_raw(nan)?;
        // SAFETY: the caller hands us ownership of a live descriptor.
        let raw = unsafe { RawActivation::adopt(raw) }?;
        Ok(Self { raw, mode, nan })
    }

    /// Destroy the descriptor now and report cuDNN's status (dropping it
    /// ignores the status).
    #[doc(alias = "cudnnDestroyActivationDescriptor")]
    pub fn destroy(self) -> Result<()> {
        self.raw.destroy()
    }
}

impl fmt::Debug for ActivationDescriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ActivationDescriptor")
            .field("mode", &self.mode)
            .field("nan", &self.nan)
            .field("raw", &self.raw)
            .finish()
    }
}
