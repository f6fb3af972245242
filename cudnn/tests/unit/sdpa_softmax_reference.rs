//! Unit tier for the f64 reference of issue 24's softmax options (no
//! library needed): the row max / sum_exp and attention sinks by hand,
//! the sink's gradients against finite differences, split-KV partials
//! combined against the plain forward, adversarial sizes bounded, and a
//! property test over random inputs. (Split from `host/sdpa_softmax`.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::neg_cmp_op_on_partial_ord)]
use crate::support;
use cudnn::Error;
use cudnn::reference::attention::{self as refattn, View};
use proptest::prelude::*;
use support::*;

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * (1.0 + b.abs())
}

/// Hand cases: one query, keys with scores `[0, ln 3]`, values `[4, 8]`.
fn reference_hand_cases() -> TestResult {
    let (q, k, v) = ([1.0], [0.0, 3f64.ln()], [4.0, 8.0]);
    let (qv, kv, vv) = (
        View::bhsd(&q, [1, 1, 1, 1]),
        View::bhsd(&k, [1, 1, 2, 1]),
        View::bhsd(&v, [1, 1, 2, 1]),
    );
    let c = refattn::SdpaConfig::new(1.0);
    // No sink: max ln 3, sum_exp 1/3 + 1 = 4/3, stats ln 4, O = 7.
    let p = refattn::forward_parts(&qv, &kv, &vv, &c, None)?;
    ensure!(close(p.max[0], 3f64.ln(), 1e-12), "max {}", p.max[0]);
    ensure!(
        close(p.sum_exp[0], 4.0 / 3.0, 1e-12),
        "sum {}",
        p.sum_exp[0]
    );
    ensure!(close(p.stats[0], 4f64.ln(), 1e-12), "stats {}", p.stats[0]);
    ensure!(close(p.o[0], 7.0, 1e-12), "o {}", p.o[0]);
    // Sink ln 4: max' ln 4, sum' 1/4 + 3/4 + 1 = 2, P = [1/8, 3/8],
    // O = 4/8 + 24/8 = 3.5, stats ln 8.
    let p = refattn::forward_parts(&qv, &kv, &vv, &c, Some(&[4f64.ln()]))?;
    ensure!(close(p.max[0], 4f64.ln(), 1e-12), "max' {}", p.max[0]);
    ensure!(close(p.sum_exp[0], 2.0, 1e-12), "sum' {}", p.sum_exp[0]);
    ensure!(close(p.stats[0], 8f64.ln(), 1e-12), "stats' {}", p.stats[0]);
    ensure!(close(p.o[0], 3.5, 1e-12), "o' {}", p.o[0]);
    // dSink with dO = 1: -P_sink * (dO . O) = -(1/2) * 3.5.
    let d_o = [1.0];
    let ds = refattn::backward_d_sink(
        &View::bhsd(&p.o, [1, 1, 1, 1]),
        &View::bhsd(&d_o, [1, 1, 1, 1]),
        &p.stats,
        &[4f64.ln()],
    )?;
    ensure!(close(ds[0], -1.75, 1e-12), "dsink {}", ds[0]);
    // A fully masked row (no key): max -inf, sum 0, O 0; with a sink:
    // max' = sink, sum' = 1, O 0.
    let lens = [0usize];
    let masked = refattn::SdpaConfig {
        seq_len_kv: Some(&lens),
        ..refattn::SdpaConfig::new(1.0)
    };
    let p = refattn::forward_parts(&qv, &kv, &vv, &masked, None)?;
    ensure!(
        p.max[0] == f64::NEG_INFINITY && p.sum_exp[0] == 0.0 && p.o[0] == 0.0,
        "masked row {p:?}"
    );
    let p = refattn::forward_parts(&qv, &kv, &vv, &masked, Some(&[0.5]))?;
    ensure!(
        p.max[0] == 0.5 && close(p.sum_exp[0], 1.0, 1e-15) && p.o[0] == 0.0,
        "masked row with a sink {p:?}"
    );
    // Refusals are typed and named.
    match refattn::forward_parts(&qv, &kv, &vv, &c, Some(&[1.0, 2.0])) {
        Err(e @ Error::Mismatch { .. }) if e.to_string().contains("sink") => {}
        other => return Err(format!("sink of 2 for 1 head: {other:?}").into()),
    }
    match refattn::forward_parts(&qv, &kv, &vv, &c, Some(&[f64::NAN])) {
        Err(e @ Error::InvalidArgument { .. }) if e.to_string().contains("sink") => {}
        other => return Err(format!("NaN sink: {other:?}").into()),
    }
    Ok(())
}

