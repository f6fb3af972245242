//! `cargo run --release --example bench_conv [-- --exhaustive] [--runs N] [--quick] [--csv FILE]`:
//! convolution throughput on real layers (ResNet-50: the 7x7/2 stem, 1x1,
//! 3x3 at 56/28/14/7; a MobileNetV2 depthwise 3x3; a dilated 3x3; a
//! ResNeXt 32-group 3x3; a 3-d 3x3x3), in NHWC bf16, NHWC f16 and NCHW f32,
//! for each direction (forward, backward data, backward filter). The case
//! list is [`LAYERS`] times [`CONFIGS`].
//!
//! Prints a markdown table: the algorithm (heuristic by default, measured
//! with `--exhaustive`), its workspace, the device time per run and TFLOP/s
//! (CUDA events over N runs, default 10, after a warm-up), and the host
//! time per plan run (the time to queue one run: checks plus the one cuDNN
//! call). `--quick` leaves out NHWC f16 (on current GPUs it runs the same
//! kernels as bf16) and times 5 runs unless `--runs` says otherwise.
//! `--csv FILE` also writes one row per case in the format of
//! `bench_csv.rs` (read by `xtask/device/compare_torch.py`).
//!
//! Not a test: numbers depend on the machine. Exit status 1 when the CUDA
//! libraries or a device are missing, with a message saying which.

use std::path::Path;
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

#[path = "bench_csv.rs"]
mod bench_csv;
use bench_csv::{Csv, CsvRow, dims, flag_value};

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

/// The layers, in table order.
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

/// Element type and layout of a pass over [`LAYERS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Config {
    NhwcBf16,
    NhwcF16,
    NchwF32,
}

/// The configurations, in table order; `--quick` leaves out NHWC f16.
const CONFIGS: &[Config] = &[Config::NhwcBf16, Config::NhwcF16, Config::NchwF32];

impl Layer {
    /// The `shape` column of the CSV.
    fn shape_key(&self) -> String {
        format!(
            "n={};c={};k={};spatial={};window={};pad={};stride={};dilation={};groups={}",
            self.n,
            self.c,
            self.k,
            dims(self.spatial),
            dims(self.window),
            dims(self.pad),
            dims(self.stride),
            dims(self.dilation),
            self.groups
        )
    }

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
    layer: &'static Layer,
    dtype: &'static str,
    layout: &'static str,
    direction: &'static str,
    result: Result<(String, usize, Timing), String>,
    gflop: f64,
}

/// The CSV `op` key of a direction.
fn op_key(direction: &str) -> &'static str {
    match direction {
        "fwd" => "fwd",
        "bwd data" => "bwd_data",
        _ => "bwd_filter",
    }
}

fn bench<T: Elem>(
    h: &mut Handle,
    stream: &Stream,
    layer: &'static Layer,
    layout: TensorFormat,
    opts: &PlanOptions<'_>,
    runs: usize,
    rows: &mut Vec<Row>,
) -> AnyResult<()> {
    let layout_name = if layout == TensorFormat::Nhwc {
        "NHWC"
    } else {
        "NCHW"
    };
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
        layer,
        dtype: T::NAME,
        layout: layout_name,
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
        layer,
        dtype: T::NAME,
        layout: layout_name,
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
        layer,
        dtype: T::NAME,
        layout: layout_name,
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
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench_conv failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Print one table row and write its CSV row.
fn report(r: &Row, csv: &mut Csv) -> AnyResult<()> {
    let mut out = CsvRow {
        suite: "conv",
        case: r.layer.name,
        op: op_key(r.direction),
        shape: r.layer.shape_key(),
        dtype: r.dtype,
        layout: r.layout,
        metric: "TFLOP/s",
        work: r.gflop * 1e9,
        device_us: None,
        host_us: None,
        detail: String::new(),
    };
    match &r.result {
        Ok((algo, ws, t)) => {
            println!(
                "| {} | {} {} | {} | {} | {:.1} | {:.4} | {:.1} | {:.1} |",
                r.layer.name,
                r.layout,
                r.dtype,
                r.direction,
                algo,
                *ws as f64 / (1 << 20) as f64,
                t.gpu_ms,
                r.gflop / t.gpu_ms as f64,
                t.host_us
            );
            out.device_us = Some(f64::from(t.gpu_ms) * 1e3);
            out.host_us = Some(t.host_us);
            out.detail = algo.clone();
        }
        Err(e) => {
            let first = e.lines().next().unwrap_or_default();
            println!(
                "| {} | {} {} | {} | unsupported: {} | | | | |",
                r.layer.name,
                r.layout,
                r.dtype,
                r.direction,
                first.replace('|', "/")
            );
            out.detail = format!("unsupported: {first}");
        }
    }
    csv.row(&out)?;
    Ok(())
}

fn run(args: &[String]) -> AnyResult<()> {
    let search = if args.iter().any(|a| a == "--exhaustive") {
        AlgoSearch::Exhaustive
    } else {
        AlgoSearch::Heuristic
    };
    let quick = args.iter().any(|a| a == "--quick");
    let runs = match flag_value(args, "--runs") {
        Some(v) => v
            .parse::<usize>()
            .map_err(|_| format!("--runs: not a number: {v}"))?
            .max(1),
        None if quick => 5,
        None => 10,
    };
    let configs: Vec<Config> = CONFIGS
        .iter()
        .copied()
        .filter(|&c| !(quick && c == Config::NhwcF16))
        .collect();
    if let Some(why) = missing() {
        return Err(format!(
            "bench_conv needs the CUDA libraries and a CUDA device; {why}\n\
             (`cargo run --example doctor` shows where the libraries were looked for)"
        )
        .into());
    }
    let mut csv = Csv::create(flag_value(args, "--csv").map(Path::new))?;
    let dev = Device::new(0)?;
    println!(
        "device 0: {}; cuDNN {}; {search:?} search; {runs} timed runs each\n",
        dev.name()?,
        Handle::library_version()?
    );
    let stream = dev.create_stream()?;
    let mut h = Handle::new(&stream)?;
    let opts = PlanOptions::new(search);
    println!(
        "| layer | config | direction | algorithm | workspace MiB | GPU ms/run | TFLOP/s | host µs/run |"
    );
    println!("|---|---|---|---|---:|---:|---:|---:|");
    // Rows are printed and written as each layer and configuration finishes,
    // so a run stopped by a time limit keeps what it measured.
    let mut rows = Vec::new();
    for layer in LAYERS {
        for &config in &configs {
            let (h, s, o, r) = (&mut h, &stream, &opts, &mut rows);
            match config {
                Config::NhwcBf16 => bench::<bf16>(h, s, layer, TensorFormat::Nhwc, o, runs, r)?,
                Config::NhwcF16 => bench::<f16>(h, s, layer, TensorFormat::Nhwc, o, runs, r)?,
                Config::NchwF32 => bench::<f32>(h, s, layer, TensorFormat::Nchw, o, runs, r)?,
            }
            for r in rows.drain(..) {
                report(&r, &mut csv)?;
            }
            csv.flush()?;
        }
    }
    csv.finish()?;
    Ok(())
}
