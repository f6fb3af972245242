//! GPU tier of `cudnn_candle::capture`: a decode step captured once and
//! replayed with new inputs written in place, each replay against the
//! eager call and candle's CPU reference (an independent implementation);
//! what the step keeps outliving the caller's tensors; drop orders; the
//! typed refusals inside a capture.

use candle_core::{DType, Device, Tensor};
use cudnn_candle::AttnParams;
use cudnn_candle::capture::{CapturedStep, capture};

use super::{close, cuda, inputs, on, tol};
use crate::reference::reference;
use crate::support::{TestResult, Trial, gpu, typed};

const S: f32 = 0.125;

fn is_capture_unsafe(e: &candle_core::Error) -> bool {
    matches!(typed(e), Some(cudnn::Error::CaptureUnsafe { .. }))
}

/// Capture `flash_attn_with(q, k, v, p)` on device tensors that the test
/// then rewrites in place; replay `steps` times with fresh values, each
/// replay against the eager call on the same values and the CPU reference.
fn replay_case(
    qd: (usize, usize, usize, usize),
    kd: (usize, usize, usize, usize),
    p: AttnParams,
    steps: usize,
) -> TestResult {
    let dev = cuda()?;
    let bf = DType::BF16;
    let p = on(&dev, p)?;
    let (q0, k0, v0) = inputs(qd, kd, bf)?;
    let g = |t: &Tensor| t.to_dtype(bf)?.to_device(&dev);
    let (q, k, v) = (g(&q0)?.copy()?, g(&k0)?.copy()?, g(&v0)?.copy()?);
    // Once eagerly: the plan is built, the workspace sized.
    cudnn_candle::flash_attn_with(&q, &k, &v, &p)?;
    let (mut step, o) = capture(&dev, || cudnn_candle::flash_attn_with(&q, &k, &v, &p))?;
    assert_eq!(step.calls(), 1, "one call in the graph");
    for i in 0..steps {
        let (qn, kn, vn) = inputs(qd, kd, bf)?;
        q.slice_set(&g(&qn)?, 0, 0)?;
        k.slice_set(&g(&kn)?, 0, 0)?;
        v.slice_set(&g(&vn)?, 0, 0)?;
        step.launch()?;
        let eager = cudnn_candle::flash_attn_with(&g(&qn)?, &g(&kn)?, &g(&vn)?, &p)?;
        eprintln!("  replay {i}:");
        close(
            "o vs eager",
            &o,
            &eager.to_device(&Device::Cpu)?.to_dtype(DType::F32)?,
            1e-6,
        )?;
        close(
            "o vs reference",
            &o,
            &reference(&qn, &kn, &vn, &p)?,
            tol(bf),
        )?;
    }
    Ok(())
}

/// The step alone keeps what the graph addresses: the caller's q, k, v
/// and the output dropped, the replays still compute the same result.
fn keeps_inputs() -> TestResult {
    let dev = cuda()?;
    let bf = DType::BF16;
    let (q0, k0, v0) = inputs((2, 1, 8, 64), (2, 96, 2, 64), bf)?;
    let g = |t: &Tensor| t.to_dtype(bf)?.to_device(&dev);
    let p = AttnParams::new(S).causal(true);
    let want = reference(&q0, &k0, &v0, &p)?;
    let (q, k, v) = (g(&q0)?, g(&k0)?, g(&v0)?);
    cudnn_candle::flash_attn_with(&q, &k, &v, &p)?;
    let (mut step, o): (CapturedStep, Tensor) =
        capture(&dev, || cudnn_candle::flash_attn_with(&q, &k, &v, &p))?;
    let o_id = o.id();
    drop((q, k, v, o));
    assert!(step.kept().len() >= 4, "q, k, v and o kept: {:?}", step);
    for _ in 0..3 {
        step.launch()?;
    }
    let o = step
        .kept()
        .iter()
        .find(|t| t.id() == o_id)
        .ok_or("the output is kept")?
        .clone();
    close("o after the caller dropped everything", &o, &want, tol(bf))?;
    // The step dropped while its last launch may still run: the output
    // (a clone) stays readable and right; candle orders the free after
    // the launch on its stream.
    step.launch()?;
    drop(step);
    close("o after the step dropped", &o, &want, tol(bf))
}

