//! `cargo run --release --example bench_gemm [-- --quick] [--dtype f32,tf32,f16,bf16,fp8] [--seconds S] [--csv FILE]`:
//! GEMM throughput (`cublasGemmEx` / `cublasGemmStridedBatchedEx` through
//! a `GemmPlan`) on square sizes 256 to 8192 and transformer shapes (a
//! 7B-class MLP, 4096 tokens: 4096x11008x4096 and 4096x4096x11008;
//! attention, batch 32 x 128x128x64 and batch 32 x 128x64x128), row-major,
//! for f32 (f32 accumulation, no TF32), TF32, f16 and bf16 (f32
//! accumulation), and FP8 (`fp8`: E4M3 x E4M3 -> bf16 through cuBLASLt's
//! scaled matmul, `Fp8MatmulPlan`, per-tensor scales of 1, f32 accumulation
//! without fast accumulation; A row-major m x k and B stored n x k, the "TN"
//! layout FP8 needs, as `torch._scaled_mm` takes them; unbatched shapes
//! only, as `_scaled_mm` has no batch). The case list is [`shapes`].
//!
//! Prints a markdown table: the device time per call and TFLOP/s (CUDA
//! events over a timed loop of about `--seconds` (default 0.2), after a
//! warm-up) and the host time per call (the time to queue one call: the
//! plan's checks plus the one cuBLAS call). `--quick` stops at 2048 and
//! skips the MLP shapes. `--csv FILE` also writes one row per case in the
//! format of `bench_csv.rs` (read by `xtask/device/compare_torch.py`).
//!
//! Not a test: numbers depend on the machine. Exit status 1 when the CUDA
//! libraries or a device are missing, with a message saying which.

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use cudnn::blas::{
    ComputeType, Fp8MatmulPlan, Fp8MatmulSpec, Fp8Scaling, GemmPlan, GemmTypes, Handle, Layout,
    LtHandle,
};
use cudnn::runtime::{Device, DeviceBuffer, Event, Stream};
use cudnn::{DataType, F8E4M3, Scale};
use half::{bf16, f16};

#[path = "bench_csv.rs"]
mod bench_csv;
use bench_csv::{Csv, CsvRow, flag_value};

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

struct Shape {
    name: String,
    m: usize,
    n: usize,
    k: usize,
    batch: usize,
}

/// Every case, in table order: the one list both the table and the CSV
/// (and so the PyTorch comparison) follow.
fn shapes(quick: bool) -> Vec<Shape> {
    let mut v = Vec::new();
    for s in [256, 512, 1024, 2048, 4096, 8192] {
        if quick && s > 2048 {
            continue;
        }
        v.push(Shape {
            name: format!("square {s}"),
            m: s,
            n: s,
            k: s,
            batch: 1,
        });
    }
    if !quick {
        v.push(Shape {
            name: "MLP up 4096x11008x4096".into(),
            m: 4096,
            n: 11008,
            k: 4096,
            batch: 1,
        });
        v.push(Shape {
            name: "MLP down 4096x4096x11008".into(),
            m: 4096,
            n: 4096,
            k: 11008,
            batch: 1,
        });
    }
    v.push(Shape {
        name: "attn QKᵀ 32 x 128x128x64".into(),
        m: 128,
        n: 128,
        k: 64,
        batch: 32,
    });
    v.push(Shape {
        name: "attn PV 32 x 128x64x128".into(),
        m: 128,
        n: 64,
        k: 128,
        batch: 32,
    });
    v
}

struct Row {
    dtype: &'static str,
    device_ms: f64,
    host_us: f64,
    tflops: f64,
}

