//! The CUDA runtime: devices, streams, events and memory.

mod device;
mod event;
mod memory;
mod stream;

pub use device::*;
pub use event::*;
pub use memory::*;
pub use stream::*;
