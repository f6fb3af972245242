//! Raw bindings to NVIDIA cuBLAS (the v2 API) and cuBLASLt, generated from the
//! CUDA 13 headers.
//!
//! This crate declares and loads; it does not abstract. The safe layer is the
//! `cudnn` crate's `blas` module. cuBLAS and cuBLASLt are separate libraries,
//! with separate tables: [`load`] gives [`Cublas`], [`load_lt`] gives
//! [`CublasLt`].
//!
//! ```no_run
//! let blas = cublas_sys::load()?;
//! println!("cuBLAS {:?}", blas.info().version);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! cuBLAS 12 is supported at run time; the functions whose ABI differs there
//! ([`ABI_DIFFERS_IN_CUBLAS12`]) are treated as absent when it is loaded.
//!
//! # Feature `link` and a run path
//! The build script passes the folder it linked from to the build scripts of
//! crates that list `cublas-rs-sys` (with feature `link`) in their own
//! `[dependencies]`, as `DEP_CUDNN_RS_CUBLAS_CUBLAS_LIB_DIR` and `DEP_CUDNN_RS_CUBLAS_CUBLASLT_LIB_DIR`; such a build
//! script can write a run path into its binaries
//! (`cargo:rustc-link-arg=-Wl,-rpath,<folder>`), so they run without
//! `LD_LIBRARY_PATH` (an example is in the README). The ABI guard above is
//! kept when linked: the version read at start decides.

#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

use std::sync::OnceLock;

#[allow(unused_imports)]
use cudart_sys::libraryPropertyType;

pub use cudart_sys;
pub use cudart_sys::loader::{self, LibraryInfo, LoadError, MissingSymbol, Version};

#[rustfmt::skip]
#[path = "generated/types.rs"]
mod types;
pub use types::*;

#[rustfmt::skip]
#[path = "generated/compat.rs"]
mod compat;
pub use compat::ABI_DIFFERS_IN_CUBLAS12;

mod v2 {
    use crate::types::*;
    #[allow(unused_imports)]
    use cudart_sys::*;
    macro_rules! functions {
        ($($body:tt)*) => {
            cudart_sys::__define_functions! {
                /// cuBLAS's function table; get it with [`load`](crate::load).
                table Cublas;
                $($body)*
            }
        };
    }
    include!("generated/functions.rs");
}
mod lt {
    use crate::types::*;
    #[allow(unused_imports)]
    use cudart_sys::*;
    macro_rules! functions {
        ($($body:tt)*) => {
            cudart_sys::__define_functions! {
                /// cuBLASLt's function table; get it with [`load_lt`](crate::load_lt).
                table CublasLt;
                $($body)*
            }
        };
    }
    include!("generated/functions_lt.rs");
}
pub use lt::CublasLt;
pub use v2::Cublas;

/// How cuBLAS is looked for.
pub const SPEC: loader::LibrarySpec = loader::LibrarySpec {
    name: "cuBLAS",
    override_var: "CUBLAS_LIB_DIR",
    root_vars: &["CUDA_PATH", "CUDA_HOME"],
    sonames: &["libcublas.so.13", "libcublas.so.12", "libcublas.so"],
    windows_names: &["cublas64_13.dll", "cublas64_12.dll"],
    wheel: "nvidia-cublas",
};

/// How cuBLASLt is looked for.
pub const SPEC_LT: loader::LibrarySpec = loader::LibrarySpec {
    name: "cuBLASLt",
    override_var: "CUBLASLT_LIB_DIR",
    root_vars: &["CUDA_PATH", "CUDA_HOME"],
    sonames: &["libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"],
    windows_names: &["cublasLt64_13.dll", "cublasLt64_12.dll"],
    wheel: "nvidia-cublas",
};

/// The cuBLAS version the bindings were generated from.
pub const HEADER_VERSION: Version =
    Version::new(CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH);

static LIBRARY: OnceLock<Result<Cublas, LoadError>> = OnceLock::new();
static LIBRARY_LT: OnceLock<Result<CublasLt, LoadError>> = OnceLock::new();

/// cuBLAS, opened on first use (once per process).
///
/// # Errors
/// [`LoadError`] listing every place tried.
pub fn load() -> Result<&'static Cublas, LoadError> {
    LIBRARY.get_or_init(open).as_ref().map_err(Clone::clone)
}

