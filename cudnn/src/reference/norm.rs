//! Layer norm, RMS norm and batch norm in `f64`, as the graph API's norm
//! operations define them: forward training (the output plus the saved
//! statistics), forward inference, the running-statistics update of batch
//! norm, and backward from the saved statistics. The oracles for the graph
//! norm ops.
//!
//! **Data is logical and packed** (row-major over `dims`), as in
//! [`super::ops`]; [`gather`](super::ops::gather) and
//! [`scatter`](super::ops::scatter) convert from and to strided memory.
//!
//! # Which elements are normalized together
//! - **Layer norm and RMS norm**: `dims = [n, rest...]`; each of the `n`
//!   rows (all elements with the same first index) is one group of
//!   `D = product(rest)` elements. `scale` and `bias` have the shape of the
//!   normalized dims (`[1, rest...]`, `D` values, packed), one per position
//!   inside a row; the statistics have one value per row (`[n, 1, ...]`).
//! - **Batch norm**: `dims = [n, c, spatial...]`; each channel is one group
//!   of `m = n * product(spatial)` elements. `scale`, `bias` and the
//!   statistics have one value per channel (`[1, c, 1, ...]`).
//!
//! # Formulas
//! For a group `G` of `m` elements, with `epsilon >= 0`:
//! - `mean = sum(x) / m`
//! - `variance = sum((x - mean)^2) / m` (population variance, divided by
//!   `m`, never `m - 1`)
//! - `inv_variance = 1 / sqrt(variance + epsilon)` (epsilon inside the
//!   square root; the graph API's "inverse variance" is this inverse
//!   standard deviation)
//! - layer and batch norm: `xhat = (x - mean) * inv_variance`,
//!   `y = scale * xhat + bias`
//! - RMS norm: `inv_rms = 1 / sqrt(sum(x^2) / m + epsilon)`,
//!   `xhat = x * inv_rms`, `y = scale * xhat (+ bias when one is given)`
//!
//! Backward, from the saved statistics, with `g = dy * scale` and
//! `avg(.)` the mean over the group:
//! - layer and batch norm: `dx = inv_variance * (g - avg(g) - xhat * avg(g * xhat))`
//! - RMS norm: `dx = inv_rms * (g - xhat * avg(g * xhat))`
//! - `dscale = sum(dy * xhat)` and `dbias = sum(dy)`, summed over every
//!   element that uses that parameter (over the rows for layer / RMS norm,
//!   over the group for batch norm).
//!
//! Batch norm's running statistics, with `momentum` in `[0, 1]` weighting
//! the new batch: `running_mean' = (1 - momentum) * running_mean + momentum * mean`,
//! `running_variance' = (1 - momentum) * running_variance + momentum * variance * m / (m - 1)`
//! (the unbiased variance; the population one when `m = 1`).
//!
//! A group whose variance is 0 with `epsilon = 0` divides by zero (inf or
//! NaN in the output), exactly as the formula does.
//!
//! # Bounds
//! Every dimension must be at least 1, sizes are computed with checked
//! arithmetic, outputs are allocated with `try_reserve` (at most
//! [`MAX_ELEMENTS`](super::MAX_ELEMENTS) each), and inputs whose work
//! (counted as [`WORK_PER_ELEMENT`] multiply-adds per element) exceeds
//! [`MAX_WORK`] are rejected with [`Error::InvalidArgument`] before
//! anything is allocated.
//!
//! ```
//! use cudnn::reference::norm;
//! // One row [1, 3]: mean 2, variance 1; epsilon 3 gives inv_variance
//! // 1 / sqrt(1 + 3) = 0.5, xhat = [-0.5, 0.5].
//! let t = norm::layer_norm_training(&[1.0, 3.0], &[1, 2], &[2.0, 2.0], &[1.0, 0.0], 3.0)?;
//! assert_eq!(t.mean, [2.0]);
//! assert_eq!(t.inv_variance, [0.5]);
//! assert_eq!(t.y, [0.0, 1.0]);
//! # Ok::<(), cudnn::Error>(())
//! ```

