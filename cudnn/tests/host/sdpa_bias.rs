//! Host tier for the attention's additive bias and ALiBi (issue 24 item
//! 4): no GPU; the real cuDNN plans each case, forward (the SDPA
//! operation, the composite, `Auto`) and backward (the composite; the
//! native backward with dBias where it plans), for the H200, B200, A100
//! and L4 presets (the H100 plans as the H200: `plan_targets`) through the
//! driver stub, and prints `engines /
//! configs / plans / engine / workspace` per target. On a cuDNN that lacks
//! an option the refusal must be the typed `Unsupported` naming the option
//! and the version.
//!
//! Also here: the rules as pure functions (`resolve_for`,
//! `check_target_for`) against NVIDIA's frontend 1.32; the graph's inputs
//! and outputs (dims, types, plain `Bindings::input`); a plan with a bias
//! round-tripping through its JSON; a property test over random
//! combinations of the bias options with the existing ones.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use crate::support;
use crate::support::sdpa_plans::{
    bwd_parts as bwd, counts, fwd_parts as fwd, loaded, names_option,
};
use cudnn::Error;
use cudnn::graph::*;
use proptest::prelude::*;
use support::*;

// No "h100" in the per-case loops: cuDNN plans every attention graph for
// it exactly as for the H200 (both sm_90 with 132 SMs), which
// `plan_targets::host::sdpa_h100_plans_as_h200` checks on a sample of these cases.
const TARGETS: [&str; 4] = ["h200", "b200", "a100", "l4"];

fn base() -> SdpaConfig {
    SdpaConfig::new(2, 8, 256, 64, DType::BF16)
}

/// The bias cases: (name, backward, config).
pub(crate) fn cases() -> Vec<(&'static str, bool, SdpaConfig)> {
    vec![
        ("fwd bias full", false, base().bias(AttnBias::full())),
        (
            "fwd bias batch-broadcast",
            false,
            base().bias(AttnBias::new(false, true)),
        ),
        (
            "fwd bias [1,1] causal",
            false,
            base().bias(AttnBias::new(false, false)).causal(true),
        ),
        (
            "fwd bias f32 train",
            false,
            base()
                .bias(AttnBias::full().with_dtype(DType::F32))
                .training(true),
        ),
        (
            "fwd bias padding train",
            false,
            base()
                .bias(AttnBias::new(false, true))
                .padding(true)
                .training(true),
        ),
        ("fwd alibi causal", false, base().causal(true).alibi(true)),
        (
            "fwd alibi causal train",
            false,
            base().causal(true).alibi(true).training(true),
        ),
        ("bwd bias full", true, base().bias(AttnBias::full())),
        (
            "bwd bias full dbias",
            true,
            base().bias(AttnBias::full().with_dbias(true)),
        ),
        (
            "bwd bias [1,H] dbias causal",
            true,
            base()
                .bias(AttnBias::new(false, true).with_dbias(true))
                .causal(true),
        ),
        (
            "bwd bias [1,1] dbias",
            true,
            base().bias(AttnBias::new(false, false).with_dbias(true)),
        ),
        (
            "bwd bias [B,1] dbias",
            true,
            base().bias(AttnBias::new(true, false).with_dbias(true)),
        ),
        (
            "bwd bias dbias padding",
            true,
            base().bias(AttnBias::full().with_dbias(true)).padding(true),
        ),
        ("bwd alibi causal", true, base().causal(true).alibi(true)),
        // With the other options.
        (
            "fwd bias paged decode",
            false,
            SdpaConfig::new(2, 8, 1, 128, DType::BF16)
                .gqa(2)
                .kv_len(1024)
                .paged(64, 40)
                .bias(AttnBias::new(false, true)),
        ),
        (
            "fwd bias ragged",
            false,
            base().ragged().padding(true).bias(AttnBias::full()),
        ),
        (
            "fwd alibi window",
            false,
            base().causal(true).alibi(true).sliding_window(64),
        ),
        (
            "bwd bias dbias gqa dropout",
            true,
            base()
                .gqa(2)
                .dropout(0.1)
                .bias(AttnBias::new(false, true).with_dbias(true)),
        ),
        (
            "bwd bias dbias ragged",
            true,
            base()
                .ragged()
                .padding(true)
                .bias(AttnBias::full().with_dbias(true)),
        ),
    ]
}

