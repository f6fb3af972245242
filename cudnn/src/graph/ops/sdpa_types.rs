//! The attention options' and outputs' own types, apart from
//! [`SdpaConfig`](super::sdpa::SdpaConfig): the config and the outputs name
//! them, and the files that add each option (`sdpa_bias`, `sdpa_paged`,
//! `sdpa_ragged`, `sdpa_softmax`) extend the config, so the types live in
//! neither (no import circle). Re-exported where they were documented.

use crate::graph::graph::Tensor;
use crate::graph::tensor::DType;

/// An additive attention bias: a `[B or 1, H or 1, S_q, S_kv]` graph input
/// (packed) added to the scaled scores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct AttnBias {
    /// One bias per batch (else `1`: shared by the batch).
    pub per_batch: bool,
    /// One bias per query head (else `1`: shared by the heads).
    pub per_head: bool,
    /// Its element type: `None` is the I/O type; otherwise that type or f32.
    pub dtype: Option<DType>,
    /// The backward outputs dBias (the bias's dims and type).
    pub dbias: bool,
}

impl AttnBias {
    /// A bias of `[B or 1, H or 1, S_q, S_kv]` in the I/O type, no dBias.
    pub fn new(per_batch: bool, per_head: bool) -> Self {
        Self {
            per_batch,
            per_head,
            dtype: None,
            dbias: false,
        }
    }
    /// A full `[B, H, S_q, S_kv]` bias.
    pub fn full() -> Self {
        Self::new(true, true)
    }
    /// With the backward's dBias output (or not).
    pub fn with_dbias(mut self, on: bool) -> Self {
        self.dbias = on;
        self
    }
    /// Stored as `dtype` (the I/O type or f32).
    pub fn with_dtype(mut self, dtype: DType) -> Self {
        self.dtype = Some(dtype);
        self
    }
}

/// The graph tensors of the bias options an attention op made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BiasTensors {
    /// The bias (a graph input, [`SdpaConfig::bias_spec`](super::sdpa::SdpaConfig::bias_spec)).
    pub bias: Option<Tensor>,
    /// The ALiBi slopes (a graph input, f32 `[1, H, 1, 1]`).
    pub alibi_slopes: Option<Tensor>,
    /// dBias (backward with [`AttnBias::dbias`]: a graph output, the
    /// bias's dims and type).
    pub dbias: Option<Tensor>,
}

/// A paged KV cache's geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct PagedKv {
    /// Tokens per page: a power of two ([`SdpaConfig::validate`](super::sdpa::SdpaConfig::validate) refuses
    /// others: measured on cuDNN 9.28.1 (H200), cuDNN planned paged
    /// attention only for those; NVIDIA documents no such rule).
    pub block_size: i64,
    /// Pages in each container (>= 1): K's and V's containers hold the
    /// same number.
    pub num_blocks: i64,
}

/// Which tensor a ragged offset tensor addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RaggedTensor {
    /// Q and dQ: `H * D` elements per token.
    Q,
    /// K and dK: `H_kv * D` elements per token.
    K,
    /// V and dV: `H_kv * D_v` elements per token.
    V,
    /// O and dO: `H * D_v` elements per token.
    O,
}

/// The ragged offset inputs an attention adds ([`SdpaConfig::ragged`](super::sdpa::SdpaConfig::ragged)):
/// `[B + 1, 1, 1, 1]` i32 graph inputs, element offsets of each sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SdpaRagged {
    /// Q's offsets (dQ's too in the backward).
    pub q: Tensor,
    /// K's offsets (dK's too); none with a paged cache (K is a container
    /// of pages, addressed through its page table).
    pub k: Option<Tensor>,
    /// V's offsets (dV's too); none with a paged cache.
    pub v: Option<Tensor>,
    /// O's offsets (dO's too).
    pub o: Tensor,
}

/// The softmax tensors an attention op added (all `None` unless the
/// config asks for them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SdpaSoftmax {
    /// Forward ([`SdpaConfig::max_sum_exp`](super::sdpa::SdpaConfig::max_sum_exp)): the row max, `[B, H, S_q, 1]`
    /// f32 graph output.
    pub max: Option<Tensor>,
    /// Forward ([`SdpaConfig::max_sum_exp`](super::sdpa::SdpaConfig::max_sum_exp)): the row sum of `exp(S -
    /// max)`, `[B, H, S_q, 1]` f32 graph output.
    pub sum_exp: Option<Tensor>,
    /// The sink logits ([`SdpaConfig::sink`](super::sdpa::SdpaConfig::sink); in the backward only with
    /// [`SdpaConfig::sink_grad`](super::sdpa::SdpaConfig::sink_grad)): `[1, H, 1, 1]` f32 graph input.
    pub sink: Option<Tensor>,
    /// Backward ([`SdpaConfig::sink_grad`](super::sdpa::SdpaConfig::sink_grad)): dSink, `[1, H, 1, 1]` f32
    /// graph output.
    pub d_sink: Option<Tensor>,
}
