//! NCCL calls across two devices (gpu tier; skipped visibly without two
//! GPUs): a stream or a buffer of another device than the communicator's is
//! a typed `DeviceMismatch` before anything is queued, for every collective,
//! in place or not, and send/recv, direct and grouped; ranks of `init_all`
//! whose counts disagree (a broadcast of 8 Mi into 4 Mi, a send larger than
//! its recv) are refused before NCCL writes past the smaller buffer, and
//! the opt-in exchange of call fingerprints refuses the same from threads.
//! On one GPU: a non-blocking communicator used on a worker thread that
//! exits, then used and dropped elsewhere (NCCL's thread-local job record);
//! `init_all` under `NCCL_COMM_BLOCKING=0` (a child process); the
//! fingerprint exchange of a single rank.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

crate::nccl_main!(skip "gpu/nccl_devices", "gpu::nccl_devices");

#[cfg(feature = "nccl")]
pub fn main() {
    if std::env::var_os(imp::CHILD).is_some() {
        imp::child();
    }
    imp::main()
}

#[cfg(feature = "nccl")]
mod imp {
    use std::time::Duration;

    use cudnn::Error;
    use cudnn::nccl::{self, Communicator, ReduceOp, UniqueId};
    use cudnn::runtime::{Device, DeviceBuffer, Stream};

    use crate::support::{TestResult, gpu, run};

    /// Set (with `NCCL_COMM_BLOCKING=0`): run `init_all` on device 0 and
    /// print the outcome.
    pub const CHILD: &str = "GPU_NCCL_DEVICES_CHILD";

    pub fn main() {
        let mut trials = vec![
            gpu("worker_thread_exits_then_use_and_drop", worker_thread_exits),
            gpu("init_all_under_nccl_comm_blocking_0", init_all_non_blocking),
            gpu("agreement_exchange_single_rank", agreement_single_rank),
        ];
        for (name, f) in [
            (
                "device_mismatch_is_typed",
                device_mismatch as fn() -> TestResult,
            ),
            ("clique_counts_compared_before_launch", clique_counts),
            ("agreement_exchange_across_threads", agreement_threads),
        ] {
            trials.push(match Device::count() {
                Ok(n) if n < 2 && crate::support::has_gpu() => {
                    eprintln!("skipped: gpu::{name}: needs 2 or more GPUs, this machine has {n}");
                    crate::support::trial(format!("gpu::{name}"), || Ok(())).with_ignored_flag(true)
                }
                _ => gpu(name, f),
            });
        }
        run(trials)
    }

    const POISON: f32 = -7.0;

    fn values(n: usize) -> Vec<f32> {
        (0..n).map(|i| (i % 97) as f32 + 1.0).collect()
    }

    /// The case on two GPUs of one process: rank 0 broadcasts 8 Mi
    /// floats, rank 1 receives into 4 Mi. In one group the mismatch is
    /// refused before anything is launched (rank 1's poisoned buffer and
    /// the 4 Mi after it, a guard region of the same allocation, stay as
    /// they were); in two groups the second is refused and the first, left
    /// without a partner, is ended by `wait`'s deadline; a send of 8 Mi
    /// against a recv of 4 Mi likewise. Agreeing counts then run and give
    /// the root's values.
    fn clique_counts() -> TestResult {
        const MI: usize = 1 << 20;
        let d0 = Device::new(0)?;
        let d1 = Device::new(1)?;
        let comms = Communicator::init_all(&[d0, d1])?;
        d0.set_current()?;
        let s0 = d0.create_stream()?;
        let src = DeviceBuffer::from_host(&values(8 * MI))?;
        d1.set_current()?;
        let s1 = d1.create_stream()?;
        // 4 Mi received, then a 4 Mi guard in the same allocation.
        let mut dst = DeviceBuffer::from_host(&vec![POISON; 8 * MI])?;
        d0.set_current()?;
        let mut out0 = DeviceBuffer::<f32>::zeroed(8 * MI)?;
        let e = nccl::group(|g| {
            g.send(&comms[0], &src, 1, &s0)?;
            g.recv(&comms[1], dst.slice_mut(..4 * MI)?, 0, &s1)
        })
        .unwrap_err();
        ensure!(
            matches!(e, Error::Mismatch { .. }),
            "send 8 Mi, recv 4 Mi: {e}"
        );
        s1.synchronize()?;
        ensure!(
            dst.to_vec()?.iter().all(|&v| v == POISON),
            "the refused group wrote into rank 1's buffer"
        );
        let e = nccl::group(|g| {
            g.broadcast(&comms[0], &src, &mut out0, 0, &s0)?;
            g.broadcast_in_place(&comms[1], dst.slice_mut(..4 * MI)?, 0, &s1)
        });
        ensure!(
            matches!(e, Err(Error::Mismatch { .. })),
            "broadcast 8 Mi into 4 Mi: {e:?}"
        );
        s1.synchronize()?;
        ensure!(
            dst.to_vec()?.iter().all(|&v| v == POISON),
            "the refused broadcast wrote into rank 1's buffer"
        );
        // Agreeing counts (4 Mi each) run and give the root's values; the
        // guard after them stays.
        let want = values(4 * MI);
        d0.set_current()?;
        let src4 = DeviceBuffer::from_host(&want)?;
        let (head, tail) = dst.as_slice_mut().split_at_mut(4 * MI)?;
        nccl::group(|g| {
            g.broadcast(&comms[0], &src4, out0.slice_mut(..4 * MI)?, 0, &s0)?;
            g.broadcast_in_place(&comms[1], head, 0, &s1)
        })?;
        nccl::group(|g| {
            g.send(&comms[0], &src4, 1, &s0)?;
            g.recv(&comms[1], tail, 0, &s1)
        })?;
        s0.synchronize()?;
        s1.synchronize()?;
        let got = dst.to_vec()?;
        ensure!(got[..4 * MI] == want[..], "the broadcast's values");
        ensure!(got[4 * MI..] == want[..], "the send's values");
        Ok(())
    }

