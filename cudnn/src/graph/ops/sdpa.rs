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
//! sequence lengths (graph inputs `[B, 1, 1, 1]` i32, bound as checked
//! [`SeqLengths`](crate::graph::SeqLengths) with
//! [`Bindings::seq_lengths`](crate::graph::Bindings::seq_lengths): the GPU
//! uses them as row bounds unchecked); dropout with a Philox
//! seed and offset (graph inputs `[1, 1, 1, 1]` i64, bound at each
//! execution); grouped-query attention (fewer K/V heads); BSHD or BHSD
//! storage (the logical dims are always `[B, H, S, D]`, the layout is in the
//! strides); the causal diagonal aligned bottom-right
//! ([`DiagonalAlignment::BottomRight`], PyTorch's `causal_lower_right`) and
//! a sliding window ([`SdpaConfig::window`]), forward and backward; a paged
//! KV cache ([`SdpaConfig::paged`]: K and V containers of pages and
//! per-sequence page tables, `[B, 1, pages, 1]` i32 inputs; forward only);
//! ragged (packed THD) batches ([`SdpaConfig::ragged`]: ragged offset
//! inputs `[B + 1, 1, 1, 1]` i32 on Q, K, V, O and the gradients (Q and O
//! only with a paged cache), forward and backward; the offsets are bound with the unsafe
//! `Bindings::input_ragged_offsets`, see the rules and the soundness note
//! on [`SdpaConfig::ragged_offsets`]); a logit softcap
//! ([`SdpaConfig::softcap`], rules in [`sdpa_softcap`](super::sdpa_softcap));
//! an additive bias and ALiBi ([`SdpaConfig::bias`], [`SdpaConfig::alibi`]:
//! rules in [`sdpa_bias`](super::sdpa_bias)); the row max and sum of
//! exponentials as outputs and attention sinks with dSink
//! ([`SdpaConfig::max_sum_exp`], [`SdpaConfig::sink`]; rules in
//! [`sdpa_softmax`](super::sdpa_softmax)).
//! Their rules, after NVIDIA's frontend 1.32: the bottom-right causal mask
//! not with dropout, and (like the window) without padding only for
//! `seq_q <= seq_kv`; before cuDNN 9.6 a bottom-right mask only for lengths
//! that are multiples of 64; a window before 9.10.2 only with a causal mask
//! and no dropout, and not without one on 9.14.0 for `seq_kv > 1024`; the
//! SDPA operation takes either from 9.21 (the composite builds them from
//! cuDNN's diagonal band mask operation from 9.21, as the frontend does, and
//! as `GEN_INDEX` comparisons before); a paged cache needs the padding
//! mask, cuDNN 9.5 for the composite (paged cache loads) and 9.15 for the
//! SDPA operation, head dims up to 128 through 9.9. Each option of the SDPA operation needs a cuDNN version, checked
//! before any call ([`SdpaConfig::check`], [`SdpaConfig::resolve`]): with
//! [`SdpaImpl::Native`], an option the loaded cuDNN lacks is a typed
//! `Unsupported` naming the option and the version that has it;
//! [`SdpaImpl::Auto`] builds the composite instead.
//!
//! The rules follow NVIDIA's cuDNN frontend (1.32): the forward uses the SDPA
//! operation from cuDNN 9.13.1 (padding 9.15, causal 9.21, dropout 9.22) but
//! never for a training forward with dropout (the operation cannot save the
//! statistics with dropout); [`SdpaImpl::Auto`] builds every **backward** as
//! the composite, as the frontend does (it never uses the SDPA backward
//! operation, and cuDNN 9.19's heuristics offer no engine for it). With
//! dropout, a training step's forward and backward are therefore both
//! composites and draw the same mask from the same seed and offset; a
//! native backward with dropout is refused, since no forward that saves
//! statistics with dropout is native and the two masks would differ.
//! Dropout of probability 0 is no dropout (no RNG op, no seed or offset
//! inputs). cuDNN 9.10.0 and 9.10.1 are refused for attention (NVIDIA's
//! frontend: known bugs in f16 / bf16 attention there).
//!
//! Per GPU architecture, the head-dim limits the frontend checks are
//! [`SdpaConfig::check_target_for`], applied by `Plan::build` before cuDNN's
//! heuristics are asked; the version rules alone are
//! [`SdpaConfig::resolve_for`]. Both are pure functions of the config, the
//! architecture and the cuDNN version.
//!
//! # Where this crate differs from NVIDIA's frontend
//! - The composite's causal mask computes its row and column indices
//!   (`GEN_INDEX`) in INT32, as the padding mask does. The frontend builds
//!   the causal mask as its diagonal band mask, whose `GEN_INDEX` sets no
//!   compute type and so takes the graph's (f32 for attention). INT32 keeps
//!   the index arithmetic exact for every sequence length up to 2^31 - 1
//!   (f32 is exact only up to 2^24); cuDNN 9.10 and 9.28 plan it.
//! - A composite backward on cuDNN up to 9.15.0 with `seq_kv` not a multiple
//!   of 128 and no padding mask: the frontend adds a padding mask with full
//!   lengths in its own workspace; this crate refuses it with a typed error
//!   naming [`SdpaConfig::padding`] (set it and bind the full lengths).
//! - The backward with head dims 256 / 256 on sm_100 is refused. From
//!   cuDNN 9.23 the frontend serves it, but only with its deterministic
//!   algorithm: dQ straight from `dS · K` (no f32 accumulator; dP in the
//!   engine's workspace), a pinned engine configuration (engine 5 on sm_100
//!   to sm_103, 17 after, with fixed tile and stage knobs) instead of
//!   heuristics, and no dropout. The graph here is built before the target
//!   is known and plans take the heuristics' engines: for the composite's
//!   form cuDNN 9.28 offers one engine for a B200, and it fails to compile.
//! - ALiBi's slopes are a graph input the caller binds (the frontend keeps
//!   its own in its workspace): see [`sdpa_bias`](super::sdpa_bias).
//! - [`SdpaImpl::Native`] can build cuDNN's SDPA backward operation, which
//!   the frontend never uses (`Auto` does not either).
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
use crate::graph::graph::Tensor;
use crate::graph::tensor::{DType, TensorSpec, fmt_dims};

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
    ///
    /// # Errors
    /// A dim < 1, or a stride that overflows i64.
    pub fn strides(self, b: i64, h: i64, s: i64, d: i64) -> Result<[i64; 4]> {
        for (name, v) in [("batch", b), ("heads", h), ("seq", s), ("head_dim", d)] {
            if v < 1 {
                return Err(Error::invalid(
                    format!("AttnLayout::strides {name}"),
                    "must be >= 1",
                    v,
                ));
            }
        }
        let overflow = || {
            Error::invalid(
                "AttnLayout::strides",
                "a stride overflows i64",
                fmt_dims(&[b, h, s, d]),
            )
        };
        let hd = h.checked_mul(d).ok_or_else(overflow)?;
        let sd = s.checked_mul(d).ok_or_else(overflow)?;
        let shd = s.checked_mul(hd).ok_or_else(overflow)?;
        Ok(match self {
            AttnLayout::Bshd => [shd, d, hd, 1],
            AttnLayout::Bhsd => [shd, sd, d, 1],
        })
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

/// Where the causal diagonal (and a sliding window's band) sits when the
/// query and key lengths differ.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DiagonalAlignment {
    /// The diagonal starts at the first query and the first key: query `i`
    /// sees keys `j <= i` (PyTorch's `is_causal`, `causal_upper_left`).
    #[default]
    TopLeft,
    /// The diagonal ends at the last query and the last (valid) key: query
    /// `i` sees keys `j <= i + len_kv - len_q` (PyTorch's
    /// `causal_lower_right`; with padding, per batch from the sequence
    /// lengths). What a decode step or a chunked prefill against a KV cache
    /// needs.
    BottomRight,
}

