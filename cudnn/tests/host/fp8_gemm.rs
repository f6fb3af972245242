//! Scaled FP8 matmul, host tier: the descriptors against the real cuBLASLt
//! (no device): every allowed type combination and both D orders build, and
//! what the library reads back is what the spec says ("TN" transposes,
//! FP8/bf16 layout types, C's type, fast accumulation, bias type, amax and
//! bias pointers, block-scale modes); the Rust checks refuse what cuBLASLt
//! does not allow, naming the argument and the fix; a property test over
//! random shapes, types, orders and transposes. The heuristic and the run
//! need a device (`cublasLtMatmulAlgoGetHeuristic` takes a handle, and
//! creating one needs a GPU): `gpu/fp8_gemm` covers them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use cudnn::blas::{
    Epilogue, Fp8BiasType, Fp8Descriptors, Fp8MatmulSpec, Fp8OutputType, Fp8ScaleMode, Fp8Types,
    Layout, check_scale_mode_for,
};
use cudnn::sys::cublas::{
    cublasComputeType_t as CT, cublasLtEpilogue_t as EP, cublasLtMatmulMatrixScale_t as SM,
    cublasOperation_t as Op,
};
use cudnn::sys::cudart::cudaDataType_t as DT;
use cudnn::{Error, F8E4M3, F8E5M2, Fp8Format};
use half::bf16;
use proptest::prelude::*;
use support::*;

type R = Result<(), libtest_mimic::Failed>;

pub fn main() {
    run(vec![
        host("fp8_descriptors_every_type_combination", every_combination),
        host(
            "fp8_descriptors_row_major_d_swaps_and_keeps_tn",
            row_major_d,
        ),
        host("fp8_descriptors_bias_amax_fast_accum", bias_amax),
        host(
            "fp8_output_takes_an_f16_c_and_bias",
            fp8_output_f16_companions,
        ),
        host("fp8_descriptors_block_scale_mode", block_scale),
        unit("fp8_rules_refused_with_the_argument_named", refusals),
        unit("fp8_scale_mode_by_architecture", architectures),
        host("fuzz_fp8_spec_and_descriptors", fuzz),
        host("fp8_heuristic_needs_a_device", heuristic_needs_device),
    ])
}

const FORMATS: [Fp8Format; 2] = [Fp8Format::E4M3, Fp8Format::E5M2];
const OUTPUTS: [Fp8OutputType; 5] = [
    Fp8OutputType::F32,
    Fp8OutputType::F16,
    Fp8OutputType::BF16,
    Fp8OutputType::Fp8(Fp8Format::E4M3),
    Fp8OutputType::Fp8(Fp8Format::E5M2),
];

fn tn(m: usize, n: usize, k: usize) -> Fp8MatmulSpec {
    // Column-major D = A·B, A stored row-major (k contiguous), B
    // column-major (k contiguous).
    Fp8MatmulSpec::new(
        Layout::row_major(m, k),
        Layout::col_major(k, n),
        Layout::col_major(m, n),
    )
}

