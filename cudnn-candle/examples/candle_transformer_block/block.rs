//! The block of the `candle_transformer_block` example: a small pre-norm
//! transformer block in candle (RMS norm, attention with grouped-query
//! heads, a GELU MLP) whose attention is `cudnn_candle::flash_attn_with`
//! for training and `cudnn_candle::flash_attn_paged` for decoding, and the
//! same block with a plain softmax attention (candle's matmul, softmax,
//! matmul) on the CPU in f32: the independent reference.
//!
//! [`check`] runs one training step (the loss and the gradient of every
//! weight and of the input) and a decode loop against a paged KV cache
//! (vLLM's block-table layout, blocks out of order) on the GPU, in bf16 and
//! in f32 with the attention in f16 (cuDNN's attention takes no f32), and
//! compares each with the reference ([`TOLERANCES`]); [`plan_for_h200`]
//! plans the block's attention graphs for an H200 without a GPU.
//!
//! Shared, by `#[path]`, with cudnn-candle's test binaries: the gpu tier
//! runs [`check`] (trial `example_block`), the host tier tests the CPU
//! reference, the paged cache and [`plan_for_h200`].
#![allow(dead_code)]

use candle_core::{D, DType, Device, Tensor, Var};
use cudnn::graph::{Plan, Policy, Target};
use cudnn_candle::AttnParams;
use cudnn_candle::graphs::{self, bshd};
use cudnn_candle::params::{self, Arg};

pub const B: usize = 2;
pub const S: usize = 32;
pub const H: usize = 8;
pub const HKV: usize = 2;
pub const HD: usize = 64;
pub const DM: usize = H * HD;
pub const STEPS: usize = 8;
/// The decode loop's KV cache capacity (fixed: one attention plan for the loop).
pub const CAP: usize = S + STEPS;
/// Tokens per block of the paged decode cache (a power of two dividing CAP).
pub const BLOCK: usize = 8;

pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// How the GPU runs the block: the weights' and activations' type, and
/// the attention's (cuDNN's attention takes f16 and bf16).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Precision {
    pub name: &'static str,
    pub dtype: DType,
    pub attn: DType,
}

pub const BF16: Precision = Precision {
    name: "bf16",
    dtype: DType::BF16,
    attn: DType::BF16,
};
/// f32 weights and activations, the attention's q, k, v and output in f16.
pub const F32: Precision = Precision {
    name: "f32 (attention in f16)",
    dtype: DType::F32,
    attn: DType::F16,
};

/// The largest error each comparison may have, relative to the largest
/// magnitude of the reference (the loss: to the loss): `(output, loss,
/// gradients, decode step outputs)`. bf16 keeps 8 significant bits (a
/// unit roundoff of 2^-8 = 3.9e-3 per value), f16 11 (2^-11 = 4.9e-4);
/// the block's sums of up to 2048 products and the backward's longer
/// chains take several of those. The loss, a mean of 32768 squares, averages
/// the rounding away (5.1e-5 in bf16, 5.5e-7 in f32 with f16 attention on
/// the CPU): its bound is about 20 times that, so a wrong attention that
/// moves the loss by a few 1e-3 (a causal mask one key off, a scale 10%
/// high) fails it. The host tier checks every bound is at least twice the
/// error of the same block computed on the CPU in the same types
/// (`example_block_tolerances_cover_rounding`: bf16's output 5.9e-3,
/// decode steps up to 1.4e-2) and that they fail planted bugs
/// (`example_block_tolerances_reject_wrong_attention`: the closest, a
/// scale 10% high, moves bf16's output by 4.0e-2 and its decode steps by
/// 5.7e-2 or more).
pub const TOLERANCES: [(&str, [f64; 4]); 2] = [
    ("bf16", [1.5e-2, 1e-3, 6e-2, 3e-2]),
    ("f32 (attention in f16)", [6e-3, 1e-5, 1.2e-2, 6e-3]),
];

fn tolerances(p: Precision) -> [f64; 4] {
    TOLERANCES
        .iter()
        .find(|(n, _)| *n == p.name)
        .map_or([0.0; 4], |(_, t)| *t)
}

