//! The checks of an FP8 GEMM call ([`fp8_matmul`](crate::fp8_matmul)),
//! pure functions of shapes, strides, offsets and dtypes, all before
//! anything reaches the GPU: candle's `F8E4M3` operands as cuBLASLt
//! layouts, cuBLASLt's FP8 rules (the "TN" layout Hopper needs, `k` and
//! D's contiguous dim in 16s, 16-byte leading dimensions, batch strides
//! and start addresses), per-tensor f32 scales, the output and bias types
//! of NVIDIA's FP8 table. Every refusal is a typed [`cudnn::Error`] naming
//! the argument.

use candle_core::DType as CDType;
use cudnn::blas::{Fp8MatmulSpec, Fp8OutputType, Fp8Shape, Fp8Types, Layout};
use cudnn::{Error, Fp8Format, Result};

use super::Arg;
use super::gemm::{MatmulActivation, epilogue, operand};

/// A checked FP8 GEMM: the spec (alignment still the default: set from
/// the pointers when run), the output's dims and type.
#[derive(Clone, Debug, PartialEq)]
pub struct Fp8Gemm {
    /// A, B, D layouts and the epilogue.
    pub spec: Fp8MatmulSpec,
    /// D's dims `(batch.., m, n)`, packed row-major.
    pub out_dims: Vec<usize>,
    /// D's type.
    pub out: Fp8OutputType,
    /// The checked shape (frame, bias length).
    pub shape: Fp8Shape,
}

/// D's type for candle's `out_dtype`: f32, f16 or bf16.
///
/// # Errors
/// Another dtype (typed, naming `out_dtype`).
pub fn out_type(out: CDType) -> Result<Fp8OutputType> {
    match out {
        CDType::F32 => Ok(Fp8OutputType::F32),
        CDType::F16 => Ok(Fp8OutputType::F16),
        CDType::BF16 => Ok(Fp8OutputType::BF16),
        other => Err(Error::invalid(
            "out_dtype",
            "must be f32, f16 or bf16 (an FP8 output is not offered)",
            format!("{other:?}"),
        )),
    }
}

/// The bias dtype cuBLASLt takes with an `out` output (NVIDIA's FP8
/// table): f16 for an f16 output, bf16 for f32 and bf16 outputs. An f32
/// output with a bias is nevertheless refused by [`fp8_gemm`] (see there):
/// the f32 row is NVIDIA's table only.
pub fn bias_dtype(out: CDType) -> CDType {
    if out == CDType::F16 {
        CDType::F16
    } else {
        CDType::BF16
    }
}

/// A per-tensor scale: an f32 tensor of exactly one element (`()`, `(1,)`).
///
/// # Errors
/// Another dtype or element count (typed, naming the scale).
pub fn scale(s: &Arg<'_>) -> Result<()> {
    let n: usize = s.dims.iter().product();
    if s.dtype != CDType::F32 || n != 1 {
        return Err(Error::invalid(
            s.name,
            "must be an f32 tensor of one element (a per-tensor scale, as PyTorch's _scaled_mm takes)",
            format!("{:?} {:?}", s.dtype, s.dims),
        ));
    }
    Ok(())
}

/// Whether a view starting `offset` elements of `size` bytes into its
/// buffer (cudarc's allocations are 256-byte aligned) starts on a 16-byte
/// boundary, as cuBLASLt's FP8 kernels need.
///
/// # Errors
/// An offset that does not (typed, naming `name`'s start offset).
pub fn start_offset(name: &str, offset: usize, size: usize) -> Result<()> {
    let bytes = offset.checked_mul(size).ok_or_else(|| {
        Error::invalid(
            format!("{name} start offset"),
            "must fit usize in bytes",
            offset,
        )
    })?;
    if !bytes.is_multiple_of(16) {
        return Err(Error::invalid(
            format!("{name} start offset"),
            format!(
                "must be a multiple of 16 bytes ({} elements of {size} bytes) for an FP8 matmul (cuBLASLt's alignment): narrow at such an offset or make it contiguous",
                16 / size.clamp(1, 16)
            ),
            offset,
        ));
    }
    Ok(())
}

