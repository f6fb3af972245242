//! `cargo xtask device-check`: pack the GPU check for a machine with an
//! NVIDIA GPU and no Rust toolchain.
//!
//! <!-- README snippet (to be moved into README.md) -->
//! ## Checking on a GPU machine
//!
//! Machines that build this project usually have no GPU, so the GPU tier of
//! the tests runs elsewhere, from a prebuilt folder:
//!
//! ```text
//! cargo xtask device-check          # on the build machine
//! # copy .device-check/ to the GPU machine, then there:
//! bash .device-check/run.sh         # or: OUT=/some/dir bash .device-check/run.sh
//! ```
//!
//! `device-check` builds the release test binaries of the `cudnn` package
//! and the release examples, strips them, and writes them with the runner
//! script (`xtask/device/run.sh`) and the PyTorch comparison
//! (`xtask/device/compare_torch.py`) into `.device-check/` (about 40 MiB;
//! it must stay well under 64 MiB).
//! The GPU machine needs an NVIDIA driver, bash, and cuDNN, cuBLAS, NCCL and the
//! CUDA runtime somewhere the loader looks — typically NVIDIA's wheels in a
//! Python environment next to PyTorch: the runner adds that environment's
//! `site-packages` to `CUDNN_RS_SEARCH_PATH`. It runs every test binary with
//! `CUDNN_RS_REQUIRE_GPU=1 CUDNN_RS_REQUIRE_LIBS=1` (so a missing device or
//! library fails instead of skipping), then `doctor` and the other examples,
//! then our benchmarks with `--csv` (and `bench_nccl`, the all-reduce bus
//! bandwidth, labelled single-rank on a one-GPU machine), then the same cases through PyTorch
//! (`compare_torch.py`), then the GPU tests under `compute-sanitizer
//! memcheck` when that tool is there; all within a time budget (default
//! 330 s; the header of run.sh has the estimate per phase). It writes
//! `report.md` (into `$OUT` when set, else the current directory) with the
//! phase timings, a pass/fail line per binary, the memcheck summary, the
//! PyTorch comparison table, our benchmark tables and the logs of failures,
//! keeps every log in `logs/` and the benchmark rows in `csv/`, and exits
//! non-zero if anything failed.
//!
//! Test binaries that need the Rust toolchain at run time (the trybuild
//! compile-fail tests) are left out; `--exclude NAME` leaves out more.
//! The binaries link the build machine's glibc dynamically: build on a
//! distribution no newer than the GPU machine's.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Test targets that run `cargo`/`rustc` themselves, so cannot run there.
const NEEDS_TOOLCHAIN: &[&str] = &["compile_fail"];
/// The folder size we must stay under (what the GPU machine accepts).
const HARD_LIMIT: u64 = 64 << 20;
/// Above this, warn: little room is left.
const WARN_LIMIT: u64 = 48 << 20;
/// The runner, and the PyTorch comparison it calls: packed as they are.
const RUNNER: &str = include_str!("../device/run.sh");
const COMPARE_TORCH: &str = include_str!("../device/compare_torch.py");

const USAGE: &str = "\
usage: cargo xtask device-check [--exclude TEST]... [--no-strip]

Builds the release test binaries of `cudnn` and the release examples, and
packs them with run.sh into .device-check/ for a machine with an NVIDIA GPU.";

/// One binary to pack.
#[derive(Debug)]
struct Artifact {
    /// Name in the packed folder (`tests/gpu_runtime`, `doctor`).
    name: String,
    /// Where cargo put it.
    path: PathBuf,
}

