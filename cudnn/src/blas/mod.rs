//! cuBLAS: the handle (and later GEMM).

mod handle;

pub use handle::*;
