//! NCCL calls across two devices (gpu tier; skipped visibly without two
//! GPUs): a stream or a buffer of another device than the communicator's is
//! a typed `DeviceMismatch` before anything is queued, for every collective,
//! in place or not, and send/recv, direct and grouped.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

#[cfg(not(feature = "nccl"))]
fn main() {
    use libtest_mimic::Trial;
    eprintln!("skipped: gpu_nccl_devices: cudnn was built without feature `nccl`");
    support::run(vec![
        Trial::test("gpu::nccl_devices", || Ok(())).with_ignored_flag(true),
    ]);
}

#[cfg(feature = "nccl")]
fn main() {
    imp::main()
}

#[cfg(feature = "nccl")]
mod imp {
    use cudnn::Error;
    use cudnn::nccl::{self, Communicator, ReduceOp};
    use cudnn::runtime::{Device, DeviceBuffer};
    use libtest_mimic::Trial;

    use crate::ensure;
    use crate::support::{TestResult, gpu, run};

    pub fn main() {
        let name = "device_mismatch_is_typed";
        let trial = match Device::count() {
            Ok(n) if n < 2 && crate::support::has_gpu() => {
                eprintln!("skipped: gpu::{name}: needs 2 or more GPUs, this machine has {n}");
                Trial::test(format!("gpu::{name}"), || Ok(())).with_ignored_flag(true)
            }
            _ => gpu(name, device_mismatch),
        };
        run(vec![trial])
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
