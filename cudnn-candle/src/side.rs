//! The side inputs of the attention ops: ALiBi slopes, the ALiBi score
//! bias, attention sinks (their views on the device, their preparation on
//! candle tensors), and the two-row query a decode step with sinks runs on.

use candle_core::backend::BackendStorage;
use candle_core::{CudaStorage, DType as CDType, Layout, Storage, Tensor};
use cudarc::driver::{CudaSlice, CudaView};
use cudnn::Error;

use crate::attn::{on_cuda, same_device};
use crate::device::{IntoCandle, to_candle};
use crate::params::{self, AttnParams};

/// A `(heads,)` f32 side input (ALiBi slopes, sinks) as a view of its
/// elements, on q's device.
pub(crate) fn f32_view<'a>(
    st: &'a Storage,
    l: &Layout,
    q: &CudaStorage,
    name: &str,
) -> candle_core::Result<CudaView<'a, f32>> {
    let Storage::Cuda(c) = st else {
        return Err(on_cuda(name));
    };
    same_device(q, c, name)?;
    let n = l.shape().elem_count();
    if c.dtype() != CDType::F32 || !l.is_contiguous() {
        return Err(to_candle(Error::invalid(
            name,
            "must be a contiguous f32 tensor",
            format!("{:?} contiguous={}", c.dtype(), l.is_contiguous()),
        )));
    }
    let slice: &CudaSlice<f32> = c.as_cuda_slice::<f32>()?;
    let at = l.start_offset();
    at.checked_add(n)
        .and_then(|end| slice.try_slice(at..end))
        .ok_or_else(|| {
            to_candle(Error::invalid(
                format!("{name} extent"),
                format!("must be inside its buffer of {} elements", slice.len()),
                format!("{at}..+{n}"),
            ))
        })
}

/// FlashAttention's shape rule for ALiBi slopes (`set_params_alibi`):
/// `(heads,)` or `(batch, heads)` with this call's batch. Rank-2 slopes
/// of another first dim are refused here, whether or not their rows are
/// equal (the rows are otherwise reduced to their first, or taken per
/// sequence); the head count is checked with the op's shapes.
///
/// # Errors
/// Typed, naming `alibi_slopes` and the shape wanted.
pub(crate) fn slope_batch(p: &AttnParams, batch: usize) -> candle_core::Result<()> {
    match &p.alibi_slopes {
        Some(t) if t.rank() == 2 && t.dim(0)? != batch => Err(to_candle(Error::invalid(
            "alibi_slopes",
            format!(
                "must be (heads,) or (batch, heads) with this call's batch {batch} (FlashAttention's rule)"
            ),
            format!("{:?}", t.dims()),
        ))),
        _ => Ok(()),
    }
}

/// The params as the ops take them: FlashAttention's `(batch, heads)`
/// ALiBi slopes with equal rows as their first row (cuDNN's slopes are per
/// head; the rows are read to the host to check it), f16 / bf16 sinks
/// widened to f32, both contiguous.
///
/// # Errors
/// `(batch, heads)` slopes whose rows differ (typed, naming
/// `alibi_slopes`; the varlen, KV-cache and paged calls take them:
/// [`ready_params_rows`]); candle's.
pub(crate) fn ready_params(p: &AttnParams) -> candle_core::Result<AttnParams> {
    let (p2, rows) = ready_params_rows(p)?;
    if let (Some(_), Some(t)) = (rows, &p.alibi_slopes) {
        let v = t.to_dtype(CDType::F32)?.to_vec2::<f32>()?;
        let i = v.windows(2).position(|w| w[0] != w[1]).unwrap_or(0);
        return Err(to_candle(Error::Unsupported {
            what: format!(
                "alibi_slopes of shape {:?} whose rows {i} and {} differ in a call that takes one slope per head, shared by the batch (cuDNN's ALiBi: dense calls and captured calls; the varlen, KV-cache and paged calls outside a capture take differing rows, as a per-sequence score bias)",
                t.dims(),
                i + 1
            ),
            needs: Some("(heads,) slopes, or (batch, heads) with equal rows".to_string()),
        }));
    }
    Ok(p2)
}

