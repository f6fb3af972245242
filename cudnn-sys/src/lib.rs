//! Raw bindings to NVIDIA cuDNN (all of `cudnn*`/`CUDNN_*`, the graph/backend
//! API included), generated from the cuDNN 9 headers.
//!
//! This crate declares and loads; it does not abstract. The safe layer is the
//! `cudnn` crate.
//!
//! ```no_run
//! let dnn = cudnn_sys::load()?; // finds libcudnn once; see cudart_sys::loader
//! println!("cuDNN {:?} from {:?}", dnn.info().version, dnn.info().path);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # cuDNN 8
//! cuDNN 8.9 is supported at run time. Two differences matter:
//! - status codes are numbered differently (8 counts 0, 1, 2, ...; 9 uses
//!   categories 1000, 2000, ...). [`Cudnn::normalize_status`] maps what the
//!   loaded library returned to the constants of these bindings; the other
//!   enums have the same values in both;
//! - functions new in 9 are absent ([`ABI_DIFFERS_IN_CUDNN8`]): calling one
//!   returns [`MissingSymbol`].
//!
//! # Feature `link` and a run path
//! The build script passes the folder it linked from to the build scripts of
//! crates that list `cudnn-rs-sys` (with feature `link`) in their own
//! `[dependencies]`, as `DEP_CUDNN_RS_CUDNN_CUDNN_LIB_DIR`; such a build
//! script can write a run path into its binaries
//! (`cargo:rustc-link-arg=-Wl,-rpath,<folder>`), so they run without
//! `LD_LIBRARY_PATH` (an example is in the README). The ABI guard above is
//! kept when linked: the version read at start decides.

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
pub use compat::ABI_DIFFERS_IN_CUDNN8;

use cudart_sys::*;

macro_rules! functions {
    ($($body:tt)*) => {
        cudart_sys::__define_functions! {
            /// cuDNN's function table; get it with [`load`].
            table Cudnn;
            $($body)*
        }
    };
}
include!("generated/functions.rs");

/// How cuDNN is looked for.
pub const SPEC: loader::LibrarySpec = loader::LibrarySpec {
    name: "cuDNN",
    override_var: "CUDNN_LIB_DIR",
    root_vars: &["CUDNN_PATH", "CUDA_PATH", "CUDA_HOME"],
    sonames: &["libcudnn.so.9", "libcudnn.so.8", "libcudnn.so"],
    windows_names: &["cudnn64_9.dll", "cudnn64_8.dll"],
    wheel: "nvidia-cudnn-cu13",
};

/// The cuDNN version the bindings were generated from.
pub const HEADER_VERSION: Version = Version::new(CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL);

static LIBRARY: OnceLock<Result<Cudnn, LoadError>> = OnceLock::new();

/// cuDNN, opened on first use (once per process).
///
/// # Errors
/// [`LoadError`] listing every place tried.
pub fn load() -> Result<&'static Cudnn, LoadError> {
    LIBRARY.get_or_init(open).as_ref().map_err(Clone::clone)
}

/// Whether cuDNN can be loaded.
pub fn is_available() -> bool {
    load().is_ok()
}

#[cfg(not(feature = "link"))]
fn open() -> Result<Cudnn, LoadError> {
    loader::load_with(&SPEC, |lib, info| {
        let mut t = Cudnn::resolve(lib, info);
        if let Some(v) = query_version(&t) {
            if v.major < 9 {
                t.forget_symbols(ABI_DIFFERS_IN_CUDNN8);
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
fn open() -> Result<Cudnn, LoadError> {
    let path = loader::path_of_address(__linked::cudnnGetVersion as *const core::ffi::c_void);
    let mut t = Cudnn::linked(LibraryInfo {
        library: SPEC.name,
        path,
        source: None,
        version: None,
    });
    if let Some(v) = query_version(&t) {
        // The same guard as when loaded: the version running decides.
        if v.major < 9 {
            t.forget_symbols(ABI_DIFFERS_IN_CUDNN8);
        }
        t.set_version(v);
    }
    Ok(t)
}

fn query_version(t: &Cudnn) -> Option<Version> {
    // SAFETY: cudnnGetVersion takes no arguments and needs no device.
    let v = unsafe { t.cudnnGetVersion() }.ok()?;
    Some(decode_version(v))
}

/// Decode `cudnnGetVersion()`: 8.x is `major*1000 + minor*100 + patch`
/// (8907 is 8.9.7), 9.x is `major*10000 + minor*100 + patch` (92801 is 9.28.1).
pub const fn decode_version(v: usize) -> Version {
    let v = if v > u32::MAX as usize {
        u32::MAX
    } else {
        v as u32
    };
    if v < 10_000 {
        Version::new(v / 1000, (v % 1000) / 100, v % 100)
    } else {
        Version::new(v / 10_000, (v % 10_000) / 100, v % 100)
    }
}

/// Map a cuDNN 8 status code to the constant of these (cuDNN 9) bindings
/// with the same meaning. Unknown codes are kept as they are.
pub const fn status_from_v8(code: u32) -> cudnnStatus_t {
    match code {
        0 => cudnnStatus_t::CUDNN_STATUS_SUCCESS,
        1 => cudnnStatus_t::CUDNN_STATUS_NOT_INITIALIZED,
        2 => cudnnStatus_t::CUDNN_STATUS_ALLOC_FAILED,
        3 => cudnnStatus_t::CUDNN_STATUS_BAD_PARAM,
        4 => cudnnStatus_t::CUDNN_STATUS_INTERNAL_ERROR,
        5 => cudnnStatus_t::CUDNN_STATUS_INVALID_VALUE,
        6 => cudnnStatus_t::CUDNN_STATUS_ARCH_MISMATCH,
        7 => cudnnStatus_t::CUDNN_STATUS_MAPPING_ERROR,
        8 => cudnnStatus_t::CUDNN_STATUS_EXECUTION_FAILED,
        9 => cudnnStatus_t::CUDNN_STATUS_NOT_SUPPORTED,
        10 => cudnnStatus_t::CUDNN_STATUS_LICENSE_ERROR,
        11 => cudnnStatus_t::CUDNN_STATUS_RUNTIME_PREREQUISITE_MISSING,
        12 => cudnnStatus_t::CUDNN_STATUS_RUNTIME_IN_PROGRESS,
        13 => cudnnStatus_t::CUDNN_STATUS_RUNTIME_FP_OVERFLOW,
        14 => cudnnStatus_t::CUDNN_STATUS_VERSION_MISMATCH,
        other => cudnnStatus_t(other),
    }
}

impl Cudnn {
    /// The status a function returned, as the constant of these bindings with
    /// the same meaning, whatever cuDNN major is loaded. Pass the raw value,
    /// not this one, back to the library (`cudnnGetErrorString`).
    pub fn normalize_status(&self, raw: cudnnStatus_t) -> cudnnStatus_t {
        match self.info().version {
            Some(v) if v.major < 9 => status_from_v8(raw.0),
            _ => raw,
        }
    }
}
