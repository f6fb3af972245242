//! The GEMM checks against hand-computed layouts and candle's strided
//! index formula (element `idx` at `sum(idx[i] * stride[i])`), plus a
//! property test over operand layouts.

use super::*;
use proptest::prelude::*;

fn contiguous(d: &[usize]) -> Vec<usize> {
    let mut s = vec![1; d.len()];
    for i in (0..d.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * d[i + 1];
    }
    s
}

fn a<'x>(name: &'x str, dims: &'x [usize], strides: &'x [usize], dtype: CDType) -> Arg<'x> {
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

#[test]
fn contiguous_transposed_and_broadcast_operands() {
    // (2, 3, 4, 5) contiguous: 6 row-major 4 x 5 matrices, 20 apart.
    let l = operand("a", &[2, 3, 4, 5], &contiguous(&[2, 3, 4, 5]))
        .unwrap()
        .unwrap();
    assert_eq!(
        (l.order(), l.rows(), l.cols(), l.ld()),
        (Order::RowMajor, 4, 5, 5)
    );
    assert_eq!((l.batch_count(), l.batch_stride()), (6, 20));
    // candle's t() of a contiguous (7, 3): dims (3, 7), strides (1, 3):
    // column-major 3 x 7 with ld 3.
    let l = operand("b", &[3, 7], &[1, 3]).unwrap().unwrap();
    assert_eq!(
        (l.order(), l.rows(), l.cols(), l.ld()),
        (Order::ColMajor, 3, 7, 3)
    );
    // (4, 6) broadcast to (5, 4, 6): stride 0.
    let l = operand("b", &[5, 4, 6], &[0, 6, 1]).unwrap().unwrap();
    assert_eq!((l.batch_count(), l.batch_stride()), (5, 0));
    // (2, 1, 4, 6) broadcast to (2, 3, 4, 6): no single batch stride.
    assert!(
        operand("b", &[2, 3, 4, 6], &[24, 0, 6, 1])
            .unwrap()
            .is_none()
    );
    // Neither dim contiguous.
    assert!(operand("a", &[4, 6], &[12, 2]).unwrap().is_none());
    assert_eq!(arg_of(&operand("a", &[4], &[1]).unwrap_err()), "a shape");
    assert_eq!(
        arg_of(&operand("a", &[0, 4], &[4, 1]).unwrap_err()),
        "a shape"
    );
}

fn gemm_of(
    ad: &[usize],
    bd: &[usize],
    bias: Option<&[usize]>,
    dt: CDType,
    act: MatmulActivation,
) -> Result<Gemm> {
    let (sa, sb) = (contiguous(ad), contiguous(bd));
    let bias_s = [1usize];
    let x = bias.map(|d| a("bias", d, &bias_s, dt));
    gemm(&a("a", ad, &sa, dt), &a("b", bd, &sb, dt), x.as_ref(), act)
}

#[test]
fn gemm_maps_shapes_and_epilogues() {
    let g = gemm_of(
        &[3, 8, 16],
        &[3, 16, 32],
        Some(&[32]),
        CDType::BF16,
        MatmulActivation::GeluTanh,
    )
    .unwrap();
    assert_eq!(g.out_dims, [3, 8, 32]);
    assert_eq!(g.spec.epilogue(), Epilogue::GeluTanhBias);
    // One bias entry per output column (row-major D's contiguous dim).
    assert_eq!(g.shape.bias_len(), 32);
    let d = g.spec.layouts().2;
    assert_eq!((d.batch_count(), d.batch_stride()), (3, 8 * 32));
    let g = gemm_of(
        &[8, 16],
        &[16, 4],
        None,
        CDType::F32,
        MatmulActivation::Relu,
    )
    .unwrap();
    assert_eq!(g.spec.epilogue(), Epilogue::Relu);
    assert_eq!(g.out_dims, [8, 4]);
    let g = gemm_of(
        &[8, 16],
        &[16, 4],
        Some(&[4]),
        CDType::F16,
        MatmulActivation::None,
    )
    .unwrap();
    assert_eq!(g.spec.epilogue(), Epilogue::Bias);
}

#[test]
fn gemm_refusals_are_named() {
    let r = |ad: &[usize], bd: &[usize], bias: Option<&[usize]>, dt| {
        arg_of(&gemm_of(ad, bd, bias, dt, MatmulActivation::None).unwrap_err())
    };
    assert_eq!(
        r(&[8, 16], &[15, 4], None, CDType::F32),
        "b rows (a's columns, k)"
    );
    assert_eq!(r(&[8, 16], &[16, 4], Some(&[8]), CDType::F32), "bias");
    assert_eq!(
        r(&[2, 8, 16], &[3, 16, 4], None, CDType::F32),
        "b batch dims (a's; broadcast first)"
    );
    assert_eq!(r(&[8, 16], &[16, 4], None, CDType::U32), "a dtype");
    let (sa, sb) = (contiguous(&[8, 16]), contiguous(&[16, 4]));
    let e = gemm(
        &a("a", &[8, 16], &sa, CDType::F16),
        &a("b", &[16, 4], &sb, CDType::BF16),
        None,
        MatmulActivation::None,
    )
    .unwrap_err();
    assert_eq!(arg_of(&e), "b dtype (a's)");
}

/// Candle's offset of element `idx`.
fn candle_offset(idx: &[usize], strides: &[usize]) -> usize {
    idx.iter().zip(strides).map(|(i, s)| i * s).sum()
}

proptest! {
    /// Every layout `operand` gives addresses each element where candle's
    /// strides do; contiguous and last-two-transposed operands always get one.
    #[test]
    fn operand_layout_addresses_like_candle(
        dims in proptest::collection::vec(1usize..5, 2..5),
        transpose in any::<bool>(),
        broadcast_lead in any::<bool>(),
    ) {
        let n = dims.len();
        // A contiguous tensor, its last two dims swapped (candle's t()),
        // the leading dim broadcast (stride 0).
        let mut strides = contiguous(&dims);
        let mut d = dims.clone();
        if transpose {
            d.swap(n - 2, n - 1);
            strides.swap(n - 2, n - 1);
        }
        if broadcast_lead && n > 2 {
            strides[0] = 0;
        }
        let l = operand("x", &d, &strides).unwrap();
        if !(broadcast_lead && n > 3) {
            prop_assert!(l.is_some(), "{d:?} {strides:?}");
        }
        if let Some(l) = l {
            let batch: usize = d[..n - 2].iter().product();
            for bi in 0..batch {
                // bi as an index over the batch dims, row-major.
                let mut idx = vec![0; n];
                let mut rest = bi;
                for k in (0..n - 2).rev() {
                    idx[k] = rest % d[k];
                    rest /= d[k];
                }
                for i in 0..d[n - 2] {
                    for j in 0..d[n - 1] {
                        idx[n - 2] = i;
                        idx[n - 1] = j;
                        prop_assert_eq!(l.offset(bi, i, j), Some(candle_offset(&idx, &strides)));
                    }
                }
            }
        }
    }
}
