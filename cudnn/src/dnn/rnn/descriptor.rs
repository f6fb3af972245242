//! [`RnnDescriptor`]: an [`RnnConfig`] checked and set on a
//! `cudnnRNNDescriptor_t` (`cudnnSetRNNDescriptor_v8`), with the dropout
//! between layers it borrows.

use std::fmt;
use std::marker::PhantomData;

use super::config::{
    RnnAlgo, RnnBiasMode, RnnCellMode, RnnConfig, RnnDirection, RnnInputMode, RnnPrecision,
    bf16_unsupported, is_not_supported,
};
use crate::check::{self, cudnn_call};
use crate::dnn::tensor::descriptor_owner;
use crate::dnn::{Dropout, Handle, MathType};
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::sys::cudnn as dnn;

descriptor_owner!(
    /// Owns a `cudnnRNNDescriptor_t`.
    RawRnn,
    cudnnRNNStruct,
    cudnnCreateRNNDescriptor,
    cudnnDestroyRNNDescriptor
);

/// `CUDNN_RNN_PADDED_IO_ENABLED`: every descriptor this crate makes sets
/// it, so the unpacked (padded) data layouts work.
pub(crate) const PADDED_IO: u32 = 1;

/// A cuDNN RNN descriptor for element type `T`, made from a checked
/// [`RnnConfig`]; borrows the [`Dropout`] applied between layers (if any)
/// for `'d`, because cuDNN keeps a pointer to it.
///
/// Part of the RNN family: [`RnnConfig`] (checked configuration),
/// [`RnnDataDescriptor`](super::RnnDataDescriptor) (a padded batch),
/// [`RnnPlan`](super::RnnPlan) (sizes, launches), [`RnnWeightViews`](super::RnnWeightViews)
/// (per-gate weights, with PyTorch's gate order). Buffers are the crate's
/// [`DeviceSlice`](crate::runtime::DeviceSlice)/[`DeviceSliceMut`](crate::runtime::DeviceSliceMut)
/// views, which the cudarc interop lends too.
///
/// Not `Sync`. It is `Send` only as far as its borrow allows: a
/// [`Dropout`] is not `Sync`, so a descriptor borrowing one stays on the
/// dropout's thread.
pub struct RnnDescriptor<'d, T: DataType> {
    raw: RawRnn,
    config: RnnConfig,
    dropout: Option<&'d Dropout>,
    _t: PhantomData<T>,
}

impl<T: DataType> fmt::Debug for RnnDescriptor<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RnnDescriptor")
            .field("dtype", &T::NAME)
            .field("config", &self.config)
            .field("dropout", &self.dropout.map(|d| d.probability()))
            .finish()
    }
}

/// What cuDNN stored in an RNN descriptor (`cudnnGetRNNDescriptor_v8`),
/// as raw values, for comparing with what was set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RnnDescriptorValues {
    /// `algo`.
    pub algo: u32,
    /// `cellMode`.
    pub cell: u32,
    /// `biasMode`.
    pub bias: u32,
    /// `dirMode`.
    pub direction: u32,
    /// `inputMode`.
    pub input_mode: u32,
    /// `dataType`.
    pub data_type: u32,
    /// `mathPrec`.
    pub precision: u32,
    /// `mathType`.
    pub math: u32,
    /// `inputSize`.
    pub input_size: i32,
    /// `hiddenSize`.
    pub hidden_size: i32,
    /// `projSize`.
    pub projection_size: i32,
    /// `numLayers`.
    pub num_layers: i32,
    /// Whether a dropout descriptor is set.
    pub has_dropout: bool,
    /// `auxFlags`.
    pub aux_flags: u32,
}

