//! Unit tests of the settling of non-blocking calls with a mocked NCCL
//! (no library, no device): the calls that release NCCL's job record are
//! made on the issuing thread, before `settle` (and a communicator's
//! `poll`, which the calls, groups and splits go through) returns.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::cell::RefCell;
use std::collections::VecDeque;
use std::thread::ThreadId;
use std::time::Duration;

use super::progress::{Deadline, JobCalls, Settled, settle_with};
use super::sys;
use crate::error::Result;

use sys::ncclResult_t as R;

/// A scripted NCCL that logs each call with the thread that made it.
struct Mock {
    version: (u32, u32),
    /// Answers of `ncclCommGetAsyncError`, in order (the last repeats).
    states: RefCell<VecDeque<R>>,
    /// Answers of `ncclGroupStart`, in order (then `ncclSuccess`).
    starts: RefCell<VecDeque<R>>,
    log: RefCell<Vec<(&'static str, ThreadId)>>,
    /// When set: every call made while it reads `false` is logged as
    /// "early" too (made before another thread let the family go).
    gate: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl Mock {
    fn new(version: (u32, u32), states: &[R], starts: &[R]) -> Self {
        Mock {
            version,
            states: RefCell::new(states.iter().copied().collect()),
            starts: RefCell::new(starts.iter().copied().collect()),
            log: RefCell::new(Vec::new()),
            gate: None,
        }
    }

    fn note(&self, call: &'static str) {
        if let Some(g) = &self.gate
            && !g.load(std::sync::atomic::Ordering::SeqCst)
        {
            self.log
                .borrow_mut()
                .push(("early", std::thread::current().id()));
        }
        self.log
            .borrow_mut()
            .push((call, std::thread::current().id()));
    }

    fn calls(&self) -> Vec<&'static str> {
        self.log.borrow().iter().map(|(c, _)| *c).collect()
    }
}

impl JobCalls for Mock {
    fn version(&self) -> Result<(u32, u32)> {
        Ok(self.version)
    }
    unsafe fn state(&self, _: sys::ncclComm_t) -> Result<R> {
        self.note("ncclCommGetAsyncError");
        let mut q = self.states.borrow_mut();
        Ok(if q.len() > 1 {
            q.pop_front().unwrap()
        } else {
            *q.front().unwrap()
        })
    }
    unsafe fn group_start(&self) -> Result<R> {
        self.note("ncclGroupStart");
        Ok(self
            .starts
            .borrow_mut()
            .pop_front()
            .unwrap_or(R::ncclSuccess))
    }
    unsafe fn group_end(&self) -> Result<R> {
        self.note("ncclGroupEnd");
        Ok(R::ncclSuccess)
    }
    unsafe fn comm_count(&self, _: sys::ncclComm_t) -> Result<R> {
        self.note("ncclCommCount");
        Ok(R::ncclSuccess)
    }
    unsafe fn comm_finalize(&self, _: sys::ncclComm_t) -> Result<R> {
        self.note("ncclCommFinalize");
        Ok(R::ncclInProgress)
    }
    unsafe fn comm_destroy(&self, _: sys::ncclComm_t) -> Result<R> {
        self.note("ncclCommDestroy");
        Ok(R::ncclSuccess)
    }
}

/// Settle on a thread of its own (the issuing thread); the log as it is
/// when `settle` returned, and whether every call was made on that thread.
fn settle_on_a_thread(m: Mock) -> (Settled, Vec<&'static str>, bool) {
    std::thread::spawn(move || {
        let me = std::thread::current().id();
        let deadline = Deadline::after(Duration::from_secs(5));
        // SAFETY: the mock never dereferences the communicator.
        let r = unsafe { settle_with(&m, std::ptr::null_mut(), &deadline) }.unwrap();
        let here = m.log.borrow().iter().all(|(_, t)| *t == me);
        (r, m.calls(), here)
    })
    .join()
    .unwrap()
}

/// NCCL 2.19 and later: once the state reads ready, `ncclCommCount`
/// (which runs `ncclCommEnsureReady`, completing and unlinking the job) is
/// called on the issuing thread before `settle` returns.
#[test]
fn unit_settle_counts_on_the_issuing_thread_from_2_19() {
    for version in [(2, 19), (2, 25), (2, 26), (2, 30)] {
        let m = Mock::new(
            version,
            &[R::ncclInProgress, R::ncclInProgress, R::ncclSuccess],
            &[],
        );
        let (r, calls, here) = settle_on_a_thread(m);
        assert_eq!(r, Settled::Ready, "{version:?}");
        assert_eq!(
            calls,
            [
                "ncclCommGetAsyncError",
                "ncclCommGetAsyncError",
                "ncclCommGetAsyncError",
                "ncclCommCount"
            ],
            "{version:?}"
        );
        assert!(here, "{version:?}: a call made on another thread");
    }
}

/// Before NCCL 2.19 the job lives in the issuing thread's storage: an
/// empty group on that thread, retried while `ncclGroupStart` answers
/// `ncclInvalidUsage` (the job not done yet), completes it before `settle`
/// returns.
#[test]
fn unit_settle_opens_an_empty_group_before_2_19() {
    let m = Mock::new(
        (2, 18),
        &[R::ncclInProgress, R::ncclSuccess],
        &[R::ncclInvalidUsage, R::ncclInvalidUsage],
    );
    let (r, calls, here) = settle_on_a_thread(m);
    assert_eq!(r, Settled::Ready);
    assert_eq!(
        calls,
        [
            "ncclCommGetAsyncError",
            "ncclCommGetAsyncError",
            "ncclGroupStart",
            "ncclGroupStart",
            "ncclGroupStart",
            "ncclGroupEnd",
            "ncclCommCount"
        ]
    );
    assert!(here, "a call made on another thread");
}

/// A failed communicator is reported, and no job is settled (the abort
/// that follows joins it).
#[test]
fn unit_settle_failed_settles_nothing() {
    let m = Mock::new((2, 21), &[R::ncclInProgress, R::ncclRemoteError], &[]);
    let (r, calls, _) = settle_on_a_thread(m);
    assert_eq!(r, Settled::Failed(R::ncclRemoteError));
    assert!(!calls.contains(&"ncclCommCount"), "{calls:?}");
}

/// At the deadline a communicator still in progress times out, with no
/// job settled.
#[test]
fn unit_settle_times_out_in_progress() {
    let m = Mock::new((2, 21), &[R::ncclInProgress], &[]);
    let deadline = Deadline::after(Duration::from_millis(30));
    // SAFETY: the mock never dereferences the communicator.
    let r = unsafe { settle_with(&m, std::ptr::null_mut(), &deadline) }.unwrap();
    assert_eq!(r, Settled::TimedOut);
    assert!(!m.calls().contains(&"ncclCommCount"));
}

/// Drive a fake non-blocking communicator's `poll` (the path of every
/// `ncclInProgress` answer: direct calls, a group's settle, split,
/// finalize) through the mock on a thread of its own, while `busy` keeps
/// its split family taken on another thread for a while: `Family::begin_abort`
/// (a sibling's abort) or a sibling's call. What poll answered, the calls
/// made (all on the polling thread?), and whether a job is still linked.
fn poll_beside(busy: &str, release_after: Duration) -> (Result<()>, Vec<&'static str>, bool, bool) {
    use super::comm::Communicator;
    use std::mem::ManuallyDrop;
    let busy = busy.to_string();
    std::thread::spawn(move || {
        let comm = ManuallyDrop::new(Communicator::fake(std::ptr::NonNull::dangling()));
        comm.set_mode(super::comm::Mode::NonBlocking);
        let family = std::sync::Arc::clone(comm.family());
        let (tx, rx) = std::sync::mpsc::channel();
        let other = std::thread::spawn(move || {
            let guard: Box<dyn Send> = if busy == "abort" {
                Box::new(family.begin_abort())
            } else {
                Box::new(family.enter(false, Duration::from_secs(1)).unwrap())
            };
            tx.send(()).unwrap();
            std::thread::sleep(release_after);
            drop(guard);
        });
        rx.recv().unwrap();
        let m = Mock::new((2, 21), &[R::ncclInProgress, R::ncclSuccess], &[]);
        let r = comm.poll_with(&m, "ncclAllReduce");
        other.join().unwrap();
        let me = std::thread::current().id();
        let here = m.log.borrow().iter().all(|(_, t)| *t == me);
        (r, m.calls(), here, comm.job_linked())
    })
    .join()
    .unwrap()
}

/// A sibling's abort that began after this communicator's non-blocking
/// call answered `ncclInProgress` is waited for (it ends within the
/// bound), then the call is settled on the polling thread and no job is
/// left in its storage. Before the fix poll refused at once (the family
/// was aborting), settling nothing: NCCL 2.19-2.26 kept the job linked to
/// the thread's storage (a use-after-free once it exits).
#[test]
fn unit_poll_waits_for_a_family_abort_then_settles() {
    let (r, calls, here, linked) = poll_beside("abort", Duration::from_millis(100));
    r.unwrap();
    assert_eq!(
        calls,
        [
            "ncclCommGetAsyncError",
            "ncclCommGetAsyncError",
            "ncclCommCount"
        ]
    );
    assert!(here, "a call made on another thread");
    assert!(!linked, "the job is still linked to the polling thread");
}

/// A sibling's call in flight on another thread is waited for too (NCCL
/// forbids members sharing resources to run in parallel), then the call is
/// settled on the polling thread.
#[test]
fn unit_poll_waits_for_a_siblings_call_then_settles() {
    let (r, calls, here, linked) = poll_beside("call", Duration::from_millis(100));
    r.unwrap();
    assert_eq!(calls.last(), Some(&"ncclCommCount"), "{calls:?}");
    assert!(here && !linked);
}

/// A group that ended `ncclInProgress` is settled through the seam
/// (`record::settle_group`, what the NCCL executor runs): each of its
/// communicators once, all on the issuing thread, none left linked, while
/// a sibling's abort that began meanwhile is waited for. Before the fix
/// the settle refused every member of the aborting family unsettled.
#[test]
fn unit_group_settle_waits_for_a_family_abort_and_settles_each_once() {
    use super::comm::{Communicator, Mode};
    use super::op::{Call, Op, ReduceOp};
    use super::record::{Recorded, settle_group};
    use crate::runtime::Stream;
    use std::mem::ManuallyDrop;
    use std::ptr::NonNull;
    let (r, calls, here, linked) = std::thread::spawn(|| {
        let fake = |a: usize| {
            let c = ManuallyDrop::new(Communicator::fake(
                NonNull::new(a as *mut sys::ncclComm).unwrap(),
            ));
            c.set_mode(Mode::NonBlocking);
            c
        };
        let a = fake(0x10);
        let mut b = fake(0x20);
        a.inherit(&mut b);
        let stream = Stream::legacy();
        let p = 0x1000 as *mut std::ffi::c_void;
        let call = || {
            Call::new::<f32>(Op::AllReduce {
                send: p,
                recv: p,
                count: 4,
                op: ReduceOp::Sum,
            })
        };
        let recs = [
            Recorded {
                comm: &a,
                stream: &stream,
                call: call(),
            },
            Recorded {
                comm: &b,
                stream: &stream,
                call: call(),
            },
            Recorded {
                comm: &a,
                stream: &stream,
                call: call(),
            },
        ];
        let refs: Vec<&Recorded<'_>> = recs.iter().collect();
        let running = a.family().begin_abort();
        let ender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(running);
        });
        let m = Mock::new((2, 21), &[R::ncclSuccess], &[]);
        let r = settle_group(&m, &refs);
        ender.join().unwrap();
        let me = std::thread::current().id();
        let here = m.log.borrow().iter().all(|(_, t)| *t == me);
        (r, m.calls(), here, a.job_linked() || b.job_linked())
    })
    .join()
    .unwrap();
    r.unwrap();
    assert_eq!(
        calls,
        [
            "ncclCommGetAsyncError",
            "ncclCommCount",
            "ncclCommGetAsyncError",
            "ncclCommCount"
        ],
        "each communicator once"
    );
    assert!(here, "a call made on another thread");
    assert!(!linked, "a job is still linked to the issuing thread");
}

