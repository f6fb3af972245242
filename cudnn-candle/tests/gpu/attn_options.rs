//! GPU tier of the remaining attention options: dtypes checked before
//! any copy (a strided F8E4M3 input on the device is the crate's typed
//! error, not candle's F8 copy kernel), ALiBi in KV-cache and paged calls
//! against candle's CPU reference of each sequence alone
//! (FlashAttention's `-slope * |i + cache_seqlen - seq_q - j|`), and the
//! gradients of varlen calls (sinks, and slopes that get none, as
//! FlashAttention) against candle's CPU autograd.

use candle_core::{DType, Device, Tensor, Var};
use cudnn_candle::AttnParams;

use super::{
    close, cuda, cumulative, inputs, on, paged_case, reference, reference_in, sinks, slopes, tol,
    typed,
};
use crate::support::{TestResult, Trial, gpu};

const S: f32 = 0.125;

/// `r`'s error is the crate's, its text containing `what`.
fn refused(r: candle_core::Result<Tensor>, what: &str) -> TestResult {
    let e = r.err().ok_or("accepted")?;
    let t = typed(&e).ok_or_else(|| format!("not the crate's error: {e}"))?;
    if !t.to_string().contains(what) {
        return Err(format!("{t} does not name {what}").into());
    }
    Ok(())
}

/// Strided and offset F8E4M3 inputs on the device: each entry point's
/// typed dtype error, naming the argument (before: candle's F8 copy of
/// the strided view ran first and failed untyped).
fn f8_inputs_refused_typed() -> TestResult {
    let dev = cuda()?;
    let f8 = |dims: (usize, usize, usize, usize)| -> candle_core::Result<Tensor> {
        // Made on the host, moved as bytes (no device cast or copy kernel).
        Tensor::zeros(dims, DType::F8E4M3, &Device::Cpu)?.to_device(&dev)
    };
    let bf = |dims: (usize, usize, usize, usize)| Tensor::zeros(dims, DType::BF16, &dev);
    // (b, h, s, d) transposed to (b, s, h, d): strided.
    let q8 = f8((2, 4, 8, 64))?.transpose(1, 2)?;
    let k = bf((2, 8, 4, 64))?;
    let p = cudnn_candle::AttnParams::new(0.125);
    refused(cudnn_candle::flash_attn_with(&q8, &k, &k, &p), "q dtype")?;
    let k8 = f8((2, 4, 8, 64))?.transpose(1, 2)?;
    let q = bf((2, 8, 4, 64))?;
    refused(
        cudnn_candle::flash_attn_with(&q, &k8, &k8, &p),
        "k dtype (q's)",
    )?;
    let lens = Tensor::new(&[3u32, 8], &dev)?;
    refused(
        cudnn_candle::flash_attn_kvcache(&q8, &k, &k, &lens, &p),
        "q dtype",
    )?;
    // Paged: an offset F8 cache (a narrow of the first dim).
    let c8 = f8((5, 16, 4, 64))?.narrow(0, 1, 4)?;
    let table = Tensor::new(&[[0i32], [1]], &dev)?;
    let lens = Tensor::new(&[3i32, 16], &dev)?;
    let q1 = bf((2, 1, 4, 64))?;
    refused(
        cudnn_candle::flash_attn_paged(&q1, &c8, &c8, &table, &lens, &p),
        "k_cache dtype (q's)",
    )?;
    // Varlen: strided F8 q (total, h, d).
    let qv8 = f8((1, 4, 6, 64))?.squeeze(0)?.transpose(0, 1)?;
    let kv = Tensor::zeros((6, 4, 64), DType::BF16, &dev)?;
    let cu = Tensor::new(&[0u32, 2, 6], &dev)?;
    refused(
        cudnn_candle::flash_attn_varlen(&qv8, &kv, &kv, &cu, &cu, 4, 4, 0.125, true),
        "q dtype",
    )?;
    // conv2d: strided F8 x, f32 w.
    let x8 = f8((1, 5, 5, 3))?.permute((0, 3, 1, 2))?;
    let w = Tensor::zeros((2, 3, 3, 3), DType::F32, &dev)?;
    refused(cudnn_candle::conv2d(&x8, &w, 1, 1, 1, 1), "x dtype")?;
    let xf = Tensor::zeros((1, 3, 5, 5), DType::F32, &Device::Cpu)?.to_device(&dev)?;
    let w8 = f8((3, 3, 2, 3))?.permute((3, 2, 0, 1))?;
    refused(cudnn_candle::conv2d(&xf, &w8, 1, 1, 1, 1), "w dtype (x's)")
}

