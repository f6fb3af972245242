//! `cargo xtask device-check`: pack the GPU check for a machine with an
//! NVIDIA GPU and no Rust toolchain.
//!
//! Builds the release `gpu` test binary of `cudnn` (with `nccl` and
//! `cudarc`) and the release examples, strips their debug information (the
//! symbol tables stay, for backtraces), and writes into `.device-check/`:
//!
//! - `bin.tar.xz`: the binaries, as `bin/tests/gpu` and `bin/<example>`;
//! - `MANIFEST`: one line per example and one per module of the `gpu`
//!   binary (`tests/gpu/<module>`, from `cudnn/tests/gpu/main.rs`): run.sh
//!   runs or reports every one, a module alone through
//!   `CUDNN_RS_TEST_MODULE`;
//! - `run.sh` and `compare_torch.py` (from `xtask/device/`);
//! - `cudnn-candle`'s `gpu` test binary as `bin/cudnn-candle/gpu` (three
//!   MANIFEST lines: its trials, the `candle_transformer_block` example's
//!   check, its benchmark table), built with the candle CUDA toolkit, with the record
//!   `CANDLE` of the CUDA version its PTX needs; or, where it cannot be
//!   built, its reason in `NOT_PACKED` (see [`candle`]).
//!
//! Unit and host tests are not packed: they need no GPU, and CI runs them.
//! What travels to the GPU machine is the pack *and* the source tree, so
//! the size check counts both (tracked and untracked-not-ignored files)
//! against the 64 MiB a transfer takes, and fails above [`ALLOWED`] to keep
//! room for what a session carries beside it.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod candle;

/// Test targets that run `cargo`/`rustc` themselves, so cannot run there.
const NEEDS_TOOLCHAIN: &[&str] = &["compile_fail"];
/// Host-only programs left out of the pack: the conformance tier needs
/// Python and NVIDIA's frontend, which the GPU machine does not have.
const HOST_ONLY: &[&str] = &["conformance"];
/// What one transfer to the GPU machine takes, tree and pack together.
const TRAVEL_LIMIT: u64 = 64 << 20;
/// What the pack and tree may take: the limit less a 16 MiB margin.
const ALLOWED: u64 = 48 << 20;
/// xz preset: 6 (xz's default, 8 MiB dictionary, about 100 MiB of memory
/// to compress, 9 MiB to unpack); 9 saves about 7 % more here.
const XZ_PRESET: u32 = 6;
/// The runner, and the PyTorch comparison it calls: packed as they are.
const RUNNER: &str = include_str!("../device/run.sh");
const COMPARE_TORCH: &str = include_str!("../device/compare_torch.py");

const USAGE: &str = "\
usage: cargo xtask device-check [--exclude NAME]... [--no-strip]

NAME: an example, a module of the gpu test binary (`runtime` or
`gpu/runtime`: its MANIFEST line is left out), `cudnn-candle/gpu` (not
built), or `cudnn-candle/example_block` / `cudnn-candle/bench` (that line
of the candle binary left out).

