//! NCCL on a device (gpu tier; skipped visibly without one): every
//! collective and element type on a single-rank communicator against the
//! host computation (for one rank every reduction is the input itself, so
//! the receive buffers are poisoned first and views sit inside larger
//! buffers whose borders must stay untouched), self send/receive and fused
//! calls in groups, split, the asynchronous error query, finalize and
//! abort; and, when the machine has two or more GPUs, all-reduce, all-gather
//! and reduce-scatter across all of them against sums computed on the host.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

crate::nccl_main!("gpu/nccl", "gpu::nccl");

#[cfg(feature = "nccl")]
mod imp {
    use cudnn::Error;
    use cudnn::nccl::{self, Communicator, NcclType, ReduceOp, UniqueId};
    use cudnn::runtime::{Device, DeviceBuffer, Stream};
    use half::{bf16, f16};
    use libtest_mimic::Trial;

    use crate::support::{TestResult, gpu, run};

    pub fn main() {
        let mut trials: Vec<Trial> = Vec::new();
        macro_rules! each_type {
            ($($t:ty),*) => {$(
                trials.push(gpu(&format!("collectives_single_rank_{}", <$t as cudnn::DataType>::NAME), single_rank::<$t>));
            )*};
        }
        each_type!(f32, f64, f16, bf16, i8, u8, i32, i64);
        trials.push(gpu("group_self_send_recv_and_fused_calls", groups));
        trials.push(gpu("split_async_error_finalize_abort", lifecycle));
        trials.push(gpu("misuse_on_a_live_communicator", misuse));
        trials.push(gpu("init_from_env_single_process", launch_single));
        // Needs several GPUs: with fewer it is skipped, visibly, not passed.
        match Device::count() {
            Ok(n) if n < 2 && crate::support::has_gpu() => {
                eprintln!(
                    "skipped: gpu::across_all_local_gpus: needs 2 or more GPUs, this machine has {n}"
                );
                trials.push(
                    crate::support::trial("gpu::across_all_local_gpus", || Ok(()))
                        .with_ignored_flag(true),
                );
            }
            _ => trials.push(gpu("across_all_local_gpus", across_gpus)),
        }
        run(trials)
    }

    /// Small integers, exact in every element type.
    pub trait Val: NcclType + PartialEq {
        fn of(i: i64) -> Self;
    }
    macro_rules! val {
        ($t:ty, $e:expr) => {
            impl Val for $t {
                fn of(i: i64) -> Self {
                    let f: fn(i64) -> $t = $e;
                    f(i)
                }
            }
        };
    }
    val!(f32, |i| i as f32);
    val!(f64, |i| i as f64);
    val!(f16, |i| f16::from_f64(i as f64));
    val!(bf16, |i| bf16::from_f64(i as f64));
    val!(i8, |i| i as i8);
    val!(u8, |i| i as u8);
    val!(i32, |i| i as i32);
    val!(i64, |i| i);

    const POISON: i64 = 99;
    const N: usize = 257;

    fn one_rank() -> Result<(Device, Stream, Communicator), Error> {
        let dev = Device::new(0)?;
        let stream = dev.create_stream()?;
        // SAFETY: every other rank runs this same test code: the same calls in the same order.
        let comm = unsafe { Communicator::init_rank(&UniqueId::new()?, 0, 1) }?;
        Ok((dev, stream, comm))
    }

    fn input<T: Val>(n: usize) -> Vec<T> {
        (0..n).map(|i| T::of((i % 50) as i64 + 1)).collect()
    }

    /// `pad` poison elements, then the view, then `pad` poison.
    fn padded<T: Val>(inner: &[T], pad: usize) -> Vec<T> {
        let mut v = vec![T::of(POISON); pad];
        v.extend_from_slice(inner);
        v.extend(std::iter::repeat_n(T::of(POISON), pad));
        v
    }