/// Drop orders: the output first, then the step; two steps of the same
/// call dropped in either order; a capture whose step fails leaves the
/// next capture working.
fn drop_orders() -> TestResult {
    let dev = cuda()?;
    let bf = DType::BF16;
    let (q0, k0, v0) = inputs((1, 1, 8, 64), (1, 64, 8, 64), bf)?;
    let g = |t: &Tensor| t.to_dtype(bf)?.to_device(&dev);
    let (q, k, v) = (g(&q0)?, g(&k0)?, g(&v0)?);
    let p = AttnParams::new(S);
    let want = reference(&q0, &k0, &v0, &p)?;
    cudnn_candle::flash_attn_with(&q, &k, &v, &p)?;
    let (mut a, oa) = capture(&dev, || cudnn_candle::flash_attn_with(&q, &k, &v, &p))?;
    let (mut b, ob) = capture(&dev, || cudnn_candle::flash_attn_with(&q, &k, &v, &p))?;
    a.launch()?;
    b.launch()?;
    drop(oa);
    drop(a);
    b.launch()?;
    close("o of the second step", &ob, &want, tol(bf))?;
    drop(b);
    close("o after both dropped", &ob, &want, tol(bf))?;
    // A step that fails: the capture ends with its error, nothing kept
    // leaks into the next one.
    let e = capture(&dev, || -> candle_core::Result<()> {
        cudnn_candle::flash_attn_with(&q, &k, &v, &p)?;
        Err(candle_core::Error::Msg("the step's own error".into()))
    })
    .expect_err("the step failed");
    assert!(e.to_string().contains("the step's own error"), "{e}");
    assert!(!cudnn_candle::capture::is_capturing());
    let (mut c, oc) = capture(&dev, || cudnn_candle::flash_attn_with(&q, &k, &v, &p))?;
    c.launch()?;
    close("o of a capture after a failed one", &oc, &want, tol(bf))
}

/// Inside a capture: calls that cannot be held are refused, typed, before
/// they queue anything; the capture still ends and replays the rest.
fn refusals() -> TestResult {
    let dev = cuda()?;
    let bf = DType::BF16;
    let (q0, k0, v0) = inputs((2, 1, 8, 64), (2, 64, 8, 64), bf)?;
    let g = |t: &Tensor| t.to_dtype(bf)?.to_device(&dev);
    let (q, k, v) = (g(&q0)?, g(&k0)?, g(&v0)?);
    let p = AttnParams::new(S).causal(true);
    cudnn_candle::flash_attn_with(&q, &k, &v, &p)?;
    let lens = Tensor::new(&[10u32, 20], &dev)?;
    let x = Tensor::zeros((1, 3, 8, 8), DType::F32, &dev)?;
    let w = Tensor::zeros((4, 3, 3, 3), DType::F32, &dev)?;
    // q as a view whose head dim is strided: the entry point would copy it.
    let qt = g(&q0.transpose(2, 3)?.contiguous()?)?.transpose(2, 3)?;
    let sinks = Tensor::zeros(8, DType::F32, &dev)?;
    let (mut step, o) = capture(&dev, || {
        let e = cudnn_candle::flash_attn_kvcache(&q, &k, &v, &lens, &p).expect_err("kvcache");
        assert!(is_capture_unsafe(&e), "kvcache: {e}");
        let e = cudnn_candle::conv2d(&x, &w, 1, 1, 1, 1).expect_err("conv2d");
        assert!(is_capture_unsafe(&e), "conv2d: {e}");
        let e = cudnn_candle::flash_attn_with(&qt, &k, &v, &p).expect_err("copy");
        assert!(is_capture_unsafe(&e), "copied q: {e}");
        let e = cudnn_candle::flash_attn_sinks(&q, &k, &v, &sinks, S, true).expect_err("sinks");
        assert!(is_capture_unsafe(&e), "one-row sinks: {e}");
        let e = capture(&dev, || Ok(())).expect_err("nested");
        assert!(is_capture_unsafe(&e), "nested capture: {e}");
        cudnn_candle::flash_attn_with(&q, &k, &v, &p)
    })?;
    assert_eq!(step.calls(), 1);
    step.launch()?;
    close("o", &o, &reference(&q0, &k0, &v0, &p)?, tol(bf))?;
    // A launch while candle's stream is captured by cudarc is refused
    // (cudarc's graph could outlive the step).
    let Device::Cuda(cd) = &dev else {
        return Err("not CUDA".into());
    };
    let cs = cd.cuda_stream();
    cs.begin_capture(
        cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
    )?;
    let r = step.launch();
    let _ = cs.end_capture(cudarc::driver::sys::CUgraphInstantiate_flags(0));
    let e = r.expect_err("launch inside cudarc's capture");
    assert!(is_capture_unsafe(&e), "{e}");
    Ok(())
}

