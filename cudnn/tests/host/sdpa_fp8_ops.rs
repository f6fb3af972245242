//! How the FP8 attention composites are built (issue 34): from cuDNN 9.21
//! the forward's causal mask and softmax are cuDNN's diagonal band mask and
//! softmax operations, and the backward's causal mask the band operation,
//! as NVIDIA's frontend builds them there (the conformance tier compares
//! the nodes with the frontend's); before 9.21 the `GEN_INDEX` compare and
//! the reductions. Read from the plan JSON cuDNN writes for an H200.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use crate::support;
use cudnn::graph::*;
use serde_json::Value;

use support::fp8_graphs::{sdpa_bwd_graph, sdpa_fwd_cfg, sdpa_fwd_graph};
use support::plan_nodes::{field, find_ops, pointwise, top_left_causal};
use support::*;

fn loaded() -> Result<(u32, u32, u32), cudnn::Error> {
    let v = cudnn::dnn::Handle::library_version()?;
    Ok((v.major, v.minor, v.patch))
}

/// The plan cuDNN writes for `g` on an H200, parsed, and the graph's own
/// tensors' uids by name.
fn plan_json(g: &Graph) -> Result<(Value, Vec<(String, String)>), libtest_mimic::Failed> {
    let (plan, _) = Plan::build(&g.build()?, &Target::preset("h200")?, &Policy::default())?;
    let v: Value = serde_json::from_str(&plan.cudnn_json()?)?;
    let uids = plan
        .io()
        .tensors
        .iter()
        .map(|t| (t.name.clone(), t.uid.to_string()))
        .collect();
    Ok((v, uids))
}

fn uid_of(uids: &[(String, String)], name: &str) -> Option<String> {
    uids.iter().find(|(n, _)| n == name).map(|(_, u)| u.clone())
}

fn forward_operations() -> TestResult {
    let v = loaded()?;
    for (causal, training) in [(false, false), (true, true), (true, false), (false, true)] {
        let cfg = sdpa_fwd_cfg(128, causal, training, DType::Fp8E4M3);
        let name = support::fp8_graphs::sdpa_tag(&cfg);
        let (j, uids) = plan_json(&sdpa_fwd_graph(&cfg)?)?;
        let softmax = find_ops(&j, "CUDNN_BACKEND_OPERATION_SOFTMAX_DESCRIPTOR");
        let reductions = find_ops(&j, "CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR");
        eprintln!(
            "{name}: cuDNN {v:?}: {} SOFTMAX, {} REDUCTION",
            softmax.len(),
            reductions.len()
        );
        let band = if causal {
            top_left_causal(&j, v, &name)?
        } else {
            let band = find_ops(&j, "CUDNN_BACKEND_OPERATION_DIAGONAL_BAND_MASK_DESCRIPTOR");
            let gen_index = pointwise(&j, "CUDNN_POINTWISE_GEN_INDEX");
            ensure!(
                band.is_empty() && gen_index.is_empty(),
                "{name}: no mask asked, {} band / {} GEN_INDEX nodes",
                band.len(),
                gen_index.len()
            );
            None
        };
        if v < (9, 21, 0) {
            ensure!(
                softmax.is_empty() && reductions.len() == 4,
                "{name}: before 9.21 the decomposed softmax (max, sum, two amax)"
            );
            continue;
        }
        // One softmax; the only reductions left are the two amax outputs.
        let [sm] = softmax.as_slice() else {
            return Err(format!("{name}: {} SOFTMAX nodes", softmax.len()).into());
        };
        ensure!(
            reductions.len() == 2
                && reductions.iter().all(|r| {
                    r.get("reductionOp").and_then(Value::as_str) == Some("CUDNN_REDUCE_TENSOR_AMAX")
                }),
            "{name}: reductions besides the two amax: {reductions:?}"
        );
        // The statistics are the graph's `stats` output in training, unset
        // otherwise.
        let stats = uid_of(&uids, "stats");
        ensure!(
            stats.is_some() == training && field(sm, "statsDesc") == stats,
            "{name}: SOFTMAX statsDesc {:?}, the graph's stats {stats:?}",
            field(sm, "statsDesc")
        );
        for k in ["maxDesc", "sumExpDesc", "sinkDesc"] {
            ensure!(sm.get(k).is_none(), "{name}: SOFTMAX sets {k}");
        }
        // P feeds amax_s; the scores come from the band when causal.
        let p = field(sm, "Y").ok_or_else(|| format!("{name}: SOFTMAX without Y"))?;
        let amax_s = uid_of(&uids, "amax_s");
        ensure!(
            reductions
                .iter()
                .any(|r| field(r, "X").as_ref() == Some(&p) && field(r, "Y") == amax_s),
            "{name}: amax_s ({amax_s:?}) is not the amax of P ({p})"
        );
        if let Some(b) = band {
            ensure!(
                field(b, "Y") == field(sm, "X"),
                "{name}: the band's Y {:?} is not the softmax's X {:?}",
                field(b, "Y"),
                field(sm, "X")
            );
        }
    }
    Ok(())
}

fn backward_causal_mask() -> TestResult {
    let v = loaded()?;
    for causal in [false, true] {
        let cfg = sdpa_fwd_cfg(128, causal, true, DType::Fp8E4M3);
        let what = format!("FP8 backward, causal {causal}");
        let (j, uids) = plan_json(&sdpa_bwd_graph(&cfg, DType::Fp8E5M2)?)?;
        if causal {
            // From 9.21 the band masks the scores before `- stats` (as the
            // frontend's FP8 backward orders it).
            if let Some(b) = top_left_causal(&j, v, &what)? {
                let stats = uid_of(&uids, "stats").ok_or("the backward binds no stats")?;
                let y = field(b, "Y");
                ensure!(
                    pointwise(&j, "CUDNN_POINTWISE_SUB")
                        .iter()
                        .any(|n| field(n, "X") == y && field(n, "B").as_ref() == Some(&stats)),
                    "{what}: the band's Y {y:?} is not the scores `- stats` takes (stats uid {stats})"
                );
            }
        } else {
            let band = find_ops(&j, "CUDNN_BACKEND_OPERATION_DIAGONAL_BAND_MASK_DESCRIPTOR");
            let gen_index = pointwise(&j, "CUDNN_POINTWISE_GEN_INDEX");
            ensure!(
                band.is_empty() && gen_index.is_empty(),
                "{what}: {} band / {} GEN_INDEX nodes",
                band.len(),
                gen_index.len()
            );
        }
        // The recomputed softmax stays decomposed (as the frontend's
        // backward builds it).
        ensure!(
            find_ops(&j, "CUDNN_BACKEND_OPERATION_SOFTMAX_DESCRIPTOR").is_empty(),
            "{what}: a SOFTMAX node"
        );
    }
    Ok(())
}

pub fn main() {
    run(vec![
        host_planning("sdpa_fp8_forward_operations", forward_operations),
        host_planning("sdpa_fp8_backward_causal_mask", backward_causal_mask),
    ])
}
