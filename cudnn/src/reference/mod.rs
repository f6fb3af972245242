//! CPU reference implementations in `f64`: the oracles GPU results are
//! checked against (host-only; no library, no device).
//!
//! # Bounds
//! The references are for test-sized problems, and every one of them
//! returns an [`Error`](crate::Error) instead of panicking, aborting or
//! running without end, whatever sizes it is given:
//! - every size is computed with checked arithmetic (an overflow is
//!   [`Error::InvalidArgument`](crate::Error::InvalidArgument) naming the
//!   argument, in every build profile);
//! - no buffer a reference allocates, and no tensor or matrix it reads or
//!   writes, may hold more than [`MAX_ELEMENTS`] values; buffers are
//!   reserved fallibly (`try_reserve`), so a refused allocation is an
//!   error too. Each dimension (and batch count) of a shape is bounded by
//!   it as well, so a tensor that is empty but has an absurd extent is
//!   refused at once rather than looped over. (The pure shape helpers,
//!   such as [`conv::ConvParams::output_shape`], only compute and check
//!   the rules: they allocate nothing.)
//! - a call whose inner-loop steps (each module documents how it counts
//!   them) would exceed [`MAX_WORK`] is refused before anything is
//!   allocated or computed;
//! - an empty tensor (one with a 0 dimension, where the reference allows
//!   it) costs nothing: it is answered at once.

pub mod attention;
#[cfg(feature = "blas")]
pub mod attention_fp8;
pub mod block_scale;
mod bounds;
#[cfg(feature = "dnn")]
pub mod conv;
pub mod ctc;
pub mod gelu;
#[cfg(feature = "blas")]
pub mod gemm;
#[cfg(feature = "blas")]
pub mod gemm_fp8;
pub mod norm;
#[cfg(feature = "dnn")]
pub mod ops;
#[cfg(feature = "dnn")]
pub mod rnn;

/// The most elements any one dimension, tensor or buffer of a reference
/// may have: 2^30 (8 GiB of `f64`). Larger sizes are refused with
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument) naming the
/// argument.
pub const MAX_ELEMENTS: usize = 1 << 30;

/// The most inner-loop steps (about one multiply-add each) one reference
/// call accepts: 2^32. Larger problems are refused with
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument) naming the
/// argument that makes the work large.
pub const MAX_WORK: u64 = 1 << 32;
