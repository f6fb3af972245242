//! The checks of an attention call, pure functions of shapes, strides and
//! dtypes (no device): FlashAttention's argument conventions mapped onto
//! the crate's [`SdpaConfig`], every refusal a typed [`cudnn::Error`]
//! naming the argument and its value.

use candle_core::DType as CDType;
use cudnn::graph::{DType, DiagonalAlignment, SdpaConfig};
use cudnn::{Error, Result};

/// The options of one attention call, with FlashAttention's meaning.
#[derive(Clone, Debug)]
pub struct AttnParams {
    /// The score scale (FlashAttention's `softmax_scale`, usually `1 / sqrt(head_dim)`).
    pub softmax_scale: f32,
    /// Keys a query sees to the left of its diagonal position (`None`: all).
    pub window_size_left: Option<usize>,
    /// Keys a query sees to the right of its diagonal position (`None`:
    /// all; `Some(0)`: causal). Only `None`, `Some(0)` and values reaching
    /// the last key are served (cuDNN's band has no other right bound).
    pub window_size_right: Option<usize>,
    /// Logit softcap: scores `s` become `softcap * tanh(s / softcap)` (Gemma 2).
    pub softcap: Option<f32>,
    /// ALiBi slopes (FlashAttention's `alibi_slopes`), f32 `(heads,)` on
    /// q's device: the distance form `-slope[h] * |i + s_kv - s_q - j|`
    /// in every call. Without sinks it equals FlashAttention's (its causal
    /// form `slope[h] * j` differs by a per-row constant, which the softmax
    /// cancels); with sinks it does not cancel (the sink joins the
    /// denominator unshifted), and the distance form is the one used
    /// (FlashAttention has no sinks). A dense causal call with `seq_q ==
    /// seq_kv` uses cuDNN's ALiBi (`slope * (col - row)`, top-left causal:
    /// the distance form on the keys it sees); other dense calls (no mask,
    /// a bottom-right diagonal, any window, FlashAttention's window rule)
    /// get the bias and the mask as a `(1, heads, seq_q, seq_kv)` f32 score
    /// bias built on the device (its memory grows with `seq_q * seq_kv`).
    /// Varlen, KV-cache and paged calls (each sequence its own lengths,
    /// FlashAttention's `-slope * |i + len_k - len_q - j|`) use cuDNN's
    /// ALiBi when causal with every sequence as many keys as queries (its
    /// diagonal then top-left), else a per-sequence `[batch, heads, seq_q,
    /// max keys]` f32 score bias; they also take FlashAttention's
    /// `(batch, heads)` slopes whose rows differ (sequence `b` row `b`,
    /// always as the bias; dense calls refuse them, typed). As in
    /// FlashAttention, `(batch, heads)` means this call's batch: another
    /// first dim is refused, typed, even with equal rows. The slopes
    /// are constants: a tensor that
    /// tracks a gradient is accepted and gets none (FlashAttention's
    /// autograd returns none for them).
    pub alibi_slopes: Option<candle_core::Tensor>,
    /// Attention sinks (gpt-oss): one logit per query head, f32 (or
    /// f16 / bf16, widened) `(heads,)` on q's device, joining every row's
    /// softmax denominator and attending to no value. cuDNN takes no sink
    /// with a single query row: a dense, KV-cache or paged decode step
    /// (`seq_q = 1`) runs with a copy of the query row before it (exact:
    /// see `sink_decode_pad`); a varlen call needs `max_seqlen_q > 1`. In
    /// dense and varlen calls a sinks tensor that tracks a gradient gets
    /// one through candle's autograd (gpt-oss trains them); in KV-cache and
    /// paged calls (forward only) they are constants (a tensor tracking a
    /// gradient is refused, typed).
    pub sinks: Option<candle_core::Tensor>,
}

