//! FP8 element types (unit tier: no library, no device): every code of both
//! formats decodes to its hand-computed value and round-trips; conversions
//! round to nearest even and saturate or overflow as NVIDIA's `cuda_fp8.h`
//! documents (boundaries hand-computed from the format definitions and the
//! thresholds NVIDIA's header names: 448 + ulp/2 = 464, 57 344 + ulp/2 =
//! 61 440); random inputs agree with a brute-force nearest-even search over
//! all 256 codes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use cudnn::blas::{Epilogue, Layout};
use cudnn::reference::gemm::{gemm, max_relative_error};
use cudnn::reference::gemm_fp8::{Fp8Scales, OutputType, gemm_fp8, tolerance};
use cudnn::{DataType, Error, F8E4M3, F8E5M2, Fp8Format, Fp8Saturation};
use proptest::prelude::*;
use support::*;

type R = Result<(), libtest_mimic::Failed>;

pub fn main() {
    run(vec![
        unit("e4m3_every_code_hand_value", e4m3_codes),
        unit("e5m2_every_code_hand_value", e5m2_codes),
        unit("e5m2_is_the_top_byte_of_f16", e5m2_vs_half),
        unit("every_code_round_trips", round_trip),
        unit("e4m3_rounding_boundaries", e4m3_bounds),
        unit("e5m2_rounding_boundaries", e5m2_bounds),
        unit("nan_and_infinity_inputs", specials),
        unit("random_inputs_match_brute_force_nearest_even", brute_force),
        unit("every_f16_and_bf16_matches_ml_dtypes", against_ml_dtypes),
        unit("datatype_codes", codes),
        unit("comparison_is_by_value", comparison),
        unit("reference_gemm_fp8_hand_2x2", ref_hand),
        unit("reference_gemm_fp8_scales_fold_into_alpha_beta", ref_fold),
        unit("reference_gemm_fp8_saturates_fp8_output", ref_saturate),
        unit("reference_gemm_fp8_amax_nan_in_any_position", ref_amax_nan),
        unit("reference_gemm_fp8_rejects", ref_rejects),
        unit("reference_gemm_fp8_tolerance", ref_tolerance),
        unit("fuzz_reference_gemm_fp8", ref_fuzz),
        unit(
            "reference_gemm_fp8_empty_with_huge_extent_is_instant",
            ref_empty_huge,
        ),
    ])
}

fn ensure(c: bool, msg: impl FnOnce() -> String) -> R {
    if c { Ok(()) } else { Err(msg().into()) }
}

/// The hand definition: E4M3 = sign, 4-bit exponent (bias 7), 3-bit
/// mantissa; exponent 0 is subnormal m/8 * 2^-6; S.1111.111 is NaN.
fn e4m3_by_hand(code: u8) -> Option<f64> {
    let s = if code & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = i32::from((code >> 3) & 0xF);
    let m = f64::from(code & 7);
    if code & 0x7F == 0x7F {
        return None;
    }
    Some(if e == 0 {
        s * m / 8.0 * 2f64.powi(-6)
    } else {
        s * (1.0 + m / 8.0) * 2f64.powi(e - 7)
    })
}

/// E5M2 = sign, 5-bit exponent (bias 15), 2-bit mantissa; exponent 31 is
/// infinity (m = 0) or NaN.
fn e5m2_by_hand(code: u8) -> Option<f64> {
    let s = if code & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = i32::from((code >> 2) & 0x1F);
    let m = f64::from(code & 3);
    Some(if e == 31 {
        if m != 0.0 {
            return None;
        }
        s * f64::INFINITY
    } else if e == 0 {
        s * m / 4.0 * 2f64.powi(-14)
    } else {
        s * (1.0 + m / 4.0) * 2f64.powi(e - 15)
    })
}

fn same(a: f64, b: Option<f64>) -> bool {
    match b {
        None => a.is_nan(),
        Some(b) => a == b && a.is_sign_negative() == b.is_sign_negative(),
    }
}

fn e4m3_codes() -> R {
    let mut nans = 0;
    for c in 0..=255u8 {
        let v = F8E4M3::from_bits(c).to_f64();
        ensure(same(v, e4m3_by_hand(c)), || {
            format!("E4M3 0x{c:02X}: {v} vs {:?}", e4m3_by_hand(c))
        })?;
        nans += usize::from(v.is_nan());
    }
    // Landmarks written out by hand.
    let table: [(u8, f64); 10] = [
        (0x00, 0.0),
        (0x01, 0.001953125), // 2^-9, smallest subnormal
        (0x07, 0.013671875), // 7 * 2^-9
        (0x08, 0.015625),    // 2^-6, smallest normal
        (0x38, 1.0),
        (0x39, 1.125),
        (0x40, 2.0),
        (0x7D, 416.0),
        (0x7E, 448.0),
        (0xFE, -448.0),
    ];
    for (c, want) in table {
        let got = F8E4M3::from_bits(c).to_f64();
        ensure(got == want, || {
            format!("E4M3 0x{c:02X} = {got}, want {want}")
        })?;
    }
    ensure(nans == 2, || format!("E4M3 has 2 NaN codes, found {nans}"))?;
    ensure(
        F8E4M3::MAX.to_f64() == 448.0 && F8E4M3::MIN.to_f64() == -448.0,
        || "E4M3 MAX/MIN".into(),
    )
}

