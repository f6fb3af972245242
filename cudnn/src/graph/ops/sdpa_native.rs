//! cuDNN's SDPA operation descriptors (`SDPA_FWD`, `SDPA_BWD`) for the
//! attention ops the graph builder adds when [`SdpaImpl::Native`](super::sdpa::SdpaImpl::Native)
//! is resolved; the causal mask and the sliding window are a subgraph of
//! diagonal band masks, built as NVIDIA's frontend builds them (a right
//! bound keeping `row + shift >= col`, a left bound keeping
//! `col + window - shift > row`, `shift = len_kv - len_q` bottom-right).

use super::sdpa::{SdpaConfig, loaded_cudnn};
use super::sdpa_bias_build::NativeBias;
use super::sdpa_softcap::NativeSoftcap;
use super::sdpa_softmax::SoftmaxIdx;
use super::{Built, OpNode};
use crate::error::Result;
use crate::graph::backend::{AnyOperation, Descriptor, attr, kind};
use crate::graph::tensor::DType;
use crate::sys::cudnn as sys;

/// Tensor indices shared by the forward and backward ops.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Common {
    pub(crate) q: usize,
    pub(crate) k: usize,
    pub(crate) v: usize,
    pub(crate) scale: usize,
    /// The sequence-length inputs (padding).
    pub(crate) seq: Option<(usize, usize)>,
    /// The full `(seq_q, seq_kv)`.
    pub(crate) lens: (i32, i32),
    pub(crate) dropout: Option<(usize, usize, f64)>,
    /// The mask subgraph (a causal mask, a sliding window or both).
    pub(crate) band: Option<Band>,
    /// The page tables of K and V (a paged cache; forward only).
    pub(crate) paged: Option<(usize, usize)>,
    /// The softcap subgraph's tensors (the first score modifier).
    pub(crate) softcap: Option<NativeSoftcap>,
    /// The bias / ALiBi score ops (after the softcap, before the band
    /// masks) and dBias.
    pub(crate) bias: Option<NativeBias>,
}

/// `(len_q, len_kv)` tensors aligning a band bottom-right.
type Lens = Option<(usize, usize)>;

/// The tensors of the diagonal-band mask subgraph.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Band {
    /// The scores in (the subgraph's input).
    pub(crate) scores: usize,
    /// The right bound (the causal mask): its output, its fill value
    /// (-inf), and the `(len_q, len_kv)` tensors that align it bottom-right.
    pub(crate) right: Option<(usize, usize, Lens)>,
    /// The left bound (the window): its output, its fill value, the bound
    /// scalar, and the lengths (bottom-right with padding).
    pub(crate) left: Option<(usize, usize, usize, Lens)>,
}

impl Band {
    fn inputs(&self, v: &mut Vec<(&'static str, usize, bool)>) {
        v.push(("scores", self.scores, false));
        if let Some((out, fill, lens)) = self.right {
            v.push(("masked_scores", out, false));
            v.push(("mask_fill", fill, false));
            if let Some((a, b)) = lens {
                v.push(("band_len_q", a, false));
                v.push(("band_len_kv", b, false));
            }
        }
        if let Some((out, fill, bound, lens)) = self.left {
            v.push(("window_scores", out, false));
            v.push(("window_fill", fill, false));
            v.push(("window_bound", bound, false));
            if let Some((a, b)) = lens {
                v.push(("band_len_q", a, false));
                v.push(("band_len_kv", b, false));
            }
        }
    }
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
        if let Some(b) = &self.band {
            b.inputs(v);
        }
        if let Some((a, b)) = self.paged {
            v.push(("page_table_k", a, false));
            v.push(("page_table_v", b, false));
        }
        if let Some(s) = &self.softcap {
            s.inputs(v);
        }
        if let Some(b) = &self.bias {
            b.inputs(v);
        }
    }

    fn timing_fills(&self) -> Vec<(usize, i32)> {
        match self.seq {
            Some((a, b)) => vec![(a, self.lens.0), (b, self.lens.1)],
            None => Vec::new(),
        }
    }

    fn signature(&self) -> String {
        format!(
            "padding={} dropout={:?} causal={} bottom_right={} window={} paged={} softcap={}",
            self.seq.is_some(),
            self.dropout.map(|d| d.2),
            self.band.is_some_and(|b| b.right.is_some()),
            self.band
                .is_some_and(|b| b.right.is_some_and(|r| r.2.is_some())
                    || b.left.is_some_and(|l| l.3.is_some())),
            self.band.is_some_and(|b| b.left.is_some()),
            self.paged.is_some(),
            self.softcap.is_some(),
        ) + &self.bias.map(|b| b.signature()).unwrap_or_default()
    }

