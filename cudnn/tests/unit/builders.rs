//! Unit tier (nothing needed): the config structs are `#[non_exhaustive]`
//! (issue 33 item 5), so users build them with constructors and chainable
//! setters. The documented behaviour, the truth here: each setter sets its
//! field to the value given (the same as assigning the public field, which
//! stays allowed) and leaves every other field as it was; `Policy`'s
//! defaults are the documented ones (TF32 off, runtime compilation on,
//! heuristics A then fallback).

use crate::support;

use cudnn::dnn::{AlgoSearch, MathPolicy, PlanOptions};
use cudnn::graph::{
    AttnBias, AttnLayout, ConvParams, DType, DiagonalAlignment, Fp8SdpaConfig, HeurMode, Policy,
    SdpaConfig, SdpaImpl,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use support::*;

pub fn main() {
    run(vec![
        unit("policy_defaults_as_documented", policy_defaults),
        unit("fuzz_policy_setters_match_assignment", fuzz_policy),
        unit(
            "fuzz_plan_options_setters_match_assignment",
            fuzz_plan_options,
        ),
        unit("fuzz_sdpa_config_setters_match_assignment", fuzz_sdpa),
        unit(
            "fuzz_fp8_sdpa_config_setters_match_assignment",
            fuzz_fp8_sdpa,
        ),
        unit("fuzz_conv_params_setters_match_assignment", fuzz_conv),
    ]);
}

fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: 256,
        failure_persistence: None,
        ..Config::default()
    })
}

fn done(r: Result<(), proptest::test_runner::TestError<impl std::fmt::Debug>>) -> TestResult {
    r.map_err(|e| e.to_string().into())
}

fn policy_defaults() -> TestResult {
    let p = Policy::default();
    ensure!(
        p.modes == vec![HeurMode::A, HeurMode::Fallback],
        "modes {:?}",
        p.modes
    );
    ensure!(!p.allow_tf32, "TF32 must be off by default");
    ensure!(
        p.allow_runtime_compilation,
        "runtime compilation on by default"
    );
    ensure!(p.max_workspace.is_none() && !p.deterministic_only, "{p:?}");
    ensure!(!p.require_native_cuda_graph, "{p:?}");
    // What the rewritten tests' `with_max_attempts(..)` / `permissive()`
    // start from (the documented defaults).
    ensure!(p.max_attempts == 64, "max_attempts {}", p.max_attempts);
    ensure!(!p.allow_reduced_precision, "{p:?}");
    Ok(())
}

fn fuzz_policy() -> TestResult {
    let modes = prop::collection::vec(
        prop::sample::select(vec![HeurMode::A, HeurMode::B, HeurMode::Fallback]),
        0..4,
    );
    let s = (
        modes,
        prop::option::of(any::<u64>()),
        prop::array::uniform5(any::<bool>()),
        any::<usize>(),
    );
    done(runner().run(&s, |(modes, ws, f, attempts)| {
        let built = Policy::default()
            .with_modes(modes.clone())
            .with_max_workspace(ws)
            .with_deterministic_only(f[0])
            .with_allow_tf32(f[1])
            .with_allow_reduced_precision(f[2])
            .with_allow_runtime_compilation(f[3])
            .with_require_native_cuda_graph(f[4])
            .with_max_attempts(attempts);
        let mut want = Policy::default();
        want.modes = modes;
        want.max_workspace = ws;
        want.deterministic_only = f[0];
        want.allow_tf32 = f[1];
        want.allow_reduced_precision = f[2];
        want.allow_runtime_compilation = f[3];
        want.require_native_cuda_graph = f[4];
        want.max_attempts = attempts;
        prop_assert_eq!(&built, &want);
        // The cache key sees every setter that changes a planning choice.
        prop_assert_eq!(built.signature(), want.signature());
        // One setter alone leaves the rest at the defaults.
        let one = Policy::default().with_allow_tf32(true);
        let mut d = Policy::default();
        d.allow_tf32 = true;
        prop_assert_eq!(one, d);
        Ok(())
    }))
}

fn fuzz_plan_options() -> TestResult {
    let s = (
        prop::sample::select(vec![AlgoSearch::Heuristic, AlgoSearch::Exhaustive]),
        prop::sample::select(vec![
            MathPolicy::Default,
            MathPolicy::AllowTf32,
            MathPolicy::ForbidTensorCores,
        ]),
        any::<bool>(),
        prop::option::of(any::<usize>()),
    );
    done(runner().run(&s, |(search, math, det, ws)| {
        let b = PlanOptions::default()
            .with_search(search)
            .with_math(math)
            .with_deterministic(det)
            .with_workspace_limit(ws);
        prop_assert_eq!(b.search, search);
        prop_assert_eq!(b.math, math);
        prop_assert_eq!(b.deterministic, det);
        prop_assert_eq!(b.workspace_limit, ws);
        // `new(search)` is the defaults with `search`.
        let n = PlanOptions::new(search);
        prop_assert_eq!(n.search, search);
        prop_assert_eq!(
            (n.math, n.deterministic, n.workspace_limit),
            (MathPolicy::Default, false, None)
        );
        Ok(())
    }))
}

