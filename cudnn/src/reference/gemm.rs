//! GEMM, GEMV and the cuBLASLt epilogues in `f64`, over the same
//! [`Layout`]s the GPU calls take.
//!
//! The index arithmetic here is the plain definition — logical element
//! `(i, j)` of batch `p` at [`Layout::offset`] — independent of how the GPU
//! path maps layouts to `transa`/`lda` and operand swaps, so agreement
//! between the two checks that mapping.
//!
//! # Bounds
//! As everywhere in [`crate::reference`]: every row, column and batch count
//! is at most [`MAX_ELEMENTS`](super::MAX_ELEMENTS), so is every buffer
//! allocated (the bias gradients, the pre-activation copy), and a call may
//! do at most [`MAX_WORK`](super::MAX_WORK) steps, counted as
//! `batch x m x n x max(k, 1)` for the product (each output element costs
//! at least one step) plus `batch x m x max(k, 1)` ([`Epilogue::BgradA`]) or
//! `batch x n x max(k, 1)` ([`Epilogue::BgradB`]) for a bias gradient of A
//! or B, and `m x max(n, 1)` for [`gemv`]. A call with nothing to compute
//! (an empty output and no bias gradient) returns at once.
//!
//! ```
//! use cudnn::blas::Layout;
//! use cudnn::reference::gemm::gemm;
//! // [1 2; 3 4] · [5 6; 7 8] = [19 22; 43 50], row-major.
//! let l = Layout::row_major(2, 2);
//! let mut c = [0.0; 4];
//! gemm(1.0, &[1., 2., 3., 4.], &l, &[5., 6., 7., 8.], &l, 0.0, &mut c, &l)?;
//! assert_eq!(c, [19., 22., 43., 50.]);
//! # Ok::<(), cudnn::Error>(())
//! ```

use super::bounds;
use super::gelu::{gelu_tanh, gelu_tanh_grad};
use crate::blas::{BiasUse, Epilogue, Layout};
use crate::error::{Error, Result};

/// ReLU: `max(x, 0)`.
pub fn relu(x: f64) -> f64 {
    if x > 0.0 { x } else { 0.0 }
}

/// The ReLU derivative as cuBLASLt's mask has it: 1 where `x > 0`, else 0.
pub fn relu_grad(x: f64) -> f64 {
    if x > 0.0 { 1.0 } else { 0.0 }
}

/// GELU, tanh approximation (what cuBLASLt computes).
#[deprecated(note = "renamed reference::gelu::gelu_tanh (cuBLASLt's GELU is the tanh form)")]
pub fn gelu(x: f64) -> f64 {
    gelu_tanh(x)
}

/// The derivative of the tanh GELU.
#[deprecated(note = "renamed reference::gelu::gelu_tanh_grad")]
pub fn gelu_grad(x: f64) -> f64 {
    gelu_tanh_grad(x)
}

fn bug(what: &str) -> Error {
    Error::invalid(
        "reference",
        "index out of range (a bug in the reference)",
        what,
    )
}

fn at(v: &[f64], i: Option<usize>, what: &str) -> Result<f64> {
    i.and_then(|i| v.get(i).copied()).ok_or_else(|| bug(what))
}

/// The shapes of C = A·B: `(m, n, k, batch)`, after the same checks the
/// GPU path makes (each layout, the chain (m x k)·(k x n), batch counts, an
/// output batch that does not overlap, buffer lengths).
fn check(
    a: &[f64],
    la: &Layout,
    b: &[f64],
    lb: &Layout,
    c_len: usize,
    lc: &Layout,
) -> Result<(usize, usize, usize, usize)> {
    la.validate("a")?;
    lb.validate("b")?;
    lc.validate_output("c")?;
    let (m, n, k) = (lc.rows(), lc.cols(), la.cols());
    if la.rows() != m {
        return Err(Error::mismatch(
            "a rows (m) must equal c rows",
            m,
            la.rows(),
        ));
    }
    if lb.rows() != k {
        return Err(Error::mismatch(
            "b rows (k) must equal a cols",
            k,
            lb.rows(),
        ));
    }
    if lb.cols() != n {
        return Err(Error::mismatch(
            "b cols (n) must equal c cols",
            n,
            lb.cols(),
        ));
    }
    let batch = lc.batch_count();
    for (name, l) in [("a", la), ("b", lb)] {
        if l.batch_count() != batch {
            return Err(Error::mismatch(
                format!("{name} batch_count must equal c batch_count"),
                batch,
                l.batch_count(),
            ));
        }
    }
    la.check_len("a", a.len())?;
    lb.check_len("b", b.len())?;
    lc.check_len("c", c_len)?;
    bounds::extent("c.rows (m)", m)?;
    bounds::extent("c.cols (n)", n)?;
    bounds::extent("a.cols (k)", k)?;
    bounds::extent("c.batch_count", batch)?;
    Ok((m, n, k, batch))
}

