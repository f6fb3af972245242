//! The cudarc interop on a real device (gpu tier; skipped visibly without
//! one, a failure under `CUDNN_RS_REQUIRE_GPU=1`): the same op through
//! cudarc memory and through the crate's own memory gives identical
//! results; cudarc's event tracking orders the crate's work across two
//! cudarc streams; the stream and context are cudarc's.

use crate::support;

use std::sync::Arc;

use cudnn::blas::{self, ComputeType, Layout, Matrix, MatrixMut};
use cudnn::dnn::{
    ActivationDescriptor, ActivationMode, DeviceTensor, DeviceTensorMut, Handle, NanPropagation,
    TensorDescriptor,
};
use cudnn::graph::{ConvParams, DType, Graph, Plan, Policy, Target, TensorSpec};
use cudnn::interop::cudarc::driver::{CudaContext, CudaStream, DriverError};
use cudnn::interop::{self, CudarcStream};
use cudnn::reference::conv as refc;
use cudnn::runtime::{Device, DeviceBuffer, Stream};
use cudnn::{Error, Result};
use half::f16;
use support::*;

pub fn main() {
    run(vec![
        gpu("cudarc_context_is_the_runtime_context", context_is_shared),
        gpu("cudarc_relu_same_as_crate_memory", relu_same),
        gpu("cudarc_gemm_same_as_crate_memory", gemm_same),
        gpu(
            "cudarc_graph_conv_bias_relu_same_as_crate_memory",
            graph_same,
        ),
        gpu("cudarc_two_streams_event_tracking", two_streams),
        gpu("cudarc_short_slice_is_a_typed_error", short_slice),
        gpu("cudarc_handle_keeps_the_stream_alive", handle_keeps_stream),
        gpu("cudarc_fuzz_sub_views", fuzz_sub_views),
        gpu("cudarc_scope_views_on_another_stream", scope_any_stream),
        gpu_if_refused(
            "cudarc_scope_waits_out_another_threads_capture",
            scope_waits_out_another_threads_capture,
        ),
        gpu(
            "cudarc_lend_inside_a_capture_closure_is_refused_at_once",
            lend_inside_capture_closure,
        ),
        gpu("cudarc_capture_refusals", cudarc_capture_refusals),
        gpu(
            "cudarc_capture_of_the_per_thread_stream_refuses_the_crate",
            per_thread_stream_shared_with_cudarc,
        ),
        #[cfg(feature = "nccl")]
        gpu("cudarc_nccl_all_reduce_one_rank", nccl_all_reduce),
        two_gpus(
            "cudarc_slice_of_another_device_is_refused",
            other_device_refused,
        ),
    ])
}

/// A trial that needs the driver to refuse the scope's wait
/// (`cuCtxSynchronize` with the thread's capture mode relaxed) while
/// another thread captures a cudarc stream in global mode: probed before
/// the run; where the driver does not refuse, there is nothing to wait out,
/// and the trial is reported as ignored with the reason, never as passed.
fn gpu_if_refused(name: &str, f: fn() -> TestResult) -> libtest_mimic::Trial {
    if has_gpu() {
        match relaxed_wait_refused_during_capture() {
            Ok(true) => {}
            Ok(false) => {
                eprintln!(
                    "skipped: gpu::{name}: this driver does not refuse cuCtxSynchronize in \
                     relaxed capture mode while another thread captures (nothing to wait out)"
                );
                return crate::support::trial(format!("gpu::{name}"), f).with_ignored_flag(true);
            }
            Err(e) => {
                let msg = format!("probing whether the driver refuses the wait: {e}");
                return crate::support::trial(format!("gpu::{name}"), move || Err(msg.into()));
            }
        }
    }
    gpu(name, f)
}

/// The probe: another thread holds a global-mode capture of a cudarc
/// stream open while this thread, in relaxed mode, calls
/// `cuCtxSynchronize`; whether the driver refused it.
fn relaxed_wait_refused_during_capture() -> Result<bool> {
    use interop::cudarc::driver::result;
    use interop::cudarc::driver::sys::{
        self, CUgraphInstantiate_flags, CUresult, CUstreamCaptureMode,
    };
    use std::sync::Barrier;
    let (ctx, _cs) = ctx_and_stream()?;
    let cap = ctx.new_stream().map_err(de("new_stream"))?;
    let (open, close) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
    let (o2, c2) = (open.clone(), close.clone());
    let t = std::thread::spawn(move || {
        let began = cap.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL);
        o2.wait();
        c2.wait();
        if began.is_ok() {
            let _ = cap.end_capture(CUgraphInstantiate_flags(0));
        }
        began.is_ok()
    });
    open.wait();
    ctx.bind_to_thread().map_err(de("bind_to_thread"))?;
    let mut mode = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
    // SAFETY: a valid in/out pointer; the previous mode is restored below.
    let exchanged = unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) };
    let r = result::ctx::synchronize();
    if exchanged == CUresult::CUDA_SUCCESS {
        // SAFETY: as above; restores this thread's mode.
        unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) };
    }
    close.wait();
    let began = t
        .join()
        .map_err(|_| Error::invalid("probe", "must not panic", "panicked"))?;
    if !began {
        return Err(Error::invalid(
            "probe",
            "the capture must begin",
            "it did not",
        ));
    }
    Ok(r.is_err())
}

