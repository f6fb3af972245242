//! `cargo xtask bench-build [--rounds N] [--profiles debug,release]
//! [--sets default,graph,...]`: what `cudnn` costs a framework to compile,
//! against cudarc (issue 34, "compile only what you use").
//!
//! Every build is clean for the crates measured and warm for everything
//! else: the builds live in a target folder of their own (`bench-build`
//! under the target folder, kept between runs; cudarc's in a folder of its
//! own inside, so that cleaning it leaves the cudarc `cudnn`'s `cudarc`
//! feature uses prebuilt), each measured build is
//! preceded by `cargo clean -p` of the workspace's five published crates
//! (or of `cudarc`), and one unmeasured build of every configuration first
//! builds the dependencies. cudarc is the workspace's version with
//! `default-features = false` and exactly [`CUDARC_FEATURES`] (issue 34's
//! `cudnn,cublas,cublaslt,driver,nccl,f16`, plus `std`, the run-time
//! loading and the CUDA-version selection the workspace gives it; the
//! table's header prints the list), built as the only dependency of a
//! throwaway crate in that folder.
//!
//! A round builds, per profile, cudarc and each set of `cudnn` features
//! alternately (cudarc, set, cudarc, set, ..., cudarc; the order of the
//! sets rotated each round); each set's ratio is to the mean of the two
//! cudarc builds right before and after it, so a load that changes during
//! the round affects both sides of a pair alike. CPU time is user + system
//! of cargo and every process it waited for (rustc, build scripts, the C
//! compiler), from `wait4`'s `rusage`; peak RSS is the largest resident set
//! among them. Builds run with `CARGO_INCREMENTAL=0` and the debug info a
//! framework's build gives its dependencies under cargo's default profiles:
//! full in debug (`CARGO_PROFILE_DEV_DEBUG=true`), none in release
//! (`CARGO_PROFILE_RELEASE_DEBUG=false`), overriding this workspace's own
//! line-table profiles, on both sides. No compiler wrapper (`sccache` would
//! hide work from `wait4` and cache the clean builds). Everything is
//! offline.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The workspace's published crates: what a clean build of `cudnn` rebuilds.
const OURS: &[&str] = &[
    "cudnn-rs",
    "cudnn-rs-sys",
    "cudart-rs-sys",
    "cublas-rs-sys",
    "nccl-rs-sys",
];

/// cudarc's features for the comparison, its defaults off (they add
/// `runtime`, `curand` and `nvrtc`): issue 34's (`cudnn, cublas, cublaslt,
/// driver, nccl, f16`), `std`, and the run-time loading and CUDA-version
/// selection the workspace gives it (no CUDA toolkit is needed to build).
pub const CUDARC_FEATURES: &[&str] = &[
    "std",
    "cudnn",
    "cublas",
    "cublaslt",
    "driver",
    "nccl",
    "f16",
    "fallback-dynamic-loading",
    "cuda-version-from-build-system",
    "fallback-latest",
];

/// One measured build.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cost {
    /// User + system CPU seconds of cargo and its waited-for children.
    pub cpu_s: f64,
    pub wall_s: f64,
    /// The largest resident set among them, in MiB.
    pub rss_mib: f64,
}

/// Seconds from a `timeval`'s fields.
pub fn timeval_secs(sec: i64, usec: i64) -> f64 {
    sec as f64 + usec as f64 / 1e6
}

/// A `rusage`'s cost: CPU from user + system time; Linux reports
/// `ru_maxrss` in KiB.
pub fn cost_of(user: (i64, i64), sys: (i64, i64), maxrss_kib: i64, wall_s: f64) -> Cost {
    Cost {
        cpu_s: timeval_secs(user.0, user.1) + timeval_secs(sys.0, sys.1),
        wall_s,
        rss_mib: maxrss_kib as f64 / 1024.0,
    }
}

/// The median (the mean of the middle two for an even count); `None` for
/// no values.
pub fn median(v: &[f64]) -> Option<f64> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(f64::total_cmp);
    let n = s.len();
    Some(if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    })
}

