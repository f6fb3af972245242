#![cfg(feature = "link")]
//! Host tier, feature `link` only: the linked table reports the version.
#![allow(clippy::expect_used, clippy::panic)]

#[test]
fn host_version_matches_library() {
    match nccl_sys::load() {
        Ok(t) => {
            let v = t.info().version.expect("version is read at load");
            let mut raw = 0;
            // SAFETY: valid out-pointer; no device needed.
            let st = unsafe { t.ncclGetVersion(&mut raw) }.expect("ncclGetVersion exists");
            assert_eq!(st, nccl_sys::ncclResult_t::ncclSuccess);
            assert_eq!(nccl_sys::decode_version(raw), v);
            assert_eq!(v.major, 2, "unexpected NCCL {v}");
        }
        Err(e) => panic!("linked, yet not loaded: {e}"),
    }
}