/// Deterministic values of about unit variance (a sum of four uniforms of
/// an xorshift generator, centred): the same inputs on every run.
pub fn noise(dims: &[usize], seed: u64) -> candle_core::Result<Tensor> {
    let n: usize = dims.iter().product();
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 40) as f32 / (1u64 << 24) as f32
    };
    let v: Vec<f32> = (0..n)
        .map(|_| (next() + next() + next() + next() - 2.0) * 3f32.sqrt())
        .collect();
    Tensor::from_vec(v, dims, &Device::Cpu)
}

/// The block's weights, as variables (the training step's gradients).
pub struct Weights {
    pub wq: Var,
    pub wk: Var,
    pub wv: Var,
    pub wo: Var,
    pub w1: Var,
    pub w2: Var,
}

impl Weights {
    /// f32 on the CPU, scaled by 1 / sqrt(fan in).
    pub fn new(seed: u64) -> candle_core::Result<Self> {
        let w = |i: usize, o: usize, k: u64| -> candle_core::Result<Var> {
            Var::from_tensor(&(noise(&[i, o], seed * 16 + k)? / (i as f64).sqrt())?)
        };
        Ok(Self {
            wq: w(DM, DM, 1)?,
            wk: w(DM, HKV * HD, 2)?,
            wv: w(DM, HKV * HD, 3)?,
            wo: w(DM, DM, 4)?,
            w1: w(DM, 4 * DM, 5)?,
            w2: w(4 * DM, DM, 6)?,
        })
    }

    /// New variables holding these values on `dev` in `dt`.
    pub fn to(&self, dev: &Device, dt: DType) -> candle_core::Result<Self> {
        let c = |v: &Var| Var::from_tensor(&v.as_tensor().to_device(dev)?.to_dtype(dt)?);
        Ok(Self {
            wq: c(&self.wq)?,
            wk: c(&self.wk)?,
            wv: c(&self.wv)?,
            wo: c(&self.wo)?,
            w1: c(&self.w1)?,
            w2: c(&self.w2)?,
        })
    }

    pub fn named(&self) -> [(&'static str, &Var); 6] {
        [
            ("wq", &self.wq),
            ("wk", &self.wk),
            ("wv", &self.wv),
            ("wo", &self.wo),
            ("w1", &self.w1),
            ("w2", &self.w2),
        ]
    }
}

/// RMS norm over the last dim, computed in f32 (as models do) and
/// returned in `x`'s type.
pub fn rms_norm(x: &Tensor) -> candle_core::Result<Tensor> {
    let x32 = x.to_dtype(DType::F32)?;
    let ms = x32.sqr()?.mean_keepdim(D::Minus1)?;
    x32.broadcast_div(&(ms + 1e-5)?.sqrt()?)?
        .to_dtype(x.dtype())
}

/// Plain causal attention on `(b, s, h, d)` tensors, in their type: the
/// reference. Query `i` sees keys `0..=i + offset` (FlashAttention's
/// bottom-right diagonal when `offset = seq_kv - seq_q`); k and v have
/// `h / kv_heads` query heads each (grouped-query attention). An error
/// unless `kv_heads` divides `h`.
pub fn reference_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    offset: usize,
) -> candle_core::Result<Tensor> {
    reference_attention_with(q, k, v, offset, None)
}

/// A planted bug in the CPU's attention ([`Attn::Mutated`]): the host tier
/// checks that [`compare`]'s tolerances reject each.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mutation {
    /// No causal mask.
    NoCausal,
    /// The causal mask one key late: each query sees the next key too.
    OneFutureKey,
    /// The scale `1 / sqrt(d)` multiplied by this.
    Scale(f64),
    /// Query head `j` reads KV head `j % kv_heads` (not `j / (h / kv_heads)`).
    GqaModulo,
    /// Decode: the pool read in its own order, the block table ignored.
    TableIgnored,
    /// Decode: sequence 0's first block read from sequence 1's.
    OtherSequenceBlock,
    /// Decode: the causal diagonal top-left (the query sees key 0 alone).
    TopLeftCausal,
    /// Decode: every sequence read with sequence 0's length.
    SameLength,
}

