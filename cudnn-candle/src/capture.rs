//! A capture-safe path: record this crate's attention calls into a CUDA
//! graph once and replay it ([`capture`], [`CapturedStep::launch`]).
//!
//! ```no_run
//! # fn main() -> candle_core::Result<()> {
//! use candle_core::{DType, Device, Tensor};
//! let dev = Device::new_cuda(0)?;
//! let q = Tensor::zeros((1, 1, 8, 64), DType::BF16, &dev)?;
//! let k = Tensor::zeros((1, 256, 8, 64), DType::BF16, &dev)?;
//! // Once eagerly: plans the graph and sizes the workspace.
//! cudnn_candle::flash_attn(&q, &k, &k, 0.125, true)?;
//! let (mut step, o) =
//!     cudnn_candle::capture::capture(&dev, || cudnn_candle::flash_attn(&q, &k, &k, 0.125, true))?;
//! for _ in 0..100 {
//!     // New values into the captured inputs, in place (candle's stream) ...
//!     q.slice_set(&Tensor::ones((1, 1, 8, 64), DType::BF16, &dev)?, 0, 0)?;
//!     step.launch()?; // ... then the replay writes `o` (candle's stream).
//! }
//! # let _ = o; Ok(()) }
//! ```
//!
//! To capture a **whole** step, candle's own ops included, in one graph of
//! candle's stream, use [`capture_step`] (`unsafe`: candle's memory is the
//! caller's to keep; see [its module](step)).
//!
//! # What goes wrong without it
//! Every entry point refuses, typed, while candle's stream is capturing,
//! for three reasons:
//! - per-call memory (the cuDNN handle's workspace, copies of unaligned
//!   inputs, varlen offsets, the paged block table on the device) is freed
//!   or reused at the end of the call while a captured graph still holds
//!   its address: a replay would touch freed memory (the soundness rule of
//!   `cudnn`'s `CudaGraphExec::launch`);
//! - host reads (varlen `seqlens`, the KV cache's lengths, the check of a
//!   paged block table) synchronize, which a capture forbids;
//! - `cudnn` queues nothing on a cudarc stream (candle's) while cudarc
//!   captures it, since cudarc's `CudaGraph::launch` is safe and would
//!   replay this crate's work after its memory is gone; a graph of
//!   candle's stream can therefore not hold this crate's calls.
//!
//! # The design
//! [`capture`] runs the caller's closure while a capture of a stream of
//! **this crate** (a new non-blocking `cudnn` stream on candle's device,
//! `Stream::capture`, thread-local mode) is open, and while it runs:
//! - the attention entry points of this thread for that device
//!   ([`flash_attn_with`](crate::flash_attn_with) and the dense functions
//!   built on it) queue their cuDNN work on that stream, with a cuDNN
//!   handle of the capture's own (its workspace reserved before the
//!   capture, at the largest a plan of this process has needed on that
//!   device: run the step once eagerly first), so the work becomes graph
//!   nodes; each step holds its own such workspace for as long as it
//!   lives (n steps hold n of them; a workspace shared by the steps of
//!   one device is a possible later improvement);
//! - each such call **keeps** what the graph addresses: q, k, v as bound,
//!   the output it returns, the ALiBi slopes, score bias and sinks, the
//!   plan (a `Tensor` clone keeps candle's storage; an `Arc` the plan);
//! - a call that would copy an input first (q, k, v, and the ALiBi
//!   slopes and sinks too: f16 / bf16 sinks are widened to an f32 copy,
//!   so give f32 ones; the copy would be made once, now, and a replay
//!   would read the stale copy), read device data on the
//!   host, run a backward or a training forward, or use another device is
//!   refused, typed ([`cudnn::Error::CaptureUnsafe`]), before it queues
//!   anything; so are convolution, norms, GEMM and varlen calls (this
//!   version), and the eager [`crate::flash_attn_kvcache`] and
//!   [`crate::flash_attn_paged`] (their lengths and table are device
//!   tensors read on the host);
//! - a KV-cache decode step is captured with [`flash_attn_kvcache`] (this
//!   module's), which takes the lengths on the host: they live in two
//!   small device buffers the step owns, zero (in range) until the first
//!   launch; [`CapturedStep::set_cache_seqlens`] checks new lengths as the
//!   eager call does (at most the capacity; causal: at least the query
//!   count) and the next launch writes them on candle's stream before the
//!   graph, so cuDNN never reads a length the crate did not check;
//! - a paged decode step likewise, with [`flash_attn_paged`] (this
//!   module's): the block table and lengths given on the host live in
//!   device buffers the step owns (zero, block 0 and no key, until the
//!   first launch); [`CapturedStep::update_block_table`] checks a new
//!   table and lengths with the eager call's own checks for the captured
//!   shapes (every entry in `0..num_blocks`, those past a sequence's
//!   length included; every length at most the keys a row covers; the
//!   same config) and the next launch writes them before the graph;
//! - candle's own ops in the closure run now, on candle's stream, and are
//!   **not** part of the graph: the graph holds this crate's calls only.
//! - candle's stream itself must not be captured (cudarc's
//!   `begin_capture`, relaxed mode included, or another library's):
//!   [`capture`], each entry point inside it (before it allocates the
//!   output or any buffer on candle's stream, whose allocations would be
//!   memory of that other graph) and [`CapturedStep::launch`] ask, and
//!   refuse it, typed (`CaptureUnsafe`).
//!
//! A call that failed after queueing work poisons the capture: [`capture`]
//! then returns the error and drops the graph (never launched) before
//! anything kept. Planning during the capture touches no stream (a plan
//! is looked up, or built for the device's target); a workspace larger
//! than the reserve is refused by `cudnn` (typed `CaptureUnsafe`).
//!
//! [`capture`] returns a [`CapturedStep`] that **owns** the executable
//! graph and everything kept; [`CapturedStep::launch`] replays it on
//! candle's stream, so it is ordered with candle's work before (writes of
//! new inputs, e.g. `slice_set`) and after (reads of the outputs) in
//! stream order. A step moved to another thread cannot launch there
//! (candle's default stream is per thread: typed `WrongThread`), but may
//! be dropped there, where cudarc would free the kept tensors on that
//! thread's stream, unordered with the launches; so an event is recorded
//! after each launch (and each launch waits for the previous one's), and
//! dropping the step waits, on the host, for that event (bounded: the
//! work already queued, never later work; the whole device if an event
//! record had failed), then drops the
//! graph, the workspace, the plans and the kept tensors, so nothing kept
//! is freed while a launch may still run, whichever thread drops it; if
//! the wait fails, they are leaked instead.
//!
//! Limits: a cudarc context that tracks events across several streams
//! (`is_managing_stream_synchronization`) is refused (the launches' writes
//! would be invisible to cudarc's tracking); the ALiBi slopes and sinks
//! are read by each launch from the kept buffers, but a score bias built
//! from them (calls cuDNN's ALiBi cannot serve) is computed once, at
//! capture; `(batch, heads)` slopes are refused (read on the host).