fn every_combination() -> R {
    let (m, n, k) = (64, 32, 48);
    let mut built = 0;
    for a in FORMATS {
        for b in FORMATS {
            for d in OUTPUTS {
                let t = Fp8Types {
                    a,
                    b,
                    d,
                    bias: None,
                };
                let r = Fp8Descriptors::new(&tn(m, n, k), t, 1 << 20);
                if a == Fp8Format::E5M2 && b == Fp8Format::E5M2 {
                    match r {
                        Err(Error::InvalidArgument { arg, .. }) if arg == "b" => continue,
                        other => return Err(format!("E5M2 x E5M2: {other:?}").into()),
                    }
                }
                // NVIDIA's table (and PyTorch's _scaled_mm, from it) has no
                // E4M3 x E4M3 -> E5M2.
                if a == Fp8Format::E4M3
                    && b == Fp8Format::E4M3
                    && d == Fp8OutputType::Fp8(Fp8Format::E5M2)
                {
                    match r {
                        Err(Error::InvalidArgument { arg, .. }) if arg == "d" => continue,
                        other => return Err(format!("E4M3 x E4M3 -> E5M2: {other:?}").into()),
                    }
                }
                let x = r?;
                let md = x.matmul_desc();
                ensure!(
                    md.compute_type()? == CT::CUBLAS_COMPUTE_32F
                        && md.scale_type()? == DT::CUDA_R_32F,
                    "compute/scale type"
                );
                // "TN": A (stored k x m column-major) transposed, B not.
                ensure!(
                    md.transposes()? == (Op::CUBLAS_OP_T, Op::CUBLAS_OP_N),
                    "{:?}",
                    md.transposes()?
                );
                ensure!(
                    x.first_layout().shape()? == (a.cuda(), k as u64, m as u64, k as i64),
                    "first {:?}",
                    x.first_layout().shape()?
                );
                ensure!(
                    x.second_layout().shape()? == (b.cuda(), k as u64, n as u64, k as i64),
                    "second {:?}",
                    x.second_layout().shape()?
                );
                ensure!(
                    x.output_layout().shape()? == (d.cuda(), m as u64, n as u64, m as i64),
                    "out {:?}",
                    x.output_layout().shape()?
                );
                // C is bf16 for an FP8 D, D's type otherwise.
                let c_want = if d.is_fp8() {
                    DT::CUDA_R_16BF
                } else {
                    d.cuda()
                };
                ensure!(
                    x.c_layout().shape()?.0 == c_want,
                    "c type {:?} for {d:?}",
                    x.c_layout().shape()?.0
                );
                ensure!(!x.fast_accum()?, "fast accumulation off by default");
                ensure!(
                    x.pointers()? == [0; 6],
                    "no pointers set: {:?}",
                    x.pointers()?
                );
                built += 1;
            }
        }
    }
    ensure!(
        built == 14,
        "3 type pairs x 5 outputs, less E4M3 x E4M3 -> E5M2, built: got {built}"
    );
    Ok(())
}

fn row_major_d() -> R {
    // Row-major Y (32 x 64) = X (32 x 128) · Wᵀ, W stored 64 x 128: the
    // library computes Yᵀ = W·Xᵀ; E4M3 x E5M2 becomes E5M2 x E4M3 there.
    let spec = Fp8MatmulSpec::new(
        Layout::row_major(32, 128),
        Layout::row_major(64, 128).t(),
        Layout::row_major(32, 64),
    );
    let t = Fp8Types {
        a: Fp8Format::E4M3,
        b: Fp8Format::E5M2,
        d: Fp8OutputType::BF16,
        bias: None,
    };
    let x = Fp8Descriptors::new(&spec, t, 0)?;
    ensure!(x.shape().swaps_operands(), "swapped");
    ensure!(
        x.matmul_desc().transposes()? == (Op::CUBLAS_OP_T, Op::CUBLAS_OP_N),
        "{:?}",
        x.matmul_desc().transposes()?
    );
    ensure!(
        x.first_layout().shape()? == (DT::CUDA_R_8F_E5M2, 128, 64, 128),
        "{:?}",
        x.first_layout().shape()?
    );
    ensure!(
        x.second_layout().shape()? == (DT::CUDA_R_8F_E4M3, 128, 32, 128),
        "{:?}",
        x.second_layout().shape()?
    );
    ensure!(
        x.output_layout().shape()? == (DT::CUDA_R_16BF, 64, 32, 64),
        "{:?}",
        x.output_layout().shape()?
    );
    // The typed check agrees with the run-time one.
    let s = spec.check::<F8E4M3, F8E5M2, bf16>()?;
    ensure!(s == *x.shape(), "typed and run-time checks agree");
    Ok(())
}

