//! FlashAttention's ALiBi in KV-cache and paged calls
//! (`flash_attn_with_kvcache`'s `alibi_slopes`).
//!
//! FlashAttention's kernels (`alibi.h`, used by the split-KV kernel of
//! `mha_fwd_kvcache` with each batch row's own key count, `cache_seqlens[b]`)
//! add to the scaled score of query `i` and key `j` of sequence `b`:
//! `-slope[h] * |i + cache_seqlens[b] - seq_q - j|` (the query's distance
//! to the key from its bottom-right diagonal position), or, causal,
//! `slope[h] * j`, which differs from the distance form by a constant per
//! row on every key a causal row sees (the softmax cancels it). As in the
//! dense and varlen calls, the crate uses the distance form (the one that
//! stays exact with sinks, see [`AttnParams::alibi_slopes`]).
//!
//! cuDNN's own ALiBi (`slope * (col - row)`) needs a top-left causal mask:
//! it is FlashAttention's exactly when the call is causal and every
//! sequence has as many valid keys as queries (`cache_seqlens[b] ==
//! seq_q`, a prefill into an empty cache), where the bottom-right diagonal
//! is the top-left one (`params::kvcache` / `params::paged` build that).
//! Every other call (a decode step, a chunk after a prefix, no causal
//! mask, a window) gets the per-sequence score bias of the varlen calls
//! (`[batch, heads, seq_q, capacity]` f32, the mask in it, built on the
//! device each call: its size is `4 * batch * heads * seq_q * capacity`
//! bytes, and building it takes about twice that plus 32 bytes per
//! `(batch, seq_q, capacity)` element, checked against the device's total
//! memory first, after the op's shape checks: [`shapes_first`]).

use candle_core::Tensor;
use cudnn::Error;

use crate::device::{IntoCandle, to_candle};
use crate::params::{self, AttnParams};

/// The params and the score bias of a KV-cache or paged call with `p`
/// (ready: slopes f32 `(heads,)`): `p` unchanged and no bias when there
/// are no slopes or cuDNN's ALiBi is exact (see the module docs);
/// otherwise `p` without slopes and window and the bias holding them.
/// `(batch, seq_q, heads)` are q's dims, `lens` the valid keys per
/// sequence (checked here: `0..=max_kv`, one per sequence and, causal, at
/// least `seq_q`), `max_kv` the keys a sequence may have (the cache's
/// capacity, or `max_blocks_per_seq * block_size`), `cap` the device's
/// memory in bytes (asked only when a bias is built).
///
/// # Errors
/// A length out of range (typed, naming `cache_seqlens[i]`), the mask's
/// rules, a bias past `cap` (typed); candle's.
pub(crate) fn cache_alibi(
    p: AttnParams,
    rows: Option<&Tensor>,
    (batch, seq_q, heads): (usize, usize, usize),
    lens: &[i64],
    max_kv: usize,
    cap: impl FnOnce() -> candle_core::Result<usize>,
) -> candle_core::Result<(AttnParams, Option<Tensor>)> {
    if p.alibi_slopes.is_none() {
        return Ok((p, None));
    }
    let m = params::mask(&p, seq_q, max_kv, true).c()?;
    let mut lens32 = Vec::with_capacity(lens.len());
    for (i, &l) in lens.iter().enumerate() {
        let ok = u32::try_from(l).ok().filter(|&u| u as usize <= max_kv);
        lens32.push(ok.ok_or_else(|| {
            to_candle(Error::invalid(
                format!("cache_seqlens[{i}]"),
                format!("must be in 0..={max_kv} (the keys a sequence may have)"),
                l,
            ))
        })?);
    }
    let (lens_q, lens_kv) = params::kvcache_lens(batch, seq_q, max_kv, m.causal, &lens32).c()?;
    if rows.is_none()
        && !crate::varlen_bias::needs_bias(&p, &lens_q, &lens_kv, (seq_q, max_kv)).c()?
    {
        return Ok((p, None));
    }
    let cap = cap()?;
    // The size first, named in this call's terms (the varlen builder
    // names max_seqlen_*).
    if crate::varlen_bias::bias_elems((batch, heads), (seq_q, max_kv), cap).is_err() {
        let peak = crate::varlen_bias::build_bytes((batch, heads), (seq_q, max_kv))
            .map_or_else(|| "more than usize::MAX".to_string(), |b| b.to_string());
        return Err(to_candle(Error::invalid(
            "seq_q / cache capacity (the ALiBi score bias)",
            format!(
                "the bias [batch, heads, seq_q, capacity] f32 takes, while it is built, {peak} \
                 bytes (8 * heads + {} per batch x seq_q x capacity element), which must fit \
                 in {cap} bytes (the device's memory)",
                crate::varlen_bias::BUILD_BYTES_PER_QK
            ),
            format!("[{batch}, {heads}, {seq_q}, {max_kv}]"),
        )));
    }
    let bias =
        crate::varlen_bias::lens_bias(&p, rows, (&lens_q, &lens_kv), (seq_q, max_kv), heads, cap)?;
    Ok((p.alibi_slopes(None).window(None, None), Some(bias)))
}

