//! GPU tier of ALiBi in varlen calls: packed prefill sequences (each as
//! many keys as queries), causal, with and without a left window, GQA;
//! each sequence against candle's CPU reference of the dense call alone
//! (FlashAttention's `-slope * |i + s_k - s_q - j|`), gradients against
//! candle's CPU autograd of that reference; and the public entry points
//! with candle-flash-attn's signatures; chunked prefill, non-causal and
//! windowed calls through the per-sequence score bias.

use candle_core::{DType, Tensor};
use cudnn_candle::AttnParams;

use super::{
    close, cuda, cumulative, inputs, reference_in, slopes, tol, varlen_case, varlen_qk_case,
};
use crate::support::{TestResult, Trial, gpu};

const S: f32 = 0.125;

/// `flash_attn_varlen_alibi` itself (the one-line-switch signature) on
/// three sequences, against the reference of each.
fn entry_point(dt: DType) -> TestResult {
    let dev = cuda()?;
    let lens = [7usize, 1, 33];
    let (h, d) = (4usize, 64usize);
    let t: usize = lens.iter().sum();
    let (q, k, v) = inputs((1, t, h, d), (1, t, h, d), dt)?;
    let cu = Tensor::new(cumulative(&lens).as_slice(), &dev)?;
    let g = |x: &Tensor| x.squeeze(0)?.to_dtype(dt)?.to_device(&dev);
    let sl = slopes(h);
    let o = cudnn_candle::flash_attn_varlen_alibi(
        &g(&q)?,
        &g(&k)?,
        &g(&v)?,
        &sl.to_device(&dev)?,
        &cu,
        &cu,
        33,
        33,
        S,
        true,
    )?;
    let p = AttnParams::new(S).causal(true).alibi_slopes(Some(sl));
    let mut at = 0;
    let mut parts = Vec::new();
    for &l in &lens {
        let n = |x: &Tensor| x.narrow(1, at, l);
        parts.push(reference_in(&n(&q)?, &n(&k)?, &n(&v)?, &p, 33)?);
        at += l;
    }
    close("o", &o, &Tensor::cat(&parts, 1)?.squeeze(0)?, tol(dt))
}

/// `max_seqlen_*` larger than every sequence (the score-bias path, not
/// causal), against the reference of each sequence alone; then the same
/// call with the slopes on the host: refused, typed (a device mismatch
/// naming `alibi_slopes`), before any bias is built.
fn max_past_every_sequence(dt: DType) -> TestResult {
    let dev = cuda()?;
    let lens = [7usize, 1, 33];
    let (h, d) = (4usize, 64usize);
    let t: usize = lens.iter().sum();
    let (q, k, v) = inputs((1, t, h, d), (1, t, h, d), dt)?;
    let cu = Tensor::new(cumulative(&lens).as_slice(), &dev)?;
    let g = |x: &Tensor| x.squeeze(0)?.to_dtype(dt)?.to_device(&dev);
    let sl = slopes(h);
    let (qg, kg, vg) = (g(&q)?, g(&k)?, g(&v)?);
    let o = cudnn_candle::flash_attn_varlen_alibi(
        &qg,
        &kg,
        &vg,
        &sl.to_device(&dev)?,
        &cu,
        &cu,
        50,
        61,
        S,
        false,
    )?;
    let p = AttnParams::new(S).alibi_slopes(Some(sl.clone()));
    let mut at = 0;
    let mut parts = Vec::new();
    for &l in &lens {
        let n = |x: &Tensor| x.narrow(1, at, l);
        parts.push(reference_in(&n(&q)?, &n(&k)?, &n(&v)?, &p, 61)?);
        at += l;
    }
    close("o", &o, &Tensor::cat(&parts, 1)?.squeeze(0)?, tol(dt))?;
    let e = cudnn_candle::flash_attn_varlen_alibi(
        &qg,
        &kg,
        &vg,
        &sl,
        &cu,
        &cu,
        // Past any device's memory, within the op's i32 bound (which the
        // op checks first, before the slopes' device).
        1 << 30,
        1 << 30,
        S,
        false,
    )
    .err()
    .ok_or("host slopes with device q")?;
    match crate::support::typed(&e) {
        Some(cudnn::Error::Mismatch { .. }) => {
            assert!(e.to_string().contains("alibi_slopes"), "{e}")
        }
        other => return Err(format!("not the typed mismatch: {other:?} ({e})").into()),
    }
    // Device slopes and a huge max: the bias's size, typed.
    let e = cudnn_candle::flash_attn_varlen_alibi(
        &qg,
        &kg,
        &vg,
        &sl.to_device(&dev)?,
        &cu,
        &cu,
        1 << 30,
        1 << 30,
        S,
        false,
    )
    .err()
    .ok_or("a bias past the device's memory")?;
    assert!(e.to_string().contains("max_seqlen_q / max_seqlen_k"), "{e}");
    Ok(())
}

