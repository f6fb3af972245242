//! `cargo run --release --example bench_conv [-- --exhaustive] [--runs N] [--quick] [--csv FILE]
//! [--api legacy|graph|both] [--no-tf32] [--graph-attempts N] [--legacy-tc]
//! [--plan-only [--target NAME]]`:
//! convolution throughput on real layers (ResNet-50: the 7x7/2 stem, 1x1,
//! 3x3 at 56/28/14/7; a MobileNetV2 depthwise 3x3; a dilated 3x3; a
//! ResNeXt 32-group 3x3; a 3-d 3x3x3), in NHWC bf16, NHWC f16 and NCHW f32,
//! for each direction (forward, backward data, backward filter). The case
//! list is [`LAYERS`] times [`CONFIGS`].
//!
//! Each case runs through both of cuDNN's APIs (`--api` picks one):
//! - the legacy API (`cudnn::dnn`, `cudnnConvolution*`): the algorithm is
//!   cuDNN's heuristic choice by default, measured (`cudnnFind*AlgorithmEx`)
//!   with `--exhaustive`;
//! - the graph API (`cudnn::graph`, rows marked `(graph)`): every engine
//!   configuration the heuristics (mode A, then fallback) offer is built
//!   and timed, the fastest kept (`Plan::autotune`), as PyTorch's
//!   `cudnn.benchmark = True` does (`bench_conv_graph.rs`): every accepted
//!   configuration is timed unless `--graph-attempts N` caps them (the
//!   detail column says `timed M of N accepted`).
//!
//! `--legacy-tc` adds table rows (not CSV rows) `(legacy, fixed)`: the
//! non-Winograd ones of the algorithms NVIDIA's legacy-API guide lists for
//! tensor cores (forward IMPLICIT_PRECOMP_GEMM, backward ALGO_1; the list
//! also has the `*_WINOGRAD_NONFUSED` ones, left out here), fixed, to tell
//! a search that picked a slower algorithm from algorithms that are slow.
//! Legacy rows name the math type the algorithm ran with and the time the
//! measured search saw.
//!
//! `--plan-only` needs no device: it plans every graph case for a preset
//! target (`--target`, default `h100`) and prints what cuDNN offers.
//!
//! f32 data may run on tensor cores as TF32 (legacy: `MathPolicy::AllowTf32`;
//! graph: `Policy::allow_tf32`), as PyTorch's convolutions do by default;
//! the CSV says `tf32` for those rows. `--no-tf32` keeps f32 in f32 (CSV
//! `f32`).
//!
//! Prints a markdown table: the algorithm or engine, its workspace, the
//! device time per run and TFLOP/s, and the host time per plan run (the
//! time to queue one run: checks plus the one cuDNN call). The timing loop
//! is `compare_torch.py`'s `time_case`: 3 warm-up runs, one run timed alone
//! to size the loop, then CUDA events around a loop of about 50 ms (5 to
//! 500 runs, and at least `--runs N`, default 10), so the gap before the
//! first queued run weighs as little here as in PyTorch's row. `--quick`
//! leaves out NHWC f16 (on current GPUs it runs the same kernels as bf16)
//! and takes at least 5 runs unless `--runs` says otherwise. `--csv FILE`
//! also writes one row per case in
//! the format of `bench_csv.rs` (read by `xtask/device/compare_torch.py`;
//! graph rows have the op keys `fwd_graph`, `bwd_data_graph`,
//! `bwd_filter_graph`).
//!
//! Not a test: numbers depend on the machine. Exit status 1 when the CUDA
//! libraries or a device are missing, with a message saying which (after
//! the list of what would have run).

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use cudnn::Scale;
use cudnn::dnn::{
    AlgoSearch, ConvAlgo, ConvDataType, ConvDescriptor, ConvProblem, FilterDescriptor, Handle,
    MathPolicy, PlanOptions, TensorDescriptor, TensorFormat,
};
use cudnn::graph::{DType, Policy, Target};
use cudnn::runtime::{Device, DeviceBuffer, Event, Stream};
use half::{bf16, f16};

