//! cuDNN's legacy API, safe: the [`Handle`], typed descriptors and the
//! layer-by-layer ops, forward and backward.
//!
//! | what | where |
//! |---|---|
//! | the handle: bound to a [`Stream`](crate::runtime::Stream), owns the growable workspace | [`Handle`] |
//! | tensors and filters typed by element type (a dtype mismatch does not compile) | [`TensorDescriptor`], [`FilterDescriptor`], [`DeviceTensor`], [`DeviceTensorMut`] |
//! | convolution: forward, backward data, backward filter, bias gradient, as reusable plans with algorithm search and a shared [`AlgoCache`] | [`ConvDescriptor`], [`ConvProblem`], [`ConvForwardPlan`], [`ConvBackwardDataPlan`], [`ConvBackwardFilterPlan`], [`ConvBackwardBiasPlan`] |
//! | fused convolution + bias + activation | [`ConvBiasActivationPlan`] ([`Handle::conv_bias_activation_plan`]) |
//! | pooling, activation, softmax | [`PoolingPlan`], [`Handle::activation_forward`], [`Handle::softmax_forward`] and their backwards |
//! | tensor arithmetic: add, op, scale, set, transform (layout and dtype), reduce | [`Handle::add_tensor`], [`Handle::op_tensor`], [`Handle::transform_tensor`], [`ReducePlan`] |
//! | batch normalization (training and inference), dropout | [`BatchNormPlan`], [`Dropout`] |
//! | recurrent networks (RNN, LSTM, GRU) and CTC loss | [`RnnConfig`], [`RnnPlan`], [`CtcPlan`] |
//!
//! Every op checks its buffers against the descriptors, and the descriptors
//! against each other, in Rust before cuDNN is called (see the
//! [rules](#how-an-op-is-checked) below and [`ConvProblem`]); whatever
//! can be computed from shapes alone (output descriptors, the algorithm,
//! the workspace size) lives in a plan, so a run is one library call. The
//! handle is `Send`, not `Sync` (cuDNN's threading rule): one per thread
//! or stream.
//!
//! cuDNN 9 deprecates this API in favour of the graph API
//! ([`crate::graph`]), which fuses more (a convolution with its bias,
//! activation and normalization epilogue, attention) and plans for a GPU
//! this machine does not have. This module stays for the ops it covers and
//! for cuDNN 8.
//!
//! ```no_run
//! # #[cfg(feature = "dnn")]
//! # mod example {
//! use cudnn::dnn::{AlgoSearch, ConvDescriptor, FilterDescriptor, Handle, TensorDescriptor};
//! use cudnn::runtime::{DeviceBuffer, Stream};
//! # pub fn main() -> cudnn::Result<()> {
//! let stream = Stream::new()?;
//! let mut dnn = Handle::new(&stream)?;
//! let x = TensorDescriptor::<f32>::nchw(8, 3, 224, 224)?;
//! let w = FilterDescriptor::<f32>::nchw(64, 3, 7, 7)?;
//! let conv = ConvDescriptor::new_2d([3, 3], [2, 2], [1, 1])?;
//! let plan = dnn.conv_forward_plan(&x, &w, &conv, AlgoSearch::Heuristic)?;
//! let x_dev = DeviceBuffer::<f32>::zeroed(x.len_required())?;
//! let w_dev = DeviceBuffer::<f32>::zeroed(w.element_count())?;
//! let mut y = DeviceBuffer::<f32>::zeroed(plan.output().element_count())?;
//! plan.run(&mut dnn, 1.0, &x_dev, &w_dev, 0.0, &mut y)?; // y = conv(x, w)
//! stream.synchronize()?;
//! # Ok(()) }
//! # }
//! # fn main() {}
//! ```
//!
//! # Convolution
//!
//! Convolution ops as reusable plans: forward, backward data, backward
//! filter ([`ConvForwardPlan`], [`ConvBackwardDataPlan`],
//! [`ConvBackwardFilterPlan`]), the bias gradient
//! ([`ConvBackwardBiasPlan`]) and convolution + bias + activation
//! ([`ConvBiasActivationPlan`]).
//!
//! ## Two stages
//! 1. [`ConvProblem`], the descriptor side (host only, no device): it
//!    validates the shapes, resolves the compute type, computes the output
//!    shape in Rust ([`ConvDescriptor::output_shape`]) and cross-checks it
//!    with cuDNN (`cudnnGetConvolutionNdForwardOutputDim`), builds the
//!    output descriptor in the input's layout, the [`AlgoKey`], and checks
//!    buffer lengths ([`ConvProblem::check_buffers`]).
//! 2. `problem.plan(&mut handle, &options)` (needs a device): picks the
//!    algorithm by [`AlgoSearch`] under the filters of [`PlanOptions`],
//!    consulting the [`AlgoCache`] first, and sizes the workspace.
//!
//! ## One library call per run
//! A plan owns its descriptors (copies of the problem's, with the chosen math
//! type set), the algorithm and the workspace size. `run` checks the buffer
//! lengths in Rust, takes the handle's workspace (which allocates only when
//! it must grow, normally never: planning already grew it), and makes exactly
//! one cuDNN call. `run_with_workspace` takes the caller's workspace instead,
//! checked against the plan's size and [`WORKSPACE_ALIGNMENT`]. (A plan made from a known choice,
//! `plan_with`, also asks cuDNN once, on its first run, how much workspace
//! the algorithm needs, so a wrong size is an error rather than an overrun;
//! a cached choice is checked the same way when the plan is built.)
//!
//! ## Element and compute types
//! [`ConvDataType`]: `f32`, `f64`, `f16`, `bf16`. The compute type is the
//! descriptor's when cuDNN accepts it for the element type (f32 for f32;
//! f64 for f64; f32, or f16 "true half", for f16; f32 for bf16), and the
//! descriptor's default f32 becomes f64 for f64 data; anything else is an
//! error. Half types accumulate in f32 by default.
//!
//! Math types follow [`MathPolicy`]: tensor cores for f16/bf16 unless
//! forbidden; for f32 data TF32 only with [`MathPolicy::AllowTf32`] (without
//! it, cuDNN's default math, which allows TF32 on Ampere and newer, is
//! replaced by `CUDNN_FMA_MATH`). The rule applies to every source of a math
//! type: a searched candidate, a fixed algorithm, a cache entry (also one
//! loaded from a file), and a caller's saved choice
//! ([`plan_with_policy`](ConvProblem::plan_with_policy)).
//!
//! Descriptors of different element types cannot be mixed; this does not
//! compile:
//! ```compile_fail
//! use cudnn::dnn::*;
//! let x = TensorDescriptor::<f32>::nchw(1, 3, 8, 8)?;
//! let w = FilterDescriptor::<half::f16>::nchw(4, 3, 3, 3)?;
//! let conv = ConvDescriptor::new_2d([1, 1], [1, 1], [1, 1])?;
//! let p = ConvProblem::forward(&x, &w, &conv)?;
//! # Ok::<(), cudnn::Error>(())
//! ```
//! while this (the same with one element type) does:
//! ```no_run
//! # #[cfg(feature = "dnn")]
//! # fn example() -> cudnn::Result<()> {
//! use cudnn::dnn::*;
//! let x = TensorDescriptor::<half::f16>::nchw(1, 3, 8, 8)?;
//! let w = FilterDescriptor::<half::f16>::nchw(4, 3, 3, 3)?;
//! let conv = ConvDescriptor::new_2d([1, 1], [1, 1], [1, 1])?;
//! let p = ConvProblem::forward(&x, &w, &conv)?;
//! assert_eq!(p.output_shape(), [1, 4, 8, 8]);
//! # Ok(()) }
//! # fn main() {}
//! ```
//!
//! ## Shapes
//! 2-d and 3-d (and up to 6 spatial dimensions) directly; 1-d as 2-d with a
//! unit height (`x: [n, c, 1, w]`, filter `[k, c, 1, kw]`, padding
//! `[0, p]`). Groups (depthwise is `groups == c`), dilation, padding and
//! stride per dimension; NCHW and NHWC (channels-last strides; the output
//! follows the input's layout).
//!
//! # The other ops
//!
//! The element-wise and normalization ops: pooling, activation, softmax,
//! tensor arithmetic (add, op, scale, set, transform, reduce), batch
//! normalization and dropout, forward and backward.
//!
//! ## How an op is checked
//! A buffer travels with its descriptor as a [`DeviceTensor`] (read) or a
//! [`DeviceTensorMut`] (written); making one checks the buffer holds
//! [`len_required`](TensorDescriptor::len_required) elements, so a call
//! cannot read or write past it. Each op then checks the descriptors agree
//! (shapes, cuDNN's broadcasting rule, the pooling output shape) *before*
//! cuDNN is called, with the `check_*` function of the same name, which
//! needs no handle (validate a graph ahead of time with them). The errors
//! name the argument and both values.
//!
//! ## Plans
//! Where something can be computed once from shapes, a plan holds it:
//! [`PoolingPlan`] (the output descriptor), [`BatchNormPlan`] (the derived
//! parameter descriptor), [`ReducePlan`] (workspace and index sizes),
//! [`Dropout`] (the random state). Running one makes one library call.
//!
//! ## Scaling
//! Every op blends: `out = alpha * op(in) + beta * out`, with `alpha` and
//! `beta` in the element type's [`Scale`](crate::Scale) type (`f32` for
//! `f16`/`bf16`/`f32`, `f64` for `f64`). With `beta = 0` the output is not
//! read (it may hold NaN).

