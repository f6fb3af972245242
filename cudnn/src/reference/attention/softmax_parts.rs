//! The softmax's parts for the reference (issue 24): the row max and sum
//! of exponentials as separate outputs, attention sinks (forward and
//! dSink), and the split-KV combination of partial attentions.
//!
//! With a sink logit `sink[h]` per query head, each row's softmax gets one
//! more term in its denominator: `max' = max(max_j S[i, j], sink[h])`,
//! `sum' = sum_j exp(S[i, j] - max') + exp(sink[h] - max')`, `P[i, j] =
//! exp(S[i, j] - max') / sum'`, `stats = max' + log(sum')`. A fully masked
//! row without a sink has `max = -inf`, `sum_exp = 0`, `stats = +inf` and
//! `O = 0` (as [`forward`](super::forward)); with a sink it has `max' =
//! sink`, `sum' = 1`, `O = 0`.
//!
//! The backward's dQ, dK, dV are [`backward`](super::backward)'s with the
//! sink-including statistics; `dSink[h] = -sum_{n, i} exp(sink[h] -
//! stats[n, h, i]) * sum_t dO[n, h, i, t] O[n, h, i, t]` (rows with
//! `stats = +inf` add 0).

use super::{SdpaConfig, Shape, View, allowed, bounds, check, drop_at, product, score, zeros};
use crate::error::{Error, Result};

/// The result of [`forward_parts`], packed `[b, h_q, s_q]` per row.
#[derive(Debug, Clone, PartialEq)]
pub struct SdpaParts {
    /// The output, packed `[b, h_q, s_q, d_v]`.
    pub o: Vec<f64>,
    /// `max' + log(sum')` (`+inf` for a fully masked row without a sink).
    pub stats: Vec<f64>,
    /// The row max `max'` (`-inf` for a fully masked row without a sink).
    pub max: Vec<f64>,
    /// The row sum `sum'` of `exp(S - max')` (0 for a fully masked row
    /// without a sink).
    pub sum_exp: Vec<f64>,
}

fn check_sink(sink: Option<&[f64]>, hq: usize) -> Result<()> {
    if let Some(s) = sink {
        if s.len() != hq {
            return Err(Error::mismatch("sink length (h_q)", hq, s.len()));
        }
        if let Some((i, &v)) = s.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(Error::invalid(format!("sink[{i}]"), "must be finite", v));
        }
    }
    Ok(())
}

/// Attention forward with the row max and sum of exponentials, and an
/// optional sink logit per query head (`h_q` values).
///
/// # Errors
/// As [`forward`](super::forward); a sink not `h_q` long or not finite.
pub fn forward_parts(
    q: &View<'_>,
    k: &View<'_>,
    v: &View<'_>,
    config: &SdpaConfig<'_>,
    sink: Option<&[f64]>,
) -> Result<SdpaParts> {
    let shape = check(q, k, v, config, false)?;
    let Shape {
        b, hq, sq, skv, dv, ..
    } = shape;
    check_sink(sink, hq)?;
    let mut o = zeros("o", product("o", &[b, hq, sq, dv])?)?;
    let rows = product("stats", &[b, hq, sq])?;
    let mut stats = zeros("stats", rows)?;
    let mut maxs = zeros("max", rows)?;
    let mut sums = zeros("sum_exp", rows)?;
    let mut row = zeros("scores", skv)?;
    for n in 0..b {
        for h in 0..hq {
            let kh = shape.kv_head(h);
            let sk = sink.map(|s| s[h]);
            for i in 0..sq {
                let r = shape.row(n, h, i);
                let mut max = sk.unwrap_or(f64::NEG_INFINITY);
                for (j, s) in row.iter_mut().enumerate() {
                    if allowed(&shape, config, n, i, j) {
                        // The scores as `forward` makes them: the softcap,
                        // then the bias and ALiBi terms.
                        let at = (n, h, i, j);
                        *s = super::softcap::cap(
                            config.softcap,
                            score(q, k, &shape, config.scale, at),
                        ) + super::bias::term(config, &shape, at);
                        max = max.max(*s);
                    }
                }
                maxs[r] = max;
                if max == f64::NEG_INFINITY {
                    stats[r] = f64::INFINITY;
                    continue;
                }
                let mut sum = sk.map_or(0.0, |s| (s - max).exp());
                for (j, &s) in row.iter().enumerate() {
                    if allowed(&shape, config, n, i, j) {
                        sum += (s - max).exp();
                    }
                }
                sums[r] = sum;
                let lse = max + sum.ln();
                stats[r] = lse;
                let out = &mut o[r * dv..(r + 1) * dv];
                for (j, &s) in row.iter().enumerate() {
                    if allowed(&shape, config, n, i, j) {
                        let p = (s - lse).exp() * drop_at(&shape, config, (n, h, i, j));
                        for (t, slot) in out.iter_mut().enumerate() {
                            *slot += p * v.at(n, kh, j, t);
                        }
                    }
                }
            }
        }
    }
    Ok(SdpaParts {
        o,
        stats,
        max: maxs,
        sum_exp: sums,
    })
}