/// `flash_attn_kvcache` with ALiBi: a cache of capacity `cap`, sequences
/// at `lens`, `sq` queries each, `steps` steps (each length + `sq`, up to
/// the capacity): each sequence against the CPU reference of its valid
/// prefix alone (FlashAttention's ALiBi for `sq` queries and `len` keys),
/// and one plan for the whole loop (the bias's shape does not change).
fn kvcache_case(
    (b, sq, h, hkv, d, cap): (usize, usize, usize, usize, usize, usize),
    mut lens: Vec<u32>,
    dt: DType,
    p: AttnParams,
    steps: usize,
) -> TestResult {
    let dev = cuda()?;
    let p = on(&dev, p)?;
    let (_, kc, vc) = inputs((b, 1, h, d), (b, cap, hkv, d), dt)?;
    let (kg, vg) = (
        kc.to_dtype(dt)?.to_device(&dev)?,
        vc.to_dtype(dt)?.to_device(&dev)?,
    );
    let mut builds = None;
    for _ in 0..steps {
        let (q, _, _) = inputs((b, sq, h, d), (1, 1, 1, 1), dt)?;
        let cl = Tensor::new(lens.as_slice(), &dev)?;
        let got =
            cudnn_candle::flash_attn_kvcache(&q.to_dtype(dt)?.to_device(&dev)?, &kg, &vg, &cl, &p)?;
        for (i, &l) in lens.iter().enumerate() {
            let l = l as usize;
            // (batch, heads) slopes: sequence i's own row.
            let pi = match &p.alibi_slopes {
                Some(t) if t.rank() == 2 => p.clone().alibi_slopes(Some(t.get(i)?)),
                _ => p.clone(),
            };
            // FlashAttention's window sides at the call's seqlen_k, the
            // capacity (set_params_fprop), the diagonal at this length.
            let want = reference_in(
                &q.narrow(0, i, 1)?,
                &kc.narrow(0, i, 1)?.narrow(1, 0, l)?,
                &vc.narrow(0, i, 1)?.narrow(1, 0, l)?,
                &pi,
                cap,
            )?;
            close("o", &got.narrow(0, i, 1)?, &want, tol(dt))?;
        }
        let now = cudnn_candle::plans().stats().builds;
        assert!(
            builds.is_none_or(|b| b == now),
            "a decode step planned again"
        );
        builds = Some(now);
        lens.iter_mut()
            .for_each(|l| *l = (*l + sq as u32).min(cap as u32));
    }
    Ok(())
}

/// Which side inputs a gradient case's call has, and whether they track
/// a gradient.
#[derive(Clone, Copy)]
struct Sides {
    /// Sinks that are a `Var` (their gradient compared).
    sinks: bool,
    /// ALiBi slopes that are a `Var`: accepted, and given no gradient (as
    /// FlashAttention's autograd returns None for them).
    slopes: bool,
}

