//! MXFP8 block-scale quantize and dequantize in `f64`, as NVIDIA documents
//! cuDNN's block-scale operations
//! ([`Graph::block_scale_quantize`](crate::graph::Graph::block_scale_quantize),
//! [`Graph::block_scale_dequantize`](crate::graph::Graph::block_scale_dequantize)):
//! each block of [`BLOCK`] (32) consecutive elements along the last dim
//! shares one E8M0 scale (a power of two),
//!
//! ```text
//! scale  = round_up_to_e8m0(amax(block) / vmax)      (vmax: 448 for E4M3, 57344 for E5M2)
//! y      = round_to_nearest_even_fp8(x / scale)      (saturating)
//! x'     = y * scale                                 (dequantize)
//! ```
//!
//! `round_up_to_e8m0(r)` is the smallest power of two `2^e >= r`, `e`
//! clamped to E8M0's `-127..=127`; it is decided exactly
//! (`vmax * 2^e >= amax`, no rounding of the quotient). Two cases NVIDIA
//! does not spell out are answered by the literal reading: a block of
//! zeros gets the smallest scale (`2^-127`, code 0), and a block whose
//! `amax / vmax` exceeds `2^127` gets `2^127` with its values saturated.
//! Non-finite inputs are refused. Values and scales are row-major, the
//! scales `[.., last / 32]`. Bounds as the [module](super#bounds) docs
//! say (work: one step per element).
//!
//! ```
//! use cudnn::Fp8Format;
//! use cudnn::reference::block_scale::{dequantize, quantize};
//! // One block: amax 1 -> scale 2^-8 (1/448 rounded up), 1.0 -> 256.
//! let mut x = vec![0.0; 32];
//! x[0] = 1.0;
//! let q = quantize(&x, 32, Fp8Format::E4M3)?;
//! assert_eq!(q.scales, vec![127 - 8]);
//! assert_eq!(Fp8Format::E4M3.decode(q.values[0]), 256.0);
//! assert_eq!(dequantize(&q.values, &q.scales, 32, Fp8Format::E4M3)?[0], 1.0);
//! # Ok::<(), cudnn::Error>(())
//! ```

use super::bounds;
use crate::dtype::{Fp8Format, Fp8Saturation};
use crate::error::{Error, Result};

/// The MXFP8 block: 32 elements share a scale.
pub const BLOCK: usize = 32;

/// The E8M0 NaN code.
pub const E8M0_NAN: u8 = 0xFF;

/// What [`quantize`] makes: FP8 codes (x's shape) and E8M0 scale codes
/// (one per block).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mxfp8 {
    /// The FP8 codes, x's shape, row-major.
    pub values: Vec<u8>,
    /// The E8M0 codes, `[.., last / 32]`, row-major.
    pub scales: Vec<u8>,
}

/// The value of an E8M0 code: `2^(code - 127)`, NaN for `0xFF`.
pub fn e8m0_value(code: u8) -> f64 {
    if code == E8M0_NAN {
        f64::NAN
    } else {
        2f64.powi(i32::from(code) - 127)
    }
}

/// The E8M0 scale code of a block whose largest magnitude is `amax`, for
/// `format`'s values: the smallest `2^e` with `amax / 2^e <= vmax`,
/// clamped to `-127..=127` (see the module docs).
///
/// # Errors
/// `amax` negative or not finite.
pub fn scale_code(amax: f64, format: Fp8Format) -> Result<u8> {
    if !amax.is_finite() || amax < 0.0 {
        return Err(Error::invalid(
            "block_scale::scale_code: amax",
            "must be finite and >= 0",
            amax,
        ));
    }
    let vmax = format.max();
    // The smallest e in -127..=127 with vmax * 2^e >= amax (exact: vmax
    // times a power of two is an f64 without rounding in this range).
    let fits = |e: i32| vmax * 2f64.powi(e) >= amax;
    let mut e = -127;
    if !fits(e) {
        // Start near log2(amax / vmax) and settle exactly.
        e = ((amax / vmax).log2().ceil() as i32).clamp(-127, 127);
        while e > -127 && fits(e - 1) {
            e -= 1;
        }
        while e < 127 && !fits(e) {
            e += 1;
        }
    }
    u8::try_from(e + 127).map_err(|_| Error::invalid("block_scale::scale_code", "exponent", e))
}

fn check_row(arg: &str, len: usize, row: usize) -> Result<usize> {
    if row == 0 || !row.is_multiple_of(BLOCK) {
        return Err(Error::invalid(
            format!("{arg}: row"),
            format!("must be a positive multiple of the block ({BLOCK})"),
            row,
        ));
    }
    bounds::extent(&format!("{arg}: length"), len)?;
    if !len.is_multiple_of(row) {
        return Err(Error::invalid(
            format!("{arg}: length"),
            format!("must be a multiple of the row ({row})"),
            len,
        ));
    }
    Ok(len / BLOCK)
}

/// MXFP8 quantize `x` (rows of `row` elements, blocks of [`BLOCK`] along
/// each row) to `format` (see the module docs).
///
/// # Errors
/// `row` not a positive multiple of 32, `x`'s length not a multiple of
/// `row` or over the bounds, a non-finite element.
pub fn quantize(x: &[f64], row: usize, format: Fp8Format) -> Result<Mxfp8> {
    let arg = "block_scale::quantize";
    let blocks = check_row(arg, x.len(), row)?;
    if let Some((i, v)) = x.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(Error::invalid(
            format!("{arg}: x[{i}]"),
            "must be finite",
            v,
        ));
    }
    let mut values = bounds::buffer("values", x.len())?;
    let mut scales = bounds::buffer("scales", blocks)?;
    for block in x.chunks_exact(BLOCK) {
        let amax = block.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let code = scale_code(amax, format)?;
        let scale = e8m0_value(code);
        scales.push(code);
        values.extend(
            block
                .iter()
                .map(|&v| format.encode(v / scale, Fp8Saturation::SatFinite)),
        );
    }
    Ok(Mxfp8 { values, scales })
}

/// MXFP8 dequantize: each FP8 code of `values` (rows of `row`, `format`)
/// times its block's E8M0 scale, exactly (a NaN code or scale gives NaN).
///
/// # Errors
/// `row` not a positive multiple of 32, `values`' length not a multiple of
/// `row` or over the bounds, `scales` not one per block.
pub fn dequantize(values: &[u8], scales: &[u8], row: usize, format: Fp8Format) -> Result<Vec<f64>> {
    let arg = "block_scale::dequantize";
    let blocks = check_row(arg, values.len(), row)?;
    if scales.len() != blocks {
        return Err(Error::mismatch(
            format!("{arg}: scales length (one per {BLOCK} values)"),
            blocks,
            scales.len(),
        ));
    }
    let mut out = bounds::buffer("dequantized", values.len())?;
    for (block, &s) in values.chunks_exact(BLOCK).zip(scales) {
        let scale = e8m0_value(s);
        out.extend(block.iter().map(|&c| format.decode(c) * scale));
    }
    Ok(out)
}
