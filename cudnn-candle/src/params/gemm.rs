//! The checks of a GEMM call ([`matmul_bias_act`](crate::matmul_bias_act)),
//! pure functions of shapes, strides and dtypes: candle's `(batch.., rows,
//! cols)` operands as cuBLASLt matrix layouts (row- or column-major with a
//! leading dimension, a strided batch), every refusal a typed
//! [`cudnn::Error`] naming the argument.

use candle_core::DType as CDType;
use cudnn::blas::{Epilogue, Layout, MatmulShape, MatmulSpec, Order};
use cudnn::{Error, Result};

use super::Arg;

/// The activation fused after the matmul (and the bias).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum MatmulActivation {
    /// None.
    #[default]
    None,
    /// `max(x, 0)`.
    Relu,
    /// GELU, tanh approximation (cuBLASLt's only GELU; candle's
    /// `gelu`, not `gelu_erf`).
    GeluTanh,
}

/// The batch stride one stride can express for batch dims `dims` with
/// `strides` (candle's, elements): `Some(0)` when every batch dim of more
/// than one element has stride 0 (a broadcast), `Some(s)` when they are
/// nested at one stride `s` (dim `i`'s stride `s * prod(dims[i+1..])`),
/// `None` otherwise.
fn batch_stride(dims: &[usize], strides: &[usize]) -> Option<usize> {
    let last = (0..dims.len()).rev().find(|&i| dims[i] > 1)?;
    let s = strides[last];
    let mut inner = 1usize;
    for i in (0..dims.len()).rev() {
        if dims[i] > 1 && strides[i] != s.checked_mul(inner)? {
            return None;
        }
        inner = inner.checked_mul(dims[i])?;
    }
    Some(s)
}

/// An operand `(batch.., rows, cols)` with candle's `strides` as a layout
/// (`Ok(None)`: strides no layout expresses; make it contiguous first).
///
/// # Errors
/// A rank below 2 or a zero dim (typed, naming `name`).
pub fn operand(name: &str, dims: &[usize], strides: &[usize]) -> Result<Option<Layout>> {
    let n = dims.len();
    if n < 2 || strides.len() != n {
        return Err(Error::invalid(
            format!("{name} shape"),
            "must be rank >= 2 (batch.., rows, cols)",
            format!("{dims:?}"),
        ));
    }
    if dims.contains(&0) {
        return Err(Error::invalid(
            format!("{name} shape"),
            "must have no zero dim",
            format!("{dims:?}"),
        ));
    }
    let (r, c, sr, sc) = (dims[n - 2], dims[n - 1], strides[n - 2], strides[n - 1]);
    let count: usize = dims[..n - 2].iter().product();
    let Some(bs) = (if count == 1 {
        Some(0)
    } else {
        batch_stride(&dims[..n - 2], &strides[..n - 2])
    }) else {
        return Ok(None);
    };
    // A dim of 1 has no stride that matters (candle may give it any).
    let layout = if c == 1 || sc == 1 {
        let ld = if r == 1 { c } else { sr };
        if ld < c {
            return Ok(None);
        }
        Layout::new(Order::RowMajor, r, c).with_ld(ld)
    } else if r == 1 || sr == 1 {
        let ld = if c == 1 { r } else { sc };
        if ld < r {
            return Ok(None);
        }
        Layout::new(Order::ColMajor, r, c).with_ld(ld)
    } else {
        return Ok(None);
    };
    Ok(Some(layout.batched(count, bs)))
}

/// cuBLASLt's forward epilogue for a bias (or none) and `act`.
pub fn epilogue(bias: bool, act: MatmulActivation) -> Epilogue {
    match (bias, act) {
        (false, MatmulActivation::None) => Epilogue::None,
        (false, MatmulActivation::Relu) => Epilogue::Relu,
        (false, MatmulActivation::GeluTanh) => Epilogue::GeluTanh,
        (true, MatmulActivation::None) => Epilogue::Bias,
        (true, MatmulActivation::Relu) => Epilogue::ReluBias,
        (true, MatmulActivation::GeluTanh) => Epilogue::GeluTanhBias,
    }
}

