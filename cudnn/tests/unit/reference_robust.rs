//! Unit tier (nothing needed): the CPU references refuse absurd sizes with
//! a typed error naming the argument, at once, instead of aborting on an
//! allocation, panicking on an overflow or looping without end; and empty
//! problems within the bounds are answered at once. One case per reported
//! reproducer; each must return in under a second in a debug build.
//!
//! Run it in release too (`cargo test --release -p cudnn-rs --test
//! unit/reference_robust`): the products that used to wrap silently there
//! are errors in every profile.

use crate::support;

use std::fmt::Debug;
use std::time::{Duration, Instant};

use cudnn::Error;
use cudnn::blas::{Epilogue, Layout};
use cudnn::dnn::{BatchNormMode, PoolingMode, ReduceOp, SoftmaxAlgorithm, SoftmaxMode};
use cudnn::dnn::{RnnBiasMode, RnnCellMode, RnnConfig};
use cudnn::reference::attention::{self, SdpaConfig, View};
use cudnn::reference::conv::{self, ConvParams, Layout as ConvLayout};
use cudnn::reference::rnn::{self, Batch};
use cudnn::reference::{MAX_ELEMENTS, MAX_WORK, gemm, norm, ops};
use support::*;

const LIMIT: Duration = Duration::from_secs(1);

/// Run `f`, which must return within [`LIMIT`] an
/// [`Error::InvalidArgument`] whose argument contains `arg`, whose rule
/// contains `rule`, and whose message names the argument.
fn refused<T>(arg: &str, rule: &str, f: impl FnOnce() -> Result<T, Error>) -> TestResult {
    let start = Instant::now();
    let r = f();
    let took = start.elapsed();
    ensure!(took < LIMIT, "took {took:?}");
    let e = match r {
        Ok(_) => return Err("accepted".into()),
        Err(e) => e,
    };
    let text = e.to_string();
    match &e {
        Error::InvalidArgument {
            arg: a, rule: r, ..
        } => {
            ensure!(a.contains(arg), "argument `{a}` is not `{arg}`: {text}");
            ensure!(r.contains(rule), "rule `{r}` lacks `{rule}`: {text}");
            ensure!(
                text.contains(&format!("`{a}`")),
                "message lacks the argument: {text}"
            );
        }
        other => return Err(format!("wrong kind: {other:?}").into()),
    }
    Ok(())
}

/// Run `f`, which must return `Ok` within [`LIMIT`]; returns the value.
fn quick<T: Debug>(f: impl FnOnce() -> Result<T, Error>) -> Result<T, libtest_mimic::Failed> {
    let start = Instant::now();
    let r = f();
    let took = start.elapsed();
    ensure!(took < LIMIT, "took {took:?}");
    r.map_err(|e| format!("refused: {e}").into())
}

const ELEMENTS: &str = "MAX_ELEMENTS";
const WORK: &str = "MAX_WORK";

fn broadcast_huge_dst() -> TestResult {
    refused("dst_shape", ELEMENTS, || {
        ops::broadcast(&[1.0], &[1, 1, 1], &[1 << 20, 1 << 20, 1 << 10])
    })
}

fn gather_zero_strides_huge_shape() -> TestResult {
    refused("shape", ELEMENTS, || {
        ops::gather(&[1.0], &[1 << 20, 1 << 20, 1 << 10], &[0, 0, 0])
    })
}

fn reduce_huge_output_of_empty_input() -> TestResult {
    refused("a_shape[1]", ELEMENTS, || {
        ops::reduce(ReduceOp::Add, &[], &[0, 1 << 40], &[1, 1 << 40])
    })?;
    // Within the bounds the output is allocated and is the empty sum.
    let (c, idx) = quick(|| ops::reduce(ReduceOp::Add, &[], &[0, 1 << 10], &[1, 1 << 10]))?;
    ensure!(
        c == vec![0.0; 1 << 10] && idx == vec![0; 1 << 10],
        "empty sums"
    );
    Ok(())
}

