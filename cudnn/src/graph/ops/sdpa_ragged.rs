//! The ragged (packed, THD) batches option of [`SdpaConfig`]
//! ([`SdpaConfig::ragged`]): the sequences of a batch stored one after the
//! other without padding. Q, K, V and O (and dO, dQ, dK, dV in the
//! backward) keep their logical dims `[B, H, S, D]` and packed BSHD strides
//! (`[S*H*D, D, H*D, 1]`, required: other strides are refused); each
//! gets a ragged offset tensor (`[B + 1, 1, 1, 1]` i32 graph input, in
//! elements) saying where each sequence starts, and the padding mask's
//! lengths say how long it is. With a paged cache only Q and O are packed
//! (K and V are containers of pages, addressed through the page tables, as
//! in NVIDIA's frontend). The softmax statistics stay `[B, H, S_q, 1]`
//! packed (no ragged offset).
//!
//! Rules, after NVIDIA's cuDNN frontend 1.32: the padding mask is required;
//! Hopper (sm_90) or newer, Ampere and the other sm_8x / sm_12x from cuDNN
//! 9.18.1 (forward and backward); grouped-query attention in the backward
//! from cuDNN 9.6.0; with a paged cache from 9.7.0. This crate also asks for
//! the BSHD layout (a packed THD batch is BSHD storage), and offsets that
//! fit i32.
//!
//! # Soundness
//! cuDNN adds each offset to its tensor's address on the device: an offset
//! past the buffer makes it read or write out of bounds, and no safe
//! binding can check device values. So a plan records its ragged offset
//! inputs (from the graph, or from a loaded plan JSON's `isRagged`), the
//! safe [`Bindings::input`](crate::graph::Bindings::input) refuses them
//! (a typed `Unsupported`), and they are bound with the unsafe
//! [`Bindings::input_ragged_offsets`](crate::graph::Bindings::input_ragged_offsets),
//! whose contract they meet when [`SdpaConfig::ragged_offsets`] computed
//! them; the plan then runs through the safe `Plan::execute` and CUDA
//! graphs like any other. (Autotuning binds zeros: every sequence at the
//! start, in bounds.)

use super::sdpa::SdpaConfig;
use super::sdpa_types::{RaggedTensor, SdpaRagged};
use crate::error::{Error, Result};
use crate::graph::graph::{Graph, Tensor};
use crate::graph::guard::InputGuard;
use crate::graph::tensor::{DType, TensorSpec, fmt_dims};

/// Before this cuDNN, ragged offsets need Hopper or newer (NVIDIA's frontend).
pub const RAGGED_PRE_HOPPER_SINCE: (u32, u32, u32) = (9, 18, 1);
/// The first cuDNN whose attention backward takes ragged offsets with
/// grouped-query attention.
pub const RAGGED_GQA_BACKWARD_SINCE: (u32, u32, u32) = (9, 6, 0);
/// The first cuDNN that takes ragged offsets with a paged cache.
pub const RAGGED_PAGED_SINCE: (u32, u32, u32) = (9, 7, 0);

impl SdpaConfig {
    /// With ragged (packed THD) batches (see [`ragged`](Self::ragged));
    /// turns the padding mask on, which ragged offsets need.
    pub fn ragged(mut self) -> Self {
        self.ragged = true;
        self.padding = true;
        self
    }

    /// Elements per token of `which` (heads times head dim).
    fn ragged_token_elems(&self, which: RaggedTensor) -> Option<i64> {
        let (h, d) = match which {
            RaggedTensor::Q => (self.heads, self.head_dim),
            RaggedTensor::K => (self.kv_heads, self.head_dim),
            RaggedTensor::V => (self.kv_heads, self.head_dim_v),
            RaggedTensor::O => (self.heads, self.head_dim_v),
        };
        h.checked_mul(d)
    }

    /// A ragged offset tensor: `[B + 1, 1, 1, 1]` i32, packed.
    ///
    /// # Errors
    /// A batch < 1 or that overflows.
    pub fn ragged_offset_spec(&self) -> Result<TensorSpec> {
        if self.batch < 1 {
            return Err(Error::invalid(
                "SdpaConfig.batch",
                "must be >= 1",
                self.batch,
            ));
        }
        let n = self.batch.checked_add(1).ok_or_else(|| {
            Error::invalid(
                "SdpaConfig.batch",
                "must leave room for B + 1 offsets",
                self.batch,
            )
        })?;
        TensorSpec::row_major(DType::I32, &[n, 1, 1, 1])
    }

