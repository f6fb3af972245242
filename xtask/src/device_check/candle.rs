//! The `cudnn-candle` part of the device check: its `gpu` test binary,
//! built with the CUDA toolkit of `cargo xtask fetch-libs --stack candle`
//! (candle-core's `cuda` feature compiles its kernels to PTX with that
//! toolkit's `nvcc`), packed as `bin/cudnn-candle/gpu` with one MANIFEST
//! line, and the record `run.sh` checks the device's driver against
//! ([`RECORD`]).
//!
//! The binary is built in the dev profile, in the target folder CI keeps
//! candle's kernels in (`CUDNN_RS_CANDLE_TARGET_DIR`, else
//! `${CUDNN_RS_CI_CACHE:-$HOME/.cache/cudnn-rs-libs}/candle-target-<TAG>`, as
//! `.ci/run`'s candle step): a release build would compile the kernels
//! again (about 15 minutes on two cores). Its environment is `.ci/run`'s
//! `candle_env`, so that cargo finds the kernels it built there; the
//! caller's `CARGO_PROFILE_*` and `CARGO_INCREMENTAL` pass through.
//!
//! Where the toolkit is missing or the build fails, nothing is packed for
//! it and `NOT_PACKED` says why: `run.sh` reports that as a failure
//! (`FAIL (NOT PACKED)`), never a silent skip.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

/// The MANIFEST line, and the path under `bin/` in the pack.
pub const ENTRY: &str = "cudnn-candle/gpu";
/// The MANIFEST lines of the one packed binary, in run order: [`ENTRY`]
/// (every trial but `example_block`), the `candle_transformer_block`
/// example's check alone (its own report row) and `--bench` (its
/// benchmark table, in run.sh's bench phase).
pub const ENTRIES: [&str; 3] = [ENTRY, "cudnn-candle/example_block", "cudnn-candle/bench"];
/// The file in the pack that says how the binary was built (`key=value`
/// lines, read by `run.sh` before it runs it).
pub const RECORD: &str = "CANDLE";
/// The file in the pack listing what could not be packed:
/// `<manifest name>\t<reason>` lines.
pub const NOT_PACKED: &str = "NOT_PACKED";
/// The compute capability candle's kernels are compiled for (`.ci/run`'s
/// `CUDA_COMPUTE_CAP`): PTX for it loads on that and newer GPUs.
pub const COMPUTE_CAP: &str = "90";

/// The fetched toolkit: where it is and which CUDA it is.
#[derive(Debug)]
pub struct Toolkit {
    /// `<cache>/candle-<TAG>/nvidia/cu13`, what `CUDA_HOME` names.
    pub root: PathBuf,
    /// `CUDA_VERSION` of its `cuda.h`: (major, minor).
    pub cuda: (u32, u32),
}

/// The candle toolkit under `cache` (the fetch cache, `.cuda-libs` by
/// default), or why it cannot be used: the reason `NOT_PACKED` gives.
pub fn toolkit(cache: &Path) -> Result<Toolkit, String> {
    let root = cache
        .join(crate::fetch_toolkit::NAME)
        .join("nvidia")
        .join("cu13");
    let fetch =
        "run `cargo xtask fetch-libs --stack candle`, then `cargo xtask device-check` again";
    let nvcc = root.join("bin").join("nvcc");
    if !nvcc.is_file() {
        return Err(format!(
            "the candle CUDA toolkit is not fetched here ({} missing): {fetch}",
            shown(&nvcc)
        ));
    }
    let header = root.join("include").join("cuda.h");
    let text = fs::read_to_string(&header).map_err(|e| {
        format!(
            "the candle CUDA toolkit has no readable {} ({e}): {fetch}",
            shown(&header)
        )
    })?;
    let cuda = parse_cuda_version(&text)
        .ok_or_else(|| format!("no `#define CUDA_VERSION` in {}: {fetch}", shown(&header)))?;
    Ok(Toolkit { root, cuda })
}

/// A path as printed in a reason that travels to the GPU machine: the part
/// from the cache's own folder on (no build machine's prefix).
fn shown(p: &Path) -> String {
    let s = p.display().to_string();
    match s.find(&format!("{}/nvidia/", crate::fetch_toolkit::NAME)) {
        Some(i) => format!("<cache>/{}", &s[i..]),
        None => s,
    }
}

/// `CUDA_VERSION` of a `cuda.h` (`#define CUDA_VERSION 13050`) as
/// (major, minor): (13, 5).
pub fn parse_cuda_version(cuda_h: &str) -> Option<(u32, u32)> {
    let v: u32 = cuda_h.lines().find_map(|l| {
        let rest = l.trim().strip_prefix("#define")?.trim_start();
        rest.strip_prefix("CUDA_VERSION")?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })?;
    (v >= 1000).then_some((v / 1000, v % 1000 / 10))
}

