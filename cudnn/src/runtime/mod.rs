//! The CUDA runtime: devices, streams, events and memory.

mod affinity;
mod buffer;
mod capture;
mod convert;
mod copy;
mod device;
mod event;
mod graph;
mod host;
mod scope;
mod stream;
mod views;

#[allow(unused_imports)] // the launches use them
pub(crate) use affinity::{check_args, check_device};
pub use buffer::*;
pub use capture::{CaptureStatus, Hazard, capture_rule, forbid_during_capture};
pub use device::*;
pub use event::*;
pub use graph::{CaptureMode, CudaGraph, CudaGraphExec};
pub use host::*;
pub use scope::*;
pub(crate) use stream::check_stream_thread;
pub use stream::*;
pub use views::*;
