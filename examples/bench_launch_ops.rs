//! The launch overhead of the other calls (`bench_launch`'s second part,
//! issue 34 item 2): a legacy forward convolution
//! (`ConvForwardPlan::run`), a cuBLASLt matmul (`MatmulPlan::run`, with 3,
//! 4 and 5 buffers: plain, bias, GELU with its auxiliary output and bias)
//! and an NCCL all-reduce (`Communicator::all_reduce`).
//!
//! Host half (no device): each call's `launch_checks` (the checks of the
//! safe call that need no handle, stream or communicator, the same code,
//! and no library call) on views over addresses that are never
//! dereferenced. For NCCL, [`LaunchChecks`] runs the whole host path of
//! the direct call (group refusal, devices, lengths, the split family, the
//! stream's checks and queue hold, the communicator's state) with a
//! communicator NCCL never sees, up to the library call. What needs a
//! device is left out there and shows in the GPU half's difference: for
//! the convolution, the handle's stream checks, its device made current,
//! the plan's one-time workspace check and the handle's workspace looked
//! up; for cuBLASLt, the plan's lock, the handle's device made current and
//! the epilogue pointers set when they changed.
//!
//! GPU half (with a device): the whole safe call against the same call
//! through the raw `-sys` crate (`cudnnConvolutionForward` with the plan's
//! algorithm, `cublasLtMatmul` with the plan's descriptors and algorithm,
//! `ncclAllReduce` on the same communicator): host ns per launch, 200
//! launches enqueued and timed up to the stream's synchronize, the drain
//! after them shown apart, on both sides alike.

use std::ffi::c_void;
use std::hint::black_box;

use cudnn::blas::{Epilogue, EpilogueArgs, Layout, LtHandle, MatmulPlan, MatmulSpec};
use cudnn::dnn::{
    AlgoChoice, AlgoSearch, ConvDescriptor, ConvForwardPlan, ConvProblem, FilterDescriptor,
    PlanOptions, TensorDescriptor,
};
use cudnn::nccl::{Communicator, LaunchChecks, ReduceOp};
use cudnn::runtime::{Device, DeviceBuffer, DeviceSlice, DeviceSliceMut, Stream};
use half::f16;

use super::{AnyResult, BATCH, time_enqueue, time_ns, time_ns2};

/// The convolution: NCHW f32, 1 x 32 x 16 x 16, 32 filters of 3 x 3, padding 1
/// (small, so the host's work and not the GPU's sets the pace).
fn conv_problem() -> AnyResult<(TensorDescriptor<f32>, FilterDescriptor<f32>, ConvDescriptor)> {
    Ok((
        TensorDescriptor::<f32>::nchw(1, C, HW, HW)?,
        FilterDescriptor::<f32>::nchw(C, C, 3, 3)?,
        ConvDescriptor::new_2d([1, 1], [1, 1], [1, 1])?,
    ))
}

/// The matmuls: f16, row-major M³, with `epi`.
fn lt_spec(epi: Epilogue) -> MatmulSpec {
    MatmulSpec::new(
        Layout::row_major(M, M),
        Layout::row_major(M, M),
        Layout::row_major(M, M),
    )
    .with_epilogue(epi)
}

/// The convolution's channels and image side.
const C: usize = 32;
const HW: usize = 16;
/// The matmul's side.
const M: usize = 128;
/// The all-reduce's elements.
const COUNT: usize = 1024;

const LT_CASES: [(&str, Epilogue); 3] = [
    ("plain", Epilogue::None),
    ("bias", Epilogue::Bias),
    ("gelu + aux + bias", Epilogue::GeluTanhAuxBias),
];

/// Fake, aligned, distinct device addresses: nothing dereferences them.
struct Fake(usize);

impl Fake {
    fn next<T>(&mut self, len: usize) -> *mut T {
        let at = self.0;
        self.0 += (len * std::mem::size_of::<T>()).next_multiple_of(256) + 256;
        at as *mut T
    }
}

