//! Host tier for the attention softmax options of issue 24 (items 5b and
//! 6): the row max and sum of exponentials as outputs
//! (`SdpaConfig::max_sum_exp`) and attention sinks (`SdpaConfig::sink`,
//! dSink by `sink_grad`). No GPU: the real cuDNN plans each option,
//! forward (the SDPA operation, the composite, `Auto`) and backward (the
//! composite; the SDPA backward operation with `Native`), for the H200,
//! B200, A100 and L4 presets through the driver stub (the H100 plans as the
//! H200: `plan_targets`), and prints
//! `engines / configs / plans / engine / workspace` per target. On a cuDNN
//! that lacks an option the refusal must be the typed `Unsupported` naming
//! the option and the version.
//!
//! Also here: the version rules as pure functions, the plan JSON of a native plan with the softmax
//! sub-descriptor (round trip, tampering refused), and a property test over
//! random option combinations. The f64 reference's tests (hand cases,
//! finite differences for dQ / dK / dV / dSink, a split-KV combination)
//! are in `unit/sdpa_softmax_reference`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::neg_cmp_op_on_partial_ord)]
use crate::support;
use cudnn::Error;
use cudnn::graph::*;

use crate::support::sdpa_plans::{
    bwd_parts as bwd, counts, fwd_parts as fwd, loaded, names_option,
};
use proptest::prelude::*;
use support::plan_nodes::{find_op, tensor_dtype, uid_text};
use support::*;

// No "h100" in the per-case loops: cuDNN plans every attention graph for
// it exactly as for the H200 (both sm_90 with 132 SMs), which
// `plan_targets::host::sdpa_h100_plans_as_h200` checks on a sample of these cases.
const TARGETS: [&str; 4] = ["h200", "b200", "a100", "l4"];

fn base() -> SdpaConfig {
    SdpaConfig::new(2, 8, 256, 64, DType::BF16)
}

/// A decode step with the softmax's row max and sum of exponentials.
fn decode() -> SdpaConfig {
    SdpaConfig::new(4, 32, 1, 128, DType::BF16)
        .gqa(8)
        .kv_len(2048)
        .max_sum_exp(true)
}

