//! The checks against hand-computed values and FlashAttention's documented
//! mask rule (an independent statement of it, below), plus property tests
//! over the shape checks.

use super::*;
use proptest::prelude::*;

fn a<'x>(name: &'x str, dims: &'x [usize], strides: &'x [usize], dtype: CDType) -> Arg<'x> {
    Arg {
        name,
        dims,
        strides,
        dtype,
    }
}

fn contiguous(d: &[usize]) -> Vec<usize> {
    let mut s = vec![1; d.len()];
    for i in (0..d.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * d[i + 1];
    }
    s
}

fn arg_of(e: &Error) -> String {
    match e {
        Error::InvalidArgument { arg, .. } => arg.clone(),
        Error::Mismatch { what, .. } => what.clone(),
        other => format!("{other:?}"),
    }
}

/// FlashAttention's rule, from candle-flash-attn's code and the kernel's
/// mask.h (not from the crate's): a side above `s_kv` is -1 (unbounded);
/// left -1 with right 0 is causal (`j <= i + s_kv - s_q`); otherwise a
/// missing side becomes `s_kv` when the other is set, and query `i` sees
/// `i + s_kv - s_q - left <= j < i + 1 + s_kv - s_q + right`.
fn fa_sees(i: i64, j: i64, sq: i64, skv: i64, left: Option<usize>, right: Option<usize>) -> bool {
    let side = |w: Option<usize>| w.filter(|&w| w as i64 <= skv).map_or(-1, |w| w as i64);
    let (mut l, mut r) = (side(left), side(right));
    if l < 0 && r == 0 {
        return j < i + 1 + skv - sq;
    }
    if l < 0 && r >= 0 {
        l = skv;
    }
    if l >= 0 && r < 0 {
        r = skv;
    }
    if l < 0 && r < 0 {
        return true;
    }
    j >= i + skv - sq - l && j < i + 1 + skv - sq + r
}

/// The crate's documented mask (`SdpaConfig::window`, `DiagonalAlignment`):
/// `i'` = `i` top-left, `i + s_kv - s_q` bottom-right; causal: `j <= i'`;
/// window `w`: `j > i' - w`.
fn crate_sees(i: i64, j: i64, sq: i64, skv: i64, m: &Mask) -> bool {
    let ip = match m.diagonal {
        DiagonalAlignment::TopLeft => i,
        DiagonalAlignment::BottomRight => i + skv - sq,
    };
    (!m.causal || j <= ip) && m.window.is_none_or(|w| j > ip - w)
}

#[test]
fn causal_equal_lengths_is_top_left() {
    let m = mask(&AttnParams::new(1.0).causal(true), 16, 16, false).unwrap();
    assert_eq!(
        m,
        Mask {
            causal: true,
            window: None,
            diagonal: DiagonalAlignment::TopLeft
        }
    );
}

#[test]
fn causal_decode_step_is_bottom_right() {
    // One new query against 10 cached keys sees all 10 (FlashAttention).
    let m = mask(&AttnParams::new(1.0).causal(true), 1, 10, false).unwrap();
    assert_eq!(m.diagonal, DiagonalAlignment::BottomRight);
    assert!((0..10).all(|j| crate_sees(0, j, 1, 10, &m)));
}

#[test]
fn window_left_three_is_four_keys() {
    // left 3 + causal: keys i-3..=i, 4 of them: the crate's window 4.
    let m = mask(
        &AttnParams::new(1.0).window(Some(3), Some(0)),
        16,
        16,
        false,
    )
    .unwrap();
    assert_eq!(m.window, Some(4));
    assert!(m.causal);
    let seen: Vec<i64> = (0..16).filter(|&j| crate_sees(10, j, 16, 16, &m)).collect();
    assert_eq!(seen, [7, 8, 9, 10]);
}

#[test]
fn windows_reaching_every_key_are_no_bound() {
    let m = mask(
        &AttnParams::new(1.0).window(Some(16), Some(16)),
        16,
        16,
        false,
    )
    .unwrap();
    assert_eq!(m.window, None);
    assert!(!m.causal);
}

