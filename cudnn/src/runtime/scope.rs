//! Asynchronous host↔device copies whose host memory outlives them:
//! [`Stream::scope`] and [`AsyncScope`]; allocation for a stream.

use std::fmt;
use std::marker::PhantomData;
use std::mem;

use crate::check::{self};
use crate::dtype::DataType;
use crate::error::Result;
use crate::sys::cudart::cudaMemcpyKind;

use super::Stream;
use super::buffer::*;
use super::copy::*;
use super::views::*;

// ---------------------------------------------------------------------------
// Stream scope: asynchronous host<->device copies

/// Asynchronous host↔device copies on one stream, whose host memory is
/// guaranteed to outlive them. Made by [`Stream::scope`]; see the
/// [`DeviceBuffer`] docs ("What must outlive what") for why this is sound.
///
/// Neither `Send` nor `Sync`: [`Stream::scope`] synchronizes the stream *as
/// the calling thread names it*, so the copies must be queued from that
/// thread. (From another thread, a per-thread default stream would name
/// that thread's queue, which `scope` does not wait for, and a copy could
/// still be writing host memory after its borrow ended.)
pub struct AsyncScope<'scope, 'env: 'scope> {
    stream: &'scope Stream,
    /// Invariant in `'scope` and `'env` (as `std::thread::Scope`), so neither
    /// can be shortened to smuggle the scope or a borrow out.
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
    /// Not `Send`, not `Sync`: the scope stays on the thread of `Stream::scope`.
    _thread: PhantomData<*const ()>,
}

impl fmt::Debug for AsyncScope<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncScope")
            .field("stream", self.stream)
            .finish()
    }
}

impl<'env> AsyncScope<'_, 'env> {
    /// The stream the copies are queued on (queue kernels or library calls
    /// on it to order them with the copies).
    pub fn stream(&self) -> &Stream {
        self.stream
    }

    /// Queue a host-to-device copy. `src` stays borrowed (read-only) until
    /// the scope ends; the lengths must be equal.
    ///
    /// # Errors
    /// [`Error::Mismatch`](crate::Error::Mismatch) naming both lengths;
    /// [`Error::DeviceMismatch`](crate::Error::DeviceMismatch) when `dst` is
    /// not on the stream's device; [`Error::Cuda`](crate::Error::Cuda).
    #[doc(alias = "cudaMemcpyAsync")]
    pub fn upload<'d, T: DataType>(
        &self,
        src: &'env [T],
        dst: impl Into<DeviceSliceMut<'d, T>>,
    ) -> Result<()> {
        let mut dst = dst.into();
        check_same_len(
            "async upload: host source length must equal the device destination length",
            dst.len(),
            src.len(),
        )?;
        check_on_stream(
            || {
                "the device destination of an async upload (the scope's stream is on another device)".to_string()
            },
            self.stream,
            dst.device(),
        )?;
        // SAFETY: `src` is host memory of `byte_len` bytes borrowed for 'env, which
        // outlives `Stream::scope`, and `scope` synchronizes the stream before it
        // returns, so the host memory outlives the DMA and is not written during
        // it (shared borrow). `dst` is device memory of the same size (see
        // `copy_from_device_async` for why it stays allocated).
        unsafe {
            memcpy_async(
                dst.as_raw_mut(),
                src.as_ptr().cast(),
                dst.byte_len(),
                cudaMemcpyKind::cudaMemcpyHostToDevice,
                self.stream,
                &copy_what::<T>("host to device (async)", src.len()),
            )
        }
    }

    /// Queue a device-to-host copy. `dst` stays exclusively borrowed until
    /// the scope ends (it cannot be read before the data has arrived); the
    /// lengths must be equal.
    ///
    /// # Errors
    /// [`Error::Mismatch`](crate::Error::Mismatch) naming both lengths;
    /// [`Error::DeviceMismatch`](crate::Error::DeviceMismatch) when `src` is
    /// not on the stream's device; [`Error::Cuda`](crate::Error::Cuda).
    #[doc(alias = "cudaMemcpyAsync")]
    pub fn download<'d, T: DataType>(
        &self,
        src: impl Into<DeviceSlice<'d, T>>,
        dst: &'env mut [T],
    ) -> Result<()> {
        let src = src.into();
        check_same_len(
            "async download: host destination length must equal the device source length",
            src.len(),
            dst.len(),
        )?;
        check_on_stream(
            || {
                "the device source of an async download (the scope's stream is on another device)"
                    .to_string()
            },
            self.stream,
            src.device(),
        )?;
        // SAFETY: `dst` is host memory of `byte_len` bytes exclusively borrowed for
        // 'env, and `scope` synchronizes the stream before that borrow can end,
        // so the DMA finishes before anyone can read, free or reuse it. Every bit
        // pattern is a valid `T`. `src` is device memory of the same size.
        unsafe {
            memcpy_async(
                dst.as_mut_ptr().cast(),
                src.as_raw(),
                src.byte_len(),
                cudaMemcpyKind::cudaMemcpyDeviceToHost,
                self.stream,
                &copy_what::<T>("device to host (async)", src.len()),
            )
        }
    }
}