/// The work of the product: `batch x m x n x max(k, 1)`.
fn product_work(m: usize, n: usize, k: usize, batch: usize) -> Result<u64> {
    bounds::work("c", "batch x m x n x max(k, 1)", &[batch, m, n, k.max(1)])
}

fn dot(
    a: &[f64],
    la: &Layout,
    b: &[f64],
    lb: &Layout,
    (p, i, j): (usize, usize, usize),
    k: usize,
) -> Result<f64> {
    let mut s = 0.0;
    for kk in 0..k {
        s += at(a, la.offset(p, i, kk), "a")? * at(b, lb.offset(p, kk, j), "b")?;
    }
    Ok(s)
}

/// `C = alpha·A·B + beta·C` for every matrix of the batch. With
/// `beta == 0`, C is not read (NaN in C does not propagate), as in BLAS.
///
/// # Errors
/// The checks of [`GemmPlan::new`](crate::blas::GemmPlan::new) and short buffers.
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    alpha: f64,
    a: &[f64],
    la: &Layout,
    b: &[f64],
    lb: &Layout,
    beta: f64,
    c: &mut [f64],
    lc: &Layout,
) -> Result<()> {
    let (m, n, k, batch) = check(a, la, b, lb, c.len(), lc)?;
    if product_work(m, n, k, batch)? == 0 {
        return Ok(());
    }
    for p in 0..batch {
        for i in 0..m {
            for j in 0..n {
                let s = dot(a, la, b, lb, (p, i, j), k)?;
                let slot = lc
                    .offset(p, i, j)
                    .and_then(|o| c.get_mut(o))
                    .ok_or_else(|| bug("c"))?;
                *slot = if beta == 0.0 {
                    alpha * s
                } else {
                    alpha * s + beta * *slot
                };
            }
        }
    }
    Ok(())
}

/// `y = alpha·A·x + beta·y` with increments `incx`, `incy` (>= 1). With
/// `beta == 0`, y is not read.
///
/// # Errors
/// An invalid layout, a batched A, a zero increment or short buffers.
#[allow(clippy::too_many_arguments)]
pub fn gemv(
    alpha: f64,
    a: &[f64],
    la: &Layout,
    x: &[f64],
    incx: usize,
    beta: f64,
    y: &mut [f64],
    incy: usize,
) -> Result<()> {
    la.validate("a")?;
    if la.batch_count() != 1 {
        return Err(Error::invalid(
            "a.batch_count",
            "must be 1 for gemv",
            la.batch_count(),
        ));
    }
    for (name, inc) in [("incx", incx), ("incy", incy)] {
        if inc == 0 {
            return Err(Error::invalid(name, "must be >= 1", inc));
        }
    }
    la.check_len("a", a.len())?;
    let (m, n) = (la.rows(), la.cols());
    bounds::extent("a.rows (m)", m)?;
    bounds::extent("a.cols (n)", n)?;
    if bounds::work("a", "m x max(n, 1)", &[m, n.max(1)])? == 0 {
        return Ok(());
    }
    let need = |name: &str, len: usize, inc: usize| -> Result<usize> {
        if len == 0 {
            return Ok(0);
        }
        (len - 1)
            .checked_mul(inc)
            .and_then(|v| v.checked_add(1))
            .ok_or_else(|| Error::invalid(name, "(length - 1) x increment overflows usize", inc))
    };
    let (nx, ny) = (need("incx", n, incx)?, need("incy", m, incy)?);
    if x.len() < nx {
        return Err(Error::mismatch(
            "x buffer length",
            format!(">= {nx}"),
            x.len(),
        ));
    }
    if y.len() < ny {
        return Err(Error::mismatch(
            "y buffer length",
            format!(">= {ny}"),
            y.len(),
        ));
    }
    for i in 0..m {
        let mut s = 0.0;
        for j in 0..n {
            s += at(a, la.offset(0, i, j), "a")? * at(x, Some(j * incx), "x")?;
        }
        let slot = y.get_mut(i * incy).ok_or_else(|| bug("y"))?;
        *slot = if beta == 0.0 {
            alpha * s
        } else {
            alpha * s + beta * *slot
        };
    }
    Ok(())
}

