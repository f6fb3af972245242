//! The varlen (packed) attention entry points: FlashAttention's
//! `flash_attn_varlen*` signatures on the attention op of
//! [`attn`](crate::attn), the cumulative lengths read to the host.

use candle_core::{DType as CDType, Tensor};
use cudnn::Error;

use crate::attn::{FlashAttn, VarlenArgs};
use crate::conv::for_cudnn;
use crate::device::{IntoCandle, to_candle};
use crate::params::AttnParams;
use crate::side::ready_params_rows;

fn host_seqlens(name: &str, t: &Tensor) -> candle_core::Result<Vec<u32>> {
    if t.dtype() != CDType::U32 || t.rank() != 1 {
        return Err(to_candle(Error::invalid(
            name,
            "must be a rank-1 u32 tensor of batch + 1 cumulative offsets",
            format!("{:?} {:?}", t.dtype(), t.dims()),
        )));
    }
    t.to_vec1::<u32>()
}

/// The most bytes a varlen ALiBi bias may take: the memory of q's CUDA
/// device. Checked first: q on a CUDA device and the slopes on q's device
/// (the bias is built on the slopes' device; built on the host, one sized
/// from a huge `max_seqlen_*` would abort the process before the device
/// mismatch was reported).
///
/// # Errors
/// q not on a CUDA device, slopes on another device (typed, naming
/// `alibi_slopes`), the driver's memory query.
pub(crate) fn bias_cap(op: &str, q: &Tensor, slopes: &Tensor) -> candle_core::Result<usize> {
    let candle_core::Device::Cuda(d) = q.device() else {
        return Err(crate::attn::on_cuda(op));
    };
    if !slopes.device().same_device(q.device()) {
        return Err(to_candle(Error::mismatch(
            "alibi_slopes device (q's)",
            format!("{:?}", q.device().location()),
            format!("{:?}", slopes.device().location()),
        )));
    }
    d.cuda_stream()
        .context()
        .total_mem()
        .map_err(|e| to_candle(cudnn::interop::driver_error("cuDeviceTotalMem", e)))
}

/// Varlen attention with all options: sequences packed one after the other,
/// `q` `(total_q, heads, head_dim)`, `k` `(total_kv, kv_heads,
/// head_dim)`, `v` `(total_kv, kv_heads, head_dim_v)`; `seqlens_q`,
/// `seqlens_k`: u32 `(batch + 1)` cumulative offsets from 0
/// (FlashAttention's `cu_seqlens`), read to the host and checked; each
/// sequence at most `max_seqlen_q` / `max_seqlen_k` long. Returns `(total_q,
/// heads, head_dim_v)`. Backed by the crate's ragged (THD) attention.
/// Differentiable in q, k, v and in sinks that track a gradient (their
/// gradient from the ragged training statistics, over each sequence's
/// valid rows); ALiBi slopes get none (as in FlashAttention).
///
/// # Errors
/// As [`flash_attn_with`](crate::flash_attn_with); the offsets' rules (typed, naming the entry); a
/// causal call in which a sequence has more queries than keys (its first
/// rows would see no key; FlashAttention writes zeros there, the crate
/// refuses it, typed, naming `seqlens_k`); with ALiBi slopes that need
/// the score bias, slopes on another device than q (typed, naming
/// `alibi_slopes`) and a bias `[batch, heads, max_seqlen_q, max_seqlen_k]`
/// f32 whose building (about `8 * heads + 32` bytes per `(batch, max_q,
/// max_k)` element at its peak) takes more than the device's total memory
/// (typed, naming `max_seqlen_q / max_seqlen_k`), both before the bias is
/// built, as are the op's shape checks. An accepted bias can still fail to
/// allocate on a device that holds other tensors (candle's error).
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_with(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    params: &AttnParams,
) -> candle_core::Result<Tensor> {
    crate::capture::refuse_inside(
        "flash_attn_varlen",
        "seqlens would be read on the host (a synchronization)",
    )?;
    crate::precheck::attn_inputs(["q", "k", "v"], [q, k, v], params)?;
    let (cu_q, cu_k) = (
        host_seqlens("seqlens_q", seqlens_q)?,
        host_seqlens("seqlens_k", seqlens_k)?,
    );
    if cu_q.len() >= 2 {
        crate::side::slope_batch(params, cu_q.len() - 1)?;
    }
    let (mut p, rows) = ready_params_rows(params)?;
    // Sinks that track a gradient (gpt-oss training): the op runs on them
    // detached, and `sink_grad` gives their gradient from the ragged
    // training statistics.
    let sink_var = p.sinks.as_ref().filter(|t| t.track_op()).cloned();
    if let Some(s) = &sink_var {
        p = p.sinks(Some(s.detach()));
    }
    if p.alibi_slopes.is_some() {
        // The op's shape checks before a score bias is built (device
        // work): p without the slopes and window the bias would hold.
        let st: Vec<Vec<usize>> = [q, k, v]
            .iter()
            .map(|t| crate::cache_alibi::packed_strides(t.dims()))
            .collect();
        let a = crate::cache_alibi::args(["q", "k", "v"], [q, k, v], &st);
        crate::params::varlen(
            &a[0],
            &a[1],
            &a[2],
            &cu_q,
            &cu_k,
            max_seqlen_q,
            max_seqlen_k,
            &p.clone().alibi_slopes(None).window(None, None),
        )
        .c()?;
    }
    let heads = if q.rank() == 3 { q.dim(1)? } else { 0 };
    let cap = match &p.alibi_slopes {
        Some(sl) => bias_cap("cudnn_candle::flash_attn_varlen", q, sl)?,
        None => 0,
    };
    let bias = crate::varlen_bias::varlen_alibi_bias_rows(
        &p,
        rows.as_ref(),
        (&cu_q, &cu_k),
        (q.dim(0)?, k.dim(0)?),
        (max_seqlen_q, max_seqlen_k),
        heads,
        cap,
    )?;
    if bias.is_some() {
        // The slopes and the mask are in the bias.
        p = p.alibi_slopes(None).window(None, None);
    }
    let op = FlashAttn {
        params: p,
        varlen: Some(VarlenArgs {
            seqlens_q: cu_q,
            seqlens_k: cu_k,
            max_q: max_seqlen_q,
            max_k: max_seqlen_k,
        }),
        cache_seqlens: None,
        bias,
    };
    let (qr, kr, vr) = (for_cudnn(q)?, for_cudnn(k)?, for_cudnn(v)?);
    match sink_var {
        Some(s) => {
            let grad = crate::sink_grad::SinkGrad::new(op.clone(), &qr, &kr, &vr);
            qr.apply_op3(&kr, &vr, op)?.apply_op2(&s, grad)
        }
        None => qr.apply_op3(&kr, &vr, op),
    }
}

