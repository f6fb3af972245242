//! The attention forward inside a capture: the plan runs with the
//! capture's handle (its stream captures: a private stream for `capture`,
//! candle's own for `capture_step`), on candle's memory lent by address
//! (no cudarc event is recorded: the context tracks none, one stream, and
//! the launches are ordered on candle's stream).

use candle_core::CudaDevice;
use cudarc::driver::{CudaSlice, CudaView, DevicePtr, DevicePtrMut};
use cudnn::graph::SdpaConfig;
use cudnn::runtime::{Device, DeviceSlice, DeviceSliceMut};
use cudnn::{Error, Result};

use super::kvcache::{KvLens, Slot};
use super::{refusal, with_active};
use crate::device::{self, IntoCandle, expect_layout, to_candle};
use crate::exec::{Elem, Extras, count};
use crate::graphs::{self, bshd, names};

/// The address of `len` elements of `T` at `ptr`, checked: it fits the
/// host's pointers and is aligned for `T` (cudarc's allocations are).
pub(crate) fn checked_addr<T>(what: &str, ptr: u64, len: usize) -> Result<usize> {
    let addr = usize::try_from(ptr)
        .map_err(|_| Error::invalid(what, "device address must fit usize", ptr))?;
    if !addr.is_multiple_of(std::mem::align_of::<T>()) || (addr == 0 && len > 0) {
        return Err(Error::invalid(
            what,
            format!(
                "device address must be non-null and aligned to {}",
                std::mem::align_of::<T>()
            ),
            format!("{addr:#x}"),
        ));
    }
    len.checked_mul(std::mem::size_of::<T>())
        .and_then(|b| addr.checked_add(b))
        .ok_or_else(|| Error::invalid(what, "address + size must fit usize", len))?;
    Ok(addr)
}

/// `v` as this crate's view for the length of the borrow.
fn lend<'a, T: cudnn::DataType>(
    v: &'a CudaView<'_, T>,
    cs: &'a cudarc::driver::CudaStream,
    device: Device,
    what: &str,
) -> Result<(DeviceSlice<'a, T>, cudarc::driver::SyncOnDrop<'a>)> {
    let (ptr, sync) = v.device_ptr(cs);
    let addr = checked_addr::<T>(what, ptr, v.len())?;
    // SAFETY: `addr` is cudarc's device address of the live view `v` of
    // `v.len()` elements of `T` on `device` (candle's context, checked
    // against the capture's), aligned (checked); `v` is borrowed for `'a`,
    // so the memory is not freed during `'a`; nothing runs the captured
    // work during `'a` (the capture only records it), and each later
    // launch is ordered on candle's stream with candle's writes.
    let s = unsafe { DeviceSlice::from_raw_parts_on(addr as *const T, v.len(), device) };
    Ok((s, sync))
}

