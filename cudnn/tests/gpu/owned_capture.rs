//! Owned captures of a cudarc stream on a real device (gpu tier; skipped
//! visibly without one): the crate's op and cudarc's own work recorded in
//! one graph of cudarc's stream and replayed with new inputs, each replay
//! against the host's ReLU (the independent truth); the graph dropped right
//! after a launch; the refusals (another thread's call during the capture,
//! a host synchronization inside it, a launch inside another capture, a
//! capture that cudarc ended itself, a context where cudarc tracks events)
//! are typed; a graph dropped inside another capture of its stream leaks
//! what it kept.

use crate::support;

use std::sync::Arc;

use cudnn::dnn::{
    ActivationDescriptor, ActivationMode, DeviceTensor, DeviceTensorMut, Handle, NanPropagation,
    TensorDescriptor,
};
use cudnn::interop::cudarc::driver::{CudaContext, CudaStream, DriverError};
use cudnn::interop::{self, CudarcStream};
use cudnn::runtime::{CaptureMode, DeviceBuffer};
use cudnn::{Error, Result};
use support::*;

pub fn main() {
    run(vec![
        gpu(
            "owned_capture_replays_the_crate_op_and_cudarc_work",
            replays,
        ),
        gpu("owned_capture_drop_right_after_a_launch", drop_after_launch),
        gpu("owned_capture_refusals_are_typed", refusals),
        gpu(
            "owned_capture_refused_where_cudarc_tracks_events",
            refused_with_tracking,
        ),
        gpu(
            "owned_graph_dropped_inside_a_capture_leaks_what_it_kept",
            dropped_inside_a_capture,
        ),
    ])
}

fn de(call: &'static str) -> impl Fn(DriverError) -> Error {
    move |e| interop::driver_error(call, e)
}

/// A context of this test alone (`interop::context` makes a new cudarc
/// context each call) with cudarc's event tracking off, then a stream of
/// it: cudarc orders no slice with events, as `begin_owned_capture`
/// requires (with tracking on, one `new_stream` is enough for cudarc to
/// record and wait on events whenever a slice is used).
fn ctx_and_stream() -> Result<(Arc<CudaContext>, Arc<CudaStream>)> {
    let ctx = interop::context(0)?;
    // SAFETY: every cudarc slice of this context is made after this call
    // and used on the one stream made below only (the crate's buffers are
    // not cudarc's), so no use needs ordering across streams.
    unsafe { ctx.disable_event_tracking() };
    let cs = ctx.new_stream().map_err(de("new_stream"))?;
    Ok((ctx, cs))
}

fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

const N: usize = 1024;

/// The crate's ReLU (x -> y, crate memory) on a handle bound to cudarc's
/// stream, and cudarc's memset of a cudarc slice, in one owned capture;
/// the handle is kept by the graph (the test drops its own binding).
fn captured(
    s: &CudarcStream,
    x: &DeviceBuffer<f32>,
    y: &mut DeviceBuffer<f32>,
    z: &mut cudnn::interop::cudarc::driver::CudaSlice<f32>,
) -> std::result::Result<cudnn::interop::OwnedGraph, Box<dyn std::error::Error>> {
    let d = TensorDescriptor::<f32>::nchw(1, 1, 32, 32)?;
    let act = ActivationDescriptor::new(ActivationMode::Relu, NanPropagation::Propagate)?;
    let mut h = Handle::new(s)?;
    // Once eagerly (nothing to size for ReLU, but the rule is the rule).
    h.activation_forward(
        &act,
        1.0,
        DeviceTensor::new(&d, x)?,
        0.0,
        DeviceTensorMut::new(&d, &mut *y)?,
    )?;
    // SAFETY: only `end` below ends the capture; no other thread uses the
    // stream; nothing is allocated on it during the capture.
    let mut cap = unsafe { s.begin_owned_capture(CaptureMode::ThreadLocal)? };
    h.activation_forward(
        &act,
        1.0,
        DeviceTensor::new(&d, x)?,
        0.0,
        DeviceTensorMut::new(&d, y)?,
    )?;
    // z is untracked (the context's tracking is off): cudarc records no
    // event for this use inside the capture.
    s.cudarc().memset_zeros(z).map_err(de("memset"))?;
    cap.keep(h);
    Ok(cap.end()?)
}