#[test]
fn right_window_cudnn_cannot_build_is_named() {
    let e = mask(&AttnParams::new(1.0).window(None, Some(5)), 16, 16, false).unwrap_err();
    assert_eq!(arg_of(&e), "window_size_right");
    assert!(e.to_string().contains("got 5"), "{e}");
}

#[test]
fn ragged_masks_are_bottom_right() {
    let m = mask(&AttnParams::new(1.0).causal(true), 16, 16, true).unwrap();
    assert_eq!(m.diagonal, DiagonalAlignment::BottomRight);
    let m = mask(&AttnParams::new(1.0), 16, 16, true).unwrap();
    assert_eq!(
        m.diagonal,
        DiagonalAlignment::TopLeft,
        "no mask, no alignment"
    );
}

#[test]
fn dense_maps_fused_qkv_strides() {
    // q narrowed out of a fused (b, s, 3*h, d) projection: strides of the
    // parent; cuDNN's [B, H, S, D] order swaps the middle two.
    let (b, s, h, d) = (2usize, 5usize, 4usize, 8usize);
    let st = [s * 3 * h * d, 3 * h * d, d, 1];
    let dims = [b, s, h, d];
    let q = a("q", &dims, &st, CDType::BF16);
    let r = dense(&q, &q, &q, &AttnParams::new(0.125).causal(true)).unwrap();
    assert_eq!(r.strides[0], [480, 8, 96, 1]);
    assert_eq!(r.cfg.dtype, DType::BF16);
    assert_eq!(
        (r.cfg.batch, r.cfg.heads, r.cfg.seq_q, r.cfg.head_dim),
        (2, 4, 5, 8)
    );
    assert_eq!(r.cfg.scale, Some(0.125));
    assert!(r.cfg.is_causal);
}

#[test]
fn dense_gqa_and_head_dim_v() {
    let (qd, kd, vd) = ([1, 7, 8, 64], [1, 9, 2, 64], [1, 9, 2, 32]);
    let (qs, ks, vs) = (contiguous(&qd), contiguous(&kd), contiguous(&vd));
    let r = dense(
        &a("q", &qd, &qs, CDType::F16),
        &a("k", &kd, &ks, CDType::F16),
        &a("v", &vd, &vs, CDType::F16),
        &AttnParams::new(1.0).causal(true),
    )
    .unwrap();
    assert_eq!((r.cfg.kv_heads, r.cfg.seq_kv, r.cfg.head_dim_v), (2, 9, 32));
    assert_eq!(r.cfg.diagonal, DiagonalAlignment::BottomRight);
}

#[test]
fn dense_refusals_name_the_argument() {
    let d = [1usize, 4, 4, 8];
    let s = contiguous(&d);
    let ok = a("q", &d, &s, CDType::F16);
    let p = AttnParams::new(1.0);
    let cases: Vec<(Arg<'_>, Arg<'_>, &str)> = vec![
        (a("q", &d, &s, CDType::F32), ok, "q dtype"),
        (ok, a("k", &d, &s, CDType::BF16), "k dtype (q's)"),
        (a("q", &d[..3], &s[..3], CDType::F16), ok, "q shape"),
        (a("q", &d, &[128, 32, 8, 2], CDType::F16), ok, "q strides"),
        (
            ok,
            a("k", &[1, 4, 3, 8], &[96, 24, 8, 1], CDType::F16),
            "k heads",
        ),
        (
            ok,
            a("k", &[2, 4, 4, 8], &[128, 32, 8, 1], CDType::F16),
            "k batch (q's)",
        ),
        (
            ok,
            a("k", &[1, 4, 4, 16], &[256, 64, 16, 1], CDType::F16),
            "k head_dim (q's)",
        ),
        (a("q", &[1, 0, 4, 8], &s, CDType::F16), ok, "q shape"),
    ];
    for (q, k, want) in cases {
        let v = if k.name == "k" {
            Arg { name: "v", ..k }
        } else {
            Arg { name: "v", ..ok }
        };
        let e = dense(&q, &k, &v, &p).unwrap_err();
        assert_eq!(arg_of(&e), want, "{e}");
    }
    let e = dense(&ok, &ok, &ok, &AttnParams::new(f32::NAN)).unwrap_err();
    assert_eq!(arg_of(&e), "softmax_scale");
    let e = dense(&ok, &ok, &ok, &AttnParams::new(1.0).softcap(Some(-1.0))).unwrap_err();
    assert_eq!(arg_of(&e), "softcap");
}