fn reduce_capacity_overflow() -> TestResult {
    refused("a_shape[1]", ELEMENTS, || {
        ops::reduce(
            ReduceOp::Max,
            &[],
            &[0, 1 << 40, 1 << 20],
            &[1, 1 << 40, 1 << 20],
        )
    })?;
    // Every dimension in bounds, the output not.
    refused("c_shape", ELEMENTS, || {
        ops::reduce(
            ReduceOp::Max,
            &[],
            &[0, 1 << 30, 1 << 20],
            &[1, 1 << 30, 1 << 20],
        )
    })
}

fn reduce_within_bounds() -> TestResult {
    // A reduction's work (outputs x reduced elements each) is the input's
    // element count, so the element bound keeps it small; a real reduction
    // still computes.
    let a = vec![1.0; 1 << 12];
    let (c, _) = quick(|| ops::reduce(ReduceOp::Add, &a, &[1 << 6, 1 << 6], &[1, 1 << 6]))?;
    ensure!(c == vec![64.0; 1 << 6], "sums {:?}", &c[..4]);
    Ok(())
}

fn softmax_backward_empty_huge_batch() -> TestResult {
    refused("shape[0]", ELEMENTS, || {
        ops::softmax_backward(
            SoftmaxAlgorithm::Accurate,
            SoftmaxMode::Instance,
            &[],
            &[],
            &[1 << 40, 0],
        )
    })?;
    let dx = quick(|| {
        ops::softmax_backward(
            SoftmaxAlgorithm::Accurate,
            SoftmaxMode::Instance,
            &[],
            &[],
            &[MAX_ELEMENTS, 0],
        )
    })?;
    ensure!(dx.is_empty(), "dx {}", dx.len());
    Ok(())
}

fn softmax_forward_empty_huge_spatial() -> TestResult {
    refused("shape[2]", ELEMENTS, || {
        ops::softmax_forward(
            SoftmaxAlgorithm::Accurate,
            SoftmaxMode::Channel,
            &[],
            &[1, 0, 1 << 40],
        )
    })?;
    let y = quick(|| {
        ops::softmax_forward(
            SoftmaxAlgorithm::Accurate,
            SoftmaxMode::Channel,
            &[],
            &[MAX_ELEMENTS, 0, MAX_ELEMENTS],
        )
    });
    // The spatial part alone is within bounds here; the groups are never
    // materialized, so this is immediate either way.
    ensure!(y.as_ref().is_ok_and(|y| y.is_empty()), "{y:?}");
    Ok(())
}

fn softmax_forward_capacity_overflow() -> TestResult {
    refused("shape[0]", ELEMENTS, || {
        ops::softmax_forward(
            SoftmaxAlgorithm::Accurate,
            SoftmaxMode::Instance,
            &[],
            &[usize::MAX / 2, 0],
        )
    })
}

fn batch_norm_huge_parameters() -> TestResult {
    refused("shape[2]", ELEMENTS, || {
        ops::batch_norm_stats(BatchNormMode::PerActivation, &[], &[0, 4, 1 << 40], 1e-5)
    })?;
    // Dimensions in bounds, parameters (c x spatial) not.
    refused("shape", ELEMENTS, || {
        ops::batch_norm_stats(
            BatchNormMode::PerActivation,
            &[],
            &[0, 1 << 20, 1 << 20],
            1e-5,
        )
    })
}

fn batch_norm_products_that_used_to_wrap() -> TestResult {
    // n * s = 2^64 and c * s = 2^64 wrapped to 0 in release.
    refused("shape[0]", ELEMENTS, || {
        ops::batch_norm_stats(BatchNormMode::Spatial, &[], &[1 << 33, 0, 1 << 31], 1e-5)
    })?;
    refused("shape[1]", ELEMENTS, || {
        ops::batch_norm_stats(
            BatchNormMode::PerActivation,
            &[],
            &[0, 1 << 33, 1 << 31],
            1e-5,
        )
    })
}

