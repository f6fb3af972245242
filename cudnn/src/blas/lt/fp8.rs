//! Scaled FP8 matmul: the element-type rules, the spec, its checks (all in
//! Rust, before any library call) and the host-side descriptors.
//!
//! (The rules are on [`Fp8MatmulSpec`].)

use half::{bf16, f16};

use super::super::gemm::{Frame, frame};
use super::super::matrix::Layout;
use super::desc::*;
use super::plan::{lt_layout, trans};
use super::spec::{BiasUse, Epilogue};
use crate::dtype::{DataType, F8E4M3, F8E5M2, Fp8Format};
use crate::error::{Error, Result};
use crate::sys::cublas::{
    cublasComputeType_t, cublasLtMatmulDescAttributes_t as DescAttr, cublasLtMatmulMatrixScale_t,
};
use crate::sys::cudart::cudaDataType_t;

mod sealed {
    pub trait Input {}
    pub trait Output {}
    pub trait Bias {}
}

/// An FP8 operand type of a scaled matmul: [`F8E4M3`] or [`F8E5M2`]. Sealed.
pub trait Fp8Input: DataType + sealed::Input {
    /// The format.
    const FORMAT: Fp8Format;
    /// The value whose encoding is `bits`.
    fn from_bits(bits: u8) -> Self;
}

impl sealed::Input for F8E4M3 {}
impl Fp8Input for F8E4M3 {
    const FORMAT: Fp8Format = Fp8Format::E4M3;
    fn from_bits(bits: u8) -> Self {
        F8E4M3::from_bits(bits)
    }
}
impl sealed::Input for F8E5M2 {}
impl Fp8Input for F8E5M2 {
    const FORMAT: Fp8Format = Fp8Format::E5M2;
    fn from_bits(bits: u8) -> Self {
        F8E5M2::from_bits(bits)
    }
}

/// D's type in an FP8 matmul ([`Fp8OutputType`] at run time). Sealed.
///
/// | D | C | bias |
/// |---|---|---|
/// | f32 | f32 | bf16 |
/// | f16 | f16 | f16 |
/// | bf16 | bf16 | bf16 |
/// | E4M3, E5M2 | bf16 or f16 | C's type |
///
/// The last row is NVIDIA's cuBLASLt FP8 table (a 16-bit C with an FP8 D,
/// the bias of C's type; TransformerEngine picks f16 or bf16 there): the
/// default is bf16 ([`Fp8Output::Bias`]); an
/// [`Fp8MatmulPlan`](super::Fp8MatmulPlan) with the `Bias` parameter `f16`
/// uses f16 for both.
pub trait Fp8Output: DataType + sealed::Output {
    /// The run-time tag.
    const TYPE: Fp8OutputType;
    /// C's type code (with the default bias type).
    const C_TYPE: cudaDataType_t;
    /// The bias vector's default element type.
    type Bias: Fp8Bias;
}

/// The bias vector's element type in an FP8 matmul, and C's type for an FP8
/// D: bf16 or f16 ([`Fp8BiasType`] at run time). Sealed.
pub trait Fp8Bias: DataType + sealed::Bias {
    /// The run-time tag.
    const TYPE: Fp8BiasType;
}

impl sealed::Bias for bf16 {}
impl Fp8Bias for bf16 {
    const TYPE: Fp8BiasType = Fp8BiasType::BF16;
}
impl sealed::Bias for f16 {}
impl Fp8Bias for f16 {
    const TYPE: Fp8BiasType = Fp8BiasType::F16;
}

/// The bias type of an FP8 matmul (and C's type for an FP8 D), at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fp8BiasType {
    /// bf16 (`CUDA_R_16BF`).
    BF16,
    /// f16 (`CUDA_R_16F`).
    F16,
}

impl Fp8BiasType {
    /// The type code.
    pub fn cuda(self) -> cudaDataType_t {
        match self {
            Fp8BiasType::BF16 => cudaDataType_t::CUDA_R_16BF,
            Fp8BiasType::F16 => cudaDataType_t::CUDA_R_16F,
        }
    }

    /// `"bf16"` or `"f16"`.
    pub fn name(self) -> &'static str {
        match self {
            Fp8BiasType::BF16 => "bf16",
            Fp8BiasType::F16 => "f16",
        }
    }
}

