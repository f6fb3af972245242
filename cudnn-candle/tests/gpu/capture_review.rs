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

pub fn trials() -> Vec<Trial> {
    vec![gpu(
        "capture_refuses_a_cudarc_capture_of_candle_stream",
        cudarc_capture_of_candle_stream,
    )]
}
