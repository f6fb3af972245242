//! GPU tier, GEMM backward and FP8: `matmul_bias_act`'s gradients against
//! candle's CPU autograd of `act(a.broadcast_matmul(b) + bias)` (an
//! independent reference) from the same rounded inputs, and `fp8_matmul`
//! against a CPU reference that quantizes with the same scales (candle's
//! CPU `F8E4M3` conversion, the `float8` crate), multiplies the decoded
//! values in f32 and adds the bias.

use candle_core::{DType, Device, Tensor, Var};
use cudnn_candle::MatmulActivation;

use super::support::{TestResult, Trial, gpu, typed};
use super::{close, cuda, tol};

fn rounded(d: &[usize], dt: DType) -> candle_core::Result<Tensor> {
    Tensor::randn(0f32, 1.0, d, &Device::Cpu)?
        .to_dtype(dt)?
        .to_dtype(DType::F32)
}

fn act_of(z: Tensor, act: MatmulActivation) -> candle_core::Result<Tensor> {
    match act {
        MatmulActivation::None => Ok(z),
        MatmulActivation::Relu => z.relu(),
        MatmulActivation::GeluTanh => z.gelu(),
    }
}

/// The gradients of `sum(act(a · b + bias) * w)` on the GPU (cuBLASLt,
/// the crate's backward) against candle's CPU autograd, f32 from the same
/// rounded inputs. `prep` makes the GPU operands (transposes, views,
/// broadcasts) from the leaf variables.
fn grad_case(
    ad: &[usize],
    bd: &[usize],
    bias: bool,
    act: MatmulActivation,
    dt: DType,
    prep: impl Fn(&Tensor, &Tensor) -> candle_core::Result<(Tensor, Tensor)>,
) -> TestResult {
    let dev = cuda()?;
    let (a, b) = (rounded(ad, dt)?, rounded(bd, dt)?);
    let n = bd[bd.len() - 1];
    let x = rounded(&[n], dt)?;
    // The CPU reference.
    let (va, vb, vx) = (
        Var::from_tensor(&a)?,
        Var::from_tensor(&b)?,
        Var::from_tensor(&x)?,
    );
    let (pa, pb) = prep(va.as_tensor(), vb.as_tensor())?;
    let mut z = pa.broadcast_matmul(&pb)?;
    if bias {
        z = z.broadcast_add(vx.as_tensor())?;
    }
    let y = act_of(z, act)?;
    let w = rounded(y.dims(), dt)?;
    let want = (&y * &w)?.sum_all()?.backward()?;
    // The GPU.
    let g = |t: &Tensor| -> candle_core::Result<Var> {
        Var::from_tensor(&t.to_dtype(dt)?.to_device(&dev)?)
    };
    let (ga, gb, gx) = (g(&a)?, g(&b)?, g(&x)?);
    let (qa, qb) = prep(ga.as_tensor(), gb.as_tensor())?;
    let yg = cudnn_candle::matmul_bias_act(&qa, &qb, bias.then_some(gx.as_tensor()), act)?;
    close("y", &yg, &y, tol_for(dt))?;
    let wg = w.to_dtype(dt)?.to_device(&dev)?;
    let got = (&yg * &wg)?.sum_all()?.backward()?;
    let need =
        |gs: &candle_core::backprop::GradStore, v: &Var, name: &str| -> Result<Tensor, String> {
            gs.get(v.as_tensor())
                .cloned()
                .ok_or_else(|| format!("no gradient for {name}"))
        };
    close(
        "dA",
        &need(&got, &ga, "a")?,
        &need(&want, &va, "a")?,
        tol_for(dt),
    )?;
    close(
        "dB",
        &need(&got, &gb, "b")?,
        &need(&want, &vb, "b")?,
        tol_for(dt),
    )?;
    if bias {
        close(
            "dbias",
            &need(&got, &gx, "bias")?,
            &need(&want, &vx, "bias")?,
            tol_for(dt),
        )?;
    }
    Ok(())
}

/// The tolerance of a gradient, relative to its max |reference| (`close`
/// normalises by it). f32: cuBLASLt's sum order only (TF32 is never on).
/// 16-bit types: the op rounds dZ to the dtype once (at most u·|dZ| per
/// term, u = 2^-8 bf16, 2^-11 f16; GELU's Z recomputed in the dtype adds
/// at most about u/2·|dY| per term through gelu'), accumulates in f32 and
/// rounds the result once (u·max|ref|); a sum of `terms` products with
/// errors of u·|term| stays below a few u·max|ref| when its terms do not
/// all cancel, so no growth with the number of terms is allowed: `tol`
/// is 6.4·u in bf16 (2.5e-2) and 8·u in f16 (4e-3).
fn tol_for(dt: DType) -> f64 {
    if dt == DType::F32 { 1e-4 } else { tol(dt) }
}