/// Equal scalars, and the same tensors (by candle's id) for the slopes and sinks.
impl PartialEq for AttnParams {
    fn eq(&self, o: &Self) -> bool {
        let same = |a: &Option<candle_core::Tensor>, b: &Option<candle_core::Tensor>| match (a, b) {
            (None, None) => true,
            (Some(a), Some(b)) => a.id() == b.id(),
            _ => false,
        };
        self.softmax_scale == o.softmax_scale
            && self.window_size_left == o.window_size_left
            && self.window_size_right == o.window_size_right
            && self.softcap == o.softcap
            && same(&self.alibi_slopes, &o.alibi_slopes)
            && same(&self.sinks, &o.sinks)
    }
}

impl AttnParams {
    /// No mask, no window, no softcap.
    pub fn new(softmax_scale: f32) -> Self {
        Self {
            softmax_scale,
            window_size_left: None,
            window_size_right: None,
            softcap: None,
            alibi_slopes: None,
            sinks: None,
        }
    }
    /// Causal (FlashAttention's `causal = true`: `window_size_right = Some(0)`).
    pub fn causal(mut self, on: bool) -> Self {
        self.window_size_right = on.then_some(0);
        self
    }
    /// With FlashAttention's window sizes.
    pub fn window(mut self, left: Option<usize>, right: Option<usize>) -> Self {
        self.window_size_left = left;
        self.window_size_right = right;
        self
    }
    /// With a logit softcap.
    pub fn softcap(mut self, softcap: Option<f32>) -> Self {
        self.softcap = softcap;
        self
    }
    /// With ALiBi slopes `(heads,)` f32 (see the field).
    pub fn alibi_slopes(mut self, slopes: Option<candle_core::Tensor>) -> Self {
        self.alibi_slopes = slopes;
        self
    }
    /// With attention sinks `(heads,)` (see the field).
    pub fn sinks(mut self, sinks: Option<candle_core::Tensor>) -> Self {
        self.sinks = sinks;
        self
    }
}

/// The mask an [`AttnParams`] asks for, in the crate's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mask {
    /// Right bound at the diagonal.
    pub causal: bool,
    /// The crate's window (`window_size_left + 1` keys up to the diagonal).
    pub window: Option<i64>,
    /// Where the diagonal sits.
    pub diagonal: DiagonalAlignment,
}

/// FlashAttention's window sizes as the crate's mask. FlashAttention aligns
/// the diagonal bottom-right (query `i` is at key position `i + s_kv -
/// s_q`); with equal lengths that is the top-left diagonal, which is what
/// is built then (the same mask; every cuDNN takes it). `ragged`: the
/// lengths differ per sequence, so the alignment is bottom-right whenever
/// there is a mask.
///
/// A right window `r` is candle-flash-attn's: it drops a bound above `s_kv`
/// (Dao's FlashAttention from `s_kv` on), and otherwise query `i` sees keys
/// up to `i + s_kv - s_q + r`, which reaches the last key for every query
/// when `r >= s_q - 1`: no bound either way.
///
/// # Errors
/// A right window other than `None`, `Some(0)` or one that bounds no query;
/// a left window (up to `s_kv`) without a causal bound when `s_q > s_kv +
/// 1` (FlashAttention's right bound at `s_kv` then cuts the first rows).
pub fn mask(p: &AttnParams, seq_q: usize, seq_kv: usize, ragged: bool) -> Result<Mask> {
    let causal = match p.window_size_right {
        None => false,
        Some(0) => true,
        Some(r) if r > seq_kv || r.saturating_add(1) >= seq_q => false,
        Some(r) => {
            return Err(Error::invalid(
                "window_size_right",
                format!(
                    "must be None, Some(0) (causal) or one that bounds no query (above the key length {seq_kv}; cuDNN's band mask has no other right bound)"
                ),
                r,
            ));
        }
    };
    let window = match p.window_size_left {
        Some(l) if l < seq_kv => Some(
            i64::try_from(l)
                .ok()
                .and_then(|l| l.checked_add(1))
                .ok_or_else(|| Error::invalid("window_size_left", "must fit i64", l))?,
        ),
        _ => None,
    };
    // candle-flash-attn keeps a left window up to seq_kv and then sets a
    // missing right side to seq_kv: query i sees keys up to i + 2 seq_kv -
    // seq_q only, which hides keys from the first seq_q - seq_kv - 1 rows
    // (no bound cuDNN's band has).
    if let Some(l) = p.window_size_left.filter(|&l| l <= seq_kv)
        && !causal
        && seq_q > seq_kv.saturating_add(1)
    {
        return Err(Error::invalid(
            "window_size_left",
            format!(
                "must come with window_size_right Some(0) (causal) when seq_q {seq_q} > seq_kv {seq_kv} + 1 (FlashAttention then bounds the right at seq_kv keys past the diagonal, hiding keys from the first seq_q - seq_kv - 1 queries; cuDNN's band has no such bound)"
            ),
            l,
        ));
    }
    let masked = causal || window.is_some();
    let diagonal = if masked && (ragged || seq_q != seq_kv) {
        DiagonalAlignment::BottomRight
    } else {
        DiagonalAlignment::TopLeft
    };
    Ok(Mask {
        causal,
        window,
        diagonal,
    })
}

