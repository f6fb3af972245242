//! Compile-fail proofs (trybuild): lifetimes and dtypes the type system must
//! reject. Needs no device and no CUDA libraries. Regenerate the expected
//! output with `TRYBUILD=overwrite cargo test -p cudnn-rs --test compile_fail`.

#[test]
fn compile_fail() {
    let t = trybuild::TestCases::new();
    // With cudarc in the build, rustc names some traits by their full path
    // (`std::marker::Sync`: cudarc has an item named `Sync`), so the
    // expected text of these folders holds only without the `cudarc`
    // feature; with it, only the cudarc cases run (`cargo xtask test` runs
    // both builds).
    #[cfg(not(feature = "cudarc"))]
    t.compile_fail("tests/compile_fail/*.rs");
    #[cfg(all(feature = "nccl", not(feature = "cudarc")))]
    t.compile_fail("tests/compile_fail_nccl/*.rs");
    // Issue 22: cudarc memory lent to the crate.
    #[cfg(feature = "cudarc")]
    t.compile_fail("tests/compile_fail_cudarc/*.rs");
}
