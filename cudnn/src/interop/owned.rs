//! Owned captures of a cudarc stream: [`CudarcStream::begin_owned_capture`],
//! [`OwnedCapture`], [`OwnedGraph`].
//!
//! A framework on cudarc (candle) replays a whole step by capturing its own
//! stream, so its kernels and this crate's calls end up in one graph. This
//! crate refuses its work on a cudarc stream while cudarc captures it
//! (`Hazard::ForeignStream`): cudarc's `CudaGraph::launch` is safe and
//! could replay the work after its memory (a workspace, a plan) is gone.
//! An owned capture is begun *and ended* by this crate, so its graph is
//! never a cudarc `CudaGraph`: it is an [`OwnedGraph`], launched through
//! this crate (`unsafe`: the graph also holds other code's work), which
//! keeps what the caller gave it ([`OwnedCapture::keep`]) until its last
//! launch completed.
//!
//! While the capture is open, this crate's calls on that stream from the
//! thread that began it are allowed (a registry of owned captures, keyed by
//! the stream's identity, which the queueing check reads); from another
//! thread they are refused (`Hazard::OtherThreadsCapture`), and a capture
//! cudarc began itself is refused as before. Inside it, this crate's
//! allocations, handle creations and host synchronizations are refused
//! (`Error::CaptureUnsafe`), as inside a `Stream::capture` closure.

use std::any::Any;
use std::marker::PhantomData;
use std::ptr;
use std::time::Instant;

use ::cudarc::driver::{CudaContext, CudaStream as CudarcRaw, result};

use super::driver::guarded;
use super::driver_error;
use super::scope::ContextWait;
use super::stream::CudarcStream;
use crate::check::{self, cuda_call};
use crate::error::{Error, Result};
use crate::runtime::owned_capture::Registration;
use crate::runtime::wait::{self, DeviceWait, Ended, SCOPE_WAIT_DEADLINE, end_scope};
use crate::runtime::{CaptureMode, CudaGraph, CudaGraphExec, Hazard, ScopeMark};
use crate::sys::cudart;

/// `cudaGraphInstantiateFlagAutoFreeOnLaunch`: memory the graph allocated
/// and did not free (a tensor made inside the capture and kept) is freed
/// when the graph is launched again, so the graph can be relaunched; the
/// allocation keeps its address from launch to launch.
const AUTO_FREE_ON_LAUNCH: u64 = 1;

/// An open owned capture of a cudarc stream: see
/// [`CudarcStream::begin_owned_capture`]. Not `Send`: it ends on the thread
/// that began it (the capture mode and the capture-scope mark are per
/// thread). Dropped without [`end`](Self::end), it ends the capture and
/// destroys the graph (never instantiated, so nothing of it ran) before it
/// drops what it keeps.
pub struct OwnedCapture {
    stream: CudarcStream,
    kept: Vec<Box<dyn Any + Send>>,
    open: bool,
    // Dropped after `Drop::drop` ended the capture, in this order.
    _mark: ScopeMark,
    _reg: Registration,
    _own: crate::runtime::wait::OwnCapture,
    _not_send: PhantomData<*const ()>,
}

impl std::fmt::Debug for OwnedCapture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedCapture")
            .field("stream", &self.stream)
            .field("kept", &self.kept.len())
            .finish_non_exhaustive()
    }
}

