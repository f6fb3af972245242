//! FlashAttention's ALiBi where cuDNN's own ALiBi cannot compute it (no
//! causal mask, a bottom-right diagonal, any right window): the slopes'
//! distances and the mask as an additive score bias, `[1, H, S_q, S_kv]`
//! f32, built from these host-side factors (pure functions).

use cudnn::graph::{AttnBias, DType, DiagonalAlignment, SdpaConfig};
use cudnn::{Error, Result};

use super::{AttnParams, mask};

/// Whether cuDNN's ALiBi (`slope * (col - row)` under a top-left causal
/// mask) is FlashAttention's for this dense call: causal with `seq_q ==
/// seq_kv` (any left window).
///
/// # Errors
/// [`mask`]'s.
pub fn alibi_native(p: &AttnParams, seq_q: usize, seq_kv: usize) -> Result<bool> {
    let m = mask(p, seq_q, seq_kv, false)?;
    Ok(m.causal && m.diagonal == DiagonalAlignment::TopLeft)
}

/// The per-position factors of FlashAttention's ALiBi bias, `seq_q x
/// seq_kv` row-major: `dist[i][j] = -|i + seq_kv - seq_q - j|` (the slope
/// multiplies it; FlashAttention's causal form `slope * j` differs from it
/// by a per-row constant only, which the softmax cancels), and `mask[i][j]`
/// `0` where query `i` sees key `j` under FlashAttention's window rule, `-inf`
/// elsewhere.
#[derive(Clone, Debug, PartialEq)]
pub struct AlibiBias {
    /// `-|diag(i) - j|`.
    pub dist: Vec<f32>,
    /// `0` or `-inf`.
    pub mask: Vec<f32>,
}

/// The factors for `p`'s window (candle-flash-attn's rule: a window side
/// above `seq_kv` is no bound; `Some(0)` right is causal).
///
/// # Errors
/// A query row that would see no key (FlashAttention writes zeros there;
/// cuDNN's softmax of an all `-inf` row is not defined), naming
/// `alibi_slopes`; sizes past `usize`.
pub fn alibi_bias(p: &AttnParams, seq_q: usize, seq_kv: usize) -> Result<AlibiBias> {
    let n = seq_q
        .checked_mul(seq_kv)
        .filter(|&n| n <= isize::MAX as usize / 4)
        .ok_or_else(|| {
            Error::invalid(
                "alibi_slopes (the bias seq_q x seq_kv)",
                "must fit an allocation",
                format!("{seq_q} x {seq_kv}"),
            )
        })?;
    let left = p.window_size_left.filter(|&l| l <= seq_kv);
    let right = p.window_size_right.filter(|&r| r <= seq_kv);
    let (mut dist, mut mask) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..seq_q {
        // i + seq_kv - seq_q, in i64 (it may be negative).
        let diag = i as i64 + seq_kv as i64 - seq_q as i64;
        let mut any = false;
        for j in 0..seq_kv as i64 {
            let sees = left.is_none_or(|l| j >= diag - l as i64)
                && right.is_none_or(|r| j <= diag + r as i64);
            any |= sees;
            dist.push(-((diag - j).abs() as f32));
            mask.push(if sees { 0.0 } else { f32::NEG_INFINITY });
        }
        if !any {
            return Err(Error::invalid(
                "alibi_slopes (with the window)",
                format!(
                    "must leave every query row a key: row {i} of seq_q {seq_q} sees none of seq_kv {seq_kv} (FlashAttention writes zeros there)"
                ),
                format!("{:?} / {:?}", p.window_size_left, p.window_size_right),
            ));
        }
    }
    Ok(AlibiBias { dist, mask })
}

/// `cfg` with the ALiBi bias input: `[1, H, S_q, S_kv]` f32, no dBias.
pub fn with_alibi_bias(cfg: SdpaConfig) -> SdpaConfig {
    cfg.bias(AttnBias::new(false, true).with_dtype(DType::F32))
}
