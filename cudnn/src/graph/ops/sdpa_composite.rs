//! The composite attention forward: the same `O = softmax(mask(scale * Q Kᵀ)) V`
//! as cuDNN's SDPA operation, written as the matmul / pointwise / reduction /
//! RNG ops that cuDNN's fused-attention engines recognise. It is what
//! [`Graph::sdpa_forward`](crate::graph::Graph::sdpa_forward) builds where the
//! loaded cuDNN lacks the SDPA operation (cuDNN 9.8 to 9.12) or one of the
//! options asked for (padding before 9.15; a causal mask or dropout before
//! 9.21), or when [`SdpaImpl::Composite`](super::sdpa::SdpaImpl) is asked for.
//!
//! The graph, op by op (all intermediates virtual; f32 unless named):
//! 1. `S = Q · Kᵀ` (`Kᵀ` is K's memory with the last two dims and strides
//!    swapped; with padding, M and N are overridden by the sequence lengths and
//!    the padded rows read as 0);
//! 2. `S *= scale` (a by-value scalar);
//! 3. padding: `S = (row < seq_q && col < seq_kv) ? S : -inf`, the indices from
//!    `GEN_INDEX` (i32) and the comparisons boolean;
//! 4. causal: `S = (row >= col) ? S : -inf`;
//! 5. softmax: `m = max_row(S)`, `e = exp(S - m)`, `l = sum_row(e)`,
//!    `P = e / l`, and the statistics `m + log(l)` (a graph output in
//!    training, virtual in inference: the engines expect them either way);
//! 6. dropout: `P *= bernoulli(1 - p) / (1 - p)` from Philox with the seed and
//!    offset inputs;
//! 7. `P` is stored in the I/O type (f16 / bf16), then `O = P · V`.
//!
//! The masks use `-inf` from cuDNN 9.10 and the lowest finite f32 before it,
//! as the fused engines of those releases expect.

use crate::error::Result;
use crate::graph::backend::{Descriptor, attr, kind};
use crate::graph::graph::Built;
use crate::graph::ops::ExtOp;
use crate::graph::tensor::{BYTE_ALIGNMENT, DType, TensorSpec};
use crate::sys::cudnn as sys;

type M = sys::cudnnPointwiseMode_t;

/// A tensor of the composite: a graph tensor (by index) or one of its own
/// virtual intermediates.
#[derive(Clone, Copy, Debug)]
enum T {
    G(usize),
    V(usize),
}

#[derive(Debug, Clone)]
pub(crate) struct CompositeFwdOp {
    pub(crate) q: usize,
    pub(crate) k: usize,
    pub(crate) v: usize,
    pub(crate) scale: usize,
    /// K's spec (Kᵀ is its transposed view).
    pub(crate) k_spec: TensorSpec,
    /// `[B, H, S_q, S_kv, D, D_v]`.
    pub(crate) dims: [i64; 6],
    /// The I/O type (of P before the second matmul).
    pub(crate) io: DType,
    pub(crate) seq: Option<(usize, usize)>,
    /// Seed, offset, probability, the `1 / (1 - p)` scalar.
    pub(crate) dropout: Option<(usize, usize, f64, usize)>,
    pub(crate) causal: bool,
    /// The mask fill scalar (padding or causal).
    pub(crate) fill: Option<usize>,
    pub(crate) o: usize,
    pub(crate) stats: Option<usize>,
    /// The first UID of the composite's own virtual tensors.
    pub(crate) uid_base: i64,
}

struct Ctx<'a> {
    t: &'a [Descriptor<kind::Tensor>],
    own: Vec<Descriptor<kind::Tensor>>,
    next_uid: i64,
    ops: Vec<Box<dyn crate::graph::backend::AnyOperation + Send>>,
    aux: Vec<Box<dyn std::any::Any + Send>>,
}

