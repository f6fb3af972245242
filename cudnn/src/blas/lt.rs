//! cuBLASLt: matmul with fused epilogues (bias, ReLU, GELU and their
//! backward forms) and cached plans.
//!
//! - [`LtHandle`]: the cuBLASLt context, bound to a stream, owning the
//!   workspace every matmul gets.
//! - [`MatmulSpec`]: the layouts of A, B and D, the compute type, the
//!   [`Epilogue`] and the pointer alignment — everything a plan depends on.
//! - [`MatmulPlan`]: the matmul descriptor, the four matrix layouts, the
//!   preference and the heuristic's algorithm for one spec;
//!   [`run`](MatmulPlan::run) makes one `cublasLtMatmul` call.
//! - [`PlanCache`]: plans by [`PlanKey`] (spec, types, workspace limit).
//!
//! The descriptors ([`MatmulDesc`], [`LtMatrixLayout`], [`MatmulPreference`])
//! are host objects and work without a device; creating a handle and
//! choosing an algorithm need one.
//!
//! # Frames and epilogue vectors
//!
//! cuBLASLt is column-major. As with [`GemmPlan`](super::GemmPlan), a D that
//! is not column-contiguous (row-major D) is computed as Dᵀ = Bᵀ·Aᵀ. The
//! epilogue's vectors follow D's memory: the bias (and the bias gradient of
//! [`Epilogue::DReluBgrad`]/[`Epilogue::DGeluBgrad`]) has one entry per
//! element of D's *contiguous* dimension — per row of a column-major D, per
//! column of a row-major D; in both cases one per feature when each sample
//! is a contiguous vector. [`Epilogue::BgradA`] and [`Epilogue::BgradB`]
//! are defined on the logical matrices (sum of A over k, length m; sum of
//! B over k, length n) and are mapped to the library's frame. The auxiliary
//! buffer (ReLU bit-mask, GELU input) is laid out like D, with the leading
//! dimension [`MatmulShape::aux_ld`].

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::ffi::{CStr, c_char, c_void};
use std::fmt;
use std::marker::PhantomData;
use std::mem;
use std::ptr::{self, NonNull};

use super::gemm::{ComputeType, Frame, GemmTypes, Operand, ScaleType, ScaleValue, frame};
use super::matrix::Layout;
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::runtime::{
    Device, DeviceBuffer, DeviceGuard, DeviceSlice, DeviceSliceMut, Stream, check_device,
};
use crate::sys::cublas::{
    self, CublasLt, cublasComputeType_t, cublasLtContext, cublasLtEpilogue_t, cublasLtHandle_t,
    cublasLtMatmulDescAttributes_t as DescAttr, cublasLtMatmulDescOpaque_t,
    cublasLtMatmulHeuristicResult_t, cublasLtMatmulPreferenceAttributes_t as PrefAttr,
    cublasLtMatmulPreferenceOpaque_t, cublasLtMatrixLayoutAttribute_t as LayoutAttr,
    cublasLtMatrixLayoutOpaque_t, cublasLtOrder_t, cublasOperation_t, cublasStatus_t,
};
use crate::sys::cudart::cudaDataType_t;

// ---------------------------------------------------------------------------
// The checked call path for cuBLASLt

/// cuBLASLt's function table, or the load error.
pub(crate) fn cublas_lt() -> Result<&'static CublasLt> {
    Ok(cublas::load_lt()?)
}

fn text(p: *const c_char) -> String {
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
trait AttrValue: Copy {}
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

fn expect_size(call: &str, written: usize, want: usize) -> Result<()> {
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

// ---------------------------------------------------------------------------
// LtHandle

/// A cuBLASLt handle (`cublasLtHandle_t`), bound to one [`Stream`], owning
/// the workspace its matmuls use.
///
/// # Threads
/// `Send`, not `Sync`, for the same reasons as the cuBLAS
/// [`Handle`](super::Handle): NVIDIA documents the library as thread safe
/// but advises one handle per thread, and the stream and workspace here
/// change only through `&mut self`.
pub struct LtHandle {
    raw: NonNull<cublasLtContext>,
    stream: Stream,
    /// The device current at creation; the workspace is allocated there.
    device: Device,
    /// Freed in the order of `stream`, after the matmuls that used it.
    workspace: Option<DeviceBuffer<u8>>,
    owned: bool,
}

// SAFETY: cuBLAS documents (cuBLAS Library guide, "Thread Safety") that the
// library, cuBLASLt included, is thread safe and may be called from several
// host threads; moving a handle to another thread is allowed. `LtHandle` is
// not `Sync` (one user at a time, as NVIDIA advises). Its stream and
// workspace are `Send`.
unsafe impl Send for LtHandle {}

impl fmt::Debug for LtHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LtHandle")
            .field("raw", &self.raw)
            .field("stream", &self.stream)
            .field("device", &self.device.ordinal())
            .field("workspace_bytes", &self.workspace_size())
            .finish()
    }
}

impl LtHandle {
    /// Create a handle on the current device, bound to `stream`, with the
    /// workspace NVIDIA recommends for the device
    /// ([`Handle::recommended_workspace_size`](super::Handle::recommended_workspace_size)).
    ///
    /// # Errors
    /// [`Error::Cublas`] from `cublasLtCreate` (without a usable device:
    /// `CUBLAS_STATUS_NOT_INITIALIZED`); [`Error::Cuda`]; [`Error::Load`].
    #[doc(alias = "cublasLtCreate")]
    pub fn new(stream: &Stream) -> Result<Self> {
        let mut h = Self::with_workspace(stream, 0)?;
        let (major, _) = h.device.compute_capability()?;
        h.set_workspace(super::Handle::recommended_workspace_size(major))?;
        Ok(h)
    }

    /// Create a handle bound to `stream` with a workspace of `bytes` bytes
    /// (0: none; only algorithms that need no workspace are chosen).
    ///
    /// # Errors
    /// As [`LtHandle::new`].
    #[doc(alias = "cublasLtCreate")]
    pub fn with_workspace(stream: &Stream, bytes: usize) -> Result<Self> {
        crate::runtime::check_stream_thread("the stream of a cuBLASLt handle", stream)?;
        let api = cublas_lt()?;
        let mut raw: cublasLtHandle_t = ptr::null_mut();
        // SAFETY: `raw` is a valid, writable out-pointer.
        unsafe { lt_call!(api, cublasLtCreate(&mut raw)) }?;
        let raw = NonNull::new(raw)
            .ok_or_else(|| Error::invalid("handle", "cublasLtCreate returned null", "null"))?;
        let device = match Device::current() {
            Ok(d) => d,
            Err(e) => {
                // SAFETY: `raw` was just created and is destroyed once.
                let _ = unsafe { api.cublasLtDestroy(raw.as_ptr()) };
                return Err(e);
            }
        };
        let mut h = LtHandle {
            raw,
            stream: stream.clone(),
            device,
            workspace: None,
            owned: true,
        };
        check_lt_stream(device, stream)?;
        h.set_workspace(bytes)?;
        Ok(h)
    }

    /// Take ownership of a handle created elsewhere (destroyed on drop).
    ///
    /// On error the raw handle has been destroyed (do not destroy it again).
    ///
    /// # Safety
    /// `raw` must be a valid handle from `cublasLtCreate` that nobody else
    /// destroys or uses while this `LtHandle` lives.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for null; [`Error::Cuda`] allocating the workspace.
    pub unsafe fn from_raw(
        raw: cublasLtHandle_t,
        stream: &Stream,
        workspace: usize,
    ) -> Result<Self> {
        let raw = NonNull::new(raw)
            .ok_or_else(|| Error::invalid("raw", "must be a non-null cublasLtHandle_t", "null"))?;
        let device = match Device::current() {
            Ok(d) => d,
            Err(e) => {
                if let Ok(api) = cublas_lt() {
                    // SAFETY: we own `raw` (the caller's contract) and destroy it
                    // once, as the doc promises on error.
                    let _ = unsafe { api.cublasLtDestroy(raw.as_ptr()) };
                }
                return Err(e);
            }
        };
        let mut h = LtHandle {
            raw,
            stream: stream.clone(),
            device,
            workspace: None,
            owned: true,
        };
        check_lt_stream(device, stream)?;
        h.set_workspace(workspace)?;
        Ok(h)
    }

