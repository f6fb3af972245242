//! The safe way to lend cudarc memory: a scope that owns cudarc's
//! record-on-drop guards and synchronizes the device at both ends.

use std::cell::RefCell;
use std::fmt;
use std::marker::PhantomData;
use std::time::Instant;

use ::cudarc::driver::{CudaContext, DeviceRepr, SyncOnDrop, result};

use super::driver::guarded;
use super::memory::{CudarcMemory, CudarcMemoryMut, CudarcRead, CudarcWrite};
use super::stream::CudarcStream;
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::runtime::wait::{self, DeviceWait, Ended, SCOPE_WAIT_DEADLINE, end_scope};
use crate::runtime::{CaptureStatus, DeviceSlice, DeviceSliceMut, Hazard};

/// cudarc memory lent inside [`CudarcStream::scope`]: [`read`](Self::read)
/// and [`write`](Self::write) give this crate's views, valid until the
/// closure returns.
///
/// The scope, not the caller, owns cudarc's guards, so none can be leaked;
/// each lend waits (host) until cudarc's pending work on the memory is done,
/// and the scope's end waits until all work of the device's context is
/// done before cudarc's read/write events are recorded. So the views may be
/// used on any stream of that device, at the cost of those two host waits.
pub struct CudarcScope<'scope, 'env> {
    lent: &'scope Lent<'env>,
    /// Invariant in `'scope`, as `std::thread::Scope`: views cannot be
    /// stretched past the closure.
    _scope: PhantomData<&'scope mut &'scope ()>,
}

/// What a scope lent: cudarc's record-on-drop guards, dropped only after a
/// full device-wide wait succeeded (also when the closure panicked).
struct Lent<'env> {
    stream: &'env CudarcStream,
    syncs: RefCell<Vec<SyncOnDrop<'env>>>,
}

impl Lent<'_> {
    /// Wait until the device is idle (`cuCtxSynchronize` of the stream's
    /// context, retried while it is refused), then let cudarc record its
    /// events. See [`end_scope`] for what happens when no wait succeeds.
    fn finish(&self) -> Result<()> {
        let ctx = self.stream.cudarc().context();
        let mut syncs = self.syncs.borrow_mut();
        if syncs.is_empty() {
            // Nothing was lent (a view exists only after its guard was
            // kept): no memory to protect, no wait needed.
            return Ok(());
        }
        let deadline = Instant::now() + SCOPE_WAIT_DEADLINE;
        match end_scope(
            &ContextWait { ctx, deadline },
            &mut syncs,
            || Instant::now() >= deadline,
            std::thread::sleep,
        ) {
            Ended::Released(r) => r,
            Ended::Stuck(e) => stuck(&e, syncs.len()),
        }
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        // Reached with guards only when the closure panicked: the device
        // still finishes the work that used the views before cudarc's
        // events are recorded. Nothing panics here; the wait is bounded
        // (`SCOPE_WAIT_DEADLINE`), after which the process aborts rather
        // than release (see `stuck`).
        if !self.syncs.get_mut().is_empty() {
            let _ = self.finish();
        }
    }
}

/// The real wait: once none of this crate's captures is open on the
/// context's device (waiting for them to end, up to the deadline, and
/// counted as a wait in progress so none begins there meanwhile), with the calling thread's capture mode exchanged to
/// relaxed, bind the context (without cudarc's `check_err`, so an error
/// stored meanwhile is not mistaken for a failed wait) and
/// `cuCtxSynchronize`.
pub(super) struct ContextWait<'a> {
    pub(super) ctx: &'a CudaContext,
    pub(super) deadline: Instant,
}

