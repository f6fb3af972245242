//! `cargo run --release --example bench_attention [-- --quick] [--iters N] [--csv FILE]`:
//! fused attention and layer norm through the graph API.
//!
//! - attention forward (training: the softmax statistics are saved) and
//!   backward, bf16, BSHD, causal, batch 4, 32 heads, head dim 128,
//!   sequence 1k / 4k / 8k (`--quick`: 1k only), in TFLOP/s (causal work
//!   counted as half of the full matmuls, as FlashAttention does; backward
//!   2.5 times the forward), each through cuDNN's SDPA operation and
//!   through the matmul–softmax–matmul composite (`SdpaImpl::Composite`);
//! - FP8 attention forward (E4M3 in and out, per-tensor scales, BHSD,
//!   causal, training; `Graph::sdpa_fp8_forward`), same shapes, in TFLOP/s
//!   (PyTorch's counterpart, where its FP8 SDPA exists, through the CSV);
//! - attention options (issue 24), forward and backward, `SdpaImpl::Auto`:
//!   a bottom-right causal mask over 1k queries and 4k keys (a chunked
//!   prefill against a cache; PyTorch: `causal_lower_right`), and a causal
//!   sliding window of 1k keys over 4k (PyTorch: a boolean `attn_mask`,
//!   its only SDPA form of a window), and a decode step over a paged KV
//!   cache (batch 32, 4096 cached tokens in pages of 64; PyTorch, which
//!   has no paged SDPA, over the same keys stored contiguously), and a
//!   ragged (packed THD) causal batch of 4 full sequences of 4096 (PyTorch:
//!   the same dense causal attention, the same work), a logit softcap
//!   of 50 over 4k (PyTorch has no softcap in its SDPA: its row is the
//!   eager `softcap * tanh(scores / softcap)` attention), an additive bias
//!   `[1, 32, 2048, 2048]` over 2k queries and keys (PyTorch: a float
//!   `attn_mask` of that shape) and causal ALiBi over 2k (PyTorch: the
//!   ALiBi bias, -inf above the diagonal, as a float `attn_mask`), a causal 4k
//!   attention with a sink per head (forward, backward with dSink) and one
//!   half of a split-KV decode step writing the row max and sum of
//!   exponentials (PyTorch's SDPA has neither: no PyTorch row); TFLOP/s
//!   count the pairs the mask keeps (exactly, row by row);
//! - layer norm forward (training) and backward, bf16, 8192 rows of 4096,
//!   in GB/s (the bytes each call must move at least: x and y forward;
//!   x, dy and dx backward).
//!
//! Prints a markdown table (device time per call with CUDA events over a
//! timed loop after a warm-up, host time to queue one). `--csv FILE` writes
//! the rows in the format of `bench_csv.rs` (suites `attention` and
//! `norm`), which `xtask/device/compare_torch.py` runs again through
//! PyTorch's `scaled_dot_product_attention` and `layer_norm`.
//!
//! Without a GPU it plans every case for an H200 (deviceless planning),
//! prints the planning times, says the GPU part was not run, and exits 0.
//! Not a test: numbers depend on the machine.

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use cudnn::dnn::Handle;
use cudnn::graph::*;
use cudnn::runtime::{Device, DeviceBuffer, Event, Stream};
use half::bf16;

#[path = "bench_csv.rs"]
mod bench_csv;
use bench_csv::{Csv, CsvRow, flag_value};

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

const LN_ROWS: i64 = 8192;
const LN_DIM: i64 = 4096;

fn imp(composite: bool) -> &'static str {
    if composite { " (composite)" } else { "" }
}

#[derive(Clone, Copy, PartialEq)]
enum Case {
    /// Sequence length; through the composite pattern (or the SDPA operation).
    SdpaFwd(i64, bool),
    SdpaBwd(i64, bool),
    /// FP8 attention forward (issue 25), by sequence length.
    SdpaFp8Fwd(i64),
    /// Issue 24: an attention option (backward or forward).
    SdpaOpt(Opt, bool),
    LnFwd,
    LnBwd,
}

