//! A finalized operation graph and what its plans bind: the tensors
//! ([`IoTensor`]), scalars and scratch tensors ([`IoSignature`]).

use std::sync::Arc;

use super::backend::{Descriptor, attr, kind};
use super::ops::{Built, OpNode};
use super::target::Target;
use super::tensor::{DType, TensorSpec};
use crate::error::{Error, Result};

/// One graph input or output as a plan binds it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct IoTensor {
    /// Its name in the graph.
    pub name: String,
    /// Its UID.
    pub uid: i64,
    /// Type and layout.
    pub spec: TensorSpec,
    /// Whether the plan writes it.
    pub is_output: bool,
}

/// What a plan reads and writes: the tensors to bind, and the by-value scalars it passes itself.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct IoSignature {
    /// Inputs and outputs, in UID order.
    pub tensors: Vec<IoTensor>,
    /// `(uid, dtype, value)` of each by-value scalar.
    pub scalars: Vec<(i64, DType, f64)>,
    /// `(uid, bytes)` of each tensor the plan keeps in its own workspace
    /// (nothing to bind; counted in [`Plan::workspace_size`](super::Plan::workspace_size)).
    pub scratch: Vec<(i64, usize)>,
    /// UIDs of the inputs that hold ragged offsets (packed THD attention):
    /// device values cuDNN adds to tensor addresses, so a plan binds them
    /// only through the unsafe
    /// [`Bindings::input_ragged_offsets`](super::Bindings::input_ragged_offsets).
    pub ragged_offsets: Vec<i64>,
}

/// A finalized cuDNN operation graph, ready for heuristics and plans.
pub struct OpGraph {
    pub(crate) desc: Descriptor<kind::OperationGraph>,
    /// Whether f32 data feeds a matmul or convolution (where TF32 applies).
    pub(crate) tf32_data: bool,
    /// The tensor and op descriptors the graph points to (kept alive with it).
    pub(crate) _tensors: Vec<Descriptor<kind::Tensor>>,
    pub(crate) _built: Built,
    pub(crate) io: Arc<IoSignature>,
    pub(crate) signature: String,
    /// `(uid, value)`: inputs that timing runs fill with `value` (i32), not zeros.
    pub(crate) timing_fills: Vec<(i64, i32)>,
    /// The graph's ops, for their checks against a target.
    pub(crate) ops: Vec<Arc<dyn OpNode>>,
    /// The inputs the device uses as addresses or bounds (page tables,
    /// sequence lengths), by UID, with their guard.
    pub(crate) guarded: Vec<(i64, super::guard::InputGuard)>,
}

impl std::fmt::Debug for OpGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpGraph")
            .field("io", &self.io)
            .finish_non_exhaustive()
    }
}

impl OpGraph {
    /// What plans of this graph bind.
    pub fn io(&self) -> &IoSignature {
        &self.io
    }

    /// The graph's canonical text (see [`Graph::signature`](super::Graph::signature)).
    pub fn signature(&self) -> &str {
        &self.signature
    }

    /// The finalized operation graph descriptor (for the backend layer).
    pub fn descriptor(&self) -> &Descriptor<kind::OperationGraph> {
        &self.desc
    }

    /// Whether the graph's ops can run on `target` as far as the crate knows
    /// their limits (e.g. the attention backward's head dims per architecture).
    ///
    /// # Errors
    /// `Unsupported` naming the op, the limit and the target.
    pub fn check_target(&self, target: &Target) -> Result<()> {
        let ver = target.properties().device_ver();
        for op in &self.ops {
            op.check_target(ver).map_err(|e| {
                e.with_context(format!("{} on {}", op.name(), target.fingerprint()))
            })?;
        }
        Ok(())
    }

    /// `(uid, value)` of the inputs that timing runs ([`Plan::autotune`](super::Plan::autotune))
    /// fill with `value` in every (i32) element rather than zeros: the
    /// sequence lengths of a padded attention, at their full values.
    pub fn timing_fills(&self) -> &[(i64, i32)] {
        &self.timing_fills
    }

    /// The bytes timing runs put in input `t` (the whole span): sequence
    /// lengths at their full values, so a padded attention times the work it
    /// will do; `None` for inputs that may be zeros.
    ///
    /// # Errors
    /// The span is not representable.
    pub(crate) fn timing_input(&self, t: &IoTensor) -> Result<Option<Vec<u8>>> {
        let Some(&(_, v)) = self.timing_fills.iter().find(|(uid, _)| *uid == t.uid) else {
            return Ok(None);
        };
        if t.spec.dtype() != DType::I32 {
            return Ok(None);
        }
        let n = t.spec.span_elements()?;
        let mut bytes = Vec::new();
        bytes
            .try_reserve_exact(n.saturating_mul(4))
            .map_err(|_| Error::invalid("timing input", "too large to fill on the host", n))?;
        for _ in 0..n {
            bytes.extend_from_slice(&v.to_ne_bytes());
        }
        Ok(Some(bytes))
    }

    /// How many engines cuDNN has for this graph in total (`ENGINE_GLOBAL_COUNT`).
    ///
    /// # Errors
    /// cuDNN's refusal.
    pub fn engine_count(&self) -> Result<i64> {
        self.desc.get_one(attr::OPERATIONGRAPH_ENGINE_GLOBAL_COUNT)
    }
}
