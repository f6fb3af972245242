//! Unit tier for the f64 reference's logit softcap (issue 24, item 5a; no
//! library needed): hand cases (the capped scores, the softmax over them,
//! a cap before the mask) and the backward through the softcap against
//! central finite differences, with and without masks. (Split from
//! `host/sdpa_softcap`.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::neg_cmp_op_on_partial_ord)]
use crate::support;
use support::*;

use cudnn::Error;
use cudnn::reference::attention::{self as ref_attn, View};

/// `tanh` from `exp` (an independent route to the hand values).
fn tanh_by_exp(x: f64) -> f64 {
    let e = (2.0 * x).exp();
    (e - 1.0) / (e + 1.0)
}

/// One query, two keys, d = 1: the capped scores by hand, the softmax
/// over them, O and the statistics; the cap leaves tiny scores alone and
/// bounds large ones.
fn reference_softcap_hand_cases() -> TestResult {
    // q = 1, k = [0, 2], scale 1, cap 1: S = [0, tanh 2].
    let (q, k, v) = ([1.0], [0.0, 2.0], [4.0, 8.0]);
    let mut cfg = ref_attn::SdpaConfig::new(1.0);
    cfg.softcap = Some(1.0);
    let f = ref_attn::forward(
        &View::bhsd(&q, [1, 1, 1, 1]),
        &View::bhsd(&k, [1, 1, 2, 1]),
        &View::bhsd(&v, [1, 1, 2, 1]),
        &cfg,
    )?;
    let s1 = tanh_by_exp(2.0);
    let z = 1.0 + s1.exp();
    let want_o = (4.0 + 8.0 * s1.exp()) / z;
    ensure!((f.o[0] - want_o).abs() < 1e-12, "o {} vs {want_o}", f.o[0]);
    ensure!(
        (f.stats[0] - z.ln()).abs() < 1e-12,
        "stats {} vs {}",
        f.stats[0],
        z.ln()
    );
    // Without the cap the same call gives the uncapped softmax (S = [0, 2]).
    cfg.softcap = None;
    let u = ref_attn::forward(
        &View::bhsd(&q, [1, 1, 1, 1]),
        &View::bhsd(&k, [1, 1, 2, 1]),
        &View::bhsd(&v, [1, 1, 2, 1]),
        &cfg,
    )?;
    let zu = 1.0 + 2f64.exp();
    ensure!(
        (u.o[0] - (4.0 + 8.0 * 2f64.exp()) / zu).abs() < 1e-12,
        "uncapped o {}",
        u.o[0]
    );
    // A score of 1000 capped at 5 is 5 * tanh(200) = 5 (to f64): P = [1/(1+e^5), e^5/(1+e^5)].
    let k = [0.0, 1000.0];
    cfg.softcap = Some(5.0);
    let f = ref_attn::forward(
        &View::bhsd(&q, [1, 1, 1, 1]),
        &View::bhsd(&k, [1, 1, 2, 1]),
        &View::bhsd(&v, [1, 1, 2, 1]),
        &cfg,
    )?;
    let e5 = 5f64.exp();
    let want = (4.0 + 8.0 * e5) / (1.0 + e5);
    ensure!(
        (f.o[0] - want).abs() < 1e-12,
        "capped at 5: {} vs {want}",
        f.o[0]
    );
    // The cap goes before the causal mask: query 0 sees key 0 alone, so
    // O[0] = V[0] exactly (a cap after the mask would turn the masked -inf
    // into -cap and give key 1 a weight of e^-1 / (1 + e^-1)); query 1
    // sees both keys under the capped scores [0, tanh 2].
    let (q2, k2) = ([1.0, 1.0], [0.0, 2.0]);
    let mut causal = ref_attn::SdpaConfig::new(1.0);
    causal.causal = ref_attn::CausalMask::TopLeft;
    causal.softcap = Some(1.0);
    let f = ref_attn::forward(
        &View::bhsd(&q2, [1, 1, 2, 1]),
        &View::bhsd(&k2, [1, 1, 2, 1]),
        &View::bhsd(&v, [1, 1, 2, 1]),
        &causal,
    )?;
    ensure!(f.o[0] == 4.0, "causal row 0: {} (want V[0] = 4)", f.o[0]);
    ensure!(
        (f.o[1] - want_o).abs() < 1e-12,
        "causal row 1: {} vs {want_o}",
        f.o[1]
    );
    ensure!(
        f.stats[0].abs() < 1e-15,
        "causal row 0 stats {}",
        f.stats[0]
    );
    // Bad caps are typed errors naming the softcap.
    for c in [0.0, -2.0, f64::NAN, f64::INFINITY] {
        cfg.softcap = Some(c);
        let e = ref_attn::forward(
            &View::bhsd(&q, [1, 1, 1, 1]),
            &View::bhsd(&k, [1, 1, 2, 1]),
            &View::bhsd(&v, [1, 1, 2, 1]),
            &cfg,
        )
        .err();
        ensure!(
            e.as_ref()
                .is_some_and(|e| matches!(e, Error::InvalidArgument { .. })
                    && e.to_string().contains("softcap")),
            "cap {c}: {e:?}"
        );
    }
    Ok(())
}

