//! A fuzz target for the graph API's builder, run by proptest with a fixed
//! seed (`PROPTEST_RNG_SEED` picks another; `CUDNN_RS_FUZZ_CASES`
//! multiplies the case counts).
//!
//! - `unit::` (nothing needed): random and adversarial tensor specs,
//!   convolution geometry, SDPA configs, and builder sequences over every op
//!   kind (conv fprop / dgrad / wgrad, matmul, every pointwise mode,
//!   reduction, scalars, outputs and renames, layer / RMS / batch norm and
//!   their backwards, SDPA forward and backward, compute-type changes,
//!   tensors of another graph). Every call must return (no panic, caught
//!   with `catch_unwind`) within a second, and an error must be typed; a
//!   validation error must name its argument. Enough calls must succeed that
//!   the fuzz reaches the builder's work, not only its checks.
//! - `host::` (the real cuDNN, no device): the same sequences, then
//!   `Graph::build`: cuDNN either finalizes the graph or refuses it with a
//!   typed error, and some graphs of every family must build.
//! - `unit::` SDPA rules: [`SdpaConfig::resolve_for`] and
//!   `check_target_for` (pure functions of a cuDNN version and an
//!   architecture) held to an independent model of NVIDIA's frontend 1.32
//!   (`sdpa_rules/`), at each rule's boundary and over random configs,
//!   versions and architectures; the unit tier has no cuDNN, so this is
//!   where the version rules are exercised for every release.
//! - Every reproducer of the shape-arithmetic panics as a deterministic test.
//!
//! Prints `fuzz: ...` counts on stderr.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// `ensure!(x >= bound)` must fail for NaN: a negated partial comparison on purpose.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

mod graph_reproducers;
mod sdpa_rules;
use crate::support;
use crate::support::sdpa_plans::fwd_any;

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use cudnn::Error;
use cudnn::graph::{
    AttnLayout, ConvParams, DType, Graph, NormPhase, Pointwise, Reduce, RunningStats, SdpaConfig,
    SdpaImpl, Tensor, TensorSpec,
};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngSeed, TestRunner};
use support::*;

/// The slowest one builder call may be.
const CALL_LIMIT: Duration = Duration::from_secs(1);
/// The slowest one `Graph::build` may be.
const BUILD_LIMIT: Duration = Duration::from_secs(10);

fn seed() -> u64 {
    crate::support::fuzz_seed(0x6a0f_19c5)
}

fn scale_cases(n: u32) -> u32 {
    crate::support::fuzz_cases(n)
}

fn runner() -> TestRunner {
    TestRunner::new(Config {
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(seed()),
        ..Config::default()
    })
}

#[derive(Default)]
struct Tally {
    calls: Cell<u64>,
    oks: Cell<u64>,
}

fn bump(c: &Cell<u64>) {
    c.set(c.get() + 1);
}

/// Whether `e` is a typed error the builder may return, and a validation
/// error names its argument.
fn typed(e: &Error) -> Result<(), String> {
    match e {
        Error::InvalidArgument { arg, rule, .. } => {
            if arg.trim().is_empty() || rule.trim().is_empty() {
                return Err(format!("an InvalidArgument that names no argument: {e:?}"));
            }
            Ok(())
        }
        Error::Mismatch { what, .. } => {
            if what.trim().is_empty() {
                return Err(format!("a Mismatch that names nothing: {e:?}"));
            }
            Ok(())
        }
        Error::Unsupported { what, .. } if !what.trim().is_empty() => Ok(()),
        // cuDNN's refusal (SDPA version checks, `Graph::build`) or a library
        // that is not there (unit tier without cuDNN).
        Error::Cudnn { .. } | Error::Load(_) | Error::MissingSymbol(_) => Ok(()),
        other => Err(format!("an unexpected error kind: {other:?}")),
    }
}