    /// The ragged offsets of `which` for sequences of lengths `lens` (one
    /// per batch, each in `0..=seq` of that tensor): `B + 1` element
    /// offsets, the sequences packed one after the other from 0, the last
    /// the total. Every sequence then lies inside the tensor's
    /// `[B, H, S, D]` span; bind the same lengths as the padding mask's.
    ///
    /// # Errors
    /// Not [`ragged`](Self::ragged); [`validate`](Self::validate)'s
    /// errors; K or V with a paged cache (they have no ragged offsets);
    /// `lens` not `batch` long; a length < 0 or above the tensor's
    /// sequence length; an offset past i32.
    ///
    /// # Rules
    /// After NVIDIA's frontend 1.32: the padding mask is required; sm_90 or
    /// newer, sm_8x / sm_12x from cuDNN 9.18.1 (forward and backward);
    /// grouped-query attention in the backward from 9.6.0; with a paged
    /// cache from 9.7.0. This crate also asks for the BSHD layout and
    /// offsets that fit i32. The softmax statistics stay `[B, H, S_q, 1]`.
    ///
    /// # Soundness
    /// cuDNN adds each offset to its tensor's address on the device, so an
    /// offset past the buffer makes it read or write out of bounds; the
    /// safe [`Bindings::input`](crate::graph::Bindings::input) refuses
    /// ragged offsets, bound with the unsafe
    /// [`Bindings::input_ragged_offsets`](crate::graph::Bindings::input_ragged_offsets).
    /// These offsets meet its contract: for lengths in `0..=seq`, sequence
    /// `b` starts at most `(B - 1) * seq` tokens in, so any bound length up
    /// to `seq` (what [`SeqLengths`](crate::graph::SeqLengths) checks)
    /// keeps it inside the `[B, H, S, D]` span. That holds because every
    /// tensor with ragged offsets has packed BSHD strides
    /// (`[S*H*D, D, H*D, 1]`): [`Graph::sdpa_forward`] and
    /// [`Graph::sdpa_backward`] refuse other strides (a typed error naming
    /// the tensor), as does the plan JSON loader.
    pub fn ragged_offsets(&self, which: RaggedTensor, lens: &[i32]) -> Result<Vec<i32>> {
        if !self.ragged {
            return Err(Error::invalid(
                "SdpaConfig.ragged",
                "must be set for ragged offsets",
                self.ragged,
            ));
        }
        self.validate()?;
        if self.paged.is_some() && matches!(which, RaggedTensor::K | RaggedTensor::V) {
            return Err(Error::invalid(
                "ragged_offsets which",
                "must be Q or O with a paged cache (K and V are containers of pages, addressed through the page tables)",
                format!("{which:?}"),
            ));
        }
        let seq = match which {
            RaggedTensor::Q | RaggedTensor::O => self.seq_q,
            RaggedTensor::K | RaggedTensor::V => self.seq_kv,
        };
        if i64::try_from(lens.len()).ok() != Some(self.batch) {
            return Err(Error::mismatch(
                "ragged_offsets lens (one per batch)",
                self.batch,
                lens.len(),
            ));
        }
        let per_token = self.ragged_token_elems(which).ok_or_else(|| {
            Error::invalid("SdpaConfig heads x head dim", "overflows i64", which as i32)
        })?;
        let mut out = Vec::with_capacity(lens.len().saturating_add(1));
        let mut at: i64 = 0;
        out.push(0);
        for (b, &l) in lens.iter().enumerate() {
            if l < 0 || i64::from(l) > seq {
                return Err(Error::invalid(
                    format!("ragged_offsets lens[{b}] ({which:?})"),
                    format!("must be in 0..={seq}"),
                    l,
                ));
            }
            at = i64::from(l)
                .checked_mul(per_token)
                .and_then(|n| at.checked_add(n))
                .ok_or_else(|| Error::invalid("ragged_offsets", "an offset overflows i64", b))?;
            let v = i32::try_from(at).map_err(|_| {
                Error::invalid(
                    format!("ragged_offsets ({which:?}) after batch {b}"),
                    "must fit i32 (cuDNN's ragged offsets here are i32)",
                    at,
                )
            })?;
            out.push(v);
        }
        Ok(out)
    }

