//! GPU tier of `cudnn_candle::capture::capture_step`: a whole decode step
//! (candle's rms norm from ops, matmuls, a KV-cache write with
//! `slice_set`, this crate's KV-cache or paged attention, a softmax from
//! ops) captured once on candle's stream and replayed with new inputs
//! written in place; each replay against the same step run eagerly on the
//! GPU and against the step on candle's CPU in f32 (an independent
//! reference: candle's CPU ops and the matmul-softmax-matmul attention of
//! `gpu_parts/reference.rs`); the step's drop right after a launch leaves
//! the outputs readable and right; refusals (cudarc's own capture, this
//! crate's norm inside the step) are typed; candle's broadcast ops run
//! from candle's host-to-device cache (a miss is candle's error); a step
//! dropped inside another step's closure leaks what it kept.

use candle_core::{D, DType, Device, Tensor};
use cudnn_candle::AttnParams;
use cudnn_candle::capture::{capture_step, flash_attn_kvcache, flash_attn_paged};

use super::{close, cuda, inputs, tol};
use crate::reference::reference;
use crate::support::{TestResult, Trial, gpu, typed};

const S: f32 = 0.125;
const BF: DType = DType::BF16;
/// bf16 rounds at every op of the step (the GPU) but not on the CPU.
const TOL_REF: f64 = 5e-2;
/// The replay and the eager run of one step on one GPU.
const TOL_EAGER: f64 = 1e-2;

/// candle's host-to-device cache guard (candle 0.11.1), which
/// `capture_step` holds while the step is captured: the warm-up runs under
/// it too, on the same thread.
fn htod_cache(dev: &Device) -> candle_core::Result<impl Sized> {
    Ok(dev.as_cuda_device()?.enable_cuda_graph_htod_cache())
}

fn randn(s: &[usize]) -> candle_core::Result<Tensor> {
    // Rounded to bf16, so both sides start from the same values.
    Tensor::randn(0f32, 1.0, s, &Device::Cpu)?
        .to_dtype(BF)?
        .to_dtype(DType::F32)
}

fn rms(x: &Tensor) -> candle_core::Result<Tensor> {
    let ms = (x.sqr()?.mean_keepdim(D::Minus1)? + 1e-5)?;
    x.broadcast_div(&ms.sqrt()?)
}

fn softmax(t: &Tensor) -> candle_core::Result<Tensor> {
    let e = t.broadcast_sub(&t.max_keepdim(D::Minus1)?)?.exp()?;
    e.broadcast_div(&e.sum_keepdim(D::Minus1)?)
}

/// The projections of the step (`(h*d, h*d)`, `(h*d, hkv*d)` x2,
/// `(h*d, h*d)`), on `dev` in `dt`.
struct W {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
}

impl W {
    fn new(hd: usize, kvd: usize) -> candle_core::Result<Self> {
        let s = 1.0 / (hd as f64).sqrt();
        Ok(W {
            q: (randn(&[hd, hd])? * s)?,
            k: (randn(&[hd, kvd])? * s)?,
            v: (randn(&[hd, kvd])? * s)?,
            o: (randn(&[hd, hd])? * s)?,
        })
    }
    fn to(&self, dev: &Device, dt: DType) -> candle_core::Result<Self> {
        let m = |t: &Tensor| t.to_dtype(dt)?.to_device(dev);
        Ok(W {
            q: m(&self.q)?,
            k: m(&self.k)?,
            v: m(&self.v)?,
            o: m(&self.o)?,
        })
    }
}

/// Sizes of the KV-cache case.
const B: usize = 2;
const H: usize = 4;
const HKV: usize = 2;
const DH: usize = 64;
const CAP: usize = 32;
const POS: usize = 20;

/// The step's candle ops before attention: the normed input, q, and the
/// new key and value rows, written into the caches at `POS`.
fn pre(x: &Tensor, w: &W, kc: &Tensor, vc: &Tensor) -> candle_core::Result<Tensor> {
    let h = rms(x)?;
    let q = h.matmul(&w.q)?.reshape((B, 1, H, DH))?;
    let kn = h.matmul(&w.k)?.reshape((B, 1, HKV, DH))?;
    let vn = h.matmul(&w.v)?.reshape((B, 1, HKV, DH))?;
    kc.slice_set(&kn, 1, POS)?;
    vc.slice_set(&vn, 1, POS)?;
    Ok(q)
}

