//! Convolution descriptors: [`ConvDescriptor`], and the output-shape
//! arithmetic ([`conv_output_shape`]).
//!
//! Validated in Rust before cuDNN sees them. Shared with cuDNN (8.9 and 9):
//! - 1 to 6 spatial dimensions (`CUDNN_DIM_MAX - 2`) with one padding,
//!   stride and dilation each; padding in `0..=i32::MAX`, stride and dilation
//!   in `1..=i32::MAX`;
//! - groups in `1..=i32::MAX`;
//! - compute type one of f16, f32, f64, i32 ([`ComputeType`]);
//! - for the output shape: `x` and `w` of rank spatial + 2, `x` channels equal
//!   to `w` channels times groups, and a padded input at least as large as the
//!   dilated filter (`x + 2*pad >= dilation*(k-1) + 1`, else the output would
//!   be empty).
//!
//! Stricter than cuDNN (listed, and checked by the agreement test, which
//! expects exactly these to be "we reject, cuDNN accepts"):
//! - **at least one spatial dimension.** cuDNN accepts a descriptor with
//!   `arrayLength == 0`, which no tensor can use.
//! - **output channels divisible by groups.** cuDNN accepts `k % groups != 0`
//!   (the last group gets fewer filters); frameworks reject it and we do too.
//! - **`groups * w channels` must be at most `i32::MAX`.** cuDNN multiplies in
//!   32 bits and can wrap around to equal the input channels.
//! - **the dilated filter size `dilation*(k-1) + 1` must be at most
//!   `i32::MAX`.** cuDNN computes it in 32 bits; on overflow it reports output
//!   sizes that are wrong, even negative.
//! - **the padded input `x + 2*pad` must be at most `i32::MAX`.** Likewise
//!   (cuDNN wraps it and reports a wrong output size).

use std::fmt;

use super::filter::FilterDescriptor;
use super::tensor::{
    Dims, INT_MAX, MAX_DIMS, MIN_DIMS, TensorDescriptor, check_each, check_len, descriptor_owner,
    from_int, to_int,
};
use crate::check::{self, cudnn_call};
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::sys::cudnn as dnn;

/// The most spatial dimensions a convolution or pooling window has.
pub const MAX_SPATIAL_DIMS: usize = MAX_DIMS - 2;

/// Whether the filter is flipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ConvMode {
    /// True convolution: the filter is flipped (`CUDNN_CONVOLUTION`).
    Convolution,
    /// Cross-correlation, what deep-learning frameworks call convolution
    /// (`CUDNN_CROSS_CORRELATION`). The default.
    #[default]
    CrossCorrelation,
}

impl ConvMode {
    /// The cuDNN constant.
    pub fn to_raw(self) -> dnn::cudnnConvolutionMode_t {
        match self {
            ConvMode::Convolution => dnn::cudnnConvolutionMode_t::CUDNN_CONVOLUTION,
            ConvMode::CrossCorrelation => dnn::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
        }
    }

    /// From the cuDNN constant; unknown values are an error.
    pub fn from_raw(raw: dnn::cudnnConvolutionMode_t) -> Result<Self> {
        match raw {
            dnn::cudnnConvolutionMode_t::CUDNN_CONVOLUTION => Ok(ConvMode::Convolution),
            dnn::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION => Ok(ConvMode::CrossCorrelation),
            other => Err(Error::invalid(
                "mode",
                "unknown cudnnConvolutionMode_t",
                other.0,
            )),
        }
    }
}

/// Whether cuDNN may use Tensor Cores, and with what conversions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MathType {
    /// Library default (`CUDNN_DEFAULT_MATH`).
    #[default]
    Default,
    /// Tensor Core operations allowed (`CUDNN_TENSOR_OP_MATH`).
    TensorOp,
    /// Tensor Cores allowed, with down-conversion of f32 data
    /// (`CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION`).
    TensorOpAllowConversion,
    /// No Tensor Cores: FMA only (`CUDNN_FMA_MATH`).
    Fma,
}

