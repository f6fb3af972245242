//! The descriptors of the FP8 attention composites: a small builder of
//! tensors (the graph's, by index, and the composite's own virtual ones)
//! and of the matmul / pointwise / reduction operations they are made of.

use super::Built;
use crate::error::{Error, Result};
use crate::graph::backend::{AnyOperation, Descriptor, attr, kind};
use crate::graph::tensor::{BYTE_ALIGNMENT, DType, TensorSpec};
use crate::sys::cudnn as sys;

pub(crate) type Mode = sys::cudnnPointwiseMode_t;
pub(crate) type Red = sys::cudnnReduceTensorOp_t;

/// A tensor of a composite: a graph tensor (by index) or its own.
#[derive(Clone, Copy, Debug)]
pub(crate) enum T {
    G(usize),
    V(usize),
}

/// Builds a composite's descriptors; [`finish`](Self::finish) hands them
/// to the op graph.
pub(crate) struct Composite<'a> {
    t: &'a [Descriptor<kind::Tensor>],
    own: Vec<Descriptor<kind::Tensor>>,
    next_uid: i64,
    ops: Vec<Box<dyn AnyOperation + Send>>,
    aux: Vec<Box<dyn std::any::Any + Send>>,
}

impl<'a> Composite<'a> {
    /// Over the graph's finalized tensors `t`; own UIDs from `uid_base`.
    pub(crate) fn new(t: &'a [Descriptor<kind::Tensor>], uid_base: i64) -> Self {
        Self {
            t,
            own: Vec::new(),
            next_uid: uid_base,
            ops: Vec::new(),
            aux: Vec::new(),
        }
    }

    fn d(&self, x: T) -> Result<&Descriptor<kind::Tensor>> {
        match x {
            T::G(i) => self.t.get(i),
            T::V(i) => self.own.get(i),
        }
        .ok_or_else(|| {
            Error::invalid(
                "FP8 attention composite",
                "tensor index out of range",
                format!("{x:?}"),
            )
        })
    }

    fn uid(&mut self) -> Result<i64> {
        let uid = self.next_uid;
        self.next_uid = uid
            .checked_add(1)
            .ok_or_else(|| Error::invalid("FP8 attention composite", "UIDs overflow", uid))?;
        Ok(uid)
    }

    /// A tensor descriptor; `uid` `None` takes the next own UID.
    pub(crate) fn tensor(
        &mut self,
        dtype: DType,
        dims: &[i64],
        strides: &[i64],
        uid: Option<i64>,
        virt: bool,
    ) -> Result<T> {
        let uid = match uid {
            Some(u) => u,
            None => self.uid()?,
        };
        let mut d = Descriptor::<kind::Tensor>::new()?;
        d.set(attr::TENSOR_DATA_TYPE, &[dtype.raw()])?;
        d.set(attr::TENSOR_DIMENSIONS, dims)?;
        d.set(attr::TENSOR_STRIDES, strides)?;
        d.set(attr::TENSOR_UNIQUE_ID, &[uid])?;
        d.set(attr::TENSOR_BYTE_ALIGNMENT, &[BYTE_ALIGNMENT as i64])?;
        if virt {
            d.set(attr::TENSOR_IS_VIRTUAL, &[true])?;
        }
        d.finalize()?;
        self.own.push(d);
        Ok(T::V(self.own.len() - 1))
    }

    /// A graph tensor's memory seen with dims `a` and `b` swapped (`Kᵀ`):
    /// the same UID, so the plan binds the graph tensor's buffer.
    pub(crate) fn transposed(
        &mut self,
        g: usize,
        spec: &TensorSpec,
        a: usize,
        b: usize,
    ) -> Result<T> {
        let uid = self.d(T::G(g))?.get_one(attr::TENSOR_UNIQUE_ID)?;
        let (mut dims, mut strides) = (spec.dims().to_vec(), spec.strides().to_vec());
        if a >= dims.len() || b >= dims.len() {
            return Err(Error::invalid(
                "transposed view",
                "dims out of range",
                format!("{a}, {b}"),
            ));
        }
        dims.swap(a, b);
        strides.swap(a, b);
        self.tensor(spec.dtype(), &dims, &strides, Some(uid), false)
    }

    /// A packed row-major virtual tensor.
    pub(crate) fn virt(&mut self, dtype: DType, dims: &[i64]) -> Result<T> {
        let spec = TensorSpec::row_major(dtype, dims)?;
        self.tensor(dtype, dims, spec.strides(), None, true)
    }

