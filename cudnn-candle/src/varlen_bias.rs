//! FlashAttention's ALiBi in a varlen call that cuDNN's own ALiBi cannot
//! compute (not causal, or a sequence with `seqlen_q != seqlen_k`): a
//! score bias `[B, H, max_seqlen_q, max_seqlen_k]` f32, sequence `b`'s
//! block `-slope * |i + seqlen_k[b] - seqlen_q[b] - j|` with its window
//! as `-inf`, zero in the padding (which the padding mask hides). cuDNN
//! takes a full bias with ragged Q, K, V and padding masks (planned for
//! an H200 by the host tier). The window's sides are FlashAttention's for the whole call
//! (`set_params_fprop`: a side above the call's key extent, `max_seqlen_k`
//! or the cache's capacity, dropped, a missing one set to that extent);
//! only the diagonal is the sequence's own. Its size is `B * H * max_q *
//! max_k * 4` bytes on the device.
//! It is built in one pass over the batch (a fixed number of candle ops
//! whatever the batch: a decode step of the KV-cache and paged calls
//! builds it each step), from the per-sequence lengths and windows
//! computed on the host. Building it takes about twice the bias's bytes
//! plus 32 bytes per `[B, max_q, max_k]` element at its peak
//! ([`build_bytes`], checked against the device's memory first).

use candle_core::Tensor;
use cudnn::graph::{AttnBias, DType, SdpaConfig};

use crate::device::IntoCandle;
use crate::params::{self, AttnParams};

/// Whether a varlen call with `p` (ready: slopes f32 `(heads,)`) needs the
/// bias: slopes given, and not a causal call whose every sequence has as
/// many keys as queries (cuDNN's ALiBi there, `params::varlen`).
///
/// # Errors
/// None today (a `Result` for the checks a later rule may need).
pub fn needs_bias(
    p: &AttnParams,
    lens_q: &[i32],
    lens_k: &[i32],
    (max_q, max_k): (usize, usize),
) -> cudnn::Result<bool> {
    if p.alibi_slopes.is_none() {
        return Ok(false);
    }
    // A window cuDNN's band cannot express (a right bound other than 0)
    // goes into the bias too.
    Ok(match params::mask(p, max_q, max_k, true) {
        Ok(m) => !(m.causal && lens_q == lens_k),
        Err(_) => true,
    })
}

/// Bytes per `[batch, max_q, max_k]` element that building the bias
/// needs besides the two `[batch, heads, max_q, max_k]` f32 tensors: the
/// head-independent intermediates of the builder at their peak (the i64
/// distances, their f32 copies on the way to `-|d|`, the u8 masks, the
/// f32 distance and mask kept for the last two ops), rounded up.
pub const BUILD_BYTES_PER_QK: usize = 32;

/// The bytes building the bias `[batch, heads, max_q, max_k]` f32 needs
/// at its peak: the product and its sum with the mask alive together (`8
/// * heads` bytes per `[batch, max_q, max_k]` element; candle's ops are
/// out of place) plus [`BUILD_BYTES_PER_QK`]. Checked.
pub fn build_bytes(
    (batch, heads): (usize, usize),
    (max_q, max_k): (usize, usize),
) -> Option<usize> {
    let qk = batch.checked_mul(max_q)?.checked_mul(max_k)?;
    heads
        .checked_mul(8)?
        .checked_add(BUILD_BYTES_PER_QK)?
        .checked_mul(qk)
}

