//! The CUDA driver for planning: the real `libcuda.so.1` when one opens, else
//! the project's own driver stub (built from `stub/libcuda_stub.c`, embedded in
//! this crate), so cuDNN's engine libraries load and plans finalize for a
//! named GPU on a machine with no driver.
//!
//! The stub answers every launch, memory and context call with
//! `CUDA_ERROR_STUB_LIBRARY`: nothing can execute through it. It is never
//! loaded when a real driver opens, and `CUDNN_RS_NO_DRIVER_STUB=1` turns it
//! off entirely.
//!
//! The stub is loaded from an anonymous memory file; where those are
//! unavailable, from a private folder this process creates.
//! `CUDNN_RS_DRIVER_STUB_NO_MEMFD=1` is a test aid: it skips the memory file,
//! so tests can exercise the private-folder fallback.

use std::sync::OnceLock;

use crate::error::{Error, Result};

/// Which driver the process plans with.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Driver {
    /// A real NVIDIA driver (`libcuda.so.1` opened by the system loader).
    Real,
    /// The project's stub, loaded from this path: an anonymous memory file
    /// (`/proc/self/fd/N`), or where memory files are unavailable, a file in
    /// a private folder this process created (removed after loading).
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
    state().clone().map_err(unavailable)
}

/// [`ensure`] without the answer: what every descriptor creation and
/// planning step calls (no path cloned per call).
///
/// # Errors
/// As [`ensure`].
pub(crate) fn ready() -> Result<()> {
    match state() {
        Ok(_) => Ok(()),
        Err(why) => Err(unavailable(why.clone())),
    }
}

fn state() -> &'static std::result::Result<Driver, String> {
    // NVRTC for the runtime-compiled engines of older cuDNN 9 releases
    // (nothing to do when none is found).
    let _ = super::nvrtc::loaded();
    DRIVER.get_or_init(|| {
        let d = open();
        if matches!(d, Ok(Driver::Stub(_))) {
            crate::no_device::note_stub_driver();
        }
        d
    })
}

fn unavailable(why: String) -> Error {
    Error::Unsupported {
        what: format!("planning without a GPU: {why}"),
        needs: Some("an NVIDIA driver, or the cudnn-rs driver stub".to_string()),
    }
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

/// The stub's bytes, as embedded.
#[cfg(all(cudnn_rs_driver_stub, target_os = "linux"))]
static STUB: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libcuda_stub.so"));

/// The embedded stub's bytes (empty where none was built): what the
/// finalize memo keys its folder on, with the libraries.
pub(crate) fn stub_bytes() -> &'static [u8] {
    #[cfg(all(cudnn_rs_driver_stub, target_os = "linux"))]
    return STUB;
    #[cfg(not(all(cudnn_rs_driver_stub, target_os = "linux")))]
    return &[];
}

#[cfg(all(cudnn_rs_driver_stub, target_os = "linux"))]
fn load_stub() -> std::result::Result<Driver, String> {
    // An anonymous in-memory file first: no path another user can reach
    // (skipped with CUDNN_RS_DRIVER_STUB_NO_MEMFD=1, a test aid for the
    // fallback).
    let memfd_err = if std::env::var_os("CUDNN_RS_DRIVER_STUB_NO_MEMFD").is_some_and(|v| v == "1") {
        "memory file skipped (CUDNN_RS_DRIVER_STUB_NO_MEMFD=1)".to_string()
    } else {
        match load_from_memfd(STUB) {
            Ok(d) => return Ok(d),
            Err(e) => e,
        }
    };
    load_from_private_dir(STUB).map_err(|e| format!("{memfd_err}; then {e}"))
}

/// `dlopen` with `RTLD_NOW | RTLD_GLOBAL`, kept loaded for the process.
#[cfg(all(cudnn_rs_driver_stub, target_os = "linux"))]
fn open_global(path: &std::path::Path) -> std::result::Result<(), String> {
    // RTLD_GLOBAL: later opens of `libcuda.so.1` (cuDNN's engine libraries)
    // resolve to the already-loaded object with that SONAME.
    let flags = libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL;
    // SAFETY: the file holds our own stub (stub/libcuda_stub.c, no
    // initialisers), written by this process into a file no other user can
    // replace (an anonymous memory file, or a 0700 folder it created).
    let lib = unsafe { libloading::os::unix::Library::open(Some(path), flags) }
        .map_err(|e| format!("loading the driver stub from {}: {e}", path.display()))?;
    // Kept loaded for the life of the process: cuDNN holds pointers into it.
    std::mem::forget(lib);
    Ok(())
}

/// The stub written to an anonymous memory file (`memfd_create`) and opened
/// through `/proc/self/fd/N`. The descriptor stays open (close-on-exec) for
/// the life of the process.
#[cfg(all(cudnn_rs_driver_stub, target_os = "linux"))]
fn load_from_memfd(stub: &[u8]) -> std::result::Result<Driver, String> {
    use std::io::Write;
    use std::os::fd::FromRawFd;
    // SAFETY: a NUL-terminated name and valid flags; returns a new fd or -1.
    let fd = unsafe { libc::memfd_create(c"cudnn-rs-driver-stub".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(format!("memfd_create: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: `fd` was just returned by memfd_create and is owned by no one else.
    let mut f = unsafe { std::fs::File::from_raw_fd(fd) };
    f.write_all(stub)
        .map_err(|e| format!("writing the driver stub to a memory file: {e}"))?;
    let path = std::path::PathBuf::from(format!("/proc/self/fd/{fd}"));
    open_global(&path)?;
    // Kept open: the path names it for as long as the process lives.
    std::mem::forget(f);
    Ok(Driver::Stub(path))
}

/// The fallback: a folder of this process's own, created with mode 0700 (a
/// folder that already exists is never used), checked after creation, and
/// the stub written with `O_EXCL` (never through a link).
#[cfg(all(cudnn_rs_driver_stub, target_os = "linux"))]
fn load_from_private_dir(stub: &[u8]) -> std::result::Result<Driver, String> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
    let base = std::env::temp_dir();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let mut last = String::new();
    for attempt in 0..16u32 {
        let dir = base.join(format!(
            "cudnn-rs-driver-stub-{}-{nanos:x}-{attempt}",
            std::process::id()
        ));
        if let Err(e) = std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            // Exists (someone else's, or a link): never used; try another name.
            last = format!("creating {}: {e}", dir.display());
            continue;
        }
        let md = std::fs::symlink_metadata(&dir)
            .map_err(|e| format!("checking {}: {e}", dir.display()))?;
        // SAFETY: getuid has no preconditions.
        let me = unsafe { libc::getuid() };
        if !md.is_dir() || md.uid() != me || md.mode() & 0o077 != 0 {
            return Err(format!(
                "{} is not a private folder of this user after creating it",
                dir.display()
            ));
        }
        let path = dir.join("libcuda.so.1");
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o700)
                .open(&path)?;
            f.write_all(stub)?;
            f.sync_all()
        };
        let r = write()
            .map_err(|e| format!("writing {}: {e}", path.display()))
            .and_then(|()| open_global(&path));
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_dir(&dir);
        return r.map(|()| Driver::Stub(path));
    }
    Err(last)
}

#[cfg(not(all(cudnn_rs_driver_stub, target_os = "linux")))]
fn load_stub() -> std::result::Result<Driver, String> {
    Err("no libcuda.so.1, and this build has no driver stub (it needs a C compiler at build time, on Linux)".to_string())
}
