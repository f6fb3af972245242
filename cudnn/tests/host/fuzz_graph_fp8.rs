//! A fuzz target for the graph API's FP8 entry points (issue 25), run by
//! proptest with a fixed seed (`PROPTEST_RNG_SEED` picks another;
//! `CUDNN_RS_FUZZ_CASES` multiplies the case counts).
//!
//! - `unit::` `Graph::fp8_matmul` on random and adversarial operands (every
//!   dtype, ranks 0 to 9, dims from 1 to `i64::MAX`, transposed or not),
//!   scales (wrong type, rank or dims, from another graph) and compute
//!   types: every call returns within a second without panicking, an error
//!   is typed and names its argument, a success adds the pattern's ops and
//!   leaves the graph's compute type as it was; `check_fp8_target` on any
//!   i64.
//! - `host::` (the real cuDNN, no device): some of the successful graphs
//!   are built and planned for H200 (cuDNN plans or refuses with a typed
//!   error) and for A100 (always the typed `Unsupported`).
//!
//! Prints `fuzz: ...` counts on stderr.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use crate::support;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use cudnn::Error;
use cudnn::graph::{
    DType, Fp8MatmulScales, Fp8SdpaConfig, Graph, Plan, Policy, Target, TensorSpec,
    check_block_scale_target, check_fp8_target,
};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngSeed, TestRunner};
use support::*;

const CALL_LIMIT: Duration = Duration::from_secs(1);
const PLAN_LIMIT: Duration = Duration::from_secs(30);

fn runner() -> TestRunner {
    let seed = crate::support::fuzz_seed(0x0f8_25b);
    TestRunner::new(Config {
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(seed),
        ..Config::default()
    })
}

fn cases(n: u32) -> u32 {
    crate::support::fuzz_cases(n)
}

/// A typed error; a validation error names its argument.
fn typed(e: &Error) -> Result<(), String> {
    match e {
        Error::InvalidArgument { arg, rule, .. }
            if !arg.trim().is_empty() && !rule.trim().is_empty() =>
        {
            Ok(())
        }
        Error::Mismatch { what, .. } if !what.trim().is_empty() => Ok(()),
        Error::Unsupported { what, .. } if !what.trim().is_empty() => Ok(()),
        Error::Cudnn { .. } | Error::Load(_) | Error::MissingSymbol(_) => Ok(()),
        other => Err(format!("an untyped or unnamed error: {other:?}")),
    }
}

fn timed<T>(
    what: &str,
    limit: Duration,
    f: impl FnOnce() -> Result<T, Error>,
) -> Result<Result<T, Error>, String> {
    let start = Instant::now();
    let r = catch_unwind(AssertUnwindSafe(f)).map_err(|_| format!("{what}: panicked"))?;
    let took = start.elapsed();
    if took > limit {
        return Err(format!("{what}: took {took:?}"));
    }
    if let Err(e) = &r {
        typed(e).map_err(|m| format!("{what}: {m}"))?;
    }
    Ok(r)
}

fn dtype() -> impl Strategy<Value = DType> {
    prop_oneof![
        6 => Just(DType::Fp8E4M3),
        3 => Just(DType::Fp8E5M2),
        1 => prop::sample::select(vec![
            DType::F32, DType::F16, DType::BF16, DType::F64, DType::I8, DType::U8,
            DType::I32, DType::I64, DType::Bool,
        ]),
    ]
}

fn dim() -> impl Strategy<Value = i64> {
    prop_oneof![
        12 => prop::sample::select(vec![1i64, 2, 16, 32, 64, 128]),
        1 => prop::sample::select(vec![0, -1, 3, 17, i64::MIN, i64::MAX, 1 << 31, 1 << 40]),
    ]
}

#[derive(Clone, Debug)]
struct Case {
    at: DType,
    bt: DType,
    rank: usize,
    m: i64,
    k: i64,
    k_b: i64,
    n: i64,
    batch_a: i64,
    batch_b: i64,
    b_k_major: bool,
    scale_rank: usize,
    scale_dims_bad: bool,
    scale_t: DType,
    scale_c: bool,
    foreign: bool,
    amax: bool,
    compute: DType,
}

