//! Host tier of the GEMMs: the specs `matmul_bias_act`'s backward and
//! `fp8_matmul` run are accepted by cuBLASLt's own descriptor calls (the
//! real library, no device: its heuristic, which picks the kernel, needs
//! one, so whether an algorithm exists is a GPU-tier question), and
//! `fp8_matmul` refuses bad calls on the host, typed, naming the argument,
//! before any device is touched.

use candle_core::{DType as CDType, Device, Tensor};
use cudnn::blas::{Fp8Descriptors, Fp8Types, MatmulDescriptors};
use cudnn::{Error, Fp8Format};
use cudnn_candle::MatmulActivation;
use cudnn_candle::params::{Arg, fp8, gemm};

use crate::support::{TestResult, Trial, host, typed, unit};

fn contiguous(d: &[usize]) -> Vec<usize> {
    let mut s = vec![1; d.len()];
    for i in (0..d.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * d[i + 1];
    }
    s
}

fn arg<'x>(name: &'x str, dims: &'x [usize], strides: &'x [usize], dtype: CDType) -> Arg<'x> {
    Arg {
        name,
        dims,
        strides,
        dtype,
    }
}

/// The three GEMMs of a call and its backward, as candle hands them:
/// forward `a · b (+ bias)`, `dA = dZ · b.t()`, `dB = a.t() · dZ` (the
/// transposed views' strides, nothing copied), for `a` `(batch.., m, k)`
/// and `b` `(batch.., k, n)` contiguous; each spec's descriptors built by
/// cuBLASLt.
fn backward_specs(ad: &[usize], bd: &[usize], dt: CDType) -> TestResult {
    let r = ad.len();
    let (m, k, n) = (ad[r - 2], ad[r - 1], bd[r - 1]);
    let mut zd = ad[..r - 2].to_vec();
    zd.extend([m, n]);
    let (sa, sb, sz) = (contiguous(ad), contiguous(bd), contiguous(&zd));
    // t() swaps the last two dims and strides.
    let tr = |d: &[usize], s: &[usize]| {
        let (mut d, mut s) = (d.to_vec(), s.to_vec());
        d.swap(r - 2, r - 1);
        s.swap(r - 2, r - 1);
        (d, s)
    };
    let (bt, sbt) = tr(bd, &sb);
    let (at, sat) = (tr(ad, &sa).0, tr(ad, &sa).1);
    let bias = [n];
    let cases = [
        (
            "forward",
            gemm::gemm(
                &arg("a", ad, &sa, dt),
                &arg("b", bd, &sb, dt),
                Some(&arg("bias", &bias, &[1], dt)),
                MatmulActivation::GeluTanh,
            )?,
            [m, n],
        ),
        (
            "dA",
            gemm::gemm(
                &arg("a", &zd, &sz, dt),
                &arg("b", &bt, &sbt, dt),
                None,
                MatmulActivation::None,
            )?,
            [m, k],
        ),
        (
            "dB",
            gemm::gemm(
                &arg("a", &at, &sat, dt),
                &arg("b", &zd, &sz, dt),
                None,
                MatmulActivation::None,
            )?,
            [k, n],
        ),
    ];
    for (what, g, mn) in cases {
        assert_eq!(&g.out_dims[r - 2..], mn, "{what} dims");
        let ws = 32 << 20;
        let d = match dt {
            CDType::F16 => MatmulDescriptors::new::<half::f16, half::f16>(&g.spec, ws),
            CDType::BF16 => MatmulDescriptors::new::<half::bf16, half::bf16>(&g.spec, ws),
            _ => MatmulDescriptors::new::<f32, f32>(&g.spec, ws),
        };
        let d = d.map_err(|e| format!("{what}: {e}"))?;
        let (dm, dn, dk) = d.shape().dims();
        // Row-major D: the library computes Dᵀ, so its (m, n) are (n, m).
        assert_eq!(
            (dm * dn, dk),
            (
                mn[0] * mn[1],
                if what == "dB" {
                    m
                } else if what == "dA" {
                    n
                } else {
                    k
                }
            ),
            "{what}"
        );
    }
    Ok(())
}

