//! `cargo run --release --example bench_launch [-- --rounds N]` (or
//! `cargo xtask bench-launch`): the host cost of launching a cached graph
//! plan, split into the crate's checks and the library call.
//!
//! Host half (no device needed; plans for an H200 through the driver stub):
//! plans with 3, 4 and 8 bindings (a plan binds at least one input and one
//! output; the smallest graph here, a convolution, binds three), bound to
//! addresses that are never dereferenced (nothing is launched:
//! [`Plan::launch_checks`] runs the checks of `Plan::execute` without the
//! library call). Each stage of the checks is timed cumulatively
//! (`LaunchStage`), and the table gives each stage's share: the bound
//! buffers' devices, the workspace resolved, the bindings checked against
//! the plan, the plan's lock, the variant pack reused; then the crate's
//! total per launch, and what a launch costs when a pointer changed (the
//! pack rebuilt).
//!
//! GPU half (with a device): the same plans on real buffers, the whole
//! `Plan::execute` (host time per launch: 200 launches enqueued, timed up
//! to the stream's synchronize; the drain after them shown apart) against the same launch through the raw `-sys` crate
//! (`cudnnBackendExecute` with a variant pack built once by hand), so the
//! difference is what the safe call adds (the checks above, the
//! architecture check, the handle's device made current).
//!
//! Then the same for a legacy convolution, a cuBLASLt matmul and an NCCL
//! all-reduce (`bench_launch_ops.rs`): their checks without a device, and
//! on a GPU the whole safe call against the raw `-sys` call.
//!
//! Prints markdown tables; each figure is the fastest of `--rounds`
//! (default 15) rounds of about 10 ms (the least disturbed by other work;
//! the median of the total is shown beside it). Nothing is asserted.

use std::ffi::c_void;
use std::hint::black_box;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use cudnn::graph::{
    Bindings, ConvParams, DType, Graph, IoTensor, LaunchStage, Plan, Policy, Target, TensorSpec,
};
use cudnn::runtime::{Device, DeviceSlice, DeviceSliceMut};
use half::{bf16, f16};

#[path = "bench_launch_ops.rs"]
mod ops;

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Launches per timed batch in the GPU halves.
const BATCH: u32 = 200;

/// Nanoseconds per call of `f`: the fastest of `rounds` rounds of about
/// 10 ms (the least disturbed by other work on the machine), and the median.
fn time_ns2(rounds: usize, mut f: impl FnMut() -> AnyResult<()>) -> AnyResult<(f64, f64)> {
    // Warm up and size a round.
    let t0 = Instant::now();
    let mut n = 0u64;
    while t0.elapsed() < Duration::from_millis(5) {
        f()?;
        n += 1;
    }
    let per_round = (n * 2).max(1);
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds.max(1) {
        let t = Instant::now();
        for _ in 0..per_round {
            f()?;
        }
        samples.push(t.elapsed().as_nanos() as f64 / per_round as f64);
    }
    samples.sort_by(f64::total_cmp);
    Ok((samples[0], samples[samples.len() / 2]))
}

/// The fastest round's nanoseconds per call (see [`time_ns2`]).
fn time_ns(rounds: usize, f: impl FnMut() -> AnyResult<()>) -> AnyResult<f64> {
    time_ns2(rounds, f).map(|t| t.0)
}