#[test]
fn bshd_order() {
    let d = [2usize, 8, 4, 16];
    assert!(bshd_ordered(&d, &contiguous(&d)));
    // A (b, h, s, d) buffer viewed as (b, s, h, d): heads outer.
    assert!(!bshd_ordered(&d, &[8 * 4 * 16, 16, 8 * 16, 1]));
    // ... which is fine with one query (decode): the seq dim has no stride that matters.
    assert!(bshd_ordered(&[2, 1, 4, 16], &[4 * 16, 16, 16, 1]));
    assert!(!bshd_ordered(&d[..3], &[1, 1, 1]));
}

#[test]
fn lengths_from_cumulative() {
    assert_eq!(lengths("s", &[0, 3, 3, 7], 7, 4).unwrap(), [3, 0, 4]);
    for (cu, total, max, want) in [
        (&[0u32][..], 0usize, 4usize, "s length"),
        (&[1u32, 3][..], 3, 4, "s[0]"),
        (&[0u32, 3, 2][..], 2, 4, "s[2]"),
        (&[0u32, 5][..], 5, 4, "s[1] - s[0]"),
        (
            &[0u32, 3][..],
            4,
            4,
            "s[last] (the tokens of the packed tensor)",
        ),
    ] {
        let e = lengths("s", cu, total, max).unwrap_err();
        assert_eq!(arg_of(&e), want, "{e}");
    }
}

#[test]
fn varlen_config() {
    let (qd, kd) = ([7usize, 4, 16], [9usize, 2, 16]);
    let (qs, ks) = (contiguous(&qd), contiguous(&kd));
    let q = a("q", &qd, &qs, CDType::BF16);
    let k = a("k", &kd, &ks, CDType::BF16);
    let v = Arg { name: "v", ..k };
    let r = varlen(
        &q,
        &k,
        &v,
        &[0, 3, 7],
        &[0, 4, 9],
        4,
        5,
        &AttnParams::new(1.0).causal(true),
    )
    .unwrap();
    assert_eq!(r.lens_q, [3, 4]);
    assert_eq!(r.lens_kv, [4, 5]);
    assert!(r.cfg.ragged && r.cfg.padding);
    assert_eq!((r.cfg.batch, r.cfg.seq_q, r.cfg.seq_kv), (2, 4, 5));
    assert_eq!(r.cfg.diagonal, DiagonalAlignment::BottomRight);
    let e = varlen(&q, &k, &v, &[0, 3, 7], &[0, 9], 4, 9, &AttnParams::new(1.0)).unwrap_err();
    assert_eq!(arg_of(&e), "seqlens_k length (seqlens_q's: batch + 1)");
    let st = [64usize, 1, 4];
    let e = varlen(
        &a("q", &qd, &st, CDType::BF16),
        &k,
        &v,
        &[0, 7],
        &[0, 9],
        7,
        9,
        &AttnParams::new(1.0),
    )
    .unwrap_err();
    assert_eq!(arg_of(&e), "q strides");
}

