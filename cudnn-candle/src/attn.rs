//! The attention functions on candle tensors, as candle `CustomOp3`s:
//! `cuda_fwd` runs the crate's SDPA forward graph, `bwd` (candle's
//! autograd) runs the forward again in training mode (for the softmax
//! statistics, which a `CustomOp` cannot return beside its output) and then
//! the SDPA backward graph, giving dQ, dK, dV.

use crate::conv::for_cudnn;
use candle_core::backend::BackendStorage;
use candle_core::{
    CpuStorage, CudaStorage, CustomOp3, DType as CDType, Layout, Shape, Storage, Tensor,
};
use cudarc::driver::{CudaSlice, CudaView};
use cudnn::Error;

use crate::device::{IntoCandle, to_candle};
use crate::exec::{self, Elem, Extras, Side, count};
use crate::graphs::{self, bshd};
use crate::params::{self, Arg, AttnParams};
use crate::side::{alibi_bias_tensor, f32_view, ready_params, sink_decode_pad};
// The varlen entry points live in `varlen.rs`; their paths stay here.
pub use crate::varlen::{flash_attn_varlen, flash_attn_varlen_windowed, flash_attn_varlen_with};

/// The cumulative lengths of a varlen call (FlashAttention's `cu_seqlens`).
#[derive(Clone, Debug)]
pub(crate) struct VarlenArgs {
    pub(crate) seqlens_q: Vec<u32>,
    pub(crate) seqlens_k: Vec<u32>,
    pub(crate) max_q: usize,
    pub(crate) max_k: usize,
}

pub(crate) fn arg<'a>(name: &'a str, l: &'a Layout, dtype: CDType) -> Arg<'a> {
    Arg {
        name,
        dims: l.dims(),
        strides: l.stride(),
        dtype,
    }
}

pub(crate) fn on_cuda(op: &str) -> candle_core::Error {
    to_candle(Error::Unsupported {
        what: format!("{op} on the CPU"),
        needs: Some("tensors on a CUDA device (cudnn-candle runs cuDNN and cuBLASLt on candle's CUDA stream)".to_string()),
    })
}

pub(crate) fn view<'a, T: Elem>(
    s: &'a CudaStorage,
    l: &Layout,
    name: &str,
) -> candle_core::Result<CudaView<'a, T>> {
    let slice: &CudaSlice<T> = s.as_cuda_slice::<T>()?;
    slice.try_slice(l.start_offset()..).ok_or_else(|| {
        to_candle(Error::invalid(
            format!("{name} start offset"),
            format!("must be inside its buffer of {} elements", slice.len()),
            l.start_offset(),
        ))
    })
}

/// `b`'s element type is `a`'s (q's), the crate's typed error otherwise:
/// checked before the buffers are viewed as q's type (candle's own
/// `UnexpectedDType` would name no argument).
pub(crate) fn same_dtype(a: &CudaStorage, b: &CudaStorage, name: &str) -> candle_core::Result<()> {
    if a.dtype() != b.dtype() {
        return Err(to_candle(Error::mismatch(
            format!("{name} dtype (q's)"),
            format!("{:?}", a.dtype()),
            format!("{:?}", b.dtype()),
        )));
    }
    Ok(())
}

pub(crate) fn same_device(a: &CudaStorage, b: &CudaStorage, name: &str) -> candle_core::Result<()> {
    if a.device.id() != b.device.id() {
        return Err(to_candle(Error::mismatch(
            format!("{name} device (q's)"),
            format!("{:?}", a.device.id()),
            format!("{:?}", b.device.id()),
        )));
    }
    Ok(())
}

/// A copy of the first `n` elements of `src` into a new zeroed buffer of
/// `len` elements (a packed varlen tensor into the `[B, S_max]` span the
/// graph's tensor has), on candle's stream.
pub(crate) fn padded<T: Elem>(
    dev: &candle_core::CudaDevice,
    src: &CudaView<'_, T>,
    n: usize,
    len: usize,
) -> candle_core::Result<CudaSlice<T>> {
    let mut dst = dev.alloc_zeros::<T>(len)?;
    let (Some(s), Some(mut d)) = (src.try_slice(..n), dst.try_slice_mut(..n)) else {
        return Err(to_candle(Error::invalid(
            "varlen packed tensor",
            format!("must hold {n} elements and fit {len}"),
            src.len(),
        )));
    };
    dev.cuda_stream()
        .memcpy_dtod(&s, &mut d)
        .map_err(|e| to_candle(cudnn::interop::driver_error("cuMemcpyDtoDAsync", e)))?;
    Ok(dst)
}

