//! Host tier (the real cuDNN, no GPU): descriptor round trips, output shapes
//! against cuDNN, the agreement property test, and a leak check.
//!
//! Run against cuDNN 9 (default) and 8.9:
//! `CUDNN_RS_SEARCH_PATH=$PWD/.cuda-libs/cuda12 cargo test -p cudnn-rs --features dnn,blas,reference --test host descriptors::`.
//!
//! # The agreement property test
//! For random descriptor configurations, valid and invalid (zero, huge,
//! "negative" as huge, overflowing; bad strides; padding past the window;
//! channels not divisible by groups; 0 to 9 dimensions; every element type,
//! compute type and layout), it calls our validating constructor and,
//! separately, the raw cuDNN set function with the same numbers (a value that
//! does not fit a C `int` counts as "cuDNN rejects"). Then:
//!
//! `we accept  ==  cuDNN accepts && no listed stricter rule applies`
//!
//! and, when both accept, our read-back values and output shapes equal
//! cuDNN's. Our rejections must be our own errors (never a cuDNN status: the
//! arguments are validated before cuDNN sees them), and nothing may panic.
//!
//! The listed rules where we are deliberately stricter than cuDNN (also in
//! the docs of each module) are [`STRICTER`]; every one of them must be seen
//! at least once as "we reject, cuDNN accepts" (2-d tensors: on cuDNN 9 only,
//! cuDNN 8.9 rejects them itself).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::null_mut;
use std::time::Instant;

use cudnn::dnn::*;
use cudnn::sys::cudnn as dnn;
use cudnn::{DataType, Error};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use support::*;

const M: usize = i32::MAX as usize;

// ---------------------------------------------------------------------------
// The listed stricter-than-cuDNN rules (see the module docs of tensor.rs,
// filter.rs, conv.rs, pooling.rs and activation.rs).

const T_2D: &str = "tensor: exactly 2 dimensions (cuDNN 9 accepts, 8.9 rejects)";
const T_COUNT: &str = "tensor: element count overflows usize (overlapping strides)";
const T_4D_WRAP: &str = "tensor 4d: n*c*h*w over i32::MAX (cuDNN's 32-bit strides wrap)";
const F_COUNT: &str = "filter: more than i32::MAX elements";
const C_NO_SPATIAL: &str = "conv: 0 spatial dimensions";
const C_K_GROUPS: &str = "conv: output channels not divisible by groups";
const C_GROUP_CHANNELS: &str = "conv: groups * w channels over i32::MAX";
const C_DILATED: &str = "conv: dilation * (k - 1) + 1 over i32::MAX";
const C_PADDED: &str = "conv: x + 2 * pad over i32::MAX";
const P_PAD_WINDOW: &str = "pool: pad >= window";
const P_PADDED: &str = "pool: x + 2 * pad over i32::MAX";
const A_CEILING: &str = "activation: clipped-ReLU ceiling NaN or negative";
const A_ALPHA: &str = "activation: ELU alpha not finite";
const A_BETA: &str = "activation: swish beta not finite";

/// Every listed rule.
const STRICTER: &[&str] = &[
    T_2D,
    T_COUNT,
    T_4D_WRAP,
    F_COUNT,
    C_NO_SPATIAL,
    C_K_GROUPS,
    C_GROUP_CHANNELS,
    C_DILATED,
    C_PADDED,
    P_PAD_WINDOW,
    P_PADDED,
    A_CEILING,
    A_ALPHA,
    A_BETA,
];

// ---------------------------------------------------------------------------
// Raw cuDNN, straight through the bindings, for comparison.

fn api() -> &'static dnn::Cudnn {
    dnn::load().expect("host tests run only where cuDNN loads")
}

fn major() -> u32 {
    api().info().version.map_or(0, |v| v.major)
}

fn ok(st: Result<dnn::cudnnStatus_t, dnn::MissingSymbol>) -> bool {
    matches!(st, Ok(s) if api().normalize_status(s) == dnn::cudnnStatus_t::CUDNN_STATUS_SUCCESS)
}

/// The values as C ints, or `None` when one does not fit (cuDNN rejects).
fn ints(v: &[usize]) -> Option<Vec<i32>> {
    v.iter().map(|&x| i32::try_from(x).ok()).collect()
}

macro_rules! raw_guard {
    ($name:ident, $st:ident, $create:ident, $destroy:ident) => {
        struct $name(*mut dnn::$st);
        impl $name {
            fn new() -> Self {
                let mut p = null_mut();
                // SAFETY: valid out-pointer.
                assert!(ok(unsafe { api().$create(&mut p) }));
                Self(p)
            }
        }
        impl Drop for $name {
            fn drop(&mut self) {
                // SAFETY: created above, destroyed once.
                unsafe { api().$destroy(self.0) }.unwrap();
            }
        }
    };
}
raw_guard!(
    RawT,
    cudnnTensorStruct,
    cudnnCreateTensorDescriptor,
    cudnnDestroyTensorDescriptor
);
raw_guard!(
    RawF,
    cudnnFilterStruct,
    cudnnCreateFilterDescriptor,
    cudnnDestroyFilterDescriptor
);
raw_guard!(
    RawC,
    cudnnConvolutionStruct,
    cudnnCreateConvolutionDescriptor,
    cudnnDestroyConvolutionDescriptor
);
raw_guard!(
    RawP,
    cudnnPoolingStruct,
    cudnnCreatePoolingDescriptor,
    cudnnDestroyPoolingDescriptor
);
raw_guard!(
    RawA,
    cudnnActivationStruct,
    cudnnCreateActivationDescriptor,
    cudnnDestroyActivationDescriptor
);

fn raw_tensor_nd(dt: dnn::cudnnDataType_t, dims: &[usize], strides: &[usize]) -> Option<RawT> {
    let (d, s) = (ints(dims)?, ints(strides)?);
    let r = RawT::new();
    // SAFETY: arrays of dims.len() ints.
    ok(
        unsafe {
            api().cudnnSetTensorNdDescriptor(r.0, dt, d.len() as i32, d.as_ptr(), s.as_ptr())
        },
    )
    .then_some(r)
}

fn raw_tensor_4d(format: TensorFormat, dt: dnn::cudnnDataType_t, dims: [usize; 4]) -> Option<RawT> {
    let d = ints(&dims)?;
    let r = RawT::new();
    // SAFETY: plain values.
    ok(unsafe {
        api().cudnnSetTensor4dDescriptor(r.0, format.to_raw(), dt, d[0], d[1], d[2], d[3])
    })
    .then_some(r)
}

fn raw_filter_nd(dt: dnn::cudnnDataType_t, format: TensorFormat, dims: &[usize]) -> Option<RawF> {
    let d = ints(dims)?;
    let r = RawF::new();
    // SAFETY: an array of dims.len() ints.
    ok(unsafe {
        api().cudnnSetFilterNdDescriptor(r.0, dt, format.to_raw(), d.len() as i32, d.as_ptr())
    })
    .then_some(r)
}

/// `(dtype, dims, strides)` read back.
fn read_tensor(d: dnn::cudnnTensorDescriptor_t) -> (dnn::cudnnDataType_t, Vec<usize>, Vec<usize>) {
    let (mut dt, mut nb, mut dims, mut strides) =
        (dnn::cudnnDataType_t(99), 0, [0i32; 8], [0i32; 8]);
    // SAFETY: arrays of 8.
    let st = unsafe {
        api().cudnnGetTensorNdDescriptor(
            d,
            8,
            &mut dt,
            &mut nb,
            dims.as_mut_ptr(),
            strides.as_mut_ptr(),
        )
    };
    assert!(ok(st));
    let n = nb as usize;
    (
        dt,
        dims[..n].iter().map(|&v| v as usize).collect(),
        strides[..n].iter().map(|&v| v as usize).collect(),
    )
}

fn tensor_bytes(d: dnn::cudnnTensorDescriptor_t) -> usize {
    let mut size = 0usize;
    // SAFETY: valid out-pointer.
    assert!(ok(unsafe { api().cudnnGetTensorSizeInBytes(d, &mut size) }));
    size
}

/// `(dtype, format, dims)` read back.
fn read_filter(
    d: dnn::cudnnFilterDescriptor_t,
) -> (dnn::cudnnDataType_t, dnn::cudnnTensorFormat_t, Vec<usize>) {
    let (mut dt, mut f, mut nb, mut dims) = (
        dnn::cudnnDataType_t(99),
        dnn::cudnnTensorFormat_t(99),
        0,
        [0i32; 8],
    );
    // SAFETY: an array of 8.
    let st = unsafe {
        api().cudnnGetFilterNdDescriptor(d, 8, &mut dt, &mut f, &mut nb, dims.as_mut_ptr())
    };
    assert!(ok(st));
    (
        dt,
        f,
        dims[..nb as usize].iter().map(|&v| v as usize).collect(),
    )
}

struct ConvRead {
    pad: Vec<usize>,
    stride: Vec<usize>,
    dilation: Vec<usize>,
    mode: dnn::cudnnConvolutionMode_t,
    compute: dnn::cudnnDataType_t,
    groups: usize,
    math: dnn::cudnnMathType_t,
}

fn read_conv(d: dnn::cudnnConvolutionDescriptor_t) -> ConvRead {
    let (mut n, mut p, mut s, mut dl) = (0, [0i32; 6], [0i32; 6], [0i32; 6]);
    let (mut mode, mut ct) = (dnn::cudnnConvolutionMode_t(99), dnn::cudnnDataType_t(99));
    let (mut g, mut math) = (0, dnn::cudnnMathType_t(99));
    // SAFETY: arrays of 6, valid out-pointers.
    unsafe {
        assert!(ok(api().cudnnGetConvolutionNdDescriptor(
            d,
            6,
            &mut n,
            p.as_mut_ptr(),
            s.as_mut_ptr(),
            dl.as_mut_ptr(),
            &mut mode,
            &mut ct
        )));
        assert!(ok(api().cudnnGetConvolutionGroupCount(d, &mut g)));
        assert!(ok(api().cudnnGetConvolutionMathType(d, &mut math)));
    }
    let v = |a: &[i32]| a[..n as usize].iter().map(|&x| x as usize).collect();
    ConvRead {
        pad: v(&p),
        stride: v(&s),
        dilation: v(&dl),
        mode,
        compute: ct,
        groups: g as usize,
        math,
    }
}

struct PoolRead {
    mode: dnn::cudnnPoolingMode_t,
    nan: dnn::cudnnNanPropagation_t,
    window: Vec<usize>,
    pad: Vec<usize>,
    stride: Vec<usize>,
}

