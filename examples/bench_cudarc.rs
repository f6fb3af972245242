//! `cargo run --release -p cudnn-examples --features cudarc --example
//! bench_cudarc [-- --rounds N]`: the per-call host overhead of handing
//! cudarc memory to this crate, against the crate's own buffers.
//!
//! Rows (ns per call, median of `--rounds`, default 15, timed rounds of
//! about 20 ms each):
//! - view: the `DeviceSlice` an op takes, from a crate `DeviceBuffer`
//!   (`DeviceTensor::new`, which also checks the length) against the same
//!   from a cudarc slice through a `CudarcStream::read` / `write` guard
//!   (cudarc's `device_ptr`: a `cuStreamWaitEvent` on its last write when
//!   several streams are in use, and a `cuEventRecord` when the guard drops);
//! - op: a ReLU over 256 floats enqueued through each path (host time per
//!   call, enqueue only).
//!
//! The cudarc rows run twice: on cudarc's default stream alone (cudarc is
//! not in multi-stream mode, its guards neither wait nor record), then with
//! a second cudarc stream alive (event tracking active: every guard waits
//! on the slice's last write and records an event when dropped).
//!
//! Without a GPU only the crate-side view row is measured (a cudarc slice
//! needs a device); the others are reported as not run.

use std::hint::black_box;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use cudnn::dnn::{
    ActivationDescriptor, ActivationMode, DeviceTensor, DeviceTensorMut, Handle, NanPropagation,
    TensorDescriptor,
};
use cudnn::interop::{self, CudarcStream};
use cudnn::runtime::{Device, DeviceBuffer, DeviceSlice, Stream};

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Median ns per call of `f` over `rounds` rounds of about 20 ms.
fn time(rounds: usize, mut f: impl FnMut() -> AnyResult<()>) -> AnyResult<f64> {
    // Calibrate the calls per round.
    let mut n = 1usize;
    loop {
        let t = Instant::now();
        for _ in 0..n {
            f()?;
        }
        if t.elapsed() >= Duration::from_millis(5) || n >= 1 << 24 {
            break;
        }
        n *= 2;
    }
    let n = n.saturating_mul(4);
    let mut per = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..n {
            f()?;
        }
        per.push(t.elapsed().as_secs_f64() * 1e9 / n as f64);
    }
    per.sort_by(f64::total_cmp);
    Ok(per[per.len() / 2])
}

fn row(what: &str, ns: Option<f64>, note: &str) {
    match ns {
        Some(v) => println!("| {what} | {v:.0} | {note} |"),
        None => println!("| {what} | not run | {note} |"),
    }
}