/// Gradients of a varlen call (packed sequences `lens` = `(seqlen_q,
/// seqlen_k)`) against candle's CPU autograd of each sequence's
/// reference (narrowed from the same packed `Var`s, so the CPU gradients
/// come out packed too): dq, dk, dv and, with sinks, dsinks; slopes that
/// track a gradient get none.
fn varlen_grad_case(
    lens: &[(usize, usize)],
    (h, hkv, d): (usize, usize, usize),
    dt: DType,
    p: AttnParams,
    sides: Sides,
) -> TestResult {
    let dev = cuda()?;
    let (tq, tk) = lens.iter().fold((0, 0), |(a, b), &(q, k)| (a + q, b + k));
    let (q, k, v) = inputs((1, tq, h, d), (1, tk, hkv, d), dt)?;
    let (q, k, v) = (q.squeeze(0)?, k.squeeze(0)?, v.squeeze(0)?);
    let w = Tensor::randn(0f32, 1.0, (tq, h, d), &Device::Cpu)?;
    let sk = (Tensor::randn(0f32, 1.0, h, &Device::Cpu)? * 2.0)?;
    let sl = slopes(h);
    // CPU: the reference of each sequence, one loss.
    let c: Vec<Var> = [&q, &k, &v, &sk]
        .into_iter()
        .map(Var::from_tensor)
        .collect::<candle_core::Result<_>>()?;
    let pc = p
        .clone()
        .sinks(sides.sinks.then(|| c[3].as_tensor().clone()))
        .alibi_slopes(sides.slopes.then(|| sl.clone()));
    let (mut at_q, mut at_k, mut parts) = (0, 0, Vec::new());
    // The call's max_seqlen_k (the GPU call's below): the window's extent.
    let max_k = lens.iter().map(|x| x.1).max().unwrap_or(1);
    for &(lq, lk) in lens {
        let n = |t: &Tensor, at, l| t.narrow(0, at, l)?.unsqueeze(0);
        let o = reference_in(
            &n(c[0].as_tensor(), at_q, lq)?,
            &n(c[1].as_tensor(), at_k, lk)?,
            &n(c[2].as_tensor(), at_k, lk)?,
            &pc,
            max_k,
        )?;
        parts.push(o.squeeze(0)?);
        at_q += lq;
        at_k += lk;
    }
    let loss = (Tensor::cat(&parts, 0)? * &w)?.sum_all()?;
    let gc = loss.backward()?;
    // GPU: the packed call, the same loss.
    let g = |t: &Tensor| t.to_dtype(dt)?.to_device(&dev);
    let gv: Vec<Var> = [
        g(&q)?,
        g(&k)?,
        g(&v)?,
        sk.to_device(&dev)?,
        sl.to_device(&dev)?,
    ]
    .iter()
    .map(Var::from_tensor)
    .collect::<candle_core::Result<_>>()?;
    let pg = p
        .sinks(sides.sinks.then(|| gv[3].as_tensor().clone()))
        .alibi_slopes(sides.slopes.then(|| gv[4].as_tensor().clone()));
    let cu = |f: fn(&(usize, usize)) -> usize| -> candle_core::Result<Tensor> {
        let l: Vec<usize> = lens.iter().map(f).collect();
        Tensor::new(cumulative(&l).as_slice(), &dev)
    };
    let max = |f: fn(&(usize, usize)) -> usize| lens.iter().map(f).max().unwrap_or(1);
    let o = cudnn_candle::flash_attn_varlen_with(
        gv[0].as_tensor(),
        gv[1].as_tensor(),
        gv[2].as_tensor(),
        &cu(|x| x.0)?,
        &cu(|x| x.1)?,
        max(|x| x.0),
        max(|x| x.1),
        &pg,
    )?;
    let loss = (o.to_dtype(DType::F32)? * w.to_device(&dev)?)?.sum_all()?;
    let gg = loss.backward()?;
    let n = if sides.sinks { 4 } else { 3 };
    for (i, name) in ["dq", "dk", "dv", "dsinks"].into_iter().enumerate().take(n) {
        let want = gc.get(c[i].as_tensor()).ok_or("no CPU gradient")?;
        let got = gg.get(gv[i].as_tensor()).ok_or("no GPU gradient")?;
        close(name, got, want, 2.0 * tol(dt))?;
    }
    if sides.slopes && gg.get(gv[4].as_tensor()).is_some() {
        return Err("the slopes got a gradient (FlashAttention gives them none)".into());
    }
    Ok(())
}

