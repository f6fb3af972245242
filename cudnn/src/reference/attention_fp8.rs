//! FP8 attention forward and backward (per-tensor scaling) in `f64`, applying the scales
//! where cuDNN's FP8 attention applies them (the graph of
//! [`Graph::sdpa_fp8_forward`](crate::graph::Graph::sdpa_fp8_forward)):
//!
//! ```text
//! S      = (Q·Kᵀ) · attn_scale · descale_q · descale_k      (causal: -inf above the diagonal)
//! P      = softmax_row(S),  stats = max_row(S) + ln(sum_row(exp(S - max)))
//! amax_s = max |P|
//! P8     = round_fp8(P · scale_s)                             (P stored in Q's FP8 type)
//! O'     = (P8·V) · descale_s · descale_v
//! amax_o = max |O'|
//! O      = round_out(O' · scale_o)
//! ```
//!
//! Q, K and V are rounded to their FP8 format first (the values the tensor
//! cores read); everything else is exact in `f64` but for the two
//! roundings cuDNN makes: P to FP8 and O to its type. [`tolerance`] derives
//! the bound a GPU result must meet from the formats. Sizes and work are
//! bounded as the module docs of [`reference`](super#bounds) say (work:
//! `2·B·H·S_q·S_kv·D` multiply-adds plus `B·H·S_q·(S_kv + D + 1)` for the
//! softmax and the rows).
//!
//! ```
//! use cudnn::Fp8Format;
//! use cudnn::reference::attention_fp8::{Fp8AttnScales, Fp8AttnShape, forward};
//! use cudnn::reference::gemm_fp8::OutputType;
//! // One query, two keys with equal scores: P = [0.5, 0.5], O = mean(V).
//! let shape = Fp8AttnShape { batch: 1, heads: 1, seq_q: 1, seq_kv: 2, head_dim: 1 };
//! let r = forward(
//!     &[1.0], &[1.0, 1.0], &[2.0, 4.0], shape, 1.0, false,
//!     Fp8Format::E4M3, OutputType::F32, &Fp8AttnScales::default(),
//! )?;
//! assert_eq!((r.o[0], r.amax_s, r.amax_o), (3.0, 0.5, 3.0));
//! # Ok::<(), cudnn::Error>(())
//! ```

use super::bounds;
use super::gemm_fp8::OutputType;
use crate::dtype::Fp8Format;
use crate::error::{Error, Result};

/// `[B, H, S_q, S_kv, D]` of an FP8 attention (Q `[B, H, S_q, D]`, K and V
/// `[B, H, S_kv, D]`, all packed BHSD).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fp8AttnShape {
    /// Batch.
    pub batch: usize,
    /// Heads.
    pub heads: usize,
    /// Query length.
    pub seq_q: usize,
    /// Key / value length.
    pub seq_kv: usize,
    /// Head dim.
    pub head_dim: usize,
}

/// The per-tensor scales (1 when not set).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fp8AttnScales {
    /// Q's descale.
    pub descale_q: f64,
    /// K's descale.
    pub descale_k: f64,
    /// V's descale.
    pub descale_v: f64,
    /// P's descale.
    pub descale_s: f64,
    /// P's scale before its FP8 rounding.
    pub scale_s: f64,
    /// O's scale before its rounding.
    pub scale_o: f64,
}

impl Default for Fp8AttnScales {
    fn default() -> Self {
        Self {
            descale_q: 1.0,
            descale_k: 1.0,
            descale_v: 1.0,
            descale_s: 1.0,
            scale_s: 1.0,
            scale_o: 1.0,
        }
    }
}

/// What [`forward`] computes.
#[derive(Debug, Clone, PartialEq)]
pub struct Fp8AttnForward {
    /// O `[B, H, S_q, D]`, rounded to its type.
    pub o: Vec<f64>,
    /// The softmax statistics `[B, H, S_q]`.
    pub stats: Vec<f64>,
    /// `max |P|` before `scale_s`.
    pub amax_s: f64,
    /// `max |O'|` before `scale_o`.
    pub amax_o: f64,
}

