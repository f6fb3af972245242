//! Scaled FP8 GEMM in `f64`, as cuBLASLt defines it for FP8 inputs:
//!
//! ```text
//! x    = epilogue(alpha · scale_a · scale_b · A·B + beta · scale_c · C (+ bias))
//! amax = max |x|              (over D, before scale_d)
//! D    = round_D(scale_d · x)
//! ```
//!
//! A and B are given as FP8 codes ([`Fp8Format`]) and decoded exactly, so the
//! product is computed on the values the tensor cores see; everything after
//! that is exact in `f64` until the one final rounding to D's type
//! ([`OutputType::round`]: f32, f16 and bf16 round to nearest even; FP8 rounds
//! to nearest even and saturates, NVIDIA's `SatFinite`, which is what the FP8
//! output conversion of the tensor-core epilogue does). `scale_d` multiplies
//! D only for an FP8 D in cuBLASLt (the GEMM checks that it is 1 otherwise).
//!
//! [`tolerance`] derives the bound a GPU result must meet from the formats
//! and k. Bounds on sizes and work: as [`gemm::matmul`],
//! plus the decoded copies of A and B (each at most
//! [`MAX_ELEMENTS`](super::MAX_ELEMENTS)).
//!
//! ```
//! use cudnn::blas::{Epilogue, Layout};
//! use cudnn::reference::gemm_fp8::{Fp8Scales, OutputType, gemm_fp8};
//! use cudnn::{F8E4M3, Fp8Format};
//! // A = [1.5 2], B = [4; 0.5] (k = 2): A·B = 7; scale_a = 2 gives 14.
//! let a = [F8E4M3::from_f32(1.5).to_bits(), F8E4M3::from_f32(2.0).to_bits()];
//! let b = [F8E4M3::from_f32(4.0).to_bits(), F8E4M3::from_f32(0.5).to_bits()];
//! let scales = Fp8Scales { a: 2.0, ..Fp8Scales::default() };
//! let r = gemm_fp8(
//!     1.0, (&a, Fp8Format::E4M3, &Layout::row_major(1, 2)),
//!     (&b, Fp8Format::E4M3, &Layout::col_major(2, 1)),
//!     0.0, None, &Layout::col_major(1, 1), OutputType::F32, &scales,
//!     Epilogue::None, None,
//! )?;
//! assert_eq!((r.d[0], r.amax), (14.0, 14.0));
//! # Ok::<(), cudnn::Error>(())
//! ```

use super::{bounds, gemm};
use crate::blas::{Epilogue, Layout};
use crate::dtype::Fp8Format;
use crate::error::{Error, Result};

/// D's element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutputType {
    /// f32.
    F32,
    /// f16 (IEEE binary16).
    F16,
    /// bf16.
    BF16,
    /// An FP8 format (saturating conversion).
    Fp8(Fp8Format),
}

impl OutputType {
    /// `x` rounded to this type and back.
    pub fn round(self, x: f64) -> f64 {
        match self {
            OutputType::F32 => f64::from(x as f32),
            OutputType::F16 => half::f16::from_f64(x).to_f64(),
            OutputType::BF16 => half::bf16::from_f64(x).to_f64(),
            OutputType::Fp8(f) => f.round(x),
        }
    }

    /// The unit roundoff (half an ulp of 1) of this type.
    pub fn unit_roundoff(self) -> f64 {
        match self {
            OutputType::F32 => f64::from(f32::EPSILON) / 2.0,
            OutputType::F16 => 2f64.powi(-11),
            OutputType::BF16 => 2f64.powi(-8),
            OutputType::Fp8(f) => f.unit_roundoff(),
        }
    }

    /// Whether D is FP8.
    pub fn is_fp8(self) -> bool {
        matches!(self, OutputType::Fp8(_))
    }
}

/// The per-tensor scales (the values behind cuBLASLt's
/// `CUBLASLT_MATMUL_DESC_{A,B,C,D}_SCALE_POINTER`); 1 when not set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fp8Scales {
    /// Multiplies A (a dequantization scale).
    pub a: f64,
    /// Multiplies B.
    pub b: f64,
    /// Multiplies C.
    pub c: f64,
    /// Multiplies the result before D's rounding (a quantization scale).
    pub d: f64,
}

impl Default for Fp8Scales {
    fn default() -> Self {
        Fp8Scales {
            a: 1.0,
            b: 1.0,
            c: 1.0,
            d: 1.0,
        }
    }
}

/// What [`gemm_fp8`] computes.
#[derive(Debug, Clone, PartialEq)]
pub struct Fp8GemmOutput {
    /// D, rounded to its type, laid out as D's layout says (entries outside
    /// the logical matrices are 0).
    pub d: Vec<f64>,
    /// The result before `scale_d` and rounding (for error measurement in
    /// the compute type).
    pub unrounded: Vec<f64>,
    /// `max |x|` over D before `scale_d` (cuBLASLt's `AMAX_D`); NaN when
    /// any element is NaN.
    pub amax: f64,
}

/// The epilogues an FP8 GEMM takes: the forward ones without an auxiliary
/// output.
pub fn supports_epilogue(e: Epilogue) -> bool {
    matches!(
        e,
        Epilogue::None
            | Epilogue::Relu
            | Epilogue::GeluTanh
            | Epilogue::Bias
            | Epilogue::ReluBias
            | Epilogue::GeluTanhBias
    )
}

