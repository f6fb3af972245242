//! The composite attention's softcap ops (a child of
//! [`sdpa_composite`](super), its own job): forward `c * tanh(s / c)`,
//! backward `dS_raw = (dS · c) tanh'(s / c) / c` through `TANH_BWD`, as
//! NVIDIA's frontend writes its softcap score modifier. See
//! [`sdpa_softcap`](super::super::sdpa_softcap) for the rules.

use super::{Ctx, M, T};
use crate::error::Result;
use crate::graph::backend::{Descriptor, attr, kind};
use crate::graph::tensor::DType;

impl Ctx<'_> {
    /// `cap * tanh(x / cap)`; returns `(capped, x / cap)` (the backward
    /// takes the second).
    pub(super) fn softcap_fwd(&mut self, x: T, cap: T, score: &[i64]) -> Result<(T, T)> {
        let div = self.virt(DType::F32, score)?;
        self.pointwise(M::CUDNN_POINTWISE_DIV, DType::F32, &[x, cap], div, None)?;
        let th = self.virt(DType::F32, score)?;
        self.pointwise(M::CUDNN_POINTWISE_TANH_FWD, DType::F32, &[div], th, None)?;
        let out = self.virt(DType::F32, score)?;
        self.pointwise(M::CUDNN_POINTWISE_MUL, DType::F32, &[th, cap], out, None)?;
        Ok((out, div))
    }

    /// The gradient through the softcap: `((ds · cap) (1 - tanh²(div))) / cap`,
    /// `div` being the forward's `s / cap`.
    pub(super) fn softcap_bwd(&mut self, ds: T, div: T, cap: T, score: &[i64]) -> Result<T> {
        let m = self.virt(DType::F32, score)?;
        self.pointwise(M::CUDNN_POINTWISE_MUL, DType::F32, &[ds, cap], m, None)?;
        let dt = self.virt(DType::F32, score)?;
        // TANH_BWD: dx = dy · (1 - tanh²(x)), dy and x as the frontend wires them.
        let mut p = Descriptor::<kind::Pointwise>::new()?;
        p.set(attr::POINTWISE_MODE, &[M::CUDNN_POINTWISE_TANH_BWD])?;
        p.set(attr::POINTWISE_MATH_PREC, &[DType::F32.raw()])?;
        p.finalize()?;
        let mut d = Descriptor::<kind::PointwiseOp>::new()?;
        d.set_descriptors(attr::OPERATION_POINTWISE_PW_DESCRIPTOR, &[&p])?;
        d.set_descriptors(attr::OPERATION_POINTWISE_DYDESC, &[self.d(m)])?;
        d.set_descriptors(attr::OPERATION_POINTWISE_XDESC, &[self.d(div)])?;
        d.set_descriptors(attr::OPERATION_POINTWISE_DXDESC, &[self.d(dt)])?;
        d.finalize()
            .map_err(|e| e.with_context("the softcap backward (TANH_BWD)"))?;
        self.ops.push(Box::new(d));
        self.aux.push(Box::new(p));
        let out = self.virt(DType::F32, score)?;
        self.pointwise(M::CUDNN_POINTWISE_DIV, DType::F32, &[dt, cap], out, None)?;
        Ok(out)
    }
}
