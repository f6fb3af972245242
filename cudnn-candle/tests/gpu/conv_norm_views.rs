//! GPU tier, review fixes of `conv2d` and the norms: views whose start is
//! not 16-byte aligned (`narrow` on the first dim, a channel slice with
//! N = 1; output gradients narrowed by candle's `cat` backward), ReLU's
//! gradient at a pre-activation of exactly 0, an odd hidden size.
//! References: candle's CPU conv2d and the norm formulas on the CPU (f32),
//! differentiated by candle's CPU autograd.

use candle_core::{DType, Device, Tensor, Var};
use cudnn_candle::{Activation, Conv2dParams};

use super::conv_norm::{conv_ref, norm_ref, rnd, tolerance};
use super::{close, cuda};
use crate::support::{TestResult, Trial, gpu, unit};

/// `(cat([other, y], 0) * r).sum()`: candle's `cat` backward hands `y`
/// the gradient `r.narrow(0, other_rows, ..)`, contiguous at an offset.
fn loss_through_cat(y: &Tensor, other: &Tensor, r: &Tensor) -> candle_core::Result<Tensor> {
    let y = y.to_dtype(DType::F32)?;
    (Tensor::cat(&[other, &y], 0)? * r)?.sum_all()
}

/// conv2d of `x.narrow(dim, start, len)` (with the output gradient
/// narrowed too) against the CPU: y, dx (of the whole x), dw.
fn narrowed_conv(
    xd: [usize; 4],
    wd: [usize; 4],
    (dim, start, len): (usize, usize, usize),
    want_offset: usize,
) -> TestResult {
    let dev = cuda()?;
    let p = Conv2dParams::new(1, 1, 1, 1);
    let (x, w) = (rnd(&xd, DType::F32)?, rnd(&wd, DType::F32)?);
    let (xc, wc) = (Var::from_tensor(&x)?, Var::from_tensor(&w)?);
    let want = conv_ref(
        &xc.as_tensor().narrow(dim, start, len)?,
        wc.as_tensor(),
        None,
        &p,
    )?;
    let mut od = want.dims().to_vec();
    od[0] = 1;
    let other = rnd(&od, DType::F32)?;
    let mut rd = want.dims().to_vec();
    rd[0] += 1;
    let r = rnd(&rd, DType::F32)?;
    let gc = loss_through_cat(&want, &other, &r)?.backward()?;
    let (xg, wg) = (
        Var::from_tensor(&x.to_device(&dev)?)?,
        Var::from_tensor(&w.to_device(&dev)?)?,
    );
    let xn = xg.as_tensor().narrow(dim, start, len)?;
    assert!(xn.is_contiguous());
    assert_eq!(xn.layout().start_offset(), want_offset, "the view's start");
    let got = cudnn_candle::conv2d(&xn, wg.as_tensor(), 1, 1, 1, 1)?;
    close("y", &got, &want, 1e-4)?;
    let gg = loss_through_cat(&got, &other.to_device(&dev)?, &r.to_device(&dev)?)?.backward()?;
    for (n, c, g) in [("dx", &xc, &xg), ("dw", &wc, &wg)] {
        let want = gc.get(c.as_tensor()).ok_or("no CPU gradient")?;
        let got = gg.get(g.as_tensor()).ok_or("no GPU gradient")?;
        close(n, got, want, 2e-4)?;
    }
    Ok(())
}

