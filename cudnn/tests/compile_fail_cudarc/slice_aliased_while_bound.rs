// A cudarc slice bound for reading cannot also be bound for writing
// (nor written through cudarc) while the read guard lives.
use cudnn::interop::CudarcStream;
use cudnn::interop::cudarc::driver::CudaSlice;

fn demo(s: &CudarcStream, y: &mut CudaSlice<f32>) -> cudnn::Result<usize> {
    // SAFETY: (the case is about the borrow, not this contract).
    let read = unsafe { s.read(&*y)? };
    // SAFETY: as above.
    let mut write = unsafe { s.write(y)? };
    Ok(read.view().len() + write.view_mut().len())
}

fn main() {}
