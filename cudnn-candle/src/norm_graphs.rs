//! The norms' checks and graphs, pure functions of shapes and dtypes (no
//! device): candle-nn's `layer_norm` / `rms_norm` conventions (normalize
//! over the last dim; weight and bias `(hidden)`; `eps`) mapped onto the
//! crate's norm nodes, with x seen as `[rows, hidden, 1, 1]` (candle's
//! contiguous memory as it is), every refusal a typed [`cudnn::Error`].

use candle_core::DType as CDType;
use cudnn::graph::{DType, Graph, NormPhase, TensorSpec};
use cudnn::{Error, Result};

use crate::conv_graphs::check_contiguous;
use crate::params::Arg;

/// Names of the norm graphs' tensors.
pub mod names {
    /// The input `[rows, hidden, 1, 1]`.
    pub const X: &str = "x";
    /// The weight (cuDNN's scale), f32 `[1, hidden, 1, 1]`.
    pub const SCALE: &str = "scale";
    /// The bias, f32 `[1, hidden, 1, 1]`.
    pub const BIAS: &str = "bias";
    /// The output.
    pub const Y: &str = "y";
    /// The saved mean (layer norm, training), f32 `[rows, 1, 1, 1]`.
    pub const MEAN: &str = "mean";
    /// The saved inverse std / RMS (training), f32 `[rows, 1, 1, 1]`.
    pub const INV_VARIANCE: &str = "inv_variance";
    /// The output gradient.
    pub const DY: &str = "dy";
    /// The input gradient (x's type: cuDNN's engines refuse f32 for half x).
    pub const DX: &str = "dx";
    /// The weight gradient (f32).
    pub const DSCALE: &str = "dscale";
    /// The bias gradient (f32).
    pub const DBIAS: &str = "dbias";
}

/// Which norm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NormKind {
    /// `(x - mean) / sqrt(var + eps) * w + b` (candle-nn's `layer_norm`).
    Layer,
    /// `x / sqrt(mean(x²) + eps) * w (+ b)` (candle-nn's `rms_norm`).
    Rms,
}

/// A checked norm call.
#[derive(Clone, Debug, PartialEq)]
pub struct NormCfg {
    /// Which norm.
    pub kind: NormKind,
    /// x's (and y's) element type.
    pub dtype: DType,
    /// The product of every dim but the last.
    pub rows: i64,
    /// The last dim.
    pub hidden: i64,
    /// Added to the variance / mean square, in (0, 1].
    pub eps: f64,
    /// A bias is added (always for layer norm).
    pub bias: bool,
}

impl NormCfg {
    /// x's dims in the graph.
    pub fn x_dims(&self) -> [i64; 4] {
        [self.rows, self.hidden, 1, 1]
    }
    /// The parameters' dims.
    pub fn param_dims(&self) -> [i64; 4] {
        [1, self.hidden, 1, 1]
    }
    /// The statistics' dims.
    pub fn stats_dims(&self) -> [i64; 4] {
        [self.rows, 1, 1, 1]
    }
}

fn norm_dtype(arg: &str, dt: CDType) -> Result<DType> {
    match dt {
        CDType::F32 => Ok(DType::F32),
        CDType::F16 => Ok(DType::F16),
        CDType::BF16 => Ok(DType::BF16),
        other => Err(Error::invalid(
            format!("{arg} dtype"),
            "must be f32, f16 or bf16 (cuDNN's norm graphs)",
            format!("{other:?}"),
        )),
    }
}