/// candle's context current on this thread (the crate's synchronous
/// copies of lengths and offsets go to the current device).
pub(crate) fn bind_context(dev: &candle_core::CudaDevice) -> candle_core::Result<()> {
    dev.cuda_stream()
        .context()
        .bind_to_thread()
        .map_err(|e| to_candle(cudnn::interop::driver_error("bind_to_thread", e)))
}

/// The forward op.
#[derive(Clone, Debug)]
pub(crate) struct FlashAttn {
    pub(crate) params: AttnParams,
    pub(crate) varlen: Option<VarlenArgs>,
    /// A KV cache's valid lengths (forward only).
    pub(crate) cache_seqlens: Option<Vec<u32>>,
    /// FlashAttention's ALiBi as a score bias f32, mask included, where
    /// cuDNN's ALiBi cannot serve it: `(1, heads, seq_q, seq_kv)` in dense
    /// calls, `(batch, heads, seq_q, seq_kv)` (per sequence) in varlen and
    /// KV-cache calls.
    pub(crate) bias: Option<Tensor>,
}

impl FlashAttn {
    /// A KV-cache call's op (`params` ready, lengths on the host).
    pub(crate) fn kvcache(params: AttnParams, cache_seqlens: Vec<u32>) -> Self {
        FlashAttn {
            params,
            varlen: None,
            cache_seqlens: Some(cache_seqlens),
            bias: None,
        }
    }