fn run(rounds: usize) -> AnyResult<()> {
    let d = TensorDescriptor::<f32>::nchw(1, 1, 16, 16)?;
    println!("| per call (host) | ns | notes |");
    println!("|---|---:|---|");
    let gpu = matches!(Device::count(), Ok(n) if n > 0);
    if !gpu {
        // The crate side of the view on memory it does not own (what the
        // guard builds), with no device: pure host work.
        let fake = std::ptr::NonNull::<f32>::dangling().as_ptr();
        let ns = time(rounds, || {
            // SAFETY: the view is only checked against the descriptor, never
            // passed to a library or dereferenced.
            let v = unsafe { DeviceSlice::from_raw_parts(fake, 256) };
            black_box(DeviceTensor::new(&d, v)?);
            Ok(())
        })?;
        row(
            "view: DeviceSlice + DeviceTensor::new (no device)",
            Some(ns),
            "crate side of every guard",
        );
        let why = match interop::context(0) {
            Ok(_) => "no device for the CUDA runtime".to_string(),
            Err(e) => e.to_string(),
        };
        for r in [
            "view: crate DeviceBuffer",
            "op relu 256: crate buffers",
            "view: cudarc read guard (tracking idle, then on)",
            "view: cudarc write guard (tracking idle, then on)",
            "op relu 256: cudarc guards (tracking idle, then on)",
        ] {
            row(r, None, "no device");
        }
        println!("\n(no device: {why})");
        return Ok(());
    }
    let ctx = interop::context(0)?;
    // cudarc's default stream first: no stream made with `new_stream`, so
    // cudarc is not in multi-stream mode and its guards neither wait nor
    // record; a second stream then turns its event tracking on.
    let cs = ctx.default_stream();
    let s = CudarcStream::new(&cs)?;
    let de = |call: &'static str| move |e| interop::driver_error(call, e);
    let x = cs.clone_htod(&vec![1.0f32; 256]).map_err(de("htod"))?;
    let mut y = cs.alloc_zeros::<f32>(256).map_err(de("alloc"))?;
    let xb = DeviceBuffer::from_host(&vec![1.0f32; 256])?;
    let mut yb = DeviceBuffer::<f32>::zeroed(256)?;
    let v = time(rounds, || {
        black_box(DeviceTensor::new(&d, &xb)?);
        Ok(())
    })?;
    row("view: crate DeviceBuffer", Some(v), "DeviceTensor::new");
    let act = ActivationDescriptor::new(ActivationMode::Relu, NanPropagation::Propagate)?;
    let own = Stream::new()?;
    let mut h_own = Handle::new(&own)?;
    let op_own = time(rounds, || {
        h_own.activation_forward(
            &act,
            1.0,
            DeviceTensor::new(&d, &xb)?,
            0.0,
            DeviceTensorMut::new(&d, &mut yb)?,
        )?;
        Ok(())
    })?;
    own.synchronize()?;
    row("op relu 256: crate buffers", Some(op_own), "enqueue only");
    let mut h = Handle::new(&s)?;
    let mut second = None;
    for tracking in [false, true] {
        if tracking {
            second = Some(ctx.new_stream().map_err(de("new_stream"))?);
        }
        let mode = if ctx.is_managing_stream_synchronization() {
            "event tracking on (2 cudarc streams)"
        } else {
            "event tracking idle (1 cudarc stream)"
        };
        let r = time(rounds, || {
            // SAFETY: the view is only checked against a descriptor; the guard drops at the closure's end.
            let g = unsafe { s.read(&x)? };
            black_box(DeviceTensor::new(&d, &g)?);
            Ok(())
        })?;
        row("view: cudarc read guard", Some(r), mode);
        let w = time(rounds, || {
            // SAFETY: as above.
            let mut g = unsafe { s.write(&mut y)? };
            black_box(DeviceTensorMut::new(&d, &mut g)?);
            Ok(())
        })?;
        row("view: cudarc write guard", Some(w), mode);
        let op = time(rounds, || {
            // SAFETY: the views go to `h` (bound to `s`) only; the guards drop at the closure's end.
            let (xr, mut yw) = unsafe { (s.read(&x)?, s.write(&mut y)?) };
            h.activation_forward(
                &act,
                1.0,
                DeviceTensor::new(&d, &xr)?,
                0.0,
                DeviceTensorMut::new(&d, &mut yw)?,
            )?;
            Ok(())
        })?;
        cs.synchronize().map_err(de("synchronize"))?;
        row("op relu 256: cudarc guards", Some(op), mode);
        // The safe lend: two host waits per lend and one for the device.
        let scoped = time(rounds, || {
            s.scope(|sc| {
                let (xv, yv) = (sc.read(&x)?, sc.write(&mut y)?);
                h.activation_forward(
                    &act,
                    1.0,
                    DeviceTensor::new(&d, xv)?,
                    0.0,
                    DeviceTensorMut::new(&d, yv)?,
                )
            })?;
            Ok(())
        })?;
        row("op relu 256: cudarc scope (host waits)", Some(scoped), mode);
    }
    drop(second);
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let rounds = args
        .iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .filter(|&r: &usize| r > 0)
        .unwrap_or(15);
    match run(rounds) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench_cudarc: {e}");
            ExitCode::FAILURE
        }
    }
}
