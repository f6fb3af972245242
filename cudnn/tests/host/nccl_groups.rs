//! NCCL groups and communicators without a GPU (host tier; needs the NCCL
//! library, no device): nested groups refused (the reproducer
//! without a device), communicator creation refused inside a group, the
//! poisoned group NCCL launches none of (what the all-or-nothing issuing
//! relies on), `init_rank_timeout`'s misuse and no-device answers, and
//! property cases over group outcomes and in-group refusals. (The
//! recording's "nothing launched" is proven by the library's unit tests
//! with a counting executor; the GPU tier is `gpu/nccl`.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

crate::nccl_main!("host/nccl_groups", "host::nccl_groups");

#[cfg(feature = "nccl")]
mod imp {
    use std::time::{Duration, Instant};

    use cudnn::Error;
    use cudnn::nccl::{self, Communicator, UniqueId};
    use cudnn::sys::nccl as sys;

    use crate::support::rendezvous::{arg_of, nccl_host as host};
    use crate::support::{TestResult, has_gpu, run};

    pub fn main() {
        run(vec![
            host("group_nesting_refused", group_nesting_refused),
            host("in_group_refusals_before_nccl", in_group_refusals),
            host(
                "poisoned_group_launches_nothing",
                poisoned_group_launches_nothing,
            ),
            host(
                "init_rank_timeout_misuse_and_no_gpu",
                init_rank_timeout_no_gpu,
            ),
            host("property_group_outcomes", property_group_outcomes),
            host("property_in_group_refusals", property_in_group_refusals),
            host(
                "property_init_rank_timeout_arguments",
                property_init_rank_timeout,
            ),
        ]);
    }

    /// Whether an NCCL group is open on this thread: `ncclGroupEnd` with none
    /// open is `ncclInvalidUsage` (and closes one that is).
    fn group_open() -> Result<bool, String> {
        let t = sys::load().map_err(|e| e.to_string())?;
        // SAFETY: no arguments.
        let r = unsafe { t.ncclGroupEnd() }.map_err(|e| e.to_string())?;
        Ok(r != sys::ncclResult_t::ncclInvalidUsage)
    }

    /// The reproducer, without a device: an inner group inside an
    /// outer one is refused with a typed error before its closure runs, and
    /// nothing is left open.
    fn group_nesting_refused() -> TestResult {
        ensure!(!group_open()?, "a group was open before the test");
        let mut inner_ran = false;
        let e = nccl::group(|_| {
            nccl::group(|g| {
                inner_ran = true;
                Ok(g.len())
            })?;
            Ok(())
        })
        .unwrap_err();
        ensure!(crate::support::rendezvous::nested_group(&e), "{e}");
        ensure!(e.to_string().contains("nested"), "{e}");
        ensure!(!inner_ran, "the inner closure ran");
        ensure!(!group_open()?, "a group was left open");
        // The refusal is per thread: another thread may record its own group
        // while this one records.
        let other = nccl::group(|_| {
            std::thread::scope(|s| s.spawn(|| nccl::group(|g| Ok(g.len()))).join())
                .map_err(|_| Error::invalid("thread", "panicked", "join"))
        })?;
        ensure!(matches!(other, Ok(0)), "{other:?}");
        // After the refusal, a group records again.
        ensure!(nccl::group(|g| Ok(g.is_empty()))?, "empty group");
        Ok(())
    }

