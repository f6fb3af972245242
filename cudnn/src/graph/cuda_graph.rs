//! cuDNN's native CUDA graphs for graph plans (see [`PlanCudaGraph`]).

use super::bindings::Bindings;
use super::heuristics::BehaviorNote;
use super::plan::Plan;
use crate::check::{cuda_call, cudnn, cudnn_call};
use crate::error::{Error, Result};
use crate::runtime::{CudaGraph, CudaGraphExec};
use crate::sys::cudart::{self, Version};
use crate::sys::cudnn as sys;

/// The first cuDNN with native CUDA-graph construction.
pub const NATIVE_CUDA_GRAPH_MIN: Version = Version::new(9, 5, 0);
/// cuDNN versions refused for CUDA-graph use: `[start, end)`.
pub const NATIVE_CUDA_GRAPH_FAULTY: (Version, Version) =
    (Version::new(9, 13, 0), Version::new(9, 15, 0));

/// The version rule, as logic: `Ok` when cuDNN `version` may build native
/// CUDA graphs.
///
/// # Errors
/// [`Error::Unsupported`] naming the version and the reason.
pub fn native_cuda_graph_rule(version: Version) -> Result<()> {
    if version < NATIVE_CUDA_GRAPH_MIN {
        return Err(Error::Unsupported {
            what: format!(
                "native CUDA graphs (cudnnBackendPopulateCudaGraph) with cuDNN {version}"
            ),
            needs: Some(format!("cuDNN {NATIVE_CUDA_GRAPH_MIN} or newer")),
        });
    }
    let (lo, hi) = NATIVE_CUDA_GRAPH_FAULTY;
    if version >= lo && version < hi {
        return Err(Error::Unsupported {
            what: format!(
                "native CUDA graphs with cuDNN {version} (versions {lo} up to {hi} have known CUDA-graph faults in some configurations; this crate refuses the whole range)"
            ),
            needs: Some(format!("cuDNN {hi} or newer, or one older than {lo}")),
        });
    }
    Ok(())
}

/// The behaviour-note rule: `Ok` unless the engine's notes are known and
/// lack [`BehaviorNote::SupportsCudaGraphNativeApi`].
///
/// # Errors
/// [`Error::Unsupported`] naming the engine.
pub fn native_cuda_graph_engine_rule(
    engine: Option<i64>,
    notes: Option<&[BehaviorNote]>,
) -> Result<()> {
    match notes {
        Some(n) if !n.contains(&BehaviorNote::SupportsCudaGraphNativeApi) => {
            Err(Error::Unsupported {
                what: format!(
                    "a native CUDA graph of engine {} (it does not declare CUDNN_BEHAVIOR_NOTE_SUPPORTS_CUDA_GRAPH_NATIVE_API)",
                    engine.map_or_else(|| "?".to_string(), |e| e.to_string())
                ),
                needs: Some(
                    "an engine with that note, or a stream capture of Plan::execute".to_string(),
                ),
            })
        }
        _ => Ok(()),
    }
}