Builds the release gpu test binary of `cudnn` and the release examples,
packs them (tar.xz) with run.sh into .device-check/ for a machine with an
NVIDIA GPU, and checks that the pack and the tree fit one transfer with room.
Also cudnn-candle's gpu test binary (dev profile), with the toolkit of
`cargo xtask fetch-libs --stack candle` and the target folder
CUDNN_RS_CANDLE_TARGET_DIR (else CI's cache folder): without that toolkit
the pack says NOT PACKED and why, and run.sh reports it as a failure.";

/// One binary to pack.
#[derive(Debug)]
struct Artifact {
    /// Name in the pack (`tests/gpu`, `doctor`).
    name: String,
    /// Where cargo put it.
    path: PathBuf,
}

/// Entry point: `cargo xtask device-check [options]`.
pub fn run(args: &[String]) -> Result<(), String> {
    let mut exclude: Vec<String> = NEEDS_TOOLCHAIN
        .iter()
        .chain(HOST_ONLY)
        .map(|s| s.to_string())
        .collect();
    let mut strip = true;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--exclude" => exclude.push(
                it.next()
                    .ok_or("--exclude needs a test or example name")?
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
    let stage = root.join("target").join("device-check-stage");

    eprintln!("device-check: building the release gpu test binary of `cudnn` ...");
    // Every part (the tiers need `dnn`, `blas` and `reference` beside the
    // default `graph`), with `nccl`, so that the nccl modules are real
    // tests there, and `cudarc` (the cudarc_interop module and example).
    let tests = cargo_artifacts(
        &root,
        &[
            "test",
            "-p",
            "cudnn-rs",
            "--features",
            "dnn,blas,reference,nccl,cudarc",
            "--release",
            "--no-run",
            "--test",
            "gpu",
        ],
        &[],
    )?;
    let mut left_out: Vec<String> = Vec::new();
    eprintln!("device-check: building the release examples ...");
    let examples = cargo_artifacts(
        &root,
        &[
            "build",
            "-p",
            "cudnn-examples",
            "--features",
            "cudarc",
            "--release",
            "--examples",
        ],
        &[],
    )?;
    // cudnn-candle's gpu binary: built where the candle toolkit is, else a
    // NOT_PACKED line with the reason (run.sh reports it as a failure).
    let mut not_packed: Vec<(String, String)> = Vec::new();
    let mut candle_record: Option<String> = None;
    let candle_bin = if let Some(all) = candle::left_out_whole(&exclude) {
        left_out.extend(all);
        None
    } else {
        match build_candle(&root) {
            Ok((path, tk)) => {
                let bytes =
                    fs::read(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
                let ptx = candle::max_ptx_isa(&bytes);
                candle_record = Some(candle::record_text(tk.cuda, ptx, candle::nvcc_pin()));
                Some(path)
            }
            Err(why) => {
                eprintln!("device-check: NOT PACKED {}: {why}", candle::ENTRY);
                for e in candle::ENTRIES {
                    not_packed.push((e.to_string(), why.clone()));
                }
                None
            }
        }
    };

    let mut packed: Vec<Artifact> = Vec::new();
    for (target, kind, path) in tests.into_iter().chain(examples) {
        let name = match kind.as_str() {
            "test" if target == "gpu" => "tests/gpu".to_string(),
            "example" => target.clone(),
            _ => continue,
        };
        if exclude.contains(&target) {
            left_out.push(target);
            continue;
        }
        if !packed.iter().any(|a| a.name == name) {
            packed.push(Artifact { name, path });
        }
    }
    for must in ["device_props", "doctor"] {
        if !packed.iter().any(|a| a.name == must) {
            return Err(format!(
                "device-check: the `{must}` example is not in the pack (run.sh starts with it)"
            ));
        }
    }
    packed.sort_by(|a, b| a.name.cmp(&b.name));
    // After the cudnn binaries: its MANIFEST line comes last, so run.sh
    // runs it after the gpu modules.
    if let Some(path) = candle_bin {
        packed.push(Artifact {
            name: candle::ENTRY.to_string(),
            path,
        });
    }

    for dir in [&dest, &stage] {
        if dir.exists() {
            fs::remove_dir_all(dir).map_err(|e| format!("removing {}: {e}", dir.display()))?;
        }
    }
    for sub in ["tests", "cudnn-candle"] {
        fs::create_dir_all(stage.join("bin").join(sub))
            .map_err(|e| format!("creating {}: {e}", stage.display()))?;
    }
    fs::create_dir_all(&dest).map_err(|e| format!("creating {}: {e}", dest.display()))?;
    let strip_tool = if strip { find_in_path("strip") } else { None };
    let mut sizes = Vec::new();
    for a in &packed {
        let to = stage.join("bin").join(&a.name);
        fs::copy(&a.path, &to)
            .map_err(|e| format!("copying {} to {}: {e}", a.path.display(), to.display()))?;
        make_executable(&to)?;
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
        sizes.push(fs::metadata(&to).map(|m| m.len()).unwrap_or(0));
    }

    eprintln!("device-check: compressing (xz -{XZ_PRESET}) ...");
    let archive = dest.join("bin.tar.xz");
    write_tar_xz(&stage, &packed, &archive)?;
    let _ = fs::remove_dir_all(&stage);

    for (name, text) in [("run.sh", RUNNER), ("compare_torch.py", COMPARE_TORCH)] {
        let script = dest.join(name);
        fs::write(&script, text).map_err(|e| format!("writing {}: {e}", script.display()))?;
        make_executable(&script)?;
    }
    let modules = gpu_modules(&root)?;
    let names: Vec<&str> = packed.iter().map(|a| a.name.as_str()).collect();
    let (list, excluded) = manifest_text(&names, &modules, &exclude);
    left_out.extend(excluded);
    fs::write(dest.join("MANIFEST"), list).map_err(|e| format!("writing MANIFEST: {e}"))?;
    if let Some(text) = &candle_record {
        fs::write(dest.join(candle::RECORD), text)
            .map_err(|e| format!("writing {}: {e}", candle::RECORD))?;
    }
    if !not_packed.is_empty() {
        let text: String = not_packed
            .iter()
            .map(|(n, why)| candle::not_packed_line(n, why))
            .collect();
        fs::write(dest.join(candle::NOT_PACKED), text)
            .map_err(|e| format!("writing {}: {e}", candle::NOT_PACKED))?;
    }

    let mib = |b: u64| b as f64 / 1048576.0;
    let pack = dir_size(&dest).map_err(|e| format!("measuring {}: {e}", dest.display()))?;
    let (tree, tree_files) = tree_size(&root)?;
    let raw: u64 = sizes.iter().sum();
    let xz = fs::metadata(&archive).map(|m| m.len()).unwrap_or(0);
    println!(
        "device-check: packed {} binaries into {}",
        packed.len(),
        dest.display()
    );
    for (a, s) in packed.iter().zip(&sizes) {
        println!("  bin/{:<40} {:>8.2} MiB", a.name, mib(*s));
    }
    if !left_out.is_empty() {
        println!(
            "  left out (need the Rust toolchain, or --exclude): {}",
            left_out.join(", ")
        );
    }
    for (n, why) in &not_packed {
        println!("  NOT PACKED {n}: {why}\n    (run.sh reports it as a failure)");
    }
    if let Some(text) = &candle_record {
        let kv: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        println!(
            "  {} ({}): {}",
            candle::ENTRY,
            candle::RECORD,
            kv.join(", ")
        );
    }
    if strip_tool.is_none() && strip {
        println!("  note: `strip` not found; binaries are unstripped");
    }
    let total = pack + tree;
    println!(
        "  binaries {:.2} MiB -> bin.tar.xz {:.2} MiB; the pack {:.2} MiB",
        mib(raw),
        mib(xz),
        mib(pack)
    );
    println!(
        "  the tree that travels with it: {:.2} MiB ({tree_files} files)",
        mib(tree)
    );
    println!(
        "  total {:.2} MiB of the {} MiB one transfer takes (allowed: {} MiB, leaving a {} MiB margin)",
        mib(total),
        TRAVEL_LIMIT >> 20,
        ALLOWED >> 20,
        (TRAVEL_LIMIT - ALLOWED) >> 20
    );
    if total > ALLOWED {
        return Err(format!(
            "device-check: the pack and the tree take {:.2} MiB, over the {} MiB allowed ({} MiB limit less the margin)",
            mib(total),
            ALLOWED >> 20,
            TRAVEL_LIMIT >> 20
        ));
    }
    let budget = runner_default("CHECK_BUDGET_S").unwrap_or(345);
    let limit = budget + RUN_MARGIN_S;
    println!(
        "\nOn the GPU machine: OUT=<dir> bash .device-check/run.sh   (PHASES=tests,torch ... for a rerun)"
    );
    println!(
        "Through a run tool that copies the git working tree (.device-check/ is git-ignored, so name it):\n  \
         run(command=\"bash .device-check/run.sh\", carry=[\".device-check\"], timeout_s={limit})\n  \
         ({budget} s budget + {RUN_MARGIN_S} s: each binary may overrun its limit by its 10 s kill-after, \
         then the report)"
    );
    Ok(())
}

/// MANIFEST: one line per packed binary in `names`' order, the `tests/gpu`
/// binary as one line per module of `modules` (less those `exclude` names
/// as `<module>` or `gpu/<module>`), cudnn-candle's as its
/// [`candle::ENTRIES`] (less those `exclude` names). Returns the text and
/// the modules and entries left out (as `gpu/<module>`, or the entry).
fn manifest_text(names: &[&str], modules: &[String], exclude: &[String]) -> (String, Vec<String>) {
    let mut list = String::from(
        "# The binaries in bin.tar.xz, one a line: run.sh runs or reports every one.\n",
    );
    let mut left_out = Vec::new();
    for name in names {
        if *name == "tests/gpu" {
            for m in modules {
                if exclude.iter().any(|e| *e == *m || *e == format!("gpu/{m}")) {
                    left_out.push(format!("gpu/{m}"));
                    continue;
                }
                list.push_str(&format!("tests/gpu/{m}\n"));
            }
        } else if *name == candle::ENTRY {
            for e in candle::ENTRIES {
                if e != candle::ENTRY && exclude.iter().any(|x| x == e) {
                    left_out.push(e.to_string());
                    continue;
                }
                list.push_str(e);
                list.push('\n');
            }
        } else {
            list.push_str(name);
            list.push('\n');
        }
    }
    (list, left_out)
}

/// The modules of the `gpu` test binary, in its order: the entries of its
/// `main`'s module table (`("name", name::main),`).
fn gpu_modules(root: &Path) -> Result<Vec<String>, String> {
    let path = root.join("cudnn").join("tests").join("gpu").join("main.rs");
    let text = fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let modules = parse_modules(&text);
    if modules.is_empty() {
        return Err(format!("{}: no module table found", path.display()));
    }
    Ok(modules)
}

fn parse_modules(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim().strip_prefix("(\"")?;
            let (name, rest) = l.split_once('"')?;
            let rest = rest.trim_start().strip_prefix(',')?.trim();
            (rest == format!("{name}::main),")).then(|| name.to_string())
        })
        .collect()
}