fn decode(arg: &str, codes: &[u8], f: Fp8Format) -> Result<Vec<f64>> {
    bounds::collect(arg, codes.iter().map(|&c| f.decode(c)))
}

/// Scaled FP8 GEMM (see the module docs). `a` and `b` are
/// `(codes, format, layout)`; `c`, when given, is laid out like `d_layout`
/// (it is D's previous contents in cuBLASLt's in-place use) and read only
/// when `beta != 0`; `bias` is read by the `*Bias` epilogues, one value per
/// element of D's contiguous dimension.
///
/// # Errors
/// The shape checks of [`gemm::matmul`]; an epilogue outside
/// [`supports_epilogue`] (naming `epilogue`); a non-finite or non-positive
/// scale (naming it); `beta != 0` without `c`; a short `c` or `bias`.
#[allow(clippy::too_many_arguments)]
pub fn gemm_fp8(
    alpha: f64,
    a: (&[u8], Fp8Format, &Layout),
    b: (&[u8], Fp8Format, &Layout),
    beta: f64,
    c: Option<&[f64]>,
    d_layout: &Layout,
    out: OutputType,
    scales: &Fp8Scales,
    epilogue: Epilogue,
    bias: Option<&[f64]>,
) -> Result<Fp8GemmOutput> {
    if !supports_epilogue(epilogue) {
        return Err(Error::invalid(
            "epilogue",
            "FP8 GEMM takes None, Relu, GeluTanh, Bias, ReluBias or GeluTanhBias \
             (renamed from Gelu / GeluBias, which remain as deprecated aliases)",
            epilogue,
        ));
    }
    for (name, s) in [
        ("scales.a", scales.a),
        ("scales.b", scales.b),
        ("scales.c", scales.c),
        ("scales.d", scales.d),
    ] {
        if !(s.is_finite() && s > 0.0) {
            return Err(Error::invalid(name, "must be finite and positive", s));
        }
    }
    let (a_codes, af, la) = a;
    let (b_codes, bf, lb) = b;
    la.check_len("a", a_codes.len())?;
    lb.check_len("b", b_codes.len())?;
    let a64 = decode("a", a_codes, af)?;
    let b64 = decode("b", b_codes, bf)?;
    d_layout.validate_output("d")?;
    let len = d_layout
        .required_len()
        .ok_or_else(|| Error::invalid("d", "layout size overflows usize", d_layout.describe()))?;
    let mut x = match c {
        Some(c) if beta != 0.0 => {
            d_layout.check_len("c", c.len())?;
            let mut v = bounds::buffer("c", len)?;
            v.extend(c.iter().take(len).copied());
            v
        }
        None if beta != 0.0 => {
            return Err(Error::invalid("c", "beta != 0 needs C", "None"));
        }
        _ => bounds::zeros("d", len)?,
    };
    gemm::matmul(
        alpha * scales.a * scales.b,
        &a64,
        la,
        &b64,
        lb,
        beta * scales.c,
        &mut x,
        d_layout,
        epilogue,
        bias,
        None,
    )?;
    let mut amax: f64 = 0.0;
    let mut d = bounds::zeros("d", len)?;
    if d_layout.rows() == 0 || d_layout.cols() == 0 {
        // An empty D (whatever its batch count or other extent): nothing to
        // round, and no loop over an extent that holds nothing.
        return Ok(Fp8GemmOutput {
            d,
            unrounded: x,
            amax,
        });
    }
    // Bounded: matmul refused more than MAX_WORK of batch x m x n.
    for p in 0..d_layout.batch_count() {
        for i in 0..d_layout.rows() {
            for j in 0..d_layout.cols() {
                let Some(o) = d_layout.offset(p, i, j) else {
                    continue;
                };
                let (Some(&v), Some(slot)) = (x.get(o), d.get_mut(o)) else {
                    continue;
                };
                // NaN sticks: `f64::max` would drop it at the next finite
                // element, making the result depend on the visiting order.
                amax = if amax.is_nan() || v.is_nan() {
                    f64::NAN
                } else {
                    amax.max(v.abs())
                };
                *slot = out.round(scales.d * v);
            }
        }
    }
    Ok(Fp8GemmOutput {
        d,
        unrounded: x,
        amax,
    })
}

/// Unit roundoff of f32 accumulation.
const F32_ACC: f64 = 5.960_464_477_539_063e-8; // 2^-24
/// Unit roundoff assumed for Hopper's FP8 fast accumulation (the tensor
/// cores keep about 14 significant bits between promotions to f32).
const FAST_ACC: f64 = 6.103_515_625e-5; // 2^-14

/// The relative error bound (against `max |D|`) for a GPU FP8 GEMM checked
/// against [`gemm_fp8`], for inputs whose products do not cancel heavily:
/// the final rounding, `2·u_out` (one rounding, doubled for the scale
/// multiplication in f32), plus accumulation over `k` terms, `k·u_acc`
/// with `u_acc` = 2⁻²⁴ (f32) or 2⁻¹⁴ with fast accumulation. The inputs
/// are exact (the reference decodes the same FP8 codes), so they add
/// nothing.
pub fn tolerance(k: usize, out: OutputType, fast_accum: bool) -> f64 {
    let u_acc = if fast_accum { FAST_ACC } else { F32_ACC };
    2.0 * out.unit_roundoff() + (k.max(1) as f64) * u_acc
}
