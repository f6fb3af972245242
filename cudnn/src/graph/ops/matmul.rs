//! Matmul: the `Graph` method (batched, broadcast batch dims) and the op's descriptors.

use super::elementwise::broadcast;
use super::{Built, OpNode};
use crate::error::{Error, Result};
use crate::graph::backend::{Descriptor, attr, kind};
use crate::graph::graph::{Graph, Tensor};
use crate::graph::tensor::{DType, TensorSpec, fmt_dims};

/// `c = a @ b`.
#[derive(Clone, Debug)]
pub(crate) struct MatmulOp {
    pub(crate) a: usize,
    pub(crate) b: usize,
    pub(crate) c: usize,
    /// Whether an input is FP8 (the target must have FP8 tensor cores).
    pub(crate) fp8: bool,
}

impl OpNode for MatmulOp {
    fn name(&self) -> String {
        "matmul".to_string()
    }
    fn tensors(&self) -> Vec<(&'static str, usize, bool)> {
        vec![
            ("a", self.a, false),
            ("b", self.b, false),
            ("c", self.c, true),
        ]
    }
    fn signature(&self) -> String {
        String::new()
    }
    fn tf32_inputs(&self) -> Vec<usize> {
        vec![self.a, self.b]
    }
    fn check_target(&self, device_ver: i64) -> Result<()> {
        if self.fp8 {
            super::matmul_fp8::check_fp8_target("an FP8 matmul", device_ver)
        } else {
            Ok(())
        }
    }
    fn build(
        &self,
        t: &[Descriptor<kind::Tensor>],
        compute: DType,
        built: &mut Built,
    ) -> Result<()> {
        let mut m = Descriptor::<kind::Matmul>::new()?;
        m.set(attr::MATMUL_COMP_TYPE, &[compute.raw()])?;
        m.finalize()?;
        let mut d = Descriptor::<kind::MatmulOp>::new()?;
        d.set_descriptors(attr::OPERATION_MATMUL_ADESC, &[&t[self.a]])?;
        d.set_descriptors(attr::OPERATION_MATMUL_BDESC, &[&t[self.b]])?;
        d.set_descriptors(attr::OPERATION_MATMUL_CDESC, &[&t[self.c]])?;
        d.set_descriptors(attr::OPERATION_MATMUL_DESC, &[&m])?;
        d.finalize()?;
        built.ops.push(Box::new(d));
        built.aux.push(Box::new(m));
        Ok(())
    }
}

impl Graph {
    /// `c = a @ b`: `a` `[batch..., M, K]`, `b` `[batch..., K, N]`, the same
    /// rank (2 to 8); batch dims equal or 1 (broadcast). Transposes are
    /// strides: pass `b` with swapped strides for `a @ bᵀ`.
    ///
    /// FP8 inputs (either) make a matmul that plans only for GPUs with FP8
    /// tensor cores (compute capability 8.9 or newer, checked when a plan is
    /// built); [`fp8_matmul`](Self::fp8_matmul) adds the descales, the scale
    /// and the amax around it.
    ///
    /// # Errors
    /// Ranks differ, inner dims differ, or batch dims do not broadcast.
    pub fn matmul(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        let op = format!("matmul {}", self.label());
        let (as_, bs) = (self.node(a)?.spec.clone(), self.node(b)?.spec.clone());
        let (ad, bd) = (as_.dims(), bs.dims());
        if ad.len() != bd.len() || ad.len() < 2 {
            return Err(Error::mismatch(
                format!("{op}: a and b ranks (equal, at least 2)"),
                format!("rank {} for both", ad.len().max(2)),
                format!("a {} and b {}", fmt_dims(ad), fmt_dims(bd)),
            ));
        }
        let r = ad.len();
        if ad[r - 1] != bd[r - 2] {
            return Err(Error::mismatch(
                format!(
                    "{op}: inner dims (a's last = b's second to last): a {} b {}",
                    fmt_dims(ad),
                    fmt_dims(bd)
                ),
                ad[r - 1],
                bd[r - 2],
            ));
        }
        let mut cd = broadcast(&op, &ad[..r - 2], &bd[..r - 2])?;
        cd.push(ad[r - 2]);
        cd.push(bd[r - 1]);
        let c = self.intermediate("matmul", TensorSpec::row_major(self.compute_type(), &cd)?)?;
        self.push_op(MatmulOp {
            a: self.index(a)?,
            b: self.index(b)?,
            c: self.index(c)?,
            fp8: as_.dtype().is_fp8() || bs.dtype().is_fp8(),
        });
        Ok(c)
    }
}
