//! Safe, checked bindings to NVIDIA cuDNN, cuBLAS / cuBLASLt and NCCL.
//!
//! **Start here.** This page is the guide: what to depend on, which of the
//! three entry points to use, how the libraries are found, how to plan for
//! a GPU this machine does not have, how to use the crate from a
//! cudarc-based framework, and the error and soundness models in a
//! paragraph each.
//!
//! # In `Cargo.toml`
//!
//! The package is `cudnn-rs` (crates.io's `cudnn` is an unrelated 2016
//! crate); the library keeps the name `cudnn`:
//!
//! ```toml
//! [dependencies]
//! cudnn-rs = "0.1"   # or { version = "0.1", features = ["nccl", "cudarc"] }
//! ```
//!
//! and the code says `use cudnn::...`. The raw layers come with it as
//! [`sys`] (`cudnn::sys::{cudart, cudnn, cublas, nccl}`; packages
//! `cudart-rs-sys`, `cudnn-rs-sys`, `cublas-rs-sys`, `nccl-rs-sys`).
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `graph` | yes | [`graph`]: cuDNN's graph API (fused convolutions and matmuls, normalization, attention, plans, plan files, the plan cache) |
//! | `blas` | no | [`blas`]: cuBLAS and cuBLASLt (and the `cublas-rs-sys` dependency) |
//! | `dnn` | no | the legacy API's descriptors and ops in [`dnn`] ([`dnn::Handle`], which graph plans run on, is always there) |
//! | `reference` | no | [`reference`](mod@reference): the f64 CPU references (an oracle for tests, not needed to run anything). Attention, CTC, block scaling, norms and GELU come with `reference` alone; the convolution, op and RNN references also need `dnn`; the GEMM references and the FP8 attention reference (`attention_fp8`, the oracle of the graph's FP8 attention) also need `blas` |
//! | `nccl` | no | [`nccl`]: collectives across GPUs and machines, and the torchrun-style launch |
//! | `cudarc` | no | [`interop`]: cudarc's streams and memory (candle, burn, ...) used by this crate's calls |
//! | `link` | no | link the libraries at build time instead of loading them at run time (same API) |
//!
//! Always built: [`runtime`], [`dtype`], [`error`], [`dnn::Handle`] and
//! [`sys`]. Nothing CUDA is needed to **build** any of it (the libraries
//! are opened at run time). The default, `graph`, is a framework's common
//! case on cuDNN 9 (its GEMMs it has already, e.g. through cudarc's
//! cuBLAS) and the smallest build that plans and runs graphs;
//! `features = ["blas"]` adds cuBLAS / cuBLASLt, `features = ["dnn"]` the
//! legacy layer-by-layer ops.
//!
//! # Three entry points
//!
//! | you want | use | what it is |
//! |---|---|---|
//! | the classic layer-by-layer ops | [`dnn`] | cuDNN's legacy API: a [`dnn::Handle`], typed descriptors, convolution plans with algorithm search, fused conv + bias + activation, pooling, softmax, normalization, dropout, RNN, CTC |
//! | fused, ahead-of-time planned ops | [`graph`] | cuDNN's graph API: build a [`graph::Graph`], plan it for a [`graph::Target`] (a live GPU or a named one), keep plans in a [`graph::PlanCache`], [`graph::Plan::execute`] them; convolutions and matmuls with fused epilogues, normalization, attention (SDPA), FP8 |
//! | matrix products | [`blas`] | cuBLAS GEMM / GEMV with explicit layouts and compute types, and cuBLASLt matmul with epilogues (bias, ReLU, GELU) and cached plans |
//!
//! cuDNN 9 puts new capability into the graph API; [`dnn`] stays for the
//! ops it covers and for cuDNN 8. Beside them: [`runtime`] (devices,
//! streams, events, device and pinned memory, CUDA graphs), [`nccl`] and
//! [`interop`].
//!
//! # Module map
//!
//! | module | holds |
//! |---|---|
//! | [`runtime`] | [`runtime::Device`], [`runtime::Stream`], [`runtime::Event`], [`runtime::DeviceBuffer`] and borrowed views ([`runtime::DeviceSlice`], [`runtime::DeviceSliceMut`]), pinned host memory, copies, CUDA graph capture and replay |
//! | [`dnn`] | the cuDNN handle, descriptors and the legacy ops (see its docs) |
//! | [`graph`] | builder, targets, heuristics, plans, plan files and the plan cache; [`graph::backend`] for typed backend descriptors |
//! | [`blas`] | cuBLAS and cuBLASLt handles, GEMM, GEMV, matmul plans, FP8 matmul |
//! | [`nccl`] | communicators, collectives, groups, launch (feature `nccl`) |
//! | [`interop`] | cudarc streams and memory (feature `cudarc`) |
//! | [`dtype`] | element types ([`DataType`]: f32, f64, f16, bf16, i8, ...; FP8 [`F8E4M3`], [`F8E5M2`], [`F8E8M0`]) |
//! | [`error`] | the one [`Error`] and [`Result`] |
//! | [`reference`] | f64 CPU references: the oracles the tests compare GPU results with |
//! | [`soundness`] | the soundness model and the contract of every `unsafe fn` |
//! | [`sys`] | the raw bindings |
//!
//! Type names repeat across modules where the library has the same notion
//! (`dnn::Handle`, `blas::Handle`, `blas::LtHandle`; `graph::PlanCache`,
//! `blas::PlanCache`): write them module-qualified.
//!
//! # How the libraries are found
//!
//! By default each library (CUDA runtime, cuDNN, cuBLAS, cuBLASLt, NCCL) is
//! opened once, the first time it is needed, and each symbol resolved once.
//! For each library, in order, stopping at the first that opens: its
//! override variable (`CUDNN_LIB_DIR`, `CUBLAS_LIB_DIR`, `CUBLASLT_LIB_DIR`,
//! `CUDART_LIB_DIR`, `NCCL_LIB_DIR`: a folder or the file; when set, nothing
//! else is tried); the roots `CUDNN_PATH`, `CUDA_PATH`, `CUDA_HOME`
//! (`NCCL_HOME` for NCCL); `CUDNN_RS_SEARCH_PATH` (`:`-separated folders,
//! each also searched as a Python `site-packages`); the system loader
//! (`LD_LIBRARY_PATH`, `ld.so.cache`); the standard CUDA folders; the
//! Python environments (`VIRTUAL_ENV`, `CONDA_PREFIX`, the folders the
//! `python3` on `PATH` reports, the user and system site folders: NVIDIA's
//! pip wheels such as `nvidia-cudnn-cu13`); last `CUDNN_RS_FALLBACK_PATH`.
//! The interpreter is started (isolated, once per process) only when
//! nothing before its place opened; `CUDNN_RS_NO_PYTHON_PROBE=1` never
//! starts it. cuDNN 8 and 9, CUDA 12 and 13 are tried.
//!
//! A miss is an [`Error::Load`] listing every place tried and the variable
//! to set; a function the loaded library lacks is an
//! [`Error::MissingSymbol`] naming it and the library's version. In this
//! project's repository, `cargo xtask fetch-libs` downloads NVIDIA's wheels
//! (pinned) into `.cuda-libs/` and prints the `CUDNN_RS_SEARCH_PATH` to
//! export, and `cargo run --example doctor` reports where each library was
//! found (or every place it looked) and whether there is a GPU. With
//! feature `link` the same variables are read at build time instead, and
//! the system loader must find the libraries at run time.
//!
//! # Planning for a named GPU, without one
//!
//! Planning (heuristics, engine choice, finalizing, serializing) takes a
//! [`graph::Target`], not a device: [`graph::Target::preset`] (`a100`,
//! `h100`, `h200`, `l4`, `b200`), [`graph::Target::spec`] with a
//! [`graph::DeviceSpec`], or [`graph::DeviceProperties::from_json`] with
//! the JSON of the real GPU (`Target::device(0)?.properties().json()` on
//! that machine; the workspace's `device_props` example prints it). It needs
//! cuDNN 9.8 or newer and a `libcuda.so.1`: the real driver when one
//! opens, otherwise the crate's own driver stub ([`graph::driver`]), so a
//! build server with no GPU makes the plans a GPU server runs. This runs
//! here with no GPU (and says it skipped when the libraries are missing):
//!
//! ```
//! # #[cfg(not(feature = "graph"))]
//! # fn main() { eprintln!("SKIPPED: this example needs feature `graph`"); }
//! # #[cfg(feature = "graph")]
//! # fn main() -> cudnn::Result<()> {
//! # // Decided before anything runs: skip (saying so) only when cuDNN
//! # // does not load or is older than 9.8; after that every error fails.
//! # match cudnn::graph::require_graph_support() {
//! #     Err(e @ cudnn::Error::Unsupported { .. }) => {
//! #         eprintln!("SKIPPED (needs cuDNN >= 9.8): {e}");
//! #         return Ok(());
//! #     }
//! #     Err(e) if std::env::var_os("CUDNN_RS_REQUIRE_LIBS").is_none_or(|v| v != "1") => {
//! #         eprintln!("SKIPPED (cuDNN does not load): {e}");
//! #         return Ok(());
//! #     }
//! #     r => r?,
//! # }
//! use cudnn::graph::{ConvParams, DType, Graph, Plan, Policy, Target, TensorSpec};
//!
//! // y = relu(conv(x, w) + bias), f16, channels-last.
//! let mut g = Graph::new();
//! let x = g.input("x", TensorSpec::nhwc(DType::F16, &[8, 64, 56, 56])?)?;
//! let w = g.input("w", TensorSpec::nhwc(DType::F16, &[64, 64, 3, 3])?)?;
//! let b = g.input("bias", TensorSpec::nhwc(DType::F16, &[1, 64, 1, 1])?)?;
//! let y = g.conv_fprop(x, w, &ConvParams::new_2d([1, 1], [1, 1], [1, 1]))?;
//! let y = g.bias(y, b)?;
//! let y = g.relu(y)?;
//! g.output(y, DType::F16)?;
//! g.rename(y, "y")?;
//!
//! let h200 = Target::preset("h200")?;
//! let (plan, report) = Plan::build(&g.build()?, &h200, &Policy::default())?;
//! assert!(!report.candidates.is_empty());
//! println!(
//!     "{}: engine {:?}, workspace {} bytes",
//!     h200.fingerprint(),
//!     report.chosen,
//!     plan.workspace_size()
//! );
//! # Ok(())
//! # }
//! ```
//!
//! # Keeping plans: the plan cache
//!
//! A [`graph::PlanCache`] holds plans by graph, target and policy, is
//! shared between threads (`&self` methods; plans come as `Arc`), and is
//! saved to a file so a server starts with no planning. A plan with
//! runtime-compiled kernels is code, so a saved file is signed with a
//! [`graph::PlanKey`] and loaded with an explicit [`graph::Trust`]; the
//! load's [`graph::LoadReport`] must be looked at (it lists what was
//! skipped). The round trip, for an H200, without a GPU:
//!
//! ```
//! # #[cfg(not(feature = "graph"))]
//! # fn main() { eprintln!("SKIPPED: this example needs feature `graph`"); }
//! # #[cfg(feature = "graph")]
//! # fn main() -> cudnn::Result<()> {
//! # // Decided before anything runs: skip (saying so) only when cuDNN
//! # // does not load or is older than 9.8; after that every error fails.
//! # match cudnn::graph::require_graph_support() {
//! #     Err(e @ cudnn::Error::Unsupported { .. }) => {
//! #         eprintln!("SKIPPED (needs cuDNN >= 9.8): {e}");
//! #         return Ok(());
//! #     }
//! #     Err(e) if std::env::var_os("CUDNN_RS_REQUIRE_LIBS").is_none_or(|v| v != "1") => {
//! #         eprintln!("SKIPPED (cuDNN does not load): {e}");
//! #         return Ok(());
//! #     }
//! #     r => r?,
//! # }
//! use cudnn::graph::{DType, Graph, PlanCache, PlanKey, Policy, Target, TensorSpec, Trust};
//!
//! let mut g = Graph::new();
//! let a = g.input("a", TensorSpec::row_major(DType::F16, &[1, 128, 64])?)?;
//! let b = g.input("b", TensorSpec::row_major(DType::F16, &[1, 64, 256])?)?;
//! let c = g.matmul(a, b)?;
//! let c = g.relu(c)?;
//! g.output(c, DType::F16)?;
//! g.rename(c, "c")?;
//!
//! let (h200, policy) = (Target::preset("h200")?, Policy::default());
//! let cache = PlanCache::new(64);
//! let plan = cache.get_or_build(&g, &h200, &policy)?; // planned once
//!
//! let key = PlanKey::generate()?; // across runs: the unsafe PlanKey::load_or_create
//! let file = std::env::temp_dir().join(format!("cudnn-guide-{}.plans", std::process::id()));
//! cache.save(&file, &key)?;
//!
//! let restored = PlanCache::new(64);
//! let report = restored.load(&file, &h200, Trust::SignedBy(&key))?;
//! # let _ = std::fs::remove_file(&file);
//! println!("{report}");
//! report.complete()?; // an error if any entry was skipped
//! let again = restored.get(&g, &h200, &policy).expect("the loaded plan");
//! assert_eq!(again.workspace_size(), plan.workspace_size());
//! # Ok(())
//! # }
//! ```
//!
//! # Running a plan
//!
//! Execution needs a GPU: a stream, a [`dnn::Handle`] bound to it (it owns
//! the workspace), and the buffers bound by tensor name. Every buffer is
//! checked against the plan's tensors (length, element type, device)
//! before cuDNN sees it:
//!
//! ```no_run
//! # #[cfg(feature = "graph")]
//! # mod example {
//! use cudnn::dnn::Handle;
//! use cudnn::graph::{Plan, Target, Trust};
//! use cudnn::runtime::{Device, DeviceBuffer, Stream};
//! use half::f16;
//!
//! # pub fn run(plan_text: &str, key: &cudnn::graph::PlanKey) -> cudnn::Result<()> {
//! Device::new(0)?.set_current()?;
//! let plan = Plan::deserialize(plan_text, &Target::device(0)?, Trust::SignedBy(key))?;
//! let stream = Stream::new()?;
//! let mut handle = Handle::new(&stream)?;
//!
//! let x = DeviceBuffer::from_host(&vec![f16::ONE; 8 * 64 * 56 * 56])?;
//! let w = DeviceBuffer::from_host(&vec![f16::ONE; 64 * 64 * 3 * 3])?;
//! let bias = DeviceBuffer::from_host(&vec![f16::ZERO; 64])?;
//! let mut y = DeviceBuffer::<f16>::zeroed(8 * 64 * 56 * 56)?;
//!
//! let mut bind = plan.bindings();
//! bind.input("x", &x)?.input("w", &w)?.input("bias", &bias)?.output("y", &mut y)?;
//! plan.execute(&mut handle, &mut bind)?; // enqueued on `stream`
//! stream.synchronize()?;
//! let host: Vec<f16> = y.to_vec()?;
//! # let _ = host;
//! # Ok(()) }
//! # }
//! # fn main() {}
//! ```
//!
//! # From a cudarc-based framework
//!
//! With feature `cudarc`, [`interop`] takes the framework's own
//! `Arc<CudaStream>` and `CudaSlice`s: [`interop::CudarcStream::new`] makes
//! cudarc's stream this crate's [`runtime::Stream`] (never destroyed here),
//! and `stream.scope(|sc| ...)` lends cudarc memory as the
//! [`runtime::DeviceSlice`] / [`runtime::DeviceSliceMut`] views every op,
//! graph binding, GEMM and collective takes, with cudarc's event tracking
//! kept; the `unsafe` `read` / `write` guards skip the scope's host waits
//! for hot paths. No copies, and the crate's own memory is never handed to
//! cudarc. See the [`interop`] docs for the rules and a complete op.
//!
//! # Errors
//!
//! Every fallible call returns [`Result`] with the one [`Error`]. Bad
//! input is caught in Rust before any library call and is
//! [`Error::InvalidArgument`] (naming the argument, the rule and the value)
//! or [`Error::Mismatch`] (what was compared, expected and got); a library
//! failure keeps the raw status, the call, the library's own text and the
//! crate's context ([`Error::Cudnn`], [`Error::Cublas`], [`Error::Cuda`],
//! [`Error::Nccl`], [`Error::Driver`]); a missing library or function is
//! [`Error::Load`] / [`Error::MissingSymbol`]; no usable GPU is
//! [`Error::NoDevice`]; something the loaded library or device cannot do is
//! [`Error::Unsupported`] (naming what would); files are [`Error::Io`]
//! with the path. Unknown status codes survive as numbers. Nothing a
//! caller can reach panics.
//!
//! # Soundness
//!
//! Safe code cannot make the GPU read or write memory that is freed, too
//! small, of another element type or on another device: buffers are
//! checked against descriptors and plans before every launch, anything
//! that keeps a device pointer borrows its owner, work is ordered against
//! frees on other streams, plan files that carry compiled kernels load
//! safely only when signed by a key the program holds, and a batch of NCCL
//! calls launches all or nothing. Where a rule cannot be checked (a raw
//! pointer, a stream from elsewhere, a file no key vouches for) the call is
//! an `unsafe fn` with a written contract. The rules, where each is
//! enforced, the test that proves it and every `unsafe fn` contract are in
//! [`soundness`].
//!
//! (The modules of features this build of the docs leaves off link to the
//! feature table above.)
//!
#![cfg_attr(feature = "reference", doc = "[`reference`]: mod@crate::reference")]
#![cfg_attr(not(feature = "reference"), doc = "[`reference`]: #in-cargotoml")]
#![cfg_attr(feature = "nccl", doc = "[`nccl`]: crate::nccl")]
#![cfg_attr(not(feature = "nccl"), doc = "[`nccl`]: #in-cargotoml")]
#![cfg_attr(feature = "cudarc", doc = "[`interop`]: crate::interop")]
#![cfg_attr(not(feature = "cudarc"), doc = "[`interop`]: #in-cargotoml")]
#![cfg_attr(
    feature = "cudarc",
    doc = "[`interop::CudarcStream::new`]: crate::interop::CudarcStream::new"
)]
#![cfg_attr(
    not(feature = "cudarc"),
    doc = "[`interop::CudarcStream::new`]: #in-cargotoml"
)]
#![deny(missing_docs)]
// docs.rs (which passes `--cfg docsrs`, see Cargo.toml) marks every item a
// feature gates with that feature, methods in gated files included.
#![cfg_attr(docsrs, feature(doc_cfg))]
// Docs built with a part left off (`dnn`, `graph`, `blas`, `reference`)
// still mention its items, as the table above does: those links dangle
// there only. The full docs (every part: docs.rs, and the workspace's doc
// build, where the examples turn every part on) check every link.
#![cfg_attr(
    not(all(
        feature = "dnn",
        feature = "graph",
        feature = "blas",
        feature = "reference"
    )),
    allow(rustdoc::broken_intra_doc_links)
)]

#[cfg(any(feature = "dnn", feature = "graph"))]
pub(crate) mod atomic_file;
#[cfg(feature = "blas")]
pub mod blas;
pub(crate) mod check;
pub mod dnn;
pub mod dtype;
pub mod error;
#[cfg(feature = "graph")]
pub mod graph;
#[cfg(feature = "cudarc")]
pub mod interop;
#[cfg(feature = "nccl")]
pub mod nccl;
pub(crate) mod no_device;
#[cfg(feature = "reference")]
pub mod reference;
pub mod runtime;
pub mod soundness;

pub use check::cudnn_status_name;
pub use dtype::{DataType, F8E4M3, F8E5M2, F8E8M0, Fp8Format, Fp8Saturation, Scale};
pub use error::{Error, Result};

/// The raw bindings this crate is built on.
pub mod sys {
    /// cuBLAS and cuBLASLt (feature `blas`).
    #[cfg(feature = "blas")]
    pub use cublas_sys as cublas;
    pub use cudart_sys as cudart;
    pub use cudnn_sys as cudnn;
    /// NCCL (feature `nccl`).
    #[cfg(feature = "nccl")]
    pub use nccl_sys as nccl;
}
