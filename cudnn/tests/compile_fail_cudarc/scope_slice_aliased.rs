// Inside a scope, a cudarc slice lent for reading cannot also be lent for
// writing: the lends borrow it until the scope ends.
use cudnn::interop::CudarcStream;
use cudnn::interop::cudarc::driver::CudaSlice;

fn demo(s: &CudarcStream, y: &mut CudaSlice<f32>) -> cudnn::Result<usize> {
    s.scope(|sc| {
        let r = sc.read(&*y)?;
        let w = sc.write(y)?;
        Ok(r.len() + w.len())
    })
}

fn main() {}