fn case() -> impl Strategy<Value = Case> {
    (
        (
            dtype(),
            dtype(),
            prop_oneof![8 => 2usize..5, 1 => 0usize..10],
        ),
        (
            dim(),
            dim(),
            prop_oneof![9 => Just(None), 1 => dim().prop_map(Some)],
            dim(),
        ),
        (
            prop_oneof![3 => Just(1i64), 1 => dim()],
            prop_oneof![3 => Just(1i64), 1 => dim()],
        ),
        (
            any::<bool>(),
            prop_oneof![9 => Just(None), 1 => (0usize..10).prop_map(Some)],
            prop::bool::weighted(0.05),
        ),
        (
            prop_oneof![12 => Just(DType::F32), 1 => dtype()],
            any::<bool>(),
            prop::bool::weighted(0.03),
            any::<bool>(),
        ),
        prop::sample::select(vec![DType::F32, DType::F16, DType::BF16]),
    )
        .prop_map(
            |(
                (at, bt, rank),
                (m, k, k_b, n),
                (batch_a, batch_b),
                (b_k_major, sr, bad),
                (scale_t, scale_c, foreign, amax),
                compute,
            )| Case {
                at,
                bt,
                rank,
                m,
                k,
                k_b: k_b.unwrap_or(k),
                n,
                batch_a,
                batch_b,
                b_k_major,
                scale_rank: sr.unwrap_or(rank),
                scale_dims_bad: bad,
                scale_t,
                scale_c,
                foreign,
                amax,
                compute,
            },
        )
}

/// The operand spec: `[batch..., rows, cols]` of `rank`, or as given for
/// the ranks below 2 (which the builder must refuse).
fn operand(
    dt: DType,
    rank: usize,
    batch: i64,
    rows: i64,
    cols: i64,
    col_major: bool,
) -> Result<TensorSpec, Error> {
    let mut dims = vec![batch; rank.saturating_sub(2)];
    dims.extend([rows, cols].iter().take(rank));
    if col_major && rank >= 2 {
        let mut order: Vec<usize> = (0..rank).collect();
        order.swap(rank - 1, rank - 2);
        let mut strides = vec![1i64; rank];
        let mut acc = 1i64;
        for &i in order.iter().rev() {
            strides[i] = acc;
            acc = acc
                .checked_mul(dims[i].max(1))
                .ok_or_else(|| Error::invalid("dims", "overflow", 0))?;
        }
        return TensorSpec::new(dt, &dims, &strides);
    }
    TensorSpec::row_major(dt, &dims)
}

/// Build the case; `Ok(None)` where a spec was refused before the call.
/// A built case: the graph and what `fp8_matmul` returned.
type Built = (Graph, Result<cudnn::graph::Fp8Matmul, Error>);

fn build(c: &Case) -> Result<Option<Built>, String> {
    let mut g = Graph::new();
    g.set_compute_type(c.compute);
    let specs = (|| {
        let a = operand(c.at, c.rank, c.batch_a, c.m, c.k, false)?;
        let b = operand(c.bt, c.rank, c.batch_b, c.k_b, c.n, c.b_k_major)?;
        let mut sd = vec![1i64; c.scale_rank.max(1)];
        if c.scale_dims_bad {
            sd[0] = 2;
        }
        let s = TensorSpec::row_major(c.scale_t, &sd)?;
        Ok::<_, Error>((a, b, s))
    })();
    let Ok((a, b, s)) = specs else {
        return Ok(None);
    };
    let r = timed("fp8_matmul", CALL_LIMIT, || {
        let a = g.input("a", a)?;
        let b = g.input("b", b)?;
        let mut other = Graph::new();
        let descale_a = if c.foreign {
            other.input("x", s.clone())?
        } else {
            g.input("descale_a", s.clone())?
        };
        let descale_b = g.input("descale_b", s.clone())?;
        let scale_c = if c.scale_c {
            Some(g.input("scale_c", s)?)
        } else {
            None
        };
        g.fp8_matmul(
            a,
            b,
            &Fp8MatmulScales {
                descale_a,
                descale_b,
                scale_c,
            },
            c.amax,
        )
    })?;
    if g.compute_type() != c.compute {
        return Err(format!(
            "compute type changed: {:?} -> {:?}",
            c.compute,
            g.compute_type()
        ));
    }
    Ok(Some((g, r)))
}