/// Review (alibi) defect 3: a KV-cache score bias whose own bytes are
/// about 0.4 of the device's memory but whose building takes three times
/// that (the product and the masked sum alive together, plus the
/// per-element intermediates: 8 heads x 8 + 32 bytes per `(seq_q,
/// capacity)` element against the bias's 8 x 4) is refused, typed, naming
/// `seq_q / cache capacity`, before anything is allocated (before: the 1x
/// check accepted it and candle's allocation failed, untyped).
fn kvcache_bias_past_its_build_peak_is_refused() -> TestResult {
    let dev = cuda()?;
    let candle_core::Device::Cuda(cd) = &dev else {
        return Err("not a CUDA device".into());
    };
    let total = cd.cuda_stream().context().total_mem()?;
    let (h, cap) = (8usize, 1usize << 16);
    // The bias: 4 * h * seq_q * cap bytes = seq_q * 2 MiB.
    let sq = (total as f64 * 0.4 / (4 * h * cap) as f64) as usize;
    let q = Tensor::zeros((1, sq, h, 64), DType::F16, &dev)?;
    let kc = Tensor::zeros((1, cap, 1, 64), DType::F16, &dev)?;
    let lens = Tensor::new(&[5u32], &dev)?;
    let p = on(&dev, AttnParams::new(S).alibi_slopes(Some(slopes(h))))?;
    refused(
        cudnn_candle::flash_attn_kvcache(&q, &kc, &kc, &lens, &p),
        "seq_q / cache capacity",
    )
}

/// A dense call whose slopes are a `Var`: accepted; dq, dk, dv against
/// candle's CPU autograd of the reference, and no gradient for the
/// slopes (FlashAttention's `backward` returns None for them).
fn dense_slopes_var_case(sq: usize, skv: usize, causal: bool, dt: DType) -> TestResult {
    let dev = cuda()?;
    let (h, d) = (4usize, 64usize);
    let (q, k, v) = inputs((2, sq, h, d), (2, skv, h, d), dt)?;
    let w = Tensor::randn(0f32, 1.0, (2, sq, h, d), &Device::Cpu)?;
    let p = AttnParams::new(S).causal(causal);
    let c: Vec<Var> = [&q, &k, &v]
        .into_iter()
        .map(Var::from_tensor)
        .collect::<candle_core::Result<_>>()?;
    let pc = p.clone().alibi_slopes(Some(slopes(h)));
    let loss =
        (reference(c[0].as_tensor(), c[1].as_tensor(), c[2].as_tensor(), &pc)? * &w)?.sum_all()?;
    let gc = loss.backward()?;
    let g = |t: &Tensor| t.to_dtype(dt)?.to_device(&dev);
    let sv = Var::from_tensor(&slopes(h).to_device(&dev)?)?;
    let gv: Vec<Var> = [g(&q)?, g(&k)?, g(&v)?]
        .iter()
        .map(Var::from_tensor)
        .collect::<candle_core::Result<_>>()?;
    let o = cudnn_candle::flash_attn_alibi(
        gv[0].as_tensor(),
        gv[1].as_tensor(),
        gv[2].as_tensor(),
        sv.as_tensor(),
        S,
        causal,
    )?;
    let loss = (o.to_dtype(DType::F32)? * w.to_device(&dev)?)?.sum_all()?;
    let gg = loss.backward()?;
    for (i, name) in ["dq", "dk", "dv"].into_iter().enumerate() {
        let want = gc.get(c[i].as_tensor()).ok_or("no CPU gradient")?;
        let got = gg.get(gv[i].as_tensor()).ok_or("no GPU gradient")?;
        close(name, got, want, 2.0 * tol(dt))?;
    }
    if gg.get(sv.as_tensor()).is_some() {
        return Err("the slopes got a gradient (FlashAttention gives them none)".into());
    }
    Ok(())
}

