//! Compile-fail proofs (trybuild): lifetimes and dtypes the type system must
//! reject. Needs no device and no CUDA libraries. Regenerate the expected
//! output with
//! `TRYBUILD=overwrite cargo test -p cudnn-rs --features dnn,nccl,cudarc --test compile_fail`.
//!
//! Built only with features `dnn`, `nccl` and `cudarc` besides the defaults
//! (`required-features`), the build every stage of `cargo xtask test` uses: rustc's wording depends on
//! what is in the build (with cudarc it names `std::marker::Sync` by its
//! full path, cudarc having an item named `Sync`), so the expected texts are
//! those of that one build.

#[test]
fn compile_fail() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile_fail/*.rs");
    t.compile_fail("tests/compile_fail_nccl/*.rs");
    // Issue 22: cudarc memory lent to the crate.
    t.compile_fail("tests/compile_fail_cudarc/*.rs");
}