    fn fwd<T: Elem>(
        &self,
        (q, ql): (&CudaStorage, &Layout),
        (k, kl): (&CudaStorage, &Layout),
        (v, vl): (&CudaStorage, &Layout),
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        same_device(q, k, "k")?;
        same_device(q, v, "v")?;
        same_dtype(q, k, "k")?;
        same_dtype(q, v, "v")?;
        let dev = &q.device;
        let (qa, ka, va) = (
            arg("q", ql, q.dtype()),
            arg("k", kl, k.dtype()),
            arg("v", vl, v.dtype()),
        );
        let (qv, kv, vv) = (
            view::<T>(q, ql, "q")?,
            view::<T>(k, kl, "k")?,
            view::<T>(v, vl, "v")?,
        );
        // The side inputs' storages, held while their views are used.
        let ga = self
            .params
            .alibi_slopes
            .as_ref()
            .map(|t| t.storage_and_layout());
        let gs = self.params.sinks.as_ref().map(|t| t.storage_and_layout());
        let gb = self.bias.as_ref().map(|t| t.storage_and_layout());
        let extras = Extras {
            bias: gb
                .as_ref()
                .map(|(st, l)| f32_view(st, l, q, "alibi bias"))
                .transpose()?,
            alibi: ga
                .as_ref()
                .map(|(st, l)| f32_view(st, l, q, "alibi_slopes"))
                .transpose()?,
            sink: gs
                .as_ref()
                .map(|(st, l)| f32_view(st, l, q, "sinks"))
                .transpose()?,
        };
        match &self.varlen {
            None => {
                let (d, side, kv_lens) = match &self.cache_seqlens {
                    None => {
                        let mut d = params::dense(&qa, &ka, &va, &self.params).c()?;
                        if self.bias.is_some() {
                            d.cfg = params::alibi::with_alibi_bias(d.cfg);
                        }
                        (d, None, None)
                    }
                    Some(lens) => {
                        let mut kc = params::kvcache(&qa, &ka, &va, lens, &self.params).c()?;
                        if self.bias.is_some() {
                            // FlashAttention's ALiBi per sequence (`cache_alibi`).
                            kc.dense.cfg = crate::varlen_bias::with_varlen_bias(kc.dense.cfg);
                        }
                        if crate::capture::is_capturing() {
                            // The lengths go to buffers the captured step
                            // owns (written before each launch).
                            let causal =
                                params::mask(&self.params, ql.dims()[1], kl.dims()[1], true)
                                    .c()?
                                    .causal;
                            let l = crate::capture::KvLens {
                                q: kc.lens_q,
                                kv: kc.lens_kv,
                                causal,
                                paged: None,
                            };
                            (kc.dense, None, Some(l))
                        } else {
                            bind_context(dev)?;
                            let side = Side::new(&kc.dense.cfg, &kc.lens_q, &kc.lens_kv).c()?;
                            (kc.dense, Some(side), None)
                        }
                    }
                };
                if !params::bshd_ordered(ql.dims(), ql.stride()) {
                    return Err(to_candle(Error::invalid(
                        "q strides",
                        "must order q as (batch, seq, heads, head_dim) (make it contiguous)",
                        format!("{:?}", ql.stride()),
                    )));
                }
                let (o, _) = match kv_lens {
                    Some(l) => crate::capture::forward(
                        dev,
                        &d.cfg,
                        &d.strides,
                        [&qv, &kv, &vv],
                        Some(l),
                        &extras,
                    )?,
                    None => exec::forward(
                        dev,
                        &d.cfg,
                        &d.strides,
                        [&qv, &kv, &vv],
                        side.as_ref(),
                        &extras,
                    )?,
                };
                let [b, sq, h] = [ql.dims()[0], ql.dims()[1], ql.dims()[2]];
                let shape = Shape::from((b, sq, h, vl.dims()[3]));
                Ok((CudaStorage::wrap_cuda_slice(o, dev.clone()), shape))
            }
            Some(a) => {
                let vr = params::varlen(
                    &qa,
                    &ka,
                    &va,
                    &a.seqlens_q,
                    &a.seqlens_k,
                    a.max_q,
                    a.max_k,
                    &self.params,
                )
                .c()?;
                let mut vr = vr;
                if self.bias.is_some() {
                    vr.cfg = crate::varlen_bias::with_varlen_bias(vr.cfg);
                }
                let [qd, kd, vd, _] = graphs::dims(&vr.cfg);
                let qp = padded(dev, &qv, ql.shape().elem_count(), count(&qd).c()?)?;
                let kp = padded(dev, &kv, kl.shape().elem_count(), count(&kd).c()?)?;
                let vp = padded(dev, &vv, vl.shape().elem_count(), count(&vd).c()?)?;
                bind_context(dev)?;
                let side = Side::new(&vr.cfg, &vr.lens_q, &vr.lens_kv).c()?;
                let strides = [bshd(qd), bshd(kd), bshd(vd)];
                let (o, _) = exec::forward(
                    dev,
                    &vr.cfg,
                    &strides,
                    [&qp.as_view(), &kp.as_view(), &vp.as_view()],
                    Some(&side),
                    &extras,
                )?;
                // O holds `total_q` packed tokens first (the offsets start
                // at 0): candle's contiguous (total_q, h, d_v) over its prefix.
                let shape = Shape::from((ql.dims()[0], ql.dims()[1], vl.dims()[2]));
                Ok((CudaStorage::wrap_cuda_slice(o, dev.clone()), shape))
            }
        }
    }
}

impl CustomOp3 for FlashAttn {
    fn name(&self) -> &'static str {
        "cudnn-flash-attn"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        Err(on_cuda("cudnn_candle::flash_attn"))
    }

    fn cuda_fwd(
        &self,
        q: &CudaStorage,
        ql: &Layout,
        k: &CudaStorage,
        kl: &Layout,
        v: &CudaStorage,
        vl: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        match q.dtype() {
            CDType::F16 => self.fwd::<half::f16>((q, ql), (k, kl), (v, vl)),
            CDType::BF16 => self.fwd::<half::bf16>((q, ql), (k, kl), (v, vl)),
            other => Err(to_candle(Error::invalid(
                "q dtype",
                "must be f16 or bf16 (cuDNN's fused attention)",
                format!("{other:?}"),
            ))),
        }
    }

    fn bwd(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        _o: &Tensor,
        grad_o: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        if self.cache_seqlens.is_some() {
            return Err(to_candle(Error::Unsupported {
                what: "the backward of flash_attn_kvcache".to_string(),
                needs: Some("flash_attn / flash_attn_varlen for training".to_string()),
            }));
        }
        let (q, k, v) = (for_cudnn(q)?, for_cudnn(k)?, for_cudnn(v)?);
        let op = FlashAttnBwd {
            fwd: self.clone(),
            grad_o: for_cudnn(grad_o)?,
        };
        let flat = q.apply_op3_no_bwd(&k, &v, &op)?;
        let (nq, nk, nv) = (q.elem_count(), k.elem_count(), v.elem_count());
        let dq = flat.narrow(0, 0, nq)?.reshape(q.shape())?;
        let dk = flat.narrow(0, nq, nk)?.reshape(k.shape())?;
        let dv = flat.narrow(0, nq + nk, nv)?.reshape(v.shape())?;
        Ok((Some(dq), Some(dk), Some(dv)))
    }
}