/// The elements of the bias `[batch, heads, max_q, max_k]`, checked: the
/// product and the bytes building it takes at its peak ([`build_bytes`],
/// about twice the bias's own) must not overflow and must be at most
/// `cap_bytes` (the device's memory): `max_seqlen_*` are the caller's
/// numbers, which the lengths only bound from above. `cap_bytes` is the
/// device's total memory: on a device that holds other tensors, an
/// accepted size can still fail to allocate (candle's out-of-memory
/// error).
///
/// # Errors
/// Typed, naming `max_seqlen_q / max_seqlen_k` and the sizes.
pub fn bias_elems(
    (batch, heads): (usize, usize),
    (max_q, max_k): (usize, usize),
    cap_bytes: usize,
) -> cudnn::Result<usize> {
    let n = batch
        .checked_mul(heads)
        .and_then(|n| n.checked_mul(max_q))
        .and_then(|n| n.checked_mul(max_k))
        .filter(|n| n.checked_mul(4).is_some_and(|b| b <= isize::MAX as usize));
    let peak = build_bytes((batch, heads), (max_q, max_k));
    match (n, peak) {
        (Some(n), Some(b)) if b <= cap_bytes => Ok(n),
        _ => Err(cudnn::Error::invalid(
            "max_seqlen_q / max_seqlen_k",
            format!(
                "the ALiBi score bias [batch, heads, max_seqlen_q, max_seqlen_k] f32 takes, \
                 while it is built, {} bytes (8 * heads + {BUILD_BYTES_PER_QK} per batch x \
                 max_seqlen_q x max_seqlen_k element), which must fit in {cap_bytes} bytes \
                 (the device's memory): give the largest lengths the batch has",
                peak.map_or_else(|| "more than usize::MAX".to_string(), |b| b.to_string())
            ),
            format!("[{batch}, {heads}, {max_q}, {max_k}]"),
        )),
    }
}

/// The bias of a varlen call (see the module docs), or `None` when the
/// call needs none. `cu` the cumulative lengths, `totals` the packed
/// token counts of q and k, `heads` q's; building the bias takes at most
/// `cap_bytes` ([`bias_elems`], checked before anything is built).
///
/// # Errors
/// The lengths, a bias past `cap_bytes` (typed, naming `max_seqlen_q /
/// max_seqlen_k`), a row that sees no key (typed, naming
/// `alibi_slopes`), slopes not f32 `(heads,)`; candle's (the device
/// allocation).
#[cfg(test)]
pub(crate) fn varlen_alibi_bias(
    p: &AttnParams,
    (cu_q, cu_k): (&[u32], &[u32]),
    (total_q, total_k): (usize, usize),
    (max_q, max_k): (usize, usize),
    heads: usize,
    cap_bytes: usize,
) -> candle_core::Result<Option<Tensor>> {
    varlen_alibi_bias_rows(
        p,
        None,
        (cu_q, cu_k),
        (total_q, total_k),
        (max_q, max_k),
        heads,
        cap_bytes,
    )
}

/// [`varlen_alibi_bias`] with FlashAttention's `(batch, heads)` slopes
/// whose rows differ (`rows`, f32): sequence `b` takes row `b`, always as
/// the bias (cuDNN's slopes are per head).
///
/// # Errors
/// As [`varlen_alibi_bias`]; rows of another shape than `(batch, heads)`
/// (typed, naming `alibi_slopes`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn varlen_alibi_bias_rows(
    p: &AttnParams,
    rows: Option<&Tensor>,
    (cu_q, cu_k): (&[u32], &[u32]),
    (total_q, total_k): (usize, usize),
    (max_q, max_k): (usize, usize),
    heads: usize,
    cap_bytes: usize,
) -> candle_core::Result<Option<Tensor>> {
    if p.alibi_slopes.is_none() {
        return Ok(None);
    }
    let lens_q = params::lengths("seqlens_q", cu_q, total_q, max_q).c()?;
    let lens_k = params::lengths("seqlens_k", cu_k, total_k, max_k).c()?;
    if rows.is_none() && !needs_bias(p, &lens_q, &lens_k, (max_q, max_k)).c()? {
        return Ok(None);
    }
    lens_bias(
        p,
        rows,
        (&lens_q, &lens_k),
        (max_q, max_k),
        heads,
        cap_bytes,
    )
    .map(Some)
}