pub fn trials() -> Vec<Trial> {
    vec![
        gpu(
            "flash_attn_varlen_alibi_max_past_every_sequence_bf16",
            || max_past_every_sequence(DType::BF16),
        ),
        gpu("flash_attn_varlen_alibi_causal_bf16", || {
            let p = AttnParams::new(S)
                .causal(true)
                .alibi_slopes(Some(slopes(4)));
            varlen_case(&[5, 1, 9], 4, 64, DType::BF16, p, false)
        }),
        gpu("flash_attn_varlen_alibi_windowed_gqa_f16", || {
            let p = AttnParams::new(S)
                .window(Some(6), Some(0))
                .alibi_slopes(Some(slopes(8)));
            varlen_qk_case(&[12, 3, 20], &[12, 3, 20], (8, 2), 64, DType::F16, p, false)
        }),
        gpu("flash_attn_varlen_alibi_backward_f16", || {
            let p = AttnParams::new(S)
                .causal(true)
                .alibi_slopes(Some(slopes(4)));
            varlen_case(&[6, 11, 2], 4, 64, DType::F16, p, true)
        }),
        gpu("flash_attn_varlen_alibi_entry_point_bf16", || {
            entry_point(DType::BF16)
        }),
        gpu("flash_attn_varlen_alibi_chunked_prefill_bias_bf16", || {
            // Fewer queries than keys per sequence: the per-sequence bias
            // (bottom-right distances and mask).
            let p = AttnParams::new(S)
                .causal(true)
                .alibi_slopes(Some(slopes(4)));
            varlen_qk_case(&[3, 1, 8], &[10, 4, 8], (4, 4), 64, DType::BF16, p, false)
        }),
        gpu(
            "flash_attn_varlen_alibi_not_causal_bias_backward_f16",
            || {
                let p = AttnParams::new(S).alibi_slopes(Some(slopes(4)));
                varlen_qk_case(&[5, 9, 2], &[7, 9, 11], (4, 2), 64, DType::F16, p, true)
            },
        ),
        gpu(
            "flash_attn_varlen_alibi_right_window_call_extent_f16",
            || {
                // Review (alibi) defect 2: a right window with a sequence of
                // fewer keys than max_seqlen_k (8): FlashAttention keeps right
                // 3 (below 8) and sets left 8, so row 0 of the (5, 2) sequence
                // sees key 0 only.
                let p = AttnParams::new(S)
                    .window(None, Some(3))
                    .alibi_slopes(Some(slopes(4)));
                varlen_qk_case(&[5, 4, 3], &[2, 8, 3], (4, 4), 64, DType::F16, p, false)
            },
        ),
        gpu(
            "flash_attn_varlen_alibi_left_window_call_extent_bf16",
            || {
                // Not causal, a left window, a sequence with lq > lk + 1 (6
                // queries, 2 keys) in a call of max_seqlen_k 8: the right side
                // is 8 (every row sees both keys; a per-sequence rule bounded
                // it at 2 and refused the call).
                let p = AttnParams::new(S)
                    .window(Some(2), None)
                    .alibi_slopes(Some(slopes(4)));
                varlen_qk_case(&[6, 3], &[2, 8], (4, 2), 64, DType::BF16, p, false)
            },
        ),
        gpu("flash_attn_varlen_alibi_rows_with_no_key_refused", || {
            // (10, 2) with right 3 and max_seqlen_k 8: FlashAttention's rows
            // 0-4 see no key; refused, typed, naming alibi_slopes.
            let dev = cuda()?;
            let (q, k, _) = inputs((1, 13, 4, 64), (1, 10, 4, 64), DType::F16)?;
            let g = |x: &Tensor| x.squeeze(0)?.to_dtype(DType::F16)?.to_device(&dev);
            let (qg, kg) = (g(&q)?, g(&k)?);
            let p = AttnParams::new(S)
                .window(None, Some(3))
                .alibi_slopes(Some(slopes(4).to_device(&dev)?));
            let e = cudnn_candle::flash_attn_varlen_with(
                &qg,
                &kg,
                &kg,
                &Tensor::new(&[0u32, 10, 13], &dev)?,
                &Tensor::new(&[0u32, 2, 10], &dev)?,
                10,
                8,
                &p,
            )
            .err()
            .ok_or("rows with no key accepted")?;
            match crate::support::typed(&e) {
                Some(t) if t.to_string().contains("alibi_slopes") => Ok(()),
                other => Err(format!("not the typed refusal: {other:?} ({e})").into()),
            }
        }),
        gpu("flash_attn_varlen_alibi_windowed_bias_f16", || {
            let p = AttnParams::new(S)
                .window(Some(3), Some(2))
                .alibi_slopes(Some(slopes(4)));
            varlen_qk_case(&[6, 12], &[6, 12], (4, 4), 64, DType::F16, p, false)
        }),
    ]
}
