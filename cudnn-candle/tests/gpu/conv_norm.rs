//! GPU tier of `conv2d` and the norms: against candle's own CPU `conv2d`
//! and the norms' formulas computed with candle's CPU ops (independent
//! references), in f32 and with f16 / bf16 tolerances; gradients against
//! candle's CPU autograd of those references.

use candle_core::{D, DType, Device, Tensor, Var};
use cudnn_candle::{Activation, Conv2dParams};

use super::{close, cuda, tol};
use crate::support::{TestResult, Trial, gpu, typed, unit};

/// Random values rounded to `dt`, as f32 on the CPU.
pub(crate) fn rnd(dims: &[usize], dt: DType) -> candle_core::Result<Tensor> {
    Tensor::randn(0f32, 1.0, dims, &Device::Cpu)?
        .to_dtype(dt)?
        .to_dtype(DType::F32)
}

pub(crate) fn tolerance(dt: DType) -> f64 {
    if dt == DType::F32 { 1e-4 } else { tol(dt) }
}

fn act(t: &Tensor, a: Activation) -> candle_core::Result<Tensor> {
    match a {
        Activation::None => Ok(t.clone()),
        Activation::Relu => t.relu(),
        Activation::Gelu => t.gelu(),
        Activation::GeluErf => t.gelu_erf(),
        Activation::Silu => t.silu(),
        other => Err(candle_core::Error::Msg(format!(
            "no reference for {other:?}"
        ))),
    }
}

/// candle's CPU conv2d, + bias, activation.
pub(crate) fn conv_ref(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    p: &Conv2dParams,
) -> candle_core::Result<Tensor> {
    let y = x.conv2d(w, p.padding, p.stride, p.dilation, p.groups)?;
    let y = match b {
        Some(b) => y.broadcast_add(&b.reshape((1, b.dim(0)?, 1, 1))?)?,
        None => y,
    };
    act(&y, p.activation)
}

/// Forward and (with `grads`) the gradients of x, w, bias against the CPU.
fn conv_case(
    xd: [usize; 4],
    wd: [usize; 4],
    bias: bool,
    p: Conv2dParams,
    dt: DType,
    grads: bool,
) -> TestResult {
    let dev = cuda()?;
    let (x, w, b) = (rnd(&xd, dt)?, rnd(&wd, dt)?, rnd(&[wd[0]], dt)?);
    let (xc, wc, bc) = (
        Var::from_tensor(&x)?,
        Var::from_tensor(&w)?,
        Var::from_tensor(&b)?,
    );
    let want = conv_ref(
        xc.as_tensor(),
        wc.as_tensor(),
        bias.then_some(bc.as_tensor()),
        &p,
    )?;
    let g = |t: &Tensor| -> candle_core::Result<Var> {
        Var::from_tensor(&t.to_dtype(dt)?.to_device(&dev)?)
    };
    let (xg, wg, bg) = (g(&x)?, g(&w)?, g(&b)?);
    let got = cudnn_candle::conv2d_with(
        xg.as_tensor(),
        wg.as_tensor(),
        bias.then_some(bg.as_tensor()),
        &p,
    )?;
    close("y", &got, &want, tolerance(dt))?;
    if !grads {
        return Ok(());
    }
    let r = rnd(want.dims(), DType::F32)?;
    let gc = (&want * &r)?.sum_all()?.backward()?;
    let gg = (got.to_dtype(DType::F32)? * r.to_device(&dev)?)?
        .sum_all()?
        .backward()?;
    let mut pairs = vec![("dx", &xc, &xg), ("dw", &wc, &wg)];
    if bias {
        pairs.push(("dbias", &bc, &bg));
    }
    for (n, c, gv) in pairs {
        let want = gc.get(c.as_tensor()).ok_or("no CPU gradient")?;
        let got = gg.get(gv.as_tensor()).ok_or("no GPU gradient")?;
        close(n, got, want, 2.0 * tolerance(dt))?;
    }
    Ok(())
}

