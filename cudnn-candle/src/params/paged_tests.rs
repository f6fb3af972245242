//! The paged-KV and side-input checks against hand-computed values and the
//! rules as stated (every table entry in `0..num_blocks`, every length in
//! `0..=max_blocks_per_seq * block_size`), plus a property test over them.

use super::*;
use candle_core::{Device, Tensor, Var};
use proptest::prelude::*;

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
        Error::Unsupported { what, .. } => what.clone(),
        other => format!("{other:?}"),
    }
}

/// q `(b, sq, 8, 64)`, caches `(nb, bs, 2, 64)`, bf16, contiguous.
fn call(
    (b, sq, nb, bs): (usize, usize, usize, usize),
    table_dims: &[usize],
    table: &[i64],
    lens: &[i64],
    p: &AttnParams,
) -> Result<Paged> {
    let (qd, kd) = ([b, sq, 8, 64], [nb, bs, 2, 64]);
    let (qs, ks) = (contiguous(&qd), contiguous(&kd));
    let q = Arg {
        name: "q",
        dims: &qd,
        strides: &qs,
        dtype: CDType::BF16,
    };
    let k = Arg {
        name: "k_cache",
        dims: &kd,
        strides: &ks,
        dtype: CDType::BF16,
    };
    let v = Arg {
        name: "v_cache",
        ..k
    };
    paged(&q, &k, &v, (table_dims, table), lens, p)
}

#[test]
fn vllm_layout_maps_to_the_paged_config() {
    let p = AttnParams::new(0.125).causal(true);
    let r = call((2, 1, 10, 16), &[2, 3], &[3, 4, 0, 9, 1, 2], &[33, 5], &p).unwrap();
    // 3 blocks of 16 per sequence: 48 keys covered.
    assert_eq!(r.cfg.seq_kv, 48);
    assert_eq!(
        r.cfg.paged.map(|p| (p.block_size, p.num_blocks)),
        Some((16, 10))
    );
    assert!(r.cfg.padding && r.cfg.is_causal);
    assert_eq!(r.cfg.diagonal, DiagonalAlignment::BottomRight);
    assert_eq!((r.cfg.kv_heads, r.cfg.heads), (2, 8));
    assert_eq!(r.lens_kv, [33, 5]);
    assert_eq!(r.lens_q, [1, 1]);
    assert_eq!(r.table, [3, 4, 0, 9, 1, 2]);
    // (num_blocks, block_size, kv_heads, d) contiguous as [N, H, S, D]:
    // N: 16 * 2 * 64, H: 64, S: 2 * 64, D: 1.
    assert_eq!(r.kv_strides[0], [2048, 64, 128, 1]);
    assert_eq!(r.q_strides, [512, 64, 512, 1]);
}

#[test]
fn table_entries_outside_the_cache_are_named() {
    let p = AttnParams::new(1.0);
    let e = call((2, 1, 10, 16), &[2, 3], &[3, 4, -1, 9, 1, 2], &[3, 5], &p).unwrap_err();
    assert_eq!(arg_of(&e), "block_table[0][2]");
    // Past the sequence's length (5 keys: only block [1][0] is used) still checked.
    let e = call((2, 1, 10, 16), &[2, 3], &[3, 4, 0, 9, 1, 10], &[3, 5], &p).unwrap_err();
    assert_eq!(arg_of(&e), "block_table[1][2]");
}

#[test]
fn lengths_past_the_table_are_named() {
    let p = AttnParams::new(1.0);
    let t = [3, 4, 0, 9, 1, 2];
    let e = call((2, 1, 10, 16), &[2, 3], &t, &[3, 49], &p).unwrap_err();
    assert_eq!(arg_of(&e), "cache_seqlens[1]");
    let e = call((2, 1, 10, 16), &[2, 3], &t, &[-1, 4], &p).unwrap_err();
    assert_eq!(arg_of(&e), "cache_seqlens[0]");
    let e = call((2, 1, 10, 16), &[2, 3], &t, &[3], &p).unwrap_err();
    assert_eq!(arg_of(&e), "cache_seqlens length (q's batch)");
    assert!(call((2, 1, 10, 16), &[2, 3], &t, &[48, 0], &p).is_ok());
}

