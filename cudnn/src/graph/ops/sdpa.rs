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
//! operation; cuDNN 9.19 refuses its graph, and 9.21 to 9.27 offer no
//! engine for it without a device: [`since::BACKWARD`]). With
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
//! - Before cuDNN 9.21, the composite's causal mask computes its row and
//!   column indices (`GEN_INDEX`) in INT32, as the padding mask does. The
//!   frontend decomposes its diagonal band mask there with a `GEN_INDEX`
//!   that sets no compute type and so takes the graph's (f32 for
//!   attention). INT32 keeps the index arithmetic exact for every sequence
//!   length up to 2^31 - 1 (f32 is exact only up to 2^24). From 9.21 both
//!   build every band (causal, bottom-right, window) as cuDNN's diagonal
//!   band mask operation, which computes its indices itself: cuDNN
//!   documents no precision for them, so that guarantee is not made there
//!   (no GPU has run these graphs yet).
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
//! let fwd = g.sdpa_forward_training(q, k, v, &cfg)?;
//! g.rename(fwd.o, "o")?;
//! g.rename(fwd.stats, "stats")?; // a Tensor: a training forward always has it
//! let (plan, _) = Plan::build(&g.build()?, &Target::preset("h200")?, &Policy::default())?;
//! # Ok::<(), cudnn::Error>(())
//! ```

use crate::error::{Error, Result};
use crate::graph::graph::Tensor;
use crate::graph::tensor::{DType, TensorSpec, fmt_dims};

/// How Q, K, V and O are stored (their logical dims are `[B, H, S, D]` either way).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
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
#[non_exhaustive]
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
    /// and backward (from cuDNN 9.21 the forward's softmax is cuDNN's softmax
    /// operation, and the causal mask and window its diagonal band mask
    /// operation, as NVIDIA's frontend builds them). The backward keeps two
    /// f32 tensors in the plan's workspace (the row sums of `dO ⊙ O`,
    /// `[B, H, S_q, 1]`, and the dQ accumulator, `[B, H, S_q, D]`), counted
    /// in `Plan::workspace_size`.
    Composite,
}

/// One attention's shapes and options.
///
/// Made with [`SdpaConfig::new`] and the chainable methods, one per option
/// (the struct is `#[non_exhaustive]`: options will be added; its fields
/// stay readable and assignable):
///
/// ```
/// use cudnn::graph::{AttnLayout, DType, SdpaConfig};
/// // Causal grouped-query attention, 32 query heads over 8 K/V heads,
/// // a V head dim of 64, stored BHSD.
/// let cfg = SdpaConfig::new(2, 32, 1024, 128, DType::BF16)
///     .gqa(8)
///     .head_dim_v(64)
///     .causal(true)
///     .layout(AttnLayout::Bhsd);
/// assert_eq!((cfg.kv_heads, cfg.head_dim_v, cfg.is_causal), (8, 64, true));
/// assert_eq!(cfg.o_spec()?.dims(), &[2, 32, 1024, 64]);
/// # Ok::<(), cudnn::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
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
    /// The mode the rules assume ([`resolve`](Self::resolve),
    /// [`check`](Self::check)): a training forward, which saves the softmax
    /// statistics (log-sum-exp per query row, `[B, H, S_q, 1]` f32) for the
    /// backward. The graph's entry point decides the mode:
    /// [`Graph::sdpa_forward_training`](crate::graph::Graph::sdpa_forward_training)
    /// sets it, [`Graph::sdpa_forward`](crate::graph::Graph::sdpa_forward)
    /// refuses it; set it (`.training(true)`) to ask `resolve` which
    /// construction a training graph gets.
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

