//! What an RNN is, before cuDNN sees it: [`RnnConfig`] with its cell mode,
//! sizes, direction, bias and input modes, algorithm and precision, the
//! rules it is checked against ([`RnnConfig::check`]) and the shapes of its
//! weights ([`RnnConfig::weight_shapes`]).
//!
//! The rules are cuDNN's own, found by asking `cudnnSetRNNDescriptor_v8` of
//! cuDNN 8.9.7 and 9.28 with every kind of value (the host tier,
//! `cudnn/tests/host/rnn.rs`, compares them over random configurations):
//!
//! - `input_size`, `hidden_size`, `num_layers` in `1..=i32::MAX`;
//! - `projection_size` only for LSTM: in `1..=hidden_size` (equal to
//!   `hidden_size` means "no projection"); every other cell has none;
//! - element type and math precision: `f32` with `f32`, `f64` with `f64`,
//!   `f16` with `f16` or `f32`, `bf16` with `f32` (cuDNN 9.19 takes bf16
//!   RNNs; 8.9 and 9.10 refuse them, reported as [`Error::Unsupported`]);
//! - the persistent algorithms take no projection, only `f32` precision
//!   and only [`RnnBiasMode::Double`].

use crate::dnn::MathType;
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::sys::cudnn as dnn;
use crate::sys::cudnn::Version;

/// The recurrent cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RnnCellMode {
    /// `h' = relu(W x + R h + b)` (`CUDNN_RNN_RELU`).
    RnnRelu,
    /// `h' = tanh(W x + R h + b)` (`CUDNN_RNN_TANH`).
    RnnTanh,
    /// Long short-term memory, gates input, forget, cell, output, optionally
    /// with a recurrent projection (`CUDNN_LSTM`).
    Lstm,
    /// Gated recurrent unit, gates reset, update, new (`CUDNN_GRU`).
    Gru,
}

impl RnnCellMode {
    /// Every mode.
    pub const ALL: [RnnCellMode; 4] = [
        RnnCellMode::RnnRelu,
        RnnCellMode::RnnTanh,
        RnnCellMode::Lstm,
        RnnCellMode::Gru,
    ];

    /// The cuDNN constant.
    pub fn to_raw(self) -> dnn::cudnnRNNMode_t {
        use dnn::cudnnRNNMode_t as M;
        match self {
            RnnCellMode::RnnRelu => M::CUDNN_RNN_RELU,
            RnnCellMode::RnnTanh => M::CUDNN_RNN_TANH,
            RnnCellMode::Lstm => M::CUDNN_LSTM,
            RnnCellMode::Gru => M::CUDNN_GRU,
        }
    }

    /// From the cuDNN constant; unknown values are an error.
    pub fn from_raw(raw: dnn::cudnnRNNMode_t) -> Result<Self> {
        RnnCellMode::ALL
            .into_iter()
            .find(|m| m.to_raw() == raw)
            .ok_or_else(|| Error::invalid("cell mode", "unknown cudnnRNNMode_t", raw.0))
    }

    /// Gates per cell: the number of input (and of recurrent) matrices of
    /// one layer and direction (1, 1, 4, 3).
    pub fn gates(self) -> usize {
        match self {
            RnnCellMode::RnnRelu | RnnCellMode::RnnTanh => 1,
            RnnCellMode::Lstm => 4,
            RnnCellMode::Gru => 3,
        }
    }
}

/// Which biases a layer has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RnnBiasMode {
    /// No biases (`CUDNN_RNN_NO_BIAS`).
    None,
    /// One bias per gate, on the input side (`CUDNN_RNN_SINGLE_INP_BIAS`).
    SingleInput,
    /// Two biases per gate, input and recurrent, as PyTorch's `b_ih` and
    /// `b_hh` (`CUDNN_RNN_DOUBLE_BIAS`).
    #[default]
    Double,
    /// One bias per gate, on the recurrent side (`CUDNN_RNN_SINGLE_REC_BIAS`).
    SingleRecurrent,
}

impl RnnBiasMode {
    /// Every mode.
    pub const ALL: [RnnBiasMode; 4] = [
        RnnBiasMode::None,
        RnnBiasMode::SingleInput,
        RnnBiasMode::Double,
        RnnBiasMode::SingleRecurrent,
    ];