/// What to add to run.sh's time budget for the limit of whatever runs it:
/// the last binary's 10 s between TERM and KILL, the report and the
/// archive, and room.
const RUN_MARGIN_S: u64 = 75;
// More than run.sh's kill-after (10 s) and its report reserve (8 s).
const _: () = assert!(RUN_MARGIN_S > 10 + 8);

/// The default run.sh gives a variable (`${NAME:-123}`), read from the
/// packed script itself so that the printed limit follows it.
fn runner_default(name: &str) -> Option<u64> {
    let key = format!("${{{name}:-");
    let rest = &RUNNER[RUNNER.find(&key)? + key.len()..];
    rest[..rest.find('}')?].parse().ok()
}

/// `bin/<name>` for every artifact, from `stage/bin/<name>`, as one tar.xz
/// (deterministic headers: no owner, no time).
fn write_tar_xz(stage: &Path, packed: &[Artifact], to: &Path) -> Result<(), String> {
    let file = fs::File::create(to).map_err(|e| format!("creating {}: {e}", to.display()))?;
    let xz = liblzma::write::XzEncoder::new(file, XZ_PRESET);
    let mut tar = tar::Builder::new(xz);
    tar.mode(tar::HeaderMode::Deterministic);
    for a in packed {
        let from = stage.join("bin").join(&a.name);
        tar.append_path_with_name(&from, format!("bin/{}", a.name))
            .map_err(|e| format!("adding {} to {}: {e}", from.display(), to.display()))?;
    }
    let xz = tar
        .into_inner()
        .map_err(|e| format!("finishing {}: {e}", to.display()))?;
    xz.finish()
        .map_err(|e| format!("compressing {}: {e}", to.display()))?;
    Ok(())
}