/// The host half: each call's checks on views never dereferenced.
pub fn host_half(rounds: usize) -> AnyResult<()> {
    println!("\n## Other calls, the crate's checks per launch (ns; no device, nothing launched)\n");
    println!(
        "| call | buffers | crate checks | (median) | what is left out (needs a device or a library) |"
    );
    println!("|---|---|---|---|---|");
    let mut fake = Fake(0x7d00_0000_0000);

    // The legacy convolution: a plan from a known choice needs no device.
    let (x, w, conv) = conv_problem()?;
    let problem = ConvProblem::forward(&x, &w, &conv)?;
    let plan: ConvForwardPlan<f32> = problem.plan_with(AlgoChoice {
        algo: 1, // CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM
        math_type: 0,
        workspace_bytes: 0,
    })?;
    let y_len: usize = problem.output_shape().iter().product();
    let (xl, wl) = (C * HW * HW, C * C * 9);
    let (xp, wp, yp) = (
        fake.next::<f32>(xl),
        fake.next::<f32>(wl),
        fake.next::<f32>(y_len),
    );
    let (ns, median) = time_ns2(rounds, || {
        // SAFETY: the views reach only `launch_checks`, which dereferences nothing.
        let (xv, wv, yv) = unsafe {
            (
                DeviceSlice::<f32>::from_raw_parts(xp, xl),
                DeviceSlice::<f32>::from_raw_parts(wp, wl),
                DeviceSliceMut::<f32>::from_raw_parts_mut(yp, y_len),
            )
        };
        plan.launch_checks(black_box(xv), wv, yv, None)?;
        Ok(())
    })?;
    println!(
        "| ConvForwardPlan::run (f32 1x32x16x16, 3x3) | 3 | {ns:.0} | {median:.0} | the buffers' devices (no device given), the handle's stream checks and device current, the workspace looked up |"
    );

    // cuBLASLt: the spec's checked shape is what a plan keeps.
    for (label, epi) in LT_CASES {
        let spec = lt_spec(epi);
        let checks = spec.launch_checks::<f16, f16>()?;
        let shape = spec.check::<f16, f16>()?;
        let n = M * M;
        let (ap, bp, dp) = (
            fake.next::<f16>(n),
            fake.next::<f16>(n),
            fake.next::<f16>(n),
        );
        let bias_len = shape.bias_buffer_len();
        let aux_len = shape.aux_bytes();
        let (biasp, auxp) = (fake.next::<f16>(bias_len), fake.next::<u8>(aux_len));
        let buffers = 3 + usize::from(epi.bias_use().is_some()) + usize::from(epi.aux().is_some());
        let (ns, median) = time_ns2(rounds, || {
            // SAFETY: as above.
            let (av, bv, dv) = unsafe {
                (
                    DeviceSlice::<f16>::from_raw_parts(ap, n),
                    DeviceSlice::<f16>::from_raw_parts(bp, n),
                    DeviceSliceMut::<f16>::from_raw_parts_mut(dp, n),
                )
            };
            let mut args = EpilogueArgs::none();
            if epi.bias_use().is_some() {
                // SAFETY: as above.
                args = args.bias(unsafe { DeviceSlice::<f16>::from_raw_parts(biasp, bias_len) });
            }
            if epi.aux().is_some() {
                // SAFETY: as above.
                args = args
                    .aux_out(unsafe { DeviceSliceMut::<u8>::from_raw_parts_mut(auxp, aux_len) });
            }
            checks.run(1.0, black_box(av), bv, 0.0, dv, args, None)?;
            Ok(())
        })?;
        println!(
            "| MatmulPlan::run (f16 128³, {label}) | {buffers} | {ns:.0} | {median:.0} | the buffers' devices (no device given), the plan's lock, the handle's stream checks and device current, changed epilogue pointers set |"
        );
    }

    // NCCL: the whole host path of the direct call, no library call.
    let checks = LaunchChecks::new()?;
    let stream = Stream::legacy();
    let count = COUNT;
    let (sp, rp) = (fake.next::<f32>(count), fake.next::<f32>(count));
    let (ns, median) = time_ns2(rounds, || {
        // SAFETY: as above (`LaunchChecks` never calls NCCL).
        let (sv, rv) = unsafe {
            (
                DeviceSlice::<f32>::from_raw_parts(sp, count),
                DeviceSliceMut::<f32>::from_raw_parts_mut(rp, count),
            )
        };
        checks.all_reduce(black_box(sv), rv, ReduceOp::Sum, &stream)?;
        Ok(())
    })?;
    println!(
        "| Communicator::all_reduce (f32, 1 Ki, legacy stream) | 2 | {ns:.0} | {median:.0} | nothing of the crate's code (the library call alone); the views carry no device, so the device comparisons run and pass at once |"
    );
    Ok(())
}

/// The epilogue's buffers `epi` needs, of `bias` and `aux`.
fn epi_args<'a>(
    epi: Epilogue,
    bias: &'a DeviceBuffer<f16>,
    aux: &'a mut DeviceBuffer<u8>,
) -> EpilogueArgs<'a, f16> {
    let mut a = EpilogueArgs::none();
    if epi.bias_use().is_some() {
        a = a.bias(bias);
    }
    if epi.aux().is_some() {
        a = a.aux_out(aux);
    }
    a
}

