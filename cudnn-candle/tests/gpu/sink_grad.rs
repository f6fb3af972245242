//! GPU tier of the sinks' gradient: a loss through `flash_attn_with`
//! with sinks that are a `Var`, its gradients (q, k, v and the sinks)
//! against candle's CPU autograd of the reference (an independent
//! implementation: the sink as one more logit per row), prefill and a
//! decode step, GQA, f16 and bf16.

use candle_core::{DType, Device, Tensor, Var};
use cudnn_candle::AttnParams;

use super::{close, cuda, inputs, reference, tol};
use crate::support::{TestResult, Trial, gpu};

const S: f32 = 0.125;

fn sink_grad_case(
    qd: (usize, usize, usize, usize),
    kd: (usize, usize, usize, usize),
    dt: DType,
    causal: bool,
) -> TestResult {
    let dev = cuda()?;
    let (q, k, v) = inputs(qd, kd, dt)?;
    let sinks = (Tensor::randn(0f32, 1.0, qd.2, &Device::Cpu)? * 2.0)?;
    let w = Tensor::randn(0f32, 1.0, (qd.0, qd.1, qd.2, kd.3), &Device::Cpu)?;
    let vars = |ts: [&Tensor; 4]| -> candle_core::Result<Vec<Var>> {
        ts.into_iter().map(Var::from_tensor).collect()
    };
    let c = vars([&q, &k, &v, &sinks])?;
    let pc = AttnParams::new(S)
        .causal(causal)
        .sinks(Some(c[3].as_tensor().clone()));
    let loss =
        (reference(c[0].as_tensor(), c[1].as_tensor(), c[2].as_tensor(), &pc)? * &w)?.sum_all()?;
    let gc = loss.backward()?;
    let g = |t: &Tensor| t.to_dtype(dt)?.to_device(&dev);
    let gv = vars([&g(&q)?, &g(&k)?, &g(&v)?, &sinks.to_device(&dev)?])?;
    let pg = AttnParams::new(S)
        .causal(causal)
        .sinks(Some(gv[3].as_tensor().clone()));
    let o = cudnn_candle::flash_attn_with(
        gv[0].as_tensor(),
        gv[1].as_tensor(),
        gv[2].as_tensor(),
        &pg,
    )?;
    let loss = (o.to_dtype(DType::F32)? * w.to_device(&dev)?)?.sum_all()?;
    let gg = loss.backward()?;
    for (i, n) in ["dq", "dk", "dv", "dsinks"].into_iter().enumerate() {
        let want = gc.get(c[i].as_tensor()).ok_or("no CPU gradient")?;
        let got = gg.get(gv[i].as_tensor()).ok_or("no GPU gradient")?;
        close(n, got, want, 2.0 * tol(dt))?;
    }
    Ok(())
}

pub fn trials() -> Vec<Trial> {
    vec![
        gpu("flash_attn_sinks_grad_prefill_causal_gqa_bf16", || {
            sink_grad_case((2, 32, 4, 64), (2, 32, 2, 64), DType::BF16, true)
        }),
        gpu("flash_attn_sinks_grad_not_causal_f16", || {
            sink_grad_case((1, 16, 4, 64), (1, 48, 4, 64), DType::F16, false)
        }),
        gpu("flash_attn_sinks_grad_decode_step_f16", || {
            // One query row: the call runs on a two-row copy of q.
            sink_grad_case((2, 1, 8, 64), (2, 40, 8, 64), DType::F16, false)
        }),
    ]
}