/// Whether the builder's rules admit the case's types and scales (the
/// shapes aside): a success must satisfy this.
fn admissible(c: &Case) -> bool {
    c.at.is_fp8()
        && c.bt.is_fp8()
        && !(c.at == DType::Fp8E5M2 && c.bt == DType::Fp8E5M2)
        && c.scale_t == DType::F32
        && !c.scale_dims_bad
        && c.scale_rank == c.rank
        && !c.foreign
}

/// Run `n` cases; plan up to `plans` of the successes (host tier).
fn fuzz(n: u32, plans: usize) -> TestResult {
    let mut rng = runner();
    let strat = case();
    let (mut calls, mut oks, mut planned, mut refused_a100) = (0u32, 0u32, 0usize, 0usize);
    let (mut built, mut reached) = (0usize, 0usize);
    for _ in 0..n {
        let c = strat
            .new_tree(&mut rng)
            .map_err(|e| format!("strategy: {e}"))?
            .current();
        let Some((mut g, r)) = build(&c)? else {
            continue;
        };
        calls += 1;
        let Ok(m) = r else { continue };
        oks += 1;
        ensure!(admissible(&c), "accepted an inadmissible case: {c:?}");
        let sig = g.signature();
        ensure!(
            sig.contains("reduction AMax") == c.amax,
            "amax iff asked: {c:?}"
        );
        ensure!(m.amax.is_some() == c.amax, "amax handle iff asked");
        if built < plans {
            built += 1;
            let out = if c.scale_c {
                DType::Fp8E4M3
            } else {
                DType::BF16
            };
            g.output(m.c, out)?;
            let og = match timed("build", PLAN_LIMIT, || g.build())? {
                Ok(og) => og,
                Err(_) => continue,
            };
            reached += 1;
            for (tgt, fp8) in [("h200", true), ("a100", false)] {
                let target = Target::preset(tgt)?;
                let policy = Policy::default().with_max_attempts(2);
                match timed("plan", PLAN_LIMIT, || Plan::build(&og, &target, &policy))? {
                    Ok(_) => {
                        ensure!(fp8, "an FP8 matmul planned for {tgt}: {c:?}");
                        planned += 1;
                    }
                    Err(e) => {
                        if fp8 && std::env::var("FP8_FUZZ_VERBOSE").is_ok() {
                            let t = e.to_string();
                            eprintln!("h200 refused {c:?}: {}", &t[..t.len().min(300)]);
                        }
                        if !fp8 {
                            ensure!(matches!(e, Error::Unsupported { .. }), "{tgt}: {e:?}");
                            refused_a100 += 1;
                        }
                    }
                }
            }
        }
    }
    eprintln!(
        "fuzz: fp8_matmul: {n} cases, {calls} calls, {oks} built the pattern; {reached} of {built} graphs built in cuDNN, {planned} planned for h200, {refused_a100} refused for a100 (typed)"
    );
    ensure!(oks * 5 >= calls, "too few calls succeed: {oks} of {calls}");
    if plans > 0 {
        // cuDNN refuses many random shapes (alignment, broadcast batches):
        // each refusal was typed; some must plan, and A100 refuses them all.
        ensure!(planned >= 1, "none of {reached} planned for h200");
        ensure!(
            refused_a100 == reached,
            "a100 refused {refused_a100} of {reached}"
        );
    }
    Ok(())
}

fn fuzz_target_rule(n: u32) -> TestResult {
    let mut rng = runner();
    let strat = prop_oneof![4 => 0i64..1300, 1 => any::<i64>()];
    for _ in 0..n {
        let v = strat
            .new_tree(&mut rng)
            .map_err(|e| format!("strategy: {e}"))?
            .current();
        let r = timed("check_fp8_target", CALL_LIMIT, || check_fp8_target("x", v))?;
        ensure!(r.is_ok() == (v >= 890), "{v}: {r:?}");
    }
    eprintln!("fuzz: check_fp8_target: {n} architectures, all as the rule");
    Ok(())
}