/// dSink (`h_q` values) from the forward's `O`, `dO` (`[b, h_q, s_q,
/// d_v]` views), its statistics (packed `[b, h_q, s_q]`, sink included)
/// and the sink; dQ, dK, dV are [`backward`](super::backward)'s with these
/// statistics.
///
/// # Errors
/// `O` / `dO` of other dims or addressing outside their buffers; a dim
/// over [`MAX_ELEMENTS`](crate::reference::MAX_ELEMENTS) or work over
/// [`MAX_WORK`](super::MAX_WORK); `stats` not `b * h_q * s_q` long; a sink
/// not `h_q` long or not finite.
pub fn backward_d_sink(
    o: &View<'_>,
    d_o: &View<'_>,
    stats: &[f64],
    sink: &[f64],
) -> Result<Vec<f64>> {
    let [b, hq, sq, dv] = o.dims;
    if d_o.dims != o.dims {
        return Err(Error::mismatch(
            "d_o.dims (as o)",
            format!("{:?}", o.dims),
            format!("{:?}", d_o.dims),
        ));
    }
    // A view may repeat one element (stride 0) over any dims: bound the
    // dims and the work, not only the buffers.
    for (i, &d) in o.dims.iter().enumerate() {
        bounds::extent(&format!("o.dims[{i}]"), d)?;
    }
    bounds::work("o.dims (dSink)", "rows x d_v", &[b, hq, sq, dv])?;
    o.check("o")?;
    d_o.check("d_o")?;
    check_sink(Some(sink), hq)?;
    let rows = product("stats", &[b, hq, sq])?;
    if stats.len() != rows {
        return Err(Error::mismatch(
            "stats length (b * h_q * s_q)",
            rows,
            stats.len(),
        ));
    }
    let mut ds = zeros("d_sink", hq)?;
    for n in 0..b {
        for (h, slot) in ds.iter_mut().enumerate() {
            for i in 0..sq {
                let lse = stats[(n * hq + h) * sq + i];
                if !lse.is_finite() {
                    continue;
                }
                let mut delta = 0.0;
                for t in 0..dv {
                    delta += d_o.at(n, h, i, t) * o.at(n, h, i, t);
                }
                *slot -= (sink[h] - lse).exp() * delta;
            }
        }
    }
    Ok(ds)
}

/// One partial attention over a chunk of the keys: its output (packed
/// `[b, h, s_q, d_v]`) and its row max and sum of exponentials (packed
/// `[b, h, s_q]`), as [`forward_parts`] or the graph's `max_sum_exp`
/// outputs give them.
#[derive(Debug, Clone, Copy)]
pub struct Partial<'a> {
    /// The chunk's normalized output.
    pub o: &'a [f64],
    /// The chunk's row max (`-inf`: the chunk has no key for the row).
    pub max: &'a [f64],
    /// The chunk's row sum of `exp(S - max)`.
    pub sum_exp: &'a [f64],
}

/// Combines partial attentions over disjoint key chunks (split-KV) into
/// the attention over all of them: per row, `m = max_c m_c`, `w_c = l_c
/// exp(m_c - m)`, `O = sum_c w_c O_c / sum_c w_c` (0 when no chunk has a
/// key). `d_v` is the output's head dim. With an attention sink, exactly
/// one chunk's partial includes it (its `sum_exp` carries the sink's term);
/// a sink in every chunk would count it once per chunk. A row a chunk has
/// no key for must say `max = -inf` there (the GPU's max and sum for a
/// fully masked row are not defined: set them before combining).
///
/// # Errors
/// No partials; `d_v = 0`; partials of different lengths, or an `o` not
/// `d_v` times its rows; `partials x rows x d_v` over
/// [`MAX_WORK`](super::MAX_WORK).
pub fn combine_partials(parts: &[Partial<'_>], d_v: usize) -> Result<Vec<f64>> {
    let first = parts
        .first()
        .ok_or_else(|| Error::invalid("partials", "must not be empty", 0))?;
    if d_v == 0 {
        return Err(Error::invalid("d_v", "must be >= 1", d_v));
    }
    let rows = first.max.len();
    for (c, p) in parts.iter().enumerate() {
        let want = rows.checked_mul(d_v);
        if p.max.len() != rows || p.sum_exp.len() != rows || Some(p.o.len()) != want {
            return Err(Error::mismatch(
                format!("partials[{c}] lengths (max, sum_exp, o)"),
                format!("{rows}, {rows}, {want:?}"),
                format!("{}, {}, {}", p.max.len(), p.sum_exp.len(), p.o.len()),
            ));
        }
    }
    // The partials may share their slices: bound the work, not the memory.
    bounds::work(
        "partials",
        "partials x rows x d_v",
        &[parts.len(), rows, d_v],
    )?;
    let mut out = zeros("combined o", product("combined o", &[rows, d_v])?)?;
    for r in 0..rows {
        let m = parts
            .iter()
            .map(|p| p.max[r])
            .fold(f64::NEG_INFINITY, f64::max);
        if m == f64::NEG_INFINITY {
            continue;
        }
        let mut total = 0.0;
        let dst = &mut out[r * d_v..(r + 1) * d_v];
        for p in parts {
            if p.max[r] == f64::NEG_INFINITY {
                continue;
            }
            let w = p.sum_exp[r] * (p.max[r] - m).exp();
            total += w;
            for (t, slot) in dst.iter_mut().enumerate() {
                *slot += w * p.o[r * d_v + t];
            }
        }
        if total > 0.0 {
            for slot in dst.iter_mut() {
                *slot /= total;
            }
        }
    }
    Ok(out)
}