/// The attention options benchmarked (issue 24).
#[derive(Clone, Copy, PartialEq)]
enum Opt {
    /// 1024 queries, 4096 keys, causal aligned bottom-right.
    BottomRight,
    /// 4096 queries and keys, causal, a window of 1024 keys.
    Window,
    /// A decode step: batch 32, one query over a paged cache of 4096
    /// tokens (pages of 64), GQA 32:8 (forward only).
    PagedDecode,
    /// Ragged (packed THD) batch: 4 sequences of 4096 tokens packed, causal
    /// (offsets from `SdpaConfig::ragged_offsets`, bound with the unsafe
    /// `Bindings::input_ragged_offsets`).
    Ragged,
    /// 4096 queries and keys, a logit softcap of 50 (Gemma 2's), no mask.
    Softcap,
    /// Issue 24 (h4): an additive bias `[1, H, S, S]`, 2048 queries and keys.
    Bias,
    /// Issue 24 (h4): causal ALiBi, 2048 queries and keys.
    Alibi,
    /// Issue 24 (h6): a causal 4k attention with a sink per head (forward;
    /// backward with dSink). PyTorch's SDPA has no sinks (no row).
    Sink,
    /// Issue 24 (h6): one half of a split-KV decode step (batch 32, one
    /// query over 2048 of 4096 keys, GQA 32:8) writing the row max and sum
    /// of exponentials. PyTorch's SDPA has no such outputs (no row).
    SplitKv,
}

impl Opt {
    fn cfg(self) -> SdpaConfig {
        let c = SdpaConfig::new(4, 32, 1024, 128, DType::BF16).training(true);
        match self {
            Opt::BottomRight => c.kv_len(4096).causal_bottom_right(),
            Opt::Window => SdpaConfig::new(4, 32, 4096, 128, DType::BF16)
                .training(true)
                .causal(true)
                .sliding_window(1024),
            Opt::PagedDecode => SdpaConfig::new(32, 32, 1, 128, DType::BF16)
                .gqa(8)
                .kv_len(4096)
                .causal_bottom_right()
                .paged(64, 32 * 64),
            Opt::Ragged => SdpaConfig::new(4, 32, 4096, 128, DType::BF16)
                .training(true)
                .causal(true)
                .ragged(),
            Opt::Softcap => SdpaConfig::new(4, 32, 4096, 128, DType::BF16)
                .training(true)
                .softcap(50.0),
            Opt::Bias => SdpaConfig::new(4, 32, 2048, 128, DType::BF16)
                .training(true)
                .bias(AttnBias::new(false, true)),
            Opt::Alibi => SdpaConfig::new(4, 32, 2048, 128, DType::BF16)
                .training(true)
                .causal(true)
                .alibi(true),
            Opt::Sink => SdpaConfig::new(4, 32, 4096, 128, DType::BF16)
                .training(true)
                .causal(true)
                .sink(true)
                .sink_grad(true),
            Opt::SplitKv => SdpaConfig::new(32, 32, 1, 128, DType::BF16)
                .gqa(8)
                .kv_len(2048)
                .max_sum_exp(true),
        }
    }
    fn name(self) -> &'static str {
        match self {
            Opt::BottomRight => "b4 h32 s_q1024 s_kv4096 d128 causal bottom-right",
            Opt::Window => "b4 h32 s4096 d128 causal window 1024",
            Opt::PagedDecode => "b32 h32 h_kv8 decode s_q1 s_kv4096 d128 paged (pages of 64)",
            Opt::Ragged => "b4 h32 s4096 d128 causal ragged (packed THD)",
            Opt::Softcap => "b4 h32 s4096 d128 softcap 50 (PyTorch: eager, no SDPA softcap)",
            Opt::Bias => "b4 h32 s2048 d128 bias [1,h,s,s]",
            Opt::Alibi => "b4 h32 s2048 d128 causal ALiBi",
            Opt::Sink => "b4 h32 s4096 d128 causal sink (PyTorch: no SDPA equivalent)",
            Opt::SplitKv => {
                "b32 h32 h_kv8 decode s_q1 s_kv2048 d128 max/sum_exp (split-KV half; PyTorch: no SDPA equivalent)"
            }
        }
    }
    fn shape(self) -> &'static str {
        match self {
            Opt::BottomRight => "b=4;h=32;s=1024;skv=4096;d=128;causal=1;align=br",
            Opt::Window => "b=4;h=32;s=4096;d=128;causal=1;window=1024",
            Opt::PagedDecode => "b=32;h=32;hkv=8;s=1;skv=4096;d=128;causal=1;align=br;paged=64",
            Opt::Ragged => "b=4;h=32;s=4096;d=128;causal=1;ragged=1",
            Opt::Softcap => "b=4;h=32;s=4096;d=128;causal=0;softcap=50",
            Opt::Bias => "b=4;h=32;s=2048;d=128;bias=1h",
            Opt::Alibi => "b=4;h=32;s=2048;d=128;causal=1;alibi=1",
            Opt::Sink => "b=4;h=32;s=4096;d=128;causal=1;sink=1",
            Opt::SplitKv => "b=32;h=32;hkv=8;s=1;skv=2048;d=128;maxsum=1",
        }
    }
    /// Forward FLOPs over the (query, key) pairs the mask keeps.
    fn forward_flops(self) -> f64 {
        let c = self.cfg();
        let shift = if c.diagonal == DiagonalAlignment::BottomRight {
            c.seq_kv - c.seq_q
        } else {
            0
        };
        let mut pairs = 0f64;
        for i in 0..c.seq_q {
            let diag = i + shift;
            let hi = if c.is_causal {
                diag.min(c.seq_kv - 1)
            } else {
                c.seq_kv - 1
            };
            let lo = c.window.map_or(0, |w| (diag - w + 1).max(0));
            pairs += (hi - lo + 1).max(0) as f64;
        }
        2.0 * c.batch as f64 * c.heads as f64 * pairs * (c.head_dim + c.head_dim_v) as f64
    }
}

