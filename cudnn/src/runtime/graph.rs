//! CUDA graphs: capture, instantiate, replay, update (see [`CudaGraph`]).

use std::fmt;
use std::ptr::{self, NonNull};
use std::time::Instant;

use super::stream::check_capturable;
use super::{Device, Stream};
use crate::check::{self, cuda_call};
use crate::error::{Error, Result};
use crate::sys::cudart::{
    self, CUgraph_st, CUgraphExec_st, cudaGraphExecUpdateResult, cudaGraphExecUpdateResultInfo,
    cudaStreamCaptureMode,
};

/// How a capture treats calls that are unsafe to capture, on other threads
/// (`cudaStreamCaptureMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum CaptureMode {
    /// Unsafe calls (`cudaMalloc`, `cudaFree`, synchronization) from any
    /// thread invalidate the capture (the runtime's default, and ours).
    #[default]
    Global,
    /// Only unsafe calls from this thread do (another thread may allocate
    /// and free freely).
    ThreadLocal,
}

impl CaptureMode {
    pub(crate) fn raw(self) -> cudaStreamCaptureMode {
        match self {
            CaptureMode::Global => cudaStreamCaptureMode::cudaStreamCaptureModeGlobal,
            CaptureMode::ThreadLocal => cudaStreamCaptureMode::cudaStreamCaptureModeThreadLocal,
        }
    }
}

/// Ends the capture on drop (error, panic), destroying what it captured.
struct CaptureScope<'s> {
    stream: &'s Stream,
    open: bool,
    /// Counted in the registry of open captures until the scope (and so
    /// `cudaStreamEndCapture`) is done: a field drops after `Drop::drop`.
    _own: super::wait::OwnCapture,
}

impl CaptureScope<'_> {
    /// End the capture and take the graph.
    fn end(mut self) -> Result<CudaGraph> {
        // On an early return here, `Drop` still ends the capture.
        let rt = check::cudart()?;
        let _on = self.stream.enter_unchecked()?;
        self.open = false;
        let mut g: cudart::cudaGraph_t = ptr::null_mut();
        // SAFETY: the stream is capturing (we began it) and `g` is a valid out-pointer.
        let r = unsafe { cuda_call!(rt, cudaStreamEndCapture(self.stream.as_raw(), &mut g)) };
        self.stream.clear_capturer();
        let g = CudaGraph::adopt(g, self.stream.device());
        if r.is_err() {
            super::capture::clear_last_error(rt);
        }
        r.map_err(|e| {
            e.with_context(
                "ending the capture (the runtime refuses a capture that an uncapturable call \
                 invalidated, or one with work forked to another stream and not joined back)",
            )
        })?;
        g.ok_or_else(|| Error::invalid("graph", "cudaStreamEndCapture returned null", "null"))
    }
}

impl Drop for CaptureScope<'_> {
    fn drop(&mut self) {
        if !self.open {
            return;
        }
        if let Ok(rt) = check::cudart() {
            let _on = self.stream.enter_unchecked();
            let mut g: cudart::cudaGraph_t = ptr::null_mut();
            // SAFETY: the stream is capturing (we began it); the graph, if
            // any, is ours and destroyed by `CudaGraph`'s drop. Status ignored:
            // Drop must not fail, and ending is all that matters.
            let _ = unsafe { rt.cudaStreamEndCapture(self.stream.as_raw(), &mut g) };
            drop(CudaGraph::adopt(g, self.stream.device()));
        }
        self.stream.clear_capturer();
    }
}

