//! The CUDA runtime: devices, streams, events and memory.

mod affinity;
mod device;
mod event;
mod memory;
mod stream;

#[allow(unused_imports)] // the launches use them
pub(crate) use affinity::{check_args, check_device};
pub use device::*;
pub use event::*;
pub use memory::*;
pub(crate) use stream::check_stream_thread;
pub use stream::*;