impl Ctx<'_> {
    fn d(&self, x: T) -> &Descriptor<kind::Tensor> {
        match x {
            T::G(i) => &self.t[i],
            T::V(i) => &self.own[i],
        }
    }

    fn tensor(
        &mut self,
        dtype: DType,
        dims: &[i64],
        strides: &[i64],
        uid: i64,
        virt: bool,
    ) -> Result<Descriptor<kind::Tensor>> {
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
        Ok(d)
    }

    /// A packed virtual intermediate.
    fn virt(&mut self, dtype: DType, dims: &[i64]) -> Result<T> {
        let spec = TensorSpec::row_major(dtype, dims)?;
        let uid = self.next_uid;
        self.next_uid += 1;
        let d = self.tensor(dtype, dims, spec.strides(), uid, true)?;
        self.own.push(d);
        Ok(T::V(self.own.len() - 1))
    }

    fn pointwise(
        &mut self,
        mode: M,
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
        let mut d = Descriptor::<kind::PointwiseOp>::new()?;
        d.set_descriptors(attr::OPERATION_POINTWISE_PW_DESCRIPTOR, &[&p])?;
        d.set_descriptors(attr::OPERATION_POINTWISE_XDESC, &[self.d(ins[0])])?;
        if let Some(&b) = ins.get(1) {
            d.set_descriptors(attr::OPERATION_POINTWISE_BDESC, &[self.d(b)])?;
        }
        if let Some(&m) = ins.get(2) {
            d.set_descriptors(attr::OPERATION_POINTWISE_TDESC, &[self.d(m)])?;
        }
        d.set_descriptors(attr::OPERATION_POINTWISE_YDESC, &[self.d(y)])?;
        d.finalize()?;
        self.ops.push(Box::new(d));
        self.aux.push(Box::new(p));
        Ok(())
    }

    /// `c = a · b`, with optional M / N / K overrides and a padding value.
    #[allow(clippy::too_many_arguments)]
    fn matmul(
        &mut self,
        a: T,
        b: T,
        c: T,
        m: Option<T>,
        n: Option<T>,
        k: Option<T>,
        padding: Option<f64>,
    ) -> Result<()> {
        let mut mm = Descriptor::<kind::Matmul>::new()?;
        mm.set(attr::MATMUL_COMP_TYPE, &[DType::F32.raw()])?;
        if let Some(p) = padding {
            mm.set(attr::MATMUL_PADDING_VALUE, &[p])?;
        }
        mm.finalize()?;
        let mut d = Descriptor::<kind::MatmulOp>::new()?;
        d.set_descriptors(attr::OPERATION_MATMUL_ADESC, &[self.d(a)])?;
        d.set_descriptors(attr::OPERATION_MATMUL_BDESC, &[self.d(b)])?;
        d.set_descriptors(attr::OPERATION_MATMUL_CDESC, &[self.d(c)])?;
        d.set_descriptors(attr::OPERATION_MATMUL_DESC, &[&mm])?;
        if let Some(m) = m {
            d.set_descriptors(attr::OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, &[self.d(m)])?;
        }
        if let Some(n) = n {
            d.set_descriptors(attr::OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, &[self.d(n)])?;
        }
        if let Some(k) = k {
            d.set_descriptors(attr::OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, &[self.d(k)])?;
        }
        d.finalize()?;
        self.ops.push(Box::new(d));
        self.aux.push(Box::new(mm));
        Ok(())
    }

    fn reduction(&mut self, op: sys::cudnnReduceTensorOp_t, x: T, y: T) -> Result<()> {
        let mut r = Descriptor::<kind::Reduction>::new()?;
        r.set(attr::REDUCTION_OPERATOR, &[op])?;
        r.set(attr::REDUCTION_COMP_TYPE, &[DType::F32.raw()])?;
        r.finalize()?;
        let mut d = Descriptor::<kind::ReductionOp>::new()?;
        d.set_descriptors(attr::OPERATION_REDUCTION_XDESC, &[self.d(x)])?;
        d.set_descriptors(attr::OPERATION_REDUCTION_YDESC, &[self.d(y)])?;
        d.set_descriptors(attr::OPERATION_REDUCTION_DESC, &[&r])?;
        d.finalize()?;
        self.ops.push(Box::new(d));
        self.aux.push(Box::new(r));
        Ok(())
    }

    fn bernoulli(&mut self, keep: f64, seed: T, offset: T, y: T) -> Result<()> {
        let mut r = Descriptor::<kind::Rng>::new()?;
        r.set(
            attr::RNG_DISTRIBUTION,
            &[sys::cudnnRngDistribution_t::CUDNN_RNG_DISTRIBUTION_BERNOULLI],
        )?;
        r.set(attr::RNG_BERNOULLI_DIST_PROBABILITY, &[keep])?;
        r.finalize()?;
        let mut d = Descriptor::<kind::RngOp>::new()?;
        d.set_descriptors(attr::OPERATION_RNG_YDESC, &[self.d(y)])?;
        d.set_descriptors(attr::OPERATION_RNG_DESC, &[&r])?;
        d.set_descriptors(attr::OPERATION_RNG_SEED, &[self.d(seed)])?;
        d.set_descriptors(attr::OPERATION_RNG_OFFSET_DESC, &[self.d(offset)])?;
        d.finalize()?;
        self.ops.push(Box::new(d));
        self.aux.push(Box::new(r));
        Ok(())
    }
}