    /// The mask subgraph: a right-bound diagonal band mask (the causal
    /// mask) and / or a left-bound one (the window), chained. Returns
    /// `(subgraph, input uid, output uid)`; the mask ops are kept in `built`.
    fn causal_subgraph(
        &self,
        t: &[Descriptor<kind::Tensor>],
        built: &mut Built,
    ) -> Result<Option<(Descriptor<kind::OperationGraph>, i64, i64)>> {
        // The softcap first (as the frontend applies its score modifier),
        // then the bias / ALiBi ops, then the band masks.
        let (sc_ops, sc_pws) = match &self.softcap {
            Some(s) => s.ops(t)?,
            None => (Vec::new(), Vec::new()),
        };
        let first = self
            .softcap
            .map(|s| s.scores)
            .or(self.bias.map(|b| b.scores))
            .or(self.band.map(|b| b.scores));
        let Some(first) = first else {
            return Ok(None);
        };
        let mut last = self.softcap.map_or(first, |s| s.out);
        let mut pre: Vec<Box<dyn AnyOperation + Send>> = Vec::new();
        let mut pre_aux: Vec<Box<dyn std::any::Any + Send>> = Vec::new();
        if let Some(b) = self.bias {
            last = b.build(last, t, &mut pre, &mut pre_aux)?;
        }
        let band = self.band.unwrap_or(Band {
            scores: first,
            right: None,
            left: None,
        });
        let mut ops = Vec::new();
        if let Some((out, fill, lens)) = band.right {
            let mut m = Descriptor::<kind::DiagonalBandMaskOp>::new()?;
            m.set_descriptors(attr::OPERATION_DIAGONAL_BAND_MASK_XDESC, &[&t[last]])?;
            m.set_descriptors(attr::OPERATION_DIAGONAL_BAND_MASK_BDESC, &[&t[fill]])?;
            if let Some((q, kv)) = lens {
                m.set_descriptors(attr::OPERATION_DIAGONAL_BAND_MASK_SEQ_LEN_QDESC, &[&t[q]])?;
                m.set_descriptors(attr::OPERATION_DIAGONAL_BAND_MASK_SEQ_LEN_KVDESC, &[&t[kv]])?;
            }
            m.set_descriptors(attr::OPERATION_DIAGONAL_BAND_MASK_YDESC, &[&t[out]])?;
            m.set(
                attr::OPERATION_DIAGONAL_BAND_MASK_COMPARISON_MODE,
                &[sys::cudnnPointwiseMode_t::CUDNN_POINTWISE_CMP_GE],
            )?;
            m.finalize()
                .map_err(|e| e.with_context("the causal mask (diagonal band mask, right bound)"))?;
            ops.push(m);
            last = out;
        }
        if let Some((out, fill, bound, lens)) = band.left {
            let mut m = Descriptor::<kind::DiagonalBandMaskOp>::new()?;
            m.set_descriptors(attr::OPERATION_DIAGONAL_BAND_MASK_XDESC, &[&t[last]])?;
            m.set_descriptors(attr::OPERATION_DIAGONAL_BAND_MASK_BDESC, &[&t[fill]])?;
            if let Some((q, kv)) = lens {
                m.set_descriptors(attr::OPERATION_DIAGONAL_BAND_MASK_SEQ_LEN_QDESC, &[&t[q]])?;
                m.set_descriptors(attr::OPERATION_DIAGONAL_BAND_MASK_SEQ_LEN_KVDESC, &[&t[kv]])?;
            }
            m.set_descriptors(
                attr::OPERATION_DIAGONAL_BAND_MASK_LEFT_BOUND_DESC,
                &[&t[bound]],
            )?;
            m.set_descriptors(attr::OPERATION_DIAGONAL_BAND_MASK_YDESC, &[&t[out]])?;
            m.set(
                attr::OPERATION_DIAGONAL_BAND_MASK_COMPARISON_MODE,
                &[sys::cudnnPointwiseMode_t::CUDNN_POINTWISE_CMP_GT],
            )?;
            m.finalize().map_err(|e| {
                e.with_context("the sliding window (diagonal band mask, left bound)")
            })?;
            ops.push(m);
            last = out;
        }
        let mut sg = Descriptor::<kind::OperationGraph>::new()?;
        let refs: Vec<&dyn AnyOperation> = (sc_ops.iter().map(|m| m as &dyn AnyOperation))
            .chain(pre.iter().map(|p| p.as_ref() as &dyn AnyOperation))
            .chain(ops.iter().map(|m| m as &dyn AnyOperation))
            .collect();
        sg.set_operations(attr::OPERATIONGRAPH_OPS, &refs)?;
        sg.finalize()
            .map_err(|e| e.with_context("the attention mask subgraph"))?;
        let uid_in = t[first].get_one(attr::TENSOR_UNIQUE_ID)?;
        let uid_out = t[last].get_one(attr::TENSOR_UNIQUE_ID)?;
        for m in ops {
            built.aux.push(Box::new(m));
        }
        for m in sc_ops {
            built.aux.push(Box::new(m));
        }
        for p in sc_pws {
            built.aux.push(Box::new(p));
        }
        built.aux.push(Box::new(pre));
        built.aux.extend(pre_aux);
        Ok(Some((sg, uid_in, uid_out)))
    }
}