fn e5m2_codes() -> R {
    let mut nans = 0;
    for c in 0..=255u8 {
        let v = F8E5M2::from_bits(c).to_f64();
        ensure(same(v, e5m2_by_hand(c)), || {
            format!("E5M2 0x{c:02X}: {v} vs {:?}", e5m2_by_hand(c))
        })?;
        nans += usize::from(v.is_nan());
    }
    let table: [(u8, f64); 9] = [
        (0x01, 1.52587890625e-5), // 2^-16
        (0x04, 6.103515625e-5),   // 2^-14
        (0x3C, 1.0),
        (0x3D, 1.25),
        (0x7A, 49152.0),
        (0x7B, 57344.0),
        (0x7C, f64::INFINITY),
        (0xFC, f64::NEG_INFINITY),
        (0xFB, -57344.0),
    ];
    for (c, want) in table {
        let got = F8E5M2::from_bits(c).to_f64();
        ensure(got == want, || {
            format!("E5M2 0x{c:02X} = {got}, want {want}")
        })?;
    }
    ensure(nans == 6, || format!("E5M2 has 6 NaN codes, found {nans}"))
}

/// E5M2 is binary16 cut to its top byte: the `half` crate decodes the same.
fn e5m2_vs_half() -> R {
    for c in 0..=255u8 {
        let h = half::f16::from_bits(u16::from(c) << 8).to_f64();
        let v = F8E5M2::from_bits(c).to_f64();
        ensure(same(v, (!h.is_nan()).then_some(h)), || {
            format!("0x{c:02X}: {v} vs f16 {h}")
        })?;
    }
    Ok(())
}

fn round_trip() -> R {
    for sat in [Fp8Saturation::SatFinite, Fp8Saturation::NoSat] {
        for c in 0..=255u8 {
            let a = F8E4M3::from_bits(c);
            let b = F8E4M3::from_f64_with(a.to_f64(), sat);
            let b32 = F8E4M3::from_f32_with(a.to_f32(), sat);
            // A NaN decodes to a positive NaN: 0x7F from either width.
            let want = if a.is_nan() { 0x7F } else { c };
            ensure(b.to_bits() == want && b32.to_bits() == want, || {
                format!(
                    "E4M3 0x{c:02X} -> {:02X}/{:02X} ({sat:?})",
                    b.to_bits(),
                    b32.to_bits()
                )
            })?;
            let a = F8E5M2::from_bits(c);
            let inf = a.to_f64().is_infinite();
            let b = F8E5M2::from_f64_with(a.to_f64(), sat);
            let b32 = F8E5M2::from_f32_with(a.to_f32(), sat);
            // A NaN decodes to the f64 of NVIDIA's canonical half NaN
            // 0x7FFF (positive, top fraction bits 11): 0x7E | 11 = 0x7F from
            // double; every NaN from float is 0x7F too.
            let want32 = if a.is_nan() { Some(0x7F) } else { None };
            let want = if a.is_nan() {
                0x7F
            } else if inf && sat == Fp8Saturation::SatFinite {
                // Infinity saturates to the largest finite of its sign.
                (c & 0x80) | 0x7B
            } else {
                c
            };
            ensure(
                b.to_bits() == want && b32.to_bits() == want32.unwrap_or(want),
                || {
                    format!(
                        "E5M2 0x{c:02X} -> {:02X}/{:02X} ({sat:?})",
                        b.to_bits(),
                        b32.to_bits()
                    )
                },
            )?;
        }
    }
    Ok(())
}

fn e4m3(x: f64) -> u8 {
    F8E4M3::from_f64(x).to_bits()
}
fn e4m3_nosat(x: f64) -> u8 {
    F8E4M3::from_f64_with(x, Fp8Saturation::NoSat).to_bits()
}
fn e5m2(x: f64) -> u8 {
    F8E5M2::from_f64(x).to_bits()
}
fn e5m2_nosat(x: f64) -> u8 {
    F8E5M2::from_f64_with(x, Fp8Saturation::NoSat).to_bits()
}