/// cuDNN's native CUDA graphs: a [`Plan`] writes its work straight into a
/// CUDA graph from its bindings (`cudnnBackendPopulateCudaGraph`), with no
/// stream capture, and re-points that graph at new bindings
/// (`cudnnBackendUpdateCudaGraph`).
///
/// # Which cuDNN
/// - cuDNN 9.5.0 introduced the two functions: older libraries get a typed
///   [`Error::Unsupported`] before anything is called.
/// - cuDNN 9.13.0 up to (not including) 9.15.0 is refused too. NVIDIA's
///   TransformerEngine turns cuDNN fused attention off under CUDA graphs on
///   those releases for particular configurations (on 9.14.0, for example,
///   a non-causal mask with more than 1,024 key positions: an illegal
///   memory access). Those conditions are attention shapes this crate does
///   not read back from a plan, so it adopts a wider rule than
///   TransformerEngine's: native graph construction is refused for every
///   plan on those versions (a superset, on purpose); a stream capture of
///   [`Plan::execute`] remains available (the same rule does not cover it:
///   the same kernels are captured, so prefer a newer cuDNN when replaying
///   attention).
/// - The plan's engine must declare
///   [`BehaviorNote::SupportsCudaGraphNativeApi`]: engines without it (the
///   note is how cuDNN says so, and NVIDIA's frontend lets a caller select
///   engines by it) are refused before the call. A plan loaded from JSON
///   carries no notes; there cuDNN's own refusal
///   (`CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API`) becomes
///   [`Error::Unsupported`] too.
///
/// # Lifetimes
/// The graph launches the plan's kernels, which cuDNN frees with the plan
/// (runtime-compiled code included), so a [`PlanCudaGraph`] borrows its
/// [`Plan`]. Its addresses are those of the bindings and the workspace at
/// population: launching an executable graph made from it is
/// [`CudaGraphExec::launch`](crate::runtime::CudaGraphExec::launch), `unsafe`
/// with the same contract as a captured graph (the buffers and the
/// handle's workspace stay allocated, and the plan stays alive).
///
/// A CUDA graph cuDNN wrote from a [`Plan`] (see above); borrows
/// the plan, whose kernels it launches.
#[derive(Debug)]
pub struct PlanCudaGraph<'p> {
    graph: CudaGraph,
    plan: &'p Plan,
}

impl PlanCudaGraph<'_> {
    /// The CUDA graph (to instantiate, or to add as a child of another graph).
    pub fn graph(&self) -> &CudaGraph {
        &self.graph
    }

    /// Instantiate it ([`CudaGraph::instantiate`]).
    ///
    /// # Errors
    /// As [`CudaGraph::instantiate`].
    pub fn instantiate(&self) -> Result<CudaGraphExec> {
        self.graph.instantiate()
    }

    /// The plan the graph runs.
    pub fn plan(&self) -> &Plan {
        self.plan
    }
}

fn map_native(e: Error) -> Error {
    match e.cudnn_status() {
        Some(s) if s == sys::cudnnStatus_t::CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API => {
            Error::Unsupported {
                what: "a native CUDA graph of this plan's engine (cuDNN: NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API)".to_string(),
                needs: Some("an engine with CUDNN_BEHAVIOR_NOTE_SUPPORTS_CUDA_GRAPH_NATIVE_API, or a stream capture of Plan::execute".to_string()),
            }
        }
        _ => e,
    }
}

impl Plan {
    /// Whether the plan's engine declares native CUDA-graph support
    /// ([`BehaviorNote::SupportsCudaGraphNativeApi`]); `None` for a plan
    /// loaded from JSON (its notes are not known).
    pub fn supports_native_cuda_graph(&self) -> Option<bool> {
        self.notes()
            .map(|n| n.contains(&BehaviorNote::SupportsCudaGraphNativeApi))
    }

    fn check_native(&self) -> Result<()> {
        native_cuda_graph_rule(crate::dnn::Handle::library_version()?)?;
        native_cuda_graph_engine_rule(self.engine(), self.notes())
    }

