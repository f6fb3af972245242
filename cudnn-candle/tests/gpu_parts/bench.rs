//! `gpu --bench [--budget-s N]`: cudnn-candle's functions against candle's
//! own ops on the same GPU, the device check's benchmark rows. Attention
//! (prefill forward and forward + backward, causal; decode against a KV
//! cache and a paged cache) against candle's matmul + causal mask +
//! softmax + matmul; `conv2d` (forward, forward + backward) against
//! candle's `Tensor::conv2d`; `matmul_bias_act` against candle's matmul +
//! `broadcast_add` + activation. All bf16.
//!
//! Every library is warmed up once first (handles, cuBLAS, cuDNN), so no
//! row's first call pays for that. Each side: the first call timed alone
//! (it plans, for cudnn-candle), two more warm-up calls, then the median
//! of up to 10 calls, each followed by `Device::synchronize` (a call's
//! whole latency as a candle user sees it, launches included). Cases run
//! in order of value while the budget (default 40 s, counted from the
//! start of `main`, device start-up included) lasts: a case starts only
//! when the time spent plus the longest case so far fits; the rest are
//! rows saying so. Every row gives the two outputs' (or gradients')
//! largest difference relative to candle's largest value, and fails above
//! [`DIFF_BOUND`] (a benchmark of wrong results would be worthless).
//! Prints one markdown table (a panic's message goes into its row, not
//! onto stderr: the device check pastes stdout and stderr together as the
//! table); exits 1 when a case failed, 2 on a bad `--budget-s`, or, with
//! `CUDNN_RS_REQUIRE_GPU=1`, 1 when there is no GPU.

use std::time::Instant;

use candle_core::{D, DType, Device, Tensor, Var};
use cudnn_candle::{AttnParams, MatmulActivation};

type R<T> = candle_core::Result<T>;

/// Why `candle-flash-attn` has no row of numbers.
pub const FLASH_ATTN_NOTE: &str = "not built: its build script compiles 53 CUDA files \
(52 FlashAttention-2 kernel instantiations, nvcc -O3 with CUTLASS's templates) and clones \
CUTLASS from GitHub as it builds: an estimated hour or more of nvcc on the project's 2-core \
build machine (candle's kernels alone take 8.5 minutes), and it has no backward to compare";

/// The largest difference between the two sides' outputs a row may have,
/// relative to candle's largest value: both are bf16 (a unit roundoff of
/// 3.9e-3), candle's softmax and conv backward accumulate in bf16 too.
pub const DIFF_BOUND: f64 = 3e-2;

/// Whether a row's difference is within [`DIFF_BOUND`] (none: nothing to
/// compare; NaN fails).
pub fn diff_ok(d: Option<f64>) -> bool {
    d.is_none_or(|d| d <= DIFF_BOUND)
}

/// The `--budget-s` value of `args` (40 without one), in seconds: an
/// error for a missing, unreadable, non-finite or non-positive value.
pub fn budget_of(args: &[String]) -> Result<f64, String> {
    let Some(i) = args.iter().position(|a| a == "--budget-s") else {
        return Ok(40.0);
    };
    let v = args
        .get(i + 1)
        .ok_or("--budget-s needs a number of seconds")?;
    match v.parse::<f64>() {
        Ok(b) if b.is_finite() && b > 0.0 => Ok(b),
        _ => Err(format!(
            "--budget-s {v:?}: not a positive finite number of seconds"
        )),
    }
}

/// Whether a case may start: `spent` seconds gone, the longest case so far
/// took `longest`, the budget is `budget`.
pub fn fits(spent: f64, longest: f64, budget: f64) -> bool {
    spent + longest <= budget
}

/// The median of `v` (sorted in place); 0 when empty.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// First call, and the median of the synchronized calls after warm-up, in
/// milliseconds.
struct Timing {
    first_ms: f64,
    median_ms: f64,
    n: usize,
}