#[derive(Debug)]
pub(crate) struct SdpaFwdOp {
    pub(crate) c: Common,
    pub(crate) o: usize,
    pub(crate) stats: Option<usize>,
    /// Max / sum_exp outputs and the sink (issue 24).
    pub(crate) sm: SoftmaxIdx,
    /// The config, for the per-architecture limits.
    pub(crate) cfg: SdpaConfig,
}

impl OpNode for SdpaFwdOp {
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
        self.sm.push_tensors(&mut v);
        v
    }
    fn signature(&self) -> String {
        format!(
            "{} training={}{}",
            self.c.signature(),
            self.stats.is_some(),
            self.sm.signature()
        )
    }
    fn check_target(&self, device_ver: i64) -> Result<()> {
        self.cfg
            .check_target_for(false, device_ver, loaded_cudnn()?)
    }
    fn honours_compute_type(&self) -> bool {
        false
    }
    fn timing_fills(&self) -> Vec<(usize, i32)> {
        self.c.timing_fills()
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
        if !self.sm.set_native_forward(&mut d, t, self.stats, built)?
            && let Some(s) = self.stats
        {
            d.set_descriptors(attr::OPERATION_SDPA_FWD_STATSDESC, &[&t[s]])?;
        }
        if let Some((a, b)) = c.seq {
            d.set_descriptors(attr::OPERATION_SDPA_FWD_SEQ_LEN_QDESC, &[&t[a]])?;
            d.set_descriptors(attr::OPERATION_SDPA_FWD_SEQ_LEN_KVDESC, &[&t[b]])?;
        }
        if let Some((pk, pv)) = c.paged {
            d.set_descriptors(attr::OPERATION_SDPA_FWD_PAGE_TABLE_KDESC, &[&t[pk]])?;
            d.set_descriptors(attr::OPERATION_SDPA_FWD_PAGE_TABLE_VDESC, &[&t[pv]])?;
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
pub(crate) struct SdpaBwdOp {
    pub(crate) c: Common,
    pub(crate) o: usize,
    pub(crate) d_o: usize,
    pub(crate) stats: usize,
    pub(crate) dq: usize,
    pub(crate) dk: usize,
    pub(crate) dv: usize,
    /// The sink and dSink (issue 24).
    pub(crate) sm: SoftmaxIdx,
    /// The config, for the per-architecture limits.
    pub(crate) cfg: SdpaConfig,
}

impl OpNode for SdpaBwdOp {
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
        self.sm.push_tensors(&mut v);
        v
    }
    fn signature(&self) -> String {
        format!("{}{}", self.c.signature(), self.sm.signature())
    }
    fn check_target(&self, device_ver: i64) -> Result<()> {
        self.cfg.check_target_for(true, device_ver, loaded_cudnn()?)
    }
    fn honours_compute_type(&self) -> bool {
        false
    }
    fn timing_fills(&self) -> Vec<(usize, i32)> {
        self.c.timing_fills()
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
        if let Some(db) = c.bias.and_then(|b| b.dbias) {
            d.set_descriptors(attr::OPERATION_SDPA_BWD_DBIAS_DESC, &[&t[db]])?;
        }
        self.sm.set_native_backward(&mut d, t)?;
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
