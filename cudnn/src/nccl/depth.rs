//! Whether an [`nccl::group`](super::group) is being recorded on this
//! thread, and the refusals that follow from it. Pure Rust: needs no NCCL.

use std::cell::Cell;
use std::marker::PhantomData;

use crate::error::{Error, Result};

thread_local! {
    /// How many [`group`](super::group) closures are running on this thread
    /// (0 or 1: nesting is refused).
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// Whether a [`group`](super::group) closure is running on this thread.
pub(crate) fn in_group() -> bool {
    DEPTH.with(|d| d.get() > 0)
}

/// `Err(Error::InGroup)` naming `call` when a group is being recorded on
/// this thread.
pub(crate) fn refuse(call: &'static str, why: &'static str) -> Result<()> {
    if in_group() {
        return Err(Error::InGroup { call, why });
    }
    Ok(())
}

/// Why the direct collectives are refused inside a group.
pub(crate) const WHY_DIRECT: &str = "a group launches its calls together when its closure returns; \
     use the Group's method (g.all_reduce(...)), which borrows the buffers until then";
/// Why communicator life-cycle calls are refused inside a group.
pub(crate) const WHY_LIFECYCLE: &str = "NCCL would defer it to the end of the group (and write a new \
     communicator later into memory that is gone by then); call it before or after the group";

/// The marker of a running group closure; leaving it (return, error or
/// panic) ends the recording. Neither `Send` nor `Sync`: it belongs to the
/// thread whose counter it raised.
#[derive(Debug)]
pub(crate) struct Recording(PhantomData<*mut ()>);

/// Start recording a group on this thread.
///
/// # Errors
/// [`Error::InGroup`] when one is being recorded already: nested groups are
/// refused (an inner group's buffers are borrowed only for the inner
/// closure, while NCCL would launch at the outermost end).
pub(crate) fn enter() -> Result<Recording> {
    refuse(
        "nccl::group",
        "nested groups are refused: the inner group's buffers would be borrowed only \
         for the inner closure; add the calls to the outer group instead",
    )?;
    DEPTH.with(|d| d.set(d.get().saturating_add(1)));
    Ok(Recording(PhantomData))
}

impl Drop for Recording {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}
