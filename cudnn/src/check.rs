//! The one checked path every FFI call goes through: a status becomes a
//! `Result` carrying the call's name and the library's own text.

use std::ffi::{CStr, c_char};

use crate::error::{Error, Result};
#[cfg(feature = "blas")]
use crate::sys::cublas;
use crate::sys::{cudart, cudnn as dnn};

/// cuDNN's function table, or the load error.
pub(crate) fn cudnn() -> Result<&'static dnn::Cudnn> {
    Ok(dnn::load()?)
}

/// The CUDA runtime's function table, or the load error.
pub(crate) fn cudart() -> Result<&'static cudart::Cudart> {
    Ok(cudart::load()?)
}

/// cuBLAS's function table, or the load error.
#[cfg(feature = "blas")]
pub(crate) fn cublas() -> Result<&'static cublas::Cublas> {
    Ok(cublas::load()?)
}

fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: the libraries return NUL-terminated static strings.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Turn a cuDNN status into a `Result`. `raw` is what the loaded library
/// returned (cuDNN 8 numbering is mapped to the bindings' constants).
pub(crate) fn cudnn_status(
    api: &dnn::Cudnn,
    call: &'static str,
    raw: dnn::cudnnStatus_t,
) -> Result<()> {
    let status = api.normalize_status(raw);
    if status == dnn::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
        return Ok(());
    }
    // SAFETY: cudnnGetErrorString accepts any code and returns a static string.
    let text = unsafe { api.cudnnGetErrorString(raw) }
        .map(text)
        .unwrap_or_default();
    let mut last_error = None;
    if api.has_symbol("cudnnGetLastErrorString") {
        let mut buf = [0 as c_char; 512];
        // SAFETY: buf is writable for its length, which is passed.
        if unsafe { api.cudnnGetLastErrorString(buf.as_mut_ptr(), buf.len()) }.is_ok() {
            buf[buf.len() - 1] = 0;
            let s = text_of(&buf);
            if !s.is_empty() {
                last_error = Some(s);
            }
        }
    }
    Err(Error::Cudnn {
        call,
        status,
        raw: raw.0,
        status_name: cudnn_status_name(status),
        text,
        last_error,
        context: None,
    })
}

fn text_of(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).trim().to_string()
}

/// The name of a cuDNN status constant, or `CUDNN_STATUS_<n>`.
pub fn cudnn_status_name(s: dnn::cudnnStatus_t) -> String {
    use dnn::cudnnStatus_t as S;
    // Canonical cuDNN 9 names; the deprecated aliases share these values.
    let name = match s {
        S::CUDNN_STATUS_SUCCESS => "CUDNN_STATUS_SUCCESS",
        S::CUDNN_STATUS_NOT_INITIALIZED => "CUDNN_STATUS_NOT_INITIALIZED",
        S::CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH => "CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH",
        S::CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH => {
            "CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH"
        }
        S::CUDNN_STATUS_DEPRECATED => "CUDNN_STATUS_DEPRECATED",
        S::CUDNN_STATUS_LICENSE_ERROR => "CUDNN_STATUS_LICENSE_ERROR",
        S::CUDNN_STATUS_RUNTIME_IN_PROGRESS => "CUDNN_STATUS_RUNTIME_IN_PROGRESS",
        S::CUDNN_STATUS_RUNTIME_FP_OVERFLOW => "CUDNN_STATUS_RUNTIME_FP_OVERFLOW",
        S::CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED => "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED",
        S::CUDNN_STATUS_BAD_PARAM => "CUDNN_STATUS_BAD_PARAM",
        S::CUDNN_STATUS_INVALID_VALUE => "CUDNN_STATUS_INVALID_VALUE",
        S::CUDNN_STATUS_BAD_PARAM_NULL_POINTER => "CUDNN_STATUS_BAD_PARAM_NULL_POINTER",
        S::CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER => "CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER",
        S::CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED => "CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED",
        S::CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND => "CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND",
        S::CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT => "CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT",
        S::CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH => "CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH",
        S::CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH => "CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH",
        S::CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES => "CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES",
        S::CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE => "CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE",
        S::CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH => {
            "CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH"
        }
        S::CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE => "CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE",
        S::CUDNN_STATUS_NOT_SUPPORTED => "CUDNN_STATUS_NOT_SUPPORTED",
        S::CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN => "CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN",
        S::CUDNN_STATUS_NOT_SUPPORTED_SHAPE => "CUDNN_STATUS_NOT_SUPPORTED_SHAPE",
        S::CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE => "CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE",
        S::CUDNN_STATUS_NOT_SUPPORTED_LAYOUT => "CUDNN_STATUS_NOT_SUPPORTED_LAYOUT",
        S::CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER => {
            "CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER"
        }
        S::CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART => {
            "CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART"
        }
        S::CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH => "CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH",
        S::CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING => {
            "CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING"
        }
        S::CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE => {
            "CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE"
        }
        S::CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT => {
            "CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT"
        }
        S::CUDNN_STATUS_NOT_SUPPORTED_PADDING => "CUDNN_STATUS_NOT_SUPPORTED_PADDING",
        S::CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM => {
            "CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM"
        }
        S::CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API => {
            "CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API"
        }
        S::CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE => {
            "CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE"
        }
        S::CUDNN_STATUS_INTERNAL_ERROR => "CUDNN_STATUS_INTERNAL_ERROR",
        S::CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED => {
            "CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED"
        }
        S::CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE => {
            "CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE"
        }
        S::CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED => {
            "CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED"
        }
        S::CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED => {
            "CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED"
        }
        S::CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM => {
            "CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM"
        }
        S::CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED => {
            "CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED"
        }
        S::CUDNN_STATUS_EXECUTION_FAILED => "CUDNN_STATUS_EXECUTION_FAILED",
        S::CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER => "CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER",
        S::CUDNN_STATUS_EXECUTION_FAILED_CUBLAS => "CUDNN_STATUS_EXECUTION_FAILED_CUBLAS",
        S::CUDNN_STATUS_EXECUTION_FAILED_CUDART => "CUDNN_STATUS_EXECUTION_FAILED_CUDART",
        S::CUDNN_STATUS_EXECUTION_FAILED_CURAND => "CUDNN_STATUS_EXECUTION_FAILED_CURAND",
        _ => return format!("CUDNN_STATUS_{}", s.0),
    };
    name.to_string()
}