impl CudarcStream {
    /// Begin a capture of this cudarc stream that this crate owns
    /// (`cudaStreamBeginCapture` in `mode`; use [`CaptureMode::ThreadLocal`]
    /// so that other threads' cudarc and candle work, which may allocate and
    /// synchronize, neither fails nor invalidates it). While it is open,
    /// this crate's calls on the stream from this thread are recorded
    /// (they are refused during any other capture of a cudarc stream);
    /// [`OwnedCapture::end`] turns it into an [`OwnedGraph`].
    ///
    /// ```no_run
    /// # #[cfg(not(feature = "dnn"))]
    /// # fn main() { eprintln!("SKIPPED: this example needs feature `dnn`"); }
    /// # #[cfg(feature = "dnn")]
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use cudnn::dnn::{ActivationDescriptor, ActivationMode, DeviceTensor, DeviceTensorMut,
    ///     Handle, NanPropagation, TensorDescriptor};
    /// use cudnn::interop::{self, CudarcStream};
    /// use cudnn::runtime::{CaptureMode, DeviceBuffer};
    ///
    /// let cs = interop::context(0)?.per_thread_stream(); // candle's stream
    /// let s = CudarcStream::new(&cs)?;
    /// let mut h = Handle::new(&s)?; // before the capture
    /// let d = TensorDescriptor::<f32>::nchw(1, 1, 32, 32)?;
    /// let relu = ActivationDescriptor::new(ActivationMode::Relu, NanPropagation::Propagate)?;
    /// let (x, mut y) = (DeviceBuffer::<f32>::zeroed(1024)?, DeviceBuffer::<f32>::zeroed(1024)?);
    /// // SAFETY: only `end` ends the capture; no other thread uses the
    /// // stream; nothing is allocated on it inside.
    /// let mut cap = unsafe { s.begin_owned_capture(CaptureMode::ThreadLocal)? };
    /// // ... the framework's own work on `cs` here ...
    /// h.activation_forward(&relu, 1.0, DeviceTensor::new(&d, &x)?, 0.0,
    ///     DeviceTensorMut::new(&d, &mut y)?)?;
    /// cap.keep(h); // the graph addresses its workspace
    /// let mut g = cap.end()?;
    /// for _ in 0..10 {
    ///     // SAFETY: x and y (not kept) are alive and used on `cs` only.
    ///     unsafe { g.launch()? };
    /// }
    /// drop(g); // waits for the last launch, then drops the handle
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming `stream` for the legacy default
    /// stream, a stream whose cudarc context orders slices with events
    /// (`CudaContext::is_managing_stream_synchronization`: tracking on and
    /// a stream made by `new_stream`; disable tracking or use
    /// `per_thread_stream`), a stream already capturing (cudarc's capture
    /// included) or with an owned capture open, or while a device-wide wait of this
    /// crate is in progress on its device (after 1 s); [`Error::Cuda`],
    /// [`Error::Driver`] from the calls.
    ///
    /// # Safety
    /// The capture records work instead of running it, and the graph it
    /// becomes holds the addresses of everything recorded. This crate
    /// cannot see other code's calls on the stream, so the caller
    /// guarantees, until [`OwnedCapture::end`] returned (or the capture was
    /// dropped):
    /// - no code but the returned value ends the capture (cudarc's
    ///   `end_capture`, another library's): the graph must not become a
    ///   graph someone else launches, since it holds this crate's work;
    /// - no other thread queues work on the stream (it would join the
    ///   graph; this crate refuses its own such calls, not cudarc's);
    /// - memory allocated on the stream during the capture (cudarc's
    ///   stream-ordered `alloc`, so every candle tensor made inside it) is
    ///   memory *of the graph*: it is not read, written or freed before the
    ///   first [`OwnedGraph::launch`] completed (freeing it inside the
    ///   capture is recorded as a free of the graph and is fine), and
    ///   memory allocated before the capture is not freed inside it (the
    ///   free would be recorded and replayed by every launch);
    /// - cudarc does not order memory with events during the capture: its
    ///   context's event tracking stays off or the context has no stream
    ///   made by `new_stream` (cudarc orders slices with events, recorded
    ///   and waited on the stream whenever a slice is used, as soon as one
    ///   `new_stream` exists and tracking is on, even if it is the only
    ///   stream; captured, those events order nothing and cudarc's next
    ///   wait on them fails). This is checked when the capture begins
    ///   (refused, typed); the caller keeps it until the end (no
    ///   `new_stream`, no `enable_event_tracking` meanwhile).
    #[doc(alias = "cudaStreamBeginCapture")]
    pub unsafe fn begin_owned_capture(&self, mode: CaptureMode) -> Result<OwnedCapture> {
        self.bind_to_thread()?;
        let s = self.stream();
        let what = format!("{s:?}");
        if s.is_pseudo() && s.thread().is_none() {
            return Err(Error::invalid(
                "stream",
                "the legacy default stream cannot be captured; capture a created stream or \
                 the per-thread default stream",
                what,
            ));
        }
        if self.cudarc().context().is_managing_stream_synchronization() {
            return Err(Error::invalid(
                "stream",
                "its cudarc context orders slices with events (event tracking on and a stream \
                 made by new_stream): captured, those events would order nothing; disable \
                 tracking (CudaContext::disable_event_tracking) or use per_thread_stream",
                what,
            ));
        }
        if s.capture_status()?.is_capturing() {
            return Err(Error::invalid(
                "stream",
                "is already capturing (cudarc's capture, or another one); end it first",
                what,
            ));
        }
        let reg = Registration::new(s.owned_key(), &what)?;
        let own = crate::runtime::wait::OwnCapture::open(
            s.device().map(|d| d.ordinal()),
            Instant::now() + crate::runtime::wait::CAPTURE_OPEN_WAIT,
            &what,
        )?;
        let rt = check::cudart()?;
        let _on = s.enter_unchecked()?;
        // SAFETY: a valid stream (cudarc's, kept alive by `self`), not the
        // legacy stream, not capturing (asked above on this thread).
        unsafe { cuda_call!(rt, cudaStreamBeginCapture(s.as_raw(), mode.raw())) }?;
        let cap = OwnedCapture {
            stream: self.clone(),
            kept: Vec::new(),
            open: true,
            _mark: ScopeMark::enter(),
            _reg: reg,
            _own: own,
            _not_send: PhantomData,
        };
        // The capture's id, so that only this capture counts as owned (on
        // an error, `cap` drops and ends the capture).
        cap._reg.set_id(s.capture_id()?);
        Ok(cap)
    }
}

/// Whether the stream's capture is still the owned capture `key`
/// registered: capturing, with the registered id where there is one; an
/// error when that could not be asked.
fn still_ours(s: &crate::runtime::Stream) -> Result<bool> {
    if !s.capture_status()?.is_capturing() {
        return Ok(false);
    }
    Ok(
        match crate::runtime::owned_capture::registered_id(s.owned_key()) {
            None => true,
            Some(id) => s.capture_id()? == Some(id),
        },
    )
}

impl OwnedCapture {
    /// The captured stream.
    pub fn stream(&self) -> &CudarcStream {
        &self.stream
    }

