//! `cargo run --release --example bench_nccl [-- --max-bytes N] [--dtype f32|bf16] [--all-local]`:
//! all-reduce (sum) bus bandwidth over message sizes 1 KiB to 1 GiB
//! (doubling), out of place and in place, the way nccl-tests reports it:
//!
//! - `time`: wall-clock per call, averaged over a timed loop after a
//!   warm-up (the loop ends with every stream synchronized);
//! - `algbw = bytes / time`;
//! - `busbw = algbw * 2 (n - 1) / n` for `n` ranks: the bandwidth each link
//!   must carry in a ring all-reduce, comparable across rank counts.
//!
//! Ranks: by default the launch convention of `cudnn::nccl::launch` (one
//! process per GPU; with no variables set, one rank on GPU 0); with
//! `--all-local`, one process drives every GPU of the machine
//! (`Communicator::init_all` and group calls). With a single rank, busbw is
//! 0 by definition: the table says so, and algbw is then the rate of the
//! local reduction-copy alone. Each size is checked once (every element of
//! the result must equal the number of ranks, the inputs being ones).
//!
//! Not a test: numbers depend on the machine. Exit status 1 when NCCL, the
//! CUDA runtime or a device is missing (with a message), or a check fails.

use std::process::ExitCode;
use std::time::Instant;

use cudnn::nccl::{self, Communicator, NcclType, ReduceOp};
use cudnn::runtime::{Device, DeviceBuffer, Stream};
use half::bf16;

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

struct Rank {
    comm: Communicator,
    stream: Stream,
}

/// The ranks this process drives, and the total number of ranks.
fn ranks(all_local: bool) -> AnyResult<(Vec<Rank>, usize, bool)> {
    if all_local {
        let n = Device::count()?;
        let devices: Vec<Device> = (0..n).map(Device::new).collect::<Result<_, _>>()?;
        let comms = Communicator::init_all(&devices)?;
        let mut out = Vec::new();
        for (d, comm) in devices.iter().zip(comms) {
            d.set_current()?;
            out.push(Rank {
                comm,
                stream: d.create_stream()?,
            });
        }
        Ok((out, n, true))
    } else {
        // SAFETY: every rank runs this program, which makes the same calls
        // in the same order with the same sizes.
        let job = unsafe { nccl::launch::init_from_env() }?;
        let stream = job.device.create_stream()?;
        let n = job.comm.size();
        let lead = job.comm.rank() == 0;
        Ok((
            vec![Rank {
                comm: job.comm,
                stream,
            }],
            n,
            lead,
        ))
    }
}

trait FromF32 {
    fn from_f32(v: f32) -> Self;
    fn to_f64(self) -> f64;
}
impl FromF32 for f32 {
    fn from_f32(v: f32) -> Self {
        v
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
}
impl FromF32 for bf16 {
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
}

fn bench<T: NcclType + FromF32>(
    ranks: &mut [Rank],
    world: usize,
    lead: bool,
    max_bytes: usize,
) -> AnyResult<bool> {
    let factor = 2.0 * (world as f64 - 1.0) / world as f64;
    if lead {
        println!(
            "all_reduce sum, {}, {world} rank(s){}",
            T::NAME,
            if world == 1 {
                " (single rank: busbw = algbw * 2(n-1)/n is 0 by definition; algbw is the local reduction-copy rate)"
            } else {
                ""
            }
        );
        println!(
            "\n| bytes | elements | out-of-place time (us) | algbw (GB/s) | busbw (GB/s) | in-place time (us) | algbw (GB/s) | busbw (GB/s) |"
        );
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    }
    let mut ok = true;
    let mut bytes = 1024usize;
    while bytes <= max_bytes {
        let count = bytes / T::SIZE;
        let mut bufs = Vec::new();
        for r in ranks.iter() {
            Device::new(r.comm.device_ordinal())?;
            let send = DeviceBuffer::from_host(&vec![T::from_f32(1.0); count])?;
            let recv = DeviceBuffer::<T>::zeroed(count)?;
            bufs.push((send, recv));
        }
        // Check once: every element is the number of ranks. Each rank's
        // stream is synchronized before its results are read (the copies
        // below are not ordered after another device's stream).
        run_once(ranks, &mut bufs, false)?;
        sync(ranks)?;
        for (i, (_, recv)) in bufs.iter().enumerate() {
            let got = recv.to_vec()?;
            if let Some(bad) = got.iter().position(|&v| v.to_f64() != world as f64) {
                eprintln!(
                    "bench_nccl: local rank {i}: {bytes} bytes: element {bad} is {}, expected {world}",
                    got[bad].to_f64()
                );
                ok = false;
            }
        }
        let iters = (200usize).min((4usize << 30) / bytes).max(5);
        let mut row = vec![bytes as f64, count as f64];
        for in_place in [false, true] {
            for _ in 0..3 {
                run_once(ranks, &mut bufs, in_place)?;
            }
            sync(ranks)?;
            let t = Instant::now();
            for _ in 0..iters {
                run_once(ranks, &mut bufs, in_place)?;
            }
            sync(ranks)?;
            let mut secs = t.elapsed().as_secs_f64() / iters as f64;
            if let [r0] = &ranks[..] {
                // One rank per process: report the slowest rank's time, as
                // nccl-tests does. (With every rank in this process the
                // loop above already waited for all of them.)
                let mut tb = DeviceBuffer::from_host(&[secs])?;
                r0.comm
                    .all_reduce_in_place(&mut tb, ReduceOp::Max, &r0.stream)?;
                r0.stream.synchronize()?;
                secs = tb.to_vec()?[0];
            }
            let algbw = bytes as f64 / secs / 1e9;
            row.extend([secs * 1e6, algbw, algbw * factor]);
        }
        if lead {
            println!(
                "| {} | {} | {:.1} | {:.2} | {:.2} | {:.1} | {:.2} | {:.2} |",
                row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7]
            );
        }
        bytes *= 2;
    }
    Ok(ok)
}