use super::bounds;
use crate::error::{Error, Result};

/// The most work (multiply-adds) one call accepts: 2^32, the
/// [`reference`](super::MAX_WORK) bound.
pub const MAX_WORK: u64 = super::MAX_WORK;

/// The work a norm is counted as doing per element (a few passes over the
/// data), for [`MAX_WORK`].
pub const WORK_PER_ELEMENT: u64 = 8;

/// The result of [`layer_norm_training`].
#[derive(Debug, Clone, PartialEq)]
pub struct LayerNormTraining {
    /// The output, packed like `x`.
    pub y: Vec<f64>,
    /// The saved mean, one per row.
    pub mean: Vec<f64>,
    /// The saved `1 / sqrt(variance + epsilon)`, one per row.
    pub inv_variance: Vec<f64>,
}

/// The result of [`rms_norm_training`].
#[derive(Debug, Clone, PartialEq)]
pub struct RmsNormTraining {
    /// The output, packed like `x`.
    pub y: Vec<f64>,
    /// The saved `1 / sqrt(mean(x^2) + epsilon)`, one per row.
    pub inv_rms: Vec<f64>,
}

/// Batch norm's running statistics, one value per channel.
#[derive(Debug, Clone, PartialEq)]
pub struct RunningStats {
    /// The running mean.
    pub mean: Vec<f64>,
    /// The running (unbiased) variance.
    pub variance: Vec<f64>,
}

/// The running statistics a batch-norm training step reads, and its
/// momentum (the weight of the new batch, in `[0, 1]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunningUpdate<'a> {
    /// The previous running mean, one per channel.
    pub mean: &'a [f64],
    /// The previous running variance, one per channel.
    pub variance: &'a [f64],
    /// The weight of the batch statistics in the update.
    pub momentum: f64,
}

/// The result of [`batch_norm_training`].
#[derive(Debug, Clone, PartialEq)]
pub struct BatchNormTraining {
    /// The output, packed like `x`.
    pub y: Vec<f64>,
    /// The saved batch mean, one per channel.
    pub mean: Vec<f64>,
    /// The saved `1 / sqrt(variance + epsilon)`, one per channel.
    pub inv_variance: Vec<f64>,
    /// The updated running statistics, when a [`RunningUpdate`] was given.
    pub running: Option<RunningStats>,
}

/// The gradients of layer norm and batch norm.
#[derive(Debug, Clone, PartialEq)]
pub struct NormGrads {
    /// `dL/dx`, packed like `x`.
    pub dx: Vec<f64>,
    /// `dL/dscale`, shaped like `scale`.
    pub dscale: Vec<f64>,
    /// `dL/dbias`, shaped like `bias`.
    pub dbias: Vec<f64>,
}

/// The gradients of RMS norm.
#[derive(Debug, Clone, PartialEq)]
pub struct RmsNormGrads {
    /// `dL/dx`, packed like `x`.
    pub dx: Vec<f64>,
    /// `dL/dscale`, shaped like `scale`.
    pub dscale: Vec<f64>,
    /// `dL/dbias`, when the forward used a bias.
    pub dbias: Option<Vec<f64>>,
}

/// How elements map to statistic groups and parameters.
#[derive(Debug, Clone, Copy)]
enum Axes {
    /// Layer / RMS norm: `n` rows of `d` elements; group = row, parameter
    /// = position in the row.
    Rows { n: usize, d: usize },
    /// Batch norm: `[n, c, s]`; group = parameter = channel.
    Channels { n: usize, c: usize, s: usize },
}

impl Axes {
    fn groups(self) -> usize {
        match self {
            Axes::Rows { n, .. } => n,
            Axes::Channels { c, .. } => c,
        }
    }

