//! The composite attention's softmax (issue 24, items 5b and 6): the row
//! max and sum of exponentials (graph outputs with
//! [`SdpaConfig::max_sum_exp`](super::super::sdpa::SdpaConfig::max_sum_exp)),
//! an attention sink joining the denominator, the statistics, and the
//! backward's dSink (see [`sdpa_softmax`](super::super::sdpa_softmax)).

use super::super::sdpa_softmax::SoftmaxIdx;
use super::{Ctx, M, T};
use crate::error::Result;
use crate::graph::backend::{Descriptor, attr, kind};
use crate::graph::tensor::DType;
use crate::sys::cudnn as sys;

type R = sys::cudnnReduceTensorOp_t;

/// The forward softmax of the masked scores `s`: `m = max_row(S)` (with a
/// sink, `max(m, sink)`), `e = exp(S - m)`, `l = sum_row(e)` (with a sink,
/// `+ exp(sink - m)`), the statistics `m + log(l)` (a graph output in
/// training, virtual otherwise: the fused engines expect them), and
/// returns `(e, l)` (`P = e / l` is the caller's).
pub(super) fn forward(
    c: &mut Ctx<'_>,
    s: T,
    score: &[i64],
    row: &[i64],
    stats: Option<usize>,
    sm: &SoftmaxIdx,
) -> Result<(T, T)> {
    let mx = match sm.max {
        Some(m) => T::G(m),
        None => c.virt(DType::F32, row)?,
    };
    match sm.sink {
        Some(k) => {
            let smax = c.virt(DType::F32, row)?;
            c.reduction(R::CUDNN_REDUCE_TENSOR_MAX, s, smax)?;
            c.pointwise(
                M::CUDNN_POINTWISE_MAX,
                DType::F32,
                &[smax, T::G(k)],
                mx,
                None,
            )?;
        }
        None => c.reduction(R::CUDNN_REDUCE_TENSOR_MAX, s, mx)?,
    }
    let z = c.virt(DType::F32, score)?;
    c.pointwise(M::CUDNN_POINTWISE_SUB, DType::F32, &[s, mx], z, None)?;
    let e = c.virt(DType::F32, score)?;
    c.pointwise(M::CUDNN_POINTWISE_EXP, DType::F32, &[z], e, None)?;
    let l = match sm.sum_exp {
        Some(l) => T::G(l),
        None => c.virt(DType::F32, row)?,
    };
    match sm.sink {
        Some(k) => {
            let part = c.virt(DType::F32, row)?;
            c.reduction(R::CUDNN_REDUCE_TENSOR_ADD, e, part)?;
            let ks = c.virt(DType::F32, row)?;
            c.pointwise(M::CUDNN_POINTWISE_SUB, DType::F32, &[T::G(k), mx], ks, None)?;
            let ke = c.virt(DType::F32, row)?;
            c.pointwise(M::CUDNN_POINTWISE_EXP, DType::F32, &[ks], ke, None)?;
            c.pointwise(M::CUDNN_POINTWISE_ADD, DType::F32, &[part, ke], l, None)?;
        }
        None => c.reduction(R::CUDNN_REDUCE_TENSOR_ADD, e, l)?,
    }
    let lg = c.virt(DType::F32, row)?;
    c.pointwise(M::CUDNN_POINTWISE_LOG, DType::F32, &[l], lg, None)?;
    let st = match stats {
        Some(st) => T::G(st),
        None => c.virt(DType::F32, row)?,
    };
    c.pointwise(M::CUDNN_POINTWISE_ADD, DType::F32, &[mx, lg], st, None)?;
    Ok((e, l))
}

/// The forward softmax as cuDNN's softmax operation (cuDNN >= 9.21, as
/// NVIDIA's frontend builds it there): `P = softmax(S)` into `p`, with the
/// statistics (training only), the row max and sum of exponentials and the
/// sink on the operation itself; the same values as [`forward`]'s.
pub(super) fn forward_op(
    c: &mut Ctx<'_>,
    s: T,
    p: T,
    stats: Option<usize>,
    sm: &SoftmaxIdx,
) -> Result<()> {
    let mut d = Descriptor::<kind::SoftmaxOp>::new()?;
    d.set_descriptors(attr::OPERATION_SOFTMAX_XDESC, &[c.d(s)])?;
    d.set_descriptors(attr::OPERATION_SOFTMAX_YDESC, &[c.d(p)])?;
    for (a, t) in [
        (attr::OPERATION_SOFTMAX_STATS_DESC, stats),
        (attr::OPERATION_SOFTMAX_MAX_DESC, sm.max),
        (attr::OPERATION_SOFTMAX_SUM_EXP_DESC, sm.sum_exp),
        (attr::OPERATION_SOFTMAX_SINK_DESC, sm.sink),
    ] {
        if let Some(t) = t {
            d.set_descriptors(a, &[c.d(T::G(t))])?;
        }
    }
    d.finalize()
        .map_err(|e| e.with_context("the composite's softmax operation"))?;
    c.ops.push(Box::new(d));
    Ok(())
}

/// The backward's dSink from `delta = rowsum(dO ⊙ O)` (before the dropout
/// keep factor) and the statistics: `dSink[h] = -sum_{b, i} exp(sink[h] -
/// stats[b, h, i]) * delta[b, h, i]`. Nothing without `sink_grad`.
pub(super) fn backward_d_sink(
    c: &mut Ctx<'_>,
    delta: T,
    stats: T,
    row: &[i64],
    sm: &SoftmaxIdx,
) -> Result<()> {
    let (Some(k), Some(g)) = (sm.sink, sm.d_sink) else {
        return Ok(());
    };
    let ks = c.virt(DType::F32, row)?;
    c.pointwise(
        M::CUDNN_POINTWISE_SUB,
        DType::F32,
        &[T::G(k), stats],
        ks,
        None,
    )?;
    let ke = c.virt(DType::F32, row)?;
    c.pointwise(M::CUDNN_POINTWISE_EXP, DType::F32, &[ks], ke, None)?;
    let per = c.virt(DType::F32, row)?;
    c.pointwise(M::CUDNN_POINTWISE_MUL, DType::F32, &[ke, delta], per, None)?;
    let sum = c.virt(DType::F32, &[1, row[1], 1, 1])?;
    c.reduction(R::CUDNN_REDUCE_TENSOR_ADD, per, sum)?;
    c.pointwise(M::CUDNN_POINTWISE_NEG, DType::F32, &[sum], T::G(g), None)
}
