//! Typed GEMM and GEMV with explicit compute types (`cublasGemmEx`,
//! `cublasGemmStridedBatchedEx`, `cublasGemmBatchedEx`; GEMV is in the
//! sibling module).
//!
//! The element types of A/B and of C are type parameters; which pairs
//! exist is the sealed trait [`GemmTypes`]. The accumulation ("compute")
//! type is a [`ComputeType`]: half types accumulate in f32 unless
//! [`ComputeType::F16`] is asked for, and TF32 is used only for
//! [`ComputeType::Tf32`] (or [`ComputeType::F32`] on a handle whose math
//! mode was set to [`MathMode::Tf32`](super::MathMode::Tf32)). Alpha and
//! beta are given as `A::Scale` and passed to cuBLAS in the scaling type of
//! the compute type (f16 for `F16`, i32 for `I32`), converted exactly or
//! refused.
//!
//! Operands are described by [`Layout`]s, so row-major and column-major
//! (and transposed) matrices mix freely: C = A·B is worked out as
//! Cᵀ = Bᵀ·Aᵀ when C is row-major, and the library sees column-major
//! operands with the right `transa`/`transb`.

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;

use half::{bf16, f16};

use super::Handle;
use super::matrix::{Layout, Matrix, MatrixMut};
use crate::check::{self, cublas_call};
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::runtime::{Device, DeviceBuffer, DeviceSlice, DeviceSliceMut};
use crate::sys::cublas::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t};
use crate::sys::cudart::cudaDataType_t;

// ---------------------------------------------------------------------------
// Compute types

/// The accumulation type of a GEMM (`cublasComputeType_t`), and with it the
/// type alpha and beta are passed in.
///
/// Which ones a type pair accepts is listed in [`GemmTypes::COMPUTE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum ComputeType {
    /// The pair's natural accumulation ([`GemmTypes::DEFAULT_COMPUTE`]):
    /// f32 for f32, f16 and bf16 inputs; f64 for f64; i32 for i8.
    #[default]
    Default,
    /// `CUBLAS_COMPUTE_32F`: f32 accumulation, alpha/beta f32. With
    /// cublasGemmEx on a handle in [`MathMode::Tf32`](super::MathMode::Tf32),
    /// f32 inputs may be rounded to TF32 (the handle's mode was asked for).
    F32,
    /// `CUBLAS_COMPUTE_32F_PEDANTIC`: f32 accumulation, no reduced-precision
    /// shortcuts whatever the handle's math mode.
    F32Pedantic,
    /// `CUBLAS_COMPUTE_32F_FAST_TF32`: f32 inputs rounded to TF32 on tensor
    /// cores (about 1e-3 relative error), f32 accumulation. f32 inputs only.
    Tf32,
    /// `CUBLAS_COMPUTE_32F_FAST_16F`: f32 inputs rounded to f16, f32
    /// accumulation. f32 inputs only.
    F32Fast16F,
    /// `CUBLAS_COMPUTE_32F_FAST_16BF`: f32 inputs rounded to bf16, f32
    /// accumulation. f32 inputs only.
    F32Fast16BF,
    /// `CUBLAS_COMPUTE_16F`: f16 accumulation, alpha/beta f16 (fast, about
    /// 1e-2 relative error for long sums). f16 inputs and output only.
    F16,
    /// `CUBLAS_COMPUTE_16F_PEDANTIC`.
    F16Pedantic,
    /// `CUBLAS_COMPUTE_64F`: f64 inputs and output.
    F64,
    /// `CUBLAS_COMPUTE_64F_PEDANTIC`.
    F64Pedantic,
    /// `CUBLAS_COMPUTE_32I`: i8 inputs, i32 accumulation and output,
    /// alpha/beta i32 (given as whole-number f32).
    I32,
    /// `CUBLAS_COMPUTE_32I_PEDANTIC`.
    I32Pedantic,
}

impl fmt::Display for ComputeType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// The type alpha and beta are passed in, fixed by the compute type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ScaleType {
    /// `CUDA_R_16F`.
    F16,
    /// `CUDA_R_32F`.
    F32,
    /// `CUDA_R_64F`.
    F64,
    /// `CUDA_R_32I`.
    I32,
}