/// Bytes and count of the files that travel with the pack: what git tracks
/// plus untracked files it does not ignore (`git ls-files --cached
/// --others --exclude-standard`). Without git, every file under the root
/// outside `.git`, `target`, `.cuda-libs` and `.device-check`.
fn tree_size(root: &Path) -> Result<(u64, usize), String> {
    let out = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(root)
        .output();
    if let Some(out) = out.ok().filter(|o| o.status.success()) {
        let mut total = 0;
        let mut n = 0;
        for name in out.stdout.split(|&c| c == 0).filter(|s| !s.is_empty()) {
            let path = root.join(String::from_utf8_lossy(name).as_ref());
            // Deleted but still tracked: nothing travels.
            if let Ok(m) = fs::symlink_metadata(&path) {
                total += m.len();
                n += 1;
            }
        }
        return Ok((total, n));
    }
    let skip = [".git", "target", ".cuda-libs", ".device-check"];
    let mut total = 0;
    let mut n = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = fs::read_dir(&dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
        for e in entries.flatten() {
            let p = e.path();
            if dir == root && skip.iter().any(|s| e.file_name() == *s) {
                continue;
            }
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(p),
                Ok(_) => {
                    total += e.metadata().map(|m| m.len()).unwrap_or(0);
                    n += 1;
                }
                Err(_) => {}
            }
        }
    }
    Ok((total, n))
}

