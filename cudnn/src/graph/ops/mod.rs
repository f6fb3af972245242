//! The op nodes the builder adds: each module holds an op family's
//! parameters, shape rules and descriptor construction.

pub mod conv;
pub mod norm;
pub mod pointwise;
pub mod sdpa;
pub(crate) mod sdpa_composite;

use super::backend::{Descriptor, kind};
use super::graph::Built;
use super::tensor::DType;
use crate::error::Result;

/// An op family built outside the core set (normalization, attention).
pub(crate) trait ExtOp: std::fmt::Debug + Send + Sync {
    /// A short name for errors.
    fn name(&self) -> String;
    /// `(role, tensor index, is_output)`.
    fn tensors(&self) -> Vec<(&'static str, usize, bool)>;
    /// Parameters, for the graph signature.
    fn signature(&self) -> String;
    /// Create and finalize the op descriptor(s) from the graph's finalized tensors.
    fn build(
        &self,
        t: &[Descriptor<kind::Tensor>],
        compute: DType,
        built: &mut Built,
    ) -> Result<()>;
}
