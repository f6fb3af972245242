//! Dropout: [`Dropout`] (the descriptor with its random-number state
//! buffer and seed), [`Handle::dropout_forward`] and
//! [`Handle::dropout_backward`], with the reserve buffer that carries the
//! mask from one to the other.
//!
//! Forward writes `y = x * mask / (1 - p)` (mask 0 with probability `p`) and
//! the mask into the reserve buffer; backward applies the same mask to `dy`.
//! Two [`Dropout`]s made with the same seed and probability give the same
//! masks (on the same device and shapes).

use std::fmt;

use super::{DeviceTensor, DeviceTensorMut, check_buffer, check_same_shape};
use crate::check::{self, cudnn_call};
use crate::dnn::tensor::descriptor_owner;
use crate::dnn::{Handle, TensorDescriptor};
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::runtime::{DeviceBuffer, DeviceSliceMut};
use crate::sys::cudnn as dnn;

descriptor_owner!(
    /// Owns a `cudnnDropoutDescriptor_t`.
    RawDropout,
    cudnnDropoutStruct,
    cudnnCreateDropoutDescriptor,
    cudnnDestroyDropoutDescriptor
);

/// Check a dropout probability is in `[0, 1)`.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the value (1 would divide by zero).
pub fn check_dropout_probability(probability: f32) -> Result<()> {
    if !(0.0..1.0).contains(&probability) {
        return Err(Error::invalid(
            "probability",
            "must be in [0, 1) (the kept values are scaled by 1 / (1 - p))",
            probability,
        ));
    }
    Ok(())
}

/// The reserve buffer, in bytes, a dropout of `x` needs (asked of cuDNN;
/// needs no handle or device).
///
/// # Errors
/// What cuDNN reports.
#[doc(alias = "cudnnDropoutGetReserveSpaceSize")]
pub fn dropout_reserve_size<T: DataType>(x: &TensorDescriptor<T>) -> Result<usize> {
    let mut bytes = 0usize;
    // SAFETY: `x` is a live, set descriptor; `bytes` is a valid out-pointer.
    unsafe {
        cudnn_call!(
            check::cudnn()?,
            cudnnDropoutGetReserveSpaceSize(x.as_raw(), &mut bytes)
        )
    }?;
    Ok(bytes)
}

/// What [`Handle::dropout_forward`] and [`Handle::dropout_backward`] check
/// before calling cuDNN: `y` has `x`'s shape and the reserve buffer holds
/// [`dropout_reserve_size`] bytes. Returns that size.
///
/// # Errors
/// [`Error::Mismatch`] naming the shapes or the sizes.
pub fn check_dropout<T: DataType>(
    x: &TensorDescriptor<T>,
    y: &TensorDescriptor<T>,
    reserve_bytes: usize,
) -> Result<usize> {
    check_same_shape("x", x.shape(), "y", y.shape())?;
    let need = dropout_reserve_size(x)?;
    check_buffer("reserve (bytes)", need, reserve_bytes)?;
    Ok(need)
}

/// A cuDNN dropout descriptor with its random-number state (device memory
/// it owns), probability and seed.
///
/// `Send` (the descriptor is a host structure, the state is device memory
/// it owns), not `Sync`. Dropping it destroys the descriptor, then frees
/// the state (after the device is idle).
pub struct Dropout {
    // Field order: the descriptor is destroyed before its state is freed.
    raw: RawDropout,
    states: DeviceBuffer<u8>,
    probability: f32,
    seed: u64,
}

impl fmt::Debug for Dropout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dropout")
            .field("probability", &self.probability)
            .field("seed", &self.seed)
            .field("states", &self.states)
            .field("raw", &self.raw)
            .finish()
    }
}

impl Dropout {
    /// The random-number state cuDNN needs on `handle`'s device, in bytes.
    ///
    /// # Errors
    /// What cuDNN reports.
    #[doc(alias = "cudnnDropoutGetStatesSize")]
    pub fn states_size(handle: &Handle) -> Result<usize> {
        let mut bytes = 0usize;
        // SAFETY: live handle; `bytes` is a valid out-pointer.
        unsafe {
            cudnn_call!(
                check::cudnn()?,
                cudnnDropoutGetStatesSize(handle.as_raw(), &mut bytes)
            )
        }?;
        Ok(bytes)
    }

    /// A dropout of `probability` seeded with `seed`: allocates the state
    /// and queues its initialization on `handle`'s stream.
    ///
    /// # Errors
    /// [`check_dropout_probability`]'s (before anything else), an
    /// allocation failure, then what cuDNN reports.
    #[doc(alias = "cudnnSetDropoutDescriptor")]
    pub fn new(handle: &mut Handle, probability: f32, seed: u64) -> Result<Self> {
        check_dropout_probability(probability)?;
        let bytes = Self::states_size(handle)?;
        let mut states = DeviceBuffer::<u8>::alloc(bytes)?;
        let raw = RawDropout::create()?;
        // SAFETY: live descriptor and handle; `states` is device memory of
        // exactly `bytes` bytes, which cuDNN asked for; it is owned by the
        // returned value, which keeps it alive as long as the descriptor.
        unsafe {
            cudnn_call!(
                check::cudnn()?,
                cudnnSetDropoutDescriptor(
                    raw.as_ptr(),
                    handle.as_raw(),
                    probability,
                    states.as_raw_mut(),
                    bytes,
                    seed
                )
            )
        }?;
        Ok(Self {
            raw,
            states,
            probability,
            seed,
        })
    }

