//! The GPU tier: needs a CUDA device; each test compares with the f64
//! reference. Skipped visibly without one, failed under
//! `CUDNN_RS_REQUIRE_GPU=1` (the device check).
//!
//! One test binary for the tier: each file of this folder is a module whose
//! `main` registers its tests, named `module::tier::test`, so
//! `cargo test -p cudnn-rs --features dnn,blas,reference --test gpu <module>::` runs one file's tests.

#[macro_use]
#[path = "../support/mod.rs"]
mod support;

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
mod device_props;
mod fp8_gemm;
mod fp8_graph;
mod gelu_forms;
mod gemm;
mod graph;
mod graph_attention;
mod graph_norm;
mod graph_workspace;
mod issue34;
mod nccl;
mod nccl_devices;
mod nccl_faults;
mod no_device;
mod ops;
#[cfg(feature = "cudarc")]
mod owned_capture;
#[cfg(not(feature = "cudarc"))]
mod owned_capture {
    pub fn main() {
        crate::support::skipped("cudarc", "cudnn was built without feature `cudarc`");
    }
}
mod rnn;
mod runtime;
mod sdpa_bias;
mod sdpa_combined;
mod sdpa_options;
mod sdpa_ragged_bwd;
mod sdpa_softcap;
mod sdpa_softmax;

fn main() {
    let modules: &[support::Module] = &[
        ("conv", conv::main),
        ("cuda_graphs", cuda_graphs::main),
        ("cudarc_interop", cudarc_interop::main),
        ("device_props", device_props::main),
        ("fp8_gemm", fp8_gemm::main),
        ("fp8_graph", fp8_graph::main),
        ("gelu_forms", gelu_forms::main),
        ("gemm", gemm::main),
        ("graph", graph::main),
        ("graph_attention", graph_attention::main),
        ("graph_norm", graph_norm::main),
        ("graph_workspace", graph_workspace::main),
        ("issue34", issue34::main),
        ("nccl", nccl::main),
        ("nccl_devices", nccl_devices::main),
        ("nccl_faults", nccl_faults::main),
        ("no_device", no_device::main),
        ("ops", ops::main),
        ("owned_capture", owned_capture::main),
        ("rnn", rnn::main),
        ("runtime", runtime::main),
        ("sdpa_bias", sdpa_bias::main),
        ("sdpa_combined", sdpa_combined::main),
        ("sdpa_options", sdpa_options::main),
        ("sdpa_ragged_bwd", sdpa_ragged_bwd::main),
        ("sdpa_softcap", sdpa_softcap::main),
        ("sdpa_softmax", sdpa_softmax::main),
    ];
    // The variables that start a process as one module's child (it runs
    // only that module).
    let children = &[
        ("GPU_NCCL_DEVICES_CHILD", "nccl_devices"),
        ("GPU_NCCL_CHILD", "nccl_faults"),
    ];
    support::run_modules(modules, children)
}
