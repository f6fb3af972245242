//! The unit tier: needs nothing (no libraries, no device): the f64 references,
//! validation, fuzz targets over pure code.
//!
//! One test binary for the tier: each file of this folder is a module whose
//! `main` registers its tests, named `module::tier::test`, so
//! `cargo test -p cudnn-rs --test unit <module>::` runs one file's tests.

#[macro_use]
#[path = "../support/mod.rs"]
mod support;

tier_main! {
    mods: [
        block_scale, conv_reference, fp8, fuzz_launch, fuzz_reference,
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
