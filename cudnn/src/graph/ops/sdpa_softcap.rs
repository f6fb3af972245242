//! The logit softcap option of [`SdpaConfig`] ([`SdpaConfig::softcap`], as
//! Gemma 2 uses it): the scaled scores `s = scale * Q Kᵀ` become
//! `softcap * tanh(s / softcap)` before every other score modifier and
//! mask, forward and backward (`dS_raw = dS_capped * (1 - tanh²(s /
//! softcap))`). The cap is a by-value f32 scalar of the graph.
//!
//! Built as NVIDIA's cuDNN frontend 1.32 builds its softcap score modifier
//! (`DIV` by the cap, `TANH_FWD`, `MUL` by the cap; in the backward `MUL`
//! by the cap, `TANH_BWD` against the saved `s / softcap`, `DIV` by the
//! cap):
//! - the composite (forward and backward): the three pointwise ops right
//!   after the scale, and in the backward the three after `dS = (dP - Σ) ⊙
//!   P` (and the dropout scale), before the scale;
//! - cuDNN's SDPA operation (`SdpaImpl::Native`), forward and backward:
//!   the three forward ops as its score-modifier subgraph
//!   (`SDPA_FWD_SUBGRAPH` / `SDPA_BWD_SUBGRAPH`, cuDNN >= 9.21,
//!   [`SOFTCAP_NATIVE`]); the backward operation takes the forward's
//!   subgraph and differentiates it itself. NVIDIA's frontend builds the
//!   forward this way (its unified node) but never the backward, so `Auto`
//!   builds every backward as the composite, as for the other options.
//!   cuDNN 9.28 plans both for the H200, H100, B200, A100 and L4 presets;
//!   the composite backward has no engine on sm_8x and sm_12x (cuDNN: no
//!   backward activation there), refused with a typed `Unsupported`
//!   ([`SdpaConfig::check_target_for`]), so the SDPA backward operation is
//!   the one that serves a softcap backward on those.
//!
//! Combinations: the softcap goes first, then the masks, in the composite
//! (forward and backward) and in the SDPA operation's subgraph (the three
//! softcap ops, then the diagonal-band mask ops). It combines with a
//! causal mask (top-left or bottom-right), a sliding window, a padding mask
//! (and so a paged cache and ragged batches), dropout, grouped-query
//! attention, either layout, training and inference, as Gemma 2 uses it
//! (causal, a sliding window on alternate layers, padded batches in
//! training). NVIDIA's frontend 1.32 refuses every mask beside its generic
//! `score_mod` callback ("Attention score mod enabled and hence other
//! subgraphs are disabled"), a rule of its support surface rather than of
//! cuDNN: cuDNN 9.28 plans every one of these combinations for the H200,
//! H100 and B200 presets, forward and backward, the composite and the SDPA
//! operation alike (`host/sdpa_softcap`'s `sdpa_softcap_masks_plan`; the
//! conformance difference `DSM`). Each other option keeps its own rules
//! (the SDPA backward operation with ragged batches has no engine with or
//! without a softcap).

use super::sdpa::SdpaConfig;
use crate::error::{Error, Result};
use crate::graph::backend::{Descriptor, attr, kind};
use crate::graph::graph::Graph;
use crate::graph::tensor::DType;
use crate::sys::cudnn as sys;

/// The first cuDNN whose SDPA operation takes a softcap (its score-modifier
/// subgraph; NVIDIA's frontend: "requires cuDNN 9.21.0 or above").
pub const SOFTCAP_NATIVE: (u32, u32, u32) = (9, 21, 0);

fn fmt_version(v: (u32, u32, u32)) -> String {
    format!("{}.{}.{}", v.0, v.1, v.2)
}

impl SdpaConfig {
    /// With a logit softcap: the scaled scores `s` become `softcap *
    /// tanh(s / softcap)` before any mask (see [`softcap`](Self::softcap)
    /// the field, and the combinations in this module's docs).
    pub fn softcap(mut self, softcap: f64) -> Self {
        self.softcap = Some(softcap);
        self
    }

