//! `cargo run --release --example bench_cuda_graphs [-- --iters N]`: eager
//! launches against the replay of a captured CUDA graph, for workloads
//! whose step is many small kernels, where launch overhead dominates:
//!
//! - a ResNet basic block at batch 1 (f32, 64 channels, 56 x 56: conv 3x3,
//!   ReLU, conv 3x3, residual add, ReLU; five library calls);
//! - decode-sized attention (bf16, batch 1, 32 heads, head dim 128, one
//!   query against 4096 keys, through the graph API's SDPA plan), 8 layers
//!   a step;
//! - one LeNet training step (the `lenet` example's network, batch 64:
//!   forward, backward, SGD; about 40 library calls).
//!
//! For each: the step once eagerly (it sizes every workspace), then the
//! mean per step over `--iters` steps (default 200) of the host time to
//! queue it and the device time between two events, eagerly and as one
//! `CudaGraphExec::launch` of the captured step. Prints a markdown table.
//!
//! Without a GPU it prints what it would run, says the GPU part was not
//! run, and exits 0. Not a test: numbers depend on the machine.

use std::process::ExitCode;
use std::time::Instant;

use cudnn::dnn::*;
use cudnn::graph::{Plan, Policy, SdpaConfig, Target};
use cudnn::runtime::{CaptureMode, Device, DeviceBuffer, Event, Stream};
use cudnn_examples::lenet::{self, Dataset, Lcg, Net};
use half::bf16;

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;
/// A workload: queues its steps on the stream and prints its row.
type Workload = fn(&Stream, usize) -> AnyResult<()>;

const DECODE_LAYERS: usize = 8;
const KV_LEN: i64 = 4096;

/// Mean host and device microseconds per step.
struct Timing {
    host_us: f64,
    device_us: f64,
}

/// Run `step` `iters` times after a warm-up; time the queueing on the host
/// and the work between two events on the device.
fn time(
    stream: &Stream,
    iters: usize,
    mut step: impl FnMut() -> AnyResult<()>,
) -> AnyResult<Timing> {
    for _ in 0..3 {
        step()?;
    }
    stream.synchronize()?;
    let (a, b) = (Event::new()?, Event::new()?);
    a.record(stream)?;
    let t0 = Instant::now();
    for _ in 0..iters {
        step()?;
    }
    let host = t0.elapsed().as_secs_f64();
    b.record(stream)?;
    b.synchronize()?;
    let dev_ms = f64::from(Event::elapsed_ms(&a, &b)?);
    let n = iters.max(1) as f64;
    Ok(Timing {
        host_us: host * 1e6 / n,
        device_us: dev_ms * 1e3 / n,
    })
}

/// Eager, then captured and replayed.
fn compare(
    name: &str,
    stream: &Stream,
    iters: usize,
    mut step: impl FnMut() -> AnyResult<()>,
) -> AnyResult<()> {
    step()?; // sizes the workspaces, outside any capture
    stream.synchronize()?;
    let eager = time(stream, iters, &mut step)?;
    let graph = stream.capture(CaptureMode::Global, |_| step())?;
    let nodes = graph.node_count()?;
    let exec = graph.instantiate()?;
    exec.upload(stream)?;
    let replay = time(stream, iters, || {
        // SAFETY: every buffer, handle and plan the step uses is owned by
        // the caller's frame and outlives this loop (the stream is
        // synchronized inside `time` before it returns).
        Ok(unsafe { exec.launch(stream) }?)
    })?;
    println!(
        "| {name} | {nodes} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2}x |",
        eager.host_us,
        eager.device_us,
        replay.host_us,
        replay.device_us,
        eager.device_us / replay.device_us.max(1e-9)
    );
    Ok(())
}

fn resnet_block(stream: &Stream, iters: usize) -> AnyResult<()> {
    let mut h = Handle::new(stream)?;
    let xd = TensorDescriptor::<f32>::nchw(1, 64, 56, 56)?;
    let wd = FilterDescriptor::<f32>::nchw(64, 64, 3, 3)?;
    let cd = ConvDescriptor::new_2d([1, 1], [1, 1], [1, 1])?;
    let conv = ConvProblem::forward(&xd, &wd, &cd)?.plan(&mut h, &PlanOptions::default())?;
    let n = 64 * 56 * 56;
    let fill = |len: usize, s: f32| -> cudnn::Result<DeviceBuffer<f32>> {
        DeviceBuffer::from_host(
            &(0..len)
                .map(|i| ((i % 17) as f32 - 8.0) * s)
                .collect::<Vec<_>>(),
        )
    };
    let (x, w1, w2) = (
        fill(n, 0.01)?,
        fill(64 * 576, 0.001)?,
        fill(64 * 576, 0.001)?,
    );
    let (mut y1, mut y2) = (fill(n, 0.0)?, fill(n, 0.0)?);
    let relu = ActivationDescriptor::relu()?;
    compare(
        "ResNet basic block, batch 1 (f32, 64 x 56 x 56)",
        stream,
        iters,
        || {
            conv.run(&mut h, 1.0, &x, &w1, 0.0, &mut y1)?;
            h.activation_forward_in_place(&relu, 1.0, DeviceTensorMut::new(&xd, &mut y1)?, 0.0)?;
            conv.run(&mut h, 1.0, &y1, &w2, 0.0, &mut y2)?;
            h.add_tensor(
                1.0,
                DeviceTensor::new(&xd, &x)?,
                1.0,
                DeviceTensorMut::new(&xd, &mut y2)?,
            )?;
            h.activation_forward_in_place(&relu, 1.0, DeviceTensorMut::new(&xd, &mut y2)?, 0.0)?;
            Ok(())
        },
    )
}

