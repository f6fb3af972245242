//! FlashAttention's ALiBi entry points and attention sinks, on the
//! attention op of [`attn`](crate::attn) (the slopes and the sinks are
//! [`AttnParams`] options; these are the one-line-switch signatures).

use candle_core::Tensor;

use crate::attn::{flash_attn_varlen_with, flash_attn_with};
use crate::params::AttnParams;

/// FlashAttention's `flash_attn_alibi`: `alibi_slopes` f32 `(heads,)` (or
/// `(batch, heads)` with equal rows, `batch` q's), the bias `-slope * |i + s_kv - s_q -
/// j|` added to the scaled scores (FlashAttention's non-causal form; its
/// causal form `slope * j` gives the same softmax, except with sinks, where
/// this distance form is the one used: see
/// [`AttnParams::alibi_slopes`](crate::AttnParams)). Causal with `seq_q ==
/// seq_kv` runs cuDNN's own ALiBi (`slope * (col - row)`, the distance form
/// on the keys a causal row sees); other calls (not causal, `seq_q != seq_kv`) a
/// `(1, heads, seq_q, seq_kv)` f32 score bias holding the ALiBi terms and
/// the mask, built on the device. Differentiable in q, k, v (the slopes
/// are constants, as in FlashAttention: a slopes tensor that tracks a
/// gradient is accepted and gets none).
///
/// # Errors
/// As [`flash_attn_with`]; slopes not f32 of the head count; a query row
/// that sees no key (`seq_q > seq_kv` causal).
pub fn flash_attn_alibi(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    softmax_scale: f32,
    causal: bool,
) -> candle_core::Result<Tensor> {
    flash_attn_with(
        q,
        k,
        v,
        &AttnParams::new(softmax_scale)
            .causal(causal)
            .alibi_slopes(Some(alibi_slopes.clone())),
    )
}

/// FlashAttention's `flash_attn_alibi_windowed`: [`flash_attn_alibi`] with
/// FlashAttention's window sizes (any: the window goes into the score
/// bias unless the call is causal with `seq_q == seq_kv`).
///
/// # Errors
/// As [`flash_attn_alibi`] and [`flash_attn_windowed`](crate::flash_attn_windowed).
pub fn flash_attn_alibi_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> candle_core::Result<Tensor> {
    flash_attn_with(
        q,
        k,
        v,
        &AttnParams::new(softmax_scale)
            .window(window_size_left, window_size_right)
            .alibi_slopes(Some(alibi_slopes.clone())),
    )
}

/// Attention with sinks (gpt-oss): `sinks` one logit per query head
/// (`(heads,)`, f32 / f16 / bf16), joining every row's softmax denominator.
/// Causal or not; a decode step (`seq_q = 1`) runs on a two-row query (a
/// copy of the row before it: cuDNN takes no sink for a single row), its
/// output the last row's. Differentiable in q, k, v and the sinks (gpt-oss
/// trains them: a sinks tensor that tracks a gradient gets
/// `-Σ p_sink · rowsum(dO ⊙ O)` from cuDNN's training statistics).
///
/// # Errors
/// As [`flash_attn_with`]; sinks of another shape.
pub fn flash_attn_sinks(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    sinks: &Tensor,
    softmax_scale: f32,
    causal: bool,
) -> candle_core::Result<Tensor> {
    flash_attn_with(
        q,
        k,
        v,
        &AttnParams::new(softmax_scale)
            .causal(causal)
            .sinks(Some(sinks.clone())),
    )
}

/// FlashAttention's `flash_attn_varlen_alibi`: [`flash_attn_varlen`](crate::flash_attn_varlen)
/// (packed `(total, heads, head_dim)` tensors, cumulative `seqlens_q` /
/// `seqlens_k`) with ALiBi slopes f32 `(heads,)` (or `(batch, heads)`:
/// rows that differ go into the score bias, sequence `b` row `b`), the
/// bias `-slope * |i + seqlen_k - seqlen_q - j|` per sequence. Runs cuDNN's own ALiBi where it is exactly that: a causal call
/// whose every sequence has as many keys as queries (packed prefill), whose
/// per-sequence top-left diagonal is FlashAttention's bottom-right one and
/// where `slope * (j - i)` is the distance form on every key a row sees;
/// other calls (not causal, chunked prefill) take a per-sequence score
/// bias `[batch, heads, max_seqlen_q, max_seqlen_k]` f32 holding the
/// distances and the mask, built on the device (its size: 4 bytes per
/// element). Differentiable in q, k, v (the slopes are constants, as in
/// FlashAttention: a slopes tensor that tracks a gradient gets none).
///
/// # Errors
/// As [`flash_attn_varlen`](crate::flash_attn_varlen); slopes not f32 of
/// the head count; a query row that sees no key (causal, a sequence with
/// more queries than keys), typed, naming `alibi_slopes`.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_alibi(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    causal: bool,
) -> candle_core::Result<Tensor> {
    flash_attn_varlen_with(
        q,
        k,
        v,
        seqlens_q,
        seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        &AttnParams::new(softmax_scale)
            .causal(causal)
            .alibi_slopes(Some(alibi_slopes.clone())),
    )
}

/// FlashAttention's `flash_attn_varlen_alibi_windowed`:
/// [`flash_attn_varlen_alibi`] with FlashAttention's window sizes (any:
/// the window goes into the score bias unless the call is causal with
/// `seqlen_q == seqlen_k` for every sequence).
///
/// # Errors
/// As [`flash_attn_varlen_alibi`] and [`flash_attn_varlen_windowed`](crate::flash_attn_varlen_windowed).
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_alibi_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> candle_core::Result<Tensor> {
    flash_attn_varlen_with(
        q,
        k,
        v,
        seqlens_q,
        seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        &AttnParams::new(softmax_scale)
            .window(window_size_left, window_size_right)
            .alibi_slopes(Some(alibi_slopes.clone())),
    )
}