mod kvcache;
mod paged;
mod rawbuf;
mod run;
pub mod step;

use std::cell::RefCell;
use std::sync::Arc;

use candle_core::{CudaDevice, Tensor};
use cudnn::Error;
use cudnn::dnn::Handle;
use cudnn::graph::Plan;
use cudnn::interop::CudarcStream;
use cudnn::runtime::{CaptureMode, CudaGraphExec};

use crate::device::{IntoCandle, to_candle};

pub(crate) use kvcache::KvLens;
use kvcache::Slot;
pub use kvcache::{LensSlot, flash_attn_kvcache};
pub(crate) use paged::PagedCheck;
pub use paged::flash_attn_paged;
pub(crate) use run::forward;
pub use step::{CapturedCandleStep, capture_step};

/// The bookkeeping of one capture, free of the device (unit-tested): the
/// plans and tensors kept, the admitted call in progress, the poison.
#[derive(Debug)]
pub struct Ledger<P, T> {
    plans: Vec<P>,
    kept: Vec<T>,
    /// A call admitted by an entry point and not yet kept: `Some(ran)`,
    /// `ran` once its work was queued.
    pending: Option<bool>,
    calls: usize,
    poison: Option<String>,
}

impl<P, T> Default for Ledger<P, T> {
    fn default() -> Self {
        Self {
            plans: Vec::new(),
            kept: Vec::new(),
            pending: None,
            calls: 0,
            poison: None,
        }
    }
}

