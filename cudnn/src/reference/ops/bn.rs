//! Batch normalization: statistics, inference, training forward, running
//! averages, backward.
//!
//! Parameters and statistics are indexed as cuDNN's derived descriptor lays
//! them out (packed): per activation, `[1, C, spatial...]` (one per `c,
//! spatial` position, statistics over `N`); spatial, `[1, C, 1, ...]` (one
//! per channel, statistics over `N` and the spatial positions).

use super::{check_data, check_same_len, ncs};
use crate::dnn::BatchNormMode;
use crate::error::Result;

/// For each element of a `[n, c, spatial...]` tensor, its parameter index;
/// the parameter count; and how many elements share one statistic.
fn param_index(mode: BatchNormMode, shape: &[usize]) -> Result<(Vec<usize>, usize, usize)> {
    let (n, c, s) = ncs(shape)?;
    let mut idx = Vec::with_capacity(n * c * s);
    for _ in 0..n {
        for k in 0..c {
            for p in 0..s {
                idx.push(match mode {
                    BatchNormMode::PerActivation => k * s + p,
                    _ => k,
                });
            }
        }
    }
    Ok(match mode {
        BatchNormMode::PerActivation => (idx, c * s, n),
        _ => (idx, c, n * s),
    })
}

/// Batch statistics per parameter position.
#[derive(Debug, Clone, PartialEq)]
pub struct BnStats {
    /// The mean.
    pub mean: Vec<f64>,
    /// The biased variance (divided by `m`), used to normalize.
    pub variance: Vec<f64>,
    /// The unbiased variance (divided by `m - 1`; the biased one when
    /// `m = 1`), used for the running average.
    pub variance_unbiased: Vec<f64>,
    /// `1 / sqrt(variance + epsilon)`.
    pub inv_std: Vec<f64>,
}

/// The batch statistics of `x`.
///
/// # Errors
/// A shape of rank below 2, or `x` not matching it.
pub fn batch_norm_stats(
    mode: BatchNormMode,
    x: &[f64],
    shape: &[usize],
    epsilon: f64,
) -> Result<BnStats> {
    check_data("x", x, shape)?;
    let (idx, p, m) = param_index(mode, shape)?;
    let mut mean = vec![0.0; p];
    for (&v, &i) in x.iter().zip(&idx) {
        mean[i] += v;
    }
    for v in &mut mean {
        *v /= m as f64;
    }
    let mut ss = vec![0.0; p];
    for (&v, &i) in x.iter().zip(&idx) {
        ss[i] += (v - mean[i]).powi(2);
    }
    let variance: Vec<f64> = ss.iter().map(|s| s / m as f64).collect();
    let variance_unbiased = ss
        .iter()
        .zip(&variance)
        .map(|(s, v)| if m > 1 { s / (m - 1) as f64 } else { *v })
        .collect();
    let inv_std = variance
        .iter()
        .map(|v| 1.0 / (v + epsilon).sqrt())
        .collect();
    Ok(BnStats {
        mean,
        variance,
        variance_unbiased,
        inv_std,
    })
}

fn check_params(what: &str, p: usize, v: &[f64]) -> Result<()> {
    check_same_len(&format!("{what} (the parameter count)"), p, v.len())
}

/// Inference: `y = scale * (x - mean) / sqrt(variance + epsilon) + bias`.
///
/// # Errors
/// Data not matching the shape or the parameter count.
#[allow(clippy::too_many_arguments)] // the op's arguments, in cuDNN's order
pub fn batch_norm_inference(
    mode: BatchNormMode,
    x: &[f64],
    shape: &[usize],
    scale: &[f64],
    bias: &[f64],
    mean: &[f64],
    variance: &[f64],
    epsilon: f64,
) -> Result<Vec<f64>> {
    check_data("x", x, shape)?;
    let (idx, p, _) = param_index(mode, shape)?;
    for (w, v) in [
        ("scale", scale),
        ("bias", bias),
        ("mean", mean),
        ("variance", variance),
    ] {
        check_params(w, p, v)?;
    }
    Ok(x.iter()
        .zip(&idx)
        .map(|(&v, &i)| scale[i] * (v - mean[i]) / (variance[i] + epsilon).sqrt() + bias[i])
        .collect())
}

/// The result of a training forward pass.
#[derive(Debug, Clone, PartialEq)]
pub struct BnTraining {
    /// The normalized output.
    pub y: Vec<f64>,
    /// The batch statistics (the saved mean is `stats.mean`, the saved
    /// inverse variance `stats.inv_std`).
    pub stats: BnStats,
}

/// Training forward: normalize with the batch statistics.
///
/// # Errors
/// Data not matching the shape or the parameter count.
pub fn batch_norm_training(
    mode: BatchNormMode,
    x: &[f64],
    shape: &[usize],
    scale: &[f64],
    bias: &[f64],
    epsilon: f64,
) -> Result<BnTraining> {
    let stats = batch_norm_stats(mode, x, shape, epsilon)?;
    let y = batch_norm_inference(
        mode,
        x,
        shape,
        scale,
        bias,
        &stats.mean,
        &stats.variance,
        epsilon,
    )?;
    Ok(BnTraining { y, stats })
}

/// A running-average step: `(1 - factor) * running + factor * batch`.
///
/// # Errors
/// Lengths that differ.
pub fn running_average(running: &[f64], batch: &[f64], factor: f64) -> Result<Vec<f64>> {
    check_same_len("batch (must equal running)", running.len(), batch.len())?;
    Ok(running
        .iter()
        .zip(batch)
        .map(|(r, b)| (1.0 - factor) * r + factor * b)
        .collect())
}

/// The gradients of a training batch normalization.
#[derive(Debug, Clone, PartialEq)]
pub struct BnGrads {
    /// `dL/dx`.
    pub dx: Vec<f64>,
    /// `dL/dscale`.
    pub dscale: Vec<f64>,
    /// `dL/dbias`.
    pub dbias: Vec<f64>,
}

/// Backward through [`batch_norm_training`] (the statistics depend on `x`):
/// with `xhat = (x - mean) * inv_std`, per statistic group of `m` elements,
/// `dbias = sum(dy)`, `dscale = sum(dy * xhat)`,
/// `dx = scale * inv_std / m * (m * dy - dbias - xhat * dscale)`.
///
/// # Errors
/// Data not matching the shape or the parameter count.
pub fn batch_norm_backward(
    mode: BatchNormMode,
    x: &[f64],
    shape: &[usize],
    dy: &[f64],
    scale: &[f64],
    epsilon: f64,
) -> Result<BnGrads> {
    let stats = batch_norm_stats(mode, x, shape, epsilon)?;
    check_data("dy", dy, shape)?;
    let (idx, p, m) = param_index(mode, shape)?;
    check_params("scale", p, scale)?;
    let xhat: Vec<f64> = x
        .iter()
        .zip(&idx)
        .map(|(&v, &i)| (v - stats.mean[i]) * stats.inv_std[i])
        .collect();
    let (mut dscale, mut dbias) = (vec![0.0; p], vec![0.0; p]);
    for ((&g, &xh), &i) in dy.iter().zip(&xhat).zip(&idx) {
        dbias[i] += g;
        dscale[i] += g * xh;
    }
    let m = m as f64;
    let dx = dy
        .iter()
        .zip(&xhat)
        .zip(&idx)
        .map(|((&g, &xh), &i)| {
            scale[i] * stats.inv_std[i] / m * (m * g - dbias[i] - xh * dscale[i])
        })
        .collect();
    Ok(BnGrads { dx, dscale, dbias })
}