    /// Keep `value` (a handle whose workspace the graph addresses, a plan,
    /// a buffer, a cudarc slice) until the graph's last launch completed:
    /// it moves into the [`OwnedGraph`] and is dropped after the graph.
    pub fn keep<T: Any + Send>(&mut self, value: T) {
        self.kept.push(Box::new(value));
    }

    /// How many values are kept.
    pub fn kept(&self) -> usize {
        self.kept.len()
    }

    /// End the capture (`cudaStreamEndCapture`) and instantiate the graph
    /// (`cudaGraphInstantiateWithFlags`, `AutoFreeOnLaunch`: memory the
    /// graph allocated and did not free is freed when it is launched again,
    /// so it can be relaunched).
    ///
    /// # Errors
    /// The stream no longer capturing, or capturing another capture (where
    /// the runtime gives capture ids): other code ended this one
    /// ([`Error::Unsupported`]; what was kept is leaked, since that code's
    /// graph may hold this crate's work); the runtime's refusal of
    /// an invalidated capture; instantiating; creating the event.
    #[doc(alias = "cudaStreamEndCapture")]
    pub fn end(mut self) -> Result<OwnedGraph> {
        let s = self.stream.stream().clone();
        let rt = check::cudart()?;
        let _on = s.enter_unchecked()?;
        // Not askable: `Drop` (the capture still open) asks again, and
        // ends it unchecked as a last resort.
        if !still_ours(&s)? {
            // Not ended here (another capture, if any, is not ours).
            self.open = false;
            std::mem::forget(std::mem::take(&mut self.kept));
            return Err(ended_elsewhere());
        }
        self.open = false;
        let mut g: cudart::cudaGraph_t = ptr::null_mut();
        // SAFETY: the stream is capturing, the capture is ours (the
        // caller's contract: nothing else ends it), `g` a valid out-pointer.
        let r = unsafe { cuda_call!(rt, cudaStreamEndCapture(s.as_raw(), &mut g)) };
        if r.is_err() {
            crate::runtime::clear_last_error(rt);
        }
        let graph = if g.is_null() {
            None
        } else {
            // SAFETY: the runtime returned a graph we now own; nothing else
            // destroys it.
            Some(unsafe { CudaGraph::from_raw(g, s.device()) }?)
        };
        // On an error, the graph (never instantiated) and then what was
        // kept are dropped: nothing of the graph ran.
        r.map_err(|e| e.with_context("ending an owned capture"))?;
        let graph = graph
            .ok_or_else(|| Error::invalid("graph", "cudaStreamEndCapture returned null", "null"))?;
        let exec = graph.instantiate_with_flags(AUTO_FREE_ON_LAUNCH)?;
        drop(graph);
        let done = self
            .stream
            .cudarc()
            .context()
            .new_event(None)
            .map_err(|e| driver_error("cuEventCreate", e))?;
        Ok(OwnedGraph {
            exec: Some(exec),
            stream: self.stream.clone(),
            done,
            launches: Launches::None,
            launched: 0,
            kept: std::mem::take(&mut self.kept),
        })
    }
}

fn ended_elsewhere() -> Error {
    Error::Unsupported {
        what: "an owned capture ended by other code (cudarc's end_capture?): its graph may \
               hold this crate's work, so what the capture kept is leaked"
            .to_string(),
        needs: Some("only OwnedCapture::end ends an owned capture".to_string()),
    }
}

impl Drop for OwnedCapture {
    fn drop(&mut self) {
        if !self.open {
            return;
        }
        let s = self.stream.stream();
        // Whether the capture is still ours; `None`: not askable.
        let asked = check::cudart().ok().and_then(|rt| {
            let _on = s.enter_unchecked().ok()?;
            Some((rt, still_ours(s).ok()?))
        });
        match drop_end(asked.map(|a| a.1)) {
            DropEnd::End => {
                if let Some((rt, _)) = asked {
                    let _on = s.enter_unchecked();
                    let mut g: cudart::cudaGraph_t = ptr::null_mut();
                    // SAFETY: the stream is capturing and the capture is ours
                    // (asked just above; the caller's contract: nothing else
                    // ends it); the graph, if any, is ours and destroyed
                    // below, never instantiated. Status ignored: Drop must
                    // not fail.
                    let _ = unsafe { rt.cudaStreamEndCapture(s.as_raw(), &mut g) };
                    crate::runtime::clear_last_error(rt);
                    if !g.is_null() {
                        // SAFETY: as above.
                        drop(unsafe { CudaGraph::from_raw(g, s.device()) });
                    }
                }
            }
            DropEnd::Leave => std::mem::forget(std::mem::take(&mut self.kept)),
            DropEnd::EndUnchecked => {
                // The last resort: left open, candle's stream would record
                // every later op and never run it.
                end_unchecked(self.stream.cudarc());
                std::mem::forget(std::mem::take(&mut self.kept));
            }
        }
    }
}

/// What dropping an open [`OwnedCapture`] does (free of the device,
/// unit-tested).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DropEnd {
    /// Still ours: end it, destroy the graph (never instantiated, nothing
    /// of it ran), then drop what was kept.
    End,
    /// Ended by other code (or capturing another capture): not ended
    /// here; what was kept is leaked (that code's graph may hold this
    /// crate's work).
    Leave,
    /// Not askable (no runtime, the device not selectable): ended through
    /// the driver with no check of whose capture it is (a stream left
    /// capturing records every later call and never runs it); what was
    /// kept is leaked (whose graph held it is unknown).
    EndUnchecked,
}

