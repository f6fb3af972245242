//! Unit tier (needs no library): descriptor arguments are validated in Rust
//! before cuDNN is loaded or called, the errors name the argument and the
//! value, and the output-shape arithmetic matches hand-computed cases.
//!
//! Every rejection here happens before the library is touched, so these pass
//! on a machine without cuDNN.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::fmt::Debug;

use cudnn::Error;
use cudnn::dnn::*;
use support::*;

const M: usize = i32::MAX as usize;

/// `r` is an `InvalidArgument` naming `arg` with value `value`, and its
/// message shows both.
fn invalid<T: Debug>(r: cudnn::Result<T>, arg: &str, value: &str) -> TestResult {
    match r {
        Err(e @ Error::InvalidArgument { .. }) => {
            let Error::InvalidArgument {
                arg: a, value: v, ..
            } = &e
            else {
                unreachable!()
            };
            ensure!(
                a == arg && v == value,
                "expected `{arg}` = {value}, got `{a}` = {v} ({e})"
            );
            let msg = e.to_string();
            ensure!(
                msg.contains(arg) && msg.contains(value),
                "message lacks the argument or value: {msg}"
            );
            Ok(())
        }
        other => Err(format!("expected InvalidArgument `{arg}` = {value}, got {other:?}").into()),
    }
}

/// `r` is a `Mismatch` with these expected / got values.
fn mismatch<T: Debug>(r: cudnn::Result<T>, expected: &str, got: &str) -> TestResult {
    match r {
        Err(Error::Mismatch {
            what,
            expected: e,
            got: g,
        }) => {
            ensure!(
                e == expected && g == got,
                "{what}: expected {expected}/{got}, got {e}/{g}"
            );
            Ok(())
        }
        other => Err(format!("expected Mismatch {expected} vs {got}, got {other:?}").into()),
    }
}

fn tensor_rules() -> TestResult {
    type T = TensorDescriptor<f32>;
    invalid(T::new(&[4, 5], &[5, 1]), "dims.len()", "2")?;
    invalid(T::new(&[1; 9], &[1; 9]), "dims.len()", "9")?;
    invalid(T::packed(&[]), "dims.len()", "0")?;
    invalid(T::new(&[2, 3, 4], &[12, 4]), "strides.len()", "2")?;
    invalid(T::new(&[2, 0, 4], &[4, 4, 1]), "dims[1]", "0")?;
    invalid(T::new(&[2, 3, M + 1], &[1, 1, 1]), "dims[2]", "2147483648")?;
    invalid(
        T::new(&[2, 3, usize::MAX], &[1, 1, 1]),
        "dims[2]",
        &usize::MAX.to_string(),
    )?;
    invalid(T::new(&[2, 3, 4], &[12, 4, 0]), "strides[2]", "0")?;
    invalid(
        T::new(&[2, 3, 4], &[M + 1, 4, 1]),
        "strides[0]",
        "2147483648",
    )?;
    // span = 1 + 1 * i32::MAX = 2^31
    invalid(T::new(&[2, 1, 1], &[M, 1, 1]), "strides", "2147483648")?;
    invalid(
        T::nchw(2, 1 << 15, 1 << 15, 1),
        "dims",
        "2*32768*32768*1 = 2147483648",
    )?;
    invalid(T::nhwc(0, 3, 4, 5), "dims[0]", "0")?;
    // Overlapping strides keep the span small while the element count
    // overflows (a listed stricter-than-cuDNN rule).
    let big = [1usize << 28; 8];
    invalid(
        T::new(&big[..7], &[1; 7]),
        "dims",
        &format!("{:?}", &big[..7]),
    )?;
    invalid(TensorDescriptor::<i64>::nchw(1, 1, 1, 1), "T", "i64")?;
    Ok(())
}

fn filter_rules() -> TestResult {
    type F = FilterDescriptor<f32>;
    invalid(F::new(TensorFormat::Nchw, &[2, 3]), "dims.len()", "2")?;
    invalid(F::new(TensorFormat::Nhwc, &[1; 9]), "dims.len()", "9")?;
    invalid(F::nchw(4, 0, 3, 3), "dims[1]", "0")?;
    invalid(F::nhwc(4, 3, M + 1, 3), "dims[2]", "2147483648")?;
    invalid(
        F::nchw(1 << 16, 1 << 16, 1, 1),
        "dims",
        "[65536, 65536, 1, 1]",
    )?;
    invalid(FilterDescriptor::<i32>::nchw(1, 1, 1, 1), "T", "i32")?;
    invalid(FilterDescriptor::<i64>::nchw(1, 1, 1, 1), "T", "i64")?;
    Ok(())
}

