//! CUDA events: markers in a stream, for timing and cross-stream ordering.

use std::fmt;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::check::{self, cuda_call};
use crate::error::{Error, Result};
use crate::sys::cudart::{self, CUevent_st, cudaError, cudaEvent_t};

use super::Stream;

/// Flags for [`Event::with_flags`] (`cudaEventCreateWithFlags`); combine with `|`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EventFlags(u32);

impl EventFlags {
    /// `cudaEventDefault`: timing enabled, spin-waiting.
    pub const DEFAULT: EventFlags = EventFlags(cudart::cudaEventDefault);
    /// `cudaEventBlockingSync`: [`Event::synchronize`] sleeps instead of spinning.
    pub const BLOCKING_SYNC: EventFlags = EventFlags(cudart::cudaEventBlockingSync);
    /// `cudaEventDisableTiming`: cheaper; [`Event::elapsed_ms`] refuses it.
    pub const DISABLE_TIMING: EventFlags = EventFlags(cudart::cudaEventDisableTiming);

    /// The raw flag bits.
    pub fn bits(self) -> u32 {
        self.0
    }
}

impl std::ops::BitOr for EventFlags {
    type Output = EventFlags;
    fn bitor(self, rhs: Self) -> Self {
        EventFlags(self.0 | rhs.0)
    }
}

/// A CUDA event (owned; destroyed on drop).
pub struct Event {
    raw: NonNull<CUevent_st>,
    timing: bool,
    /// Whether the last record happened inside a capture of this crate (a
    /// [`Stream::capture`] closure on the recording thread, or on a stream
    /// value whose capture is open): a stream another library owns must not
    /// wait for it (it would join the capture; see [`Stream::wait_event`]).
    captured: AtomicBool,
}

// SAFETY: the CUDA runtime API is thread-safe; an event handle may be recorded,
// queried and synchronized from any host thread (the CUDA Runtime API
// reference marks only graph objects, "Graph object thread safety", as not
// internally synchronized). `Event` owns its handle and destroys it once.
unsafe impl Send for Event {}
// SAFETY: as above; `&Event` only allows record/query/synchronize, which the
// runtime serializes internally.
unsafe impl Sync for Event {}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("raw", &self.raw)
            .field("timing", &self.timing)
            .finish()
    }
}

impl Event {
    /// A new event with timing enabled.
    ///
    /// # Errors
    /// [`Error::NoDevice`] when there is no usable device; [`Error::Cuda`]
    /// when the runtime refuses.
    #[doc(alias = "cudaEventCreate")]
    pub fn new() -> Result<Self> {
        Self::with_flags(EventFlags::DEFAULT)
    }

    /// A new event with `flags`.
    ///
    /// # Errors
    /// As [`Event::new`].
    #[doc(alias = "cudaEventCreateWithFlags")]
    pub fn with_flags(flags: EventFlags) -> Result<Self> {
        let rt = check::cudart()?;
        let mut raw: cudaEvent_t = ptr::null_mut();
        // SAFETY: `raw` is a valid, writable out-pointer; flags are plain bits
        // the runtime validates.
        unsafe { cuda_call!(rt, cudaEventCreateWithFlags(&mut raw, flags.0)) }?;
        let raw = NonNull::new(raw).ok_or_else(|| {
            Error::invalid("event", "cudaEventCreateWithFlags returned null", "null")
        })?;
        Ok(Event {
            raw,
            timing: flags.0 & cudart::cudaEventDisableTiming == 0,
            captured: AtomicBool::new(false),
        })
    }

    /// Take ownership of an event (destroyed on drop).
    ///
    /// # Safety
    /// `raw` must be a valid event from `cudaEventCreate*` that nobody else
    /// destroys. `timing` must say whether it was created with timing enabled.
    pub unsafe fn from_raw(raw: cudaEvent_t, timing: bool) -> Result<Self> {
        let raw = NonNull::new(raw)
            .ok_or_else(|| Error::invalid("raw", "must be a non-null cudaEvent_t", "null"))?;
        Ok(Event {
            raw,
            timing,
            captured: AtomicBool::new(false),
        })
    }

    /// The raw handle, valid while `self` lives.
    pub fn as_raw(&self) -> cudaEvent_t {
        self.raw.as_ptr()
    }

