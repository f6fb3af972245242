//! GPU tier: every function against candle's own CPU implementation of the
//! same attention in f32 (an independent reference: matmul, softmax,
//! matmul), with f16 / bf16 tolerances; gradients against candle's CPU
//! autograd of that reference. Skipped, visibly, without a GPU.

// The trials are plain functions: clippy's test allowances do not reach
// them (as in the crate's own test binaries).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "gpu/attn_options.rs"]
mod attn_options;
#[path = "gpu_parts/bench.rs"]
mod bench;
#[path = "../examples/candle_transformer_block/block.rs"]
mod block;
#[path = "gpu/capture.rs"]
mod capture;
#[path = "gpu/capture_review.rs"]
mod capture_review;
#[path = "gpu/capture_step.rs"]
mod capture_step;
#[path = "gpu/conv_norm.rs"]
mod conv_norm;
#[path = "gpu/conv_norm_views.rs"]
mod conv_norm_views;
#[path = "gpu_parts/gemm.rs"]
mod gemm;
#[path = "gpu_parts/gemm_grad.rs"]
mod gemm_grad;
#[path = "gpu_parts/reference.rs"]
mod reference;
#[path = "gpu/sink_grad.rs"]
mod sink_grad;
mod support;
#[path = "gpu/varlen_alibi.rs"]
mod varlen_alibi;

use candle_core::{DType, Device, Tensor, Var};
use cudnn_candle::AttnParams;
use reference::{reference, reference_in};
use support::{TestResult, gpu, run, typed};

/// `p` with its slopes and sinks on `dev` (candle gives every
/// `Device::new_cuda` its own id: the test's tensors share one).
fn on(dev: &Device, p: AttnParams) -> candle_core::Result<AttnParams> {
    let mv = |t: Option<Tensor>| t.map(|t| t.to_device(dev)).transpose();
    let (a, s) = (mv(p.alibi_slopes.clone())?, mv(p.sinks.clone())?);
    Ok(p.alibi_slopes(a).sinks(s))
}

fn close(name: &str, got: &Tensor, want: &Tensor, tol: f64) -> TestResult {
    let got = got.to_device(&Device::Cpu)?.to_dtype(DType::F32)?;
    assert_eq!(got.dims(), want.dims(), "{name} dims");
    let diff = (&got - want)?
        .abs()?
        .flatten_all()?
        .max(0)?
        .to_scalar::<f32>()?;
    let scale = want
        .abs()?
        .flatten_all()?
        .max(0)?
        .to_scalar::<f32>()?
        .max(1e-3);
    let rel = f64::from(diff / scale);
    eprintln!(
        "  {name}: max |diff| {diff:.3e}, relative to max |ref| {rel:.3e} (tolerance {tol:.0e})"
    );
    if rel > tol || !rel.is_finite() {
        return Err(format!("{name}: relative error {rel:.3e} > {tol:.0e}").into());
    }
    Ok(())
}

/// `t` starts off cuDNN's 16-byte alignment (what the case is about).
fn ensure_unaligned(t: &Tensor) -> TestResult {
    let bytes = t.layout().start_offset() * t.dtype().size_in_bytes();
    if bytes.is_multiple_of(16) {
        return Err(
            format!("the view starts {bytes} bytes in: aligned, the case tests nothing").into(),
        );
    }
    Ok(())
}

fn cuda() -> candle_core::Result<Device> {
    Device::new_cuda(0)
}

/// Random inputs, rounded to `dt` (the reference starts from the same values).
fn inputs(
    qd: (usize, usize, usize, usize),
    kd: (usize, usize, usize, usize),
    dt: DType,
) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
    let r = |s| -> candle_core::Result<Tensor> {
        Tensor::randn(0f32, 1.0, s, &Device::Cpu)?
            .to_dtype(dt)?
            .to_dtype(DType::F32)
    };
    Ok((r(qd)?, r(kd)?, r(kd)?))
}

fn tol(dt: DType) -> f64 {
    if dt == DType::BF16 { 2.5e-2 } else { 4e-3 }
}

fn forward_case(
    qd: (usize, usize, usize, usize),
    kd: (usize, usize, usize, usize),
    dt: DType,
    p: AttnParams,
) -> TestResult {
    let dev = cuda()?;
    let p = on(&dev, p)?;
    let (q, k, v) = inputs(qd, kd, dt)?;
    let g = |t: &Tensor| t.to_dtype(dt)?.to_device(&dev);
    let got = cudnn_candle::flash_attn_with(&g(&q)?, &g(&k)?, &g(&v)?, &p)?;
    close("o", &got, &reference(&q, &k, &v, &p)?, tol(dt))
}