fn conv_rules() -> TestResult {
    invalid(ConvDescriptor::new(&[], &[], &[]), "pad.len()", "0")?;
    invalid(
        ConvDescriptor::new(&[0; 7], &[1; 7], &[1; 7]),
        "pad.len()",
        "7",
    )?;
    invalid(
        ConvDescriptor::new(&[0, 0], &[1], &[1, 1]),
        "stride.len()",
        "1",
    )?;
    invalid(
        ConvDescriptor::new(&[0, 0], &[1, 1], &[1, 1, 1]),
        "dilation.len()",
        "3",
    )?;
    invalid(
        ConvDescriptor::new_2d([1, 1], [1, 0], [1, 1]),
        "stride[1]",
        "0",
    )?;
    invalid(
        ConvDescriptor::new_2d([1, 1], [1, 1], [0, 1]),
        "dilation[0]",
        "0",
    )?;
    invalid(
        ConvDescriptor::new_2d([M + 1, 1], [1, 1], [1, 1]),
        "pad[0]",
        "2147483648",
    )?;
    invalid(
        ConvDescriptor::new_2d([1, 1], [1, 1], [1, usize::MAX]),
        "dilation[1]",
        &usize::MAX.to_string(),
    )?;
    // The same rules in the pure output-shape function, plus groups.
    let x = [1, 4, 5, 5];
    let w = [4, 2, 3, 3];
    invalid(
        conv_output_shape(&x, &w, &[1, 1], &[1, 1], &[1, 1], 0),
        "groups",
        "0",
    )?;
    invalid(
        conv_output_shape(&x, &w, &[1, 1], &[1, 1], &[1, 1], M + 1),
        "groups",
        "2147483648",
    )?;
    Ok(())
}

fn conv_output_rules() -> TestResult {
    // Ranks.
    mismatch(
        conv_output_shape(
            &[1, 3, 5, 5, 5],
            &[4, 3, 3, 3],
            &[1, 1],
            &[1, 1],
            &[1, 1],
            1,
        ),
        "4",
        "5",
    )?;
    mismatch(
        conv_output_shape(&[1, 3, 5, 5], &[4, 3, 3], &[1, 1], &[1, 1], &[1, 1], 1),
        "4",
        "3",
    )?;
    // Channels: 7 != 3 * 2.
    mismatch(
        conv_output_shape(&[1, 7, 5, 5], &[4, 3, 3, 3], &[1, 1], &[1, 1], &[1, 1], 2),
        "6",
        "7",
    )?;
    // k not divisible by groups (stricter than cuDNN).
    invalid(
        conv_output_shape(&[1, 6, 5, 5], &[5, 3, 3, 3], &[1, 1], &[1, 1], &[1, 1], 2),
        "w.shape[0] (output channels)",
        "5",
    )?;
    // groups * w channels overflows i32 (stricter than cuDNN, which wraps).
    invalid(
        conv_output_shape(&[1, 2, 5], &[4, 3, 3], &[1], &[1], &[1], 1_431_655_766),
        "groups",
        "1431655766",
    )?;
    // Empty output: 2 + 0 < 3.
    invalid(
        conv_output_shape(&[1, 1, 2], &[1, 1, 3], &[0], &[2], &[1], 1),
        "x.shape[2]",
        "2",
    )?;
    // Dilation: 3 * (3 - 1) + 1 = 7 > 5 + 0.
    invalid(
        conv_output_shape(&[1, 1, 5], &[1, 1, 3], &[0], &[1], &[3], 1),
        "x.shape[2]",
        "5",
    )?;
    // The dilated filter overflows i32 (stricter than cuDNN).
    invalid(
        conv_output_shape(&[1, 1, 5], &[1, 1, 3], &[0], &[1], &[M], 1),
        "dilation[0]",
        "2147483647",
    )?;
    // The padded input overflows i32 (stricter than cuDNN).
    invalid(
        conv_output_shape(&[1, 1, 5], &[1, 1, 3], &[M / 2], &[1], &[1], 1),
        "pad[0]",
        "1073741823",
    )?;
    Ok(())
}