    /// `y = mode(ins...)` computed in `math`.
    pub(crate) fn pointwise(
        &mut self,
        mode: Mode,
        math: DType,
        ins: &[T],
        y: T,
        axis: Option<i64>,
    ) -> Result<()> {
        let mut p = Descriptor::<kind::Pointwise>::new()?;
        p.set(attr::POINTWISE_MODE, &[mode])?;
        p.set(attr::POINTWISE_MATH_PREC, &[math.raw()])?;
        if let Some(a) = axis {
            p.set(attr::POINTWISE_AXIS, &[a])?;
        }
        p.finalize()?;
        let x = *ins.first().ok_or_else(|| {
            Error::invalid(
                "FP8 attention composite",
                "a pointwise op needs an input",
                0,
            )
        })?;
        let mut d = Descriptor::<kind::PointwiseOp>::new()?;
        d.set_descriptors(attr::OPERATION_POINTWISE_PW_DESCRIPTOR, &[&p])?;
        d.set_descriptors(attr::OPERATION_POINTWISE_XDESC, &[self.d(x)?])?;
        if let Some(&b) = ins.get(1) {
            d.set_descriptors(attr::OPERATION_POINTWISE_BDESC, &[self.d(b)?])?;
        }
        if let Some(&m) = ins.get(2) {
            d.set_descriptors(attr::OPERATION_POINTWISE_TDESC, &[self.d(m)?])?;
        }
        d.set_descriptors(attr::OPERATION_POINTWISE_YDESC, &[self.d(y)?])?;
        d.finalize()?;
        self.ops.push(Box::new(d));
        self.aux.push(Box::new(p));
        Ok(())
    }

    /// `y = x * s` in f32, `y` a new f32 virtual of `dims` unless given.
    pub(crate) fn mul(&mut self, x: T, s: T, dims: &[i64], y: Option<T>) -> Result<T> {
        let y = match y {
            Some(y) => y,
            None => self.virt(DType::F32, dims)?,
        };
        self.pointwise(Mode::CUDNN_POINTWISE_MUL, DType::F32, &[x, s], y, None)?;
        Ok(y)
    }

    /// `c = a · b` accumulated in f32.
    pub(crate) fn matmul(&mut self, a: T, b: T, c: T) -> Result<()> {
        let mut mm = Descriptor::<kind::Matmul>::new()?;
        mm.set(attr::MATMUL_COMP_TYPE, &[DType::F32.raw()])?;
        mm.finalize()?;
        let mut d = Descriptor::<kind::MatmulOp>::new()?;
        d.set_descriptors(attr::OPERATION_MATMUL_ADESC, &[self.d(a)?])?;
        d.set_descriptors(attr::OPERATION_MATMUL_BDESC, &[self.d(b)?])?;
        d.set_descriptors(attr::OPERATION_MATMUL_CDESC, &[self.d(c)?])?;
        d.set_descriptors(attr::OPERATION_MATMUL_DESC, &[&mm])?;
        d.finalize()?;
        self.ops.push(Box::new(d));
        self.aux.push(Box::new(mm));
        Ok(())
    }

    /// `y = reduce(x)` over the dims where `y` has 1, in f32.
    pub(crate) fn reduction(&mut self, op: Red, x: T, y: T) -> Result<()> {
        let mut r = Descriptor::<kind::Reduction>::new()?;
        r.set(attr::REDUCTION_OPERATOR, &[op])?;
        r.set(attr::REDUCTION_COMP_TYPE, &[DType::F32.raw()])?;
        r.finalize()?;
        let mut d = Descriptor::<kind::ReductionOp>::new()?;
        d.set_descriptors(attr::OPERATION_REDUCTION_XDESC, &[self.d(x)?])?;
        d.set_descriptors(attr::OPERATION_REDUCTION_YDESC, &[self.d(y)?])?;
        d.set_descriptors(attr::OPERATION_REDUCTION_DESC, &[&r])?;
        d.finalize()?;
        self.ops.push(Box::new(d));
        self.aux.push(Box::new(r));
        Ok(())
    }

    /// `y` = `x`'s memory seen with `y`'s dims and strides (a transpose).
    pub(crate) fn reshape(&mut self, x: T, y: T) -> Result<()> {
        let mut d = Descriptor::<kind::ReshapeOp>::new()?;
        d.set_descriptors(attr::OPERATION_RESHAPE_XDESC, &[self.d(x)?])?;
        d.set_descriptors(attr::OPERATION_RESHAPE_YDESC, &[self.d(y)?])?;
        d.finalize()?;
        self.ops.push(Box::new(d));
        Ok(())
    }

    /// A virtual `[b, h, rows, cols]` tensor transposed in memory from a
    /// packed `[b, h, cols, rows]` one (strides `[h*r*c, r*c, 1, rows... ]`).
    pub(crate) fn virt_transposed(&mut self, dtype: DType, dims: [i64; 4]) -> Result<T> {
        let [_, h, r, c] = dims;
        let rc = r
            .checked_mul(c)
            .and_then(|x| x.checked_mul(h).map(|y| (x, y)))
            .ok_or_else(|| {
                Error::invalid(
                    "FP8 attention composite",
                    "dims overflow",
                    format!("{dims:?}"),
                )
            })?;
        self.tensor(dtype, &dims, &[rc.1, rc.0, 1, r], None, true)
    }

