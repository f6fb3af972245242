//! FP8 attention backward (per-tensor scaling): [`Graph::sdpa_fp8_backward`],
//! the composite NVIDIA's frontend builds for it.
//!
//! With `Q`, `K`, `V`, `O` in the config's FP8 type, `dO` in its gradient
//! type, the forward's statistics (f32) and twelve f32 scale inputs
//! (`[1, 1, 1, 1]`), op by op (intermediates f32 and virtual unless named):
//! 1. `Δ = sum_row(dO ⊙ O) * descale_do * descale_o`;
//! 2. `S = (Q · Kᵀ) * attn_scale * descale_q * descale_k`, causal-masked
//!    (from cuDNN 9.21 by cuDNN's diagonal band mask operation, as the
//!    frontend builds it there); `E = exp(S - stats)` (the probabilities);
//! 3. `P = E * scale_s` stored in the FP8 type, seen transposed (`Pᵀ`);
//! 4. `dV = (Pᵀ · dO) * descale_s * descale_do`, `amax_dv`, then `* scale_dv`;
//! 5. `dP = ((dO · Vᵀ) * descale_do * descale_v - Δ) ⊙ E * attn_scale`,
//!    `amax_dp = max |dP|`, stored `* scale_dp` in the gradient type;
//! 6. `dQ = (dP · K) * descale_dp * descale_k`, `amax_dq`, then `* scale_dq`;
//! 7. `dK = (dPᵀ · Q) * descale_dp * descale_q`, `amax_dk`, then `* scale_dk`.
//!
//! `Kᵀ` and `Vᵀ` are K's and V's memory with the last two dims swapped (K
//! itself, for `dQ`, is a reshape of `Kᵀ`), as the frontend lays them out.
//! The rules are [`Fp8SdpaConfig::check_target_for`]'s with `backward`.
//!
//! Where this differs from NVIDIA's frontend 1.32: on Blackwell the
//! frontend pins cuDNN's engine 5 with the knob `STAGES = 2` (its
//! "deterministic" route); the crate plans with cuDNN's heuristics, which
//! choose the same engine with their own knobs (more workspace: about 1 MB
//! against 16 KB for `[2, 4, 256, 128]`).

use super::sdpa_fp8::{Fp8SdpaConfig, fp8_uid_base};
use super::sdpa_fp8_build::{Composite, Mode, Red, T};
use super::{Built, OpNode};
use crate::error::{Error, Result};
use crate::graph::backend::{Descriptor, kind};
use crate::graph::graph::{Graph, Tensor};
use crate::graph::tensor::{DType, TensorSpec};

/// The scale inputs of the backward, in the order of [`Fp8SdpaBackward::scales`].
pub const FP8_BWD_SCALE_NAMES: [&str; 12] = [
    "descale_q",
    "descale_k",
    "descale_v",
    "descale_o",
    "descale_do",
    "descale_s",
    "descale_dp",
    "scale_s",
    "scale_dq",
    "scale_dk",
    "scale_dv",
    "scale_dp",
];

/// What [`Graph::sdpa_fp8_backward`] adds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Fp8SdpaBackward {
    /// Q's gradient (the gradient type, Q's layout).
    pub dq: Tensor,
    /// K's gradient.
    pub dk: Tensor,
    /// V's gradient.
    pub dv: Tensor,
    /// `max |dQ|`, `max |dK|`, `max |dV|`, `max |dP|` before their scales
    /// (`[1, 1, 1, 1]` f32 outputs).
    pub amax: [Tensor; 4],
    /// The scale inputs, named and ordered as [`FP8_BWD_SCALE_NAMES`].
    pub scales: [Tensor; 12],
}

/// The FP8 attention backward composite.
#[derive(Clone, Debug)]
pub(crate) struct Fp8SdpaBwdOp {
    pub(crate) cfg: Fp8SdpaConfig,
    pub(crate) grad: DType,
    /// q, k, v, o, do, stats.
    pub(crate) ins: [usize; 6],
    pub(crate) k_spec: TensorSpec,
    pub(crate) v_spec: TensorSpec,
    pub(crate) scales: [usize; 12],
    pub(crate) attn_scale: usize,
    pub(crate) fill: Option<usize>,
    /// dq, dk, dv.
    pub(crate) outs: [usize; 3],
    /// amax dq, dk, dv, dp.
    pub(crate) amax: [usize; 4],
    pub(crate) uid_base: i64,
}