fn conv_output_formula() -> TestResult {
    // (x, w, pad, stride, dilation, groups) -> expected, computed by hand
    // with out = (in + 2*pad - dilation*(k-1) - 1) / stride + 1.
    #[allow(clippy::type_complexity)]
    let cases: &[(
        &[usize],
        &[usize],
        &[usize],
        &[usize],
        &[usize],
        usize,
        &[usize],
    )] = &[
        // same padding
        (
            &[1, 3, 5, 5],
            &[4, 3, 3, 3],
            &[1, 1],
            &[1, 1],
            &[1, 1],
            1,
            &[1, 4, 5, 5],
        ),
        // ResNet stem: (224 + 6 - 7) / 2 + 1 = 112
        (
            &[8, 3, 224, 224],
            &[64, 3, 7, 7],
            &[3, 3],
            &[2, 2],
            &[1, 1],
            1,
            &[8, 64, 112, 112],
        ),
        // valid, no padding: 28 - 5 + 1 = 24
        (
            &[2, 1, 28, 28],
            &[6, 1, 5, 5],
            &[0, 0],
            &[1, 1],
            &[1, 1],
            1,
            &[2, 6, 24, 24],
        ),
        // stride rounds down: (10 - 3) / 3 + 1 = 3
        (&[1, 1, 10], &[1, 1, 3], &[0], &[3], &[1], 1, &[1, 1, 3]),
        // dilation 2: extent 5, 10 - 5 + 1 = 6
        (&[1, 1, 10], &[1, 1, 3], &[0], &[1], &[2], 1, &[1, 1, 6]),
        // dilation and padding: (7 + 4 - 5) / 1 + 1 = 7
        (
            &[1, 2, 7, 7],
            &[2, 2, 3, 3],
            &[2, 2],
            &[1, 1],
            &[2, 2],
            1,
            &[1, 2, 7, 7],
        ),
        // asymmetric: h (9 + 2 - 3) / 2 + 1 = 5, w (6 + 0 - 1) / 1 + 1 = 6
        (
            &[1, 1, 9, 6],
            &[1, 1, 3, 1],
            &[1, 0],
            &[2, 1],
            &[1, 1],
            1,
            &[1, 1, 5, 6],
        ),
        // groups: 6 = 2 * 3, 9 - 3 + 1 = 7
        (
            &[2, 6, 9, 9],
            &[6, 2, 3, 3],
            &[0, 0],
            &[1, 1],
            &[1, 1],
            3,
            &[2, 6, 7, 7],
        ),
        // depthwise
        (
            &[1, 4, 8, 8],
            &[4, 1, 3, 3],
            &[1, 1],
            &[1, 1],
            &[1, 1],
            4,
            &[1, 4, 8, 8],
        ),
        // 3-d: (4-2)/2+1 = 2, (5-2)/2+1 = 2, (6-2)/2+1 = 3
        (
            &[1, 2, 4, 5, 6],
            &[3, 2, 2, 2, 2],
            &[0, 0, 0],
            &[2, 2, 2],
            &[1, 1, 1],
            1,
            &[1, 3, 2, 2, 3],
        ),
        // exactly fits: 3 - 3 + 1 = 1
        (&[1, 1, 3], &[1, 1, 3], &[0], &[1], &[1], 1, &[1, 1, 1]),
        // padding larger than the filter is allowed: 1 + 20 - 3 + 1 = 19
        (&[1, 1, 1], &[1, 1, 3], &[10], &[1], &[1], 1, &[1, 1, 19]),
        // huge stride: one output
        (&[1, 1, 5], &[1, 1, 3], &[1], &[M], &[1], 1, &[1, 1, 1]),
        // near the largest padded input: (i32::MAX - 2) - 3 + 1
        (
            &[1, 1, 5],
            &[1, 1, 3],
            &[(M - 6) / 2],
            &[1],
            &[1],
            1,
            &[1, 1, M - 4],
        ),
        // 6 spatial dims
        (
            &[1, 1, 2, 2, 2, 2, 2, 2],
            &[1, 1, 1, 1, 1, 1, 1, 1],
            &[0; 6],
            &[1; 6],
            &[1; 6],
            1,
            &[1, 1, 2, 2, 2, 2, 2, 2],
        ),
    ];
    for (x, w, pad, stride, dil, g, want) in cases {
        let got = conv_output_shape(x, w, pad, stride, dil, *g)
            .map_err(|e| format!("{x:?} * {w:?}: {e}"))?;
        ensure!(
            got == *want,
            "{x:?} * {w:?} pad {pad:?} stride {stride:?} dil {dil:?} g {g}: {got:?} != {want:?}"
        );
    }
    Ok(())
}

