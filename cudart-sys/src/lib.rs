//! Raw bindings to a subset of the CUDA runtime: devices and attributes,
//! memory (device, pinned host, stream-ordered, memset), streams, events,
//! errors, versions, pointer attributes, stream capture and graph launch.
//!
//! This crate declares and loads; it does not abstract. The safe layer is the
//! `cudnn` crate.
//!
//! # Reaching the functions
//! Every function is a method of [`Cudart`], the library's function table:
//!
//! ```no_run
//! let rt = cudart_sys::load()?; // finds and opens libcudart once
//! let mut n = 0;
//! // SAFETY: `n` is a valid out-pointer.
//! let status = unsafe { rt.cudaGetDeviceCount(&mut n) }?;
//! println!("{status:?}, {n} devices");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! By default the library is opened at run time (nothing CUDA is needed to
//! build); see [`loader`] for where it is looked for. With feature `link` it is
//! linked at build time instead and the API is the same.
//!
//! This crate also defines the CUDA types shared with `cudnn-sys` and
//! `cublas-sys` (`cudaStream_t`, `cudaDataType`, `libraryPropertyType`, ...).
//!
//! # Feature `link` and a run path
//! The build script passes the folder it linked from to the build scripts of
//! crates that list `cudart-rs-sys` (with feature `link`) in their own
//! `[dependencies]`, as `DEP_CUDNN_RS_CUDART_CUDART_LIB_DIR`; such a build
//! script can write a run path into its binaries
//! (`cargo:rustc-link-arg=-Wl,-rpath,<folder>`), so they run without
//! `LD_LIBRARY_PATH` (an example is in the README). The ABI guard below is
//! kept when linked: the version read at start decides.
//!
//! # ABI across CUDA majors
//! The bindings come from CUDA 13 headers. A few functions keep their name
//! but change their ABI between CUDA 12 and 13; when a CUDA 12 runtime is
//! loaded those are treated as absent (see [`ABI_DIFFERS_IN_CUDA12`]), so a
//! call returns [`loader::MissingSymbol`] instead of corrupting memory.

#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

pub mod loader;
#[doc(hidden)]
pub mod macros;
pub mod python_site;
#[rustfmt::skip]
#[path = "generated/types.rs"]
mod types;

use std::sync::OnceLock;

pub use loader::{LibraryInfo, LoadError, MissingSymbol, Version};
pub use types::*;

#[rustfmt::skip]
#[path = "generated/compat.rs"]
mod compat;
pub use compat::ABI_DIFFERS_IN_CUDA12;

/// `cudaStreamLegacy`: the legacy default stream (a C macro, so written here).
pub const cudaStreamLegacy: cudaStream_t = 1 as cudaStream_t;
/// `cudaStreamPerThread`: the per-thread default stream (a C macro).
pub const cudaStreamPerThread: cudaStream_t = 2 as cudaStream_t;

macro_rules! functions {
    ($($body:tt)*) => {
        $crate::__define_functions! {
            /// The CUDA runtime's function table; get it with [`load`].
            table Cudart;
            $($body)*
        }
    };
}
include!("generated/functions.rs");

/// How the CUDA runtime is looked for.
pub const SPEC: loader::LibrarySpec = loader::LibrarySpec {
    name: "CUDA runtime",
    override_var: "CUDART_LIB_DIR",
    root_vars: &["CUDA_PATH", "CUDA_HOME"],
    sonames: &["libcudart.so.13", "libcudart.so.12", "libcudart.so"],
    windows_names: &["cudart64_13.dll", "cudart64_12.dll"],
    wheel: "nvidia-cuda-runtime",
};

static LIBRARY: OnceLock<Result<Cudart, LoadError>> = OnceLock::new();

/// The CUDA runtime, opened on first use (once per process).
///
/// # Errors
/// [`LoadError`] listing every place tried, when it cannot be found or opened.
pub fn load() -> Result<&'static Cudart, LoadError> {
    LIBRARY.get_or_init(open).as_ref().map_err(Clone::clone)
}

/// Whether the CUDA runtime can be loaded.
pub fn is_available() -> bool {
    load().is_ok()
}

#[cfg(not(feature = "link"))]
fn open() -> Result<Cudart, LoadError> {
    loader::load_with(&SPEC, |lib, info| {
        let mut t = Cudart::resolve(lib, info);
        if let Some(v) = query_version(&t) {
            if v.major == 12 {
                t.forget_symbols(ABI_DIFFERS_IN_CUDA12);
            }
            t.set_version(v);
        }
        if let Some(p) = t.address_of_any().and_then(loader::path_of_address) {
            t.set_path(p);
        }
        t
    })
}

#[cfg(feature = "link")]
fn open() -> Result<Cudart, LoadError> {
    let path = loader::path_of_address(__linked::cudaRuntimeGetVersion as *const core::ffi::c_void);
    let mut t = Cudart::linked(LibraryInfo {
        library: SPEC.name,
        path,
        source: None,
        version: None,
    });
    if let Some(v) = query_version(&t) {
        // The same guard as when loaded: the version running decides.
        if v.major == 12 {
            t.forget_symbols(ABI_DIFFERS_IN_CUDA12);
        }
        t.set_version(v);
    }
    Ok(t)
}

/// `cudaRuntimeGetVersion`, decoded (`13050` is 13.5).
fn query_version(t: &Cudart) -> Option<Version> {
    let mut v = 0;
    // SAFETY: `v` is a valid out-pointer; the call needs no device.
    let st = unsafe { t.cudaRuntimeGetVersion(&mut v) }.ok()?;
    (st == cudaError::cudaSuccess).then(|| decode_runtime_version(v))
}

/// Decode a CUDA version number (`1000 * major + 10 * minor`).
pub const fn decode_runtime_version(v: i32) -> Version {
    let v = if v < 0 { 0 } else { v as u32 };
    Version::new(v / 1000, (v % 1000) / 10, v % 10)
}

/// The CUDA runtime version the bindings were generated from.
pub const HEADER_VERSION: Version = decode_runtime_version(CUDART_VERSION as i32);
