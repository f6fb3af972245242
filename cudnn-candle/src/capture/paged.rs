//! A paged-KV decode step inside a capture (vLLM / mistral.rs block
//! tables): the table and the lengths are given on the host, checked as
//! the eager call checks them, and live in device buffers the captured
//! step owns; [`CapturedStep::update_block_table`](super::CapturedStep::update_block_table)
//! checks new ones (every entry in `0..num_blocks`, every length at most
//! the keys a table row covers) and the next launch writes them, so the
//! graph never reads a table the crate did not check.

use candle_core::{DType as CDType, Tensor};
use cudnn::Error;

use super::kvcache::LensSlot;
use super::{admit, no_copy, refusal, with_active};
use crate::attn::q_ready;
use crate::device::to_candle;
use crate::params::{self, Arg, AttnParams};
use crate::side::{ready_params, sink_decode_pad};

/// An argument's shape, owned (to check a later table against it).
#[derive(Debug, Clone)]
struct OwnedArg {
    name: &'static str,
    dims: Vec<usize>,
    strides: Vec<usize>,
    dtype: CDType,
}

impl OwnedArg {
    fn of(a: &Arg<'_>, name: &'static str) -> Self {
        OwnedArg {
            name,
            dims: a.dims.to_vec(),
            strides: a.strides.to_vec(),
            dtype: a.dtype,
        }
    }

    fn arg(&self) -> Arg<'_> {
        Arg {
            name: self.name,
            dims: &self.dims,
            strides: &self.strides,
            dtype: self.dtype,
        }
    }
}

/// What re-checks a paged call's new table and lengths: its q, k, v
/// shapes, the table's dims, the parameters (and the config they give,
/// which a new table must not change).
#[derive(Debug, Clone)]
pub(crate) struct PagedCheck {
    args: [OwnedArg; 3],
    table_dims: Vec<usize>,
    params: AttnParams,
    cfg: cudnn::graph::SdpaConfig,
}

impl PagedCheck {
    pub(crate) fn new(
        [q, k, v]: [&Arg<'_>; 3],
        table_dims: &[usize],
        params: &AttnParams,
        cfg: &cudnn::graph::SdpaConfig,
    ) -> Self {
        PagedCheck {
            args: [
                OwnedArg::of(q, "q"),
                OwnedArg::of(k, "k_cache"),
                OwnedArg::of(v, "v_cache"),
            ],
            table_dims: table_dims.to_vec(),
            params: params.clone(),
            cfg: cfg.clone(),
        }
    }

    /// `params::paged` on the call's shapes with `table` and `lens`: the
    /// checked table and key lengths.
    ///
    /// # Errors
    /// Its refusals (typed, naming `block_table[b][i]` / `cache_seqlens[b]`);
    /// a config other than the captured one.
    pub(crate) fn check(&self, table: &[i32], lens: &[u32]) -> cudnn::Result<(Vec<i32>, Vec<i32>)> {
        let t: Vec<i64> = table.iter().map(|&e| i64::from(e)).collect();
        let l: Vec<i64> = lens.iter().map(|&e| i64::from(e)).collect();
        let [q, k, v] = &self.args;
        let p = params::paged(
            &q.arg(),
            &k.arg(),
            &v.arg(),
            (&self.table_dims, &t),
            &l,
            &self.params,
        )?;
        if p.cfg != self.cfg {
            return Err(Error::invalid(
                "block_table / cache_seqlens",
                "must keep the captured call's attention config",
                "another config",
            ));
        }
        Ok((p.table, p.lens_kv))
    }
}

/// FlashAttention's `flash_attn_with_kvcache` with a `block_table` (as
/// [`crate::flash_attn_paged`]) inside a [`capture`](super::capture): the
/// table (`batch x max_blocks_per_seq`, row-major, i32 as FlashAttention's)
/// and `cache_seqlens` given on the host and checked; returns the output
/// (each launch rewrites it) and the [`LensSlot`] whose table and lengths
/// [`update_block_table`](super::CapturedStep::update_block_table) changes
/// between launches.
///
/// # Errors
/// No capture open on this thread (use [`crate::flash_attn_paged`]
/// outside one); as [`crate::flash_attn_paged`]; a one-row call with sinks,
/// an input that would be copied (typed `CaptureUnsafe`).
pub fn flash_attn_paged(
    q: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    block_table: &[i32],
    max_blocks_per_seq: usize,
    cache_seqlens: &[u32],
    params: &AttnParams,
) -> candle_core::Result<(Tensor, LensSlot)> {
    let Some(admit) = admit("flash_attn_paged")? else {
        return Err(to_candle(Error::invalid(
            "cudnn_candle::capture::flash_attn_paged",
            "must be called inside cudnn_candle::capture (outside: cudnn_candle::flash_attn_paged)",
            "no capture open on this thread",
        )));
    };
    let admit = Some(admit);
    let max_kv = match k_cache.dims() {
        [_, bs, _, _] => max_blocks_per_seq.saturating_mul(*bs),
        _ => usize::MAX,
    };
    if sink_decode_pad(q, max_kv, params)?.is_some() {
        return Err(to_candle(refusal(
            "flash_attn_paged (sinks, one query)",
            "a one-row call with sinks runs on a two-row copy of q made now",
        )));
    }
    if let [b, ..] = q.dims() {
        crate::side::slope_batch(params, *b)?;
    }
    let p = ready_params(params)?;
    super::no_side_copy(&admit, params, &p)?;
    let side: Vec<Tensor> = [&p.alibi_slopes, &p.sinks]
        .into_iter()
        .flatten()
        .cloned()
        .collect();
    let batch = q.dims().first().copied().unwrap_or(0);
    let op = crate::paged::PagedAttn::new(
        p,
        vec![batch, max_blocks_per_seq],
        block_table.iter().map(|&e| i64::from(e)).collect(),
        cache_seqlens.iter().map(|&e| i64::from(e)).collect(),
    );
    let qr = q_ready(q)?;
    // The caches as they are (the eager call copies a non-contiguous one).
    for (name, t, r) in [
        ("q", q, &qr),
        ("k_cache", k_cache, k_cache),
        ("v_cache", v_cache, v_cache),
    ] {
        no_copy(&admit, name, t, r)?;
    }
    let o = qr.apply_op3_no_bwd(k_cache, v_cache, &op)?;
    let slot = with_active(|a| {
        a.last_slot
            .take()
            .map(|index| LensSlot { step: a.id, index })
    })
    .flatten()
    .ok_or_else(|| to_candle(refusal("flash_attn_paged", "the call recorded no table")))?;
    if let Some(a) = admit {
        a.keep([&qr, k_cache, v_cache, &o].into_iter().chain(&side));
    }
    Ok((o, slot))
}
