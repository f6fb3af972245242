// An RNN descriptor keeps cuDNN's pointer to its dropout descriptor: the
// dropout cannot be dropped while the RNN descriptor lives.
use cudnn::dnn::{RnnCellMode, Dropout, Handle, RnnConfig, RnnDescriptor};
use cudnn::runtime::Stream;

fn main() -> cudnn::Result<()> {
    let stream = Stream::new()?;
    let mut handle = Handle::new(&stream)?;
    let dropout = Dropout::new(&mut handle, 0.1, 7)?;
    let mut cfg = RnnConfig::new(RnnCellMode::Lstm, 4, 8);
    cfg.num_layers = 2;
    let rnn = RnnDescriptor::<f32>::new(&cfg, Some(&dropout))?;
    drop(dropout);
    println!("{:?}", rnn.config());
    Ok(())
}
