//! FP8 attention (per-tensor scaling): [`Fp8SdpaConfig`], its version and
//! architecture rules, and [`Graph::sdpa_fp8_forward`], which adds the
//! composite NVIDIA's frontend builds for an FP8 SDPA forward.
//!
//! With `Q`, `K`, `V` in E4M3 or E5M2 (`[B, H, S, D]`, the head dim
//! contiguous) and six f32 scale inputs (`[1, 1, 1, 1]`), op by op (all
//! intermediates virtual and f32 unless named):
//! 1. `S = Q · Kᵀ` (FP8 operands, f32 accumulation; `Kᵀ` is K's memory
//!    with the last two dims swapped);
//! 2. `S *= attn_scale` (a by-value scalar), `S *= descale_q`, `S *= descale_k`;
//! 3. causal: `S = (row >= col) ? S : -inf`;
//! 4. softmax: `m = max_row(S)`, `e = exp(S - m)`, `l = sum_row(e)`,
//!    `P = e / l`, the statistics `m + log(l)` (an output in training);
//!
//!    from cuDNN 9.21 steps 3 and 4 are cuDNN's diagonal band mask and
//!    softmax operations (the same values), as the frontend builds them
//!    there; the backward's causal mask too;
//! 5. `amax_s = max |P|`, then `P *= scale_s`, stored as the input's FP8 type;
//! 6. `O' = (P · V) * descale_s * descale_v`, `amax_o = max |O'|`,
//!    `O = O' * scale_o` in the output type.
//!
//! Rules (NVIDIA's frontend 1.32 checks the same before it asks cuDNN, and
//! cuDNN's heuristics offer nothing outside them): cuDNN 9.1.0 or newer but
//! not 9.10.0; Hopper (sm_90) or newer; head dim a multiple of 16, at most
//! 256 on Hopper, at most 128 on Blackwell (256 from cuDNN 9.26); an f16 /
//! bf16 output only on Blackwell with cuDNN 9.13 or newer. The backward
//! (Hopper: head dim exactly 128; Blackwell: up to 128) is
//! [`Fp8SdpaConfig::check_target_for`]'s too.

use super::sdpa_fp8_build::{Composite, Mode, Red, T};
use super::{Built, OpNode};
use crate::error::{Error, Result};
use crate::graph::backend::{Descriptor, kind};
use crate::graph::graph::{Graph, Role, Tensor};
use crate::graph::tensor::{DType, TensorSpec, fmt_dims};

/// An FP8 attention's shape and options (per-tensor scaling; Q, K, V share
/// one element type, and K / V have Q's heads). Made with
/// [`Fp8SdpaConfig::new`] and the chainable methods (the struct is
/// `#[non_exhaustive]`; its fields stay readable and assignable):
///
/// ```
/// use cudnn::graph::{DType, Fp8SdpaConfig};
/// let cfg = Fp8SdpaConfig::new(2, 8, 256, 256, 128)
///     .dtype(DType::Fp8E5M2)
///     .o_dtype(DType::BF16)
///     .causal(true)
///     .training(true);
/// assert_eq!((cfg.dtype, cfg.o_dtype, cfg.is_training), (DType::Fp8E5M2, DType::BF16, true));
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Fp8SdpaConfig {
    /// Batch size.
    pub batch: i64,
    /// Heads (of Q, K and V).
    pub heads: i64,
    /// Query sequence length.
    pub seq_q: i64,
    /// Key / value sequence length.
    pub seq_kv: i64,
    /// Head dim (of Q, K and V).
    pub head_dim: i64,
    /// Q, K, V (and dO) element type: [`DType::Fp8E4M3`] or [`DType::Fp8E5M2`].
    pub dtype: DType,
    /// O's element type: an FP8 type, or f16 / bf16 (Blackwell only).
    pub o_dtype: DType,
    /// The softmax scale; `None` for `1 / sqrt(head_dim)`.
    pub scale: Option<f64>,
    /// Top-left aligned causal mask.
    pub is_causal: bool,
    /// The mode the rules assume: a training forward, which writes the
    /// softmax statistics for the backward. The graph's entry point
    /// decides the mode:
    /// [`Graph::sdpa_fp8_forward_training`](crate::graph::Graph::sdpa_fp8_forward_training)
    /// sets it, [`Graph::sdpa_fp8_forward`](crate::graph::Graph::sdpa_fp8_forward)
    /// refuses it.
    pub is_training: bool,
}

