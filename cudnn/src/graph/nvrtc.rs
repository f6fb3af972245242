//! NVRTC for cuDNN's runtime-compiled engines.
//!
//! Older cuDNN 9 releases (9.10 was measured) compile their runtime-fusion
//! kernels (matmul and pointwise fusions, norms, the composite attention)
//! with NVRTC, which they open by file name (`libnvrtc.so.<CUDA major>`).
//! NVIDIA's pip wheels put it in `nvidia/cuda_nvrtc/lib`, a folder those cuDNN
//! releases do not search, and without it their heuristics silently offer no
//! runtime-compiled engine at all. So before the first plan the crate opens
//! every NVRTC it finds (`RTLD_GLOBAL`: cuDNN's later open by file name
//! resolves to it): beside cuDNN's wheel first, then the places every CUDA
//! library is looked for (`NVRTC_LIB_DIR` overrides). Finding none is not an
//! error: cuDNN 9.28 needs no NVRTC to plan.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::sys::cudart::loader::{self, Candidate, LibrarySpec, ProcessEnvironment, Source};

/// How NVRTC is looked for.
pub const SPEC: LibrarySpec = LibrarySpec {
    name: "NVRTC",
    override_var: "NVRTC_LIB_DIR",
    root_vars: &["CUDA_PATH", "CUDA_HOME"],
    sonames: &["libnvrtc.so.13", "libnvrtc.so.12"],
    windows_names: &[],
    wheel: "nvidia-cuda-nvrtc (nvidia-cuda-nvrtc-cu12 for CUDA 12)",
};

/// Folders beside cuDNN's `nvidia/cudnn/lib` where NVIDIA's wheels put NVRTC.
const WHEEL_DIRS: &[&str] = &["../../cuda_nvrtc/lib", "../../cu13/lib", "../../nvrtc/lib"];

static LOADED: OnceLock<Vec<PathBuf>> = OnceLock::new();

/// The NVRTC files opened for cuDNN (one per CUDA major found; empty when
/// none was found). Opens them on the first call.
pub fn loaded() -> &'static [PathBuf] {
    LOADED.get_or_init(open_all)
}

/// The candidates: beside cuDNN's wheel (unless `NVRTC_LIB_DIR` is set), then
/// the usual places.
pub fn candidates(cudnn_path: Option<&Path>) -> Vec<Candidate> {
    let mut list = loader::candidates(&SPEC, &ProcessEnvironment);
    if std::env::var_os(SPEC.override_var).is_some() {
        return list;
    }
    if let Some(dir) = cudnn_path.and_then(Path::parent) {
        let first: Vec<Candidate> = WHEEL_DIRS
            .iter()
            .flat_map(|sub| {
                SPEC.sonames.iter().map(move |n| Candidate {
                    path: dir.join(sub).join(n),
                    source: Source::Beside("cuDNN"),
                })
            })
            .collect();
        list.retain(|c| !first.iter().any(|f| f.path == c.path));
        list.splice(0..0, first);
    }
    list
}

#[cfg(not(unix))]
fn open_all() -> Vec<PathBuf> {
    Vec::new()
}

#[cfg(unix)]
fn open_all() -> Vec<PathBuf> {
    let cudnn_path = crate::check::cudnn()
        .ok()
        .and_then(|api| api.info().path.clone());
    let list = candidates(cudnn_path.as_deref());
    let mut opened = Vec::new();
    for soname in SPEC.sonames {
        for c in list
            .iter()
            .filter(|c| c.path.file_name().is_some_and(|f| f == *soname))
        {
            if c.path.is_absolute() && !c.path.is_file() {
                continue;
            }
            let flags = libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL;
            // SAFETY: NVIDIA's NVRTC, found by file name in the documented
            // places; its initialisers have no preconditions on us.
            if let Ok(lib) = unsafe { libloading::os::unix::Library::open(Some(&c.path), flags) } {
                // Kept for the life of the process: cuDNN holds its functions.
                std::mem::forget(lib);
                opened.push(std::fs::canonicalize(&c.path).unwrap_or_else(|_| c.path.clone()));
                break;
            }
        }
    }
    opened
}
