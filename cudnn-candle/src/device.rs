//! Per-device state: the cuDNN handle bound to candle's stream (one per
//! thread and stream), the device's planning target, and the plan cache
//! shared by every call (so a decode loop plans once per shape).

use std::cell::RefCell;
use std::sync::{Arc, Mutex, OnceLock};

use candle_core::CudaDevice;
use cudarc::driver::CudaStream;
use cudnn::blas::LtHandle;
use cudnn::dnn::Handle;
use cudnn::graph::{Graph, IoSignature, Plan, PlanCache, Policy, Target};
use cudnn::interop::CudarcStream;
use cudnn::{Error, Result};

/// How many plans the cache keeps (attention plans are runtime-compiled:
/// the cache should hold the working set, see `PlanCache`'s docs).
pub const PLAN_CAPACITY: usize = 512;

/// The plans of every call of this crate, keyed by graph, target, policy.
pub fn plans() -> &'static PlanCache {
    static PLANS: OnceLock<PlanCache> = OnceLock::new();
    PLANS.get_or_init(|| PlanCache::new(PLAN_CAPACITY))
}

/// The target of device `ordinal` (its properties read once).
fn target(ordinal: usize) -> Result<Target> {
    static TARGETS: OnceLock<Mutex<Vec<(usize, Target)>>> = OnceLock::new();
    let m = TARGETS.get_or_init(|| Mutex::new(Vec::new()));
    let found = m
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|(o, _)| *o == ordinal)
        .map(|(_, t)| t.clone());
    if let Some(t) = found {
        return Ok(t);
    }
    let i = i32::try_from(ordinal)
        .map_err(|_| Error::invalid("device ordinal", "must fit i32", ordinal))?;
    let t = Target::device(i)?;
    m.lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((ordinal, t.clone()));
    Ok(t)
}

/// The cached plan of `graph` for device `ordinal`.
///
/// # Errors
/// The device's properties, the graph, planning.
pub fn plan(ordinal: usize, graph: &Graph) -> Result<Arc<Plan>> {
    let p = plans().get_or_build(graph, &target(ordinal)?, &Policy::default())?;
    note_workspace(ordinal, p.workspace_size());
    Ok(p)
}

/// The largest workspace of a plan fetched for each device (by ordinal):
/// what a capture reserves for its handle before it begins.
fn workspaces() -> &'static Mutex<Vec<(usize, usize)>> {
    static WS: OnceLock<Mutex<Vec<(usize, usize)>>> = OnceLock::new();
    WS.get_or_init(|| Mutex::new(Vec::new()))
}

fn note_workspace(ordinal: usize, bytes: usize) {
    let mut m = workspaces().lock().unwrap_or_else(|p| p.into_inner());
    match m.iter_mut().find(|(o, _)| *o == ordinal) {
        Some((_, w)) => *w = (*w).max(bytes),
        None => m.push((ordinal, bytes)),
    }
}

/// The largest workspace (bytes) of the plans fetched so far for device
/// `ordinal` (0 before any).
pub fn max_workspace(ordinal: usize) -> usize {
    workspaces()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|(o, _)| *o == ordinal)
        .map_or(0, |(_, w)| *w)
}

/// Check that output `name` of `plan` is packed BSHD with `dims` (`[B, H,
/// S, D]`): the buffer this crate allocates for it is candle-contiguous
/// `(b, s, h, d)`. A refusal is typed (never a wrong read of the result).
///
/// # Errors
/// Unknown name, other dims or strides.
pub fn expect_layout(
    io: &IoSignature,
    name: &str,
    dims: [i64; 4],
    strides: [i64; 4],
) -> Result<()> {
    let t = io
        .tensors
        .iter()
        .find(|t| t.name == name)
        .ok_or_else(|| Error::invalid("attention plan tensor", "must exist", name))?;
    if t.spec.dims() != dims || t.spec.strides() != strides {
        return Err(Error::mismatch(
            format!("attention plan `{name}` dims / strides (candle-contiguous)"),
            format!("{dims:?} / {strides:?}"),
            format!("{:?} / {:?}", t.spec.dims(), t.spec.strides()),
        ));
    }
    Ok(())
}