    /// Give up ownership; the caller must destroy the handle
    /// (`cublasLtDestroy`). The workspace is freed after the matmuls queued
    /// on the handle's stream. A cuBLASLt handle is not bound to a stream
    /// (each `cublasLtMatmul` names one), so only the raw handle is returned.
    pub fn into_raw(mut self) -> cublasLtHandle_t {
        self.owned = false;
        self.raw.as_ptr()
    }

    /// The device current when the handle was created. Every matmul and
    /// heuristic query runs with it current, its workspace is allocated
    /// there, and the stream and buffers must belong to it.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Check that the handle's stream may be used from this thread, then
    /// make the handle's device current until the guard drops (see
    /// [`Handle::enter`](super::Handle::enter)).
    ///
    /// # Errors
    /// [`Error::WrongThread`]; [`Error::Cuda`] when the device cannot be
    /// made current.
    pub fn enter(&self) -> Result<DeviceGuard> {
        crate::runtime::check_stream_thread("the stream of a cuBLASLt handle", &self.stream)?;
        self.device.guard()
    }

    /// The raw handle, valid while `self` lives.
    pub fn as_raw(&self) -> cublasLtHandle_t {
        self.raw.as_ptr()
    }

    /// The stream matmuls are queued on.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Queue later matmuls on `stream`; its work first waits for what is
    /// queued on the old stream (which may still use the workspace).
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] for a stream of another device;
    /// [`Error::WrongThread`]; [`Error::Cuda`] from the ordering event.
    pub fn set_stream(&mut self, stream: &Stream) -> Result<()> {
        check_lt_stream(self.device, stream)?;
        if *stream != self.stream && self.workspace.is_some() {
            stream.wait_for(&self.stream)?;
        }
        self.stream = stream.clone();
        Ok(())
    }

    /// Bytes of workspace each matmul may use.
    pub fn workspace_size(&self) -> usize {
        self.workspace.as_ref().map_or(0, DeviceBuffer::len)
    }

    /// Replace the workspace with one of `bytes` bytes (0: none), allocated
    /// on the handle's [`device`](LtHandle::device). The old one is freed in
    /// the order of the handle's stream, after the matmuls queued there.
    /// Plans made for a larger workspace fail at run with an error saying so.
    ///
    /// # Errors
    /// [`Error::Cuda`] when the allocation fails.
    pub fn set_workspace(&mut self, bytes: usize) -> Result<()> {
        let new = if bytes == 0 {
            None
        } else {
            let _on = self.device.guard()?;
            Some(DeviceBuffer::<u8>::alloc(bytes).map_err(|e| {
                e.with_context(format!("allocating a {bytes}-byte cuBLASLt workspace"))
            })?)
        };
        if let Some(old) = mem::replace(&mut self.workspace, new) {
            old.destroy_after(&self.stream)?;
        }
        Ok(())
    }

    /// The workspace's device pointer (null when none). Only the library
    /// writes through it, in stream order.
    fn workspace_ptr(&self) -> *mut c_void {
        self.workspace
            .as_ref()
            .map_or(ptr::null_mut(), |w| w.as_raw().cast_mut())
    }

    /// Destroy the handle now, reporting cuBLASLt's status.
    ///
    /// # Errors
    /// [`Error::Cublas`] from `cublasLtDestroy`; [`Error::Cuda`] from freeing the workspace.
    #[doc(alias = "cublasLtDestroy")]
    pub fn destroy(mut self) -> Result<()> {
        self.owned = false;
        let _on = self.device.guard()?;
        let api = cublas_lt()?;
        // SAFETY: we own the handle; `owned` is cleared so Drop will not
        // destroy it again.
        let r = unsafe { lt_call!(api, cublasLtDestroy(self.raw.as_ptr())) };
        let w = match self.workspace.take() {
            Some(ws) => ws.destroy_after(&self.stream),
            None => Ok(()),
        };
        r.and(w)
    }
}

/// A cuBLASLt handle of `device` may only queue on a stream of `device`,
/// usable from this thread.
fn check_lt_stream(device: Device, stream: &Stream) -> Result<()> {
    crate::runtime::check_stream_thread("the stream of a cuBLASLt handle", stream)?;
    check_device(
        || "the stream of a cuBLASLt handle".to_string(),
        device,
        stream.device(),
    )
}

impl Drop for LtHandle {
    fn drop(&mut self) {
        // On the handle's device (nothing changes if that fails).
        let _on = self.device.guard();
        if self.owned
            && let Ok(api) = cublas_lt()
        {
            // SAFETY: we own the handle and destroy it once; the status is
            // ignored (Drop must not fail).
            let _ = unsafe { api.cublasLtDestroy(self.raw.as_ptr()) };
        }
        if let Some(ws) = self.workspace.take() {
            // After the matmuls queued on the handle's stream; ignored on failure.
            let _ = ws.destroy_after(&self.stream);
        }
    }
}

// ---------------------------------------------------------------------------
// Descriptors (host objects: no device needed)

macro_rules! descriptor {
    (
        $(#[$doc:meta])*
        $name:ident, $opaque:ty, $raw:ty, $destroy:ident, $attr:ty, $set:ident, $get:ident
    ) => {
        $(#[$doc])*
        pub struct $name {
            raw: NonNull<$opaque>,
        }

        // SAFETY: the descriptor is a host-side parameter block (the header
        // defines its opaque type as a plain array of u64 that the `*Init`
        // functions fill in caller memory); it has no thread affinity, and
        // `&mut self` is needed to change it.
        unsafe impl Send for $name {}

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({:p})"), self.raw)
            }
        }

        impl Drop for $name {
            fn drop(&mut self) {
                if let Ok(api) = cublas_lt() {
                    // SAFETY: we own the descriptor and destroy it once; the
                    // status is ignored (Drop must not fail).
                    let _ = unsafe { api.$destroy(self.raw.as_ptr()) };
                }
            }
        }

        impl $name {
            /// The raw descriptor, valid while `self` lives.
            pub fn as_raw(&self) -> $raw {
                self.raw.as_ptr()
            }

            fn wrap(raw: $raw, call: &str) -> Result<Self> {
                NonNull::new(raw)
                    .map(|raw| $name { raw })
                    .ok_or_else(|| Error::invalid("descriptor", format!("{call} returned null"), "null"))
            }

            fn set<V: AttrValue>(&mut self, attr: $attr, v: V) -> Result<()> {
                let api = cublas_lt()?;
                // SAFETY: the descriptor is valid; `v` is plain data of exactly
                // the size passed, read during the call.
                unsafe {
                    lt_call!(
                        api,
                        $set(
                            self.raw.as_ptr(),
                            attr,
                            (&v as *const V).cast::<c_void>(),
                            mem::size_of::<V>(),
                        )
                    )
                }
                .map_err(|e| e.with_context(format!("attribute {}", attr.0)))
            }

            fn get<V: AttrValue>(&self, attr: $attr, mut v: V) -> Result<V> {
                let api = cublas_lt()?;
                let mut written = 0usize;
                // SAFETY: the descriptor is valid; `v` is writable plain data of
                // the size passed (any bit pattern is a valid V); `written` is a
                // valid out-pointer.
                unsafe {
                    lt_call!(
                        api,
                        $get(
                            self.raw.as_ptr(),
                            attr,
                            (&mut v as *mut V).cast::<c_void>(),
                            mem::size_of::<V>(),
                            &mut written,
                        )
                    )
                }
                .map_err(|e| e.with_context(format!("attribute {}", attr.0)))?;
                expect_size(stringify!($get), written, mem::size_of::<V>())?;
                Ok(v)
            }
        }
    };
}

descriptor!(
    /// A matmul descriptor (`cublasLtMatmulDesc_t`): compute and scale
    /// types, transposes, epilogue and its pointers.
    MatmulDesc,
    cublasLtMatmulDescOpaque_t,
    cublas::cublasLtMatmulDesc_t,
    cublasLtMatmulDescDestroy,
    DescAttr,
    cublasLtMatmulDescSetAttribute,
    cublasLtMatmulDescGetAttribute
);

descriptor!(
    /// A matrix layout descriptor (`cublasLtMatrixLayout_t`): type, rows,
    /// columns, leading dimension, order and batch of a stored matrix.
    LtMatrixLayout,
    cublasLtMatrixLayoutOpaque_t,
    cublas::cublasLtMatrixLayout_t,
    cublasLtMatrixLayoutDestroy,
    LayoutAttr,
    cublasLtMatrixLayoutSetAttribute,
    cublasLtMatrixLayoutGetAttribute
);