/// A gpu-tier test that needs two devices: skipped visibly with fewer.
fn two_gpus(name: &str, f: fn() -> TestResult) -> libtest_mimic::Trial {
    match Device::count() {
        Ok(n) if n >= 2 => gpu(name, f),
        n => {
            eprintln!("skipped: gpu::{name}: needs 2 or more GPUs ({n:?})");
            crate::support::trial(format!("gpu::{name}"), || Ok(())).with_ignored_flag(true)
        }
    }
}

/// Memory of device 1 lent through a stream of device 0 is refused before
/// anything is queued (cudarc would record its event on a stream of another
/// context, fail, and keep that failure silently).
fn other_device_refused() -> TestResult {
    let c0 = interop::context(0)?;
    let c1 = interop::context(1)?;
    let s0 = c0.new_stream().map_err(de("new_stream"))?;
    let s1 = c1.new_stream().map_err(de("new_stream"))?;
    let mut x1 = s1.clone_htod(&[1.0f32; 16]).map_err(de("htod"))?;
    let on0 = CudarcStream::new(&s0)?;
    // SAFETY: refused before anything is lent; no view is made.
    let r = unsafe { on0.read(&x1) }.map(|g| g.len());
    ensure!(
        matches!(r, Err(Error::InvalidArgument { .. })),
        "read of device 1's slice on device 0's stream: {r:?}"
    );
    // SAFETY: as above.
    let w = unsafe { on0.write(&mut x1) }.map(|g| g.len());
    ensure!(
        matches!(w, Err(Error::InvalidArgument { .. })),
        "write of device 1's slice on device 0's stream: {w:?}"
    );
    let sc = on0.scope(|sc| sc.read(&x1).map(|v| v.len()));
    ensure!(
        matches!(sc, Err(Error::InvalidArgument { .. })),
        "scoped read of device 1's slice on device 0's stream: {sc:?}"
    );
    Ok(())
}

fn de(call: &'static str) -> impl Fn(DriverError) -> Error {
    move |e| interop::driver_error(call, e)
}

fn ctx_and_stream() -> Result<(Arc<CudaContext>, Arc<CudaStream>)> {
    let ctx = interop::context(0)?;
    let cs = ctx.new_stream().map_err(de("new_stream"))?;
    Ok((ctx, cs))
}

/// Deterministic values in [-1, 1), exactly representable in f16.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            f16::from_f64(((s >> 33) as f64 / (1u64 << 31) as f64) * 2.0 - 1.0).to_f32()
        })
        .collect()
}

fn same_bits(what: &str, a: &[f32], b: &[f32]) -> TestResult {
    same_len(what, a, b)?;
    if let Some(i) = (0..a.len()).find(|&i| a[i].to_bits() != b[i].to_bits()) {
        return Err(format!("{what}: element {i} differs: {} vs {}", a[i], b[i]).into());
    }
    Ok(())
}

fn context_is_shared() -> TestResult {
    let (ctx, cs) = ctx_and_stream()?;
    let s = CudarcStream::new(&cs)?;
    ensure!(
        s.device() == Some(Device::current()?),
        "stream device {:?}",
        s.device()
    );
    ensure!(
        s.as_raw() == cs.cu_stream().cast(),
        "the Stream names cudarc's CUstream"
    );
    ensure!(!s.is_owned(), "never destroyed by this crate");
    // The runtime's own calls (a stream, an allocation) leave cudarc's
    // context current: one context.
    let own = Stream::new()?;
    let buf = DeviceBuffer::<f32>::zeroed(1024)?;
    let cur = interop::cudarc::driver::result::ctx::get_current().map_err(de("cuCtxGetCurrent"))?;
    ensure!(
        cur == Some(ctx.cu_ctx()),
        "current context {cur:?} after runtime calls, cudarc's {:?}",
        ctx.cu_ctx()
    );
    drop((own, buf));
    // Dropping the crate's value leaves cudarc's stream usable.
    drop(s);
    cs.synchronize().map_err(de("synchronize"))?;
    let x = cs.clone_htod(&[1.0f32, 2.0]).map_err(de("htod"))?;
    ensure!(
        cs.clone_dtoh(&x).map_err(de("dtoh"))? == vec![1.0, 2.0],
        "cudarc stream works after the borrow ends"
    );
    Ok(())
}

fn relu_host(x: &[f32]) -> Vec<f32> {
    x.iter().map(|&v| v.max(0.0)).collect()
}

fn relu_same() -> TestResult {
    let (_ctx, cs) = ctx_and_stream()?;
    let n = 1 << 20;
    let xs = values(n, 1);
    let d = TensorDescriptor::<f32>::nchw(1, 16, 256, 256)?;
    let act = ActivationDescriptor::new(ActivationMode::Relu, NanPropagation::Propagate)?;
    // Through cudarc memory on cudarc's stream.
    let s = CudarcStream::new(&cs)?;
    let x = cs.clone_htod(&xs).map_err(de("htod"))?;
    let mut y = cs.clone_htod(&vec![f32::NAN; n]).map_err(de("htod"))?;
    let mut h = Handle::new(&s)?;
    {
        // SAFETY: the views go to `h` (bound to `s`) only; the guards drop at the block's end.
        let (xr, mut yw) = unsafe { (s.read(&x)?, s.write(&mut y)?) };
        h.activation_forward(
            &act,
            1.0,
            DeviceTensor::new(&d, &xr)?,
            0.0,
            DeviceTensorMut::new(&d, &mut yw)?,
        )?;
    }
    let via_cudarc = cs.clone_dtoh(&y).map_err(de("dtoh"))?;
    // Through the crate's memory on its own stream.
    let own = Stream::new()?;
    let mut h2 = Handle::new(&own)?;
    let xb = DeviceBuffer::from_host(&xs)?;
    let mut yb = DeviceBuffer::from_host(&vec![f32::NAN; n])?;
    h2.activation_forward(
        &act,
        1.0,
        DeviceTensor::new(&d, &xb)?,
        0.0,
        DeviceTensorMut::new(&d, &mut yb)?,
    )?;
    own.synchronize()?;
    let via_crate = yb.to_vec()?;
    same_bits("relu cudarc vs crate", &via_cudarc, &via_crate)?;
    same_bits("relu vs host", &via_crate, &relu_host(&xs))
}

