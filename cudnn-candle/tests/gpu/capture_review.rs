//! GPU tier of the review's findings on `cudnn_candle::capture`: cudarc
//! capturing candle's stream before or during the closure (refused,
//! typed, nothing kept); a step dropped on another thread right after a
//! launch (a later candle op still reads the right values); in-place
//! updates of slopes and sinks between replays; a workspace reserve too
//! small; varlen with `max_seqlen` larger than every sequence. Each
//! result is compared with candle's CPU reference (an independent
//! implementation).

use candle_core::{DType, Device, Tensor};
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudnn_candle::AttnParams;
use cudnn_candle::capture::capture;

use super::{close, cuda, inputs, tol};
use crate::reference::reference;
use crate::support::{TestResult, Trial, gpu, typed};

const S: f32 = 0.125;

fn is_capture_unsafe(e: &candle_core::Error) -> bool {
    matches!(typed(e), Some(cudnn::Error::CaptureUnsafe { .. }))
}

fn cudarc_stream(dev: &Device) -> Result<std::sync::Arc<cudarc::driver::CudaStream>, String> {
    match dev {
        Device::Cuda(cd) => Ok(cd.cuda_stream()),
        _ => Err("not CUDA".to_string()),
    }
}

/// cudarc captures candle's stream inside the closure (thread-local
/// mode), then the closure calls attention: refused, typed, before the
/// output or any buffer is allocated on candle's (capturing) stream; the
/// capture ends with that error and the next capture replays correctly.
/// Then a relaxed cudarc capture begun before `capture`: `capture` itself
/// is refused.
fn cudarc_capture_of_candle_stream() -> TestResult {
    let dev = cuda()?;
    let bf = DType::BF16;
    let (q0, k0, v0) = inputs((1, 1, 8, 64), (1, 64, 8, 64), bf)?;
    let g = |t: &Tensor| t.to_dtype(bf)?.to_device(&dev);
    let (q, k, v) = (g(&q0)?, g(&k0)?, g(&v0)?);
    let p = AttnParams::new(S);
    let want = reference(&q0, &k0, &v0, &p)?;
    cudnn_candle::flash_attn_with(&q, &k, &v, &p)?;
    let cs = cudarc_stream(&dev)?;
    // During the closure.
    let e = capture(&dev, || {
        cs.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(candle_core::Error::wrap)?;
        let r = cudnn_candle::flash_attn_with(&q, &k, &v, &p);
        // cudarc's graph is dropped unlaunched, as in the review's trigger.
        let _ = cs.end_capture(CUgraphInstantiate_flags(0));
        r
    })
    .expect_err("attention while cudarc captures candle's stream");
    assert!(is_capture_unsafe(&e), "during: {e}");
    // Before `capture`, relaxed (open would otherwise succeed).
    cs.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)?;
    let r = capture(&dev, || cudnn_candle::flash_attn_with(&q, &k, &v, &p));
    let _ = cs.end_capture(CUgraphInstantiate_flags(0));
    let e = r
        .err()
        .ok_or("capture while cudarc captures candle's stream")?;
    assert!(is_capture_unsafe(&e), "before: {e}");
    assert!(!cudnn_candle::capture::is_capturing());
    // Nothing of the refused captures is left behind.
    let (mut step, o) = capture(&dev, || cudnn_candle::flash_attn_with(&q, &k, &v, &p))?;
    step.launch()?;
    close("o after the refused captures", &o, &want, tol(bf))
}

/// Review finding 4: the step alone keeps q, k, v; it is launched here,
/// then moved to another thread and dropped there at once (candle's
/// default stream is per thread: that thread's frees are not ordered
/// after this thread's launches; the step's `Drop` waits for them). A
/// launch there is refused, typed (`WrongThread`: candle's stream of this
/// thread is not that thread's). This thread then allocates and fills
/// tensors of the same sizes (which may reuse the freed memory) and runs a
/// candle op on them: both the output (kept by a clone) and that op must
/// be exact.
fn drop_on_another_thread() -> TestResult {
    let dev = cuda()?;
    let bf = DType::BF16;
    let (qd, kd) = ((4, 64, 16, 128), (4, 1024, 16, 128));
    let (q0, k0, v0) = inputs(qd, kd, bf)?;
    let g = |t: &Tensor| t.to_dtype(bf)?.to_device(&dev);
    let p = AttnParams::new(S).causal(true);
    let want = reference(&q0, &k0, &v0, &p)?;
    for launches in [1usize, 3] {
        let (q, k, v) = (g(&q0)?, g(&k0)?, g(&v0)?);
        cudnn_candle::flash_attn_with(&q, &k, &v, &p)?;
        let (mut step, o) = capture(&dev, || cudnn_candle::flash_attn_with(&q, &k, &v, &p))?;
        drop((q, k, v));
        for _ in 0..launches {
            step.launch()?;
        }
        std::thread::spawn(move || -> Result<(), String> {
            let e = step.launch().err().ok_or("a launch on another thread")?;
            if !matches!(typed(&e), Some(cudnn::Error::WrongThread { .. })) {
                return Err(format!("not the typed refusal: {e}"));
            }
            drop(step);
            Ok(())
        })
        .join()
        .map_err(|_| "the dropping thread panicked")??;
        let fill = |d: (usize, usize, usize, usize), x: f64| {
            (Tensor::ones(d, DType::F32, &dev)? * x)?.to_dtype(bf)
        };
        let later = [fill(qd, 2.0)?, fill(kd, 3.0)?, fill(kd, 4.0)?];
        let sums: Vec<f32> = later
            .iter()
            .map(|t| t.to_dtype(DType::F32)?.sum_all()?.to_scalar::<f32>())
            .collect::<candle_core::Result<_>>()?;
        let n = |d: (usize, usize, usize, usize)| (d.0 * d.1 * d.2 * d.3) as f32;
        assert_eq!(
            sums,
            [2.0 * n(qd), 3.0 * n(kd), 4.0 * n(kd)],
            "a later candle op"
        );
        close(
            &format!("o after a drop on another thread ({launches} launches)"),
            &o,
            &want,
            tol(bf),
        )?;
    }
    Ok(())
}