fn backward_case(
    qd: (usize, usize, usize, usize),
    kd: (usize, usize, usize, usize),
    dt: DType,
    p: AttnParams,
) -> TestResult {
    let dev = cuda()?;
    let p = on(&dev, p)?;
    let (q, k, v) = inputs(qd, kd, dt)?;
    let w = Tensor::randn(0f32, 1.0, (qd.0, qd.1, qd.2, kd.3), &Device::Cpu)?;
    // CPU autograd of the reference.
    let (qc, kc, vc) = (
        Var::from_tensor(&q)?,
        Var::from_tensor(&k)?,
        Var::from_tensor(&v)?,
    );
    let loss = (reference(qc.as_tensor(), kc.as_tensor(), vc.as_tensor(), &p)? * &w)?.sum_all()?;
    let gc = loss.backward()?;
    // The same through the custom op on the GPU.
    let g = |t: &Tensor| t.to_dtype(dt)?.to_device(&dev);
    let (qg, kg, vg) = (
        Var::from_tensor(&g(&q)?)?,
        Var::from_tensor(&g(&k)?)?,
        Var::from_tensor(&g(&v)?)?,
    );
    let o = cudnn_candle::flash_attn_with(qg.as_tensor(), kg.as_tensor(), vg.as_tensor(), &p)?;
    let loss = (o.to_dtype(DType::F32)? * w.to_device(&dev)?)?.sum_all()?;
    let gg = loss.backward()?;
    for (n, cpu, gpu) in [("dq", &qc, &qg), ("dk", &kc, &kg), ("dv", &vc, &vg)] {
        let want = gc.get(cpu.as_tensor()).ok_or("no CPU gradient")?;
        let got = gg.get(gpu.as_tensor()).ok_or("no GPU gradient")?;
        close(n, got, want, 2.0 * tol(dt))?;
    }
    Ok(())
}

/// Packed sequences of `lens` (same for q and k) against the dense
/// reference of each sequence alone.
fn varlen_case(
    lens: &[usize],
    h: usize,
    d: usize,
    dt: DType,
    p: AttnParams,
    grads: bool,
) -> TestResult {
    varlen_qk_case(lens, lens, (h, h), d, dt, p, grads)
}

fn cumulative(lens: &[usize]) -> Vec<u32> {
    let mut cu = vec![0u32];
    for l in lens {
        cu.push(cu[cu.len() - 1] + *l as u32);
    }
    cu
}

/// Packed sequences with query lengths `lens_q` and key lengths `lens_k`
/// (heads `(h, h_kv)`) against the dense reference of each sequence alone
/// (FlashAttention's varlen rule: each sequence's own bottom-right
/// diagonal, query `i` at key `i + len_k - len_q`).
fn varlen_qk_case(
    lens_q: &[usize],
    lens_k: &[usize],
    (h, hkv): (usize, usize),
    d: usize,
    dt: DType,
    p: AttnParams,
    grads: bool,
) -> TestResult {
    let dev = cuda()?;
    let (tq, tk): (usize, usize) = (lens_q.iter().sum(), lens_k.iter().sum());
    let max_q = lens_q.iter().copied().max().unwrap_or(1);
    let max_k = lens_k.iter().copied().max().unwrap_or(1);
    let (q, k, v) = inputs((1, tq, h, d), (1, tk, hkv, d), dt)?;
    let cu_q = Tensor::new(cumulative(lens_q).as_slice(), &dev)?;
    let cu_k = Tensor::new(cumulative(lens_k).as_slice(), &dev)?;
    let g = |t: &Tensor| t.squeeze(0)?.to_dtype(dt)?.to_device(&dev);
    let (qg, kg, vg) = (
        Var::from_tensor(&g(&q)?)?,
        Var::from_tensor(&g(&k)?)?,
        Var::from_tensor(&g(&v)?)?,
    );
    let o = cudnn_candle::flash_attn_varlen_with(
        qg.as_tensor(),
        kg.as_tensor(),
        vg.as_tensor(),
        &cu_q,
        &cu_k,
        max_q,
        max_k,
        &on(&dev, p.clone())?,
    )?;
    let (mut at_q, mut at_k) = (0, 0);
    let mut want_parts = Vec::new();
    let (qc, kc, vc) = (
        Var::from_tensor(&q)?,
        Var::from_tensor(&k)?,
        Var::from_tensor(&v)?,
    );
    for (&lq, &lk) in lens_q.iter().zip(lens_k) {
        let qn = qc.as_tensor().narrow(1, at_q, lq)?;
        let kn = kc.as_tensor().narrow(1, at_k, lk)?;
        let vn = vc.as_tensor().narrow(1, at_k, lk)?;
        want_parts.push(reference_in(&qn, &kn, &vn, &p, max_k)?);
        at_q += lq;
        at_k += lk;
    }
    let want = Tensor::cat(&want_parts, 1)?;
    close("o", &o, &want.squeeze(0)?, tol(dt))?;
    if grads {
        let w = Tensor::randn(0f32, 1.0, want.dims(), &Device::Cpu)?;
        let gc = (&want * &w)?.sum_all()?.backward()?;
        let gg = (o.to_dtype(DType::F32)? * w.squeeze(0)?.to_device(&dev)?)?
            .sum_all()?
            .backward()?;
        for (name, cpu, gpu) in [("dq", &qc, &qg), ("dk", &kc, &kg), ("dv", &vc, &vg)] {
            let want = gc
                .get(cpu.as_tensor())
                .ok_or("no CPU gradient")?
                .squeeze(0)?;
            let got = gg.get(gpu.as_tensor()).ok_or("no GPU gradient")?;
            close(name, got, &want, 2.0 * tol(dt))?;
        }
    }
    Ok(())
}

