//! Says which tests and examples this build's features leave out: the
//! tiers (`unit`, `host`, `gpu`) need every part with its references, the
//! compile-fail proofs also `nccl` and `cudarc` (their `required-features`
//! in Cargo.toml), the library's CTC unit tests `dnn` and `reference`, and
//! the crate's examples their parts. Cargo skips such a binary without a word in a plain
//! `cargo test`; this one says so, on stderr, and passes: what it names
//! did not run.

fn main() {
    let on = [
        ("dnn", cfg!(feature = "dnn")),
        ("graph", cfg!(feature = "graph")),
        ("blas", cfg!(feature = "blas")),
        ("reference", cfg!(feature = "reference")),
        ("nccl", cfg!(feature = "nccl")),
        ("cudarc", cfg!(feature = "cudarc")),
    ];
    let missing = |need: &[&'static str]| -> Vec<&'static str> {
        need.iter()
            .copied()
            .filter(|n| on.iter().any(|(f, o)| f == n && !o))
            .collect()
    };
    // Keep in step with `required-features` in Cargo.toml and the
    // `cfg(all(test, feature = ...))` unit tests of `src`.
    for (what, m) in [
        (
            "the unit, host and gpu tiers",
            missing(&["dnn", "graph", "blas", "reference"]),
        ),
        (
            "the compile-fail proofs",
            missing(&["dnn", "graph", "blas", "nccl", "cudarc"]),
        ),
        (
            "the CTC unit tests against the f64 reference (dnn/ctc.rs)",
            missing(&["dnn", "reference"]),
        ),
        ("the `blas_gemm` example", missing(&["blas", "reference"])),
        ("the `legacy_conv` example", missing(&["dnn"])),
        ("the `plan_for_named_gpu` example", missing(&["graph"])),
    ] {
        if m.is_empty() {
            eprintln!("features: built: {what}");
        } else {
            eprintln!(
                "SKIPPED: {what}: needs feature(s) {} (the whole suite: \
                 `--features dnn,blas,reference,nccl,cudarc`)",
                m.join(", ")
            );
        }
    }
}
