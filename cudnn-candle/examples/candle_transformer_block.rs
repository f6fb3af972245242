//! A small pre-norm transformer block in candle (RMS norm, attention with
//! grouped-query heads, a GELU MLP) whose attention is
//! `cudnn_candle::flash_attn`: one training step (loss and gradients) and a
//! short decode loop against a growing paged KV cache (vLLM's block-table
//! layout, `cudnn_candle::flash_attn_paged`), each checked against the
//! same block on candle's CPU with a plain softmax attention (an
//! independent reference).
//!
//! Without a GPU it says what it would run and plans the block's attention
//! graphs (forward, training forward, backward, decode step) for an H200.
//!
//! `cargo run -p cudnn-candle --example candle_transformer_block`

use candle_core::{D, DType, Device, Tensor, Var};
use cudnn::graph::{Plan, Policy, Target};
use cudnn_candle::graphs::{self, bshd};
use cudnn_candle::params::{self, Arg, AttnParams};

const B: usize = 2;
const S: usize = 32;
const H: usize = 8;
const HKV: usize = 2;
const HD: usize = 64;
const DM: usize = H * HD;
const STEPS: usize = 8;
/// The decode loop's KV cache capacity (fixed: one attention plan for the loop).
const CAP: usize = S + STEPS;
/// Tokens per block of the paged decode cache (a power of two dividing CAP).
const BLOCK: usize = 8;

struct Block {
    wq: Tensor,
    wk: Tensor,
    wv: Tensor,
    wo: Tensor,
    w1: Tensor,
    w2: Tensor,
}

impl Block {
    fn new(dev: &Device) -> candle_core::Result<Self> {
        let w = |i, o| -> candle_core::Result<Tensor> {
            (Tensor::randn(0f32, 1.0, (i, o), &Device::Cpu)? / (i as f64).sqrt())?.to_device(dev)
        };
        Ok(Self {
            wq: w(DM, DM)?,
            wk: w(DM, HKV * HD)?,
            wv: w(DM, HKV * HD)?,
            wo: w(DM, DM)?,
            w1: w(DM, 4 * DM)?,
            w2: w(4 * DM, DM)?,
        })
    }

    fn to(&self, dev: &Device, dt: DType) -> candle_core::Result<Self> {
        let c = |t: &Tensor| t.to_device(dev)?.to_dtype(dt);
        Ok(Self {
            wq: c(&self.wq)?,
            wk: c(&self.wk)?,
            wv: c(&self.wv)?,
            wo: c(&self.wo)?,
            w1: c(&self.w1)?,
            w2: c(&self.w2)?,
        })
    }
}

fn rms_norm(x: &Tensor) -> candle_core::Result<Tensor> {
    let ms = x.sqr()?.mean_keepdim(D::Minus1)?;
    x.broadcast_div(&(ms + 1e-5)?.sqrt()?)
}

/// Plain attention on `(b, s, h, d)` tensors: the reference.
fn softmax_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    offset: usize,
) -> candle_core::Result<Tensor> {
    let (b, sq, h, d) = q.dims4()?;
    let skv = k.dim(1)?;
    let rep = h / k.dim(2)?;
    let heads = |t: &Tensor| -> candle_core::Result<Tensor> {
        let (b, s, hk, d) = t.dims4()?;
        t.unsqueeze(3)?
            .broadcast_as((b, s, hk, rep, d))?
            .contiguous()?
            .reshape((b, s, h, d))?
            .transpose(1, 2)?
            .contiguous()
    };
    let q = q.transpose(1, 2)?.contiguous()?;
    let s = (q.matmul(&heads(k)?.t()?)? / (d as f64).sqrt())?;
    let mask: Vec<f32> = (0..sq * skv)
        .map(|x| {
            if x % skv <= x / skv + offset {
                0.0
            } else {
                f32::NEG_INFINITY
            }
        })
        .collect();
    let s = s.broadcast_add(&Tensor::from_vec(mask, (sq, skv), q.device())?)?;
    let m = s.max_keepdim(D::Minus1)?.detach();
    let e = s.broadcast_sub(&m)?.exp()?;
    let p = e.broadcast_div(&e.sum_keepdim(D::Minus1)?)?;
    let _ = b;
    p.matmul(&heads(v)?)?.transpose(1, 2)?.contiguous()
}