/// The norms' formulas on the CPU (f32).
pub(crate) fn norm_ref(
    rms: bool,
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    eps: f64,
) -> candle_core::Result<Tensor> {
    let xc = if rms {
        x.clone()
    } else {
        x.broadcast_sub(&x.mean_keepdim(D::Minus1)?)?
    };
    let var = xc.sqr()?.mean_keepdim(D::Minus1)?;
    let y = xc.broadcast_div(&(var + eps)?.sqrt()?)?.broadcast_mul(w)?;
    match b {
        Some(b) => y.broadcast_add(b),
        None => Ok(y),
    }
}

fn norm_case(rms: bool, xd: &[usize], bias: bool, dt: DType) -> TestResult {
    let dev = cuda()?;
    let h = xd[xd.len() - 1];
    let eps = 1e-5f32;
    // Shifted inputs: a mean far from 0 is where a one-pass variance fails.
    let x = (rnd(xd, dt)? + 3.0)?.to_dtype(dt)?.to_dtype(DType::F32)?;
    let (w, b) = (rnd(&[h], dt)?, rnd(&[h], dt)?);
    let (xc, wc, bc) = (
        Var::from_tensor(&x)?,
        Var::from_tensor(&w)?,
        Var::from_tensor(&b)?,
    );
    let want = norm_ref(
        rms,
        xc.as_tensor(),
        wc.as_tensor(),
        bias.then_some(bc.as_tensor()),
        f64::from(eps),
    )?;
    let g = |t: &Tensor| -> candle_core::Result<Var> {
        Var::from_tensor(&t.to_dtype(dt)?.to_device(&dev)?)
    };
    let (xg, wg, bg) = (g(&x)?, g(&w)?, g(&b)?);
    let f = if rms {
        cudnn_candle::rms_norm
    } else {
        cudnn_candle::layer_norm
    };
    let got = f(
        xg.as_tensor(),
        wg.as_tensor(),
        bias.then_some(bg.as_tensor()),
        eps,
    )?;
    close("y", &got, &want, tolerance(dt))?;
    let r = rnd(xd, DType::F32)?;
    let gc = (&want * &r)?.sum_all()?.backward()?;
    let gg = (got.to_dtype(DType::F32)? * r.to_device(&dev)?)?
        .sum_all()?
        .backward()?;
    let mut pairs = vec![("dx", &xc, &xg), ("dweight", &wc, &wg)];
    if bias {
        pairs.push(("dbias", &bc, &bg));
    }
    for (n, c, gv) in pairs {
        let want = gc.get(c.as_tensor()).ok_or("no CPU gradient")?;
        let got = gg.get(gv.as_tensor()).ok_or("no GPU gradient")?;
        if got.dtype() != dt {
            return Err(
                format!("{n} dtype {:?}, want {dt:?} (the parameter's)", got.dtype()).into(),
            );
        }
        close(n, got, want, 4.0 * tolerance(dt))?;
    }
    Ok(())
}