fn gemm_same() -> TestResult {
    let (_ctx, cs) = ctx_and_stream()?;
    let (m, n, k) = (128, 96, 64);
    let (la, lb, lc) = (
        Layout::row_major(m, k),
        Layout::row_major(k, n),
        Layout::row_major(m, n),
    );
    let (a, b) = (values(m * k, 2), values(k * n, 3));
    let s = CudarcStream::new(&cs)?;
    let blas_c = blas::Handle::new(&s)?;
    let (da, db) = (
        cs.clone_htod(&a).map_err(de("htod"))?,
        cs.clone_htod(&b).map_err(de("htod"))?,
    );
    let mut dc = cs.clone_htod(&vec![f32::NAN; m * n]).map_err(de("htod"))?;
    {
        // SAFETY: the views go to `blas_c` (bound to `s`) only; the guards drop at the block's end.
        let (ar, br, mut cw) = unsafe { (s.read(&da)?, s.read(&db)?, s.write(&mut dc)?) };
        blas_c.gemm(
            1.0,
            Matrix::new(&ar, la),
            Matrix::new(&br, lb),
            0.0,
            MatrixMut::new(&mut cw, lc),
            ComputeType::Default,
        )?;
    }
    let via_cudarc = cs.clone_dtoh(&dc).map_err(de("dtoh"))?;
    let own = Stream::new()?;
    let blas_o = blas::Handle::new(&own)?;
    let (ea, eb) = (DeviceBuffer::from_host(&a)?, DeviceBuffer::from_host(&b)?);
    let mut ec = DeviceBuffer::from_host(&vec![f32::NAN; m * n])?;
    blas_o.gemm(
        1.0,
        Matrix::new(&ea, la),
        Matrix::new(&eb, lb),
        0.0,
        MatrixMut::new(&mut ec, lc),
        ComputeType::Default,
    )?;
    own.synchronize()?;
    same_bits("gemm cudarc vs crate", &via_cudarc, &ec.to_vec()?)?;
    // And against the host (f64 accumulate; f32 bound).
    for i in 0..m {
        for j in 0..n {
            let want: f64 = (0..k)
                .map(|p| f64::from(a[i * k + p]) * f64::from(b[p * n + j]))
                .sum();
            let got = f64::from(via_cudarc[i * n + j]);
            let err = (got - want).abs() / want.abs().max(1.0);
            ensure!(
                err.is_finite() && err <= 1e-4,
                "gemm ({i},{j}): {got} vs {want}"
            );
        }
    }
    Ok(())
}

fn conv_graph() -> Result<Graph> {
    let mut g = Graph::new();
    let x = g.input("x", TensorSpec::nhwc(DType::F16, &[2, 16, 12, 12])?)?;
    let w = g.input("w", TensorSpec::nhwc(DType::F16, &[32, 16, 3, 3])?)?;
    let b = g.input("bias", TensorSpec::nhwc(DType::F16, &[1, 32, 1, 1])?)?;
    let y = g.conv_fprop(x, w, &ConvParams::new_2d([1, 1], [1, 1], [1, 1]))?;
    let y = g.bias(y, b)?;
    let y = g.relu(y)?;
    g.output(y, DType::F16)?;
    g.rename(y, "y")?;
    Ok(g)
}

