#![cfg(feature = "link")]
//! Feature `link` keeps the ABI guard of cuBLAS and cuBLASLt: the functions
//! whose ABI differs in cuBLAS 12 ([`cublas_sys::ABI_DIFFERS_IN_CUBLAS12`])
//! are absent when the libraries loaded at start-up are 12, exactly as when
//! they are opened at run time, and present with 13. Run against both
//! stacks (the one linked is the one the system loader finds):
//!
//! `CUDNN_RS_SEARCH_PATH=$PWD/.cuda-libs/cuda12 LD_LIBRARY_PATH=$PWD/.cuda-libs/cuda12/nvidia/cublas/lib cargo test -p cublas-rs-sys --features link --test link_abi`
//! (and the same with `cuda13`, `nvidia/cu13/lib`).
#![allow(clippy::expect_used, clippy::panic)]

use cublas_sys::{ABI_DIFFERS_IN_CUBLAS12, Cublas, CublasLt, LibraryInfo, Version};

/// The version a library reports, checked against the file the loader
/// mapped (`libcublas.so.12` is cuBLAS 12: an independent witness).
fn version_of(info: &LibraryInfo) -> Version {
    let v = info.version.expect("the version is read at start");
    assert!(
        v.major == 12 || v.major == 13,
        "unexpected {} {v}",
        info.library
    );
    let path = info
        .path
        .as_ref()
        .expect("the loader names the linked file");
    let name = path.file_name().expect("a file").to_string_lossy();
    assert!(
        name.ends_with(&format!(".so.{}", v.major)) || name.contains(&format!(".so.{}.", v.major)),
        "{} {v} linked from {}",
        info.library,
        path.display()
    );
    v
}

#[test]
fn host_abi_guard_follows_the_cublas_version() {
    let blas = cublas_sys::load().unwrap_or_else(|e| panic!("linked, yet not loaded: {e}"));
    let lt = cublas_sys::load_lt().unwrap_or_else(|e| panic!("linked, yet not loaded: {e}"));
    let v = version_of(blas.info());
    let vlt = version_of(lt.info());
    assert_eq!(v.major, vlt.major, "cuBLAS {v} with cuBLASLt {vlt}");
    for s in ABI_DIFFERS_IN_CUBLAS12 {
        let in_blas = Cublas::SYMBOLS.contains(s);
        let in_lt = CublasLt::SYMBOLS.contains(s);
        assert!(in_blas || in_lt, "{s} is declared by neither table");
        if in_blas {
            assert_eq!(
                blas.has_symbol(s),
                v.major != 12,
                "{s} with cuBLAS {v} linked"
            );
        }
        if in_lt {
            assert_eq!(
                lt.has_symbol(s),
                vlt.major != 12,
                "{s} with cuBLASLt {vlt} linked"
            );
        }
    }
    assert!(blas.has_symbol("cublasGetProperty"));
    assert!(lt.has_symbol("cublasLtGetVersion"));
    assert!(!blas.has_symbol("cublasNoSuchFunction"));
    if vlt.major == 12 {
        // Refused before any call: cuBLASLt 12 exports a function of this
        // name whose layout struct has another size (a call would write
        // past it).
        // SAFETY: the guard returns before calling; were it to call, a null
        // layout with size 0 is rejected by cuBLASLt.
        let r = unsafe {
            lt.cublasLtMatrixLayoutInit_internal(
                std::ptr::null_mut(),
                0,
                cudart_sys::cudaDataType::CUDA_R_32F,
                1,
                1,
                1,
            )
        };
        let e = r.expect_err("absent with cuBLASLt 12");
        assert_eq!(e.symbol, "cublasLtMatrixLayoutInit_internal");
    }
    eprintln!(
        "cuBLAS {v}: {} functions marked absent; cuBLASLt {vlt}: {}",
        blas.missing_symbols().len(),
        lt.missing_symbols().len()
    );
}
