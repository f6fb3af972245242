//! Tensor arithmetic: broadcasting, add, op-tensor, reduction is in
//! `reduce`.

use super::{check_data, for_each_index, packed_strides};
use crate::dnn::{OpTensorOp, check_broadcast};
use crate::error::Result;
use crate::reference::bounds;

/// `src` (shape `src_shape`) broadcast to `dst_shape` by cuDNN's rule:
/// same rank, each dimension equal or 1.
///
/// # Errors
/// The rule broken (naming the dimension), `src` not matching its shape,
/// or a `dst_shape` beyond [`MAX_ELEMENTS`](crate::reference::MAX_ELEMENTS).
pub fn broadcast(src: &[f64], src_shape: &[usize], dst_shape: &[usize]) -> Result<Vec<f64>> {
    check_data("src", src, "src_shape", src_shape)?;
    check_broadcast("src", src_shape, "dst", dst_shape)?;
    let n = bounds::count("dst_shape", dst_shape)?;
    let ss = packed_strides(src_shape);
    let mut out = bounds::buffer("dst_shape", n)?;
    for_each_index(dst_shape, |i| {
        let off: usize = i
            .iter()
            .zip(src_shape)
            .zip(&ss)
            .map(|((&k, &d), &s)| if d == 1 { 0 } else { k * s })
            .sum();
        out.push(src[off]);
    });
    Ok(out)
}

/// `c = alpha * a + beta * c`, `a` broadcast onto `c` (cuDNN's `AddTensor`).
///
/// # Errors
/// As [`broadcast`], or `c` not matching its shape.
pub fn add_tensor(
    alpha: f64,
    a: &[f64],
    a_shape: &[usize],
    beta: f64,
    c: &[f64],
    c_shape: &[usize],
) -> Result<Vec<f64>> {
    check_data("c", c, "c_shape", c_shape)?;
    let a = broadcast(a, a_shape, c_shape)?;
    super::blend(alpha, &a, beta, c)
}

/// One element of an op-tensor operation on already-scaled operands
/// (`b` is ignored by the unary operations). `Not` is logical: 1 for 0,
/// else 0.
pub fn op_tensor_element(op: OpTensorOp, a: f64, b: f64) -> f64 {
    match op {
        OpTensorOp::Add => a + b,
        OpTensorOp::Mul => a * b,
        OpTensorOp::Min => a.min(b),
        OpTensorOp::Max => a.max(b),
        OpTensorOp::Sqrt => a.sqrt(),
        OpTensorOp::Not => {
            if a == 0.0 {
                1.0
            } else {
                0.0
            }
        }
    }
}

/// `c = op(alpha1 * a, alpha2 * b) + beta * c`: `a` shaped as `c`, `b`
/// broadcast onto `c` (for unary operations `b` may be `None`).
///
/// # Errors
/// Shapes breaking the rules, a missing `b` for a binary operation, or data
/// not matching its shape.
#[allow(clippy::too_many_arguments)] // the op's arguments, in cuDNN's order
pub fn op_tensor(
    op: OpTensorOp,
    alpha1: f64,
    a: &[f64],
    alpha2: f64,
    b: Option<(&[f64], &[usize])>,
    beta: f64,
    c: &[f64],
    c_shape: &[usize],
) -> Result<Vec<f64>> {
    let n = check_data("c", c, "c_shape", c_shape)?;
    check_data("a", a, "c_shape", c_shape)?;
    let b = match b {
        Some((b, b_shape)) => broadcast(b, b_shape, c_shape)?,
        None if op.is_unary() => bounds::zeros("c_shape", n)?,
        None => {
            return Err(crate::Error::invalid(
                "b",
                format!("must be given for the binary operation {op:?}"),
                "None",
            ));
        }
    };
    let r = bounds::collect(
        "c_shape",
        a.iter()
            .zip(&b)
            .map(|(&x, &y)| op_tensor_element(op, alpha1 * x, alpha2 * y)),
    )?;
    super::blend(1.0, &r, beta, c)
}
