//! The allow-list: the operations, keys and names cuDNN writes in the plan
//! JSON of the graphs this crate builds.

use super::super::tensor::DType;

pub(super) const DATA_TYPES: &[&str] = &[
    "CUDNN_DATA_FLOAT",
    "CUDNN_DATA_DOUBLE",
    "CUDNN_DATA_HALF",
    "CUDNN_DATA_BFLOAT16",
    "CUDNN_DATA_INT8",
    "CUDNN_DATA_UINT8",
    "CUDNN_DATA_INT32",
    "CUDNN_DATA_INT64",
    "CUDNN_DATA_BOOLEAN",
    "CUDNN_DATA_FP8_E4M3",
    "CUDNN_DATA_FP8_E5M2",
];

pub(super) fn dtype_of(name: &str) -> Option<DType> {
    Some(match name {
        "CUDNN_DATA_FLOAT" => DType::F32,
        "CUDNN_DATA_DOUBLE" => DType::F64,
        "CUDNN_DATA_HALF" => DType::F16,
        "CUDNN_DATA_BFLOAT16" => DType::BF16,
        "CUDNN_DATA_INT8" => DType::I8,
        "CUDNN_DATA_UINT8" => DType::U8,
        "CUDNN_DATA_INT32" => DType::I32,
        "CUDNN_DATA_INT64" => DType::I64,
        "CUDNN_DATA_BOOLEAN" => DType::Bool,
        "CUDNN_DATA_FP8_E4M3" => DType::Fp8E4M3,
        "CUDNN_DATA_FP8_E5M2" => DType::Fp8E5M2,
        "CUDNN_DATA_FP8_E8M0" => DType::Fp8E8M0,
        _ => return None,
    })
}

const POINTWISE_MODES: &[&str] = &[
    "CUDNN_POINTWISE_ABS",
    "CUDNN_POINTWISE_ADD",
    "CUDNN_POINTWISE_ADD_SQUARE",
    "CUDNN_POINTWISE_ATAN2",
    "CUDNN_POINTWISE_BINARY_SELECT",
    "CUDNN_POINTWISE_CEIL",
    "CUDNN_POINTWISE_CMP_EQ",
    "CUDNN_POINTWISE_CMP_GE",
    "CUDNN_POINTWISE_CMP_GT",
    "CUDNN_POINTWISE_CMP_LE",
    "CUDNN_POINTWISE_CMP_LT",
    "CUDNN_POINTWISE_CMP_NEQ",
    "CUDNN_POINTWISE_COS",
    "CUDNN_POINTWISE_DIV",
    "CUDNN_POINTWISE_ELU_BWD",
    "CUDNN_POINTWISE_ELU_FWD",
    "CUDNN_POINTWISE_ERF",
    "CUDNN_POINTWISE_EXP",
    "CUDNN_POINTWISE_FLOOR",
    "CUDNN_POINTWISE_FLOOR_MOD",
    "CUDNN_POINTWISE_GELU_APPROX_TANH_BWD",
    "CUDNN_POINTWISE_GELU_APPROX_TANH_FWD",
    "CUDNN_POINTWISE_GELU_BWD",
    "CUDNN_POINTWISE_GELU_FWD",
    "CUDNN_POINTWISE_GEN_INDEX",
    "CUDNN_POINTWISE_IDENTITY",
    "CUDNN_POINTWISE_LOG",
    "CUDNN_POINTWISE_LOGICAL_AND",
    "CUDNN_POINTWISE_LOGICAL_NOT",
    "CUDNN_POINTWISE_LOGICAL_OR",
    "CUDNN_POINTWISE_MAX",
    "CUDNN_POINTWISE_MIN",
    "CUDNN_POINTWISE_MOD",
    "CUDNN_POINTWISE_MUL",
    "CUDNN_POINTWISE_NEG",
    "CUDNN_POINTWISE_POW",
    "CUDNN_POINTWISE_RECIPROCAL",
    "CUDNN_POINTWISE_RELU_BWD",
    "CUDNN_POINTWISE_RELU_FWD",
    "CUDNN_POINTWISE_RSQRT",
    "CUDNN_POINTWISE_SIGMOID_BWD",
    "CUDNN_POINTWISE_SIGMOID_FWD",
    "CUDNN_POINTWISE_SIN",
    "CUDNN_POINTWISE_SOFTPLUS_BWD",
    "CUDNN_POINTWISE_SOFTPLUS_FWD",
    "CUDNN_POINTWISE_SQRT",
    "CUDNN_POINTWISE_SUB",
    "CUDNN_POINTWISE_SWISH_BWD",
    "CUDNN_POINTWISE_SWISH_FWD",
    "CUDNN_POINTWISE_TAN",
    "CUDNN_POINTWISE_TANH_BWD",
    "CUDNN_POINTWISE_TANH_FWD",
];

