//! The GPU tier's independent reference: attention on the CPU in f32
//! (candle's matmul, softmax, matmul), with FlashAttention's mask and
//! ALiBi rules written from FlashAttention's sources (candle-flash-attn's
//! window handling, the kernel's `mask.h` and `alibi.h`), not from the
//! crate's.

use candle_core::{D, DType, Device, Tensor};
use cudnn_candle::AttnParams;

/// Whether query `row` sees key `col` in FlashAttention (`sq` queries, `sk`
/// keys in this sequence, `seqlen_k` the call's key extent), from its
/// sources. `set_params_fprop` normalises the window once per call, with
/// the call's `seqlen_k` (a dense call's keys, a varlen call's
/// `max_seqlen_k`, a KV cache's capacity, a paged call's `blocks_per_seq *
/// block_size`): candle-flash-attn first turns a side above `seqlen_k`
/// into -1 (unbounded); left -1 with right 0 is causal (mask.h's causal
/// mask, `col < row + 1 + sk - sq`, with the sequence's own `sk`);
/// otherwise a missing side becomes `seqlen_k` when the other is set, and
/// mask.h's local mask keeps `row + sk - sq - left <= col < row + 1 + sk -
/// sq + right` (the diagonal from the sequence's own lengths, the sides
/// the call's).
pub fn sees(
    row: usize,
    col: usize,
    (sq, sk): (usize, usize),
    seqlen_k: usize,
    p: &AttnParams,
) -> bool {
    let (row, col, sq, sk) = (row as i64, col as i64, sq as i64, sk as i64);
    let ext = seqlen_k as i64;
    let side = |w: Option<usize>| w.filter(|&w| w as i64 <= ext).map_or(-1, |w| w as i64);
    let (mut left, mut right) = (side(p.window_size_left), side(p.window_size_right));
    if left < 0 && right == 0 {
        return col < row + 1 + sk - sq;
    }
    if left < 0 && right >= 0 {
        left = ext;
    }
    if left >= 0 && right < 0 {
        right = ext;
    }
    if left < 0 && right < 0 {
        return true;
    }
    col >= row + sk - sq - left && col < row + 1 + sk - sq + right
}

/// [`reference_in`] of a call whose key extent is k's own (a dense call,
/// or a sequence whose keys are the call's most).
pub fn reference(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    p: &AttnParams,
) -> candle_core::Result<Tensor> {
    let skv = k.dim(1)?;
    reference_in(q, k, v, p, skv)
}

/// softmax(mask(cap(scale q kᵀ) + alibi) ++ sink) v on the CPU in f32; q
/// `(b, sq, h, d)`, k / v `(b, skv, hkv, d)`. ALiBi as FlashAttention
/// writes it (causal: `+ slope[h] * j`, else `-slope[h] * |diag - j|`)
/// without sinks; with sinks always the distance form `-slope[h] * |diag -
/// j|` (the crate's documented form: FlashAttention has no sinks, and the
/// causal form's per-row constant no longer cancels once a sink joins the
/// denominator), a sink as one more logit per row whose probability is
/// dropped.
/// Differentiable (the row max is detached: the softmax does not depend on it).
/// One sequence (or a dense call) of a call whose key extent is
/// `seqlen_k` (see [`sees`]): k and v hold this sequence's valid keys
/// only.
pub fn reference_in(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    p: &AttnParams,
    seqlen_k: usize,
) -> candle_core::Result<Tensor> {
    let (b, sq, h, _) = q.dims4()?;
    let (_, skv, hkv, dk) = k.dims4()?;
    let dv = v.dim(3)?;
    let rep = h / hkv;
    let heads = |t: &Tensor, d: usize| -> candle_core::Result<Tensor> {
        t.unsqueeze(3)?
            .broadcast_as((b, skv, hkv, rep, d))?
            .contiguous()?
            .reshape((b, skv, h, d))?
            .transpose(1, 2)?
            .contiguous()
    };
    let (k, v) = (heads(k, dk)?, heads(v, dv)?);
    let q = q.transpose(1, 2)?.contiguous()?;
    let mut s = (q.matmul(&k.t()?)? * f64::from(p.softmax_scale))?;
    if let Some(c) = p.softcap {
        s = ((s / f64::from(c))?.tanh()? * f64::from(c))?;
    }
    if let Some(a) = &p.alibi_slopes {
        let slopes = a
            .to_device(&Device::Cpu)?
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        // FlashAttention's two branches: causal (no left window) `+ slope
        // * j`; otherwise `- slope * |i + skv - sq - j|`.
        let fa_causal =
            p.window_size_left.is_none() && p.window_size_right == Some(0) && p.sinks.is_none();
        let bias: Vec<f32> = (0..h * sq * skv)
            .map(|x| {
                let (i, j) = ((x / skv) % sq, x % skv);
                let slope = slopes[x / (sq * skv)];
                if fa_causal {
                    slope * j as f32
                } else {
                    -slope * (i as f32 + skv as f32 - sq as f32 - j as f32).abs()
                }
            })
            .collect();
        s = s.broadcast_add(&Tensor::from_vec(bias, (1, h, sq, skv), &Device::Cpu)?)?;
    }
    let mask: Vec<f32> = (0..sq * skv)
        .map(|x| {
            if sees(x / skv, x % skv, (sq, skv), seqlen_k, p) {
                0.0
            } else {
                f32::NEG_INFINITY
            }
        })
        .collect();
    let mut s = s.broadcast_add(&Tensor::from_vec(mask, (sq, skv), &Device::Cpu)?)?;
    if let Some(t) = &p.sinks {
        let col = t
            .to_device(&Device::Cpu)?
            .to_dtype(DType::F32)?
            .reshape((1, h, 1, 1))?
            .broadcast_as((b, h, sq, 1))?;
        s = Tensor::cat(&[&s, &col], 3)?;
    }
    let m = s.max_keepdim(D::Minus1)?.detach();
    let e = s.broadcast_sub(&m)?.exp()?;
    let pr = e.broadcast_div(&e.sum_keepdim(D::Minus1)?)?;
    let pr = pr.narrow(3, 0, skv)?;
    pr.matmul(&v)?.transpose(1, 2)?.contiguous()
}
