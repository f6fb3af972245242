//! Host tier for the attention logit softcap (issue 24, item 5a): no GPU;
//! the real cuDNN plans the softcap forward (the SDPA operation, the
//! composite, `Auto`) and backward (the composite) for the H200, B200,
//! A100 and L4 presets (the H100 plans as the H200: `plan_targets`)
//! through the driver stub and prints `engines /
//! configs / plans / engine / workspace` per target; the softcap with the
//! masks Gemma 2 uses (causal top-left and bottom-right, a window, padding:
//! refused by NVIDIA's frontend 1.32 beside its score mod, planned by
//! cuDNN) for the H200 and B200; the version rules as pure functions
//! (`resolve_for`); a property test over random combinations of the softcap
//! with the other options (the f64 reference's softcap is tested in
//! `unit/sdpa_softcap_reference`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// `ensure!(err <= tol)` must fail for NaN: a negated partial comparison on purpose.
#![allow(clippy::neg_cmp_op_on_partial_ord)]
use crate::support;
use crate::support::sdpa_plans::{
    bwd_graph as bwd, counts, fwd_graph as fwd, loaded, names_option,
};
use cudnn::Error;
use cudnn::graph::*;
use proptest::prelude::*;
use support::*;

// No "h100" in the per-case loops: cuDNN plans every attention graph for
// it exactly as for the H200 (both sm_90 with 132 SMs), which
// `plan_targets::host::sdpa_h100_plans_as_h200` checks on a sample of these cases.
const TARGETS: [&str; 4] = ["h200", "b200", "a100", "l4"];

/// A typed refusal (Unsupported / InvalidArgument) whose text names `what`.
fn refuses_naming(e: &Error, what: &str) -> bool {
    matches!(e, Error::Unsupported { .. } | Error::InvalidArgument { .. })
        && e.to_string().contains(what)
}

/// Gemma 2's cap for attention logits.
const CAP: f64 = 50.0;

/// The planning cases: (name, backward, config).
pub(crate) fn cases() -> Vec<(&'static str, bool, SdpaConfig)> {
    let base = || SdpaConfig::new(2, 8, 256, 128, DType::BF16).softcap(CAP);
    vec![
        ("fwd softcap", false, base()),
        ("fwd softcap train", false, base().training(true)),
        (
            "fwd softcap gqa cross bhsd",
            false,
            SdpaConfig::new(2, 8, 128, 64, DType::F16)
                .kv_len(512)
                .gqa(2)
                .layout(AttnLayout::Bhsd)
                .softcap(30.0),
        ),
        (
            "fwd softcap dropout train",
            false,
            base().dropout(0.1).training(true),
        ),
        ("bwd softcap", true, base()),
        (
            "bwd softcap gqa cross bhsd",
            true,
            SdpaConfig::new(2, 8, 128, 64, DType::F16)
                .kv_len(512)
                .gqa(2)
                .layout(AttnLayout::Bhsd)
                .softcap(30.0),
        ),
        ("bwd softcap dropout", true, base().dropout(0.1)),
        // The control: the same backward without a softcap.
        (
            "bwd control (no softcap)",
            true,
            SdpaConfig::new(2, 8, 256, 128, DType::BF16),
        ),
    ]
}