/// [`reference_attention`], with `m` planted.
pub fn reference_attention_with(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    offset: usize,
    m: Option<Mutation>,
) -> candle_core::Result<Tensor> {
    let (_, sq, h, d) = q.dims4()?;
    let (skv, hk) = (k.dim(1)?, k.dim(2)?);
    if hk == 0 || h % hk != 0 {
        candle_core::bail!("reference attention: {hk} KV heads do not divide {h} query heads");
    }
    let rep = h / hk;
    let heads = |t: &Tensor| -> candle_core::Result<Tensor> {
        let (b, s, hk, d) = t.dims4()?;
        let t = if m == Some(Mutation::GqaModulo) {
            // Head j = copy j / hk of KV head j % hk.
            Tensor::cat(&vec![t.clone(); rep], 2)?
        } else {
            t.unsqueeze(3)?
                .broadcast_as((b, s, hk, rep, d))?
                .contiguous()?
                .reshape((b, s, h, d))?
        };
        t.transpose(1, 2)?.contiguous()
    };
    let factor = match m {
        Some(Mutation::Scale(f)) => f,
        _ => 1.0,
    };
    let q = q.transpose(1, 2)?.contiguous()?;
    let s = (q.matmul(&heads(k)?.t()?)? * (factor / (d as f64).sqrt()))?;
    let offset = match m {
        Some(Mutation::NoCausal) => skv,
        Some(Mutation::OneFutureKey) => offset + 1,
        _ => offset,
    };
    let mask: Vec<f32> = (0..sq * skv)
        .map(|x| {
            if x % skv <= x / skv + offset {
                0.0
            } else {
                f32::NEG_INFINITY
            }
        })
        .collect();
    let mask = Tensor::from_vec(mask, (sq, skv), q.device())?.to_dtype(s.dtype())?;
    let s = s.broadcast_add(&mask)?;
    let m = s.max_keepdim(D::Minus1)?.detach();
    let e = s.broadcast_sub(&m)?.exp()?;
    let p = e.broadcast_div(&e.sum_keepdim(D::Minus1)?)?;
    p.matmul(&heads(v)?)?.transpose(1, 2)?.contiguous()
}

/// The projections of `x` `(b, s, dm)`: q `(b, s, H, HD)`, k and v `(b,
/// s, HKV, HD)`.
pub fn qkv(w: &Weights, x: &Tensor) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
    let (b, s, _) = x.dims3()?;
    let hn = rms_norm(x)?;
    let q = hn
        .broadcast_matmul(w.wq.as_tensor())?
        .reshape((b, s, H, HD))?;
    let k = hn
        .broadcast_matmul(w.wk.as_tensor())?
        .reshape((b, s, HKV, HD))?;
    let v = hn
        .broadcast_matmul(w.wv.as_tensor())?
        .reshape((b, s, HKV, HD))?;
    Ok((q, k, v))
}

/// The rest of the block after the attention `a` `(b, s, H, HD)`.
pub fn rest(w: &Weights, x: &Tensor, a: &Tensor) -> candle_core::Result<Tensor> {
    let (b, s, _) = x.dims3()?;
    let x = (x + a.reshape((b, s, DM))?.broadcast_matmul(w.wo.as_tensor())?)?;
    let m = rms_norm(&x)?
        .broadcast_matmul(w.w1.as_tensor())?
        .gelu()?
        .broadcast_matmul(w.w2.as_tensor())?;
    x + m
}

/// The attention the block runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Attn {
    /// [`reference_attention`] in the given type (on any device).
    Reference(DType),
    /// cuDNN's (`cudnn_candle`), q, k, v cast to the given type.
    Cudnn(DType),
    /// [`reference_attention`] in the given type with a planted bug.
    Mutated(DType, Mutation),
}

fn causal() -> AttnParams {
    AttnParams::new(1.0 / (HD as f32).sqrt()).causal(true)
}

/// The block on a prompt `x` `(b, s, dm)` (causal over the prompt):
/// its output, and k and v for the cache.
pub fn prefill(w: &Weights, x: &Tensor, attn: Attn) -> candle_core::Result<[Tensor; 3]> {
    let (q, k, v) = qkv(w, x)?;
    let a = match attn {
        Attn::Reference(dt) => {
            reference_attention(&q.to_dtype(dt)?, &k.to_dtype(dt)?, &v.to_dtype(dt)?, 0)?
        }
        Attn::Mutated(dt, m) => reference_attention_with(
            &q.to_dtype(dt)?,
            &k.to_dtype(dt)?,
            &v.to_dtype(dt)?,
            0,
            Some(m),
        )?,
        Attn::Cudnn(dt) => cudnn_candle::flash_attn_with(
            &q.to_dtype(dt)?,
            &k.to_dtype(dt)?,
            &v.to_dtype(dt)?,
            &causal(),
        )?,
    };
    Ok([rest(w, x, &a.to_dtype(x.dtype())?)?, k, v])
}