/// Deterministic pseudo-random values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f64> {
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

/// `forward_parts` without a sink agrees with `forward`; with a sink, the
/// backward's dQ / dK / dV (from the sink's statistics) and dSink agree with
/// central finite differences of `L = sum(O ⊙ G)`.
fn reference_finite_differences() -> TestResult {
    let (b, h, hkv, sq, skv, d, dv) = (2, 4, 2, 3, 5, 4, 3);
    let q = values(b * h * sq * d, 1);
    let k = values(b * hkv * skv * d, 2);
    let v = values(b * hkv * skv * dv, 3);
    let g = values(b * h * sq * dv, 4);
    let sink: Vec<f64> = values(h, 5).iter().map(|x| 2.0 * x).collect();
    let lens_kv = [5usize, 3];
    let cfg = refattn::SdpaConfig {
        causal: refattn::CausalMask::BottomRight,
        seq_len_kv: Some(&lens_kv),
        ..refattn::SdpaConfig::new(0.7)
    };
    let views = |q: &[f64], k: &[f64], v: &[f64], sink: &[f64]| {
        refattn::forward_parts(
            &View::bhsd(q, [b, h, sq, d]),
            &View::bhsd(k, [b, hkv, skv, d]),
            &View::bhsd(v, [b, hkv, skv, dv]),
            &cfg,
            Some(sink),
        )
    };
    let plain = refattn::forward(
        &View::bhsd(&q, [b, h, sq, d]),
        &View::bhsd(&k, [b, hkv, skv, d]),
        &View::bhsd(&v, [b, hkv, skv, dv]),
        &cfg,
    )?;
    let parts = refattn::forward_parts(
        &View::bhsd(&q, [b, h, sq, d]),
        &View::bhsd(&k, [b, hkv, skv, d]),
        &View::bhsd(&v, [b, hkv, skv, dv]),
        &cfg,
        None,
    )?;
    ensure!(
        parts.o == plain.o && parts.stats == plain.stats,
        "no sink != forward"
    );
    for (r, (&m, &l)) in parts.max.iter().zip(&parts.sum_exp).enumerate() {
        ensure!(
            close(m + l.ln(), parts.stats[r], 1e-12),
            "row {r}: max + log(sum_exp) != stats"
        );
    }
    let f = views(&q, &k, &v, &sink)?;
    let loss = |o: &[f64]| o.iter().zip(&g).map(|(a, b)| a * b).sum::<f64>();
    let grads = refattn::backward(
        &View::bhsd(&q, [b, h, sq, d]),
        &View::bhsd(&k, [b, hkv, skv, d]),
        &View::bhsd(&v, [b, hkv, skv, dv]),
        &View::bhsd(&f.o, [b, h, sq, dv]),
        &View::bhsd(&g, [b, h, sq, dv]),
        &f.stats,
        &cfg,
    )?;
    let ds = refattn::backward_d_sink(
        &View::bhsd(&f.o, [b, h, sq, dv]),
        &View::bhsd(&g, [b, h, sq, dv]),
        &f.stats,
        &sink,
    )?;
    let eps = 1e-6;
    let fd = |which: usize, idx: usize| -> Result<f64, Error> {
        let mut bufs = [q.clone(), k.clone(), v.clone(), sink.clone()];
        bufs[which][idx] += eps;
        let up = loss(&views(&bufs[0], &bufs[1], &bufs[2], &bufs[3])?.o);
        bufs[which][idx] -= 2.0 * eps;
        let down = loss(&views(&bufs[0], &bufs[1], &bufs[2], &bufs[3])?.o);
        Ok((up - down) / (2.0 * eps))
    };
    let mut checked = 0;
    for (which, analytic) in [(0, &grads.dq), (1, &grads.dk), (2, &grads.dv), (3, &ds)] {
        for (idx, &a) in analytic.iter().enumerate() {
            let num = fd(which, idx)?;
            ensure!(
                close(a, num, 1e-6),
                "tensor {which}[{idx}]: analytic {a} vs finite difference {num}"
            );
            checked += 1;
        }
    }
    ensure!(ds.iter().any(|x| x.abs() > 1e-3), "dSink all ~0: {ds:?}");
    eprintln!("reference: {checked} gradient entries match finite differences (dSink {ds:?})");
    Ok(())
}