/// The highest `.version X.Y` directive of the PTX embedded in a binary
/// (candle's kernels are PTX strings in it): the PTX ISA the driver must
/// know. `None` when there is none.
pub fn max_ptx_isa(bytes: &[u8]) -> Option<(u32, u32)> {
    const KEY: &[u8] = b"\n.version ";
    let mut best: Option<(u32, u32)> = None;
    let mut i = 0;
    while let Some(off) = find(&bytes[i..], KEY) {
        let at = i + off + KEY.len();
        i = at;
        let tail = &bytes[at..bytes.len().min(at + 8)];
        let end = tail
            .iter()
            .position(|c| !(c.is_ascii_digit() || *c == b'.'))
            .unwrap_or(tail.len());
        let Ok(s) = std::str::from_utf8(&tail[..end]) else {
            continue;
        };
        let Some((ma, mi)) = s.split_once('.') else {
            continue;
        };
        if let (Ok(ma), Ok(mi)) = (ma.parse::<u32>(), mi.parse::<u32>()) {
            best = best.max(Some((ma, mi)));
        }
    }
    best
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The pinned `nvcc` wheel (`nvidia-cuda-nvcc==13.5.37`): recorded beside
/// the version the headers give.
pub fn nvcc_pin() -> &'static str {
    crate::fetch_toolkit::CANDLE
        .iter()
        .find(|s| s.starts_with("nvidia-cuda-nvcc=="))
        .copied()
        .unwrap_or("nvidia-cuda-nvcc (not pinned)")
}

/// The `RECORD` file: what `run.sh` compares the driver with. `toolkit_cuda`
/// is the CUDA version the PTX was made by (a driver runs PTX of its own
/// CUDA version or older); the rest is for the report.
pub fn record_text(cuda: (u32, u32), ptx: Option<(u32, u32)>, nvcc: &str) -> String {
    let ptx = ptx.map_or_else(|| "unknown".to_string(), |(a, b)| format!("{a}.{b}"));
    format!(
        "# {ENTRY}: how it was built; run.sh skips it (a failure) where the\n\
         # driver's CUDA version (nvidia-smi) is older than toolkit_cuda.\n\
         toolkit_cuda={}.{}\n\
         ptx_isa={ptx}\n\
         compute_cap={COMPUTE_CAP}\n\
         nvcc_wheel={nvcc}\n\
         profile=dev\n",
        cuda.0, cuda.1
    )
}

/// With the binary itself excluded (`--exclude cudnn-candle/gpu` or
/// `cudnn-candle`): every MANIFEST line it would have given, all left out
/// with it; else `None`.
pub fn left_out_whole(exclude: &[String]) -> Option<Vec<String>> {
    exclude
        .iter()
        .any(|e| e == ENTRY || e == "cudnn-candle")
        .then(|| ENTRIES.iter().map(|e| e.to_string()).collect())
}

/// One `NOT_PACKED` line: tabs and newlines of the reason become spaces.
pub fn not_packed_line(name: &str, reason: &str) -> String {
    let reason: String = reason
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    format!("{name}\t{}\n", reason.trim())
}

/// The target folder: `CUDNN_RS_CANDLE_TARGET_DIR` if set, else `.ci/run`'s
/// `$cache/candle-target-<TAG>` (`CUDNN_RS_CI_CACHE`, else
/// `$HOME/.cache/cudnn-rs-libs`). `None` without any of them.
pub fn target_dir(
    explicit: Option<OsString>,
    ci_cache: Option<OsString>,
    home: Option<OsString>,
) -> Option<PathBuf> {
    let set = |v: Option<OsString>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(t) = set(explicit) {
        return Some(t);
    }
    let cache =
        set(ci_cache).or_else(|| set(home).map(|h| h.join(".cache").join("cudnn-rs-libs")))?;
    Some(cache.join(crate::fetch_toolkit::TARGET))
}

/// `.ci/run`'s `candle_env`: what the build of candle's `cuda` feature
/// needs, with the target folder that holds its kernels.
pub fn build_env(tk: &Toolkit, target: &Path, root: &Path) -> Vec<(String, OsString)> {
    let t = &tk.root;
    let mut path = OsString::from(t.join("bin"));
    if let Some(p) = std::env::var_os("PATH") {
        path.push(":");
        path.push(p);
    }
    let lib = t.join("lib");
    let stubs = lib.join("stubs");
    let mut ld = OsString::from(&lib);
    ld.push(":");
    ld.push(&stubs);
    vec![
        ("PATH".into(), path),
        ("CUDA_HOME".into(), t.into()),
        (
            "CUDARC_CUDA_VERSION".into(),
            crate::fetch_toolkit::CUDARC_CUDA_VERSION.into(),
        ),
        ("CUDA_COMPUTE_CAP".into(), COMPUTE_CAP.into()),
        ("LIBRARY_PATH".into(), stubs.into()),
        ("LD_LIBRARY_PATH".into(), ld),
        ("CARGO_TARGET_DIR".into(), target.into()),
        (
            "CUDNN_RS_SEARCH_PATH".into(),
            root.join(".cuda-libs").join("cuda13").into(),
        ),
        ("CUDNN_RS_REQUIRE_LIBS".into(), "1".into()),
    ]
}