impl MathType {
    /// The cuDNN constant.
    pub fn to_raw(self) -> dnn::cudnnMathType_t {
        match self {
            MathType::Default => dnn::cudnnMathType_t::CUDNN_DEFAULT_MATH,
            MathType::TensorOp => dnn::cudnnMathType_t::CUDNN_TENSOR_OP_MATH,
            MathType::TensorOpAllowConversion => {
                dnn::cudnnMathType_t::CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION
            }
            MathType::Fma => dnn::cudnnMathType_t::CUDNN_FMA_MATH,
        }
    }

    /// From the cuDNN constant; unknown values are an error.
    pub fn from_raw(raw: dnn::cudnnMathType_t) -> Result<Self> {
        match raw {
            dnn::cudnnMathType_t::CUDNN_DEFAULT_MATH => Ok(MathType::Default),
            dnn::cudnnMathType_t::CUDNN_TENSOR_OP_MATH => Ok(MathType::TensorOp),
            dnn::cudnnMathType_t::CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION => {
                Ok(MathType::TensorOpAllowConversion)
            }
            dnn::cudnnMathType_t::CUDNN_FMA_MATH => Ok(MathType::Fma),
            other => Err(Error::invalid(
                "math type",
                "unknown cudnnMathType_t",
                other.0,
            )),
        }
    }
}

/// The precision a convolution accumulates in (`computeType`). cuDNN's
/// convolution descriptor takes exactly these four.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ComputeType {
    /// Half precision (`CUDNN_DATA_HALF`): "true half" for f16 data.
    F16,
    /// Single precision (`CUDNN_DATA_FLOAT`): for f32, and f16/bf16 data
    /// accumulated in f32. The default.
    #[default]
    F32,
    /// Double precision (`CUDNN_DATA_DOUBLE`).
    F64,
    /// 32-bit integer (`CUDNN_DATA_INT32`): for i8/u8 data.
    I32,
}

impl ComputeType {
    /// The cuDNN data-type code.
    pub fn to_raw(self) -> dnn::cudnnDataType_t {
        match self {
            ComputeType::F16 => dnn::cudnnDataType_t::CUDNN_DATA_HALF,
            ComputeType::F32 => dnn::cudnnDataType_t::CUDNN_DATA_FLOAT,
            ComputeType::F64 => dnn::cudnnDataType_t::CUDNN_DATA_DOUBLE,
            ComputeType::I32 => dnn::cudnnDataType_t::CUDNN_DATA_INT32,
        }
    }

    /// From a cuDNN data-type code; codes a convolution cannot compute in
    /// (bf16, i8, u8, i64, ...) are an error naming the code.
    pub fn from_raw(raw: dnn::cudnnDataType_t) -> Result<Self> {
        match raw {
            dnn::cudnnDataType_t::CUDNN_DATA_HALF => Ok(ComputeType::F16),
            dnn::cudnnDataType_t::CUDNN_DATA_FLOAT => Ok(ComputeType::F32),
            dnn::cudnnDataType_t::CUDNN_DATA_DOUBLE => Ok(ComputeType::F64),
            dnn::cudnnDataType_t::CUDNN_DATA_INT32 => Ok(ComputeType::I32),
            other => Err(Error::invalid(
                "compute type",
                "must be CUDNN_DATA_HALF, CUDNN_DATA_FLOAT, CUDNN_DATA_DOUBLE or CUDNN_DATA_INT32",
                other.0,
            )),
        }
    }

    /// The compute type named by element type `T`, for the four types that
    /// are one (f16, f32, f64, i32); an error naming `T` otherwise.
    pub fn of<T: DataType>() -> Result<Self> {
        Self::from_raw(T::CUDNN).map_err(|_| {
            Error::invalid(
                "T",
                "a convolution computes in f16, f32, f64 or i32 only",
                T::NAME,
            )
        })
    }
}

/// Validate the per-dimension convolution parameters.
fn validate_conv(pad: &[usize], stride: &[usize], dilation: &[usize]) -> Result<()> {
    check_len("pad.len()", pad.len(), 1, MAX_SPATIAL_DIMS)?;
    for (name, v) in [
        ("stride.len()", stride.len()),
        ("dilation.len()", dilation.len()),
    ] {
        if v != pad.len() {
            return Err(Error::invalid(
                name,
                format!("must equal pad.len() ({})", pad.len()),
                v,
            ));
        }
    }
    check_each("pad", pad, 0)?;
    check_each("stride", stride, 1)?;
    check_each("dilation", dilation, 1)?;
    Ok(())
}

