//! cuDNN's graph (backend) API, safe: build a graph of ops, plan it for a
//! target GPU (a live device, or one described by its properties, so plans
//! can be made ahead of time on a machine with no GPU), serialize and cache
//! plans, and execute them with checked bindings.
//!
//! | layer | what |
//! |---|---|
//! | [`backend`] | owning backend descriptors with typed attributes |
//! | [`Graph`] | the builder: tensors, convolution, matmul, pointwise, reduction, normalization, attention (SDPA) and FP8 ops ([`ops`]), shape inference |
//! | [`Target`] | a live device or [`DeviceProperties`] (JSON or [`DeviceSpec`] presets) |
//! | [`heuristics`] | engine configurations with notes, knobs, workspace; [`Policy`] filters |
//! | [`Plan`] | finalized plan: workspace, JSON round trip, checked execution |
//! | [`PlanCache`] | plans keyed on graph + target + policy, saved to and loaded from a file |
//! | [`PlanKey`], [`Trust`] | authenticated plan files: compiled code loads safely only from a file this program signed |
//!
//! Planning needs cuDNN >= 9.8 (for device properties) and a `libcuda.so.1`:
//! the real driver when there is one, otherwise the crate's driver stub (see
//! [`driver`]). Execution needs a GPU.
//!
//! ```no_run
//! use cudnn::graph::{ConvParams, DType, Graph, Plan, Policy, Target, TensorSpec};
//! let mut g = Graph::new();
//! let x = g.input("x", TensorSpec::nhwc(DType::F16, &[8, 64, 56, 56])?)?;
//! let w = g.input("w", TensorSpec::nhwc(DType::F16, &[64, 64, 3, 3])?)?;
//! let y = g.conv_fprop(x, w, &ConvParams::new_2d([1, 1], [1, 1], [1, 1]))?;
//! let y = g.relu(y)?;
//! g.output(y, DType::F16)?;
//! g.rename(y, "y")?;
//! let (plan, report) = Plan::build(&g.build()?, &Target::preset("h200")?, &Policy::default())?;
//! println!("engine {:?}, workspace {} B, {} candidates", report.chosen, plan.workspace_size(), report.candidates.len());
//! # Ok::<(), cudnn::Error>(())
//! ```

pub mod backend;
mod bindings;
mod cache;
mod cuda_graph;
pub mod driver;
mod finalize_memo;
#[allow(clippy::module_inception)]
mod graph;
mod guard;
pub mod heuristics;
pub mod nvrtc;
mod opgraph;
pub mod ops;
mod plan;
mod plan_auth;
mod plan_file;
mod plan_json;
mod target;
mod tensor;

#[doc(hidden)]
pub use backend::clock::{BackendClock, set_backend_clock, take_backend_clock};
pub use bindings::Bindings;
pub use cache::{
    CacheStats, LoadReport, MAX_FILE_BYTES as MAX_CACHE_FILE_BYTES, PlanCache, SkipReason,
    SkippedEntry,
};
pub use cuda_graph::{
    NATIVE_CUDA_GRAPH_FAULTY, NATIVE_CUDA_GRAPH_MIN, PlanCudaGraph, native_cuda_graph_engine_rule,
    native_cuda_graph_rule,
};
#[doc(hidden)]
pub use finalize_memo::{FinalizeMemoStats, enable_finalize_memo, finalize_memo_stats};
pub use graph::{Graph, IoSignature, IoTensor, OpGraph, Tensor};
pub use guard::{InputGuard, SeqLengths};
pub use heuristics::{BehaviorNote, Candidate, HeurMode, Knob, NumericalNote, Policy};
pub use ops::block_scale_fp8::{
    BlockScaled, MXFP8_BLOCK, MXFP8_SCALE_TILE_COLS, MXFP8_SCALE_TILE_ROWS,
    check_block_scale_target, mxfp8_scale_sizes,
};
pub use ops::conv::{ConvDirection, ConvParams};
pub use ops::matmul_fp8::{Fp8Matmul, Fp8MatmulScales, check_fp8_target};
pub use ops::norm::{NormGrads, NormMode, NormOutputs, NormPhase, RunningStats};
pub use ops::pointwise::{Arity, Pointwise};
pub use ops::reduction::Reduce;
pub use ops::sdpa::{
    AttnLayout, DiagonalAlignment, Dropout, PagedKv, RaggedTensor, SdpaBackward, SdpaConfig,
    SdpaForward, SdpaImpl, SdpaRagged, SdpaTrainingForward,
};
pub use ops::sdpa_bias::{AttnBias, BiasTensors, alibi_slopes};
pub use ops::sdpa_fp8::{Fp8SdpaConfig, Fp8SdpaForward, Fp8SdpaTrainingForward};
pub use ops::sdpa_fp8_bwd::{FP8_BWD_SCALE_NAMES, Fp8SdpaBackward};
pub use ops::sdpa_softmax::SdpaSoftmax;
#[doc(hidden)]
pub use plan::LaunchStage;
pub use plan::{BuildReport, Plan, PlanTiming, Timings};
pub use plan_auth::{
    Authentication, KEY_FILE_PREFIX, MAX_KEY_BYTES, MIN_KEY_BYTES, PlanKey, Trust,
};
pub use plan_json::check as check_plan_json;
pub use target::{DeviceProperties, DeviceSpec, REQUIRED_FIELDS, Target};
pub use tensor::{BYTE_ALIGNMENT, DType, MAX_DIMS, TensorSpec};

use crate::error::{Error, Result};

/// The first cuDNN with the device-properties descriptor (planning without a device).
pub const MIN_CUDNN: (u32, u32) = (9, 8);

/// Whether the loaded cuDNN can plan graphs; a typed error saying what it needs otherwise.
///
/// # Errors
/// cuDNN missing, or older than 9.8.
pub fn require_graph_support() -> Result<()> {
    let api = crate::check::cudnn()?;
    match api.info().version {
        Some(v) if (v.major, v.minor) >= MIN_CUDNN => Ok(()),
        v => Err(Error::Unsupported {
            what: format!(
                "the graph API's planning without a device (loaded cuDNN {})",
                v.map(|v| format!("{}.{}.{}", v.major, v.minor, v.patch))
                    .unwrap_or_else(|| "of unknown version".into())
            ),
            needs: Some("cuDNN >= 9.8".to_string()),
        }),
    }
}