/// `Drop` of a healthy non-blocking communicator through the seam, while
/// a sibling of its split family is in a call on another thread: it waits
/// for that call to return before touching NCCL (NCCL forbids members
/// sharing resources to run in parallel), then settles the last call on
/// the dropping thread, finalizes, settles the finalize and destroys.
/// Before the fix `Drop` waited only for aborts and went ahead beside the
/// sibling's call.
#[test]
fn unit_drop_waits_for_a_siblings_call_then_finalizes_here() {
    use super::comm::{Communicator, Mode};
    use std::mem::ManuallyDrop;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let (calls, here) = std::thread::spawn(|| {
        let mut comm = ManuallyDrop::new(Communicator::fake(std::ptr::NonNull::dangling()));
        comm.set_mode(Mode::NonBlocking);
        let family = Arc::clone(comm.family());
        let released = Arc::new(AtomicBool::new(false));
        let gate = Arc::clone(&released);
        let (tx, rx) = std::sync::mpsc::channel();
        let sibling = std::thread::spawn(move || {
            let call = family.enter(false, Duration::from_secs(1)).unwrap();
            tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(100));
            gate.store(true, Ordering::SeqCst);
            drop(call);
        });
        rx.recv().unwrap();
        let mut m = Mock::new((2, 21), &[R::ncclSuccess], &[]);
        m.gate = Some(released);
        comm.drop_with(&m);
        sibling.join().unwrap();
        let me = std::thread::current().id();
        let here = m.log.borrow().iter().all(|(_, t)| *t == me);
        (m.calls(), here)
    })
    .join()
    .unwrap();
    assert_eq!(
        calls,
        [
            "ncclCommGetAsyncError",
            "ncclCommGetAsyncError",
            "ncclCommCount",
            "ncclCommFinalize",
            "ncclCommGetAsyncError",
            "ncclCommCount",
            "ncclCommDestroy"
        ]
    );
    assert!(here, "a call made on another thread");
}
