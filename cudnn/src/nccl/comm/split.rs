//! Splitting a communicator (`ncclCommSplit`), and what a split child
//! takes from its parent.

use std::ffi::c_int;
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicPtr, Ordering};

use super::super::depth::{self, WHY_LIFECYCLE};
use super::super::progress;
use super::super::{api, sys};
use super::abort::abort_raw;
use super::{Communicator, Mode, nccl_error};
use crate::error::{Error, Result};

impl Communicator {
    /// Split into sub-communicators (`ncclCommSplit`). Every rank calls it;
    /// ranks passing the same `color` end up together, ordered by `key`
    /// (then by their old rank). `color: None` takes no part and gets
    /// `None` back. The new communicator inherits this one's configuration
    /// (a split of a non-blocking communicator is non-blocking, polled
    /// within [`timeout`](Self::timeout), which it inherits too; so are its
    /// resource sharing and abort flag: see the type's docs). Whatever
    /// NCCL answers, this communicator is polled until NCCL is done before
    /// the new one is read (a non-blocking split answers `ncclSuccess` and
    /// finishes on NCCL's thread).
    ///
    /// # Errors
    /// [`Error::InGroup`] inside a [`group`](crate::nccl::group) (NCCL would
    /// defer the split and write the new communicator later);
    /// [`Error::InvalidArgument`] when `color` does not fit a non-negative
    /// C int; [`Error::Nccl`] when NCCL fails; [`Error::Timeout`] when a
    /// non-blocking split passes the deadline. This communicator is aborted
    /// when the split fails asynchronously or passes the deadline; a
    /// communicator NCCL may still be making is then leaked, never freed
    /// while NCCL could write it.
    #[doc(alias = "ncclCommSplit")]
    pub fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Self>> {
        depth::refuse("Communicator::split", WHY_LIFECYCLE)?;
        let asked = color;
        let color = match color {
            None => sys::NCCL_SPLIT_NOCOLOR,
            Some(c) => c_int::try_from(c)
                .map_err(|_| Error::invalid("color", "must be at most i32::MAX", c))?,
        };
        let _use = self.enter_family()?;
        let raw = self.live()?;
        let api = api()?;
        // On the heap, and read atomically: with a non-blocking parent,
        // ncclCommSplit returns ncclSuccess after writing null here, and
        // NCCL's own thread stores the new communicator later (an atomic
        // release store, before the parent's state leaves ncclInProgress).
        // Until the parent is seen ready this slot is never read nor freed.
        let new: Box<AtomicPtr<sys::ncclComm>> = Box::new(AtomicPtr::new(ptr::null_mut()));
        // The ranks of this process that split with the same color are
        // compared like the parent's: registered before NCCL is called
        // (no rank's split returns before every rank called it).
        let pending = self.member.as_ref().map(|m| m.split(asked));
        // SAFETY: the communicator is live; `new` is a valid out-pointer
        // that stays valid until NCCL is done with it (it is leaked on
        // every path where that is not known); a null config asks for the
        // parent's configuration.
        let r = unsafe { api.ncclCommSplit(raw, color, key, new.as_ptr(), ptr::null_mut()) }?;
        // Whatever the answer, NCCL may still be working: a non-blocking
        // parent (known as such or not: one from `from_raw` may be) is
        // in progress now. A blocking parent reads ready at once.
        // SAFETY: `raw` is live.
        if let Ok(sys::ncclResult_t::ncclInProgress) = unsafe { progress::state(raw) } {
            self.mark_non_blocking();
        }
        if r == sys::ncclResult_t::ncclInProgress {
            self.mark_non_blocking();
        }
        let polled = self.poll("ncclCommSplit");
        let refused = r != sys::ncclResult_t::ncclSuccess && r != sys::ncclResult_t::ncclInProgress;
        let failed = match polled {
            Ok(()) if !refused => None,
            Ok(()) => Some(self.annotate(nccl_error("ncclCommSplit", r))),
            Err(p) if refused => Some(
                self.annotate(nccl_error("ncclCommSplit", r))
                    .with_context(format!("then: {p}")),
            ),
            Err(p) => Some(p),
        };
        if let Some(e) = failed {
            // Not known to be done with `new` (or failed): leak it, never
            // read nor freed, so no late write can land in freed memory;
            // a communicator NCCL may have made is leaked with it.
            std::mem::forget(new);
            return Err(e);
        }
        // The parent is ready: NCCL's store (if any) happened before.
        let new = new.load(Ordering::Acquire);
        if new.is_null() {
            return Ok(None);
        }
        // SAFETY: NCCL made a live communicator for us.
        let mut child = match unsafe { Self::from_raw(new) } {
            Ok(c) => c,
            Err(e) => {
                // SAFETY: NCCL made it; no wrapper owns it.
                unsafe { abort_raw(new) };
                return Err(self.annotate(e));
            }
        };
        // Compared with its siblings, or refusing every call when it cannot
        // be (clique::Pending::bind); never uncompared.
        if let Some(p) = pending {
            child.member = Some(p.bind(child.rank(), child.size()));
        }
        self.inherit(&mut child);
        Ok(Some(child))
    }

    /// What a split child takes from its parent: the blocking mode (unless
    /// NCCL_COMM_BLOCKING overrides both), the timeout, and the split
    /// family (one lock for both; see [`Family`]).
    pub(crate) fn inherit(&self, child: &mut Communicator) {
        if child.mode.get() == Mode::Unknown {
            child.mode.set(self.mode.get());
        }
        child.timeout = self.timeout;
        child.family = Arc::clone(&self.family);
    }
}