/// The per-sequence bias `[batch, heads, max_q, max_k]` f32 of checked
/// lengths (varlen, KV-cache and paged calls): sequence `b`'s block
/// `-slope |i + lens_k[b] - lens_q[b] - j|` inside the window, `-inf`
/// outside it (its sides normalised at the call's key extent `max_k`,
/// [`params::alibi::alibi_window`]), slopes row `b` of `rows` when given,
/// else `p`'s, zero padding around it; its size
/// checked against `cap_bytes` first ([`bias_elems`]).
///
/// # Errors
/// As [`varlen_alibi_bias`] (no slopes: typed, naming `alibi_slopes`).
pub(crate) fn lens_bias(
    p: &AttnParams,
    rows: Option<&Tensor>,
    (lens_q, lens_k): (&[i32], &[i32]),
    (max_q, max_k): (usize, usize),
    heads: usize,
    cap_bytes: usize,
) -> candle_core::Result<Tensor> {
    let Some(slopes) = &p.alibi_slopes else {
        return Err(crate::device::to_candle(cudnn::Error::invalid(
            "alibi_slopes",
            "must be given for an ALiBi bias",
            "None",
        )));
    };
    bias_elems((lens_q.len(), heads), (max_q, max_k), cap_bytes).c()?;
    if let Some(r) = rows
        && r.dims() != [lens_q.len(), heads]
    {
        return Err(crate::device::to_candle(cudnn::Error::invalid(
            "alibi_slopes",
            format!(
                "must be (heads,) or (batch, heads) = ({}, {heads}) f32",
                lens_q.len()
            ),
            format!("{:?}", r.dims()),
        )));
    }
    let (shape, b) = ((lens_q.len(), heads, max_q, max_k), lens_q.len());
    let slopes4 = match rows {
        Some(r) => r.detach().reshape((b, heads, 1, 1))?,
        None => {
            if slopes.dtype() != candle_core::DType::F32 || slopes.dims() != [heads] {
                return Err(crate::device::to_candle(cudnn::Error::invalid(
                    "alibi_slopes",
                    format!("must be f32 (heads,) = ({heads},)"),
                    format!("{:?} {:?}", slopes.dtype(), slopes.dims()),
                )));
            }
            slopes.detach().reshape((1, heads, 1, 1))?
        }
    };
    let dev = slopes4.device().clone();
    // Per sequence, on the host: its lengths and FlashAttention's window
    // (its sides dropped and filled at the call's key extent `max_k`, as
    // set_params_fprop does once per call; the diagonal and the rows that
    // see no key, refused here typed, from the sequence's own lengths); a
    // missing side is a bound no distance reaches (|d| < 2^32).
    const NONE: i64 = 1 << 40;
    let (mut lq, mut lk, mut lo, mut hi) = (vec![], vec![], vec![], vec![]);
    for (&q, &k) in lens_q.iter().zip(lens_k) {
        let (q, k) = (q.max(0), k.max(0));
        let w = params::alibi::alibi_window(p, (q as usize, k as usize), max_k).c()?;
        lq.push(i64::from(q));
        lk.push(i64::from(k));
        lo.push(w.left.unwrap_or(NONE));
        hi.push(-w.right.unwrap_or(NONE));
    }
    if b == 0 || heads == 0 || max_q == 0 || max_k == 0 {
        return Tensor::zeros(shape, candle_core::DType::F32, &dev);
    }
    // The head-independent parts, (b, max_q, max_k) f32, in a scope that
    // drops every i64 and u8 intermediate before the two full-size
    // tensors are made: `dist` = -|d| (0 in the padding) and `hide` =
    // -inf where a valid row does not see a valid key, else 0.
    let (dist, hide) = {
        let col = |v: Vec<i64>| Tensor::from_vec(v, (b, 1, 1), &dev);
        let (lq, lk, lo, neg_hi) = (col(lq)?, col(lk)?, col(lo)?, col(hi)?);
        let i = Tensor::arange(0i64, params::to_i64("max_seqlen_q", max_q).c()?, &dev)?
            .reshape((1, max_q, 1))?;
        let j = Tensor::arange(0i64, params::to_i64("max_seqlen_k", max_k).c()?, &dev)?
            .reshape((1, 1, max_k))?;
        let qk = (b, max_q, max_k);
        let zero = Tensor::new(0f32, &dev)?.broadcast_as(qk)?;
        let valid = i
            .broadcast_lt(&lq)?
            .broadcast_minimum(&j.broadcast_lt(&lk)?)?;
        // d = i + len_k - len_q - j (the query's diagonal minus the key);
        // the window keeps -right <= d <= left.
        let d = i.broadcast_add(&(&lk - &lq)?)?.broadcast_sub(&j)?;
        let hide = {
            let sees = d.broadcast_le(&lo)?.minimum(&d.broadcast_ge(&neg_hi)?)?;
            let ninf = Tensor::new(f32::NEG_INFINITY, &dev)?.broadcast_as(qk)?;
            // valid > sees: a valid element the window hides.
            valid.gt(&sees)?.where_cond(&ninf, &zero)?
        };
        let dist = valid.where_cond(&d.to_dtype(candle_core::DType::F32)?.abs()?.neg()?, &zero)?;
        (dist, hide)
    };
    // The two full-size tensors (see `build_bytes`): slope * -|d|, then
    // the mask added (-inf stays -inf for any finite slope).
    let bias = slopes4.broadcast_mul(&dist.unsqueeze(1)?)?;
    drop(dist);
    bias.broadcast_add(&hide.unsqueeze(1)?)?.contiguous()
}