    /// `c = (a · b) * descale_a * descale_b`, `amax = max |c|`, then
    /// `out = c * scale` (the frontend's FP8 matmul).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn matmul_fp8(
        &mut self,
        a: T,
        b: T,
        scales: [T; 3],
        out: T,
        amax: T,
        dims: &[i64],
    ) -> Result<()> {
        let acc = self.virt(DType::F32, dims)?;
        self.matmul(a, b, acc)?;
        let c = self.mul(acc, scales[0], dims, None)?;
        let c = self.mul(c, scales[1], dims, None)?;
        self.reduction(Red::CUDNN_REDUCE_TENSOR_AMAX, c, amax)?;
        self.mul(c, scales[2], dims, Some(out))?;
        Ok(())
    }

    /// `(row >= col) ? x : fill` (top-left aligned causal mask). From cuDNN
    /// 9.21 cuDNN's diagonal band mask operation (`CMP_GE`, no lengths), as
    /// NVIDIA's frontend builds its FP8 attention there; before, `GEN_INDEX`
    /// of rows and columns in INT32, `CMP_GE` and `BINARY_SELECT`.
    pub(crate) fn causal_mask(&mut self, x: T, fill: T, score: &[i64]) -> Result<T> {
        if super::sdpa::loaded_cudnn()? >= super::sdpa_composite::BAND_MASK_OPERATION {
            let out = self.virt(DType::F32, score)?;
            let mut m = Descriptor::<kind::DiagonalBandMaskOp>::new()?;
            m.set_descriptors(attr::OPERATION_DIAGONAL_BAND_MASK_XDESC, &[self.d(x)?])?;
            m.set_descriptors(attr::OPERATION_DIAGONAL_BAND_MASK_BDESC, &[self.d(fill)?])?;
            m.set_descriptors(attr::OPERATION_DIAGONAL_BAND_MASK_YDESC, &[self.d(out)?])?;
            m.set(
                attr::OPERATION_DIAGONAL_BAND_MASK_COMPARISON_MODE,
                &[Mode::CUDNN_POINTWISE_CMP_GE],
            )?;
            m.finalize()
                .map_err(|e| e.with_context("the FP8 attention's causal mask"))?;
            self.ops.push(Box::new(m));
            return Ok(out);
        }
        let ri = self.virt(DType::I32, score)?;
        self.pointwise(
            Mode::CUDNN_POINTWISE_GEN_INDEX,
            DType::I32,
            &[x],
            ri,
            Some(2),
        )?;
        let ci = self.virt(DType::I32, score)?;
        self.pointwise(
            Mode::CUDNN_POINTWISE_GEN_INDEX,
            DType::I32,
            &[x],
            ci,
            Some(3),
        )?;
        let m = self.virt(DType::Bool, score)?;
        self.pointwise(
            Mode::CUDNN_POINTWISE_CMP_GE,
            DType::Bool,
            &[ri, ci],
            m,
            None,
        )?;
        let out = self.virt(DType::F32, score)?;
        self.pointwise(
            Mode::CUDNN_POINTWISE_BINARY_SELECT,
            DType::F32,
            &[x, fill, m],
            out,
            None,
        )?;
        Ok(out)
    }

    /// `p = softmax(s)` over the last dim as cuDNN's softmax operation
    /// (cuDNN >= 9.21, as NVIDIA's frontend builds it there), with the
    /// statistics (`max + ln(sum exp)`, `[B, H, S_q, 1]` f32) when `stats`.
    pub(crate) fn softmax_op(&mut self, s: T, p: T, stats: Option<T>) -> Result<()> {
        let mut d = Descriptor::<kind::SoftmaxOp>::new()?;
        d.set_descriptors(attr::OPERATION_SOFTMAX_XDESC, &[self.d(s)?])?;
        d.set_descriptors(attr::OPERATION_SOFTMAX_YDESC, &[self.d(p)?])?;
        if let Some(st) = stats {
            d.set_descriptors(attr::OPERATION_SOFTMAX_STATS_DESC, &[self.d(st)?])?;
        }
        d.finalize()
            .map_err(|e| e.with_context("the FP8 attention's softmax operation"))?;
        self.ops.push(Box::new(d));
        Ok(())
    }

    /// Hand the descriptors to the op graph (own tensors first: the ops
    /// point to them).
    pub(crate) fn finish(self, built: &mut Built) {
        for d in self.own {
            built.aux.push(Box::new(d));
        }
        built.aux.extend(self.aux);
        built.ops.extend(self.ops);
    }
}