/// FlashAttention's `flash_attn_varlen`: see [`flash_attn_varlen_with`].
///
/// # Errors
/// As [`flash_attn_varlen_with`].
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
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
        &AttnParams::new(softmax_scale).causal(causal),
    )
}

/// FlashAttention's `flash_attn_varlen_windowed`: see
/// [`flash_attn_varlen_with`] and [`flash_attn_windowed`](crate::flash_attn_windowed).
///
/// # Errors
/// As [`flash_attn_varlen_with`].
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
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
        &AttnParams::new(softmax_scale).window(window_size_left, window_size_right),
    )
}

#[cfg(test)]
mod tests {
    use candle_core::{DType, Device, Tensor};

    use super::*;

    /// Review finding 2: slopes given, a huge `max_seqlen_*`, tensors on
    /// the host: refused, typed, before any bias is built on the host
    /// (before: a `[B, H, max_q, max_k]` host buffer, a panic or an abort):
    /// a `max_seqlen_*` past i32 by the op's check, a smaller one as host
    /// tensors.
    #[test]
    fn host_tensors_with_slopes_and_huge_max_are_refused_typed() {
        let cpu = Device::Cpu;
        let q = Tensor::zeros((3, 1, 8), DType::F16, &cpu).unwrap();
        let k = Tensor::zeros((5, 1, 8), DType::F16, &cpu).unwrap();
        let cu_q = Tensor::new(&[0u32, 2, 3], &cpu).unwrap();
        let cu_k = Tensor::new(&[0u32, 3, 5], &cpu).unwrap();
        let slopes = Tensor::new(&[0.5f32], &cpu).unwrap();
        let p = AttnParams::new(1.0).alibi_slopes(Some(slopes));
        for m in [usize::MAX, 1 << 40, 1 << 20] {
            let e = flash_attn_varlen_with(&q, &k, &k, &cu_q, &cu_k, m, m, &p).unwrap_err();
            let candle_core::Error::Cuda(b) = &e else {
                panic!("not the crate's error: {e}");
            };
            let t = b.downcast_ref::<Error>().expect("typed");
            // The op's own check of max_seqlen_* (run before the bias
            // since review alibi defect 3), or the host refusal.
            let ok = matches!(t, Error::Unsupported { .. })
                || (matches!(t, Error::InvalidArgument { .. })
                    && t.to_string().contains("max_seqlen_q"));
            assert!(ok, "{t}");
        }
    }
}