/// Synchronizes the stream when dropped (the closure panicked).
struct SyncOnUnwind<'a>(&'a Stream);

impl Drop for SyncOnUnwind<'_> {
    fn drop(&mut self) {
        if self.0.synchronize().is_err() {
            drain_device_of(self.0);
        }
    }
}

/// Last resort when synchronizing `stream` failed: wait for every stream of
/// the stream's device (not of whatever device is current), so the queue is
/// drained before borrows end. Errors are ignored (the caller reports the
/// synchronization's).
fn drain_device_of(stream: &Stream) {
    let _on = on_device(stream.device());
    if let Ok(rt) = check::cudart() {
        // SAFETY: takes no arguments; blocks until the current device (the
        // stream's, made current above when it is known) is idle.
        let _ = unsafe { rt.cudaDeviceSynchronize() };
    }
}

impl Stream {
    /// Run `f` with an [`AsyncScope`] for asynchronous host↔device copies on
    /// this stream, then synchronize the stream. Host memory handed to the
    /// scope is borrowed until `scope` returns, and `scope` returns only
    /// after the stream is idle — also when `f` fails or panics.
    ///
    /// ```no_run
    /// # use cudnn::runtime::{DeviceBuffer, HostBuffer, Stream};
    /// let stream = Stream::non_blocking()?;
    /// let input = HostBuffer::from_slice(&[1.0f32, 2.0, 3.0])?;
    /// let mut output = HostBuffer::<f32>::new(3)?;
    /// let mut dev = DeviceBuffer::<f32>::alloc(3)?;
    /// stream.scope(|s| {
    ///     s.upload(&input, &mut dev)?;
    ///     // ... queue work on s.stream() ...
    ///     s.download(&dev, &mut output)
    /// })?;
    /// assert_eq!(&output[..], &[1.0, 2.0, 3.0]);
    /// # Ok::<(), cudnn::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::WrongThread`](crate::Error::WrongThread) (before `f` runs) for another thread's
    /// per-thread stream; the first error of `f`; otherwise the
    /// synchronization's.
    pub fn scope<'env, R>(
        &self,
        f: impl for<'scope> FnOnce(&'scope AsyncScope<'scope, 'env>) -> Result<R>,
    ) -> Result<R> {
        // Another thread's per-thread stream is refused before `f` runs.
        super::check_stream_thread("the stream of an async scope", self)?;
        let scope = AsyncScope {
            stream: self,
            _scope: PhantomData,
            _env: PhantomData,
            _thread: PhantomData,
        };
        let guard = SyncOnUnwind(self);
        let result = f(&scope);
        mem::forget(guard);
        let synced = self.synchronize();
        if synced.is_err() {
            // Drain the stream's device anyway before the borrows end.
            drain_device_of(self);
        }
        let value = result?;
        synced?;
        Ok(value)
    }

    /// Allocate `len` elements on this stream's device (with `cudaMalloc`,
    /// whose free waits for the device, so the buffer may be used from any
    /// stream of that device), whatever device is current. For stream-ordered allocation see the `unsafe`
    /// [`DeviceBuffer::alloc_async`].
    ///
    /// # Errors
    /// As [`DeviceBuffer::alloc`].
    pub fn alloc<T: DataType>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        if len == 0 {
            return DeviceBuffer::alloc(0);
        }
        let _on = self.enter("the stream an allocation is made for")?;
        DeviceBuffer::alloc(len)
    }

    /// As [`Stream::alloc`], zeroed in stream order on this stream (work on
    /// other streams that reads it must be ordered after this stream).
    ///
    /// # Errors
    /// As [`DeviceBuffer::alloc`].
    pub fn alloc_zeroed<T: DataType>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        let mut b = self.alloc(len)?;
        b.memset_async(0, self)?;
        Ok(b)
    }
}