/// Case `only` of [`cases`] planned for every target (one trial per
/// case, so the harness spreads the cases over its threads).
fn plan_per_target(only: usize) -> TestResult {
    let v = loaded();
    let mut failures = Vec::new();
    eprintln!("cuDNN {v:?}");
    for (name, backward, cfg) in cases().into_iter().skip(only).take(1) {
        let imps: &[SdpaImpl] = if backward && cfg.softcap.is_none() {
            // The control: the composite only (the SDPA backward operation
            // has no engine on cuDNN 9.19, with or without a softcap).
            &[SdpaImpl::Auto]
        } else if backward {
            &[SdpaImpl::Auto, SdpaImpl::Native]
        } else {
            &[SdpaImpl::Native, SdpaImpl::Composite, SdpaImpl::Auto]
        };
        for &imp in imps {
            let cfg = cfg.clone().implementation(imp);
            let resolved = cfg.resolve(backward);
            let built = if backward { bwd(&cfg) } else { fwd(&cfg) };
            match (&resolved, built) {
                (Ok(r), Ok(g)) => {
                    for tgt in crate::support::targets(&TARGETS) {
                        match counts(&g, tgt, if tgt == "h200" { 3 } else { 1 }) {
                            Ok(c) => {
                                eprintln!(
                                    "{name:<28} {imp:<9} -> {r:<9} {tgt:<4}: engines {:>3} configs {:>3} plans {:>2} engine {:>4} workspace {}",
                                    c.engines,
                                    c.configs,
                                    c.plans,
                                    c.engine.map_or("-".into(), |e| e.to_string()),
                                    c.workspace.map_or("-".into(), |w| w.to_string()),
                                    imp = format!("{imp:?}"),
                                    r = format!("{r:?}"),
                                );
                            }
                            Err(e @ Error::Unsupported { .. })
                                if !matches!(tgt, "h200" | "h100") =>
                            {
                                eprintln!("{name:<28} {imp:?} {tgt}: refused (typed): {e}");
                                // The softcap's composite backward below sm_90:
                                // refused by the crate's rule, naming it.
                                if backward
                                    && imp != SdpaImpl::Native
                                    && cfg.softcap.is_some()
                                    && !e.to_string().contains("softcap")
                                {
                                    failures.push(format!("{name} {imp:?} on {tgt}: {e}"));
                                }
                            }
                            Err(e) => {
                                eprintln!("{name:<28} {imp:?} {tgt}: FAILED: {e}");
                                failures.push(format!("{name} {imp:?} on {tgt}: {e}"))
                            }
                        }
                    }
                }
                (Err(e), Err(b)) => {
                    eprintln!("{name:<28} {imp:?}: refused on cuDNN {v:?} (typed): {e}");
                    if !names_option(e) || !names_option(&b) {
                        failures.push(format!("{name} {imp:?}: untyped refusal {e:?} / {b:?}"));
                    }
                    // Only the SDPA operation refuses here: a softcap
                    // before 9.21 (or another option: dropout in training
                    // or in the backward).
                    let native_ok = v >= (9, 21, 0);
                    if imp != SdpaImpl::Native || (native_ok && refuses_naming(e, "softcap")) {
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

/// The combination and version rules as pure functions, against NVIDIA's
/// frontend 1.32 (no library needed).
fn rules() -> TestResult {
    let base = SdpaConfig::new(2, 4, 128, 64, DType::BF16).softcap(CAP);
    // Values: finite and > 0 (also as f32).
    for bad in [
        0.0,
        -1.0,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        1e39,
        1e-46,
        -0.0,
    ] {
        let e = base.clone().softcap(bad).validate().err();
        ensure!(
            e.as_ref()
                .is_some_and(|e| matches!(e, Error::InvalidArgument { .. })
                    && e.to_string().contains("softcap")),
            "softcap {bad}: want Invalid naming softcap, got {e:?}"
        );
    }
    for good in [1e-3, 1.0, 30.0, 50.0, 1e30] {
        base.clone()
            .softcap(good)
            .validate()
            .map_err(|e| format!("{good}: {e}"))?;
    }
    // With the masks (the frontend refuses them beside its generic score
    // mod; cuDNN plans them, `masks_plan`): every implementation, forward
    // and backward, from 9.21 (Native) and on every release (Composite);
    // paged and ragged as without the softcap.
    let combos: Vec<(&str, SdpaConfig)> = vec![
        ("causal", base.clone().causal(true)),
        (
            "bottom-right",
            base.clone().kv_len(256).causal_bottom_right(),
        ),
        ("window", base.clone().sliding_window(32)),
        (
            "causal window",
            base.clone().causal(true).sliding_window(32),
        ),
        ("padding", base.clone().padding(true)),
        ("padding causal", base.clone().padding(true).causal(true)),
        ("paged", base.clone().paged(64, 8).causal(true)),
        ("ragged", base.clone().ragged().causal(true)),
    ];
    for (name, c) in &combos {
        let mut nocap = c.clone();
        nocap.softcap = None;
        for ver in [(9, 10, 2), (9, 19, 0), (9, 21, 0), (9, 28, 1)] {
            for backward in [false, true] {
                for imp in [SdpaImpl::Auto, SdpaImpl::Native, SdpaImpl::Composite] {
                    let r = c.clone().implementation(imp).resolve_for(ver, backward);
                    let n = nocap.clone().implementation(imp).resolve_for(ver, backward);
                    let native_gate = imp == SdpaImpl::Native && ver < (9, 21, 0);
                    match (&r, &n) {
                        (Ok(a), Ok(b)) if a == b || imp == SdpaImpl::Auto => {}
                        (Err(e), Ok(_)) if native_gate => {
                            ensure!(refuses_naming(e, "softcap"), "{name} {ver:?}: {e}")
                        }
                        (Err(e), Err(_)) => ensure!(
                            names_option(e) && !refuses_naming(e, "`softcap` or"),
                            "{name} {ver:?} {imp:?} backward {backward}: {e}"
                        ),
                        _ => {
                            return Err(format!(
                                "{name} {ver:?} {imp:?} backward {backward}: with softcap {r:?}, without {n:?}"
                            )
                            .into());
                        }
                    }
                }
                // The composite takes every mask on every release.
                if name.starts_with("causal") || name.starts_with("window") {
                    let r = c
                        .clone()
                        .implementation(SdpaImpl::Composite)
                        .resolve_for(ver, backward);
                    ensure!(
                        r.as_ref().ok() == Some(&SdpaImpl::Composite),
                        "{name} composite {ver:?} backward {backward}: {r:?}"
                    );
                }
            }
        }
    }
    // With the rest: dropout, GQA, BHSD, training; a bottom-right
    // alignment without a mask means nothing and is accepted.
    for c in [
        base.clone().dropout(0.2).training(true),
        base.clone().gqa(2).layout(AttnLayout::Bhsd),
        base.clone()
            .diagonal(DiagonalAlignment::BottomRight)
            .kv_len(512),
    ] {
        for ver in [(9, 10, 2), (9, 19, 0), (9, 28, 1)] {
            ensure!(
                c.clone()
                    .implementation(SdpaImpl::Composite)
                    .resolve_for(ver, false)
                    .ok()
                    == Some(SdpaImpl::Composite),
                "composite forward {ver:?}"
            );
            ensure!(
                c.resolve_for(ver, true).ok() == Some(SdpaImpl::Composite),
                "auto backward {ver:?}"
            );
        }
    }
    // The composite backward below sm_90 is refused naming the softcap;
    // the SDPA backward operation and every forward are not.
    for dev in [800, 860, 890, 1200] {
        let e = base.check_target_for(true, dev, (9, 28, 1));
        ensure!(
            e.as_ref().is_err_and(|e| refuses_naming(e, "softcap")),
            "composite backward on {dev}: {e:?}"
        );
        base.check_target_for(false, dev, (9, 28, 1))?;
        base.clone()
            .implementation(SdpaImpl::Native)
            .check_target_for(true, dev, (9, 28, 1))?;
    }
    for dev in [900, 1000] {
        base.check_target_for(true, dev, (9, 28, 1))?;
    }
    // Native: forward and backward from 9.21 (its subgraph).
    let n = base.clone().implementation(SdpaImpl::Native);
    for (ver, ok) in [
        ((9, 13, 1), false),
        ((9, 19, 0), false),
        ((9, 20, 0), false),
        ((9, 21, 0), true),
        ((9, 28, 1), true),
    ] {
        let r = n.resolve_for(ver, false);
        match (ok, r) {
            (true, Ok(SdpaImpl::Native)) => {}
            (false, Err(e)) => ensure!(
                refuses_naming(&e, "softcap") && e.to_string().contains("9.21.0"),
                "{ver:?}: {e}"
            ),
            (ok, r) => {
                return Err(format!("native forward {ver:?}: want ok={ok}, got {r:?}").into());
            }
        }
        // The backward likewise (before 9.21 the SDPA backward operation
        // itself is refused first).
        let b = n.resolve_for(ver, true);
        let want = if ver >= (9, 21, 0) {
            "softcap"
        } else {
            "backward"
        };
        match (ok, &b) {
            (true, Ok(SdpaImpl::Native)) => {}
            (false, Err(e)) => ensure!(refuses_naming(e, want), "native backward {ver:?}: {e}"),
            _ => return Err(format!("native backward {ver:?}: want ok={ok}, got {b:?}").into()),
        }
        // Auto: the SDPA operation where it takes the softcap, else the composite.
        let a = base.resolve_for(ver, false);
        let want = if ok {
            SdpaImpl::Native
        } else {
            SdpaImpl::Composite
        };
        ensure!(
            a.as_ref().ok() == Some(&want),
            "auto forward {ver:?}: {a:?}"
        );
    }
    Ok(())
}

/// Random combinations of the softcap with every other option: no panic,
/// every refusal typed and naming an option (the softcap's naming
/// `softcap`), the builder agreeing with `resolve`, bounded time.
fn property_softcap_combinations() -> TestResult {
    let v = loaded();
    let mut runner = crate::support::prop_runner(128);
    let strat = (
        (
            1i64..3,
            prop_oneof![Just(1i64), Just(2), Just(4)],
            1i64..300,
            1i64..600,
            prop_oneof![Just(64i64), Just(128), Just(72)],
        ),
        (
            prop_oneof![
                Just(50.0f64),
                Just(1.0),
                Just(0.0),
                Just(-3.0),
                Just(f64::NAN),
                Just(f64::INFINITY),
                Just(1e300),
                Just(1e-300),
                (1e-3f64..1e4)
            ],
            any::<bool>(),
            any::<bool>(),
            prop_oneof![Just(None), Just(Some(32i64)), Just(Some(0))],
        ),
        (
            any::<bool>(),
            any::<bool>(),
            prop_oneof![Just(0.0f64), Just(0.1)],
            0u8..3,
            any::<bool>(),
            any::<bool>(),
        ),
        (0u8..3, any::<bool>()),
    );
    runner
        .run(
            &strat,
            |(
                (b, h, sq, skv, d),
                (cap, causal, br, window),
                (padding, training, p, imp, backward, bshd),
                (special, plan),
            )| {
                let mut c = SdpaConfig::new(b, h, sq, d, DType::BF16)
                    .kv_len(skv)
                    .softcap(cap)
                    .causal(causal)
                    .padding(padding)
                    .training(training)
                    .dropout(p)
                    .layout(if bshd {
                        AttnLayout::Bshd
                    } else {
                        AttnLayout::Bhsd
                    })
                    .implementation(
                        [SdpaImpl::Auto, SdpaImpl::Native, SdpaImpl::Composite][imp as usize],
                    );
                if br {
                    c = c.diagonal(DiagonalAlignment::BottomRight);
                }
                if let Some(w) = window {
                    c = c.sliding_window(w);
                }
                match special {
                    1 => c = c.paged(64, 8),
                    2 => c = c.ragged(),
                    _ => {}
                }
                // The softcap adds no refusal where cuDNN's SDPA operation
                // takes it (9.21 on): with a valid cap, a config resolves
                // exactly when the same config without the cap does (masks,
                // paged and ragged included).
                let valid = cap.is_finite() && cap > 0.0 && (cap as f32).is_normal();
                let mut nocap = c.clone();
                nocap.softcap = None;
                for ver in [(9, 10, 2), (9, 19, 0), (9, 21, 0), (9, 28, 1)] {
                    let r = c.resolve_for(ver, backward);
                    if let Err(e) = &r {
                        prop_assert!(names_option(e), "untyped refusal {e:?}");
                    }
                    if valid && ver >= (9, 21, 0) {
                        let n = nocap.resolve_for(ver, backward);
                        prop_assert!(
                            r.is_ok() == n.is_ok(),
                            "softcap {cap} on {ver:?}: {r:?}, without it {n:?}: {c:?}"
                        );
                    }
                    for dev in [800, 890, 900, 1000] {
                        if let Err(e) = c.check_target_for(backward, dev, ver) {
                            prop_assert!(names_option(&e), "untyped target refusal {e:?}");
                        }
                    }
                }
                let g = if backward { bwd(&c) } else { fwd(&c) };
                match (&g, c.resolve(backward)) {
                    (Ok(_), Ok(_)) => {}
                    (Err(e), Err(_)) => prop_assert!(
                        names_option(e) || matches!(e, Error::Mismatch { .. }),
                        "{e:?}"
                    ),
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
        .map_err(|e| format!("{e}").into())
}

/// A softcap plan (the SDPA operation forward and backward, the composite
/// forward and backward) saved as cuDNN's JSON and as the crate's plan file
/// loads back into the same engine and workspace, and a JSON whose softcap
/// op is tampered with (a pointwise mode outside the allow-list, the cap
/// scalar made a device tensor) is refused, typed, before cuDNN sees it.
fn plan_json_round_trip() -> TestResult {
    let target = Target::preset("h200")?;
    let base = SdpaConfig::new(2, 8, 256, 128, DType::BF16).softcap(CAP);
    let mut done = 0;
    for (name, backward, cfg) in [
        (
            "native fwd",
            false,
            base.clone().implementation(SdpaImpl::Native).training(true),
        ),
        (
            "native bwd",
            true,
            base.clone().implementation(SdpaImpl::Native),
        ),
        (
            "composite fwd",
            false,
            base.clone()
                .implementation(SdpaImpl::Composite)
                .training(true),
        ),
        ("composite bwd", true, base.clone()),
        // With the masks (the frontend refuses them beside its score mod,
        // so these plans are checked here rather than cross-loaded there).
        (
            "native fwd causal",
            false,
            base.clone()
                .causal(true)
                .implementation(SdpaImpl::Native)
                .training(true),
        ),
        (
            "native fwd bottom-right window",
            false,
            base.clone()
                .kv_len(384)
                .causal_bottom_right()
                .sliding_window(64)
                .implementation(SdpaImpl::Native)
                .training(true),
        ),
        (
            "composite fwd padding causal",
            false,
            base.clone()
                .padding(true)
                .causal(true)
                .implementation(SdpaImpl::Composite)
                .training(true),
        ),
        (
            "composite bwd padding causal",
            true,
            base.clone().padding(true).causal(true),
        ),
    ] {
        let g = match if backward { bwd(&cfg) } else { fwd(&cfg) } {
            Ok(g) => g,
            Err(e) => {
                eprintln!("{name}: not built on this cuDNN (typed): {e}");
                ensure!(
                    name.starts_with("native") && loaded() < (9, 21, 0) && names_option(&e),
                    "{name}: {e:?}"
                );
                continue;
            }
        };
        let og = g.build()?;
        let (plan, _) = Plan::build(&og, &target, &Policy::default())?;
        let json = plan.cudnn_json()?;
        let io = std::sync::Arc::new(plan.io().clone());
        // The SDPA backward operation's JSON leaves the score-modifier
        // subgraph out while its kernel patches the cap in as a value from
        // one of its uids: the loader refuses it, typed. The control (no
        // softcap) reloads, same workspace (its kernel's other uids are
        // cuDNN's own workspace buffers, which the loader knows).
        if name == "native bwd" {
            let control = bwd(
                &SdpaConfig::new(2, 8, 256, 128, DType::BF16).implementation(SdpaImpl::Native)
            )?;
            let (cp, _) = Plan::build(&control.build()?, &target, &Policy::default())?;
            for (which, j, io) in [
                ("softcap", json.clone(), io.clone()),
                (
                    "control",
                    cp.cudnn_json()?,
                    std::sync::Arc::new(cp.io().clone()),
                ),
            ] {
                // SAFETY: `j` is cuDNN's JSON, unchanged, of the plan built just above (the
                // softcap graph's or the control's) with the loaded cuDNN, with that plan's
                // own IoSignature.
                match (which, unsafe {
                    Plan::from_cudnn_json_unverified(&j, &target, io)
                }) {
                    ("softcap", Err(e @ Error::InvalidArgument { .. }))
                        if e.to_string().contains("/engine/payload") =>
                    {
                        eprintln!("{name} ({which}): reload refused (typed): {e}")
                    }
                    ("control", Ok(back)) if back.workspace_size() == cp.workspace_size() => {
                        eprintln!("{name} ({which}): reloads, same workspace")
                    }
                    (_, other) => {
                        return Err(format!(
                            "{name} ({which}): reload: {:?}",
                            other.map(|p| p.workspace_size())
                        )
                        .into());
                    }
                }
            }
            done += 1;
            continue;
        }
        // SAFETY: `json` is cuDNN's JSON, unchanged, of the plan built just above with the
        // loaded cuDNN, and `io` is that plan's own IoSignature.
        let back = unsafe { Plan::from_cudnn_json_unverified(&json, &target, io.clone()) }?;
        let engine_of = |j: &str| -> Option<i64> {
            serde_json::from_str::<serde_json::Value>(j)
                .ok()?
                .pointer("/engine/engineId")?
                .as_i64()
        };
        let reloaded = engine_of(&back.cudnn_json()?);
        ensure!(
            reloaded.is_some()
                && reloaded == plan.engine()
                && back.workspace_size() == plan.workspace_size(),
            "{name}: reloaded engine {reloaded:?} / {} vs {:?} / {}",
            back.workspace_size(),
            plan.engine(),
            plan.workspace_size()
        );
        // SAFETY: `plan.serialize()`, unchanged, of the plan built above with the
        // loaded cuDNN.
        let again = unsafe { Plan::deserialize_unverified(&plan.serialize()?, &target) }?;
        ensure!(
            engine_of(&again.cudnn_json()?) == plan.engine(),
            "{name}: plan file engine"
        );
        // Tamper: the TANH_FWD made a mode the allow-list does not know.
        ensure!(
            json.contains("CUDNN_POINTWISE_TANH_FWD"),
            "{name}: no TANH_FWD in the JSON"
        );
        let bad = json.replacen("CUDNN_POINTWISE_TANH_FWD", "CUDNN_POINTWISE_NOT_A_MODE", 1);
        // SAFETY: outside the contract on purpose: `bad` is an edit (the TANH_FWD mode
        // renamed) that the crate's checks must refuse before cuDNN sees it; the typed
        // refusal is asserted below, and no plan is executed.
        match unsafe { Plan::from_cudnn_json_unverified(&bad, &target, io.clone()) } {
            Err(e @ (Error::InvalidArgument { .. } | Error::Unsupported { .. })) => {
                eprintln!("{name}: tampered mode refused: {e}")
            }
            other => return Err(format!("{name}: tampered mode: {:?}", other.err()).into()),
        }
        // Tamper: the cap scalar (by value) made a device tensor.
        let mut v: serde_json::Value = serde_json::from_str(&json)?;
        let mut flipped = 0;
        flip_by_value(&mut v, &mut flipped);
        ensure!(flipped > 0, "{name}: no by-value tensor in the JSON");
        // SAFETY: outside the contract on purpose: `v` is an edit (the by-value cap made a
        // device tensor) that the crate's checks must refuse before cuDNN sees it; the
        // typed refusal is asserted below, and no plan is executed.
        match unsafe { Plan::from_cudnn_json_unverified(&v.to_string(), &target, io.clone()) } {
            Err(
                e @ (Error::InvalidArgument { .. }
                | Error::Mismatch { .. }
                | Error::Unsupported { .. }),
            ) => {
                eprintln!("{name}: by-value flipped refused: {e}")
            }
            other => return Err(format!("{name}: by-value flipped: {:?}", other.err()).into()),
        }
        eprintln!(
            "{name}: round trip engine {:?} workspace {}",
            plan.engine(),
            plan.workspace_size()
        );
        done += 1;
    }
    ensure!(done > 0 || loaded() < (9, 21, 0), "nothing round-tripped");
    Ok(())
}

/// The by-value tensor with the highest uid (the softcap's cap: the
/// graph makes it after every other scalar) made a device tensor.
fn flip_by_value(v: &mut serde_json::Value, n: &mut usize) {
    fn uids(v: &serde_json::Value, out: &mut Vec<i64>) {
        match v {
            serde_json::Value::Object(m) => {
                if m.get("isByValue").and_then(|b| b.as_bool()) == Some(true)
                    && let Some(u) = m.get("name").and_then(|n| n.as_str()?.parse().ok())
                {
                    out.push(u);
                }
                m.values().for_each(|x| uids(x, out));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| uids(x, out)),
            _ => {}
        }
    }
    fn flip(v: &mut serde_json::Value, uid: &str, n: &mut usize) {
        match v {
            serde_json::Value::Object(m) => {
                if m.get("name").and_then(|x| x.as_str()) == Some(uid)
                    && m.contains_key("isByValue")
                {
                    m.insert("isByValue".into(), serde_json::Value::Bool(false));
                    *n += 1;
                }
                m.values_mut().for_each(|x| flip(x, uid, n));
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(|x| flip(x, uid, n)),
            _ => {}
        }
    }
    let mut all = Vec::new();
    uids(v, &mut all);
    if let Some(max) = all.into_iter().max() {
        flip(v, &max.to_string(), n);
    }
}

// ---- the f64 reference's softcap (unit tier) ----

/// The softcap with the masks Gemma 2 uses (causal, top-left and
/// bottom-right; a sliding window; padding), a training step each.
pub(crate) fn masks_cases() -> Vec<(&'static str, SdpaConfig)> {
    let base = || SdpaConfig::new(2, 8, 256, 128, DType::BF16).softcap(CAP);
    let cross = || {
        SdpaConfig::new(2, 8, 128, 128, DType::BF16)
            .kv_len(384)
            .softcap(CAP)
    };
    vec![
        ("causal", base().causal(true)),
        ("causal bottom-right cross", cross().causal_bottom_right()),
        ("causal window", base().causal(true).sliding_window(64)),
        (
            "bottom-right window cross",
            cross().causal_bottom_right().sliding_window(64),
        ),
        ("padding causal", base().padding(true).causal(true)),
        (
            "padding window causal",
            base().padding(true).causal(true).sliding_window(64),
        ),
    ]
    .into_iter()
    .map(|(name, cfg)| (name, cfg.training(true)))
    .collect()
}

/// [`masks_cases`]: cuDNN plans the composite and the SDPA operation (its
/// subgraph: the softcap's ops, then the band-mask ops), forward and
/// backward, for the H200 and B200 presets (the H100 plans as the H200:
/// `plan_targets`). NVIDIA's frontend refuses these beside its score mod
/// (a rule of its own; conformance difference `DSM`).
fn masks_plan() -> TestResult {
    let v = loaded();
    let mut failures = Vec::new();
    let mut planned = 0;
    for (name, cfg) in masks_cases() {
        for backward in [false, true] {
            for imp in [SdpaImpl::Native, SdpaImpl::Composite] {
                let cfg = cfg.clone().implementation(imp);
                let built = if backward { bwd(&cfg) } else { fwd(&cfg) };
                let g = match built {
                    Ok(g) => g,
                    Err(e) if imp == SdpaImpl::Native && v < (9, 21, 0) => {
                        // The SDPA operation takes the softcap and the band
                        // masks from 9.21 (its backward exists from 9.21):
                        // refused, typed, naming either.
                        eprintln!("{name:<26} {imp:?} bwd={backward}: refused on {v:?}: {e}");
                        if !(refuses_naming(&e, "softcap")
                            || refuses_naming(&e, "is_causal")
                            || refuses_naming(&e, "SDPA_BWD"))
                        {
                            failures.push(format!("{name} {imp:?}: {e}"));
                        }
                        continue;
                    }
                    Err(e) => {
                        failures.push(format!("{name} {imp:?} bwd={backward}: {e}"));
                        continue;
                    }
                };
                // The H100 plans as the H200 (`plan_targets`).
                for tgt in crate::support::targets(&["h200", "b200"]) {
                    match counts(&g, tgt, 1) {
                        Ok(c) => {
                            eprintln!(
                                "{name:<26} {imp:<9} bwd={backward:<5} {tgt}: engines {} configs {} plans {} engine {}",
                                c.engines,
                                c.configs,
                                c.plans,
                                c.engine.map_or("-".into(), |e| e.to_string()),
                                imp = format!("{imp:?}"),
                            );
                            planned += 1;
                        }
                        Err(e) => {
                            eprintln!("{name:<26} {imp:?} bwd={backward} {tgt}: {e}");
                            // Required where cuDNN's SDPA operation takes
                            // the softcap (9.21 on; `counts` is an error,
                            // never 0 plans, when none finalizes); older
                            // stacks report only.
                            if v >= (9, 21, 0) {
                                failures.push(format!("{name} {imp:?} bwd={backward} {tgt}: {e}"));
                            }
                        }
                    }
                }
            }
        }
    }
    eprintln!("{planned} softcap + mask graphs planned on cuDNN {v:?}");
    ensure!(failures.is_empty(), "{}", failures.join("\n"));
    ensure!(planned > 0 || v < (9, 21, 0), "nothing planned");
    Ok(())
}

pub fn main() {
    let mut trials: Vec<_> = cases()
        .iter()
        .enumerate()
        .map(|(i, (name, ..))| {
            host_planning(
                &format!("sdpa_softcap_plans_per_target::{i:02}_{}", slug(name)),
                move || plan_per_target(i),
            )
        })
        .collect();
    trials.extend(vec![
        host_planning("sdpa_softcap_masks_plan", masks_plan),
        unit("sdpa_softcap_rules", rules),
        host(
            "sdpa_softcap_random_combinations",
            property_softcap_combinations,
        ),
        host_planning("sdpa_softcap_plan_json_round_trip", plan_json_round_trip),
    ]);
    run(trials)
}
