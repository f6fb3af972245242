//! Unit tier (nothing needed): the CPU references of `cudnn::reference::ops`
//! against hand-computed cases (the arithmetic is in the comments),
//! backward passes against finite differences of the forward references,
//! batch-norm statistics against a direct computation, and the error paths.

use crate::support;

use cudnn::Error;
use cudnn::dnn::{ActivationMode, BatchNormMode, OpTensorOp, PoolingMode, ReduceOp};
use cudnn::reference::ops::*;
use support::*;

// A small deterministic generator (xorshift64*), uniform in `[lo, hi)`.
use crate::support::gpu_data::Rng;

/// Element-wise `|got - want| <= tol * max(1, |want|)`; NaN never passes.
fn close(what: &str, got: &[f64], want: &[f64], tol: f64) -> TestResult {
    close_each(what, got, want, tol)
}

fn exact(what: &str, got: &[f64], want: &[f64]) -> TestResult {
    close(what, got, want, 1e-12)
}

const FD_H: f64 = 1e-6;
const FD_TOL: f64 = 1e-6;

// ---------------------------------------------------------------------------
// Pooling

fn pool_hand() -> TestResult {
    // x = 1..16 as a 4x4 image:
    //  1  2  3  4
    //  5  6  7  8
    //  9 10 11 12
    // 13 14 15 16
    let x: Vec<f64> = (1..=16).map(f64::from).collect();
    let shape = [1, 1, 4, 4];
    // 2x2 max, stride 2: the maxima of the four quadrants are 6, 8, 14, 16.
    let (y, ys) = pool_forward(PoolingMode::Max, &x, &shape, &[2, 2], &[0, 0], &[2, 2])?;
    ensure!(ys == [1, 1, 2, 2], "shape {ys:?}");
    exact("max", &y, &[6.0, 8.0, 14.0, 16.0])?;
    // Averages of the quadrants: (1+2+5+6)/4 = 3.5, (3+4+7+8)/4 = 5.5,
    // (9+10+13+14)/4 = 11.5, (11+12+15+16)/4 = 13.5.
    let (y, _) = pool_forward(
        PoolingMode::AverageIncludePadding,
        &x,
        &shape,
        &[2, 2],
        &[0, 0],
        &[2, 2],
    )?;
    exact("avg", &y, &[3.5, 5.5, 11.5, 13.5])?;
    // Backward max: dy = [1, 2, 3, 4] goes to the positions of 6, 8, 14, 16
    // (offsets 5, 7, 13, 15).
    let dx = pool_backward(
        PoolingMode::MaxDeterministic,
        &x,
        &shape,
        &[1.0, 2.0, 3.0, 4.0],
        &[2, 2],
        &[0, 0],
        &[2, 2],
    )?;
    let mut want = vec![0.0; 16];
    want[5] = 1.0;
    want[7] = 2.0;
    want[13] = 3.0;
    want[15] = 4.0;
    exact("max backward", &dx, &want)?;

    // x = [1, 2; 3, 4], window 3x3, pad 1, stride 1: output (2 + 2 - 3) / 1 + 1
    // = 2 per side, and every window covers all four inputs (sum 10).
    let x = [1.0, 2.0, 3.0, 4.0];
    let s = [1, 1, 2, 2];
    let p = |m| pool_forward(m, &x, &s, &[3, 3], &[1, 1], &[1, 1]);
    // Including padding: 10 / 9. Excluding: 10 / 4 = 2.5. Max: 4.
    exact(
        "avg incl",
        &p(PoolingMode::AverageIncludePadding)?.0,
        &[10.0 / 9.0; 4],
    )?;
    exact(
        "avg excl",
        &p(PoolingMode::AverageExcludePadding)?.0,
        &[2.5; 4],
    )?;
    exact("max pad", &p(PoolingMode::Max)?.0, &[4.0; 4])?;
    // Backward with dy = 1 everywhere: each input is in 4 windows, receiving
    // 1/9 (including padding) or 1/4 (excluding) from each: 4/9 and 1.
    let b = |m| pool_backward(m, &x, &s, &[1.0; 4], &[3, 3], &[1, 1], &[1, 1]);
    exact(
        "avg incl backward",
        &b(PoolingMode::AverageIncludePadding)?,
        &[4.0 / 9.0; 4],
    )?;
    exact(
        "avg excl backward",
        &b(PoolingMode::AverageExcludePadding)?,
        &[1.0; 4],
    )?;

    // 3-d: x = 1..8 as 2x2x2, one 2x2x2 window: max 8, mean 36 / 8 = 4.5.
    let x: Vec<f64> = (1..=8).map(f64::from).collect();
    let s = [1, 1, 2, 2, 2];
    let (y, ys) = pool_forward(PoolingMode::Max, &x, &s, &[2, 2, 2], &[0; 3], &[1; 3])?;
    ensure!(ys == [1, 1, 1, 1, 1], "3-d shape {ys:?}");
    exact("3-d max", &y, &[8.0])?;
    let (y, _) = pool_forward(
        PoolingMode::AverageExcludePadding,
        &x,
        &s,
        &[2, 2, 2],
        &[0; 3],
        &[1; 3],
    )?;
    exact("3-d avg", &y, &[4.5])?;
    // Two channels, two images: channel planes are pooled separately.
    // x = [n0c0: 1 2 | n0c1: 3 4 | n1c0: 5 6 | n1c1: 7 8] in 1x2 images, window 1x2.
    let (y, _) = pool_forward(
        PoolingMode::Max,
        &x,
        &[2, 2, 1, 2],
        &[1, 2],
        &[0, 0],
        &[1, 1],
    )?;
    exact("per channel", &y, &[2.0, 4.0, 6.0, 8.0])?;
    // NaN propagates through max.
    let (y, _) = pool_forward(
        PoolingMode::Max,
        &[1.0, f64::NAN, 3.0, 2.0],
        &[1, 1, 2, 2],
        &[2, 2],
        &[0, 0],
        &[1, 1],
    )?;
    ensure!(y[0].is_nan(), "NaN must propagate, got {y:?}");
    Ok(())
}

