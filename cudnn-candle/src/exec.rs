//! Running the attention plans on candle's memory and stream: candle's
//! `CudaSlice`s lent to the plan through the crate's cudarc interop
//! (`CudarcStream::read` / `write` on candle's own stream, so cudarc's
//! event tracking orders the work with candle's), outputs allocated on
//! candle's device.

use candle_core::CudaDevice;
use candle_core::cuda_backend::CudaDType;
use cudarc::driver::{CudaSlice, CudaView, DeviceRepr, ValidAsZeroBits};
use cudnn::graph::{Bindings, RaggedTensor, SdpaConfig, SeqLengths};
use cudnn::interop::CudarcStream;
use cudnn::runtime::{CaptureStatus, DeviceBuffer};
use cudnn::{Error, Result};

use crate::device::{self, IntoCandle, expect_layout, to_candle, with_handle};
use crate::graphs::{self, bshd, names};

/// The element types of the attention ops: f16 and bf16.
pub trait Elem:
    cudnn::DataType + DeviceRepr + ValidAsZeroBits + CudaDType + Copy + Send + Sync + 'static
{
}
impl Elem for half::f16 {}
impl Elem for half::bf16 {}

/// Elements of `dims`, checked: their bytes (at 8 per element, the widest
/// type here) must fit `isize`, what an allocation can hold. cudarc's
/// `alloc_zeros` multiplies the count by the element size unchecked: a
/// count past this would wrap to a tiny buffer that a copy then overruns.
pub fn count(dims: &[i64]) -> Result<usize> {
    let refuse = || {
        Error::invalid(
            "tensor dims (attention, conv2d, norm)",
            "element count times 8 bytes must fit isize (an allocation's size)",
            format!("{dims:?}"),
        )
    };
    let n = dims.iter().try_fold(1usize, |acc, &d| {
        usize::try_from(d)
            .ok()
            .and_then(|d| acc.checked_mul(d))
            .ok_or_else(refuse)
    })?;
    if n.checked_mul(8).is_none_or(|b| b > isize::MAX as usize) {
        return Err(refuse());
    }
    Ok(n)
}

/// The checked lengths and the ragged offsets of a varlen call, on the
/// device (their copies are synchronous; freed after the work, since
/// `cudaFree` waits for the device).
pub struct Side {
    seq_q: SeqLengths,
    seq_kv: SeqLengths,
    offsets: Option<[DeviceBuffer<i32>; 4]>,
    /// A paged cache's block table (K's and V's), checked entries.
    pages: Option<DeviceBuffer<i32>>,
}

/// The f32 side inputs of an attention, `(heads,)` each: ALiBi slopes and
/// attention sinks (plain values: they cannot move a memory access).
#[derive(Default)]
pub struct Extras<'a> {
    /// The ALiBi slopes (bound as `[1, H, 1, 1]`).
    pub alibi: Option<CudaView<'a, f32>>,
    /// The sink logits (bound as `[1, H, 1, 1]`; forward only).
    pub sink: Option<CudaView<'a, f32>>,
    /// An additive score bias `[1, H, S_q, S_kv]` (forward and backward).
    pub bias: Option<CudaView<'a, f32>>,
}

impl Side {
    /// Check the lengths against the config's extents and compute the
    /// offsets of Q, K, V, O (dQ, dK, dV, dO share them).
    ///
    /// # Errors
    /// A length past its extent, a count other than the batch, an offset
    /// past i32, the copies.
    /// Without ragged offsets (`cfg.ragged` off: a padded KV cache) only
    /// the lengths.
    pub fn new(cfg: &SdpaConfig, lens_q: &[i32], lens_kv: &[i32]) -> Result<Self> {
        let b = lens_q.len();
        let seq_q = SeqLengths::new(lens_q, b, cfg.seq_q)?;
        let seq_kv = SeqLengths::new(lens_kv, b, cfg.seq_kv)?;
        let off = |w: RaggedTensor, lens: &[i32]| -> Result<DeviceBuffer<i32>> {
            DeviceBuffer::from_host(&cfg.ragged_offsets(w, lens)?)
        };
        let offsets = if cfg.ragged {
            Some([
                off(RaggedTensor::Q, lens_q)?,
                off(RaggedTensor::K, lens_kv)?,
                off(RaggedTensor::V, lens_kv)?,
                off(RaggedTensor::O, lens_q)?,
            ])
        } else {
            None
        };
        Ok(Self {
            seq_q,
            seq_kv,
            offsets,
            pages: None,
        })
    }