#[test]
fn kvcache_config() {
    let (qd, kd) = ([2usize, 1, 4, 16], [2usize, 32, 2, 16]);
    let (qs, ks) = (contiguous(&qd), contiguous(&kd));
    let q = a("q", &qd, &qs, CDType::F16);
    let k = a("k", &kd, &ks, CDType::F16);
    let v = Arg { name: "v", ..k };
    let p = AttnParams::new(1.0).causal(true);
    let r = kvcache(&q, &k, &v, &[5, 32], &p).unwrap();
    assert!(r.dense.cfg.padding && !r.dense.cfg.ragged);
    assert_eq!((r.lens_q, r.lens_kv), (vec![1, 1], vec![5, 32]));
    assert_eq!(r.dense.cfg.diagonal, DiagonalAlignment::BottomRight);
    assert_eq!(r.dense.cfg.seq_kv, 32, "the graph is the capacity's");
    for (lens, want) in [
        (&[5u32][..], "cache_seqlens length (q's batch)"),
        (&[5u32, 33][..], "cache_seqlens[1]"),
    ] {
        let e = kvcache(&q, &k, &v, lens, &p).unwrap_err();
        assert_eq!(arg_of(&e), want, "{e}");
    }
}

/// candle-flash-attn: a left window alone gets the right side `s_kv`, so
/// with `s_q 6`, `s_kv 4`, left 1, row 0 (diagonal -2) sees keys up to 2,
/// not key 3: a bound cuDNN's band lacks, refused naming the window; with
/// `s_q = s_kv + 1` nothing is cut (row 0 at -1 sees up to 3); causal
/// leaves the right at the diagonal.
#[test]
fn left_window_alone_cuts_rows_when_seq_q_passes_seq_kv_plus_one() {
    assert!(!fa_sees(0, 3, 6, 4, Some(1), None) && fa_sees(0, 2, 6, 4, Some(1), None));
    let e = mask(&AttnParams::new(1.0).window(Some(1), None), 6, 4, true).unwrap_err();
    assert_eq!(arg_of(&e), "window_size_left", "{e}");
    // Right window above s_kv: dropped by candle-flash-attn, the same.
    let e = mask(&AttnParams::new(1.0).window(Some(4), Some(9)), 6, 4, true).unwrap_err();
    assert_eq!(arg_of(&e), "window_size_left", "{e}");
    assert!(mask(&AttnParams::new(1.0).window(Some(1), None), 5, 4, true).is_ok());
    assert!(mask(&AttnParams::new(1.0).window(Some(1), Some(0)), 6, 4, true).is_ok());
    // Left above s_kv: no window at all in FlashAttention.
    assert!(mask(&AttnParams::new(1.0).window(Some(5), None), 6, 4, true).is_ok());
    // Varlen: the bound is max_seqlen_k past the diagonal.
    let (qd, kd) = ([6usize, 4, 16], [4usize, 2, 16]);
    let (qs, ks) = (contiguous(&qd), contiguous(&kd));
    let q = a("q", &qd, &qs, CDType::BF16);
    let k = a("k", &kd, &ks, CDType::BF16);
    let v = Arg { name: "v", ..k };
    let p = AttnParams::new(1.0).window(Some(1), None);
    let e = varlen(&q, &k, &v, &[0, 6], &[0, 4], 6, 4, &p).unwrap_err();
    assert_eq!(arg_of(&e), "window_size_left", "{e}");
}

