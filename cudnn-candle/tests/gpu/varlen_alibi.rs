//! GPU tier of ALiBi in varlen calls: packed prefill sequences (each as
//! many keys as queries), causal, with and without a left window, GQA;
//! each sequence against candle's CPU reference of the dense call alone
//! (FlashAttention's `-slope * |i + s_k - s_q - j|`), gradients against
//! candle's CPU autograd of that reference; and the public entry points
//! with candle-flash-attn's signatures.

use candle_core::{DType, Tensor};
use cudnn_candle::AttnParams;

use super::{close, cuda, cumulative, inputs, reference, slopes, tol, varlen_case, varlen_qk_case};
use crate::support::{TestResult, Trial, gpu, typed};

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
        parts.push(reference(&n(&q)?, &n(&k)?, &n(&v)?, &p)?);
        at += l;
    }
    close("o", &o, &Tensor::cat(&parts, 1)?.squeeze(0)?, tol(dt))
}

pub fn trials() -> Vec<Trial> {
    vec![
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
        gpu(
            "flash_attn_varlen_alibi_chunked_prefill_is_refused_typed",
            || {
                let dev = cuda()?;
                let q = Tensor::zeros((4, 4, 64), DType::BF16, &dev)?;
                let k = Tensor::zeros((9, 4, 64), DType::BF16, &dev)?;
                let cu_q = Tensor::new(&[0u32, 2, 4], &dev)?;
                let cu_k = Tensor::new(&[0u32, 5, 9], &dev)?;
                let e = cudnn_candle::flash_attn_varlen_alibi(
                    &q,
                    &k,
                    &k,
                    &slopes(4).to_device(&dev)?,
                    &cu_q,
                    &cu_k,
                    2,
                    5,
                    S,
                    true,
                )
                .expect_err("seqlen_q != seqlen_k");
                assert!(
                    matches!(typed(&e), Some(cudnn::Error::Unsupported { .. })),
                    "not the typed refusal: {e}"
                );
                Ok(())
            },
        ),
    ]
}
