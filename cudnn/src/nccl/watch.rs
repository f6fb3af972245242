//! Watching a communicator's queued work: its asynchronous error, and
//! [`Communicator::wait`], the deadline-bounded wait that aborts on an error
//! or at the deadline (PyTorch's watchdog).

use std::time::Duration;

use super::comm::{Communicator, nccl_error};
use super::depth;
use super::progress::{self, Backoff, Deadline};
use super::sys;
use crate::error::{Error, Result};
use crate::runtime::Stream;

/// How long [`Communicator::wait`] lets the stream drain after it aborted
/// the communicator (NCCL's kernels quit when told to).
const DRAIN: Duration = Duration::from_secs(10);

impl Communicator {
    /// An error NCCL met while running work queued earlier (a peer died, a
    /// network failed), or `None` (`ncclCommGetAsyncError`). After an
    /// error, the communicator can only be [aborted](Self::abort).
    /// `ncclInProgress` (a non-blocking communicator still working) is not
    /// an error: `None`.
    ///
    /// # Errors
    /// [`Error::Nccl`] when the query itself fails; [`Error::InvalidArgument`]
    /// once the communicator was aborted.
    #[doc(alias = "ncclCommGetAsyncError")]
    pub fn async_error(&self) -> Result<Option<Error>> {
        let _use = self.enter_family()?;
        let raw = self.live()?;
        // SAFETY: the communicator is live.
        let st = unsafe { progress::state(raw) }.map_err(|e| self.annotate(e))?;
        if st == sys::ncclResult_t::ncclSuccess || st == sys::ncclResult_t::ncclInProgress {
            return Ok(None);
        }
        Ok(Some(
            self.annotate(nccl_error("ncclCommGetAsyncError", st))
                .with_context("asynchronous error of queued work"),
        ))
    }

    /// Wait until the work queued on `stream` has finished, watching this
    /// communicator: it polls `cudaStreamQuery` and `ncclCommGetAsyncError`
    /// (as PyTorch's watchdog does), and when NCCL reports an error or
    /// `timeout` passes first, it aborts the communicator (`ncclCommAbort`:
    /// NCCL's kernels quit, so the stream drains; this waits up to 10 s
    /// more for that; before NCCL 2.27 the abort of a non-blocking
    /// communicator whose last call was not seen finished is not bounded:
    /// see [`Communicator`]) and returns the error. A dead peer thus yields an
    /// error instead of a hang. Call it after the collectives (outside a
    /// [`group`](super::group)) where a stream synchronize would go.
    ///
    /// After an abort, NCCL's kernels quit, but other work queued on the
    /// stream is not cancelled: `ncclCommAbort` itself can wait behind work
    /// the caller queued on that stream before the NCCL kernel, and when
    /// the stream did not drain (the error says so), later frees of device
    /// memory (dropping a [`DeviceBuffer`](crate::runtime::DeviceBuffer),
    /// which synchronizes) can block until the stuck work ends.
    ///
    /// # Errors
    /// [`Error::Timeout`] at the deadline; [`Error::Nccl`] for NCCL's
    /// asynchronous error; [`Error::Cuda`] when the stream reports a fault
    /// (the communicator is aborted in all three cases);
    /// [`Error::InGroup`] inside a group; [`Error::InvalidArgument`] when
    /// the communicator was aborted already;
    /// [`Error::CaptureUnsafe`](crate::Error::CaptureUnsafe) while `stream`
    /// is capturing a CUDA graph or inside a
    /// [`Stream::capture`](crate::runtime::Stream::capture) closure (wait
    /// after launching the graph; nothing is aborted).
    #[doc(alias = "ncclCommGetAsyncError")]
    #[doc(alias = "cudaStreamQuery")]
    pub fn wait(&self, stream: &Stream, timeout: Duration) -> Result<()> {
        depth::refuse(
            "Communicator::wait",
            "the group's calls are launched only when its closure returns; wait after it",
        )?;
        // Polling a capturing stream (`cudaStreamQuery`) would invalidate the
        // capture, and this loop would take that error for a fault and abort
        // the communicator: refused first, inside a capture closure too.
        crate::runtime::forbid_allocation_during_capture(
            "Communicator::wait",
            stream,
            crate::runtime::Hazard::HostSync,
        )?;
        let _use = self.enter_family()?;
        let raw = self.live()?;
        // Checked only: nothing is queued on the stream here.
        drop(self.check_stream(stream)?);
        let deadline = Deadline::after(timeout);
        let mut backoff = Backoff::new();
        loop {
            // SAFETY: `raw` is live (nothing aborts it but this loop).
            let st = match unsafe { progress::state(raw) } {
                Ok(st) => st,
                Err(e) => {
                    let e = self.annotate(e);
                    let note = self.abort_and_drain(stream);
                    return Err(e.with_context(format!(
                        "polling the communicator failed; the communicator was aborted{note}"
                    )));
                }
            };
            if st != sys::ncclResult_t::ncclSuccess && st != sys::ncclResult_t::ncclInProgress {
                let e = self.annotate(nccl_error("ncclCommGetAsyncError", st));
                let note = self.abort_and_drain(stream);
                return Err(e.with_context(format!(
                    "asynchronous error while waiting for the stream; the communicator was aborted{note}"
                )));
            }
            match stream.query() {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => {
                    let note = self.abort_and_drain(stream);
                    return Err(e.with_context(format!(
                        "while waiting for NCCL's work; the communicator was aborted{note}"
                    )));
                }
            }
            if deadline.passed() {
                let waited = deadline.waited();
                let note = self.abort_and_drain(stream);
                return Err(Error::Timeout {
                    what: format!(
                        "the work queued on the stream (communicator of {} ranks); \
                         the communicator was aborted{note}",
                        self.size()
                    ),
                    waited,
                    rank: u32::try_from(self.rank()).ok(),
                });
            }
            backoff.sleep(&deadline);
        }
    }

    /// Abort, then give the stream up to [`DRAIN`] to finish; a note for the
    /// error when it did not.
    fn abort_and_drain(&self, stream: &Stream) -> String {
        if !self.abort_now() {
            return format!(
                "; ncclCommAbort had not returned after {:?} (it waits behind work on a \
                 stream; it goes on in the background), and the stream's buffers may still \
                 be in use",
                super::comm::ABORT_LIMIT
            );
        }
        let deadline = Deadline::after(DRAIN);
        let mut backoff = Backoff::new();
        loop {
            match stream.query() {
                Ok(true) => return String::new(),
                Ok(false) if !deadline.passed() => backoff.sleep(&deadline),
                Ok(false) => {
                    return format!(
                        "; the stream had not drained {DRAIN:?} after the abort \
                         (its buffers may still be in use)"
                    );
                }
                Err(e) => return format!("; the stream reports: {e}"),
            }
        }
    }
}
