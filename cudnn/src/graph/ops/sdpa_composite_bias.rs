//! The composite attention's bias options (a child of
//! [`sdpa_composite`](super), split off by job): the bias add and ALiBi
//! after the scaling (before the padding and band masks), and the
//! backward's dBias reduction, as the pointwise and reduction ops NVIDIA's
//! frontend writes for them (see [`sdpa_bias`](super::super::sdpa_bias)).

use super::{Ctx, M, T};
use crate::error::Result;
use crate::graph::ops::sdpa_types::BiasTensors;
use crate::graph::tensor::DType;
use crate::sys::cudnn as sys;

/// The graph tensors (by index) of a composite's bias options.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CompositeBias {
    /// The bias input.
    pub(crate) bias: Option<usize>,
    /// The ALiBi slopes input (f32 `[1, H, 1, 1]`).
    pub(crate) slopes: Option<usize>,
    /// The dBias output (backward).
    pub(crate) dbias: Option<usize>,
    /// What the caller sees.
    pub(crate) public: BiasTensors,
}

impl CompositeBias {
    pub(super) fn push_tensors(&self, v: &mut Vec<(&'static str, usize, bool)>) {
        if let Some(b) = self.bias {
            v.push(("bias", b, false));
        }
        if let Some(s) = self.slopes {
            v.push(("alibi_slopes", s, false));
        }
        if let Some(d) = self.dbias {
            v.push(("dbias", d, true));
        }
    }

    pub(super) fn signature(&self) -> String {
        format!(
            " bias={} alibi={} dbias={}",
            self.bias.is_some(),
            self.slopes.is_some(),
            self.dbias.is_some()
        )
    }
}

impl Ctx<'_> {
    /// `x + bias`, then `+ slope[h] * (col - row)` (ALiBi).
    pub(super) fn score_bias(
        &mut self,
        x: T,
        cb: Option<&CompositeBias>,
        score: &[i64],
    ) -> Result<T> {
        let Some(cb) = cb else { return Ok(x) };
        let mut last = x;
        if let Some(b) = cb.bias {
            let out = self.virt(DType::F32, score)?;
            self.pointwise(
                M::CUDNN_POINTWISE_ADD,
                DType::F32,
                &[last, T::G(b)],
                out,
                None,
            )?;
            last = out;
        }
        if let Some(s) = cb.slopes {
            let ri = self.virt(DType::I32, score)?;
            self.pointwise(
                M::CUDNN_POINTWISE_GEN_INDEX,
                DType::I32,
                &[last],
                ri,
                Some(2),
            )?;
            let ci = self.virt(DType::I32, score)?;
            self.pointwise(
                M::CUDNN_POINTWISE_GEN_INDEX,
                DType::I32,
                &[last],
                ci,
                Some(3),
            )?;
            let dist = self.virt(DType::I32, score)?;
            self.pointwise(M::CUDNN_POINTWISE_SUB, DType::I32, &[ci, ri], dist, None)?;
            let off = self.virt(DType::F32, score)?;
            self.pointwise(
                M::CUDNN_POINTWISE_MUL,
                DType::F32,
                &[dist, T::G(s)],
                off,
                None,
            )?;
            let out = self.virt(DType::F32, score)?;
            self.pointwise(M::CUDNN_POINTWISE_ADD, DType::F32, &[last, off], out, None)?;
            last = out;
        }
        Ok(last)
    }

    /// dBias = `ds` (the gradient of the biased scores) summed over the
    /// dims the bias broadcasts.
    pub(super) fn dbias(&mut self, ds: T, cb: Option<&CompositeBias>) -> Result<()> {
        if let Some(d) = cb.and_then(|c| c.dbias) {
            self.reduction(
                sys::cudnnReduceTensorOp_t::CUDNN_REDUCE_TENSOR_ADD,
                ds,
                T::G(d),
            )
            .map_err(|e| e.with_context("the composite backward's dBias"))?;
        }
        Ok(())
    }
}
