//! The composite attention, forward ([`CompositeFwdOp`]) and backward
//! ([`CompositeBwdOp`]): the same `O = softmax(mask(scale * Q Kᵀ)) V`
//! as cuDNN's SDPA operation, written as the matmul / pointwise / reduction /
//! RNG ops that cuDNN's fused-attention engines recognise. It is what
//! `Graph::sdpa_forward` builds where the loaded cuDNN lacks the SDPA
//! operation (before 9.13.1) or one of the options asked for (padding before
//! 9.15, a causal mask before 9.21, dropout before 9.22 or in training), what
//! `Graph::sdpa_backward` builds under `SdpaImpl::Auto` (always, as NVIDIA's
//! frontend 1.32 does), and what `SdpaImpl::Composite` asks for.
//!
//! The forward, op by op (all intermediates virtual; f32 unless named):
//! 1. `S = Q · Kᵀ` (`Kᵀ` is K's memory with the last two dims and strides
//!    swapped; with padding, M and N are overridden by the sequence lengths and
//!    the padded rows read as 0);
//! 2. `S *= scale` (a by-value scalar), then `S += bias` and `S +=
//!    slope[h] * (col - row)` with a bias / ALiBi ([`sdpa_bias`](super::sdpa_bias));
//! 3. padding: `S = (row < seq_q && col < seq_kv) ? S : -inf`, the indices from
//!    `GEN_INDEX` (i32) and the comparisons boolean;
//! 4. causal: `S = (row >= col) ? S : -inf`: from cuDNN 9.21 cuDNN's
//!    diagonal band mask operation (as NVIDIA's frontend builds it there);
//!    before, the indices from `GEN_INDEX`, computed in i32 as for the
//!    padding (see "Where this crate differs from NVIDIA's frontend" in
//!    [`sdpa`](super::sdpa));
//! 5. softmax: `m = max_row(S)`, `e = exp(S - m)`, `l = sum_row(e)`,
//!    `P = e / l`, and the statistics `m + log(l)` (a graph output in
//!    training, virtual in inference: the engines expect them either way);
//!    from cuDNN 9.21 cuDNN's softmax operation;
//! 6. dropout: `P *= bernoulli(1 - p) / (1 - p)` from Philox with the seed and
//!    offset inputs;
//! 7. `P` is stored in the I/O type (f16 / bf16), then `O = P · V`.
//!
//! The masks use `-inf` from cuDNN 9.10 and the lowest finite f32 before it,
//! as the fused engines of those releases expect.

use super::sdpa::{SdpaConfig, loaded_cudnn};
use super::{Built, OpNode};
use crate::error::{Error, Result};
use crate::graph::backend::{Descriptor, attr, kind};
use crate::graph::tensor::{BYTE_ALIGNMENT, DType, TensorSpec};
use crate::sys::cudnn as sys;

type M = sys::cudnnPointwiseMode_t;

#[path = "sdpa_composite_masks.rs"]
mod masks;
pub(crate) use masks::{BAND_MASK_OPERATION, CompositeBand};
#[path = "sdpa_composite_bias.rs"]
mod bias;
#[path = "sdpa_composite_softcap.rs"]
mod softcap;
pub(crate) use bias::CompositeBias;
#[path = "sdpa_composite_softmax.rs"]
mod softmax;
use super::sdpa_softmax::SoftmaxIdx;

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
    /// K's ragged offsets (packed THD, no paged cache): Kᵀ, the view of K's
    /// memory the first matmul reads, carries them too, or cuDNN would read
    /// K as padded (and leave the offsets out of the plan).
    pub(crate) k_ragged: Option<usize>,
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
    /// The causal mask and the window.
    pub(crate) band: CompositeBand,
    /// The page tables of K and V (a paged cache).
    pub(crate) paged: Option<(usize, usize)>,
    /// The mask fill scalar (padding, causal or window).
    pub(crate) fill: Option<usize>,
    /// The softcap's by-value scalar.
    pub(crate) softcap: Option<usize>,
    pub(crate) o: usize,
    pub(crate) stats: Option<usize>,
    /// Max / sum_exp outputs and the sink (issue 24).
    pub(crate) sm: SoftmaxIdx,
    /// Build the softmax as cuDNN's softmax operation (cuDNN >= 9.21, what
    /// NVIDIA's frontend builds there) instead of its 7-op decomposition.
    pub(crate) softmax_op: bool,
    /// The first UID of the composite's own virtual tensors.
    pub(crate) uid_base: i64,
    /// The config, for the per-architecture limits.
    pub(crate) cfg: SdpaConfig,
    /// The bias and ALiBi inputs.
    pub(crate) bias: Option<CompositeBias>,
}