pub fn trials() -> Vec<Trial> {
    vec![
        gpu("capture_decode_step_replays_with_new_inputs", || {
            replay_case(
                (2, 1, 8, 64),
                (2, 128, 2, 64),
                AttnParams::new(S).causal(true),
                5,
            )
        }),
        gpu("capture_prefill_windowed_softcap_replays", || {
            let p = AttnParams::new(S)
                .window(Some(16), Some(0))
                .softcap(Some(30.0));
            replay_case((1, 64, 4, 64), (1, 64, 4, 64), p, 3)
        }),
        gpu("capture_alibi_bias_and_sinks_replay", || {
            let slopes = Tensor::new(&[0.5f32, 0.25, 0.125, 0.0625], &Device::Cpu)?;
            let p = AttnParams::new(S).alibi_slopes(Some(slopes));
            replay_case((1, 16, 4, 64), (1, 32, 4, 64), p, 3)?;
            let sinks = Tensor::new(&[0.3f32, -1.0, 2.0, 0.0], &Device::Cpu)?;
            let p = AttnParams::new(S).causal(true).sinks(Some(sinks));
            replay_case((1, 32, 4, 64), (1, 32, 4, 64), p, 3)
        }),
        gpu("capture_keeps_what_the_graph_addresses", keeps_inputs),
        gpu("capture_drop_orders", drop_orders),
        gpu("capture_refusals_inside_are_typed", refusals),
    ]
}

/// A KV-cache decode loop captured once: each step writes a new query and
/// new cache contents in place, one more key per sequence
/// (`set_cache_seqlens`), replays, and compares with the eager
/// `flash_attn_kvcache` and the reference on each sequence's prefix.
fn kvcache_decode_loop() -> TestResult {
    let dev = cuda()?;
    let bf = DType::BF16;
    let (b, cap, h, hkv, d) = (4usize, 64usize, 8usize, 2usize, 64usize);
    let p = AttnParams::new(S).causal(true);
    let (q0, k0, v0) = inputs((b, 1, h, d), (b, cap, hkv, d), bf)?;
    let g = |t: &Tensor| t.to_dtype(bf)?.to_device(&dev);
    let (q, k, v) = (g(&q0)?, g(&k0)?, g(&v0)?);
    let mut lens = vec![3u32, 17, 40, 9];
    cudnn_candle::flash_attn_kvcache(&q, &k, &v, &Tensor::new(lens.as_slice(), &dev)?, &p)?;
    let (mut step, (o, slot)) = capture(&dev, || {
        cudnn_candle::capture::flash_attn_kvcache(&q, &k, &v, &lens, &p)
    })?;
    for i in 0..5 {
        let (qn, kn, vn) = inputs((b, 1, h, d), (b, cap, hkv, d), bf)?;
        q.slice_set(&g(&qn)?, 0, 0)?;
        k.slice_set(&g(&kn)?, 0, 0)?;
        v.slice_set(&g(&vn)?, 0, 0)?;
        lens.iter_mut().for_each(|l| *l += 1);
        step.set_cache_seqlens(slot, &lens)?;
        step.launch()?;
        let eager = cudnn_candle::flash_attn_kvcache(
            &g(&qn)?,
            &g(&kn)?,
            &g(&vn)?,
            &Tensor::new(lens.as_slice(), &dev)?,
            &p,
        )?;
        eprintln!("  step {i}:");
        close(
            "o vs eager",
            &o,
            &eager.to_device(&Device::Cpu)?.to_dtype(DType::F32)?,
            1e-6,
        )?;
        for (j, &l) in lens.iter().enumerate() {
            let l = l as usize;
            let want = reference(
                &qn.narrow(0, j, 1)?,
                &kn.narrow(0, j, 1)?.narrow(1, 0, l)?,
                &vn.narrow(0, j, 1)?.narrow(1, 0, l)?,
                &p,
            )?;
            close("o vs reference", &o.narrow(0, j, 1)?, &want, tol(bf))?;
        }
    }
    // Lengths the graph must not read are refused, typed, and the step
    // still replays the last good ones.
    let e = step
        .set_cache_seqlens(slot, &[1, 2, 65, 4])
        .expect_err("past capacity");
    match typed(&e) {
        Some(cudnn::Error::InvalidArgument { arg, .. }) => assert_eq!(arg, "cache_seqlens[2]"),
        other => panic!("not the typed refusal: {other:?} ({e})"),
    }
    let e = step.set_cache_seqlens(slot, &[1, 2]).expect_err("count");
    assert!(
        matches!(typed(&e), Some(cudnn::Error::Mismatch { .. })),
        "{e}"
    );
    let e = step
        .set_cache_seqlens(slot, &[0, 5, 5, 5])
        .expect_err("causal row with no key");
    assert!(
        matches!(typed(&e), Some(cudnn::Error::InvalidArgument { .. })),
        "{e}"
    );
    step.launch()?;
    Ok(())
}