    fn params(self) -> usize {
        match self {
            Axes::Rows { d, .. } => d,
            Axes::Channels { c, .. } => c,
        }
    }

    /// Elements per group (at least 1: every dimension is).
    fn group_size(self) -> usize {
        match self {
            Axes::Rows { d, .. } => d,
            Axes::Channels { n, s, .. } => n * s,
        }
    }

    /// `(group, parameter)` of packed element `e`.
    fn of(self, e: usize) -> (usize, usize) {
        match self {
            Axes::Rows { d, .. } => (e / d, e % d),
            Axes::Channels { c, s, .. } => {
                let k = (e / s) % c;
                (k, k)
            }
        }
    }
}

use bounds::zeros;

/// Check `dims` (rank >= 2, every dimension >= 1), the work bound and `x`;
/// returns the element count.
fn check_dims(dims: &[usize], x_len: usize) -> Result<usize> {
    if dims.len() < 2 {
        return Err(Error::invalid(
            "dims",
            "must have at least 2 dimensions",
            format!("{dims:?}"),
        ));
    }
    if let Some(i) = dims.iter().position(|&d| d == 0) {
        return Err(Error::invalid(
            format!("dims[{i}]"),
            "must be >= 1",
            format!("{dims:?}"),
        ));
    }
    let count = dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| {
            Error::invalid("dims", "the element count overflows", format!("{dims:?}"))
        })?;
    u64::try_from(count)
        .ok()
        .and_then(|c| c.checked_mul(WORK_PER_ELEMENT))
        .filter(|&w| w <= MAX_WORK)
        .ok_or_else(|| {
            Error::invalid(
                "dims",
                format!(
                    "the work ({WORK_PER_ELEMENT} x the element count) must be at most \
                     {MAX_WORK} (reference::MAX_WORK)"
                ),
                format!("{dims:?} ({count} elements)"),
            )
        })?;
    if x_len != count {
        return Err(Error::mismatch(
            format!("x length (the element count of dims {dims:?})"),
            count,
            x_len,
        ));
    }
    Ok(count)
}

fn check_len(what: &str, expected: usize, got: usize) -> Result<()> {
    if expected != got {
        return Err(Error::mismatch(format!("{what} length"), expected, got));
    }
    Ok(())
}

fn check_epsilon(epsilon: f64) -> Result<()> {
    if !(epsilon.is_finite() && epsilon >= 0.0) {
        return Err(Error::invalid(
            "epsilon",
            "must be finite and >= 0",
            epsilon,
        ));
    }
    Ok(())
}

fn rows(dims: &[usize], x_len: usize) -> Result<Axes> {
    let count = check_dims(dims, x_len)?;
    let n = dims[0];
    Ok(Axes::Rows { n, d: count / n })
}

fn channels(dims: &[usize], x_len: usize) -> Result<Axes> {
    let count = check_dims(dims, x_len)?;
    let (n, c) = (dims[0], dims[1]);
    Ok(Axes::Channels {
        n,
        c,
        s: count / (n * c),
    })
}

/// Per group: the mean (0 when not `center`) and the mean of squared
/// deviations from it (the population variance, or the mean square).
fn moments(axes: Axes, x: &[f64], center: bool) -> Result<(Vec<f64>, Vec<f64>)> {
    let g = axes.groups();
    let m = axes.group_size() as f64;
    let mut mean = zeros("mean", g)?;
    if center {
        for (e, &v) in x.iter().enumerate() {
            mean[axes.of(e).0] += v;
        }
        for v in &mut mean {
            *v /= m;
        }
    }
    let mut second = zeros("variance", g)?;
    for (e, &v) in x.iter().enumerate() {
        let k = axes.of(e).0;
        second[k] += (v - mean[k]).powi(2);
    }
    for v in &mut second {
        *v /= m;
    }
    Ok((mean, second))
}