/// `p` with the mask of a decode step's query row reduced to what it
/// means for that row alone, the last of its sequence (at `d = len - 1`):
/// a right bound (causal included) hides no key from it, so it goes (as
/// FlashAttention turns causal off for one query row); a left window
/// `l >= max_kv - 1` reaches key 0 of every sequence, so it goes too.
/// `max_kv` is the most keys a sequence can have (dense: `seq_kv`; KV
/// cache: its capacity). A decode step with sinks runs on two query rows
/// with this mask (a causal mask there would be bottom-right with
/// `seq_q = 2 > seq_kv` when `seq_kv = 1`, which cuDNN refuses).
pub fn single_row_mask(p: &AttnParams, max_kv: usize) -> AttnParams {
    let left = p.window_size_left.filter(|&l| l.saturating_add(1) < max_kv);
    p.clone().window(left, None)
}

/// A causal call must leave every query row a key: a sequence with more
/// queries than keys (`lens_q[b] > lens_kv[b]`) has `lens_q[b] -
/// lens_kv[b]` first rows that see none under the bottom-right diagonal.
/// FlashAttention writes zeros there; cuDNN's softmax of a row with no key
/// is not defined, so the crate refuses it (typed, before any GPU work)
/// rather than return what cuDNN leaves. `name(b)` names the key length
/// of sequence `b` in the error.
///
/// # Errors
/// The first such sequence, naming its key length.
pub(crate) fn causal_rows_see_keys(
    m: &Mask,
    lens_q: &[i32],
    lens_kv: &[i32],
    name: impl Fn(usize) -> String,
) -> Result<()> {
    if !m.causal {
        return Ok(());
    }
    match lens_q.iter().zip(lens_kv).position(|(q, k)| q > k) {
        None => Ok(()),
        Some(b) => Err(Error::invalid(
            name(b),
            format!(
                "must be at least the sequence's query count {} in a causal call (its first {} queries would see no key; FlashAttention writes zeros there: slice those queries off)",
                lens_q[b],
                lens_q[b] - lens_kv[b]
            ),
            lens_kv[b],
        )),
    }
}

/// The graph dtype of a candle dtype: f16 and bf16 (cuDNN's fused attention).
///
/// # Errors
/// Any other dtype, naming `arg`.
pub fn attn_dtype(arg: &str, dt: CDType) -> Result<DType> {
    match dt {
        CDType::F16 => Ok(DType::F16),
        CDType::BF16 => Ok(DType::BF16),
        other => Err(Error::invalid(
            format!("{arg} dtype"),
            "must be f16 or bf16 (cuDNN's fused attention)",
            format!("{other:?}"),
        )),
    }
}