pub fn kvcache_trials() -> Vec<Trial> {
    vec![gpu("capture_kvcache_decode_loop", kvcache_decode_loop)]
}

/// A paged decode loop captured once (vLLM's layout): each step writes a
/// new query in place, permutes the block table and grows the lengths
/// (`update_block_table`), replays, and compares each sequence with the
/// reference on the keys its table row gathers (on the CPU), and the
/// whole output with the eager `flash_attn_paged`.
fn paged_decode_loop() -> TestResult {
    let dev = cuda()?;
    let bf = DType::BF16;
    let (b, h, hkv, d) = (3usize, 8usize, 2usize, 64usize);
    let (nb, bs, per_seq) = (20usize, 16usize, 4usize);
    let p = AttnParams::new(S).causal(true);
    let (q0, kc, vc) = inputs((b, 1, h, d), (nb, bs, hkv, d), bf)?;
    let g = |t: &Tensor| t.to_dtype(bf)?.to_device(&dev);
    let (q, kg, vg) = (g(&q0)?, g(&kc)?, g(&vc)?);
    let table_at = |step: usize| -> Vec<i32> {
        (0..b * per_seq)
            .map(|i| ((i * 7 + 3 + step * 5) % nb) as i32)
            .collect()
    };
    let mut lens = vec![5u32, 30, 47];
    let eager = |qn: &Tensor, t: &[i32], l: &[u32]| -> candle_core::Result<Tensor> {
        let tg = Tensor::new(t, &dev)?.reshape((b, per_seq))?;
        let lg = Tensor::new(
            l.iter().map(|&x| x as i32).collect::<Vec<_>>().as_slice(),
            &dev,
        )?;
        cudnn_candle::flash_attn_paged(qn, &kg, &vg, &tg, &lg, &p)
    };
    eager(&q, &table_at(0), &lens)?;
    let (mut step, (o, slot)) = capture(&dev, || {
        cudnn_candle::capture::flash_attn_paged(&q, &kg, &vg, &table_at(0), per_seq, &lens, &p)
    })?;
    for s in 1..5 {
        let (qn, _, _) = inputs((b, 1, h, d), (1, 1, 1, 1), bf)?;
        q.slice_set(&g(&qn)?, 0, 0)?;
        lens.iter_mut().for_each(|l| *l += 1);
        let table = table_at(s);
        step.update_block_table(slot, &table, &lens)?;
        step.launch()?;
        eprintln!("  step {s}:");
        let e = eager(&g(&qn)?, &table, &lens)?;
        close(
            "o vs eager",
            &o,
            &e.to_device(&Device::Cpu)?.to_dtype(DType::F32)?,
            1e-6,
        )?;
        for (i, &l) in lens.iter().enumerate() {
            let idx: Vec<u32> = table[i * per_seq..(i + 1) * per_seq]
                .iter()
                .map(|&x| x as u32)
                .collect();
            let idx = Tensor::new(idx.as_slice(), &Device::Cpu)?;
            let gather = |c: &Tensor| -> candle_core::Result<Tensor> {
                c.index_select(&idx, 0)?
                    .reshape((1, per_seq * bs, hkv, d))?
                    .narrow(1, 0, l as usize)
            };
            let want = reference(&qn.narrow(0, i, 1)?, &gather(&kc)?, &gather(&vc)?, &p)?;
            close("o vs reference", &o.narrow(0, i, 1)?, &want, tol(bf))?;
        }
    }
    // Tables and lengths the graph must not read are refused, typed.
    let mut bad = table_at(0);
    bad[5] = nb as i32;
    let e = step
        .update_block_table(slot, &bad, &lens)
        .expect_err("block past the cache");
    match typed(&e) {
        Some(cudnn::Error::InvalidArgument { arg, .. }) => assert_eq!(arg, "block_table[1][1]"),
        other => panic!("not the typed refusal: {other:?} ({e})"),
    }
    let e = step
        .update_block_table(slot, &table_at(0), &[1, 2, (per_seq * bs + 1) as u32])
        .expect_err("length past the table row");
    assert!(
        matches!(typed(&e), Some(cudnn::Error::InvalidArgument { .. })),
        "{e}"
    );
    let e = step
        .set_cache_seqlens(slot, &lens)
        .expect_err("a paged slot");
    assert!(
        matches!(typed(&e), Some(cudnn::Error::InvalidArgument { .. })),
        "{e}"
    );
    step.launch()?;
    Ok(())
}

pub fn paged_trials() -> Vec<Trial> {
    vec![gpu("capture_paged_decode_loop", paged_decode_loop)]
}