/// An FP8 linear layer's spec (`a` `(m, k)`, `b = w.t()`) built by
/// cuBLASLt's descriptor calls, with the bias type of NVIDIA's table read
/// back (f16 / bf16 outputs; an f32 output takes no bias, so its spec is
/// built without one).
///
/// What this shows, and what not: cuBLASLt does not validate a type
/// combination when an attribute is set (only its heuristic, on a GPU,
/// does), so reading the bias type back shows the crate set what NVIDIA's
/// table says, not that cuBLASLt accepts the combination. That is the GPU
/// tier's (`fp8_matmul_*` in the GPU tests).
fn fp8_descriptors(m: usize, k: usize, n: usize, out: CDType) -> TestResult {
    let (ad, bd, xd) = ([m, k], [k, n], [n]);
    let (sa, sb) = (contiguous(&ad), [1, k]);
    let bias_dt = fp8::bias_dtype(out);
    let bias = (out != CDType::F32).then(|| arg("bias", &xd, &[1], bias_dt));
    let g = fp8::fp8_gemm(
        &arg("a", &ad, &sa, CDType::F8E4M3),
        &arg("b", &bd, &sb, CDType::F8E4M3),
        bias.as_ref(),
        MatmulActivation::Relu,
        out,
    )?;
    let types = Fp8Types {
        a: Fp8Format::E4M3,
        b: Fp8Format::E4M3,
        d: g.out,
        bias: None,
    };
    let d = Fp8Descriptors::new(&g.spec, types, 32 << 20)?;
    if bias.is_some() {
        let want = if out == CDType::F16 {
            cudnn::sys::cudart::cudaDataType_t::CUDA_R_16F
        } else {
            cudnn::sys::cudart::cudaDataType_t::CUDA_R_16BF
        };
        assert_eq!(d.bias_type()?, want, "bias type for {out:?}");
    }
    Ok(())
}

fn arg_named(e: &candle_core::Error) -> String {
    match typed(e) {
        Some(Error::InvalidArgument { arg, .. }) => arg.clone(),
        Some(Error::Mismatch { what, .. }) => what.clone(),
        other => format!("{other:?} ({e})"),
    }
}

/// `fp8_matmul` on CPU tensors: every bad argument refused, typed and
/// named, by the checks that run before any device is touched.
fn fp8_refusals() -> TestResult {
    let cpu = Device::Cpu;
    let f8 = |d: &[usize]| -> candle_core::Result<Tensor> {
        Tensor::zeros(d, CDType::F32, &cpu)?.to_dtype(CDType::F8E4M3)
    };
    let (x, w) = (f8(&[32, 64])?, f8(&[48, 64])?);
    let one = Tensor::new(1f32, &cpu)?;
    let call = |a: &Tensor, b: &Tensor, sa: &Tensor, bias: Option<&Tensor>, out: CDType| {
        cudnn_candle::fp8_matmul(a, b, sa, &one, bias, MatmulActivation::None, out)
            .map(|_| ())
            .map_err(|e| arg_named(&e))
    };
    let bt = w.t()?;
    // b contiguous (k, n): k not contiguous.
    let b_rowmajor = bt.contiguous()?;
    assert_eq!(
        call(&x, &b_rowmajor, &one, None, CDType::BF16),
        Err("b".into())
    );
    // k = 40: not in 16s.
    let (x40, w40) = (f8(&[32, 40])?, f8(&[48, 40])?);
    assert_eq!(
        call(&x40, &w40.t()?, &one, None, CDType::BF16),
        Err("k".into())
    );
    // n = 24.
    let w24 = f8(&[24, 64])?;
    assert_eq!(
        call(&x, &w24.t()?, &one, None, CDType::BF16),
        Err("n".into())
    );
    assert_eq!(
        call(&x, &bt, &one, None, CDType::F64),
        Err("out_dtype".into())
    );
    let two = Tensor::new(&[1f32, 2.0], &cpu)?;
    assert_eq!(
        call(&x, &bt, &two, None, CDType::BF16),
        Err("scale_a".into())
    );
    let xb = Tensor::zeros(48, CDType::F16, &cpu)?;
    let e = call(&x, &bt, &one, Some(&xb), CDType::BF16).unwrap_err();
    assert!(e.starts_with("bias dtype"), "{e}");
    // An f32 output with a bias, even NVIDIA's table's bf16 one: refused
    // (PyTorch's _scaled_mm rule), naming bias; without one it reaches
    // the CPU refusal (every check passed).
    let xbf = Tensor::zeros(48, CDType::BF16, &cpu)?;
    assert_eq!(
        call(&x, &bt, &one, Some(&xbf), CDType::F32),
        Err("bias".into())
    );
    let e = cudnn_candle::fp8_matmul(
        &x,
        &bt,
        &one,
        &one,
        None,
        MatmulActivation::Relu,
        CDType::F32,
    )
    .map(|_| ())
    .unwrap_err();
    assert!(matches!(typed(&e), Some(Error::Unsupported { .. })), "{e}");
    // Not FP8.
    let xf = Tensor::zeros((32, 64), CDType::BF16, &cpu)?;
    assert_eq!(
        call(&xf, &bt, &one, None, CDType::BF16),
        Err("a dtype".into())
    );
    // A view 8 bytes into its buffer.
    let big = f8(&[33, 64])?;
    let shifted = big
        .flatten_all()?
        .narrow(0, 8, 32 * 64)?
        .reshape((32, 64))?;
    assert_eq!(
        call(&shifted, &bt, &one, None, CDType::BF16),
        Err("a start offset".into())
    );
    // A valid call on the CPU: refused as not on a CUDA device, typed.
    match cudnn_candle::fp8_matmul(
        &x,
        &bt,
        &one,
        &one,
        None,
        MatmulActivation::None,
        CDType::BF16,
    ) {
        Err(e) => assert!(matches!(typed(&e), Some(Error::Unsupported { .. })), "{e}"),
        Ok(_) => return Err("an FP8 matmul ran on the CPU".into()),
    }
    Ok(())
}

