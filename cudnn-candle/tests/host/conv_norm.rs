//! Host tier of `conv2d` and the norms: every graph they run plans for an
//! H200 (the crate's driver stub standing in), and their argument checks
//! refuse bad calls with typed errors naming the argument.

use candle_core::DType as CDType;
use cudnn::graph::{Plan, Policy, Target};
use cudnn_candle::conv;
use cudnn_candle::conv_graphs::{self, Activation, Conv2dParams};
use cudnn_candle::norm_graphs::{self, NormKind};
use cudnn_candle::params::Arg;
use cudnn_candle::run;

use crate::support::{TestResult, Trial, host, typed, unit};

fn contiguous(d: &[usize]) -> Vec<usize> {
    conv_graphs::contiguous_strides(d).expect("small dims")
}

/// Plan the forward, dgrad and wgrad graphs of a conv2d call for an H200,
/// the activation in the forward graph where `conv::fuses` says it is.
pub fn plan_conv(
    xd: [usize; 4],
    wd: [usize; 4],
    bias: bool,
    p: Conv2dParams,
    dt: CDType,
) -> TestResult {
    let target = Target::preset("h200")?;
    let (xs, ws) = (contiguous(&xd), contiguous(&wd));
    let bd = [wd[0]];
    let x = Arg {
        name: "x",
        dims: &xd,
        strides: &xs,
        dtype: dt,
    };
    let w = Arg {
        name: "w",
        dims: &wd,
        strides: &ws,
        dtype: dt,
    };
    let b = Arg {
        name: "bias",
        dims: &bd,
        strides: &[1],
        dtype: dt,
    };
    let fused = conv::fuses(p.activation, bias);
    let p = if fused {
        p
    } else {
        p.activation(Activation::None)
    };
    let cfg = conv_graphs::conv2d(&x, &w, bias.then_some(&b), &p)?;
    for (what, g) in [
        ("forward", conv_graphs::forward(&cfg)?),
        ("dgrad", conv_graphs::dgrad(&cfg)?),
        ("wgrad", conv_graphs::wgrad(&cfg)?),
    ] {
        let (plan, _) = Plan::build(&g.build()?, &target, &Policy::default())
            .map_err(|e| format!("{what} of {cfg:?}: {e}"))?;
        // What the functions bind is candle-contiguous: the plan must agree.
        run::expect_every_packed(plan.io())?;
        eprintln!("  {what}: workspace {} bytes", plan.workspace_size());
    }
    Ok(())
}

/// Independent truth: cuDNN's heuristics for an H200 (the fetched cuDNN
/// 9 stack). Both directions: a graph `fuses` calls fused must plan, and
/// one it calls unfused must not (else the table gives away a fusion;
/// conv2d falls back when a fused graph does not plan on the device, so
/// the table only decides what is tried).
fn nchw_fusion_matches(dt: CDType) -> TestResult {
    let target = Target::preset("h200")?;
    let (xd, wd) = ([2usize, 16, 12, 12], [32usize, 16, 3, 3]);
    let (xs, ws) = (contiguous(&xd), contiguous(&wd));
    let mut wrong = Vec::new();
    for act in ACTS {
        for bias in [false, true] {
            let a = |name, dims, strides| Arg {
                name,
                dims,
                strides,
                dtype: dt,
            };
            let (x, w, b) = (a("x", &xd, &xs), a("w", &wd, &ws), a("bias", &[32], &[1]));
            let cfg = conv_graphs::conv2d(
                &x,
                &w,
                bias.then_some(&b),
                &Conv2dParams::default().activation(act),
            )?;
            let r = Plan::build(
                &conv_graphs::forward(&cfg)?.build()?,
                &target,
                &Policy::default(),
            );
            let says = conv::fuses(act, bias);
            eprintln!(
                "  {dt:?} {act:?} bias {bias}: fuses {says}, plans {}",
                r.is_ok()
            );
            match (says, r) {
                (true, Err(e)) => wrong.push(format!("{act:?} bias {bias}: fuses but {e}")),
                (false, Ok(_)) => {
                    wrong.push(format!("{act:?} bias {bias}: plans fused, fuses says no"))
                }
                _ => {}
            }
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!("{dt:?}: {wrong:?}").into())
    }
}

const ACTS: [Activation; 5] = [
    Activation::None,
    Activation::Relu,
    Activation::Gelu,
    Activation::GeluErf,
    Activation::Silu,
];

