//! The SDPA version and architecture rules of NVIDIA's cuDNN frontend 1.32,
//! restated independently of the crate (a model), and tests that hold
//! [`SdpaConfig::resolve_for`] and [`SdpaConfig::check_target_for`] to it:
//! pure functions, so every cuDNN release and architecture can be checked
//! on a machine that has none of them (unit tier).
#![allow(dead_code)]

use cudnn::Error;
use cudnn::graph::{DType, SdpaConfig, SdpaImpl};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

use crate::support::TestResult;

type V = (u32, u32, u32);

/// What the frontend would build (or `None`: refused) for a valid config.
pub fn model_resolve(c: &SdpaConfig, v: V, backward: bool) -> Option<SdpaImpl> {
    if v == (9, 10, 0) || v == (9, 10, 1) {
        return None;
    }
    let drop = c.active_dropout().is_some();
    let options = (!c.padding || v >= (9, 15, 0)) && (!c.is_causal || v >= (9, 21, 0));
    let native = if backward {
        v >= (9, 21, 0) && options && !drop
    } else {
        v >= (9, 13, 1) && options && (!drop || (v >= (9, 22, 0) && !c.is_training))
    };
    let single = c.seq_q == 1 && c.seq_kv == 1;
    let needs_padding = v <= (9, 15, 0) && c.seq_kv % 128 != 0 && !c.padding;
    let composite = !backward || !(single || needs_padding);
    let pick = |ok: bool, imp: SdpaImpl| ok.then_some(imp);
    match (c.implementation, backward) {
        (SdpaImpl::Native, _) => pick(native, SdpaImpl::Native),
        (SdpaImpl::Composite, _) | (SdpaImpl::Auto, true) => pick(composite, SdpaImpl::Composite),
        (SdpaImpl::Auto, false) => {
            pick(native, SdpaImpl::Native).or(pick(composite, SdpaImpl::Composite))
        }
        // A construction this model does not know: it predicts none.
        _ => None,
    }
}

/// Whether the frontend's per-architecture checks pass (`dev`: major*100 + minor*10).
pub fn model_arch(c: &SdpaConfig, backward: bool, dev: i64, v: V) -> bool {
    let (d, dv, major) = (c.head_dim, c.head_dim_v, dev / 100);
    let both = |lim: i64| d <= lim && dv <= lim;
    if !backward {
        let old = v <= (9, 9, 0);
        return major >= 8
            && !(major == 8 && old && !both(128))
            && !(major == 10 && v < (9, 9, 0) && !both(128))
            && !(c.seq_q == 1 && major == 10 && !both(128) && old)
            && !(c.seq_q == 1 && old && c.is_causal);
    }
    if major == 9 {
        let deepseek_band = (128 < d && d <= 192) && (64 < dv && dv <= 128);
        let v911 = ((9, 11, 0)..(9, 13, 0)).contains(&v);
        return both(256) && !(v911 && deepseek_band && dv != 128 && d != 192);
    }
    // On sm_100 from 9.11, 192 takes 128; 256 / 256 (frontend: from 9.23,
    // deterministic engine only) is refused.
    if major == 10 && v >= (9, 11, 0) && d == 192 {
        return dv == 128;
    }
    both(128)
}

fn typed_unsupported(r: &Result<(), Error>) -> bool {
    matches!(r, Err(Error::Unsupported { what, needs: Some(n) }) if !what.is_empty() && !n.is_empty())
}

