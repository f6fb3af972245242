//! Scaled dot-product attention in `f64`, forward and backward: the oracle
//! for the graph API's SDPA operations.
//!
//! # Tensors
//! Every tensor is given in **BHSD logical order** with its own strides (in
//! elements), as a [`View`], so any storage works: packed BHSD
//! ([`View::bhsd`]), BSHD ([`View::bshd`], what most frameworks store) or
//! anything else whose addresses stay inside the buffer.
//! - `Q`: `[b, h_q, s_q, d]`, `K`: `[b, h_kv, s_kv, d]`, `V`: `[b, h_kv, s_kv, d_v]`
//! - `O` and `dO`: `[b, h_q, s_q, d_v]`
//!
//! Outputs are **packed BHSD** (`O`, and `dQ`, `dK`, `dV` shaped like `Q`,
//! `K`, `V`); the statistics are packed `[b, h_q, s_q]` (the graph's
//! `[b, h_q, s_q, 1]`). [`scatter`](super::ops::scatter) writes them into
//! any other layout.
//!
//! # Definition
//! For batch `n`, query head `h` (using KV head `h / (h_q / h_kv)`:
//! grouped-query attention, with `h_q` a multiple of `h_kv`), query `i` and
//! key `j`:
//! - `S[i, j] = scale * sum_t Q[i, t] * K[j, t]`, then with a softcap
//!   ([`SdpaConfig::softcap`]) `S = softcap * tanh(S / softcap)`, then
//!   `S[i, j] += bias[n, h, i, j] + slope[h] * (j - i)`, the last two only
//!   with [`SdpaConfig::bias`] (broadcast over its dims of 1) and
//!   [`SdpaConfig::alibi_slopes`]; [`dbias`] gives the bias's gradient
//! - key `j` is **allowed** for query `i` when `i < len_q`, `j < len_kv` and
//!   the causal mask admits it, where `len_q`, `len_kv` are the batch's
//!   sequence lengths ([`SdpaConfig::seq_len_q`] / [`SdpaConfig::seq_len_kv`];
//!   `s_q` / `s_kv` without them) and [`CausalMask`] is:
//!   none; top-left, `j <= i`; or bottom-right, `j <= i + len_kv - len_q`
//!   (the diagonal ends at the last query and last valid key), and the
//!   [`Window`] (a sliding window of `size` keys) admits it: `j > i' -
//!   size`, with `i' = i` (top-left) or `i + len_kv - len_q`
//!   (bottom-right).
//! - `stats[i] = log(sum_{allowed j} exp(S[i, j]))` (natural log, over the
//!   scaled scores, before dropout),
//!   `P[i, j] = exp(S[i, j] - stats[i])` for allowed `j`, else 0
//! - `O[i, t] = sum_j P[i, j] * D[i, j] * V[j, t]`, with `D` the dropout
//!   multiplier ([`SdpaConfig::dropout`]; 1 without it).
//!
//! **Fully masked rows** (no allowed key: a query beyond `len_q`,
//! `len_kv = 0`, or a bottom-right mask with more queries than keys) are
//! defined to give `O = 0` and `stats = +inf` (so `exp(S - stats)` is 0 for
//! every key, the convention a flash-attention backward consumes), never
//! NaN; their gradients are 0. A GPU result need not agree on the `stats`
//! of such rows.
//!
//! Backward (from the given `O` and `stats`, as the graph op takes them),
//! with `dP[i, j] = D[i, j] * sum_t dO[i, t] * V[j, t]` and
//! `delta[i] = sum_t dO[i, t] * O[i, t]`:
//! `dS = P * (dP - delta)`, `dQ[i] = scale * sum_j dS[i, j] K[j]`,
//! `dK[j] = scale * sum_i dS[i, j] Q[i]`, `dV[j] = sum_i P[i, j] D[i, j] dO[i]`;
//! `dK` and `dV` of a KV head are summed over the query heads of its group.
//!
//! # Dropout
//! cuDNN draws its dropout mask from a Philox stream that cannot be
//! reproduced on the host, so the reference takes the mask from the caller:
//! a packed `[b, h_q, s_q, s_kv]` tensor of multipliers, normally 0 (dropped)
//! or `1 / (1 - p)` (kept), applied to `P` after the softmax.
//!
//! # Bounds
//! Dimensions must be at least 1 and at most
//! [`MAX_ELEMENTS`](super::MAX_ELEMENTS), every view must address only
//! inside its buffer, sizes use checked arithmetic, outputs are allocated
//! with `try_reserve` (at most `MAX_ELEMENTS` each), and a call whose work
//! exceeds [`MAX_WORK`] multiply-adds is rejected with [`Error::InvalidArgument`] (forward:
//! `b * h_q * s_q * s_kv * (d + d_v)`; backward:
//! `b * h_q * s_q * (s_kv * (3 d + 2 d_v) + d_v)`).
//!
//! ```
//! use cudnn::reference::attention::{self, SdpaConfig, View};
//! // One query, two keys: scores [0, ln 3] give P = [1/4, 3/4], so
//! // O = 4/4 + 3 * 8/4 = 7 and stats = ln(1 + 3).
//! let (q, k, v) = ([1.0], [0.0, 3f64.ln()], [4.0, 8.0]);
//! let f = attention::forward(
//!     &View::bhsd(&q, [1, 1, 1, 1]),
//!     &View::bhsd(&k, [1, 1, 2, 1]),
//!     &View::bhsd(&v, [1, 1, 2, 1]),
//!     &SdpaConfig::new(1.0),
//! )?;
//! assert!((f.o[0] - 7.0).abs() < 1e-12);
//! assert!((f.stats[0] - 4f64.ln()).abs() < 1e-12);
//! # Ok::<(), cudnn::Error>(())
//! ```

