// The destination of an async download stays borrowed until the scope has
// synchronized the stream: it cannot be read inside the scope.
use cudnn::runtime::{DeviceBuffer, HostBuffer, Stream};

fn main() -> cudnn::Result<()> {
    let stream = Stream::new()?;
    let dev = DeviceBuffer::<f32>::zeroed(4)?;
    let mut host = HostBuffer::<f32>::new(4)?;
    stream.scope(|s| {
        s.download(&dev, &mut host)?;
        println!("{}", host[0]);
        Ok(())
    })?;
    Ok(())
}