/// `y = scale * (x - mean) * inv + bias` over `axes`.
fn apply(
    axes: Axes,
    x: &[f64],
    scale: &[f64],
    bias: Option<&[f64]>,
    mean: &[f64],
    inv: &[f64],
) -> Result<Vec<f64>> {
    let mut y = zeros("y", x.len())?;
    for (e, (out, &v)) in y.iter_mut().zip(x).enumerate() {
        let (k, p) = axes.of(e);
        let b = bias.map_or(0.0, |b| b[p]);
        *out = scale[p] * ((v - mean[k]) * inv[k]) + b;
    }
    Ok(y)
}

fn inverse_sqrt(second: &[f64], epsilon: f64) -> Result<Vec<f64>> {
    bounds::collect(
        "variance",
        second.iter().map(|v| 1.0 / (v + epsilon).sqrt()),
    )
}

fn check_params(axes: Axes, scale: &[f64], bias: Option<&[f64]>) -> Result<()> {
    let p = axes.params();
    check_len("scale (the parameter count)", p, scale.len())?;
    if let Some(b) = bias {
        check_len("bias (the parameter count)", p, b.len())?;
    }
    Ok(())
}

/// Forward: `(y, mean, inv)` with `mean` all 0 when not `center`.
fn forward(
    axes: Axes,
    x: &[f64],
    scale: &[f64],
    bias: Option<&[f64]>,
    center: bool,
    epsilon: f64,
) -> Result<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    check_params(axes, scale, bias)?;
    check_epsilon(epsilon)?;
    let (mean, second) = moments(axes, x, center)?;
    let inv = inverse_sqrt(&second, epsilon)?;
    let y = apply(axes, x, scale, bias, &mean, &inv)?;
    Ok((y, mean, inv))
}

/// Backward from saved statistics (`mean` is `None` for RMS norm).
fn backward(
    axes: Axes,
    x: &[f64],
    dy: &[f64],
    scale: &[f64],
    mean: Option<&[f64]>,
    inv: &[f64],
) -> Result<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    check_len("dy (must equal x)", x.len(), dy.len())?;
    check_params(axes, scale, None)?;
    let g = axes.groups();
    if let Some(mean) = mean {
        check_len("mean (one per group)", g, mean.len())?;
    }
    check_len("inverse statistic (one per group)", g, inv.len())?;
    let p = axes.params();
    let m = axes.group_size() as f64;
    let xhat = |e: usize, v: f64| {
        let k = axes.of(e).0;
        (v - mean.map_or(0.0, |mu| mu[k])) * inv[k]
    };
    let (mut dscale, mut dbias) = (zeros("dscale", p)?, zeros("dbias", p)?);
    let (mut avg_g, mut avg_gx) = (zeros("dx", g)?, zeros("dx", g)?);
    for (e, (&v, &d)) in x.iter().zip(dy).enumerate() {
        let (k, q) = axes.of(e);
        let xh = xhat(e, v);
        dbias[q] += d;
        dscale[q] += d * xh;
        let gv = d * scale[q];
        avg_g[k] += gv;
        avg_gx[k] += gv * xh;
    }
    for v in avg_g.iter_mut().chain(avg_gx.iter_mut()) {
        *v /= m;
    }
    let mut dx = zeros("dx", x.len())?;
    for (e, (out, (&v, &d))) in dx.iter_mut().zip(x.iter().zip(dy)).enumerate() {
        let (k, q) = axes.of(e);
        let centre = if mean.is_some() { avg_g[k] } else { 0.0 };
        *out = inv[k] * (d * scale[q] - centre - xhat(e, v) * avg_gx[k]);
    }
    Ok((dx, dscale, dbias))
}

