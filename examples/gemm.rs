//! `cargo run --example gemm`: matrix products on the GPU, each checked
//! against the f64 CPU reference (`cudnn::reference::gemm`):
//!
//! 1. cuBLAS, f32, row-major: C (300 x 200) = A (300 x 150) · B (150 x 200),
//!    written exactly as a row-major user thinks of it — no operand swap by
//!    hand; the layouts say row-major and the crate does the rest;
//! 2. cuBLAS, f16 inputs with f32 accumulation, a strided batch of 8;
//! 3. cuBLASLt, f16: a fused linear layer Y = gelu(X · Wᵀ + b), row-major,
//!    through a cached plan.
//!
//! Exit status: 0 when every result is within its bound; 1 when one is
//! not, or when the CUDA libraries or a device are missing (with a message
//! saying which).

use std::process::ExitCode;

use cudnn::blas::{
    ComputeType, Epilogue, EpilogueArgs, Handle, Layout, LtHandle, MatmulSpec, Matrix, MatrixMut,
    PlanCache,
};
use cudnn::reference::gemm::{self as reference, max_relative_error};
use cudnn::runtime::{Device, DeviceBuffer, Stream};
use half::f16;

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) as f64 / (1u64 << 31) as f64) * 2.0 - 1.0
        })
        .collect()
}

fn report(name: &str, err: f64, bound: f64) -> bool {
    let ok = err <= bound;
    println!(
        "{name:<58} max relative error {err:.2e} (bound {bound:.0e}) {}",
        if ok { "ok" } else { "FAILED" }
    );
    ok
}

fn f32_row_major(blas: &Handle, stream: &Stream) -> AnyResult<bool> {
    let (m, n, k) = (300, 200, 150);
    let (la, lb, lc) = (
        Layout::row_major(m, k),
        Layout::row_major(k, n),
        Layout::row_major(m, n),
    );
    let a: Vec<f32> = values(m * k, 1).iter().map(|&v| v as f32).collect();
    let b: Vec<f32> = values(k * n, 2).iter().map(|&v| v as f32).collect();
    let da = DeviceBuffer::from_host(&a)?;
    let db = DeviceBuffer::from_host(&b)?;
    let mut dc = DeviceBuffer::from_host(&vec![f32::NAN; m * n])?;
    blas.gemm(
        1.0,
        Matrix::new(&da, la),
        Matrix::new(&db, lb),
        0.0,
        MatrixMut::new(&mut dc, lc),
        ComputeType::Default,
    )?;
    stream.synchronize()?;
    let got: Vec<f64> = dc.to_vec()?.into_iter().map(f64::from).collect();
    let af: Vec<f64> = a.iter().map(|&v| f64::from(v)).collect();
    let bf: Vec<f64> = b.iter().map(|&v| f64::from(v)).collect();
    let mut want = vec![0.0; m * n];
    reference::gemm(1.0, &af, &la, &bf, &lb, 0.0, &mut want, &lc)?;
    Ok(report(
        "cuBLAS f32 row-major 300x200x150",
        max_relative_error(&got, &want),
        1e-5,
    ))
}

fn f16_batched(blas: &Handle, stream: &Stream) -> AnyResult<bool> {
    let (m, n, k, batch) = (64, 96, 128, 8);
    let la = Layout::row_major(m, k).batched(batch, m * k);
    let lb = Layout::col_major(k, n).batched(batch, k * n);
    let lc = Layout::row_major(m, n).batched(batch, m * n);
    let a: Vec<f16> = values(m * k * batch, 3)
        .iter()
        .map(|&v| f16::from_f64(v))
        .collect();
    let b: Vec<f16> = values(k * n * batch, 4)
        .iter()
        .map(|&v| f16::from_f64(v))
        .collect();
    let da = DeviceBuffer::from_host(&a)?;
    let db = DeviceBuffer::from_host(&b)?;
    let mut dc = DeviceBuffer::from_host(&vec![f16::NAN; m * n * batch])?;
    blas.gemm(
        1.0,
        Matrix::new(&da, la),
        Matrix::new(&db, lb),
        0.0,
        MatrixMut::new(&mut dc, lc),
        ComputeType::F32,
    )?;
    stream.synchronize()?;
    let got: Vec<f64> = dc.to_vec()?.into_iter().map(f16::to_f64).collect();
    let af: Vec<f64> = a.iter().map(|v| v.to_f64()).collect();
    let bf: Vec<f64> = b.iter().map(|v| v.to_f64()).collect();
    let mut want = vec![0.0; m * n * batch];
    reference::gemm(1.0, &af, &la, &bf, &lb, 0.0, &mut want, &lc)?;
    Ok(report(
        "cuBLAS f16 (f32 accumulation) strided batch 8 x 64x96x128",
        max_relative_error(&got, &want),
        1e-2,
    ))
}

