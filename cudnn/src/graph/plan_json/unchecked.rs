//! Setting a plan JSON through the typed backend API
//! ([`Descriptor::set_plan_json_unchecked`]): the shape check of this
//! module runs first. It lives here, beside the check, so the backend layer
//! does not import the plan JSON checker (which imports the backend).

use super::super::backend::{Descriptor, Value, attr, kind, value};
use super::check_shape;
use crate::error::{Error, Result};

/// A plan JSON set through the typed API is held to the shape cuDNN writes
/// before cuDNN parses it (its parser crashes the process on some malformed
/// plans): NUL-terminated UTF-8 that passes the plan JSON allow-list.
fn check_plan_json_bytes(label: &str, bytes: &[u8]) -> Result<()> {
    let text = bytes
        .split_last()
        .filter(|(last, _)| **last == 0)
        .map(|(_, text)| text)
        .ok_or_else(|| Error::invalid(label, "must end with a NUL byte", bytes.len()))?;
    let text =
        std::str::from_utf8(text).map_err(|e| Error::invalid(label, "must be UTF-8 JSON", e))?;
    check_shape(text)
}

impl Descriptor<kind::ExecutionPlan> {
    /// Set the plan's JSON (`CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION`,
    /// NUL-terminated), checking only its shape (sizes, counts, nesting):
    /// [`Plan::from_cudnn_json`](crate::graph::Plan::from_cudnn_json) is the
    /// checked way to load a plan.
    ///
    /// # Safety
    /// The JSON is cuDNN's own, of a plan made by the loaded cuDNN and
    /// unchanged since: cuDNN crashes at finalize on a plan JSON whose graph
    /// was edited (a node reading a tensor nothing writes), and a plan whose
    /// compiled kernels (`/engine/payload`) came from another graph reads and
    /// writes past the buffers bound when it runs.
    ///
    /// # Errors
    /// Not NUL-terminated, not UTF-8, malformed or oversized JSON; already
    /// finalized; cuDNN's refusal.
    #[doc(alias = "CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION")]
    pub unsafe fn set_plan_json_unchecked(&mut self, json: &[u8]) -> Result<()> {
        let a = attr::EXECUTION_PLAN_JSON_REPRESENTATION;
        check_plan_json_bytes(a.label(), json)?;
        // SAFETY: `json` is `json.len()` initialized bytes (CUDNN_TYPE_CHAR);
        // what cuDNN does with their meaning is the caller's contract.
        unsafe {
            self.set_raw(
                a.raw(),
                a.label(),
                <value::Char as Value>::TYPE,
                json.len(),
                json.as_ptr().cast(),
            )
        }
    }

    /// Set a plan JSON the caller checked whole already
    /// ([`check_summary`](super::check_summary) against its tensor list,
    /// which includes everything
    /// [`set_plan_json_unchecked`](Self::set_plan_json_unchecked) checks):
    /// the JSON is not parsed a second time. Only the trailing NUL is
    /// checked here.
    ///
    /// # Safety
    /// As [`set_plan_json_unchecked`](Self::set_plan_json_unchecked), and
    /// `json` (without its NUL) passed `plan_json::check_summary`.
    pub(crate) unsafe fn set_plan_json_prechecked(&mut self, json: &[u8]) -> Result<()> {
        let a = attr::EXECUTION_PLAN_JSON_REPRESENTATION;
        let only_trailing_nul = json
            .split_last()
            .is_some_and(|(last, text)| *last == 0 && !text.contains(&0));
        if !only_trailing_nul {
            return Err(Error::invalid(
                a.label(),
                "must end with its only NUL byte",
                json.len(),
            ));
        }
        // SAFETY: `json` is `json.len()` initialized bytes (CUDNN_TYPE_CHAR);
        // what cuDNN does with their meaning is the caller's contract.
        unsafe {
            self.set_raw(
                a.raw(),
                a.label(),
                <value::Char as Value>::TYPE,
                json.len(),
                json.as_ptr().cast(),
            )
        }
    }
}
