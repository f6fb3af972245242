//! NCCL faults on a device (gpu tier; skipped visibly without one): groups
//! launch all or nothing (a failing call, a `?`, a panic, a bad root, an
//! unpaired send to oneself, a mix of blocking and non-blocking
//! communicators in the closure, or a call NCCL itself refuses in an open
//! group holding a live communicator, leaves a poisoned receive buffer
//! untouched), nesting and the life-cycle calls are refused inside a group,
//! a send to oneself is refused outside one, per-thread default streams are
//! refused; dropping a blocking communicator aborts it promptly; splits of
//! a non-blocking parent (made so, or handed over with `from_raw`) are read
//! only when NCCL has written them; work that does not finish in
//! time makes `Communicator::wait` abort and return a timeout; non-blocking
//! communicators (`init_rank_timeout`) run collectives, groups, split and
//! finalize; a peer that never joins makes `init_rank_timeout` time out;
//! random arguments get typed errors; and, with two GPUs, a peer process
//! killed mid-job makes the survivor fail instead of hanging (skipped with
//! the reason on one GPU; device mismatches are `gpu/nccl_devices`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

crate::nccl_main!(skip "gpu/nccl_faults", "gpu::nccl_faults");

#[cfg(feature = "nccl")]
pub fn main() {
    if let Ok(spec) = std::env::var(imp::CHILD) {
        imp::child(&spec);
    }
    imp::main()
}

#[cfg(feature = "nccl")]
mod imp {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    use cudnn::Error;
    use cudnn::nccl::{self, Communicator, ReduceOp, UniqueId};
    use cudnn::runtime::{Device, DeviceBuffer, Stream};
    use libtest_mimic::Trial;

    use crate::support::{TestResult, gpu, run};

    /// `GPU_NCCL_CHILD="<id> <timeout_s>"`: be rank 1 of 2 on device 1 for
    /// the killed-peer test.
    pub const CHILD: &str = "GPU_NCCL_CHILD";

    pub fn main() {
        let mut trials: Vec<Trial> = vec![
            gpu(
                "group_with_a_failing_call_launches_nothing",
                group_all_or_nothing,
            ),
            gpu(
                "in_group_refusals_on_a_live_communicator",
                in_group_refusals,
            ),
            gpu("self_send_recv_refused_outside_a_group", self_p2p_refused),
            gpu("per_thread_stream_refused", per_thread_stream_refused),
            gpu("blocking_drop_aborts_promptly", blocking_drop_aborts),
            gpu(
                "split_of_a_non_blocking_parent_is_read_when_ready",
                split_non_blocking,
            ),
            gpu("wait_times_out_and_aborts", wait_times_out),
            gpu("non_blocking_communicator_runs_everything", non_blocking),
            gpu(
                "init_rank_timeout_when_the_peer_never_joins",
                init_times_out,
            ),
            gpu("property_collective_arguments", property_arguments),
        ];
        // Need two GPUs: with fewer they are skipped, visibly, not passed.
        for (name, f) in [(
            "killed_peer_makes_the_survivor_fail",
            killed_peer as fn() -> TestResult,
        )] {
            match Device::count() {
                Ok(n) if n < 2 && crate::support::has_gpu() => {
                    eprintln!("skipped: gpu::{name}: needs 2 or more GPUs, this machine has {n}");
                    trials.push(
                        crate::support::trial(format!("gpu::{name}"), || Ok(()))
                            .with_ignored_flag(true),
                    );
                }
                _ => trials.push(gpu(name, f)),
            }
        }
        run(trials)
    }

    fn one_rank() -> Result<(Device, Stream, Communicator), Error> {
        let dev = Device::new(0)?;
        let stream = dev.create_stream()?;
        // SAFETY: every other rank runs this same test code: the same calls in the same order.
        let comm = unsafe { Communicator::init_rank(&UniqueId::new()?, 0, 1) }?;
        Ok((dev, stream, comm))
    }

    fn input(n: usize) -> Vec<f32> {
        (0..n).map(|i| (i % 50) as f32 + 1.0).collect()
    }

