//! Asynchronous host↔device copies whose host memory outlives them:
//! [`Stream::scope`] and [`AsyncScope`]; allocation for a stream.

use std::cell::RefCell;
use std::fmt;
use std::marker::PhantomData;
use std::mem;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::check::{self, cuda_call};
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::sys::cudart::cudaMemcpyKind;

use super::Stream;
use super::buffer::*;
use super::copy::*;
use super::views::*;
use super::wait::{self, DeviceWait, Ended, SCOPE_WAIT_DEADLINE, end_scope};

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
    /// Whether a copy was (or may have been) queued: set before the
    /// runtime call. Without one no host memory is lent to the device.
    /// (Atomic only so the type's auto traits stay those of `_thread`.)
    queued: AtomicBool,
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
        self.queued.store(true, Ordering::Relaxed);
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
        self.queued.store(true, Ordering::Relaxed);
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

/// Ends the scope when dropped (the closure panicked): the same wait as a
/// normal end.
struct EndOnUnwind<'a, 'scope, 'env>(&'a AsyncScope<'scope, 'env>);

impl Drop for EndOnUnwind<'_, '_, '_> {
    fn drop(&mut self) {
        let _ = self.0.finish();
    }
}

impl AsyncScope<'_, '_> {
    /// Wait until the copies are done before the borrows end (see
    /// [`Stream::scope`], "# Aborts"). Without a queued copy, the stream is
    /// synchronized as usual and its result returned.
    fn finish(&self) -> Result<()> {
        if !self.queued.load(Ordering::Relaxed) {
            return self.stream.synchronize();
        }
        let deadline = Instant::now() + SCOPE_WAIT_DEADLINE;
        let w = StreamWait {
            stream: self.stream,
            deadline,
            late: RefCell::new(None),
        };
        match end_scope(
            &w,
            &mut Vec::<()>::new(),
            || Instant::now() >= deadline,
            std::thread::sleep,
        ) {
            Ended::Released(r) => r,
            Ended::Stuck(e) => {
                wait::stuck("Stream::scope", &e, "the host memory lent to its copies")
            }
        }
    }
}

/// The wait at the end of a [`Stream::scope`]: `cudaStreamSynchronize` of
/// the stream with the calling thread's capture mode exchanged to relaxed,
/// past the queueing check (the scope's own stream may be waited for even
/// while another thread's capture would make the check refuse). A capture
/// refusal (the legacy stream while a blocking stream captures) first waits
/// for the crate's own captures to end; any other failure of the stream's
/// wait does not say whether the copies ended, so the whole device is then
/// waited for, and the stream's error reported after it.
struct StreamWait<'a> {
    stream: &'a Stream,
    deadline: Instant,
    late: RefCell<Option<Error>>,
}

impl DeviceWait for StreamWait<'_> {
    fn take_stored(&self) -> Option<Error> {
        None
    }

    fn wait(&self) -> Result<()> {
        let rt = check::cudart()?;
        let _on = self.stream.enter_unchecked()?;
        let _relaxed = wait::RelaxedCaptureMode::enter();
        // SAFETY: `raw` is a valid stream (owned, or by `from_raw`'s
        // contract); synchronizing queues nothing.
        let r = unsafe { cuda_call!(rt, cudaStreamSynchronize(self.stream.as_raw())) };
        let e = match r {
            Ok(()) => return Ok(()),
            Err(e) if wait::context_lost(&e) => return Err(e),
            Err(e) if wait::capture_refused(&e) => {
                super::capture::clear_last_error(rt);
                // Retry once this crate's captures ended (or at the
                // deadline, when `end_scope` gives up).
                let _ended = wait::own_captures_ended(self.device(), self.deadline);
                return Err(e);
            }
            Err(e) => e,
        };
        // SAFETY: no arguments; waits for the (current) stream's device.
        match unsafe { cuda_call!(rt, cudaDeviceSynchronize()) } {
            Ok(()) => {
                *self.late.borrow_mut() = Some(e);
                Ok(())
            }
            Err(d) => {
                if wait::capture_refused(&d) {
                    super::capture::clear_last_error(rt);
                    let _ended = wait::own_captures_ended(self.device(), self.deadline);
                }
                Err(d)
            }
        }
    }

    fn take_late(&self) -> Option<Error> {
        self.late.borrow_mut().take()
    }
}

