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
use crate::support;
use crate::support::graph_plans;
use crate::support::sdpa_plans::fwd_any;

use std::sync::Arc;

use crate::support::sdpa_plans::loaded;
use cudnn::Error;
use cudnn::graph::*;
use graph_plans::raw_plan_finalize;
use serde_json::Value;
use support::*;

fn bwd_graph(cfg: &SdpaConfig) -> Result<Graph, Error> {
    Ok(support::norm_attention_graphs::sdpa_bwd(cfg)?.0)
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
    // Untrusted: refused for its compiled code (or, for a file the
    // allow-list refuses anyway, for that: typed, naming the parameter).
    match Plan::from_cudnn_json(&json, t, io.clone()) {
        Err(Error::Unsupported { what, .. }) if what.contains("compiled kernel code") => {}
        Err(e @ Error::InvalidArgument { .. }) if e.to_string().contains("kernelParams") => {}
        other => return Err(format!("untrusted load: {:?}", other.map(|_| ()))),
    }
    Ok(Trip::Loaded(
        // SAFETY: `json` is cuDNN's JSON, unchanged, of the plan built just above with the
        // loaded cuDNN, and `io` is that plan's own IoSignature.
        match unsafe { Plan::from_cudnn_json_unverified(&json, t, io) } {
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
    let mut refused = 0;
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
                eprintln!("  {name}: refused: {e}");
                refused += 1;
            }
            Trip::Loaded(Err(e)) => return Err(format!("{name}: {e:?}").into()),
        }
    }
    // cuDNN 9.28's JSON leaves the subgraph out: causal, window, softcap and
    // bias are refused there (were a cuDNN to serialize them, this would
    // change, and be seen).
    ensure!(
        refused == 4,
        "{refused} of 4 score-subgraph backwards refused"
    );
    Ok(())
}

/// The built plan and its JSON (native backward for `cfg` on `t`).
fn built(cfg: &SdpaConfig, t: &Target) -> Result<(Plan, String), Box<dyn std::error::Error>> {
    let (p, _) = Plan::build(&bwd_graph(cfg)?.build()?, t, &Policy::default())?;
    let json = p.cudnn_json()?;
    Ok((p, json))
}

fn engine_of(json: &str) -> Result<Value, Box<dyn std::error::Error>> {
    let v: Value = serde_json::from_str(json)?;
    Ok(v.pointer("/engine").ok_or("no engine")?.clone())
}

fn with_engine(json: &str, engine: Value) -> Result<String, Box<dyn std::error::Error>> {
    let mut v: Value = serde_json::from_str(json)?;
    *v.pointer_mut("/engine").ok_or("no engine")? = engine;
    Ok(v.to_string())
}

