//! The length and rank rules of each collective, checked before NCCL is
//! called. Pure: usable (and tested) without a device.

use crate::error::{Error, Result};

/// One rank's place in a communicator: `rank` of `size`. Every collective
/// checks its arguments with these rules before calling NCCL; they are
/// public so a framework can check a whole bucket plan up front.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ranks {
    rank: usize,
    size: usize,
}

impl Ranks {
    /// `rank` of `size`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `size` is 0, `rank >= size`, or
    /// `size` does not fit NCCL's `int`.
    pub fn new(rank: usize, size: usize) -> Result<Self> {
        if size == 0 {
            return Err(Error::invalid(
                "size",
                "a communicator has at least one rank",
                size,
            ));
        }
        if i32::try_from(size).is_err() {
            return Err(Error::invalid(
                "size",
                format!("must fit NCCL's int (at most {})", i32::MAX),
                size,
            ));
        }
        if rank >= size {
            return Err(Error::invalid(
                "rank",
                format!(
                    "must be less than the communicator size {size}, i.e. 0..={}",
                    size - 1
                ),
                rank,
            ));
        }
        Ok(Ranks { rank, size })
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.size
    }

    /// A root or peer rank named by `arg` must be a rank of the communicator.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming `arg`, the value and the size.
    pub fn check_rank(&self, arg: &str, other: usize) -> Result<i32> {
        if other >= self.size {
            return Err(Error::invalid(
                arg,
                format!(
                    "must be a rank of this communicator (0..={}; size {})",
                    self.size - 1,
                    self.size
                ),
                other,
            ));
        }
        // size fits i32 (checked in `new`), so `other` does.
        Ok(other as i32)
    }

    /// Send and receive buffers of all-reduce (and reduce, broadcast) hold
    /// the same number of elements; returns it.
    ///
    /// # Errors
    /// [`Error::Mismatch`] naming the collective and both lengths.
    pub fn same_len(&self, what: &str, send: usize, recv: usize) -> Result<usize> {
        if send != recv {
            return Err(Error::mismatch(
                format!("{what}: receive buffer length (must equal the send buffer's)"),
                send,
                recv,
            ));
        }
        Ok(send)
    }

    /// All-gather: each rank sends `n`, all receive `size * n`; returns `n`.
    ///
    /// # Errors
    /// [`Error::Mismatch`] when `recv != size * send`.
    pub fn all_gather(&self, send: usize, recv: usize) -> Result<usize> {
        let want = send
            .checked_mul(self.size)
            .ok_or_else(|| Error::invalid("send length", "times size overflows usize", send))?;
        if recv != want {
            return Err(Error::mismatch(
                format!(
                    "all_gather: receive buffer length (size {} x send length {send})",
                    self.size
                ),
                want,
                recv,
            ));
        }
        Ok(send)
    }

    /// In-place all-gather: the buffer holds `size * n`; returns `n`.
    ///
    /// # Errors
    /// [`Error::Mismatch`] when the length is not a multiple of the size.
    pub fn all_gather_in_place(&self, len: usize) -> Result<usize> {
        self.divisible("all_gather_in_place", len)
    }

    /// Reduce-scatter: each rank sends `size * n` and receives `n`; returns `n`.
    ///
    /// # Errors
    /// [`Error::Mismatch`] when `send != size * recv`.
    pub fn reduce_scatter(&self, send: usize, recv: usize) -> Result<usize> {
        let want = recv
            .checked_mul(self.size)
            .ok_or_else(|| Error::invalid("receive length", "times size overflows usize", recv))?;
        if send != want {
            return Err(Error::mismatch(
                format!(
                    "reduce_scatter: send buffer length (size {} x receive length {recv})",
                    self.size
                ),
                want,
                send,
            ));
        }
        Ok(recv)
    }

    /// In-place reduce-scatter: the buffer holds `size * n`; returns `n`.
    ///
    /// # Errors
    /// [`Error::Mismatch`] when the length is not a multiple of the size.
    pub fn reduce_scatter_in_place(&self, len: usize) -> Result<usize> {
        self.divisible("reduce_scatter_in_place", len)
    }

    fn divisible(&self, what: &str, len: usize) -> Result<usize> {
        if !len.is_multiple_of(self.size) {
            return Err(Error::mismatch(
                format!("{what}: buffer length"),
                format!("a multiple of the communicator size {}", self.size),
                len,
            ));
        }
        Ok(len / self.size)
    }
}