/// The CPU side of every GPU case runs here (candle's autograd of
/// conv2d with groups, stride and dilation included), and the norm
/// formula gives hand-computed values.
fn references_run_on_the_cpu() -> TestResult {
    let cases: [([usize; 4], [usize; 4], Conv2dParams); 4] = [
        ([2, 3, 9, 9], [4, 3, 3, 3], Conv2dParams::new(1, 1, 1, 1)),
        ([2, 4, 11, 11], [8, 4, 3, 3], Conv2dParams::new(1, 2, 1, 1)),
        (
            [2, 8, 12, 12],
            [8, 2, 3, 3],
            Conv2dParams::new(2, 1, 2, 4).activation(Activation::GeluErf),
        ),
        (
            [1, 4, 8, 8],
            [8, 4, 3, 3],
            Conv2dParams::new(1, 1, 1, 1).activation(Activation::Silu),
        ),
    ];
    for (xd, wd, p) in cases {
        let x = Var::from_tensor(&rnd(&xd, DType::F32)?)?;
        let w = Var::from_tensor(&rnd(&wd, DType::F32)?)?;
        let b = Var::from_tensor(&rnd(&[wd[0]], DType::F32)?)?;
        let y = conv_ref(x.as_tensor(), w.as_tensor(), Some(b.as_tensor()), &p)?;
        let g = y.sum_all()?.backward()?;
        for v in [&x, &w, &b] {
            let d = g.get(v.as_tensor()).ok_or("no gradient")?;
            assert_eq!(d.dims(), v.as_tensor().dims());
        }
        // Sum of y over everything, no activation: dbias[k] = N * OH * OW.
        if p.activation == Activation::None {
            let (n, _, oh, ow) = y.dims4()?;
            let db = g
                .get(b.as_tensor())
                .ok_or("no gradient")?
                .to_vec1::<f32>()?;
            assert!(db.iter().all(|&v| v == (n * oh * ow) as f32), "{db:?}");
        }
    }
    // Layer norm of [1, 2, 3, 4]: mean 2.5, variance 1.25.
    let x = Tensor::new(&[[1f32, 2., 3., 4.]], &Device::Cpu)?;
    let ones = Tensor::ones(4, DType::F32, &Device::Cpu)?;
    let y = norm_ref(false, &x, &ones, None, 0.0)?.to_vec2::<f32>()?;
    let s = 1.25f32.sqrt();
    for (got, want) in y[0].iter().zip([-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s]) {
        assert!((got - want).abs() < 1e-6, "{got} vs {want}");
    }
    // RMS norm: mean square 7.5.
    let y = norm_ref(true, &x, &ones, None, 0.0)?.to_vec2::<f32>()?;
    let r = 7.5f32.sqrt();
    for (got, want) in y[0].iter().zip([1.0 / r, 2.0 / r, 3.0 / r, 4.0 / r]) {
        assert!((got - want).abs() < 1e-6, "{got} vs {want}");
    }
    Ok(())
}

