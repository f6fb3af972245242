// A plan's bindings hold the pointer of a cudarc slice: they cannot outlive
// the guard that lent it (so cudarc's event is recorded only after the last
// execute that uses it).
use cudnn::dnn::Handle;
use cudnn::graph::Plan;
use cudnn::interop::CudarcStream;
use cudnn::interop::cudarc::driver::CudaSlice;

fn demo(s: &CudarcStream, plan: &Plan, h: &mut Handle, x: &CudaSlice<f32>) -> cudnn::Result<()> {
    let mut b = plan.bindings();
    {
        // SAFETY: (the case is about the borrow, not this contract).
        let guard = unsafe { s.read(x)? };
        b.input("x", &guard)?;
    }
    plan.execute(h, &mut b)
}

fn main() {}