pub fn trials() -> Vec<Trial> {
    let mut t = Vec::new();
    for dt in [CDType::F32, CDType::F16, CDType::BF16] {
        for act in ACTS {
            for bias in [false, true] {
                t.push(host(
                    &format!("plan_h200_conv2d_{dt:?}_{act:?}_bias_{bias}"),
                    move || {
                        plan_conv(
                            [2, 16, 12, 12],
                            [32, 16, 3, 3],
                            bias,
                            Conv2dParams::new(1, 1, 1, 1).activation(act),
                            dt,
                        )
                    },
                ));
            }
        }
    }
    for dt in [CDType::F32, CDType::F16, CDType::BF16] {
        t.push(host(
            &format!("nchw_fusion_is_what_fuses_says_{dt:?}"),
            move || nchw_fusion_matches(dt),
        ));
    }
    t.push(host("plan_h200_conv2d_odd_channels", || {
        // RGB input (3 channels), 5x5 stride 2, in every dtype, with and
        // without the fused bias + ReLU.
        for dt in [CDType::F32, CDType::F16, CDType::BF16] {
            for act in [Activation::None, Activation::Relu] {
                plan_conv(
                    [2, 3, 33, 31],
                    [5, 3, 5, 5],
                    true,
                    Conv2dParams::new(2, 2, 1, 1).activation(act),
                    dt,
                )?;
            }
        }
        Ok(())
    }));
    t.push(host("plan_h200_model_shapes", || {
        // A ResNet stage, a depthwise conv, a stem; Llama-sized norms.
        let (b, h) = (CDType::BF16, CDType::F16);
        let relu = Activation::Relu;
        plan_conv(
            [8, 64, 56, 56],
            [64, 64, 3, 3],
            true,
            Conv2dParams::new(1, 1, 1, 1).activation(relu),
            b,
        )?;
        plan_conv(
            [8, 128, 28, 28],
            [128, 1, 3, 3],
            true,
            Conv2dParams::new(1, 1, 1, 128),
            h,
        )?;
        plan_conv(
            [8, 3, 224, 224],
            [64, 3, 7, 7],
            true,
            Conv2dParams::new(3, 2, 1, 1).activation(relu),
            b,
        )?;
        plan_norm(NormKind::Rms, &[4, 1024, 4096], false, b)?;
        plan_norm(NormKind::Layer, &[4, 1024, 1024], true, h)
    }));
    t.push(host("plan_h200_conv2d_groups_stride_dilation", || {
        plan_conv(
            [2, 16, 13, 11],
            [32, 4, 3, 3],
            true,
            Conv2dParams::new(2, 2, 2, 4).activation(Activation::Relu),
            CDType::BF16,
        )
    }));
    t
}

/// What the module docs of `conv` say: on NHWC half-precision tensors
/// cuDNN fuses every activation after conv + bias (runtime fusion);
/// candle's NCHW only conv + bias + ReLU (`nchw_fusion_is_what_fuses_says`).
pub fn nhwc_fusion() -> Vec<Trial> {
    use cudnn::graph::{ConvParams, DType, Graph, Pointwise, TensorSpec};
    let mut t = Vec::new();
    // Half precision: f32 runtime fusion needs TF32 on cuDNN 9.10 (the
    // default policy refuses it).
    for (dt, name) in [(DType::F16, "f16"), (DType::BF16, "bf16")] {
        for (m, mn) in [
            (Pointwise::GeluTanh, "gelu"),
            (Pointwise::Swish { beta: 1.0 }, "silu"),
            (Pointwise::Relu, "relu"),
        ] {
            t.push(host(
                &format!("plan_h200_conv2d_nhwc_fuses_{name}_{mn}"),
                move || {
                    let target = Target::preset("h200")?;
                    let mut g = Graph::new();
                    let x = g.input("x", TensorSpec::nhwc(dt, &[2, 16, 12, 12])?)?;
                    let w = g.input("w", TensorSpec::nhwc(dt, &[32, 16, 3, 3])?)?;
                    let y = g.conv_fprop(x, w, &ConvParams::new_2d([1, 1], [1, 1], [1, 1]))?;
                    let b = g.input("b", TensorSpec::nhwc(dt, &[1, 32, 1, 1])?)?;
                    let y = g.bias(y, b)?;
                    let y = g.pointwise(m, &[y])?;
                    g.output(y, dt)?;
                    Plan::build(&g.build()?, &target, &Policy::default())?;
                    Ok(())
                },
            ));
        }
    }
    t
}

