//! cuDNN: the handle, descriptors and (later) the ops.

mod activation;
mod conv;
mod filter;
mod handle;
mod pooling;
mod tensor;

pub use activation::*;
pub use conv::*;
pub use filter::*;
pub use handle::*;
pub use pooling::*;
pub use tensor::*;