/// A norm of `x.narrow(0, 1, rows - 1)` in `dt` (output gradient narrowed
/// too) against the CPU formula: y, dx, dweight (, dbias).
fn narrowed_norm(rms: bool, xd: [usize; 2], bias: bool, dt: DType) -> TestResult {
    let dev = cuda()?;
    let h = xd[1];
    let eps = 1e-5f32;
    let x = (rnd(&xd, dt)? + 2.0)?.to_dtype(dt)?.to_dtype(DType::F32)?;
    let (w, b) = (rnd(&[h], dt)?, rnd(&[h], dt)?);
    let (xc, wc, bc) = (
        Var::from_tensor(&x)?,
        Var::from_tensor(&w)?,
        Var::from_tensor(&b)?,
    );
    let rows = xd[0] - 1;
    let want = norm_ref(
        rms,
        &xc.as_tensor().narrow(0, 1, rows)?,
        wc.as_tensor(),
        bias.then_some(bc.as_tensor()),
        f64::from(eps),
    )?;
    let other = rnd(&[1, h], DType::F32)?;
    let r = rnd(&[rows + 1, h], DType::F32)?;
    let gc = loss_through_cat(&want, &other, &r)?.backward()?;
    let g = |t: &Tensor| Var::from_tensor(&t.to_dtype(dt)?.to_device(&dev)?);
    let (xg, wg, bg) = (g(&x)?, g(&w)?, g(&b)?);
    let xn = xg.as_tensor().narrow(0, 1, rows)?;
    let bytes = h * dt.size_in_bytes();
    assert_eq!(xn.layout().start_offset(), h);
    assert_ne!(bytes % 16, 0, "the case must start unaligned");
    let f = if rms {
        cudnn_candle::rms_norm
    } else {
        cudnn_candle::layer_norm
    };
    let got = f(&xn, wg.as_tensor(), bias.then_some(bg.as_tensor()), eps)?;
    close("y", &got, &want, tolerance(dt))?;
    let gg = loss_through_cat(&got, &other.to_device(&dev)?, &r.to_device(&dev)?)?.backward()?;
    let mut pairs = vec![("dx", &xc, &xg), ("dweight", &wc, &wg)];
    if bias {
        pairs.push(("dbias", &bc, &bg));
    }
    for (n, c, gv) in pairs {
        let want = gc.get(c.as_tensor()).ok_or("no CPU gradient")?;
        let got = gg.get(gv.as_tensor()).ok_or("no GPU gradient")?;
        close(n, got, want, 4.0 * tolerance(dt))?;
    }
    Ok(())
}

/// x `(1, 2, 6, 6)` whose columns 0..4 are zero: with a 3x3 filter, no
/// padding and a zero bias, the outputs of columns 0 and 1 are exactly 0
/// before the ReLU (by hand: their windows read only zeros).
fn zero_patch() -> candle_core::Result<(Tensor, Tensor)> {
    let keep = Tensor::arange(0u32, 6, &Device::Cpu)?
        .ge(4u32)?
        .to_dtype(DType::F32)?
        .reshape((1, 1, 1, 6))?;
    let x = rnd(&[1, 2, 6, 6], DType::F32)?.broadcast_mul(&keep)?;
    Ok((x, rnd(&[3, 2, 3, 3], DType::F32)?))
}

/// `relu(conv(x, w) + b)` on the CPU with the gradient rule `rule`:
/// `gt` (0 at 0: PyTorch's, this crate's) as `z * (z > 0)`, whose
/// mask carries no gradient; `ge` is candle's own `relu`.
fn relu_ref(x: &Var, w: &Var, b: &Var, gt: bool) -> candle_core::Result<Tensor> {
    let z = conv_ref(
        x.as_tensor(),
        w.as_tensor(),
        Some(b.as_tensor()),
        &Conv2dParams::default(),
    )?;
    if gt {
        z.broadcast_mul(&z.gt(0f32)?.to_dtype(DType::F32)?.detach())
    } else {
        z.relu()
    }
}

/// The CPU side: the zero patch gives pre-activations of exactly 0, and
/// there the two rules give other gradients (so the GPU case tells them
/// apart).
fn zero_patch_reference_tells_the_rules_apart() -> TestResult {
    let (x, w) = zero_patch()?;
    let b = Tensor::zeros(3, DType::F32, &Device::Cpu)?;
    let (xv, wv, bv) = (
        Var::from_tensor(&x)?,
        Var::from_tensor(&w)?,
        Var::from_tensor(&b)?,
    );
    let z = conv_ref(
        xv.as_tensor(),
        wv.as_tensor(),
        Some(bv.as_tensor()),
        &Conv2dParams::default(),
    )?;
    let zeros = z
        .narrow(3, 0, 2)?
        .abs()?
        .max_keepdim(3)?
        .flatten_all()?
        .max(0)?;
    assert_eq!(
        zeros.to_scalar::<f32>()?,
        0.0,
        "columns 0 and 1 are exactly 0"
    );
    let r = rnd(z.dims(), DType::F32)?;
    let mut dbs = Vec::new();
    for gt in [true, false] {
        let y = relu_ref(&xv, &wv, &bv, gt)?;
        let g = (y * &r)?.sum_all()?.backward()?;
        dbs.push(g.get(bv.as_tensor()).ok_or("no gradient")?.clone());
    }
    let d = (&dbs[0] - &dbs[1])?.abs()?.max(0)?.to_scalar::<f32>()?;
    assert!(
        d > 1e-3,
        "the rules agree here ({d}): the case tests nothing"
    );
    Ok(())
}