fn fuzz_sdpa() -> TestResult {
    let s = (
        (1i64..8, 1i64..64, 1i64..4096, 1i64..256),
        (1i64..64, 1i64..4096, 1i64..256),
        prop::array::uniform8(any::<bool>()),
        prop::option::of(1i64..1024),
        prop::option::of(0.01f64..10.0),
        prop::option::of(0.0f64..0.9),
    );
    done(runner().run(
        &s,
        |((b, h, sq, d), (hk, skv, dv), f, window, scale, drop)| {
            let layout = if f[0] {
                AttnLayout::Bhsd
            } else {
                AttnLayout::Bshd
            };
            let imp = if f[1] {
                SdpaImpl::Composite
            } else {
                SdpaImpl::Auto
            };
            let mut built = SdpaConfig::new(b, h, sq, d, DType::BF16)
                .gqa(hk)
                .kv_len(skv)
                .head_dim_v(dv)
                .layout(layout)
                .implementation(imp)
                .causal(f[2])
                .padding(f[3])
                .training(f[4])
                .alibi(f[5])
                .max_sum_exp(f[6])
                .sink(f[7]);
            if let Some(w) = window {
                built = built.sliding_window(w);
            }
            if let Some(x) = scale {
                built = built.scale(x);
            }
            if let Some(p) = drop {
                built = built.dropout(p);
            }
            let mut want = SdpaConfig::new(b, h, sq, d, DType::BF16);
            want.kv_heads = hk;
            want.seq_kv = skv;
            want.head_dim_v = dv;
            want.layout = layout;
            want.implementation = imp;
            want.is_causal = f[2];
            want.padding = f[3];
            want.is_training = f[4];
            want.alibi = f[5];
            want.max_sum_exp = f[6];
            want.sink = f[7];
            want.window = window;
            want.scale = scale;
            prop_assert_eq!(built.dropout.map(|x| x.probability), drop);
            want.dropout = built.dropout;
            prop_assert_eq!(&built, &want);
            // Untouched options keep `new`'s values.
            prop_assert_eq!(built.diagonal, DiagonalAlignment::TopLeft);
            prop_assert!(built.bias.is_none() && built.paged.is_none() && !built.ragged);
            let biased = built.clone().bias(AttnBias::full().with_dbias(true));
            prop_assert_eq!(biased.bias, Some(AttnBias::full().with_dbias(true)));
            Ok(())
        },
    ))
}

fn fuzz_fp8_sdpa() -> TestResult {
    let s = (
        (1i64..8, 1i64..64, 1i64..4096, 1i64..4096, 1i64..256),
        prop::sample::select(vec![DType::Fp8E4M3, DType::Fp8E5M2]),
        prop::sample::select(vec![DType::Fp8E4M3, DType::F16, DType::BF16]),
        prop::option::of(0.01f64..10.0),
        any::<bool>(),
        any::<bool>(),
    );
    done(
        runner().run(&s, |((b, h, sq, skv, d), dt, odt, scale, causal, train)| {
            let mut built = Fp8SdpaConfig::new(b, h, sq, skv, d)
                .dtype(dt)
                .o_dtype(odt)
                .causal(causal)
                .training(train);
            if let Some(x) = scale {
                built = built.scale(x);
            }
            let mut want = Fp8SdpaConfig::new(b, h, sq, skv, d);
            want.dtype = dt;
            want.o_dtype = odt;
            want.is_causal = causal;
            want.is_training = train;
            want.scale = scale;
            prop_assert_eq!(built, want);
            Ok(())
        }),
    )
}

fn fuzz_conv() -> TestResult {
    let v = |n: usize| prop::collection::vec(0i64..8, n);
    let s = (1usize..4).prop_flat_map(move |n| (v(n), v(n), v(n), v(n), v(n), any::<bool>()));
    done(runner().run(&s, |(pad, pre, post, stride, dil, flip)| {
        let built = ConvParams::new(&pad, &stride, &dil)
            .with_padding(pre.clone(), post.clone())
            .with_flip(flip);
        let mut want = ConvParams::new(&pad, &stride, &dil);
        want.pre_padding = pre.clone();
        want.post_padding = post.clone();
        want.flip = flip;
        prop_assert_eq!(&built, &want);
        let again = ConvParams::new(&pad, &[], &[])
            .with_stride(stride.clone())
            .with_dilation(dil.clone());
        prop_assert_eq!(
            (&again.stride, &again.dilation, &again.pre_padding),
            (&stride, &dil, &pad)
        );
        Ok(())
    }))
}