descriptor!(
    /// A matmul preference (`cublasLtMatmulPreference_t`): the limits the
    /// heuristic's algorithm must respect (workspace, alignment).
    MatmulPreference,
    cublasLtMatmulPreferenceOpaque_t,
    cublas::cublasLtMatmulPreference_t,
    cublasLtMatmulPreferenceDestroy,
    PrefAttr,
    cublasLtMatmulPreferenceSetAttribute,
    cublasLtMatmulPreferenceGetAttribute
);

impl MatmulDesc {
    /// A descriptor for `compute` accumulation with alpha/beta of `scale`.
    ///
    /// # Errors
    /// [`Error::Cublas`]; [`Error::Load`].
    #[doc(alias = "cublasLtMatmulDescCreate")]
    pub fn new(compute: cublasComputeType_t, scale: cudaDataType_t) -> Result<Self> {
        let api = cublas_lt()?;
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; the codes are plain values the
        // library checks.
        unsafe { lt_call!(api, cublasLtMatmulDescCreate(&mut raw, compute, scale)) }?;
        Self::wrap(raw, "cublasLtMatmulDescCreate")
    }

    /// `CUBLASLT_MATMUL_DESC_COMPUTE_TYPE`.
    ///
    /// # Errors
    /// [`Error::Cublas`].
    pub fn compute_type(&self) -> Result<cublasComputeType_t> {
        self.get(
            DescAttr::CUBLASLT_MATMUL_DESC_COMPUTE_TYPE,
            cublasComputeType_t(0),
        )
    }

    /// `CUBLASLT_MATMUL_DESC_SCALE_TYPE`.
    ///
    /// # Errors
    /// [`Error::Cublas`].
    pub fn scale_type(&self) -> Result<cudaDataType_t> {
        self.get(DescAttr::CUBLASLT_MATMUL_DESC_SCALE_TYPE, cudaDataType_t(0))
    }

    /// `CUBLASLT_MATMUL_DESC_TRANSA` and `_TRANSB`.
    ///
    /// # Errors
    /// [`Error::Cublas`].
    pub fn transposes(&self) -> Result<(cublasOperation_t, cublasOperation_t)> {
        let zero = cublasOperation_t::CUBLAS_OP_N;
        Ok((
            self.get(DescAttr::CUBLASLT_MATMUL_DESC_TRANSA, zero)?,
            self.get(DescAttr::CUBLASLT_MATMUL_DESC_TRANSB, zero)?,
        ))
    }

    /// Set `CUBLASLT_MATMUL_DESC_TRANSA` and `_TRANSB`.
    ///
    /// # Errors
    /// [`Error::Cublas`].
    pub fn set_transposes(&mut self, a: cublasOperation_t, b: cublasOperation_t) -> Result<()> {
        self.set(DescAttr::CUBLASLT_MATMUL_DESC_TRANSA, a)?;
        self.set(DescAttr::CUBLASLT_MATMUL_DESC_TRANSB, b)
    }

    /// `CUBLASLT_MATMUL_DESC_EPILOGUE`.
    ///
    /// # Errors
    /// [`Error::Cublas`].
    pub fn epilogue(&self) -> Result<cublasLtEpilogue_t> {
        self.get(
            DescAttr::CUBLASLT_MATMUL_DESC_EPILOGUE,
            cublasLtEpilogue_t(0),
        )
    }

    /// Set `CUBLASLT_MATMUL_DESC_EPILOGUE`.
    ///
    /// # Errors
    /// [`Error::Cublas`].
    pub fn set_epilogue(&mut self, e: cublasLtEpilogue_t) -> Result<()> {
        self.set(DescAttr::CUBLASLT_MATMUL_DESC_EPILOGUE, e)
    }

    /// `CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD` and `_AUX_BATCH_STRIDE`.
    ///
    /// # Errors
    /// [`Error::Cublas`].
    pub fn aux_ld_and_stride(&self) -> Result<(i64, i64)> {
        Ok((
            self.get(DescAttr::CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, 0i64)?,
            self.get(
                DescAttr::CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE,
                0i64,
            )?,
        ))
    }

    /// `CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE`.
    ///
    /// # Errors
    /// [`Error::Cublas`].
    pub fn bias_batch_stride(&self) -> Result<i64> {
        self.get(DescAttr::CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, 0i64)
    }

    /// `CUBLASLT_MATMUL_DESC_BIAS_POINTER` and `_EPILOGUE_AUX_POINTER` (as
    /// addresses; this crate sets them itself).
    ///
    /// # Errors
    /// [`Error::Cublas`].
    pub fn epilogue_pointers(&self) -> Result<(usize, usize)> {
        Ok((
            self.get(DescAttr::CUBLASLT_MATMUL_DESC_BIAS_POINTER, 0usize)?,
            self.get(DescAttr::CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, 0usize)?,
        ))
    }
}

impl LtMatrixLayout {
    /// A column-major layout of `rows` x `cols` elements of `dtype`, leading
    /// dimension `ld`.
    ///
    /// # Errors
    /// [`Error::Cublas`]; [`Error::Load`].
    #[doc(alias = "cublasLtMatrixLayoutCreate")]
    pub fn new(dtype: cudaDataType_t, rows: u64, cols: u64, ld: i64) -> Result<Self> {
        let api = cublas_lt()?;
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; the rest are plain values.
        unsafe {
            lt_call!(
                api,
                cublasLtMatrixLayoutCreate(&mut raw, dtype, rows, cols, ld)
            )
        }?;
        Self::wrap(raw, "cublasLtMatrixLayoutCreate")
    }

    /// Make it a strided batch (`CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT`,
    /// `_STRIDED_BATCH_OFFSET`, in elements).
    ///
    /// # Errors
    /// [`Error::Cublas`].
    pub fn set_batch(&mut self, count: i32, stride: i64) -> Result<()> {
        self.set(LayoutAttr::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, count)?;
        self.set(
            LayoutAttr::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
            stride,
        )
    }

    /// `(type, rows, cols, ld)`.
    ///
    /// # Errors
    /// [`Error::Cublas`].
    pub fn shape(&self) -> Result<(cudaDataType_t, u64, u64, i64)> {
        Ok((
            self.get(LayoutAttr::CUBLASLT_MATRIX_LAYOUT_TYPE, cudaDataType_t(0))?,
            self.get(LayoutAttr::CUBLASLT_MATRIX_LAYOUT_ROWS, 0u64)?,
            self.get(LayoutAttr::CUBLASLT_MATRIX_LAYOUT_COLS, 0u64)?,
            self.get(LayoutAttr::CUBLASLT_MATRIX_LAYOUT_LD, 0i64)?,
        ))
    }

    /// `(batch count, batch stride)`.
    ///
    /// # Errors
    /// [`Error::Cublas`].
    pub fn batch(&self) -> Result<(i32, i64)> {
        Ok((
            self.get(LayoutAttr::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, 0i32)?,
            self.get(
                LayoutAttr::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                0i64,
            )?,
        ))
    }

    /// `CUBLASLT_MATRIX_LAYOUT_ORDER`.
    ///
    /// # Errors
    /// [`Error::Cublas`].
    pub fn order(&self) -> Result<cublasLtOrder_t> {
        self.get(LayoutAttr::CUBLASLT_MATRIX_LAYOUT_ORDER, cublasLtOrder_t(0))
    }
}

impl MatmulPreference {
    /// A preference with cuBLASLt's defaults (no workspace, 256-byte alignment).
    ///
    /// # Errors
    /// [`Error::Cublas`]; [`Error::Load`].
    #[doc(alias = "cublasLtMatmulPreferenceCreate")]
    pub fn new() -> Result<Self> {
        let api = cublas_lt()?;
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        unsafe { lt_call!(api, cublasLtMatmulPreferenceCreate(&mut raw)) }?;
        Self::wrap(raw, "cublasLtMatmulPreferenceCreate")
    }

    /// `CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES`.
    ///
    /// # Errors
    /// [`Error::Cublas`].
    pub fn max_workspace(&self) -> Result<u64> {
        self.get(PrefAttr::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, 0u64)
    }

    /// Set `CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES`.
    ///
    /// # Errors
    /// [`Error::Cublas`].
    pub fn set_max_workspace(&mut self, bytes: u64) -> Result<()> {
        self.set(PrefAttr::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, bytes)
    }