macro_rules! fp8_output {
    ($t:ty, $tag:expr, $c:ident, $bias:ty) => {
        impl sealed::Output for $t {}
        impl Fp8Output for $t {
            const TYPE: Fp8OutputType = $tag;
            const C_TYPE: cudaDataType_t = cudaDataType_t::$c;
            type Bias = $bias;
        }
    };
}
fp8_output!(f32, Fp8OutputType::F32, CUDA_R_32F, bf16);
fp8_output!(f16, Fp8OutputType::F16, CUDA_R_16F, f16);
fp8_output!(bf16, Fp8OutputType::BF16, CUDA_R_16BF, bf16);
fp8_output!(
    F8E4M3,
    Fp8OutputType::Fp8(Fp8Format::E4M3),
    CUDA_R_16BF,
    bf16
);
fp8_output!(
    F8E5M2,
    Fp8OutputType::Fp8(Fp8Format::E5M2),
    CUDA_R_16BF,
    bf16
);

/// D's type, at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Fp8OutputType {
    /// f32.
    F32,
    /// f16.
    F16,
    /// bf16.
    BF16,
    /// An FP8 format.
    Fp8(Fp8Format),
}

impl Fp8OutputType {
    /// D's type code.
    pub fn cuda(self) -> cudaDataType_t {
        match self {
            Fp8OutputType::F32 => cudaDataType_t::CUDA_R_32F,
            Fp8OutputType::F16 => cudaDataType_t::CUDA_R_16F,
            Fp8OutputType::BF16 => cudaDataType_t::CUDA_R_16BF,
            Fp8OutputType::Fp8(f) => f.cuda(),
        }
    }

    /// C's type code with the default bias type (D's, or bf16 for an FP8
    /// D; see [`Fp8Types::c_cuda`] for an f16 one).
    pub fn c_cuda(self) -> cudaDataType_t {
        match self {
            Fp8OutputType::Fp8(_) => cudaDataType_t::CUDA_R_16BF,
            other => other.cuda(),
        }
    }

    /// The default bias type code (bf16, or f16 for an f16 D).
    pub fn bias_cuda(self) -> cudaDataType_t {
        self.default_bias().cuda()
    }

    /// The default bias type (bf16, or f16 for an f16 D).
    pub fn default_bias(self) -> Fp8BiasType {
        match self {
            Fp8OutputType::F16 => Fp8BiasType::F16,
            _ => Fp8BiasType::BF16,
        }
    }

    /// The bias types cuBLASLt takes with this D: f16 and bf16 for an FP8
    /// D, the default otherwise.
    pub fn allows_bias(self, bias: Fp8BiasType) -> bool {
        self.is_fp8() || bias == self.default_bias()
    }

    /// Bytes per element of D.
    pub fn size(self) -> usize {
        match self {
            Fp8OutputType::F32 => 4,
            Fp8OutputType::F16 | Fp8OutputType::BF16 => 2,
            Fp8OutputType::Fp8(_) => 1,
        }
    }

    /// Whether D is FP8.
    pub fn is_fp8(self) -> bool {
        matches!(self, Fp8OutputType::Fp8(_))
    }

    /// A short name (`"bf16"`, `"fp8e4m3"`).
    pub fn name(self) -> &'static str {
        match self {
            Fp8OutputType::F32 => "f32",
            Fp8OutputType::F16 => "f16",
            Fp8OutputType::BF16 => "bf16",
            Fp8OutputType::Fp8(f) => f.name(),
        }
    }
}

/// The element types of one FP8 matmul, at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fp8Types {
    /// A's format.
    pub a: Fp8Format,
    /// B's format.
    pub b: Fp8Format,
    /// D's type.
    pub d: Fp8OutputType,
    /// The bias type, and C's type for an FP8 D (`None`: D's default,
    /// [`Fp8OutputType::default_bias`]).
    pub bias: Option<Fp8BiasType>,
}

impl Fp8Types {
    /// The types of `A`, `B` and `D`, with D's default bias type.
    pub fn of<A: Fp8Input, B: Fp8Input, D: Fp8Output>() -> Self {
        Fp8Types {
            a: A::FORMAT,
            b: B::FORMAT,
            d: D::TYPE,
            bias: None,
        }
    }

