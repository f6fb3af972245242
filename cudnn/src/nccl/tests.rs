//! Unit tests of the group recording (no NCCL, no device): the issuing goes
//! through a counting [`Exec`], so "nothing launched" is observed directly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::cell::Cell;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;

use super::comm::{Communicator, Mode};
use super::group::run;
use super::op::{Call, Op, ReduceOp};
use super::record::{Exec, Recorded};
use crate::error::{Error, Result};
use crate::runtime::Stream;

/// What the executor saw, in order.
#[derive(Debug, Default)]
struct Counting {
    log: Vec<String>,
    /// Fail the n-th `issue` (1-based) as NCCL would.
    fail_at: Option<usize>,
    issued: usize,
    poisoned: Cell<bool>,
    /// `end` answers ncclInProgress (non-blocking communicators).
    in_progress: bool,
    /// `end` fails (as ncclGroupEnd failing while it launches).
    end_fails: bool,
    /// `settle` fails (a non-blocking group failing while it launches).
    settle_fails: bool,
}

impl Exec for Counting {
    fn ready(&mut self, calls: &[&Recorded<'_>]) -> Result<()> {
        self.log.push(format!("ready {}", calls.len()));
        Ok(())
    }
    fn start(&mut self) -> Result<()> {
        self.log.push("start".into());
        Ok(())
    }
    fn issue(&mut self, rec: &Recorded<'_>) -> Result<()> {
        self.issued += 1;
        if self.fail_at == Some(self.issued) {
            self.log.push("issue failed".into());
            return Err(Error::Nccl {
                call: "ncclAllReduce",
                code: 4,
                name: "ncclInvalidArgument",
                text: format!("refused (call {})", self.issued),
                last_error: None,
                rank: None,
                context: None,
            });
        }
        self.log.push(format!("issue {}", rec.call.count()));
        Ok(())
    }
    fn poison(&mut self) {
        self.poisoned.set(true);
        self.log.push("poison".into());
    }
    fn end(&mut self) -> Result<bool> {
        self.log.push("end".into());
        if self.end_fails {
            return Err(Error::Nccl {
                call: "ncclGroupEnd",
                code: 1,
                name: "ncclUnhandledCudaError",
                text: "unhandled cuda error".into(),
                last_error: None,
                rank: Some(0),
                context: None,
            });
        }
        Ok(self.in_progress)
    }
    fn settle(&mut self, _calls: &[&Recorded<'_>]) -> Result<()> {
        self.log.push("settle".into());
        if self.settle_fails {
            return Err(Error::Timeout {
                what: "ncclGroupEnd on a non-blocking communicator to finish".into(),
                waited: std::time::Duration::from_secs(1),
                rank: Some(0),
            });
        }
        Ok(())
    }
}

/// A communicator that is never handed to NCCL (the counting executor does
/// not touch it) and never dropped.
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

#[test]
fn unit_ok_issues_every_call_between_start_and_end() {
    let comm = fake_comm();
    let stream = Stream::legacy();
    let mut exec = Counting::default();
    let v = run(&mut exec, |g| {
        g.push(Recorded {
            comm: &comm,
            stream: &stream,
            call: call(4),
        });
        g.push(Recorded {
            comm: &comm,
            stream: &stream,
            call: call(0),
        });
        g.push(Recorded {
            comm: &comm,
            stream: &stream,
            call: call(7),
        });
        Ok(g.len())
    })
    .unwrap();
    assert_eq!(v, 3);
    // The call of 0 elements was recorded but is not issued.
    assert_eq!(exec.log, ["ready 2", "start", "issue 4", "issue 7", "end"]);
}

#[test]
fn unit_error_of_the_closure_launches_nothing() {
    let comm = fake_comm();
    let stream = Stream::legacy();
    let mut exec = Counting::default();
    let e = run(&mut exec, |g| -> Result<()> {
        g.push(Recorded {
            comm: &comm,
            stream: &stream,
            call: call(4),
        });
        g.push(Recorded {
            comm: &comm,
            stream: &stream,
            call: call(5),
        });
        Err(Error::mismatch("third call", 1, 2))
    })
    .unwrap_err();
    assert!(matches!(e, Error::Mismatch { .. }), "{e}");
    assert!(exec.log.is_empty(), "NCCL was called: {:?}", exec.log);
}

#[test]
fn unit_panic_in_the_closure_launches_nothing_and_closes_the_recording() {
    let comm = fake_comm();
    let stream = Stream::legacy();
    let mut exec = Counting::default();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = run(&mut exec, |g| -> Result<()> {
            g.push(Recorded {
                comm: &comm,
                stream: &stream,
                call: call(4),
            });
            panic!("inside a group");
        });
    }));
    assert!(caught.is_err());
    assert!(exec.log.is_empty(), "NCCL was called: {:?}", exec.log);
    assert!(!super::depth::in_group(), "the recording stayed open");
    // And a new group records again.
    let mut exec = Counting::default();
    run(&mut exec, |g| {
        g.push(Recorded {
            comm: &comm,
            stream: &stream,
            call: call(1),
        });
        Ok(())
    })
    .unwrap();
    assert_eq!(exec.log, ["ready 1", "start", "issue 1", "end"]);
}