fn validate_groups(groups: usize) -> Result<()> {
    if groups == 0 {
        return Err(Error::invalid("groups", "must be >= 1", groups));
    }
    to_int(|| "groups".into(), groups).map(drop)
}

/// The output shape `[n, k, spatial...]` of a forward convolution, computed
/// in Rust with every rule of the module docs checked:
/// `out = (in + 2*pad - dilation*(k-1) - 1) / stride + 1` per spatial dimension.
///
/// `x` is `[n, c, spatial...]`, `w` is `[k, c / groups, window...]`.
///
/// # Errors
/// The first broken rule, naming the argument and the values.
pub fn conv_output_shape(
    x: &[usize],
    w: &[usize],
    pad: &[usize],
    stride: &[usize],
    dilation: &[usize],
    groups: usize,
) -> Result<Vec<usize>> {
    validate_conv(pad, stride, dilation)?;
    validate_groups(groups)?;
    check_len("x rank", x.len(), MIN_DIMS, MAX_DIMS)?;
    check_len("w rank", w.len(), MIN_DIMS, MAX_DIMS)?;
    check_each("x.shape", x, 1)?;
    check_each("w.shape", w, 1)?;
    let s = pad.len();
    if x.len() != s + 2 {
        return Err(Error::mismatch(
            "x rank (spatial dims of the convolution + 2)",
            s + 2,
            x.len(),
        ));
    }
    if w.len() != x.len() {
        return Err(Error::mismatch(
            "w rank (equal to x rank)",
            x.len(),
            w.len(),
        ));
    }
    let (c, k, wc) = (x[1], w[0], w[1]);
    let group_channels = wc as u128 * groups as u128;
    if group_channels > INT_MAX as u128 {
        return Err(Error::invalid(
            "groups",
            format!("groups * w channels ({groups} * {wc} = {group_channels}) must be <= i32::MAX"),
            groups,
        ));
    }
    if group_channels != c as u128 {
        return Err(Error::mismatch(
            format!("x channels (w channels {wc} * groups {groups})"),
            group_channels,
            c,
        ));
    }
    if k % groups != 0 {
        return Err(Error::invalid(
            "w.shape[0] (output channels)",
            format!("must be divisible by groups ({groups})"),
            k,
        ));
    }
    let mut out = Vec::with_capacity(x.len());
    out.push(x[0]);
    out.push(k);
    for i in 0..s {
        let (input, window) = (x[i + 2] as u128, w[i + 2] as u128);
        let extent = dilation[i] as u128 * (window - 1) + 1;
        if extent > INT_MAX as u128 {
            return Err(Error::invalid(
                format!("dilation[{i}]"),
                format!(
                    "the dilated filter size dilation * (w.shape[{}] - 1) + 1 = {extent} must be <= i32::MAX",
                    i + 2
                ),
                dilation[i],
            ));
        }
        let padded = input + 2 * pad[i] as u128;
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
        if padded < extent {
            return Err(Error::invalid(
                format!("x.shape[{}]", i + 2),
                format!(
                    "the padded input {padded} (pad[{i}] = {}) must be >= the dilated filter size {extent} \
                     (the output would be empty)",
                    pad[i]
                ),
                x[i + 2],
            ));
        }
        // All terms are <= i32::MAX here.
        out.push(((padded - extent) / stride[i] as u128 + 1) as usize);
    }
    Ok(out)
}

descriptor_owner!(
    /// Owns a `cudnnConvolutionDescriptor_t`.
    RawConv,
    cudnnConvolutionStruct,
    cudnnCreateConvolutionDescriptor,
    cudnnDestroyConvolutionDescriptor
);

/// A cuDNN convolution descriptor: padding, stride and dilation per spatial
/// dimension, mode, compute type, groups and math type.
///
/// `Send` (a cuDNN descriptor is a plain host structure, tied to no handle,
/// stream or thread), not `Sync` (changes go through `&mut self`).
///
/// ```no_run
/// # use cudnn::dnn::{ConvDescriptor, FilterDescriptor, TensorDescriptor};
/// let x = TensorDescriptor::<f32>::nchw(8, 3, 224, 224)?;
/// let w = FilterDescriptor::<f32>::nchw(64, 3, 7, 7)?;
/// let conv = ConvDescriptor::new_2d([3, 3], [2, 2], [1, 1])?;
/// assert_eq!(conv.output_shape(&x, &w)?, [8, 64, 112, 112]);
/// # Ok::<(), cudnn::Error>(())
/// ```
pub struct ConvDescriptor {
    raw: RawConv,
    pad: Dims,
    stride: Dims,
    dilation: Dims,
    mode: ConvMode,
    compute: ComputeType,
    groups: usize,
    math: MathType,
}

