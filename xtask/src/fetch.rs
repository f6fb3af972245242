//! `cargo xtask fetch-libs`: NVIDIA's wheels into the project's library cache.

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One set of wheels that belong together, pinned to exact versions so that a
/// drift check compares like with like.
pub struct Stack {
    pub name: &'static str,
    pub wheels: &'static [&'static str],
    /// Wheels unpacked on top of `wheels`, each with its own stamp
    /// (`.complete-<name>`): adding one (NCCL) neither unpacks the others
    /// again nor changes the stamp the other crates' bindings carry.
    pub extras: &'static [&'static str],
}

/// NCCL for the CUDA 13 stack.
pub const NCCL13: &str = "nvidia-nccl-cu13==2.32.3";
/// NCCL for the CUDA 12 stack (the same NCCL release, built for CUDA 12).
pub const NCCL12: &str = "nvidia-nccl-cu12==2.32.3";

pub const CUDA13: Stack = Stack {
    name: "cuda13",
    wheels: &[
        "nvidia-cudnn-cu13==9.28.1.4",
        "nvidia-cublas==13.10.0.20",
        "nvidia-cuda-runtime==13.5.37",
        "nvidia-cuda-crt==13.5.37",
        "nvidia-cuda-cccl==13.3.5.0.6",
    ],
    extras: &[NCCL13],
};

pub const CUDA12: Stack = Stack {
    name: "cuda12",
    wheels: &[
        "nvidia-cudnn-cu12==8.9.7.29",
        "nvidia-cublas-cu12==12.9.3.13",
        "nvidia-cuda-runtime-cu12==12.9.79",
    ],
    extras: &[NCCL12],
};

/// cuDNN 9.10 (no SDPA operation: attention is the composite pattern) with
/// the NVRTC its runtime-compiled engines need; searched before `cuda12`,
/// whose cuBLAS and CUDA runtime it uses.
pub const CUDNN910: Stack = Stack {
    name: "cudnn910",
    wheels: &[
        "nvidia-cudnn-cu12==9.10.2.21",
        "nvidia-cuda-nvrtc-cu12==12.9.86",
    ],
    extras: &[],
};

/// The GPU machine's stack: exactly what PyTorch 2.11.0 (the CUDA 13.0
/// build) pins in its metadata: cuDNN 9.19, cuBLAS 13.1, the CUDA 13.0
/// runtime, NVRTC 13.0 with its nvJitLink, and NCCL 2.28. What `run.sh`
/// loads there is what CI tests here.
pub const TORCH211: Stack = Stack {
    name: "torch211",
    wheels: &[
        "nvidia-cudnn-cu13==9.19.0.56",
        "nvidia-cublas==13.1.0.3",
        "nvidia-cuda-runtime==13.0.96",
        "nvidia-cuda-nvrtc==13.0.88",
        "nvidia-nvjitlink==13.0.88",
    ],
    extras: &["nvidia-nccl-cu13==2.28.9"],
};

/// Every stack, in the order `--stack all` fetches them.
pub const ALL: [&Stack; 4] = [&CUDA13, &CUDA12, &CUDNN910, &TORCH211];

/// The cache root: `$CUDNN_RS_CACHE` or `<workspace>/.cuda-libs`.
pub fn cache_root() -> PathBuf {
    match std::env::var_os("CUDNN_RS_CACHE") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => crate::workspace_root().join(".cuda-libs"),
    }
}

pub fn run(args: &[String]) -> Result<Vec<PathBuf>, String> {
    let mut stacks = vec![&CUDA13];
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--stack" => {
                stacks = match it.next().map(String::as_str) {
                    Some("cuda13") => vec![&CUDA13],
                    Some("cuda12") => vec![&CUDA12],
                    Some("cudnn910") => vec![&CUDNN910],
                    Some("torch211") => vec![&TORCH211],
                    Some("all") => ALL.to_vec(),
                    Some("candle") => {
                        // The toolkit candle's `cuda` feature builds with
                        // (not a library stack of the crate's tests).
                        let toolkit = crate::fetch_toolkit::fetch()?;
                        println!(
                            "candle ({}): CUDA toolkit and driver stub in {}",
                            crate::fetch_toolkit::TAG,
                            toolkit.display()
                        );
                        println!("  to build cudnn-candle, export:");
                        for l in crate::fetch_toolkit::env_lines(&toolkit) {
                            println!("    {l}");
                        }
                        return Ok(vec![toolkit]);
                    }
                    other => {
                        return Err(format!(
                            "--stack takes cuda13, cuda12, cudnn910, torch211, all or candle, got {other:?}"
                        ));
                    }
                }
            }
            other => return Err(format!("fetch-libs: unknown option `{other}`")),
        }
    }
    let with_frontend = stacks.iter().any(|s| s.name == CUDA13.name);
    let mut dirs = Vec::new();
    for stack in stacks {
        let dir = fetch(stack)?;
        println!("{}: libraries and headers in {}", stack.name, dir.display());
        println!(
            "  to use them from anywhere: export CUDNN_RS_SEARCH_PATH={}",
            dir.display()
        );
        dirs.push(dir);
    }
    if with_frontend {
        // The conformance tier's oracle, for the cuda13 stack's cuDNN.
        let dir = fetch_frontend()?;
        println!(
            "frontend: {FRONTEND} and the driver stub in {}",
            dir.display()
        );
    }
    Ok(dirs)
}