    /// The same with bias type `bias` (for an FP8 D, C's type too).
    pub fn with_bias(mut self, bias: Fp8BiasType) -> Self {
        self.bias = Some(bias);
        self
    }

    /// The bias type: the one set, or D's default.
    pub fn bias_type(&self) -> Fp8BiasType {
        self.bias.unwrap_or_else(|| self.d.default_bias())
    }

    /// C's type code: the bias type for an FP8 D, D's type otherwise.
    pub fn c_cuda(&self) -> cudaDataType_t {
        if self.d.is_fp8() {
            self.bias_type().cuda()
        } else {
            self.d.cuda()
        }
    }
}

/// How A and B are scaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Fp8ScaleMode {
    /// One f32 scale per tensor (`CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F`,
    /// Hopper and newer).
    #[default]
    Tensor,
    /// MXFP8 block scaling: one UE8M0 scale per 32 consecutive elements
    /// along k (`CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0`). Blackwell
    /// (sm_100+) only.
    Mxfp8,
}

impl Fp8ScaleMode {
    /// The cuBLASLt scale-mode constant for A and B.
    pub fn to_raw(self) -> cublasLtMatmulMatrixScale_t {
        match self {
            Fp8ScaleMode::Tensor => {
                cublasLtMatmulMatrixScale_t::CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F
            }
            Fp8ScaleMode::Mxfp8 => {
                cublasLtMatmulMatrixScale_t::CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0
            }
        }
    }
}

/// Whether an FP8 matmul takes epilogue `e`: the forward epilogues without
/// an auxiliary output (None, Relu, GeluTanh, Bias, ReluBias, GeluTanhBias).
pub fn fp8_epilogue_supported(e: Epilogue) -> bool {
    matches!(
        e,
        Epilogue::None
            | Epilogue::Relu
            | Epilogue::GeluTanh
            | Epilogue::Bias
            | Epilogue::ReluBias
            | Epilogue::GeluTanhBias
    )
}