/// The FP8 attention forward (see the module docs).
///
/// # Errors
/// `seq_kv` or `head_dim` of 0, a buffer length not the shape's, a size or
/// the work over the reference bounds, a non-finite scale or `attn_scale`.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    shape: Fp8AttnShape,
    attn_scale: f64,
    causal: bool,
    format: Fp8Format,
    out: OutputType,
    scales: &Fp8AttnScales,
) -> Result<Fp8AttnForward> {
    let Fp8AttnShape {
        batch: b,
        heads: h,
        seq_q: sq,
        seq_kv: skv,
        head_dim: d,
    } = shape;
    // A softmax over no keys is undefined; D = 0 is no attention either.
    for (name, x) in [("seq_kv", skv), ("head_dim", d)] {
        if x == 0 {
            return Err(Error::invalid(
                format!("attention_fp8::forward: shape.{name}"),
                "must be >= 1",
                x,
            ));
        }
    }
    let nq = bounds::count("q", &[b, h, sq, d])?;
    let nkv = bounds::count("k", &[b, h, skv, d])?;
    bounds::count("scores", &[b, h, sq, skv])?;
    let nst = bounds::count("stats", &[b, h, sq])?;
    for (name, buf, n) in [("q", q, nq), ("k", k, nkv), ("v", v, nkv)] {
        if buf.len() != n {
            return Err(Error::mismatch(
                format!("attention_fp8::forward: {name} length (B·H·S·D)"),
                n,
                buf.len(),
            ));
        }
    }
    for (name, s) in [
        ("attn_scale", attn_scale),
        ("descale_q", scales.descale_q),
        ("descale_k", scales.descale_k),
        ("descale_v", scales.descale_v),
        ("descale_s", scales.descale_s),
        ("scale_s", scales.scale_s),
        ("scale_o", scales.scale_o),
    ] {
        if !s.is_finite() {
            return Err(Error::invalid(
                format!("attention_fp8::forward: {name}"),
                "must be finite",
                s,
            ));
        }
    }
    // The two products, and the softmax over every row (each row costs
    // at least one step, even with S_kv or D of 0).
    let how = "2 x B x H x S_q x S_kv x D + B x H x S_q x (S_kv + D + 1)";
    let arg = "attention_fp8::forward";
    let row_cost = skv
        .checked_add(d)
        .and_then(|x| x.checked_add(1))
        .ok_or_else(|| Error::invalid(arg, "S_kv + D overflows", format!("{shape:?}")))?;
    bounds::total_work(
        arg,
        how,
        &[
            bounds::work(arg, how, &[2, b, h, sq, skv, d])?,
            bounds::work(arg, how, &[b, h, sq, row_cost])?,
        ],
    )?;
    if nq == 0 {
        // No query rows: nothing to compute (and no score row to allocate).
        return Ok(Fp8AttnForward {
            o: Vec::new(),
            stats: Vec::new(),
            amax_s: 0.0,
            amax_o: 0.0,
        });
    }
    let round = |x: &[f64], arg: &str| bounds::collect(arg, x.iter().map(|&x| format.round(x)));
    let (q, k, v) = (round(q, "q")?, round(k, "k")?, round(v, "v")?);
    let mut o = bounds::zeros("o", nq)?;
    let mut stats = bounds::zeros("stats", nst)?;
    let mut row = bounds::zeros("score row", skv)?;
    let (mut amax_s, mut amax_o) = (0.0f64, 0.0f64);
    let s_scale = attn_scale * scales.descale_q * scales.descale_k;
    let o_descale = scales.descale_s * scales.descale_v;
    for bh in 0..b * h {
        let qb = bh * sq * d;
        let kb = bh * skv * d;
        for i in 0..sq {
            let qi = &q[qb + i * d..qb + (i + 1) * d];
            let mut mx = f64::NEG_INFINITY;
            for (j, r) in row.iter_mut().enumerate() {
                let kj = &k[kb + j * d..kb + (j + 1) * d];
                let dot: f64 = qi.iter().zip(kj).map(|(a, b)| a * b).sum();
                *r = if causal && j > i {
                    f64::NEG_INFINITY
                } else {
                    dot * s_scale
                };
                mx = mx.max(*r);
            }
            let sum: f64 = row.iter().map(|&s| (s - mx).exp()).sum();
            stats[bh * sq + i] = mx + sum.ln();
            for r in row.iter_mut() {
                let p = (*r - mx).exp() / sum;
                amax_s = amax_s.max(p.abs());
                *r = format.round(p * scales.scale_s);
            }
            let ob = qb + i * d;
            for c in 0..d {
                let acc: f64 = row
                    .iter()
                    .enumerate()
                    .map(|(j, &p)| p * v[kb + j * d + c])
                    .sum();
                let x = acc * o_descale;
                amax_o = amax_o.max(x.abs());
                o[ob + c] = out.round(x * scales.scale_o);
            }
        }
    }
    Ok(Fp8AttnForward {
        o,
        stats,
        amax_s,
        amax_o,
    })
}