/// What the pool's unused slots hold: a large finite value, so that an
/// attention reading a slot it should not (past a sequence's length, a
/// block of the other sequence, the table ignored) moves its output far
/// (zeros, the harmless filler, would barely move it; NaN would hide
/// which rows are wrong).
pub const FILL: f64 = 100.0;

/// How many prompt tokens each sequence's cache starts with: different
/// lengths, so that a mix-up of the sequences' lengths shows.
pub const PROMPT_LENS: [usize; B] = [S, S - 5];

/// A paged KV cache in vLLM's layout: `(blocks, BLOCK, HKV, HD)` pools for
/// k and v ([`FILL`] where nothing was written), sequence `i`'s `j`-th
/// block of tokens at pool block `table[i][j]` (a permutation: blocks out
/// of order, as an allocator leaves them), and the number of tokens each
/// sequence holds. Tokens are written in place (`slice_set`).
pub struct PagedCache {
    pub k: Tensor,
    pub v: Tensor,
    pub table: Tensor,
    pub host_table: Vec<i32>,
    pub lens: Vec<usize>,
    pub batch: usize,
    pub per_seq: usize,
}

impl PagedCache {
    /// Room for `cap` tokens of `batch` sequences: an error unless `batch`
    /// and `cap` are positive and `cap` is a multiple of BLOCK.
    pub fn new(batch: usize, cap: usize, dt: DType, dev: &Device) -> candle_core::Result<Self> {
        if batch == 0 || cap == 0 || !cap.is_multiple_of(BLOCK) {
            candle_core::bail!(
                "paged cache: batch {batch} and capacity {cap} must be positive, the capacity a multiple of the block size {BLOCK}"
            );
        }
        let per_seq = cap / BLOCK;
        let Some(blocks) = batch.checked_mul(per_seq) else {
            candle_core::bail!("paged cache: {batch} sequences of {per_seq} blocks overflow");
        };
        // Logical block l at pool block (l * step + 1) % blocks: a
        // permutation when step and blocks are coprime.
        let gcd = |mut a: usize, mut b: usize| {
            while b != 0 {
                (a, b) = (b, a % b);
            }
            a
        };
        let step = (3..).find(|&s| gcd(s, blocks) == 1).unwrap_or(1);
        let host_table: Vec<i32> = (0..blocks)
            .map(|l| ((l * step + 1) % blocks) as i32)
            .collect();
        let filled = || Tensor::ones((blocks, BLOCK, HKV, HD), dt, dev)? * FILL;
        Ok(Self {
            k: filled()?,
            v: filled()?,
            table: Tensor::from_vec(host_table.clone(), (batch, per_seq), dev)?,
            host_table,
            lens: vec![0; batch],
            batch,
            per_seq,
        })
    }

    pub fn capacity(&self) -> usize {
        self.per_seq * BLOCK
    }

    /// Write `k` / `v` `(batch, s, HKV, HD)` after the tokens held, all
    /// `s` of them for every sequence.
    pub fn append(&mut self, k: &Tensor, v: &Tensor) -> candle_core::Result<()> {
        let s = k.dim(1)?;
        self.append_first(k, v, &vec![s; self.batch])
    }