/// The GPU halves' timer: `batch` launches through `launch`, timed up to
/// the stream's synchronize (the enqueue), then the synchronize timed on
/// its own (the drain of the queued work). After a warm-up of 3 batches,
/// `rounds` batches; returns the fastest batch's enqueue in ns per launch
/// and the median batch's drain in µs. A batch of 200 small launches fits
/// the launch queue, so the enqueue does not wait for the GPU.
fn time_enqueue(
    rounds: usize,
    batch: u32,
    stream: &cudnn::runtime::Stream,
    mut launch: impl FnMut() -> AnyResult<()>,
) -> AnyResult<(f64, f64)> {
    for _ in 0..3 {
        for _ in 0..batch {
            launch()?;
        }
        stream.synchronize()?;
    }
    let (mut enqueue, mut drain) = (Vec::new(), Vec::new());
    for _ in 0..rounds.max(1) {
        let t = Instant::now();
        for _ in 0..batch {
            launch()?;
        }
        let queued = t.elapsed();
        stream.synchronize()?;
        let done = t.elapsed();
        enqueue.push(queued.as_nanos() as f64 / f64::from(batch));
        drain.push((done - queued).as_nanos() as f64 / 1e3);
    }
    enqueue.sort_by(f64::total_cmp);
    drain.sort_by(f64::total_cmp);
    Ok((enqueue[0], drain[drain.len() / 2]))
}

/// A convolution (NHWC f16) with `adds` full-size tensors added after it
/// (`bias`: a per-channel bias first): 3 + `bias` + `adds` bindings.
fn conv_graph(bias: bool, adds: usize) -> cudnn::Result<Graph> {
    let mut g = Graph::new();
    let x = g.input("x", TensorSpec::nhwc(DType::F16, &[1, 32, 16, 16])?)?;
    let w = g.input("w", TensorSpec::nhwc(DType::F16, &[32, 32, 3, 3])?)?;
    let mut y = g.conv_fprop(x, w, &ConvParams::new_2d([1, 1], [1, 1], [1, 1]))?;
    if bias {
        let b = g.input("bias", TensorSpec::nhwc(DType::F16, &[1, 32, 1, 1])?)?;
        y = g.bias(y, b)?;
    }
    for i in 0..adds {
        let a = g.input(
            &format!("add{i}"),
            TensorSpec::nhwc(DType::F16, &[1, 32, 16, 16])?,
        )?;
        y = g.add(y, a)?;
    }
    g.output(y, DType::F16)?;
    g.rename(y, "y")?;
    Ok(g)
}

/// Pointwise only: the sum of `inputs` tensors (`inputs + 1` bindings).
fn sum_graph(inputs: usize) -> cudnn::Result<Graph> {
    let mut g = Graph::new();
    let spec = TensorSpec::nhwc(DType::F16, &[1, 32, 16, 16])?;
    let mut y = g.input("in0", spec.clone())?;
    for i in 1..inputs {
        let a = g.input(&format!("in{i}"), spec.clone())?;
        y = g.add(y, a)?;
    }
    g.output(y, DType::F16)?;
    g.rename(y, "y")?;
    Ok(g)
}

/// `(label, plan)` for 3, 4 and 8 bindings: the first candidate graph of
/// each count that cuDNN plans for the target.
fn plans(target: &Target) -> AnyResult<Vec<(String, Plan)>> {
    type Build = fn() -> cudnn::Result<Graph>;
    let wanted: [(usize, &[(&str, Build)]); 3] = [
        (3, &[("conv", || conv_graph(false, 0))]),
        (4, &[("conv + bias", || conv_graph(true, 0))]),
        (
            8,
            &[
                ("conv + bias + 4 adds", || conv_graph(true, 4)),
                ("sum of 7 tensors", || sum_graph(7)),
            ],
        ),
    ];
    let mut out = Vec::new();
    for (n, candidates) in wanted {
        let mut why = Vec::new();
        for (label, build) in candidates {
            let planned = build()
                .and_then(|g| g.build())
                .and_then(|og| Plan::build(&og, target, &Policy::default()).map(|(p, _)| p));
            match planned {
                Ok(p) if p.io().tensors.len() == n => {
                    out.push((label.to_string(), p));
                    why.clear();
                    break;
                }
                Ok(p) => why.push(format!("{label}: {} bindings", p.io().tensors.len())),
                Err(e) => why.push(format!("{label}: {e}")),
            }
        }
        if !why.is_empty() {
            eprintln!(
                "bench_launch: no plan with {n} bindings: {}",
                why.join("; ")
            );
        }
    }
    Ok(out)
}

