// TENSOR_DIMENSIONS is INT64: f64 values do not compile.
use cudnn::graph::backend::{attr, kind, Descriptor};

fn main() -> cudnn::Result<()> {
    let mut t = Descriptor::<kind::Tensor>::new()?;
    t.set(attr::TENSOR_DIMENSIONS, &[1.0f64, 2.0])?;
    Ok(())
}