fn check(name: &str, got: u8, want: u8) -> R {
    ensure(got == want, || {
        format!("{name}: got 0x{got:02X}, want 0x{want:02X}")
    })
}

fn e4m3_bounds() -> R {
    // Ties to even in [1, 2): ulp 1/8. 1.0625 is halfway 1.0 (0x38, even)
    // and 1.125 (0x39): -> 1.0. 1.1875 halfway 1.125 / 1.25 (0x3A) -> 1.25.
    check("1.0625", e4m3(1.0625), 0x38)?;
    check("1.0625+", e4m3(1.0625 + 1e-9), 0x39)?;
    check("1.1875", e4m3(1.1875), 0x3A)?;
    check("-1.1875", e4m3(-1.1875), 0xBA)?;
    // Top binade [256, 512): ulp 32. 432 halfway 416 (0x7D, odd) / 448 -> 448.
    check("432", e4m3(432.0), 0x7E)?;
    check("424", e4m3(424.0), 0x7D)?;
    // 464 = 448 + ulp/2: the tie goes to even 448 in both modes.
    check("464 sat", e4m3(464.0), 0x7E)?;
    check("464 nosat", e4m3_nosat(464.0), 0x7E)?;
    // Just past 464: overflow. Saturating 448; non-saturating NaN.
    check("464.001 sat", e4m3(464.001), 0x7E)?;
    check("464.001 nosat", e4m3_nosat(464.001), 0x7F)?;
    check("-464.001 nosat", e4m3_nosat(-464.001), 0xFF)?;
    check("-1e6 sat", e4m3(-1e6), 0xFE)?;
    check("480 nosat", e4m3_nosat(480.0), 0x7F)?;
    // Subnormals: grid 2^-9. 2^-10 is halfway 0 / 2^-9 -> 0 (even).
    check("2^-10", e4m3(2f64.powi(-10)), 0x00)?;
    check("-2^-10", e4m3(-(2f64.powi(-10))), 0x80)?;
    check("2^-10+", e4m3(2f64.powi(-10) * 1.001), 0x01)?;
    // 3 * 2^-10 halfway 2^-9 (0x01) / 2 * 2^-9 (0x02) -> 0x02.
    check("3*2^-10", e4m3(3.0 * 2f64.powi(-10)), 0x02)?;
    // 15 * 2^-10 halfway 7 * 2^-9 (0x07) / 2^-6 (0x08, even) -> 0x08.
    check("15*2^-10", e4m3(15.0 * 2f64.powi(-10)), 0x08)?;
    check("tiny", e4m3(1e-30), 0x00)?;
    // f32 entry point agrees.
    check("f32 1.1875", F8E4M3::from_f32(1.1875).to_bits(), 0x3A)?;
    Ok(())
}

fn e5m2_bounds() -> R {
    // [1, 2): ulp 1/4. 1.125 halfway 1.0 (0x3C) / 1.25 (0x3D) -> 1.0.
    check("1.125", e5m2(1.125), 0x3C)?;
    // 1.375 halfway 1.25 (0x3D) / 1.5 (0x3E) -> 1.5.
    check("1.375", e5m2(1.375), 0x3E)?;
    // Top binade [32768, 65536): ulp 8192. 53248 halfway 49152 (0x7A, even)
    // / 57344 (0x7B) -> 49152.
    check("53248", e5m2(53248.0), 0x7A)?;
    // 61440 = 57344 + ulp/2 ties to even 65536: overflow (NVIDIA's
    // threshold 0x1.Ep+15 minus one, so exactly 61440 overflows).
    check("61440 sat", e5m2(61440.0), 0x7B)?;
    check("61440 nosat", e5m2_nosat(61440.0), 0x7C)?;
    check("-61440 nosat", e5m2_nosat(-61440.0), 0xFC)?;
    check("61439 nosat", e5m2_nosat(61439.0), 0x7B)?;
    // Subnormals: grid 2^-16. 2^-17 -> 0; 3 * 2^-17 -> 2 * 2^-16 (0x02).
    check("2^-17", e5m2(2f64.powi(-17)), 0x00)?;
    check("3*2^-17", e5m2(3.0 * 2f64.powi(-17)), 0x02)?;
    // 7 * 2^-17 halfway 3 * 2^-16 (0x03) / 2^-14 (0x04) -> 0x04.
    check("7*2^-17", e5m2(7.0 * 2f64.powi(-17)), 0x04)?;
    Ok(())
}