/// Turn a CUDA runtime status into a `Result`.
pub(crate) fn cuda_status(
    api: &cudart::Cudart,
    call: &'static str,
    st: cudart::cudaError_t,
) -> Result<()> {
    if st == cudart::cudaError::cudaSuccess {
        return Ok(());
    }
    // SAFETY: both accept any code and return static strings.
    let name = unsafe { api.cudaGetErrorName(st) }
        .map(text)
        .unwrap_or_default();
    // SAFETY: as above.
    let text = unsafe { api.cudaGetErrorString(st) }
        .map(text)
        .unwrap_or_default();
    if crate::no_device::runtime_no_device(call, st.0) {
        return Err(Error::NoDevice {
            reason: crate::no_device::reason_for(st.0),
            detail: Some(format!("{call} returned {} ({name}: {text})", st.0)),
        });
    }
    // Code 3 where a device was seen before: why, in the context.
    let context = if st.0 == 3 {
        crate::no_device::init_error_context(crate::no_device::init_history()).map(String::from)
    } else {
        None
    };
    Err(Error::Cuda {
        call,
        code: st.0,
        name,
        text,
        context,
    })
}

/// Turn a cuBLAS status into a `Result`.
#[cfg(feature = "blas")]
pub(crate) fn cublas_status(
    api: &cublas::Cublas,
    call: &'static str,
    st: cublas::cublasStatus_t,
) -> Result<()> {
    if st == cublas::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        return Ok(());
    }
    // SAFETY: accepts any code and returns a static string.
    let message = unsafe { api.cublasGetStatusString(st) }
        .map(text)
        .unwrap_or_default();
    // SAFETY: as above.
    let name = unsafe { api.cublasGetStatusName(st) }
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

/// Call a cuDNN function through the checked path:
/// `cudnn_call!(api, cudnnCreateTensorDescriptor(&mut d))`.
macro_rules! cudnn_call {
    ($api:expr, $f:ident ( $($arg:expr),* $(,)? )) => {{
        let api = $api;
        // The caller's `unsafe` block states why the arguments are valid.
        let st = api.$f($($arg),*)?;
        $crate::check::cudnn_status(api, stringify!($f), st)
    }};
}
pub(crate) use cudnn_call;

/// Call a CUDA runtime function through the checked path.
macro_rules! cuda_call {
    ($api:expr, $f:ident ( $($arg:expr),* $(,)? )) => {{
        let api = $api;
        let st = api.$f($($arg),*)?;
        $crate::check::cuda_status(api, stringify!($f), st)
    }};
}
pub(crate) use cuda_call;

/// Call a cuBLAS function through the checked path.
#[cfg(feature = "blas")]
macro_rules! cublas_call {
    ($api:expr, $f:ident ( $($arg:expr),* $(,)? )) => {{
        let api = $api;
        let st = api.$f($($arg),*)?;
        $crate::check::cublas_status(api, stringify!($f), st)
    }};
}
#[cfg(feature = "blas")]
pub(crate) use cublas_call;