/// Everything an [`Fp8MatmulPlan`](crate::blas::Fp8MatmulPlan) is built
/// from: the layouts of A, B and D (C is D, in place; no C for an FP8 D), the epilogue, fast
/// accumulation, whether D's amax is written, the scale mode and the
/// pointer alignment.
///
/// cuBLASLt's FP8 GEMM computes
/// `D = scale_d · epilogue(alpha · scale_a · scale_b · A·B + beta · scale_c · C (+ bias))`
/// with f32 accumulation (`CUBLAS_COMPUTE_32F`, f32 alpha/beta), and can
/// write `amax_d = max |…|` before `scale_d` (the oracle is
/// [`reference::gemm_fp8`](crate::reference::gemm_fp8)). Its rules, checked
/// by [`check_types`](Self::check_types):
///
/// - A and B are E4M3 or E5M2, but not both E5M2; an E5M2 D needs an E5M2
///   operand (E4M3 x E4M3 gives f32, f16, bf16 or E4M3).
/// - D is f32, f16, bf16, E4M3 or E5M2. C has D's type, except for an FP8
///   D, where C is bf16 or f16 (the bias type, [`Fp8Types::c_cuda`], as
///   NVIDIA's table allows; bf16 by default): this crate has no
///   separate C, so with an FP8 D `beta` must be 0 and C is not read (the
///   run hands cuBLASLt a placeholder C, neither D nor null, which it
///   requires). `scale_d` applies to FP8 outputs only; `scale_c` to an
///   FP8 C only, which this crate never has (fold it into `beta`). The
///   bias vector is bf16, or f16 for an f16 D ([`Fp8Output::Bias`]); with
///   an FP8 D it may be f16 instead ([`Fp8Types::with_bias`]); any other
///   bias type is refused naming `bias`.
/// - "TN": in cuBLASLt's column-major terms A is transposed and B is not.
///   For the logical product D = A·B that is, whatever D's order: **A has
///   its k dimension contiguous** (row-major m x k, or `col_major(k, m).t()`)
///   and **B has its k dimension contiguous** (column-major k x n, or
///   `row_major(n, k).t()`). A wrong one is an error naming it and the
///   layout to use. (NVIDIA requires this on Ada, Hopper and Blackwell
///   GeForce, sm_89/sm_90/sm_120; sm_100 accepts more layouts, which this
///   crate does not offer.)
/// - 16-byte alignment: device pointers ([`Fp8MatmulSpec::with_alignment`]
///   at least 16), every leading dimension and batch stride a multiple of
///   16 bytes, and k a multiple of 16. D's contiguous dimension (m for a
///   column-major D, n for a row-major one) is a multiple of 16 too.
/// - The amax of D ([`with_amax_d`](Self::with_amax_d)) only for an FP8 D.
/// - Epilogues: [`Epilogue::None`], `Relu`, `GeluTanh`, `Bias`, `ReluBias`,
///   `GeluTanhBias` ([`fp8_epilogue_supported`]).
/// - Block scaling ([`Fp8ScaleMode::Mxfp8`], `VEC32_UE8M0` scales per 32
///   elements along k) exists on Blackwell (sm_100 and newer) only; a plan
///   for it on an older device is [`Error::Unsupported`] naming the
///   architecture.
///
/// ```
/// use cudnn::blas::{Epilogue, Fp8MatmulSpec, Layout};
/// use cudnn::F8E4M3;
/// use half::bf16;
/// // Y (64 x 128, row-major bf16) = X (64 x 256) · Wᵀ, W stored 128 x 256:
/// // both operands have k (256) contiguous: the "TN" layout.
/// let spec = Fp8MatmulSpec::new(
///     Layout::row_major(64, 256),
///     Layout::row_major(128, 256).t(),
///     Layout::row_major(64, 128),
/// )
/// .with_epilogue(Epilogue::Bias);
/// let shape = spec.check::<F8E4M3, F8E4M3, bf16>()?;
/// assert_eq!(shape.bias_len(), 128);
/// // A stored column-major is refused before any library call.
/// let bad = Fp8MatmulSpec::new(
///     Layout::col_major(64, 256),
///     Layout::row_major(128, 256).t(),
///     Layout::row_major(64, 128),
/// );
/// assert!(bad.check::<F8E4M3, F8E4M3, bf16>().unwrap_err().to_string().contains("row_major"));
/// # Ok::<(), cudnn::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fp8MatmulSpec {
    pub(super) a: Layout,
    pub(super) b: Layout,
    pub(super) d: Layout,
    pub(super) epilogue: Epilogue,
    pub(super) fast_accum: bool,
    pub(super) amax_d: bool,
    pub(super) scale_mode: Fp8ScaleMode,
    pub(super) alignment: usize,
}

impl Fp8MatmulSpec {
    /// D = A·B: no epilogue, f32 accumulation without fast accumulation, no
    /// amax, per-tensor scales, 256-byte alignment.
    pub fn new(a: Layout, b: Layout, d: Layout) -> Self {
        Fp8MatmulSpec {
            a,
            b,
            d,
            epilogue: Epilogue::None,
            fast_accum: false,
            amax_d: false,
            scale_mode: Fp8ScaleMode::Tensor,
            alignment: 256,
        }
    }

    /// With epilogue `e` (one of [`fp8_epilogue_supported`]).
    pub fn with_epilogue(mut self, e: Epilogue) -> Self {
        self.epilogue = e;
        self
    }

    /// With or without fast accumulation (`CUBLASLT_MATMUL_DESC_FAST_ACCUM`):
    /// faster on Hopper, the tensor cores then keep partial sums at reduced
    /// precision between promotions to f32 (see
    /// [`tolerance`](crate::reference::gemm_fp8::tolerance)). Off by default.
    pub fn with_fast_accum(mut self, on: bool) -> Self {
        self.fast_accum = on;
        self
    }

    /// With D's amax written to a device f32 at every run
    /// (`CUBLASLT_MATMUL_DESC_AMAX_D_POINTER`); the run then needs the buffer.
    /// FP8 D only: cuBLASLt does not support it for other outputs of an FP8
    /// matmul, and [`check`](Self::check) refuses it there.
    pub fn with_amax_d(mut self, on: bool) -> Self {
        self.amax_d = on;
        self
    }

    /// With scale mode `m`.
    pub fn with_scale_mode(mut self, m: Fp8ScaleMode) -> Self {
        self.scale_mode = m;
        self
    }

    /// With every device pointer aligned to `bytes` (a power of two from 16
    /// to 256).
    pub fn with_alignment(mut self, bytes: usize) -> Self {
        self.alignment = bytes;
        self
    }

