// Host memory given to an async copy must outlive the scope: a buffer made
// (and dropped) inside the closure is rejected.
use cudnn::runtime::{DeviceBuffer, HostBuffer, Stream};

fn main() -> cudnn::Result<()> {
    let stream = Stream::new()?;
    let mut dev = DeviceBuffer::<f32>::zeroed(4)?;
    stream.scope(|s| {
        let host = HostBuffer::<f32>::new(4)?;
        s.upload(&host, &mut dev)?;
        Ok(())
    })?;
    Ok(())
}
