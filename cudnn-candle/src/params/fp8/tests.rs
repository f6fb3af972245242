//! The FP8 GEMM checks against cuBLASLt's documented FP8 rules (the "TN"
//! layout, k and D's contiguous dim in 16s, 16-byte leading dimensions and
//! start addresses, NVIDIA's bias-type table), by hand and as a property
//! over shapes, plus candle's strided index formula for the layouts.

use super::*;
use cudnn::blas::Epilogue;
use proptest::prelude::*;

fn contiguous(d: &[usize]) -> Vec<usize> {
    let mut s = vec![1; d.len()];
    for i in (0..d.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * d[i + 1];
    }
    s
}

fn arg<'x>(name: &'x str, dims: &'x [usize], strides: &'x [usize], dtype: CDType) -> Arg<'x> {
    Arg {
        name,
        dims,
        strides,
        dtype,
    }
}

fn arg_of(e: &Error) -> String {
    match e {
        Error::InvalidArgument { arg, .. } => arg.clone(),
        Error::Mismatch { what, .. } => what.clone(),
        other => format!("{other:?}"),
    }
}

/// `a` `(m, k)` contiguous times `b = w.t()`, `w` `(n, k)` contiguous
/// (dims `(k, n)`, strides `(1, k)`), out `out`, bias `(n,)` of `bias`.
fn linear(m: usize, k: usize, n: usize, bias: Option<CDType>, out: CDType) -> Result<Fp8Gemm> {
    let (ad, bd) = ([m, k], [k, n]);
    let (sa, sb) = (contiguous(&ad), [1, k]);
    let bias_d = [n];
    let x = bias.map(|dt| arg("bias", &bias_d, &[1], dt));
    fp8_gemm(
        &arg("a", &ad, &sa, CDType::F8E4M3),
        &arg("b", &bd, &sb, CDType::F8E4M3),
        x.as_ref(),
        MatmulActivation::Relu,
        out,
    )
}

#[test]
fn a_linear_layer_maps_to_tn() {
    let g = linear(32, 64, 48, Some(CDType::BF16), CDType::BF16).unwrap();
    assert_eq!(g.out_dims, [32, 48]);
    assert_eq!(g.out, Fp8OutputType::BF16);
    assert_eq!(g.spec.epilogue(), Epilogue::ReluBias);
    // One bias entry per output column (row-major D's contiguous dim).
    assert_eq!(g.shape.bias_len(), 48);
    // Row-major D: the library computes Dᵀ = Bᵀ·Aᵀ, (m, n, k) = (48, 32, 64).
    assert!(g.shape.swaps_operands());
    assert_eq!(g.shape.dims(), (48, 32, 64));
    let g = linear(16, 16, 16, None, CDType::F32).unwrap();
    assert_eq!(g.spec.epilogue(), Epilogue::Relu);
    assert_eq!(g.out, Fp8OutputType::F32);
    // An f16 output takes an f16 bias.
    assert!(linear(16, 32, 16, Some(CDType::F16), CDType::F16).is_ok());
}

#[test]
fn a_broadcast_weight_is_batch_stride_zero() {
    // (2, 16, 32) x w.t() broadcast to (2, 32, 16): strides (0, 1, 32).
    let (ad, bd) = ([2, 16, 32], [2, 32, 16]);
    let (sa, sb) = (contiguous(&ad), [0, 1, 32]);
    let g = fp8_gemm(
        &arg("a", &ad, &sa, CDType::F8E4M3),
        &arg("b", &bd, &sb, CDType::F8E4M3),
        None,
        MatmulActivation::None,
        CDType::F16,
    )
    .unwrap();
    assert_eq!(g.out_dims, [2, 16, 16]);
    let (la, lb, ld) = g.spec.layouts();
    assert_eq!((la.batch_count(), la.batch_stride()), (2, 16 * 32));
    assert_eq!((lb.batch_count(), lb.batch_stride()), (2, 0));
    assert_eq!((ld.batch_count(), ld.batch_stride()), (2, 16 * 16));
}