fn pooling_rules() -> TestResult {
    use PoolingMode::*;
    let nan = NanPropagation::Propagate;
    invalid(
        PoolingDescriptor::new(Max, nan, &[], &[], &[]),
        "window.len()",
        "0",
    )?;
    invalid(
        PoolingDescriptor::new(Max, nan, &[2; 7], &[0; 7], &[1; 7]),
        "window.len()",
        "7",
    )?;
    invalid(
        PoolingDescriptor::new(Max, nan, &[2, 2], &[0], &[1, 1]),
        "pad.len()",
        "1",
    )?;
    invalid(
        PoolingDescriptor::new(Max, nan, &[2, 2], &[0, 0], &[1, 1, 1]),
        "stride.len()",
        "3",
    )?;
    invalid(
        PoolingDescriptor::new_2d(Max, [0, 2], [0, 0], [1, 1]),
        "window[0]",
        "0",
    )?;
    invalid(
        PoolingDescriptor::new_2d(Max, [2, 2], [0, 0], [1, 0]),
        "stride[1]",
        "0",
    )?;
    invalid(
        PoolingDescriptor::new_2d(Max, [2, M + 1], [0, 0], [1, 1]),
        "window[1]",
        "2147483648",
    )?;
    // Padding must be smaller than the window (stricter than cuDNN).
    invalid(
        PoolingDescriptor::new_2d(AverageExcludePadding, [2, 3], [1, 3], [1, 1]),
        "pad[1]",
        "3",
    )?;
    invalid(
        PoolingDescriptor::new_2d(Max, [2, 2], [2, 0], [1, 1]),
        "pad[0]",
        "2",
    )?;
    // Output shape.
    mismatch(
        pooling_output_shape(&[1, 3, 5, 5, 5], &[2, 2], &[0, 0], &[2, 2]),
        "4",
        "5",
    )?;
    invalid(
        pooling_output_shape(&[1, 3, 1, 1], &[3, 3], &[0, 0], &[1, 1]),
        "x.shape[2]",
        "1",
    )?;
    invalid(
        pooling_output_shape(&[1, 3, 5], &[M], &[M / 2], &[1]),
        "pad[0]",
        "1073741823",
    )?;
    Ok(())
}

fn pooling_output_formula() -> TestResult {
    // (x, window, pad, stride) -> expected, by hand with
    // out = (in + 2*pad - window) / stride + 1.
    #[allow(clippy::type_complexity)]
    let cases: &[(&[usize], &[usize], &[usize], &[usize], &[usize])] = &[
        (&[1, 3, 5, 5], &[2, 2], &[0, 0], &[2, 2], &[1, 3, 2, 2]),
        // ResNet max pool: (112 + 2 - 3) / 2 + 1 = 56
        (
            &[8, 64, 112, 112],
            &[3, 3],
            &[1, 1],
            &[2, 2],
            &[8, 64, 56, 56],
        ),
        // overlapping windows: (7 - 3) / 1 + 1 = 5
        (&[1, 1, 7], &[3], &[0], &[1], &[1, 1, 5]),
        // global pooling
        (&[4, 512, 7, 7], &[7, 7], &[0, 0], &[1, 1], &[4, 512, 1, 1]),
        // padding: (5 + 2 - 2) / 2 + 1 = 3
        (&[1, 1, 5], &[2], &[1], &[2], &[1, 1, 3]),
        // 3-d: (4 - 2)/2+1 = 2, (6 + 2 - 3)/2+1 = 3, (1 - 1)/1+1 = 1
        (
            &[2, 2, 4, 6, 1],
            &[2, 3, 1],
            &[0, 1, 0],
            &[2, 2, 1],
            &[2, 2, 2, 3, 1],
        ),
        // the window reaches into padding on both sides: (1 + 2 - 2) / 1 + 1 = 2
        (&[1, 1, 1], &[2], &[1], &[1], &[1, 1, 2]),
    ];
    for (x, window, pad, stride, want) in cases {
        let got =
            pooling_output_shape(x, window, pad, stride).map_err(|e| format!("{x:?}: {e}"))?;
        ensure!(
            got == *want,
            "{x:?} window {window:?} pad {pad:?} stride {stride:?}: {got:?} != {want:?}"
        );
    }
    Ok(())
}