fn run_once<T: NcclType>(
    ranks: &[Rank],
    bufs: &mut [(DeviceBuffer<T>, DeviceBuffer<T>)],
    in_place: bool,
) -> cudnn::Result<()> {
    nccl::group(|g| {
        for (r, (send, recv)) in ranks.iter().zip(bufs.iter_mut()) {
            if in_place {
                g.all_reduce_in_place(&r.comm, recv, ReduceOp::Sum, &r.stream)?;
            } else {
                g.all_reduce(&r.comm, &*send, recv, ReduceOp::Sum, &r.stream)?;
            }
        }
        Ok(())
    })
}

fn sync(ranks: &[Rank]) -> cudnn::Result<()> {
    for r in ranks {
        r.stream.synchronize()?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut max_bytes = 1usize << 30;
    let mut all_local = false;
    let mut dtype = "f32".to_string();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--max-bytes" => match it.next().and_then(|v| v.parse().ok()) {
                Some(v) if v >= 1024 => max_bytes = v,
                _ => {
                    eprintln!("bench_nccl: --max-bytes takes a number >= 1024");
                    return ExitCode::FAILURE;
                }
            },
            "--dtype" => match it.next().map(String::as_str) {
                Some(d @ ("f32" | "bf16")) => dtype = d.to_string(),
                other => {
                    eprintln!("bench_nccl: --dtype takes f32 or bf16, got {other:?}");
                    return ExitCode::FAILURE;
                }
            },
            "--all-local" => all_local = true,
            other => {
                eprintln!(
                    "usage: bench_nccl [--max-bytes N] [--dtype f32|bf16] [--all-local] (unknown `{other}`)"
                );
                return ExitCode::FAILURE;
            }
        }
    }
    if let Err(e) = nccl::version() {
        eprintln!("bench_nccl: cannot run: the NCCL library could not be loaded:\n{e}");
        return ExitCode::FAILURE;
    }
    match Device::count() {
        Ok(n) if n > 0 => {}
        Ok(_) => {
            eprintln!("bench_nccl: cannot run: no CUDA device (cudaGetDeviceCount reported 0)");
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("bench_nccl: cannot run: {e}");
            return ExitCode::FAILURE;
        }
    }
    let result = ranks(all_local).and_then(|(mut ranks, world, lead)| {
        if lead && let Ok(v) = nccl::version() {
            println!(
                "bench_nccl: NCCL {v}, {world} rank(s), {} driven by this process",
                ranks.len()
            );
        }
        let ok = match dtype.as_str() {
            "bf16" => bench::<bf16>(&mut ranks, world, lead, max_bytes)?,
            _ => bench::<f32>(&mut ranks, world, lead, max_bytes)?,
        };
        // Every stream was synchronized: destroy in order (dropping would
        // abort, see `Communicator`'s Drop policy).
        for r in ranks {
            r.comm.destroy()?;
        }
        Ok(ok)
    });
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("bench_nccl: failed: {e}");
            ExitCode::FAILURE
        }
    }
}
