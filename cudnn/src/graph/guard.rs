//! Inputs the GPU uses as addresses or bounds, and the checked type that
//! binds sequence lengths safely.
//!
//! Most graph inputs are data: any bit pattern is harmless. A few are read
//! by cuDNN's kernels as page indices or as loop bounds, unchecked, so a bad
//! value makes the GPU read or write outside the tensors. A plan records
//! each of them with its [`InputGuard`] (from the graph when built, from the
//! plan JSON when loaded), and [`Bindings`](super::Bindings) binds them
//! only through the call the guard names: plain `input` refuses them.

use crate::error::{Error, Result};
use crate::runtime::{DeviceBuffer, DeviceSlice};

/// An input the GPU uses as an address or a bound, which therefore cannot be
/// bound with plain [`Bindings::input`](super::Bindings::input); a plan
/// lists its own with [`Plan::guarded_inputs`](super::Plan::guarded_inputs)
/// (for a plan loaded from JSON, the extent to build a [`SeqLengths`] with).
/// New kinds join here with their binding call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum InputGuard {
    /// A page table of a paged KV cache: its values are page indices
    /// ([`Bindings::input_page_table`](super::Bindings::input_page_table)).
    PageTable,
    /// Per-sequence lengths of the padding mask (`[B, 1, 1, 1]` i32): the
    /// kernels read and write rows `0..len`, so every value must be in
    /// `0..=extent` ([`Bindings::seq_lengths`](super::Bindings::seq_lengths)
    /// or [`Bindings::input_seq_lengths`](super::Bindings::input_seq_lengths)).
    SeqLengths {
        /// The sequence extent of the tensors the lengths bound.
        extent: i64,
    },
    /// Ragged offsets of a packed (THD) attention (`[B + 1, 1, 1, 1]` i32):
    /// cuDNN adds each value to its tensor's address
    /// ([`Bindings::input_ragged_offsets`](super::Bindings::input_ragged_offsets)).
    RaggedOffsets,
}

impl InputGuard {
    /// What the input is and the call that binds it, for `input`'s refusal.
    pub(crate) fn refusal(self, name: &str) -> Error {
        let (what, needs) = match self {
            InputGuard::PageTable => (
                "a page table of a paged KV cache, whose values the GPU uses as page indices \
                 without a bounds check"
                    .to_string(),
                "`Bindings::input_page_table` (unsafe: every entry a page of the K / V \
                 container, every key length within the pages a table row covers)"
                    .to_string(),
            ),
            InputGuard::SeqLengths { extent } => (
                format!(
                    "sequence lengths of the attention's padding mask, which the GPU uses as \
                     row bounds without a check (each must be in 0..={extent})"
                ),
                "`Bindings::seq_lengths` with a `SeqLengths` (values checked on the host), or \
                 `Bindings::input_seq_lengths` (unsafe) for lengths written on the device"
                    .to_string(),
            ),
            InputGuard::RaggedOffsets => (
                "ragged offsets of a packed (THD) attention, which the GPU adds to a tensor's \
                 address without a bounds check"
                    .to_string(),
                "`Bindings::input_ragged_offsets` (unsafe: every sequence inside its tensor's \
                 span, as `SdpaConfig::ragged_offsets` computes them)"
                    .to_string(),
            ),
        };
        Error::Unsupported {
            what: format!("binding `{name}` with `input`: it is {what}"),
            needs: Some(needs),
        }
    }
}

/// The guard of `uid` among a plan's guarded inputs.
pub(crate) fn guard_of(guarded: &[(i64, InputGuard)], uid: i64) -> Option<InputGuard> {
    guarded.iter().find(|(u, _)| *u == uid).map(|&(_, g)| g)
}

/// Checked per-sequence lengths of an attention's padding mask, bound with
/// [`Bindings::seq_lengths`](super::Bindings::seq_lengths).
///
/// cuDNN's attention kernels use these values as row bounds with no check:
/// a length past the Q / K / V sequence extent (or negative) makes the GPU
/// read past Q, K, V and write past O or the gradients. A `SeqLengths` is
/// made from host values, checked here, and owns its device copy, which it
/// never lends mutably: the values the GPU reads are the values checked.
/// Lengths written by a kernel (a growing KV cache) are bound with the
/// `unsafe` [`Bindings::input_seq_lengths`](super::Bindings::input_seq_lengths).
#[derive(Debug)]
pub struct SeqLengths {
    buf: DeviceBuffer<i32>,
    max: i32,
}

