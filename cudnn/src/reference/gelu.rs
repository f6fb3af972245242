//! The two GELU forms in `f64`, side by side.
//!
//! | form | formula | cuDNN graph | cuBLASLt |
//! |---|---|---|---|
//! | erf (exact) | `0.5·x·(1 + erf(x/√2))` | [`Pointwise::GeluErf`](crate::graph::Pointwise::GeluErf) = `CUDNN_POINTWISE_GELU_FWD` ([`Graph::gelu_erf`](crate::graph::Graph::gelu_erf)) | none |
//! | tanh (approximation) | `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))` | [`Pointwise::GeluTanh`](crate::graph::Pointwise::GeluTanh) = `CUDNN_POINTWISE_GELU_APPROX_TANH_FWD` ([`Graph::gelu_tanh`](crate::graph::Graph::gelu_tanh)) | every GELU epilogue: [`Epilogue::GeluTanh`](crate::blas::Epilogue::GeluTanh) = `CUBLASLT_EPILOGUE_GELU`, and its `Aux`, `Bias`, `AuxBias` and `DGeluTanh*` siblings |
//!
//! PyTorch's `nn.GELU()` is the erf form, `nn.GELU(approximate="tanh")` the
//! tanh form. The two differ by up to 4.7·10⁻⁴ (at x ≈ -2.7), far
//! more than an f32 tolerance: compare a result with the form that made it.

/// √(2/π), the tanh form's scale.
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
/// The tanh form's cubic coefficient.
const CUBIC: f64 = 0.044_715;
/// 1/√2.
const FRAC_1_SQRT_2: f64 = std::f64::consts::FRAC_1_SQRT_2;
/// 2/√π.
const FRAC_2_SQRT_PI: f64 = std::f64::consts::FRAC_2_SQRT_PI;

/// GELU, tanh approximation (cuBLASLt's GELU epilogues, cuDNN's
/// `GELU_APPROX_TANH_FWD`): `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`.
pub fn gelu_tanh(x: f64) -> f64 {
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + CUBIC * x * x * x)).tanh())
}

/// The derivative of [`gelu_tanh`] (cuBLASLt's `DGELU` epilogues, cuDNN's
/// `GELU_APPROX_TANH_BWD`).
pub fn gelu_tanh_grad(x: f64) -> f64 {
    let u = SQRT_2_OVER_PI * (x + CUBIC * x * x * x);
    let t = u.tanh();
    let du = SQRT_2_OVER_PI * (1.0 + 3.0 * CUBIC * x * x);
    0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du
}

/// GELU, erf form (cuDNN's `GELU_FWD`): `0.5·x·(1 + erf(x/√2))`, computed
/// as `0.5·x·erfc(-x/√2)` so the small values left of 0 keep their digits.
pub fn gelu_erf(x: f64) -> f64 {
    0.5 * x * erfc(-x * FRAC_1_SQRT_2)
}

/// The derivative of [`gelu_erf`] (cuDNN's `GELU_BWD`):
/// `Φ(x) + x·φ(x)`.
pub fn gelu_erf_grad(x: f64) -> f64 {
    let pdf = (-0.5 * x * x).exp() * FRAC_1_SQRT_2 * 0.5 * FRAC_2_SQRT_PI;
    0.5 * erfc(-x * FRAC_1_SQRT_2) + x * pdf
}

/// Below this, the Maclaurin series of `erf`; above, the continued
/// fraction of `erfc`.
const SERIES_BELOW: f64 = 1.5;

/// `erf(a)` for `0 <= a < SERIES_BELOW`:
/// `2/√π · Σ (-1)^n a^(2n+1) / (n! (2n+1))`.
fn erf_series(a: f64) -> f64 {
    let x2 = a * a;
    let mut term = a; // (-1)^n a^(2n+1) / n!
    let mut sum = a;
    let mut n = 0.0;
    while term.abs() > 1e-17 * sum.abs() {
        n += 1.0;
        term *= -x2 / n;
        sum += term / (2.0 * n + 1.0);
    }
    FRAC_2_SQRT_PI * sum
}

/// `erfc(a)` for `a >= SERIES_BELOW`:
/// `exp(-a²)/√π · 1/(a + (1/2)/(a + 1/(a + (3/2)/(a + ...))))`, evaluated
/// from its 200th term back (converged to the last bit from 1.5 up).
fn erfc_fraction(a: f64) -> f64 {
    if a > 27.0 {
        return 0.0;
    }
    let mut f = a;
    for k in (1..=200).rev() {
        f = a + f64::from(k) * 0.5 / f;
    }
    (-a * a).exp() * 0.5 * FRAC_2_SQRT_PI / f
}

/// The error function, to about 1e-15 (the standard library has none).
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    let a = x.abs();
    let v = if a < SERIES_BELOW {
        erf_series(a)
    } else {
        1.0 - erfc_fraction(a)
    };
    if x < 0.0 { -v } else { v }
}

