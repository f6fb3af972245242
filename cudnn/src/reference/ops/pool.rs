//! Pooling: forward and backward, any number of spatial dimensions.
//!
//! Output position `o` and window position `k` read input position
//! `o * stride - pad + k`; positions outside the input are padding. Max
//! pooling ignores padding and takes the first maximum in row-major window
//! order (NaN wins: it propagates); average pooling divides by the whole
//! window (including padding) or by the positions inside the input
//! (excluding padding).

use super::{check_data, for_each_index, packed_strides};
use crate::dnn::{PoolingMode, pooling_output_shape};
use crate::error::Result;
use crate::reference::bounds;

/// The checked geometry of one pooling: the output shape and what the
/// window loops need.
struct Windows<'a> {
    y_shape: Vec<usize>,
    x_shape: &'a [usize],
    xs: Vec<usize>,
    window: &'a [usize],
    pad: &'a [usize],
    stride: &'a [usize],
    /// The product of the window (the divisor including padding).
    full: f64,
}

impl<'a> Windows<'a> {
    /// Check the shapes (the rules of [`pooling_output_shape`], the bounds
    /// on the output and the work: output elements x window positions).
    fn new(
        x_shape: &'a [usize],
        window: &'a [usize],
        pad: &'a [usize],
        stride: &'a [usize],
    ) -> Result<Self> {
        let y_shape = pooling_output_shape(x_shape, window, pad, stride)?;
        let outputs = bounds::count(
            "output shape (from x_shape, window, pad and stride)",
            &y_shape,
        )?;
        let mut factors = vec![outputs];
        factors.extend_from_slice(window);
        bounds::work("window", "output elements x window positions", &factors)?;
        Ok(Windows {
            xs: packed_strides(x_shape),
            full: window.iter().map(|&w| w as f64).product(),
            y_shape,
            x_shape,
            window,
            pad,
            stride,
        })
    }

    /// Call `f` with the packed input offset of every position of output
    /// `o`'s window that lies inside the input, in row-major window order.
    fn for_each_inside(&self, o: &[usize], mut f: impl FnMut(usize)) {
        let base = o[0] * self.xs[0] + o[1] * self.xs[1];
        for_each_index(self.window, |k| {
            let mut off = base;
            for d in 0..self.window.len() {
                // `o * stride + k <= x + 2 * pad`, which
                // `pooling_output_shape` bounded by i32::MAX.
                let pos = o[d + 2] * self.stride[d] + k[d];
                let Some(pos) = pos.checked_sub(self.pad[d]) else {
                    return;
                };
                if pos >= self.x_shape[d + 2] {
                    return;
                }
                off += pos * self.xs[d + 2];
            }
            f(off);
        });
    }

    /// The divisor of an average over output `o`'s window.
    fn divisor(&self, mode: PoolingMode, o: &[usize]) -> f64 {
        match mode {
            PoolingMode::AverageIncludePadding => self.full,
            _ => {
                let mut inside = 0usize;
                self.for_each_inside(o, |_| inside += 1);
                inside as f64
            }
        }
    }

    /// The window's first maximum (a NaN, if any, wins).
    fn arg_max(&self, x: &[f64], o: &[usize]) -> Option<usize> {
        let mut best: Option<usize> = None;
        self.for_each_inside(o, |i| match best {
            None => best = Some(i),
            Some(b) if x[b].is_nan() => {}
            Some(b) => {
                if x[i].is_nan() || x[i] > x[b] {
                    best = Some(i);
                }
            }
        });
        best
    }
}

/// Forward pooling of `x` (`[n, c, spatial...]`, packed); returns `y` and
/// its shape.
///
/// # Errors
/// The rules of [`pooling_output_shape`], `x` not matching its shape, an
/// output beyond [`MAX_ELEMENTS`](crate::reference::MAX_ELEMENTS), or more
/// work (output elements x window positions) than
/// [`MAX_WORK`](crate::reference::MAX_WORK).
pub fn pool_forward(
    mode: PoolingMode,
    x: &[f64],
    x_shape: &[usize],
    window: &[usize],
    pad: &[usize],
    stride: &[usize],
) -> Result<(Vec<f64>, Vec<usize>)> {
    check_data("x", x, "x_shape", x_shape)?;
    let w = Windows::new(x_shape, window, pad, stride)?;
    let mut y = bounds::buffer("output shape", bounds::count("output shape", &w.y_shape)?)?;
    for_each_index(&w.y_shape, |o| {
        y.push(match mode {
            PoolingMode::Max | PoolingMode::MaxDeterministic => {
                w.arg_max(x, o).map_or(f64::NEG_INFINITY, |i| x[i])
            }
            _ => {
                let mut sum = 0.0;
                w.for_each_inside(o, |i| sum += x[i]);
                sum / w.divisor(mode, o)
            }
        });
    });
    Ok((y, w.y_shape))
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
    let n = check_data("x", x, "x_shape", x_shape)?;
    let w = Windows::new(x_shape, window, pad, stride)?;
    check_data("dy", dy, "output shape", &w.y_shape)?;
    let mut dx = bounds::zeros("x_shape", n)?;
    let mut k = 0;
    for_each_index(&w.y_shape, |o| {
        let g = dy[k];
        k += 1;
        match mode {
            PoolingMode::Max | PoolingMode::MaxDeterministic => {
                if let Some(i) = w.arg_max(x, o) {
                    dx[i] += g;
                }
            }
            _ => {
                let div = w.divisor(mode, o);
                w.for_each_inside(o, |i| dx[i] += g / div);
            }
        }
    });
    Ok(dx)
}