/// Case `only` of [`cases`] planned for every target (one trial per
/// case, so the harness spreads the cases over its threads).
fn plan_per_target(only: usize) -> TestResult {
    let v = loaded();
    let mut failures = Vec::new();
    for (name, backward, cfg) in cases().into_iter().skip(only).take(1) {
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
                    for tgt in crate::support::targets(&TARGETS) {
                        match counts(&g, tgt, if tgt == "h200" { 3 } else { 1 }) {
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
                            }
                            Err(e @ Error::Unsupported { .. }) => {
                                eprintln!("{name:<30} {imp:?} {tgt}: refused (typed): {e}");
                                // The composite must plan on Hopper (what
                                // `Auto` gives every backward): `counts`
                                // is an error, never 0 plans, when none
                                // finalizes.
                                if *r == SdpaImpl::Composite && matches!(tgt, "h200" | "h100") {
                                    failures.push(format!("{name} {imp:?} on {tgt}: {e}"));
                                }
                            }
                            Err(e) => {
                                eprintln!("{name:<30} {imp:?} {tgt}: error: {e}");
                                if *r == SdpaImpl::Composite && matches!(tgt, "h200" | "h100") {
                                    failures.push(format!("{name} {imp:?} on {tgt}: {e}"));
                                }
                            }
                        }
                    }
                }
                (Err(e), Err(b)) => {
                    eprintln!("{name:<30} {imp:?}: refused on cuDNN {v:?} (typed): {e}");
                    if !names_option(e) || !names_option(&b) {
                        failures.push(format!("{name} {imp:?}: untyped refusal {e:?} / {b:?}"));
                    }
                    // cuDNN 9.28 has every bias option on both
                    // constructions (a native backward with dropout is
                    // refused by design: see `SdpaImpl::Native`).
                    if v >= (9, 28, 0) && !e.to_string().contains("backward with dropout") {
                        failures.push(format!("{name} {imp:?}: refused on {v:?}: {e}"));
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

/// The rules as pure functions, against NVIDIA's frontend 1.32.
fn version_rules() -> TestResult {
    let bias = base().bias(AttnBias::full());
    let native = |c: &SdpaConfig| c.clone().implementation(SdpaImpl::Native);
    // The SDPA operation takes a bias / ALiBi from 9.21 (its subgraph).
    unsupported_naming(
        native(&bias).resolve_for((9, 19, 0), false),
        "bias",
        "9.21.0",
    )?;
    ensure!(
        native(&bias).resolve_for((9, 21, 0), false)? == SdpaImpl::Native,
        "9.21 native"
    );
    let alibi = base().causal(true).alibi(true);
    // (ALiBi needs a causal mask, which the operation also takes from 9.21.)
    unsupported_naming(
        native(&alibi).resolve_for((9, 19, 0), false),
        "SdpaConfig",
        "9.21.0",
    )?;
    ensure!(
        native(&alibi).resolve_for((9, 21, 0), false)? == SdpaImpl::Native,
        "alibi 9.21"
    );
    // Auto: composite below 9.21, native from it.
    ensure!(
        bias.resolve_for((9, 19, 0), false)? == SdpaImpl::Composite,
        "auto 9.19"
    );
    ensure!(
        bias.resolve_for((9, 21, 0), false)? == SdpaImpl::Native,
        "auto 9.21"
    );
    ensure!(
        alibi.resolve_for((9, 28, 1), true)? == SdpaImpl::Composite,
        "auto bwd"
    );
    // dBias: the native backward from 9.28 (DBIAS_DESC).
    let db = base().bias(AttnBias::full().with_dbias(true));
    unsupported_naming(native(&db).resolve_for((9, 21, 0), true), "dbias", "9.28.0")?;
    ensure!(
        native(&db).resolve_for((9, 28, 0), true)? == SdpaImpl::Native,
        "native dbias"
    );
    // The operation's dBias has dQ's type (cuDNN's header): an f32 bias on
    // bf16 I/O is refused there, taken by the composite (any bias type).
    let db32 = base().bias(AttnBias::full().with_dtype(DType::F32).with_dbias(true));
    unsupported_naming(
        native(&db32).resolve_for((9, 28, 1), true),
        "dbias",
        "dQ's data type",
    )?;
    ensure!(
        db32.resolve_for((9, 28, 1), true)? == SdpaImpl::Composite,
        "auto f32 dbias"
    );
    ensure!(
        native(&db32).resolve_for((9, 28, 1), false)? == SdpaImpl::Native,
        "the forward takes an f32 bias"
    );
    // dBias before 9.5: no padding, lengths multiples of 64.
    unsupported_naming(
        db.clone().padding(true).resolve_for((9, 4, 0), true),
        "dbias",
        "9.5.0",
    )?;
    unsupported_naming(
        db.clone().kv_len(200).resolve_for((9, 4, 0), true),
        "dbias",
        "9.5.0",
    )?;
    ensure!(
        db.resolve_for((9, 4, 0), true).is_ok(),
        "9.4 dbias with 256 / 256"
    );
    ensure!(
        db.clone()
            .padding(true)
            .resolve_for((9, 5, 0), true)
            .is_ok(),
        "9.5 dbias"
    );
    // The forward ignores dbias.
    ensure!(
        db.clone()
            .padding(true)
            .resolve_for((9, 4, 0), false)
            .is_ok(),
        "fwd dbias"
    );
    // Not with a bottom-right causal mask.
    unsupported_naming(
        bias.clone()
            .causal_bottom_right()
            .resolve_for((9, 28, 1), false),
        "bias",
        "bottom-right",
    )?;
    unsupported_naming(
        alibi
            .clone()
            .diagonal(DiagonalAlignment::BottomRight)
            .resolve_for((9, 28, 1), false),
        "alibi",
        "bottom-right",
    )?;
    // ALiBi needs a causal mask.
    unsupported_naming(
        base().alibi(true).resolve_for((9, 28, 1), false),
        "alibi",
        "causal",
    )?;
    // A window with a bias before 9.10.2.
    let w = bias.clone().causal(true).sliding_window(64);
    unsupported_naming(w.resolve_for((9, 9, 0), false), "bias", "9.10.2")?;
    ensure!(
        w.resolve_for((9, 10, 2), false).is_ok(),
        "window + bias 9.10.2"
    );
    // Types: the I/O type or f32, never boolean.
    for (dt, ok) in [
        (DType::BF16, true),
        (DType::F32, true),
        (DType::F16, false),
        (DType::Bool, false),
        (DType::I32, false),
    ] {
        let c = base().bias(AttnBias::full().with_dtype(dt));
        match c.resolve_for((9, 28, 1), false) {
            Ok(_) => ensure!(ok, "{dt:?} accepted"),
            Err(e @ Error::InvalidArgument { .. }) => {
                ensure!(!ok, "{dt:?} refused: {e}");
                ensure!(e.to_string().contains("bias.dtype"), "{e}");
            }
            Err(e) => return Err(format!("{dt:?}: untyped {e:?}").into()),
        }
    }
    // dBias with ragged batches: not on sm_100.
    let rg = base()
        .bias(AttnBias::full().with_dbias(true))
        .ragged()
        .padding(true);
    match rg.check_target_for(true, 1000, (9, 28, 1)) {
        Err(e @ Error::Unsupported { .. }) => ensure!(e.to_string().contains("dBias"), "{e}"),
        other => return Err(format!("sm_100 ragged dbias: {other:?}").into()),
    }
    ensure!(
        rg.check_target_for(true, 900, (9, 28, 1)).is_ok(),
        "sm_90 ragged dbias"
    );
    ensure!(
        rg.check_target_for(false, 1000, (9, 28, 1)).is_ok(),
        "sm_100 fwd"
    );
    Ok(())
}

/// The graph's bias inputs and dBias output: dims, types, names; the
/// plan binds them with the plain `Bindings::input`.
fn graph_tensors() -> TestResult {
    let cfg = SdpaConfig::new(3, 4, 128, 64, DType::F16)
        .kv_len(256)
        .causal(true)
        .alibi(true)
        .bias(AttnBias::new(false, true).with_dbias(true))
        .implementation(SdpaImpl::Composite);
    let (g, f) = fwd(&cfg)?;
    let b = f.bias.bias.ok_or("no bias input")?;
    let s = f.bias.alibi_slopes.ok_or("no slopes input")?;
    ensure!(f.bias.dbias.is_none(), "forward made dBias");
    ensure!(
        g.spec(b)?.dims() == [1, 4, 128, 256],
        "bias dims {:?}",
        g.spec(b)?.dims()
    );
    ensure!(g.spec(b)?.dtype() == DType::F16, "bias type");
    ensure!(g.spec(s)?.dims() == [1, 4, 1, 1], "slopes dims");
    ensure!(g.spec(s)?.dtype() == DType::F32, "slopes type");
    let (g, bw) = bwd(&cfg)?;
    let d = bw.bias.dbias.ok_or("no dbias")?;
    ensure!(g.spec(d)?.dims() == [1, 4, 128, 256], "dbias dims");
    ensure!(g.spec(d)?.dtype() == DType::F16, "dbias type");
    // Without the options nothing is made.
    let (_, f) = fwd(&base())?;
    ensure!(f.bias == BiasTensors::default(), "{:?}", f.bias);
    // A bias of the wrong dims cannot be built: the spec comes from the config.
    ensure!(
        base().bias(AttnBias::full()).bias_spec()?.dims() == [2, 8, 256, 256],
        "full bias dims"
    );
    Ok(())
}

/// A planned bias graph binds its bias and slopes with the plain
/// `Bindings::input` (they are ordinary float inputs), and its plan
/// round-trips through JSON (save, load, same engine); a tampered plan is
/// refused.
fn plan_json_round_trip() -> TestResult {
    for imp in [SdpaImpl::Composite, SdpaImpl::Native] {
        let cfg = base()
            .causal(true)
            .alibi(true)
            .bias(AttnBias::new(false, true))
            .implementation(imp);
        if cfg.resolve(false).is_err() {
            eprintln!(
                "note: {imp:?} bias forward unavailable on cuDNN {:?}",
                loaded()
            );
            continue;
        }
        let (g, _) = fwd(&cfg)?;
        let og = g.build()?;
        let t = Target::preset("h200")?;
        // Attention engines compile at run time: the plan carries its
        // kernels, so it reloads as trusted (its structure and every
        // tensor still checked against the graph's).
        let (plan, _) = Plan::build(&og, &t, &Policy::default())?;
        let json = plan.cudnn_json()?;
        let io = std::sync::Arc::new(og.io().clone());
        // SAFETY: `json` is cuDNN's JSON, unchanged, of the plan built just above with the
        // loaded cuDNN, and `io` is that plan's own IoSignature.
        let back = unsafe { Plan::from_cudnn_json_unverified(&json, &t, io.clone()) }?;
        let engine_id = |j: &str| {
            j.split("\"engineId\"")
                .nth(1)
                .map(|r| r.trim_start_matches([':', ' ']))
                .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
                .filter(|d| !d.is_empty())
                .map(str::to_string)
        };
        let again = back.cudnn_json()?;
        ensure!(
            engine_id(&json).is_some() && engine_id(&json) == engine_id(&again),
            "{imp:?}: engine changed on reload: {:?} -> {:?}",
            engine_id(&json),
            engine_id(&again)
        );
        ensure!(
            back.workspace_size() == plan.workspace_size(),
            "{imp:?}: workspace changed on reload"
        );
        eprintln!(
            "{imp:?}: plan JSON ({} bytes) reloads with engine {:?}",
            json.len(),
            engine_id(&again)
        );
        // Tampered: the bias or the slopes resized (the tensors the graph
        // binds no longer the plan's).
        for (from, to) in [
            ("\"dim\":[1,8,256,256]", "\"dim\":[2,8,256,256]"),
            ("\"dim\":[1,8,1,1]", "\"dim\":[1,16,1,1]"),
        ] {
            let bad = json.replacen(from, to, 1);
            ensure!(bad != json, "{imp:?}: nothing to tamper ({from})");
            // SAFETY: outside the contract on purpose: `bad` is an edit (the bias or the
            // slopes resized) that the crate's checks must refuse before cuDNN sees it; the
            // typed refusal is asserted below, and no plan is executed.
            match unsafe { Plan::from_cudnn_json_unverified(&bad, &t, io.clone()) } {
                Err(e) => eprintln!("{imp:?}: tampered ({from} -> {to}) refused: {e}"),
                Ok(_) => return Err(format!("{imp:?}: tampered plan ({to}) accepted").into()),
            }
        }
    }
    Ok(())
}

/// Random combinations of the bias options with the existing ones: no
/// panic, every refusal typed and naming the option, bounded time.
fn property_random() -> TestResult {
    use std::cell::Cell;
    let v = loaded();
    // (cases, graphs built, with a bias or ALiBi, plans tried, typed refusals)
    let tally = [
        Cell::new(0u32),
        Cell::new(0),
        Cell::new(0),
        Cell::new(0),
        Cell::new(0),
    ];
    let bump = |i: usize| tally[i].set(tally[i].get() + 1);
    let mut runner = crate::support::prop_runner(128);
    let strat = (
        (
            1i64..3,
            prop_oneof![Just(1i64), Just(2), Just(4)],
            prop_oneof![3 => Just(128i64), 1 => 1i64..300],
            prop_oneof![3 => Just(128i64), 1 => 1i64..600],
        ),
        (
            any::<bool>(),
            prop::bool::weighted(0.2),
            any::<bool>(),
            any::<bool>(),
        ),
        (
            prop_oneof![1 => Just(None), 3 => (any::<bool>(), any::<bool>()).prop_map(Some)],
            any::<bool>(),
            prop_oneof![6 => Just(0u8), 1 => Just(1), 1 => Just(2), 1 => Just(3)],
            prop::bool::weighted(0.35),
        ),
        (
            prop_oneof![3 => Just(None), 1 => (-2i64..400).prop_map(Some)],
            prop_oneof![3 => Just(0.0f64), 1 => Just(0.1)],
            0u8..3,
            any::<bool>(),
        ),
        (
            prop::bool::weighted(0.15),
            prop::bool::weighted(0.15),
            prop::bool::weighted(0.3),
        ),
    );
    runner
        .run(
            &strat,
            |(
                (b, h, sq, skv),
                (causal, br, padding, training),
                (bias, dbias, dt, alibi),
                (window, p, imp, bwd_),
                (ragged, paged, plan),
            )| {
                let mut c = SdpaConfig::new(b, h, sq, 64, DType::BF16)
                    .kv_len(skv)
                    .causal(causal)
                    .padding(padding)
                    .training(training)
                    .dropout(p)
                    .alibi(alibi)
                    .implementation(
                        [SdpaImpl::Auto, SdpaImpl::Native, SdpaImpl::Composite][imp as usize],
                    );
                if br {
                    c = c.diagonal(DiagonalAlignment::BottomRight);
                }
                if let Some(w) = window {
                    c = c.sliding_window(w);
                }
                if let Some((pb, ph)) = bias {
                    let dt = [DType::BF16, DType::F32, DType::F16, DType::Bool][dt as usize];
                    c = c.bias(AttnBias::new(pb, ph).with_dbias(dbias).with_dtype(dt));
                }
                if ragged {
                    c = c.ragged().padding(padding);
                }
                if paged {
                    c = c.paged(64, 16).padding(padding);
                }
                for ver in [
                    (9, 0, 0),
                    (9, 4, 0),
                    (9, 5, 0),
                    (9, 10, 2),
                    (9, 19, 0),
                    (9, 21, 0),
                    (9, 28, 1),
                ] {
                    if let Err(e) = c.resolve_for(ver, bwd_) {
                        prop_assert!(names_option(&e), "untyped or unnamed refusal {e:?}");
                    }
                    for dev in [800, 890, 900, 1000] {
                        if let Err(e) = c.check_target_for(bwd_, dev, ver) {
                            prop_assert!(names_option(&e), "untyped target refusal {e:?}");
                        }
                    }
                }
                let g = if bwd_ {
                    bwd(&c).map(|x| x.0)
                } else {
                    fwd(&c).map(|x| x.0)
                };
                bump(0);
                match (&g, c.resolve(bwd_)) {
                    (Ok(_), Ok(_)) => {
                        bump(1);
                        if c.bias.is_some() || c.alibi {
                            bump(2);
                        }
                    }
                    (Err(e), Err(_)) => {
                        bump(4);
                        prop_assert!(
                            names_option(e) || matches!(e, Error::Mismatch { .. }),
                            "{e:?}"
                        )
                    }
                    (g, r) => prop_assert!(
                        false,
                        "builder {:?} vs resolve {r:?} on {v:?}",
                        g.as_ref().err()
                    ),
                }
                if plan
                    && sq <= 256
                    && skv <= 256
                    && let Ok(g) = g
                {
                    bump(3);
                    match counts(&g, "h200", 1) {
                        Ok(_) => {}
                        Err(e) => prop_assert!(
                            names_option(&e) || matches!(e, Error::Cudnn { .. }),
                            "{e:?}"
                        ),
                    }
                }
                Ok(())
            },
        )
        .map_err(|e| format!("{e}"))?;
    let [cases, built, with_bias, planned, refused] = tally.map(|c| c.get());
    eprintln!(
        "bias property: {cases} cases, {built} graphs built ({with_bias} with a bias or ALiBi), {planned} planned for an H200, {refused} refused (typed)"
    );
    ensure!(
        with_bias > 0 && refused > 0,
        "the property test exercised nothing"
    );
    Ok(())
}

// ---- the f64 reference's bias and ALiBi (unit tier) ----

use cudnn::reference::attention::{self as ref_attn, CausalMask, View};

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * (1.0 + b.abs())
}

/// Hand cases: q = 0, so the scores are the bias / ALiBi terms alone.
fn reference_hand_cases() -> TestResult {
    // One query, two keys, a shared [1, 1, 1, 2] bias [0, ln 3] on two
    // batches and two heads: P = [1/4, 3/4] everywhere, O = (4 + 3 * 8) / 4.
    let q = [0.0; 4];
    let k = [1.0, -2.0, 0.5, 7.0];
    let v = [4.0, 8.0, 4.0, 8.0];
    let bias = [0.0, 3f64.ln()];
    let mut cfg = ref_attn::SdpaConfig::new(1.0);
    cfg.bias = Some(View::bhsd(&bias, [1, 1, 1, 2]));
    // q [2, 2, 1, 1]; k, v [2, 1, 2, 1] (GQA 2:1).
    let f = ref_attn::forward(
        &View::bhsd(&q, [2, 2, 1, 1]),
        &View::bhsd(&k, [2, 1, 2, 1]),
        &View::bhsd(&v, [2, 1, 2, 1]),
        &cfg,
    )?;
    for (r, (&o, &st)) in f.o.iter().zip(&f.stats).enumerate() {
        ensure!(close(o, 7.0, 1e-12), "row {r}: O {o} != 7");
        ensure!(close(st, 4f64.ln(), 1e-12), "row {r}: stats {st} != ln 4");
    }
    // A per-batch bias [2, 1, 1, 2]: batch 1's [ln 3, 0] gives P = [3/4, 1/4].
    let bias2 = [0.0, 3f64.ln(), 3f64.ln(), 0.0];
    cfg.bias = Some(View::bhsd(&bias2, [2, 1, 1, 2]));
    let f = ref_attn::forward(
        &View::bhsd(&q, [2, 2, 1, 1]),
        &View::bhsd(&k, [2, 1, 2, 1]),
        &View::bhsd(&v, [2, 1, 2, 1]),
        &cfg,
    )?;
    ensure!(
        close(f.o[0], 7.0, 1e-12) && close(f.o[2], 5.0, 1e-12),
        "per-batch {:?}",
        f.o
    );
    // ALiBi, causal, two queries, two keys, slopes [ln 3, 0]: query 1 of
    // head 0 scores [-ln 3, 0] (P = [1/4, 3/4], O = 7), head 1 [0, 0]
    // (O = 6); query 0 sees key 0 only (O = 4).
    let q = [0.0; 4];
    let k = [0.0; 2];
    let v = [4.0, 8.0];
    let slopes = [3f64.ln(), 0.0];
    let mut cfg = ref_attn::SdpaConfig::new(1.0);
    cfg.causal = CausalMask::TopLeft;
    cfg.alibi_slopes = Some(&slopes);
    let f = ref_attn::forward(
        &View::bhsd(&q, [1, 2, 2, 1]),
        &View::bhsd(&k, [1, 1, 2, 1]),
        &View::bhsd(&v, [1, 1, 2, 1]),
        &cfg,
    )?;
    let want = [4.0, 7.0, 4.0, 6.0];
    for (r, (&o, &w)) in f.o.iter().zip(&want).enumerate() {
        ensure!(close(o, w, 1e-12), "alibi row {r}: O {o} != {w}");
    }
    // Stats of query 1, head 0: ln(e^-ln3 + 1) = ln(4/3).
    ensure!(
        close(f.stats[1], (4.0f64 / 3.0).ln(), 1e-12),
        "alibi stats {:?}",
        f.stats
    );
    // Refusals: wrong bias dims, wrong slope count, non-finite slope.
    let bad = [0.0; 6];
    cfg.alibi_slopes = None;
    cfg.bias = Some(View::bhsd(&bad, [1, 1, 2, 3]));
    let r = ref_attn::forward(
        &View::bhsd(&q, [1, 2, 2, 1]),
        &View::bhsd(&k, [1, 1, 2, 1]),
        &View::bhsd(&v, [1, 1, 2, 1]),
        &cfg,
    );
    ensure!(
        matches!(r, Err(Error::Mismatch { .. })),
        "bad bias dims: {r:?}"
    );
    cfg.bias = None;
    let one = [1.0];
    cfg.alibi_slopes = Some(&one);
    let r = ref_attn::forward(
        &View::bhsd(&q, [1, 2, 2, 1]),
        &View::bhsd(&k, [1, 1, 2, 1]),
        &View::bhsd(&v, [1, 1, 2, 1]),
        &cfg,
    );
    ensure!(
        matches!(r, Err(Error::Mismatch { .. })),
        "bad slope count: {r:?}"
    );
    let nan = [f64::NAN, 1.0];
    cfg.alibi_slopes = Some(&nan);
    let r = ref_attn::forward(
        &View::bhsd(&q, [1, 2, 2, 1]),
        &View::bhsd(&k, [1, 1, 2, 1]),
        &View::bhsd(&v, [1, 1, 2, 1]),
        &cfg,
    );
    ensure!(
        matches!(r, Err(Error::InvalidArgument { .. })),
        "NaN slope: {r:?}"
    );
    Ok(())
}

/// A deterministic pseudo-random vector in [-1, 1).
fn rnd(n: usize, seed: u64) -> Vec<f64> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        })
        .collect()
}