    /// The value checks of the ragged option (part of [`validate`](Self::validate)).
    pub(crate) fn validate_ragged(&self) -> Result<()> {
        if !self.ragged {
            return Ok(());
        }
        if self.layout != super::sdpa::AttnLayout::Bshd {
            return Err(Error::invalid(
                "SdpaConfig.layout",
                "must be Bshd with `ragged` (packed THD storage is token-major)",
                format!("{:?}", self.layout),
            ));
        }
        self.ragged_offset_spec()?;
        for (which, seq) in [
            (RaggedTensor::Q, self.seq_q),
            (RaggedTensor::K, self.seq_kv),
            (RaggedTensor::V, self.seq_kv),
            (RaggedTensor::O, self.seq_q),
        ] {
            let total = self
                .ragged_token_elems(which)
                .and_then(|n| n.checked_mul(seq))
                .and_then(|n| n.checked_mul(self.batch));
            if total.is_none_or(|n| n > i64::from(i32::MAX)) {
                return Err(Error::invalid(
                    format!("SdpaConfig ({which:?} with `ragged`)"),
                    "must have at most 2^31 - 1 elements (its ragged offsets are i32)",
                    format!("{total:?}"),
                ));
            }
        }
        Ok(())
    }

    /// The version rules of the ragged option.
    pub(crate) fn check_ragged(&self, v: (u32, u32, u32), backward: bool) -> Result<()> {
        if !self.ragged {
            return Ok(());
        }
        let unsupported = |what: String, needs: &str| Error::Unsupported {
            what,
            needs: Some(needs.to_string()),
        };
        let ver = format!("{}.{}.{}", v.0, v.1, v.2);
        if !self.padding {
            return Err(unsupported(
                "SdpaConfig option `ragged` without `padding` (the lengths say how long each packed sequence is)".to_string(),
                "SdpaConfig.padding = true (SdpaConfig::ragged sets it)",
            ));
        }
        if self.paged.is_some() && v < RAGGED_PAGED_SINCE {
            return Err(unsupported(
                format!(
                    "SdpaConfig options `ragged` and `paged` together with the loaded cuDNN {ver}"
                ),
                "cuDNN >= 9.7.0",
            ));
        }
        if backward && self.kv_heads != self.heads && v < RAGGED_GQA_BACKWARD_SINCE {
            return Err(unsupported(
                format!(
                    "SdpaConfig option `ragged` with grouped-query attention in the backward with the loaded cuDNN {ver}"
                ),
                "cuDNN >= 9.6.0",
            ));
        }
        Ok(())
    }

    /// The per-architecture limit of the ragged option, if this config breaks it.
    pub(crate) fn ragged_arch_limit(
        &self,
        device_ver: i64,
        v: (u32, u32, u32),
    ) -> Option<&'static str> {
        (self.ragged && device_ver < 900 && v < RAGGED_PRE_HOPPER_SINCE).then_some(
            "ragged offsets (packed THD) on sm_90 or newer before cuDNN 9.18.1 (or cuDNN >= 9.18.1 on sm_8x)",
        )
    }
}

/// Whether `dims` / `strides` are packed BSHD storage of a `[B, H, S, D]`
/// tensor: D stride 1, H stride `D`, S stride `H * D`, B stride
/// `S * H * D`. Axes of extent 1 may have any stride (they never move an
/// address). Only there do offsets in units of `H * D` elements per token,
/// as [`SdpaConfig::ragged_offsets`] computes them, address whole tokens
/// inside the tensor's span.
pub(crate) fn packed_bshd(dims: &[i64], strides: &[i64]) -> bool {
    let ([b, h, s, d], [sb, sh, ss, sd]) = (dims, strides) else {
        return false;
    };
    let want = |extent: i64, got: i64, w: Option<i64>| extent == 1 || w == Some(got);
    want(*d, *sd, Some(1))
        && want(*h, *sh, Some(*d))
        && want(*s, *ss, h.checked_mul(*d))
        && want(*b, *sb, s.checked_mul(*h).and_then(|n| n.checked_mul(*d)))
}

