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

use crate::attn::{FlashAttn, arg, on_cuda, same_device, same_dtype, view};
use crate::device::{IntoCandle, to_candle};
use crate::exec::{self, Elem, Extras};
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

    use super::d_sink;

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
        let mut d = params::dense(&qa, &ka, &va, &self.0.params).c()?;
        if self.0.bias.is_some() {
            d.cfg = params::alibi::with_alibi_bias(d.cfg);
        }
        let cfg = d.cfg.clone().training(true);
        let (qv, kv, vv) = (
            view::<T>(q, ql, "q")?,
            view::<T>(k, kl, "k")?,
            view::<T>(v, vl, "v")?,
        );
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
        let (_, stats) = exec::forward(dev, &cfg, &d.strides, [&qv, &kv, &vv], None, &extras)?;
        let stats = stats.ok_or_else(|| {
            to_candle(Error::invalid(
                "attention statistics",
                "the training forward must output them",
                "none",
            ))
        })?;
        let [b, sq, h] = [ql.dims()[0], ql.dims()[1], ql.dims()[2]];
        Ok((
            CudaStorage::wrap_cuda_slice(stats, dev.clone()),
            Shape::from((b, h, sq, 1)),
        ))
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
        if self.0.varlen_or_cache() {
            return Err(to_candle(Error::Unsupported {
                what: "the sinks' gradient of a varlen or KV-cache call".to_string(),
                needs: Some("a dense call (flash_attn_sinks / flash_attn_with)".to_string()),
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