/// What a finished capture keeps.
#[derive(Debug)]
pub struct Kept<P, T> {
    /// The plans whose work is in the graph.
    pub plans: Vec<P>,
    /// The tensors the graph addresses.
    pub tensors: Vec<T>,
    /// How many calls the graph holds.
    pub calls: usize,
}

impl<P, T> Ledger<P, T> {
    /// An entry point starts a call `op` that may run inside the capture.
    ///
    /// # Errors
    /// A call already admitted (`op` nested in another), or a poisoned
    /// capture (nothing more is queued).
    pub fn admit(&mut self, op: &str) -> cudnn::Result<()> {
        if let Some(p) = &self.poison {
            return Err(refusal(op, format!("the capture is poisoned: {p}")));
        }
        if self.pending.is_some() {
            return Err(refusal(op, "another call of this crate is in progress"));
        }
        self.pending = Some(false);
        Ok(())
    }

    /// The admitted call is about to queue work with `plan`.
    ///
    /// # Errors
    /// No call admitted (an internal path that would not keep its
    /// tensors: refused before anything is queued).
    pub fn will_run(&mut self, op: &str) -> cudnn::Result<()> {
        match self.pending {
            Some(false) => {
                self.pending = Some(true);
                Ok(())
            }
            Some(true) => Err(refusal(op, "a second run inside one admitted call")),
            None => Err(refusal(
                op,
                "a call the capture does not admit (it would not keep its tensors)",
            )),
        }
    }

    /// The admitted call queued its work with `plan`.
    pub fn ran(&mut self, plan: P) {
        self.plans.push(plan);
    }

    /// The admitted call returned: keep `tensors`, close the call.
    pub fn keep(&mut self, tensors: impl IntoIterator<Item = T>) {
        self.kept.extend(tensors);
        if self.pending.take() == Some(true) {
            self.calls = self.calls.saturating_add(1);
        }
    }

    /// The admitted call ended without [`keep`](Self::keep) (an error): if
    /// it had queued work, the capture is poisoned.
    pub fn abandon(&mut self, why: &str) {
        if self.pending.take() == Some(true) {
            self.poison(why);
        }
    }

    /// Poison the capture (work was queued whose memory is not kept).
    pub fn poison(&mut self, why: &str) {
        if self.poison.is_none() {
            self.poison = Some(why.to_string());
        }
    }

    /// Whether the capture is poisoned.
    pub fn poisoned(&self) -> Option<&str> {
        self.poison.as_deref()
    }

    /// The end of the capture.
    ///
    /// # Errors
    /// Poisoned, or a call still in progress (poisoned if it ran); what is
    /// kept is dropped with the error, after the caller dropped the graph.
    pub fn finish(mut self) -> cudnn::Result<Kept<P, T>> {
        self.abandon("a call was still in progress at the end of the capture");
        if let Some(p) = self.poison {
            return Err(Error::Unsupported {
                what: format!("the captured step: {p}"),
                needs: Some("a capture whose every call completed".to_string()),
            });
        }
        Ok(Kept {
            plans: self.plans,
            tensors: self.kept,
            calls: self.calls,
        })
    }
}

/// The typed refusal of `op` inside a capture.
pub(crate) fn refusal(op: &str, hazard: impl Into<String>) -> Error {
    Error::CaptureUnsafe {
        op: format!("cudnn-candle {op} inside cudnn_candle::capture"),
        hazard: hazard.into(),
        before: "make the call outside the capture (or give inputs usable as they are: \
                 contiguous, 16-byte aligned, on the capture's device)"
            .to_string(),
    }
}

/// The open capture of this thread.
struct Active {
    /// [`capture_step`]: the owned capture of candle's stream itself (the
    /// handle below is bound to candle's stream); `None` for [`capture`].
    /// First, so it is dropped first: the capture ends (and its graph,
    /// never instantiated, is destroyed) before anything below is freed.
    owned: Option<cudnn::interop::OwnedCapture>,
    /// This capture's number (tags its [`LensSlot`]s).
    id: u64,
    /// candle's context and stream (as numbers) of the capture's device.
    ctx: usize,
    stream: usize,
    /// candle's stream itself: asked, before each call queues or allocates
    /// anything, whether cudarc is capturing it.
    candle: CudarcStream,
    ordinal: usize,
    device: cudnn::runtime::Device,
    /// Bound to the capturing stream; its workspace is reserved.
    handle: Handle,
    ledger: Ledger<Arc<Plan>, Tensor>,
    /// The KV-cache lengths the graph reads, by [`LensSlot`].
    slots: Vec<Slot>,
    /// The slot of the last call (taken by its entry point).
    last_slot: Option<usize>,
}