/// Run `f` under `catch_unwind` and a clock: a panic, a slow call or an
/// untyped error is a failure (returned as text); `Ok(Some)` on success.
fn call<T>(
    tally: &Tally,
    what: &str,
    limit: Duration,
    f: impl FnOnce() -> Result<T, Error>,
) -> Result<Option<T>, String> {
    let start = Instant::now();
    let r = catch_unwind(AssertUnwindSafe(f));
    let took = start.elapsed();
    bump(&tally.calls);
    let r = r.map_err(|p| {
        let msg = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        format!("{what}: panicked: {msg}")
    })?;
    if took > limit {
        return Err(format!("{what}: took {took:?}"));
    }
    match r {
        Ok(v) => {
            bump(&tally.oks);
            Ok(Some(v))
        }
        Err(e) => typed(&e).map(|_| None).map_err(|m| format!("{what}: {m}")),
    }
}

// ---- strategies ----

/// An i64 a user could pass: mostly small and valid, often adversarial.
fn any_i64() -> impl Strategy<Value = i64> {
    prop_oneof![
        10 => 1i64..9,
        2 => prop::sample::select(vec![
            0,
            -1,
            i64::MIN,
            i64::MIN + 1,
            i64::MAX,
            i64::MAX - 1,
            1 << 24,
            (1 << 24) + 1,
            1 << 30,
            1 << 31,
            1 << 32,
            1 << 62,
            i64::from(i32::MAX),
            i64::from(i32::MAX) + 1,
        ]),
        1 => any::<i64>(),
    ]
}

/// A dim: small (valid) mostly.
fn small_dim() -> impl Strategy<Value = i64> {
    prop_oneof![12 => 1i64..6, 1 => any_i64()]
}

fn dims(max_rank: usize) -> impl Strategy<Value = Vec<i64>> {
    prop::collection::vec(small_dim(), 0..=max_rank)
}

fn dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(vec![
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I8,
        DType::U8,
        DType::I32,
        DType::I64,
        DType::Bool,
        DType::Fp8E4M3,
        DType::Fp8E5M2,
    ])
}

/// A spec request: (how, dtype, dims, strides).
fn spec_req() -> impl Strategy<Value = (u8, DType, Vec<i64>, Vec<i64>)> {
    (0u8..4, dtype(), dims(9), dims(9))
}

fn make_spec((how, dt, d, s): &(u8, DType, Vec<i64>, Vec<i64>)) -> Result<TensorSpec, Error> {
    match how {
        0 => TensorSpec::new(*dt, d, s),
        1 => TensorSpec::row_major(*dt, d),
        2 => TensorSpec::nchw(*dt, d),
        _ => TensorSpec::nhwc(*dt, d),
    }
}

fn conv_params() -> impl Strategy<Value = ConvParams> {
    let v = |n: usize| prop::collection::vec(prop_oneof![6 => 0i64..3, 1 => any_i64()], n..=n);
    (1usize..4, any::<bool>(), 0u8..8).prop_flat_map(move |(n, flip, odd)| {
        // Sometimes the lengths disagree.
        let m = if odd == 0 { n + 1 } else { n };
        (v(n), v(m), v(n), v(n)).prop_map(move |(pre, post, stride, dil)| {
            let one_for_zero = |v: Vec<i64>| -> Vec<i64> {
                v.into_iter().map(|s| if s == 0 { 1 } else { s }).collect()
            };
            ConvParams::new(&[], &[], &[])
                .with_padding(pre, post)
                .with_stride(one_for_zero(stride))
                .with_dilation(one_for_zero(dil))
                .with_flip(flip)
        })
    })
}

