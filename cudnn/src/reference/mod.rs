//! CPU reference implementations in `f64`: the oracles GPU results are
//! checked against (host-only; no library, no device).

pub mod attention;
pub mod conv;
pub mod gemm;
pub mod norm;
pub mod ops;