fn read_pool(d: dnn::cudnnPoolingDescriptor_t) -> PoolRead {
    let (mut mode, mut nan, mut n) = (
        dnn::cudnnPoolingMode_t(99),
        dnn::cudnnNanPropagation_t(99),
        0,
    );
    let (mut w, mut p, mut s) = ([0i32; 6], [0i32; 6], [0i32; 6]);
    // SAFETY: arrays of 6, valid out-pointers.
    let st = unsafe {
        api().cudnnGetPoolingNdDescriptor(
            d,
            6,
            &mut mode,
            &mut nan,
            &mut n,
            w.as_mut_ptr(),
            p.as_mut_ptr(),
            s.as_mut_ptr(),
        )
    };
    assert!(ok(st));
    let v = |a: &[i32]| a[..n as usize].iter().map(|&x| x as usize).collect();
    PoolRead {
        mode,
        nan,
        window: v(&w),
        pad: v(&p),
        stride: v(&s),
    }
}

/// `(mode, nan, coef, swish beta)` read back.
fn read_activation(
    d: dnn::cudnnActivationDescriptor_t,
) -> (
    dnn::cudnnActivationMode_t,
    dnn::cudnnNanPropagation_t,
    f64,
    f64,
) {
    let (mut mode, mut nan, mut coef, mut beta) = (
        dnn::cudnnActivationMode_t(99),
        dnn::cudnnNanPropagation_t(99),
        f64::NAN,
        f64::NAN,
    );
    // SAFETY: valid out-pointers.
    unsafe {
        assert!(ok(api().cudnnGetActivationDescriptor(
            d, &mut mode, &mut nan, &mut coef
        )));
        assert!(ok(api().cudnnGetActivationDescriptorSwishBeta(d, &mut beta)));
    }
    (mode, nan, coef, beta)
}

// ---------------------------------------------------------------------------
// Round trips.

fn is_send<T: Send>() {}

fn tensor_round_trip<T: DataType>() -> TestResult {
    for (format, n, c, h, w) in [
        (TensorFormat::Nchw, 2, 3, 4, 5),
        (TensorFormat::Nhwc, 2, 3, 4, 5),
        (TensorFormat::Nhwc, 1, 1, 1, 1),
    ] {
        let t = TensorDescriptor::<T>::with_format(format, n, c, h, w)?;
        let want_strides = match format {
            TensorFormat::Nchw => [c * h * w, h * w, w, 1],
            TensorFormat::Nhwc => [h * w * c, 1, w * c, c],
        };
        ensure!(
            t.shape() == [n, c, h, w] && t.strides() == want_strides,
            "{t:?}"
        );
        let (mut dt, mut d, mut s) = (dnn::cudnnDataType_t(99), [0i32; 4], [0i32; 4]);
        // SAFETY: valid out-pointers.
        let st = unsafe {
            api().cudnnGetTensor4dDescriptor(
                t.as_raw(),
                &mut dt,
                &mut d[0],
                &mut d[1],
                &mut d[2],
                &mut d[3],
                &mut s[0],
                &mut s[1],
                &mut s[2],
                &mut s[3],
            )
        };
        ensure!(ok(st), "cudnnGetTensor4dDescriptor failed");
        ensure!(dt == T::CUDNN, "{}: dtype {}", T::NAME, dt.0);
        ensure!(
            d.map(|v| v as usize) == [n, c, h, w] && s.map(|v| v as usize) == want_strides,
            "{d:?} {s:?}"
        );
        ensure!(
            t.element_count() == n * c * h * w && t.len_required() == n * c * h * w,
            "{t:?}"
        );
        ensure!(
            t.bytes() == tensor_bytes(t.as_raw()),
            "bytes {} vs {}",
            t.bytes(),
            tensor_bytes(t.as_raw())
        );
        ensure!(
            t.is_packed() == (format == TensorFormat::Nchw || c == 1),
            "is_packed {t:?}"
        );
    }
    // N-d with explicit strides: padded rows, channels-last 3-d, overlap,
    // a size-1 dimension with stride 0, 8 dimensions.
    let cases: &[(&[usize], &[usize])] = &[
        (&[2, 3, 4, 5], &[80, 20, 5, 1]),
        (&[2, 3, 4, 5], &[128, 32, 8, 1]),
        (&[2, 3, 4, 5, 6], &[360, 1, 90, 18, 3]),
        (&[2, 3, 4], &[1, 1, 1]),
        (&[2, 1, 4], &[4, 0, 1]),
        (&[1, 2, 1, 2, 1, 2, 1, 2], &[16, 8, 8, 4, 4, 2, 2, 1]),
    ];
    for &(dims, strides) in cases {
        let t = TensorDescriptor::<T>::new(dims, strides)?;
        let (dt, d, s) = read_tensor(t.as_raw());
        ensure!(
            dt == T::CUDNN && d == dims && s == strides,
            "{dims:?} {strides:?}: read back {d:?} {s:?}"
        );
        let span = 1 + dims
            .iter()
            .zip(strides)
            .map(|(d, s)| (d - 1) * s)
            .sum::<usize>();
        ensure!(
            t.len_required() == span,
            "span {} vs {span}",
            t.len_required()
        );
        ensure!(
            t.bytes() == span * T::SIZE && t.bytes() == tensor_bytes(t.as_raw()),
            "bytes {}",
            t.bytes()
        );
        ensure!(t.element_count() == dims.iter().product::<usize>(), "count");
        ensure!(t.rank() == dims.len(), "rank");
        // Ownership out and back in.
        let raw = t.into_raw();
        // SAFETY: raw came from into_raw and is handed back once.
        let back = unsafe { TensorDescriptor::<T>::from_raw(raw) }?;
        ensure!(
            back.shape() == dims && back.strides() == strides,
            "from_raw {back:?}"
        );
        back.destroy()?;
    }
    let p = TensorDescriptor::<T>::packed(&[2, 3, 4, 5, 6])?;
    ensure!(
        p.strides() == [360, 120, 30, 6, 1] && p.is_packed(),
        "{p:?}"
    );
    Ok(())
}

fn tensor_from_raw_wrong_dtype() -> TestResult {
    let t = TensorDescriptor::<f32>::nchw(1, 2, 3, 4)?;
    let raw = t.into_raw();
    // SAFETY: raw is live; on error from_raw leaves it to us.
    let r = unsafe { TensorDescriptor::<f64>::from_raw(raw) };
    ensure!(matches!(r, Err(Error::Mismatch { .. })), "{r:?}");
    // Still ours to take back, then destroy.
    // SAFETY: not destroyed by the failed from_raw.
    let back = unsafe { TensorDescriptor::<f32>::from_raw(raw) }?;
    back.destroy()?;
    // SAFETY: null is rejected before use.
    let r = unsafe { TensorDescriptor::<f32>::from_raw(null_mut()) };
    ensure!(matches!(r, Err(Error::InvalidArgument { .. })), "{r:?}");
    Ok(())
}

fn filter_round_trip<T: DataType>() -> TestResult {
    for format in [TensorFormat::Nchw, TensorFormat::Nhwc] {
        let f = match format {
            TensorFormat::Nchw => FilterDescriptor::<T>::nchw(8, 3, 5, 7)?,
            TensorFormat::Nhwc => FilterDescriptor::<T>::nhwc(8, 3, 5, 7)?,
        };
        let (mut dt, mut fmt, mut d) = (
            dnn::cudnnDataType_t(99),
            dnn::cudnnTensorFormat_t(99),
            [0i32; 4],
        );
        // SAFETY: valid out-pointers.
        let st = unsafe {
            api().cudnnGetFilter4dDescriptor(
                f.as_raw(),
                &mut dt,
                &mut fmt,
                &mut d[0],
                &mut d[1],
                &mut d[2],
                &mut d[3],
            )
        };
        ensure!(ok(st), "cudnnGetFilter4dDescriptor");
        ensure!(
            dt == T::CUDNN && fmt == format.to_raw() && d == [8, 3, 5, 7],
            "{d:?} {}",
            fmt.0
        );
        ensure!(
            f.shape() == [8, 3, 5, 7] && f.window() == [5, 7] && f.format() == format,
            "{f:?}"
        );
        ensure!(f.output_channels() == 8 && f.input_channels() == 3, "{f:?}");
        let mut size = 0usize;
        // SAFETY: valid out-pointer.
        let st = unsafe { api().cudnnGetFilterSizeInBytes(f.as_raw(), &mut size) };
        ensure!(ok(st), "size");
        ensure!(
            f.bytes() == size && size == 8 * 3 * 5 * 7 * T::SIZE,
            "bytes {} vs {size}",
            f.bytes()
        );
    }
    for dims in [
        &[4usize, 2, 3][..],
        &[4, 2, 3, 3, 3],
        &[1, 1, 1, 1, 1, 1, 1, 2],
    ] {
        for format in [TensorFormat::Nchw, TensorFormat::Nhwc] {
            let f = FilterDescriptor::<T>::new(format, dims)?;
            let (dt, fmt, d) = read_filter(f.as_raw());
            ensure!(
                dt == T::CUDNN && fmt == format.to_raw() && d == dims,
                "{dims:?}: {d:?}"
            );
            ensure!(
                f.element_count() == dims.iter().product::<usize>() && f.rank() == dims.len(),
                "{f:?}"
            );
            let raw = f.into_raw();
            // SAFETY: handed back once.
            let back = unsafe { FilterDescriptor::<T>::from_raw(raw) }?;
            ensure!(back.shape() == dims && back.format() == format, "{back:?}");
        }
    }
    Ok(())
}