/// Before a call of the open capture queues or allocates anything on
/// candle's stream: for [`capture`], refused while candle's stream is
/// captured by anyone ([`candle_idle`]); for [`capture_step`], candle's
/// stream must still be capturing (the step's own capture: cudnn's
/// queueing check refuses, at the enqueue, a capture that is not the one
/// this thread owns).
fn candle_ready(a: &Active, op: &str) -> cudnn::Result<()> {
    if a.owned.is_none() {
        return candle_idle(&a.candle, op);
    }
    if !a.candle.stream().capture_status()?.is_capturing() {
        return Err(refusal(
            op,
            "candle's stream is no longer capturing (its capture was ended by other code)",
        ));
    }
    Ok(())
}

thread_local! {
    static ACTIVE: RefCell<Option<Active>> = const { RefCell::new(None) };
}

/// Whether a capture of this crate is open on this thread.
pub fn is_capturing() -> bool {
    // Borrowed mutably only by this module while a capture is open.
    ACTIVE.with(|a| a.try_borrow().map_or(true, |a| a.is_some()))
}

/// Refuse `op` (a call that cannot run inside a capture) while a capture
/// is open on this thread, before it queues anything.
pub(crate) fn refuse_inside(op: &str, why: &str) -> candle_core::Result<()> {
    if is_capturing() {
        return Err(to_candle(refusal(op, why)));
    }
    Ok(())
}

fn with_active<R>(f: impl FnOnce(&mut Active) -> R) -> Option<R> {
    ACTIVE.with(|a| a.borrow_mut().as_mut().map(f))
}

/// An entry point's call inside a capture: keeps its tensors when it
/// returns, or poisons the capture if it queued work and failed.
#[must_use]
pub(crate) struct Admit {
    _not_send: std::marker::PhantomData<*const ()>,
    done: bool,
}

/// Admit `op` when a capture is open on this thread (`None` otherwise).
pub(crate) fn admit(op: &str) -> candle_core::Result<Option<Admit>> {
    match with_active(|a| {
        candle_ready(a, op)?;
        a.ledger.admit(op)
    }) {
        None => Ok(None),
        Some(r) => r.c().map(|()| {
            Some(Admit {
                _not_send: std::marker::PhantomData,
                done: false,
            })
        }),
    }
}

impl Admit {
    /// The call returned `out` after binding `ins`: keep them all.
    pub(crate) fn keep<'a>(mut self, ts: impl IntoIterator<Item = &'a Tensor>) {
        let ts: Vec<Tensor> = ts.into_iter().cloned().collect();
        with_active(|a| a.ledger.keep(ts));
        self.done = true;
    }
}

impl Drop for Admit {
    fn drop(&mut self) {
        if !self.done {
            with_active(|a| a.ledger.abandon("a call failed after queueing its work"));
        }
    }
}

/// Refuse, typed, an input that the entry point would copy: the copy is
/// made once, now, and a replay would read it, not `original`.
pub(crate) fn no_copy(
    admit: &Option<Admit>,
    name: &str,
    original: &Tensor,
    bound: &Tensor,
) -> candle_core::Result<()> {
    if admit.is_some() && original.id() != bound.id() {
        return Err(to_candle(refusal(
            "attention",
            format!(
                "{name} would be copied first ({:?}, strides {:?}, start {}): a replay would read \
                 the copy made at capture, not {name}",
                original.dtype(),
                original.stride(),
                original.layout().start_offset()
            ),
        )));
    }
    Ok(())
}

/// [`no_copy`] for the side inputs: the ALiBi slopes and sinks `ready`
/// (as `crate::side::ready_params` prepared them) must be `given`'s own
/// tensors, not f32 widenings or aligned copies made now (a replay would
/// read those, ignoring in-place updates of the caller's).
pub(crate) fn no_side_copy(
    admit: &Option<Admit>,
    given: &crate::AttnParams,
    ready: &crate::AttnParams,
) -> candle_core::Result<()> {
    for (name, g, r) in [
        ("alibi_slopes", &given.alibi_slopes, &ready.alibi_slopes),
        ("sinks", &given.sinks, &ready.sinks),
    ] {
        if let (Some(g), Some(r)) = (g, r) {
            no_copy(admit, name, g, r)?;
        }
    }
    Ok(())
}