/// [`cache_alibi`] for q and its call: q's dims (a q of another rank, or
/// caches whose rank gives no `max_kv`, keep `p` unchanged: the op
/// refuses them, typed) and the device's memory.
///
/// # Errors
/// As [`cache_alibi`]; q not on a CUDA device when a bias is needed.
pub(crate) fn for_call(
    op: &str,
    q: &Tensor,
    (p, rows): (AttnParams, Option<Tensor>),
    lens: &[i64],
    max_kv: usize,
) -> candle_core::Result<(AttnParams, Option<Tensor>)> {
    // Shapes the op refuses (typed, naming them) pass through unchanged.
    let (Some(slopes), [b, sq, h, _], false) =
        (p.alibi_slopes.clone(), q.dims(), max_kv == usize::MAX)
    else {
        return Ok((p, None));
    };
    let (b, sq, h) = (*b, *sq, *h);
    cache_alibi(p, rows.as_ref(), (b, sq, h), lens, max_kv, || {
        crate::varlen::bias_cap(op, q, &slopes)
    })
}

/// Row-major strides of `dims` (the layout the op's preparation gives an
/// input it copies; one it keeps is re-checked by the op itself).
pub(crate) fn packed_strides(dims: &[usize]) -> Vec<usize> {
    let mut st = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        st[i] = st[i + 1].saturating_mul(dims[i + 1]);
    }
    st
}

/// `Arg`s of `ts` named `names` with the strides `st` (one per tensor).
pub(crate) fn args<'a>(
    names: [&'a str; 3],
    ts: [&'a Tensor; 3],
    st: &'a [Vec<usize>],
) -> Vec<params::Arg<'a>> {
    ts.iter()
        .zip(st)
        .zip(names)
        .map(|((t, st), name)| params::Arg {
            name,
            dims: t.dims(),
            strides: st,
            dtype: t.dtype(),
        })
        .collect()
}

