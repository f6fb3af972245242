//! Host tier (issue 24): a property test over random combinations of every
//! attention option `SdpaConfig` has — causal (top-left, bottom-right),
//! sliding window, padding, dropout, GQA, a paged KV cache, ragged (packed
//! THD) batches, the logit softcap, both layouts, f16 / bf16, head dims,
//! training or not, forward or backward, `Auto` / `Native` / `Composite` —
//! with adversarial values mixed in (zero and negative sizes and windows,
//! non-finite scales and caps, dropout outside `[0, 1)`).
//!
//! For each case: the version rules (`resolve_for`) for cuDNN 9.28.1 (and
//! the older releases the crate knows), the per-architecture rules
//! (`check_target_for`) for sm_80 to sm_120, the graph builder with the
//! loaded cuDNN (cuda13: 9.28), agreeing with `resolve`, and a plan for an
//! H200 for the small ones. Checked: no panic; every refusal typed
//! (`InvalidArgument`, `Unsupported`, or the builder's `Mismatch`) and
//! naming an option of the config (or the cuDNN release); bounded time
//! (each case under 20 s, the whole run under 150 s: generous bounds for 2
//! shared cores).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use crate::support;
use std::time::{Duration, Instant};

use crate::support::sdpa_plans::{bwd_graph as bwd, fwd_graph as fwd};
use cudnn::Error;
use cudnn::graph::*;
use proptest::prelude::*;
use support::*;

/// The words a refusal may name the option by.
const OPTION_WORDS: &[&str] = &[
    "SdpaConfig",
    "softcap",
    "is_causal",
    "diagonal",
    "window",
    "padding",
    "paged",
    "ragged",
    "dropout",
    "kv_heads",
    "head_dim",
    "seq_q",
    "seq_kv",
    "scale",
    "dtype",
    "SdpaImpl",
    "is_training",
    "cuDNN",
];

/// A typed refusal that names an option (or the release).
fn typed_and_named(e: &Error) -> bool {
    let s = e.to_string();
    matches!(
        e,
        Error::Unsupported { .. } | Error::InvalidArgument { .. } | Error::Mismatch { .. }
    ) && OPTION_WORDS.iter().any(|w| s.contains(w))
}

/// The releases the rules are checked for (pure functions).
const RELEASES: [(u32, u32, u32); 8] = [
    (9, 5, 0),
    (9, 10, 2),
    (9, 14, 0),
    (9, 15, 1),
    (9, 18, 1),
    (9, 19, 0),
    (9, 21, 0),
    (9, 28, 1),
];

#[allow(clippy::type_complexity)]
fn strategy() -> impl Strategy<Value = (SdpaConfig, bool, bool)> {
    (
        (
            prop_oneof![24 => 1i64..4, 1 => Just(0i64), 1 => Just(-1i64)],
            prop_oneof![Just(1i64), Just(2), Just(4), Just(8)],
            prop_oneof![Just(1i64), Just(2), Just(3), Just(8)],
            prop_oneof![24 => 1i64..300, 1 => Just(0i64), 1 => Just(i64::MAX)],
            prop_oneof![24 => 1i64..600, 1 => Just(-5i64)],
            prop_oneof![
                8 => Just(64i64),
                8 => Just(128),
                2 => Just(256),
                2 => Just(72),
                1 => Just(7),
                1 => Just(512)
            ],
            prop_oneof![6 => Just(None), 1 => Just(Some(64i64)), 1 => Just(Some(192))],
        ),
        (
            any::<bool>(),
            any::<bool>(),
            prop_oneof![
                12 => Just(None),
                8 => (1i64..400).prop_map(Some),
                1 => Just(Some(0i64)),
                1 => Just(Some(i64::MAX))
            ],
            any::<bool>(),
            prop_oneof![
                12 => Just(None),
                6 => Just(Some(0.1f64)),
                2 => Just(Some(0.0)),
                1 => Just(Some(1.0)),
                1 => Just(Some(f64::NAN))
            ],
        ),
        (
            prop_oneof![
                12 => Just(None),
                6 => Just(Some(50.0f64)),
                4 => (1e-3f64..1e3).prop_map(Some),
                1 => Just(Some(0.0)),
                1 => Just(Some(-1.0)),
                1 => Just(Some(f64::INFINITY))
            ],
            prop_oneof![
                16 => Just(None),
                4 => Just(Some((64i64, 40i64))),
                1 => Just(Some((0i64, 1i64))),
                1 => Just(Some((16i64, 0i64)))
            ],
            prop_oneof![5 => Just(false), 1 => Just(true)],
            prop_oneof![
                20 => Just(None),
                2 => Just(Some(0.5f64)),
                1 => Just(Some(f64::NAN)),
                1 => Just(Some(0.0))
            ],
        ),
        (
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            0u8..3,
            any::<bool>(),
            0u8..4,
        ),
    )
        .prop_map(
            |(
                (b, h, group, sq, skv, d, dv),
                (causal, br, window, padding, dropout),
                (softcap, paged, ragged, scale),
                (bhsd, f16, training, imp, backward, plan),
            )| {
                let heads = h * group;
                let mut c =
                    SdpaConfig::new(b, heads, sq, d, if f16 { DType::F16 } else { DType::BF16 })
                        .gqa(h)
                        .kv_len(skv)
                        .causal(causal)
                        .padding(padding)
                        .training(training)
                        .layout(if bhsd {
                            AttnLayout::Bhsd
                        } else {
                            AttnLayout::Bshd
                        })
                        .implementation(
                            [SdpaImpl::Auto, SdpaImpl::Native, SdpaImpl::Composite][imp as usize],
                        );
                if let Some(dv) = dv {
                    c.head_dim_v = dv;
                }
                if br {
                    c = c.diagonal(DiagonalAlignment::BottomRight);
                }
                if let Some(w) = window {
                    c = c.sliding_window(w);
                }
                if let Some(p) = dropout {
                    c = c.dropout(p);
                }
                if let Some(s) = softcap {
                    c = c.softcap(s);
                }
                if let Some(s) = scale {
                    c = c.scale(s);
                }
                if let Some((bs, nb)) = paged {
                    // With the padding the case drew (off: refused).
                    c = c.paged(bs, nb).padding(padding);
                }
                if ragged {
                    c = c.ragged().padding(padding);
                }
                (c, backward, plan == 0)
            },
        )
}