impl Case {
    fn cfg(seq: i64, composite: bool) -> SdpaConfig {
        SdpaConfig::new(4, 32, seq, 128, DType::BF16)
            .causal(true)
            .training(true)
            .implementation(if composite {
                SdpaImpl::Composite
            } else {
                SdpaImpl::Auto
            })
    }
    fn fp8_cfg(seq: i64) -> Fp8SdpaConfig {
        Fp8SdpaConfig::new(4, 32, seq, seq, 128)
            .causal(true)
            .training(true)
    }
    fn dtype(self) -> &'static str {
        match self {
            Case::SdpaFp8Fwd(_) => "fp8e4m3",
            _ => "bf16",
        }
    }
    fn key(self) -> &'static str {
        match self {
            Case::SdpaFwd(..) | Case::SdpaFp8Fwd(_) | Case::SdpaOpt(_, false) => "sdpa_fwd",
            Case::SdpaBwd(..) | Case::SdpaOpt(_, true) => "sdpa_bwd",
            Case::LnFwd => "layer_norm_fwd",
            Case::LnBwd => "layer_norm_bwd",
        }
    }
    fn suite(self) -> &'static str {
        match self {
            Case::SdpaFwd(..) | Case::SdpaBwd(..) | Case::SdpaFp8Fwd(_) | Case::SdpaOpt(..) => {
                "attention"
            }
            _ => "norm",
        }
    }
    fn label(self) -> String {
        match self {
            Case::SdpaFwd(s, c) => format!("sdpa forward b4 h32 s{s} d128 causal{}", imp(c)),
            Case::SdpaBwd(s, c) => format!("sdpa backward b4 h32 s{s} d128 causal{}", imp(c)),
            Case::SdpaFp8Fwd(s) => format!("sdpa fp8 forward b4 h32 s{s} d128 causal"),
            Case::SdpaOpt(o, bwd) => format!(
                "sdpa {} {}",
                if bwd { "backward" } else { "forward" },
                o.name()
            ),
            Case::LnFwd => format!("layer norm forward {LN_ROWS}x{LN_DIM}"),
            Case::LnBwd => format!("layer norm backward {LN_ROWS}x{LN_DIM}"),
        }
    }
    fn shape(self) -> String {
        match self {
            Case::SdpaFwd(s, c) | Case::SdpaBwd(s, c) => {
                format!(
                    "b=4;h=32;s={s};d=128;causal=1{}",
                    if c { ";impl=composite" } else { "" }
                )
            }
            Case::SdpaFp8Fwd(s) => format!("b=4;h=32;s={s};d=128;causal=1"),
            Case::SdpaOpt(o, _) => o.shape().to_string(),
            _ => format!("n={LN_ROWS};d={LN_DIM}"),
        }
    }
    fn metric(self) -> &'static str {
        match self {
            Case::SdpaFwd(..) | Case::SdpaBwd(..) | Case::SdpaFp8Fwd(_) | Case::SdpaOpt(..) => {
                "TFLOP/s"
            }
            _ => "GB/s",
        }
    }
    fn work(self) -> f64 {
        let ln = (LN_ROWS * LN_DIM * 2) as f64;
        match self {
            Case::SdpaFwd(s, c) => Self::cfg(s, c).forward_flops(),
            Case::SdpaBwd(s, c) => Self::cfg(s, c).backward_flops(),
            // As the bf16 forward: 4·b·h·s²·d, halved for the causal mask.
            Case::SdpaFp8Fwd(s) => 4.0 * (4 * 32 * 128) as f64 * (s as f64) * (s as f64) / 2.0,
            Case::SdpaOpt(o, false) => o.forward_flops(),
            Case::SdpaOpt(o, true) => 2.5 * o.forward_flops(),
            Case::LnFwd => 2.0 * ln,
            Case::LnBwd => 3.0 * ln,
        }
    }

    fn graph(self) -> cudnn::Result<Graph> {
        let mut g = Graph::new();
        let (fwd, bwd) = match self {
            Case::SdpaFwd(s, c) => (Some(Self::cfg(s, c)), None),
            Case::SdpaBwd(s, c) => (None, Some(Self::cfg(s, c))),
            Case::SdpaOpt(o, false) => (Some(o.cfg()), None),
            Case::SdpaOpt(o, true) => (None, Some(o.cfg())),
            _ => (None, None),
        };
        match self {
            Case::SdpaFwd(..) | Case::SdpaOpt(_, false) => {
                let cfg =
                    fwd.ok_or_else(|| cudnn::Error::invalid("case", "has a config", "none"))?;
                let q = g.input("q", cfg.q_spec()?)?;
                let k = g.input("k", cfg.k_spec()?)?;
                let v = g.input("v", cfg.v_spec()?)?;
                let f = if cfg.is_training {
                    g.sdpa_forward_training(q, k, v, &cfg)?.map_stats(Some)
                } else {
                    g.sdpa_forward(q, k, v, &cfg)?.map_stats(|()| None)
                };
                g.rename(f.o, "o")?;
                if let Some(st) = f.stats {
                    g.rename(st, "stats")?;
                }
                for (t, n) in [
                    (f.seq_len_q, "seq_len_q"),
                    (f.seq_len_kv, "seq_len_kv"),
                    (f.page_table_k, "page_table_k"),
                    (f.page_table_v, "page_table_v"),
                ] {
                    if let Some(t) = t {
                        g.rename(t, n)?;
                    }
                }
            }
            Case::SdpaBwd(..) | Case::SdpaOpt(_, true) => {
                let cfg =
                    bwd.ok_or_else(|| cudnn::Error::invalid("case", "has a config", "none"))?;
                let q = g.input("q", cfg.q_spec()?)?;
                let k = g.input("k", cfg.k_spec()?)?;
                let v = g.input("v", cfg.v_spec()?)?;
                let o = g.input("o", cfg.o_spec()?)?;
                let d_o = g.input("do", cfg.o_spec()?)?;
                let st = g.input("stats", cfg.stats_spec()?)?;
                let b = g.sdpa_backward(q, k, v, o, d_o, st, &cfg)?;
                g.rename(b.dq, "dq")?;
                g.rename(b.dk, "dk")?;
                g.rename(b.dv, "dv")?;
                for (t, n) in [(b.seq_len_q, "seq_len_q"), (b.seq_len_kv, "seq_len_kv")] {
                    if let Some(t) = t {
                        g.rename(t, n)?;
                    }
                }
            }
            Case::SdpaFp8Fwd(s) => {
                let cfg = Self::fp8_cfg(s);
                let q = g.input("q", cfg.q_spec()?)?;
                let k = g.input("k", cfg.kv_spec()?)?;
                let v = g.input("v", cfg.kv_spec()?)?;
                let f = g.sdpa_fp8_forward_training(q, k, v, &cfg)?;
                g.rename(f.o, "o")?;
                g.rename(f.stats, "stats")?;
            }
            Case::LnFwd | Case::LnBwd => {
                let xs = TensorSpec::row_major(DType::BF16, &[LN_ROWS, LN_DIM, 1, 1])?;
                let ps = TensorSpec::row_major(DType::F32, &[1, LN_DIM, 1, 1])?;
                let ss = TensorSpec::row_major(DType::F32, &[LN_ROWS, 1, 1, 1])?;
                let x = g.input("x", xs.clone())?;
                let scale = g.input("scale", ps.clone())?;
                if self == Case::LnFwd {
                    let bias = g.input("bias", ps)?;
                    let n = g.layer_norm(x, scale, bias, 1e-5, NormPhase::Training)?;
                    g.output(n.y, DType::BF16)?;
                    g.rename(n.y, "y")?;
                    if let (Some(m), Some(i)) = (n.mean, n.inv_variance) {
                        g.rename(m, "mean")?;
                        g.rename(i, "inv")?;
                    }
                } else {
                    let dy = g.input("dy", xs)?;
                    let m = g.input("mean", ss.clone())?;
                    let i = g.input("inv", ss)?;
                    let gr = g.layer_norm_backward(dy, x, scale, m, i)?;
                    g.output(gr.dx, DType::BF16)?;
                    g.rename(gr.dx, "dx")?;
                    g.rename(gr.dscale, "dscale")?;
                    if let Some(db) = gr.dbias {
                        g.rename(db, "dbias")?;
                    }
                }
            }
        }
        Ok(g)
    }
}

