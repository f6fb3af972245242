//! The checks against hand-computed output shapes and candle's documented
//! output-size formula (an independent statement of it, below), every
//! refusal naming its argument, and property tests over the checks.

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

fn c(d: &[usize]) -> Vec<usize> {
    contiguous_strides(d).expect("small dims")
}

fn arg_of(e: &Error) -> String {
    match e {
        Error::InvalidArgument { arg, .. } => arg.clone(),
        Error::Mismatch { what, .. } => what.clone(),
        other => format!("{other:?}"),
    }
}

fn call(
    xd: &[usize],
    wd: &[usize],
    bd: Option<&[usize]>,
    p: Conv2dParams,
    dt: CDType,
) -> Result<ConvCfg> {
    let (xs, ws) = (c(xd), c(wd));
    let bs = bd.map(c);
    let x = a("x", xd, &xs, dt);
    let w = a("w", wd, &ws, dt);
    let b = bd.map(|bd| a("bias", bd, bs.as_deref().unwrap_or(&[]), dt));
    conv2d(&x, &w, b.as_ref(), &p)
}

/// candle's (and PyTorch's) output size: `(h + 2p - d (k - 1) - 1) / s + 1`.
fn out(h: usize, k: usize, p: usize, s: usize, d: usize) -> Option<usize> {
    let span = d * (k - 1) + 1;
    (h + 2 * p).checked_sub(span).map(|r| r / s + 1)
}

#[test]
fn hand_computed_output_shapes() {
    let f = CDType::F32;
    let r = call(
        &[1, 3, 5, 5],
        &[2, 3, 3, 3],
        None,
        Conv2dParams::default(),
        f,
    )
    .unwrap();
    assert_eq!(r.y, [1, 2, 3, 3]);
    assert!(!r.bias);
    // pad 1, stride 2 on 5: (5 + 2 - 3) / 2 + 1 = 3.
    let r = call(
        &[2, 3, 5, 5],
        &[4, 3, 3, 3],
        Some(&[4]),
        Conv2dParams::new(1, 2, 1, 1),
        f,
    )
    .unwrap();
    assert_eq!(r.y, [2, 4, 3, 3]);
    assert!(r.bias);
    assert_eq!(r.conv.pre_padding, [1, 1]);
    assert_eq!(r.conv.stride, [2, 2]);
    // dilation 2, kernel 3 spans 5: 7 - 5 + 1 = 3; groups 2: w[1] = 4 / 2.
    let r = call(
        &[1, 4, 7, 9],
        &[6, 2, 3, 3],
        None,
        Conv2dParams::new(0, 1, 2, 2),
        f,
    )
    .unwrap();
    assert_eq!(r.y, [1, 6, 3, 5]);
    assert_eq!(r.dtype, DType::F32);
    let r = call(
        &[1, 1, 1, 1],
        &[1, 1, 1, 1],
        None,
        Conv2dParams::default(),
        CDType::BF16,
    )
    .unwrap();
    assert_eq!((r.y, r.dtype), ([1, 1, 1, 1], DType::BF16));
}

#[test]
fn refusals_name_their_argument() {
    let f = CDType::F32;
    let p = Conv2dParams::default();
    let cases: Vec<(Result<ConvCfg>, &str)> = vec![
        (
            call(&[1, 3, 5, 5], &[2, 3, 3, 3], None, p, CDType::F64),
            "x dtype",
        ),
        (
            call(&[1, 3, 5, 5], &[2, 3, 3, 3], None, p, CDType::U8),
            "x dtype",
        ),
        (call(&[3, 5, 5], &[2, 3, 3, 3], None, p, f), "x dims"),
        (call(&[1, 3, 5, 5], &[2, 3, 3], None, p, f), "w dims"),
        (call(&[1, 3, 0, 5], &[2, 3, 3, 3], None, p, f), "x[2]"),
        (call(&[1, 3, 5, 5], &[0, 3, 3, 3], None, p, f), "w[0]"),
        (
            call(&[1, 3, 5, 5], &[2, 2, 3, 3], None, p, f),
            "w[1] (the input channels 3 over groups 1)",
        ),
        (
            call(
                &[1, 4, 5, 5],
                &[2, 2, 3, 3],
                None,
                Conv2dParams::new(0, 1, 1, 3),
                f,
            ),
            "w[1] (the input channels 4 over groups 3)",
        ),
        (
            call(
                &[1, 4, 5, 5],
                &[3, 2, 3, 3],
                None,
                Conv2dParams::new(0, 1, 1, 2),
                f,
            ),
            "w[0]",
        ),
        (
            call(
                &[1, 3, 5, 5],
                &[2, 3, 3, 3],
                None,
                Conv2dParams::new(0, 1, 1, 0),
                f,
            ),
            "groups",
        ),
        (
            call(
                &[1, 3, 5, 5],
                &[2, 3, 3, 3],
                None,
                Conv2dParams::new(0, 0, 1, 1),
                f,
            ),
            "stride",
        ),
        (
            call(
                &[1, 3, 5, 5],
                &[2, 3, 3, 3],
                None,
                Conv2dParams::new(0, 1, 0, 1),
                f,
            ),
            "dilation",
        ),
        (
            call(&[1, 3, 5, 5], &[2, 3, 3, 3], Some(&[3]), p, f),
            "bias dims (w's output channels)",
        ),
        (
            call(&[1, 3, 5, 5], &[2, 3, 3, 3], Some(&[1, 2]), p, f),
            "bias dims (w's output channels)",
        ),
    ];
    for (i, (r, want)) in cases.into_iter().enumerate() {
        let e = r.expect_err(want);
        assert_eq!(arg_of(&e), want, "case {i}: {e}");
    }
    // Mixed dtypes.
    let (xd, wd) = ([1usize, 3, 5, 5], [2usize, 3, 3, 3]);
    let (xs, ws) = (c(&xd), c(&wd));
    let e = conv2d(
        &a("x", &xd, &xs, f),
        &a("w", &wd, &ws, CDType::BF16),
        None,
        &p,
    )
    .unwrap_err();
    assert_eq!(arg_of(&e), "w dtype (x's)");
    let bd = [2usize];
    let e = conv2d(
        &a("x", &xd, &xs, f),
        &a("w", &wd, &ws, f),
        Some(&a("bias", &bd, &[1], CDType::F16)),
        &p,
    )
    .unwrap_err();
    assert_eq!(arg_of(&e), "bias dtype (x's)");
    // A transposed x.
    let e = conv2d(
        &a("x", &xd, &[75, 25, 1, 5], f),
        &a("w", &wd, &ws, f),
        None,
        &p,
    )
    .unwrap_err();
    assert_eq!(arg_of(&e), "x strides");
    // A kernel wider than the padded input: the crate's shape inference refuses it.
    assert!(call(&[1, 3, 2, 2], &[2, 3, 3, 3], None, p, f).is_err());
    // Padding past the crate's bound.
    assert!(
        call(
            &[1, 3, 5, 5],
            &[2, 3, 3, 3],
            None,
            Conv2dParams::new(usize::MAX, 1, 1, 1),
            f
        )
        .is_err()
    );
}

