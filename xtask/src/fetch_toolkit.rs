//! `cargo xtask fetch-libs --stack candle`: the CUDA toolkit that
//! candle-core's `cuda` feature builds with (its kernels are compiled by
//! `nvcc` at build time, and cudarc links the CUDA libraries), made of
//! NVIDIA's pip wheels alone, plus a link-time stand-in for the driver
//! library (`libcuda.so`) for machines without a GPU driver.
//!
//! The tree is `<cache>/candle-<TAG>/nvidia/cu13/{bin,nvvm,include,lib}`: every
//! file of the wheels under `nvidia/` with its execute bits, the
//! unversioned library names the linker looks for (`libcublas.so` ->
//! `libcublas.so.13`, ...), and `lib/stubs/libcuda.so{,.1}`: a shared
//! library with soname `libcuda.so.1`: the crate's planning stub
//! (`cudnn/stub/libcuda_stub.c`) plus every other `cu*` entry point of the
//! cudarc version in `Cargo.lock` (read from its source in cargo's
//! registry), each refusing with `CUDA_ERROR_STUB_LIBRARY` (34). It lets
//! the program link and start, and plan, without a driver; on a machine
//! with a driver the stub folder must not be on the library path (the real
//! `libcuda.so.1` is found instead).
//! Nothing of NVIDIA's is in the repository: the wheels are downloaded and
//! unpacked into the cache, the stub is generated.

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The wheels, pinned: nvcc and the front end's `cicc` (nvvm), the headers
/// `nvcc` includes (crt, runtime, cccl: candle's reductions include cub and
/// `cuda/std`), and the libraries cudarc links for candle (cudart, nvrtc,
/// cublas/cublasLt, curand). Pinned to CUDA 13.0 (PTX ISA 9.0): a driver
/// loads PTX of its own CUDA version or older, and the GPU machine's driver
/// (580) is CUDA 13.0, where the 13.5 wheels' PTX 9.5 does not load.
/// Changing the pin changes [`TAG`], so the toolkit folder and CI's target
/// folder (which holds candle's compiled kernels) change with it: nothing
/// built by another toolkit is reused.
pub const CANDLE: &[&str] = &[
    "nvidia-cuda-nvcc==13.0.88",
    "nvidia-nvvm==13.0.88",
    "nvidia-cuda-crt==13.0.88",
    "nvidia-cuda-runtime==13.0.88",
    "nvidia-cuda-cccl==13.0.85",
    "nvidia-cuda-nvrtc==13.0.88",
    "nvidia-cublas==13.0.2.14",
    "nvidia-curand==10.4.0.35",
];

/// The CUDA version of the pin, as cudarc's build script spells it (it
/// would read it from `nvcc --version` too; set, the build does not depend
/// on which `nvcc` comes first on `PATH`).
pub const CUDARC_CUDA_VERSION: &str = "13000";

/// The pin's short name, spelled once (the consts below are made from it).
macro_rules! tag {
    () => {
        "cu130"
    };
}

/// The pin's short name: part of the toolkit's folder and of the target
/// folder candle's kernels are cached in (`.ci/run` spells both out).
pub const TAG: &str = tag!();

/// The stack's folder name in the cache (`candle-<TAG>`).
pub const NAME: &str = concat!("candle-", tag!());

/// The target folder candle's kernels are built in, under CI's cache
/// (`candle-target-<TAG>`).
pub const TARGET: &str = concat!("candle-target-", tag!());

/// Fetch the toolkit (a no-op when the stamp says it is complete); returns
/// the toolkit root (`.../candle-<TAG>/nvidia/cu13`, what `CUDA_HOME` names).
pub fn fetch() -> Result<PathBuf, String> {
    let root = crate::fetch::cache_root();
    let dir = root.join(NAME);
    let wheels = root.join("wheels").join(NAME);
    let toolkit = dir.join("nvidia").join("cu13");
    let stub_c = stub_source()?;
    let want = format!(
        "{}\nstub {}\n",
        CANDLE.join("\n"),
        crate::fetch::fnv(stub_c.as_bytes())
    );
    let stamp = dir.join(".complete");
    if fs::read_to_string(&stamp).ok().as_deref() == Some(want.as_str()) {
        return Ok(toolkit);
    }
    if dir.exists() {
        fs::remove_dir_all(&dir).map_err(|e| format!("clearing {}: {e}", dir.display()))?;
    }
    fs::create_dir_all(&wheels).map_err(|e| format!("creating {}: {e}", wheels.display()))?;
    for spec in CANDLE {
        let file = crate::fetch::wheel_file(&wheels, spec)?;
        let n =
            unpack_all(&file, &dir).map_err(|e| format!("unpacking {}: {e}", file.display()))?;
        eprintln!("  {spec}: {n} files");
    }
    let lib = toolkit.join("lib");
    let links =
        unversioned_links(&lib).map_err(|e| format!("linking in {}: {e}", lib.display()))?;
    eprintln!("  {links} unversioned library names");
    build_stub(&stub_c, &lib.join("stubs"))?;
    fs::write(&stamp, want).map_err(|e| format!("writing {}: {e}", stamp.display()))?;
    Ok(toolkit)
}