fn cases(quick: bool) -> Vec<Case> {
    let seqs: &[i64] = if quick { &[1024] } else { &[1024, 4096, 8192] };
    let mut v = Vec::new();
    for &s in seqs {
        for composite in [false, true] {
            v.push(Case::SdpaFwd(s, composite));
            v.push(Case::SdpaBwd(s, composite));
        }
        v.push(Case::SdpaFp8Fwd(s));
    }
    for o in [
        Opt::BottomRight,
        Opt::Window,
        Opt::Ragged,
        Opt::Softcap,
        Opt::Bias,
        Opt::Alibi,
    ] {
        v.push(Case::SdpaOpt(o, false));
        v.push(Case::SdpaOpt(o, true));
    }
    v.push(Case::SdpaOpt(Opt::PagedDecode, false));
    v.push(Case::SdpaOpt(Opt::Sink, false));
    v.push(Case::SdpaOpt(Opt::Sink, true));
    v.push(Case::SdpaOpt(Opt::SplitKv, false));
    v.push(Case::LnFwd);
    v.push(Case::LnBwd);
    v
}

/// Buffers for every graph input and output, filled with small values.
enum Buf {
    B16(DeviceBuffer<bf16>),
    F32(DeviceBuffer<f32>),
    F8(DeviceBuffer<cudnn::F8E4M3>),
    I32(DeviceBuffer<i32>),
    /// Padding lengths, checked against the sequence extent.
    Len(SeqLengths),
    /// Ragged offsets (packed THD), from `SdpaConfig::ragged_offsets`.
    Ragged(DeviceBuffer<i32>),
}