fn batch_norm_empty_huge_batch() -> TestResult {
    refused("shape[0]", ELEMENTS, || {
        ops::batch_norm_stats(BatchNormMode::Spatial, &[], &[1 << 62, 0], 1e-5)
    })?;
    let s = quick(|| ops::batch_norm_stats(BatchNormMode::Spatial, &[], &[MAX_ELEMENTS, 0], 1e-5))?;
    ensure!(s.mean.is_empty() && s.inv_std.is_empty(), "{s:?}");
    Ok(())
}

fn pool_huge_window() -> TestResult {
    refused("window", WORK, || {
        ops::pool_forward(
            PoolingMode::Max,
            &[0.0],
            &[1, 1, 1, 1],
            &[1 << 30, 1 << 30],
            &[1 << 29, 1 << 29],
            &[1, 1],
        )
    })?;
    refused("window", WORK, || {
        ops::pool_backward(
            PoolingMode::AverageExcludePadding,
            &[0.0],
            &[1, 1, 1, 1],
            &[0.0; 4],
            &[1 << 30, 1 << 30],
            &[1 << 29, 1 << 29],
            &[1, 1],
        )
    })?;
    // A large window within the work bound still works (and only the
    // positions inside the input count for the exclude-padding average).
    let (y, ys) = quick(|| {
        ops::pool_forward(
            PoolingMode::AverageExcludePadding,
            &[3.0],
            &[1, 1, 1, 1],
            &[1 << 8, 1 << 8],
            &[1 << 7, 1 << 7],
            &[1, 1],
        )
    })?;
    ensure!(ys == [1, 1, 2, 2] && y == [3.0; 4], "{ys:?} {y:?}");
    Ok(())
}

fn matmul_bgrad_huge_batch() -> TestResult {
    let (la, lb, ld) = (
        Layout::row_major(0, 0).batched(1 << 38, 0),
        Layout::row_major(0, 1 << 20).batched(1 << 38, 0),
        Layout::row_major(0, 1 << 20).batched(1 << 38, 0),
    );
    refused("c.batch_count", ELEMENTS, || {
        gemm::matmul(
            1.0,
            &[],
            &la,
            &[],
            &lb,
            0.0,
            &mut [],
            &ld,
            Epilogue::BgradB,
            None,
            None,
        )
    })?;
    // Batch and columns each in bounds: the bias gradient's work is not.
    let (la, lb, ld) = (
        Layout::row_major(0, 0).batched(1 << 20, 0),
        Layout::row_major(0, 1 << 20).batched(1 << 20, 0),
        Layout::row_major(0, 1 << 20).batched(1 << 20, 0),
    );
    refused("b", WORK, || {
        gemm::matmul(
            1.0,
            &[],
            &la,
            &[],
            &lb,
            0.0,
            &mut [],
            &ld,
            Epilogue::BgradB,
            None,
            None,
        )
    })
}

fn matmul_empty_huge_batch() -> TestResult {
    let l = Layout::row_major(0, 0).batched(1 << 40, 0);
    refused("c.batch_count", ELEMENTS, || {
        gemm::matmul(
            1.0,
            &[],
            &l,
            &[],
            &l,
            0.0,
            &mut [],
            &l,
            Epilogue::None,
            None,
            None,
        )
    })?;
    let l = Layout::row_major(0, 0).batched(MAX_ELEMENTS, 0);
    let out = quick(|| {
        gemm::matmul(
            1.0,
            &[],
            &l,
            &[],
            &l,
            0.0,
            &mut [],
            &l,
            Epilogue::None,
            None,
            None,
        )
    })?;
    ensure!(out == gemm::EpilogueOutput::default(), "{out:?}");
    Ok(())
}

fn gemm_empty_huge_rows() -> TestResult {
    refused("c.rows", ELEMENTS, || {
        gemm::gemm(
            1.0,
            &[],
            &Layout::row_major(1 << 50, 0),
            &[],
            &Layout::row_major(0, 0),
            0.0,
            &mut [],
            &Layout::row_major(1 << 50, 0),
        )
    })?;
    quick(|| {
        gemm::gemm(
            1.0,
            &[],
            &Layout::row_major(MAX_ELEMENTS, 0),
            &[],
            &Layout::row_major(0, 0),
            0.0,
            &mut [],
            &Layout::row_major(MAX_ELEMENTS, 0),
        )
    })
}