    /// Capture the work queued on `stream` so far (stream-ordered: the event
    /// completes when that work is done). The stream's device is current
    /// during the call; the event must belong to that device.
    ///
    /// # Errors
    /// [`Error::WrongThread`] for another thread's per-thread stream;
    /// [`Error::Cuda`] when the runtime refuses (an event of another device).
    #[doc(alias = "cudaEventRecord")]
    pub fn record(&self, stream: &Stream) -> Result<()> {
        let _on = stream.enter("the stream an event is recorded on")?;
        let rt = check::cudart()?;
        // SAFETY: both handles are valid for the call (`stream` by its own contract).
        unsafe { cuda_call!(rt, cudaEventRecord(self.raw.as_ptr(), stream.as_raw())) }?;
        let captured = super::capture::in_capture_scope() || stream.capturer().is_some();
        self.captured.store(captured, Ordering::Release);
        Ok(())
    }

    /// Block until the event's captured work is done (immediately if it was
    /// never recorded).
    ///
    /// # Errors
    /// [`Error::Cuda`], also for failures of the captured work;
    /// [`Error::CaptureUnsafe`] inside a
    /// [`Stream::capture`](super::Stream::capture) closure.
    #[doc(alias = "cudaEventSynchronize")]
    pub fn synchronize(&self) -> Result<()> {
        super::capture::forbid_in_capture_scope("Event::synchronize", super::Hazard::HostSync)?;
        let rt = check::cudart()?;
        // SAFETY: `raw` is a valid event we own.
        unsafe { cuda_call!(rt, cudaEventSynchronize(self.raw.as_ptr())) }
    }

    /// Whether the captured work is done (does not block).
    ///
    /// # Errors
    /// [`Error::Cuda`] for failures other than "not ready".
    #[doc(alias = "cudaEventQuery")]
    pub fn query(&self) -> Result<bool> {
        let rt = check::cudart()?;
        // SAFETY: `raw` is a valid event we own.
        let st = unsafe { rt.cudaEventQuery(self.raw.as_ptr()) }?;
        if st == cudaError::cudaErrorNotReady {
            return Ok(false);
        }
        check::cuda_status(rt, "cudaEventQuery", st)?;
        Ok(true)
    }

    /// Milliseconds between two recorded, completed events (about 0.5 µs
    /// resolution). Both must have timing enabled.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when either event has timing disabled;
    /// [`Error::Cuda`] when one was not recorded or has not completed.
    #[doc(alias = "cudaEventElapsedTime")]
    pub fn elapsed_ms(start: &Event, end: &Event) -> Result<f32> {
        for (arg, ev) in [("start", start), ("end", end)] {
            if !ev.timing {
                return Err(Error::invalid(
                    arg,
                    "must be created with timing enabled",
                    "EventFlags::DISABLE_TIMING",
                ));
            }
        }
        let rt = check::cudart()?;
        let mut ms = 0f32;
        // SAFETY: `ms` is a valid out-pointer; both events are valid and owned.
        unsafe {
            cuda_call!(
                rt,
                cudaEventElapsedTime(&mut ms, start.raw.as_ptr(), end.raw.as_ptr())
            )
        }?;
        Ok(ms)
    }

    /// Destroy the event now, reporting the runtime's status.
    ///
    /// # Errors
    /// [`Error::Cuda`] from `cudaEventDestroy`.
    #[doc(alias = "cudaEventDestroy")]
    pub fn destroy(self) -> Result<()> {
        let raw = self.raw.as_ptr();
        std::mem::forget(self);
        let rt = check::cudart()?;
        // SAFETY: we owned `raw`; `self` is forgotten so Drop will not destroy it again.
        unsafe { cuda_call!(rt, cudaEventDestroy(raw)) }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if let Ok(rt) = check::cudart() {
            // SAFETY: we own the event; an event still pending is released by
            // the runtime once it completes. The status is ignored: Drop must not fail.
            let _ = unsafe { rt.cudaEventDestroy(self.raw.as_ptr()) };
        }
    }
}