    /// `CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES`.
    ///
    /// # Errors
    /// [`Error::Cublas`].
    pub fn min_alignment(&self) -> Result<[u32; 4]> {
        Ok([
            self.get(PrefAttr::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, 0u32)?,
            self.get(PrefAttr::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, 0u32)?,
            self.get(PrefAttr::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, 0u32)?,
            self.get(PrefAttr::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, 0u32)?,
        ])
    }

    /// Set the minimum alignment of all four matrices, in bytes.
    ///
    /// # Errors
    /// [`Error::Cublas`].
    pub fn set_min_alignment(&mut self, bytes: u32) -> Result<()> {
        self.set(PrefAttr::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, bytes)?;
        self.set(PrefAttr::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, bytes)?;
        self.set(PrefAttr::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, bytes)?;
        self.set(PrefAttr::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, bytes)
    }
}

// ---------------------------------------------------------------------------
// Epilogues

/// What cuBLASLt does to `alpha·A·B + beta·C` before storing D
/// (`cublasLtEpilogue_t`). The vectors' lengths and the auxiliary buffer
/// are described in the [`blas` module docs](crate::blas#cublaslt-frames-and-epilogue-vectors)
/// and given by [`MatmulShape`].
///
/// GELU is the tanh approximation,
/// `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Epilogue {
    /// `CUBLASLT_EPILOGUE_DEFAULT`: D = alpha·A·B + beta·C.
    #[default]
    None,
    /// `CUBLASLT_EPILOGUE_RELU`: max(x, 0).
    Relu,
    /// `CUBLASLT_EPILOGUE_RELU_AUX`: ReLU, and the ReLU bit-mask written
    /// to the auxiliary output (for [`Epilogue::DRelu`]).
    ReluAux,
    /// `CUBLASLT_EPILOGUE_BIAS`: x + bias.
    Bias,
    /// `CUBLASLT_EPILOGUE_RELU_BIAS`: max(x + bias, 0).
    ReluBias,
    /// `CUBLASLT_EPILOGUE_RELU_AUX_BIAS`: ReLU of x + bias, with the bit-mask.
    ReluAuxBias,
    /// `CUBLASLT_EPILOGUE_GELU`: gelu(x).
    Gelu,
    /// `CUBLASLT_EPILOGUE_GELU_AUX`: gelu(x), and x (the GELU input)
    /// written to the auxiliary output (for [`Epilogue::DGelu`]).
    GeluAux,
    /// `CUBLASLT_EPILOGUE_GELU_BIAS`: gelu(x + bias).
    GeluBias,
    /// `CUBLASLT_EPILOGUE_GELU_AUX_BIAS`: gelu(x + bias), with x + bias
    /// written to the auxiliary output.
    GeluAuxBias,
    /// `CUBLASLT_EPILOGUE_DRELU`: x · relu'(pre), reading the bit-mask a
    /// ReLU-aux forward wrote.
    DRelu,
    /// `CUBLASLT_EPILOGUE_DRELU_BGRAD`: as [`Epilogue::DRelu`], and the
    /// bias gradient (the sum of D along its non-contiguous dimension).
    DReluBgrad,
    /// `CUBLASLT_EPILOGUE_DGELU`: x · gelu'(pre), reading the GELU input a
    /// GELU-aux forward wrote.
    DGelu,
    /// `CUBLASLT_EPILOGUE_DGELU_BGRAD`: as [`Epilogue::DGelu`], and the
    /// bias gradient.
    DGeluBgrad,
    /// `CUBLASLT_EPILOGUE_BGRADA` (or `_BGRADB` when the operands are
    /// swapped): D = alpha·A·B + beta·C and the gradient Σₖ A[i, k]
    /// (length m).
    BgradA,
    /// `CUBLASLT_EPILOGUE_BGRADB` (or `_BGRADA` when swapped): D as above
    /// and Σₖ B[k, j] (length n).
    BgradB,
}

/// What an epilogue's auxiliary buffer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuxKind {
    /// One bit per element of D: whether the ReLU input was positive.
    ReluMask,
    /// The GELU input, one element of D's type per element of D.
    GeluInput,
}

/// Which vector an epilogue reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BiasUse {
    /// A bias vector read (`EpilogueArgs::bias`).
    Bias,
    /// A bias gradient written (`EpilogueArgs::bias_grad`).
    Gradient,
}

impl Epilogue {
    /// Every epilogue.
    pub const ALL: [Epilogue; 16] = [
        Epilogue::None,
        Epilogue::Relu,
        Epilogue::ReluAux,
        Epilogue::Bias,
        Epilogue::ReluBias,
        Epilogue::ReluAuxBias,
        Epilogue::Gelu,
        Epilogue::GeluAux,
        Epilogue::GeluBias,
        Epilogue::GeluAuxBias,
        Epilogue::DRelu,
        Epilogue::DReluBgrad,
        Epilogue::DGelu,
        Epilogue::DGeluBgrad,
        Epilogue::BgradA,
        Epilogue::BgradB,
    ];

    /// The cuBLASLt constant, in the library's frame (`swapped`: computing
    /// Dᵀ = Bᵀ·Aᵀ, which exchanges BGRADA and BGRADB).
    pub fn to_raw(self, swapped: bool) -> cublasLtEpilogue_t {
        use cublasLtEpilogue_t as E;
        match self {
            Epilogue::None => E::CUBLASLT_EPILOGUE_DEFAULT,
            Epilogue::Relu => E::CUBLASLT_EPILOGUE_RELU,
            Epilogue::ReluAux => E::CUBLASLT_EPILOGUE_RELU_AUX,
            Epilogue::Bias => E::CUBLASLT_EPILOGUE_BIAS,
            Epilogue::ReluBias => E::CUBLASLT_EPILOGUE_RELU_BIAS,
            Epilogue::ReluAuxBias => E::CUBLASLT_EPILOGUE_RELU_AUX_BIAS,
            Epilogue::Gelu => E::CUBLASLT_EPILOGUE_GELU,
            Epilogue::GeluAux => E::CUBLASLT_EPILOGUE_GELU_AUX,
            Epilogue::GeluBias => E::CUBLASLT_EPILOGUE_GELU_BIAS,
            Epilogue::GeluAuxBias => E::CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
            Epilogue::DRelu => E::CUBLASLT_EPILOGUE_DRELU,
            Epilogue::DReluBgrad => E::CUBLASLT_EPILOGUE_DRELU_BGRAD,
            Epilogue::DGelu => E::CUBLASLT_EPILOGUE_DGELU,
            Epilogue::DGeluBgrad => E::CUBLASLT_EPILOGUE_DGELU_BGRAD,
            Epilogue::BgradA if swapped => E::CUBLASLT_EPILOGUE_BGRADB,
            Epilogue::BgradA => E::CUBLASLT_EPILOGUE_BGRADA,
            Epilogue::BgradB if swapped => E::CUBLASLT_EPILOGUE_BGRADA,
            Epilogue::BgradB => E::CUBLASLT_EPILOGUE_BGRADB,
        }
    }

    /// The vector the epilogue reads or writes, if any.
    pub fn bias_use(self) -> Option<BiasUse> {
        match self {
            Epilogue::Bias
            | Epilogue::ReluBias
            | Epilogue::ReluAuxBias
            | Epilogue::GeluBias
            | Epilogue::GeluAuxBias => Some(BiasUse::Bias),
            Epilogue::DReluBgrad | Epilogue::DGeluBgrad | Epilogue::BgradA | Epilogue::BgradB => {
                Some(BiasUse::Gradient)
            }
            _ => None,
        }
    }

    /// The auxiliary buffer's contents and whether the epilogue writes it
    /// (`true`, forward) or reads it (`false`, backward).
    pub fn aux(self) -> Option<(AuxKind, bool)> {
        match self {
            Epilogue::ReluAux | Epilogue::ReluAuxBias => Some((AuxKind::ReluMask, true)),
            Epilogue::DRelu | Epilogue::DReluBgrad => Some((AuxKind::ReluMask, false)),
            Epilogue::GeluAux | Epilogue::GeluAuxBias => Some((AuxKind::GeluInput, true)),
            Epilogue::DGelu | Epilogue::DGeluBgrad => Some((AuxKind::GeluInput, false)),
            _ => None,
        }
    }
}

impl fmt::Display for Epilogue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

// ---------------------------------------------------------------------------
// Spec, shape and key

