//! Aborting communicators: bounded on a helper thread where NCCL allows
//! it, and the split families that refuse calls while an abort of one of
//! them runs; `Drop` of a communicator.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::ThreadId;
use std::time::Duration;

use super::super::progress::{self, Deadline, JobCalls, Settled};
use super::super::{api, sys};
use super::{Communicator, Mode};

/// A communicator and everything split from it, transitively. With
/// resource sharing on (`splitShare`, `NCCL_COMM_SPLIT_SHARE_RESOURCES`;
/// this crate cannot read which), NCCL forbids using a parent and a child
/// in parallel (they share streams and proxy state), and using any of them
/// while another is being aborted (the abort reclaims shared resources).
/// So the family is one lock: every NCCL call of a member runs while its
/// thread holds it ([`Family::enter`], re-entrant on that thread), and
/// every abort of a member is counted here while it runs, on the calling
/// thread or on a helper that outlives the caller; the family refuses
/// calls meanwhile. An abort is only begun by the thread holding the lock,
/// so it never runs beside a member's call.
#[derive(Debug, Default)]
pub(crate) struct Family {
    state: Mutex<Use>,
    changed: Condvar,
}

/// Who uses a family now (see [`Family`]).
#[derive(Debug, Default)]
struct Use {
    /// The thread whose calls hold the family, and how deeply.
    owner: Option<ThreadId>,
    depth: usize,
    /// Aborts of members running (here or on helpers).
    aborting: usize,
}

/// Why [`Family::enter`] did not take the family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Busy {
    /// An abort of a member runs.
    Aborting,
    /// Another thread's call of a member did not return within the wait.
    Held,
}

impl Family {
    fn state(&self) -> MutexGuard<'_, Use> {
        // Nothing panics while the lock is held; a poisoned state is still
        // consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An abort of a member is running.
    pub(crate) fn aborting(&self) -> bool {
        self.state().aborting > 0
    }