fn specials() -> R {
    // NaN, per the conversion rules in NVIDIA's `cuda_fp8.hpp` (read by
    // hand, values derived here): from `double` the sign is kept, E4M3 gives
    // S.1111.111 and E5M2 gives S.11111.1x with the input's top two fraction
    // bits as mantissa; from `float` every NaN is first made the canonical
    // positive all-ones NaN, which gives 0x7F in both formats.
    let qnan = f64::from_bits(0x7FF8_0000_0000_0000); // fraction bits 10...
    let snan = f64::from_bits(0x7FF4_0000_0000_0000); // fraction bits 01...
    let low = f64::from_bits(0x7FF0_0000_0000_0001); // fraction bits 00...1
    let ones = f64::from_bits(0x7FFF_FFFF_FFFF_FFFF); // fraction bits 11...
    for sat in [Fp8Saturation::SatFinite, Fp8Saturation::NoSat] {
        for (x, name, e4, e5) in [
            (qnan, "nan", 0x7F, 0x7E),
            (-qnan, "-nan", 0xFF, 0xFE),
            // 0x7E | 01 = 0x7F; 0x7E | 00 = 0x7E.
            (snan, "snan", 0x7F, 0x7F),
            (-snan, "-snan", 0xFF, 0xFF),
            (low, "nan 00", 0x7F, 0x7E),
            (-low, "-nan 00", 0xFF, 0xFE),
            (ones, "nan 11", 0x7F, 0x7F),
        ] {
            check(name, F8E4M3::from_f64_with(x, sat).to_bits(), e4)?;
            check(name, F8E5M2::from_f64_with(x, sat).to_bits(), e5)?;
            let f = x as f32;
            ensure(f.is_nan(), || format!("{name} as f32"))?;
            check(name, F8E4M3::from_f32_with(f, sat).to_bits(), 0x7F)?;
            check(name, F8E5M2::from_f32_with(f, sat).to_bits(), 0x7F)?;
            check(name, F8E5M2::from_f32_with(-f, sat).to_bits(), 0x7F)?;
        }
    }
    check(
        "from_f32(-NaN)",
        F8E4M3::from_f32(-f32::NAN).to_bits(),
        0x7F,
    )?;
    check(
        "from_f64(-NaN)",
        F8E4M3::from_f64(-f64::NAN).to_bits(),
        0xFF,
    )?;
    // Decoding drops the sign and payload, as NVIDIA's decoding to the
    // canonical half NaN 0x7FFF does: the f64 of that half.
    let canonical = half::f16::from_bits(0x7FFF).to_f64().to_bits();
    ensure(canonical == 0x7FFF_FC00_0000_0000, || {
        format!("f16 0x7FFF is {canonical:#X}")
    })?;
    for code in [0x7Fu8, 0xFF] {
        let v = F8E4M3::from_bits(code).to_f64();
        ensure(v.to_bits() == canonical, || {
            format!("E4M3 0x{code:02X} decodes to {:#X}", v.to_bits())
        })?;
    }
    for code in [0x7Du8, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF] {
        let v = F8E5M2::from_bits(code).to_f64();
        ensure(v.to_bits() == canonical, || {
            format!("E5M2 0x{code:02X} decodes to {:#X}", v.to_bits())
        })?;
    }
    check("inf e4m3 sat", e4m3(f64::INFINITY), 0x7E)?;
    check("-inf e4m3 sat", e4m3(f64::NEG_INFINITY), 0xFE)?;
    check("inf e4m3 nosat", e4m3_nosat(f64::INFINITY), 0x7F)?;
    check("inf e5m2 sat", e5m2(f64::INFINITY), 0x7B)?;
    check("-inf e5m2 nosat", e5m2_nosat(f64::NEG_INFINITY), 0xFC)?;
    check("f32::MAX e5m2", F8E5M2::from_f32(f32::MAX).to_bits(), 0x7B)?;
    check("-0", e4m3(-0.0), 0x80)?;
    check("-0 e5m2", e5m2(-0.0), 0x80)?;
    ensure(F8E5M2::INFINITY.to_f64() == f64::INFINITY, || {
        "INFINITY".into()
    })?;
    ensure(F8E4M3::NAN.is_nan() && F8E5M2::NAN.is_nan(), || {
        "NAN".into()
    })
}

/// The nearest finite code to `x` by exhaustive search; ties to the code
/// with an even last bit. `None` past the largest finite value + ulp/2.
fn brute(x: f64, decode: impl Fn(u8) -> f64) -> u8 {
    let mut best: Option<(f64, u8)> = None;
    for c in 0..=255u8 {
        let v = decode(c);
        if !v.is_finite() || (v == 0.0 && v.is_sign_negative() != x.is_sign_negative()) {
            continue;
        }
        let d = (x - v).abs();
        best = match best {
            None => Some((d, c)),
            Some((bd, bc)) if d < bd || (d == bd && c & 1 == 0 && bc & 1 == 1) => Some((d, c)),
            b => b,
        };
    }
    best.map_or(0, |b| b.1)
}

