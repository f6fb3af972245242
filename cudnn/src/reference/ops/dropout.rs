//! Dropout with a given mask.

use super::check_same_len;
use crate::error::{Error, Result};
use crate::reference::bounds;

fn scale(p: f64) -> Result<f64> {
    if !(0.0..1.0).contains(&p) {
        return Err(Error::invalid("p", "must be in [0, 1)", p));
    }
    Ok(1.0 / (1.0 - p))
}

/// `y = x * keep / (1 - p)`: kept elements scaled up, dropped ones 0.
///
/// # Errors
/// `p` outside `[0, 1)`, `keep` not as long as `x`, or `x` longer than
/// [`MAX_ELEMENTS`](crate::reference::MAX_ELEMENTS).
pub fn dropout_forward(x: &[f64], keep: &[bool], p: f64) -> Result<Vec<f64>> {
    let s = scale(p)?;
    check_same_len("keep (must equal x)", x.len(), keep.len())?;
    bounds::collect(
        "x",
        x.iter()
            .zip(keep)
            .map(|(&v, &k)| if k { v * s } else { 0.0 }),
    )
}

/// `dx = dy * keep / (1 - p)`: the same mask applied to the gradient.
///
/// # Errors
/// As [`dropout_forward`].
pub fn dropout_backward(dy: &[f64], keep: &[bool], p: f64) -> Result<Vec<f64>> {
    dropout_forward(dy, keep, p)
}

/// The mask a dropout forward used, read from its input and output: kept
/// where `y` is not 0. Only meaningful where `x` is not 0 (choose inputs
/// without zeros).
///
/// # Errors
/// `x` and `y` of different lengths, or longer than
/// [`MAX_ELEMENTS`](crate::reference::MAX_ELEMENTS).
pub fn dropout_mask(x: &[f64], y: &[f64]) -> Result<Vec<bool>> {
    check_same_len("y (must equal x)", x.len(), y.len())?;
    bounds::collect("y", y.iter().map(|&v| v != 0.0))
}