impl Stream {
    /// Begin the capture: the mark (refusing other threads' work, and
    /// refused while a `Stream::scope` of this value is open), then the
    /// registry entry (`wait::OwnCapture`, which device-wide waits of the
    /// crate on the device wait out, and which waits up to 1 s for such a
    /// wait in progress, then refuses), then `cudaStreamBeginCapture`.
    fn begin_capture(&self, mode: CaptureMode) -> Result<super::wait::OwnCapture> {
        check_capturable(self, false)?;
        let rt = check::cudart()?;
        check_capturable(self, self.capture_status()?.is_capturing())?;
        // Checked, but not counted as queueing: the mark below waits until
        // no other call is queueing on the stream.
        let _on = self.enter_to_wait("beginning a stream capture")?;
        // Other threads' work on this stream is refused from before the
        // capture begins until after it ended (`CaptureScope`); calls that
        // passed their check before the mark have returned when it is set.
        self.mark_capturer()?;
        // Not while a device-wide wait of the crate is in progress on the
        // device (it would be refused by, or invalidate, this capture):
        // waits for it up to 1 s, then refuses with the mark cleared.
        let own = match super::wait::OwnCapture::open(
            self.device().map(|d| d.ordinal()),
            Instant::now() + super::wait::CAPTURE_OPEN_WAIT,
            &format!("{self:?}"),
        ) {
            Ok(own) => own,
            Err(e) => {
                self.clear_capturer();
                return Err(e);
            }
        };
        // SAFETY: a valid stream, not capturing, not the legacy stream.
        let r = unsafe { cuda_call!(rt, cudaStreamBeginCapture(self.as_raw(), mode.raw())) };
        if let Err(e) = r {
            self.clear_capturer();
            return Err(e);
        }
        Ok(own)
    }

    /// Capture the work `f` queues on this stream into a [`CudaGraph`]
    /// (`cudaStreamBeginCapture` … `cudaStreamEndCapture`). The capture
    /// always ends, also when `f` fails or panics; see the
    /// [`CudaGraph`] docs.
    ///
    /// Run the step once eagerly first (it sizes every workspace and builds
    /// every plan); a call *of this crate* that would allocate, search or
    /// upload during the capture returns [`Error::CaptureUnsafe`]. Other
    /// libraries' calls are not seen by the crate: a stream another library
    /// owns or shares ([`Stream::foreign_owner`]: a cudarc stream, and the
    /// per-thread default stream, which is cudarc's `per_thread_stream`
    /// and candle's default stream) is not captured at all, since its owner's allocations, frees and event records would
    /// become graph nodes behind its ordinary values. While the capture is
    /// open, work queued on this stream value from another thread (a
    /// launch, a synchronization, a handle's creation) is refused
    /// ([`Error::CaptureUnsafe`]): it would silently join the graph (the
    /// runtime allows that in global mode; this crate does not). The
    /// capture begins only after the calls already queueing on this value
    /// returned (waiting up to 1 s, then [`Error::InvalidArgument`]), so a
    /// launch is either entirely before the capture or refused.
    ///
    /// Limits of the marks: they belong to this stream *value* and its
    /// clones. Another value wrapping the same raw stream
    /// ([`Stream::from_raw`]) shares none, and a stream joined into the
    /// capture through [`Stream::wait_event`] on an event recorded inside
    /// it (a fork) carries no mark: other threads' work on such a stream
    /// is not refused by this crate.
    ///
    /// `f` may return any error type that a crate [`Error`] converts into
    /// (`Error` itself, `Box<dyn std::error::Error>`, `anyhow::Error`).
    ///
    /// # Errors
    /// `f`'s error; [`Error::InvalidArgument`] for the legacy default stream,
    /// a stream already capturing, a stream another library owns or shares
    /// (a cudarc stream, the per-thread default stream), a stream
    /// value with an open [`Stream::scope`], or one another call still
    /// queues on after 1 s, or while the end of a cudarc scope
    /// (`CudarcStream::scope`) still waits for the stream's device after 1 s; [`Error::Cuda`] when the runtime
    /// invalidated the capture (an uncapturable call) or refuses to begin;
    /// [`Error::WrongThread`]; [`Error::Load`].
    #[doc(alias = "cudaStreamBeginCapture")]
    #[doc(alias = "cudaStreamEndCapture")]
    pub fn capture<F, E>(&self, mode: CaptureMode, f: F) -> std::result::Result<CudaGraph, E>
    where
        F: FnOnce(&Stream) -> std::result::Result<(), E>,
        E: From<Error>,
    {
        let own = self.begin_capture(mode)?;
        let scope = CaptureScope {
            stream: self,
            open: true,
            _own: own,
        };
        {
            let _mark = super::capture::ScopeMark::enter();
            f(self)?; // an error drops `scope`, which ends the capture
        }
        Ok(scope.end()?)
    }
}

