//! FP8 attention forward (per-tensor scaling) in `f64`, applying the scales
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
pub fn tolerance(shape: Fp8AttnShape, format: Fp8Format, out: OutputType) -> f64 {
    let acc = 5.960_464_477_539_063e-8 * (shape.seq_kv.max(1) + shape.head_dim.max(1)) as f64;
    2.0 * out.unit_roundoff() + 2.0 * format.unit_roundoff() + acc
}
