// A buffer handed to a group must outlive the group: NCCL reads it only
// when the group ends. One made inside the closure does not.
use cudnn::nccl::{self, Communicator, ReduceOp};
use cudnn::runtime::{DeviceBuffer, Stream};

fn demo(comm: &Communicator, stream: &Stream) -> cudnn::Result<()> {
    nccl::group(|g| {
        let mut tmp = DeviceBuffer::<f32>::zeroed(16)?;
        g.all_reduce_in_place(comm, &mut tmp, ReduceOp::Sum, stream)
    })
}

fn main() {}
