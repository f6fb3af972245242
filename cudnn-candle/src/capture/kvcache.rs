//! A KV-cache decode step inside a capture: the lengths are given on the
//! host ([`flash_attn_kvcache`]) and live in device buffers the captured
//! step owns; [`CapturedStep::set_cache_seqlens`](super::CapturedStep::set_cache_seqlens)
//! checks new ones and the next launch writes them, before the graph.

use std::sync::Arc;

use candle_core::{CudaDevice, DType as CDType, Tensor};
use cudarc::driver::CudaStream;

use super::rawbuf::LenBuf;
use cudnn::Error;
use cudnn::graph::SdpaConfig;

use super::{admit, no_copy, refusal, with_active};
use crate::attn::{FlashAttn, kv_len, kv_ready, q_ready};
use crate::device::to_candle;
use crate::params::{AttnParams, kvcache_lens};
use crate::side::{ready_params, sink_decode_pad};

/// The checked lengths of a KV-cache call inside a capture (and, paged,
/// its checked block table and what re-checks a new one).
#[derive(Debug, Clone)]
pub(crate) struct KvLens {
    pub q: Vec<i32>,
    pub kv: Vec<i32>,
    pub causal: bool,
    pub paged: Option<(Vec<i32>, super::paged::PagedCheck)>,
}

/// Which KV-cache call of a [`CapturedStep`](super::CapturedStep) a
/// length update is for (returned by [`flash_attn_kvcache`]): tagged with
/// its capture, so a slot of another step is refused, not taken for this
/// step's call of the same index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LensSlot {
    /// The capture that made it (a process-wide count).
    pub(crate) step: u64,
    /// Its call among that capture's KV-cache and paged calls.
    pub(crate) index: usize,
}

/// The lengths one captured call reads: device buffers owned here, and
/// the shape the values are checked against.
pub(crate) struct Slot {
    pub q: LenBuf,
    pub kv: LenBuf,
    /// A paged call's block table (K's and V's), checked entries.
    pub table: Option<LenBuf>,
    batch: usize,
    seq_q: usize,
    capacity: usize,
    causal: bool,
    /// A paged call's re-check of new tables and lengths.
    paged: Option<super::paged::PagedCheck>,
    /// Checked values not yet written (the next launch writes them).
    pending: Option<Pending>,
}

/// Checked lengths (and table) for the next launch.
type Pending = (Vec<i32>, Vec<i32>, Option<Vec<i32>>);

impl Slot {
    /// Buffers for `cfg`'s batch (zeroed on candle's stream, or, `raw`,
    /// for a step captured on candle's stream, [`LenBuf::Raw`]: not memory
    /// of the graph); `l` (checked by `params::kvcache`) pending for the
    /// first launch, which writes it before the graph runs.
    pub(crate) fn new(
        dev: &CudaDevice,
        cfg: &SdpaConfig,
        l: KvLens,
        raw: bool,
    ) -> candle_core::Result<Self> {
        let u = |v: i64, what: &str| {
            usize::try_from(v).map_err(|_| to_candle(Error::invalid(what, "must be >= 0", v)))
        };
        let (batch, seq_q, capacity) = (
            u(cfg.batch, "batch")?,
            u(cfg.seq_q, "seq_q")?,
            u(cfg.seq_kv, "capacity")?,
        );
        if l.q.len() != batch || l.kv.len() != batch {
            return Err(to_candle(Error::mismatch(
                "cache_seqlens length (q's batch)",
                batch,
                l.kv.len(),
            )));
        }
        let (table, paged, pending_table) = match l.paged {
            Some((t, check)) => (Some(LenBuf::new(dev, t.len(), raw)?), Some(check), Some(t)),
            None => (None, None, None),
        };
        if cfg.paged.is_some() != table.is_some() {
            return Err(to_candle(refusal(
                "attention (paged)",
                "a paged config needs its checked block table",
            )));
        }
        Ok(Slot {
            q: LenBuf::new(dev, batch, raw)?,
            kv: LenBuf::new(dev, batch, raw)?,
            table,
            batch,
            seq_q,
            capacity,
            causal: l.causal,
            paged,
            pending: Some((l.q, l.kv, pending_table)),
        })
    }

    /// A paged call: check a new table and lengths as the eager call does
    /// (`params::paged` with this call's shapes) and keep them for the
    /// next launch.
    pub(crate) fn set_paged(&mut self, table: &[i32], lens: &[u32]) -> cudnn::Result<()> {
        let Some(check) = &self.paged else {
            return Err(Error::invalid(
                "slot",
                "must be a paged call's (use set_cache_seqlens for a KV-cache call)",
                "a KV-cache call",
            ));
        };
        let (t, kv) = check.check(table, lens)?;
        if t.len() != self.table.as_ref().map_or(0, |b| b.len()) {
            return Err(Error::mismatch(
                "block_table values (batch x max_blocks_per_seq)",
                self.table.as_ref().map_or(0, |b| b.len()),
                t.len(),
            ));
        }
        let q = vec![
            i32::try_from(self.seq_q).map_err(|_| Error::invalid(
                "q seq",
                "must fit i32",
                self.seq_q
            ))?;
            self.batch
        ];
        self.pending = Some((q, kv, Some(t)));
        Ok(())
    }

