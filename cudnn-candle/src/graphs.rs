//! The attention graphs this crate runs, built from an [`SdpaConfig`] and
//! the inputs' strides (no device: they plan for a named GPU, see the
//! tests). Every tensor has a fixed name, so binding does not depend on
//! the builder's numbering.

use cudnn::Result;
use cudnn::graph::{Graph, SdpaConfig, SdpaRagged, Tensor, TensorSpec};

/// Names of the graph tensors.
pub mod names {
    /// Inputs and outputs.
    pub const Q: &str = "q";
    /// K.
    pub const K: &str = "k";
    /// V.
    pub const V: &str = "v";
    /// The attention output.
    pub const O: &str = "o";
    /// The output gradient.
    pub const DO: &str = "do";
    /// The softmax statistics (training forward, backward).
    pub const STATS: &str = "stats";
    /// Gradients.
    pub const DQ: &str = "dq";
    /// dK.
    pub const DK: &str = "dk";
    /// dV.
    pub const DV: &str = "dv";
    /// Per-sequence query lengths (padding mask).
    pub const SEQ_Q: &str = "seq_len_q";
    /// Per-sequence key lengths.
    pub const SEQ_KV: &str = "seq_len_kv";
    /// Ragged offsets of Q (and dQ).
    pub const RAGGED_Q: &str = "ragged_q";
    /// Ragged offsets of K (and dK).
    pub const RAGGED_K: &str = "ragged_k";
    /// Ragged offsets of V (and dV).
    pub const RAGGED_V: &str = "ragged_v";
    /// Ragged offsets of O (and dO).
    pub const RAGGED_O: &str = "ragged_o";
    /// The page table of K (a paged cache).
    pub const PAGE_TABLE_K: &str = "page_table_k";
    /// The page table of V (the same table as K's here).
    pub const PAGE_TABLE_V: &str = "page_table_v";
    /// The ALiBi slopes, `[1, H, 1, 1]` f32.
    pub const ALIBI: &str = "alibi_slopes";
    /// The attention sinks, `[1, H, 1, 1]` f32.
    pub const SINK: &str = "sink";
    /// An additive score bias (FlashAttention's ALiBi where cuDNN's own
    /// cannot compute it), `[1, H, S_q, S_kv]` f32.
    pub const BIAS: &str = "bias";
}

fn spec(cfg: &SdpaConfig, dims: [i64; 4], strides: [i64; 4]) -> Result<TensorSpec> {
    TensorSpec::new(cfg.dtype, &dims, &strides)
}

fn name_side(
    g: &mut Graph,
    seq: (Option<Tensor>, Option<Tensor>),
    ragged: Option<SdpaRagged>,
) -> Result<()> {
    if let Some(t) = seq.0 {
        g.rename(t, names::SEQ_Q)?;
    }
    if let Some(t) = seq.1 {
        g.rename(t, names::SEQ_KV)?;
    }
    if let Some(r) = ragged {
        g.rename(r.q, names::RAGGED_Q)?;
        g.rename(r.o, names::RAGGED_O)?;
        if let Some(t) = r.k {
            g.rename(t, names::RAGGED_K)?;
        }
        if let Some(t) = r.v {
            g.rename(t, names::RAGGED_V)?;
        }
    }
    Ok(())
}

/// The packed BSHD strides of `[B, H, S, D]`.
pub fn bshd(dims: [i64; 4]) -> [i64; 4] {
    let [_, h, s, d] = dims;
    [s * h * d, d, h * d, 1]
}

/// The dims of Q, K, V, O as `[B, H, S, D]`.
pub fn dims(cfg: &SdpaConfig) -> [[i64; 4]; 4] {
    [
        [cfg.batch, cfg.heads, cfg.seq_q, cfg.head_dim],
        [cfg.batch, cfg.kv_heads, cfg.seq_kv, cfg.head_dim],
        [cfg.batch, cfg.kv_heads, cfg.seq_kv, cfg.head_dim_v],
        [cfg.batch, cfg.heads, cfg.seq_q, cfg.head_dim_v],
    ]
}