/// An argument that tracks a gradient (a `Var`, or an op's result on
/// one) is refused, typed, naming it: `fp8_matmul` has no backward, and
/// candle's rule for an op without one is an error (`CustomOp2::bwd`'s
/// default, `BackwardNotSupported`), never a gradient silently missing.
/// On the CPU: the check runs before any device is touched. The same
/// call detached passes every check (refused only as not on CUDA).
fn fp8_tracked() -> TestResult {
    let cpu = Device::Cpu;
    let f8 = |d: &[usize]| -> candle_core::Result<Tensor> {
        Tensor::zeros(d, CDType::F32, &cpu)?.to_dtype(CDType::F8E4M3)
    };
    let (x, w) = (f8(&[32, 64])?, f8(&[48, 64])?);
    let x3 = f8(&[2, 16, 64])?;
    let (one, bias) = (
        Tensor::new(1f32, &cpu)?,
        Tensor::zeros(48, CDType::BF16, &cpu)?,
    );
    let var = |t: &Tensor| -> candle_core::Result<Tensor> {
        Ok(candle_core::Var::from_tensor(t)?.as_tensor().clone())
    };
    let call = |a: &Tensor, b: &Tensor, sa: &Tensor, sb: &Tensor, x: &Tensor| {
        cudnn_candle::fp8_matmul(a, b, sa, sb, Some(x), MatmulActivation::None, CDType::BF16)
            .map(|_| ())
            .map_err(|e| arg_named(&e))
    };
    let bt = w.t()?;
    // A Var weight's t() view tracks a gradient through the view.
    let vbt = var(&w)?.t()?;
    assert!(vbt.track_op());
    assert_eq!(call(&var(&x)?, &bt, &one, &one, &bias), Err("a".into()));
    assert_eq!(call(&x, &vbt, &one, &one, &bias), Err("b".into()));
    assert_eq!(
        call(&x, &bt, &var(&one)?, &one, &bias),
        Err("scale_a".into())
    );
    assert_eq!(
        call(&x, &bt, &one, &var(&one)?, &bias),
        Err("scale_b".into())
    );
    assert_eq!(call(&x, &bt, &one, &one, &var(&bias)?), Err("bias".into()));
    // The 3-d a folded into rows: checked before the fold.
    assert_eq!(call(&var(&x3)?, &bt, &one, &one, &bias), Err("a".into()));
    // Detached, the same call passes every check.
    let e = cudnn_candle::fp8_matmul(
        &var(&x)?.detach(),
        &vbt.detach(),
        &var(&one)?.detach(),
        &one,
        Some(&var(&bias)?.detach()),
        MatmulActivation::None,
        CDType::BF16,
    )
    .map(|_| ())
    .unwrap_err();
    assert!(matches!(typed(&e), Some(Error::Unsupported { .. })), "{e}");
    Ok(())
}

