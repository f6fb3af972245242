//! A CUDA graph of a **whole** candle step: candle's own ops and this
//! crate's attention calls, captured together on candle's stream
//! ([`capture_step`], `unsafe`), replayed by [`CapturedCandleStep::launch`]
//! (`unsafe`).
//!
//! ```no_run
//! # fn main() -> candle_core::Result<()> {
//! use candle_core::{DType, Device, Tensor, D};
//! let dev = Device::new_cuda(0)?;
//! let x = Tensor::zeros((1, 1, 8, 64), DType::BF16, &dev)?;
//! let k = Tensor::zeros((1, 256, 8, 64), DType::BF16, &dev)?;
//! let step = || {
//!     let q = (&x * 2.0)?; // a candle op: recorded too
//!     let o = cudnn_candle::flash_attn(&q, &k, &k, 0.125, true)?;
//!     o.sqr() // candle again
//! };
//! {
//!     // Once eagerly, under candle's host-to-device cache (on this
//!     // thread): plans the graph, sizes the workspace, uploads the dims
//!     // and strides candle's ops need into candle's cache.
//!     let _cache = dev.as_cuda_device()?.enable_cuda_graph_htod_cache();
//!     step()?;
//! }
//! // SAFETY: nothing else ends the capture or uses candle's stream from
//! // another thread meanwhile; `y` (graph memory) is read only after a
//! // launch; `x` and `k` outlive the step and are written only on
//! // candle's stream.
//! let (mut g, y) = unsafe { cudnn_candle::capture::capture_step(&dev, step)? };
//! for _ in 0..100 {
//!     x.slice_set(&Tensor::ones((1, 1, 8, 64), DType::BF16, &dev)?, 0, 0)?;
//!     // SAFETY: as above: `x`, `k` and `y` are alive.
//!     unsafe { g.launch()? }; // the whole step, one graph launch
//!     let _ = y.sum(D::Minus1)?; // read after the launch, on candle's stream
//! }
//! # Ok(()) }
//! ```
//!
//! # How
//! [`capture_step`] begins an *owned* capture of candle's stream
//! (`cudnn`'s `CudarcStream::begin_owned_capture`, thread-local mode, so
//! other threads' candle work neither fails nor invalidates it), runs the
//! closure, and ends it into `cudnn`'s `OwnedGraph` (never a cudarc
//! `CudaGraph`, whose launch is safe). Inside the closure:
//! - candle's ops on the device are recorded, not run;
//! - this crate's attention forwards (dense, [`flash_attn_kvcache`] and
//!   [`flash_attn_paged`] of this module, the same set as [`capture`]) run
//!   on candle's stream with a cuDNN handle of the step (its workspace
//!   reserved before the capture, at the largest a plan of this process
//!   needed on the device: run the step once eagerly first); everything
//!   else of this crate is refused, typed, as in [`capture`];
//! - candle's host-to-device cache is on (`CudaDevice::
//!   enable_cuda_graph_htod_cache`, candle 0.11.1): every candle op on a
//!   broadcast or strided layout uploads its dims and strides from a
//!   temporary host `Vec`, which a capture would record as a copy from
//!   freed host memory; with the cache, candle serves the copy made during
//!   the warm-up (device memory it keeps for the process) and refuses a
//!   miss inside the capture ("h2d param cache miss", the step's error).
//!   So **run the warm-up under the same guard, on the same thread**
//!   (candle's cache of `Tensor::new`-style uploads is per thread);
//! - the KV-cache lengths and block tables live in buffers the step owns,
//!   allocated with `cuMemAlloc` (not memory of the graph) and written on
//!   candle's stream before each launch with checked values
//!   ([`CapturedCandleStep::set_cache_seqlens`],
//!   [`CapturedCandleStep::update_block_table`]).
//!
//! # What the step keeps, and until when
//! The graph object keeps the handle (its workspace), the plans, clones of
//! every tensor this crate's calls bound or returned, and the length
//! buffers. Dropping the step waits, on the host, for the event recorded
//! after its last launch (bounded: work already queued), then destroys
//! the graph, then drops what it kept; if the wait fails, they are leaked.
//! A step never launched leaks the tensor clones instead of dropping them
//! (a tensor made inside the capture is memory of the graph, which only a
//! launch allocates), as does an error after the capture began. A step
//! dropped while candle's stream is capturing (inside another
//! `capture_step` closure, or during another thread's capture of a shared
//! stream) waits for nothing and leaks all it kept: their frees would be
//! recorded into that capture and replayed by its graph.
//!
//! # What the caller guarantees (the `# Safety` of both functions)
//! candle's memory of the ops in the closure is the caller's:
//! - keep the step's inputs (tensors made before the capture and used in
//!   it) alive, unreallocated, until the step is dropped, and write them
//!   only on candle's stream (`slice_set`, `copy_`-style ops) between
//!   launches;
//! - tensors made inside the closure (the outputs, and this crate's
//!   outputs too) are memory of the graph: read them only after a launch,
//!   and drop none of them before the first launch completed; drop inside
//!   the closure no tensor made before it (the free would be replayed);
//! - nothing but the step ends the capture (no cudarc `end_capture` in the
//!   closure), no other thread queues work on candle's stream during the
//!   capture, and candle calls in the closure must be capturable (no host
//!   reads such as `to_vec`, no `Tensor::new` from host data: they fail or
//!   invalidate the capture, an error at its end);
//! - direct calls of the `cudnn` crate on candle's stream inside the
//!   closure (a `CudarcStream` of candle's stream, not this crate's
//!   functions) are admitted and recorded, but the step does not keep
//!   what they use: their handles (workspaces), plans and buffers stay
//!   alive, unreallocated, until the step is dropped (`cudnn`'s
//!   `OwnedGraph::launch` contract);
//! - run the step once eagerly first, under candle's
//!   `enable_cuda_graph_htod_cache` guard on the same thread (see above),
//!   so every plan exists, the workspace is sized (a growth during the
//!   capture is refused, typed) and candle's parameter uploads are cached.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use candle_core::Tensor;
use cudnn::Error;
use cudnn::interop::OwnedGraph;