fn conv_round_trip() -> TestResult {
    let c = ConvDescriptor::new_2d([1, 2], [3, 4], [5, 6])?;
    let (mut ph, mut pw, mut u, mut v, mut dh, mut dw) = (0, 0, 0, 0, 0, 0);
    let (mut mode, mut ct) = (dnn::cudnnConvolutionMode_t(99), dnn::cudnnDataType_t(99));
    // SAFETY: valid out-pointers.
    let st = unsafe {
        api().cudnnGetConvolution2dDescriptor(
            c.as_raw(),
            &mut ph,
            &mut pw,
            &mut u,
            &mut v,
            &mut dh,
            &mut dw,
            &mut mode,
            &mut ct,
        )
    };
    ensure!(ok(st), "cudnnGetConvolution2dDescriptor");
    ensure!(
        [ph, pw, u, v, dh, dw] == [1, 2, 3, 4, 5, 6],
        "{:?}",
        [ph, pw, u, v, dh, dw]
    );
    ensure!(
        mode == dnn::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
        "default mode {}",
        mode.0
    );
    ensure!(
        ct == dnn::cudnnDataType_t::CUDNN_DATA_FLOAT,
        "default compute {}",
        ct.0
    );
    let r = read_conv(c.as_raw());
    ensure!(
        r.groups == 1 && r.math == dnn::cudnnMathType_t::CUDNN_DEFAULT_MATH,
        "defaults"
    );

    for (mode, compute, groups, math) in [
        (ConvMode::Convolution, ComputeType::F64, 3, MathType::Fma),
        (
            ConvMode::CrossCorrelation,
            ComputeType::F16,
            32,
            MathType::TensorOp,
        ),
        (
            ConvMode::Convolution,
            ComputeType::I32,
            1,
            MathType::TensorOpAllowConversion,
        ),
    ] {
        // Groups and math set first: changing mode or compute type must keep them.
        let mut c = ConvDescriptor::new(&[0, 1, 2], &[1, 2, 3], &[2, 1, 1])?
            .with_groups(groups)?
            .with_math_type(math)?;
        c.set_mode(mode)?;
        c.set_compute_type(compute)?;
        let r = read_conv(c.as_raw());
        ensure!(
            r.pad == [0, 1, 2] && r.stride == [1, 2, 3] && r.dilation == [2, 1, 1],
            "arrays"
        );
        ensure!(
            r.mode == mode.to_raw() && r.compute == compute.to_raw(),
            "mode {} compute {}",
            r.mode.0,
            r.compute.0
        );
        ensure!(
            r.groups == groups && r.math == math.to_raw(),
            "groups {} math {}",
            r.groups,
            r.math.0
        );
        ensure!(
            c.mode() == mode
                && c.compute_type() == compute
                && c.groups() == groups
                && c.math_type() == math,
            "{c:?}"
        );
        ensure!(
            c.pad() == [0, 1, 2]
                && c.stride() == [1, 2, 3]
                && c.dilation() == [2, 1, 1]
                && c.spatial_dims() == 3,
            "{c:?}"
        );
        let raw = c.into_raw();
        // SAFETY: handed back once.
        let back = unsafe { ConvDescriptor::from_raw(raw) }?;
        ensure!(
            back.groups() == groups && back.math_type() == math && back.mode() == mode,
            "{back:?}"
        );
        ensure!(
            back.compute_type() == compute && back.pad() == [0, 1, 2],
            "{back:?}"
        );
        back.destroy()?;
    }
    Ok(())
}

/// Dims-only constructors and derived outputs blame what the caller passed.
fn errors_name_what_was_passed() -> TestResult {
    // No strides were passed: the packed tensor's size is about `dims`.
    match TensorDescriptor::<f32>::packed(&[2, 1 << 30, 2]) {
        Err(Error::InvalidArgument { arg, rule, value }) => ensure!(
            arg == "dims" && rule.contains("packed") && value.contains("4294967296"),
            "{arg}: {rule}: {value}"
        ),
        other => return Err(format!("expected dims error, got {other:?}").into()),
    }
    // The output of a forward conv is derived: name it and its shape.
    let x = TensorDescriptor::<f32>::nchw(1 << 16, 1, 128, 128)?;
    let w = FilterDescriptor::<f32>::nchw(16, 1, 1, 1)?;
    let conv = ConvDescriptor::new(&[0, 0], &[1, 1], &[1, 1])?;
    match ConvProblem::forward(&x, &w, &conv) {
        Err(Error::InvalidArgument { arg, rule, .. }) => ensure!(
            arg.contains("y (the output descriptor)")
                && rule.contains("[65536, 16, 128, 128]")
                && !arg.contains("strides"),
            "{arg}: {rule}"
        ),
        other => return Err(format!("expected an output error, got {other:?}").into()),
    }
    Ok(())
}

/// A 3x3 window with padding 2 on a 4x4 input: cuDNN (and the default
/// descriptor) give 6x6; PyTorch's rule (pad <= kernel / 2) refuses it, as
/// `new_strict` does. Padding 1 is fine under both.
fn pooling_strict() -> TestResult {
    let x = TensorDescriptor::<f32>::nchw(1, 1, 4, 4)?;
    let loose = PoolingDescriptor::new(
        PoolingMode::Max,
        NanPropagation::NotPropagate,
        &[3, 3],
        &[2, 2],
        &[1, 1],
    )?;
    // (4 + 2*2 - 3) / 1 + 1 = 6, by hand; cuDNN agrees.
    ensure!(
        loose.output_shape(&x)? == [1, 1, 6, 6],
        "{:?}",
        loose.output_shape(&x)
    );
    ensure!(
        loose.output_shape_from_cudnn(&x)? == [1, 1, 6, 6],
        "{:?}",
        loose.output_shape_from_cudnn(&x)
    );
    let e = PoolingDescriptor::new_strict(
        PoolingMode::Max,
        NanPropagation::NotPropagate,
        &[3, 3],
        &[2, 2],
        &[1, 1],
    )
    .err()
    .ok_or("strict accepted pad 2 for a 3x3 window")?;
    let msg = e.to_string();
    ensure!(
        matches!(e, Error::InvalidArgument { .. })
            && msg.contains("pad[0]")
            && msg.contains("window[0] / 2 (1)")
            && msg.contains("PyTorch"),
        "{msg}"
    );
    // Only the over-padded dimension is named.
    let e = PoolingDescriptor::new_strict(
        PoolingMode::AverageExcludePadding,
        NanPropagation::NotPropagate,
        &[3, 4],
        &[1, 3],
        &[1, 1],
    )
    .err()
    .ok_or("strict accepted pad 3 for a window of 4")?;
    ensure!(e.to_string().contains("pad[1]"), "{e}");
    for (w, p) in [(3, 1), (4, 2), (5, 2), (2, 1), (1, 0)] {
        let s = PoolingDescriptor::new_strict(
            PoolingMode::Max,
            NanPropagation::NotPropagate,
            &[w],
            &[p],
            &[1],
        )?;
        ensure!(s.pad() == [p] && s.window() == [w], "{s:?}");
    }
    Ok(())
}

fn pooling_round_trip() -> TestResult {
    for mode in [
        PoolingMode::Max,
        PoolingMode::MaxDeterministic,
        PoolingMode::AverageIncludePadding,
        PoolingMode::AverageExcludePadding,
    ] {
        for nan in [NanPropagation::NotPropagate, NanPropagation::Propagate] {
            let p = PoolingDescriptor::new(mode, nan, &[3, 2, 4], &[1, 0, 3], &[2, 1, 5])?;
            let r = read_pool(p.as_raw());
            ensure!(
                r.mode == mode.to_raw() && r.nan == nan.to_raw(),
                "{mode:?} {nan:?}"
            );
            ensure!(
                r.window == [3, 2, 4] && r.pad == [1, 0, 3] && r.stride == [2, 1, 5],
                "arrays"
            );
            ensure!(
                p.mode() == mode && p.nan_propagation() == nan && p.spatial_dims() == 3,
                "{p:?}"
            );
            let raw = p.into_raw();
            // SAFETY: handed back once.
            let back = unsafe { PoolingDescriptor::from_raw(raw) }?;
            ensure!(
                back.window() == [3, 2, 4] && back.pad() == [1, 0, 3] && back.stride() == [2, 1, 5],
                "{back:?}"
            );
            ensure!(
                back.mode() == mode && back.nan_propagation() == nan,
                "{back:?}"
            );
        }
    }
    let p = PoolingDescriptor::new_2d(PoolingMode::Max, [3, 3], [1, 1], [2, 2])?;
    let (mut mode, mut nan) = (dnn::cudnnPoolingMode_t(99), dnn::cudnnNanPropagation_t(99));
    let (mut wh, mut ww, mut ph, mut pw, mut sh, mut sw) = (0, 0, 0, 0, 0, 0);
    // SAFETY: valid out-pointers.
    let st = unsafe {
        api().cudnnGetPooling2dDescriptor(
            p.as_raw(),
            &mut mode,
            &mut nan,
            &mut wh,
            &mut ww,
            &mut ph,
            &mut pw,
            &mut sh,
            &mut sw,
        )
    };
    ensure!(
        ok(st) && [wh, ww, ph, pw, sh, sw] == [3, 3, 1, 1, 2, 2],
        "2d read back"
    );
    ensure!(
        nan == dnn::cudnnNanPropagation_t::CUDNN_PROPAGATE_NAN,
        "new_2d propagates NaN"
    );
    Ok(())
}

fn activation_round_trip() -> TestResult {
    use ActivationMode::*;
    for mode in [
        Sigmoid,
        Relu,
        Tanh,
        ClippedRelu { ceiling: 6.0 },
        ClippedRelu {
            ceiling: f64::INFINITY,
        },
        Elu { alpha: 0.25 },
        Swish { beta: 1.5 },
        Identity,
    ] {
        for nan in [NanPropagation::NotPropagate, NanPropagation::Propagate] {
            let a = ActivationDescriptor::new(mode, nan)?;
            let (m, n, coef, beta) = read_activation(a.as_raw());
            ensure!(
                m == mode.to_raw() && n == nan.to_raw(),
                "{mode:?}: mode {} nan {}",
                m.0,
                n.0
            );
            match mode {
                ClippedRelu { ceiling } => ensure!(coef == ceiling, "ceiling {coef}"),
                Elu { alpha } => ensure!(coef == alpha, "alpha {coef}"),
                Swish { beta: b } => ensure!(beta == b, "beta {beta}"),
                _ => {}
            }
            let raw = a.into_raw();
            // SAFETY: handed back once.
            let back = unsafe { ActivationDescriptor::from_raw(raw) }?;
            ensure!(
                back.mode() == mode && back.nan_propagation() == nan,
                "{back:?}"
            );
            back.destroy()?;
        }
    }
    ensure!(ActivationDescriptor::relu()?.mode() == Relu, "relu()");
    Ok(())
}

fn descriptors_are_send() -> TestResult {
    is_send::<TensorDescriptor<f32>>();
    is_send::<FilterDescriptor<half::f16>>();
    is_send::<ConvDescriptor>();
    is_send::<PoolingDescriptor>();
    is_send::<ActivationDescriptor>();
    let t = TensorDescriptor::<f32>::nchw(1, 2, 3, 4)?;
    let c = ConvDescriptor::new_2d([1, 1], [1, 1], [1, 1])?;
    let shape = std::thread::spawn(move || {
        let s = t.shape().to_vec();
        drop(c);
        t.destroy().map(|()| s)
    })
    .join()
    .map_err(|_| "thread panicked")??;
    ensure!(shape == [1, 2, 3, 4], "{shape:?}");
    Ok(())
}

// ---------------------------------------------------------------------------
// Output shapes: a table, against the formula and against cuDNN.

