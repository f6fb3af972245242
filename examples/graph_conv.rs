//! Fused conv + bias + ReLU through cuDNN's graph API.
//!
//! With a GPU: plans for the device, runs it on random data and compares
//! with the f64 reference (exits 1 if the error is over the f16 bound), and
//! writes the device's cuDNN device-properties JSON to
//! `$OUT/device_properties.json` when `OUT` is set.
//! Without one: plans for an H200 (or `--target NAME`: h100, h200, a100,
//! l4, b200) and prints the candidates and the chosen plan.

use cudnn::dnn::Handle;
use cudnn::graph::{ConvParams, DType, Graph, Plan, Policy, Target, TensorSpec};
use cudnn::reference::conv::{self as refc, Layout};
use cudnn::reference::gemm::max_relative_error;
use cudnn::runtime::{DeviceBuffer, Stream};
use half::f16;

const N: i64 = 4;
const C: i64 = 32;
const K: i64 = 64;
const H: i64 = 28;

fn graph() -> cudnn::Result<Graph> {
    let mut g = Graph::new();
    let x = g.input("x", TensorSpec::nhwc(DType::F16, &[N, C, H, H])?)?;
    let w = g.input("w", TensorSpec::nhwc(DType::F16, &[K, C, 3, 3])?)?;
    let b = g.input("bias", TensorSpec::nhwc(DType::F16, &[1, K, 1, 1])?)?;
    let y = g.conv_fprop(x, w, &ConvParams::new_2d([1, 1], [1, 1], [1, 1]))?;
    let y = g.bias(y, b)?;
    let y = g.relu(y)?;
    g.output(y, DType::F16)?;
    g.rename(y, "y")?;
    Ok(g)
}

fn has_gpu() -> bool {
    cudnn::runtime::Device::count().is_ok_and(|n| n > 0)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("graph_conv: {e}");
        std::process::exit(1);
    }
}

fn run() -> cudnn::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let name = args
        .iter()
        .position(|a| a == "--target")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let gpu = has_gpu() && name.is_none();
    let target = if gpu {
        Target::device(0)?
    } else {
        Target::preset(name.as_deref().unwrap_or("h200"))?
    };
    let g = graph()?;
    let og = g.build()?;
    println!(
        "conv {N}x{C}x{H}x{H} * {K}x{C}x3x3 + bias + relu, f16 NHWC, for {}",
        target.fingerprint()
    );
    let (plan, report) = Plan::build(&og, &target, &Policy::default())?;
    println!(
        "{} candidates (heuristics {:.1} ms):",
        report.candidates.len(),
        report.heuristics_s * 1e3
    );
    for c in &report.candidates {
        println!("  {c}");
    }
    println!(
        "chosen: engine {:?}, workspace {} B, finalized in {:.1} ms",
        report.chosen,
        plan.workspace_size(),
        report.finalize_s * 1e3
    );
    if !gpu {
        println!("no GPU: planned only (execution needs a GPU)");
        return Ok(());
    }
    if let Some(out) = std::env::var_os("OUT") {
        let path = std::path::Path::new(&out).join("device_properties.json");
        match std::fs::write(&path, target.properties().json()) {
            Ok(()) => println!("device properties JSON written to {}", path.display()),
            Err(e) => eprintln!("could not write {}: {e}", path.display()),
        }
    }
    // Random data, rounded to f16.
    let mut s = 12345u64;
    let mut rnd = |n: usize| -> Vec<f64> {
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
                f16::from_f64(((s >> 33) as f64 / 2f64.powi(31)) * 2.0 - 1.0).to_f64()
            })
            .collect()
    };
    let (nx, nw) = ((N * C * H * H) as usize, (K * C * 9) as usize);
    let (x, w, b) = (rnd(nx), rnd(nw), rnd(K as usize));
    let nchw_to_nhwc = |v: &[f64], d: [usize; 4]| {
        refc::convert_layout(v, &d, Layout::ChannelsFirst, Layout::ChannelsLast)
    };
    let dims = |d: [i64; 4]| d.map(|v| v as usize);
    let to16 = |v: Vec<f64>| v.into_iter().map(f16::from_f64).collect::<Vec<_>>();
    let xd = DeviceBuffer::from_host(&to16(nchw_to_nhwc(&x, dims([N, C, H, H]))?))?;
    let wd = DeviceBuffer::from_host(&to16(nchw_to_nhwc(&w, dims([K, C, 3, 3]))?))?;
    let bd = DeviceBuffer::from_host(&to16(b.clone()))?;
    let mut yd = DeviceBuffer::from_host(&vec![f16::NAN; (N * K * H * H) as usize])?;
    let stream = Stream::new()?;
    let mut handle = Handle::new(&stream)?;
    {
        let mut bind = plan.bindings();
        bind.input("x", &xd)?
            .input("w", &wd)?
            .input("bias", &bd)?
            .output("y", &mut yd)?;
        plan.execute(&mut handle, &mut bind)?;
    }
    stream.synchronize()?;
    let got: Vec<f64> = yd.to_vec()?.into_iter().map(f16::to_f64).collect();
    let got = refc::convert_layout(
        &got,
        &dims([N, K, H, H]),
        Layout::ChannelsLast,
        Layout::ChannelsFirst,
    )?;
    let p = refc::ConvParams::new(2).with_pad(&[1, 1]);
    let (conv, _) = refc::forward(
        &x,
        &dims([N, C, H, H]),
        &w,
        &dims([K, C, 3, 3]),
        &p,
        Layout::ChannelsFirst,
    )?;
    let hw = (H * H) as usize;
    let want: Vec<f64> = conv
        .iter()
        .enumerate()
        .map(|(i, v)| (v + b[(i / hw) % K as usize]).max(0.0))
        .collect();
    let err = max_relative_error(&got, &want);
    println!("max relative error against the f64 reference: {err:.2e} (bound 1e-2)");
    if err.is_nan() || err > 1e-2 {
        return Err(cudnn::Error::invalid(
            "result",
            "must match the reference within 1e-2",
            err,
        ));
    }
    Ok(())
}