/// A row of the GPU table: enqueue ns per launch and drain µs per batch
/// (`(enqueue, drain)` of the safe and the raw call).
fn gpu_row(label: &str, buffers: usize, ours: (f64, f64), raw: (f64, f64), checks: Option<f64>) {
    let checks = checks.map_or("-".to_string(), |c| format!("{c:.0}"));
    println!(
        "| {label} | {buffers} | {:.0} | {:.0} | {:.0} | {checks} | {:.0} / {:.0} |",
        ours.0,
        raw.0,
        ours.0 - raw.0,
        ours.1,
        raw.1
    );
}

/// The GPU half: each safe call against the same call through the raw crate.
pub fn gpu_half(rounds: usize) -> AnyResult<()> {
    let dev = Device::new(0)?;
    let stream = dev.create_stream()?;
    println!(
        "\n## Other calls against the raw call (host ns per launch, {}, on device 0)\n",
        dev.name()?
    );
    println!(
        "| call | buffers | safe call | raw -sys call | difference | crate checks alone | drain µs (safe / raw) |"
    );
    println!("|---|---|---|---|---|---|---|");

    // The legacy convolution.
    {
        use cudnn::sys::cudnn as raw;
        let api = raw::load()?;
        let mut handle = cudnn::dnn::Handle::new(&stream)?;
        let (x, w, conv) = conv_problem()?;
        let problem = ConvProblem::forward(&x, &w, &conv)?;
        let plan = problem.plan(&mut handle, &PlanOptions::new(AlgoSearch::Heuristic))?;
        let y_len: usize = problem.output_shape().iter().product();
        let xb = DeviceBuffer::<f32>::zeroed(C * HW * HW)?;
        let wb = DeviceBuffer::<f32>::zeroed(C * C * 9)?;
        let mut yb = DeviceBuffer::<f32>::zeroed(y_len)?;
        let ours = time_enqueue(rounds, BATCH, &stream, || {
            plan.run(&mut handle, 1.0, &xb, &wb, 0.0, &mut yb)?;
            Ok(())
        })?;
        let checks = time_ns(rounds, || {
            plan.launch_checks(&xb, &wb, &mut yb, Some(dev))?;
            Ok(())
        })?;
        let cudnn::dnn::ConvAlgo::Forward(algo) = plan.algo() else {
            return Err("the forward plan has no forward algorithm".into());
        };
        let mut ws = DeviceBuffer::<u8>::zeroed(plan.workspace_size().max(1))?;
        let (ws_ptr, ws_len) = (ws.as_raw_mut(), plan.workspace_size());
        let h = handle.as_raw();
        let (xp, wp, yp) = (xb.as_raw(), wb.as_raw(), yb.as_raw_mut());
        let (alpha, beta) = (1.0f32, 0.0f32);
        let _on = dev.guard()?;
        let raw_ns = time_enqueue(rounds, BATCH, &stream, || {
            // SAFETY: live handle and descriptors (the plan's); the
            // buffers hold what the descriptors address; the workspace
            // holds the plan's size; alpha and beta are f32 for f32 data.
            let st = unsafe {
                api.cudnnConvolutionForward(
                    h,
                    (&alpha as *const f32).cast(),
                    plan.x().as_raw(),
                    xp.cast(),
                    plan.w().as_raw(),
                    wp.cast(),
                    plan.conv().as_raw(),
                    algo,
                    ws_ptr,
                    ws_len,
                    (&beta as *const f32).cast(),
                    plan.y().as_raw(),
                    yp.cast(),
                )
            }?;
            if st != raw::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
                return Err(format!("cudnnConvolutionForward returned {}", st.0).into());
            }
            Ok(())
        })?;
        drop(_on);
        stream.synchronize()?;
        drop(ws);
        gpu_row(
            "ConvForwardPlan::run (f32 1x32x16x16, 3x3)",
            3,
            ours,
            raw_ns,
            Some(checks),
        );
    }

    // cuBLASLt.
    {
        use cudnn::sys::cublas as raw;
        let api = raw::load_lt()?;
        let lt = LtHandle::new(&stream)?;
        let n = M * M;
        let ab = DeviceBuffer::<f16>::zeroed(n)?;
        let bb = DeviceBuffer::<f16>::zeroed(n)?;
        let mut db = DeviceBuffer::<f16>::zeroed(n)?;
        for (label, epi) in LT_CASES {
            let spec = lt_spec(epi);
            let mut plan = MatmulPlan::<f16, f16>::new(&lt, &spec)?;
            let shape = *plan.shape();
            let bias = DeviceBuffer::<f16>::zeroed(shape.bias_buffer_len().max(1))?;
            let mut aux = DeviceBuffer::<u8>::zeroed(shape.aux_bytes().max(1))?;
            let buffers =
                3 + usize::from(epi.bias_use().is_some()) + usize::from(epi.aux().is_some());
            let ours = time_enqueue(rounds, BATCH, &stream, || {
                plan.run(
                    &lt,
                    1.0,
                    &ab,
                    &bb,
                    0.0,
                    &mut db,
                    epi_args(epi, &bias, &mut aux),
                )?;
                Ok(())
            })?;
            let lt_checks = spec.launch_checks::<f16, f16>()?;
            let checks = time_ns(rounds, || {
                lt_checks.run(
                    1.0,
                    &ab,
                    &bb,
                    0.0,
                    &mut db,
                    epi_args(epi, &bias, &mut aux),
                    Some(dev),
                )?;
                Ok(())
            })?;
            // The raw side: the plan's descriptors (their epilogue pointers
            // set to these buffers by the runs above) and the plan's
            // algorithm, a workspace of the handle's size.
            let algo = plan
                .heuristic_result()
                .ok_or("the plan has no algorithm (an empty D)")?;
            let d = plan.descriptors();
            let (desc, la, lb, lo) = (
                d.matmul_desc().as_raw(),
                d.first_layout().as_raw(),
                d.second_layout().as_raw(),
                d.output_layout().as_raw(),
            );
            // Row-major operands are swapped for the library (as the plan does).
            let (p1, p2) = if shape.swaps_operands() {
                (bb.as_raw(), ab.as_raw())
            } else {
                (ab.as_raw(), bb.as_raw())
            };
            let mut ws = DeviceBuffer::<u8>::zeroed(lt.workspace_size().max(1))?;
            let (ws_ptr, ws_len) = (ws.as_raw_mut(), lt.workspace_size());
            let dp = db.as_raw_mut();
            let (alpha, beta) = (1.0f32, 0.0f32);
            let _on = dev.guard()?;
            let raw_ns = time_enqueue(rounds, BATCH, &stream, || {
                // SAFETY: live handle and descriptors; the buffers hold
                // what the layouts address; the epilogue pointers are
                // live buffers of the shape's sizes; the plan's algorithm
                // for these descriptors on this device, its workspace
                // within the `ws_len` bytes given; alpha and beta are f32
                // (f16 data computes and scales in f32).
                let st = unsafe {
                    api.cublasLtMatmul(
                        lt.as_raw(),
                        desc,
                        (&alpha as *const f32).cast(),
                        p1.cast(),
                        la,
                        p2.cast(),
                        lb,
                        (&beta as *const f32).cast(),
                        dp.cast_const().cast(),
                        lo,
                        dp.cast(),
                        lo,
                        &algo.algo,
                        ws_ptr,
                        ws_len,
                        stream.as_raw(),
                    )
                }?;
                if st != raw::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                    return Err(format!("cublasLtMatmul returned {}", st.0).into());
                }
                Ok(())
            })?;
            drop(_on);
            stream.synchronize()?;
            drop(ws);
            gpu_row(
                &format!("MatmulPlan::run (f16 128³, {label})"),
                buffers,
                ours,
                raw_ns,
                Some(checks),
            );
        }
    }

    // NCCL: one rank on device 0.
    {
        use cudnn::sys::nccl as raw;
        let api = raw::load()?;
        let comm = Communicator::init_all(&[dev])?
            .pop()
            .ok_or("init_all gave no communicator")?;
        let count = COUNT;
        let send = DeviceBuffer::<f32>::zeroed(count)?;
        let mut recv = DeviceBuffer::<f32>::zeroed(count)?;
        let ours = time_enqueue(rounds, BATCH, &stream, || {
            comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &stream)?;
            Ok(())
        })?;
        let (sp, rp) = (
            send.as_raw().cast::<c_void>(),
            recv.as_raw_mut().cast::<c_void>(),
        );
        let c = comm.as_raw();
        let _on = dev.guard()?;
        let raw_ns = time_enqueue(rounds, BATCH, &stream, || {
            // SAFETY: a live communicator of this device; both buffers
            // hold `count` f32 and outlive the stream's work.
            let r = unsafe {
                api.ncclAllReduce(
                    sp,
                    rp,
                    count,
                    raw::ncclDataType_t::ncclFloat32,
                    raw::ncclRedOp_t::ncclSum,
                    c,
                    stream.as_raw(),
                )
            }?;
            if r != raw::ncclResult_t::ncclSuccess {
                return Err(format!("ncclAllReduce returned {}", r.0).into());
            }
            Ok(())
        })?;
        drop(_on);
        stream.synchronize()?;
        gpu_row(
            "Communicator::all_reduce (f32, 1 Ki, 1 rank)",
            2,
            ours,
            raw_ns,
            None,
        );
    }
    println!(
        "\nHost ns per launch: the enqueue of {BATCH} launches, up to the stream's synchronize \
         (fastest batch), the same on both sides; the drain (the synchronize after them, median \
         batch) is apart. The raw matmul runs the plan's algorithm. The NCCL checks alone are the \
         host table's (the communicator's path is the same)."
    );
    Ok(())
}