/// `still_ours`: whether the capture is still ours, `None` when that
/// could not be asked.
fn drop_end(still_ours: Option<bool>) -> DropEnd {
    match still_ours {
        Some(true) => DropEnd::End,
        Some(false) => DropEnd::Leave,
        None => DropEnd::EndUnchecked,
    }
}

/// End the capture of `cs`, if it is capturing, through cudarc's driver
/// calls (no runtime, no check of the capture's id), and destroy its graph.
/// Every failure is ignored: this is `Drop`'s last resort.
fn end_unchecked(cs: &CudarcRaw) {
    if !capturing_here(cs) {
        return;
    }
    // SAFETY: as above; the stream is capturing (asked just above).
    let g = guarded("cuStreamEndCapture", || unsafe {
        result::stream::end_capture(cs.cu_stream())
    });
    if let Ok(g) = g
        && !g.is_null()
    {
        // SAFETY: the graph the end returned, owned here, never
        // instantiated, destroyed once.
        let _ = guarded("cuGraphDestroy", || unsafe { result::graph::destroy(g) });
    }
}

/// Where an owned graph's launches stand (free of the device,
/// unit-tested).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Launches {
    /// Never launched.
    None,
    /// The event was recorded after the last launch (all launches are on
    /// one stream, so it covers every launch).
    Recorded,
    /// A launch may have been queued without the event after it: only the
    /// context's end covers it.
    Unrecorded,
}