#[test]
fn geometry_is_checked() {
    let p = AttnParams::new(1.0);
    let e = call((2, 1, 10, 12), &[2, 1], &[0, 1], &[1, 1], &p).unwrap_err();
    assert_eq!(arg_of(&e), "k_cache block_size (dim 1)");
    let e = call((2, 1, 10, 16), &[3, 1], &[0, 1, 2], &[1, 1], &p).unwrap_err();
    assert_eq!(arg_of(&e), "block_table shape");
    let e = call((2, 1, 10, 16), &[2, 2], &[0, 1, 2], &[1, 1], &p).unwrap_err();
    assert_eq!(
        arg_of(&e),
        "block_table values (batch x max_blocks_per_seq)"
    );
    // A strided cache (a narrowed block dim) is refused, not misread.
    let (qd, kd) = ([1usize, 1, 8, 64], [4usize, 16, 2, 64]);
    let qs = contiguous(&qd);
    let ks = [2 * 16 * 2 * 64, 2 * 64, 64, 1];
    let q = Arg {
        name: "q",
        dims: &qd,
        strides: &qs,
        dtype: CDType::F16,
    };
    let k = Arg {
        name: "k_cache",
        dims: &kd,
        strides: &ks,
        dtype: CDType::F16,
    };
    let e = paged(&q, &k, &k, (&[1, 1], &[0]), &[1], &p).unwrap_err();
    assert_eq!(arg_of(&e), "k_cache strides");
}

fn slopes(h: usize) -> Tensor {
    Tensor::new(
        cudnn::graph::alibi_slopes(h).unwrap().as_slice(),
        &Device::Cpu,
    )
    .unwrap()
}

fn dense_call(sq: usize, skv: usize, p: &AttnParams) -> Result<Dense> {
    let (qd, kd) = ([1usize, sq, 8, 64], [1usize, skv, 8, 64]);
    let (qs, ks) = (contiguous(&qd), contiguous(&kd));
    let q = Arg {
        name: "q",
        dims: &qd,
        strides: &qs,
        dtype: CDType::BF16,
    };
    let k = Arg {
        name: "k",
        dims: &kd,
        strides: &ks,
        dtype: CDType::BF16,
    };
    dense(&q, &k, &Arg { name: "v", ..k }, p)
}

#[test]
fn alibi_is_served_causal_top_left_only() {
    let p = AttnParams::new(0.125)
        .causal(true)
        .alibi_slopes(Some(slopes(8)));
    let r = dense_call(32, 32, &p).unwrap();
    assert!(r.cfg.alibi && r.cfg.is_causal);
    assert_eq!(r.cfg.diagonal, DiagonalAlignment::TopLeft);
    // Non-causal: FlashAttention's -slope * |i - j| has no cuDNN form.
    let e = dense_call(32, 32, &p.clone().causal(false)).unwrap_err();
    assert!(
        matches!(&e, Error::Unsupported { what, .. } if what.contains("alibi_slopes with no causal mask")),
        "{e}"
    );
    // Bottom-right causal (seq_q != seq_kv).
    let e = dense_call(1, 32, &p).unwrap_err();
    assert!(
        matches!(&e, Error::Unsupported { what, .. } if what.contains("bottom-right")),
        "{e}"
    );
    // Wrong head count or dtype.
    let e = dense_call(32, 32, &p.clone().alibi_slopes(Some(slopes(4)))).unwrap_err();
    assert_eq!(arg_of(&e), "alibi_slopes");
    let bf = slopes(8).to_dtype(CDType::BF16).unwrap();
    let e = dense_call(32, 32, &p.clone().alibi_slopes(Some(bf))).unwrap_err();
    assert_eq!(arg_of(&e), "alibi_slopes");
}

