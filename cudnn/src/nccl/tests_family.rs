//! Unit tests of the split families and of the stream holds of a group
//! (no NCCL, no device): the family lock, the split wiring, and what a
//! group takes and holds while it is issued, observed from other threads.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::comm::{Busy, Communicator, Family, Mode};
use super::group::run;
use super::op::{Call, Op, ReduceOp};
use super::record::{Exec, Recorded, issue_all};
use crate::error::{Error, Result};
use crate::runtime::Stream;

/// A communicator never handed to NCCL and never dropped.
fn fake_comm() -> ManuallyDrop<Communicator> {
    ManuallyDrop::new(Communicator::fake(NonNull::dangling()))
}

fn call(count: usize) -> Call {
    let p = 0x1000 as *mut std::ffi::c_void;
    Call::new::<f32>(Op::AllReduce {
        send: p,
        recv: p,
        count,
        op: ReduceOp::Sum,
    })
}

/// Whether another thread can take `family` within `wait`.
fn other_thread_enters(family: &Arc<Family>, wait: Duration) -> std::result::Result<(), Busy> {
    let f = Arc::clone(family);
    thread::spawn(move || f.enter(false, wait).map(drop))
        .join()
        .unwrap()
}

/// The wiring of a split child, as `Communicator::split` does it
/// (`inherit`): the child is in its parent's family (an abort of the parent
/// refuses the child's calls), and takes its mode and timeout. Before the
/// fix the test joined the family with a test-only helper, so losing the
/// assignment in `split` went unseen.
#[test]
fn unit_split_child_shares_the_parents_family() {
    let mut parent = fake_comm();
    parent.set_mode(Mode::NonBlocking);
    parent.set_timeout(Duration::from_secs(7));
    let mut child = fake_comm();
    parent.inherit(&mut child);
    assert!(Arc::ptr_eq(parent.family(), child.family()));
    assert_eq!(child.mode(), Mode::NonBlocking);
    assert_eq!(child.timeout(), Duration::from_secs(7));
    let stranger = fake_comm();
    assert!(!Arc::ptr_eq(parent.family(), stranger.family()));
    let running = parent.family().begin_abort();
    let err = child.live().unwrap_err();
    assert!(err.to_string().contains("being aborted"), "{err}");
    assert!(stranger.live().is_ok());
    drop(running);
    assert!(child.live().is_ok());
}

/// One thread at a time uses a family (NCCL forbids using a parent and a
/// child that share resources in parallel): a second thread is kept out
/// while any member is in a call, re-entrant on the holding thread, and
/// gets in once the outermost call returned.
#[test]
fn unit_family_lock_excludes_other_threads_and_is_reentrant() {
    let parent = fake_comm();
    let mut child = fake_comm();
    parent.inherit(&mut child);
    let outer = parent.enter_family().unwrap();
    let inner = child.enter_family().unwrap();
    let short = Duration::from_millis(30);
    assert_eq!(other_thread_enters(child.family(), short), Err(Busy::Held));
    drop(inner);
    assert_eq!(
        other_thread_enters(child.family(), short),
        Err(Busy::Held),
        "still held by the outer call"
    );
    drop(outer);
    assert_eq!(other_thread_enters(child.family(), short), Ok(()));
    // A call that waits for another thread's call is refused with the
    // communicator named once its timeout passes.
    let mut waiting = fake_comm();
    parent.inherit(&mut waiting);
    waiting.set_timeout(Duration::from_millis(30));
    let f = Arc::clone(parent.family());
    let (tx, rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let holder = thread::spawn(move || {
        let _use = f.enter(false, Duration::from_secs(1)).unwrap();
        tx.send(()).unwrap();
        done_rx.recv().unwrap();
    });
    rx.recv().unwrap();
    let err = waiting.enter_family().unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument { arg, .. } if arg == "communicator"),
        "{err:?}"
    );
    assert!(err.to_string().contains("another thread"), "{err}");
    done_tx.send(()).unwrap();
    holder.join().unwrap();
}