/// Check the element types alone: `a` f32, f16 or bf16, `b` and `bias`
/// of `a`'s type. Run before anything is copied (a strided operand is
/// made contiguous first): candle 0.11.1's CUDA backend has no strided
/// copy of `F8E4M3` (it asks for `ucopy_f8e4m3`, its kernel is
/// `ucopy_f8_e4m3`), and a type the GEMM refuses is not worth a copy.
///
/// # Errors
/// `a dtype`, `b dtype (a's)`, `bias dtype (a's)`, typed.
pub fn dtypes(a: CDType, b: CDType, bias: Option<CDType>) -> Result<()> {
    if !matches!(a, CDType::F32 | CDType::F16 | CDType::BF16) {
        return Err(Error::invalid(
            "a dtype",
            "must be f32, f16 or bf16 (cuBLASLt with epilogues)",
            format!("{a:?}"),
        ));
    }
    for (name, x) in std::iter::once(("b", b)).chain(bias.map(|x| ("bias", x))) {
        if x != a {
            return Err(Error::mismatch(
                format!("{name} dtype (a's)"),
                format!("{a:?}"),
                format!("{x:?}"),
            ));
        }
    }
    Ok(())
}

/// A checked GEMM: the spec (alignment still the default: set from the
/// pointers when run) and the output's dims.
#[derive(Clone, Debug, PartialEq)]
pub struct Gemm {
    /// A, B, D layouts and the epilogue.
    pub spec: MatmulSpec,
    /// D's dims `(batch.., m, n)`, packed row-major.
    pub out_dims: Vec<usize>,
    /// The checked shape (bias length, frame).
    pub shape: MatmulShape,
}

/// Check `a` `(batch.., m, k)`, `b` `(batch.., k, n)` (the same batch
/// dims: broadcast first), `bias` `(n,)` contiguous, all f32, f16 or bf16
/// alike, and map them to a cuBLASLt spec computing D `(batch.., m, n)`
/// row-major with the epilogue of `(bias, act)`.
///
/// # Errors
/// A rank, dim, dtype or stride that does not fit (typed, naming the argument).
pub fn gemm(
    a: &Arg<'_>,
    b: &Arg<'_>,
    bias: Option<&Arg<'_>>,
    act: MatmulActivation,
) -> Result<Gemm> {
    dtypes(a.dtype, b.dtype, bias.map(|x| x.dtype))?;
    let refuse = |x: &Arg<'_>| {
        Error::invalid(
            format!("{} strides", x.name),
            "must make a (strided batch of) row- or column-major matrices (make it contiguous)",
            format!("{:?}", x.strides),
        )
    };
    let la = operand(a.name, a.dims, a.strides)?.ok_or_else(|| refuse(a))?;
    let lb = operand(b.name, b.dims, b.strides)?.ok_or_else(|| refuse(b))?;
    let (na, nb) = (a.dims.len(), b.dims.len());
    if a.dims[..na - 2] != b.dims[..nb - 2] {
        return Err(Error::mismatch(
            "b batch dims (a's; broadcast first)",
            format!("{:?}", &a.dims[..na - 2]),
            format!("{:?}", &b.dims[..nb - 2]),
        ));
    }
    let (m, k, n) = (a.dims[na - 2], a.dims[na - 1], b.dims[nb - 1]);
    if b.dims[nb - 2] != k {
        return Err(Error::mismatch(
            "b rows (a's columns, k)",
            k,
            b.dims[nb - 2],
        ));
    }
    let count = la.batch_count();
    let mn = m
        .checked_mul(n)
        .ok_or_else(|| Error::invalid("m x n", "must fit usize", format!("{m} x {n}")))?;
    let ld = Layout::row_major(m, n).batched(count, if count > 1 { mn } else { 0 });
    if let Some(x) = bias
        && (x.dims != [n] || x.strides.first().is_some_and(|&s| s != 1))
    {
        return Err(Error::invalid(
            "bias",
            format!("must be a contiguous (n,) = ({n},) vector (one per output column)"),
            format!("{:?} strides {:?}", x.dims, x.strides),
        ));
    }
    let spec = MatmulSpec::new(la, lb, ld).with_epilogue(epilogue(bias.is_some(), act));
    let shape = match a.dtype {
        CDType::F16 => spec.check::<half::f16, half::f16>()?,
        CDType::BF16 => spec.check::<half::bf16, half::bf16>()?,
        _ => spec.check::<f32, f32>()?,
    };
    let mut out_dims = a.dims[..na - 2].to_vec();
    out_dims.extend([m, n]);
    Ok(Gemm {
        spec,
        out_dims,
        shape,
    })
}

#[cfg(test)]
mod tests;
