//! Scaled dot-product attention (flash attention): `O = softmax(mask(scale *
//! Q Kᵀ)) V`, forward (inference, or training with the softmax statistics
//! saved) and backward (dQ, dK, dV), through cuDNN's SDPA operation
//! descriptors where the loaded cuDNN has them with every option asked for,
//! and otherwise as the composite matmul–softmax–matmul pattern
//! ([`SdpaImpl`]; cuDNN 9.8 to 9.12 have no SDPA operation at all).
//!
//! Options ([`SdpaConfig`]): f16 / bf16; the attention scale (default
//! `1 / sqrt(head_dim)`); a causal mask (query `i` sees keys `j <= i`,
//! aligned top-left as PyTorch's `is_causal`); a padding mask from per-batch
//! sequence lengths (graph inputs `[B, 1, 1, 1]` i32); dropout with a Philox
//! seed and offset (graph inputs `[1, 1, 1, 1]` i64, bound at each
//! execution); grouped-query attention (fewer K/V heads); BSHD or BHSD
//! storage (the logical dims are always `[B, H, S, D]`, the layout is in the
//! strides). Each option of the SDPA operation needs a cuDNN version, checked
//! before any call ([`SdpaConfig::check`], [`SdpaConfig::resolve`]): with
//! [`SdpaImpl::Native`], an option the loaded cuDNN lacks is a typed
//! `Unsupported` naming the option and the version that has it;
//! [`SdpaImpl::Auto`] builds the composite instead.
//!
//! ```no_run
//! use cudnn::graph::{DType, Graph, Plan, Policy, SdpaConfig, Target};
//! let cfg = SdpaConfig::new(4, 32, 4096, 128, DType::BF16).causal(true).training(true);
//! let mut g = Graph::new();
//! let q = g.input("q", cfg.q_spec()?)?;
//! let k = g.input("k", cfg.k_spec()?)?;
//! let v = g.input("v", cfg.v_spec()?)?;
//! let fwd = g.sdpa_forward(q, k, v, &cfg)?;
//! g.rename(fwd.o, "o")?;
//! let (plan, _) = Plan::build(&g.build()?, &Target::preset("h200")?, &Policy::default())?;
//! # Ok::<(), cudnn::Error>(())
//! ```

use crate::error::{Error, Result};
use crate::graph::backend::{Descriptor, attr, kind};
use crate::graph::graph::{Built, Graph, Op, Role, Tensor};
use crate::graph::ops::ExtOp;
use crate::graph::ops::sdpa_composite::{CompositeBwdOp, CompositeFwdOp};
use crate::graph::tensor::{DType, TensorSpec, fmt_dims};
use crate::sys::cudnn as sys;
use std::sync::Arc;

/// How Q, K, V and O are stored (their logical dims are `[B, H, S, D]` either way).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttnLayout {
    /// Batch, sequence, heads, head dim: what a `[B, S, H*D]` projection gives.
    Bshd,
    /// Batch, heads, sequence, head dim (packed per head).
    Bhsd,
}

impl AttnLayout {
    /// The strides of `[B, H, S, D]` stored this way.
    pub fn strides(self, b: i64, h: i64, s: i64, d: i64) -> [i64; 4] {
        let _ = b;
        match self {
            AttnLayout::Bshd => [s * h * d, d, h * d, 1],
            AttnLayout::Bhsd => [h * s * d, s * d, d, 1],
        }
    }
}

/// Dropout on the attention probabilities: each is zeroed with
/// `probability` and the rest scaled by `1 / (1 - probability)`. The random
/// numbers come from Philox with a seed and offset that are graph inputs
/// (`[1, 1, 1, 1]` i64 device tensors), so each step binds new ones without
/// a new plan; the backward must get the forward's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dropout {
    /// In `[0, 1)`.
    pub probability: f64,
}

/// Which cuDNN construction an attention graph uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SdpaImpl {
    /// cuDNN's SDPA operation where the loaded cuDNN has it with every option
    /// asked for, the composite otherwise.
    #[default]
    Auto,
    /// cuDNN's SDPA operation (`CUDNN_BACKEND_OPERATION_SDPA_FWD/BWD_DESCRIPTOR`):
    /// an option the loaded cuDNN lacks is an `Unsupported` error.
    Native,
    /// The matmul–softmax–matmul pattern of matmul, pointwise, reduction, RNG
    /// and reshape ops that cuDNN's fused-attention engines recognise, forward
    /// and backward. The backward keeps two f32 tensors in the plan's
    /// workspace (the row sums of `dO ⊙ O`, `[B, H, S_q, 1]`, and the dQ
    /// accumulator, `[B, H, S_q, D]`), counted in `Plan::workspace_size`.
    Composite,
}

/// One attention's shapes and options.
#[derive(Clone, Debug, PartialEq)]
pub struct SdpaConfig {
    /// Batch size.
    pub batch: i64,
    /// Query heads.
    pub heads: i64,
    /// Key / value heads (`heads` for multi-head attention, fewer for
    /// grouped-query attention; must divide `heads`).
    pub kv_heads: i64,
    /// Query sequence length.
    pub seq_q: i64,
    /// Key / value sequence length.
    pub seq_kv: i64,
    /// Head dim of Q and K.
    pub head_dim: i64,
    /// Head dim of V and O.
    pub head_dim_v: i64,
    /// Element type of Q, K, V, O and the gradients: f16 or bf16.
    pub dtype: DType,
    /// Storage of Q, K, V, O (and dO, dQ, dK, dV).
    pub layout: AttnLayout,
    /// The score scale; `None` is `1 / sqrt(head_dim)`.
    pub scale: Option<f64>,
    /// Causal mask (top-left aligned: query `i` sees keys `0..=i`).
    pub is_causal: bool,
    /// Padding mask from per-batch sequence lengths (two more graph inputs).
    pub padding: bool,
    /// Dropout on the probabilities.
    pub dropout: Option<Dropout>,
    /// Forward: save the softmax statistics (log-sum-exp per query row,
    /// `[B, H, S_q, 1]` f32) for the backward.
    pub is_training: bool,
    /// The SDPA operation or the composite pattern ([`SdpaImpl::Auto`] by default).
    pub implementation: SdpaImpl,
}