/// `cfg` with the varlen bias input: `[B, H, S_q, S_kv]` f32, no dBias.
pub fn with_varlen_bias(cfg: SdpaConfig) -> SdpaConfig {
    cfg.bias(AttnBias::new(true, true).with_dtype(DType::F32))
}

#[cfg(test)]
pub(crate) mod tests {
    use candle_core::{Device, Tensor};

    use super::*;

    /// A cap no test bias reaches.
    const CAP: usize = 1 << 30;

    fn slopes() -> Tensor {
        Tensor::new(&[0.5f32], &Device::Cpu).unwrap()
    }

    /// The bias of a causal chunked prefill, by hand: sequence 0 (2
    /// queries, 3 keys, diagonal at `i + 1`), sequence 1 (1 query, 2 keys),
    /// `-0.5 |d - j|` where a row sees the key, `-inf` past the diagonal,
    /// 0 in the padding.
    #[test]
    fn bias_by_hand() {
        let p = AttnParams::new(1.0)
            .causal(true)
            .alibi_slopes(Some(slopes()));
        let b = varlen_alibi_bias(&p, (&[0, 2, 3], &[0, 3, 5]), (3, 5), (2, 3), 1, CAP)
            .unwrap()
            .expect("a bias");
        assert_eq!(b.dims(), [2, 1, 2, 3]);
        let ninf = f32::NEG_INFINITY;
        let want = [
            [[-0.5, 0.0, ninf], [-1.0, -0.5, 0.0]],
            [[-0.5, 0.0, 0.0], [0.0, 0.0, 0.0]],
        ];
        let got = b.squeeze(1).unwrap().to_vec3::<f32>().unwrap();
        for (bi, rows) in want.iter().enumerate() {
            for (i, row) in rows.iter().enumerate() {
                assert_eq!(got[bi][i], row.to_vec(), "sequence {bi} row {i}");
            }
        }
    }

    #[test]
    fn packed_causal_prefill_needs_no_bias() {
        let p = AttnParams::new(1.0)
            .causal(true)
            .alibi_slopes(Some(slopes()));
        assert!(!needs_bias(&p, &[2, 5], &[2, 5], (5, 5)).unwrap());
        assert!(needs_bias(&p, &[2, 5], &[3, 5], (5, 5)).unwrap());
        let nc = AttnParams::new(1.0).alibi_slopes(Some(slopes()));
        assert!(needs_bias(&nc, &[2, 5], &[2, 5], (5, 5)).unwrap());
        assert!(!needs_bias(&AttnParams::new(1.0), &[1], &[2], (1, 2)).unwrap());
        // No bias without slopes, whatever the lengths.
        let none = varlen_alibi_bias(
            &AttnParams::new(1.0),
            (&[0, 1], &[0, 9]),
            (1, 9),
            (1, 9),
            1,
            CAP,
        );
        assert!(none.unwrap().is_none());
    }