use super::{
    ACTIVE, Active, Clear, LensSlot, Slot, candle_idle, is_capturing, multi_stream_refusal,
    open_on, refusal, slot_index,
};
#[allow(unused_imports)] // doc links
use super::{capture, flash_attn_kvcache, flash_attn_paged};
use crate::device::{IntoCandle, to_candle};

/// Clones of the tensors the graph addresses, kept by the graph object:
/// dropped only once a launch ran (some are memory of the graph, which
/// only a launch allocates), leaked otherwise.
struct GraphTensors {
    tensors: Vec<Tensor>,
    launched: Arc<AtomicBool>,
}

impl Drop for GraphTensors {
    fn drop(&mut self) {
        if !self.launched.load(Ordering::Acquire) {
            std::mem::forget(std::mem::take(&mut self.tensors));
        }
    }
}

/// A whole candle step recorded into one CUDA graph: see the
/// [module docs](self).
pub struct CapturedCandleStep {
    /// Dropped first: waits for the last launch, destroys the graph, then
    /// drops the handle, plans, tensors and length buffers it keeps.
    graph: OwnedGraph,
    /// The KV-cache lengths and tables (also kept by `graph`).
    slots: Arc<Mutex<Vec<Slot>>>,
    launched: Arc<AtomicBool>,
    /// The capture's number ([`LensSlot`]s of other steps are refused).
    id: u64,
    calls: usize,
}

impl std::fmt::Debug for CapturedCandleStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapturedCandleStep")
            .field("graph", &self.graph)
            .field("calls", &self.calls)
            .finish_non_exhaustive()
    }
}

