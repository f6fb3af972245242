// A cudarc slice bound for reading cannot also be bound for writing
// (nor written through cudarc) while the read guard lives.
use cudnn::interop::CudarcStream;
use cudnn::interop::cudarc::driver::CudaSlice;

fn demo(s: &CudarcStream, y: &mut CudaSlice<f32>) -> cudnn::Result<usize> {
    let read = s.read(&*y)?;
    let mut write = s.write(y)?;
    Ok(read.view().len() + write.view_mut().len())
}

fn main() {}