use super::bounds;

mod bias;
mod ragged;
mod softcap;
use crate::error::{Error, Result};
pub use bias::dbias;
pub use ragged::{ragged_pack, ragged_unpack};
mod softmax_parts;
pub use softmax_parts::{Partial, SdpaParts, backward_d_sink, combine_partials, forward_parts};

/// The most work (multiply-adds) one call accepts: 2^32, the
/// [`reference`](super::MAX_WORK) bound.
pub const MAX_WORK: u64 = super::MAX_WORK;

/// A 4-d tensor in BHSD logical order: its buffer, dims and strides (in
/// elements).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct View<'a> {
    /// The memory the tensor lives in.
    pub data: &'a [f64],
    /// `[b, h, s, d]`.
    pub dims: [usize; 4],
    /// The stride of each of `dims`, in elements.
    pub strides: [usize; 4],
}

impl<'a> View<'a> {
    /// A tensor with the given dims and strides.
    pub fn new(data: &'a [f64], dims: [usize; 4], strides: [usize; 4]) -> Self {
        View {
            data,
            dims,
            strides,
        }
    }

    /// Packed BHSD storage: strides `[h*s*d, s*d, d, 1]`.
    pub fn bhsd(data: &'a [f64], dims: [usize; 4]) -> Self {
        let [_, h, s, d] = dims;
        let sd = s.saturating_mul(d);
        Self::new(data, dims, [h.saturating_mul(sd), sd, d, 1])
    }

    /// Packed BSHD storage (sequence before heads), dims still in BHSD
    /// order: strides `[s*h*d, d, h*d, 1]`.
    pub fn bshd(data: &'a [f64], dims: [usize; 4]) -> Self {
        let [_, h, s, d] = dims;
        let hd = h.saturating_mul(d);
        Self::new(data, dims, [s.saturating_mul(hd), d, hd, 1])
    }

    /// Check every dimension is >= 1 and every address is inside `data`.
    fn check(&self, name: &str) -> Result<()> {
        if let Some(i) = self.dims.iter().position(|&d| d == 0) {
            return Err(Error::invalid(
                format!("{name}.dims[{i}]"),
                "must be >= 1",
                format!("{:?}", self.dims),
            ));
        }
        let last = self
            .dims
            .iter()
            .zip(&self.strides)
            .try_fold(0usize, |acc, (&d, &s)| {
                acc.checked_add((d - 1).checked_mul(s)?)
            })
            .ok_or_else(|| {
                Error::invalid(
                    format!("{name}.strides"),
                    "the largest offset overflows usize",
                    format!("{:?} with dims {:?}", self.strides, self.dims),
                )
            })?;
        if last >= self.data.len() {
            return Err(Error::mismatch(
                format!(
                    "{name} buffer length (the span of dims {:?} and strides {:?})",
                    self.dims, self.strides
                ),
                format!(">= {}", last as u128 + 1),
                self.data.len(),
            ));
        }
        Ok(())
    }

