//! Host tier for the attention options of issue 24 (bottom-right causal
//! mask, sliding window, alone and with padding): no GPU; the real cuDNN
//! plans each option, forward (the SDPA operation, the composite, `Auto`)
//! and backward (the composite), for the H200, A100 and B200 presets (the
//! H100 plans as the H200: `plan_targets`) through the driver stub, and
//! prints `engines / configs / plans /
//! workspace` per target. On a cuDNN that lacks an option the refusal must
//! be the typed `Unsupported` naming the option and the version.
//!
//! Also here: the version and architecture rules as pure functions
//! (`resolve_for`, `check_target_for`) against NVIDIA's frontend 1.32
//! rules, and a property test over random option combinations; a paged
//! plan's page tables bound only through the `unsafe` `input_page_table`
//! (directed and random names).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// `ensure!(err <= tol)` must fail for NaN: a negated partial comparison on purpose.
#![allow(clippy::neg_cmp_op_on_partial_ord)]
use crate::support;
use crate::support::sdpa_plans::fwd_any;
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
const TARGETS: [&str; 3] = ["h200", "a100", "b200"];

/// One decode step against a paged cache (Llama-style GQA 32:8, d 128).
fn paged_decode() -> SdpaConfig {
    SdpaConfig::new(4, 32, 1, 128, DType::BF16)
        .gqa(8)
        .kv_len(1024)
        .causal_bottom_right()
        .paged(64, 80)
}

/// A prefill writing 512 tokens per sequence into pages of 64.
fn paged_prefill() -> SdpaConfig {
    SdpaConfig::new(4, 32, 512, 128, DType::BF16)
        .gqa(8)
        .kv_len(512)
        .causal_bottom_right()
        .paged(64, 40)
        .training(false)
}

fn base() -> SdpaConfig {
    SdpaConfig::new(2, 8, 256, 64, DType::BF16)
}

/// The band cases: (name, backward, config).
pub(crate) fn band_cases() -> Vec<(&'static str, bool, SdpaConfig)> {
    let cross = || SdpaConfig::new(2, 8, 128, 64, DType::BF16).kv_len(512);
    vec![
        ("fwd br-causal cross", false, cross().causal_bottom_right()),
        (
            "fwd br-causal cross train",
            false,
            cross().causal_bottom_right().training(true),
        ),
        (
            "fwd br-causal padding",
            false,
            cross().causal_bottom_right().padding(true).training(true),
        ),
        (
            "fwd decode br-causal s_q 1",
            false,
            SdpaConfig::new(4, 8, 1, 128, DType::BF16)
                .kv_len(1024)
                .causal_bottom_right(),
        ),
        (
            "fwd window 64 causal",
            false,
            base().causal(true).sliding_window(64).training(true),
        ),
        ("fwd window 64", false, base().sliding_window(64)),
        (
            "fwd window 64 br-causal cross",
            false,
            cross().causal_bottom_right().sliding_window(64),
        ),
        (
            "fwd window 64 br-causal padding",
            false,
            cross()
                .causal_bottom_right()
                .sliding_window(64)
                .padding(true)
                .training(true),
        ),
        (
            "fwd window 64 causal padding",
            false,
            base().causal(true).sliding_window(64).padding(true),
        ),
        // Paged KV cache: a decode step (one query against 1000 cached
        // keys in pages of 64) and a prefill (512 queries filling pages).
        ("fwd paged decode s_q 1", false, paged_decode()),
        (
            "fwd paged decode s_q 4",
            false,
            SdpaConfig::new(4, 8, 4, 128, DType::BF16)
                .gqa(2)
                .kv_len(1024)
                .causal_bottom_right()
                .paged(64, 80),
        ),
        ("fwd paged prefill", false, paged_prefill()),
        ("bwd br-causal cross", true, cross().causal_bottom_right()),
        (
            "bwd br-causal padding",
            true,
            cross().causal_bottom_right().padding(true),
        ),
        (
            "bwd window 64 causal",
            true,
            base().causal(true).sliding_window(64),
        ),
        ("bwd window 64", true, base().sliding_window(64)),
        (
            "bwd window 64 br-causal cross",
            true,
            cross().causal_bottom_right().sliding_window(64),
        ),
        (
            "bwd window 64 br-causal padding",
            true,
            cross()
                .causal_bottom_right()
                .sliding_window(64)
                .padding(true),
        ),
    ]
}

