//! MXFP8 block scaling (unit tier: no library, no device): the E8M0
//! element type (every code against its definition, the library codes from
//! NVIDIA's headers, its graph dtype so block scales can be bound), and the
//! f64 reference `reference::block_scale` on hand-computed blocks (NVIDIA's
//! formula: scale = amax / vmax rounded up to a power of two, values
//! rounded to nearest even) plus a property test of its defining bounds.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use cudnn::graph::DType;
use cudnn::reference::block_scale::{BLOCK, dequantize, e8m0_value, quantize, scale_code};
use cudnn::{DataType, Error, F8E8M0, Fp8Format};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestRunner};
use support::*;

type R = Result<(), libtest_mimic::Failed>;

pub fn main() {
    run(vec![
        unit("e8m0_every_code", e8m0_codes),
        unit("e8m0_library_codes_and_graph_dtype", e8m0_library),
        unit("reference_quantize_hand_blocks", hand_quantize),
        unit("reference_dequantize_hand_blocks", hand_dequantize),
        unit("reference_block_scale_rejects", rejects),
        unit("fuzz_reference_block_scale", fuzz),
        unit("mxfp8_scale_sizes_by_hand", scale_sizes_by_hand),
        unit(
            "block_scale_builders_refuse_padded_tiles",
            builders_refuse_padded,
        ),
        unit(
            "block_scale_builders_need_row_major_x",
            builders_need_row_major,
        ),
        unit("block_scale_builders_refuse_1d_x", builders_refuse_1d),
    ])
}

/// Issue 31: the 128 x 4 tile rule reads the last two logical dims as
/// rows and columns, the memory layout only of a packed row-major x. A
/// `[B, H, S, D] = [1, 2, 128, 128]` x stored BSHD (strides worked out by
/// hand: D 1, H 128, S 2 * 128 = 256, B 128 * 2 * 128 = 32768) fills whole
/// tiles by its logical dims, and both builders accepted it before; now
/// both refuse it naming x's strides, and the dequantize a scale that is
/// not row-major. A stride on an extent-1 dim does not matter.
fn builders_need_row_major() -> R {
    use cudnn::graph::{Graph, TensorSpec};
    let dims = [1i64, 2, 128, 128];
    let bshd = [32768i64, 128, 256, 1];
    let mut g = Graph::new();
    let x = g.input("x", TensorSpec::new(DType::BF16, &dims, &bshd)?)?;
    let e = g
        .block_scale_quantize(x, DType::Fp8E4M3)
        .err()
        .ok_or("quantize accepted a BSHD x")?;
    let t = e.to_string();
    ensure!(
        matches!(&e, Error::InvalidArgument { arg, .. } if arg.contains("x's strides"))
            && t.contains("[32768, 128, 256, 1]")
            && t.contains("[32768, 16384, 128, 1]"),
        "{t}"
    );
    let mut d = Graph::new();
    let xq = d.input("xq", TensorSpec::new(DType::Fp8E4M3, &dims, &bshd)?)?;
    let sc = d.input("s", TensorSpec::row_major(DType::Fp8E8M0, &[1, 2, 128, 4])?)?;
    let e = d
        .block_scale_dequantize(xq, sc)
        .err()
        .ok_or("dequantize accepted a BSHD x")?;
    ensure!(
        matches!(&e, Error::InvalidArgument { arg, .. } if arg.contains("x's strides")),
        "{e}"
    );
    // Row-major x, column-major-ish scale [1, 2, 128, 4] (S innermost).
    let mut d = Graph::new();
    let xq = d.input("xq", TensorSpec::row_major(DType::Fp8E4M3, &dims)?)?;
    let sc = d.input(
        "s",
        TensorSpec::new(DType::Fp8E8M0, &[1, 2, 128, 4], &[1024, 512, 1, 128])?,
    )?;
    let e = d
        .block_scale_dequantize(xq, sc)
        .err()
        .ok_or("dequantize accepted a strided scale")?;
    ensure!(
        matches!(&e, Error::InvalidArgument { arg, .. } if arg.contains("scale's strides")),
        "{e}"
    );
    // Extent-1 dims may carry any stride: still packed row-major.
    let mut g = Graph::new();
    let x = g.input(
        "x",
        TensorSpec::new(DType::F32, &[1, 1, 128, 128], &[7, 5, 128, 1])?,
    )?;
    let q = g.block_scale_quantize(x, DType::Fp8E5M2)?;
    ensure!(g.dims(q.scale)? == [1, 1, 128, 4], "scale dims");
    Ok(())
}