    /// Element `[b, h, s, t]`. Only called after [`View::check`] with
    /// indices inside `dims`, so the offset is at most the checked largest
    /// offset, which is inside `data`.
    fn at(&self, b: usize, h: usize, s: usize, t: usize) -> f64 {
        let [sb, sh, ss, st] = self.strides;
        self.data[b * sb + h * sh + s * ss + t * st]
    }
}

/// Which causal mask to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CausalMask {
    /// No causal mask.
    #[default]
    None,
    /// Query `i` sees keys `j <= i` (the diagonal starts at the first
    /// query and key).
    TopLeft,
    /// Query `i` sees keys `j <= i + len_kv - len_q` (the diagonal ends at
    /// the last query and the last valid key); the same as
    /// [`CausalMask::TopLeft`] when the lengths are equal.
    BottomRight,
}

/// A sliding window (cuDNN's diagonal-band left bound): query `i` sees
/// only keys `j > i' - size`, `i'` its diagonal position (`i`, or `i +
/// len_kv - len_q` aligned bottom-right). With a causal mask of the same
/// alignment, the `size` keys up to and including the diagonal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Window {
    /// The keys a query sees back from its diagonal, the diagonal included (>= 1).
    pub size: usize,
    /// Aligned bottom-right (else top-left).
    pub bottom_right: bool,
}

/// The options of one attention call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SdpaConfig<'a> {
    /// The factor on `Q K^T` (usually `1 / sqrt(d)`); finite.
    pub scale: f64,
    /// The causal mask.
    pub causal: CausalMask,
    /// A sliding window; `None`: none.
    pub window: Option<Window>,
    /// The valid query count of each batch (`b` values, each `<= s_q`);
    /// `None`: all `s_q`.
    pub seq_len_q: Option<&'a [usize]>,
    /// The valid key count of each batch (`b` values, each `<= s_kv`);
    /// `None`: all `s_kv`.
    pub seq_len_kv: Option<&'a [usize]>,
    /// The dropout multipliers, packed `[b, h_q, s_q, s_kv]`, finite
    /// (normally 0 or `1 / (1 - p)`); `None`: no dropout.
    pub dropout: Option<&'a [f64]>,
    /// Logit softcap (finite, > 0): `S` becomes `softcap * tanh(S /
    /// softcap)` before the masks, and the backward's `dS` is multiplied by
    /// `1 - tanh²(S / softcap)`; `None`: none.
    pub softcap: Option<f64>,
    /// An additive bias `[b or 1, h_q or 1, s_q, s_kv]` (broadcast over
    /// the dims of 1) on the scaled scores, before the masks; `None`: none.
    pub bias: Option<View<'a>>,
    /// ALiBi: `slope[h] * (j - i)` on the scaled scores (`h_q` finite
    /// slopes), before the masks; `None`: none.
    pub alibi_slopes: Option<&'a [f64]>,
}

impl SdpaConfig<'_> {
    /// Attention with `scale` and nothing else: no mask, no padding, no
    /// dropout.
    pub fn new(scale: f64) -> Self {
        SdpaConfig {
            scale,
            causal: CausalMask::None,
            window: None,
            seq_len_q: None,
            seq_len_kv: None,
            dropout: None,
            softcap: None,
            bias: None,
            alibi_slopes: None,
        }
    }
}

/// The result of [`forward`].
#[derive(Debug, Clone, PartialEq)]
pub struct SdpaForward {
    /// The output, packed `[b, h_q, s_q, d_v]`.
    pub o: Vec<f64>,
    /// The log-sum-exp of each row's scaled, masked scores, packed
    /// `[b, h_q, s_q]` (`+inf` for a fully masked row); the training
    /// output an inference graph does not produce.
    pub stats: Vec<f64>,
}