/// A causal sequence with more queries than keys leaves its first rows
/// no key (FlashAttention: query `i` at `i + len_k - len_q` sees `j <=`
/// that, so rows `i < len_q - len_k` see none): refused, typed, naming the
/// sequence; not causal, or as many keys as queries, accepted.
#[test]
fn causal_rows_without_keys_are_refused() {
    let (qd, kd) = ([7usize, 4, 16], [6usize, 2, 16]);
    let (qs, ks) = (contiguous(&qd), contiguous(&kd));
    let q = a("q", &qd, &qs, CDType::BF16);
    let k = a("k", &kd, &ks, CDType::BF16);
    let v = Arg { name: "v", ..k };
    let causal = AttnParams::new(1.0).causal(true);
    // Sequence 0: 3 queries, 3 keys (row 0 sees key 0); sequence 1: 4
    // queries, 3 keys (row 0 at diagonal -1 sees none).
    let e = varlen(&q, &k, &v, &[0, 3, 7], &[0, 3, 6], 4, 4, &causal).unwrap_err();
    assert_eq!(arg_of(&e), "seqlens_k (sequence 1's length)", "{e}");
    assert!(
        varlen(
            &q,
            &k,
            &v,
            &[0, 3, 7],
            &[0, 3, 6],
            4,
            4,
            &AttnParams::new(1.0)
        )
        .is_ok()
    );
    let (qd2, kd2) = ([7usize, 4, 16], [7usize, 2, 16]);
    let (qs2, ks2) = (contiguous(&qd2), contiguous(&kd2));
    let k2 = a("k", &kd2, &ks2, CDType::BF16);
    let v2 = Arg { name: "v", ..k2 };
    let q2 = a("q", &qd2, &qs2, CDType::BF16);
    assert!(varlen(&q2, &k2, &v2, &[0, 3, 7], &[0, 3, 7], 4, 4, &causal).is_ok());
    // A KV cache: two queries per sequence, lengths 5 and 1.
    let (qd, kd) = ([2usize, 2, 4, 16], [2usize, 32, 2, 16]);
    let (qs, ks) = (contiguous(&qd), contiguous(&kd));
    let q = a("q", &qd, &qs, CDType::F16);
    let k = a("k", &kd, &ks, CDType::F16);
    let v = Arg { name: "v", ..k };
    let e = kvcache(&q, &k, &v, &[5, 1], &causal).unwrap_err();
    assert_eq!(arg_of(&e), "cache_seqlens[1]", "{e}");
    assert!(kvcache(&q, &k, &v, &[5, 2], &causal).is_ok());
    assert!(kvcache(&q, &k, &v, &[5, 1], &AttnParams::new(1.0)).is_ok());
}