fn sdpa_config() -> impl Strategy<Value = SdpaConfig> {
    let d = prop_oneof![
        6 => prop::sample::select(vec![8i64, 16, 32, 64, 128]),
        1 => any_i64()
    ];
    let s = prop_oneof![6 => 1i64..130, 1 => any_i64()];
    (
        (prop_oneof![6 => 1i64..3, 1 => any_i64()], 1i64..5, 1i64..5),
        (s.clone(), s),
        (d.clone(), d),
        prop::sample::select(vec![DType::F16, DType::BF16, DType::F32]),
        (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()),
        prop_oneof![
            3 => Just(None),
            1 => Just(Some(0.0)),
            2 => Just(Some(0.1)),
            1 => prop::sample::select(vec![1.0, -0.5, f64::NAN, f64::INFINITY]).prop_map(Some),
        ],
        prop_oneof![
            4 => Just(None),
            1 => prop::sample::select(vec![0.0, f64::NAN, 1e300, -2.0]).prop_map(Some)
        ],
        prop::sample::select(vec![SdpaImpl::Auto, SdpaImpl::Native, SdpaImpl::Composite]),
    )
        .prop_map(
            |(
                (b, h, kvdiv),
                (sq, skv),
                (dq, dv),
                dt,
                (causal, pad, train, bhsd),
                drop,
                scale,
                imp,
            )| {
                let kv = if h % kvdiv == 0 { h / kvdiv } else { kvdiv };
                let mut c = SdpaConfig::new(b, h, sq, dq, dt)
                    .kv_len(skv)
                    .gqa(kv)
                    .causal(causal)
                    .padding(pad)
                    .training(train)
                    .implementation(imp)
                    .layout(if bhsd {
                        AttnLayout::Bhsd
                    } else {
                        AttnLayout::Bshd
                    });
                c.head_dim_v = dv;
                if let Some(p) = drop {
                    c = c.dropout(p);
                }
                if let Some(s) = scale {
                    c = c.scale(s);
                }
                c
            },
        )
}

/// One builder step. Tensor operands are indices into the graph's pool
/// (taken modulo its length; `None` is a tensor of another graph).
#[derive(Clone, Debug)]
enum Step {
    Input((u8, DType, Vec<i64>, Vec<i64>)),
    Scalar(f64, DType, usize),
    Compute(DType),
    ConvFprop(usize, usize, ConvParams),
    ConvDgrad(usize, usize, Vec<i64>, ConvParams),
    ConvWgrad(usize, usize, Vec<i64>, ConvParams),
    Matmul(usize, usize),
    Pointwise(usize, Vec<Option<usize>>),
    Reduction(usize, usize, Vec<i64>),
    Output(usize, DType),
    Rename(usize, String),
    Norm(u8, Vec<usize>, f64, bool),
    NormBwd(u8, Vec<usize>),
    Sdpa(SdpaConfig, bool),
}

fn operand() -> impl Strategy<Value = Option<usize>> {
    prop_oneof![20 => (0usize..64).prop_map(Some), 1 => Just(None)]
}

fn step() -> impl Strategy<Value = Step> {
    let ix = || 0usize..64;
    let eps = prop::sample::select(vec![1e-5, 0.0, -1.0, f64::NAN, 2.0]);
    prop_oneof![
        6 => spec_req().prop_map(Step::Input),
        1 => (
            prop::sample::select(vec![0.5, f64::NAN, f64::INFINITY]),
            dtype(),
            prop_oneof![4 => 1usize..5, 1 => prop::sample::select(vec![0usize, 9, usize::MAX])]
        )
            .prop_map(|(v, d, r)| Step::Scalar(v, d, r)),
        1 => dtype().prop_map(Step::Compute),
        3 => (ix(), ix(), conv_params()).prop_map(|(a, b, p)| Step::ConvFprop(a, b, p)),
        2 => (ix(), ix(), dims(5), conv_params()).prop_map(|(a, b, d, p)| Step::ConvDgrad(a, b, d, p)),
        2 => (ix(), ix(), dims(5), conv_params()).prop_map(|(a, b, d, p)| Step::ConvWgrad(a, b, d, p)),
        3 => (ix(), ix()).prop_map(|(a, b)| Step::Matmul(a, b)),
        5 => (ix(), prop::collection::vec(operand(), 0..4)).prop_map(|(m, i)| Step::Pointwise(m, i)),
        2 => (0usize..9, ix(), dims(5)).prop_map(|(o, x, d)| Step::Reduction(o, x, d)),
        3 => (ix(), dtype()).prop_map(|(t, d)| Step::Output(t, d)),
        1 => (ix(), prop::sample::select(vec!["x".to_string(), "y".into(), String::new()]))
            .prop_map(|(t, n)| Step::Rename(t, n)),
        2 => (0u8..4, prop::collection::vec(ix(), 6), eps, any::<bool>())
            .prop_map(|(m, t, e, r)| Step::Norm(m, t, e, r)),
        1 => (0u8..3, prop::collection::vec(ix(), 5)).prop_map(|(m, t)| Step::NormBwd(m, t)),
        2 => (sdpa_config(), any::<bool>()).prop_map(|(c, b)| Step::Sdpa(c, b)),
    ]
}