/// Split-KV: attention over keys [0, n) and [n, N), combined with their
/// max / sum_exp, equals the attention over all N keys (with a sink, the
/// sink joins one chunk).
fn reference_split_kv() -> TestResult {
    let (b, h, sq, n_all, d, dv) = (2, 3, 4, 11, 8, 5);
    let q = values(b * h * sq * d, 11);
    let k: Vec<f64> = values(b * h * n_all * d, 12)
        .iter()
        .map(|x| 3.0 * x)
        .collect();
    let v = values(b * h * n_all * dv, 13);
    let sink = values(h, 14);
    let cfg = refattn::SdpaConfig::new(0.5);
    let kfull = View::bhsd(&k, [b, h, n_all, d]);
    let vfull = View::bhsd(&v, [b, h, n_all, dv]);
    let qv = View::bhsd(&q, [b, h, sq, d]);
    for split in [1, 4, 10] {
        for with_sink in [false, true] {
            let s = with_sink.then_some(&sink[..]);
            let full = refattn::forward_parts(&qv, &kfull, &vfull, &cfg, s)?;
            // The truth without a sink is the plain forward (another code
            // path); with one, a sink is one more key of value 0: the plain
            // forward over K, V with that key appended (below).
            let truth = if with_sink {
                sink_as_key(&q, &k, &v, &sink, (b, h, sq, n_all, d, dv), 0.5)?
            } else {
                refattn::forward(&qv, &kfull, &vfull, &cfg)?.o
            };
            for (i, (x, y)) in full.o.iter().zip(&truth).enumerate() {
                ensure!(
                    close(*x, *y, 1e-12),
                    "sink {with_sink}: forward_parts o[{i}] {x} vs the independent truth {y}"
                );
            }
            let ks = [n_all * h * d, n_all * d, d, 1];
            let vs = [n_all * h * dv, n_all * dv, dv, 1];
            let a = refattn::forward_parts(
                &qv,
                &View::new(&k, [b, h, split, d], ks),
                &View::new(&v, [b, h, split, dv], vs),
                &cfg,
                s,
            )?;
            let rest = n_all - split;
            let bpart = refattn::forward_parts(
                &qv,
                &View::new(&k[split * d..], [b, h, rest, d], ks),
                &View::new(&v[split * dv..], [b, h, rest, dv], vs),
                &cfg,
                None,
            )?;
            let o = refattn::combine_partials(
                &[
                    refattn::Partial {
                        o: &a.o,
                        max: &a.max,
                        sum_exp: &a.sum_exp,
                    },
                    refattn::Partial {
                        o: &bpart.o,
                        max: &bpart.max,
                        sum_exp: &bpart.sum_exp,
                    },
                ],
                dv,
            )?;
            for (i, (x, y)) in o.iter().zip(&full.o).enumerate() {
                ensure!(
                    close(*x, *y, 1e-12),
                    "split {split} sink {with_sink}: o[{i}] {x} vs {y}"
                );
            }
        }
    }
    Ok(())
}

