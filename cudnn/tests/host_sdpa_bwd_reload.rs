//! Host tier: the SDPA backward operation's plans (`SdpaImpl::Native`)
//! reload from cuDNN's plan JSON, trusted (they carry runtime-compiled
//! code). Their kernel parameters name cuDNN's own workspace buffers (the
//! f32 dQ accumulator and the row sums; with GQA the dK / dV accumulators)
//! by uids outside the graph; the allow-list knows them. Checked here for
//! each target and shape: the reloaded plan serializes to the same JSON and
//! has the same workspace as the built one (cuDNN's workspace counts those
//! buffers: they are placed by cuDNN, not named by the file); untrusted, the
//! file is refused. A backward whose JSON names a uid cuDNN does not
//! serialize (a score subgraph's by-value scalar: causal, window, bias,
//! softcap on cuDNN >= 9.21) stays refused, typed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#[path = "support/mod.rs"]
mod support;

use std::sync::Arc;

use cudnn::Error;
use cudnn::graph::*;
use support::*;

fn loaded() -> (u32, u32, u32) {
    cudnn::sys::cudnn::load()
        .ok()
        .and_then(|a| a.info().version)
        .map(|v| (v.major, v.minor, v.patch))
        .unwrap_or((0, 0, 0))
}

fn bwd_graph(cfg: &SdpaConfig) -> Result<Graph, Error> {
    let mut g = Graph::new();
    let q = g.input("q", cfg.q_spec()?)?;
    let k = g.input("k", cfg.k_spec()?)?;
    let v = g.input("v", cfg.v_spec()?)?;
    let o = g.input("o", cfg.o_spec()?)?;
    let d_o = g.input("do", cfg.o_spec()?)?;
    let st = g.input("stats", cfg.stats_spec()?)?;
    let b = g.sdpa_backward(q, k, v, o, d_o, st, cfg)?;
    g.rename(b.dq, "dq")?;
    g.rename(b.dk, "dk")?;
    g.rename(b.dv, "dv")?;
    Ok(g)
}

fn base(dt: DType) -> SdpaConfig {
    SdpaConfig::new(2, 8, 256, 64, dt).implementation(SdpaImpl::Native)
}

/// What [`round_trip`] found.
enum Trip {
    /// Not planned here (typed): why.
    NotPlanned(String),
    /// Reloaded identically, or the loader's refusal.
    Loaded(Result<(), Error>),
}

/// Build, reload trusted, compare.
fn round_trip(cfg: &SdpaConfig, t: &Target) -> Result<Trip, String> {
    if let Err(e) = cfg.resolve(true) {
        return match e {
            e @ Error::Unsupported { .. } => Ok(Trip::NotPlanned(e.to_string())),
            e => Err(format!("untyped refusal: {e:?}")),
        };
    }
    let og = bwd_graph(cfg)
        .and_then(|g| g.build())
        .map_err(|e| e.to_string())?;
    let (p, _) = match Plan::build(&og, t, &Policy::default()) {
        Ok(x) => x,
        // No engine for this target (typed): nothing to reload.
        Err(e @ Error::Unsupported { .. }) => return Ok(Trip::NotPlanned(e.to_string())),
        Err(e) => return Err(format!("planning: {e}")),
    };
    let json = p.cudnn_json().map_err(|e| e.to_string())?;
    let io = Arc::new(p.io().clone());
    // Untrusted: refused for its compiled code, whatever else.
    // Untrusted: refused (typed) when the plan carries compiled code.
    match Plan::from_cudnn_json(&json, t, io.clone()) {
        Ok(_) if p.is_runtime_compiled() => {
            return Err("an untrusted file with compiled code was loaded".to_string());
        }
        Ok(_) | Err(Error::Unsupported { .. } | Error::InvalidArgument { .. }) => {}
        Err(e) => return Err(format!("untrusted load: {e:?}")),
    }
    Ok(Trip::Loaded(
        match Plan::from_cudnn_json_trusted(&json, t, io) {
            Ok(back) => {
                let again = back.cudnn_json().map_err(|e| e.to_string())?;
                if again != json || back.workspace_size() != p.workspace_size() {
                    return Err(format!(
                        "reloaded plan differs: workspace {} vs {}",
                        back.workspace_size(),
                        p.workspace_size()
                    ));
                }
                eprintln!(
                    "  {}: engine {:?}, workspace {} B: reloaded, same JSON and workspace",
                    t.fingerprint(),
                    p.engine(),
                    p.workspace_size()
                );
                Ok(())
            }
            Err(e) => Err(e),
        },
    ))
}