#[test]
fn refusals_name_the_argument() {
    let r = |e: Result<Fp8Gemm>| arg_of(&e.unwrap_err());
    // k not in 16s; n (D's contiguous dim) not in 16s.
    assert_eq!(r(linear(16, 24, 16, None, CDType::BF16)), "k");
    assert_eq!(r(linear(16, 32, 24, None, CDType::BF16)), "n");
    // m is free (D row-major: m is its strided dim).
    assert!(linear(3, 32, 16, None, CDType::BF16).is_ok());
    // Output and bias types.
    assert_eq!(r(linear(16, 32, 16, None, CDType::F64)), "out_dtype");
    assert_eq!(r(linear(16, 32, 16, None, CDType::F8E4M3)), "out_dtype");
    assert!(
        r(linear(16, 32, 16, Some(CDType::F16), CDType::BF16)).starts_with("bias dtype"),
        "a bf16 output takes a bf16 bias"
    );
    assert!(r(linear(16, 32, 16, Some(CDType::BF16), CDType::F16)).starts_with("bias dtype"));
    // An f32 output takes no bias (PyTorch's _scaled_mm rule), whatever
    // the bias's dtype (bf16 is NVIDIA's table's): refused naming bias.
    for dt in [CDType::BF16, CDType::F32, CDType::F16] {
        let e = linear(16, 32, 16, Some(dt), CDType::F32).unwrap_err();
        assert_eq!(arg_of(&e), "bias", "{dt:?}");
        assert!(e.to_string().contains("out_dtype F32"), "{e}");
    }
    // Without a bias, an f32 output is accepted (ReLU epilogue).
    assert!(linear(16, 32, 16, None, CDType::F32).is_ok());
    let (ad, bd) = ([16, 32], [32, 16]);
    let (sa, sb) = (contiguous(&ad), [1, 32]);
    let f8 = CDType::F8E4M3;
    let go = |a: Arg<'_>, b: Arg<'_>, x: Option<Arg<'_>>| {
        fp8_gemm(&a, &b, x.as_ref(), MatmulActivation::None, CDType::BF16)
    };
    // Not FP8.
    assert_eq!(
        r(go(
            arg("a", &ad, &sa, CDType::BF16),
            arg("b", &bd, &sb, f8),
            None
        )),
        "a dtype"
    );
    assert_eq!(
        r(go(
            arg("a", &ad, &sa, f8),
            arg("b", &bd, &sb, CDType::U8),
            None
        )),
        "b dtype"
    );
    // b contiguous (k, n): n contiguous, not k: refused naming b.
    let sbc = contiguous(&bd);
    assert_eq!(
        r(go(arg("a", &ad, &sa, f8), arg("b", &bd, &sbc, f8), None)),
        "b"
    );
    // a the t() of a contiguous (k, m): m contiguous, not k.
    let sat = [1, 16];
    assert_eq!(
        r(go(arg("a", &ad, &sat, f8), arg("b", &bd, &sb, f8), None)),
        "a"
    );
    // k mismatch, batch mismatch.
    let bd2 = [48, 16];
    assert_eq!(
        r(go(
            arg("a", &ad, &sa, f8),
            arg("b", &bd2, &[1, 48], f8),
            None
        )),
        "b rows (a's columns, k)"
    );
    let (ad3, bd3) = ([2, 16, 32], [3, 32, 16]);
    assert_eq!(
        r(go(
            arg("a", &ad3, &contiguous(&ad3), f8),
            arg("b", &bd3, &[512, 1, 32], f8),
            None
        )),
        "b batch dims (a's; broadcast first)"
    );
    // A row stride of 40 bytes (a narrowed view of a (16, 40) buffer):
    // the leading dimension must be a multiple of 16 bytes.
    assert_eq!(
        r(go(
            arg("a", &ad, &[40, 1], f8),
            arg("b", &bd, &sb, f8),
            None
        )),
        "a.ld"
    );
    // Bias shape.
    assert_eq!(
        r(go(
            arg("a", &ad, &sa, f8),
            arg("b", &bd, &sb, f8),
            Some(arg("bias", &[8], &[1], CDType::BF16))
        )),
        "bias"
    );
}

#[test]
fn scales_and_start_offsets() {
    assert!(scale(&arg("scale_a", &[], &[], CDType::F32)).is_ok());
    assert!(scale(&arg("scale_a", &[1], &[1], CDType::F32)).is_ok());
    assert!(scale(&arg("scale_b", &[1, 1], &[1, 1], CDType::F32)).is_ok());
    for (d, dt) in [(&[2usize][..], CDType::F32), (&[1][..], CDType::BF16)] {
        let e = scale(&arg("scale_b", d, &[1], dt)).unwrap_err();
        assert_eq!(arg_of(&e), "scale_b");
    }
    assert!(start_offset("a", 0, 1).is_ok());
    assert!(start_offset("a", 32, 1).is_ok());
    assert_eq!(
        arg_of(&start_offset("a", 8, 1).unwrap_err()),
        "a start offset"
    );
    // A bf16 bias 8 elements in: 16 bytes.
    assert!(start_offset("bias", 8, 2).is_ok());
    assert_eq!(
        arg_of(&start_offset("bias", 4, 2).unwrap_err()),
        "bias start offset"
    );
    assert!(start_offset("a", usize::MAX, 2).is_err());
}

/// Candle's offset of element `idx`.
fn candle_offset(idx: &[usize], strides: &[usize]) -> usize {
    idx.iter().zip(strides).map(|(i, s)| i * s).sum()
}

proptest! {
    /// A linear layer in the "TN" layout is accepted exactly when cuBLASLt's
    /// documented FP8 rules hold: k and n (D's contiguous dim) multiples of
    /// 16; m free; a bias only with an f16 / bf16 output. Accepted
    /// layouts address every element where candle's strides do.
    #[test]
    fn accepted_exactly_when_the_fp8_rules_hold(
        m in 1usize..40,
        k in 1usize..70,
        n in 1usize..70,
        out in prop::sample::select(vec![CDType::F32, CDType::F16, CDType::BF16]),
        with_bias in any::<bool>(),
    ) {
        // A bias of NVIDIA's table's type; none with an f32 output
        // (PyTorch's _scaled_mm rule).
        let g = linear(m, k, n, with_bias.then(|| bias_dtype(out)), out);
        let ok = k % 16 == 0 && n % 16 == 0 && !(with_bias && out == CDType::F32);
        prop_assert_eq!(g.is_ok(), ok, "m {} k {} n {}: {:?}", m, k, n, g.as_ref().err());
        if let Ok(g) = g {
            let (la, lb, _) = g.spec.layouts();
            for i in 0..m {
                for j in 0..k {
                    prop_assert_eq!(la.offset(0, i, j), Some(candle_offset(&[i, j], &[k, 1])));
                }
            }
            for i in 0..k {
                for j in 0..n {
                    prop_assert_eq!(lb.offset(0, i, j), Some(candle_offset(&[i, j], &[1, k])));
                }
            }
        }
    }

    /// A start offset is accepted exactly when it is a multiple of 16 bytes.
    #[test]
    fn start_offsets_in_16_bytes(offset in 0usize..10_000, size in prop::sample::select(vec![1usize, 2, 4])) {
        prop_assert_eq!(start_offset("x", offset, size).is_ok(), (offset * size) % 16 == 0);
    }
}
