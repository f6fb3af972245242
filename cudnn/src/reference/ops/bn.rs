//! Batch normalization: statistics, inference, training forward, running
//! averages, backward.
//!
//! Parameters and statistics are indexed as cuDNN's derived descriptor lays
//! them out (packed): per activation, `[1, C, spatial...]` (one per `c,
//! spatial` position, statistics over `N`); spatial, `[1, C, 1, ...]` (one
//! per channel, statistics over `N` and the spatial positions).

use super::{check_data, check_same_len, ncs};
use crate::dnn::BatchNormMode;
use crate::error::{Error, Result};
use crate::reference::bounds;

/// How the elements of a packed `[n, c, spatial...]` tensor map to
/// parameters: the parameter count `p`, how many elements share one
/// statistic (`m`), and [`Params::of`].
#[derive(Debug, Clone, Copy)]
struct Params {
    per_activation: bool,
    c: usize,
    s: usize,
    p: usize,
    m: usize,
}

impl Params {
    /// Every product checked, and `p` at most
    /// [`MAX_ELEMENTS`](crate::reference::MAX_ELEMENTS).
    fn new(mode: BatchNormMode, shape: &[usize]) -> Result<Self> {
        let (n, c, s) = ncs(shape)?;
        let per_activation = mode == BatchNormMode::PerActivation;
        let (p, m) = if per_activation {
            (
                bounds::elements("shape", &[c, s], "the parameter count c x spatial")?,
                n,
            )
        } else {
            let m = n.checked_mul(s).ok_or_else(|| {
                Error::invalid(
                    "shape",
                    "the statistic group size n x spatial overflows usize",
                    format!("{shape:?}"),
                )
            })?;
            (c, m)
        };
        Ok(Params {
            per_activation,
            c,
            s,
            p,
            m,
        })
    }

    /// The parameter index of packed element `e`. Only called for an
    /// element that exists, so `c` and `s` are at least 1.
    fn of(&self, e: usize) -> usize {
        if self.per_activation {
            e % self.p
        } else {
            (e / self.s) % self.c
        }
    }
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
/// A shape of rank below 2 or beyond
/// [`MAX_ELEMENTS`](crate::reference::MAX_ELEMENTS) (elements or
/// parameters), a statistic group size that overflows, or `x` not matching
/// the shape.
pub fn batch_norm_stats(
    mode: BatchNormMode,
    x: &[f64],
    shape: &[usize],
    epsilon: f64,
) -> Result<BnStats> {
    let params = Params::new(mode, shape)?;
    check_data("x", x, "shape", shape)?;
    let Params { p, m, .. } = params;
    let mut mean = bounds::zeros("shape", p)?;
    for (e, &v) in x.iter().enumerate() {
        mean[params.of(e)] += v;
    }
    for v in &mut mean {
        *v /= m as f64;
    }
    let mut ss = bounds::zeros("shape", p)?;
    for (e, &v) in x.iter().enumerate() {
        let i = params.of(e);
        ss[i] += (v - mean[i]).powi(2);
    }
    let variance = bounds::collect("shape", ss.iter().map(|s| s / m as f64))?;
    let variance_unbiased = bounds::collect(
        "shape",
        ss.iter()
            .zip(&variance)
            .map(|(s, v)| if m > 1 { s / (m - 1) as f64 } else { *v }),
    )?;
    let inv_std = bounds::collect("shape", variance.iter().map(|v| 1.0 / (v + epsilon).sqrt()))?;
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
    let params = Params::new(mode, shape)?;
    check_data("x", x, "shape", shape)?;
    let p = params.p;
    for (w, v) in [
        ("scale", scale),
        ("bias", bias),
        ("mean", mean),
        ("variance", variance),
    ] {
        check_params(w, p, v)?;
    }
    bounds::collect(
        "shape",
        x.iter().enumerate().map(|(e, &v)| {
            let i = params.of(e);
            scale[i] * (v - mean[i]) / (variance[i] + epsilon).sqrt() + bias[i]
        }),
    )
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
/// Lengths that differ, or longer than
/// [`MAX_ELEMENTS`](crate::reference::MAX_ELEMENTS).
pub fn running_average(running: &[f64], batch: &[f64], factor: f64) -> Result<Vec<f64>> {
    check_same_len("batch (must equal running)", running.len(), batch.len())?;
    bounds::collect(
        "running",
        running
            .iter()
            .zip(batch)
            .map(|(r, b)| (1.0 - factor) * r + factor * b),
    )
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
    check_data("dy", dy, "shape", shape)?;
    let params = Params::new(mode, shape)?;
    let p = params.p;
    check_params("scale", p, scale)?;
    let xhat = bounds::collect(
        "shape",
        x.iter().enumerate().map(|(e, &v)| {
            let i = params.of(e);
            (v - stats.mean[i]) * stats.inv_std[i]
        }),
    )?;
    let (mut dscale, mut dbias) = (bounds::zeros("shape", p)?, bounds::zeros("shape", p)?);
    for (e, (&g, &xh)) in dy.iter().zip(&xhat).enumerate() {
        let i = params.of(e);
        dbias[i] += g;
        dscale[i] += g * xh;
    }
    let m = params.m as f64;
    let dx = bounds::collect(
        "shape",
        dy.iter().zip(&xhat).enumerate().map(|(e, (&g, &xh))| {
            let i = params.of(e);
            scale[i] * stats.inv_std[i] / m * (m * g - dbias[i] - xh * dscale[i])
        }),
    )?;
    Ok(BnGrads { dx, dscale, dbias })
}