/// Whether candle's kernels look built in `target` (a `candle-kernels`
/// build-script folder in its dev profile): otherwise the build takes
/// about 15 minutes, which is worth saying before it starts.
pub fn kernels_warm(target: &Path) -> bool {
    fs::read_dir(target.join("debug").join("build"))
        .map(|d| {
            d.flatten().any(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("candle-kernels-")
            })
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_version_from_the_header() {
        let h = "#ifndef CUDA_H\n#define CUDA_H\n/** CUDA API version number */\n#define CUDA_VERSION 13050\n";
        assert_eq!(parse_cuda_version(h), Some((13, 5)));
        assert_eq!(
            parse_cuda_version("#define CUDA_VERSION 12080"),
            Some((12, 8))
        );
        assert_eq!(
            parse_cuda_version("#define CUDA_VERSION 13000\n"),
            Some((13, 0))
        );
        // Not the macro itself, or no number.
        assert_eq!(parse_cuda_version("#define CUDA_VERSION_MAJOR 13"), None);
        assert_eq!(parse_cuda_version("#define CUDA_VERSION\n"), None);
        assert_eq!(parse_cuda_version(""), None);
    }

    /// The fetched toolkit's header, where it is here (the real file).
    #[test]
    fn fetched_toolkit_reads_its_version() {
        let cache = crate::fetch::cache_root();
        match toolkit(&cache) {
            Ok(tk) => assert!(tk.cuda.0 >= 12, "{tk:?}"),
            Err(why) => eprintln!("SKIPPED fetched_toolkit_reads_its_version: {why}"),
        }
    }

    #[test]
    fn missing_toolkit_is_a_reason_naming_the_fetch() {
        let dir = std::env::temp_dir().join(format!("xtask-no-candle-{}", std::process::id()));
        let why = toolkit(&dir).unwrap_err();
        assert!(why.contains("not fetched"), "{why}");
        assert!(why.contains("fetch-libs --stack candle"), "{why}");
        let nvcc = format!(
            "<cache>/{}/nvidia/cu13/bin/nvcc",
            crate::fetch_toolkit::NAME
        );
        assert!(why.contains(&nvcc), "{why}");
        // A line of NOT_PACKED: name, one tab, the reason on one line.
        let line = not_packed_line(ENTRY, &format!("{why}\nsecond\tline"));
        assert!(line.starts_with("cudnn-candle/gpu\tthe candle CUDA toolkit is not fetched"));
        assert_eq!(line.matches('\t').count(), 1, "{line}");
        assert_eq!(line.matches('\n').count(), 1, "{line}");
        assert!(line.ends_with("second line\n"), "{line}");
    }

    #[test]
    fn ptx_isa_is_the_highest_version_directive() {
        let bin = b"\x00junk\n//\n// Generated by NVIDIA NVVM Compiler\n\n.version 9.5\n.target sm_90\n\x00more\n.version 8.7\n.target sm_90\n\x00.version 10.1 (not at a line start)";
        assert_eq!(max_ptx_isa(bin), Some((9, 5)));
        assert_eq!(
            max_ptx_isa(b"\n.version 8.7\n\n.version 12.0"),
            Some((12, 0))
        );
        assert_eq!(max_ptx_isa(b"no ptx here"), None);
        assert_eq!(max_ptx_isa(b"\n.version x"), None);
    }

    #[test]
    fn record_has_what_run_sh_reads() {
        let r = record_text((13, 5), Some((9, 5)), "nvidia-cuda-nvcc==13.5.37");
        for line in [
            "toolkit_cuda=13.5\n",
            "ptx_isa=9.5\n",
            "compute_cap=90\n",
            "nvcc_wheel=nvidia-cuda-nvcc==13.5.37\n",
        ] {
            assert!(r.contains(line), "{line:?} not in {r}");
        }
        assert!(record_text((12, 8), None, "x").contains("ptx_isa=unknown\n"));
        // run.sh reads these keys.
        for key in ["toolkit_cuda", "ptx_isa", "compute_cap", "nvcc_wheel"] {
            assert!(
                super::super::RUNNER.contains(&format!("candle_key {key}")),
                "run.sh does not read {key}"
            );
        }
        assert!(
            nvcc_pin().starts_with("nvidia-cuda-nvcc=="),
            "{}",
            nvcc_pin()
        );
    }

    #[test]
    fn target_dir_follows_ci() {
        let o = |s: &str| Some(OsString::from(s));
        assert_eq!(
            target_dir(o("/t"), o("/ci"), o("/home/u")),
            Some(PathBuf::from("/t"))
        );
        assert_eq!(
            target_dir(None, o("/ci"), o("/home/u")),
            Some(PathBuf::from("/ci").join(crate::fetch_toolkit::TARGET))
        );
        assert_eq!(
            target_dir(o(""), None, o("/home/u")),
            Some(PathBuf::from("/home/u/.cache/cudnn-rs-libs").join(crate::fetch_toolkit::TARGET))
        );
        assert_eq!(target_dir(None, None, None), None);
    }

    /// The build environment is `.ci/run`'s `candle_env` (names and the
    /// fixed values): a difference makes cargo compile candle's kernels
    /// again.
    #[test]
    fn build_env_is_ci_candle_env() {
        let ci = fs::read_to_string(crate::workspace_root().join(".ci").join("run")).unwrap();
        let start = ci.find("candle_env() {").expect("candle_env in .ci/run");
        let body = &ci[start..start + ci[start..].find('}').unwrap()];
        let tk = Toolkit {
            root: PathBuf::from("/c/candle/nvidia/cu13"),
            cuda: (13, 5),
        };
        let env = build_env(&tk, Path::new("/cache/candle-target"), Path::new("/r"));
        for (k, v) in &env {
            assert!(
                body.contains(&format!("{k}=")),
                "{k} is not in .ci/run's candle_env"
            );
            let v = v.to_string_lossy();
            if matches!(
                k.as_str(),
                "CUDARC_CUDA_VERSION" | "CUDA_COMPUTE_CAP" | "CUDNN_RS_REQUIRE_LIBS"
            ) {
                assert!(
                    body.contains(&format!("{k}={v}")),
                    "{k}={v} differs from .ci/run"
                );
            }
        }
        let get = |k: &str| {
            env.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.to_string_lossy().into_owned())
                .unwrap()
        };
        assert_eq!(get("CUDA_HOME"), "/c/candle/nvidia/cu13");
        assert_eq!(get("LIBRARY_PATH"), "/c/candle/nvidia/cu13/lib/stubs");
        assert_eq!(
            get("LD_LIBRARY_PATH"),
            "/c/candle/nvidia/cu13/lib:/c/candle/nvidia/cu13/lib/stubs"
        );
        assert!(get("PATH").starts_with("/c/candle/nvidia/cu13/bin"));
        assert_eq!(get("CARGO_TARGET_DIR"), "/cache/candle-target");
        assert_eq!(get("CUDNN_RS_SEARCH_PATH"), "/r/.cuda-libs/cuda13");
        // .ci/run builds in the folders of the pinned toolkit.
        let tk_line = format!(
            "tk=\"$PWD/.cuda-libs/{}/nvidia/cu13\"",
            crate::fetch_toolkit::NAME
        );
        assert!(ci.contains(&tk_line), "{tk_line} is not in .ci/run");
        let target = format!(
            "CARGO_TARGET_DIR=\"$cache/{}\"",
            crate::fetch_toolkit::TARGET
        );
        assert!(body.contains(&target), "{target} is not in candle_env");
        // Every variable of candle_env is set (none forgotten).
        for k in body
            .split_whitespace()
            .filter_map(|w| w.split_once('=').map(|(k, _)| k))
            .filter(|k| k.chars().all(|c| c.is_ascii_uppercase() || c == '_') && !k.is_empty())
        {
            assert!(
                env.iter().any(|(n, _)| n == k),
                "candle_env's {k} is not set"
            );
        }
    }

    /// The MANIFEST holds the candle binary's three lines after the gpu
    /// modules (run.sh runs them last in its tests phase, the bench in its
    /// bench phase), and run.sh runs each through `run_candle` with its
    /// arguments.
    #[test]
    fn manifest_line_and_its_phase() {
        let modules = vec!["conv".to_string(), "runtime".to_string()];
        let names = ["device_props", "doctor", "tests/gpu", ENTRY];
        let (text, left) = super::super::manifest_text(&names, &modules, &["gpu/runtime".into()]);
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            lines,
            [
                "device_props",
                "doctor",
                "tests/gpu/conv",
                "cudnn-candle/gpu",
                "cudnn-candle/example_block",
                "cudnn-candle/bench"
            ]
        );
        assert_eq!(left, ["gpu/runtime"]);
        // One of them left out by name.
        let (text, left) =
            super::super::manifest_text(&names, &modules, &["cudnn-candle/bench".into()]);
        assert!(!text.contains("cudnn-candle/bench"), "{text}");
        assert!(text.contains("cudnn-candle/example_block\n"), "{text}");
        assert_eq!(left, ["cudnn-candle/bench"]);
        let runner = super::super::RUNNER;
        assert!(runner.contains(
            "cudnn-candle/bench) echo bench ;;\n        tests/* | cudnn-candle/*) echo tests ;;"
        ));
        assert!(
            runner.contains("cudnn-candle/gpu) run_candle \"$1\" \"$2\" --skip example_block ;;")
        );
        assert!(
            runner
                .contains("cudnn-candle/example_block) run_candle \"$1\" \"$2\" example_block ;;")
        );
        assert!(runner.contains("run_candle cudnn-candle/bench 50 --bench --budget-s "));
        assert!(runner.contains(&format!("$here/{RECORD}")));
        assert!(runner.contains(&format!("$here/{NOT_PACKED}")));
    }

    /// The bench's budget, run.sh's own expression on every item limit
    /// it can give (3 s up): at least 1 s and under the limit, so the
    /// bench stops itself before run.sh kills it.
    #[test]
    fn runner_bench_budget_is_under_the_item_limit() {
        let runner = super::super::RUNNER;
        let at = runner
            .find("run_candle cudnn-candle/bench 50 --bench --budget-s \"")
            .expect("the bench line");
        let line = runner[at..].lines().next().unwrap();
        let expr = &line[line.find("\"$((").unwrap() + 1..line.rfind('"').unwrap()];
        let script = format!("for tl in $(seq 3 60); do echo \"$tl {expr}\"; done");
        let out = match std::process::Command::new("bash")
            .arg("-c")
            .arg(&script)
            .output()
        {
            Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
            Err(e) => {
                eprintln!("SKIPPED runner_bench_budget...: no bash here ({e})");
                return;
            }
        };
        let pairs: Vec<(u32, u32)> = out
            .lines()
            .map(|l| {
                let (a, b) = l.split_once(' ').unwrap();
                (a.parse().unwrap(), b.parse().unwrap())
            })
            .collect();
        assert_eq!(pairs.len(), 58, "{out}");
        for (tl, budget) in pairs {
            assert!(budget >= 1 && budget < tl, "limit {tl}: budget {budget}");
        }
    }

    /// Excluding the binary leaves out its three lines, and says so.
    #[test]
    fn excluding_the_binary_lists_all_its_lines() {
        let x = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        for e in [ENTRY, "cudnn-candle"] {
            assert_eq!(
                left_out_whole(&x(&["conv", e])),
                Some(x(&[
                    "cudnn-candle/gpu",
                    "cudnn-candle/example_block",
                    "cudnn-candle/bench"
                ]))
            );
        }
        assert_eq!(left_out_whole(&x(&["cudnn-candle/bench"])), None);
        assert_eq!(left_out_whole(&[]), None);
    }

    /// run.sh's version check, the shipped bash text itself, on cases worked
    /// out by hand.
    #[test]
    fn runner_version_check() {
        let runner = super::super::RUNNER;
        let a = runner.find("# --- candle version check (begin)").unwrap();
        let b = runner.find("# --- candle version check (end)").unwrap();
        let funcs = &runner[a..b];
        let script = format!(
            "{funcs}\n\
             t() {{ version_ge \"$1\" \"$2\"; echo \"$1>=$2:$?\"; }}\n\
             t 13.0 13.5; t 13.5 13.5; t 13.10 13.5; t 14.0 13.5; t 12.9 13.0; t 13 13.0; t 13.0.1 13.0; t 9.0 9.0; t x 13.0\n\
             echo \"smi:$(printf '| NVIDIA-SMI 580.159.04   Driver Version: 580.159.04     CUDA Version: 13.0     |\\n' | driver_cuda_of)\"\n\
             echo \"b1:$(candle_blocker 13.5 13.0 9.0 90)\"\n\
             echo \"b2:$(candle_blocker 13.5 13.5 9.0 90)\"\n\
             echo \"b3:$(candle_blocker 13.0 13.5 10.0 90)\"\n\
             echo \"b4:$(candle_blocker 13.0 13.5 8.9 90)\"\n\
             echo \"b5:$(candle_blocker '' 13.5 9.0 90)\"\n\
             echo \"b6:$(candle_blocker 13.5 '' 9.0 90)\"\n"
        );
        let out = match std::process::Command::new("bash")
            .arg("-c")
            .arg(&script)
            .output()
        {
            Ok(o) => o,
            Err(e) => {
                eprintln!("SKIPPED runner_version_check: no bash here ({e})");
                return;
            }
        };
        let out = String::from_utf8_lossy(&out.stdout).into_owned();
        for want in [
            "13.0>=13.5:1",
            "13.5>=13.5:0",
            "13.10>=13.5:0",
            "14.0>=13.5:0",
            "12.9>=13.0:1",
            "13>=13.0:0",
            "13.0.1>=13.0:0",
            "9.0>=9.0:0",
            "x>=13.0:2",
            "smi:13.0\n",
            "b2:\n",
            "b3:\n",
            "b6:\n",
        ] {
            assert!(out.contains(want), "{want:?} not in:\n{out}");
        }
        let line = |k: &str| out.lines().find(|l| l.starts_with(k)).unwrap().to_string();
        assert!(
            line("b1:").contains("supports CUDA 13.0, older than the CUDA 13.5"),
            "{out}"
        );
        assert!(
            line("b4:").contains("compute capability 8.9 is below the 9.0"),
            "{out}"
        );
        assert!(line("b5:").contains("no CANDLE record"), "{out}");
    }

    /// A pack of stand-ins (shell scripts for device_props, doctor, the
    /// candle binary and nvidia-smi) run through the real run.sh: the
    /// report says why the candle binary did not run, or that it passed.
    struct FakePack {
        dir: PathBuf,
    }

    impl FakePack {
        fn new(tag: &str, candle: bool, not_packed: Option<&str>) -> Self {
            let dir =
                std::env::temp_dir().join(format!("xtask-fake-pack-{tag}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            let stage = dir.join("stage");
            let pack = dir.join("pack");
            for d in [
                stage.join("bin/cudnn-candle"),
                pack.clone(),
                dir.join("smi"),
                dir.join("out"),
            ] {
                fs::create_dir_all(d).unwrap();
            }
            let script = |p: PathBuf, body: &str| {
                fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
                super::super::make_executable(&p).unwrap();
            };
            script(
                stage.join("bin/device_props"),
                "while [ $# -gt 0 ]; do [ \"$1\" = --out ] && echo '{\"fake\":1}' > \"$2\"; shift; done\necho 'device 0: fake'",
            );
            script(stage.join("bin/doctor"), "echo ok");
            // The candle binary's stand-in: a bench table with --bench,
            // else a test summary naming its arguments.
            script(
                stage.join("bin/cudnn-candle/gpu"),
                "echo \"REQUIRE_GPU=$CUDNN_RS_REQUIRE_GPU\"\ncase \" $* \" in\n*\" --bench \"*) printf '# cudnn-candle against candle (ARGS=%s)\\n\\n| op | case |\\n|---|---|\\n| conv2d | N=1 |\\n' \"$*\"\n  case \"$FAKE_BENCH_END\" in\n  crash) kill -SEGV $$ ;;\n  exit*) echo '| attention | B=1 error: panicked |'; exit \"${FAKE_BENCH_END#exit}\" ;;\n  esac\n  printf '\\nbench result: 1 cases run\\n' ;;\n*) [ -n \"$FAKE_SKIP\" ] && echo \"SKIPPED fake::trial: $FAKE_SKIP\" >&2\n  echo \"test result: ok. 3 passed; 0 failed; 0 ignored (ARGS=$*)\" ;;\nesac",
            );
            let mut names = vec!["device_props", "doctor"];
            if candle {
                names.push(ENTRY);
            }
            let arts: Vec<super::super::Artifact> = names
                .iter()
                .map(|n| super::super::Artifact {
                    name: n.to_string(),
                    path: PathBuf::new(),
                })
                .collect();
            super::super::write_tar_xz(&stage, &arts, &pack.join("bin.tar.xz")).unwrap();
            let (manifest, _) = super::super::manifest_text(&names, &[], &[]);
            fs::write(pack.join("MANIFEST"), manifest).unwrap();
            fs::write(pack.join("run.sh"), super::super::RUNNER).unwrap();
            if candle {
                fs::write(
                    pack.join(RECORD),
                    record_text((13, 5), Some((9, 5)), nvcc_pin()),
                )
                .unwrap();
            }
            if let Some(why) = not_packed {
                let lines: String = ENTRIES.iter().map(|e| not_packed_line(e, why)).collect();
                fs::write(pack.join(NOT_PACKED), lines).unwrap();
            }
            FakePack { dir }
        }

        /// Run run.sh (tests phase) with a stand-in nvidia-smi reporting
        /// `cuda`; returns (exit code, report.md).
        fn run(&self, cuda: &str) -> Option<(i32, String)> {
            self.run_phases(cuda, "tests")
        }

        fn run_phases(&self, cuda: &str, phases: &str) -> Option<(i32, String)> {
            self.run_env(cuda, phases, "")
        }

        /// With `FAKE_BENCH_END` set: the bench stand-in's ending after
        /// its first row (`crash`: killed by SIGSEGV; `exitN`: a second
        /// row, then exit N; empty: its summary, exit 0).
        fn run_env(&self, cuda: &str, phases: &str, bench_end: &str) -> Option<(i32, String)> {
            self.run_env_skip(cuda, phases, bench_end, "")
        }

        /// As `run_env`; a non-empty `skip` makes the candle stand-in's test
        /// run print one `SKIPPED` line (its reason) on stderr and pass.
        fn run_env_skip(
            &self,
            cuda: &str,
            phases: &str,
            bench_end: &str,
            skip: &str,
        ) -> Option<(i32, String)> {
            let smi = self.dir.join("smi").join("nvidia-smi");
            fs::write(
                &smi,
                format!(
                    "#!/bin/sh\ncase \"$*\" in\n*compute_cap*) echo 9.0 ;;\n*--query-gpu*) echo 'Fake H200, 580.159.04, 143771 MiB' ;;\n*) echo '| NVIDIA-SMI 580.159.04   Driver Version: 580.159.04     CUDA Version: {cuda}     |' ;;\nesac\n"
                ),
            )
            .unwrap();
            super::super::make_executable(&smi).unwrap();
            let path = format!(
                "{}:{}",
                smi.parent().unwrap().display(),
                std::env::var("PATH").unwrap_or_default()
            );
            let out = self.dir.join("out");
            let st = std::process::Command::new("bash")
                .arg(self.dir.join("pack").join("run.sh"))
                .env("PATH", path)
                .env("OUT", &out)
                .env("PHASES", phases)
                .env("CHECK_BUDGET_S", "60")
                .env("FAKE_BENCH_END", bench_end)
                .env("FAKE_SKIP", skip)
                .output()
                .ok()?;
            let report = fs::read_to_string(out.join("report.md")).ok()?;
            Some((st.status.code().unwrap_or(-1), report))
        }
    }

    impl Drop for FakePack {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }

    fn row<'a>(report: &'a str, name: &str) -> &'a str {
        report
            .lines()
            .find(|l| l.starts_with(&format!("| {name} |")))
            .unwrap_or_else(|| panic!("no row for {name} in:\n{report}"))
    }

    #[test]
    fn runner_skips_candle_on_an_older_driver_and_runs_it_on_a_new_enough_one() {
        if std::process::Command::new("bash")
            .arg("-c")
            .arg("true")
            .status()
            .is_err()
        {
            eprintln!("SKIPPED runner_skips_candle...: no bash here");
            return;
        }
        let pack = FakePack::new("driver", true, None);
        let (rc, report) = pack.run("13.0").expect("run.sh ran and wrote report.md");
        let r = row(&report, ENTRY);
        assert!(r.contains("| tests | FAIL (cannot run) |"), "{r}");
        assert!(
            r.contains("supports CUDA 13.0, older than the CUDA 13.5"),
            "{r}"
        );
        assert_ne!(rc, 0, "a binary that cannot run is a failure");
        assert!(
            report.contains("cudnn-candle: PTX by CUDA 13.5 (ISA 9.5"),
            "{report}"
        );
        let r = row(&report, "cudnn-candle/example_block");
        assert!(r.contains("| tests | FAIL (cannot run) |"), "{r}");
        let (rc, report) = pack.run("13.5").expect("run.sh ran and wrote report.md");
        let r = row(&report, ENTRY);
        assert!(r.contains("| tests | PASS |"), "{r}\n{report}");
        assert!(r.contains("3 passed"), "{r}");
        assert!(r.contains("(ARGS=--skip example_block)"), "{r}");
        let r = row(&report, "cudnn-candle/example_block");
        assert!(r.contains("| tests | PASS |"), "{r}\n{report}");
        assert!(r.contains("(ARGS=example_block)"), "{r}");
        // Its bench phase not selected: skipped, not failed.
        let r = row(&report, "cudnn-candle/bench");
        assert!(r.contains("| bench | SKIP (PHASES) |"), "{r}");
        assert_eq!(rc, 0, "{report}");
    }

    /// A trial that says SKIPPED inside a passing binary is reported as
    /// such (row and headline), never folded silently into the passes.
    #[test]
    fn runner_reports_trials_that_said_skipped() {
        if std::process::Command::new("bash")
            .arg("-c")
            .arg("true")
            .status()
            .is_err()
        {
            eprintln!("SKIPPED runner_reports_trials_that_said_skipped: no bash here");
            return;
        }
        let pack = FakePack::new("inner-skip", true, None);
        let (rc, report) = pack
            .run_env_skip("13.5", "tests", "", "bf16 unsupported")
            .expect("run.sh ran and wrote report.md");
        let r = row(&report, ENTRY);
        assert!(r.contains("| tests | PASS |"), "{r}");
        assert!(
            r.contains("1 trial(s) said SKIPPED, nothing checked in them"),
            "{r}"
        );
        // Both candle rows ran the stand-in, so two SKIPPED lines.
        assert!(
            report.contains("**2 trial(s) inside passing binaries said SKIPPED**"),
            "{report}"
        );
        assert!(report.contains(&format!("{ENTRY}: 1")), "{report}");
        assert_eq!(rc, 0, "a skip inside is no failure: {report}");
        // Without a SKIPPED line: no such line at all.
        let (_, report) = pack.run("13.5").expect("run.sh ran and wrote report.md");
        assert!(!report.contains("said SKIPPED"), "{report}");
    }

    /// The bench line runs in the bench phase with its budget, and its
    /// table lands among the report's benchmark tables.
    #[test]
    fn runner_runs_the_candle_bench_into_the_report() {
        if std::process::Command::new("bash")
            .arg("-c")
            .arg("true")
            .status()
            .is_err()
        {
            eprintln!("SKIPPED runner_runs_the_candle_bench...: no bash here");
            return;
        }
        let pack = FakePack::new("bench", true, None);
        let (_, report) = pack
            .run_phases("13.5", "bench")
            .expect("run.sh ran and wrote report.md");
        let r = row(&report, "cudnn-candle/bench");
        assert!(r.contains("| bench | PASS |"), "{r}\n{report}");
        assert!(r.contains("bench result: 1 cases run"), "{r}");
        let tables = &report[report.find("## Our benchmark tables").expect("the section")..];
        let at = tables.find("### cudnn-candle/bench").expect("its table");
        let t = &tables[at..];
        assert!(
            t.contains("#### cudnn-candle against candle (ARGS=--bench --budget-s "),
            "{t}"
        );
        assert!(t.contains("| conv2d | N=1 |"), "{t}");
        // The tests phase not selected: its candle lines are skipped.
        let r = row(&report, ENTRY);
        assert!(r.contains("SKIP (PHASES)"), "{r}");
    }

    /// A bench that exits non-zero or crashes part-way is a failed row,
    /// and the table it printed so far stays in the report.
    #[test]
    fn runner_reports_a_failing_or_crashing_bench_with_its_partial_table() {
        if std::process::Command::new("bash")
            .arg("-c")
            .arg("true")
            .status()
            .is_err()
        {
            eprintln!("SKIPPED runner_reports_a_failing_or_crashing_bench...: no bash here");
            return;
        }
        let pack = FakePack::new("benchfail", true, None);
        for (end, verdict) in [("exit1", "FAIL (exit 1)"), ("crash", "FAIL (exit 139)")] {
            let (rc, report) = pack
                .run_env("13.5", "bench", end)
                .expect("run.sh ran and wrote report.md");
            let r = row(&report, "cudnn-candle/bench");
            assert!(
                r.contains(&format!("| bench | {verdict} |")),
                "{end}: {r}\n{report}"
            );
            assert_ne!(rc, 0, "{end}: a failed bench fails the check");
            let tables = &report[report.find("## Our benchmark tables").expect("the section")..];
            let t = &tables[tables.find("### cudnn-candle/bench").expect("its table")..];
            assert!(
                t.contains("| conv2d | N=1 |"),
                "{end}: partial table lost:\n{t}"
            );
            if end == "exit1" {
                assert!(t.contains("| attention | B=1 error: panicked |"), "{t}");
            }
            assert!(!t.contains("bench result: 1 cases run"), "{t}");
        }
    }

    #[test]
    fn runner_reports_not_packed_as_a_failure_with_its_reason() {
        if std::process::Command::new("bash")
            .arg("-c")
            .arg("true")
            .status()
            .is_err()
        {
            eprintln!("SKIPPED runner_reports_not_packed...: no bash here");
            return;
        }
        let why = "the candle CUDA toolkit is not fetched here (<cache>/candle/nvidia/cu13/bin/nvcc missing)";
        let pack = FakePack::new("notpacked", false, Some(why));
        let (rc, report) = pack.run("13.5").expect("run.sh ran and wrote report.md");
        // Each in its own phase: the bench line in the bench phase.
        for (e, phase) in ENTRIES.iter().zip(["tests", "tests", "bench"]) {
            let r = row(&report, e);
            assert!(
                r.contains(&format!("| {phase} | FAIL (NOT PACKED) |")),
                "{r}"
            );
            assert!(r.contains(why), "{r}");
        }
        assert!(
            report.contains(&format!("**NOT PACKED** {ENTRY}: {why}")),
            "{report}"
        );
        assert_ne!(rc, 0);
    }
}