/// Which cuDNN construction an attention graph uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SdpaImpl {
    /// Forward: cuDNN's SDPA operation where the loaded cuDNN has it with
    /// every option asked for, the composite otherwise. Backward: always the
    /// composite (as NVIDIA's frontend 1.32 builds it).
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
    /// Causal mask (query `i` sees keys up to the diagonal, aligned by
    /// [`diagonal`](Self::diagonal): top-left by default, keys `0..=i`).
    pub is_causal: bool,
    /// Where the causal diagonal and the sliding window sit
    /// ([`DiagonalAlignment::TopLeft`] by default).
    pub diagonal: DiagonalAlignment,
    /// A paged KV cache: K and V live in containers of fixed-size pages,
    /// addressed per sequence through page tables (graph inputs `[B, 1,
    /// pages, 1]` i32, bound with the `unsafe`
    /// [`Bindings::input_page_table`](crate::graph::Bindings::input_page_table));
    /// needs [`padding`](Self::padding) (the key lengths say how much of
    /// each sequence's pages is valid). Forward only.
    pub paged: Option<PagedKv>,
    /// Sliding window (cuDNN's diagonal-band left bound): query `i` sees
    /// only keys `j > i' - window`, `i'` being its diagonal position (`i`
    /// top-left, `i + len_kv - len_q` bottom-right); with a causal mask, the
    /// `window` keys up to and including the diagonal (FlashAttention's
    /// `window_size_left` is `window - 1`). `None`: no left bound.
    pub window: Option<i64>,
    /// Padding mask from per-batch sequence lengths (two more graph inputs).
    pub padding: bool,
    /// Ragged (packed THD) batches: Q, K, V, O (and the gradients) get
    /// ragged offset inputs (`[B + 1, 1, 1, 1]` i32) saying where each
    /// sequence starts; needs [`padding`](Self::padding) and the BSHD
    /// layout. The offsets are bound with the unsafe
    /// `Bindings::input_ragged_offsets` (see [`SdpaConfig::ragged_offsets`]).
    pub ragged: bool,
    /// Dropout on the probabilities.
    pub dropout: Option<Dropout>,
    /// Logit softcap: the scaled scores `s` become `softcap * tanh(s /
    /// softcap)` before any mask (finite, > 0; rules in
    /// [`sdpa_softcap`](super::sdpa_softcap)). `None`: none.
    pub softcap: Option<f64>,
    /// Forward: save the softmax statistics (log-sum-exp per query row,
    /// `[B, H, S_q, 1]` f32) for the backward.
    pub is_training: bool,
    /// The SDPA operation or the composite pattern ([`SdpaImpl::Auto`] by default).
    pub implementation: SdpaImpl,
    /// An additive bias on the scores (and dBias), see [`sdpa_bias`](super::sdpa_bias).
    pub bias: Option<AttnBias>,
    /// ALiBi on the scores (slopes bound by the caller), see [`sdpa_bias`](super::sdpa_bias).
    pub alibi: bool,
    /// Forward: also output the row max and the row sum of exponentials
    /// (`[B, H, S_q, 1]` f32; [`sdpa_softmax`](super::sdpa_softmax)).
    pub max_sum_exp: bool,
    /// An attention sink per head (a `[1, H, 1, 1]` f32 input joining the
    /// softmax's denominator; [`sdpa_softmax`](super::sdpa_softmax)).
    pub sink: bool,
    /// Backward: also output dSink (needs [`sink`](Self::sink)).
    pub sink_grad: bool,
}

