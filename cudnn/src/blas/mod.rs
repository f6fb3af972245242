//! cuBLAS and cuBLASLt: the handles, typed GEMM/GEMV with explicit compute
//! types over explicit [`Layout`]s, and cuBLASLt matmul with fused
//! epilogues and cached plans.
//!
//! # GEMM
//!
//! [`Handle::gemm`] computes `C = alpha·A·B + beta·C` for any element-type
//! pair of [`GemmTypes`] (f32, f64, f16, bf16, i8 → i32; f16/bf16 → f32)
//! and a [`ComputeType`]: half types accumulate in f32 unless
//! [`ComputeType::F16`] is asked for; TF32 is used only for
//! [`ComputeType::Tf32`] (or on a handle set to [`MathMode::Tf32`]).
//! Alpha and beta are `A::Scale` and reach cuBLAS in the compute type's
//! scaling type. Batched layouts make it `cublasGemmStridedBatchedEx`;
//! [`Handle::gemm_batched`] takes separate matrices (`cublasGemmBatchedEx`);
//! [`Handle::gemv`] is GEMV. [`GemmPlan`] / [`GemvPlan`] hold everything
//! worked out from the layouts (no library call), so a run is one call.
//!
//! # Layouts
//!
//! Every matrix comes with a [`Layout`]: rows, columns, leading dimension,
//! [`Order`] (row- or column-major), transposed or not, and batch count and
//! stride. Shapes are checked on the logical (after-transpose) matrices;
//! the library call is worked out from them, so a row-major user never
//! swaps operands by hand: a C that is not column-contiguous is computed as
//! Cᵀ = Bᵀ·Aᵀ. Every dimension, leading dimension, stride and buffer
//! length is checked first, and errors name the argument and both values.
//!
//! ```
//! use cudnn::blas::{ComputeType, GemmPlan, Layout};
//! // Y (8 x 32) = X (8 x 16) · Wᵀ, all row-major, W stored 32 x 16.
//! let plan = GemmPlan::<f32, f32>::new(
//!     Layout::row_major(8, 16),
//!     Layout::row_major(32, 16).t(),
//!     Layout::row_major(8, 32),
//!     ComputeType::Default,
//! )?;
//! assert!(plan.swaps_operands());
//! // Buffers are checked against the layouts before anything runs.
//! assert!(plan.check_lengths(8 * 16, 32 * 16, 8 * 32 - 1).is_err());
//! # Ok::<(), cudnn::Error>(())
//! ```
//!
//! # cuBLASLt: plans and epilogues
//!
//! An [`LtHandle`] owns the workspace. A [`MatmulSpec`] (layouts of A, B
//! and D, compute type, [`Epilogue`], pointer alignment) is turned into a
//! [`MatmulPlan`] (matmul descriptor, layouts, preference and the
//! heuristic's algorithm) once; [`PlanCache`] keeps plans by [`MatmulKey`].
//! The descriptors are host objects and can be built and inspected without
//! a device ([`MatmulDescriptors`]).
//!
//! cuBLASLt's GELU epilogues compute the **tanh approximation** of GELU,
//! hence [`Epilogue::GeluTanh`] and its siblings; the graph API has both
//! forms ([`Graph::gelu_tanh`](crate::graph::Graph::gelu_tanh) and the
//! exact [`Graph::gelu_erf`](crate::graph::Graph::gelu_erf)). The table
//! of forms and library modes is in
//! [`reference::gelu`](crate::reference::gelu).
//!
//! # FP8
//!
//! [`Fp8MatmulSpec`] / [`Fp8MatmulPlan`]: cuBLASLt's scaled FP8 matmul on
//! [`F8E4M3`](crate::F8E4M3) / [`F8E5M2`](crate::F8E5M2) inputs (f32, f16,
//! bf16 or FP8 output, per-tensor scales, amax of D, bias epilogues, fast
//! accumulation as an option). Its rules ("TN" operands, 16-byte
//! alignment, allowed types) are checked in Rust first and listed on
//! [`Fp8MatmulSpec`]; the oracle is
//! [`reference::gemm_fp8`](crate::reference::gemm_fp8).
//!
//! # cuBLASLt frames and epilogue vectors
//!
//! cuBLASLt is column-major; a D that is not column-contiguous is computed
//! as Dᵀ = Bᵀ·Aᵀ. The epilogue's vectors follow D's memory: the bias (and
//! the bias gradient of [`Epilogue::DReluBgrad`] / [`Epilogue::DGeluTanhBgrad`])
//! has one entry per element of D's *contiguous* dimension — per row of a
//! column-major D, per column of a row-major D; in both cases one per
//! feature when each sample is a contiguous vector.
//! [`Epilogue::BgradA`] / [`Epilogue::BgradB`] are defined on the logical
//! matrices (Σₖ A[i, k], length m; Σₖ B[k, j], length n) and mapped to the
//! library's frame. The auxiliary buffer (ReLU bit-mask, GELU input) is
//! laid out like D with leading dimension [`MatmulShape::aux_ld`]
//! ([`MatmulShape::aux_offset`] locates an element). A bias is shared by a
//! batch; bias gradients and auxiliary buffers are per matrix.
//!
//! ```
//! use cudnn::blas::{Epilogue, Layout, MatmulSpec};
//! let spec = MatmulSpec::new(
//!     Layout::row_major(32, 128),
//!     Layout::row_major(64, 128).t(),
//!     Layout::row_major(32, 64),
//! )
//! .with_epilogue(Epilogue::GeluTanhAuxBias);
//! let shape = spec.check::<half::f16, half::f16>()?;
//! assert_eq!(shape.bias_len(), 64);
//! assert_eq!(shape.aux_ld(), 64); // GELU input: a multiple of 8, >= 64
//! # Ok::<(), cudnn::Error>(())
//! ```

mod gemm;
mod gemv;
mod handle;
mod lt;
mod matrix;

pub use gemm::{ComputeType, GemmPlan, GemmTypes, ScaleType};
pub use gemv::{GemvPlan, GemvType};
pub use handle::*;
pub use lt::{
    AuxKind, BiasUse, Epilogue, EpilogueArgs, LtHandle, LtMatrixLayout, MatmulDesc,
    MatmulDescriptors, MatmulKey, MatmulLaunchChecks, MatmulPlan, MatmulPreference, MatmulShape,
    MatmulSpec, PlanCache,
};
pub use lt::{
    Fp8Bias, Fp8BiasType, Fp8Descriptors, Fp8Input, Fp8MatmulPlan, Fp8MatmulSpec, Fp8Output,
    Fp8OutputType, Fp8ScaleMode, Fp8Scaling, Fp8Shape, Fp8Types, check_scale_mode_for,
    fp8_epilogue_supported,
};
pub use matrix::{Layout, Matrix, MatrixMut, Order};