/// The environment a build of candle's `cuda` feature needs with this
/// toolkit, as `NAME=value` lines (what `--stack candle` prints).
pub fn env_lines(toolkit: &Path) -> Vec<String> {
    let t = toolkit.display();
    vec![
        format!("CUDA_HOME={t}"),
        format!("PATH={t}/bin:$PATH"),
        format!("CUDARC_CUDA_VERSION={CUDARC_CUDA_VERSION}"),
        "CUDA_COMPUTE_CAP=90".to_string(),
        format!("LIBRARY_PATH={t}/lib/stubs"),
        format!("LD_LIBRARY_PATH={t}/lib:{t}/lib/stubs  (no GPU: the stub answers no device)"),
    ]
}

/// Unpack every file under `nvidia/` keeping the Unix mode (the zip module
/// of Python drops execute bits; this one reads them from the archive).
fn unpack_all(wheel: &Path, dest: &Path) -> io::Result<usize> {
    let file = fs::File::open(wheel)?;
    let mut zip = zip::ZipArchive::new(file).map_err(io::Error::other)?;
    let mut count = 0;
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).map_err(io::Error::other)?;
        let name = entry.name().to_string();
        if !name.starts_with("nvidia/") || name.ends_with('/') || name.contains("..") {
            continue;
        }
        let out = dest.join(&name);
        if let Some(parent) = out.parent() {
            fs::create_dir_all(parent)?;
        }
        let mut bytes = Vec::with_capacity(usize::try_from(entry.size()).unwrap_or(0));
        entry.read_to_end(&mut bytes)?;
        fs::write(&out, bytes)?;
        #[cfg(unix)]
        if let Some(mode) = entry.unix_mode() {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&out, fs::Permissions::from_mode(mode & 0o777))?;
        }
        count += 1;
    }
    Ok(count)
}

/// `libX.so` -> `libX.so.N...` for every versioned library without one
/// (the wheels ship only versioned names; the linker's `-lX` wants the
/// plain one). Returns how many links were made.
fn unversioned_links(lib: &Path) -> io::Result<usize> {
    let mut made = 0;
    let mut names: Vec<String> = fs::read_dir(lib)?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    for name in &names {
        let Some((stem, _)) = name.split_once(".so.") else {
            continue;
        };
        let plain = lib.join(format!("{stem}.so"));
        if plain.symlink_metadata().is_ok() {
            continue;
        }
        #[cfg(unix)]
        std::os::unix::fs::symlink(name, &plain)?;
        made += 1;
    }
    Ok(made)
}

/// The cudarc version `Cargo.lock` resolves.
fn locked_cudarc() -> Result<String, String> {
    let lock = crate::workspace_root().join("Cargo.lock");
    let text = fs::read_to_string(&lock).map_err(|e| format!("reading {}: {e}", lock.display()))?;
    let mut lines = text.lines();
    while let Some(l) = lines.next() {
        if l.trim() == "name = \"cudarc\""
            && let Some(v) = lines
                .next()
                .and_then(|v| v.trim().strip_prefix("version = \""))
                .and_then(|v| v.strip_suffix('"'))
        {
            return Ok(v.to_string());
        }
    }
    Err(format!("no cudarc package in {}", lock.display()))
}

/// cudarc's driver bindings in cargo's registry (fetched first when absent).
fn cudarc_driver_sys(version: &str) -> Result<PathBuf, String> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .ok_or("neither CARGO_HOME nor HOME is set")?;
    let find = || -> Option<PathBuf> {
        let src = home.join("registry").join("src");
        fs::read_dir(&src)
            .ok()?
            .filter_map(|e| e.ok())
            .find_map(|e| {
                let p = e
                    .path()
                    .join(format!("cudarc-{version}"))
                    .join("src/driver/sys/mod.rs");
                p.is_file().then_some(p)
            })
    };
    if let Some(p) = find() {
        return Ok(p);
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let st = Command::new(cargo)
        .arg("fetch")
        .current_dir(crate::workspace_root())
        .status()
        .map_err(|e| format!("running `cargo fetch`: {e}"))?;
    if !st.success() {
        return Err(format!("`cargo fetch` failed ({st})"));
    }
    find().ok_or_else(|| {
        format!(
            "cudarc {version}'s source is not in {}",
            home.join("registry/src").display()
        )
    })
}