/// Check `a` `(batch.., m, k)` and `b` `(batch.., k, n)` (candle `F8E4M3`,
/// the same batch dims: broadcast first), `bias` `(n,)` and the output
/// dtype `out`, and map them to a cuBLASLt FP8 spec computing D `(batch..,
/// m, n)` row-major with the epilogue of `(bias, act)`.
///
/// cuBLASLt's FP8 layout rule ("TN"), in candle's terms: `a` has its last
/// dim (k) contiguous, and `b` has its row dim (k) contiguous, i.e. `b` is
/// `w.t()` of a contiguous `(n, k)` weight (candle's `Linear` layout;
/// PyTorch's `_scaled_mm` asks the same of `mat2`). Nothing is copied to
/// make it so: a copy of a weight at every call would cost more than the
/// GEMM saves.
///
/// A bias with an f32 output is refused (`bias`): PyTorch's `_scaled_mm`
/// refuses it ("Bias is not supported when out_dtype is set to Float32";
/// PyTorch issue 108097 reports cuBLASLt erroring on it), although
/// NVIDIA's FP8 table lists a bf16 bias for an f32 output. Whether
/// cuBLASLt runs it has not been checked on a GPU here; an f32 output
/// without a bias, and f16 / bf16 outputs with one, are kept.
///
/// # Errors
/// A rank, dim, dtype, stride or layout that does not fit (typed, naming
/// the argument: `a dtype`, `b`, `k`, `n`, `bias`, `bias dtype`, `a.ld`,
/// ...).
pub fn fp8_gemm(
    a: &Arg<'_>,
    b: &Arg<'_>,
    bias: Option<&Arg<'_>>,
    act: MatmulActivation,
    out: CDType,
) -> Result<Fp8Gemm> {
    for x in [a, b] {
        if x.dtype != CDType::F8E4M3 {
            return Err(Error::invalid(
                format!("{} dtype", x.name),
                "must be F8E4M3 (candle's FP8 type; cuBLASLt's E4M3)",
                format!("{:?}", x.dtype),
            ));
        }
    }
    let d_type = out_type(out)?;
    let refuse = |x: &Arg<'_>| {
        Error::invalid(
            format!("{} strides", x.name),
            "must make a (strided batch of) row- or column-major matrices",
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
    if la.is_column_contiguous() && k > 1 {
        return Err(Error::invalid(
            "a",
            format!(
                "must have its last dim (k = {k}) contiguous for an FP8 matmul (cuBLASLt's \"TN\" layout on Hopper): a row-major (batch.., m, k) tensor; make it contiguous"
            ),
            format!("dims {:?} strides {:?}", a.dims, a.strides),
        ));
    }
    if !lb.is_column_contiguous() && k > 1 {
        return Err(Error::invalid(
            "b",
            format!(
                "must have its row dim (k = {k}) contiguous for an FP8 matmul (cuBLASLt's \"TN\" layout on Hopper): pass w.t() of a contiguous (n, k) = ({n}, {k}) weight, as PyTorch's _scaled_mm takes mat2 column-major"
            ),
            format!("dims {:?} strides {:?}", b.dims, b.strides),
        ));
    }
    let want_bias = bias_dtype(out);
    if let Some(x) = bias {
        if out == CDType::F32 {
            return Err(Error::invalid(
                "bias",
                "must be None with out_dtype F32 (an FP8 GEMM with an f32 output and a bias is refused, as PyTorch's _scaled_mm refuses it: cuBLASLt was reported to fail on it, and it is unverified on a GPU here); use an f16 / bf16 output, or add the bias after the GEMM",
                format!("a {:?} {:?} bias with out_dtype F32", x.dtype, x.dims),
            ));
        }
        if x.dims != [n] || x.strides.first().is_some_and(|&s| s != 1) {
            return Err(Error::invalid(
                "bias",
                format!("must be a contiguous (n,) = ({n},) vector (one per output column)"),
                format!("{:?} strides {:?}", x.dims, x.strides),
            ));
        }
        if x.dtype != want_bias {
            return Err(Error::mismatch(
                format!("bias dtype (cuBLASLt's FP8 table for a {out:?} output)"),
                format!("{want_bias:?}"),
                format!("{:?}", x.dtype),
            ));
        }
    }
    let count = la.batch_count();
    let mn = m
        .checked_mul(n)
        .ok_or_else(|| Error::invalid("m x n", "must fit usize", format!("{m} x {n}")))?;
    let ld = Layout::row_major(m, n).batched(count, if count > 1 { mn } else { 0 });
    let spec = Fp8MatmulSpec::new(la, lb, ld).with_epilogue(epilogue(bias.is_some(), act));
    let types = Fp8Types {
        a: Fp8Format::E4M3,
        b: Fp8Format::E4M3,
        d: d_type,
        bias: None,
    };
    let shape = spec.check_types(types)?;
    let mut out_dims = a.dims[..na - 2].to_vec();
    out_dims.extend([m, n]);
    Ok(Fp8Gemm {
        spec,
        out_dims,
        out: d_type,
        shape,
    })
}

#[cfg(test)]
mod tests;