/// Hand-picked cases at each rule's boundary.
pub fn fixed_cases() -> TestResult {
    let base = || SdpaConfig::new(2, 8, 256, 64, DType::BF16);
    // The padding requirement of the composite backward stops at 9.15.0.
    let odd = base().kv_len(200).implementation(SdpaImpl::Composite);
    for (v, ok) in [
        ((9, 14, 3), false),
        ((9, 15, 0), false),
        ((9, 15, 1), true),
        ((9, 16, 0), true),
    ] {
        let r = odd.resolve_for(v, true);
        ensure!(r.is_ok() == ok, "seq_kv 200 backward on {v:?}: {r:?}");
        if let Err(e) = &r {
            ensure!(
                matches!(e, Error::Unsupported { needs: Some(n), .. } if n.contains("padding") && n.contains("9.15.1")),
                "names padding and 9.15.1: {e}"
            );
        }
        ensure!(
            odd.clone().padding(true).resolve_for(v, true).is_ok(),
            "with padding on {v:?}"
        );
        ensure!(odd.resolve_for(v, false).is_ok(), "the forward on {v:?}");
    }
    // Releases and the SDPA operation's options.
    for bwd in [false, true] {
        ensure!(
            base().resolve_for((9, 10, 1), bwd).is_err(),
            "9.10.1 refused"
        );
        ensure!(base().resolve_for((9, 10, 2), bwd).is_ok(), "9.10.2 fine");
    }
    let native = base().implementation(SdpaImpl::Native);
    ensure!(
        native.resolve_for((9, 13, 0), false).is_err(),
        "SDPA_FWD from 9.13.1"
    );
    ensure!(
        native.resolve_for((9, 13, 1), false)? == SdpaImpl::Native,
        "9.13.1"
    );
    ensure!(
        base().resolve_for((9, 13, 0), false)? == SdpaImpl::Composite,
        "auto before 9.13.1"
    );
    ensure!(
        base().resolve_for((9, 13, 1), false)? == SdpaImpl::Native,
        "auto from 9.13.1"
    );
    ensure!(
        base().resolve_for((9, 28, 1), true)? == SdpaImpl::Composite,
        "auto backward"
    );
    let causal = base().causal(true);
    ensure!(
        causal.resolve_for((9, 20, 9), false)? == SdpaImpl::Composite,
        "causal before 9.21"
    );
    ensure!(
        causal.resolve_for((9, 21, 0), false)? == SdpaImpl::Native,
        "causal from 9.21"
    );
    let drop = base().dropout(0.1);
    ensure!(
        drop.resolve_for((9, 21, 9), false)? == SdpaImpl::Composite,
        "dropout before 9.22"
    );
    ensure!(
        drop.resolve_for((9, 22, 0), false)? == SdpaImpl::Native,
        "inference dropout 9.22"
    );
    ensure!(
        drop.clone().training(true).resolve_for((9, 28, 1), false)? == SdpaImpl::Composite,
        "training dropout is composite"
    );
    let r = drop
        .implementation(SdpaImpl::Native)
        .resolve_for((9, 28, 1), true);
    ensure!(r.is_err(), "native backward with dropout: {r:?}");

    // sm_90, cuDNN 9.11.x and 9.12.x: (128, 192] x (64, 128] only as 192 or with 128.
    let dims = |d: i64, dv: i64| {
        let mut c = base();
        c.head_dim = d;
        c.head_dim_v = dv;
        c
    };
    for (d, dv, v, ok) in [
        (160, 96, (9, 11, 0), false),
        (160, 96, (9, 12, 9), false),
        (160, 96, (9, 10, 2), true),
        (160, 96, (9, 13, 0), true),
        (192, 96, (9, 11, 0), true),
        (160, 128, (9, 11, 0), true),
        (160, 64, (9, 11, 0), true),
        (256, 256, (9, 12, 0), true),
    ] {
        let r = dims(d, dv).check_target_for(true, 900, v);
        ensure!(r.is_ok() == ok, "sm_90 backward {d}/{dv} on {v:?}: {r:?}");
        ensure!(ok || typed_unsupported(&r), "typed: {r:?}");
        ensure!(
            dims(d, dv).check_target_for(false, 900, v).is_ok(),
            "forward {d}/{dv}"
        );
    }
    // sm_100: up to 128 and 192 / 128 from 9.11; 256 / 256 refused (the frontend pins a
    // deterministic engine for it, which the crate does not build).
    for (c, v, ok) in [
        (dims(192, 128), (9, 11, 0), true),
        (dims(192, 128), (9, 10, 2), false),
        (dims(192, 64), (9, 28, 1), false),
        (dims(256, 256), (9, 22, 0), false),
        (dims(256, 256), (9, 23, 0), false),
        (dims(256, 256).dropout(0.1), (9, 28, 1), false),
        (dims(128, 128).dropout(0.1), (9, 28, 1), true),
        (dims(160, 160), (9, 28, 1), false),
    ] {
        let r = c.check_target_for(true, 1000, v);
        ensure!(r.is_ok() == ok, "sm_100 backward {c:?} on {v:?}: {r:?}");
        ensure!(ok || typed_unsupported(&r), "typed: {r:?}");
    }
    ensure!(
        dims(256, 256)
            .check_target_for(true, 800, (9, 28, 1))
            .is_err(),
        "sm_80 256"
    );
    ensure!(
        dims(128, 128)
            .check_target_for(true, 800, (9, 28, 1))
            .is_ok(),
        "sm_80 128"
    );
    // The forward per architecture.
    for (c, dev, v, ok) in [
        (dims(256, 256), 800, (9, 9, 0), false),
        (dims(256, 256), 860, (9, 9, 0), false),
        (dims(256, 256), 800, (9, 10, 2), true),
        (dims(128, 128), 800, (9, 8, 0), true),
        (dims(256, 256), 1000, (9, 8, 0), false),
        (dims(256, 256), 1000, (9, 9, 0), true),
        (dims(256, 256), 900, (9, 8, 0), true),
        (dims(64, 64), 750, (9, 28, 1), false),
        (
            SdpaConfig::new(1, 2, 1, 64, DType::F16).causal(true),
            900,
            (9, 9, 0),
            false,
        ),
        (
            SdpaConfig::new(1, 2, 1, 64, DType::F16).causal(true),
            900,
            (9, 10, 2),
            true,
        ),
        (
            SdpaConfig::new(1, 2, 1, 256, DType::F16),
            1000,
            (9, 9, 0),
            false,
        ),
        (
            SdpaConfig::new(1, 2, 1, 256, DType::F16),
            900,
            (9, 9, 0),
            true,
        ),
    ] {
        let r = c.check_target_for(false, dev, v);
        ensure!(r.is_ok() == ok, "forward {c:?} on {dev} {v:?}: {r:?}");
        ensure!(ok || typed_unsupported(&r), "typed: {r:?}");
    }
    Ok(())
}