const REDUCE: [Reduce; 9] = [
    Reduce::Add,
    Reduce::Mul,
    Reduce::Min,
    Reduce::Max,
    Reduce::AMax,
    Reduce::Avg,
    Reduce::Norm1,
    Reduce::Norm2,
    Reduce::MulNoZeros,
];

/// Run one builder sequence; returns the graph.
fn run_steps(steps: &[Step], tally: &Tally) -> Result<Graph, String> {
    let mut g = Graph::new();
    let mut other = Graph::new();
    let foreign = other
        .input(
            "foreign",
            TensorSpec::row_major(DType::F32, &[2, 3, 4]).unwrap(),
        )
        .unwrap();
    let mut pool: Vec<Tensor> = Vec::new();
    let pick = |pool: &[Tensor], i: Option<usize>| -> Tensor {
        match i {
            Some(i) if !pool.is_empty() => pool[i % pool.len()],
            _ => foreign,
        }
    };
    let modes = Pointwise::all();
    for (k, s) in steps.iter().enumerate() {
        let what = format!("step {k} {s:?}");
        let si = k;
        let p = |i: usize| pick(&pool, Some(i));
        let out: Option<Vec<Tensor>> = match s {
            Step::Input(req) => call(tally, &what, CALL_LIMIT, || {
                let spec = make_spec(req)?;
                // The span of an accepted spec is representable.
                spec.span_bytes()?;
                let _ = spec.element_count();
                g.input(&format!("in{k}"), spec)
            })?
            .map(|t| vec![t]),
            Step::Scalar(v, d, r) => {
                call(tally, &what, CALL_LIMIT, || g.scalar(*v, *d, *r))?.map(|t| vec![t])
            }
            Step::Compute(d) => {
                g.set_compute_type(*d);
                None
            }
            Step::ConvFprop(a, b, prm) => {
                let (a, b) = (p(*a), p(*b));
                call(tally, &what, CALL_LIMIT, || g.conv_fprop(a, b, prm))?.map(|t| vec![t])
            }
            Step::ConvDgrad(a, b, d, prm) => {
                let (a, b) = (p(*a), p(*b));
                call(tally, &what, CALL_LIMIT, || g.conv_dgrad(a, b, d, prm))?.map(|t| vec![t])
            }
            Step::ConvWgrad(a, b, d, prm) => {
                let (a, b) = (p(*a), p(*b));
                call(tally, &what, CALL_LIMIT, || g.conv_wgrad(a, b, d, prm))?.map(|t| vec![t])
            }
            Step::Matmul(a, b) => {
                let (a, b) = (p(*a), p(*b));
                call(tally, &what, CALL_LIMIT, || g.matmul(a, b))?.map(|t| vec![t])
            }
            Step::Pointwise(m, ins) => {
                let mode = modes[m % modes.len()];
                let ins: Vec<Tensor> = ins.iter().map(|&i| pick(&pool, i)).collect();
                call(tally, &what, CALL_LIMIT, || g.pointwise(mode, &ins))?.map(|t| vec![t])
            }
            Step::Reduction(o, x, d) => {
                let x = p(*x);
                call(tally, &what, CALL_LIMIT, || {
                    g.reduction(REDUCE[o % REDUCE.len()], x, d)
                })?
                .map(|t| vec![t])
            }
            Step::Output(t, d) => {
                let t = p(*t);
                call(tally, &what, CALL_LIMIT, || g.output(t, *d))?;
                None
            }
            Step::Rename(t, n) => {
                let t = p(*t);
                call(tally, &what, CALL_LIMIT, || g.rename(t, n))?;
                None
            }
            Step::Norm(m, t, eps, running) => {
                let t: Vec<Tensor> = t.iter().map(|&i| p(i)).collect();
                let r = call(tally, &what, CALL_LIMIT, || match m {
                    0 => g.layer_norm(t[0], t[1], t[2], *eps, NormPhase::Training),
                    1 => g.rms_norm(t[0], t[1], Some(t[2]), *eps, NormPhase::Inference),
                    2 => g.batch_norm(
                        t[0],
                        t[1],
                        t[2],
                        *eps,
                        running.then_some(RunningStats {
                            mean: t[3],
                            var: t[4],
                            momentum: *eps,
                        }),
                    ),
                    _ => g
                        .batch_norm_inference(t[0], t[1], t[2], t[3], t[4], *eps)
                        .map(|y| cudnn::graph::NormOutputs {
                            y,
                            mean: None,
                            inv_variance: None,
                            running_mean: None,
                            running_var: None,
                        }),
                })?;
                r.map(|o| {
                    [Some(o.y), o.mean, o.inv_variance]
                        .into_iter()
                        .flatten()
                        .collect()
                })
            }
            Step::NormBwd(m, t) => {
                let t: Vec<Tensor> = t.iter().map(|&i| p(i)).collect();
                call(tally, &what, CALL_LIMIT, || match m {
                    0 => g.layer_norm_backward(t[0], t[1], t[2], t[3], t[4]),
                    1 => g.rms_norm_backward(t[0], t[1], t[2], t[4], true),
                    _ => g.batch_norm_backward(t[0], t[1], t[2], t[3], t[4]),
                })?
                .map(|o| vec![o.dx])
            }
            Step::Sdpa(cfg, bwd) => {
                // What a correct caller passes, when the config has specs;
                // pool tensors otherwise.
                let specs = (|| -> Result<_, Error> {
                    Ok((
                        cfg.q_spec()?,
                        cfg.k_spec()?,
                        cfg.v_spec()?,
                        cfg.o_spec()?,
                        cfg.stats_spec()?,
                    ))
                })();
                let _ = (cfg.forward_flops(), cfg.backward_flops(), cfg.scale_value());
                call(tally, &what, CALL_LIMIT, || cfg.validate())?;
                call(tally, &what, CALL_LIMIT, || {
                    let (q, k, v, o, st) = match &specs {
                        Ok((q, k, v, o, st)) => (
                            g.input(&format!("q{si}"), q.clone())?,
                            g.input(&format!("k{si}"), k.clone())?,
                            g.input(&format!("v{si}"), v.clone())?,
                            g.input(&format!("o{si}"), o.clone())?,
                            g.input(&format!("st{si}"), st.clone())?,
                        ),
                        Err(_) => (p(0), p(1), p(2), p(3), p(4)),
                    };
                    if *bwd {
                        let d_o = g.input(&format!("do{si}"), g.spec(o)?.clone())?;
                        g.sdpa_backward(q, k, v, o, d_o, st, cfg)
                            .map(|b| vec![b.dq])
                    } else {
                        fwd_any(&mut g, q, k, v, cfg).map(|f| vec![f.o])
                    }
                })?
            }
        };
        if let Some(ts) = out {
            pool.extend(ts);
        }
    }
    // The signature of anything built must be computable.
    call(tally, "signature", CALL_LIMIT, || Ok(g.signature()))?;
    Ok(g)
}