/// Everything a [`MatmulPlan`] is built from: D = epilogue(alpha·A·B +
/// beta·D), with the layouts of A, B and D (D is also C: in place), the
/// compute type, the epilogue and the alignment (bytes) every device
/// pointer will have.
///
/// ```
/// use cudnn::blas::{Epilogue, Layout, MatmulSpec};
/// // Row-major Y (32 x 64) = gelu(X (32 x 128) · Wᵀ + bias), W 64 x 128.
/// let spec = MatmulSpec::new(
///     Layout::row_major(32, 128),
///     Layout::row_major(64, 128).t(),
///     Layout::row_major(32, 64),
/// )
/// .with_epilogue(Epilogue::GeluBias);
/// let shape = spec.check::<f32, f32>()?;
/// assert_eq!(shape.bias_len(), 64); // one per feature (column of row-major Y)
/// # Ok::<(), cudnn::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MatmulSpec {
    a: Layout,
    b: Layout,
    d: Layout,
    compute: ComputeType,
    epilogue: Epilogue,
    alignment: usize,
}

impl MatmulSpec {
    /// The alignment assumed unless told otherwise: 256 bytes, what
    /// `cudaMalloc` gives and cuBLASLt's default.
    pub const DEFAULT_ALIGNMENT: usize = 256;

    /// D = A·B, default compute type, no epilogue, 256-byte alignment.
    pub fn new(a: Layout, b: Layout, d: Layout) -> Self {
        MatmulSpec {
            a,
            b,
            d,
            compute: ComputeType::Default,
            epilogue: Epilogue::None,
            alignment: Self::DEFAULT_ALIGNMENT,
        }
    }

    /// With compute type `c`.
    pub fn with_compute(mut self, c: ComputeType) -> Self {
        self.compute = c;
        self
    }

    /// With epilogue `e`.
    pub fn with_epilogue(mut self, e: Epilogue) -> Self {
        self.epilogue = e;
        self
    }

    /// With every device pointer (A, B, D, bias, aux) aligned to `bytes`
    /// (a power of two up to 256): lower it to pass sub-slices; algorithms
    /// needing more are then not chosen. Run checks it.
    pub fn with_alignment(mut self, bytes: usize) -> Self {
        self.alignment = bytes;
        self
    }

    /// The layouts `(a, b, d)`.
    pub fn layouts(&self) -> (Layout, Layout, Layout) {
        (self.a, self.b, self.d)
    }

    /// The compute type (as given).
    pub fn compute(&self) -> ComputeType {
        self.compute
    }

    /// The epilogue.
    pub fn epilogue(&self) -> Epilogue {
        self.epilogue
    }

    /// The pointer alignment, in bytes.
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// Check the spec for inputs `A` and output `D` (no library call): the
    /// layouts as for [`GemmPlan::new`](super::GemmPlan::new), the compute
    /// type, the alignment; and work out the epilogue's vector and
    /// auxiliary sizes.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] or [`Error::Mismatch`] naming the argument.
    pub fn check<A: GemmTypes<D>, D: DataType>(&self) -> Result<MatmulShape> {
        let f = frame(&self.a, &self.b, &self.d)?;
        let (compute, raw_compute, scale) = self.compute.resolve::<A, D>()?;
        if !self.alignment.is_power_of_two() || self.alignment > 256 {
            return Err(Error::invalid(
                "alignment",
                "must be a power of two, at most 256 (bytes)",
                self.alignment,
            ));
        }
        for (name, v) in [("m", f.m), ("n", f.n), ("k", f.k)] {
            u64::try_from(v).map_err(|_| Error::invalid(name, "must fit in u64", v))?;
        }
        for (name, o) in [
            ("first operand", f.first),
            ("second operand", f.second),
            ("d", f.out),
        ] {
            i64::try_from(o.ld)
                .map_err(|_| Error::invalid(format!("{name} ld"), "must fit in i64", o.ld))?;
            i64::try_from(o.stride).map_err(|_| {
                Error::invalid(format!("{name} batch_stride"), "must fit in i64", o.stride)
            })?;
        }
        i32::try_from(f.batch)
            .map_err(|_| Error::invalid("batch_count", "must fit in i32", f.batch))?;
        let bias_len = match self.epilogue {
            Epilogue::BgradA => self.d.rows(),
            Epilogue::BgradB => self.d.cols(),
            _ => f.m,
        };
        let mut shape = MatmulShape {
            frame: f,
            epilogue: self.epilogue,
            compute,
            raw_compute,
            scale,
            bias_len: 0,
            bias_stride: 0,
            bias_total: 0,
            aux_ld: 0,
            aux_stride: 0,
            aux_bytes: 0,
        };
        let overflow = |what: &str| {
            Error::invalid(
                "epilogue",
                format!("{what} overflows usize"),
                self.describe(),
            )
        };
        match self.epilogue.bias_use() {
            Some(BiasUse::Bias) => {
                // One vector, broadcast over the batch (stride 0).
                shape.bias_len = bias_len;
                shape.bias_total = bias_len;
            }
            Some(BiasUse::Gradient) => {
                // One gradient per matrix of the batch.
                shape.bias_len = bias_len;
                shape.bias_stride = if f.batch > 1 { bias_len } else { 0 };
                shape.bias_total = bias_len
                    .checked_mul(f.batch)
                    .ok_or_else(|| overflow("bias length"))?;
            }
            None => {}
        }
        if let Some((kind, _)) = self.epilogue.aux() {
            // Leading dimension rules (cublasLt.h, EPILOGUE_AUX_LD): a multiple
            // of 128 bits for the ReLU mask, of 8 elements for the GELU input,
            // and no less than D's rows in the library frame.
            let (align, num, den) = match kind {
                AuxKind::ReluMask => (128, 1, 8),
                AuxKind::GeluInput => (8, D::SIZE, 1),
            };
            let ld =
                f.m.max(1)
                    .div_ceil(align)
                    .checked_mul(align)
                    .ok_or_else(|| overflow("aux ld"))?;
            let per = ld.checked_mul(f.n).ok_or_else(|| overflow("aux size"))?;
            let bytes = per
                .checked_mul(f.batch)
                .and_then(|e| e.checked_mul(num))
                .ok_or_else(|| overflow("aux size"))?
                / den;
            shape.aux_ld = ld;
            shape.aux_stride = if f.batch > 1 { per } else { 0 };
            shape.aux_bytes = bytes;
            i64::try_from(per).map_err(|_| overflow("aux batch stride (i64)"))?;
        }
        Ok(shape)
    }

    /// A short description for errors.
    pub fn describe(&self) -> String {
        format!(
            "a {}, b {}, d {}, compute {:?}, epilogue {:?}, alignment {}",
            self.a, self.b, self.d, self.compute, self.epilogue, self.alignment
        )
    }
}

/// A checked [`MatmulSpec`]: the library's frame and the epilogue's sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MatmulShape {
    frame: Frame,
    epilogue: Epilogue,
    compute: ComputeType,
    raw_compute: cublasComputeType_t,
    scale: ScaleType,
    bias_len: usize,
    bias_stride: usize,
    bias_total: usize,
    aux_ld: usize,
    aux_stride: usize,
    aux_bytes: usize,
}

impl MatmulShape {
    /// Whether the library computes Dᵀ = Bᵀ·Aᵀ (D not column-contiguous).
    pub fn swaps_operands(&self) -> bool {
        self.frame.swap
    }

    /// `(m, n, k)` in the library's frame.
    pub fn dims(&self) -> (usize, usize, usize) {
        (self.frame.m, self.frame.n, self.frame.k)
    }

    /// Matrices in the batch.
    pub fn batch_count(&self) -> usize {
        self.frame.batch
    }

    /// The resolved compute type.
    pub fn compute(&self) -> ComputeType {
        self.compute
    }

    /// The `cublasComputeType_t`.
    pub fn compute_type(&self) -> cublasComputeType_t {
        self.raw_compute
    }

    /// The type alpha and beta are passed in.
    pub fn scale_type(&self) -> ScaleType {
        self.scale
    }

    /// The cuBLASLt epilogue constant used.
    pub fn raw_epilogue(&self) -> cublasLtEpilogue_t {
        self.epilogue.to_raw(self.frame.swap)
    }

    /// Length of the bias (or of one bias gradient); 0 when the epilogue
    /// has none.
    pub fn bias_len(&self) -> usize {
        self.bias_len
    }

    /// Elements the bias / bias-gradient buffer must hold (a gradient per
    /// matrix of a batch; a bias is shared by the batch).
    pub fn bias_buffer_len(&self) -> usize {
        self.bias_total
    }