/// CUDA graphs: capture a stream's work into a [`CudaGraph`], instantiate it
/// into a [`CudaGraphExec`], replay it, update it from a new capture.
///
/// ```no_run
/// use cudnn::runtime::{CaptureMode, Stream};
/// let stream = Stream::new()?;
/// # let step = |_s: &Stream| -> cudnn::Result<()> { Ok(()) };
/// step(&stream)?; // once eagerly: sizes every workspace
/// let graph = stream.capture(CaptureMode::Global, |s| step(s))?;
/// let exec = graph.instantiate()?;
/// for _ in 0..100 {
///     // SAFETY: every buffer, handle and plan `step` used is alive, not
///     // reallocated, and only touched in the stream's order.
///     unsafe { exec.launch(&stream) }?;
/// }
/// stream.synchronize()?;
/// # Ok::<(), cudnn::Error>(())
/// ```
///
/// # Capture is a scope
/// [`Stream::capture`] begins capture, runs the closure, and always ends the
/// capture: when the closure returns an error, when it panics (the scope's
/// guard ends it while unwinding), and when the runtime invalidated the
/// capture. Only a closure that returns `Ok` on a capture the runtime kept
/// gives a [`CudaGraph`]. Calls that cannot be captured (a workspace growth, an
/// algorithm search, a host upload: see [`Hazard`](super::Hazard)) return
/// [`Error::CaptureUnsafe`] instead of corrupting the capture.
///
/// # Why replay is `unsafe`
/// A captured graph holds raw device addresses: every buffer the captured
/// work read or wrote, the handles' workspaces, the plans' scratch. A
/// safe replay would have to keep all of them borrowed for as long as the
/// executable graph lives; but a replayed training or decoding step must let
/// the host write the next inputs and read the outputs between launches,
/// which such a borrow forbids (an output is borrowed mutably by the
/// capture). So [`CudaGraphExec::launch`] is `unsafe`, with this contract:
///
/// 1. every device allocation the captured work touched is still allocated
///    and was not reallocated (no buffer dropped or replaced, no handle
///    workspace grown or released, no handle or plan dropped);
/// 2. host and other-stream accesses to those buffers are ordered with the
///    launch (same stream, or events), as for any kernel. That includes the
///    handles' workspaces and the state the captured ops keep on the device
///    (a dropout's random-number state): an eager op on the same handle,
///    or the launch of another graph captured from it, on another stream,
///    races with this launch. The crate's own cross-stream ordering (the
///    event a [`Dropout`](crate::dnn::Dropout) records after each eager
///    use) sees neither the captured uses nor the replays: it keeps marking
///    the last eager use, and a dropout is captured only on the stream of
///    that use;
/// 3. nothing the captured work reads is a host pointer that is gone;
///    and a captured RNN backward pass reads its reserve as the fill
///    before it left it: the graph is launched only after that training
///    forward ran (eagerly, or as an earlier node or launch), once per
///    fill (a backward data rewrites the reserve);
/// 4. a graph with NCCL collectives is launched on every rank of the
///    communicator (otherwise it waits forever), and the communicator is
///    neither destroyed nor aborted.
///
/// Capturing and instantiating are safe: they queue nothing. Inside the
/// closure, the crate's own `cudaMalloc`, synchronous copies and stream
/// synchronizations return [`Error::CaptureUnsafe`] (a thread-local scope
/// mark, no runtime call); the global capture mode (the default) also makes
/// the runtime refuse `cudaMalloc`, `cudaFree` and synchronizing calls from
/// any thread during the capture, so a buffer freed inside the closure
/// invalidates the capture rather than leaving a dangling address in the
/// graph. There is no relaxed mode: it lets those calls through. Dropping
/// a `cudaMalloc` buffer inside the closure calls `cudaFree`, which the
/// runtime refuses during a capture: the capture is invalidated (an error
/// when it ends) and the memory may be leaked; drop temporaries after the
/// closure.
///
/// # Updating
/// [`CudaGraphExec::update`] (`cudaGraphExecUpdate`) re-points an executable
/// graph at the parameters of a new capture of the same work (new buffers,
/// new scalars) without a new instantiation; when the topology or a node's
/// kind changed it returns [`Error::GraphUpdate`] and the executable graph
/// is unchanged.
///
/// # Threads
/// Graph objects are not internally synchronized (CUDA Runtime API, "Graph
/// object thread safety"): [`CudaGraph`] and [`CudaGraphExec`] are `Send`, not
/// `Sync`.
///
/// A captured CUDA graph (`cudaGraph_t`): a template; instantiate it to run
/// it. Destroyed on drop.
pub struct CudaGraph {
    raw: NonNull<CUgraph_st>,
    device: Option<Device>,
}