/// Issue 31 item 7: NVIDIA's cuBLASLt FP8 table lets an FP8 D have a
/// 16-bit C of either type with a bias of C's type (TransformerEngine uses
/// f16 there); the crate forced bf16. With `with_bias(F16)` the real
/// cuBLASLt builds the descriptors and reads back C and the bias as
/// `CUDA_R_16F`; for non-FP8 D the bias type stays what the table gives
/// (f16 with an f16 D, bf16 otherwise) and another is refused naming
/// `bias`. (The heuristic needs a device: gpu/fp8_gemm runs the f16 plan.)
fn fp8_output_f16_companions() -> R {
    let spec = tn(64, 32, 48).with_epilogue(Epilogue::Bias);
    for (a, b, d) in [
        (Fp8Format::E4M3, Fp8Format::E4M3, Fp8Format::E4M3),
        (Fp8Format::E4M3, Fp8Format::E5M2, Fp8Format::E5M2),
        (Fp8Format::E5M2, Fp8Format::E4M3, Fp8Format::E4M3),
    ] {
        for (bias, code) in [
            (None, DT::CUDA_R_16BF),
            (Some(Fp8BiasType::BF16), DT::CUDA_R_16BF),
            (Some(Fp8BiasType::F16), DT::CUDA_R_16F),
        ] {
            let t = Fp8Types {
                a,
                b,
                d: Fp8OutputType::Fp8(d),
                bias,
            };
            let x = Fp8Descriptors::new(&spec, t, 1 << 20)?;
            ensure!(
                x.c_layout().shape()?.0 == code && x.bias_type()? == code,
                "{t:?}: C {:?}, bias {:?}",
                x.c_layout().shape()?.0,
                x.bias_type()?
            );
            ensure!(
                x.output_layout().shape()?.0 == d.cuda(),
                "{t:?}: D stays FP8"
            );
        }
    }
    let base = Fp8Types {
        a: Fp8Format::E4M3,
        b: Fp8Format::E4M3,
        d: Fp8OutputType::F32,
        bias: None,
    };
    for (d, bad) in [
        (Fp8OutputType::F32, Fp8BiasType::F16),
        (Fp8OutputType::BF16, Fp8BiasType::F16),
        (Fp8OutputType::F16, Fp8BiasType::BF16),
    ] {
        let t = base.with_bias(bad);
        let t = Fp8Types { d, ..t };
        match Fp8Descriptors::new(&spec, t, 1 << 20) {
            Err(Error::InvalidArgument { arg, value, .. })
                if arg == "bias" && value == bad.name() => {}
            other => return Err(format!("{t:?}: {other:?}").into()),
        }
        // The default for that D is accepted and read back.
        let t = Fp8Types { bias: None, ..t };
        let x = Fp8Descriptors::new(&spec, t, 1 << 20)?;
        ensure!(
            x.bias_type()? == d.bias_cuda() && x.c_layout().shape()?.0 == d.cuda(),
            "{t:?}"
        );
    }
    Ok(())
}

fn bias_amax() -> R {
    for (d, bias) in [
        (Fp8OutputType::F16, DT::CUDA_R_16F),
        (Fp8OutputType::F32, DT::CUDA_R_16BF),
        (Fp8OutputType::Fp8(Fp8Format::E4M3), DT::CUDA_R_16BF),
    ] {
        // amax of D: FP8 D only (cuBLASLt does not support it for other
        // outputs of an FP8 matmul).
        let spec = tn(64, 16, 32)
            .with_epilogue(Epilogue::GeluTanhBias)
            .with_fast_accum(true)
            .with_amax_d(matches!(d, Fp8OutputType::Fp8(_)))
            .with_alignment(16);
        let t = Fp8Types {
            a: Fp8Format::E4M3,
            b: Fp8Format::E4M3,
            d,
            bias: None,
        };
        let x = Fp8Descriptors::new(&spec, t, 0)?;
        ensure!(x.fast_accum()?, "fast accumulation read back");
        ensure!(
            x.bias_type()? == bias,
            "bias type {:?} for {d:?}",
            x.bias_type()?
        );
        ensure!(
            x.matmul_desc().epilogue()? == EP::CUBLASLT_EPILOGUE_GELU_BIAS,
            "epilogue"
        );
        // amax and bias placeholders at the spec's alignment; scales unset.
        let amax = if spec.amax_d() { 16 } else { 0 };
        ensure!(
            x.pointers()? == [0, 0, 0, 0, amax, 16],
            "{:?}",
            x.pointers()?
        );
        ensure!(x.shape().bias_len() == 64, "bias per row of column-major D");
    }
    Ok(())
}