fn time(dev: &Device, mut f: impl FnMut() -> R<()>) -> R<Timing> {
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
    dev.synchronize()?;
    let t = Instant::now();
    f()?;
    dev.synchronize()?;
    let first_ms = ms(t);
    for _ in 0..2 {
        f()?;
    }
    dev.synchronize()?;
    // Up to 10 calls, within about 0.6 s (at least 3).
    let mut v = Vec::new();
    let start = Instant::now();
    while v.len() < 10 && (v.len() < 3 || start.elapsed().as_secs_f64() < 0.6) {
        let t = Instant::now();
        f()?;
        dev.synchronize()?;
        v.push(ms(t));
    }
    let n = v.len();
    Ok(Timing {
        first_ms,
        median_ms: median(&mut v),
        n,
    })
}

/// `max |a - b| / max |b|` on the device's values, in f32.
fn rel_diff(a: &Tensor, b: &Tensor) -> R<f64> {
    let (a, b) = (a.to_dtype(DType::F32)?, b.to_dtype(DType::F32)?);
    let max = |t: &Tensor| -> R<f32> { t.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>() };
    let d = max(&(a - &b)?)?;
    Ok(f64::from(d / max(&b)?.max(1e-6)))
}

/// One row of the table.
pub struct Row {
    pub op: String,
    pub case: String,
    pub pass: &'static str,
    /// (candle, cudnn-candle) timings, or why there are none.
    pub result: Result<(f64, f64, f64, usize, Option<f64>), String>,
}

impl Row {
    pub fn markdown(&self) -> String {
        match &self.result {
            Ok((candle, ours, first, n, diff)) => format!(
                "| {} | {} | {} | {candle:.3} | {ours:.3} | {:.2} | {first:.1} | {n} | {}{} |",
                self.op,
                self.case,
                self.pass,
                candle / ours,
                diff.map_or_else(|| "-".to_string(), |d| format!("{d:.1e}")),
                if diff_ok(*diff) {
                    String::new()
                } else {
                    format!(" FAIL (above {DIFF_BOUND:.0e})")
                }
            ),
            Err(why) => format!(
                "| {} | {} | {} | | | | | | {} |",
                self.op,
                self.case,
                self.pass,
                why.replace('|', "/").replace('\n', " ")
            ),
        }
    }
}

pub const HEADER: &str = "| op | case | pass | candle ms | cudnn-candle ms | candle / cudnn-candle | cudnn-candle first call ms | calls | max rel. diff |\n|---|---|---|---:|---:|---:|---:|---:|---|";

fn randn(dims: &[usize], dev: &Device) -> R<Tensor> {
    Tensor::randn(0f32, 1.0, dims, dev)?.to_dtype(DType::BF16)
}

/// Both sides of a case: candle's `native`, ours `cudnn`; `diff`: compare
/// the outputs of one call of each.
fn pair(
    dev: &Device,
    native: impl Fn() -> R<Tensor>,
    cudnn: impl Fn() -> R<Tensor>,
    diff: bool,
) -> R<(f64, f64, f64, usize, Option<f64>)> {
    let ours = time(dev, || cudnn().map(drop))?;
    let theirs = time(dev, || native().map(drop))?;
    let d = if diff {
        Some(rel_diff(&cudnn()?, &native()?)?)
    } else {
        None
    };
    Ok((
        theirs.median_ms,
        ours.median_ms,
        ours.first_ms,
        ours.n.min(theirs.n),
        d,
    ))
}

/// candle's attention on `(b, s, h, d)` q, k, v (h == kv heads): matmul,
/// a precomputed causal mask, softmax of candle-core's ops with the row
/// max detached (candle-nn's fused `softmax_last_dim` is not a dependency
/// here), matmul.
fn native_attention(q: &Tensor, k: &Tensor, v: &Tensor, mask: &Tensor, scale: f64) -> R<Tensor> {
    let (q, k, v) = (
        q.transpose(1, 2)?.contiguous()?,
        k.transpose(1, 2)?.contiguous()?,
        v.transpose(1, 2)?.contiguous()?,
    );
    let s = (q.matmul(&k.t()?)? * scale)?.broadcast_add(mask)?;
    let m = s.max_keepdim(D::Minus1)?.detach();
    let e = s.broadcast_sub(&m)?.exp()?;
    let p = e.broadcast_div(&e.sum_keepdim(D::Minus1)?)?;
    p.matmul(&v)?.transpose(1, 2)
}

fn causal_mask(s: usize, dev: &Device) -> R<Tensor> {
    let m: Vec<f32> = (0..s * s)
        .map(|i| {
            if i % s <= i / s {
                0.0
            } else {
                f32::NEG_INFINITY
            }
        })
        .collect();
    Tensor::from_vec(m, (s, s), dev)?.to_dtype(DType::BF16)
}

