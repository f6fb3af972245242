//! Compile-fail proofs (trybuild): lifetimes and dtypes the type system must
//! reject. Needs no device and no CUDA libraries. Regenerate the expected
//! output with `TRYBUILD=overwrite cargo test -p cudnn --test compile_fail`.

#[test]
fn compile_fail() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile_fail/*.rs");
    #[cfg(feature = "nccl")]
    t.compile_fail("tests/compile_fail_nccl/*.rs");
}