fn replays() -> TestResult {
    let (_ctx, cs) = ctx_and_stream()?;
    let s = CudarcStream::new(&cs)?;
    let mut x = DeviceBuffer::from_host(&values(N, 1))?;
    let mut y = DeviceBuffer::from_host(&vec![f32::NAN; N])?;
    let mut z = cs.clone_htod(&vec![7.0f32; N]).map_err(de("htod"))?;
    let mut g = captured(&s, &x, &mut y, &mut z)?;
    for i in 0..5u64 {
        let xs = values(N, 10 + i);
        x.copy_from_host(&xs)?; // synchronous: before the launch below
        cs.memcpy_htod(&vec![7.0f32; N], &mut z)
            .map_err(de("htod"))?;
        // SAFETY: x, y and z are alive and used only on this stream (or
        // synchronously, before the launch); the handle is kept.
        unsafe { g.launch()? };
        cs.synchronize().map_err(de("synchronize"))?;
        let want: Vec<f32> = xs.iter().map(|v| v.max(0.0)).collect();
        ensure!(
            y.to_vec()? == want,
            "replay {i}: y is the host's ReLU of the new x"
        );
        let zs = cs.clone_dtoh(&z).map_err(de("dtoh"))?;
        ensure!(
            zs.iter().all(|&v| v == 0.0),
            "replay {i}: cudarc's memset replayed"
        );
    }
    ensure!(g.launched() == 5, "{g:?}");
    Ok(())
}

fn drop_after_launch() -> TestResult {
    let (_ctx, cs) = ctx_and_stream()?;
    let s = CudarcStream::new(&cs)?;
    let xs = values(N, 3);
    let x = DeviceBuffer::from_host(&xs)?;
    let mut y = DeviceBuffer::from_host(&vec![f32::NAN; N])?;
    let mut z = cs.clone_htod(&vec![7.0f32; N]).map_err(de("htod"))?;
    let mut g = captured(&s, &x, &mut y, &mut z)?;
    y.copy_from_host(&vec![f32::NAN; N])?;
    // SAFETY: as in `replays`.
    unsafe { g.launch()? };
    // Dropped while the launch may still run: its drop waits for it
    // before the handle (its workspace) is destroyed.
    drop(g);
    cs.synchronize().map_err(de("synchronize"))?;
    let want: Vec<f32> = xs.iter().map(|v| v.max(0.0)).collect();
    ensure!(y.to_vec()? == want, "y after the graph dropped");
    Ok(())
}

fn refusals() -> TestResult {
    use interop::cudarc::driver::sys::CUgraphInstantiate_flags;
    let (_ctx, cs) = ctx_and_stream()?;
    let s = CudarcStream::new(&cs)?;
    let d = TensorDescriptor::<f32>::nchw(1, 1, 32, 32)?;
    let act = ActivationDescriptor::new(ActivationMode::Relu, NanPropagation::Propagate)?;
    let x = DeviceBuffer::from_host(&values(N, 5))?;
    let mut y = DeviceBuffer::from_host(&vec![f32::NAN; N])?;
    let mut z = cs.clone_htod(&vec![7.0f32; N]).map_err(de("htod"))?;
    let mut g = captured(&s, &x, &mut y, &mut z)?;
    let mut h = Handle::new(&s)?;
    // Another value wrapping the same stream, its handle made before the
    // capture, used from another thread during it.
    let s2 = CudarcStream::new(&cs)?;
    let mut h2 = Handle::new(&s2)?;
    let mut y2 = DeviceBuffer::from_host(&vec![0f32; N])?;
    // SAFETY: only `end` ends it (below); the other thread's call is
    // refused before it queues anything.
    let cap = unsafe { s.begin_owned_capture(CaptureMode::ThreadLocal)? };
    let other = std::thread::scope(|t| {
        t.spawn(|| -> Result<()> {
            let d = TensorDescriptor::<f32>::nchw(1, 1, 32, 32)?;
            let act = ActivationDescriptor::new(ActivationMode::Relu, NanPropagation::Propagate)?;
            h2.activation_forward(
                &act,
                1.0,
                DeviceTensor::new(&d, &x)?,
                0.0,
                DeviceTensorMut::new(&d, &mut y2)?,
            )
        })
        .join()
    });
    // A host synchronization inside: refused. A launch inside: refused.
    let sync = s.synchronize();
    // SAFETY: refused before anything is queued.
    let nested = unsafe { g.launch() };
    let h_new = Handle::new(&s).map(|_| ());
    drop(cap.end()?);
    let want = cudnn::runtime::Hazard::OtherThreadsCapture.what();
    ensure!(
        matches!(&other, Ok(Err(Error::CaptureUnsafe { hazard, .. })) if *hazard == want),
        "another thread's call: {other:?}"
    );
    ensure!(
        matches!(sync, Err(Error::CaptureUnsafe { .. })),
        "a synchronize inside: {sync:?}"
    );
    ensure!(
        matches!(nested, Err(Error::CaptureUnsafe { .. })),
        "a launch inside: {nested:?}"
    );
    ensure!(
        matches!(h_new, Err(Error::CaptureUnsafe { .. })),
        "a handle created inside: {h_new:?}"
    );
    // A capture cudarc ends itself: `end` refuses it (typed) and leaks
    // what it kept; cudarc's graph holds the crate's op, so it is dropped
    // here without a launch.
    // SAFETY: this test breaks the contract on purpose to see the check;
    // cudarc's graph is never launched.
    let mut cap = unsafe { s.begin_owned_capture(CaptureMode::ThreadLocal)? };
    h.activation_forward(
        &act,
        1.0,
        DeviceTensor::new(&d, &x)?,
        0.0,
        DeviceTensorMut::new(&d, &mut y)?,
    )?;
    let theirs = cs
        .end_capture(CUgraphInstantiate_flags(0))
        .map_err(de("end_capture"))?;
    cap.keep(h);
    let r = cap.end();
    ensure!(
        matches!(r, Err(Error::Unsupported { .. })),
        "a capture cudarc ended: {r:?}"
    );
    drop(theirs);
    // After all this, the stream takes the crate's work again.
    let mut h = Handle::new(&s)?;
    h.activation_forward(
        &act,
        1.0,
        DeviceTensor::new(&d, &x)?,
        0.0,
        DeviceTensorMut::new(&d, &mut y)?,
    )?;
    cs.synchronize().map_err(de("synchronize"))?;
    Ok(())
}