fn prefill(
    dev: &Device,
    (b, s, h, d): (usize, usize, usize, usize),
    bwd: bool,
) -> R<(f64, f64, f64, usize, Option<f64>)> {
    let (q, k, v) = (
        randn(&[b, s, h, d], dev)?,
        randn(&[b, s, h, d], dev)?,
        randn(&[b, s, h, d], dev)?,
    );
    let mask = causal_mask(s, dev)?;
    let scale = 1.0 / (d as f64).sqrt();
    if !bwd {
        return pair(
            dev,
            || native_attention(&q, &k, &v, &mask, scale),
            || cudnn_candle::flash_attn(&q, &k, &v, scale as f32, true),
            true,
        );
    }
    let (qv, kv, vv) = (
        Var::from_tensor(&q)?,
        Var::from_tensor(&k)?,
        Var::from_tensor(&v)?,
    );
    let grads = |o: Tensor| -> R<Tensor> {
        let g = o.backward()?;
        g.get(qv.as_tensor())
            .cloned()
            .ok_or_else(|| candle_core::Error::Msg("no gradient for q".into()))
    };
    pair(
        dev,
        || {
            grads(native_attention(
                qv.as_tensor(),
                kv.as_tensor(),
                vv.as_tensor(),
                &mask,
                scale,
            )?)
        },
        || {
            grads(cudnn_candle::flash_attn(
                qv.as_tensor(),
                kv.as_tensor(),
                vv.as_tensor(),
                scale as f32,
                true,
            )?)
        },
        true,
    )
}

/// One query per sequence against `len` cached keys (GQA `h` / `hkv`):
/// candle's with the cache as `(b, hkv, len, d)` and the query heads of a
/// KV head batched (no copy of the cache); ours with the cache as
/// FlashAttention's `(b, len, hkv, d)`, whole (`flash_attn_kvcache`) or
/// paged in blocks of 16.
fn decode(
    dev: &Device,
    (b, h, hkv, d): (usize, usize, usize, usize),
    len: usize,
    paged: bool,
) -> R<(f64, f64, f64, usize, Option<f64>)> {
    let rep = h / hkv;
    let q = randn(&[b, 1, h, d], dev)?;
    let (kc, vc) = (
        randn(&[b, len, hkv, d], dev)?,
        randn(&[b, len, hkv, d], dev)?,
    );
    let (kt, vt) = (
        kc.transpose(1, 2)?.contiguous()?,
        vc.transpose(1, 2)?.contiguous()?,
    );
    let scale = 1.0 / (d as f64).sqrt();
    let native = || -> R<Tensor> {
        let qh = q.reshape((b, hkv, rep, d))?;
        let s = (qh.matmul(&kt.t()?)? * scale)?;
        let m = s.max_keepdim(D::Minus1)?.detach();
        let e = s.broadcast_sub(&m)?.exp()?;
        let p = e.broadcast_div(&e.sum_keepdim(D::Minus1)?)?;
        p.matmul(&vt)?.reshape((b, 1, h, d))
    };
    let p = AttnParams::new(scale as f32).causal(true);
    if !paged {
        let lens = Tensor::new(vec![len as u32; b].as_slice(), dev)?;
        return pair(
            dev,
            native,
            || cudnn_candle::flash_attn_kvcache(&q, &kc, &vc, &lens, &p),
            true,
        );
    }
    let bs = 16;
    let per_seq = len / bs;
    let kp = kc.reshape((b * per_seq, bs, hkv, d))?;
    let vp = vc.reshape((b * per_seq, bs, hkv, d))?;
    let table: Vec<i32> = (0..(b * per_seq) as i32).collect();
    let table = Tensor::from_vec(table, (b, per_seq), dev)?;
    let lens = Tensor::new(vec![len as i32; b].as_slice(), dev)?;
    pair(
        dev,
        native,
        || cudnn_candle::flash_attn_paged(&q, &kp, &vp, &table, &lens, &p),
        true,
    )
}