/// Adversarial reference inputs finish at once with a typed error: a view
/// repeating one element (stride 0) over a huge d_v for dSink, and many
/// partials sharing one slice for the split-KV combination (before the
/// work bounds, the first looped 2^40 times and the last ran 2^33 steps).
fn reference_adversarial_bounds() -> TestResult {
    let start = std::time::Instant::now();
    let one = [1.0];
    let huge = View::new(&one, [1, 1, 1, 1 << 40], [0, 0, 0, 0]);
    match refattn::backward_d_sink(&huge, &huge, &[0.0], &[0.0]) {
        Err(e @ Error::InvalidArgument { .. }) if e.to_string().contains("o.dims") => {}
        other => return Err(format!("dSink over d_v 2^40 (stride 0): {other:?}").into()),
    }
    // Every dim within MAX_ELEMENTS, the work (16 rows x 2^29) over MAX_WORK.
    let wide = View::new(&one, [1, 1, 16, 1 << 29], [0, 0, 0, 0]);
    match refattn::backward_d_sink(&wide, &wide, &[0.0; 16], &[0.0]) {
        Err(e @ Error::InvalidArgument { .. }) if e.to_string().contains("MAX_WORK") => {}
        other => return Err(format!("dSink over 16 rows x d_v 2^29: {other:?}").into()),
    }
    let rows = 1 << 16;
    let o = vec![0.5; rows];
    let m = vec![0.0; rows];
    let l = vec![1.0; rows];
    let p = refattn::Partial {
        o: &o,
        max: &m,
        sum_exp: &l,
    };
    let parts = vec![p; 1 << 17];
    match refattn::combine_partials(&parts, 1) {
        Err(e @ Error::InvalidArgument { .. }) if e.to_string().contains("partials") => {}
        other => {
            return Err(format!("2^17 partials of 2^16 rows: {:?}", other.map(|v| v.len())).into());
        }
    }
    // Within the bounds both still work.
    let ok = refattn::combine_partials(&parts[..4], 1)?;
    ensure!(ok.iter().all(|&x| close(x, 0.5, 1e-15)), "4 equal partials");
    let small = View::new(&one, [1, 1, 1, 8], [0, 0, 0, 0]);
    let ds = refattn::backward_d_sink(&small, &small, &[0.0], &[0.0])?;
    // -exp(0 - 0) * (8 * 1 * 1)
    ensure!(close(ds[0], -8.0, 1e-15), "dsink {ds:?}");
    ensure!(
        start.elapsed() < std::time::Duration::from_secs(30),
        "took {:?}",
        start.elapsed()
    );
    Ok(())
}

/// The attention with a sink computed as the plain forward over one more
/// key per head: a sink logit `t` is a key whose score is `t` and whose
/// value is 0 (Q gets one extra dim holding 1, that key holds `t / scale`
/// there and 0 elsewhere; every real key holds 0 there).
fn sink_as_key(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    sink: &[f64],
    (b, h, sq, n, d, dv): (usize, usize, usize, usize, usize, usize),
    scale: f64,
) -> Result<Vec<f64>, Error> {
    let (d1, n1) = (d + 1, n + 1);
    let mut q1 = vec![0.0; b * h * sq * d1];
    let mut k1 = vec![0.0; b * h * n1 * d1];
    let mut v1 = vec![0.0; b * h * n1 * dv];
    for bh in 0..b * h {
        for i in 0..sq {
            let (src, dst) = ((bh * sq + i) * d, (bh * sq + i) * d1);
            q1[dst..dst + d].copy_from_slice(&q[src..src + d]);
            q1[dst + d] = 1.0;
        }
        for j in 0..n {
            let (src, dst) = ((bh * n + j) * d, (bh * n1 + j) * d1);
            k1[dst..dst + d].copy_from_slice(&k[src..src + d]);
            let (src, dst) = ((bh * n + j) * dv, (bh * n1 + j) * dv);
            v1[dst..dst + dv].copy_from_slice(&v[src..src + dv]);
        }
        k1[(bh * n1 + n) * d1 + d] = sink[bh % h] / scale;
    }
    Ok(refattn::forward(
        &View::bhsd(&q1, [b, h, sq, d1]),
        &View::bhsd(&k1, [b, h, n1, d1]),
        &View::bhsd(&v1, [b, h, n1, dv]),
        &refattn::SdpaConfig::new(scale),
    )?
    .o)
}