/// Plan the inference and training forwards and the backward of a norm for an H200.
pub fn plan_norm(kind: NormKind, xd: &[usize], bias: bool, dt: CDType) -> TestResult {
    let target = Target::preset("h200")?;
    let xs = contiguous(xd);
    let h = [xd[xd.len() - 1]];
    let x = Arg {
        name: "x",
        dims: xd,
        strides: &xs,
        dtype: dt,
    };
    let w = Arg {
        name: "weight",
        dims: &h,
        strides: &[1],
        dtype: CDType::F32,
    };
    let b = Arg {
        name: "bias",
        dims: &h,
        strides: &[1],
        dtype: CDType::F32,
    };
    let cfg = norm_graphs::check(kind, &x, &w, bias.then_some(&b), 1e-5)?;
    for (what, g) in [
        ("inference", norm_graphs::forward(&cfg, false)?),
        ("training", norm_graphs::forward(&cfg, true)?),
        ("backward", norm_graphs::backward(&cfg)?),
    ] {
        let (plan, _) = Plan::build(&g.build()?, &target, &Policy::default())
            .map_err(|e| format!("{what} of {cfg:?}: {e}"))?;
        // What the functions bind is candle-contiguous: the plan must agree.
        run::expect_every_packed(plan.io())?;
        eprintln!("  {what}: workspace {} bytes", plan.workspace_size());
    }
    Ok(())
}

pub fn norm_trials() -> Vec<Trial> {
    let mut t = vec![host("plan_h200_every_gpu_case", || {
        // The shapes of the GPU tier's cases (tests/gpu/conv_norm.rs): each
        // plans here, so a GPU failure there is a numerical one.
        let p = Conv2dParams::new(1, 1, 1, 1);
        let (f, h, b) = (CDType::F32, CDType::F16, CDType::BF16);
        let cases = [
            ([2, 3, 9, 9], [4, 3, 3, 3], false, p, f),
            (
                [2, 8, 10, 10],
                [16, 8, 3, 3],
                true,
                p.activation(Activation::Relu),
                f,
            ),
            (
                [2, 16, 12, 12],
                [32, 16, 3, 3],
                true,
                p.activation(Activation::Relu),
                b,
            ),
            (
                [2, 16, 12, 12],
                [32, 16, 3, 3],
                true,
                p.activation(Activation::Gelu),
                h,
            ),
            (
                [1, 4, 8, 8],
                [8, 4, 3, 3],
                false,
                p.activation(Activation::Silu),
                f,
            ),
            (
                [2, 4, 11, 11],
                [8, 4, 3, 3],
                true,
                Conv2dParams::new(1, 2, 1, 1),
                f,
            ),
            (
                [2, 8, 12, 12],
                [8, 2, 3, 3],
                true,
                Conv2dParams::new(2, 1, 2, 4).activation(Activation::GeluErf),
                f,
            ),
            (
                [4, 32, 7, 7],
                [64, 32, 1, 1],
                true,
                Conv2dParams::new(0, 1, 1, 1),
                b,
            ),
            (
                [2, 8, 16, 16],
                [8, 8, 3, 3],
                true,
                p.activation(Activation::Relu),
                f,
            ),
        ];
        for (xd, wd, bias, p, dt) in cases {
            plan_conv(xd, wd, bias, p, dt)?;
        }
        for dt in [f, h, b] {
            plan_norm(NormKind::Layer, &[3, 5, 256], true, dt)?;
            plan_norm(NormKind::Rms, &[3, 5, 256], false, dt)?;
        }
        plan_norm(NormKind::Layer, &[4, 96], true, f)?;
        plan_norm(NormKind::Rms, &[2, 3, 128], true, b)?;
        plan_norm(NormKind::Rms, &[8, 512], false, f)?;
        // tests/gpu/conv_norm_views.rs: narrowed views (copied to a fresh
        // buffer, so packed shapes), the ReLU zero patch, hidden 33 / 100.
        let relu = Conv2dParams::default().activation(Activation::Relu);
        plan_conv([1, 3, 9, 9], [3, 3, 3, 3], false, p, f)?;
        plan_conv([1, 3, 7, 7], [4, 3, 3, 3], false, p, f)?;
        plan_conv([1, 2, 6, 6], [3, 2, 3, 3], true, relu, f)?;
        plan_conv([1, 2, 6, 6], [3, 2, 3, 3], false, relu, f)?;
        plan_norm(NormKind::Layer, &[2, 100], true, h)?;
        plan_norm(NormKind::Layer, &[2, 100], true, b)?;
        plan_norm(NormKind::Rms, &[3, 33], false, f)?;
        plan_norm(NormKind::Layer, &[3, 33], true, f)
    })];
    for dt in [CDType::F32, CDType::F16, CDType::BF16] {
        for (kind, bias) in [
            (NormKind::Layer, true),
            (NormKind::Rms, false),
            (NormKind::Rms, true),
        ] {
            t.push(host(
                &format!("plan_h200_{kind:?}_norm_{dt:?}_bias_{bias}"),
                move || plan_norm(kind, &[2, 7, 768], bias, dt),
            ));
            // Odd hidden sizes (33: no vector width divides it; 1: a
            // single element) and 100 in half precision (rows 200 bytes
            // apart: the GPU tier's narrowed case).
            for hidden in [33usize, 1, 100] {
                t.push(host(
                    &format!("plan_h200_{kind:?}_norm_{dt:?}_bias_{bias}_hidden_{hidden}"),
                    move || plan_norm(kind, &[3, 5, hidden], bias, dt),
                ));
            }
        }
    }
    t
}

