//! Polling NCCL and CUDA to completion against a deadline: the building
//! blocks of [`Communicator::wait`](super::Communicator::wait), of
//! non-blocking communicators (`ncclInProgress`) and of `Drop`.

use std::time::{Duration, Instant};

use super::{api, sys};
use crate::error::Result;

/// The default deadline of a communicator's own polling (initialisation,
/// `ncclInProgress`, finalize in `Drop`): ten minutes, as PyTorch's
/// default collective timeout.
pub const DEFAULT_COMM_TIMEOUT: Duration = Duration::from_secs(600);

/// A deadline `timeout` from now; a timeout too large for the clock never
/// passes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    start: Instant,
    end: Option<Instant>,
}

impl Deadline {
    pub(crate) fn after(timeout: Duration) -> Self {
        let start = Instant::now();
        Deadline {
            start,
            end: start.checked_add(timeout),
        }
    }

    pub(crate) fn passed(&self) -> bool {
        self.end.is_some_and(|e| Instant::now() >= e)
    }

    pub(crate) fn waited(&self) -> Duration {
        self.start.elapsed()
    }

    pub(crate) fn left(&self) -> Duration {
        self.end
            .map(|e| e.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::MAX)
    }
}

/// Sleeps between polls: 20 µs, doubling up to 5 ms, never past the deadline.
#[derive(Debug)]
pub(crate) struct Backoff(Duration);

impl Backoff {
    pub(crate) fn new() -> Self {
        Backoff(Duration::from_micros(20))
    }

    pub(crate) fn sleep(&mut self, d: &Deadline) {
        std::thread::sleep(self.0.min(d.left()));
        self.0 = (self.0 * 2).min(Duration::from_millis(5));
    }
}

/// Where a communicator's last operation stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settled {
    /// `ncclSuccess`: ready for the next call.
    Ready,
    /// An error (its code); the communicator can only be aborted.
    Failed(sys::ncclResult_t),
    /// Still `ncclInProgress` at the deadline.
    TimedOut,
}

/// `ncclCommGetAsyncError` of `raw`.
///
/// # Safety
/// `raw` is a live communicator.
pub(crate) unsafe fn state(raw: sys::ncclComm_t) -> Result<sys::ncclResult_t> {
    // SAFETY: as the caller guarantees.
    unsafe { Nccl.state(raw) }
}

/// The NCCL calls that settle a job, behind a seam so that a test can
/// watch which are made, and on which thread.
pub(crate) trait JobCalls {
    /// The loaded NCCL's (major, minor).
    fn version(&self) -> Result<(u32, u32)>;
    /// `ncclCommGetAsyncError`.
    ///
    /// # Safety
    /// `raw` is a live communicator.
    unsafe fn state(&self, raw: sys::ncclComm_t) -> Result<sys::ncclResult_t>;
    /// `ncclGroupStart`, answered as is.
    ///
    /// # Safety
    /// As NCCL's.
    unsafe fn group_start(&self) -> Result<sys::ncclResult_t>;
    /// `ncclGroupEnd`, answered as is.
    ///
    /// # Safety
    /// A group is open on this thread.
    unsafe fn group_end(&self) -> Result<sys::ncclResult_t>;
    /// `ncclCommCount`, answered as is.
    ///
    /// # Safety
    /// `raw` is a live communicator.
    unsafe fn comm_count(&self, raw: sys::ncclComm_t) -> Result<sys::ncclResult_t>;
    /// `ncclCommFinalize`, answered as is.
    ///
    /// # Safety
    /// `raw` is a live communicator owned by the caller.
    unsafe fn comm_finalize(&self, raw: sys::ncclComm_t) -> Result<sys::ncclResult_t>;
    /// `ncclCommDestroy`, answered as is; ownership of `raw` ends.
    ///
    /// # Safety
    /// `raw` is a live communicator owned by the caller, not used again.
    unsafe fn comm_destroy(&self, raw: sys::ncclComm_t) -> Result<sys::ncclResult_t>;
}

/// The loaded NCCL.
pub(crate) struct Nccl;

impl JobCalls for Nccl {
    fn version(&self) -> Result<(u32, u32)> {
        let v = super::version()?;
        Ok((v.major, v.minor))
    }

    unsafe fn state(&self, raw: sys::ncclComm_t) -> Result<sys::ncclResult_t> {
        let api = api()?;
        let mut st = sys::ncclResult_t::ncclSuccess;
        // SAFETY: `raw` is live (caller); `st` is a valid out-pointer.
        let r = unsafe { api.ncclCommGetAsyncError(raw, &mut st) }?;
        super::check_result("ncclCommGetAsyncError", r)?;
        Ok(st)
    }

    unsafe fn group_start(&self) -> Result<sys::ncclResult_t> {
        // SAFETY: takes no arguments.
        Ok(unsafe { api()?.ncclGroupStart() }?)
    }