struct Bound {
    stream: CudarcStream,
    /// Made on first use (a thread that only runs GEMMs makes none).
    handle: Option<Handle>,
    /// The cuBLASLt handle (GEMMs), made on first use.
    lt: Option<LtHandle>,
}

thread_local! {
    /// This thread's handles, by candle (context, stream). Each keeps its
    /// stream alive.
    static HANDLES: RefCell<Vec<((usize, usize), Bound)>> = const { RefCell::new(Vec::new()) };
}

/// Run `f` with the cuDNN handle bound to `dev`'s stream (candle's; made
/// on first use on this thread, kept for the thread's life) and the
/// device's ordinal, with cudarc's context current on this thread.
///
/// # Errors
/// Binding the stream, creating the handle, `f`'s.
pub fn with_handle<R>(
    dev: &CudaDevice,
    f: impl FnOnce(&CudarcStream, &mut Handle, usize) -> candle_core::Result<R>,
) -> candle_core::Result<R> {
    with_bound(dev, |b, ordinal| {
        let handle = match &mut b.handle {
            Some(h) => h,
            slot => slot.insert(Handle::new(&b.stream).map_err(to_candle)?),
        };
        f(&b.stream, handle, ordinal)
    })
}

/// Run `f` with the cuBLASLt handle bound to `dev`'s stream (candle's;
/// made on first use on this thread, kept for the thread's life), as
/// [`with_handle`].
///
/// # Errors
/// Binding the stream, creating the handle, `f`'s.
pub fn with_lt<R>(
    dev: &CudaDevice,
    f: impl FnOnce(&CudarcStream, &LtHandle) -> candle_core::Result<R>,
) -> candle_core::Result<R> {
    with_bound(dev, |b, _| {
        let lt = match &mut b.lt {
            Some(h) => h,
            slot => slot.insert(LtHandle::new(&b.stream).map_err(to_candle)?),
        };
        f(&b.stream, lt)
    })
}

fn with_bound<R>(
    dev: &CudaDevice,
    f: impl FnOnce(&mut Bound, usize) -> candle_core::Result<R>,
) -> candle_core::Result<R> {
    // Inside a capture of this crate, the calls that go through here
    // would run now, on candle's stream, outside the graph (and free their
    // per-call memory): refused before anything is queued.
    crate::capture::refuse_inside(
        "conv2d, norm, GEMM, backward, varlen, KV-cache or paged call",
        "it runs on candle's stream with per-call memory; the capture holds dense attention \
         forwards only",
    )?;
    let cs: Arc<CudaStream> = dev.cuda_stream();
    // cudarc gives every context's per-thread default stream the same
    // handle (0x2): the context tells them apart.
    let key = (cs.context().cu_ctx() as usize, cs.cu_stream() as usize);
    let ordinal = cs.context().ordinal();
    // Taken out while `f` runs (no borrow held across it), put back after.
    let mut bound = match HANDLES.with(|h| {
        let mut h = h.borrow_mut();
        h.iter()
            .position(|(k, _)| *k == key)
            .map(|i| h.swap_remove(i).1)
    }) {
        Some(b) => b,
        None => Bound {
            stream: CudarcStream::new(&cs).map_err(to_candle)?,
            handle: None,
            lt: None,
        },
    };
    let r = bound
        .stream
        .bind_to_thread()
        .map_err(to_candle)
        .and_then(|()| f(&mut bound, ordinal));
    HANDLES.with(|h| h.borrow_mut().push((key, bound)));
    r
}

/// The crate's error as candle's (`candle_core::Error::Cuda`, which keeps
/// the typed [`cudnn::Error`]: `downcast_ref` it).
pub fn to_candle(e: Error) -> candle_core::Error {
    candle_core::Error::Cuda(Box::new(e))
}

/// `?` for the crate's results inside candle code.
pub trait IntoCandle<T> {
    /// Convert the error.
    fn c(self) -> candle_core::Result<T>;
}

impl<T> IntoCandle<T> for Result<T> {
    fn c(self) -> candle_core::Result<T> {
        self.map_err(to_candle)
    }
}