    #[test]
    fn a_row_with_no_key_is_refused_typed() {
        // Causal, 3 queries and 1 key: rows 0 and 1 see no key.
        let p = AttnParams::new(1.0)
            .causal(true)
            .alibi_slopes(Some(slopes()));
        let e = varlen_alibi_bias(&p, (&[0, 3], &[0, 1]), (3, 1), (3, 1), 1, CAP).unwrap_err();
        let candle_core::Error::Cuda(b) = &e else {
            panic!("not the crate's error: {e}");
        };
        let t = b.downcast_ref::<cudnn::Error>().expect("typed");
        assert!(t.to_string().contains("alibi_slopes"), "{t}");
    }

    /// The bias's size by hand: `2 x 8 x 1024 x 1024` f32 is 64 MiB;
    /// building it takes the product and the sum (128 MiB) plus 32 bytes
    /// per `2 x 1024 x 1024` element (64 MiB): 192 MiB, three times the
    /// bias (review alibi defect 3: 64 MiB was accepted before).
    #[test]
    fn bias_size_by_hand() {
        let n = 2 * 8 * 1024 * 1024;
        let peak = 192 << 20;
        assert_eq!(build_bytes((2, 8), (1024, 1024)), Some(peak));
        assert_eq!(bias_elems((2, 8), (1024, 1024), peak).unwrap(), n);
        let e = bias_elems((2, 8), (1024, 1024), 4 * n).unwrap_err();
        assert!(e.to_string().contains(&peak.to_string()), "{e}");
        let e = bias_elems((2, 8), (1024, 1024), peak - 1).unwrap_err();
        assert!(matches!(e, cudnn::Error::InvalidArgument { .. }), "{e}");
        assert!(e.to_string().contains("max_seqlen_q / max_seqlen_k"), "{e}");
        assert!(e.to_string().contains("[2, 8, 1024, 1024]"), "{e}");
    }

    /// Review finding 2: a varlen call whose `max_seqlen_*` is huge (the
    /// lengths are small) is refused, typed, before the bias is built
    /// (before: candle's unchecked product, a panic in debug, a wrapped
    /// size in release).
    #[test]
    fn huge_max_seqlen_is_refused_before_the_bias() {
        let p = AttnParams::new(1.0).alibi_slopes(Some(slopes()));
        for (mq, mk) in [
            (usize::MAX, usize::MAX),
            (1 << 40, 1 << 40),
            (3, usize::MAX / 2),
        ] {
            let e = varlen_alibi_bias(&p, (&[0, 2, 3], &[0, 3, 5]), (3, 5), (mq, mk), 1, CAP)
                .unwrap_err();
            let candle_core::Error::Cuda(b) = &e else {
                panic!("not the crate's error: {e}");
            };
            let t = b.downcast_ref::<cudnn::Error>().expect("typed");
            assert!(t.to_string().contains("max_seqlen_q / max_seqlen_k"), "{t}");
        }
    }