    /// Take the family for the calling thread (re-entrant): wait at most
    /// `limit` while another thread's call holds it. A running abort is
    /// waited for too when `wait_aborts`, else refused at once.
    ///
    /// # Errors
    /// [`Busy`]: why the family was not taken.
    pub(crate) fn enter(
        self: &Arc<Self>,
        wait_aborts: bool,
        limit: Duration,
    ) -> std::result::Result<FamilyUse, Busy> {
        let me = std::thread::current().id();
        let deadline = Deadline::after(limit);
        let mut st = self.state();
        loop {
            let free = st.owner.is_none_or(|t| t == me);
            if free && st.aborting == 0 {
                st.owner = Some(me);
                st.depth = st.depth.saturating_add(1);
                return Ok(FamilyUse(Arc::clone(self)));
            }
            if st.aborting > 0 && !wait_aborts {
                return Err(Busy::Aborting);
            }
            if deadline.passed() {
                return Err(if st.aborting > 0 {
                    Busy::Aborting
                } else {
                    Busy::Held
                });
            }
            let wait = deadline.left().min(Duration::from_millis(50));
            st = match self.changed.wait_timeout(st, wait) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
    }

    /// Wait, without a bound, until no abort of a member runs.
    pub(crate) fn wait_aborts_end(&self) {
        let mut st = self.state();
        while st.aborting > 0 {
            st = match self.changed.wait(st) {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
        }
    }

    /// Count an abort from now until the guard is dropped (which may be on
    /// another thread). The caller holds the family ([`enter`](Self::enter)).
    pub(crate) fn begin_abort(self: &Arc<Self>) -> AbortRunning {
        let mut st = self.state();
        st.aborting = st.aborting.saturating_add(1);
        AbortRunning(Arc::clone(self))
    }
}

/// The family taken by this thread until dropped ([`Family::enter`]).
#[derive(Debug)]
#[must_use = "the family is held only while this lives"]
pub(crate) struct FamilyUse(Arc<Family>);

impl Drop for FamilyUse {
    fn drop(&mut self) {
        let mut st = self.0.state();
        st.depth = st.depth.saturating_sub(1);
        if st.depth == 0 {
            st.owner = None;
        }
        drop(st);
        self.0.changed.notify_all();
    }
}

/// An abort of a family member is running until this is dropped.
#[derive(Debug)]
pub(crate) struct AbortRunning(Arc<Family>);

impl Drop for AbortRunning {
    fn drop(&mut self) {
        let mut st = self.0.state();
        st.aborting = st.aborting.saturating_sub(1);
        drop(st);
        self.0.changed.notify_all();
    }
}

/// The longest this crate waits for `ncclCommAbort` where it promises a
/// bounded wait (`Drop`, [`Communicator::wait`], the polls of non-blocking
/// calls); past it the abort goes on in the background (and the
/// communicator's split family refuses calls until it ends). A polled call
/// whose group job is still linked then waits for the abort after all
/// (`Communicator::abort_for_call`): NCCL's job could still launch that
/// call's kernels after its buffers' borrows end.
///
/// One exception, before NCCL 2.27 only: a non-blocking communicator whose
/// last call was not seen finished (failed, or timed out while polled) is
/// aborted on the calling thread without this bound. NCCL up to 2.26 keeps
/// that call's group job in the issuing thread's storage (`__thread struct
/// ncclGroupJob ncclGroupJobMain` in `group.cc`) and the abort joins and
/// resets it, which only that thread may do. From 2.27 the job is on the
/// heap, reference-counted and joined once through an atomic flag, so
/// every abort uses the bounded helper.
pub(crate) const ABORT_LIMIT: Duration = Duration::from_secs(10);

/// The first NCCL whose non-blocking group job is heap-allocated and
/// reference-counted (`ncclGroupEndInternal` allocates it, and
/// `ncclGroupJobComplete` / `ncclGroupJobAbort` join it once): an abort
/// may then run on any thread.
const JOB_ON_HEAP: (u32, u32) = (2, 27);

/// Whether an abort of a communicator whose job NCCL may hold
/// (`linked`) must run on this thread, unbounded: before NCCL 2.27 only
/// ([`JOB_ON_HEAP`]; also when the version cannot be read).
pub(super) fn abort_here(linked: bool) -> bool {
    let v = crate::nccl::version().ok().map(|v| (v.major, v.minor));
    abort_here_for(linked, v)
}

/// [`abort_here`] for NCCL version `v` (major, minor), `None` when unknown.
pub(crate) fn abort_here_for(linked: bool, v: Option<(u32, u32)>) -> bool {
    linked && v.is_none_or(|v| v < JOB_ON_HEAP)
}

/// A communicator handle that may cross to the thread that aborts it.
struct SendComm(sys::ncclComm_t);
// SAFETY: NCCL lets any thread use a communicator, one at a time; the
// handle is moved to exactly one thread, which is then its only user.
unsafe impl Send for SendComm {}

/// Abort `raw` on a helper thread and wait for that at most `limit`:
/// `ncclCommAbort` can itself wait without end (behind work queued on a
/// stream that another, stuck communicator shares; for the proxy of a dead
/// peer). Past `limit` the abort goes on in the background and this
/// returns `false`: the communicator is abandoned (never used again), and
/// its memory is reclaimed only if the abort ends. Without a thread (none
/// can be started) the abort runs here.
///
/// # Safety
/// `raw` is a live communicator that nothing else uses or destroys, now or
/// later.
pub(crate) unsafe fn abort_bounded(
    raw: sys::ncclComm_t,
    limit: Duration,
    family: &Arc<Family>,
) -> bool {
    let (tx, rx) = std::sync::mpsc::channel();
    let c = SendComm(raw);
    // The family refuses calls until the abort ends, wherever it runs.
    let running = family.begin_abort();
    let spawned = std::thread::Builder::new()
        .name("cudnn-nccl-abort".into())
        .spawn(move || {
            let c = c;
            // SAFETY: as the caller guarantees; this thread is the
            // communicator's only user from here on.
            unsafe { abort_raw(c.0) };
            drop(running);
            let _ = tx.send(());
        });
    match spawned {
        Ok(_) => rx.recv_timeout(limit).is_ok(),
        Err(_) => {
            // The closure (and its guard) is gone: count this abort again.
            let _running = family.begin_abort();
            // SAFETY: as the caller guarantees.
            unsafe { abort_raw(raw) };
            true
        }
    }
}

/// Abort a communicator no wrapper owns; the status is ignored (the error
/// that matters is the caller's).
///
/// # Safety
/// `raw` is a live communicator that nothing else uses or destroys.
pub(super) unsafe fn abort_raw(raw: sys::ncclComm_t) {
    if let Ok(api) = api() {
        // SAFETY: as the caller guarantees; ownership ends here.
        let _ = unsafe { api.ncclCommAbort(raw) };
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        self.drop_with(&progress::Nccl);
    }
}

impl Communicator {
    /// `Drop` through `a` (NCCL, or a test double for the settle, finalize
    /// and destroy; an abort always goes to NCCL).
    pub(crate) fn drop_with<A: JobCalls>(&mut self, a: &A) {
        if self.aborted.get() {
            return;
        }
        // Take the split family: wait for another of it being aborted, or
        // used on another thread (NCCL forbids using this one meanwhile
        // when they share resources), at most ABORT_LIMIT; past it this
        // communicator is leaked, never touched again.
        let Ok(_use) = self.family.enter(true, ABORT_LIMIT) else {
            return;
        };
        let raw = self.raw.as_ptr();
        // SAFETY: live and owned (not aborted).
        let st = unsafe { a.state(raw) };
        let healthy = matches!(
            st,
            Ok(sys::ncclResult_t::ncclSuccess) | Ok(sys::ncclResult_t::ncclInProgress)
        );
        // A non-blocking communicator is flushed within its deadline; a
        // blocking one, or one with an error, is aborted (see the type's
        // docs). Statuses are ignored: Drop must not fail. A settle that
        // does not end ready may leave NCCL's job of it in this thread's
        // storage: then the abort runs here (it joins that job).
        let mut linked = self.job_linked.get();
        let graceful = healthy && self.mode.get() == Mode::NonBlocking && {
            let deadline = Deadline::after(self.timeout);
            let mut ready = || {
                // SAFETY: live and owned; the polls bound the wait.
                let r = matches!(
                    unsafe { progress::settle_with(a, raw, &deadline) },
                    Ok(Settled::Ready)
                );
                linked = !r;
                r
            };
            ready()
                // SAFETY: live, owned and ready.
                && unsafe { a.comm_finalize(raw) }.is_ok_and(|r| {
                    r == sys::ncclResult_t::ncclSuccess
                        || (r == sys::ncclResult_t::ncclInProgress && ready())
                })
        };
        if graceful {
            // SAFETY: finalized, so destroy does not wait; ownership ends.
            let _ = unsafe { a.comm_destroy(raw) };
        } else if abort_here(linked) {
            // Before NCCL 2.27 only (see ABORT_LIMIT): unbounded, here.
            let _running = self.family.begin_abort();
            // SAFETY: live and owned; ownership ends here.
            unsafe { abort_raw(raw) };
        } else {
            // SAFETY: live and owned; ownership ends here (passed to the
            // aborting thread); no job of it is held in this thread's
            // storage (none linked, or NCCL 2.27+ keeps it on the heap).
            let _ = unsafe { abort_bounded(raw, ABORT_LIMIT, &self.family) };
        }
    }
}
