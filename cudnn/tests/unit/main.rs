//! The unit tier: needs nothing (no libraries, no device): the f64 references,
//! validation, fuzz targets over pure code.
//!
//! One test binary for the tier: each file of this folder is a module whose
//! `main` registers its tests, named `module::tier::test`, so
//! `cargo test -p cudnn-rs --features dnn,blas,reference --test unit <module>::` runs one file's tests.

#[macro_use]
#[path = "../support/mod.rs"]
mod support;

// The test modules (their files), then the table that registers them.
mod block_scale;
mod builders;
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

tier_main! {
    mods: [
        block_scale, builders, conv_reference, fp8, fuzz_launch, fuzz_reference,
        fuzz_reference_dims, gemm_reference, json_floats, launch_variables,
        ops_reference, reference_robust, sdpa_softcap_reference, sdpa_softmax_reference,
        validation,
    ],
    cudarc: [],
    children: [
        ("CUDNN_RS_ROBUST_CHILD", "reference_robust"),
        (fuzz_reference_dims::CAPPED_CHILD, "fuzz_reference_dims"),
    ],
}