    /// Check `lens` for this call (as the eager call does) and keep them
    /// for the next launch.
    pub(crate) fn set(&mut self, lens: &[u32]) -> cudnn::Result<()> {
        if self.paged.is_some() {
            return Err(Error::invalid(
                "slot",
                "must be a KV-cache call's (use update_block_table for a paged call)",
                "a paged call",
            ));
        }
        let (q, kv) = kvcache_lens(self.batch, self.seq_q, self.capacity, self.causal, lens)?;
        self.pending = Some((q, kv, None));
        Ok(())
    }

    /// Write the pending values on `cs` (candle's stream, before the
    /// launch that reads them).
    pub(crate) fn flush(&mut self, cs: &Arc<CudaStream>) -> candle_core::Result<()> {
        let Some((q, kv, t)) = self.pending.take() else {
            return Ok(());
        };
        // Lengths equal to the buffers' (checked in `set` / `new`):
        // cudarc's copy asserts it.
        let table_ok = match (&t, &self.table) {
            (Some(t), Some(b)) => t.len() == b.len(),
            (None, _) => true,
            (Some(_), None) => false,
        };
        if q.len() != self.q.len() || kv.len() != self.kv.len() || !table_ok {
            return Err(to_candle(Error::mismatch(
                "cache_seqlens length (q's batch)",
                self.kv.len(),
                kv.len(),
            )));
        }
        let err = |e| to_candle(cudnn::interop::driver_error("cuMemcpyHtoDAsync", e));
        let mut r = cs
            .memcpy_htod(&q, &mut self.q)
            .and_then(|()| cs.memcpy_htod(&kv, &mut self.kv));
        if let (Ok(()), Some(tv), Some(tb)) = (&r, &t, self.table.as_mut()) {
            r = cs.memcpy_htod(tv, tb);
        }
        let r = r.map_err(err);
        if r.is_err() {
            // Checked values either way; written again by the next launch.
            self.pending = Some((q, kv, t));
        }
        r
    }
}

/// FlashAttention's `flash_attn_with_kvcache` (as
/// [`crate::flash_attn_kvcache`]) inside a [`capture`](super::capture),
/// with the lengths given on the host (`cache_seqlens[b]` valid keys of
/// sequence `b`, checked against the capacity): returns the output, which
/// each launch rewrites, and the [`LensSlot`] whose lengths
/// [`set_cache_seqlens`](super::CapturedStep::set_cache_seqlens) changes
/// between launches (a decode loop: one more key per step). The graph
/// depends on the capacity only.
///
/// # Errors
/// No capture open on this thread (use [`crate::flash_attn_kvcache`]
/// outside one); as [`crate::flash_attn_kvcache`]; an input that would be
/// copied, a one-row call with sinks, `(batch, heads)` slopes (typed
/// `CaptureUnsafe`).
pub fn flash_attn_kvcache(
    q: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    cache_seqlens: &[u32],
    params: &AttnParams,
) -> candle_core::Result<(Tensor, LensSlot)> {
    let Some(admit) = admit("flash_attn_kvcache")? else {
        return Err(to_candle(Error::invalid(
            "cudnn_candle::capture::flash_attn_kvcache",
            "must be called inside cudnn_candle::capture (outside: cudnn_candle::flash_attn_kvcache)",
            "no capture open on this thread",
        )));
    };
    let admit = Some(admit);
    if sink_decode_pad(q, kv_len(k_cache), params)?.is_some() {
        return Err(to_candle(refusal(
            "flash_attn_kvcache (sinks, one query)",
            "a one-row call with sinks runs on a two-row copy of q made now",
        )));
    }
    if params.alibi_slopes.is_some() {
        return Err(to_candle(refusal(
            "flash_attn_kvcache (ALiBi)",
            "ALiBi in captured KV-cache calls is not in this version (eager calls take it)",
        )));
    }
    let p = ready_params(params)?;
    super::no_side_copy(&admit, params, &p)?;
    let side: Vec<Tensor> = p.sinks.iter().cloned().collect();
    if p.sinks.as_ref().is_some_and(|t| t.dtype() != CDType::F32) {
        return Err(to_candle(Error::invalid(
            "sinks",
            "must be f32",
            "another dtype",
        )));
    }
    let op = FlashAttn::kvcache(p, cache_seqlens.to_vec());
    let (qr, kr, vr) = (q_ready(q)?, kv_ready(k_cache)?, kv_ready(v_cache)?);
    for (name, t, r) in [
        ("q", q, &qr),
        ("k_cache", k_cache, &kr),
        ("v_cache", v_cache, &vr),
    ] {
        no_copy(&admit, name, t, r)?;
    }
    let o = qr.apply_op3_no_bwd(&kr, &vr, &op)?;
    let slot = with_active(|a| {
        a.last_slot
            .take()
            .map(|index| LensSlot { step: a.id, index })
    })
    .flatten()
    .ok_or_else(|| {
        to_candle(refusal(
            "flash_attn_kvcache",
            "the call recorded no lengths",
        ))
    })?;
    if let Some(a) = admit {
        a.keep([&qr, &kr, &vr, &o].into_iter().chain(&side));
    }
    Ok((o, slot))
}
