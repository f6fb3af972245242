//! GPU tier of the remaining attention options: dtypes checked before
//! any copy (a strided F8E4M3 input on the device is the crate's typed
//! error, not candle's F8 copy kernel), ALiBi in KV-cache and paged calls
//! against candle's CPU reference of each sequence alone
//! (FlashAttention's `-slope * |i + cache_seqlen - seq_q - j|`), and the
//! gradients of varlen calls (sinks, and slopes that get none, as
//! FlashAttention) against candle's CPU autograd.

use candle_core::{DType, Device, Tensor};

use super::{cuda, typed};
use crate::support::{TestResult, Trial, gpu};

/// `r`'s error is the crate's, its text containing `what`.
fn refused(r: candle_core::Result<Tensor>, what: &str) -> TestResult {
    let e = r.err().ok_or("accepted")?;
    let t = typed(&e).ok_or_else(|| format!("not the crate's error: {e}"))?;
    if !t.to_string().contains(what) {
        return Err(format!("{t} does not name {what}").into());
    }
    Ok(())
}

/// Strided and offset F8E4M3 inputs on the device: each entry point's
/// typed dtype error, naming the argument (before: candle's F8 copy of
/// the strided view ran first and failed untyped).
fn f8_inputs_refused_typed() -> TestResult {
    let dev = cuda()?;
    let f8 = |dims: (usize, usize, usize, usize)| -> candle_core::Result<Tensor> {
        // Made on the host, moved as bytes (no device cast or copy kernel).
        Tensor::zeros(dims, DType::F8E4M3, &Device::Cpu)?.to_device(&dev)
    };
    let bf = |dims: (usize, usize, usize, usize)| Tensor::zeros(dims, DType::BF16, &dev);
    // (b, h, s, d) transposed to (b, s, h, d): strided.
    let q8 = f8((2, 4, 8, 64))?.transpose(1, 2)?;
    let k = bf((2, 8, 4, 64))?;
    let p = cudnn_candle::AttnParams::new(0.125);
    refused(cudnn_candle::flash_attn_with(&q8, &k, &k, &p), "q dtype")?;
    let k8 = f8((2, 4, 8, 64))?.transpose(1, 2)?;
    let q = bf((2, 8, 4, 64))?;
    refused(
        cudnn_candle::flash_attn_with(&q, &k8, &k8, &p),
        "k dtype (q's)",
    )?;
    let lens = Tensor::new(&[3u32, 8], &dev)?;
    refused(
        cudnn_candle::flash_attn_kvcache(&q8, &k, &k, &lens, &p),
        "q dtype",
    )?;
    // Paged: an offset F8 cache (a narrow of the first dim).
    let c8 = f8((5, 16, 4, 64))?.narrow(0, 1, 4)?;
    let table = Tensor::new(&[[0i32], [1]], &dev)?;
    let lens = Tensor::new(&[3i32, 16], &dev)?;
    let q1 = bf((2, 1, 4, 64))?;
    refused(
        cudnn_candle::flash_attn_paged(&q1, &c8, &c8, &table, &lens, &p),
        "k_cache dtype (q's)",
    )?;
    // Varlen: strided F8 q (total, h, d).
    let qv8 = f8((1, 4, 6, 64))?.squeeze(0)?.transpose(0, 1)?;
    let kv = Tensor::zeros((6, 4, 64), DType::BF16, &dev)?;
    let cu = Tensor::new(&[0u32, 2, 6], &dev)?;
    refused(
        cudnn_candle::flash_attn_varlen(&qv8, &kv, &kv, &cu, &cu, 4, 4, 0.125, true),
        "q dtype",
    )?;
    // conv2d: strided F8 x, f32 w.
    let x8 = f8((1, 5, 5, 3))?.permute((0, 3, 1, 2))?;
    let w = Tensor::zeros((2, 3, 3, 3), DType::F32, &dev)?;
    refused(cudnn_candle::conv2d(&x8, &w, 1, 1, 1, 1), "x dtype")?;
    let xf = Tensor::zeros((1, 3, 5, 5), DType::F32, &Device::Cpu)?.to_device(&dev)?;
    let w8 = f8((3, 3, 2, 3))?.permute((3, 2, 0, 1))?;
    refused(cudnn_candle::conv2d(&xf, &w8, 1, 1, 1, 1), "w dtype (x's)")
}

pub fn trials() -> Vec<Trial> {
    vec![gpu(
        "f8_inputs_refused_typed_before_a_copy",
        f8_inputs_refused_typed,
    )]
}
