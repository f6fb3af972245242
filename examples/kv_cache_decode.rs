//! `cargo run --release --example kv_cache_decode`: one layer's attention
//! serving from a paged KV cache, as an LLM inference server runs it.
//!
//! Two sequences (prompts of 40 and 27 tokens) with 8 query heads sharing
//! 2 key/value heads (grouped-query attention), head dim 128, bf16, BSHD.
//! K and V live in containers of 12 pages of 16 tokens; each sequence owns
//! 6 pages (room for 96 tokens), listed in its page table in a scattered
//! order. A **prefill** runs the prompt's queries over the prompt's keys
//! (bottom-right causal, lengths per sequence) reading K and V through the
//! page tables; then 4 **decode steps** each write one new token's K and V
//! into its page and run a single query over the grown cache: the same
//! plan every step, only the key lengths (bound as inputs) change.
//! Every step is checked against the f64 reference, which gathers the same
//! pages through the same page tables (`reference::attention::paged_gather`).
//!
//! Without a GPU it plans the prefill and the decode shapes for an H200
//! (deviceless planning through the driver stub), prints the engines and
//! workspace of each construction the loaded cuDNN has, and exits 0. Exit
//! status 1 when the check on a GPU fails or the libraries are missing.

use std::process::ExitCode;

use cudnn::dnn::Handle;
use cudnn::graph::*;
use cudnn::reference::attention as ra;
use cudnn::runtime::{Device, DeviceBuffer, Stream};
use half::bf16;

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

const BATCH: usize = 2;
const HEADS: usize = 8;
const KV_HEADS: usize = 2;
const D: usize = 128;
const BLOCK: usize = 16;
const PAGES: usize = 6;
const BLOCKS: usize = BATCH * PAGES;
const MAX_SEQ: usize = BLOCK * PAGES;
const PROMPT: [usize; BATCH] = [40, 27];
const STEPS: usize = 4;
/// Each sequence's pages, scattered over the container.
const TABLE: [i32; BATCH * PAGES] = [11, 3, 7, 0, 5, 9, 2, 10, 4, 8, 1, 6];

fn config(seq_q: usize) -> SdpaConfig {
    SdpaConfig::new(
        BATCH as i64,
        HEADS as i64,
        seq_q as i64,
        D as i64,
        DType::BF16,
    )
    .gqa(KV_HEADS as i64)
    .kv_len(MAX_SEQ as i64)
    .causal_bottom_right()
    .paged(BLOCK as i64, BLOCKS as i64)
}

fn prefill_config() -> SdpaConfig {
    config(PROMPT.iter().copied().max().unwrap_or(1))
}

fn decode_config() -> SdpaConfig {
    config(1)
}

/// The forward graph with fixed input names.
fn graph(cfg: &SdpaConfig) -> AnyResult<Graph> {
    let mut g = Graph::new();
    let q = g.input("q", cfg.q_spec()?)?;
    let k = g.input("k_cache", cfg.k_spec()?)?;
    let v = g.input("v_cache", cfg.v_spec()?)?;
    let f = g.sdpa_forward(q, k, v, cfg)?;
    g.rename(f.o, "o")?;
    for (t, n) in [
        (f.seq_len_q, "seq_len_q"),
        (f.seq_len_kv, "seq_len_kv"),
        (f.page_table_k, "page_table_k"),
        (f.page_table_v, "page_table_v"),
    ] {
        let t = t.ok_or_else(|| format!("the paged graph has no `{n}` input"))?;
        g.rename(t, n)?;
    }
    Ok(g)
}

fn plan_for(cfg: &SdpaConfig, target: &Target, what: &str) -> AnyResult<Plan> {
    let (plan, report) = Plan::build(&graph(cfg)?.build()?, target, &Policy::default())?;
    println!(
        "{what}: engine {:?} of {} configs, workspace {} B",
        report.chosen,
        report.candidates.len(),
        plan.workspace_size()
    );
    Ok(plan)
}

