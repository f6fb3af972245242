//! Pooling descriptors: [`PoolingDescriptor`], and the output-shape
//! arithmetic ([`pooling_output_shape`]).
//!
//! Validated in Rust before cuDNN sees them. Shared with cuDNN (8.9 and 9):
//! - 1 to 6 spatial dimensions with one window, padding and stride each;
//!   window and stride in `1..=i32::MAX`, padding in `0..=i32::MAX`;
//! - for the output shape: `x` of rank spatial + 2, and a padded input at
//!   least as large as the window (`x + 2*pad >= window`).
//!
//! Stricter than cuDNN (listed, and checked by the agreement test, which
//! expects exactly these to be "we reject, cuDNN accepts"):
//! - **padding must be smaller than the window** (`pad < window`). cuDNN
//!   accepts any padding, so a window can lie entirely in the padding: max
//!   pooling then yields `-inf` and average pooling excluding padding divides
//!   by zero. Frameworks forbid it too.
//!
//! Looser than PyTorch, which requires `pad <= window / 2`: a 3x3 window with
//! padding 2 on a 4x4 input is accepted here (as by cuDNN) and gives 6x6,
//! where PyTorch refuses it. [`PoolingDescriptor::new_strict`] applies
//! PyTorch's rule on top of these, for frameworks that must match it.
//! - **the padded input `x + 2*pad` must be at most `i32::MAX`.** cuDNN
//!   computes it in 32 bits; on overflow it reports output sizes that are
//!   wrong (and sometimes right by luck).

use std::fmt;

use super::conv::MAX_SPATIAL_DIMS;
use super::tensor::{
    Dims, INT_MAX, MAX_DIMS, MIN_DIMS, TensorDescriptor, check_each, check_len, descriptor_owner,
    from_int,
};
use crate::check::{self, cudnn_call};
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::sys::cudnn as dnn;

/// How a window is reduced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PoolingMode {
    /// The maximum (`CUDNN_POOLING_MAX`).
    Max,
    /// The maximum, with a deterministic backward pass
    /// (`CUDNN_POOLING_MAX_DETERMINISTIC`).
    MaxDeterministic,
    /// The mean, padding counted as zeros
    /// (`CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING`).
    AverageIncludePadding,
    /// The mean over the elements inside the input
    /// (`CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING`).
    AverageExcludePadding,
}

impl PoolingMode {
    /// The cuDNN constant.
    pub fn to_raw(self) -> dnn::cudnnPoolingMode_t {
        match self {
            PoolingMode::Max => dnn::cudnnPoolingMode_t::CUDNN_POOLING_MAX,
            PoolingMode::MaxDeterministic => {
                dnn::cudnnPoolingMode_t::CUDNN_POOLING_MAX_DETERMINISTIC
            }
            PoolingMode::AverageIncludePadding => {
                dnn::cudnnPoolingMode_t::CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
            }
            PoolingMode::AverageExcludePadding => {
                dnn::cudnnPoolingMode_t::CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING
            }
        }
    }

    /// From the cuDNN constant; unknown values are an error.
    pub fn from_raw(raw: dnn::cudnnPoolingMode_t) -> Result<Self> {
        match raw {
            dnn::cudnnPoolingMode_t::CUDNN_POOLING_MAX => Ok(PoolingMode::Max),
            dnn::cudnnPoolingMode_t::CUDNN_POOLING_MAX_DETERMINISTIC => {
                Ok(PoolingMode::MaxDeterministic)
            }
            dnn::cudnnPoolingMode_t::CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING => {
                Ok(PoolingMode::AverageIncludePadding)
            }
            dnn::cudnnPoolingMode_t::CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING => {
                Ok(PoolingMode::AverageExcludePadding)
            }
            other => Err(Error::invalid(
                "mode",
                "unknown cudnnPoolingMode_t",
                other.0,
            )),
        }
    }
}

/// Whether NaN inputs propagate to the output (max pooling, ReLU-like
/// activations), or are treated as smaller than any number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum NanPropagation {
    /// NaN is not propagated (`CUDNN_NOT_PROPAGATE_NAN`).
    NotPropagate,
    /// NaN is propagated (`CUDNN_PROPAGATE_NAN`). The default, so a NaN is
    /// never hidden.
    #[default]
    Propagate,
}

impl NanPropagation {
    /// The cuDNN constant.
    pub fn to_raw(self) -> dnn::cudnnNanPropagation_t {
        match self {
            NanPropagation::NotPropagate => dnn::cudnnNanPropagation_t::CUDNN_NOT_PROPAGATE_NAN,
            NanPropagation::Propagate => dnn::cudnnNanPropagation_t::CUDNN_PROPAGATE_NAN,
        }
    }