fn buffers(plan: &Plan, case: Case) -> AnyResult<Vec<(String, bool, Buf)>> {
    let cfg = match case {
        Case::SdpaOpt(o, _) => Some(o.cfg()),
        _ => None,
    };
    let mut out = Vec::new();
    for t in &plan.io().tensors {
        let n = t.spec.span_elements()?;
        let b = match t.spec.dtype() {
            DType::BF16 => Buf::B16(DeviceBuffer::from_host(&vec![bf16::from_f32(0.25); n])?),
            DType::Fp8E4M3 => Buf::F8(DeviceBuffer::from_host(&vec![
                cudnn::F8E4M3::from_f32(0.25);
                n
            ])?),
            DType::F32 => {
                // Statistics: LSE ~ ln(seq); inverse std 1.
                Buf::F32(DeviceBuffer::from_host(&vec![1.0f32; n])?)
            }
            // Issue 24's inputs: full sequence lengths; page tables listing
            // pages 0, 1, ... of each sequence.
            DType::I32 => {
                let c = cfg
                    .as_ref()
                    .ok_or("an i32 input outside the option cases")?;
                // Ragged offsets: every sequence full, packed.
                let ragged = [
                    ("ragged_offset_q", RaggedTensor::Q, c.seq_q),
                    ("ragged_offset_k", RaggedTensor::K, c.seq_kv),
                    ("ragged_offset_v", RaggedTensor::V, c.seq_kv),
                    ("ragged_offset_o", RaggedTensor::O, c.seq_q),
                ]
                .into_iter()
                .find(|(s, _, _)| t.name.ends_with(s));
                // Named `sdpa<k>.seq_len_q` / `.seq_len_kv` by the graph.
                let extent = if t.name.ends_with("seq_len_q") {
                    Some(c.seq_q)
                } else if t.name.ends_with("seq_len_kv") {
                    Some(c.seq_kv)
                } else {
                    None
                };
                match (ragged, extent) {
                    (Some((_, which, seq)), _) => {
                        let lens = vec![seq as i32; c.batch.max(0) as usize];
                        Buf::Ragged(DeviceBuffer::from_host(&c.ragged_offsets(which, &lens)?)?)
                    }
                    (None, Some(e)) => Buf::Len(SeqLengths::new(&vec![e as i32; n], n, e)?),
                    (None, None) => Buf::I32(DeviceBuffer::from_host(
                        &(0..n)
                            .map(|i| (i as i64 % c.pages_per_seq().unwrap_or(1).max(1)) as i32)
                            .collect::<Vec<_>>(),
                    )?),
                }
            }
            other => return Err(format!("no buffer for {other} `{}`", t.name).into()),
        };
        out.push((t.name.clone(), t.is_output, b));
    }
    Ok(out)
}

