//! The two FP8 element types of Hopper and later GPUs, E4M3 and E5M2
//! ("FP8 Formats for Deep Learning", Micikevicius et al. 2022; NVIDIA's
//! `cuda_fp8.h` types `__nv_fp8_e4m3` and `__nv_fp8_e5m2`).
//!
//! | | E4M3 | E5M2 |
//! |---|---|---|
//! | bits | sign, 4 exponent (bias 7), 3 mantissa | sign, 5 exponent (bias 15), 2 mantissa |
//! | largest finite | 448 (`0x7E`) | 57 344 (`0x7B`) |
//! | smallest normal | 2⁻⁶ | 2⁻¹⁴ |
//! | smallest subnormal | 2⁻⁹ | 2⁻¹⁶ |
//! | infinity | none | `0x7C` / `0xFC` |
//! | NaN | `S.1111.111` only | exponent all ones, mantissa ≠ 0 |
//!
//! Conversions from wider types round to nearest, ties to even, and handle
//! values beyond the largest finite one in one of NVIDIA's two modes
//! ([`Fp8Saturation`]): `SatFinite` (the default of the CUDA types'
//! constructors and of the `cvt.rn.satfinite` instruction: ±448 / ±57 344,
//! infinities included) or `NoSat` (E4M3 gives NaN, E5M2 gives ±infinity).
//! "Beyond" means the round-to-nearest-even result with an unbounded exponent
//! exceeds the largest finite value: 464 (448 plus half an ulp, a tie that
//! rounds to even 448) still gives 448 in E4M3, and 61 440 (a tie that rounds
//! to even 65 536) overflows in E5M2, exactly as NVIDIA's host conversion.
//! NaN inputs follow NVIDIA's two host conversions bit for bit: from `f32`
//! (`__nv_cvt_float_to_fp8`, which first makes every NaN the positive
//! all-ones one) every NaN gives the canonical NaN `0x7F` in both formats;
//! from `f64`
//! (`__nv_cvt_double_to_fp8`) a NaN keeps its sign, and in E5M2 its payload
//! is the top two fraction bits of the input (so `f64::NAN` gives `0x7E`,
//! `-f64::NAN` gives `0xFE` in E5M2 and `0xFF` in E4M3). Decoding any NaN
//! code gives the positive NaN of NVIDIA's canonical half NaN `0x7FFF`
//! (its top ten fraction bits set), which encodes back to `0x7F`.
//!
//! Written here rather than taken from the `float8` crate: that crate offers
//! only the saturating mode (cuBLASLt's and PyTorch's non-saturating casts
//! could not be modelled), calls zero and NaN "subnormal" in `classify`, and
//! names the saturation bound `INFINITY`; the encoding needs about a hundred
//! lines and no dependency.

use std::cmp::Ordering;
use std::fmt;

/// What a conversion to FP8 does with a value beyond the largest finite one
/// (NVIDIA's `__nv_saturation_t`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Fp8Saturation {
    /// Clamp to the largest finite value of the sign (`__NV_SATFINITE`,
    /// `cvt.rn.satfinite`); infinities clamp too. NaN stays NaN.
    #[default]
    SatFinite,
    /// No clamping (`__NV_NOSAT`): E4M3 gives NaN (it has no infinity), E5M2
    /// gives infinity of the sign.
    NoSat,
}

/// The parameters of one FP8 format.
struct Format {
    /// Mantissa (fraction) bits.
    man: i32,
    /// Exponent bias.
    bias: i32,
    /// Largest finite value.
    max: f64,
    /// Code of the largest finite value (positive).
    max_code: u8,
    /// What `NoSat` overflow gives (positive; E4M3 NaN, E5M2 infinity).
    overflow_code: u8,
    /// Whether the format has infinities (E5M2), whose NaNs then carry the
    /// input's top fraction bits (`0x7E | payload`, as NVIDIA's conversion
    /// from double); E4M3 has the one NaN magnitude `0x7F`.
    ieee_nan: bool,
}