impl DeviceWait for ContextWait<'_> {
    fn take_stored(&self) -> Option<Error> {
        guarded("cudarc CudaContext::check_err", || self.ctx.check_err()).err()
    }

    fn wait(&self) -> Result<()> {
        // Counted as a wait in progress on the context's device (no lock
        // is held across the wait): captures of the crate on that device
        // do not begin meanwhile (refused after 1 s); other devices'
        // captures neither delay nor are delayed by it.
        let device = Some(self.ctx.ordinal());
        let Some(_no_capture_begins) = wait::no_own_captures(device, self.deadline) else {
            // Not called against this crate's captures: the same answer
            // the driver would give (a capture refusal), so `end_scope`
            // treats it as one.
            return Err(Error::Driver {
                call: "cuCtxSynchronize",
                code: 900,
                name: "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED".into(),
                text: "not called: a capture of this crate stayed open until the deadline".into(),
                context: None,
            });
        };
        let _relaxed = wait::RelaxedCaptureMode::enter();
        let cu_ctx = self.ctx.cu_ctx();
        guarded("cuCtxSynchronize", || {
            if result::ctx::get_current()? != Some(cu_ctx) {
                // SAFETY: `cu_ctx` is the primary context cudarc retains for
                // as long as `self.ctx` (borrowed from the scope's stream,
                // which keeps its `Arc<CudaContext>`) lives.
                unsafe { result::ctx::set_current(cu_ctx) }?;
            }
            result::ctx::synchronize()
        })
    }
}

/// cudarc's capture status as this crate's (an unknown value counts as
/// capturing).
pub(crate) fn capture_status_of(st: ::cudarc::driver::sys::CUstreamCaptureStatus) -> CaptureStatus {
    use ::cudarc::driver::sys::CUstreamCaptureStatus as S;
    match st {
        S::CU_STREAM_CAPTURE_STATUS_NONE => CaptureStatus::None,
        S::CU_STREAM_CAPTURE_STATUS_INVALIDATED => CaptureStatus::Invalidated,
        _ => CaptureStatus::Active,
    }
}

/// No device-wide wait succeeded. The memory the scope lent is not the
/// scope's: the caller may drop the `CudaSlice` as soon as the scope
/// returns, and cudarc then frees it (`cuMemFreeAsync`) after the read and
/// write events it last recorded. Leaking the guards would not keep it
/// alive: those events would still mark the state *before* the scope, so
/// the free would be ordered before this crate's work on other streams.
/// Dropping them records the events on cudarc's stream only. Either way the
/// device could use freed memory; so the process stops here, with the
/// reason on stderr (a capture left open for the whole deadline, e.g.
/// `begin_capture` on a cudarc stream inside the closure and never ended).
fn stuck(e: &Error, lent: usize) -> ! {
    wait::stuck(
        "CudarcScope",
        e,
        &format!("the {lent} cudarc value(s) it lent"),
    )
}

/// Inside a [`Stream::capture`](crate::runtime::Stream::capture) closure on
/// this thread, a lend is refused before anything else (no query, no guard
/// kept): its host waits would be refused there, and the scope's end would
/// wait for the device while this thread's own capture is open.
fn refuse_inside_capture_closure() -> Result<()> {
    crate::runtime::forbid_in_capture_scope("CudarcScope::read/write", Hazard::HostSync)
}

impl fmt::Debug for CudarcScope<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudarcScope")
            .field("stream", self.lent.stream)
            .field("lent", &self.lent.syncs.borrow().len())
            .finish()
    }
}

impl<'scope, 'env> CudarcScope<'scope, 'env> {
    /// Host wait until cudarc's stream has passed everything queued so far
    /// (the waits `device_ptr` just queued for cudarc's pending work on
    /// other streams included).
    fn settle(&self) -> Result<()> {
        let cs = self.lent.stream.cudarc();
        guarded("cudarc CudaStream::synchronize", || cs.synchronize())
    }

    /// Refuse a lend while cudarc's stream is being captured (cudarc's
    /// `begin_capture`): the waits and event records of the lend would be
    /// captured into cudarc's graph instead of ordering anything now, and
    /// the scope's host waits would fail.
    fn not_capturing(&self) -> Result<()> {
        refuse_inside_capture_closure()?;
        let cs = self.lent.stream.cudarc();
        let st = guarded("cudarc CudaStream::capture_status", || cs.capture_status())?;
        crate::runtime::capture_rule(
            "CudarcScope::read/write",
            capture_status_of(st),
            &Hazard::HostSync,
        )
    }

