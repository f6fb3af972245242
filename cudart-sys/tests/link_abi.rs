#![cfg(feature = "link")]
//! Feature `link` keeps the ABI guard: the functions whose ABI differs in a
//! CUDA 12 runtime are absent when the runtime loaded at start-up is 12,
//! exactly as when the library is opened at run time. Run against both
//! stacks (the one linked is the one the system loader finds):
//!
//! `CUDNN_RS_SEARCH_PATH=$PWD/.cuda-libs/cuda12 LD_LIBRARY_PATH=$PWD/.cuda-libs/cuda12/nvidia/cuda_runtime/lib cargo test -p cudart-rs-sys --features link --test link_abi`
//! (and the same with `cuda13`, `nvidia/cu13/lib`).
#![allow(clippy::expect_used, clippy::panic)]

#[test]
fn host_abi_guard_follows_the_runtime_version() {
    let t = match cudart_sys::load() {
        Ok(t) => t,
        Err(e) => panic!("linked, yet not loaded: {e}"),
    };
    let v = t.info().version.expect("the version is read at start");
    assert!(
        v.major == 12 || v.major == 13,
        "unexpected CUDA runtime {v}"
    );
    for s in cudart_sys::ABI_DIFFERS_IN_CUDA12 {
        assert_eq!(
            t.has_symbol(s),
            v.major != 12,
            "{s} with the CUDA {v} runtime linked"
        );
    }
    assert!(t.has_symbol("cudaRuntimeGetVersion"));
    assert!(!t.has_symbol("cudaNoSuchFunction"));
    if v.major == 12 {
        // Refused before any call: the CUDA 12 symbol of this name has
        // another ABI (a null pointer would only be refused by the runtime).
        // SAFETY: the guard returns before calling; were it to call, the
        // runtime rejects a null out-pointer.
        let r = unsafe { t.cudaGetDeviceProperties(std::ptr::null_mut(), 0) };
        let e = r.expect_err("absent with a CUDA 12 runtime");
        assert_eq!(e.symbol, "cudaGetDeviceProperties");
    }
    eprintln!(
        "CUDA runtime {v}: {} functions marked absent",
        t.missing_symbols().len()
    );
}