impl ConvDescriptor {
    /// A cross-correlation (the frameworks' "convolution") over
    /// `pad.len()` spatial dimensions (1 to 6), computing in f32, one group,
    /// default math.
    ///
    /// # Errors
    /// Lengths that differ or are outside 1..=6, a stride or dilation of 0,
    /// any value over `i32::MAX`; all checked before cuDNN is called.
    #[doc(alias = "cudnnSetConvolutionNdDescriptor")]
    pub fn new(pad: &[usize], stride: &[usize], dilation: &[usize]) -> Result<Self> {
        validate_conv(pad, stride, dilation)?;
        let this = Self {
            raw: RawConv::create()?,
            pad: Dims::from_slice(pad),
            stride: Dims::from_slice(stride),
            dilation: Dims::from_slice(dilation),
            mode: ConvMode::default(),
            compute: ComputeType::default(),
            groups: 1,
            math: MathType::default(),
        };
        this.apply_nd()?;
        Ok(this)
    }

    /// A 2-d cross-correlation: `[pad_h, pad_w]`, `[stride_h, stride_w]`,
    /// `[dilation_h, dilation_w]`.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    #[doc(alias = "cudnnSetConvolutionNdDescriptor")]
    #[doc(alias = "cudnnSetConvolution2dDescriptor")]
    pub fn new_2d(pad: [usize; 2], stride: [usize; 2], dilation: [usize; 2]) -> Result<Self> {
        Self::new(&pad, &stride, &dilation)
    }

    /// Set everything `cudnnSetConvolutionNdDescriptor` takes, then re-apply
    /// the group count and math type so they survive.
    fn apply_nd(&self) -> Result<()> {
        let api = check::cudnn()?;
        let (p, s, d) = (self.pad.to_c(), self.stride.to_c(), self.dilation.to_c());
        // SAFETY: `raw` is a live descriptor we own; the three arrays hold
        // `pad.len()` (checked 1..=6) C ints, each checked against the rules.
        unsafe {
            cudnn_call!(
                api,
                cudnnSetConvolutionNdDescriptor(
                    self.raw.as_ptr(),
                    self.pad.len() as i32,
                    p.as_ptr(),
                    s.as_ptr(),
                    d.as_ptr(),
                    self.mode.to_raw(),
                    self.compute.to_raw()
                )
            )
        }?;
        self.apply_groups(self.groups)?;
        self.apply_math(self.math)
    }

    fn apply_groups(&self, groups: usize) -> Result<()> {
        let g = to_int(|| "groups".into(), groups)?;
        // SAFETY: `raw` is a live descriptor we own; `g` was checked >= 1.
        unsafe {
            cudnn_call!(
                check::cudnn()?,
                cudnnSetConvolutionGroupCount(self.raw.as_ptr(), g)
            )
        }
    }

    fn apply_math(&self, math: MathType) -> Result<()> {
        // SAFETY: `raw` is a live descriptor we own; `math` is a known constant.
        unsafe {
            cudnn_call!(
                check::cudnn()?,
                cudnnSetConvolutionMathType(self.raw.as_ptr(), math.to_raw())
            )
        }
    }

    /// Convolution or cross-correlation.
    ///
    /// # Errors
    /// Only what cuDNN reports.
    #[doc(alias = "cudnnSetConvolutionNdDescriptor")]
    pub fn set_mode(&mut self, mode: ConvMode) -> Result<()> {
        let old = std::mem::replace(&mut self.mode, mode);
        self.apply_nd().inspect_err(|_| self.mode = old)
    }

    /// [`set_mode`](Self::set_mode), builder style.
    ///
    /// # Errors
    /// As [`set_mode`](Self::set_mode).
    pub fn with_mode(mut self, mode: ConvMode) -> Result<Self> {
        self.set_mode(mode)?;
        Ok(self)
    }