    /// Creating a communicator inside a group is refused before NCCL (or any
    /// argument check) is reached: NCCL would defer it to the group's end.
    fn in_group_refusals() -> TestResult {
        let id = UniqueId::from_bytes(&[1u8; 128])?;
        let mut seen = Vec::new();
        nccl::group(|_| {
            // SAFETY: every other rank runs this same test code: the same calls in the same order.
            seen.push(unsafe { Communicator::init_rank(&id, 0, 1) }.map(|_| ()));
            seen.push(
                // SAFETY: every other rank runs this same test code: the same calls in the same order.
                unsafe { Communicator::init_rank_timeout(&id, 0, 1, Duration::from_secs(1)) }
                    .map(|_| ()),
            );
            seen.push(Communicator::init_all(&[]).map(|_| ()));
            // Arguments that would be invalid are still refused as in-group.
            // SAFETY: every other rank runs this same test code: the same calls in the same order.
            seen.push(unsafe { Communicator::init_rank(&id, 5, 0) }.map(|_| ()));
            Ok(())
        })?;
        let want = [
            "Communicator::init_rank",
            "Communicator::init_rank_timeout",
            "Communicator::init_all",
            "Communicator::init_rank",
        ];
        for (got, want) in seen.iter().zip(want) {
            match got {
                Err(Error::InGroup { call, why }) => {
                    ensure!(*call == want, "{call} vs {want}");
                    ensure!(why.contains("defer"), "{why}");
                }
                other => return Err(format!("{want}: {other:?}").into()),
            }
        }
        ensure!(seen.len() == 4, "{seen:?}");
        ensure!(!group_open()?, "a group was left open");
        Ok(())
    }