    fn check(what: &str, got: &[f32], want: &[f32]) -> TestResult {
        crate::support::same_len(what, got, want)?;
        if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
            return Err(format!("{what}: element {i}: {}, want {}", got[i], want[i]).into());
        }
        Ok(())
    }

    /// Poison for the all-or-nothing checks.
    const UNTOUCHED: f32 = -7.0;

    fn untouched(what: &str, b: &DeviceBuffer<f32>, stream: &Stream) -> TestResult {
        stream.synchronize()?;
        let got = b.to_vec()?;
        ensure!(
            got.iter().all(|&v| v == UNTOUCHED),
            "{what}: the receive buffer was written, so part of the group was launched"
        );
        Ok(())
    }

    /// A group whose closure fails after a valid call launches none of it:
    /// an out-of-place broadcast (which would overwrite the poisoned
    /// receive buffer) followed by a checked error, a `?` of the caller, or
    /// a panic. Then the same group without the failure does launch.
    fn group_all_or_nothing() -> TestResult {
        let (_dev, stream, comm) = one_rank()?;
        let x = input(512);
        let a = DeviceBuffer::from_host(&x)?;
        let mut b = DeviceBuffer::from_host(&[UNTOUCHED; 512])?;
        let mut short = DeviceBuffer::<f32>::zeroed(511)?;
        // A checked error of the crate (a length mismatch) after a valid call.
        let e = nccl::group(|g| {
            g.broadcast(&comm, &a, &mut b, 0, &stream)?;
            g.all_reduce(&comm, &a, &mut short, ReduceOp::Sum, &stream)
        })
        .unwrap_err();
        ensure!(matches!(e, Error::Mismatch { .. }), "{e}");
        untouched("after a Mismatch", &b, &stream)?;
        // The caller's own error.
        let e = nccl::group(|g| -> cudnn::Result<()> {
            g.broadcast(&comm, &a, &mut b, 0, &stream)?;
            Err(Error::invalid("caller", "gave up", 1))
        })
        .unwrap_err();
        ensure!(
            matches!(&e, Error::InvalidArgument { arg, .. } if arg == "caller"),
            "{e}"
        );
        untouched("after the caller's error", &b, &stream)?;
        // A panic.
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = nccl::group(|g| -> cudnn::Result<()> {
                g.broadcast(&comm, &a, &mut b, 0, &stream)?;
                panic!("inside the group");
            });
        }));
        ensure!(caught.is_err(), "the panic went through");
        untouched("after a panic", &b, &stream)?;
        // A bad root, refused by the crate's check.
        let e = nccl::group(|g| {
            g.broadcast(&comm, &a, &mut b, 0, &stream)?;
            g.broadcast_in_place(&comm, &mut short, 3, &stream)
        })
        .unwrap_err();
        ensure!(
            matches!(&e, Error::InvalidArgument { arg, .. } if arg == "root"),
            "{e}"
        );
        untouched("after a bad root", &b, &stream)?;
        // A send to oneself whose receive is one element short: refused
        // before anything is launched (NCCL would not check a self copy).
        let e = nccl::group(|g| {
            g.broadcast(&comm, &a, &mut b, 0, &stream)?;
            g.send(&comm, &a, 0, &stream)?;
            g.recv(&comm, &mut short, 0, &stream)
        })
        .unwrap_err();
        ensure!(matches!(e, Error::Mismatch { .. }), "{e}");
        untouched("after an unpaired send to oneself", &b, &stream)?;
        // A blocking and a non-blocking communicator in one group: NCCL
        // refuses that mix only for communicator creation and destruction
        // (for collectives it runs the group in the last one's mode), so
        // the crate refuses it before anything is issued.
        // SAFETY: every other rank runs this same test code: the same calls in the same order.
        let nb = unsafe {
            Communicator::init_rank_timeout(&UniqueId::new()?, 0, 1, Duration::from_secs(60))
        }?;
        let mut c = DeviceBuffer::from_host(&[UNTOUCHED; 512])?;
        let e = nccl::group(|g| {
            g.broadcast(&comm, &a, &mut b, 0, &stream)?;
            g.broadcast(&nb, &a, &mut c, 0, &stream)
        })
        .unwrap_err();
        ensure!(
            matches!(&e, Error::InvalidArgument { arg, .. } if arg == "group"),
            "mixed modes: {e}"
        );
        untouched("after a group mixing blocking modes", &b, &stream)?;
        untouched(
            "after a group mixing blocking modes (non-blocking side)",
            &c,
            &stream,
        )?;
        ensure!(
            !nb.is_aborted() && !comm.is_aborted(),
            "aborted by the refusal"
        );
        nb.finalize()?;
        // NCCL's own refusal with a live communicator in the group: what
        // the crate's poisoning relies on. A valid self send/receive pair
        // on `comm` (deferred to the group's end) is queued in an open
        // group, then a call NCCL refuses (a send on a null communicator,
        // the crate's poison); ncclGroupEnd fails and launches none of it:
        // `b` is never written.
        raw_poisoned_group(&comm, &a, &mut b, &stream, false)?;
        untouched("after a group NCCL refused", &b, &stream)?;
        // A collective on a one-rank communicator is not deferred: NCCL
        // 2.21 on (2.28.9 included; `taskAppend` in src/enqueue.cc calls
        // `ncclLaunchOneRank`) issues it as a copy when it is called, so a
        // later refusal in the group cannot take it back (first GPU run:
        // the broadcast had written `b`). The crate's error says so.
        raw_poisoned_group(&comm, &a, &mut b, &stream, true)?;
        stream.synchronize()?;
        let got = b.to_vec()?;
        if got.iter().all(|&v| v == UNTOUCHED) {
            eprintln!("note: this NCCL deferred a one-rank broadcast to the group's end");
        } else {
            check("one-rank broadcast before a refused call", &got, &x)?;
        }
        b.copy_from_host(&[UNTOUCHED; 512])?;
        ensure!(comm.async_error()?.is_none(), "async error");
        // Without the failure the same group runs.
        nccl::group(|g| g.broadcast(&comm, &a, &mut b, 0, &stream))?;
        stream.synchronize()?;
        check("broadcast after the refused groups", &b.to_vec()?, &x)?;
        Ok(())
    }

    /// `ncclGroupStart`, a broadcast of `a` into `b` on the live `comm`
    /// (`broadcast`) or a send of `a` to oneself and its receive into `b`,
    /// a send NCCL refuses (null communicator), `ncclGroupEnd`: the end must
    /// fail (it then launches what it deferred to the end: nothing; the
    /// caller checks `b`).
    fn raw_poisoned_group(
        comm: &Communicator,
        a: &DeviceBuffer<f32>,
        b: &mut DeviceBuffer<f32>,
        stream: &Stream,
        broadcast: bool,
    ) -> TestResult {
        use cudnn::sys::nccl as sys;
        let t = sys::load().map_err(|e| e.to_string())?;
        let ok = sys::ncclResult_t::ncclSuccess;
        // SAFETY: no arguments.
        ensure!(unsafe { t.ncclGroupStart() }? == ok, "ncclGroupStart");
        let r = if broadcast {
            // SAFETY: live communicator and stream of device 0; both buffers
            // hold 512 f32 on device 0 and outlive the group (which launches
            // nothing, or its work is synchronized by the caller).
            unsafe {
                t.ncclBroadcast(
                    a.as_raw(),
                    b.as_raw_mut(),
                    a.len(),
                    sys::ncclDataType_t::ncclFloat32,
                    0,
                    comm.as_raw(),
                    stream.as_raw(),
                )
            }?
        } else {
            // SAFETY: live communicator and stream of device 0; a send of
            // `a` to rank 0 (oneself) and its receive into `b`, 512 f32
            // each on device 0, outliving the group (which launches
            // nothing, or its work is synchronized by the caller).
            let s = unsafe {
                t.ncclSend(
                    a.as_raw(),
                    a.len(),
                    sys::ncclDataType_t::ncclFloat32,
                    0,
                    comm.as_raw(),
                    stream.as_raw(),
                )
            }?;
            // SAFETY: as above.
            let rv = unsafe {
                t.ncclRecv(
                    b.as_raw_mut(),
                    a.len(),
                    sys::ncclDataType_t::ncclFloat32,
                    0,
                    comm.as_raw(),
                    stream.as_raw(),
                )
            }?;
            if s != ok { s } else { rv }
        };
        // SAFETY: 0 elements on a null communicator: refused, touches nothing.
        let refused = unsafe {
            t.ncclSend(
                std::ptr::null(),
                0,
                sys::ncclDataType_t::ncclFloat32,
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        }?;
        // SAFETY: closes the group opened above.
        let end = unsafe { t.ncclGroupEnd() }?;
        ensure!(r == ok, "the valid broadcast was refused: {r:?}");
        ensure!(refused != ok, "the poison was accepted");
        ensure!(end != ok, "ncclGroupEnd after a refused call succeeded");
        Ok(())
    }

    /// A per-thread default stream is refused for NCCL calls, direct and in
    /// a group, naming `stream`, before anything is queued.
    fn per_thread_stream_refused() -> TestResult {
        let (_dev, stream, comm) = one_rank()?;
        let pt = Stream::per_thread();
        let mut b = DeviceBuffer::from_host(&[UNTOUCHED; 64])?;
        let a = DeviceBuffer::from_host(&input(64))?;
        let is_stream =
            |e: &Error| matches!(e, Error::InvalidArgument { arg, .. } if arg == "stream");
        let e = comm.all_reduce(&a, &mut b, ReduceOp::Sum, &pt).unwrap_err();
        ensure!(is_stream(&e), "direct: {e}");
        let e = nccl::group(|g| g.broadcast(&comm, &a, &mut b, 0, &pt)).unwrap_err();
        ensure!(is_stream(&e), "group: {e}");
        untouched("after per-thread refusals", &b, &stream)?;
        // SAFETY: every other rank runs this same test code: the same calls in the same order.
        let nb = unsafe {
            Communicator::init_rank_timeout(&UniqueId::new()?, 0, 1, Duration::from_secs(60))
        }?;
        let e = nb.all_reduce(&a, &mut b, ReduceOp::Sum, &pt).unwrap_err();
        ensure!(is_stream(&e), "non-blocking: {e}");
        untouched("after per-thread refusals", &b, &stream)?;
        nb.finalize()?;
        Ok(())
    }

    /// Dropping a healthy blocking communicator aborts it (the documented
    /// policy): it returns promptly, and the device takes a new
    /// communicator and runs a collective afterwards.
    fn blocking_drop_aborts() -> TestResult {
        let (_dev, stream, comm) = one_rank()?;
        ensure!(!comm.is_non_blocking(), "{comm:?}");
        let x = input(256);
        let mut v = DeviceBuffer::from_host(&x)?;
        comm.all_reduce_in_place(&mut v, ReduceOp::Sum, &stream)?;
        comm.wait(&stream, Duration::from_secs(60))?;
        let t = Instant::now();
        drop(comm);
        let took = t.elapsed();
        ensure!(took < Duration::from_secs(30), "drop took {took:?}");
        // Work queued and not waited for: dropped at once too.
        // SAFETY: every other rank runs this same test code: the same calls in the same order.
        let comm = unsafe { Communicator::init_rank(&UniqueId::new()?, 0, 1) }?;
        comm.all_reduce_in_place(&mut v, ReduceOp::Sum, &stream)?;
        let t = Instant::now();
        drop(comm);
        ensure!(
            t.elapsed() < Duration::from_secs(30),
            "drop took {:?}",
            t.elapsed()
        );
        stream.synchronize()?;
        // SAFETY: every other rank runs this same test code: the same calls in the same order.
        let comm = unsafe { Communicator::init_rank(&UniqueId::new()?, 0, 1) }?;
        let mut w = DeviceBuffer::from_host(&x)?;
        comm.all_reduce_in_place(&mut w, ReduceOp::Max, &stream)?;
        comm.wait(&stream, Duration::from_secs(60))?;
        check("after dropped communicators", &w.to_vec()?, &x)?;
        eprintln!("  drop of a blocking communicator: {took:?}");
        comm.destroy()?;
        Ok(())
    }

    /// Inside a group: nesting (the reproducer, with a buffer made
    /// and freed inside the outer closure), direct collectives, split,
    /// wait, finalize, destroy and abort are refused with `InGroup`.
    fn in_group_refusals() -> TestResult {
        let (_dev, stream, comm) = one_rank()?;
        let e = nccl::group(|_| {
            let mut b = DeviceBuffer::<f32>::zeroed(1024)?;
            nccl::group(|g| g.all_reduce_in_place(&comm, &mut b, ReduceOp::Sum, &stream))?;
            Ok(())
        })
        .unwrap_err();
        ensure!(crate::support::rendezvous::nested_group(&e), "{e}");
        let (_d1, _s1, c_fin) = one_rank()?;
        let (_d2, _s2, c_des) = one_rank()?;
        let (_d3, _s3, c_abo) = one_rank()?;
        let mut got: Vec<(&str, cudnn::Result<()>)> = Vec::new();
        nccl::group(|_| {
            got.push(("split", comm.split(Some(0), 0).map(|_| ())));
            got.push(("wait", comm.wait(&stream, Duration::from_secs(1))));
            got.push(("finalize", c_fin.finalize()));
            got.push(("destroy", c_des.destroy()));
            got.push(("abort", c_abo.abort()));
            Ok(())
        })?;
        for (what, r) in got {
            ensure!(matches!(&r, Err(Error::InGroup { .. })), "{what}: {r:?}");
        }
        // The communicator the group borrowed is untouched and works.
        ensure!(!comm.is_aborted(), "aborted");
        let mut v = DeviceBuffer::from_host(&[1.0f32, 2.0])?;
        comm.all_reduce_in_place(&mut v, ReduceOp::Sum, &stream)?;
        comm.wait(&stream, Duration::from_secs(60))?;
        check("after the refusals", &v.to_vec()?, &[1.0, 2.0])?;
        Ok(())
    }

    /// A send to or receive from oneself outside a group would hang the
    /// GPU: refused, naming `peer`.
    fn self_p2p_refused() -> TestResult {
        let (_dev, stream, comm) = one_rank()?;
        let a = DeviceBuffer::from_host(&[1.0f32; 8])?;
        let mut b = DeviceBuffer::<f32>::zeroed(8)?;
        let e = comm.send(&a, 0, &stream).unwrap_err();
        ensure!(
            matches!(&e, Error::InvalidArgument { arg, .. } if arg == "peer"),
            "{e}"
        );
        ensure!(e.to_string().contains("outside a group"), "{e}");
        let e = comm.recv(&mut b, 0, &stream).unwrap_err();
        ensure!(
            matches!(&e, Error::InvalidArgument { arg, .. } if arg == "peer"),
            "{e}"
        );
        comm.wait(&stream, Duration::from_secs(60))?;
        Ok(())
    }

    /// Released by the test; the host function below blocks the stream
    /// until then (at most 60 s).
    static GATE_OPEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

    unsafe extern "C" fn gate(_: *mut std::ffi::c_void) {
        let t = Instant::now();
        while !GATE_OPEN.load(std::sync::atomic::Ordering::Acquire)
            && t.elapsed() < Duration::from_secs(60)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Work that does not finish in time: after an all-reduce, the stream is
    /// held by a host function. `wait` returns a
    /// timeout within the deadline (10 % plus 100 ms, plus the drain it
    /// gives the stream after aborting), aborts the communicator, and later
    /// calls are refused. (A lone self-receive is not the way to hang: NCCL
    /// 2.32 refuses it at the group's end, which is checked too.)
    fn wait_times_out() -> TestResult {
        let (_dev, stream, comm) = one_rank()?;
        let mut b = DeviceBuffer::from_host(&[UNTOUCHED; 64])?;
        // An unmatched self-receive is refused typed by the crate before
        // NCCL sees it (`check_self_pairs`: NCCL refuses it at the group's
        // end on 2.32 and may hang on it elsewhere), naming the pairing.
        match nccl::group(|g| g.recv(&comm, &mut b, 0, &stream)) {
            Err(Error::Mismatch { what, .. }) if what.contains("oneself") => {}
            other => {
                return Err(format!(
                    "lone self-receive: want Mismatch (sends to oneself), got {other:?}"
                )
                .into());
            }
        }
        untouched("after a lone self-receive", &b, &stream)?;
        if comm.is_aborted() {
            return Err("aborted by a refused group".into());
        }
        GATE_OPEN.store(false, std::sync::atomic::Ordering::Release);
        // The all-reduce first, the gate behind it: when the wait aborts,
        // no NCCL kernel is left queued behind the gate.
        comm.all_reduce_in_place(&mut b, ReduceOp::Sum, &stream)?;
        let rt = cudnn::sys::cudart::load().map_err(|e| e.to_string())?;
        // SAFETY: `gate` is a valid host function that touches only a static;
        // the stream is live.
        let st =
            unsafe { rt.cudaLaunchHostFunc(stream.as_raw(), Some(gate), std::ptr::null_mut()) }?;
        ensure!(
            st == cudnn::sys::cudart::cudaError::cudaSuccess,
            "cudaLaunchHostFunc: {st:?}"
        );
        let limit = Duration::from_secs(2);
        let t = Instant::now();
        // Open the gate once the wait has given up (from another thread, as
        // the wait blocks this one).
        let opener = std::thread::spawn(move || {
            std::thread::sleep(limit + Duration::from_millis(500));
            GATE_OPEN.store(true, std::sync::atomic::Ordering::Release);
        });
        let e = comm.wait(&stream, limit).unwrap_err();
        let took = t.elapsed();
        let _ = opener.join();
        match &e {
            Error::Timeout { waited, rank, what } => {
                ensure!(*rank == Some(0), "{e}");
                ensure!(*waited >= limit, "{e}");
                ensure!(
                    *waited <= limit + limit / 10 + Duration::from_millis(100),
                    "noticed after {waited:?} for a {limit:?} deadline"
                );
                ensure!(what.contains("aborted"), "{e}");
            }
            other => return Err(format!("expected a timeout, got {other}").into()),
        }
        ensure!(took >= limit, "returned early: {took:?}");
        ensure!(
            took <= limit + limit / 10 + Duration::from_millis(100) + Duration::from_secs(10),
            "took {took:?}"
        );
        ensure!(comm.is_aborted(), "the communicator was not aborted");
        stream.synchronize()?;
        let e = comm
            .all_reduce_in_place(&mut b, ReduceOp::Sum, &stream)
            .unwrap_err();
        ensure!(e.to_string().contains("aborted"), "{e}");
        ensure!(
            comm.as_raw().is_null(),
            "raw pointer of an aborted communicator"
        );
        let e = comm.wait(&stream, limit).unwrap_err();
        ensure!(e.to_string().contains("aborted"), "{e}");
        Ok(())
    }

    /// A non-blocking communicator (ncclInProgress polled to completion):
    /// collectives direct and grouped, split (the child inherits the mode),
    /// wait, finalize.
    fn non_blocking() -> TestResult {
        let _dev = Device::new(0)?;
        let stream = Device::new(0)?.create_stream()?;
        let comm =
            // SAFETY: every other rank runs this same test code: the same calls in the same order.
            unsafe { Communicator::init_rank_timeout(&UniqueId::new()?, 0, 1, Duration::from_secs(60)) }?;
        ensure!(
            comm.is_non_blocking() && comm.timeout() == Duration::from_secs(60),
            "{comm:?}"
        );
        let x = input(300);
        let a = DeviceBuffer::from_host(&x)?;
        let mut b = DeviceBuffer::from_host(&[UNTOUCHED; 300])?;
        comm.all_reduce(&a, &mut b, ReduceOp::Sum, &stream)?;
        comm.wait(&stream, Duration::from_secs(60))?;
        check("non-blocking all_reduce", &b.to_vec()?, &x)?;
        let mut c = DeviceBuffer::from_host(&[UNTOUCHED; 300])?;
        nccl::group(|g| {
            g.send(&comm, &a, 0, &stream)?;
            g.recv(&comm, &mut c, 0, &stream)
        })?;
        comm.wait(&stream, Duration::from_secs(60))?;
        check("non-blocking self send/recv", &c.to_vec()?, &x)?;
        let sub = comm
            .split(Some(1), 0)?
            .ok_or("split gave no communicator")?;
        ensure!(sub.is_non_blocking() && sub.size() == 1, "{sub:?}");
        let mut v = DeviceBuffer::from_host(&[3.0f32; 4])?;
        sub.all_reduce_in_place(&mut v, ReduceOp::Max, &stream)?;
        sub.wait(&stream, Duration::from_secs(60))?;
        check("non-blocking split", &v.to_vec()?, &[3.0; 4])?;
        ensure!(
            comm.split(None, 0)?.is_none(),
            "no color gave a communicator"
        );
        sub.finalize()?;
        ensure!(comm.async_error()?.is_none(), "async error");
        comm.finalize()?;
        // Dropped without finalize: Drop finalizes within the timeout.
        // SAFETY: every other rank runs this same test code: the same calls in the same order.
        let c2 = unsafe {
            Communicator::init_rank_timeout(&UniqueId::new()?, 0, 1, Duration::from_secs(30))
        }?;
        let t = Instant::now();
        drop(c2);
        ensure!(
            t.elapsed() < Duration::from_secs(33),
            "drop took {:?}",
            t.elapsed()
        );
        Ok(())
    }

    /// A non-blocking parent's split answers ncclSuccess and finishes on
    /// NCCL's thread: every split is read only once the parent is ready, so
    /// each with a color yields a working communicator and each without
    /// yields `None`, many times over; the same for a ready non-blocking
    /// communicator handed over with `from_raw` (its mode not known).
    fn split_non_blocking() -> TestResult {
        let _dev = Device::new(0)?;
        let stream = Device::new(0)?.create_stream()?;
        let t = Duration::from_secs(60);
        // SAFETY: every other rank runs this same test code: the same calls in the same order.
        let known = unsafe { Communicator::init_rank_timeout(&UniqueId::new()?, 0, 1, t) }?;
        // SAFETY: every other rank runs this same test code: the same calls in the same order.
        let made = unsafe { Communicator::init_rank_timeout(&UniqueId::new()?, 0, 1, t) }?;
        // SAFETY: a live communicator, owned by nothing else from here on.
        let handed = unsafe { Communicator::from_raw(made.into_raw()) }?;
        ensure!(
            !handed.is_non_blocking(),
            "mode known after from_raw: {handed:?}"
        );
        let mut kept = Vec::new();
        for parent in [&known, &handed] {
            for i in 0..12u32 {
                if i % 3 == 2 {
                    ensure!(
                        parent.split(None, 0)?.is_none(),
                        "split {i}: no color gave a communicator"
                    );
                    continue;
                }
                let child = parent.split(Some(i), 0)?.ok_or_else(|| {
                    format!("split {i}: no communicator (read before NCCL wrote it)")
                })?;
                ensure!(
                    child.size() == 1 && child.rank() == 0,
                    "split {i}: {child:?}"
                );
                let mut v = DeviceBuffer::from_host(&[i as f32; 8])?;
                child.all_reduce_in_place(&mut v, ReduceOp::Sum, &stream)?;
                child.wait(&stream, t)?;
                check(&format!("split {i}"), &v.to_vec()?, &[i as f32; 8])?;
                kept.push(child);
            }
        }
        eprintln!(
            "  from_raw parent seen non-blocking after its splits: {}",
            handed.is_non_blocking()
        );
        for c in kept {
            c.finalize()?;
        }
        ensure!(handed.async_error()?.is_none(), "async error");
        handed.finalize()?;
        known.finalize()?;
        Ok(())
    }

    /// Rank 0 of 2 whose peer never joins (it was started and killed before
    /// it could): `init_rank_timeout` returns a timeout within 10 % plus
    /// 100 ms of the deadline, instead of waiting forever.
    fn init_times_out() -> TestResult {
        Device::new(0)?;
        let mut peer = Command::new("sleep").arg("600").spawn()?;
        peer.kill()?;
        let _ = peer.wait();
        let limit = Duration::from_secs(3);
        let t = Instant::now();
        // SAFETY: every other rank runs this same test code: the same calls in the same order.
        let e =
            unsafe { Communicator::init_rank_timeout(&UniqueId::new()?, 0, 2, limit) }.unwrap_err();
        let took = t.elapsed();
        let Error::Timeout {
            waited,
            rank: Some(0),
            ..
        } = &e
        else {
            return Err(format!("expected a timeout of rank 0, got {e}").into());
        };
        ensure!(e.to_string().contains("aborted"), "{e}");
        ensure!(
            took >= limit && *waited >= limit,
            "returned early: {took:?}"
        );
        // The deadline is noticed within 10 % plus 100 ms; the abort that
        // follows (joining NCCL's threads) gets 10 s more.
        ensure!(
            *waited <= limit + limit / 10 + Duration::from_millis(100),
            "noticed after {waited:?} for a {limit:?} deadline"
        );
        ensure!(
            took <= limit + Duration::from_secs(10),
            "took {took:?} with the abort"
        );
        eprintln!("  deadline noticed after {waited:?}, returned after {took:?}");
        Ok(())
    }

    /// Random lengths, roots and peers on a live single-rank communicator:
    /// every call either runs or fails with a typed error, none panics.
    fn property_arguments() -> TestResult {
        use proptest::prelude::*;
        use proptest::test_runner::TestCaseError;
        let (_dev, stream, comm) = one_rank()?;
        let big = DeviceBuffer::<f32>::zeroed(64)?;
        let big2 = std::cell::RefCell::new(DeviceBuffer::<f32>::zeroed(64)?);
        let mut runner = crate::support::prop_runner(300);
        let strat = (
            0usize..=64,
            0usize..=64,
            prop_oneof![Just(0usize), Just(1), Just(usize::MAX), 0usize..5],
            0u8..8,
        );
        let mut runner_result = Ok(());
        let stats = std::cell::Cell::new((0u32, 0u32));
        let r = runner.run(&strat, |(n, m, who, op)| {
            let send = big
                .slice(..n)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let mut b2 = big2.borrow_mut();
            let recv = b2
                .slice_mut(..m)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match op {
                0 => comm.all_reduce(send, recv, ReduceOp::Sum, &stream),
                1 => comm.broadcast(send, recv, who, &stream),
                2 => comm.reduce(send, recv, ReduceOp::Min, who, &stream),
                3 => comm.all_gather(send, recv, &stream),
                4 => comm.reduce_scatter(send, recv, ReduceOp::Max, &stream),
                5 => comm.send(send, who, &stream),
                6 => comm.recv(recv, who, &stream),
                _ => nccl::group(|g| {
                    g.send(&comm, send, who, &stream)?;
                    g.recv(&comm, recv, who, &stream)
                }),
            }))
            .map_err(|_| TestCaseError::fail("panicked"))?;
            // And the wait after it, with long or unbounded deadlines
            // (Duration::MAX never passes): the work finishes.
            let limit = match op % 3 {
                0 => Duration::MAX,
                1 => Duration::from_secs(u64::MAX),
                _ => Duration::from_secs(30),
            };
            comm.wait(&stream, limit)
                .map_err(|e| TestCaseError::fail(format!("wait: {e}")))?;
            let (ok, bad) = stats.get();
            match r {
                Ok(()) => stats.set((ok + 1, bad)),
                Err(Error::InvalidArgument { .. } | Error::Mismatch { .. }) => {
                    stats.set((ok, bad + 1))
                }
                Err(e) => return Err(TestCaseError::fail(format!("untyped: {e}"))),
            }
            Ok(())
        });
        if let Err(e) = r {
            runner_result = Err(e.to_string());
        }
        runner_result?;
        comm.wait(&stream, Duration::from_secs(60))?;
        let (ok, bad) = stats.get();
        eprintln!("  collective arguments: {ok} ran, {bad} refused");
        ensure!(
            ok > 0 && bad > 0,
            "the generator must make both ({ok} / {bad})"
        );
        Ok(())
    }

    /// Rank 1 of the killed-peer test, in a child process on device 1.
    pub fn child(spec: &str) -> ! {
        let run = || -> Result<(), Error> {
            let (id, t) = spec
                .split_once(' ')
                .ok_or_else(|| Error::invalid(CHILD, "id and timeout", spec))?;
            let id: UniqueId = id.parse()?;
            let t = Duration::from_secs_f64(
                t.parse().map_err(|_| Error::invalid(CHILD, "timeout", t))?,
            );
            let dev = Device::new(1)?;
            let stream = dev.create_stream()?;
            // SAFETY: every other rank runs this same test code: the same calls in the same order.
            let comm = unsafe { Communicator::init_rank_timeout(&id, 1, 2, t) }?;
            let mut v = DeviceBuffer::from_host(&[1.0f32; 16])?;
            comm.all_reduce_in_place(&mut v, ReduceOp::Sum, &stream)?;
            comm.wait(&stream, t)?;
            println!("ready");
            // Wait to be killed (bounded, should the parent die first).
            std::thread::sleep(Duration::from_secs(300));
            Ok(())
        };
        match run() {
            Ok(()) => std::process::exit(0),
            Err(e) => {
                eprintln!("gpu/nccl child: {e}");
                std::process::exit(1)
            }
        }
    }

    /// Two processes on two GPUs run an all-reduce; the peer is killed
    /// (SIGKILL); the survivor's next all-reduce and wait fail (a timeout,
    /// or NCCL's own error) within the deadline instead of hanging.
    fn killed_peer() -> TestResult {
        let dev = Device::new(0)?;
        let stream = dev.create_stream()?;
        let id = UniqueId::new()?;
        let t = Duration::from_secs(60);
        let mut peer = Command::new(std::env::current_exe()?)
            .env(CHILD, format!("{id} 60"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        // SAFETY: every other rank runs this same test code: the same calls in the same order.
        let comm = unsafe { Communicator::init_rank_timeout(&id, 0, 2, t) };
        let comm = match comm {
            Ok(c) => c,
            Err(e) => {
                let _ = peer.kill();
                let _ = peer.wait();
                return Err(e.into());
            }
        };
        let mut v = DeviceBuffer::from_host(&[2.0f32; 16])?;
        comm.all_reduce_in_place(&mut v, ReduceOp::Sum, &stream)?;
        comm.wait(&stream, t)?;
        check("all_reduce across two processes", &v.to_vec()?, &[3.0; 16])?;
        let mut line = String::new();
        if let Some(out) = peer.stdout.take() {
            BufReader::new(out).read_line(&mut line)?;
        }
        ensure!(line.trim() == "ready", "peer said {line:?}");
        peer.kill()?;
        let _ = peer.wait();
        let limit = Duration::from_secs(5);
        let start = Instant::now();
        let r = comm
            .all_reduce_in_place(&mut v, ReduceOp::Sum, &stream)
            .and_then(|()| comm.wait(&stream, limit));
        let took = start.elapsed();
        let e = match r {
            Ok(()) => return Err("the all-reduce with a dead peer completed".into()),
            Err(e) => e,
        };
        ensure!(
            matches!(e, Error::Timeout { .. } | Error::Nccl { .. }),
            "expected a timeout or NCCL's error, got {e}"
        );
        ensure!(comm.is_aborted(), "not aborted after {e}");
        // The deadline is noticed within 10 % plus 100 ms; the drain after
        // the abort (up to 10 s) is bounded separately.
        if let Error::Timeout { waited, .. } = &e {
            ensure!(
                *waited >= limit && *waited <= limit + limit / 10 + Duration::from_millis(100),
                "noticed after {waited:?} for a {limit:?} deadline"
            );
            ensure!(
                took <= *waited + Duration::from_secs(10) + Duration::from_millis(500),
                "the abort and drain took {:?}",
                took.saturating_sub(*waited)
            );
        } else {
            // NCCL's own error: noticed before the deadline.
            ensure!(
                took <= limit + limit / 10 + Duration::from_millis(100) + Duration::from_secs(10),
                "took {took:?}"
            );
        }
        eprintln!("  survivor: {e} (after {took:?})");
        Ok(())
    }
}
