// A view borrows its buffer: it cannot outlive it.
use cudnn::runtime::{DeviceBuffer, DeviceSlice};

fn main() -> cudnn::Result<()> {
    let view: DeviceSlice<'_, f32>;
    {
        let buf = DeviceBuffer::<f32>::alloc(4)?;
        view = buf.slice(1..3)?;
    }
    println!("{}", view.len());
    Ok(())
}