fn conv(
    dev: &Device,
    (n, c, hw, k, r, stride, pad): (usize, usize, usize, usize, usize, usize, usize),
    bwd: bool,
) -> R<(f64, f64, f64, usize, Option<f64>)> {
    let x = randn(&[n, c, hw, hw], dev)?;
    let w = (randn(&[k, c, r, r], dev)? * (1.0 / ((c * r * r) as f64).sqrt()))?;
    if !bwd {
        return pair(
            dev,
            || x.conv2d(&w, pad, stride, 1, 1),
            || cudnn_candle::conv2d(&x, &w, pad, stride, 1, 1),
            true,
        );
    }
    let (xv, wv) = (Var::from_tensor(&x)?, Var::from_tensor(&w)?);
    let grads = |y: Tensor| -> R<Tensor> {
        let g = y.backward()?;
        g.get(wv.as_tensor())
            .cloned()
            .ok_or_else(|| candle_core::Error::Msg("no gradient for the filter".into()))
    };
    pair(
        dev,
        || grads(xv.as_tensor().conv2d(wv.as_tensor(), pad, stride, 1, 1)?),
        || {
            grads(cudnn_candle::conv2d(
                xv.as_tensor(),
                wv.as_tensor(),
                pad,
                stride,
                1,
                1,
            )?)
        },
        true,
    )
}

fn gemm(
    dev: &Device,
    (m, k, n): (usize, usize, usize),
    act: MatmulActivation,
) -> R<(f64, f64, f64, usize, Option<f64>)> {
    let a = randn(&[m, k], dev)?;
    let b = (randn(&[k, n], dev)? * (1.0 / (k as f64).sqrt()))?;
    let bias = randn(&[n], dev)?;
    pair(
        dev,
        || {
            let y = a.matmul(&b)?.broadcast_add(&bias)?;
            match act {
                MatmulActivation::Relu => y.relu(),
                MatmulActivation::GeluTanh => y.gelu(),
                MatmulActivation::None => Ok(y),
            }
        },
        || cudnn_candle::matmul_bias_act(&a, &b, Some(&bias), act),
        true,
    )
}

type Case = (
    String,
    String,
    &'static str,
    Box<dyn Fn(&Device) -> R<(f64, f64, f64, usize, Option<f64>)>>,
);

/// The cases, in order of value (the budget may cut the tail).
pub fn cases() -> Vec<Case> {
    let mut v: Vec<Case> = Vec::new();
    let attn = |v: &mut Vec<Case>, shape: (usize, usize, usize, usize)| {
        let (b, s, h, d) = shape;
        for (pass, bwd) in [("forward", false), ("forward+backward", true)] {
            v.push((
                "attention prefill, causal".into(),
                format!("B={b} S={s} H={h} D={d}"),
                pass,
                Box::new(move |dev: &Device| prefill(dev, shape, bwd)),
            ));
        }
    };
    let dec = |v: &mut Vec<Case>, len: usize| {
        let shape = (8, 32, 8, 128);
        for (op, paged) in [
            ("attention decode, KV cache", false),
            ("attention decode, paged (16)", true),
        ] {
            v.push((
                op.into(),
                format!("B=8 H=32 KV heads=8 D=128 cache {len}"),
                "forward",
                Box::new(move |dev: &Device| decode(dev, shape, len, paged)),
            ));
        }
    };
    let cv = |v: &mut Vec<Case>, shape: (usize, usize, usize, usize, usize, usize, usize)| {
        let (n, c, hw, k, r, st, p) = shape;
        for (pass, bwd) in [("forward", false), ("forward+backward", true)] {
            v.push((
                "conv2d".into(),
                format!("N={n} C={c} {hw}x{hw} K={k} {r}x{r} stride {st} pad {p}"),
                pass,
                Box::new(move |dev: &Device| conv(dev, shape, bwd)),
            ));
        }
    };
    let mm = |v: &mut Vec<Case>, shape: (usize, usize, usize), act: MatmulActivation| {
        let (m, k, n) = shape;
        v.push((
            "matmul + bias + activation".into(),
            format!("{m}x{k} · {k}x{n}, {act:?}"),
            "forward",
            Box::new(move |dev: &Device| gemm(dev, shape, act)),
        ));
    };
    attn(&mut v, (4, 1024, 16, 128));
    dec(&mut v, 4096);
    cv(&mut v, (32, 64, 56, 64, 3, 1, 1));
    mm(&mut v, (4096, 4096, 4096), MatmulActivation::GeluTanh);
    attn(&mut v, (2, 4096, 32, 128));
    attn(&mut v, (8, 512, 16, 64));
    dec(&mut v, 1024);
    dec(&mut v, 8192);
    cv(&mut v, (32, 128, 28, 128, 3, 1, 1));
    cv(&mut v, (32, 256, 56, 64, 1, 1, 0));
    mm(&mut v, (8192, 1024, 4096), MatmulActivation::Relu);
    mm(&mut v, (16, 4096, 11008), MatmulActivation::GeluTanh);
    attn(&mut v, (2, 2048, 32, 64));
    cv(&mut v, (32, 256, 14, 256, 3, 1, 1));
    v
}

