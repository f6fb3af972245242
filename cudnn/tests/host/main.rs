//! The host tier: needs NVIDIA's real libraries and no device (descriptors,
//! shapes, planning for a named GPU, plan files, fuzzing against the real
//! cuDNN). Skipped visibly where the libraries are missing, failed under
//! `CUDNN_RS_REQUIRE_LIBS=1`.
//!
//! One test binary for the tier: each file of this folder is a module whose
//! `main` registers its tests, named `module::tier::test`, so
//! `cargo test -p cudnn-rs --test host <module>::` runs one file's tests.

#[macro_use]
#[path = "../support/mod.rs"]
mod support;

mod algo_cache;
mod bind_by_tensor;
mod conv;
mod cuda_graphs;
#[cfg(feature = "cudarc")]
mod cudarc_interop;
#[cfg(not(feature = "cudarc"))]
mod cudarc_interop {
    pub fn main() {
        crate::support::skipped("cudarc", "cudnn was built without feature `cudarc`");
    }
}
mod descriptors;
mod fp8_gemm;
mod fuzz_backend;
mod fuzz_graph;
mod fuzz_graph_fp8;
mod fuzz_plan_files;
mod gemm;
mod graph;
mod graph_files;
mod graph_fp8;
mod graph_norm_attention;
mod handles;
mod nccl;
mod nccl_groups;
mod nccl_rendezvous;
mod nccl_rendezvous_attacks;
mod nccl_rendezvous_tcp;
mod no_device;
mod ops;
mod perf;
mod plan_json_softmax;
mod plan_reload;
mod plan_trust;
mod raw;
mod rnn;
mod sdpa_all_options;
mod sdpa_bias;
mod sdpa_bwd_reload;
mod sdpa_combined;
mod sdpa_options;
mod sdpa_ragged;
mod sdpa_ragged_composite;
mod sdpa_seq_lengths;
mod sdpa_softcap;
mod sdpa_softmax;

fn main() {
    let modules: &[support::Module] = &[
        ("algo_cache", algo_cache::main),
        ("bind_by_tensor", bind_by_tensor::main),
        ("conv", conv::main),
        ("cuda_graphs", cuda_graphs::main),
        ("cudarc_interop", cudarc_interop::main),
        ("descriptors", descriptors::main),
        ("fp8_gemm", fp8_gemm::main),
        ("fuzz_backend", fuzz_backend::main),
        ("fuzz_graph", fuzz_graph::main),
        ("fuzz_graph_fp8", fuzz_graph_fp8::main),
        ("fuzz_plan_files", fuzz_plan_files::main),
        ("gemm", gemm::main),
        ("graph", graph::main),
        ("graph_files", graph_files::main),
        ("graph_fp8", graph_fp8::main),
        ("graph_norm_attention", graph_norm_attention::main),
        ("handles", handles::main),
        ("nccl", nccl::main),
        ("nccl_groups", nccl_groups::main),
        ("nccl_rendezvous", nccl_rendezvous::main),
        ("nccl_rendezvous_attacks", nccl_rendezvous_attacks::main),
        ("nccl_rendezvous_tcp", nccl_rendezvous_tcp::main),
        ("no_device", no_device::main),
        ("ops", ops::main),
        ("perf", perf::main),
        ("plan_json_softmax", plan_json_softmax::main),
        ("plan_reload", plan_reload::main),
        ("plan_trust", plan_trust::main),
        ("raw", raw::main),
        ("rnn", rnn::main),
        ("sdpa_all_options", sdpa_all_options::main),
        ("sdpa_bias", sdpa_bias::main),
        ("sdpa_bwd_reload", sdpa_bwd_reload::main),
        ("sdpa_combined", sdpa_combined::main),
        ("sdpa_options", sdpa_options::main),
        ("sdpa_ragged", sdpa_ragged::main),
        ("sdpa_ragged_composite", sdpa_ragged_composite::main),
        ("sdpa_seq_lengths", sdpa_seq_lengths::main),
        ("sdpa_softcap", sdpa_softcap::main),
        ("sdpa_softmax", sdpa_softmax::main),
    ];
    // The variables that start a process as one module's child (it runs
    // only that module). Debugging switches of one module
    // (CUDNN_RS_FUZZ_TRACE, CUDNN_RS_RELOAD_PROBE) are not here: set
    // CUDNN_RS_TEST_MODULE to that module with them.
    let children = &[
        ("CUDNN_RS_CHILD", "raw"),
        ("CUDNN_RS_DESCRIPTOR_LEAK_CHILD", "descriptors"),
        ("CUDNN_RS_FUZZ_BACKEND_WORKER", "fuzz_backend"),
        ("CUDNN_RS_FUZZ_PLAN_WORKER", "fuzz_plan_files"),
        ("CUDNN_RS_GRAPH_CHILD", "graph"),
        ("CUDNN_RS_GRAPH_FILES_CHILD", "graph_files"),
        ("CUDNN_RS_PLAN_RELOAD_WORKER", "plan_reload"),
        ("CUDNN_RS_TRUST_CHILD_UMASK", "plan_trust"),
        ("HOST_NCCL_RDZV_CHILD", "nccl_rendezvous"),
        ("CUDNN_RS_TEST_NO_DEVICE_STUB_CHILD", "no_device"),
        ("HOST_NCCL_RDZV_FROM_ENV", "nccl_rendezvous"),
    ];
    support::run_modules(modules, children)
}