/// One tensor argument: its dims, strides (elements) and dtype.
#[derive(Clone, Copy, Debug)]
pub struct Arg<'a> {
    /// The argument's name in errors (`"q"`).
    pub name: &'a str,
    /// Dims.
    pub dims: &'a [usize],
    /// Strides in elements.
    pub strides: &'a [usize],
    /// Element type.
    pub dtype: CDType,
}

pub(crate) fn to_i64(arg: &str, v: usize) -> Result<i64> {
    i64::try_from(v).map_err(|_| Error::invalid(arg, "must fit i64", v))
}

pub(crate) fn rank(a: &Arg<'_>, want: usize, what: &str) -> Result<()> {
    if a.dims.len() != want || a.strides.len() != want {
        return Err(Error::invalid(
            format!("{} shape", a.name),
            format!("must be rank {want} {what}"),
            format!("{:?}", a.dims),
        ));
    }
    if a.dims.contains(&0) {
        return Err(Error::invalid(
            format!("{} shape", a.name),
            "must have no zero dim",
            format!("{:?}", a.dims),
        ));
    }
    if a.strides[want - 1] != 1 {
        return Err(Error::invalid(
            format!("{} strides", a.name),
            "must have the head dim contiguous (last stride 1)",
            format!("{:?}", a.strides),
        ));
    }
    Ok(())
}

pub(crate) fn same(what: &str, a: usize, b: usize) -> Result<()> {
    if a != b {
        return Err(Error::mismatch(what, a, b));
    }
    Ok(())
}

