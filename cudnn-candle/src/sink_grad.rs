//! The gradient of attention sinks (gpt-oss trains them), through candle's
//! autograd. A `CustomOp3` gives gradients of its three tensors only (q,
//! k, v), so a call whose sinks track a gradient runs the attention on
//! them detached and passes its output through [`SinkGrad`], a `CustomOp2`
//! of `(o, sinks)` whose forward is `o` (a copy) and whose backward gives
//! `o`'s gradient unchanged and the sinks':
//!
//! with `p_sink = exp(sink_h - L)` the sink's share of each row's softmax
//! (`L` the row's log-sum-exp, the sink included: cuDNN's training
//! statistics) and `D = rowsum(dO ⊙ O)`, `dSink_h = -Σ_{b,i} p_sink[b,h,i] *
//! D[b,h,i]` (the derivative of `o_i = Σ_j p_ij v_j` through the
//! denominator the sink joins, derived here and checked on a GPU against
//! candle's CPU autograd of the reference; NVIDIA's frontend builds its
//! dSink from the same two quantities, but this crate does not use it and
//! has not compared its sign convention). The statistics come from the
//! attention's training forward (cuDNN), run again in the backward, as
//! the q, k, v gradients do; the rest is a few candle ops.

use candle_core::backend::BackendStorage;
use candle_core::{
    CpuStorage, CudaStorage, CustomOp2, CustomOp3, DType as CDType, Layout, Shape, Tensor,
};
use cudnn::Error;

use crate::attn::{FlashAttn, arg, bind_context, on_cuda, padded, same_device, same_dtype, view};
use crate::device::{IntoCandle, to_candle};
use crate::exec::{self, Elem, Extras, Side, count};
use crate::graphs::{self, bshd};
use crate::params;
use crate::side::f32_view;

/// `o` unchanged forward; backward: `dO` and `dSink` (see the module docs).
#[derive(Clone, Debug)]
pub(crate) struct SinkGrad {
    fwd: FlashAttn,
    q: Tensor,
    k: Tensor,
    v: Tensor,
}

impl SinkGrad {
    /// For the attention `fwd` (its sinks detached) of `q`, `k`, `v` as
    /// bound.
    pub(crate) fn new(fwd: FlashAttn, q: &Tensor, k: &Tensor, v: &Tensor) -> Self {
        SinkGrad {
            fwd,
            q: q.detach(),
            k: k.detach(),
            v: v.detach(),
        }
    }
}

impl CustomOp2 for SinkGrad {
    fn name(&self) -> &'static str {
        "cudnn-attn-sink-grad"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        Err(on_cuda("cudnn_candle attention sinks"))
    }

    fn cuda_fwd(
        &self,
        o: &CudaStorage,
        ol: &Layout,
        _: &CudaStorage,
        _: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        if !ol.is_contiguous() || ol.start_offset() != 0 {
            return Err(to_candle(Error::invalid(
                "attention output (sink gradient)",
                "must be the op's own contiguous output",
                format!("{:?} at {}", ol.stride(), ol.start_offset()),
            )));
        }
        Ok((o.try_clone(ol)?, ol.shape().clone()))
    }

    fn bwd(
        &self,
        o: &Tensor,
        sinks: &Tensor,
        _res: &Tensor,
        grad_o: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let h = sinks.dims1()?;
        // (b, h, s_q, 1) f32: the row log-sum-exps, the sink included.
        let stats = self
            .q
            .apply_op3_no_bwd(&self.k, &self.v, &Stats(self.fwd.clone()))?;
        if let Some(a) = &self.fwd.varlen {
            // Packed (total_q, h, d_v): each token's row of the padded
            // statistics, as one batch of total_q rows.
            let lens = params::lengths("seqlens_q", &a.seqlens_q, o.dim(0)?, a.max_q).c()?;
            let lse = token_stats(&stats, &lens, a.max_q)?;
            let d = d_sink(&o.unsqueeze(0)?, &grad_o.unsqueeze(0)?, &lse, sinks)?;
            return Ok((Some(grad_o.clone()), Some(d)));
        }
        let (b, sq) = (o.dim(0)?, o.dim(1)?);
        if stats.dims() != [b, h, sq, 1] {
            return Err(to_candle(Error::mismatch(
                "attention statistics (sink gradient)",
                format!("{:?}", [b, h, sq, 1]),
                format!("{:?}", stats.dims()),
            )));
        }
        let d_sink = d_sink(o, grad_o, &stats, sinks)?;
        Ok((Some(grad_o.clone()), Some(d_sink)))
    }
}