/// `1 / sqrt(variance + epsilon)` for each value: the `inv_variance` the
/// inference ops take, from a (running) variance.
///
/// # Errors
/// An epsilon that is negative or not finite, or more than
/// [`MAX_ELEMENTS`](super::MAX_ELEMENTS) values.
pub fn inv_std(variance: &[f64], epsilon: f64) -> Result<Vec<f64>> {
    check_epsilon(epsilon)?;
    inverse_sqrt(variance, epsilon)
}

/// Layer norm, training forward: `y` and the per-row statistics.
///
/// # Errors
/// `dims` of rank below 2 or with a 0, more work than [`MAX_WORK`], `x`
/// not holding `product(dims)` values, `scale` / `bias` not holding
/// `product(dims[1..])`, or a negative or non-finite `epsilon`.
#[doc(alias = "layernorm")]
pub fn layer_norm_training(
    x: &[f64],
    dims: &[usize],
    scale: &[f64],
    bias: &[f64],
    epsilon: f64,
) -> Result<LayerNormTraining> {
    let axes = rows(dims, x.len())?;
    let (y, mean, inv_variance) = forward(axes, x, scale, Some(bias), true, epsilon)?;
    Ok(LayerNormTraining {
        y,
        mean,
        inv_variance,
    })
}

/// Layer norm, inference forward: `y` only (the statistics are computed
/// from `x` as in training, not read).
///
/// # Errors
/// As [`layer_norm_training`].
pub fn layer_norm_inference(
    x: &[f64],
    dims: &[usize],
    scale: &[f64],
    bias: &[f64],
    epsilon: f64,
) -> Result<Vec<f64>> {
    Ok(layer_norm_training(x, dims, scale, bias, epsilon)?.y)
}

/// Layer norm, backward from the saved `mean` and `inv_variance` (one per
/// row, as [`layer_norm_training`] returns them).
///
/// # Errors
/// As [`layer_norm_training`], `dy` not matching `x`, or statistics not
/// holding one value per row.
pub fn layer_norm_backward(
    x: &[f64],
    dims: &[usize],
    dy: &[f64],
    scale: &[f64],
    mean: &[f64],
    inv_variance: &[f64],
) -> Result<NormGrads> {
    let axes = rows(dims, x.len())?;
    let (dx, dscale, dbias) = backward(axes, x, dy, scale, Some(mean), inv_variance)?;
    Ok(NormGrads { dx, dscale, dbias })
}

/// RMS norm, training forward: `y` and the per-row `inv_rms`. The bias is
/// optional (the graph op takes one or not).
///
/// # Errors
/// As [`layer_norm_training`].
#[doc(alias = "rmsnorm")]
pub fn rms_norm_training(
    x: &[f64],
    dims: &[usize],
    scale: &[f64],
    bias: Option<&[f64]>,
    epsilon: f64,
) -> Result<RmsNormTraining> {
    let axes = rows(dims, x.len())?;
    let (y, _, inv_rms) = forward(axes, x, scale, bias, false, epsilon)?;
    Ok(RmsNormTraining { y, inv_rms })
}

/// RMS norm, inference forward: `y` only.
///
/// # Errors
/// As [`layer_norm_training`].
pub fn rms_norm_inference(
    x: &[f64],
    dims: &[usize],
    scale: &[f64],
    bias: Option<&[f64]>,
    epsilon: f64,
) -> Result<Vec<f64>> {
    Ok(rms_norm_training(x, dims, scale, bias, epsilon)?.y)
}

/// RMS norm, backward from the saved `inv_rms` (one per row). `dbias` is
/// computed when `with_bias` (the forward used a bias).
///
/// # Errors
/// As [`layer_norm_backward`].
pub fn rms_norm_backward(
    x: &[f64],
    dims: &[usize],
    dy: &[f64],
    scale: &[f64],
    inv_rms: &[f64],
    with_bias: bool,
) -> Result<RmsNormGrads> {
    let axes = rows(dims, x.len())?;
    let (dx, dscale, dbias) = backward(axes, x, dy, scale, None, inv_rms)?;
    Ok(RmsNormGrads {
        dx,
        dscale,
        dbias: with_bias.then_some(dbias),
    })
}

