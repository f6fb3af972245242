//! Says which test binaries this build's features leave out: the tiers
//! (`unit`, `host`, `gpu`) need every part with its references, and the
//! compile-fail proofs also `nccl` and `cudarc` (their `required-features`
//! in Cargo.toml). Cargo skips such a binary without a word in a plain
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
    let tiers = missing(&["dnn", "graph", "blas", "reference"]);
    let compile_fail = missing(&["dnn", "graph", "blas", "nccl", "cudarc"]);
    for (what, m) in [
        ("the unit, host and gpu tiers", tiers),
        ("the compile-fail proofs", compile_fail),
    ] {
        if m.is_empty() {
            eprintln!("features: {what} are built");
        } else {
            eprintln!(
                "SKIPPED: {what}: they need feature(s) {} (the whole suite: \
                 `--features dnn,reference,nccl,cudarc`)",
                m.join(", ")
            );
        }
    }
}