/// A recorded step: the executable graph and everything it addresses.
/// [`launch`](Self::launch) replays it on candle's stream.
pub struct CapturedStep {
    /// Dropped first (after the wait of `Drop`): the graph, then the
    /// handle and plans; `None` only inside `Drop`.
    held: Option<Held>,
    /// candle's stream (the launches go there).
    stream: CudarcStream,
    /// Recorded on the launching stream after each launch; `Drop` waits
    /// for it (`launches` says whether it covers every launch).
    done: cudarc::driver::CudaEvent,
    launches: Launches,
    kept: Vec<Tensor>,
    /// The KV-cache lengths the graph reads (written before launches).
    slots: Vec<Slot>,
    /// The capture's number ([`LensSlot`]s of other steps are refused).
    id: u64,
    calls: usize,
}

/// The index of `slot` among the `n` slots of step `id`.
///
/// # Errors
/// A slot of another step or past `n` (typed, naming `slot`).
fn slot_index(id: u64, n: usize, slot: LensSlot, calls: &str) -> cudnn::Result<usize> {
    if slot.step != id || slot.index >= n {
        return Err(Error::invalid(
            "slot",
            format!("must be one of this step's {n} {calls} calls (step {id})"),
            format!("call {} of step {}", slot.index, slot.step),
        ));
    }
    Ok(slot.index)
}

/// The graph and what it addresses besides candle's tensors.
struct Held {
    /// Dropped first: nothing below is freed while it exists.
    exec: CudaGraphExec,
    /// The capture's handle: the graph addresses its workspace.
    _handle: Handle,
    _plans: Vec<Arc<Plan>>,
}

/// Where a step's launches stand, for the next launch and the teardown
/// (free of the device, unit-tested).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Launches {
    /// Never launched.
    None,
    /// Every launch is before the step's event (recorded after the last
    /// on its stream, and each launch waited for the event before it).
    Recorded,
    /// A launch was queued and the event was not recorded after it (an
    /// error): only the device's end covers it.
    Unrecorded,
}

/// What must finish before what a step keeps may be freed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    Nothing,
    /// The step's event.
    Event,
    /// The whole context (`cuCtxSynchronize`).
    Device,
}

impl Launches {
    /// What a teardown (or a launch on another stream) must wait for.
    pub(crate) fn wait(self) -> Wait {
        match self {
            Launches::None => Wait::Nothing,
            Launches::Recorded => Wait::Event,
            Launches::Unrecorded => Wait::Device,
        }
    }
}

impl Drop for CapturedStep {
    /// Waits for the step's launches before anything they address is
    /// freed: the kept tensors are freed by cudarc on the stream of the
    /// dropping thread (candle's default stream is per thread), the
    /// workspace after the private stream, neither ordered after launches
    /// on another thread's stream. The wait is bounded: it covers only
    /// work already queued (a host `cuEventSynchronize`, or
    /// `cuCtxSynchronize` after a launch whose event failed), never work
    /// queued later. If the wait fails, what the graph addresses is
    /// leaked rather than freed under a launch that may still run.
    fn drop(&mut self) {
        let ok = match self.launches.wait() {
            Wait::Nothing => true,
            Wait::Event => self.done.synchronize().is_ok(),
            Wait::Device => self.stream.cudarc().context().synchronize().is_ok(),
        };
        if !ok {
            std::mem::forget(self.held.take());
            std::mem::forget(std::mem::take(&mut self.kept));
            std::mem::forget(std::mem::take(&mut self.slots));
        }
    }
}

impl std::fmt::Debug for CapturedStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapturedStep")
            .field("calls", &self.calls)
            .field("kept_tensors", &self.kept.len())
            .field("launches", &self.launches)
            .finish_non_exhaustive()
    }
}

impl CapturedStep {
    /// How many of this crate's calls the graph holds.
    pub fn calls(&self) -> usize {
        self.calls
    }