    /// Write the first `n[i]` tokens of row `i` of `k` / `v` `(batch, s,
    /// HKV, HD)` after the tokens sequence `i` holds. Checked for every
    /// sequence before anything is written.
    pub fn append_first(&mut self, k: &Tensor, v: &Tensor, n: &[usize]) -> candle_core::Result<()> {
        let s = k.dim(1)?;
        if n.len() != self.batch || k.dim(0)? != self.batch || v.dims() != k.dims() {
            candle_core::bail!(
                "paged cache: {} counts, k {:?} and v {:?} for {} sequences",
                n.len(),
                k.dims(),
                v.dims(),
                self.batch
            );
        }
        for (i, (&len, &n)) in self.lens.iter().zip(n).enumerate() {
            if n > s || len + n > self.capacity() {
                candle_core::bail!(
                    "paged cache: sequence {i}: {len} + {n} tokens (of {s}) past its capacity {}",
                    self.capacity()
                );
            }
        }
        let rows = self.k.dim(0)? * BLOCK;
        let (kf, vf) = (
            self.k.reshape((rows, HKV, HD))?,
            self.v.reshape((rows, HKV, HD))?,
        );
        for (i, &count) in n.iter().enumerate() {
            let mut t = 0;
            while t < count {
                let pos = self.lens[i] + t;
                // The run of tokens that stays in this block.
                let run = (BLOCK - pos % BLOCK).min(count - t);
                let block = self.host_table[i * self.per_seq + pos / BLOCK] as usize;
                let row = block * BLOCK + pos % BLOCK;
                for (pool, src) in [(&kf, k), (&vf, v)] {
                    let part = src.narrow(0, i, 1)?.narrow(1, t, run)?.squeeze(0)?;
                    pool.slice_set(&part.to_dtype(pool.dtype())?.contiguous()?, 0, row)?;
                }
                t += run;
            }
            self.lens[i] += count;
        }
        Ok(())
    }

    /// Sequence `i`'s tokens, gathered through `table` (a `(batch,
    /// per_seq)` table, row-major): `(1, lens[i], HKV, HD)` each.
    pub fn gathered_through(
        &self,
        table: &[i32],
        i: usize,
    ) -> candle_core::Result<(Tensor, Tensor)> {
        self.gathered_len(table, i, self.lens[i])
    }

    /// The first `len` tokens of sequence `i`'s blocks through `table`.
    fn gathered_len(
        &self,
        table: &[i32],
        i: usize,
        len: usize,
    ) -> candle_core::Result<(Tensor, Tensor)> {
        let g = |pool: &Tensor| -> candle_core::Result<Tensor> {
            let ids: Vec<u32> = table[i * self.per_seq..(i + 1) * self.per_seq]
                .iter()
                .map(|&b| b as u32)
                .collect();
            let row = Tensor::new(ids.as_slice(), pool.device())?;
            pool.index_select(&row, 0)?
                .reshape((1, self.capacity(), HKV, HD))?
                .narrow(1, 0, len)
        };
        Ok((g(&self.k)?, g(&self.v)?))
    }

    /// Sequence `i`'s tokens through the cache's table (what the
    /// attention reads).
    pub fn gathered(&self, i: usize) -> candle_core::Result<(Tensor, Tensor)> {
        self.gathered_through(&self.host_table, i)
    }

    /// `(batch,)` i32: every sequence's length.
    pub fn lens(&self, dev: &Device) -> candle_core::Result<Tensor> {
        let l: Vec<i32> = self.lens.iter().map(|&l| l as i32).collect();
        Tensor::new(l.as_slice(), dev)
    }
}

/// One decode step against the paged cache: `x` `(b, 1, dm)`; its k and v
/// are written into the cache first. `attn`: cuDNN's paged attention, or
/// the reference on each sequence's tokens gathered through the table.
pub fn decode_paged(
    w: &Weights,
    x: &Tensor,
    cache: &mut PagedCache,
    attn: Attn,
) -> candle_core::Result<Tensor> {
    let (q, k, v) = qkv(w, x)?;
    cache.append(&k, &v)?;
    let a = match attn {
        Attn::Cudnn(dt) => cudnn_candle::flash_attn_paged(
            &q.to_dtype(dt)?,
            &cache.k,
            &cache.v,
            &cache.table,
            &cache.lens(x.device())?,
            &causal(),
        )?,
        Attn::Reference(dt) | Attn::Mutated(dt, _) => {
            let m = match attn {
                Attn::Mutated(_, m) => Some(m),
                _ => None,
            };
            let mut table = cache.host_table.clone();
            match m {
                Some(Mutation::TableIgnored) => {
                    table = (0..table.len() as i32).collect();
                }
                Some(Mutation::OtherSequenceBlock) if cache.batch > 1 => {
                    table[0] = table[cache.per_seq];
                }
                _ => {}
            }
            let mut out = Vec::new();
            for i in 0..cache.batch {
                let len = match m {
                    Some(Mutation::SameLength) => cache.lens[0],
                    _ => cache.lens[i],
                };
                let (kc, vc) = cache.gathered_len(&table, i, len)?;
                let qi = q.narrow(0, i, 1)?.to_dtype(dt)?;
                let off = match m {
                    Some(Mutation::TopLeftCausal) => 0,
                    _ => len.saturating_sub(1),
                };
                let (kc, vc) = (kc.to_dtype(dt)?, vc.to_dtype(dt)?);
                out.push(reference_attention_with(&qi, &kc, &vc, off, m)?);
            }
            Tensor::cat(&out, 0)?
        }
    };
    rest(w, x, &a.to_dtype(x.dtype())?)
}