impl<'d, T: DataType> RnnDescriptor<'d, T> {
    /// Check `config` ([`RnnConfig::check_for`] the loaded library) and set
    /// it, with `dropout` between layers (`None`: no dropout; cuDNN applies
    /// it to every layer's output but the last, in training only). Needs no
    /// handle or device.
    ///
    /// # Errors
    /// The check's errors (before cuDNN is called), then what cuDNN
    /// reports; a bf16 RNN the loaded cuDNN refuses is
    /// [`Error::Unsupported`].
    #[doc(alias = "cudnnSetRNNDescriptor_v8")]
    pub fn new(config: &RnnConfig, dropout: Option<&'d Dropout>) -> Result<Self> {
        config.check_for::<T>(Handle::library_version()?)?;
        let raw = RawRnn::create()?;
        let c = *config;
        // The check made every size a positive i32.
        let as_i32 = |arg: &str, v: usize| {
            i32::try_from(v).map_err(|_| Error::invalid(arg, "must be at most i32::MAX", v))
        };
        // SAFETY: live descriptor; every enum is a value of the bindings; the
        // dropout descriptor (or null) stays alive for `'d`, which `self`
        // borrows, so cuDNN's pointer to it never dangles.
        unsafe {
            cudnn_call!(
                check::cudnn()?,
                cudnnSetRNNDescriptor_v8(
                    raw.as_ptr(),
                    c.algo.to_raw(),
                    c.cell.to_raw(),
                    c.bias.to_raw(),
                    c.direction.to_raw(),
                    c.input_mode.to_raw(),
                    T::CUDNN,
                    c.precision.to_raw(),
                    c.math.to_raw(),
                    as_i32("input_size", c.input_size)?,
                    as_i32("hidden_size", c.hidden_size)?,
                    as_i32("projection_size", c.projection_size)?,
                    as_i32("num_layers", c.num_layers)?,
                    dropout.map_or(std::ptr::null_mut(), |d| d.as_raw()),
                    PADDED_IO
                )
            )
        }
        .map_err(|e| {
            if T::CUDNN == dnn::cudnnDataType_t::CUDNN_DATA_BFLOAT16 && is_not_supported(&e) {
                return Handle::library_version()
                    .map_or_else(|v| v, |v| bf16_unsupported("RNNs", v));
            }
            e.with_context(format!("RNN {config:?} of {}", T::NAME))
        })?;
        Ok(RnnDescriptor {
            raw,
            config: c,
            dropout,
            _t: PhantomData,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &RnnConfig {
        &self.config
    }

    /// The dropout between layers.
    pub fn dropout(&self) -> Option<&'d Dropout> {
        self.dropout
    }

    /// The raw descriptor, still owned by `self`.
    pub fn as_raw(&self) -> dnn::cudnnRNNDescriptor_t {
        self.raw.as_ptr()
    }

    /// Give up ownership of the raw descriptor (the caller destroys it).
    pub fn into_raw(self) -> dnn::cudnnRNNDescriptor_t {
        self.raw.into_raw()
    }

    /// Destroy now, reporting cuDNN's status (dropping ignores it).
    ///
    /// # Errors
    /// What `cudnnDestroyRNNDescriptor` reports.
    pub fn destroy(self) -> Result<()> {
        self.raw.destroy()
    }

    /// Read back what cuDNN stored (`cudnnGetRNNDescriptor_v8`).
    ///
    /// # Errors
    /// What cuDNN reports.
    #[doc(alias = "cudnnGetRNNDescriptor_v8")]
    pub fn values(&self) -> Result<RnnDescriptorValues> {
        let mut algo = dnn::cudnnRNNAlgo_t(0);
        let mut cell = dnn::cudnnRNNMode_t(0);
        let mut bias = dnn::cudnnRNNBiasMode_t(0);
        let mut dir = dnn::cudnnDirectionMode_t(0);
        let mut input = dnn::cudnnRNNInputMode_t(0);
        let mut dt = dnn::cudnnDataType_t(0);
        let mut prec = dnn::cudnnDataType_t(0);
        let mut math = dnn::cudnnMathType_t(0);
        let (mut i, mut h, mut p, mut l) = (0i32, 0i32, 0i32, 0i32);
        let mut drop: dnn::cudnnDropoutDescriptor_t = std::ptr::null_mut();
        let mut aux = 0u32;
        // SAFETY: live descriptor; every out-pointer is a valid local.
        unsafe {
            cudnn_call!(
                check::cudnn()?,
                cudnnGetRNNDescriptor_v8(
                    self.raw.as_ptr(),
                    &mut algo,
                    &mut cell,
                    &mut bias,
                    &mut dir,
                    &mut input,
                    &mut dt,
                    &mut prec,
                    &mut math,
                    &mut i,
                    &mut h,
                    &mut p,
                    &mut l,
                    &mut drop,
                    &mut aux
                )
            )
        }?;
        Ok(RnnDescriptorValues {
            algo: algo.0,
            cell: cell.0,
            bias: bias.0,
            direction: dir.0,
            input_mode: input.0,
            data_type: dt.0,
            precision: prec.0,
            math: math.0,
            input_size: i,
            hidden_size: h,
            projection_size: p,
            num_layers: l,
            has_dropout: !drop.is_null(),
            aux_flags: aux,
        })
    }

    /// The raw values this descriptor was set with (what
    /// [`values`](Self::values) should read back).
    pub fn expected_values(&self) -> RnnDescriptorValues {
        let c = &self.config;
        RnnDescriptorValues {
            algo: c.algo.to_raw().0,
            cell: c.cell.to_raw().0,
            bias: c.bias.to_raw().0,
            direction: c.direction.to_raw().0,
            input_mode: c.input_mode.to_raw().0,
            data_type: T::CUDNN.0,
            precision: c.precision.to_raw().0,
            math: c.math.to_raw().0,
            input_size: i32::try_from(c.input_size).unwrap_or(-1),
            hidden_size: i32::try_from(c.hidden_size).unwrap_or(-1),
            projection_size: i32::try_from(c.projection_size).unwrap_or(-1),
            num_layers: i32::try_from(c.num_layers).unwrap_or(-1),
            has_dropout: self.dropout.is_some(),
            aux_flags: PADDED_IO,
        }
    }
}

impl<T: DataType> RnnDescriptor<'static, T> {
    /// Take ownership of a descriptor made elsewhere; its values are read
    /// back and checked as [`new`](RnnDescriptor::new) would check them.
    ///
    /// # Errors
    /// One set with a dropout descriptor (this crate could not tie its
    /// lifetime), another element type, the persistent-dynamic algorithm or
    /// values [`RnnConfig::check`] refuses; then `raw` is destroyed.
    ///
    /// # Safety
    /// `raw` was made by `cudnnCreateRNNDescriptor`, is set, not destroyed,
    /// and nothing else destroys it.
    pub unsafe fn from_raw(raw: dnn::cudnnRNNDescriptor_t) -> Result<Self> {
        // SAFETY: the caller's contract.
        let raw = unsafe { RawRnn::adopt(raw) }?;
        let d = RnnDescriptor {
            raw,
            config: RnnConfig::new(RnnCellMode::RnnTanh, 1, 1),
            dropout: None,
            _t: PhantomData,
        };
        let v = d.values()?;
        if v.has_dropout {
            return Err(Error::invalid(
                "raw",
                "must have no dropout descriptor (its lifetime cannot be tied)",
                "a dropout descriptor",
            ));
        }
        if v.data_type != T::CUDNN.0 {
            return Err(Error::mismatch(
                "RNN descriptor data type",
                T::NAME,
                v.data_type,
            ));
        }
        let size = |arg: &str, x: i32| {
            usize::try_from(x).map_err(|_| Error::invalid(arg, "must be >= 1", x))
        };
        let precision = [RnnPrecision::F16, RnnPrecision::F32, RnnPrecision::F64]
            .into_iter()
            .find(|p| p.to_raw().0 == v.precision)
            .ok_or_else(|| {
                Error::invalid("math precision", "must be f16, f32 or f64", v.precision)
            })?;
        let config = RnnConfig {
            cell: RnnCellMode::from_raw(dnn::cudnnRNNMode_t(v.cell))?,
            input_size: size("input_size", v.input_size)?,
            hidden_size: size("hidden_size", v.hidden_size)?,
            projection_size: size("projection_size", v.projection_size)?,
            num_layers: size("num_layers", v.num_layers)?,
            direction: RnnDirection::from_raw(dnn::cudnnDirectionMode_t(v.direction))?,
            bias: RnnBiasMode::from_raw(dnn::cudnnRNNBiasMode_t(v.bias))?,
            input_mode: RnnInputMode::from_raw(dnn::cudnnRNNInputMode_t(v.input_mode))?,
            algo: RnnAlgo::from_raw(dnn::cudnnRNNAlgo_t(v.algo))?,
            precision,
            math: MathType::from_raw(dnn::cudnnMathType_t(v.math))?,
        };
        config.check::<T>()?;
        if v.aux_flags & PADDED_IO == 0 {
            return Err(Error::invalid(
                "raw",
                "must have CUDNN_RNN_PADDED_IO_ENABLED set",
                v.aux_flags,
            ));
        }
        Ok(RnnDescriptor { config, ..d })
    }
}

/// Set raw values on a fresh descriptor with no Rust check first (no
/// dropout, padded I/O): the host tier's way to ask cuDNN what it accepts.
/// `Ok` when cuDNN accepts.
///
/// # Errors
/// What cuDNN reports.
#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub fn cudnn_accepts_rnn_raw(
    algo: RnnAlgo,
    cell: RnnCellMode,
    bias: RnnBiasMode,
    direction: RnnDirection,
    input_mode: RnnInputMode,
    data_type: dnn::cudnnDataType_t,
    precision: RnnPrecision,
    math: MathType,
    sizes: [i32; 4],
) -> Result<()> {
    let raw = RawRnn::create()?;
    // SAFETY: live descriptor; enums are values of the bindings; no
    // dropout (null), so nothing is borrowed past the call.
    unsafe {
        cudnn_call!(
            check::cudnn()?,
            cudnnSetRNNDescriptor_v8(
                raw.as_ptr(),
                algo.to_raw(),
                cell.to_raw(),
                bias.to_raw(),
                direction.to_raw(),
                input_mode.to_raw(),
                data_type,
                precision.to_raw(),
                math.to_raw(),
                sizes[0],
                sizes[1],
                sizes[2],
                sizes[3],
                std::ptr::null_mut(),
                PADDED_IO
            )
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `values` and `expected_values` exist for a descriptor that borrows
    /// a dropout (any `'d`), not only for `'static` ones: this compiles.
    #[test]
    fn unit_read_back_takes_any_dropout_lifetime() {
        fn read<'d>(d: &RnnDescriptor<'d, f32>) -> Result<(RnnDescriptorValues, bool)> {
            let want = d.expected_values();
            Ok((want, d.values()? == want))
        }
        let f: for<'a, 'd> fn(&'a RnnDescriptor<'d, f32>) -> Result<(RnnDescriptorValues, bool)> =
            read;
        let _ = f;
    }
}