/// `fp8_matmul` against the CPU: `x` `(.., m, k)` and `w` `(n, k)` (or
/// batched `(batch, n, k)`) quantized with per-tensor scales (amax / 448,
/// E4M3's largest finite value) by candle's CPU F8E4M3 conversion, the
/// reference multiplying the decoded values times the scales in f32.
fn fp8_case(
    xd: &[usize],
    wd: &[usize],
    bias: bool,
    act: MatmulActivation,
    out: DType,
) -> TestResult {
    let plain = |x: &Tensor, w: &Tensor| Ok((x.clone(), w.t()?));
    fp8_view_case(xd, wd, bias.then_some(0), act, out, plain)
}

/// As [`fp8_case`] with the operands `(a, b)` made by `view` from the
/// quantized buffers `x` and `w`: layout-only views (narrow, t,
/// broadcast_as, reshape of a contiguous view), applied alike to the
/// GPU's F8E4M3 tensors and to the CPU's decoded f32 ones. `bias`: the
/// bias's start offset in its buffer (elements), if there is a bias.
fn fp8_view_case(
    xd: &[usize],
    wd: &[usize],
    bias: Option<usize>,
    act: MatmulActivation,
    out: DType,
    view: impl Fn(&Tensor, &Tensor) -> candle_core::Result<(Tensor, Tensor)>,
) -> TestResult {
    let dev = cuda()?;
    let (x, w) = (rounded(xd, DType::F32)?, rounded(wd, DType::F32)?);
    let amax = |t: &Tensor| -> candle_core::Result<f32> {
        t.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()
    };
    let (sx, sw) = (amax(&x)? / 448.0, amax(&w)? / 448.0);
    let q = |t: &Tensor, s: f32| -> candle_core::Result<Tensor> {
        (t / f64::from(s))?.to_dtype(DType::F8E4M3)
    };
    let (x8, w8) = (q(&x, sx)?, q(&w, sw)?);
    let deq = |t: &Tensor, s: f32| -> candle_core::Result<Tensor> {
        t.to_dtype(DType::F32)? * f64::from(s)
    };
    let (a_cpu, b_cpu) = view(&deq(&x8, sx)?, &deq(&w8, sw)?)?;
    let n = b_cpu.dim(b_cpu.rank() - 1)?;
    let bias_dt = if out == DType::F16 {
        DType::F16
    } else {
        DType::BF16
    };
    let pad = bias.unwrap_or(0);
    let xb_buf = rounded(&[pad + n], bias_dt)?;
    let xb = xb_buf.narrow(0, pad, n)?;
    let mut want = a_cpu.broadcast_matmul(&b_cpu)?;
    if bias.is_some() {
        want = want.broadcast_add(&xb)?;
    }
    let want = act_of(want, act)?;
    let (ag, bg) = view(&x8.to_device(&dev)?, &w8.to_device(&dev)?)?;
    let (sxg, swg) = (Tensor::new(sx, &dev)?, Tensor::new(sw, &dev)?);
    let xbg = xb_buf
        .to_dtype(bias_dt)?
        .to_device(&dev)?
        .narrow(0, pad, n)?;
    let got = cudnn_candle::fp8_matmul(&ag, &bg, &sxg, &swg, bias.map(|_| &xbg), act, out)?;
    assert_eq!(got.dtype(), out);
    let t = fp8_tolerance(&a_cpu, &b_cpu, &want, act, out)?;
    close("fp8 d", &got, &want, t)
}

/// Unit roundoff of Hopper's FP8 tensor-core accumulation: the partial
/// sums keep about 14 significant bits (DeepSeek-V3's technical report,
/// section 3.3.2, measured on H800: "around 14 bits"; PyTorch's write-up
/// of the H100's FP8 path describes an e8m13 accumulator that truncates),
/// even with cuBLASLt's fast accumulation off, between promotions to f32.
/// Truncation to 13 stored mantissa bits errs by up to 2^-13 of the
/// partial sum per addition: the conservative end of 2^-13..2^-14. The
/// first GPU run (H100, cuBLAS 13.1) measured 2.6e-4 of max |D| at k = 128
/// with an f32 output, far above f32 accumulation's k·2^-24 = 7.6e-6; a
/// CPU emulation of a sequential 13-bit truncating sum of the same kind
/// of inputs gives about 2.8e-3, the bound below about 3.9e-2.
const FP8_ACC_U: f64 = 1.0 / 8192.0; // 2^-13

