// A view lent by `CudarcStream::scope` cannot leave the closure: the scope
// synchronizes the device and records cudarc's events when it ends.
use cudnn::interop::CudarcStream;
use cudnn::interop::cudarc::driver::CudaSlice;
use cudnn::runtime::DeviceSlice;

fn demo<'a>(s: &'a CudarcStream, x: &'a CudaSlice<f32>) -> cudnn::Result<DeviceSlice<'a, f32>> {
    s.scope(|sc| sc.read(x))
}

fn main() {}
