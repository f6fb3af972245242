//! The attention forward's mode is in its type (issue 33 item 5):
//! `Graph::sdpa_forward_training` gives the softmax statistics as a
//! `Tensor`, `Graph::sdpa_forward` gives none and refuses a training
//! config. Checked against what cuDNN plans: the plan JSON cuDNN writes for
//! an H200 (no device) has the statistics as a non-virtual f32 `[B, H, S_q,
//! 1]` tensor exactly in training (one non-virtual tensor more than the
//! inference plan of the same config, over random configs too).
//! Host tier: needs the real cuDNN, no device.

use crate::support;

use cudnn::Error;
use cudnn::graph::{
    DType, Fp8SdpaConfig, Fp8SdpaForward, Fp8SdpaTrainingForward, Graph, Plan, Policy, SdpaConfig,
    SdpaForward, SdpaImpl, SdpaTrainingForward, Target,
};
use serde_json::Value;
use support::*;

pub fn main() {
    run(vec![
        host_planning("sdpa_training_stats_in_cudnns_plan", training_stats),
        host_planning("sdpa_inference_has_no_stats", inference_no_stats),
        host_planning("sdpa_forward_refuses_a_training_config", refuses_training),
        host_planning("fuzz_sdpa_modes", fuzz_modes),
        host_planning("sdpa_fp8_modes_in_cudnns_plan", fp8_modes),
    ]);
}

fn cfg() -> SdpaConfig {
    SdpaConfig::new(2, 4, 128, 64, DType::BF16).causal(true)
}

fn inputs(g: &mut Graph, c: &SdpaConfig) -> cudnn::Result<[cudnn::graph::Tensor; 3]> {
    Ok([
        g.input("q", c.q_spec()?)?,
        g.input("k", c.k_spec()?)?,
        g.input("v", c.v_spec()?)?,
    ])
}

fn plan(g: &Graph) -> cudnn::Result<Plan> {
    Ok(Plan::build(&g.build()?, &Target::preset("h200")?, &Policy::default())?.0)
}

/// A tensor of cuDNN's plan JSON: `(uid, dataType, dims)`.
type JsonTensor = (i64, String, Vec<i64>);

/// The non-virtual tensors of cuDNN's plan JSON.
fn cudnn_io(p: &Plan) -> Result<Vec<JsonTensor>, Box<dyn std::error::Error>> {
    let v: Value = serde_json::from_str(&p.cudnn_json()?)?;
    let ts = v
        .pointer("/operationGraph/tensors")
        .and_then(Value::as_array)
        .ok_or("cuDNN's plan JSON has no operationGraph.tensors")?;
    let mut out = Vec::new();
    for t in ts {
        if t["isVirtual"].as_bool() == Some(true) {
            continue;
        }
        let uid = t["name"]
            .as_str()
            .and_then(|s| s.parse::<i64>().ok())
            .ok_or("a tensor without a uid name")?;
        let dims = t["dim"]
            .as_array()
            .ok_or("a tensor without dims")?
            .iter()
            .filter_map(Value::as_i64)
            .collect();
        out.push((uid, t["dataType"].as_str().unwrap_or("").to_string(), dims));
    }
    Ok(out)
}

fn training_stats() -> TestResult {
    for imp in [SdpaImpl::Auto, SdpaImpl::Composite] {
        let c = cfg().implementation(imp);
        let mut g = Graph::new();
        let [q, k, v] = inputs(&mut g, &c)?;
        // The config's own flag is not needed: the call is the mode.
        let f: SdpaTrainingForward = g.sdpa_forward_training(q, k, v, &c)?;
        g.rename(f.o, "o")?;
        g.rename(f.stats, "stats")?;
        let p = plan(&g)?;
        let uid = p
            .io()
            .tensors
            .iter()
            .find(|t| t.name == "stats")
            .map(|t| t.uid)
            .ok_or("no `stats` in the plan's signature")?;
        let io = cudnn_io(&p)?;
        let (_, dt, dims) = io
            .iter()
            .find(|t| t.0 == uid)
            .ok_or(format!("{imp:?}: cuDNN's plan has no tensor {uid} (stats)"))?;
        ensure!(
            dt == "CUDNN_DATA_FLOAT" && dims == &[2, 4, 128, 1],
            "{imp:?}: cuDNN's stats tensor is {dt} {dims:?}, want f32 [2, 4, 128, 1]"
        );
    }
    Ok(())
}

fn inference_no_stats() -> TestResult {
    for imp in [SdpaImpl::Auto, SdpaImpl::Composite] {
        let c = cfg().implementation(imp);
        let mut g = Graph::new();
        let [q, k, v] = inputs(&mut g, &c)?;
        let f: SdpaForward = g.sdpa_forward(q, k, v, &c)?;
        let () = f.stats;
        g.rename(f.o, "o")?;
        let p = plan(&g)?;
        let io = cudnn_io(&p)?;
        ensure!(
            !io.iter()
                .any(|(_, dt, d)| dt == "CUDNN_DATA_FLOAT" && d == &[2, 4, 128, 1]),
            "{imp:?}: an inference plan with a statistics tensor: {io:?}"
        );
        // q, k, v, o (and the scale where it is a tensor): no f32 output.
        let outs = p.io().tensors.iter().filter(|t| t.is_output).count();
        ensure!(outs == 1, "{imp:?}: {outs} outputs, want o alone");
    }
    Ok(())
}