/// What [`matmul`] produces besides D.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EpilogueOutput {
    /// For the `*Aux*` forward epilogues: the activation's input
    /// (`alpha·A·B + beta·C (+ bias)`), laid out like D (same layout, same
    /// buffer length); empty otherwise.
    pub pre_activation: Vec<f64>,
    /// For the gradient epilogues: the bias gradient, `bias_len` per matrix
    /// of the batch; empty otherwise.
    pub bias_grad: Vec<f64>,
}

/// The length of the bias (or one bias gradient) for `epilogue` on D:
/// D's contiguous extent (rows of a column-major D, columns of a row-major
/// one) for bias and `D*Bgrad`; m for [`Epilogue::BgradA`]; n for
/// [`Epilogue::BgradB`]; 0 for the rest.
pub fn bias_len(epilogue: Epilogue, ld: &Layout) -> usize {
    let contiguous = if ld.is_column_contiguous() {
        ld.rows()
    } else {
        ld.cols()
    };
    match (epilogue, epilogue.bias_use()) {
        (Epilogue::BgradA, _) => ld.rows(),
        (Epilogue::BgradB, _) => ld.cols(),
        (_, Some(_)) => contiguous,
        (_, None) => 0,
    }
}

/// `D = epilogue(alpha·A·B + beta·D)`, as cuBLASLt defines its epilogues
/// (see [`Epilogue`]): `bias` is read by the `*Bias` epilogues (one vector
/// shared by the batch, [`bias_len`] long); `pre` is the activation input
/// read by `DRelu*`/`DGelu*`, laid out like D. With `beta == 0`, D is not
/// read. Bias gradients are unscaled sums: of D (after the activation
/// gradient) along its non-contiguous dimension, or of A / B over k.
///
/// # Errors
/// The shape checks of [`gemm`]; a missing or short `bias` / `pre`; a bias
/// gradient or pre-activation copy beyond
/// [`MAX_ELEMENTS`](super::MAX_ELEMENTS); more work than
/// [`MAX_WORK`](super::MAX_WORK).
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    alpha: f64,
    a: &[f64],
    la: &Layout,
    b: &[f64],
    lb: &Layout,
    beta: f64,
    d: &mut [f64],
    ld: &Layout,
    epilogue: Epilogue,
    bias: Option<&[f64]>,
    pre: Option<&[f64]>,
) -> Result<EpilogueOutput> {
    let (m, n, k, batch) = check(a, la, b, lb, d.len(), ld)?;
    let blen = bias_len(epilogue, ld);
    let bias = match epilogue.bias_use() {
        Some(BiasUse::Bias) => {
            let v = bias.ok_or_else(|| {
                Error::invalid("bias", format!("epilogue {epilogue:?} needs it"), "None")
            })?;
            if v.len() < blen {
                return Err(Error::mismatch(
                    "bias length",
                    format!(">= {blen}"),
                    v.len(),
                ));
            }
            Some(v)
        }
        _ => None,
    };
    let backward = matches!(epilogue.aux(), Some((_, false)));
    let pre = if backward {
        let v = pre.ok_or_else(|| {
            Error::invalid("pre", format!("epilogue {epilogue:?} needs it"), "None")
        })?;
        ld.check_len("pre", v.len())?;
        Some(v)
    } else {
        None
    };
    let main = product_work(m, n, k, batch)?;
    let grad = match epilogue {
        Epilogue::BgradA => bounds::work("a", "batch x m x max(k, 1)", &[batch, m, k.max(1)])?,
        Epilogue::BgradB => bounds::work("b", "batch x n x max(k, 1)", &[batch, n, k.max(1)])?,
        _ => 0,
    };
    let total = bounds::total_work("d", "the product's plus the bias gradient's", &[main, grad])?;
    let mut out = EpilogueOutput::default();
    if epilogue.bias_use() == Some(BiasUse::Gradient) {
        let len = bounds::elements(
            "epilogue",
            &[blen, batch],
            format_args!("the bias gradient, bias_len {blen} x batch {batch}"),
        )?;
        out.bias_grad = bounds::zeros("epilogue", len)?;
    }
    if matches!(epilogue.aux(), Some((_, true))) {
        out.pre_activation = bounds::zeros("d", d.len())?;
    }
    if total == 0 {
        return Ok(out);
    }
    let col = ld.is_column_contiguous();
    // Every matrix of the batch does at least one step (of the product when
    // it is not empty, else of the bias gradient), so this loop is bounded
    // by the work.
    for p in 0..batch {
        for i in 0..m {
            for j in 0..n {
                let o = ld.offset(p, i, j).ok_or_else(|| bug("d"))?;
                let old = d.get(o).copied().ok_or_else(|| bug("d"))?;
                let mut x = alpha * dot(a, la, b, lb, (p, i, j), k)?;
                if beta != 0.0 {
                    x += beta * old;
                }
                let f = if col { i } else { j };
                if let Some(v) = bias {
                    x += v.get(f).copied().ok_or_else(|| bug("bias"))?;
                }
                if let Some(slot) = out.pre_activation.get_mut(o) {
                    *slot = x;
                }
                let y = match epilogue {
                    Epilogue::Relu
                    | Epilogue::ReluAux
                    | Epilogue::ReluBias
                    | Epilogue::ReluAuxBias => relu(x),
                    Epilogue::GeluTanh
                    | Epilogue::GeluTanhAux
                    | Epilogue::GeluTanhBias
                    | Epilogue::GeluTanhAuxBias => gelu_tanh(x),
                    Epilogue::DRelu | Epilogue::DReluBgrad => {
                        x * relu_grad(at(pre.unwrap_or(&[]), Some(o), "pre")?)
                    }
                    Epilogue::DGeluTanh | Epilogue::DGeluTanhBgrad => {
                        x * gelu_tanh_grad(at(pre.unwrap_or(&[]), Some(o), "pre")?)
                    }
                    _ => x,
                };
                if let Some(slot) = d.get_mut(o) {
                    *slot = y;
                }
                if matches!(epilogue, Epilogue::DReluBgrad | Epilogue::DGeluTanhBgrad)
                    && let Some(g) = out.bias_grad.get_mut(p * blen + f)
                {
                    *g += y;
                }
            }
        }
        match epilogue {
            Epilogue::BgradA => {
                for i in 0..m {
                    let mut s = 0.0;
                    for kk in 0..k {
                        s += at(a, la.offset(p, i, kk), "a")?;
                    }
                    if let Some(g) = out.bias_grad.get_mut(p * blen + i) {
                        *g = s;
                    }
                }
            }
            Epilogue::BgradB => {
                for j in 0..n {
                    let mut s = 0.0;
                    for kk in 0..k {
                        s += at(b, lb.offset(p, kk, j), "b")?;
                    }
                    if let Some(g) = out.bias_grad.get_mut(p * blen + j) {
                        *g = s;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// The largest error of `got` against `want`, relative to the largest
/// magnitude in `want` (at least 1e-30): `max|got - want| / max|want|`.
/// Infinite when the lengths differ or any value is not finite, so NaN
/// never passes a bound.
pub fn max_relative_error(got: &[f64], want: &[f64]) -> f64 {
    if got.len() != want.len() {
        return f64::INFINITY;
    }
    let mut scale: f64 = 1e-30;
    let mut err: f64 = 0.0;
    for (&g, &w) in got.iter().zip(want) {
        if !g.is_finite() || !w.is_finite() {
            return f64::INFINITY;
        }
        scale = scale.max(w.abs());
        err = err.max((g - w).abs());
    }
    err / scale
}