/// The stub's C source: the crate's planning stub (`cudnn/stub/libcuda_stub.c`:
/// a driver version, zero devices, dummy module handles, so cuDNN can plan
/// in the same process), then every other `cu*` entry point cudarc
/// declares, each answering `CUDA_ERROR_STUB_LIBRARY` (34) as the planning
/// stub's refusals do. A process linked against it (candle's `cuda`
/// feature links `-lcuda`) loads it as its `libcuda.so.1`, so the crate's
/// planning works there exactly as with the embedded stub.
fn stub_source() -> Result<String, String> {
    let version = locked_cudarc()?;
    let path = cudarc_driver_sys(&version)?;
    let text = fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let planning = crate::workspace_root().join("cudnn/stub/libcuda_stub.c");
    let base = fs::read_to_string(&planning)
        .map_err(|e| format!("reading {}: {e}", planning.display()))?;
    Ok(merged_stub(&base, &driver_symbols(&text), &version))
}

/// `base` (the planning stub) and a refusal for each of `symbols` it does not define.
pub fn merged_stub(base: &str, symbols: &[String], cudarc: &str) -> String {
    let defined = stub_defines(base);
    let mut c = base.to_string();
    c.push_str(&format!(
        "\n/* Added by `cargo xtask fetch-libs --stack candle`: the other driver entry\n   \
         points cudarc {cudarc} declares, so programs that link -lcuda (candle's\n   \
         `cuda` feature) link and start without a driver. */\n"
    ));
    for s in symbols {
        if !defined.iter().any(|d| d == s) {
            c.push_str(&format!("STUB_FAIL({s})\n"));
        }
    }
    c
}

/// The `cu*` functions a stub's C source defines (`CUresult cuX(` or `STUB_FAIL(cuX)`).
fn stub_defines(c: &str) -> Vec<String> {
    let ident = |r: &str| -> String {
        r.chars()
            .take_while(|ch| ch.is_ascii_alphanumeric() || *ch == '_')
            .collect()
    };
    c.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            l.strip_prefix("CUresult ")
                .or_else(|| l.strip_prefix("STUB_FAIL("))
                .map(ident)
                .filter(|n| n.starts_with("cu"))
        })
        .collect()
}