/// One decode step of the reference on one sequence: `x` `(1, 1, dm)`,
/// its cache as whole tensors, the new token's k and v appended
/// (returned: the grown cache).
pub fn decode_reference(
    w: &Weights,
    x: &Tensor,
    (kc, vc): (&Tensor, &Tensor),
    attn_dt: DType,
) -> candle_core::Result<[Tensor; 3]> {
    let (q, k, v) = qkv(w, x)?;
    let k = Tensor::cat(&[kc, &k], 1)?;
    let v = Tensor::cat(&[vc, &v], 1)?;
    let off = k.dim(1)? - q.dim(1)?;
    let c = |t: &Tensor| t.to_dtype(attn_dt);
    let a = reference_attention(&c(&q)?, &c(&k)?, &c(&v)?, off)?;
    Ok([rest(w, x, &a.to_dtype(x.dtype())?)?, k, v])
}

/// `max |got - want| / max |want|` in f32 on the CPU (`inf` for a NaN).
pub fn max_rel(got: &Tensor, want: &Tensor) -> candle_core::Result<f64> {
    let got = got.to_device(&Device::Cpu)?.to_dtype(DType::F32)?;
    let want = want.to_device(&Device::Cpu)?.to_dtype(DType::F32)?;
    if got.dims() != want.dims() {
        candle_core::bail!("shapes differ: {:?} and {:?}", got.dims(), want.dims());
    }
    let max = |t: &Tensor| -> candle_core::Result<f32> {
        t.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()
    };
    let d = f64::from(max(&(&got - &want)?)?);
    let nan = got
        .flatten_all()?
        .to_vec1::<f32>()?
        .iter()
        .any(|x| !x.is_finite());
    let r = d / f64::from(max(&want)?.max(1e-6));
    Ok(if nan || !r.is_finite() {
        f64::INFINITY
    } else {
        r
    })
}

/// One comparison: what, its error, its tolerance.
#[derive(Debug, Clone)]
pub struct Row {
    pub what: String,
    pub error: f64,
    pub tolerance: f64,
}

impl Row {
    pub fn ok(&self) -> bool {
        self.error <= self.tolerance
    }
}

impl std::fmt::Display for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:<44} rel. error {:.2e}  (tolerance {:.1e}){}",
            self.what,
            self.error,
            self.tolerance,
            if self.ok() { "" } else { "  MISMATCH" }
        )
    }
}

/// The inputs of a run: the prompt, the training target, the weights.
pub struct Inputs {
    pub x: Tensor,
    pub target: Tensor,
    pub w: Weights,
}

impl Inputs {
    pub fn new(seed: u64) -> candle_core::Result<Self> {
        Ok(Self {
            x: noise(&[B, S, DM], seed * 16 + 7)?,
            target: noise(&[B, S, DM], seed * 16 + 8)?,
            w: Weights::new(seed)?,
        })
    }
}

/// Mean squared error against `target`, in f32.
fn mse(y: &Tensor, target: &Tensor) -> candle_core::Result<Tensor> {
    (y.to_dtype(DType::F32)? - target)?.sqr()?.mean_all()
}

/// Which attention [`compare`] checks against the reference.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum How {
    /// cuDNN's (the GPU check).
    Cudnn,
    /// The reference itself in `p`'s types (its rounding error alone).
    Cpu,
    /// The reference in `p`'s types with a planted bug.
    Mutated(Mutation),
}