    unsafe fn group_end(&self) -> Result<sys::ncclResult_t> {
        // SAFETY: a group is open on this thread (caller).
        Ok(unsafe { api()?.ncclGroupEnd() }?)
    }

    unsafe fn comm_count(&self, raw: sys::ncclComm_t) -> Result<sys::ncclResult_t> {
        let mut n = 0;
        // SAFETY: `raw` is live (caller); `n` is a valid out-pointer.
        Ok(unsafe { api()?.ncclCommCount(raw, &mut n) }?)
    }

    unsafe fn comm_finalize(&self, raw: sys::ncclComm_t) -> Result<sys::ncclResult_t> {
        // SAFETY: `raw` is live and owned (caller).
        Ok(unsafe { api()?.ncclCommFinalize(raw) }?)
    }

    unsafe fn comm_destroy(&self, raw: sys::ncclComm_t) -> Result<sys::ncclResult_t> {
        // SAFETY: `raw` is live and owned, and not used again (caller).
        Ok(unsafe { api()?.ncclCommDestroy(raw) }?)
    }
}

/// The first NCCL whose group job is linked to its communicators (2.19)
/// and the first whose `ncclCommGetAsyncError` completes it (2.26).
const JOB_PER_COMM: (u32, u32) = (2, 19);

/// Settle, on this thread, the job NCCL linked to a non-blocking
/// communicator that is now ready, so nothing of it is left in this
/// thread's storage: a [`Communicator`](super::Communicator) is `Send`, and
/// NCCL would otherwise join and reset the job record of a thread that may
/// have exited when the communicator is next used or dropped elsewhere
/// (NCCL's source: a use-after-free on 2.19 to 2.25, a race before).
///
/// - NCCL 2.19 and later keep the job on the communicator; it is completed
///   and unlinked by `ncclCommEnsureReady`, which `ncclCommCount` calls
///   (from 2.26 `ncclCommGetAsyncError` does it too, harmless twice).
/// - Before 2.19 the job lives in this thread's storage and is completed
///   by the next `ncclGroupStart` of this thread once it is done (that
///   call answers `ncclInvalidUsage` while it is not): an empty group,
///   retried until the job is done or the deadline passes.
///
/// # Safety
/// `raw` is a live communicator whose state read `ncclSuccess`, and no
/// NCCL group is open on this thread.
unsafe fn release_job<A: JobCalls>(
    a: &A,
    raw: sys::ncclComm_t,
    deadline: &Deadline,
) -> Result<Settled> {
    if a.version()? < JOB_PER_COMM {
        let mut backoff = Backoff::new();
        loop {
            // SAFETY: no group is open (caller).
            let r = unsafe { a.group_start() }?;
            if r == sys::ncclResult_t::ncclSuccess {
                // SAFETY: closes the empty group just opened.
                let r = unsafe { a.group_end() }?;
                super::check_result("ncclGroupEnd", r)?;
                break;
            }
            if r != sys::ncclResult_t::ncclInvalidUsage {
                super::check_result("ncclGroupStart", r)?;
            }
            if deadline.passed() {
                return Ok(Settled::TimedOut);
            }
            backoff.sleep(deadline);
        }
    }
    // SAFETY: `raw` is live (caller).
    let r = unsafe { a.comm_count(raw) }?;
    super::check_result("ncclCommCount", r)?;
    Ok(Settled::Ready)
}

/// Poll `raw` until its state is no longer `ncclInProgress`, or the
/// deadline passes; once ready, the job NCCL linked to it is settled on
/// this thread ([`release_job`]).
///
/// # Safety
/// `raw` is a live communicator, and no NCCL group is open on this thread.
pub(crate) unsafe fn settle(raw: sys::ncclComm_t, deadline: &Deadline) -> Result<Settled> {
    // SAFETY: as the caller guarantees.
    unsafe { settle_with(&Nccl, raw, deadline) }
}

/// [`settle`] through `a`.
///
/// # Safety
/// As [`settle`].
pub(crate) unsafe fn settle_with<A: JobCalls>(
    a: &A,
    raw: sys::ncclComm_t,
    deadline: &Deadline,
) -> Result<Settled> {
    let mut backoff = Backoff::new();
    loop {
        // SAFETY: `raw` is live (caller).
        let st = unsafe { a.state(raw) }?;
        if st == sys::ncclResult_t::ncclSuccess {
            // SAFETY: `raw` is live (caller) and ready.
            return unsafe { release_job(a, raw, deadline) };
        }
        if st != sys::ncclResult_t::ncclInProgress {
            return Ok(Settled::Failed(st));
        }
        if deadline.passed() {
            return Ok(Settled::TimedOut);
        }
        backoff.sleep(deadline);
    }
}