/// `ours / reference`, where the reference is the mean of the cudarc builds
/// around it; `None` when that mean is not positive.
pub fn paired_ratio(ours: f64, before: f64, after: f64) -> Option<f64> {
    let r = (before + after) / 2.0;
    (r > 0.0).then(|| ours / r)
}

/// One row of the table: a configuration in one profile, over the rounds.
#[derive(Debug, Default)]
pub struct Row {
    pub label: String,
    pub profile: String,
    /// The rounds measured (cudarc's row holds more builds than rounds).
    pub rounds: usize,
    pub costs: Vec<Cost>,
    /// CPU ratio to the paired cudarc builds, one per round (none for
    /// cudarc's own row).
    pub ratios: Vec<f64>,
}

/// The table: per row the medians over the rounds and the paired ratios
/// (median, and the range).
pub fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{:<8} {:<28} {:>6} {:>8} {:>8} {:>9} {:>8} {:>15}\n",
        "profile", "build", "rounds", "CPU s", "wall s", "peak MiB", "CPU/cda", "range"
    ));
    for r in rows {
        let col = |f: fn(&Cost) -> f64| median(&r.costs.iter().map(f).collect::<Vec<_>>());
        let num = |x: Option<f64>, p: usize| x.map_or("-".to_string(), |v| format!("{v:.p$}"));
        let lo = r.ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = r.ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let range = if r.ratios.is_empty() {
            "-".to_string()
        } else {
            format!("{lo:.2}-{hi:.2}")
        };
        out.push_str(&format!(
            "{:<8} {:<28} {:>6} {:>8} {:>8} {:>9} {:>8} {:>15}\n",
            r.profile,
            r.label,
            r.rounds,
            num(col(|c| c.cpu_s), 1),
            num(col(|c| c.wall_s), 1),
            num(col(|c| c.rss_mib), 0),
            num(median(&r.ratios), 2),
            range
        ));
    }
    out
}

/// Run `cmd`, waiting with `wait4` for its resource use.
fn measure(mut cmd: Command, what: &str) -> Result<Cost, String> {
    let t = Instant::now();
    let child = cmd.spawn().map_err(|e| format!("{what}: {e}"))?;
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: all-zero is a valid `rusage` (integers and timevals).
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own child, not yet waited for (`child` is never
    // waited on: dropping a `Child` does not wait); `status` and `ru` are
    // valid for writes for the call.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    let wall = t.elapsed().as_secs_f64();
    drop(child);
    if r != pid {
        return Err(format!(
            "{what}: wait4 failed: {}",
            std::io::Error::last_os_error()
        ));
    }
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        return Err(format!("{what} failed (wait status {status})"));
    }
    Ok(cost_of(
        (ru.ru_utime.tv_sec as i64, ru.ru_utime.tv_usec as i64),
        (ru.ru_stime.tv_sec as i64, ru.ru_stime.tv_usec as i64),
        ru.ru_maxrss as i64,
        wall,
    ))
}

fn cargo(dir: &Path, target: &Path) -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string()));
    c.current_dir(dir)
        .env("CARGO_TARGET_DIR", target)
        .env("CARGO_INCREMENTAL", "0")
        .env("CARGO_PROFILE_DEV_DEBUG", "true")
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_TERM_QUIET", "true");
    for w in [
        "RUSTC_WRAPPER",
        "CARGO_BUILD_RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_BUILD_RUSTC_WORKSPACE_WRAPPER",
    ] {
        c.env_remove(w);
    }
    c
}

fn run_quiet(mut cmd: Command, what: &str) -> Result<(), String> {
    let st = cmd.status().map_err(|e| format!("{what}: {e}"))?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({st})"))
    }
}

/// What one configuration builds: `None` for cudarc, else the features of
/// `cudnn` (`None` inside: the defaults).
#[derive(Clone, Debug)]
enum Build {
    Cudarc,
    Ours(Option<String>),
}

