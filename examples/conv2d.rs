//! `cargo run --example conv2d`: a 2-d convolution forward and backward
//! (data, filter, bias) on random data, in f32 channels-first and f16
//! channels-last, each checked against the f64 CPU reference
//! (`cudnn::reference::conv`). Prints the algorithm chosen per direction,
//! its workspace, and the time per run (CUDA events over 20 runs).
//!
//! Exit status: 0 when every result matches the reference; 1 when one does
//! not, or when something is missing (the CUDA libraries, a CUDA device),
//! with a message saying what.

use std::process::ExitCode;

use cudnn::Scale;
use cudnn::dnn::{
    AlgoSearch, ConvDataType, ConvDescriptor, ConvProblem, FilterDescriptor, Handle, PlanOptions,
    TensorDescriptor, TensorFormat,
};
use cudnn::reference::conv::{self as refc, ConvParams, Layout};
use cudnn::runtime::{Device, DeviceBuffer, Event, Stream};
use half::f16;

/// Element types of this example: conversion from and to f64.
trait Elem: ConvDataType {
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
    fn nan() -> Self;
    /// Tolerance relative to `conv(|x|, |w|)`.
    const TOL: f64;
}
impl Elem for f32 {
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn to_f64(self) -> f64 {
        self.into()
    }
    fn nan() -> Self {
        f32::NAN
    }
    const TOL: f64 = 2e-5;
}
impl Elem for f16 {
    fn from_f64(v: f64) -> Self {
        f16::from_f64(v)
    }
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
    fn nan() -> Self {
        f16::NAN
    }
    const TOL: f64 = 1e-2;
}

/// A simple LCG: uniform values in [-1, 1).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    }
    fn fill<T: Elem>(&mut self, len: usize) -> (Vec<T>, Vec<f64>) {
        let t: Vec<T> = (0..len).map(|_| T::from_f64(self.next())).collect();
        let f = t.iter().map(|&v| v.to_f64()).collect();
        (t, f)
    }
}

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

fn abs(v: &[f64]) -> Vec<f64> {
    v.iter().map(|x| x.abs()).collect()
}

/// The largest `|got - want| / (tol * scale)`; at most 1 passes, NaN fails.
fn check(what: &str, got: &[f64], want: &[f64], scale: &[f64], tol: f64) -> AnyResult<f64> {
    let mut worst = 0.0f64;
    for i in 0..want.len() {
        let bound = tol * scale[i] + 1e-30;
        let err = (got[i] - want[i]).abs();
        if err.is_nan() || err > bound {
            return Err(format!(
                "{what}: element {i} is {}, the reference says {} (|error| {err:e} > {bound:e})",
                got[i], want[i]
            )
            .into());
        }
        worst = worst.max(err / bound);
    }
    Ok(worst)
}

/// Milliseconds per call of `f`, over `n` calls timed with CUDA events.
fn time_ms(stream: &Stream, n: usize, mut f: impl FnMut() -> cudnn::Result<()>) -> AnyResult<f32> {
    f()?;
    let (start, end) = (Event::new()?, Event::new()?);
    start.record(stream)?;
    for _ in 0..n {
        f()?;
    }
    end.record(stream)?;
    end.synchronize()?;
    Ok(Event::elapsed_ms(&start, &end)? / n as f32)
}

fn read<T: Elem>(stream: &Stream, b: &DeviceBuffer<T>) -> AnyResult<Vec<f64>> {
    stream.synchronize()?;
    Ok(b.to_vec()?.into_iter().map(Elem::to_f64).collect())
}

fn one<T: Elem>(v: f64) -> T::Scale {
    <T::Scale as Scale>::from_f64(v)
}