/// The training step and the decode loop on `dev` (the block in `p`'s
/// types, the attention `how` says), each compared with the reference: f32
/// on the CPU. Both decode through a [`PagedCache`]. Returns every
/// comparison; also the plans built after the first decode step (cuDNN
/// only, else 0).
pub fn compare(inputs: &Inputs, dev: &Device, p: Precision, how: How) -> Result<(Vec<Row>, u64)> {
    let [t_out, t_loss, t_grad, t_dec] = tolerances(p);
    let mut rows = Vec::new();
    let mut row = |what: String, error: f64, tolerance: f64| {
        rows.push(Row {
            what: format!("{}: {what}", p.name),
            error,
            tolerance,
        })
    };
    // The reference: f32 on the CPU, its gradients by candle's autograd.
    let cpu = &Device::Cpu;
    let xr = Var::from_tensor(&inputs.x)?;
    let [yr, kr, vr] = prefill(&inputs.w, xr.as_tensor(), Attn::Reference(DType::F32))?;
    let loss_r = mse(&yr, &inputs.target)?;
    let gr = loss_r.backward()?;
    // The same on `dev` in `p`'s types.
    let wg = inputs.w.to(dev, p.dtype)?;
    let xg = Var::from_tensor(&inputs.x.to_device(dev)?.to_dtype(p.dtype)?)?;
    let attn = match how {
        How::Cudnn => Attn::Cudnn(p.attn),
        How::Cpu => Attn::Reference(p.attn),
        How::Mutated(m) => Attn::Mutated(p.attn, m),
    };
    let [yg, kg, vg] = prefill(&wg, xg.as_tensor(), attn)?;
    let loss_g = mse(&yg, &inputs.target.to_device(dev)?)?;
    let gg = loss_g.backward()?;
    row("training output".into(), max_rel(&yg, &yr)?, t_out);
    let (lr, lg) = (
        f64::from(loss_r.to_scalar::<f32>()?),
        f64::from(loss_g.to_device(cpu)?.to_scalar::<f32>()?),
    );
    let le = ((lg - lr) / lr).abs();
    row(
        format!("training loss ({lg:.5} vs {lr:.5})"),
        if le.is_finite() { le } else { f64::INFINITY },
        t_loss,
    );
    let grad = |g: &candle_core::backprop::GradStore, v: &Var, n: &str| {
        g.get(v.as_tensor())
            .cloned()
            .ok_or_else(|| format!("no gradient for {n}"))
    };
    for ((n, vr), (_, vg)) in inputs.w.named().into_iter().zip(wg.named()) {
        let e = max_rel(&grad(&gg, vg, n)?, &grad(&gr, vr, n)?)?;
        row(format!("d loss / d {n}"), e, t_grad);
    }
    let e = max_rel(&grad(&gg, &xg, "x")?, &grad(&gr, &xr, "x")?)?;
    row("d loss / d input".into(), e, t_grad);

    // The decode loop: each step's input is the reference's output of the
    // step before (scaled), so a step's error is its own and the cache's.
    // The sequences' caches start with different numbers of prompt tokens
    // (PROMPT_LENS); the reference keeps each as whole tensors.
    let mut ref_cache = Vec::new();
    for (i, &n) in PROMPT_LENS.iter().enumerate() {
        let part = |t: &Tensor| t.detach().narrow(0, i, 1)?.narrow(1, 0, n);
        ref_cache.push((part(&kr)?, part(&vr)?));
    }
    let mut cache = PagedCache::new(B, CAP, p.attn, dev)?;
    cache.append_first(&kg.detach(), &vg.detach(), &PROMPT_LENS)?;
    let mut tok = (yr.narrow(1, S - 1, 1)?.detach() / 10.0)?;
    let mut after_first = 0u64;
    for step in 0..STEPS {
        let mut ys = Vec::new();
        for (i, (kc, vc)) in ref_cache.iter_mut().enumerate() {
            let xi = tok.narrow(0, i, 1)?;
            let [y, k, v] = decode_reference(&inputs.w, &xi, (kc, vc), DType::F32)?;
            (*kc, *vc) = (k, v);
            ys.push(y);
        }
        let yr1 = Tensor::cat(&ys, 0)?;
        let tg = tok.to_device(dev)?.to_dtype(p.dtype)?;
        let before = cudnn_candle::plans().stats().builds;
        let yg1 = decode_paged(&wg, &tg, &mut cache, attn)?;
        if step > 0 {
            after_first += cudnn_candle::plans().stats().builds - before;
        }
        row(
            format!(
                "decode step {step} output ({} and {} keys)",
                cache.lens[0], cache.lens[1]
            ),
            max_rel(&yg1, &yr1)?,
            t_dec,
        );
        tok = (yr1 / 10.0)?;
    }
    Ok((rows, after_first))
}

