//! CUDA streams: ordered queues of device work (see [`Stream`]).

use std::fmt;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use crate::check::{self, cuda_call};
use crate::error::{Error, Result};
use crate::sys::cudart::{self, cudaError, cudaStream_t};

use super::queue::QueueHold;
use super::{Device, DeviceGuard};

/// Flags for [`Stream::with_flags`] (`cudaStreamCreateWithFlags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct StreamFlags(u32);

impl StreamFlags {
    /// `cudaStreamDefault`: the stream synchronizes with the legacy default
    /// stream.
    pub const DEFAULT: StreamFlags = StreamFlags(cudart::cudaStreamDefault);
    /// `cudaStreamNonBlocking`: the stream runs concurrently with the legacy
    /// default stream (and so with this crate's synchronous copies).
    pub const NON_BLOCKING: StreamFlags = StreamFlags(cudart::cudaStreamNonBlocking);

    /// The raw flag bits.
    pub fn bits(self) -> u32 {
        self.0
    }
}

struct Inner {
    raw: cudaStream_t,
    /// Whether dropping the last clone destroys `raw`.
    owned: bool,
    /// The device the stream belongs to; for a pseudo-stream, the device
    /// whose queue it names. `None`: unknown (no device could be read).
    device: Option<Device>,
    /// For the per-thread default stream: the thread whose queue it names.
    thread: Option<ThreadId>,
    /// What keeps a borrowed stream alive (a cudarc `CudaStream`): dropped
    /// with the last clone, after everything that used the stream.
    #[allow(dead_code)] // held, never read
    keep: Option<Arc<dyn std::any::Any + Send + Sync>>,
    /// The library that owns a borrowed stream (`"cudarc"`): it allocates,
    /// frees and records events on the stream itself, so this crate never
    /// captures it and queues nothing on it while it is capturing.
    foreign: Option<&'static str>,
    /// Whether a [`Stream::capture`] of this value is open (fast path for
    /// `capturer`).
    capturing: AtomicBool,
    /// The thread whose [`Stream::capture`] is open on this stream, and
    /// how many [`Stream::scope`]s of this value are open (one lock: a
    /// capture cannot begin while a scope is open, nor a scope while a
    /// capture is).
    marks: Mutex<Marks>,
    /// How many calls are queueing work on this value now (between their
    /// queueing check and the return of the enqueue: [`QueueHold`]). A
    /// capture begins only after setting its mark and seeing this at 0, so
    /// a launch either ends before the capture begins or sees the mark and
    /// is refused: it never silently joins the graph.
    queuing: Arc<AtomicUsize>,
}

/// How long a capture's beginning waits for other calls queueing on the
/// stream to return before it is refused.
const QUEUERS_WAIT: Duration = Duration::from_secs(1);

/// What is open on a stream value (see `Inner::marks`).
#[derive(Debug, Default)]
struct Marks {
    capturer: Option<ThreadId>,
    scopes: usize,
}

/// An open [`Stream::scope`], counted on its stream value until dropped.
pub(crate) struct OpenScope<'a>(&'a Stream);

impl Drop for OpenScope<'_> {
    fn drop(&mut self) {
        let mut m = self.0.marks();
        m.scopes = m.scopes.saturating_sub(1);
    }
}

/// What a raw stream handle names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A stream object (`cudaStreamCreate*` or someone else's).
    Real,
    /// `cudaStreamLegacy` or null: the current device's legacy default stream.
    Legacy,
    /// `cudaStreamPerThread`: the calling thread's default stream on the
    /// current device.
    PerThread,
}

fn kind_of(raw: cudaStream_t) -> Kind {
    if raw.is_null() || raw == cudart::cudaStreamLegacy {
        Kind::Legacy
    } else if raw == cudart::cudaStreamPerThread {
        Kind::PerThread
    } else {
        Kind::Real
    }
}