/// cudarc's default (tracking on) with one `new_stream`: cudarc records
/// and waits on events of the stream at every slice use
/// (`is_managing_stream_synchronization`, cudarc 0.19.10), which a capture
/// would record and never order; the beginning is refused, typed, naming
/// the stream, before anything is captured.
fn refused_with_tracking() -> TestResult {
    let ctx = interop::context(0)?;
    ensure!(ctx.is_event_tracking(), "cudarc's default is tracking on");
    let cs = ctx.new_stream().map_err(de("new_stream"))?;
    ensure!(ctx.is_managing_stream_synchronization(), "one new_stream");
    let s = CudarcStream::new(&cs)?;
    // SAFETY: refused before anything begins (checked below).
    let r = unsafe { s.begin_owned_capture(CaptureMode::ThreadLocal) };
    ensure!(
        matches!(&r, Err(Error::InvalidArgument { arg, .. }) if arg == "stream"),
        "tracking on: {r:?}"
    );
    ensure!(
        !s.stream().capture_status()?.is_capturing(),
        "nothing began"
    );
    Ok(())
}

/// A graph dropped inside another owned capture of its stream: what it
/// keeps is leaked, not dropped (its frees would be recorded into the new
/// graph and replayed by each of its launches); the new capture ends and
/// replays right (the host's ReLU).
fn dropped_inside_a_capture() -> TestResult {
    let (_ctx, cs) = ctx_and_stream()?;
    let s = CudarcStream::new(&cs)?;
    let xs = values(N, 7);
    let x = DeviceBuffer::from_host(&xs)?;
    let mut y = DeviceBuffer::from_host(&vec![f32::NAN; N])?;
    let mut z = cs.clone_htod(&vec![7.0f32; N]).map_err(de("htod"))?;
    let mut g = captured(&s, &x, &mut y, &mut z)?;
    let marker = Arc::new(());
    g.keep(marker.clone());
    // SAFETY: as in `replays`.
    unsafe { g.launch()? };
    let d = TensorDescriptor::<f32>::nchw(1, 1, 32, 32)?;
    let act = ActivationDescriptor::new(ActivationMode::Relu, NanPropagation::Propagate)?;
    let mut h = Handle::new(&s)?;
    let mut y2 = DeviceBuffer::from_host(&vec![f32::NAN; N])?;
    // SAFETY: only `end` ends it; no other thread uses the stream.
    let mut cap = unsafe { s.begin_owned_capture(CaptureMode::ThreadLocal)? };
    drop(g);
    ensure!(
        Arc::strong_count(&marker) == 2,
        "what the graph kept is leaked, not dropped, inside a capture"
    );
    h.activation_forward(
        &act,
        1.0,
        DeviceTensor::new(&d, &x)?,
        0.0,
        DeviceTensorMut::new(&d, &mut y2)?,
    )?;
    cap.keep(h);
    let mut g2 = cap.end()?;
    // SAFETY: x and y2 are alive, used on this stream only.
    unsafe { g2.launch()? };
    cs.synchronize().map_err(de("synchronize"))?;
    let want: Vec<f32> = xs.iter().map(|v| v.max(0.0)).collect();
    ensure!(
        y2.to_vec()? == want,
        "the new graph's y2 is the host's ReLU"
    );
    ensure!(y.to_vec()? == want, "the dropped graph's launch ran");
    Ok(())
}