fn pool_finite_differences() -> TestResult {
    let mut rng = Rng(7);
    type Case = (Vec<usize>, Vec<usize>, Vec<usize>, Vec<usize>);
    let cases: Vec<Case> = vec![
        (vec![2, 3, 5, 6], vec![3, 2], vec![1, 0], vec![2, 1]),
        (vec![1, 2, 4, 4], vec![2, 2], vec![1, 1], vec![2, 2]),
        (
            vec![1, 2, 3, 4, 5],
            vec![2, 2, 3],
            vec![1, 0, 1],
            vec![1, 2, 2],
        ),
    ];
    for (shape, w, p, s) in cases {
        let n: usize = shape.iter().product();
        let x = rng.vec(n, -1.0, 1.0);
        for mode in [
            PoolingMode::Max,
            PoolingMode::MaxDeterministic,
            PoolingMode::AverageIncludePadding,
            PoolingMode::AverageExcludePadding,
        ] {
            let (y, _) = pool_forward(mode, &x, &shape, &w, &p, &s)?;
            let dy = rng.vec(y.len(), -1.0, 1.0);
            let got = pool_backward(mode, &x, &shape, &dy, &w, &p, &s)?;
            let want = finite_difference(
                |xv| dot(&dy, &pool_forward(mode, xv, &shape, &w, &p, &s)?.0),
                &x,
                FD_H,
            )?;
            close(&format!("pool {mode:?} {shape:?} dx"), &got, &want, FD_TOL)?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Activation

const MODES: [ActivationMode; 7] = ACTIVATION_MODES;

fn activation_hand() -> TestResult {
    use ActivationMode as A;
    let ln3 = 3f64.ln();
    let ln_half = 0.5f64.ln();
    // relu: max(x, 0).
    exact(
        "relu",
        &activation_forward(A::Relu, &[-1.0, 2.0]),
        &[0.0, 2.0],
    )?;
    // sigmoid(0) = 1 / (1 + 1) = 0.5; sigmoid(ln 3) = 1 / (1 + 1/3) = 0.75.
    exact(
        "sigmoid",
        &activation_forward(A::Sigmoid, &[0.0, ln3]),
        &[0.5, 0.75],
    )?;
    // tanh(0) = 0; tanh(ln 3) = (3 - 1/3) / (3 + 1/3) = (8/3) / (10/3) = 0.8.
    exact(
        "tanh",
        &activation_forward(A::Tanh, &[0.0, ln3]),
        &[0.0, 0.8],
    )?;
    // clipped at 6: -1 -> 0, 3 -> 3, 7 -> 6.
    exact(
        "clipped",
        &activation_forward(A::ClippedRelu { ceiling: 6.0 }, &[-1.0, 3.0, 7.0]),
        &[0.0, 3.0, 6.0],
    )?;
    // elu(alpha 2): x > 0 -> x; ln(1/2) -> 2 * (1/2 - 1) = -1.
    exact(
        "elu",
        &activation_forward(A::Elu { alpha: 2.0 }, &[1.5, ln_half]),
        &[1.5, -1.0],
    )?;
    // swish(beta 1): 0 * 0.5 = 0; ln 3 * sigmoid(ln 3) = 0.75 ln 3.
    exact(
        "swish",
        &activation_forward(A::Swish { beta: 1.0 }, &[0.0, ln3]),
        &[0.0, 0.75 * ln3],
    )?;
    exact(
        "identity",
        &activation_forward(A::Identity, &[-2.0, 5.0]),
        &[-2.0, 5.0],
    )?;
    // Derivatives at the same points, times dy = 2:
    // sigmoid'(0) = 0.5 * 0.5 = 0.25 -> 0.5; tanh'(ln 3) = 1 - 0.64 = 0.36 -> 0.72;
    // elu'(ln 1/2) with alpha 2 = 2 * 1/2 = 1 -> 2; swish'(0) = 0.5 -> 1;
    // relu'(-1) = 0, relu'(2) = 1 -> 0, 2; clipped'(7) = 0, clipped'(3) = 1.
    let g = |m, x: &[f64]| activation_backward(m, x, &vec![2.0; x.len()]);
    exact("sigmoid'", &g(A::Sigmoid, &[0.0])?, &[0.5])?;
    exact("tanh'", &g(A::Tanh, &[ln3])?, &[0.72])?;
    exact("elu'", &g(A::Elu { alpha: 2.0 }, &[ln_half])?, &[2.0])?;
    exact("swish'", &g(A::Swish { beta: 1.0 }, &[0.0])?, &[1.0])?;
    exact("relu'", &g(A::Relu, &[-1.0, 2.0])?, &[0.0, 2.0])?;
    exact(
        "clipped'",
        &g(A::ClippedRelu { ceiling: 6.0 }, &[7.0, 3.0])?,
        &[0.0, 2.0],
    )?;
    exact("identity'", &g(A::Identity, &[-4.0])?, &[2.0])?;
    // NaN propagates through relu.
    ensure!(activation(A::Relu, f64::NAN).is_nan(), "relu(NaN)");
    Ok(())
}

fn activation_finite_differences() -> TestResult {
    let mut rng = Rng(11);
    // Away from the kinks at 0 and the ceiling 2.
    let x: Vec<f64> = rng
        .vec(64, -3.0, 3.0)
        .into_iter()
        .filter(|v| v.abs() > 1e-3 && (v - 2.0).abs() > 1e-3)
        .collect();
    let dy = rng.vec(x.len(), -1.0, 1.0);
    for mode in MODES {
        let got = activation_backward(mode, &x, &dy)?;
        let want = finite_difference(|xv| dot(&dy, &activation_forward(mode, xv)), &x, FD_H)?;
        close(&format!("{mode:?} dx"), &got, &want, FD_TOL)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Softmax

fn softmax_hand() -> TestResult {
    use SoftmaxAlgorithm as A;
    use SoftmaxMode as M;
    let ln3 = 3f64.ln();
    // One pixel, two channels [0, ln 3]: e^0 = 1, e^ln3 = 3, sum 4: [1/4, 3/4].
    for mode in [M::Instance, M::Channel] {
        for algo in [A::Fast, A::Accurate] {
            exact(
                "softmax",
                &softmax_forward(algo, mode, &[0.0, ln3], &[1, 2, 1, 1])?,
                &[0.25, 0.75],
            )?;
        }
        exact(
            "log-softmax",
            &softmax_forward(A::Log, mode, &[0.0, ln3], &[1, 2, 1, 1])?,
            &[0.25f64.ln(), 0.75f64.ln()],
        )?;
    }
    // Shape [1, 2, 1, 2], x = [c0: 0, 0 | c1: ln 3, 0].
    let x = [0.0, 0.0, ln3, 0.0];
    // Per channel, pixel 0 takes (0, ln 3) -> (1/4, 3/4); pixel 1 takes (0, 0)
    // -> (1/2, 1/2); in memory [c0p0, c0p1, c1p0, c1p1] = [1/4, 1/2, 3/4, 1/2].
    exact(
        "channel",
        &softmax_forward(A::Accurate, M::Channel, &x, &[1, 2, 1, 2])?,
        &[0.25, 0.5, 0.75, 0.5],
    )?;
    // Per instance, all four: exps [1, 1, 3, 1], sum 6.
    exact(
        "instance",
        &softmax_forward(A::Accurate, M::Instance, &x, &[1, 2, 1, 2])?,
        &[1.0 / 6.0, 1.0 / 6.0, 0.5, 1.0 / 6.0],
    )?;
    // Backward, y = [1/4, 3/4], dy = [1, 0]: sum(dy * y) = 1/4, so
    // dx = y * (dy - 1/4) = [1/4 * 3/4, 3/4 * -1/4] = [3/16, -3/16].
    exact(
        "backward",
        &softmax_backward(
            A::Accurate,
            M::Channel,
            &[0.25, 0.75],
            &[1.0, 0.0],
            &[1, 2, 1, 1],
        )?,
        &[3.0 / 16.0, -3.0 / 16.0],
    )?;
    // Log backward, y = ln[1/4, 3/4], dy = [1, 0]: sum(dy) = 1,
    // dx = dy - e^y * 1 = [1 - 1/4, -3/4] = [3/4, -3/4].
    exact(
        "log backward",
        &softmax_backward(
            A::Log,
            M::Channel,
            &[0.25f64.ln(), 0.75f64.ln()],
            &[1.0, 0.0],
            &[1, 2, 1, 1],
        )?,
        &[0.75, -0.75],
    )?;
    Ok(())
}

fn softmax_finite_differences() -> TestResult {
    let mut rng = Rng(13);
    for shape in [vec![2, 5, 3, 2], vec![3, 4, 1, 1], vec![2, 3, 2, 2, 2]] {
        let n: usize = shape.iter().product();
        let x = rng.vec(n, -2.0, 2.0);
        let dy = rng.vec(n, -1.0, 1.0);
        for algo in [
            SoftmaxAlgorithm::Fast,
            SoftmaxAlgorithm::Accurate,
            SoftmaxAlgorithm::Log,
        ] {
            for mode in [SoftmaxMode::Instance, SoftmaxMode::Channel] {
                let y = softmax_forward(algo, mode, &x, &shape)?;
                let got = softmax_backward(algo, mode, &y, &dy, &shape)?;
                let want = finite_difference(
                    |xv| dot(&dy, &softmax_forward(algo, mode, xv, &shape)?),
                    &x,
                    FD_H,
                )?;
                close(
                    &format!("softmax {algo:?} {mode:?} {shape:?}"),
                    &got,
                    &want,
                    FD_TOL,
                )?;
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Tensor ops

fn tensor_ops_hand() -> TestResult {
    // A bias [10, 20] of shape [1, 2, 1, 1] onto [1, 2, 1, 2]: each channel's
    // value repeated over its two pixels.
    let b = broadcast(&[10.0, 20.0], &[1, 2, 1, 1], &[1, 2, 1, 2])?;
    exact("broadcast", &b, &[10.0, 10.0, 20.0, 20.0])?;
    // add: 2 * [10, 10, 20, 20] + 1 * [1, 2, 3, 4] = [21, 22, 43, 44].
    let c = add_tensor(
        2.0,
        &[10.0, 20.0],
        &[1, 2, 1, 1],
        1.0,
        &[1.0, 2.0, 3.0, 4.0],
        &[1, 2, 1, 2],
    )?;
    exact("add", &c, &[21.0, 22.0, 43.0, 44.0])?;
    // beta = 0 does not read c (NaN there does not propagate).
    let c = add_tensor(1.0, &[1.0], &[1, 1, 1, 1], 0.0, &[f64::NAN], &[1, 1, 1, 1])?;
    exact("beta 0", &c, &[1.0])?;
    // mul: a = [1, 2, 3, 4] (shape [1, 2, 1, 2]), b = [2, 3] of shape [1, 1, 1, 2]
    // broadcast to [2, 3, 2, 3]: a * b = [2, 6, 6, 12]; + 1 * c (c = 1s) = [3, 7, 7, 13].
    let a = [1.0, 2.0, 3.0, 4.0];
    let s = [1, 2, 1, 2];
    let r = op_tensor(
        OpTensorOp::Mul,
        1.0,
        &a,
        1.0,
        Some((&[2.0, 3.0], &[1, 1, 1, 2])),
        1.0,
        &[1.0; 4],
        &s,
    )?;
    exact("mul", &r, &[3.0, 7.0, 7.0, 13.0])?;
    // min/max of a and 2.5 * [1, 1, 1, 1]: [1, 2, 2.5, 2.5] and [2.5, 2.5, 3, 4].
    let b1 = ([1.0], [1usize, 1, 1, 1]);
    let mm = |op| op_tensor(op, 1.0, &a, 2.5, Some((&b1.0, &b1.1)), 0.0, &[0.0; 4], &s);
    exact("min", &mm(OpTensorOp::Min)?, &[1.0, 2.0, 2.5, 2.5])?;
    exact("max", &mm(OpTensorOp::Max)?, &[2.5, 2.5, 3.0, 4.0])?;
    // add with alpha1 = 2, alpha2 = -1: 2a - 1 = [1, 3, 5, 7].
    exact(
        "add scaled",
        &op_tensor(
            OpTensorOp::Add,
            2.0,
            &a,
            -1.0,
            Some((&b1.0, &b1.1)),
            0.0,
            &[0.0; 4],
            &s,
        )?,
        &[1.0, 3.0, 5.0, 7.0],
    )?;
    // sqrt(4 * [1, 4, 9, 16]) = [2, 4, 6, 8]; unary ops need no b.
    exact(
        "sqrt",
        &op_tensor(
            OpTensorOp::Sqrt,
            4.0,
            &[1.0, 4.0, 9.0, 16.0],
            1.0,
            None,
            0.0,
            &[0.0; 4],
            &s,
        )?,
        &[2.0, 4.0, 6.0, 8.0],
    )?;
    // not [0, 1, 0, 1] = [1, 0, 1, 0].
    exact(
        "not",
        &op_tensor(
            OpTensorOp::Not,
            1.0,
            &[0.0, 1.0, 0.0, 1.0],
            1.0,
            None,
            0.0,
            &[0.0; 4],
            &s,
        )?,
        &[1.0, 0.0, 1.0, 0.0],
    )?;
    Ok(())
}

fn reduce_hand() -> TestResult {
    // a, shape [1, 1, 2, 3]:
    //  3 -7  5
    //  5  1  0
    let a = [3.0, -7.0, 5.0, 5.0, 1.0, 0.0];
    let s = [1, 1, 2, 3];
    let all = [1, 1, 1, 1];
    let r = |op| reduce(op, &a, &s, &all);
    // sum 3 - 7 + 5 + 5 + 1 + 0 = 7; product 0 (one zero); product without the
    // zero 3 * -7 * 5 * 5 * 1 = -525; min -7 at 1; max 5 first at 2;
    // amax |-7| = 7; mean 7 / 6; norm1 3 + 7 + 5 + 5 + 1 + 0 = 21;
    // norm2 sqrt(9 + 49 + 25 + 25 + 1 + 0) = sqrt(109).
    let cases = [
        (ReduceOp::Add, 7.0, 0),
        (ReduceOp::Mul, 0.0, 0),
        (ReduceOp::MulNoZeros, -525.0, 0),
        (ReduceOp::Min, -7.0, 1),
        (ReduceOp::Max, 5.0, 2),
        (ReduceOp::Amax, 7.0, 0),
        (ReduceOp::Avg, 7.0 / 6.0, 0),
        (ReduceOp::Norm1, 21.0, 0),
        (ReduceOp::Norm2, 109f64.sqrt(), 0),
    ];
    for (op, v, i) in cases {
        let (c, idx) = r(op)?;
        exact(&format!("{op:?}"), &c, &[v])?;
        if op.has_indices() {
            ensure!(idx == [i], "{op:?} index {idx:?}, want {i}");
        }
    }
    // Over w (c shape [1, 1, 2, 1]): rows (3, -7, 5) and (5, 1, 0):
    // max 5 at 2 and 5 at 0; min -7 at 1 and 0 at 2; sum 1 and 6.
    let (c, i) = reduce(ReduceOp::Max, &a, &s, &[1, 1, 2, 1])?;
    exact("row max", &c, &[5.0, 5.0])?;
    ensure!(i == [2, 0], "row max indices {i:?}");
    let (c, i) = reduce(ReduceOp::Min, &a, &s, &[1, 1, 2, 1])?;
    exact("row min", &c, &[-7.0, 0.0])?;
    ensure!(i == [1, 2], "row min indices {i:?}");
    exact(
        "row sum",
        &reduce(ReduceOp::Add, &a, &s, &[1, 1, 2, 1])?.0,
        &[1.0, 6.0],
    )?;
    // Over h (c shape [1, 1, 1, 3]): columns (3, 5), (-7, 1), (5, 0):
    // sums 8, -6, 5; maxima 5 at 1, 1 at 1, 5 at 0.
    exact(
        "col sum",
        &reduce(ReduceOp::Add, &a, &s, &[1, 1, 1, 3])?.0,
        &[8.0, -6.0, 5.0],
    )?;
    let (c, i) = reduce(ReduceOp::Max, &a, &s, &[1, 1, 1, 3])?;
    exact("col max", &c, &[5.0, 1.0, 5.0])?;
    ensure!(i == [1, 1, 0], "col max indices {i:?}");
    // Nothing reduced: c = a.
    exact(
        "identity",
        &reduce(ReduceOp::Norm2, &a, &s, &s)?.0,
        &[3.0, 7.0, 5.0, 5.0, 1.0, 0.0],
    )?;
    // NaN propagates through max.
    let (c, _) = reduce(ReduceOp::Max, &[1.0, f64::NAN, 2.0], &[1, 1, 3], &[1, 1, 1])?;
    ensure!(c[0].is_nan(), "max with NaN: {c:?}");
    Ok(())
}

// ---------------------------------------------------------------------------
// Batch normalization

fn batch_norm_hand() -> TestResult {
    // Spatial, x shape [2, 1, 1, 2] = [1, 1, 3, 3]: one channel, 4 values,
    // mean 2, deviations +-1, biased variance 4/4 = 1, unbiased 4/3; with
    // epsilon 0 the inverse std is 1.
    let x = [1.0, 1.0, 3.0, 3.0];
    let s = [2, 1, 1, 2];
    let st = batch_norm_stats(BatchNormMode::Spatial, &x, &s, 0.0)?;
    exact("mean", &st.mean, &[2.0])?;
    exact("var", &st.variance, &[1.0])?;
    exact("unbiased", &st.variance_unbiased, &[4.0 / 3.0])?;
    exact("inv std", &st.inv_std, &[1.0])?;
    // y = 2 * (x - 2) * 1 + 0.5 = [-1.5, -1.5, 2.5, 2.5].
    let t = batch_norm_training(BatchNormMode::Spatial, &x, &s, &[2.0], &[0.5], 0.0)?;
    exact("y", &t.y, &[-1.5, -1.5, 2.5, 2.5])?;
    // Per activation, x shape [2, 2, 1, 1] = [n0: 1, 5 | n1: 3, 9]: channel 0
    // sees (1, 3): mean 2, variance 1, unbiased 2; channel 1 sees (5, 9): mean
    // 7, variance 4, unbiased 8; epsilon 0 -> inverse std 1 and 1/2.
    let x = [1.0, 5.0, 3.0, 9.0];
    let st = batch_norm_stats(BatchNormMode::PerActivation, &x, &[2, 2, 1, 1], 0.0)?;
    exact("pa mean", &st.mean, &[2.0, 7.0])?;
    exact("pa var", &st.variance, &[1.0, 4.0])?;
    exact("pa unbiased", &st.variance_unbiased, &[2.0, 8.0])?;
    exact("pa inv std", &st.inv_std, &[1.0, 0.5])?;
    // Inference with mean 1, variance 3, epsilon 1 (sqrt(4) = 2), scale 4,
    // bias -1: y = 4 * (x - 1) / 2 - 1 = 2x - 3 -> [-1, 7, 3, 15].
    let y = batch_norm_inference(
        BatchNormMode::Spatial,
        &x,
        &[2, 1, 1, 2],
        &[4.0],
        &[-1.0],
        &[1.0],
        &[3.0],
        1.0,
    )?;
    exact("inference", &y, &[-1.0, 7.0, 3.0, 15.0])?;
    // Running average with factor 1/4: 3/4 * [0, 10] + 1/4 * [2, 20] = [0.5, 12.5].
    exact(
        "running",
        &running_average(&[0.0, 10.0], &[2.0, 20.0], 0.25)?,
        &[0.5, 12.5],
    )?;
    // Backward, spatial x = [1, 1, 3, 3] (xhat = [-1, -1, 1, 1], inv std 1,
    // m = 4), scale 2, dy = [1, 0, 0, 0]: dbias = 1, dscale = -1,
    // dx = 2 * 1 / 4 * (4 dy - 1 - xhat * -1) = 0.5 * (4 dy - 1 + xhat)
    //    = 0.5 * [4 - 1 - 1, -1 - 1, -1 + 1, -1 + 1] = [1, -1, 0, 0].
    let g = batch_norm_backward(
        BatchNormMode::Spatial,
        &[1.0, 1.0, 3.0, 3.0],
        &[2, 1, 1, 2],
        &[1.0, 0.0, 0.0, 0.0],
        &[2.0],
        0.0,
    )?;
    exact("dbias", &g.dbias, &[1.0])?;
    exact("dscale", &g.dscale, &[-1.0])?;
    exact("dx", &g.dx, &[1.0, -1.0, 0.0, 0.0])?;
    Ok(())
}

/// The statistics, computed directly with 4-d loops.
fn batch_norm_statistics_direct() -> TestResult {
    let mut rng = Rng(17);
    let (n, c, h, w) = (3usize, 4usize, 2usize, 5usize);
    let x = rng.vec(n * c * h * w, -3.0, 5.0);
    let at = |i: usize, k: usize, y: usize, z: usize| x[((i * c + k) * h + y) * w + z];
    let eps = 1e-3;
    // Spatial: over n, h, w for each channel.
    let st = batch_norm_stats(BatchNormMode::Spatial, &x, &[n, c, h, w], eps)?;
    for k in 0..c {
        let mut vals = Vec::new();
        for i in 0..n {
            for y in 0..h {
                for z in 0..w {
                    vals.push(at(i, k, y, z));
                }
            }
        }
        let m = vals.len() as f64;
        let mean = vals.iter().sum::<f64>() / m;
        let var = vals.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / m;
        close("spatial mean", &[st.mean[k]], &[mean], 1e-12)?;
        close("spatial var", &[st.variance[k]], &[var], 1e-12)?;
        close(
            "spatial unbiased",
            &[st.variance_unbiased[k]],
            &[var * m / (m - 1.0)],
            1e-12,
        )?;
        close(
            "spatial inv std",
            &[st.inv_std[k]],
            &[1.0 / (var + eps).sqrt()],
            1e-12,
        )?;
    }
    // Per activation: over n for each (c, h, w), laid out [1, c, h, w].
    let st = batch_norm_stats(BatchNormMode::PerActivation, &x, &[n, c, h, w], eps)?;
    ensure!(st.mean.len() == c * h * w, "pa count {}", st.mean.len());
    for k in 0..c {
        for y in 0..h {
            for z in 0..w {
                let vals: Vec<f64> = (0..n).map(|i| at(i, k, y, z)).collect();
                let m = n as f64;
                let mean = vals.iter().sum::<f64>() / m;
                let var = vals.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / m;
                let p = (k * h + y) * w + z;
                close("pa mean", &[st.mean[p]], &[mean], 1e-12)?;
                close("pa var", &[st.variance[p]], &[var], 1e-12)?;
            }
        }
    }
    // SpatialPersistent is Spatial.
    let a = batch_norm_stats(BatchNormMode::SpatialPersistent, &x, &[n, c, h, w], eps)?;
    let b = batch_norm_stats(BatchNormMode::Spatial, &x, &[n, c, h, w], eps)?;
    ensure!(a == b, "persistent != spatial");
    // Several running-average steps equal the closed form
    // r_k = (1-f)^k r_0 + sum_j f (1-f)^(k-1-j) b_j.
    let f = 0.1;
    let batches: Vec<Vec<f64>> = (0..5).map(|_| rng.vec(3, 0.0, 2.0)).collect();
    let mut r = vec![1.0, 2.0, 3.0];
    for b in &batches {
        r = running_average(&r, b, f)?;
    }
    for (i, &got) in r.iter().enumerate() {
        let mut want = (1.0 - f).powi(5) * [1.0, 2.0, 3.0][i];
        for (j, b) in batches.iter().enumerate() {
            want += f * (1.0 - f).powi(4 - j as i32) * b[i];
        }
        close("running closed form", &[got], &[want], 1e-12)?;
    }
    Ok(())
}

fn batch_norm_finite_differences() -> TestResult {
    let mut rng = Rng(19);
    for mode in [BatchNormMode::Spatial, BatchNormMode::PerActivation] {
        for shape in [vec![3, 2, 2, 3], vec![2, 3, 2, 1, 2]] {
            let n: usize = shape.iter().product();
            let p = if mode == BatchNormMode::PerActivation {
                n / shape[0]
            } else {
                shape[1]
            };
            let x = rng.vec(n, -2.0, 2.0);
            let dy = rng.vec(n, -1.0, 1.0);
            let scale = rng.vec(p, 0.5, 1.5);
            let bias = rng.vec(p, -0.5, 0.5);
            let eps = 1e-2;
            let g = batch_norm_backward(mode, &x, &shape, &dy, &scale, eps)?;
            let loss = |xv: &[f64], sv: &[f64], bv: &[f64]| -> cudnn::Result<f64> {
                dot(&dy, &batch_norm_training(mode, xv, &shape, sv, bv, eps)?.y)
            };
            let dx = finite_difference(|v| loss(v, &scale, &bias), &x, FD_H)?;
            let ds = finite_difference(|v| loss(&x, v, &bias), &scale, FD_H)?;
            let db = finite_difference(|v| loss(&x, &scale, v), &bias, FD_H)?;
            close(&format!("bn {mode:?} {shape:?} dx"), &g.dx, &dx, 1e-5)?;
            close(
                &format!("bn {mode:?} {shape:?} dscale"),
                &g.dscale,
                &ds,
                1e-5,
            )?;
            close(&format!("bn {mode:?} {shape:?} dbias"), &g.dbias, &db, 1e-5)?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Dropout, layouts, blending, errors

fn dropout_hand() -> TestResult {
    // p = 1/2 scales kept values by 2: [1, 2, 3, 4] with mask [1, 0, 1, 0] -> [2, 0, 6, 0].
    let keep = [true, false, true, false];
    exact(
        "forward",
        &dropout_forward(&[1.0, 2.0, 3.0, 4.0], &keep, 0.5)?,
        &[2.0, 0.0, 6.0, 0.0],
    )?;
    // p = 3/4 scales by 4.
    exact(
        "backward",
        &dropout_backward(&[1.0, 1.0, 1.0, 1.0], &keep, 0.75)?,
        &[4.0, 0.0, 4.0, 0.0],
    )?;
    ensure!(
        dropout_mask(&[1.0, 2.0, 3.0], &[2.0, 0.0, 6.0])? == [true, false, true],
        "mask"
    );
    ensure!(
        dropout_forward(&[1.0], &[true], 1.0).is_err(),
        "p = 1 must fail"
    );
    Ok(())
}

fn layouts_and_blend() -> TestResult {
    // NHWC [n, c, h, w] = [1, 2, 2, 2] has strides [8, 1, 4, 2]; memory holding
    // its own offsets 0..8 reads back in logical (c, h, w) order as
    // c0: (h0w0 0, h0w1 2, h1w0 4, h1w1 6), c1: (1, 3, 5, 7).
    let mem: Vec<f64> = (0..8).map(f64::from).collect();
    let shape = [1, 2, 2, 2];
    let strides = [8, 1, 4, 2];
    let logical = gather(&mem, &shape, &strides)?;
    exact(
        "gather",
        &logical,
        &[0.0, 2.0, 4.0, 6.0, 1.0, 3.0, 5.0, 7.0],
    )?;
    let mut back = vec![-1.0; 8];
    scatter(&logical, &shape, &strides, &mut back)?;
    exact("scatter", &back, &mem)?;
    ensure!(packed_strides(&[2, 3, 4]) == [12, 4, 1], "packed strides");
    // A gap: a 2x2 view with row stride 3 of a 6-element buffer leaves 2 and 5 alone.
    let mut m = vec![9.0; 6];
    scatter(&[1.0, 2.0, 3.0, 4.0], &[1, 1, 2, 2], &[4, 4, 3, 1], &mut m)?;
    exact("gap", &m, &[1.0, 2.0, 9.0, 3.0, 4.0, 9.0])?;
    // blend: 2 * [1, 2] + 3 * [10, 20] = [32, 64]; beta 0 ignores NaN.
    exact(
        "blend",
        &blend(2.0, &[1.0, 2.0], 3.0, &[10.0, 20.0])?,
        &[32.0, 64.0],
    )?;
    exact(
        "blend beta 0",
        &blend(2.0, &[1.0], 0.0, &[f64::NAN])?,
        &[2.0],
    )?;
    // finite differences of x^2 + 3y at (1, 2): (2, 3).
    let g = finite_difference(|v| Ok(v[0] * v[0] + 3.0 * v[1]), &[1.0, 2.0], 1e-5)?;
    close("fd", &g, &[2.0, 3.0], 1e-8)?;
    Ok(())
}

fn is_mismatch(e: &Error) -> bool {
    matches!(e, Error::Mismatch { .. })
}

fn errors_not_panics() -> TestResult {
    let e = pool_forward(
        PoolingMode::Max,
        &[1.0; 3],
        &[1, 1, 2, 2],
        &[2, 2],
        &[0, 0],
        &[1, 1],
    )
    .err()
    .ok_or("x too short must fail")?;
    ensure!(is_mismatch(&e) && e.to_string().contains('4'), "{e}");
    ensure!(
        pool_forward(
            PoolingMode::Max,
            &[1.0; 4],
            &[1, 1, 2, 2],
            &[3, 3],
            &[0, 0],
            &[1, 1]
        )
        .is_err(),
        "window larger than the input"
    );
    ensure!(
        pool_backward(
            PoolingMode::Max,
            &[1.0; 4],
            &[1, 1, 2, 2],
            &[1.0; 2],
            &[2, 2],
            &[0, 0],
            &[1, 1]
        )
        .is_err(),
        "dy of the wrong length"
    );
    ensure!(
        activation_backward(ActivationMode::Relu, &[1.0], &[1.0, 2.0]).is_err(),
        "activation lengths"
    );
    ensure!(
        softmax_forward(SoftmaxAlgorithm::Fast, SoftmaxMode::Channel, &[1.0], &[1]).is_err(),
        "softmax rank 1"
    );
    ensure!(
        softmax_backward(
            SoftmaxAlgorithm::Log,
            SoftmaxMode::Channel,
            &[1.0; 2],
            &[1.0],
            &[1, 2]
        )
        .is_err(),
        "softmax dy length"
    );
    let e = broadcast(&[1.0, 2.0], &[1, 2, 1, 1], &[1, 3, 1, 1])
        .err()
        .ok_or("broadcast 2 -> 3 must fail")?;
    ensure!(
        e.to_string().contains("src.shape[1]"),
        "names the dimension: {e}"
    );
    ensure!(
        op_tensor(
            OpTensorOp::Add,
            1.0,
            &[1.0],
            1.0,
            None,
            0.0,
            &[0.0],
            &[1, 1, 1, 1]
        )
        .is_err(),
        "binary op without b"
    );
    ensure!(
        reduce(ReduceOp::Add, &[1.0; 4], &[1, 1, 2, 2], &[1, 1, 2]).is_err(),
        "reduce rank"
    );
    ensure!(
        reduce(ReduceOp::Add, &[1.0; 4], &[1, 1, 2, 2], &[1, 1, 3, 1]).is_err(),
        "reduce to a larger dim"
    );
    ensure!(
        batch_norm_inference(
            BatchNormMode::Spatial,
            &[1.0; 4],
            &[1, 2, 1, 2],
            &[1.0],
            &[0.0; 2],
            &[0.0; 2],
            &[1.0; 2],
            0.0
        )
        .is_err(),
        "bn parameter count"
    );
    ensure!(
        batch_norm_backward(
            BatchNormMode::PerActivation,
            &[1.0; 4],
            &[2, 2, 1, 1],
            &[1.0; 3],
            &[1.0; 2],
            0.0
        )
        .is_err(),
        "bn dy length"
    );
    ensure!(
        running_average(&[1.0], &[1.0, 2.0], 0.5).is_err(),
        "running lengths"
    );
    ensure!(
        gather(&[1.0; 7], &[1, 2, 2, 2], &[8, 1, 4, 2]).is_err(),
        "gather span"
    );
    ensure!(
        gather(&[1.0; 8], &[1, 2, 2, 2], &[8, 1, 4]).is_err(),
        "gather ranks"
    );
    ensure!(blend(1.0, &[1.0], 1.0, &[]).is_err(), "blend lengths");
    ensure!(dot(&[1.0], &[]).is_err(), "dot lengths");
    ensure!(element_count(&[usize::MAX, 2]).is_err(), "count overflow");
    Ok(())
}

pub fn main() {
    run(vec![
        unit("ops_reference::pool_hand", pool_hand),
        unit(
            "ops_reference::pool_finite_differences",
            pool_finite_differences,
        ),
        unit("ops_reference::activation_hand", activation_hand),
        unit(
            "ops_reference::activation_finite_differences",
            activation_finite_differences,
        ),
        unit("ops_reference::softmax_hand", softmax_hand),
        unit(
            "ops_reference::softmax_finite_differences",
            softmax_finite_differences,
        ),
        unit("ops_reference::tensor_ops_hand", tensor_ops_hand),
        unit("ops_reference::reduce_hand", reduce_hand),
        unit("ops_reference::batch_norm_hand", batch_norm_hand),
        unit(
            "ops_reference::batch_norm_statistics_direct",
            batch_norm_statistics_direct,
        ),
        unit(
            "ops_reference::batch_norm_finite_differences",
            batch_norm_finite_differences,
        ),
        unit("ops_reference::dropout_hand", dropout_hand),
        unit("ops_reference::layouts_and_blend", layouts_and_blend),
        unit("ops_reference::errors_not_panics", errors_not_panics),
    ])
}