    /// Two threads, one rank each, with the fingerprint exchange on: a
    /// broadcast whose counts differ is refused on both ranks (nothing
    /// written); agreeing counts run.
    fn agreement_threads() -> TestResult {
        let d = [Device::new(0)?, Device::new(1)?];
        let comms = Communicator::init_all(&d)?;
        let mut handles = Vec::new();
        for (r, mut comm) in comms.into_iter().enumerate() {
            let dev = d[r];
            handles.push(std::thread::spawn(move || -> Result<Vec<f32>, String> {
                dev.set_current().map_err(|e| e.to_string())?;
                comm.set_check_agreement(true);
                let stream = dev.create_stream().map_err(|e| e.to_string())?;
                let n = if r == 0 { 64 } else { 32 };
                let mut buf =
                    DeviceBuffer::from_host(&vec![POISON; 64]).map_err(|e| e.to_string())?;
                let e = match buf.slice_mut(..n) {
                    Ok(head) => comm.broadcast_in_place(head, 0, &stream),
                    Err(e) => return Err(e.to_string()),
                };
                match e {
                    Err(Error::Mismatch { .. }) => {}
                    other => return Err(format!("rank {r}: {other:?}")),
                }
                stream.synchronize().map_err(|e| e.to_string())?;
                buf.to_vec().map_err(|e| e.to_string())
            }));
        }
        for (r, h) in handles.into_iter().enumerate() {
            let got = h.join().map_err(|_| "a rank panicked")??;
            ensure!(got.iter().all(|&v| v == POISON), "rank {r} was written");
        }
        Ok(())
    }

    /// One rank with the exchange on: the all-reduce runs and gives the
    /// input (one rank), the exchange costing only time.
    fn agreement_single_rank() -> TestResult {
        let dev = Device::new(0)?;
        let stream = dev.create_stream()?;
        // SAFETY: every other rank runs this same test code: the same calls in the same order.
        let mut comm = unsafe { Communicator::init_rank(&UniqueId::new()?, 0, 1) }?;
        comm.set_check_agreement(true);
        let x = values(1000);
        let a = DeviceBuffer::from_host(&x)?;
        let mut b = DeviceBuffer::from_host(&vec![POISON; 1000])?;
        comm.all_reduce(&a, &mut b, ReduceOp::Sum, &stream)?;
        stream.synchronize()?;
        ensure!(b.to_vec()? == x, "all_reduce with the exchange");
        Ok(())
    }

