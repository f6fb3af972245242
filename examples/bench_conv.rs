//! `cargo run --release --example bench_conv [-- --exhaustive] [--runs N]`:
//! convolution throughput on real layers (ResNet-50: the 7x7/2 stem, 1x1,
//! 3x3 at 56/28/14/7; a MobileNetV2 depthwise 3x3; a dilated 3x3; a
//! ResNeXt 32-group 3x3; a 3-d 3x3x3), in NHWC bf16, NHWC f16 and NCHW f32,
//! for each direction (forward, backward data, backward filter).
//!
//! Prints a markdown table: the algorithm (heuristic by default, measured
//! with `--exhaustive`), its workspace, the device time per run and TFLOP/s
//! (CUDA events over N runs, after a warm-up), and the host time per plan
//! run (the time to queue one run: checks plus the one cuDNN call).
//!
//! Not a test: numbers depend on the machine. Exit status 1 when the CUDA
//! libraries or a device are missing, with a message saying which.

use std::process::ExitCode;
use std::time::Instant;

use cudnn::Scale;
use cudnn::dnn::{
    AlgoSearch, ConvDataType, ConvDescriptor, ConvProblem, FilterDescriptor, Handle, PlanOptions,
    TensorDescriptor, TensorFormat,
};
use cudnn::runtime::{Device, DeviceBuffer, Event, Stream};
use half::{bf16, f16};

trait Elem: ConvDataType {
    fn from_f32(v: f32) -> Self;
}
impl Elem for f32 {
    fn from_f32(v: f32) -> Self {
        v
    }
}
impl Elem for f16 {
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
}
impl Elem for bf16 {
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
}

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

struct Layer {
    name: &'static str,
    n: usize,
    c: usize,
    k: usize,
    spatial: &'static [usize],
    window: &'static [usize],
    pad: &'static [usize],
    stride: &'static [usize],
    dilation: &'static [usize],
    groups: usize,
}

const LAYERS: &[Layer] = &[
    Layer {
        name: "resnet50 stem 7x7/2",
        n: 32,
        c: 3,
        k: 64,
        spatial: &[224, 224],
        window: &[7, 7],
        pad: &[3, 3],
        stride: &[2, 2],
        dilation: &[1, 1],
        groups: 1,
    },
    Layer {
        name: "resnet50 1x1 @56",
        n: 32,
        c: 64,
        k: 256,
        spatial: &[56, 56],
        window: &[1, 1],
        pad: &[0, 0],
        stride: &[1, 1],
        dilation: &[1, 1],
        groups: 1,
    },
    Layer {
        name: "resnet50 3x3 @56",
        n: 32,
        c: 64,
        k: 64,
        spatial: &[56, 56],
        window: &[3, 3],
        pad: &[1, 1],
        stride: &[1, 1],
        dilation: &[1, 1],
        groups: 1,
    },
    Layer {
        name: "resnet50 3x3 @28",
        n: 32,
        c: 128,
        k: 128,
        spatial: &[28, 28],
        window: &[3, 3],
        pad: &[1, 1],
        stride: &[1, 1],
        dilation: &[1, 1],
        groups: 1,
    },
    Layer {
        name: "resnet50 3x3 @14",
        n: 32,
        c: 256,
        k: 256,
        spatial: &[14, 14],
        window: &[3, 3],
        pad: &[1, 1],
        stride: &[1, 1],
        dilation: &[1, 1],
        groups: 1,
    },
    Layer {
        name: "resnet50 3x3 @7",
        n: 32,
        c: 512,
        k: 512,
        spatial: &[7, 7],
        window: &[3, 3],
        pad: &[1, 1],
        stride: &[1, 1],
        dilation: &[1, 1],
        groups: 1,
    },
    Layer {
        name: "mobilenetv2 dw 3x3/2",
        n: 32,
        c: 144,
        k: 144,
        spatial: &[56, 56],
        window: &[3, 3],
        pad: &[1, 1],
        stride: &[2, 2],
        dilation: &[1, 1],
        groups: 144,
    },
    Layer {
        name: "dilated 3x3 d2 @28",
        n: 32,
        c: 256,
        k: 256,
        spatial: &[28, 28],
        window: &[3, 3],
        pad: &[2, 2],
        stride: &[1, 1],
        dilation: &[2, 2],
        groups: 1,
    },
    Layer {
        name: "resnext 3x3 g32 @56",
        n: 32,
        c: 128,
        k: 128,
        spatial: &[56, 56],
        window: &[3, 3],
        pad: &[1, 1],
        stride: &[1, 1],
        dilation: &[1, 1],
        groups: 32,
    },
    Layer {
        name: "3d 3x3x3 @16x56x56",
        n: 8,
        c: 64,
        k: 64,
        spatial: &[16, 56, 56],
        window: &[3, 3, 3],
        pad: &[1, 1, 1],
        stride: &[1, 1, 1],
        dilation: &[1, 1, 1],
        groups: 1,
    },
];

