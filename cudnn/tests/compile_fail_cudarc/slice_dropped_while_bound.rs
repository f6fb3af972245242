// A cudarc slice lent to the crate (its read guard alive) cannot be
// dropped: the guard borrows it.
use cudnn::interop::CudarcStream;
use cudnn::interop::cudarc::driver::CudaSlice;

fn demo(s: &CudarcStream, x: CudaSlice<f32>) -> cudnn::Result<usize> {
    // SAFETY: (the case is about the borrow, not this contract).
    let guard = unsafe { s.read(&x)? };
    drop(x);
    Ok(guard.view().len())
}

fn main() {}