/// Fetch one stack; returns its folder (laid out like a Python site-packages
/// folder: `nvidia/<package>/{include,lib}`).
pub fn fetch(stack: &Stack) -> Result<PathBuf, String> {
    let root = cache_root();
    let dir = root.join(stack.name);
    let wheels = root.join("wheels").join(stack.name);
    let stamp = dir.join(".complete");
    let want = stack.wheels.join("\n");
    if fs::read_to_string(&stamp).ok().as_deref() != Some(want.as_str()) {
        fs::create_dir_all(&wheels).map_err(|e| format!("creating {}: {e}", wheels.display()))?;
        if dir.exists() {
            fs::remove_dir_all(&dir).map_err(|e| format!("clearing {}: {e}", dir.display()))?;
        }
        fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        for spec in stack.wheels {
            unpack_wheel(&wheels, spec, &dir)?;
        }
        fs::write(&stamp, want).map_err(|e| format!("writing {}: {e}", stamp.display()))?;
    }
    for spec in stack.extras {
        let name = spec.split_once("==").map_or(*spec, |(n, _)| n);
        let stamp = dir.join(format!(".complete-{name}"));
        if fs::read_to_string(&stamp).ok().as_deref() == Some(*spec) {
            continue;
        }
        fs::create_dir_all(&wheels).map_err(|e| format!("creating {}: {e}", wheels.display()))?;
        unpack_wheel(&wheels, spec, &dir)?;
        fs::write(&stamp, spec).map_err(|e| format!("writing {}: {e}", stamp.display()))?;
    }
    Ok(dir)
}

/// The wheel file of `spec` in `wheels`, downloaded first unless it is there.
pub(crate) fn wheel_file(wheels: &Path, spec: &str) -> Result<PathBuf, String> {
    match find_wheel(wheels, spec) {
        Some(f) => Ok(f),
        None => {
            download(wheels, spec)?;
            find_wheel(wheels, spec).ok_or_else(|| {
                format!(
                    "pip reported success but no wheel for {spec} is in {}",
                    wheels.display()
                )
            })
        }
    }
}

/// Download `spec` into `wheels` unless it is there, and unpack what we keep into `dir`.
fn unpack_wheel(wheels: &Path, spec: &str, dir: &Path) -> Result<(), String> {
    let file = wheel_file(wheels, spec)?;
    let n = unpack(&file, dir).map_err(|e| format!("unpacking {}: {e}", file.display()))?;
    eprintln!("  {spec}: {n} files");
    Ok(())
}

fn download(into: &Path, spec: &str) -> Result<(), String> {
    eprintln!("downloading {spec} ...");
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_string());
    let status = Command::new(&python)
        .args([
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "-d",
        ])
        .arg(into)
        .arg(spec)
        .status()
        .map_err(|e| {
            format!("running `{python} -m pip`: {e} (set PYTHON to a Python 3 with pip)")
        })?;
    if !status.success() {
        return Err(format!(
            "`{python} -m pip download {spec}` failed ({status})"
        ));
    }
    Ok(())
}

/// The wheel file for `name==version`, if already downloaded.
fn find_wheel(dir: &Path, spec: &str) -> Option<PathBuf> {
    let (name, version) = spec.split_once("==")?;
    let prefix = format!("{}-{}-", name.replace('-', "_"), version);
    let mut found: Vec<PathBuf> = fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".whl"))
        })
        .collect();
    found.sort();
    found.pop()
}

/// What we keep from a wheel: headers, and the shared libraries we load.
fn wanted(path: &str) -> bool {
    if !path.starts_with("nvidia/") || path.ends_with('/') {
        return false;
    }
    if path.contains("/include/") {
        return path.ends_with(".h") || path.ends_with(".hpp") || !path.contains('.');
    }
    let Some(file) = path
        .strip_prefix("nvidia/")
        .and_then(|p| p.rsplit('/').next())
    else {
        return false;
    };
    path.contains("/lib/")
        && file.contains(".so")
        && [
            "libcudnn",
            "libcublas.so",
            "libcublasLt.so",
            "libcudart.so",
            "libnccl.so",
            "libnvrtc.so",
            "libnvrtc-builtins.so",
            "libnvJitLink.so",
        ]
        .iter()
        .any(|p| file.starts_with(p))
}