    /// The cuDNN constant.
    pub fn to_raw(self) -> dnn::cudnnRNNBiasMode_t {
        use dnn::cudnnRNNBiasMode_t as B;
        match self {
            RnnBiasMode::None => B::CUDNN_RNN_NO_BIAS,
            RnnBiasMode::SingleInput => B::CUDNN_RNN_SINGLE_INP_BIAS,
            RnnBiasMode::Double => B::CUDNN_RNN_DOUBLE_BIAS,
            RnnBiasMode::SingleRecurrent => B::CUDNN_RNN_SINGLE_REC_BIAS,
        }
    }

    /// From the cuDNN constant; unknown values are an error.
    pub fn from_raw(raw: dnn::cudnnRNNBiasMode_t) -> Result<Self> {
        RnnBiasMode::ALL
            .into_iter()
            .find(|m| m.to_raw() == raw)
            .ok_or_else(|| Error::invalid("bias mode", "unknown cudnnRNNBiasMode_t", raw.0))
    }

    /// Whether the input-side matrices have a bias.
    pub fn input_bias(self) -> bool {
        matches!(self, RnnBiasMode::SingleInput | RnnBiasMode::Double)
    }

    /// Whether the recurrent-side matrices have a bias.
    pub fn recurrent_bias(self) -> bool {
        matches!(self, RnnBiasMode::SingleRecurrent | RnnBiasMode::Double)
    }
}

/// One direction or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RnnDirection {
    /// Left to right only (`CUDNN_UNIDIRECTIONAL`).
    #[default]
    Unidirectional,
    /// Both ways; the outputs of the two directions are concatenated
    /// (forward first) (`CUDNN_BIDIRECTIONAL`).
    Bidirectional,
}

impl RnnDirection {
    /// The cuDNN constant.
    pub fn to_raw(self) -> dnn::cudnnDirectionMode_t {
        match self {
            RnnDirection::Unidirectional => dnn::cudnnDirectionMode_t::CUDNN_UNIDIRECTIONAL,
            RnnDirection::Bidirectional => dnn::cudnnDirectionMode_t::CUDNN_BIDIRECTIONAL,
        }
    }

    /// From the cuDNN constant; unknown values are an error.
    pub fn from_raw(raw: dnn::cudnnDirectionMode_t) -> Result<Self> {
        match raw {
            dnn::cudnnDirectionMode_t::CUDNN_UNIDIRECTIONAL => Ok(RnnDirection::Unidirectional),
            dnn::cudnnDirectionMode_t::CUDNN_BIDIRECTIONAL => Ok(RnnDirection::Bidirectional),
            other => Err(Error::invalid(
                "direction",
                "unknown cudnnDirectionMode_t",
                other.0,
            )),
        }
    }

    /// 1 or 2.
    pub fn count(self) -> usize {
        match self {
            RnnDirection::Unidirectional => 1,
            RnnDirection::Bidirectional => 2,
        }
    }
}

/// How the first layer takes its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RnnInputMode {
    /// Through input matrices, as every other layer (`CUDNN_LINEAR_INPUT`).
    #[default]
    Linear,
    /// Without input matrices: `x` is used as the first layer's `W x`
    /// (`input_size` must equal `hidden_size` to run; `CUDNN_SKIP_INPUT`).
    Skip,
}

impl RnnInputMode {
    /// The cuDNN constant.
    pub fn to_raw(self) -> dnn::cudnnRNNInputMode_t {
        match self {
            RnnInputMode::Linear => dnn::cudnnRNNInputMode_t::CUDNN_LINEAR_INPUT,
            RnnInputMode::Skip => dnn::cudnnRNNInputMode_t::CUDNN_SKIP_INPUT,
        }
    }

    /// From the cuDNN constant; unknown values are an error.
    pub fn from_raw(raw: dnn::cudnnRNNInputMode_t) -> Result<Self> {
        match raw {
            dnn::cudnnRNNInputMode_t::CUDNN_LINEAR_INPUT => Ok(RnnInputMode::Linear),
            dnn::cudnnRNNInputMode_t::CUDNN_SKIP_INPUT => Ok(RnnInputMode::Skip),
            other => Err(Error::invalid(
                "input mode",
                "unknown cudnnRNNInputMode_t",
                other.0,
            )),
        }
    }
}

/// cuDNN's RNN algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RnnAlgo {
    /// The general algorithm (`CUDNN_RNN_ALGO_STANDARD`).
    #[default]
    Standard,
    /// Persistent kernels, recurrent weights kept on chip
    /// (`CUDNN_RNN_ALGO_PERSIST_STATIC`).
    PersistStatic,
    /// Persistent kernels for small hidden sizes
    /// (`CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H`).
    PersistStaticSmallH,
}