/// The backward op: output dQ, dK, dV one after the other, flat.
#[derive(Clone, Debug)]
struct FlashAttnBwd {
    fwd: FlashAttn,
    grad_o: Tensor,
}

impl FlashAttnBwd {
    fn run<T: Elem>(
        &self,
        (q, ql): (&CudaStorage, &Layout),
        (k, kl): (&CudaStorage, &Layout),
        (v, vl): (&CudaStorage, &Layout),
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        same_device(q, k, "k")?;
        same_device(q, v, "v")?;
        same_dtype(q, k, "k")?;
        same_dtype(q, v, "v")?;
        let dev = &q.device;
        let (qa, ka, va) = (
            arg("q", ql, q.dtype()),
            arg("k", kl, k.dtype()),
            arg("v", vl, v.dtype()),
        );
        let (cfg, side) = match &self.fwd.varlen {
            None => {
                let mut d = params::dense(&qa, &ka, &va, &self.fwd.params).c()?;
                if self.fwd.bias.is_some() {
                    d.cfg = params::alibi::with_alibi_bias(d.cfg);
                }
                let [qd, kd, vd, _] = graphs::dims(&d.cfg);
                if d.strides != [bshd(qd), bshd(kd), bshd(vd)] {
                    return Err(to_candle(Error::invalid(
                        "q, k, v strides (backward)",
                        "must be contiguous",
                        format!("{:?}", d.strides),
                    )));
                }
                (d.cfg, None)
            }
            Some(a) => {
                let vr = params::varlen(
                    &qa,
                    &ka,
                    &va,
                    &a.seqlens_q,
                    &a.seqlens_k,
                    a.max_q,
                    a.max_k,
                    &self.fwd.params,
                )
                .c()?;
                let mut vr = vr;
                if self.fwd.bias.is_some() {
                    vr.cfg = crate::varlen_bias::with_varlen_bias(vr.cfg);
                }
                bind_context(dev)?;
                let side = Side::new(&vr.cfg, &vr.lens_q, &vr.lens_kv).c()?;
                (vr.cfg, Some(side))
            }
        };
        let cfg = cfg.training(true);
        let [qd, kd, vd, od] = graphs::dims(&cfg);
        let (nq, nk, nv) = (
            ql.shape().elem_count(),
            kl.shape().elem_count(),
            vl.shape().elem_count(),
        );
        let (st, gl) = self.grad_o.storage_and_layout();
        let Storage::Cuda(g) = &*st else {
            return Err(on_cuda("cudnn_candle attention backward (grad)"));
        };
        same_device(q, g, "grad of the output")?;
        same_dtype(q, g, "grad of the output")?;
        let n_o = count(&od).c()?;
        let want_o: &[usize] = if self.fwd.varlen.is_some() {
            &[ql.dims()[0], ql.dims()[1], vl.dims()[vl.dims().len() - 1]]
        } else {
            &[ql.dims()[0], ql.dims()[1], ql.dims()[2], vl.dims()[3]]
        };
        if gl.dims() != want_o || !gl.is_contiguous() || g.dtype() != q.dtype() {
            return Err(to_candle(Error::mismatch(
                "grad of the output (contiguous, q's dtype)",
                format!("{want_o:?} {:?}", q.dtype()),
                format!(
                    "{:?} {:?} contiguous={}",
                    gl.dims(),
                    g.dtype(),
                    gl.is_contiguous()
                ),
            )));
        }
        let (qv, kv, vv) = (
            view::<T>(q, ql, "q")?,
            view::<T>(k, kl, "k")?,
            view::<T>(v, vl, "v")?,
        );
        let gv = view::<T>(g, gl, "grad")?;
        // Varlen: everything in the graph's `[B, S_max]` span (copies).
        let pads = if side.is_some() {
            Some((
                padded(dev, &qv, nq, count(&qd).c()?)?,
                padded(dev, &kv, nk, count(&kd).c()?)?,
                padded(dev, &vv, nv, count(&vd).c()?)?,
                padded(dev, &gv, gl.shape().elem_count(), n_o)?,
            ))
        } else {
            None
        };
        let (qv, kv, vv, gv) = match &pads {
            Some((a, b, c, d)) => (a.as_view(), b.as_view(), c.as_view(), d.as_view()),
            None => (qv, kv, vv, gv),
        };
        let strides = [bshd(qd), bshd(kd), bshd(vd)];
        // The side inputs' storages, held while their views are used.
        let ga = self
            .fwd
            .params
            .alibi_slopes
            .as_ref()
            .map(|t| t.storage_and_layout());
        let gs = self
            .fwd
            .params
            .sinks
            .as_ref()
            .map(|t| t.storage_and_layout());
        let gb = self.fwd.bias.as_ref().map(|t| t.storage_and_layout());
        let extras = Extras {
            bias: gb
                .as_ref()
                .map(|(st, l)| f32_view(st, l, q, "alibi bias"))
                .transpose()?,
            alibi: ga
                .as_ref()
                .map(|(st, l)| f32_view(st, l, q, "alibi_slopes"))
                .transpose()?,
            sink: gs
                .as_ref()
                .map(|(st, l)| f32_view(st, l, q, "sinks"))
                .transpose()?,
        };
        let (o, stats) =
            exec::forward(dev, &cfg, &strides, [&qv, &kv, &vv], side.as_ref(), &extras)?;
        let stats = stats.ok_or_else(|| {
            to_candle(Error::invalid(
                "training forward",
                "must give statistics",
                "none",
            ))
        })?;
        let total = nq
            .checked_add(nk)
            .and_then(|n| n.checked_add(nv))
            .ok_or_else(|| to_candle(Error::invalid("gradient sizes", "must fit usize", nq)))?;
        let mut flat = dev.alloc_zeros::<T>(total)?;
        if side.is_none() {
            let split = |e: &str| {
                to_candle(Error::invalid(
                    "gradient buffer",
                    "must split",
                    e.to_string(),
                ))
            };
            let (mut dq, mut rest) = flat.try_split_at_mut(nq).ok_or_else(|| split("dq"))?;
            let (mut dk, mut dv) = rest.try_split_at_mut(nk).ok_or_else(|| split("dk"))?;
            exec::backward(
                dev,
                &cfg,
                [&qv, &kv, &vv, &o.as_view(), &gv],
                &stats,
                None,
                &extras,
                [&mut dq, &mut dk, &mut dv],
            )?;
        } else {
            let mut dqp = dev.alloc_zeros::<T>(count(&qd).c()?)?;
            let mut dkp = dev.alloc_zeros::<T>(count(&kd).c()?)?;
            let mut dvp = dev.alloc_zeros::<T>(count(&vd).c()?)?;
            exec::backward(
                dev,
                &cfg,
                [&qv, &kv, &vv, &o.as_view(), &gv],
                &stats,
                side.as_ref(),
                &extras,
                [
                    &mut dqp.as_view_mut(),
                    &mut dkp.as_view_mut(),
                    &mut dvp.as_view_mut(),
                ],
            )?;
            // The packed tokens are each gradient's prefix.
            let stream = dev.cuda_stream();
            let mut at = 0usize;
            for (src, n) in [(&dqp, nq), (&dkp, nk), (&dvp, nv)] {
                let (Some(s), Some(mut d)) = (src.try_slice(..n), flat.try_slice_mut(at..at + n))
                else {
                    return Err(to_candle(Error::invalid("gradient copy", "must fit", n)));
                };
                stream
                    .memcpy_dtod(&s, &mut d)
                    .map_err(|e| to_candle(cudnn::interop::driver_error("cuMemcpyDtoDAsync", e)))?;
                at += n;
            }
        }
        Ok((
            CudaStorage::wrap_cuda_slice(flat, dev.clone()),
            Shape::from(total),
        ))
    }
}