impl Layer {
    fn x_dims(&self) -> Vec<usize> {
        [self.n, self.c]
            .iter()
            .chain(self.spatial)
            .copied()
            .collect()
    }
    fn w_dims(&self) -> Vec<usize> {
        [self.k, self.c / self.groups]
            .iter()
            .chain(self.window)
            .copied()
            .collect()
    }
}

fn strides(dims: &[usize], layout: TensorFormat) -> Vec<usize> {
    let order: Vec<usize> = match layout {
        TensorFormat::Nchw => (0..dims.len()).collect(),
        TensorFormat::Nhwc => std::iter::once(0)
            .chain(2..dims.len())
            .chain(std::iter::once(1))
            .collect(),
    };
    let mut s = vec![0; dims.len()];
    let mut step = 1;
    for &d in order.iter().rev() {
        s[d] = step;
        step *= dims[d];
    }
    s
}

/// Device memory filled with small pseudo-random values.
fn random<T: Elem>(len: usize, seed: u64) -> cudnn::Result<DeviceBuffer<T>> {
    let mut s = seed;
    let host: Vec<T> = (0..len)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            T::from_f32(((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5)
        })
        .collect();
    DeviceBuffer::from_host(&host)
}

struct Timing {
    gpu_ms: f32,
    host_us: f64,
}

/// Time `runs` calls of `f`: device time with events, host time to queue.
fn time(
    stream: &Stream,
    runs: usize,
    mut f: impl FnMut() -> cudnn::Result<()>,
) -> AnyResult<Timing> {
    for _ in 0..2 {
        f()?;
    }
    stream.synchronize()?;
    let (start, end) = (Event::new()?, Event::new()?);
    start.record(stream)?;
    let t0 = Instant::now();
    for _ in 0..runs {
        f()?;
    }
    let host = t0.elapsed();
    end.record(stream)?;
    end.synchronize()?;
    Ok(Timing {
        gpu_ms: Event::elapsed_ms(&start, &end)? / runs as f32,
        host_us: host.as_secs_f64() * 1e6 / runs as f64,
    })
}

struct Row {
    layer: &'static str,
    config: String,
    direction: &'static str,
    result: Result<(String, usize, Timing), String>,
    gflop: f64,
}

fn bench<T: Elem>(
    h: &mut Handle,
    stream: &Stream,
    layer: &Layer,
    layout: TensorFormat,
    opts: &PlanOptions<'_>,
    runs: usize,
    rows: &mut Vec<Row>,
) -> AnyResult<()> {
    let config = format!(
        "{} {}",
        if layout == TensorFormat::Nhwc {
            "NHWC"
        } else {
            "NCHW"
        },
        T::NAME
    );
    let (xd, wd) = (layer.x_dims(), layer.w_dims());
    let x_desc = TensorDescriptor::<T>::new(&xd, &strides(&xd, layout))?;
    let w_desc = FilterDescriptor::<T>::new(layout, &wd)?;
    let conv =
        ConvDescriptor::new(layer.pad, layer.stride, layer.dilation)?.with_groups(layer.groups)?;
    let fwd = ConvProblem::forward(&x_desc, &w_desc, &conv)?;
    let gflop = fwd.flops() / 1e9;
    let x = random::<T>(x_desc.len_required(), 1)?;
    let w = random::<T>(w_desc.element_count(), 2)?;
    let mut y = random::<T>(fwd.y().len_required(), 3)?;
    let mut dx = random::<T>(x_desc.len_required(), 4)?;
    let mut dw = random::<T>(w_desc.element_count(), 5)?;
    let (a, b) = (
        <T::Scale as Scale>::from_f64(1.0),
        <T::Scale as Scale>::from_f64(0.0),
    );

    let r = fwd.plan_on(h, opts, &x, &w, &mut y).and_then(|p| {
        let t = time(stream, runs, || p.run(h, a, &x, &w, b, &mut y)).map_err(|e| err(&*e))?;
        Ok((p.algo().to_string(), p.workspace_size(), t))
    });
    rows.push(Row {
        layer: layer.name,
        config: config.clone(),
        direction: "fwd",
        result: r.map_err(|e| e.to_string()),
        gflop,
    });

    let dy = random::<T>(fwd.y().len_required(), 6)?;
    let bd = ConvProblem::backward_data(&x_desc, &w_desc, &conv)?;
    let r = bd.plan_on(h, opts, &w, &dy, &mut dx).and_then(|p| {
        let t = time(stream, runs, || p.run(h, a, &w, &dy, b, &mut dx)).map_err(|e| err(&*e))?;
        Ok((p.algo().to_string(), p.workspace_size(), t))
    });
    rows.push(Row {
        layer: layer.name,
        config: config.clone(),
        direction: "bwd data",
        result: r.map_err(|e| e.to_string()),
        gflop,
    });

    let bf = ConvProblem::backward_filter(&x_desc, &w_desc, &conv)?;
    let r = bf.plan_on(h, opts, &x, &dy, &mut dw).and_then(|p| {
        let t = time(stream, runs, || p.run(h, a, &x, &dy, b, &mut dw)).map_err(|e| err(&*e))?;
        Ok((p.algo().to_string(), p.workspace_size(), t))
    });
    rows.push(Row {
        layer: layer.name,
        config,
        direction: "bwd filter",
        result: r.map_err(|e| e.to_string()),
        gflop,
    });
    Ok(())
}