fn fuzz_sequences(cases: u32, build_every: u32) -> TestResult {
    let tally = Tally::default();
    let builds = Tally::default();
    let mut runner = runner();
    let strat = prop::collection::vec(step(), 1..12);
    let start = Instant::now();
    let cases = scale_cases(cases);
    for case in 0..cases {
        let steps = strat
            .new_tree(&mut runner)
            .map_err(|e| format!("strategy: {e}"))?
            .current();
        let g = run_steps(&steps, &tally).map_err(|e| format!("case {case}: {e}"))?;
        if build_every > 0 && case % build_every == 0 {
            call(&builds, &format!("case {case} build"), BUILD_LIMIT, || {
                g.build()
            })
            .map_err(|e| format!("case {case}: {e}: {steps:?}"))?;
        }
    }
    let (calls, oks) = (tally.calls.get(), tally.oks.get());
    eprintln!(
        "fuzz: {cases} sequences, {calls} builder calls ({oks} ok), {} builds ({} ok), {:.1} s",
        builds.calls.get(),
        builds.oks.get(),
        start.elapsed().as_secs_f64()
    );
    ensure!(
        oks * 5 >= calls,
        "too few calls get past validation: {oks} of {calls}"
    );
    Ok(())
}

/// A well-formed graph of one family with random sizes, types, compute
/// types and parameters: `(family, small dims, dtype, compute, conv params, pointwise mode, sdpa config)`.
type Coherent = (u8, Vec<i64>, DType, DType, ConvParams, usize, SdpaConfig);

