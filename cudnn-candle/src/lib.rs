//! cuDNN attention, convolution and norms on [candle](https://docs.rs/candle-core) tensors,
//! through [`cudnn`](https://docs.rs/cudnn-rs)'s graphs. Attention: forward and
//! backward (candle's autograd), causal, sliding windows, logit softcap,
//! ALiBi, attention sinks, grouped-query attention, varlen (packed) batches
//! and paged-KV decode (vLLM block tables), with the argument conventions
//! of `candle-flash-attn` so switching is a one-line change; GEMM through
//! cuBLASLt with fused bias / ReLU / GELU epilogues, with backward; and
//! FP8 scaled GEMM:
//!
//! ```no_run
//! # fn main() -> candle_core::Result<()> {
//! use candle_core::{DType, Device, Tensor};
//! let dev = Device::new_cuda(0)?;
//! // (batch, seq, heads, head_dim), bf16
//! let q = Tensor::randn(0f32, 1.0, (2, 128, 8, 64), &dev)?.to_dtype(DType::BF16)?;
//! let k = Tensor::randn(0f32, 1.0, (2, 128, 2, 64), &dev)?.to_dtype(DType::BF16)?;
//! let v = k.clone();
//! let o = cudnn_candle::flash_attn(&q, &k, &v, 1.0 / 8.0, true)?;
//! assert_eq!(o.dims(), &[2, 128, 8, 64]);
//! # Ok(()) }
//! ```
//!
//! | function | FlashAttention's | notes |
//! |---|---|---|
//! | [`flash_attn`] | `flash_attn` | causal aligned bottom-right |
//! | [`flash_attn_windowed`] | `flash_attn_windowed` | right window `None` or `Some(0)` |
//! | [`flash_attn_softcap`] | `softcap` | Gemma 2 |
//! | [`flash_attn_varlen`], [`flash_attn_varlen_windowed`] | same names | `seqlens` read to the host |
//! | [`flash_attn_kvcache`] | `flash_attn_with_kvcache` (`cache_seqlens`, `alibi_slopes`) | fixed capacity: one plan per decode loop; ALiBi ([`AttnParams::alibi_slopes`]) per sequence's length: cuDNN's when causal with every length `seq_q`, else a per-sequence `[B, H, seq_q, capacity]` score bias |
//! | [`flash_attn_paged`] | `flash_attn_with_kvcache` (`block_table`, `alibi_slopes`) | vLLM / mistral.rs layout; table checked on the host; ALiBi as [`flash_attn_kvcache`]'s (capacity `max_blocks_per_seq * block_size`) |
//! | [`flash_attn_alibi`], [`flash_attn_alibi_windowed`] | same names | dense calls; cuDNN's ALiBi when causal with `seq_q == seq_kv`, else a score bias; the slopes get no gradient (FlashAttention's) |
//! | [`flash_attn_varlen_alibi`], [`flash_attn_varlen_alibi_windowed`] | same names | cuDNN's ALiBi when causal with every sequence `seqlen_q == seqlen_k` (packed prefill), else a per-sequence `[B, H, max_q, max_k]` score bias; no slope gradient |
//! | [`flash_attn_sinks`] | | gpt-oss sinks ([`AttnParams::sinks`]), decode included; their gradient (dense and varlen calls) |
//! | [`flash_attn_with`], [`flash_attn_varlen_with`] | | every option ([`AttnParams`]) |
//! | [`conv2d`] | candle's `Tensor::conv2d` | NCHW; f32, f16, bf16; backward: data and filter gradients |
//! | [`conv2d_with`] | | + bias `(K)` and an [`Activation`] ([`Conv2dParams`]); conv + bias + ReLU in one graph (ReLU after it where that does not plan); ReLU's gradient 0 at 0 |
//! | [`layer_norm`] | candle-nn's `ops::layer_norm` | over the last dim; bias optional; eps in (0, 1]; backward: two graphs (statistics, then dx / dweight / dbias) |
//! | [`rms_norm`] | candle-nn's `ops::rms_norm` | optional bias; eps in (0, 1]; backward: two graphs |
//! | [`matmul_bias_act`] | (candle's `broadcast_matmul` + bias + `relu` / `gelu`) | cuBLASLt epilogues; backward: dA, dB (cuBLASLt on transposed views), dbias; ReLU's gradient from the output (0 at 0), GELU's from Z recomputed by one GEMM ([`gemm_bwd`]); plans cached up to [`GEMM_PLAN_CAPACITY`] per element type ([`clear_gemm_plans`]) |
//! | [`fp8_matmul`] | PyTorch's `_scaled_mm`, mistral.rs's `fused_batch_matmul_f8` | `F8E4M3` operands, per-tensor f32 scales on the device; bias / ReLU / GELU; f32, f16, bf16 output (no bias with f32, as `_scaled_mm`); cuBLASLt's FP8 rules (`b = w.t()`, k and n in 16s, 16-byte strides and offsets) checked first, typed; forward only (arguments tracking a gradient refused, typed) |
//! | [`capture::capture`], [`capture::CapturedStep::launch`] | (cudarc's `begin_capture` / `CudaGraph::launch`) | dense attention forwards recorded into a CUDA graph that owns what it addresses; replayed on candle's stream |
//! | [`capture::flash_attn_kvcache`], [`capture::CapturedStep::set_cache_seqlens`] | `flash_attn_with_kvcache` in a CUDA graph | host lengths, checked, written before each launch: a replayed decode loop |
//! | [`capture::flash_attn_paged`], [`capture::CapturedStep::update_block_table`] | `flash_attn_with_kvcache` (`block_table`) in a CUDA graph | host table and lengths, checked as the eager call does, written before each launch |
//! | [`capture::capture_step`], [`capture::CapturedCandleStep::launch`] (both `unsafe`) | cudarc's `begin_capture` of candle's stream / `CudaGraph::launch` (mistral.rs, vLLM style) | a whole step, candle's ops and this crate's attention forwards (dense, KV-cache, paged), in one graph of candle's stream; the graph object keeps this crate's resources; candle's memory is the caller's (`# Safety`); the capture runs under candle's `enable_cuda_graph_htod_cache` guard, so run the eager warm-up under it too |
//!
//! # How it runs
//! Each function is a candle `CustomOp3`. `cuda_fwd` checks the shapes,
//! dtypes and strides ([`params`], pure functions), builds the attention
//! graph ([`graphs`]), takes its plan from a process-wide
//! [`PlanCache`](cudnn::graph::PlanCache) ([`plans`]; keyed by graph,
//! device architecture and policy: a decode loop plans once per shape) and
//! runs it on **candle's own stream** with candle's memory lent through
//! `cudnn::interop` (`CudarcStream::read` / `write`: cudarc's event tracking
//! orders the work with candle's). Strided q, k, v are used as they are
//! when the head dim is contiguous (start offsets honoured); otherwise a
//! contiguous copy is made first. Varlen inputs are copied into the `[B,
//! S_max]` span the ragged graph's tensors have.
//!
//! The backward (candle's `Tensor::backward`) runs the forward again in
//! training mode, for the softmax statistics a `CustomOp` cannot return
//! beside its output, then cuDNN's attention backward; q, k, v and the
//! output gradient are made contiguous first.
//!
//! Errors are `candle_core::Error::Cuda` holding the typed [`cudnn::Error`]
//! (`InvalidArgument` / `Mismatch` naming the argument and its value):
//! `err.downcast_ref::<cudnn::Error>()` after matching the variant. Every
//! input's dtype and device are checked before anything is copied
//! ([`precheck`]): a strided input of a dtype the function does not take
//! (F8E4M3 in attention or `conv2d`) is that typed error, never candle's
//! copy kernel for it.
//!
//! `conv2d` and the norms run the same way (CustomOps on candle's stream,
//! plans from the same cache; [`conv`], [`norm`]). Their backward: the
//! convolution's data and filter gradients through cuDNN's dgrad / wgrad
//! graphs, the bias gradient a sum of the output gradient; ReLU's
//! gradient from the kept output (nothing recomputed). The norms' forward
//! saves nothing; their backward runs two graphs: a training forward that
//! recomputes the mean and inverse std, then cuDNN's norm backward (dx,
//! dweight, dbias together).
//!
//! The GEMMs ([`matmul_bias_act`], [`fp8_matmul`]) run `cudnn::blas`'s
//! cuBLASLt plans on the same stream (a cuBLASLt handle per thread and
//! stream, plans cached per shape, type, epilogue and pointer alignment).
//! `matmul_bias_act`'s backward is three candle-visible steps: `dZ` (candle
//! ops; GELU's `Z` from one more cuBLASLt GEMM), `dA` and `dB` (cuBLASLt on
//! candle's `t()` views, nothing copied) and `dbias` (a candle sum in f32).
//!
//! Inputs that are views (`narrow`, `chunk`) are used as they are when
//! contiguous and 16-byte aligned at their start (cuDNN's rule for bound
//! memory); otherwise they are copied first, as candle's own ops accept them.
//!
//! Not in this version: gradients of ALiBi slopes (none, as in
//! FlashAttention: slopes that track a gradient are accepted and get
//! none), `(batch, heads)` slopes whose rows differ in dense calls (refused,
//! typed; cuDNN's slopes are per head: varlen, KV-cache and paged calls take
//! them, as a per-sequence score bias), ALiBi in captured KV-cache calls
//! (refused, typed) and in captured paged calls other than a causal prefill
//! with every length `seq_q` (refused, typed, at capture or at an update),
//! the sinks' gradient in KV-cache and paged calls (forward only: sinks
//! that track a gradient are refused, typed), a paged backward (cuDNN has
//! none), CUDA graph capture of these calls while cudarc (not this crate)
//! captures candle's stream (refused, typed; [`capture`] records the dense,
//! KV-cache and paged attention forwards on a stream of its own, and
//! [`capture::capture_step`] a whole step with candle's ops on candle's
//! stream: backward, varlen, conv2d, norm and GEMM calls of this crate are
//! refused inside both), FP8 GEMM's backward
//! (arguments that track a gradient are refused, typed), an FP8 GEMM with
//! an f32 output and a bias (refused, typed, as PyTorch's `_scaled_mm`),
//! FP8 outputs (with D's scale and amax), E5M2 operands (candle has no E5M2
//! dtype) and block-scaled (MXFP8) FP8 GEMM, FP8 operands in other layouts
//! than cuBLASLt's "TN" (refused, typed, not copied); FlashAttention's zero
//! rows (a causal sequence with more queries than keys) and a left window
//! alone that cuts the first rows (when `seq_q > seq_kv + 1`, without ALiBi)
//! are refused, typed, not computed; for `conv2d`: GELU / SiLU / ReLU without
//! a bias fused into the convolution's graph (cuDNN fuses them only on NHWC
//! tensors; here they run as candle ops on the result), NHWC inputs used as
//! they are, 1-d / 3-d and transposed convolution.
//!
//! # Example and benchmarks
//! `examples/candle_transformer_block` is a small transformer block on
//! these functions: one training step (loss and every gradient) and a
//! decode loop against a paged KV cache (two sequences of different
//! lengths, blocks out of order), in bf16 and in f32 (attention in f16),
//! each checked against the same block on candle's CPU in f32 with stated
//! tolerances (the host tests show they fail planted attention bugs);
//! without a GPU it plans the block's attention graphs for an H200. The
//! crate's GPU test binary runs the same check (trial `example_block`)
//! and, with `--bench`, times these functions against candle's own ops (a
//! markdown table: the device check's benchmark rows; a row whose two
//! outputs differ by more than 3e-2 fails).
//!
//! # Building
//! candle-core's `cuda` feature compiles CUDA kernels with `nvcc` at build
//! time: see the repository README (`cargo xtask fetch-libs --stack
//! candle` provides the toolkit from NVIDIA's wheels).

