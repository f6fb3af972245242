//! Raw bindings to NVIDIA NCCL (all of `nccl*`/`NCCL_*`), generated from the
//! header of the `nvidia-nccl-cu13` wheel.
//!
//! This crate declares and loads; it does not abstract. The safe layer is the
//! `cudnn` crate's `nccl` module (feature `nccl`). CUDA types
//! (`cudaStream_t`) come from [`cudart_sys`], so no casts are needed between
//! the crates.
//!
//! ```no_run
//! let nccl = nccl_sys::load()?; // finds libnccl once; see cudart_sys::loader
//! println!("NCCL {:?} from {:?}", nccl.info().version, nccl.info().path);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! NCCL is looked for like the other libraries (see [`loader`]), with
//! `NCCL_LIB_DIR` as the override and `NCCL_HOME` as an extra root; NVIDIA's
//! wheels put it in `site-packages/nvidia/nccl/lib`. The version, unique-id
//! and error-string functions work without a GPU.
//!
//! # Feature `link` and a run path
//! The build script passes the folder it linked from to the build scripts of
//! crates that list `nccl-rs-sys` (with feature `link`) in their own
//! `[dependencies]`, as `DEP_CUDNN_RS_NCCL_NCCL_LIB_DIR`; such a build
//! script can write a run path into its binaries
//! (`cargo:rustc-link-arg=-Wl,-rpath,<folder>`), so they run without
//! `LD_LIBRARY_PATH` (an example is in the README).

#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

use std::sync::OnceLock;

pub use cudart_sys;
pub use cudart_sys::loader::{self, LibraryInfo, LoadError, MissingSymbol, Version};

#[rustfmt::skip]
#[path = "generated/types.rs"]
mod types;
pub use types::*;

#[rustfmt::skip]
#[path = "generated/compat.rs"]
mod compat;
pub use compat::ABI_DIFFERS_IN_NCCL_CU12;

#[allow(unused_imports)]
use cudart_sys::*;

macro_rules! functions {
    ($($body:tt)*) => {
        cudart_sys::__define_functions! {
            /// NCCL's function table; get it with [`load`].
            table Nccl;
            $($body)*
        }
    };
}
include!("generated/functions.rs");

/// How NCCL is looked for.
pub const SPEC: loader::LibrarySpec = loader::LibrarySpec {
    name: "NCCL",
    override_var: "NCCL_LIB_DIR",
    root_vars: &["NCCL_HOME", "CUDA_PATH", "CUDA_HOME"],
    sonames: &["libnccl.so.2", "libnccl.so"],
    // NCCL is not built for Windows.
    windows_names: &[],
    wheel: "nvidia-nccl-cu13",
};

/// The NCCL version the bindings were generated from.
pub const HEADER_VERSION: Version = Version::new(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);

static LIBRARY: OnceLock<Result<Nccl, LoadError>> = OnceLock::new();

/// NCCL, opened on first use (once per process).
///
/// # Errors
/// [`LoadError`] listing every place tried.
pub fn load() -> Result<&'static Nccl, LoadError> {
    LIBRARY.get_or_init(open).as_ref().map_err(Clone::clone)
}

/// Whether NCCL can be loaded.
pub fn is_available() -> bool {
    load().is_ok()
}

#[cfg(not(feature = "link"))]
fn open() -> Result<Nccl, LoadError> {
    loader::load_with(&SPEC, |lib, info| {
        let mut t = Nccl::resolve(lib, info);
        if let Some(v) = query_version(&t) {
            t.set_version(v);
        }
        if let Some(p) = t.address_of_any().and_then(loader::path_of_address) {
            t.set_path(p);
        }
        t
    })
}

#[cfg(feature = "link")]
fn open() -> Result<Nccl, LoadError> {
    let path = loader::path_of_address(__linked::ncclGetVersion as *const core::ffi::c_void);
    let mut t = Nccl::linked(LibraryInfo {
        library: SPEC.name,
        path,
        source: None,
        version: None,
    });
    if let Some(v) = query_version(&t) {
        t.set_version(v);
    }
    Ok(t)
}

fn query_version(t: &Nccl) -> Option<Version> {
    let mut v: core::ffi::c_int = 0;
    // SAFETY: `v` is a valid out-pointer; ncclGetVersion needs no device.
    let st = unsafe { t.ncclGetVersion(&mut v) }.ok()?;
    (st == ncclResult_t::ncclSuccess).then(|| decode_version(v))
}

/// Decode `ncclGetVersion()`: up to 2.8 it is `major*1000 + minor*100 + patch`
/// (2804 is 2.8.4), from 2.9 on `major*10000 + minor*100 + patch` (23203 is 2.32.3).
pub const fn decode_version(v: core::ffi::c_int) -> Version {
    let v = if v < 0 { 0 } else { v as u32 };
    if v < 10_000 {
        Version::new(v / 1000, (v % 1000) / 100, v % 100)
    } else {
        Version::new(v / 10_000, (v % 10_000) / 100, v % 100)
    }
}

/// The name of a result code's constant (`"ncclInvalidUsage"`), or `None`
/// for a code these bindings do not know.
pub const fn result_name(r: ncclResult_t) -> Option<&'static str> {
    Some(match r {
        ncclResult_t::ncclSuccess => "ncclSuccess",
        ncclResult_t::ncclUnhandledCudaError => "ncclUnhandledCudaError",
        ncclResult_t::ncclSystemError => "ncclSystemError",
        ncclResult_t::ncclInternalError => "ncclInternalError",
        ncclResult_t::ncclInvalidArgument => "ncclInvalidArgument",
        ncclResult_t::ncclInvalidUsage => "ncclInvalidUsage",
        ncclResult_t::ncclRemoteError => "ncclRemoteError",
        ncclResult_t::ncclInProgress => "ncclInProgress",
        ncclResult_t::ncclTimeout => "ncclTimeout",
        _ => return None,
    })
}