    /// The value check of the softcap (part of [`validate`](Self::validate)):
    /// finite and > 0, also once rounded to the f32 the graph carries.
    pub(crate) fn validate_softcap(&self) -> Result<()> {
        let Some(c) = self.softcap else {
            return Ok(());
        };
        let f = c as f32;
        if !(c.is_finite() && c > 0.0 && f.is_finite() && f.is_normal()) {
            return Err(Error::invalid(
                "SdpaConfig.softcap",
                "must be finite and > 0 (a normal f32: the graph's by-value scalar)",
                c,
            ));
        }
        Ok(())
    }

    /// The softcap's rules for cuDNN's SDPA operation (part of the native
    /// checks): its score-modifier subgraph, forward and backward, from
    /// [`SOFTCAP_NATIVE`].
    pub(crate) fn check_native_softcap(&self, v: (u32, u32, u32), backward: bool) -> Result<()> {
        if self.softcap.is_none() || v >= SOFTCAP_NATIVE {
            return Ok(());
        }
        Err(Error::Unsupported {
            what: format!(
                "SdpaConfig option `softcap` with the loaded cuDNN {} (cuDNN's SDPA operation {}: its score-modifier subgraph)",
                fmt_version(v),
                if backward { "backward" } else { "forward" }
            ),
            needs: Some(format!("cuDNN >= {}", fmt_version(SOFTCAP_NATIVE))),
        })
    }
}

impl SdpaConfig {
    /// The softcap's per-architecture limit this config breaks, if any:
    /// the composite backward has no engine on sm_8x and sm_12x (cuDNN's
    /// reason: its fused backward takes no backward activation, the
    /// softcap's `TANH_BWD`, on Ampere and sm_12x; cuDNN 9.28's heuristics
    /// offer none on the A100 and L4 presets, where the same backward
    /// without a softcap plans); the SDPA backward operation
    /// ([`SdpaImpl::Native`](super::sdpa::SdpaImpl::Native)) plans there.
    pub(crate) fn softcap_arch_limit(
        &self,
        backward: bool,
        device_ver: i64,
    ) -> Option<&'static str> {
        let major = device_ver / 100;
        let composite_bwd = self.softcap.is_some()
            && backward
            && self.implementation != super::sdpa::SdpaImpl::Native;
        if composite_bwd && (major < 9 || major == 12) {
            return Some(
                "a GPU of compute capability 9.x or 10.x for the softcap backward as the composite (cuDNN's fused backward takes no backward activation, the softcap's TANH_BWD, on sm_8x and sm_12x; SdpaImpl::Native builds the SDPA backward operation, which takes the softcap from cuDNN 9.21)",
            );
        }
        // Measured on cuDNN 9.28 for the B200: the softcap's backward or
        // dBias alone plans, the two together offer no engine.
        (composite_bwd && major == 10 && self.bias.is_some_and(|b| b.dbias)).then_some(
            "a GPU of compute capability 9.x for the softcap backward with dBias as the composite (cuDNN 9.28 offers no engine for the softcap's TANH_BWD with the dBias reduction on sm_10x; either alone plans)",
        )
    }
}

/// The subgraph's ops and their pointwise descriptors (kept alive with them).
type SubgraphOps = (
    Vec<Descriptor<kind::PointwiseOp>>,
    Vec<Descriptor<kind::Pointwise>>,
);

/// The graph tensors of the SDPA operation's softcap subgraph (by index):
/// the scores in, the cap scalar, `s / cap`, `tanh(s / cap)` and the
/// capped scores out.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NativeSoftcap {
    pub(crate) scores: usize,
    pub(crate) cap: usize,
    pub(crate) div: usize,
    pub(crate) tanh: usize,
    pub(crate) out: usize,
}