fn graph_same() -> TestResult {
    let (_ctx, cs) = ctx_and_stream()?;
    let (plan, _) = Plan::build(
        &conv_graph()?.build()?,
        &Target::device(0)?,
        &Policy::default(),
    )?;
    let h16 = |v: Vec<f32>| v.into_iter().map(f16::from_f32).collect::<Vec<_>>();
    let (x, w, b) = (
        h16(values(2 * 16 * 144, 4)),
        h16(values(32 * 16 * 9, 5)),
        h16(values(32, 6)),
    );
    let ny = 2 * 32 * 144;
    let s = CudarcStream::new(&cs)?;
    let mut h = Handle::new(&s)?;
    let (cx, cw, cb) = (
        cs.clone_htod(&x).map_err(de("htod"))?,
        cs.clone_htod(&w).map_err(de("htod"))?,
        cs.clone_htod(&b).map_err(de("htod"))?,
    );
    let mut cy = cs.clone_htod(&vec![f16::NAN; ny]).map_err(de("htod"))?;
    {
        // SAFETY: the views go to plan executions on `h` (bound to `s`) only; the guards drop at the block's end.
        let (xr, wr, br, mut yw) =
            unsafe { (s.read(&cx)?, s.read(&cw)?, s.read(&cb)?, s.write(&mut cy)?) };
        let mut bind = plan.bindings();
        bind.input("x", &xr)?
            .input("w", &wr)?
            .input("bias", &br)?
            .output("y", &mut yw)?;
        // Twice with the same bindings (the cached variant pack).
        plan.execute(&mut h, &mut bind)?;
        plan.execute(&mut h, &mut bind)?;
    }
    let via_cudarc: Vec<f32> = cs
        .clone_dtoh(&cy)
        .map_err(de("dtoh"))?
        .into_iter()
        .map(f16::to_f32)
        .collect();
    let own = Stream::new()?;
    let mut h2 = Handle::new(&own)?;
    let (ex, ew, eb) = (
        DeviceBuffer::from_host(&x)?,
        DeviceBuffer::from_host(&w)?,
        DeviceBuffer::from_host(&b)?,
    );
    let mut ey = DeviceBuffer::from_host(&vec![f16::NAN; ny])?;
    {
        let mut bind = plan.bindings();
        bind.input("x", &ex)?
            .input("w", &ew)?
            .input("bias", &eb)?
            .output("y", &mut ey)?;
        plan.execute(&mut h2, &mut bind)?;
    }
    own.synchronize()?;
    let via_crate: Vec<f32> = ey.to_vec()?.into_iter().map(f16::to_f32).collect();
    same_bits("graph conv cudarc vs crate", &via_cudarc, &via_crate)?;
    // The independent truth: the crate's f64 reference of conv + bias +
    // ReLU on the same f16 inputs, all tensors channels-last (the graph's
    // NHWC specs; w as KRSC), pad 1, stride 1.
    let f64s = |v: &[f16]| v.iter().map(|e| e.to_f64()).collect::<Vec<_>>();
    let (want, yd) = refc::bias_activation_forward(
        &f64s(&x),
        &[2, 16, 12, 12],
        &f64s(&w),
        &[32, 16, 3, 3],
        &refc::ConvParams::new(2).with_pad(&[1, 1]),
        refc::Layout::ChannelsLast,
        &refc::BiasActivation {
            bias: &f64s(&b),
            activation: ActivationMode::Relu,
            ..Default::default()
        },
    )?;
    ensure!(yd == [2, 32, 12, 12], "reference output shape {yd:?}");
    ensure!(want.len() == ny, "reference length {}", want.len());
    // f16 inputs, f32 accumulation, f16 output: 1e-2 relative to
    // max(|want|, 1) (the design's f16 bound); a NaN never passes.
    let mut worst = 0.0f64;
    for (i, (&g, &t)) in via_cudarc.iter().zip(&want).enumerate() {
        let err = (f64::from(g) - t).abs() / t.abs().max(1.0);
        ensure!(
            err.is_finite() && err <= 1e-2,
            "graph conv+bias+relu element {i}: {g} vs reference {t}"
        );
        worst = worst.max(err);
    }
    eprintln!("  graph conv+bias+relu vs f64 reference: max error {worst:.2e} (bound 1e-2)");
    Ok(())
}

fn two_streams() -> TestResult {
    let ctx = interop::context(0)?;
    ensure!(
        ctx.is_event_tracking(),
        "cudarc event tracking is on by default"
    );
    let s1 = ctx.new_stream().map_err(de("new_stream"))?;
    let s2 = ctx.new_stream().map_err(de("new_stream"))?;
    ensure!(
        ctx.is_in_multi_stream_mode(),
        "two streams: multi-stream mode"
    );
    let on2 = CudarcStream::new(&s2)?;
    let mut h = Handle::new(&on2)?;
    let n = 1 << 22;
    let d = TensorDescriptor::<f32>::nchw(1, 64, 256, 256)?;
    let act = ActivationDescriptor::new(ActivationMode::Relu, NanPropagation::Propagate)?;
    for round in 0..6u64 {
        let xs = values(n, 100 + round);
        // Written on s1 (cudarc records the write on s1).
        let x = s1.clone_htod(&xs).map_err(de("htod"))?;
        let mut y = s1.clone_htod(&vec![f32::NAN; n]).map_err(de("htod"))?;
        // Read and written by the crate on s2: s2 waits for s1's writes.
        {
            // SAFETY: the views go to `h` (bound to `on2`) only; the guards drop at the block's end.
            let (xr, mut yw) = unsafe { (on2.read(&x)?, on2.write(&mut y)?) };
            h.activation_forward(
                &act,
                1.0,
                DeviceTensor::new(&d, &xr)?,
                0.0,
                DeviceTensorMut::new(&d, &mut yw)?,
            )?;
        }
        // Read back on s1: s1 waits for the crate's write on s2.
        let got = s1.clone_dtoh(&y).map_err(de("dtoh"))?;
        same_bits(&format!("round {round}"), &got, &relu_host(&xs))?;
    }
    Ok(())
}

fn short_slice() -> TestResult {
    let (_ctx, cs) = ctx_and_stream()?;
    let s = CudarcStream::new(&cs)?;
    let d = TensorDescriptor::<f32>::nchw(1, 1, 4, 4)?;
    let x = cs.clone_htod(&[1.0f32; 15]).map_err(de("htod"))?;
    // SAFETY: the view is only checked against a descriptor, never used by device work; the guard drops at the end.
    let xr = unsafe { s.read(&x)? };
    ensure!(xr.len() == 15 && xr.device().ordinal() == 0, "guard {xr:?}");
    match DeviceTensor::new(&d, &xr) {
        Err(Error::Mismatch { .. }) => Ok(()),
        other => Err(format!("15 elements for 16: {other:?}").into()),
    }
}