fn property_all_options() -> TestResult {
    let v = cudnn::sys::cudnn::load()
        .ok()
        .and_then(|a| a.info().version)
        .map(|v| (v.major, v.minor, v.patch))
        .unwrap_or((0, 0, 0));
    let target = Target::preset("h200")?;
    let start = Instant::now();
    let mut runner = crate::support::prop_runner(320);
    let counts = std::cell::Cell::new((0usize, 0usize, 0usize));
    runner
        .run(&strategy(), |(c, backward, plan)| {
            let t0 = Instant::now();
            for ver in RELEASES {
                if let Err(e) = c.resolve_for(ver, backward) {
                    prop_assert!(typed_and_named(&e), "resolve_for {ver:?}: {e:?} for {c:?}");
                }
                for dev in [800, 860, 890, 900, 1000, 1200] {
                    if let Err(e) = c.check_target_for(backward, dev, ver) {
                        prop_assert!(typed_and_named(&e), "check_target_for {dev} {ver:?}: {e:?}");
                    }
                }
            }
            // A valid softcap adds no refusal where cuDNN's SDPA operation
            // takes it (9.21 on): masks, paged and ragged included.
            if let Some(cap) = c.softcap
                && cap.is_finite()
                && cap > 0.0
                && (cap as f32).is_normal()
            {
                let mut nocap = c.clone();
                nocap.softcap = None;
                for ver in RELEASES.into_iter().filter(|v| *v >= (9, 21, 0)) {
                    let (r, n) = (
                        c.resolve_for(ver, backward),
                        nocap.resolve_for(ver, backward),
                    );
                    prop_assert!(
                        r.is_ok() == n.is_ok(),
                        "{ver:?}: {r:?} / without the cap {n:?}: {c:?}"
                    );
                }
            }
            let g = if backward { bwd(&c) } else { fwd(&c) };
            let (mut built, mut planned, mut refused) = counts.get();
            match (&g, c.resolve(backward)) {
                (Ok(_), Ok(_)) => built += 1,
                (Err(e), Err(_)) => {
                    refused += 1;
                    if std::env::var_os("SDPA_ALL_OPTIONS_VERBOSE").is_some() {
                        eprintln!(
                            "refused: {}",
                            e.to_string().chars().take(110).collect::<String>()
                        );
                    }
                    prop_assert!(typed_and_named(e), "builder: {e:?} for {c:?}");
                }
                (g, r) => prop_assert!(
                    false,
                    "builder {:?} vs resolve {r:?} on {v:?} for {c:?}",
                    g.as_ref().err()
                ),
            }
            if plan
                && c.seq_q <= 256
                && c.seq_kv <= 512
                && let Ok(g) = g
            {
                let policy = Policy::default().with_max_attempts(1);
                match g.build().and_then(|og| Plan::build(&og, &target, &policy)) {
                    Ok(_) => planned += 1,
                    Err(e) => prop_assert!(
                        typed_and_named(&e) || matches!(e, Error::Cudnn { .. }),
                        "plan: {e:?} for {c:?}"
                    ),
                }
            }
            counts.set((built, planned, refused));
            let took = t0.elapsed();
            prop_assert!(
                took < Duration::from_secs(20),
                "one case took {took:?}: {c:?}"
            );
            Ok(())
        })
        .map_err(|e| format!("{e}"))?;
    let (built, planned, refused) = counts.get();
    let took = start.elapsed();
    eprintln!(
        "all options on cuDNN {v:?}: 320 cases, {built} built, {refused} refused (typed), {planned} planned for an H200, {:.1} s",
        took.as_secs_f64()
    );
    ensure!(
        took < Duration::from_secs(150),
        "the property test took {took:?}"
    );
    // The strategy must reach both sides (not pass by refusing everything)
    // where the loaded cuDNN plans attention without a device (9.8 on; the
    // cuDNN 8.9 stack refuses most attention graphs, typed).
    if v >= (9, 8, 0) {
        ensure!(
            built > 20 && refused > 20,
            "built {built}, refused {refused}"
        );
    } else {
        eprintln!("(cuDNN {v:?}: not requiring built graphs; {built} built)");
        ensure!(refused > 20, "refused {refused}");
    }
    Ok(())
}

pub fn main() {
    run(vec![host(
        "sdpa_all_options_random_combinations",
        property_all_options,
    )])
}