    /// What the crate relies on when a call fails inside an issued group
    /// for a reason NCCL did not see: a call NCCL refuses (a send on a null
    /// communicator, which touches nothing) makes `ncclGroupEnd` fail, and
    /// NCCL then launches none of the group, and closes it. This tier holds
    /// no communicator: NCCL makes none without a device, and a fake one
    /// cannot be queued (NCCL reads its fields). The same group
    /// with a valid broadcast on a live communicator queued before the
    /// refused call, and its receive buffer checked untouched, is
    /// `gpu::group_with_a_failing_call_launches_nothing` in `gpu/nccl_faults`.
    fn poisoned_group_launches_nothing() -> TestResult {
        let t = sys::load().map_err(|e| e.to_string())?;
        ensure!(!group_open()?, "a group was open before the test");
        // SAFETY: no arguments.
        let r = unsafe { t.ncclGroupStart() }?;
        ensure!(r == sys::ncclResult_t::ncclSuccess, "{r:?}");
        // SAFETY: 0 elements on a null communicator: NCCL checks the
        // communicator first and records the failure in the open group.
        let r = unsafe {
            t.ncclSend(
                std::ptr::null(),
                0,
                sys::ncclDataType_t::ncclFloat32,
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        }?;
        ensure!(r == sys::ncclResult_t::ncclInvalidArgument, "{r:?}");
        // SAFETY: closes the group opened above.
        let end = unsafe { t.ncclGroupEnd() }?;
        ensure!(
            end == sys::ncclResult_t::ncclInvalidArgument,
            "ncclGroupEnd after a refused call: {end:?} (must fail, launching nothing)"
        );
        ensure!(!group_open()?, "the poisoned group was left open");
        // And the next group is clean.
        // SAFETY: as above.
        unsafe {
            ensure!(
                t.ncclGroupStart()? == sys::ncclResult_t::ncclSuccess,
                "start"
            );
            ensure!(t.ncclGroupEnd()? == sys::ncclResult_t::ncclSuccess, "end");
        }
        Ok(())
    }

    fn init_rank_timeout_no_gpu() -> TestResult {
        let id = UniqueId::new()?;
        let s = Duration::from_secs(5);
        // SAFETY: every other rank runs this same test code: the same calls in the same order.
        let e = unsafe { Communicator::init_rank_timeout(&id, 2, 2, s) }.unwrap_err();
        ensure!(arg_of(&e) == "rank", "{e}");
        // SAFETY: every other rank runs this same test code: the same calls in the same order.
        let e = unsafe { Communicator::init_rank_timeout(&id, 0, 0, s) }.unwrap_err();
        ensure!(arg_of(&e) == "size", "{e}");
        // SAFETY: every other rank runs this same test code: the same calls in the same order.
        let e = unsafe { Communicator::init_rank_timeout(&id, 0, usize::MAX, s) }.unwrap_err();
        ensure!(arg_of(&e) == "size", "{e}");
        if has_gpu() {
            eprintln!(
                "note: host::init_rank_timeout_misuse_and_no_gpu: a GPU is present; the no-device half is not applicable"
            );
            return Ok(());
        }
        // A valid call fails at once with no device (not a timeout, not a
        // hang), before NCCL: NCCL 2.32.3 would leave a group open on this
        // thread when cudaGetDevice fails inside it.
        let t = Instant::now();
        // SAFETY: every other rank runs this same test code: the same calls in the same order.
        let e = unsafe { Communicator::init_rank_timeout(&id, 1, 2, Duration::from_secs(60)) }
            .unwrap_err();
        ensure!(matches!(&e, Error::NoDevice { .. }), "{e}");
        ensure!(
            t.elapsed() < Duration::from_secs(20),
            "took {:?}",
            t.elapsed()
        );
        ensure!(
            !group_open()?,
            "NCCL left a group open after the failed init"
        );
        Ok(())
    }

    /// Random trees of nested groups whose closures return `Ok`, `Err` or
    /// panic: every outcome is typed (a nested group is `InGroup`, an error
    /// is the closure's own, a panic goes through, `Ok` returns the value),
    /// no NCCL group is ever left open, and the recording state is reset.
    fn property_group_outcomes() -> TestResult {
        use proptest::prelude::*;
        use proptest::test_runner::TestCaseError;
        let mut runner = crate::support::prop_runner(2000);
        // (outcome: 0 Ok, 1 Err, 2 panic; nest: open an inner group first)
        let strat = (0u8..3, any::<bool>(), any::<u32>(), 0u8..3);
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let r = runner.run(&strat, |(outcome, nest, value, inner_outcome)| {
            let run = std::panic::catch_unwind(|| {
                nccl::group(|g| {
                    let mut inner = None;
                    if nest {
                        inner = Some(nccl::group(|_| match inner_outcome {
                            0 => Ok(1u32),
                            1 => Err(Error::invalid("inner", "test", 1)),
                            _ => panic!("inner panic"),
                        }));
                    }
                    match outcome {
                        0 => Ok((value, g.len(), inner.map(|r| r.map_err(|e| e.to_string())))),
                        1 => Err(Error::invalid("outer", "test", value)),
                        _ => panic!("outer panic"),
                    }
                })
            });
            match (outcome, run) {
                (2, Err(_)) => {}
                (1, Ok(Err(e))) => {
                    prop_assert!(e.to_string().contains("outer"), "{}", e);
                }
                (0, Ok(Ok((v, len, inner)))) => {
                    prop_assert_eq!(v, value);
                    prop_assert_eq!(len, 0);
                    if nest {
                        let inner = inner.ok_or_else(|| TestCaseError::fail("no inner result"))?;
                        let e = inner
                            .err()
                            .ok_or_else(|| TestCaseError::fail("nested group ran"))?;
                        prop_assert!(e.contains("nested"), "{}", e);
                    }
                }
                (o, other) => {
                    return Err(TestCaseError::fail(format!("outcome {o}: {other:?}")));
                }
            }
            prop_assert!(
                !group_open().map_err(TestCaseError::fail)?,
                "a group was left open"
            );
            Ok(())
        });
        std::panic::set_hook(prev);
        r.map_err(|e| e.to_string())?;
        Ok(())
    }

    /// Inside a group, communicator creation with any arguments (valid or
    /// not, any deadline) is refused as `InGroup` naming the
    /// call, before an argument check or NCCL; outside, the same arguments
    /// get their ordinary typed answer.
    fn property_in_group_refusals() -> TestResult {
        use proptest::prelude::*;
        use proptest::test_runner::TestCaseError;
        let mut runner = crate::support::prop_runner(500);
        let id = UniqueId::from_bytes(&[3u8; 128])?;
        let strat = (0usize..4, any::<usize>(), 0u8..3, any::<u64>());
        runner
            .run(&strat, |(rank, size, which, ms)| {
                let t = Duration::from_millis(ms);
                let call = |which: u8| -> cudnn::Result<()> {
                    match which {
                        // SAFETY: every other rank runs this same test code: the same calls in the same order.
                        0 => unsafe { Communicator::init_rank(&id, rank, size) }.map(|_| ()),
                        // SAFETY: every other rank runs this same test code: the same calls in the same order.
                        1 => unsafe { Communicator::init_rank_timeout(&id, rank, size, t) }
                            .map(|_| ()),
                        // Device values need a device: the empty list is
                        // what a host can make.
                        _ => Communicator::init_all(&[]).map(|_| ()),
                    }
                };
                let name = [
                    "Communicator::init_rank",
                    "Communicator::init_rank_timeout",
                    "Communicator::init_all",
                ][usize::from(which)];
                let inside = nccl::group(|_| Ok(call(which)))
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                match inside {
                    Err(Error::InGroup { call, .. }) => prop_assert_eq!(call, name),
                    other => return Err(TestCaseError::fail(format!("{name}: {other:?}"))),
                }
                // Outside a group, only invalid arguments are tried (valid
                // ones would need a device): typed argument errors.
                let valid = size > 0 && size <= i32::MAX as usize && rank < size;
                if which == 2 || !valid {
                    let e = call(which)
                        .err()
                        .ok_or_else(|| TestCaseError::fail("accepted"))?;
                    prop_assert!(matches!(e, Error::InvalidArgument { .. }), "{}", e);
                }
                prop_assert!(
                    !group_open().map_err(TestCaseError::fail)?,
                    "group left open"
                );
                Ok(())
            })
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    /// `init_rank_timeout` over random and adversarial arguments: typed
    /// errors, no panic, bounded time; without a device every valid call is
    /// `NoDevice`, never a hang, and no NCCL group is left open.
    fn property_init_rank_timeout() -> TestResult {
        use proptest::prelude::*;
        use proptest::test_runner::TestCaseError;
        if has_gpu() {
            eprintln!(
                "note: host::property_init_rank_timeout_arguments: a GPU is present; valid calls would wait for peers, so only invalid ones are generated"
            );
        }
        let gpu = has_gpu();
        let mut runner = crate::support::prop_runner(300);
        let id = UniqueId::new()?;
        let edge = prop_oneof![
            Just(0usize),
            Just(1usize),
            Just(i32::MAX as usize),
            Just(i32::MAX as usize + 1),
            Just(usize::MAX),
            0usize..8
        ];
        let strat = (edge.clone(), edge, 0u64..3_000, any::<bool>());
        runner
            .run(&strat, |(rank, size, ms, huge)| {
                let valid = size > 0 && size <= i32::MAX as usize && rank < size;
                if gpu && valid {
                    return Ok(());
                }
                let timeout = if huge {
                    Duration::MAX
                } else {
                    Duration::from_millis(ms)
                };
                let t = Instant::now();
                let r = std::panic::catch_unwind(|| {
                    // SAFETY: every other rank runs this same test code: the same calls in the same order.
                    unsafe { Communicator::init_rank_timeout(&id, rank, size, timeout) }
                })
                .map_err(|_| TestCaseError::fail("panicked"))?;
                let e = r
                    .err()
                    .ok_or_else(|| TestCaseError::fail("made a communicator without a GPU"))?;
                if valid {
                    prop_assert!(matches!(e, Error::NoDevice { .. }), "{}", e);
                } else {
                    prop_assert!(matches!(e, Error::InvalidArgument { .. }), "{}", e);
                }
                prop_assert!(
                    t.elapsed() < Duration::from_secs(20),
                    "took {:?}",
                    t.elapsed()
                );
                Ok(())
            })
            .map_err(|e| e.to_string())?;
        ensure!(!group_open()?, "a group was left open");
        Ok(())
    }
}