impl Graph {
    /// Every tensor of `tensors` that gets ragged offsets (K and V not with
    /// a paged cache: they are containers of pages) has packed BSHD
    /// strides ([`packed_bshd`]). Other strides make offsets in units of
    /// `H * D` elements per token land outside the tensor (a batch stride
    /// below `S * H * D`: the bound buffer is smaller than the offsets
    /// reach) or on the wrong elements (a fused QKV buffer's sequence
    /// stride `3 * H * D`).
    ///
    /// # Errors
    /// A typed [`Error::InvalidArgument`] naming the tensor, its strides and
    /// the packed ones.
    pub(crate) fn sdpa_ragged_strides(
        &self,
        cfg: &SdpaConfig,
        op: &str,
        tensors: &[(&str, Tensor, RaggedTensor)],
    ) -> Result<()> {
        if !cfg.ragged {
            return Ok(());
        }
        for &(role, t, which) in tensors {
            if cfg.paged.is_some() && matches!(which, RaggedTensor::K | RaggedTensor::V) {
                continue;
            }
            let n = self.node(t)?;
            let (dims, strides) = (n.spec.dims(), n.spec.strides());
            if !packed_bshd(dims, strides) {
                let packed = match dims {
                    [b, h, s, d] => super::sdpa::AttnLayout::Bshd
                        .strides(*b, *h, *s, *d)
                        .map(|x| fmt_dims(&x))
                        .unwrap_or_else(|_| "overflowing".to_string()),
                    _ => "4-d".to_string(),
                };
                return Err(Error::invalid(
                    format!(
                        "{op}: {role} `{}` strides (dims {}, with `ragged`)",
                        n.name,
                        fmt_dims(dims)
                    ),
                    format!(
                        "must be packed BSHD ({packed}): ragged offsets count H x D elements \
                         per token, so other strides would address outside the tensor or the \
                         wrong elements"
                    ),
                    fmt_dims(strides),
                ));
            }
        }
        Ok(())
    }

    /// The ragged offset inputs of an attention (named after `base`), set
    /// on each of `tensors` (`(tensor, which offsets)`).
    pub(crate) fn sdpa_ragged(
        &mut self,
        cfg: &SdpaConfig,
        base: &str,
        tensors: &[(Tensor, RaggedTensor)],
    ) -> Result<Option<SdpaRagged>> {
        if !cfg.ragged {
            return Ok(None);
        }
        // The outputs made here follow the inputs' layouts; checked again
        // (the inputs were checked before the graph changed).
        let named: Vec<(&str, Tensor, RaggedTensor)> =
            tensors.iter().map(|&(t, w)| ("tensor", t, w)).collect();
        self.sdpa_ragged_strides(cfg, base, &named)?;
        let spec = cfg.ragged_offset_spec()?;
        // With a paged cache only Q and O are packed: K and V are
        // containers of pages, addressed through the page tables (NVIDIA's
        // frontend 1.32 makes only Q and O ragged then).
        let kv = cfg.paged.is_none();
        let r = SdpaRagged {
            q: self.input(&format!("{base}.ragged_offset_q"), spec.clone())?,
            k: if kv {
                Some(self.input(&format!("{base}.ragged_offset_k"), spec.clone())?)
            } else {
                None
            },
            v: if kv {
                Some(self.input(&format!("{base}.ragged_offset_v"), spec.clone())?)
            } else {
                None
            },
            o: self.input(&format!("{base}.ragged_offset_o"), spec)?,
        };
        // cuDNN adds their values to the tensors' addresses, unchecked:
        // plans bind them only through the `unsafe` `input_ragged_offsets`.
        for off in [Some(r.q), r.k, r.v, Some(r.o)].into_iter().flatten() {
            let i = self.index(off)?;
            self.guarded.push((i, InputGuard::RaggedOffsets));
        }
        for &(t, which) in tensors {
            let off = match which {
                RaggedTensor::Q => r.q,
                RaggedTensor::O => r.o,
                RaggedTensor::K => match r.k {
                    Some(k) => k,
                    None => continue,
                },
                RaggedTensor::V => match r.v {
                    Some(v) => v,
                    None => continue,
                },
            };
            let (i, j) = (self.index(t)?, self.index(off)?);
            let node = self
                .nodes
                .get_mut(i)
                .ok_or_else(|| Error::invalid("tensor", "unknown", i))?;
            if node.ragged.is_some_and(|k| k != j) {
                return Err(Error::invalid(
                    format!("{base}: tensor `{}`", node.name),
                    "must not already have other ragged offsets (one packed attention per tensor)",
                    which as i32,
                ));
            }
            node.ragged = Some(j);
        }
        Ok(Some(r))
    }
}