    /// From the cuDNN constant; unknown values are an error.
    pub fn from_raw(raw: dnn::cudnnNanPropagation_t) -> Result<Self> {
        match raw {
            dnn::cudnnNanPropagation_t::CUDNN_NOT_PROPAGATE_NAN => Ok(NanPropagation::NotPropagate),
            dnn::cudnnNanPropagation_t::CUDNN_PROPAGATE_NAN => Ok(NanPropagation::Propagate),
            other => Err(Error::invalid(
                "nan propagation",
                "unknown cudnnNanPropagation_t",
                other.0,
            )),
        }
    }
}

fn validate_pooling(window: &[usize], pad: &[usize], stride: &[usize]) -> Result<()> {
    check_len("window.len()", window.len(), 1, MAX_SPATIAL_DIMS)?;
    for (name, v) in [("pad.len()", pad.len()), ("stride.len()", stride.len())] {
        if v != window.len() {
            return Err(Error::invalid(
                name,
                format!("must equal window.len() ({})", window.len()),
                v,
            ));
        }
    }
    check_each("window", window, 1)?;
    check_each("pad", pad, 0)?;
    check_each("stride", stride, 1)?;
    for (i, (&p, &w)) in pad.iter().zip(window).enumerate() {
        if p >= w {
            return Err(Error::invalid(
                format!("pad[{i}]"),
                format!("must be < window[{i}] ({w})"),
                p,
            ));
        }
    }
    Ok(())
}

/// The output shape `[n, c, spatial...]` of a forward pooling, computed in
/// Rust with every rule of the module docs checked:
/// `out = (in + 2*pad - window) / stride + 1` per spatial dimension.
///
/// # Errors
/// The first broken rule, naming the argument and the values.
pub fn pooling_output_shape(
    x: &[usize],
    window: &[usize],
    pad: &[usize],
    stride: &[usize],
) -> Result<Vec<usize>> {
    validate_pooling(window, pad, stride)?;
    check_len("x rank", x.len(), MIN_DIMS, MAX_DIMS)?;
    check_each("x.shape", x, 1)?;
    let s = window.len();
    if x.len() != s + 2 {
        return Err(Error::mismatch(
            "x rank (spatial dims of the pooling window + 2)",
            s + 2,
            x.len(),
        ));
    }
    let mut out = Vec::with_capacity(x.len());
    out.extend_from_slice(&x[..2]);
    for i in 0..s {
        let padded = x[i + 2] as u128 + 2 * pad[i] as u128;
        if padded > INT_MAX as u128 {
            return Err(Error::invalid(
                format!("pad[{i}]"),
                format!(
                    "the padded input x.shape[{}] + 2 * pad = {padded} must be <= i32::MAX",
                    i + 2
                ),
                pad[i],
            ));
        }
        let win = window[i] as u128;
        if padded < win {
            return Err(Error::invalid(
                format!("x.shape[{}]", i + 2),
                format!(
                    "the padded input {padded} (pad[{i}] = {}) must be >= window[{i}] ({win}) \
                     (the output would be empty)",
                    pad[i]
                ),
                x[i + 2],
            ));
        }
        out.push(((padded - win) / stride[i] as u128 + 1) as usize);
    }
    Ok(out)
}

descriptor_owner!(
    /// Owns a `cudnnPoolingDescriptor_t`.
    RawPooling,
    cudnnPoolingStruct,
    cudnnCreatePoolingDescriptor,
    cudnnDestroyPoolingDescriptor
);

/// A cuDNN pooling descriptor: mode, NaN propagation, and a window, padding
/// and stride per spatial dimension.
///
/// `Send` (a cuDNN descriptor is a plain host structure, tied to no handle,
/// stream or thread), not `Sync` (changes go through `&mut self`).
///
/// ```no_run
/// # use cudnn::dnn::{PoolingDescriptor, PoolingMode, TensorDescriptor};
/// let x = TensorDescriptor::<f32>::nchw(8, 64, 112, 112)?;
/// let pool = PoolingDescriptor::new_2d(PoolingMode::Max, [3, 3], [1, 1], [2, 2])?;
/// assert_eq!(pool.output_shape(&x)?, [8, 64, 56, 56]);
/// # Ok::<(), cudnn::Error>(())
/// ```
pub struct PoolingDescriptor {
    raw: RawPooling,
    mode: PoolingMode,
    nan: NanPropagation,
    window: Dims,
    pad: Dims,
    stride: Dims,
}