/// A paged cache in vLLM's layout, `steps` decode (or chunked-prefill)
/// steps with growing lengths: each sequence against the reference on its
/// blocks gathered on the CPU (candle's `index_select`), one plan for the
/// loop.
#[allow(clippy::too_many_arguments)]
fn paged_case(
    (b, sq, h, hkv, d): (usize, usize, usize, usize, usize),
    (nb, bs, per_seq): (usize, usize, usize),
    mut lens: Vec<usize>,
    dt: DType,
    p: AttnParams,
    steps: usize,
) -> TestResult {
    let dev = cuda()?;
    let p = on(&dev, p)?;
    assert!(nb >= b * per_seq && nb % 7 != 0);
    let (_, kc, vc) = inputs((1, 1, 1, d), (nb, bs, hkv, d), dt)?;
    let (kg, vg) = (
        kc.to_dtype(dt)?.to_device(&dev)?,
        vc.to_dtype(dt)?.to_device(&dev)?,
    );
    // Distinct blocks, out of order.
    let table: Vec<u32> = (0..b * per_seq)
        .map(|i| ((i * 7 + 3) % nb) as u32)
        .collect();
    let table_g = Tensor::new(
        table
            .iter()
            .map(|&x| x as i32)
            .collect::<Vec<_>>()
            .as_slice(),
        &dev,
    )?
    .reshape((b, per_seq))?;
    let mut builds = None;
    for _ in 0..steps {
        let (q, _, _) = inputs((b, sq, h, d), (1, 1, 1, 1), dt)?;
        let cl = Tensor::new(
            lens.iter()
                .map(|&l| l as i32)
                .collect::<Vec<_>>()
                .as_slice(),
            &dev,
        )?;
        let got = cudnn_candle::flash_attn_paged(
            &q.to_dtype(dt)?.to_device(&dev)?,
            &kg,
            &vg,
            &table_g,
            &cl,
            &p,
        )?;
        for (i, &l) in lens.iter().enumerate() {
            let idx = Tensor::new(&table[i * per_seq..(i + 1) * per_seq], &Device::Cpu)?;
            let gather = |c: &Tensor| -> candle_core::Result<Tensor> {
                c.index_select(&idx, 0)?
                    .reshape((1, per_seq * bs, hkv, d))?
                    .narrow(1, 0, l)
            };
            let want = reference_in(
                &q.narrow(0, i, 1)?,
                &gather(&kc)?,
                &gather(&vc)?,
                &p,
                per_seq * bs,
            )?;
            close("o", &got.narrow(0, i, 1)?, &want, tol(dt))?;
        }
        let now = cudnn_candle::plans().stats().builds;
        assert!(
            builds.is_none_or(|b| b == now),
            "a paged step planned again"
        );
        builds = Some(now);
        lens.iter_mut()
            .for_each(|l| *l = (*l + 1).min(per_seq * bs));
    }
    Ok(())
}

fn slopes(h: usize) -> Tensor {
    Tensor::new(
        cudnn::graph::alibi_slopes(h).expect("slopes").as_slice(),
        &Device::Cpu,
    )
    .expect("a tensor")
}

fn sinks(h: usize) -> Tensor {
    (Tensor::randn(0f32, 1.0, h, &Device::Cpu).expect("randn") * 2.0).expect("scaled")
}