/// What [`Graph::sdpa_fp8_forward`] adds: the outputs and the scale inputs
/// to bind (each `[1, 1, 1, 1]` f32). `Stats` is the mode: `()` for an
/// inference forward, a [`Tensor`] for a training one
/// ([`Fp8SdpaTrainingForward`], from [`Graph::sdpa_fp8_forward_training`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Fp8SdpaForward<Stats = ()> {
    /// The attention output (`[B, H, S_q, D]`, Q's layout).
    pub o: Tensor,
    /// The softmax statistics (`[B, H, S_q, 1]` f32) of a training forward;
    /// `()` in inference.
    pub stats: Stats,
    /// `max |P|` before `scale_s`.
    pub amax_s: Tensor,
    /// `max |O|` before `scale_o`.
    pub amax_o: Tensor,
    /// Q's descale (input).
    pub descale_q: Tensor,
    /// K's descale (input).
    pub descale_k: Tensor,
    /// V's descale (input).
    pub descale_v: Tensor,
    /// P's descale (input, the inverse of `scale_s`).
    pub descale_s: Tensor,
    /// P's scale before it is stored in FP8 (input).
    pub scale_s: Tensor,
    /// O's scale (input).
    pub scale_o: Tensor,
}

/// A training forward's outputs: the statistics are a [`Tensor`].
pub type Fp8SdpaTrainingForward = Fp8SdpaForward<Tensor>;

impl<S> Fp8SdpaForward<S> {
    /// The same outputs with `f` applied to the statistics:
    /// `.map_stats(Some)` on a training forward and `.map_stats(|()| None)`
    /// on an inference one give both `Fp8SdpaForward<Option<Tensor>>`, for
    /// code that builds either mode.
    pub fn map_stats<T>(self, f: impl FnOnce(S) -> T) -> Fp8SdpaForward<T> {
        Fp8SdpaForward {
            o: self.o,
            stats: f(self.stats),
            amax_s: self.amax_s,
            amax_o: self.amax_o,
            descale_q: self.descale_q,
            descale_k: self.descale_k,
            descale_v: self.descale_v,
            descale_s: self.descale_s,
            scale_s: self.scale_s,
            scale_o: self.scale_o,
        }
    }
}

fn fmt_version(v: (u32, u32, u32)) -> String {
    format!("{}.{}.{}", v.0, v.1, v.2)
}

impl Fp8SdpaConfig {
    /// E4M3 in and out, the default scale, no mask, inference.
    pub fn new(batch: i64, heads: i64, seq_q: i64, seq_kv: i64, head_dim: i64) -> Self {
        Self {
            batch,
            heads,
            seq_q,
            seq_kv,
            head_dim,
            dtype: DType::Fp8E4M3,
            o_dtype: DType::Fp8E4M3,
            scale: None,
            is_causal: false,
            is_training: false,
        }
    }

    /// With Q, K, V (and dO) of element type `dtype` (an FP8 type).
    pub fn dtype(mut self, dtype: DType) -> Self {
        self.dtype = dtype;
        self
    }

    /// With O of element type `o_dtype` (an FP8 type, or f16 / bf16).
    pub fn o_dtype(mut self, o_dtype: DType) -> Self {
        self.o_dtype = o_dtype;
        self
    }

    /// With the softmax scale `scale` (instead of `1 / sqrt(head_dim)`).
    pub fn scale(mut self, scale: f64) -> Self {
        self.scale = Some(scale);
        self
    }

    /// With a top-left aligned causal mask (or not).
    pub fn causal(mut self, on: bool) -> Self {
        self.is_causal = on;
        self
    }

    /// The mode the rules assume: training (statistics written) or not.
    /// [`Graph::sdpa_fp8_forward_training`](crate::graph::Graph::sdpa_fp8_forward_training)
    /// sets it itself; set it here to ask the rules about a training graph.
    pub fn training(mut self, on: bool) -> Self {
        self.is_training = on;
        self
    }