impl NativeSoftcap {
    pub(crate) fn inputs(&self, v: &mut Vec<(&'static str, usize, bool)>) {
        v.push(("softcap_scores", self.scores, false));
        v.push(("softcap", self.cap, false));
        v.push(("softcap_div", self.div, false));
        v.push(("softcap_tanh", self.tanh, false));
        v.push(("softcap_out", self.out, false));
    }

    /// The subgraph's three pointwise ops (`DIV`, `TANH_FWD`, `MUL`), in
    /// order, and their pointwise descriptors (to keep alive).
    pub(crate) fn ops(&self, t: &[Descriptor<kind::Tensor>]) -> Result<SubgraphOps> {
        type M = sys::cudnnPointwiseMode_t;
        let mut ops = Vec::with_capacity(3);
        let mut pws = Vec::with_capacity(3);
        for (mode, x, b, y) in [
            (
                M::CUDNN_POINTWISE_DIV,
                self.scores,
                Some(self.cap),
                self.div,
            ),
            (M::CUDNN_POINTWISE_TANH_FWD, self.div, None, self.tanh),
            (M::CUDNN_POINTWISE_MUL, self.tanh, Some(self.cap), self.out),
        ] {
            let mut p = Descriptor::<kind::Pointwise>::new()?;
            p.set(attr::POINTWISE_MODE, &[mode])?;
            p.set(attr::POINTWISE_MATH_PREC, &[DType::F32.raw()])?;
            p.finalize()?;
            let mut d = Descriptor::<kind::PointwiseOp>::new()?;
            d.set_descriptors(attr::OPERATION_POINTWISE_PW_DESCRIPTOR, &[&p])?;
            d.set_descriptors(attr::OPERATION_POINTWISE_XDESC, &[&t[x]])?;
            if let Some(b) = b {
                d.set_descriptors(attr::OPERATION_POINTWISE_BDESC, &[&t[b]])?;
            }
            d.set_descriptors(attr::OPERATION_POINTWISE_YDESC, &[&t[y]])?;
            d.finalize()
                .map_err(|e| e.with_context("the softcap (score-modifier subgraph)"))?;
            ops.push(d);
            pws.push(p);
        }
        Ok((ops, pws))
    }
}

impl Graph {
    /// The softcap's by-value f32 scalar (for the composite), made after
    /// every other side input so other graphs' UIDs stay as they were.
    pub(crate) fn sdpa_softcap_scalar(&mut self, cfg: &SdpaConfig) -> Result<Option<usize>> {
        match cfg.softcap {
            Some(c) => {
                let t = self.scalar(c, DType::F32, 4)?;
                Ok(Some(self.index(t)?))
            }
            None => Ok(None),
        }
    }

    /// The tensors of the SDPA operation's softcap subgraph (all f32 and
    /// virtual but the cap scalar), made as the frontend makes them. With a
    /// band mask, its output is the band's input `band_scores` (the mask
    /// ops follow the softcap in the one subgraph).
    pub(crate) fn sdpa_softcap_native(
        &mut self,
        cfg: &SdpaConfig,
        band_scores: Option<usize>,
    ) -> Result<Option<NativeSoftcap>> {
        let Some(cap) = self.sdpa_softcap_scalar(cfg)? else {
            return Ok(None);
        };
        let spec = cfg.score_spec()?;
        let next = |g: &mut Graph, name: &str| -> Result<usize> {
            let t = g.intermediate(name, spec.clone())?;
            g.index(t)
        };
        let scores = next(self, "sdpa_softcap_scores")?;
        let div = next(self, "sdpa_softcap_div")?;
        let tanh = next(self, "sdpa_softcap_tanh")?;
        let out = match band_scores {
            Some(s) => s,
            None => next(self, "sdpa_softcap_out")?,
        };
        Ok(Some(NativeSoftcap {
            scores,
            cap,
            div,
            tanh,
            out,
        }))
    }
}