/// A 1-D x is one row: it never fills a 128-row scale tile, and both
/// builders say so (at least 2 dims), naming x's dims.
fn builders_refuse_1d() -> R {
    use cudnn::graph::{Graph, TensorSpec};
    for n in [32i64, 256, 128 * 128] {
        let mut g = Graph::new();
        let x = g.input("x", TensorSpec::row_major(DType::BF16, &[n])?)?;
        let e = g
            .block_scale_quantize(x, DType::Fp8E4M3)
            .err()
            .ok_or("quantize accepted a 1-D x")?;
        let t = e.to_string();
        ensure!(
            matches!(&e, Error::InvalidArgument { arg, .. } if arg.contains("x's dims"))
                && t.contains("at least 2 dims"),
            "{n}: {t}"
        );
        let mut d = Graph::new();
        let xq = d.input("xq", TensorSpec::row_major(DType::Fp8E4M3, &[n])?)?;
        let sc = d.input("s", TensorSpec::row_major(DType::Fp8E8M0, &[n / 32])?)?;
        let e = d
            .block_scale_dequantize(xq, sc)
            .err()
            .ok_or("dequantize accepted a 1-D x")?;
        ensure!(e.to_string().contains("at least 2 dims"), "{n}: {e}");
    }
    Ok(())
}

/// NVIDIA's MXFP8 scale layout is whole 128 x 4 tiles (rows rounded up to
/// 128, scale columns `last / 32` rounded up to 4); the sizes here are
/// worked out by hand from that rule.
fn scale_sizes_by_hand() -> R {
    use cudnn::graph::mxfp8_scale_sizes;
    for (dims, packed, padded) in [
        // 129 rows -> 256; 64 / 32 = 2 columns -> 4: 256 * 4.
        (&[129i64, 64][..], 129 * 2, 256 * 4),
        (&[128, 128], 128 * 4, 128 * 4),
        (&[128, 256], 128 * 8, 128 * 8),
        (&[1, 32], 1, 128 * 4),
        // 1-D: one row.
        (&[256], 8, 128 * 8),
        // 4-D: the leading [2, 1] times 64 -> 128 rows times 2 -> 4.
        (&[2, 1, 64, 64], 2 * 64 * 2, 2 * 128 * 4),
        (&[1, 3, 128, 384], 3 * 128 * 12, 3 * 128 * 12),
        // 3-D (the builders refuse it, the size rule still holds).
        (&[2, 130, 160], 2 * 130 * 5, 2 * 256 * 8),
    ] {
        let got = mxfp8_scale_sizes(dims)?;
        ensure!(
            got == (packed, padded),
            "{dims:?}: {got:?}, want ({packed}, {padded})"
        );
    }
    for bad in [
        &[][..],
        &[4, 48],
        &[0, 64],
        &[-1, 64],
        &[i64::MAX / 32 * 32],
        &[i64::MAX, 128],
        &[1 << 40, 1 << 40, 1 << 20, 128],
    ] {
        match mxfp8_scale_sizes(bad) {
            Err(Error::InvalidArgument { arg, .. }) if arg == "dims" => {}
            other => return Err(format!("{bad:?}: {other:?}").into()),
        }
    }
    Ok(())
}