pub(crate) trait Elem: ConvDataType {
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
pub(crate) mod bench_csv;
use bench_csv::{Csv, CsvRow, dims, flag_value};

#[path = "bench_conv_graph.rs"]
pub(crate) mod graph;
use graph::{Bufs, Dir};

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

pub(crate) struct Layer {
    pub(crate) name: &'static str,
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
pub(crate) const LAYERS: &[Layer] = &[
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

pub(crate) struct Timing {
    gpu_ms: f32,
    host_us: f64,
}

/// The loop `compare_torch.py`'s `time_case` times: about this long...
const TARGET_LOOP_S: f64 = 0.05;
/// ...in this many runs at most (at least `MIN_ITERS`, and at least `--runs`).
const MIN_ITERS: usize = 5;
const MAX_ITERS: usize = 500;

/// How many runs a loop of [`TARGET_LOOP_S`] takes at `per_s` seconds a run,
/// as `time_case` sizes it, and never fewer than `runs`.
pub(crate) fn loop_iters(per_s: f64, runs: usize) -> usize {
    let want = (TARGET_LOOP_S / per_s.max(1e-6)).min(MAX_ITERS as f64);
    (want as usize).max(MIN_ITERS).max(runs)
}

/// Time calls of `f` as `compare_torch.py`'s `time_case` times PyTorch's:
/// warm-up, one run timed alone to size the loop, then device time with
/// events around the whole loop and host time to queue it.
fn time(
    stream: &Stream,
    runs: usize,
    mut f: impl FnMut() -> cudnn::Result<()>,
) -> AnyResult<Timing> {
    for _ in 0..3 {
        f()?;
    }
    stream.synchronize()?;
    // Sized by one run's device time, as `time_case` sizes PyTorch's loop
    // by our row's device time.
    let (start, end) = (Event::new()?, Event::new()?);
    start.record(stream)?;
    f()?;
    end.record(stream)?;
    end.synchronize()?;
    let one_s = f64::from(Event::elapsed_ms(&start, &end)?) * 1e-3;
    let runs = loop_iters(one_s, runs);
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
    /// The table's direction column (`fwd`, `bwd data (graph)`, ...).
    direction: &'static str,
    /// The CSV `op` key (`fwd`, `bwd_data_graph`, ...).
    op: &'static str,
    result: Result<(String, usize, Timing), String>,
    gflop: f64,
}

/// Which APIs run, and how.
struct Setup<'a> {
    legacy: Option<PlanOptions<'a>>,
    /// The device's target and the autotuning policy.
    graph: Option<(Target, Policy)>,
    /// TF32 allowed for f32 data (the CSV's `tf32`).
    tf32: bool,
    /// The legacy math policy.
    math: MathPolicy,
    /// `--legacy-tc`: also time the legacy non-Winograd tensor-core
    /// algorithms, fixed.
    legacy_tc: bool,
    runs: usize,
}

/// The CSV and table dtype of `T`: `tf32` for f32 data allowed on tensor cores.
fn dtype_key<T: Elem>(tf32: bool) -> &'static str {
    if tf32 && T::NAME == "f32" {
        "tf32"
    } else {
        T::NAME
    }
}

fn bench<T: Elem>(
    h: &mut Handle,
    stream: &Stream,
    layer: &'static Layer,
    layout: TensorFormat,
    setup: &Setup<'_>,
    rows: &mut Vec<Row>,
) -> AnyResult<()> {
    let layout_name = if layout == TensorFormat::Nhwc {
        "NHWC"
    } else {
        "NCHW"
    };
    let runs = setup.runs;
    let dtype = dtype_key::<T>(setup.tf32);
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
    let dy = random::<T>(fwd.y().len_required(), 6)?;
    let (a, b) = (
        <T::Scale as Scale>::from_f64(1.0),
        <T::Scale as Scale>::from_f64(0.0),
    );
    let mut push = |direction, op, result: Result<(String, usize, Timing), String>| {
        rows.push(Row {
            layer,
            dtype,
            layout: layout_name,
            direction,
            op,
            result,
            gflop,
        })
    };

    // One legacy run: plan (search or fixed algorithm), then time on the
    // case's buffers. The label names the algorithm, the math type it runs
    // with and, after a measured search, the time cuDNN's search measured.
    macro_rules! legacy {
        ($prob:expr, $opts:expr, $in1:expr, $in2:expr, $out:expr) => {
            $prob
                .plan_on(h, $opts, $in1, $in2, $out)
                .and_then(|p| {
                    let t = time(stream, runs, || p.run(h, a, $in1, $in2, b, $out))
                        .map_err(|e| err(&*e))?;
                    let found = p
                        .measured_time_ms()
                        .map(|ms| format!(", search measured {ms:.4} ms"))
                        .unwrap_or_default();
                    let label = format!("{} ({:?}{found})", p.algo(), p.math_type());
                    Ok((label, p.workspace_size(), t))
                })
                .map_err(|e| e.to_string())
        };
    }
    if let Some(opts) = &setup.legacy {
        let bd = ConvProblem::backward_data(&x_desc, &w_desc, &conv)?;
        let bf = ConvProblem::backward_filter(&x_desc, &w_desc, &conv)?;
        push("fwd", "fwd", legacy!(fwd, opts, &x, &w, &mut y));
        push("bwd data", "bwd_data", legacy!(bd, opts, &w, &dy, &mut dx));
        push(
            "bwd filter",
            "bwd_filter",
            legacy!(bf, opts, &x, &dy, &mut dw),
        );
        if setup.legacy_tc {
            // The non-Winograd ones of the algorithms NVIDIA's legacy-API
            // guide lists for tensor cores (it also lists the
            // *_WINOGRAD_NONFUSED ones), fixed (table rows only, not in the CSV).
            use cudnn::sys::cudnn as raw;
            let fixed = |algo| PlanOptions::new(AlgoSearch::Fixed(algo)).with_math(setup.math);
            let f = fixed(ConvAlgo::Forward(
                raw::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
            ));
            push("fwd (legacy, fixed)", "", legacy!(fwd, &f, &x, &w, &mut y));
            let f = fixed(ConvAlgo::BackwardData(
                raw::cudnnConvolutionBwdDataAlgo_t::CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
            ));
            push(
                "bwd data (legacy, fixed)",
                "",
                legacy!(bd, &f, &w, &dy, &mut dx),
            );
            let f = fixed(ConvAlgo::BackwardFilter(
                raw::cudnnConvolutionBwdFilterAlgo_t::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
            ));
            push(
                "bwd filter (legacy, fixed)",
                "",
                legacy!(bf, &f, &x, &dy, &mut dw),
            );
        }
    }

    if let Some((target, policy)) = &setup.graph {
        let gdt = DType::of::<T>().ok_or_else(|| format!("no graph dtype for {}", T::NAME))?;
        let mut bufs = Bufs {
            x: &x,
            w: &w,
            dy: &dy,
            y: &mut y,
            dx: &mut dx,
            dw: &mut dw,
        };
        for dir in Dir::ALL {
            let r = graph::op_graph(layer, gdt, layout, dir).and_then(|g| {
                graph::bench_dir(h, stream, target, policy, &g, dir, &mut bufs, runs)
            });
            let r = r
                .map(|g| {
                    let detail = format!("{}, tuned in {:.0} ms", g.detail, g.tune_ms);
                    (detail, g.workspace, g.timing)
                })
                .map_err(|e| e.to_string());
            push(dir.label(), dir.op_key(), r);
        }
    }
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
        op: r.op,
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
    // Diagnostic rows (no op key) are for the table only.
    if !r.op.is_empty() {
        csv.row(&out)?;
    }
    Ok(())
}

/// `--graph-attempts N` (at least 1); without it every accepted candidate
/// (`usize::MAX`), as PyTorch times every plan it builds.
pub(crate) fn graph_attempts(args: &[String]) -> AnyResult<usize> {
    Ok(match flag_value(args, "--graph-attempts") {
        Some(v) => v
            .parse::<usize>()
            .map_err(|_| format!("--graph-attempts: not a number: {v}"))?
            .max(1),
        None => usize::MAX,
    })
}

/// The whole run for the command line `args` (without the program name).
pub(crate) fn run(args: &[String]) -> AnyResult<()> {
    let search = if args.iter().any(|a| a == "--exhaustive") {
        AlgoSearch::Exhaustive
    } else {
        AlgoSearch::Heuristic
    };
    let quick = args.iter().any(|a| a == "--quick");
    let tf32 = !args.iter().any(|a| a == "--no-tf32");
    let runs = match flag_value(args, "--runs") {
        Some(v) => v
            .parse::<usize>()
            .map_err(|_| format!("--runs: not a number: {v}"))?
            .max(1),
        None if quick => 5,
        None => 10,
    };
    let attempts = graph_attempts(args)?;
    let (legacy, graph) = match flag_value(args, "--api") {
        None | Some("both") => (true, true),
        Some("legacy") => (true, false),
        Some("graph") => (false, true),
        Some(other) => {
            return Err(format!("--api: expected legacy, graph or both, got {other}").into());
        }
    };
    let configs: Vec<Config> = CONFIGS
        .iter()
        .copied()
        .filter(|&c| !(quick && c == Config::NhwcF16))
        .collect();
    let tc = legacy && args.iter().any(|a| a == "--legacy-tc");
    let math = if tf32 {
        MathPolicy::AllowTf32
    } else {
        MathPolicy::Default
    };
    if args.iter().any(|a| a == "--plan-only") {
        let name = flag_value(args, "--target").unwrap_or("h100");
        let target = Target::preset(name)?;
        let mut cases = Vec::new();
        for layer in LAYERS {
            for &config in &configs {
                cases.push(match config {
                    Config::NhwcBf16 => (layer, DType::BF16, TensorFormat::Nhwc),
                    Config::NhwcF16 => (layer, DType::F16, TensorFormat::Nhwc),
                    Config::NchwF32 => (layer, DType::F32, TensorFormat::Nchw),
                });
            }
        }
        let failed = graph::plan_only(&cases, &target, &graph::policy(tf32, attempts));
        if failed > 0 {
            return Err(format!("{failed} graph case(s) could not be planned").into());
        }
        return Ok(());
    }
    if let Some(why) = missing() {
        println!(
            "{}",
            plan_text(legacy, tc, graph, search, math, attempts, runs, &configs)
        );
        return Err(format!(
            "bench_conv needs the CUDA libraries and a CUDA device; {why}\n\
             (`cargo run --example doctor` shows where the libraries were looked for)"
        )
        .into());
    }
    let mut csv = Csv::create(flag_value(args, "--csv").map(Path::new))?;
    let dev = Device::new(0)?;
    println!(
        "device 0: {}; cuDNN {}",
        dev.name()?,
        Handle::library_version()?
    );
    println!(
        "{}\n",
        plan_text(legacy, tc, graph, search, math, attempts, runs, &configs)
    );
    let stream = dev.create_stream()?;
    let mut h = Handle::new(&stream)?;
    let setup = Setup {
        legacy: legacy.then(|| PlanOptions::new(search).with_math(math)),
        // Without a target for the device the legacy rows still run.
        graph: if graph {
            match Target::device(0) {
                Ok(t) => Some((t, graph::policy(tf32, attempts))),
                Err(e) => {
                    println!("graph rows left out: no cuDNN target for device 0: {e}\n");
                    None
                }
            }
        } else {
            None
        },
        tf32,
        math,
        legacy_tc: tc,
        runs,
    };
    println!(
        "| layer | config | direction | algorithm / engine | workspace MiB | GPU ms/run | TFLOP/s | host µs/run |"
    );
    println!("|---|---|---|---|---:|---:|---:|---:|");
    // Rows are printed and written as each layer and configuration finishes,
    // so a run stopped by a time limit keeps what it measured.
    let mut rows = Vec::new();
    for layer in LAYERS {
        for &config in &configs {
            let (h, s, o, r) = (&mut h, &stream, &setup, &mut rows);
            match config {
                Config::NhwcBf16 => bench::<bf16>(h, s, layer, TensorFormat::Nhwc, o, r)?,
                Config::NhwcF16 => bench::<f16>(h, s, layer, TensorFormat::Nhwc, o, r)?,
                Config::NchwF32 => bench::<f32>(h, s, layer, TensorFormat::Nchw, o, r)?,
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

/// What a run does: the APIs and their settings, and the case count.
#[allow(clippy::too_many_arguments)]
fn plan_text(
    legacy: bool,
    tc: bool,
    graph: bool,
    search: AlgoSearch,
    math: MathPolicy,
    attempts: usize,
    runs: usize,
    configs: &[Config],
) -> String {
    let mut apis = Vec::new();
    if legacy {
        apis.push(format!(
            "legacy API ({search:?} search, math {math:?}, no workspace limit{})",
            if tc {
                "; also the non-Winograd tensor-core algorithms fixed"
            } else {
                ""
            }
        ));
    }
    if graph {
        let configs = if attempts == usize::MAX {
            "every engine config".to_string()
        } else {
            format!("up to {attempts} engine configs")
        };
        apis.push(format!(
            "graph API (autotuned: {configs} of heuristics A + fallback the policy accepts, \
             3 timed runs each, fastest kept; TF32 {})",
            if math == MathPolicy::AllowTf32 {
                "allowed"
            } else {
                "not allowed"
            }
        ));
    }
    let names: Vec<String> = configs.iter().map(|c| format!("{c:?}")).collect();
    let cases = LAYERS.len() * configs.len() * 3 * apis.len();
    format!(
        "{} layers x {} ({}) x 3 directions through {}: {cases} CSV rows, each timed over \
         about {} ms (at least {runs} runs, at most {MAX_ITERS})",
        LAYERS.len(),
        configs.len(),
        names.join(", "),
        apis.join(" and "),
        TARGET_LOOP_S * 1e3
    )
}