impl CustomOp3 for FlashAttnBwd {
    fn name(&self) -> &'static str {
        "cudnn-flash-attn-bwd"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        Err(on_cuda("cudnn_candle attention backward"))
    }

    fn cuda_fwd(
        &self,
        q: &CudaStorage,
        ql: &Layout,
        k: &CudaStorage,
        kl: &Layout,
        v: &CudaStorage,
        vl: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        match q.dtype() {
            CDType::F16 => self.run::<half::f16>((q, ql), (k, kl), (v, vl)),
            CDType::BF16 => self.run::<half::bf16>((q, ql), (k, kl), (v, vl)),
            other => Err(to_candle(Error::invalid(
                "q dtype",
                "must be f16 or bf16 (cuDNN's fused attention)",
                format!("{other:?}"),
            ))),
        }
    }
}

/// q as the op needs it: its strides ordered (batch, seq, heads, head_dim)
/// with the head dim contiguous (else a contiguous copy, so the output is
/// candle-contiguous).
pub(crate) fn q_ready(q: &Tensor) -> candle_core::Result<Tensor> {
    crate::precheck::attn_input("q", q)?;
    crate::precheck::prepared();
    if q.stride().last() == Some(&1) && params::bshd_ordered(q.dims(), q.stride()) {
        aligned(q.clone())
    } else {
        for_cudnn(q)
    }
}