/// What [`Graph::sdpa_forward`] adds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SdpaForward {
    /// The output (a graph output of the config's dtype, in its layout).
    pub o: Tensor,
    /// The softmax statistics (training): `[B, H, S_q, 1]` f32 graph output.
    pub stats: Option<Tensor>,
    /// Per-batch query lengths (padding): `[B, 1, 1, 1]` i32 graph input.
    pub seq_len_q: Option<Tensor>,
    /// Per-batch key / value lengths (padding): `[B, 1, 1, 1]` i32 graph input.
    pub seq_len_kv: Option<Tensor>,
    /// Dropout seed (dropout): `[1, 1, 1, 1]` i64 graph input.
    pub dropout_seed: Option<Tensor>,
    /// Dropout offset (dropout): `[1, 1, 1, 1]` i64 graph input.
    pub dropout_offset: Option<Tensor>,
}

/// What [`Graph::sdpa_backward`] adds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SdpaBackward {
    /// dQ (graph output, Q's dims, dtype and layout).
    pub dq: Tensor,
    /// dK (graph output, K's dims).
    pub dk: Tensor,
    /// dV (graph output, V's dims).
    pub dv: Tensor,
    /// As in [`SdpaForward`].
    pub seq_len_q: Option<Tensor>,
    /// As in [`SdpaForward`].
    pub seq_len_kv: Option<Tensor>,
    /// As in [`SdpaForward`].
    pub dropout_seed: Option<Tensor>,
    /// As in [`SdpaForward`].
    pub dropout_offset: Option<Tensor>,
}

/// The first cuDNN with each part, as `(major, minor)`.
pub mod since {
    /// `CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR`.
    pub const FORWARD: (u32, u32) = (9, 13);
    /// Padding by sequence lengths in the forward.
    pub const PADDING: (u32, u32) = (9, 15);
    /// `CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR`.
    pub const BACKWARD: (u32, u32) = (9, 17);
    /// Score-modifier subgraphs (the causal mask) and forward dropout.
    pub const SUBGRAPH: (u32, u32) = (9, 21);
    /// Backward dropout.
    pub const BACKWARD_DROPOUT: (u32, u32) = (9, 28);
}

fn loaded_cudnn() -> Result<(u32, u32, u32)> {
    let api = crate::check::cudnn()?;
    Ok(api
        .info()
        .version
        .map(|v| (v.major, v.minor, v.patch))
        .unwrap_or((0, 0, 0)))
}

fn loaded_minor() -> Result<(u32, u32)> {
    loaded_cudnn().map(|(a, b, _)| (a, b))
}

impl SdpaConfig {
    /// Multi-head self-attention: `seq_q = seq_kv = seq`, `kv_heads = heads`,
    /// `head_dim_v = head_dim`, BSHD, default scale, no mask, no dropout, inference.
    pub fn new(batch: i64, heads: i64, seq: i64, head_dim: i64, dtype: DType) -> Self {
        Self {
            batch,
            heads,
            kv_heads: heads,
            seq_q: seq,
            seq_kv: seq,
            head_dim,
            head_dim_v: head_dim,
            dtype,
            layout: AttnLayout::Bshd,
            scale: None,
            is_causal: false,
            padding: false,
            dropout: None,
            is_training: false,
            implementation: SdpaImpl::Auto,
        }
    }

    /// Built as `implementation`.
    pub fn implementation(mut self, implementation: SdpaImpl) -> Self {
        self.implementation = implementation;
        self
    }

    /// With a causal mask (or not).
    pub fn causal(mut self, on: bool) -> Self {
        self.is_causal = on;
        self
    }
    /// Saving the softmax statistics (or not).
    pub fn training(mut self, on: bool) -> Self {
        self.is_training = on;
        self
    }
    /// With `kv_heads` key / value heads (grouped-query attention).
    pub fn gqa(mut self, kv_heads: i64) -> Self {
        self.kv_heads = kv_heads;
        self
    }
    /// With a key / value sequence length other than the query's.
    pub fn kv_len(mut self, seq_kv: i64) -> Self {
        self.seq_kv = seq_kv;
        self
    }
    /// Stored as `layout`.
    pub fn layout(mut self, layout: AttnLayout) -> Self {
        self.layout = layout;
        self
    }
    /// With an explicit score scale.
    pub fn scale(mut self, scale: f64) -> Self {
        self.scale = Some(scale);
        self
    }
    /// With a padding mask from sequence lengths (or not).
    pub fn padding(mut self, on: bool) -> Self {
        self.padding = on;
        self
    }
    /// With dropout of `probability`.
    pub fn dropout(mut self, probability: f64) -> Self {
        self.dropout = Some(Dropout { probability });
        self
    }

