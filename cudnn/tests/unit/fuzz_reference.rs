//! Unit tier (nothing needed): a fuzz target of the project's own, run by
//! proptest with a fixed seed (`PROPTEST_RNG_SEED` picks another), over the
//! public functions of `cudnn::reference` (ops, conv, gemm, norm,
//! attention) and the algorithm cache loader.
//!
//! Shapes are adversarial: zeros, small sizes, and sizes past
//! `reference::MAX_ELEMENTS` up to `usize::MAX`, in mismatched ranks and
//! with buffers of the right, a wrong or no length. Every call must return
//! (no panic, caught with `catch_unwind`), within a second, and an error
//! must be a typed [`Error::InvalidArgument`] or [`Error::Mismatch`]. Sizes
//! between a few hundred elements and `MAX_ELEMENTS` are left out on
//! purpose: they are legitimate, just slow, and the bounds only promise to
//! refuse what lies beyond them.
//!
//! The cache loader gets random bytes and random mutations of a valid file;
//! random keys must always survive a save and a load.
//!
//! Prints `fuzz: N cases, P panics, T s` on stderr. `CUDNN_RS_FUZZ_CASES`
//! multiplies the case counts (for a longer local run).

use crate::support;

use std::cell::Cell;
use std::fmt::Debug;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cudnn::Error;
use cudnn::blas::{Epilogue, Layout, Order};
use cudnn::dnn::{
    ActivationMode, AlgoCache, AlgoChoice, AlgoKey, BatchNormMode, CacheSearch, ConvDirection,
    MathPolicy, OpTensorOp, PoolingMode, ReduceOp, SoftmaxAlgorithm, SoftmaxMode,
};
use cudnn::reference::attention::{self, CausalMask, SdpaConfig, View};
use cudnn::reference::conv::{self, BiasActivation, ConvMode, ConvParams, Layout as ConvLayout};
use cudnn::reference::{gemm, norm, ops};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use support::*;

/// The slowest one call may be.
const CALL_LIMIT: Duration = Duration::from_secs(1);

/// Buffers longer than this are not made (an exact length past it becomes
/// a short buffer).
const MAX_BUFFER: usize = 4096;

/// Sizes past `reference::MAX_ELEMENTS` (2^30).
const HUGE: [usize; 9] = [
    (1 << 30) + 1,
    1 << 31,
    1 << 32,
    1 << 40,
    1 << 62,
    usize::MAX / 2,
    usize::MAX / 2 + 1,
    usize::MAX - 1,
    usize::MAX,
];

/// Values for the data: ordinary, extreme and not finite.
const VALUES: [f64; 10] = [
    0.0,
    1.0,
    -1.0,
    0.5,
    -2.25,
    1e300,
    -1e-300,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
];

/// Counters shared by the families.
#[derive(Default)]
struct Tally {
    cases: Cell<u64>,
    panics: Cell<u64>,
    /// Calls that returned `Ok` (so the fuzz reaches the computations, not
    /// only the checks).
    oks: Cell<u64>,
    calls: Cell<u64>,
}

/// How long one case may run before the watchdog ends the process (a call
/// that never returns cannot be timed by the call itself).
const HANG_LIMIT: Duration = Duration::from_secs(20);

/// The case being run, for the watchdog's report.
static CURRENT: Mutex<String> = Mutex::new(String::new());
/// Bumped at every case.
static PROGRESS: AtomicU64 = AtomicU64::new(0);
static DONE: AtomicBool = AtomicBool::new(false);

/// A thread that ends the process, naming the case, when no case finished
/// for [`HANG_LIMIT`].
fn watchdog() {
    std::thread::spawn(|| {
        let mut last = (PROGRESS.load(Ordering::SeqCst), Instant::now());
        while !DONE.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(200));
            let now = PROGRESS.load(Ordering::SeqCst);
            if now != last.0 {
                last = (now, Instant::now());
            } else if last.1.elapsed() > HANG_LIMIT {
                let case = CURRENT.lock().map(|c| c.clone()).unwrap_or_default();
                eprintln!("fuzz: a case ran for more than {HANG_LIMIT:?}: {case}");
                std::process::exit(101);
            }
        }
    });
}

fn seed() -> u64 {
    crate::support::fuzz_seed(0xf022_cd1e)
}

fn scale_cases(n: u32) -> u32 {
    crate::support::fuzz_cases(n)
}

fn config(cases: u32) -> Config {
    Config {
        cases: scale_cases(cases),
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(seed()),
        max_shrink_iters: 512,
        ..Config::default()
    }
}

/// Run `f` under `catch_unwind` and a clock: a panic or a slow call fails
/// the case, an error must be typed. Returns the result for more checks.
fn call<T>(
    tally: &Tally,
    what: &str,
    f: impl FnOnce() -> Result<T, Error>,
) -> Result<Option<T>, TestCaseError> {
    let start = Instant::now();
    let r = catch_unwind(AssertUnwindSafe(f));
    let took = start.elapsed();
    let r = match r {
        Ok(r) => r,
        Err(p) => {
            tally.panics.set(tally.panics.get() + 1);
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            return Err(TestCaseError::fail(format!("{what}: panicked: {msg}")));
        }
    };
    if took > CALL_LIMIT {
        return Err(TestCaseError::fail(format!("{what}: took {took:?}")));
    }
    tally.calls.set(tally.calls.get() + 1);
    match r {
        Ok(v) => {
            tally.oks.set(tally.oks.get() + 1);
            Ok(Some(v))
        }
        Err(Error::InvalidArgument { .. } | Error::Mismatch { .. }) => Ok(None),
        Err(e) => Err(TestCaseError::fail(format!("{what}: untyped error {e:?}"))),
    }
}

/// A dimension: mostly small (0 to 3), sometimes past the bounds.
fn dim() -> impl Strategy<Value = usize> {
    prop_oneof![
        12 => 0usize..4,
        2 => prop::sample::select(HUGE.to_vec()),
        1 => (1usize << 31)..=usize::MAX,
    ]
}

fn shape(max_rank: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(dim(), 0..=max_rank)
}