#[test]
fn size_one_dims_may_have_any_stride() {
    // candle gives dims of 1 whatever stride; they are contiguous all the same.
    let (xd, wd) = ([1usize, 3, 5, 5], [2usize, 3, 1, 1]);
    let x = a("x", &xd, &[999, 25, 5, 1], CDType::F32);
    let ws = c(&wd);
    let w = a("w", &wd, &ws, CDType::F32);
    assert!(conv2d(&x, &w, None, &Conv2dParams::default()).is_ok());
}

#[test]
fn activation_modes() {
    assert_eq!(Activation::None.pointwise(), None);
    assert_eq!(Activation::Relu.pointwise(), Some(Pointwise::Relu));
    assert_eq!(Activation::Gelu.pointwise(), Some(Pointwise::GeluTanh));
    assert_eq!(Activation::GeluErf.pointwise(), Some(Pointwise::GeluErf));
    assert_eq!(
        Activation::Silu.pointwise(),
        Some(Pointwise::Swish { beta: 1.0 })
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The check accepts exactly the calls candle's formula gives an
    /// output of at least 1 for (channels dividing the groups), with that
    /// output; it never panics; its graphs build.
    #[test]
    fn accepts_exactly_the_valid_calls(
        n in 1usize..3, cg in 1usize..4, groups in 1usize..4, kg in 1usize..3,
        h in 1usize..12, w in 1usize..12, kh in 1usize..5, kw in 1usize..5,
        pad in 0usize..3, stride in 1usize..4, dil in 1usize..3, bias: bool,
        bad_w1 in 0usize..2,
    ) {
        let (cin, k) = (cg * groups, kg * groups);
        let wc = cg + bad_w1;
        let p = Conv2dParams::new(pad, stride, dil, groups);
        let bd = [k];
        let r = call(&[n, cin, h, w], &[k, wc, kh, kw], bias.then_some(&bd[..]), p, CDType::F16);
        let want = match (out(h, kh, pad, stride, dil), out(w, kw, pad, stride, dil)) {
            (Some(oh), Some(ow)) if bad_w1 == 0 => Some([n, k, oh, ow]),
            _ => None,
        };
        match (r, want) {
            (Ok(cfg), Some(want)) => {
                let y: Vec<usize> = cfg.y.iter().map(|&v| v as usize).collect();
                prop_assert_eq!(y, want.to_vec());
                prop_assert!(forward(&cfg).is_ok());
                prop_assert!(dgrad(&cfg).is_ok());
                prop_assert!(wgrad(&cfg).is_ok());
            }
            (Err(_), None) => {}
            (r, want) => prop_assert!(false, "check {:?} vs oracle {:?}", r.map(|c| c.y), want),
        }
    }

    /// Any dims and strides: a typed answer, never a panic.
    #[test]
    fn never_panics(
        xd in proptest::collection::vec(0usize..=usize::MAX, 0..6),
        wd in proptest::collection::vec(0usize..=usize::MAX, 0..6),
        xs in proptest::collection::vec(0usize..=usize::MAX, 0..6),
        pad in 0usize..=usize::MAX, stride in 0usize..=usize::MAX,
        dil in 0usize..=usize::MAX, groups in 0usize..=usize::MAX,
    ) {
        let ws = contiguous_strides(&wd).unwrap_or_default();
        let p = Conv2dParams::new(pad, stride, dil, groups);
        let _ = conv2d(&a("x", &xd, &xs, CDType::F32), &a("w", &wd, &ws, CDType::F32), None, &p);
    }
}