/// `t` itself where its start and every stride but the last (1) meet
/// cuDNN's 16-byte rule for bound memory (each row a head dim begins must
/// be aligned too: the tensors are declared with 16-byte alignment), else
/// a fresh packed copy (a view such as `narrow` may start, or step, anywhere).
fn aligned(t: Tensor) -> candle_core::Result<Tensor> {
    let size = t.dtype().size_in_bytes();
    let strides_ok = t
        .dims()
        .iter()
        .zip(t.stride())
        .all(|(&d, &s)| d == 1 || s == 1 || s.checked_mul(size).is_some_and(|b| b % 16 == 0));
    if strides_ok && crate::conv::offset_aligned(t.layout().start_offset(), size) {
        Ok(t)
    } else {
        t.force_contiguous()
    }
}

/// The key count of a dense k (or a KV cache's capacity): dim 1 of a
/// rank-4 tensor; `usize::MAX` otherwise (the op refuses the rank).
pub(crate) fn kv_len(k: &Tensor) -> usize {
    match k.dims() {
        [_, s, _, _] => *s,
        _ => usize::MAX,
    }
}

/// k or v as the op needs it: the head dim contiguous, no broadcast
/// stride; its dtype checked first (named `k / v`: see [`kv_ready_named`]).
pub(crate) fn kv_ready(t: &Tensor) -> candle_core::Result<Tensor> {
    kv_ready_named("k / v", t)
}

/// [`kv_ready`], a refused dtype naming `name`.
pub(crate) fn kv_ready_named(name: &str, t: &Tensor) -> candle_core::Result<Tensor> {
    crate::precheck::attn_input(name, t)?;
    crate::precheck::prepared();
    let ok = t.stride().last() == Some(&1)
        && t.dims()
            .iter()
            .zip(t.stride())
            .all(|(&d, &s)| d == 1 || s != 0);
    if ok { aligned(t.clone()) } else { for_cudnn(t) }
}