fn handle_keeps_stream() -> TestResult {
    let ctx = interop::context(0)?;
    let cs = ctx.new_stream().map_err(de("new_stream"))?;
    let s = CudarcStream::new(&cs)?;
    let mut h = Handle::new(&s)?;
    let weak = Arc::downgrade(&cs);
    drop(s);
    drop(cs);
    ensure!(weak.upgrade().is_some(), "the handle keeps cudarc's stream");
    let cs = weak.upgrade().ok_or("stream gone")?;
    let s = CudarcStream::new(&cs)?;
    let d = TensorDescriptor::<f32>::nchw(1, 1, 2, 2)?;
    let act = ActivationDescriptor::new(ActivationMode::Relu, NanPropagation::Propagate)?;
    let x = cs
        .clone_htod(&[-1.0f32, 2.0, -3.0, 4.0])
        .map_err(de("htod"))?;
    let mut y = cs.alloc_zeros::<f32>(4).map_err(de("alloc"))?;
    {
        // SAFETY: the views go to `h` (bound to `s`) only; the guards drop at the block's end.
        let (xr, mut yw) = unsafe { (s.read(&x)?, s.write(&mut y)?) };
        h.activation_forward(
            &act,
            1.0,
            DeviceTensor::new(&d, &xr)?,
            0.0,
            DeviceTensorMut::new(&d, &mut yw)?,
        )?;
    }
    let got = cs.clone_dtoh(&y).map_err(de("dtoh"))?;
    ensure!(got == vec![0.0, 2.0, 0.0, 4.0], "relu {got:?}");
    drop(h);
    drop(s);
    drop(cs);
    ensure!(weak.upgrade().is_none(), "released with the handle");
    Ok(())
}

/// The safe lend (`CudarcStream::scope`): cudarc memory written on one
/// cudarc stream, used by an op on a stream that is not cudarc's at all,
/// read back on a second cudarc stream; the scope's waits alone order the
/// three, and the result is the host's ReLU. What makes an ordering bug
/// visible: the op is queued many times (milliseconds of work), and the
/// crate's stream must be idle (`query`) the moment the scope returns.
/// Rounds 2 and 3 take the failure path of issue 31 item 1: an error
/// stored in cudarc's context inside the closure (cudarc's own
/// `synchronize` then returns it without waiting, and the old scope
/// released its guards anyway): the scope must still wait, then report
/// the stored error.
fn scope_any_stream() -> TestResult {
    let (ctx, cs) = ctx_and_stream()?;
    let other = ctx.new_stream().map_err(de("new_stream"))?;
    let s = CudarcStream::new(&cs)?;
    let own = Stream::non_blocking()?;
    let mut h = Handle::new(&own)?;
    let n = 1 << 22;
    let d = TensorDescriptor::<f32>::nchw(1, 64, 256, 256)?;
    let act = ActivationDescriptor::new(ActivationMode::Relu, NanPropagation::Propagate)?;
    for round in 0..4u64 {
        let stored_error = round >= 2;
        let xs = values(n, 300 + round);
        let x = cs.clone_htod(&xs).map_err(de("htod"))?;
        let mut y = cs.clone_htod(&vec![f32::NAN; n]).map_err(de("htod"))?;
        let r = s.scope(|sc| {
            let (xv, mut yv) = (sc.read(&x)?, sc.write(&mut y)?);
            for _ in 0..64 {
                h.activation_forward(
                    &act,
                    1.0,
                    DeviceTensor::new(&d, xv)?,
                    0.0,
                    DeviceTensorMut::new(&d, yv.reborrow())?,
                )?;
            }
            if stored_error {
                // What a failed cudarc call in a drop leaves behind.
                ctx.record_err::<()>(Err(DriverError(
                    interop::cudarc::driver::sys::cudaError_enum::CUDA_ERROR_INVALID_VALUE,
                )));
            }
            Ok(())
        });
        // The crate's work that used the views is done when the scope
        // returns, whatever it returns.
        ensure!(
            own.query()?,
            "round {round}: the scope returned while the views' work still ran"
        );
        match (r, stored_error) {
            (Ok(()), false) => {}
            (Err(Error::Driver { code: 1, .. }), true) => {}
            (other, _) => return Err(format!("round {round}: {other:?}").into()),
        }
        let got = other.clone_dtoh(&y).map_err(de("dtoh"))?;
        same_bits(&format!("scope round {round}"), &got, &relu_host(&xs))?;
    }
    Ok(())
}