    /// Leading dimension of the auxiliary buffer (bits for the ReLU mask,
    /// elements for the GELU input); 0 when there is none.
    pub fn aux_ld(&self) -> usize {
        self.aux_ld
    }

    /// Bytes the auxiliary buffer must hold (whole batch); 0 when none.
    pub fn aux_bytes(&self) -> usize {
        self.aux_bytes
    }

    /// Where logical element `(i, j)` of D's matrix `batch` sits in the
    /// auxiliary buffer: a bit index for the ReLU mask, an element index
    /// for the GELU input. `None` without an auxiliary buffer or out of range.
    pub fn aux_offset(&self, batch: usize, i: usize, j: usize) -> Option<usize> {
        let f = &self.frame;
        // D' = D (i, j) or Dᵀ (j, i), column-major with ld aux_ld.
        let (r, c) = if f.swap { (j, i) } else { (i, j) };
        if self.aux_ld == 0 || batch >= f.batch || r >= f.m || c >= f.n {
            return None;
        }
        let per = self.aux_ld.checked_mul(f.n)?;
        batch
            .checked_mul(per)?
            .checked_add(c.checked_mul(self.aux_ld)?)?
            .checked_add(r)
    }

    /// Floating-point operations of one run (`2·m·n·k·batch`).
    pub fn flops(&self) -> f64 {
        2.0 * self.frame.m as f64
            * self.frame.n as f64
            * self.frame.k as f64
            * self.frame.batch as f64
    }