impl RnnAlgo {
    /// Every algorithm. (`CUDNN_RNN_ALGO_PERSIST_DYNAMIC` is not offered:
    /// it needs a run-time compilation step, `cudnnBuildRNNDynamic`.)
    pub const ALL: [RnnAlgo; 3] = [
        RnnAlgo::Standard,
        RnnAlgo::PersistStatic,
        RnnAlgo::PersistStaticSmallH,
    ];

    /// The cuDNN constant.
    pub fn to_raw(self) -> dnn::cudnnRNNAlgo_t {
        use dnn::cudnnRNNAlgo_t as A;
        match self {
            RnnAlgo::Standard => A::CUDNN_RNN_ALGO_STANDARD,
            RnnAlgo::PersistStatic => A::CUDNN_RNN_ALGO_PERSIST_STATIC,
            RnnAlgo::PersistStaticSmallH => A::CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H,
        }
    }

    /// From the cuDNN constant; unknown (and the dynamic) values are an error.
    pub fn from_raw(raw: dnn::cudnnRNNAlgo_t) -> Result<Self> {
        RnnAlgo::ALL
            .into_iter()
            .find(|m| m.to_raw() == raw)
            .ok_or_else(|| Error::invalid("algo", "unknown or unsupported cudnnRNNAlgo_t", raw.0))
    }
}

/// The precision the cell arithmetic runs in (`mathPrec`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RnnPrecision {
    /// Half precision (`f16` data only).
    F16,
    /// Single precision (`f32`, `f16` and `bf16` data).
    F32,
    /// Double precision (`f64` data only).
    F64,
}

impl RnnPrecision {
    /// The cuDNN data-type constant.
    pub fn to_raw(self) -> dnn::cudnnDataType_t {
        use dnn::cudnnDataType_t as D;
        match self {
            RnnPrecision::F16 => D::CUDNN_DATA_HALF,
            RnnPrecision::F32 => D::CUDNN_DATA_FLOAT,
            RnnPrecision::F64 => D::CUDNN_DATA_DOUBLE,
        }
    }

    /// The precision cuDNN uses by default for element type `T`: `f64` for
    /// `f64`, `f32` otherwise.
    pub fn default_for<T: DataType>() -> Self {
        if T::CUDNN == dnn::cudnnDataType_t::CUDNN_DATA_DOUBLE {
            RnnPrecision::F64
        } else {
            RnnPrecision::F32
        }
    }
}

/// Everything that defines an RNN (besides its element type and dropout):
/// what [`RnnDescriptor`](super::RnnDescriptor) is made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RnnConfig {
    /// The cell.
    pub cell: RnnCellMode,
    /// Features per time step of the input `x`.
    pub input_size: usize,
    /// Features of the hidden state `h` (and LSTM's cell state `c`).
    pub hidden_size: usize,
    /// LSTM only: the size `h` is projected to (the output size); equal to
    /// `hidden_size` for no projection. Must equal `hidden_size` for the
    /// other cells.
    pub projection_size: usize,
    /// Stacked layers.
    pub num_layers: usize,
    /// One direction or both.
    pub direction: RnnDirection,
    /// Which biases.
    pub bias: RnnBiasMode,
    /// How the first layer takes its input.
    pub input_mode: RnnInputMode,
    /// The algorithm.
    pub algo: RnnAlgo,
    /// Arithmetic precision.
    pub precision: RnnPrecision,
    /// Whether Tensor Cores may be used.
    pub math: MathType,
}

/// Which side of a cell a weight matrix or bias belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RnnWeightSide {
    /// Multiplies the layer's input (`W`, PyTorch's `weight_ih`).
    Input,
    /// Multiplies the previous hidden state (`R`, PyTorch's `weight_hh`).
    Recurrent,
    /// LSTM's projection of `h` (PyTorch's `weight_hr`); no bias.
    Projection,
}