impl ScaleType {
    /// The CUDA type code.
    pub fn to_raw(self) -> cudaDataType_t {
        match self {
            ScaleType::F16 => cudaDataType_t::CUDA_R_16F,
            ScaleType::F32 => cudaDataType_t::CUDA_R_32F,
            ScaleType::F64 => cudaDataType_t::CUDA_R_64F,
            ScaleType::I32 => cudaDataType_t::CUDA_R_32I,
        }
    }
}

impl ComputeType {
    /// The cuBLAS constant and the scale type, for an explicit compute type;
    /// `None` for [`ComputeType::Default`] (which depends on the types).
    pub fn to_raw(self) -> Option<(cublasComputeType_t, ScaleType)> {
        use cublasComputeType_t as C;
        Some(match self {
            ComputeType::Default => return None,
            ComputeType::F32 => (C::CUBLAS_COMPUTE_32F, ScaleType::F32),
            ComputeType::F32Pedantic => (C::CUBLAS_COMPUTE_32F_PEDANTIC, ScaleType::F32),
            ComputeType::Tf32 => (C::CUBLAS_COMPUTE_32F_FAST_TF32, ScaleType::F32),
            ComputeType::F32Fast16F => (C::CUBLAS_COMPUTE_32F_FAST_16F, ScaleType::F32),
            ComputeType::F32Fast16BF => (C::CUBLAS_COMPUTE_32F_FAST_16BF, ScaleType::F32),
            ComputeType::F16 => (C::CUBLAS_COMPUTE_16F, ScaleType::F16),
            ComputeType::F16Pedantic => (C::CUBLAS_COMPUTE_16F_PEDANTIC, ScaleType::F16),
            ComputeType::F64 => (C::CUBLAS_COMPUTE_64F, ScaleType::F64),
            ComputeType::F64Pedantic => (C::CUBLAS_COMPUTE_64F_PEDANTIC, ScaleType::F64),
            ComputeType::I32 => (C::CUBLAS_COMPUTE_32I, ScaleType::I32),
            ComputeType::I32Pedantic => (C::CUBLAS_COMPUTE_32I_PEDANTIC, ScaleType::I32),
        })
    }

    /// Resolve for inputs `A` and output `C`: [`ComputeType::Default`]
    /// becomes the pair's default; a type the pair does not accept is an
    /// error listing the ones it does.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming `compute`.
    pub fn resolve<A: GemmTypes<C>, C: DataType>(
        self,
    ) -> Result<(ComputeType, cublasComputeType_t, ScaleType)> {
        let ct = if self == ComputeType::Default {
            A::DEFAULT_COMPUTE
        } else {
            self
        };
        match ct.to_raw() {
            Some((raw, scale)) if A::COMPUTE.contains(&ct) => Ok((ct, raw, scale)),
            _ => Err(Error::invalid(
                "compute",
                format!(
                    "must be one of {:?} for {} inputs and {} output",
                    A::COMPUTE,
                    A::NAME,
                    C::NAME
                ),
                ct,
            )),
        }
    }
}

pub(super) mod private {
    pub trait SealedPair<C> {}
    pub trait SealedGemv {}
}

/// A supported pair of input (A and B) and output (C) element types, with
/// the compute types it accepts. Sealed.
///
/// | A, B | C | compute types (first = default) |
/// |---|---|---|
/// | f32 | f32 | F32, F32Pedantic, Tf32, F32Fast16F, F32Fast16BF |
/// | f64 | f64 | F64, F64Pedantic |
/// | f16 | f16 | F32, F32Pedantic, F16, F16Pedantic |
/// | f16 | f32 | F32, F32Pedantic |
/// | bf16 | bf16 | F32, F32Pedantic |
/// | bf16 | f32 | F32, F32Pedantic |
/// | i8 | i32 | I32, I32Pedantic |
pub trait GemmTypes<C: DataType>: DataType + private::SealedPair<C> {
    /// What [`ComputeType::Default`] means for this pair.
    const DEFAULT_COMPUTE: ComputeType;
    /// The compute types this pair accepts.
    const COMPUTE: &'static [ComputeType];
    /// Widen an alpha/beta value to f64 (exact).
    fn scale_to_f64(s: Self::Scale) -> f64;
}

macro_rules! gemm_pair {
    ($a:ty, $c:ty, [$($ct:ident),+]) => {
        impl private::SealedPair<$c> for $a {}
        impl GemmTypes<$c> for $a {
            const DEFAULT_COMPUTE: ComputeType = gemm_pair!(@first $($ct),+);
            const COMPUTE: &'static [ComputeType] = &[$(ComputeType::$ct),+];
            fn scale_to_f64(s: Self::Scale) -> f64 {
                f64::from(s)
            }
        }
    };
    (@first $first:ident $(, $rest:ident)*) => { ComputeType::$first };
}