/// Plain, f16, padding, GQA and head dim 128 reload on every target that
/// plans them.
fn native_backward_reloads() -> TestResult {
    let cases = [
        ("bf16", base(DType::BF16)),
        ("f16", base(DType::F16)),
        ("padding", base(DType::BF16).padding(true)),
        ("gqa", base(DType::BF16).gqa(2)),
        (
            "d128",
            SdpaConfig::new(2, 8, 256, 128, DType::BF16).implementation(SdpaImpl::Native),
        ),
    ];
    let mut reloaded = 0;
    for tname in ["h200", "h100", "b200", "a100", "l4"] {
        let t = Target::preset(tname)?;
        for (name, cfg) in &cases {
            match round_trip(cfg, &t).map_err(|e| format!("{name} {tname}: {e}"))? {
                Trip::NotPlanned(why) => eprintln!("  {name} {tname}: not planned: {why}"),
                Trip::Loaded(Ok(())) => reloaded += 1,
                Trip::Loaded(Err(e)) => {
                    return Err(format!("{name} {tname}: not reloaded: {e}").into());
                }
            }
        }
    }
    // Without a device, cuDNN's heuristics offer engines for the SDPA
    // backward operation from 9.28 (none on 9.21 to 9.27; before 9.21 the
    // crate refuses it): there every case plans and reloads on every target.
    if loaded() >= (9, 28, 0) {
        ensure!(reloaded == 25, "only {reloaded} of 25 plans reloaded");
    }
    eprintln!("{reloaded} native SDPA backward plans reloaded from JSON");
    Ok(())
}

/// With a score subgraph (cuDNN >= 9.21 builds causal, window, bias and
/// softcap so), cuDNN's JSON of the backward lacks the subgraph's scalars
/// that its kernel parameters name: such a file either reloads identically
/// (a cuDNN that serializes them) or is refused, typed, naming the
/// parameter; never loaded with a parameter cuDNN could not fill.
fn subgraph_backward_refused_or_identical() -> TestResult {
    let t = Target::preset("h200")?;
    for (name, cfg) in [
        ("causal", base(DType::BF16).causal(true)),
        ("window", base(DType::BF16).causal(true).sliding_window(64)),
        ("softcap", base(DType::BF16).softcap(30.0)),
        ("bias", base(DType::BF16).bias(AttnBias::full())),
        ("sink", base(DType::BF16).sink(true).sink_grad(true)),
    ] {
        match round_trip(&cfg, &t).map_err(|e| format!("{name}: {e}"))? {
            Trip::NotPlanned(why) => eprintln!("  {name}: not planned: {why}"),
            Trip::Loaded(Ok(())) => eprintln!("  {name}: reloads"),
            Trip::Loaded(Err(e @ Error::InvalidArgument { .. }))
                if e.to_string().contains("kernelParams") =>
            {
                eprintln!("  {name}: refused: {e}")
            }
            Trip::Loaded(Err(e)) => return Err(format!("{name}: {e:?}").into()),
        }
    }
    Ok(())
}

fn main() {
    run(vec![
        host_planning("sdpa_native_backward_reloads", native_backward_reloads),
        host_planning(
            "sdpa_subgraph_backward_refused_or_identical",
            subgraph_backward_refused_or_identical,
        ),
    ])
}