const E4M3: Format = Format {
    man: 3,
    bias: 7,
    max: 448.0,
    max_code: 0x7E,
    overflow_code: 0x7F,
    ieee_nan: false,
};

const E5M2: Format = Format {
    man: 2,
    bias: 15,
    max: 57344.0,
    max_code: 0x7B,
    overflow_code: 0x7C,
    ieee_nan: true,
};

/// The canonical NaN code of both formats.
const NAN_CODE: u8 = 0x7F;

/// `x` (any f32) in `f` as NVIDIA converts from `float`: every NaN is the
/// canonical `0x7F`, anything else as [`encode`].
fn encode_f32(x: f32, f: &Format, sat: Fp8Saturation) -> u8 {
    if x.is_nan() {
        return NAN_CODE;
    }
    encode(f64::from(x), f, sat)
}

/// 2^k as an f64, exactly (k within the normal range, which every caller's is).
fn pow2(k: i32) -> f64 {
    // Biased exponent in 1..=2046 for |k| <= 1022; clamp keeps the bit
    // pattern a finite power of two for any k.
    let biased = (k + 1023).clamp(1, 2046) as u64;
    f64::from_bits(biased << 52)
}

/// Encode `x` (any f64) in `f`, round to nearest even, as NVIDIA converts
/// from `double` (a NaN keeps its sign; see [`Format::ieee_nan`]).
fn encode(x: f64, f: &Format, sat: Fp8Saturation) -> u8 {
    let sign: u8 = if x.is_sign_negative() { 0x80 } else { 0 };
    if x.is_nan() {
        if f.ieee_nan {
            // The input's top `man` fraction bits, in the code's mantissa.
            let payload = ((x.to_bits() >> (52 - f.man)) & ((1u64 << f.man) - 1)) as u8;
            return 0x7E | payload | sign;
        }
        return NAN_CODE | sign;
    }
    let a = x.abs();
    let overflow = || match sat {
        Fp8Saturation::SatFinite => f.max_code | sign,
        Fp8Saturation::NoSat => f.overflow_code | sign,
    };
    if a.is_infinite() || a > 2.0 * f.max {
        return overflow();
    }
    let min_normal_exp = 1 - f.bias;
    // Exponent of `a` (a is finite; values under 2^-1022 are far below half
    // the smallest subnormal and land in the subnormal branch as 0).
    let e = ((a.to_bits() >> 52) as i32) - 1023;
    if e < min_normal_exp {
        // Subnormal grid: multiples of 2^(1 - bias - man). n in 0..=2^man;
        // n == 2^man is the smallest normal, whose code is that same n.
        let n = (a * pow2(-(min_normal_exp - f.man))).round_ties_even();
        return (n as u8) | sign;
    }
    // Normal: `a` in [2^e, 2^(e+1)); quantum 2^(e - man).
    let n = (a * pow2(f.man - e)).round_ties_even(); // in 2^man..=2^(man+1)
    let r = n * pow2(e - f.man);
    if r > f.max {
        return overflow();
    }
    // (e + bias) << man plus the fraction; n == 2^(man+1) carries into the
    // exponent by the addition. r <= max keeps this within 0..=max_code.
    let biased = (e + f.bias) as u32;
    let code = (biased << f.man) + (n as u32 - (1u32 << f.man));
    (code as u8) | sign
}

/// What every NaN code decodes to: NVIDIA's decoding goes through the
/// canonical positive half NaN `0x7FFF` (sign and payload dropped), whose
/// f64 has the top ten fraction bits set; encoding it again gives `0x7F` in
/// both formats, as NVIDIA's round trip does.
fn decoded_nan() -> f64 {
    f64::from_bits(0x7FFF_FC00_0000_0000)
}