    /// Check epilogue buffers (lengths in elements / bytes, `None` when not
    /// given) against this shape's epilogue: each buffer the epilogue uses
    /// given and long enough, and no other given. What
    /// [`MatmulPlan::run`] checks.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] or [`Error::Mismatch`] naming the buffer.
    pub fn check_epilogue_lengths(
        &self,
        bias: Option<usize>,
        bias_grad: Option<usize>,
        aux_out: Option<usize>,
        aux_in: Option<usize>,
    ) -> Result<()> {
        let e = self.epilogue;
        let want_bias = e.bias_use() == Some(BiasUse::Bias);
        let want_grad = e.bias_use() == Some(BiasUse::Gradient);
        let aux = e.aux();
        let want_out = matches!(aux, Some((_, true)));
        let want_in = matches!(aux, Some((_, false)));
        let checks = [
            ("bias", bias, want_bias, self.bias_total, "elements"),
            (
                "bias_grad",
                bias_grad,
                want_grad,
                self.bias_total,
                "elements",
            ),
            ("aux_out", aux_out, want_out, self.aux_bytes, "bytes"),
            ("aux_in", aux_in, want_in, self.aux_bytes, "bytes"),
        ];
        for (name, given, wanted, need, unit) in checks {
            match (given, wanted) {
                (Some(_), false) => {
                    return Err(Error::invalid(
                        format!("epilogue.{name}"),
                        format!("must be None for epilogue {e:?}"),
                        "a buffer",
                    ));
                }
                (None, true) => {
                    return Err(Error::invalid(
                        format!("epilogue.{name}"),
                        format!("epilogue {e:?} needs it ({need} {unit})"),
                        "None",
                    ));
                }
                (Some(len), true) if len < need => {
                    return Err(Error::mismatch(
                        format!("epilogue.{name} buffer length ({unit}) for epilogue {e:?}"),
                        format!(">= {need}"),
                        len,
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// The key a plan is cached under: the spec, the element types and the
/// workspace limit the algorithm was chosen for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PlanKey {
    spec: MatmulSpec,
    a_type: cudaDataType_t,
    d_type: cudaDataType_t,
    workspace: usize,
}

impl PlanKey {
    /// The key of `spec` for inputs `A`, output `D` and a handle with
    /// `workspace_limit` bytes of workspace.
    pub fn new<A: GemmTypes<D>, D: DataType>(spec: &MatmulSpec, workspace_limit: usize) -> Self {
        PlanKey {
            spec: *spec,
            a_type: A::CUDA,
            d_type: D::CUDA,
            workspace: workspace_limit,
        }
    }

    /// The spec.
    pub fn spec(&self) -> &MatmulSpec {
        &self.spec
    }

    /// The workspace limit.
    pub fn workspace_limit(&self) -> usize {
        self.workspace
    }
}

// ---------------------------------------------------------------------------
// Descriptors for a spec

/// The descriptors of one spec: the matmul descriptor (compute, scale,
/// transposes, epilogue, aux leading dimension), the layouts of the first
/// and second operand and of C/D as the library sees them, and the
/// preference (workspace limit, alignment). Host objects: building them
/// needs the library but no device.
#[derive(Debug)]
pub struct MatmulDescriptors {
    shape: MatmulShape,
    desc: MatmulDesc,
    first: LtMatrixLayout,
    second: LtMatrixLayout,
    out: LtMatrixLayout,
    pref: MatmulPreference,
    /// The addresses set as bias / aux pointers (placeholders until a run).
    bias_ptr: usize,
    aux_ptr: usize,
}

fn lt_layout(dtype: cudaDataType_t, o: &Operand, batch: usize) -> Result<LtMatrixLayout> {
    let u = |v: usize| u64::try_from(v).unwrap_or(u64::MAX);
    let i = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
    let mut l = LtMatrixLayout::new(dtype, u(o.rows), u(o.cols), i(o.ld))?;
    if batch > 1 {
        l.set_batch(i32::try_from(batch).unwrap_or(i32::MAX), i(o.stride))?;
    }
    Ok(l)
}

fn trans(t: bool) -> cublasOperation_t {
    if t {
        cublasOperation_t::CUBLAS_OP_T
    } else {
        cublasOperation_t::CUBLAS_OP_N
    }
}

impl MatmulDescriptors {
    /// Check `spec` for `A` and `D` and build its descriptors, with the
    /// preference limited to `workspace_limit` bytes. The bias and aux
    /// pointers are set to placeholders aligned exactly to the spec's
    /// alignment (the heuristic reads their alignment, never their
    /// contents); a run sets the real ones.
    ///
    /// # Errors
    /// As [`MatmulSpec::check`]; [`Error::Cublas`] from the descriptors.
    pub fn new<A: GemmTypes<D>, D: DataType>(
        spec: &MatmulSpec,
        workspace_limit: usize,
    ) -> Result<Self> {
        let shape = spec.check::<A, D>()?;
        let ctx = |e: Error| e.with_context(spec.describe());
        let f = &shape.frame;
        let mut desc = MatmulDesc::new(shape.raw_compute, shape.scale.to_raw()).map_err(ctx)?;
        desc.set_transposes(trans(f.first.transposed), trans(f.second.transposed))
            .map_err(ctx)?;
        desc.set_epilogue(shape.raw_epilogue()).map_err(ctx)?;
        let placeholder = spec.alignment;
        let (mut bias_ptr, mut aux_ptr) = (0, 0);
        if shape.epilogue.bias_use().is_some() {
            desc.set(DescAttr::CUBLASLT_MATMUL_DESC_BIAS_POINTER, placeholder)
                .map_err(ctx)?;
            bias_ptr = placeholder;
            if shape.bias_stride > 0 {
                let s = i64::try_from(shape.bias_stride).unwrap_or(i64::MAX);
                desc.set(DescAttr::CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, s)
                    .map_err(ctx)?;
            }
        }
        if shape.epilogue.aux().is_some() {
            desc.set(
                DescAttr::CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                placeholder,
            )
            .map_err(ctx)?;
            aux_ptr = placeholder;
            let i = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
            desc.set(
                DescAttr::CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                i(shape.aux_ld),
            )
            .map_err(ctx)?;
            if shape.aux_stride > 0 {
                desc.set(
                    DescAttr::CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE,
                    i(shape.aux_stride),
                )
                .map_err(ctx)?;
            }
        }
        let first = lt_layout(A::CUDA, &f.first, f.batch).map_err(ctx)?;
        let second = lt_layout(A::CUDA, &f.second, f.batch).map_err(ctx)?;
        let out = lt_layout(D::CUDA, &f.out, f.batch).map_err(ctx)?;
        let mut pref = MatmulPreference::new().map_err(ctx)?;
        pref.set_max_workspace(u64::try_from(workspace_limit).unwrap_or(u64::MAX))
            .map_err(ctx)?;
        pref.set_min_alignment(u32::try_from(spec.alignment).unwrap_or(256))
            .map_err(ctx)?;
        Ok(MatmulDescriptors {
            shape,
            desc,
            first,
            second,
            out,
            pref,
            bias_ptr,
            aux_ptr,
        })
    }

    /// The checked shape.
    pub fn shape(&self) -> &MatmulShape {
        &self.shape
    }

    /// The matmul descriptor.
    pub fn matmul_desc(&self) -> &MatmulDesc {
        &self.desc
    }

    /// The layout of the library's first operand (A, or Bᵀ when swapped).
    pub fn first_layout(&self) -> &LtMatrixLayout {
        &self.first
    }

    /// The layout of the library's second operand (B, or Aᵀ when swapped).
    pub fn second_layout(&self) -> &LtMatrixLayout {
        &self.second
    }

    /// The layout of C and D (D, or Dᵀ when swapped).
    pub fn output_layout(&self) -> &LtMatrixLayout {
        &self.out
    }

    /// The preference.
    pub fn preference(&self) -> &MatmulPreference {
        &self.pref
    }
}

// ---------------------------------------------------------------------------
// Plans

/// The epilogue's buffers for one run. Which ones an epilogue needs:
/// [`Epilogue::bias_use`] and [`Epilogue::aux`]; their sizes:
/// [`MatmulShape::bias_buffer_len`] and [`MatmulShape::aux_bytes`].
#[derive(Debug)]
pub struct EpilogueArgs<'a, D: DataType> {
    bias: Option<DeviceSlice<'a, D>>,
    bias_grad: Option<DeviceSliceMut<'a, D>>,
    aux_out: Option<DeviceSliceMut<'a, u8>>,
    aux_in: Option<DeviceSlice<'a, u8>>,
}

impl<D: DataType> Default for EpilogueArgs<'_, D> {
    fn default() -> Self {
        EpilogueArgs {
            bias: None,
            bias_grad: None,
            aux_out: None,
            aux_in: None,
        }
    }
}

impl<'a, D: DataType> EpilogueArgs<'a, D> {
    /// No buffers (epilogues None, Relu, Gelu).
    pub fn none() -> Self {
        Self::default()
    }

    /// With the bias vector read by the `*Bias` epilogues.
    pub fn bias(mut self, bias: impl Into<DeviceSlice<'a, D>>) -> Self {
        self.bias = Some(bias.into());
        self
    }

    /// With the bias gradient written by the `*Bgrad*` epilogues.
    pub fn bias_grad(mut self, grad: impl Into<DeviceSliceMut<'a, D>>) -> Self {
        self.bias_grad = Some(grad.into());
        self
    }

    /// With the auxiliary output written by the `*Aux*` epilogues.
    pub fn aux_out(mut self, aux: impl Into<DeviceSliceMut<'a, u8>>) -> Self {
        self.aux_out = Some(aux.into());
        self
    }

    /// With the auxiliary input read by `DRelu*` / `DGelu*`.
    pub fn aux_in(mut self, aux: impl Into<DeviceSlice<'a, u8>>) -> Self {
        self.aux_in = Some(aux.into());
        self
    }
}

fn check_aligned(name: &str, addr: usize, alignment: usize) -> Result<()> {
    if alignment > 0 && !addr.is_multiple_of(alignment) {
        return Err(Error::invalid(
            name,
            format!(
                "device pointer must be aligned to {alignment} bytes, the plan's alignment (lower it with MatmulSpec::with_alignment)"
            ),
            format!("{addr:#x}"),
        ));
    }
    Ok(())
}

/// A cuBLASLt matmul for one [`MatmulSpec`] and element types: the
/// descriptors and the heuristic's algorithm, chosen once.
/// [`run`](MatmulPlan::run) makes one `cublasLtMatmul` call (plus one
/// `cublasLtMatmulDescSetAttribute` per epilogue pointer that differs from
/// the previous run's).
///
/// A plan belongs to the device its [`LtHandle`] was created on; run on a
/// handle of another device, it asks the heuristic again there first.
pub struct MatmulPlan<A: GemmTypes<D>, D: DataType> {
    spec: MatmulSpec,
    descs: MatmulDescriptors,
    algo: Option<cublasLtMatmulHeuristicResult_t>,
    workspace_limit: usize,
    /// The device the heuristic chose `algo` for (the planning handle's).
    device: Device,
    _types: PhantomData<fn() -> (A, D)>,
}

impl<A: GemmTypes<D>, D: DataType> fmt::Debug for MatmulPlan<A, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MatmulPlan")
            .field(
                "types",
                &format_args!("{} x {} -> {}", A::NAME, A::NAME, D::NAME),
            )
            .field("spec", &self.spec)
            .field("shape", &self.descs.shape)
            .field("workspace", &self.workspace_size())
            .finish()
    }
}

impl<A: GemmTypes<D>, D: DataType> MatmulPlan<A, D> {
    /// Build the descriptors and ask the heuristic for the best algorithm
    /// within `lt`'s workspace (`cublasLtMatmulAlgoGetHeuristic`).
    ///
    /// # Errors
    /// As [`MatmulDescriptors::new`]; [`Error::Cublas`] from the heuristic;
    /// [`Error::Unsupported`] when it finds no algorithm.
    #[doc(alias = "cublasLtMatmulAlgoGetHeuristic")]
    pub fn new(lt: &LtHandle, spec: &MatmulSpec) -> Result<Self> {
        let workspace_limit = lt.workspace_size();
        let descs = MatmulDescriptors::new::<A, D>(spec, workspace_limit)?;
        let (m, n, _) = descs.shape.dims();
        let algo = if m == 0 || n == 0 || descs.shape.batch_count() == 0 {
            None
        } else {
            Some(Self::heuristic(lt, spec, &descs)?)
        };
        Ok(MatmulPlan {
            spec: *spec,
            descs,
            algo,
            workspace_limit,
            device: lt.device(),
            _types: PhantomData,
        })
    }

    fn heuristic(
        lt: &LtHandle,
        spec: &MatmulSpec,
        d: &MatmulDescriptors,
    ) -> Result<cublasLtMatmulHeuristicResult_t> {
        let _on = lt.enter()?;
        let api = cublas_lt()?;
        // SAFETY: an all-zero heuristic result is a valid value of this
        // plain-data struct (integers, floats and a u64 array).
        let mut result: cublasLtMatmulHeuristicResult_t = unsafe { mem::zeroed() };
        let mut count = 0;
        // SAFETY: every descriptor is valid and alive; `result` has room for
        // the one result requested and `count` is a valid out-pointer.
        let r = unsafe {
            lt_call!(
                api,
                cublasLtMatmulAlgoGetHeuristic(
                    lt.as_raw(),
                    d.desc.as_raw(),
                    d.first.as_raw(),
                    d.second.as_raw(),
                    d.out.as_raw(),
                    d.out.as_raw(),
                    d.pref.as_raw(),
                    1,
                    &mut result,
                    &mut count,
                )
            )
        };
        let what = || {
            format!(
                "cuBLASLt matmul {} x {} -> {} with {} on this device (no algorithm within {} bytes of workspace)",
                A::NAME,
                A::NAME,
                D::NAME,
                spec.describe(),
                lt.workspace_size()
            )
        };
        match r {
            // The heuristic says NOT_SUPPORTED when it has nothing for this
            // configuration: the same answer as an empty result.
            Err(Error::Cublas { code, text, .. })
                if code == cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED.0 =>
            {
                return Err(Error::Unsupported {
                    what: format!("{} (cublasLtMatmulAlgoGetHeuristic: {text})", what()),
                    needs: None,
                });
            }
            r => r.map_err(|e| {
                e.with_context(format!(
                    "{} ({} x {} -> {})",
                    spec.describe(),
                    A::NAME,
                    A::NAME,
                    D::NAME
                ))
            })?,
        }
        if count < 1 || result.state != cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            return Err(Error::Unsupported {
                what: what(),
                needs: None,
            });
        }
        Ok(result)
    }

    /// The spec.
    pub fn spec(&self) -> &MatmulSpec {
        &self.spec
    }

    /// The checked shape (frame, epilogue sizes).
    pub fn shape(&self) -> &MatmulShape {
        &self.descs.shape
    }

    /// The descriptors.
    pub fn descriptors(&self) -> &MatmulDescriptors {
        &self.descs
    }

    /// The cache key.
    pub fn key(&self) -> PlanKey {
        PlanKey::new::<A, D>(&self.spec, self.workspace_limit)
    }

    /// Workspace bytes the chosen algorithm needs.
    pub fn workspace_size(&self) -> usize {
        self.algo.map_or(0, |a| a.workspaceSize)
    }

    /// Queue D = epilogue(alpha·A·B + beta·D) on `lt`'s stream, with the
    /// epilogue's buffers in `epi`. With `beta == 0`, D is not read.
    ///
    /// # Errors
    /// [`Error::Mismatch`] for short buffers or a workspace smaller than the
    /// algorithm needs; [`Error::InvalidArgument`] for a misaligned pointer,
    /// a missing or unexpected epilogue buffer, or an alpha/beta the scale
    /// type cannot hold; [`Error::Cublas`].
    #[doc(alias = "cublasLtMatmul")]
    #[allow(clippy::too_many_arguments)]
    pub fn run<'a, 'b, 'd>(
        &mut self,
        lt: &LtHandle,
        alpha: A::Scale,
        a: impl Into<DeviceSlice<'a, A>>,
        b: impl Into<DeviceSlice<'b, A>>,
        beta: A::Scale,
        d: impl Into<DeviceSliceMut<'d, D>>,
        mut epi: EpilogueArgs<'_, D>,
    ) -> Result<()> {
        let (a, b, mut d) = (a.into(), b.into(), d.into());
        let spec = self.spec;
        spec.a.check_len("a", a.len())?;
        spec.b.check_len("b", b.len())?;
        spec.d.check_len("d", d.len())?;
        let shape = self.descs.shape;
        shape.check_epilogue_lengths(
            epi.bias.as_ref().map(DeviceSlice::len),
            epi.bias_grad.as_ref().map(DeviceSliceMut::len),
            epi.aux_out.as_ref().map(DeviceSliceMut::len),
            epi.aux_in.as_ref().map(DeviceSlice::len),
        )?;
        let al = spec.alignment;
        check_aligned("a", a.as_raw() as usize, al)?;
        check_aligned("b", b.as_raw() as usize, al)?;
        check_aligned("d", d.as_raw() as usize, al)?;
        let bias_addr = match (&epi.bias, &mut epi.bias_grad) {
            (Some(x), _) => Some(("epilogue.bias", x.as_raw() as usize)),
            (None, Some(g)) => Some(("epilogue.bias_grad", g.as_raw_mut() as usize)),
            _ => None,
        };
        let aux_addr = match (&mut epi.aux_out, &epi.aux_in) {
            (Some(x), _) => Some(("epilogue.aux_out", x.as_raw_mut() as usize)),
            (None, Some(x)) => Some(("epilogue.aux_in", x.as_raw() as usize)),
            _ => None,
        };
        for (name, addr) in bias_addr.iter().chain(aux_addr.iter()) {
            check_aligned(name, *addr, al)?;
        }
        let alpha = ScaleValue::new(shape.scale, A::scale_to_f64(alpha), "alpha")?;
        let beta = ScaleValue::new(shape.scale, A::scale_to_f64(beta), "beta")?;
        let Some(mut algo) = self.algo else {
            return Ok(()); // an empty D: nothing to compute
        };
        let _on = lt.enter()?;
        crate::runtime::check_args(
            "cublasLtMatmul",
            lt.device(),
            &[
                ("a", a.device()),
                ("b", b.device()),
                ("d", d.device()),
                ("epilogue.bias", epi.bias.as_ref().and_then(|x| x.device())),
                (
                    "epilogue.bias_grad",
                    epi.bias_grad.as_ref().and_then(|x| x.device()),
                ),
                (
                    "epilogue.aux_out",
                    epi.aux_out.as_ref().and_then(|x| x.device()),
                ),
                (
                    "epilogue.aux_in",
                    epi.aux_in.as_ref().and_then(|x| x.device()),
                ),
            ],
        )?;
        if lt.device() != self.device {
            // The algorithm was chosen for another device (maybe another
            // architecture): ask the heuristic again on this one.
            algo = Self::heuristic(lt, &spec, &self.descs)?;
            self.algo = Some(algo);
            self.device = lt.device();
        }
        let have = lt.workspace_size();
        if algo.workspaceSize > have {
            return Err(Error::mismatch(
                "cuBLASLt workspace bytes (the plan's algorithm needs more than the handle has; rebuild the plan)",
                format!(">= {}", algo.workspaceSize),
                have,
            ));
        }
        if let Some((_, addr)) = bias_addr
            && addr != self.descs.bias_ptr
        {
            self.descs
                .desc
                .set(DescAttr::CUBLASLT_MATMUL_DESC_BIAS_POINTER, addr)?;
            self.descs.bias_ptr = addr;
        }
        if let Some((_, addr)) = aux_addr
            && addr != self.descs.aux_ptr
        {
            self.descs
                .desc
                .set(DescAttr::CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, addr)?;
            self.descs.aux_ptr = addr;
        }
        let (p1, p2) = if shape.frame.swap {
            (b.as_raw(), a.as_raw())
        } else {
            (a.as_raw(), b.as_raw())
        };
        let dp = d.as_raw_mut();
        let ws = lt.workspace_ptr();
        let api = cublas_lt()?;
        let x = &self.descs;
        // SAFETY: the handle and descriptors are valid; A, B and D's buffer
        // lengths were checked against their layouts (which the descriptors
        // were built from), and the epilogue buffers against the epilogue's
        // sizes, with the bias/aux attributes pointing at them; every pointer
        // is aligned as the heuristic was told; alpha/beta are host values of
        // the scale type; the workspace is the handle's own, at least as large
        // as the algorithm needs, and stays allocated until work queued on
        // this stream is done (it is freed with cudaFree, which waits). C is D
        // (in place), which cuBLASLt allows with identical layouts.
        let r = unsafe {
            lt_call!(
                api,
                cublasLtMatmul(
                    lt.as_raw(),
                    x.desc.as_raw(),
                    alpha.as_ptr(),
                    p1,
                    x.first.as_raw(),
                    p2,
                    x.second.as_raw(),
                    beta.as_ptr(),
                    dp.cast_const(),
                    x.out.as_raw(),
                    dp,
                    x.out.as_raw(),
                    &algo.algo,
                    ws,
                    have,
                    lt.stream().as_raw(),
                )
            )
        };
        r.map_err(|e| {
            e.with_context(format!(
                "{} ({} x {} -> {})",
                spec.describe(),
                A::NAME,
                A::NAME,
                D::NAME
            ))
        })
    }
}

