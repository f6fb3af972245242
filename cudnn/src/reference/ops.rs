//! CPU references in `f64` for pooling, activation, softmax, tensor
//! arithmetic, reduction, batch normalization and dropout: the oracles the
//! GPU results of [`crate::dnn`]'s ops are checked against.
//!
//! Plain loops, written for clarity rather than speed; host-only (no
//! library, no device). **Data is logical and packed**: a tensor of shape
//! `[n, c, spatial...]` is a slice in row-major order over that shape,
//! whatever its layout on the device; [`gather`] and [`scatter`] convert
//! from and to strided memory (NHWC, padded, ...).
//!
//! The references compute the op itself; [`blend`] applies cuDNN's
//! `alpha * op + beta * out`. Every function checks lengths and shapes first
//! and returns an [`Error`] instead of panicking.
//!
//! # Bounds
//! As everywhere in [`crate::reference`]: every dimension and element count
//! of a shape is at most [`MAX_ELEMENTS`](super::MAX_ELEMENTS), every buffer
//! is reserved fallibly, and a call whose work exceeds
//! [`MAX_WORK`](super::MAX_WORK) steps is refused. Work is counted as the
//! elements read and written, except for pooling (output elements x window
//! positions) and reduction (output elements x reduced elements each). A
//! tensor with a 0 dimension (allowed everywhere but in pooling) is
//! answered at once.
//!
//! ```
//! use cudnn::reference::ops;
//! // softmax over the 2 channels of one pixel: e^0 / (e^0 + e^0) = 0.5 each
//! let y = ops::softmax_forward(
//!     ops::SoftmaxAlgorithm::Accurate, ops::SoftmaxMode::Channel,
//!     &[0.0, 0.0], &[1, 2, 1, 1],
//! )?;
//! assert_eq!(y, [0.5, 0.5]);
//! # Ok::<(), cudnn::Error>(())
//! ```

mod act;
mod bn;
mod dropout;
mod pool;
mod reduce;
mod softmax;
mod tensor;

pub use act::*;
pub use bn::*;
pub use dropout::*;
pub use pool::*;
pub use reduce::*;
pub use softmax::*;
pub use tensor::*;

pub use crate::dnn::{
    ActivationMode, BatchNormMode, OpTensorOp, PoolingMode, ReduceOp, SoftmaxAlgorithm, SoftmaxMode,
};

use super::bounds;
use crate::error::{Error, Result};

/// The number of elements of `shape` (1 for an empty shape).
///
/// # Errors
/// [`Error::InvalidArgument`] when the product overflows.
pub fn element_count(shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| Error::invalid("shape", "the element count overflows", format!("{shape:?}")))
}

/// Check `shape` (named `shape_arg`) is within the bounds and `data` holds
/// exactly its elements; returns the count.
pub(crate) fn check_data(
    what: &str,
    data: &[f64],
    shape_arg: &str,
    shape: &[usize],
) -> Result<usize> {
    let n = bounds::count(shape_arg, shape)?;
    if data.len() != n {
        return Err(Error::mismatch(
            format!("{what} length (the element count of shape {shape:?})"),
            n,
            data.len(),
        ));
    }
    Ok(n)
}

/// Check two slices have the same length.
pub(crate) fn check_same_len(what: &str, expected: usize, got: usize) -> Result<()> {
    if expected != got {
        return Err(Error::mismatch(format!("{what} length"), expected, got));
    }
    Ok(())
}

/// Row-major strides of `shape`.
pub fn packed_strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1].saturating_mul(shape[i + 1]);
    }
    s
}