    /// The layouts `(a, b, d)`.
    pub fn layouts(&self) -> (Layout, Layout, Layout) {
        (self.a, self.b, self.d)
    }

    /// The epilogue.
    pub fn epilogue(&self) -> Epilogue {
        self.epilogue
    }

    /// Whether fast accumulation is on.
    pub fn fast_accum(&self) -> bool {
        self.fast_accum
    }

    /// Whether D's amax is written.
    pub fn amax_d(&self) -> bool {
        self.amax_d
    }

    /// The scale mode.
    pub fn scale_mode(&self) -> Fp8ScaleMode {
        self.scale_mode
    }

    /// The pointer alignment in bytes.
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// A short description for errors.
    pub fn describe(&self) -> String {
        format!(
            "a {}, b {}, d {}, epilogue {:?}, fast_accum {}, amax_d {}, scale mode {:?}, alignment {}",
            self.a,
            self.b,
            self.d,
            self.epilogue,
            self.fast_accum,
            self.amax_d,
            self.scale_mode,
            self.alignment
        )
    }

    /// Check the spec for `A`, `B`, `D` (no library call).
    ///
    /// # Errors
    /// As [`check_types`](Self::check_types).
    pub fn check<A: Fp8Input, B: Fp8Input, D: Fp8Output>(&self) -> Result<Fp8Shape> {
        self.check_types(Fp8Types::of::<A, B, D>())
    }