/// The result of [`backward`], packed BHSD.
#[derive(Debug, Clone, PartialEq)]
pub struct SdpaGrads {
    /// `dL/dQ`, `[b, h_q, s_q, d]`.
    pub dq: Vec<f64>,
    /// `dL/dK`, `[b, h_kv, s_kv, d]` (summed over each group's query heads).
    pub dk: Vec<f64>,
    /// `dL/dV`, `[b, h_kv, s_kv, d_v]` (summed over each group's query heads).
    pub dv: Vec<f64>,
}

/// The checked sizes of one call.
#[derive(Debug, Clone, Copy)]
struct Shape {
    b: usize,
    hq: usize,
    hkv: usize,
    sq: usize,
    skv: usize,
    d: usize,
    dv: usize,
}

impl Shape {
    /// The KV head of query head `h`.
    fn kv_head(&self, h: usize) -> usize {
        h / (self.hq / self.hkv)
    }

    /// The row index `(n, h, i)` of a packed `[b, h_q, s_q]` tensor.
    fn row(&self, n: usize, h: usize, i: usize) -> usize {
        (n * self.hq + h) * self.sq + i
    }
}

fn product(what: &str, factors: &[usize]) -> Result<usize> {
    factors
        .iter()
        .try_fold(1usize, |a, &f| a.checked_mul(f))
        .ok_or_else(|| Error::invalid(what, "the size overflows usize", format!("{factors:?}")))
}

use bounds::zeros;

fn check_work(shape: &Shape, backward: bool) -> Result<()> {
    let Shape {
        b,
        hq,
        sq,
        skv,
        d,
        dv,
        ..
    } = *shape;
    let u = |v: usize| u64::try_from(v).ok();
    let work = (|| {
        let rows = u(b)?.checked_mul(u(hq)?)?.checked_mul(u(sq)?)?;
        let (d, dv) = (u(d)?, u(dv)?);
        let per_key = if backward {
            d.checked_mul(3)?.checked_add(dv.checked_mul(2)?)?
        } else {
            d.checked_add(dv)?
        };
        let per_row = u(skv)?.checked_mul(per_key)?;
        let per_row = if backward {
            per_row.checked_add(dv)?
        } else {
            per_row
        };
        rows.checked_mul(per_row)
    })();
    match work {
        Some(w) if w <= MAX_WORK => Ok(()),
        _ => Err(Error::invalid(
            "attention shape",
            format!("the work must be at most {MAX_WORK} multiply-adds (reference::MAX_WORK)"),
            format!(
                "b {b}, h_q {hq}, s_q {sq}, s_kv {skv}, d {d}, d_v {dv} ({})",
                work.map_or("overflow".to_string(), |w| w.to_string())
            ),
        )),
    }
}

fn check_lengths(name: &str, lens: Option<&[usize]>, b: usize, s: usize) -> Result<()> {
    let Some(lens) = lens else { return Ok(()) };
    if lens.len() != b {
        return Err(Error::mismatch(
            format!("{name} length (the batch size)"),
            b,
            lens.len(),
        ));
    }
    if let Some((i, &l)) = lens.iter().enumerate().find(|&(_, &l)| l > s) {
        return Err(Error::invalid(
            format!("{name}[{i}]"),
            format!("must be <= the sequence dimension {s}"),
            l,
        ));
    }
    Ok(())
}