    /// The score scale used.
    pub fn scale_value(&self) -> f64 {
        self.scale
            .unwrap_or_else(|| 1.0 / (self.head_dim.max(1) as f64).sqrt())
    }

    fn spec(&self, h: i64, s: i64, d: i64) -> Result<TensorSpec> {
        let dims = [self.batch, h, s, d];
        TensorSpec::new(self.dtype, &dims, &self.layout.strides(self.batch, h, s, d))
    }
    /// Q: `[B, H, S_q, D]` in the config's layout.
    ///
    /// # Errors
    /// A dim < 1.
    pub fn q_spec(&self) -> Result<TensorSpec> {
        self.spec(self.heads, self.seq_q, self.head_dim)
    }
    /// K: `[B, H_kv, S_kv, D]`.
    ///
    /// # Errors
    /// A dim < 1.
    pub fn k_spec(&self) -> Result<TensorSpec> {
        self.spec(self.kv_heads, self.seq_kv, self.head_dim)
    }
    /// V: `[B, H_kv, S_kv, D_v]`.
    ///
    /// # Errors
    /// A dim < 1.
    pub fn v_spec(&self) -> Result<TensorSpec> {
        self.spec(self.kv_heads, self.seq_kv, self.head_dim_v)
    }
    /// O and dO: `[B, H, S_q, D_v]`.
    ///
    /// # Errors
    /// A dim < 1.
    pub fn o_spec(&self) -> Result<TensorSpec> {
        self.spec(self.heads, self.seq_q, self.head_dim_v)
    }
    /// The softmax statistics: `[B, H, S_q, 1]` f32, packed.
    ///
    /// # Errors
    /// A dim < 1.
    pub fn stats_spec(&self) -> Result<TensorSpec> {
        TensorSpec::row_major(DType::F32, &[self.batch, self.heads, self.seq_q, 1])
    }

    /// Floating-point operations of the forward (the two matmuls; halved
    /// when causal, as FlashAttention counts).
    pub fn forward_flops(&self) -> f64 {
        let f = 2.0
            * (self.batch * self.heads) as f64
            * self.seq_q as f64
            * self.seq_kv as f64
            * (self.head_dim + self.head_dim_v) as f64;
        if self.is_causal { f / 2.0 } else { f }
    }

    /// Floating-point operations of the backward (2.5 times the forward's).
    pub fn backward_flops(&self) -> f64 {
        2.5 * self.forward_flops()
    }

    /// Check the shapes and options, and that the loaded cuDNN can build the
    /// attention as [`implementation`](Self::implementation) asks
    /// (`backward`: for the backward): with `Native`, that its SDPA operation
    /// has every option; with `Auto`, that either way works.
    ///
    /// # Errors
    /// `InvalidArgument` naming the field for a bad shape or value;
    /// `Unsupported` naming the option and the cuDNN that has it (for `Auto`,
    /// the SDPA operation's reason), or the composite's limit.
    pub fn check(&self, backward: bool) -> Result<()> {
        self.resolve(backward).map(|_| ())
    }

    /// What the graph builder will build for this config with the loaded
    /// cuDNN: [`SdpaImpl::Native`] or [`SdpaImpl::Composite`].
    ///
    /// # Errors
    /// As [`check`](Self::check).
    pub fn resolve(&self, backward: bool) -> Result<SdpaImpl> {
        self.validate()?;
        match self.implementation {
            SdpaImpl::Native => self.check_cudnn(backward).map(|_| SdpaImpl::Native),
            SdpaImpl::Composite => self.check_composite(backward).map(|_| SdpaImpl::Composite),
            SdpaImpl::Auto => match self.check_cudnn(backward) {
                Ok(()) => Ok(SdpaImpl::Native),
                Err(native) => match self.check_composite(backward) {
                    Ok(()) => Ok(SdpaImpl::Composite),
                    // The SDPA operation's reason names the version that has it.
                    Err(_) => Err(native),
                },
            },
        }
    }

    fn check_composite(&self, backward: bool) -> Result<()> {
        let (ma, mi, pa) = loaded_cudnn()?;
        // cuDNN up to 9.15 computes the composite backward right for key
        // lengths that are not multiples of 128 only under a padding mask
        // (NVIDIA's frontend adds one with full lengths there).
        if backward && (ma, mi) <= (9, 15) && self.seq_kv % 128 != 0 && !self.padding {
            return Err(Error::Unsupported {
                what: format!(
                    "the composite attention backward with seq_kv = {} (not a multiple of 128) and no padding mask on the loaded cuDNN {ma}.{mi}.{pa}",
                    self.seq_kv
                ),
                needs: Some(
                    "SdpaConfig.padding = true (bind full sequence lengths), seq_kv a multiple of 128, or cuDNN >= 9.16"
                        .to_string(),
                ),
            });
        }
        Ok(())
    }

