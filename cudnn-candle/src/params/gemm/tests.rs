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

/// A view of a CPU buffer of `buf` elements (candle's own layout ops),
/// checked against candle's strided index: with `operand`'s layout, the
/// element at row-major position `p` of the view is at `start_offset +
/// layout.offset(batch, i, j)`, exactly where candle's `strided_index`
/// puts it, and the layout's whole extent from the start offset stays
/// inside the buffer (the bytes bound for cuBLASLt are the view's, none
/// past the buffer's end).
fn check_view_against_candle(buf: usize, view: &candle_core::Tensor) {
    let (d, s, off) = (view.dims(), view.stride(), view.layout().start_offset());
    let n = d.len();
    let Some(l) = operand("x", d, s).unwrap() else {
        // Strides no layout expresses: the op copies (operand_ready).
        return;
    };
    let want: Vec<usize> = view.strided_index().collect();
    let (rows, cols) = (d[n - 2], d[n - 1]);
    let mut got = Vec::with_capacity(want.len());
    for bi in 0..l.batch_count() {
        for i in 0..rows {
            for j in 0..cols {
                got.push(off + l.offset(bi, i, j).unwrap());
            }
        }
    }
    assert_eq!(got, want, "dims {d:?} strides {s:?} offset {off}");
    let need = l.required_len().unwrap();
    assert!(
        off + need <= buf,
        "dims {d:?} strides {s:?}: offset {off} + extent {need} > buffer {buf}"
    );
}

/// The first GPU run's `matmul_offset_views_unaligned` operands, by hand:
/// `a` = rows 1..10 of a (10, 16) buffer (start 16, row-major ld 16), `b` =
/// columns 3..13 of a (16, 20) one (start 3, row-major ld 20, a 6-byte
/// offset in bf16). Element (i, j) of b is buffer element 3 + 20 i + j.
#[test]
fn offset_views_of_the_gpu_case_address_like_candle() {
    use candle_core::{Device, Tensor};
    let abuf = Tensor::zeros((10, 16), CDType::F32, &Device::Cpu).unwrap();
    let pa = abuf.narrow(0, 1, 9).unwrap();
    let la = operand("a", pa.dims(), pa.stride()).unwrap().unwrap();
    assert_eq!(
        (pa.layout().start_offset(), la.order(), la.ld()),
        (16, Order::RowMajor, 16)
    );
    check_view_against_candle(160, &pa);
    let bbuf = Tensor::zeros((16, 20), CDType::F32, &Device::Cpu).unwrap();
    let pb = bbuf.narrow(1, 3, 10).unwrap();
    let lb = operand("b", pb.dims(), pb.stride()).unwrap().unwrap();
    assert_eq!(
        (pb.layout().start_offset(), lb.order(), lb.ld()),
        (3, Order::RowMajor, 20)
    );
    assert_eq!(lb.offset(0, 2, 4), Some(2 * 20 + 4));
    assert_eq!(3 + lb.required_len().unwrap(), 3 + 15 * 20 + 10);
    check_view_against_candle(320, &pb);
    // The same views transposed (candle's t()): column-major, same ld.
    let pbt = pb.t().unwrap();
    let l = operand("b", pbt.dims(), pbt.stride()).unwrap().unwrap();
    assert_eq!((l.order(), l.ld()), (Order::ColMajor, 20));
    check_view_against_candle(320, &pbt);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    /// Narrowed (start offsets of any element count: unaligned), transposed
    /// and broadcast views of a buffer, made by candle's own ops: every
    /// layout `operand` gives addresses every element where candle's
    /// strided index does, and never past the buffer.
    #[test]
    fn narrowed_views_address_like_candle_and_stay_inside(
        dims in proptest::collection::vec(1usize..6, 2..5),
        cuts in proptest::collection::vec((0usize..6, 0usize..6), 4),
        transpose in any::<bool>(),
        broadcast in 0usize..3,
    ) {
        use candle_core::{Device, Tensor};
        let buf: usize = dims.iter().product();
        let mut v = Tensor::zeros(dims.as_slice(), CDType::F32, &Device::Cpu).unwrap();
        for (k, &(s, l)) in cuts.iter().enumerate().take(dims.len()) {
            let start = s % dims[k];
            let len = 1 + l % (dims[k] - start);
            v = v.narrow(k, start, len).unwrap();
        }
        let n = dims.len();
        if transpose {
            v = v.transpose(n - 2, n - 1).unwrap();
        }
        if broadcast > 0 {
            let mut d = vec![broadcast + 1];
            d.extend_from_slice(v.dims());
            v = v.broadcast_as(d).unwrap();
        }
        check_view_against_candle(buf, &v);
    }
}

const ALL_DTYPES: [CDType; 8] = [
    CDType::U8,
    CDType::U32,
    CDType::I64,
    CDType::BF16,
    CDType::F16,
    CDType::F32,
    CDType::F64,
    CDType::F8E4M3,
];

proptest! {
    /// `dtypes` by the rule written out: `a` one of f32 / f16 / bf16, else
    /// `a dtype`; then `b`, then the bias, each `a`'s type or named.
    #[test]
    fn dtypes_follow_the_rule(a in 0usize..8, b in 0usize..8, x in proptest::option::of(0usize..8)) {
        let (a, b, x) = (ALL_DTYPES[a], ALL_DTYPES[b], x.map(|i| ALL_DTYPES[i]));
        let want = if !matches!(a, CDType::F32 | CDType::F16 | CDType::BF16) {
            Some("a dtype")
        } else if b != a {
            Some("b dtype (a's)")
        } else if x.is_some_and(|x| x != a) {
            Some("bias dtype (a's)")
        } else {
            None
        };
        let got = dtypes(a, b, x).err().map(|e| arg_of(&e));
        prop_assert_eq!(got.as_deref(), want);
    }
}
