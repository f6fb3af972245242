//! cuDNN's SDPA operation descriptors (`SDPA_FWD`, `SDPA_BWD`) for the
//! attention ops the graph builder adds when [`SdpaImpl::Native`](super::sdpa::SdpaImpl::Native)
//! is resolved; the causal mask is a diagonal-band-mask subgraph.

use super::{Built, OpNode};
use crate::error::Result;
use crate::graph::backend::{Descriptor, attr, kind};
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
    /// Score in, score out, fill value of the causal mask subgraph.
    pub(crate) causal: Option<(usize, usize, usize)>,
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

    fn timing_fills(&self) -> Vec<(usize, i32)> {
        match self.seq {
            Some((a, b)) => vec![(a, self.lens.0), (b, self.lens.1)],
            None => Vec::new(),
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
pub(crate) struct SdpaFwdOp {
    pub(crate) c: Common,
    pub(crate) o: usize,
    pub(crate) stats: Option<usize>,
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
        v
    }
    fn signature(&self) -> String {
        format!("{} training={}", self.c.signature(), self.stats.is_some())
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
pub(crate) struct SdpaBwdOp {
    pub(crate) c: Common,
    pub(crate) o: usize,
    pub(crate) d_o: usize,
    pub(crate) stats: usize,
    pub(crate) dq: usize,
    pub(crate) dk: usize,
    pub(crate) dv: usize,
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
        v
    }
    fn signature(&self) -> String {
        self.c.signature()
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