/// A scale tensor smaller than NVIDIA's padded tiles would let a kernel
/// touch memory past the bound buffer: both builders refuse x shapes whose
/// packed and padded scale sizes differ, naming the dims and both sizes;
/// tile-filling shapes build.
fn builders_refuse_padded() -> R {
    use cudnn::graph::{Graph, TensorSpec};
    for dims in [&[129i64, 64][..], &[128, 64], &[64, 128], &[2, 1, 64, 128]] {
        let (packed, padded) = cudnn::graph::mxfp8_scale_sizes(dims)?;
        let mut g = Graph::new();
        let x = g.input("x", TensorSpec::row_major(DType::BF16, dims)?)?;
        let e = g
            .block_scale_quantize(x, DType::Fp8E4M3)
            .err()
            .ok_or(format!("quantize {dims:?} accepted"))?;
        let t = e.to_string();
        ensure!(
            matches!(&e, Error::InvalidArgument { arg, .. } if arg.contains("x's dims"))
                && t.contains(&padded.to_string())
                && t.contains(&packed.to_string()),
            "{dims:?}: {t}"
        );
        let mut d = Graph::new();
        let xq = d.input("xq", TensorSpec::row_major(DType::Fp8E4M3, dims)?)?;
        let mut sd = dims.to_vec();
        if let Some(l) = sd.last_mut() {
            *l /= 32;
        }
        let sc = d.input("s", TensorSpec::row_major(DType::Fp8E8M0, &sd)?)?;
        let e = d
            .block_scale_dequantize(xq, sc)
            .err()
            .ok_or(format!("dequantize {dims:?} accepted"))?;
        ensure!(
            matches!(&e, Error::InvalidArgument { arg, .. } if arg.contains("x's dims")),
            "{dims:?}: {e}"
        );
    }
    for dims in [&[128i64, 128][..], &[256, 512], &[2, 1, 128, 128]] {
        let mut g = Graph::new();
        let x = g.input("x", TensorSpec::row_major(DType::F32, dims)?)?;
        let q = g.block_scale_quantize(x, DType::Fp8E5M2)?;
        let span = g.spec(q.scale)?.span_elements()?;
        let (packed, padded) = cudnn::graph::mxfp8_scale_sizes(dims)?;
        ensure!(
            span == packed && packed == padded,
            "{dims:?}: span {span}, sizes {packed} / {padded}"
        );
    }
    Ok(())
}

/// Code c is 2^(c - 127), built here from the f64 bit layout (exponent
/// field c - 127 + 1023, no mantissa); 0xFF is NaN.
fn e8m0_codes() -> R {
    for c in 0..=254u8 {
        let want = f64::from_bits((u64::from(c) + 1023 - 127) << 52);
        let t = F8E8M0::from_bits(c);
        ensure!(t.to_f64() == want, "code {c}: {} vs {want}", t.to_f64());
        ensure!(e8m0_value(c) == want, "reference code {c}");
        ensure!(t.exponent() == Some(i32::from(c) - 127), "exponent {c}");
        ensure!(
            F8E8M0::from_exponent(i32::from(c) - 127) == Some(t),
            "from_exponent {c}"
        );
        ensure!(!t.is_nan() && t.to_bits() == c, "bits {c}");
    }
    let nan = F8E8M0::from_bits(0xFF);
    ensure!(
        nan.is_nan() && nan.to_f64().is_nan() && e8m0_value(0xFF).is_nan(),
        "NaN"
    );
    ensure!(nan.exponent().is_none(), "NaN exponent");
    ensure!(F8E8M0::from_exponent(128).is_none(), "2^128");
    ensure!(F8E8M0::from_exponent(-128).is_none(), "2^-128");
    ensure!(F8E8M0::from_exponent(i32::MIN).is_none(), "i32::MIN");
    ensure!(F8E8M0::ONE.to_f64() == 1.0, "one");
    ensure!(F8E8M0::MIN.to_f64() == 2f64.powi(-127), "min");
    ensure!(F8E8M0::MAX.to_f64() == 2f64.powi(127), "max");
    Ok(())
}

/// cudnn_graph.h: CUDNN_DATA_FP8_E8M0 = 15; library_types.h:
/// CUDA_R_8F_UE8M0 = 30. The graph binds an E8M0 buffer to an E8M0 tensor.
fn e8m0_library() -> R {
    ensure!(F8E8M0::CUDNN.0 == 15, "cudnn code {}", F8E8M0::CUDNN.0);
    ensure!(F8E8M0::CUDA.0 == 30, "cuda code {}", F8E8M0::CUDA.0);
    ensure!(F8E8M0::SIZE == 1, "size");
    ensure!(F8E8M0::NAME == DType::Fp8E8M0.name(), "name");
    ensure!(
        DType::of::<F8E8M0>() == Some(DType::Fp8E8M0),
        "graph dtype {:?}",
        DType::of::<F8E8M0>()
    );
    Ok(())
}

fn block(head: &[f64]) -> Vec<f64> {
    let mut b = head.to_vec();
    b.resize(BLOCK, 0.0);
    b
}