impl OpNode for Fp8SdpaBwdOp {
    fn name(&self) -> String {
        "sdpa_fp8_backward".to_string()
    }
    fn tensors(&self) -> Vec<(&'static str, usize, bool)> {
        let mut v: Vec<(&'static str, usize, bool)> = ["q", "k", "v", "o", "do", "stats"]
            .iter()
            .zip(self.ins)
            .map(|(n, i)| (*n, i, false))
            .collect();
        for (n, &i) in FP8_BWD_SCALE_NAMES.iter().zip(&self.scales) {
            v.push((n, i, false));
        }
        v.push(("attn_scale", self.attn_scale, false));
        if let Some(f) = self.fill {
            v.push(("fill", f, false));
        }
        for (n, &i) in ["dq", "dk", "dv"].iter().zip(&self.outs) {
            v.push((n, i, true));
        }
        for (n, &i) in ["amax_dq", "amax_dk", "amax_dv", "amax_dp"]
            .iter()
            .zip(&self.amax)
        {
            v.push((n, i, true));
        }
        v
    }
    fn signature(&self) -> String {
        let c = &self.cfg;
        format!(
            "{:?}",
            (
                c.batch,
                c.heads,
                c.seq_q,
                c.seq_kv,
                c.head_dim,
                c.is_causal,
                self.grad
            )
        )
    }
    fn honours_compute_type(&self) -> bool {
        false
    }
    fn check_target(&self, device_ver: i64) -> Result<()> {
        self.cfg
            .check_target_for(true, device_ver, super::sdpa::loaded_cudnn()?)
    }
    fn build(
        &self,
        t: &[Descriptor<kind::Tensor>],
        _compute: DType,
        built: &mut Built,
    ) -> Result<()> {
        let c = &self.cfg;
        let (b, h, sq, skv, d) = (c.batch, c.heads, c.seq_q, c.seq_kv, c.head_dim);
        let [q, _, _, o, d_o, stats] = self.ins.map(T::G);
        let [dsq, dsk, dsv, dso, dsdo, dss, dsdp, ss, sdq, sdk, sdv, sdp] = self.scales.map(T::G);
        let [dq, dk, dv] = self.outs.map(T::G);
        let [adq, adk, adv, adp] = self.amax.map(T::G);
        let attn = T::G(self.attn_scale);
        let score = [b, h, sq, skv];
        let row = [b, h, sq, 1];
        let mut x = Composite::new(t, self.uid_base);
        let [_, ki, vi, ..] = self.ins;
        let kt = x.transposed(ki, &self.k_spec, 2, 3)?;
        let vt = x.transposed(vi, &self.v_spec, 2, 3)?;

        // Δ = sum_row(dO ⊙ O), descaled.
        let dod = x.virt(DType::F32, &[b, h, sq, d])?;
        x.pointwise(Mode::CUDNN_POINTWISE_MUL, DType::F32, &[d_o, o], dod, None)?;
        let delta = x.virt(DType::F32, &row)?;
        x.reduction(Red::CUDNN_REDUCE_TENSOR_ADD, dod, delta)?;
        let delta = x.mul(delta, dsdo, &row, None)?;
        let delta = x.mul(delta, dso, &row, None)?;

        // E = exp(mask(S) - stats).
        let s = x.virt(DType::F32, &score)?;
        x.matmul(q, kt, s)
            .map_err(|e| e.with_context("the FP8 attention backward's Q·Kᵀ"))?;
        let s = x.mul(s, attn, &score, None)?;
        let s = x.mul(s, dsq, &score, None)?;
        let mut s = x.mul(s, dsk, &score, None)?;
        if let Some(fill) = self.fill {
            s = x.causal_mask(s, T::G(fill), &score)?;
        }
        let z = x.virt(DType::F32, &score)?;
        x.pointwise(Mode::CUDNN_POINTWISE_SUB, DType::F32, &[s, stats], z, None)?;
        let e = x.virt(DType::F32, &score)?;
        x.pointwise(Mode::CUDNN_POINTWISE_EXP, DType::F32, &[z], e, None)?;

        // dV = Pᵀ · dO.
        let p = x.virt(c.dtype, &score)?;
        x.mul(e, ss, &score, Some(p))?;
        let pt = x.virt_transposed(c.dtype, [b, h, skv, sq])?;
        x.reshape(p, pt)?;
        x.matmul_fp8(pt, d_o, [dss, dsdo, sdv], dv, adv, &[b, h, skv, d])
            .map_err(|e| e.with_context("the FP8 attention backward's dV"))?;

        // dP.
        let dpr = x.virt(DType::F32, &score)?;
        x.matmul(d_o, vt, dpr)
            .map_err(|e| e.with_context("the FP8 attention backward's dO·Vᵀ"))?;
        let dpr = x.mul(dpr, dsdo, &score, None)?;
        let dpr = x.mul(dpr, dsv, &score, None)?;
        let dp = x.virt(DType::F32, &score)?;
        x.pointwise(
            Mode::CUDNN_POINTWISE_SUB,
            DType::F32,
            &[dpr, delta],
            dp,
            None,
        )?;
        let dp = x.mul(dp, e, &score, None)?;
        let dp = x.mul(dp, attn, &score, None)?;
        x.reduction(Red::CUDNN_REDUCE_TENSOR_AMAX, dp, adp)?;
        let dp8 = x.virt(self.grad, &score)?;
        x.mul(dp, sdp, &score, Some(dp8))?;

        // dQ = dP · K (K a reshape of Kᵀ).
        let ks = self.k_spec.strides();
        let kd = self.k_spec.dims();
        let (Some(&s0), Some(&s1), Some(&s2), Some(&s3)) =
            (ks.first(), ks.get(1), ks.get(2), ks.get(3))
        else {
            return Err(Error::invalid(
                "sdpa_fp8_backward: k strides",
                "must have 4 entries",
                ks.len(),
            ));
        };
        let k_back = x.tensor(self.k_spec.dtype(), kd, &[s0, s1, s2, s3], None, true)?;
        x.reshape(kt, k_back)?;
        x.matmul_fp8(dp8, k_back, [dsdp, dsk, sdq], dq, adq, &[b, h, sq, d])
            .map_err(|e| e.with_context("the FP8 attention backward's dQ"))?;

        // dK = dPᵀ · Q.
        let dpt = x.virt_transposed(self.grad, [b, h, skv, sq])?;
        x.reshape(dp8, dpt)?;
        x.matmul_fp8(dpt, q, [dsdp, dsq, sdk], dk, adk, &[b, h, skv, d])
            .map_err(|e| e.with_context("the FP8 attention backward's dK"))?;
        x.finish(built);
        Ok(())
    }
}

impl Graph {
    /// FP8 attention backward with per-tensor scaling (the composite in the
    /// [module](super::sdpa_fp8_bwd) docs): `q`, `k`, `v`, `o` as
    /// [`sdpa_fp8_forward`](Self::sdpa_fp8_forward) takes and makes them
    /// (`o` in `cfg.o_dtype`, which must be FP8 here), `d_o` in `grad` (an
    /// FP8 type: dO, dP and the gradients), `stats` `[B, H, S_q, 1]` f32.
    /// Adds the twelve scale inputs (`sdpa_fp8<n>.descale_q` ...), `dq`,
    /// `dk`, `dv` in `grad` (the layouts of `q`, `k`, `v`) and four amax
    /// outputs, all graph outputs.
    ///
    /// Plans only where [`Fp8SdpaConfig::check_target_for`] (backward)
    /// allows (`Plan::build` refuses others with `Unsupported`).
    ///
    /// # Errors
    /// [`Fp8SdpaConfig::validate`]'s errors; `grad` or `cfg.o_dtype` not
    /// FP8; a tensor's dims, type or strides not the config's.
    #[allow(clippy::too_many_arguments)]
    pub fn sdpa_fp8_backward(
        &mut self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        o: Tensor,
        d_o: Tensor,
        stats: Tensor,
        grad: DType,
        cfg: &Fp8SdpaConfig,
    ) -> Result<Fp8SdpaBackward> {
        let op = format!("sdpa_fp8_backward {}", self.label());
        cfg.validate()?;
        if !grad.is_fp8() {
            return Err(Error::invalid(
                format!("{op}: grad"),
                "must be fp8e4m3 or fp8e5m2",
                grad,
            ));
        }
        if !cfg.o_dtype.is_fp8() {
            return Err(Error::invalid(
                format!("{op}: Fp8SdpaConfig.o_dtype"),
                "must be an FP8 type for the backward (O is descaled)",
                cfg.o_dtype,
            ));
        }
        let qspec = cfg.q_spec()?;
        self.fp8_expect(&op, "q", q, &qspec)?;
        self.fp8_expect(&op, "k", k, &cfg.kv_spec()?)?;
        self.fp8_expect(&op, "v", v, &cfg.kv_spec()?)?;
        self.fp8_expect(&op, "o", o, &qspec.with_dtype(cfg.o_dtype))?;
        self.fp8_expect(&op, "dO", d_o, &qspec.with_dtype(grad))?;
        self.fp8_expect(&op, "stats", stats, &cfg.stats_spec()?)?;
        let uid_base = fp8_uid_base(self.ops.len())?;
        let prefix = format!("sdpa_fp8{}", self.ops.len());
        let scales = self.fp8_scale_inputs(&prefix, FP8_BWD_SCALE_NAMES)?;
        let attn_scale = self.scalar(cfg.scale_value(), DType::F32, 4)?;
        let fill = if cfg.is_causal {
            Some(self.scalar(f64::NEG_INFINITY, DType::F32, 4)?)
        } else {
            None
        };
        let mut outs = Vec::with_capacity(3);
        for src in [q, k, v] {
            let s = self.node(src)?.spec.clone();
            outs.push(self.fp8_output(&op, TensorSpec::like(grad, s.dims(), &s)?)?);
        }
        let one = TensorSpec::row_major(DType::F32, &[1, 1, 1, 1])?;
        let mut amax = Vec::with_capacity(4);
        for _ in 0..4 {
            amax.push(self.fp8_output(&op, one.clone())?);
        }
        let idx = |g: &Graph, ts: &[Tensor]| -> Result<Vec<usize>> {
            ts.iter().map(|&t| g.index(t)).collect()
        };
        let ins = idx(self, &[q, k, v, o, d_o, stats])?;
        let sc = idx(self, &scales)?;
        let ou = idx(self, &outs)?;
        let am = idx(self, &amax)?;
        let to = |v: &[usize], what: &str| {
            Error::mismatch(format!("sdpa_fp8_backward {what}"), v.len(), 0)
        };
        let op_node = Fp8SdpaBwdOp {
            cfg: cfg.clone(),
            grad,
            ins: ins.as_slice().try_into().map_err(|_| to(&ins, "inputs"))?,
            k_spec: self.node(k)?.spec.clone(),
            v_spec: self.node(v)?.spec.clone(),
            scales: sc.as_slice().try_into().map_err(|_| to(&sc, "scales"))?,
            attn_scale: self.index(attn_scale)?,
            fill: fill.map(|f| self.index(f)).transpose()?,
            outs: ou.as_slice().try_into().map_err(|_| to(&ou, "outputs"))?,
            amax: am.as_slice().try_into().map_err(|_| to(&am, "amax"))?,
            uid_base,
        };
        self.push_op(op_node);
        let three: [Tensor; 3] = outs
            .try_into()
            .map_err(|v: Vec<Tensor>| Error::mismatch("sdpa_fp8_backward outputs", 3, v.len()))?;
        let amax: [Tensor; 4] = amax
            .try_into()
            .map_err(|v: Vec<Tensor>| Error::mismatch("sdpa_fp8_backward amax", 4, v.len()))?;
        let [dq, dk, dv] = three;
        Ok(Fp8SdpaBackward {
            dq,
            dk,
            dv,
            amax,
            scales,
        })
    }
}
