//! The logit softcap for the reference (issue 24): the scaled score `s`
//! becomes `cap * tanh(s / cap)` before every mask, and the backward
//! multiplies the score gradient by its derivative `1 - tanh²(s / cap)`.
//! [`forward`](super::forward) and [`backward`](super::backward) apply it
//! when [`SdpaConfig::softcap`](super::SdpaConfig::softcap) is set.

use crate::error::{Error, Result};

/// `cap * tanh(s / cap)`, or `s` without a cap.
pub(super) fn cap(softcap: Option<f64>, s: f64) -> f64 {
    match softcap {
        Some(c) => c * (s / c).tanh(),
        None => s,
    }
}

/// `d cap(s) / d s = 1 - tanh²(s / cap)`, or 1 without a cap.
pub(super) fn cap_grad(softcap: Option<f64>, s: f64) -> f64 {
    match softcap {
        Some(c) => {
            let t = (s / c).tanh();
            1.0 - t * t
        }
        None => 1.0,
    }
}

/// The cap must be finite and > 0.
pub(super) fn check(softcap: Option<f64>) -> Result<()> {
    match softcap {
        Some(c) if !(c.is_finite() && c > 0.0) => {
            Err(Error::invalid("softcap", "must be finite and > 0", c))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_softcap_hand_values() {
        // tanh(1) = 0.7615941559557649; cap 2 at s = 2: 2 tanh(1).
        assert!((cap(Some(2.0), 2.0) - 2.0 * 0.761_594_155_955_764_9).abs() < 1e-15);
        assert_eq!(cap(None, 7.5), 7.5);
        // Odd, bounded by the cap, identity near 0.
        assert!((cap(Some(3.0), -1.0) + cap(Some(3.0), 1.0)).abs() < 1e-15);
        assert!(cap(Some(3.0), 1e9) <= 3.0);
        assert!((cap(Some(50.0), 1e-6) - 1e-6).abs() < 1e-18);
        // The derivative: 1 - tanh²(1) = 0.41997434161402614 at s = cap.
        assert!((cap_grad(Some(2.0), 2.0) - 0.419_974_341_614_026_14).abs() < 1e-15);
        assert_eq!(cap_grad(None, 3.0), 1.0);
        for c in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(check(Some(c)).is_err(), "{c}");
        }
        assert!(check(Some(1e-3)).is_ok() && check(None).is_ok());
    }
}