    /// The precision to accumulate in.
    ///
    /// # Errors
    /// Only what cuDNN reports.
    #[doc(alias = "cudnnSetConvolutionNdDescriptor")]
    pub fn set_compute_type(&mut self, compute: ComputeType) -> Result<()> {
        let old = std::mem::replace(&mut self.compute, compute);
        self.apply_nd().inspect_err(|_| self.compute = old)
    }

    /// [`set_compute_type`](Self::set_compute_type), builder style.
    ///
    /// # Errors
    /// As [`set_compute_type`](Self::set_compute_type).
    pub fn with_compute_type(mut self, compute: ComputeType) -> Result<Self> {
        self.set_compute_type(compute)?;
        Ok(self)
    }

    /// The number of groups (1 is an ordinary convolution; `c` is depthwise).
    ///
    /// # Errors
    /// `groups` of 0 or over `i32::MAX`, checked before cuDNN is called.
    #[doc(alias = "cudnnSetConvolutionGroupCount")]
    pub fn set_groups(&mut self, groups: usize) -> Result<()> {
        validate_groups(groups)?;
        self.apply_groups(groups)?;
        self.groups = groups;
        Ok(())
    }

    /// [`set_groups`](Self::set_groups), builder style.
    ///
    /// # Errors
    /// As [`set_groups`](Self::set_groups).
    pub fn with_groups(mut self, groups: usize) -> Result<Self> {
        self.set_groups(groups)?;
        Ok(self)
    }

    /// Whether Tensor Cores may be used.
    ///
    /// # Errors
    /// Only what cuDNN reports.
    #[doc(alias = "cudnnSetConvolutionMathType")]
    pub fn set_math_type(&mut self, math: MathType) -> Result<()> {
        self.apply_math(math)?;
        self.math = math;
        Ok(())
    }

    /// [`set_math_type`](Self::set_math_type), builder style.
    ///
    /// # Errors
    /// As [`set_math_type`](Self::set_math_type).
    pub fn with_math_type(mut self, math: MathType) -> Result<Self> {
        self.set_math_type(math)?;
        Ok(self)
    }

    /// Zero-padding per spatial dimension.
    pub fn pad(&self) -> &[usize] {
        &self.pad
    }

    /// Stride per spatial dimension.
    pub fn stride(&self) -> &[usize] {
        &self.stride
    }

    /// Dilation per spatial dimension.
    pub fn dilation(&self) -> &[usize] {
        &self.dilation
    }

    /// How many spatial dimensions.
    pub fn spatial_dims(&self) -> usize {
        self.pad.len()
    }

    /// Convolution or cross-correlation.
    pub fn mode(&self) -> ConvMode {
        self.mode
    }

    /// The accumulation precision.
    pub fn compute_type(&self) -> ComputeType {
        self.compute
    }

    /// The group count.
    pub fn groups(&self) -> usize {
        self.groups
    }

    /// The math type.
    pub fn math_type(&self) -> MathType {
        self.math
    }

    /// The output shape of a forward convolution of `x` by `w`, computed in
    /// Rust ([`conv_output_shape`]).
    ///
    /// # Errors
    /// Any rule of the module docs, naming the values.
    pub fn output_shape<T: DataType>(
        &self,
        x: &TensorDescriptor<T>,
        w: &FilterDescriptor<T>,
    ) -> Result<Vec<usize>> {
        conv_output_shape(
            x.shape(),
            w.shape(),
            &self.pad,
            &self.stride,
            &self.dilation,
            self.groups,
        )
    }