/// An abort (as `Drop` begins it) waits for a call of another member in
/// flight on another thread instead of running beside it: it takes the
/// family only after that call returned.
#[test]
fn unit_abort_waits_for_a_members_call_in_flight() {
    let parent = fake_comm();
    let mut child = fake_comm();
    parent.inherit(&mut child);
    let f = Arc::clone(child.family());
    let (tx, rx) = std::sync::mpsc::channel();
    let y = thread::spawn(move || {
        let _call = f.enter(false, Duration::from_secs(1)).unwrap();
        tx.send(Instant::now()).unwrap();
        thread::sleep(Duration::from_millis(150));
        Instant::now()
    });
    rx.recv().unwrap();
    let fam = Arc::clone(parent.family());
    let taken = fam.enter(true, Duration::from_secs(5)).unwrap();
    let at = Instant::now();
    let call_ended = y.join().unwrap();
    assert!(
        at >= call_ended,
        "the abort's side began before the call returned"
    );
    let _abort = fam.begin_abort();
    drop(taken);
    // Held by the abort now: a member's call is refused at once.
    assert_eq!(
        other_thread_enters(parent.family(), Duration::from_secs(1)),
        Err(Busy::Aborting)
    );
}

/// What an executor saw of the family and the stream, from another thread,
/// while it issued a group.
#[derive(Default)]
struct Probe {
    families: Vec<Arc<Family>>,
    /// Per issued call: whether another thread could take each family.
    entered: Vec<Vec<std::result::Result<(), Busy>>>,
    /// A stream another thread tries to begin capturing during `issue`.
    stream: Option<Stream>,
    captured: Vec<bool>,
    log: Vec<&'static str>,
}

