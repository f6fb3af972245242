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
