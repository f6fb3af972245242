//! Epilogues, the matmul spec, its checked shape and the plan-cache key.

use std::fmt;

use super::super::gemm::{ComputeType, Frame, GemmTypes, ScaleType, frame};
use super::super::matrix::Layout;
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::sys::cublas::{cublasComputeType_t, cublasLtEpilogue_t};
use crate::sys::cudart::cudaDataType_t;

// ---------------------------------------------------------------------------
// Epilogues

/// What cuBLASLt does to `alpha·A·B + beta·C` before storing D
/// (`cublasLtEpilogue_t`). The vectors' lengths and the auxiliary buffer
/// are described in the [`blas` module docs](crate::blas#cublaslt-frames-and-epilogue-vectors)
/// and given by [`MatmulShape`].
///
/// Every GELU epilogue of cuBLASLt is the **tanh approximation**,
/// `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`, hence the names
/// `GeluTanh*`; the graph API has both forms
/// ([`Graph::gelu_tanh`](crate::graph::Graph::gelu_tanh), the same
/// function, and [`Graph::gelu_erf`](crate::graph::Graph::gelu_erf), the
/// exact one). The forms side by side, with their f64 references:
/// [`reference::gelu`](crate::reference::gelu).
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
    /// `CUBLASLT_EPILOGUE_GELU`: gelu_tanh(x).
    GeluTanh,
    /// `CUBLASLT_EPILOGUE_GELU_AUX`: gelu_tanh(x), and x (the GELU input)
    /// written to the auxiliary output (for [`Epilogue::DGeluTanh`]).
    GeluTanhAux,
    /// `CUBLASLT_EPILOGUE_GELU_BIAS`: gelu_tanh(x + bias).
    GeluTanhBias,
    /// `CUBLASLT_EPILOGUE_GELU_AUX_BIAS`: gelu_tanh(x + bias), with x + bias
    /// written to the auxiliary output.
    GeluTanhAuxBias,
    /// `CUBLASLT_EPILOGUE_DRELU`: x · relu'(pre), reading the bit-mask a
    /// ReLU-aux forward wrote.
    DRelu,
    /// `CUBLASLT_EPILOGUE_DRELU_BGRAD`: as [`Epilogue::DRelu`], and the
    /// bias gradient (the sum of D along its non-contiguous dimension).
    DReluBgrad,
    /// `CUBLASLT_EPILOGUE_DGELU`: x · gelu_tanh'(pre), reading the GELU input a
    /// GELU-aux forward wrote.
    DGeluTanh,
    /// `CUBLASLT_EPILOGUE_DGELU_BGRAD`: as [`Epilogue::DGeluTanh`], and the
    /// bias gradient.
    DGeluTanhBgrad,
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
#[non_exhaustive]
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