/// The planning cases: (name, backward, config).
pub(crate) fn cases() -> Vec<(&'static str, bool, SdpaConfig)> {
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
        ("fwd max/sum_exp decode s_q 1", false, decode()),
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
        (
            "fwd max/sum_exp ragged train",
            false,
            ms().causal(true).training(true).ragged(),
        ),
        (
            "fwd max/sum_exp paged decode",
            false,
            SdpaConfig::new(4, 8, 1, 128, DType::BF16)
                .gqa(2)
                .kv_len(1024)
                .causal_bottom_right()
                .paged(64, 80)
                .max_sum_exp(true),
        ),
        // The paged decode without the softmax options, for comparison.
        (
            "fwd paged decode (control)",
            false,
            SdpaConfig::new(4, 8, 1, 128, DType::BF16)
                .gqa(2)
                .kv_len(1024)
                .causal_bottom_right()
                .paged(64, 80),
        ),
        (
            "fwd sink dropout train",
            false,
            sink().dropout(0.1).training(true),
        ),
        // The same backward without the softmax options, for comparison.
        ("bwd plain", true, base()),
        ("bwd sink", true, sink()),
        ("bwd sink dsink", true, sink().sink_grad(true)),
        (
            "bwd sink dsink causal",
            true,
            sink().sink_grad(true).causal(true),
        ),
        (
            "bwd sink dsink dropout gqa",
            true,
            sink().sink_grad(true).dropout(0.1).gqa(2),
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
        let imps: &[SdpaImpl] = if backward && v < (9, 21, 0) {
            // The crate's native SDPA backward does not finalize on cuDNN
            // 9.19 with or without these options (`bwd plain`: the
            // operation graph's buildDAG says BAD_PARAM); only what `Auto`
            // builds is planned there.
            eprintln!(
                "{name:<30} Native: not planned on cuDNN {v:?} (the native backward needs 9.21 here)"
            );
            &[SdpaImpl::Auto]
        } else if backward {
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
                    // Every construction for the H200; what `Auto` builds elsewhere.
                    let all = crate::support::targets(&TARGETS);
                    let targets: &[&str] = if imp == SdpaImpl::Auto {
                        &all
                    } else {
                        &all[..1]
                    };
                    for &tgt in targets {
                        match counts(&g, tgt, if tgt == "h200" || tgt == "h100" { 3 } else { 1 }) {
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

/// `resolve_for` must refuse with `Unsupported` naming `word` and `ver`.
fn unsupported_naming(r: Result<SdpaImpl, Error>, word: &str, ver: &str) -> TestResult {
    match r {
        Err(e @ Error::Unsupported { .. }) => {
            let s = e.to_string();
            ensure!(
                s.contains(word) && s.contains(ver),
                "refusal does not name `{word}` and `{ver}`: {s}"
            );
            Ok(())
        }
        other => Err(format!("expected Unsupported naming {word}, got {other:?}").into()),
    }
}

/// The version rules as pure functions, against NVIDIA's frontend 1.32.
fn version_rules() -> TestResult {
    let native = |c: SdpaConfig| c.implementation(SdpaImpl::Native);
    let comp = |c: SdpaConfig| c.implementation(SdpaImpl::Composite);
    let ms = base().max_sum_exp(true);
    let sink = base().sink(true);
    // The SDPA operation's softmax sub-descriptor: 9.21.
    unsupported_naming(
        native(ms.clone()).resolve_for((9, 20, 0), false),
        "max_sum_exp",
        "9.21.0",
    )?;
    unsupported_naming(
        native(sink.clone()).resolve_for((9, 19, 0), false),
        "sink",
        "9.21.0",
    )?;
    // (Before 9.21 the SDPA backward operation itself is refused first.)
    unsupported_naming(
        native(sink.clone().sink_grad(true)).resolve_for((9, 20, 0), true),
        "SDPA_BWD",
        "9.21.0",
    )?;
    ensure!(
        native(ms.clone()).resolve_for((9, 21, 0), false)? == SdpaImpl::Native,
        "native(ms.clone()).resolve_for((9, 21, 0), false)? == SdpaIm"
    );
    ensure!(
        native(sink.clone().sink_grad(true)).resolve_for((9, 21, 0), true)? == SdpaImpl::Native,
        "native dSink on 9.21"
    );
    // A backward with a sink but no dSink needs nothing of the operation.
    ensure!(
        native(sink.clone()).resolve_for((9, 21, 0), true)? == SdpaImpl::Native,
        "native(sink.clone()).resolve_for((9, 21, 0), true)? == SdpaI"
    );
    // Auto: the composite before 9.21 (torch211's 9.19), native after.
    ensure!(
        ms.resolve_for((9, 19, 0), false)? == SdpaImpl::Composite,
        "ms.resolve_for((9, 19, 0), false)? == SdpaImpl::Composite"
    );
    ensure!(
        ms.resolve_for((9, 10, 2), false)? == SdpaImpl::Composite,
        "ms.resolve_for((9, 10, 2), false)? == SdpaImpl::Composite"
    );
    ensure!(
        ms.resolve_for((9, 28, 1), false)? == SdpaImpl::Native,
        "ms.resolve_for((9, 28, 1), false)? == SdpaImpl::Native"
    );
    ensure!(
        sink.resolve_for((9, 19, 0), false)? == SdpaImpl::Composite,
        "sink.resolve_for((9, 19, 0), false)? == SdpaImpl::Composite"
    );
    // Sinks: none before 9.13 on any construction.
    unsupported_naming(
        comp(sink.clone()).resolve_for((9, 12, 0), false),
        "sink",
        "9.13.0",
    )?;
    unsupported_naming(sink.resolve_for((9, 10, 2), true), "sink", "9.13.0")?;
    ensure!(
        comp(sink.clone()).resolve_for((9, 13, 0), false)? == SdpaImpl::Composite,
        "comp(sink.clone()).resolve_for((9, 13, 0), false)? == SdpaIm"
    );
    // Ragged with dSink: 9.26.
    let ragged = sink.clone().sink_grad(true).ragged();
    unsupported_naming(ragged.resolve_for((9, 25, 0), true), "ragged", "9.26.0")?;
    ensure!(
        ragged.resolve_for((9, 26, 0), true).is_ok(),
        "ragged dSink on 9.26"
    );
    ensure!(
        ragged.resolve_for((9, 25, 0), false).is_ok(),
        "the forward has no 9.26 rule"
    );
    // No sink for a single query row.
    let decode = SdpaConfig::new(2, 8, 1, 64, DType::BF16)
        .kv_len(512)
        .sink(true);
    match decode.resolve_for((9, 28, 1), false) {
        Err(e @ Error::Unsupported { .. }) if e.to_string().contains("seq_q = 1") => {}
        other => return Err(format!("decode with a sink: {other:?}").into()),
    }
    // dSink without a sink: Invalid, naming the field.
    match base().sink_grad(true).resolve_for((9, 28, 1), true) {
        Err(e @ Error::InvalidArgument { .. }) if e.to_string().contains("sink_grad") => {}
        other => return Err(format!("sink_grad alone: {other:?}").into()),
    }
    // max / sum_exp have no version rule of their own on the composite.
    ensure!(
        comp(ms).resolve_for((9, 0, 0), false)? == SdpaImpl::Composite,
        "comp(ms).resolve_for((9, 0, 0), false)? == SdpaImpl::Composi"
    );
    Ok(())
}

/// Random combinations of the softmax options with the others: the pure
/// rules over every version, the target rules, and the graph builder with
/// the loaded cuDNN never panic, and every refusal is typed and named.
fn property_random_options() -> TestResult {
    let mut runner = crate::support::prop_runner(128);
    let strat = (
        (
            1i64..3,
            prop_oneof![Just(1i64), Just(2), Just(4)],
            1i64..300,
            1i64..600,
        ),
        (
            prop_oneof![Just(64i64), Just(128), Just(7)],
            any::<bool>(),
            any::<bool>(),
        ),
        (
            any::<bool>(),
            any::<bool>(),
            prop_oneof![Just(0.0f64), Just(0.1)],
        ),
        (0u8..3, any::<bool>(), any::<bool>()),
        (any::<bool>(), any::<bool>(), any::<bool>()),
        prop_oneof![Just(None), (1i64..100).prop_map(Some)],
    );
    runner
        .run(
            &strat,
            |(
                (b, h, sq, skv),
                (d, causal, br),
                (padding, training, p),
                (imp, backward, ragged),
                (max_sum_exp, sink, sink_grad),
                window,
            )| {
                let mut c = SdpaConfig::new(b, h, sq, d, DType::BF16)
                    .kv_len(skv)
                    .causal(causal)
                    .padding(padding)
                    .training(training)
                    .dropout(p)
                    .max_sum_exp(max_sum_exp)
                    .sink(sink)
                    .sink_grad(sink_grad)
                    .implementation(
                        [SdpaImpl::Auto, SdpaImpl::Native, SdpaImpl::Composite][imp as usize],
                    );
                if br {
                    c = c.diagonal(DiagonalAlignment::BottomRight);
                }
                if let Some(w) = window {
                    c = c.sliding_window(w);
                }
                if ragged {
                    c = c.ragged().padding(padding);
                }
                for ver in [
                    (9, 0, 0),
                    (9, 10, 2),
                    (9, 12, 0),
                    (9, 13, 0),
                    (9, 19, 0),
                    (9, 21, 0),
                    (9, 25, 0),
                    (9, 26, 0),
                    (9, 28, 1),
                ] {
                    if let Err(e) = c.resolve_for(ver, backward) {
                        prop_assert!(names_option(&e), "untyped or unnamed refusal {e:?}");
                    }
                    for dev in [800, 890, 900, 1000] {
                        if let Err(e) = c.check_target_for(backward, dev, ver) {
                            prop_assert!(names_option(&e), "untyped target refusal {e:?}");
                        }
                    }
                }
                // The builder with the loaded cuDNN: the graph, or a typed refusal.
                let built = if backward {
                    bwd(&c)
                        .map(|(_, b)| (b.softmax.sink.is_some(), b.softmax.d_sink.is_some(), false))
                } else {
                    fwd(&c).map(|(_, f)| {
                        (
                            f.softmax.sink.is_some(),
                            false,
                            f.softmax.max.is_some() && f.softmax.sum_exp.is_some(),
                        )
                    })
                };
                match built {
                    Ok((has_sink, has_d_sink, has_parts)) => {
                        if backward {
                            prop_assert!(
                                has_sink == sink_grad && has_d_sink == sink_grad,
                                "backward sink tensors"
                            );
                        } else {
                            prop_assert!(
                                has_sink == sink && has_parts == max_sum_exp,
                                "forward softmax tensors"
                            );
                        }
                    }
                    Err(e) => prop_assert!(names_option(&e), "untyped builder refusal {e:?}"),
                }
                Ok(())
            },
        )
        .map_err(|e| format!("{e}"))?;
    Ok(())
}

/// The crate's own native plans with the softmax sub-descriptor (max /
/// sum_exp, a sink; and the SDPA backward's sink / dSink) pass the plan-JSON
/// allow-list and reload into the same engine and workspace; a tampered
/// plan is refused, typed, before cuDNN sees it: an unknown softmax key, the
/// max output pointed at Q (an input, bound read-only), and the sink / max /
/// sum_exp tensors declared larger than the buffers bound to them. (The native
/// backward with a sink and dSink reloads too: `host/sdpa_bwd_reload`.)
fn plan_json_round_trip() -> TestResult {
    let t = Target::preset("h200")?;
    let graphs = [
        (
            "max/sum_exp",
            fwd(&base()
                .max_sum_exp(true)
                .training(true)
                .implementation(SdpaImpl::Native))?,
        ),
        (
            "sink",
            fwd(&base()
                .sink(true)
                .causal(true)
                .implementation(SdpaImpl::Native))?,
        ),
        // The composite's SOFTMAX node (issue 34) with every output and
        // the sink.
        (
            "composite max/sum_exp",
            fwd(&base()
                .max_sum_exp(true)
                .training(true)
                .implementation(SdpaImpl::Composite))?,
        ),
        (
            "composite sink",
            fwd(&base()
                .sink(true)
                .training(true)
                .implementation(SdpaImpl::Composite))?,
        ),
        // A decode step (one query row): its kernels patch three workspace
        // buffers of their own (by uids in no graph), with the softmax's
        // outputs and with a paged cache, in the operation and the
        // composite alike.
        (
            "decode max/sum_exp",
            fwd(&decode().implementation(SdpaImpl::Native))?,
        ),
        (
            "composite decode max/sum_exp",
            fwd(&decode().implementation(SdpaImpl::Composite))?,
        ),
        (
            "paged decode max/sum_exp",
            fwd(&SdpaConfig::new(4, 8, 1, 128, DType::BF16)
                .gqa(2)
                .kv_len(1024)
                .causal_bottom_right()
                .paged(64, 80)
                .max_sum_exp(true)
                .implementation(SdpaImpl::Native))?,
        ),
    ];
    for (name, (g, f)) in graphs {
        let (p, _) = Plan::build(&g.build()?, &t, &Policy::default())?;
        let json = p.cudnn_json()?;
        let io = std::sync::Arc::new(p.io().clone());
        // The plan carries runtime-compiled code: the trusted loader (which
        // applies the allow-list too) is the one that may load it.
        check_plan_json(&json, &io, &t, None)
            .map_err(|e| format!("{name}: own plan refused by the allow-list: {e}\n{json}"))?;
        // SAFETY: `json` is cuDNN's JSON, unchanged, of the plan built just above with the
        // loaded cuDNN, and `io` is that plan's own IoSignature.
        let back = unsafe { Plan::from_cudnn_json_unverified(&json, &t, io.clone()) }
            .map_err(|e| format!("{name}: own plan refused: {e}\n{json}"))?;
        // The same engine: the reloaded plan serializes to the same JSON
        // (engine, knobs, graph) and has the same workspace.
        let again = back.cudnn_json()?;
        ensure!(
            again == json && back.workspace_size() == p.workspace_size(),
            "{name}: reloaded plan differs (workspace {} vs {})\n{again}\n{json}",
            back.workspace_size(),
            p.workspace_size()
        );
        eprintln!(
            "{name}: plan JSON round trip: engine {:?}, workspace {}",
            p.engine(),
            p.workspace_size()
        );
        // Tampering: an unknown key on the softmax / SDPA node.
        let mut tampered: Vec<(String, String, &str)> = Vec::new();
        for (what, from, to) in [
            ("unknown key", "\"sumExpDesc\"", "\"sumExpDescX\""),
            ("unknown key", "\"sinkDesc\"", "\"sinkDescX\""),
        ] {
            if json.contains(from) {
                tampered.push((what.to_string(), json.replacen(from, to, 1), "is not a key"));
            }
        }
        // A softmax output pointed at Q (an input bound read-only), and the
        // sink / max / sum_exp tensors declared larger than the buffers
        // bound to them: each refused before cuDNN sees the plan.
        let uid = |t: Option<Tensor>| -> Result<Option<String>, Error> {
            let Some(t) = t else { return Ok(None) };
            let n = g.name(t)?;
            Ok(io
                .tensors
                .iter()
                .find(|x| x.name == n)
                .map(|x| x.uid.to_string()))
        };
        let q_uid = io
            .tensors
            .iter()
            .find(|x| x.name == "q")
            .map(|x| x.uid.to_string())
            .ok_or("q in the io signature")?;
        let parsed: serde_json::Value = serde_json::from_str(&json)?;
        if f.softmax.max.is_some() {
            let mut v = parsed.clone();
            ensure!(
                set_key(&mut v, "maxDesc", serde_json::Value::String(q_uid.clone())),
                "{name}: no maxDesc in the plan JSON"
            );
            // Q's dims are not a row's: the softmax shape rule refuses it
            // before the role rule would (which `graph_files` and
            // `plan_json_softmax` test on same-shaped tensors).
            tampered.push(("max written to Q".into(), v.to_string(), "must have dims"));
        }
        for (what, t) in [
            ("sink", f.softmax.sink),
            ("max", f.softmax.max),
            ("sum_exp", f.softmax.sum_exp),
        ] {
            let Some(u) = uid(t)? else { continue };
            let mut v = parsed.clone();
            ensure!(
                grow_dim(&mut v, &u),
                "{name}: tensor {what} (uid {u}) not in the plan JSON"
            );
            tampered.push((format!("{what} larger than bound"), v.to_string(), "dim"));
        }
        ensure!(
            tampered.len() >= 2,
            "{name}: only {} tampered plans",
            tampered.len()
        );
        for (what, bad, why) in tampered {
            // SAFETY: outside the contract on purpose: `bad` is an edit (a softmax tensor's
            // role or dimension changed) that the crate's checks must refuse before cuDNN
            // sees it; the typed refusal is asserted below, and no plan is executed.
            match unsafe { Plan::from_cudnn_json_unverified(&bad, &t, io.clone()) } {
                Err(e @ (Error::InvalidArgument { .. } | Error::Mismatch { .. }))
                    if e.to_string().contains(why) =>
                {
                    eprintln!("{name}: tampered ({what}) refused: {e}")
                }
                other => {
                    return Err(format!(
                        "{name}: tampered plan ({what}) not refused for `{why}`: {:?}",
                        other.map(|_| ())
                    )
                    .into());
                }
            }
        }
    }
    Ok(())
}

/// Sets every `key` in the JSON tree to `value`; whether one was found.
fn set_key(v: &mut serde_json::Value, key: &str, value: serde_json::Value) -> bool {
    match v {
        serde_json::Value::Object(m) => {
            let mut found = false;
            if let Some(slot) = m.get_mut(key) {
                *slot = value.clone();
                found = true;
            }
            for (_, x) in m.iter_mut() {
                found |= set_key(x, key, value.clone());
            }
            found
        }
        serde_json::Value::Array(a) => a
            .iter_mut()
            .fold(false, |f, x| set_key(x, key, value.clone()) | f),
        _ => false,
    }
}

/// Doubles dim 2 (and the outer strides) of the tensor named `uid`
/// wherever the JSON declares it; whether one was found.
fn grow_dim(v: &mut serde_json::Value, uid: &str) -> bool {
    match v {
        serde_json::Value::Object(m) => {
            let mut found = false;
            if m.get("name").and_then(|n| n.as_str()) == Some(uid)
                && let Some(serde_json::Value::Array(d)) = m.get_mut("dim")
                && let Some(x) = d.get_mut(2).and_then(|x| x.as_i64())
            {
                d[2] = serde_json::Value::from(x * 2);
                found = true;
            }
            for (_, x) in m.iter_mut() {
                found |= grow_dim(x, uid);
            }
            found
        }
        serde_json::Value::Array(a) => a.iter_mut().fold(false, |f, x| grow_dim(x, uid) | f),
        _ => false,
    }
}

/// The composite forward's softmax (issue 34): from cuDNN 9.21 one
/// SOFTMAX operation, as NVIDIA's frontend builds it (its statistics, row
/// max / sum of exponentials and sink on the operation; the conformance
/// tier compares the nodes with the frontend's), before it the reductions
/// and pointwise ops. Counted in the plan cuDNN writes for the H200.
fn composite_softmax_operation() -> TestResult {
    let v = loaded();
    let op = v >= (9, 21, 0);
    let cases = [
        ("inference", base()),
        ("training", base().training(true)),
        ("max_sum_exp", base().max_sum_exp(true)),
        ("sink training", base().sink(true).training(true)),
        ("sink max_sum_exp", base().sink(true).max_sum_exp(true)),
        ("dropout", base().dropout(0.1)),
    ];
    let mut planned = 0;
    for (name, cfg) in cases {
        let cfg = cfg.implementation(SdpaImpl::Composite);
        let (g, f) = match fwd(&cfg) {
            Ok(x) => x,
            // An option this cuDNN lacks (the sink before 9.13).
            Err(e) if names_option(&e) => {
                eprintln!("{name}: refused on cuDNN {v:?} (typed): {e}");
                continue;
            }
            Err(e) => return Err(format!("{name}: {e}").into()),
        };
        let (plan, _) = Plan::build(&g.build()?, &Target::preset("h200")?, &Policy::default())?;
        let json = plan.cudnn_json()?;
        let n = |kind: &str| {
            json.matches(&format!("\"CUDNN_BACKEND_OPERATION_{kind}_DESCRIPTOR\""))
                .count()
        };
        let (softmax, reductions) = (n("SOFTMAX"), n("REDUCTION"));
        eprintln!("{name}: cuDNN {v:?}: {softmax} SOFTMAX, {reductions} REDUCTION nodes");
        if op {
            ensure!(
                softmax == 1 && reductions == 0,
                "{name}: one SOFTMAX and no reduction from 9.21, got {softmax} / {reductions}"
            );
            // Its wiring: the statistics (training only), max / sum_exp and
            // the sink are the graph's own tensors; P is in the I/O type
            // when it feeds P·V, f32 before dropout.
            let uid_of = |t: Option<Tensor>| -> Result<Option<String>, Error> {
                let Some(t) = t else { return Ok(None) };
                let n = g.name(t)?;
                Ok(plan
                    .io()
                    .tensors
                    .iter()
                    .find(|x| x.name == n)
                    .map(|x| x.uid.to_string()))
            };
            let v: serde_json::Value = serde_json::from_str(&json)?;
            let node = find_op(&v, "CUDNN_BACKEND_OPERATION_SOFTMAX_DESCRIPTOR")
                .ok_or_else(|| format!("{name}: no SOFTMAX node"))?;
            let field = |k: &str| node.get(k).map(uid_text);
            for (key, t) in [
                ("statsDesc", f.stats),
                ("maxDesc", f.softmax.max),
                ("sumExpDesc", f.softmax.sum_exp),
                ("sinkDesc", f.softmax.sink),
            ] {
                let want = uid_of(t)?;
                ensure!(
                    field(key) == want,
                    "{name}: SOFTMAX {key} is {:?}, want {want:?}",
                    field(key)
                );
            }
            let y = field("Y").ok_or_else(|| format!("{name}: SOFTMAX without Y"))?;
            let dtype = tensor_dtype(&v, &y).ok_or_else(|| format!("{name}: no tensor {y}"))?;
            let want = if cfg.active_dropout().is_some() {
                "CUDNN_DATA_FLOAT"
            } else {
                "CUDNN_DATA_BFLOAT16"
            };
            ensure!(dtype == want, "{name}: P is {dtype}, want {want}");
        } else {
            ensure!(
                softmax == 0 && reductions >= 2,
                "{name}: the decomposed softmax before 9.21, got {softmax} / {reductions}"
            );
        }
        planned += 1;
    }
    ensure!(planned >= 4, "only {planned} cases planned");
    Ok(())
}

pub fn main() {
    let t = vec![
        host_planning("sdpa_softmax_plans_per_target", plan_per_target),
        host_planning(
            "sdpa_softmax_composite_operation",
            composite_softmax_operation,
        ),
        unit("sdpa_softmax_version_rules", version_rules),
        host("sdpa_softmax_random_combinations", property_random_options),
        {
            let t = host_planning("sdpa_softmax_plan_json_round_trip", plan_json_round_trip);
            // The softmax sub-descriptor is cuDNN 9.21's: skipped, visibly, before.
            let v = loaded();
            if v < (9, 21, 0) {
                eprintln!(
                    "skipped: host::sdpa_softmax_plan_json_round_trip: needs cuDNN >= 9.21 (loaded {v:?})"
                );
                t.with_ignored_flag(true)
            } else {
                t
            }
        },
    ];
    run(t)
}
