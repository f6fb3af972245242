//! `cargo xtask features`: every feature combination of `cudnn` that
//! matters builds warning-free: none, each feature alone, the defaults and
//! all together (issue 34, "compile only what you use").
//!
//! Each set is `cargo clippy -p cudnn-rs --no-default-features --features
//! <set> --lib --examples -- -D warnings`: clippy is `cargo check` plus the
//! lints, and `-D warnings` turns rustc's own warnings (an import or
//! function a feature leaves unused) into failures. `--examples` checks the
//! crate's own examples whose `required-features` the set meets (cargo
//! skips the others), so an example that needs a part says so. The first
//! failing set stops the run. The dependencies are built once and reused:
//! only `cudnn-rs` is checked again per set.

use std::process::Command;
use std::time::Instant;

/// The parts, each alone; `default` and `all` are added around them.
pub const PARTS: &[&str] = &["dnn", "graph", "blas", "reference", "nccl", "cudarc"];

/// The crate's default features (cudnn/Cargo.toml; a unit test compares).
pub const DEFAULT: &[&str] = &["graph"];

/// Whether `cargo tree --prefix none --depth 1`'s output lists `name` below
/// the root (its first line).
pub fn builds_dep(tree: &str, name: &str) -> bool {
    tree.lines()
        .skip(1)
        .any(|l| l.split_whitespace().next() == Some(name))
}

/// Every set the command checks: (label, `--features` value, whether
/// `--no-default-features` is passed).
pub fn sets() -> Vec<(String, String, bool)> {
    let mut v = vec![
        ("none".to_string(), String::new(), true),
        ("default".to_string(), String::new(), false),
    ];
    for p in PARTS {
        v.push((p.to_string(), p.to_string(), true));
    }
    v.push(("all".to_string(), PARTS.join(","), true));
    v.push(("link".to_string(), "link".to_string(), true));
    v
}

pub fn run(args: &[String]) -> Result<(), String> {
    if let Some(a) = args.first() {
        return Err(format!("features takes no arguments (got `{a}`)"));
    }
    let root = crate::workspace_root();
    // `link` finds the libraries at build time: it needs them (the cuda13
    // stack of `cargo xtask fetch-libs`, or the caller's own variables).
    let cu13 = root.join(".cuda-libs").join("cuda13");
    let link_env = if std::env::var_os("CUDNN_RS_SEARCH_PATH").is_some() {
        Some(None)
    } else if cu13.is_dir() {
        Some(Some(cu13))
    } else {
        None
    };
    let start = Instant::now();
    let mut done = 0;
    for (label, features, no_default) in sets() {
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string()));
        cmd.current_dir(&root)
            .args(["clippy", "--quiet", "-p", "cudnn-rs"]);
        if no_default {
            cmd.arg("--no-default-features");
        }
        if !features.is_empty() {
            cmd.args(["--features", &features]);
        }
        cmd.args(["--lib", "--examples", "--", "-D", "warnings"]);
        if label == "link" {
            match &link_env {
                None => {
                    println!(
                        "features: NOT RUN: `link` (it finds the libraries at build time: \
                         run `cargo xtask fetch-libs` or set CUDNN_RS_SEARCH_PATH)"
                    );
                    continue;
                }
                Some(Some(dir)) => {
                    cmd.env("CUDNN_RS_SEARCH_PATH", dir);
                }
                Some(None) => {}
            }
        }
        let what = format!(
            "cargo clippy -p cudnn-rs{}{} --lib --examples -- -D warnings",
            if no_default {
                " --no-default-features"
            } else {
                ""
            },
            if features.is_empty() {
                String::new()
            } else {
                format!(" --features {features}")
            }
        );
        let t = Instant::now();
        eprintln!("+ {what}");
        let st = cmd.status().map_err(|e| format!("{what}: {e}"))?;
        if !st.success() {
            return Err(format!("feature set `{label}` failed: {what} ({st})"));
        }
        // The driver stub's C compile (and `cc`) belongs to `graph` alone:
        // ask cargo's own resolution whether this set builds `cc`.
        let graph_on = (!no_default && DEFAULT.contains(&"graph"))
            || features.split(',').any(|f| f == "graph");
        let mut tree = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string()));
        tree.current_dir(&root).args([
            "tree",
            "--offline",
            "-q",
            "-p",
            "cudnn-rs",
            "-e",
            "build",
            "--depth",
            "1",
            "--prefix",
            "none",
        ]);
        if no_default {
            tree.arg("--no-default-features");
        }
        if !features.is_empty() {
            tree.args(["--features", &features]);
        }
        let out = tree.output().map_err(|e| format!("cargo tree: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "cargo tree for `{label}` failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let cc = builds_dep(&String::from_utf8_lossy(&out.stdout), "cc");
        if cc != graph_on {
            return Err(format!(
                "feature set `{label}`: the build dependency `cc` is {} but `graph` is {} \
                 (only graph's driver stub needs a C compiler)",
                if cc { "built" } else { "not built" },
                if graph_on { "on" } else { "off" }
            ));
        }
        println!(
            "features: ok  {label:<10} {:>6.1} s",
            t.elapsed().as_secs_f64()
        );
        done += 1;
    }
    println!(
        "features: {done} sets build warning-free ({:.0} s)",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `cargo tree -e build --depth 1 --prefix none`'s shape: the root,
    /// then one build dependency a line (`(*)` marks repeats).
    #[test]
    fn a_build_dependency_is_found_below_the_root_only() {
        let with = "cudnn-rs v0.1.0 (/x/cudnn)\ncc v1.2.3\n";
        assert!(builds_dep(with, "cc"));
        assert!(!builds_dep("cudnn-rs v0.1.0 (/x/cudnn)\n", "cc"));
        assert!(!builds_dep("cc v0.1.0 (/x/cc)\n", "cc"));
        assert!(!builds_dep("cudnn-rs v0.1.0\ncc-extra v1.0.0\n", "cc"));
    }

    /// The sets are none, the defaults, each part alone, all and link: each
    /// part of the crate's `[features]` table is checked alone.
    #[test]
    fn every_feature_of_the_manifest_is_checked_alone() {
        let manifest = std::fs::read_to_string(crate::workspace_root().join("cudnn/Cargo.toml"))
            .expect("cudnn/Cargo.toml");
        let table = manifest
            .split("[features]")
            .nth(1)
            .and_then(|t| t.split("\n[").next())
            .expect("a [features] table");
        let declared: Vec<&str> = table
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split_once(" = ").map(|(k, _)| k.trim()))
            .filter(|k| *k != "default")
            .collect();
        let labels: Vec<String> = sets().into_iter().map(|s| s.0).collect();
        for f in &declared {
            assert!(
                labels.iter().any(|l| l == f),
                "feature `{f}` is not checked alone"
            );
        }
        assert_eq!(
            declared.len() + 3,
            labels.len(),
            "{declared:?} vs {labels:?}"
        );
        let default_line = table
            .lines()
            .find(|l| l.starts_with("default = "))
            .expect("a default line");
        let want: Vec<String> = DEFAULT.iter().map(|f| format!("\"{f}\"")).collect();
        assert_eq!(default_line, format!("default = [{}]", want.join(", ")));
        let all = sets().into_iter().find(|s| s.0 == "all").expect("all");
        assert_eq!(all.1, "dnn,graph,blas,reference,nccl,cudarc");
    }
}