    fn check<T: Val>(what: &str, got: &[T], want: &[T]) -> TestResult {
        crate::support::same_len(what, got, want)?;
        if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
            return Err(format!(
                "{what} ({}): element {i}: {:?}, want {:?}",
                T::NAME,
                got[i],
                want[i]
            )
            .into());
        }
        Ok(())
    }

    fn single_rank<T: Val>() -> TestResult {
        let (_dev, stream, comm) = one_rank()?;
        ensure!(
            comm.rank() == 0 && comm.size() == 1 && comm.device_ordinal() == 0,
            "{comm:?}"
        );
        let x = input::<T>(N);
        let send = DeviceBuffer::from_host(&x)?;
        let pad = 3;
        let poisoned = padded::<T>(&[T::of(POISON); N], pad);
        let want_padded = padded(&x, pad);
        let ops = [
            ReduceOp::Sum,
            ReduceOp::Prod,
            ReduceOp::Min,
            ReduceOp::Max,
            ReduceOp::Avg,
        ];

        for op in ops {
            // out of place, into a view inside a larger poisoned buffer
            let mut recv = DeviceBuffer::from_host(&poisoned)?;
            comm.all_reduce(&send, recv.slice_mut(pad..pad + N)?, op, &stream)?;
            stream.synchronize()?;
            check(&format!("all_reduce {op:?}"), &recv.to_vec()?, &want_padded)?;
            // in place
            let mut buf = DeviceBuffer::from_host(&want_padded)?;
            comm.all_reduce_in_place(buf.slice_mut(pad..pad + N)?, op, &stream)?;
            stream.synchronize()?;
            check(
                &format!("all_reduce_in_place {op:?}"),
                &buf.to_vec()?,
                &want_padded,
            )?;
            // reduce to root 0
            let mut recv = DeviceBuffer::from_host(&poisoned)?;
            comm.reduce(&send, recv.slice_mut(pad..pad + N)?, op, 0, &stream)?;
            stream.synchronize()?;
            check(&format!("reduce {op:?}"), &recv.to_vec()?, &want_padded)?;
            let mut buf = DeviceBuffer::from_host(&x)?;
            comm.reduce_in_place(&mut buf, op, 0, &stream)?;
            stream.synchronize()?;
            check(&format!("reduce_in_place {op:?}"), &buf.to_vec()?, &x)?;
            // reduce-scatter: 1 rank, the block is everything
            let mut recv = DeviceBuffer::from_host(&poisoned)?;
            comm.reduce_scatter(&send, recv.slice_mut(pad..pad + N)?, op, &stream)?;
            stream.synchronize()?;
            check(
                &format!("reduce_scatter {op:?}"),
                &recv.to_vec()?,
                &want_padded,
            )?;
            let mut buf = DeviceBuffer::from_host(&x)?;
            comm.reduce_scatter_in_place(&mut buf, op, &stream)?;
            stream.synchronize()?;
            check(
                &format!("reduce_scatter_in_place {op:?}"),
                &buf.to_vec()?,
                &x,
            )?;
        }
        // broadcast from root 0
        let mut recv = DeviceBuffer::from_host(&poisoned)?;
        comm.broadcast(&send, recv.slice_mut(pad..pad + N)?, 0, &stream)?;
        stream.synchronize()?;
        check("broadcast", &recv.to_vec()?, &want_padded)?;
        let mut buf = DeviceBuffer::from_host(&x)?;
        comm.broadcast_in_place(&mut buf, 0, &stream)?;
        stream.synchronize()?;
        check("broadcast_in_place", &buf.to_vec()?, &x)?;
        // all-gather
        let mut recv = DeviceBuffer::from_host(&poisoned)?;
        comm.all_gather(&send, recv.slice_mut(pad..pad + N)?, &stream)?;
        stream.synchronize()?;
        check("all_gather", &recv.to_vec()?, &want_padded)?;
        let mut buf = DeviceBuffer::from_host(&x)?;
        comm.all_gather_in_place(&mut buf, &stream)?;
        stream.synchronize()?;
        check("all_gather_in_place", &buf.to_vec()?, &x)?;
        ensure!(
            comm.async_error()?.is_none(),
            "async error after the collectives"
        );
        comm.destroy()?;
        Ok(())
    }

    fn groups() -> TestResult {
        let (_dev, stream, comm) = one_rank()?;
        let x = input::<f32>(1000);
        let a = DeviceBuffer::from_host(&x)?;
        let mut b = DeviceBuffer::from_host(&vec![-1.0f32; 1000])?;
        // Send to and receive from oneself: only possible inside a group.
        nccl::group(|g| {
            g.send(&comm, &a, 0, &stream)?;
            g.recv(&comm, &mut b, 0, &stream)?;
            ensure_calls(g.len(), 2)
        })?;
        stream.synchronize()?;
        check("self send/recv", &b.to_vec()?, &x)?;
        // Several collectives fused into one launch.
        let mut bufs: Vec<DeviceBuffer<f32>> = (0..4)
            .map(|k| DeviceBuffer::from_host(&vec![k as f32 + 0.5; 100 + k]))
            .collect::<Result<_, _>>()?;
        let mut gathered = DeviceBuffer::from_host(&vec![-1.0f32; 1000])?;
        nccl::group(|g| {
            for buf in bufs.iter_mut() {
                g.all_reduce_in_place(&comm, buf, ReduceOp::Sum, &stream)?;
            }
            g.all_gather(&comm, &a, &mut gathered, &stream)
        })?;
        stream.synchronize()?;
        for (k, buf) in bufs.iter().enumerate() {
            check(
                "fused all_reduce",
                &buf.to_vec()?,
                &vec![k as f32 + 0.5; 100 + k],
            )?;
        }
        check("fused all_gather", &gathered.to_vec()?, &x)?;
        // A checked error inside a group ends the group and is returned.
        // (Views handed to a group must outlive it, so it is made first.)
        let short = b.slice_mut(..999)?;
        let e = nccl::group(|g| g.all_gather(&comm, &a, short, &stream)).unwrap_err();
        ensure!(matches!(e, Error::Mismatch { .. }), "{e}");
        // The direct methods refuse to run inside a group: NCCL would read
        // the (possibly temporary) buffers only when the group ends.
        let e = nccl::group(|_| {
            let mut tmp = DeviceBuffer::from_host(&[1.0f32; 4])?;
            comm.all_reduce_in_place(&mut tmp, ReduceOp::Sum, &stream)
        })
        .unwrap_err();
        ensure!(matches!(e, Error::InGroup { .. }), "{e}");
        ensure!(comm.async_error()?.is_none(), "async error");
        Ok(())
    }

    fn ensure_calls(got: usize, want: usize) -> cudnn::Result<()> {
        if got == want {
            Ok(())
        } else {
            Err(Error::mismatch("queued calls", want, got))
        }
    }

    fn lifecycle() -> TestResult {
        let (_dev, stream, comm) = one_rank()?;
        ensure!(
            comm.async_error()?.is_none(),
            "fresh communicator has an async error"
        );
        let sub = comm
            .split(Some(7), 0)?
            .ok_or("split with a color gave no communicator")?;
        ensure!(sub.rank() == 0 && sub.size() == 1, "{sub:?}");
        let mut v = DeviceBuffer::from_host(&[1.0f32, 2.0, 3.0])?;
        sub.all_reduce_in_place(&mut v, ReduceOp::Sum, &stream)?;
        stream.synchronize()?;
        check("all_reduce on the split", &v.to_vec()?, &[1.0, 2.0, 3.0])?;
        ensure!(
            comm.split(None, 0)?.is_none(),
            "split without a color gave a communicator"
        );
        sub.finalize()?;
        // Abort with work done: returns promptly and cleanly.
        comm.all_reduce_in_place(&mut v, ReduceOp::Max, &stream)?;
        stream.synchronize()?;
        comm.abort()?;
        // A communicator dropped without destroy is cleaned up by Drop.
        let (_d, _s, c) = one_rank()?;
        drop(c);
        // init_all over one device.
        let comms = Communicator::init_all(&[Device::new(0)?])?;
        ensure!(comms.len() == 1 && comms[0].size() == 1, "{comms:?}");
        for c in comms {
            c.destroy()?;
        }
        Ok(())
    }

    fn misuse() -> TestResult {
        let (_dev, stream, comm) = one_rank()?;
        let a = DeviceBuffer::from_host(&[1i32, 2, 3, 4])?;
        let mut b = DeviceBuffer::<i32>::zeroed(3)?;
        let e = comm
            .all_reduce(&a, &mut b, ReduceOp::Sum, &stream)
            .unwrap_err();
        ensure!(
            matches!(e, Error::Mismatch { .. }) && e.to_string().contains("all_reduce"),
            "{e}"
        );
        let e = comm.all_gather(&a, &mut b, &stream).unwrap_err();
        ensure!(matches!(e, Error::Mismatch { .. }), "{e}");
        let e = comm
            .reduce_scatter(&a, &mut b, ReduceOp::Sum, &stream)
            .unwrap_err();
        ensure!(matches!(e, Error::Mismatch { .. }), "{e}");
        let mut c = DeviceBuffer::<i32>::zeroed(4)?;
        let e = comm.broadcast(&a, &mut c, 1, &stream).unwrap_err();
        ensure!(
            matches!(&e, Error::InvalidArgument { arg, .. } if arg == "root"),
            "{e}"
        );
        let e = comm
            .reduce(&a, &mut c, ReduceOp::Sum, 5, &stream)
            .unwrap_err();
        ensure!(
            matches!(&e, Error::InvalidArgument { arg, .. } if arg == "root"),
            "{e}"
        );
        let e = comm.send(&a, 1, &stream).unwrap_err();
        ensure!(
            matches!(&e, Error::InvalidArgument { arg, .. } if arg == "peer"),
            "{e}"
        );
        ensure!(
            comm.async_error()?.is_none(),
            "a checked error reached NCCL"
        );
        Ok(())
    }

    fn launch_single() -> TestResult {
        // No launcher variables in the test environment: one rank on GPU 0.
        if std::env::var_os("WORLD_SIZE").is_some() {
            eprintln!("note: WORLD_SIZE is set; init_from_env test not applicable");
            return Ok(());
        }
        // SAFETY: every other rank runs this same test code: the same calls in the same order.
        let job = unsafe { nccl::launch::init_from_env() }?;
        ensure!(job.comm.size() == 1 && job.device.ordinal() == 0, "{job:?}");
        let stream = job.device.create_stream()?;
        let mut v = DeviceBuffer::from_host(&[2.0f64; 8])?;
        job.comm
            .all_reduce_in_place(&mut v, ReduceOp::Avg, &stream)?;
        stream.synchronize()?;
        check("avg", &v.to_vec()?, &[2.0; 8])?;
        Ok(())
    }

    fn across_gpus() -> TestResult {
        let n = Device::count()?;
        if n < 2 {
            eprintln!(
                "note: gpu::across_all_local_gpus needs 2 or more GPUs, this machine has {n}: only the single-rank tests ran"
            );
            return Ok(());
        }
        let devices: Vec<Device> = (0..n).map(Device::new).collect::<Result<_, _>>()?;
        let comms = Communicator::init_all(&devices)?;
        let len = 1000;
        let mut streams = Vec::new();
        let mut bufs = Vec::new();
        let mut gathered = Vec::new();
        for (r, d) in devices.iter().enumerate() {
            d.set_current()?;
            streams.push(d.create_stream()?);
            bufs.push(DeviceBuffer::from_host(
                &(0..len).map(|i| (i + 10 * r) as f32).collect::<Vec<_>>(),
            )?);
            gathered.push(DeviceBuffer::<f32>::zeroed(len * n)?);
        }
        let originals: Vec<Vec<f32>> = (0..n)
            .map(|r| (0..len).map(|i| (i + 10 * r) as f32).collect())
            .collect();
        nccl::group(|g| {
            let per_rank = comms
                .iter()
                .zip(&bufs)
                .zip(gathered.iter_mut())
                .zip(&streams);
            for (((c, src), dst), s) in per_rank {
                g.all_gather(c, src, dst, s)?;
            }
            Ok(())
        })?;
        nccl::group(|g| {
            for (r, b) in bufs.iter_mut().enumerate() {
                g.all_reduce_in_place(&comms[r], b, ReduceOp::Sum, &streams[r])?;
            }
            Ok(())
        })?;
        let want: Vec<f32> = (0..len)
            .map(|i| (0..n).map(|r| (i + 10 * r) as f32).sum())
            .collect();
        let want_gather: Vec<f32> = originals.concat();
        for r in 0..n {
            streams[r].synchronize()?;
            check(
                &format!("all_reduce sum on rank {r}"),
                &bufs[r].to_vec()?,
                &want,
            )?;
            check(
                &format!("all_gather on rank {r}"),
                &gathered[r].to_vec()?,
                &want_gather,
            )?;
        }
        Ok(())
    }
}
