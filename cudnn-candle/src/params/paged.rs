//! The checks of a paged-KV call (FlashAttention's `flash_attn_with_kvcache`
//! with a `block_table`, as vLLM and mistral.rs lay caches out): pure
//! functions of shapes, strides and the host copies of the block table and
//! the lengths. The block table's values are addresses for the GPU (cuDNN
//! reads K and V at the pages it names, unchecked): every entry is checked
//! here, the entries past a sequence's length included (cuDNN's kernels
//! load keys by tiles that may reach past the length).

use cudnn::graph::SdpaConfig;
use cudnn::{Error, Result};

use super::{Arg, AttnParams, apply, attn_dtype, mask, rank, same, to_i64};

/// A checked paged-KV call.
#[derive(Clone, Debug, PartialEq)]
pub struct Paged {
    /// The attention: `seq_kv = max_blocks_per_seq * block_size`, padding
    /// on, the paged cache's geometry (`num_blocks`, `block_size`).
    pub cfg: SdpaConfig,
    /// q's strides as `[B, H, S, D]`.
    pub q_strides: [i64; 4],
    /// The K / V containers' strides as `[num_blocks, H_kv, block_size, D]`
    /// (packed: vLLM's `(num_blocks, block_size, kv_heads, head_dim)`).
    pub kv_strides: [[i64; 4]; 2],
    /// `seq_q` for every sequence.
    pub lens_q: Vec<i32>,
    /// The valid keys of each sequence (`cache_seqlens`).
    pub lens_kv: Vec<i32>,
    /// The block table, `batch x max_blocks_per_seq` row-major, every entry
    /// in `0..num_blocks`.
    pub table: Vec<i32>,
}