/// Entry point: `cargo xtask device-check [options]`.
pub fn run(args: &[String]) -> Result<(), String> {
    let mut exclude: Vec<String> = NEEDS_TOOLCHAIN.iter().map(|s| s.to_string()).collect();
    let mut strip = true;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--exclude" => exclude.push(
                it.next()
                    .ok_or("--exclude needs a test target name")?
                    .clone(),
            ),
            "--no-strip" => strip = false,
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => return Err(format!("device-check: unknown option `{other}`\n\n{USAGE}")),
        }
    }

    let root = crate::workspace_root();
    let dest = root.join(".device-check");
    let bin = dest.join("bin");

    eprintln!("device-check: building release test binaries of `cudnn` ...");
    // With `nccl`, so that host_nccl and gpu_nccl are real tests there.
    let tests = cargo_artifacts(
        &root,
        &[
            "test",
            "-p",
            "cudnn",
            "--features",
            "nccl",
            "--release",
            "--no-run",
        ],
    )?;
    eprintln!("device-check: building release examples ...");
    let examples = cargo_artifacts(
        &root,
        &["build", "-p", "cudnn-examples", "--release", "--examples"],
    )?;

    let mut packed: Vec<Artifact> = Vec::new();
    let mut skipped: Vec<String> = Vec::new();
    for (target, kind, path) in tests {
        if kind != "test" && kind != "lib" {
            continue;
        }
        if exclude.contains(&target) {
            skipped.push(target);
            continue;
        }
        // The library's own unit tests get a name that cannot clash with a test target.
        let name = if kind == "test" {
            format!("tests/{target}")
        } else {
            format!("tests/unit-{target}")
        };
        packed.push(Artifact { name, path });
    }
    for (target, kind, path) in examples {
        if kind == "example" {
            packed.push(Artifact { name: target, path });
        }
    }
    if !packed.iter().any(|a| a.name == "doctor") {
        return Err("device-check: the `doctor` example was not built".into());
    }

    if dest.exists() {
        fs::remove_dir_all(&dest).map_err(|e| format!("removing {}: {e}", dest.display()))?;
    }
    fs::create_dir_all(bin.join("tests"))
        .map_err(|e| format!("creating {}: {e}", bin.display()))?;
    let strip_tool = if strip { find_in_path("strip") } else { None };
    for a in &packed {
        let to = bin.join(&a.name);
        fs::copy(&a.path, &to)
            .map_err(|e| format!("copying {} to {}: {e}", a.path.display(), to.display()))?;
        if let Some(tool) = &strip_tool {
            // Keep the symbol table (function names in backtraces), drop DWARF.
            let ok = Command::new(tool)
                .arg("--strip-debug")
                .arg(&to)
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if !ok {
                eprintln!(
                    "device-check: warning: `strip --strip-debug {}` failed; packed unstripped",
                    to.display()
                );
            }
        }
    }

    for (name, text) in [("run.sh", RUNNER), ("compare_torch.py", COMPARE_TORCH)] {
        let script = dest.join(name);
        fs::write(&script, text).map_err(|e| format!("writing {}: {e}", script.display()))?;
        make_executable(&script)?;
    }
    let list: String = packed.iter().map(|a| format!("{}\n", a.name)).collect();
    fs::write(dest.join("MANIFEST"), list).map_err(|e| format!("writing MANIFEST: {e}"))?;

    let size = dir_size(&dest).map_err(|e| format!("measuring {}: {e}", dest.display()))?;
    println!(
        "device-check: packed {} binaries into {}",
        packed.len(),
        dest.display()
    );
    for a in &packed {
        let s = fs::metadata(bin.join(&a.name))
            .map(|m| m.len())
            .unwrap_or(0);
        println!("  bin/{:<40} {:>8.2} MiB", a.name, s as f64 / 1048576.0);
    }
    if !skipped.is_empty() {
        println!(
            "  left out (need the Rust toolchain, or --exclude): {}",
            skipped.join(", ")
        );
    }
    if strip_tool.is_none() && strip {
        println!("  note: `strip` not found; binaries are unstripped");
    }
    println!("  total {:.2} MiB (limit 64 MiB)", size as f64 / 1048576.0);
    if size >= HARD_LIMIT {
        return Err(format!(
            "device-check: {} is {size} bytes, over the 64 MiB limit",
            dest.display()
        ));
    }
    if size > WARN_LIMIT {
        eprintln!(
            "device-check: warning: {:.1} MiB is over 48 MiB; little room is left",
            size as f64 / 1048576.0
        );
    }
    println!(
        "\nOn the GPU machine: bash .device-check/run.sh   (report in $OUT/report.md, or ./report.md)"
    );
    Ok(())
}

/// Run cargo with `--message-format=json` and return `(target name, target
/// kind, executable)` for every artifact with an executable.
fn cargo_artifacts(root: &Path, args: &[&str]) -> Result<Vec<(String, String, PathBuf)>, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut child = Command::new(&cargo)
        .args(args)
        .arg("--message-format=json")
        .current_dir(root)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("running cargo: {e}"))?;
    let stdout = child.stdout.take().ok_or("cargo: no stdout")?;
    let mut found = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.map_err(|e| format!("reading cargo's output: {e}"))?;
        if !line.contains("\"reason\":\"compiler-artifact\"") {
            continue;
        }
        let Some(exe) = json_string_after(&line, "\"executable\":") else {
            continue;
        };
        let target = line.find("\"target\":").map(|i| &line[i..]).unwrap_or("");
        let name = json_string_after(target, "\"name\":").unwrap_or_default();
        let kind = json_string_after(target, "\"kind\":[").unwrap_or_default();
        found.push((name, kind, PathBuf::from(exe)));
    }
    let status = child
        .wait()
        .map_err(|e| format!("waiting for cargo: {e}"))?;
    if !status.success() {
        return Err(format!("`cargo {}` failed ({status})", args.join(" ")));
    }
    Ok(found)
}

/// The JSON string value right after `key` in `s` (`None` for `null` or when
/// absent). Handles the escapes cargo emits in paths.
fn json_string_after(s: &str, key: &str) -> Option<String> {
    let rest = s[s.find(key)? + key.len()..].trim_start();
    let rest = rest.strip_prefix('"')?;
    let mut out = String::new();
    let mut chars = rest.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'u' => {
                    let hex: String = chars.by_ref().take(4).collect();
                    out.push(
                        u32::from_str_radix(&hex, 16)
                            .ok()
                            .and_then(char::from_u32)?,
                    );
                }
                other => out.push(other), // \" \\ \/
            },
            c => out.push(c),
        }
    }
    None
}

fn find_in_path(tool: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

#[cfg(unix)]
fn make_executable(p: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(p, fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("chmod {}: {e}", p.display()))
}

#[cfg(not(unix))]
fn make_executable(_: &Path) -> Result<(), String> {
    Ok(())
}

fn dir_size(p: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    for e in fs::read_dir(p)? {
        let e = e?;
        let m = e.metadata()?;
        total += if m.is_dir() {
            dir_size(&e.path())?
        } else {
            m.len()
        };
    }
    Ok(total)
}