/// Record `step` (candle's ops and this crate's attention calls on
/// `device`) into one CUDA graph of candle's stream: see the
/// [module docs](self). Returns the step and what `step` returned (graph
/// memory: read it only after a launch).
///
/// `step` runs under candle's host-to-device cache guard
/// (`CudaDevice::enable_cuda_graph_htod_cache`): run its eager warm-up
/// under the same guard, on the same thread.
///
/// # Errors
/// `device` not CUDA, a capture already open on this thread, a cudarc
/// context tracking several streams, candle's stream capturing already or
/// the legacy stream, creating the handle and reserving its workspace,
/// `step`'s error (also a refused call, and candle's "h2d param cache
/// miss" for an op the warm-up did not run under the guard), a poisoned
/// capture, ending (an invalidated capture: an uncapturable candle call)
/// or instantiating the graph.
///
/// # Safety
/// The caller keeps the conditions in the module docs ("What the caller
/// guarantees"): inputs alive and written only on candle's stream; tensors
/// made inside the closure not read before a launch nor dropped before the
/// first launch completed; no tensor made before the closure dropped
/// inside it; nothing else ends the capture, no other thread uses
/// candle's stream during it; what direct `cudnn` calls on candle's stream
/// inside the closure use stays alive until the step is dropped.
pub unsafe fn capture_step<R>(
    device: &candle_core::Device,
    step: impl FnOnce() -> candle_core::Result<R>,
) -> candle_core::Result<(CapturedCandleStep, R)> {
    let candle_core::Device::Cuda(dev) = device else {
        return Err(to_candle(Error::invalid(
            "device",
            "must be a CUDA device (cudnn_candle::capture::capture_step)",
            format!("{:?}", device.location()),
        )));
    };
    if is_capturing() {
        return Err(to_candle(refusal(
            "capture_step",
            "a capture is already open on this thread",
        )));
    }
    let (_candle_stream, active) = open_on(dev, true).c()?;
    ACTIVE.with(|a| *a.borrow_mut() = Some(active));
    let clear = Clear;
    // candle's ops upload their dims and strides from temporary host
    // vectors unless this cache is on (candle 0.11.1): captured, such a
    // copy would read freed host memory at every launch. With it, candle
    // serves the warm-up's device copies and refuses a miss, typed as a
    // candle error, before queueing anything.
    let htod_cache = dev.enable_cuda_graph_htod_cache();
    let out = step();
    drop(htod_cache);
    let Some(active) = ACTIVE.with(|a| a.borrow_mut().take()) else {
        return Err(to_candle(refusal(
            "capture_step",
            "the capture state was lost",
        )));
    };
    drop(clear);
    finish(active, out)
}

/// The end of [`capture_step`]: the graph object takes what the graph
/// addresses; on an error the capture ends first and the tensors the
/// calls bound, and `out`, are leaked (they may be memory of a graph that
/// never ran).
fn finish<R>(
    mut active: Active,
    out: candle_core::Result<R>,
) -> candle_core::Result<(CapturedCandleStep, R)> {
    let Some(mut cap) = active.owned.take() else {
        return Err(to_candle(refusal(
            "capture_step",
            "the owned capture was lost",
        )));
    };
    let Active {
        id,
        handle,
        ledger,
        slots,
        ..
    } = active;
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            drop(cap);
            std::mem::forget(ledger);
            return Err(e);
        }
    };
    let mut ledger = ledger;
    ledger.abandon("a call was still in progress at the end of the capture");
    if let Some(p) = ledger.poisoned() {
        let e = Error::Unsupported {
            what: format!("the captured step: {p}"),
            needs: Some("a capture whose every call completed".to_string()),
        };
        drop(cap);
        std::mem::forget(ledger);
        std::mem::forget(out);
        return Err(to_candle(e));
    }
    // Not poisoned and no call in progress: `finish` succeeds.
    let kept = ledger.finish().c()?;
    let launched = Arc::new(AtomicBool::new(false));
    let slots = Arc::new(Mutex::new(slots));
    cap.keep(handle);
    cap.keep(kept.plans);
    cap.keep(GraphTensors {
        tensors: kept.tensors,
        launched: launched.clone(),
    });
    cap.keep(slots.clone());
    let graph = match cap.end() {
        Ok(g) => g,
        Err(e) => {
            std::mem::forget(out);
            return Err(to_candle(e));
        }
    };
    Ok((
        CapturedCandleStep {
            graph,
            slots,
            launched,
            id,
            calls: kept.calls,
        },
        out,
    ))
}

