//! Paged-KV attention (decode and chunked prefill against a block-table
//! cache, as vLLM and mistral.rs lay it out), a candle `CustomOp3` over
//! `(q, k_cache, v_cache)` backed by the crate's paged SDPA. Forward only
//! (cuDNN has no paged backward: a cache serves inference).
//!
//! The block table and the lengths are read to the host (a decode step's
//! tables are small: `batch x max_blocks_per_seq` entries) and checked
//! there: cuDNN uses the table's entries as addresses without checking
//! them, so an entry outside the cache never reaches the GPU (a typed
//! error naming it instead). The checked copy is what the GPU reads.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CudaStorage, CustomOp3, DType as CDType, Layout, Shape, Tensor};
use cudnn::Error;

use crate::attn::{arg, on_cuda, q_ready, same_device, same_dtype, view};
use crate::device::{IntoCandle, to_candle};
use crate::exec::{self, Elem, Extras, Side};
use crate::params::{self, AttnParams};

/// The forward op: the host copies of the table and the lengths.
#[derive(Clone, Debug)]
pub(crate) struct PagedAttn {
    params: AttnParams,
    table_dims: Vec<usize>,
    table: Vec<i64>,
    cache_seqlens: Vec<i64>,
    /// FlashAttention's ALiBi as a per-sequence score bias `(batch, heads,
    /// seq_q, max_blocks_per_seq * block_size)` f32 (`cache_alibi`).
    bias: Option<Tensor>,
}

impl PagedAttn {
    /// The op of a paged call (`params` ready; the table row-major).
    pub(crate) fn new(
        params: AttnParams,
        table_dims: Vec<usize>,
        table: Vec<i64>,
        cache_seqlens: Vec<i64>,
    ) -> Self {
        PagedAttn {
            params,
            table_dims,
            table,
            cache_seqlens,
            bias: None,
        }
    }

    fn fwd<T: Elem>(
        &self,
        (q, ql): (&CudaStorage, &Layout),
        (k, kl): (&CudaStorage, &Layout),
        (v, vl): (&CudaStorage, &Layout),
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        same_device(q, k, "k_cache")?;
        same_device(q, v, "v_cache")?;
        same_dtype(q, k, "k_cache")?;
        same_dtype(q, v, "v_cache")?;
        let dev = &q.device;
        let mut p = params::paged(
            &arg("q", ql, q.dtype()),
            &arg("k_cache", kl, k.dtype()),
            &arg("v_cache", vl, v.dtype()),
            (&self.table_dims, &self.table),
            &self.cache_seqlens,
            &self.params,
        )
        .c()?;
        if self.bias.is_some() {
            p.cfg = crate::varlen_bias::with_varlen_bias(p.cfg);
        }
        if !params::bshd_ordered(ql.dims(), ql.stride()) {
            return Err(to_candle(Error::invalid(
                "q strides",
                "must order q as (batch, seq, heads, head_dim) (make it contiguous)",
                format!("{:?}", ql.stride()),
            )));
        }
        let (qv, kv, vv) = (
            view::<T>(q, ql, "q")?,
            view::<T>(k, kl, "k_cache")?,
            view::<T>(v, vl, "v_cache")?,
        );
        let strides = [p.q_strides, p.kv_strides[0], p.kv_strides[1]];
        let capture = if crate::capture::is_capturing() {
            // The table and lengths go to buffers the captured step owns
            // (written before each launch; new ones checked again).
            let (qa, ka, va) = (
                arg("q", ql, q.dtype()),
                arg("k_cache", kl, k.dtype()),
                arg("v_cache", vl, v.dtype()),
            );
            let check = crate::capture::PagedCheck::new(
                [&qa, &ka, &va],
                &self.table_dims,
                &self.params,
                &p.cfg,
            );
            Some(crate::capture::KvLens {
                q: p.lens_q.clone(),
                kv: p.lens_kv.clone(),
                causal: false,
                paged: Some((p.table.clone(), check)),
            })
        } else {
            None
        };
        let side = match capture {
            Some(_) => None,
            None => {
                crate::attn::bind_context(dev)?;
                Some(Side::paged(&p).c()?)
            }
        };
        let ga = self
            .params
            .alibi_slopes
            .as_ref()
            .map(|t| t.storage_and_layout());
        let gs = self.params.sinks.as_ref().map(|t| t.storage_and_layout());
        let gb = self.bias.as_ref().map(|t| t.storage_and_layout());
        let extras = Extras {
            bias: gb
                .as_ref()
                .map(|(st, l)| crate::side::f32_view(st, l, q, "alibi bias"))
                .transpose()?,
            alibi: ga
                .as_ref()
                .map(|(st, l)| crate::side::f32_view(st, l, q, "alibi_slopes"))
                .transpose()?,
            sink: gs
                .as_ref()
                .map(|(st, l)| crate::side::f32_view(st, l, q, "sinks"))
                .transpose()?,
        };
        let (o, _) = match capture {
            Some(l) => {
                crate::capture::forward(dev, &p.cfg, &strides, [&qv, &kv, &vv], Some(l), &extras)?
            }
            None => exec::forward(
                dev,
                &p.cfg,
                &strides,
                [&qv, &kv, &vv],
                side.as_ref(),
                &extras,
            )?,
        };
        let [b, sq, h] = [ql.dims()[0], ql.dims()[1], ql.dims()[2]];
        let shape = Shape::from((b, sq, h, vl.dims()[3]));
        Ok((CudaStorage::wrap_cuda_slice(o, dev.clone()), shape))
    }
}

