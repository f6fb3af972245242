//! The size and work checks every reference makes before it allocates or
//! loops (see [the module docs](super#bounds)).

use std::fmt;

use super::{MAX_ELEMENTS, MAX_WORK};
use crate::error::{Error, Result};

/// Check every dimension of `dims` is at most [`MAX_ELEMENTS`] and so is
/// their product; returns the product. Errors name `arg` (or `arg[i]`).
pub(crate) fn count(arg: &str, dims: &[usize]) -> Result<usize> {
    if let Some((i, &d)) = dims.iter().enumerate().find(|&(_, &d)| d > MAX_ELEMENTS) {
        return Err(Error::invalid(
            format!("{arg}[{i}]"),
            format!("every dimension must be at most {MAX_ELEMENTS} (reference::MAX_ELEMENTS)"),
            format!("{d} (in {dims:?})"),
        ));
    }
    let product = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    match product {
        Some(n) if n <= MAX_ELEMENTS => Ok(n),
        _ => Err(too_many(arg, product, format!("{dims:?}"))),
    }
}

/// Check one extent (a row count, a batch count, ...) is at most
/// [`MAX_ELEMENTS`].
pub(crate) fn extent(arg: &str, n: usize) -> Result<usize> {
    if n > MAX_ELEMENTS {
        return Err(Error::invalid(
            arg,
            format!("must be at most {MAX_ELEMENTS} (reference::MAX_ELEMENTS)"),
            n,
        ));
    }
    Ok(n)
}

/// Check a product of extents (an element count) is at most
/// [`MAX_ELEMENTS`]; returns it. Errors name `arg` and show `what`.
pub(crate) fn elements(arg: &str, factors: &[usize], what: impl fmt::Display) -> Result<usize> {
    let product = factors.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    match product {
        Some(n) if n <= MAX_ELEMENTS => Ok(n),
        _ => Err(too_many(arg, product, what)),
    }
}

fn too_many(arg: &str, product: Option<usize>, what: impl fmt::Display) -> Error {
    let n = product.map_or_else(|| "overflows usize".to_string(), |n| n.to_string());
    Error::invalid(
        arg,
        format!("the element count must be at most {MAX_ELEMENTS} (reference::MAX_ELEMENTS)"),
        format!("{what} ({n} elements)"),
    )
}

/// Check the work `product(factors)` (0 when a factor is 0, whatever the
/// others) is at most [`MAX_WORK`]. Errors name `arg` and say how the work
/// was counted (`how`, e.g. `"outputs x window positions"`).
pub(crate) fn work(arg: &str, how: &str, factors: &[usize]) -> Result<u64> {
    if factors.contains(&0) {
        return Ok(0);
    }
    let total = factors
        .iter()
        .try_fold(1u64, |a, &f| a.checked_mul(u64::try_from(f).ok()?));
    match total {
        Some(w) if w <= MAX_WORK => Ok(w),
        _ => Err(Error::invalid(
            arg,
            format!("the work ({how}) must be at most {MAX_WORK} steps (reference::MAX_WORK)"),
            format!(
                "{} steps",
                total.map_or_else(|| "more than 2^64".to_string(), |w| w.to_string())
            ),
        )),
    }
}

/// Add up works already checked with [`work`]; the sum is checked too.
#[cfg(any(feature = "dnn", feature = "blas", test))]
pub(crate) fn total_work(arg: &str, how: &str, parts: &[u64]) -> Result<u64> {
    let total = parts.iter().try_fold(0u64, |a, &w| a.checked_add(w));
    match total {
        Some(w) if w <= MAX_WORK => Ok(w),
        _ => Err(Error::invalid(
            arg,
            format!("the work ({how}) must be at most {MAX_WORK} steps (reference::MAX_WORK)"),
            format!(
                "{} steps",
                total.map_or_else(|| "more than 2^64".to_string(), |w| w.to_string())
            ),
        )),
    }
}

/// An empty vector with room for `n` values: `n` at most [`MAX_ELEMENTS`]
/// and reserved fallibly. Errors name `arg`.
pub(crate) fn buffer<T>(arg: &str, n: usize) -> Result<Vec<T>> {
    extent(arg, n)?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|e| {
        Error::invalid(
            arg,
            format!("cannot allocate a buffer of that many elements: {e}"),
            n,
        )
    })?;
    Ok(v)
}

/// `n` zeros, allocated as [`buffer`] does.
pub(crate) fn zeros(arg: &str, n: usize) -> Result<Vec<f64>> {
    let mut v = buffer(arg, n)?;
    v.resize(n, 0.0);
    Ok(v)
}

/// Collect `values` (of exactly known length) into a buffer allocated as
/// [`buffer`] does.
pub(crate) fn collect<T>(arg: &str, values: impl ExactSizeIterator<Item = T>) -> Result<Vec<T>> {
    let mut v = buffer(arg, values.len())?;
    v.extend(values);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_checks_each_dimension_and_the_product() {
        assert_eq!(count("s", &[2, 3]).ok(), Some(6));
        assert_eq!(count("s", &[]).ok(), Some(1));
        assert_eq!(count("s", &[0, MAX_ELEMENTS]).ok(), Some(0));
        let e = count("s", &[0, MAX_ELEMENTS + 1]).unwrap_err().to_string();
        assert!(e.contains("`s[1]`"), "{e}");
        let e = count("s", &[MAX_ELEMENTS, 2]).unwrap_err().to_string();
        assert!(e.contains("`s`") && e.contains("element count"), "{e}");
        let e = count("s", &[MAX_ELEMENTS; 4]).unwrap_err().to_string();
        assert!(e.contains("overflows"), "{e}");
    }

    #[test]
    fn work_is_zero_with_a_zero_factor_and_bounded_otherwise() {
        assert_eq!(work("w", "x", &[usize::MAX, 0, usize::MAX]).ok(), Some(0));
        assert_eq!(work("w", "x", &[1 << 16, 1 << 16]).ok(), Some(MAX_WORK));
        let e = work("w", "x", &[1 << 16, (1 << 16) + 1])
            .unwrap_err()
            .to_string();
        assert!(e.contains("`w`") && e.contains("MAX_WORK"), "{e}");
        assert!(work("w", "x", &[usize::MAX, usize::MAX]).is_err());
        assert!(total_work("w", "x", &[MAX_WORK, 1]).is_err());
        assert_eq!(total_work("w", "x", &[1, 2]).ok(), Some(3));
    }

    #[test]
    fn buffers_are_bounded() {
        assert_eq!(zeros("b", 3).ok(), Some(vec![0.0; 3]));
        assert!(zeros("b", MAX_ELEMENTS + 1).is_err());
        assert!(buffer::<u8>("b", usize::MAX).is_err());
        assert_eq!(
            collect("b", [1.0, 2.0].into_iter()).ok(),
            Some(vec![1.0, 2.0])
        );
    }
}