// SAFETY: graph objects may be used from any thread but are not internally
// synchronized (CUDA Runtime API, "Graph object thread safety"); `CudaGraph` is
// not `Sync`, so one thread at a time uses it.
unsafe impl Send for CudaGraph {}

impl fmt::Debug for CudaGraph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaGraph")
            .field("raw", &self.raw)
            .field("device", &self.device.map(|d| d.ordinal()))
            .finish()
    }
}

impl CudaGraph {
    fn adopt(raw: cudart::cudaGraph_t, device: Option<Device>) -> Option<Self> {
        NonNull::new(raw).map(|raw| CudaGraph { raw, device })
    }

    /// Take ownership of a graph made elsewhere (destroyed on drop).
    ///
    /// # Safety
    /// `raw` is a valid `cudaGraph_t` that nothing else destroys; `device`
    /// is the device its work runs on.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for null.
    pub unsafe fn from_raw(raw: cudart::cudaGraph_t, device: Option<Device>) -> Result<Self> {
        Self::adopt(raw, device).ok_or_else(|| Error::invalid("raw", "a null cudaGraph_t", "null"))
    }

    /// The raw `cudaGraph_t` (still owned by `self`).
    pub fn as_raw(&self) -> cudart::cudaGraph_t {
        self.raw.as_ptr()
    }

    /// The device of the captured stream.
    pub fn device(&self) -> Option<Device> {
        self.device
    }

    /// How many nodes the graph has (`cudaGraphGetNodes`).
    ///
    /// # Errors
    /// [`Error::Cuda`]; [`Error::MissingSymbol`] on an old runtime.
    #[doc(alias = "cudaGraphGetNodes")]
    pub fn node_count(&self) -> Result<usize> {
        let rt = check::cudart()?;
        let mut n = 0usize;
        // SAFETY: a valid graph; a null node array asks for the count only.
        unsafe {
            cuda_call!(
                rt,
                cudaGraphGetNodes(self.as_raw(), ptr::null_mut(), &mut n)
            )
        }?;
        Ok(n)
    }

    /// Instantiate the graph into an executable graph
    /// (`cudaGraphInstantiateWithFlags`, no flags).
    ///
    /// # Errors
    /// [`Error::Cuda`] from the runtime; [`Error::Load`].
    #[doc(alias = "cudaGraphInstantiate")]
    pub fn instantiate(&self) -> Result<CudaGraphExec> {
        self.instantiate_with_flags(0)
    }

    /// [`instantiate`](Self::instantiate) with the runtime's flags
    /// (`cudaGraphInstantiateFlag*`; the owned captures of the cudarc
    /// interop pass `AutoFreeOnLaunch`, 1).
    pub(crate) fn instantiate_with_flags(&self, flags: u64) -> Result<CudaGraphExec> {
        let rt = check::cudart()?;
        let _on = match self.device {
            Some(d) => d.guard()?,
            None => super::DeviceGuard::unchanged(),
        };
        let mut e: cudart::cudaGraphExec_t = ptr::null_mut();
        // SAFETY: a valid graph; `e` is a valid out-pointer.
        unsafe {
            cuda_call!(
                rt,
                cudaGraphInstantiateWithFlags(&mut e, self.as_raw(), flags)
            )
        }?;
        let raw = NonNull::new(e)
            .ok_or_else(|| Error::invalid("graph", "cudaGraphInstantiate returned null", "null"))?;
        Ok(CudaGraphExec {
            raw,
            device: self.device,
        })
    }
}

impl Drop for CudaGraph {
    fn drop(&mut self) {
        if let Ok(rt) = check::cudart() {
            // SAFETY: we own the graph; destroying a template does not
            // affect executable graphs made from it. Status ignored in Drop.
            let _ = unsafe { rt.cudaGraphDestroy(self.raw.as_ptr()) };
        }
    }
}

