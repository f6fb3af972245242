// A writable view is exclusive: the buffer cannot be read while it lives.
use cudnn::runtime::DeviceBuffer;

fn main() -> cudnn::Result<()> {
    let mut buf = DeviceBuffer::<f32>::zeroed(4)?;
    let mut part = buf.slice_mut(0..2)?;
    let whole = buf.to_vec()?;
    part.copy_from_host(&whole[..2])?;
    Ok(())
}
