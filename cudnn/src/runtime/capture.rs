//! Capture safety: the rule and the guard the launches call (see [`Hazard`]).

use crate::check;
use crate::error::{Error, Result};
use crate::sys::cudart::{self, cudaStreamCaptureStatus};

/// Whether a stream is being captured into a CUDA graph
/// (`cudaStreamIsCapturing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CaptureStatus {
    /// Not capturing: work runs.
    None,
    /// Capturing: work is recorded into a graph.
    Active,
    /// A capture that an error invalidated; it must be ended (the
    /// [`Stream::capture`](super::Stream::capture) scope does).
    Invalidated,
}

impl CaptureStatus {
    /// From the runtime's value; an unknown value counts as capturing (the
    /// safe reading: hazards are refused).
    pub fn from_raw(raw: cudaStreamCaptureStatus) -> Self {
        match raw {
            cudaStreamCaptureStatus::cudaStreamCaptureStatusNone => CaptureStatus::None,
            cudaStreamCaptureStatus::cudaStreamCaptureStatusInvalidated => {
                CaptureStatus::Invalidated
            }
            _ => CaptureStatus::Active,
        }
    }

    /// Whether the stream is capturing (active or invalidated).
    pub fn is_capturing(self) -> bool {
        self != CaptureStatus::None
    }
}

