//! FlashAttention's ALiBi in a varlen call that cuDNN's own ALiBi cannot
//! compute (not causal, or a sequence with `seqlen_q != seqlen_k`): a
//! score bias `[B, H, max_seqlen_q, max_seqlen_k]` f32, sequence `b`'s
//! block `-slope * |i + seqlen_k[b] - seqlen_q[b] - j|` with its window
//! as `-inf` (the dense call's bias for that sequence's lengths), zero in
//! the padding (which the padding mask hides). cuDNN takes a full bias
//! with ragged Q, K, V and padding masks (planned for an H200 by the host
//! tier). Its size is `B * H * max_q * max_k * 4` bytes on the device.

use candle_core::Tensor;
use cudnn::graph::{AttnBias, DType, SdpaConfig};

use crate::device::IntoCandle;
use crate::params::{self, AttnParams};
use crate::side::alibi_bias_tensor;

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

/// The bias of a varlen call (see the module docs), or `None` when the
/// call needs none. `cu` the cumulative lengths, `totals` the packed
/// token counts of q and k, `heads` q's.
///
/// # Errors
/// The lengths, a row that sees no key (typed, naming `alibi_slopes`),
/// slopes not f32 `(heads,)`; candle's (the device allocation).
pub(crate) fn varlen_alibi_bias(
    p: &AttnParams,
    (cu_q, cu_k): (&[u32], &[u32]),
    (total_q, total_k): (usize, usize),
    (max_q, max_k): (usize, usize),
    heads: usize,
) -> candle_core::Result<Option<Tensor>> {
    let Some(slopes) = &p.alibi_slopes else {
        return Ok(None);
    };
    let lens_q = params::lengths("seqlens_q", cu_q, total_q, max_q).c()?;
    let lens_k = params::lengths("seqlens_k", cu_k, total_k, max_k).c()?;
    if !needs_bias(p, &lens_q, &lens_k, (max_q, max_k)).c()? {
        return Ok(None);
    }
    let mut blocks = Vec::with_capacity(lens_q.len());
    for (&lq, &lk) in lens_q.iter().zip(&lens_k) {
        let (lq, lk) = (lq.max(0) as usize, lk.max(0) as usize);
        let b = alibi_bias_tensor(slopes, p, (lq, lk, heads))?
            .pad_with_zeros(2, 0, max_q.saturating_sub(lq))?
            .pad_with_zeros(3, 0, max_k.saturating_sub(lk))?;
        blocks.push(b);
    }
    Ok(Some(Tensor::cat(&blocks, 0)?.contiguous()?))
}

/// `cfg` with the varlen bias input: `[B, H, S_q, S_kv]` f32, no dBias.
pub fn with_varlen_bias(cfg: SdpaConfig) -> SdpaConfig {
    cfg.bias(AttnBias::new(true, true).with_dtype(DType::F32))
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor};

    use super::*;

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
        let b = varlen_alibi_bias(&p, (&[0, 2, 3], &[0, 3, 5]), (3, 5), (2, 3), 1)
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
        let none = varlen_alibi_bias(&AttnParams::new(1.0), (&[0, 1], &[0, 9]), (1, 9), (1, 9), 1);
        assert!(none.unwrap().is_none());
    }

    #[test]
    fn a_row_with_no_key_is_refused_typed() {
        // Causal, 3 queries and 1 key: rows 0 and 1 see no key.
        let p = AttnParams::new(1.0)
            .causal(true)
            .alibi_slopes(Some(slopes()));
        let e = varlen_alibi_bias(&p, (&[0, 3], &[0, 1]), (3, 1), (3, 1), 1).unwrap_err();
        let candle_core::Error::Cuda(b) = &e else {
            panic!("not the crate's error: {e}");
        };
        let t = b.downcast_ref::<cudnn::Error>().expect("typed");
        assert!(t.to_string().contains("alibi_slopes"), "{t}");
    }

    proptest::proptest! {
        /// Every element of the bias against FlashAttention's rule, written
        /// out here: `-slope |i + lk - lq - j|` where row `i` sees key `j`
        /// (causal: `j <= i + lk - lq`), `-inf` where it does not, 0 in
        /// the padding; no bias for a packed causal prefill; a typed
        /// refusal exactly when a causal row sees no key.
        #[test]
        fn bias_matches_flash_attention_s_rule(
            pairs in proptest::collection::vec((0usize..5, 0usize..6), 1..4),
            causal: bool,
        ) {
            let sl = [0.5f32, 0.25];
            let slopes = Tensor::new(&sl, &Device::Cpu).unwrap();
            let p = AttnParams::new(1.0).causal(causal).alibi_slopes(Some(slopes));
            let cu = |f: &dyn Fn(&(usize, usize)) -> usize| {
                let mut c = vec![0u32];
                for x in &pairs {
                    c.push(c[c.len() - 1] + f(x) as u32);
                }
                c
            };
            let (cq, ck) = (cu(&|x| x.0), cu(&|x| x.1));
            let mq = pairs.iter().map(|x| x.0).max().unwrap_or(0);
            let mk = pairs.iter().map(|x| x.1).max().unwrap_or(0);
            let totals = (cq[cq.len() - 1] as usize, ck[ck.len() - 1] as usize);
            let r = varlen_alibi_bias(&p, (&cq, &ck), totals, (mq, mk), 2);
            let empty_row = causal && pairs.iter().any(|&(lq, lk)| lq > lk);
            let packed = causal && pairs.iter().all(|&(lq, lk)| lq == lk);
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
                                    } else {
                                        let d = i as i64 + lk as i64 - lq as i64;
                                        if causal && j as i64 > d {
                                            f32::NEG_INFINITY
                                        } else {
                                            -slope * (d - j as i64).abs() as f32
                                        }
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
