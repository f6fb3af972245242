//! FlashAttention's ALiBi where cuDNN's own ALiBi cannot compute it (no
//! causal mask, a bottom-right diagonal, any right window): the slopes'
//! distances and the mask as an additive score bias, `[1, H, S_q, S_kv]`
//! f32, built on the device from the window computed here (pure functions).

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

/// The window of FlashAttention's ALiBi bias for one call, as the kernel
/// applies it: query `i` sits at `d = i + seq_kv - seq_q` and sees key `j`
/// when `j >= d - left` (if `left` is set) and `j <= d + right` (if `right`
/// is set); the score bias is `slope * -|d - j|` there, `-inf` elsewhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AlibiWindow {
    /// Keys seen left of the diagonal (`None`: all).
    pub left: Option<i64>,
    /// Keys seen right of the diagonal (`None`: all).
    pub right: Option<i64>,
}

/// `p`'s window as candle-flash-attn hands it to the kernel: a side above
/// the call's key extent `ext` is dropped, then a missing side is `ext`
/// whenever the other is set (so a left window alone also bounds the
/// right at `d + ext`, which hides keys from the first `seq_q - ext - 1`
/// rows when `seq_q > ext + 1`). `ext` is the call's `seqlen_k` of
/// FlashAttention's `set_params_fprop`, the same for every sequence: a
/// dense call's `seq_kv`, a varlen call's `max_seqlen_k`, a KV-cache
/// call's capacity, a paged call's `blocks_per_seq * block_size`. Only the
/// diagonal `d = i + seq_kv - seq_q` takes the sequence's own lengths
/// (`mask.h`'s `actual_seqlen_k`).
///
/// # Errors
/// A query row that would see no key (row 0 when `right` is set and
/// `seq_kv + right < seq_q`; FlashAttention writes zeros there, cuDNN's
/// softmax of an all `-inf` row is not defined), naming `alibi_slopes`;
/// sizes past `i64`.
pub fn alibi_window(
    p: &AttnParams,
    (seq_q, seq_kv): (usize, usize),
    ext: usize,
) -> Result<AlibiWindow> {
    let i = |name: &str, v: usize| super::to_i64(name, v);
    let skv = i("seq_kv", seq_kv)?;
    let sq = i("seq_q", seq_q)?;
    let e = i("seqlen_k (the call's key extent)", ext)?;
    let mut left = match p.window_size_left.filter(|&l| l <= ext) {
        Some(l) => Some(i("window_size_left", l)?),
        None => None,
    };
    let mut right = match p.window_size_right.filter(|&r| r <= ext) {
        Some(r) => Some(i("window_size_right", r)?),
        None => None,
    };
    if left.is_none() && right.is_some() {
        left = Some(e);
    }
    if left.is_some() && right.is_none() {
        right = Some(e);
    }
    // Row i sees [max(0, d - l), min(skv - 1, d + r)]: the lower end never
    // passes the last key (d <= skv - 1), so a row is empty only when
    // d + r < 0, first at row 0 (d = skv - sq).
    if let Some(r) = right.filter(|&r| skv.saturating_add(r) < sq) {
        return Err(Error::invalid(
            "alibi_slopes (with the window)",
            format!(
                "must leave every query row a key: row 0 of seq_q {seq_q} sees none of seq_kv {seq_kv} (right bound {r} with the call's key extent {ext}; FlashAttention writes zeros there)"
            ),
            format!("{:?} / {:?}", p.window_size_left, p.window_size_right),
        ));
    }
    Ok(AlibiWindow { left, right })
}

/// `cfg` with the ALiBi bias input: `[1, H, S_q, S_kv]` f32, no dBias.
pub fn with_alibi_bias(cfg: SdpaConfig) -> SdpaConfig {
    cfg.bias(AttnBias::new(false, true).with_dtype(DType::F32))
}