/// Bind `t` at device address `addr` (`device`: the buffer's device, when known).
///
/// # Safety
/// The view is used only by `Plan::launch_checks` (nothing dereferences the
/// address) unless `addr` is device memory of at least the tensor's span on
/// `device`, alive as long as the bindings.
unsafe fn bind<'a>(
    b: &mut Bindings<'a>,
    t: &IoTensor,
    addr: usize,
    device: Option<Device>,
) -> AnyResult<()> {
    let bytes = t.spec.span_bytes()?;
    macro_rules! as_type {
        ($ty:ty) => {{
            let n = bytes / std::mem::size_of::<$ty>();
            // SAFETY: the caller's contract (see above).
            unsafe {
                match (t.is_output, device) {
                    (false, None) => {
                        b.input(
                            &t.name,
                            DeviceSlice::<$ty>::from_raw_parts(addr as *const $ty, n),
                        )?;
                    }
                    (false, Some(d)) => {
                        b.input(
                            &t.name,
                            DeviceSlice::<$ty>::from_raw_parts_on(addr as *const $ty, n, d),
                        )?;
                    }
                    (true, None) => {
                        b.output(
                            &t.name,
                            DeviceSliceMut::<$ty>::from_raw_parts_mut(addr as *mut $ty, n),
                        )?;
                    }
                    (true, Some(d)) => {
                        b.output(
                            &t.name,
                            DeviceSliceMut::<$ty>::from_raw_parts_mut_on(addr as *mut $ty, n, d),
                        )?;
                    }
                }
            }
        }};
    }
    match t.spec.dtype() {
        DType::F16 => as_type!(f16),
        DType::BF16 => as_type!(bf16),
        DType::F32 => as_type!(f32),
        other => return Err(format!("no binding for {other} here").into()),
    }
    Ok(())
}

/// The host half: the crate's checks by stage, on addresses never dereferenced.
fn host_half(rounds: usize, plans: &[(String, Plan)]) -> AnyResult<()> {
    println!(
        "\n## Plan::execute, the crate's checks per launch (ns; no device, nothing launched)\n"
    );
    println!(
        "| plan | bindings | devices | workspace | binding checks | lock | pack reuse | crate total | (median) | pack rebuilt |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (label, plan) in plans {
        let mut b = plan.bindings();
        // Fake, aligned, distinct addresses: nothing dereferences them.
        let mut addr = 0x7f00_0000_0000usize;
        for t in &plan.io().tensors {
            // SAFETY: only `launch_checks` sees these bindings.
            unsafe { bind(&mut b, t, addr, None)? };
            addr += t.spec.span_bytes()?.next_multiple_of(256) + 256;
        }
        let ws_a = addr;
        let ws_b = addr + plan.workspace_size().next_multiple_of(256) + 256;
        let ws_len = plan.workspace_size().max(1);
        // SAFETY: as above.
        let ws = unsafe { DeviceSliceMut::<u8>::from_raw_parts_mut(ws_a as *mut u8, ws_len) };
        b.workspace(ws)?;
        let mut cumulative = Vec::new();
        let mut median_total = 0.0;
        for stage in [
            LaunchStage::Devices,
            LaunchStage::Workspace,
            LaunchStage::Bindings,
            LaunchStage::Lock,
            LaunchStage::Pack,
        ] {
            let (ns, median) = time_ns2(rounds, || {
                plan.launch_checks(black_box(&mut b), None, stage)?;
                Ok(())
            })?;
            cumulative.push(ns);
            median_total = median;
        }
        // A pointer that changes every launch: the pack is rebuilt each time.
        let mut b2 = plan.bindings();
        let mut addr = 0x7e00_0000_0000usize;
        for t in &plan.io().tensors {
            // SAFETY: only `launch_checks` sees these bindings.
            unsafe { bind(&mut b2, t, addr, None)? };
            addr += t.spec.span_bytes()?.next_multiple_of(256) + 256;
        }
        let mut flip = false;
        let rebuilt = time_ns(rounds, || {
            flip = !flip;
            let at = if flip { ws_a } else { ws_b };
            // SAFETY: as above.
            let ws = unsafe { DeviceSliceMut::<u8>::from_raw_parts_mut(at as *mut u8, ws_len) };
            b2.workspace(ws)?;
            plan.launch_checks(&mut b2, None, LaunchStage::Pack)?;
            Ok(())
        })?;
        let share: Vec<String> = cumulative
            .iter()
            .enumerate()
            .map(|(i, &c)| {
                let prev = if i == 0 { 0.0 } else { cumulative[i - 1] };
                format!("{:.0}", (c - prev).max(0.0))
            })
            .collect();
        println!(
            "| {label} | {} | {} | {:.0} | {median_total:.0} | {rebuilt:.0} |",
            plan.io().tensors.len(),
            share.join(" | "),
            cumulative[cumulative.len() - 1],
        );
    }
    println!(
        "\nEach stage includes the ones before it; a column is the difference of two cumulative times (noise can make one 0). \
         Not measured here (they need a device): the architecture check and the handle's device made current (the GPU half's difference)."
    );
    Ok(())
}

