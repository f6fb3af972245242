//! Loading a plan from cuDNN's JSON: the checks against the tensor list
//! first ([`Plan::check_json`]), then cuDNN's own load.

use std::sync::Arc;

use super::{CheckedJson, Plan};
use crate::error::{Error, Result};
use crate::graph::backend::{Descriptor, attr, kind};
use crate::graph::graph::IoSignature;
use crate::graph::plan_file::loaded_cudnn_version;
use crate::graph::plan_json::Payload;
use crate::graph::target::Target;

impl Plan {
    /// Rebuild a plan from cuDNN's JSON for `target`, with the IO signature
    /// it binds (from the graph it was built from, or a plan file).
    ///
    /// Before cuDNN sees it, the JSON is checked (see
    /// [`check_plan_json`](crate::graph::check_plan_json)): its shape against what
    /// cuDNN writes (counts within cuDNN's limits, dims >= 1, strings where
    /// cuDNN expects them), made by the loaded cuDNN, for `target`'s
    /// architecture, and every non-virtual tensor, scalar and scratch tensor
    /// in agreement with `io` (uid, dims, strides, data type, by-value), with
    /// every tensor a node writes an output and every tensor nodes only read
    /// an input.
    ///
    /// A runtime-compiled plan (its JSON carries the compiled kernels) is
    /// refused: its code cannot be checked against `io`, and cuDNN cannot
    /// rebuild the plan without it. Rebuild such a plan from its graph, or
    /// load a file this program signed with [`deserialize`](Self::deserialize)
    /// ([`Trust::SignedBy`](crate::graph::Trust::SignedBy)); [`from_cudnn_json_unverified`](Self::from_cudnn_json_unverified)
    /// is the `unsafe` way for JSON from elsewhere.
    ///
    /// # Errors
    /// A disagreement (typed, naming the uid, the field and both values), a
    /// malformed JSON, a plan made by another cuDNN, or cuDNN's refusal; made
    /// for another architecture, or carrying compiled code: a typed
    /// `Unsupported`.
    pub fn from_cudnn_json(json: &str, target: &Target, io: Arc<IoSignature>) -> Result<Self> {
        Self::from_json(json, target, io, Payload::Refuse)
    }

    /// [`from_cudnn_json`](Self::from_cudnn_json) that also loads compiled
    /// code: a runtime-compiled plan's kernel binaries and parameter blocks
    /// are passed to cuDNN as they are (their structure and tensor
    /// references checked, and everything else as
    /// [`from_cudnn_json`](Self::from_cudnn_json) checks it). A plan without
    /// compiled code is loaded as [`from_cudnn_json`](Self::from_cudnn_json)
    /// loads it.
    ///
    /// A plan JSON with compiled code is executable code: cuDNN loads its
    /// kernels and runs them on the GPU with the buffers bound to the plan,
    /// and no check can tell what a kernel does (a payload taken from another
    /// graph's plan, with this graph's tensor list, reads and writes past the
    /// bound buffers). For files this program wrote, use
    /// [`serialize_signed`](Self::serialize_signed) and
    /// [`deserialize`](Self::deserialize) with [`Trust::SignedBy`](crate::graph::Trust::SignedBy), which
    /// need no `unsafe`.
    ///
    /// # Safety
    /// If `json` carries compiled code, it must be cuDNN's JSON of a plan
    /// built (by this crate or NVIDIA's frontend, with the loaded cuDNN) for
    /// a graph whose IO signature is exactly `io`: the IoSignature of the
    /// graph the plan was built from, every field of it but the tensors'
    /// names (tensors with their uids, shapes, strides, types and roles;
    /// by-value scalars with their values; scratch tensors with their sizes;
    /// ragged-offset marks), and must not have been changed since: otherwise
    /// executing the plan can read and write memory outside the bound
    /// buffers.
    ///
    /// # Errors
    /// As [`from_cudnn_json`](Self::from_cudnn_json), but for compiled code.
    pub unsafe fn from_cudnn_json_unverified(
        json: &str,
        target: &Target,
        io: Arc<IoSignature>,
    ) -> Result<Self> {
        Self::from_json(json, target, io, Payload::Keep)
    }