fn activation_rules() -> TestResult {
    use ActivationMode::*;
    let nan = NanPropagation::NotPropagate;
    invalid(
        ActivationDescriptor::new(ClippedRelu { ceiling: f64::NAN }, nan),
        "ceiling",
        "NaN",
    )?;
    invalid(
        ActivationDescriptor::new(ClippedRelu { ceiling: -1.0 }, nan),
        "ceiling",
        "-1",
    )?;
    invalid(
        ActivationDescriptor::new(
            Elu {
                alpha: f64::INFINITY,
            },
            nan,
        ),
        "alpha",
        "inf",
    )?;
    invalid(
        ActivationDescriptor::new(Elu { alpha: f64::NAN }, nan),
        "alpha",
        "NaN",
    )?;
    invalid(
        ActivationDescriptor::new(
            Swish {
                beta: f64::NEG_INFINITY,
            },
            nan,
        ),
        "beta",
        "-inf",
    )?;
    for ok in [
        Relu,
        Sigmoid,
        Tanh,
        Identity,
        ClippedRelu { ceiling: 6.0 },
        ClippedRelu { ceiling: 0.0 },
        ClippedRelu {
            ceiling: f64::INFINITY,
        },
        Elu { alpha: -2.5 },
        Swish { beta: 1.0 },
    ] {
        ensure!(ok.validate().is_ok(), "{ok:?} rejected");
    }
    ensure!(
        ClippedRelu { ceiling: 6.0 }.coef() == 6.0 && Elu { alpha: 0.5 }.coef() == 0.5,
        "coef"
    );
    ensure!(
        Swish { beta: 2.0 }.coef() == 0.0 && Relu.coef() == 0.0,
        "coef of modes without one"
    );
    Ok(())
}

fn enums_round_trip() -> TestResult {
    for f in [TensorFormat::Nchw, TensorFormat::Nhwc] {
        ensure!(TensorFormat::from_raw(f.to_raw())? == f, "{f:?}");
    }
    for m in [ConvMode::Convolution, ConvMode::CrossCorrelation] {
        ensure!(ConvMode::from_raw(m.to_raw())? == m, "{m:?}");
    }
    for m in [
        MathType::Default,
        MathType::TensorOp,
        MathType::TensorOpAllowConversion,
        MathType::Fma,
    ] {
        ensure!(MathType::from_raw(m.to_raw())? == m, "{m:?}");
    }
    for c in [
        ComputeType::F16,
        ComputeType::F32,
        ComputeType::F64,
        ComputeType::I32,
    ] {
        ensure!(ComputeType::from_raw(c.to_raw())? == c, "{c:?}");
    }
    for m in [
        PoolingMode::Max,
        PoolingMode::MaxDeterministic,
        PoolingMode::AverageIncludePadding,
        PoolingMode::AverageExcludePadding,
    ] {
        ensure!(PoolingMode::from_raw(m.to_raw())? == m, "{m:?}");
    }
    for n in [NanPropagation::NotPropagate, NanPropagation::Propagate] {
        ensure!(NanPropagation::from_raw(n.to_raw())? == n, "{n:?}");
    }
    ensure!(
        ConvMode::default() == ConvMode::CrossCorrelation,
        "default conv mode"
    );
    ensure!(ComputeType::of::<f32>()? == ComputeType::F32, "f32");
    ensure!(ComputeType::of::<half::f16>()? == ComputeType::F16, "f16");
    invalid(ComputeType::of::<half::bf16>(), "T", "bf16")?;
    invalid(ComputeType::of::<i8>(), "T", "i8")?;
    invalid(
        ComputeType::from_raw(cudnn::sys::cudnn::cudnnDataType_t(99)),
        "compute type",
        "99",
    )?;
    Ok(())
}

pub fn main() {
    run(vec![
        unit("tensor_validation_names_argument_and_value", tensor_rules),
        unit("filter_validation_names_argument_and_value", filter_rules),
        unit("conv_validation_names_argument_and_value", conv_rules),
        unit("conv_output_shape_rejections", conv_output_rules),
        unit("conv_output_shape_hand_computed", conv_output_formula),
        unit(
            "pooling_validation_and_output_shape_rejections",
            pooling_rules,
        ),
        unit("pooling_output_shape_hand_computed", pooling_output_formula),
        unit("activation_validation", activation_rules),
        unit("enums_round_trip_through_raw_constants", enums_round_trip),
    ])
}