// SAFETY: the CUDA runtime API is thread-safe: a `cudaStream_t` may be used to
// enqueue work from any host thread, and concurrently from several (the CUDA
// Runtime API reference singles out only graph objects, "Graph object thread
// safety", as not internally synchronized). `Inner` is only a handle; it is
// destroyed once, by the last `Arc` owner.
unsafe impl Send for Inner {}
// SAFETY: as above; `&Inner` only hands out the raw handle for enqueueing work.
unsafe impl Sync for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        if self.owned
            && !self.raw.is_null()
            && let Ok(rt) = check::cudart()
        {
            // SAFETY: `raw` was created by cudaStreamCreate* (or handed over
            // with ownership through `from_raw_owned`) and this is the last
            // reference. Work still queued completes before the runtime
            // releases the stream. The status is ignored: Drop must not fail.
            let _ = unsafe { rt.cudaStreamDestroy(self.raw) };
        }
    }
}

/// A CUDA stream: an ordered queue of device work.
///
/// A [`Stream`] is a shared, reference-counted handle: cloning it is cheap,
/// and the underlying `cudaStream_t` is destroyed when the last clone is
/// dropped. Everything that enqueues work on a stream *and outlives the call*
/// keeps a clone — a cuDNN or cuBLAS [`Handle`](crate::dnn::Handle) bound to
/// it, a [`DeviceBuffer`](crate::runtime::DeviceBuffer) from stream-ordered
/// allocation that will be freed on it — so a stream can never be destroyed
/// while something still uses it.
///
/// Streams someone else owns (a framework's, PyTorch's current stream) are
/// wrapped with [`Stream::from_raw`] and never destroyed by this crate.
///
/// # Device and thread identity
/// A stream records its [`device`](Stream::device); the crate queues work
/// on it with that device current, and handles and buffers used with it
/// must belong to the same device ([`Error::DeviceMismatch`]). The
/// pseudo-streams name a queue *relative to the caller*: [`Stream::legacy`]
/// records the device current when it was made, [`Stream::per_thread`] also
/// the thread ([`thread`](Stream::thread)). `==` and
/// [`wait_for`](Stream::wait_for) use that identity, and a per-thread stream
/// used from another thread is refused ([`Error::WrongThread`]), so one
/// value never silently names two queues.
#[derive(Clone)]
pub struct Stream {
    inner: Arc<Inner>,
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.inner.raw {
            r if r.is_null() => "default (null)".to_string(),
            r if r == cudart::cudaStreamLegacy => "legacy default".to_string(),
            r if r == cudart::cudaStreamPerThread => "per-thread default".to_string(),
            r => format!("{r:p}"),
        };
        f.debug_struct("Stream")
            .field("raw", &name)
            .field("owned", &self.inner.owned)
            .field("device", &self.inner.device.map(|d| d.ordinal()))
            .field("thread", &self.inner.thread)
            .finish()
    }
}

impl PartialEq for Stream {
    /// Two `Stream`s are equal when they name the same queue: the same CUDA
    /// stream object, or the same pseudo-stream *of the same device* (the
    /// legacy default stream) *and thread* (the per-thread default stream).
    /// [`Stream::legacy`] made with device 0 current and one made with
    /// device 1 current are different queues, as are [`Stream::per_thread`]
    /// made on two threads.
    fn eq(&self, other: &Self) -> bool {
        same_queue(self.identity(), other.identity())
    }
}
impl Eq for Stream {}

/// The identity of a stream value: the raw handle, and for a pseudo-stream
/// the device and thread it was made for.
type Identity = (cudaStream_t, Option<Device>, Option<ThreadId>);

/// Whether two stream identities name the same queue (see `PartialEq`).
fn same_queue(a: Identity, b: Identity) -> bool {
    if kind_of(a.0) == Kind::Real || kind_of(b.0) == Kind::Real {
        return a.0 == b.0;
    }
    // Null and `cudaStreamLegacy` both name the legacy default stream.
    kind_of(a.0) == kind_of(b.0) && a.1 == b.1 && a.2 == b.2
}

/// Whether a stream made for `owner` (a per-thread default stream) may be
/// used from the thread `current`.
pub(crate) fn check_thread(what: &str, owner: Option<ThreadId>, current: ThreadId) -> Result<()> {
    match owner {
        Some(t) if t != current => Err(Error::WrongThread {
            what: what.to_string(),
            owner: format!("{t:?}"),
            current: format!("{current:?}"),
        }),
        _ => Ok(()),
    }
}