/// The block on `x` `(b, s, dm)`; `attn` is cuDNN's or the reference.
fn forward(
    w: &Block,
    x: &Tensor,
    cudnn: bool,
    cache: Option<(&Tensor, &Tensor)>,
) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
    let (b, s, _) = x.dims3()?;
    let hn = rms_norm(x)?;
    let q = hn.broadcast_matmul(&w.wq)?.reshape((b, s, H, HD))?;
    let mut k = hn.broadcast_matmul(&w.wk)?.reshape((b, s, HKV, HD))?;
    let mut v = hn.broadcast_matmul(&w.wv)?.reshape((b, s, HKV, HD))?;
    if let Some((kc, vc)) = cache {
        k = Tensor::cat(&[kc, &k], 1)?;
        v = Tensor::cat(&[vc, &v], 1)?;
    }
    let offset = k.dim(1)? - s;
    let p = AttnParams::new(1.0 / (HD as f32).sqrt()).causal(true);
    let a = if cudnn && cache.is_some() {
        // A paged cache in vLLM's layout: the cache's capacity cut into
        // blocks of BLOCK tokens, `(blocks, BLOCK, kv_heads, head_dim)`,
        // sequence `i`'s blocks listed in row `i` of the block table, and
        // the valid lengths: the same graph (one plan) at every step.
        let len = k.dim(1)?;
        let per_seq = CAP / BLOCK;
        let paged = |t: &Tensor| -> candle_core::Result<Tensor> {
            let z = Tensor::zeros((b, CAP - len, HKV, HD), t.dtype(), t.device())?;
            Tensor::cat(&[t, &z], 1)?.reshape((b * per_seq, BLOCK, HKV, HD))
        };
        let table: Vec<i32> = (0..(b * per_seq) as i32).collect();
        let table = Tensor::from_vec(table, (b, per_seq), x.device())?;
        let lens = Tensor::new(vec![len as i32; b].as_slice(), x.device())?;
        cudnn_candle::flash_attn_paged(&q, &paged(&k)?, &paged(&v)?, &table, &lens, &p)?
    } else if cudnn {
        cudnn_candle::flash_attn_with(&q, &k, &v, &p)?
    } else {
        softmax_attention(&q, &k, &v, offset)?
    };
    let x = (x + a.reshape((b, s, DM))?.broadcast_matmul(&w.wo)?)?;
    let m = rms_norm(&x)?
        .broadcast_matmul(&w.w1)?
        .gelu()?
        .broadcast_matmul(&w.w2)?;
    Ok(((x + m)?, k, v))
}

fn max_rel(a: &Tensor, b: &Tensor) -> candle_core::Result<f32> {
    let a = a.to_device(&Device::Cpu)?.to_dtype(DType::F32)?;
    let b = b.to_device(&Device::Cpu)?.to_dtype(DType::F32)?;
    let d = (&a - &b)?
        .abs()?
        .flatten_all()?
        .max(0)?
        .to_scalar::<f32>()?;
    let m = b
        .abs()?
        .flatten_all()?
        .max(0)?
        .to_scalar::<f32>()?
        .max(1e-6);
    Ok(d / m)
}