impl CapturedCandleStep {
    /// How many of this crate's calls the graph holds.
    pub fn calls(&self) -> usize {
        self.calls
    }

    /// How many launches were queued.
    pub fn launched(&self) -> u64 {
        self.graph.launched()
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// As [`CapturedStep::set_cache_seqlens`](super::CapturedStep::set_cache_seqlens):
    /// checked now, written by the next [`launch`](Self::launch) before
    /// the graph.
    ///
    /// # Errors
    /// A slot of another step, the checks (typed, naming
    /// `cache_seqlens[i]`).
    pub fn set_cache_seqlens(
        &mut self,
        slot: LensSlot,
        cache_seqlens: &[u32],
    ) -> candle_core::Result<()> {
        let id = self.id;
        let mut slots = self.slots();
        let i = slot_index(id, slots.len(), slot, "KV-cache").c()?;
        let s = slots
            .get_mut(i)
            .ok_or_else(|| to_candle(refusal("slot", "lost")))?;
        s.set(cache_seqlens).c()
    }

    /// As [`CapturedStep::update_block_table`](super::CapturedStep::update_block_table):
    /// checked now, written by the next [`launch`](Self::launch) before
    /// the graph.
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
        let id = self.id;
        let mut slots = self.slots();
        let i = slot_index(id, slots.len(), slot, "KV-cache or paged").c()?;
        let s = slots
            .get_mut(i)
            .ok_or_else(|| to_candle(refusal("slot", "lost")))?;
        s.set_paged(block_table, cache_seqlens).c()
    }

    /// Replay the whole step on candle's stream: after candle's work
    /// queued before (new inputs written in place), before the work
    /// queued after (reading the outputs). Pending lengths and tables are
    /// written first, on the same stream.
    ///
    /// # Errors
    /// Another thread's per-thread stream (candle's default stream is per
    /// thread: typed `WrongThread`, before anything is written), candle's
    /// stream capturing (typed `CaptureUnsafe`), a cudarc context tracking
    /// several streams, writing the lengths, the launch, its event.
    ///
    /// # Safety
    /// As [`capture_step`]: every tensor the step uses that the step does
    /// not keep (candle's inputs and intermediates) is alive, not
    /// reallocated, and used only in candle's stream order with the launch;
    /// so is everything a direct `cudnn` call on candle's stream inside the
    /// closure used (its handle and workspace, plans, buffers), which the
    /// step does not keep either.
    #[doc(alias = "cudaGraphLaunch")]
    pub unsafe fn launch(&mut self) -> candle_core::Result<()> {
        let stream = self.graph.stream().clone();
        let me = std::thread::current().id();
        if let Some(t) = stream.stream().thread()
            && t != me
        {
            return Err(to_candle(Error::WrongThread {
                what: "CapturedCandleStep::launch (candle's per-thread stream)".to_string(),
                owner: format!("{t:?}"),
                current: format!("{me:?}"),
            }));
        }
        stream.bind_to_thread().c()?;
        multi_stream_refusal(stream.cudarc()).c()?;
        candle_idle(&stream, "CapturedCandleStep::launch").c()?;
        for s in self.slots().iter_mut() {
            s.flush(stream.cudarc())?;
        }
        // SAFETY: `OwnedGraph::launch`'s contract. What this crate's calls
        // used is kept by the graph object (the handle and its workspace,
        // reserved before the capture and never grown, the plans, the
        // tensors bound and returned, the length buffers, written just
        // above on this stream with checked values); the rest is candle's
        // memory, which this function's caller keeps alive and ordered
        // (its contract). The launch is on candle's stream.
        unsafe { self.graph.launch() }.c()?;
        self.launched.store(true, Ordering::Release);
        Ok(())
    }
}