    proptest::proptest! {
        /// Any sizes: `bias_elems` is the exact product when the bytes
        /// building it takes (the two full-size f32 tensors, 8 bytes per
        /// element, and 32 per `(batch, q, k)` element) fit the cap, a
        /// typed refusal otherwise, never a panic (computed here in u128,
        /// checked).
        #[test]
        fn bias_elems_is_the_checked_product(
            b in 0usize..1 << 20,
            h in 0usize..1 << 10,
            mq in proptest::prop_oneof![0usize..1 << 16, proptest::num::usize::ANY],
            mk in proptest::prop_oneof![0usize..1 << 16, proptest::num::usize::ANY],
            cap in proptest::num::usize::ANY,
        ) {
            let n = (b as u128 * h as u128)
                .checked_mul(mq as u128)
                .and_then(|n| n.checked_mul(mk as u128));
            let qk = (b as u128 * mq as u128).checked_mul(mk as u128);
            let peak = qk.and_then(|qk| qk.checked_mul(8 * h as u128 + 32));
            let fits = n.is_some_and(|n| n * 4 <= isize::MAX as u128)
                && peak.is_some_and(|p| p <= cap as u128);
            match bias_elems((b, h), (mq, mk), cap) {
                Ok(got) => proptest::prop_assert!(fits && Some(got as u128) == n),
                Err(e) => {
                    proptest::prop_assert!(!fits);
                    let typed = matches!(e, cudnn::Error::InvalidArgument { .. });
                    proptest::prop_assert!(typed, "{}", e);
                }
            }
        }
    }

    /// Review (alibi) defect 1, by hand: not causal, `window(None,
    /// Some(3))`, one sequence of 5 queries and 2 keys in a call whose
    /// `max_seqlen_k` is 8. FlashAttention keeps `right = 3` (below the
    /// call's 8) and sets `left = 8`: row `i` sits at `d = i - 3` and sees
    /// keys `j <= d + 3`, so row 0 sees key 0 only, rows 1.. both (a rule
    /// per sequence would drop `3 > 2` and let row 0 see both).
    #[test]
    fn window_sides_use_the_call_s_max_seqlen_k() {
        let p = AttnParams::new(1.0)
            .window(None, Some(3))
            .alibi_slopes(Some(slopes()));
        let b = varlen_alibi_bias(&p, (&[0, 5], &[0, 2]), (5, 2), (5, 8), 1, CAP)
            .unwrap()
            .expect("a bias");
        assert_eq!(b.dims(), [1, 1, 5, 8]);
        let got = b.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let ninf = f32::NEG_INFINITY;
        let rows: [[f32; 2]; 5] = [
            [-1.5, ninf],
            [-1.0, -1.5],
            [-0.5, -1.0],
            [0.0, -0.5],
            [-0.5, 0.0],
        ];
        for (i, row) in rows.iter().enumerate() {
            let mut want = row.to_vec();
            want.resize(8, 0.0);
            assert_eq!(got[i * 8..(i + 1) * 8].to_vec(), want, "row {i}");
        }
    }

    /// Review (alibi) defect 1, the varlen case: `window(None, Some(3))`,
    /// `(lq, lk) = (10, 2)`, `max_seqlen_k = 8`: FlashAttention's rows 0-4
    /// see no key (`j <= i - 8 + 3`), so the call is refused, typed (a
    /// rule per sequence let every row see both keys).
    #[test]
    fn rows_hidden_by_the_call_s_window_are_refused() {
        let p = AttnParams::new(1.0)
            .window(None, Some(3))
            .alibi_slopes(Some(slopes()));
        let e = varlen_alibi_bias(&p, (&[0, 10], &[0, 2]), (10, 2), (10, 8), 1, CAP).unwrap_err();
        let candle_core::Error::Cuda(b) = &e else {
            panic!("not the crate's error: {e}");
        };
        let t = b.downcast_ref::<cudnn::Error>().expect("typed");
        assert!(t.to_string().contains("alibi_slopes"), "{t}");
    }

    /// FlashAttention's window for one call, in this test's own words
    /// (`set_params_fprop` after candle-flash-attn's filter): a side above
    /// the call's `seqlen_k` is unbounded; `(None, Some(0))` is causal;
    /// otherwise a missing side becomes `seqlen_k` when the other is set.
    /// Then `mask.h` keeps key `j` for row `i` of a sequence of `lq`
    /// queries and `lk` keys when `d - left <= j <= d + right`, `d = i +
    /// lk - lq`.
    pub(crate) fn fa_sees(
        (left, right): (Option<usize>, Option<usize>),
        seqlen_k: usize,
        (lq, lk): (usize, usize),
        (i, j): (usize, usize),
    ) -> bool {
        let k = seqlen_k as i64;
        let keep = |w: Option<usize>| w.map(|w| w as i64).filter(|&w| w <= k);
        let (mut l, mut r) = (keep(left), keep(right));
        let d = i as i64 + lk as i64 - lq as i64;
        let j = j as i64;
        if l.is_none() && r == Some(0) {
            return j <= d;
        }
        if l.is_none() && r.is_some() {
            l = Some(k);
        }
        if l.is_some() && r.is_none() {
            r = Some(k);
        }
        l.is_none_or(|l| j >= d - l) && r.is_none_or(|r| j <= d + r)
    }