fn post(o: &Tensor, w: &W) -> candle_core::Result<Tensor> {
    softmax(&o.reshape((B, H * DH))?.matmul(&w.o)?)
}

/// The step on candle's CPU in f32: the caches are updated as the GPU
/// step updates them, attention by the reference on each sequence's
/// first `lens[b]` keys.
fn cpu_step(
    x: &Tensor,
    w: &W,
    kc: &Tensor,
    vc: &Tensor,
    lens: &[u32],
    p: &AttnParams,
) -> candle_core::Result<Tensor> {
    let q = pre(x, w, kc, vc)?;
    let mut os = Vec::new();
    for (b, &l) in lens.iter().enumerate() {
        let l = l as usize;
        os.push(reference(
            &q.narrow(0, b, 1)?,
            &kc.narrow(0, b, 1)?.narrow(1, 0, l)?,
            &vc.narrow(0, b, 1)?.narrow(1, 0, l)?,
            p,
        )?);
    }
    post(&Tensor::cat(&os, 0)?, w)
}

/// A KV-cache decode step captured whole and replayed 6 times with a new
/// input (written in place) and new lengths (`set_cache_seqlens`, around
/// the written row: with it and without it).
fn kvcache_step() -> TestResult {
    let dev = cuda()?;
    let p = AttnParams::new(S).causal(true);
    let w0 = W::new(H * DH, HKV * DH)?;
    let (wg, wc) = (w0.to(&dev, BF)?, w0.to(&Device::Cpu, DType::F32)?);
    let (k0, v0) = (randn(&[B, CAP, HKV, DH])?, randn(&[B, CAP, HKV, DH])?);
    let g = |t: &Tensor| t.to_dtype(BF)?.to_device(&dev);
    let (kg, vg) = (g(&k0)?, g(&v0)?);
    let (kcpu, vcpu) = (k0.copy()?, v0.copy()?);
    let x = g(&randn(&[B, H * DH])?)?;
    let mut lens = vec![POS as u32 + 1; B];
    let eager = |lens: &[u32]| -> candle_core::Result<Tensor> {
        let q = pre(&x, &wg, &kg, &vg)?;
        let o = cudnn_candle::flash_attn_kvcache(&q, &kg, &vg, &Tensor::new(lens, &dev)?, &p)?;
        post(&o, &wg)
    };
    // Once eagerly, under candle's host-to-device cache (as capture_step
    // runs the step): plans, workspace, candle's kernels loaded, candle's
    // dims/strides uploads cached.
    {
        let _cache = htod_cache(&dev)?;
        eager(&lens)?;
    }
    // SAFETY: nothing else ends the capture or uses candle's stream on
    // another thread; `out` is read only after launches; x, the weights
    // and the caches outlive the step and are written on candle's stream.
    let (mut step, (out, slot)) = unsafe {
        capture_step(&dev, || {
            let q = pre(&x, &wg, &kg, &vg)?;
            let (o, slot) = flash_attn_kvcache(&q, &kg, &vg, &lens, &p)?;
            Ok((post(&o, &wg)?, slot))
        })?
    };
    assert_eq!(step.calls(), 1, "one call of this crate in the graph");
    for i in 0..6 {
        let xn = randn(&[B, H * DH])?;
        x.slice_set(&g(&xn)?, 0, 0)?;
        lens = vec![(POS - 2 + i % 4) as u32, (POS + 1 - i % 2) as u32];
        step.set_cache_seqlens(slot, &lens)?;
        // SAFETY: as above.
        unsafe { step.launch()? };
        eprintln!("  replay {i} (lens {lens:?}):");
        let want = cpu_step(&xn, &wc, &kcpu, &vcpu, &lens, &p)?;
        close("out vs the CPU step", &out, &want, TOL_REF)?;
        let e = eager(&lens)?
            .to_device(&Device::Cpu)?
            .to_dtype(DType::F32)?;
        close("out vs the eager GPU step", &out, &e, TOL_EAGER)?;
    }
    assert_eq!(step.launched(), 6);
    Ok(())
}