/// What [`Graph::sdpa_forward`](crate::graph::Graph::sdpa_forward) (an
/// inference forward: `SdpaForward`, whose `stats` is `()`) and
/// [`Graph::sdpa_forward_training`](crate::graph::Graph::sdpa_forward_training)
/// (a training forward: [`SdpaTrainingForward`], `stats` a [`Tensor`])
/// add. The mode is in the type: a training forward's statistics cannot be
/// missing, and an inference user never handles them. Code that serves
/// both modes can make the two one type with [`map_stats`](Self::map_stats)
/// (`.map_stats(Some)` and `.map_stats(|()| None)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SdpaForward<Stats = ()> {
    /// The output (a graph output of the config's dtype, in its layout).
    pub o: Tensor,
    /// The softmax statistics: in a training forward the `[B, H, S_q, 1]`
    /// f32 graph output the backward takes; `()` in an inference forward.
    pub stats: Stats,
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

/// A training forward's outputs: [`SdpaForward`] with the softmax
/// statistics (`[B, H, S_q, 1]` f32), made by
/// [`Graph::sdpa_forward_training`](crate::graph::Graph::sdpa_forward_training).
pub type SdpaTrainingForward = SdpaForward<Tensor>;

impl<S> SdpaForward<S> {
    /// The same outputs with the statistics mapped by `f`: `.map_stats(Some)`
    /// on a training forward and `.map_stats(|()| None)` on an inference one
    /// give both the type `SdpaForward<Option<Tensor>>`, for code that
    /// builds either mode.
    pub fn map_stats<T>(self, f: impl FnOnce(S) -> T) -> SdpaForward<T> {
        SdpaForward {
            o: self.o,
            stats: f(self.stats),
            seq_len_q: self.seq_len_q,
            seq_len_kv: self.seq_len_kv,
            dropout_seed: self.dropout_seed,
            dropout_offset: self.dropout_offset,
            page_table_k: self.page_table_k,
            page_table_v: self.page_table_v,
            ragged: self.ragged,
            bias: self.bias,
            softmax: self.softmax,
        }
    }
}

/// What [`Graph::sdpa_backward`](crate::graph::Graph::sdpa_backward) adds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
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

pub use super::sdpa_types::{
    AttnBias, BiasTensors, PagedKv, RaggedTensor, SdpaRagged, SdpaSoftmax,
};

/// The first cuDNN with each part of the SDPA operation, as `(major, minor, patch)`.
pub mod since {
    /// `CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR` (NVIDIA's frontend uses it from 9.13.1).
    pub const FORWARD: (u32, u32, u32) = (9, 13, 1);
    /// Padding by sequence lengths.
    pub const PADDING: (u32, u32, u32) = (9, 15, 0);
    /// `CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR` (only with
    /// [`SdpaImpl::Native`](super::SdpaImpl::Native)). The header has it
    /// from 9.17, but cuDNN 9.17.1 and 9.19.0 refuse its operation graph
    /// (`CUDNN_STATUS_BAD_PARAM` at finalize), which 9.21.1 builds; without
    /// a device, heuristics offer engines for it from 9.28 (none on 9.21 to
    /// 9.27).
    pub const BACKWARD: (u32, u32, u32) = (9, 21, 0);
    /// Score-modifier subgraphs (the causal mask).
    pub const SUBGRAPH: (u32, u32, u32) = (9, 21, 0);
    /// Forward dropout (inference only: not with saved statistics).
    pub const FORWARD_DROPOUT: (u32, u32, u32) = (9, 22, 0);
    /// Backward dropout.
    pub const BACKWARD_DROPOUT: (u32, u32, u32) = (9, 28, 0);
}

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
    /// The mode the rules assume: training (softmax statistics saved) or
    /// not. [`Graph::sdpa_forward_training`](crate::graph::Graph::sdpa_forward_training)
    /// sets it itself; set it here to ask [`resolve`](Self::resolve) or
    /// [`check`](Self::check) about a training graph.
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
    /// With a head dim of V and O other than Q's and K's.
    pub fn head_dim_v(mut self, head_dim_v: i64) -> Self {
        self.head_dim_v = head_dim_v;
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
}