/// Check that `stream` may be used from the calling thread (not another
/// thread's per-thread default stream), and that work queued on it now
/// cannot join a capture it does not belong to (see [`Stream::check_queue`]).
///
/// # Errors
/// [`Error::WrongThread`] naming `what`; [`Error::CaptureUnsafe`].
pub(crate) fn check_stream_thread(what: &str, stream: &Stream) -> Result<QueueHold> {
    check_thread(what, stream.inner.thread, thread::current().id())?;
    stream.check_queue(what)
}

/// The capture part of the queueing rule, as logic (see
/// [`Stream::check_queue`]): `capturer` is the thread whose capture of the
/// stream is open, `foreign` the library owning the stream,
/// `foreign_capturing` whether the foreign stream is being captured (asked
/// only for foreign streams). Work on a foreign stream that is not
/// capturing is allowed inside a capture closure too (CUDA runs it; a
/// join through a captured event is refused by `Stream::wait_event`).
///
/// # Errors
/// [`Error::CaptureUnsafe`] naming `what`.
pub(crate) fn queue_rule(
    what: &str,
    capturer: Option<ThreadId>,
    current: ThreadId,
    foreign: Option<&'static str>,
    foreign_capturing: impl FnOnce() -> Result<bool>,
) -> Result<()> {
    use super::capture::{CaptureStatus, Hazard, capture_rule};
    if let Some(t) = capturer
        && t != current
    {
        return capture_rule(what, CaptureStatus::Active, &Hazard::OtherThreadsCapture);
    }
    if let Some(owner) = foreign
        && foreign_capturing()?
    {
        return capture_rule(what, CaptureStatus::Active, &Hazard::ForeignStream(owner));
    }
    Ok(())
}

impl Stream {
    fn wrap(raw: cudaStream_t, owned: bool) -> Self {
        Self::wrap_on(raw, owned, Device::current().ok())
    }

    /// A stream value for unit tests: not owned, no device (no CUDA call
    /// is made for it).
    #[cfg(test)]
    pub(crate) fn fake_for_tests(raw: usize) -> Self {
        Self::wrap_on(raw as cudaStream_t, false, None)
    }

    fn wrap_on(raw: cudaStream_t, owned: bool, device: Option<Device>) -> Self {
        Self::wrap_kept(raw, owned, device, None, None)
    }

    /// A stream value that also keeps `keep` alive until its last clone
    /// drops (the cudarc interop: a borrowed stream and its owner);
    /// `foreign` names a library that queues its own work on the stream
    /// (`"cudarc"`): such a stream is never captured by this crate.
    pub(crate) fn wrap_kept(
        raw: cudaStream_t,
        owned: bool,
        device: Option<Device>,
        keep: Option<Arc<dyn std::any::Any + Send + Sync>>,
        foreign: Option<&'static str>,
    ) -> Self {
        let thread = (kind_of(raw) == Kind::PerThread).then(|| thread::current().id());
        // The per-thread default stream is every library's on this thread
        // (cudarc's `per_thread_stream` is the same queue): other code may
        // capture it, so it is treated as theirs.
        let foreign = foreign.or_else(|| {
            (kind_of(raw) == Kind::PerThread).then_some(super::capture::PER_THREAD_SHARED)
        });
        Stream {
            inner: Arc::new(Inner {
                raw,
                owned,
                device,
                thread,
                keep,
                foreign,
                capturing: AtomicBool::new(false),
                marks: Mutex::new(Marks::default()),
                queuing: Arc::new(AtomicUsize::new(0)),
            }),
        }
    }

    /// How many clones of this stream value exist (tests of what keeps one).
    #[cfg(test)]
    pub(crate) fn clone_count(&self) -> usize {
        Arc::strong_count(&self.inner)
    }

    fn identity(&self) -> Identity {
        (self.inner.raw, self.inner.device, self.inner.thread)
    }