fn fused_linear(lt: &LtHandle, stream: &Stream) -> AnyResult<bool> {
    // X: 256 tokens x 512 features; W: 1024 x 512 (out x in); b: 1024.
    let (tokens, d_in, d_out) = (256, 512, 1024);
    let spec = MatmulSpec::new(
        Layout::row_major(tokens, d_in),
        Layout::row_major(d_out, d_in).t(),
        Layout::row_major(tokens, d_out),
    )
    .with_epilogue(Epilogue::GeluTanhBias);
    let x: Vec<f16> = values(tokens * d_in, 5)
        .iter()
        .map(|&v| f16::from_f64(v))
        .collect();
    let w: Vec<f16> = values(d_out * d_in, 6)
        .iter()
        .map(|&v| f16::from_f64(v * 0.1))
        .collect();
    let bias: Vec<f16> = values(d_out, 7).iter().map(|&v| f16::from_f64(v)).collect();
    let (dx, dw, db) = (
        DeviceBuffer::from_host(&x)?,
        DeviceBuffer::from_host(&w)?,
        DeviceBuffer::from_host(&bias)?,
    );
    let mut dy = DeviceBuffer::from_host(&vec![f16::NAN; tokens * d_out])?;
    let plans = PlanCache::<f16, f16>::new();
    let plan = plans.get_or_create(lt, &spec)?;
    plan.run(
        lt,
        1.0,
        &dx,
        &dw,
        0.0,
        &mut dy,
        EpilogueArgs::none().bias(&db),
    )?;
    stream.synchronize()?;
    let got: Vec<f64> = dy.to_vec()?.into_iter().map(f16::to_f64).collect();
    let f = |v: &[f16]| v.iter().map(|x| x.to_f64()).collect::<Vec<_>>();
    let (la, lb, ly) = spec.layouts();
    let mut want = vec![0.0; tokens * d_out];
    reference::matmul(
        1.0,
        &f(&x),
        &la,
        &f(&w),
        &lb,
        0.0,
        &mut want,
        &ly,
        Epilogue::GeluTanhBias,
        Some(&f(&bias)),
        None,
    )?;
    Ok(report(
        "cuBLASLt f16 Y = gelu(X·Wᵀ + b), 256x1024x512",
        max_relative_error(&got, &want),
        1e-2,
    ))
}

fn run() -> AnyResult<bool> {
    let dev = Device::new(0)?;
    let (major, minor) = dev.compute_capability()?;
    println!(
        "device 0: {} (compute capability {major}.{minor})",
        dev.name()?
    );
    let stream = Stream::new()?;
    let blas = Handle::new(&stream)?;
    let lt = LtHandle::new(&stream)?;
    let mut ok = f32_row_major(&blas, &stream)?;
    ok &= f16_batched(&blas, &stream)?;
    ok &= fused_linear(&lt, &stream)?;
    Ok(ok)
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("gemm: a result is outside its bound");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("gemm: cannot run: {e}");
            eprintln!(
                "(this example needs the CUDA libraries and a CUDA device; `cargo run --example doctor` says what is missing)"
            );
            ExitCode::FAILURE
        }
    }
}