/// Every check shared by forward and backward; returns the sizes.
fn check(
    q: &View<'_>,
    k: &View<'_>,
    v: &View<'_>,
    config: &SdpaConfig<'_>,
    backward: bool,
) -> Result<Shape> {
    for (name, t) in [("q", q), ("k", k), ("v", v)] {
        if let Some(i) = t.dims.iter().position(|&d| d == 0) {
            return Err(Error::invalid(
                format!("{name}.dims[{i}]"),
                "must be >= 1",
                format!("{:?}", t.dims),
            ));
        }
        for (i, &d) in t.dims.iter().enumerate() {
            bounds::extent(&format!("{name}.dims[{i}]"), d)?;
        }
    }
    let [b, hq, sq, d] = q.dims;
    let [kb, hkv, skv, kd] = k.dims;
    let [vb, vh, vs, dv] = v.dims;
    for (what, want, got) in [
        ("k.dims[0] (the batch, as q)", b, kb),
        ("v.dims[0] (the batch, as q)", b, vb),
        ("k.dims[3] (the head dim, as q)", d, kd),
        ("v.dims[1] (the kv heads, as k)", hkv, vh),
        ("v.dims[2] (the kv sequence, as k)", skv, vs),
    ] {
        if want != got {
            return Err(Error::mismatch(what, want, got));
        }
    }
    if hq % hkv != 0 {
        return Err(Error::invalid(
            "q.dims[1] (h_q)",
            format!("must be a multiple of the kv heads {hkv}"),
            hq,
        ));
    }
    let shape = Shape {
        b,
        hq,
        hkv,
        sq,
        skv,
        d,
        dv,
    };
    check_work(&shape, backward)?;
    for (name, t) in [("q", q), ("k", k), ("v", v)] {
        t.check(name)?;
    }
    if !config.scale.is_finite() {
        return Err(Error::invalid("scale", "must be finite", config.scale));
    }
    softcap::check(config.softcap)?;
    if let Some(w) = config.window
        && w.size == 0
    {
        return Err(Error::invalid("window.size", "must be >= 1", w.size));
    }
    bias::check_terms(config, &shape)?;
    check_lengths("seq_len_q", config.seq_len_q, b, sq)?;
    check_lengths("seq_len_kv", config.seq_len_kv, b, skv)?;
    if let Some(mask) = config.dropout {
        let n = product("dropout", &[b, hq, sq, skv])?;
        if mask.len() != n {
            return Err(Error::mismatch(
                format!("dropout length (packed [b, h_q, s_q, s_kv] = [{b}, {hq}, {sq}, {skv}])"),
                n,
                mask.len(),
            ));
        }
        if let Some((i, &m)) = mask.iter().enumerate().find(|(_, m)| !m.is_finite()) {
            return Err(Error::invalid(format!("dropout[{i}]"), "must be finite", m));
        }
    }
    Ok(shape)
}

/// Whether key `j` is allowed for query `i` of batch `n`.
fn allowed(shape: &Shape, config: &SdpaConfig<'_>, n: usize, i: usize, j: usize) -> bool {
    let lq = config.seq_len_q.map_or(shape.sq, |l| l[n]);
    let lkv = config.seq_len_kv.map_or(shape.skv, |l| l[n]);
    i < lq
        && j < lkv
        && match config.causal {
            CausalMask::None => true,
            CausalMask::TopLeft => j <= i,
            // j <= i + lkv - lq, without underflow.
            CausalMask::BottomRight => j + lq <= i + lkv,
        }
        && match config.window {
            None => true,
            // j > i' - size, i.e. j + size > i' (+ lq on both sides
            // bottom-right, so nothing underflows; the left side saturates,
            // and a saturated window admits every key, as it should).
            Some(w) if w.bottom_right => j.saturating_add(w.size).saturating_add(lq) > i + lkv,
            Some(w) => j.saturating_add(w.size) > i,
        }
}

/// The scaled score `S[i, j]` of batch `n`, query head `h`.
fn score(
    q: &View<'_>,
    k: &View<'_>,
    shape: &Shape,
    scale: f64,
    (n, h, i, j): (usize, usize, usize, usize),
) -> f64 {
    let kh = shape.kv_head(h);
    let mut s = 0.0;
    for t in 0..shape.d {
        s += q.at(n, h, i, t) * k.at(n, kh, j, t);
    }
    scale * s
}

fn drop_at(
    shape: &Shape,
    config: &SdpaConfig<'_>,
    (n, h, i, j): (usize, usize, usize, usize),
) -> f64 {
    config
        .dropout
        .map_or(1.0, |m| m[shape.row(n, h, i) * shape.skv + j])
}