    /// The device the stream belongs to: the device current when it was
    /// created (or wrapped with [`from_raw`](Stream::from_raw)); for
    /// [`Stream::legacy`] and [`Stream::per_thread`], the device current
    /// when the value was made, whose queue it names. `None` when no
    /// device could be read then (no driver, no device): such a stream
    /// value can queue nothing.
    pub fn device(&self) -> Option<Device> {
        self.inner.device
    }

    /// For [`Stream::per_thread`], the thread whose default stream this
    /// value names; `None` for every other stream. Using such a value from
    /// another thread is refused ([`Error::WrongThread`]).
    pub fn thread(&self) -> Option<ThreadId> {
        self.inner.thread
    }

    /// Whether this is a pseudo-stream ([`Stream::legacy`],
    /// [`Stream::per_thread`], or the null stream), whose meaning depends
    /// on the current device (and thread).
    pub fn is_pseudo(&self) -> bool {
        kind_of(self.inner.raw) != Kind::Real
    }

    /// Check that the calling thread may queue work on this stream (a
    /// per-thread default stream only from its own thread), and make the
    /// stream's device current until the guard drops (one `cudaGetDevice`,
    /// and a `cudaSetDevice` only when another device is current).
    ///
    /// # Errors
    /// [`Error::WrongThread`] for another thread's per-thread stream;
    /// [`Error::Cuda`] when the device cannot be made current.
    pub(crate) fn enter(&self, what: &str) -> Result<DeviceGuard> {
        check_thread(what, self.inner.thread, thread::current().id())?;
        let hold = self.check_queue(what)?;
        Ok(self.enter_unchecked()?.holding(hold))
    }

    /// As [`enter`](Self::enter) for a call that queues nothing (a
    /// synchronization, a query): checked alike, but not counted as
    /// queueing, so a capture's beginning does not wait for it.
    pub(crate) fn enter_to_wait(&self, what: &str) -> Result<DeviceGuard> {
        check_thread(what, self.inner.thread, thread::current().id())?;
        drop(self.check_queue(what)?);
        self.enter_unchecked()
    }

    /// Make the stream's device current, with no thread or capture check
    /// (the capture scope itself, and the capture query).
    pub(crate) fn enter_unchecked(&self) -> Result<DeviceGuard> {
        match self.inner.device {
            Some(d) => d.guard(),
            None => Ok(DeviceGuard::unchanged()),
        }
    }

