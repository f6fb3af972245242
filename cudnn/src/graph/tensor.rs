//! Graph tensors: element type, dims, strides, byte alignment, and the
//! layout helpers (NCHW / NHWC / row-major).

use std::fmt;

use crate::error::{Error, Result};
use crate::sys::cudnn::cudnnDataType_t;

/// The most dims cuDNN's graph tensors take.
pub const MAX_DIMS: usize = 8;

/// The byte alignment graph tensors declare and bound pointers must have.
///
/// cuDNN offers its fastest (vectorised) engines only for 16-byte aligned
/// tensors (an f16 NHWC convolution gets no engine at 2-8 bytes); device
/// allocations are 256-byte aligned, so 16 costs callers nothing and a
/// pointer that breaks it is refused when bound.
pub const BYTE_ALIGNMENT: usize = 16;

/// The largest tensor dim, stride or element count a loaded plan may name
/// (and so a graph may plan, to be reloadable): a bound this crate chose
/// (2^48, far above any device's memory in elements, far below `i64::MAX`
/// so sums and products of a few of them stay representable), not one
/// cuDNN documents; cuDNN's own fields are `int64`.
pub(crate) const MAX_EXTENT: i64 = 1 << 48;

/// An element type of a graph tensor (a graph mixes them: f16 inputs, f32
/// intermediates).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DType {
    /// 32-bit float.
    F32,
    /// 64-bit float.
    F64,
    /// IEEE half.
    F16,
    /// bfloat16.
    BF16,
    /// Signed 8-bit integer.
    I8,
    /// Unsigned 8-bit integer.
    U8,
    /// 32-bit integer.
    I32,
    /// 64-bit integer.
    I64,
    /// Boolean (one byte), e.g. a comparison's output.
    Bool,
    /// FP8 E4M3.
    Fp8E4M3,
    /// FP8 E5M2.
    Fp8E5M2,
    /// FP8 E8M0: a power of two (an MXFP8 block scale).
    Fp8E8M0,
}

impl DType {
    /// cuDNN's code.
    pub fn raw(self) -> cudnnDataType_t {
        use cudnnDataType_t as D;
        match self {
            DType::F32 => D::CUDNN_DATA_FLOAT,
            DType::F64 => D::CUDNN_DATA_DOUBLE,
            DType::F16 => D::CUDNN_DATA_HALF,
            DType::BF16 => D::CUDNN_DATA_BFLOAT16,
            DType::I8 => D::CUDNN_DATA_INT8,
            DType::U8 => D::CUDNN_DATA_UINT8,
            DType::I32 => D::CUDNN_DATA_INT32,
            DType::I64 => D::CUDNN_DATA_INT64,
            DType::Bool => D::CUDNN_DATA_BOOLEAN,
            DType::Fp8E4M3 => D::CUDNN_DATA_FP8_E4M3,
            DType::Fp8E5M2 => D::CUDNN_DATA_FP8_E5M2,
            DType::Fp8E8M0 => D::CUDNN_DATA_FP8_E8M0,
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::I8
            | DType::U8
            | DType::Bool
            | DType::Fp8E4M3
            | DType::Fp8E5M2
            | DType::Fp8E8M0 => 1,
        }
    }