gemm_pair!(f32, f32, [F32, F32Pedantic, Tf32, F32Fast16F, F32Fast16BF]);
gemm_pair!(f64, f64, [F64, F64Pedantic]);
gemm_pair!(f16, f16, [F32, F32Pedantic, F16, F16Pedantic]);
gemm_pair!(f16, f32, [F32, F32Pedantic]);
gemm_pair!(bf16, bf16, [F32, F32Pedantic]);
gemm_pair!(bf16, f32, [F32, F32Pedantic]);
gemm_pair!(i8, i32, [I32, I32Pedantic]);

/// An alpha or beta value in the library's scaling type.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ScaleValue {
    F16(f16),
    F32(f32),
    F64(f64),
    I32(i32),
}

impl ScaleValue {
    /// Convert `v` to `kind`, refusing values that do not survive.
    pub(crate) fn new(kind: ScaleType, v: f64, name: &str) -> Result<Self> {
        Ok(match kind {
            ScaleType::F64 => ScaleValue::F64(v),
            // Alpha/beta reach here from f32 (A::Scale) or f64 inputs: exact
            // for f32, rounded for an f64 value, as cuBLAS would.
            ScaleType::F32 => ScaleValue::F32(v as f32),
            ScaleType::F16 => {
                let h = f16::from_f64(v);
                if v.is_finite() && !h.is_finite() {
                    return Err(Error::invalid(
                        name,
                        "must fit in f16 (the f16 compute type scales in f16)",
                        v,
                    ));
                }
                ScaleValue::F16(h)
            }
            ScaleType::I32 => {
                if !(v.fract() == 0.0 && v >= f64::from(i32::MIN) && v <= f64::from(i32::MAX)) {
                    return Err(Error::invalid(
                        name,
                        "must be a whole number in the i32 range (i32 accumulation scales in i32)",
                        v,
                    ));
                }
                ScaleValue::I32(v as i32)
            }
        })
    }

    /// A pointer to the value, valid while `self` is.
    pub(crate) fn as_ptr(&self) -> *const c_void {
        match self {
            ScaleValue::F16(v) => (v as *const f16).cast(),
            ScaleValue::F32(v) => (v as *const f32).cast(),
            ScaleValue::F64(v) => (v as *const f64).cast(),
            ScaleValue::I32(v) => (v as *const i32).cast(),
        }
    }
}

// ---------------------------------------------------------------------------
// Shapes: C = A·B in the column-major frame the library sees

/// One operand as the column-major library sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Operand {
    /// Whether the library applies a transpose (`CUBLAS_OP_T`).
    pub(crate) transposed: bool,
    /// The stored column-major matrix's rows and columns (before the op).
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) ld: usize,
    pub(crate) stride: usize,
}

/// C = A·B checked and mapped to the library's frame: D' = A'·B' with
/// D' = C (C column-contiguous) or D' = Cᵀ = Bᵀ·Aᵀ (`swap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Frame {
    pub(crate) swap: bool,
    pub(crate) m: usize,
    pub(crate) n: usize,
    pub(crate) k: usize,
    pub(crate) batch: usize,
    pub(crate) first: Operand,
    pub(crate) second: Operand,
    pub(crate) out: Operand,
}

fn operand(l: &Layout, view_transposed: bool, rows: usize, cols: usize) -> Operand {
    // The view the library multiplies is `l` (or `lᵀ`); it is rows x cols.
    let col_contig = l.is_column_contiguous() != view_transposed;
    let (r, c) = if col_contig {
        (rows, cols)
    } else {
        (cols, rows)
    };
    Operand {
        transposed: !col_contig,
        rows: r,
        cols: c,
        ld: l.ld(),
        stride: l.batch_stride(),
    }
}