/// Issue 31 item 1 with the wait provoked to fail: another thread captures
/// a cudarc stream of the same context (global mode) while the scope ends,
/// so the driver refuses `cuCtxSynchronize`; the scope retries until the
/// capture ends, and only then lets cudarc record its events. The views'
/// work (on the crate's stream) is done when the scope returns, and the
/// data are the host's ReLU.
fn scope_waits_out_another_threads_capture() -> TestResult {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Barrier, Mutex};
    let (ctx, cs) = ctx_and_stream()?;
    let cap = ctx.new_stream().map_err(de("new_stream"))?;
    let s = CudarcStream::new(&cs)?;
    let own = Stream::non_blocking()?;
    let mut h = Handle::new(&own)?;
    let n = 1 << 22;
    let d = TensorDescriptor::<f32>::nchw(1, 64, 256, 256)?;
    let act = ActivationDescriptor::new(ActivationMode::Relu, NanPropagation::Propagate)?;
    let xs = values(n, 77);
    let x = cs.clone_htod(&xs).map_err(de("htod"))?;
    let mut y = cs.clone_htod(&vec![f32::NAN; n]).map_err(de("htod"))?;
    let begun = Arc::new(Barrier::new(2));
    let ended = Arc::new(AtomicBool::new(false));
    let report = Arc::new(Mutex::new(String::new()));
    let (b2, e2, r2, cap2) = (begun.clone(), ended.clone(), report.clone(), cap.clone());
    let t = std::thread::spawn(move || {
        use interop::cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
        let began = cap2.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL);
        b2.wait();
        std::thread::sleep(std::time::Duration::from_millis(300));
        let end = cap2.end_capture(CUgraphInstantiate_flags(0));
        e2.store(true, Ordering::SeqCst);
        if let Ok(mut r) = r2.lock() {
            *r = format!("begin {began:?}, end {:?}", end.map(|g| g.is_some()));
        }
    });
    /// Opens the barrier when the closure ends, by error too (the other
    /// thread waits on it).
    struct OnEnd<'a>(&'a Barrier);
    impl Drop for OnEnd<'_> {
        fn drop(&mut self) {
            self.0.wait(); // the other thread's capture is open from here
        }
    }
    let r = s.scope(|sc| {
        let _open = OnEnd(&begun);
        let (xv, mut yv) = (sc.read(&x)?, sc.write(&mut y)?);
        for _ in 0..64 {
            h.activation_forward(
                &act,
                1.0,
                DeviceTensor::new(&d, xv)?,
                0.0,
                DeviceTensorMut::new(&d, yv.reborrow())?,
            )?;
        }
        Ok(())
    });
    // Right when the scope returned: whether the capture had ended, and
    // whether the views' work is done (a scope that ignored the refused
    // wait would return while the capture is still open).
    let ended_before_return = ended.load(Ordering::SeqCst);
    let idle_at_return = own.query();
    t.join().map_err(|_| "capture thread panicked")?;
    eprintln!(
        "  capture thread: {}; the scope returned {} the capture ended",
        report.lock().map(|r| r.clone()).unwrap_or_default(),
        if ended_before_return {
            "after"
        } else {
            "before"
        }
    );
    r?;
    // The probe showed that the driver refuses the wait while the capture
    // is open: the scope may return only after it ended.
    ensure!(
        ended_before_return,
        "the scope returned while the other thread's capture (which refuses its wait) was open"
    );
    ensure!(
        idle_at_return?,
        "the scope returned while the views' work still ran"
    );
    let got = cs.clone_dtoh(&y).map_err(de("dtoh"))?;
    same_bits("scope after a refused wait", &got, &relu_host(&xs))
}

/// Issue 31 item 2 (review finding 2) on a device: inside a capture
/// closure of this crate, a lend of a `CudarcScope` is refused at once
/// (typed), keeps no guard, so the scope's end neither stalls (before the
/// fix: 30 s, then an abort) nor waits; the capture ends cleanly.
fn lend_inside_capture_closure() -> TestResult {
    use cudnn::runtime::CaptureMode;
    let (_ctx, cs) = ctx_and_stream()?;
    let s = CudarcStream::new(&cs)?;
    let x = cs.clone_htod(&values(1024, 5)).map_err(de("htod"))?;
    let own = Stream::non_blocking()?;
    let t0 = std::time::Instant::now();
    let mut lend = None;
    let g = own.capture(CaptureMode::Global, |_| -> Result<()> {
        lend = Some(s.scope(|sc| sc.read(&x).map(|v| v.len())));
        Ok(())
    })?;
    let took = t0.elapsed();
    drop(g);
    match lend {
        Some(Err(Error::CaptureUnsafe { op, .. })) if op == "CudarcScope::read/write" => {}
        other => return Err(format!("lend inside the closure: {other:?}").into()),
    }
    ensure!(
        took < std::time::Duration::from_secs(5),
        "the capture closure took {took:?} (a stalled scope end)"
    );
    own.synchronize()?;
    Ok(())
}

/// `Ok` when cudarc's capture recorded nothing.
fn ensure_none(empty: bool) -> Result<()> {
    if empty {
        Ok(())
    } else {
        Err(Error::invalid("cudarc graph", "must be empty", "a graph"))
    }
}