/// Time one shape: a warm-up, a calibration, then a timed loop of about
/// `seconds`.
fn bench<A: GemmTypes<A>>(
    blas: &Handle,
    stream: &Stream,
    label: &'static str,
    compute: ComputeType,
    s: &Shape,
    seconds: f64,
) -> AnyResult<Row> {
    let la = Layout::row_major(s.m, s.k).batched(s.batch, s.m * s.k);
    let lb = Layout::row_major(s.k, s.n).batched(s.batch, s.k * s.n);
    let lc = Layout::row_major(s.m, s.n).batched(s.batch, s.m * s.n);
    let plan = GemmPlan::<A, A>::new(la, lb, lc, compute)?;
    let mut a = DeviceBuffer::<A>::alloc(la.required_len().unwrap_or(0))?;
    let mut b = DeviceBuffer::<A>::alloc(lb.required_len().unwrap_or(0))?;
    let mut c = DeviceBuffer::<A>::alloc(lc.required_len().unwrap_or(0))?;
    // 0x3C bytes: about 0.01 in f32/bf16, about 1.06 in f16; no NaN, no subnormals.
    a.memset(0x3C)?;
    b.memset(0x3C)?;
    c.memset(0)?;
    let (one, zero) = (
        <A as DataType>::Scale::from_f64(1.0),
        <A as DataType>::Scale::from_f64(0.0),
    );
    for _ in 0..3 {
        plan.run(blas, one, &a, &b, zero, &mut c)?;
    }
    stream.synchronize()?;
    // Calibrate.
    let t = Instant::now();
    plan.run(blas, one, &a, &b, zero, &mut c)?;
    stream.synchronize()?;
    let per = t.elapsed().as_secs_f64().max(1e-6);
    let iters = ((seconds / per) as usize).clamp(5, 2000);
    let (start, end) = (Event::new()?, Event::new()?);
    start.record(stream)?;
    let host = Instant::now();
    for _ in 0..iters {
        plan.run(blas, one, &a, &b, zero, &mut c)?;
    }
    let host_s = host.elapsed().as_secs_f64();
    end.record(stream)?;
    end.synchronize()?;
    let ms = f64::from(Event::elapsed_ms(&start, &end)?) / iters as f64;
    Ok(Row {
        dtype: label,
        device_ms: ms,
        host_us: host_s / iters as f64 * 1e6,
        tflops: plan.flops() / (ms * 1e-3) / 1e12,
    })
}

/// Time one FP8 shape (E4M3 x E4M3 -> bf16, "TN"), as [`bench`] does.
fn bench_fp8(lt: &LtHandle, stream: &Stream, s: &Shape, seconds: f64) -> AnyResult<Row> {
    let la = Layout::row_major(s.m, s.k);
    let lb = Layout::row_major(s.n, s.k).t();
    let lc = Layout::row_major(s.m, s.n);
    let spec = Fp8MatmulSpec::new(la, lb, lc);
    let plan = Fp8MatmulPlan::<F8E4M3, F8E4M3, bf16>::new(lt, &spec)?;
    let mut a = DeviceBuffer::<F8E4M3>::alloc(la.required_len().unwrap_or(0))?;
    let mut b = DeviceBuffer::<F8E4M3>::alloc(lb.required_len().unwrap_or(0))?;
    let mut c = DeviceBuffer::<bf16>::alloc(lc.required_len().unwrap_or(0))?;
    // 0x3C bytes: 1.5 in E4M3 (PyTorch's row fills the same bytes).
    a.memset(0x3C)?;
    b.memset(0x3C)?;
    c.memset(0)?;
    let one = DeviceBuffer::from_host(&[1.0f32])?;
    let call = |c: &mut DeviceBuffer<bf16>| {
        let scale = Fp8Scaling::default()
            .with_a((&one).into())
            .with_b((&one).into());
        plan.run(lt, 1.0, &a, &b, 0.0, c, scale, None)
    };
    for _ in 0..3 {
        call(&mut c)?;
    }
    stream.synchronize()?;
    let t = Instant::now();
    call(&mut c)?;
    stream.synchronize()?;
    let per = t.elapsed().as_secs_f64().max(1e-6);
    let iters = ((seconds / per) as usize).clamp(5, 2000);
    let (start, end) = (Event::new()?, Event::new()?);
    start.record(stream)?;
    let host = Instant::now();
    for _ in 0..iters {
        call(&mut c)?;
    }
    let host_s = host.elapsed().as_secs_f64();
    end.record(stream)?;
    end.synchronize()?;
    let ms = f64::from(Event::elapsed_ms(&start, &end)?) / iters as f64;
    let flops = 2.0 * (s.m * s.n * s.k) as f64;
    Ok(Row {
        dtype: "fp8 e4m3 (f32) -> bf16",
        device_ms: ms,
        host_us: host_s / iters as f64 * 1e6,
        tflops: flops / (ms * 1e-3) / 1e12,
    })
}