/// The GPU half: `Plan::execute` against `cudnnBackendExecute` through the raw crate.
fn gpu_half(rounds: usize, plans: &[(String, Plan)]) -> AnyResult<()> {
    use cudnn::sys::cudnn as raw;
    use raw::{
        cudnnBackendAttributeName_t as A, cudnnBackendAttributeType_t as T,
        cudnnBackendDescriptorType_t as D, cudnnStatus_t as S,
    };
    let dev = Device::new(0)?;
    let stream = dev.create_stream()?;
    let mut handle = cudnn::dnn::Handle::new(&stream)?;
    let api = raw::load()?;
    let ok = |call: &str, r: Result<S, raw::MissingSymbol>| -> AnyResult<()> {
        match r? {
            S::CUDNN_STATUS_SUCCESS => Ok(()),
            s => Err(format!("{call} returned {}", s.0).into()),
        }
    };
    println!(
        "\n## Plan::execute against the raw call (host ns per launch, {}, on device 0)\n",
        dev.name()?
    );
    println!(
        "| plan | bindings | Plan::execute | cudnnBackendExecute (raw) | difference | crate checks alone | drain µs (safe / raw) |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (label, plan) in plans {
        if !plan.io().scalars.is_empty() || !plan.io().scratch.is_empty() {
            eprintln!(
                "bench_launch: {label}: by-value scalars or scratch tensors, no raw counterpart here"
            );
            continue;
        }
        let mut buffers = Vec::new();
        for t in &plan.io().tensors {
            buffers.push(cudnn::runtime::DeviceBuffer::<u8>::zeroed(
                t.spec.span_bytes()?.max(1),
            )?);
        }
        let mut ws = cudnn::runtime::DeviceBuffer::<u8>::zeroed(plan.workspace_size().max(1))?;
        let ws_ptr = ws.as_raw_mut();
        let mut b = plan.bindings();
        for (t, buf) in plan.io().tensors.iter().zip(buffers.iter_mut()) {
            // SAFETY: `buf` is device memory of the tensor's span on `dev`,
            // alive until after the stream is synchronized below.
            unsafe { bind(&mut b, t, buf.as_raw_mut() as usize, Some(dev))? };
        }
        // SAFETY: `ws` holds the plan's workspace on `dev` and outlives `b`.
        let ws_view = unsafe {
            DeviceSliceMut::<u8>::from_raw_parts_mut_on(
                ws_ptr.cast(),
                plan.workspace_size().max(1),
                dev,
            )
        };
        b.workspace(ws_view)?;
        let (ours, ours_drain) = time_enqueue(rounds, BATCH, &stream, || {
            plan.execute(&mut handle, &mut b)?;
            Ok(())
        })?;
        let checks = time_ns(rounds, || {
            plan.launch_checks(&mut b, Some(dev), LaunchStage::Pack)?;
            Ok(())
        })?;
        // The raw side: one variant pack made by hand, then the bare call.
        let mut uids: Vec<i64> = Vec::new();
        let mut ptrs: Vec<*mut c_void> = Vec::new();
        for (t, buf) in plan.io().tensors.iter().zip(buffers.iter_mut()) {
            uids.push(t.uid);
            ptrs.push(buf.as_raw_mut());
        }
        let mut pack: raw::cudnnBackendDescriptor_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the descriptor type is a constant.
        ok("create", unsafe {
            api.cudnnBackendCreateDescriptor(D::CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &mut pack)
        })?;
        // SAFETY: `uids` and `ptrs` hold `len` elements of the declared
        // types; the pack is live and not finalized.
        unsafe {
            ok(
                "uids",
                api.cudnnBackendSetAttribute(
                    pack,
                    A::CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
                    T::CUDNN_TYPE_INT64,
                    uids.len() as i64,
                    uids.as_ptr().cast(),
                ),
            )?;
            ok(
                "ptrs",
                api.cudnnBackendSetAttribute(
                    pack,
                    A::CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                    T::CUDNN_TYPE_VOID_PTR,
                    ptrs.len() as i64,
                    ptrs.as_ptr().cast(),
                ),
            )?;
            ok(
                "ws",
                api.cudnnBackendSetAttribute(
                    pack,
                    A::CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                    T::CUDNN_TYPE_VOID_PTR,
                    1,
                    (&ws_ptr as *const *mut c_void).cast(),
                ),
            )?;
            ok("finalize", api.cudnnBackendFinalize(pack))?;
        }
        let plan_raw = plan.with_descriptor(|d| d.as_raw())?;
        let h = handle.as_raw();
        let _on = dev.guard()?;
        let (raw_ns, raw_drain) = time_enqueue(rounds, BATCH, &stream, || {
            // SAFETY: the plan (alive, not locked elsewhere: this thread
            // alone uses it) was built for this device's architecture by
            // the checks above; every pointer is a live buffer of its
            // tensor's span, the workspace the plan's size.
            ok("execute", unsafe {
                api.cudnnBackendExecute(h, plan_raw, pack)
            })
        })?;
        drop(_on);
        stream.synchronize()?;
        // SAFETY: created above, destroyed once, no launch uses it any more.
        let _ = unsafe { api.cudnnBackendDestroyDescriptor(pack) };
        println!(
            "| {label} | {} | {ours:.0} | {raw_ns:.0} | {:.0} | {checks:.0} | {ours_drain:.0} / {raw_drain:.0} |",
            plan.io().tensors.len(),
            ours - raw_ns,
        );
        drop(b);
        drop(buffers);
        drop(ws);
    }
    println!(
        "\nHost ns per launch: the enqueue of {BATCH} launches, up to the stream's synchronize \
         (fastest batch); the drain (the synchronize after them, median batch) is apart."
    );
    Ok(())
}

fn run() -> AnyResult<()> {
    let mut rounds = 15usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--rounds" => {
                rounds = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|&n| n >= 1)
                    .ok_or("--rounds takes a count >= 1")?;
            }
            other => return Err(format!("unknown argument `{other}`").into()),
        }
    }
    cudnn::graph::require_graph_support()?;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "bench_launch: {rounds} rounds; load average {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let target = match Device::count() {
        Ok(n) if n > 0 => Target::device(0)?,
        _ => Target::preset("h200")?,
    };
    let plans = plans(&target)?;
    host_half(rounds, &plans)?;
    ops::host_half(rounds)?;
    match Device::count() {
        Ok(n) if n > 0 => {
            gpu_half(rounds, &plans)?;
            ops::gpu_half(rounds)?;
        }
        _ => println!("\nGPU half skipped: no CUDA device (the crate's checks above need none)."),
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench_launch: {e}");
            ExitCode::FAILURE
        }
    }
}