const CMP_MODES: &[&str] = &[
    "CUDNN_POINTWISE_CMP_EQ",
    "CUDNN_POINTWISE_CMP_GE",
    "CUDNN_POINTWISE_CMP_GT",
    "CUDNN_POINTWISE_CMP_LE",
    "CUDNN_POINTWISE_CMP_LT",
    "CUDNN_POINTWISE_CMP_NEQ",
];

/// How a node's value is read.
#[derive(Clone, Copy)]
pub(super) enum Field {
    /// A tensor of the graph (or an enclosing one), by name, that the
    /// node reads.
    In,
    /// A tensor of the graph (or an enclosing one), by name, that the
    /// node writes.
    Out,
    /// A norm forward's mean or inverse variance: written in training
    /// (`fmode` `CUDNN_NORM_FWD_TRAINING`), read in inference.
    Stat,
    /// One of these names.
    Enum(&'static [&'static str]),
    /// A finite number.
    Float,
    /// A probability in 0..=1.
    Prob,
    /// A boolean.
    Bool,
    /// A list of 1..=MAX_DIMS integers >= the bound.
    Ints(i64),
    /// A small integer (an axis).
    Axis,
    /// An integer in `lo..=hi`.
    Int(i64, i64),
    /// A subgraph, with the uids of its input and output.
    Subgraph,
    /// A tensor uid of the node's subgraph.
    SubgraphUid,
    /// An operation nested in the node (a sub-descriptor): an object
    /// holding exactly this operation, checked as a node of the same graph
    /// (its keys from this allow-list, its tensors of the graph, their
    /// read/written roles), which must not nest another.
    SubOp(&'static str),
}

use Field::*;

/// The softmax operation (a node, or the SDPA forward's sub-descriptor).
pub(super) const SOFTMAX: &str = "CUDNN_BACKEND_OPERATION_SOFTMAX_DESCRIPTOR";

const CONV_MODES: &[&str] = &["CUDNN_CROSS_CORRELATION", "CUDNN_CONVOLUTION"];
const NORM_MODES: &[&str] = &["CUDNN_LAYER_NORM", "CUDNN_BATCH_NORM", "CUDNN_RMS_NORM"];