    /// The library that owns this borrowed stream and queues its own work
    /// on it (`Some("cudarc")` for `Stream::from_cudarc`;
    /// [`PER_THREAD_SHARED`](super::PER_THREAD_SHARED) for
    /// [`Stream::per_thread`], a queue every library on the thread shares);
    /// such a stream is never captured by this crate, the crate asks
    /// whether it is capturing before queueing on it, and it never waits
    /// for an event recorded inside one of the crate's captures.
    pub fn foreign_owner(&self) -> Option<&'static str> {
        self.inner.foreign
    }

    fn marks(&self) -> std::sync::MutexGuard<'_, Marks> {
        self.inner
            .marks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The thread whose [`Stream::capture`] of this stream is open.
    pub(crate) fn capturer(&self) -> Option<ThreadId> {
        if !self.inner.capturing.load(Ordering::SeqCst) {
            return None;
        }
        self.marks().capturer
    }

    /// Mark this thread's capture of the stream as open, then wait for the
    /// calls already queueing on it to return (see `Inner::queuing`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the stream (nothing changed) when
    /// a capture of this value is already open, or a [`Stream::scope`] of
    /// it is (its copies, queued or still to come, would join the graph
    /// while the scope waits for them as real work), or another call still
    /// queues on it after 1 s (the mark is cleared again).
    pub(crate) fn mark_capturer(&self) -> Result<()> {
        let mut m = self.marks();
        if m.capturer.is_some() {
            return check_capturable(self, true);
        }
        if m.scopes > 0 {
            return Err(Error::invalid(
                "stream",
                format!(
                    "has {} open Stream::scope(s) (their copies would join the capture); begin                      the capture after the scope returns",
                    m.scopes
                ),
                format!("{self:?}"),
            ));
        }
        m.capturer = Some(thread::current().id());
        self.inner.capturing.store(true, Ordering::SeqCst);
        drop(m);
        // Calls that passed their queueing check before the mark may still
        // be queueing: the capture begins only after they returned (later
        // ones see the mark and are refused).
        if self.wait_for_queuers(QUEUERS_WAIT) {
            return Ok(());
        }
        self.clear_capturer();
        Err(Error::invalid(
            "stream",
            format!(
                "has work being queued on it by another call that did not return within {} s \
                 (another thread, or a guard of `enter` held by this one); begin the capture \
                 when no other call uses the stream",
                QUEUERS_WAIT.as_secs()
            ),
            format!("{self:?}"),
        ))
    }

    /// Wait (yielding) until no call is queueing on this value, up to
    /// `limit`; whether none is.
    fn wait_for_queuers(&self, limit: Duration) -> bool {
        let start = Instant::now();
        while self.inner.queuing.load(Ordering::SeqCst) != 0 {
            if start.elapsed() >= limit {
                return false;
            }
            thread::sleep(Duration::from_micros(50));
        }
        true
    }

    /// Clear the mark of [`mark_capturer`](Self::mark_capturer).
    pub(crate) fn clear_capturer(&self) {
        let mut m = self.marks();
        m.capturer = None;
        self.inner.capturing.store(false, Ordering::SeqCst);
    }

    /// Count an open [`Stream::scope`] of this value until the returned
    /// value drops.
    ///
    /// # Errors
    /// [`Error::CaptureUnsafe`] naming `what` (nothing counted) while a
    /// [`Stream::capture`] of this value is open.
    pub(crate) fn open_scope(&self, what: &str) -> Result<OpenScope<'_>> {
        use super::capture::{CaptureStatus, Hazard, capture_rule};
        let mut m = self.marks();
        if m.capturer.is_some() {
            capture_rule(what, CaptureStatus::Active, &Hazard::HostSync)?;
        }
        m.scopes = m.scopes.saturating_add(1);
        Ok(OpenScope(self))
    }

    /// Before queueing work (or a synchronization) on the stream: refuse
    /// ([`Error::CaptureUnsafe`]) when another thread's [`Stream::capture`]
    /// of it is open (the work would silently join that graph: the runtime
    /// allows it in global mode, this crate does not), and, for a stream
    /// another library owns (cudarc), while the owner captures it (the
    /// crate's work would enter a graph the owner may launch safely after
    /// the memory is gone). Costs an atomic load; a capture query only for
    /// foreign streams (the legacy stream's implicit-capture answer counts
    /// as capturing, typed, and the thread's last error is reset).
    ///
    /// # Errors
    /// [`Error::CaptureUnsafe`]; [`Error::Cuda`] from the query.
    pub(crate) fn check_queue(&self, what: &str) -> Result<QueueHold> {
        // Counted before the mark is read (both sequentially consistent,
        // as the mark's store and the count's load in `mark_capturer`):
        // either this call sees the mark, or the capture waits for it.
        let hold = QueueHold::count(&self.inner.queuing);
        queue_rule(
            what,
            self.capturer(),
            thread::current().id(),
            self.inner.foreign,
            // A value with no device (none could be read when it was made)
            // is asked too once one can be read now: its work goes to the
            // device current then. With none at all, nothing is capturing
            // and its calls fail typed later, as before.
            || match self.inner.device {
                Some(_) => self.foreign_capture_refused(what),
                None if Device::current().is_ok() => self.foreign_capture_refused(what),
                None => Ok(false),
            },
        )?;
        Ok(hold)
    }

    /// Whether this crate's work on this foreign stream is refused because
    /// the stream is capturing: not when the capture is an owned capture
    /// the calling thread began (`CudarcStream::begin_owned_capture`),
    /// typed `OtherThreadsCapture` when another thread's owned capture is
    /// open, refused (`true`) for any other capture (cudarc's own).
    fn foreign_capture_refused(&self, what: &str) -> Result<bool> {
        let capturing = super::capture::implicit_is_capturing(self.capture_status())?;
        super::owned_capture::foreign_rule(what, capturing.is_capturing(), || {
            // A failed id query is not the owned capture's id: refused.
            super::owned_capture::owner_of(self.owned_key(), || self.capture_id().ok().flatten())
        })
    }

    /// This stream's key in the registry of owned captures.
    pub(crate) fn owned_key(&self) -> super::owned_capture::Key {
        (
            self.inner.raw as usize,
            self.inner.device.map(|d| d.ordinal()),
            self.inner.thread,
        )
    }

    /// A new stream on the current device, with default flags (it
    /// synchronizes with the legacy default stream).
    ///
    /// # Errors
    /// [`Error::NoDevice`](crate::Error::NoDevice) when there is no usable
    /// device; [`Error::Cuda`](crate::Error::Cuda) when the runtime refuses.
    #[doc(alias = "cudaStreamCreate")]
    pub fn new() -> Result<Self> {
        Self::with_flags(StreamFlags::DEFAULT)
    }

    /// A new non-blocking stream on the current device. Work on it does not
    /// wait for the legacy default stream, and synchronous copies (which run
    /// on the legacy default stream) do not wait for it: synchronize it before
    /// a synchronous copy reads what it wrote.
    ///
    /// # Errors
    /// As [`Stream::new`].
    pub fn non_blocking() -> Result<Self> {
        Self::with_flags(StreamFlags::NON_BLOCKING)
    }

    /// A new stream on the current device with `flags`.
    ///
    /// # Errors
    /// As [`Stream::new`].
    #[doc(alias = "cudaStreamCreateWithFlags")]
    pub fn with_flags(flags: StreamFlags) -> Result<Self> {
        let rt = check::cudart()?;
        let mut raw: cudaStream_t = ptr::null_mut();
        // SAFETY: `raw` is a valid, writable out-pointer; flags are plain bits
        // the runtime validates.
        unsafe { cuda_call!(rt, cudaStreamCreateWithFlags(&mut raw, flags.0)) }?;
        Ok(Self::wrap(raw, true))
    }

    /// The legacy default stream (`cudaStreamLegacy`, "stream 0") *of the
    /// device current now*: the value records that device
    /// ([`device`](Stream::device)), and work queued through it (by this
    /// crate) runs there whatever device is current later. Making it calls
    /// only `cudaGetDevice`, so it works (as a value) with no device at all
    /// (its device is then `None`).
    pub fn legacy() -> Self {
        Self::wrap(cudart::cudaStreamLegacy, false)
    }

    /// The per-thread default stream (`cudaStreamPerThread`) *of the calling
    /// thread, on the device current now*: the value records both
    /// ([`thread`](Stream::thread), [`device`](Stream::device)). It is still
    /// `Send`, but using it from another thread (queueing work, waiting for
    /// it, a handle bound to it) is refused with [`Error::WrongThread`]:
    /// there it would name that thread's queue, unordered with this one.
    ///
    /// It is one queue for every library on the thread (cudarc's
    /// `per_thread_stream`, candle's default stream), so the crate treats
    /// it as theirs ([`foreign_owner`](Stream::foreign_owner)): it is not
    /// captured ([`Stream::capture`] refuses it), work is refused while
    /// other code captures it (one `cudaStreamIsCapturing` per call), and
    /// it does not wait for an event recorded inside a capture.
    pub fn per_thread() -> Self {
        Self::wrap(cudart::cudaStreamPerThread, false)
    }

    /// Wrap a stream someone else owns. It is never destroyed by this crate.
    /// The device current now is recorded as the stream's device
    /// ([`device`](Stream::device)); use [`from_raw_on`](Stream::from_raw_on)
    /// to name another.
    ///
    /// # Safety
    /// `raw` must be a valid CUDA stream (or one of the special handles:
    /// null, `cudaStreamLegacy`, `cudaStreamPerThread`) of the device current
    /// now, and it must stay valid for as long as this `Stream`, any clone of
    /// it, or anything that keeps one (handles, stream-ordered buffers) is
    /// alive. No other code captures it while the crate queues work on it
    /// through this value (the crate asks the runtime only for streams it
    /// knows to be shared: [`Stream::per_thread`], and cudarc's streams
    /// wrapped with `CudarcStream::new`, which is how to wrap one), or that
    /// capture's graph is launched only while everything the crate's work
    /// uses is alive.
    ///
    /// Two values wrapped from one raw stream (and a value wrapped from a
    /// stream this crate created) share no capture marks, open-scope counts
    /// or queueing counts: the refusals of [`Stream::capture`] and
    /// [`Stream::scope`] see only the value they are called on and its
    /// clones. Queueing through one value while capturing through another
    /// adds that work to the graph, as the runtime does.
    pub unsafe fn from_raw(raw: cudaStream_t) -> Self {
        Self::wrap(raw, false)
    }

    /// As [`from_raw`](Stream::from_raw), for a stream of `device` (which
    /// need not be current).
    ///
    /// # Safety
    /// As [`from_raw`](Stream::from_raw), with `device` in place of the
    /// current device.
    pub unsafe fn from_raw_on(raw: cudaStream_t, device: Device) -> Self {
        Self::wrap_on(raw, false, Some(device))
    }

    /// Take ownership of a stream: it is destroyed when the last clone drops.
    /// Its device is recorded as in [`from_raw`](Stream::from_raw).
    ///
    /// # Safety
    /// `raw` must be a stream created by `cudaStreamCreate*` on the device
    /// current now, that nobody else destroys or uses after this `Stream`
    /// (and its clones) are gone.
    pub unsafe fn from_raw_owned(raw: cudaStream_t) -> Self {
        Self::wrap(raw, true)
    }

    /// The raw handle, for calling CUDA directly. Valid while `self` (or a
    /// clone) lives.
    pub fn as_raw(&self) -> cudaStream_t {
        self.inner.raw
    }

    /// Whether this crate destroys the stream when the last clone drops.
    pub fn is_owned(&self) -> bool {
        self.inner.owned
    }

    /// The stream's flags (`cudaStreamGetFlags`), e.g. whether it is
    /// [`StreamFlags::NON_BLOCKING`].
    ///
    /// # Errors
    /// [`Error::Cuda`](crate::Error::Cuda) when the runtime refuses.
    #[doc(alias = "cudaStreamGetFlags")]
    pub fn flags(&self) -> Result<StreamFlags> {
        let _on = self.enter_to_wait("reading a stream's flags")?;
        let rt = check::cudart()?;
        let mut bits: std::ffi::c_uint = 0;
        // SAFETY: `raw` is a valid stream (see `synchronize`); `bits` is a
        // valid, writable out-pointer.
        unsafe { cuda_call!(rt, cudaStreamGetFlags(self.inner.raw, &mut bits)) }?;
        Ok(StreamFlags(bits))
    }

    /// Whether synchronous (legacy default stream) work is *not* ordered
    /// with this stream: a stream created non-blocking. The legacy and
    /// per-thread default streams are ordered with it.
    pub(crate) fn is_non_blocking(&self) -> Result<bool> {
        let r = self.inner.raw;
        if r.is_null() || r == cudart::cudaStreamLegacy || r == cudart::cudaStreamPerThread {
            return Ok(false);
        }
        Ok(self.flags()?.bits() & StreamFlags::NON_BLOCKING.bits() != 0)
    }

    /// Block the calling thread until all work queued on the stream is done.
    ///
    /// # Errors
    /// [`Error::Cuda`](crate::Error::Cuda), also for failures of earlier
    /// asynchronous work on the stream;
    /// [`Error::CaptureUnsafe`](crate::Error::CaptureUnsafe) inside a
    /// [`Stream::capture`] closure.
    #[doc(alias = "cudaStreamSynchronize")]
    pub fn synchronize(&self) -> Result<()> {
        super::capture::forbid_in_capture_scope("Stream::synchronize", super::Hazard::HostSync)?;
        let _on = self.enter_to_wait("synchronizing a stream")?;
        let rt = check::cudart()?;
        // SAFETY: `raw` is a valid stream (owned, or guaranteed by `from_raw`'s contract).
        unsafe { cuda_call!(rt, cudaStreamSynchronize(self.inner.raw)) }
    }

    /// Whether all work queued on the stream is done (does not block).
    ///
    /// # Errors
    /// [`Error::Cuda`](crate::Error::Cuda) for failures other than "not ready";
    /// [`Error::CaptureUnsafe`](crate::Error::CaptureUnsafe) inside a
    /// [`Stream::capture`] closure (a query of a capturing stream would
    /// invalidate the capture).
    #[doc(alias = "cudaStreamQuery")]
    pub fn query(&self) -> Result<bool> {
        super::capture::forbid_in_capture_scope("Stream::query", super::Hazard::HostSync)?;
        let _on = self.enter_to_wait("querying a stream")?;
        let rt = check::cudart()?;
        // SAFETY: `raw` is a valid stream (see `synchronize`).
        let st = unsafe { rt.cudaStreamQuery(self.inner.raw) }?;
        if st == cudaError::cudaErrorNotReady {
            return Ok(false);
        }
        check::cuda_status(rt, "cudaStreamQuery", st)?;
        Ok(true)
    }

    /// Destroy the stream now if this is the last clone and it is owned,
    /// reporting the runtime's status; otherwise just drop this clone.
    ///
    /// # Errors
    /// [`Error::Cuda`](crate::Error::Cuda) from `cudaStreamDestroy`.
    #[doc(alias = "cudaStreamDestroy")]
    pub fn destroy(self) -> Result<()> {
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) if inner.owned && !inner.raw.is_null() => {
                inner.owned = false; // Drop must not destroy it again.
                let rt = check::cudart()?;
                // SAFETY: we own `raw` and this was the last reference to it.
                unsafe { cuda_call!(rt, cudaStreamDestroy(inner.raw)) }
            }
            _ => Ok(()),
        }
    }
}

