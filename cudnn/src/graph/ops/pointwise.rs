//! Pointwise operations: every mode cuDNN 9 offers, forward and backward.

use crate::error::{Error, Result};
use crate::sys::cudnn::cudnnPointwiseMode_t as M;

/// How many tensors a pointwise mode reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arity {
    /// `y = f(x)`.
    Unary,
    /// `y = f(x, b)`, with broadcasting.
    Binary,
    /// `y = f(x, b, t)` (select).
    Ternary,
    /// `dx = f'(x) * dy`: reads `dy` and `x`.
    Backward,
}

/// A pointwise mode and its parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
#[allow(missing_docs)]
pub enum Pointwise {
    // binary
    Add,
    Sub,
    Mul,
    Div,
    Min,
    Max,
    Pow,
    Mod,
    FloorMod,
    /// `x + b*b`.
    AddSquare,
    Atan2,
    CmpEq,
    CmpNeq,
    CmpGt,
    CmpGe,
    CmpLt,
    CmpLe,
    LogicalAnd,
    LogicalOr,
    // unary
    Identity,
    Abs,
    Neg,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Reciprocal,
    Ceil,
    Floor,
    Sin,
    Cos,
    Tan,
    Erf,
    LogicalNot,
    /// `max(x, 0)`.
    Relu,
    /// Clipped / leaky ReLU: `clamp(x, lower, upper)`, slope `slope` below `lower`.
    ReluClipped {
        lower: f64,
        upper: f64,
        slope: f64,
    },
    /// GELU, erf (exact) form: `0.5·x·(1 + erf(x/√2))`
    /// (`CUDNN_POINTWISE_GELU_FWD`; PyTorch's `nn.GELU()`).
    GeluErf,
    /// GELU, tanh approximation:
    /// `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`
    /// (`CUDNN_POINTWISE_GELU_APPROX_TANH_FWD`; the form of cuBLASLt's GELU
    /// epilogues; PyTorch's `nn.GELU(approximate="tanh")`).
    GeluTanh,
    Sigmoid,
    Tanh,
    Swish {
        beta: f64,
    },
    Elu {
        alpha: f64,
    },
    Softplus {
        beta: f64,
    },
    // backward: (dy, x) -> dx
    ReluBwd,
    ReluClippedBwd {
        lower: f64,
        upper: f64,
        slope: f64,
    },
    /// The erf form's backward (`CUDNN_POINTWISE_GELU_BWD`).
    GeluErfBwd,
    /// The tanh form's backward (`CUDNN_POINTWISE_GELU_APPROX_TANH_BWD`).
    GeluTanhBwd,
    SigmoidBwd,
    TanhBwd,
    SwishBwd {
        beta: f64,
    },
    EluBwd {
        alpha: f64,
    },
    SoftplusBwd {
        beta: f64,
    },
    // ternary
    /// `t ? x : b` (t the mask).
    BinarySelect,
    /// The index along `axis` of each element.
    GenIndex {
        axis: i64,
    },
}

/// The names before the GELU form was in them (0.1 renamed them; the
/// same modes).
#[allow(non_upper_case_globals)]
impl Pointwise {
    /// Renamed [`Pointwise::GeluErf`] (this mode is the erf form).
    #[deprecated(
        note = "renamed Pointwise::GeluErf (the erf form); the tanh form is Pointwise::GeluTanh"
    )]
    pub const Gelu: Pointwise = Pointwise::GeluErf;
    /// Renamed [`Pointwise::GeluErfBwd`].
    #[deprecated(note = "renamed Pointwise::GeluErfBwd (the erf form)")]
    pub const GeluBwd: Pointwise = Pointwise::GeluErfBwd;
}

