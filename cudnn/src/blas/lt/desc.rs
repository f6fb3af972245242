//! The cuBLASLt descriptors (host objects: no device needed).

use std::ffi::c_void;
use std::fmt;
use std::mem;
use std::ptr::{self, NonNull};

use super::call::*;
use crate::error::{Error, Result};
use crate::sys::cublas::{
    self, cublasComputeType_t, cublasLtEpilogue_t, cublasLtMatmulDescAttributes_t as DescAttr,
    cublasLtMatmulDescOpaque_t, cublasLtMatmulPreferenceAttributes_t as PrefAttr,
    cublasLtMatmulPreferenceOpaque_t, cublasLtMatrixLayoutAttribute_t as LayoutAttr,
    cublasLtMatrixLayoutOpaque_t, cublasLtOrder_t, cublasOperation_t,
};
use crate::sys::cudart::cudaDataType_t;

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

            pub(super) fn wrap(raw: $raw, call: &str) -> Result<Self> {
                NonNull::new(raw)
                    .map(|raw| $name { raw })
                    .ok_or_else(|| Error::invalid("descriptor", format!("{call} returned null"), "null"))
            }

            pub(super) fn set<V: AttrValue>(&mut self, attr: $attr, v: V) -> Result<()> {
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

            pub(super) fn get<V: AttrValue>(&self, attr: $attr, mut v: V) -> Result<V> {
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