/// The `cu*` functions a cudarc `driver/sys/mod.rs` defines, sorted, once each.
pub fn driver_symbols(text: &str) -> Vec<String> {
    let mut out: Vec<String> = text
        .lines()
        .filter_map(|l| {
            let rest = l.trim_start().strip_prefix("pub unsafe fn ")?;
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            name.starts_with("cu").then_some(name)
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

fn build_stub(source: &str, dir: &Path) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let c = dir.join("libcuda_stub.c");
    fs::write(&c, source).map_err(|e| format!("writing {}: {e}", c.display()))?;
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let lib = dir.join("libcuda.so.1");
    let st = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O2", "-Wl,-soname,libcuda.so.1", "-o"])
        .arg(&lib)
        .arg(&c)
        .status()
        .map_err(|e| format!("running the C compiler `{cc}` for the driver stub: {e} (set CC)"))?;
    if !st.success() {
        return Err(format!(
            "compiling the driver stub with `{cc}` failed ({st})"
        ));
    }
    let plain = dir.join("libcuda.so");
    let _ = fs::remove_file(&plain);
    #[cfg(unix)]
    std::os::unix::fs::symlink("libcuda.so.1", &plain)
        .map_err(|e| format!("linking {}: {e}", plain.display()))?;
    eprintln!("  driver stub: {}", lib.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The folder names, cudarc's version and the tag all follow the nvcc
    /// pin: a pin changed alone would reuse kernels another toolkit built.
    #[test]
    fn names_follow_the_pin() {
        let nvcc = CANDLE
            .iter()
            .find_map(|s| s.strip_prefix("nvidia-cuda-nvcc=="))
            .unwrap();
        let mut parts = nvcc.split('.');
        let major: u32 = parts.next().unwrap().parse().unwrap();
        let minor: u32 = parts.next().unwrap().parse().unwrap();
        assert_eq!(TAG, format!("cu{major}{minor}"));
        assert_eq!(NAME, format!("candle-{TAG}"));
        assert_eq!(TARGET, format!("candle-target-{TAG}"));
        assert_eq!(
            CUDARC_CUDA_VERSION,
            format!("{}", major * 1000 + minor * 10)
        );
        // The CUDA wheels of one release (cccl, cuBLAS and cuRAND have their own numbers).
        for w in [
            "nvidia-nvvm",
            "nvidia-cuda-crt",
            "nvidia-cuda-runtime",
            "nvidia-cuda-nvrtc",
        ] {
            let v = CANDLE
                .iter()
                .find_map(|s| s.strip_prefix(&format!("{w}==")))
                .unwrap();
            assert_eq!(v, nvcc, "{w}");
        }
        let cccl = CANDLE
            .iter()
            .find_map(|s| s.strip_prefix("nvidia-cuda-cccl=="))
            .unwrap();
        assert!(cccl.starts_with(&format!("{major}.{minor}.")), "{cccl}");
    }

    #[test]
    fn symbols_from_cudarc_style_bindings() {
        // The shape of cudarc 0.19's generated bindings: the public
        // wrapper, and an `extern` declaration inside it (not public).
        let text = "pub unsafe fn cuInit(Flags: ::core::ffi::c_uint) -> CUresult {\n\
                    \x20   extern \"C\" { fn cuInit(Flags: ::core::ffi::c_uint) -> CUresult; }\n\
                    }\n\
                    pub unsafe fn cuMemAlloc_v2(p: *mut CUdeviceptr, n: usize) -> CUresult {}\n\
                    pub unsafe fn cuLibraryUnload(l: CUlibrary) -> CUresult {}\n\
                    pub unsafe fn cuInit(Flags: ::core::ffi::c_uint) -> CUresult {}\n\
                    pub fn cuNotUnsafe() {}\n";
        assert_eq!(
            driver_symbols(text),
            ["cuInit", "cuLibraryUnload", "cuMemAlloc_v2"]
        );
    }

    #[test]
    fn merged_stub_adds_only_missing_symbols() {
        let base = "#define STUB_FAIL(name) CUresult name() { return 34; }\n\
                    CUresult cuDriverGetVersion(int *v) {\n  *v = 13000; return 0;\n}\n\
                    STUB_FAIL(cuInit)\n";
        let syms: Vec<String> = ["cuDriverGetVersion", "cuInit", "cuMemAlloc_v2"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let c = merged_stub(base, &syms, "0.19.10");
        assert!(c.starts_with(base));
        assert_eq!(c.matches("STUB_FAIL(cuInit)").count(), 1);
        assert_eq!(c.matches("cuDriverGetVersion").count(), 1);
        assert!(c.ends_with("STUB_FAIL(cuMemAlloc_v2)\n"));
    }

    /// The real planning stub and cudarc's bindings, when both are here:
    /// the merged source defines each cudarc entry point exactly once.
    #[test]
    fn merged_stub_of_the_checkout() {
        let Ok(src) = stub_source() else {
            eprintln!("SKIPPED: cudarc's source is not in cargo's registry here");
            return;
        };
        let defs = stub_defines(&src);
        let mut sorted = defs.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), defs.len(), "a symbol defined twice");
        assert!(defs.len() > 500, "{} symbols", defs.len());
        for must in [
            "cuInit",
            "cuDriverGetVersion",
            "cuMemAlloc_v2",
            "cuLaunchKernel",
        ] {
            assert!(defs.iter().any(|d| d == must), "{must} missing");
        }
    }

    #[test]
    fn unversioned_names() {
        let dir = std::env::temp_dir().join(format!("xtask-links-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        for f in [
            "libcublas.so.13",
            "libnvrtc-builtins.so.13.5",
            "libcudart_static.a",
        ] {
            fs::write(dir.join(f), b"").unwrap();
        }
        fs::write(dir.join("libcurand.so.10"), b"").unwrap();
        fs::write(dir.join("libcurand.so"), b"kept").unwrap();
        assert_eq!(unversioned_links(&dir).unwrap(), 2);
        assert_eq!(
            fs::read_link(dir.join("libcublas.so")).unwrap(),
            PathBuf::from("libcublas.so.13")
        );
        assert_eq!(
            fs::read_link(dir.join("libnvrtc-builtins.so")).unwrap(),
            PathBuf::from("libnvrtc-builtins.so.13.5")
        );
        assert_eq!(fs::read(dir.join("libcurand.so")).unwrap(), b"kept");
        assert!(!dir.join("libcudart_static.so").exists());
        fs::remove_dir_all(&dir).unwrap();
    }
}