struct Timing {
    device_us: f64,
    host_us: f64,
}

fn measure(
    h: &mut Handle,
    stream: &Stream,
    plan: &Plan,
    case: Case,
    iters: usize,
) -> AnyResult<Timing> {
    let mut bufs = buffers(plan, case)?;
    let mut b = plan.bindings();
    for (name, is_out, buf) in bufs.iter_mut() {
        match (buf, *is_out) {
            (Buf::B16(x), false) => b.input(name, x.as_slice())?,
            (Buf::B16(x), true) => b.output(name, x.as_slice_mut())?,
            (Buf::F32(x), false) => b.input(name, x.as_slice())?,
            (Buf::F32(x), true) => b.output(name, x.as_slice_mut())?,
            (Buf::F8(x), false) => b.input(name, x.as_slice())?,
            (Buf::F8(x), true) => b.output(name, x.as_slice_mut())?,
            (Buf::I32(x), false) => {
                if name.starts_with("page_table") {
                    // SAFETY: `buffers` fills a page table with pages below
                    // `pages_per_seq <= num_blocks` and the key lengths with
                    // `seq_kv <= pages * block_size`.
                    unsafe { b.input_page_table(name, x.as_slice())? }
                } else {
                    b.input(name, x.as_slice())?
                }
            }
            (Buf::I32(x), true) => b.output(name, x.as_slice_mut())?,
            (Buf::Len(x), _) => b.seq_lengths(name, x)?,
            // SAFETY: `buffers` fills them with `SdpaConfig::ragged_offsets`
            // of lengths within the sequence extent, so every sequence lies
            // inside its tensor's span whatever lengths (at most the extent,
            // checked by `SeqLengths`) are bound.
            (Buf::Ragged(x), _) => unsafe { b.input_ragged_offsets(name, x.as_slice())? },
        };
    }
    for _ in 0..2 {
        plan.execute(h, &mut b)?;
    }
    stream.synchronize()?;
    let (start, end) = (Event::new()?, Event::new()?);
    start.record(stream)?;
    let t0 = Instant::now();
    for _ in 0..iters {
        plan.execute(h, &mut b)?;
    }
    let host = t0.elapsed().as_secs_f64();
    end.record(stream)?;
    end.synchronize()?;
    let n = iters.max(1) as f64;
    Ok(Timing {
        device_us: f64::from(Event::elapsed_ms(&start, &end)?) * 1e3 / n,
        host_us: host * 1e6 / n,
    })
}