/// Finite differences: dQ, dK, dV with a bias and ALiBi, and dBias
/// (broadcast and full), against central differences of
/// `L = sum(O ⊙ dO)`.
fn reference_finite_differences() -> TestResult {
    let (b, h, hkv, sq, skv, d) = (2usize, 2usize, 1usize, 3usize, 4usize, 2usize);
    let q = rnd(b * h * sq * d, 1);
    let k = rnd(b * hkv * skv * d, 2);
    let v = rnd(b * hkv * skv * d, 3);
    let d_o = rnd(b * h * sq * d, 4);
    let slopes = [0.5, 0.125];
    // Padding (batch 1: 2 of 3 queries, 3 of 4 keys) and dropout
    // multipliers (0 or 1 / (1 - 0.25)) with the [B, 1] bias: dBias is the
    // gradient of the dropout-scaled loss, zero where the masks drop.
    let (len_q, len_kv) = ([sq, 2], [skv, 3]);
    let keep: Vec<f64> = rnd(b * h * sq * skv, 9)
        .iter()
        .map(|&x| if x < -0.5 { 0.0 } else { 1.0 / 0.75 })
        .collect();
    let mut checked = 0;
    for (bdims, causal, masked) in [
        ([1, h, sq, skv], true, false),
        ([b, h, sq, skv], false, false),
        ([1, 1, sq, skv], true, false),
        ([b, 1, sq, skv], false, true),
    ] {
        let n: usize = bdims.iter().product();
        let bias = rnd(n, 5 + n as u64);
        let loss = |q: &[f64], k: &[f64], v: &[f64], bias: &[f64]| -> Result<f64, Error> {
            let mut cfg = ref_attn::SdpaConfig::new(0.7);
            cfg.bias = Some(View::bhsd(bias, bdims));
            if causal {
                cfg.causal = CausalMask::TopLeft;
                cfg.alibi_slopes = Some(&slopes);
            }
            if masked {
                cfg.seq_len_q = Some(&len_q);
                cfg.seq_len_kv = Some(&len_kv);
                cfg.dropout = Some(&keep);
            }
            let f = ref_attn::forward(
                &View::bhsd(q, [b, h, sq, d]),
                &View::bhsd(k, [b, hkv, skv, d]),
                &View::bhsd(v, [b, hkv, skv, d]),
                &cfg,
            )?;
            Ok(f.o.iter().zip(&d_o).map(|(a, g)| a * g).sum())
        };
        let mut cfg = ref_attn::SdpaConfig::new(0.7);
        cfg.bias = Some(View::bhsd(&bias, bdims));
        if causal {
            cfg.causal = CausalMask::TopLeft;
            cfg.alibi_slopes = Some(&slopes);
        }
        if masked {
            cfg.seq_len_q = Some(&len_q);
            cfg.seq_len_kv = Some(&len_kv);
            cfg.dropout = Some(&keep);
        }
        let (qv, kv, vv) = (
            View::bhsd(&q, [b, h, sq, d]),
            View::bhsd(&k, [b, hkv, skv, d]),
            View::bhsd(&v, [b, hkv, skv, d]),
        );
        let f = ref_attn::forward(&qv, &kv, &vv, &cfg)?;
        let ov = View::bhsd(&f.o, [b, h, sq, d]);
        let dov = View::bhsd(&d_o, [b, h, sq, d]);
        let g = ref_attn::backward(&qv, &kv, &vv, &ov, &dov, &f.stats, &cfg)?;
        let db = ref_attn::dbias(&qv, &kv, &vv, &ov, &dov, &f.stats, &cfg)?;
        ensure!(db.len() == n, "dbias length {} != {n}", db.len());
        let eps = 1e-5;
        let fd = |which: usize, i: usize| -> Result<f64, Error> {
            let mut bufs = [q.clone(), k.clone(), v.clone(), bias.clone()];
            bufs[which][i] += eps;
            let up = loss(&bufs[0], &bufs[1], &bufs[2], &bufs[3])?;
            bufs[which][i] -= 2.0 * eps;
            let down = loss(&bufs[0], &bufs[1], &bufs[2], &bufs[3])?;
            Ok((up - down) / (2.0 * eps))
        };
        for (which, name, grad) in [
            (0, "dq", &g.dq),
            (1, "dk", &g.dk),
            (2, "dv", &g.dv),
            (3, "dbias", &db),
        ] {
            for (i, &an) in grad.iter().enumerate() {
                let num = fd(which, i)?;
                ensure!(
                    close(an, num, 1e-6),
                    "{name}[{i}] bias {bdims:?}: analytic {an} vs numeric {num}"
                );
                checked += 1;
            }
        }
        // dBias is not zero (the check above is not vacuous).
        ensure!(db.iter().any(|x| x.abs() > 1e-3), "dbias all ~0: {db:?}");
        if masked {
            // Batch 1's padded query row and key column get no gradient,
            // and some kept entries of batch 0 do.
            let at = |n: usize, i: usize, j: usize| db[(n * sq + i) * skv + j];
            ensure!(
                (0..skv).all(|j| at(1, 2, j) == 0.0) && (0..sq).all(|i| at(1, i, 3) == 0.0),
                "padded dbias not zero: {db:?}"
            );
            ensure!(keep.contains(&0.0), "no entry dropped");
        }
    }
    eprintln!("reference bias / ALiBi finite differences: {checked} gradient entries");
    Ok(())
}

pub fn main() {
    let mut t: Vec<_> = cases()
        .iter()
        .enumerate()
        .map(|(i, (name, ..))| {
            host_planning(
                &format!("sdpa_bias_plans_per_target::{i:02}_{}", slug(name)),
                move || plan_per_target(i),
            )
        })
        .collect();
    t.extend(vec![
        unit("sdpa_bias_version_rules", version_rules),
        unit("sdpa_reference_bias_hand_cases", reference_hand_cases),
        unit(
            "sdpa_reference_bias_finite_differences",
            reference_finite_differences,
        ),
        host("sdpa_bias_graph_tensors", graph_tensors),
        host_planning("sdpa_bias_plan_json_round_trip", plan_json_round_trip),
        host("sdpa_bias_random_combinations", property_random),
    ]);
    run(t)
}