/// Hand-computed blocks (E4M3 max 448 = 1.75·2^8, E5M2 max 57344 = 1.75·2^15).
fn hand_quantize() -> R {
    let e4 = Fp8Format::E4M3;
    let e5 = Fp8Format::E5M2;
    // amax 448: 448 / 448 = 1 = 2^0 -> code 127; 448 -> 0x7E, 1 -> 0x38,
    // -448 -> 0xFE.
    let q = quantize(&block(&[448.0, 1.0, -448.0]), 32, e4)?;
    ensure!(q.scales == [127], "{:?}", q.scales);
    ensure!(
        q.values[..4] == [0x7E, 0x38, 0xFE, 0x00],
        "{:?}",
        &q.values[..4]
    );
    // amax 449: just over 448 -> 2^1; 449 / 2 = 224.5 -> 224 (E4M3 step 16
    // in [128, 256)) = 1.75·2^7 = 0 1110 110 = 0x76.
    let q = quantize(&block(&[449.0]), 32, e4)?;
    ensure!(
        q.scales == [128] && q.values[0] == 0x76,
        "449: {:?} {:#x}",
        q.scales,
        q.values[0]
    );
    // amax 1: 1/448 -> 2^-8 (2^-9 = 1/512 is too small) -> code 119;
    // 1 · 256 = 2^8 = 0 1111 000 = 0x78; 0.3 · 256 = 76.8 -> 80 (step 8 in
    // [64, 128)) = 1.25·2^6 = 0 1101 010 = 0x6A.
    let q = quantize(&block(&[1.0, 0.3]), 32, e4)?;
    ensure!(q.scales == [119], "{:?}", q.scales);
    ensure!(q.values[..2] == [0x78, 0x6A], "{:?}", &q.values[..2]);
    // E5M2, amax 1: 1/57344 -> 2^-15 -> code 112; 1 · 2^15 = 0 11110 00 = 0x78.
    let q = quantize(&block(&[-0.5, 1.0]), 32, e5)?;
    ensure!(q.scales == [112], "{:?}", q.scales);
    // -0.5 · 2^15 = -2^14 = 1 11101 00 = 0xF4.
    ensure!(q.values[..2] == [0xF4, 0x78], "{:?}", &q.values[..2]);
    // A block of zeros: the smallest scale (code 0), zeros.
    let q = quantize(&[0.0; 32], 32, e4)?;
    ensure!(q.scales == [0] && q.values.iter().all(|&c| c == 0), "zeros");
    // Past 448 · 2^127: the largest scale (254), values saturated (0x7E).
    let q = quantize(&block(&[1e300]), 32, e4)?;
    ensure!(
        q.scales == [254] && q.values[0] == 0x7E,
        "huge {:?}",
        q.scales
    );
    // Two rows of two blocks each: one scale per block, row-major.
    let mut x = vec![0.0; 128];
    x[0] = 448.0; // row 0 block 0: 2^0
    x[32] = 1.0; // row 0 block 1: 2^-8
    x[64] = 896.0; // row 1 block 0: 2^1
    x[96] = 3.5; // row 1 block 1: 3.5/448 = 2^-7 exactly -> 2^-7
    let q = quantize(&x, 64, e4)?;
    ensure!(q.scales == [127, 119, 128, 120], "{:?}", q.scales);
    ensure!(
        scale_code(3.5, e4)? == 120 && scale_code(3.5000001, e4)? == 121,
        "exact edge"
    );
    Ok(())
}

fn hand_dequantize() -> R {
    let e4 = Fp8Format::E4M3;
    // 0x38 = 1.0 with 2^3 -> 8; 0x76 = 224 with 2^3 -> 1792; 0xFE = -448
    // with 2^-8 -> -1.75.
    let mut v = vec![0u8; 64];
    v[0] = 0x38;
    v[1] = 0x76;
    v[32] = 0xFE;
    let y = dequantize(&v, &[130, 119], 64, e4)?;
    ensure!(
        y[0] == 8.0 && y[1] == 1792.0 && y[32] == -1.75,
        "{:?}",
        &y[..2]
    );
    // 224 · 2 = 448.
    let y = dequantize(&v, &[128, 0xFF], 32, e4)?;
    ensure!(y[1] == 448.0, "{}", y[1]);
    ensure!(y[32].is_nan() && y[40].is_nan(), "NaN scale gives NaN");
    // Quantize then dequantize a hand block: 449 -> 448.
    let q = quantize(&block(&[449.0, 1.0]), 32, e4)?;
    let y = dequantize(&q.values, &q.scales, 32, e4)?;
    ensure!(y[0] == 448.0 && y[1] == 1.0, "{:?}", &y[..2]);
    Ok(())
}