/// What the three inputs say together: dims, dtype, and the checks FlashAttention makes.
fn common(q: &Arg<'_>, k: &Arg<'_>, v: &Arg<'_>, dense: bool) -> Result<DType> {
    let what = if dense {
        "(batch, seq, heads, head_dim)"
    } else {
        "(total_tokens, heads, head_dim)"
    };
    let n = if dense { 4 } else { 3 };
    for a in [q, k, v] {
        rank(a, n, what)?;
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
    let (h, hkv) = (q.dims[n - 2], k.dims[n - 2]);
    same("v heads (k's)", hkv, v.dims[n - 2])?;
    if h % hkv != 0 {
        return Err(Error::invalid(
            "k heads",
            format!("must divide q's heads {h} (grouped-query attention)"),
            hkv,
        ));
    }
    same("k head_dim (q's)", q.dims[n - 1], k.dims[n - 1])?;
    same("v tokens (k's)", k.dims[n - 3], v.dims[n - 3])?;
    if dense {
        same("k batch (q's)", q.dims[0], k.dims[0])?;
        same("v batch (q's)", q.dims[0], v.dims[0])?;
    }
    Ok(dt)
}

pub(crate) fn apply(mut cfg: SdpaConfig, p: &AttnParams, m: Mask) -> Result<SdpaConfig> {
    if !p.softmax_scale.is_finite() {
        return Err(Error::invalid(
            "softmax_scale",
            "must be finite",
            p.softmax_scale,
        ));
    }
    cfg = cfg
        .scale(f64::from(p.softmax_scale))
        .causal(m.causal)
        .diagonal(m.diagonal);
    if let Some(w) = m.window {
        cfg = cfg.sliding_window(w);
    }
    if let Some(c) = p.softcap {
        if !(c.is_finite() && c > 0.0) {
            return Err(Error::invalid("softcap", "must be finite and > 0", c));
        }
        cfg = cfg.softcap(f64::from(c));
    }
    extras(cfg, p, m)
}

/// The ALiBi and sink options: shapes and dtypes (pure; the values stay
/// on the device), and the masks cuDNN's ALiBi computes exactly what
/// FlashAttention does with.
fn extras(mut cfg: SdpaConfig, p: &AttnParams, m: Mask) -> Result<SdpaConfig> {
    let heads = usize::try_from(cfg.heads).unwrap_or(0);
    if let Some(t) = &p.alibi_slopes {
        if t.dtype() != CDType::F32 || t.dims() != [heads] {
            return Err(Error::invalid(
                "alibi_slopes",
                format!(
                    "must be f32 (heads,) = ({heads},) (a (batch, heads) tensor with equal rows is taken as its first row)"
                ),
                format!("{:?} {:?}", t.dtype(), t.dims()),
            ));
        }
        if !m.causal || m.diagonal != DiagonalAlignment::TopLeft {
            return Err(Error::Unsupported {
                what: format!(
                    "alibi_slopes with {} in cuDNN's ALiBi (it needs a causal mask aligned top-left: a dense call with seq_q == seq_kv, or a varlen, KV-cache or paged call whose every sequence has as many keys as queries; the entry points give other calls FlashAttention's ALiBi as a score bias instead)",
                    if m.causal {
                        "a bottom-right causal mask (a sequence with seqlen_q != seqlen_k, or a KV cache)"
                    } else {
                        "no causal mask"
                    }
                ),
                needs: Some(
                    "the entry points (flash_attn_alibi, flash_attn_varlen_alibi, flash_attn_kvcache, flash_attn_paged), which build the score bias"
                        .to_string(),
                ),
            });
        }
        cfg = cfg.alibi(true);
    }
    if let Some(t) = &p.sinks {
        if t.dtype() != CDType::F32 || t.dims() != [heads] {
            return Err(Error::invalid(
                "sinks",
                format!(
                    "must be f32 (heads,) = ({heads},) (f16 / bf16 are widened by the entry points)"
                ),
                format!("{:?} {:?}", t.dtype(), t.dims()),
            ));
        }
        if t.track_op() {
            return Err(Error::Unsupported {
                what: "sinks that track a gradient in a KV-cache or paged call (forward only; \
                       the entry points of dense and varlen calls give the sinks' gradient)"
                    .to_string(),
                needs: Some("sinks.detach(), or a dense or varlen call".to_string()),
            });
        }
        cfg = cfg.sink(true);
    }
    Ok(cfg)
}

/// A dense attention call: the config and the cuDNN strides (`[B, H, S,
/// D]` order) of q, k, v.
#[derive(Clone, Debug, PartialEq)]
pub struct Dense {
    /// The attention.
    pub cfg: SdpaConfig,
    /// q, k, v strides as `[B, H, S, D]`.
    pub strides: [[i64; 4]; 3],
}

/// Check `q` `(b, s_q, h, d)`, `k` `(b, s_kv, h_kv, d)`, `v` `(b, s_kv,
/// h_kv, d_v)` (any strides with the head dim contiguous) and map them.
///
/// # Errors
/// A rank, dim, dtype or stride that does not fit (typed, naming the
/// argument), a window cuDNN cannot build, a scale or softcap not finite.
pub fn dense(q: &Arg<'_>, k: &Arg<'_>, v: &Arg<'_>, p: &AttnParams) -> Result<Dense> {
    let dt = common(q, k, v, true)?;
    let [b, sq, h, d] = [q.dims[0], q.dims[1], q.dims[2], q.dims[3]];
    let [skv, hkv, dv] = [k.dims[1], k.dims[2], v.dims[3]];
    let m = mask(p, sq, skv, false)?;
    let mut cfg = SdpaConfig::new(
        to_i64("q batch", b)?,
        to_i64("q heads", h)?,
        to_i64("q seq", sq)?,
        to_i64("q head_dim", d)?,
        dt,
    )
    .kv_len(to_i64("k seq", skv)?)
    .gqa(to_i64("k heads", hkv)?);
    cfg.head_dim_v = to_i64("v head_dim", dv)?;
    let cfg = apply(cfg, p, m)?;
    let st = |a: &Arg<'_>| -> Result<[i64; 4]> {
        // candle's (b, s, h, d) strides as cuDNN's [B, H, S, D].
        Ok([
            to_i64(a.name, a.strides[0])?,
            to_i64(a.name, a.strides[2])?,
            to_i64(a.name, a.strides[1])?,
            to_i64(a.name, a.strides[3])?,
        ])
    };
    Ok(Dense {
        cfg,
        strides: [st(q)?, st(k)?, st(v)?],
    })
}