/// A deterministic value in [-1, 1), rounded to bf16.
fn value(seed: u64, i: usize) -> f64 {
    let mut x = seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 33;
    x = x.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    x ^= x >> 33;
    let v = (x >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
    f64::from(bf16::from_f64(v))
}

/// Token `j`'s K (or V) values of sequence `n`, `[h_kv][d]`.
fn token(seed: u64, n: usize, j: usize) -> Vec<f64> {
    (0..KV_HEADS * D)
        .map(|i| value(seed, (n * MAX_SEQ + j) * KV_HEADS * D + i))
        .collect()
}

/// Where token `j` of sequence `n` starts in a BSHD container
/// (`[blocks, block, h_kv, d]` storage).
fn slot(n: usize, j: usize) -> usize {
    let page = TABLE[n * PAGES + j / BLOCK] as usize;
    (page * BLOCK + j % BLOCK) * KV_HEADS * D
}

/// The host mirror of the caches and the device containers.
struct Cache {
    k: Vec<f64>,
    v: Vec<f64>,
    kd: DeviceBuffer<bf16>,
    vd: DeviceBuffer<bf16>,
}

impl Cache {
    fn new() -> AnyResult<Self> {
        let n = BLOCKS * BLOCK * KV_HEADS * D;
        Ok(Cache {
            k: vec![0.0; n],
            v: vec![0.0; n],
            kd: DeviceBuffer::from_host(&vec![bf16::from_f32(0.0); n])?,
            vd: DeviceBuffer::from_host(&vec![bf16::from_f32(0.0); n])?,
        })
    }

    /// Write token `j` of sequence `n` into its page (host and device).
    fn write(&mut self, n: usize, j: usize) -> AnyResult<()> {
        let at = slot(n, j);
        let len = KV_HEADS * D;
        for (host, dev, seed) in [
            (&mut self.k, &mut self.kd, 1u64),
            (&mut self.v, &mut self.vd, 2),
        ] {
            let t = token(seed, n, j);
            host[at..at + len].copy_from_slice(&t);
            let b: Vec<bf16> = t.iter().map(|&x| bf16::from_f64(x)).collect();
            dev.slice_mut(at..at + len)?.copy_from_host(&b)?;
        }
        Ok(())
    }
}

/// Run `plan` for queries `q` (BSHD `[b, s_q, h, d]`) with the given
/// lengths; returns O (BSHD, f64).
fn run(
    h: &mut Handle,
    cfg: &SdpaConfig,
    plan: &Plan,
    cache: &Cache,
    q: &[f64],
    lens_q: &[i32],
    lens_kv: &[i32],
) -> AnyResult<Vec<f64>> {
    let qb = DeviceBuffer::from_host(&q.iter().map(|&x| bf16::from_f64(x)).collect::<Vec<_>>())?;
    let mut ob = DeviceBuffer::from_host(&vec![bf16::from_f32(f32::NAN); q.len()])?;
    // Checked lengths: each within the sequence extent of Q / the cache.
    let (lq, lkv) = (
        SeqLengths::new(lens_q, BATCH, cfg.seq_q)?,
        SeqLengths::new(lens_kv, BATCH, cfg.seq_kv)?,
    );
    let table = DeviceBuffer::from_host(&TABLE)?;
    {
        let mut b = plan.bindings();
        b.input("q", qb.as_slice())?
            .input("k_cache", cache.kd.as_slice())?
            .input("v_cache", cache.vd.as_slice())?
            .seq_lengths("seq_len_q", &lq)?
            .seq_lengths("seq_len_kv", &lkv)?
            .output("o", ob.as_slice_mut())?;
        for name in ["page_table_k", "page_table_v"] {
            // SAFETY: TABLE lists pages 0..BLOCKS (the container's), and
            // every key length is at most PAGES * BLOCK (the cache's size).
            unsafe { b.input_page_table(name, table.as_slice())? };
        }
        plan.execute(h, &mut b)?;
    }
    h.stream().synchronize()?;
    let mut out = vec![bf16::from_f32(0.0); q.len()];
    ob.copy_to_host(&mut out)?;
    Ok(out.iter().map(|x| x.to_f64()).collect())
}

/// The reference over the same pages; the largest error over valid rows.
fn check(
    cfg: &SdpaConfig,
    cache: &Cache,
    q: &[f64],
    got: &[f64],
    lens: (&[usize], &[usize]),
) -> AnyResult<f64> {
    let sq = cfg.seq_q as usize;
    let bshd = |dims: [usize; 4]| {
        let [_, h, s, d] = dims;
        [s * h * d, d, h * d, 1]
    };
    let cont = [BLOCKS, KV_HEADS, BLOCK, D];
    let k = ra::paged_gather(
        &ra::View::new(&cache.k, cont, bshd(cont)),
        &TABLE,
        BATCH,
        PAGES,
        MAX_SEQ,
    )?;
    let v = ra::paged_gather(
        &ra::View::new(&cache.v, cont, bshd(cont)),
        &TABLE,
        BATCH,
        PAGES,
        MAX_SEQ,
    )?;
    let mut rc = ra::SdpaConfig::new(cfg.scale_value());
    rc.causal = ra::CausalMask::BottomRight;
    rc.seq_len_q = Some(lens.0);
    rc.seq_len_kv = Some(lens.1);
    let qd = [BATCH, HEADS, sq, D];
    let kvd = [BATCH, KV_HEADS, MAX_SEQ, D];
    let want = ra::forward(
        &ra::View::new(q, qd, bshd(qd)),
        &ra::View::bhsd(&k, kvd),
        &ra::View::bhsd(&v, kvd),
        &rc,
    )?;
    let mut worst = 0f64;
    for n in 0..BATCH {
        for hh in 0..HEADS {
            for i in 0..lens.0[n] {
                for t in 0..D {
                    let g = got[((n * sq + i) * HEADS + hh) * D + t];
                    let w = want.o[((n * HEADS + hh) * sq + i) * D + t];
                    let e = (g - w).abs() / w.abs().max(1.0);
                    worst = if e.is_nan() {
                        f64::INFINITY
                    } else {
                        worst.max(e)
                    };
                }
            }
        }
    }
    Ok(worst)
}

fn on_gpu() -> AnyResult<bool> {
    Device::new(0)?;
    let stream = Stream::new()?;
    let mut h = Handle::new(&stream)?;
    let target = Target::device(0)?;
    let (pc, dc) = (prefill_config(), decode_config());
    let prefill = plan_for(&pc, &target, "prefill")?;
    let decode = plan_for(&dc, &target, "decode")?;
    let mut cache = Cache::new()?;
    for (n, &len) in PROMPT.iter().enumerate() {
        for j in 0..len {
            cache.write(n, j)?;
        }
    }
    let tol = 3e-2;
    let mut ok = true;
    let sq = pc.seq_q as usize;
    let q: Vec<f64> = (0..BATCH * sq * HEADS * D).map(|i| value(3, i)).collect();
    let lens: Vec<usize> = PROMPT.to_vec();
    let l32: Vec<i32> = lens.iter().map(|&l| l as i32).collect();
    let got = run(&mut h, &pc, &prefill, &cache, &q, &l32, &l32)?;
    let e = check(&pc, &cache, &q, &got, (&lens, &lens))?;
    println!("prefill (prompts {PROMPT:?}): max rel error {e:.2e} (bound {tol:.0e})");
    ok &= e <= tol;
    let mut kv = lens.clone();
    for step in 0..STEPS {
        for (n, l) in kv.iter_mut().enumerate() {
            cache.write(n, *l)?;
            *l += 1;
        }
        let q: Vec<f64> = (0..BATCH * HEADS * D)
            .map(|i| value(10 + step as u64, i))
            .collect();
        let ones = vec![1usize; BATCH];
        let kv32: Vec<i32> = kv.iter().map(|&l| l as i32).collect();
        let got = run(&mut h, &dc, &decode, &cache, &q, &[1; BATCH], &kv32)?;
        let e = check(&dc, &cache, &q, &got, (&ones, &kv))?;
        println!("decode step {step} (cache {kv:?}): max rel error {e:.2e} (bound {tol:.0e})");
        ok &= e <= tol;
    }
    Ok(ok)
}

fn main() -> ExitCode {
    let gpu = matches!(Device::count(), Ok(n) if n > 0);
    if gpu {
        return match on_gpu() {
            Ok(true) => {
                println!("paged prefill and decode agree with the f64 reference");
                ExitCode::SUCCESS
            }
            Ok(false) => ExitCode::FAILURE,
            Err(e) => {
                eprintln!("kv_cache_decode: {e}");
                ExitCode::FAILURE
            }
        };
    }
    println!(
        "no GPU here: planning the prefill and decode shapes for an H200 instead (nothing is executed)"
    );
    let run = || -> AnyResult<()> {
        let target = Target::preset("h200")?;
        for (what, cfg) in [("prefill", prefill_config()), ("decode", decode_config())] {
            for imp in [SdpaImpl::Native, SdpaImpl::Composite] {
                let cfg = cfg.clone().implementation(imp);
                match cfg.check(false) {
                    Ok(()) => {
                        plan_for(
                            &cfg,
                            &target,
                            &format!("{what} ({imp:?}, s_q {})", cfg.seq_q),
                        )?;
                    }
                    Err(e) => println!("{what} ({imp:?}): not with this cuDNN ({e})"),
                }
            }
        }
        println!(
            "on a GPU it would fill the paged cache with a prefill of {PROMPT:?} tokens, run {STEPS} decode \
             steps growing it, and check each against the f64 reference"
        );
        Ok(())
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kv_cache_decode: {e}");
            ExitCode::FAILURE
        }
    }
}