struct Bench {
    root: PathBuf,
    target: PathBuf,
    /// cudarc's own target folder: `cargo clean -p cudarc` there must not
    /// remove the cudarc that `cudnn`'s `cudarc` feature builds on (a
    /// prebuilt dependency of the measured `cudnn` builds).
    cudarc_target: PathBuf,
    probe: PathBuf,
}

impl Bench {
    fn build_cmd(&self, b: &Build, release: bool) -> Command {
        let mut c = match b {
            Build::Cudarc => {
                let mut c = cargo(&self.probe, &self.cudarc_target);
                c.args(["build", "--offline", "-p", "cudarc"]);
                c
            }
            Build::Ours(f) => {
                let mut c = cargo(&self.root, &self.target);
                c.args(["build", "--offline", "-p", "cudnn-rs", "--lib"]);
                if let Some(f) = f {
                    c.arg("--no-default-features");
                    if !f.is_empty() {
                        c.args(["--features", f]);
                    }
                }
                c
            }
        };
        if release {
            c.arg("--release");
        }
        c
    }

    fn clean(&self, b: &Build, release: bool) -> Result<(), String> {
        let mut c = match b {
            Build::Cudarc => {
                let mut c = cargo(&self.probe, &self.cudarc_target);
                c.args(["clean", "--offline", "-p", "cudarc"]);
                c
            }
            Build::Ours(_) => {
                let mut c = cargo(&self.root, &self.target);
                c.args(["clean", "--offline"]);
                for p in OURS {
                    c.args(["-p", p]);
                }
                c
            }
        };
        if release {
            c.arg("--release");
        }
        run_quiet(c, "cargo clean")
    }

    fn measure(&self, b: &Build, release: bool) -> Result<Cost, String> {
        self.clean(b, release)?;
        measure(self.build_cmd(b, release), &format!("{b:?} build"))
    }

    /// The throwaway crate whose one dependency is cudarc, with the
    /// workspace's lock file (so the same cudarc version, offline).
    fn write_probe(&self) -> Result<(), String> {
        let src = self.probe.join("src");
        std::fs::create_dir_all(&src).map_err(|e| format!("{}: {e}", src.display()))?;
        let manifest = probe_manifest(&cudarc_version(&self.root)?);
        let write = |p: PathBuf, t: &str| {
            std::fs::write(&p, t).map_err(|e| format!("{}: {e}", p.display()))
        };
        write(self.probe.join("Cargo.toml"), &manifest)?;
        write(src.join("lib.rs"), "")?;
        let lock = self.root.join("Cargo.lock");
        std::fs::copy(&lock, self.probe.join("Cargo.lock"))
            .map_err(|e| format!("{}: {e}", lock.display()))?;
        Ok(())
    }
}

/// The throwaway crate's manifest: cudarc at exactly `version`, its
/// defaults off, [`CUDARC_FEATURES`] on.
pub fn probe_manifest(version: &str) -> String {
    let feats: Vec<String> = CUDARC_FEATURES.iter().map(|f| format!("\"{f}\"")).collect();
    format!(
        "[package]\nname = \"cudarc-probe\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n\
         [dependencies]\ncudarc = {{ version = \"={version}\", default-features = false, features = [{}] }}\n\n\
         [workspace]\n",
        feats.join(", ")
    )
}

/// The cudarc version the workspace's lock file holds.
fn cudarc_version(root: &Path) -> Result<String, String> {
    let lock =
        std::fs::read_to_string(root.join("Cargo.lock")).map_err(|e| format!("Cargo.lock: {e}"))?;
    lock_version(&lock, "cudarc").ok_or_else(|| "Cargo.lock holds no cudarc".to_string())
}

/// The version of `name` in a lock file's text.
pub fn lock_version(lock: &str, name: &str) -> Option<String> {
    let want = format!("name = \"{name}\"");
    let mut lines = lock.lines();
    while let Some(l) = lines.next() {
        if l.trim() == want {
            let v = lines.next()?.trim();
            return v
                .strip_prefix("version = \"")
                .and_then(|v| v.strip_suffix('"'))
                .map(str::to_string);
        }
    }
    None
}