fn conv2d<T: Elem>(handle: &mut Handle, stream: &Stream, layout: TensorFormat) -> AnyResult<()> {
    const RUNS: usize = 20;
    let (n, c, k, hw, win) = (8, 32, 64, 28, 3);
    let xs = [n, c, hw, hw];
    let ws = [k, c, win, win];
    let x_desc = TensorDescriptor::<T>::with_format(layout, n, c, hw, hw)?;
    let w_desc = FilterDescriptor::<T>::new(layout, &ws)?;
    let conv = ConvDescriptor::new_2d([1, 1], [1, 1], [1, 1])?;
    let params = ConvParams::new(2).with_pad(&[1, 1]);
    let rl = Layout::from(layout);
    println!(
        "\n{} {layout:?}: x {xs:?}, w {ws:?}, pad 1, stride 1",
        T::NAME
    );

    let mut rng = Lcg(0x5eed_1234_abcd_0001);
    let (xh, x64) = rng.fill::<T>(xs.iter().product());
    let (wh, w64) = rng.fill::<T>(ws.iter().product());
    let forward = ConvProblem::forward(&x_desc, &w_desc, &conv)?;
    let ys = forward.output_shape().to_vec();
    let (dyh, dy64) = rng.fill::<T>(ys.iter().product());
    let x = DeviceBuffer::from_host(&xh)?;
    let w = DeviceBuffer::from_host(&wh)?;
    let dy = DeviceBuffer::from_host(&dyh)?;
    let opts = PlanOptions::new(AlgoSearch::Exhaustive);
    let gflop = forward.flops() / 1e9;
    let (a, b) = (one::<T>(1.0), one::<T>(0.0));

    // Forward.
    let mut y = DeviceBuffer::from_host(&vec![T::nan(); ys.iter().product()])?;
    let plan = forward.plan_on(handle, &opts, &x, &w, &mut y)?;
    plan.run(handle, a, &x, &w, b, &mut y)?;
    let got = read(stream, &y)?;
    let (want, _) = refc::forward(&x64, &xs, &w64, &ws, &params, rl)?;
    let (scale, _) = refc::forward(&abs(&x64), &xs, &abs(&w64), &ws, &params, rl)?;
    let worst = check("forward", &got, &want, &scale, T::TOL)?;
    let ms = time_ms(stream, RUNS, || plan.run(handle, a, &x, &w, b, &mut y))?;
    report(
        "forward",
        &plan.algo().to_string(),
        plan.workspace_size(),
        ms,
        gflop,
        worst,
    );

    // Backward data.
    let problem = ConvProblem::backward_data(&x_desc, &w_desc, &conv)?;
    let mut dx = DeviceBuffer::from_host(&vec![T::nan(); xh.len()])?;
    let plan = problem.plan_on(handle, &opts, &w, &dy, &mut dx)?;
    plan.run(handle, a, &w, &dy, b, &mut dx)?;
    let got = read(stream, &dx)?;
    let want = refc::backward_data(&dy64, &ys, &w64, &ws, &xs, &params, rl)?;
    let scale = refc::backward_data(&abs(&dy64), &ys, &abs(&w64), &ws, &xs, &params, rl)?;
    let worst = check("backward data", &got, &want, &scale, T::TOL)?;
    let ms = time_ms(stream, RUNS, || plan.run(handle, a, &w, &dy, b, &mut dx))?;
    report(
        "backward data",
        &plan.algo().to_string(),
        plan.workspace_size(),
        ms,
        gflop,
        worst,
    );

    // Backward filter.
    let problem = ConvProblem::backward_filter(&x_desc, &w_desc, &conv)?;
    let mut dw = DeviceBuffer::from_host(&vec![T::nan(); wh.len()])?;
    let plan = problem.plan_on(handle, &opts, &x, &dy, &mut dw)?;
    plan.run(handle, a, &x, &dy, b, &mut dw)?;
    let got = read(stream, &dw)?;
    let want = refc::backward_filter(&x64, &xs, &dy64, &ys, &ws, &params, rl)?;
    let scale = refc::backward_filter(&abs(&x64), &xs, &abs(&dy64), &ys, &ws, &params, rl)?;
    let worst = check("backward filter", &got, &want, &scale, T::TOL)?;
    let ms = time_ms(stream, RUNS, || plan.run(handle, a, &x, &dy, b, &mut dw))?;
    report(
        "backward filter",
        &plan.algo().to_string(),
        plan.workspace_size(),
        ms,
        gflop,
        worst,
    );

    // Bias gradient.
    let bias = problem.backward_bias_plan()?;
    let mut db = DeviceBuffer::from_host(&vec![T::nan(); k])?;
    bias.run(handle, a, &dy, b, &mut db)?;
    let got = read(stream, &db)?;
    let want = refc::backward_bias(&dy64, &ys, rl)?;
    let scale = refc::backward_bias(&abs(&dy64), &ys, rl)?;
    let worst = check("bias gradient", &got, &want, &scale, T::TOL)?;
    let ms = time_ms(stream, RUNS, || bias.run(handle, a, &dy, b, &mut db))?;
    report("bias gradient", "-", 0, ms, 0.0, worst);
    Ok(())
}

fn report(what: &str, algo: &str, ws: usize, ms: f32, gflop: f64, worst: f64) {
    let rate = if gflop > 0.0 {
        format!("{:8.2} TFLOP/s", gflop / ms as f64)
    } else {
        "               ".to_string()
    };
    println!(
        "  {what:<16} {algo:<22} workspace {:>9} B  {ms:8.4} ms  {rate}  max error {:.3} of the bound",
        ws, worst
    );
}

/// What is missing, when something is.
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
    if let Some(why) = missing() {
        eprintln!("conv2d needs the CUDA libraries and a CUDA device; {why}");
        eprintln!("(`cargo run --example doctor` shows where the libraries were looked for)");
        return ExitCode::FAILURE;
    }
    let run = || -> AnyResult<()> {
        let dev = Device::new(0)?;
        println!("device 0: {}", dev.name()?);
        let stream = dev.create_stream()?;
        let mut handle = Handle::new(&stream)?;
        conv2d::<f32>(&mut handle, &stream, TensorFormat::Nchw)?;
        conv2d::<f16>(&mut handle, &stream, TensorFormat::Nhwc)?;
        println!("\nall results match the CPU reference");
        Ok(())
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("conv2d failed: {e}");
            ExitCode::FAILURE
        }
    }
}