    proptest::proptest! {
        /// Every element of the bias against FlashAttention's rule
        /// ([`fa_sees`], with the call's `max_seqlen_k`): `-slope |i + lk -
        /// lq - j|` where row `i` sees key `j`, `-inf` where it does not,
        /// 0 in the padding; no bias for a packed causal prefill; a typed
        /// refusal exactly when some query row sees none of its
        /// sequence's keys. Windows on both sides, `max_seqlen_*` up to
        /// 4 past every sequence (so a sequence's keys are fewer than the
        /// call's extent).
        #[test]
        fn bias_matches_flash_attention_s_rule(
            pairs in proptest::collection::vec((0usize..7, 1usize..6), 1..4),
            left in proptest::option::of(0usize..9),
            right in proptest::option::of(0usize..9),
            (extra_q, extra_k) in (0usize..3, 0usize..5),
        ) {
            let sl = [0.5f32, 0.25];
            let slopes = Tensor::new(&sl, &Device::Cpu).unwrap();
            let p = AttnParams::new(1.0).window(left, right).alibi_slopes(Some(slopes));
            // cuDNN's own ALiBi (no bias): right 0 (any left window) and
            // every sequence as many keys as queries.
            let cu = |f: &dyn Fn(&(usize, usize)) -> usize| {
                let mut c = vec![0u32];
                for x in &pairs {
                    c.push(c[c.len() - 1] + f(x) as u32);
                }
                c
            };
            let (cq, ck) = (cu(&|x| x.0), cu(&|x| x.1));
            let mq = pairs.iter().map(|x| x.0).max().unwrap_or(0) + extra_q;
            let mk = pairs.iter().map(|x| x.1).max().unwrap_or(0) + extra_k;
            let totals = (cq[cq.len() - 1] as usize, ck[ck.len() - 1] as usize);
            let r = varlen_alibi_bias(&p, (&cq, &ck), totals, (mq, mk), 2, CAP);
            let w = (left, right);
            let empty_row = pairs.iter().any(|&(lq, lk)| {
                (0..lq).any(|i| !(0..lk).any(|j| fa_sees(w, mk, (lq, lk), (i, j))))
            });
            let packed = right == Some(0) && pairs.iter().all(|&(lq, lk)| lq == lk);
            match r {
                Err(e) => proptest::prop_assert!(empty_row, "{}", e),
                Ok(None) => proptest::prop_assert!(packed && !empty_row),
                Ok(Some(b)) => {
                    proptest::prop_assert!(!empty_row && !packed);
                    proptest::prop_assert_eq!(b.dims(), &[pairs.len(), 2, mq, mk]);
                    let v = b.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                    for (bi, &(lq, lk)) in pairs.iter().enumerate() {
                        for (h, &slope) in sl.iter().enumerate() {
                            for i in 0..mq {
                                for j in 0..mk {
                                    let got = v[((bi * 2 + h) * mq + i) * mk + j];
                                    let want = if i >= lq || j >= lk {
                                        0.0
                                    } else if fa_sees(w, mk, (lq, lk), (i, j)) {
                                        let d = i as i64 + lk as i64 - lq as i64;
                                        -slope * (d - j as i64).abs() as f32
                                    } else {
                                        f32::NEG_INFINITY
                                    };
                                    proptest::prop_assert_eq!(got, want, "b {} h {} i {} j {}", bi, h, i, j);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
