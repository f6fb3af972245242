// A tensor attribute cannot be set on a convolution descriptor.
use cudnn::graph::backend::{attr, kind, Descriptor};

fn main() -> cudnn::Result<()> {
    let mut c = Descriptor::<kind::Convolution>::new()?;
    c.set(attr::TENSOR_DIMENSIONS, &[1, 2, 3, 4])?;
    Ok(())
}