/// Review finding 3: slopes (cuDNN's ALiBi: causal, as many keys as
/// queries) and sinks given as f32 device tensors are read by each
/// replay: rewritten in place between replays, the output follows the
/// reference with the new values. bf16 sinks (widened to an f32 copy at
/// capture) are refused, typed.
fn in_place_side_updates() -> TestResult {
    let dev = cuda()?;
    let bf = DType::BF16;
    let (q0, k0, v0) = inputs((1, 32, 4, 64), (1, 32, 4, 64), bf)?;
    let g = |t: &Tensor| t.to_dtype(bf)?.to_device(&dev);
    let (q, k, v) = (g(&q0)?, g(&k0)?, g(&v0)?);
    let values = [
        [0.5f32, 0.25, 0.125, 0.0625],
        [1.0f32, -0.5, 0.75, 0.0],
        [0.03125f32, 2.0, 0.0, 0.5],
    ];
    for sinks in [false, true] {
        let side = Tensor::new(&values[0], &dev)?;
        let with = |t: Tensor| {
            let p = AttnParams::new(S).causal(true);
            if sinks {
                p.sinks(Some(t))
            } else {
                p.alibi_slopes(Some(t))
            }
        };
        let p = with(side.clone());
        cudnn_candle::flash_attn_with(&q, &k, &v, &p)?;
        let (mut step, o) = capture(&dev, || cudnn_candle::flash_attn_with(&q, &k, &v, &p))?;
        for vals in &values {
            side.slice_set(&Tensor::new(vals, &dev)?, 0, 0)?;
            step.launch()?;
            let want = reference(&q0, &k0, &v0, &with(Tensor::new(vals, &Device::Cpu)?))?;
            close(
                &format!("o after an in-place update (sinks: {sinks}) to {vals:?}"),
                &o,
                &want,
                tol(bf),
            )?;
        }
    }
    let sb = Tensor::new(&values[1], &dev)?.to_dtype(bf)?;
    let p = AttnParams::new(S).causal(true).sinks(Some(sb));
    let e = capture(&dev, || cudnn_candle::flash_attn_with(&q, &k, &v, &p))
        .err()
        .ok_or("bf16 sinks inside a capture")?;
    assert!(is_capture_unsafe(&e), "{e}");
    assert!(e.to_string().contains("sinks would be copied"), "{e}");
    Ok(())
}

/// Review finding 5: two KV-cache steps, each with one call (slot index
/// 0 in both): the slot of one given to the other is refused, typed,
/// naming `slot`; its own is taken.
fn slot_of_another_step() -> TestResult {
    let dev = cuda()?;
    let bf = DType::BF16;
    let (q0, k0, v0) = inputs((2, 1, 8, 64), (2, 64, 2, 64), bf)?;
    let g = |t: &Tensor| t.to_dtype(bf)?.to_device(&dev);
    let (q, k, v) = (g(&q0)?, g(&k0)?, g(&v0)?);
    let p = AttnParams::new(S).causal(true);
    let lens = [5u32, 9];
    cudnn_candle::flash_attn_kvcache(&q, &k, &v, &Tensor::new(&lens, &dev)?, &p)?;
    let kv = || cudnn_candle::capture::flash_attn_kvcache(&q, &k, &v, &lens, &p);
    let (mut a, (_oa, sa)) = capture(&dev, kv)?;
    let (mut b, (_ob, sb)) = capture(&dev, kv)?;
    a.set_cache_seqlens(sa, &[6, 10])?;
    let e = a
        .set_cache_seqlens(sb, &[6, 10])
        .expect_err("a slot of another step");
    match typed(&e) {
        Some(cudnn::Error::InvalidArgument { arg, .. }) => assert_eq!(arg, "slot"),
        other => return Err(format!("not the typed refusal: {other:?} ({e})").into()),
    }
    b.set_cache_seqlens(sb, &[7, 11])?;
    a.launch()?;
    b.launch()?;
    Ok(())
}

pub fn trials() -> Vec<Trial> {
    vec![
        gpu(
            "capture_refuses_a_cudarc_capture_of_candle_stream",
            cudarc_capture_of_candle_stream,
        ),
        gpu(
            "capture_drop_on_another_thread_waits",
            drop_on_another_thread,
        ),
        gpu(
            "capture_replays_read_slopes_and_sinks_in_place",
            in_place_side_updates,
        ),
        gpu(
            "capture_slot_of_another_step_is_refused",
            slot_of_another_step,
        ),
    ]
}