    /// NCCL links a non-blocking communicator's launch to the calling
    /// thread's job record; the worker that launched exits, then the
    /// communicator is used and dropped on this thread. With the job left
    /// linked NCCL would join and reset a record in the dead thread's
    /// storage (a use-after-free on 2.19 to 2.25; run under a sanitizer or
    /// compute-sanitizer to see it); here every result is checked against
    /// the host and nothing may fail or crash. The job is linked only when
    /// NCCL answers a call `ncclInProgress`, which a one-rank communicator
    /// need not do: the communicator is re-wrapped with `from_raw` (its
    /// mode then unknown, so `is_non_blocking` turns true only once the
    /// crate sees `ncclInProgress`), and when the worker's calls never saw
    /// it the test says so on stderr and checks only the results. The calls the crate makes
    /// to release the job on the issuing thread are checked without a
    /// device by `tests_progress` (a mocked NCCL).
    fn worker_thread_exits() -> TestResult {
        let dev = Device::new(0)?;
        let comm =
            // SAFETY: every other rank runs this same test code: the same calls in the same order.
            unsafe { Communicator::init_rank_timeout(&UniqueId::new()?, 0, 1, Duration::from_secs(60)) }?;
        // Forget the mode: from here it reads non-blocking only once NCCL
        // answers ncclInProgress.
        let raw = comm.into_raw();
        // SAFETY: `raw` is live and owned by nobody else; its
        // initialisation was settled on this thread by init_rank_timeout.
        let comm = unsafe { Communicator::from_raw(raw) }.inspect_err(|_| {
            // SAFETY: from_raw left ownership with us; nothing else uses it.
            let _ = unsafe { cudnn::sys::nccl::load().map(|api| api.ncclCommAbort(raw)) };
        })?;
        let seen_before = comm.is_non_blocking();
        let x = values(4096);
        let (comm, child) = std::thread::spawn({
            let x = x.clone();
            move || -> Result<(Communicator, Option<Communicator>), String> {
                let go = || -> cudnn::Result<Option<Communicator>> {
                    dev.set_current()?;
                    let stream = dev.create_stream()?;
                    let a = DeviceBuffer::from_host(&x)?;
                    let mut b = DeviceBuffer::from_host(&vec![POISON; x.len()])?;
                    comm.all_reduce(&a, &mut b, ReduceOp::Sum, &stream)?;
                    let mut c = DeviceBuffer::from_host(&vec![POISON; x.len()])?;
                    nccl::group(|g| {
                        g.send(&comm, &a, 0, &stream)?;
                        g.recv(&comm, &mut c, 0, &stream)
                    })?;
                    comm.wait(&stream, Duration::from_secs(60))?;
                    if b.to_vec()? != x || c.to_vec()? != x {
                        return Err(Error::invalid("result", "must be the input", "other"));
                    }
                    comm.split(Some(0), 0)
                };
                let child = go().map_err(|e| e.to_string())?;
                Ok((comm, child))
            }
        })
        .join()
        .map_err(|_| "the worker panicked")??;
        if seen_before || !comm.is_non_blocking() {
            // Not a skip: the results below are still checked after the
            // worker exited; only the job-record path is not exercised.
            eprintln!(
                "note: gpu::worker_thread_exits_then_use_and_drop: NCCL never answered \
                 ncclInProgress to the worker's calls (seen before the worker: {seen_before}), \
                 so no job was linked to the exited thread: this run checks the results of \
                 use and drop after the worker exited, not the job-record release (which \
                 tests_progress checks against a mocked NCCL)"
            );
        }
        // The worker has exited; use and drop both here.
        dev.set_current()?;
        let stream: Stream = dev.create_stream()?;
        for c in std::iter::once(&comm).chain(child.as_ref()) {
            let mut v = DeviceBuffer::from_host(&x)?;
            c.all_reduce_in_place(&mut v, ReduceOp::Max, &stream)?;
            c.wait(&stream, Duration::from_secs(60))?;
            ensure!(v.to_vec()? == x, "after the worker exited");
        }
        drop(child);
        drop(comm);
        Ok(())
    }