/// What [`Graph::sdpa_forward`](crate::graph::Graph::sdpa_forward) adds.
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
    /// K's page table (a paged cache): `[B, 1, pages, 1]` i32 graph input.
    pub page_table_k: Option<Tensor>,
    /// V's page table (a paged cache): `[B, 1, pages, 1]` i32 graph input.
    pub page_table_v: Option<Tensor>,
    /// The ragged offsets of Q, K, V, O (ragged batches).
    pub ragged: Option<SdpaRagged>,
    /// The bias and ALiBi slopes inputs (bias / ALiBi).
    pub bias: BiasTensors,
    /// The row max and sum_exp outputs and the sink input, as asked.
    pub softmax: SdpaSoftmax,
}

/// What [`Graph::sdpa_backward`](crate::graph::Graph::sdpa_backward) adds.
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
    /// The ragged offsets (ragged batches): Q's serve dQ, K's dK, V's dV,
    /// O's dO.
    pub ragged: Option<SdpaRagged>,
    /// The bias and ALiBi slopes inputs, and the dBias output.
    pub bias: BiasTensors,
    /// The sink input and the dSink output ([`SdpaConfig::sink_grad`]).
    pub softmax: SdpaSoftmax,
}

pub use super::sdpa_bias::{AttnBias, BiasTensors};
pub use super::sdpa_paged::PagedKv;
pub use super::sdpa_ragged::{RaggedTensor, SdpaRagged};
pub use super::sdpa_softmax::SdpaSoftmax;

