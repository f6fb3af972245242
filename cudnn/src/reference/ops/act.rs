//! Activations and their derivatives, element-wise.

use super::check_same_len;
use crate::dnn::ActivationMode;
use crate::error::Result;
use crate::reference::bounds;

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// `f(x)` for one element.
pub fn activation(mode: ActivationMode, x: f64) -> f64 {
    match mode {
        ActivationMode::Sigmoid => sigmoid(x),
        ActivationMode::Relu => {
            if x.is_nan() {
                x
            } else {
                x.max(0.0)
            }
        }
        ActivationMode::Tanh => x.tanh(),
        ActivationMode::ClippedRelu { ceiling } => {
            if x.is_nan() {
                x
            } else {
                x.max(0.0).min(ceiling)
            }
        }
        ActivationMode::Elu { alpha } => {
            if x > 0.0 {
                x
            } else {
                alpha * x.exp_m1()
            }
        }
        ActivationMode::Swish { beta } => x * sigmoid(beta * x),
        ActivationMode::Identity => x,
    }
}

/// `f'(x)` for one element (at a kink, the derivative from the left: ReLU
/// and clipped ReLU pass no gradient at exactly 0 or the ceiling).
pub fn activation_derivative(mode: ActivationMode, x: f64) -> f64 {
    match mode {
        ActivationMode::Sigmoid => {
            let s = sigmoid(x);
            s * (1.0 - s)
        }
        ActivationMode::Relu => {
            if x > 0.0 {
                1.0
            } else {
                0.0
            }
        }
        ActivationMode::Tanh => 1.0 - x.tanh().powi(2),
        ActivationMode::ClippedRelu { ceiling } => {
            if x > 0.0 && x < ceiling {
                1.0
            } else {
                0.0
            }
        }
        ActivationMode::Elu { alpha } => {
            if x > 0.0 {
                1.0
            } else {
                alpha * x.exp()
            }
        }
        ActivationMode::Swish { beta } => {
            let s = sigmoid(beta * x);
            s + beta * x * s * (1.0 - s)
        }
        ActivationMode::Identity => 1.0,
    }
}

/// `y = f(x)` element-wise.
pub fn activation_forward(mode: ActivationMode, x: &[f64]) -> Vec<f64> {
    x.iter().map(|&v| activation(mode, v)).collect()
}

/// `dx = f'(x) * dy` element-wise.
///
/// # Errors
/// `x` and `dy` of different lengths, or longer than
/// [`MAX_ELEMENTS`](crate::reference::MAX_ELEMENTS).
pub fn activation_backward(mode: ActivationMode, x: &[f64], dy: &[f64]) -> Result<Vec<f64>> {
    check_same_len("dy (must equal x)", x.len(), dy.len())?;
    bounds::collect(
        "x",
        x.iter()
            .zip(dy)
            .map(|(&v, &g)| activation_derivative(mode, v) * g),
    )
}