fn coherent() -> impl Strategy<Value = Coherent> {
    let small_params = (1usize..3, 0i64..2, 1i64..3, 1i64..3)
        .prop_map(|(n, p, s, d)| ConvParams::new(&vec![p; n], &vec![s; n], &vec![d; n]));
    (
        0u8..9,
        prop::collection::vec(1i64..9, 6),
        prop::sample::select(vec![DType::F16, DType::BF16, DType::F32]),
        prop::sample::select(vec![DType::F32, DType::F16, DType::BF16]),
        small_params,
        0usize..64,
        sdpa_config(),
    )
}

fn coherent_graph((fam, d, dt, compute, prm, mode, cfg): &Coherent) -> Result<Graph, Error> {
    let mut g = Graph::new();
    g.set_compute_type(*compute);
    let n = prm.spatial_dims();
    let spatial = |k: usize| {
        d[2..2 + n]
            .iter()
            .map(|&x| x + k as i64)
            .collect::<Vec<_>>()
    };
    let x_dims: Vec<i64> = [d[0], d[1] * 2].into_iter().chain(spatial(4)).collect();
    let w_dims: Vec<i64> = [d[2] * 2, d[1] * 2]
        .into_iter()
        .chain(spatial(0).iter().map(|&x| x.min(3)))
        .collect();
    let y = match fam {
        0 => {
            let x = g.input("x", TensorSpec::nhwc(*dt, &x_dims)?)?;
            let w = g.input("w", TensorSpec::nhwc(*dt, &w_dims)?)?;
            let y = g.conv_fprop(x, w, prm)?;
            g.relu(y)?
        }
        1 => {
            let y_dims = prm.output_dims("fuzz", &x_dims, &w_dims)?;
            let dy = g.input("dy", TensorSpec::nhwc(*dt, &y_dims)?)?;
            let w = g.input("w", TensorSpec::nhwc(*dt, &w_dims)?)?;
            g.conv_dgrad(dy, w, &x_dims, prm)?
        }
        2 => {
            let y_dims = prm.output_dims("fuzz", &x_dims, &w_dims)?;
            let x = g.input("x", TensorSpec::nhwc(*dt, &x_dims)?)?;
            let dy = g.input("dy", TensorSpec::nhwc(*dt, &y_dims)?)?;
            g.conv_wgrad(x, dy, &w_dims, prm)?
        }
        3 => {
            let a = g.input(
                "a",
                TensorSpec::row_major(*dt, &[d[0], d[1] * 8, d[2] * 8])?,
            )?;
            let b = g.input("b", TensorSpec::row_major(*dt, &[1, d[2] * 8, d[3] * 8])?)?;
            let c = g.matmul(a, b)?;
            g.gelu_erf(c)?
        }
        4 => {
            let modes = Pointwise::all();
            let m = modes[mode % modes.len()];
            let want = match m.arity() {
                cudnn::graph::Arity::Unary => 1,
                cudnn::graph::Arity::Ternary => 3,
                _ => 2,
            };
            let mut ins = Vec::new();
            for i in 0..want {
                let dims = if i == 1 {
                    vec![1, d[1], 1, 1]
                } else {
                    vec![d[0], d[1], d[2], d[3]]
                };
                let dtype = if i == 2 { DType::Bool } else { *dt };
                ins.push(g.input(&format!("in{i}"), TensorSpec::nhwc(dtype, &dims)?)?);
            }
            g.pointwise(m, &ins)?
        }
        5 => {
            let x = g.input("x", TensorSpec::row_major(*dt, &[d[0], d[1], d[2] * 4])?)?;
            g.reduction(REDUCE[mode % REDUCE.len()], x, &[d[0], 1, 1])?
        }
        6 => {
            let xd = [d[0] * 4, d[1] * 8, 1, 1];
            let x = g.input("x", TensorSpec::row_major(*dt, &xd)?)?;
            let sd = [1, d[1] * 8, 1, 1];
            let sc = g.input("scale", TensorSpec::row_major(*dt, &sd)?)?;
            let bi = g.input("bias", TensorSpec::row_major(*dt, &sd)?)?;
            match mode % 3 {
                0 => g.layer_norm(x, sc, bi, 1e-5, NormPhase::Training)?.y,
                1 => g.rms_norm(x, sc, Some(bi), 1e-5, NormPhase::Inference)?.y,
                _ => g.batch_norm(x, sc, bi, 1e-5, None)?.y,
            }
        }
        7 | 8 => {
            let q = g.input("q", cfg.q_spec()?)?;
            let k = g.input("k", cfg.k_spec()?)?;
            let v = g.input("v", cfg.v_spec()?)?;
            if *fam == 7 {
                fwd_any(&mut g, q, k, v, cfg)?;
            } else {
                let o = g.input("o", cfg.o_spec()?)?;
                let d_o = g.input("do", cfg.o_spec()?)?;
                let st = g.input("stats", cfg.stats_spec()?)?;
                g.sdpa_backward(q, k, v, o, d_o, st, cfg)?;
            }
            return Ok(g);
        }
        _ => unreachable!(),
    };
    g.output(y, *dt)?;
    Ok(g)
}