/// The first cuDNN with each part of the SDPA operation, as `(major, minor, patch)`.
pub mod since {
    /// `CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR` (NVIDIA's frontend uses it from 9.13.1).
    pub const FORWARD: (u32, u32, u32) = (9, 13, 1);
    /// Padding by sequence lengths.
    pub const PADDING: (u32, u32, u32) = (9, 15, 0);
    /// `CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR` (only with [`SdpaImpl::Native`](super::SdpaImpl::Native)).
    pub const BACKWARD: (u32, u32, u32) = (9, 17, 0);
    /// Score-modifier subgraphs (the causal mask).
    pub const SUBGRAPH: (u32, u32, u32) = (9, 21, 0);
    /// Forward dropout (inference only: not with saved statistics).
    pub const FORWARD_DROPOUT: (u32, u32, u32) = (9, 22, 0);
    /// Backward dropout.
    pub const BACKWARD_DROPOUT: (u32, u32, u32) = (9, 28, 0);
}

/// The last cuDNN whose composite backward needs a padding mask for a key
/// length that is not a multiple of 128 (NVIDIA's frontend: up to 9.15.0).
const LAST_NEEDING_PADDING: (u32, u32, u32) = (9, 15, 0);

/// The largest sequence length: lengths and indices are i32 in cuDNN's attention.
pub const MAX_SEQ_LEN: i64 = i32::MAX as i64;

pub(crate) fn loaded_cudnn() -> Result<(u32, u32, u32)> {
    let api = crate::check::cudnn()?;
    Ok(api
        .info()
        .version
        .map(|v| (v.major, v.minor, v.patch))
        .unwrap_or((0, 0, 0)))
}

/// A spec of the config's, its error naming the config.
fn named(dims: &[i64], r: Result<TensorSpec>) -> Result<TensorSpec> {
    r.map_err(|e| {
        Error::invalid(
            format!("SdpaConfig dims {}", fmt_dims(dims)),
            format!("must make a valid tensor ({e})"),
            fmt_dims(dims),
        )
    })
}