/// The bound on `max |got - want| / max |want|` for an FP8 GEMM against
/// the CPU's f32 product of the same decoded FP8 values (the inputs and
/// their products are exact, so only the sums and the output round):
/// accumulation of `k` terms in precision `u`, elementwise at most `(k -
/// 1)·u·Σ|a_il|·|b_lj|` (the classic recursive-summation bound, Higham,
/// "Accuracy and Stability of Numerical Algorithms", 3.1), times GELU's
/// largest slope (about 1.13; ReLU's 1) through the epilogue, plus the
/// output's rounding: 2·2^-24 in f32 (the scale multiplication and the
/// store), `tol(out)` in 16 bits (its own model, see `tol_for`). The
/// worst case of the accumulation term is taken from the data, so the
/// bound holds whatever the inputs; random inputs land far below it.
fn fp8_tolerance(
    a: &Tensor,
    b: &Tensor,
    want: &Tensor,
    act: MatmulActivation,
    out: DType,
) -> candle_core::Result<f64> {
    let k = a.dim(a.rank() - 1)?;
    let max = |t: &Tensor| -> candle_core::Result<f64> {
        Ok(f64::from(
            t.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()?,
        ))
    };
    let abs_sum = max(&a.abs()?.broadcast_matmul(&b.abs()?)?)?;
    // `close` divides by max |want| clamped below at 1e-3.
    let scale = max(want)?.max(1e-3);
    let slope = if act == MatmulActivation::GeluTanh {
        1.13
    } else {
        1.0
    };
    let acc = (k.saturating_sub(1) as f64) * FP8_ACC_U * slope * abs_sum / scale;
    // f32: two roundings of u = 2^-24 each, f32::EPSILON = 2^-23 in all.
    let rounding = if out == DType::F32 {
        f64::from(f32::EPSILON)
    } else {
        tol(out)
    };
    eprintln!(
        "  fp8 bound: k {k}, accumulation {acc:.3e} (u = 2^-13), output rounding {rounding:.1e}"
    );
    Ok(acc + rounding)
}

/// `t`'s start offset in elements (bytes for the GPU's F8E4M3 operands;
/// the same views of the CPU's f32 copies have the same element offsets).
fn offset(t: &Tensor) -> usize {
    t.layout().start_offset()
}