/// Build cudnn-candle's `gpu` test binary (dev profile) with the candle
/// toolkit and the target folder that holds candle's kernels; `Err` is the
/// reason for `NOT_PACKED`.
fn build_candle(root: &Path) -> Result<(PathBuf, candle::Toolkit), String> {
    let tk = candle::toolkit(&crate::fetch::cache_root())?;
    let target = candle::target_dir(
        std::env::var_os("CUDNN_RS_CANDLE_TARGET_DIR"),
        std::env::var_os("CUDNN_RS_CI_CACHE"),
        std::env::var_os("HOME"),
    )
    .ok_or("no target folder for candle: set CUDNN_RS_CANDLE_TARGET_DIR (or HOME)")?;
    eprintln!(
        "device-check: building cudnn-candle's gpu test binary (dev profile, CUDA {}.{} toolkit, target {}){} ...",
        tk.cuda.0,
        tk.cuda.1,
        target.display(),
        if candle::kernels_warm(&target) {
            ""
        } else {
            "; candle's kernels are not built there yet: about 15 minutes"
        }
    );
    let env = candle::build_env(&tk, &target, root);
    let found = cargo_artifacts(
        root,
        &["test", "-p", "cudnn-candle", "--no-run", "--test", "gpu"],
        &env,
    )
    .map_err(|e| format!("its build failed: {e}"))?;
    let path = found
        .into_iter()
        .find(|(name, kind, _)| name == "gpu" && kind == "test")
        .map(|(_, _, p)| p)
        .ok_or("its build gave no `gpu` test executable")?;
    Ok((path, tk))
}

/// Run cargo with `--message-format=json` (and `env` added to its
/// environment) and return `(target name, target kind, executable)` for
/// every artifact with an executable.
fn cargo_artifacts(
    root: &Path,
    args: &[&str],
    env: &[(String, std::ffi::OsString)],
) -> Result<Vec<(String, String, PathBuf)>, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut child = Command::new(&cargo)
        .envs(env.iter().map(|(k, v)| (k, v)))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file of a tier's folder is a module its `main.rs` names (a
    /// file left out would never compile nor run, silently: cargo no longer
    /// finds test files by itself).
    #[test]
    fn every_test_file_is_a_module_of_its_binary() {
        let tests = crate::workspace_root().join("cudnn").join("tests");
        for tier in ["unit", "host", "gpu"] {
            let dir = tests.join(tier);
            let main = fs::read_to_string(dir.join("main.rs")).unwrap();
            let words: std::collections::HashSet<&str> = main
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .collect();
            for e in fs::read_dir(&dir).unwrap() {
                let n = e.unwrap().file_name().into_string().unwrap();
                if let Some(m) = n.strip_suffix(".rs").filter(|m| *m != "main") {
                    assert!(
                        words.contains(m),
                        "cudnn/tests/{tier}/{n} is not a module of tests/{tier}/main.rs"
                    );
                }
            }
        }
    }

    /// The MANIFEST's gpu entries are the module table of the real
    /// `tests/gpu/main.rs`: a module there and not here would never run on
    /// the device.
    #[test]
    fn gpu_modules_are_the_main_table() {
        let text = "    let modules: &[support::Module] = &[\n        (\"conv\", conv::main),\n        (\"cudarc_interop\", cudarc_interop::main),\n        (\"x\", y::main),\n    ];\n";
        assert_eq!(parse_modules(text), ["conv", "cudarc_interop"]);
        let root = crate::workspace_root();
        let modules = gpu_modules(&root).unwrap();
        let dir = root.join("cudnn").join("tests").join("gpu");
        let mut files: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| {
                let n = e.ok()?.file_name().into_string().ok()?;
                let m = n.strip_suffix(".rs")?.to_string();
                (m != "main").then_some(m)
            })
            .collect();
        files.sort();
        let mut sorted = modules.clone();
        sorted.sort();
        assert_eq!(
            sorted, files,
            "tests/gpu/*.rs and main.rs's module table differ"
        );
    }

    /// The printed time limit follows run.sh's own default budget, and
    /// covers it with the kill-after run.sh uses.
    #[test]
    fn unit_runner_defaults_are_read_from_the_script() {
        let budget = runner_default("CHECK_BUDGET_S");
        assert!(budget.is_some_and(|b| b > 60), "{budget:?}");
        assert_eq!(runner_default("PER_BINARY_TIMEOUT"), Some(100));
        assert_eq!(runner_default("NO_SUCH_VARIABLE"), None);
        assert!(
            RUNNER.contains("kill_after=10"),
            "run.sh's kill-after changed"
        );
    }
}
