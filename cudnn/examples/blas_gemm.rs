//! A row-major f32 GEMM with cuBLAS, checked against the f64 reference.
//! Needs a CUDA device (says so and exits 1 without one).
//!
//! `cargo run -p cudnn-rs --example blas_gemm`

use cudnn::blas::{ComputeType, Handle, Layout, Matrix, MatrixMut};
use cudnn::reference::gemm::{self as reference, max_relative_error};
use cudnn::runtime::{Device, DeviceBuffer, Stream};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if Device::count().map_or(true, |n| n == 0) {
        eprintln!("gemm: needs a CUDA device (none found)");
        std::process::exit(1);
    }
    let (m, n, k) = (128, 96, 64);
    let (la, lb, lc) = (
        Layout::row_major(m, k),
        Layout::row_major(k, n),
        Layout::row_major(m, n),
    );
    let a: Vec<f32> = (0..m * k).map(|i| ((i % 7) as f32 - 3.0) / 4.0).collect();
    let b: Vec<f32> = (0..k * n).map(|i| ((i % 5) as f32 - 2.0) / 3.0).collect();

    let stream = Stream::new()?;
    let blas = Handle::new(&stream)?;
    let da = DeviceBuffer::from_host(&a)?;
    let db = DeviceBuffer::from_host(&b)?;
    let mut dc = DeviceBuffer::<f32>::zeroed(m * n)?;
    // C = 1.0 * A B + 0.0 * C, with f32 accumulation (TF32 only when asked).
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
    let a64: Vec<f64> = a.iter().map(|&v| f64::from(v)).collect();
    let b64: Vec<f64> = b.iter().map(|&v| f64::from(v)).collect();
    let mut want = vec![0.0; m * n];
    reference::gemm(1.0, &a64, &la, &b64, &lb, 0.0, &mut want, &lc)?;
    let err = max_relative_error(&got, &want);
    println!("{m}x{n}x{k} f32 GEMM: max relative error {err:.1e}");
    if err > 1e-5 {
        std::process::exit(1);
    }
    Ok(())
}