    /// Build a CUDA graph of this plan with `bindings`
    /// (`cudnnBackendPopulateCudaGraph`): the same work as
    /// [`execute`](Self::execute) on the handle's stream, as a graph, with
    /// no capture. The workspace is resolved as `execute` does (the
    /// handle's, grown now if needed, or the caller's).
    ///
    /// # Errors
    /// [`Error::Unsupported`] (before any library call) for cuDNN older than
    /// 9.5.0, for 9.13.0 up to 9.15.0, for an engine without the native
    /// CUDA-graph note; as [`execute`](Self::execute) for the bindings;
    /// [`Error::Cudnn`]/[`Error::Cuda`] from the calls.
    #[doc(alias = "cudnnBackendPopulateCudaGraph")]
    pub fn cuda_graph(
        &self,
        handle: &mut crate::dnn::Handle,
        bindings: &mut Bindings<'_>,
    ) -> Result<PlanCudaGraph<'_>> {
        self.check_native()?;
        let rt = crate::check::cudart()?;
        let mut raw: cudart::cudaGraph_t = std::ptr::null_mut();
        {
            let _on = handle.enter()?;
            // SAFETY: `raw` is a valid out-pointer; flags must be 0.
            unsafe { cuda_call!(rt, cudaGraphCreate(&mut raw, 0)) }?;
        }
        // SAFETY: a graph just created by cudaGraphCreate, owned by nothing
        // else; its work runs on the handle's device.
        let graph = unsafe { CudaGraph::from_raw(raw, Some(handle.device())) }?;
        self.with_pack(handle, bindings, |h, plan, pack| {
            let api = cudnn()?;
            // SAFETY: the plan is finalized and locked, the variant pack
            // checked as for `execute` (every pointer's span, dtype and
            // alignment; the workspace at least the plan's size); the graph
            // is empty and ours.
            unsafe {
                cudnn_call!(
                    api,
                    cudnnBackendPopulateCudaGraph(h, plan, pack, graph.as_raw())
                )
            }
            .map_err(map_native)
        })?;
        Ok(PlanCudaGraph { graph, plan: self })
    }

    /// Re-point `graph` (made by [`cuda_graph`](Self::cuda_graph) from this
    /// plan) at new `bindings` (`cudnnBackendUpdateCudaGraph`). The CUDA
    /// graph template is updated; refresh an executable graph made from it
    /// with [`CudaGraphExec::update`](crate::runtime::CudaGraphExec::update).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `graph` was made from another plan;
    /// as [`cuda_graph`](Self::cuda_graph).
    #[doc(alias = "cudnnBackendUpdateCudaGraph")]
    pub fn update_cuda_graph(
        &self,
        handle: &mut crate::dnn::Handle,
        bindings: &mut Bindings<'_>,
        graph: &mut PlanCudaGraph<'_>,
    ) -> Result<()> {
        if !std::ptr::eq(graph.plan, self) {
            return Err(Error::invalid(
                "graph",
                "was made from another plan",
                format!("plan {}", graph.plan.id),
            ));
        }
        self.check_native()?;
        let raw = graph.graph.as_raw();
        self.with_pack(handle, bindings, |h, plan, pack| {
            let api = cudnn()?;
            // SAFETY: as in `cuda_graph`; `raw` was populated from this plan.
            unsafe { cudnn_call!(api, cudnnBackendUpdateCudaGraph(h, plan, pack, raw)) }
                .map_err(map_native)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_version_rule_boundaries() {
        let ok = |s: (u32, u32, u32)| native_cuda_graph_rule(Version::new(s.0, s.1, s.2)).is_ok();
        assert!(!ok((8, 9, 7)));
        assert!(!ok((9, 4, 99)));
        assert!(ok((9, 5, 0)));
        assert!(ok((9, 12, 9)));
        assert!(!ok((9, 13, 0)));
        assert!(!ok((9, 13, 1)));
        assert!(!ok((9, 14, 0)));
        assert!(ok((9, 15, 0)));
        assert!(ok((9, 19, 0)));
        assert!(ok((9, 28, 1)));
    }

    #[test]
    fn unit_engine_rule() {
        assert!(native_cuda_graph_engine_rule(Some(3), None).is_ok());
        assert!(
            native_cuda_graph_engine_rule(
                Some(3),
                Some(&[BehaviorNote::SupportsCudaGraphNativeApi])
            )
            .is_ok()
        );
        let e = native_cuda_graph_engine_rule(Some(3), Some(&[BehaviorNote::RuntimeCompilation]))
            .expect_err("no note");
        assert!(e.to_string().contains("engine 3"), "{e}");
    }
}