/// A zero dim (dims of 0 are inputs too), also on the path that folds a
/// 3-d `a` into rows: refused, typed, naming `a shape`.
fn zero_dims() -> TestResult {
    let cpu = Device::Cpu;
    let a = Tensor::zeros((2, 0, 16), CDType::F32, &cpu)?;
    let b = Tensor::zeros((16, 16), CDType::F32, &cpu)?;
    let e = cudnn_candle::matmul_bias_act(&a, &b, None, MatmulActivation::None)
        .map(|_| ())
        .map_err(|e| arg_named(&e));
    assert_eq!(e, Err("a shape".to_string()));
    // k = 0: no rows can be inferred from a fold.
    let ak = Tensor::zeros((2, 3, 0), CDType::F32, &cpu)?;
    let bk = Tensor::zeros((0, 16), CDType::F32, &cpu)?;
    let e = cudnn_candle::matmul_bias_act(&ak, &bk, None, MatmulActivation::None)
        .map(|_| ())
        .map_err(|e| arg_named(&e));
    assert_eq!(e, Err("a shape".to_string()));
    let (a8, b8) = (a.to_dtype(CDType::F8E4M3)?, b.to_dtype(CDType::F8E4M3)?);
    let one = Tensor::new(1f32, &cpu)?;
    let e = cudnn_candle::fp8_matmul(
        &a8,
        &b8.t()?,
        &one,
        &one,
        None,
        MatmulActivation::None,
        CDType::BF16,
    )
    .map(|_| ())
    .map_err(|e| arg_named(&e));
    assert_eq!(e, Err("a shape".to_string()));
    Ok(())
}

/// `matmul_bias_act` refuses a type it does not take before it copies a
/// strided operand: an `F8E4M3` `a` whose broadcast batch no layout
/// expresses went to candle's `contiguous()` first, which on a CUDA device
/// fails untyped (candle 0.11.1 has no `ucopy_f8e4m3` kernel) and on the
/// CPU copied and then reported "not on a CUDA device"; now `a dtype`,
/// typed. Likewise a `b` or bias of another type than `a`'s.
fn gemm_dtype_before_copy() -> TestResult {
    let cpu = Device::Cpu;
    let a = Tensor::zeros((2, 1, 4, 16), CDType::F32, &cpu)?
        .to_dtype(CDType::F8E4M3)?
        .broadcast_as((2, 3, 4, 16))?;
    assert_eq!(a.stride(), &[64, 0, 16, 1]);
    let b = Tensor::zeros((2, 3, 16, 8), CDType::F8E4M3, &cpu)?;
    let name = |a: &Tensor, b: &Tensor, x: Option<&Tensor>| {
        cudnn_candle::matmul_bias_act(a, b, x, MatmulActivation::None)
            .map(|_| ())
            .map_err(|e| arg_named(&e))
    };
    assert_eq!(name(&a, &b, None), Err("a dtype".to_string()));
    let af = a.to_dtype(CDType::F32)?;
    assert_eq!(name(&af, &b, None), Err("b dtype (a's)".to_string()));
    let bf = b.to_dtype(CDType::F32)?;
    let x = Tensor::zeros(8, CDType::BF16, &cpu)?;
    assert_eq!(
        name(&af, &bf, Some(&x)),
        Err("bias dtype (a's)".to_string())
    );
    Ok(())
}

pub fn trials() -> Vec<Trial> {
    let mut t = vec![
        unit("gemm_dtype_refused_before_any_copy", gemm_dtype_before_copy),
        unit("fp8_matmul_refusals_on_the_host_are_typed", fp8_refusals),
        unit("gemm_zero_dims_refused_typed", zero_dims),
        unit("fp8_matmul_refuses_tracked_arguments", fp8_tracked),
    ];
    for dt in [CDType::F32, CDType::F16, CDType::BF16] {
        t.push(host(
            &format!("matmul_backward_specs_build_descriptors_{dt:?}"),
            move || {
                backward_specs(&[33, 70], &[70, 19], dt)?;
                backward_specs(&[3, 64, 128], &[3, 128, 96], dt)
            },
        ));
        t.push(host(
            &format!("fp8_specs_build_descriptors_{dt:?}"),
            move || {
                fp8_descriptors(32, 64, 48, dt)?;
                fp8_descriptors(7, 128, 16, dt)
            },
        ));
    }
    t
}