/// Call `f` with every multi-index of `shape`, in row-major order (nothing
/// for a shape with a 0).
pub fn for_each_index(shape: &[usize], mut f: impl FnMut(&[usize])) {
    if shape.contains(&0) {
        return;
    }
    let mut idx = vec![0usize; shape.len()];
    loop {
        f(&idx);
        let mut d = shape.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// The offset of `idx` with `strides`.
fn offset(idx: &[usize], strides: &[usize]) -> usize {
    idx.iter().zip(strides).map(|(&i, &s)| i * s).sum()
}

/// Check `shape` and `strides` address only inside `len` elements; returns
/// the element count.
fn check_strided(shape: &[usize], strides: &[usize], len: usize) -> Result<usize> {
    if shape.len() != strides.len() {
        return Err(Error::mismatch(
            "strides length (the rank)",
            shape.len(),
            strides.len(),
        ));
    }
    let n = bounds::count("shape", shape)?;
    if n == 0 {
        return Ok(0);
    }
    let last = shape
        .iter()
        .zip(strides)
        .try_fold(0usize, |acc, (&d, &s)| {
            acc.checked_add((d - 1).checked_mul(s)?)
        })
        .ok_or_else(|| Error::invalid("strides", "the span overflows", format!("{strides:?}")))?;
    if last >= len {
        // `last + 1` may not fit a usize (a stride of usize::MAX).
        return Err(Error::mismatch(
            "memory length (the span of shape and strides)",
            last.checked_add(1)
                .map_or_else(|| format!("> {last}"), |n| format!(">= {n}")),
            len,
        ));
    }
    Ok(n)
}

/// Read a strided tensor (`shape`, `strides` in elements, as a
/// [`TensorDescriptor`](crate::dnn::TensorDescriptor) has them) from
/// `memory` into logical packed order.
///
/// # Errors
/// Ranks that differ, a span longer than `memory`, or a shape beyond
/// [`MAX_ELEMENTS`](super::MAX_ELEMENTS) (even where zero strides make the
/// span short).
pub fn gather(memory: &[f64], shape: &[usize], strides: &[usize]) -> Result<Vec<f64>> {
    let n = check_strided(shape, strides, memory.len())?;
    let mut out = bounds::buffer("shape", n)?;
    for_each_index(shape, |i| out.push(memory[offset(i, strides)]));
    Ok(out)
}

/// Write logical packed `data` into strided `memory` (the inverse of
/// [`gather`]); elements of `memory` outside the tensor are left alone.
///
/// # Errors
/// As [`gather`], or `data` not holding the elements of `shape`.
pub fn scatter(data: &[f64], shape: &[usize], strides: &[usize], memory: &mut [f64]) -> Result<()> {
    check_strided(shape, strides, memory.len())?;
    check_data("data", data, "shape", shape)?;
    let mut k = 0;
    for_each_index(shape, |i| {
        memory[offset(i, strides)] = data[k];
        k += 1;
    });
    Ok(())
}

/// cuDNN's blending: `alpha * result + beta * old`, with `old` not read
/// when `beta` is 0 (so NaN in it does not propagate, as in cuDNN).
///
/// # Errors
/// Lengths that differ, or more than [`MAX_ELEMENTS`](super::MAX_ELEMENTS).
pub fn blend(alpha: f64, result: &[f64], beta: f64, old: &[f64]) -> Result<Vec<f64>> {
    check_same_len("old (must equal result)", result.len(), old.len())?;
    bounds::collect(
        "result",
        result.iter().zip(old).map(|(&r, &o)| {
            if beta == 0.0 {
                alpha * r
            } else {
                alpha * r + beta * o
            }
        }),
    )
}

/// The central finite-difference gradient of the scalar function `f` at
/// `x`: `(f(x + h e_i) - f(x - h e_i)) / 2h` for each `i`.
///
/// # Errors
/// The first error of `f`, or `x` longer than
/// [`MAX_ELEMENTS`](super::MAX_ELEMENTS).
pub fn finite_difference(
    mut f: impl FnMut(&[f64]) -> Result<f64>,
    x: &[f64],
    h: f64,
) -> Result<Vec<f64>> {
    let mut xp = bounds::buffer("x", x.len())?;
    xp.extend_from_slice(x);
    let mut g = bounds::buffer("x", x.len())?;
    for i in 0..x.len() {
        let orig = xp[i];
        xp[i] = orig + h;
        let fp = f(&xp)?;
        xp[i] = orig - h;
        let fm = f(&xp)?;
        xp[i] = orig;
        g.push((fp - fm) / (2.0 * h));
    }
    Ok(g)
}

/// `sum(a[i] * b[i])`.
///
/// # Errors
/// Lengths that differ.
pub fn dot(a: &[f64], b: &[f64]) -> Result<f64> {
    check_same_len("b (must equal a)", a.len(), b.len())?;
    Ok(a.iter().zip(b).map(|(x, y)| x * y).sum())
}

/// `(n, c, inner)`: the batch, the channels and the product of the spatial
/// dimensions of a `[n, c, spatial...]` shape (rank at least 2, within the
/// bounds).
pub(crate) fn ncs(shape: &[usize]) -> Result<(usize, usize, usize)> {
    if shape.len() < 2 {
        return Err(Error::invalid(
            "shape",
            "must have at least 2 dimensions ([n, c, spatial...])",
            format!("{shape:?}"),
        ));
    }
    bounds::count("shape", shape)?;
    Ok((shape[0], shape[1], bounds::count("shape", &shape[2..])?))
}