/// The step dropped right after its launch (the launch may still run):
/// the outputs stay readable and right (the drop waits for the launch
/// before it frees anything the graph uses).
fn drop_after_launch() -> TestResult {
    let dev = cuda()?;
    let p = AttnParams::new(S).causal(true);
    let w0 = W::new(H * DH, HKV * DH)?;
    let (wg, wc) = (w0.to(&dev, BF)?, w0.to(&Device::Cpu, DType::F32)?);
    let (k0, v0) = (randn(&[B, CAP, HKV, DH])?, randn(&[B, CAP, HKV, DH])?);
    let g = |t: &Tensor| t.to_dtype(BF)?.to_device(&dev);
    let (kg, vg) = (g(&k0)?, g(&v0)?);
    let x0 = randn(&[B, H * DH])?;
    let x = g(&x0)?;
    let lens = vec![POS as u32 + 1; B];
    {
        let _cache = htod_cache(&dev)?;
        let q = pre(&x, &wg, &kg, &vg)?;
        let o = cudnn_candle::flash_attn_kvcache(
            &q,
            &kg,
            &vg,
            &Tensor::new(lens.as_slice(), &dev)?,
            &p,
        )?;
        post(&o, &wg)?;
    }
    // SAFETY: as in `kvcache_step`.
    let (mut step, (out, _slot)) = unsafe {
        capture_step(&dev, || {
            let q = pre(&x, &wg, &kg, &vg)?;
            let (o, slot) = flash_attn_kvcache(&q, &kg, &vg, &lens, &p)?;
            Ok((post(&o, &wg)?, slot))
        })?
    };
    // SAFETY: as above.
    unsafe { step.launch()? };
    drop(step);
    let want = cpu_step(&x0, &wc, &k0.copy()?, &v0.copy()?, &lens, &p)?;
    close("out after the step dropped", &out, &want, TOL_REF)
}

/// A paged decode step captured whole (vLLM's layout): q from candle's
/// ops, paged attention, the output projection; replayed with a new
/// input, table and lengths (`update_block_table`) each time.
fn paged_step() -> TestResult {
    let dev = cuda()?;
    let p = AttnParams::new(S).causal(true);
    let (nb, bs, per_seq) = (12usize, 16usize, 3usize);
    let w0 = W::new(H * DH, HKV * DH)?;
    let (wg, wc) = (w0.to(&dev, BF)?, w0.to(&Device::Cpu, DType::F32)?);
    let (kc, vc) = (randn(&[nb, bs, HKV, DH])?, randn(&[nb, bs, HKV, DH])?);
    let g = |t: &Tensor| t.to_dtype(BF)?.to_device(&dev);
    let (kg, vg) = (g(&kc)?, g(&vc)?);
    let x = g(&randn(&[B, H * DH])?)?;
    let table_at = |s: usize| -> Vec<i32> {
        (0..B * per_seq)
            .map(|i| ((i * 5 + 1 + s * 7) % nb) as i32)
            .collect()
    };
    let mut lens = vec![9u32, 40];
    let q_of = |x: &Tensor, w: &W| -> candle_core::Result<Tensor> {
        rms(x)?.matmul(&w.q)?.reshape((B, 1, H, DH))
    };
    let eager = |t: &[i32], l: &[u32]| -> candle_core::Result<Tensor> {
        let tg = Tensor::new(t, &dev)?.reshape((B, per_seq))?;
        let lg = Tensor::new(
            l.iter().map(|&v| v as i32).collect::<Vec<_>>().as_slice(),
            &dev,
        )?;
        let o = cudnn_candle::flash_attn_paged(&q_of(&x, &wg)?, &kg, &vg, &tg, &lg, &p)?;
        post(&o, &wg)
    };
    {
        let _cache = htod_cache(&dev)?;
        eager(&table_at(0), &lens)?;
    }
    // SAFETY: as in `kvcache_step`.
    let (mut step, (out, slot)) = unsafe {
        capture_step(&dev, || {
            let q = q_of(&x, &wg)?;
            let (o, slot) = flash_attn_paged(&q, &kg, &vg, &table_at(0), per_seq, &lens, &p)?;
            Ok((post(&o, &wg)?, slot))
        })?
    };
    for s in 1..5 {
        let xn = randn(&[B, H * DH])?;
        x.slice_set(&g(&xn)?, 0, 0)?;
        lens.iter_mut().for_each(|l| *l += 1);
        let table = table_at(s);
        step.update_block_table(slot, &table, &lens)?;
        // SAFETY: as above.
        unsafe { step.launch()? };
        eprintln!("  replay {s}:");
        let qc = q_of(&xn, &wc)?;
        let mut os = Vec::new();
        for (i, &l) in lens.iter().enumerate() {
            let idx: Vec<u32> = table[i * per_seq..(i + 1) * per_seq]
                .iter()
                .map(|&v| v as u32)
                .collect();
            let idx = Tensor::new(idx.as_slice(), &Device::Cpu)?;
            let gather = |c: &Tensor| -> candle_core::Result<Tensor> {
                c.index_select(&idx, 0)?
                    .reshape((1, per_seq * bs, HKV, DH))?
                    .narrow(1, 0, l as usize)
            };
            os.push(reference(
                &qc.narrow(0, i, 1)?,
                &gather(&kc)?,
                &gather(&vc)?,
                &p,
            )?);
        }
        let want = post(&Tensor::cat(&os, 0)?, &wc)?;
        close("out vs the CPU step", &out, &want, TOL_REF)?;
        let e = eager(&table, &lens)?
            .to_device(&Device::Cpu)?
            .to_dtype(DType::F32)?;
        close("out vs the eager GPU step", &out, &e, TOL_EAGER)?;
    }
    Ok(())
}