fn refuses_training() -> TestResult {
    let c = cfg().training(true);
    let mut g = Graph::new();
    let [q, k, v] = inputs(&mut g, &c)?;
    match g.sdpa_forward(q, k, v, &c) {
        Err(e @ Error::InvalidArgument { .. }) => {
            let s = e.to_string();
            ensure!(
                s.contains("is_training") && s.contains("sdpa_forward_training"),
                "the refusal names neither the flag nor the training call: {s}"
            );
        }
        other => return Err(format!("want InvalidArgument, got {other:?}").into()),
    }
    // The refused call added nothing: the training forward still builds.
    let f = g.sdpa_forward_training(q, k, v, &c)?;
    g.rename(f.stats, "stats")?;
    g.build()?;
    Ok(())
}

/// Random shapes and options, both modes planned for an H200: cuDNN's plan
/// JSON of the training graph has exactly one non-virtual tensor more than
/// the inference plan's, the f32 `[B, H, S_q, 1]` statistics under the uid
/// the crate gave them.
fn fuzz_modes() -> TestResult {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let mut runner = TestRunner::new(Config {
        cases: 12,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (
        1i64..4,
        prop::sample::select(vec![1i64, 2, 4, 8]),
        prop::sample::select(vec![1i64, 64, 128, 200]),
        prop::sample::select(vec![64i64, 128]),
        any::<bool>(),
        prop::sample::select(vec![SdpaImpl::Auto, SdpaImpl::Composite]),
    );
    runner
        .run(&strategy, |(b, h, s, d, causal, imp)| {
            let c = SdpaConfig::new(b, h, s, d, DType::F16)
                .causal(causal)
                .implementation(imp);
            let fail = |e: cudnn::Error| TestCaseError::fail(e.to_string());
            let mut gi = Graph::new();
            let [q, k, v] = inputs(&mut gi, &c).map_err(fail)?;
            let _: SdpaForward = gi.sdpa_forward(q, k, v, &c).map_err(fail)?;
            let mut gt = Graph::new();
            let [q, k, v] = inputs(&mut gt, &c).map_err(fail)?;
            let ft = gt.sdpa_forward_training(q, k, v, &c).map_err(fail)?;
            gt.rename(ft.stats, "stats").map_err(fail)?;
            let (pi, pt) = (plan(&gi).map_err(fail)?, plan(&gt).map_err(fail)?);
            let json = |p: &Plan| cudnn_io(p).map_err(|e| TestCaseError::fail(e.to_string()));
            let (wi, wt) = (json(&pi)?, json(&pt)?);
            prop_assert_eq!(wi.len() + 1, wt.len(), "{:?} / {:?}", wi, wt);
            let uid = pt
                .io()
                .tensors
                .iter()
                .find(|t| t.name == "stats")
                .map(|t| t.uid)
                .ok_or_else(|| TestCaseError::fail("no `stats` in the plan's signature"))?;
            prop_assert!(
                wt.iter()
                    .any(|(u, dt, d)| *u == uid && dt == "CUDNN_DATA_FLOAT" && d == &[b, h, s, 1]),
                "cuDNN's training plan has no f32 [B, H, S, 1] tensor {}: {:?}",
                uid,
                wt
            );
            Ok(())
        })
        .map_err(|e| e.to_string().into())
}

/// The FP8 forward's mode is in its type too: cuDNN's plan JSON for an
/// H200 has the f32 `[B, H, S_q, 1]` statistics in training, under the uid
/// the crate gave them, and one non-virtual tensor more than the inference
/// plan; `sdpa_fp8_forward` refuses a training config, naming the call
/// that builds one.
fn fp8_modes() -> TestResult {
    let c = Fp8SdpaConfig::new(1, 2, 128, 128, 64).causal(true);
    let fp8_inputs = |g: &mut Graph| -> cudnn::Result<[cudnn::graph::Tensor; 3]> {
        Ok([
            g.input("q", c.q_spec()?)?,
            g.input("k", c.kv_spec()?)?,
            g.input("v", c.kv_spec()?)?,
        ])
    };
    let mut gi = Graph::new();
    let [q, k, v] = fp8_inputs(&mut gi)?;
    let fi: Fp8SdpaForward = gi.sdpa_fp8_forward(q, k, v, &c)?;
    let () = fi.stats;
    let mut gt = Graph::new();
    let [q, k, v] = fp8_inputs(&mut gt)?;
    let ft: Fp8SdpaTrainingForward = gt.sdpa_fp8_forward_training(q, k, v, &c)?;
    gt.rename(ft.stats, "stats")?;
    let (pi, pt) = (plan(&gi)?, plan(&gt)?);
    let (wi, wt) = (cudnn_io(&pi)?, cudnn_io(&pt)?);
    ensure!(
        wi.len() + 1 == wt.len(),
        "non-virtual tensors: inference {wi:?}, training {wt:?}"
    );
    let uid = pt
        .io()
        .tensors
        .iter()
        .find(|t| t.name == "stats")
        .map(|t| t.uid)
        .ok_or("no `stats` in the plan's signature")?;
    ensure!(
        wt.iter()
            .any(|(u, dt, d)| *u == uid && dt == "CUDNN_DATA_FLOAT" && d == &[1, 2, 128, 1]),
        "cuDNN's FP8 training plan has no f32 [1, 2, 128, 1] tensor {uid}: {wt:?}"
    );
    let mut g = Graph::new();
    let [q, k, v] = fp8_inputs(&mut g)?;
    match g.sdpa_fp8_forward(q, k, v, &c.clone().training(true)) {
        Err(e @ Error::InvalidArgument { .. }) => {
            let s = e.to_string();
            ensure!(
                s.contains("is_training") && s.contains("sdpa_fp8_forward_training"),
                "the refusal names neither the flag nor the training call: {s}"
            );
        }
        other => return Err(format!("want InvalidArgument, got {other:?}").into()),
    }
    Ok(())
}