/// Well-formed graphs of every family through `Graph::build`: cuDNN
/// finalizes each or refuses it with a typed error, and most get there.
fn fuzz_builds(cases: u32) -> TestResult {
    let made = Tally::default();
    let builds = Tally::default();
    let mut per_family = [(0u32, 0u32); 9];
    let mut runner = runner();
    let strat = coherent();
    let cases = scale_cases(cases);
    let start = Instant::now();
    for case in 0..cases {
        let c = strat
            .new_tree(&mut runner)
            .map_err(|e| format!("strategy: {e}"))?
            .current();
        let Some(g) = call(
            &made,
            &format!("case {case} make {c:?}"),
            CALL_LIMIT,
            || coherent_graph(&c),
        )?
        else {
            continue;
        };
        let fam = usize::from(c.0).min(8);
        per_family[fam].0 += 1;
        if call(
            &builds,
            &format!("case {case} build {c:?}"),
            BUILD_LIMIT,
            || g.build(),
        )?
        .is_some()
        {
            per_family[fam].1 += 1;
        }
    }
    eprintln!(
        "fuzz: {cases} well-formed cases, {} made, {} built by cuDNN, per family (made, built) {per_family:?}, {:.1} s",
        made.oks.get(),
        builds.oks.get(),
        start.elapsed().as_secs_f64()
    );
    for (fam, (m, b)) in per_family.iter().enumerate() {
        ensure!(*m > 0 && *b > 0, "family {fam}: {m} made, {b} built");
    }
    ensure!(
        builds.oks.get() * 2 >= made.oks.get(),
        "too few graphs reach a finalized op graph: {} of {}",
        builds.oks.get(),
        made.oks.get()
    );
    Ok(())
}