/// Capture safety: which calls may run while their stream is being captured
/// into a CUDA graph, and the one guard every launch calls.
///
/// # The rule
/// Once its workspace is sized, the steady-state `run`/`execute` of every
/// plan in this crate (legacy convolution and ops, GEMM and cuBLASLt, graph
/// plans, collectives) queues device work only: no allocation, no host
/// synchronization, no host-to-device copy. Such a call is capture-safe and
/// records into a graph like any kernel launch.
///
/// A few calls are not, and they all say so through [`Hazard`] before any
/// library call: while their stream is capturing they return
/// [`Error::CaptureUnsafe`] naming the call, what it would have done and
/// what to do before the capture. Nothing was queued, so the capture stays
/// usable; the caller may end it, or do the missing step on another stream
/// first (growing a workspace is not stream work).
///
/// | hazard | who | do before the capture |
/// |---|---|---|
/// | [`Hazard::WorkspaceGrowth`] | cuDNN legacy ops and graph plans on a [`dnn::Handle`](crate::dnn::Handle), the fused convolution | run the op once eagerly, or `Handle::reserve_workspace(plan.workspace_size())` |
/// | [`Hazard::AlgorithmSearch`] | `ConvProblem::plan` with a measured search and `Plan::autotune` on a capturing stream; `Plan::build`, `build_all` and loading a plan inside the capture closure | build the plans (and search) before the capture |
/// | [`Hazard::ImplicitWorkspace`] | cuBLAS GEMM on a handle without `set_workspace`, on a capturing stream or inside the capture closure | `blas::Handle::set_workspace(...)` |
/// | [`Hazard::HostUpload`] | `gemm_batched` (its pointer table) | use strided-batched GEMM, or a plan with a device-resident table |
/// | [`Hazard::Allocation`] | `DeviceBuffer::alloc`/`from_host` (`cudaMalloc`, `cudaMemcpy`) inside the closure; `DeviceBuffer::alloc_async` on a capturing stream (the graph would own the memory); a `set_workspace` of a cuBLAS or cuBLASLt handle | allocate before the capture |
/// | [`Hazard::HostSync`] | inside the closure: `Stream::synchronize`/`query`, `Event::synchronize`, synchronous copies and memsets; `Communicator::wait` (also on a capturing stream) | synchronize after the graph's launch instead |
/// | [`Hazard::Allocation`] | `dnn::Handle::new`, `blas::Handle::new` (`cudnnCreate`/`cublasCreate` allocate) inside the closure or on a capturing stream | create handles before the capture |
/// | [`Hazard::HostSync`] | `Device::synchronize` inside the closure; the runtime's refusal while any stream of the device is capturing (codes 900 to 908) is typed too | synchronize after the capture |
/// | [`Hazard::HostSync`] | `Stream::scope` inside the closure, on a capturing stream, or on a stream value whose capture is open; lends of a `CudarcScope` inside the closure or while cudarc's stream is capturing | open the scope before or after the capture |
/// | [`Hazard::OtherThreadsCapture`] | any launch, synchronization, event record or wait, or handle creation on a stream value whose [`Stream::capture`](super::Stream::capture) another thread has open | queue it after that capture, or on another stream |
/// | [`Hazard::ForeignStream`] | work on a cudarc stream while cudarc captures it, or on the per-thread default stream ([`Stream::per_thread`](super::Stream::per_thread), the same queue as cudarc's `per_thread_stream`) while other code captures it (inside a closure too, where it is allowed otherwise); a shared stream waiting for an event recorded inside a capture; not during an owned capture this thread began (`CudarcStream::begin_owned_capture`, whose graph only this crate launches; another thread's work then is [`Hazard::OtherThreadsCapture`]) | end cudarc's capture first; capture a stream of this crate, or begin an owned capture of the cudarc stream |
/// | [`Hazard::CapturedEvent`] | `dropout_forward`/`dropout_backward` and an RNN training forward with dropout on a capturing stream that is not the stream of the state's last use (`Dropout::last_stream`); on that stream they are captured. An RNN pass on a handle whose stream is not that of the reserve's last use, and `set_stream` of a cuDNN, cuBLAS or cuBLASLt (with a workspace) handle, when either stream is capturing | use the dropout, the reserve or the handle once on the capturing stream before the capture |
///
/// # For the launches (the hook)
/// A call with a hazard calls [`forbid_during_capture`](super::forbid_during_capture) with the stream it
/// would use just before doing the unsafe thing; only then is the stream
/// asked (`cudaStreamIsCapturing`, a host-only query), so the steady state
/// pays nothing. RNN, CTC and any new op follow the same pattern: one line,
/// `crate::runtime::forbid_during_capture(op, stream, Hazard::...)?;`, before
/// the workspace growth, search or upload.
///
/// Something a call would do that cannot be recorded into a CUDA graph.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Hazard {
    /// Grow a handle's workspace (`cudaMalloc`).
    WorkspaceGrowth {
        /// Which workspace (`"cuDNN"`).
        owner: &'static str,
        /// Bytes it holds now.
        have: usize,
        /// Bytes the call needs.
        need: usize,
    },
    /// Search algorithms by running them (timed launches, host sync).
    AlgorithmSearch,
    /// Launch cuBLAS on a handle with no explicit workspace (cuBLAS would
    /// take memory from its own pool during the capture).
    ImplicitWorkspace,
    /// Copy host data to the device (`what`: the data).
    HostUpload(&'static str),
    /// Allocate device memory (`cudaMalloc`).
    Allocation,
    /// Wait on the host for device work.
    HostSync,
    /// Queue work on a stream another thread is capturing: it would become
    /// part of that thread's graph.
    OtherThreadsCapture,
    /// Queue work on a stream another library owns (`"cudarc"`) or shares
    /// ([`PER_THREAD_SHARED`]: the per-thread default stream) while that
    /// stream is being captured.
    ForeignStream(&'static str),
    /// Use a resource whose uses are ordered across streams by an event (a
    /// dropout state, an RNN reserve, a handle's workspace on `set_stream`)
    /// on a stream other than its last use's while either is being
    /// captured: the event would be waited for or recorded inside a
    /// capture.
    CapturedEvent(&'static str),
}

impl Hazard {
    /// What the call would do, in words.
    pub fn what(&self) -> String {
        match self {
            Hazard::WorkspaceGrowth { owner, have, need } => {
                format!("grow the {owner} workspace from {have} to {need} bytes (cudaMalloc)")
            }
            Hazard::AlgorithmSearch => {
                "search algorithms (timed launches and a host synchronization)".into()
            }
            Hazard::ImplicitWorkspace => {
                "let cuBLAS take workspace from its own pool (the handle has no explicit workspace)"
                    .into()
            }
            Hazard::HostUpload(what) => format!("copy {what} from the host (cudaMemcpy)"),
            Hazard::Allocation => "allocate device memory (cudaMalloc)".into(),
            Hazard::HostSync => "wait on the host for the device".into(),
            Hazard::OtherThreadsCapture => {
                "join another thread's capture of the stream (the work would become part of \
                 that thread's graph)"
                    .into()
            }
            Hazard::ForeignStream(owner) if *owner == PER_THREAD_SHARED => {
                "queue work on the per-thread default stream while other code captures it (the \
                 stream is shared with every library on this thread, cudarc's per_thread_stream \
                 and so candle's included: this crate's work would enter a graph that code \
                 launches, possibly after the memory it uses is gone)"
                    .into()
            }
            Hazard::ForeignStream(owner) => format!(
                "queue work on a {owner} stream while {owner} captures it (this crate's work \
                 would enter a graph {owner} launches, possibly after the memory it uses is gone)"
            ),
            Hazard::CapturedEvent(what) => format!(
                "use {what} on a stream other than that of its last use while either is being \
                 captured (the event that orders its uses would be waited for or recorded inside \
                 a capture, and replays would be unordered)"
            ),
        }
    }

    /// What to do before the capture instead.
    pub fn before(&self) -> String {
        match self {
            Hazard::WorkspaceGrowth { owner, need, .. } => format!(
                "reserve it before the capture (run the op once eagerly, or reserve_workspace({need}) on the {owner} handle)"
            ),
            Hazard::AlgorithmSearch => {
                "build the plan (and run its search) before the capture".into()
            }
            Hazard::ImplicitWorkspace => {
                "give the handle a workspace before the capture (blas::Handle::set_workspace)"
                    .into()
            }
            Hazard::HostUpload(_) => {
                "upload it before the capture, or use the strided-batched form".into()
            }
            Hazard::Allocation => "allocate before the capture".into(),
            Hazard::HostSync => "synchronize after launching the graph instead".into(),
            Hazard::OtherThreadsCapture => {
                "queue it after that capture ends, or on another stream".into()
            }
            Hazard::ForeignStream(owner) if *owner == PER_THREAD_SHARED => {
                "end that capture before queueing, and capture a stream this crate created, \
                 joined to the per-thread stream with events outside the capture"
                    .into()
            }
            Hazard::ForeignStream(owner) => format!(
                "end {owner}'s capture before queueing, and capture a stream this crate \
                 created, joined to the {owner} stream with events outside the capture"
            ),
            Hazard::CapturedEvent(_) => {
                "use it once on the capturing stream before the capture (or run it before or \
                 after the capture)"
                    .into()
            }
        }
    }
}

/// The rule, as logic: `Ok` when the stream is not capturing, otherwise
/// [`Error::CaptureUnsafe`] naming `op`, the hazard and the remedy.
///
/// # Errors
/// [`Error::CaptureUnsafe`] when `status` is capturing.
pub fn capture_rule(op: &str, status: CaptureStatus, hazard: &Hazard) -> Result<()> {
    if !status.is_capturing() {
        return Ok(());
    }
    Err(Error::CaptureUnsafe {
        op: op.to_string(),
        hazard: hazard.what(),
        before: hazard.before(),
    })
}

/// The runtime answers `cudaErrorStreamCaptureImplicit` when asked about the
/// legacy default stream while a blocking stream of its device is capturing:
/// work there would join (and invalidate) that capture, so for the guard it
/// counts as capturing (the runtime documents that the query itself leaves
/// the capture valid).
pub(crate) fn implicit_is_capturing(status: Result<CaptureStatus>) -> Result<CaptureStatus> {
    match status {
        Err(Error::Cuda { code, .. })
            if code == cudart::cudaError::cudaErrorStreamCaptureImplicit.0 =>
        {
            if let Ok(rt) = check::cudart() {
                clear_last_error(rt);
            }
            Ok(CaptureStatus::Active)
        }
        other => other,
    }
}

/// Reset the calling thread's last runtime error after a failure this crate
/// expects and reports itself (a refused graph update, an invalidated
/// capture, the legacy stream's implicit-capture answer): the runtime keeps
/// it as the thread's last error, and a library that checks
/// `cudaGetLastError` after its own launches would take it for a failure of
/// its own. Sticky errors are not cleared by this (nothing can).
pub(crate) fn clear_last_error(rt: &cudart::Cudart) {
    // SAFETY: no arguments; only reads and resets thread-local state.
    let _ = unsafe { rt.cudaGetLastError() };
}

/// The owner a [`Stream::per_thread`](super::Stream::per_thread) value
/// names ([`Stream::foreign_owner`](super::Stream::foreign_owner)): the
/// per-thread default stream is one queue for every library on the thread
/// (cudarc's `per_thread_stream`, candle's default stream), so the crate
/// treats it as a stream other code queues on and may capture: it never
/// captures it, asks before queueing on it, and does not join it to a
/// capture of its own.
pub const PER_THREAD_SHARED: &str = "shared per-thread default";

thread_local! {
    /// How many [`Stream::capture`](super::Stream::capture) scopes are open on this thread.
    static SCOPES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Marks this thread as inside a capture scope while it lives.
pub(crate) struct ScopeMark(());

impl ScopeMark {
    pub(crate) fn enter() -> Self {
        SCOPES.with(|s| s.set(s.get().saturating_add(1)));
        ScopeMark(())
    }
}

impl Drop for ScopeMark {
    fn drop(&mut self) {
        SCOPES.with(|s| s.set(s.get().saturating_sub(1)));
    }
}

/// The runtime's refusals of a call because a capture is open
/// (`cudaErrorStreamCaptureUnsupported` 900 to
/// `cudaErrorStreamCaptureWrongThread` 908: unsupported, invalidated, merge,
/// unmatched, unjoined, isolation, implicit, captured event, wrong thread)
/// become [`Error::CaptureUnsafe`] naming `op` and `hazard`; the thread's
/// last runtime error is reset. Other results pass through.
///
/// # Errors
/// [`Error::CaptureUnsafe`], or `r`'s error.
pub(crate) fn typed_capture_refusal(op: &str, hazard: &Hazard, r: Result<()>) -> Result<()> {
    match r {
        Err(Error::Cuda { code, .. }) if (900..=908).contains(&code) => {
            if let Ok(rt) = check::cudart() {
                clear_last_error(rt);
            }
            capture_rule(op, CaptureStatus::Active, hazard)
        }
        other => other,
    }
}

/// Whether this thread is inside a [`Stream::capture`](super::Stream::capture) closure.
pub(crate) fn in_capture_scope() -> bool {
    SCOPES.with(|s| s.get()) > 0
}

/// For calls that name no stream (`cudaMalloc`, synchronous `cudaMemcpy`,
/// a stream synchronization): refused inside a [`Stream::capture`](super::Stream::capture) closure
/// on this thread, where the runtime would invalidate the capture (global
/// mode) or record something that is not stream work. A thread-local
/// counter: no runtime call.
///
/// # Errors
/// [`Error::CaptureUnsafe`] inside a capture scope.
pub(crate) fn forbid_in_capture_scope(op: &str, hazard: Hazard) -> Result<()> {
    let status = if in_capture_scope() {
        CaptureStatus::Active
    } else {
        CaptureStatus::None
    };
    capture_rule(op, status, &hazard)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Stream;
    use crate::runtime::stream_capture::forbid_allocation_during_capture;

    fn all_hazards() -> Vec<Hazard> {
        vec![
            Hazard::WorkspaceGrowth {
                owner: "cuDNN",
                have: 0,
                need: 4096,
            },
            Hazard::AlgorithmSearch,
            Hazard::ImplicitWorkspace,
            Hazard::HostUpload("the pointer table"),
            Hazard::Allocation,
            Hazard::HostSync,
            Hazard::OtherThreadsCapture,
            Hazard::ForeignStream("cudarc"),
            Hazard::CapturedEvent("the dropout state"),
        ]
    }

    #[test]
    fn unit_not_capturing_passes_every_hazard() {
        for h in all_hazards() {
            assert!(capture_rule("op", CaptureStatus::None, &h).is_ok(), "{h:?}");
        }
    }

    #[test]
    fn unit_capturing_refuses_every_hazard_naming_op_and_remedy() {
        for status in [CaptureStatus::Active, CaptureStatus::Invalidated] {
            for h in all_hazards() {
                match capture_rule("conv_forward", status, &h) {
                    Err(Error::CaptureUnsafe { op, hazard, before }) => {
                        assert_eq!(op, "conv_forward");
                        assert_eq!(hazard, h.what());
                        assert_eq!(before, h.before());
                        assert!(before.contains("before") || before.contains("after"));
                    }
                    other => panic!("{status:?} {h:?}: {other:?}"),
                }
            }
        }
        let e = capture_rule(
            "conv_forward",
            CaptureStatus::Active,
            &Hazard::WorkspaceGrowth {
                owner: "cuDNN",
                have: 0,
                need: 4096,
            },
        )
        .expect_err("capturing");
        assert_eq!(
            e.to_string(),
            "conv_forward cannot run while its stream is being captured into a CUDA graph: \
             it would grow the cuDNN workspace from 0 to 4096 bytes (cudaMalloc); reserve it \
             before the capture (run the op once eagerly, or reserve_workspace(4096) on the \
             cuDNN handle)"
        );
    }

    #[test]
    fn unit_scope_mark_counts_nested_scopes_on_this_thread() {
        assert!(forbid_in_capture_scope("alloc", Hazard::Allocation).is_ok());
        {
            let _a = ScopeMark::enter();
            let _b = ScopeMark::enter();
            assert!(forbid_in_capture_scope("alloc", Hazard::Allocation).is_err());
            // Another thread is not inside the scope.
            let other =
                std::thread::spawn(|| forbid_in_capture_scope("alloc", Hazard::Allocation).is_ok());
            assert!(other.join().unwrap_or(false));
        }
        assert!(forbid_in_capture_scope("alloc", Hazard::Allocation).is_ok());
    }

    #[test]
    fn unit_allocation_guard_reads_the_scope_mark_before_the_stream() {
        // Inside a capture scope on this thread, a growth on a stream that is
        // not capturing is refused as the growth, before any runtime call
        // (the legacy stream is never queried here: no device needed).
        let _mark = ScopeMark::enter();
        let hazard = Hazard::WorkspaceGrowth {
            owner: "cuDNN",
            have: 256,
            need: 4096,
        };
        match forbid_allocation_during_capture("a cuDNN op", &Stream::legacy(), hazard.clone()) {
            Err(Error::CaptureUnsafe { op, hazard: h, .. }) => {
                assert_eq!(op, "a cuDNN op");
                assert_eq!(h, hazard.what());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unit_implicit_capture_of_the_legacy_stream_counts_as_capturing() {
        let cuda = |code: u32| Error::Cuda {
            call: "cudaStreamIsCapturing",
            code,
            name: String::new(),
            text: String::new(),
            context: None,
        };
        let implicit = cudart::cudaError::cudaErrorStreamCaptureImplicit.0;
        let s = implicit_is_capturing(Err(cuda(implicit))).expect("mapped");
        assert!(s.is_capturing());
        assert!(capture_rule("op", s, &Hazard::Allocation).is_err());
        // Other errors and answers pass through.
        assert!(matches!(
            implicit_is_capturing(Err(cuda(1))),
            Err(Error::Cuda { code: 1, .. })
        ));
        assert_eq!(
            implicit_is_capturing(Ok(CaptureStatus::None)).expect("none"),
            CaptureStatus::None
        );
    }

    #[test]
    fn unit_capture_refusals_of_the_runtime_are_typed() {
        let cuda = |code: u32| -> Result<()> {
            Err(Error::Cuda {
                call: "cudaDeviceSynchronize",
                code,
                name: String::new(),
                text: String::new(),
                context: None,
            })
        };
        for code in 900..=908 {
            match typed_capture_refusal("Device::synchronize", &Hazard::HostSync, cuda(code)) {
                Err(Error::CaptureUnsafe { op, hazard, .. }) => {
                    assert_eq!(op, "Device::synchronize");
                    assert_eq!(hazard, Hazard::HostSync.what());
                }
                other => panic!("{code}: {other:?}"),
            }
        }
        for code in [1, 700, 899, 909] {
            assert!(matches!(
                typed_capture_refusal("x", &Hazard::HostSync, cuda(code)),
                Err(Error::Cuda { code: c, .. }) if c == code
            ));
        }
        assert!(typed_capture_refusal("x", &Hazard::HostSync, Ok(())).is_ok());
    }

    #[test]
    fn unit_status_from_raw_values() {
        use cudaStreamCaptureStatus as S;
        assert_eq!(
            CaptureStatus::from_raw(S::cudaStreamCaptureStatusNone),
            CaptureStatus::None
        );
        assert_eq!(
            CaptureStatus::from_raw(S::cudaStreamCaptureStatusActive),
            CaptureStatus::Active
        );
        assert_eq!(
            CaptureStatus::from_raw(S::cudaStreamCaptureStatusInvalidated),
            CaptureStatus::Invalidated
        );
        // An unknown value is treated as capturing: hazards are refused.
        assert!(CaptureStatus::from_raw(S(77)).is_capturing());
    }

    /// A stream value that names no real stream (never handed to the
    /// runtime: every test below is refused before any runtime call).
    fn fake_stream(foreign: Option<&'static str>) -> Stream {
        let raw = std::ptr::NonNull::<u8>::dangling().as_ptr().cast();
        Stream::wrap_kept(raw, false, None, None, foreign)
    }

    fn assert_capture_unsafe<T: std::fmt::Debug>(r: Result<T>, op: &str, hazard: &Hazard) {
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

    /// Another thread's work on a stream this thread is capturing would
    /// silently join the graph: refused (typed) by the check every launch,
    /// synchronization and handle creation runs, before any runtime call.
    /// The capturing thread itself passes. (Before the fix no check
    /// existed: `dnn::Handle::new` went on to `cudnnCreate`.)
    #[test]
    fn unit_other_threads_work_on_a_capturing_stream_is_refused() {
        let s = fake_stream(None);
        assert!(s.mark_capturer().is_ok());
        assert!(
            matches!(s.mark_capturer(), Err(Error::InvalidArgument { .. })),
            "one capture of a value at a time"
        );
        assert!(super::super::stream::check_stream_thread("op", &s).is_ok());
        let t = s.clone();
        let other = std::thread::spawn(move || {
            let hz = Hazard::OtherThreadsCapture;
            assert_capture_unsafe(
                super::super::stream::check_stream_thread("a launch", &t),
                "a launch",
                &hz,
            );
            assert_capture_unsafe(t.synchronize(), "synchronizing a stream", &hz);
            assert_capture_unsafe(
                crate::dnn::Handle::new(&t).map(|_| ()),
                "the stream of a cuDNN handle",
                &hz,
            );
            #[cfg(feature = "blas")]
            assert_capture_unsafe(
                crate::blas::Handle::new(&t).map(|_| ()),
                "the stream of a cuBLAS handle",
                &hz,
            );
        });
        assert!(other.join().is_ok());
        s.clear_capturer();
        let t = s.clone();
        let after = std::thread::spawn(move || {
            super::super::stream::check_stream_thread("a launch", &t).is_ok()
        });
        assert!(
            after.join().unwrap_or(false),
            "allowed again after the capture"
        );
    }

    /// The queueing rule as logic: a foreign (cudarc) stream is refused
    /// while its owner captures it, and allowed otherwise, also inside a
    /// capture closure (CUDA runs such work; before the fix it was refused
    /// there without asking); an own stream never asks.
    #[test]
    fn unit_queue_rule_for_foreign_streams() {
        use super::super::stream::queue_rule;
        let me = std::thread::current().id();
        let never = || -> Result<bool> { panic!("asked the runtime") };
        assert!(queue_rule("op", None, me, None, never).is_ok());
        assert!(queue_rule("op", Some(me), me, None, never).is_ok());
        let hz = Hazard::ForeignStream("cudarc");
        assert_capture_unsafe(
            queue_rule("op", None, me, Some("cudarc"), || Ok(true)),
            "op",
            &hz,
        );
        assert!(queue_rule("op", None, me, Some("cudarc"), || Ok(false)).is_ok());
        {
            let _mark = ScopeMark::enter();
            assert!(queue_rule("op", None, me, Some("cudarc"), || Ok(false)).is_ok());
        }
        // A failed query is reported, not taken for "not capturing".
        assert!(matches!(
            queue_rule("op", None, me, Some("cudarc"), || Err(Error::invalid(
                "q", "x", "y"
            ))),
            Err(Error::InvalidArgument { .. })
        ));
    }

    /// The legacy (null) stream's implicit-capture answer to the capture
    /// query of a foreign stream (a cudarc stream wrapping the legacy
    /// stream while a blocking stream captures) counts as capturing, typed,
    /// in the queueing check too (before the fix `check_queue` did not map
    /// it: `Error::Cuda` 906 surfaced and the thread's last error stayed).
    #[test]
    fn unit_queue_rule_maps_the_implicit_answer() {
        use super::super::stream::queue_rule;
        let me = std::thread::current().id();
        let implicit = cudart::cudaError::cudaErrorStreamCaptureImplicit.0;
        let r = queue_rule("op", None, me, Some("cudarc"), || {
            Ok(implicit_is_capturing(Err(Error::Cuda {
                call: "cudaStreamIsCapturing",
                code: implicit,
                name: String::new(),
                text: String::new(),
                context: None,
            }))?
            .is_capturing())
        });
        assert_capture_unsafe(r, "op", &Hazard::ForeignStream("cudarc"));
    }

    /// The per-thread default stream is every library's queue on the thread
    /// (cudarc's `per_thread_stream` is the same one): a soundness audit
    /// found that cudarc could capture it while the crate queued on it
    /// unasked (its graph then replays the crate's work after the memory is
    /// freed), and that the crate would capture it with candle's
    /// allocations inside. Now it is treated as another library's stream:
    /// never captured, asked before queueing, never joined to a capture.
    #[test]
    fn unit_per_thread_stream_is_treated_as_shared() {
        use super::super::stream::queue_rule;
        let s = Stream::per_thread();
        assert_eq!(s.foreign_owner(), Some(PER_THREAD_SHARED));
        let ran = std::cell::Cell::new(false);
        let r = s.capture(super::super::CaptureMode::ThreadLocal, |_| {
            ran.set(true);
            Ok::<(), Error>(())
        });
        match r {
            Err(Error::InvalidArgument { arg, rule, .. }) => {
                assert_eq!(arg, "stream");
                assert!(rule.contains("per-thread default stream"), "{rule}");
            }
            other => panic!("{other:?}"),
        }
        assert!(!ran.get());
        // Queueing asks the runtime, and other code's capture refuses it.
        let me = std::thread::current().id();
        let hz = Hazard::ForeignStream(PER_THREAD_SHARED);
        assert_capture_unsafe(
            queue_rule("op", None, me, Some(PER_THREAD_SHARED), || Ok(true)),
            "op",
            &hz,
        );
        assert!(
            hz.what().contains("per-thread default stream"),
            "{}",
            hz.what()
        );
        assert!(queue_rule("op", None, me, Some(PER_THREAD_SHARED), || Ok(false)).is_ok());
    }

    /// The crate's capture of a cudarc stream is refused (typed), before
    /// any runtime call: cudarc's own allocations, frees and event records
    /// on it would become graph nodes behind ordinary `CudaSlice`s. (Before
    /// the fix the capture began.)
    #[test]
    fn unit_capture_of_a_foreign_stream_is_refused() {
        let s = fake_stream(Some("cudarc"));
        assert_eq!(s.foreign_owner(), Some("cudarc"));
        let r = s.capture(super::super::CaptureMode::Global, |_| Ok::<(), Error>(()));
        match r {
            Err(Error::InvalidArgument { arg, .. }) => assert_eq!(arg, "stream"),
            other => panic!("{other:?}"),
        }
    }

    /// Inside a capture closure on this thread, creating a cuDNN or cuBLAS
    /// handle (which allocates) and a device-wide synchronization are
    /// refused before any runtime call. (Before the fix they reached
    /// `cudnnCreate`, `cublasCreate` and `cudaDeviceSynchronize`: an
    /// untyped runtime error, or an invalidated capture.)
    #[test]
    fn unit_handles_and_device_sync_refused_inside_a_capture_closure() {
        let s = fake_stream(None);
        let _mark = ScopeMark::enter();
        assert_capture_unsafe(
            crate::dnn::Handle::new(&s).map(|_| ()),
            "dnn::Handle::new",
            &Hazard::Allocation,
        );
        #[cfg(feature = "blas")]
        assert_capture_unsafe(
            crate::blas::Handle::new(&s).map(|_| ()),
            "blas::Handle::new",
            &Hazard::Allocation,
        );
        assert_capture_unsafe(
            super::super::Device::from_runtime(0).synchronize(),
            "Device::synchronize",
            &Hazard::HostSync,
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(2000))]

        /// The queueing rule over every combination (the truth written out
        /// from the documented rule): refused exactly when another thread
        /// captures the stream, or a foreign stream is used while it is
        /// capturing; the runtime is asked only for a foreign stream;
        /// refusals are typed and name the call.
        #[test]
        fn unit_property_queue_rule(
            capturer in 0u8..3, // none, this thread, another thread
            foreign in proptest::prelude::any::<bool>(),
            capturing in proptest::prelude::any::<bool>(),
            what in "[a-z ]{1,12}",
        ) {
            let me = std::thread::current().id();
            let other = std::thread::spawn(|| std::thread::current().id())
                .join()
                .map_err(|_| proptest::test_runner::TestCaseError::fail("spawn"))?;
            let cap = match capturer { 0 => None, 1 => Some(me), _ => Some(other) };
            let owner = foreign.then_some("cudarc");
            let asked = std::cell::Cell::new(false);
            let r = super::super::stream::queue_rule(&what, cap, me, owner, || {
                asked.set(true);
                Ok(capturing)
            });
            let refused = capturer == 2 || (foreign && capturing);
            proptest::prop_assert_eq!(r.is_err(), refused);
            if let Err(e) = r {
                let is_typed = matches!(&e, Error::CaptureUnsafe { op, .. } if *op == what);
                proptest::prop_assert!(is_typed, "{e:?}");
            }
            proptest::prop_assert!(!asked.get() || (foreign && capturer != 2));
        }
    }
}