    /// The softmax scale used.
    pub fn scale_value(&self) -> f64 {
        self.scale
            .unwrap_or_else(|| 1.0 / (self.head_dim.max(1) as f64).sqrt())
    }

    /// Dims, types and scale in range; no target needed.
    ///
    /// # Errors
    /// A dim below 1 or whose products overflow, sequence lengths above
    /// `i32::MAX`, `dtype` not FP8, `o_dtype` not FP8 / f16 / bf16, a
    /// scale that is not finite and non-zero as an f32 (the type cuDNN
    /// gets it in), a head dim not a multiple of 16.
    pub fn validate(&self) -> Result<()> {
        for (name, v) in [
            ("batch", self.batch),
            ("heads", self.heads),
            ("seq_q", self.seq_q),
            ("seq_kv", self.seq_kv),
            ("head_dim", self.head_dim),
        ] {
            if v < 1 {
                return Err(Error::invalid(
                    format!("Fp8SdpaConfig.{name}"),
                    "must be >= 1",
                    v,
                ));
            }
        }
        for (name, v) in [("seq_q", self.seq_q), ("seq_kv", self.seq_kv)] {
            if v > i64::from(i32::MAX) {
                return Err(Error::invalid(
                    format!("Fp8SdpaConfig.{name}"),
                    "must fit an i32 (cuDNN's index type)",
                    v,
                ));
            }
        }
        if self.head_dim % 16 != 0 {
            return Err(Error::invalid(
                "Fp8SdpaConfig.head_dim",
                "must be a multiple of 16 (FP8 attention rows are 16-byte aligned)",
                self.head_dim,
            ));
        }
        if !self.dtype.is_fp8() {
            return Err(Error::invalid(
                "Fp8SdpaConfig.dtype",
                "must be fp8e4m3 or fp8e5m2",
                self.dtype,
            ));
        }
        if !(self.o_dtype.is_fp8() || matches!(self.o_dtype, DType::F16 | DType::BF16)) {
            return Err(Error::invalid(
                "Fp8SdpaConfig.o_dtype",
                "must be fp8e4m3, fp8e5m2, f16 or bf16",
                self.o_dtype,
            ));
        }
        // The scale is passed to cuDNN as an f32 by-value scalar: it must
        // stay finite and non-zero there too (1e39 would be +inf, 1e-50 0).
        let s = self.scale_value();
        let s32 = s as f32;
        if !s.is_finite() || s == 0.0 || !s32.is_finite() || s32 == 0.0 {
            return Err(Error::invalid(
                "Fp8SdpaConfig.scale",
                "must be finite and non-zero as an f32",
                s,
            ));
        }
        // The score tensor [B, H, S_q, S_kv] and Q / K / V must be addressable.
        for (name, d) in [
            ("scores", [self.batch, self.heads, self.seq_q, self.seq_kv]),
            ("q", self.q_dims()),
            ("k", self.kv_dims()),
        ] {
            d.iter()
                .try_fold(1i64, |acc, &x| acc.checked_mul(x))
                .ok_or_else(|| {
                    Error::invalid(
                        format!("Fp8SdpaConfig ({name} element count)"),
                        "overflows i64",
                        fmt_dims(&d),
                    )
                })?;
        }
        Ok(())
    }

    fn q_dims(&self) -> [i64; 4] {
        [self.batch, self.heads, self.seq_q, self.head_dim]
    }

    fn kv_dims(&self) -> [i64; 4] {
        [self.batch, self.heads, self.seq_kv, self.head_dim]
    }

    /// Q (and O, dO): `[B, H, S_q, D]`, packed BHSD.
    ///
    /// # Errors
    /// The element count overflows.
    pub fn q_spec(&self) -> Result<TensorSpec> {
        TensorSpec::row_major(self.dtype, &self.q_dims())
    }

    /// K and V: `[B, H, S_kv, D]`, packed BHSD.
    ///
    /// # Errors
    /// The element count overflows.
    pub fn kv_spec(&self) -> Result<TensorSpec> {
        TensorSpec::row_major(self.dtype, &self.kv_dims())
    }