/// Attention with all options ([`AttnParams`]): `q` `(batch, seq_q,
/// heads, head_dim)`, `k` `(batch, seq_kv, kv_heads, head_dim)`, `v`
/// `(batch, seq_kv, kv_heads, head_dim_v)`, f16 or bf16 on a CUDA device;
/// returns `(batch, seq_q, heads, head_dim_v)`. Differentiable (candle's
/// `backward`).
///
/// # Errors
/// A shape, dtype, device or window that does not fit (a
/// `candle_core::Error::Cuda` holding the typed [`cudnn::Error`]);
/// planning or running (a causal call with `seq_q > seq_kv`, whose first
/// rows see no key, is refused by the planning, typed `Unsupported`;
/// FlashAttention writes zeros there).
pub fn flash_attn_with(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    params: &AttnParams,
) -> candle_core::Result<Tensor> {
    let admit = crate::capture::admit("attention")?;
    crate::precheck::attn_inputs(["q", "k", "v"], [q, k, v], params)?;
    if let Some((q2, p2)) = sink_decode_pad(q, kv_len(k), params)? {
        if admit.is_some() {
            return Err(to_candle(crate::capture::refusal(
                "attention (sinks, one query)",
                "a one-row call with sinks runs on a two-row copy of q made now",
            )));
        }
        return flash_attn_with(&q2, k, v, &p2)?.narrow(1, 1, 1);
    }
    if admit.is_some() && params.alibi_slopes.as_ref().is_some_and(|t| t.rank() != 1) {
        return Err(to_candle(crate::capture::refusal(
            "attention (ALiBi)",
            "(batch, heads) slopes are read on the host; give (heads,) slopes",
        )));
    }
    if let [b, _, _, _] = q.dims() {
        crate::side::slope_batch(params, *b)?;
    }
    let mut p = ready_params(params)?;
    crate::capture::no_side_copy(&admit, params, &p)?;
    // Sinks that track a gradient (gpt-oss training): the op runs on them
    // detached, and `sink_grad` gives their gradient.
    let sink_var = p.sinks.as_ref().filter(|t| t.track_op()).cloned();
    if let Some(s) = &sink_var {
        if admit.is_some() {
            return Err(to_candle(crate::capture::refusal(
                "attention (sinks tracking a gradient)",
                "a capture holds forwards only",
            )));
        }
        p = p.sinks(Some(s.detach()));
    }
    let mut bias = None;
    if let (Some(sl), 4, 4) = (p.alibi_slopes.clone(), q.rank(), k.rank()) {
        let (sq, skv, h) = (q.dim(1)?, k.dim(1)?, q.dim(2)?);
        if !matches!(params::alibi::alibi_native(&p, sq, skv), Ok(true)) {
            bias = Some(alibi_bias_tensor(&sl, &p, (sq, skv, h))?);
            p = p.alibi_slopes(None).window(None, None);
        }
    }
    let side: Vec<Tensor> = [&p.alibi_slopes, &p.sinks, &bias]
        .into_iter()
        .flatten()
        .cloned()
        .collect();
    let op = FlashAttn {
        params: p,
        varlen: None,
        cache_seqlens: None,
        bias,
    };
    let (qr, kr, vr) = (
        q_ready(q)?,
        kv_ready_named("k", k)?,
        kv_ready_named("v", v)?,
    );
    for (name, t, r) in [("q", q, &qr), ("k", k, &kr), ("v", v, &vr)] {
        crate::capture::no_copy(&admit, name, t, r)?;
    }
    let o = match sink_var {
        Some(s) => {
            let grad = crate::sink_grad::SinkGrad::new(op.clone(), &qr, &kr, &vr);
            qr.apply_op3(&kr, &vr, op)?.apply_op2(&s, grad)?
        }
        None => qr.apply_op3(&kr, &vr, op)?,
    };
    if let Some(a) = admit {
        // The graph addresses these: kept for as long as the step lives.
        a.keep([&qr, &kr, &vr, &o].into_iter().chain(&side));
    }
    Ok(o)
}