fn brute_force() -> R {
    let mut runner = crate::support::prop_runner(4000);
    // Mix of magnitudes across both ranges, and exact midpoints.
    let strat = (any::<bool>(), -18i32..17, 0u32..(1 << 20), any::<bool>());
    runner
        .run(&strat, |(neg, e, frac, mid)| {
            let mut x = (1.0 + f64::from(frac) / f64::from(1u32 << 20)) * 2f64.powi(e);
            if mid {
                // Snap to a multiple of 2^(e-4): hits E4M3 and E5M2 midpoints.
                x = (x / 2f64.powi(e - 4)).round() * 2f64.powi(e - 4);
            }
            if neg {
                x = -x;
            }
            if x.abs() < 440.0 {
                let got = F8E4M3::from_f64(x).to_bits();
                let want = brute(x, |c| F8E4M3::from_bits(c).to_f64());
                prop_assert_eq!(got, want, "E4M3 {}", x);
            }
            if x.abs() < 57000.0 {
                let got = F8E5M2::from_f64(x).to_bits();
                let want = brute(x, |c| F8E5M2::from_bits(c).to_f64());
                prop_assert_eq!(got, want, "E5M2 {}", x);
            }
            Ok(())
        })
        .map_err(|e| e.to_string().into())
}

/// FNV-1a (64-bit) of a byte sequence.
fn fnv1a(bytes: impl Iterator<Item = u8>) -> u64 {
    bytes.fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Every one of the 65 536 f16 and the 65 536 bf16 values converted with
/// `NoSat` agrees with an independent implementation: JAX's `ml_dtypes`
/// 0.7.0 (`float8_e4m3fn`, `float8_e5m2`; round to nearest even, overflow
/// to NaN / infinity, the same as NVIDIA's `__NV_NOSAT`; it gives 448 for
/// 464, NaN for 464.5, infinity for 61 440). The tables are compared by
/// their FNV-1a hash over the 65 536 codes in input-bit order, NaN results
/// written as 0x7F. Generated with numpy 2.4 by
/// `codes = x.astype(float32).astype(fmt).view(uint8); codes[isnan] = 0x7F`.
fn against_ml_dtypes() -> R {
    let f16s = || (0..=u16::MAX).map(|b| half::f16::from_bits(b).to_f64());
    let bf16s = || (0..=u16::MAX).map(|b| half::bf16::from_bits(b).to_f64());
    let nosat = Fp8Saturation::NoSat;
    let e4 = |x: f64| {
        let v = F8E4M3::from_f64_with(x, nosat);
        if v.is_nan() { 0x7F } else { v.to_bits() }
    };
    let e5 = |x: f64| {
        let v = F8E5M2::from_f64_with(x, nosat);
        if v.is_nan() { 0x7F } else { v.to_bits() }
    };
    let cases: [(&str, u64, u64); 4] = [
        ("f16 -> e4m3", fnv1a(f16s().map(e4)), 0x80b3_b2f0_8017_5525),
        ("f16 -> e5m2", fnv1a(f16s().map(e5)), 0x304f_eac1_1599_3fa5),
        (
            "bf16 -> e4m3",
            fnv1a(bf16s().map(e4)),
            0xe990_f486_7348_3715,
        ),
        (
            "bf16 -> e5m2",
            fnv1a(bf16s().map(e5)),
            0xa701_dd20_1af2_79e5,
        ),
    ];
    for (name, got, want) in cases {
        ensure(got == want, || {
            format!("{name}: table hash {got:#x}, ml_dtypes {want:#x}")
        })?;
    }
    Ok(())
}

fn codes() -> R {
    use cudnn::sys::cudart::cudaDataType_t as C;
    use cudnn::sys::cudnn::cudnnDataType_t as D;
    ensure(
        F8E4M3::CUDA == C::CUDA_R_8F_E4M3 && F8E5M2::CUDA == C::CUDA_R_8F_E5M2,
        || "CUDA codes".into(),
    )?;
    ensure(
        F8E4M3::CUDNN == D::CUDNN_DATA_FP8_E4M3 && F8E5M2::CUDNN == D::CUDNN_DATA_FP8_E5M2,
        || "cuDNN codes".into(),
    )?;
    ensure(F8E4M3::SIZE == 1 && F8E5M2::SIZE == 1, || "size".into())?;
    ensure(
        F8E4M3::NAME == "fp8e4m3" && F8E5M2::NAME == "fp8e5m2",
        || "names".into(),
    )
}

fn comparison() -> R {
    ensure(F8E4M3::ZERO == F8E4M3::NEG_ZERO, || "+0 == -0".into())?;
    ensure(F8E4M3::NAN != F8E4M3::from_bits(0xFF), || {
        "NaN != NaN".into()
    })?;
    ensure(F8E5M2::from_f32(2.0) > F8E5M2::from_f32(1.5), || {
        "order".into()
    })?;
    let s = format!("{:?}", F8E4M3::from_f32(1.0));
    ensure(s.contains("0x38"), || format!("debug {s}"))
}

fn e4(v: &[f64]) -> Vec<u8> {
    v.iter().map(|&x| F8E4M3::from_f64(x).to_bits()).collect()
}
fn e5(v: &[f64]) -> Vec<u8> {
    v.iter().map(|&x| F8E5M2::from_f64(x).to_bits()).collect()
}

/// A = [1 2; 3 0.5] (E4M3, row-major), B = [1 0.25; 2 4] (E5M2,
/// column-major), C = [1 -1; 0 2] (column-major), alpha 1, beta 1,
/// scales a 0.5, b 4, c 2, d 0.25, D in E4M3.
/// A·B = [1+4, 0.25+8; 3+1, 0.75+2] = [5 8.25; 4 2.75];
/// x = 0.5·4·A·B + 2·C = [12 14.5; 8 9.5]; amax = 14.5;
/// 0.25·x = [3 3.625; 2 2.375] -> E4M3 (ulp 0.25 in [2, 4)):
/// 3, 3.625 is halfway 3.5 (0x4E... mantissa 110) and 3.75 (111) -> 3.5,
/// 2, 2.375 halfway 2.25 (001) / 2.5 (010) -> 2.5.
fn ref_hand() -> R {
    let la = Layout::row_major(2, 2);
    let lb = Layout::col_major(2, 2);
    let ld = Layout::col_major(2, 2);
    let a = e4(&[1.0, 2.0, 3.0, 0.5]);
    let b = e5(&[1.0, 2.0, 0.25, 4.0]); // column-major: columns (1, 2), (0.25, 4)
    let c = [1.0, 0.0, -1.0, 2.0]; // column-major
    let scales = Fp8Scales {
        a: 0.5,
        b: 4.0,
        c: 2.0,
        d: 0.25,
    };
    let r = gemm_fp8(
        1.0,
        (&a, Fp8Format::E4M3, &la),
        (&b, Fp8Format::E5M2, &lb),
        1.0,
        Some(&c),
        &ld,
        OutputType::Fp8(Fp8Format::E4M3),
        &scales,
        Epilogue::None,
        None,
    )?;
    ensure(r.unrounded == [12.0, 8.0, 14.5, 9.5], || {
        format!("x {:?}", r.unrounded)
    })?;
    ensure(r.amax == 14.5, || format!("amax {}", r.amax))?;
    ensure(r.d == [3.0, 2.0, 3.5, 2.5], || format!("d {:?}", r.d))?;
    // Same with a bias epilogue and f32 output: bias per row of the
    // column-major D: [1, -20] -> x = [13 15.5; -12 -10.5]; ReLU zeroes row 2.
    let r = gemm_fp8(
        1.0,
        (&a, Fp8Format::E4M3, &la),
        (&b, Fp8Format::E5M2, &lb),
        1.0,
        Some(&c),
        &ld,
        OutputType::F32,
        &Fp8Scales { d: 1.0, ..scales },
        Epilogue::ReluBias,
        Some(&[1.0, -20.0]),
    )?;
    ensure(r.d == [13.0, 0.0, 15.5, 0.0], || {
        format!("relu bias d {:?}", r.d)
    })?;
    ensure(r.amax == 15.5, || format!("relu bias amax {}", r.amax))
}

/// The scales are exactly alpha' = alpha·sa·sb and beta' = beta·sc of a
/// plain GEMM on the decoded values (f32 output, powers of two keep it exact).
fn ref_fold() -> R {
    let (m, n, k) = (3, 5, 32);
    let la = Layout::row_major(m, k);
    let lb = Layout::col_major(k, n);
    let ld = Layout::row_major(m, n);
    let av: Vec<f64> = (0..m * k)
        .map(|i| ((i * 7 % 13) as f64 - 6.0) / 4.0)
        .collect();
    let bv: Vec<f64> = (0..k * n)
        .map(|i| ((i * 5 % 11) as f64 - 5.0) / 2.0)
        .collect();
    let c: Vec<f64> = (0..m * n).map(|i| i as f64 - 7.0).collect();
    let (a, b) = (e4(&av), e4(&bv));
    let a_dec: Vec<f64> = a.iter().map(|&x| Fp8Format::E4M3.decode(x)).collect();
    let b_dec: Vec<f64> = b.iter().map(|&x| Fp8Format::E4M3.decode(x)).collect();
    let scales = Fp8Scales {
        a: 0.25,
        b: 8.0,
        c: 0.5,
        d: 1.0,
    };
    let r = gemm_fp8(
        1.5,
        (&a, Fp8Format::E4M3, &la),
        (&b, Fp8Format::E4M3, &lb),
        -2.0,
        Some(&c),
        &ld,
        OutputType::F32,
        &scales,
        Epilogue::None,
        None,
    )?;
    let mut want = c.clone();
    gemm(
        1.5 * 2.0,
        &a_dec,
        &la,
        &b_dec,
        &lb,
        -2.0 * 0.5,
        &mut want,
        &ld,
    )?;
    ensure(r.d == want, || format!("{:?} vs {want:?}", r.d))?;
    let amax = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    ensure(r.amax == amax, || format!("amax {} vs {amax}", r.amax))
}

/// A NaN element makes amax NaN wherever it lies in D: first or last in
/// the visiting order (D = A·[1; 1] with a NaN code in one row of A).
fn ref_amax_nan() -> R {
    let la = Layout::row_major(2, 2);
    let lb = Layout::col_major(2, 1);
    let ld = Layout::col_major(2, 1);
    let b = e4(&[1.0, 1.0]);
    for (rows, name) in [
        ([0x7Fu8, 0x00, 0x38, 0x38], "NaN first"),
        ([0x38, 0x38, 0x7F, 0x00], "NaN last"),
    ] {
        let r = gemm_fp8(
            1.0,
            (&rows, Fp8Format::E4M3, &la),
            (&b, Fp8Format::E4M3, &lb),
            0.0,
            None,
            &ld,
            OutputType::F32,
            &Fp8Scales::default(),
            Epilogue::None,
            None,
        )?;
        // 0x38 is 1.0: the finite row sums to 2.
        ensure(r.unrounded.contains(&2.0), || {
            format!("{name}: x {:?}", r.unrounded)
        })?;
        ensure(r.amax.is_nan(), || format!("{name}: amax {}", r.amax))?;
    }
    Ok(())
}

fn ref_saturate() -> R {
    // 1 x 1 x 16: sum of 16 * (16 * 16) = 4096; scale_d 1 -> E4M3 448,
    // E5M2 4096 exactly; amax 4096 in both.
    let la = Layout::row_major(1, 16);
    let lb = Layout::col_major(16, 1);
    let ld = Layout::col_major(1, 1);
    let a = e4(&[16.0; 16]);
    for (fmt, want) in [(Fp8Format::E4M3, 448.0), (Fp8Format::E5M2, 4096.0)] {
        let r = gemm_fp8(
            1.0,
            (&a, Fp8Format::E4M3, &la),
            (&a, Fp8Format::E4M3, &lb),
            0.0,
            None,
            &ld,
            OutputType::Fp8(fmt),
            &Fp8Scales::default(),
            Epilogue::None,
            None,
        )?;
        ensure(r.d == [want] && r.amax == 4096.0, || {
            format!("{fmt}: {:?} {}", r.d, r.amax)
        })?;
    }
    Ok(())
}

fn ref_rejects() -> R {
    let l = Layout::row_major(2, 2);
    let a = e4(&[1.0; 4]);
    let call = |epi: Epilogue, scales: Fp8Scales, beta: f64| {
        gemm_fp8(
            1.0,
            (&a, Fp8Format::E4M3, &l),
            (&a, Fp8Format::E4M3, &l),
            beta,
            None,
            &l,
            OutputType::BF16,
            &scales,
            epi,
            None,
        )
    };
    let named = |r: cudnn::Result<_>, arg: &str| match r {
        Err(Error::InvalidArgument { arg: got, .. }) if got == arg => Ok(()),
        other => Err(format!("want InvalidArgument naming {arg}, got {other:?}")),
    };
    named(call(Epilogue::DRelu, Fp8Scales::default(), 0.0), "epilogue")?;
    named(
        call(
            Epilogue::None,
            Fp8Scales {
                a: f64::NAN,
                ..Default::default()
            },
            0.0,
        ),
        "scales.a",
    )?;
    named(
        call(
            Epilogue::None,
            Fp8Scales {
                d: 0.0,
                ..Default::default()
            },
            0.0,
        ),
        "scales.d",
    )?;
    named(call(Epilogue::None, Fp8Scales::default(), 1.0), "c")?;
    Ok(())
}

fn ref_tolerance() -> R {
    // E4M3 output: 2 * 2^-4 + k * 2^-24.
    let t = tolerance(1024, OutputType::Fp8(Fp8Format::E4M3), false);
    ensure(
        (t - (0.125 + 1024.0 * 2f64.powi(-24))).abs() < 1e-15,
        || format!("{t}"),
    )?;
    let t = tolerance(64, OutputType::BF16, true);
    ensure(
        (t - (2.0 * 2f64.powi(-8) + 64.0 * 2f64.powi(-14))).abs() < 1e-15,
        || format!("{t}"),
    )?;
    // The metric never passes NaN.
    ensure(
        max_relative_error(&[f64::NAN], &[1.0]).is_infinite(),
        || "nan".into(),
    )
}

/// Random shapes, layouts, formats, scales and epilogues: no panic, and
/// every error is a typed argument error.
fn ref_fuzz() -> R {
    let mut runner = crate::support::prop_runner(300);
    let dims = (
        0usize..6,
        0usize..6,
        0usize..40,
        any::<[bool; 3]>(),
        0usize..16,
    );
    let rest = (
        any::<[bool; 2]>(),
        -2.0f64..2.0,
        prop::sample::select(vec![0.0, 1.0, f64::NAN, -1.0, 1e30]),
        any::<u64>(),
    );
    runner
        .run(
            &(dims, rest),
            |((m, n, k, t, epi), (fm, beta, scale, seed))| {
                let la = if t[0] {
                    Layout::row_major(m, k)
                } else {
                    Layout::col_major(m, k)
                };
                let lb = if t[1] {
                    Layout::row_major(k, n)
                } else {
                    Layout::col_major(k, n)
                };
                let ld = if t[2] {
                    Layout::row_major(m, n)
                } else {
                    Layout::col_major(m, n)
                };
                let a: Vec<u8> = (0..m * k)
                    .map(|i| (seed as usize).wrapping_add(i * 31) as u8)
                    .collect();
                let b: Vec<u8> = (0..k * n)
                    .map(|i| (seed as usize).wrapping_add(i * 17) as u8)
                    .collect();
                let c = vec![1.0; m * n];
                let bias = vec![0.5; m.max(n)];
                let fa = if fm[0] {
                    Fp8Format::E4M3
                } else {
                    Fp8Format::E5M2
                };
                let fb = if fm[1] {
                    Fp8Format::E4M3
                } else {
                    Fp8Format::E5M2
                };
                let e = Epilogue::ALL[epi % Epilogue::ALL.len()];
                let r = gemm_fp8(
                    1.0,
                    (&a, fa, &la),
                    (&b, fb, &lb),
                    beta,
                    Some(&c),
                    &ld,
                    OutputType::Fp8(fb),
                    &Fp8Scales {
                        c: scale,
                        ..Default::default()
                    },
                    e,
                    Some(&bias),
                );
                match r {
                    Ok(out) => prop_assert_eq!(out.d.len(), m * n),
                    Err(Error::InvalidArgument { .. } | Error::Mismatch { .. }) => {}
                    Err(other) => prop_assert!(false, "untyped error {other:?}"),
                }
                Ok(())
            },
        )
        .map_err(|e| e.to_string().into())
}

/// An empty D with a huge other extent (or batch) is answered at once, and a
/// product beyond the work bound is refused, not run.
fn ref_empty_huge() -> R {
    let t = std::time::Instant::now();
    let big = 1usize << 30;
    let la = Layout::row_major(big, 16);
    let lb = Layout::col_major(16, 0);
    let ld = Layout::col_major(big, 0);
    // A would need 2^34 codes: refused by its length check, not looped over.
    let r = gemm_fp8(
        1.0,
        (&[], Fp8Format::E4M3, &la),
        (&[], Fp8Format::E4M3, &lb),
        0.0,
        None,
        &ld,
        OutputType::BF16,
        &Fp8Scales::default(),
        Epilogue::None,
        None,
    );
    ensure(
        matches!(
            r,
            Err(Error::Mismatch { .. } | Error::InvalidArgument { .. })
        ),
        || format!("{r:?}"),
    )?;
    // k = 0 and n = 0 with a huge batch: empty everywhere.
    let la = Layout::row_major(4, 0).batched(big, 0);
    let lb = Layout::col_major(0, 0).batched(big, 0);
    let ld = Layout::col_major(4, 0).batched(big, 4);
    let r = gemm_fp8(
        1.0,
        (&[], Fp8Format::E4M3, &la),
        (&[], Fp8Format::E4M3, &lb),
        0.0,
        None,
        &ld,
        OutputType::BF16,
        &Fp8Scales::default(),
        Epilogue::None,
        None,
    );
    ensure(t.elapsed().as_secs() < 5, || {
        format!("took {:?}: {r:?}", t.elapsed())
    })
}
