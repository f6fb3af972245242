//! cuBLASLt: matmul with fused epilogues (bias, ReLU, GELU and their
//! backward forms) and cached plans.
//!
//! - [`LtHandle`]: the cuBLASLt context, bound to a stream, owning the
//!   workspace every matmul gets.
//! - [`MatmulSpec`]: the layouts of A, B and D, the compute type, the
//!   [`Epilogue`] and the pointer alignment — everything a plan depends on.
//! - [`MatmulPlan`]: the matmul descriptor, the four matrix layouts, the
//!   preference and the heuristic's algorithm for one spec;
//!   [`run`](MatmulPlan::run) makes one `cublasLtMatmul` call.
//! - [`PlanCache`]: plans by [`MatmulKey`] (spec, types, workspace limit).
//! - [`Fp8MatmulSpec`] / [`Fp8MatmulPlan`]: scaled FP8 matmul (E4M3/E5M2
//!   inputs, per-tensor scales, amax of D, fast accumulation), its rules
//!   checked in Rust first (see [`fp8_epilogue_supported`] and the spec).
//!
//! The descriptors ([`MatmulDesc`], [`LtMatrixLayout`], [`MatmulPreference`])
//! are host objects and work without a device; creating a handle and
//! choosing an algorithm need one.
//!
//! # Frames and epilogue vectors
//!
//! cuBLASLt is column-major. As with [`GemmPlan`](super::GemmPlan), a D that
//! is not column-contiguous (row-major D) is computed as Dᵀ = Bᵀ·Aᵀ. The
//! epilogue's vectors follow D's memory: the bias (and the bias gradient of
//! [`Epilogue::DReluBgrad`]/[`Epilogue::DGeluTanhBgrad`]) has one entry per
//! element of D's *contiguous* dimension — per row of a column-major D, per
//! column of a row-major D; in both cases one per feature when each sample
//! is a contiguous vector. [`Epilogue::BgradA`] and [`Epilogue::BgradB`]
//! are defined on the logical matrices (sum of A over k, length m; sum of
//! B over k, length n) and are mapped to the library's frame. The auxiliary
//! buffer (ReLU bit-mask, GELU input) is laid out like D, with the leading
//! dimension [`MatmulShape::aux_ld`].

#[macro_use]
mod call;
mod desc;
mod fp8;
mod fp8_plan;
mod handle;
mod plan;
mod spec;

pub use desc::*;
pub use fp8::*;
pub use fp8_plan::*;
pub use handle::*;
pub use plan::*;
pub use spec::*;
