//! Reduction: the operators, the `Graph` method and the op's descriptors.

use super::{Built, OpNode};
use crate::error::{Error, Result};
use crate::graph::backend::{Descriptor, attr, kind};
use crate::graph::graph::{Graph, Tensor};
use crate::graph::tensor::{DType, TensorSpec, fmt_dims};
use crate::sys::cudnn as sys;

/// Reduction operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
#[non_exhaustive]
pub enum Reduce {
    Add,
    Mul,
    Min,
    Max,
    /// Max of absolute values.
    AMax,
    Avg,
    /// Sum of absolute values.
    Norm1,
    /// Square root of the sum of squares.
    Norm2,
    /// Product of the non-zero values.
    MulNoZeros,
}

impl Reduce {
    pub(crate) fn raw(self) -> sys::cudnnReduceTensorOp_t {
        use sys::cudnnReduceTensorOp_t as R;
        match self {
            Reduce::Add => R::CUDNN_REDUCE_TENSOR_ADD,
            Reduce::Mul => R::CUDNN_REDUCE_TENSOR_MUL,
            Reduce::Min => R::CUDNN_REDUCE_TENSOR_MIN,
            Reduce::Max => R::CUDNN_REDUCE_TENSOR_MAX,
            Reduce::AMax => R::CUDNN_REDUCE_TENSOR_AMAX,
            Reduce::Avg => R::CUDNN_REDUCE_TENSOR_AVG,
            Reduce::Norm1 => R::CUDNN_REDUCE_TENSOR_NORM1,
            Reduce::Norm2 => R::CUDNN_REDUCE_TENSOR_NORM2,
            Reduce::MulNoZeros => R::CUDNN_REDUCE_TENSOR_MUL_NO_ZEROS,
        }
    }
}

/// `y = reduce(x)`.
#[derive(Clone, Debug)]
pub(crate) struct ReductionOp {
    pub(crate) op: Reduce,
    pub(crate) x: usize,
    pub(crate) y: usize,
}

impl OpNode for ReductionOp {
    fn name(&self) -> String {
        format!("reduction {:?}", self.op)
    }
    fn tensors(&self) -> Vec<(&'static str, usize, bool)> {
        vec![("x", self.x, false), ("y", self.y, true)]
    }
    fn signature(&self) -> String {
        String::new()
    }
    fn build(
        &self,
        t: &[Descriptor<kind::Tensor>],
        compute: DType,
        built: &mut Built,
    ) -> Result<()> {
        let mut r = Descriptor::<kind::Reduction>::new()?;
        r.set(attr::REDUCTION_OPERATOR, &[self.op.raw()])?;
        r.set(attr::REDUCTION_COMP_TYPE, &[compute.raw()])?;
        r.finalize()?;
        let mut d = Descriptor::<kind::ReductionOp>::new()?;
        d.set_descriptors(attr::OPERATION_REDUCTION_XDESC, &[&t[self.x]])?;
        d.set_descriptors(attr::OPERATION_REDUCTION_YDESC, &[&t[self.y]])?;
        d.set_descriptors(attr::OPERATION_REDUCTION_DESC, &[&r])?;
        d.finalize()?;
        built.ops.push(Box::new(d));
        built.aux.push(Box::new(r));
        Ok(())
    }
}

impl Graph {
    /// Reduce `x` to `out_dims` (each dim 1 or equal to x's).
    ///
    /// # Errors
    /// Ranks differ or a dim is neither 1 nor x's.
    pub fn reduction(&mut self, op: Reduce, x: Tensor, out_dims: &[i64]) -> Result<Tensor> {
        let label = format!("reduction {op:?} {}", self.label());
        let xs = self.node(x)?.spec.clone();
        if out_dims.len() != xs.dims().len() {
            return Err(Error::mismatch(
                format!("{label}: output rank"),
                xs.dims().len(),
                out_dims.len(),
            ));
        }
        for (i, (&o, &d)) in out_dims.iter().zip(xs.dims()).enumerate() {
            if o != 1 && o != d {
                return Err(Error::invalid(
                    format!("{label}: out_dims[{i}]"),
                    format!("must be 1 or x's dim {d} (x {})", fmt_dims(xs.dims())),
                    o,
                ));
            }
        }
        let y = self.intermediate(
            "reduction",
            TensorSpec::like(self.compute_type(), out_dims, &xs)?,
        )?;
        self.push_op(ReductionOp {
            op,
            x: self.index(x)?,
            y: self.index(y)?,
        });
        Ok(y)
    }
}
