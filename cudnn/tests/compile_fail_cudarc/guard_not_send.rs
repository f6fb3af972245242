// A guard is dropped on the thread that made it: cudarc records its event
// on the stream as named by the dropping thread (a per-thread stream names
// another queue on every thread), so the guard is not `Send`.
use cudnn::interop::CudarcStream;
use cudnn::interop::cudarc::driver::CudaSlice;

fn demo(s: &CudarcStream, x: &CudaSlice<f32>) -> cudnn::Result<()> {
    // SAFETY: (the case is about `Send`, not this contract).
    let guard = unsafe { s.read(x)? };
    std::thread::scope(|t| {
        t.spawn(move || drop(guard));
    });
    Ok(())
}

fn main() {}