fn conv_output_table() -> TestResult {
    type Case<'a> = (
        &'a [usize],
        &'a [usize],
        &'a [usize],
        &'a [usize],
        &'a [usize],
        usize,
        Option<&'a [usize]>,
    );
    // (x, w, pad, stride, dilation, groups, expected by hand or None = error)
    let cases: &[Case<'_>] = &[
        (
            &[1, 3, 5, 5],
            &[4, 3, 3, 3],
            &[1, 1],
            &[1, 1],
            &[1, 1],
            1,
            Some(&[1, 4, 5, 5]),
        ),
        (
            &[8, 3, 224, 224],
            &[64, 3, 7, 7],
            &[3, 3],
            &[2, 2],
            &[1, 1],
            1,
            Some(&[8, 64, 112, 112]),
        ),
        (
            &[2, 1, 28, 28],
            &[6, 1, 5, 5],
            &[0, 0],
            &[1, 1],
            &[1, 1],
            1,
            Some(&[2, 6, 24, 24]),
        ),
        (
            &[1, 1, 10],
            &[1, 1, 3],
            &[0],
            &[3],
            &[1],
            1,
            Some(&[1, 1, 3]),
        ),
        (
            &[1, 1, 10],
            &[1, 1, 3],
            &[0],
            &[1],
            &[2],
            1,
            Some(&[1, 1, 6]),
        ),
        (
            &[1, 2, 7, 7],
            &[2, 2, 3, 3],
            &[2, 2],
            &[1, 1],
            &[2, 2],
            1,
            Some(&[1, 2, 7, 7]),
        ),
        (
            &[2, 6, 9, 9],
            &[6, 2, 3, 3],
            &[0, 0],
            &[1, 1],
            &[1, 1],
            3,
            Some(&[2, 6, 7, 7]),
        ),
        (
            &[1, 4, 8, 8],
            &[4, 1, 3, 3],
            &[1, 1],
            &[1, 1],
            &[1, 1],
            4,
            Some(&[1, 4, 8, 8]),
        ),
        (
            &[1, 2, 4, 5, 6],
            &[3, 2, 2, 2, 2],
            &[0, 0, 0],
            &[2, 2, 2],
            &[1, 1, 1],
            1,
            Some(&[1, 3, 2, 2, 3]),
        ),
        (
            &[1, 1, 1],
            &[1, 1, 3],
            &[10],
            &[1],
            &[1],
            1,
            Some(&[1, 1, 19]),
        ),
        (
            &[1, 1, 2, 2, 2, 2, 2, 2],
            &[1, 1, 1, 1, 1, 1, 1, 1],
            &[0; 6],
            &[1; 6],
            &[1; 6],
            1,
            Some(&[1, 1, 2, 2, 2, 2, 2, 2]),
        ),
        (
            &[1, 1, 5],
            &[1, 1, 3],
            &[(M - 6) / 2],
            &[1],
            &[1],
            1,
            Some(&[1, 1, M - 4]),
        ),
        (
            &[1, 3, 2, 2],
            &[4, 3, 3, 3],
            &[0, 0],
            &[1, 1],
            &[1, 1],
            1,
            None,
        ),
        (
            &[1, 7, 5, 5],
            &[4, 3, 3, 3],
            &[1, 1],
            &[1, 1],
            &[1, 1],
            2,
            None,
        ),
    ];
    for &(x, w, pad, stride, dil, g, want) in cases {
        let xd = TensorDescriptor::<f32>::packed(x)?;
        let wd = FilterDescriptor::<f32>::new(TensorFormat::Nchw, w)?;
        let cd = ConvDescriptor::new(pad, stride, dil)?.with_groups(g)?;
        let ours = cd.output_shape(&xd, &wd);
        let theirs = cd.output_shape_from_cudnn(&xd, &wd);
        match want {
            Some(want) => {
                ensure!(
                    ours.as_deref().ok() == Some(want),
                    "{x:?}: ours {ours:?} want {want:?}"
                );
                ensure!(
                    theirs.as_deref().ok() == Some(want),
                    "{x:?}: cuDNN {theirs:?} want {want:?}"
                );
            }
            None => {
                ensure!(
                    ours.is_err() && theirs.is_err(),
                    "{x:?}: expected both to fail: {ours:?} {theirs:?}"
                );
                ensure!(
                    !matches!(ours, Err(Error::Cudnn { .. })),
                    "ours must be our own error: {ours:?}"
                );
            }
        }
    }
    Ok(())
}