impl SeqLengths {
    /// Check `values` (one length per sequence: `batch` of them, each in
    /// `0..=extent`, `extent` the sequence extent of the tensors they bound)
    /// without touching a device. [`new`](Self::new) runs this first.
    ///
    /// # Errors
    /// A count other than `batch`, a negative `extent`, a value below 0 or
    /// above `extent`. Returns the largest value.
    pub fn check(values: &[i32], batch: usize, extent: i64) -> Result<i32> {
        if values.len() != batch {
            return Err(Error::mismatch(
                "SeqLengths values (one per sequence of the batch)",
                batch,
                values.len(),
            ));
        }
        if extent < 0 {
            return Err(Error::invalid("SeqLengths extent", "must be >= 0", extent));
        }
        let mut max = 0;
        for (i, &v) in values.iter().enumerate() {
            if v < 0 || i64::from(v) > extent {
                return Err(Error::invalid(
                    format!("SeqLengths value [{i}]"),
                    format!("must be in 0..={extent} (the sequence extent)"),
                    v,
                ));
            }
            max = max.max(v);
        }
        Ok(max)
    }

    /// Check `values` as [`check`](Self::check) does and copy them to a new
    /// buffer on the current device.
    ///
    /// # Errors
    /// As [`check`](Self::check); the allocation or the copy fails.
    pub fn new(values: &[i32], batch: usize, extent: i64) -> Result<Self> {
        let max = Self::check(values, batch, extent)?;
        let buf = DeviceBuffer::from_host(values)?;
        Ok(Self { buf, max })
    }

    /// Take lengths already on the device (`buf`, one per sequence), owned
    /// from now on and never lent mutably, vouching that none exceeds `max`.
    ///
    /// # Safety
    /// Every value of `buf` is in `0..=max` once the work writing it has
    /// completed (before any run reads it), and nothing else writes `buf`'s
    /// memory while the `SeqLengths` lives. The crate cannot check values on
    /// the device: a larger or negative value lets the GPU read past Q, K or
    /// V and write past O or the gradients.
    ///
    /// # Errors
    /// A negative `max`.
    pub unsafe fn from_device_unchecked(buf: DeviceBuffer<i32>, max: i32) -> Result<Self> {
        if max < 0 {
            return Err(Error::invalid("SeqLengths max", "must be >= 0", max));
        }
        Ok(Self { buf, max })
    }

    /// The largest length: what [`Bindings::seq_lengths`](super::Bindings::seq_lengths)
    /// compares with the plan's extent.
    pub fn max(&self) -> i32 {
        self.max
    }

    /// How many lengths (the batch).
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.buf.len() == 0
    }

    /// The device copy, read-only.
    pub fn as_slice(&self) -> DeviceSlice<'_, i32> {
        self.buf.as_slice()
    }

    /// Copy the lengths back (for checks).
    ///
    /// # Errors
    /// The copy fails.
    pub fn to_vec(&self) -> Result<Vec<i32>> {
        self.buf.to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_seq_lengths_check_accepts_in_range() {
        assert_eq!(SeqLengths::check(&[0, 3, 7], 3, 7).unwrap(), 7);
        assert_eq!(SeqLengths::check(&[], 0, 0).unwrap(), 0);
    }

    #[test]
    fn unit_seq_lengths_check_refuses_negative() {
        let e = SeqLengths::check(&[2, -1], 2, 8).unwrap_err().to_string();
        assert!(e.contains("[1]") && e.contains("-1"), "{e}");
    }

    #[test]
    fn unit_seq_lengths_check_refuses_above_extent() {
        let e = SeqLengths::check(&[9, 2], 2, 8).unwrap_err().to_string();
        assert!(e.contains("[0]") && e.contains("0..=8"), "{e}");
        assert!(SeqLengths::check(&[i32::MAX], 1, i64::from(i32::MAX) - 1).is_err());
        assert!(SeqLengths::check(&[0], 1, -1).is_err());
    }

    #[test]
    fn unit_seq_lengths_check_refuses_wrong_count() {
        let e = SeqLengths::check(&[1, 2, 3], 2, 8).unwrap_err().to_string();
        assert!(e.contains('2') && e.contains('3'), "{e}");
        assert!(SeqLengths::check(&[1], 2, 8).is_err());
    }

    #[test]
    fn unit_guard_refusal_names_the_call() {
        let e = InputGuard::SeqLengths { extent: 5 }
            .refusal("x")
            .to_string();
        assert!(e.contains("seq_lengths") && e.contains("0..=5"), "{e}");
        let e = InputGuard::PageTable.refusal("p").to_string();
        assert!(e.contains("input_page_table"), "{e}");
        let e = InputGuard::RaggedOffsets.refusal("r").to_string();
        assert!(e.contains("input_ragged_offsets"), "{e}");
    }
}