fn gemm_work_bound() -> TestResult {
    // 2^11 x 2^11 output with k = 2^11: 2^33 steps, over the bound, though
    // every buffer (2^22 elements) is real.
    let n = 1 << 11;
    let a = vec![0.0; n * n];
    let mut c = vec![0.0; n * n];
    let l = Layout::row_major(n, n);
    refused("c", WORK, || {
        gemm::gemm(1.0, &a, &l, &a, &l, 0.0, &mut c, &l)
    })
}

fn conv_huge_pad() -> TestResult {
    let p = ConvParams::new(2).with_pad(&[1 << 20, 1 << 20]);
    refused("pad", ELEMENTS, || {
        conv::forward(
            &[1.0],
            &[1, 1, 1, 1],
            &[1.0],
            &[1, 1, 1, 1],
            &p,
            ConvLayout::ChannelsFirst,
        )
    })?;
    // The shape alone is still computed: it is a rule, not an allocation.
    let s = quick(|| p.output_shape(&[1, 1, 1, 1], &[1, 1, 1, 1]))?;
    ensure!(s == [1, 1, (1 << 21) + 1, (1 << 21) + 1], "{s:?}");
    Ok(())
}

fn conv_work_bound() -> TestResult {
    // 2^19 + 1 outputs x 2^19 taps: about 2^38 steps.
    let (x, w) = (vec![0.0; 1 << 20], vec![0.0; 1 << 19]);
    let p = ConvParams::new(1);
    refused("w_shape", WORK, || {
        conv::forward(
            &x,
            &[1, 1, 1 << 20],
            &w,
            &[1, 1, 1 << 19],
            &p,
            ConvLayout::ChannelsFirst,
        )
    })?;
    let dy = vec![0.0; (1 << 19) + 1];
    refused("w_shape", WORK, || {
        conv::backward_data(
            &dy,
            &[1, 1, (1 << 19) + 1],
            &w,
            &[1, 1, 1 << 19],
            &[1, 1, 1 << 20],
            &p,
            ConvLayout::ChannelsFirst,
        )
    })?;
    refused("w_shape", WORK, || {
        conv::backward_filter(
            &x,
            &[1, 1, 1 << 20],
            &dy,
            &[1, 1, (1 << 19) + 1],
            &[1, 1, 1 << 19],
            &p,
            ConvLayout::ChannelsFirst,
        )
    })
}

fn norm_and_attention_bounds() -> TestResult {
    refused("dims", WORK, || {
        norm::layer_norm_training(&[1.0], &[1 << 40, 1], &[1.0], &[1.0], 1e-5)
    })?;
    // A zero-stride view addresses one element whatever its dims; a dim
    // past the bound is still refused (it would be looped over).
    let one = [1.0];
    let q = View::new(&one, [1, 1, 1, 1 << 31], [0; 4]);
    let kv = View::new(&one, [1, 1, 1, 1 << 31], [0; 4]);
    let v = View::new(&one, [1, 1, 1, 1], [0; 4]);
    refused("q.dims[3]", ELEMENTS, || {
        attention::forward(&q, &kv, &v, &SdpaConfig::new(1.0))
    })?;
    // Within the dimension bound, the work bound still holds.
    let q = View::new(&one, [1, 1, 1 << 20, 1 << 20], [0; 4]);
    let kv = View::new(&one, [1, 1, 1 << 20, 1 << 20], [0; 4]);
    let v = View::new(&one, [1, 1, 1 << 20, 1], [0; 4]);
    refused("attention shape", WORK, || {
        attention::forward(&q, &kv, &v, &SdpaConfig::new(1.0))
    })
}

// Issue 31 item 8, the exact inputs of the independent fuzz.

