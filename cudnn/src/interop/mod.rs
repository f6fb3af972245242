//! Interop with [cudarc](https://docs.rs/cudarc) (feature
//! `cudarc`): the streams and memory of candle, burn and every other
//! cudarc-based framework, used by this crate's cuDNN, cuBLAS/cuBLASLt,
//! graph and NCCL calls without copies and without giving up cudarc's
//! stream synchronization.
//!
//! ```no_run
//! # #[cfg(not(feature = "dnn"))]
//! # fn main() { eprintln!("SKIPPED: this example needs feature `dnn`"); }
//! # #[cfg(feature = "dnn")]
//! # fn main() -> cudnn::Result<()> {
//! use cudnn::interop::{self, CudarcStream};
//! use cudnn::dnn::{
//!     ActivationDescriptor, ActivationMode, DeviceTensor, DeviceTensorMut, Handle,
//!     NanPropagation, TensorDescriptor,
//! };
//!
//! let ctx = interop::context(0)?; // cudarc's CudaContext, no panic without a driver
//! let cs = ctx.new_stream().map_err(|e| interop::driver_error("new_stream", e))?;
//! let x = cs.clone_htod(&[-1.0f32, 2.0, -3.0, 4.0]).map_err(|e| interop::driver_error("htod", e))?;
//! let mut y = cs.alloc_zeros::<f32>(4).map_err(|e| interop::driver_error("alloc", e))?;
//!
//! let s = CudarcStream::new(&cs)?;  // borrowed: cudarc keeps owning the stream
//! let mut dnn = Handle::new(&s)?;    // derefs to a `cudnn::runtime::Stream`
//! let d = TensorDescriptor::<f32>::nchw(1, 1, 2, 2)?;
//! let relu = ActivationDescriptor::new(ActivationMode::Relu, NanPropagation::Propagate)?;
//! {
//!     // SAFETY: the guards' views go to `dnn` (bound to `s`) only, and
//!     // both guards drop at the end of this block.
//!     let (xr, mut yw) = unsafe { (s.read(&x)?, s.write(&mut y)?) }; // cudarc's DevicePtr guards
//!     let (xt, yt) = (DeviceTensor::new(&d, &xr)?, DeviceTensorMut::new(&d, &mut yw)?);
//!     dnn.activation_forward(&relu, 1.0, xt, 0.0, yt)?;
//! } // guards drop: cudarc records the read of x and the write of y on `cs`
//! let host = cs.clone_dtoh(&y).map_err(|e| interop::driver_error("dtoh", e))?;
//! assert_eq!(host, [0.0, 2.0, 0.0, 4.0]);
//! # Ok(()) }
//! ```
//!
//! # Streams and the context
//! [`CudarcStream::new`] (or [`Stream::from_cudarc`](crate::runtime::Stream::from_cudarc))
//! wraps cudarc's `CUstream` as a [`Stream`](crate::runtime::Stream) that
//! this crate never destroys and that keeps cudarc's `Arc<CudaStream>`
//! alive while any clone of it lives (a handle bound to it included).
//!
//! cudarc works through the driver API in the *primary context* of a device
//! (`CudaContext::new` retains it with `cuDevicePrimaryCtxRetain`); this
//! crate and the libraries it calls (cuDNN, cuBLAS, NCCL) use the runtime
//! API, which also works in the primary context of the current device, and
//! every launch makes its stream's device current with `cudaSetDevice`
//! (which binds that primary context). So they are the same context. This
//! is not assumed: binding a stream makes cudarc's context current
//! (`bind_to_thread`), then calls `cudaSetDevice` exactly as a launch does,
//! then asks the driver (`cuCtxGetCurrent`) and refuses
//! ([`Error::Unsupported`](crate::Error::Unsupported)) unless the current
//! context is cudarc's. A non-primary cudarc context (`new_non_primary`,
//! `from_raw_context`) is refused up front: `cudaSetDevice` would switch
//! away from it. On another thread, call [`CudarcStream::bind_to_thread`]
//! first (cudarc's own calls bind their context each time).
//!
//! # Memory
//! [`CudarcStream::read`] and [`CudarcStream::write`] take a `CudaSlice`,
//! `CudaView` or `CudaViewMut` through cudarc's own `DevicePtr` /
//! `DevicePtrMut` on that stream, so the stream first waits for cudarc's
//! pending writes (and, to write, reads) of the memory on other streams,
//! and the guard, when dropped, records the read or write event cudarc
//! tracks. The guards lend this crate's
//! [`DeviceSlice`](crate::runtime::DeviceSlice) /
//! [`DeviceSliceMut`](crate::runtime::DeviceSliceMut) (`&guard`,
//! `&mut guard`), so every op, graph `Bindings`, GEMM/cuBLASLt call and
//! collective takes them unchanged and checks their length against its
//! descriptors and their device against its handle's. The element type is
//! checked at compile time: `T: DataType + DeviceRepr`, i.e. `f32`, `f64`,
//! `half::f16`, `half::bf16`, `i8`, `u8`, `i32`, `i64` (cudarc's `f16`
//! feature is on). A guard borrows the cudarc slice (shared for `read`,
//! exclusive for `write`) and the view borrows the guard, so the slice
//! cannot be dropped or mutably aliased while bound, and cudarc's event is
//! recorded only after the last enqueue that uses the view
//! (`tests/compile_fail_cudarc` proves it).
//!
//! `read` and `write` are `unsafe`, with a two-part contract the compiler
//! cannot check: queue every op that uses a guard's views on the stream
//! the guard was made from (the event cudarc records is on that stream, and
//! a view carries no stream: passed to a handle bound to another stream,
//! the work there would not be ordered before cudarc's later use or free
//! of the memory), and let the guard drop (a leaked guard, e.g.
//! `std::mem::forget`, ends the borrow without recording the event). The
//! crate's own stream-ordered allocation
//! ([`DeviceBuffer::alloc_async`](crate::runtime::DeviceBuffer::alloc_async))
//! is `unsafe` for the same reason. Memory of another cudarc context than
//! the stream's is refused ([`Error::InvalidArgument`](crate::Error::InvalidArgument)).
//!
//! A third condition of `read` and `write`: no capture. While the stream
//! is being captured into a CUDA graph, cudarc's wait and event record
//! would be captured instead of ordering anything, and the graph would keep
//! the address. The crate never captures a cudarc stream with
//! [`Stream::capture`](crate::runtime::Stream::capture) (refused) and
//! queues nothing on one while cudarc captures it
//! ([`Error::CaptureUnsafe`](crate::Error::CaptureUnsafe)); the one
//! exception is an owned capture
//! ([`CudarcStream::begin_owned_capture`], `unsafe`, ended into an
//! [`OwnedGraph`] that keeps what it is given and launches through this
//! crate): whole-step graphs of a framework's stream; inside a capture
//! closure of another stream, work on a cudarc stream that is not capturing
//! runs at once, outside the graph (joining it to the capture through a
//! captured event is refused by `Stream::wait_event`).
//!
//! The safe way is [`CudarcStream::scope`]: the scope owns the guards (none
//! can leak), each lend waits (host) for cudarc's pending work on the
//! memory, and the scope's end waits for the whole device before cudarc
//! records its events, so the views may go to any stream of the device.
//! It costs those host waits; the `unsafe` guards cost none. The end's
//! wait must *succeed* before the guards are released: an error cudarc
//! stored earlier does not replace it, a wait refused because a stream of
//! the device is capturing is retried for up to 30 s, and when none
//! succeeds the process aborts rather than let cudarc free memory the
//! device may still use (see [`CudarcStream::scope`]).
//! The guards are not `Send`: cudarc records the event on the stream as
//! the dropping thread names it, and a per-thread stream names another
//! queue on each thread.
//!
//! # The other direction
//! This crate's [`DeviceBuffer`](crate::runtime::DeviceBuffer) and views
//! are *not* offered to cudarc as `CudaSlice`/`CudaView`. cudarc can only
//! make those by taking ownership of the pointer
//! (`CudaStream::upgrade_device_ptr`, freed on drop): a borrowed wrapper
//! would have to hand out `&mut CudaSlice` for writes, through which safe
//! code can `std::mem::swap` it with an owned slice and so free this
//! crate's memory twice, and `upgrade_device_ptr` panics when its event
//! creation fails. Code that needs a raw `CUdeviceptr` of a crate buffer
//! has `as_raw`/`as_raw_mut` (ordering is then the caller's job); to move
//! data, copy it into a cudarc allocation (`memcpy_dtod` from a
//! `CudarcStream::write` guard, or this crate's copy into the guard's view).
//!
//! # cudarc versions and features
//! The feature depends on cudarc 0.19 with `default-features = false` and
//! `std`, `driver`, `f16`, `fallback-dynamic-loading`,
//! `cuda-version-from-build-system`, `fallback-latest`. It enables **no
//! `cuda-XXXXX` version feature**, so it never adds a second one next to a
//! framework's: cudarc's build script takes `CUDARC_CUDA_VERSION` when it
//! is set (as an extra version cfg: it must then name the framework's
//! version feature, if any), else the framework's version feature, else
//! `nvcc --version`, else (no toolkit: CI, docs.rs) its newest bindings,
//! which may name driver symbols an older driver lacks (cudarc panics
//! when it calls one). Two *different* version
//! features in one build (say two frameworks, one on `cuda-12080`, one on
//! `cuda-13000`) do not compile inside cudarc itself (both sets of cfg'd
//! bindings are defined: "`CUDA_VERSION` is defined multiple times"), with
//! or without this crate: the application picks one. Loading is at run
//! time unless a framework chose `dynamic-linking` or `static-linking`
//! (`fallback-dynamic-loading` then steps aside). CI checks that a
//! framework's `cuda-12080` and its `dynamic-linking` unify with this
//! feature.
//!
//! # No driver
//! cudarc panics when `libcuda` does not load. [`context`],
//! [`device_count`] and [`probe_driver`] return
//! [`Error::NoDevice`](crate::Error::NoDevice) instead: a probe with the
//! system loader first (which also recognizes this crate's planning stub),
//! and cudarc's call inside `catch_unwind`.

mod driver;
mod memory;
mod owned;
mod scope;
mod stream;

pub use ::cudarc;
pub use driver::{context, device_count, driver_error, probe_driver};
pub use memory::{CudarcMemory, CudarcMemoryMut, CudarcRead, CudarcWrite};
pub use owned::{OwnedCapture, OwnedGraph};
pub use scope::CudarcScope;
pub use stream::CudarcStream;