fn plan_only() -> cudnn::Result<()> {
    println!(
        "no GPU here: a {B}x{S} block (d_model {DM}, {H} heads, {HKV} KV heads, head dim {HD}) would run"
    );
    println!(
        "  one bf16 training step (flash_attn forward + cuDNN attention backward) and {STEPS} decode steps,"
    );
    println!(
        "  each checked against the same block on the CPU; planning its attention graphs for an H200:"
    );
    let target = Target::preset("h200")?;
    let contiguous = |d: [usize; 4]| [d[1] * d[2] * d[3], d[2] * d[3], d[3], 1];
    for (what, sq, skv) in [("prefill / training", S, S), ("decode step", 1, CAP)] {
        let (qd, kd) = ([B, sq, H, HD], [B, skv, HKV, HD]);
        let (qs, ks) = (contiguous(qd), contiguous(kd));
        let q = Arg {
            name: "q",
            dims: &qd,
            strides: &qs,
            dtype: candle_core::DType::BF16,
        };
        let k = Arg {
            name: "k",
            dims: &kd,
            strides: &ks,
            dtype: candle_core::DType::BF16,
        };
        let v = Arg { name: "v", ..k };
        let d = params::dense(
            &q,
            &k,
            &v,
            &AttnParams::new(1.0 / (HD as f32).sqrt()).causal(true),
        )?;
        let [qd, kd, vd, _] = graphs::dims(&d.cfg);
        let mut kinds = vec![("forward", graphs::forward(&d.cfg, &d.strides)?)];
        if sq == S {
            let t = d.cfg.clone().training(true);
            kinds.push((
                "training forward",
                graphs::forward(&t, &[bshd(qd), bshd(kd), bshd(vd)])?,
            ));
            kinds.push(("backward", graphs::backward(&t)?));
        }
        for (kind, g) in kinds {
            let (plan, report) = Plan::build(&g.build()?, &target, &Policy::default())?;
            println!(
                "  {what} {kind}: {} candidates, engine {:?}, workspace {} bytes",
                report.candidates.len(),
                report.chosen,
                plan.workspace_size()
            );
        }
    }
    // The decode step against the paged cache.
    let (qd, kd) = ([B, 1, H, HD], [B * CAP / BLOCK, BLOCK, HKV, HD]);
    let (qs, ks) = (contiguous(qd), contiguous(kd));
    let q = Arg {
        name: "q",
        dims: &qd,
        strides: &qs,
        dtype: candle_core::DType::BF16,
    };
    let k = Arg {
        name: "k_cache",
        dims: &kd,
        strides: &ks,
        dtype: candle_core::DType::BF16,
    };
    let v = Arg {
        name: "v_cache",
        ..k
    };
    let table: Vec<i64> = (0..(B * CAP / BLOCK) as i64).collect();
    let r = params::paged(
        &q,
        &k,
        &v,
        (&[B, CAP / BLOCK], &table),
        &[S as i64; B],
        &AttnParams::new(1.0 / (HD as f32).sqrt()).causal(true),
    )?;
    let g = graphs::forward(&r.cfg, &[r.q_strides, r.kv_strides[0], r.kv_strides[1]])?;
    let (plan, report) = Plan::build(&g.build()?, &target, &Policy::default())?;
    println!(
        "  paged decode step forward: {} candidates, engine {:?}, workspace {} bytes",
        report.candidates.len(),
        report.chosen,
        plan.workspace_size()
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dev = match Device::new_cuda(0) {
        Ok(d) => d,
        Err(e) => {
            println!("({})", e.to_string().lines().next().unwrap_or(""));
            return Ok(plan_only()?);
        }
    };
    let w32 = Block::new(&Device::Cpu)?;
    let wg = w32.to(&dev, DType::BF16)?;
    let x = Tensor::randn(0f32, 1.0, (B, S, DM), &Device::Cpu)?;
    // Training step: loss = sum(y * r), gradient of the input.
    let r = Tensor::randn(0f32, 1.0, (B, S, DM), &Device::Cpu)?;
    let xc = Var::from_tensor(&x)?;
    let (yc, kc, vc) = forward(&w32, xc.as_tensor(), false, None)?;
    let gc = (&yc * &r)?.sum_all()?.backward()?;
    let xg = Var::from_tensor(&x.to_device(&dev)?.to_dtype(DType::BF16)?)?;
    let (yg, mut kg, mut vg) = forward(&wg, xg.as_tensor(), true, None)?;
    let gg = (yg.to_dtype(DType::F32)? * r.to_device(&dev)?)?
        .sum_all()?
        .backward()?;
    println!(
        "training step: output rel. error {:.2e}",
        max_rel(&yg, &yc)?
    );
    println!(
        "training step: d(input) rel. error {:.2e}",
        max_rel(
            gg.get(xg.as_tensor()).ok_or("no gradient")?,
            gc.get(xc.as_tensor()).ok_or("no gradient")?
        )?
    );
    // Decode loop: one token at a time against the growing cache.
    let (mut kc, mut vc) = (kc.detach(), vc.detach());
    let mut tok = yc.narrow(1, S - 1, 1)?.detach();
    let builds = cudnn_candle::plans().stats().builds;
    for step in 0..STEPS {
        let (yc1, kc1, vc1) = forward(&w32, &tok, false, Some((&kc, &vc)))?;
        let tg = tok.to_device(&dev)?.to_dtype(DType::BF16)?;
        let (yg1, kg1, vg1) = forward(&wg, &tg, true, Some((&kg.detach(), &vg.detach())))?;
        println!(
            "decode step {step}: rel. error {:.2e}",
            max_rel(&yg1, &yc1)?
        );
        (kc, vc, kg, vg) = (kc1, vc1, kg1, vg1);
        tok = (yc1 / 10.0)?;
    }
    println!(
        "plans built during the decode loop: {} (the first step's; a paged cache of fixed size)",
        cudnn_candle::plans().stats().builds - builds
    );
    Ok(())
}