fn rejects() -> R {
    let e4 = Fp8Format::E4M3;
    let bad = |r: cudnn::Result<_>, what: &str| -> R {
        match r {
            Err(Error::InvalidArgument { .. } | Error::Mismatch { .. }) => Ok(()),
            other => Err(format!("{what}: {other:?}").into()),
        }
    };
    bad(quantize(&[0.0; 48], 48, e4).map(|_| ()), "row 48")?;
    bad(quantize(&[0.0; 64], 0, e4).map(|_| ()), "row 0")?;
    bad(quantize(&[0.0; 48], 32, e4).map(|_| ()), "length 48")?;
    bad(quantize(&block(&[f64::NAN]), 32, e4).map(|_| ()), "NaN")?;
    bad(
        quantize(&block(&[f64::INFINITY]), 32, e4).map(|_| ()),
        "inf",
    )?;
    bad(
        dequantize(&[0; 64], &[127], 64, e4).map(|_| ()),
        "one scale for two blocks",
    )?;
    bad(dequantize(&[0; 32], &[127], 16, e4).map(|_| ()), "row 16")?;
    bad(scale_code(-1.0, e4).map(|_| ()), "negative amax")?;
    bad(scale_code(f64::NAN, e4).map(|_| ()), "NaN amax")?;
    ensure!(
        quantize(&[], 32, e4)?
            == cudnn::reference::block_scale::Mxfp8 {
                values: vec![],
                scales: vec![]
            },
        "empty"
    );
    Ok(())
}

/// Random blocks: the scale is the smallest power of two that fits amax
/// (amax / scale <= vmax < amax / (scale / 2), unless clamped at 2^-127),
/// every value round-trips within half a step of its format at its
/// magnitude, and random adversarial inputs never panic.
fn fuzz() -> R {
    let seed = crate::support::fuzz_seed(0x0b5_25b);
    let mut runner = TestRunner::new(Config {
        cases: 2_000,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(seed),
        ..Config::default()
    });
    let strat = (
        prop::collection::vec(
            prop_oneof![
                4 => -1e3f64..1e3,
                1 => -1e-30f64..1e-30,
                1 => prop::sample::select(vec![0.0, -0.0, 448.0, 449.0, 57344.0, 1e38, f64::NAN, f64::INFINITY]),
            ],
            0..130,
        ),
        prop::sample::select(vec![0usize, 16, 32, 64, 96]),
        any::<bool>(),
    );
    runner
        .run(&strat, |(x, row, e5)| {
            let fmt = if e5 { Fp8Format::E5M2 } else { Fp8Format::E4M3 };
            let q = match quantize(&x, row, fmt) {
                Ok(q) => q,
                Err(Error::InvalidArgument { .. }) => return Ok(()),
                Err(e) => return Err(TestCaseError::fail(format!("untyped {e:?}"))),
            };
            let y = dequantize(&q.values, &q.scales, row, fmt)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            for (b, (xb, yb)) in x.chunks(BLOCK).zip(y.chunks(BLOCK)).enumerate() {
                let amax = xb.iter().fold(0.0f64, |m, v| m.max(v.abs()));
                let s = e8m0_value(q.scales[b]);
                prop_assert!(
                    amax / s <= fmt.max() || q.scales[b] == 254,
                    "fits {amax} {s}"
                );
                prop_assert!(
                    q.scales[b] == 0 || amax / (s / 2.0) > fmt.max(),
                    "smallest {amax} {s}"
                );
                // Half a step: u·|x| for normal values, half the smallest
                // subnormal (2^-10 E4M3, 2^-17 E5M2) times the scale below.
                let sub = if e5 { 2f64.powi(-17) } else { 2f64.powi(-10) };
                for (&xv, &yv) in xb.iter().zip(yb) {
                    let err = (xv - yv).abs();
                    prop_assert!(
                        err <= fmt.unit_roundoff() * xv.abs() + sub * s,
                        "{xv} -> {yv} (scale {s})"
                    );
                }
            }
            Ok(())
        })
        .map_err(|e| format!("{e}"))?;
    Ok(())
}