fn version() -> impl Strategy<Value = V> {
    prop_oneof![
        (Just(9u32), 8u32..30, 0u32..4),
        prop::sample::select(vec![
            (9, 9, 0),
            (9, 10, 0),
            (9, 10, 1),
            (9, 10, 2),
            (9, 11, 0),
            (9, 12, 9),
            (9, 13, 0),
            (9, 13, 1),
            (9, 15, 0),
            (9, 15, 1),
            (9, 17, 0),
            (9, 21, 0),
            (9, 22, 0),
            (9, 23, 0),
        ]),
    ]
}

fn valid_config() -> impl Strategy<Value = SdpaConfig> {
    let dim = prop::sample::select(vec![8i64, 64, 72, 96, 128, 136, 160, 192, 200, 256]);
    let seq = prop::sample::select(vec![1i64, 2, 64, 128, 200, 256, 384]);
    (
        (
            1i64..4,
            prop::sample::select(vec![(1i64, 1i64), (4, 4), (8, 2)]),
        ),
        (seq.clone(), seq),
        (dim.clone(), dim),
        (any::<bool>(), any::<bool>(), any::<bool>()),
        prop::sample::select(vec![None, Some(0.0), Some(0.1)]),
        prop::sample::select(vec![SdpaImpl::Auto, SdpaImpl::Native, SdpaImpl::Composite]),
        any::<bool>(),
    )
        .prop_map(
            |((b, (h, hk)), (sq, skv), (d, dv), (causal, padding, training), p, imp, f16)| {
                let dt = if f16 { DType::F16 } else { DType::BF16 };
                let mut c = SdpaConfig::new(b, h, sq, d, dt)
                    .gqa(hk)
                    .kv_len(skv)
                    .causal(causal)
                    .padding(padding)
                    .training(training)
                    .implementation(imp);
                c.head_dim_v = dv;
                if let Some(p) = p {
                    c = c.dropout(p);
                }
                c
            },
        )
}

/// `cases` random valid configs, versions and architectures: the crate's
/// rules agree with the model every time. Returns how many resolved.
pub fn fuzz(runner: &mut TestRunner, cases: u32) -> Result<u64, String> {
    let strat = (
        valid_config(),
        version(),
        prop::sample::select(vec![700i64, 750, 800, 860, 890, 900, 1000, 1030, 1200]),
        any::<bool>(),
    );
    let mut resolved = 0u64;
    for _ in 0..cases {
        let (c, v, dev, bwd) = strat
            .new_tree(runner)
            .map_err(|e| format!("strategy: {e}"))?
            .current();
        c.validate()
            .map_err(|e| format!("the strategy makes valid configs: {c:?}: {e}"))?;
        let got = c.resolve_for(v, bwd);
        let want = model_resolve(&c, v, bwd);
        match (&got, want) {
            (Ok(g), Some(w)) if *g == w => resolved += 1,
            (
                Err(Error::Unsupported {
                    what,
                    needs: Some(_),
                }),
                None,
            ) if !what.is_empty() => {}
            _ => {
                return Err(format!(
                    "resolve_for({v:?}, backward={bwd}) of {c:?}: got {got:?}, model {want:?}"
                ));
            }
        }
        let got = c.check_target_for(bwd, dev, v);
        let want = model_arch(&c, bwd, dev, v);
        if got.is_ok() != want || !(want || typed_unsupported(&got)) {
            return Err(format!(
                "check_target_for(backward={bwd}, {dev}, {v:?}) of {c:?}: got {got:?}, model {want}"
            ));
        }
    }
    Ok(resolved)
}
