//! Safe, checked bindings to NVIDIA cuDNN and cuBLAS.
//!
//! The raw layers are re-exported under [`sys`]. The rules that keep safe
//! code from making the GPU touch freed, too small or foreign memory, and the
//! contract of every `unsafe fn`, are in [`soundness`].

#![deny(missing_docs)]

pub(crate) mod atomic_file;
pub mod blas;
pub(crate) mod check;
pub mod dnn;
pub mod dtype;
pub mod error;
pub mod graph;
#[cfg(feature = "cudarc")]
pub mod interop;
#[cfg(feature = "nccl")]
pub mod nccl;
pub(crate) mod no_device;
pub mod reference;
pub mod runtime;
pub mod soundness;

pub use check::cudnn_status_name;
pub use dtype::{DataType, F8E4M3, F8E5M2, F8E8M0, Fp8Format, Fp8Saturation, Scale};
pub use error::{Error, Result};

/// The raw bindings this crate is built on.
pub mod sys {
    pub use cublas_sys as cublas;
    pub use cudart_sys as cudart;
    pub use cudnn_sys as cudnn;
    /// NCCL (feature `nccl`).
    #[cfg(feature = "nccl")]
    pub use nccl_sys as nccl;
}