impl Pointwise {
    /// Every mode (parameterised ones with typical parameters), for tests and tools.
    pub fn all() -> Vec<Pointwise> {
        use Pointwise::*;
        vec![
            Add,
            Sub,
            Mul,
            Div,
            Min,
            Max,
            Pow,
            Mod,
            FloorMod,
            AddSquare,
            Atan2,
            CmpEq,
            CmpNeq,
            CmpGt,
            CmpGe,
            CmpLt,
            CmpLe,
            LogicalAnd,
            LogicalOr,
            Identity,
            Abs,
            Neg,
            Exp,
            Log,
            Sqrt,
            Rsqrt,
            Reciprocal,
            Ceil,
            Floor,
            Sin,
            Cos,
            Tan,
            Erf,
            LogicalNot,
            Relu,
            ReluClipped {
                lower: 0.0,
                upper: 6.0,
                slope: 0.01,
            },
            GeluErf,
            GeluTanh,
            Sigmoid,
            Tanh,
            Swish { beta: 1.0 },
            Elu { alpha: 1.0 },
            Softplus { beta: 1.0 },
            ReluBwd,
            ReluClippedBwd {
                lower: 0.0,
                upper: 6.0,
                slope: 0.01,
            },
            GeluErfBwd,
            GeluTanhBwd,
            SigmoidBwd,
            TanhBwd,
            SwishBwd { beta: 1.0 },
            EluBwd { alpha: 1.0 },
            SoftplusBwd { beta: 1.0 },
            BinarySelect,
            GenIndex { axis: 0 },
        ]
    }

    /// cuDNN's mode.
    pub fn raw(self) -> M {
        use Pointwise::*;
        match self {
            Add => M::CUDNN_POINTWISE_ADD,
            Sub => M::CUDNN_POINTWISE_SUB,
            Mul => M::CUDNN_POINTWISE_MUL,
            Div => M::CUDNN_POINTWISE_DIV,
            Min => M::CUDNN_POINTWISE_MIN,
            Max => M::CUDNN_POINTWISE_MAX,
            Pow => M::CUDNN_POINTWISE_POW,
            Mod => M::CUDNN_POINTWISE_MOD,
            FloorMod => M::CUDNN_POINTWISE_FLOOR_MOD,
            AddSquare => M::CUDNN_POINTWISE_ADD_SQUARE,
            Atan2 => M::CUDNN_POINTWISE_ATAN2,
            CmpEq => M::CUDNN_POINTWISE_CMP_EQ,
            CmpNeq => M::CUDNN_POINTWISE_CMP_NEQ,
            CmpGt => M::CUDNN_POINTWISE_CMP_GT,
            CmpGe => M::CUDNN_POINTWISE_CMP_GE,
            CmpLt => M::CUDNN_POINTWISE_CMP_LT,
            CmpLe => M::CUDNN_POINTWISE_CMP_LE,
            LogicalAnd => M::CUDNN_POINTWISE_LOGICAL_AND,
            LogicalOr => M::CUDNN_POINTWISE_LOGICAL_OR,
            Identity => M::CUDNN_POINTWISE_IDENTITY,
            Abs => M::CUDNN_POINTWISE_ABS,
            Neg => M::CUDNN_POINTWISE_NEG,
            Exp => M::CUDNN_POINTWISE_EXP,
            Log => M::CUDNN_POINTWISE_LOG,
            Sqrt => M::CUDNN_POINTWISE_SQRT,
            Rsqrt => M::CUDNN_POINTWISE_RSQRT,
            Reciprocal => M::CUDNN_POINTWISE_RECIPROCAL,
            Ceil => M::CUDNN_POINTWISE_CEIL,
            Floor => M::CUDNN_POINTWISE_FLOOR,
            Sin => M::CUDNN_POINTWISE_SIN,
            Cos => M::CUDNN_POINTWISE_COS,
            Tan => M::CUDNN_POINTWISE_TAN,
            Erf => M::CUDNN_POINTWISE_ERF,
            LogicalNot => M::CUDNN_POINTWISE_LOGICAL_NOT,
            Relu | ReluClipped { .. } => M::CUDNN_POINTWISE_RELU_FWD,
            GeluErf => M::CUDNN_POINTWISE_GELU_FWD,
            GeluTanh => M::CUDNN_POINTWISE_GELU_APPROX_TANH_FWD,
            Sigmoid => M::CUDNN_POINTWISE_SIGMOID_FWD,
            Tanh => M::CUDNN_POINTWISE_TANH_FWD,
            Swish { .. } => M::CUDNN_POINTWISE_SWISH_FWD,
            Elu { .. } => M::CUDNN_POINTWISE_ELU_FWD,
            Softplus { .. } => M::CUDNN_POINTWISE_SOFTPLUS_FWD,
            ReluBwd | ReluClippedBwd { .. } => M::CUDNN_POINTWISE_RELU_BWD,
            GeluErfBwd => M::CUDNN_POINTWISE_GELU_BWD,
            GeluTanhBwd => M::CUDNN_POINTWISE_GELU_APPROX_TANH_BWD,
            SigmoidBwd => M::CUDNN_POINTWISE_SIGMOID_BWD,
            TanhBwd => M::CUDNN_POINTWISE_TANH_BWD,
            SwishBwd { .. } => M::CUDNN_POINTWISE_SWISH_BWD,
            EluBwd { .. } => M::CUDNN_POINTWISE_ELU_BWD,
            SoftplusBwd { .. } => M::CUDNN_POINTWISE_SOFTPLUS_BWD,
            BinarySelect => M::CUDNN_POINTWISE_BINARY_SELECT,
            GenIndex { .. } => M::CUDNN_POINTWISE_GEN_INDEX,
        }
    }