    /// Set the KV-cache lengths a call of the step reads from the next
    /// launch on (`slot` as [`flash_attn_kvcache`] returned it): checked
    /// as the eager call checks them (one per sequence, at most the
    /// capacity, causal: at least the query count), written on candle's
    /// stream by the next [`launch`](Self::launch), before it.
    ///
    /// # Errors
    /// A slot of another step, the checks (typed, naming
    /// `cache_seqlens[i]`).
    pub fn set_cache_seqlens(
        &mut self,
        slot: LensSlot,
        cache_seqlens: &[u32],
    ) -> candle_core::Result<()> {
        let i = slot_index(self.id, self.slots.len(), slot, "KV-cache").c()?;
        let s = self
            .slots
            .get_mut(i)
            .ok_or_else(|| to_candle(refusal("slot", "lost")))?;
        s.set(cache_seqlens).c()
    }

    /// Set the block table and lengths a paged call of the step reads from
    /// the next launch on (`slot` as [`flash_attn_paged`] returned it):
    /// checked as the eager call checks them (every entry, those past a
    /// sequence's length included, in `0..num_blocks`; every length at
    /// most `max_blocks_per_seq x block_size`; the same table shape),
    /// written on candle's stream by the next [`launch`](Self::launch),
    /// before it.
    ///
    /// # Errors
    /// A slot of another step or of a KV-cache call, the checks (typed,
    /// naming `block_table[b][i]` / `cache_seqlens[b]`).
    pub fn update_block_table(
        &mut self,
        slot: LensSlot,
        block_table: &[i32],
        cache_seqlens: &[u32],
    ) -> candle_core::Result<()> {
        let i = slot_index(self.id, self.slots.len(), slot, "KV-cache or paged").c()?;
        let s = self
            .slots
            .get_mut(i)
            .ok_or_else(|| to_candle(refusal("slot", "lost")))?;
        s.set_paged(block_table, cache_seqlens).c()
    }

    /// The tensors the graph addresses (kept alive by this step).
    pub fn kept(&self) -> &[Tensor] {
        &self.kept
    }

    /// Replay the step on candle's stream: after candle's work queued
    /// before (new inputs written in place), before candle's work queued
    /// after (reading the outputs).
    ///
    /// # Errors
    /// Candle's stream capturing (a graph of cudarc's could outlive this
    /// step: `cudnn` refuses, typed), a cudarc context tracking events
    /// across streams, ordering after the step's earlier launches
    /// (`cuStreamWaitEvent`), the launch, recording its event.
    #[doc(alias = "cudaGraphLaunch")]
    pub fn launch(&mut self) -> candle_core::Result<()> {
        self.stream.bind_to_thread().c()?;
        multi_stream_refusal(self.stream.cudarc()).c()?;
        // Refused while candle's stream captures before anything is
        // written (cudnn's launch refuses it too).
        candle_idle(&self.stream, "CapturedStep::launch").c()?;
        let Some(held) = &self.held else {
            return Err(to_candle(refusal(
                "CapturedStep::launch",
                "the step is torn down",
            )));
        };
        let cs = self.stream.cudarc();
        // After the step's earlier launches, before the lengths below are
        // rewritten, so the event recorded after this launch covers all
        // (they share this thread's stream, a launch from another thread
        // being refused above, `WrongThread`; the wait keeps this true
        // whatever the stream).
        match self.launches.wait() {
            Wait::Nothing => {}
            Wait::Event => cs
                .wait(&self.done)
                .map_err(|e| to_candle(cudnn::interop::driver_error("cuStreamWaitEvent", e)))?,
            Wait::Device => {
                cs.context()
                    .synchronize()
                    .map_err(|e| to_candle(cudnn::interop::driver_error("cuCtxSynchronize", e)))?;
                self.launches = Launches::None;
            }
        }
        for s in &mut self.slots {
            s.flush(cs)?;
        }
        // From here until the event is recorded, only the device's end
        // covers the launch.
        self.launches = Launches::Unrecorded;
        // SAFETY: `cudnn`'s `CudaGraphExec::launch` contract. 1. Every
        // allocation the graph touches is kept alive by `self`, unchanged:
        // the tensors bound (candle storage, which cudarc frees only when
        // the last clone drops; candle never reallocates a storage), the
        // plans (`Arc`), and the capture's handle, whose workspace was
        // reserved before the capture and is never grown or released (the
        // handle is private to this step and no op runs on it again); the
        // graph is dropped before all of them (field order, after `Drop`'s wait). 2. The launch
        // is on candle's stream, where candle queues its own work on these
        // tensors, so host and candle accesses are ordered with it; a
        // context that orders several streams by events is refused above.
        // 3. The graph holds no host pointer (cuDNN's scalars are read
        // from the plan's host values when the work is enqueued and become
        // kernel parameters, copied into the nodes at capture; the plans
        // are kept anyway). The KV-cache lengths are device buffers the
        // step owns, written above on this stream with checked values.
        // 4. No collective.
        // 5. What the graph addresses is freed only after the step's event
        // (recorded below) or the device's end (`Drop` waits, whichever
        // thread drops the step); earlier launches of the step on another
        // thread's stream are waited for above.
        unsafe { held.exec.launch(self.stream.stream()) }.c()?;
        self.done
            .record(cs)
            .map_err(|e| to_candle(cudnn::interop::driver_error("cuEventRecord", e)))?;
        self.launches = Launches::Recorded;
        Ok(())
    }
}