fn block_scale() -> R {
    let spec = tn(128, 128, 64).with_scale_mode(Fp8ScaleMode::Mxfp8);
    let t = Fp8Types {
        a: Fp8Format::E4M3,
        b: Fp8Format::E4M3,
        d: Fp8OutputType::BF16,
        bias: None,
    };
    let x = Fp8Descriptors::new(&spec, t, 0)?;
    let want = SM::CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;
    ensure!(x.scale_modes()? == (want, want), "{:?}", x.scale_modes()?);
    Ok(())
}

fn named<T: std::fmt::Debug>(r: cudnn::Result<T>, arg: &str, text: &str) -> R {
    match r {
        Err(Error::InvalidArgument { arg: got, rule, .. }) if got == arg && rule.contains(text) => {
            Ok(())
        }
        other => Err(format!(
            "want InvalidArgument naming {arg:?} containing {text:?}, got {other:?}"
        )
        .into()),
    }
}

fn refusals() -> R {
    let t = Fp8Types {
        a: Fp8Format::E4M3,
        b: Fp8Format::E4M3,
        d: Fp8OutputType::BF16,
        bias: None,
    };
    // A column-major (m contiguous): transpose A.
    let s = Fp8MatmulSpec::new(
        Layout::col_major(64, 32),
        Layout::col_major(32, 16),
        Layout::col_major(64, 16),
    );
    named(s.check_types(t), "a", "Layout::row_major(64, 32)")?;
    // B row-major (n contiguous): transpose B; same with a row-major D.
    let s = Fp8MatmulSpec::new(
        Layout::row_major(64, 32),
        Layout::row_major(32, 16),
        Layout::row_major(64, 16),
    );
    named(s.check_types(t), "b", "Layout::col_major(32, 16)")?;
    named(
        tn(64, 16, 32).check_types(Fp8Types {
            a: Fp8Format::E5M2,
            b: Fp8Format::E5M2,
            d: Fp8OutputType::F32,
            bias: None,
        }),
        "b",
        "E5M2 x E5M2",
    )?;
    named(tn(64, 16, 40).check_types(t), "k", "multiple of 16")?;
    // D's contiguous dimension in 16s: m for a column-major D (n free), n
    // for a row-major one (m free).
    named(tn(40, 16, 32).check_types(t), "m", "multiple of 16")?;
    ensure!(
        tn(64, 8, 32).check_types(t).is_ok(),
        "n = 8, column-major D"
    );
    let row_d = |m: usize, n: usize| {
        Fp8MatmulSpec::new(
            Layout::row_major(m, 32),
            Layout::row_major(n, 32).t(),
            Layout::row_major(m, n),
        )
    };
    named(row_d(64, 40).check_types(t), "n", "multiple of 16")?;
    ensure!(row_d(8, 64).check_types(t).is_ok(), "m = 8, row-major D");
    named(
        tn(64, 16, 32).check_types(Fp8Types {
            d: Fp8OutputType::Fp8(Fp8Format::E5M2),
            ..t
        }),
        "d",
        "E4M3 x E4M3 -> E5M2",
    )?;
    // amax of D with a D that is not FP8: cuBLASLt does not support it
    // (PyTorch refuses the same since cuBLAS said so); every non-FP8 D is
    // refused, every FP8 D accepted.
    for d in OUTPUTS {
        let r = tn(64, 16, 32).with_amax_d(true).check_types(Fp8Types {
            b: Fp8Format::E5M2,
            d,
            ..t
        });
        if matches!(d, Fp8OutputType::Fp8(_)) {
            ensure!(r.is_ok(), "amax with {d:?}: {:?}", r.err());
        } else {
            named(r, "amax_d", "FP8 D only")?;
        }
    }
    let s = Fp8MatmulSpec::new(
        Layout::row_major(64, 32).with_ld(40),
        Layout::col_major(32, 16),
        Layout::col_major(64, 16),
    );
    named(s.check_types(t), "a.ld", "16 bytes")?;
    // D f16 with ld 68 (136 bytes) is misaligned; with ld 72 fine.
    let s = Fp8MatmulSpec::new(
        Layout::row_major(64, 32),
        Layout::col_major(32, 16),
        Layout::col_major(64, 16).with_ld(68),
    );
    named(
        s.check_types(Fp8Types {
            d: Fp8OutputType::F16,
            ..t
        }),
        "d.ld",
        "16 bytes",
    )?;
    named(
        tn(64, 16, 32).with_alignment(8).check_types(t),
        "alignment",
        "16",
    )?;
    named(
        tn(64, 16, 32)
            .with_epilogue(Epilogue::DGeluTanh)
            .check_types(t),
        "epilogue",
        "GeluTanhBias",
    )?;
    named(
        tn(64, 16, 32)
            .with_epilogue(Epilogue::ReluAux)
            .check_types(t),
        "epilogue",
        "GeluTanhBias",
    )?;
    // Shape chain errors come from the shared layout checks.
    let s = Fp8MatmulSpec::new(
        Layout::row_major(64, 32),
        Layout::col_major(48, 16),
        Layout::col_major(64, 16),
    );
    ensure!(
        matches!(s.check_types(t), Err(Error::Mismatch { .. })),
        "k chain"
    );
    Ok(())
}