fn unpack(wheel: &Path, dest: &Path) -> io::Result<usize> {
    let file = fs::File::open(wheel)?;
    let mut zip = zip::ZipArchive::new(file).map_err(io::Error::other)?;
    let mut count = 0;
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).map_err(io::Error::other)?;
        let name = entry.name().to_string();
        if !wanted(&name) || name.contains("..") {
            continue;
        }
        let out = dest.join(&name);
        if let Some(parent) = out.parent() {
            fs::create_dir_all(parent)?;
        }
        let mut bytes = Vec::with_capacity(entry.size() as usize);
        entry.read_to_end(&mut bytes)?;
        fs::write(&out, bytes)?;
        count += 1;
    }
    Ok(count)
}

/// NVIDIA's cuDNN frontend (its Python API and compiled graph), the
/// conformance tier's oracle; pinned.
pub const FRONTEND: &str = "nvidia-cudnn-frontend==1.32.0";

/// The conformance tier's frontend folder (`<cache>/frontend`): `site/`
/// (the frontend wheel installed there with `pip install --target`, its
/// optional dependencies not: the graph API needs none; no system package
/// touched), `stub/libcuda.so.1` (the crate's driver stub compiled with the
/// system C compiler, as the crate's build script does, so the frontend's
/// process can load it by path as its `libcuda.so.1`) and `python` (the
/// interpreter the wheel was installed for). Rebuilt when the pin, the
/// interpreter or the stub's source changes.
pub fn fetch_frontend() -> Result<PathBuf, String> {
    let root = cache_root();
    let dir = root.join("frontend");
    let wheels = root.join("wheels").join("frontend");
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_string());
    let exe = Command::new(&python)
        .args([
            "-c",
            "import sys; print(sys.executable); print(sys.version.split()[0])",
        ])
        .output()
        .map_err(|e| {
            format!(
                "running `{python}`: {e} (the conformance tier needs Python 3 with pip; set PYTHON)"
            )
        })?;
    if !exe.status.success() {
        return Err(format!("`{python}` failed ({})", exe.status));
    }
    let exe = String::from_utf8_lossy(&exe.stdout).to_string();
    let exe_path = exe.lines().next().unwrap_or("").trim().to_string();
    let stub_src = crate::workspace_root()
        .join("cudnn")
        .join("stub")
        .join("libcuda_stub.c");
    let stub_text = fs::read_to_string(&stub_src)
        .map_err(|e| format!("reading {}: {e}", stub_src.display()))?;
    let want = format!("{FRONTEND}\n{exe}{}\n", fnv(stub_text.as_bytes()));
    let stamp = dir.join(".complete");
    if fs::read_to_string(&stamp).ok().as_deref() == Some(want.as_str()) {
        return Ok(dir);
    }
    if dir.exists() {
        fs::remove_dir_all(&dir).map_err(|e| format!("clearing {}: {e}", dir.display()))?;
    }
    let site = dir.join("site");
    let stub_dir = dir.join("stub");
    fs::create_dir_all(&stub_dir).map_err(|e| format!("creating {}: {e}", stub_dir.display()))?;
    fs::create_dir_all(&wheels).map_err(|e| format!("creating {}: {e}", wheels.display()))?;
    eprintln!("downloading {FRONTEND} (for {}) ...", exe_path);
    let st = Command::new(&exe_path)
        .args([
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "-d",
        ])
        .arg(&wheels)
        .arg(FRONTEND)
        .status()
        .map_err(|e| format!("running `{exe_path} -m pip`: {e}"))?;
    if !st.success() {
        return Err(format!(
            "`{exe_path} -m pip download {FRONTEND}` failed ({st})"
        ));
    }
    // The wheel for this interpreter (the frontend's wheels are per CPython).
    let st = Command::new(&exe_path)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--disable-pip-version-check",
            "--find-links",
        ])
        .arg(&wheels)
        .arg("--target")
        .arg(&site)
        .arg(FRONTEND)
        .env("PIP_ROOT_USER_ACTION", "ignore")
        .status()
        .map_err(|e| format!("running `{exe_path} -m pip install`: {e}"))?;
    if !st.success() {
        return Err(format!(
            "`{exe_path} -m pip install --target {} {FRONTEND}` failed ({st})",
            site.display()
        ));
    }
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let lib = stub_dir.join("libcuda.so.1");
    let st = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O2", "-Wl,-soname,libcuda.so.1", "-o"])
        .arg(&lib)
        .arg(&stub_src)
        .status()
        .map_err(|e| format!("running the C compiler `{cc}` for the driver stub: {e} (set CC)"))?;
    if !st.success() {
        return Err(format!(
            "compiling the driver stub with `{cc}` failed ({st})"
        ));
    }
    fs::write(dir.join("python"), format!("{exe_path}\n"))
        .map_err(|e| format!("writing {}: {e}", dir.join("python").display()))?;
    fs::write(&stamp, want).map_err(|e| format!("writing {}: {e}", stamp.display()))?;
    eprintln!("  {FRONTEND}: in {}", site.display());
    Ok(dir)
}

/// FNV-1a of `bytes` (a stamp, not a security check).
pub(crate) fn fnv(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}