    /// The shape and value checks of [`check`](Self::check) alone (no library needed).
    ///
    /// # Errors
    /// As [`check`](Self::check), less the cuDNN version.
    pub fn validate(&self) -> Result<()> {
        for (name, v) in [
            ("batch", self.batch),
            ("heads", self.heads),
            ("kv_heads", self.kv_heads),
            ("seq_q", self.seq_q),
            ("seq_kv", self.seq_kv),
            ("head_dim", self.head_dim),
            ("head_dim_v", self.head_dim_v),
        ] {
            if v < 1 {
                return Err(Error::invalid(
                    format!("SdpaConfig.{name}"),
                    "must be >= 1",
                    v,
                ));
            }
        }
        if self.heads % self.kv_heads != 0 {
            return Err(Error::invalid(
                "SdpaConfig.kv_heads",
                format!(
                    "must divide heads ({}) for grouped-query attention",
                    self.heads
                ),
                self.kv_heads,
            ));
        }
        for (name, v) in [("head_dim", self.head_dim), ("head_dim_v", self.head_dim_v)] {
            if v % 8 != 0 || v > 256 {
                return Err(Error::Unsupported {
                    what: format!(
                        "SdpaConfig.{name} = {v}: cuDNN's fused attention takes head dims that are multiples of 8 up to 256"
                    ),
                    needs: Some(format!("{name} in 8, 16, ..., 256")),
                });
            }
        }
        if !matches!(self.dtype, DType::F16 | DType::BF16) {
            return Err(Error::Unsupported {
                what: format!(
                    "SdpaConfig.dtype = {}: cuDNN's fused attention (this crate's SDPA) takes f16 or bf16",
                    self.dtype
                ),
                needs: Some("dtype f16 or bf16".to_string()),
            });
        }
        let s = self.scale_value();
        if !s.is_finite() || s == 0.0 {
            return Err(Error::invalid(
                "SdpaConfig.scale",
                "must be finite and non-zero",
                s,
            ));
        }
        if let Some(d) = self.dropout
            && !(d.probability >= 0.0 && d.probability < 1.0)
        {
            return Err(Error::invalid(
                "SdpaConfig.dropout.probability",
                "must be in [0, 1)",
                d.probability,
            ));
        }
        Ok(())
    }

    fn check_cudnn(&self, backward: bool) -> Result<()> {
        let (ma, mi, pa) = loaded_cudnn()?;
        let have = (ma, mi);
        let need = |option: &str, v: (u32, u32)| -> Result<()> {
            if have >= v {
                Ok(())
            } else {
                Err(Error::Unsupported {
                    what: format!(
                        "SdpaConfig option `{option}` with the loaded cuDNN {ma}.{mi}.{pa} (cuDNN's SDPA operation{})",
                        if backward { " backward" } else { " forward" }
                    ),
                    needs: Some(format!("cuDNN >= {}.{}", v.0, v.1)),
                })
            }
        };
        need(
            if backward {
                "backward (SDPA_BWD)"
            } else {
                "forward (SDPA_FWD)"
            },
            if backward {
                since::BACKWARD
            } else {
                since::FORWARD
            },
        )?;
        if self.padding {
            need("padding", since::PADDING)?;
        }
        if self.is_causal {
            need("is_causal", since::SUBGRAPH)?;
        }
        if self.dropout.is_some() {
            need(
                "dropout",
                if backward {
                    since::BACKWARD_DROPOUT
                } else {
                    since::SUBGRAPH
                },
            )?;
        }
        Ok(())
    }
}

/// Tensor indices shared by the forward and backward ops.
#[derive(Debug, Clone, Copy)]
struct Common {
    q: usize,
    k: usize,
    v: usize,
    scale: usize,
    seq: Option<(usize, usize)>,
    dropout: Option<(usize, usize, f64)>,
    /// Score in, score out, fill value of the causal mask subgraph.
    causal: Option<(usize, usize, usize)>,
}