/// Check a paged call: `q` `(b, s_q, h, d)` (head dim contiguous),
/// `k_cache` `(num_blocks, block_size, h_kv, d)` and `v_cache`
/// `(num_blocks, block_size, h_kv, d_v)` contiguous, `block_table` of
/// `table_dims` `(b, max_blocks_per_seq)` (its values row-major), one
/// `cache_seqlens` entry per sequence. The causal diagonal is bottom-right
/// per sequence (query `i` at key `i + len - s_q`).
///
/// # Errors
/// A rank, dim, dtype or stride that does not fit; a block size that is
/// not a power of two (cuDNN plans paged attention only for those); a
/// table entry outside `0..num_blocks` or a length outside `0..=
/// max_blocks_per_seq * block_size` (typed, naming the entry); the mask
/// and score options' rules ([`super::dense`]'s).
pub fn paged(
    q: &Arg<'_>,
    k: &Arg<'_>,
    v: &Arg<'_>,
    (table_dims, table): (&[usize], &[i64]),
    cache_seqlens: &[i64],
    p: &AttnParams,
) -> Result<Paged> {
    rank(q, 4, "(batch, seq, heads, head_dim)")?;
    for a in [k, v] {
        rank(a, 4, "(num_blocks, block_size, kv_heads, head_dim)")?;
        let [_, bs, hk, d] = [a.dims[0], a.dims[1], a.dims[2], a.dims[3]];
        let want = [bs * hk * d, hk * d, d, 1];
        if a.strides != want {
            return Err(Error::invalid(
                format!("{} strides", a.name),
                "must be contiguous (num_blocks, block_size, kv_heads, head_dim)",
                format!("{:?}", a.strides),
            ));
        }
    }
    let dt = attn_dtype("q", q.dtype)?;
    for a in [k, v] {
        if a.dtype != q.dtype {
            return Err(Error::mismatch(
                format!("{} dtype (q's)", a.name),
                format!("{:?}", q.dtype),
                format!("{:?}", a.dtype),
            ));
        }
    }
    let [b, sq, h, d] = [q.dims[0], q.dims[1], q.dims[2], q.dims[3]];
    let [nb, bs, hkv] = [k.dims[0], k.dims[1], k.dims[2]];
    same("v_cache num_blocks (k_cache's)", nb, v.dims[0])?;
    same("v_cache block_size (k_cache's)", bs, v.dims[1])?;
    same("v_cache kv_heads (k_cache's)", hkv, v.dims[2])?;
    same("k_cache head_dim (q's)", d, k.dims[3])?;
    if h % hkv != 0 {
        return Err(Error::invalid(
            "k_cache kv_heads",
            format!("must divide q's heads {h} (grouped-query attention)"),
            hkv,
        ));
    }
    if !bs.is_power_of_two() {
        return Err(Error::invalid(
            "k_cache block_size (dim 1)",
            "must be a power of two (cuDNN plans paged attention only for those, measured on cuDNN 9.28.1)",
            bs,
        ));
    }
    if table_dims.len() != 2 || table_dims[0] != b || table_dims[1] == 0 {
        return Err(Error::invalid(
            "block_table shape",
            format!("must be (batch, max_blocks_per_seq) = ({b}, >= 1)"),
            format!("{table_dims:?}"),
        ));
    }
    let per_seq = table_dims[1];
    let cells = b
        .checked_mul(per_seq)
        .ok_or_else(|| Error::invalid("block_table shape", "must fit usize", per_seq))?;
    same(
        "block_table values (batch x max_blocks_per_seq)",
        cells,
        table.len(),
    )?;
    // The key extent the tables cover: cuDNN's lengths are i32.
    let seq_kv = per_seq
        .checked_mul(bs)
        .filter(|&s| s <= i32::MAX as usize)
        .ok_or_else(|| {
            Error::invalid(
                "block_table max_blocks_per_seq x block_size",
                format!("must be at most {} (cuDNN's key lengths are i32)", i32::MAX),
                format!("{per_seq} x {bs}"),
            )
        })?;
    let nb_i =
        i64::try_from(nb).map_err(|_| Error::invalid("k_cache num_blocks", "must fit i64", nb))?;
    let mut checked = Vec::with_capacity(cells);
    for (i, &e) in table.iter().enumerate() {
        if !(0..nb_i).contains(&e) {
            return Err(Error::invalid(
                format!("block_table[{}][{}]", i / per_seq, i % per_seq),
                format!(
                    "must be a block of the cache, in 0..{nb} (every entry, those past the sequence's length included: cuDNN loads keys by tiles; pad rows with a valid block, not -1)"
                ),
                e,
            ));
        }
        // In 0..nb_i, and nb fits the container's i64 dims: fits i32 when
        // the container passes the graph's checks; checked anyway.
        checked.push(
            i32::try_from(e)
                .map_err(|_| Error::invalid(format!("block_table[{i}]"), "must fit i32", e))?,
        );
    }
    if cache_seqlens.len() != b {
        return Err(Error::mismatch(
            "cache_seqlens length (q's batch)",
            b,
            cache_seqlens.len(),
        ));
    }
    let mut lens_kv = Vec::with_capacity(b);
    for (i, &l) in cache_seqlens.iter().enumerate() {
        if l < 0 || l as u64 > seq_kv as u64 {
            return Err(Error::invalid(
                format!("cache_seqlens[{i}]"),
                format!(
                    "must be in 0..={seq_kv} (the keys block_table's row covers: max_blocks_per_seq {per_seq} x block_size {bs})"
                ),
                l,
            ));
        }
        lens_kv.push(l as i32);
    }
    let lq = i32::try_from(sq).map_err(|_| Error::invalid("q seq", "must fit i32", sq))?;
    let mut m = mask(p, sq, seq_kv, true)?;
    super::alibi_top_left(p, &mut m, &vec![lq; b], &lens_kv);
    let mut cfg = SdpaConfig::new(
        to_i64("q batch", b)?,
        to_i64("q heads", h)?,
        to_i64("q seq", sq)?,
        to_i64("q head_dim", d)?,
        dt,
    )
    .kv_len(to_i64(
        "block_table max_blocks_per_seq x block_size",
        seq_kv,
    )?)
    .gqa(to_i64("k_cache kv_heads", hkv)?);
    cfg.head_dim_v = to_i64("v_cache head_dim", v.dims[3])?;
    let cfg = apply(cfg, p, m)?
        .padding(true)
        .diagonal(m.diagonal)
        .paged(to_i64("k_cache block_size", bs)?, nb_i);
    let st = |a: &Arg<'_>| -> Result<[i64; 4]> {
        Ok([
            to_i64(a.name, a.strides[0])?,
            to_i64(a.name, a.strides[2])?,
            to_i64(a.name, a.strides[1])?,
            to_i64(a.name, a.strides[3])?,
        ])
    };
    super::causal_rows_see_keys(&m, &vec![lq; b], &lens_kv, |i| {
        format!("cache_seqlens[{i}]")
    })?;
    Ok(Paged {
        cfg,
        q_strides: st(q)?,
        kv_strides: [st(k)?, st(v)?],
        lens_q: vec![lq; b],
        lens_kv,
        table: checked,
    })
}
