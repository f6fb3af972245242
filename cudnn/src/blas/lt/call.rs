//! The checked call path for cuBLASLt: the function table, statuses,
//! `lt_call!` and attribute values.

use std::ffi::{CStr, c_char};

use crate::error::{Error, Result};
use crate::sys::cublas::{
    self, CublasLt, cublasComputeType_t, cublasLtEpilogue_t, cublasLtMatmulMatrixScale_t,
    cublasLtOrder_t, cublasOperation_t, cublasStatus_t,
};
use crate::sys::cudart::cudaDataType_t;

// ---------------------------------------------------------------------------
// The checked call path for cuBLASLt

/// cuBLASLt's function table, or the load error.
pub(crate) fn cublas_lt() -> Result<&'static CublasLt> {
    Ok(cublas::load_lt()?)
}

pub(super) fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: cuBLASLt returns NUL-terminated static strings.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Turn a cuBLASLt status into a `Result`.
pub(crate) fn cublaslt_status(
    api: &CublasLt,
    call: &'static str,
    st: cublasStatus_t,
) -> Result<()> {
    if st == cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        return Ok(());
    }
    // SAFETY: accepts any code and returns a static string.
    let message = unsafe { api.cublasLtGetStatusString(st) }
        .map(text)
        .unwrap_or_default();
    // SAFETY: as above.
    let name = unsafe { api.cublasLtGetStatusName(st) }
        .map(text)
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| format!("CUBLAS_STATUS_{}", st.0));
    Err(Error::Cublas {
        call,
        code: st.0,
        status_name: name,
        text: message,
        context: None,
    })
}

/// Call a cuBLASLt function through the checked path.
macro_rules! lt_call {
    ($api:expr, $f:ident ( $($arg:expr),* $(,)? )) => {{
        let api = $api;
        // The caller's `unsafe` block states why the arguments are valid.
        let st = api.$f($($arg),*)?;
        cublaslt_status(api, stringify!($f), st)
    }};
}

/// Attribute values: plain data of which every bit pattern is valid.
pub(super) trait AttrValue: Copy {}
impl AttrValue for i8 {}
impl AttrValue for i32 {}
impl AttrValue for u32 {}
impl AttrValue for i64 {}
impl AttrValue for u64 {}
impl AttrValue for usize {}
impl AttrValue for cublasOperation_t {}
impl AttrValue for cublasComputeType_t {}
impl AttrValue for cudaDataType_t {}
impl AttrValue for cublasLtEpilogue_t {}
impl AttrValue for cublasLtOrder_t {}
impl AttrValue for cublasLtMatmulMatrixScale_t {}

pub(super) fn expect_size(call: &str, written: usize, want: usize) -> Result<()> {
    if written == want {
        Ok(())
    } else {
        Err(Error::mismatch(
            format!("{call}: bytes written for the attribute"),
            want,
            written,
        ))
    }
}