/// Check a norm call: x `(..., hidden)` of rank >= 1, contiguous; weight
/// (and bias) `(hidden)`, contiguous, of a float dtype; eps in (0, 1]
/// (cuDNN's range).
///
/// # Errors
/// A rank, dim, dtype, stride or eps that does not fit, naming the
/// argument and its value.
pub fn check(
    kind: NormKind,
    x: &Arg<'_>,
    w: &Arg<'_>,
    b: Option<&Arg<'_>>,
    eps: f64,
) -> Result<NormCfg> {
    let dtype = norm_dtype(x.name, x.dtype)?;
    let Some((&hidden, lead)) = x.dims.split_last() else {
        return Err(Error::invalid(
            format!("{} dims", x.name),
            "must have at least 1 dim (normalized over the last)",
            "[]",
        ));
    };
    if let Some((i, _)) = x.dims.iter().enumerate().find(|(_, d)| **d == 0) {
        return Err(Error::invalid(
            format!("{}[{i}]", x.name),
            format!("must be >= 1 ({} {:?})", x.name, x.dims),
            0,
        ));
    }
    check_contiguous(x)?;
    let rows = lead
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .and_then(|r| i64::try_from(r).ok())
        .ok_or_else(|| {
            Error::invalid(
                format!("{} dims", x.name),
                "the product of every dim but the last must fit i64",
                format!("{:?}", x.dims),
            )
        })?;
    let hidden_i = i64::try_from(hidden)
        .map_err(|_| Error::invalid(format!("{} hidden dim", x.name), "must fit i64", hidden))?;
    for p in std::iter::once(w).chain(b) {
        norm_dtype(p.name, p.dtype)?;
        if p.dims != [hidden] {
            return Err(Error::mismatch(
                format!("{} dims (x's last dim)", p.name),
                format!("[{hidden}]"),
                format!("{:?}", p.dims),
            ));
        }
        check_contiguous(p)?;
    }
    if !(eps > 0.0 && eps <= 1.0) {
        return Err(Error::invalid(
            "eps",
            "must be in (0, 1] (cuDNN's range)",
            eps,
        ));
    }
    // The element count must be allocatable (f32 gradients: 4 bytes).
    rows.checked_mul(hidden_i)
        .and_then(|n| n.checked_mul(4))
        .filter(|&n| n <= isize::MAX as i64)
        .ok_or_else(|| {
            Error::invalid(
                format!("{} dims", x.name),
                "element count times 4 bytes must fit isize",
                format!("{:?}", x.dims),
            )
        })?;
    Ok(NormCfg {
        kind,
        dtype,
        rows,
        hidden: hidden_i,
        eps,
        bias: kind == NormKind::Layer || b.is_some(),
    })
}

fn rm(dtype: DType, d: [i64; 4]) -> Result<TensorSpec> {
    TensorSpec::row_major(dtype, &d)
}

/// The forward graph: `x`, `scale` (and `bias`) in, `y` out; in training
/// also `inv_variance` (and, for layer norm, `mean`), f32.
///
/// # Errors
/// The builder's.
pub fn forward(c: &NormCfg, training: bool) -> Result<Graph> {
    let mut g = Graph::new();
    let x = g.input(names::X, rm(c.dtype, c.x_dims())?)?;
    let s = g.input(names::SCALE, rm(DType::F32, c.param_dims())?)?;
    let b = if c.bias {
        Some(g.input(names::BIAS, rm(DType::F32, c.param_dims())?)?)
    } else {
        None
    };
    let phase = if training {
        NormPhase::Training
    } else {
        NormPhase::Inference
    };
    let n = match (c.kind, b) {
        (NormKind::Layer, Some(b)) => g.layer_norm(x, s, b, c.eps, phase)?,
        (NormKind::Layer, None) => {
            return Err(Error::invalid("layer norm bias", "must be given", "none"));
        }
        (NormKind::Rms, b) => g.rms_norm(x, s, b, c.eps, phase)?,
    };
    g.output(n.y, c.dtype)?;
    g.rename(n.y, names::Y)?;
    if let Some(m) = n.mean {
        g.rename(m, names::MEAN)?;
    }
    if let Some(v) = n.inv_variance {
        g.rename(v, names::INV_VARIANCE)?;
    }
    Ok(g)
}

/// The backward graph: `dy`, `x`, `scale`, the saved statistics in;
/// `dx` (x's type), `dscale` (and `dbias`, f32) out.
///
/// # Errors
/// The builder's.
pub fn backward(c: &NormCfg) -> Result<Graph> {
    let mut g = Graph::new();
    let dy = g.input(names::DY, rm(c.dtype, c.x_dims())?)?;
    let x = g.input(names::X, rm(c.dtype, c.x_dims())?)?;
    let s = g.input(names::SCALE, rm(DType::F32, c.param_dims())?)?;
    let inv = g.input(names::INV_VARIANCE, rm(DType::F32, c.stats_dims())?)?;
    let grads = match c.kind {
        NormKind::Layer => {
            let m = g.input(names::MEAN, rm(DType::F32, c.stats_dims())?)?;
            g.layer_norm_backward(dy, x, s, m, inv)?
        }
        NormKind::Rms => g.rms_norm_backward(dy, x, s, inv, c.bias)?,
    };
    g.output(grads.dx, c.dtype)?;
    g.rename(grads.dx, names::DX)?;
    g.rename(grads.dscale, names::DSCALE)?;
    if let Some(db) = grads.dbias {
        g.rename(db, names::DBIAS)?;
    }
    Ok(g)
}

#[cfg(test)]
mod tests;