impl PoolingDescriptor {
    /// An N-d pooling over `window.len()` spatial dimensions (1 to 6).
    ///
    /// # Errors
    /// Lengths that differ or are outside 1..=6, a window or stride of 0,
    /// padding not smaller than the window, any value over `i32::MAX`; all
    /// checked before cuDNN is called.
    #[doc(alias = "cudnnSetPoolingNdDescriptor")]
    pub fn new(
        mode: PoolingMode,
        nan: NanPropagation,
        window: &[usize],
        pad: &[usize],
        stride: &[usize],
    ) -> Result<Self> {
        validate_pooling(window, pad, stride)?;
        let (window, pad, stride) = (
            Dims::from_slice(window),
            Dims::from_slice(pad),
            Dims::from_slice(stride),
        );
        let raw = RawPooling::create()?;
        let (w, p, s) = (window.to_c(), pad.to_c(), stride.to_c());
        // SAFETY: `raw` is a live descriptor we own; the three arrays hold
        // `window.len()` (checked 1..=6) C ints, each checked against the rules.
        unsafe {
            cudnn_call!(
                check::cudnn()?,
                cudnnSetPoolingNdDescriptor(
                    raw.as_ptr(),
                    mode.to_raw(),
                    nan.to_raw(),
                    window.len() as i32,
                    w.as_ptr(),
                    p.as_ptr(),
                    s.as_ptr()
                )
            )
        }?;
        Ok(Self {
            raw,
            mode,
            nan,
            window,
            pad,
            stride,
        })
    }

    /// As [`new`](Self::new), with PyTorch's rule on top: padding at most
    /// half the window (`pad[i] <= window[i] / 2`), so every window overlaps
    /// the input by at least half.
    ///
    /// # Errors
    /// As [`new`](Self::new); [`Error::InvalidArgument`] naming `pad[i]`
    /// and the bound when the padding is over half the window.
    pub fn new_strict(
        mode: PoolingMode,
        nan: NanPropagation,
        window: &[usize],
        pad: &[usize],
        stride: &[usize],
    ) -> Result<Self> {
        validate_pooling(window, pad, stride)?;
        for (i, (&p, &w)) in pad.iter().zip(window).enumerate() {
            if p > w / 2 {
                return Err(Error::invalid(
                    format!("pad[{i}]"),
                    format!(
                        "must be <= window[{i}] / 2 ({}) under the strict (PyTorch) rules",
                        w / 2
                    ),
                    p,
                ));
            }
        }
        Self::new(mode, nan, window, pad, stride)
    }

    /// A 2-d pooling: `[h, w]` window, padding and stride; NaN propagates.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    #[doc(alias = "cudnnSetPoolingNdDescriptor")]
    #[doc(alias = "cudnnSetPooling2dDescriptor")]
    pub fn new_2d(
        mode: PoolingMode,
        window: [usize; 2],
        pad: [usize; 2],
        stride: [usize; 2],
    ) -> Result<Self> {
        Self::new(mode, NanPropagation::default(), &window, &pad, &stride)
    }

    /// The reduction.
    pub fn mode(&self) -> PoolingMode {
        self.mode
    }

    /// NaN propagation.
    pub fn nan_propagation(&self) -> NanPropagation {
        self.nan
    }

    /// Window size per spatial dimension.
    pub fn window(&self) -> &[usize] {
        &self.window
    }

    /// Padding per spatial dimension.
    pub fn pad(&self) -> &[usize] {
        &self.pad
    }

    /// Stride per spatial dimension.
    pub fn stride(&self) -> &[usize] {
        &self.stride
    }

    /// How many spatial dimensions.
    pub fn spatial_dims(&self) -> usize {
        self.window.len()
    }

    /// The output shape of a forward pooling of `x`, computed in Rust
    /// ([`pooling_output_shape`]).
    ///
    /// # Errors
    /// Any rule of the module docs, naming the values.
    pub fn output_shape<T: DataType>(&self, x: &TensorDescriptor<T>) -> Result<Vec<usize>> {
        pooling_output_shape(x.shape(), &self.window, &self.pad, &self.stride)
    }

