//! The unit tier: needs nothing (no libraries, no device): the f64 references,
//! validation, fuzz targets over pure code.
//!
//! One test binary for the tier: each file of this folder is a module whose
//! `main` registers its tests, named `module::tier::test`, so
//! `cargo test -p cudnn-rs --test unit <module>::` runs one file's tests.

#[macro_use]
#[path = "../support/mod.rs"]
mod support;

mod block_scale;
mod conv_reference;
mod fp8;
mod fuzz_launch;
mod fuzz_reference;
mod fuzz_reference_dims;
mod gemm_reference;
mod json_floats;
mod launch_variables;
mod ops_reference;
mod reference_robust;
mod sdpa_softcap_reference;
mod sdpa_softmax_reference;
mod validation;

fn main() {
    let modules: &[support::Module] = &[
        ("block_scale", block_scale::main),
        ("conv_reference", conv_reference::main),
        ("fp8", fp8::main),
        ("fuzz_launch", fuzz_launch::main),
        ("fuzz_reference", fuzz_reference::main),
        ("fuzz_reference_dims", fuzz_reference_dims::main),
        ("gemm_reference", gemm_reference::main),
        ("json_floats", json_floats::main),
        ("launch_variables", launch_variables::main),
        ("ops_reference", ops_reference::main),
        ("reference_robust", reference_robust::main),
        ("sdpa_softcap_reference", sdpa_softcap_reference::main),
        ("sdpa_softmax_reference", sdpa_softmax_reference::main),
        ("validation", validation::main),
    ];
    // The variables that start a process as one module's child (it runs
    // only that module).
    let children = &[
        ("CUDNN_RS_ROBUST_CHILD", "reference_robust"),
        (fuzz_reference_dims::CAPPED_CHILD, "fuzz_reference_dims"),
    ];
    support::run_modules(modules, children)
}