/// Check `a`, `b`, `c` for C = A·B and work out the library's frame.
pub(crate) fn frame(a: &Layout, b: &Layout, c: &Layout) -> Result<Frame> {
    a.validate("a")?;
    b.validate("b")?;
    c.validate_output("c")?;
    let (m, n, k) = (c.rows(), c.cols(), a.cols());
    if a.rows() != m {
        return Err(Error::mismatch("a rows (m) must equal c rows", m, a.rows()));
    }
    if b.rows() != k {
        return Err(Error::mismatch("b rows (k) must equal a cols", k, b.rows()));
    }
    if b.cols() != n {
        return Err(Error::mismatch("b cols (n) must equal c cols", n, b.cols()));
    }
    let batch = c.batch_count();
    if a.batch_count() != batch {
        return Err(Error::mismatch(
            "a batch_count must equal c batch_count",
            batch,
            a.batch_count(),
        ));
    }
    if b.batch_count() != batch {
        return Err(Error::mismatch(
            "b batch_count must equal c batch_count",
            batch,
            b.batch_count(),
        ));
    }
    let swap = !c.is_column_contiguous();
    Ok(if swap {
        // Cᵀ (n x m) = Bᵀ (n x k) · Aᵀ (k x m).
        Frame {
            swap,
            m: n,
            n: m,
            k,
            batch,
            first: operand(b, true, n, k),
            second: operand(a, true, k, m),
            out: operand(c, true, n, m),
        }
    } else {
        Frame {
            swap,
            m,
            n,
            k,
            batch,
            first: operand(a, false, m, k),
            second: operand(b, false, k, n),
            out: operand(c, false, m, n),
        }
    })
}

pub(super) fn int(name: &str, v: usize, api: &str) -> Result<i32> {
    i32::try_from(v).map_err(|_| {
        Error::invalid(
            name,
            format!("must fit in a C int ({api} takes int; use cuBLASLt for larger)"),
            v,
        )
    })
}

pub(super) fn long(name: &str, v: usize) -> Result<i64> {
    i64::try_from(v).map_err(|_| Error::invalid(name, "must fit in i64", v))
}

pub(super) fn op(t: bool) -> cublasOperation_t {
    if t {
        cublasOperation_t::CUBLAS_OP_T
    } else {
        cublasOperation_t::CUBLAS_OP_N
    }
}

pub(super) fn op_name(o: cublasOperation_t) -> &'static str {
    if o == cublasOperation_t::CUBLAS_OP_T {
        "T"
    } else {
        "N"
    }
}

/// The arguments of one cublasGemmEx / cublasGemmStridedBatchedEx call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct BlasArgs {
    swap: bool,
    transa: cublasOperation_t,
    transb: cublasOperation_t,
    m: i32,
    n: i32,
    k: i32,
    lda: i32,
    ldb: i32,
    ldc: i32,
    stride_a: i64,
    stride_b: i64,
    stride_c: i64,
    batch: i32,
}

impl BlasArgs {
    fn new(f: &Frame, api: &str) -> Result<Self> {
        // Names are the user's: in the swapped frame the first operand is B.
        let (first, second) = if f.swap { ("b", "a") } else { ("a", "b") };
        Ok(BlasArgs {
            swap: f.swap,
            transa: op(f.first.transposed),
            transb: op(f.second.transposed),
            m: int(if f.swap { "n (c cols)" } else { "m (c rows)" }, f.m, api)?,
            n: int(if f.swap { "m (c rows)" } else { "n (c cols)" }, f.n, api)?,
            k: int("k (a cols)", f.k, api)?,
            lda: int(&format!("{first}.ld"), f.first.ld, api)?,
            ldb: int(&format!("{second}.ld"), f.second.ld, api)?,
            ldc: int("c.ld", f.out.ld, api)?,
            stride_a: long(&format!("{first}.batch_stride"), f.first.stride)?,
            stride_b: long(&format!("{second}.batch_stride"), f.second.stride)?,
            stride_c: long("c.batch_stride", f.out.stride)?,
            batch: int("batch_count", f.batch, api)?,
        })
    }
}

// ---------------------------------------------------------------------------
// GemmPlan

/// A checked GEMM, `C = alpha·A·B + beta·C`, for fixed layouts and compute
/// type: everything worked out from the shapes alone (no library call, no
/// device), so [`run`](GemmPlan::run) makes exactly one library call
/// (`cublasGemmEx`, or `cublasGemmStridedBatchedEx` when the layouts are
/// batched).
///
/// ```
/// use cudnn::blas::{ComputeType, GemmPlan, Layout};
/// // Row-major C (2x4) = A (2x3) · B (3x4): cuBLAS computes Cᵀ = Bᵀ·Aᵀ.
/// let plan = GemmPlan::<f32, f32>::new(
///     Layout::row_major(2, 3),
///     Layout::row_major(3, 4),
///     Layout::row_major(2, 4),
///     ComputeType::Default,
/// )?;
/// assert!(plan.swaps_operands());
/// assert_eq!(plan.dims(), (4, 2, 3));
/// # Ok::<(), cudnn::Error>(())
/// ```
pub struct GemmPlan<A: GemmTypes<C>, C: DataType> {
    a: Layout,
    b: Layout,
    c: Layout,
    compute: ComputeType,
    raw_compute: cublasComputeType_t,
    scale: ScaleType,
    args: BlasArgs,
    _types: PhantomData<fn() -> (A, C)>,
}

