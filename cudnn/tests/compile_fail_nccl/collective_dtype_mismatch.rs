// Send and receive buffers of a collective have one element type.
use cudnn::nccl::{Communicator, ReduceOp};
use cudnn::runtime::{DeviceBuffer, Stream};

fn demo(comm: &Communicator, stream: &Stream, a: &DeviceBuffer<f32>, b: &mut DeviceBuffer<i32>) {
    let _ = comm.all_reduce(a, b, ReduceOp::Sum, stream);
}

fn main() {}