impl Device {
    /// A new (blocking) stream on this device. Makes the device current first.
    ///
    /// # Errors
    /// [`Error::Cuda`] when the stream cannot be created.
    pub fn create_stream(&self) -> Result<Stream> {
        self.set_current()?;
        Stream::new()
    }

    /// A new non-blocking stream on this device (see [`Stream::non_blocking`]).
    ///
    /// # Errors
    /// [`Error::Cuda`] when the stream cannot be created.
    pub fn create_non_blocking_stream(&self) -> Result<Stream> {
        self.set_current()?;
        Stream::non_blocking()
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;

/// Whether `stream` may be captured: refuses the legacy default stream
/// (the runtime cannot capture it) and a stream already capturing.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the stream.
pub(crate) fn check_capturable(stream: &Stream, capturing: bool) -> Result<()> {
    if stream.foreign_owner() == Some(super::capture::PER_THREAD_SHARED) {
        return Err(Error::invalid(
            "stream",
            "must not be the per-thread default stream: it is shared with every library on \
             this thread (cudarc's per_thread_stream, candle's default stream), whose own \
             allocations, frees and event records on it would become graph nodes behind its \
             ordinary values; capture a stream this crate created and join it to the \
             per-thread stream with events outside the capture",
            format!("{stream:?}"),
        ));
    }
    if let Some(owner) = stream.foreign_owner() {
        return Err(Error::invalid(
            "stream",
            format!(
                "must not be a {owner} stream: {owner}'s own allocations, frees and event \
                 records on it would become graph nodes behind its ordinary values; capture a \
                 stream this crate created and join it to the {owner} stream with events \
                 outside the capture"
            ),
            format!("{stream:?} (owned by {owner})"),
        ));
    }
    if stream.is_pseudo() && stream.thread().is_none() {
        return Err(Error::invalid(
            "stream",
            "the legacy default stream cannot be captured; capture a created stream",
            format!("{stream:?}"),
        ));
    }
    if capturing {
        return Err(Error::invalid(
            "stream",
            "is already capturing (captures do not nest); end the outer capture first",
            format!("{stream:?}"),
        ));
    }
    Ok(())
}