/// `ragged_unpack(&[], &[0,0], &[0], [1,1,1<<27,8])` (an 8 GiB output) and
/// `ragged_pack(&[0.0], &[0,0], &[0], [1,1,1,1], 1<<30)` (8 GiB) aborted
/// the process: their buffers came from an infallible `vec!`. Within
/// `MAX_ELEMENTS` they are legal sizes, so the truth is the module's
/// promise: an allocation the system refuses is an error. Shown in a child
/// process whose address space is capped at 2 GiB (so the allocation must
/// fail there, and nothing large is touched on this machine); the child
/// exits 0 only when both calls returned the typed error. Before the fix
/// the child died of SIGABRT.
fn ragged_allocation_is_fallible() -> TestResult {
    #[cfg(unix)]
    {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let out = std::process::Command::new(exe)
            .env(CHILD, "ragged")
            .output()
            .map_err(|e| e.to_string())?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        ensure!(
            out.status.success() && text.contains("ragged child: ok"),
            "the capped child failed ({}): {text}",
            out.status
        );
        Ok(())
    }
    #[cfg(not(unix))]
    {
        Err("needs setrlimit (unix)".into())
    }
}

const CHILD: &str = "CUDNN_RS_ROBUST_CHILD";

/// The child of [`ragged_allocation_is_fallible`]: caps its address space
/// and makes the two calls. Returns the process exit code.
#[cfg(unix)]
fn ragged_child() -> i32 {
    let cap: libc::rlim_t = 2 << 30;
    let lim = libc::rlimit {
        rlim_cur: cap,
        rlim_max: cap,
    };
    // SAFETY: setrlimit reads the struct we pass; it only lowers this
    // process's own limit.
    if unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) } != 0 {
        println!("ragged child: setrlimit failed");
        return 2;
    }
    let a = attention::ragged_unpack(&[], &[0, 0], &[0], [1, 1, 1 << 27, 8]);
    let b = attention::ragged_pack(&[0.0], &[0, 0], &[0], [1, 1, 1, 1], 1 << 30);
    for (name, arg, r) in [
        ("ragged_unpack", "ragged dims", a),
        ("ragged_pack", "ragged_pack len", b),
    ] {
        match r {
            Err(Error::InvalidArgument { arg: got, rule, .. })
                if got == arg && rule.contains("cannot allocate") => {}
            Err(e) => {
                println!("ragged child: {name} gave the wrong error: {e}");
                return 1;
            }
            Ok(v) => {
                println!(
                    "ragged child: {name} allocated {} values under a 2 GiB cap",
                    v.len()
                );
                return 1;
            }
        }
    }
    println!("ragged child: ok");
    0
}

/// Run this test binary as a child with `CHILD=which`; the child must
/// exit 0 and print `"{which} child: ok"`.
fn run_child(which: &str) -> TestResult {
    #[cfg(unix)]
    {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let out = std::process::Command::new(exe)
            .env(CHILD, which)
            .output()
            .map_err(|e| e.to_string())?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        ensure!(
            out.status.success() && text.contains(&format!("{which} child: ok")),
            "the capped child failed ({}): {text}",
            out.status
        );
        Ok(())
    }
    #[cfg(not(unix))]
    {
        let _ = which;
        Err("needs setrlimit (unix)".into())
    }
}

/// Cap this process's address space at `cap` bytes.
#[cfg(unix)]
fn cap_address_space(cap: libc::rlim_t) -> bool {
    let lim = libc::rlimit {
        rlim_cur: cap,
        rlim_max: cap,
    };
    // SAFETY: setrlimit reads the struct we pass; it only lowers this
    // process's own limit.
    unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) == 0 }
}

/// The review's input: a ReLU RNN of one unit, no bias, params
/// `[1.0, 1.0]`, one sequence of `2^29` steps and `x` of `2^29` zeros.
/// Every buffer of it is within `MAX_ELEMENTS`, but the forward trace
/// (then a few small vectors per step, about 400 bytes a step: some
/// 200 GB) was built with infallible allocations: `forward` and
/// `backward` aborted the process. The truth is the module's promise (an
/// error, never an abort); the trace is now `2^29` steps x 7 values, over
/// `MAX_ELEMENTS`, refused up front naming `lengths`. In a child whose
/// address space is capped at `x` (4 GiB, zero pages never touched) plus
/// 2 GiB; before the fix the child died of SIGABRT.
fn rnn_long_sequence_is_an_error() -> TestResult {
    run_child("rnn")
}