/// Attention against a KV cache of fixed capacity (FlashAttention's
/// `flash_attn_with_kvcache` with `cache_seqlens`): `q` `(batch, seq_q,
/// heads, head_dim)`, `k_cache` / `v_cache` `(batch, capacity, kv_heads,
/// head_dim)`, of which the first `cache_seqlens[b]` keys of sequence `b`
/// are valid (u32 `(batch,)`, read to the host and checked against the
/// capacity); the causal diagonal is bottom-right per sequence. The graph
/// depends on the capacity, not on the lengths: a decode loop plans once.
/// Forward only.
///
/// ALiBi slopes ([`AttnParams::alibi_slopes`], FlashAttention's
/// `alibi_slopes` of `flash_attn_with_kvcache`) add `-slope * |i +
/// cache_seqlens[b] - seq_q - j|` per sequence: cuDNN's ALiBi when the call
/// is causal and every length is `seq_q` (a prefill into empty caches),
/// otherwise a `[batch, heads, seq_q, capacity]` f32 score bias built on
/// the device each call (4 bytes per element; the mask goes into it;
/// building it takes about `8 * heads + 32` bytes per `(batch, seq_q,
/// capacity)` element at its peak, checked against the device's total
/// memory: on a device that holds other tensors an accepted size can
/// still fail to allocate, candle's error).
///
/// # Errors
/// As [`flash_attn_with`]; a length past the capacity or a count other
/// than the batch, or, causal, shorter than `seq_q` (rows with no key,
/// where FlashAttention writes zeros), typed, naming `cache_seqlens`;
/// with ALiBi, a score bias whose building takes more than the device's
/// memory (typed), after the op's shape checks (no device work before).
pub fn flash_attn_kvcache(
    q: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    cache_seqlens: &Tensor,
    params: &AttnParams,
) -> candle_core::Result<Tensor> {
    if cache_seqlens.dtype() != CDType::U32 || cache_seqlens.rank() != 1 {
        return Err(to_candle(Error::invalid(
            "cache_seqlens",
            "must be a rank-1 u32 tensor of one length per sequence",
            format!("{:?} {:?}", cache_seqlens.dtype(), cache_seqlens.dims()),
        )));
    }
    crate::capture::refuse_inside(
        "flash_attn_kvcache",
        "cache_seqlens would be read on the host (a synchronization)",
    )?;
    crate::precheck::attn_inputs(["q", "k_cache", "v_cache"], [q, k_cache, v_cache], params)?;
    if let Some((q2, p2)) = sink_decode_pad(q, kv_len(k_cache), params)? {
        return flash_attn_kvcache(&q2, k_cache, v_cache, cache_seqlens, &p2)?.narrow(1, 1, 1);
    }
    let lens = cache_seqlens.to_vec1::<u32>()?;
    let wide: Vec<i64> = lens.iter().map(|&l| i64::from(l)).collect();
    if let [b, _, _, _] = q.dims() {
        crate::side::slope_batch(params, *b)?;
    }
    let ready = crate::side::ready_params_rows(params)?;
    // The op's shape checks before a score bias is built (device work).
    crate::cache_alibi::shapes_first(&ready.0, [q, k_cache, v_cache], &wide, None)?;
    let (p, bias) = crate::cache_alibi::for_call(
        "cudnn_candle::flash_attn_kvcache",
        q,
        ready,
        &wide,
        kv_len(k_cache),
    )?;
    let op = FlashAttn {
        params: p,
        varlen: None,
        cache_seqlens: Some(lens),
        bias,
    };
    q_ready(q)?.apply_op3(
        &kv_ready_named("k_cache", k_cache)?,
        &kv_ready_named("v_cache", v_cache)?,
        op,
    )
}

/// FlashAttention: `softmax(softmax_scale * q kᵀ) v` per head, causal
/// (bottom-right aligned, as FlashAttention) or not. Layout `(batch, seq,
/// heads, head_dim)`; `k`, `v` may have fewer heads (grouped-query).
///
/// # Errors
/// As [`flash_attn_with`].
pub fn flash_attn(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    softmax_scale: f32,
    causal: bool,
) -> candle_core::Result<Tensor> {
    flash_attn_with(q, k, v, &AttnParams::new(softmax_scale).causal(causal))
}

/// FlashAttention with a sliding window: query `i` (at diagonal position
/// `i + seq_kv - seq_q`) sees keys from `window_size_left` before to
/// `window_size_right` after it (`None`: unbounded; `Some(0)` right: causal).
///
/// # Errors
/// As [`flash_attn_with`]; a right window other than `None`, `Some(0)` or
/// one reaching the last key; a left window without a causal right bound
/// when `seq_q > seq_kv + 1` (FlashAttention's right bound at `seq_kv`
/// then cuts the first rows: see [`params::mask`]).
pub fn flash_attn_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> candle_core::Result<Tensor> {
    flash_attn_with(
        q,
        k,
        v,
        &AttnParams::new(softmax_scale).window(window_size_left, window_size_right),
    )
}

/// FlashAttention with a logit softcap (Gemma 2): scores `s` become
/// `softcap * tanh(s / softcap)` before the mask.
///
/// # Errors
/// As [`flash_attn_with`]; a softcap not finite and > 0.
pub fn flash_attn_softcap(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    softmax_scale: f32,
    softcap: f32,
    causal: bool,
) -> candle_core::Result<Tensor> {
    flash_attn_with(
        q,
        k,
        v,
        &AttnParams::new(softmax_scale)
            .causal(causal)
            .softcap(Some(softcap)),
    )
}