/// The bound on `max |O_gpu - O_ref| / max |O_ref|` for an FP8 attention
/// checked against [`forward`]: O's final rounding (`u_out`), P's FP8
/// rounding (`u_p`, one per term, and a term whose rounding flips at a
/// tie in the GPU's f32 softmax: counted twice), and f32 accumulation
/// over `S_kv` and `D` terms (2⁻²⁴ each).
///
/// # Errors
/// `S_kv + D` overflows `usize` (a shape no reference or GPU can run; an
/// error naming `shape.seq_kv`, never a panic).
pub fn tolerance(shape: Fp8AttnShape, format: Fp8Format, out: OutputType) -> Result<f64> {
    let terms = accumulated_terms("shape.seq_kv", shape.seq_kv, shape.head_dim)?;
    let acc = 5.960_464_477_539_063e-8 * terms as f64;
    Ok(2.0 * out.unit_roundoff() + 2.0 * format.unit_roundoff() + acc)
}

/// `max(seq, 1) + max(head_dim, 1)`, checked: the number of terms an f32
/// accumulation of the attention sums over. Errors name `arg`.
fn accumulated_terms(arg: &str, seq: usize, head_dim: usize) -> Result<usize> {
    seq.max(1).checked_add(head_dim.max(1)).ok_or_else(|| {
        Error::invalid(
            arg,
            "plus shape.head_dim must not overflow usize",
            format!("{seq} + {head_dim}"),
        )
    })
}

/// The scales of the FP8 attention backward (1 when not set), as
/// [`Graph::sdpa_fp8_backward`](crate::graph::Graph::sdpa_fp8_backward)
/// names them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fp8AttnBwdScales {
    /// Q's descale.
    pub descale_q: f64,
    /// K's descale.
    pub descale_k: f64,
    /// V's descale.
    pub descale_v: f64,
    /// O's descale.
    pub descale_o: f64,
    /// dO's descale.
    pub descale_do: f64,
    /// P's descale.
    pub descale_s: f64,
    /// dP's descale.
    pub descale_dp: f64,
    /// P's scale before its FP8 rounding.
    pub scale_s: f64,
    /// dQ's scale before its rounding.
    pub scale_dq: f64,
    /// dK's scale before its rounding.
    pub scale_dk: f64,
    /// dV's scale before its rounding.
    pub scale_dv: f64,
    /// dP's scale before its FP8 rounding.
    pub scale_dp: f64,
}

impl Default for Fp8AttnBwdScales {
    fn default() -> Self {
        Self {
            descale_q: 1.0,
            descale_k: 1.0,
            descale_v: 1.0,
            descale_o: 1.0,
            descale_do: 1.0,
            descale_s: 1.0,
            descale_dp: 1.0,
            scale_s: 1.0,
            scale_dq: 1.0,
            scale_dk: 1.0,
            scale_dv: 1.0,
            scale_dp: 1.0,
        }
    }
}

/// What [`backward`] computes: the gradients (rounded to the gradient
/// format) and the amax of each before its scale.
#[derive(Debug, Clone, PartialEq)]
pub struct Fp8AttnGrads {
    /// dQ `[B, H, S_q, D]`.
    pub dq: Vec<f64>,
    /// dK `[B, H, S_kv, D]`.
    pub dk: Vec<f64>,
    /// dV `[B, H, S_kv, D]`.
    pub dv: Vec<f64>,
    /// `max |dQ|`, `max |dK|`, `max |dV|`, `max |dP|` before their scales.
    pub amax: [f64; 4],
}