#[test]
fn unit_a_call_nccl_refuses_poisons_and_still_ends_the_group() {
    let comm = fake_comm();
    let stream = Stream::legacy();
    let mut exec = Counting {
        fail_at: Some(2),
        ..Counting::default()
    };
    let e = run(&mut exec, |g| {
        for n in 1..=3 {
            g.push(Recorded {
                comm: &comm,
                stream: &stream,
                call: call(n),
            });
        }
        Ok(())
    })
    .unwrap_err();
    assert!(e.to_string().contains("refused"), "{e}");
    // The fake communicator has one rank: NCCL (2.21+, `ncclLaunchOneRank`
    // in enqueue.cc's taskAppend) ran call 1 when it was called.
    assert!(
        e.to_string()
            .contains("call(s) 1 (collectives on a communicator of one rank"),
        "{e}"
    );
    assert!(!e.to_string().contains("launched none of the group"), "{e}");
    assert!(exec.poisoned.get());
    // Call 3 is never issued; the group is ended after the poison.
    assert_eq!(
        exec.log,
        [
            "ready 3",
            "start",
            "issue 1",
            "issue failed",
            "poison",
            "end"
        ]
    );
}

#[test]
fn unit_nested_groups_are_refused_before_anything() {
    let mut outer = Counting::default();
    let e = run(&mut outer, |_| {
        let mut inner = Counting::default();
        let r = run(&mut inner, |_| Ok(()));
        assert!(inner.log.is_empty());
        r
    })
    .unwrap_err();
    assert!(
        matches!(
            e,
            Error::InGroup {
                call: "nccl::group",
                ..
            }
        ),
        "{e}"
    );
    assert!(outer.log.is_empty(), "{:?}", outer.log);
    assert!(!super::depth::in_group());
}

#[test]
fn unit_empty_group_calls_nothing() {
    let mut exec = Counting::default();
    assert!(run(&mut exec, |g| Ok(g.is_empty())).unwrap());
    assert!(exec.log.is_empty(), "{:?}", exec.log);
}

#[test]
fn unit_deadline_and_backoff() {
    use super::progress::{Backoff, Deadline};
    use std::time::{Duration, Instant};
    // A deadline beyond the clock never passes.
    let never = Deadline::after(Duration::MAX);
    assert!(!never.passed());
    let now = Deadline::after(Duration::ZERO);
    assert!(now.passed());
    // The back-off never sleeps past the deadline, and doubles up to 5 ms.
    let d = Deadline::after(Duration::from_millis(30));
    let mut b = Backoff::new();
    let t = Instant::now();
    let mut sleeps = 0;
    while !d.passed() {
        b.sleep(&d);
        sleeps += 1;
    }
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(30), "{took:?}");
    assert!(took < Duration::from_millis(30 + 1000), "{took:?}");
    // 20 us doubling: 20,40,...,5120 -> capped; at least 9 sleeps in 30 ms.
    assert!(sleeps >= 9, "{sleeps}");
}

