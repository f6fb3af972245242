//! Softmax and log-softmax, forward and backward, per instance or per
//! channel.

use super::{check_data, check_same_len, ncs};
use crate::dnn::{SoftmaxAlgorithm, SoftmaxMode};
use crate::error::Result;

/// The packed offsets of each group one softmax is taken over.
fn groups(mode: SoftmaxMode, shape: &[usize]) -> Result<Vec<Vec<usize>>> {
    let (n, c, s) = ncs(shape)?;
    Ok(match mode {
        SoftmaxMode::Instance => (0..n)
            .map(|i| (i * c * s..(i + 1) * c * s).collect())
            .collect(),
        SoftmaxMode::Channel => (0..n)
            .flat_map(|i| (0..s).map(move |p| (0..c).map(|k| i * c * s + k * s + p).collect()))
            .collect(),
    })
}

/// `y = softmax(x)` (or the log-softmax for [`SoftmaxAlgorithm::Log`]);
/// `Fast` and `Accurate` are the same function (computed here the accurate
/// way).
///
/// # Errors
/// A shape of rank below 2, or `x` not matching it.
pub fn softmax_forward(
    algo: SoftmaxAlgorithm,
    mode: SoftmaxMode,
    x: &[f64],
    shape: &[usize],
) -> Result<Vec<f64>> {
    let n = check_data("x", x, shape)?;
    let mut y = vec![0.0; n];
    for g in groups(mode, shape)? {
        let max = g.iter().map(|&i| x[i]).fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = g.iter().map(|&i| (x[i] - max).exp()).sum();
        for &i in &g {
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
    let n = check_data("y", y, shape)?;
    check_same_len("dy (must equal y)", n, dy.len())?;
    let mut dx = vec![0.0; n];
    for g in groups(mode, shape)? {
        match algo {
            SoftmaxAlgorithm::Log => {
                let s: f64 = g.iter().map(|&i| dy[i]).sum();
                for &i in &g {
                    dx[i] = dy[i] - y[i].exp() * s;
                }
            }
            _ => {
                let s: f64 = g.iter().map(|&i| dy[i] * y[i]).sum();
                for &i in &g {
                    dx[i] = y[i] * (dy[i] - s);
                }
            }
        }
    }
    Ok(dx)
}