/// Decode `bits` of `f` to f64 (exact). NaN and infinity per format.
fn decode(bits: u8, f: &Format, e4m3: bool) -> f64 {
    let neg = bits & 0x80 != 0;
    let mag = bits & 0x7F;
    let exp_field = i32::from(mag >> f.man);
    let frac = f64::from(mag & ((1u8 << f.man) - 1));
    let exp_max = (1i32 << (7 - f.man)) - 1;
    let v = if e4m3 && mag == 0x7F {
        decoded_nan()
    } else if !e4m3 && exp_field == exp_max {
        if frac == 0.0 {
            f64::INFINITY
        } else {
            decoded_nan()
        }
    } else if exp_field == 0 {
        frac * pow2(1 - f.bias - f.man)
    } else {
        (pow2(f.man) + frac) * pow2(exp_field - f.bias - f.man)
    };
    if neg && !v.is_nan() { -v } else { v }
}

macro_rules! fp8_type {
    ($name:ident, $fmt:ident, $e4m3:literal, $doc:literal) => {
        #[doc = $doc]
        ///
        /// `#[repr(transparent)]` over its byte: a slice of these is the byte
        /// layout the GPU reads, and every byte is a valid value. Comparison
        /// is by value (NaN is unequal to itself, `+0 == -0`); compare
        /// [`to_bits`](Self::to_bits) for identity.
        #[derive(Clone, Copy, Default)]
        #[repr(transparent)]
        pub struct $name(u8);

        impl $name {
            /// Positive zero.
            pub const ZERO: Self = Self(0x00);
            /// Negative zero.
            pub const NEG_ZERO: Self = Self(0x80);
            /// The largest finite value.
            pub const MAX: Self = Self($fmt.max_code);
            /// The most negative finite value.
            pub const MIN: Self = Self($fmt.max_code | 0x80);
            /// The canonical NaN (`0x7F`).
            pub const NAN: Self = Self(NAN_CODE);

            /// The value whose encoding is `bits`.
            pub const fn from_bits(bits: u8) -> Self {
                Self(bits)
            }

            /// The encoding.
            pub const fn to_bits(self) -> u8 {
                self.0
            }

            /// From f32, rounding to nearest even and saturating
            /// ([`Fp8Saturation::SatFinite`], NVIDIA's default); a NaN
            /// gives the canonical NaN `0x7F`.
            pub fn from_f32(x: f32) -> Self {
                Self(encode_f32(x, &$fmt, Fp8Saturation::SatFinite))
            }

            /// From f64, rounding to nearest even and saturating; a NaN
            /// keeps its sign (NVIDIA's conversion from `double`).
            pub fn from_f64(x: f64) -> Self {
                Self(encode(x, &$fmt, Fp8Saturation::SatFinite))
            }

            /// From f64, rounding to nearest even, overflow per `sat`.
            pub fn from_f64_with(x: f64, sat: Fp8Saturation) -> Self {
                Self(encode(x, &$fmt, sat))
            }

            /// From f32, rounding to nearest even, overflow per `sat`.
            pub fn from_f32_with(x: f32, sat: Fp8Saturation) -> Self {
                Self(encode_f32(x, &$fmt, sat))
            }

            /// The exact value as f64.
            pub fn to_f64(self) -> f64 {
                decode(self.0, &$fmt, $e4m3)
            }

            /// The exact value as f32 (every FP8 value is an f32).
            pub fn to_f32(self) -> f32 {
                self.to_f64() as f32
            }

            /// Whether this is a NaN.
            pub fn is_nan(self) -> bool {
                self.to_f64().is_nan()
            }

            /// Whether this is finite (not NaN, not infinite).
            pub fn is_finite(self) -> bool {
                self.to_f64().is_finite()
            }

            /// Round `x` to this format and back (saturating): the value a
            /// kernel sees after a cast to this type.
            pub fn round_f64(x: f64) -> f64 {
                Self::from_f64(x).to_f64()
            }
        }

        impl From<$name> for f32 {
            fn from(v: $name) -> f32 {
                v.to_f32()
            }
        }

        impl From<$name> for f64 {
            fn from(v: $name) -> f64 {
                v.to_f64()
            }
        }

        impl PartialEq for $name {
            fn eq(&self, other: &Self) -> bool {
                self.to_f64() == other.to_f64()
            }
        }

        impl PartialOrd for $name {
            fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
                self.to_f64().partial_cmp(&other.to_f64())
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(
                    f,
                    "{}({:?} = 0x{:02X})",
                    stringify!($name),
                    self.to_f64(),
                    self.0
                )
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.to_f64(), f)
            }
        }
    };
}