impl StreamWait<'_> {
    /// The stream's device, as the capture registry counts it.
    fn device(&self) -> Option<usize> {
        self.stream.device().map(|d| d.ordinal())
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
    /// # Captures
    /// A scope is refused before `f` runs inside a [`Stream::capture`]
    /// closure on this thread, on a stream that is being captured, and on a
    /// stream value whose capture another thread has open; while the scope
    /// is open, a capture of this stream value cannot begin (`capture`
    /// returns [`Error::InvalidArgument`](crate::Error::InvalidArgument)).
    /// Another value wrapping the same raw stream ([`Stream::from_raw`])
    /// shares none of these marks. The end waits for the stream with the
    /// calling thread's capture mode exchanged to relaxed, so another
    /// thread's capture of another stream does not refuse it.
    ///
    /// # Aborts
    /// The process **aborts** (reason on stderr) when, after a copy was
    /// queued, no wait proves it done: the stream's wait (and the device's,
    /// tried after a failure of the stream's that is not a capture
    /// refusal) is refused because of a capture for 30 s (the stream was
    /// joined into a capture by an event inside `f`, or the legacy stream
    /// while a blocking stream's capture outlives the deadline), or fails
    /// for a reason that is not a lost context. Returning would end the
    /// borrows of host memory the copies may still read or write. A lost
    /// context (a sticky error) runs nothing any more: the scope returns
    /// its error.
    ///
    /// # Errors
    /// [`Error::WrongThread`](crate::Error::WrongThread) (before `f` runs) for another thread's
    /// per-thread stream; [`Error::CaptureUnsafe`](crate::Error::CaptureUnsafe) (before `f` runs)
    /// as under "Captures"; the first error of `f`; otherwise the
    /// synchronization's.
    pub fn scope<'env, R>(
        &self,
        f: impl for<'scope> FnOnce(&'scope AsyncScope<'scope, 'env>) -> Result<R>,
    ) -> Result<R> {
        // Refused before `f` runs: inside a capture closure (the end's wait
        // could never succeed there), another thread's per-thread stream,
        // another thread's capture of this value (counted under the same
        // lock as the scope), a capturing stream.
        super::capture::forbid_in_capture_scope("Stream::scope", super::Hazard::HostSync)?;
        // Held until the scope is open (which keeps captures of this value
        // out from then on).
        let hold = super::check_stream_thread("the stream of an async scope", self)?;
        let _open = self.open_scope("Stream::scope")?;
        drop(hold);
        super::stream_capture::forbid_during_capture(
            "Stream::scope",
            self,
            super::Hazard::HostSync,
        )?;
        let scope = AsyncScope {
            stream: self,
            _scope: PhantomData,
            _env: PhantomData,
            _thread: PhantomData,
            queued: AtomicBool::new(false),
        };
        let guard = EndOnUnwind(&scope);
        let result = f(&scope);
        mem::forget(guard);
        let synced = scope.finish();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Hazard;

    /// A stream value that names no real stream (never handed to the
    /// runtime: every case below is refused before any runtime call).
    fn fake_stream() -> Stream {
        let raw = std::ptr::NonNull::<u8>::dangling().as_ptr().cast();
        Stream::wrap_kept(raw, false, None, None, None)
    }

    fn assert_refused<T: fmt::Debug>(r: Result<T>, op: &str, hazard: &Hazard) {
        match r {
            Err(Error::CaptureUnsafe {
                op: o, hazard: h, ..
            }) => {
                assert_eq!(o, op);
                assert_eq!(h, hazard.what());
            }
            other => panic!("{op}: {other:?}"),
        }
    }

    /// Inside a capture closure on this thread, `Stream::scope` is refused
    /// before `f` runs (no copy can be queued whose end could never be
    /// waited for). Before the fix `f` ran, its copy really ran on the
    /// non-capturing stream, both waits were refused and the borrow ended
    /// with the DMA possibly running (review finding 1A).
    #[test]
    fn unit_scope_refused_inside_a_capture_closure_before_f_runs() {
        let s = fake_stream();
        let _mark = super::super::capture::ScopeMark::enter();
        let mut ran = false;
        let r = s.scope(|_| {
            ran = true;
            Ok(())
        });
        assert_refused(r, "Stream::scope", &Hazard::HostSync);
        assert!(!ran, "f ran");
    }

    /// While a scope of a stream value is open, a capture of it cannot be
    /// marked (typed, naming the stream), so no copy of the scope can join
    /// a graph (review finding 1C); once the scope is gone it can. And
    /// while a capture of it is marked, a scope cannot open. (Before the
    /// fix `mark_capturer` knew nothing of scopes.)
    #[test]
    fn unit_capture_and_scope_of_one_stream_value_exclude_each_other() {
        let s = fake_stream();
        {
            let _open = s.open_scope("Stream::scope").expect("no capture");
            let _two = s.open_scope("Stream::scope").expect("scopes nest");
            match s.mark_capturer() {
                Err(Error::InvalidArgument { arg, rule, .. }) => {
                    assert_eq!(arg, "stream");
                    assert!(rule.contains("2 open Stream::scope"), "{rule}");
                }
                other => panic!("{other:?}"),
            }
            // From another thread too (the count is on the value).
            let t = s.clone();
            let other = std::thread::spawn(move || t.mark_capturer().is_err());
            assert!(other.join().unwrap_or(false));
        }
        assert!(s.mark_capturer().is_ok(), "allowed after the scopes");
        assert_refused(
            s.open_scope("Stream::scope").map(|_| ()),
            "Stream::scope",
            &Hazard::HostSync,
        );
        // Another thread's scope on the marked value is refused before `f`
        // (by the queueing check: another thread's capture).
        let t = s.clone();
        let other = std::thread::spawn(move || {
            let mut ran = false;
            let r = t.scope(|_| {
                ran = true;
                Ok(())
            });
            (matches!(r, Err(Error::CaptureUnsafe { .. })), ran)
        });
        assert_eq!(other.join().ok(), Some((true, false)));
        s.clear_capturer();
        assert!(s.open_scope("Stream::scope").is_ok());
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(500))]

        /// Any interleaving of scope opens and closes and capture marks and
        /// clears on one stream value follows the model written from the
        /// docs: a capture can be marked only when none is and no scope is
        /// open; a scope can open only when no capture is marked; refusals
        /// change nothing.
        #[test]
        fn unit_property_scopes_and_captures_exclude_each_other(
            ops in proptest::collection::vec(0u8..4, 0..40),
        ) {
            let s = fake_stream();
            let mut open = Vec::new();
            let mut captured = false;
            for op in ops {
                match op {
                    0 => {
                        let r = s.open_scope("Stream::scope");
                        proptest::prop_assert_eq!(r.is_ok(), !captured);
                        if let Ok(g) = r {
                            open.push(g);
                        }
                    }
                    1 => {
                        open.pop();
                    }
                    2 => {
                        let r = s.mark_capturer();
                        proptest::prop_assert_eq!(r.is_ok(), !captured && open.is_empty());
                        if r.is_ok() {
                            captured = true;
                        }
                    }
                    _ => {
                        if captured {
                            s.clear_capturer();
                            captured = false;
                        }
                    }
                }
                proptest::prop_assert_eq!(s.capturer().is_some(), captured);
            }
        }
    }
}