#[test]
fn unit_config_is_ncclconfig_initializer_with_blocking() {
    use super::sys;
    // NCCL_CONFIG_INITIALIZER (nccl.h): size, magic 0xcafebeef, the
    // header's version code, every other int INT_MIN, pointers null.
    for blocking in [false, true] {
        let c = super::comm::config(blocking);
        assert_eq!(c.size, std::mem::size_of::<sys::ncclConfig_t>());
        assert_eq!(c.magic, 0xcafe_beef);
        assert_eq!(c.version, 23203);
        assert_eq!(c.blocking, i32::from(blocking));
        for v in [
            c.cgaClusterSize,
            c.minCTAs,
            c.maxCTAs,
            c.splitShare,
            c.trafficClass,
            c.collnetEnable,
            c.CTAPolicy,
            c.shrinkShare,
            c.nvlsCTAs,
            c.nChannelsPerNetPeer,
            c.nvlinkCentricSched,
            c.graphUsageMode,
            c.numRmaCtx,
            c.maxP2pPeers,
            c.graphStreamOrdering,
            c.launchOrderImplicit,
            c.numRmaSig,
            c.rmaEagerInit,
            c.hostCftMode,
            c.nvlsHostMode,
        ] {
            assert_eq!(v, i32::MIN);
        }
        assert!(c.netName.is_null() && c.commName.is_null());
    }
}

#[test]
fn unit_recording_state_is_per_thread() {
    let mut exec = Counting::default();
    run(&mut exec, |_| {
        assert!(super::depth::in_group());
        let other = std::thread::spawn(super::depth::in_group).join().unwrap();
        assert!(!other, "another thread sees this thread's group");
        Ok(())
    })
    .unwrap();
    assert!(!super::depth::in_group());
}

#[test]
fn unit_a_group_ending_in_progress_is_settled_and_a_failed_one_is_not() {
    let comm = fake_comm();
    let stream = Stream::legacy();
    let mut exec = Counting {
        in_progress: true,
        ..Counting::default()
    };
    run(&mut exec, |g| {
        g.push(Recorded {
            comm: &comm,
            stream: &stream,
            call: call(2),
        });
        Ok(())
    })
    .unwrap();
    assert_eq!(exec.log, ["ready 1", "start", "issue 2", "end", "settle"]);
    // A refused call: the group ends, nothing is settled, the error returns.
    let mut exec = Counting {
        in_progress: true,
        fail_at: Some(1),
        ..Counting::default()
    };
    let e = run(&mut exec, |g| {
        g.push(Recorded {
            comm: &comm,
            stream: &stream,
            call: call(2),
        });
        Ok(())
    })
    .unwrap_err();
    assert!(e.to_string().contains("refused"), "{e}");
    assert_eq!(
        exec.log,
        ["ready 1", "start", "issue failed", "poison", "end"]
    );
}

fn p2p(send: bool, count: usize) -> Call {
    let p = 0x1000 as *mut std::ffi::c_void;
    if send {
        Call::new::<f32>(Op::Send {
            send: p,
            count,
            peer: 0,
        })
    } else {
        Call::new::<u8>(Op::Recv {
            recv: p,
            count,
            peer: 0,
        })
    }
}

