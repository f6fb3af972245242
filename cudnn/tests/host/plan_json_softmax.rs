//! Host tier (no GPU, the real cuDNN >= 9.21): the plan-JSON allow-list
//! knows the SOFTMAX operation in the form NVIDIA's frontend writes for SDPA
//! forward training (the statistics written through a SOFTMAX sub-descriptor
//! of the SDPA operation). The crate's own native SDPA forward plan,
//! rewritten into that form, loads through `Plan::from_cudnn_json_unverified`
//! (cuDNN finalizes it), and every broken SOFTMAX field is a typed error
//! before cuDNN sees it.
use crate::support;
use crate::support::graph_plans;

use std::sync::Arc;

use cudnn::Error;
use cudnn::graph::*;
use graph_plans::*;
use serde_json::{Value, json};
use support::*;

fn edit(json: &str, path: &str, f: impl FnOnce(&mut Value)) -> Result<String, String> {
    let mut v: Value = serde_json::from_str(json).map_err(|e| e.to_string())?;
    f(v.pointer_mut(path).ok_or(format!("no {path}"))?);
    Ok(v.to_string())
}

fn softmax_sub_descriptor() -> TestResult {
    let t = Target::preset("h200")?;
    let (p, _) = Plan::build(&sdpa(false)?.build()?, &t, &Policy::default())?;
    let json = p.cudnn_json()?;
    let Some(form) = softmax_form(&json) else {
        return Err("the SDPA forward plan sets no statistics on a native SDPA node".into());
    };
    let io = Arc::new(p.io().clone());
    // The frontend's form loads, into the same engine and workspace.
    // SAFETY: outside the letter of the contract, on purpose: `form` is this plan's
    // JSON with its softmax statistics rewritten into the frontend's sub-descriptor
    // form (the same tensor, node and compiled kernels; the frontend writes this
    // form for the same graph), with this plan's own IoSignature; the test checks
    // that cuDNN takes that form, and no plan is executed (host test).
    let back = unsafe { Plan::from_cudnn_json_unverified(&form, &t, io.clone()) }?;
    ensure!(
        back.workspace_size() == p.workspace_size(),
        "workspace {} vs {}",
        back.workspace_size(),
        p.workspace_size()
    );
    let node = "/operationGraph/nodes/0";
    let v: Value = serde_json::from_str(&form)?;
    ensure!(
        v.pointer(&format!("{node}/softmax/statsDesc")).is_some(),
        "the rewrite put the SOFTMAX sub-descriptor elsewhere"
    );
    let stats = v
        .pointer(&format!("{node}/softmax/statsDesc"))
        .cloned()
        .ok_or("no statsDesc")?;
    let sub = format!("{node}/softmax");
    #[allow(clippy::type_complexity)]
    let cases: Vec<(&str, String, Box<dyn FnOnce(&mut Value)>, &str)> = vec![
        (
            "statsDesc names no tensor",
            sub.clone(),
            Box::new(|s| s["statsDesc"] = json!("987654")),
            "must name a tensor",
        ),
        (
            "statsDesc a number",
            sub.clone(),
            Box::new(|s| s["statsDesc"] = json!(6)),
            "statsDesc",
        ),
        (
            "unknown key",
            sub.clone(),
            Box::new(|s| s["axis"] = json!(3)),
            "is not a key",
        ),
        (
            "another operation",
            sub.clone(),
            Box::new(|s| s["operation"] = json!("CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR")),
            "SOFTMAX",
        ),
        (
            "no operation",
            sub.clone(),
            Box::new(|s| {
                if let Some(m) = s.as_object_mut() {
                    m.remove("operation");
                }
            }),
            "SOFTMAX",
        ),
        (
            "not an object",
            sub.clone(),
            Box::new(|s| *s = json!("softmax")),
            "softmax",
        ),
        (
            "nested twice",
            sub.clone(),
            Box::new(|s| {
                let inner = s.clone();
                s["softmax"] = inner;
            }),
            "is not a key",
        ),
        (
            "a subgraph in it",
            sub.clone(),
            Box::new(|s| s["subgraph"] = json!({})),
            "subgraph",
        ),
        (
            "stats set both ways",
            node.to_string(),
            Box::new(move |n| n["stats"] = stats),
            "both",
        ),
    ];
    let n = cases.len();
    for (label, path, f, want) in cases {
        let bad = edit(&form, &path, f)?;
        // SAFETY: outside the contract on purpose: `bad` is an edit (the statistics sub-
        // descriptor changed) that the crate's checks must refuse before cuDNN sees it; the
        // typed refusal is asserted below, and no plan is executed.
        match unsafe { Plan::from_cudnn_json_unverified(&bad, &t, io.clone()) } {
            Err(e @ (Error::InvalidArgument { .. } | Error::Unsupported { .. })) => {
                let s = e.to_string();
                eprintln!("  {label}: {s}");
                ensure!(s.contains(want), "{label}: {s}");
            }
            other => return Err(format!("{label}: {other:?}").into()),
        }
    }
    // The statistics are written by the sub-descriptor: the tensor list must
    // call them an output.
    let mut flipped = p.io().clone();
    let st = flipped
        .tensors
        .iter_mut()
        .find(|x| x.is_output && x.name != "o")
        .ok_or("no stats output")?;
    st.is_output = false;
    // SAFETY: outside the contract on purpose: the tensor list calls the statistics
    // an input; the crate's checks must refuse the role before cuDNN sees the JSON
    // (the typed refusal is asserted below), and no plan is executed.
    match unsafe { Plan::from_cudnn_json_unverified(&form, &t, Arc::new(flipped)) } {
        Err(Error::Mismatch { what, .. }) if what.contains("role") => {
            eprintln!("  stats made an input: {what}")
        }
        other => return Err(format!("stats role: {other:?}").into()),
    }
    eprintln!("  SOFTMAX form loads; {n} broken forms and a role flip refused");
    Ok(())
}

pub fn main() {
    let name = "plan_json_softmax_sub_descriptor_loads_and_is_checked";
    let version = cudnn::sys::cudnn::load()
        .ok()
        .and_then(|l| l.info().version);
    if let Some(v) = version.filter(|v| (v.major, v.minor) < (9, 21)) {
        eprintln!(
            "skipped: host::{name}: the SOFTMAX sub-descriptor needs cuDNN >= 9.21 (this is {}.{})",
            v.major, v.minor
        );
        run(vec![
            crate::support::trial(format!("host::{name}"), softmax_sub_descriptor)
                .with_ignored_flag(true),
        ]);
        return;
    }
    run(vec![host(name, softmax_sub_descriptor)]);
}