fn fuzz_specs(cases: u32) -> TestResult {
    let tally = Tally::default();
    let mut runner = runner();
    let strat = (
        spec_req(),
        conv_params(),
        dims(5),
        dims(5),
        sdpa_config(),
        prop::sample::select(vec![AttnLayout::Bshd, AttnLayout::Bhsd]),
        prop::collection::vec(any_i64(), 4),
    );
    let cases = scale_cases(cases);
    let start = Instant::now();
    for case in 0..cases {
        let (req, prm, x, w, cfg, layout, bhsd) = strat
            .new_tree(&mut runner)
            .map_err(|e| format!("strategy: {e}"))?
            .current();
        let w2 = |r: Result<Option<()>, String>| r.map_err(|e| format!("case {case}: {e}"));
        w2(call(&tally, "spec", CALL_LIMIT, || {
            let s = make_spec(&req)?;
            s.span_bytes()?;
            let _ = s.element_count();
            Ok(())
        }))?;
        w2(call(&tally, "output_dims", CALL_LIMIT, || {
            let y = prm.output_dims("fuzz", &x, &w)?;
            // An accepted geometry gives extents >= 1.
            if y.iter().any(|&d| d < 1) {
                return Err(Error::invalid(
                    "fuzz",
                    "an output extent < 1",
                    format!("{y:?}"),
                ));
            }
            Ok(())
        }))?;
        w2(call(&tally, "sdpa specs", CALL_LIMIT, || {
            let _ = (cfg.forward_flops(), cfg.backward_flops());
            cfg.validate()?;
            // A config that validates has every spec.
            for s in [
                cfg.q_spec(),
                cfg.k_spec(),
                cfg.v_spec(),
                cfg.o_spec(),
                cfg.stats_spec(),
                cfg.score_spec(),
            ] {
                s.map_err(|e| Error::invalid("validated config", "a spec failed", e))?;
            }
            Ok(())
        }))?;
        w2(call(&tally, "AttnLayout::strides", CALL_LIMIT, || {
            layout
                .strides(bhsd[0], bhsd[1], bhsd[2], bhsd[3])
                .map(|_| ())
        }))?;
    }
    let (calls, oks) = (tally.calls.get(), tally.oks.get());
    eprintln!(
        "fuzz: {cases} spec cases, {calls} calls ({oks} ok), {:.1} s",
        start.elapsed().as_secs_f64()
    );
    ensure!(oks * 10 >= calls, "too few calls succeed: {oks} of {calls}");
    Ok(())
}

/// A host test that needs graph planning (cuDNN >= 9.8): skipped, visibly,
/// on an older stack.
fn host9(name: &str, f: impl FnOnce() -> TestResult + Send + 'static) -> libtest_mimic::Trial {
    if libs_missing().is_none() && cudnn::graph::require_graph_support().is_err() {
        eprintln!("skipped: host::{name}: needs cuDNN >= 9.8 (this stack has an older cuDNN)");
        return crate::support::trial(format!("host::{name}"), f).with_ignored_flag(true);
    }
    host(name, f)
}

pub fn main() {
    run(vec![
        unit(
            "graph_shape_reproducers_are_typed_errors",
            graph_reproducers::reproducers,
        ),
        unit(
            "graph_compute_type_is_part_of_the_signature",
            graph_reproducers::compute_type_in_signature,
        ),
        unit("fuzz_graph_specs_and_configs", || fuzz_specs(30_000)),
        unit("sdpa_rules_at_their_boundaries", sdpa_rules::fixed_cases),
        unit("fuzz_sdpa_rules_for_given_versions", || {
            let n = scale_cases(20_000);
            let resolved = sdpa_rules::fuzz(&mut runner(), n)?;
            eprintln!(
                "fuzz: sdpa rules: {n} configs x versions x architectures, {resolved} resolved, all as the model"
            );
            ensure!(
                resolved > u64::from(n) / 4,
                "too few resolve: {resolved} of {n}"
            );
            Ok(())
        }),
        unit("fuzz_graph_builder_sequences", || fuzz_sequences(12_000, 0)),
        host9("fuzz_graph_build", || {
            fuzz_sequences(3_000, 1)?;
            fuzz_builds(6_000)
        }),
    ])
}
