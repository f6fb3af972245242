//! Softmax and log-softmax, forward and backward, per instance or per
//! channel.

use super::{check_data, check_same_len, ncs};
use crate::dnn::{SoftmaxAlgorithm, SoftmaxMode};
use crate::error::Result;
use crate::reference::bounds;

/// The groups one softmax is taken over, of a packed `[n, c, spatial...]`
/// tensor with at least one element: `(groups, size, offset)`, where
/// element `t` of group `g` is at `offset(g, t)`. Nothing is allocated: an
/// instance is the `c * s` consecutive elements of one batch entry; a
/// channel group is the `c` elements of one pixel, `s` apart.
fn groups(
    mode: SoftmaxMode,
    shape: &[usize],
) -> Result<(usize, usize, impl Fn(usize, usize) -> usize)> {
    let (n, c, s) = ncs(shape)?;
    // Every factor is >= 1 and the whole product fits (checked by `ncs`),
    // so no product below overflows.
    let (count, size) = match mode {
        SoftmaxMode::Instance => (n, c * s),
        SoftmaxMode::Channel => (n * s, c),
    };
    let at = move |g: usize, t: usize| match mode {
        SoftmaxMode::Instance => g * c * s + t,
        SoftmaxMode::Channel => (g / s) * c * s + t * s + g % s,
    };
    Ok((count, size, at))
}

/// `y = softmax(x)` (or the log-softmax for [`SoftmaxAlgorithm::Log`]);
/// `Fast` and `Accurate` are the same function (computed here the accurate
/// way).
///
/// # Errors
/// A shape of rank below 2 or beyond
/// [`MAX_ELEMENTS`](crate::reference::MAX_ELEMENTS), or `x` not matching it.
pub fn softmax_forward(
    algo: SoftmaxAlgorithm,
    mode: SoftmaxMode,
    x: &[f64],
    shape: &[usize],
) -> Result<Vec<f64>> {
    ncs(shape)?;
    let n = check_data("x", x, "shape", shape)?;
    let mut y = bounds::zeros("shape", n)?;
    if n == 0 {
        return Ok(y);
    }
    let (count, size, at) = groups(mode, shape)?;
    for g in 0..count {
        let ix = |t| at(g, t);
        let max = (0..size)
            .map(|t| x[ix(t)])
            .fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = (0..size).map(|t| (x[ix(t)] - max).exp()).sum();
        for t in 0..size {
            let i = ix(t);
            y[i] = match algo {
                SoftmaxAlgorithm::Log => x[i] - max - sum.ln(),
                _ => (x[i] - max).exp() / sum,
            };
        }
    }
    Ok(y)
}

/// `dx` for the output gradient `dy`, from the forward output `y`:
/// `y * (dy - sum(dy * y))`, or for the log-softmax
/// `dy - e^y * sum(dy)`, the sums over each softmax group.
///
/// # Errors
/// As [`softmax_forward`], or `dy` not matching `y`.
pub fn softmax_backward(
    algo: SoftmaxAlgorithm,
    mode: SoftmaxMode,
    y: &[f64],
    dy: &[f64],
    shape: &[usize],
) -> Result<Vec<f64>> {
    ncs(shape)?;
    let n = check_data("y", y, "shape", shape)?;
    check_same_len("dy (must equal y)", n, dy.len())?;
    let mut dx = bounds::zeros("shape", n)?;
    if n == 0 {
        return Ok(dx);
    }
    let (count, size, at) = groups(mode, shape)?;
    for g in 0..count {
        let ix = |t| at(g, t);
        match algo {
            SoftmaxAlgorithm::Log => {
                let s: f64 = (0..size).map(|t| dy[ix(t)]).sum();
                for t in 0..size {
                    let i = ix(t);
                    dx[i] = dy[i] - y[i].exp() * s;
                }
            }
            _ => {
                let s: f64 = (0..size).map(|t| dy[ix(t)] * y[ix(t)]).sum();
                for t in 0..size {
                    let i = ix(t);
                    dx[i] = y[i] * (dy[i] - s);
                }
            }
        }
    }
    Ok(dx)
}