/// The element count (0 with a 0 dimension, whatever the others), `None`
/// on overflow.
fn count(shape: &[usize]) -> Option<usize> {
    if shape.contains(&0) {
        return Some(0);
    }
    shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

/// A buffer for `shape` by `mode`: mostly its exact length (when small
/// enough), else one more, a few, or none.
fn data(shape: &[usize], mode: u8, seed: u64) -> Vec<f64> {
    let exact = count(shape).filter(|&n| n <= MAX_BUFFER);
    let len = match (mode % 6, exact) {
        (0..=2, Some(n)) => n,
        (3, Some(n)) => n + 1,
        (0..=4, _) => (seed % 7) as usize,
        _ => 0,
    };
    values(len, seed)
}

fn values(len: usize, seed: u64) -> Vec<f64> {
    (0..len)
        .map(|i| VALUES[((seed as usize).wrapping_add(i.wrapping_mul(7))) % VALUES.len()])
        .collect()
}

/// `a` with the dims of `b` where `mask` has a bit set (and `a`'s rank).
fn related(a: &[usize], b: &[usize], mask: u8) -> Vec<usize> {
    a.iter()
        .enumerate()
        .map(|(i, &d)| {
            if mask >> (i % 8) & 1 == 1 {
                b.get(i).copied().unwrap_or(1)
            } else {
                d
            }
        })
        .collect()
}

fn activation(m: u8) -> ActivationMode {
    match m % 7 {
        0 => ActivationMode::Sigmoid,
        1 => ActivationMode::Relu,
        2 => ActivationMode::Tanh,
        3 => ActivationMode::ClippedRelu {
            ceiling: VALUES[(m as usize / 7) % VALUES.len()],
        },
        4 => ActivationMode::Elu {
            alpha: VALUES[(m as usize / 7) % VALUES.len()],
        },
        5 => ActivationMode::Swish {
            beta: VALUES[(m as usize / 7) % VALUES.len()],
        },
        _ => ActivationMode::Identity,
    }
}

const REDUCE: [ReduceOp; 9] = [
    ReduceOp::Add,
    ReduceOp::Mul,
    ReduceOp::Min,
    ReduceOp::Max,
    ReduceOp::Amax,
    ReduceOp::Avg,
    ReduceOp::Norm1,
    ReduceOp::Norm2,
    ReduceOp::MulNoZeros,
];
const POOL: [PoolingMode; 4] = [
    PoolingMode::Max,
    PoolingMode::MaxDeterministic,
    PoolingMode::AverageIncludePadding,
    PoolingMode::AverageExcludePadding,
];
const BN: [BatchNormMode; 3] = [
    BatchNormMode::PerActivation,
    BatchNormMode::Spatial,
    BatchNormMode::SpatialPersistent,
];
const SOFTMAX: [SoftmaxAlgorithm; 3] = [
    SoftmaxAlgorithm::Fast,
    SoftmaxAlgorithm::Accurate,
    SoftmaxAlgorithm::Log,
];
const OP_TENSOR: [OpTensorOp; 6] = [
    OpTensorOp::Add,
    OpTensorOp::Mul,
    OpTensorOp::Min,
    OpTensorOp::Max,
    OpTensorOp::Sqrt,
    OpTensorOp::Not,
];
const EPILOGUES: [Epilogue; 16] = [
    Epilogue::None,
    Epilogue::Relu,
    Epilogue::ReluAux,
    Epilogue::Bias,
    Epilogue::ReluBias,
    Epilogue::ReluAuxBias,
    Epilogue::GeluTanh,
    Epilogue::GeluTanhAux,
    Epilogue::GeluTanhBias,
    Epilogue::GeluTanhAuxBias,
    Epilogue::DRelu,
    Epilogue::DReluBgrad,
    Epilogue::DGeluTanh,
    Epilogue::DGeluTanhBgrad,
    Epilogue::BgradA,
    Epilogue::BgradB,
];

fn pick<T: Copy>(all: &[T], m: u8) -> T {
    all[m as usize % all.len()]
}

fn ensure_len(what: &str, got: usize, want: Option<usize>) -> Result<(), TestCaseError> {
    if want != Some(got) {
        return Err(TestCaseError::fail(format!(
            "{what}: returned {got} values, the shape has {want:?}"
        )));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// ops

#[derive(Debug, Clone)]
struct OpsCase {
    which: u8,
    s: [Vec<usize>; 4],
    lens: [u8; 3],
    mode: u8,
    mask: u8,
    seed: u64,
}

fn ops_case() -> impl Strategy<Value = OpsCase> {
    (
        0u8..16,
        [shape(5), shape(5), shape(5), shape(5)],
        any::<[u8; 3]>(),
        any::<u8>(),
        any::<u8>(),
        any::<u64>(),
    )
        .prop_map(|(which, s, lens, mode, mask, seed)| OpsCase {
            which,
            s,
            lens,
            mode,
            mask,
            seed,
        })
}

fn ops_one(t: &Tally, c: &OpsCase) -> Result<(), TestCaseError> {
    let [s0, s1, s2, s3] = &c.s;
    let x = data(s0, c.lens[0], c.seed);
    let rel = related(s0, s1, c.mask);
    match c.which {
        0 => {
            // src is s0 with some dims set to 1; dst is s0 with others from s1.
            let src: Vec<usize> = s0
                .iter()
                .enumerate()
                .map(|(i, &d)| if c.mode >> (i % 8) & 1 == 1 { 1 } else { d })
                .collect();
            let sd = data(&src, c.lens[1], c.seed);
            if let Some(y) = call(t, "broadcast", || ops::broadcast(&sd, &src, &rel))? {
                ensure_len("broadcast", y.len(), count(&rel))?;
            }
            call(t, "add_tensor", || {
                ops::add_tensor(1.0, &sd, &src, 0.5, &x, s0)
            })?;
        }
        1 => {
            let strides: Vec<usize> = s1
                .iter()
                .chain(std::iter::repeat(&0))
                .take(s0.len() + (c.mode as usize % 2))
                .copied()
                .collect();
            let mem = values((c.seed % 64) as usize, c.seed);
            if let Some(y) = call(t, "gather", || ops::gather(&mem, s0, &strides))? {
                ensure_len("gather", y.len(), count(s0))?;
            }
            let mut mem = mem;
            call(t, "scatter", || ops::scatter(&x, s0, &strides, &mut mem))?;
        }
        2 => {
            let cs: Vec<usize> = s0
                .iter()
                .enumerate()
                .map(|(i, &d)| if c.mask >> (i % 8) & 1 == 1 { 1 } else { d })
                .collect();
            let cs = if c.mode & 0x80 != 0 { s1.clone() } else { cs };
            let op = pick(&REDUCE, c.mode);
            if let Some((v, idx)) = call(t, "reduce", || ops::reduce(op, &x, s0, &cs))? {
                ensure_len("reduce", v.len(), count(&cs))?;
                ensure_len("reduce indices", idx.len(), count(&cs))?;
            }
        }
        3 | 4 => {
            let algo = pick(&SOFTMAX, c.mode);
            let mode = if c.mode & 4 == 0 {
                SoftmaxMode::Instance
            } else {
                SoftmaxMode::Channel
            };
            if c.which == 3 {
                if let Some(y) = call(t, "softmax_forward", || {
                    ops::softmax_forward(algo, mode, &x, s0)
                })? {
                    ensure_len("softmax_forward", y.len(), Some(x.len()))?;
                }
            } else {
                let dy = data(s0, c.lens[1], c.seed ^ 1);
                if let Some(dx) = call(t, "softmax_backward", || {
                    ops::softmax_backward(algo, mode, &x, &dy, s0)
                })? {
                    ensure_len("softmax_backward", dx.len(), Some(x.len()))?;
                }
            }
        }
        5 | 6 => {
            // x = s0; window, pad, stride from the others (trimmed to the
            // spatial rank, often repaired to valid values).
            let nd = s0.len().saturating_sub(2);
            let spatial = |s: &[usize], fill: usize| -> Vec<usize> {
                s.iter()
                    .chain(std::iter::repeat(&fill))
                    .take(nd)
                    .copied()
                    .collect()
            };
            let repair = c.mode & 0x40 != 0;
            let window: Vec<usize> = spatial(s1, 1)
                .into_iter()
                .map(|w| if repair { w.clamp(1, 3) } else { w })
                .collect();
            let pad: Vec<usize> = spatial(s2, 0)
                .into_iter()
                .zip(&window)
                .map(|(p, &w)| {
                    if repair {
                        p.min(w.saturating_sub(1))
                    } else {
                        p
                    }
                })
                .collect();
            let stride: Vec<usize> = spatial(s3, 1)
                .into_iter()
                .map(|s| if repair { s.max(1) } else { s })
                .collect();
            let mode = pick(&POOL, c.mode);
            let fwd = call(t, "pool_forward", || {
                ops::pool_forward(mode, &x, s0, &window, &pad, &stride)
            })?;
            if let Some((y, ys)) = &fwd {
                ensure_len("pool_forward", y.len(), count(ys))?;
            }
            if c.which == 6 {
                let dy = match &fwd {
                    Some((y, _)) if c.lens[1].is_multiple_of(2) => y.clone(),
                    _ => values((c.seed % 9) as usize, c.seed),
                };
                if let Some(dx) = call(t, "pool_backward", || {
                    ops::pool_backward(mode, &x, s0, &dy, &window, &pad, &stride)
                })? {
                    ensure_len("pool_backward", dx.len(), Some(x.len()))?;
                }
            }
        }
        7..=9 => {
            let mode = pick(&BN, c.mode);
            let eps = VALUES[c.mode as usize % VALUES.len()];
            let stats = call(t, "batch_norm_stats", || {
                ops::batch_norm_stats(mode, &x, s0, eps)
            })?;
            let p = stats
                .as_ref()
                .map_or((c.seed % 5) as usize, |s| s.mean.len());
            let p = if c.lens[1].is_multiple_of(3) {
                p + 1
            } else {
                p
            };
            let scale = values(p, c.seed);
            match c.which {
                7 => {
                    call(t, "batch_norm_inference", || {
                        ops::batch_norm_inference(mode, &x, s0, &scale, &scale, &scale, &scale, eps)
                    })?;
                }
                8 => {
                    call(t, "batch_norm_training", || {
                        ops::batch_norm_training(mode, &x, s0, &scale, &scale, eps)
                    })?;
                }
                _ => {
                    let dy = data(s0, c.lens[2], c.seed ^ 3);
                    call(t, "batch_norm_backward", || {
                        ops::batch_norm_backward(mode, &x, s0, &dy, &scale, eps)
                    })?;
                    call(t, "running_average", || {
                        ops::running_average(&scale, &x, 0.1)
                    })?;
                }
            }
        }
        10 => {
            let b = data(&rel, c.lens[1], c.seed ^ 5);
            let a = data(s0, c.lens[2], c.seed ^ 7);
            let op = pick(&OP_TENSOR, c.mode);
            let b_arg = (c.mode & 0x80 == 0).then_some((&b[..], &rel[..]));
            if let Some(y) = call(t, "op_tensor", || {
                ops::op_tensor(op, 1.0, &a, 2.0, b_arg, 0.0, &x, s0)
            })? {
                ensure_len("op_tensor", y.len(), Some(x.len()))?;
            }
        }
        11 => {
            let mode = activation(c.mode);
            let y = ops::activation_forward(mode, &x);
            ensure_len("activation_forward", y.len(), Some(x.len()))?;
            let dy = data(s0, c.lens[1], c.seed);
            call(t, "activation_backward", || {
                ops::activation_backward(mode, &x, &dy)
            })?;
        }
        12 => {
            let keep: Vec<bool> = (0..x.len() + (c.lens[1] as usize % 2))
                .map(|i| (c.seed >> (i % 64)) & 1 == 1)
                .collect();
            let p = VALUES[c.mode as usize % VALUES.len()];
            call(t, "dropout_forward", || ops::dropout_forward(&x, &keep, p))?;
            call(t, "dropout_backward", || {
                ops::dropout_backward(&x, &keep, p)
            })?;
            let y = data(s1, c.lens[2], c.seed);
            call(t, "dropout_mask", || ops::dropout_mask(&x, &y))?;
        }
        13 => {
            let y = data(s1, c.lens[1], c.seed);
            call(t, "blend", || ops::blend(1.0, &x, 0.5, &y))?;
            call(t, "dot", || ops::dot(&x, &y))?;
            call(t, "element_count", || ops::element_count(s0))?;
            let st = ops::packed_strides(s0);
            ensure_len("packed_strides", st.len(), Some(s0.len()))?;
        }
        14 => {
            // Finite differences of a reference (a small x only: it calls
            // `f` twice per element).
            let small: Vec<f64> = x.iter().copied().take(8).collect();
            call(t, "finite_difference", || {
                ops::finite_difference(
                    |v| {
                        ops::softmax_forward(
                            SoftmaxAlgorithm::Accurate,
                            SoftmaxMode::Instance,
                            v,
                            &[1, v.len()],
                        )
                        .map(|y| y.first().copied().unwrap_or(0.0))
                    },
                    &small,
                    1e-6,
                )
            })?;
        }
        _ => {
            // for_each_index on a shape whose count is small or has a 0.
            if count(s0).is_some_and(|n| n <= MAX_BUFFER) || s0.contains(&0) {
                let mut n = 0usize;
                ops::for_each_index(s0, |_| n += 1);
                ensure_len("for_each_index", n, count(s0))?;
            }
            let _ = s2;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// conv

#[derive(Debug, Clone)]
struct ConvCase {
    which: u8,
    x: Vec<usize>,
    w: Vec<usize>,
    pad: Vec<usize>,
    stride: Vec<usize>,
    dilation: Vec<usize>,
    groups: usize,
    lens: [u8; 4],
    mode: u8,
    seed: u64,
}

fn conv_case() -> impl Strategy<Value = ConvCase> {
    (
        0u8..7,
        shape(4),
        shape(4),
        [shape(2), shape(2), shape(2)],
        dim(),
        any::<[u8; 4]>(),
        any::<u8>(),
        any::<u64>(),
    )
        .prop_map(
            |(which, x, w, [pad, stride, dilation], groups, lens, mode, seed)| ConvCase {
                which,
                x,
                w,
                pad,
                stride,
                dilation,
                groups,
                lens,
                mode,
                seed,
            },
        )
}

fn conv_one(t: &Tally, c: &ConvCase) -> Result<(), TestCaseError> {
    // Half the cases are repaired towards a valid convolution (small
    // dims, matching ranks and channels), so the loops run too.
    let repair = c.mode & 1 == 1;
    let x_shape: Vec<usize> = if repair {
        let mut x: Vec<usize> = c.x.iter().map(|&d| d.clamp(1, 3)).collect();
        x.resize(x.len().max(3), 2);
        x
    } else {
        c.x.clone()
    };
    let nd = x_shape.len().saturating_sub(2);
    let fix = |v: &[usize], fill: usize, lo: usize, hi: usize| -> Vec<usize> {
        if !repair {
            return v.to_vec();
        }
        v.iter()
            .chain(std::iter::repeat(&fill))
            .take(nd)
            .map(|&d| d.clamp(lo, hi))
            .collect()
    };
    let groups = if repair { 1 } else { c.groups };
    let w_shape = if repair && c.mode & 2 == 0 {
        let mut w = vec![
            c.w.first().copied().unwrap_or(1).clamp(1, 3),
            x_shape.get(1).copied().unwrap_or(1),
        ];
        w.extend(fix(c.w.get(2..).unwrap_or(&[]), 1, 1, 2));
        w
    } else {
        c.w.clone()
    };
    let p = ConvParams::new(0)
        .with_pad(&fix(&c.pad, 0, 0, 1))
        .with_stride(&fix(&c.stride, 1, 1, 2))
        .with_dilation(&fix(&c.dilation, 1, 1, 2))
        .with_groups(groups)
        .with_mode(if c.mode & 4 == 0 {
            ConvMode::CrossCorrelation
        } else {
            ConvMode::Convolution
        });
    let layout = if c.mode & 8 == 0 {
        ConvLayout::ChannelsFirst
    } else {
        ConvLayout::ChannelsLast
    };
    let x = data(&x_shape, c.lens[0], c.seed);
    let w = data(&w_shape, c.lens[1], c.seed ^ 1);
    let y_shape = call(t, "output_shape", || p.output_shape(&x_shape, &w_shape))?;
    let dy_shape = y_shape.clone().unwrap_or_else(|| c.w.clone());
    let dy = data(&dy_shape, c.lens[2], c.seed ^ 2);
    match c.which {
        0 => {
            if let Some((y, ys)) = call(t, "conv forward", || {
                conv::forward(&x, &x_shape, &w, &w_shape, &p, layout)
            })? {
                ensure_len("conv forward", y.len(), count(&ys))?;
            }
        }
        1 => {
            if let Some(dx) = call(t, "conv backward_data", || {
                conv::backward_data(&dy, &dy_shape, &w, &w_shape, &x_shape, &p, layout)
            })? {
                ensure_len("conv backward_data", dx.len(), count(&x_shape))?;
            }
        }
        2 => {
            if let Some(dw) = call(t, "conv backward_filter", || {
                conv::backward_filter(&x, &x_shape, &dy, &dy_shape, &w_shape, &p, layout)
            })? {
                ensure_len("conv backward_filter", dw.len(), count(&w_shape))?;
            }
        }
        3 => {
            call(t, "conv backward_bias", || {
                conv::backward_bias(&dy, &dy_shape, layout)
            })?;
        }
        4 => {
            let k = w_shape.first().copied().unwrap_or(0);
            let bias = values(
                if c.lens[3].is_multiple_of(2) && k <= MAX_BUFFER {
                    k
                } else {
                    1
                },
                c.seed,
            );
            let z = (c.lens[3] & 4 != 0).then_some(&dy[..]);
            let fused = BiasActivation {
                alpha1: 1.0,
                z,
                alpha2: 0.5,
                bias: &bias,
                activation: activation(c.lens[3] >> 3),
            };
            call(t, "conv bias_activation_forward", || {
                conv::bias_activation_forward(&x, &x_shape, &w, &w_shape, &p, layout, &fused)
            })?;
        }
        5 => {
            let to = if c.mode & 16 == 0 {
                ConvLayout::ChannelsFirst
            } else {
                ConvLayout::ChannelsLast
            };
            if let Some(out) = call(t, "convert_layout", || {
                conv::convert_layout(&x, &x_shape, layout, to)
            })? {
                ensure_len("convert_layout", out.len(), Some(x.len()))?;
            }
        }
        _ => {
            call(t, "Layout::strides", || layout.strides(&c.x))?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// gemm

#[derive(Debug, Clone)]
struct GemmCase {
    which: u8,
    /// m, n, k, batch.
    dims: [usize; 4],
    /// Per operand: order, transpose, ld choice, stride choice.
    ops: [u8; 3],
    /// An extra dimension to break one layout with.
    wrong: usize,
    epilogue: u8,
    lens: [u8; 5],
    seed: u64,
}

fn gemm_case() -> impl Strategy<Value = GemmCase> {
    (
        0u8..3,
        [gemm_dim(), gemm_dim(), gemm_dim(), gemm_dim()],
        any::<[u8; 3]>(),
        dim(),
        any::<u8>(),
        any::<[u8; 5]>(),
        any::<u64>(),
    )
        .prop_map(|(which, dims, ops, wrong, epilogue, lens, seed)| GemmCase {
            which,
            dims,
            ops,
            wrong,
            epilogue,
            lens,
            seed,
        })
}

/// A matrix dimension: as [`dim`], more often small (a GEMM has four).
fn gemm_dim() -> impl Strategy<Value = usize> {
    prop_oneof![
        30 => 0usize..4,
        2 => prop::sample::select(HUGE.to_vec()),
        1 => (1usize << 31)..=usize::MAX,
    ]
}

/// A layout of logical `rows x cols` from the choice bits `o`.
fn layout(rows: usize, cols: usize, batch: usize, o: u8, huge: usize) -> Layout {
    let order = if o & 1 == 0 {
        Order::RowMajor
    } else {
        Order::ColMajor
    };
    let transposed = o & 2 != 0;
    let (r, c) = if transposed {
        (cols, rows)
    } else {
        (rows, cols)
    };
    let mut l = Layout::new(order, r, c);
    l = match (o >> 2) % 8 {
        0..=4 => l,
        5 => l.with_ld(l.ld().saturating_add(1)),
        6 => l.with_ld(huge),
        _ => l.with_ld(0),
    };
    if transposed {
        l = l.t();
    }
    let span = l.span().unwrap_or(0);
    let stride = match (o >> 5) % 8 {
        0..=4 => span,
        5 => 0,
        6 => span.saturating_add(1),
        _ => huge,
    };
    l.batched(batch, stride)
}

/// A buffer for `l`: its required length (when small), one less, or a few.
fn buffer(l: &Layout, mode: u8, seed: u64) -> Vec<f64> {
    let need = l.required_len().filter(|&n| n <= MAX_BUFFER);
    let len = match (mode % 4, need) {
        (0 | 1, Some(n)) => n,
        (2, Some(n)) => n.saturating_sub(1),
        _ => (seed % 6) as usize,
    };
    values(len, seed)
}

fn gemm_one(t: &Tally, c: &GemmCase) -> Result<(), TestCaseError> {
    let [m, n, k, batch] = c.dims;
    let batch = if c.lens[4] & 1 == 0 {
        batch.clamp(1, 3)
    } else {
        batch
    };
    let mut shapes = [(m, k), (k, n), (m, n)];
    if c.lens[4] & 6 == 6 {
        let i = (c.lens[4] as usize >> 2) % 6;
        if i.is_multiple_of(2) {
            shapes[i / 2].0 = c.wrong;
        } else {
            shapes[i / 2].1 = c.wrong;
        }
    }
    let [la, lb, lc] =
        [0, 1, 2].map(|i| layout(shapes[i].0, shapes[i].1, batch, c.ops[i], c.wrong));
    let a = buffer(&la, c.lens[0], c.seed);
    let b = buffer(&lb, c.lens[1], c.seed ^ 1);
    let mut d = buffer(&lc, c.lens[2], c.seed ^ 2);
    match c.which {
        0 => {
            call(t, "gemm", || {
                gemm::gemm(1.0, &a, &la, &b, &lb, 0.5, &mut d, &lc)
            })?;
        }
        1 => {
            let epilogue = pick(&EPILOGUES, c.epilogue);
            let blen = gemm::bias_len(epilogue, &lc);
            let bias = values(
                if c.lens[3].is_multiple_of(2) && blen <= MAX_BUFFER {
                    blen
                } else {
                    (c.seed % 3) as usize
                },
                c.seed,
            );
            let pre = d.clone();
            let bias_arg = (c.lens[3] & 2 == 0).then_some(&bias[..]);
            let pre_arg = (c.lens[3] & 4 == 0).then_some(&pre[..]);
            call(t, "matmul", || {
                gemm::matmul(
                    1.0, &a, &la, &b, &lb, 0.0, &mut d, &lc, epilogue, bias_arg, pre_arg,
                )
            })?;
        }
        _ => {
            let incx = (c.lens[3] as usize % 3).max(c.lens[4] as usize % 2);
            let incy = c.lens[3] as usize / 3 % 3;
            let la = if c.lens[4] & 4 == 0 {
                layout(shapes[0].0, shapes[0].1, 1, c.ops[0], c.wrong)
            } else {
                la
            };
            let a = buffer(&la, c.lens[0], c.seed);
            let x = values((c.seed % 12) as usize, c.seed);
            call(t, "gemv", || {
                gemm::gemv(1.0, &a, &la, &x, incx, 0.5, &mut d, incy)
            })?;
        }
    }
    let _ = gemm::max_relative_error(&a, &b);
    Ok(())
}

// ---------------------------------------------------------------------------
// norm and attention

#[derive(Debug, Clone)]
struct NormCase {
    which: u8,
    dims: Vec<usize>,
    lens: [u8; 4],
    eps: u8,
    seed: u64,
}

fn norm_case() -> impl Strategy<Value = NormCase> {
    (
        0u8..9,
        shape(4),
        any::<[u8; 4]>(),
        any::<u8>(),
        any::<u64>(),
    )
        .prop_map(|(which, dims, lens, eps, seed)| NormCase {
            which,
            dims,
            lens,
            eps,
            seed,
        })
}

fn norm_one(t: &Tally, c: &NormCase) -> Result<(), TestCaseError> {
    if c.which == 7 || c.which == 8 {
        return attention_one(t, c);
    }
    // Half the cases repaired to valid dims (rank >= 2, each 1 to 3).
    let mut dims = c.dims.clone();
    if c.lens[0] & 0x80 != 0 {
        dims = dims.iter().map(|&d| d.clamp(1, 3)).collect();
        dims.resize(dims.len().max(2), 2);
    }
    let c = &NormCase { dims, ..c.clone() };
    let x = data(&c.dims, c.lens[0], c.seed);
    let row = c.dims.get(1..).and_then(count).filter(|&n| n <= MAX_BUFFER);
    let ch = c.dims.get(1).copied().filter(|&n| n <= MAX_BUFFER);
    let rows = c.dims.first().copied().filter(|&n| n <= MAX_BUFFER);
    let len = |want: Option<usize>, mode: u8| match (mode % 3, want) {
        (0, Some(n)) => n,
        (1, Some(n)) => n + 1,
        _ => (c.seed % 4) as usize,
    };
    let eps =
        VALUES[c.eps as usize % VALUES.len()].abs() * if c.eps & 0x80 != 0 { -1.0 } else { 1.0 };
    let dy = data(&c.dims, c.lens[3], c.seed ^ 9);
    match c.which {
        0..=2 => {
            let p = values(len(row, c.lens[1]), c.seed);
            let st = values(len(rows, c.lens[2]), c.seed);
            match c.which {
                0 => {
                    if let Some(r) = call(t, "layer_norm_training", || {
                        norm::layer_norm_training(&x, &c.dims, &p, &p, eps)
                    })? {
                        ensure_len("layer_norm_training", r.y.len(), Some(x.len()))?;
                    }
                    call(t, "layer_norm_inference", || {
                        norm::layer_norm_inference(&x, &c.dims, &p, &p, eps)
                    })?;
                }
                1 => {
                    call(t, "layer_norm_backward", || {
                        norm::layer_norm_backward(&x, &c.dims, &dy, &p, &st, &st)
                    })?;
                }
                _ => {
                    let bias = (c.lens[2] & 8 == 0).then_some(&p[..]);
                    call(t, "rms_norm_training", || {
                        norm::rms_norm_training(&x, &c.dims, &p, bias, eps)
                    })?;
                    call(t, "rms_norm_inference", || {
                        norm::rms_norm_inference(&x, &c.dims, &p, bias, eps)
                    })?;
                    call(t, "rms_norm_backward", || {
                        norm::rms_norm_backward(&x, &c.dims, &dy, &p, &st, bias.is_some())
                    })?;
                }
            }
        }
        3..=6 => {
            let p = values(len(ch, c.lens[1]), c.seed);
            let q = values(len(ch, c.lens[2]), c.seed ^ 4);
            match c.which {
                3 => {
                    let running = (c.lens[2] & 8 == 0).then_some(norm::RunningUpdate {
                        mean: &q,
                        variance: &q,
                        momentum: VALUES[c.lens[3] as usize % VALUES.len()],
                    });
                    call(t, "batch_norm_training", || {
                        norm::batch_norm_training(&x, &c.dims, &p, &p, eps, running)
                    })?;
                }
                4 => {
                    call(t, "batch_norm_inference", || {
                        norm::batch_norm_inference(&x, &c.dims, &p, &p, &q, &q)
                    })?;
                }
                5 => {
                    call(t, "batch_norm_backward", || {
                        norm::batch_norm_backward(&x, &c.dims, &dy, &p, &q, &q)
                    })?;
                }
                _ => {
                    call(t, "inv_std", || norm::inv_std(&x, eps))?;
                }
            }
        }
        _ => {}
    }
    Ok(())
}

fn dims4(v: &[usize], start: usize, repair: bool) -> [usize; 4] {
    let mut d = [1usize; 4];
    for (i, slot) in d.iter_mut().enumerate() {
        let x = v.get(start + i).copied().unwrap_or(1);
        *slot = if repair { x.clamp(1, 3) } else { x };
    }
    d
}

fn view<'a>(data: &'a [f64], dims: [usize; 4], mode: u8, huge: usize) -> View<'a> {
    match mode % 4 {
        0 => View::bhsd(data, dims),
        1 => View::bshd(data, dims),
        2 => View::new(data, dims, [0, 0, 0, 0]),
        _ => View::new(data, dims, [huge, 1, huge, 1]),
    }
}

fn view_data(dims: [usize; 4], mode: u8, seed: u64) -> Vec<f64> {
    data(&dims, mode, seed)
}

fn attention_one(t: &Tally, c: &NormCase) -> Result<(), TestCaseError> {
    let repair = c.lens[0] & 1 == 1;
    let qd = dims4(&c.dims, 0, repair);
    let mut kd = dims4(&c.dims, 1, repair);
    let mut vd = dims4(&c.dims, 2, repair);
    if repair {
        kd[0] = qd[0];
        kd[3] = qd[3];
        kd[1] = 1;
        vd[0] = qd[0];
        vd[1] = kd[1];
        vd[2] = kd[2];
    }
    let huge = c.dims.iter().copied().max().unwrap_or(usize::MAX);
    let (q, k, v) = (
        view_data(qd, c.lens[1], c.seed),
        view_data(kd, c.lens[1] >> 2, c.seed ^ 1),
        view_data(vd, c.lens[1] >> 4, c.seed ^ 2),
    );
    let mode = c.lens[2];
    let (qv, kv, vv) = (
        view(&q, qd, mode, huge),
        view(&k, kd, mode >> 2, huge),
        view(&v, vd, mode >> 4, huge),
    );
    let lens_q: Vec<usize> = (0..qd[0].min(4))
        .map(|i| (c.seed as usize >> i) % 4)
        .collect();
    let lens_kv: Vec<usize> = (0..kd[0].min(4))
        .map(|i| (c.seed as usize >> (i + 8)) % 4)
        .collect();
    let mask_len = count(&[qd[0], qd[1], qd[2], kd[2]]).filter(|&n| n <= MAX_BUFFER);
    let mask = values(mask_len.unwrap_or(1), c.seed);
    // Issue 24 (h4): a bias broadcast over the batch (dims from the case,
    // sometimes wrong: refused, typed) and ALiBi slopes (sometimes the
    // wrong count, sometimes non-finite).
    let bias_dims = [
        1,
        qd[1],
        qd[2],
        kd[2].saturating_add(usize::from(c.seed & 512 != 0)),
    ];
    let bias_buf = values(
        count(&bias_dims).filter(|&n| n <= MAX_BUFFER).unwrap_or(1),
        c.seed ^ 3,
    );
    let slopes = values(qd[1].min(8) + usize::from(c.seed & 1024 != 0), c.seed ^ 4);
    let bias_view = attention::View::bhsd(&bias_buf, bias_dims);
    let config = SdpaConfig {
        bias: (c.lens[3] & 128 != 0).then_some(bias_view),
        alibi_slopes: (c.seed & 256 != 0).then_some(&slopes[..]),
        scale: VALUES[c.eps as usize % VALUES.len()],
        causal: match c.lens[3] % 3 {
            0 => CausalMask::None,
            1 => CausalMask::TopLeft,
            _ => CausalMask::BottomRight,
        },
        seq_len_q: (c.lens[3] & 4 != 0).then_some(&lens_q[..]),
        seq_len_kv: (c.lens[3] & 8 != 0).then_some(&lens_kv[..]),
        dropout: (c.lens[3] & 16 != 0).then_some(&mask[..]),
        // Sizes 0 (refused, typed) to 4, either alignment.
        window: (c.lens[3] & 32 != 0).then_some(attention::Window {
            size: (c.seed as usize >> 16) % 5,
            bottom_right: c.lens[3] & 64 != 0,
        }),
        // Issue 24 (h5): a softcap, adversarial values included (refused, typed).
        softcap: ((c.seed >> 40) & 1 == 1).then(|| VALUES[(c.eps as usize / 7) % VALUES.len()]),
    };
    let f = call(t, "attention forward", || {
        attention::forward(&qv, &kv, &vv, &config)
    })?;
    if c.which == 8 {
        let od = [qd[0], qd[1], qd[2], vd[3]];
        let (o, stats) = match &f {
            Some(f) if c.lens[0] & 2 == 0 => (f.o.clone(), f.stats.clone()),
            _ => (view_data(od, c.lens[0] >> 2, c.seed), values(3, c.seed)),
        };
        let ov = view(&o, od, 0, huge);
        call(t, "attention backward", || {
            attention::backward(&qv, &kv, &vv, &ov, &ov, &stats, &config)
        })?;
        call(t, "attention dbias", || {
            attention::dbias(&qv, &kv, &vv, &ov, &ov, &stats, &config)
        })?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// The algorithm cache loader

fn i64_value() -> impl Strategy<Value = i64> {
    prop_oneof![
        4 => -4i64..64,
        1 => Just(i64::MIN),
        1 => Just(i64::MAX),
        1 => any::<i64>(),
    ]
}

fn algo_key() -> impl Strategy<Value = AlgoKey> {
    let list = || prop::collection::vec(i64_value(), 0..6);
    (
        (
            any::<i32>(),
            0u8..3,
            any::<[u32; 4]>(),
            [list(), list(), list()],
            any::<u32>(),
            [list(), list(), list()],
        ),
        (
            list(),
            i64_value(),
            any::<u32>(),
            0u8..4,
            any::<bool>(),
            prop::option::of(any::<usize>()),
            0u8..3,
        ),
    )
        .prop_map(
            |(
                (
                    device,
                    dir,
                    [x_type, w_type, y_type, compute_type],
                    [x_dims, x_strides, w_dims],
                    w_format,
                    [y_dims, y_strides, pad],
                ),
                (stride, groups, mode, math, deterministic, workspace_limit, search),
            )| {
                AlgoKey {
                    device,
                    direction: [
                        ConvDirection::Forward,
                        ConvDirection::BackwardData,
                        ConvDirection::BackwardFilter,
                    ][dir as usize],
                    x_type,
                    w_type,
                    y_type,
                    compute_type,
                    x_dims,
                    x_strides,
                    w_dims,
                    w_format,
                    y_dims,
                    y_strides,
                    pad,
                    stride: stride.clone(),
                    dilation: stride,
                    groups,
                    mode,
                    math: [
                        MathPolicy::Default,
                        MathPolicy::AllowTensorCores,
                        MathPolicy::AllowTf32,
                        MathPolicy::ForbidTensorCores,
                    ][math as usize],
                    deterministic,
                    workspace_limit,
                    search: CacheSearch::from_code(search).unwrap_or_default(),
                }
            },
        )
}

fn algo_choice() -> impl Strategy<Value = AlgoChoice> {
    (any::<u32>(), any::<u32>(), any::<usize>()).prop_map(|(algo, math_type, workspace_bytes)| {
        AlgoChoice {
            algo,
            math_type,
            workspace_bytes,
        }
    })
}

/// One edit of a file's bytes.
#[derive(Debug, Clone)]
enum Mutation {
    Flip {
        at: usize,
        bit: u8,
    },
    Set {
        at: usize,
        byte: u8,
    },
    Delete {
        at: usize,
        len: usize,
    },
    Insert {
        at: usize,
        bytes: Vec<u8>,
    },
    Duplicate {
        at: usize,
        len: usize,
    },
    Truncate {
        at: usize,
    },
    /// Replace a digit with another (keeps the file well formed more often).
    Digit {
        nth: usize,
        to: u8,
    },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let at = any::<usize>();
    prop_oneof![
        (at, 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        (
            at,
            prop::sample::select(b" =,-\n0123456789abcdefghijklmnopqrstuvwxyz\xff\x00".to_vec())
        )
            .prop_map(|(at, byte)| Mutation::Set { at, byte }),
        (at, 0usize..40).prop_map(|(at, len)| Mutation::Delete { at, len }),
        (at, prop::collection::vec(any::<u8>(), 0..8))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        (at, 0usize..400).prop_map(|(at, len)| Mutation::Duplicate { at, len }),
        at.prop_map(|at| Mutation::Truncate { at }),
        (at, 0u8..10).prop_map(|(nth, to)| Mutation::Digit { nth, to }),
    ]
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    let n = bytes.len();
    let pos = |at: usize| if n == 0 { 0 } else { at % (n + 1) };
    match m {
        Mutation::Flip { at, bit } => {
            if n > 0 {
                bytes[at % n] ^= 1 << bit;
            }
        }
        Mutation::Set { at, byte } => {
            if n > 0 {
                bytes[at % n] = *byte;
            }
        }
        Mutation::Delete { at, len } => {
            let s = pos(*at);
            let e = (s + len).min(n);
            bytes.drain(s..e);
        }
        Mutation::Insert { at, bytes: b } => {
            let s = pos(*at);
            bytes.splice(s..s, b.iter().copied());
        }
        Mutation::Duplicate { at, len } => {
            let s = pos(*at);
            let e = (s + len).min(n);
            let copy: Vec<u8> = bytes[s..e].to_vec();
            bytes.splice(e..e, copy);
        }
        Mutation::Truncate { at } => bytes.truncate(pos(*at)),
        Mutation::Digit { nth, to } => {
            let digits: Vec<usize> = (0..n).filter(|&i| bytes[i].is_ascii_digit()).collect();
            if !digits.is_empty() {
                bytes[digits[nth % digits.len()]] = b'0' + to;
            }
        }
    }
}

fn temp_dir(name: &str) -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("cudnn-rs-fuzz-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

/// Load `bytes` from `path` into a cache with one entry of its own: no
/// panic, a typed error naming the file, and an unchanged cache on error.
/// A file that loads must save and load again to the same entries.
fn load_bytes(t: &Tally, path: &Path, bytes: &[u8]) -> Result<(), TestCaseError> {
    std::fs::write(path, bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let cache = AlgoCache::new(64);
    let own = AlgoKey {
        device: -7,
        direction: ConvDirection::Forward,
        x_type: 0,
        w_type: 0,
        y_type: 0,
        compute_type: 0,
        x_dims: vec![],
        x_strides: vec![],
        w_dims: vec![],
        w_format: 0,
        y_dims: vec![],
        y_strides: vec![],
        pad: vec![],
        stride: vec![],
        dilation: vec![],
        groups: 0,
        mode: 0,
        math: MathPolicy::Default,
        deterministic: false,
        workspace_limit: None,
        search: CacheSearch::Fixed,
    };
    cache.insert(
        own,
        AlgoChoice {
            algo: 0,
            math_type: 0,
            workspace_bytes: 0,
        },
    );
    let before = cache.entries();
    match call(t, "AlgoCache::load", || cache.load(path))? {
        None => {
            if cache.entries() != before {
                return Err(TestCaseError::fail("a failed load changed the cache"));
            }
        }
        Some(_) => {
            let again = path.with_extension("again");
            call(t, "AlgoCache::save", || cache.save(&again))?
                .ok_or_else(|| TestCaseError::fail("a loaded cache did not save"))?;
            let copy = AlgoCache::new(64);
            call(t, "AlgoCache::load (again)", || copy.load(&again))?
                .ok_or_else(|| TestCaseError::fail("a saved cache did not load"))?;
            if copy.entries() != cache.entries() {
                return Err(TestCaseError::fail("save and load changed the entries"));
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------

/// Run `cases` cases of `one`; at least one call in `ok_every` must return
/// `Ok` (0: no such rule, for inputs that are never valid).
fn family<S: Strategy>(
    t: &Tally,
    name: &str,
    (cases, ok_every): (u32, u64),
    strategy: S,
    one: impl Fn(&Tally, &S::Value) -> Result<(), TestCaseError>,
) -> TestResult
where
    S::Value: Debug,
{
    let mut runner = TestRunner::new(config(cases));
    let (before, calls, oks) = (t.cases.get(), t.calls.get(), t.oks.get());
    let start = Instant::now();
    runner
        .run(&strategy, |case| {
            t.cases.set(t.cases.get() + 1);
            if let Ok(mut c) = CURRENT.lock() {
                *c = format!("{name}: {case:?}");
            }
            PROGRESS.fetch_add(1, Ordering::SeqCst);
            one(t, &case)
        })
        .map_err(|e| format!("{name}: {e}"))?;
    let (calls, oks) = (t.calls.get() - calls, t.oks.get() - oks);
    eprintln!(
        "fuzz: {name}: {} cases, {calls} calls ({oks} returned Ok) in {:.2} s",
        t.cases.get() - before,
        start.elapsed().as_secs_f64()
    );
    // The cases must reach past the argument checks often enough.
    ensure!(
        ok_every == 0 || oks * ok_every >= calls,
        "{name}: only {oks} of {calls} calls returned Ok"
    );
    Ok(())
}

fn fuzz_all() -> TestResult {
    let t = Tally::default();
    let start = Instant::now();
    watchdog();
    // Panics are caught and reported as failures; keep the default hook
    // from printing each one (shrinking reruns them) but say how many.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = (|| -> TestResult {
        family(&t, "ops", (12_000, 10), ops_case(), ops_one)?;
        family(&t, "conv", (4_000, 10), conv_case(), conv_one)?;
        family(&t, "gemm", (4_000, 20), gemm_case(), gemm_one)?;
        family(&t, "norm and attention", (4_000, 20), norm_case(), norm_one)?;

        let dir = temp_dir("cache")?;
        let path = dir.join("algos.txt");
        // Random keys always survive a save and a load.
        let keys = prop::collection::vec((algo_key(), algo_choice()), 0..6);
        family(&t, "cache round trip", (300, 1), keys, |t, entries| {
            let cache = AlgoCache::new(16);
            for (k, c) in entries {
                cache.insert(k.clone(), *c);
            }
            call(t, "AlgoCache::save", || cache.save(&path))?
                .ok_or_else(|| TestCaseError::fail("save refused"))?;
            let copy = AlgoCache::new(16);
            call(t, "AlgoCache::load", || copy.load(&path))?
                .ok_or_else(|| TestCaseError::fail("a saved file did not load"))?;
            if copy.entries() != cache.entries() {
                return Err(TestCaseError::fail("the round trip changed the entries"));
            }
            Ok(())
        })?;
        // Random bytes.
        let bytes = prop::collection::vec(any::<u8>(), 0..300);
        family(&t, "cache random bytes", (800, 0), bytes, |t, b| {
            load_bytes(t, &path, b)
        })?;
        // Random mutations of a valid file.
        let seed_cache = AlgoCache::new(16);
        let mut runner = TestRunner::new(config(1));
        let sample = prop::collection::vec((algo_key(), algo_choice()), 4..5);
        let entries = sample
            .new_tree(&mut runner)
            .map_err(|e| e.to_string())?
            .current();
        for (k, c) in entries {
            seed_cache.insert(k, c);
        }
        let good_path = dir.join("good.txt");
        seed_cache.save(&good_path).map_err(|e| e.to_string())?;
        let good = std::fs::read(&good_path).map_err(|e| e.to_string())?;
        let edits = prop::collection::vec(mutation(), 1..5);
        family(&t, "cache mutations", (1_500, 50), edits, |t, edits| {
            let mut b = good.clone();
            for m in edits {
                apply(&mut b, m);
            }
            load_bytes(t, &path, &b)
        })?;
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    })();
    std::panic::set_hook(hook);
    DONE.store(true, Ordering::SeqCst);
    eprintln!(
        "fuzz: {} cases, {} panics, {:.1} s",
        t.cases.get(),
        t.panics.get(),
        start.elapsed().as_secs_f64()
    );
    result?;
    ensure!(t.panics.get() == 0, "{} panics", t.panics.get());
    Ok(())
}

pub fn main() {
    run(vec![unit("fuzz_reference::no_panic_no_hang", fuzz_all)])
}