fn err(e: &dyn std::error::Error) -> cudnn::Error {
    cudnn::Error::invalid("timing", "failed", e)
}

fn missing() -> Option<String> {
    if let Err(e) = Handle::library_version() {
        return Some(format!("cuDNN could not be loaded:\n{e}"));
    }
    match Device::count() {
        Ok(0) => Some("no CUDA device: cudaGetDeviceCount reported 0 devices".into()),
        Ok(_) => None,
        Err(e) => Some(e.to_string()),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let search = if args.iter().any(|a| a == "--exhaustive") {
        AlgoSearch::Exhaustive
    } else {
        AlgoSearch::Heuristic
    };
    let runs = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(10usize)
        .max(1);
    if let Some(why) = missing() {
        eprintln!("bench_conv needs the CUDA libraries and a CUDA device; {why}");
        eprintln!("(`cargo run --example doctor` shows where the libraries were looked for)");
        return ExitCode::FAILURE;
    }
    let run = || -> AnyResult<Vec<Row>> {
        let dev = Device::new(0)?;
        println!(
            "device 0: {}; {search:?} search; {runs} timed runs each\n",
            dev.name()?
        );
        let stream = dev.create_stream()?;
        let mut h = Handle::new(&stream)?;
        let opts = PlanOptions::new(search);
        let mut rows = Vec::new();
        for layer in LAYERS {
            bench::<bf16>(
                &mut h,
                &stream,
                layer,
                TensorFormat::Nhwc,
                &opts,
                runs,
                &mut rows,
            )?;
            bench::<f16>(
                &mut h,
                &stream,
                layer,
                TensorFormat::Nhwc,
                &opts,
                runs,
                &mut rows,
            )?;
            bench::<f32>(
                &mut h,
                &stream,
                layer,
                TensorFormat::Nchw,
                &opts,
                runs,
                &mut rows,
            )?;
        }
        Ok(rows)
    };
    let rows = match run() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("bench_conv failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "| layer | config | direction | algorithm | workspace MiB | GPU ms/run | TFLOP/s | host µs/run |"
    );
    println!("|---|---|---|---|---:|---:|---:|---:|");
    for r in &rows {
        match &r.result {
            Ok((algo, ws, t)) => println!(
                "| {} | {} | {} | {} | {:.1} | {:.4} | {:.1} | {:.1} |",
                r.layer,
                r.config,
                r.direction,
                algo,
                *ws as f64 / (1 << 20) as f64,
                t.gpu_ms,
                r.gflop / t.gpu_ms as f64,
                t.host_us
            ),
            Err(e) => println!(
                "| {} | {} | {} | unsupported: {} | | | | |",
                r.layer,
                r.config,
                r.direction,
                e.replace('|', "/").lines().next().unwrap_or_default()
            ),
        }
    }
    ExitCode::SUCCESS
}