/// A stream owned by `foreign` must not wait for a `captured` event.
///
/// # Errors
/// [`Error::CaptureUnsafe`] naming `op`.
fn foreign_wait_rule(op: &str, foreign: Option<&'static str>, captured: bool) -> Result<()> {
    match foreign {
        Some(owner) if captured => super::capture_rule(
            op,
            super::CaptureStatus::Active,
            &super::Hazard::ForeignStream(owner),
        ),
        _ => Ok(()),
    }
}

/// Ordering between streams, with events.
impl Stream {
    /// Make later work on this stream wait until `event` completes
    /// (stream-ordered; the host does not block).
    ///
    /// A stream another library owns (a cudarc stream) does not wait for an
    /// event recorded inside a capture of this crate: the wait would join
    /// it to the capture, and its owner's own allocations and frees on it
    /// would become graph nodes.
    ///
    /// # Errors
    /// [`Error::Cuda`](crate::Error::Cuda) when the runtime refuses;
    /// [`Error::CaptureUnsafe`](crate::Error::CaptureUnsafe) for a foreign
    /// stream and a captured event.
    #[doc(alias = "cudaStreamWaitEvent")]
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        foreign_wait_rule(
            "Stream::wait_event",
            self.foreign_owner(),
            event.captured.load(Ordering::Acquire),
        )?;
        let _on = self.enter("the waiting stream")?;
        let rt = check::cudart()?;
        // SAFETY: both handles are valid for the call; flags 0 is the documented default.
        unsafe { cuda_call!(rt, cudaStreamWaitEvent(self.as_raw(), event.as_raw(), 0)) }
    }

    /// Make later work on this stream wait for everything queued on `other`
    /// so far: records a timing-free event on `other`, created with
    /// `other`'s device current (an event must be recorded on a stream of
    /// its own device), and waits on it with this stream's device current.
    /// Nothing is done when both name the same queue (see `PartialEq`:
    /// pseudo-streams of different devices or threads are different queues).
    ///
    /// # Errors
    /// [`Error::WrongThread`] when either is another thread's per-thread
    /// stream; [`Error::Cuda`](crate::Error::Cuda) when the runtime refuses.
    pub fn wait_for(&self, other: &Stream) -> Result<()> {
        if self == other {
            return self.enter("the waiting stream").map(|_| ());
        }
        let ev = {
            let _on = other.enter("the stream waited for")?;
            let ev = Event::with_flags(super::EventFlags::DISABLE_TIMING)?;
            ev.record(other)?;
            ev
        };
        self.wait_event(&ev)
    }

    /// [`wait_for`](Self::wait_for) for a crate-owned resource `what` (a
    /// handle's workspace, an RNN reserve) whose last use was on `last`
    /// and whose next is on this stream: refused ([`Error::CaptureUnsafe`],
    /// `Hazard::CapturedEvent`, before anything is queued) when the two
    /// differ and either is being captured. A capturing stream waiting for
    /// an event recorded outside its capture is invalid (the runtime
    /// invalidates the capture, untyped), and an eager stream waiting for
    /// an event recorded inside one silently joins that capture.
    ///
    /// # Errors
    /// As [`wait_for`](Self::wait_for); [`Error::CaptureUnsafe`] naming
    /// `op`; a capture query's error.
    pub(crate) fn order_resource_after(
        &self,
        last: &Stream,
        op: &str,
        what: &'static str,
    ) -> Result<()> {
        if self == last {
            return Ok(());
        }
        let hazard = super::Hazard::CapturedEvent(what);
        for s in [self, last] {
            let status = super::implicit_is_capturing(s.capture_status())?;
            super::capture_rule(op, status, &hazard)?;
        }
        self.wait_for(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a foreign stream waiting for a captured event is refused (typed).
    #[test]
    fn unit_foreign_stream_never_waits_for_a_captured_event() {
        for (foreign, captured) in [
            (None, false),
            (None, true),
            (Some("cudarc"), false),
            (Some("cudarc"), true),
            (Some(super::super::PER_THREAD_SHARED), false),
            (Some(super::super::PER_THREAD_SHARED), true),
        ] {
            let r = foreign_wait_rule("Stream::wait_event", foreign, captured);
            assert_eq!(r.is_err(), foreign.is_some() && captured);
            if let Err(e) = r {
                assert!(matches!(e, Error::CaptureUnsafe { .. }), "{e:?}");
            }
        }
    }
}
