//! Pooling: forward and backward, any number of spatial dimensions.
//!
//! Output position `o` and window position `k` read input position
//! `o * stride - pad + k`; positions outside the input are padding. Max
//! pooling ignores padding and takes the first maximum in row-major window
//! order (NaN wins: it propagates); average pooling divides by the whole
//! window (including padding) or by the positions inside the input
//! (excluding padding).

use super::{check_data, element_count, for_each_index, packed_strides};
use crate::dnn::{PoolingMode, pooling_output_shape};
use crate::error::Result;

/// One output element's window: the packed input offsets inside the input,
/// and the divisor for averages.
type Window = (Vec<usize>, f64);

/// For each output element, the packed input offsets of its window that lie
/// inside the input, and the divisor for averages.
fn windows(
    mode: PoolingMode,
    x_shape: &[usize],
    window: &[usize],
    pad: &[usize],
    stride: &[usize],
) -> Result<(Vec<usize>, Vec<Window>)> {
    let y_shape = pooling_output_shape(x_shape, window, pad, stride)?;
    let xs = packed_strides(x_shape);
    let full: f64 = window.iter().map(|&w| w as f64).product();
    let mut out = Vec::with_capacity(element_count(&y_shape)?);
    for_each_index(&y_shape, |o| {
        let base = o[0] * xs[0] + o[1] * xs[1];
        let mut inside = Vec::new();
        for_each_index(window, |k| {
            let mut off = base;
            for d in 0..window.len() {
                let pos = (o[d + 2] * stride[d] + k[d]) as isize - pad[d] as isize;
                if pos < 0 || pos as usize >= x_shape[d + 2] {
                    return;
                }
                off += pos as usize * xs[d + 2];
            }
            inside.push(off);
        });
        let divisor = match mode {
            PoolingMode::AverageIncludePadding => full,
            _ => inside.len() as f64,
        };
        out.push((inside, divisor));
    });
    Ok((y_shape, out))
}

/// The first maximum of `x` over `offs` (a NaN, if any, wins).
fn arg_max(x: &[f64], offs: &[usize]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for &o in offs {
        match best {
            None => best = Some(o),
            Some(b) if x[b].is_nan() => {}
            Some(b) => {
                if x[o].is_nan() || x[o] > x[b] {
                    best = Some(o);
                }
            }
        }
    }
    best
}

/// Forward pooling of `x` (`[n, c, spatial...]`, packed); returns `y` and
/// its shape.
///
/// # Errors
/// The rules of [`pooling_output_shape`], or `x` not matching its shape.
pub fn pool_forward(
    mode: PoolingMode,
    x: &[f64],
    x_shape: &[usize],
    window: &[usize],
    pad: &[usize],
    stride: &[usize],
) -> Result<(Vec<f64>, Vec<usize>)> {
    check_data("x", x, x_shape)?;
    let (y_shape, wins) = windows(mode, x_shape, window, pad, stride)?;
    let y = wins
        .iter()
        .map(|(offs, div)| match mode {
            PoolingMode::Max | PoolingMode::MaxDeterministic => {
                arg_max(x, offs).map_or(f64::NEG_INFINITY, |i| x[i])
            }
            _ => offs.iter().map(|&i| x[i]).sum::<f64>() / div,
        })
        .collect();
    Ok((y, y_shape))
}

/// Backward pooling: `dx` for the output gradient `dy` (shaped as the
/// forward output). Max pooling routes each `dy` to its window's first
/// maximum in `x`; average pooling spreads it over the window.
///
/// # Errors
/// As [`pool_forward`], or `dy` not matching the output shape.
pub fn pool_backward(
    mode: PoolingMode,
    x: &[f64],
    x_shape: &[usize],
    dy: &[f64],
    window: &[usize],
    pad: &[usize],
    stride: &[usize],
) -> Result<Vec<f64>> {
    let n = check_data("x", x, x_shape)?;
    let (y_shape, wins) = windows(mode, x_shape, window, pad, stride)?;
    check_data("dy", dy, &y_shape)?;
    let mut dx = vec![0.0; n];
    for ((offs, div), &g) in wins.iter().zip(dy) {
        match mode {
            PoolingMode::Max | PoolingMode::MaxDeterministic => {
                if let Some(i) = arg_max(x, offs) {
                    dx[i] += g;
                }
            }
            _ => {
                for &i in offs {
                    dx[i] += g / div;
                }
            }
        }
    }
    Ok(dx)
}