fn pooling_output_table() -> TestResult {
    #[allow(clippy::type_complexity)]
    let cases: &[(&[usize], &[usize], &[usize], &[usize], Option<&[usize]>)] = &[
        (
            &[1, 3, 5, 5],
            &[2, 2],
            &[0, 0],
            &[2, 2],
            Some(&[1, 3, 2, 2]),
        ),
        (
            &[8, 64, 112, 112],
            &[3, 3],
            &[1, 1],
            &[2, 2],
            Some(&[8, 64, 56, 56]),
        ),
        (&[1, 1, 7], &[3], &[0], &[1], Some(&[1, 1, 5])),
        (
            &[4, 512, 7, 7],
            &[7, 7],
            &[0, 0],
            &[1, 1],
            Some(&[4, 512, 1, 1]),
        ),
        (
            &[2, 2, 4, 6, 1],
            &[2, 3, 1],
            &[0, 1, 0],
            &[2, 2, 1],
            Some(&[2, 2, 2, 3, 1]),
        ),
        (&[1, 1, 1], &[2], &[1], &[1], Some(&[1, 1, 2])),
        (&[1, 3, 1, 1], &[3, 3], &[0, 0], &[1, 1], None),
    ];
    for &(x, window, pad, stride, want) in cases {
        let xd = TensorDescriptor::<f32>::packed(x)?;
        for mode in [PoolingMode::Max, PoolingMode::AverageExcludePadding] {
            let p = PoolingDescriptor::new(mode, NanPropagation::Propagate, window, pad, stride)?;
            let (ours, theirs) = (p.output_shape(&xd), p.output_shape_from_cudnn(&xd));
            match want {
                Some(want) => ensure!(
                    ours.as_deref().ok() == Some(want) && theirs.as_deref().ok() == Some(want),
                    "{x:?}: ours {ours:?} cuDNN {theirs:?} want {want:?}"
                ),
                None => ensure!(
                    ours.is_err() && theirs.is_err(),
                    "{x:?}: {ours:?} {theirs:?}"
                ),
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// One concrete witness per listed stricter rule: cuDNN accepts, we reject
// with our own error naming the argument.

fn rejects<T: std::fmt::Debug>(rule: &str, r: cudnn::Result<T>, arg: &str) -> TestResult {
    match r {
        Err(Error::InvalidArgument { arg: a, .. }) if a == arg => Ok(()),
        other => Err(format!("{rule}: expected our InvalidArgument `{arg}`, got {other:?}").into()),
    }
}

fn stricter_rule_witnesses() -> TestResult {
    let f32_t = dnn::cudnnDataType_t::CUDNN_DATA_FLOAT;
    let mut seen = Vec::new();

    // 2-d tensors: cuDNN 9 accepts, 8.9 rejects.
    ensure!(
        raw_tensor_nd(f32_t, &[4, 5], &[5, 1]).is_some() == (major() >= 9),
        "{T_2D}: cuDNN"
    );
    rejects(
        T_2D,
        TensorDescriptor::<f32>::new(&[4, 5], &[5, 1]),
        "dims.len()",
    )?;
    seen.push(T_2D);

    let dims = [1usize << 28; 7];
    ensure!(
        raw_tensor_nd(f32_t, &dims, &[1; 7]).is_some(),
        "{T_COUNT}: cuDNN"
    );
    rejects(
        T_COUNT,
        TensorDescriptor::<f32>::new(&dims, &[1; 7]),
        "dims",
    )?;
    seen.push(T_COUNT);

    let raw = raw_tensor_4d(TensorFormat::Nchw, f32_t, [10, 1 << 30, 3, 6]).ok_or(T_4D_WRAP)?;
    let (_, _, strides) = read_tensor(raw.0);
    ensure!(
        strides[0] as u32 as i32 == i32::MIN,
        "{T_4D_WRAP}: cuDNN stored N stride {}",
        strides[0] as u32 as i32
    );
    rejects(
        T_4D_WRAP,
        TensorDescriptor::<f32>::nchw(10, 1 << 30, 3, 6),
        "dims",
    )?;
    seen.push(T_4D_WRAP);

    ensure!(
        raw_filter_nd(f32_t, TensorFormat::Nchw, &[1 << 16, 1 << 16, 1, 1]).is_some(),
        "{F_COUNT}: cuDNN"
    );
    rejects(
        F_COUNT,
        FilterDescriptor::<f32>::nchw(1 << 16, 1 << 16, 1, 1),
        "dims",
    )?;
    seen.push(F_COUNT);

    let r = RawC::new();
    // SAFETY: arrayLength 0, so the (empty) arrays are not read.
    let st = unsafe {
        api().cudnnSetConvolutionNdDescriptor(
            r.0,
            0,
            [0].as_ptr(),
            [1].as_ptr(),
            [1].as_ptr(),
            ConvMode::default().to_raw(),
            f32_t,
        )
    };
    ensure!(ok(st), "{C_NO_SPATIAL}: cuDNN");
    rejects(
        C_NO_SPATIAL,
        ConvDescriptor::new(&[], &[], &[]),
        "pad.len()",
    )?;
    seen.push(C_NO_SPATIAL);

    // Output shapes: our descriptors are valid; output_shape rejects while
    // cuDNN's query (through the same descriptors) answers.
    #[allow(clippy::type_complexity)]
    let conv: &[(
        &str,
        &[usize],
        &[usize],
        usize,
        usize,
        usize,
        &str,
        &[usize],
    )] = &[
        // (rule, x, w, pad, dilation, groups, our error's argument, cuDNN's answer)
        (
            C_K_GROUPS,
            &[1, 6, 5, 5],
            &[5, 3, 3, 3],
            1,
            1,
            2,
            "w.shape[0] (output channels)",
            &[1, 5, 5, 5],
        ),
        (
            C_GROUP_CHANNELS,
            &[1, 2, 5],
            &[4, 3, 3],
            1,
            1,
            1_431_655_766,
            "groups",
            &[1, 4, 5],
        ),
        (
            C_DILATED,
            &[1, 3, 5],
            &[4, 3, 3],
            0,
            M,
            1,
            "dilation[0]",
            &[1, 4, 7],
        ),
        (
            C_PADDED,
            &[1, 3, 5],
            &[4, 3, 3],
            M,
            1,
            1,
            "pad[0]",
            &[1, 4, 1],
        ),
    ];
    for &(rule, x, w, pad, dil, groups, arg, theirs) in conv {
        let s = x.len() - 2;
        let xd = TensorDescriptor::<f32>::packed(x)?;
        let wd = FilterDescriptor::<f32>::new(TensorFormat::Nchw, w)?;
        let cd =
            ConvDescriptor::new(&vec![pad; s], &vec![1; s], &vec![dil; s])?.with_groups(groups)?;
        let got = cd.output_shape_from_cudnn(&xd, &wd);
        ensure!(
            got.as_deref().ok() == Some(theirs),
            "{rule}: cuDNN answered {got:?}"
        );
        rejects(rule, cd.output_shape(&xd, &wd), arg)?;
        seen.push(rule);
    }

    let r = RawP::new();
    let (w, p, st) = ([2i32, 2], [2i32, 2], [1i32, 1]);
    // SAFETY: arrays of 2.
    let st = unsafe {
        api().cudnnSetPoolingNdDescriptor(
            r.0,
            PoolingMode::Max.to_raw(),
            NanPropagation::Propagate.to_raw(),
            2,
            w.as_ptr(),
            p.as_ptr(),
            st.as_ptr(),
        )
    };
    ensure!(ok(st), "{P_PAD_WINDOW}: cuDNN");
    rejects(
        P_PAD_WINDOW,
        PoolingDescriptor::new_2d(PoolingMode::Max, [2, 2], [2, 2], [1, 1]),
        "pad[0]",
    )?;
    seen.push(P_PAD_WINDOW);

    let xd = TensorDescriptor::<f32>::packed(&[1, 1, 5])?;
    let pd = PoolingDescriptor::new(
        PoolingMode::Max,
        NanPropagation::Propagate,
        &[M],
        &[M / 2],
        &[1],
    )?;
    let got = pd.output_shape_from_cudnn(&xd);
    ensure!(
        got.as_deref().ok() == Some(&[1, 1, 5][..]),
        "{P_PADDED}: cuDNN answered {got:?}"
    );
    rejects(P_PADDED, pd.output_shape(&xd), "pad[0]")?;
    seen.push(P_PADDED);

    use ActivationMode::*;
    for (rule, mode, arg) in [
        (A_CEILING, ClippedRelu { ceiling: -1.0 }, "ceiling"),
        (A_CEILING, ClippedRelu { ceiling: f64::NAN }, "ceiling"),
        (A_ALPHA, Elu { alpha: f64::NAN }, "alpha"),
        (
            A_BETA,
            Swish {
                beta: f64::INFINITY,
            },
            "beta",
        ),
    ] {
        let r = RawA::new();
        // SAFETY: plain values.
        let accepted = unsafe {
            ok(api().cudnnSetActivationDescriptor(
                r.0,
                mode.to_raw(),
                NanPropagation::Propagate.to_raw(),
                mode.coef(),
            )) && ok(api().cudnnSetActivationDescriptorSwishBeta(r.0, f64::INFINITY))
        };
        ensure!(accepted, "{rule}: cuDNN");
        rejects(
            rule,
            ActivationDescriptor::new(mode, NanPropagation::Propagate),
            arg,
        )?;
        seen.push(rule);
    }
    for rule in STRICTER {
        ensure!(seen.contains(rule), "no witness for {rule}");
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// The agreement property test.

#[derive(Default, Debug)]
struct Stats {
    cases: u64,
    both_accept: u64,
    both_reject: u64,
    stricter: BTreeMap<&'static str, u64>,
    panics: u64,
}

impl Stats {
    fn summary(&self) -> String {
        format!(
            "{} cases: both accept {}, both reject {}, we reject by a listed stricter rule {:?}, panics {}",
            self.cases, self.both_accept, self.both_reject, self.stricter, self.panics
        )
    }
}

/// Run `f`, turning a panic into an error and counting it.
fn guarded<R>(
    stats: &RefCell<Stats>,
    what: &str,
    f: impl FnOnce() -> R,
) -> Result<R, TestCaseError> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|_| {
        stats.borrow_mut().panics += 1;
        TestCaseError::fail(format!("{what} panicked"))
    })
}

/// Compare one stage: `we accept == cuDNN accepts && no listed rule applies`.
/// `Ok(true)` when both accept.
fn agree<D: std::fmt::Debug>(
    stats: &RefCell<Stats>,
    stage: &str,
    ours: &cudnn::Result<D>,
    cudnn_ok: bool,
    rule: Option<&'static str>,
) -> Result<bool, TestCaseError> {
    let expected = cudnn_ok && rule.is_none();
    let mut s = stats.borrow_mut();
    match (ours, expected) {
        (Ok(_), true) => {
            s.both_accept += 1;
            Ok(true)
        }
        (Err(e), false) => {
            if matches!(e, Error::Cudnn { .. }) {
                return Err(TestCaseError::fail(format!(
                    "{stage}: cuDNN saw arguments we should have rejected: {e}"
                )));
            }
            match (cudnn_ok, rule) {
                (true, Some(r)) => *s.stricter.entry(r).or_default() += 1,
                _ => s.both_reject += 1,
            }
            Ok(false)
        }
        (Ok(d), false) => Err(TestCaseError::fail(format!(
            "{stage}: we accept ({d:?}) but cuDNN {} / listed rule {rule:?}",
            if cudnn_ok { "accepts" } else { "rejects" }
        ))),
        (Err(e), true) => Err(TestCaseError::fail(format!(
            "{stage}: we reject ({e}) but cuDNN accepts and no listed stricter rule applies"
        ))),
    }
}

fn config(cases: u32) -> Config {
    let seed = crate::support::fuzz_seed(0x5eed_cd22);
    Config {
        cases,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(seed),
        max_shrink_iters: 4096,
        ..Config::default()
    }
}

/// At least 10 000 cases per property; `CUDNN_RS_AGREEMENT_CASES` asks for more.
fn cases() -> u32 {
    std::env::var("CUDNN_RS_AGREEMENT_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
        .max(10_000)
}

fn run_property<S: Strategy>(
    name: &str,
    strategy: S,
    check: impl Fn(&RefCell<Stats>, S::Value) -> Result<(), TestCaseError>,
    required: &[&'static str],
    // At least one case in this many is rejected by both (0: no minimum).
    reject_one_in: u64,
) -> TestResult
where
    S::Value: std::fmt::Debug,
{
    let stats = RefCell::new(Stats::default());
    let mut runner = TestRunner::new(config(cases()));
    let start = Instant::now();
    let result = runner.run(&strategy, |case| {
        stats.borrow_mut().cases += 1;
        check(&stats, case)
    });
    let s = stats.into_inner();
    eprintln!(
        "{name}: cuDNN {:?}: {} in {:.1?}",
        api().info().version,
        s.summary(),
        start.elapsed()
    );
    result.map_err(|e| format!("{name}: {e}\n{}", s.summary()))?;
    ensure!(s.panics == 0, "{name}: {} panics", s.panics);
    ensure!(
        s.cases >= u64::from(cases()),
        "{name}: only {} cases",
        s.cases
    );
    ensure!(
        s.both_accept * 10 >= s.cases,
        "{name}: too few valid configurations: {}",
        s.summary()
    );
    ensure!(
        reject_one_in == 0 || s.both_reject * reject_one_in >= s.cases,
        "{name}: too few invalid configurations: {}",
        s.summary()
    );
    for rule in required {
        ensure!(
            s.stricter.get(rule).copied().unwrap_or(0) > 0,
            "{name}: listed rule never seen: {rule}\n{}",
            s.summary()
        );
    }
    for rule in s.stricter.keys() {
        ensure!(STRICTER.contains(rule), "unlisted rule {rule}");
    }
    Ok(())
}

// --- value generators --------------------------------------------------------

/// Values at the edges: 0, around i32::MAX and i32::MAX / 2, just past i32,
/// `u32::MAX` ("-1" as 32 bits), `usize::MAX` ("-1" as a size), large.
fn weird() -> BoxedStrategy<usize> {
    prop_oneof![
        Just(0usize),
        M - 3..=M,
        M / 2 - 3..=M / 2 + 3,
        M + 1..=M + 3,
        u32::MAX as usize - 3..=u32::MAX as usize + 3,
        usize::MAX - 3..=usize::MAX,
        1usize << 15..=1 << 17,
        1usize << 28..=1 << 31,
    ]
    .boxed()
}

/// Mostly `small`, sometimes [`weird`].
fn val(small: std::ops::RangeInclusive<usize>) -> BoxedStrategy<usize> {
    prop_oneof![12 => small, 1 => weird()].boxed()
}

fn rank() -> BoxedStrategy<usize> {
    prop_oneof![1 => 0..=2usize, 6 => 3..=5usize, 2 => 6..=9usize].boxed()
}

fn sat_mul(a: usize, b: usize) -> usize {
    a.saturating_mul(b)
}

/// Row-major strides with saturating arithmetic (huge values stay huge).
fn packed(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = sat_mul(s[i + 1], dims[i + 1]);
    }
    s
}

macro_rules! with_dtype {
    ($i:expr, $f:ident ( $($a:expr),* )) => {
        match $i {
            0 => $f::<f32>($($a),*),
            1 => $f::<f64>($($a),*),
            2 => $f::<half::f16>($($a),*),
            3 => $f::<half::bf16>($($a),*),
            4 => $f::<i8>($($a),*),
            5 => $f::<u8>($($a),*),
            6 => $f::<i32>($($a),*),
            _ => $f::<i64>($($a),*),
        }
    };
}

// --- tensors -----------------------------------------------------------------

#[derive(Debug, Clone)]
enum TensorCase {
    Nd {
        dtype: usize,
        dims: Vec<usize>,
        strides: Vec<usize>,
    },
    Four {
        dtype: usize,
        format: TensorFormat,
        dims: [usize; 4],
    },
}

fn tensor_case() -> impl Strategy<Value = TensorCase> {
    let nd = (
        0..8usize,
        rank(),
        prop::collection::vec(val(1..=8), 9),
        0..4u8,
        prop::collection::vec(val(0..=64), 9),
        prop::collection::vec(0..=3usize, 9),
    )
        .prop_flat_map(|(dtype, n, dims, mode, random, extra)| {
            let dims: Vec<usize> = dims[..n].to_vec();
            let order: Vec<usize> = (0..n).collect();
            (
                Just((dtype, dims, mode, random, extra)),
                Just(order).prop_shuffle(),
            )
        })
        .prop_map(|((dtype, dims, mode, random, extra), order)| {
            let n = dims.len();
            let strides = match mode {
                0 => packed(&dims),
                // packed in a permuted order (channels-last and friends)
                1 => {
                    let mut s = vec![0usize; n];
                    let mut acc = 1usize;
                    for &i in order.iter().rev() {
                        s[i] = acc;
                        acc = sat_mul(acc, dims[i]);
                    }
                    s
                }
                // padded rows
                2 => packed(
                    &dims
                        .iter()
                        .zip(&extra)
                        .map(|(d, e)| d.saturating_add(*e))
                        .collect::<Vec<_>>(),
                ),
                // arbitrary (overlapping, zero, huge)
                _ => random[..n].to_vec(),
            };
            TensorCase::Nd {
                dtype,
                dims,
                strides,
            }
        });
    // Large dims with tiny strides: tiny span, element count past usize.
    let overlap = (
        0..8usize,
        prop::collection::vec(256usize..=70_000, 5..=8),
        prop::collection::vec(1usize..=2, 8),
    )
        .prop_map(|(dtype, dims, s)| {
            let strides = s[..dims.len()].to_vec();
            TensorCase::Nd {
                dtype,
                dims,
                strides,
            }
        });
    let four = (
        0..8usize,
        any::<bool>(),
        [val(1..=16), val(1..=16), val(1..=16), val(1..=16)],
    )
        .prop_map(|(dtype, nhwc, dims)| TensorCase::Four {
            dtype,
            format: if nhwc {
                TensorFormat::Nhwc
            } else {
                TensorFormat::Nchw
            },
            dims,
        });
    // Packed 4-d shapes whose 32-bit strides wrap.
    let wrap4 = (
        0..8usize,
        any::<bool>(),
        2usize..=16,
        0usize..4,
        1usize..=8,
        1usize..=8,
    )
        .prop_map(|(dtype, nhwc, n, c, h, w)| TensorCase::Four {
            dtype,
            format: if nhwc {
                TensorFormat::Nhwc
            } else {
                TensorFormat::Nchw
            },
            dims: [n, [1 << 28, 1 << 29, 1 << 30, 3 << 29][c], h, w],
        });
    prop_oneof![14 => nd, 1 => overlap, 4 => four, 2 => wrap4]
}

/// The listed rule a tensor shape breaks, if any.
fn tensor_rule(dims: &[usize]) -> Option<&'static str> {
    if dims.len() == 2 {
        return Some(T_2D);
    }
    if dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .is_none()
    {
        return Some(T_COUNT);
    }
    None
}

/// Our tensor against cuDNN's; on agreement to accept, compare read-backs.
/// Returns both descriptors when both accept.
fn tensor_stage<T: DataType>(
    stats: &RefCell<Stats>,
    stage: &str,
    dims: &[usize],
    strides: &[usize],
) -> Result<Option<(TensorDescriptor<T>, RawT)>, TestCaseError> {
    let ours = guarded(stats, "TensorDescriptor::new", || {
        TensorDescriptor::<T>::new(dims, strides)
    })?;
    let raw = raw_tensor_nd(T::CUDNN, dims, strides);
    if !agree(stats, stage, &ours, raw.is_some(), tensor_rule(dims))? {
        return Ok(None);
    }
    let (ours, raw) = (
        ours.map_err(|e| TestCaseError::fail(e.to_string()))?,
        raw.ok_or_else(|| TestCaseError::fail("raw"))?,
    );
    check_tensor_read_back(&ours, &raw, dims, strides)?;
    Ok(Some((ours, raw)))
}

fn check_tensor_read_back<T: DataType>(
    ours: &TensorDescriptor<T>,
    raw: &RawT,
    dims: &[usize],
    strides: &[usize],
) -> Result<(), TestCaseError> {
    let (dt, d, s) = read_tensor(ours.as_raw());
    let (rdt, rd, rs) = read_tensor(raw.0);
    let fail = |what: &str| {
        TestCaseError::fail(format!(
            "{what}: {dims:?} {strides:?}: ours {ours:?}, cuDNN {rd:?} {rs:?}"
        ))
    };
    if dt != T::CUDNN || rdt != dt || d != rd || s != rs || ours.shape() != d || ours.strides() != s
    {
        return Err(fail("read back"));
    }
    if ours.bytes() != tensor_bytes(ours.as_raw()) || ours.bytes() != tensor_bytes(raw.0) {
        return Err(fail("bytes"));
    }
    if ours.len_required() * T::SIZE != ours.bytes() {
        return Err(fail("len_required"));
    }
    Ok(())
}

fn check_tensor_nd<T: DataType>(
    stats: &RefCell<Stats>,
    dims: &[usize],
    strides: &[usize],
) -> Result<(), TestCaseError> {
    tensor_stage::<T>(stats, "tensor Nd", dims, strides).map(drop)
}

fn check_tensor_4d<T: DataType>(
    stats: &RefCell<Stats>,
    format: TensorFormat,
    dims: [usize; 4],
) -> Result<(), TestCaseError> {
    let [n, c, h, w] = dims;
    let ours = guarded(stats, "TensorDescriptor::with_format", || {
        TensorDescriptor::<T>::with_format(format, n, c, h, w)
    })?;
    let raw = raw_tensor_4d(format, T::CUDNN, dims);
    let rule = (dims.iter().fold(1u128, |a, &d| a.saturating_mul(d as u128)) > M as u128)
        .then_some(T_4D_WRAP);
    if agree(stats, "tensor 4d", &ours, raw.is_some(), rule)? {
        let (ours, raw) = (
            ours.map_err(|e| TestCaseError::fail(e.to_string()))?,
            raw.ok_or_else(|| TestCaseError::fail("raw"))?,
        );
        let strides = ours.strides().to_vec();
        check_tensor_read_back(&ours, &raw, &dims, &strides)?;
    }
    Ok(())
}

fn tensor_agreement() -> TestResult {
    let mut required = vec![T_COUNT, T_4D_WRAP];
    if major() >= 9 {
        required.push(T_2D);
    }
    run_property(
        "tensor agreement",
        tensor_case(),
        |stats, case| match case {
            TensorCase::Nd {
                dtype,
                dims,
                strides,
            } => with_dtype!(dtype, check_tensor_nd(stats, &dims, &strides)),
            TensorCase::Four {
                dtype,
                format,
                dims,
            } => with_dtype!(dtype, check_tensor_4d(stats, format, dims)),
        },
        &required,
        20,
    )?;
    // cuDNN 8.9 rejects 2-d tensors itself; that is the only difference found
    // between the two majors.
    if major() < 9 {
        ensure!(
            raw_tensor_nd(dnn::cudnnDataType_t::CUDNN_DATA_FLOAT, &[4, 5], &[5, 1]).is_none(),
            "8.9 accepted 2-d"
        );
    } else {
        ensure!(
            raw_tensor_nd(dnn::cudnnDataType_t::CUDNN_DATA_FLOAT, &[4, 5], &[5, 1]).is_some(),
            "9 rejected 2-d"
        );
    }
    Ok(())
}

// --- filters -----------------------------------------------------------------

#[derive(Debug, Clone)]
struct FilterCase {
    dtype: usize,
    format: TensorFormat,
    four: bool,
    dims: Vec<usize>,
}

fn filter_case() -> impl Strategy<Value = FilterCase> {
    (
        0..8usize,
        any::<bool>(),
        prop::bool::weighted(0.25),
        rank(),
        prop::collection::vec(val(1..=8), 9),
    )
        .prop_map(|(dtype, nhwc, four, n, dims)| FilterCase {
            dtype,
            format: if nhwc {
                TensorFormat::Nhwc
            } else {
                TensorFormat::Nchw
            },
            four,
            dims: if four {
                dims[..4].to_vec()
            } else {
                dims[..n].to_vec()
            },
        })
}

fn filter_rule(dims: &[usize]) -> Option<&'static str> {
    let count = dims.iter().fold(1u128, |a, &d| a.saturating_mul(d as u128));
    (count > M as u128).then_some(F_COUNT)
}

fn filter_stage<T: DataType>(
    stats: &RefCell<Stats>,
    format: TensorFormat,
    four: bool,
    dims: &[usize],
) -> Result<Option<(FilterDescriptor<T>, RawF)>, TestCaseError> {
    let ours = guarded(stats, "FilterDescriptor", || match (four, format) {
        (true, TensorFormat::Nchw) => {
            FilterDescriptor::<T>::nchw(dims[0], dims[1], dims[2], dims[3])
        }
        (true, TensorFormat::Nhwc) => {
            FilterDescriptor::<T>::nhwc(dims[0], dims[1], dims[2], dims[3])
        }
        (false, _) => FilterDescriptor::<T>::new(format, dims),
    })?;
    let raw = if four {
        ints(dims).and_then(|d| {
            let r = RawF::new();
            // SAFETY: plain values.
            ok(unsafe {
                api().cudnnSetFilter4dDescriptor(
                    r.0,
                    T::CUDNN,
                    format.to_raw(),
                    d[0],
                    d[1],
                    d[2],
                    d[3],
                )
            })
            .then_some(r)
        })
    } else {
        raw_filter_nd(T::CUDNN, format, dims)
    };
    if !agree(stats, "filter", &ours, raw.is_some(), filter_rule(dims))? {
        return Ok(None);
    }
    let (ours, raw) = (
        ours.map_err(|e| TestCaseError::fail(e.to_string()))?,
        raw.ok_or_else(|| TestCaseError::fail("raw"))?,
    );
    let (dt, f, d) = read_filter(ours.as_raw());
    let (rdt, rf, rd) = read_filter(raw.0);
    let mut size = 0usize;
    // SAFETY: valid out-pointer.
    let size_ok = ok(unsafe { api().cudnnGetFilterSizeInBytes(ours.as_raw(), &mut size) });
    if dt != T::CUDNN
        || (dt, f, &d) != (rdt, rf, &rd)
        || ours.shape() != d
        || f != format.to_raw()
        || !size_ok
        || size != ours.bytes()
    {
        return Err(TestCaseError::fail(format!(
            "filter read back: ours {ours:?} ({size} bytes), cuDNN {rd:?}"
        )));
    }
    Ok(Some((ours, raw)))
}

fn check_filter<T: DataType>(
    stats: &RefCell<Stats>,
    case: &FilterCase,
) -> Result<(), TestCaseError> {
    filter_stage::<T>(stats, case.format, case.four, &case.dims).map(drop)
}

fn filter_agreement() -> TestResult {
    run_property(
        "filter agreement",
        filter_case(),
        |stats, case| with_dtype!(case.dtype, check_filter(stats, &case)),
        &[F_COUNT],
        20,
    )
}

// --- convolutions --------------------------------------------------------------

#[derive(Debug, Clone)]
struct ConvCase {
    dtype: usize,
    w_format: TensorFormat,
    compute: u32,
    mode: ConvMode,
    math: MathType,
    groups: usize,
    pad: Vec<usize>,
    stride: Vec<usize>,
    dilation: Vec<usize>,
    x: Vec<usize>,
    w: Vec<usize>,
}

fn conv_case() -> impl Strategy<Value = ConvCase> {
    let spatial = prop_oneof![1 => Just(0usize), 4 => 1..=3usize, 1 => 4..=7usize];
    let rank_delta = prop_oneof![24 => Just(0isize), 1 => -2..=2isize];
    let groups = prop_oneof![10 => Just(1usize), 4 => 2..=4usize, 1 => weird()];
    let compute = prop_oneof![12 => prop::sample::select(vec![0u32, 1, 2, 4]), 1 => 0..=23u32];
    let channel_mode = prop_oneof![16 => Just(0u8), 2 => Just(1u8), 2 => Just(2u8)];
    let maths = prop::sample::select(vec![
        MathType::Default,
        MathType::TensorOp,
        MathType::TensorOpAllowConversion,
        MathType::Fma,
    ]);
    (
        (
            0..8usize,
            any::<bool>(),
            compute,
            any::<bool>(),
            maths,
            groups,
            spatial,
            rank_delta.clone(),
            rank_delta,
        ),
        (
            val(1..=4),
            val(1..=4),
            val(1..=4),
            val(1..=16),
            channel_mode,
            prop::bool::weighted(0.85),
        ),
        (
            prop::collection::vec(val(0..=3), 7),
            prop::collection::vec(val(1..=3), 7),
            prop::collection::vec(val(1..=3), 7),
            prop::collection::vec(val(1..=24), 9),
            prop::collection::vec(val(1..=5), 9),
        ),
        // Now and then: groups just past 2^32 / w channels, a small k, and
        // input channels equal to what 32-bit `w channels * groups` wraps to.
        (prop::bool::weighted(0.05), 3usize..=8, 0usize..=3),
    )
        .prop_map(|(a, b, c, (wrap_family, wrap_wc, wrap_delta))| {
            let (dtype, nhwc, compute, conv, math, groups, s, dx, dw) = a;
            let (n, wc, kmul, crand, channel_mode, kdiv) = b;
            let (pad, stride, dilation, xs, ws) = c;
            let (wc, groups, kdiv, channel_mode) = if wrap_family {
                (
                    wrap_wc,
                    (1usize << 32).div_ceil(wrap_wc) + wrap_delta,
                    false,
                    2,
                )
            } else {
                (wc, groups, kdiv, channel_mode)
            };
            let k = if kdiv { sat_mul(groups, kmul) } else { kmul };
            let c = match channel_mode {
                0 => sat_mul(wc, groups),
                1 => crand,
                // what 32-bit multiplication wraps to
                _ => ((wc as u64).wrapping_mul(groups as u64) as u32 as i32).max(1) as usize,
            };
            let xr = (s as isize + 2 + dx).clamp(1, 9) as usize;
            let wr = (xr as isize + if dw == 0 { 0 } else { dw.signum() }).clamp(1, 9) as usize;
            let mut x = vec![n, c];
            x.extend_from_slice(&xs);
            x.truncate(xr);
            let mut w = vec![k, wc];
            w.extend_from_slice(&ws);
            w.truncate(wr);
            ConvCase {
                dtype,
                w_format: if nhwc {
                    TensorFormat::Nhwc
                } else {
                    TensorFormat::Nchw
                },
                compute,
                mode: if conv {
                    ConvMode::Convolution
                } else {
                    ConvMode::CrossCorrelation
                },
                math,
                groups,
                pad: pad[..s].to_vec(),
                stride: stride[..s].to_vec(),
                dilation: dilation[..s].to_vec(),
                x,
                w,
            }
        })
}

fn raw_conv(case: &ConvCase) -> Option<RawC> {
    let (p, s, d) = (ints(&case.pad)?, ints(&case.stride)?, ints(&case.dilation)?);
    let g = i32::try_from(case.groups).ok()?;
    let r = RawC::new();
    // SAFETY: arrays of pad.len() ints; plain values.
    let good = unsafe {
        ok(api().cudnnSetConvolutionNdDescriptor(
            r.0,
            p.len() as i32,
            p.as_ptr(),
            s.as_ptr(),
            d.as_ptr(),
            case.mode.to_raw(),
            dnn::cudnnDataType_t(case.compute),
        )) && ok(api().cudnnSetConvolutionGroupCount(r.0, g))
            && ok(api().cudnnSetConvolutionMathType(r.0, case.math.to_raw()))
    };
    good.then_some(r)
}

/// The listed rule the output-shape query breaks, if any (computed exactly,
/// only meaningful when the ranks fit; otherwise cuDNN rejects anyway).
fn conv_output_rule(case: &ConvCase) -> Option<&'static str> {
    let (x, w, g) = (&case.x, &case.w, case.groups as u128);
    let s = case.pad.len();
    if x.len() != s + 2 || w.len() != s + 2 {
        return None;
    }
    if w[1] as u128 * g > M as u128 {
        return Some(C_GROUP_CHANNELS);
    }
    if !(w[0] as u128).is_multiple_of(g) {
        return Some(C_K_GROUPS);
    }
    for i in 0..s {
        if case.dilation[i] as u128 * (w[i + 2] as u128).saturating_sub(1) + 1 > M as u128 {
            return Some(C_DILATED);
        }
        if x[i + 2] as u128 + 2 * case.pad[i] as u128 > M as u128 {
            return Some(C_PADDED);
        }
    }
    None
}

fn check_conv<T: DataType>(stats: &RefCell<Stats>, case: &ConvCase) -> Result<(), TestCaseError> {
    let xt = tensor_stage::<T>(stats, "conv x", &case.x, &packed(&case.x))?;
    let wt = filter_stage::<T>(stats, case.w_format, false, &case.w)?;
    let ours = guarded(stats, "ConvDescriptor", || {
        ConvDescriptor::new(&case.pad, &case.stride, &case.dilation)?
            .with_mode(case.mode)?
            .with_compute_type(ComputeType::from_raw(dnn::cudnnDataType_t(case.compute))?)?
            .with_groups(case.groups)?
            .with_math_type(case.math)
    })?;
    let raw = raw_conv(case);
    let rule = case.pad.is_empty().then_some(C_NO_SPATIAL);
    if !agree(stats, "conv descriptor", &ours, raw.is_some(), rule)? {
        return Ok(());
    }
    let (ours, raw) = (
        ours.map_err(|e| TestCaseError::fail(e.to_string()))?,
        raw.ok_or_else(|| TestCaseError::fail("raw"))?,
    );
    let r = read_conv(ours.as_raw());
    if r.pad != case.pad
        || r.stride != case.stride
        || r.dilation != case.dilation
        || r.mode != case.mode.to_raw()
        || r.compute.0 != case.compute
        || r.groups != case.groups
        || r.math != case.math.to_raw()
    {
        return Err(TestCaseError::fail(format!(
            "conv read back differs: {ours:?}"
        )));
    }
    let (Some((xo, xr)), Some((wo, wr))) = (xt, wt) else {
        return Ok(());
    };
    let out = guarded(stats, "output_shape", || ours.output_shape(&xo, &wo))?;
    let nb = case.x.len();
    let mut dims = [0i32; 8];
    // SAFETY: `dims` holds 8 >= nb entries.
    let cudnn_ok = ok(unsafe {
        api().cudnnGetConvolutionNdForwardOutputDim(raw.0, xr.0, wr.0, nb as i32, dims.as_mut_ptr())
    });
    if agree(
        stats,
        "conv output shape",
        &out,
        cudnn_ok,
        conv_output_rule(case),
    )? {
        let out = out.map_err(|e| TestCaseError::fail(e.to_string()))?;
        let theirs: Vec<i64> = dims[..nb].iter().map(|&v| i64::from(v)).collect();
        let mine: Vec<i64> = out.iter().map(|&v| v as i64).collect();
        let via = ours
            .output_shape_from_cudnn(&xo, &wo)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        if mine != theirs || via != out {
            return Err(TestCaseError::fail(format!(
                "output shape: ours {out:?}, cuDNN {theirs:?} / {via:?}"
            )));
        }
    }
    Ok(())
}

fn conv_agreement() -> TestResult {
    run_property(
        "conv agreement",
        conv_case(),
        |stats, case| with_dtype!(case.dtype, check_conv(stats, &case)),
        &[
            C_NO_SPATIAL,
            C_K_GROUPS,
            C_GROUP_CHANNELS,
            C_DILATED,
            C_PADDED,
        ],
        20,
    )
}

// --- pooling -------------------------------------------------------------------

#[derive(Debug, Clone)]
struct PoolCase {
    dtype: usize,
    mode: PoolingMode,
    nan: NanPropagation,
    window: Vec<usize>,
    pad: Vec<usize>,
    stride: Vec<usize>,
    x: Vec<usize>,
}

fn pool_case() -> impl Strategy<Value = PoolCase> {
    let spatial = prop_oneof![1 => Just(0usize), 4 => 1..=3usize, 1 => 4..=7usize];
    let rank_delta = prop_oneof![24 => Just(0isize), 1 => -2..=2isize];
    // (window, pad): mostly small, sometimes both near i32::MAX with pad < window.
    let big = (M / 2..=M).prop_flat_map(|w| (Just(w), w / 2..w));
    let wp = prop_oneof![20 => (val(1..=4), val(0..=3)), 1 => big];
    let modes = prop::sample::select(vec![
        PoolingMode::Max,
        PoolingMode::MaxDeterministic,
        PoolingMode::AverageIncludePadding,
        PoolingMode::AverageExcludePadding,
    ]);
    (
        (0..8usize, modes, any::<bool>(), spatial, rank_delta),
        (
            prop::collection::vec(wp, 7),
            prop::collection::vec(val(1..=3), 7),
            prop::collection::vec(val(1..=16), 9),
        ),
    )
        .prop_map(|((dtype, mode, nan, s, dx), (wp, stride, xs))| {
            let xr = (s as isize + 2 + dx).clamp(1, 9) as usize;
            let mut x = xs;
            x.truncate(xr);
            PoolCase {
                dtype,
                mode,
                nan: if nan {
                    NanPropagation::Propagate
                } else {
                    NanPropagation::NotPropagate
                },
                window: wp[..s].iter().map(|p| p.0).collect(),
                pad: wp[..s].iter().map(|p| p.1).collect(),
                stride: stride[..s].to_vec(),
                x,
            }
        })
}

fn raw_pool(case: &PoolCase) -> Option<RawP> {
    let (w, p, s) = (ints(&case.window)?, ints(&case.pad)?, ints(&case.stride)?);
    let r = RawP::new();
    // SAFETY: arrays of window.len() ints.
    ok(unsafe {
        api().cudnnSetPoolingNdDescriptor(
            r.0,
            case.mode.to_raw(),
            case.nan.to_raw(),
            w.len() as i32,
            w.as_ptr(),
            p.as_ptr(),
            s.as_ptr(),
        )
    })
    .then_some(r)
}

fn check_pool<T: DataType>(stats: &RefCell<Stats>, case: &PoolCase) -> Result<(), TestCaseError> {
    let xt = tensor_stage::<T>(stats, "pool x", &case.x, &packed(&case.x))?;
    let ours = guarded(stats, "PoolingDescriptor", || {
        PoolingDescriptor::new(case.mode, case.nan, &case.window, &case.pad, &case.stride)
    })?;
    let raw = raw_pool(case);
    let rule = case
        .pad
        .iter()
        .zip(&case.window)
        .any(|(p, w)| p >= w)
        .then_some(P_PAD_WINDOW);
    if !agree(stats, "pooling descriptor", &ours, raw.is_some(), rule)? {
        return Ok(());
    }
    let (ours, raw) = (
        ours.map_err(|e| TestCaseError::fail(e.to_string()))?,
        raw.ok_or_else(|| TestCaseError::fail("raw"))?,
    );
    let r = read_pool(ours.as_raw());
    if r.mode != case.mode.to_raw()
        || r.nan != case.nan.to_raw()
        || r.window != case.window
        || r.pad != case.pad
        || r.stride != case.stride
    {
        return Err(TestCaseError::fail(format!(
            "pooling read back differs: {ours:?}"
        )));
    }
    let Some((xo, xr)) = xt else { return Ok(()) };
    let out = guarded(stats, "output_shape", || ours.output_shape(&xo))?;
    let nb = case.x.len();
    let mut dims = [0i32; 8];
    // SAFETY: `dims` holds 8 >= nb entries.
    let cudnn_ok = ok(unsafe {
        api().cudnnGetPoolingNdForwardOutputDim(raw.0, xr.0, nb as i32, dims.as_mut_ptr())
    });
    let s = case.window.len();
    let rule = (case.x.len() == s + 2
        && (0..s).any(|i| case.x[i + 2] as u128 + 2 * case.pad[i] as u128 > M as u128))
    .then_some(P_PADDED);
    if agree(stats, "pooling output shape", &out, cudnn_ok, rule)? {
        let out = out.map_err(|e| TestCaseError::fail(e.to_string()))?;
        let theirs: Vec<i64> = dims[..nb].iter().map(|&v| i64::from(v)).collect();
        let mine: Vec<i64> = out.iter().map(|&v| v as i64).collect();
        let via = ours
            .output_shape_from_cudnn(&xo)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        if mine != theirs || via != out {
            return Err(TestCaseError::fail(format!(
                "output shape: ours {out:?}, cuDNN {theirs:?} / {via:?}"
            )));
        }
    }
    Ok(())
}

fn pooling_agreement() -> TestResult {
    run_property(
        "pooling agreement",
        pool_case(),
        |stats, case| with_dtype!(case.dtype, check_pool(stats, &case)),
        &[P_PAD_WINDOW, P_PADDED],
        20,
    )
}

// --- activations ---------------------------------------------------------------

fn coef() -> BoxedStrategy<f64> {
    prop_oneof![
        8 => -10.0..10.0f64,
        1 => Just(0.0),
        1 => Just(-0.0),
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => Just(f64::NEG_INFINITY),
        1 => Just(f64::MIN_POSITIVE / 4.0),
        1 => Just(f64::MAX),
        1 => any::<f64>(),
    ]
    .boxed()
}

fn activation_case() -> impl Strategy<Value = (u8, bool, f64)> {
    (0..7u8, any::<bool>(), coef())
}

fn mode_of(m: u8, c: f64) -> ActivationMode {
    use ActivationMode::*;
    match m {
        0 => Sigmoid,
        1 => Relu,
        2 => Tanh,
        3 => ClippedRelu { ceiling: c },
        4 => Elu { alpha: c },
        5 => Swish { beta: c },
        _ => Identity,
    }
}

fn check_activation(
    stats: &RefCell<Stats>,
    (m, propagate, c): (u8, bool, f64),
) -> Result<(), TestCaseError> {
    let mode = mode_of(m, c);
    let nan = if propagate {
        NanPropagation::Propagate
    } else {
        NanPropagation::NotPropagate
    };
    let ours = guarded(stats, "ActivationDescriptor", || {
        ActivationDescriptor::new(mode, nan)
    })?;
    let raw = RawA::new();
    // SAFETY: plain values.
    let cudnn_ok = unsafe {
        ok(api().cudnnSetActivationDescriptor(raw.0, mode.to_raw(), nan.to_raw(), mode.coef()))
            && (!matches!(mode, ActivationMode::Swish { .. })
                || ok(api().cudnnSetActivationDescriptorSwishBeta(raw.0, c)))
    };
    let rule = match mode {
        ActivationMode::ClippedRelu { ceiling } if ceiling.is_nan() || ceiling < 0.0 => {
            Some(A_CEILING)
        }
        ActivationMode::Elu { alpha } if !alpha.is_finite() => Some(A_ALPHA),
        ActivationMode::Swish { beta } if !beta.is_finite() => Some(A_BETA),
        _ => None,
    };
    if agree(stats, "activation", &ours, cudnn_ok, rule)? {
        let ours = ours.map_err(|e| TestCaseError::fail(e.to_string()))?;
        let (rm, rn, rc, rb) = read_activation(ours.as_raw());
        let coef_ok = match mode {
            ActivationMode::ClippedRelu { .. } | ActivationMode::Elu { .. } => {
                rc.to_bits() == c.to_bits()
            }
            ActivationMode::Swish { .. } => rb.to_bits() == c.to_bits(),
            _ => true,
        };
        if rm != mode.to_raw() || rn != nan.to_raw() || !coef_ok || ours.mode() != mode {
            return Err(TestCaseError::fail(format!(
                "activation read back: {ours:?}: {} {} {rc} {rb}",
                rm.0, rn.0
            )));
        }
    }
    Ok(())
}

fn activation_agreement() -> TestResult {
    // cuDNN accepts every mode and NaN option our enums can express, and any
    // coefficient: the only rejections are our listed rules.
    run_property(
        "activation agreement",
        activation_case(),
        check_activation,
        &[A_CEILING, A_ALPHA, A_BETA],
        0,
    )
}

// ---------------------------------------------------------------------------
// Leak check, in a child process so other tests' allocations do not count.

const LEAK_CHILD: &str = "CUDNN_RS_DESCRIPTOR_LEAK_CHILD";
const LEAK_ROUNDS: usize = 100_000;
const LEAK_LIMIT_KB: i64 = 4 * 1024;

fn vm_rss_kb() -> Option<i64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// One of every descriptor kind, created, set and dropped (one destroyed explicitly).
fn churn(i: usize) -> cudnn::Result<()> {
    let n = 1 + i % 3;
    let t = TensorDescriptor::<f32>::nchw(n, 3, 8, 8)?;
    let t2 = TensorDescriptor::<half::f16>::new(&[n, 2, 3, 4, 5], &[120, 60, 20, 5, 1])?;
    let f = FilterDescriptor::<f32>::nchw(4, 3, 3, 3)?;
    let c = ConvDescriptor::new_2d([1, 1], [1, 1], [1, 1])?
        .with_groups(1)?
        .with_math_type(MathType::TensorOp)?;
    let p = PoolingDescriptor::new_2d(PoolingMode::Max, [2, 2], [0, 0], [2, 2])?;
    let a = ActivationDescriptor::new(
        ActivationMode::Swish { beta: 1.0 },
        NanPropagation::Propagate,
    )?;
    if i.is_multiple_of(2) {
        t2.destroy()?;
    }
    drop((t, f, c, p, a));
    Ok(())
}

fn leak_child() -> ! {
    let run = |rounds: usize| (0..rounds).try_for_each(churn);
    let result = run(1000).and_then(|()| {
        let before = vm_rss_kb().unwrap_or(-1);
        run(LEAK_ROUNDS)?;
        Ok((before, vm_rss_kb().unwrap_or(-1)))
    });
    match result {
        Ok((before, after)) => {
            println!("rss_kb {before} {after}");
            std::process::exit(0)
        }
        Err(e) => {
            println!("error {e}");
            std::process::exit(1)
        }
    }
}

fn leak_check() -> TestResult {
    let start = Instant::now();
    let out = std::process::Command::new(std::env::current_exe()?)
        .env(LEAK_CHILD, "1")
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("rss_kb "))
        .ok_or_else(|| {
            format!(
                "leak child failed ({}): {stdout}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
    let v: Vec<i64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    ensure!(
        v.len() == 2 && v[0] > 0 && v[1] > 0,
        "could not read VmRSS: {line}"
    );
    let growth = v[1] - v[0];
    eprintln!(
        "leak check: {LEAK_ROUNDS} rounds x 6 descriptors, VmRSS {} -> {} kB ({growth:+} kB) in {:.1?}",
        v[0],
        v[1],
        start.elapsed()
    );
    ensure!(
        growth < LEAK_LIMIT_KB,
        "VmRSS grew by {growth} kB over {LEAK_ROUNDS} rounds (limit {LEAK_LIMIT_KB} kB)"
    );
    Ok(())
}

pub fn main() {
    if std::env::var_os(LEAK_CHILD).is_some() {
        leak_child();
    }
    run(vec![
        host("tensor_round_trip_f32", tensor_round_trip::<f32>),
        host("tensor_round_trip_f64", tensor_round_trip::<f64>),
        host("tensor_round_trip_f16", tensor_round_trip::<half::f16>),
        host("tensor_round_trip_bf16", tensor_round_trip::<half::bf16>),
        host("tensor_round_trip_i8", tensor_round_trip::<i8>),
        host("tensor_round_trip_u8", tensor_round_trip::<u8>),
        host("tensor_round_trip_i32", tensor_round_trip::<i32>),
        host(
            "tensor_from_raw_wrong_dtype_leaves_descriptor",
            tensor_from_raw_wrong_dtype,
        ),
        host("filter_round_trip_f32", filter_round_trip::<f32>),
        host("filter_round_trip_f16", filter_round_trip::<half::f16>),
        host("filter_round_trip_i8", filter_round_trip::<i8>),
        host("conv_round_trip", conv_round_trip),
        host("pooling_round_trip", pooling_round_trip),
        host("errors_name_what_was_passed", errors_name_what_was_passed),
        host(
            "pooling_strict_follows_pytorch_default_follows_cudnn",
            pooling_strict,
        ),
        host("activation_round_trip", activation_round_trip),
        host("descriptors_are_send", descriptors_are_send),
        host("conv_output_shapes_formula_vs_cudnn", conv_output_table),
        host(
            "pooling_output_shapes_formula_vs_cudnn",
            pooling_output_table,
        ),
        host(
            "stricter_than_cudnn_rules_witnessed",
            stricter_rule_witnesses,
        ),
        host("agreement_tensor", tensor_agreement),
        host("agreement_filter", filter_agreement),
        host("agreement_conv", conv_agreement),
        host("agreement_pooling", pooling_agreement),
        host("agreement_activation", activation_agreement),
        host("leak_100k_create_drop", leak_check),
    ])
}