/// Batch norm, training forward: `y`, the saved per-channel statistics,
/// and, when `running` is given, the updated running statistics (see the
/// module docs for the update).
///
/// # Errors
/// `dims` of rank below 2 or with a 0, more work than [`MAX_WORK`], `x`
/// not holding `product(dims)` values, `scale`, `bias` or the running
/// statistics not holding `dims[1]` values, a negative or non-finite
/// `epsilon`, or a momentum outside `[0, 1]`.
#[doc(alias = "batchnorm")]
pub fn batch_norm_training(
    x: &[f64],
    dims: &[usize],
    scale: &[f64],
    bias: &[f64],
    epsilon: f64,
    running: Option<RunningUpdate<'_>>,
) -> Result<BatchNormTraining> {
    let axes = channels(dims, x.len())?;
    if let Some(r) = running {
        let c = axes.params();
        check_len("running mean (the channel count)", c, r.mean.len())?;
        check_len("running variance (the channel count)", c, r.variance.len())?;
        if !(0.0..=1.0).contains(&r.momentum) {
            return Err(Error::invalid("momentum", "must be in [0, 1]", r.momentum));
        }
    }
    check_params(axes, scale, Some(bias))?;
    check_epsilon(epsilon)?;
    let (mean, variance) = moments(axes, x, true)?;
    let inv_variance = inverse_sqrt(&variance, epsilon)?;
    let y = apply(axes, x, scale, Some(bias), &mean, &inv_variance)?;
    let running = running.map(|r| -> Result<RunningStats> {
        let m = axes.group_size();
        let unbias = if m > 1 {
            m as f64 / (m - 1) as f64
        } else {
            1.0
        };
        let mix = |old: &[f64], new: &[f64], factor: f64| {
            bounds::collect(
                "running",
                old.iter()
                    .zip(new)
                    .map(|(o, n)| (1.0 - r.momentum) * o + r.momentum * n * factor),
            )
        };
        Ok(RunningStats {
            mean: mix(r.mean, &mean, 1.0)?,
            variance: mix(r.variance, &variance, unbias)?,
        })
    });
    let running = running.transpose()?;
    Ok(BatchNormTraining {
        y,
        mean,
        inv_variance,
        running,
    })
}

/// Batch norm, inference forward from given per-channel `mean` and
/// `inv_variance` (the graph op's inputs; [`inv_std`] turns a running
/// variance into the latter): `y = scale * (x - mean) * inv_variance + bias`.
///
/// # Errors
/// As [`batch_norm_training`], or statistics not holding `dims[1]` values.
pub fn batch_norm_inference(
    x: &[f64],
    dims: &[usize],
    scale: &[f64],
    bias: &[f64],
    mean: &[f64],
    inv_variance: &[f64],
) -> Result<Vec<f64>> {
    let axes = channels(dims, x.len())?;
    check_params(axes, scale, Some(bias))?;
    let c = axes.params();
    check_len("mean (the channel count)", c, mean.len())?;
    check_len("inv_variance (the channel count)", c, inv_variance.len())?;
    apply(axes, x, scale, Some(bias), mean, inv_variance)
}

/// Batch norm, backward from the saved per-channel `mean` and
/// `inv_variance` (as [`batch_norm_training`] returns them).
///
/// # Errors
/// As [`batch_norm_inference`], or `dy` not matching `x`.
pub fn batch_norm_backward(
    x: &[f64],
    dims: &[usize],
    dy: &[f64],
    scale: &[f64],
    mean: &[f64],
    inv_variance: &[f64],
) -> Result<NormGrads> {
    let axes = channels(dims, x.len())?;
    let (dx, dscale, dbias) = backward(axes, x, dy, scale, Some(mean), inv_variance)?;
    Ok(NormGrads { dx, dscale, dbias })
}