/// The rows of padded statistics `[B, H, max_q, 1]` that hold a token of
/// a varlen call (sequence `b`'s first `lens[b]` rows), in packed token
/// order, as `[1, H, total_q, 1]` (one batch of `total_q` rows: what
/// [`d_sink`] takes beside the packed `o` and `dO` unsqueezed). The
/// padding rows (never computed) are left out.
///
/// # Errors
/// Statistics of another shape, an index past u32 (typed); candle's.
pub(crate) fn token_stats(
    stats: &Tensor,
    lens: &[i32],
    max_q: usize,
) -> candle_core::Result<Tensor> {
    let (b, h) = (lens.len(), stats.dim(1)?);
    if stats.dims() != [b, h, max_q, 1] {
        return Err(to_candle(Error::mismatch(
            "attention statistics (varlen sink gradient)",
            format!("{:?}", [b, h, max_q, 1]),
            format!("{:?}", stats.dims()),
        )));
    }
    let mut idx = Vec::new();
    for (s, &l) in lens.iter().enumerate() {
        for i in 0..usize::try_from(l).unwrap_or(0) {
            let at = s
                .checked_mul(max_q)
                .and_then(|x| x.checked_add(i))
                .and_then(|x| u32::try_from(x).ok())
                .ok_or_else(|| {
                    to_candle(Error::invalid(
                        "varlen statistics rows (batch x max_seqlen_q)",
                        "must fit u32",
                        format!("{b} x {max_q}"),
                    ))
                })?;
            idx.push(at);
        }
    }
    let n = idx.len();
    let idx = Tensor::from_vec(idx, n, stats.device())?;
    // [B, H, max_q] -> [B, max_q, H] -> [B * max_q, H] -> tokens.
    stats
        .squeeze(3)?
        .transpose(1, 2)?
        .contiguous()?
        .reshape((b * max_q, h))?
        .index_select(&idx, 0)?
        .t()?
        .contiguous()?
        .reshape((1, h, n, 1))
}

/// `dSink_h = -Σ_{b,i} exp(sink_h - L[b,h,i]) * rowsum(dO ⊙ O)[b,i,h]`:
/// `o`, `grad_o` `(b, s_q, h, d_v)`, `stats` (the log-sum-exps, the sink
/// included) `(b, h, s_q, 1)`, `sinks` `(h,)`; in the sinks' dtype.
///
/// # Errors
/// Shapes that do not fit (candle's).
pub(crate) fn d_sink(
    o: &Tensor,
    grad_o: &Tensor,
    stats: &Tensor,
    sinks: &Tensor,
) -> candle_core::Result<Tensor> {
    let h = sinks.dims1()?;
    // D = rowsum(dO ⊙ O): (b, s_q, h) -> (b, h, s_q).
    let d = (grad_o.to_dtype(CDType::F32)? * o.to_dtype(CDType::F32)?)?
        .sum(3)?
        .transpose(1, 2)?;
    let p_sink = sinks
        .detach()
        .to_dtype(CDType::F32)?
        .reshape((1, h, 1))?
        .broadcast_sub(&stats.squeeze(3)?)?
        .exp()?;
    (p_sink * d)?.sum((0, 2))?.neg()?.to_dtype(sinks.dtype())
}

#[cfg(test)]
mod tests {
    use candle_core::{D, Device, Tensor, Var};

    use super::{d_sink, token_stats};

    /// Attention with a sink logit per head on the CPU in f32, q `(1, h,
    /// sq, d)`, k / v `(1, h, skv, d)`: the output `(1, sq, h, d)` and the
    /// row log-sum-exps `(1, h, sq, 1)`, the sink included (cuDNN's
    /// training statistics). Differentiable in the sinks.
    fn with_sink(q: &Tensor, k: &Tensor, v: &Tensor, sinks: &Tensor) -> (Tensor, Tensor) {
        let (_, h, sq, _) = q.dims4().unwrap();
        let skv = k.dim(2).unwrap();
        let s = (q.matmul(&k.t().unwrap()).unwrap() * 0.5).unwrap();
        let col = sinks
            .reshape((1, h, 1, 1))
            .unwrap()
            .broadcast_as((1, h, sq, 1))
            .unwrap();
        let s = Tensor::cat(&[&s, &col], 3).unwrap();
        let m = s.max_keepdim(D::Minus1).unwrap().detach();
        let e = s.broadcast_sub(&m).unwrap().exp().unwrap();
        let lse = (e.sum_keepdim(D::Minus1).unwrap().log().unwrap() + &m).unwrap();
        let p = s
            .broadcast_sub(&lse)
            .unwrap()
            .exp()
            .unwrap()
            .narrow(3, 0, skv)
            .unwrap();
        let o = p
            .matmul(v)
            .unwrap()
            .transpose(1, 2)
            .unwrap()
            .contiguous()
            .unwrap();
        (o, lse)
    }