#[cfg(feature = "dnn")]
mod activation;
#[cfg(feature = "dnn")]
mod algo_cache;
#[cfg(feature = "dnn")]
mod conv;
#[cfg(feature = "dnn")]
mod conv_fused;
#[cfg(feature = "dnn")]
mod conv_ops;
#[cfg(feature = "dnn")]
mod conv_plans;
#[cfg(feature = "dnn")]
mod conv_problem;
#[cfg(feature = "dnn")]
mod conv_search;
#[cfg(feature = "dnn")]
mod ctc;
#[cfg(feature = "dnn")]
mod filter;
mod handle;
#[cfg(feature = "dnn")]
mod ops;
#[cfg(feature = "dnn")]
mod pooling;
#[cfg(feature = "dnn")]
mod rnn;
#[cfg(feature = "dnn")]
mod tensor;

#[cfg(feature = "dnn")]
pub use activation::*;
#[cfg(feature = "dnn")]
pub use algo_cache::*;
#[cfg(feature = "dnn")]
pub use conv::*;
#[cfg(feature = "dnn")]
pub use conv_fused::*;
#[cfg(feature = "dnn")]
pub use conv_ops::*;
#[cfg(feature = "dnn")]
pub use conv_plans::*;
#[cfg(feature = "dnn")]
pub use conv_problem::*;
#[cfg(feature = "dnn")]
pub use ctc::*;
#[cfg(feature = "dnn")]
pub use filter::*;
pub use handle::*;
#[cfg(feature = "dnn")]
pub use ops::*;
#[cfg(feature = "dnn")]
pub use pooling::*;
#[cfg(feature = "dnn")]
pub use rnn::*;
#[cfg(feature = "dnn")]
pub use tensor::*;
