//! cuDNN: the handle, descriptors and (later) the ops.

mod activation;
mod algo_cache;
mod conv;
mod conv_fused;
mod conv_ops;
mod conv_plans;
mod conv_problem;
mod conv_search;
mod ctc;
mod filter;
mod handle;
mod ops;
mod pooling;
mod rnn;
mod tensor;

pub use activation::*;
pub use algo_cache::*;
pub use conv::*;
pub use conv_fused::*;
pub use conv_ops::*;
pub use conv_plans::*;
pub use conv_problem::*;
pub use ctc::*;
pub use filter::*;
pub use handle::*;
pub use ops::*;
pub use pooling::*;
pub use rnn::*;
pub use tensor::*;