/// The last panic's message, on one line (the quiet hook's record).
static LAST_PANIC: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

/// A panic hook that prints nothing (a backtrace on stderr would land
/// inside the report's table) and keeps the message, on one line, for the
/// case's row.
fn quiet_panics() {
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a non-text panic".into());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let line = format!("{msg}{at}").replace(['\n', '\r'], " ");
        if let Ok(mut g) = LAST_PANIC.lock() {
            *g = line;
        }
    }));
}

/// One small call of every library (cudnn-candle's attention, conv and
/// matmul; candle's matmul, conv and softmax pieces), so that creating
/// handles is not charged to the first row. Errors are the cases' to show.
fn warm_up(dev: &Device) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> R<()> {
        let q = randn(&[1, 16, 1, 64], dev)?;
        cudnn_candle::flash_attn(&q, &q, &q, 0.125, true)?;
        let x = randn(&[1, 8, 8, 8], dev)?;
        let w = randn(&[8, 8, 3, 3], dev)?;
        cudnn_candle::conv2d(&x, &w, 1, 1, 1, 1)?;
        x.conv2d(&w, 1, 1, 1, 1)?;
        let a = randn(&[16, 16], dev)?;
        cudnn_candle::matmul_bias_act(&a, &a, None, MatmulActivation::Relu)?;
        a.matmul(&a)?.exp()?.sum_keepdim(D::Minus1)?;
        dev.synchronize()
    }));
}

/// The bench: the table on stdout; the exit code.
pub fn main(args: &[String]) -> i32 {
    // The budget counts from here: the process's start (device start-up
    // included), as the time limit of whoever runs it does.
    let start = Instant::now();
    let budget = match budget_of(args) {
        Ok(b) => b,
        Err(e) => {
            println!("bench result: not run: {e}");
            return 2;
        }
    };
    quiet_panics();
    println!("# cudnn-candle against candle's own ops (bf16)");
    println!();
    println!(
        "Median of up to 10 calls (each followed by a device synchronize) after the first and two warm-up calls; \
         ratio above 1: cudnn-candle faster. Every library warmed up once before the first case: the first-call \
         column is planning, not handle creation. Budget {budget} s from the process's start. max rel. diff: the \
         two outputs (forward) or gradients (q / filter) of one call each, relative to candle's largest value; \
         a row fails above {DIFF_BOUND:.0e}."
    );
    println!();
    println!(
        "candle's side: attention is matmul + mask + softmax composed of candle-core ops (about 7 kernels; \
         candle-nn's fused `softmax_last_dim`, which candle-transformers uses, is not a dependency here: it is not \
         in the offline registry this crate builds from), so the forward rows favour cudnn-candle by that much; \
         `Tensor::conv2d` is candle without its `cudnn` feature (im2col + GEMM)."
    );
    println!();
    println!("{HEADER}");
    let flash = format!("| attention | candle-flash-attn | - | | | | | | {FLASH_ATTN_NOTE} |");
    let dev = match super::support::gpu_missing() {
        None => Device::new_cuda(0),
        Some(why) => Err(candle_core::Error::Msg(why)),
    };
    let dev = match dev {
        Ok(d) => d,
        Err(e) => {
            let why = e.to_string().lines().next().unwrap_or("").to_string();
            for (op, case, pass, _) in cases() {
                let result = Err("not run: no GPU".to_string());
                println!(
                    "{}",
                    Row {
                        op,
                        case,
                        pass,
                        result
                    }
                    .markdown()
                );
            }
            println!("{flash}");
            println!();
            println!("bench result: not run: no GPU ({why})");
            let required =
                std::env::var("CUDNN_RS_REQUIRE_GPU").is_ok_and(|v| v == "1" || v == "true");
            return i32::from(required);
        }
    };
    warm_up(&dev);
    let (mut ran, mut failed, mut cut, mut longest) = (0, Vec::new(), 0, 0f64);
    for (op, case, pass, f) in cases() {
        let spent = start.elapsed().as_secs_f64();
        let result = if !fits(spent, longest, budget) {
            cut += 1;
            Err(format!(
                "not run: {spent:.1} s spent + {longest:.1} s (the longest case) is past the bench's {budget} s budget"
            ))
        } else {
            ran += 1;
            let t0 = Instant::now();
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&dev)));
            longest = longest.max(t0.elapsed().as_secs_f64());
            let name = format!("{op} {case} {pass}");
            match r {
                Ok(Ok(t)) => {
                    if !diff_ok(t.4) {
                        failed.push(format!("{name}: outputs differ"));
                    }
                    Ok(t)
                }
                Ok(Err(e)) => {
                    failed.push(name);
                    Err(format!(
                        "error: {}",
                        e.to_string().lines().next().unwrap_or("")
                    ))
                }
                Err(_) => {
                    failed.push(name);
                    let msg = LAST_PANIC.lock().map(|g| g.clone()).unwrap_or_default();
                    Err(format!("error: panicked: {msg}"))
                }
            }
        };
        println!(
            "{}",
            Row {
                op,
                case,
                pass,
                result
            }
            .markdown()
        );
    }
    println!("{flash}");
    println!();
    println!(
        "bench result: {ran} cases run in {:.1} s, {} failed, {cut} cut by the budget{}",
        start.elapsed().as_secs_f64(),
        failed.len(),
        if failed.is_empty() {
            String::new()
        } else {
            format!(" ({})", failed.join("; "))
        }
    );
    i32::from(!failed.is_empty())
}

