//! Finalizing an execution plan through the finalize memo (the host test
//! tier's aid, [`crate::graph::finalize_memo`], which keeps the entries):
//! from the memo when it holds this input, else by cuDNN, storing the
//! result once it reloads.

use std::sync::Arc;

use super::Plan;
use crate::error::{Error, Result};
use crate::graph::backend::{Descriptor, attr, kind};
use crate::graph::finalize_memo as entries;
use crate::graph::graph::IoSignature;
use crate::graph::target::{Target, read_json};

/// Finalize the execution plan `p` (its engine configuration and
/// `target`'s device properties set) for a graph with tensor list `io`:
/// from the memo when it holds this input, else by cuDNN, storing the
/// result.
///
/// Both ways go through the crate's plan loader ([`Plan::check_json`], then
/// cuDNN's load): an entry is loaded as a plan file is, and a plan cuDNN
/// just finalized is stored only when its JSON passes the checks and loads
/// back with the compiled plan's workspace and JSON; else it is counted
/// (the known score-subgraph gap apart, everything else as refused: a plan
/// this crate builds and cannot reload, which the test tier reports).
pub(super) fn finalize(
    mut p: Descriptor<kind::ExecutionPlan>,
    target: &Target,
    io: &Arc<IoSignature>,
) -> Result<Descriptor<kind::ExecutionPlan>> {
    let Some(path) = entries::entry_path(&p) else {
        p.finalize()?;
        return Ok(p);
    };
    if let Some(json) = entries::read_entry(&path) {
        let loaded = Plan::check_json(&json, target, io).and_then(|checked| {
            // SAFETY: `enable_finalize_memo`'s contract: the folder holds
            // only what this function stored, and the entry matched its
            // checksum, so this is cuDNN's own JSON of a plan the loaded
            // cuDNN finalized (the folder is this environment's) from the
            // same input as `p` (the file is named after its transcript,
            // which covers the device properties and every tensor), and
            // reloaded to the same JSON and workspace when it was stored.
            unsafe { Plan::load_checked(&checked) }
        });
        match loaded {
            Ok(q) => {
                entries::loaded();
                return Ok(q);
            }
            Err(e) => entries::bad(&path, &e.to_string()),
        }
    }
    p.finalize()?;
    let json = match read_json(&p) {
        Ok(json) => json,
        Err(e) => {
            let why = format!("{}: serializing: {e}", target.fingerprint());
            entries::refused(&path, None, &why);
            return Ok(p);
        }
    };
    // The loader's checks, then cuDNN's own load of the JSON, which must
    // give the compiled plan's workspace and JSON: only then is it stored.
    let reloaded = Plan::check_json(&json, target, io).and_then(|checked| {
        // SAFETY: `json` is cuDNN's own JSON, read just above, of the plan
        // `p` the loaded cuDNN finalized for this graph (`io`) and target.
        let q = unsafe { Plan::load_checked(&checked) }?;
        let (a, b) = (
            p.get_one(attr::EXECUTION_PLAN_WORKSPACE_SIZE)?,
            q.get_one(attr::EXECUTION_PLAN_WORKSPACE_SIZE)?,
        );
        if a != b {
            return Err(Error::mismatch(
                "the reloaded plan's workspace (the compiled plan's, the reloaded one's)",
                a,
                b,
            ));
        }
        if read_json(&q)? != json {
            return Err(Error::invalid(
                "the reloaded plan's JSON",
                "must be the JSON it was loaded from",
                "another",
            ));
        }
        Ok(())
    });
    match reloaded {
        Ok(()) => entries::store(&path, &json),
        // The loader's known refusal (cuDNN's JSON of an SDPA backward
        // lacks its score subgraph, and nothing else is wrong).
        Err(_) if crate::graph::plan_json::score_subgraph_gap(&json, io, target) => entries::gap(),
        Err(e) => {
            let why = format!(
                "{}: {e} (the graph's tensors {:?}, scalars {:?}, scratch {:?})",
                target.fingerprint(),
                io.tensors
                    .iter()
                    .map(|t| (t.uid, t.name.as_str()))
                    .collect::<Vec<_>>(),
                io.scalars.iter().map(|s| s.0).collect::<Vec<_>>(),
                io.scratch.iter().map(|s| s.0).collect::<Vec<_>>(),
            );
            entries::refused(&path, Some(&json), &why);
        }
    }
    Ok(p)
}