impl CustomOp3 for PagedAttn {
    fn name(&self) -> &'static str {
        "cudnn-flash-attn-paged"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        Err(on_cuda("cudnn_candle::flash_attn_paged"))
    }

    fn cuda_fwd(
        &self,
        q: &CudaStorage,
        ql: &Layout,
        k: &CudaStorage,
        kl: &Layout,
        v: &CudaStorage,
        vl: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        match q.dtype() {
            CDType::F16 => self.fwd::<half::f16>((q, ql), (k, kl), (v, vl)),
            CDType::BF16 => self.fwd::<half::bf16>((q, ql), (k, kl), (v, vl)),
            other => Err(to_candle(Error::invalid(
                "q dtype",
                "must be f16 or bf16 (cuDNN's fused attention)",
                format!("{other:?}"),
            ))),
        }
    }
}

/// The values of an integer tensor (u32, i32 or i64) as i64, read to the host.
fn host_ints(name: &str, t: &Tensor, rank: usize) -> candle_core::Result<Vec<i64>> {
    if t.rank() != rank {
        return Err(to_candle(Error::invalid(
            format!("{name} shape"),
            format!("must be rank {rank}"),
            format!("{:?}", t.dims()),
        )));
    }
    // The dtype before `flatten_all` (a copy when `t` is strided).
    if !matches!(t.dtype(), CDType::I32 | CDType::U32 | CDType::I64) {
        return Err(to_candle(Error::invalid(
            format!("{name} dtype"),
            "must be i32 (FlashAttention's), u32 or i64",
            format!("{:?}", t.dtype()),
        )));
    }
    crate::precheck::prepared();
    let flat = t.flatten_all()?;
    match t.dtype() {
        CDType::I32 => Ok(flat.to_vec1::<i32>()?.into_iter().map(i64::from).collect()),
        CDType::U32 => Ok(flat.to_vec1::<u32>()?.into_iter().map(i64::from).collect()),
        _ => flat.to_vec1::<i64>(),
    }
}

/// Attention against a paged KV cache (FlashAttention's
/// `flash_attn_with_kvcache` with `block_table`, vLLM's and mistral.rs's
/// layout): `q` `(batch, seq_q, heads, head_dim)`; `k_cache` / `v_cache`
/// `(num_blocks, block_size, kv_heads, head_dim)`, contiguous (else copied:
/// keep caches contiguous), `block_size` a power of two; `block_table`
/// `(batch, max_blocks_per_seq)` i32 (u32 and i64 taken too), row `b`
/// listing sequence `b`'s blocks in token order; `cache_seqlens`
/// `(batch,)` i32 (u32, i64), the valid keys of each sequence, at most
/// `max_blocks_per_seq * block_size`. The causal diagonal is bottom-right
/// per sequence (query `i` at key `i + cache_seqlens[b] - seq_q`), as
/// FlashAttention's. Returns `(batch, seq_q, heads, head_dim)`; forward
/// only.
///
/// The table and the lengths are read to the host and checked (every
/// entry, those past a sequence's length included, in `0..num_blocks`:
/// pad unused entries with a valid block such as 0, not -1); the graph
/// depends on the table's width and the cache's size, not on the lengths:
/// a decode loop plans once. ALiBi slopes ([`AttnParams::alibi_slopes`])
/// as in [`flash_attn_kvcache`](crate::flash_attn_kvcache), the capacity
/// `max_blocks_per_seq * block_size`.
///
/// # Errors
/// As [`flash_attn_with`](crate::flash_attn_with); a table entry or a
/// length out of range, or, causal, shorter than `seq_q` (rows with no
/// key, where FlashAttention writes zeros) (typed, naming the entry,
/// before any GPU work); a block size that is not a power of two.
pub fn flash_attn_paged(
    q: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    block_table: &Tensor,
    cache_seqlens: &Tensor,
    params: &AttnParams,
) -> candle_core::Result<Tensor> {
    crate::capture::refuse_inside(
        "flash_attn_paged",
        "the block table and cache_seqlens would be read on the host (a synchronization)",
    )?;
    crate::precheck::attn_inputs(["q", "k_cache", "v_cache"], [q, k_cache, v_cache], params)?;
    // A sequence holds at most max_blocks_per_seq * block_size keys.
    let max_kv = match (block_table.dims(), k_cache.dims()) {
        ([_, per_seq], [_, bs, _, _]) => per_seq.saturating_mul(*bs),
        _ => usize::MAX,
    };
    if let Some((q2, p2)) = crate::side::sink_decode_pad(q, max_kv, params)? {
        return flash_attn_paged(&q2, k_cache, v_cache, block_table, cache_seqlens, &p2)?
            .narrow(1, 1, 1);
    }
    if let [b, _, _, _] = q.dims() {
        crate::side::slope_batch(params, *b)?;
    }
    let p = crate::side::ready_params_rows(params)?;
    let table = host_ints("block_table", block_table, 2)?;
    let lens = host_ints("cache_seqlens", cache_seqlens, 1)?;
    // The op's checks (the table's entries too) before a score bias is
    // built (device work).
    crate::cache_alibi::shapes_first(
        &p.0,
        [q, k_cache, v_cache],
        &lens,
        Some((block_table.dims(), &table)),
    )?;
    let (p, bias) =
        crate::cache_alibi::for_call("cudnn_candle::flash_attn_paged", q, p, &lens, max_kv)?;
    let op = PagedAttn {
        params: p,
        table_dims: block_table.dims().to_vec(),
        table,
        cache_seqlens: lens,
        bias,
    };
    q_ready(q)?.apply_op3_no_bwd(
        &crate::conv::for_cudnn(k_cache)?,
        &crate::conv::for_cudnn(v_cache)?,
        &op,
    )
}