/// An executable CUDA graph (`cudaGraphExec_t`). Destroyed on drop without
/// waiting: a launch still in flight runs to its end and the runtime frees
/// the graph then (so the buffers it uses must outlive that launch, not
/// only this value).
pub struct CudaGraphExec {
    raw: NonNull<CUgraphExec_st>,
    device: Option<Device>,
}

// SAFETY: as for `CudaGraph`: usable from any thread, not internally
// synchronized, so `Send` and not `Sync`.
unsafe impl Send for CudaGraphExec {}

impl fmt::Debug for CudaGraphExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaGraphExec")
            .field("raw", &self.raw)
            .field("device", &self.device.map(|d| d.ordinal()))
            .finish()
    }
}

/// The name of a `cudaGraphExecUpdateResult`.
pub(crate) fn update_result_name(r: cudaGraphExecUpdateResult) -> &'static str {
    use cudaGraphExecUpdateResult as R;
    match r {
        R::cudaGraphExecUpdateSuccess => "cudaGraphExecUpdateSuccess",
        R::cudaGraphExecUpdateError => "cudaGraphExecUpdateError",
        R::cudaGraphExecUpdateErrorTopologyChanged => "cudaGraphExecUpdateErrorTopologyChanged",
        R::cudaGraphExecUpdateErrorNodeTypeChanged => "cudaGraphExecUpdateErrorNodeTypeChanged",
        R::cudaGraphExecUpdateErrorFunctionChanged => "cudaGraphExecUpdateErrorFunctionChanged",
        R::cudaGraphExecUpdateErrorParametersChanged => "cudaGraphExecUpdateErrorParametersChanged",
        R::cudaGraphExecUpdateErrorNotSupported => "cudaGraphExecUpdateErrorNotSupported",
        R::cudaGraphExecUpdateErrorUnsupportedFunctionChange => {
            "cudaGraphExecUpdateErrorUnsupportedFunctionChange"
        }
        R::cudaGraphExecUpdateErrorAttributesChanged => "cudaGraphExecUpdateErrorAttributesChanged",
        _ => "unknown",
    }
}

impl CudaGraphExec {
    /// The raw `cudaGraphExec_t` (still owned by `self`).
    pub fn as_raw(&self) -> cudart::cudaGraphExec_t {
        self.raw.as_ptr()
    }

    /// The device of the captured stream.
    pub fn device(&self) -> Option<Device> {
        self.device
    }

    fn check_stream(&self, stream: &Stream) -> Result<()> {
        check_capturable_launch(stream)?;
        if let Some(d) = self.device {
            super::check_device(|| "the stream of a graph launch".into(), d, stream.device())?;
        }
        Ok(())
    }

    /// Replay the graph on `stream` (`cudaGraphLaunch`); asynchronous.
    ///
    /// # Safety
    /// The contract in the [`CudaGraph`] docs: every
    /// allocation the captured work touched is alive and was not
    /// reallocated, and other accesses to it are ordered with this launch.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] for a stream of another device;
    /// [`Error::WrongThread`]; [`Error::Cuda`]; [`Error::Load`].
    #[doc(alias = "cudaGraphLaunch")]
    pub unsafe fn launch(&self, stream: &Stream) -> Result<()> {
        self.check_stream(stream)?;
        let rt = check::cudart()?;
        let _on = stream.enter("launching a CUDA graph")?;
        // SAFETY: a valid executable graph and stream; the caller keeps the
        // memory it touches alive (this function's contract).
        unsafe { cuda_call!(rt, cudaGraphLaunch(self.as_raw(), stream.as_raw())) }
    }

    /// Upload the graph's resources to the device ahead of the first launch
    /// (`cudaGraphUpload`), so that launch is not slower than the rest.
    /// Runs nothing of the captured work.
    ///
    /// # Errors
    /// As [`launch`](Self::launch).
    #[doc(alias = "cudaGraphUpload")]
    pub fn upload(&self, stream: &Stream) -> Result<()> {
        self.check_stream(stream)?;
        let rt = check::cudart()?;
        let _on = stream.enter("uploading a CUDA graph")?;
        // SAFETY: a valid executable graph and stream; uploading runs no
        // captured work, so no captured memory is touched.
        unsafe { cuda_call!(rt, cudaGraphUpload(self.as_raw(), stream.as_raw())) }
    }

