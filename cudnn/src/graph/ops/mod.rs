//! The op families of the [`Graph`](super::Graph) builder, one module
//! each, with their parameter types: convolution ([`conv`]), normalization
//! ([`norm`]), pointwise modes ([`pointwise`]), reduction ([`reduction`]),
//! attention ([`sdpa`] and its options), FP8 matmul and attention
//! ([`matmul_fp8`], [`sdpa_fp8`], [`sdpa_fp8_bwd`]) and MXFP8 block scaling
//! ([`block_scale_fp8`]). The types are re-exported at [`crate::graph`],
//! the path to use; the methods that add the ops (`conv_fprop`, `matmul`,
//! `pointwise`, `layer_norm`, `sdpa_forward`, ...) are on [`Graph`](super::Graph).

// Each module holds an op family's parameters, shape rules, its `Graph`
// methods and its descriptor construction. This module holds what they
// share: the `OpNode` trait every op implements and the descriptors
// (`Built`) an op graph keeps.

pub mod block_scale_fp8;
pub mod conv;
pub(crate) mod elementwise;
pub(crate) mod matmul;
pub mod matmul_fp8;
pub mod norm;
pub mod pointwise;
pub mod reduction;
pub mod sdpa;
pub(crate) mod sdpa_band;
pub mod sdpa_bias;
pub(crate) mod sdpa_bias_build;
pub(crate) mod sdpa_composite;
pub mod sdpa_fp8;
pub(crate) mod sdpa_fp8_build;
pub mod sdpa_fp8_bwd;
pub(crate) mod sdpa_graph;
pub(crate) mod sdpa_native;
pub(crate) mod sdpa_paged;
pub(crate) mod sdpa_ragged;
pub(crate) mod sdpa_rules;
pub mod sdpa_softcap;
pub mod sdpa_softmax;
pub(crate) mod sdpa_types;

use super::backend::{AnyOperation, Descriptor, kind};
use super::tensor::DType;
use crate::error::Result;

/// Descriptors an op graph keeps alive: the operations it holds and the
/// descriptors they point to.
#[derive(Default)]
pub(crate) struct Built {
    pub(crate) ops: Vec<Box<dyn AnyOperation + Send>>,
    pub(crate) aux: Vec<Box<dyn std::any::Any + Send>>,
}

/// One op of a graph: its tensors (by index into the graph's tensors), its
/// parameters for the signature, and how it builds its descriptors.
pub(crate) trait OpNode: std::fmt::Debug + Send + Sync {
    /// A short name for errors.
    fn name(&self) -> String;
    /// `(role, tensor index, is_output)`, inputs first.
    fn tensors(&self) -> Vec<(&'static str, usize, bool)>;
    /// Parameters, for the graph signature.
    fn signature(&self) -> String;
    /// Whether the op's descriptor takes the graph's compute type (a
    /// convolution's or matmul's compute type, a pointwise op's math
    /// precision, a reduction's compute type). Norm and attention ops have
    /// no such attribute: their signature leaves the compute type out.
    fn honours_compute_type(&self) -> bool {
        true
    }
    /// The inputs of a matmul or convolution (where f32 data makes TF32 a question).
    fn tf32_inputs(&self) -> Vec<usize> {
        Vec::new()
    }
    /// `(tensor index, value)`: graph inputs that timing runs must fill with
    /// `value` in every element (i32) rather than zeros (sequence lengths).
    fn timing_fills(&self) -> Vec<(usize, i32)> {
        Vec::new()
    }
    /// Whether engines for a GPU of `device_ver` (major*100 + minor*10) can
    /// run this op, where the op knows a limit cuDNN's heuristics would not
    /// report clearly.
    fn check_target(&self, device_ver: i64) -> Result<()> {
        let _ = device_ver;
        Ok(())
    }
    /// Create and finalize the op descriptor(s) from the graph's finalized
    /// tensors, with the compute type the op was added with.
    fn build(
        &self,
        t: &[Descriptor<kind::Tensor>],
        compute: DType,
        built: &mut Built,
    ) -> Result<()>;
}