/// Issue 31 item 2 on a device: the crate never captures a cudarc stream,
/// and queues nothing on one while cudarc captures it (typed refusals,
/// nothing queued: cudarc's capture ends cleanly and empty).
/// The per-thread default stream is one queue with cudarc's
/// `per_thread_stream` (candle's default stream). A soundness audit's
/// trigger: cudarc begins a capture of it, the crate queues an op on
/// `Stream::per_thread()`, the buffers drop, cudarc launches its graph:
/// the crate's kernel on freed memory. The op must be refused and nothing
/// captured; the crate must not capture the stream itself either, nor join
/// it to a capture of its own.
fn per_thread_stream_shared_with_cudarc() -> TestResult {
    use cudnn::runtime::CaptureMode;
    use interop::cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    let ctx = interop::context(0)?;
    let pts = ctx.per_thread_stream();
    let s = Stream::per_thread();
    let mut h = Handle::new(&s)?;
    let n = 1024;
    let d = TensorDescriptor::<f32>::nchw(1, 1, 32, 32)?;
    let act = ActivationDescriptor::new(ActivationMode::Relu, NanPropagation::Propagate)?;
    let xb = DeviceBuffer::from_host(&values(n, 3))?;
    let mut y = DeviceBuffer::from_host(&vec![f32::NAN; n])?;
    // Eagerly first: the stream works for the crate when nobody captures.
    h.activation_forward(
        &act,
        1.0,
        DeviceTensor::new(&d, &xb)?,
        0.0,
        DeviceTensorMut::new(&d, &mut y)?,
    )?;
    s.synchronize()?;
    pts.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
        .map_err(de("begin_capture"))?;
    let op = h.activation_forward(
        &act,
        1.0,
        DeviceTensor::new(&d, &xb)?,
        0.0,
        DeviceTensorMut::new(&d, &mut y)?,
    );
    let g = pts
        .end_capture(CUgraphInstantiate_flags(0))
        .map_err(de("end_capture"))?;
    ensure!(
        matches!(op, Err(Error::CaptureUnsafe { .. })),
        "op on the per-thread stream while cudarc captures it: {op:?}"
    );
    ensure!(g.is_none(), "nothing was captured into cudarc's graph");
    // The crate does not capture it (candle's allocations would become
    // graph nodes).
    match s.capture(CaptureMode::ThreadLocal, |_| Ok::<(), Error>(())) {
        Err(Error::InvalidArgument { arg, .. }) if arg == "stream" => {}
        other => return Err(format!("capture of the per-thread stream: {other:?}").into()),
    }
    // Nor joins it to a capture of its own through an event.
    let own = Stream::new()?;
    let ev = cudnn::runtime::Event::with_flags(cudnn::runtime::EventFlags::DISABLE_TIMING)?;
    let mut joined = None;
    let g = own.capture(CaptureMode::ThreadLocal, |c| -> cudnn::Result<()> {
        ev.record(c)?;
        joined = Some(s.wait_event(&ev));
        Ok(())
    })?;
    drop(g);
    ensure!(
        matches!(joined, Some(Err(Error::CaptureUnsafe { .. }))),
        "per-thread stream waiting for a captured event: {joined:?}"
    );
    // And still works afterwards.
    h.activation_forward(
        &act,
        1.0,
        DeviceTensor::new(&d, &xb)?,
        0.0,
        DeviceTensorMut::new(&d, &mut y)?,
    )?;
    s.synchronize()?;
    Ok(())
}

fn cudarc_capture_refusals() -> TestResult {
    use cudnn::runtime::CaptureMode;
    use interop::cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    let (_ctx, cs) = ctx_and_stream()?;
    let s = CudarcStream::new(&cs)?;
    let mut h = Handle::new(&s)?;
    match s.capture(CaptureMode::Global, |_| Ok::<(), Error>(())) {
        Err(Error::InvalidArgument { arg, .. }) if arg == "stream" => {}
        other => return Err(format!("capture of a cudarc stream: {other:?}").into()),
    }
    let n = 1024;
    let d = TensorDescriptor::<f32>::nchw(1, 1, 32, 32)?;
    let act = ActivationDescriptor::new(ActivationMode::Relu, NanPropagation::Propagate)?;
    let x = cs.clone_htod(&values(n, 9)).map_err(de("htod"))?;
    let mut y = DeviceBuffer::from_host(&vec![f32::NAN; n])?;
    let xb = DeviceBuffer::from_host(&values(n, 9))?;
    cs.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
        .map_err(de("begin_capture"))?;
    let op = h.activation_forward(
        &act,
        1.0,
        DeviceTensor::new(&d, &xb)?,
        0.0,
        DeviceTensorMut::new(&d, &mut y)?,
    );
    let g = cs
        .end_capture(CUgraphInstantiate_flags(0))
        .map_err(de("end_capture"))?;
    ensure!(
        matches!(op, Err(Error::CaptureUnsafe { .. })),
        "op on a cudarc stream cudarc captures: {op:?}"
    );
    ensure!(g.is_none(), "nothing was captured into cudarc's graph");
    // A scope's lend while cudarc captures its stream is refused; the
    // capture is begun and ended inside the closure (a capture open when
    // the scope ends would make its device-wide wait fail).
    let mut lend = None;
    s.scope(|sc| {
        cs.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
            .map_err(de("begin_capture"))?;
        lend = Some(sc.read(&x).map(|_| ()));
        let g = cs
            .end_capture(CUgraphInstantiate_flags(0))
            .map_err(de("end_capture"))?;
        ensure_none(g.is_none())
    })?;
    ensure!(
        matches!(lend, Some(Err(Error::CaptureUnsafe { .. }))),
        "scope lend while capturing: {lend:?}"
    );
    // An event recorded inside a capture of this crate: a cudarc stream
    // waiting for it (here from another thread, outside any capture
    // closure) would join cudarc's stream to the capture; refused.
    let own = Stream::new()?;
    let ev = cudnn::runtime::Event::with_flags(cudnn::runtime::EventFlags::DISABLE_TIMING)?;
    let mut joined = None;
    let g = own.capture(CaptureMode::Global, |c| -> cudnn::Result<()> {
        ev.record(c)?;
        joined = std::thread::scope(|t| t.spawn(|| s.wait_event(&ev)).join().ok());
        Ok(())
    })?;
    drop(g);
    ensure!(
        matches!(joined, Some(Err(Error::CaptureUnsafe { .. }))),
        "cudarc stream waiting for a captured event: {joined:?}"
    );
    // Review finding 6: a cudarc stream that is not capturing takes the
    // crate's work inside a capture closure of another stream (CUDA runs
    // it at once; it is not part of the graph): allowed, and the data are
    // the host's ReLU.
    let mut y2 = DeviceBuffer::from_host(&vec![f32::NAN; n])?;
    let mut inside = None;
    let g = own.capture(CaptureMode::Global, |_| -> cudnn::Result<()> {
        inside = Some(h.activation_forward(
            &act,
            1.0,
            DeviceTensor::new(&d, &xb)?,
            0.0,
            DeviceTensorMut::new(&d, &mut y2)?,
        ));
        Ok(())
    })?;
    drop(g);
    ensure!(
        matches!(inside, Some(Ok(()))),
        "op on a cudarc stream inside another stream's capture closure: {inside:?}"
    );
    s.synchronize()?;
    same_bits(
        "op on a cudarc stream inside a capture closure",
        &y2.to_vec()?,
        &relu_host(&values(n, 9)),
    )?;
    // After the capture, the same op runs.
    h.activation_forward(
        &act,
        1.0,
        DeviceTensor::new(&d, &xb)?,
        0.0,
        DeviceTensorMut::new(&d, &mut y)?,
    )?;
    s.synchronize()?;
    same_bits(
        "relu after cudarc's capture",
        &y.to_vec()?,
        &relu_host(&values(n, 9)),
    )
}