/// [`ready_params`], `(batch, heads)` slopes whose rows differ taken too:
/// the params hold their first row (for the shape checks) and the rows
/// come back apart, f32 `(batch, heads)`, contiguous and constant (the
/// caller builds a per-sequence score bias from them).
///
/// # Errors
/// candle's.
pub(crate) fn ready_params_rows(
    p: &AttnParams,
) -> candle_core::Result<(AttnParams, Option<Tensor>)> {
    crate::precheck::side_dtypes(
        p.alibi_slopes.as_ref().map(Tensor::dtype),
        p.sinks.as_ref().map(Tensor::dtype),
    )
    .c()?;
    crate::precheck::prepared();
    let mut p = p.clone();
    let mut rows = None;
    if let Some(t) = &p.alibi_slopes {
        let t = if t.rank() == 2 {
            let v = t.to_dtype(CDType::F32)?.to_vec2::<f32>()?;
            if v.windows(2).any(|w| w[0] != w[1]) {
                rows = Some(crate::conv::for_cudnn(&t.detach())?);
            }
            t.get(0)?
        } else {
            t.clone()
        };
        p.alibi_slopes = Some(crate::conv::for_cudnn(&t)?);
    }
    if let Some(s) = &p.sinks {
        let s = match s.dtype() {
            CDType::F16 | CDType::BF16 => s.to_dtype(CDType::F32)?,
            _ => s.clone(),
        };
        p.sinks = Some(crate::conv::for_cudnn(&s)?);
    }
    Ok((p, rows))
}

/// A decode step (`seq_q = 1`) with sinks, which cuDNN does not take (NVIDIA's
/// frontend refuses a sink for a single query row): q with a copy of its
/// row before it (`seq_q = 2`) and `p`'s mask reduced to what it means for
/// that single row; the caller keeps row 1. Exact: the real row is the
/// last, so its bottom-right diagonal position (`s_kv - 1`, or `len - 1`
/// per sequence) is the same as alone, and the dummy row's output is
/// dropped (its gradient is zero: it joins no loss).
///
/// The reduction (FlashAttention also turns causal off for one query row):
/// a right bound (causal included) hides nothing from the last row, so it
/// goes; a left window `l >= max_kv - 1` reaches key 0 of every sequence,
/// so it goes too. `max_kv` is the most keys a sequence can have (dense:
/// `seq_kv`; KV cache: its capacity). Without it the two rows would be
/// masked bottom-right with `seq_q = 2 > seq_kv = 1`, which cuDNN refuses.
///
/// # Errors
/// candle's.
pub(crate) fn sink_decode_pad(
    q: &Tensor,
    max_kv: usize,
    p: &AttnParams,
) -> candle_core::Result<Option<(Tensor, AttnParams)>> {
    if p.sinks.is_none() || q.rank() != 4 || q.dim(1)? != 1 {
        return Ok(None);
    }
    crate::precheck::attn_input("q", q)?;
    crate::precheck::prepared();
    Ok(Some((
        Tensor::cat(&[q, q], 1)?,
        params::single_row_mask(p, max_kv),
    )))
}