/// The shape of one weight matrix (and whether it has a bias), as
/// [`RnnConfig::weight_shapes`] lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct RnnWeightShape {
    /// The layer (0 is next to the input).
    pub layer: usize,
    /// 0 forward, 1 backward (bidirectional only).
    pub direction: usize,
    /// cuDNN's `linLayerID`: gate `g` of the input side is `g`, of the
    /// recurrent side `gates + g`; LSTM's projection is 8.
    pub lin_layer_id: usize,
    /// Input, recurrent or projection.
    pub side: RnnWeightSide,
    /// The gate (0 for the plain RNN and the projection). LSTM: 0 input,
    /// 1 forget, 2 cell (new memory), 3 output; GRU: 0 reset, 1 update,
    /// 2 new. The same order as PyTorch's `i, f, g, o` and `r, z, n`.
    pub gate: usize,
    /// Rows (outputs) of the matrix; 0 when the matrix is absent
    /// (the first layer's input matrices under [`RnnInputMode::Skip`]).
    pub rows: usize,
    /// Columns (inputs) of the matrix.
    pub cols: usize,
    /// Elements of its bias (0 when it has none).
    pub bias_len: usize,
}

/// What a library without bf16 RNNs is told: cuDNN 8 has none, and cuDNN
/// 9 releases before 9.19 may lack them (9.10 refuses them, 9.19 takes
/// them), so a refusal of bf16 by cuDNN 9 becomes this error too.
pub(crate) fn bf16_unsupported(what: &str, version: Version) -> Error {
    Error::Unsupported {
        what: format!("bf16 {what} on cuDNN {version}"),
        needs: Some(
            "a cuDNN 9 release with bf16 RNNs (9.19 has them; 9.10 and 8.x do not)".to_string(),
        ),
    }
}

/// Whether `e` is cuDNN's `NOT_SUPPORTED`.
pub(crate) fn is_not_supported(e: &Error) -> bool {
    e.cudnn_status() == Some(dnn::cudnnStatus_t::CUDNN_STATUS_NOT_SUPPORTED)
}

/// The most weight matrices [`RnnConfig::weight_shapes`] lists (and so
/// the most an RNN whose weights this crate lists may have): 2^20, about
/// 58,000 layers of a bidirectional LSTM with projection.
pub const RNN_MAX_WEIGHT_MATRICES: usize = 1 << 20;

/// Where a cuDNN weight lies among PyTorch's parameters of the same
/// `nn.RNN`/`nn.LSTM`/`nn.GRU` (`batch_first` does not matter).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct RnnPytorchWeight {
    /// The matrix's parameter (`weight_ih_l1_reverse`, `weight_hr_l0`).
    pub matrix: String,
    /// The bias's parameter (`bias_ih_l1_reverse`), when there is one
    /// (PyTorch's `bias=True` is [`RnnBiasMode::Double`]).
    pub bias: Option<String>,
    /// The rows of both that are this gate's (`g * hidden..(g + 1) * hidden`;
    /// all rows for the projection).
    pub rows: std::ops::Range<usize>,
}

impl RnnWeightShape {
    /// The PyTorch parameter and rows this matrix (and its bias) come from:
    /// PyTorch stacks the gates in cuDNN's order (`i, f, g, o`; `r, z, n`),
    /// so gate `g` is rows `g * hidden..(g + 1) * hidden` of
    /// `weight_ih_l{layer}` (input side) or `weight_hh_l{layer}` (recurrent
    /// side), `_reverse` for direction 1; LSTM's projection is
    /// `weight_hr_l{layer}`. `None` for the matrices [`RnnInputMode::Skip`]
    /// leaves out (PyTorch has no such mode).
    pub fn pytorch(&self) -> Option<RnnPytorchWeight> {
        if self.rows == 0 {
            return None;
        }
        let suffix = format!(
            "l{}{}",
            self.layer,
            if self.direction == 1 { "_reverse" } else { "" }
        );
        let side = match self.side {
            RnnWeightSide::Input => "ih",
            RnnWeightSide::Recurrent => "hh",
            RnnWeightSide::Projection => {
                return Some(RnnPytorchWeight {
                    matrix: format!("weight_hr_{suffix}"),
                    bias: None,
                    rows: 0..self.rows,
                });
            }
        };
        let start = self.gate.checked_mul(self.rows)?;
        Some(RnnPytorchWeight {
            matrix: format!("weight_{side}_{suffix}"),
            bias: (self.bias_len > 0).then(|| format!("bias_{side}_{suffix}")),
            rows: start..start.checked_add(self.rows)?,
        })
    }
}

fn int(arg: &str, v: usize) -> Result<i32> {
    if v == 0 {
        return Err(Error::invalid(arg, "must be >= 1", v));
    }
    i32::try_from(v).map_err(|_| Error::invalid(arg, "must be at most i32::MAX", v))
}

