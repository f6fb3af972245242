//! Typed GEMV (`cublasSgemv_v2`, `cublasDgemv_v2`): [`GemvPlan`].

use std::marker::PhantomData;

use super::Handle;
use super::gemm::*;
use super::matrix::{Layout, Matrix};
use crate::check::{self, cublas_call};
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::runtime::{DeviceSlice, DeviceSliceMut};
use crate::sys::cublas::cublasOperation_t;
use crate::sys::cudart::cudaDataType_t;

// ---------------------------------------------------------------------------
// GEMV

/// An element type with a cuBLAS GEMV: f32 and f64. Sealed.
pub trait GemvType: DataType<Scale = Self> + private::SealedGemv {}
impl private::SealedGemv for f32 {}
impl private::SealedGemv for f64 {}
impl GemvType for f32 {}
impl GemvType for f64 {}

/// A checked GEMV, `y = alpha·A·x + beta·y`, for a fixed layout of A and
/// increments of x and y; [`run`](GemvPlan::run) makes one library call.
#[derive(Debug, Clone, Copy)]
pub struct GemvPlan<T: GemvType> {
    a: Layout,
    incx: usize,
    incy: usize,
    x_len: usize,
    y_len: usize,
    trans: cublasOperation_t,
    m: i32,
    n: i32,
    lda: i32,
    incx_c: i32,
    incy_c: i32,
    _t: PhantomData<fn() -> T>,
}

fn vector_span(len: usize, inc: usize) -> Option<usize> {
    if len == 0 {
        Some(0)
    } else {
        (len - 1).checked_mul(inc)?.checked_add(1)
    }
}

impl<T: GemvType> GemvPlan<T> {
    /// Check A's layout (a single matrix) and the increments (>= 1).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the argument.
    pub fn new(a: Layout, incx: usize, incy: usize) -> Result<Self> {
        a.validate("a")?;
        if a.batch_count() != 1 {
            return Err(Error::invalid(
                "a.batch_count",
                "must be 1 for gemv",
                a.batch_count(),
            ));
        }
        for (name, inc) in [("incx", incx), ("incy", incy)] {
            if inc == 0 {
                return Err(Error::invalid(name, "must be >= 1", inc));
            }
        }
        let (rows, cols) = (a.rows(), a.cols());
        let api = "cublasSgemv/cublasDgemv";
        let x_len = vector_span(cols, incx)
            .ok_or_else(|| Error::invalid("incx", "(a cols - 1) x incx overflows usize", incx))?;
        let y_len = vector_span(rows, incy)
            .ok_or_else(|| Error::invalid("incy", "(a rows - 1) x incy overflows usize", incy))?;
        // Column-contiguous A is column-major rows x cols (op N); otherwise
        // it is column-major cols x rows, used transposed.
        // The names follow the sizes: transposed, cuBLAS's m is A's columns.
        let (trans, m, n, m_name, n_name) = if a.is_column_contiguous() {
            (
                cublasOperation_t::CUBLAS_OP_N,
                rows,
                cols,
                "a rows",
                "a cols",
            )
        } else {
            (
                cublasOperation_t::CUBLAS_OP_T,
                cols,
                rows,
                "a cols",
                "a rows",
            )
        };
        Ok(GemvPlan {
            a,
            incx,
            incy,
            x_len,
            y_len,
            trans,
            m: int(m_name, m, api)?,
            n: int(n_name, n, api)?,
            lda: int("a.ld", a.ld(), api)?,
            incx_c: int("incx", incx, api)?,
            incy_c: int("incy", incy, api)?,
            _t: PhantomData,
        })
    }

    /// The transpose passed to cuBLAS.
    pub fn transpose(&self) -> cublasOperation_t {
        self.trans
    }

    /// Elements x and y must hold: `(x, y)`.
    pub fn vector_lengths(&self) -> (usize, usize) {
        (self.x_len, self.y_len)
    }