/// Attention forward: `O` and the softmax statistics (see the module docs).
///
/// # Errors
/// A dimension of 0; `K`, `V` whose batch, head dim, kv heads or kv
/// sequence do not match; `h_q` not a multiple of `h_kv`; more work than
/// [`MAX_WORK`]; a view addressing outside its buffer; a non-finite scale;
/// sequence lengths not one per batch or longer than the sequence; a
/// dropout mask of the wrong length or with a non-finite value.
#[doc(alias = "sdpa")]
pub fn forward(
    q: &View<'_>,
    k: &View<'_>,
    v: &View<'_>,
    config: &SdpaConfig<'_>,
) -> Result<SdpaForward> {
    let shape = check(q, k, v, config, false)?;
    let Shape {
        b, hq, sq, skv, dv, ..
    } = shape;
    let mut o = zeros("o", product("o", &[b, hq, sq, dv])?)?;
    let mut stats = zeros("stats", product("stats", &[b, hq, sq])?)?;
    let mut row = zeros("scores", skv)?;
    for n in 0..b {
        for h in 0..hq {
            let kh = shape.kv_head(h);
            for i in 0..sq {
                let r = shape.row(n, h, i);
                let mut max = f64::NEG_INFINITY;
                let mut any = false;
                for (j, s) in row.iter_mut().enumerate() {
                    if allowed(&shape, config, n, i, j) {
                        *s = softcap::cap(
                            config.softcap,
                            score(q, k, &shape, config.scale, (n, h, i, j)),
                        ) + bias::term(config, &shape, (n, h, i, j));
                        max = max.max(*s);
                        any = true;
                    }
                }
                if !any {
                    stats[r] = f64::INFINITY;
                    continue;
                }
                let mut sum = 0.0;
                for (j, &s) in row.iter().enumerate() {
                    if allowed(&shape, config, n, i, j) {
                        sum += (s - max).exp();
                    }
                }
                let lse = max + sum.ln();
                stats[r] = lse;
                let out = &mut o[r * dv..(r + 1) * dv];
                for (j, &s) in row.iter().enumerate() {
                    if allowed(&shape, config, n, i, j) {
                        let p = (s - lse).exp() * drop_at(&shape, config, (n, h, i, j));
                        for (t, slot) in out.iter_mut().enumerate() {
                            *slot += p * v.at(n, kh, j, t);
                        }
                    }
                }
            }
        }
    }
    Ok(SdpaForward { o, stats })
}

/// Attention backward: `dQ`, `dK`, `dV` from `dO`, the forward's `O` and
/// `stats` (packed `[b, h_q, s_q]`) and the same `config` (see the module
/// docs for the formulas).
///
/// # Errors
/// As [`forward`]; `O` or `dO` not `[b, h_q, s_q, d_v]` or addressing
/// outside its buffer; `stats` not holding `b * h_q * s_q` values.
pub fn backward(
    q: &View<'_>,
    k: &View<'_>,
    v: &View<'_>,
    o: &View<'_>,
    d_o: &View<'_>,
    stats: &[f64],
    config: &SdpaConfig<'_>,
) -> Result<SdpaGrads> {
    let shape = check(q, k, v, config, true)?;
    let Shape {
        b,
        hq,
        hkv,
        sq,
        skv,
        d,
        dv,
    } = shape;
    let want = [b, hq, sq, dv];
    for (name, t) in [("o", o), ("d_o", d_o)] {
        if t.dims != want {
            return Err(Error::mismatch(
                format!("{name}.dims ([b, h_q, s_q, d_v])"),
                format!("{want:?}"),
                format!("{:?}", t.dims),
            ));
        }
        t.check(name)?;
    }
    let rows = product("stats", &[b, hq, sq])?;
    if stats.len() != rows {
        return Err(Error::mismatch(
            format!("stats length (packed [b, h_q, s_q] = [{b}, {hq}, {sq}])"),
            rows,
            stats.len(),
        ));
    }
    let mut dq = zeros("dq", product("dq", &[b, hq, sq, d])?)?;
    let mut dk = zeros("dk", product("dk", &[b, hkv, skv, d])?)?;
    let mut dvv = zeros("dv", product("dv", &[b, hkv, skv, dv])?)?;
    for n in 0..b {
        for h in 0..hq {
            let kh = shape.kv_head(h);
            for i in 0..sq {
                let r = shape.row(n, h, i);
                let lse = stats[r];
                let mut delta = 0.0;
                for t in 0..dv {
                    delta += d_o.at(n, h, i, t) * o.at(n, h, i, t);
                }
                for j in 0..skv {
                    if !allowed(&shape, config, n, i, j) {
                        continue;
                    }
                    let at = (n, h, i, j);
                    let raw = score(q, k, &shape, config.scale, at);
                    let s = softcap::cap(config.softcap, raw) + bias::term(config, &shape, at);
                    let p = (s - lse).exp();
                    let m = drop_at(&shape, config, at);
                    let kv = (n * hkv + kh) * skv + j;
                    let mut dp = 0.0;
                    for t in 0..dv {
                        let g = d_o.at(n, h, i, t);
                        dp += g * v.at(n, kh, j, t);
                        dvv[kv * dv + t] += p * m * g;
                    }
                    let ds = p * (m * dp - delta) * softcap::cap_grad(config.softcap, raw);
                    for t in 0..d {
                        dq[r * d + t] += config.scale * ds * k.at(n, kh, j, t);
                        dk[kv * d + t] += config.scale * ds * q.at(n, h, i, t);
                    }
                }
            }
        }
    }
    Ok(SdpaGrads { dq, dk, dv: dvv })
}