/// The reference backward through the softcap against central finite
/// differences of its forward (GQA 4:2, s_q 3, s_kv 5, a cap small enough
/// that tanh bends: scores reach a few times the cap).
fn reference_softcap_finite_differences() -> TestResult {
    use ref_attn::{CausalMask, Window};
    let plain = ref_attn::SdpaConfig::new(0.8);
    let mut causal = plain;
    causal.causal = CausalMask::TopLeft;
    // Gemma 2's masks together: bottom-right causal, a window of 2, padding.
    let (lq, lkv) = ([3usize, 2], [5usize, 4]);
    let mut masked = plain;
    masked.causal = CausalMask::BottomRight;
    masked.window = Some(Window {
        size: 2,
        bottom_right: true,
    });
    masked.seq_len_q = Some(&lq);
    masked.seq_len_kv = Some(&lkv);
    for (name, mut cfg) in [
        ("no mask", plain),
        ("causal", causal),
        ("bottom-right causal, window, padding", masked),
    ] {
        cfg.softcap = Some(0.9);
        softcap_finite_differences(name, cfg)?;
    }
    Ok(())
}

fn softcap_finite_differences(name: &str, cfg: ref_attn::SdpaConfig<'_>) -> TestResult {
    let (b, h, hkv, sq, skv, d) = (2usize, 4usize, 2usize, 3usize, 5usize, 3usize);
    let rnd = |n: usize, seed: u64| -> Vec<f64> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                4.0 * (((x >> 33) as f64 / (1u64 << 31) as f64) - 0.5)
            })
            .collect()
    };
    let q = rnd(b * h * sq * d, 11);
    let k = rnd(b * hkv * skv * d, 12);
    let v = rnd(b * hkv * skv * d, 13);
    let d_o = rnd(b * h * sq * d, 14);
    let qd = [b, h, sq, d];
    let kd = [b, hkv, skv, d];
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
    // The uncapped gradients differ (the cap is active), so the check
    // cannot pass by ignoring it.
    let mut uncapped = cfg;
    uncapped.softcap = None;
    let fu = ref_attn::forward(
        &View::bhsd(&q, qd),
        &View::bhsd(&k, kd),
        &View::bhsd(&v, kd),
        &uncapped,
    )?;
    let gu = ref_attn::backward(
        &View::bhsd(&q, qd),
        &View::bhsd(&k, kd),
        &View::bhsd(&v, kd),
        &View::bhsd(&fu.o, qd),
        &View::bhsd(&d_o, qd),
        &fu.stats,
        &uncapped,
    )?;
    let diff =
        g.dq.iter()
            .zip(&gu.dq)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
    ensure!(diff > 1e-3, "{name}: the cap changes dQ by only {diff}");
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
    eprintln!(
        "reference softcap backward vs finite differences ({name}): max abs error {worst:.2e} (cap moves dQ by {diff:.2e})"
    );
    ensure!(
        worst < 1e-7,
        "{name}: finite differences disagree by {worst}"
    );
    Ok(())
}

pub fn main() {
    run(vec![
        unit(
            "sdpa_reference_softcap_hand_cases",
            reference_softcap_hand_cases,
        ),
        unit(
            "sdpa_reference_softcap_finite_differences",
            reference_softcap_finite_differences,
        ),
    ]);
}