#[test]
fn sinks_are_checked() {
    let s = Tensor::zeros(8, CDType::F32, &Device::Cpu).unwrap();
    let p = AttnParams::new(0.125).sinks(Some(s.clone()));
    let r = dense_call(16, 16, &p).unwrap();
    assert!(r.cfg.sink && !r.cfg.sink_grad);
    let e = dense_call(
        16,
        16,
        &p.clone()
            .sinks(Some(Tensor::zeros(4, CDType::F32, &Device::Cpu).unwrap())),
    )
    .unwrap_err();
    assert_eq!(arg_of(&e), "sinks");
    let var = Var::from_tensor(&s).unwrap();
    let e = dense_call(16, 16, &p.clone().sinks(Some(var.as_tensor().clone()))).unwrap_err();
    assert!(
        matches!(&e, Error::Unsupported { what, .. } if what.contains("track a gradient")),
        "{e}"
    );
    assert!(dense_call(16, 16, &p.clone().sinks(Some(var.as_tensor().detach()))).is_ok());
}

/// The bias of `p` for one head of slope `slope`, built on the CPU device
/// by the same candle ops the GPU runs, as a row-major `seq_q x seq_kv`.
fn bias_rows(p: &AttnParams, sq: usize, skv: usize, slope: f32) -> cudnn::Result<Vec<f32>> {
    let s = Tensor::new(&[slope], &Device::Cpu).unwrap();
    match crate::side::alibi_bias_tensor(&s, p, (sq, skv, 1)) {
        Ok(t) => {
            assert_eq!(t.dims(), [1, 1, sq, skv]);
            Ok(t.flatten_all().unwrap().to_vec1::<f32>().unwrap())
        }
        Err(candle_core::Error::Cuda(e)) => match e.downcast::<Error>() {
            Ok(e) => Err(*e),
            Err(e) => panic!("{e}"),
        },
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn alibi_bias_hand_computed() {
    use super::alibi::alibi_native;
    let ninf = f32::NEG_INFINITY;
    // s_q 2, s_kv 4, causal: diagonals 2 and 3; slope 0.5.
    let p = AttnParams::new(1.0).causal(true);
    let b = bias_rows(&p, 2, 4, 0.5).unwrap();
    assert_eq!(b, [-1.0, -0.5, 0.0, ninf, -1.5, -1.0, -0.5, 0.0]);
    assert!(!alibi_native(&p, 2, 4).unwrap());
    assert!(alibi_native(&p, 4, 4).unwrap());
    // Not causal: no mask, FlashAttention's |distance| both sides.
    let b = bias_rows(&AttnParams::new(1.0), 1, 3, 1.0).unwrap();
    assert_eq!(b, [-2.0, -1.0, 0.0]);
    // A right window of 1 and a left one of 0 (s_q = s_kv = 3).
    let b = bias_rows(&AttnParams::new(1.0).window(Some(0), Some(1)), 3, 3, 1.0).unwrap();
    assert_eq!(b, [0.0, -1.0, ninf, ninf, 0.0, -1.0, ninf, ninf, 0.0]);
    // A left window alone bounds the right at d + s_kv (candle-flash-attn
    // sets the missing side to seqlen_k): s_q 6, s_kv 4, left 1, row 0 at
    // d = -2 sees keys up to 2, not key 3; row 1 (d = -1) sees all four.
    let b = bias_rows(&AttnParams::new(1.0).window(Some(1), None), 6, 4, 1.0).unwrap();
    assert_eq!(&b[..8], [-2.0, -3.0, -4.0, ninf, -1.0, -2.0, -3.0, -4.0]);
    // s_q > s_kv causal: row 0 sees nothing.
    let e = bias_rows(&p, 4, 2, 1.0).unwrap_err();
    assert_eq!(arg_of(&e), "alibi_slopes (with the window)");
}

proptest! {
    /// The bias is FlashAttention's, written from its sources, not from the
    /// crate's rule: candle-flash-attn's filter (a side above `seqlen_k` is
    /// -1), its two "missing side = seqlen_k" lines, then mask.h's local
    /// limits `col >= row + sk - sq - left`, `col < row + 1 + sk - sq +
    /// right`; the bias `-slope * |row + sk - sq - col|` (FA2's non-causal
    /// ALiBi term). A row with no key is refused.
    #[test]
    fn alibi_bias_is_flash_attentions_rule(
        sq in 1usize..12,
        skv in 1usize..12,
        left in proptest::option::of(0usize..14),
        right in proptest::option::of(0usize..14),
    ) {
        let p = AttnParams::new(1.0).window(left, right);
        let (sqi, ski) = (sq as i64, skv as i64);
        let mut wl = left.filter(|v| *v <= skv).map_or(-1, |v| v as i64);
        let mut wr = right.filter(|v| *v <= skv).map_or(-1, |v| v as i64);
        if wl < 0 && wr >= 0 {
            wl = ski;
        }
        if wl >= 0 && wr < 0 {
            wr = ski;
        }
        let local = wl >= 0 || wr >= 0;
        let sees = |row: i64, col: i64| {
            !local || (col >= row + ski - sqi - wl && col < row + 1 + ski - sqi + wr)
        };
        let empty_row = (0..sqi).any(|i| (0..ski).all(|j| !sees(i, j)));
        match bias_rows(&p, sq, skv, 0.25) {
            Err(e) => {
                prop_assert!(empty_row, "{e}");
                prop_assert_eq!(arg_of(&e), "alibi_slopes (with the window)");
            }
            Ok(b) => {
                prop_assert!(!empty_row);
                for i in 0..sqi {
                    for j in 0..ski {
                        let want = if sees(i, j) {
                            -0.25 * (i + ski - sqi - j).abs() as f32
                        } else {
                            f32::NEG_INFINITY
                        };
                        prop_assert_eq!(b[(i * ski + j) as usize], want, "row {} col {}", i, j);
                    }
                }
            }
        }
    }

    /// ALiBi is accepted exactly for causal calls with `seq_q == seq_kv`
    /// (any left window); sinks whenever their shape is the head count.
    #[test]
    fn alibi_and_sinks_rule(
        sq in 1usize..40,
        skv in 1usize..40,
        causal in any::<bool>(),
        left in proptest::option::of(0usize..50),
        sink_heads in 7usize..10,
    ) {
        let p = AttnParams::new(0.5).window(left, causal.then_some(0));
        let a = dense_call(sq, skv, &p.clone().alibi_slopes(Some(slopes(8))));
        prop_assert_eq!(a.is_ok(), causal && sq == skv, "{:?}", a.err());
        let sk = Tensor::zeros(sink_heads, CDType::F32, &Device::Cpu).unwrap();
        let r = dense_call(sq, skv, &p.sinks(Some(sk)));
        // FlashAttention's right bound at s_kv (a left window up to s_kv
        // without causal) cuts rows when s_q > s_kv + 1: refused.
        let cut = !causal && left.is_some_and(|l| l <= skv) && sq > skv + 1;
        prop_assert_eq!(r.is_ok(), sink_heads == 8 && !cut, "{:?}", r.err());
    }

    /// Accepted exactly when every entry is in `0..nb` and every length in
    /// `0..=per_seq * bs`; the accepted table is the input's.
    #[test]
    fn paged_table_and_lengths_rule(
        b in 1usize..4,
        per_seq in 1usize..5,
        nb in 1usize..9,
        bs_log in 0u32..6,
        seed in proptest::collection::vec(-3i64..12, 16),
        lens_seed in proptest::collection::vec(-2i64..140, 4),
    ) {
        let bs = 1usize << bs_log;
        let table: Vec<i64> = (0..b * per_seq).map(|i| seed[i % seed.len()]).collect();
        let lens: Vec<i64> = (0..b).map(|i| lens_seed[i]).collect();
        let r = call((b, 1, nb, bs), &[b, per_seq], &table, &lens, &AttnParams::new(1.0));
        let cover = (per_seq * bs) as i64;
        let ok = table.iter().all(|&e| (0..nb as i64).contains(&e))
            && lens.iter().all(|&l| (0..=cover).contains(&l));
        prop_assert_eq!(r.is_ok(), ok, "{:?}", r.as_ref().err());
        if let Ok(r) = r {
            prop_assert_eq!(r.table.iter().map(|&e| i64::from(e)).collect::<Vec<_>>(), table);
            prop_assert_eq!(r.cfg.seq_kv, cover);
        }
    }
}