/// The sequence-length inputs' full values, for timing runs.
fn timing_fills(seq: Option<(usize, usize)>, sq: i64, skv: i64) -> Vec<(usize, i32)> {
    match seq {
        Some((a, b)) => vec![
            (a, i32::try_from(sq).unwrap_or(i32::MAX)),
            (b, i32::try_from(skv).unwrap_or(i32::MAX)),
        ],
        None => Vec::new(),
    }
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
        self.tensor_ragged(dtype, dims, strides, uid, virt, None)
    }

    /// [`tensor`](Self::tensor), with the ragged offsets of graph tensor
    /// `ragged` (a view of a bound tensor that has them).
    fn tensor_ragged(
        &mut self,
        dtype: DType,
        dims: &[i64],
        strides: &[i64],
        uid: i64,
        virt: bool,
        ragged: Option<usize>,
    ) -> Result<Descriptor<kind::Tensor>> {
        let mut d = Descriptor::<kind::Tensor>::new()?;
        if let Some(o) = ragged {
            let off = self.t.get(o).ok_or_else(|| {
                Error::invalid("composite attention ragged offsets", "unknown tensor", o)
            })?;
            d.set_descriptors(attr::TENSOR_RAGGED_OFFSET_DESC, &[off])?;
        }
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
    fn uid(&mut self) -> Result<i64> {
        let uid = self.next_uid;
        self.next_uid = uid
            .checked_add(1)
            .ok_or_else(|| Error::invalid("composite attention", "UIDs overflow", uid))?;
        Ok(uid)
    }

    fn virt(&mut self, dtype: DType, dims: &[i64]) -> Result<T> {
        let spec = TensorSpec::row_major(dtype, dims)?;
        let uid = self.uid()?;
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

    /// A virtual intermediate with explicit strides.
    fn virt_strided(&mut self, dtype: DType, dims: &[i64], strides: &[i64]) -> Result<T> {
        let uid = self.uid()?;
        let d = self.tensor(dtype, dims, strides, uid, true)?;
        self.own.push(d);
        Ok(T::V(self.own.len() - 1))
    }

    fn reshape(&mut self, x: T, y: T) -> Result<()> {
        let mut d = Descriptor::<kind::ReshapeOp>::new()?;
        d.set_descriptors(attr::OPERATION_RESHAPE_XDESC, &[self.d(x)])?;
        d.set_descriptors(attr::OPERATION_RESHAPE_YDESC, &[self.d(y)])?;
        d.finalize()?;
        self.ops.push(Box::new(d));
        Ok(())
    }

    /// Hand the descriptors to the op graph.
    fn finish(self, built: &mut Built) {
        let Ctx { own, ops, aux, .. } = self;
        built.ops.extend(ops);
        built.aux.extend(aux);
        for d in own {
            built.aux.push(Box::new(d));
        }
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

impl OpNode for CompositeFwdOp {
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
        if let Some((a, b)) = self.paged {
            v.push(("page_table_k", a, false));
            v.push(("page_table_v", b, false));
        }
        self.band.push_tensors(&mut v);
        if let Some(f) = self.fill {
            v.push(("mask_fill", f, false));
        }
        if let Some(c) = self.softcap {
            v.push(("softcap", c, false));
        }
        if let Some(b) = &self.bias {
            b.push_tensors(&mut v);
        }
        v.push(("o", self.o, true));
        if let Some(s) = self.stats {
            v.push(("stats", s, true));
        }
        self.sm.push_tensors(&mut v);
        v
    }
    fn timing_fills(&self) -> Vec<(usize, i32)> {
        let [_, _, sq, skv, _, _] = self.dims;
        timing_fills(self.seq, sq, skv)
    }
    fn check_target(&self, device_ver: i64) -> Result<()> {
        self.cfg
            .check_target_for(false, device_ver, loaded_cudnn()?)
    }
    fn honours_compute_type(&self) -> bool {
        false
    }
    fn signature(&self) -> String {
        format!(
            "composite padding={} dropout={:?} {} training={} paged={} softcap={}{}{}",
            self.seq.is_some(),
            self.dropout.map(|d| d.2),
            self.band.signature(),
            self.stats.is_some(),
            self.paged.is_some(),
            self.softcap.is_some(),
            self.bias.map(|b| b.signature()).unwrap_or_default(),
            self.sm.signature()
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
        let (kt, vv) = match (self.paged, self.seq) {
            // A paged cache: K (as Kᵀ, [B, H_kv, D, S_kv]) and V gathered
            // from their containers through the page tables, as NVIDIA's
            // frontend does.
            (Some((pk, pv)), Some((_, lkv))) => {
                let hk = kd[1];
                let [d, dv] = [self.dims[4], self.dims[5]];
                let ktv =
                    c.virt_strided(self.io, &[b, hk, d, skv], &[d * skv * hk, d * skv, 1, d])?;
                c.paged_load(T::G(self.k), T::G(pk), T::G(lkv), ktv)?;
                let vt = c.virt_strided(
                    self.io,
                    &[b, hk, skv, dv],
                    &[dv * skv * hk, dv * skv, dv, 1],
                )?;
                c.paged_load(T::G(self.v), T::G(pv), T::G(lkv), vt)?;
                (ktv, vt)
            }
            _ => {
                let kt = c.tensor_ragged(
                    self.k_spec.dtype(),
                    &[kd[0], kd[1], kd[3], kd[2]],
                    &[ks[0], ks[1], ks[3], ks[2]],
                    t[self.k].get_one(attr::TENSOR_UNIQUE_ID)?,
                    false,
                    self.k_ragged,
                )?;
                c.own.push(kt);
                (T::V(c.own.len() - 1), T::G(self.v))
            }
        };
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
        c.pointwise(
            M::CUDNN_POINTWISE_MUL,
            DType::F32,
            &[s, T::G(self.scale)],
            last,
            None,
        )?;
        if let Some(cap) = self.softcap {
            last = c.softcap_fwd(last, T::G(cap), &score)?.0;
        }
        last = c.score_bias(last, self.bias.as_ref(), &score)?;

        if let (Some(sq_t), Some(skv_t), Some(fill)) = (seq_q, seq_kv, self.fill) {
            last = c.padding_mask(last, sq_t, skv_t, T::G(fill), &score)?;
        }
        if self.band.any() {
            last = c.band_mask(last, self.fill.map(T::G), &score, &self.band)?;
        }

        // Softmax along the keys: P is stored in the I/O type when it is
        // the last op before P·V.
        let p_type = |last_op: bool| if last_op { self.io } else { DType::F32 };
        let p = c.virt(p_type(self.dropout.is_none()), &score)?;
        if self.softmax_op {
            softmax::forward_op(&mut c, last, p, self.stats, &self.sm)?;
        } else {
            // The statistics are computed in inference too, into a virtual
            // tensor: the fused engines recognise this decomposition only
            // with them.
            let (e, l) = softmax::forward(&mut c, last, &score, &row, self.stats, &self.sm)?;
            c.pointwise(M::CUDNN_POINTWISE_DIV, DType::F32, &[e, l], p, None)?;
        }
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
        c.matmul(last, vv, T::G(self.o), seq_q, None, seq_kv, None)
            .map_err(|e| e.with_context("the composite's P·V"))?;
        c.finish(built);
        Ok(())
    }
}

/// The composite attention backward: the forward's scores recomputed from
/// the saved statistics, then dV, dP, dS and dQ / dK by matmuls.
///
/// 1. `Σ = rowsum(dO ⊙ O) · (1 - p)` (a scratch tensor of the plan);
/// 2. `S = mask(scale · Q Kᵀ)`, `P = exp(S - stats)` (dropout: `Pd = P ⊙ R / (1 - p)`);
/// 3. `dV = Pdᵀ dO` (summed over each K/V head's query heads for GQA);
/// 4. `dP = dO Vᵀ` (⊙ R), `dS = (dP - Σ) ⊙ P · scale` (`/ (1 - p)` with dropout);
/// 5. `dK = dSᵀ Q` (summed for GQA), `dQ = dS K` (into a scratch f32
///    accumulator, then to dQ's type; with dBias straight into dQ, as the
///    frontend's dP-workspace form); dBias is `dS` before the scale,
///    summed over the bias's broadcast dims (a reduction op).
#[derive(Debug, Clone)]
pub(crate) struct CompositeBwdOp {
    pub(crate) q: usize,
    pub(crate) k: usize,
    pub(crate) v: usize,
    /// K's and V's ragged offsets (packed THD): their transposed views
    /// carry them too, as in the forward.
    pub(crate) kv_ragged: Option<(usize, usize)>,
    pub(crate) o: usize,
    pub(crate) d_o: usize,
    pub(crate) stats: usize,
    pub(crate) scale: usize,
    pub(crate) k_spec: TensorSpec,
    pub(crate) v_spec: TensorSpec,
    /// `[B, H, H_kv, S_q, S_kv, D, D_v]`.
    pub(crate) dims: [i64; 7],
    pub(crate) io: DType,
    pub(crate) seq: Option<(usize, usize)>,
    /// Seed, offset, probability, the `1 / (1 - p)` scalar.
    pub(crate) dropout: Option<(usize, usize, f64, usize)>,
    /// `1 - p` (or 1 without dropout).
    pub(crate) keep: usize,
    /// The causal mask and the window.
    pub(crate) band: CompositeBand,
    pub(crate) fill: Option<usize>,
    /// Mask the padding a second time after subtracting the statistics
    /// (the fused engines before cuDNN 9.10 need it).
    pub(crate) repad: bool,
    /// The softcap's by-value scalar.
    pub(crate) softcap: Option<usize>,
    pub(crate) softmax_sum: usize,
    /// The f32 dQ accumulator (none with dBias: dQ written directly, as
    /// the frontend's dP-workspace form).
    pub(crate) dq_accum: Option<usize>,
    pub(crate) dq: usize,
    pub(crate) dk: usize,
    pub(crate) dv: usize,
    /// The sink and dSink (issue 24).
    pub(crate) sm: SoftmaxIdx,
    pub(crate) uid_base: i64,
    /// The config, for the per-architecture limits.
    pub(crate) cfg: SdpaConfig,
    /// The bias and ALiBi inputs, and dBias.
    pub(crate) bias: Option<CompositeBias>,
}

impl OpNode for CompositeBwdOp {
    fn name(&self) -> String {
        "sdpa backward (composite)".to_string()
    }
    fn tensors(&self) -> Vec<(&'static str, usize, bool)> {
        let mut v = vec![
            ("q", self.q, false),
            ("k", self.k, false),
            ("v", self.v, false),
            ("o", self.o, false),
            ("do", self.d_o, false),
            ("stats", self.stats, false),
            ("scale", self.scale, false),
            ("keep", self.keep, false),
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
        self.band.push_tensors(&mut v);
        if let Some(f) = self.fill {
            v.push(("mask_fill", f, false));
        }
        if let Some(c) = self.softcap {
            v.push(("softcap", c, false));
        }
        if let Some(b) = &self.bias {
            b.push_tensors(&mut v);
        }
        v.push(("softmax_sum", self.softmax_sum, true));
        if let Some(a) = self.dq_accum {
            v.push(("dq_accum", a, true));
        }
        v.push(("dq", self.dq, true));
        v.push(("dk", self.dk, true));
        v.push(("dv", self.dv, true));
        self.sm.push_tensors(&mut v);
        v
    }
    fn timing_fills(&self) -> Vec<(usize, i32)> {
        let [_, _, _, sq, skv, _, _] = self.dims;
        timing_fills(self.seq, sq, skv)
    }
    fn check_target(&self, device_ver: i64) -> Result<()> {
        self.cfg.check_target_for(true, device_ver, loaded_cudnn()?)
    }
    fn honours_compute_type(&self) -> bool {
        false
    }
    fn signature(&self) -> String {
        format!(
            "composite padding={} dropout={:?} {} repad={} softcap={}{}{}",
            self.seq.is_some(),
            self.dropout.map(|d| d.2),
            self.band.signature(),
            self.repad,
            self.softcap.is_some(),
            self.bias.map(|b| b.signature()).unwrap_or_default(),
            self.sm.signature()
        )
    }
    fn build(
        &self,
        t: &[Descriptor<kind::Tensor>],
        _compute: DType,
        built: &mut Built,
    ) -> Result<()> {
        let [b, h, hkv, sq, skv, d, dv] = self.dims;
        let mut c = Ctx {
            t,
            own: Vec::new(),
            next_uid: self.uid_base,
            ops: Vec::new(),
            aux: Vec::new(),
        };
        let transposed =
            |c: &mut Ctx<'_>, spec: &TensorSpec, i: usize, off: Option<usize>| -> Result<T> {
                let (dd, ss) = (spec.dims(), spec.strides());
                let desc = c.tensor_ragged(
                    spec.dtype(),
                    &[dd[0], dd[1], dd[3], dd[2]],
                    &[ss[0], ss[1], ss[3], ss[2]],
                    t[i].get_one(attr::TENSOR_UNIQUE_ID)?,
                    false,
                    off,
                )?;
                c.own.push(desc);
                Ok(T::V(c.own.len() - 1))
            };
        let kt = transposed(&mut c, &self.k_spec, self.k, self.kv_ragged.map(|r| r.0))?;
        let vt = transposed(&mut c, &self.v_spec, self.v, self.kv_ragged.map(|r| r.1))?;
        let score = [b, h, sq, skv];
        let score_t = [b, h, skv, sq];
        // The scores' packed strides, transposed (the config checked that the
        // scores' size is representable).
        let ss = TensorSpec::row_major(DType::F32, &score)?;
        let st = ss.strides();
        let score_t_strides = [st[0], st[1], st[3], st[2]];
        let row = [b, h, sq, 1];
        let (seq_q, seq_kv) = match self.seq {
            Some((a, b)) => (Some(T::G(a)), Some(T::G(b))),
            None => (None, None),
        };

        let rng = match self.dropout {
            Some((seed, offset, prob, _)) => {
                let r = c.virt(DType::F32, &score)?;
                c.bernoulli(1.0 - prob, T::G(seed), T::G(offset), r)
                    .map_err(|e| e.with_context("the composite backward's dropout mask"))?;
                Some(r)
            }
            None => None,
        };

        // Σ = rowsum(dO ⊙ O) · keep.
        let doo = c.virt(DType::F32, &[b, h, sq, dv])?;
        c.pointwise(
            M::CUDNN_POINTWISE_MUL,
            DType::F32,
            &[T::G(self.d_o), T::G(self.o)],
            doo,
            None,
        )?;
        let rs = c.virt(DType::F32, &row)?;
        c.reduction(sys::cudnnReduceTensorOp_t::CUDNN_REDUCE_TENSOR_ADD, doo, rs)?;
        softmax::backward_d_sink(&mut c, rs, T::G(self.stats), &row, &self.sm)?;
        let sum = T::G(self.softmax_sum);
        c.pointwise(
            M::CUDNN_POINTWISE_MUL,
            DType::F32,
            &[rs, T::G(self.keep)],
            sum,
            None,
        )?;

        // P = exp(mask(scale · Q Kᵀ) - stats).
        let s = c.virt(DType::F32, &score)?;
        c.matmul(T::G(self.q), kt, s, seq_q, seq_kv, None, None)
            .map_err(|e| e.with_context("the composite backward's Q·Kᵀ"))?;
        let mut last = c.virt(DType::F32, &score)?;
        c.pointwise(
            M::CUDNN_POINTWISE_MUL,
            DType::F32,
            &[s, T::G(self.scale)],
            last,
            None,
        )?;
        let mut capped = None;
        if let Some(cap) = self.softcap {
            let (out, div) = c.softcap_fwd(last, T::G(cap), &score)?;
            capped = Some((div, T::G(cap)));
            last = out;
        }
        last = c.score_bias(last, self.bias.as_ref(), &score)?;
        if let (Some(a), Some(b), Some(f)) = (seq_q, seq_kv, self.fill) {
            last = c.padding_mask(last, a, b, T::G(f), &score)?;
        }
        let z = c.virt(DType::F32, &score)?;
        c.pointwise(
            M::CUDNN_POINTWISE_SUB,
            DType::F32,
            &[last, T::G(self.stats)],
            z,
            None,
        )?;
        last = z;
        if let (true, Some(a), Some(b), Some(f)) = (self.repad, seq_q, seq_kv, self.fill) {
            last = c.padding_mask(last, a, b, T::G(f), &score)?;
        }
        if self.band.any() {
            last = c.band_mask(last, self.fill.map(T::G), &score, &self.band)?;
        }
        let p = c.virt(DType::F32, &score)?;
        c.pointwise(M::CUDNN_POINTWISE_EXP, DType::F32, &[last], p, None)?;
        let mut pd = p;
        if let (Some(r), Some((_, _, _, dscale))) = (rng, self.dropout) {
            let kept = c.virt(DType::F32, &score)?;
            c.pointwise(M::CUDNN_POINTWISE_MUL, DType::F32, &[p, r], kept, None)?;
            let scaled = c.virt(DType::F32, &score)?;
            c.pointwise(
                M::CUDNN_POINTWISE_MUL,
                DType::F32,
                &[kept, T::G(dscale)],
                scaled,
                None,
            )?;
            pd = scaled;
        }

        // dV = Pdᵀ dO (per query head, then summed over each group for GQA).
        let pt = c.virt_strided(self.io, &score_t, &score_t_strides)?;
        c.reshape(pd, pt)?;
        if h == hkv {
            c.matmul(pt, T::G(self.d_o), T::G(self.dv), seq_kv, None, seq_q, None)
                .map_err(|e| e.with_context("the composite backward's dV"))?;
        } else {
            let full = c.virt(self.io, &[b, h, skv, dv])?;
            c.matmul(pt, T::G(self.d_o), full, seq_kv, None, seq_q, None)
                .map_err(|e| e.with_context("the composite backward's dV"))?;
            c.reduction(
                sys::cudnnReduceTensorOp_t::CUDNN_REDUCE_TENSOR_ADD,
                full,
                T::G(self.dv),
            )?;
        }

        // dS = (dO Vᵀ ⊙ R - Σ) ⊙ P · scale (/ (1 - p)).
        let dp = c.virt(DType::F32, &score)?;
        c.matmul(T::G(self.d_o), vt, dp, seq_q, seq_kv, None, None)
            .map_err(|e| e.with_context("the composite backward's dO·Vᵀ"))?;
        let mut last = dp;
        if let Some(r) = rng {
            let m = c.virt(DType::F32, &score)?;
            c.pointwise(M::CUDNN_POINTWISE_MUL, DType::F32, &[last, r], m, None)?;
            last = m;
        }
        let sub = c.virt(DType::F32, &score)?;
        c.pointwise(M::CUDNN_POINTWISE_SUB, DType::F32, &[last, sum], sub, None)?;
        let ds0 = c.virt(DType::F32, &score)?;
        c.pointwise(M::CUDNN_POINTWISE_MUL, DType::F32, &[sub, p], ds0, None)?;
        let mut last = ds0;
        if let Some((_, _, _, dscale)) = self.dropout {
            let m = c.virt(DType::F32, &score)?;
            c.pointwise(
                M::CUDNN_POINTWISE_MUL,
                DType::F32,
                &[last, T::G(dscale)],
                m,
                None,
            )?;
            last = m;
        }
        // dBias is the gradient of the scores after the softcap (the bias
        // is added after it): taken before the softcap's backward.
        c.dbias(last, self.bias.as_ref())?;
        if let Some((div, cap)) = capped {
            last = c.softcap_bwd(last, div, cap, &score)?;
        }
        let ds = c.virt(DType::F32, &score)?;
        c.pointwise(
            M::CUDNN_POINTWISE_MUL,
            DType::F32,
            &[last, T::G(self.scale)],
            ds,
            None,
        )?;

        // dK = dSᵀ Q.
        let dst = c.virt_strided(self.io, &score_t, &score_t_strides)?;
        c.reshape(ds, dst)?;
        if h == hkv {
            c.matmul(dst, T::G(self.q), T::G(self.dk), seq_kv, None, seq_q, None)
                .map_err(|e| e.with_context("the composite backward's dK"))?;
        } else {
            let full = c.virt(self.io, &[b, h, skv, d])?;
            c.matmul(dst, T::G(self.q), full, seq_kv, None, seq_q, None)
                .map_err(|e| e.with_context("the composite backward's dK"))?;
            c.reduction(
                sys::cudnnReduceTensorOp_t::CUDNN_REDUCE_TENSOR_ADD,
                full,
                T::G(self.dk),
            )?;
        }

        // dQ = dS K, accumulated in f32, then converted. The reshape of Kᵀ
        // back to K's shape reads K's memory as Kᵀ does, so it carries K's
        // ragged offsets too (as NVIDIA's frontend's `reshape_k` does):
        // without them dS·K would read batch b's keys at padded positions.
        let kview = {
            let uid = c.uid()?;
            let d = c.tensor_ragged(
                self.k_spec.dtype(),
                self.k_spec.dims(),
                self.k_spec.strides(),
                uid,
                true,
                self.kv_ragged.map(|r| r.0),
            )?;
            c.own.push(d);
            T::V(c.own.len() - 1)
        };
        c.reshape(kt, kview)?;
        let dq_out = self.dq_accum.unwrap_or(self.dq);
        c.matmul(ds, kview, T::G(dq_out), seq_q, None, seq_kv, None)
            .map_err(|e| e.with_context("the composite backward's dQ"))?;
        if let Some(acc) = self.dq_accum {
            c.pointwise(
                M::CUDNN_POINTWISE_IDENTITY,
                DType::F32,
                &[T::G(acc)],
                T::G(self.dq),
                None,
            )?;
        }
        c.finish(built);
        Ok(())
    }
}