/// Run the forward of `cfg` inside the thread's capture (see
/// [`exec::forward`](crate::exec::forward)): inference only, no side
/// buffers. The output is allocated on candle's stream now; the graph
/// writes it on each launch.
///
/// # Errors
/// Refused (typed) for a training forward, lengths or offsets (a
/// varlen / KV-cache call), a call the capture did not admit, another
/// device; planning, binding, execution (which poison the capture).
#[allow(clippy::type_complexity)]
pub(crate) fn forward<T: Elem>(
    dev: &CudaDevice,
    cfg: &SdpaConfig,
    strides: &[[i64; 4]; 3],
    [q, k, v]: [&CudaView<'_, T>; 3],
    lens: Option<KvLens>,
    extras: &Extras<'_>,
) -> candle_core::Result<(CudaSlice<T>, Option<CudaSlice<f32>>)> {
    if cfg.is_training {
        return Err(to_candle(refusal(
            "attention (training forward)",
            "a training forward is part of a backward, which a capture does not hold",
        )));
    }
    let paged_table = lens.as_ref().is_some_and(|l| l.paged.is_some());
    if cfg.ragged || cfg.paged.is_some() != paged_table || cfg.padding != lens.is_some() {
        return Err(to_candle(refusal(
            "attention (lengths or offsets)",
            "ragged offsets, block tables and lengths other than a KV cache's are per-call \
             device buffers made from host values",
        )));
    }
    let cs = dev.cuda_stream();
    let r = with_active(|a| -> candle_core::Result<CudaSlice<T>> {
        if (cs.context().cu_ctx() as usize, cs.cu_stream() as usize) != (a.ctx, a.stream) {
            return Err(to_candle(refusal(
                "attention",
                "a call on another device or stream than the capture's",
            )));
        }
        // Before the output and the lengths are allocated on candle's
        // stream: not while cudarc captures it (`super::candle_idle`).
        super::candle_ready(a, "attention").c()?;
        a.ledger.will_run("attention").c()?;
        // From here on, an error abandons the admitted call after work
        // may have been queued: the capture is poisoned (`Admit::drop`).
        let graph = graphs::forward(cfg, strides).c()?;
        let [_, _, _, od] = graphs::dims(cfg);
        let plan = device::plan(a.ordinal, &graph).c()?;
        expect_layout(plan.io(), names::O, od, bshd(od)).c()?;
        let mut o = dev.alloc_zeros::<T>(count(&od).c()?)?;
        let device = a.device;
        let (qs, _q) = lend(q, &cs, device, "q").c()?;
        let (ks, _k) = lend(k, &cs, device, "k").c()?;
        let (vs, _v) = lend(v, &cs, device, "v").c()?;
        let f32s = [
            extras.alibi.as_ref(),
            extras.sink.as_ref(),
            extras.bias.as_ref(),
        ]
        .into_iter()
        .zip([names::ALIBI, names::SINK, names::BIAS])
        .filter_map(|(e, n)| e.map(|e| (n, e)))
        .map(|(n, e)| lend(e, &cs, device, n).map(|l| (n, l)))
        .collect::<Result<Vec<_>>>()
        .c()?;
        let olen = o.len();
        let (optr, _o) = o.device_ptr_mut(&cs);
        let oaddr = checked_addr::<T>("o", optr, olen).c()?;
        // SAFETY: as in `lend`: cudarc's address of the live, exclusively
        // borrowed output `o` (`olen` elements of `T`, aligned, checked) on
        // candle's device, which nothing else addresses during the borrow.
        let os = unsafe { DeviceSliceMut::from_raw_parts_mut_on(oaddr as *mut T, olen, device) };
        // The lengths of a KV-cache call: buffers the step owns, zero
        // (in range) until its launch writes the checked values.
        let slot = match lens {
            Some(l) => Some(Slot::new(dev, cfg, l, a.owned.is_some())?),
            None => None,
        };
        let mut b = plan.bindings();
        let mut lent = Vec::new();
        if let Some(s) = &slot {
            for (n, buf) in [(names::SEQ_Q, &s.q), (names::SEQ_KV, &s.kv)] {
                let (ptr, sync) = buf.device_ptr(&cs);
                let addr = checked_addr::<i32>(n, ptr, buf.len()).c()?;
                // SAFETY: cudarc's address of `buf`, `buf.len()` i32 on
                // candle's device (aligned, checked), owned by the slot the
                // step keeps (not freed while the graph exists).
                let sl = unsafe {
                    DeviceSlice::from_raw_parts_on(addr as *const i32, buf.len(), device)
                };
                lent.push(sync);
                // SAFETY: `input_seq_lengths`' contract: every value the
                // buffer holds when a run reads it is in `0..=extent` of
                // this plan: zeros until the first launch (`capture`; for
                // `capture_step` no run reads it before the first launch,
                // which writes the pending checked values first), then only values
                // `Slot::set` checked against this config (at most
                // `cfg.seq_q` and `cfg.seq_kv`, the extents the plan's
                // tensors have; `params::kvcache_lens`), written on
                // candle's stream before a launch, never during one (the
                // launches are on that stream too).
                unsafe { b.input_seq_lengths(n, sl) }.c()?;
            }
            if let Some(t) = &s.table {
                let (ptr, sync) = t.device_ptr(&cs);
                let addr = checked_addr::<i32>("block_table", ptr, t.len()).c()?;
                lent.push(sync);
                for n in [names::PAGE_TABLE_K, names::PAGE_TABLE_V] {
                    // SAFETY: as for the lengths: cudarc's address of the
                    // slot's own table buffer (kept by the step).
                    let sl = unsafe {
                        DeviceSlice::from_raw_parts_on(addr as *const i32, t.len(), device)
                    };
                    // SAFETY: `input_page_table`'s contract: every entry the
                    // buffer holds when a run reads it is in `0..num_blocks`
                    // of this plan's config (`capture_step`: written by the
                    // first launch before the graph): zeros (block 0) until the first
                    // launch, then only tables `params::paged` checked for
                    // this call's shapes and config (`PagedCheck`, every
                    // entry, those past a sequence's length included), and
                    // every key length bound with it (above) at most
                    // `max_blocks_per_seq x block_size` (`params::paged`
                    // again); written on candle's stream before a launch,
                    // never during one.
                    unsafe { b.input_page_table(n, sl) }.c()?;
                }
            }
        }
        b.input(names::Q, qs).c()?;
        b.input(names::K, ks).c()?;
        b.input(names::V, vs).c()?;
        for (n, (s, _)) in &f32s {
            b.input(n, *s).c()?;
        }
        b.output(names::O, os).c()?;
        plan.execute(&mut a.handle, &mut b).c()?;
        drop(b);
        a.ledger.ran(plan);
        drop(lent);
        if let Some(s) = slot {
            a.last_slot = Some(a.slots.len());
            a.slots.push(s);
        }
        drop(_o);
        Ok(o)
    });
    match r {
        Some(o) => Ok((o?, None)),
        None => Err(to_candle(refusal("attention", "no capture is open"))),
    }
}