impl Common {
    fn inputs(&self, v: &mut Vec<(&'static str, usize, bool)>) {
        v.push(("q", self.q, false));
        v.push(("k", self.k, false));
        v.push(("v", self.v, false));
        v.push(("scale", self.scale, false));
        if let Some((a, b)) = self.seq {
            v.push(("seq_len_q", a, false));
            v.push(("seq_len_kv", b, false));
        }
        if let Some((a, b, _)) = self.dropout {
            v.push(("dropout_seed", a, false));
            v.push(("dropout_offset", b, false));
        }
        if let Some((a, b, c)) = self.causal {
            v.push(("scores", a, false));
            v.push(("masked_scores", b, false));
            v.push(("mask_fill", c, false));
        }
    }

    fn signature(&self) -> String {
        format!(
            "padding={} dropout={:?} causal={}",
            self.seq.is_some(),
            self.dropout.map(|d| d.2),
            self.causal.is_some()
        )
    }

    /// The causal mask subgraph: one diagonal band mask keeping key `j <= i`.
    /// Returns `(subgraph, input uid, output uid)`; the mask op is kept in `built`.
    fn causal_subgraph(
        &self,
        t: &[Descriptor<kind::Tensor>],
        built: &mut Built,
    ) -> Result<Option<(Descriptor<kind::OperationGraph>, i64, i64)>> {
        let Some((si, so, fill)) = self.causal else {
            return Ok(None);
        };
        let mut m = Descriptor::<kind::DiagonalBandMaskOp>::new()?;
        m.set_descriptors(attr::OPERATION_DIAGONAL_BAND_MASK_XDESC, &[&t[si]])?;
        m.set_descriptors(attr::OPERATION_DIAGONAL_BAND_MASK_BDESC, &[&t[fill]])?;
        m.set_descriptors(attr::OPERATION_DIAGONAL_BAND_MASK_YDESC, &[&t[so]])?;
        m.set(
            attr::OPERATION_DIAGONAL_BAND_MASK_COMPARISON_MODE,
            &[sys::cudnnPointwiseMode_t::CUDNN_POINTWISE_CMP_GE],
        )?;
        m.finalize()
            .map_err(|e| e.with_context("the causal mask (diagonal band mask)"))?;
        let mut sg = Descriptor::<kind::OperationGraph>::new()?;
        sg.set_operations(attr::OPERATIONGRAPH_OPS, &[&m])?;
        sg.finalize()
            .map_err(|e| e.with_context("the causal mask subgraph"))?;
        let uid_in = t[si].get_one(attr::TENSOR_UNIQUE_ID)?;
        let uid_out = t[so].get_one(attr::TENSOR_UNIQUE_ID)?;
        built.aux.push(Box::new(m));
        Ok(Some((sg, uid_in, uid_out)))
    }
}

#[derive(Debug)]
struct SdpaFwdOp {
    c: Common,
    o: usize,
    stats: Option<usize>,
}

impl ExtOp for SdpaFwdOp {
    fn name(&self) -> String {
        "sdpa forward".to_string()
    }
    fn tensors(&self) -> Vec<(&'static str, usize, bool)> {
        let mut v = Vec::new();
        self.c.inputs(&mut v);
        v.push(("o", self.o, true));
        if let Some(s) = self.stats {
            v.push(("stats", s, true));
        }
        v
    }
    fn signature(&self) -> String {
        format!("{} training={}", self.c.signature(), self.stats.is_some())
    }
    fn build(
        &self,
        t: &[Descriptor<kind::Tensor>],
        _compute: DType,
        built: &mut Built,
    ) -> Result<()> {
        let c = &self.c;
        let mut d = Descriptor::<kind::SdpaForwardOp>::new()?;
        d.set_descriptors(attr::OPERATION_SDPA_FWD_QDESC, &[&t[c.q]])?;
        d.set_descriptors(attr::OPERATION_SDPA_FWD_KDESC, &[&t[c.k]])?;
        d.set_descriptors(attr::OPERATION_SDPA_FWD_VDESC, &[&t[c.v]])?;
        d.set_descriptors(attr::OPERATION_SDPA_FWD_ODESC, &[&t[self.o]])?;
        d.set_descriptors(attr::OPERATION_SDPA_FWD_SCALEDESC, &[&t[c.scale]])?;
        if let Some(s) = self.stats {
            d.set_descriptors(attr::OPERATION_SDPA_FWD_STATSDESC, &[&t[s]])?;
        }
        if let Some((a, b)) = c.seq {
            d.set_descriptors(attr::OPERATION_SDPA_FWD_SEQ_LEN_QDESC, &[&t[a]])?;
            d.set_descriptors(attr::OPERATION_SDPA_FWD_SEQ_LEN_KVDESC, &[&t[b]])?;
        }
        if let Some((seed, offset, p)) = c.dropout {
            d.set_descriptors(attr::OPERATION_SDPA_FWD_DROPOUT_SEED_DESC, &[&t[seed]])?;
            d.set_descriptors(attr::OPERATION_SDPA_FWD_DROPOUT_OFFSET_DESC, &[&t[offset]])?;
            d.set(attr::OPERATION_SDPA_FWD_DROPOUT_PROBABILITY, &[p as f32])?;
        }
        if let Some((sg, uin, uout)) = c.causal_subgraph(t, built)? {
            d.set_descriptors(attr::OPERATION_SDPA_FWD_SUBGRAPH, &[&sg])?;
            d.set(attr::OPERATION_SDPA_FWD_SUBGRAPH_INPUT_UID, &[uin])?;
            d.set(attr::OPERATION_SDPA_FWD_SUBGRAPH_OUTPUT_UID, &[uout])?;
            built.aux.push(Box::new(sg));
        }
        d.finalize()?;
        built.ops.push(Box::new(d));
        Ok(())
    }
}

#[derive(Debug)]
struct SdpaBwdOp {
    c: Common,
    o: usize,
    d_o: usize,
    stats: usize,
    dq: usize,
    dk: usize,
    dv: usize,
}

impl ExtOp for SdpaBwdOp {
    fn name(&self) -> String {
        "sdpa backward".to_string()
    }
    fn tensors(&self) -> Vec<(&'static str, usize, bool)> {
        let mut v = Vec::new();
        self.c.inputs(&mut v);
        v.push(("o", self.o, false));
        v.push(("do", self.d_o, false));
        v.push(("stats", self.stats, false));
        v.push(("dq", self.dq, true));
        v.push(("dk", self.dk, true));
        v.push(("dv", self.dv, true));
        v
    }
    fn signature(&self) -> String {
        self.c.signature()
    }
    fn build(
        &self,
        t: &[Descriptor<kind::Tensor>],
        _compute: DType,
        built: &mut Built,
    ) -> Result<()> {
        let c = &self.c;
        let mut d = Descriptor::<kind::SdpaBackwardOp>::new()?;
        d.set_descriptors(attr::OPERATION_SDPA_BWD_QDESC, &[&t[c.q]])?;
        d.set_descriptors(attr::OPERATION_SDPA_BWD_KDESC, &[&t[c.k]])?;
        d.set_descriptors(attr::OPERATION_SDPA_BWD_VDESC, &[&t[c.v]])?;
        d.set_descriptors(attr::OPERATION_SDPA_BWD_ODESC, &[&t[self.o]])?;
        d.set_descriptors(attr::OPERATION_SDPA_BWD_DODDESC, &[&t[self.d_o]])?;
        d.set_descriptors(attr::OPERATION_SDPA_BWD_STATSDESC, &[&t[self.stats]])?;
        d.set_descriptors(attr::OPERATION_SDPA_BWD_SCALEDESC, &[&t[c.scale]])?;
        d.set_descriptors(attr::OPERATION_SDPA_BWD_DQDESC, &[&t[self.dq]])?;
        d.set_descriptors(attr::OPERATION_SDPA_BWD_DKDESC, &[&t[self.dk]])?;
        d.set_descriptors(attr::OPERATION_SDPA_BWD_DVDESC, &[&t[self.dv]])?;
        if let Some((a, b)) = c.seq {
            d.set_descriptors(attr::OPERATION_SDPA_BWD_SEQ_LEN_QDESC, &[&t[a]])?;
            d.set_descriptors(attr::OPERATION_SDPA_BWD_SEQ_LEN_KVDESC, &[&t[b]])?;
        }
        if let Some((seed, offset, p)) = c.dropout {
            d.set_descriptors(attr::OPERATION_SDPA_BWD_DROPOUT_SEED_DESC, &[&t[seed]])?;
            d.set_descriptors(attr::OPERATION_SDPA_BWD_DROPOUT_OFFSET_DESC, &[&t[offset]])?;
            d.set(attr::OPERATION_SDPA_BWD_DROPOUT_PROBABILITY, &[p as f32])?;
        }
        if let Some((sg, uin, uout)) = c.causal_subgraph(t, built)? {
            d.set_descriptors(attr::OPERATION_SDPA_BWD_SUBGRAPH, &[&sg])?;
            d.set(attr::OPERATION_SDPA_BWD_SUBGRAPH_INPUT_UID, &[uin])?;
            d.set(attr::OPERATION_SDPA_BWD_SUBGRAPH_OUTPUT_UID, &[uout])?;
            built.aux.push(Box::new(sg));
        }
        d.finalize()?;
        built.ops.push(Box::new(d));
        Ok(())
    }
}

impl Graph {
    fn sdpa_expect(&self, op: &str, role: &str, t: Tensor, want: &TensorSpec) -> Result<()> {
        let n = self.node(t)?;
        if n.spec.dims() != want.dims() {
            return Err(Error::mismatch(
                format!(
                    "{op}: {role} `{}` dims ([B, H, S, D] from the SdpaConfig)",
                    n.name
                ),
                fmt_dims(want.dims()),
                fmt_dims(n.spec.dims()),
            ));
        }
        if n.spec.dtype() != want.dtype() {
            return Err(Error::mismatch(
                format!("{op}: {role} `{}` element type (SdpaConfig.dtype)", n.name),
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

    fn graph_output(&mut self, op: &str, spec: TensorSpec) -> Result<Tensor> {
        let t = self.intermediate(op, spec)?;
        let i = self.index(t)?;
        self.nodes[i].role = Role::Output;
        Ok(t)
    }

    fn sdpa_common(
        &mut self,
        op: &str,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        cfg: &SdpaConfig,
    ) -> Result<(Common, [Option<Tensor>; 4])> {
        self.sdpa_expect(op, "q", q, &cfg.q_spec()?)?;
        self.sdpa_expect(op, "k", k, &cfg.k_spec()?)?;
        self.sdpa_expect(op, "v", v, &cfg.v_spec()?)?;
        let base = format!("sdpa{}", self.ops.len());
        let scale = self.scalar(cfg.scale_value(), DType::F32, 4)?;
        let mut extra = [None; 4];
        let seq = if cfg.padding {
            let spec = TensorSpec::row_major(DType::I32, &[cfg.batch, 1, 1, 1])?;
            let a = self.input(&format!("{base}.seq_len_q"), spec.clone())?;
            let b = self.input(&format!("{base}.seq_len_kv"), spec)?;
            extra[0] = Some(a);
            extra[1] = Some(b);
            Some((self.index(a)?, self.index(b)?))
        } else {
            None
        };
        let dropout = match cfg.dropout {
            Some(d) => {
                let spec = TensorSpec::row_major(DType::I64, &[1, 1, 1, 1])?;
                let a = self.input(&format!("{base}.dropout_seed"), spec.clone())?;
                let b = self.input(&format!("{base}.dropout_offset"), spec)?;
                extra[2] = Some(a);
                extra[3] = Some(b);
                Some((self.index(a)?, self.index(b)?, d.probability))
            }
            None => None,
        };
        let causal = if cfg.is_causal {
            let spec =
                TensorSpec::row_major(DType::F32, &[cfg.batch, cfg.heads, cfg.seq_q, cfg.seq_kv])?;
            let a = self.intermediate("sdpa_scores", spec.clone())?;
            let b = self.intermediate("sdpa_masked_scores", spec)?;
            let fill = self.scalar(f64::NEG_INFINITY, DType::F32, 4)?;
            Some((self.index(a)?, self.index(b)?, self.index(fill)?))
        } else {
            None
        };
        Ok((
            Common {
                q: self.index(q)?,
                k: self.index(k)?,
                v: self.index(v)?,
                scale: self.index(scale)?,
                seq,
                dropout,
                causal,
            },
            extra,
        ))
    }

    /// Attention forward: `O = softmax(mask(scale * Q Kᵀ)) V` with `q`, `k`,
    /// `v` of [`SdpaConfig::q_spec`], [`k_spec`](SdpaConfig::k_spec),
    /// [`v_spec`](SdpaConfig::v_spec) dims and dtype (any strides with the
    /// head dim contiguous). `o` (and `stats` in training) are graph outputs;
    /// sequence-length and dropout inputs are added as the config asks.
    ///
    /// # Errors
    /// [`SdpaConfig::check`]'s errors; q / k / v dims or dtype not the config's.
    #[doc(alias = "CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR")]
    pub fn sdpa_forward(
        &mut self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        cfg: &SdpaConfig,
    ) -> Result<SdpaForward> {
        let op = format!("sdpa_forward op #{}", self.ops.len());
        cfg.validate().map_err(|e| e.with_context(op.clone()))?;
        self.sdpa_expect(&op, "q", q, &cfg.q_spec()?)?;
        self.sdpa_expect(&op, "k", k, &cfg.k_spec()?)?;
        self.sdpa_expect(&op, "v", v, &cfg.v_spec()?)?;
        let imp = cfg.resolve(false).map_err(|e| e.with_context(op.clone()))?;
        if imp == SdpaImpl::Composite {
            return self.sdpa_forward_composite(q, k, v, cfg);
        }
        let (c, extra) = self.sdpa_common(&op, q, k, v, cfg)?;
        let qs = self.node(q)?.spec.clone();
        let o = self.graph_output(
            "sdpa",
            TensorSpec::like(cfg.dtype, cfg.o_spec()?.dims(), &qs)?,
        )?;
        let stats = if cfg.is_training {
            Some(self.graph_output("sdpa", cfg.stats_spec()?)?)
        } else {
            None
        };
        let ext = SdpaFwdOp {
            c,
            o: self.index(o)?,
            stats: stats.map(|s| self.index(s)).transpose()?,
        };
        self.push_op(Op::Ext(Arc::new(ext)));
        Ok(SdpaForward {
            o,
            stats,
            seq_len_q: extra[0],
            seq_len_kv: extra[1],
            dropout_seed: extra[2],
            dropout_offset: extra[3],
        })
    }

    /// Attention backward: dQ, dK, dV (graph outputs in the layouts of q, k,
    /// v) from the forward's inputs, its output `o`, the output gradient
    /// `d_o` (`o`'s dims) and the saved `stats` (`[B, H, S_q, 1]` f32). The
    /// config must be the forward's (masks, scale, dropout).
    ///
    /// # Errors
    /// [`SdpaConfig::check`]'s errors; a tensor's dims or dtype not the config's.
    #[doc(alias = "CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR")]
    #[allow(clippy::too_many_arguments)]
    pub fn sdpa_backward(
        &mut self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        o: Tensor,
        d_o: Tensor,
        stats: Tensor,
        cfg: &SdpaConfig,
    ) -> Result<SdpaBackward> {
        let op = format!("sdpa_backward op #{}", self.ops.len());
        cfg.validate().map_err(|e| e.with_context(op.clone()))?;
        let os = cfg.o_spec()?;
        self.sdpa_expect(&op, "o", o, &os)?;
        self.sdpa_expect(&op, "do", d_o, &os)?;
        let ss = cfg.stats_spec()?;
        let sn = self.node(stats)?;
        if sn.spec.dims() != ss.dims() || sn.spec.dtype() != DType::F32 {
            return Err(Error::mismatch(
                format!("{op}: stats `{}` ([B, H, S_q, 1] f32)", sn.name),
                format!("f32 {}", fmt_dims(ss.dims())),
                format!("{} {}", sn.spec.dtype(), fmt_dims(sn.spec.dims())),
            ));
        }
        let imp = cfg.resolve(true).map_err(|e| e.with_context(op.clone()))?;
        if imp == SdpaImpl::Composite {
            self.sdpa_expect(&op, "q", q, &cfg.q_spec()?)?;
            self.sdpa_expect(&op, "k", k, &cfg.k_spec()?)?;
            self.sdpa_expect(&op, "v", v, &cfg.v_spec()?)?;
            return self.sdpa_backward_composite([q, k, v, o, d_o, stats], cfg);
        }
        let (c, extra) = self.sdpa_common(&op, q, k, v, cfg)?;
        let (qs, ks, vs) = (
            self.node(q)?.spec.clone(),
            self.node(k)?.spec.clone(),
            self.node(v)?.spec.clone(),
        );
        let dq = self.graph_output("sdpa_bwd", qs.clone())?;
        let dk = self.graph_output("sdpa_bwd", ks)?;
        let dv = self.graph_output("sdpa_bwd", vs)?;
        let ext = SdpaBwdOp {
            c,
            o: self.index(o)?,
            d_o: self.index(d_o)?,
            stats: self.index(stats)?,
            dq: self.index(dq)?,
            dk: self.index(dk)?,
            dv: self.index(dv)?,
        };
        self.push_op(Op::Ext(Arc::new(ext)));
        Ok(SdpaBackward {
            dq,
            dk,
            dv,
            seq_len_q: extra[0],
            seq_len_kv: extra[1],
            dropout_seed: extra[2],
            dropout_offset: extra[3],
        })
    }

    /// The graph inputs and scalars both composites take:
    /// `(scale, seq, dropout, fill, extra)`.
    #[allow(clippy::type_complexity)]
    fn composite_common(
        &mut self,
        cfg: &SdpaConfig,
    ) -> Result<(
        usize,
        Option<(usize, usize)>,
        Option<(usize, usize, f64, usize)>,
        Option<usize>,
        [Option<Tensor>; 4],
    )> {
        let base = format!("sdpa{}", self.ops.len());
        let scale = self.scalar(cfg.scale_value(), DType::F32, 4)?;
        let mut extra = [None; 4];
        let seq = if cfg.padding {
            let spec = TensorSpec::row_major(DType::I32, &[cfg.batch, 1, 1, 1])?;
            let a = self.input(&format!("{base}.seq_len_q"), spec.clone())?;
            let b = self.input(&format!("{base}.seq_len_kv"), spec)?;
            extra[0] = Some(a);
            extra[1] = Some(b);
            Some((self.index(a)?, self.index(b)?))
        } else {
            None
        };
        let dropout = match cfg.dropout {
            Some(d) => {
                let spec = TensorSpec::row_major(DType::I64, &[1, 1, 1, 1])?;
                let a = self.input(&format!("{base}.dropout_seed"), spec.clone())?;
                let b = self.input(&format!("{base}.dropout_offset"), spec)?;
                let s = self.scalar(1.0 / (1.0 - d.probability), DType::F32, 4)?;
                extra[2] = Some(a);
                extra[3] = Some(b);
                Some((
                    self.index(a)?,
                    self.index(b)?,
                    d.probability,
                    self.index(s)?,
                ))
            }
            None => None,
        };
        let fill = if cfg.padding || cfg.is_causal {
            // The fused engines before cuDNN 9.10 expect the lowest finite value.
            let v = if loaded_minor()? >= (9, 10) {
                f64::NEG_INFINITY
            } else {
                f64::from(f32::MIN)
            };
            let f = self.scalar(v, DType::F32, 4)?;
            Some(self.index(f)?)
        } else {
            None
        };
        Ok((self.index(scale)?, seq, dropout, fill, extra))
    }

    fn composite_uid_base(&self) -> i64 {
        (1i64 << 40) + ((self.ops.len() as i64) << 16)
    }

    fn sdpa_forward_composite(
        &mut self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        cfg: &SdpaConfig,
    ) -> Result<SdpaForward> {
        let uid_base = self.composite_uid_base();
        let (scale, seq, dropout, fill, extra) = self.composite_common(cfg)?;
        let qs = self.node(q)?.spec.clone();
        let k_spec = self.node(k)?.spec.clone();
        let o = self.graph_output(
            "sdpa",
            TensorSpec::like(cfg.dtype, cfg.o_spec()?.dims(), &qs)?,
        )?;
        let stats = if cfg.is_training {
            Some(self.graph_output("sdpa", cfg.stats_spec()?)?)
        } else {
            None
        };
        let ext = CompositeFwdOp {
            q: self.index(q)?,
            k: self.index(k)?,
            v: self.index(v)?,
            scale,
            k_spec,
            dims: [
                cfg.batch,
                cfg.heads,
                cfg.seq_q,
                cfg.seq_kv,
                cfg.head_dim,
                cfg.head_dim_v,
            ],
            io: cfg.dtype,
            seq,
            dropout,
            causal: cfg.is_causal,
            fill,
            o: self.index(o)?,
            stats: stats.map(|s| self.index(s)).transpose()?,
            uid_base,
        };
        self.push_op(Op::Ext(Arc::new(ext)));
        Ok(SdpaForward {
            o,
            stats,
            seq_len_q: extra[0],
            seq_len_kv: extra[1],
            dropout_seed: extra[2],
            dropout_offset: extra[3],
        })
    }

    fn sdpa_backward_composite(
        &mut self,
        [q, k, v, o, d_o, stats]: [Tensor; 6],
        cfg: &SdpaConfig,
    ) -> Result<SdpaBackward> {
        let uid_base = self.composite_uid_base();
        let (scale, seq, dropout, fill, extra) = self.composite_common(cfg)?;
        let keep = self.scalar(
            cfg.dropout.map(|d| 1.0 - d.probability).unwrap_or(1.0),
            DType::F32,
            4,
        )?;
        let (qs, ks, vs) = (
            self.node(q)?.spec.clone(),
            self.node(k)?.spec.clone(),
            self.node(v)?.spec.clone(),
        );
        let softmax_sum = self.scratch("sdpa_bwd", cfg.stats_spec()?)?;
        let dq_accum = self.scratch(
            "sdpa_bwd",
            TensorSpec::row_major(DType::F32, &[cfg.batch, cfg.heads, cfg.seq_q, cfg.head_dim])?,
        )?;
        let dq = self.graph_output("sdpa_bwd", qs)?;
        let dk = self.graph_output("sdpa_bwd", ks.clone())?;
        let dv = self.graph_output("sdpa_bwd", vs.clone())?;
        let ext = CompositeBwdOp {
            q: self.index(q)?,
            k: self.index(k)?,
            v: self.index(v)?,
            o: self.index(o)?,
            d_o: self.index(d_o)?,
            stats: self.index(stats)?,
            scale,
            k_spec: ks,
            v_spec: vs,
            dims: [
                cfg.batch,
                cfg.heads,
                cfg.kv_heads,
                cfg.seq_q,
                cfg.seq_kv,
                cfg.head_dim,
                cfg.head_dim_v,
            ],
            io: cfg.dtype,
            seq,
            dropout,
            keep: self.index(keep)?,
            causal: cfg.is_causal,
            fill,
            repad: cfg.padding && loaded_minor()? < (9, 10),
            softmax_sum: self.index(softmax_sum)?,
            dq_accum: self.index(dq_accum)?,
            dq: self.index(dq)?,
            dk: self.index(dk)?,
            dv: self.index(dv)?,
            uid_base,
        };
        self.push_op(Op::Ext(Arc::new(ext)));
        Ok(SdpaBackward {
            dq,
            dk,
            dv,
            seq_len_q: extra[0],
            seq_len_kv: extra[1],
            dropout_seed: extra[2],
            dropout_offset: extra[3],
        })
    }
}