/// Random, often inconsistent inputs to the reference's new entry points
/// (`forward_parts`, `backward_d_sink`, `combine_partials`): dims (0, small
/// or huge), strides (0 included), buffer, sink, stats and partial lengths,
/// non-finite values. Never a panic, every call quick, every refusal typed.
fn reference_property_random() -> TestResult {
    let mut runner = crate::support::prop_runner(256);
    let dim = || prop_oneof![0usize..4, Just(1usize << 29), Just(usize::MAX)];
    let strat = (
        [dim(), dim(), dim(), dim()],
        [0usize..3, 0usize..3, 0usize..3, 0usize..3],
        0usize..40,
        (0usize..5, 0usize..20, 0usize..4),
        prop_oneof![Just(0.5f64), Just(f64::NAN), Just(f64::INFINITY)],
        (0usize..5, 0usize..6, 0usize..3),
    );
    runner
        .run(
            &strat,
            |(dims, strides, buf, (n_sink, n_stats, d_v), x, (n_parts, rows, skew))| {
                let start = std::time::Instant::now();
                let data = vec![x; buf];
                let view = View::new(&data, dims, strides);
                let sink = vec![x; n_sink];
                let stats = vec![x; n_stats];
                let typed =
                    |e: &Error| matches!(e, Error::InvalidArgument { .. } | Error::Mismatch { .. });
                match refattn::backward_d_sink(&view, &view, &stats, &sink) {
                    Ok(ds) => prop_assert_eq!(ds.len(), dims[1]),
                    Err(e) => prop_assert!(typed(&e), "dSink: untyped {e:?}"),
                }
                let small = View::new(&data, dims.map(|d| d.min(3)), strides);
                match refattn::forward_parts(
                    &small,
                    &small,
                    &small,
                    &refattn::SdpaConfig::new(x),
                    Some(&sink),
                ) {
                    Ok(p) => prop_assert_eq!(p.max.len(), p.sum_exp.len()),
                    Err(e) => prop_assert!(typed(&e), "forward_parts: untyped {e:?}"),
                }
                let o = vec![x; rows * d_v + skew];
                let m = vec![x; rows];
                let l = vec![x; rows + skew / 2];
                let parts: Vec<refattn::Partial<'_>> = (0..n_parts)
                    .map(|_| refattn::Partial {
                        o: &o,
                        max: &m,
                        sum_exp: &l,
                    })
                    .collect();
                match refattn::combine_partials(&parts, d_v) {
                    Ok(c) => prop_assert_eq!(c.len(), rows * d_v),
                    Err(e) => prop_assert!(typed(&e), "combine: untyped {e:?}"),
                }
                prop_assert!(
                    start.elapsed() < std::time::Duration::from_secs(5),
                    "slow: {:?}",
                    start.elapsed()
                );
                Ok(())
            },
        )
        .map_err(|e| format!("{e}"))?;
    Ok(())
}

pub fn main() {
    run(vec![
        unit("sdpa_reference_softmax_hand_cases", reference_hand_cases),
        unit(
            "sdpa_reference_sink_finite_differences",
            reference_finite_differences,
        ),
        unit("sdpa_reference_split_kv_combination", reference_split_kv),
        unit(
            "sdpa_reference_softmax_adversarial_bounds",
            reference_adversarial_bounds,
        ),
        unit(
            "sdpa_reference_softmax_property_random",
            reference_property_random,
        ),
    ]);
}