    /// Varlen: the closed form over packed tokens, their statistics
    /// gathered from padded `[B, H, max_q, 1]` rows by `token_stats`,
    /// against candle's CPU autograd of each sequence's attention (the
    /// loss summed over the sequences, one shared sinks tensor). The
    /// padding rows hold -1000 (exp(sink + 1000) would swamp the sum if
    /// one were read).
    #[test]
    fn varlen_closed_form_matches_autograd() {
        let cpu = &Device::Cpu;
        let (h, d, max_q) = (3usize, 4usize, 5usize);
        let seqs = [(3usize, 4usize), (5, 6), (1, 2)];
        let sinks = Var::from_tensor(&Tensor::randn(0f32, 1.0, h, cpu).unwrap()).unwrap();
        let (mut os, mut ws, mut stats) = (vec![], vec![], vec![]);
        let mut loss: Option<Tensor> = None;
        for &(lq, lk) in &seqs {
            let r = |n| Tensor::randn(0f32, 1.0, (1, h, n, d), cpu).unwrap();
            let (o, lse) = with_sink(&r(lq), &r(lk), &r(lk), sinks.as_tensor());
            let w = Tensor::randn(0f32, 1.0, (1, lq, h, d), cpu).unwrap();
            let l = (&o * &w).unwrap().sum_all().unwrap();
            loss = Some(match loss {
                None => l,
                Some(t) => t.add(&l).unwrap(),
            });
            let pad = Tensor::full(-1000f32, (1, h, max_q - lq, 1), cpu).unwrap();
            stats.push(Tensor::cat(&[&lse.detach(), &pad], 2).unwrap());
            os.push(o.detach());
            ws.push(w);
        }
        let want = loss
            .unwrap()
            .backward()
            .unwrap()
            .get(sinks.as_tensor())
            .unwrap()
            .clone();
        let packed = |t: &[Tensor]| Tensor::cat(t, 1).unwrap();
        let stats = Tensor::cat(&stats, 0).unwrap();
        let lens: Vec<i32> = seqs.iter().map(|s| s.0 as i32).collect();
        let lse = token_stats(&stats, &lens, max_q).unwrap();
        assert_eq!(lse.dims(), [1, h, 9, 1]);
        let got = d_sink(
            &packed(&os),
            &packed(&ws),
            &lse,
            &sinks.as_tensor().detach(),
        )
        .unwrap();
        let diff = (got - &want)
            .unwrap()
            .abs()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        let scale = want
            .abs()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
            .max(1e-3);
        assert!(diff / scale < 1e-4, "{diff} vs max {scale}: {want}");
        // Statistics of another shape: typed.
        let e = token_stats(&stats, &lens[..2], max_q).unwrap_err();
        assert!(e.to_string().contains("varlen sink gradient"), "{e}");
    }

    /// The closed form against candle's CPU autograd of attention with a
    /// sink logit per head (softmax over the scores and the sink, the sink
    /// attending to no value), on random values: the formula the GPU
    /// backward uses, checked without a GPU.
    #[test]
    fn closed_form_matches_autograd() {
        let cpu = &Device::Cpu;
        let (b, sq, skv, h, d) = (2usize, 5usize, 7usize, 3usize, 4usize);
        let q = Tensor::randn(0f32, 1.0, (b, h, sq, d), cpu).unwrap();
        let k = Tensor::randn(0f32, 1.0, (b, h, skv, d), cpu).unwrap();
        let v = Tensor::randn(0f32, 1.0, (b, h, skv, d), cpu).unwrap();
        let w = Tensor::randn(0f32, 1.0, (b, sq, h, d), cpu).unwrap();
        let sinks = Var::from_tensor(&Tensor::randn(0f32, 1.0, h, cpu).unwrap()).unwrap();
        let s = (q.matmul(&k.t().unwrap()).unwrap() * 0.5).unwrap();
        let col = sinks
            .as_tensor()
            .reshape((1, h, 1, 1))
            .unwrap()
            .broadcast_as((b, h, sq, 1))
            .unwrap();
        let s = Tensor::cat(&[&s, &col], 3).unwrap();
        // log-sum-exp per row, the sink included: what cuDNN's statistics hold.
        let m = s.max_keepdim(D::Minus1).unwrap().detach();
        let lse = (s
            .broadcast_sub(&m)
            .unwrap()
            .exp()
            .unwrap()
            .sum_keepdim(D::Minus1)
            .unwrap()
            .log()
            .unwrap()
            + &m)
            .unwrap();
        let p = s
            .broadcast_sub(&lse)
            .unwrap()
            .exp()
            .unwrap()
            .narrow(3, 0, skv)
            .unwrap();
        let o = p
            .matmul(&v)
            .unwrap()
            .transpose(1, 2)
            .unwrap()
            .contiguous()
            .unwrap();
        let loss = (&o * &w).unwrap().sum_all().unwrap();
        let want = loss
            .backward()
            .unwrap()
            .get(sinks.as_tensor())
            .unwrap()
            .clone();
        let got = d_sink(&o.detach(), &w, &lse.detach(), &sinks.as_tensor().detach()).unwrap();
        let diff = (got - &want)
            .unwrap()
            .abs()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        let scale = want
            .abs()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
            .max(1e-3);
        assert!(diff / scale < 1e-4, "{diff} vs max {scale}: {want}");
    }
}

