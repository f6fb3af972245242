// The scope cannot escape its closure (copies queued after the final
// synchronization would outlive their host memory).
use cudnn::runtime::Stream;

fn main() -> cudnn::Result<()> {
    let stream = Stream::new()?;
    let mut leaked = None;
    stream.scope(|s| {
        leaked = Some(s);
        Ok(())
    })?;
    drop(leaked);
    Ok(())
}