/// `(operation, its keys)`: the allow-list of operation nodes.
pub(super) fn node_fields(op: &str) -> Option<&'static [(&'static str, Field)]> {
    // cuDNN 9.28 also writes `groupCount` (a grouped convolution) and
    // `pad_lower` / `pad_upper` (an asymmetric padding) for graphs the
    // crate builds (issue 31).
    const CONV_COMMON: [(&str, Field); 10] = [
        ("mode", Enum(CONV_MODES)),
        ("mathPrec", Enum(DATA_TYPES)),
        ("alpha", Float),
        ("beta", Float),
        ("pad", Ints(0)),
        ("pad_lower", Ints(0)),
        ("pad_upper", Ints(0)),
        ("stride", Ints(1)),
        ("dilation", Ints(1)),
        ("groupCount", Int(1, 1 << 20)),
    ];
    const FPROP: [(&str, Field); 13] = concat(CONV_COMMON, [("X", In), ("W", In), ("Y", Out)]);
    const DGRAD: [(&str, Field); 13] = concat(CONV_COMMON, [("W", In), ("dX", Out), ("dY", In)]);
    const WGRAD: [(&str, Field); 13] = concat(CONV_COMMON, [("X", In), ("dW", Out), ("dY", In)]);
    const fn concat(
        a: [(&'static str, Field); 10],
        b: [(&'static str, Field); 3],
    ) -> [(&'static str, Field); 13] {
        [
            a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], b[0], b[1], b[2],
        ]
    }
    Some(match op {
        "CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR" => &FPROP,
        "CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR" => &DGRAD,
        "CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR" => &WGRAD,
        "CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR" => &[
            ("pointwiseMode", Enum(POINTWISE_MODES)),
            ("mathPrec", Enum(DATA_TYPES)),
            ("alpha1", Float),
            ("alpha2", Float),
            ("upperClip", Float),
            ("lowerClip", Float),
            ("lowerClipSlope", Float),
            ("eluAlpha", Float),
            ("softplusBeta", Float),
            ("swishBeta", Float),
            // cuDNN 9.28 writes ELU's parameter as `alpha` and softplus's
            // as `beta` (issue 31).
            ("alpha", Float),
            ("beta", Float),
            ("axis", Axis),
            ("X", In),
            ("Y", Out),
            ("B", In),
            ("T", In),
            ("dX", Out),
            ("dY", In),
        ],
        "CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR" => &[
            ("mathPrec", Enum(DATA_TYPES)),
            ("matA", In),
            ("matB", In),
            ("matC", Out),
            ("mOverride", In),
            ("nOverride", In),
            ("kOverride", In),
            ("paddingDataType", Enum(&["CUDNN_TYPE_DOUBLE"])),
            ("paddingValue", Float),
        ],
        "CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR" => &[
            ("mathPrec", Enum(DATA_TYPES)),
            (
                "reductionOp",
                Enum(&[
                    "CUDNN_REDUCE_TENSOR_ADD",
                    "CUDNN_REDUCE_TENSOR_MUL",
                    "CUDNN_REDUCE_TENSOR_MIN",
                    "CUDNN_REDUCE_TENSOR_MAX",
                    "CUDNN_REDUCE_TENSOR_AMAX",
                    "CUDNN_REDUCE_TENSOR_AVG",
                    "CUDNN_REDUCE_TENSOR_NORM1",
                    "CUDNN_REDUCE_TENSOR_NORM2",
                    "CUDNN_REDUCE_TENSOR_MUL_NO_ZEROS",
                ]),
            ),
            ("isDeterministic", Bool),
            ("X", In),
            ("Y", Out),
        ],
        "CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR" => &[
            ("mode", Enum(NORM_MODES)),
            (
                "fmode",
                Enum(&["CUDNN_NORM_FWD_TRAINING", "CUDNN_NORM_FWD_INFERENCE"]),
            ),
            ("X", In),
            ("Y", Out),
            ("Mean", Stat),
            ("InvVariance", Stat),
            ("Scale", In),
            ("Bias", In),
            ("epsilonDesc", In),
            ("expavgfactorDesc", In),
            ("InRunningMean", In),
            ("InRunningVar", In),
            ("OutRunningMean", Out),
            ("OutRunningVar", Out),
        ],
        "CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR" => &[
            ("mode", Enum(NORM_MODES)),
            ("X", In),
            ("DY", In),
            ("Scale", In),
            ("Mean", In),
            ("InvVariance", In),
            ("epsilonDesc", In),
            ("DX", Out),
            ("DScale", Out),
            ("DBias", Out),
        ],
        "CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR" => &[
            ("Q", In),
            ("K", In),
            ("V", In),
            ("O", Out),
            ("stats", Out),
            ("scale", In),
            ("seqLenQ", In),
            ("seqLenKV", In),
            // A paged KV cache's page tables (issue 24).
            ("pageTableK", In),
            ("pageTableV", In),
            ("dropoutSeed", In),
            ("dropoutOffset", In),
            ("dropoutProbability", Prob),
            ("subgraph", Subgraph),
            ("subgraphInputUid", SubgraphUid),
            ("subgraphOutputUid", SubgraphUid),
            // The statistics routed through a SOFTMAX sub-descriptor (the
            // frontend's form on cuDNN >= 9.21), instead of `stats`.
            ("softmax", SubOp(SOFTMAX)),
        ],
        "CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR" => &[
            ("qDesc", In),
            ("kDesc", In),
            ("vDesc", In),
            ("oDesc", In),
            ("dODesc", In),
            ("statsDesc", In),
            ("scaleDesc", In),
            ("dQDesc", Out),
            ("dKDesc", Out),
            ("dVDesc", Out),
            ("seqLenQDesc", In),
            ("seqLenKVDesc", In),
            ("dropoutSeed", In),
            ("dropoutOffset", In),
            ("dropoutProbability", Prob),
            ("subgraph", Subgraph),
            ("subgraphInputUid", SubgraphUid),
            ("subgraphOutputUid", SubgraphUid),
            // Attention sinks and dSink (issue 24).
            ("sinkDesc", In),
            ("dSinkDesc", Out),
            // The bias gradient (the bias itself is in the score subgraph,
            // which cuDNN 9.28 leaves out of the JSON).
            ("dBiasDesc", Out),
        ],
        // The paged KV cache (issue 24): K or V gathered through a page table.
        "CUDNN_BACKEND_OPERATION_PAGED_CACHE_LOAD_DESCRIPTOR" => &[
            ("container", In),
            ("pageTable", In),
            ("sequence", In),
            ("Y", Out),
        ],
        "CUDNN_BACKEND_OPERATION_DIAGONAL_BAND_MASK_DESCRIPTOR" => &[
            ("X", In),
            ("Y", Out),
            ("B", In),
            ("comparisonMode", Enum(CMP_MODES)),
            // The bottom-right alignment and the sliding window (issue 24).
            ("seqLenQDesc", In),
            ("seqLenKVDesc", In),
            ("leftBoundDesc", In),
        ],
        "CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR" => &[
            ("Y", Out),
            // cuDNN 9.10's name for Y (measured: its JSON of every plan with
            // dropout; 9.28 writes `Y`).
            ("yDesc", Out),
            ("seedTensor", In),
            ("offset", In),
            ("distribution", Enum(&["CUDNN_RNG_DISTRIBUTION_BERNOULLI"])),
            ("bernoulli_dist_probability", Prob),
        ],
        // A node of the frontend's SDPA forward composite, or the SDPA
        // forward operation's sub-descriptor: the scores in, the
        // probabilities out, and (training) the statistics written.
        // The row max / sum_exp outputs and the sink input (issue 24).
        SOFTMAX => &[
            ("X", In),
            ("Y", Out),
            ("statsDesc", Out),
            ("maxDesc", Out),
            ("sumExpDesc", Out),
            ("sinkDesc", In),
        ],
        "CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR" => &[
            ("X", In),
            ("Y", Out),
            ("mode", Enum(&["CUDNN_RESHAPE_VIEW_ONLY"])),
        ],
        _ => return None,
    })
}

pub(super) const FINALIZE_MODES: &[&str] = &[
    "GENERIC_CONV_FUSION",
    "GENERIC_POINTWISE_FUSION",
    "BLAS_MATMUL",
    // A matmul with a reduction fused (the FP8 matmul's amax).
    "GENERIC_MATMUL_FUSION",
    "CONV_FORWARD",
    "CONV_BWD_DATA",
    "CONV_BWD_FILTER",
    "CONV_ADD_BIAS_ACT",
    "NORM_FWD_TRAIN",
    "NORM_FWD_INFER",
    "NORM_BWD",
    "SDPA_FWD",
    "SDPA_BWD",
    "UNIFIED_SDPA_FWD",
    "UNIFIED_SDPA_BWD",
];