    /// Check the spec for element types given at run time (no library
    /// call): the type combination, the layouts (shape chain, "TN", 16-byte
    /// leading dimensions and strides, k a multiple of 16), the epilogue
    /// and the alignment.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] or [`Error::Mismatch`] naming the argument
    /// (`"b"` for E5M2 x E5M2, `"d"` for E4M3 x E4M3 -> E5M2, `"m"` / `"n"`
    /// for D's contiguous dimension not in 16s, `"amax_d"` for an amax with a D that is not
    /// FP8, `"a"` / `"b"` for a layout that is not K-major,
    /// `"a.ld"`, `"k"`, `"epilogue"`, `"alignment"`, ...).
    pub fn check_types(&self, t: Fp8Types) -> Result<Fp8Shape> {
        if t.a == Fp8Format::E5M2 && t.b == Fp8Format::E5M2 {
            return Err(Error::invalid(
                "b",
                "cuBLASLt has no E5M2 x E5M2 FP8 matmul: make A or B E4M3",
                "fp8e5m2 x fp8e5m2",
            ));
        }
        if t.a == Fp8Format::E4M3
            && t.b == Fp8Format::E4M3
            && t.d == Fp8OutputType::Fp8(Fp8Format::E5M2)
        {
            return Err(Error::invalid(
                "d",
                "cuBLASLt has no E4M3 x E4M3 -> E5M2 matmul (an E5M2 D needs an E5M2 operand): make D E4M3, or A or B E5M2",
                "fp8e4m3 x fp8e4m3 -> fp8e5m2",
            ));
        }
        if let Some(bias) = t.bias
            && !t.d.allows_bias(bias)
        {
            return Err(Error::invalid(
                "bias",
                format!(
                    "with a {} D cuBLASLt takes a {} bias (f16 or bf16 only with an FP8 D)",
                    t.d.name(),
                    t.d.default_bias().name()
                ),
                bias.name(),
            ));
        }
        if !fp8_epilogue_supported(self.epilogue) {
            return Err(Error::invalid(
                "epilogue",
                "an FP8 matmul takes None, Relu, GeluTanh, Bias, ReluBias or GeluTanhBias \
                 (renamed from Gelu / GeluBias, which remain as deprecated aliases)",
                self.epilogue,
            ));
        }
        if self.amax_d && !t.d.is_fp8() {
            return Err(Error::invalid(
                "amax_d",
                format!(
                    "cuBLASLt computes D's amax for an FP8 D only (with FP8 inputs and a {} D it is unsupported): use with_amax_d(false)",
                    t.d.name()
                ),
                true,
            ));
        }
        if !self.alignment.is_power_of_two() || !(16..=256).contains(&self.alignment) {
            return Err(Error::invalid(
                "alignment",
                "must be a power of two from 16 to 256 bytes (FP8 matmuls need 16-byte aligned pointers)",
                self.alignment,
            ));
        }
        let f = frame(&self.a, &self.b, &self.d)?;
        if self.a.is_column_contiguous() {
            return Err(Error::invalid(
                "a",
                format!(
                    "FP8 matmuls need A with its k dimension contiguous (cuBLASLt's \"TN\" layout: A transposed in column-major terms); store A as Layout::row_major({m}, {k}) or Layout::col_major({k}, {m}).t(), i.e. transpose A",
                    m = self.a.rows(),
                    k = self.a.cols()
                ),
                self.a.describe(),
            ));
        }
        if !self.b.is_column_contiguous() {
            return Err(Error::invalid(
                "b",
                format!(
                    "FP8 matmuls need B with its k dimension contiguous (cuBLASLt's \"TN\" layout: B not transposed in column-major terms); store B as Layout::col_major({k}, {n}) or Layout::row_major({n}, {k}).t(), i.e. transpose B",
                    k = self.b.rows(),
                    n = self.b.cols()
                ),
                self.b.describe(),
            ));
        }
        // The frame's flags must agree: first operand transposed, second not.
        if !f.first.transposed || f.second.transposed {
            return Err(Error::invalid(
                "a",
                "the layouts do not map to cuBLASLt's \"TN\" form (a bug in the frame mapping)",
                self.describe(),
            ));
        }
        if !f.k.is_multiple_of(16) {
            return Err(Error::invalid(
                "k",
                "must be a multiple of 16 for an FP8 matmul (16-byte rows of the K-major operands)",
                f.k,
            ));
        }
        // cuBLASLt's FP8 kernels also need the rows of its column-major D
        // (its M) in 16s: D's contiguous dimension, m for a column-major D,
        // n for a row-major one (the frame is swapped). Its heuristic says
        // so ("M must be divisible by 16"), and PyTorch's _scaled_mm checks
        // the same dimension.
        if !f.m.is_multiple_of(16) {
            let (name, which) = if f.swap {
                ("n", "n, D's contiguous dimension (D is row-major)")
            } else {
                ("m", "m, D's contiguous dimension (D is column-major)")
            };
            return Err(Error::invalid(
                name,
                format!("{which} must be a multiple of 16 for an FP8 matmul"),
                f.m,
            ));
        }
        let sixteen = |name: &str, what: &str, elems: usize, size: usize| -> Result<()> {
            let bytes = elems.checked_mul(size).ok_or_else(|| {
                Error::invalid(name, format!("{what} in bytes overflows usize"), elems)
            })?;
            if !bytes.is_multiple_of(16) {
                return Err(Error::invalid(
                    name,
                    format!(
                        "{what} must be a multiple of 16 bytes for an FP8 matmul ({size}-byte elements)"
                    ),
                    elems,
                ));
            }
            Ok(())
        };
        for (name, l, size) in [
            ("a", &self.a, 1),
            ("b", &self.b, 1),
            ("d", &self.d, t.d.size()),
        ] {
            sixteen(&format!("{name}.ld"), "the leading dimension", l.ld(), size)?;
            if l.batch_count() > 1 {
                sixteen(
                    &format!("{name}.batch_stride"),
                    "the batch stride",
                    l.batch_stride(),
                    size,
                )?;
            }
        }
        for (name, v) in [("m", f.m), ("n", f.n), ("k", f.k)] {
            u64::try_from(v).map_err(|_| Error::invalid(name, "must fit in u64", v))?;
        }
        for (name, o) in [("a", f.first), ("b", f.second), ("d", f.out)] {
            i64::try_from(o.ld)
                .map_err(|_| Error::invalid(format!("{name}.ld"), "must fit in i64", o.ld))?;
            i64::try_from(o.stride).map_err(|_| {
                Error::invalid(format!("{name}.batch_stride"), "must fit in i64", o.stride)
            })?;
        }
        i32::try_from(f.batch)
            .map_err(|_| Error::invalid("batch_count", "must fit in i32", f.batch))?;
        let bias_len = if self.epilogue.bias_use() == Some(BiasUse::Bias) {
            f.m
        } else {
            0
        };
        Ok(Fp8Shape {
            frame: f,
            types: t,
            epilogue: self.epilogue,
            bias_len,
        })
    }
}