fn refusal(e: &candle_core::Error) -> String {
    match typed(e) {
        Some(cudnn::Error::Unsupported { what, .. }) => what.clone(),
        Some(cudnn::Error::InvalidArgument { arg, .. }) => arg.clone(),
        Some(cudnn::Error::Mismatch { what, .. }) => what.clone(),
        other => format!("not a typed refusal: {other:?} ({e})"),
    }
}

/// The functions on CPU tensors and with mixed parameter dtypes: typed.
pub fn refusal_trials() -> Vec<Trial> {
    use candle_core::{Device, Tensor};
    vec![
        unit("conv2d_cpu_tensors_are_refused_typed", || {
            let x = Tensor::zeros((1, 2, 4, 4), CDType::F32, &Device::Cpu)?;
            let w = Tensor::zeros((2, 2, 3, 3), CDType::F32, &Device::Cpu)?;
            let b = Tensor::zeros(2, CDType::F32, &Device::Cpu)?;
            let e = cudnn_candle::conv2d(&x, &w, 1, 1, 1, 1).expect_err("CPU");
            assert!(refusal(&e).contains("on the CPU"), "{}", refusal(&e));
            let p = Conv2dParams::default().activation(Activation::Relu);
            let e = cudnn_candle::conv2d_with(&x, &w, Some(&b), &p).expect_err("CPU");
            assert!(refusal(&e).contains("on the CPU"), "{}", refusal(&e));
            Ok(())
        }),
        unit("norm_cpu_tensors_are_refused_typed", || {
            let x = Tensor::zeros((2, 8), CDType::F32, &Device::Cpu)?;
            let w = Tensor::ones(8, CDType::F32, &Device::Cpu)?;
            let e = cudnn_candle::layer_norm(&x, &w, None, 1e-5).expect_err("CPU");
            assert!(refusal(&e).contains("on the CPU"), "{}", refusal(&e));
            let e = cudnn_candle::rms_norm(&x, &w, None, 1e-5).expect_err("CPU");
            assert!(refusal(&e).contains("on the CPU"), "{}", refusal(&e));
            let e = cudnn_candle::rms_norm(&x, &w, Some(&w), 1e-5).expect_err("CPU");
            assert!(refusal(&e).contains("on the CPU"), "{}", refusal(&e));
            Ok(())
        }),
        unit("norm_parameter_dtype_is_xs", || {
            // candle-nn's convention: weight and bias of x's dtype.
            let x = Tensor::zeros((2, 8), CDType::F32, &Device::Cpu)?;
            let w = Tensor::ones(8, CDType::BF16, &Device::Cpu)?;
            let e = cudnn_candle::layer_norm(&x, &w, None, 1e-5).expect_err("bf16 weight");
            assert!(refusal(&e).starts_with("weight dtype"), "{}", refusal(&e));
            let wf = Tensor::ones(8, CDType::F32, &Device::Cpu)?;
            let e = cudnn_candle::rms_norm(&x, &wf, Some(&w), 1e-5).expect_err("bf16 bias");
            assert!(refusal(&e).starts_with("bias dtype"), "{}", refusal(&e));
            Ok(())
        }),
    ]
}