    /// The softmax statistics: `[B, H, S_q, 1]` f32.
    ///
    /// # Errors
    /// The element count overflows.
    pub fn stats_spec(&self) -> Result<TensorSpec> {
        TensorSpec::row_major(DType::F32, &[self.batch, self.heads, self.seq_q, 1])
    }

    /// Whether a GPU of `device_ver` (major*100 + minor*10) with cuDNN
    /// `cudnn` runs this FP8 attention (`backward`: its backward), by the
    /// rules in the [module](self) docs. A pure function: `Plan::build`
    /// applies it with the target and the loaded cuDNN.
    ///
    /// # Errors
    /// [`validate`](Self::validate)'s errors; `Unsupported` naming the
    /// option, the architecture, the cuDNN and what is needed.
    pub fn check_target_for(
        &self,
        backward: bool,
        device_ver: i64,
        cudnn: (u32, u32, u32),
    ) -> Result<()> {
        self.validate()?;
        let major = device_ver / 100;
        let d = self.head_dim;
        let limit: Option<&str> = if cudnn < (9, 1, 0) {
            Some("cuDNN 9.1.0 or newer")
        } else if cudnn.0 == 9 && cudnn.1 == 10 && cudnn.2 == 0 {
            Some("a cuDNN other than 9.10.0 (NVIDIA's frontend refuses its FP8 attention)")
        } else if major < 9 {
            Some("a Hopper (sm_90) or newer GPU")
        } else if backward {
            if major == 9 && d != 128 {
                Some("head_dim 128 for the FP8 attention backward on Hopper")
            } else if major >= 10 && d > 128 {
                Some("head_dim up to 128 for the FP8 attention backward on Blackwell")
            } else {
                None
            }
        } else if major == 9 && d > 256 {
            Some("head_dim up to 256 on Hopper")
        } else if major >= 10 && d > 128 && !(d == 256 && cudnn >= (9, 26, 0)) {
            Some("head_dim up to 128 on Blackwell (256 from cuDNN 9.26)")
        } else if !self.o_dtype.is_fp8() && (major < 10 || cudnn < (9, 13, 0)) {
            Some("a Blackwell GPU and cuDNN 9.13 or newer for an f16 / bf16 output")
        } else {
            None
        };
        match limit {
            None => Ok(()),
            Some(needs) => Err(Error::Unsupported {
                what: format!(
                    "the FP8 attention {} with head_dim {}, {} in, {} out on a GPU of compute capability {}.{} with cuDNN {}",
                    if backward { "backward" } else { "forward" },
                    d,
                    self.dtype,
                    self.o_dtype,
                    major,
                    (device_ver % 100) / 10,
                    fmt_version(cudnn)
                ),
                needs: Some(needs.to_string()),
            }),
        }
    }
}

/// The FP8 attention forward composite.
#[derive(Clone, Debug)]
pub(crate) struct Fp8SdpaFwdOp {
    pub(crate) cfg: Fp8SdpaConfig,
    pub(crate) q: usize,
    pub(crate) k: usize,
    pub(crate) v: usize,
    pub(crate) k_spec: TensorSpec,
    /// descale q, k, v, s; scale s, o.
    pub(crate) scales: [usize; 6],
    pub(crate) attn_scale: usize,
    pub(crate) fill: Option<usize>,
    pub(crate) o: usize,
    pub(crate) stats: Option<usize>,
    pub(crate) amax_s: usize,
    pub(crate) amax_o: usize,
    pub(crate) uid_base: i64,
}

const SCALE_NAMES: [&str; 6] = [
    "descale_q",
    "descale_k",
    "descale_v",
    "descale_s",
    "scale_s",
    "scale_o",
];