mod alibi;
pub mod attn;
mod cache_alibi;
pub mod capture;
pub mod conv;
#[doc(hidden)]
pub mod conv_graphs;
pub mod device;
mod exec;
mod fp8;
mod gemm;
pub mod gemm_bwd;
pub mod graphs;
pub mod norm;
#[doc(hidden)]
pub mod norm_graphs;
mod paged;
pub mod params;
#[doc(hidden)]
pub mod precheck;
#[doc(hidden)]
pub mod run;
mod side;
mod sink_grad;
mod varlen;
#[doc(hidden)]
pub mod varlen_bias;

pub use alibi::{
    flash_attn_alibi, flash_attn_alibi_windowed, flash_attn_sinks, flash_attn_varlen_alibi,
    flash_attn_varlen_alibi_windowed,
};
pub use attn::{
    flash_attn, flash_attn_kvcache, flash_attn_softcap, flash_attn_windowed, flash_attn_with,
};
pub use conv::{conv2d, conv2d_with};
pub use conv_graphs::{Activation, Conv2dParams};
pub use device::plans;
pub use fp8::fp8_matmul;
pub use gemm::{GEMM_PLAN_CAPACITY, clear_gemm_plans, gemm_plan_count, matmul_bias_act};
pub use norm::{layer_norm, rms_norm};
pub use paged::flash_attn_paged;
pub use params::AttnParams;
pub use params::gemm::MatmulActivation;
pub use varlen::{flash_attn_varlen, flash_attn_varlen_windowed, flash_attn_varlen_with};