fn sdpa_cfg() -> impl Strategy<Value = Fp8SdpaConfig> {
    (
        (dim(), dim(), dim(), dim()),
        prop_oneof![6 => prop::sample::select(vec![16i64, 32, 64, 128, 192, 256, 512]), 1 => dim()],
        (dtype(), prop_oneof![4 => dtype(), 1 => Just(DType::BF16)]),
        (prop_oneof![8 => Just(None), 1 => prop::sample::select(vec![0.0, -1.0, f64::NAN, f64::INFINITY, 1e-30, 0.125, 1e39, 1e-50]).prop_map(Some)]),
        (any::<bool>(), any::<bool>()),
    )
        .prop_map(|((b, h, sq, skv), d, (dt, odt), scale, (causal, training))| {
            let mut c = Fp8SdpaConfig::new(b, h, sq, skv, d);
            c.dtype = dt;
            c.o_dtype = odt;
            c.scale = scale;
            c.is_causal = causal;
            c.is_training = training;
            c
        })
}

/// Random configs and architectures / versions through the rules, and
/// random graphs through the forward and backward builders; `plans` of the
/// successes are planned for H200 (host tier).
fn fuzz_sdpa(n: u32, plans: usize) -> TestResult {
    let mut rng = runner();
    let strat = (
        sdpa_cfg(),
        prop_oneof![4 => prop::sample::select(vec![800i64, 860, 890, 900, 1000, 1030, 1200]), 1 => any::<i64>()],
        (0u32..12, 0u32..30, 0u32..3),
        (any::<bool>(), dtype(), 0u8..8),
    );
    let (mut ok_rule, mut ok_fwd, mut ok_bwd, mut planned, mut tried) =
        (0u32, 0u32, 0u32, 0usize, 0usize);
    for _ in 0..n {
        let (c, ver, v, (backward, grad, corrupt)) = strat
            .new_tree(&mut rng)
            .map_err(|e| format!("strategy: {e}"))?
            .current();
        let r = timed("check_target_for", CALL_LIMIT, || {
            c.check_target_for(backward, ver, v)
        })?;
        if r.is_ok() {
            ok_rule += 1;
            ensure!(
                ver >= 900 && c.head_dim % 16 == 0 && c.dtype.is_fp8(),
                "allowed: {c:?} {ver} {v:?}"
            );
            ensure!(v >= (9, 1, 0), "allowed before 9.1: {v:?}");
        }
        // A graph with the config's tensors, one of them corrupted (or none).
        let mut g = Graph::new();
        let built = timed("sdpa_fp8 graph", CALL_LIMIT, || {
            let spec = |s: TensorSpec, k: u8| -> Result<TensorSpec, Error> {
                match (corrupt, k) {
                    (1, 0) => Ok(s.with_dtype(DType::F16)),
                    (2, 1) => TensorSpec::row_major(s.dtype(), &[1, 1, 1, 17]),
                    (3, 2) => {
                        let d = s.dims().to_vec();
                        let mut st = s.strides().to_vec();
                        st.swap(2, 3);
                        TensorSpec::new(s.dtype(), &d, &st)
                    }
                    _ => Ok(s),
                }
            };
            let q = g.input("q", spec(c.q_spec()?, 0)?)?;
            let k = g.input("k", spec(c.kv_spec()?, 1)?)?;
            let v = g.input("v", spec(c.kv_spec()?, 2)?)?;
            if backward {
                let o = g.input("o", c.q_spec()?.with_dtype(c.o_dtype))?;
                let d_o = g.input("do", c.q_spec()?.with_dtype(grad))?;
                let st = g.input("stats", spec(c.stats_spec()?, 4)?)?;
                g.sdpa_fp8_backward(q, k, v, o, d_o, st, grad, &c)
                    .map(|_| ())
            } else {
                if c.is_training {
                    g.sdpa_fp8_forward_training(q, k, v, &c).map(|_| ())
                } else {
                    g.sdpa_fp8_forward(q, k, v, &c).map(|_| ())
                }
            }
        })?;
        if built.is_ok() {
            ensure!(c.validate().is_ok(), "built with an invalid config {c:?}");
            let s32 = c.scale_value() as f32;
            ensure!(
                s32.is_finite() && s32 != 0.0,
                "built with an f32 scale of {s32}"
            );
            if backward {
                ok_bwd += 1;
                ensure!(
                    grad.is_fp8() && c.o_dtype.is_fp8(),
                    "backward with {grad} / {}",
                    c.o_dtype
                );
            } else {
                ok_fwd += 1;
            }
            ensure!(
                !(1..=3).contains(&corrupt),
                "built with a corrupted q / k / v ({corrupt}): {c:?}"
            );
            let small = c.batch * c.heads <= 64 && c.seq_q <= 512 && c.seq_kv <= 512;
            if tried < plans && small {
                tried += 1;
                let planned_here = timed("plan", PLAN_LIMIT, || {
                    let og = g.build()?;
                    let t = Target::preset("h200")?;
                    Plan::build(&og, &t, &Policy::default().with_max_attempts(2))
                })?;
                if planned_here.is_ok() {
                    planned += 1;
                }
            }
        }
    }
    eprintln!(
        "fuzz: sdpa_fp8: {n} configs, {ok_rule} allowed by the rules, {ok_fwd} forward and {ok_bwd} backward graphs built, {planned} of {tried} planned for h200"
    );
    ensure!(ok_rule > 0 && ok_fwd > 0 && ok_bwd > 0, "too few successes");
    if plans > 0 {
        ensure!(planned > 0, "none of {tried} planned");
    }
    Ok(())
}