    /// How many tensors it reads.
    pub fn arity(self) -> Arity {
        use Pointwise::*;
        match self {
            Add | Sub | Mul | Div | Min | Max | Pow | Mod | FloorMod | AddSquare | Atan2
            | CmpEq | CmpNeq | CmpGt | CmpGe | CmpLt | CmpLe | LogicalAnd | LogicalOr => {
                Arity::Binary
            }
            ReluBwd
            | ReluClippedBwd { .. }
            | GeluErfBwd
            | GeluTanhBwd
            | SigmoidBwd
            | TanhBwd
            | SwishBwd { .. }
            | EluBwd { .. }
            | SoftplusBwd { .. } => Arity::Backward,
            BinarySelect => Arity::Ternary,
            _ => Arity::Unary,
        }
    }

    /// Whether its output is a boolean (comparisons and logic).
    pub fn is_logical(self) -> bool {
        use Pointwise::*;
        matches!(
            self,
            CmpEq | CmpNeq | CmpGt | CmpGe | CmpLt | CmpLe | LogicalAnd | LogicalOr | LogicalNot
        )
    }

    /// A short name for errors and signatures.
    pub fn name(self) -> String {
        format!("{self:?}")
    }

    /// The first cuDNN release (major, minor) whose graph API takes this
    /// mode, when that is newer than the graph API's own minimum (9.8).
    /// `FloorMod` came with 9.26: older releases refuse the operation
    /// graph with an unrelated status (`NOT_INITIALIZED` on 9.10 and 9.19).
    pub fn min_cudnn(self) -> Option<(u32, u32)> {
        match self {
            Pointwise::FloorMod => Some((9, 26)),
            _ => None,
        }
    }

    /// Whether a cuDNN of version `major.minor` takes this mode.
    ///
    /// # Errors
    /// [`Error::Unsupported`] naming the mode, the version given and the
    /// version that has it.
    pub fn supported_by(self, major: u32, minor: u32) -> Result<()> {
        match self.min_cudnn() {
            Some(need) if (major, minor) < need => Err(Error::Unsupported {
                what: format!(
                    "pointwise mode {} with the loaded cuDNN {major}.{minor}",
                    self.name()
                ),
                needs: Some(format!("cuDNN {}.{} or newer", need.0, need.1)),
            }),
            _ => Ok(()),
        }
    }

    /// Whether the loaded cuDNN takes this mode (see
    /// [`supported_by`](Self::supported_by)); a cuDNN of unknown version is
    /// given the benefit of the doubt (cuDNN itself then decides).
    ///
    /// # Errors
    /// As [`supported_by`](Self::supported_by); the load error when cuDNN
    /// cannot be loaded.
    pub fn check_loaded(self) -> Result<()> {
        if self.min_cudnn().is_none() {
            return Ok(());
        }
        match crate::check::cudnn()?.info().version {
            Some(v) => self.supported_by(v.major, v.minor),
            None => Ok(()),
        }
    }
}