/// Whether strides of a `(b, s, h, d)` tensor lay it out as the crate's
/// graph lays out an output "like" it: packed in its stride order. An
/// output of a graph whose q is laid out this way is candle-contiguous
/// `(b, s, h, d_v)`. `false` asks the caller to make q contiguous first.
pub fn bshd_ordered(dims: &[usize], strides: &[usize]) -> bool {
    if dims.len() != 4 || strides.len() != 4 {
        return false;
    }
    // cuDNN order [B, H, S, D]; candle's index of each.
    let idx = [0usize, 2, 1, 3];
    let mut order: Vec<usize> = (0..4).collect();
    order.sort_by(|&a, &b| strides[idx[b]].cmp(&strides[idx[a]]).then(a.cmp(&b)));
    // The packed strides in that order, compared with candle-contiguous
    // BSHD on every dim longer than 1 (a dim of 1 has no stride that matters).
    let mut packed = [0usize; 4];
    let mut acc = 1usize;
    for &o in order.iter().rev() {
        packed[o] = acc;
        acc = acc.saturating_mul(dims[idx[o]]);
    }
    let contiguous_bshd = {
        let (s, h, d) = (dims[1], dims[2], dims[3]);
        [
            s.saturating_mul(h).saturating_mul(d),
            d,
            h.saturating_mul(d),
            1,
        ]
    };
    (0..4).all(|o| dims[idx[o]] == 1 || packed[o] == contiguous_bshd[o])
}

/// A varlen (packed) attention call: per-sequence lengths from
/// FlashAttention's cumulative `seqlens` (`b + 1` entries from 0).
#[derive(Clone, Debug, PartialEq)]
pub struct Varlen {
    /// The attention (ragged, padding on).
    pub cfg: SdpaConfig,
    /// Query lengths, one per sequence.
    pub lens_q: Vec<i32>,
    /// Key lengths, one per sequence.
    pub lens_kv: Vec<i32>,
}

/// Lengths from cumulative offsets: starts at 0, never decreases, ends at
/// `total`, each length at most `max`.
///
/// # Errors
/// Each broken rule, naming `arg` and the entry.
pub fn lengths(arg: &str, cu: &[u32], total: usize, max: usize) -> Result<Vec<i32>> {
    if cu.len() < 2 {
        return Err(Error::invalid(
            format!("{arg} length"),
            "must be batch + 1 >= 2 cumulative offsets",
            cu.len(),
        ));
    }
    if cu[0] != 0 {
        return Err(Error::invalid(format!("{arg}[0]"), "must be 0", cu[0]));
    }
    let mut out = Vec::with_capacity(cu.len() - 1);
    for i in 1..cu.len() {
        let (a, b) = (cu[i - 1], cu[i]);
        if b < a {
            return Err(Error::invalid(
                format!("{arg}[{i}]"),
                format!("must be >= {arg}[{}] = {a} (cumulative)", i - 1),
                b,
            ));
        }
        let l = (b - a) as usize;
        if l > max {
            return Err(Error::invalid(
                format!("{arg}[{i}] - {arg}[{}]", i - 1),
                format!("must be at most the max_seqlen {max}"),
                l,
            ));
        }
        out.push(i32::try_from(l).map_err(|_| Error::invalid(arg, "lengths must fit i32", l))?);
    }
    let last = cu[cu.len() - 1] as usize;
    if last != total {
        return Err(Error::mismatch(
            format!("{arg}[last] (the tokens of the packed tensor)"),
            total,
            last,
        ));
    }
    Ok(out)
}