impl Exec for Probe {
    fn ready(&mut self, _: &[&Recorded<'_>]) -> Result<()> {
        self.log.push("ready");
        Ok(())
    }
    fn start(&mut self) -> Result<()> {
        self.log.push("start");
        Ok(())
    }
    fn issue(&mut self, _: &Recorded<'_>) -> Result<()> {
        self.log.push("issue");
        let short = Duration::from_millis(20);
        let seen = self
            .families
            .iter()
            .map(|f| other_thread_enters(f, short))
            .collect();
        self.entered.push(seen);
        if let Some(s) = self.stream.clone() {
            // As `Stream::capture` begins: mark, then wait (1 s) for the
            // calls queueing on the stream.
            let began = thread::spawn(move || {
                let r = s.mark_capturer();
                if r.is_ok() {
                    s.clear_capturer();
                }
                r.is_ok()
            })
            .join()
            .unwrap();
            self.captured.push(began);
        }
        Ok(())
    }
    fn poison(&mut self) {}
    fn end(&mut self) -> Result<bool> {
        self.log.push("end");
        Ok(false)
    }
    fn settle(&mut self, _: &[&Recorded<'_>]) -> Result<()> {
        Ok(())
    }
}

/// A group over two members of one family and one of another takes each
/// family once (no self-deadlock) and holds both through the issue: no
/// other thread gets in; afterwards they are free. Before the fix the
/// group checked the families when recording only.
#[test]
fn unit_group_holds_every_family_through_the_issue() {
    let parent = fake_comm();
    let mut child = fake_comm();
    parent.inherit(&mut child);
    let stranger = fake_comm();
    let stream = Stream::legacy();
    let calls = vec![
        Recorded {
            comm: &parent,
            stream: &stream,
            call: call(4),
        },
        Recorded {
            comm: &child,
            stream: &stream,
            call: call(4),
        },
        Recorded {
            comm: &stranger,
            stream: &stream,
            call: call(4),
        },
    ];
    let mut probe = Probe {
        families: vec![Arc::clone(parent.family()), Arc::clone(stranger.family())],
        ..Probe::default()
    };
    issue_all(&mut probe, &calls).unwrap();
    assert_eq!(probe.entered.len(), 3);
    for seen in &probe.entered {
        assert_eq!(seen, &[Err(Busy::Held), Err(Busy::Held)]);
    }
    let short = Duration::from_millis(20);
    assert_eq!(other_thread_enters(parent.family(), short), Ok(()));
    assert_eq!(other_thread_enters(stranger.family(), short), Ok(()));
}

/// A capture of a group's stream that another thread begins while the
/// group is issued waits for the group and is refused (the group's NCCL
/// work would join its graph otherwise); once the group returned, a
/// capture can begin.
#[test]
fn unit_group_holds_its_streams_through_the_issue() {
    let comm = fake_comm();
    let stream = Stream::legacy();
    let calls = vec![Recorded {
        comm: &comm,
        stream: &stream,
        call: call(4),
    }];
    let mut probe = Probe {
        stream: Some(stream.clone()),
        ..Probe::default()
    };
    issue_all(&mut probe, &calls).unwrap();
    assert_eq!(probe.captured, [false], "a capture began during the issue");
    let s = stream.clone();
    let after = thread::spawn(move || {
        let r = s.mark_capturer();
        s.clear_capturer();
        r.is_ok()
    })
    .join()
    .unwrap();
    assert!(after, "the group's hold outlived it");
}

/// A stream whose capture another thread began after the call was
/// recorded is refused when the group is issued, before NCCL sees any of
/// it (the check at recording time is long past by then). Before the fix
/// the group launched into the capture.
#[test]
fn unit_group_refuses_a_stream_captured_after_recording() {
    let comm = fake_comm();
    let stream = Stream::legacy();
    let mut probe = Probe::default();
    let err = run(&mut probe, |g| {
        g.push(Recorded {
            comm: &comm,
            stream: &stream,
            call: call(4),
        });
        let s = stream.clone();
        thread::spawn(move || s.mark_capturer()).join().unwrap()
    })
    .unwrap_err();
    stream.clear_capturer();
    assert!(matches!(err, Error::CaptureUnsafe { .. }), "{err:?}");
    assert!(probe.log.is_empty(), "issued: {:?}", probe.log);
}

/// Property: any sequence of calls entering and leaving a family, aborts
/// beginning and ending, on one thread, against a model written out by
/// hand (NCCL's rule: a family is used by one thread at a time and not at
/// all while an abort runs): this thread enters iff no abort runs
/// (re-entrant); another thread enters iff nothing is held and no abort
/// runs, and is told which of the two kept it out; after everything is
/// released the family is free.
#[test]
fn unit_property_family_lock_matches_the_model() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let mut runner = TestRunner::new(Config {
        cases: 200,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&proptest::collection::vec(0u8..5, 0..16), |ops| {
            let family = Arc::new(Family::default());
            let mut uses = Vec::new();
            let mut aborts = Vec::new();
            for op in ops {
                match op {
                    0 => {
                        let r = family.enter(false, Duration::ZERO);
                        if aborts.is_empty() {
                            prop_assert!(r.is_ok(), "{:?}", r.err());
                            uses.extend(r.ok());
                        } else {
                            prop_assert_eq!(r.err(), Some(Busy::Aborting));
                        }
                    }
                    1 => drop(uses.pop()),
                    // An abort is begun by the holder only (as the crate
                    // does); without a hold this op enters first.
                    2 => {
                        if uses.is_empty() && aborts.is_empty() {
                            uses.extend(family.enter(false, Duration::ZERO).ok());
                        }
                        if !uses.is_empty() {
                            aborts.push(family.begin_abort());
                        }
                    }
                    3 => drop(aborts.pop()),
                    _ => {
                        let want = if !aborts.is_empty() {
                            Err(Busy::Aborting)
                        } else if !uses.is_empty() {
                            Err(Busy::Held)
                        } else {
                            Ok(())
                        };
                        prop_assert_eq!(other_thread_enters(&family, Duration::ZERO), want);
                    }
                }
                prop_assert_eq!(family.aborting(), !aborts.is_empty());
            }
            drop(uses);
            drop(aborts);
            prop_assert_eq!(other_thread_enters(&family, Duration::ZERO), Ok(()));
            Ok(())
        })
        .unwrap();
}

/// A call whose bounded abort gave up with its job linked waits for the
/// abort without a bound (`Communicator::abort_for_call`): the family's
/// wait returns at once with no abort running, and only once the last
/// running abort (here on another thread) has ended.
#[test]
fn unit_wait_aborts_end_waits_for_every_running_abort() {
    let fam = Arc::new(Family::default());
    let t = Instant::now();
    fam.wait_aborts_end();
    assert!(t.elapsed() < Duration::from_millis(50));
    let a = fam.begin_abort();
    let b = fam.begin_abort();
    let ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = Arc::clone(&ended);
    let h = thread::spawn(move || {
        drop(a);
        thread::sleep(Duration::from_millis(150));
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
        drop(b);
    });
    fam.wait_aborts_end();
    assert!(
        ended.load(std::sync::atomic::Ordering::SeqCst),
        "returned while an abort still ran"
    );
    assert!(!fam.aborting());
    h.join().unwrap();
}