/// A checked [`Fp8MatmulSpec`]: the library's frame, the types and the
/// bias length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fp8Shape {
    pub(super) frame: Frame,
    pub(super) types: Fp8Types,
    pub(super) epilogue: Epilogue,
    pub(super) bias_len: usize,
}

impl Fp8Shape {
    /// `(m, n, k)` in the library's frame.
    pub fn dims(&self) -> (usize, usize, usize) {
        (self.frame.m, self.frame.n, self.frame.k)
    }

    /// Whether the library computes Dᵀ = Bᵀ·Aᵀ (D not column-contiguous).
    pub fn swaps_operands(&self) -> bool {
        self.frame.swap
    }

    /// Matrices in the batch.
    pub fn batch_count(&self) -> usize {
        self.frame.batch
    }

    /// The element types.
    pub fn types(&self) -> Fp8Types {
        self.types
    }

    /// The bias length (one per element of D's contiguous dimension; 0
    /// without a bias epilogue). The bias is shared by the batch.
    pub fn bias_len(&self) -> usize {
        self.bias_len
    }

    /// Floating-point operations of one run (`2·m·n·k·batch`).
    pub fn flops(&self) -> f64 {
        2.0 * self.frame.m as f64
            * self.frame.n as f64
            * self.frame.k as f64
            * self.frame.batch as f64
    }
}

/// The descriptors of one FP8 spec: the matmul descriptor (f32 compute and
/// scale, transposes "TN", epilogue, bias type, fast accumulation, amax and
/// scale pointers, scale modes), the layouts of the two operands, of C and
/// of D in the library's frame, and the preference. Host objects: building
/// them needs cuBLASLt but no device.
#[derive(Debug)]
pub struct Fp8Descriptors {
    pub(super) shape: Fp8Shape,
    pub(super) desc: MatmulDesc,
    pub(super) first: LtMatrixLayout,
    pub(super) second: LtMatrixLayout,
    pub(super) c: LtMatrixLayout,
    pub(super) out: LtMatrixLayout,
    pub(super) pref: MatmulPreference,
    /// The pointers set on the descriptor, in the order of
    /// [`POINTER_ATTRS`] (placeholders until a run; 0 = not set).
    pub(super) ptrs: [usize; 6],
}

/// The pointer attributes a run sets: A, B, C, D scales, amax of D, bias.
pub(super) const POINTER_ATTRS: [DescAttr; 6] = [
    DescAttr::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
    DescAttr::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
    DescAttr::CUBLASLT_MATMUL_DESC_C_SCALE_POINTER,
    DescAttr::CUBLASLT_MATMUL_DESC_D_SCALE_POINTER,
    DescAttr::CUBLASLT_MATMUL_DESC_AMAX_D_POINTER,
    DescAttr::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
];