#[test]
fn unit_self_sends_and_recvs_must_pair_by_bytes() {
    let comm = fake_comm();
    let stream = Stream::legacy();
    // (calls, accepted): f32 sends, u8 receives, all to this rank (0).
    let cases: &[(&[(bool, usize)], bool)] = &[
        (&[(true, 4), (false, 16)], true),
        (&[(false, 16), (true, 4)], true),
        (&[(true, 4), (true, 2), (false, 16), (false, 8)], true),
        (&[(true, 4), (false, 15)], false),
        (&[(true, 4)], false),
        (&[(false, 4)], false),
        (&[(true, 4), (true, 2), (false, 8), (false, 16)], false),
        // 0 elements are not issued, so they need no partner.
        (&[(true, 0), (true, 4), (false, 16)], true),
    ];
    for (calls, accepted) in cases {
        let mut exec = Counting::default();
        let r = run(&mut exec, |g| {
            for &(send, n) in calls.iter() {
                g.push(Recorded {
                    comm: &comm,
                    stream: &stream,
                    call: p2p(send, n),
                });
            }
            Ok(())
        });
        assert_eq!(r.is_ok(), *accepted, "{calls:?}: {r:?}");
        if *accepted {
            assert!(exec.log.contains(&"end".to_string()), "{calls:?}");
        } else {
            assert!(matches!(r, Err(Error::Mismatch { .. })), "{calls:?}: {r:?}");
            assert!(
                exec.log.is_empty(),
                "{calls:?}: NCCL was called: {:?}",
                exec.log
            );
        }
    }
}

/// A failure of the group's end (or of a non-blocking group while it
/// launches) comes after NCCL accepted every call: the error says that part
/// of the group may have been launched, not that none was.
#[test]
fn unit_a_failing_group_end_says_part_may_have_launched() {
    let comm = fake_comm();
    let stream = Stream::legacy();
    for (end_fails, settle_fails) in [(true, false), (false, true)] {
        let mut exec = Counting {
            in_progress: settle_fails,
            end_fails,
            settle_fails,
            ..Counting::default()
        };
        let e = run(&mut exec, |g| {
            g.push(Recorded {
                comm: &comm,
                stream: &stream,
                call: call(2),
            });
            Ok(())
        })
        .unwrap_err();
        let text = e.to_string();
        assert!(text.contains("may have been launched"), "{text}");
        assert!(!text.contains("launched none"), "{text}");
    }
    // A call refused inside the group is not reported as a partial launch.
    let mut exec = Counting {
        fail_at: Some(1),
        ..Counting::default()
    };
    let e = run(&mut exec, |g| {
        g.push(Recorded {
            comm: &comm,
            stream: &stream,
            call: call(2),
        });
        Ok(())
    })
    .unwrap_err();
    assert!(!e.to_string().contains("may have been launched"), "{e}");
}

/// Communicators known to be blocking and known to be non-blocking are not
/// mixed in one group (NCCL would run it in the last one's mode and leave
/// the others in progress): refused before NCCL is called. A communicator
/// of unknown mode mixes with either.
#[test]
fn unit_groups_do_not_mix_blocking_and_non_blocking() {
    let (a, b, u) = (fake_comm(), fake_comm(), fake_comm());
    a.set_mode(Mode::Blocking);
    b.set_mode(Mode::NonBlocking);
    let stream = Stream::legacy();
    let rec = |c: &'static str| -> Vec<&Communicator> {
        c.chars()
            .map(|k| match k {
                'a' => &*a,
                'b' => &*b,
                _ => &*u,
            })
            .collect()
    };
    for (pattern, accepted) in [
        ("ab", false),
        ("ba", false),
        ("aub", false),
        ("uuab", false),
        ("aa", true),
        ("bb", true),
        ("au", true),
        ("ub", true),
        ("uu", true),
    ] {
        let mut exec = Counting::default();
        let r = run(&mut exec, |g| {
            for c in rec(pattern) {
                g.push(Recorded {
                    comm: c,
                    stream: &stream,
                    call: call(3),
                });
            }
            Ok(())
        });
        assert_eq!(r.is_ok(), accepted, "{pattern}: {r:?}");
        if !accepted {
            assert!(
                matches!(&r, Err(Error::InvalidArgument { arg, .. }) if arg == "group"),
                "{pattern}: {r:?}"
            );
            assert!(
                exec.log.is_empty(),
                "{pattern}: NCCL was called: {:?}",
                exec.log
            );
        }
    }
}