impl OpNode for Fp8SdpaFwdOp {
    fn name(&self) -> String {
        "sdpa_fp8_forward".to_string()
    }
    fn tensors(&self) -> Vec<(&'static str, usize, bool)> {
        let mut v = vec![
            ("q", self.q, false),
            ("k", self.k, false),
            ("v", self.v, false),
        ];
        for (n, &i) in SCALE_NAMES.iter().zip(&self.scales) {
            v.push((n, i, false));
        }
        v.push(("attn_scale", self.attn_scale, false));
        if let Some(f) = self.fill {
            v.push(("fill", f, false));
        }
        v.push(("o", self.o, true));
        if let Some(s) = self.stats {
            v.push(("stats", s, true));
        }
        v.push(("amax_s", self.amax_s, true));
        v.push(("amax_o", self.amax_o, true));
        v
    }
    fn signature(&self) -> String {
        format!(
            "{:?}",
            (
                self.cfg.batch,
                self.cfg.heads,
                self.cfg.seq_q,
                self.cfg.seq_kv,
                self.cfg.head_dim,
                self.cfg.is_causal,
                self.cfg.is_training
            )
        )
    }
    fn honours_compute_type(&self) -> bool {
        false
    }
    fn check_target(&self, device_ver: i64) -> Result<()> {
        self.cfg
            .check_target_for(false, device_ver, super::sdpa::loaded_cudnn()?)
    }
    fn build(
        &self,
        t: &[Descriptor<kind::Tensor>],
        _compute: DType,
        built: &mut Built,
    ) -> Result<()> {
        let c = &self.cfg;
        let mut x = Composite::new(t, self.uid_base);
        let score = [c.batch, c.heads, c.seq_q, c.seq_kv];
        let row = [c.batch, c.heads, c.seq_q, 1];
        let [dq, dk, dv, ds, ss, so] = self.scales.map(T::G);
        let kt = x.transposed(self.k, &self.k_spec, 2, 3)?;
        let s = x.virt(DType::F32, &score)?;
        x.matmul(T::G(self.q), kt, s)
            .map_err(|e| e.with_context("the FP8 attention's Q·Kᵀ"))?;
        let s = x.mul(s, T::G(self.attn_scale), &score, None)?;
        let s = x.mul(s, dq, &score, None)?;
        let mut s = x.mul(s, dk, &score, None)?;
        if let Some(fill) = self.fill {
            s = x.causal_mask(s, T::G(fill), &score)?;
        }
        let p = x.virt(DType::F32, &score)?;
        if super::sdpa::loaded_cudnn()? >= super::sdpa_softmax::SOFTMAX_OPERATION {
            // cuDNN's softmax operation, as NVIDIA's frontend builds it
            // from 9.21 (the statistics in training only).
            x.softmax_op(s, p, self.stats.map(T::G))?;
        } else {
            let mx = x.virt(DType::F32, &row)?;
            x.reduction(Red::CUDNN_REDUCE_TENSOR_MAX, s, mx)?;
            let z = x.virt(DType::F32, &score)?;
            x.pointwise(Mode::CUDNN_POINTWISE_SUB, DType::F32, &[s, mx], z, None)?;
            let e = x.virt(DType::F32, &score)?;
            x.pointwise(Mode::CUDNN_POINTWISE_EXP, DType::F32, &[z], e, None)?;
            let l = x.virt(DType::F32, &row)?;
            x.reduction(Red::CUDNN_REDUCE_TENSOR_ADD, e, l)?;
            let lg = x.virt(DType::F32, &row)?;
            x.pointwise(Mode::CUDNN_POINTWISE_LOG, DType::F32, &[l], lg, None)?;
            let st = match self.stats {
                Some(st) => T::G(st),
                None => x.virt(DType::F32, &row)?,
            };
            x.pointwise(Mode::CUDNN_POINTWISE_ADD, DType::F32, &[mx, lg], st, None)?;
            x.pointwise(Mode::CUDNN_POINTWISE_DIV, DType::F32, &[e, l], p, None)?;
        }
        x.reduction(Red::CUDNN_REDUCE_TENSOR_AMAX, p, T::G(self.amax_s))?;
        let p8 = x.virt(c.dtype, &score)?;
        x.mul(p, ss, &score, Some(p8))?;
        let o = x.virt(DType::F32, &[c.batch, c.heads, c.seq_q, c.head_dim])?;
        x.matmul(p8, T::G(self.v), o)
            .map_err(|e| e.with_context("the FP8 attention's P·V"))?;
        let od = [c.batch, c.heads, c.seq_q, c.head_dim];
        let o = x.mul(o, ds, &od, None)?;
        let o = x.mul(o, dv, &od, None)?;
        x.reduction(Red::CUDNN_REDUCE_TENSOR_AMAX, o, T::G(self.amax_o))?;
        x.mul(o, so, &od, Some(T::G(self.o)))?;
        x.finish(built);
        Ok(())
    }
}

