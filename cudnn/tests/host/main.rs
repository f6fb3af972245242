//! The host tier: needs NVIDIA's real libraries and no device (descriptors,
//! shapes, planning for a named GPU, plan files, fuzzing against the real
//! cuDNN). Skipped visibly where the libraries are missing, failed under
//! `CUDNN_RS_REQUIRE_LIBS=1`.
//!
//! One test binary for the tier: each file of this folder is a module whose
//! `main` registers its tests, named `module::tier::test`, so
//! `cargo test -p cudnn-rs --features dnn,blas,reference --test host <module>::` runs one file's tests.

#[macro_use]
#[path = "../support/mod.rs"]
mod support;

// The test modules (their files), then the table that registers them.
mod algo_cache;
mod bind_by_tensor;
mod conv;
mod convbench;
mod cuda_graphs;
#[cfg(feature = "cudarc")]
mod cudarc_interop;
mod descriptors;
mod finalize_memo;
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
mod issue34;
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
mod plan_targets;
mod plan_trust;
mod raw;
mod rnn;
mod sdpa_all_options;
mod sdpa_bias;
mod sdpa_bwd_reload;
mod sdpa_combined;
mod sdpa_fp8_ops;
mod sdpa_modes;
mod sdpa_options;
mod sdpa_ragged;
mod sdpa_ragged_composite;
mod sdpa_seq_lengths;
mod sdpa_softcap;
mod sdpa_softmax;

tier_main! {
    mods: [
        algo_cache, bind_by_tensor, conv, convbench, cuda_graphs, descriptors, finalize_memo, fp8_gemm, fuzz_backend, fuzz_graph,
        fuzz_graph_fp8, fuzz_plan_files, gemm, graph, graph_files, graph_fp8,
        graph_norm_attention, handles, issue34, nccl, nccl_groups, nccl_rendezvous,
        nccl_rendezvous_attacks, nccl_rendezvous_tcp, no_device, ops, perf, plan_json_softmax,
        plan_reload, plan_targets, plan_trust, raw, rnn, sdpa_all_options, sdpa_bias, sdpa_bwd_reload,
        sdpa_combined, sdpa_fp8_ops, sdpa_modes, sdpa_options, sdpa_ragged, sdpa_ragged_composite,
        sdpa_seq_lengths, sdpa_softcap, sdpa_softmax,
    ],
    cudarc: [cudarc_interop],
    // Debugging switches of one module (CUDNN_RS_FUZZ_TRACE,
    // CUDNN_RS_RELOAD_PROBE) are not children: set CUDNN_RS_TEST_MODULE to
    // that module with them.
    children: [
        ("CUDNN_RS_CHILD", "raw"),
        ("CUDNN_RS_DESCRIPTOR_LEAK_CHILD", "descriptors"),
        ("CUDNN_RS_FUZZ_BACKEND_WORKER", "fuzz_backend"),
        ("CUDNN_RS_FUZZ_PLAN_WORKER", "fuzz_plan_files"),
        ("CUDNN_RS_GRAPH_CHILD", "graph"),
        ("CUDNN_RS_GRAPH_FILES_CHILD", "graph_files"),
        ("CUDNN_RS_PLAN_RELOAD_WORKER", "plan_reload"),
        ("CUDNN_RS_TRUST_CHILD_UMASK", "plan_trust"),
        ("HOST_NCCL_RDZV_CHILD", "nccl_rendezvous"),
        ("HOST_NCCL_RDZV_FROM_ENV", "nccl_rendezvous"),
        ("CUDNN_RS_TEST_NO_DEVICE_STUB_CHILD", "no_device"),
        ("CUDNN_RS_FINALIZE_MEMO_CHILD", "finalize_memo"),
    ],
    // Plans finalized in an earlier run from the same input load from
    // cuDNN's JSON of them (`support::enable_finalize_memo`).
    finalize_memo: true,
}
