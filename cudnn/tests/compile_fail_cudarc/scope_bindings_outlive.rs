// A plan's bindings made outside a scope cannot keep a view lent inside it.
use cudnn::dnn::Handle;
use cudnn::graph::Plan;
use cudnn::interop::CudarcStream;
use cudnn::interop::cudarc::driver::CudaSlice;

fn demo(s: &CudarcStream, plan: &Plan, h: &mut Handle, x: &CudaSlice<f32>) -> cudnn::Result<()> {
    let mut b = plan.bindings();
    s.scope(|sc| {
        b.input("x", sc.read(x)?)?;
        Ok(())
    })?;
    plan.execute(h, &mut b)
}

fn main() {}