impl RnnConfig {
    /// A unidirectional, one-layer configuration with double biases, linear
    /// input, the standard algorithm, f32 precision and default math, and no
    /// projection.
    pub fn new(cell: RnnCellMode, input_size: usize, hidden_size: usize) -> Self {
        RnnConfig {
            cell,
            input_size,
            hidden_size,
            projection_size: hidden_size,
            num_layers: 1,
            direction: RnnDirection::Unidirectional,
            bias: RnnBiasMode::Double,
            input_mode: RnnInputMode::Linear,
            algo: RnnAlgo::Standard,
            precision: RnnPrecision::F32,
            math: MathType::Default,
        }
    }

    /// The size of each direction's output (`projection_size`).
    pub fn output_size(&self) -> usize {
        self.projection_size
    }

    /// Check the configuration for element type `T` against cuDNN's rules,
    /// for any library version. The rules are cuDNN's own, found by asking
    /// `cudnnSetRNNDescriptor_v8` of cuDNN 8.9.7 and 9.28 (the host tier
    /// compares them over random configurations):
    ///
    /// - `input_size`, `hidden_size`, `num_layers` in `1..=i32::MAX`;
    /// - `projection_size` only for LSTM: in `1..=hidden_size` (equal to
    ///   `hidden_size` means "no projection"); every other cell has none;
    /// - element type and precision: `f32` with `f32`, `f64` with `f64`,
    ///   `f16` with `f16` or `f32`, `bf16` with `f32` (where the library
    ///   has bf16 RNNs: 9.19 does, 8.9 and 9.10 do not; see
    ///   [`check_for`](Self::check_for));
    /// - the persistent algorithms take no projection, only `f32`
    ///   precision and only [`RnnBiasMode::Double`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the field and the value.
    pub fn check<T: DataType>(&self) -> Result<()> {
        int("input_size", self.input_size)?;
        int("hidden_size", self.hidden_size)?;
        int("num_layers", self.num_layers)?;
        if self.projection_size == 0 {
            return Err(Error::invalid("projection_size", "must be >= 1", 0));
        }
        if self.cell == RnnCellMode::Lstm {
            if self.projection_size > self.hidden_size {
                return Err(Error::invalid(
                    "projection_size",
                    format!("must be at most hidden_size ({})", self.hidden_size),
                    self.projection_size,
                ));
            }
        } else if self.projection_size != self.hidden_size {
            return Err(Error::invalid(
                "projection_size",
                format!(
                    "must equal hidden_size ({}): only LSTM has a projection",
                    self.hidden_size
                ),
                self.projection_size,
            ));
        }
        use dnn::cudnnDataType_t as D;
        let ok = match (T::CUDNN, self.precision) {
            (D::CUDNN_DATA_FLOAT, RnnPrecision::F32)
            | (D::CUDNN_DATA_DOUBLE, RnnPrecision::F64)
            | (D::CUDNN_DATA_HALF, RnnPrecision::F16 | RnnPrecision::F32)
            | (D::CUDNN_DATA_BFLOAT16, RnnPrecision::F32) => true,
            (D::CUDNN_DATA_FLOAT | D::CUDNN_DATA_DOUBLE | D::CUDNN_DATA_HALF, _)
            | (D::CUDNN_DATA_BFLOAT16, _) => false,
            _ => {
                return Err(Error::invalid(
                    "element type",
                    "RNN data must be f32, f64, f16 or bf16",
                    T::NAME,
                ));
            }
        };
        if !ok {
            return Err(Error::invalid(
                "precision",
                format!(
                    "{} data takes {}",
                    T::NAME,
                    match T::CUDNN {
                        D::CUDNN_DATA_FLOAT => "f32 precision",
                        D::CUDNN_DATA_DOUBLE => "f64 precision",
                        D::CUDNN_DATA_HALF => "f16 or f32 precision",
                        _ => "f32 precision",
                    }
                ),
                format!("{:?}", self.precision),
            ));
        }
        if self.algo != RnnAlgo::Standard {
            if self.projection_size != self.hidden_size {
                return Err(Error::invalid(
                    "algo",
                    "the persistent algorithms take no LSTM projection",
                    format!("{:?}", self.algo),
                ));
            }
            if self.precision != RnnPrecision::F32 {
                return Err(Error::invalid(
                    "algo",
                    "the persistent algorithms take only f32 precision",
                    format!("{:?} with {:?}", self.algo, self.precision),
                ));
            }
            if self.bias != RnnBiasMode::Double {
                return Err(Error::invalid(
                    "algo",
                    "the persistent algorithms take only double biases",
                    format!("{:?} with {:?}", self.algo, self.bias),
                ));
            }
        }
        Ok(())
    }