    /// The probability of dropping an element.
    pub fn probability(&self) -> f32 {
        self.probability
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The state buffer's size in bytes.
    pub fn states_len(&self) -> usize {
        self.states.len()
    }

    /// The raw descriptor, still owned by `self`. Do not set it through this
    /// pointer: the settings kept on the Rust side would no longer match.
    pub fn as_raw(&self) -> dnn::cudnnDropoutDescriptor_t {
        self.raw.as_ptr()
    }

    /// Give up ownership: the raw descriptor and the state buffer it uses
    /// (free the buffer only after destroying the descriptor).
    pub fn into_raw(self) -> (dnn::cudnnDropoutDescriptor_t, DeviceBuffer<u8>) {
        (self.raw.into_raw(), self.states)
    }

    /// Take ownership of a descriptor made elsewhere and of the state buffer
    /// it was set with, reading the probability and seed back from cuDNN.
    ///
    /// # Errors
    /// A null pointer, a descriptor whose state is not `states`, a
    /// probability outside `[0, 1)`. On error the descriptor is left alone
    /// (not destroyed) but `states` is freed: set the descriptor anew
    /// before using it again.
    ///
    /// # Safety
    /// `raw` was made by `cudnnCreateDropoutDescriptor` and set with
    /// `states` (which is at least the state size cuDNN asked for), is not
    /// destroyed, and nothing else destroys or modifies it from now on.
    #[doc(alias = "cudnnGetDropoutDescriptor")]
    pub unsafe fn from_raw(
        raw: dnn::cudnnDropoutDescriptor_t,
        states: DeviceBuffer<u8>,
        handle: &Handle,
    ) -> Result<Self> {
        if raw.is_null() {
            return Err(Error::invalid("raw", "must not be null", "null"));
        }
        let mut probability = f32::NAN;
        let mut states_ptr = std::ptr::null_mut();
        let mut seed = 0u64;
        // SAFETY: the caller promises `raw` is a live, set dropout
        // descriptor; the handle is live; the out-pointers are valid.
        unsafe {
            cudnn_call!(
                check::cudnn()?,
                cudnnGetDropoutDescriptor(
                    raw,
                    handle.as_raw(),
                    &mut probability,
                    &mut states_ptr,
                    &mut seed
                )
            )
        }?;
        if states_ptr.cast_const() != states.as_raw() {
            return Err(Error::mismatch(
                "dropout state pointer",
                format!("{:p}", states.as_raw()),
                format!("{states_ptr:p}"),
            ));
        }
        check_dropout_probability(probability)?;
        // SAFETY: the caller hands us ownership of a live descriptor.
        let raw = unsafe { RawDropout::adopt(raw) }?;
        Ok(Self {
            raw,
            states,
            probability,
            seed,
        })
    }

    /// Destroy the descriptor, then free the state, reporting both statuses.
    ///
    /// # Errors
    /// What cuDNN or the CUDA runtime reports.
    #[doc(alias = "cudnnDestroyDropoutDescriptor")]
    pub fn destroy(self) -> Result<()> {
        let r = self.raw.destroy();
        let s = self.states.destroy();
        r.and(s)
    }
}

impl Handle {
    /// `y = x * mask / (1 - p)`, a fresh mask written to `reserve` (at least
    /// [`dropout_reserve_size`] bytes); keep `reserve` for the backward pass.
    ///
    /// # Errors
    /// [`check_dropout`]'s, then what cuDNN reports.
    #[doc(alias = "cudnnDropoutForward")]
    pub fn dropout_forward<T: DataType>(
        &mut self,
        dropout: &mut Dropout,
        x: DeviceTensor<'_, T>,
        mut y: DeviceTensorMut<'_, T>,
        mut reserve: DeviceSliceMut<'_, u8>,
    ) -> Result<()> {
        check_dropout(x.desc(), y.desc(), reserve.len())?;
        let api = check::cudnn()?;
        // SAFETY: live handle and descriptors; `x` and `y` hold at least their
        // spans (checked when bound), `y` is exclusive; `reserve` holds at
        // least the size cuDNN asked for (checked) and its true size is
        // passed; the dropout state is owned by `dropout`, borrowed mutably
        // (cuDNN advances it).
        unsafe {
            cudnn_call!(
                api,
                cudnnDropoutForward(
                    self.as_raw(),
                    dropout.as_raw(),
                    x.desc().as_raw(),
                    x.ptr(),
                    y.desc().as_raw(),
                    y.ptr(),
                    reserve.as_raw_mut(),
                    reserve.len()
                )
            )
        }
    }

    /// `dx = dy * mask / (1 - p)`, with the mask the forward pass wrote to
    /// `reserve`.
    ///
    /// # Errors
    /// [`check_dropout`]'s (for `dy` and `dx`), then what cuDNN reports.
    #[doc(alias = "cudnnDropoutBackward")]
    pub fn dropout_backward<T: DataType>(
        &mut self,
        dropout: &Dropout,
        dy: DeviceTensor<'_, T>,
        mut dx: DeviceTensorMut<'_, T>,
        mut reserve: DeviceSliceMut<'_, u8>,
    ) -> Result<()> {
        check_dropout(dy.desc(), dx.desc(), reserve.len())?;
        let api = check::cudnn()?;
        // SAFETY: as in `dropout_forward`; `dx` is exclusive.
        unsafe {
            cudnn_call!(
                api,
                cudnnDropoutBackward(
                    self.as_raw(),
                    dropout.as_raw(),
                    dy.desc().as_raw(),
                    dy.ptr(),
                    dx.desc().as_raw(),
                    dx.ptr(),
                    reserve.as_raw_mut(),
                    reserve.len()
                )
            )
        }
    }
}