/// FlashAttention's ALiBi with `p`'s window as a score bias `(1, heads,
/// seq_q, seq_kv)` f32 on the slopes' device: `slope[h] * -|d - j|` with
/// `d = i + seq_kv - seq_q`, `-inf` where the window hides the key
/// ([`params::alibi::alibi_window`]). Built on the device from two
/// `arange`s (the host holds `seq_q + seq_kv` integers, never the
/// `seq_q x seq_kv` matrix; a device allocation that fails is candle's
/// error, not an abort). The slopes are constants (detached).
///
/// # Errors
/// Slopes not f32 `(heads,)`, a row that sees no key (typed, naming
/// `alibi_slopes`); candle's.
pub(crate) fn alibi_bias_tensor(
    slopes: &Tensor,
    p: &AttnParams,
    (sq, skv, h): (usize, usize, usize),
) -> candle_core::Result<Tensor> {
    if slopes.dtype() != CDType::F32 || slopes.dims() != [h] {
        return Err(to_candle(Error::invalid(
            "alibi_slopes",
            format!(
                "must be f32 (heads,) = ({h},) (a (batch, heads) tensor with equal rows is taken as its first row)"
            ),
            format!("{:?} {:?}", slopes.dtype(), slopes.dims()),
        )));
    }
    let w = params::alibi::alibi_window(p, (sq, skv), skv).c()?;
    let dev = slopes.device();
    let (sq64, skv64) = (
        params::to_i64("seq_q", sq).c()?,
        params::to_i64("seq_kv", skv).c()?,
    );
    // diag(i) - j, (sq, skv) i64 on the device.
    let diag = Tensor::arange(skv64 - sq64, skv64, dev)?.reshape((sq, 1))?;
    let cols = Tensor::arange(0i64, skv64, dev)?.reshape((1, skv))?;
    let d = diag.broadcast_sub(&cols)?;
    let dist = d.to_dtype(CDType::F32)?.abs()?.neg()?;
    // j >= diag - l  <=>  diag - j <= l;  j <= diag + r  <=>  diag - j >= -r.
    let mut sees: Option<Tensor> = None;
    for hit in [w.left.map(|l| d.le(l)), w.right.map(|r| d.ge(-r))]
        .into_iter()
        .flatten()
    {
        let hit = hit?;
        sees = Some(match sees {
            None => hit,
            Some(s) => s.minimum(&hit)?,
        });
    }
    let bias = slopes
        .detach()
        .reshape((h, 1, 1))?
        .broadcast_mul(&dist.unsqueeze(0)?)?;
    let bias = match sees {
        None => bias,
        Some(s) => {
            let ninf = Tensor::new(f32::NEG_INFINITY, dev)?.broadcast_as(bias.shape())?;
            s.unsqueeze(0)?
                .broadcast_as(bias.shape())?
                .where_cond(&bias, &ninf)?
        }
    };
    bias.unsqueeze(0)?.contiguous()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::single_row_mask;
    use candle_core::Device;

    proptest::proptest! {
        /// Any slope shape against FlashAttention's rule (`(heads,)` or
        /// `(batch, heads)`; the head count is the op's check): refused,
        /// typed, naming `alibi_slopes`, exactly when rank 2 with another
        /// batch; never a panic.
        #[test]
        fn slope_batch_is_flash_attention_s(
            rank2: bool,
            rows in 0usize..5,
            heads in 1usize..4,
            batch in 0usize..5,
        ) {
            let dims: Vec<usize> = if rank2 { vec![rows, heads] } else { vec![heads] };
            let t = Tensor::zeros(dims.as_slice(), CDType::F32, &Device::Cpu).unwrap();
            let p = AttnParams::new(1.0).alibi_slopes(Some(t));
            let fa_ok = dims == [heads] || dims == [batch, heads];
            match slope_batch(&p, batch) {
                Ok(()) => proptest::prop_assert!(fa_ok || !rank2),
                Err(e) => {
                    proptest::prop_assert!(rank2 && !fa_ok);
                    proptest::prop_assert!(e.to_string().contains("alibi_slopes"), "{}", e);
                }
            }
        }
    }

    /// Review (alibi) defect 4: `(3, heads)` slopes with equal rows on a
    /// batch of 2 are refused, typed, naming `alibi_slopes`, by every
    /// entry point (FlashAttention's `set_params_alibi` takes `(heads,)`
    /// or `(batch, heads)` only); `(2, heads)` and `(heads,)` pass this
    /// check (then the host refusal of CPU tensors comes). Before, the
    /// rows were reduced to their first and the call went on.
    #[test]
    fn slopes_of_another_batch_are_refused_typed() {
        let z = |d: &[usize]| Tensor::zeros(d, CDType::F16, &Device::Cpu).unwrap();
        let rows = |b: usize| Tensor::ones((b, 2), CDType::F32, &Device::Cpu).unwrap();
        let (q, k) = (z(&[2, 3, 2, 64]), z(&[2, 5, 2, 64]));
        let lens = Tensor::new(&[5u32, 5], &Device::Cpu).unwrap();
        let table = Tensor::new(&[[0i32], [1]], &Device::Cpu).unwrap();
        let plens = Tensor::new(&[5i32, 5], &Device::Cpu).unwrap();
        let (qv, kv) = (z(&[6, 2, 64]), z(&[10, 2, 64]));
        let cq = Tensor::new(&[0u32, 3, 6], &Device::Cpu).unwrap();
        let ck = Tensor::new(&[0u32, 5, 10], &Device::Cpu).unwrap();
        for (b, bad) in [(3usize, true), (2, false), (1, true)] {
            let p = AttnParams::new(1.0).alibi_slopes(Some(rows(b)));
            let calls = [
                ("dense", crate::flash_attn_with(&q, &k, &k, &p)),
                ("kvcache", crate::flash_attn_kvcache(&q, &k, &k, &lens, &p)),
                (
                    "paged",
                    crate::flash_attn_paged(
                        &q,
                        &z(&[2, 8, 2, 64]),
                        &z(&[2, 8, 2, 64]),
                        &table,
                        &plens,
                        &p,
                    ),
                ),
                (
                    "varlen",
                    crate::flash_attn_varlen_with(&qv, &kv, &kv, &cq, &ck, 3, 5, &p),
                ),
            ];
            for (name, r) in calls {
                let e = r.unwrap_err();
                let names = e.to_string().contains("alibi_slopes");
                assert_eq!(names, bad, "{name} with ({b}, 2) slopes: {e}");
                if bad {
                    assert!(
                        e.to_string().contains("[3, 2]") || e.to_string().contains("[1, 2]"),
                        "{e}"
                    );
                }
            }
        }
    }

    #[test]
    fn sink_decode_pad_repeats_the_row_only_for_decode_with_sinks() {
        // f16 (attention's dtypes; 0..16 exact): other dtypes are refused
        // before the copy.
        let q = Tensor::arange(0f32, 16.0, &Device::Cpu)
            .unwrap()
            .reshape((2, 1, 2, 4))
            .unwrap()
            .to_dtype(CDType::F16)
            .unwrap();
        let sinks = Tensor::zeros(2, CDType::F32, &Device::Cpu).unwrap();
        let p = AttnParams::new(1.0).sinks(Some(sinks));
        let (q2, p2) = sink_decode_pad(&q, 5, &p).unwrap().unwrap();
        assert_eq!(p2, p);
        assert_eq!(q2.dims(), [2, 2, 2, 4]);
        for row in 0..2 {
            let r = q2.narrow(1, row, 1).unwrap().flatten_all().unwrap();
            let r = r.to_dtype(CDType::F32).unwrap();
            assert_eq!(
                r.to_vec1::<f32>().unwrap(),
                (0..16).map(|x| x as f32).collect::<Vec<_>>()
            );
        }
        assert!(
            sink_decode_pad(&q, 5, &AttnParams::new(1.0))
                .unwrap()
                .is_none()
        );
        let q3 = Tensor::zeros((1, 3, 2, 4), CDType::F16, &Device::Cpu).unwrap();
        // A refused dtype is typed, before the copy.
        let q8 = q.to_dtype(CDType::F32).unwrap();
        let e = sink_decode_pad(&q8, 5, &p).unwrap_err().to_string();
        assert!(e.contains("q dtype"), "{e}");
        assert!(sink_decode_pad(&q3, 5, &p).unwrap().is_none());
    }

    /// The last row of a decode step at `d = s_kv - 1` sees `j` in `[d - l,
    /// d + r]` (FlashAttention's local rule): the reduced params mask
    /// exactly the same keys of that row, for every window, and never
    /// keep a right bound (causal is off, as FlashAttention does for one
    /// query row).
    #[test]
    fn single_row_mask_keeps_what_the_last_row_sees() {
        for skv in 1..9usize {
            for l in [None, Some(0), Some(1), Some(3), Some(7), Some(8), Some(20)] {
                for r in [None, Some(0), Some(1), Some(5)] {
                    let p = AttnParams::new(1.0).window(l, r);
                    let p2 = single_row_mask(&p, skv);
                    assert_eq!(p2.window_size_right, None);
                    let d = skv as i64 - 1;
                    for j in 0..skv as i64 {
                        let want = l.is_none_or(|l| j >= d - l as i64)
                            && r.is_none_or(|r| j <= d + r as i64);
                        let got = p2.window_size_left.is_none_or(|l| j >= d - l as i64);
                        assert_eq!(got, want, "skv {skv} l {l:?} r {r:?} j {j}");
                    }
                    if skv == 1 {
                        assert_eq!(p2.window_size_left, None);
                    }
                }
            }
        }
        // The padded call's mask is then one cuDNN takes: no causal bound,
        // and no window when s_kv = 1 (two query rows, one key).
        let p = AttnParams::new(1.0).causal(true).window(Some(0), Some(0));
        let m = crate::params::mask(&single_row_mask(&p, 1), 2, 1, false).unwrap();
        assert!(!m.causal && m.window.is_none());
    }
}