fn architectures() -> R {
    let is_unsupported = |r: cudnn::Result<()>, needle: &str| match r {
        Err(Error::Unsupported { what, .. }) => what.contains(needle),
        _ => false,
    };
    ensure!(
        check_scale_mode_for(Fp8ScaleMode::Tensor, (9, 0)).is_ok(),
        "H100/H200"
    );
    ensure!(
        check_scale_mode_for(Fp8ScaleMode::Tensor, (8, 9)).is_ok(),
        "Ada"
    );
    ensure!(
        check_scale_mode_for(Fp8ScaleMode::Tensor, (10, 0)).is_ok(),
        "B200"
    );
    ensure!(
        is_unsupported(check_scale_mode_for(Fp8ScaleMode::Tensor, (8, 0)), "sm_80"),
        "A100 has no FP8"
    );
    ensure!(
        is_unsupported(check_scale_mode_for(Fp8ScaleMode::Mxfp8, (9, 0)), "sm_90"),
        "MXFP8 on Hopper names the architecture"
    );
    ensure!(
        is_unsupported(
            check_scale_mode_for(Fp8ScaleMode::Mxfp8, (10, 0)),
            "not implemented"
        ),
        "MXFP8 on Blackwell: not implemented here yet"
    );
    Ok(())
}

/// Random shapes, leading dimensions, orders, transposes, types and
/// epilogues: the checks never panic, refuse with a typed error naming an
/// argument, and whatever they accept cuBLASLt's descriptors accept too.
fn fuzz() -> R {
    let mut runner = crate::support::prop_runner(400);
    let dims = prop_oneof![
        Just(0usize),
        1usize..80,
        Just(16usize),
        Just(32usize),
        Just(64usize),
        Just(usize::MAX / 2)
    ];
    let pads = prop_oneof![Just(0usize), Just(16), Just(32), 0usize..64];
    let accepted = std::sync::atomic::AtomicUsize::new(0);
    let strat = (
        (dims.clone(), dims.clone(), dims),
        any::<[bool; 6]>(),
        (0usize..3, 0usize..5, 0usize..16),
        (0usize..3, pads, any::<bool>(), any::<bool>(), 0usize..3),
    );
    runner
        .run(
            &strat,
            |((m, n, k), mut f, (mut ab, d, mut e), (batch, pad, amax, valid, bias_pick))| {
                if valid {
                    // Half the cases follow the rules except where chance breaks
                    // them: K-major operands, a supported epilogue, not E5M2 x
                    // E5M2, sizes and pads in 16s.
                    f[0] = !f[1];
                    f[2] = f[3];
                    e %= 6;
                    if ab == 3 {
                        ab = 0;
                    }
                }
                let r16 = |v: usize| {
                    if valid && v < 1 << 20 {
                        v.div_ceil(16).max(1) * 16
                    } else {
                        v
                    }
                };
                let (m, n, k) = (r16(m), r16(n), r16(k));
                let pad = if valid { pad / 16 * 16 } else { pad };
                let lay = |r: usize, c: usize, row: bool, t: bool| {
                    let l = if row {
                        Layout::row_major(r, c)
                    } else {
                        Layout::col_major(r, c)
                    };
                    let l = if t {
                        Layout::new(l.order(), c, r).t()
                    } else {
                        l
                    };
                    let l = l.with_ld(l.min_ld().saturating_add(pad));
                    if batch > 0 {
                        let span = l.span().unwrap_or(0);
                        l.batched(batch + 1, r16(span.saturating_add(pad)))
                    } else {
                        l
                    }
                };
                const SUPPORTED: [Epilogue; 6] = [
                    Epilogue::None,
                    Epilogue::Relu,
                    Epilogue::GeluTanh,
                    Epilogue::Bias,
                    Epilogue::ReluBias,
                    Epilogue::GeluTanhBias,
                ];
                let epi = if valid {
                    SUPPORTED[e % 6]
                } else {
                    Epilogue::ALL[e % Epilogue::ALL.len()]
                };
                let spec = Fp8MatmulSpec::new(
                    lay(m, k, f[0], f[1]),
                    lay(k, n, f[2], f[3]),
                    lay(m, n, f[4], f[5]),
                )
                .with_epilogue(epi)
                .with_amax_d(amax)
                .with_alignment(if pad % 7 == 3 { 8 } else { 16 });
                let t = Fp8Types {
                    a: FORMATS[ab % 2],
                    b: FORMATS[(ab / 2) % 2],
                    d: OUTPUTS[d],
                    bias: [None, Some(Fp8BiasType::BF16), Some(Fp8BiasType::F16)][bias_pick],
                };
                // NVIDIA's table: any 16-bit bias (C's type) with an FP8 D,
                // bf16 with f32 / bf16 D, f16 with an f16 D.
                let bias_ok = match (t.d, t.bias) {
                    (_, None) | (Fp8OutputType::Fp8(_), _) => true,
                    (Fp8OutputType::F16, Some(b)) => b == Fp8BiasType::F16,
                    (_, Some(b)) => b == Fp8BiasType::BF16,
                };
                let r = spec.check_types(t);
                if !bias_ok {
                    prop_assert!(
                        matches!(&r, Err(Error::InvalidArgument { arg, .. }) if arg == "bias"),
                        "bias {t:?} not refused: {r:?}"
                    );
                }
                match r {
                    Ok(_) => {
                        let x = Fp8Descriptors::new(&spec, t, 1 << 20);
                        prop_assert!(
                            x.is_ok(),
                            "checks passed but cuBLASLt refused: {:?} {spec:?} {t:?}",
                            x.err()
                        );
                        accepted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    Err(Error::InvalidArgument { arg, .. }) => prop_assert!(!arg.is_empty()),
                    Err(Error::Mismatch { what, .. }) => prop_assert!(!what.is_empty()),
                    Err(other) => prop_assert!(false, "untyped error {other:?}"),
                }
                Ok(())
            },
        )
        .map_err(|e| e.to_string())?;
    let n = accepted.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("fuzz_fp8_spec_and_descriptors: {n} of 400 specs accepted and built");
    ensure!(
        n >= 10,
        "only {n} random specs passed the checks: the property is nearly vacuous"
    );
    Ok(())
}

/// Why the FP8 heuristic is not host-tested: `cublasLtMatmulAlgoGetHeuristic`
/// takes a cuBLASLt handle, and `cublasLtCreate` itself refuses without a
/// device (`CUBLAS_STATUS_NOT_INITIALIZED`). With a device it succeeds (and
/// `gpu/fp8_gemm` runs the heuristic).
fn heuristic_needs_device() -> R {
    use cudnn::sys::cublas::cublasStatus_t as St;
    let api = cudnn::sys::cublas::load_lt()?;
    let mut raw = std::ptr::null_mut();
    // SAFETY: `raw` is a valid out-pointer; a handle created is destroyed below.
    let st = unsafe { api.cublasLtCreate(&mut raw) }?;
    if has_gpu() {
        ensure!(
            st == St::CUBLAS_STATUS_SUCCESS && !raw.is_null(),
            "with a device: {st:?}"
        );
        // SAFETY: created just above, destroyed once.
        let _ = unsafe { api.cublasLtDestroy(raw) };
    } else {
        ensure!(
            st == St::CUBLAS_STATUS_NOT_INITIALIZED,
            "without a device cublasLtCreate returned {st:?}"
        );
    }
    Ok(())
}