/// `reference::attention_fp8::forward` on random and adversarial shapes,
/// buffer lengths and scales: no panic, bounded time, typed errors; a
/// success has finite amax values and O of the shape's length.
fn fuzz_reference(n: u32) -> TestResult {
    use cudnn::Fp8Format;
    use cudnn::reference::attention_fp8::{
        Fp8AttnBwdScales, Fp8AttnScales, Fp8AttnShape, backward, forward,
    };
    use cudnn::reference::gemm_fp8::OutputType;
    let mut rng = runner();
    let ext = || prop_oneof![10 => 0usize..5, 1 => prop::sample::select(vec![usize::MAX, 1 << 30, 1 << 20, 1 << 40])];
    let strat = (
        (ext(), ext(), ext(), ext(), ext()),
        (0usize..3, any::<bool>(), any::<bool>()),
        prop_oneof![8 => Just(1.0f64), 1 => prop::sample::select(vec![f64::NAN, f64::INFINITY, 0.0, -2.0, 1e300])],
    );
    let mut oks = 0u32;
    for _ in 0..n {
        let ((b, h, sq, skv, d), (off, causal, e5), sc) = strat
            .new_tree(&mut rng)
            .map_err(|e| format!("strategy: {e}"))?
            .current();
        let shape = Fp8AttnShape {
            batch: b,
            heads: h,
            seq_q: sq,
            seq_kv: skv,
            head_dim: d,
        };
        let len = |x: usize, y: usize| {
            b.checked_mul(h)
                .and_then(|p| p.checked_mul(x))
                .and_then(|p| p.checked_mul(y))
                .filter(|&n| n <= 4096)
        };
        let (Some(nq), Some(nkv)) = (len(sq, d), len(skv, d)) else {
            let r = timed("forward (huge)", CALL_LIMIT, || {
                forward(
                    &[],
                    &[],
                    &[],
                    shape,
                    1.0,
                    causal,
                    Fp8Format::E4M3,
                    OutputType::F32,
                    &Fp8AttnScales::default(),
                )
            })?;
            ensure!(
                r.is_err(),
                "a huge shape accepted with empty buffers: {shape:?}"
            );
            continue;
        };
        let q = vec![0.5; nq.saturating_sub(usize::from(off == 1))];
        let k = vec![0.25; nkv];
        let v = vec![1.0; nkv.saturating_add(usize::from(off == 2))];
        let fmt = if e5 { Fp8Format::E5M2 } else { Fp8Format::E4M3 };
        let scales = Fp8AttnScales {
            scale_s: sc,
            ..Fp8AttnScales::default()
        };
        let label = format!("forward {shape:?} off {off} scale {sc}");
        let r = timed(&label, CALL_LIMIT, || {
            forward(
                &q,
                &k,
                &v,
                shape,
                0.5,
                causal,
                fmt,
                OutputType::Fp8(fmt),
                &scales,
            )
        })?;
        // The backward on the same buffers (stats of the query rows).
        let stats = vec![0.0; len(sq, 1).unwrap_or(0)];
        let label = format!("backward {shape:?} off {off} scale {sc}");
        let bwd_scales = Fp8AttnBwdScales {
            scale_dp: sc,
            ..Fp8AttnBwdScales::default()
        };
        let rb = timed(&label, CALL_LIMIT, || {
            backward(
                &q,
                &k,
                &v,
                &q,
                &q,
                &stats,
                shape,
                0.5,
                causal,
                fmt,
                Fp8Format::E5M2,
                &bwd_scales,
            )
        })?;
        if let Ok(g) = &rb {
            let bad_len = (off == 1 && nq > 0) || off == 2;
            ensure!(
                !bad_len && sc.is_finite(),
                "backward accepted a bad length or scale: {shape:?}"
            );
            ensure!(
                g.dq.len() == nq && g.amax.iter().all(|a| a.is_finite()),
                "{g:?}"
            );
        }
        if let Ok(f) = r {
            oks += 1;
            let bad_len = (off == 1 && nq > 0) || off == 2;
            ensure!(
                !bad_len && sc.is_finite(),
                "accepted a bad length or scale: {shape:?} {off} {sc}"
            );
            ensure!(
                f.o.len() == nq && f.amax_o.is_finite() && f.amax_s.is_finite(),
                "{f:?}"
            );
        }
    }
    eprintln!("fuzz: attention_fp8 reference: {n} cases, {oks} computed");
    ensure!(oks > 0, "none computed");
    Ok(())
}

