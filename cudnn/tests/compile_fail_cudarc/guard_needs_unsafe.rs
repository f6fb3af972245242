// Lending cudarc memory is `unsafe`: the compiler cannot see which stream a
// view is used on, nor a guard that is leaked, and cudarc's event is
// recorded on the guard's stream when it drops.
use cudnn::interop::CudarcStream;
use cudnn::interop::cudarc::driver::CudaSlice;

fn demo(s: &CudarcStream, x: &CudaSlice<f32>, y: &mut CudaSlice<f32>) -> cudnn::Result<usize> {
    let read = s.read(x)?;
    let write = s.write(y)?;
    Ok(read.len() + write.len())
}

fn main() {}
