//! Safe, checked bindings to NVIDIA cuDNN and cuBLAS.
//!
//! The raw layers are re-exported under [`sys`].

#![deny(missing_docs)]

/// The raw bindings this crate is built on.
pub mod sys {
    pub use cublas_sys as cublas;
    pub use cudart_sys as cudart;
    pub use cudnn_sys as cudnn;
}