/// Packed row-major strides of `dims` (computed here, not by the crate;
/// saturating so absurd dims still give a spec the crate can refuse).
fn row_major_strides(dims: &[i64]) -> Vec<i64> {
    let mut st = vec![1i64; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        st[i] = st[i + 1].saturating_mul(dims[i + 1].max(1));
    }
    st
}

/// Packed strides of `dims` stored in a random order drawn from `seed`
/// when `permute`, else row-major.
fn strides_in_order(dims: &[i64], permute: bool, seed: u64) -> Vec<i64> {
    if !permute {
        return row_major_strides(dims);
    }
    let mut order: Vec<usize> = (0..dims.len()).collect();
    let mut s = seed | 1;
    for i in (1..order.len()).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        order.swap(i, (s % (i as u64 + 1)) as usize);
    }
    let mut st = vec![1i64; dims.len()];
    let mut acc = 1i64;
    for &i in order.iter().rev() {
        st[i] = acc;
        acc = acc.saturating_mul(dims[i].max(1));
    }
    st
}

/// `block_scale_quantize` / `block_scale_dequantize` on random specs and
/// `check_block_scale_target` on any architecture and version: no panic,
/// bounded time, typed errors; a success has the block scale dims and a
/// packed row-major x (and scale), whatever strides were drawn.
fn fuzz_block_scale(n: u32) -> TestResult {
    let mut rng = runner();
    let shape = prop::collection::vec(
        prop_oneof![
            4 => prop::sample::select(vec![128i64, 256, 384]),
            4 => prop::sample::select(vec![1i64, 2, 32, 64, 96]),
            1 => dim()
        ],
        0..5,
    );
    let strat = (
        (shape.clone(), shape, any::<bool>()),
        dtype(),
        prop_oneof![3 => dtype(), 1 => Just(DType::Fp8E8M0)],
        any::<bool>(),
        any::<i64>(),
        (0u32..12, 0u32..30, 0u32..3),
        // Layouts: x and scale each row-major (3 in 4) or packed in a
        // random dim order.
        (
            prop::bool::weighted(0.25),
            prop::bool::weighted(0.25),
            any::<u64>(),
        ),
    );
    let (mut q_ok, mut d_ok, mut strided) = (0u32, 0u32, 0u32);
    for _ in 0..n {
        let ((xd, sd, derive), xt, ot, deq, ver, v, (xperm, sperm, pseed)) = strat
            .new_tree(&mut rng)
            .map_err(|e| format!("strategy: {e}"))?
            .current();
        // Half the scales are the right shape for x (when x's is one).
        let sd = match xd.split_last() {
            Some((&l, head)) if derive && l % 32 == 0 => {
                let mut d = head.to_vec();
                d.push(l / 32);
                d
            }
            _ => sd,
        };
        let r = timed("check_block_scale_target", CALL_LIMIT, || {
            check_block_scale_target(ver, v)
        })?;
        ensure!(
            r.is_ok() == (ver >= 1000 && v >= (9, 7, 0)),
            "rule: {ver} {v:?} {r:?}"
        );
        let xs = strides_in_order(&xd, xperm, pseed);
        let ss = strides_in_order(&sd, sperm, pseed.rotate_left(17));
        let mut g = Graph::new();
        let r = timed("block scale", CALL_LIMIT, || {
            let x = g.input("x", TensorSpec::new(xt, &xd, &xs)?)?;
            if deq {
                let s = g.input("s", TensorSpec::new(ot, &sd, &ss)?)?;
                g.block_scale_dequantize(x, s).map(|y| (y, None))
            } else {
                g.block_scale_quantize(x, ot).map(|b| (b.y, Some(b.scale)))
            }
        })?;
        if let Ok((_, scale)) = r {
            // Packed row-major x (and scale), by the definition: each
            // stride the product of the dims after it (extent-1 dims free).
            let row_major = |d: &[i64], st: &[i64]| {
                (0..d.len()).all(|i| d[i] == 1 || st[i] == d[i + 1..].iter().product::<i64>())
            };
            ensure!(row_major(&xd, &xs), "accepted x {xd:?} with strides {xs:?}");
            ensure!(
                !deq || row_major(&sd, &ss),
                "accepted scale {sd:?} with strides {ss:?}"
            );
            strided +=
                u32::from(xs != row_major_strides(&xd) || (deq && ss != row_major_strides(&sd)));
            let last = *xd.last().ok_or("no dims")?;
            ensure!(last % 32 == 0, "accepted a last dim {last}");
            ensure!(xd.len() != 3, "accepted a 3-D x {xd:?}");
            // Whole 128 x 4 scale tiles (NVIDIA's padded layout equals the
            // packed one), computed here from the rule: rows a multiple of
            // 128 (one row for a 1-D x), last / 32 a multiple of 4.
            let rows = if xd.len() >= 2 { xd[xd.len() - 2] } else { 1 };
            ensure!(
                rows % 128 == 0 && (last / 32) % 4 == 0,
                "accepted {xd:?}, whose scales NVIDIA pads"
            );
            match scale {
                Some(s) => {
                    q_ok += 1;
                    let mut want = xd.clone();
                    if let Some(l) = want.last_mut() {
                        *l /= 32;
                    }
                    ensure!(g.dims(s)? == want.as_slice(), "scale dims");
                }
                None => d_ok += 1,
            }
        }
    }
    eprintln!(
        "fuzz: block scale: {n} cases, {q_ok} quantize and {d_ok} dequantize built \
         ({strided} with other strides on extent-1 dims)"
    );
    ensure!(q_ok > 0, "no quantize built");
    Ok(())
}