/// Check a varlen call: `q` `(total_q, h, d)`, `k` `(total_kv, h_kv, d)`,
/// `v` `(total_kv, h_kv, d_v)`, contiguous; cumulative `seqlens_q` /
/// `seqlens_k` (`b + 1` entries); the max lengths bound every sequence.
///
/// # Errors
/// As [`dense`], and [`lengths`]'s.
#[allow(clippy::too_many_arguments)]
pub fn varlen(
    q: &Arg<'_>,
    k: &Arg<'_>,
    v: &Arg<'_>,
    seqlens_q: &[u32],
    seqlens_k: &[u32],
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    p: &AttnParams,
) -> Result<Varlen> {
    let dt = common(q, k, v, false)?;
    for a in [q, k, v] {
        let (h, d) = (a.dims[1], a.dims[2]);
        if a.strides != [h * d, d, 1] {
            return Err(Error::invalid(
                format!("{} strides", a.name),
                "must be contiguous (total_tokens, heads, head_dim) for a varlen call",
                format!("{:?}", a.strides),
            ));
        }
    }
    if seqlens_q.len() != seqlens_k.len() {
        return Err(Error::mismatch(
            "seqlens_k length (seqlens_q's: batch + 1)",
            seqlens_q.len(),
            seqlens_k.len(),
        ));
    }
    for (name, m) in [
        ("max_seqlen_q", max_seqlen_q),
        ("max_seqlen_k", max_seqlen_k),
    ] {
        // cuDNN's sequence lengths are i32 (and so the padded buffers' sizes
        // stay far from overflowing an allocation's byte count).
        if m == 0 || m > i32::MAX as usize {
            return Err(Error::invalid(
                name,
                format!("must be in 1..={}", i32::MAX),
                m,
            ));
        }
    }
    let lens_q = lengths("seqlens_q", seqlens_q, q.dims[0], max_seqlen_q)?;
    let lens_kv = lengths("seqlens_k", seqlens_k, k.dims[0], max_seqlen_k)?;
    let [h, d] = [q.dims[1], q.dims[2]];
    let [hkv, dv] = [k.dims[1], v.dims[2]];
    let mut m = mask(p, max_seqlen_q, max_seqlen_k, true)?;
    alibi_top_left(p, &mut m, &lens_q, &lens_kv);
    let mut cfg = SdpaConfig::new(
        to_i64("batch", lens_q.len())?,
        to_i64("q heads", h)?,
        to_i64("max_seqlen_q", max_seqlen_q)?,
        to_i64("q head_dim", d)?,
        dt,
    )
    .kv_len(to_i64("max_seqlen_k", max_seqlen_k)?)
    .gqa(to_i64("k heads", hkv)?)
    .ragged();
    cfg.head_dim_v = to_i64("v head_dim", dv)?;
    let cfg = apply(cfg, p, m)?;
    causal_rows_see_keys(&m, &lens_q, &lens_kv, |b| {
        format!("seqlens_k (sequence {b}'s length)")
    })?;
    Ok(Varlen {
        cfg,
        lens_q,
        lens_kv,
    })
}

/// With ALiBi slopes, a causal call whose every sequence has as many keys
/// as queries (`lens_q == lens_kv`) is aligned top-left: its bottom-right
/// diagonal is its top-left one, where cuDNN's ALiBi (`slope * (col -
/// row)`, per sequence) is FlashAttention's `-slope * |i + s_k - s_q - j|`
/// on every key a causal row sees. Other calls keep `m` (the entry points
/// give them a score bias instead; `extras` refuses the slopes there).
pub(crate) fn alibi_top_left(p: &AttnParams, m: &mut Mask, lens_q: &[i32], lens_kv: &[i32]) {
    if p.alibi_slopes.is_some() && m.causal && lens_q == lens_kv {
        m.diagonal = DiagonalAlignment::TopLeft;
    }
}

