// An AsyncScope cannot be used from another thread: `Stream::scope`
// synchronizes the stream as the calling thread names it, so a copy queued
// from a spawned thread (onto that thread's per-thread stream) could still
// be writing the pinned buffer after the scope returned.
use cudnn::runtime::{DeviceBuffer, Stream};

fn main() -> cudnn::Result<()> {
    let stream = Stream::per_thread();
    let dev = DeviceBuffer::<f32>::zeroed(4)?;
    let mut host = vec![0f32; 4];
    stream.scope(|sc| {
        std::thread::scope(|t| {
            t.spawn(|| sc.download(&dev, &mut host[..]));
        });
        Ok(())
    })
}