/// The dims of K and V as the forward graph takes them: `[B, H_kv, S_kv,
/// D]`, or with a paged cache the containers `[num_blocks, H_kv,
/// block_size, D]`.
pub fn kv_dims(cfg: &SdpaConfig) -> [[i64; 4]; 2] {
    match cfg.paged {
        Some(p) => [
            [p.num_blocks, cfg.kv_heads, p.block_size, cfg.head_dim],
            [p.num_blocks, cfg.kv_heads, p.block_size, cfg.head_dim_v],
        ],
        None => {
            let [_, kd, vd, _] = dims(cfg);
            [kd, vd]
        }
    }
}

/// The forward graph: `q`, `k`, `v` with `strides` (`[B, H, S, D]`
/// order; K and V of [`kv_dims`]), output `o` (and `stats` when
/// `cfg.is_training`); the page tables, ALiBi slopes and sinks the config
/// asks for are named inputs ([`names`]).
///
/// # Errors
/// The builder's (the config's rules, the strides).
pub fn forward(cfg: &SdpaConfig, strides: &[[i64; 4]; 3]) -> Result<Graph> {
    let [qd, _, _, _] = dims(cfg);
    let [kd, vd] = kv_dims(cfg);
    let mut g = Graph::new();
    let q = g.input(names::Q, spec(cfg, qd, strides[0])?)?;
    let k = g.input(names::K, spec(cfg, kd, strides[1])?)?;
    let v = g.input(names::V, spec(cfg, vd, strides[2])?)?;
    let f = if cfg.is_training {
        let f = g.sdpa_forward_training(q, k, v, cfg)?;
        g.rename(f.stats, names::STATS)?;
        f.map_stats(|_| ())
    } else {
        g.sdpa_forward(q, k, v, cfg)?
    };
    g.rename(f.o, names::O)?;
    name_side(&mut g, (f.seq_len_q, f.seq_len_kv), f.ragged)?;
    for (t, n) in [
        (f.page_table_k, names::PAGE_TABLE_K),
        (f.page_table_v, names::PAGE_TABLE_V),
        (f.bias.alibi_slopes, names::ALIBI),
        (f.bias.bias, names::BIAS),
        (f.softmax.sink, names::SINK),
    ] {
        if let Some(t) = t {
            g.rename(t, n)?;
        }
    }
    Ok(g)
}

/// The backward graph: every tensor packed BSHD (`q`, `k`, `v`, `o`, `do`
/// in, `dq`, `dk`, `dv` out) and `stats` `[B, H, S_q, 1]` f32.
///
/// # Errors
/// The builder's.
pub fn backward(cfg: &SdpaConfig) -> Result<Graph> {
    let [qd, kd, vd, od] = dims(cfg);
    let mut g = Graph::new();
    let q = g.input(names::Q, spec(cfg, qd, bshd(qd))?)?;
    let k = g.input(names::K, spec(cfg, kd, bshd(kd))?)?;
    let v = g.input(names::V, spec(cfg, vd, bshd(vd))?)?;
    let o = g.input(names::O, spec(cfg, od, bshd(od))?)?;
    let d_o = g.input(names::DO, spec(cfg, od, bshd(od))?)?;
    let stats = g.input(names::STATS, cfg.stats_spec()?)?;
    let b = g.sdpa_backward(q, k, v, o, d_o, stats, cfg)?;
    g.rename(b.dq, names::DQ)?;
    g.rename(b.dk, names::DK)?;
    g.rename(b.dv, names::DV)?;
    name_side(&mut g, (b.seq_len_q, b.seq_len_kv), b.ragged)?;
    for (t, n) in [
        (b.bias.alibi_slopes, names::ALIBI),
        (b.bias.bias, names::BIAS),
    ] {
        if let Some(t) = t {
            g.rename(t, n)?;
        }
    }
    Ok(g)
}