fn main() {
    // `gpu --bench [--budget-s N]`: the device check's benchmark rows.
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--bench") {
        std::process::exit(bench::main(&args));
    }
    let s = 0.125f32;
    let bf = DType::BF16;
    let f16 = DType::F16;
    let mut trials = vec![
        gpu("flash_attn_unaligned_views", move || {
            // q, k, v viewed one element into a flat buffer (a view candle
            // allows anywhere): their starts are not 16-byte aligned, so
            // the functions copy them; forward and backward against the CPU.
            let dev = cuda()?;
            let (qd, kd) = ((2, 16, 2, 64), (2, 24, 2, 64));
            let (q, k, v) = inputs(qd, kd, bf)?;
            let view = |t: &Tensor| -> candle_core::Result<Tensor> {
                let flat = Tensor::cat(
                    &[
                        &Tensor::zeros(1, DType::F32, &Device::Cpu)?,
                        &t.flatten_all()?,
                    ],
                    0,
                )?;
                flat.to_dtype(bf)?
                    .to_device(&dev)?
                    .narrow(0, 1, t.elem_count())?
                    .reshape(t.dims())
            };
            let (qv, kv, vv) = (view(&q)?, view(&k)?, view(&v)?);
            let p = AttnParams::new(s).causal(true);
            ensure_unaligned(&qv)?;
            let got = cudnn_candle::flash_attn_with(&qv, &kv, &vv, &p)?;
            close("o", &got, &reference(&q, &k, &v, &p)?, tol(bf))?;
            let (qg, kg, vg) = (
                Var::from_tensor(&qv)?,
                Var::from_tensor(&kv)?,
                Var::from_tensor(&vv)?,
            );
            let o =
                cudnn_candle::flash_attn_with(qg.as_tensor(), kg.as_tensor(), vg.as_tensor(), &p)?;
            let grads = o.to_dtype(DType::F32)?.sum_all()?.backward()?;
            let (qc, kc, vc) = (
                Var::from_tensor(&q)?,
                Var::from_tensor(&k)?,
                Var::from_tensor(&v)?,
            );
            let gc = reference(qc.as_tensor(), kc.as_tensor(), vc.as_tensor(), &p)?
                .sum_all()?
                .backward()?;
            for (n, cpu, gpu) in [("dq", &qc, &qg), ("dk", &kc, &kg), ("dv", &vc, &vg)] {
                let want = gc.get(cpu.as_tensor()).ok_or("no CPU gradient")?;
                let got = grads.get(gpu.as_tensor()).ok_or("no GPU gradient")?;
                close(n, got, want, 2.0 * tol(bf))?;
            }
            Ok(())
        }),
        gpu("flash_attn_unaligned_row_strides", move || {
            // q, k, v narrowed on the head dim out of (b, s, h, 68): starts
            // aligned, rows 136 bytes apart (not a 16-byte multiple), so
            // the functions copy them; forward against the CPU.
            let dev = cuda()?;
            let (qd, kd) = ((2, 16, 2, 64), (2, 24, 2, 64));
            let (q, k, v) = inputs(qd, kd, bf)?;
            let view = |t: &Tensor| -> candle_core::Result<Tensor> {
                let (b, s, h, d) = t.dims4()?;
                let pad = Tensor::zeros((b, s, h, 4), DType::F32, &Device::Cpu)?;
                Tensor::cat(&[t, &pad], 3)?
                    .to_dtype(bf)?
                    .to_device(&dev)?
                    .narrow(3, 0, d)
            };
            let (qv, kv, vv) = (view(&q)?, view(&k)?, view(&v)?);
            let p = AttnParams::new(s);
            let got = cudnn_candle::flash_attn_with(&qv, &kv, &vv, &p)?;
            close("o", &got, &reference(&q, &k, &v, &p)?, tol(bf))
        }),
        gpu("flash_attn_bf16", move || {
            forward_case((2, 64, 4, 64), (2, 64, 4, 64), bf, AttnParams::new(s))
        }),
        gpu("flash_attn_causal_f16", move || {
            forward_case(
                (2, 64, 4, 64),
                (2, 64, 4, 64),
                f16,
                AttnParams::new(s).causal(true),
            )
        }),
        gpu("flash_attn_gqa_decode_step", move || {
            forward_case(
                (3, 1, 8, 128),
                (3, 37, 2, 128),
                bf,
                AttnParams::new(s).causal(true),
            )
        }),
        gpu("flash_attn_chunked_prefill_bottom_right", move || {
            forward_case(
                (1, 16, 4, 64),
                (1, 48, 4, 64),
                f16,
                AttnParams::new(s).causal(true),
            )
        }),
        gpu("flash_attn_windowed", move || {
            forward_case(
                (1, 64, 4, 64),
                (1, 64, 4, 64),
                bf,
                AttnParams::new(s).window(Some(7), Some(0)),
            )
        }),
        gpu("flash_attn_softcap", move || {
            forward_case(
                (1, 32, 2, 64),
                (1, 32, 2, 64),
                f16,
                AttnParams::new(1.0).causal(true).softcap(Some(5.0)),
            )
        }),
        gpu("flash_attn_strided_and_offset_inputs", move || {
            let dev = cuda()?;
            let (b, sq, h, d) = (2, 24, 4, 64);
            let qkv = Tensor::randn(0f32, 1.0, (b, sq, 3 * h, d), &Device::Cpu)?
                .to_dtype(bf)?
                .to_dtype(DType::F32)?;
            let cache = Tensor::randn(0f32, 1.0, (b, sq + 5, h, d), &Device::Cpu)?
                .to_dtype(bf)?
                .to_dtype(DType::F32)?;
            let q = qkv.narrow(2, 0, h)?;
            let k = cache.narrow(1, 5, sq)?;
            let v = qkv.narrow(2, 2 * h, h)?;
            let p = AttnParams::new(s).causal(true);
            let qkv_g = qkv.to_dtype(bf)?.to_device(&dev)?;
            let cache_g = cache.to_dtype(bf)?.to_device(&dev)?;
            let (qg, kg, vg) = (
                qkv_g.narrow(2, 0, h)?,
                cache_g.narrow(1, 5, sq)?,
                qkv_g.narrow(2, 2 * h, h)?,
            );
            assert!(!qg.is_contiguous() && kg.layout().start_offset() > 0);
            let got = cudnn_candle::flash_attn_with(&qg, &kg, &vg, &p)?;
            close(
                "o",
                &got,
                &reference(&q.contiguous()?, &k.contiguous()?, &v.contiguous()?, &p)?,
                tol(bf),
            )
        }),
        gpu("flash_attn_varlen_causal", move || {
            varlen_case(
                &[5, 1, 9],
                4,
                64,
                bf,
                AttnParams::new(s).causal(true),
                false,
            )
        }),
        gpu("flash_attn_backward_causal_bf16", move || {
            backward_case(
                (2, 32, 4, 64),
                (2, 32, 4, 64),
                bf,
                AttnParams::new(s).causal(true),
            )
        }),
        gpu("flash_attn_backward_gqa_f16", move || {
            backward_case((1, 48, 8, 64), (1, 48, 2, 64), f16, AttnParams::new(s))
        }),
        gpu("flash_attn_backward_softcap", move || {
            backward_case(
                (1, 32, 2, 64),
                (1, 32, 2, 64),
                f16,
                AttnParams::new(1.0).causal(true).softcap(Some(5.0)),
            )
        }),
        gpu("flash_attn_varlen_backward", move || {
            varlen_case(
                &[7, 3, 12],
                2,
                64,
                f16,
                AttnParams::new(s).causal(true),
                true,
            )
        }),
        gpu("flash_attn_varlen_decode_one_query_many_keys", move || {
            // Decode-like: one query per sequence against keys of different
            // lengths, causal (bottom-right: the query sees every key).
            varlen_qk_case(
                &[1, 1, 1],
                &[17, 5, 40],
                (8, 2),
                64,
                bf,
                AttnParams::new(s).causal(true),
                false,
            )
        }),
        gpu(
            "flash_attn_varlen_chunked_prefill_bottom_right",
            move || {
                // Fewer queries than keys per sequence, each sequence its own
                // offset: query i sees keys up to i + len_k - len_q.
                varlen_qk_case(
                    &[3, 8, 1],
                    &[10, 8, 33],
                    (4, 4),
                    64,
                    f16,
                    AttnParams::new(s).causal(true),
                    false,
                )
            },
        ),
        gpu("flash_attn_varlen_q_ne_k_windowed", move || {
            varlen_qk_case(
                &[4, 6],
                &[20, 9],
                (4, 2),
                64,
                bf,
                AttnParams::new(s).window(Some(5), Some(0)),
                false,
            )
        }),
        gpu("flash_attn_varlen_q_ne_k_not_causal", move || {
            varlen_qk_case(
                &[5, 2],
                &[3, 30],
                (2, 2),
                64,
                f16,
                AttnParams::new(s),
                false,
            )
        }),
        gpu("flash_attn_varlen_q_ne_k_backward", move || {
            varlen_qk_case(
                &[6, 2, 9],
                &[14, 2, 31],
                (4, 2),
                64,
                f16,
                AttnParams::new(s).causal(true),
                true,
            )
        }),
        gpu("decode_loop_plans_once", move || {
            let dev = cuda()?;
            let q = Tensor::randn(0f32, 1.0, (1, 1, 8, 64), &dev)?.to_dtype(bf)?;
            let k = Tensor::randn(0f32, 1.0, (1, 100, 8, 64), &dev)?.to_dtype(bf)?;
            cudnn_candle::flash_attn(&q, &k, &k, s, true)?;
            let before = cudnn_candle::plans().stats().builds;
            for _ in 0..5 {
                cudnn_candle::flash_attn(&q, &k, &k, s, true)?;
            }
            assert_eq!(
                cudnn_candle::plans().stats().builds,
                before,
                "a step planned again"
            );
            Ok(())
        }),
        gpu("flash_attn_kvcache_decode_loop", move || {
            // A cache of capacity 64, four sequences at different lengths,
            // one query each, for 5 steps: each step against the reference
            // on the valid prefix, and one plan for the whole loop.
            let dev = cuda()?;
            let (b, cap, h, hkv, d) = (4usize, 64usize, 8usize, 2usize, 64usize);
            let (_, kc, vc) = inputs((b, 1, h, d), (b, cap, hkv, d), bf)?;
            let (kg, vg) = (
                kc.to_dtype(bf)?.to_device(&dev)?,
                vc.to_dtype(bf)?.to_device(&dev)?,
            );
            let p = AttnParams::new(s).causal(true);
            let mut lens = vec![3u32, 17, 40, 9];
            let mut builds = None;
            for _ in 0..5 {
                let (q, _, _) = inputs((b, 1, h, d), (1, 1, 1, 1), bf)?;
                let cl = Tensor::new(lens.as_slice(), &dev)?;
                let got = cudnn_candle::flash_attn_kvcache(
                    &q.to_dtype(bf)?.to_device(&dev)?,
                    &kg,
                    &vg,
                    &cl,
                    &p,
                )?;
                for (i, &l) in lens.iter().enumerate() {
                    let l = l as usize;
                    let want = reference_in(
                        &q.narrow(0, i, 1)?,
                        &kc.narrow(0, i, 1)?.narrow(1, 0, l)?,
                        &vc.narrow(0, i, 1)?.narrow(1, 0, l)?,
                        &p,
                        cap,
                    )?;
                    close("o", &got.narrow(0, i, 1)?, &want, tol(bf))?;
                }
                let now = cudnn_candle::plans().stats().builds;
                assert!(
                    builds.is_none_or(|b| b == now),
                    "a decode step planned again"
                );
                builds = Some(now);
                lens.iter_mut().for_each(|l| *l += 1);
            }
            Ok(())
        }),
        gpu("flash_attn_paged_decode_loop", move || {
            paged_case(
                (4, 1, 8, 2, 128),
                (33, 16, 6),
                vec![1, 17, 60, 96],
                bf,
                AttnParams::new(s).causal(true),
                4,
            )
        }),
        gpu("flash_attn_paged_chunked_prefill_f16", move || {
            paged_case(
                (2, 8, 4, 4, 64),
                (9, 32, 3),
                vec![8, 70],
                f16,
                AttnParams::new(s).causal(true),
                2,
            )
        }),
        gpu("flash_attn_paged_not_causal_block_1", move || {
            paged_case(
                (2, 1, 4, 1, 64),
                (13, 1, 5),
                vec![5, 2],
                bf,
                AttnParams::new(s),
                1,
            )
        }),
        gpu(
            "flash_attn_paged_bad_block_is_refused_before_the_gpu",
            move || {
                let dev = cuda()?;
                let q = Tensor::zeros((2, 1, 4, 64), DType::BF16, &dev)?;
                let kc = Tensor::zeros((4, 16, 4, 64), DType::BF16, &dev)?;
                let table = Tensor::new(&[[0i32, 1], [2, 4]], &dev)?;
                let lens = Tensor::new(&[3i32, 17], &dev)?;
                let e = cudnn_candle::flash_attn_paged(
                    &q,
                    &kc,
                    &kc,
                    &table,
                    &lens,
                    &AttnParams::new(s),
                )
                .expect_err("block 4 of 4");
                match typed(&e) {
                    Some(cudnn::Error::InvalidArgument { arg, .. }) => {
                        assert_eq!(arg, "block_table[1][1]")
                    }
                    other => panic!("not the typed refusal: {other:?} ({e})"),
                }
                Ok(())
            },
        ),
        gpu("flash_attn_alibi_causal_bf16", move || {
            forward_case(
                (2, 64, 8, 64),
                (2, 64, 8, 64),
                bf,
                AttnParams::new(s)
                    .causal(true)
                    .alibi_slopes(Some(slopes(8))),
            )
        }),
        gpu("flash_attn_alibi_windowed_gqa_f16", move || {
            forward_case(
                (1, 96, 8, 64),
                (1, 96, 2, 64),
                f16,
                AttnParams::new(s)
                    .window(Some(20), Some(0))
                    .alibi_slopes(Some(slopes(8))),
            )
        }),
        gpu("flash_attn_alibi_backward_f16", move || {
            backward_case(
                (1, 48, 4, 64),
                (1, 48, 4, 64),
                f16,
                AttnParams::new(s)
                    .causal(true)
                    .alibi_slopes(Some(slopes(4))),
            )
        }),
        gpu("flash_attn_alibi_batch_heads_slopes", move || {
            // FlashAttention's (batch, heads) slopes with equal rows are
            // served; rows that differ are refused, typed.
            let dev = cuda()?;
            let (q, k, v) = inputs((2, 32, 4, 64), (2, 32, 4, 64), bf)?;
            let g = |t: &Tensor| t.to_dtype(bf)?.to_device(&dev);
            let sl = slopes(4);
            let both = Tensor::stack(&[&sl, &sl], 0)?.to_device(&dev)?;
            let got = cudnn_candle::flash_attn_alibi(&g(&q)?, &g(&k)?, &g(&v)?, &both, s, true)?;
            let p = AttnParams::new(s)
                .causal(true)
                .alibi_slopes(Some(sl.clone()));
            close("o", &got, &reference(&q, &k, &v, &p)?, tol(bf))?;
            let other = Tensor::stack(&[&sl, &(&sl * 2.0)?], 0)?.to_device(&dev)?;
            let e = cudnn_candle::flash_attn_alibi(&g(&q)?, &g(&k)?, &g(&v)?, &other, s, true)
                .expect_err("rows differ");
            assert!(
                matches!(typed(&e), Some(cudnn::Error::Unsupported { .. })),
                "{e}"
            );
            // Not causal: FlashAttention's |distance| form, as a score bias.
            let got = cudnn_candle::flash_attn_alibi(&g(&q)?, &g(&k)?, &g(&v)?, &both, s, false)?;
            let p = AttnParams::new(s).alibi_slopes(Some(sl.clone()));
            close("o (not causal)", &got, &reference(&q, &k, &v, &p)?, tol(bf))?;
            Ok(())
        }),
        gpu("flash_attn_alibi_not_causal_f16", move || {
            forward_case(
                (2, 48, 4, 64),
                (2, 48, 4, 64),
                f16,
                AttnParams::new(s).alibi_slopes(Some(slopes(4))),
            )
        }),
        gpu("flash_attn_alibi_decode_bottom_right", move || {
            forward_case(
                (3, 1, 8, 128),
                (3, 37, 2, 128),
                bf,
                AttnParams::new(s)
                    .causal(true)
                    .alibi_slopes(Some(slopes(8))),
            )
        }),
        gpu("flash_attn_alibi_chunked_prefill_windowed", move || {
            forward_case(
                (1, 16, 4, 64),
                (1, 48, 4, 64),
                f16,
                AttnParams::new(s)
                    .window(Some(10), Some(2))
                    .alibi_slopes(Some(slopes(4))),
            )
        }),
        gpu("flash_attn_alibi_bias_backward_bf16", move || {
            backward_case(
                (1, 24, 4, 64),
                (1, 40, 4, 64),
                bf,
                AttnParams::new(s)
                    .causal(true)
                    .alibi_slopes(Some(slopes(4))),
            )
        }),
        gpu("flash_attn_sinks_causal_bf16", move || {
            forward_case(
                (2, 64, 8, 64),
                (2, 64, 2, 64),
                bf,
                AttnParams::new(s).causal(true).sinks(Some(sinks(8))),
            )
        }),
        gpu("flash_attn_sinks_windowed_f16", move || {
            // gpt-oss: a sliding window on every other layer, with sinks.
            forward_case(
                (1, 80, 4, 64),
                (1, 80, 4, 64),
                f16,
                AttnParams::new(s)
                    .window(Some(16), Some(0))
                    .sinks(Some(sinks(4))),
            )
        }),
        gpu("flash_attn_sinks_backward_bf16", move || {
            backward_case(
                (1, 32, 4, 64),
                (1, 32, 4, 64),
                bf,
                AttnParams::new(s).causal(true).sinks(Some(sinks(4))),
            )
        }),
        gpu("flash_attn_sinks_decode_step", move || {
            // seq_q = 1 (cuDNN takes no sink for one row): the crate runs
            // it on two rows and keeps the last.
            forward_case(
                (3, 1, 8, 64),
                (3, 37, 2, 64),
                bf,
                AttnParams::new(s).causal(true).sinks(Some(sinks(8))),
            )
        }),
        gpu("flash_attn_sinks_decode_windowed_not_causal", move || {
            forward_case(
                (2, 1, 4, 64),
                (2, 50, 4, 64),
                f16,
                AttnParams::new(s)
                    .window(Some(9), None)
                    .sinks(Some(sinks(4))),
            )
        }),
        gpu("flash_attn_sinks_decode_one_key", move || {
            // seq_kv = 1: FlashAttention takes it causal or left-windowed
            // (one query row); the two-row pad must not keep a causal mask
            // (bottom-right with seq_q 2 > seq_kv 1).
            for p in [
                AttnParams::new(s).causal(true),
                AttnParams::new(s).window(Some(0), None),
                AttnParams::new(s).window(Some(0), Some(0)),
            ] {
                forward_case((3, 1, 8, 64), (3, 1, 2, 64), bf, p.sinks(Some(sinks(8))))?;
            }
            // The entry point of the review's trigger, and with ALiBi.
            let dev = cuda()?;
            let (q, k, v) = inputs((1, 1, 8, 64), (1, 2, 8, 64), f16)?;
            let g = |t: &Tensor| t.to_dtype(f16)?.to_device(&dev);
            let k1 = k.narrow(1, 0, 1)?;
            let v1 = v.narrow(1, 0, 1)?;
            let got = cudnn_candle::flash_attn_sinks(
                &g(&q)?,
                &g(&k1)?,
                &g(&v1)?,
                &sinks(8).to_device(&dev)?,
                s,
                true,
            )?;
            let p = AttnParams::new(s).causal(true).sinks(Some(sinks(8)));
            close("o", &got, &reference(&q, &k1, &v1, &p)?, tol(f16))?;
            forward_case(
                (2, 1, 8, 64),
                (2, 1, 8, 64),
                f16,
                p.alibi_slopes(Some(slopes(8))),
            )
        }),
        gpu("flash_attn_sinks_with_alibi", move || {
            // Sinks and ALiBi together: the distance form (the reference
            // uses it whenever sinks are present). Causal seq_q == seq_kv
            // runs cuDNN's ALiBi, chunked prefill and not causal the score
            // bias; a decode step the two-row pad and the bias.
            let p = |causal: bool, h: usize| {
                AttnParams::new(s)
                    .causal(causal)
                    .alibi_slopes(Some(slopes(h)))
                    .sinks(Some(sinks(h)))
            };
            forward_case((2, 48, 8, 64), (2, 48, 2, 64), bf, p(true, 8))?;
            forward_case((1, 16, 4, 64), (1, 40, 4, 64), f16, p(true, 4))?;
            forward_case((1, 32, 4, 64), (1, 32, 4, 64), f16, p(false, 4))?;
            forward_case((3, 1, 8, 64), (3, 37, 2, 64), bf, p(true, 8))?;
            backward_case((1, 24, 4, 64), (1, 40, 4, 64), f16, p(true, 4))
        }),
        gpu("flash_attn_alibi_left_window_bounds_the_right", move || {
            // A left window alone: FlashAttention bounds the right at d +
            // seq_kv, hiding keys from the first rows when seq_q > seq_kv
            // + 1 (here rows 0..7 of 24 against 16 keys).
            forward_case(
                (1, 24, 4, 64),
                (1, 16, 4, 64),
                f16,
                AttnParams::new(s)
                    .window(Some(5), None)
                    .alibi_slopes(Some(slopes(4))),
            )?;
            let dev = cuda()?;
            let (q, k, v) = inputs((1, 6, 4, 64), (1, 4, 4, 64), bf)?;
            let g = |t: &Tensor| t.to_dtype(bf)?.to_device(&dev);
            let sl = slopes(4);
            let got = cudnn_candle::flash_attn_alibi_windowed(
                &g(&q)?,
                &g(&k)?,
                &g(&v)?,
                &sl.to_device(&dev)?,
                s,
                Some(1),
                None,
            )?;
            let p = AttnParams::new(s)
                .window(Some(1), None)
                .alibi_slopes(Some(sl));
            close("o", &got, &reference(&q, &k, &v, &p)?, tol(bf))
        }),
        gpu("flash_attn_paged_decode_with_sinks", move || {
            paged_case(
                (3, 1, 8, 2, 64),
                (20, 16, 4),
                vec![1, 30, 64],
                bf,
                AttnParams::new(s).causal(true).sinks(Some(sinks(8))),
                2,
            )
        }),
        gpu("flash_attn_sinks_bf16_widened", move || {
            let dev = cuda()?;
            let (q, k, v) = inputs((1, 16, 4, 64), (1, 16, 4, 64), bf)?;
            let g = |t: &Tensor| t.to_dtype(bf)?.to_device(&dev);
            let sk = sinks(4).to_dtype(bf)?;
            let got = cudnn_candle::flash_attn_sinks(
                &g(&q)?,
                &g(&k)?,
                &g(&v)?,
                &sk.to_device(&dev)?,
                s,
                true,
            )?;
            let p = AttnParams::new(s)
                .causal(true)
                .sinks(Some(sk.to_dtype(DType::F32)?));
            close("o", &got, &reference(&q, &k, &v, &p)?, tol(bf))
        }),
        gpu("f32_is_refused_typed", || {
            let dev = cuda()?;
            let q = Tensor::zeros((1, 4, 2, 8), DType::F32, &dev)?;
            let e = cudnn_candle::flash_attn(&q, &q, &q, 1.0, false).expect_err("f32");
            match typed(&e) {
                Some(cudnn::Error::InvalidArgument { arg, .. }) => assert_eq!(arg, "q dtype"),
                other => panic!("not the typed refusal: {other:?} ({e})"),
            }
            Ok(())
        }),
    ];
    trials.extend(conv_norm::trials());
    trials.extend(capture::trials());
    trials.extend(capture::kvcache_trials());
    trials.extend(capture::paged_trials());
    trials.extend(capture_review::trials());
    trials.extend(capture_step::trials());
    trials.extend(varlen_alibi::trials());
    trials.extend(attn_options::trials());
    trials.extend(sink_grad::trials());
    trials.extend(conv_norm_views::trials());
    trials.extend(gemm::trials());
    trials.extend(bench::trials());
    // The candle_transformer_block example's check: a training step and a
    // paged decode loop in bf16 and f32 against the block on the CPU.
    trials.push(gpu("example_block", || {
        block::check(&cuda()?)?;
        Ok(())
    }));
    trials.extend(gemm_grad::trials());
    run(trials);
}
