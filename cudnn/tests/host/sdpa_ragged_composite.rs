//! Host tier for the ragged (packed THD) composite attention backward: the
//! plan cuDNN builds for it (through the driver stub, H200 preset) reads K
//! and V at their ragged offsets in every view of them. The truth is
//! NVIDIA's frontend 1.32 (`CompositeSDPABackwardNode`): its `reshape_k`
//! (the K that dS·K reads) carries K's ragged offset, as do the Kᵀ and Vᵀ
//! its matmuls read. Checked on cuDNN's own plan JSON, by tensor UID.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use crate::support;
use crate::support::sdpa_plans::bwd_graph as bwd;
use cudnn::Error;
use cudnn::graph::*;
use serde_json::Value;
use std::collections::HashMap;
use support::*;

/// The graph's tensor list: uid -> its ragged offsets' uid.
fn offsets_by_uid(json: &Value) -> Result<HashMap<String, Option<String>>, String> {
    let list = json
        .pointer("/operationGraph/tensors")
        .and_then(|t| t.as_array())
        .ok_or("the graph's tensor list")?;
    Ok(list
        .iter()
        .filter_map(|t| {
            let uid = t.get("name")?.as_str()?.to_string();
            let off = t
                .get("isRagged")
                .and_then(|r| r.get(0))
                .and_then(|o| o.get("name"))
                .and_then(|n| n.as_str())
                .map(str::to_string);
            Some((uid, off))
        })
        .collect())
}

/// The graph's reshape nodes: (X, Y) uids.
fn reshapes(json: &Value) -> Vec<(String, String)> {
    let nodes = json
        .pointer("/operationGraph/nodes")
        .and_then(|t| t.as_array())
        .cloned()
        .unwrap_or_default();
    nodes
        .iter()
        .filter(|n| {
            n.get("operation").and_then(|o| o.as_str())
                == Some("CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR")
        })
        .filter_map(|n| {
            Some((
                n.get("X")?.as_str()?.to_string(),
                n.get("Y")?.as_str()?.to_string(),
            ))
        })
        .collect()
}

/// The ragged composite backward (plain and GQA): every K and V tensor
/// object carries its own ragged offsets, and so does every reshape of
/// them (the K that dS·K reads: before the fix it carried none, so dQ read
/// batch b > 0's keys at padded positions).
fn composite_bwd_views_carry_offsets() -> TestResult {
    let mut checked = 0;
    for (name, cfg) in [
        ("mha", SdpaConfig::new(3, 4, 128, 64, DType::BF16).ragged()),
        (
            "gqa",
            SdpaConfig::new(3, 4, 128, 64, DType::BF16).ragged().gqa(2),
        ),
    ] {
        let cfg = cfg.training(true).implementation(SdpaImpl::Composite);
        let g = match bwd(&cfg) {
            Ok(g) => g,
            Err(e @ (Error::Unsupported { .. } | Error::InvalidArgument { .. })) => {
                eprintln!("skipped: {name}: this cuDNN does not build it (typed): {e}");
                continue;
            }
            Err(e) => return Err(format!("{name}: {e:?}").into()),
        };
        let og = g.build()?;
        let io = og.io();
        let uid = |n: &str| -> Result<String, String> {
            io.tensors
                .iter()
                .find(|t| t.name == n || t.name.ends_with(&format!(".{n}")))
                .map(|t| t.uid.to_string())
                .ok_or_else(|| format!("{name}: no tensor `{n}` in {:?}", io.tensors))
        };
        let (k, v) = (uid("k")?, uid("v")?);
        let (ok, ov) = (uid("ragged_offset_k")?, uid("ragged_offset_v")?);
        let target = Target::preset("h200")?;
        let (plan, _) = Plan::build(&og, &target, &Policy::default())?;
        let json: Value = serde_json::from_str(&plan.cudnn_json()?)?;
        let offs = offsets_by_uid(&json)?;
        for (what, t, want) in [("K", &k, &ok), ("V", &v, &ov)] {
            let got = offs.get(t.as_str());
            ensure!(
                got == Some(&Some(want.clone())),
                "{name}: {what} (uid {t}) has ragged offsets {got:?}, want {want}"
            );
        }
        // A reshape of K or V (a view of the same memory) must read it at
        // the same offsets.
        let mut k_reshapes = 0;
        for (x, y) in reshapes(&json) {
            for (what, t, want) in [("K", &k, &ok), ("V", &v, &ov)] {
                if &x == t {
                    k_reshapes += usize::from(what == "K");
                    let got = offs.get(y.as_str());
                    ensure!(
                        got == Some(&Some(want.clone())),
                        "{name}: the reshape of {what} (uid {t}) into uid {y} has ragged offsets {got:?}, want {want}"
                    );
                }
            }
        }
        ensure!(
            k_reshapes >= 1,
            "{name}: no reshape of K (the K that dS·K reads)"
        );
        eprintln!("{name}: K, V and {k_reshapes} reshape(s) of K at their ragged offsets");
        checked += 1;
    }
    let v = cudnn::sys::cudnn::load()
        .ok()
        .and_then(|a| a.info().version)
        .map(|v| (v.major, v.minor))
        .unwrap_or((0, 0));
    // The ragged backward plans from cuDNN 9.6 (GQA included).
    ensure!(
        checked == 2 || v < (9, 6),
        "only {checked} of 2 cases checked on cuDNN {v:?}"
    );
    Ok(())
}

pub fn main() {
    run(vec![host_planning(
        "sdpa_ragged_composite_bwd_views_carry_offsets",
        composite_bwd_views_carry_offsets,
    )])
}
