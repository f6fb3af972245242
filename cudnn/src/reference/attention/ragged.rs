//! Ragged (packed THD) batches for the reference: moving a packed tensor
//! (each sequence's tokens one after the other from its element offset,
//! token-major: `[token][head][dim]`) to and from packed BHSD with the rows
//! past each length zero, which [`forward`](super::forward) and
//! [`backward`](super::backward) take with the same lengths.

use super::super::bounds;
use crate::error::{Error, Result};

/// Checks the dims (each, and `b * h * s * d`, within `MAX_ELEMENTS`),
/// `offsets` (`b + 1`), `lens` (`b`, each `<= s`) and that every
/// sequence's tokens lie inside `len` elements; returns `h * d`.
fn check(len: usize, offsets: &[i32], lens: &[usize], [b, h, s, d]: [usize; 4]) -> Result<usize> {
    if offsets.len() != b.saturating_add(1) || lens.len() != b {
        return Err(Error::mismatch(
            "ragged offsets / lens (b + 1 / b)",
            format!("{} / {b}", b.saturating_add(1)),
            format!("{} / {}", offsets.len(), lens.len()),
        ));
    }
    // Every dimension and the BHSD element count within MAX_ELEMENTS (so
    // `h * d` and every index below fit).
    bounds::count("ragged dims", &[b, h, s, d])?;
    let per = h * d;
    for (n, (&l, &o)) in lens.iter().zip(offsets).enumerate() {
        let start = usize::try_from(o)
            .map_err(|_| Error::invalid(format!("ragged offsets[{n}]"), "must be >= 0", o))?;
        let end = l
            .checked_mul(per)
            .and_then(|x| x.checked_add(start))
            .ok_or_else(|| Error::invalid(format!("ragged lens[{n}]"), "overflows", l))?;
        if l > s || end > len {
            return Err(Error::invalid(
                format!("ragged sequence {n}"),
                format!("must have a length <= {s} and end inside the {len} elements"),
                format!("offset {o}, length {l}"),
            ));
        }
    }
    Ok(per)
}

/// Packed BHSD `[b, h, s, d]` (rows past each length zero) from the ragged
/// tensor `packed`, its `offsets` (elements, `b + 1`) and `lens`.
///
/// # Errors
/// Lengths of `offsets` / `lens` not `b + 1` / `b`; a length above `s`; a
/// sequence outside `packed`; sizes that overflow; an output of more than
/// [`MAX_ELEMENTS`](crate::reference::MAX_ELEMENTS) values, or one the
/// allocator refuses (reserved fallibly: an error, never an abort).
pub fn ragged_unpack(
    packed: &[f64],
    offsets: &[i32],
    lens: &[usize],
    dims: [usize; 4],
) -> Result<Vec<f64>> {
    let per = check(packed.len(), offsets, lens, dims)?;
    let [b, h, s, d] = dims;
    let total = bounds::count("ragged dims", &dims)?;
    // Fallible: a refused allocation is an error, never an abort.
    let mut out = bounds::zeros("ragged dims", total)?;
    for n in 0..b {
        let start = offsets[n] as usize;
        for t in 0..lens[n] {
            for hh in 0..h {
                for i in 0..d {
                    out[((n * h + hh) * s + t) * d + i] = packed[start + t * per + hh * d + i];
                }
            }
        }
    }
    Ok(out)
}

/// The inverse of [`ragged_unpack`]: writes the valid rows of the packed
/// BHSD `bhsd` into a ragged buffer of `len` elements (the rest zero).
///
/// # Errors
/// As [`ragged_unpack`] (the output is `len` values); `bhsd` not
/// `b * h * s * d` long.
pub fn ragged_pack(
    bhsd: &[f64],
    offsets: &[i32],
    lens: &[usize],
    dims: [usize; 4],
    len: usize,
) -> Result<Vec<f64>> {
    let per = check(len, offsets, lens, dims)?;
    let [b, h, s, d] = dims;
    if Some(bhsd.len()) != per.checked_mul(s).and_then(|x| x.checked_mul(b)) {
        return Err(Error::mismatch(
            "ragged_pack bhsd length",
            format!("{dims:?}"),
            bhsd.len(),
        ));
    }
    // Bounded by MAX_ELEMENTS and allocated fallibly (an error, never an
    // abort).
    let mut out = bounds::zeros("ragged_pack len", len)?;
    for n in 0..b {
        let start = offsets[n] as usize;
        for t in 0..lens[n] {
            for hh in 0..h {
                for i in 0..d {
                    out[start + t * per + hh * d + i] = bhsd[((n * h + hh) * s + t) * d + i];
                }
            }
        }
    }
    Ok(out)
}