/// The training statistics of a dense attention call, as a tensor.
#[derive(Clone, Debug)]
struct Stats(FlashAttn);

impl Stats {
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
        let (qv, kv, vv) = (
            view::<T>(q, ql, "q")?,
            view::<T>(k, kl, "k")?,
            view::<T>(v, vl, "v")?,
        );
        // Varlen: the ragged graph over copies in its `[B, S_max]` span
        // (as the q, k, v gradients run it), the lengths bound.
        let (cfg, strides, side, pads) = match &self.0.varlen {
            None => {
                let mut d = params::dense(&qa, &ka, &va, &self.0.params).c()?;
                if self.0.bias.is_some() {
                    d.cfg = params::alibi::with_alibi_bias(d.cfg);
                }
                (d.cfg, d.strides, None, None)
            }
            Some(a) => {
                let mut vr = params::varlen(
                    &qa,
                    &ka,
                    &va,
                    &a.seqlens_q,
                    &a.seqlens_k,
                    a.max_q,
                    a.max_k,
                    &self.0.params,
                )
                .c()?;
                if self.0.bias.is_some() {
                    vr.cfg = crate::varlen_bias::with_varlen_bias(vr.cfg);
                }
                let [qd, kd, vd, _] = graphs::dims(&vr.cfg);
                let pads = (
                    padded(dev, &qv, ql.shape().elem_count(), count(&qd).c()?)?,
                    padded(dev, &kv, kl.shape().elem_count(), count(&kd).c()?)?,
                    padded(dev, &vv, vl.shape().elem_count(), count(&vd).c()?)?,
                );
                bind_context(dev)?;
                let side = Side::new(&vr.cfg, &vr.lens_q, &vr.lens_kv).c()?;
                (
                    vr.cfg,
                    [bshd(qd), bshd(kd), bshd(vd)],
                    Some(side),
                    Some(pads),
                )
            }
        };
        let cfg = cfg.training(true);
        let (qv, kv, vv) = match &pads {
            Some((a, b, c)) => (a.as_view(), b.as_view(), c.as_view()),
            None => (qv, kv, vv),
        };
        let ga = self
            .0
            .params
            .alibi_slopes
            .as_ref()
            .map(|t| t.storage_and_layout());
        let gs = self.0.params.sinks.as_ref().map(|t| t.storage_and_layout());
        let gb = self.0.bias.as_ref().map(|t| t.storage_and_layout());
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
        let (_, stats) =
            exec::forward(dev, &cfg, &strides, [&qv, &kv, &vv], side.as_ref(), &extras)?;
        let stats = stats.ok_or_else(|| {
            to_candle(Error::invalid(
                "attention statistics",
                "the training forward must output them",
                "none",
            ))
        })?;
        // `[B, H, S_q, 1]` (varlen: `S_q` the longest sequence, padded).
        let shape = match &self.0.varlen {
            None => Shape::from((ql.dims()[0], ql.dims()[2], ql.dims()[1], 1)),
            Some(a) => Shape::from((
                a.seqlens_q.len().saturating_sub(1),
                ql.dims()[1],
                a.max_q,
                1,
            )),
        };
        Ok((CudaStorage::wrap_cuda_slice(stats, dev.clone()), shape))
    }
}

impl CustomOp3 for Stats {
    fn name(&self) -> &'static str {
        "cudnn-attn-stats"
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
        Err(on_cuda("cudnn_candle attention sinks"))
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
        if self.0.cache_seqlens.is_some() {
            return Err(to_candle(Error::Unsupported {
                what: "the sinks' gradient of a KV-cache call".to_string(),
                needs: Some("a dense or varlen call (flash_attn_sinks / flash_attn_with / flash_attn_varlen_with)".to_string()),
            }));
        }
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