    /// [`check`](Self::check), plus what the library of `version` lacks:
    /// cuDNN 8 has no `bf16` RNNs. (Some cuDNN 9 releases lack them too:
    /// 9.10 refuses them, 9.19 takes them; [`RnnDescriptor::new`](super::RnnDescriptor::new)
    /// reports such a refusal as [`Error::Unsupported`].)
    ///
    /// # Errors
    /// As [`check`](Self::check); [`Error::Unsupported`] for bf16 on cuDNN 8.
    pub fn check_for<T: DataType>(&self, version: Version) -> Result<()> {
        self.check::<T>()?;
        if T::CUDNN == dnn::cudnnDataType_t::CUDNN_DATA_BFLOAT16 && version.major < 9 {
            return Err(bf16_unsupported("RNNs", version));
        }
        Ok(())
    }

    /// Every weight matrix with its shape, in cuDNN's order (layer, then
    /// direction, then `linLayerID`): what `cudnnGetRNNWeightParams`
    /// reports for each. Computed from the configuration alone (no library):
    /// input matrices are `hidden x input` (layer 0: `input_size`; above:
    /// `projection_size * directions`), recurrent ones `hidden x projection`,
    /// LSTM's projection `projection x hidden`.
    ///
    /// # Errors
    /// As [`check`](Self::check) (with `f32` data); more than
    /// [`RNN_MAX_WEIGHT_MATRICES`] matrices.
    pub fn weight_shapes(&self) -> Result<Vec<RnnWeightShape>> {
        self.check_shape_rules()?;
        let dirs = self.direction.count();
        let gates = self.cell.gates();
        let h = self.hidden_size;
        let p = self.projection_size;
        let upper_in = p
            .checked_mul(dirs)
            .ok_or_else(|| Error::invalid("projection_size", "times directions overflows", p))?;
        let pseudo = self.num_layers.checked_mul(dirs).ok_or_else(|| {
            Error::invalid("num_layers", "times directions overflows", self.num_layers)
        })?;
        let per = 2 * gates + usize::from(self.has_projection());
        if pseudo.saturating_mul(per) > RNN_MAX_WEIGHT_MATRICES {
            return Err(Error::invalid(
                "num_layers",
                format!(
                    "the weight matrices (layers x directions x {per}) must be at most {RNN_MAX_WEIGHT_MATRICES} to be listed"
                ),
                self.num_layers,
            ));
        }
        let mut out = Vec::with_capacity(pseudo * per);
        for layer in 0..self.num_layers {
            for d in 0..dirs {
                let in_cols = if layer == 0 {
                    self.input_size
                } else {
                    upper_in
                };
                let skip = layer == 0 && self.input_mode == RnnInputMode::Skip;
                for g in 0..gates {
                    out.push(RnnWeightShape {
                        layer,
                        direction: d,
                        lin_layer_id: g,
                        side: RnnWeightSide::Input,
                        gate: g,
                        rows: if skip { 0 } else { h },
                        cols: if skip { 0 } else { in_cols },
                        bias_len: if self.bias.input_bias() { h } else { 0 },
                    });
                }
                for g in 0..gates {
                    out.push(RnnWeightShape {
                        layer,
                        direction: d,
                        lin_layer_id: gates + g,
                        side: RnnWeightSide::Recurrent,
                        gate: g,
                        rows: h,
                        cols: p,
                        bias_len: if self.bias.recurrent_bias() { h } else { 0 },
                    });
                }
                if self.has_projection() {
                    out.push(RnnWeightShape {
                        layer,
                        direction: d,
                        lin_layer_id: 2 * gates,
                        side: RnnWeightSide::Projection,
                        gate: 0,
                        rows: p,
                        cols: h,
                        bias_len: 0,
                    });
                }
            }
        }
        Ok(out)
    }

    /// Elements of all weights and biases ([`weight_shapes`](Self::weight_shapes)
    /// summed): the least the weight space holds.
    ///
    /// # Errors
    /// As [`weight_shapes`](Self::weight_shapes); an overflow.
    pub fn weight_count(&self) -> Result<usize> {
        let mut n = 0usize;
        for s in self.weight_shapes()? {
            n = s
                .rows
                .checked_mul(s.cols)
                .and_then(|m| m.checked_add(s.bias_len))
                .and_then(|m| m.checked_add(n))
                .ok_or_else(|| {
                    Error::invalid("weights", "element count overflows usize", "sizes")
                })?;
        }
        Ok(n)
    }

