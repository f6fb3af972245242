//! The CUDA runtime: devices, streams, events and memory, and CUDA graphs.
//!
//! # CUDA graphs and capture safety
//! [`Stream::capture`] records a step into a [`CudaGraph`]; see its docs for
//! the scope, replay ([`CudaGraphExec::launch`], `unsafe`, and why) and
//! updates. Every op of the crate is capture-safe once its workspace is
//! sized; what is not returns [`Error::CaptureUnsafe`](crate::Error::CaptureUnsafe)
//! during a capture (the table of what to do beforehand is on [`Hazard`]).
//! An op of the crate with such a step (a workspace growth, a search, an
//! upload) calls, just before it,
//! `forbid_during_capture(op, stream, Hazard::...)?` (one line; it asks the
//! runtime only then).
//!
//! A framework's own (cudarc) stream is captured with this crate's calls in
//! it only through an *owned* capture (feature `cudarc`:
//! `CudarcStream::begin_owned_capture`, ended into an `OwnedGraph` that
//! keeps what it is given until its last launch completed).

mod affinity;
mod buffer;
mod capture;
mod convert;
mod copy;
mod device;
mod event;
mod graph;
#[cfg(test)]
pub(crate) mod hold_check;
mod host;
pub(crate) mod owned_capture;
mod queue;
mod scope;
mod stream;
mod stream_capture;
mod views;
pub(crate) mod wait;

#[allow(unused_imports)] // the launches use them
pub(crate) use affinity::{check_args, check_device};
pub use buffer::*;
pub use capture::{CaptureStatus, Hazard, PER_THREAD_SHARED, capture_rule};
#[allow(unused_imports)] // ScopeMark: the interop's tests
pub(crate) use capture::{
    ScopeMark, clear_last_error, forbid_in_capture_scope, implicit_is_capturing, in_capture_scope,
};
pub use device::*;
pub use event::*;
pub use graph::{CaptureMode, CudaGraph, CudaGraphExec};
pub use host::*;
pub(crate) use queue::QueueHold;
pub use scope::*;
pub(crate) use stream::check_stream_thread;
pub use stream::*;
pub use stream_capture::forbid_during_capture;
pub(crate) use stream_capture::{forbid_allocation_during_capture, forbid_creation_during_capture};
pub use views::*;