impl<A: GemmTypes<C>, C: DataType> Clone for GemmPlan<A, C> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<A: GemmTypes<C>, C: DataType> Copy for GemmPlan<A, C> {}

impl<A: GemmTypes<C>, C: DataType> fmt::Debug for GemmPlan<A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GemmPlan")
            .field(
                "types",
                &format_args!("{} x {} -> {}", A::NAME, A::NAME, C::NAME),
            )
            .field("a", &self.a)
            .field("b", &self.b)
            .field("c", &self.c)
            .field("compute", &self.compute)
            .field("call", &self.args)
            .finish()
    }
}

impl<A: GemmTypes<C>, C: DataType> GemmPlan<A, C> {
    /// Check the layouts (each `ld`, batch counts and strides, that the
    /// shapes chain as (m x k)·(k x n) = (m x n), that an output batch does
    /// not overlap itself, and that every value fits cuBLAS's `int`) and the
    /// compute type for this type pair.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] or [`Error::Mismatch`] naming the argument.
    pub fn new(a: Layout, b: Layout, c: Layout, compute: ComputeType) -> Result<Self> {
        let f = frame(&a, &b, &c)?;
        let api = if f.batch == 1 {
            "cublasGemmEx"
        } else {
            "cublasGemmStridedBatchedEx"
        };
        let args = BlasArgs::new(&f, api)?;
        let (compute, raw_compute, scale) = compute.resolve::<A, C>()?;
        Ok(GemmPlan {
            a,
            b,
            c,
            compute,
            raw_compute,
            scale,
            args,
            _types: PhantomData,
        })
    }

    /// The layouts `(a, b, c)`.
    pub fn layouts(&self) -> (Layout, Layout, Layout) {
        (self.a, self.b, self.c)
    }

    /// The resolved compute type (never [`ComputeType::Default`]).
    pub fn compute(&self) -> ComputeType {
        self.compute
    }

    /// The `cublasComputeType_t` passed to cuBLAS.
    pub fn compute_type(&self) -> cublasComputeType_t {
        self.raw_compute
    }

    /// The type alpha and beta are passed in.
    pub fn scale_type(&self) -> ScaleType {
        self.scale
    }

    /// Whether cuBLAS is called with the operands swapped (Cᵀ = Bᵀ·Aᵀ,
    /// because C is not column-contiguous).
    pub fn swaps_operands(&self) -> bool {
        self.args.swap
    }

    /// `(transa, transb)` as passed to cuBLAS.
    pub fn transposes(&self) -> (cublasOperation_t, cublasOperation_t) {
        (self.args.transa, self.args.transb)
    }

    /// `(m, n, k)` as passed to cuBLAS.
    pub fn dims(&self) -> (usize, usize, usize) {
        let u = |v: i32| usize::try_from(v).unwrap_or(0);
        (u(self.args.m), u(self.args.n), u(self.args.k))
    }

    /// `(lda, ldb, ldc)` as passed to cuBLAS.
    pub fn lds(&self) -> (usize, usize, usize) {
        let u = |v: i32| usize::try_from(v).unwrap_or(0);
        (u(self.args.lda), u(self.args.ldb), u(self.args.ldc))
    }

    /// Matrices in the batch.
    pub fn batch_count(&self) -> usize {
        usize::try_from(self.args.batch).unwrap_or(0)
    }

    /// Floating-point operations of one run (`2·m·n·k·batch`).
    pub fn flops(&self) -> f64 {
        let (m, n, k) = self.dims();
        2.0 * m as f64 * n as f64 * k as f64 * self.batch_count() as f64
    }

    /// Check buffer lengths (elements) against the layouts; what
    /// [`run`](GemmPlan::run) checks first.
    ///
    /// # Errors
    /// [`Error::Mismatch`] naming the buffer and both lengths.
    pub fn check_lengths(&self, a_len: usize, b_len: usize, c_len: usize) -> Result<()> {
        self.a.check_len("a", a_len)?;
        self.b.check_len("b", b_len)?;
        self.c.check_len("c", c_len)
    }