/// Random sub-views of a cudarc slice lent through the guards: each guard's
/// length is the view's, its data are the view's elements (read back through
/// this crate's copy), and a descriptor longer than the view is a typed
/// error; never a panic.
fn fuzz_sub_views() -> TestResult {
    let (_ctx, cs) = ctx_and_stream()?;
    let s = CudarcStream::new(&cs)?;
    let n = 1000usize;
    let host: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut x = cs.clone_htod(&host).map_err(de("htod"))?;
    // The crate's `to_vec` copies on the legacy stream, which a cudarc
    // (non-blocking) stream does not order with: finish the upload first.
    cs.synchronize().map_err(de("synchronize"))?;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = |m: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % (m as u64 + 1)) as usize
    };
    for case in 0..300 {
        let (a, b) = (next(n + 8), next(n + 8));
        let Some(view) = x.try_slice(a..b) else {
            ensure!(
                a > b || b > n,
                "case {case}: cudarc refused {a}..{b} of {n}"
            );
            continue;
        };
        // SAFETY: the view goes to a synchronous copy after `cs` was synchronized (nothing else uses `x`), and to descriptor checks; the guard drops below.
        let g = unsafe { s.read(&view)? };
        ensure!(
            g.len() == b - a,
            "case {case}: guard length {} for {a}..{b}",
            g.len()
        );
        if !g.is_empty() {
            let got = g.view().to_vec()?;
            ensure!(
                got.as_slice() == &host[a..b],
                "case {case}: data of {a}..{b}"
            );
        }
        let d = TensorDescriptor::<f32>::nchw(1, 1, 1, b - a + 1)?;
        ensure!(
            matches!(DeviceTensor::new(&d, &g), Err(Error::Mismatch { .. })),
            "case {case}: a descriptor one longer than the view is refused"
        );
        drop(g);
        let scoped = s.scope(|sc| Ok(sc.read(&view)?.len()))?;
        ensure!(
            scoped == b - a,
            "case {case}: scoped view length {scoped} for {a}..{b}"
        );
        if let Some(mut vm) = x.try_slice_mut(a..b) {
            // SAFETY: the view is never used by device work; the guard drops at the block's end.
            let mut w = unsafe { s.write(&mut vm)? };
            ensure!(
                w.view_mut().len() == b - a,
                "case {case}: write guard length"
            );
        }
    }
    cs.synchronize().map_err(de("synchronize"))?;
    Ok(())
}

/// A collective on cudarc memory and cudarc's stream: a one-rank sum
/// all-reduce copies its input, and a group borrows the guards until it ends.
#[cfg(feature = "nccl")]
fn nccl_all_reduce() -> TestResult {
    use cudnn::nccl::{self, Communicator, ReduceOp};
    let (_ctx, cs) = ctx_and_stream()?;
    let s = CudarcStream::new(&cs)?;
    let comms = Communicator::init_all(&[Device::new(0)?])?;
    let comm = comms.first().ok_or("no communicator")?;
    let xs = values(4096, 11);
    let x = cs.clone_htod(&xs).map_err(de("htod"))?;
    let mut y = cs.clone_htod(&vec![f32::NAN; 4096]).map_err(de("htod"))?;
    let mut z = cs.clone_htod(&vec![f32::NAN; 4096]).map_err(de("htod"))?;
    {
        // SAFETY: the views go to collectives given `s` only; the guards drop at the block's end.
        let (xr, mut yw) = unsafe { (s.read(&x)?, s.write(&mut y)?) };
        comm.all_reduce(&xr, &mut yw, ReduceOp::Sum, &s)?;
        // SAFETY: as above.
        let mut zw = unsafe { s.write(&mut z)? };
        nccl::group(|g| g.all_reduce(comm, &xr, &mut zw, ReduceOp::Max, &s))?;
    }
    same_bits(
        "all_reduce sum, one rank",
        &cs.clone_dtoh(&y).map_err(de("dtoh"))?,
        &xs,
    )?;
    same_bits(
        "grouped all_reduce max, one rank",
        &cs.clone_dtoh(&z).map_err(de("dtoh"))?,
        &xs,
    )
}