/// cuDNN keeps a kernel's parameter block as the file has it and sizes the
/// workspace from the file's graph: the engine (with compiled code) of a
/// larger attention grafted into a smaller one's file finalizes in cuDNN,
/// and would make the kernel walk the larger shapes over the smaller
/// buffers. The loader refuses it, trusted too, by the kernel's attention
/// descriptor (also for the SDPA forward and a composite attention).
fn grafted_engines_refused() -> TestResult {
    let t = Target::preset("h200")?;
    let small = base(DType::BF16);
    let pairs = [
        ("sequence", SdpaConfig::new(2, 8, 1024, 64, DType::BF16)),
        ("batch", SdpaConfig::new(8, 8, 256, 64, DType::BF16)),
        ("heads", SdpaConfig::new(2, 16, 256, 64, DType::BF16)),
    ];
    for (what, big) in pairs {
        for imp in [SdpaImpl::Native, SdpaImpl::Composite] {
            let (s, sj) = built(&small.clone().implementation(imp), &t)?;
            let (_, bj) = built(&big.clone().implementation(imp), &t)?;
            let graft = with_engine(&sj, engine_of(&bj)?)?;
            // Without the descriptor's name, too (nothing would tie the
            // kernel to the graph): refused.
            let unnamed = graft.replacen("\"name\":\"attnDesc\",", "", 1);
            ensure!(unnamed != graft, "no attnDesc name in the plan JSON");
            // SAFETY: outside the contract on purpose: `unnamed` is an edit (another
            // graph's engine grafted in, the descriptor's name removed) that the crate's
            // checks must refuse before cuDNN sees it; the typed refusal is asserted below,
            // and no plan is executed.
            match unsafe {
                Plan::from_cudnn_json_unverified(&unnamed, &t, Arc::new(s.io().clone()))
            } {
                Err(e @ Error::InvalidArgument { .. }) if e.to_string().contains("attnDesc") => {}
                other => {
                    return Err(format!(
                        "larger {what} {imp:?}, unnamed descriptor: {:?}",
                        other.map(|p| p.workspace_size())
                    )
                    .into());
                }
            }
            let st = raw_plan_finalize(&graft)?;
            eprintln!("  larger {what}, {imp:?}: cuDNN finalize of the graft: status {st}");
            let io = Arc::new(s.io().clone());
            // SAFETY: outside the contract on purpose: `graft` is an edit (a larger graph's
            // engine grafted into this plan) that the crate's checks must refuse before
            // cuDNN sees it; the typed refusal is asserted below, and no plan is executed.
            match unsafe { Plan::from_cudnn_json_unverified(&graft, &t, io) } {
                Err(e @ (Error::Mismatch { .. } | Error::InvalidArgument { .. }))
                    if e.to_string().contains("attention")
                        || e.to_string().contains("kernelParams") =>
                {
                    eprintln!("    refused: {e}")
                }
                other => {
                    return Err(format!(
                        "larger {what} {imp:?}: graft loaded trusted: {:?}",
                        other.map(|p| p.workspace_size())
                    )
                    .into());
                }
            }
        }
    }
    // The forward too.
    let fwd = |c: &SdpaConfig| -> Result<(Plan, String), Box<dyn std::error::Error>> {
        let mut g = Graph::new();
        let q = g.input("q", c.q_spec()?)?;
        let k = g.input("k", c.k_spec()?)?;
        let v = g.input("v", c.v_spec()?)?;
        fwd_any(&mut g, q, k, v, c)?;
        let (p, _) = Plan::build(&g.build()?, &t, &Policy::default())?;
        let j = p.cudnn_json()?;
        Ok((p, j))
    };
    let (s, sj) = fwd(&small.clone().training(true))?;
    let (_, bj) = fwd(&SdpaConfig::new(2, 8, 1024, 64, DType::BF16)
        .training(true)
        .implementation(SdpaImpl::Native))?;
    let graft = with_engine(&sj, engine_of(&bj)?)?;
    // SAFETY: outside the contract on purpose: `graft` is an edit (a larger graph's engine
    // grafted into this plan) that the crate's checks must refuse before cuDNN sees it; the
    // typed refusal is asserted below, and no plan is executed.
    let r = unsafe { Plan::from_cudnn_json_unverified(&graft, &t, Arc::new(s.io().clone())) };
    ensure!(
        matches!(&r, Err(Error::Mismatch { .. })),
        "forward graft: {:?}",
        r.map(|p| p.workspace_size())
    );
    Ok(())
}