/// Plans by [`PlanKey`] and device: one cache serves handles of several
/// devices, each getting plans chosen for its own device.
pub struct PlanCache<A: GemmTypes<D>, D: DataType> {
    /// Keyed by the handle's device too: an algorithm is chosen per device.
    plans: HashMap<(Device, PlanKey), MatmulPlan<A, D>>,
}

impl<A: GemmTypes<D>, D: DataType> fmt::Debug for PlanCache<A, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlanCache")
            .field("plans", &self.plans.len())
            .finish()
    }
}

impl<A: GemmTypes<D>, D: DataType> Default for PlanCache<A, D> {
    fn default() -> Self {
        PlanCache {
            plans: HashMap::new(),
        }
    }
}

impl<A: GemmTypes<D>, D: DataType> PlanCache<A, D> {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The plan for `spec` with `lt`'s current workspace, built on first use.
    ///
    /// # Errors
    /// As [`MatmulPlan::new`] (nothing is cached then).
    pub fn get_or_create(
        &mut self,
        lt: &LtHandle,
        spec: &MatmulSpec,
    ) -> Result<&mut MatmulPlan<A, D>> {
        let key = PlanKey::new::<A, D>(spec, lt.workspace_size());
        match self.plans.entry((lt.device(), key)) {
            Entry::Occupied(e) => Ok(e.into_mut()),
            Entry::Vacant(v) => Ok(v.insert(MatmulPlan::new(lt, spec)?)),
        }
    }

    /// Whether a plan for `key` is cached (for any device).
    pub fn contains(&self, key: &PlanKey) -> bool {
        self.plans.keys().any(|(_, k)| k == key)
    }

    /// Whether a plan for `key` is cached for `device`.
    pub fn contains_on(&self, device: Device, key: &PlanKey) -> bool {
        self.plans.contains_key(&(device, *key))
    }

    /// Number of cached plans.
    pub fn len(&self) -> usize {
        self.plans.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.plans.is_empty()
    }

    /// Drop every plan.
    pub fn clear(&mut self) {
        self.plans.clear();
    }
}
