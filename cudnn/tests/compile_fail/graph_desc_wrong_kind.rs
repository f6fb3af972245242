// A pointwise descriptor cannot stand where a tensor descriptor is expected
// (cuDNN itself would abort the process on this).
use cudnn::graph::backend::{attr, kind, Descriptor};

fn main() -> cudnn::Result<()> {
    let pw = Descriptor::<kind::Pointwise>::new()?;
    let mut op = Descriptor::<kind::ConvForwardOp>::new()?;
    op.set_descriptors(attr::OPERATION_CONVOLUTION_FORWARD_X, &[&pw])?;
    Ok(())
}