fp8_type!(
    F8E4M3,
    E4M3,
    true,
    "FP8 E4M3 (`CUDA_R_8F_E4M3`, `CUDNN_DATA_FP8_E4M3`): 4 exponent bits, 3 mantissa bits, no infinity, largest finite 448."
);
fp8_type!(
    F8E5M2,
    E5M2,
    false,
    "FP8 E5M2 (`CUDA_R_8F_E5M2`, `CUDNN_DATA_FP8_E5M2`): 5 exponent bits, 2 mantissa bits, IEEE-like with infinities, largest finite 57 344."
);

impl F8E5M2 {
    /// Positive infinity (`0x7C`).
    pub const INFINITY: Self = Self(0x7C);
    /// Negative infinity (`0xFC`).
    pub const NEG_INFINITY: Self = Self(0xFC);
}

/// An FP8 format chosen at run time (for code that handles both, such as
/// the references and the cuBLASLt type checks).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Fp8Format {
    /// [`F8E4M3`].
    E4M3,
    /// [`F8E5M2`].
    E5M2,
}

impl Fp8Format {
    /// The exact value of `code` in this format.
    pub fn decode(self, code: u8) -> f64 {
        match self {
            Fp8Format::E4M3 => F8E4M3::from_bits(code).to_f64(),
            Fp8Format::E5M2 => F8E5M2::from_bits(code).to_f64(),
        }
    }

    /// The code of `x` (round to nearest even, overflow per `sat`; a NaN as
    /// [`F8E4M3::from_f64`] / [`F8E5M2::from_f64`] give it).
    pub fn encode(self, x: f64, sat: Fp8Saturation) -> u8 {
        match self {
            Fp8Format::E4M3 => F8E4M3::from_f64_with(x, sat).to_bits(),
            Fp8Format::E5M2 => F8E5M2::from_f64_with(x, sat).to_bits(),
        }
    }

    /// `x` rounded to this format and back (saturating).
    pub fn round(self, x: f64) -> f64 {
        self.decode(self.encode(x, Fp8Saturation::SatFinite))
    }

    /// The largest finite value (448 or 57 344).
    pub fn max(self) -> f64 {
        match self {
            Fp8Format::E4M3 => E4M3.max,
            Fp8Format::E5M2 => E5M2.max,
        }
    }

    /// The unit roundoff of normal values, half an ulp of 1: 2⁻⁴ for E4M3
    /// (3 mantissa bits), 2⁻³ for E5M2 (2 bits).
    pub fn unit_roundoff(self) -> f64 {
        match self {
            Fp8Format::E4M3 => 0.0625,
            Fp8Format::E5M2 => 0.125,
        }
    }

    /// The CUDA type code.
    pub fn cuda(self) -> crate::sys::cudart::cudaDataType_t {
        use crate::sys::cudart::cudaDataType_t as C;
        match self {
            Fp8Format::E4M3 => C::CUDA_R_8F_E4M3,
            Fp8Format::E5M2 => C::CUDA_R_8F_E5M2,
        }
    }

    /// A short name (`"fp8e4m3"`).
    pub fn name(self) -> &'static str {
        match self {
            Fp8Format::E4M3 => "fp8e4m3",
            Fp8Format::E5M2 => "fp8e5m2",
        }
    }
}

impl fmt::Display for Fp8Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