/// conv2d_with(.., Relu) on the zero patch against the `gt` rule: with a
/// zero bias (fused graph) and without a bias (ReLU after the graph).
fn relu_at_zero(bias: bool) -> TestResult {
    let dev = cuda()?;
    let (x, w) = zero_patch()?;
    let b = Tensor::zeros(3, DType::F32, &Device::Cpu)?;
    let (xc, wc, bc) = (
        Var::from_tensor(&x)?,
        Var::from_tensor(&w)?,
        Var::from_tensor(&b)?,
    );
    let want = relu_ref(&xc, &wc, &bc, true)?;
    let r = rnd(want.dims(), DType::F32)?;
    let gc = (&want * &r)?.sum_all()?.backward()?;
    let g = |t: &Tensor| Var::from_tensor(&t.to_device(&dev)?);
    let (xg, wg, bg) = (g(&x)?, g(&w)?, g(&b)?);
    let p = Conv2dParams::default().activation(Activation::Relu);
    let got = cudnn_candle::conv2d_with(
        xg.as_tensor(),
        wg.as_tensor(),
        bias.then_some(bg.as_tensor()),
        &p,
    )?;
    close("y", &got, &want, 1e-4)?;
    let gg = (got * r.to_device(&dev)?)?.sum_all()?.backward()?;
    let mut pairs = vec![("dx", &xc, &xg), ("dw", &wc, &wg)];
    if bias {
        pairs.push(("dbias", &bc, &bg));
    }
    for (n, c, gv) in pairs {
        let want = gc.get(c.as_tensor()).ok_or("no CPU gradient")?;
        let got = gg.get(gv.as_tensor()).ok_or("no GPU gradient")?;
        close(n, got, want, 2e-4)?;
    }
    Ok(())
}

pub fn trials() -> Vec<Trial> {
    vec![
        unit(
            "conv_relu_zero_patch_reference_tells_the_rules_apart",
            zero_patch_reference_tells_the_rules_apart,
        ),
        // 243 f32 elements in (972 bytes): the review's case.
        gpu("conv2d_narrowed_batch_f32", || {
            narrowed_conv([2, 3, 9, 9], [3, 3, 3, 3], (0, 1, 1), 243)
        }),
        // N = 1, channels 1..4 of 5: 49 f32 elements in.
        gpu("conv2d_channel_slice_n1_f32", || {
            narrowed_conv([1, 5, 7, 7], [4, 3, 3, 3], (1, 1, 3), 49)
        }),
        gpu("layer_norm_narrowed_f16_hidden_100", || {
            narrowed_norm(false, [3, 100], true, DType::F16)
        }),
        gpu("layer_norm_narrowed_no_bias_bf16_hidden_100", || {
            narrowed_norm(false, [3, 100], false, DType::BF16)
        }),
        gpu("rms_norm_narrowed_f32_hidden_33", || {
            narrowed_norm(true, [4, 33], false, DType::F32)
        }),
        gpu("layer_norm_narrowed_f32_hidden_33", || {
            narrowed_norm(false, [4, 33], true, DType::F32)
        }),
        gpu("conv2d_relu_gradient_zero_at_zero_bias", || {
            relu_at_zero(true)
        }),
        gpu("conv2d_relu_gradient_zero_at_zero_no_bias", || {
            relu_at_zero(false)
        }),
    ]
}