impl Graph {
    pub(crate) fn fp8_expect(
        &self,
        op: &str,
        role: &str,
        t: Tensor,
        want: &TensorSpec,
    ) -> Result<()> {
        let n = self.node(t)?;
        if n.spec.dims() != want.dims() {
            return Err(Error::mismatch(
                format!(
                    "{op}: {role} `{}` dims ([B, H, S, D] from the Fp8SdpaConfig)",
                    n.name
                ),
                fmt_dims(want.dims()),
                fmt_dims(n.spec.dims()),
            ));
        }
        if n.spec.dtype() != want.dtype() {
            return Err(Error::mismatch(
                format!(
                    "{op}: {role} `{}` element type (Fp8SdpaConfig.dtype)",
                    n.name
                ),
                want.dtype(),
                n.spec.dtype(),
            ));
        }
        if n.spec.strides().last() != Some(&1) {
            return Err(Error::invalid(
                format!("{op}: {role} `{}` strides", n.name),
                "must have the head dim contiguous (last stride 1)",
                fmt_dims(n.spec.strides()),
            ));
        }
        Ok(())
    }

    /// A graph output made by an op (not by [`output`](Self::output)).
    pub(crate) fn fp8_output(&mut self, op: &str, spec: TensorSpec) -> Result<Tensor> {
        let t = self.intermediate(op, spec)?;
        let i = self.index(t)?;
        self.nodes[i].role = Role::Output;
        Ok(t)
    }

    /// The six per-tensor scale inputs (`{prefix}.descale_q` ...), f32 `[1, 1, 1, 1]`.
    pub(crate) fn fp8_scale_inputs<const N: usize>(
        &mut self,
        prefix: &str,
        names: [&str; N],
    ) -> Result<[Tensor; N]> {
        let spec = TensorSpec::row_major(DType::F32, &[1, 1, 1, 1])?;
        let mut out = Vec::with_capacity(N);
        for n in names {
            out.push(self.input(&format!("{prefix}.{n}"), spec.clone())?);
        }
        out.try_into()
            .map_err(|v: Vec<Tensor>| Error::mismatch("FP8 attention scale inputs", N, v.len()))
    }

    /// FP8 attention forward with per-tensor scaling (the composite in the
    /// [module](super::sdpa_fp8) docs): `q` `[B, H, S_q, D]`, `k`, `v`
    /// `[B, H, S_kv, D]` of the config's FP8 type (any strides with the head
    /// dim contiguous). Adds the six scale inputs (named
    /// `sdpa_fp8<n>.descale_q` ...; rename them at will), `o` in
    /// `cfg.o_dtype` (Q's layout) and the two amax outputs (`[1, 1, 1, 1]`
    /// f32), all graph outputs. An inference forward: the statistics of a
    /// training one come from
    /// [`sdpa_fp8_forward_training`](Self::sdpa_fp8_forward_training).
    ///
    /// Plans only where [`Fp8SdpaConfig::check_target_for`] allows
    /// (`Plan::build` refuses others with `Unsupported`).
    ///
    /// # Errors
    /// [`Fp8SdpaConfig::validate`]'s errors; a config with `is_training`
    /// (the training forward is the other call); q / k / v dims, type or
    /// strides not the config's.
    #[doc(alias = "sdpa_fp8")]
    pub fn sdpa_fp8_forward(
        &mut self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        cfg: &Fp8SdpaConfig,
    ) -> Result<Fp8SdpaForward> {
        if cfg.is_training {
            return Err(Error::invalid(
                format!(
                    "sdpa_fp8_forward op #{}: Fp8SdpaConfig::is_training",
                    self.ops.len()
                ),
                "must be false for Graph::sdpa_fp8_forward (an inference forward); \
                 a training forward is Graph::sdpa_fp8_forward_training, whose stats output is a Tensor",
                true,
            ));
        }
        Ok(self.sdpa_fp8_forward_any(q, k, v, cfg)?.map_stats(|_| ()))
    }