    /// `init_all` with `NCCL_COMM_BLOCKING=0` in the environment: NCCL
    /// answers `ncclInProgress`; the crate polls the communicators ready
    /// (it treated the answer as an error and freed the handle vector NCCL's
    /// thread still wrote). Run in a child process, so the variable reaches
    /// NCCL before its first read.
    fn init_all_non_blocking() -> TestResult {
        let exe = std::env::current_exe()?;
        let out = std::process::Command::new(exe)
            .env(CHILD, "1")
            .env("NCCL_COMM_BLOCKING", "0")
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        ensure!(
            text.contains("init_all ok non_blocking=true sum ok"),
            "child said: {text} / {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    }

    pub fn child() -> ! {
        let go = || -> Result<bool, Box<dyn std::error::Error>> {
            let dev = Device::new(0)?;
            let comms = Communicator::init_all(&[dev])?;
            let stream = dev.create_stream()?;
            let x = values(100);
            let mut v = DeviceBuffer::from_host(&x)?;
            comms[0].all_reduce_in_place(&mut v, ReduceOp::Sum, &stream)?;
            comms[0].wait(&stream, Duration::from_secs(60))?;
            Ok(comms[0].is_non_blocking() && v.to_vec()? == x)
        };
        match go() {
            Ok(true) => println!("init_all ok non_blocking=true sum ok"),
            Ok(false) => println!("init_all ok but blocking or a wrong sum"),
            Err(e) => println!("init_all failed: {e}"),
        }
        std::process::exit(0)
    }

    /// Communicator on device 0; a stream or a buffer on device 1 is a
    /// typed `DeviceMismatch` before anything is queued, directly and in a
    /// group.
    fn device_mismatch() -> TestResult {
        let d0 = Device::new(0)?;
        let d1 = Device::new(1)?;
        let comms = Communicator::init_all(&[d0, d1])?;
        d0.set_current()?;
        let s0 = d0.create_stream()?;
        let mut b0 = DeviceBuffer::<f32>::zeroed(8)?;
        d1.set_current()?;
        let s1 = d1.create_stream()?;
        let b1 = DeviceBuffer::<f32>::zeroed(8)?;
        d0.set_current()?;
        let c0 = &comms[0];
        ensure!(c0.device_ordinal() == 0, "{c0:?}");
        let e = c0
            .all_reduce_in_place(&mut b0, ReduceOp::Sum, &s1)
            .unwrap_err();
        ensure!(
            matches!(
                &e,
                Error::DeviceMismatch {
                    expected: 0,
                    got: 1,
                    ..
                }
            ),
            "stream of device 1: {e}"
        );
        let e = c0.all_reduce(&b1, &mut b0, ReduceOp::Sum, &s0).unwrap_err();
        ensure!(
            matches!(&e, Error::DeviceMismatch { what, expected: 0, got: 1 } if what.contains("send")),
            "buffer of device 1: {e}"
        );
        let e = nccl::group(|g| g.all_reduce(c0, &b1, &mut b0, ReduceOp::Sum, &s0)).unwrap_err();
        ensure!(
            matches!(&e, Error::DeviceMismatch { .. }),
            "in a group: {e}"
        );
        let e =
            nccl::group(|g| g.all_reduce_in_place(c0, &mut b0, ReduceOp::Sum, &s1)).unwrap_err();
        ensure!(
            matches!(&e, Error::DeviceMismatch { .. }),
            "in a group: {e}"
        );
        // Every call, direct and grouped, in-place variants and
        // point-to-point included: a buffer of device 1, then a stream of
        // device 1. Lengths, roots and peers are valid for 2 ranks, so the
        // device is the only thing wrong.
        d1.set_current()?;
        let a1 = DeviceBuffer::<f32>::zeroed(8)?;
        let mut m1 = DeviceBuffer::<f32>::zeroed(8)?;
        let mut w1 = DeviceBuffer::<f32>::zeroed(16)?;
        let big1 = DeviceBuffer::<f32>::zeroed(16)?;
        d0.set_current()?;
        let a0 = DeviceBuffer::<f32>::zeroed(8)?;
        let mut w0 = DeviceBuffer::<f32>::zeroed(16)?;
        let big0 = DeviceBuffer::<f32>::zeroed(16)?;
        let mut seen = 0;
        let mut expect = |what: String, r: cudnn::Result<()>| -> TestResult {
            seen += 1;
            match r {
                Err(Error::DeviceMismatch {
                    expected: 0,
                    got: 1,
                    ..
                }) => Ok(()),
                other => Err(format!("{what}: expected DeviceMismatch 0/1, got {other:?}").into()),
            }
        };
        use ReduceOp::Sum;
        // A buffer of device 1 on the right stream.
        let s = &s0;
        expect(
            "all_reduce send".into(),
            c0.all_reduce(&a1, &mut b0, Sum, s),
        )?;
        expect(
            "all_reduce recv".into(),
            c0.all_reduce(&a0, &mut m1, Sum, s),
        )?;
        expect(
            "all_reduce_in_place".into(),
            c0.all_reduce_in_place(&mut m1, Sum, s),
        )?;
        expect("broadcast send".into(), c0.broadcast(&a1, &mut b0, 1, s))?;
        expect("broadcast recv".into(), c0.broadcast(&a0, &mut m1, 1, s))?;
        expect(
            "broadcast_in_place".into(),
            c0.broadcast_in_place(&mut m1, 1, s),
        )?;
        expect("reduce send".into(), c0.reduce(&a1, &mut b0, Sum, 1, s))?;
        expect("reduce recv".into(), c0.reduce(&a0, &mut m1, Sum, 1, s))?;
        expect(
            "reduce_in_place".into(),
            c0.reduce_in_place(&mut m1, Sum, 1, s),
        )?;
        expect("all_gather send".into(), c0.all_gather(&a1, &mut w0, s))?;
        expect("all_gather recv".into(), c0.all_gather(&a0, &mut w1, s))?;
        expect(
            "all_gather_in_place".into(),
            c0.all_gather_in_place(&mut w1, s),
        )?;
        expect(
            "reduce_scatter send".into(),
            c0.reduce_scatter(&big1, &mut b0, Sum, s),
        )?;
        expect(
            "reduce_scatter recv".into(),
            c0.reduce_scatter(&big0, &mut m1, Sum, s),
        )?;
        expect(
            "reduce_scatter_in_place".into(),
            c0.reduce_scatter_in_place(&mut w1, Sum, s),
        )?;
        expect("send".into(), c0.send(&a1, 1, s))?;
        expect("recv".into(), c0.recv(&mut m1, 1, s))?;
        // Right buffers, a stream of device 1.
        let s = &s1;
        expect(
            "all_reduce on s1".into(),
            c0.all_reduce(&a0, &mut b0, Sum, s),
        )?;
        expect("broadcast on s1".into(), c0.broadcast(&a0, &mut b0, 1, s))?;
        expect(
            "broadcast_in_place on s1".into(),
            c0.broadcast_in_place(&mut b0, 1, s),
        )?;
        expect("reduce on s1".into(), c0.reduce(&a0, &mut b0, Sum, 1, s))?;
        expect(
            "reduce_in_place on s1".into(),
            c0.reduce_in_place(&mut b0, Sum, 1, s),
        )?;
        expect("all_gather on s1".into(), c0.all_gather(&a0, &mut w0, s))?;
        expect(
            "all_gather_in_place on s1".into(),
            c0.all_gather_in_place(&mut w0, s),
        )?;
        expect(
            "reduce_scatter on s1".into(),
            c0.reduce_scatter(&big0, &mut b0, Sum, s),
        )?;
        expect(
            "reduce_scatter_in_place on s1".into(),
            c0.reduce_scatter_in_place(&mut w0, Sum, s),
        )?;
        expect("send on s1".into(), c0.send(&a0, 1, s))?;
        expect("recv on s1".into(), c0.recv(&mut b0, 1, s))?;
        // The same calls in a group (each group refused as a whole).
        let s = &s0;
        expect(
            "g.all_reduce".into(),
            nccl::group(|g| g.all_reduce(c0, &a0, &mut m1, Sum, s)),
        )?;
        expect(
            "g.all_reduce_in_place".into(),
            nccl::group(|g| g.all_reduce_in_place(c0, &mut m1, Sum, s)),
        )?;
        expect(
            "g.broadcast".into(),
            nccl::group(|g| g.broadcast(c0, &a1, &mut b0, 1, s)),
        )?;
        expect(
            "g.broadcast_in_place".into(),
            nccl::group(|g| g.broadcast_in_place(c0, &mut m1, 1, s)),
        )?;
        expect(
            "g.reduce".into(),
            nccl::group(|g| g.reduce(c0, &a1, &mut b0, Sum, 1, s)),
        )?;
        expect(
            "g.reduce_in_place".into(),
            nccl::group(|g| g.reduce_in_place(c0, &mut m1, Sum, 1, s)),
        )?;
        expect(
            "g.all_gather".into(),
            nccl::group(|g| g.all_gather(c0, &a0, &mut w1, s)),
        )?;
        expect(
            "g.all_gather_in_place".into(),
            nccl::group(|g| g.all_gather_in_place(c0, &mut w1, s)),
        )?;
        expect(
            "g.reduce_scatter".into(),
            nccl::group(|g| g.reduce_scatter(c0, &big1, &mut b0, Sum, s)),
        )?;
        expect(
            "g.reduce_scatter_in_place".into(),
            nccl::group(|g| g.reduce_scatter_in_place(c0, &mut w1, Sum, s)),
        )?;
        expect("g.send".into(), nccl::group(|g| g.send(c0, &a1, 1, s)))?;
        expect("g.recv".into(), nccl::group(|g| g.recv(c0, &mut m1, 1, s)))?;
        expect(
            "g.send on s1".into(),
            nccl::group(|g| g.send(c0, &a0, 1, &s1)),
        )?;
        expect(
            "g.recv on s1".into(),
            nccl::group(|g| g.recv(c0, &mut b0, 1, &s1)),
        )?;
        ensure!(seen == 42, "{seen} cases");
        ensure!(
            c0.async_error()?.is_none(),
            "async error after the refusals"
        );
        for c in comms {
            c.destroy()?;
        }
        Ok(())
    }
}