    /// A short name (`"f16"`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::Bool => "bool",
            DType::Fp8E4M3 => "fp8e4m3",
            DType::Fp8E5M2 => "fp8e5m2",
            DType::Fp8E8M0 => "fp8e8m0",
        }
    }

    /// Parse [`name`](Self::name).
    pub fn from_name(s: &str) -> Option<Self> {
        [
            DType::F32,
            DType::F64,
            DType::F16,
            DType::BF16,
            DType::I8,
            DType::U8,
            DType::I32,
            DType::I64,
            DType::Bool,
            DType::Fp8E4M3,
            DType::Fp8E5M2,
            DType::Fp8E8M0,
        ]
        .into_iter()
        .find(|d| d.name() == s)
    }

    /// The graph dtype of a buffer element type.
    pub fn of<T: crate::DataType>() -> Option<Self> {
        use cudnnDataType_t as D;
        Some(match T::CUDNN {
            D::CUDNN_DATA_FLOAT => DType::F32,
            D::CUDNN_DATA_DOUBLE => DType::F64,
            D::CUDNN_DATA_HALF => DType::F16,
            D::CUDNN_DATA_BFLOAT16 => DType::BF16,
            D::CUDNN_DATA_INT8 => DType::I8,
            D::CUDNN_DATA_UINT8 => DType::U8,
            D::CUDNN_DATA_INT32 => DType::I32,
            D::CUDNN_DATA_INT64 => DType::I64,
            D::CUDNN_DATA_FP8_E4M3 => DType::Fp8E4M3,
            D::CUDNN_DATA_FP8_E5M2 => DType::Fp8E5M2,
            D::CUDNN_DATA_FP8_E8M0 => DType::Fp8E8M0,
            _ => return None,
        })
    }

    /// Whether this is one of the 8-bit float types (E4M3, E5M2).
    pub fn is_fp8(self) -> bool {
        matches!(self, DType::Fp8E4M3 | DType::Fp8E5M2)
    }

    /// Whether this is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(
            self,
            DType::F32
                | DType::F64
                | DType::F16
                | DType::BF16
                | DType::Fp8E4M3
                | DType::Fp8E5M2
                | DType::Fp8E8M0
        )
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A tensor's type and layout: dims in the logical order cuDNN expects
/// (`[N, C, spatial...]` for convolutions, `[batch..., M, K]` for matmul) and
/// strides that say how it is stored.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorSpec {
    pub(crate) dtype: DType,
    pub(crate) dims: Vec<i64>,
    pub(crate) strides: Vec<i64>,
}