    /// FP8 attention forward for training: as
    /// [`sdpa_fp8_forward`](Self::sdpa_fp8_forward), and the softmax
    /// statistics (`[B, H, S_q, 1]` f32) are a graph output too,
    /// [`Fp8SdpaTrainingForward::stats`], for
    /// [`sdpa_fp8_backward`](Self::sdpa_fp8_backward). Built in training
    /// mode whatever [`Fp8SdpaConfig::is_training`] says (the mode is this
    /// call's).
    ///
    /// # Errors
    /// As [`sdpa_fp8_forward`](Self::sdpa_fp8_forward), for the config in
    /// training mode.
    pub fn sdpa_fp8_forward_training(
        &mut self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        cfg: &Fp8SdpaConfig,
    ) -> Result<Fp8SdpaTrainingForward> {
        let cfg = cfg.clone().training(true);
        let f = self.sdpa_fp8_forward_any(q, k, v, &cfg)?;
        match f.stats {
            Some(s) => Ok(f.map_stats(|_| s)),
            None => Err(Error::invalid(
                "sdpa_fp8_forward_training",
                "made no statistics output (an internal error)",
                "stats: None",
            )),
        }
    }

    /// The forward in the config's mode: `stats` is `Some` exactly in training.
    fn sdpa_fp8_forward_any(
        &mut self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        cfg: &Fp8SdpaConfig,
    ) -> Result<Fp8SdpaForward<Option<Tensor>>> {
        let op = format!("sdpa_fp8_forward {}", self.label());
        cfg.validate()?;
        self.fp8_expect(&op, "q", q, &cfg.q_spec()?)?;
        self.fp8_expect(&op, "k", k, &cfg.kv_spec()?)?;
        self.fp8_expect(&op, "v", v, &cfg.kv_spec()?)?;
        let uid_base = fp8_uid_base(self.ops.len())?;
        let prefix = format!("sdpa_fp8{}", self.ops.len());
        let scales = self.fp8_scale_inputs(&prefix, SCALE_NAMES)?;
        let attn_scale = self.scalar(cfg.scale_value(), DType::F32, 4)?;
        let fill = if cfg.is_causal {
            Some(self.scalar(f64::NEG_INFINITY, DType::F32, 4)?)
        } else {
            None
        };
        let qs = self.node(q)?.spec.clone();
        let k_spec = self.node(k)?.spec.clone();
        let o = self.fp8_output(&op, TensorSpec::like(cfg.o_dtype, qs.dims(), &qs)?)?;
        let stats = if cfg.is_training {
            Some(self.fp8_output(&op, cfg.stats_spec()?)?)
        } else {
            None
        };
        let one = TensorSpec::row_major(DType::F32, &[1, 1, 1, 1])?;
        let amax_s = self.fp8_output(&op, one.clone())?;
        let amax_o = self.fp8_output(&op, one)?;
        let mut idx = [0usize; 6];
        for (i, t) in idx.iter_mut().zip(scales) {
            *i = self.index(t)?;
        }
        self.push_op(Fp8SdpaFwdOp {
            cfg: cfg.clone(),
            q: self.index(q)?,
            k: self.index(k)?,
            v: self.index(v)?,
            k_spec,
            scales: idx,
            attn_scale: self.index(attn_scale)?,
            fill: fill.map(|f| self.index(f)).transpose()?,
            o: self.index(o)?,
            stats: stats.map(|s| self.index(s)).transpose()?,
            amax_s: self.index(amax_s)?,
            amax_o: self.index(amax_o)?,
            uid_base,
        });
        let [descale_q, descale_k, descale_v, descale_s, scale_s, scale_o] = scales;
        Ok(Fp8SdpaForward {
            o,
            stats,
            amax_s,
            amax_o,
            descale_q,
            descale_k,
            descale_v,
            descale_s,
            scale_s,
            scale_o,
        })
    }
}

/// The first UID of an FP8 composite's own tensors: above the graph's and
/// clear of the other composites' (2^41 + 2^16 per op).
pub(crate) fn fp8_uid_base(ops: usize) -> Result<i64> {
    i64::try_from(ops)
        .ok()
        .filter(|&n| n < 1 << 20)
        .map(|n| (1i64 << 41) + (n << 16))
        .ok_or_else(|| Error::invalid("graph", "too many ops (at most 2^20)", ops))
}