/// A cudarc context that orders several streams with events is refused:
/// a launch's writes would not be recorded in cudarc's events.
fn multi_stream_refusal(cs: &Arc<cudarc::driver::CudaStream>) -> cudnn::Result<()> {
    if cs.context().is_managing_stream_synchronization() {
        return Err(Error::Unsupported {
            what: "cudnn_candle::capture on a cudarc context that orders several streams with \
                   events (the graph's writes would not be tracked)"
                .to_string(),
            needs: Some("a candle device with one stream (candle's default)".to_string()),
        });
    }
    Ok(())
}

/// Refuse `op` while candle's stream `cs` is being captured (by cudarc's
/// `begin_capture`, any mode, or another library), before it queues or
/// allocates anything: candle's allocations on a capturing stream become
/// allocation nodes of that graph (memory valid only while that graph
/// runs), which this crate's graph would then address on every launch,
/// and work queued there would be replayed by a graph that outlives what
/// it uses.
fn candle_idle(cs: &CudarcStream, op: &str) -> cudnn::Result<()> {
    idle_status(cs.stream().capture_status()?, op)
}

/// The decision of [`candle_idle`], free of the device (unit-tested).
fn idle_status(status: cudnn::runtime::CaptureStatus, op: &str) -> cudnn::Result<()> {
    if status.is_capturing() {
        return Err(refusal(
            op,
            format!(
                "candle's stream is being captured ({status:?}, e.g. cudarc's begin_capture): \
                 its allocations would be memory of that graph, and its graph could replay \
                 this crate's work after what it uses is gone"
            ),
        ));
    }
    Ok(())
}

/// Ends the thread's capture state on every exit (error, panic): after
/// `Stream::capture` returned, so the graph is ended (and destroyed, on an
/// error) before what it kept is dropped. For [`capture_step`] (still open
/// here only on a panic), the owned capture is ended first and the rest is
/// leaked: the tensors kept may be memory of a graph that never ran.
struct Clear;

impl Drop for Clear {
    fn drop(&mut self) {
        ACTIVE.with(|a| {
            if let Some(mut a) = a.borrow_mut().take()
                && let Some(owned) = a.owned.take()
            {
                drop(owned);
                std::mem::forget(a);
            }
        });
    }
}

/// The step closure's error, for `Stream::capture` (which needs `From<cudnn::Error>`).
enum StepError {
    Candle(candle_core::Error),
    Cudnn(Error),
}

impl From<Error> for StepError {
    fn from(e: Error) -> Self {
        StepError::Cudnn(e)
    }
}