/// The child of [`rnn_long_sequence_is_an_error`].
#[cfg(unix)]
fn rnn_child() -> i32 {
    let n = 1usize << 29;
    let x = vec![0.0f64; n];
    if !cap_address_space((6 << 30) as libc::rlim_t) {
        println!("rnn child: setrlimit failed");
        return 2;
    }
    let cfg = RnnConfig {
        bias: RnnBiasMode::None,
        ..RnnConfig::new(RnnCellMode::RnnRelu, 1, 1)
    };
    let params = [1.0, 1.0];
    let lengths = [n];
    let batch = Batch {
        lengths: &lengths,
        max_len: n,
    };
    let f = rnn::forward(&cfg, &params, &batch, &x, None, None).map(|o| o.y.len());
    let b =
        rnn::backward(&cfg, &params, &batch, &x, None, None, &x, None, None).map(|g| g.dx.len());
    for (name, r) in [("forward", f), ("backward", b)] {
        match r {
            Err(Error::InvalidArgument { arg, rule, .. })
                if arg == "lengths" && rule.contains("MAX_ELEMENTS") => {}
            Err(e) => {
                println!("rnn child: {name} gave the wrong error: {e}");
                return 1;
            }
            Ok(len) => {
                println!("rnn child: {name} returned {len} values");
                return 1;
            }
        }
    }
    println!("rnn child: ok");
    0
}

/// The same trace bound in process, without `x` (the sizes are refused
/// before `x` is read), and a sequence just inside it accepted.
fn rnn_trace_bound() -> TestResult {
    let cfg = RnnConfig {
        bias: RnnBiasMode::None,
        ..RnnConfig::new(RnnCellMode::RnnRelu, 1, 1)
    };
    let params = [1.0, 1.0];
    // 2^27 steps x 7 values + 2 x 2^27 inputs = 9 x 2^27 > 2^30.
    let lengths = [1usize << 27];
    let batch = Batch {
        lengths: &lengths,
        max_len: 1 << 27,
    };
    refused("lengths", ELEMENTS, || {
        rnn::forward(&cfg, &params, &batch, &[], None, None)
    })?;
    refused("lengths", ELEMENTS, || {
        rnn::backward(&cfg, &params, &batch, &[], None, None, &[], None, None)
    })?;
    // By hand: h_t = relu(x_t + h_{t-1}) with x = [1, 2, 3] gives 1, 3, 6.
    let lengths = [3usize];
    let batch = Batch {
        lengths: &lengths,
        max_len: 3,
    };
    let out = quick(|| rnn::forward(&cfg, &params, &batch, &[1.0, 2.0, 3.0], None, None))?;
    ensure!(out.y == vec![1.0, 3.0, 6.0], "{:?}", out.y);
    ensure!(out.hy == vec![6.0], "{:?}", out.hy);
    Ok(())
}

/// Beyond `MAX_ELEMENTS`, at once and without allocating.
fn ragged_beyond_the_bound() -> TestResult {
    refused("ragged dims", ELEMENTS, || {
        attention::ragged_unpack(&[], &[0, 0], &[0], [1, 1, 1 << 28, 8])
    })?;
    refused("ragged dims", ELEMENTS, || {
        attention::ragged_unpack(&[], &[0, 0], &[0], [1, usize::MAX, 1, 2])
    })?;
    refused("ragged_pack len", ELEMENTS, || {
        attention::ragged_pack(&[0.0], &[0, 0], &[0], [1, 1, 1, 1], (1 << 30) + 1)
    })?;
    refused("ragged_pack len", ELEMENTS, || {
        attention::ragged_pack(&[0.0], &[0, 0], &[0], [1, 1, 1, 1], usize::MAX)
    })?;
    // Small ones still work: one sequence of 2 tokens, h = 1, d = 2.
    let packed = [1.0, 2.0, 3.0, 4.0];
    let bhsd = quick(|| attention::ragged_unpack(&packed, &[0, 4], &[2], [1, 1, 3, 2]))?;
    ensure!(bhsd == [1.0, 2.0, 3.0, 4.0, 0.0, 0.0], "{bhsd:?}");
    let back = quick(|| attention::ragged_pack(&bhsd, &[0, 4], &[2], [1, 1, 3, 2], 5))?;
    ensure!(back == [1.0, 2.0, 3.0, 4.0, 0.0], "{back:?}");
    Ok(())
}