fn run() -> AnyResult<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let value = |flag: &str| flag_value(&args, flag);
    let dtypes: Vec<String> = value("--dtype")
        .unwrap_or("f32,tf32,f16,bf16,fp8")
        .split(',')
        .map(str::to_string)
        .collect();
    let seconds: f64 = match value("--seconds") {
        Some(s) => s
            .parse()
            .map_err(|_| format!("--seconds: not a number: {s}"))?,
        None => 0.2,
    };
    let dev = Device::new(0)?;
    let mut csv = Csv::create(value("--csv").map(Path::new))?;
    let (major, minor) = dev.compute_capability()?;
    let stream = Stream::new()?;
    let mut blas = Handle::new(&stream)?;
    blas.set_workspace(Handle::recommended_workspace_size(major))?;
    let lt = LtHandle::new(&stream)?;
    println!(
        "# GEMM on {} (compute capability {major}.{minor}), cuBLAS {}\n",
        dev.name()?,
        cudnn::sys::cublas::load()?
            .info()
            .version
            .map_or("?".to_string(), |v| v.to_string())
    );
    println!(
        "| dtype (accumulation) | shape (m x n x k) | device ms/call | host µs/call | TFLOP/s |"
    );
    println!("|---|---|---:|---:|---:|");
    for d in &dtypes {
        for s in shapes(quick) {
            if d == "fp8" && s.batch > 1 {
                continue; // torch._scaled_mm has no batch: no row to compare
            }
            let row = match d.as_str() {
                "fp8" => bench_fp8(&lt, &stream, &s, seconds),
                "f32" => bench::<f32>(&blas, &stream, "f32 (f32)", ComputeType::F32, &s, seconds),
                "tf32" => {
                    bench::<f32>(&blas, &stream, "f32 (TF32)", ComputeType::Tf32, &s, seconds)
                }
                "f16" => bench::<f16>(&blas, &stream, "f16 (f32)", ComputeType::F32, &s, seconds),
                "bf16" => {
                    bench::<bf16>(&blas, &stream, "bf16 (f32)", ComputeType::F32, &s, seconds)
                }
                other => {
                    return Err(
                        format!("--dtype: unknown `{other}` (f32, tf32, f16, bf16, fp8)").into(),
                    );
                }
            };
            let mut out = CsvRow {
                suite: "gemm",
                case: &s.name,
                op: if s.batch > 1 { "gemm_batched" } else { "gemm" },
                shape: format!("m={};n={};k={};batch={}", s.m, s.n, s.k, s.batch),
                dtype: d,
                layout: if d == "fp8" { "TN" } else { "row-major" },
                metric: "TFLOP/s",
                work: 2.0 * (s.m * s.n * s.k * s.batch) as f64,
                device_us: None,
                host_us: None,
                detail: String::new(),
            };
            match row {
                Ok(r) => {
                    println!(
                        "| {} | {} | {:.4} | {:.1} | {:.1} |",
                        r.dtype, s.name, r.device_ms, r.host_us, r.tflops
                    );
                    out.device_us = Some(r.device_ms * 1e3);
                    out.host_us = Some(r.host_us);
                }
                Err(e) => {
                    println!("| {d} | {} | error: {e} | | |", s.name);
                    out.detail = format!("error: {e}");
                }
            }
            csv.row(&out)?;
            csv.flush()?;
        }
    }
    csv.finish()?;
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench_gemm: cannot run: {e}");
            eprintln!(
                "(this benchmark needs the CUDA libraries and a CUDA device; `cargo run --example doctor` says what is missing)"
            );
            ExitCode::FAILURE
        }
    }
}