proptest! {
    /// The mask built for FlashAttention's window sizes is FlashAttention's
    /// mask, key by key, wherever it is built.
    #[test]
    fn mask_matches_flash_attention(
        sq in 1i64..12, skv in 1i64..12,
        left in proptest::option::of(0usize..14),
        right in prop_oneof![Just(None), (0usize..16).prop_map(Some)],
        ragged: bool,
    ) {
        let p = AttnParams::new(1.0).window(left, right);
        let m = match mask(&p, sq as usize, skv as usize, ragged) {
            Ok(m) => m,
            Err(e) => {
                // Refused only where FlashAttention's right bound (other
                // than the causal diagonal) cuts some query's keys, which
                // cuDNN's band cannot express: its right side is the kept
                // right window, or s_kv when only the left one is kept.
                let l_kept = left.filter(|&l| l as i64 <= skv);
                let r_kept = right.filter(|&r| r as i64 <= skv);
                let cut = |r: i64| (0..sq).any(|i| i + skv - sq + r < skv - 1);
                let cuts = match (l_kept, r_kept) {
                    (_, Some(0)) | (None, None) => false,
                    (_, Some(r)) => cut(r as i64),
                    (Some(_), None) => cut(skv),
                };
                prop_assert!(cuts, "refused {:?} / {:?} for sq {} skv {}: {}", left, right, sq, skv, e);
                return Ok(());
            }
        };
        for i in 0..sq {
            for j in 0..skv {
                prop_assert_eq!(
                    crate_sees(i, j, sq, skv, &m),
                    fa_sees(i, j, sq, skv, left, right),
                    "i {} j {} {:?}", i, j, m
                );
            }
        }
    }

    /// Any shapes, strides and dtypes: a typed answer, never a panic; an
    /// accepted call's config says what the tensors say.
    #[test]
    fn dense_checks_total(
        qd in proptest::collection::vec(0usize..6, 3..6),
        kd in proptest::collection::vec(0usize..6, 3..6),
        dt in prop_oneof![Just(CDType::F16), Just(CDType::BF16), Just(CDType::F32)],
        strided: bool,
    ) {
        let qs = if strided { qd.iter().map(|d| d + 1).collect() } else { contiguous(&qd) };
        let ks = contiguous(&kd);
        let q = a("q", &qd, &qs, dt);
        let k = a("k", &kd, &ks, dt);
        let v = Arg { name: "v", ..k };
        match dense(&q, &k, &v, &AttnParams::new(0.5).causal(true)) {
            Ok(r) => {
                prop_assert_eq!(r.cfg.batch as usize, qd[0]);
                prop_assert_eq!(r.cfg.seq_q as usize, qd[1]);
                prop_assert_eq!(r.cfg.heads as usize, qd[2]);
                prop_assert_eq!(r.cfg.kv_heads as usize, kd[2]);
                prop_assert_eq!(qd[2] % kd[2], 0);
                prop_assert!(dt != CDType::F32);
            }
            Err(e) => prop_assert!(
                matches!(e, Error::InvalidArgument { .. } | Error::Mismatch { .. }),
                "{:?}", e
            ),
        }
    }

    /// Cumulative offsets of any lengths give those lengths back.
    #[test]
    fn lengths_round_trip(lens in proptest::collection::vec(0u32..50, 1..9)) {
        let mut cu = vec![0u32];
        for l in &lens {
            cu.push(cu[cu.len() - 1] + l);
        }
        let max = lens.iter().copied().max().unwrap_or(0) as usize;
        let got = lengths("s", &cu, cu[cu.len() - 1] as usize, max).unwrap();
        prop_assert_eq!(got, lens.iter().map(|&l| l as i32).collect::<Vec<_>>());
    }

    /// A causal varlen call is accepted exactly when no sequence has more
    /// queries than keys (FlashAttention's empty rows); any call without
    /// a mask is accepted.
    #[test]
    fn causal_varlen_accepts_iff_every_row_sees_a_key(
        pairs in proptest::collection::vec((1usize..10, 1usize..10), 1..5),
        causal in any::<bool>(),
    ) {
        let cu = |f: &dyn Fn(&(usize, usize)) -> usize| {
            let mut c = vec![0u32];
            for x in &pairs {
                c.push(c[c.len() - 1] + f(x) as u32);
            }
            c
        };
        let (cq, ck) = (cu(&|x| x.0), cu(&|x| x.1));
        let (qd, kd) = ([cq[cq.len() - 1] as usize, 2, 16], [ck[ck.len() - 1] as usize, 2, 16]);
        let (qs, ks) = (contiguous(&qd), contiguous(&kd));
        let q = a("q", &qd, &qs, CDType::BF16);
        let k = a("k", &kd, &ks, CDType::BF16);
        let v = Arg { name: "v", ..k };
        let r = varlen(&q, &k, &v, &cq, &ck, 9, 9, &AttnParams::new(1.0).causal(causal));
        let empty_rows = causal && pairs.iter().any(|&(lq, lk)| lq > lk);
        prop_assert_eq!(r.is_err(), empty_rows, "{:?}", r.err());
    }

    /// ALiBi in a varlen call: accepted (cuDNN's ALiBi, top-left diagonal)
    /// exactly when it is FlashAttention's: causal and every sequence with
    /// as many keys as queries; every other call is refused, typed
    /// `Unsupported` (or the empty-row refusal), never planned with a
    /// wrong bias.
    #[test]
    fn varlen_alibi_accepts_iff_cudnn_alibi_is_flash_attention_s(
        pairs in proptest::collection::vec((1usize..10, 1usize..10), 1..5),
        causal in any::<bool>(),
        same in any::<bool>(),
        left in proptest::option::of(0usize..12),
    ) {
        let pairs: Vec<(usize, usize)> =
            pairs.into_iter().map(|(q, k)| (q, if same { q } else { k })).collect();
        let cu = |f: &dyn Fn(&(usize, usize)) -> usize| {
            let mut c = vec![0u32];
            for x in &pairs {
                c.push(c[c.len() - 1] + f(x) as u32);
            }
            c
        };
        let (cq, ck) = (cu(&|x| x.0), cu(&|x| x.1));
        let (qd, kd) = ([cq[cq.len() - 1] as usize, 2, 16], [ck[ck.len() - 1] as usize, 2, 16]);
        let (qs, ks) = (contiguous(&qd), contiguous(&kd));
        let q = a("q", &qd, &qs, CDType::BF16);
        let k = a("k", &kd, &ks, CDType::BF16);
        let v = Arg { name: "v", ..k };
        let slopes = candle_core::Tensor::new(&[0.5f32, 0.25], &candle_core::Device::Cpu).unwrap();
        let right = if causal { Some(0) } else { None };
        let p = AttnParams::new(1.0).window(left, right).alibi_slopes(Some(slopes));
        let r = varlen(&q, &k, &v, &cq, &ck, 9, 9, &p);
        let equal = pairs.iter().all(|&(lq, lk)| lq == lk);
        match &r {
            Ok(v) => {
                prop_assert!(causal && equal, "accepted: {:?}", pairs);
                prop_assert!(v.cfg.alibi);
                prop_assert_eq!(v.cfg.diagonal, DiagonalAlignment::TopLeft);
            }
            Err(e) => prop_assert!(
                !(causal && equal) || matches!(e, Error::InvalidArgument { .. }),
                "refused {:?}: {}", pairs, e
            ),
        }
    }

    /// Varlen and KV-cache calls with any offsets, lengths and maxima: a
    /// typed answer, never a panic; an accepted call's lengths are the
    /// offsets' differences and fit the maxima / the capacity.
    #[test]
    fn varlen_and_kvcache_checks_total(
        cu_q in proptest::collection::vec(0u32..40, 0..6),
        cu_k in proptest::collection::vec(0u32..40, 0..6),
        max_q in 0usize..30, max_k in 0usize..30,
        total_q in 1usize..60, total_k in 1usize..60,
        cache in proptest::collection::vec(0u32..40, 0..4),
    ) {
        let (qd, kd) = ([total_q, 4, 16], [total_k, 2, 16]);
        let (qs, ks) = (contiguous(&qd), contiguous(&kd));
        let q = a("q", &qd, &qs, CDType::BF16);
        let k = a("k", &kd, &ks, CDType::BF16);
        let v = Arg { name: "v", ..k };
        let p = AttnParams::new(1.0).causal(true);
        match varlen(&q, &k, &v, &cu_q, &cu_k, max_q, max_k, &p) {
            Ok(r) => {
                prop_assert_eq!(r.lens_q.len() + 1, cu_q.len());
                prop_assert_eq!(r.lens_q.iter().map(|&l| l as usize).sum::<usize>(), total_q);
                prop_assert_eq!(r.lens_kv.iter().map(|&l| l as usize).sum::<usize>(), total_k);
                prop_assert!(r.lens_q.iter().all(|&l| l as usize <= max_q));
                prop_assert!(r.lens_kv.iter().all(|&l| l as usize <= max_k));
            }
            Err(e) => prop_assert!(
                matches!(e, Error::InvalidArgument { .. } | Error::Mismatch { .. }),
                "{:?}", e
            ),
        }
        let (qd, kd) = ([cache.len().max(1), 1, 4, 16], [cache.len().max(1), 24, 2, 16]);
        let (qs, ks) = (contiguous(&qd), contiguous(&kd));
        let q = a("q", &qd, &qs, CDType::F16);
        let k = a("k", &kd, &ks, CDType::F16);
        let v = Arg { name: "v", ..k };
        match kvcache(&q, &k, &v, &cache, &p) {
            Ok(r) => {
                prop_assert_eq!(r.lens_kv.len(), cache.len());
                prop_assert!(r.lens_kv.iter().all(|&l| (0..=24).contains(&l)));
            }
            Err(e) => prop_assert!(
                matches!(e, Error::InvalidArgument { .. } | Error::Mismatch { .. }),
                "{:?}", e
            ),
        }
    }
}