/// The complementary error function `1 - erf(x)`, to about 1e-15
/// relative for `x >= 0` (where it is small).
pub fn erfc(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    let a = x.abs();
    let c = if a < SERIES_BELOW {
        1.0 - erf_series(a)
    } else {
        erfc_fraction(a)
    };
    if x < 0.0 { 2.0 - c } else { c }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(got: f64, want: f64, tol: f64) -> bool {
        (got - want).abs() <= tol * want.abs().max(1e-300)
    }

    // Values computed by hand (Python's `math.erf` and `math.tanh` on the
    // formulas above), independent of this module.
    #[test]
    fn erf_matches_known_values() {
        for (x, want) in [
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (2.4999, 0.999_592_830_099_666_6),
            (2.5, 0.999_593_047_982_555),
            (5.0, 0.999_999_999_998_462_6),
            (3.0, 0.999_977_909_503_001_4),
            (-1.0, -0.842_700_792_949_714_9),
        ] {
            assert!(close(erf(x), want, 1e-14), "erf({x}) = {}", erf(x));
        }
        // erfc keeps its digits where it is small.
        for (x, want) in [
            (2.121_320_343_559_642_4, 0.002_699_796_063_260_191_3),
            (5.0, 1.537_459_794_428_035_1e-12),
        ] {
            assert!(close(erfc(x), want, 1e-13), "erfc({x}) = {}", erfc(x));
        }
        assert_eq!(erf(0.0), 0.0);
        assert_eq!(erf(40.0), 1.0);
        assert!(erf(f64::NAN).is_nan());
    }

    #[test]
    fn gelu_erf_matches_hand_values() {
        for (x, want) in [
            (-3.0, -0.004_049_694_094_890_31),
            (-1.0, -0.158_655_253_931_457_07),
            (0.5, 0.345_731_230_637_006_56),
            (1.0, 0.841_344_746_068_542_9),
            (2.0, 1.954_499_736_103_641_6),
            (3.0, 2.995_950_305_905_11),
        ] {
            assert!(
                close(gelu_erf(x), want, 1e-13),
                "gelu_erf({x}) = {}",
                gelu_erf(x)
            );
        }
    }

    #[test]
    fn gelu_tanh_matches_hand_values() {
        for (x, want) in [
            (-3.0, -0.003_637_392_081_772_994_3),
            (-1.0, -0.158_808_009_391_723_24),
            (0.5, 0.345_714_009_825_143_94),
            (1.0, 0.841_191_990_608_276_8),
            (2.0, 1.954_597_694_087_775),
            (3.0, 2.996_362_607_918_227),
        ] {
            assert!(
                close(gelu_tanh(x), want, 1e-13),
                "gelu_tanh({x}) = {}",
                gelu_tanh(x)
            );
        }
    }

    #[test]
    fn the_two_forms_differ_by_more_than_an_f32_tolerance() {
        // At x = -3 they differ by 4.1e-4 (hand values above).
        assert!((gelu_erf(-3.0) - gelu_tanh(-3.0)).abs() > 4e-4);
    }

    #[test]
    fn gradients_match_central_differences() {
        for x in [-3.0, -1.0, -0.25, 0.0, 0.5, 1.0, 2.0, 3.0] {
            let h = 1e-5;
            let fd = (gelu_erf(x + h) - gelu_erf(x - h)) / (2.0 * h);
            assert!((gelu_erf_grad(x) - fd).abs() < 1e-8, "erf form at {x}");
            let fd = (gelu_tanh(x + h) - gelu_tanh(x - h)) / (2.0 * h);
            assert!((gelu_tanh_grad(x) - fd).abs() < 1e-8, "tanh form at {x}");
        }
    }

    proptest::proptest! {
        #[test]
        fn erf_is_odd_bounded_and_monotone(x in -30.0f64..30.0, d in 0.0f64..1.0) {
            let e = erf(x);
            proptest::prop_assert!((-1.0..=1.0).contains(&e));
            proptest::prop_assert_eq!(erf(-x), -e);
            proptest::prop_assert!(erf(x + d) >= e - 1e-15);
            proptest::prop_assert!((erf(x) + erfc(x) - 1.0).abs() < 1e-15);
        }

        // gelu(x) - gelu(-x) = x for both forms (erf and tanh are odd), and
        // the forms differ by at most 4.8e-4 (at x = -2.70; computed apart).
        #[test]
        fn gelu_forms_are_consistent(x in -40.0f64..40.0) {
            let tol = 1e-12 * x.abs().max(1.0);
            proptest::prop_assert!((gelu_erf(x) - gelu_erf(-x) - x).abs() <= tol);
            proptest::prop_assert!((gelu_tanh(x) - gelu_tanh(-x) - x).abs() <= tol);
            proptest::prop_assert!((gelu_erf(x) - gelu_tanh(x)).abs() <= 4.8e-4);
            proptest::prop_assert!(gelu_erf_grad(x).is_finite() && gelu_tanh_grad(x).is_finite());
        }
    }
}