    /// The output shape as cuDNN computes it, for comparison with
    /// [`output_shape`](Self::output_shape).
    ///
    /// # Errors
    /// What cuDNN reports, or a negative size cuDNN returned on overflow.
    #[doc(alias = "cudnnGetPoolingNdForwardOutputDim")]
    pub fn output_shape_from_cudnn<T: DataType>(
        &self,
        x: &TensorDescriptor<T>,
    ) -> Result<Vec<usize>> {
        let mut out = [0i32; MAX_DIMS];
        let nb = x.rank();
        // SAFETY: both descriptors are live and set; `out` holds MAX_DIMS >=
        // x.rank() entries, the most cuDNN writes.
        unsafe {
            cudnn_call!(
                check::cudnn()?,
                cudnnGetPoolingNdForwardOutputDim(
                    self.raw.as_ptr(),
                    x.as_raw(),
                    nb as i32,
                    out.as_mut_ptr()
                )
            )
        }?;
        out[..nb]
            .iter()
            .enumerate()
            .map(|(i, &v)| from_int(|| format!("output dim {i}"), v))
            .collect()
    }

    /// The raw descriptor, still owned by `self`. Do not set it through this
    /// pointer: the settings kept on the Rust side would no longer match.
    pub fn as_raw(&self) -> dnn::cudnnPoolingDescriptor_t {
        self.raw.as_ptr()
    }

    /// Give up ownership of the raw descriptor (the caller destroys it).
    pub fn into_raw(self) -> dnn::cudnnPoolingDescriptor_t {
        self.raw.into_raw()
    }

    /// Take ownership of a descriptor made elsewhere, reading its settings
    /// back from cuDNN.
    ///
    /// # Errors
    /// A null pointer, an unset descriptor, settings this type rejects or
    /// does not know. On error the descriptor is left alone (not destroyed).
    ///
    /// # Safety
    /// `raw` was made by `cudnnCreatePoolingDescriptor`, is not destroyed, and
    /// nothing else destroys or modifies it from now on.
    #[doc(alias = "cudnnGetPoolingNdDescriptor")]
    pub unsafe fn from_raw(raw: dnn::cudnnPoolingDescriptor_t) -> Result<Self> {
        if raw.is_null() {
            return Err(Error::invalid("raw", "must not be null", "null"));
        }
        let api = check::cudnn()?;
        let mut mode = dnn::cudnnPoolingMode_t(u32::MAX);
        let mut nan = dnn::cudnnNanPropagation_t(u32::MAX);
        let mut len = 0i32;
        let (mut w, mut p, mut s) = ([0i32; MAX_DIMS], [0i32; MAX_DIMS], [0i32; MAX_DIMS]);
        // SAFETY: the caller promises `raw` is a live pooling descriptor; each
        // array holds the MAX_SPATIAL_DIMS entries we ask for.
        unsafe {
            cudnn_call!(
                api,
                cudnnGetPoolingNdDescriptor(
                    raw,
                    MAX_SPATIAL_DIMS as i32,
                    &mut mode,
                    &mut nan,
                    &mut len,
                    w.as_mut_ptr(),
                    p.as_mut_ptr(),
                    s.as_mut_ptr()
                )
            )
        }?;
        let n = from_int(|| "nbDims".into(), len)?;
        check_len("nbDims", n, 1, MAX_SPATIAL_DIMS)?;
        let read = |name: &str, a: &[i32]| -> Result<Dims> {
            let v = a[..n]
                .iter()
                .enumerate()
                .map(|(i, &v)| from_int(|| format!("{name}[{i}]"), v))
                .collect::<Result<Vec<_>>>()?;
            Ok(Dims::from_slice(&v))
        };
        let (window, pad, stride) = (read("window", &w)?, read("pad", &p)?, read("stride", &s)?);
        validate_pooling(&window, &pad, &stride)?;
        let (mode, nan) = (PoolingMode::from_raw(mode)?, NanPropagation::from_raw(nan)?);
        // SAFETY: the caller hands us ownership of a live descriptor.
        let raw = unsafe { RawPooling::adopt(raw) }?;
        Ok(Self {
            raw,
            mode,
            nan,
            window,
            pad,
            stride,
        })
    }

    /// Destroy the descriptor now and report cuDNN's status (dropping it
    /// ignores the status).
    #[doc(alias = "cudnnDestroyPoolingDescriptor")]
    pub fn destroy(self) -> Result<()> {
        self.raw.destroy()
    }
}

impl fmt::Debug for PoolingDescriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolingDescriptor")
            .field("mode", &self.mode)
            .field("nan", &self.nan)
            .field("window", &self.window)
            .field("pad", &self.pad)
            .field("stride", &self.stride)
            .field("raw", &self.raw)
            .finish()
    }
}