    /// A paged call's lengths and its block table: `p.table` is
    /// [`params::paged`](crate::params::paged)'s, every entry checked in
    /// `0..num_blocks` of `p.cfg`, and `p.lens_kv` at most `p.cfg.seq_kv`
    /// (the keys a table row covers; checked again here).
    ///
    /// # Errors
    /// As [`new`](Self::new); a config without a paged cache; the copy.
    pub fn paged(p: &crate::params::Paged) -> Result<Self> {
        if p.cfg.paged.is_none() {
            return Err(Error::invalid(
                "paged call config",
                "must have a paged cache",
                "None",
            ));
        }
        let mut side = Self::new(&p.cfg, &p.lens_q, &p.lens_kv)?;
        side.pages = Some(DeviceBuffer::from_host(&p.table)?);
        Ok(side)
    }

    fn bind<'a>(&'a self, b: &mut Bindings<'a>) -> Result<()> {
        b.seq_lengths(names::SEQ_Q, &self.seq_q)?;
        b.seq_lengths(names::SEQ_KV, &self.seq_kv)?;
        if let Some(t) = &self.pages {
            for name in [names::PAGE_TABLE_K, names::PAGE_TABLE_V] {
                // SAFETY: `t` holds `Paged::table`, whose every entry (those
                // past a sequence's length included) `params::paged` checked
                // in `0..num_blocks` of the config this plan was built from
                // (the containers bound as K and V have those dims, which
                // `input` checks); the key lengths bound above went through
                // the checked `seq_lengths` against the plan's extent, and
                // `SeqLengths::new` held them to `seq_kv = pages x
                // block_size`, the keys a row covers; nothing writes `t`
                // (owned here, freed after the work).
                unsafe { b.input_page_table(name, t) }?;
            }
        }
        let Some([q, k, v, o]) = &self.offsets else {
            return Ok(());
        };
        for (name, buf) in [
            (names::RAGGED_Q, q),
            (names::RAGGED_K, k),
            (names::RAGGED_V, v),
            (names::RAGGED_O, o),
        ] {
            // SAFETY: the offsets are `SdpaConfig::ragged_offsets` of the
            // config the plan was built from (`Side::new`), from the same
            // lengths bound above through the checked `seq_lengths`; every
            // ragged tensor of this crate's graphs has packed BSHD strides
            // (`graphs::forward` with `bshd` strides for varlen, and
            // `graphs::backward`); nothing writes the buffers (owned here).
            unsafe { b.input_ragged_offsets(name, buf) }?;
        }
        Ok(())
    }
}

/// Refuse to lend cudarc memory while candle's stream is capturing (the
/// guards' contract: cudarc's waits and event records would be captured).
/// `op` names the call in the refusal (`"attention"`, `"conv2d"`, ...).
pub(crate) fn not_capturing(cs: &CudarcStream, op: &str) -> Result<()> {
    match cs.capture_status()? {
        CaptureStatus::None => Ok(()),
        other => Err(capturing(op, other)),
    }
}

/// The refusal of a call `op` while candle's stream captures (`status`).
fn capturing(op: &str, status: impl std::fmt::Debug) -> Error {
    Error::Unsupported {
        what: format!("cudnn-candle {op} while candle's stream is capturing ({status:?})"),
        needs: Some("the call outside the capture (run it once before capturing)".to_string()),
    }
}