pub fn trials() -> Vec<Trial> {
    let (f32_, f16, bf) = (DType::F32, DType::F16, DType::BF16);
    let p = Conv2dParams::new(1, 1, 1, 1);
    let mut t = vec![
        unit(
            "conv_norm_references_run_on_the_cpu",
            references_run_on_the_cpu,
        ),
        gpu("conv2d_f32", move || {
            conv_case([2, 3, 9, 9], [4, 3, 3, 3], false, p, f32_, true)
        }),
        gpu("conv2d_bias_relu_fused_f32", move || {
            conv_case(
                [2, 8, 10, 10],
                [16, 8, 3, 3],
                true,
                p.activation(Activation::Relu),
                f32_,
                true,
            )
        }),
        gpu("conv2d_bias_relu_fused_bf16", move || {
            conv_case(
                [2, 16, 12, 12],
                [32, 16, 3, 3],
                true,
                p.activation(Activation::Relu),
                bf,
                true,
            )
        }),
        gpu("conv2d_bias_gelu_f16", move || {
            conv_case(
                [2, 16, 12, 12],
                [32, 16, 3, 3],
                true,
                p.activation(Activation::Gelu),
                f16,
                true,
            )
        }),
        gpu("conv2d_silu_no_bias_f32", move || {
            conv_case(
                [1, 4, 8, 8],
                [8, 4, 3, 3],
                false,
                p.activation(Activation::Silu),
                f32_,
                true,
            )
        }),
        gpu("conv2d_stride2_f32", move || {
            conv_case(
                [2, 4, 11, 11],
                [8, 4, 3, 3],
                true,
                Conv2dParams::new(1, 2, 1, 1),
                f32_,
                true,
            )
        }),
        gpu("conv2d_groups_dilation_f32", move || {
            conv_case(
                [2, 8, 12, 12],
                [8, 2, 3, 3],
                true,
                Conv2dParams::new(2, 1, 2, 4).activation(Activation::GeluErf),
                f32_,
                true,
            )
        }),
        gpu("conv2d_1x1_bf16_forward", move || {
            conv_case(
                [4, 32, 7, 7],
                [64, 32, 1, 1],
                true,
                Conv2dParams::new(0, 1, 1, 1),
                bf,
                false,
            )
        }),
        gpu("conv2d_loop_plans_once", move || {
            let dev = cuda()?;
            let x = Tensor::randn(0f32, 1.0, (2, 8, 16, 16), &dev)?;
            let w = Tensor::randn(0f32, 1.0, (8, 8, 3, 3), &dev)?;
            let b = Tensor::randn(0f32, 1.0, 8, &dev)?;
            let p = Conv2dParams::new(1, 1, 1, 1).activation(Activation::Relu);
            cudnn_candle::conv2d_with(&x, &w, Some(&b), &p)?;
            let before = cudnn_candle::plans().stats().builds;
            for _ in 0..5 {
                cudnn_candle::conv2d_with(&x, &w, Some(&b), &p)?;
            }
            assert_eq!(
                cudnn_candle::plans().stats().builds,
                before,
                "a step planned again"
            );
            Ok(())
        }),
        gpu("conv2d_strided_input_is_made_contiguous", move || {
            // A transposed view: the function copies it (candle's own conv2d does too).
            let dev = cuda()?;
            let x = rnd(&[2, 3, 9, 9], f32_)?;
            let w = rnd(&[4, 3, 3, 3], f32_)?;
            let xt = x.transpose(2, 3)?;
            let got = cudnn_candle::conv2d(&xt.to_device(&dev)?, &w.to_device(&dev)?, 1, 1, 1, 1)?;
            close("y", &got, &xt.conv2d(&w, 1, 1, 1, 1)?, 1e-4)
        }),
        gpu("conv2d_dtype_mismatch_is_typed", move || {
            let dev = cuda()?;
            let x = Tensor::zeros((1, 2, 4, 4), DType::F32, &dev)?;
            let w = Tensor::zeros((2, 2, 3, 3), DType::BF16, &dev)?;
            let e = cudnn_candle::conv2d(&x, &w, 0, 1, 1, 1).expect_err("mixed dtypes");
            match typed(&e) {
                Some(cudnn::Error::Mismatch { what, .. }) => {
                    assert!(what.contains("w dtype"), "{what}")
                }
                other => panic!("not the typed refusal: {other:?} ({e})"),
            }
            Ok(())
        }),
    ];
    for (name, dt) in [("f32", f32_), ("f16", f16), ("bf16", bf)] {
        t.push(gpu(&format!("layer_norm_{name}"), move || {
            norm_case(false, &[3, 5, 256], true, dt)
        }));
        t.push(gpu(&format!("rms_norm_{name}"), move || {
            norm_case(true, &[3, 5, 256], false, dt)
        }));
    }
    t.push(gpu("layer_norm_no_bias_f32", move || {
        norm_case(false, &[4, 96], false, f32_)
    }));
    t.push(gpu("rms_norm_bias_bf16", move || {
        norm_case(true, &[2, 3, 128], true, bf)
    }));
    t.push(gpu("norm_loop_plans_once", move || {
        let dev = cuda()?;
        let x = Tensor::randn(0f32, 1.0, (8, 512), &dev)?;
        let w = Tensor::ones(512, DType::F32, &dev)?;
        cudnn_candle::rms_norm(&x, &w, None, 1e-6)?;
        let before = cudnn_candle::plans().stats().builds;
        for _ in 0..5 {
            cudnn_candle::rms_norm(&x, &w, None, 1e-6)?;
        }
        assert_eq!(
            cudnn_candle::plans().stats().builds,
            before,
            "a step planned again"
        );
        Ok(())
    }));
    t
}