pub fn trials() -> Vec<Trial> {
    let alibi = |h: usize| AttnParams::new(S).alibi_slopes(Some(slopes(h)));
    let (sinks_only, slopes_only) = (
        Sides {
            sinks: true,
            slopes: false,
        },
        Sides {
            sinks: false,
            slopes: true,
        },
    );
    vec![
        gpu(
            "f8_inputs_refused_typed_before_a_copy",
            f8_inputs_refused_typed,
        ),
        gpu("flash_attn_varlen_sinks_grad_causal_gqa_bf16", move || {
            varlen_grad_case(
                &[(5, 5), (2, 2), (9, 9)],
                (4, 2, 64),
                DType::BF16,
                AttnParams::new(S).causal(true),
                sinks_only,
            )
        }),
        gpu("flash_attn_varlen_sinks_grad_chunked_f16", move || {
            // Fewer queries than keys, not causal.
            varlen_grad_case(
                &[(3, 7), (4, 4), (6, 11)],
                (4, 4, 64),
                DType::F16,
                AttnParams::new(S),
                sinks_only,
            )
        }),
        gpu(
            "flash_attn_varlen_alibi_slopes_var_native_bf16",
            move || {
                // Causal packed prefill: cuDNN's ALiBi; the slopes get no gradient.
                varlen_grad_case(
                    &[(5, 5), (1, 1), (9, 9)],
                    (4, 4, 64),
                    DType::BF16,
                    AttnParams::new(S).causal(true),
                    slopes_only,
                )
            },
        ),
        gpu("flash_attn_varlen_alibi_slopes_var_bias_f16", move || {
            // Chunked prefill: the score bias; the slopes get no gradient.
            varlen_grad_case(
                &[(3, 7), (4, 4)],
                (4, 2, 64),
                DType::F16,
                AttnParams::new(S).causal(true),
                slopes_only,
            )
        }),
        gpu("flash_attn_alibi_slopes_var_native_bf16", || {
            dense_slopes_var_case(32, 32, true, DType::BF16)
        }),
        gpu("flash_attn_alibi_slopes_var_bias_f16", || {
            dense_slopes_var_case(16, 40, false, DType::F16)
        }),
        gpu("flash_attn_kvcache_alibi_decode_loop_bf16", move || {
            // One query per step (the score bias), GQA, lengths apart.
            kvcache_case(
                (4, 1, 8, 2, 64, 64),
                vec![3, 17, 40, 9],
                DType::BF16,
                alibi(8).causal(true),
                4,
            )
        }),
        gpu("flash_attn_kvcache_alibi_chunk_windowed_f16", move || {
            // A causal chunk of 4 queries after a prefix, a left window.
            kvcache_case(
                (3, 4, 4, 4, 64, 48),
                vec![4, 20, 33],
                DType::F16,
                alibi(4).window(Some(7), Some(0)),
                3,
            )
        }),
        gpu("flash_attn_kvcache_alibi_not_causal_f16", move || {
            kvcache_case((2, 3, 4, 2, 64, 32), vec![5, 30], DType::F16, alibi(4), 2)
        }),
        gpu(
            "flash_attn_kvcache_alibi_left_window_capacity_f16",
            move || {
                // Review (alibi) defect 2: not causal, a left window alone, 4
                // queries against 2 and 1 valid keys in a cache of 8:
                // FlashAttention bounds the right at the capacity (every row
                // sees its keys; a per-sequence rule hid key 1 from row 0 and
                // refused the length 1). Then 6 and 5 keys.
                kvcache_case(
                    (2, 4, 4, 2, 64, 8),
                    vec![2, 1],
                    DType::F16,
                    alibi(4).window(Some(2), None),
                    2,
                )?;
                kvcache_case(
                    (1, 4, 4, 4, 64, 8),
                    vec![1],
                    DType::BF16,
                    alibi(4).window(Some(1), None),
                    1,
                )
            },
        ),
        gpu("flash_attn_alibi_slopes_of_another_batch_refused", || {
            // (3, heads) slopes with equal rows on a batch of 2: refused,
            // typed (FlashAttention's set_params_alibi), dense and KV
            // cache (before: the first row was taken and the call ran).
            let dev = cuda()?;
            let (q, k, v) = inputs((2, 4, 4, 64), (2, 8, 4, 64), DType::F16)?;
            let g = |t: &Tensor| t.to_dtype(DType::F16)?.to_device(&dev);
            let (q, k, v) = (g(&q)?, g(&k)?, g(&v)?);
            let sl = slopes(4);
            let three = Tensor::stack(&[&sl, &sl, &sl], 0)?.to_device(&dev)?;
            let p = AttnParams::new(S).causal(true).alibi_slopes(Some(three));
            refused(
                cudnn_candle::flash_attn_with(&q, &k, &v, &p),
                "alibi_slopes",
            )?;
            let lens = Tensor::new(&[5u32, 8], &dev)?;
            refused(
                cudnn_candle::flash_attn_kvcache(&q, &k, &v, &lens, &p),
                "alibi_slopes",
            )
        }),
        gpu(
            "flash_attn_kvcache_alibi_bias_past_its_build_peak_refused",
            kvcache_bias_past_its_build_peak_is_refused,
        ),
        gpu("flash_attn_kvcache_alibi_native_prefill_bf16", move || {
            // Every length seq_q, causal: cuDNN's own ALiBi (top-left).
            kvcache_case(
                (2, 16, 8, 8, 64, 64),
                vec![16, 16],
                DType::BF16,
                alibi(8).causal(true),
                1,
            )
        }),
        gpu("flash_attn_kvcache_alibi_sinks_decode_bf16", move || {
            // Sinks and ALiBi in a decode step (two-row query, the bias of
            // the distance form).
            kvcache_case(
                (2, 1, 4, 4, 64, 32),
                vec![5, 31],
                DType::BF16,
                alibi(4).causal(true).sinks(Some(sinks(4))),
                2,
            )
        }),
        gpu("flash_attn_kvcache_alibi_batch_heads_slopes", move || {
            // (batch, heads) slopes with equal rows, as FlashAttention takes.
            let sl = slopes(4);
            let both = Tensor::stack(&[&sl, &sl], 0)?;
            kvcache_case(
                (2, 1, 4, 4, 64, 32),
                vec![7, 20],
                DType::BF16,
                AttnParams::new(S).causal(true).alibi_slopes(Some(both)),
                1,
            )
        }),
        gpu(
            "flash_attn_kvcache_alibi_batch_heads_rows_differ",
            move || {
                // (batch, heads) slopes whose rows differ (FlashAttention takes
                // them): each sequence its own row, through the score bias,
                // also for a causal prefill (every length seq_q).
                let sl = slopes(4);
                let rows = Tensor::stack(&[&sl, &(&sl * 0.5)?], 0)?;
                kvcache_case(
                    (2, 1, 4, 4, 64, 32),
                    vec![7, 20],
                    DType::BF16,
                    AttnParams::new(S)
                        .causal(true)
                        .alibi_slopes(Some(rows.clone())),
                    2,
                )?;
                kvcache_case(
                    (2, 8, 4, 4, 64, 32),
                    vec![8, 8],
                    DType::F16,
                    AttnParams::new(S).causal(true).alibi_slopes(Some(rows)),
                    1,
                )
            },
        ),
        gpu("flash_attn_paged_alibi_decode_loop_bf16", move || {
            paged_case(
                (4, 1, 8, 2, 128),
                (33, 16, 6),
                vec![1, 17, 60, 96],
                DType::BF16,
                alibi(8).causal(true),
                3,
            )
        }),
        gpu("flash_attn_paged_alibi_chunk_windowed_f16", move || {
            paged_case(
                (2, 4, 4, 4, 64),
                (19, 32, 3),
                vec![4, 70],
                DType::F16,
                alibi(4).window(Some(9), Some(0)),
                2,
            )
        }),
        gpu(
            "flash_attn_paged_alibi_left_window_not_causal_f16",
            move || {
                // Not causal, a left window, 6 queries against 1 and 3 keys
                // (lq > lk + 1): the right side is the call's extent, 2 blocks
                // of 16.
                paged_case(
                    (2, 6, 4, 4, 64),
                    (9, 16, 2),
                    vec![1, 3],
                    DType::F16,
                    alibi(4).window(Some(3), None),
                    2,
                )
            },
        ),
        gpu("flash_attn_paged_alibi_native_prefill_bf16", move || {
            paged_case(
                (2, 16, 4, 4, 64),
                (9, 16, 2),
                vec![16, 16],
                DType::BF16,
                alibi(4).causal(true),
                1,
            )
        }),
    ]
}