/// A per-thread default stream is refused for NCCL calls, naming
/// `stream`, even on the thread it belongs to (a non-blocking group is
/// launched from NCCL's thread); the check needs no device.
#[test]
fn unit_per_thread_streams_are_refused_for_nccl() {
    let comm = fake_comm();
    let e = comm.check_stream(&Stream::per_thread()).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { arg, .. } if arg == "stream"),
        "{e}"
    );
    assert!(e.to_string().contains("per-thread"), "{e}");
    // The legacy stream is not refused for being per-thread (whatever its
    // device check says without a device).
    if let Err(e) = comm.check_stream(&Stream::legacy()) {
        assert!(!e.to_string().contains("per-thread"), "{e}");
    }
}

/// Random sequences of calls on communicators of the three modes (and of
/// zero elements, which are not issued): a group is refused, before NCCL is
/// called, exactly when a blocking and a non-blocking communicator both
/// have a call that would be issued; otherwise every such call is issued.
#[test]
fn unit_property_group_modes() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let comms = [fake_comm(), fake_comm(), fake_comm()];
    comms[0].set_mode(Mode::Blocking);
    comms[1].set_mode(Mode::NonBlocking);
    let stream = Stream::legacy();
    let mut runner = TestRunner::new(Config {
        cases: 2000,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(
            &proptest::collection::vec((0usize..3, 0usize..3), 0..12),
            |calls| {
                let mut exec = Counting::default();
                let r = run(&mut exec, |g| {
                    for &(c, n) in &calls {
                        g.push(Recorded {
                            comm: &comms[c],
                            stream: &stream,
                            call: call(n),
                        });
                    }
                    Ok(())
                });
                let live = |m: usize| calls.iter().any(|&(c, n)| c == m && n > 0);
                let issued = calls.iter().filter(|&&(_, n)| n > 0).count();
                if live(0) && live(1) {
                    prop_assert!(
                        matches!(&r, Err(Error::InvalidArgument { arg, .. }) if arg == "group"),
                        "{:?}",
                        r
                    );
                    prop_assert!(exec.log.is_empty(), "{:?}", exec.log);
                } else {
                    prop_assert!(r.is_ok(), "{:?}", r);
                    prop_assert_eq!(exec.issued, issued);
                }
                Ok(())
            },
        )
        .unwrap();
}

/// NCCL issues a collective on a one-rank communicator when it is called
/// (NCCL 2.21 on, 2.28.9 included: `taskAppend` in `src/enqueue.cc` calls
/// `ncclLaunchOneRank`), and defers sends and receives to the group's
/// end: a refusal after the first is reported as launched, after the
/// second as not.
#[test]
fn unit_one_rank_collectives_are_launched_at_the_call() {
    use super::record::launched_at_call;
    let comm = fake_comm();
    let stream = Stream::legacy();
    let rec = |call| Recorded {
        comm: &comm,
        stream: &stream,
        call,
    };
    assert!(launched_at_call(&rec(call(2))));
    assert!(!launched_at_call(&rec(p2p(true, 2))));
    assert!(!launched_at_call(&rec(p2p(false, 8))));
    let mut exec = Counting {
        fail_at: Some(3),
        ..Counting::default()
    };
    // A self send and its receive, then a refused call: nothing launched.
    let e = run(&mut exec, |g| {
        g.push(rec(p2p(true, 2)));
        g.push(rec(p2p(false, 8)));
        g.push(rec(call(1)));
        Ok(())
    })
    .unwrap_err();
    assert!(
        e.to_string().contains("NCCL launched none of the group"),
        "{e}"
    );
}
