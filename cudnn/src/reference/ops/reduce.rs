//! Tensor reduction.

use super::{check_data, for_each_index, packed_strides};
use crate::dnn::{ReduceOp, check_broadcast};
use crate::error::Result;
use crate::reference::bounds;

/// Reduce `a` to `c_shape` (same rank; each dimension of `c` equals `a`'s
/// or is 1, and the dimensions where it is 1 are reduced). Returns `c` and,
/// for each element of `c`, the flattened index of the first minimum or
/// maximum ([`ReduceOp::Min`], [`ReduceOp::Max`]; 0 for the others) among
/// the reduced elements, counted row-major over the reduced dimensions.
///
/// Min and max propagate NaN; `MulNoZeros` of all zeros is 1.
///
/// The work is counted as the elements of `c` times the reduced elements
/// of each (at least one each), and bounded by
/// [`MAX_WORK`](crate::reference::MAX_WORK).
///
/// # Errors
/// Shapes breaking the rule or beyond
/// [`MAX_ELEMENTS`](crate::reference::MAX_ELEMENTS), `a` not matching its
/// shape, or more work than [`MAX_WORK`](crate::reference::MAX_WORK).
pub fn reduce(
    op: ReduceOp,
    a: &[f64],
    a_shape: &[usize],
    c_shape: &[usize],
) -> Result<(Vec<f64>, Vec<usize>)> {
    check_data("a", a, "a_shape", a_shape)?;
    check_broadcast("c", c_shape, "a", a_shape)?;
    let n = bounds::count("c_shape", c_shape)?;
    let r_shape: Vec<usize> = a_shape
        .iter()
        .zip(c_shape)
        .map(|(&ad, &cd)| if cd == 1 { ad } else { 1 })
        .collect();
    // Within the bounds: every dimension is one of `a_shape`'s (or 1).
    let reduced = bounds::count("a_shape", &r_shape)?;
    bounds::work(
        "a_shape",
        "elements of c x reduced elements of each",
        &[n, reduced.max(1)],
    )?;
    let count = reduced as f64;
    let st = packed_strides(a_shape);
    let (mut c, mut idx) = (bounds::buffer("c_shape", n)?, bounds::buffer("c_shape", n)?);
    let mut vals = bounds::buffer("a_shape", reduced)?;
    for_each_index(c_shape, |ci| {
        vals.clear();
        for_each_index(&r_shape, |ri| {
            let off: usize = (0..a_shape.len())
                .map(|d| if c_shape[d] == 1 { ri[d] } else { ci[d] } * st[d])
                .sum();
            vals.push(a[off]);
        });
        let pick = |better: fn(f64, f64) -> bool| -> (f64, usize) {
            let mut best = 0;
            for (i, &v) in vals.iter().enumerate() {
                if vals[best].is_nan() {
                    break;
                }
                if v.is_nan() || better(v, vals[best]) {
                    best = i;
                }
            }
            (vals.get(best).copied().unwrap_or(f64::NAN), best)
        };
        let (v, i) = match op {
            ReduceOp::Add => (vals.iter().sum(), 0),
            ReduceOp::Mul => (vals.iter().product(), 0),
            ReduceOp::Min => pick(|v, b| v < b),
            ReduceOp::Max => pick(|v, b| v > b),
            ReduceOp::Amax => (
                vals.iter().map(|v| v.abs()).fold(0.0, |m: f64, v| {
                    if v.is_nan() || m.is_nan() {
                        f64::NAN
                    } else {
                        m.max(v)
                    }
                }),
                0,
            ),
            ReduceOp::Avg => (vals.iter().sum::<f64>() / count, 0),
            ReduceOp::Norm1 => (vals.iter().map(|v| v.abs()).sum(), 0),
            ReduceOp::Norm2 => (vals.iter().map(|v| v * v).sum::<f64>().sqrt(), 0),
            ReduceOp::MulNoZeros => (vals.iter().filter(|&&v| v != 0.0).product(), 0),
        };
        c.push(v);
        idx.push(i);
    });
    Ok((c, idx))
}