    /// The checks of [`from_cudnn_json`](Self::from_cudnn_json) before
    /// cuDNN sees the JSON (the payload rule aside), kept with what they
    /// checked: [`from_checked_json`](Self::from_checked_json) loads exactly
    /// that JSON, for that target and tensor list, without checking again.
    pub(in crate::graph) fn check_json<'a>(
        json: &'a str,
        target: &'a Target,
        io: &'a Arc<IoSignature>,
    ) -> Result<CheckedJson<'a>> {
        crate::graph::require_graph_support()?;
        let summary = crate::graph::plan_json::check_summary(
            json,
            io,
            target,
            Some(loaded_cudnn_version()?),
        )?;
        Ok(CheckedJson {
            json,
            target,
            io,
            summary,
        })
    }

    pub(in crate::graph) fn from_json(
        json: &str,
        target: &Target,
        io: Arc<IoSignature>,
        payload: Payload,
    ) -> Result<Self> {
        Self::from_checked_json(Self::check_json(json, target, &io)?, payload)
    }

    /// Load a JSON [`check_json`](Self::check_json) accepted (the JSON,
    /// target and tensor list are the ones it checked: the token borrows
    /// them), so a loader that looked at the summary first (a plan cache
    /// skipping compiled plans it may not load) does not check twice.
    pub(in crate::graph) fn from_checked_json(
        checked: CheckedJson<'_>,
        payload: Payload,
    ) -> Result<Self> {
        let hazard = crate::runtime::Hazard::AlgorithmSearch;
        crate::runtime::forbid_in_capture_scope("loading a plan", hazard)?;
        if checked.summary.runtime_compiled && payload == Payload::Refuse {
            return Err(crate::graph::plan_json::compiled_code_refused());
        }
        // SAFETY: compiled code gets here only with `Payload::Keep`, which
        // callers pass for a file whose tag verified under the program's key
        // or from an `unsafe fn` whose contract vouches for the kernels.
        let p = unsafe { Self::load_checked(&checked) }?;
        let CheckedJson {
            target,
            io,
            summary,
            ..
        } = checked;
        let io = io.clone();
        Plan::new(
            p,
            io,
            target,
            None,
            summary.runtime_compiled,
            &summary.guarded,
        )
    }

    /// cuDNN's plan from a JSON [`check_json`](Self::check_json) accepted
    /// (for the target and tensor list the token borrows).
    ///
    /// # Safety
    /// Any compiled code in the JSON is trusted: a tag that verified under
    /// the program's key, or a caller's `unsafe` contract.
    pub(in crate::graph) unsafe fn load_checked(
        checked: &CheckedJson<'_>,
    ) -> Result<Descriptor<kind::ExecutionPlan>> {
        let (json, target) = (checked.json, checked.target);
        crate::graph::driver::ready()?;
        let props = target.properties().descriptor()?;
        let mut p = Descriptor::<kind::ExecutionPlan>::new()?;
        // Device properties first: a plan loaded without them crashes cuDNN.
        p.set_descriptors(attr::EXECUTION_PLAN_DEVICEPROP, &[&*props])?;
        // One allocation: room for the NUL cuDNN reads up to.
        let mut bytes = Vec::with_capacity(json.len().saturating_add(1));
        bytes.extend_from_slice(json.as_bytes());
        bytes.push(0);
        // SAFETY: `check_json` checked the JSON against the plan's tensor
        // list (shape, tensors, data flow: what cuDNN would crash on; a
        // superset of the shape check `set_plan_json_unchecked` repeats, so
        // it is not run twice), and compiled code in it is trusted: the
        // caller's contract.
        unsafe { p.set_plan_json_prechecked(&bytes) }?;
        p.finalize().map_err(|e| {
            if e.cudnn_status()
                == Some(crate::sys::cudnn::cudnnStatus_t::CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH)
            {
                Error::Unsupported {
                    what: format!(
                        "this plan was compiled for another GPU architecture, not {} ({e})",
                        target.fingerprint()
                    ),
                    needs: Some("a plan built for this target".to_string()),
                }
            } else {
                e.with_context("loading a plan from JSON")
            }
        })?;
        Ok(p)
    }
}
