// Only operation descriptors go into an operation graph.
use cudnn::graph::backend::{attr, kind, AnyOperation, Descriptor};

fn main() -> cudnn::Result<()> {
    let t = Descriptor::<kind::Tensor>::new()?;
    let mut g = Descriptor::<kind::OperationGraph>::new()?;
    let ops: [&dyn AnyOperation; 1] = [&t];
    g.set_operations(attr::OPERATIONGRAPH_OPS, &ops)?;
    Ok(())
}