pub fn main() {
    run(vec![
        unit("fuzz_block_scale_builders", || {
            fuzz_block_scale(cases(10_000))
        }),
        unit("fuzz_reference_attention_fp8", || {
            fuzz_reference(cases(5_000))
        }),
        unit("fuzz_sdpa_fp8_rules_and_builders", || {
            fuzz_sdpa(cases(10_000), 0)
        }),
        host("fuzz_sdpa_fp8_plans", || {
            if cudnn::graph::require_graph_support().is_err() {
                eprintln!(
                    "fuzz: sdpa_fp8 plans: this cuDNN cannot plan graphs (< 9.8); builders only"
                );
                return fuzz_sdpa(cases(500), 0);
            }
            fuzz_sdpa(cases(1_000), 10)
        }),
        unit("fuzz_fp8_matmul_builder", || fuzz(cases(20_000), 0)),
        unit("fuzz_fp8_target_rule", || fuzz_target_rule(cases(20_000))),
        host("fuzz_fp8_matmul_plans", || {
            if cudnn::graph::require_graph_support().is_err() {
                eprintln!(
                    "fuzz: fp8_matmul plans: this cuDNN cannot plan graphs (< 9.8); builder only"
                );
                return fuzz(cases(500), 0);
            }
            fuzz(cases(2_000), 12)
        }),
    ])
}