/// The names before the GELU form was in them (0.1 renamed them; the
/// same variants).
#[allow(non_upper_case_globals)]
impl Epilogue {
    /// Renamed [`Epilogue::GeluTanh`] (cuBLASLt's GELU is the tanh form).
    #[deprecated(note = "renamed Epilogue::GeluTanh: cuBLASLt's GELU is the tanh approximation")]
    pub const Gelu: Epilogue = Epilogue::GeluTanh;
    /// Renamed [`Epilogue::GeluTanhAux`].
    #[deprecated(note = "renamed Epilogue::GeluTanhAux: cuBLASLt's GELU is the tanh approximation")]
    pub const GeluAux: Epilogue = Epilogue::GeluTanhAux;
    /// Renamed [`Epilogue::GeluTanhBias`].
    #[deprecated(
        note = "renamed Epilogue::GeluTanhBias: cuBLASLt's GELU is the tanh approximation"
    )]
    pub const GeluBias: Epilogue = Epilogue::GeluTanhBias;
    /// Renamed [`Epilogue::GeluTanhAuxBias`].
    #[deprecated(
        note = "renamed Epilogue::GeluTanhAuxBias: cuBLASLt's GELU is the tanh approximation"
    )]
    pub const GeluAuxBias: Epilogue = Epilogue::GeluTanhAuxBias;
    /// Renamed [`Epilogue::DGeluTanh`].
    #[deprecated(note = "renamed Epilogue::DGeluTanh: cuBLASLt's GELU is the tanh approximation")]
    pub const DGelu: Epilogue = Epilogue::DGeluTanh;
    /// Renamed [`Epilogue::DGeluTanhBgrad`].
    #[deprecated(
        note = "renamed Epilogue::DGeluTanhBgrad: cuBLASLt's GELU is the tanh approximation"
    )]
    pub const DGeluBgrad: Epilogue = Epilogue::DGeluTanhBgrad;
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
        Epilogue::GeluTanh,
        Epilogue::GeluTanhAux,
        Epilogue::GeluTanhBias,
        Epilogue::GeluTanhAuxBias,
        Epilogue::DRelu,
        Epilogue::DReluBgrad,
        Epilogue::DGeluTanh,
        Epilogue::DGeluTanhBgrad,
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
            Epilogue::GeluTanh => E::CUBLASLT_EPILOGUE_GELU,
            Epilogue::GeluTanhAux => E::CUBLASLT_EPILOGUE_GELU_AUX,
            Epilogue::GeluTanhBias => E::CUBLASLT_EPILOGUE_GELU_BIAS,
            Epilogue::GeluTanhAuxBias => E::CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
            Epilogue::DRelu => E::CUBLASLT_EPILOGUE_DRELU,
            Epilogue::DReluBgrad => E::CUBLASLT_EPILOGUE_DRELU_BGRAD,
            Epilogue::DGeluTanh => E::CUBLASLT_EPILOGUE_DGELU,
            Epilogue::DGeluTanhBgrad => E::CUBLASLT_EPILOGUE_DGELU_BGRAD,
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
            | Epilogue::GeluTanhBias
            | Epilogue::GeluTanhAuxBias => Some(BiasUse::Bias),
            Epilogue::DReluBgrad
            | Epilogue::DGeluTanhBgrad
            | Epilogue::BgradA
            | Epilogue::BgradB => Some(BiasUse::Gradient),
            _ => None,
        }
    }

    /// The auxiliary buffer's contents and whether the epilogue writes it
    /// (`true`, forward) or reads it (`false`, backward).
    pub fn aux(self) -> Option<(AuxKind, bool)> {
        match self {
            Epilogue::ReluAux | Epilogue::ReluAuxBias => Some((AuxKind::ReluMask, true)),
            Epilogue::DRelu | Epilogue::DReluBgrad => Some((AuxKind::ReluMask, false)),
            Epilogue::GeluTanhAux | Epilogue::GeluTanhAuxBias => Some((AuxKind::GeluInput, true)),
            Epilogue::DGeluTanh | Epilogue::DGeluTanhBgrad => Some((AuxKind::GeluInput, false)),
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

/// Everything a [`MatmulPlan`](crate::blas::MatmulPlan) is built from: D = epilogue(alpha·A·B +
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
/// .with_epilogue(Epilogue::GeluTanhBias);
/// let shape = spec.check::<f32, f32>()?;
/// assert_eq!(shape.bias_len(), 64); // one per feature (column of row-major Y)
/// # Ok::<(), cudnn::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MatmulSpec {
    pub(super) a: Layout,
    pub(super) b: Layout,
    pub(super) d: Layout,
    pub(super) compute: ComputeType,
    pub(super) epilogue: Epilogue,
    pub(super) alignment: usize,
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
    /// layouts as for [`GemmPlan::new`](crate::blas::GemmPlan::new), the compute
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
    pub(super) frame: Frame,
    pub(super) epilogue: Epilogue,
    pub(super) compute: ComputeType,
    pub(super) raw_compute: cublasComputeType_t,
    pub(super) scale: ScaleType,
    pub(super) bias_len: usize,
    pub(super) bias_stride: usize,
    pub(super) bias_total: usize,
    pub(super) aux_ld: usize,
    pub(super) aux_stride: usize,
    pub(super) aux_bytes: usize,
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
    /// [`MatmulPlan::run`](crate::blas::MatmulPlan::run) checks.
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
pub struct MatmulKey {
    pub(super) spec: MatmulSpec,
    pub(super) a_type: cudaDataType_t,
    pub(super) d_type: cudaDataType_t,
    pub(super) workspace: usize,
}

impl MatmulKey {
    /// The key of `spec` for inputs `A`, output `D` and a handle with
    /// `workspace_limit` bytes of workspace.
    pub fn new<A: GemmTypes<D>, D: DataType>(spec: &MatmulSpec, workspace_limit: usize) -> Self {
        MatmulKey {
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