/// What the teardown waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    Nothing,
    Event,
    Context,
}

impl Launches {
    fn wait(self) -> Wait {
        match self {
            Launches::None => Wait::Nothing,
            Launches::Recorded => Wait::Event,
            Launches::Unrecorded => Wait::Context,
        }
    }
}

/// The teardown's order, free of the device (unit-tested): wait (bounded:
/// an event recorded after the last launch, or the context's work queued
/// so far), then drop the executable graph, then drop what was kept; if
/// the wait failed, what was kept is leaked instead (never freed under a
/// launch that may still run). While the stream is `capturing`, nothing
/// waits and what was kept is leaked (its frees would be captured).
fn teardown<E, K>(
    launches: Launches,
    capturing: bool,
    wait: impl FnOnce(Wait) -> bool,
    exec: Option<E>,
    kept: Vec<K>,
) {
    let ok = !capturing
        && match launches.wait() {
            Wait::Nothing => true,
            w => wait(w),
        };
    drop(exec);
    if ok {
        drop(kept);
    } else {
        std::mem::forget(kept);
    }
}

/// The graph of an [`OwnedCapture`]: it replays on the captured stream
/// ([`launch`](Self::launch), `unsafe`) and keeps what the capture was
/// given until its last launch completed. Its drop waits, on the host, for
/// the event recorded after the last launch (bounded: work already
/// queued, never later work; the whole context when a record failed),
/// then destroys the graph, then drops what it keeps; if the wait fails,
/// what it keeps is leaked.
pub struct OwnedGraph {
    /// `None` only inside `Drop`.
    exec: Option<CudaGraphExec>,
    stream: CudarcStream,
    done: cudarc::driver::CudaEvent,
    launches: Launches,
    launched: u64,
    kept: Vec<Box<dyn Any + Send>>,
}

impl std::fmt::Debug for OwnedGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedGraph")
            .field("stream", &self.stream)
            .field("launched", &self.launched)
            .field("kept", &self.kept.len())
            .finish_non_exhaustive()
    }
}

impl OwnedGraph {
    /// The stream the graph was captured on, where it launches.
    pub fn stream(&self) -> &CudarcStream {
        &self.stream
    }

    /// How many launches were queued.
    pub fn launched(&self) -> u64 {
        self.launched
    }

    /// Keep one more value until the last launch completed.
    pub fn keep<T: Any + Send>(&mut self, value: T) {
        self.kept.push(Box::new(value));
    }

    /// Replay the graph on the captured stream (`cudaGraphLaunch`), after
    /// the work queued there before, before the work queued after; an
    /// event is recorded after it for the teardown.
    ///
    /// # Errors
    /// The stream capturing (any capture, an owned one included: the
    /// graph would become part of a graph that does not keep what this
    /// one keeps; [`Error::CaptureUnsafe`]), another thread's per-thread
    /// stream ([`Error::WrongThread`]), the launch, recording the event.
    ///
    /// # Safety
    /// What this value keeps (given to [`OwnedCapture::keep`] or
    /// [`keep`](Self::keep)) stays alive until the launch completed. For
    /// everything else the graph addresses, the caller guarantees what
    /// `CudaGraphExec::launch` requires: all the memory the captured work
    /// of other code (cudarc's kernels, copies and allocations, candle's
    /// tensors) and this crate's calls whose resources were not kept
    /// reads or writes is still allocated, not reallocated, large enough,
    /// and not used concurrently by work unordered with the launch (use it
    /// on the same stream, or order it with events); host memory the
    /// graph reads is alive; memory the graph allocated (made inside the
    /// capture) is read only after a launch completed and not freed by
    /// other code while a launch may run.
    #[doc(alias = "cudaGraphLaunch")]
    pub unsafe fn launch(&mut self) -> Result<()> {
        self.stream.bind_to_thread()?;
        let s = self.stream.stream();
        let status = s.capture_status()?;
        crate::runtime::capture_rule(
            "OwnedGraph::launch",
            status,
            &Hazard::ForeignStream("cudarc"),
        )?;
        let Some(exec) = &self.exec else {
            return Err(Error::invalid("graph", "is torn down", "OwnedGraph"));
        };
        // From here until the event is recorded, only the context's end
        // covers the launch.
        self.launches = Launches::Unrecorded;
        // SAFETY: `CudaGraphExec::launch`'s contract: this value keeps what
        // it was given alive (dropped only after `Drop`'s wait); the rest
        // is this function's own contract, which the caller keeps.
        let launched = unsafe { exec.launch(s) };
        if launched.is_ok() {
            self.launched = self.launched.saturating_add(1);
        }
        // Recorded whatever the launch returned: the event then covers every
        // launch queued so far (this one too, if it queued anything), so the
        // teardown waits for it and needs no context-wide wait (which, in
        // the global capture mode, could invalidate another thread's
        // capture).
        let recorded = record(&self.done, self.stream.cudarc());
        self.launches = after_record(recorded.is_ok());
        launched?;
        recorded
    }
}