pub fn trials() -> Vec<Trial> {
    let id = |a: &Tensor, b: &Tensor| Ok((a.clone(), b.clone()));
    vec![
        gpu("matmul_grad_bias_relu_f32", move || {
            grad_case(
                &[33, 70],
                &[70, 19],
                true,
                MatmulActivation::Relu,
                DType::F32,
                id,
            )
        }),
        gpu("matmul_grad_bias_gelu_f32_linear", move || {
            // (batch, seq, in) x (in, out): the one-GEMM path, dB one GEMM.
            grad_case(
                &[2, 5, 40, 64],
                &[64, 48],
                true,
                MatmulActivation::GeluTanh,
                DType::F32,
                id,
            )
        }),
        gpu("matmul_grad_bias_gelu_bf16_batched", move || {
            grad_case(
                &[3, 64, 128],
                &[3, 128, 96],
                true,
                MatmulActivation::GeluTanh,
                DType::BF16,
                id,
            )
        }),
        gpu("matmul_grad_broadcast_a_transposed_b_f32", || {
            // a (16, 32) broadcast over b's batch of 3: dA summed by
            // candle's broadcast_as backward; b a t() view.
            grad_case(
                &[16, 32],
                &[3, 32, 24],
                false,
                MatmulActivation::None,
                DType::F32,
                |a, b| Ok((a.clone(), b.transpose(1, 2)?.contiguous()?.transpose(1, 2)?)),
            )
        }),
        gpu("matmul_grad_relu_f16_views", || {
            grad_case(
                &[9, 16],
                &[16, 10],
                true,
                MatmulActivation::Relu,
                DType::F16,
                |a, b| {
                    let pa = Tensor::cat(&[&a.narrow(0, 0, 1)?, a], 0)?.narrow(0, 1, 9)?;
                    let pb = Tensor::cat(&[b, b], 1)?.narrow(1, 3, 10)?;
                    Ok((pa, pb))
                },
            )
        }),
        gpu("matmul_grad_transposed_a_bias_relu_f32", || {
            // a = a₀.t(): a column-major (m, k) operand.
            grad_case(
                &[40, 24],
                &[40, 16],
                true,
                MatmulActivation::Relu,
                DType::F32,
                |a, b| Ok((a.t()?, b.clone())),
            )
        }),
        gpu("matmul_grad_transposed_a_gelu_bf16", || {
            grad_case(
                &[64, 32],
                &[64, 48],
                true,
                MatmulActivation::GeluTanh,
                DType::BF16,
                |a, b| Ok((a.t()?, b.clone())),
            )
        }),
        gpu("matmul_grad_3d_transposed_a_2d_b_f32", || {
            // A non-contiguous 3-d a times a 2-d b: no one-GEMM fold, b
            // broadcast over the batch (batch stride 0), its dB the sum of
            // the per-batch gradients by candle's broadcast_as backward.
            grad_case(
                &[3, 32, 12],
                &[32, 16],
                true,
                MatmulActivation::GeluTanh,
                DType::F32,
                |a, b| {
                    let a = a.transpose(1, 2)?;
                    assert!(!a.is_contiguous());
                    Ok((a, b.clone()))
                },
            )
        }),
        gpu("matmul_grad_3d_narrowed_a_2d_b_bf16", || {
            // a narrowed on k from (3, 10, 48): row stride 48, 8 in.
            grad_case(
                &[3, 10, 48],
                &[32, 16],
                false,
                MatmulActivation::None,
                DType::BF16,
                |a, b| Ok((a.narrow(2, 8, 32)?, b.clone())),
            )
        }),
        gpu("matmul_grad_relu_zero_at_zero", || {
            // Z = [[0, 0], [3, 1]] exactly: dZ = [[0, 0], [1, 1]] (ReLU's
            // gradient 0 at 0), dA = dZ·Bᵀ, dB = Aᵀ·dZ by hand.
            let dev = cuda()?;
            let a = Var::from_tensor(&Tensor::new(&[[0f32, 0.0], [1.0, 2.0]], &dev)?)?;
            let b = Var::from_tensor(&Tensor::new(&[[1f32, -1.0], [1.0, 1.0]], &dev)?)?;
            let y = cudnn_candle::matmul_bias_act(
                a.as_tensor(),
                b.as_tensor(),
                None,
                MatmulActivation::Relu,
            )?;
            let gs = y.sum_all()?.backward()?;
            let get = |v: &Var| gs.get(v.as_tensor()).cloned().ok_or("no gradient");
            assert_eq!(
                get(&a)?.to_vec2::<f32>()?,
                vec![vec![0.0, 0.0], vec![0.0, 2.0]]
            );
            assert_eq!(
                get(&b)?.to_vec2::<f32>()?,
                vec![vec![1.0, 1.0], vec![2.0, 2.0]]
            );
            Ok(())
        }),
        gpu("matmul_grad_only_where_it_flows", || {
            // Data a plain tensor, the weight and bias variables: no dA
            // (its GEMM skipped), dB and dbias as candle's CPU autograd.
            let dev = cuda()?;
            let (a, b, x) = (
                rounded(&[12, 20], DType::F32)?,
                rounded(&[20, 8], DType::F32)?,
                rounded(&[8], DType::F32)?,
            );
            let (vb, vx) = (Var::from_tensor(&b)?, Var::from_tensor(&x)?);
            let y = a
                .matmul(vb.as_tensor())?
                .broadcast_add(vx.as_tensor())?
                .gelu()?;
            let want = y.sum_all()?.backward()?;
            let ag = a.to_device(&dev)?;
            let (gb, gx) = (
                Var::from_tensor(&b.to_device(&dev)?)?,
                Var::from_tensor(&x.to_device(&dev)?)?,
            );
            let yg = cudnn_candle::matmul_bias_act(
                &ag,
                gb.as_tensor(),
                Some(gx.as_tensor()),
                MatmulActivation::GeluTanh,
            )?;
            let got = yg.sum_all()?.backward()?;
            assert!(got.get(&ag).is_none(), "no gradient for a plain tensor");
            let pick = |gs: &candle_core::backprop::GradStore, t: &Tensor| {
                gs.get(t).cloned().ok_or("no gradient")
            };
            close(
                "dB",
                &pick(&got, gb.as_tensor())?,
                &pick(&want, vb.as_tensor())?,
                1e-4,
            )?;
            close(
                "dbias",
                &pick(&got, gx.as_tensor())?,
                &pick(&want, vx.as_tensor())?,
                1e-4,
            )
        }),
        gpu("fp8_matmul_bf16_out", || {
            fp8_case(
                &[32, 64],
                &[48, 64],
                false,
                MatmulActivation::None,
                DType::BF16,
            )
        }),
        gpu("fp8_matmul_f32_out_relu", || {
            // An f32 output takes no bias (refused: the next case).
            fp8_case(
                &[64, 128],
                &[32, 128],
                false,
                MatmulActivation::Relu,
                DType::F32,
            )
        }),
        gpu("fp8_matmul_f32_out_with_bias_refused", || {
            // PyTorch's _scaled_mm rule: refused, typed, naming bias,
            // before anything runs (NVIDIA's table's bf16 bias included).
            let dev = cuda()?;
            // Made on the CPU and copied: candle 0.11.1's CUDA backend has
            // no cast to or from F8E4M3 (it asks for `cast_f32_f8e4m3`, its
            // kernels are named `cast_f32_f8_e4m3`: CUDA_ERROR_NOT_FOUND in
            // the first GPU run).
            let f8 = |d: &[usize]| -> candle_core::Result<Tensor> {
                Tensor::zeros(d, DType::F32, &Device::Cpu)?
                    .to_dtype(DType::F8E4M3)?
                    .to_device(&dev)
            };
            let (x, w) = (f8(&[32, 64])?, f8(&[48, 64])?);
            let one = Tensor::new(1f32, &dev)?;
            let xb = Tensor::zeros(48, DType::BF16, &dev)?;
            let e = cudnn_candle::fp8_matmul(
                &x,
                &w.t()?,
                &one,
                &one,
                Some(&xb),
                MatmulActivation::Relu,
                DType::F32,
            )
            .map(|_| ())
            .unwrap_err();
            match typed(&e) {
                Some(cudnn::Error::InvalidArgument { arg, .. }) if arg == "bias" => Ok(()),
                _ => Err(format!("not refused naming bias: {e}").into()),
            }
        }),
        gpu("fp8_matmul_offset_views", || {
            // a starts 16 bytes into its buffer, w.t() 64 bytes, the bias
            // 8 bf16 = 16 bytes: all on cuBLASLt's 16-byte alignment.
            fp8_view_case(
                &[33, 64],
                &[49, 64],
                Some(8),
                MatmulActivation::None,
                DType::BF16,
                |x, w| {
                    let a = x.flatten_all()?.narrow(0, 16, 32 * 64)?.reshape((32, 64))?;
                    let b = w.narrow(0, 1, 48)?.t()?;
                    assert_eq!((offset(&a), offset(&b)), (16, 64));
                    Ok((a, b))
                },
            )
        }),
        gpu("fp8_matmul_broadcast_weight", || {
            // A 3-d b broadcast from one (n, k) weight: batch stride 0
            // (no fold: b is 3-d).
            fp8_view_case(
                &[2, 16, 32],
                &[16, 32],
                Some(0),
                MatmulActivation::GeluTanh,
                DType::F16,
                |x, w| {
                    let b = w.t()?.broadcast_as((2, 32, 16))?;
                    assert_eq!(b.stride()[0], 0);
                    Ok((x.clone(), b))
                },
            )
        }),
        gpu("fp8_matmul_narrowed_padded_a", || {
            // a narrowed from (24, 96): row stride 96 bytes, 16 bytes in.
            fp8_view_case(
                &[24, 96],
                &[32, 64],
                Some(0),
                MatmulActivation::Relu,
                DType::BF16,
                |x, w| {
                    let a = x.narrow(1, 16, 64)?;
                    assert_eq!((a.stride()[0], offset(&a)), (96, 16));
                    Ok((a, w.t()?))
                },
            )
        }),
        gpu("fp8_matmul_3d_padded_a_2d_weight", || {
            // A non-contiguous 3-d a times a 2-d w.t(): no fold, w
            // broadcast over the batch (batch stride 0).
            fp8_view_case(
                &[2, 16, 48],
                &[16, 32],
                None,
                MatmulActivation::None,
                DType::F32,
                |x, w| {
                    let a = x.narrow(2, 0, 32)?;
                    assert!(!a.is_contiguous());
                    Ok((a, w.t()?))
                },
            )
        }),
        gpu("fp8_matmul_f16_out_bias_gelu", || {
            fp8_case(
                &[16, 64],
                &[64, 64],
                true,
                MatmulActivation::GeluTanh,
                DType::F16,
            )
        }),
        gpu("fp8_matmul_linear_3d", || {
            // (batch, seq, in) x w.t(): one (batch·seq, in) GEMM.
            fp8_case(
                &[2, 7, 32],
                &[16, 32],
                true,
                MatmulActivation::None,
                DType::BF16,
            )
        }),
        gpu("fp8_matmul_batched_weights", || {
            // (3, 16, 32) x (3, 32, 16): a strided batch of w.t() views.
            fp8_case(
                &[3, 16, 32],
                &[3, 16, 32],
                false,
                MatmulActivation::None,
                DType::F32,
            )
        }),
    ]
}
