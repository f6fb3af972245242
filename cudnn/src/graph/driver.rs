//! The CUDA driver for planning: the real `libcuda.so.1` when one opens, else
//! the project's own driver stub (built from `stub/libcuda_stub.c`, embedded in
//! this crate), so cuDNN's engine libraries load and plans finalize for a
//! named GPU on a machine with no driver.
//!
//! The stub answers every launch, memory and context call with
//! `CUDA_ERROR_STUB_LIBRARY`: nothing can execute through it. It is never
//! loaded when a real driver opens, and `CUDNN_RS_NO_DRIVER_STUB=1` turns it
//! off entirely.

use std::sync::OnceLock;

use crate::error::{Error, Result};

/// Which driver the process plans with.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Driver {
    /// A real NVIDIA driver (`libcuda.so.1` opened by the system loader).
    Real,
    /// The project's stub, written to and loaded from this path.
    Stub(std::path::PathBuf),
}

static DRIVER: OnceLock<std::result::Result<Driver, String>> = OnceLock::new();

/// Make a `libcuda.so.1` available for cuDNN's engine libraries; returns which.
///
/// Called by every planning entry point of the graph module; cheap after the
/// first call.
///
/// # Errors
/// No real driver, and the stub is disabled, was not built (no C compiler at
/// build time), or could not be written or loaded.
pub fn ensure() -> Result<Driver> {
    // NVRTC for the runtime-compiled engines of older cuDNN 9 releases
    // (nothing to do when none is found).
    let _ = super::nvrtc::loaded();
    DRIVER
        .get_or_init(open)
        .clone()
        .map_err(|why| Error::Unsupported {
            what: format!("planning without a GPU: {why}"),
            needs: Some("an NVIDIA driver, or the cudnn-rs driver stub".to_string()),
        })
}

fn open() -> std::result::Result<Driver, String> {
    // SAFETY: opening the system's libcuda runs its initialisers, which is
    // what cuDNN would do itself when it loads its engines.
    if unsafe { libloading::Library::new("libcuda.so.1") }.is_ok() {
        return Ok(Driver::Real);
    }
    if std::env::var_os("CUDNN_RS_NO_DRIVER_STUB").is_some_and(|v| v == "1") {
        return Err("no libcuda.so.1, and CUDNN_RS_NO_DRIVER_STUB=1".to_string());
    }
    load_stub()
}

#[cfg(all(cudnn_rs_driver_stub, unix))]
fn load_stub() -> std::result::Result<Driver, String> {
    use std::io::Write;
    static STUB: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libcuda_stub.so"));
    let dir = std::env::temp_dir().join(format!("cudnn-rs-driver-stub-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let path = dir.join("libcuda.so.1");
    let mut f =
        std::fs::File::create(&path).map_err(|e| format!("writing {}: {e}", path.display()))?;
    f.write_all(STUB)
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    drop(f);
    // RTLD_GLOBAL: later opens of `libcuda.so.1` (cuDNN's engine libraries)
    // resolve to the already-loaded object with that SONAME.
    let flags = libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL;
    // SAFETY: the stub is our own code (stub/libcuda_stub.c) with no initialisers.
    let lib = unsafe { libloading::os::unix::Library::open(Some(&path), flags) }
        .map_err(|e| format!("loading the driver stub {}: {e}", path.display()))?;
    // Kept loaded for the life of the process: cuDNN holds pointers into it.
    std::mem::forget(lib);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_dir(&dir);
    Ok(Driver::Stub(path))
}

#[cfg(not(all(cudnn_rs_driver_stub, unix)))]
fn load_stub() -> std::result::Result<Driver, String> {
    Err("no libcuda.so.1, and this build has no driver stub (it needs a C compiler at build time, on Linux)".to_string())
}