/// The FP8 attention backward as the composite of
/// [`Graph::sdpa_fp8_backward`](crate::graph::Graph::sdpa_fp8_backward)
/// computes it: `Δ = sum_row(dO ⊙ O)·descale_do·descale_o`,
/// `E = exp(mask(S) - stats)` with `S` as in [`forward`],
/// `P8 = round_fp8(E·scale_s)` (`format`), `dV = (P8ᵀ·dO)·descale_s·descale_do`,
/// `dP = ((dO·Vᵀ)·descale_do·descale_v - Δ)·E·attn_scale`,
/// `dP8 = round_grad(dP·scale_dp)`, `dQ = (dP8·K)·descale_dp·descale_k`,
/// `dK = (dP8ᵀ·Q)·descale_dp·descale_q`; each gradient's amax is taken
/// before its scale and the gradient rounded to `grad` after it. Inputs are
/// rounded to their formats first (`o` to `format`, `d_o` to `grad`).
///
/// # Errors
/// As [`forward`]; `stats` not `B·H·S_q` long.
#[allow(clippy::too_many_arguments)]
pub fn backward(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    o: &[f64],
    d_o: &[f64],
    stats: &[f64],
    shape: Fp8AttnShape,
    attn_scale: f64,
    causal: bool,
    format: Fp8Format,
    grad: Fp8Format,
    sc: &Fp8AttnBwdScales,
) -> Result<Fp8AttnGrads> {
    let Fp8AttnShape {
        batch: b,
        heads: h,
        seq_q: sq,
        seq_kv: skv,
        head_dim: d,
    } = shape;
    let arg = "attention_fp8::backward";
    for (name, x) in [("seq_kv", skv), ("head_dim", d)] {
        if x == 0 {
            return Err(Error::invalid(
                format!("{arg}: shape.{name}"),
                "must be >= 1",
                x,
            ));
        }
    }
    let nq = bounds::count("q", &[b, h, sq, d])?;
    let nkv = bounds::count("k", &[b, h, skv, d])?;
    bounds::count("scores", &[b, h, sq, skv])?;
    let nst = bounds::count("stats", &[b, h, sq])?;
    for (name, buf, n) in [
        ("q", q, nq),
        ("k", k, nkv),
        ("v", v, nkv),
        ("o", o, nq),
        ("d_o", d_o, nq),
        ("stats", stats, nst),
    ] {
        if buf.len() != n {
            return Err(Error::mismatch(
                format!("{arg}: {name} length"),
                n,
                buf.len(),
            ));
        }
    }
    let all = [
        attn_scale,
        sc.descale_q,
        sc.descale_k,
        sc.descale_v,
        sc.descale_o,
        sc.descale_do,
        sc.descale_s,
        sc.descale_dp,
        sc.scale_s,
        sc.scale_dq,
        sc.scale_dk,
        sc.scale_dv,
        sc.scale_dp,
    ];
    if let Some(bad) = all.iter().find(|s| !s.is_finite()) {
        return Err(Error::invalid(
            format!("{arg}: scales"),
            "must be finite",
            *bad,
        ));
    }
    let how = "6 x B x H x S_q x S_kv x D + B x H x S_q x (S_kv + D + 1)";
    let row_cost = skv
        .checked_add(d)
        .and_then(|x| x.checked_add(1))
        .ok_or_else(|| Error::invalid(arg, "S_kv + D overflows", format!("{shape:?}")))?;
    bounds::total_work(
        arg,
        how,
        &[
            bounds::work(arg, how, &[6, b, h, sq, skv, d])?,
            bounds::work(arg, how, &[b, h, sq, row_cost])?,
        ],
    )?;
    if nq == 0 {
        return Ok(Fp8AttnGrads {
            dq: Vec::new(),
            dk: bounds::zeros("dk", nkv)?,
            dv: bounds::zeros("dv", nkv)?,
            amax: [0.0; 4],
        });
    }
    let rnd = |x: &[f64], f: Fp8Format, n: &str| bounds::collect(n, x.iter().map(|&x| f.round(x)));
    let (q, k, v) = (
        rnd(q, format, "q")?,
        rnd(k, format, "k")?,
        rnd(v, format, "v")?,
    );
    let (o, d_o) = (rnd(o, format, "o")?, rnd(d_o, grad, "d_o")?);
    let mut dq = bounds::zeros("dq", nq)?;
    let mut dk = bounds::zeros("dk", nkv)?;
    let mut dv = bounds::zeros("dv", nkv)?;
    // Per (batch, head): E and dP8 rows of S_q x S_kv.
    let mut p8 = bounds::zeros("P8", sq.saturating_mul(skv))?;
    let mut dp8 = bounds::zeros("dP8", sq.saturating_mul(skv))?;
    let mut amax = [0.0f64; 4];
    let s_scale = attn_scale * sc.descale_q * sc.descale_k;
    for bh in 0..b * h {
        let (qb, kb) = (bh * sq * d, bh * skv * d);
        for i in 0..sq {
            let qi = &q[qb + i * d..qb + (i + 1) * d];
            let doi = &d_o[qb + i * d..qb + (i + 1) * d];
            let oi = &o[qb + i * d..qb + (i + 1) * d];
            let delta: f64 =
                doi.iter().zip(oi).map(|(a, b)| a * b).sum::<f64>() * sc.descale_do * sc.descale_o;
            let st = stats[bh * sq + i];
            for j in 0..skv {
                let kj = &k[kb + j * d..kb + (j + 1) * d];
                let vj = &v[kb + j * d..kb + (j + 1) * d];
                let ej = if causal && j > i {
                    0.0
                } else {
                    let s: f64 = qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f64>() * s_scale;
                    (s - st).exp()
                };
                p8[i * skv + j] = format.round(ej * sc.scale_s);
                let dpr: f64 = doi.iter().zip(vj).map(|(a, b)| a * b).sum::<f64>()
                    * sc.descale_do
                    * sc.descale_v;
                let dp = (dpr - delta) * ej * attn_scale;
                amax[3] = amax[3].max(dp.abs());
                dp8[i * skv + j] = grad.round(dp * sc.scale_dp);
            }
        }
        // dV = P8ᵀ·dO, dK = dP8ᵀ·Q (over queries); dQ = dP8·K (over keys).
        for j in 0..skv {
            for c in 0..d {
                let (mut av, mut ak) = (0.0, 0.0);
                for i in 0..sq {
                    av += p8[i * skv + j] * d_o[qb + i * d + c];
                    ak += dp8[i * skv + j] * q[qb + i * d + c];
                }
                let xv = av * sc.descale_s * sc.descale_do;
                let xk = ak * sc.descale_dp * sc.descale_q;
                amax[2] = amax[2].max(xv.abs());
                amax[1] = amax[1].max(xk.abs());
                dv[kb + j * d + c] = grad.round(xv * sc.scale_dv);
                dk[kb + j * d + c] = grad.round(xk * sc.scale_dk);
            }
        }
        for i in 0..sq {
            for c in 0..d {
                let a: f64 = (0..skv).map(|j| dp8[i * skv + j] * k[kb + j * d + c]).sum();
                let x = a * sc.descale_dp * sc.descale_k;
                amax[0] = amax[0].max(x.abs());
                dq[qb + i * d + c] = grad.round(x * sc.scale_dq);
            }
        }
    }
    Ok(Fp8AttnGrads { dq, dk, dv, amax })
}

/// The bound on `max |grad_gpu - grad_ref| / max |grad_ref|` for the FP8
/// attention backward checked against [`backward`]: the gradient's final
/// rounding, P's and dP's FP8 roundings (each counted twice for a rounding
/// that flips at a tie in the GPU's f32 arithmetic), and f32 accumulation.
///
/// # Errors
/// `max(S_q, S_kv) + D` overflows `usize` (an error naming the longer of
/// `shape.seq_q` / `shape.seq_kv`, never a panic).
pub fn backward_tolerance(shape: Fp8AttnShape, format: Fp8Format, grad: Fp8Format) -> Result<f64> {
    let (arg, seq) = if shape.seq_q > shape.seq_kv {
        ("shape.seq_q", shape.seq_q)
    } else {
        ("shape.seq_kv", shape.seq_kv)
    };
    let terms = accumulated_terms(arg, seq, shape.head_dim)?;
    let acc = 5.960_464_477_539_063e-8 * terms as f64;
    Ok(
        2.0 * grad.unit_roundoff()
            + 2.0 * format.unit_roundoff()
            + 2.0 * grad.unit_roundoff()
            + acc,
    )
}