    fn describe(&self) -> String {
        let x = &self.args;
        format!(
            "{}x{}x{} {} ({}·{} -> {}, compute {:?}), transa {} transb {}, ld {}/{}/{}, batch {}{}",
            x.m,
            x.n,
            x.k,
            if x.swap {
                "(swapped for row-major C)"
            } else {
                ""
            },
            A::NAME,
            A::NAME,
            C::NAME,
            self.compute,
            op_name(x.transa),
            op_name(x.transb),
            x.lda,
            x.ldb,
            x.ldc,
            x.batch,
            if x.batch > 1 {
                format!(" strides {}/{}/{}", x.stride_a, x.stride_b, x.stride_c)
            } else {
                String::new()
            }
        )
    }

    /// Queue `C = alpha·A·B + beta·C` on the handle's stream. With
    /// `beta == 0`, C is not read (it may hold NaN).
    ///
    /// # Errors
    /// [`Error::Mismatch`] for a short buffer; [`Error::InvalidArgument`]
    /// for an alpha/beta the scaling type cannot hold; [`Error::Cublas`].
    #[doc(alias = "cublasGemmEx")]
    #[doc(alias = "cublasGemmStridedBatchedEx")]
    pub fn run<'a, 'b, 'c>(
        &self,
        handle: &Handle,
        alpha: A::Scale,
        a: impl Into<DeviceSlice<'a, A>>,
        b: impl Into<DeviceSlice<'b, A>>,
        beta: A::Scale,
        c: impl Into<DeviceSliceMut<'c, C>>,
    ) -> Result<()> {
        let (a, b, mut c) = (a.into(), b.into(), c.into());
        self.check_lengths(a.len(), b.len(), c.len())?;
        let alpha = ScaleValue::new(self.scale, A::scale_to_f64(alpha), "alpha")?;
        let beta = ScaleValue::new(self.scale, A::scale_to_f64(beta), "beta")?;
        let x = &self.args;
        if x.m == 0 || x.n == 0 || x.batch == 0 {
            return Ok(());
        }
        let (p1, p2) = if x.swap {
            (b.as_raw(), a.as_raw())
        } else {
            (a.as_raw(), b.as_raw())
        };
        let _on = handle.launch(
            "gemm",
            &[("a", a.device()), ("b", b.device()), ("c", c.device())],
        )?;
        let api = check::cublas()?;
        let algo = cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT;
        let r = if x.batch == 1 {
            // SAFETY: the handle is valid; p1/p2/c are device buffers whose
            // lengths were checked against m, n, k and the lds (check_lengths),
            // their element types are the codes passed (A::CUDA, C::CUDA), and
            // alpha/beta point at host values of the compute type's scale type.
            unsafe {
                cublas_call!(
                    api,
                    cublasGemmEx(
                        handle.as_raw(),
                        x.transa,
                        x.transb,
                        x.m,
                        x.n,
                        x.k,
                        alpha.as_ptr(),
                        p1,
                        A::CUDA,
                        x.lda,
                        p2,
                        A::CUDA,
                        x.ldb,
                        beta.as_ptr(),
                        c.as_raw_mut(),
                        C::CUDA,
                        x.ldc,
                        self.raw_compute,
                        algo,
                    )
                )
            }
        } else {
            // SAFETY: as above, with the buffer lengths checked for the whole
            // batch (count and strides), and C's stride checked so the
            // outputs do not overlap.
            unsafe {
                cublas_call!(
                    api,
                    cublasGemmStridedBatchedEx(
                        handle.as_raw(),
                        x.transa,
                        x.transb,
                        x.m,
                        x.n,
                        x.k,
                        alpha.as_ptr(),
                        p1,
                        A::CUDA,
                        x.lda,
                        x.stride_a,
                        p2,
                        A::CUDA,
                        x.ldb,
                        x.stride_b,
                        beta.as_ptr(),
                        c.as_raw_mut(),
                        C::CUDA,
                        x.ldc,
                        x.stride_c,
                        x.batch,
                        self.raw_compute,
                        algo,
                    )
                )
            }
        };
        r.map_err(|e| e.with_context(self.describe()))
    }

    /// Check a pointer-array batch (what [`Handle::gemm_batched`] checks):
    /// equal counts, every matrix of a list with the same layout (a single
    /// matrix each), and every buffer long enough. Returns the plan of one
    /// member.
    ///
    /// # Errors
    /// [`Error::Mismatch`] or [`Error::InvalidArgument`] naming the
    /// argument and its index (an empty batch has no layout to plan: an
    /// error here; [`Handle::gemm_batched`] treats it as nothing to do).
    pub fn new_pointer_batch(
        a: &[Matrix<'_, A>],
        b: &[Matrix<'_, A>],
        c: &[MatrixMut<'_, C>],
        compute: ComputeType,
    ) -> Result<Self> {
        if b.len() != a.len() {
            return Err(Error::mismatch(
                "b count (pointer-array batch) must equal a count",
                a.len(),
                b.len(),
            ));
        }
        if c.len() != a.len() {
            return Err(Error::mismatch(
                "c count (pointer-array batch) must equal a count",
                a.len(),
                c.len(),
            ));
        }
        let (Some(a0), Some(b0), Some(c0)) = (a.first(), b.first(), c.first()) else {
            return Err(Error::invalid(
                "a",
                "a pointer-array batch needs at least one matrix",
                "0 matrices",
            ));
        };
        let layouts = [
            ("a", a.iter().map(Matrix::layout).collect::<Vec<_>>()),
            ("b", b.iter().map(Matrix::layout).collect()),
            ("c", c.iter().map(MatrixMut::layout).collect()),
        ];
        for (name, ls) in &layouts {
            for (i, l) in ls.iter().enumerate() {
                if l.batch_count() != 1 {
                    return Err(Error::invalid(
                        format!("{name}[{i}].batch_count"),
                        "must be 1 in a pointer-array batch (use a strided layout with gemm instead)",
                        l.batch_count(),
                    ));
                }
                if let Some(first) = ls.first()
                    && l != first
                {
                    return Err(Error::mismatch(
                        format!(
                            "{name}[{i}] layout (all matrices of a pointer-array batch share one)"
                        ),
                        first,
                        l,
                    ));
                }
            }
        }
        let plan = Self::new(a0.layout(), b0.layout(), c0.layout(), compute)?;
        int("batch_count", a.len(), "cublasGemmBatchedEx")?;
        for (i, ((x, y), z)) in a.iter().zip(b).zip(c).enumerate() {
            plan.a.check_len(&format!("a[{i}]"), x.data().len())?;
            plan.b.check_len(&format!("b[{i}]"), y.data().len())?;
            plan.c.check_len(&format!("c[{i}]"), z.data().len())?;
        }
        Ok(plan)
    }
}

// Device pointers are stored as i64 in the pointer-array buffer.
const _: () = assert!(std::mem::size_of::<*const c_void>() == std::mem::size_of::<i64>());

impl Handle {
    /// `C = alpha·A·B + beta·C` for matrices of any [`Layout`] (row- or
    /// column-major, transposed, strided batches), with an explicit
    /// [`ComputeType`]. Builds a [`GemmPlan`] and runs it: one
    /// `cublasGemmEx` call, or `cublasGemmStridedBatchedEx` when the
    /// layouts are batched. With `beta == 0`, C is not read.
    ///
    /// # Errors
    /// As [`GemmPlan::new`] and [`GemmPlan::run`].
    #[doc(alias = "cublasGemmEx")]
    #[doc(alias = "cublasGemmStridedBatchedEx")]
    #[doc(alias = "cublasSgemm")]
    #[doc(alias = "cublasHgemm")]
    pub fn gemm<A: GemmTypes<C>, C: DataType>(
        &self,
        alpha: A::Scale,
        a: Matrix<'_, A>,
        b: Matrix<'_, A>,
        beta: A::Scale,
        c: MatrixMut<'_, C>,
        compute: ComputeType,
    ) -> Result<()> {
        let plan = GemmPlan::<A, C>::new(a.layout(), b.layout(), c.layout(), compute)?;
        plan.run(self, alpha, a.data(), b.data(), beta, c.into_data())
    }

    /// A batch of GEMMs over separate matrices (`cublasGemmBatchedEx`): all
    /// `a[i]` share one layout, all `b[i]` one, all `c[i]` one. The device
    /// pointer arrays are built here, per call: stream-ordered
    /// (`cudaMallocAsync`, an async copy and `cudaFreeAsync` on the handle's
    /// stream) where the device has memory pools, otherwise a `cudaMalloc`,
    /// a copy, and a free after synchronizing the handle's stream. For a hot
    /// loop prefer a strided batch with [`gemm`](Handle::gemm).
    ///
    /// Not capture-safe (the pointer arrays are uploaded from the host on
    /// every call): while the handle's stream is capturing a CUDA graph it
    /// returns [`Error::CaptureUnsafe`] before anything is queued.
    ///
    /// # Errors
    /// As [`GemmPlan::new_pointer_batch`] and [`GemmPlan::run`];
    /// [`Error::Cuda`] from the pointer arrays; [`Error::CaptureUnsafe`].
    #[doc(alias = "cublasGemmBatchedEx")]
    pub fn gemm_batched<A: GemmTypes<C>, C: DataType>(
        &self,
        alpha: A::Scale,
        a: &[Matrix<'_, A>],
        b: &[Matrix<'_, A>],
        beta: A::Scale,
        c: &mut [MatrixMut<'_, C>],
        compute: ComputeType,
    ) -> Result<()> {
        if a.is_empty() && b.is_empty() && c.is_empty() {
            return Ok(()); // an empty batch: nothing to do
        }
        let plan = GemmPlan::<A, C>::new_pointer_batch(a, b, c, compute)?;
        let alpha = ScaleValue::new(plan.scale, A::scale_to_f64(alpha), "alpha")?;
        let beta = ScaleValue::new(plan.scale, A::scale_to_f64(beta), "beta")?;
        let x = plan.args;
        let count = a.len();
        if x.m == 0 || x.n == 0 {
            return Ok(());
        }
        let batch = int("batch_count", count, "cublasGemmBatchedEx")?;
        let devices: Vec<(&str, Option<Device>)> = a
            .iter()
            .map(|m| ("a (a matrix of the batch)", m.data().device()))
            .chain(
                b.iter()
                    .map(|m| ("b (a matrix of the batch)", m.data().device())),
            )
            .chain(
                c.iter()
                    .map(|m| ("c (a matrix of the batch)", m.data().device())),
            )
            .collect();
        // The pointer table is allocated and copied on the handle's device.
        let _on = self.launch("gemm_batched", &devices)?;
        let (first, second) = if x.swap { (b, a) } else { (a, b) };
        let mut ptrs: Vec<i64> = Vec::with_capacity(3 * count);
        ptrs.extend(first.iter().map(|m| m.data().as_raw() as usize as i64));
        ptrs.extend(second.iter().map(|m| m.data().as_raw() as usize as i64));
        ptrs.extend(
            c.iter_mut()
                .map(|m| m.data_mut().as_raw_mut() as usize as i64),
        );
        let hazard = crate::runtime::Hazard::HostUpload("the GEMM pointer table");
        crate::runtime::forbid_during_capture("gemm_batched", self.stream(), hazard)?;
        let table = DeviceBuffer::<i64>::scratch_from_host(ptrs, self.stream())
            .map_err(|e| e.with_context("copying the GEMM pointer arrays to the device"))?;
        let base = table.as_ptr();
        let api = check::cublas()?;
        // SAFETY: `table` holds 3 x `count` device pointers (first operands,
        // second operands, outputs), copied in the order of the handle's stream
        // (or synchronously), before the GEMM queued on that stream reads it;
        // every matrix's buffer length was checked against its layout
        // (new_pointer_batch), the outputs are distinct exclusive borrows, the
        // element types are the codes passed, and alpha/beta are host values
        // of the scale type. `table` is freed after the GEMM in the order of
        // the handle's stream (`destroy_after`).
        let r = unsafe {
            cublas_call!(
                api,
                cublasGemmBatchedEx(
                    self.as_raw(),
                    x.transa,
                    x.transb,
                    x.m,
                    x.n,
                    x.k,
                    alpha.as_ptr(),
                    base.cast::<*const c_void>(),
                    A::CUDA,
                    x.lda,
                    base.wrapping_add(count).cast::<*const c_void>(),
                    A::CUDA,
                    x.ldb,
                    beta.as_ptr(),
                    base.wrapping_add(2 * count).cast::<*mut c_void>(),
                    C::CUDA,
                    x.ldc,
                    batch,
                    plan.raw_compute,
                    cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            )
        };
        let freed = table.destroy_after(self.stream());
        r.map_err(|e| {
            e.with_context(format!(
                "pointer-array batch of {count}: {}",
                plan.describe()
            ))
        })?;
        freed
    }
}