pub(crate) fn fmt_dims(d: &[i64]) -> String {
    let parts: Vec<String> = d.iter().map(|x| x.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

impl TensorSpec {
    /// Explicit dims and strides (1 to 8 dims, each >= 1; strides >= 1).
    ///
    /// # Errors
    /// Rank out of range, a dim or stride < 1, lengths differ, or the span overflows.
    pub fn new(dtype: DType, dims: &[i64], strides: &[i64]) -> Result<Self> {
        if dims.is_empty() || dims.len() > MAX_DIMS {
            return Err(Error::invalid(
                "dims",
                format!("must have 1 to {MAX_DIMS} entries"),
                fmt_dims(dims),
            ));
        }
        if strides.len() != dims.len() {
            return Err(Error::mismatch(
                "strides length (one stride per dim)",
                dims.len(),
                strides.len(),
            ));
        }
        for (i, &d) in dims.iter().enumerate() {
            if d < 1 {
                return Err(Error::invalid(format!("dims[{i}]"), "must be >= 1", d));
            }
        }
        for (i, &s) in strides.iter().enumerate() {
            if s < 1 {
                return Err(Error::invalid(format!("strides[{i}]"), "must be >= 1", s));
            }
        }
        let spec = Self {
            dtype,
            dims: dims.to_vec(),
            strides: strides.to_vec(),
        };
        spec.span_bytes()?;
        Ok(spec)
    }

    /// Packed row-major (last dim contiguous).
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn row_major(dtype: DType, dims: &[i64]) -> Result<Self> {
        let order: Vec<usize> = (0..dims.len()).collect();
        Self::new(dtype, dims, &packed_strides(dims, &order)?)
    }

    /// `[N, C, spatial...]` stored channels-first (NCHW, NCDHW): the same as row-major.
    ///
    /// # Errors
    /// As [`new`](Self::new); fewer than 3 dims.
    pub fn nchw(dtype: DType, dims: &[i64]) -> Result<Self> {
        if dims.len() < 3 {
            return Err(Error::invalid(
                "dims",
                "NCHW needs [N, C, spatial...] (3 to 8 dims)",
                fmt_dims(dims),
            ));
        }
        Self::row_major(dtype, dims)
    }

    /// `[N, C, spatial...]` stored channels-last (NHWC, NDHWC): C contiguous.
    ///
    /// # Errors
    /// As [`new`](Self::new); fewer than 3 dims.
    pub fn nhwc(dtype: DType, dims: &[i64]) -> Result<Self> {
        if dims.len() < 3 {
            return Err(Error::invalid(
                "dims",
                "NHWC needs [N, C, spatial...] (3 to 8 dims)",
                fmt_dims(dims),
            ));
        }
        // Outermost to innermost: N, spatial..., C.
        let mut order = vec![0];
        order.extend(2..dims.len());
        order.push(1);
        Self::new(dtype, dims, &packed_strides(dims, &order)?)
    }

    /// The same layout order as `like` (by its strides), packed, for `dims`.
    pub(crate) fn like(dtype: DType, dims: &[i64], like: &TensorSpec) -> Result<Self> {
        if dims.len() != like.dims.len() {
            return Self::row_major(dtype, dims);
        }
        Self::new(dtype, dims, &packed_strides(dims, &like.order())?)
    }

    /// Dims from outermost to innermost stride (ties keep logical order).
    pub(crate) fn order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.dims.len()).collect();
        order.sort_by(|&a, &b| self.strides[b].cmp(&self.strides[a]).then(a.cmp(&b)));
        order
    }

    /// With another element type, same layout.
    pub fn with_dtype(&self, dtype: DType) -> Self {
        Self {
            dtype,
            ..self.clone()
        }
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// The dims.
    pub fn dims(&self) -> &[i64] {
        &self.dims
    }
    /// The strides (in elements).
    pub fn strides(&self) -> &[i64] {
        &self.strides
    }

    /// Elements a buffer must hold: the largest offset plus one.
    ///
    /// # Errors
    /// The span overflows.
    pub fn span_elements(&self) -> Result<usize> {
        let overflow =
            || Error::invalid("dims/strides", "span overflows i64", fmt_dims(&self.dims));
        let mut last: i64 = 0;
        for (&d, &s) in self.dims.iter().zip(&self.strides) {
            last = d
                .checked_sub(1)
                .and_then(|d| d.checked_mul(s))
                .and_then(|x| last.checked_add(x))
                .ok_or_else(overflow)?;
        }
        let span = last.checked_add(1).ok_or_else(overflow)?;
        usize::try_from(span).map_err(|_| Error::invalid("dims/strides", "span too large", span))
    }

    /// Bytes a buffer must hold.
    ///
    /// # Errors
    /// The span overflows.
    pub fn span_bytes(&self) -> Result<usize> {
        self.span_elements()?
            .checked_mul(self.dtype.size())
            .ok_or_else(|| {
                Error::invalid(
                    "dims/strides",
                    "span in bytes overflows",
                    fmt_dims(&self.dims),
                )
            })
    }

    /// Number of logical elements (saturating at `u128::MAX`, which no
    /// buffer reaches; dims are >= 1, so it is never 0).
    pub fn element_count(&self) -> u128 {
        self.dims
            .iter()
            .map(|&d| u128::try_from(d).unwrap_or(0))
            .fold(1u128, u128::saturating_mul)
    }
}

/// Packed strides for `dims` stored in `order` (outermost first).
pub(crate) fn packed_strides(dims: &[i64], order: &[usize]) -> Result<Vec<i64>> {
    let mut strides = vec![1i64; dims.len()];
    let mut acc: i64 = 1;
    for &i in order.iter().rev() {
        strides[i] = acc;
        acc = acc
            .checked_mul(dims[i].max(1))
            .ok_or_else(|| Error::invalid("dims", "element count overflows i64", fmt_dims(dims)))?;
    }
    Ok(strides)
}