/// The bench's pure parts, run by the gpu binary's trials (no GPU needed).
pub fn trials() -> Vec<super::support::Trial> {
    vec![
        // The device check runs this binary as `--skip example_block` and
        // as `example_block`: the runner's reading of those arguments.
        super::support::unit("runner_filter_and_skips", || {
            let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
            let f = super::support::filter_and_skips;
            assert_eq!(f(&a(&["gpu"])), (String::new(), vec![]));
            assert_eq!(
                f(&a(&["gpu", "--skip", "example_block"])),
                (String::new(), a(&["example_block"]))
            );
            assert_eq!(
                f(&a(&["gpu", "example_block"])),
                ("example_block".into(), vec![])
            );
            assert_eq!(
                f(&a(&["gpu", "--skip", "x", "flash", "--skip", "y", "z"])),
                ("flash".into(), a(&["x", "y"]))
            );
            // A trailing --skip without a value skips nothing.
            assert_eq!(f(&a(&["gpu", "--skip"])), (String::new(), vec![]));
            // libtest's valued options: their values are not the filter.
            assert_eq!(
                f(&a(&["gpu", "--test-threads", "1", "--format", "pretty"])),
                (String::new(), vec![])
            );
            Ok(())
        }),
        // A filter matching no trial fails (a renamed or misspelt trial
        // once passed the device check's example_block row as "0 passed").
        super::support::unit("runner_filter_matching_nothing_fails", || {
            use super::support::{run_with, unit};
            use std::cell::Cell;
            use std::rc::Rc;
            let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
            let ran = Rc::new(Cell::new(0));
            let trials = |ran: &Rc<Cell<i32>>| {
                let (r1, r2) = (ran.clone(), ran.clone());
                vec![
                    unit("example_block", move || {
                        r1.set(r1.get() + 1);
                        Ok(())
                    }),
                    unit("flash_attn_basic", move || {
                        r2.set(r2.get() + 10);
                        Ok(())
                    }),
                ]
            };
            let go = |args: &[&str]| {
                let mut out = Vec::new();
                let code = run_with(&a(args), trials(&ran), &mut out);
                (code, String::from_utf8_lossy(&out).into_owned())
            };
            let (code, out) = go(&["gpu", "example_blok"]);
            assert_eq!(code, 1, "{out}");
            assert!(
                out.contains("the filter \"example_blok\" matches none of the 2 trials"),
                "{out}"
            );
            assert_eq!(ran.get(), 0, "nothing ran");
            let (code, out) = go(&["gpu", "example_block"]);
            assert_eq!((code, ran.get()), (0, 1), "{out}");
            assert!(out.contains("1 passed; 0 failed"), "{out}");
            let (code, out) = go(&["gpu", "--skip", "example_block"]);
            assert_eq!((code, ran.get()), (0, 11), "{out}");
            // No filter, no trials: nothing to fail.
            assert_eq!(run_with(&a(&["gpu"]), vec![], &mut Vec::new()), 0);
            // A failing trial still fails the run.
            let t = vec![unit("x", || Err("no".into()))];
            assert_eq!(run_with(&a(&["gpu", "x"]), t, &mut Vec::new()), 1);
            Ok(())
        }),
        super::support::unit("bench_median_and_rows", || {
            assert_eq!(median(&mut []), 0.0);
            assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
            assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
            let r = Row {
                op: "conv2d".into(),
                case: "N=1".into(),
                pass: "forward",
                result: Ok((2.0, 0.5, 30.0, 10, Some(1e-3))),
            };
            assert_eq!(
                r.markdown(),
                "| conv2d | N=1 | forward | 2.000 | 0.500 | 4.00 | 30.0 | 10 | 1.0e-3 |"
            );
            let cols = HEADER.lines().next().unwrap_or("").matches('|').count();
            assert_eq!(r.markdown().matches('|').count(), cols);
            let e = Row {
                op: "a".into(),
                case: "b".into(),
                pass: "forward",
                result: Err("error: x | y\nz".into()),
            };
            assert_eq!(e.markdown().matches('|').count(), cols, "{}", e.markdown());
            // A difference above the bound fails the row (NaN too).
            let over = Row {
                result: Ok((2.0, 0.5, 30.0, 10, Some(5e-2))),
                ..r
            };
            assert_eq!(
                over.markdown(),
                "| conv2d | N=1 | forward | 2.000 | 0.500 | 4.00 | 30.0 | 10 | 5.0e-2 FAIL (above 3e-2) |"
            );
            assert!(diff_ok(None) && diff_ok(Some(3e-2)) && diff_ok(Some(0.0)));
            assert!(!diff_ok(Some(3.1e-2)) && !diff_ok(Some(f64::NAN)));
            assert!(!diff_ok(Some(f64::INFINITY)));
            // Every case has a distinct (op, case, pass).
            let mut keys: Vec<String> = cases()
                .iter()
                .map(|(o, c, p, _)| format!("{o}/{c}/{p}"))
                .collect();
            let n = keys.len();
            keys.sort();
            keys.dedup();
            assert_eq!(keys.len(), n);
            Ok(())
        }),
        super::support::unit("bench_budget_argument_and_cut", || {
            let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
            assert_eq!(budget_of(&a(&["gpu", "--bench"])), Ok(40.0));
            assert_eq!(
                budget_of(&a(&["gpu", "--bench", "--budget-s", "12.5"])),
                Ok(12.5)
            );
            for bad in ["x", "NaN", "inf", "0", "-3", ""] {
                let e = budget_of(&a(&["gpu", "--bench", "--budget-s", bad]));
                assert!(e.is_err(), "{bad:?} accepted: {e:?}");
            }
            assert!(budget_of(&a(&["gpu", "--bench", "--budget-s"])).is_err());
            // A case starts only if it fits after the longest so far.
            assert!(fits(0.0, 0.0, 10.0));
            assert!(fits(6.0, 4.0, 10.0));
            assert!(!fits(6.1, 4.0, 10.0));
            Ok(())
        }),
        super::support::unit("bench_quiet_panic_hook", || {
            // The hook keeps the message on one line and prints nothing.
            quiet_panics();
            let r = std::panic::catch_unwind(|| panic!("first line\nsecond line"));
            let _ = std::panic::take_hook();
            assert!(r.is_err());
            let msg = LAST_PANIC.lock().map(|g| g.clone()).unwrap_or_default();
            assert!(msg.starts_with("first line second line at "), "{msg}");
            assert!(!msg.contains('\n'), "{msg}");
            Ok(())
        }),
    ]
}