/// Refusals, typed: this crate's calls while cudarc itself captures
/// candle's stream (not an owned capture); this crate's norm inside a
/// step (the step fails, no capture stays open, the next step works).
fn refusals() -> TestResult {
    let dev = cuda()?;
    let q = Tensor::zeros((1, 1, 4, 64), BF, &dev)?;
    let k = Tensor::zeros((1, 32, 4, 64), BF, &dev)?;
    cudnn_candle::flash_attn(&q, &k, &k, S, true)?;
    let cs = dev.as_cuda_device()?.cuda_stream();
    cs.begin_capture(cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(|e| format!("begin_capture: {e:?}"))?;
    let r = cudnn_candle::flash_attn(&q, &k, &k, S, true);
    let ended = cs.end_capture(cudarc::driver::sys::CUgraphInstantiate_flags(0));
    let e = r.expect_err("refused while cudarc captures");
    assert!(
        matches!(typed(&e), Some(cudnn::Error::CaptureUnsafe { .. })),
        "{e}"
    );
    drop(ended);
    let x = Tensor::ones((4, 64), BF, &dev)?;
    let wt = Tensor::ones(64, BF, &dev)?;
    // SAFETY: the step fails; nothing made inside it is used.
    let e = unsafe { capture_step(&dev, || cudnn_candle::rms_norm(&x, &wt, None, 1e-5)) }
        .expect_err("a norm inside the step");
    assert!(
        matches!(typed(&e), Some(cudnn::Error::CaptureUnsafe { .. })),
        "{e}"
    );
    assert!(!cudnn_candle::capture::is_capturing());
    // The next step works: random inputs, the output against candle's CPU
    // reference (a graph that ran nothing would leave the output's fresh
    // memory, not the attention).
    let p = AttnParams::new(S).causal(true);
    let (q0, k0, v0) = inputs((1, 1, 4, 64), (1, 32, 4, 64), BF)?;
    let g = |t: &Tensor| t.to_dtype(BF)?.to_device(&dev);
    let (q, k, v) = (g(&q0)?, g(&k0)?, g(&v0)?);
    cudnn_candle::flash_attn_with(&q, &k, &v, &p)?;
    // SAFETY: as in `kvcache_step`: q, k and v outlive the step.
    let (mut step, o) =
        unsafe { capture_step(&dev, || cudnn_candle::flash_attn_with(&q, &k, &v, &p))? };
    // SAFETY: as above.
    unsafe { step.launch()? };
    close(
        "o vs the CPU reference",
        &o,
        &reference(&q0, &k0, &v0, &p)?,
        tol(BF),
    )
}

/// candle's broadcast ops upload their dims and strides from a host
/// `Vec` (candle 0.11.1 `params_from_vec`); `capture_step` runs the step
/// under candle's host-to-device cache, so a step whose warm-up did not
/// run under it fails with candle's cache-miss error (nothing recorded
/// from freed host memory, no capture left open), and one warmed up under
/// it replays right with new inputs, against candle's CPU ops.
fn broadcast_ops_use_candles_cache() -> TestResult {
    let dev = cuda()?;
    // A shape no other test uses, so candle's process-wide cache misses.
    let (r, c) = (3usize, 37usize);
    let x0 = Tensor::randn(0f32, 1.0, (r, c), &Device::Cpu)?;
    let x = x0.to_device(&dev)?;
    let f = |x: &Tensor| -> candle_core::Result<Tensor> {
        let m = x.max_keepdim(D::Minus1)?;
        x.broadcast_sub(&m)?.exp()?.broadcast_mul(&m)
    };
    f(&x)?; // warmed up without the cache: nothing cached
    // SAFETY: the step fails; nothing made inside it is used.
    let e = unsafe { capture_step(&dev, || f(&x)) }.expect_err("a cache miss inside");
    assert!(e.to_string().contains("cache miss"), "candle's miss: {e}");
    assert!(!cudnn_candle::capture::is_capturing());
    {
        let _cache = htod_cache(&dev)?;
        f(&x)?;
    }
    // SAFETY: x outlives the step and is written on candle's stream only;
    // `y` is read after launches.
    let (mut step, y) = unsafe { capture_step(&dev, || f(&x))? };
    for i in 0..3 {
        let xn = Tensor::randn(0f32, 1.0, (r, c), &Device::Cpu)?;
        x.slice_set(&xn.to_device(&dev)?, 0, 0)?;
        // SAFETY: as above.
        unsafe { step.launch()? };
        eprintln!("  replay {i}:");
        close("y vs candle's CPU ops", &y, &f(&xn)?, 1e-5)?;
    }
    Ok(())
}

/// A step dropped inside another step's closure (on candle's stream,
/// which that closure captures): what it kept is leaked, not freed into
/// the new capture (its frees would be replayed by every launch of the
/// new graph); the new step ends and replays right, against candle's CPU
/// reference.
fn drop_inside_another_step() -> TestResult {
    let dev = cuda()?;
    let p = AttnParams::new(S).causal(true);
    let (q0, k0, v0) = inputs((1, 1, 4, 64), (1, 32, 4, 64), BF)?;
    let g = |t: &Tensor| t.to_dtype(BF)?.to_device(&dev);
    let (q, k, v) = (g(&q0)?, g(&k0)?, g(&v0)?);
    cudnn_candle::flash_attn_with(&q, &k, &v, &p)?;
    // SAFETY: q, k and v outlive both steps; outputs read after launches.
    let (mut first, o1) =
        unsafe { capture_step(&dev, || cudnn_candle::flash_attn_with(&q, &k, &v, &p))? };
    // SAFETY: as above.
    unsafe { first.launch()? };
    let mut first = Some(first);
    // SAFETY: as above; the first step is dropped inside (the case tested).
    let (mut second, o2) = unsafe {
        capture_step(&dev, || {
            drop(first.take());
            cudnn_candle::flash_attn_with(&q, &k, &v, &p)
        })?
    };
    // SAFETY: as above.
    unsafe { second.launch()? };
    let want = reference(&q0, &k0, &v0, &p)?;
    close("the first step's output", &o1, &want, tol(BF))?;
    close("the second step's output", &o2, &want, tol(BF))
}

pub fn trials() -> Vec<Trial> {
    vec![
        gpu("capture_step_kvcache_decode_replays", kvcache_step),
        gpu(
            "capture_step_drop_after_launch_keeps_outputs",
            drop_after_launch,
        ),
        gpu("capture_step_paged_decode_replays", paged_step),
        gpu("capture_step_refusals_are_typed", refusals),
        gpu(
            "capture_step_broadcast_ops_use_candles_htod_cache",
            broadcast_ops_use_candles_cache,
        ),
        gpu(
            "capture_step_dropped_inside_another_step_leaks_what_it_kept",
            drop_inside_another_step,
        ),
    ]
}
