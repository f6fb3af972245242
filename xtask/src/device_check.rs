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
//! and the release examples, strips them, and writes them with a runner
//! script into `.device-check/` (a few MiB; it must stay well under 64 MiB).
//! The GPU machine needs an NVIDIA driver, bash, and cuDNN, cuBLAS and the
//! CUDA runtime somewhere the loader looks — typically NVIDIA's wheels in a
//! Python environment next to PyTorch: the runner adds that environment's
//! `site-packages` to `CUDNN_RS_SEARCH_PATH`. It runs every test binary with
//! `CUDNN_RS_REQUIRE_GPU=1 CUDNN_RS_REQUIRE_LIBS=1` (so a missing device or
//! library fails instead of skipping), then `doctor` and the other examples,
//! writes `report.md` (into `$OUT` when set, else the current directory) with
//! a pass/fail line per binary and the logs of failures, keeps every log in
//! `logs/`, and exits non-zero if anything failed.
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
    let tests = cargo_artifacts(&root, &["test", "-p", "cudnn", "--release", "--no-run"])?;
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

    let script = dest.join("run.sh");
    fs::write(&script, runner_script())
        .map_err(|e| format!("writing {}: {e}", script.display()))?;
    make_executable(&script)?;
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

/// The runner: bash, no Rust toolchain.
fn runner_script() -> &'static str {
    r###"#!/usr/bin/env bash
# Generated by `cargo xtask device-check`: runs the cudnn GPU check on a machine
# with an NVIDIA GPU and no Rust toolchain. Usage: bash run.sh
# Writes report.md (and logs/) into $OUT when set, else the current directory;
# exits non-zero if any binary failed. PER_BINARY_TIMEOUT (seconds, default 300).
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${OUT:-.}"
mkdir -p "$out/logs"
out="$(cd "$out" && pwd)"
report="$out/report.md"
per_binary_timeout="${PER_BINARY_TIMEOUT:-300}"

# cuDNN, cuBLAS and the CUDA runtime from the Python environment's NVIDIA
# wheels (next to PyTorch), unless the caller already said where they are.
for py in python3 python; do
    command -v "$py" >/dev/null 2>&1 || continue
    sp="$("$py" - <<'PY' 2>/dev/null
import site
dirs = []
try:
    dirs += site.getsitepackages()
except Exception:
    pass
try:
    dirs.append(site.getusersitepackages())
except Exception:
    pass
print(":".join(d for d in dirs if d))
PY
)" || sp=""
    if [ -n "$sp" ]; then
        export CUDNN_RS_SEARCH_PATH="${CUDNN_RS_SEARCH_PATH:+$CUDNN_RS_SEARCH_PATH:}$sp"
        break
    fi
done

# Missing device or libraries are failures here, not skips.
export CUDNN_RS_REQUIRE_GPU=1 CUDNN_RS_REQUIRE_LIBS=1
export RUST_BACKTRACE=1

run_with_timeout() {
    if command -v timeout >/dev/null 2>&1; then
        timeout --kill-after=10 "$per_binary_timeout" "$@"
    else
        "$@"
    fi
}

gpu="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 4 | tr '\n' ';')"
{
    echo "# cudnn device check"
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "- host: $(uname -srm); $(ldd --version 2>/dev/null | head -n 1)"
    echo "- GPU: ${gpu:-nvidia-smi not available}"
    echo "- CUDNN_RS_SEARCH_PATH: ${CUDNN_RS_SEARCH_PATH:-(unset)}"
    echo
    echo "| binary | result | seconds | summary |"
    echo "|---|---|---|---|"
} > "$report"

failed=()
passed=0
details=""

run_one() {
    local name="$1"; shift
    local log="$out/logs/${name//\//_}.log"
    local start end rc summary verdict
    start=$(date +%s)
    ( cd "$here" && run_with_timeout "$@" ) > "$log" 2>&1
    rc=$?
    end=$(date +%s)
    summary="$(grep -E '^test result:' "$log" | tail -n 1)"
    [ -n "$summary" ] || summary="$(grep -v '^[[:space:]]*$' "$log" | tail -n 1 | cut -c1-120)"
    if [ $rc -eq 0 ]; then
        verdict="PASS"; passed=$((passed + 1))
    else
        if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then verdict="FAIL (timeout ${per_binary_timeout}s)"; else verdict="FAIL (exit $rc)"; fi
        failed+=("$name")
        details+=$'\n'"## $name ($verdict)"$'\n\n```text\n'"$(tail -n 150 "$log")"$'\n```\n'
    fi
    summary="${summary//|/\\|}"
    echo "| $name | $verdict | $((end - start)) | $summary |" >> "$report"
    echo "$verdict  $name  ($((end - start)) s)  $summary"
}

for t in "$here"/bin/tests/*; do
    [ -x "$t" ] || continue
    run_one "tests/$(basename "$t")" "$t"
done
run_one "doctor" "$here/bin/doctor"
for e in "$here"/bin/*; do
    [ -f "$e" ] && [ -x "$e" ] || continue
    case "$(basename "$e")" in doctor) continue ;; esac
    run_one "examples/$(basename "$e")" "$e"
done

{
    echo
    echo "**${passed} passed, ${#failed[@]} failed**${failed[*]:+: ${failed[*]}}"
    echo
    echo "## doctor"
    echo
    echo '```text'
    cat "$out/logs/doctor.log"
    echo '```'
    printf '%s\n' "$details"
} >> "$report"

echo
echo "${passed} passed, ${#failed[@]} failed; report: $report"
[ ${#failed[@]} -eq 0 ]
"###
}