    /// Whether this is an LSTM with a projection smaller than its hidden size.
    pub fn has_projection(&self) -> bool {
        self.cell == RnnCellMode::Lstm && self.projection_size < self.hidden_size
    }

    fn check_shape_rules(&self) -> Result<()> {
        let mut c = *self;
        c.precision = RnnPrecision::F32;
        c.check::<f32>()
    }

    /// Shape `[layers * directions, batch, size]` of the hidden state `h`
    /// (`size = projection_size`) or, for LSTM, the cell state `c`
    /// (`size = hidden_size`).
    ///
    /// # Errors
    /// An overflow of `layers * directions`.
    pub fn state_shape(&self, batch: usize, cell_state: bool) -> Result<[usize; 3]> {
        let ld = self
            .num_layers
            .checked_mul(self.direction.count())
            .ok_or_else(|| {
                Error::invalid("num_layers", "times directions overflows", self.num_layers)
            })?;
        Ok([
            ld,
            batch,
            if cell_state {
                self.hidden_size
            } else {
                self.projection_size
            },
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_lstm_shapes_match_pytorch_counts() {
        // PyTorch nn.LSTM(10, 20, num_layers=2, proj_size=5, bidirectional)
        // has per layer and direction: weight_ih 80 x in, weight_hh 80 x 5,
        // two biases of 80, weight_hr 5 x 20.
        let mut c = RnnConfig::new(RnnCellMode::Lstm, 10, 20);
        c.projection_size = 5;
        c.num_layers = 2;
        c.direction = RnnDirection::Bidirectional;
        let s = c.weight_shapes().unwrap();
        assert_eq!(s.len(), 2 * 2 * 9);
        let layer0 = 4 * 20 * 10 + 4 * 20 * 5 + 2 * 80 + 5 * 20;
        let layer1 = 4 * 20 * 10 + 4 * 20 * 5 + 2 * 80 + 5 * 20; // input 5 * 2 = 10
        assert_eq!(c.weight_count().unwrap(), 2 * layer0 + 2 * layer1);
        assert_eq!(s[8].side, RnnWeightSide::Projection);
        assert_eq!((s[8].rows, s[8].cols, s[8].lin_layer_id), (5, 20, 8));
    }

    #[test]
    fn unit_pytorch_names_by_hand() {
        // nn.LSTM(10, 20, num_layers=2, proj_size=5, bidirectional=True):
        // layer 1, reverse, recurrent forget gate is rows 20..40 of
        // weight_hh_l1_reverse (80 x 5), its bias rows 20..40 of
        // bias_hh_l1_reverse; the projection is weight_hr_l1_reverse.
        let mut c = RnnConfig::new(RnnCellMode::Lstm, 10, 20);
        c.projection_size = 5;
        c.num_layers = 2;
        c.direction = RnnDirection::Bidirectional;
        let s = c.weight_shapes().unwrap();
        let w = s
            .iter()
            .find(|w| w.layer == 1 && w.direction == 1 && w.lin_layer_id == 5)
            .unwrap();
        let p = w.pytorch().unwrap();
        assert_eq!(p.matrix, "weight_hh_l1_reverse");
        assert_eq!(p.bias.as_deref(), Some("bias_hh_l1_reverse"));
        assert_eq!(p.rows, 20..40);
        assert_eq!((w.rows, w.cols), (20, 5));
        let proj = s
            .iter()
            .find(|w| w.layer == 1 && w.direction == 1 && w.lin_layer_id == 8)
            .unwrap()
            .pytorch()
            .unwrap();
        assert_eq!(
            (proj.matrix.as_str(), proj.bias, proj.rows),
            ("weight_hr_l1_reverse", None, 0..5)
        );
        // nn.GRU(3, 4): the new gate's input weights are rows 8..12 of weight_ih_l0.
        let g = RnnConfig::new(RnnCellMode::Gru, 3, 4)
            .weight_shapes()
            .unwrap();
        let p = g[2].pytorch().unwrap();
        assert_eq!((p.matrix.as_str(), p.rows), ("weight_ih_l0", 8..12));
        // Skip input: no PyTorch counterpart for the missing matrices.
        let mut k = RnnConfig::new(RnnCellMode::RnnTanh, 4, 4);
        k.input_mode = RnnInputMode::Skip;
        assert_eq!(k.weight_shapes().unwrap()[0].pytorch(), None);
    }

    #[test]
    fn unit_gru_single_bias_and_skip_input() {
        let mut c = RnnConfig::new(RnnCellMode::Gru, 7, 7);
        c.bias = RnnBiasMode::SingleRecurrent;
        c.input_mode = RnnInputMode::Skip;
        let s = c.weight_shapes().unwrap();
        assert_eq!(s.len(), 6);
        assert!(s[..3].iter().all(|w| w.rows == 0 && w.bias_len == 0));
        assert!(
            s[3..]
                .iter()
                .all(|w| w.rows == 7 && w.cols == 7 && w.bias_len == 7)
        );
        assert_eq!(c.weight_count().unwrap(), 3 * (49 + 7));
    }

    #[test]
    fn unit_refusals_name_the_field() {
        let mut c = RnnConfig::new(RnnCellMode::Gru, 4, 8);
        c.projection_size = 4;
        let e = c.check::<f32>().unwrap_err();
        assert!(e.to_string().contains("projection_size"), "{e}");
        let c = RnnConfig::new(RnnCellMode::Lstm, 0, 8);
        assert!(
            c.check::<f32>()
                .unwrap_err()
                .to_string()
                .contains("input_size")
        );
        let mut c = RnnConfig::new(RnnCellMode::Lstm, 4, 8);
        c.precision = RnnPrecision::F16;
        assert!(
            c.check::<f32>()
                .unwrap_err()
                .to_string()
                .contains("precision")
        );
        assert!(c.check::<half::f16>().is_ok());
        assert!(c.check::<half::bf16>().is_err());
        let e = RnnConfig::new(RnnCellMode::Lstm, 4, 8)
            .check::<i8>()
            .unwrap_err();
        assert!(e.to_string().contains("element type"), "{e}");
    }

    fn size() -> impl proptest::strategy::Strategy<Value = usize> {
        use proptest::prelude::*;
        prop_oneof![
            6 => 0usize..20,
            1 => Just(i32::MAX as usize),
            1 => Just(i32::MAX as usize + 1),
            1 => Just(usize::MAX),
            1 => Just(1usize << 20),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(5000))]

        /// Random and adversarial configurations: `check`, `weight_shapes`,
        /// `weight_count` and `state_shape` never panic, refuse with a typed
        /// error naming a field, and a listed configuration has
        /// `layers * directions * (2 * gates + projection)` matrices.
        #[test]
        fn unit_property_config_entry_points_are_total(
            cell in 0usize..4,
            sizes in [size(), size(), size(), size()],
            bi in proptest::prelude::any::<bool>(),
            bias in 0usize..4,
            skip in proptest::prelude::any::<bool>(),
            algo in 0usize..3,
            batch in size(),
        ) {
            let c = RnnConfig {
                cell: RnnCellMode::ALL[cell],
                input_size: sizes[0],
                hidden_size: sizes[1],
                projection_size: sizes[2],
                num_layers: sizes[3],
                direction: if bi { RnnDirection::Bidirectional } else { RnnDirection::Unidirectional },
                bias: RnnBiasMode::ALL[bias],
                input_mode: if skip { RnnInputMode::Skip } else { RnnInputMode::Linear },
                algo: RnnAlgo::ALL[algo],
                precision: RnnPrecision::F32,
                math: MathType::Default,
            };
            let typed = |r: &Result<()>| match r {
                Ok(()) => true,
                Err(Error::InvalidArgument { arg, .. }) => !arg.is_empty(),
                Err(_) => false,
            };
            let checked = c.check::<f32>();
            proptest::prop_assert!(typed(&checked), "{:?}", checked);
            let shapes = c.weight_shapes();
            proptest::prop_assert!(typed(&shapes.as_ref().map(|_| ()).map_err(Clone::clone)), "{:?}", shapes.as_ref().err());
            if let Ok(s) = &shapes {
                proptest::prop_assert!(checked.is_ok());
                let per = 2 * c.cell.gates() + usize::from(c.has_projection());
                proptest::prop_assert_eq!(s.len(), c.num_layers * c.direction.count() * per);
                for w in s.iter().take(64) {
                    let p = w.pytorch();
                    proptest::prop_assert_eq!(p.is_none(), w.rows == 0);
                }
            }
            let count = c.weight_count();
            proptest::prop_assert!(typed(&count.as_ref().map(|_| ()).map_err(Clone::clone)));
            let _ = c.state_shape(batch, true);
        }
    }
}
