//! Element types: the library type codes and the alpha/beta scaling type,
//! the FP8 element types [`F8E4M3`] and [`F8E5M2`], and the MXFP8 block
//! scale type [`F8E8M0`].

use crate::sys::cudart::cudaDataType_t as cudaDataType;
use crate::sys::cudnn::cudnnDataType_t;

mod e8m0;
mod fp8;
pub use e8m0::F8E8M0;
pub use fp8::{F8E4M3, F8E5M2, Fp8Format, Fp8Saturation};

mod sealed {
    pub trait Sealed {}
    pub trait SealedScale {}
}

/// The type alpha and beta are passed as (`f32` for f32/f16/bf16/i8/FP8, `f64` for f64).
pub trait Scale: Copy + Default + std::fmt::Debug + sealed::SealedScale + 'static {
    /// Widen from f64 (alpha/beta literals).
    fn from_f64(v: f64) -> Self;
}

impl sealed::SealedScale for f32 {}
impl sealed::SealedScale for f64 {}
impl Scale for f32 {
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}
impl Scale for f64 {
    fn from_f64(v: f64) -> Self {
        v
    }
}

/// An element type cuDNN and CUDA can describe. Sealed: the codes must be right.
///
/// # Safety-relevant
/// `SIZE` is `size_of::<Self>()`, and any bit pattern is a valid value (so
/// device memory copied back is sound to read).
pub trait DataType:
    Copy + Default + std::fmt::Debug + Send + Sync + sealed::Sealed + 'static
{
    /// The cuDNN type code.
    const CUDNN: cudnnDataType_t;
    /// The CUDA type code (cuBLAS, cuBLASLt).
    const CUDA: cudaDataType;
    /// The alpha/beta type.
    type Scale: Scale;
    /// A short name (`"f32"`).
    const NAME: &'static str;
    /// Bytes per element.
    const SIZE: usize = std::mem::size_of::<Self>();
    /// Whether this is a floating-point type.
    const IS_FLOAT: bool;
}

macro_rules! dtype {
    ($t:ty, $cudnn:ident, $cuda:ident, $scale:ty, $name:literal, $float:literal) => {
        impl sealed::Sealed for $t {}
        impl DataType for $t {
            const CUDNN: cudnnDataType_t = cudnnDataType_t::$cudnn;
            const CUDA: cudaDataType = cudaDataType::$cuda;
            type Scale = $scale;
            const NAME: &'static str = $name;
            const IS_FLOAT: bool = $float;
        }
    };
}

dtype!(f32, CUDNN_DATA_FLOAT, CUDA_R_32F, f32, "f32", true);
dtype!(f64, CUDNN_DATA_DOUBLE, CUDA_R_64F, f64, "f64", true);
dtype!(half::f16, CUDNN_DATA_HALF, CUDA_R_16F, f32, "f16", true);
dtype!(
    half::bf16,
    CUDNN_DATA_BFLOAT16,
    CUDA_R_16BF,
    f32,
    "bf16",
    true
);
dtype!(i8, CUDNN_DATA_INT8, CUDA_R_8I, f32, "i8", false);
dtype!(u8, CUDNN_DATA_UINT8, CUDA_R_8U, f32, "u8", false);
dtype!(i32, CUDNN_DATA_INT32, CUDA_R_32I, f32, "i32", false);
dtype!(i64, CUDNN_DATA_INT64, CUDA_R_64I, f64, "i64", false);
dtype!(
    F8E4M3,
    CUDNN_DATA_FP8_E4M3,
    CUDA_R_8F_E4M3,
    f32,
    "fp8e4m3",
    true
);
dtype!(
    F8E5M2,
    CUDNN_DATA_FP8_E5M2,
    CUDA_R_8F_E5M2,
    f32,
    "fp8e5m2",
    true
);
dtype!(
    F8E8M0,
    CUDNN_DATA_FP8_E8M0,
    CUDA_R_8F_UE8M0,
    f32,
    "fp8e8m0",
    true
);