/// Record `step` (this crate's attention calls on `device` inside it) into
/// a CUDA graph: see the [module docs](self). Returns the step, to replay,
/// and what `step` returned (its outputs, which each launch rewrites).
///
/// # Errors
/// `device` not CUDA, a capture already open on this thread, a cudarc
/// context tracking several streams, creating the stream and handle,
/// `step`'s error (also a refused call), a poisoned capture, ending or
/// instantiating the graph.
pub fn capture<R>(
    device: &candle_core::Device,
    step: impl FnOnce() -> candle_core::Result<R>,
) -> candle_core::Result<(CapturedStep, R)> {
    let candle_core::Device::Cuda(dev) = device else {
        return Err(to_candle(Error::invalid(
            "device",
            "must be a CUDA device (cudnn_candle::capture)",
            format!("{:?}", device.location()),
        )));
    };
    if is_capturing() {
        return Err(to_candle(refusal(
            "capture",
            "a capture is already open on this thread",
        )));
    }
    let (candle_stream, active) = open(dev).c()?;
    let capture_stream = active.handle.stream().clone();
    ACTIVE.with(|a| *a.borrow_mut() = Some(active));
    let clear = Clear;
    let mut out = None;
    let graph = capture_stream.capture(CaptureMode::ThreadLocal, |_| {
        out = Some(step().map_err(StepError::Candle)?);
        Ok::<(), StepError>(())
    });
    let Some(active) = ACTIVE.with(|a| a.borrow_mut().take()) else {
        return Err(to_candle(refusal("capture", "the capture state was lost")));
    };
    drop(clear);
    let graph = match graph {
        Ok(g) => g,
        Err(StepError::Candle(e)) => return Err(e),
        Err(StepError::Cudnn(e)) => return Err(to_candle(e)),
    };
    let Active {
        id,
        handle,
        ledger,
        slots,
        ..
    } = active;
    // On an error below, `graph` was never instantiated: nothing can run
    // it, whatever the order in which it and what it kept are dropped.
    let kept = ledger.finish().c()?;
    let exec = graph.instantiate().c()?;
    drop(graph);
    let out = out.ok_or_else(|| to_candle(refusal("capture", "the step returned nothing")))?;
    let done = candle_stream
        .cudarc()
        .context()
        .new_event(None)
        .map_err(|e| to_candle(cudnn::interop::driver_error("cuEventCreate", e)))?;
    Ok((
        CapturedStep {
            held: Some(Held {
                exec,
                _handle: handle,
                _plans: kept.plans,
            }),
            stream: candle_stream,
            done,
            launches: Launches::None,
            kept: kept.tensors,
            slots,
            id,
            calls: kept.calls,
        },
        out,
    ))
}

/// The thread's capture state for `dev`: a new non-blocking stream of this
/// crate on its device and a handle on it with the workspace reserved.
fn open(dev: &CudaDevice) -> cudnn::Result<(CudarcStream, Active)> {
    open_on(dev, false)
}

/// [`open`] for [`capture`] (`step` false: a private stream of this crate
/// captures) or [`capture_step`] (`step`: the handle is bound to candle's
/// stream, whose owned capture is begun last, thread-local mode).
fn open_on(dev: &CudaDevice, step: bool) -> cudnn::Result<(CudarcStream, Active)> {
    let cs = dev.cuda_stream();
    multi_stream_refusal(&cs)?;
    let wrapped = CudarcStream::new(&cs)?;
    // Before anything is created: a capture of candle's stream (cudarc's,
    // relaxed mode included) would hold the calls' allocations.
    candle_idle(&wrapped, "capture")?;
    let device = wrapped
        .stream()
        .device()
        .ok_or_else(|| Error::invalid("device", "candle's stream must name its device", "None"))?;
    let ordinal = cs.context().ordinal();
    let mut handle = if step {
        Handle::new(&wrapped)?
    } else {
        Handle::new(&device.create_non_blocking_stream()?)?
    };
    handle.reserve_workspace(crate::device::max_workspace(ordinal))?;
    let owned = if step {
        // SAFETY: `begin_owned_capture`'s contract is `capture_step`'s
        // (an `unsafe fn` whose caller keeps it): nothing but the step ends
        // the capture, no other thread queues on candle's stream meanwhile,
        // and graph memory is not used before the first launch.
        Some(unsafe { wrapped.begin_owned_capture(CaptureMode::ThreadLocal) }?)
    } else {
        None
    };
    // Distinct for every capture of the process (a u64 does not wrap).
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let active = Active {
        id: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        ctx: cs.context().cu_ctx() as usize,
        stream: cs.cu_stream() as usize,
        candle: wrapped.clone(),
        ordinal,
        device,
        handle,
        ledger: Ledger::default(),
        slots: Vec::new(),
        last_slot: None,
        owned,
    };
    Ok((wrapped, active))
}

#[cfg(test)]
mod tests;