/// `tolerance` / `backward_tolerance` with `seq_kv` or `seq_q` =
/// `usize::MAX` overflowed `S + D` (a panic in debug builds); now a typed
/// error naming the length. The bound itself is hand-computed for a small
/// shape: 2·u_out + 2·u_fp8 + 2^-24·(S_kv + D).
fn fp8_attention_tolerance_overflow() -> TestResult {
    use cudnn::Fp8Format;
    use cudnn::reference::attention_fp8::{Fp8AttnShape, backward_tolerance, tolerance};
    use cudnn::reference::gemm_fp8::OutputType;
    let shape = |seq_q, seq_kv, head_dim| Fp8AttnShape {
        batch: 1,
        heads: 1,
        seq_q,
        seq_kv,
        head_dim,
    };
    let (e4, f32o) = (Fp8Format::E4M3, OutputType::F32);
    refused("shape.seq_kv", "overflow", || {
        tolerance(shape(1, usize::MAX, 64), e4, f32o)
    })?;
    refused("shape.seq_kv", "overflow", || {
        tolerance(shape(1, usize::MAX - 3, 4), e4, f32o)
    })?;
    refused("shape.seq_kv", "overflow", || {
        backward_tolerance(shape(1, usize::MAX, 64), e4, Fp8Format::E5M2)
    })?;
    refused("shape.seq_q", "overflow", || {
        backward_tolerance(shape(usize::MAX, 1, 64), e4, Fp8Format::E5M2)
    })?;
    // usize::MAX with D = 0 counts D as 1 and still overflows; with the
    // largest S that fits, the sum is fine.
    refused("shape.seq_kv", "overflow", || {
        tolerance(shape(1, usize::MAX, 0), e4, f32o)
    })?;
    quick(|| tolerance(shape(1, usize::MAX - 1, 0), e4, f32o))?;
    // Hand-computed: f32 out u = 2^-24, E4M3 u = 2^-4, S_kv + D = 128 + 64.
    let t = quick(|| tolerance(shape(1, 128, 64), e4, f32o))?;
    let want = 2.0 * 2f64.powi(-24) + 2.0 * 2f64.powi(-4) + 2f64.powi(-24) * 192.0;
    let close = (t - want).abs() <= 1e-15 * want;
    ensure!(close, "{t} vs {want}");
    Ok(())
}

/// `gather(&[1.0], &[2], &[usize::MAX])`: the span's last element is
/// usize::MAX, and the error message computed `last + 1` (a panic in debug
/// builds). Now a typed mismatch; `scatter` shares the check.
fn gather_scatter_stride_usize_max() -> TestResult {
    let mismatch = |r: Result<(), Error>| -> TestResult {
        match r {
            Err(Error::Mismatch { what, expected, .. }) => {
                ensure!(what.contains("span"), "{what}");
                ensure!(expected.contains(&usize::MAX.to_string()), "{expected}");
                Ok(())
            }
            other => Err(format!("not a span mismatch: {other:?}").into()),
        }
    };
    mismatch(ops::gather(&[1.0], &[2], &[usize::MAX]).map(|_| ()))?;
    let mut mem = [0.0];
    mismatch(ops::scatter(&[1.0, 2.0], &[2], &[usize::MAX], &mut mem))?;
    // A span that overflows outright is refused as before.
    match ops::gather(&[1.0], &[3], &[usize::MAX]) {
        Err(Error::InvalidArgument { arg, .. }) if arg == "strides" => {}
        other => return Err(format!("span overflow: {other:?}").into()),
    }
    Ok(())
}