/// Where the launches stand after the event's record was tried.
fn after_record(recorded: bool) -> Launches {
    if recorded {
        Launches::Recorded
    } else {
        Launches::Unrecorded
    }
}

/// `cuEventRecord` of `done` on `cs`, binding the context without cudarc's
/// stored-error check (an error stored by other work would otherwise skip
/// the record).
fn record(done: &::cudarc::driver::CudaEvent, cs: &CudarcRaw) -> Result<()> {
    bind(cs.context());
    // SAFETY: `done` and `cs` are alive (borrowed), of the same context.
    guarded("cuEventRecord", || unsafe {
        result::event::record(done.cu_event(), cs.cu_stream())
    })
}

/// Make `ctx` current on this thread, without cudarc's stored-error check;
/// a failure shows in the call that follows.
fn bind(ctx: &CudaContext) {
    let cu = ctx.cu_ctx();
    let _ = guarded("cuCtxSetCurrent", || {
        if result::ctx::get_current()? != Some(cu) {
            // SAFETY: the primary context cudarc retains while `ctx` lives.
            unsafe { result::ctx::set_current(cu) }?;
        }
        Ok(())
    });
}

/// Whether `cs`, as this thread reaches it, is capturing (any status) or
/// cannot be asked. For cudarc's per-thread stream handle that is this
/// thread's per-thread stream, the stream a free queued here would go to
/// (a `CudaSlice`'s `cuMemFreeAsync` on that handle), so no thread check:
/// the question is asked through cudarc's driver calls, from any thread.
fn capturing_here(cs: &CudarcRaw) -> bool {
    bind(cs.context());
    // SAFETY: `cs` is a valid stream of its context, alive while borrowed.
    let status = guarded("cuStreamIsCapturing", || unsafe {
        result::stream::is_capturing(cs.cu_stream())
    });
    !matches!(
        status,
        Ok(::cudarc::driver::sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
    )
}

/// The event's wait, in the relaxed capture mode (a wait on the host must
/// neither be refused by nor invalidate another thread's global-mode
/// capture).
fn wait_event(done: &::cudarc::driver::CudaEvent, ctx: &CudaContext) -> bool {
    let _relaxed = wait::RelaxedCaptureMode::enter();
    bind(ctx);
    // SAFETY: `done` is alive (borrowed) and was recorded on a stream of
    // `ctx`.
    guarded("cuEventSynchronize", || unsafe {
        result::event::synchronize(done.cu_event())
    })
    .is_ok()
}

/// The context's wait, only when the event could not be recorded: the
/// cudarc scope's device-wide wait (counted as a wait in progress, so no
/// capture of this crate begins on the device meanwhile, after the crate's
/// open captures there ended; relaxed capture mode; retried while a
/// capture refuses it, up to [`SCOPE_WAIT_DEADLINE`]). Not on a thread
/// with a capture of this crate open (the wait would wait for it): false.
fn wait_context(ctx: &CudaContext) -> bool {
    struct NoStored<'a>(ContextWait<'a>);
    impl DeviceWait for NoStored<'_> {
        fn take_stored(&self) -> Option<Error> {
            None
        }
        fn wait(&self) -> Result<()> {
            self.0.wait()
        }
    }
    if crate::runtime::in_capture_scope() {
        return false;
    }
    let deadline = Instant::now() + SCOPE_WAIT_DEADLINE;
    let w = NoStored(ContextWait { ctx, deadline });
    let mut none: Vec<()> = Vec::new();
    matches!(
        end_scope(
            &w,
            &mut none,
            || Instant::now() >= deadline,
            std::thread::sleep
        ),
        Ended::Released(_)
    )
}