/// The op's own shape checks (`params::kvcache`, or `params::paged` with
/// the block table), run on q, k, v's dims before a score bias is built,
/// so that a call the op refuses (head counts, GQA, `v_cache` against
/// `k_cache`, block-table entries, lengths) does no device work first.
/// `p` without its slopes (the bias holds them) and with its window (the
/// same mask rules `cache_alibi` applies). Nothing is checked without
/// slopes (no bias then; the op checks).
///
/// # Errors
/// The op's typed errors.
pub(crate) fn shapes_first(
    p: &AttnParams,
    [q, k, v]: [&Tensor; 3],
    lens: &[i64],
    table: Option<(&[usize], &[i64])>,
) -> candle_core::Result<()> {
    if p.alibi_slopes.is_none() {
        return Ok(());
    }
    let st: Vec<Vec<usize>> = [q, k, v].iter().map(|t| packed_strides(t.dims())).collect();
    let args = args(["q", "k_cache", "v_cache"], [q, k, v], &st);
    let (qa, ka, va) = (&args[0], &args[1], &args[2]);
    let p = p.clone().alibi_slopes(None);
    match table {
        None => {
            let mut l32 = Vec::with_capacity(lens.len());
            for (i, &l) in lens.iter().enumerate() {
                l32.push(u32::try_from(l).map_err(|_| {
                    to_candle(Error::invalid(
                        format!("cache_seqlens[{i}]"),
                        "must fit u32",
                        l,
                    ))
                })?);
            }
            params::kvcache(qa, ka, va, &l32, &p).c()?;
        }
        Some(t) => {
            params::paged(qa, ka, va, t, lens, &p).c()?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor};
    use proptest::prelude::*;

    use super::*;

    const CAP: usize = 1 << 30;

    fn slopes() -> Tensor {
        Tensor::new(&[0.5f32, 0.25], &Device::Cpu).unwrap()
    }

    /// A decode step (one query) against two sequences of 3 and 1 valid
    /// keys in a cache of 4, causal, by hand: row 0 of sequence 0 sits at
    /// key 2 and sees keys 0..=2 with `-slope * (2 - j)`; sequence 1's
    /// row sits at key 0; the padding is 0 (hidden by the padding mask).
    #[test]
    fn decode_bias_by_hand() {
        let p = AttnParams::new(1.0)
            .causal(true)
            .alibi_slopes(Some(slopes()));
        let (p2, b) = cache_alibi(p, None, (2, 1, 2), &[3, 1], 4, || Ok(CAP)).unwrap();
        assert!(p2.alibi_slopes.is_none() && p2.window_size_right.is_none());
        let b = b.expect("a bias");
        assert_eq!(b.dims(), [2, 2, 1, 4]);
        let got = b.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let want = [
            [-1.0, -0.5, 0.0, 0.0],  // b 0, h 0 (slope 0.5)
            [-0.5, -0.25, 0.0, 0.0], // b 0, h 1 (slope 0.25)
            [0.0, 0.0, 0.0, 0.0],    // b 1, h 0
            [0.0, 0.0, 0.0, 0.0],    // b 1, h 1
        ];
        assert_eq!(got, want.concat());
    }

    /// FlashAttention's `(batch, heads)` slopes whose rows differ: each
    /// sequence its own row, always as the bias (also where the call would
    /// otherwise take cuDNN's ALiBi), by hand; rows of another shape are
    /// refused, typed; a dense call still refuses them (typed).
    #[test]
    fn slope_rows_per_sequence_by_hand() {
        let rows = Tensor::new(&[[0.5f32, 0.25], [1.0, 2.0]], &Device::Cpu).unwrap();
        let given = AttnParams::new(1.0)
            .causal(true)
            .alibi_slopes(Some(rows.clone()));
        let (p, r) = crate::side::ready_params_rows(&given).unwrap();
        let r = r.expect("rows that differ come back");
        assert_eq!(p.alibi_slopes.as_ref().unwrap().dims(), [2]);
        // Prefill (every length seq_q = 2): still the bias.
        let (_, b) = cache_alibi(p.clone(), Some(&r), (2, 2, 2), &[2, 2], 3, || Ok(CAP)).unwrap();
        let got = b
            .expect("a bias")
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let ninf = f32::NEG_INFINITY;
        let want = [
            [0.0, ninf, 0.0, -0.5, 0.0, 0.0],  // b 0, h 0 (0.5)
            [0.0, ninf, 0.0, -0.25, 0.0, 0.0], // b 0, h 1 (0.25)
            [0.0, ninf, 0.0, -1.0, 0.0, 0.0],  // b 1, h 0 (1.0)
            [0.0, ninf, 0.0, -2.0, 0.0, 0.0],  // b 1, h 1 (2.0)
        ];
        assert_eq!(got, want.concat());
        let e = cache_alibi(p, Some(&r), (3, 2, 2), &[2, 2, 2], 3, || Ok(CAP)).unwrap_err();
        assert!(e.to_string().contains("alibi_slopes"), "{e}");
        let e = crate::side::ready_params(&given).unwrap_err();
        // The message names no call it does not fit (a captured paged
        // call refuses them through the same function).
        assert!(e.to_string().contains("one slope per head"), "{e}");
        assert!(!e.to_string().contains("in a dense call"), "{e}");
    }

    /// A prefill into empty caches (every length `seq_q`), causal: cuDNN's
    /// ALiBi, no bias, the slopes kept; the same lengths not causal, or
    /// one length longer, take the bias.
    #[test]
    fn native_only_when_every_length_is_seq_q() {
        let p = AttnParams::new(1.0)
            .causal(true)
            .alibi_slopes(Some(slopes()));
        let (p2, b) = cache_alibi(p.clone(), None, (2, 3, 2), &[3, 3], 8, || {
            panic!("no bias: the memory is not asked")
        })
        .unwrap();
        assert!(b.is_none() && p2 == p);
        let (_, b) = cache_alibi(p.clone(), None, (2, 3, 2), &[3, 4], 8, || Ok(CAP)).unwrap();
        assert_eq!(b.expect("a bias").dims(), [2, 2, 3, 8]);
        let nc = p.clone().causal(false);
        let (_, b) = cache_alibi(nc, None, (2, 3, 2), &[3, 3], 8, || Ok(CAP)).unwrap();
        assert!(b.is_some());
        // And the native config plans: params::kvcache accepts the slopes
        // then (top-left), refuses them otherwise (typed).
        let none = AttnParams::new(1.0);
        assert!(
            cache_alibi(none, None, (2, 1, 2), &[0, 9], 9, || Ok(CAP))
                .unwrap()
                .1
                .is_none()
        );
    }

    /// Lengths out of range and causal rows that would see no key are
    /// refused, typed, naming the entry, before any bias.
    #[test]
    fn bad_lengths_are_typed() {
        let p = AttnParams::new(1.0)
            .causal(true)
            .alibi_slopes(Some(slopes()));
        for (lens, name) in [
            (vec![3i64, 9], "cache_seqlens[1]"),
            (vec![-1, 3], "cache_seqlens[0]"),
            (vec![1, 3], "cache_seqlens[0]"),
        ] {
            let e = cache_alibi(p.clone(), None, (2, 2, 2), &lens, 8, || Ok(CAP)).unwrap_err();
            let candle_core::Error::Cuda(b) = &e else {
                panic!("not the crate's error: {e}");
            };
            let t = b.downcast_ref::<Error>().expect("typed").to_string();
            assert!(t.contains(name), "{t}");
        }
        let e = cache_alibi(p, None, (2, 2, 2), &[3, 4], 8, || Ok(16)).unwrap_err();
        assert!(e.to_string().contains("seq_q / cache capacity"), "{e}");
        assert!(e.to_string().contains("[2, 2, 2, 8]"), "{e}");
    }

    /// Review (alibi) defect 1, by hand: 4 queries, capacity 8, one
    /// sequence of 2 keys, not causal, `window(Some(2), None)`.
    /// FlashAttention's `mha_fwd_kvcache` fills the right side with its
    /// `seqlen_k`, the capacity 8: row `i` (at `d = i - 2`) sees `j in [d -
    /// 2, d + 8]`, both keys for every row, `-0.5 |d - j|`; the padding 0.
    #[test]
    fn left_window_alone_bounds_the_right_at_the_capacity() {
        let p = AttnParams::new(1.0)
            .window(Some(2), None)
            .alibi_slopes(Some(Tensor::new(&[0.5f32], &Device::Cpu).unwrap()));
        let (p2, b) = cache_alibi(p, None, (1, 4, 1), &[2], 8, || Ok(CAP)).unwrap();
        assert!(p2.alibi_slopes.is_none() && p2.window_size_left.is_none());
        let b = b.expect("a bias");
        assert_eq!(b.dims(), [1, 1, 4, 8]);
        let got = b.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        for (i, row) in [[-1.0f32, -1.5], [-0.5, -1.0], [0.0, -0.5], [-0.5, 0.0]]
            .iter()
            .enumerate()
        {
            let mut want = row.to_vec();
            want.resize(8, 0.0);
            assert_eq!(got[i * 8..(i + 1) * 8].to_vec(), want, "row {i}");
        }
        // One key, `window(Some(1), None)`: every row sees key 0 (right
        // bound 8), `-0.5 |i - 3|`; a rule per sequence refused it.
        let p = AttnParams::new(1.0)
            .window(Some(1), None)
            .alibi_slopes(Some(Tensor::new(&[0.5f32], &Device::Cpu).unwrap()));
        let (_, b) = cache_alibi(p, None, (1, 4, 1), &[1], 8, || Ok(CAP)).unwrap();
        let got = b
            .expect("a bias")
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let col: Vec<f32> = (0..4).map(|i| got[i * 8]).collect();
        assert_eq!(col, [-1.5, -1.0, -0.5, 0.0]);
    }

    /// Review (alibi) defect 3: a KV-cache or paged call with slopes that
    /// the op refuses (3 q heads over 2 KV heads; `v_cache` of another
    /// head count than `k_cache`; a block-table entry past the cache) is
    /// refused with the op's typed error naming the argument before the
    /// score bias is built. Before, the bias came first: on the host here
    /// its device query failed ("CUDA"), on a device it was built in full.
    #[test]
    fn the_op_s_checks_come_before_the_bias() {
        let z = |d: &[usize]| Tensor::zeros(d, candle_core::DType::F16, &Device::Cpu).unwrap();
        let sl = Tensor::new(&[0.5f32, 0.25, 0.125], &Device::Cpu).unwrap();
        let p = AttnParams::new(1.0).alibi_slopes(Some(sl));
        let lens = Tensor::new(&[5u32], &Device::Cpu).unwrap();
        let named = |r: candle_core::Result<Tensor>, what: &str| {
            let e = r.unwrap_err();
            let candle_core::Error::Cuda(b) = &e else {
                panic!("not the crate's error: {e}");
            };
            let t = b.downcast_ref::<Error>().expect("typed").to_string();
            assert!(t.contains(what), "{t} does not name {what}");
        };
        let q = z(&[1, 1, 3, 64]);
        named(
            crate::flash_attn_kvcache(&q, &z(&[1, 8, 2, 64]), &z(&[1, 8, 2, 64]), &lens, &p),
            "heads",
        );
        let q4 = z(&[1, 1, 4, 64]);
        let p4 = p
            .clone()
            .alibi_slopes(Some(Tensor::new(&[0.5f32; 4], &Device::Cpu).unwrap()));
        named(
            crate::flash_attn_kvcache(&q4, &z(&[1, 8, 2, 64]), &z(&[1, 8, 1, 64]), &lens, &p4),
            "v heads (k's)",
        );
        let table = Tensor::new(&[[0i32, 7]], &Device::Cpu).unwrap();
        let plens = Tensor::new(&[5i32], &Device::Cpu).unwrap();
        named(
            crate::flash_attn_paged(
                &q4,
                &z(&[3, 4, 2, 64]),
                &z(&[3, 4, 2, 64]),
                &table,
                &plens,
                &p4,
            ),
            "block_table",
        );
        // Varlen: 3 q heads over 2 KV heads, the score-bias path (not
        // causal).
        let cu = Tensor::new(&[0u32, 2], &Device::Cpu).unwrap();
        named(
            crate::flash_attn_varlen_with(
                &z(&[2, 3, 64]),
                &z(&[2, 2, 64]),
                &z(&[2, 2, 64]),
                &cu,
                &cu,
                2,
                2,
                &p,
            ),
            "heads",
        );
    }

    proptest! {
        /// Every element against FlashAttention's rule written out in the
        /// tests (`varlen_bias::tests::fa_sees`, its window sides at the
        /// call's `seqlen_k`, the capacity; the diagonal at `i + len -
        /// seq_q`): `-slope |i + len - seq_q - j|` where row `i` sees key
        /// `j`, `-inf` where not, 0 past the length; or no bias exactly
        /// for a causal call whose every length is `seq_q` (cuDNN's
        /// ALiBi); or a typed refusal exactly when a length is out of
        /// range, or a query row sees no key (causal: a length below
        /// `seq_q`), or a right bound cuDNN's band cannot hold (refused
        /// by the KV-cache call's mask, typed). Lengths from 1 (a
        /// sequence with no key is not compared here).
        #[test]
        fn bias_is_flash_attention_s(
            lens in proptest::collection::vec(1i64..8, 1..4),
            sq in 1usize..6,
            left in proptest::option::of(0usize..8),
            right in proptest::option::of(0usize..8),
        ) {
            let max_kv = 6usize;
            let sl = [0.5f32, 0.25];
            let p = AttnParams::new(1.0)
                .window(left, right)
                .alibi_slopes(Some(Tensor::new(&sl, &Device::Cpu).unwrap()));
            let b = lens.len();
            let r = cache_alibi(p.clone(), None, (b, sq, 2), &lens, max_kv, || Ok(CAP));
            let w = (left, right);
            let sees = |l: i64, i: usize, j: usize| {
                crate::varlen_bias::tests::fa_sees(w, max_kv, (sq, l as usize), (i, j))
            };
            let causal = right == Some(0);
            let too_long = lens.iter().any(|&l| l as usize > max_kv);
            // A row that sees none of its sequence's keys.
            let empty = !too_long
                && lens
                    .iter()
                    .any(|&l| (0..sq).any(|i| !(0..l as usize).any(|j| sees(l, i, j))));
            match r {
                Err(e) => {
                    // Or a right bound cuDNN's band mask cannot hold, which
                    // the KV-cache call refuses, typed, naming it.
                    let band = e.to_string().contains("window_size_right");
                    prop_assert!(too_long || empty || band, "{}", e);
                }
                Ok((_, None)) => prop_assert!(
                    !too_long && !empty && causal && lens.iter().all(|&l| l as usize == sq)
                ),
                Ok((p2, Some(t))) => {
                    prop_assert!(!too_long && p2.alibi_slopes.is_none());
                    prop_assert_eq!(t.dims(), &[b, 2, sq, max_kv]);
                    let v = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                    for (bi, &l) in lens.iter().enumerate() {
                        for (h, &s) in sl.iter().enumerate() {
                            for i in 0..sq {
                                for j in 0..max_kv {
                                    let got = v[((bi * 2 + h) * sq + i) * max_kv + j];
                                    let d = i as i64 + l - sq as i64;
                                    let jj = j as i64;
                                    let want = if jj >= l {
                                        0.0
                                    } else if sees(l, i, j) {
                                        -s * (d - jj).abs() as f32
                                    } else {
                                        f32::NEG_INFINITY
                                    };
                                    prop_assert_eq!(got, want, "b {} h {} i {} j {}", bi, h, i, j);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