fn bounds_are_what_the_docs_say() -> TestResult {
    ensure!(MAX_ELEMENTS == 1 << 30, "MAX_ELEMENTS {MAX_ELEMENTS}");
    ensure!(MAX_WORK == 1 << 32, "MAX_WORK {MAX_WORK}");
    ensure!(
        norm::MAX_WORK == MAX_WORK && attention::MAX_WORK == MAX_WORK,
        "the module bounds differ"
    );
    Ok(())
}

pub fn main() {
    #[cfg(unix)]
    if std::env::var(CHILD).is_ok_and(|v| v == "ragged") {
        std::process::exit(ragged_child());
    }
    #[cfg(unix)]
    if std::env::var(CHILD).is_ok_and(|v| v == "rnn") {
        std::process::exit(rnn_child());
    }
    run(vec![
        unit(
            "reference_robust::ragged_allocation_is_fallible",
            ragged_allocation_is_fallible,
        ),
        unit(
            "reference_robust::rnn_long_sequence_is_an_error",
            rnn_long_sequence_is_an_error,
        ),
        unit("reference_robust::rnn_trace_bound", rnn_trace_bound),
        unit(
            "reference_robust::ragged_beyond_the_bound",
            ragged_beyond_the_bound,
        ),
        unit(
            "reference_robust::fp8_attention_tolerance_overflow",
            fp8_attention_tolerance_overflow,
        ),
        unit(
            "reference_robust::gather_scatter_stride_usize_max",
            gather_scatter_stride_usize_max,
        ),
        unit("reference_robust::broadcast_huge_dst", broadcast_huge_dst),
        unit(
            "reference_robust::gather_zero_strides_huge_shape",
            gather_zero_strides_huge_shape,
        ),
        unit(
            "reference_robust::reduce_huge_output_of_empty_input",
            reduce_huge_output_of_empty_input,
        ),
        unit(
            "reference_robust::reduce_capacity_overflow",
            reduce_capacity_overflow,
        ),
        unit(
            "reference_robust::reduce_within_bounds",
            reduce_within_bounds,
        ),
        unit(
            "reference_robust::softmax_backward_empty_huge_batch",
            softmax_backward_empty_huge_batch,
        ),
        unit(
            "reference_robust::softmax_forward_empty_huge_spatial",
            softmax_forward_empty_huge_spatial,
        ),
        unit(
            "reference_robust::softmax_forward_capacity_overflow",
            softmax_forward_capacity_overflow,
        ),
        unit(
            "reference_robust::batch_norm_huge_parameters",
            batch_norm_huge_parameters,
        ),
        unit(
            "reference_robust::batch_norm_products_that_used_to_wrap",
            batch_norm_products_that_used_to_wrap,
        ),
        unit(
            "reference_robust::batch_norm_empty_huge_batch",
            batch_norm_empty_huge_batch,
        ),
        unit("reference_robust::pool_huge_window", pool_huge_window),
        unit(
            "reference_robust::matmul_bgrad_huge_batch",
            matmul_bgrad_huge_batch,
        ),
        unit(
            "reference_robust::matmul_empty_huge_batch",
            matmul_empty_huge_batch,
        ),
        unit(
            "reference_robust::gemm_empty_huge_rows",
            gemm_empty_huge_rows,
        ),
        unit("reference_robust::gemm_work_bound", gemm_work_bound),
        unit("reference_robust::conv_huge_pad", conv_huge_pad),
        unit("reference_robust::conv_work_bound", conv_work_bound),
        unit(
            "reference_robust::norm_and_attention_bounds",
            norm_and_attention_bounds,
        ),
        unit(
            "reference_robust::bounds_are_what_the_docs_say",
            bounds_are_what_the_docs_say,
        ),
    ])
}