type Read<'a> = cudnn::interop::CudarcRead<'a, f32>;
type Reads<'a> = (Option<Read<'a>>, Option<Read<'a>>, Option<Read<'a>>);

/// The extras lent to the plan (read guards on candle's stream).
fn read_extras<'a>(cs: &'a CudarcStream, e: &'a Extras<'_>) -> candle_core::Result<Reads<'a>> {
    let mut out = (None, None, None);
    if let Some(a) = &e.alibi {
        // SAFETY: as in `forward`: the guard's view goes to `plan.execute`
        // on the handle bound to `cs` only, and drops after the enqueue;
        // the stream is not capturing (checked before this call).
        out.0 = Some(unsafe { cs.read(a) }.c()?);
    }
    if let Some(s) = &e.sink {
        // SAFETY: as above.
        out.1 = Some(unsafe { cs.read(s) }.c()?);
    }
    if let Some(b) = &e.bias {
        // SAFETY: as above.
        out.2 = Some(unsafe { cs.read(b) }.c()?);
    }
    Ok(out)
}

/// Run the forward of `cfg` (inputs with `strides`, `[B, H, S, D]`
/// order): returns O (packed BSHD, candle-contiguous `(b, s, h, d_v)`)
/// and, in training, the statistics `[B, H, S_q, 1]` f32.
///
/// # Errors
/// Planning, binding (lengths checked against the plan), execution, allocation.
#[allow(clippy::type_complexity)]
pub fn forward<T: Elem>(
    dev: &CudaDevice,
    cfg: &SdpaConfig,
    strides: &[[i64; 4]; 3],
    [q, k, v]: [&CudaView<'_, T>; 3],
    side: Option<&Side>,
    extras: &Extras<'_>,
) -> candle_core::Result<(CudaSlice<T>, Option<CudaSlice<f32>>)> {
    if crate::capture::is_capturing() {
        if side.is_some() {
            return Err(to_candle(crate::capture::refusal(
                "attention (lengths or offsets)",
                "its lengths and offsets are per-call device buffers made from host values",
            )));
        }
        return crate::capture::forward(dev, cfg, strides, [q, k, v], None, extras);
    }
    let graph = graphs::forward(cfg, strides).c()?;
    let [_, _, _, od] = graphs::dims(cfg);
    let mut o = dev.alloc_zeros::<T>(count(&od).c()?)?;
    let mut stats = if cfg.is_training {
        Some(dev.alloc_zeros::<f32>(count(&[cfg.batch, cfg.heads, cfg.seq_q]).c()?)?)
    } else {
        None
    };
    with_handle(dev, |cs, handle, ordinal| {
        let plan = device::plan(ordinal, &graph).c()?;
        expect_layout(plan.io(), names::O, od, bshd(od)).c()?;
        not_capturing(cs, "attention").c()?;
        // SAFETY: the contract of `CudarcStream::read`/`write`: every view of these guards
        // goes to `plan.execute` with `handle` only, which is bound to
        // `cs` (the work is queued on candle's stream, where cudarc records
        // the events); the guards drop at the end of this closure, after
        // the enqueue; the stream is not capturing (checked above).
        let (qr, kr, vr) = unsafe { (cs.read(q), cs.read(k), cs.read(v)) };
        let (qr, kr, vr) = (qr.c()?, kr.c()?, vr.c()?);
        // SAFETY: as above.
        let mut ow = unsafe { cs.write(&mut o) }.c()?;
        let mut sw = match stats.as_mut() {
            // SAFETY: as above.
            Some(s) => Some(unsafe { cs.write(s) }.c()?),
            None => None,
        };
        let ex = read_extras(cs, extras)?;
        let mut b = plan.bindings();
        b.input(names::Q, qr.view()).c()?;
        b.input(names::K, kr.view()).c()?;
        b.input(names::V, vr.view()).c()?;
        b.output(names::O, ow.view_mut()).c()?;
        for (name, r) in [
            (names::ALIBI, &ex.0),
            (names::SINK, &ex.1),
            (names::BIAS, &ex.2),
        ] {
            if let Some(r) = r {
                b.input(name, r.view()).c()?;
            }
        }
        if let Some(sw) = sw.as_mut() {
            b.output(names::STATS, sw.view_mut()).c()?;
        }
        if let Some(side) = side {
            side.bind(&mut b).c()?;
        }
        plan.execute(handle, &mut b).c()
    })?;
    Ok((o, stats))
}

/// Run the backward of `cfg` (every tensor packed BSHD): writes dQ, dK, dV.
///
/// # Errors
/// As [`forward`].
#[allow(clippy::too_many_arguments)]
pub fn backward<T: Elem>(
    dev: &CudaDevice,
    cfg: &SdpaConfig,
    [q, k, v, o, d_o]: [&CudaView<'_, T>; 5],
    stats: &CudaSlice<f32>,
    side: Option<&Side>,
    extras: &Extras<'_>,
    [dq, dk, dv]: [&mut cudarc::driver::CudaViewMut<'_, T>; 3],
) -> candle_core::Result<()> {
    let graph = graphs::backward(cfg).c()?;
    let [qd, kd, vd, _] = graphs::dims(cfg);
    with_handle(dev, |cs, handle, ordinal| {
        let plan = device::plan(ordinal, &graph).c()?;
        for (n, d) in [(names::DQ, qd), (names::DK, kd), (names::DV, vd)] {
            expect_layout(plan.io(), n, d, bshd(d)).c()?;
        }
        not_capturing(cs, "attention").c()?;
        // SAFETY: as in `forward`: the views go to `plan.execute` on
        // `handle` (bound to candle's stream `cs`) only, the guards drop
        // after the enqueue, the stream is not capturing.
        let r = unsafe { [cs.read(q), cs.read(k), cs.read(v), cs.read(o), cs.read(d_o)] };
        let [qr, kr, vr, or, dor] = r;
        let (qr, kr, vr, or, dor) = (qr.c()?, kr.c()?, vr.c()?, or.c()?, dor.c()?);
        // SAFETY: as above.
        let sr = unsafe { cs.read(stats) }.c()?;
        // SAFETY: as above.
        let (dqw, dkw, dvw) = unsafe { (cs.write(dq), cs.write(dk), cs.write(dv)) };
        let (mut dqw, mut dkw, mut dvw) = (dqw.c()?, dkw.c()?, dvw.c()?);
        // The backward graph takes the slopes, not the sinks (the
        // statistics carry them; no dSink is asked for).
        let ex = read_extras(cs, extras)?;
        let mut b = plan.bindings();
        b.input(names::Q, qr.view()).c()?;
        b.input(names::K, kr.view()).c()?;
        b.input(names::V, vr.view()).c()?;
        b.input(names::O, or.view()).c()?;
        for (name, r) in [(names::ALIBI, &ex.0), (names::BIAS, &ex.2)] {
            if let Some(r) = r {
                b.input(name, r.view()).c()?;
            }
        }
        b.input(names::DO, dor.view()).c()?;
        b.input(names::STATS, sr.view()).c()?;
        b.output(names::DQ, dqw.view_mut()).c()?;
        b.output(names::DK, dkw.view_mut()).c()?;
        b.output(names::DV, dvw.view_mut()).c()?;
        if let Some(side) = side {
            side.bind(&mut b).c()?;
        }
        plan.execute(handle, &mut b).c()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_refusal_names_the_call() {
        // The refusal names the call that was made (review: conv and norm
        // calls were refused as "attention").
        for op in [
            "conv2d",
            "conv2d backward",
            "norm",
            "norm backward",
            "attention",
        ] {
            let e = capturing(op, CaptureStatus::Active).to_string();
            assert!(e.contains(&format!("cudnn-candle {op} while")), "{e}");
            if op != "attention" {
                assert!(!e.contains("attention"), "{e}");
            }
        }
    }
}
