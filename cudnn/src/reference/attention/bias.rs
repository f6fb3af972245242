//! The additive score terms of the reference: a broadcast bias
//! ([`SdpaConfig::bias`](super::SdpaConfig::bias), `[b or 1, h_q or 1, s_q,
//! s_kv]`) and ALiBi ([`SdpaConfig::alibi_slopes`](super::SdpaConfig::alibi_slopes),
//! `slope[h] * (j - i)`), both added to the scaled score before the masks:
//! `S[i, j] = scale * Q[i]·K[j] + bias[n, h, i, j] + slope[h] * (j - i)`.
//! Their gradient: [`dbias`], the bias's gradient `dS` summed over the dims
//! the bias broadcasts.

use super::{SdpaConfig, Shape, View, check, product, zeros};
use crate::error::{Error, Result};

/// The bias (broadcast) and ALiBi terms of score `(n, h, i, j)`. Only
/// called after [`check_terms`] with indices inside the shape.
pub(super) fn term(
    config: &SdpaConfig<'_>,
    _shape: &Shape,
    (n, h, i, j): (usize, usize, usize, usize),
) -> f64 {
    let mut t = 0.0;
    if let Some(b) = &config.bias {
        let nb = if b.dims[0] == 1 { 0 } else { n };
        let hb = if b.dims[1] == 1 { 0 } else { h };
        t += b.at(nb, hb, i, j);
    }
    if let Some(s) = config.alibi_slopes {
        // (j - i) as f64 exactly (both below 2^53 by the size bounds).
        t += s[h] * (j as f64 - i as f64);
    }
    t
}

/// Checks the bias dims (`[b or 1, h_q or 1, s_q, s_kv]`, finite values
/// in its span) and the slopes (`h_q` finite values).
pub(super) fn check_terms(config: &SdpaConfig<'_>, shape: &Shape) -> Result<()> {
    if let Some(b) = &config.bias {
        let [bb, bh, bs, bk] = b.dims;
        let ok = (bb == 1 || bb == shape.b)
            && (bh == 1 || bh == shape.hq)
            && bs == shape.sq
            && bk == shape.skv;
        if !ok {
            return Err(Error::mismatch(
                "bias.dims ([b or 1, h_q or 1, s_q, s_kv])",
                format!(
                    "[{} or 1, {} or 1, {}, {}]",
                    shape.b, shape.hq, shape.sq, shape.skv
                ),
                format!("{:?}", b.dims),
            ));
        }
        b.check("bias")?;
        for n in 0..bb {
            for h in 0..bh {
                for i in 0..bs {
                    for j in 0..bk {
                        let x = b.at(n, h, i, j);
                        if !x.is_finite() {
                            return Err(Error::invalid(
                                format!("bias[{n}, {h}, {i}, {j}]"),
                                "must be finite",
                                x,
                            ));
                        }
                    }
                }
            }
        }
    }
    if let Some(s) = config.alibi_slopes {
        if s.len() != shape.hq {
            return Err(Error::mismatch(
                "alibi_slopes length (h_q)",
                shape.hq,
                s.len(),
            ));
        }
        if let Some((h, &v)) = s.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(Error::invalid(
                format!("alibi_slopes[{h}]"),
                "must be finite",
                v,
            ));
        }
    }
    Ok(())
}

/// The bias's gradient (`config.bias` must be set): `dS[n, h, i, j] =
/// P[i, j] (D[i, j] dP[i, j] - delta[i])` (the backward's, see the
/// [module docs](super)), summed over the dims the bias broadcasts;
/// packed in the bias's dims. From the same inputs as
/// [`backward`](super::backward).
///
/// # Errors
/// As [`backward`](super::backward); no bias in `config`.
pub fn dbias(
    q: &View<'_>,
    k: &View<'_>,
    v: &View<'_>,
    o: &View<'_>,
    d_o: &View<'_>,
    stats: &[f64],
    config: &SdpaConfig<'_>,
) -> Result<Vec<f64>> {
    let bias = config
        .bias
        .ok_or_else(|| Error::invalid("dbias config.bias", "must be set", "None"))?;
    // The same checks as the backward (and its result, unused, proves the
    // O / dO / stats shapes).
    super::backward(q, k, v, o, d_o, stats, config)?;
    let shape = check(q, k, v, config, true)?;
    let Shape {
        b, hq, sq, skv, dv, ..
    } = shape;
    let [bb, bh, _, _] = bias.dims;
    let mut out = zeros("dbias", product("dbias", &[bb, bh, sq, skv])?)?;
    for n in 0..b {
        for h in 0..hq {
            let kh = shape.kv_head(h);
            for i in 0..sq {
                let lse = stats[shape.row(n, h, i)];
                let mut delta = 0.0;
                for t in 0..dv {
                    delta += d_o.at(n, h, i, t) * o.at(n, h, i, t);
                }
                for j in 0..skv {
                    if !super::allowed(&shape, config, n, i, j) {
                        continue;
                    }
                    let at = (n, h, i, j);
                    let s = super::softcap::cap(
                        config.softcap,
                        super::score(q, k, &shape, config.scale, at),
                    ) + term(config, &shape, at);
                    let p = (s - lse).exp();
                    let m = super::drop_at(&shape, config, at);
                    let mut dp = 0.0;
                    for t in 0..dv {
                        dp += d_o.at(n, h, i, t) * v.at(n, kh, j, t);
                    }
                    let nb = if bb == 1 { 0 } else { n };
                    let hb = if bh == 1 { 0 } else { h };
                    out[((nb * bh + hb) * sq + i) * skv + j] += p * (m * dp - delta);
                }
            }
        }
    }
    Ok(out)
}