fn label(b: &Build) -> String {
    match b {
        Build::Cudarc => "cudarc (no defaults)".to_string(),
        Build::Ours(None) => "cudnn default".to_string(),
        Build::Ours(Some(f)) if f.is_empty() => "cudnn none".to_string(),
        Build::Ours(Some(f)) if *f == crate::features::PARTS.join(",") => "cudnn all".to_string(),
        Build::Ours(Some(f)) => format!("cudnn {f}"),
    }
}

fn parse_set(s: &str) -> Build {
    match s {
        "default" => Build::Ours(None),
        "none" => Build::Ours(Some(String::new())),
        "all" => Build::Ours(Some(crate::features::PARTS.join(","))),
        f => Build::Ours(Some(f.replace('+', ","))),
    }
}

pub fn run(args: &[String]) -> Result<(), String> {
    let mut rounds = 3usize;
    let mut profiles = vec!["debug".to_string(), "release".to_string()];
    let mut sets: Vec<String> = [
        "default",
        "all",
        "dnn",
        "graph",
        "blas",
        "reference",
        "nccl",
        "cudarc",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("bench-build: {a} needs a value"))
        };
        match a.as_str() {
            "--rounds" => {
                let v = val()?;
                rounds = v.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                    format!("bench-build: --rounds must be a count above 0 (got `{v}`)")
                })?;
            }
            "--profiles" => {
                profiles = val()?.split(',').map(str::to_string).collect();
                if let Some(p) = profiles.iter().find(|p| *p != "debug" && *p != "release") {
                    return Err(format!(
                        "bench-build: --profiles takes debug and release (got `{p}`)"
                    ));
                }
            }
            "--sets" => sets = val()?.split(',').map(str::to_string).collect(),
            other => return Err(format!("bench-build: unknown argument `{other}`")),
        }
    }
    let root = crate::workspace_root();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
        .join("bench-build");
    let bench = Bench {
        probe: target.join("cudarc-probe"),
        cudarc_target: target.join("cudarc-target"),
        root,
        target,
    };
    bench.write_probe()?;
    let builds: Vec<Build> = sets.iter().map(|s| parse_set(s)).collect();

    let mut rows: Vec<Row> = Vec::new();
    for p in &profiles {
        let release = p == "release";
        eprintln!("bench-build: {p}: building the dependencies once (not measured) ...");
        for b in std::iter::once(&Build::Cudarc).chain(&builds) {
            run_quiet(
                bench.build_cmd(b, release),
                &format!("warm-up {}", label(b)),
            )?;
        }
        rows.push(Row {
            label: label(&Build::Cudarc),
            profile: p.clone(),
            ..Row::default()
        });
        for b in &builds {
            rows.push(Row {
                label: label(b),
                profile: p.clone(),
                ..Row::default()
            });
        }
    }
    for round in 0..rounds {
        for (pi, p) in profiles.iter().enumerate() {
            let release = p == "release";
            let base = pi * (builds.len() + 1);
            rows[base].rounds += 1;
            let mut before = bench.measure(&Build::Cudarc, release)?;
            rows[base].costs.push(before);
            for k in 0..builds.len() {
                let i = (k + round) % builds.len();
                let c = bench.measure(&builds[i], release)?;
                let after = bench.measure(&Build::Cudarc, release)?;
                eprintln!(
                    "bench-build: round {} {p} {:<28} cpu {:>6.1} s wall {:>6.1} s rss {:>5.0} MiB; cudarc cpu {:.1} / {:.1} s (before / after)",
                    round + 1,
                    label(&builds[i]),
                    c.cpu_s,
                    c.wall_s,
                    c.rss_mib,
                    before.cpu_s,
                    after.cpu_s
                );
                rows[base].costs.push(after);
                let row = &mut rows[base + 1 + i];
                row.rounds += 1;
                row.costs.push(c);
                if let Some(r) = paired_ratio(c.cpu_s, before.cpu_s, after.cpu_s) {
                    row.ratios.push(r);
                }
                before = after;
            }
        }
    }
    println!(
        "bench-build: clean builds (the five crates, or cudarc; dependencies prebuilt), {rounds} round(s); \
         medians; CPU/cda = CPU time / the mean of the cudarc builds right before and after (median, range)"
    );
    println!(
        "bench-build: cudarc {} with default-features = false, features {}; debug info: full in debug, none in release",
        cudarc_version(&bench.root)?,
        CUDARC_FEATURES.join(",")
    );
    print!("{}", table(&rows));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rusage_fields_become_seconds_and_mib() {
        // 12.5 s user + 1.25 s system; 2 GiB = 2097152 KiB.
        let c = cost_of((12, 500_000), (1, 250_000), 2_097_152, 9.0);
        assert_eq!(c.cpu_s, 13.75);
        assert_eq!(c.rss_mib, 2048.0);
        assert_eq!(c.wall_s, 9.0);
        assert_eq!(timeval_secs(0, 1), 1e-6);
    }

    #[test]
    fn median_and_paired_ratio_by_hand() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[f64::NAN, 5.0]), Some(5.0));
        // 15 s against cudarc's 18 s and 22 s (mean 20 s): 0.75.
        assert_eq!(paired_ratio(15.0, 18.0, 22.0), Some(0.75));
        assert_eq!(paired_ratio(15.0, 0.0, 0.0), None);
    }

    #[test]
    fn the_table_shows_medians_and_the_ratio_range() {
        let cost = |cpu| Cost {
            cpu_s: cpu,
            wall_s: cpu / 2.0,
            rss_mib: 100.0,
        };
        let rows = [Row {
            label: "cudnn graph".into(),
            profile: "debug".into(),
            rounds: 3,
            costs: vec![cost(10.0), cost(12.0), cost(30.0)],
            ratios: vec![0.5, 0.4, 0.6],
        }];
        let t = table(&rows);
        let line = t.lines().nth(1).expect("a row");
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            cols,
            [
                "debug",
                "cudnn",
                "graph",
                "3",
                "12.0",
                "6.0",
                "100",
                "0.50",
                "0.40-0.60"
            ]
        );
    }

    #[test]
    fn cudarc_is_built_without_its_defaults() {
        // cudarc 0.19.10's defaults: std, cublas, cublaslt, curand, driver,
        // runtime, nvrtc, fallback-dynamic-loading. Issue 34 names cudnn,
        // cublas, cublaslt, driver, nccl, f16; runtime, curand and nvrtc
        // must not be built.
        let m = probe_manifest("0.19.10");
        let dep = m
            .lines()
            .find(|l| l.starts_with("cudarc = "))
            .expect("a cudarc line");
        assert!(dep.contains("version = \"=0.19.10\""), "{dep}");
        assert!(dep.contains("default-features = false"), "{dep}");
        for f in [
            "cudnn", "cublas", "cublaslt", "driver", "nccl", "f16", "std",
        ] {
            assert!(dep.contains(&format!("\"{f}\"")), "{f} missing: {dep}");
        }
        for f in ["runtime", "curand", "nvrtc"] {
            assert!(!dep.contains(&format!("\"{f}\"")), "{f} on: {dep}");
        }
    }

    #[test]
    fn the_cudarc_row_counts_rounds_not_builds() {
        let cost = Cost {
            cpu_s: 1.0,
            wall_s: 1.0,
            rss_mib: 1.0,
        };
        // Two rounds of two sets: three cudarc builds per round.
        let rows = [Row {
            label: "cudarc".into(),
            profile: "debug".into(),
            rounds: 2,
            costs: vec![cost; 6],
            ratios: vec![],
        }];
        let t = table(&rows);
        let cols: Vec<&str> = t
            .lines()
            .nth(1)
            .expect("a row")
            .split_whitespace()
            .collect();
        assert_eq!(cols[2], "2");
    }

    #[test]
    fn the_lock_files_cudarc_version() {
        let lock = "[[package]]\nname = \"cudarc\"\nversion = \"0.19.10\"\nsource = \"x\"\n";
        assert_eq!(lock_version(lock, "cudarc").as_deref(), Some("0.19.10"));
        assert_eq!(lock_version(lock, "half"), None);
    }
}
