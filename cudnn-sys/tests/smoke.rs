#![cfg(feature = "link")]
//! Host tier, feature `link` only: the linked table reports the version.
#![allow(clippy::expect_used, clippy::panic)]

#[test]
fn host_version_matches_library() {
    match cudnn_sys::load() {
        Ok(t) => {
            let v = t.info().version.expect("version is read at load");
            // SAFETY: no arguments.
            let raw =
                unsafe { t.cudnnGetVersion() }.expect("cudnnGetVersion exists in every cuDNN");
            assert_eq!(cudnn_sys::decode_version(raw), v);
            assert!(v.major == 8 || v.major == 9, "unexpected cuDNN {v}");
        }
        Err(e) => panic!("linked, yet not loaded: {e}"),
    }
}

/// The ABI guard is kept when linked: with cuDNN 8 running, the functions
/// whose ABI differs from these (cuDNN 9) bindings are absent (an error
/// value), as when the library is opened at run time. Run with the cuda12
/// stack too (`CUDNN_RS_SEARCH_PATH=$PWD/.cuda-libs/cuda12`,
/// `LD_LIBRARY_PATH=$PWD/.cuda-libs/cuda12/nvidia/cudnn/lib`).
#[test]
fn host_abi_guard_follows_the_linked_version() {
    let t = match cudnn_sys::load() {
        Ok(t) => t,
        Err(e) => panic!("linked, yet not loaded: {e}"),
    };
    let v = t.info().version.expect("version is read at load");
    for s in cudnn_sys::ABI_DIFFERS_IN_CUDNN8 {
        assert_eq!(t.has_symbol(s), v.major >= 9, "{s} with cuDNN {v} linked");
    }
    assert!(t.has_symbol("cudnnGetVersion"));
}