    /// Re-point this executable graph at the parameters of `graph`, a new
    /// capture of the same work (`cudaGraphExecUpdate`): new buffers, new
    /// scalars, same kernels in the same topology.
    ///
    /// # Errors
    /// [`Error::GraphUpdate`] naming the runtime's reason when the update is
    /// impossible (the topology, a node's kind or its function changed; the
    /// executable graph is unchanged: instantiate `graph` instead);
    /// [`Error::DeviceMismatch`] for a graph captured on another device
    /// (before the call); [`Error::Cuda`] for other failures;
    /// [`Error::MissingSymbol`].
    #[doc(alias = "cudaGraphExecUpdate")]
    pub fn update(&mut self, graph: &CudaGraph) -> Result<()> {
        let rt = check::cudart()?;
        if let Some(d) = self.device {
            super::check_device(|| "the graph of an update".into(), d, graph.device)?;
        }
        // The executable graph's device current, as for `instantiate`.
        let _on = match self.device {
            Some(d) => d.guard()?,
            None => super::DeviceGuard::unchanged(),
        };
        let mut info = cudaGraphExecUpdateResultInfo {
            result: cudaGraphExecUpdateResult::cudaGraphExecUpdateSuccess,
            errorNode: ptr::null_mut(),
            errorFromNode: ptr::null_mut(),
        };
        // SAFETY: valid graphs; `info` is a valid out-pointer.
        let st = unsafe { rt.cudaGraphExecUpdate(self.as_raw(), graph.as_raw(), &mut info) }?;
        if st == cudart::cudaError::cudaSuccess {
            return Ok(());
        }
        // A refused update is an answer, not a fault: clear it from the
        // thread's last error.
        super::capture::clear_last_error(rt);
        if info.result != cudaGraphExecUpdateResult::cudaGraphExecUpdateSuccess {
            return Err(Error::GraphUpdate {
                result: update_result_name(info.result),
                code: info.result.0,
            });
        }
        check::cuda_status(rt, "cudaGraphExecUpdate", st)
    }
}

/// A graph may be launched on any created stream, on the calling thread's
/// per-thread default stream and on the legacy default stream (CUDA allows
/// it; the launch then serializes with the blocking streams). The check
/// only refuses another thread's per-thread stream.
fn check_capturable_launch(stream: &Stream) -> Result<()> {
    super::check_stream_thread("the stream of a graph launch", stream).map(drop)
}

impl Drop for CudaGraphExec {
    fn drop(&mut self) {
        if let Ok(rt) = check::cudart() {
            // SAFETY: we own the executable graph. The runtime keeps it alive
            // until launches in flight complete. Status ignored in Drop.
            let _ = unsafe { rt.cudaGraphExecDestroy(self.raw.as_ptr()) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_update_result_names_are_distinct() {
        let names: Vec<&str> = (0u32..9)
            .map(|v| update_result_name(cudaGraphExecUpdateResult(v)))
            .collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 9, "{names:?}");
        assert_eq!(
            update_result_name(cudaGraphExecUpdateResult(2)),
            "cudaGraphExecUpdateErrorTopologyChanged"
        );
        assert_eq!(
            update_result_name(cudaGraphExecUpdateResult(999)),
            "unknown"
        );
    }

    #[test]
    fn unit_legacy_stream_is_not_capturable() {
        let e = check_capturable(&Stream::legacy(), false).expect_err("legacy");
        assert!(e.to_string().contains("legacy default stream"), "{e}");
        // The per-thread default stream is shared with every library on the
        // thread (cudarc's per_thread_stream): refused, captured or not.
        for capturing in [false, true] {
            let e = check_capturable(&Stream::per_thread(), capturing).expect_err("per-thread");
            assert!(e.to_string().contains("per-thread default stream"), "{e}");
        }
        // A stream value of the crate's own: nested captures refused.
        let own = Stream::fake_for_tests(0x1000);
        let e = check_capturable(&own, true).expect_err("nested");
        assert!(e.to_string().contains("already capturing"), "{e}");
        assert!(check_capturable(&own, false).is_ok());
    }
}