impl Fp8Descriptors {
    /// Check `spec` for the types `t` and build its descriptors, with the
    /// preference limited to `workspace_limit` bytes. The amax and bias
    /// pointers (when the spec uses them) are set to placeholders aligned to
    /// the spec's alignment; scale pointers are left unset (scale 1) until a
    /// run sets them.
    ///
    /// # Errors
    /// As [`Fp8MatmulSpec::check_types`]; [`Error::Cublas`] from the
    /// descriptors (the message names the spec).
    pub fn new(spec: &Fp8MatmulSpec, t: Fp8Types, workspace_limit: usize) -> Result<Self> {
        let shape = spec.check_types(t)?;
        let ctx = |e: Error| e.with_context(spec.describe());
        let f = &shape.frame;
        let mut desc = MatmulDesc::new(
            cublasComputeType_t::CUBLAS_COMPUTE_32F,
            cudaDataType_t::CUDA_R_32F,
        )
        .map_err(ctx)?;
        desc.set_transposes(trans(f.first.transposed), trans(f.second.transposed))
            .map_err(ctx)?;
        desc.set_epilogue(spec.epilogue.to_raw(f.swap))
            .map_err(ctx)?;
        desc.set(
            DescAttr::CUBLASLT_MATMUL_DESC_FAST_ACCUM,
            i8::from(spec.fast_accum),
        )
        .map_err(ctx)?;
        let mut ptrs = [0usize; 6];
        if spec.amax_d {
            desc.set(
                DescAttr::CUBLASLT_MATMUL_DESC_AMAX_D_POINTER,
                spec.alignment,
            )
            .map_err(ctx)?;
            ptrs[4] = spec.alignment;
        }
        if shape.bias_len > 0 {
            desc.set(
                DescAttr::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                t.bias_type().cuda(),
            )
            .map_err(ctx)?;
            desc.set(DescAttr::CUBLASLT_MATMUL_DESC_BIAS_POINTER, spec.alignment)
                .map_err(ctx)?;
            ptrs[5] = spec.alignment;
        }
        if spec.scale_mode != Fp8ScaleMode::Tensor {
            let mode = spec.scale_mode.to_raw();
            desc.set(DescAttr::CUBLASLT_MATMUL_DESC_A_SCALE_MODE, mode)
                .map_err(ctx)?;
            desc.set(DescAttr::CUBLASLT_MATMUL_DESC_B_SCALE_MODE, mode)
                .map_err(ctx)?;
        }
        // Swapped (Dᵀ = Bᵀ·Aᵀ): the first operand is B, the second A.
        let (t1, t2) = if f.swap {
            (t.b.cuda(), t.a.cuda())
        } else {
            (t.a.cuda(), t.b.cuda())
        };
        let first = lt_layout(t1, &f.first, f.batch).map_err(ctx)?;
        let second = lt_layout(t2, &f.second, f.batch).map_err(ctx)?;
        let c = lt_layout(t.c_cuda(), &f.out, f.batch).map_err(ctx)?;
        let out = lt_layout(t.d.cuda(), &f.out, f.batch).map_err(ctx)?;
        let mut pref = MatmulPreference::new().map_err(ctx)?;
        pref.set_max_workspace(u64::try_from(workspace_limit).unwrap_or(u64::MAX))
            .map_err(ctx)?;
        pref.set_min_alignment(u32::try_from(spec.alignment).unwrap_or(256))
            .map_err(ctx)?;
        Ok(Fp8Descriptors {
            shape,
            desc,
            first,
            second,
            c,
            out,
            pref,
            ptrs,
        })
    }

    /// The checked shape.
    pub fn shape(&self) -> &Fp8Shape {
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

    /// The layout of C (D's shape, C's type).
    pub fn c_layout(&self) -> &LtMatrixLayout {
        &self.c
    }

    /// The layout of D.
    pub fn output_layout(&self) -> &LtMatrixLayout {
        &self.out
    }

    /// The preference.
    pub fn preference(&self) -> &MatmulPreference {
        &self.pref
    }

    /// Whether fast accumulation is set on the descriptor (read back).
    ///
    /// # Errors
    /// [`Error::Cublas`].
    pub fn fast_accum(&self) -> Result<bool> {
        Ok(self
            .desc
            .get(DescAttr::CUBLASLT_MATMUL_DESC_FAST_ACCUM, 0i8)?
            != 0)
    }

    /// The bias type set on the descriptor (read back).
    ///
    /// # Errors
    /// [`Error::Cublas`].
    pub fn bias_type(&self) -> Result<cudaDataType_t> {
        self.desc.get(
            DescAttr::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
            cudaDataType_t(0),
        )
    }

    /// The A and B scale modes set on the descriptor (read back).
    ///
    /// # Errors
    /// [`Error::Cublas`].
    pub fn scale_modes(
        &self,
    ) -> Result<(cublasLtMatmulMatrixScale_t, cublasLtMatmulMatrixScale_t)> {
        let z = cublasLtMatmulMatrixScale_t(0);
        Ok((
            self.desc
                .get(DescAttr::CUBLASLT_MATMUL_DESC_A_SCALE_MODE, z)?,
            self.desc
                .get(DescAttr::CUBLASLT_MATMUL_DESC_B_SCALE_MODE, z)?,
        ))
    }

    /// The scale, amax and bias pointers on the descriptor (read back), in
    /// the order A, B, C, D scale, amax of D, bias (0 = unset).
    ///
    /// # Errors
    /// [`Error::Cublas`].
    pub fn pointers(&self) -> Result<[usize; 6]> {
        let mut out = [0usize; 6];
        for (slot, attr) in out.iter_mut().zip(POINTER_ATTRS) {
            *slot = self.desc.get(attr, 0usize)?;
        }
        Ok(out)
    }
}