/// Case `only` of [`band_cases`] planned for every target (one trial per
/// case, so the harness spreads the cases over its threads).
fn plan_per_target(only: usize) -> TestResult {
    let v = loaded();
    let mut failures = Vec::new();
    for (name, backward, cfg) in band_cases().into_iter().skip(only).take(1) {
        let imps: &[SdpaImpl] = if backward {
            &[SdpaImpl::Auto]
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
                                    "{name:<34} {imp:<9} -> {r:<9} {tgt}: engines {:>3} configs {:>3} plans {:>2} engine {:>4} workspace {}",
                                    c.engines,
                                    c.configs,
                                    c.plans,
                                    c.engine.map_or("-".into(), |e| e.to_string()),
                                    c.workspace.map_or("-".into(), |w| w.to_string()),
                                    imp = format!("{imp:?}"),
                                    r = format!("{r:?}"),
                                );
                            }
                            // Hopper must plan (`counts` is an error,
                            // never 0 plans, when none finalizes).
                            Err(e @ Error::Unsupported { .. })
                                if !matches!(tgt, "h200" | "h100") =>
                            {
                                eprintln!("{name:<34} {imp:?} {tgt}: refused (typed): {e}");
                            }
                            Err(e) => failures.push(format!("{name} {imp:?} on {tgt}: {e}")),
                        }
                    }
                }
                (Err(e), Err(b)) => {
                    eprintln!("{name:<34} {imp:?}: refused on cuDNN {v:?} (typed): {e}");
                    if !names_option(e) || !names_option(&b) {
                        failures.push(format!("{name} {imp:?}: untyped refusal {e:?} / {b:?}"));
                    }
                    // cuDNN 9.28 (cuda13) has every band option on both
                    // constructions.
                    if v >= (9, 21, 0) {
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

/// The version rules as pure functions, against NVIDIA's frontend 1.32.
fn version_rules() -> TestResult {
    let cross = SdpaConfig::new(2, 8, 128, 64, DType::BF16).kv_len(512);
    let br = cross.clone().causal_bottom_right();
    let native = |c: &SdpaConfig| c.clone().implementation(SdpaImpl::Native);
    let comp = |c: &SdpaConfig| c.clone().implementation(SdpaImpl::Composite);
    let unsupported_naming = |r: Result<SdpaImpl, Error>, word: &str, ver: &str| -> TestResult {
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
    };
    // The SDPA operation takes the band options from 9.21 (its subgraph).
    unsupported_naming(
        native(&br).resolve_for((9, 20, 0), false),
        "is_causal",
        "9.21.0",
    )?;
    // A bottom-right window without a causal mask names the alignment.
    let brw = cross
        .clone()
        .diagonal(DiagonalAlignment::BottomRight)
        .sliding_window(32);
    unsupported_naming(
        native(&brw).resolve_for((9, 20, 0), false),
        "diagonal",
        "9.21.0",
    )?;
    let win = cross.clone().sliding_window(32);
    unsupported_naming(
        native(&win).resolve_for((9, 19, 0), false),
        "window",
        "9.21.0",
    )?;
    ensure!(
        native(&br).resolve_for((9, 21, 0), false)? == SdpaImpl::Native,
        "9.21 native bottom-right"
    );
    // Auto falls back to the composite before 9.21 (torch211's 9.19).
    ensure!(
        br.resolve_for((9, 19, 0), false)? == SdpaImpl::Composite,
        "auto before 9.21"
    );
    // Composite: bottom-right needs multiples of 64 before 9.6.
    let odd = SdpaConfig::new(1, 2, 100, 64, DType::F16)
        .kv_len(200)
        .causal_bottom_right();
    unsupported_naming(comp(&odd).resolve_for((9, 5, 1), false), "64", "9.6.0")?;
    ensure!(
        comp(&odd).resolve_for((9, 6, 0), false).is_ok(),
        "9.6 takes any length"
    );
    // Bottom-right causal with s_q > s_kv without padding: refused everywhere.
    let tall = SdpaConfig::new(1, 2, 512, 64, DType::F16)
        .kv_len(128)
        .causal_bottom_right();
    unsupported_naming(tall.resolve_for((9, 28, 1), false), "diagonal", "seq_q")?;
    ensure!(
        tall.clone()
            .padding(true)
            .resolve_for((9, 28, 1), false)
            .is_ok(),
        "with padding s_q > s_kv is allowed"
    );
    // Not with dropout.
    unsupported_naming(
        br.clone().dropout(0.1).resolve_for((9, 28, 1), true),
        "dropout",
        "diagonal",
    )?;
    // Window: before 9.10.2 only with a causal mask, no dropout.
    unsupported_naming(comp(&win).resolve_for((9, 9, 0), false), "window", "9.10.2")?;
    ensure!(
        comp(&win.clone().causal(true))
            .resolve_for((9, 9, 0), false)
            .is_ok(),
        "9.9 window causal"
    );
    // 9.14.0's bug: non-causal window with s_kv > 1024.
    let long = SdpaConfig::new(1, 2, 128, 64, DType::F16)
        .kv_len(2048)
        .sliding_window(256);
    unsupported_naming(long.resolve_for((9, 14, 0), false), "9.14.0", "1024")?;
    ensure!(long.resolve_for((9, 14, 1), false).is_ok(), "9.14.1 fixed");
    // Paged: composite from 9.5, the SDPA operation from 9.15, no backward,
    // padding required.
    let pd = paged_decode();
    unsupported_naming(
        comp(&pd.clone().causal(false)).resolve_for((9, 4, 0), false),
        "paged",
        "9.5.0",
    )?;
    ensure!(
        comp(&pd.clone().causal(false)).resolve_for((9, 5, 0), false)? == SdpaImpl::Composite,
        "9.5 paged composite"
    );
    unsupported_naming(
        native(&pd).resolve_for((9, 14, 0), false),
        "padding",
        "9.15.0",
    )?;
    ensure!(
        pd.resolve_for((9, 28, 1), false)? == SdpaImpl::Native,
        "auto paged on 9.28"
    );
    unsupported_naming(pd.resolve_for((9, 28, 1), true), "paged", "backward")?;
    unsupported_naming(
        pd.clone().padding(false).resolve_for((9, 28, 1), false),
        "paged",
        "padding",
    )?;
    match SdpaConfig::new(1, 1, 1, 64, DType::F16)
        .paged(0, 4)
        .validate()
    {
        Err(Error::InvalidArgument { .. }) => {}
        other => return Err(format!("block size 0: {other:?}").into()),
    }
    let spec = pd.page_table_spec()?;
    ensure!(
        spec.dims() == [4, 1, 16, 1],
        "page table dims {:?}",
        spec.dims()
    );
    ensure!(
        pd.k_spec()?.dims() == [80, 8, 64, 128],
        "container dims {:?}",
        pd.k_spec()?.dims()
    );
    // A window below 1 is an invalid value.
    match base().sliding_window(0).validate() {
        Err(Error::InvalidArgument { .. }) => {}
        other => return Err(format!("window 0: {other:?}").into()),
    }
    // The architecture rule: sm_90, cuDNN <= 9.9, window + bottom-right causal, s_q == s_kv.
    let sq = base().causal_bottom_right().sliding_window(64);
    match sq.check_target_for(false, 900, (9, 9, 0)) {
        Err(e @ Error::Unsupported { .. }) => ensure!(
            e.to_string().contains("sliding window"),
            "names the window: {e}"
        ),
        other => return Err(format!("sm_90 9.9: {other:?}").into()),
    }
    sq.check_target_for(false, 900, (9, 11, 0))?;
    sq.check_target_for(false, 800, (9, 9, 0))?;
    Ok(())
}

/// Random option combinations: building never panics, and every refusal is
/// typed and names the option (or the shape / version) it refuses.
fn property_random_options() -> TestResult {
    let v = loaded();
    let mut runner = crate::support::prop_runner(96);
    let strat = (
        (
            1i64..3,
            prop_oneof![Just(1i64), Just(2), Just(4)],
            1i64..300,
            1i64..600,
        ),
        (
            prop_oneof![Just(64i64), Just(128), Just(72), Just(7)],
            any::<bool>(),
            any::<bool>(),
        ),
        (
            prop_oneof![
                Just(None),
                (-2i64..400).prop_map(Some),
                Just(Some(i64::MAX))
            ],
            any::<bool>(),
            any::<bool>(),
            prop_oneof![Just(0.0f64), Just(0.1)],
        ),
        (0u8..3, any::<bool>(), any::<bool>(), any::<bool>()),
        prop_oneof![Just(None), (-1i64..70, -1i64..40).prop_map(Some)],
        any::<bool>(),
    );
    runner
        .run(
            &strat,
            |(
                (b, h, sq, skv),
                (d, causal, br),
                (window, padding, training, p),
                (imp, bwd_, bshd, plan),
                paged,
                ragged,
            )| {
                let mut c = SdpaConfig::new(b, h, sq, d, DType::BF16)
                    .kv_len(skv)
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
                if let Some((bs, nb)) = paged {
                    c = c.paged(bs, nb).padding(padding);
                }
                // Ragged batches, with the padding the case drew (off: refused).
                if ragged {
                    c = c.ragged().padding(padding);
                }
                // Every version from 9.0 to 9.28 as a pure function.
                for ver in [
                    (9, 0, 0),
                    (9, 5, 0),
                    (9, 6, 0),
                    (9, 9, 0),
                    (9, 10, 2),
                    (9, 14, 0),
                    (9, 18, 1),
                    (9, 19, 0),
                    (9, 21, 0),
                    (9, 28, 1),
                ] {
                    if let Err(e) = c.resolve_for(ver, bwd_) {
                        prop_assert!(names_option(&e), "untyped or unnamed refusal {e:?}");
                    }
                    for dev in [800, 860, 900, 1000] {
                        if let Err(e) = c.check_target_for(bwd_, dev, ver) {
                            prop_assert!(names_option(&e), "untyped target refusal {e:?}");
                        }
                    }
                }
                // The loaded library: the builder agrees with resolve.
                let g = if bwd_ { bwd(&c) } else { fwd(&c) };
                // (Building with a paged config's page tables left unbound
                // is fine: only planning follows.)
                match (&g, c.resolve(bwd_)) {
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
                // A few plan for an H200 (bounded time: one attempt).
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

// ---- the f64 reference's band options (unit tier) ----

use cudnn::reference::attention::{self as ref_attn, CausalMask, View, Window};

/// One head, d = 1, q = 0: every allowed key scores 0, so O is the mean of
/// V over the allowed keys and stats is ln(count): hand-computed values.
fn ref_case(
    sq: usize,
    skv: usize,
    causal: CausalMask,
    window: Option<Window>,
    lens: Option<(&[usize], &[usize])>,
) -> Result<ref_attn::SdpaForward, Error> {
    let q = vec![0.0; sq];
    let k = vec![0.5; skv];
    let v: Vec<f64> = (0..skv).map(|j| f64::from(1u32 << j)).collect();
    let mut c = ref_attn::SdpaConfig::new(1.0);
    c.causal = causal;
    c.window = window;
    if let Some((a, b)) = lens {
        c.seq_len_q = Some(a);
        c.seq_len_kv = Some(b);
    }
    ref_attn::forward(
        &View::bhsd(&q, [1, 1, sq, 1]),
        &View::bhsd(&k, [1, 1, skv, 1]),
        &View::bhsd(&v, [1, 1, skv, 1]),
        &c,
    )
}

fn close(got: &[f64], want: &[f64]) -> TestResult {
    ensure!(
        got.len() == want.len(),
        "length {} vs {}",
        got.len(),
        want.len()
    );
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        ensure!(
            (a - b).abs() < 1e-12,
            "[{i}]: {a} vs {b} (all: {got:?} vs {want:?})"
        );
    }
    Ok(())
}

fn reference_band_hand_cases() -> TestResult {
    let tl = |size| {
        Some(Window {
            size,
            bottom_right: false,
        })
    };
    let br = |size| {
        Some(Window {
            size,
            bottom_right: true,
        })
    };
    // V = [1, 2, 4, 8]. Top-left causal, window 2: {0}, {0,1}, {1,2}, {2,3}.
    let f = ref_case(4, 4, CausalMask::TopLeft, tl(2), None)?;
    close(&f.o, &[1.0, 1.5, 3.0, 6.0])?;
    close(&f.stats, &[0.0, 2f64.ln(), 2f64.ln(), 2f64.ln()])?;
    // Window 2 alone (no causal): j >= i - 1.
    let f = ref_case(4, 4, CausalMask::None, tl(2), None)?;
    close(&f.o, &[15.0 / 4.0, 15.0 / 4.0, 14.0 / 3.0, 6.0])?;
    // Bottom-right causal, s_q 2, s_kv 4: rows see {0..=2}, {0..=3}.
    let f = ref_case(2, 4, CausalMask::BottomRight, None, None)?;
    close(&f.o, &[7.0 / 3.0, 15.0 / 4.0])?;
    // ... with a bottom-right window of 2: {1,2}, {2,3}.
    let f = ref_case(2, 4, CausalMask::BottomRight, br(2), None)?;
    close(&f.o, &[3.0, 6.0])?;
    // Padding: len_q 2, len_kv 3 of 4 x 4, bottom-right (shift 1), window 2:
    // {0,1}, {1,2}, then two masked rows (O = 0, stats = +inf).
    let f = ref_case(4, 4, CausalMask::BottomRight, br(2), Some((&[2], &[3])))?;
    close(&f.o, &[1.5, 3.0, 0.0, 0.0])?;
    ensure!(
        f.stats[2] == f64::INFINITY,
        "masked row stats {}",
        f.stats[2]
    );
    // A window as long as the keys is no window.
    let a = ref_case(3, 5, CausalMask::BottomRight, br(5), None)?;
    let b = ref_case(3, 5, CausalMask::BottomRight, None, None)?;
    close(&a.o, &b.o)?;
    // A huge window saturates, never overflows.
    let a = ref_case(3, 5, CausalMask::None, br(usize::MAX), None)?;
    let b = ref_case(3, 5, CausalMask::None, None, None)?;
    close(&a.o, &b.o)?;
    // Size 0 is a typed error naming the window.
    match ref_case(2, 2, CausalMask::None, tl(0), None) {
        Err(Error::InvalidArgument { .. }) => {}
        other => return Err(format!("window 0: {other:?}").into()),
    }
    Ok(())
}

/// The backward with a bottom-right causal window and padding against
/// central finite differences of `L = sum(O * dO)` through the forward.
fn reference_band_finite_differences() -> TestResult {
    let (b, h, sq, skv, d) = (2usize, 2usize, 3usize, 5usize, 3usize);
    let rnd = |n: usize, seed: u64| -> Vec<f64> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((x >> 33) as f64 / (1u64 << 31) as f64) - 0.5
            })
            .collect()
    };
    let q = rnd(b * h * sq * d, 1);
    let k = rnd(b * h * skv * d, 2);
    let v = rnd(b * h * skv * d, 3);
    let d_o = rnd(b * h * sq * d, 4);
    let (lq, lkv) = ([3usize, 2], [5usize, 4]);
    let mut cfg = ref_attn::SdpaConfig::new(0.7);
    cfg.causal = CausalMask::BottomRight;
    cfg.window = Some(Window {
        size: 2,
        bottom_right: true,
    });
    cfg.seq_len_q = Some(&lq);
    cfg.seq_len_kv = Some(&lkv);
    let qd = [b, h, sq, d];
    let kd = [b, h, skv, d];
    let loss = |q: &[f64], k: &[f64], v: &[f64]| -> Result<f64, Error> {
        let f = ref_attn::forward(
            &View::bhsd(q, qd),
            &View::bhsd(k, kd),
            &View::bhsd(v, kd),
            &cfg,
        )?;
        Ok(f.o.iter().zip(&d_o).map(|(a, b)| a * b).sum())
    };
    let f = ref_attn::forward(
        &View::bhsd(&q, qd),
        &View::bhsd(&k, kd),
        &View::bhsd(&v, kd),
        &cfg,
    )?;
    let g = ref_attn::backward(
        &View::bhsd(&q, qd),
        &View::bhsd(&k, kd),
        &View::bhsd(&v, kd),
        &View::bhsd(&f.o, qd),
        &View::bhsd(&d_o, qd),
        &f.stats,
        &cfg,
    )?;
    let hstep = 1e-6;
    let mut worst = 0f64;
    for (which, analytic) in [(0, &g.dq), (1, &g.dk), (2, &g.dv)] {
        let base = [&q, &k, &v][which];
        for i in 0..base.len() {
            let mut p = base.clone();
            let mut m = base.clone();
            p[i] += hstep;
            m[i] -= hstep;
            let (lp, lm) = match which {
                0 => (loss(&p, &k, &v)?, loss(&m, &k, &v)?),
                1 => (loss(&q, &p, &v)?, loss(&q, &m, &v)?),
                _ => (loss(&q, &k, &p)?, loss(&q, &k, &m)?),
            };
            let num = (lp - lm) / (2.0 * hstep);
            worst = worst.max((num - analytic[i]).abs());
        }
    }
    eprintln!("reference band backward vs finite differences: max abs error {worst:.2e}");
    ensure!(worst < 1e-7, "finite differences disagree by {worst}");
    Ok(())
}

/// The reference's paged gather: a container whose pages are a shuffled
/// copy of contiguous K gives K back through the page table, and the
/// attention over it equals the contiguous one; bad tables are typed errors.
fn reference_paged_gather() -> TestResult {
    let (b, h, s_kv, d, block) = (2usize, 2usize, 7usize, 3usize, 3usize);
    let pages = 3; // ceil(7 / 3)
    let k: Vec<f64> = (0..b * h * s_kv * d).map(|i| i as f64 * 0.01).collect();
    // Page p of sequence n goes to container block perm[n * pages + p].
    let perm = [4i32, 0, 5, 2, 1, 3];
    let nb = 6;
    let mut cont = vec![f64::NAN; nb * h * block * d];
    for n in 0..b {
        for j in 0..s_kv {
            let blk = perm[n * pages + j / block] as usize;
            for hh in 0..h {
                for t in 0..d {
                    cont[((blk * h + hh) * block + j % block) * d + t] =
                        k[((n * h + hh) * s_kv + j) * d + t];
                }
            }
        }
    }
    // Unused tail rows of the last pages must still be finite for the
    // gather (it reads whole pages up to s_kv only).
    let cv = View::bhsd(&cont, [nb, h, block, d]);
    let got = ref_attn::paged_gather(&cv, &perm, b, pages, s_kv)?;
    close(&got, &k)?;
    let q: Vec<f64> = (0..b * h * 2 * d)
        .map(|i| (i as f64 * 0.37).sin())
        .collect();
    let mut c = ref_attn::SdpaConfig::new(0.5);
    c.causal = CausalMask::BottomRight;
    let lq = [2usize, 1];
    let lkv = [7usize, 5];
    c.seq_len_q = Some(&lq);
    c.seq_len_kv = Some(&lkv);
    let kv = View::bhsd(&k, [b, h, s_kv, d]);
    let a = ref_attn::forward(&View::bhsd(&q, [b, h, 2, d]), &kv, &kv, &c)?;
    let g = View::bhsd(&got, [b, h, s_kv, d]);
    let p = ref_attn::forward(&View::bhsd(&q, [b, h, 2, d]), &g, &g, &c)?;
    close(&a.o, &p.o)?;
    for (table, pages, why) in [
        (&[4i32, 0, 6, 2, 1, 3][..], 3, "page 6 of 6"),
        (&[4i32, 0, -1, 2, 1, 3][..], 3, "page -1"),
        (&[4i32, 0, 5, 2, 1][..], 3, "short table"),
        (&[4i32, 0, 2, 1][..], 2, "too few pages"),
    ] {
        match ref_attn::paged_gather(&cv, table, b, pages, s_kv) {
            Err(Error::InvalidArgument { .. } | Error::Mismatch { .. }) => {}
            other => return Err(format!("{why}: {other:?}").into()),
        }
    }
    Ok(())
}

/// `paged_gather` on random and adversarial geometry: never panics, every
/// refusal a typed error, and a successful gather has the promised length.
fn property_paged_gather() -> TestResult {
    let mut runner = crate::support::prop_runner(512);
    let strat = (
        (0usize..5, 0usize..3, 0usize..5, 0usize..4),
        (0usize..4, 0usize..4, 0usize..12),
        prop::collection::vec(prop_oneof![Just(-1i32), 0i32..6, Just(i32::MAX)], 0..12),
        0usize..3,
    );
    runner
        .run(
            &strat,
            |((nb, h, block, d), (b, pages, s_kv), table, slack)| {
                let n = nb * h * block * d;
                let data = vec![0.5; n.saturating_sub(slack)];
                let view = View::bhsd(&data, [nb, h, block, d]);
                match ref_attn::paged_gather(&view, &table, b, pages, s_kv) {
                    Ok(out) => prop_assert_eq!(out.len(), b * h * s_kv * d),
                    Err(Error::InvalidArgument { .. } | Error::Mismatch { .. }) => {}
                    Err(e) => prop_assert!(false, "untyped refusal {e:?}"),
                }
                Ok(())
            },
        )
        .map_err(|e| format!("{e}").into())
}

/// A paged plan's page tables are bound only through the `unsafe`
/// `input_page_table` (the GPU reads K / V at the pages they name,
/// unchecked): the safe `input` refuses them, by uid (a renamed table, and
/// a plan loaded from its cuDNN JSON with the tensor list, too); other i32
/// inputs still bind with `input`, and `input_page_table` takes nothing but
/// a page table, with the same length checks.
fn paged_tables_need_unsafe_binding() -> TestResult {
    let t = Target::preset("h200")?;
    let mut built = 0;
    for imp in [SdpaImpl::Native, SdpaImpl::Composite] {
        let cfg = paged_decode().implementation(imp);
        if let Err(e) = cfg.resolve(false) {
            eprintln!(
                "paged {imp:?}: refused on cuDNN {:?} (typed): {e}",
                loaded()
            );
            continue;
        }
        let mut g = Graph::new();
        let q = g.input("q", cfg.q_spec()?)?;
        let k = g.input("k", cfg.k_spec()?)?;
        let v = g.input("v", cfg.v_spec()?)?;
        let f = fwd_any(&mut g, q, k, v, &cfg)?;
        g.rename(f.o, "o")?;
        g.rename(f.page_table_k.ok_or("a page table")?, "table_k")?;
        g.rename(f.seq_len_kv.ok_or("key lengths")?, "lens_kv")?;
        g.rename(f.seq_len_q.ok_or("query lengths")?, "lens_q")?;
        let pv = g.name(f.page_table_v.ok_or("a page table")?)?.to_string();
        let og = g.build()?;
        let policy = Policy::default().with_max_attempts(3);
        let (plan, _) = Plan::build(&og, &t, &policy)?;
        built += 1;
        let mut plans = vec![plan];
        // The same plan loaded from cuDNN's JSON with its tensor list.
        match plans[0].cudnn_json() {
            Ok(json) => {
                let io = std::sync::Arc::new(plans[0].io().clone());
                // This program wrote the JSON: its compiled code is trusted.
                plans.push(if plans[0].is_runtime_compiled() {
                    // SAFETY: `json` is cuDNN's JSON, unchanged, of the plan built just above with the
                    // loaded cuDNN, and `io` is that plan's own IoSignature.
                    unsafe { Plan::from_cudnn_json_unverified(&json, &t, io) }?
                } else {
                    Plan::from_cudnn_json(&json, &t, io)?
                });
            }
            Err(e) => eprintln!("paged {imp:?}: no JSON here ({e})"),
        }
        for (i, plan) in plans.iter().enumerate() {
            // The plan lists its guarded inputs: both page tables, the key
            // lengths bounded by the keys a table row covers (16 pages of
            // 64 = 1024 = kv_len) and the query lengths by S_q = 1.
            let mut listed = plan.guarded_inputs();
            listed.sort();
            let mut want = vec![
                ("table_k", InputGuard::PageTable),
                (pv.as_str(), InputGuard::PageTable),
                ("lens_kv", InputGuard::SeqLengths { extent: 1024 }),
                ("lens_q", InputGuard::SeqLengths { extent: 1 }),
            ];
            want.sort();
            ensure!(
                listed == want,
                "plan {i} {imp:?}: guarded inputs {listed:?}, want {want:?}"
            );
            let mut b = plan.bindings();
            // SAFETY: a zero-length view over a null pointer is never dereferenced.
            let empty =
                unsafe { cudnn::runtime::DeviceSlice::<i32>::from_raw_parts(std::ptr::null(), 0) };
            for name in ["table_k", pv.as_str()] {
                let e = b
                    .input(name, empty)
                    .err()
                    .ok_or(format!("plan {i}: `{name}` bound with the safe `input`"))?;
                ensure!(
                    matches!(e, Error::Unsupported { .. })
                        && e.to_string().contains("input_page_table"),
                    "plan {i} {imp:?}: {e}"
                );
                // SAFETY: the binding is refused (too short) before any use.
                let e = unsafe { b.input_page_table(name, empty) }
                    .err()
                    .ok_or(format!("plan {i}: an empty page table accepted"))?;
                ensure!(e.to_string().contains("bytes"), "plan {i} {imp:?}: {e}");
            }
            // Key lengths are guarded too (`Bindings::seq_lengths`).
            let e = b
                .input("lens_kv", empty)
                .err()
                .ok_or("key lengths bound with the safe `input`")?;
            ensure!(
                e.to_string().contains("seq_lengths"),
                "plan {i} {imp:?}: {e}"
            );
            // SAFETY: refused (not a page table) before any use.
            let e = unsafe { b.input_page_table("lens_kv", empty) }
                .err()
                .ok_or("key lengths bound as a page table")?;
            ensure!(
                e.to_string().contains("must be a page table"),
                "plan {i} {imp:?}: {e}"
            );
        }
    }
    // The composite from 9.5; the SDPA operation with its causal mask
    // subgraph from 9.21.
    let want = match loaded() {
        v if v >= (9, 21, 0) => 2,
        v if v >= (9, 5, 0) => 1,
        _ => 0,
    };
    ensure!(
        built >= want,
        "{built} of {want} constructions planned on cuDNN {:?}",
        loaded()
    );
    Ok(())
}

/// Random and adversarial names through `input` and `input_page_table` on a
/// paged plan's bindings: no panic, every refusal typed, a page table never
/// bound by the safe `input`, and nothing but a page table by
/// `input_page_table`.
fn property_page_table_binding() -> TestResult {
    let cfg = paged_decode().implementation(SdpaImpl::Composite);
    if let Err(e) = cfg.resolve(false) {
        eprintln!(
            "paged composite: refused on cuDNN {:?} (typed): {e}",
            loaded()
        );
        return Ok(());
    }
    let og = fwd(&cfg)?.build()?;
    let policy = Policy::default().with_max_attempts(1);
    let (plan, _) = Plan::build(&og, &Target::preset("h200")?, &policy)?;
    let names: Vec<(String, bool)> = plan
        .io()
        .tensors
        .iter()
        .map(|t| (t.name.clone(), t.name.contains("page_table")))
        // The lengths are guarded as well (by `seq_lengths`): kept out of the pool.
        .filter(|t| !t.0.contains("seq_len"))
        .collect();
    ensure!(
        names.iter().filter(|n| n.1).count() == 2,
        "two page tables in {names:?}"
    );
    let mut runner = crate::support::prop_runner(256);
    let pool = names.clone();
    runner
        .run(
            &(0..pool.len() + 1, ".{0,24}", any::<bool>()),
            |(pick, random, twice)| {
                let (name, is_table) = pool.get(pick).cloned().unwrap_or((random, false));
                let mut b = plan.bindings();
                // SAFETY: a zero-length view over a null pointer is never dereferenced.
                let empty = unsafe {
                    cudnn::runtime::DeviceSlice::<i32>::from_raw_parts(std::ptr::null(), 0)
                };
                for _ in 0..if twice { 2 } else { 1 } {
                    let safe = b.input(&name, empty).map(|_| ());
                    // SAFETY: nothing runs: the bindings are dropped unexecuted.
                    let raw = unsafe { b.input_page_table(&name, empty) }.map(|_| ());
                    prop_assert!(
                        !is_table || matches!(safe, Err(Error::Unsupported { .. })),
                        "page table `{name}` not refused by `input`: {safe:?}"
                    );
                    for r in [safe, raw] {
                        match r {
                            // An empty buffer binds nothing of the paged
                            // plan (every tensor has a span).
                            Ok(()) => prop_assert!(false, "`{name}` bound from an empty buffer"),
                            Err(Error::Unsupported { what, .. }) => prop_assert!(
                                is_table && what.contains("page table"),
                                "`{name}`: {what}"
                            ),
                            Err(Error::InvalidArgument { .. } | Error::Mismatch { .. }) => {}
                            Err(e) => prop_assert!(false, "`{name}`: untyped {e:?}"),
                        }
                    }
                }
                Ok(())
            },
        )
        .map_err(|e| format!("{e}").into())
}

pub fn main() {
    let mut t: Vec<_> = band_cases()
        .iter()
        .enumerate()
        .map(|(i, (name, ..))| {
            host_planning(
                &format!("sdpa_band_plans_per_target::{i:02}_{}", slug(name)),
                move || plan_per_target(i),
            )
        })
        .collect();
    t.extend(vec![
        unit("sdpa_band_version_rules", version_rules),
        unit("sdpa_reference_band_hand_cases", reference_band_hand_cases),
        unit("sdpa_reference_paged_gather", reference_paged_gather),
        unit("sdpa_reference_paged_gather_random", property_paged_gather),
        unit(
            "sdpa_reference_band_finite_differences",
            reference_band_finite_differences,
        ),
        host("sdpa_options_random_combinations", property_random_options),
        host(
            "sdpa_paged_tables_need_unsafe_binding",
            paged_tables_need_unsafe_binding,
        ),
        host(
            "sdpa_page_table_binding_random",
            property_page_table_binding,
        ),
    ]);
    run(t)
}
