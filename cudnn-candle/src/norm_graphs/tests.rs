//! The norm checks against hand-computed rows / hidden, every refusal
//! naming its argument, and property tests over the checks.

use super::*;
use crate::conv_graphs::contiguous_strides;
use proptest::prelude::*;

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

fn call(
    kind: NormKind,
    xd: &[usize],
    wd: &[usize],
    bias: bool,
    eps: f64,
    dt: CDType,
) -> Result<NormCfg> {
    let xs = contiguous_strides(xd).unwrap_or_default();
    let ws = contiguous_strides(wd).unwrap_or_default();
    let x = a("x", xd, &xs, dt);
    let w = a("weight", wd, &ws, CDType::F32);
    let b = a("bias", wd, &ws, CDType::F32);
    check(kind, &x, &w, bias.then_some(&b), eps)
}

#[test]
fn rows_and_hidden() {
    let r = call(NormKind::Layer, &[2, 3, 4], &[4], false, 1e-5, CDType::BF16).unwrap();
    assert_eq!((r.rows, r.hidden, r.dtype), (6, 4, DType::BF16));
    // Layer norm always has a bias (zeros when none is given).
    assert!(r.bias);
    assert_eq!(r.x_dims(), [6, 4, 1, 1]);
    assert_eq!(r.param_dims(), [1, 4, 1, 1]);
    assert_eq!(r.stats_dims(), [6, 1, 1, 1]);
    let r = call(NormKind::Rms, &[7], &[7], false, 1.0, CDType::F32).unwrap();
    assert_eq!((r.rows, r.hidden, r.bias), (1, 7, false));
    let r = call(NormKind::Rms, &[5, 7], &[7], true, 1e-6, CDType::F16).unwrap();
    assert!(r.bias);
}

#[test]
fn refusals_name_their_argument() {
    let l = NormKind::Layer;
    let f = CDType::F32;
    let cases: Vec<(Result<NormCfg>, &str)> = vec![
        (call(l, &[2, 4], &[4], true, 0.0, f), "eps"),
        (call(l, &[2, 4], &[4], true, -1.0, f), "eps"),
        (call(l, &[2, 4], &[4], true, 1.5, f), "eps"),
        (call(l, &[2, 4], &[4], true, f64::NAN, f), "eps"),
        (
            call(l, &[2, 4], &[5], true, 1e-5, f),
            "weight dims (x's last dim)",
        ),
        (
            call(l, &[2, 4], &[1, 4], true, 1e-5, f),
            "weight dims (x's last dim)",
        ),
        (call(l, &[2, 4], &[4], true, 1e-5, CDType::F64), "x dtype"),
        (call(l, &[2, 4], &[4], true, 1e-5, CDType::U32), "x dtype"),
        (call(l, &[], &[4], true, 1e-5, f), "x dims"),
        (call(l, &[2, 0, 4], &[4], true, 1e-5, f), "x[1]"),
        (call(l, &[2, 4, 0], &[0], true, 1e-5, f), "x[2]"),
    ];
    for (i, (r, want)) in cases.into_iter().enumerate() {
        let e = r.expect_err(want);
        assert_eq!(arg_of(&e), want, "case {i}: {e}");
    }
    let (xd, wd) = ([3usize, 4], [4usize]);
    let e = check(
        l,
        &a("x", &xd, &[1, 3], f),
        &a("weight", &wd, &[1], f),
        None,
        1e-5,
    )
    .unwrap_err();
    assert_eq!(arg_of(&e), "x strides");
    let e = check(
        l,
        &a("x", &xd, &[4, 1], f),
        &a("weight", &wd, &[1], f),
        Some(&a("bias", &[3], &[1], f)),
        1e-5,
    )
    .unwrap_err();
    assert_eq!(arg_of(&e), "bias dims (x's last dim)");
    let e = check(
        l,
        &a("x", &xd, &[4, 1], f),
        &a("weight", &wd, &[1], CDType::I64),
        None,
        1e-5,
    )
    .unwrap_err();
    assert_eq!(arg_of(&e), "weight dtype");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Accepted exactly when every dim is >= 1, the weight is `[hidden]`
    /// and eps in (0, 1]; rows is the product of the leading dims; the
    /// graphs build.
    #[test]
    fn accepts_exactly_the_valid_calls(
        xd in proptest::collection::vec(0usize..6, 1..5),
        wrong_w in 0usize..2, eps in -0.5f64..1.5, rms: bool, bias: bool,
    ) {
        let h = xd[xd.len() - 1];
        let wd = [h + wrong_w];
        let kind = if rms { NormKind::Rms } else { NormKind::Layer };
        let r = call(kind, &xd, &wd, bias, eps, CDType::BF16);
        let ok = xd.iter().all(|&d| d >= 1) && wrong_w == 0 && eps > 0.0 && eps <= 1.0;
        prop_assert_eq!(r.is_ok(), ok, "{:?}", r);
        if let Ok(c) = r {
            let rows: usize = xd[..xd.len() - 1].iter().product();
            prop_assert_eq!(c.rows as usize, rows);
            prop_assert_eq!(c.hidden as usize, h);
            prop_assert!(forward(&c, true).is_ok());
            prop_assert!(forward(&c, false).is_ok());
            prop_assert!(backward(&c).is_ok());
        }
    }

    /// Any dims and strides: a typed answer, never a panic.
    #[test]
    fn never_panics(
        xd in proptest::collection::vec(0usize..=usize::MAX, 0..5),
        xs in proptest::collection::vec(0usize..=usize::MAX, 0..5),
        h in 0usize..=usize::MAX, eps in proptest::num::f64::ANY,
    ) {
        let wd = [h];
        let _ = check(NormKind::Layer, &a("x", &xd, &xs, CDType::F32), &a("weight", &wd, &[1], CDType::F32), None, eps);
    }
}