impl ExtOp for CompositeFwdOp {
    fn name(&self) -> String {
        "sdpa forward (composite)".to_string()
    }
    fn tensors(&self) -> Vec<(&'static str, usize, bool)> {
        let mut v = vec![
            ("q", self.q, false),
            ("k", self.k, false),
            ("v", self.v, false),
            ("scale", self.scale, false),
        ];
        if let Some((a, b)) = self.seq {
            v.push(("seq_len_q", a, false));
            v.push(("seq_len_kv", b, false));
        }
        if let Some((a, b, _, s)) = self.dropout {
            v.push(("dropout_seed", a, false));
            v.push(("dropout_offset", b, false));
            v.push(("dropout_scale", s, false));
        }
        if let Some(f) = self.fill {
            v.push(("mask_fill", f, false));
        }
        v.push(("o", self.o, true));
        if let Some(s) = self.stats {
            v.push(("stats", s, true));
        }
        v
    }
    fn signature(&self) -> String {
        format!(
            "composite padding={} dropout={:?} causal={} training={}",
            self.seq.is_some(),
            self.dropout.map(|d| d.2),
            self.causal,
            self.stats.is_some()
        )
    }
    fn build(
        &self,
        t: &[Descriptor<kind::Tensor>],
        _compute: DType,
        built: &mut Built,
    ) -> Result<()> {
        let [b, h, sq, skv, _d, _dv] = self.dims;
        let mut c = Ctx {
            t,
            own: Vec::new(),
            next_uid: self.uid_base,
            ops: Vec::new(),
            aux: Vec::new(),
        };
        // Kᵀ: K's memory (its UID, so the plan binds K's buffer) seen as
        // [B, H_kv, D, S_kv].
        let kd = self.k_spec.dims();
        let ks = self.k_spec.strides();
        let kt = c.tensor(
            self.k_spec.dtype(),
            &[kd[0], kd[1], kd[3], kd[2]],
            &[ks[0], ks[1], ks[3], ks[2]],
            t[self.k].get_one(attr::TENSOR_UNIQUE_ID)?,
            false,
        )?;
        c.own.push(kt);
        let kt = T::V(c.own.len() - 1);
        let score = [b, h, sq, skv];
        let row = [b, h, sq, 1];
        let (seq_q, seq_kv) = match self.seq {
            Some((a, b)) => (Some(T::G(a)), Some(T::G(b))),
            None => (None, None),
        };

        let s = c.virt(DType::F32, &score)?;
        c.matmul(
            T::G(self.q),
            kt,
            s,
            seq_q,
            seq_kv,
            None,
            self.seq.map(|_| 0.0),
        )
        .map_err(|e| e.with_context("the composite's Q·Kᵀ"))?;
        let mut last = c.virt(DType::F32, &score)?;
        c.pointwise(M::CUDNN_POINTWISE_MUL, DType::F32, &[s, T::G(self.scale)], last, None)?;

        if let (Some(sq_t), Some(skv_t), Some(fill)) = (seq_q, seq_kv, self.fill) {
            let ri = c.virt(DType::I32, &score)?;
            c.pointwise(M::CUDNN_POINTWISE_GEN_INDEX, DType::I32, &[last], ri, Some(2))?;
            let ci = c.virt(DType::I32, &score)?;
            c.pointwise(M::CUDNN_POINTWISE_GEN_INDEX, DType::I32, &[last], ci, Some(3))?;
            let rm = c.virt(DType::Bool, &score)?;
            c.pointwise(M::CUDNN_POINTWISE_CMP_LT, DType::Bool, &[ri, sq_t], rm, None)?;
            let cm = c.virt(DType::Bool, &score)?;
            c.pointwise(M::CUDNN_POINTWISE_CMP_LT, DType::Bool, &[ci, skv_t], cm, None)?;
            let m = c.virt(DType::Bool, &score)?;
            c.pointwise(M::CUDNN_POINTWISE_LOGICAL_AND, DType::Bool, &[rm, cm], m, None)?;
            let out = c.virt(DType::F32, &score)?;
            c.pointwise(
                M::CUDNN_POINTWISE_BINARY_SELECT,
                DType::F32,
                &[last, T::G(fill), m],
                out,
                None,
            )?;
            last = out;
        }
        if let (true, Some(fill)) = (self.causal, self.fill) {
            let ri = c.virt(DType::I32, &score)?;
            c.pointwise(M::CUDNN_POINTWISE_GEN_INDEX, DType::F32, &[last], ri, Some(2))?;
            let ci = c.virt(DType::I32, &score)?;
            c.pointwise(M::CUDNN_POINTWISE_GEN_INDEX, DType::F32, &[last], ci, Some(3))?;
            let m = c.virt(DType::Bool, &score)?;
            c.pointwise(M::CUDNN_POINTWISE_CMP_GE, DType::Bool, &[ri, ci], m, None)?;
            let out = c.virt(DType::F32, &score)?;
            c.pointwise(
                M::CUDNN_POINTWISE_BINARY_SELECT,
                DType::F32,
                &[last, T::G(fill), m],
                out,
                None,
            )?;
            last = out;
        }

        // Softmax along the keys.
        let mx = c.virt(DType::F32, &row)?;
        c.reduction(sys::cudnnReduceTensorOp_t::CUDNN_REDUCE_TENSOR_MAX, last, mx)?;
        let z = c.virt(DType::F32, &score)?;
        c.pointwise(M::CUDNN_POINTWISE_SUB, DType::F32, &[last, mx], z, None)?;
        let e = c.virt(DType::F32, &score)?;
        c.pointwise(M::CUDNN_POINTWISE_EXP, DType::F32, &[z], e, None)?;
        let l = c.virt(DType::F32, &row)?;
        c.reduction(sys::cudnnReduceTensorOp_t::CUDNN_REDUCE_TENSOR_ADD, e, l)?;
        // The statistics are computed in inference too (into a virtual
        // tensor): the fused engines recognise the softmax only with them.
        let lg = c.virt(DType::F32, &row)?;
        c.pointwise(M::CUDNN_POINTWISE_LOG, DType::F32, &[l], lg, None)?;
        let st = match self.stats {
            Some(st) => T::G(st),
            None => c.virt(DType::F32, &row)?,
        };
        c.pointwise(M::CUDNN_POINTWISE_ADD, DType::F32, &[mx, lg], st, None)?;
        // P is stored in the I/O type when it is the last op before P·V.
        let p_type = |last_op: bool| if last_op { self.io } else { DType::F32 };
        let p = c.virt(p_type(self.dropout.is_none()), &score)?;
        c.pointwise(M::CUDNN_POINTWISE_DIV, DType::F32, &[e, l], p, None)?;
        let mut last = p;
        if let Some((seed, offset, prob, dscale)) = self.dropout {
            let r = c.virt(DType::F32, &score)?;
            c.bernoulli(1.0 - prob, T::G(seed), T::G(offset), r)
                .map_err(|e| e.with_context("the composite's dropout mask"))?;
            let kept = c.virt(DType::F32, &score)?;
            c.pointwise(M::CUDNN_POINTWISE_MUL, DType::F32, &[last, r], kept, None)?;
            let scaled = c.virt(self.io, &score)?;
            c.pointwise(
                M::CUDNN_POINTWISE_MUL,
                DType::F32,
                &[kept, T::G(dscale)],
                scaled,
                None,
            )?;
            last = scaled;
        }
        c.matmul(last, T::G(self.v), T::G(self.o), seq_q, None, seq_kv, None)
            .map_err(|e| e.with_context("the composite's P·V"))?;
        built.ops.append(&mut c.ops);
        built.aux.append(&mut c.aux);
        for d in c.own {
            built.aux.push(Box::new(d));
        }
        Ok(())
    }
}