/// The example's GPU check: [`compare`] in bf16 and in f32 (attention in
/// f16) with cuDNN, every row printed; `Err` naming the mismatches, or
/// when a decode step after the first planned again.
pub fn check(dev: &Device) -> Result<Vec<Row>> {
    let inputs = Inputs::new(1)?;
    let mut all = Vec::new();
    let mut bad = Vec::new();
    for p in [BF16, F32] {
        let (rows, replans) = compare(&inputs, dev, p, How::Cudnn)?;
        for r in &rows {
            println!("{r}");
            if !r.ok() {
                bad.push(r.what.clone());
            }
        }
        println!(
            "{}: plans built by decode steps 1..{STEPS}: {replans} (one plan for the loop: the cache's size is fixed)",
            p.name
        );
        if replans > 0 {
            bad.push(format!(
                "{}: {replans} plans built after the first decode step",
                p.name
            ));
        }
        all.extend(rows);
    }
    if bad.is_empty() {
        Ok(all)
    } else {
        Err(format!(
            "{} mismatches against the CPU reference: {}",
            bad.len(),
            bad.join("; ")
        )
        .into())
    }
}

/// One planned graph: what, the number of engine candidates, the chosen
/// engine, its workspace.
pub struct Planned {
    pub what: String,
    pub candidates: usize,
    pub engine: String,
    pub workspace: usize,
}

fn contiguous(d: [usize; 4]) -> [usize; 4] {
    [d[1] * d[2] * d[3], d[2] * d[3], d[3], 1]
}

/// The block's attention graphs planned for an H200 with no device (the
/// crate's driver stub standing in): the training forward and backward
/// over the prompt, and the decode step against the paged cache.
pub fn plan_for_h200() -> cudnn::Result<Vec<Planned>> {
    let target = Target::preset("h200")?;
    let mut out = Vec::new();
    let mut push = |what: String, g: cudnn::graph::Graph| -> cudnn::Result<()> {
        let (plan, report) = Plan::build(&g.build()?, &target, &Policy::default())?;
        out.push(Planned {
            what,
            candidates: report.candidates.len(),
            engine: report
                .chosen
                .map_or_else(|| "none".to_string(), |e| e.to_string()),
            workspace: plan.workspace_size(),
        });
        Ok(())
    };
    let arg = |name, dims: &'static [usize], strides: &'static [usize]| Arg {
        name,
        dims,
        strides,
        dtype: DType::BF16,
    };
    const QD: [usize; 4] = [B, S, H, HD];
    const KD: [usize; 4] = [B, S, HKV, HD];
    const QS: [usize; 4] = [S * H * HD, H * HD, HD, 1];
    const KS: [usize; 4] = [S * HKV * HD, HKV * HD, HD, 1];
    let (q, k) = (arg("q", &QD, &QS), arg("k", &KD, &KS));
    let v = Arg { name: "v", ..k };
    let d = params::dense(&q, &k, &v, &causal())?;
    let [qd, kd, vd, _] = graphs::dims(&d.cfg);
    push(
        "prompt: forward".into(),
        graphs::forward(&d.cfg, &d.strides)?,
    )?;
    let t = d.cfg.clone().training(true);
    push(
        "prompt: training forward".into(),
        graphs::forward(&t, &[bshd(qd), bshd(kd), bshd(vd)])?,
    )?;
    push("prompt: backward".into(), graphs::backward(&t)?)?;
    // The decode step against the paged cache.
    const DQD: [usize; 4] = [B, 1, H, HD];
    const PD: [usize; 4] = [B * CAP / BLOCK, BLOCK, HKV, HD];
    const DQS: [usize; 4] = [H * HD, H * HD, HD, 1];
    const PS: [usize; 4] = [BLOCK * HKV * HD, HKV * HD, HD, 1];
    debug_assert_eq!(contiguous(PD), PS);
    let (q, k) = (arg("q", &DQD, &DQS), arg("k_cache", &PD, &PS));
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
        &PROMPT_LENS.map(|n| (n + 1) as i64),
        &causal(),
    )?;
    push(
        "decode step (paged cache): forward".into(),
        graphs::forward(&r.cfg, &[r.q_strides, r.kv_strides[0], r.kv_strides[1]])?,
    )?;
    Ok(out)
}
