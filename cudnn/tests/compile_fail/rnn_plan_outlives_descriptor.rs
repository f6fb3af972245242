// A plan borrows its RNN descriptor: the descriptor cannot be dropped
// while the plan lives.
use cudnn::dnn::{RnnCellMode, Handle, RnnConfig, RnnDataLayout, RnnDescriptor, RnnPlan};
use cudnn::runtime::Stream;

fn main() -> cudnn::Result<()> {
    let stream = Stream::new()?;
    let mut handle = Handle::new(&stream)?;
    let rnn = RnnDescriptor::<f32>::new(&RnnConfig::new(RnnCellMode::Gru, 4, 8), None)?;
    let plan = RnnPlan::new(&mut handle, &rnn, RnnDataLayout::SeqMajorUnpacked, 3, &[3, 1])?;
    drop(rnn);
    println!("{:?}", plan.sizes());
    Ok(())
}