impl Drop for OwnedGraph {
    fn drop(&mut self) {
        let done = &self.done;
        let cs = self.stream.cudarc();
        // Any capture of the stream (an owned one of this thread included,
        // or another thread's on a shared stream), or no answer: what is
        // kept is leaked, since its drop would free on the stream, and the
        // free would be recorded into that capture's graph and replayed.
        let capturing = capturing_here(cs);
        teardown(
            self.launches,
            capturing,
            |w| match w {
                Wait::Event => wait_event(done, cs.context()),
                _ => wait_context(cs.context()),
            },
            self.exec.take(),
            std::mem::take(&mut self.kept),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    struct Logged(&'static str, Arc<Mutex<Vec<&'static str>>>);
    impl Drop for Logged {
        fn drop(&mut self) {
            self.1.lock().expect("log").push(self.0);
        }
    }

    /// The teardown waits first, then destroys the graph, then drops what
    /// it kept; never launched: no wait; a failed wait leaks what it kept
    /// (the truth: the order the module docs promise).
    #[test]
    fn unit_teardown_waits_then_graph_then_kept() {
        for (launches, wait_ok, want) in [
            (Launches::Recorded, true, vec!["wait Event", "exec", "kept"]),
            (
                Launches::Unrecorded,
                true,
                vec!["wait Context", "exec", "kept"],
            ),
            (Launches::None, true, vec!["exec", "kept"]),
            (Launches::Recorded, false, vec!["wait Event", "exec"]),
            (Launches::Unrecorded, false, vec!["wait Context", "exec"]),
        ] {
            let log = Arc::new(Mutex::new(Vec::new()));
            let l = log.clone();
            teardown(
                launches,
                false,
                |w| {
                    l.lock().expect("log").push(match w {
                        Wait::Event => "wait Event",
                        Wait::Context => "wait Context",
                        Wait::Nothing => "wait Nothing",
                    });
                    wait_ok
                },
                Some(Logged("exec", log.clone())),
                vec![Logged("kept", log.clone())],
            );
            assert_eq!(*log.lock().expect("log"), want, "{launches:?} {wait_ok}");
        }
    }

    /// While the stream is capturing (the graph dropped inside another
    /// capture of its stream), nothing waits and what was kept is leaked,
    /// whatever the launches: its drop would free on the stream, and the
    /// free would be recorded into the open capture (the contract of
    /// `begin_owned_capture`: memory allocated before a capture is not
    /// freed inside it). The graph object itself is destroyed (not stream
    /// work).
    #[test]
    fn unit_teardown_while_capturing_leaks_kept() {
        for launches in [Launches::None, Launches::Recorded, Launches::Unrecorded] {
            let log = Arc::new(Mutex::new(Vec::new()));
            let l = log.clone();
            teardown(
                launches,
                true,
                |_| {
                    l.lock().expect("log").push("wait");
                    true
                },
                Some(Logged("exec", log.clone())),
                vec![Logged("kept", log.clone())],
            );
            assert_eq!(*log.lock().expect("log"), vec!["exec"], "{launches:?}");
        }
    }

    /// The event is recorded after every launch attempt, failed or not; a
    /// recorded event covers all the work queued on the stream before it
    /// (CUDA's stream order), so the teardown waits for the event and for
    /// nothing context-wide; only a failed record falls back to the
    /// context's wait.
    #[test]
    fn unit_record_decides_the_wait() {
        assert_eq!(after_record(true).wait(), Wait::Event);
        assert_eq!(after_record(false).wait(), Wait::Context);
        assert_eq!(Launches::None.wait(), Wait::Nothing);
    }

    /// Dropping an open owned capture: still ours, it is ended and what
    /// was kept is dropped; ended by other code, it is left and what was
    /// kept is leaked; not askable, it is still ended (else the stream
    /// stays capturing with no owner and records every later call) and
    /// what was kept is leaked.
    #[test]
    fn unit_drop_ends_even_when_not_askable() {
        assert_eq!(drop_end(Some(true)), DropEnd::End);
        assert_eq!(drop_end(Some(false)), DropEnd::Leave);
        assert_eq!(drop_end(None), DropEnd::EndUnchecked);
    }
}