    /// Lend `src` for reading: cudarc's pending writes of it finish first
    /// (host wait); the view is valid until the scope's closure returns.
    /// `src` is cudarc's own memory ([`CudarcMemory`]: a `CudaSlice` or a
    /// view of one), whose address and length this crate can trust.
    ///
    /// # Errors
    /// As [`CudarcStream::read`]; [`Error::Driver`](crate::Error::Driver)
    /// from the wait.
    pub fn read<T, S>(&'scope self, src: &'env S) -> Result<DeviceSlice<'scope, T>>
    where
        T: DataType + DeviceRepr,
        S: CudarcMemory<T>,
    {
        self.not_capturing()?;
        // SAFETY: the guard's record-on-drop is kept by this scope, which
        // drops it only after a `cuCtxSynchronize` of the context succeeded
        // (all streams of the device idle) or the context is lost, and
        // otherwise aborts the process (`end_scope`): every use of the view,
        // on whatever stream, is complete when cudarc's event is recorded.
        let g = unsafe { CudarcRead::new(src, self.lent.stream.cudarc()) }?;
        let (addr, len, device, sync) = g.into_parts();
        self.lent.syncs.borrow_mut().push(sync);
        self.settle()?;
        // SAFETY: `addr`/`len` come from cudarc's `device_ptr` of `src`,
        // cudarc's own memory type (`CudarcMemory` is sealed), borrowed for
        // `'env` (checked: not null, aligned, fits); the view lives for
        // `'scope`, inside `'env`; cudarc's pending writes of it are done
        // (host wait above), so any stream may read it.
        Ok(unsafe { DeviceSlice::from_raw_parts_on(addr as *const T, len, device) })
    }

    /// Lend `dst` for writing: cudarc's pending reads and writes of it
    /// finish first (host wait); the view is valid until the scope's
    /// closure returns.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub fn write<T, S>(&'scope self, dst: &'env mut S) -> Result<DeviceSliceMut<'scope, T>>
    where
        T: DataType + DeviceRepr,
        S: CudarcMemoryMut<T>,
    {
        self.not_capturing()?;
        // SAFETY: as in `read`.
        let g = unsafe { CudarcWrite::new(dst, self.lent.stream.cudarc()) }?;
        let (addr, len, device, sync) = g.into_parts();
        self.lent.syncs.borrow_mut().push(sync);
        self.settle()?;
        // SAFETY: as in `read`, and `dst` is borrowed exclusively for
        // `'env`, so this is the only view of it.
        Ok(unsafe { DeviceSliceMut::from_raw_parts_mut_on(addr as *mut T, len, device) })
    }
}