fn plan_case(case: Case, target: &Target) -> AnyResult<(Plan, f64)> {
    let t0 = Instant::now();
    let og = case.graph()?.build()?;
    let (plan, _) = Plan::build(&og, target, &Policy::default())?;
    Ok((plan, t0.elapsed().as_secs_f64()))
}

fn run() -> AnyResult<()> {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let iters: usize = match flag_value(&args, "--iters") {
        Some(v) => v
            .parse()
            .map_err(|_| format!("--iters: not a number: {v}"))?,
        None => 10,
    };
    let gpu = matches!(Device::count(), Ok(n) if n > 0);
    if !gpu {
        println!("no GPU: planning each case for an H200; the GPU part was not run\n");
        println!("| case | planning s | engine | workspace B |");
        println!("|---|---:|---|---:|");
        let target = Target::preset("h200")?;
        for c in cases(quick) {
            match plan_case(c, &target) {
                Ok((p, s)) => println!(
                    "| {} | {s:.2} | {:?} | {} |",
                    c.label(),
                    p.engine(),
                    p.workspace_size()
                ),
                Err(e) => println!("| {} | — | error: {e} | |", c.label()),
            }
        }
        println!("\nGPU part not run (no CUDA device).");
        return Ok(());
    }
    Device::new(0)?;
    let stream = Stream::new()?;
    let mut h = Handle::new(&stream)?;
    let target = Target::device(0)?;
    let mut csv = Csv::create(flag_value(&args, "--csv").map(Path::new))?;
    println!("device: {}\n", target.properties().name());
    println!("| case | dtype | planning s | device µs | rate | host µs |");
    println!("|---|---|---:|---:|---:|---:|");
    for c in cases(quick) {
        let result = plan_case(c, &target)
            .and_then(|(p, s)| Ok((measure(&mut h, &stream, &p, c, iters)?, s, p.engine())));
        let (device_us, host_us, detail) = match &result {
            Ok((t, s, e)) => {
                let rate = c.work()
                    / (t.device_us * 1e-6)
                    / if c.metric() == "TFLOP/s" { 1e12 } else { 1e9 };
                println!(
                    "| {} | {} | {s:.2} | {:.1} | {rate:.1} {} | {:.1} |",
                    c.label(),
                    c.dtype(),
                    t.device_us,
                    c.metric(),
                    t.host_us
                );
                (Some(t.device_us), Some(t.host_us), format!("engine {e:?}"))
            }
            Err(e) => {
                println!("| {} | {} | — | — | error: {e} | — |", c.label(), c.dtype());
                (None, None, e.to_string())
            }
        };
        let label = c.label();
        csv.row(&CsvRow {
            suite: c.suite(),
            case: &label,
            op: c.key(),
            shape: c.shape(),
            dtype: c.dtype(),
            layout: if matches!(c, Case::SdpaFp8Fwd(_)) {
                "BHSD"
            } else if c.suite() == "attention" {
                "BSHD"
            } else {
                "row-major"
            },
            metric: c.metric(),
            work: c.work(),
            device_us,
            host_us,
            detail,
        })?;
        csv.flush()?;
    }
    csv.finish()?;
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench_attention: cannot run: {e}");
            ExitCode::FAILURE
        }
    }
}