/// cuBLASLt, opened on first use (once per process).
///
/// # Errors
/// [`LoadError`] listing every place tried.
pub fn load_lt() -> Result<&'static CublasLt, LoadError> {
    LIBRARY_LT
        .get_or_init(open_lt)
        .as_ref()
        .map_err(Clone::clone)
}

/// Whether cuBLAS and cuBLASLt can be loaded.
pub fn is_available() -> bool {
    load().is_ok() && load_lt().is_ok()
}

#[cfg(not(feature = "link"))]
fn open() -> Result<Cublas, LoadError> {
    loader::load_with(&SPEC, |lib, info| {
        let mut t = Cublas::resolve(lib, info);
        if let Some(v) = query_version(&t) {
            if v.major < 13 {
                t.forget_symbols(ABI_DIFFERS_IN_CUBLAS12);
            }
            t.set_version(v);
        }
        if let Some(p) = t.address_of_any().and_then(loader::path_of_address) {
            t.set_path(p);
        }
        t
    })
}

#[cfg(not(feature = "link"))]
fn open_lt() -> Result<CublasLt, LoadError> {
    // cuBLAS loads the cuBLASLt beside it: try that one first, so the two
    // match and the report says where it really came from.
    let cublas_path = load().ok().and_then(|b| b.info().path.clone());
    let list = |env: &dyn loader::Environment| {
        loader::candidates_beside(&SPEC_LT, env, SPEC.name, cublas_path.as_deref())
    };
    loader::load_lazily(&SPEC_LT, list, |lib, info| {
        let mut t = CublasLt::resolve(lib, info);
        if let Some(v) = query_version_lt(&t) {
            if v.major < 13 {
                t.forget_symbols(ABI_DIFFERS_IN_CUBLAS12);
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
fn open() -> Result<Cublas, LoadError> {
    let path = loader::path_of_address(v2::__linked::cublasGetProperty as *const core::ffi::c_void);
    let mut t = Cublas::linked(LibraryInfo {
        library: SPEC.name,
        path,
        source: None,
        version: None,
    });
    if let Some(v) = query_version(&t) {
        // The same guard as when loaded: the version running decides.
        if v.major < 13 {
            t.forget_symbols(ABI_DIFFERS_IN_CUBLAS12);
        }
        t.set_version(v);
    }
    Ok(t)
}

#[cfg(feature = "link")]
fn open_lt() -> Result<CublasLt, LoadError> {
    let path =
        loader::path_of_address(lt::__linked::cublasLtGetVersion as *const core::ffi::c_void);
    let mut t = CublasLt::linked(LibraryInfo {
        library: SPEC_LT.name,
        path,
        source: None,
        version: None,
    });
    if let Some(v) = query_version_lt(&t) {
        // The same guard as when loaded: the version running decides.
        if v.major < 13 {
            t.forget_symbols(ABI_DIFFERS_IN_CUBLAS12);
        }
        t.set_version(v);
    }
    Ok(t)
}

/// `cublasGetProperty` for major, minor and patch (no handle needed).
fn query_version(t: &Cublas) -> Option<Version> {
    let mut parts = [0i32; 3];
    for (slot, prop) in parts.iter_mut().zip([
        libraryPropertyType::MAJOR_VERSION,
        libraryPropertyType::MINOR_VERSION,
        libraryPropertyType::PATCH_LEVEL,
    ]) {
        // SAFETY: `slot` is a valid out-pointer; no handle or device is needed.
        let st = unsafe { t.cublasGetProperty(prop, slot) }.ok()?;
        if st != cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            return None;
        }
    }
    let [a, b, c] = parts.map(|p| p.max(0) as u32);
    Some(Version::new(a, b, c))
}

/// `cublasLtGetVersion`: `major*10000 + minor*100 + patch`.
fn query_version_lt(t: &CublasLt) -> Option<Version> {
    // SAFETY: takes no arguments and needs no device.
    let v = unsafe { t.cublasLtGetVersion() }.ok()?;
    Some(decode_version(v))
}

/// Decode a cuBLAS version number (`major*10000 + minor*100 + patch`; 131000 is 13.10.0).
pub const fn decode_version(v: usize) -> Version {
    let v = if v > u32::MAX as usize {
        u32::MAX
    } else {
        v as u32
    };
    Version::new(v / 10_000, (v % 10_000) / 100, v % 100)
}