/// A call against a KV cache of fixed capacity (FlashAttention's
/// `flash_attn_with_kvcache` `cache_seqlens`): the dense config with a
/// padding mask, so every step of a decode loop has the same graph (one
/// plan) and the valid keys come from the lengths.
#[derive(Clone, Debug, PartialEq)]
pub struct KvCache {
    /// The dense call over the whole cache, padding on.
    pub dense: Dense,
    /// `seq_q` for every sequence.
    pub lens_q: Vec<i32>,
    /// The valid keys of each sequence.
    pub lens_kv: Vec<i32>,
}

/// Check a KV-cache call: q `(b, s_q, h, d)`, the caches `(b, capacity,
/// h_kv, d)` / `(b, capacity, h_kv, d_v)`, `cache_seqlens` one length per
/// sequence, each at most the capacity. The diagonal is bottom-right per
/// sequence (query `i` at key `i + len - s_q`).
///
/// # Errors
/// As [`dense`]; a length count other than the batch, a length past the capacity.
pub fn kvcache(
    q: &Arg<'_>,
    k: &Arg<'_>,
    v: &Arg<'_>,
    cache_seqlens: &[u32],
    p: &AttnParams,
) -> Result<KvCache> {
    // The slopes are applied below, with this call's mask.
    let mut d = dense(q, k, v, &p.clone().alibi_slopes(None))?;
    let (b, sq, cap) = (q.dims[0], q.dims[1], k.dims[1]);
    let mut m = mask(p, sq, cap, true)?;
    let (lens_q, lens_kv) = kvcache_lens(b, sq, cap, m.causal, cache_seqlens)?;
    alibi_top_left(p, &mut m, &lens_q, &lens_kv);
    d.cfg = d.cfg.padding(true).diagonal(m.diagonal);
    if p.alibi_slopes.is_some() {
        let slopes_only = AttnParams {
            sinks: None,
            ..p.clone()
        };
        d.cfg = extras(d.cfg, &slopes_only, m)?;
    }
    Ok(KvCache {
        dense: d,
        lens_q,
        lens_kv,
    })
}

/// The lengths of a KV-cache call, checked: `cache_seqlens` one per
/// sequence of `batch`, each at most the capacity `cap` and, `causal`,
/// at least the query count `seq_q`; returns the query lengths (`seq_q`
/// each) and the key lengths as i32.
///
/// # Errors
/// A count other than `batch`, a length past `cap` or i32, a causal
/// length below `seq_q`; each naming `cache_seqlens[i]`.
pub fn kvcache_lens(
    batch: usize,
    seq_q: usize,
    cap: usize,
    causal: bool,
    cache_seqlens: &[u32],
) -> Result<(Vec<i32>, Vec<i32>)> {
    if cache_seqlens.len() != batch {
        return Err(Error::mismatch(
            "cache_seqlens length (q's batch)",
            batch,
            cache_seqlens.len(),
        ));
    }
    let mut lens_kv = Vec::with_capacity(batch);
    for (i, &l) in cache_seqlens.iter().enumerate() {
        if l as usize > cap {
            return Err(Error::invalid(
                format!("cache_seqlens[{i}]"),
                format!("must be at most the cache capacity {cap} (k's dim 1)"),
                l,
            ));
        }
        lens_kv.push(
            i32::try_from(l)
                .map_err(|_| Error::invalid(format!("cache_seqlens[{i}]"), "must fit i32", l))?,
        );
    }
    let lq = i32::try_from(seq_q).map_err(|_| Error::invalid("q seq", "must fit i32", seq_q))?;
    let lens_q = vec![lq; batch];
    let m = Mask {
        causal,
        window: None,
        diagonal: DiagonalAlignment::BottomRight,
    };
    causal_rows_see_keys(&m, &lens_q, &lens_kv, |i| format!("cache_seqlens[{i}]"))?;
    Ok((lens_q, lens_kv))
}

pub mod alibi;
pub mod fp8;
pub mod gemm;
mod paged;
pub use paged::{Paged, paged};

#[cfg(test)]
mod tests;

#[cfg(test)]
mod paged_tests;