    /// Check buffer lengths (elements); what [`run`](GemvPlan::run) checks first.
    ///
    /// # Errors
    /// [`Error::Mismatch`] naming the buffer and both lengths.
    pub fn check_lengths(&self, a_len: usize, x_len: usize, y_len: usize) -> Result<()> {
        self.a.check_len("a", a_len)?;
        if x_len < self.x_len {
            return Err(Error::mismatch(
                format!(
                    "x buffer length (a has {} cols, incx {})",
                    self.a.cols(),
                    self.incx
                ),
                format!(">= {}", self.x_len),
                x_len,
            ));
        }
        if y_len < self.y_len {
            return Err(Error::mismatch(
                format!(
                    "y buffer length (a has {} rows, incy {})",
                    self.a.rows(),
                    self.incy
                ),
                format!(">= {}", self.y_len),
                y_len,
            ));
        }
        Ok(())
    }

    /// Queue `y = alpha·A·x + beta·y` on the handle's stream.
    ///
    /// # Errors
    /// [`Error::Mismatch`] for a short buffer; [`Error::Cublas`].
    #[doc(alias = "cublasSgemv_v2")]
    #[doc(alias = "cublasDgemv_v2")]
    pub fn run<'a, 'x, 'y>(
        &self,
        handle: &Handle,
        alpha: T,
        a: impl Into<DeviceSlice<'a, T>>,
        x: impl Into<DeviceSlice<'x, T>>,
        beta: T,
        y: impl Into<DeviceSliceMut<'y, T>>,
    ) -> Result<()> {
        let (a, x, mut y) = (a.into(), x.into(), y.into());
        self.check_lengths(a.len(), x.len(), y.len())?;
        if self.y_len == 0 {
            return Ok(());
        }
        let _on = handle.launch(
            "gemv",
            &[("a", a.device()), ("x", x.device()), ("y", y.device())],
        )?;
        let api = check::cublas()?;
        let h = handle.as_raw();
        let ctx = || {
            format!(
                "gemv {}x{} {} (ld {}), incx {}, incy {}",
                self.a.rows(),
                self.a.cols(),
                op_name(self.trans),
                self.lda,
                self.incx,
                self.incy
            )
        };
        let r = if T::CUDA == cudaDataType_t::CUDA_R_32F {
            // SAFETY: T is f32 (the sealed DataType code says so), so the
            // casts are identities; the buffers' lengths were checked against
            // m, n, lda and the increments; alpha/beta are host f32 values.
            unsafe {
                cublas_call!(
                    api,
                    cublasSgemv_v2(
                        h,
                        self.trans,
                        self.m,
                        self.n,
                        (&alpha as *const T).cast::<f32>(),
                        a.as_ptr().cast::<f32>(),
                        self.lda,
                        x.as_ptr().cast::<f32>(),
                        self.incx_c,
                        (&beta as *const T).cast::<f32>(),
                        y.as_mut_ptr().cast::<f32>(),
                        self.incy_c,
                    )
                )
            }
        } else {
            // SAFETY: T is f64 (GemvType is sealed to f32 and f64); as above.
            unsafe {
                cublas_call!(
                    api,
                    cublasDgemv_v2(
                        h,
                        self.trans,
                        self.m,
                        self.n,
                        (&alpha as *const T).cast::<f64>(),
                        a.as_ptr().cast::<f64>(),
                        self.lda,
                        x.as_ptr().cast::<f64>(),
                        self.incx_c,
                        (&beta as *const T).cast::<f64>(),
                        y.as_mut_ptr().cast::<f64>(),
                        self.incy_c,
                    )
                )
            }
        };
        r.map_err(|e| e.with_context(ctx()))
    }
}

impl Handle {
    /// `y = alpha·A·x + beta·y` with unit increments (f32: `cublasSgemv_v2`,
    /// f64: `cublasDgemv_v2`). A may be row- or column-major or transposed.
    ///
    /// # Errors
    /// As [`GemvPlan::new`] and [`GemvPlan::run`].
    #[doc(alias = "cublasSgemv_v2")]
    #[doc(alias = "cublasDgemv_v2")]
    #[doc(alias = "cublasSgemv")]
    #[doc(alias = "cublasDgemv")]
    pub fn gemv<'x, 'y, T: GemvType>(
        &self,
        alpha: T,
        a: Matrix<'_, T>,
        x: impl Into<DeviceSlice<'x, T>>,
        beta: T,
        y: impl Into<DeviceSliceMut<'y, T>>,
    ) -> Result<()> {
        GemvPlan::<T>::new(a.layout(), 1, 1)?.run(self, alpha, a.data(), x, beta, y)
    }
}