/// Gathers a paged cache into packed BHSD `[b, h, s_kv, d]`: token `j` of
/// sequence `n` is row `j % block_size` of page `table[n * pages + j /
/// block_size]` of `container` (`[num_blocks, h, block_size, d]`, any
/// strides), as cuDNN's paged cache load reads it. `table` is the page
/// table, packed `[b, pages]` (the graph's `[b, 1, pages, 1]`). The
/// result is what [`forward`] takes for `K` or `V` (with
/// [`View::bhsd`]); tokens past a sequence's key length are read too, so
/// every page they name must exist.
///
/// # Errors
/// A container view addressing outside its buffer or with a dimension of
/// 0; `table` not `b * pages` long; `pages * block_size < s_kv`; a page
/// index outside the container; sizes beyond
/// [`MAX_ELEMENTS`](super::MAX_ELEMENTS).
pub fn paged_gather(
    container: &View<'_>,
    table: &[i32],
    b: usize,
    pages: usize,
    s_kv: usize,
) -> Result<Vec<f64>> {
    container.check("container")?;
    let [num_blocks, h, block, d] = container.dims;
    for (name, v) in [("b", b), ("pages", pages), ("s_kv", s_kv)] {
        if v == 0 {
            return Err(Error::invalid(
                format!("paged_gather {name}"),
                "must be >= 1",
                v,
            ));
        }
        bounds::extent(&format!("paged_gather {name}"), v)?;
    }
    let want = product("paged_gather table", &[b, pages])?;
    if table.len() != want {
        return Err(Error::mismatch(
            format!("page table length (packed [b, pages] = [{b}, {pages}])"),
            want,
            table.len(),
        ));
    }
    if product("paged_gather pages * block_size", &[pages, block])? < s_kv {
        return Err(Error::invalid(
            "paged_gather pages",
            format!("must cover s_kv = {s_kv} tokens with block_size {block}"),
            pages,
        ));
    }
    let mut out = zeros(
        "paged_gather",
        product("paged_gather out", &[b, h, s_kv, d])?,
    )?;
    for n in 0..b {
        for j in 0..s_kv {
            let slot = n * pages + j / block;
            let page = table[slot];
            let page = usize::try_from(page)
                .ok()
                .filter(|&p| p < num_blocks)
                .ok_or_else(|| {
                    Error::invalid(
                        format!("page table [{n}, {}]", j / block),
                        format!("must be a page of the container (0..{num_blocks})"),
                        page,
                    )
                })?;
            for hh in 0..h {
                for t in 0..d {
                    out[((n * h + hh) * s_kv + j) * d + t] = container.at(page, hh, j % block, t);
                }
            }
        }
    }
    Ok(out)
}