/// A kernel parameter naming a uid cuDNN does not know: cuDNN finalizes
/// such a plan (it does not check), the loader refuses it, trusted too; and
/// the backward's own buffer uids are refused outside a backward (in a
/// forward's file), the GQA ones in a backward without GQA, the dBias one
/// in a backward without dBias, and a decode forward's in a backward and in
/// a forward of many query rows.
fn foreign_param_uids_refused() -> TestResult {
    let t = Target::preset("h200")?;
    let (p, json) = built(&base(DType::BF16), &t)?;
    let io = Arc::new(p.io().clone());
    let swap = |json: &str, from: i64, to: i64| {
        json.replacen(&format!("\"uid\":{from}"), &format!("\"uid\":{to}"), 1)
    };
    let bwd_buffer = 2_701_148_414_642_200_600_i64;
    ensure!(
        json.contains(&format!("\"uid\":{bwd_buffer}")),
        "the backward's buffer uid is not in its plan"
    );
    let unknown = swap(&json, bwd_buffer, 123_456_789);
    let st = raw_plan_finalize(&unknown)?;
    eprintln!("  unknown uid: cuDNN finalize status {st} (0: cuDNN accepts it)");
    for (what, j) in [
        ("unknown uid", unknown),
        (
            "a GQA buffer without GQA",
            swap(&json, bwd_buffer, 3_759_583_368_913_738_089),
        ),
        // A decode forward's own buffer (accepted only with an SDPA
        // forward or a softmax operation), and the dBias accumulator in a
        // backward that writes no dBias.
        (
            "a forward decode buffer in a backward",
            swap(&json, bwd_buffer, 9_196_583_092_661_000_136),
        ),
        (
            "a dBias buffer without dBias",
            swap(&json, bwd_buffer, -5_069_943_406_638_448_333),
        ),
    ] {
        // SAFETY: outside the contract on purpose: `j` is an edit (a kernel parameter's uid
        // swapped for an unknown one) that the crate's checks must refuse before cuDNN sees
        // it; the typed refusal is asserted below, and no plan is executed.
        match unsafe { Plan::from_cudnn_json_unverified(&j, &t, io.clone()) } {
            Err(e @ Error::InvalidArgument { .. }) if e.to_string().contains("kernelParams") => {}
            other => return Err(format!("{what}: {:?}", other.map(|_| ())).into()),
        }
    }
    // A forward's file naming the backward's buffer.
    let mut g = Graph::new();
    let c = base(DType::BF16).training(true);
    let q = g.input("q", c.q_spec()?)?;
    let k = g.input("k", c.k_spec()?)?;
    let v = g.input("v", c.v_spec()?)?;
    fwd_any(&mut g, q, k, v, &c)?;
    let (fp, fj) = Plan::build(&g.build()?, &t, &Policy::default())
        .and_then(|(p, _)| p.cudnn_json().map(|j| (p, j)))?;
    let internal = 2_898_540_878_490_494_980_i64;
    ensure!(
        fj.contains(&format!("\"uid\":{internal}")),
        "forward's internal uid"
    );
    // The backward's buffer, and a decode step's (this forward has 256
    // query rows), in a forward's file.
    for (what, to) in [
        ("backward buffer in a forward", bwd_buffer),
        (
            "decode buffer in a 256-row forward",
            9_196_583_092_661_000_136,
        ),
    ] {
        let j = swap(&fj, internal, to);
        // SAFETY: outside the contract on purpose: `j` is an edit (a forward plan given a
        // buffer uid it does not have) that the crate's checks must refuse before cuDNN
        // sees it; the typed refusal is asserted below, and no plan is executed.
        match unsafe { Plan::from_cudnn_json_unverified(&j, &t, Arc::new(fp.io().clone())) } {
            Err(e @ Error::InvalidArgument { .. }) if e.to_string().contains("kernelParams") => {}
            other => return Err(format!("{what}: {:?}", other.map(|_| ())).into()),
        }
    }
    Ok(())
}

/// Reported ignored (with a note), never passed, where the loaded cuDNN
/// offers no engine for the SDPA backward operation without a device
/// (before 9.28).
fn on_928(name: &str, f: fn() -> TestResult) -> libtest_mimic::Trial {
    let v = loaded();
    if libs_missing().is_none() && v < (9, 28, 0) {
        eprintln!(
            "skipped: host::{name}: cuDNN {v:?} plans no SDPA backward operation without a device (9.28 does)"
        );
        return crate::support::trial(format!("host::{name}"), f).with_ignored_flag(true);
    }
    host_planning(name, f)
}

pub fn main() {
    run(vec![
        on_928("sdpa_native_backward_reloads", native_backward_reloads),
        on_928(
            "sdpa_subgraph_backward_refused_or_identical",
            subgraph_backward_refused_or_identical,
        ),
        on_928("sdpa_grafted_engines_refused", grafted_engines_refused),
        on_928(
            "sdpa_foreign_param_uids_refused",
            foreign_param_uids_refused,
        ),
    ])
}