fn decode_cfg() -> SdpaConfig {
    SdpaConfig::new(1, 32, 1, 128, cudnn::graph::DType::BF16).kv_len(KV_LEN)
}

/// The decode attention plan for `target`.
fn decode_plan(target: &Target) -> AnyResult<Plan> {
    let cfg = decode_cfg();
    let mut g = cudnn::graph::Graph::new();
    let q = g.input("q", cfg.q_spec()?)?;
    let k = g.input("k", cfg.k_spec()?)?;
    let v = g.input("v", cfg.v_spec()?)?;
    let f = g.sdpa_forward(q, k, v, &cfg)?;
    g.rename(f.o, "o")?;
    Ok(Plan::build(&g.build()?, target, &Policy::default())?.0)
}

fn decode_attention(stream: &Stream, iters: usize) -> AnyResult<()> {
    let cfg = decode_cfg();
    let plan = decode_plan(&Target::device(0)?)?;
    let mut h = Handle::new(stream)?;
    h.reserve_workspace(plan.workspace_size())?;
    let elems = |s: cudnn::Result<cudnn::graph::TensorSpec>| -> AnyResult<usize> {
        Ok(s?.span_bytes()? / 2)
    };
    let qb = DeviceBuffer::from_host(&vec![bf16::from_f32(0.01); elems(cfg.q_spec())?])?;
    let kb = DeviceBuffer::from_host(&vec![bf16::from_f32(0.02); elems(cfg.k_spec())?])?;
    let vb = DeviceBuffer::from_host(&vec![bf16::from_f32(0.03); elems(cfg.v_spec())?])?;
    let mut ob = DeviceBuffer::<bf16>::zeroed(elems(cfg.o_spec())?)?;
    let mut b = plan.bindings();
    b.input("q", &qb)?
        .input("k", &kb)?
        .input("v", &vb)?
        .output("o", &mut ob)?;
    compare(
        &format!("decode attention x{DECODE_LAYERS} (bf16, 32 heads, s_q 1, s_kv {KV_LEN})"),
        stream,
        iters,
        || {
            for _ in 0..DECODE_LAYERS {
                plan.execute(&mut h, &mut b)?;
            }
            Ok(())
        },
    )
}

fn lenet_step(stream: &Stream, iters: usize) -> AnyResult<()> {
    let mut rng = Lcg::new(lenet::INIT_SEED);
    let mut net = Net::new(stream, &mut rng)?;
    net.blas
        .set_workspace(cudnn::blas::Handle::recommended_workspace_size(9))?;
    let data = Dataset::generate(lenet::BATCH, lenet::TRAIN_SEED);
    let batch: Vec<usize> = (0..lenet::BATCH).collect();
    net.load(&data, &batch)?;
    compare("LeNet training step (batch 64)", stream, iters, || {
        net.forward(true)?;
        net.backward()?;
        Ok(net.sgd(lenet::LEARNING_RATE)?)
    })
}

fn run(iters: usize) -> AnyResult<()> {
    let dev = Device::new(0)?;
    println!(
        "bench_cuda_graphs: device 0: {}, {iters} steps each\n",
        dev.name()?
    );
    println!(
        "| workload | graph nodes | eager host us/step | eager device us/step | replay host us/step | replay device us/step | device speed-up |"
    );
    println!("|---|---|---|---|---|---|---|");
    let stream = dev.create_stream()?;
    let mut failed = 0;
    let runs: [(&str, Workload); 3] = [
        ("ResNet block", resnet_block),
        ("decode attention", decode_attention),
        ("LeNet step", lenet_step),
    ];
    for (name, f) in runs {
        if let Err(e) = f(&stream, iters) {
            println!("| {name} | failed: {e} | | | | | |");
            failed += 1;
        }
    }
    if failed > 0 {
        return Err(format!("{failed} workload(s) failed").into());
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let iters = match args.as_slice() {
        [] => 200,
        [flag, n] if flag == "--iters" => match n.parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => {
                eprintln!("bench_cuda_graphs: --iters takes a positive count, got {n:?}");
                return ExitCode::FAILURE;
            }
        },
        _ => {
            eprintln!("usage: bench_cuda_graphs [--iters N]");
            return ExitCode::FAILURE;
        }
    };
    match Device::count() {
        Ok(n) if n > 0 => {}
        other => {
            let why = match other {
                Ok(_) => "no CUDA device".to_string(),
                Err(e) => e.to_string(),
            };
            println!("bench_cuda_graphs: {why}");
            println!("would run, eagerly and as a replayed CUDA graph, {iters} steps of:");
            println!("  - a ResNet basic block at batch 1 (f32, 64 x 56 x 56)");
            println!(
                "  - decode attention x{DECODE_LAYERS} (bf16, 32 heads, head dim 128, s_q 1, s_kv {KV_LEN})"
            );
            println!("  - one LeNet training step (batch 64)");
            match Target::preset("h200")
                .map_err(Into::into)
                .and_then(|t| decode_plan(&t))
            {
                Ok(p) => println!(
                    "planned the decode attention for an H200 without a device: engine {:?}, workspace {} B",
                    p.engine(),
                    p.workspace_size()
                ),
                Err(e) => println!("could not plan the decode attention for an H200: {e}"),
            }
            println!("the GPU part was not run");
            return ExitCode::SUCCESS;
        }
    }
    match run(iters) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench_cuda_graphs: failed: {e}");
            ExitCode::FAILURE
        }
    }
}