impl CudarcStream {
    /// Lend cudarc memory safely: `f` gets a [`CudarcScope`] whose
    /// [`read`](CudarcScope::read) / [`write`](CudarcScope::write) give
    /// views valid until `f` returns, usable on any stream of the device.
    /// Each lend waits for cudarc's pending work on that memory, and the end
    /// of the scope waits for the whole device (`cuCtxSynchronize`) before
    /// cudarc records its events, so neither a view used on another stream
    /// nor a leaked value can let cudarc free or rewrite the memory under
    /// this crate's work. For hot loops without host waits, see the
    /// `unsafe` [`read`](Self::read) / [`write`](Self::write).
    ///
    /// # The end of the scope
    /// cudarc's guards are released only after a device-wide wait that
    /// *succeeded*. An error cudarc stored earlier (its `check_err`, which
    /// makes cudarc's own `CudaContext::synchronize` return without
    /// waiting) is taken first and returned after the wait. A scope that
    /// lent nothing does not wait. The wait is made
    ///
    /// - only while none of this crate's [`Stream::capture`](crate::runtime::Stream::capture) scopes is open
    ///   on the context's device: it first waits (up to 30 s) for them to
    ///   end, and none can begin there during the wait (one that tries
    ///   waits up to 1 s, then is refused), so it never runs against them.
    ///   No lock is held during the wait: captures on other devices, and
    ///   other threads' work, go on (an NCCL peer's matching call, say);
    /// - with the calling thread's capture mode exchanged to relaxed for
    ///   the call (`cudaThreadExchangeStreamCaptureMode`), so another
    ///   thread's global-mode capture does not forbid it.
    ///
    /// The driver still refuses `cuCtxSynchronize` while a stream of the
    /// device is being captured by other means (cudarc's `begin_capture`,
    /// another library): such captures cannot be seen by this crate; the
    /// wait is then retried (pauses of 1 to 100 ms) for up to 30 s, and a
    /// refused wait may invalidate such a capture (it ends with an error for
    /// its owner: a failed capture, never freed memory in use). When the
    /// context is lost (a sticky error such as an illegal address) nothing
    /// runs any more and the guards are released with that error.
    ///
    /// # Aborts
    /// The process **aborts** (reason on stderr) when no wait succeeded:
    /// a capture refused it for the whole 30 s (one left open, e.g.
    /// cudarc's `begin_capture` on a stream of the device and never ended,
    /// or a capture of this crate on the device that outlived the
    /// deadline: also one whose closure waits for this scope's thread,
    /// such as a closure joining a scoped thread that ends this scope),
    /// or the wait failed for any other reason that is not a
    /// lost context (it proves nothing, and retrying would not change it).
    /// The lent memory belongs to the caller, who may drop it as soon as
    /// the scope returns, and cudarc would then free it while this crate's
    /// work may still run on other streams; leaking the guards would not
    /// prevent that (cudarc's free waits only for the events it last
    /// recorded). So end every capture of the device before the scope ends.
    ///
    /// # Errors
    /// `f`'s error; [`Error::Driver`](crate::Error::Driver) with an error
    /// cudarc had stored, or the lost context's;
    /// [`Error::CaptureUnsafe`](crate::Error::CaptureUnsafe) from a lend
    /// inside a [`Stream::capture`](crate::runtime::Stream::capture) closure
    /// on this thread, or while
    /// cudarc's stream is being captured.
    pub fn scope<'env, R>(
        &'env self,
        f: impl for<'scope> FnOnce(&'scope CudarcScope<'scope, 'env>) -> Result<R>,
    ) -> Result<R> {
        let lent = Lent {
            stream: self,
            syncs: RefCell::new(Vec::new()),
        };
        let r = f(&CudarcScope {
            lent: &lent,
            _scope: PhantomData,
        });
        let synced = lent.finish();
        let r = r?;
        synced.map(|()| r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// cudarc's capture states map as the runtime's: only `NONE` is not
    /// capturing.
    #[test]
    fn unit_cudarc_capture_status() {
        use ::cudarc::driver::sys::CUstreamCaptureStatus as S;
        assert_eq!(
            capture_status_of(S::CU_STREAM_CAPTURE_STATUS_NONE),
            CaptureStatus::None
        );
        assert!(capture_status_of(S::CU_STREAM_CAPTURE_STATUS_ACTIVE).is_capturing());
        assert!(capture_status_of(S::CU_STREAM_CAPTURE_STATUS_INVALIDATED).is_capturing());
    }

    /// Inside a capture closure of this crate on this thread, a lend is
    /// refused (typed, as a host synchronization) before anything is asked
    /// of cudarc or a guard is kept, so the scope's end has nothing to wait
    /// for. (Before the fix only cudarc's stream was asked: it is not
    /// capturing, the lend went on, and the end's device-wide wait was
    /// refused for 30 s, then the process aborted.)
    #[test]
    fn unit_lend_inside_a_capture_closure_is_refused_first() {
        let _mark = crate::runtime::ScopeMark::enter();
        let r = refuse_inside_capture_closure();
        match r {
            Err(Error::CaptureUnsafe { op, hazard, .. }) => {
                assert_eq!(op, "CudarcScope::read/write");
                assert_eq!(hazard, Hazard::HostSync.what());
            }
            other => panic!("{other:?}"),
        }
        drop(_mark);
        assert!(refuse_inside_capture_closure().is_ok());
    }
}