fn fmt_version(v: (u32, u32, u32)) -> String {
    format!("{}.{}.{}", v.0, v.1, v.2)
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
            diagonal: DiagonalAlignment::TopLeft,
            window: None,
            paged: None,
            padding: false,
            ragged: false,
            dropout: None,
            softcap: None,
            is_training: false,
            implementation: SdpaImpl::Auto,
            bias: None,
            alibi: false,
            max_sum_exp: false,
            sink: false,
            sink_grad: false,
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
    /// With the causal diagonal (and the window) aligned as `diagonal`.
    pub fn diagonal(mut self, diagonal: DiagonalAlignment) -> Self {
        self.diagonal = diagonal;
        self
    }
    /// With a causal mask aligned bottom-right (PyTorch's
    /// `causal_lower_right`): `causal(true)` and
    /// `diagonal(DiagonalAlignment::BottomRight)`.
    pub fn causal_bottom_right(self) -> Self {
        self.causal(true).diagonal(DiagonalAlignment::BottomRight)
    }
    /// With a sliding window of `window` keys (see [`window`](Self::window)).
    pub fn sliding_window(mut self, window: i64) -> Self {
        self.window = Some(window);
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
    /// With dropout of `probability` (0 is no dropout: nothing is built for it).
    pub fn dropout(mut self, probability: f64) -> Self {
        self.dropout = Some(Dropout { probability });
        self
    }

    /// The dropout probability when dropout is on and above 0 (what the
    /// graph builds an RNG op for).
    pub fn active_dropout(&self) -> Option<f64> {
        self.dropout
            .map(|d| d.probability)
            .filter(|&p| p > 0.0 && p.is_finite())
    }

    /// The score scale used.
    pub fn scale_value(&self) -> f64 {
        self.scale
            .unwrap_or_else(|| 1.0 / (self.head_dim.max(1) as f64).sqrt())
    }

    fn spec(
        &self,
        (hn, h): (&str, i64),
        (sn, s): (&str, i64),
        (dn, d): (&str, i64),
    ) -> Result<TensorSpec> {
        for (name, v) in [("batch", self.batch), (hn, h), (sn, s), (dn, d)] {
            if v < 1 {
                return Err(Error::invalid(
                    format!("SdpaConfig.{name}"),
                    "must be >= 1",
                    v,
                ));
            }
        }
        let dims = [self.batch, h, s, d];
        let strides = self.layout.strides(self.batch, h, s, d).map_err(|_| {
            Error::invalid(
                format!("SdpaConfig [batch, {hn}, {sn}, {dn}]"),
                format!("a stride of the {:?} layout overflows i64", self.layout),
                fmt_dims(&dims),
            )
        })?;
        named(&dims, TensorSpec::new(self.dtype, &dims, &strides))
    }
    /// Q: `[B, H, S_q, D]` in the config's layout.
    ///
    /// # Errors
    /// A dim < 1, or a size that overflows.
    pub fn q_spec(&self) -> Result<TensorSpec> {
        self.spec(
            ("heads", self.heads),
            ("seq_q", self.seq_q),
            ("head_dim", self.head_dim),
        )
    }
    /// K: `[B, H_kv, S_kv, D]`; with a [`paged`](Self::paged) cache, the
    /// K container `[num_blocks, H_kv, block_size, D]`.
    ///
    /// # Errors
    /// A dim < 1, or a size that overflows.
    pub fn k_spec(&self) -> Result<TensorSpec> {
        if let Some(p) = self.paged {
            return self.container_spec(p, self.head_dim);
        }
        self.spec(
            ("kv_heads", self.kv_heads),
            ("seq_kv", self.seq_kv),
            ("head_dim", self.head_dim),
        )
    }
    /// V: `[B, H_kv, S_kv, D_v]`; with a [`paged`](Self::paged) cache, the
    /// V container `[num_blocks, H_kv, block_size, D_v]`.
    ///
    /// # Errors
    /// A dim < 1, or a size that overflows.
    pub fn v_spec(&self) -> Result<TensorSpec> {
        if let Some(p) = self.paged {
            return self.container_spec(p, self.head_dim_v);
        }
        self.spec(
            ("kv_heads", self.kv_heads),
            ("seq_kv", self.seq_kv),
            ("head_dim_v", self.head_dim_v),
        )
    }
    /// O and dO: `[B, H, S_q, D_v]`.
    ///
    /// # Errors
    /// A dim < 1, or a size that overflows.
    pub fn o_spec(&self) -> Result<TensorSpec> {
        self.spec(
            ("heads", self.heads),
            ("seq_q", self.seq_q),
            ("head_dim_v", self.head_dim_v),
        )
    }
    /// The softmax statistics: `[B, H, S_q, 1]` f32, packed.
    ///
    /// # Errors
    /// A dim < 1, or a size that overflows.
    pub fn stats_spec(&self) -> Result<TensorSpec> {
        let dims = [self.batch, self.heads, self.seq_q, 1];
        named(&dims, TensorSpec::row_major(DType::F32, &dims))
    }
    /// The attention scores `[B, H, S_q, S_kv]` (f32, packed): what the
    /// composite and the causal mask compute in.
    ///
    /// # Errors
    /// A dim < 1, or a size that overflows.
    pub fn score_spec(&self) -> Result<TensorSpec> {
        let dims = [self.batch, self.heads, self.seq_q, self.seq_kv];
        named(&dims, TensorSpec::row_major(DType::F32, &dims))
    }

    /// Floating-point operations of the forward (the two matmuls; halved
    /// when causal, as FlashAttention counts; the bottom-right alignment
    /// with `seq_q != seq_kv`, a window and padding are not counted). Computed in f64: never
    /// overflows (a config that `validate` refuses gives a meaningless count).
    pub fn forward_flops(&self) -> f64 {
        let f = 2.0
            * self.batch as f64
            * self.heads as f64
            * self.seq_q as f64
            * self.seq_kv as f64
            * (self.head_dim as f64 + self.head_dim_v as f64);
        if self.is_causal { f / 2.0 } else { f }
    }

    /// Floating-point operations of the backward (2.5 times the forward's).
    pub fn backward_flops(&self) -> f64 {
        2.5 * self.forward_flops()
    }

    /// Check the shapes and options, and that the loaded cuDNN can build the
    /// attention as [`implementation`](Self::implementation) asks
    /// (`backward`: for the backward): with `Native`, that its SDPA operation
    /// has every option; with `Auto`, that the construction it picks works.
    ///
    /// # Errors
    /// `InvalidArgument` naming the field for a bad shape or value;
    /// `Unsupported` naming the option and the cuDNN that has it (for `Auto`,
    /// the SDPA operation's reason), or the composite's limit.
    pub fn check(&self, backward: bool) -> Result<()> {
        self.resolve(backward).map(|_| ())
    }

    /// What the graph builder will build for this config with the loaded
    /// cuDNN: [`SdpaImpl::Native`] or [`SdpaImpl::Composite`]. `Auto` picks
    /// the SDPA operation for a forward it supports, the composite for every
    /// other forward and for every backward.
    ///
    /// # Errors
    /// As [`check`](Self::check).
    pub fn resolve(&self, backward: bool) -> Result<SdpaImpl> {
        self.validate()?;
        self.resolve_for(loaded_cudnn()?, backward)
    }

    /// What [`resolve`](Self::resolve) gives with cuDNN `cudnn` (`(major,
    /// minor, patch)`) loaded: the version rules alone, a pure function (no
    /// library needed), so they can be checked for any release.
    ///
    /// # Errors
    /// As [`check`](Self::check).
    pub fn resolve_for(&self, cudnn: (u32, u32, u32), backward: bool) -> Result<SdpaImpl> {
        self.validate()?;
        let v = cudnn;
        self.check_release(v)?;
        self.check_band(v)?;
        self.check_paged(v, backward)?;
        self.check_ragged(v, backward)?;
        self.check_bias(v, backward)?;
        self.check_softmax(v, backward)?;
        match (self.implementation, backward) {
            (SdpaImpl::Native, _) => self.check_native(v, backward).map(|_| SdpaImpl::Native),
            (SdpaImpl::Composite, _) | (SdpaImpl::Auto, true) => self
                .check_composite(v, backward)
                .map(|_| SdpaImpl::Composite),
            (SdpaImpl::Auto, false) => match self.check_native(v, false) {
                Ok(()) => Ok(SdpaImpl::Native),
                Err(native) => match self.check_composite(v, false) {
                    Ok(()) => Ok(SdpaImpl::Composite),
                    // The SDPA operation's reason names the version that has it.
                    Err(_) => Err(native),
                },
            },
        }
    }

    /// Releases whose attention NVIDIA's frontend refuses outright.
    fn check_release(&self, v: (u32, u32, u32)) -> Result<()> {
        if v == (9, 10, 0) || v == (9, 10, 1) {
            return Err(Error::Unsupported {
                what: format!(
                    "f16 / bf16 attention on the loaded cuDNN {} (known bugs; NVIDIA's frontend refuses it too)",
                    fmt_version(v)
                ),
                needs: Some("cuDNN 9.10.2 or newer".to_string()),
            });
        }
        Ok(())
    }

    fn check_composite(&self, v: (u32, u32, u32), backward: bool) -> Result<()> {
        if !backward {
            return Ok(());
        }
        if self.seq_q == 1 && self.seq_kv == 1 {
            return Err(Error::Unsupported {
                what: "the attention backward with seq_q = seq_kv = 1 (cuDNN's fused backward engines do not take it)".to_string(),
                needs: Some("seq_q > 1 or seq_kv > 1".to_string()),
            });
        }
        // cuDNN up to 9.15.0 computes the composite backward right for key
        // lengths that are not multiples of 128 only under a padding mask
        // (NVIDIA's frontend adds one with full lengths there; 9.15.1 on
        // does not need it).
        if v <= LAST_NEEDING_PADDING && self.seq_kv % 128 != 0 && !self.padding {
            return Err(Error::Unsupported {
                what: format!(
                    "the composite attention backward with seq_kv = {} (not a multiple of 128) and no padding mask on the loaded cuDNN {}",
                    self.seq_kv,
                    fmt_version(v)
                ),
                needs: Some(
                    "SdpaConfig.padding = true (bind full sequence lengths), seq_kv a multiple of 128, or cuDNN >= 9.15.1"
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
        for (name, v) in [("seq_q", self.seq_q), ("seq_kv", self.seq_kv)] {
            if v > MAX_SEQ_LEN {
                return Err(Error::invalid(
                    format!("SdpaConfig.{name}"),
                    "must be at most 2^31 - 1 (cuDNN's sequence lengths and indices are i32)",
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
        self.validate_band()?;
        self.validate_paged()?;
        self.validate_ragged()?;
        self.validate_softcap()?;
        self.validate_bias()?;
        self.validate_softmax()?;
        if let Some(d) = self.dropout
            && !(d.probability >= 0.0 && d.probability < 1.0)
        {
            return Err(Error::invalid(
                "SdpaConfig.dropout.probability",
                "must be in [0, 1)",
                d.probability,
            ));
        }
        // Every tensor the attention reads, writes or computes in must have a
        // representable size (the scores are the largest).
        for (what, r) in [
            ("q", self.q_spec()),
            ("k", self.k_spec()),
            ("v", self.v_spec()),
            ("o", self.o_spec()),
            ("the scores [B, H, S_q, S_kv]", self.score_spec()),
        ] {
            r.map_err(|e| {
                Error::invalid(
                    format!("SdpaConfig: {what}"),
                    "must have a representable size",
                    e,
                )
            })?;
        }
        Ok(())
    }

    fn check_native(&self, v: (u32, u32, u32), backward: bool) -> Result<()> {
        let dir = if backward { "backward" } else { "forward" };
        let need = |option: &str, want: (u32, u32, u32)| -> Result<()> {
            if v >= want {
                Ok(())
            } else {
                Err(Error::Unsupported {
                    what: format!(
                        "SdpaConfig option `{option}` with the loaded cuDNN {} (cuDNN's SDPA operation {dir})",
                        fmt_version(v)
                    ),
                    needs: Some(format!("cuDNN >= {}", fmt_version(want))),
                })
            }
        };
        if backward {
            need("backward (SDPA_BWD)", since::BACKWARD)?;
        } else {
            need("forward (SDPA_FWD)", since::FORWARD)?;
        }
        if self.padding {
            need("padding", since::PADDING)?;
        }
        if self.is_causal {
            need("is_causal", since::SUBGRAPH)?;
        }
        if self.band_needs_lengths() {
            need("diagonal (BottomRight)", since::SUBGRAPH)?;
        }
        if self.window.is_some() {
            need("window", since::SUBGRAPH)?;
        }
        if self.paged.is_some() {
            need("paged", since::PADDING)?;
        }
        self.check_native_softcap(v, backward)?;
        self.check_native_bias(v, backward)?;
        self.check_softmax_native(v, backward)?;
        if self.active_dropout().is_some() {
            if backward {
                need("dropout", since::BACKWARD_DROPOUT)?;
                // The forward that saves statistics with dropout is always the
                // composite (below), and its mask is not the SDPA backward's.
                return Err(Error::Unsupported {
                    what: "SdpaImpl::Native for a backward with dropout: the training forward with dropout is the composite (cuDNN's SDPA operation cannot save statistics with dropout), and a native backward would draw a different dropout mask".to_string(),
                    needs: Some("SdpaImpl::Auto or Composite for the backward (the same construction as the forward)".to_string()),
                });
            }
            need("dropout", since::FORWARD_DROPOUT)?;
            if self.is_training {
                return Err(Error::Unsupported {
                    what: "SdpaConfig option `dropout` with `is_training` on cuDNN's SDPA operation (it cannot save the statistics with dropout; NVIDIA's frontend builds this as the composite)".to_string(),
                    needs: Some("SdpaImpl::Auto or Composite".to_string()),
                });
            }
        }
        Ok(())
    }

    /// Whether cuDNN's engines for a GPU of `device_ver` (cuDNN's encoding,
    /// major*100 + minor*10, as
    /// [`DeviceProperties::device_ver`](crate::graph::DeviceProperties::device_ver))
    /// with cuDNN `cudnn` take this attention (`backward`: its backward), by
    /// the per-architecture limits NVIDIA's frontend 1.32 checks before it
    /// asks cuDNN. A pure function (no library needed); `Plan::build` applies
    /// it with the target's architecture and the loaded cuDNN, so a refusal
    /// comes before cuDNN's heuristics, which would only offer nothing.
    ///
    /// Forward: sm_80 or newer; head dims above 128 need cuDNN newer than
    /// 9.9.0 on sm_8x and 9.9.0 or newer on sm_100; up to 9.9.0 a single
    /// query (`seq_q = 1`) takes neither a causal mask nor, on sm_100, head
    /// dims above 128. Backward: head dims up to 256 on sm_90 (on cuDNN 9.11
    /// and 9.12, a head_dim in (128, 192] with a head_dim_v in (64, 128] only
    /// as 192 or with head_dim_v 128); on sm_100 from cuDNN 9.11 up to 128
    /// and 192 with 128 (the frontend's 256 / 256 from 9.23 is refused, see
    /// the module's list of differences); up to 128 elsewhere.
    ///
    /// # Errors
    /// [`validate`](Self::validate)'s errors; `Unsupported` naming the head
    /// dims (or option), the architecture, the cuDNN and the limit.
    pub fn check_target_for(
        &self,
        backward: bool,
        device_ver: i64,
        cudnn: (u32, u32, u32),
    ) -> Result<()> {
        self.validate()?;
        let limit = self
            .ragged_arch_limit(device_ver, cudnn)
            .or_else(|| self.band_arch_limit(device_ver, cudnn))
            .or_else(|| self.softcap_arch_limit(backward, device_ver))
            .or_else(|| self.bias_arch_limit(backward, device_ver, cudnn))
            .or_else(|| {
                if backward {
                    self.backward_arch_limit(device_ver, cudnn)
                } else {
                    self.forward_arch_limit(device_ver, cudnn)
                }
            });
        match limit {
            None => Ok(()),
            Some(limit) => Err(Error::Unsupported {
                what: format!(
                    "the attention {} with head_dim {}, head_dim_v {}, seq_q {}{}{}{}{}{} on a GPU of compute capability {}.{} with cuDNN {}",
                    if backward { "backward" } else { "forward" },
                    self.head_dim,
                    self.head_dim_v,
                    self.seq_q,
                    match (self.is_causal, self.is_bottom_right_causal()) {
                        (true, true) => ", causal (bottom-right)",
                        (true, false) => ", causal",
                        _ => "",
                    },
                    match self.window {
                        Some(_) => ", sliding window",
                        None => "",
                    },
                    if self.active_dropout().is_some() {
                        ", dropout"
                    } else {
                        ""
                    },
                    if self.ragged { ", ragged" } else { "" },
                    if self.softcap.is_some() {
                        ", softcap"
                    } else {
                        ""
                    },
                    device_ver / 100,
                    (device_ver % 100) / 10,
                    fmt_version(cudnn)
                ),
                needs: Some(limit.to_string()),
            }),
        }
    }

    /// The forward's per-architecture limit this config breaks, if any.
    fn forward_arch_limit(&self, device_ver: i64, v: (u32, u32, u32)) -> Option<&'static str> {
        let major = device_ver / 100;
        let wide = self.head_dim > 128 || self.head_dim_v > 128;
        let upto_9_9 = v <= (9, 9, 0);
        if major < 8 {
            return Some("a GPU of compute capability 8.0 or newer (cuDNN's f16 / bf16 attention)");
        }
        if major == 8 && upto_9_9 && wide {
            return Some("head dims up to 128 on sm_8x with cuDNN up to 9.9.0 (or a newer cuDNN)");
        }
        if major == 10 && v < (9, 9, 0) && wide {
            return Some("head dims up to 128 on sm_100 before cuDNN 9.9.0 (or a newer cuDNN)");
        }
        if self.seq_q == 1 && upto_9_9 {
            if major == 10 && wide {
                return Some(
                    "head dims up to 128 for seq_q = 1 on sm_100 with cuDNN up to 9.9.0 (or a newer cuDNN)",
                );
            }
            if self.is_causal {
                return Some(
                    "no causal mask for seq_q = 1 with cuDNN up to 9.9.0 (or a newer cuDNN)",
                );
            }
        }
        None
    }

    /// The backward's per-architecture limit this config breaks, if any.
    fn backward_arch_limit(&self, device_ver: i64, v: (u32, u32, u32)) -> Option<&'static str> {
        let major = device_ver / 100;
        let (d, dv) = (self.head_dim, self.head_dim_v);
        let upto_128 = d <= 128 && dv <= 128;
        match major {
            9 => {
                if ((9, 11, 0)..(9, 13, 0)).contains(&v)
                    && (129..=192).contains(&d)
                    && (65..=128).contains(&dv)
                    && dv != 128
                    && d != 192
                {
                    Some(
                        "on sm_90 with cuDNN 9.11 and 9.12, head dims with head_dim in (128, 192] and head_dim_v in (64, 128] only as head_dim 192 or head_dim_v 128 (or cuDNN >= 9.13)",
                    )
                } else if d <= 256 && dv <= 256 {
                    None
                } else {
                    Some("head dims up to 256 on sm_90")
                }
            }
            10 if v >= (9, 11, 0) => {
                if d == 192 {
                    (dv != 128).then_some("head dims 192 only with head_dim_v 128 on sm_100")
                } else if v >= (9, 23, 0) && d == 256 && dv == 256 {
                    Some(
                        "head dims up to 128 (or 192 with 128) on sm_100: NVIDIA's frontend serves 256 / 256 (from cuDNN 9.23, without dropout) only with its deterministic algorithm, a pinned engine configuration this crate does not build (the engine cuDNN 9.28's heuristics offer for the composite fails to compile)",
                    )
                } else {
                    (!upto_128).then_some("head dims up to 128 on sm_100 (or 192 with 128)")
                }
            }
            _ => (!upto_128).then_some("head dims up to 128 on this architecture"),
        }
    }
}
