//! GPU tier, GEMM: `matmul_bias_act` against candle's CPU matmul, bias
//! and activations (an independent reference), from the same rounded inputs.

use candle_core::{DType, Device, Tensor};

use super::support::{TestResult, Trial, gpu};
use super::{close, cuda, tol};

/// `act(a · b + bias)` through cuBLASLt against candle's CPU
/// `broadcast_matmul`, `broadcast_add`, `relu` / `gelu` (tanh form) in f32
/// from the same rounded inputs. `prep` makes the GPU operands (transposes,
/// views) from the CPU ones.
fn gemm_case(
    ad: &[usize],
    bd: &[usize],
    bias: bool,
    act: cudnn_candle::MatmulActivation,
    dt: DType,
    prep: impl Fn(&Tensor, &Tensor) -> candle_core::Result<(Tensor, Tensor)>,
) -> TestResult {
    let dev = cuda()?;
    let r = |d: &[usize]| -> candle_core::Result<Tensor> {
        Tensor::randn(0f32, 1.0, d, &Device::Cpu)?
            .to_dtype(dt)?
            .to_dtype(DType::F32)
    };
    let (a, b) = (r(ad)?, r(bd)?);
    let n = bd[bd.len() - 1];
    let x = r(&[n])?;
    // The reference multiplies the same views of the CPU copies: a view
    // that does not reproduce its operand (the first GPU run's
    // `matmul_offset_views_unaligned` rotated b's columns) still compares
    // like with like.
    let (ac, bc) = prep(&a, &b)?;
    let mut want = ac.broadcast_matmul(&bc)?;
    if bias {
        want = want.broadcast_add(&x)?;
    }
    want = match act {
        cudnn_candle::MatmulActivation::None => want,
        cudnn_candle::MatmulActivation::Relu => want.relu()?,
        cudnn_candle::MatmulActivation::GeluTanh => want.gelu()?,
    };
    let g = |t: &Tensor| t.to_dtype(dt)?.to_device(&dev);
    let (ag, bg) = prep(&g(&a)?, &g(&b)?)?;
    let xg = g(&x)?;
    let got = cudnn_candle::matmul_bias_act(&ag, &bg, bias.then_some(&xg), act)?;
    // cuBLASLt accumulates in f32 and rounds the result once; `close`
    // divides by max |want|, so the bound does not grow with k (the
    // review of the backward's tolerances, applied here too).
    let t = if dt == DType::F32 { 1e-4 } else { tol(dt) };
    close("d", &got, &want, t)
}

pub fn trials() -> Vec<Trial> {
    vec![
        gpu("matmul_plan_cache_stays_bounded", || {
            // Every prompt length is a key: more distinct m than the
            // capacity leave at most the capacity per element type, and
            // the last result is still candle's.
            let dev = cuda()?;
            let b = Tensor::randn(0f32, 1.0, (8, 8), &Device::Cpu)?;
            let bg = b.to_device(&dev)?;
            for m in 1..=cudnn_candle::GEMM_PLAN_CAPACITY + 40 {
                let a = Tensor::randn(0f32, 1.0, (m, 8), &Device::Cpu)?;
                let got = cudnn_candle::matmul_bias_act(
                    &a.to_device(&dev)?,
                    &bg,
                    None,
                    cudnn_candle::MatmulActivation::None,
                )?;
                assert!(cudnn_candle::gemm_plan_count() <= 3 * cudnn_candle::GEMM_PLAN_CAPACITY);
                if m % 97 == 0 {
                    close("d", &got, &a.matmul(&b)?, tol(DType::F32))?;
                }
            }
            cudnn_candle::clear_gemm_plans();
            Ok(())
        }),
        gpu("matmul_bias_relu_f32", || {
            gemm_case(
                &[33, 70],
                &[70, 19],
                true,
                cudnn_candle::MatmulActivation::Relu,
                DType::F32,
                |a, b| Ok((a.clone(), b.clone())),
            )
        }),
        gpu("matmul_bias_gelu_bf16_batched", || {
            gemm_case(
                &[3, 64, 128],
                &[3, 128, 96],
                true,
                cudnn_candle::MatmulActivation::GeluTanh,
                DType::BF16,
                |a, b| Ok((a.clone(), b.clone())),
            )
        }),
        gpu("matmul_broadcast_weight_f16", || {
            // A linear layer: (batch, seq, in) x (in, out), the weight broadcast.
            gemm_case(
                &[2, 5, 40, 64],
                &[64, 48],
                true,
                cudnn_candle::MatmulActivation::None,
                DType::F16,
                |a, b| Ok((a.clone(), b.clone())),
            )
        }),
        gpu("matmul_transposed_weight_no_bias", || {
            // candle's Linear stores (out, in) and multiplies by its t().
            gemm_case(
                &[16, 32],
                &[32, 24],
                false,
                cudnn_candle::MatmulActivation::Relu,
                DType::F32,
                |a, b| {
                    let w = b.t()?.contiguous()?; // (out, in)
                    let wt = w.t()?; // (in, out), column-major view
                    assert!(!wt.is_contiguous());
                    Ok((a.clone(), wt))
                },
            )
        }),
        gpu("matmul_offset_views_unaligned", || {
            // Operands narrowed out of bigger buffers holding the same
            // values: a contiguous one element (2 bytes in bf16) in, b
            // three elements in with row stride 13 (not 16-byte aligned,
            // cuBLASLt told 2). The first GPU run's version narrowed b's
            // columns 3..13 out of [b | b], a rotation of b, and compared
            // with a·b: 100% "error" from the test, not the op (the unit
            // test `params::gemm::tests::offset_views_of_the_gpu_case_..`
            // checks the layouts against candle's strided index).
            gemm_case(
                &[9, 16],
                &[16, 10],
                true,
                cudnn_candle::MatmulActivation::GeluTanh,
                DType::BF16,
                |a, b| {
                    let fa = a.flatten_all()?;
                    let pa = Tensor::cat(&[&fa.narrow(0, 0, 1)?, &fa], 0)?
                        .narrow(0, 1, 9 * 16)?
                        .reshape((9, 16))?;
                    let pb = Tensor::cat(&[&b.narrow(1, 0, 3)?, b], 1)?.narrow(1, 3, 10)?;
                    assert_eq!(pa.layout().start_offset(), 1);
                    assert_eq!((pb.layout().start_offset(), pb.stride()), (3, &[13, 1][..]));
                    Ok((pa, pb))
                },
            )
        }),
        gpu("matmul_repeat_gives_the_same_bits", || {
            let dev = cuda()?;
            let a = Tensor::randn(0f32, 1.0, (8, 32), &dev)?;
            let b = Tensor::randn(0f32, 1.0, (32, 8), &dev)?;
            let first =
                cudnn_candle::matmul_bias_act(&a, &b, None, cudnn_candle::MatmulActivation::None)?;
            for _ in 0..3 {
                let again = cudnn_candle::matmul_bias_act(
                    &a,
                    &b,
                    None,
                    cudnn_candle::MatmulActivation::None,
                )?;
                let diff = (&again - &first)?.abs()?.max_all()?.to_scalar::<f32>()?;
                assert_eq!(diff, 0.0, "the same plan gives the same bits");
            }
            Ok(())
        }),
    ]
}