    /// The output shape as cuDNN computes it, for comparison with
    /// [`output_shape`](Self::output_shape). cuDNN skips some checks (see the
    /// module docs), so prefer `output_shape`.
    ///
    /// # Errors
    /// What cuDNN reports, or a negative size cuDNN returned on overflow.
    #[doc(alias = "cudnnGetConvolutionNdForwardOutputDim")]
    pub fn output_shape_from_cudnn<T: DataType>(
        &self,
        x: &TensorDescriptor<T>,
        w: &FilterDescriptor<T>,
    ) -> Result<Vec<usize>> {
        let mut out = [0i32; MAX_DIMS];
        let nb = x.rank();
        // SAFETY: the three descriptors are live and set; `out` holds
        // MAX_DIMS >= x.rank() entries, the most cuDNN writes.
        unsafe {
            cudnn_call!(
                check::cudnn()?,
                cudnnGetConvolutionNdForwardOutputDim(
                    self.raw.as_ptr(),
                    x.as_raw(),
                    w.as_raw(),
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
    pub fn as_raw(&self) -> dnn::cudnnConvolutionDescriptor_t {
        self.raw.as_ptr()
    }

    /// Give up ownership of the raw descriptor (the caller destroys it).
    pub fn into_raw(self) -> dnn::cudnnConvolutionDescriptor_t {
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
    /// `raw` was made by `cudnnCreateConvolutionDescriptor`, is not destroyed,
    /// and nothing else destroys or modifies it from now on.
    #[doc(alias = "cudnnGetConvolutionNdDescriptor")]
    pub unsafe fn from_raw(raw: dnn::cudnnConvolutionDescriptor_t) -> Result<Self> {
        if raw.is_null() {
            return Err(Error::invalid("raw", "must not be null", "null"));
        }
        let api = check::cudnn()?;
        let mut len = 0i32;
        let (mut p, mut s, mut d) = ([0i32; MAX_DIMS], [0i32; MAX_DIMS], [0i32; MAX_DIMS]);
        let mut mode = dnn::cudnnConvolutionMode_t(u32::MAX);
        let mut compute = dnn::cudnnDataType_t(u32::MAX);
        let mut groups = 0i32;
        let mut math = dnn::cudnnMathType_t(u32::MAX);
        // SAFETY: the caller promises `raw` is a live convolution descriptor;
        // each array holds the MAX_SPATIAL_DIMS entries we ask for.
        unsafe {
            cudnn_call!(
                api,
                cudnnGetConvolutionNdDescriptor(
                    raw,
                    MAX_SPATIAL_DIMS as i32,
                    &mut len,
                    p.as_mut_ptr(),
                    s.as_mut_ptr(),
                    d.as_mut_ptr(),
                    &mut mode,
                    &mut compute
                )
            )?;
        }
        // SAFETY: as above; `groups` is a valid out-pointer.
        unsafe { cudnn_call!(api, cudnnGetConvolutionGroupCount(raw, &mut groups)) }?;
        // SAFETY: as above; `math` is a valid out-pointer.
        unsafe { cudnn_call!(api, cudnnGetConvolutionMathType(raw, &mut math)) }?;
        let n = from_int(|| "arrayLength".into(), len)?;
        check_len("arrayLength", n, 1, MAX_SPATIAL_DIMS)?;
        let read = |name: &str, a: &[i32]| -> Result<Dims> {
            let v = a[..n]
                .iter()
                .enumerate()
                .map(|(i, &v)| from_int(|| format!("{name}[{i}]"), v))
                .collect::<Result<Vec<_>>>()?;
            Ok(Dims::from_slice(&v))
        };
        let (pad, stride, dilation) =
            (read("pad", &p)?, read("stride", &s)?, read("dilation", &d)?);
        validate_conv(&pad, &stride, &dilation)?;
        let groups = from_int(|| "groups".into(), groups)?;
        validate_groups(groups)?;
        let (mode, compute, math) = (
            ConvMode::from_raw(mode)?,
            ComputeType::from_raw(compute)?,
            MathType::from_raw(math)?,
        );
        // SAFETY: the caller hands us ownership of a live descriptor.
        let raw = unsafe { RawConv::adopt(raw) }?;
        Ok(Self {
            raw,
            pad,
            stride,
            dilation,
            mode,
            compute,
            groups,
            math,
        })
    }

    /// Destroy the descriptor now and report cuDNN's status (dropping it
    /// ignores the status).
    #[doc(alias = "cudnnDestroyConvolutionDescriptor")]
    pub fn destroy(self) -> Result<()> {
        self.raw.destroy()
    }
}

impl fmt::Debug for ConvDescriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConvDescriptor")
            .field("pad", &self.pad)
            .field("stride", &self.stride)
            .field("dilation", &self.dilation)
            .field("mode", &self.mode)
            .field("compute", &self.compute)
            .field("groups", &self.groups)
            .field("math", &self.math)
            .field("raw", &self.raw)
            .finish()
    }
}
