//! A cuDNN plan JSON checked before cuDNN sees it.
//!
//! cuDNN's own parser is not a validator: one edit to a valid plan's JSON
//! (`/operationGraph/nodes` = 2147483648, a node's `"W"` = `""`, a tensor dim
//! of 0) crashes the process (SIGSEGV, SIGABRT, SIGFPE). And a plan JSON
//! paired with another graph's tensor list would let `execute` check buffers
//! against the wrong sizes. So a plan JSON is held to a strict allow-list of
//! the shape cuDNN writes for the graphs this crate builds (every key known,
//! of the type and within the range cuDNN writes it, counts within limits,
//! every tensor reference naming a tensor of the graph), and its non-virtual
//! tensors, by-value scalars and scratch tensors must agree with the
//! [`IoSignature`] it comes with (uid, dims, strides, data type, by-value).
//!
//! The allow-list was learned from the JSON cuDNN 9.10 to 9.28 writes for
//! every graph kind the crate builds (convolutions and their fusions,
//! matmuls, pointwise and reduction graphs, normalizations, SDPA native and
//! composite, forward and backward), for H200, A100 and B200 targets.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::graph::IoSignature;
use super::target::Target;
use super::tensor::{DType, MAX_DIMS};
use crate::error::{Error, Result};

/// The largest plan JSON accepted (cuDNN's own reader caps at 64 MiB too).
pub const MAX_JSON_BYTES: usize = 64 << 20;
/// Tensors in one operation graph (or subgraph).
const MAX_TENSORS: usize = 4096;
/// Nodes in one operation graph (or subgraph).
const MAX_NODES: usize = 512;
/// Subgraphs nest at most this deep (SDPA's score subgraph: 1).
const MAX_DEPTH: usize = 2;
/// Kernels in an engine payload, and parameters of one kernel.
const MAX_KERNELS: usize = 256;
const MAX_PARAMS: usize = 4096;
/// The largest tensor dim, stride or element count cuDNN indexes with `int64`.
const MAX_EXTENT: i64 = 1 << 48;

/// What the check learned about a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Summary {
    /// The cuDNN that wrote it (`cudnnVersion`, 92801 for 9.28.1).
    pub(crate) cudnn_version: u64,
    /// Its engine carries compiled code (the plan was compiled at run time).
    pub(crate) runtime_compiled: bool,
}

fn bad(path: &str, rule: impl Into<String>, value: impl std::fmt::Display) -> Error {
    Error::invalid(format!("plan JSON {path}"), rule, short(&value.to_string()))
}

fn short(s: &str) -> String {
    if s.len() <= 80 {
        s.to_string()
    } else {
        let mut end = 80;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}... ({} bytes)", &s[..end], s.len())
    }
}

fn obj<'v>(v: &'v Value, path: &str) -> Result<&'v Map<String, Value>> {
    v.as_object()
        .ok_or_else(|| bad(path, "must be an object", kind(v)))
}

fn arr<'v>(v: &'v Value, path: &str, max: usize) -> Result<&'v Vec<Value>> {
    let a = v
        .as_array()
        .ok_or_else(|| bad(path, "must be an array", kind(v)))?;
    if a.len() > max {
        return Err(bad(
            path,
            format!("must have at most {max} entries"),
            a.len(),
        ));
    }
    Ok(a)
}

fn int(v: &Value, path: &str, lo: i64, hi: i64) -> Result<i64> {
    match v.as_i64() {
        Some(x) if (lo..=hi).contains(&x) => Ok(x),
        _ => Err(bad(path, format!("must be an integer in {lo}..={hi}"), v)),
    }
}

fn float(v: &Value, path: &str) -> Result<f64> {
    match v.as_f64() {
        Some(x) if x.is_finite() && (v.is_f64() || v.is_i64()) => Ok(x),
        _ => Err(bad(path, "must be a finite number", v)),
    }
}

fn boolean(v: &Value, path: &str) -> Result<bool> {
    v.as_bool()
        .ok_or_else(|| bad(path, "must be true or false", v))
}

fn string<'v>(v: &'v Value, path: &str, max: usize) -> Result<&'v str> {
    match v.as_str() {
        Some(s) if !s.is_empty() && s.len() <= max => Ok(s),
        _ => Err(bad(
            path,
            format!("must be a non-empty string of at most {max} bytes"),
            v,
        )),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Every key of `m` must be in `allowed`; every key of `required` present.
fn keys(m: &Map<String, Value>, path: &str, allowed: &[&str], required: &[&str]) -> Result<()> {
    for k in m.keys() {
        if !allowed.contains(&k.as_str()) {
            return Err(bad(
                path,
                format!("has no key of that name (known: {})", allowed.join(", ")),
                k,
            ));
        }
    }
    for k in required {
        if !m.contains_key(*k) {
            return Err(bad(&format!("{path}/{k}"), "is required", "missing"));
        }
    }
    Ok(())
}

fn one_of<'v>(v: &'v Value, path: &str, allowed: &[&str]) -> Result<&'v str> {
    match v.as_str() {
        Some(s) if allowed.contains(&s) => Ok(s),
        _ => Err(bad(
            path,
            format!("must be one of {}", allowed.join(", ")),
            v,
        )),
    }
}

const DATA_TYPES: &[&str] = &[
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

fn dtype_of(name: &str) -> Option<DType> {
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
enum Field {
    /// A tensor of the graph (or an enclosing one), by name.
    Ref,
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
    /// A subgraph, with the uids of its input and output.
    Subgraph,
    /// A tensor uid of the node's subgraph.
    SubgraphUid,
}

use Field::*;

const CONV_MODES: &[&str] = &["CUDNN_CROSS_CORRELATION", "CUDNN_CONVOLUTION"];
const NORM_MODES: &[&str] = &["CUDNN_LAYER_NORM", "CUDNN_BATCH_NORM", "CUDNN_RMS_NORM"];

/// `(operation, its keys)`: the allow-list of operation nodes.
fn node_fields(op: &str) -> Option<&'static [(&'static str, Field)]> {
    const CONV_COMMON: [(&str, Field); 7] = [
        ("mode", Enum(CONV_MODES)),
        ("mathPrec", Enum(DATA_TYPES)),
        ("alpha", Float),
        ("beta", Float),
        ("pad", Ints(0)),
        ("stride", Ints(1)),
        ("dilation", Ints(1)),
    ];
    const FPROP: [(&str, Field); 10] = concat(CONV_COMMON, [("X", Ref), ("W", Ref), ("Y", Ref)]);
    const DGRAD: [(&str, Field); 10] = concat(CONV_COMMON, [("W", Ref), ("dX", Ref), ("dY", Ref)]);
    const WGRAD: [(&str, Field); 10] = concat(CONV_COMMON, [("X", Ref), ("dW", Ref), ("dY", Ref)]);
    const fn concat(
        a: [(&'static str, Field); 7],
        b: [(&'static str, Field); 3],
    ) -> [(&'static str, Field); 10] {
        [a[0], a[1], a[2], a[3], a[4], a[5], a[6], b[0], b[1], b[2]]
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
            ("axis", Axis),
            ("X", Ref),
            ("Y", Ref),
            ("B", Ref),
            ("T", Ref),
            ("dX", Ref),
            ("dY", Ref),
        ],
        "CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR" => &[
            ("mathPrec", Enum(DATA_TYPES)),
            ("matA", Ref),
            ("matB", Ref),
            ("matC", Ref),
            ("mOverride", Ref),
            ("nOverride", Ref),
            ("kOverride", Ref),
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
            ("X", Ref),
            ("Y", Ref),
        ],
        "CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR" => &[
            ("mode", Enum(NORM_MODES)),
            (
                "fmode",
                Enum(&["CUDNN_NORM_FWD_TRAINING", "CUDNN_NORM_FWD_INFERENCE"]),
            ),
            ("X", Ref),
            ("Y", Ref),
            ("Mean", Ref),
            ("InvVariance", Ref),
            ("Scale", Ref),
            ("Bias", Ref),
            ("epsilonDesc", Ref),
            ("expavgfactorDesc", Ref),
            ("InRunningMean", Ref),
            ("InRunningVar", Ref),
            ("OutRunningMean", Ref),
            ("OutRunningVar", Ref),
        ],
        "CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR" => &[
            ("mode", Enum(NORM_MODES)),
            ("X", Ref),
            ("DY", Ref),
            ("Scale", Ref),
            ("Mean", Ref),
            ("InvVariance", Ref),
            ("epsilonDesc", Ref),
            ("DX", Ref),
            ("DScale", Ref),
            ("DBias", Ref),
        ],
        "CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR" => &[
            ("Q", Ref),
            ("K", Ref),
            ("V", Ref),
            ("O", Ref),
            ("stats", Ref),
            ("scale", Ref),
            ("seqLenQ", Ref),
            ("seqLenKV", Ref),
            ("dropoutSeed", Ref),
            ("dropoutOffset", Ref),
            ("dropoutProbability", Prob),
            ("subgraph", Subgraph),
            ("subgraphInputUid", SubgraphUid),
            ("subgraphOutputUid", SubgraphUid),
        ],
        "CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR" => &[
            ("qDesc", Ref),
            ("kDesc", Ref),
            ("vDesc", Ref),
            ("oDesc", Ref),
            ("dODesc", Ref),
            ("statsDesc", Ref),
            ("scaleDesc", Ref),
            ("dQDesc", Ref),
            ("dKDesc", Ref),
            ("dVDesc", Ref),
            ("seqLenQDesc", Ref),
            ("seqLenKVDesc", Ref),
            ("dropoutSeed", Ref),
            ("dropoutOffset", Ref),
            ("dropoutProbability", Prob),
            ("subgraph", Subgraph),
            ("subgraphInputUid", SubgraphUid),
            ("subgraphOutputUid", SubgraphUid),
        ],
        "CUDNN_BACKEND_OPERATION_DIAGONAL_BAND_MASK_DESCRIPTOR" => &[
            ("X", Ref),
            ("Y", Ref),
            ("B", Ref),
            ("comparisonMode", Enum(CMP_MODES)),
        ],
        "CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR" => &[
            ("Y", Ref),
            ("seedTensor", Ref),
            ("offset", Ref),
            ("distribution", Enum(&["CUDNN_RNG_DISTRIBUTION_BERNOULLI"])),
            ("bernoulli_dist_probability", Prob),
        ],
        "CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR" => &[
            ("X", Ref),
            ("Y", Ref),
            ("mode", Enum(&["CUDNN_RESHAPE_VIEW_ONLY"])),
        ],
        _ => return None,
    })
}

const FINALIZE_MODES: &[&str] = &[
    "GENERIC_CONV_FUSION",
    "GENERIC_POINTWISE_FUSION",
    "BLAS_MATMUL",
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

/// One tensor of the plan, as the JSON declares it.
#[derive(Debug)]
struct JsonTensor {
    dtype: &'static str,
    dims: Vec<i64>,
    strides: Vec<i64>,
    is_virtual: bool,
    by_value: bool,
}

struct Walk {
    tensors: HashMap<i64, JsonTensor>,
}

impl Walk {
    fn tensor(&mut self, v: &Value, path: &str) -> Result<String> {
        let m = obj(v, path)?;
        const K: &[&str] = &[
            "name",
            "dataType",
            "dim",
            "stride",
            "isVirtual",
            "isByValue",
            "vectCount",
            "vectDim",
            "ptrAlignment",
            "reordering",
        ];
        keys(m, path, K, K)?;
        let name = string(&m["name"], &format!("{path}/name"), 20)?;
        let uid: i64 = name.parse().map_err(|_| {
            bad(
                &format!("{path}/name"),
                "must be a tensor uid (an integer)",
                name,
            )
        })?;
        let dtype_name = one_of(&m["dataType"], &format!("{path}/dataType"), DATA_TYPES)?;
        let dtype = DATA_TYPES
            .iter()
            .copied()
            .find(|d| *d == dtype_name)
            .unwrap_or("CUDNN_DATA_FLOAT");
        let dims = arr(&m["dim"], &format!("{path}/dim"), MAX_DIMS)?;
        let strides = arr(&m["stride"], &format!("{path}/stride"), MAX_DIMS)?;
        if dims.is_empty() || dims.len() != strides.len() {
            return Err(bad(
                &format!("{path}/stride"),
                format!("must have as many entries as dim (1..={MAX_DIMS})"),
                format!("{} dims, {} strides", dims.len(), strides.len()),
            ));
        }
        let dims = dims
            .iter()
            .enumerate()
            .map(|(i, d)| int(d, &format!("{path}/dim/{i}"), 1, MAX_EXTENT))
            .collect::<Result<Vec<_>>>()?;
        let strides = strides
            .iter()
            .enumerate()
            .map(|(i, d)| int(d, &format!("{path}/stride/{i}"), 1, MAX_EXTENT))
            .collect::<Result<Vec<_>>>()?;
        // The span must be addressable: sum of (dim - 1) * stride, checked.
        let mut span: i64 = 1;
        for (d, s) in dims.iter().zip(&strides) {
            span = (d - 1)
                .checked_mul(*s)
                .and_then(|x| x.checked_add(span))
                .filter(|x| *x <= MAX_EXTENT)
                .ok_or_else(|| {
                    bad(
                        &format!("{path}/dim"),
                        format!("spans more than {MAX_EXTENT} elements"),
                        format!("{dims:?} strides {strides:?}"),
                    )
                })?;
        }
        let is_virtual = boolean(&m["isVirtual"], &format!("{path}/isVirtual"))?;
        let by_value = boolean(&m["isByValue"], &format!("{path}/isByValue"))?;
        int(&m["vectCount"], &format!("{path}/vectCount"), 1, 1)?;
        int(&m["vectDim"], &format!("{path}/vectDim"), -1, -1)?;
        int(&m["ptrAlignment"], &format!("{path}/ptrAlignment"), 16, 16)?;
        one_of(
            &m["reordering"],
            &format!("{path}/reordering"),
            &["CUDNN_TENSOR_REORDERING_NONE"],
        )?;
        if is_virtual && by_value {
            return Err(bad(path, "cannot be both virtual and by value", name));
        }
        if self.tensors.contains_key(&uid) {
            return Err(bad(
                &format!("{path}/name"),
                "must be unique in the plan",
                uid,
            ));
        }
        self.tensors.insert(
            uid,
            JsonTensor {
                dtype,
                dims,
                strides,
                is_virtual,
                by_value,
            },
        );
        Ok(name.to_string())
    }

    /// An operation graph (or a subgraph, `depth` > 0); `outer` are the
    /// tensor names of the enclosing graphs.
    fn graph(
        &mut self,
        v: &Value,
        path: &str,
        depth: usize,
        outer: &HashSet<String>,
    ) -> Result<()> {
        if depth > MAX_DEPTH {
            return Err(bad(
                path,
                format!("nests more than {MAX_DEPTH} subgraphs"),
                depth,
            ));
        }
        let m = obj(v, path)?;
        keys(
            m,
            path,
            &["finalizeMode", "tensors", "nodes"],
            &["finalizeMode", "tensors", "nodes"],
        )?;
        one_of(
            &m["finalizeMode"],
            &format!("{path}/finalizeMode"),
            FINALIZE_MODES,
        )?;
        let tensors = arr(&m["tensors"], &format!("{path}/tensors"), MAX_TENSORS)?;
        let nodes = arr(&m["nodes"], &format!("{path}/nodes"), MAX_NODES)?;
        if tensors.is_empty() || nodes.is_empty() {
            return Err(bad(
                path,
                "must have at least one tensor and one node",
                "none",
            ));
        }
        let mut names = outer.clone();
        for (i, t) in tensors.iter().enumerate() {
            names.insert(self.tensor(t, &format!("{path}/tensors/{i}"))?);
        }
        for (i, n) in nodes.iter().enumerate() {
            self.node(n, &format!("{path}/nodes/{i}"), depth, &names)?;
        }
        Ok(())
    }

    fn node(&mut self, v: &Value, path: &str, depth: usize, names: &HashSet<String>) -> Result<()> {
        let m = obj(v, path)?;
        let op_path = format!("{path}/operation");
        let op = string(
            m.get("operation")
                .ok_or_else(|| bad(&op_path, "is required", "missing"))?,
            &op_path,
            80,
        )?;
        let fields = node_fields(op).ok_or_else(|| {
            bad(
                &op_path,
                "must be an operation of the graphs this crate builds",
                op,
            )
        })?;
        let mut sub_names: Option<HashSet<String>> = None;
        // The subgraph first, so its uids are known to `SubgraphUid`.
        if let Some(sg) = m.get("subgraph") {
            if !fields.iter().any(|(k, _)| *k == "subgraph") {
                return Err(bad(
                    &format!("{path}/subgraph"),
                    "is not allowed here",
                    "a subgraph",
                ));
            }
            let before: HashSet<i64> = self.tensors.keys().copied().collect();
            self.graph(sg, &format!("{path}/subgraph"), depth + 1, names)?;
            sub_names = Some(
                self.tensors
                    .keys()
                    .filter(|k| !before.contains(k))
                    .map(|k| k.to_string())
                    .collect(),
            );
        }
        for (k, val) in m {
            if k == "operation" || k == "subgraph" {
                continue;
            }
            let p = format!("{path}/{k}");
            let Some((_, f)) = fields.iter().find(|(name, _)| name == k) else {
                let known: Vec<&str> = fields.iter().map(|(n, _)| *n).collect();
                return Err(bad(
                    &p,
                    format!(
                        "is not a key of {op} (known: operation, {})",
                        known.join(", ")
                    ),
                    k,
                ));
            };
            match *f {
                Ref => {
                    let s = string(val, &p, 20)?;
                    if !names.contains(s) {
                        return Err(bad(&p, "must name a tensor of the graph", s));
                    }
                }
                Enum(allowed) => {
                    one_of(val, &p, allowed)?;
                }
                Float => {
                    float(val, &p)?;
                }
                Prob => {
                    let x = float(val, &p)?;
                    if !(0.0..=1.0).contains(&x) {
                        return Err(bad(&p, "must be in 0..=1", x));
                    }
                }
                Bool => {
                    boolean(val, &p)?;
                }
                Ints(lo) => {
                    let a = arr(val, &p, MAX_DIMS)?;
                    if a.is_empty() {
                        return Err(bad(&p, format!("must have 1..={MAX_DIMS} entries"), 0));
                    }
                    for (i, x) in a.iter().enumerate() {
                        int(x, &format!("{p}/{i}"), lo, 1 << 20)?;
                    }
                }
                Axis => {
                    int(val, &p, 0, MAX_DIMS as i64 - 1)?;
                }
                Subgraph => {}
                SubgraphUid => {
                    let uid = int(val, &p, i64::MIN, i64::MAX)?;
                    if !sub_names
                        .as_ref()
                        .is_some_and(|s| s.contains(&uid.to_string()))
                    {
                        return Err(bad(&p, "must name a tensor of the node's subgraph", uid));
                    }
                }
            }
        }
        if sub_names.is_none()
            && (m.contains_key("subgraphInputUid") || m.contains_key("subgraphOutputUid"))
        {
            return Err(bad(path, "names subgraph tensors but has no subgraph", op));
        }
        Ok(())
    }
}

/// The device profile: every field of cuDNN's device properties, in range,
/// and the same architecture and SM count as `target`.
fn profile(v: &Value, target: &Target) -> Result<()> {
    let path = "/GPUProfile";
    let m = obj(v, path)?;
    const EXTRA: [&str; 2] = ["smCountOrigin", "oversizedSharedMemoryPerBlock"];
    let mut allowed: Vec<&str> = super::REQUIRED_FIELDS.to_vec();
    allowed.extend(EXTRA);
    keys(m, path, &allowed, &super::REQUIRED_FIELDS)?;
    for (k, val) in m {
        let p = format!("{path}/{k}");
        match k.as_str() {
            "deviceName" => {
                string(val, &p, 256)?;
            }
            "maxGridSize" | "maxBlockSize" => {
                let a = arr(val, &p, 3)?;
                if a.len() != 3 {
                    return Err(bad(&p, "must have 3 entries", a.len()));
                }
                for (i, x) in a.iter().enumerate() {
                    int(x, &format!("{p}/{i}"), 1, i64::from(i32::MAX))?;
                }
            }
            "totalGlobalMem" => {
                int(val, &p, 1, i64::MAX)?;
            }
            "pciDeviceId"
            | "isTccDriver"
            | "cudaDeviceId"
            | "smCountOrigin"
            | "oversizedSharedMemoryPerBlock"
            | "reservedSharedMemoryPerBlock"
            | "supportCoopLaunch" => {
                int(val, &p, 0, i64::from(i32::MAX))?;
            }
            _ => {
                int(val, &p, 1, i64::from(i32::MAX))?;
            }
        }
    }
    let props = target.properties();
    let ver = m["deviceVer"].as_i64().unwrap_or(0);
    let sms = m["multiProcessorCount"].as_i64().unwrap_or(0);
    if ver != props.device_ver() || sms != props.sm_count() {
        return Err(Error::Unsupported {
            what: format!(
                "this plan was compiled for another GPU architecture (plan JSON /GPUProfile: \
                 deviceVer {ver}, {sms} SMs), not {} (deviceVer {}, {} SMs)",
                target.fingerprint(),
                props.device_ver(),
                props.sm_count()
            ),
            needs: Some("a plan built for this target".to_string()),
        });
    }
    Ok(())
}

fn is_base64(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || b == b'=')
}

/// Decoded length of standard base64 text (checked to be base64 before).
fn base64_len(s: &str) -> usize {
    let pad = s.bytes().rev().take_while(|&b| b == b'=').count();
    (s.len() / 4 * 3).saturating_sub(pad)
}

/// The engine: its id, knobs and compiled payload. Returns whether it
/// carries compiled code.
fn engine(v: &Value, device_ver: i64) -> Result<bool> {
    let path = "/engine";
    let m = obj(v, path)?;
    keys(
        m,
        path,
        &["engineId", "smVersion", "knobChoices", "payload"],
        &["engineId", "smVersion", "knobChoices"],
    )?;
    int(&m["engineId"], "/engine/engineId", 0, 1 << 20)?;
    int(&m["smVersion"], "/engine/smVersion", device_ver, device_ver)?;
    let knobs = obj(&m["knobChoices"], "/engine/knobChoices")?;
    if knobs.len() > 64 {
        return Err(bad(
            "/engine/knobChoices",
            "must have at most 64 knobs",
            knobs.len(),
        ));
    }
    for (k, val) in knobs {
        let p = format!("/engine/knobChoices/{k}");
        let known = k.strip_prefix("CUDNN_KNOB_TYPE_").is_some_and(|r| {
            !r.is_empty()
                && r.bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        });
        if !known {
            return Err(bad(&p, "must be a knob type (CUDNN_KNOB_TYPE_...)", k));
        }
        int(val, &p, -1, i64::from(i32::MAX))?;
    }
    let Some(payload) = m.get("payload") else {
        return Ok(false);
    };
    let path = "/engine/payload";
    let p = obj(payload, path)?;
    if p.contains_key("kernels") {
        keys(p, path, &["kernels"], &["kernels"])?;
        let kernels = arr(&p["kernels"], "/engine/payload/kernels", MAX_KERNELS)?;
        for (i, k) in kernels.iter().enumerate() {
            let kp = format!("/engine/payload/kernels/{i}");
            let km = obj(k, &kp)?;
            keys(
                km,
                &kp,
                &["kernelName", "kernelParams", "cubin"],
                &["kernelName", "cubin"],
            )?;
            string(&km["kernelName"], &format!("{kp}/kernelName"), 4096)?;
            let cubin = string(&km["cubin"], &format!("{kp}/cubin"), MAX_JSON_BYTES)?;
            if !is_base64(cubin) {
                return Err(bad(&format!("{kp}/cubin"), "must be base64", "other bytes"));
            }
            if let Some(params) = km.get("kernelParams") {
                kernel_params(params, &format!("{kp}/kernelParams"))?;
            }
        }
    } else {
        keys(
            p,
            path,
            &["Records", "RecordSize", "Fatbins", "guid"],
            &["Records", "RecordSize", "Fatbins", "guid"],
        )?;
        let rec = string(&p["Records"], "/engine/payload/Records", MAX_JSON_BYTES)?;
        if !is_base64(rec) {
            return Err(bad(
                "/engine/payload/Records",
                "must be base64",
                "other bytes",
            ));
        }
        let size = int(&p["RecordSize"], "/engine/payload/RecordSize", 1, 1 << 30)?;
        if usize::try_from(size).ok() != Some(base64_len(rec)) {
            return Err(Error::mismatch(
                "plan JSON /engine/payload/RecordSize (the decoded Records)",
                base64_len(rec),
                size,
            ));
        }
        let fatbins = arr(&p["Fatbins"], "/engine/payload/Fatbins", 0)?;
        let _ = fatbins;
        int(&p["guid"], "/engine/payload/guid", 0, i64::from(i32::MAX))?;
    }
    Ok(true)
}

/// A kernel's parameter block: every patched offset inside the raw data.
fn kernel_params(v: &Value, path: &str) -> Result<()> {
    let m = obj(v, path)?;
    keys(m, path, &["offsets", "rawData"], &["offsets", "rawData"])?;
    let raw = string(&m["rawData"], &format!("{path}/rawData"), 1 << 20)?;
    if !is_base64(raw) || raw.len() % 4 != 0 {
        return Err(bad(
            &format!("{path}/rawData"),
            "must be base64",
            "other bytes",
        ));
    }
    let len = i64::try_from(base64_len(raw)).unwrap_or(i64::MAX);
    let offsets = arr(&m["offsets"], &format!("{path}/offsets"), MAX_PARAMS)?;
    for (i, o) in offsets.iter().enumerate() {
        let p = format!("{path}/offsets/{i}");
        let om = obj(o, &p)?;
        keys(
            om,
            &p,
            &["value", "uid", "update_as", "size", "name"],
            &["value"],
        )?;
        let at = int(
            &om["value"],
            &format!("{p}/value"),
            0,
            len.saturating_sub(1),
        )?;
        if let Some(u) = om.get("uid") {
            int(u, &format!("{p}/uid"), i64::MIN, i64::MAX)?;
        }
        let size = match om.get("size") {
            Some(s) => int(s, &format!("{p}/size"), 1, 8)?,
            None => 1,
        };
        let width = match om.get("update_as") {
            Some(u) => match one_of(
                u,
                &format!("{p}/update_as"),
                &["pointer", "workspace", "value", "tma_desc"],
            )? {
                "pointer" | "workspace" => 8,
                "value" => size,
                _ => 1,
            },
            None => 1,
        };
        if om.contains_key("update_as") != om.contains_key("uid") {
            return Err(bad(&p, "must have both uid and update_as, or neither", o));
        }
        if let Some(n) = om.get("name") {
            string(n, &format!("{p}/name"), 256)?;
        }
        if at.checked_add(width).is_none_or(|end| end > len) {
            return Err(bad(
                &format!("{p}/value"),
                format!("must leave {width} bytes inside the {len}-byte parameter block"),
                at,
            ));
        }
    }
    Ok(())
}

/// The `cudnnVersion` a plan JSON records.
///
/// # Errors
/// Not a JSON object with an integer `cudnnVersion`.
pub(crate) fn cudnn_version_of(json: &str) -> Result<u64> {
    let v: Value = parse(json)?;
    let m = obj(&v, "/")?;
    let c = m
        .get("cudnnVersion")
        .ok_or_else(|| bad("/cudnnVersion", "is required", "missing"))?;
    Ok(u64::try_from(int(c, "/cudnnVersion", 1, 99_99_99)?).unwrap_or(0))
}

fn parse(json: &str) -> Result<Value> {
    if json.len() > MAX_JSON_BYTES {
        return Err(bad(
            "",
            format!("must be at most {MAX_JSON_BYTES} bytes"),
            json.len(),
        ));
    }
    if json.contains('\0') {
        return Err(bad("", "must not contain NUL", json.len()));
    }
    // serde_json refuses nesting deeper than 128 levels with an error.
    serde_json::from_str(json).map_err(|e| bad("", format!("must be JSON ({e})"), short(json)))
}

/// Check a cuDNN plan JSON against the IO signature it is paired with and
/// the target it is loaded for, before cuDNN sees it: the shape cuDNN writes
/// (see the [module docs](self)), made by cuDNN `cudnn` when given
/// (`major * 10000 + minor * 100 + patch`), and every non-virtual tensor,
/// by-value scalar and scratch tensor in agreement with `io`.
///
/// [`Plan::from_cudnn_json`](super::Plan::from_cudnn_json),
/// [`Plan::deserialize`](super::Plan::deserialize) and
/// [`PlanCache::load`](super::PlanCache::load) call this; it is public so a
/// framework can vet a plan file without loading it.
///
/// # Errors
/// A typed error naming the JSON path (and for a disagreement the uid, the
/// field and both values); a plan made by another cuDNN (`Unsupported`).
pub fn check(json: &str, io: &IoSignature, target: &Target, cudnn: Option<u64>) -> Result<()> {
    check_summary(json, io, target, cudnn).map(|_| ())
}

pub(crate) fn check_summary(
    json: &str,
    io: &IoSignature,
    target: &Target,
    cudnn: Option<u64>,
) -> Result<Summary> {
    let v = parse(json)?;
    let top = obj(&v, "/")?;
    const TOP: &[&str] = &[
        "cudnnVersion",
        "schemaVersion",
        "operationGraph",
        "GPUProfile",
        "engine",
    ];
    keys(top, "/", TOP, TOP)?;
    let version =
        u64::try_from(int(&top["cudnnVersion"], "/cudnnVersion", 1, 99_99_99)?).unwrap_or(0);
    if let Some(want) = cudnn
        && want != version
    {
        return Err(Error::Unsupported {
            what: format!(
                "the plan was made by cuDNN {}, and cuDNN {} is loaded",
                super::plan_file::fmt_cudnn_version(version),
                super::plan_file::fmt_cudnn_version(want)
            ),
            needs: Some("a plan made by the loaded cuDNN (rebuild it)".to_string()),
        });
    }
    int(&top["schemaVersion"], "/schemaVersion", 1, 64)?;
    profile(&top["GPUProfile"], target)?;
    let runtime_compiled = engine(&top["engine"], target.properties().device_ver())?;
    let mut w = Walk {
        tensors: HashMap::new(),
    };
    w.graph(
        &top["operationGraph"],
        "/operationGraph",
        0,
        &HashSet::new(),
    )?;
    agree(&w.tensors, io)?;
    Ok(Summary {
        cudnn_version: version,
        runtime_compiled,
    })
}

fn field_err(
    uid: i64,
    field: &str,
    want: impl std::fmt::Display,
    got: impl std::fmt::Display,
) -> Error {
    Error::mismatch(
        format!("plan JSON tensor uid {uid} {field} (the tensor list says, the JSON has)"),
        want,
        got,
    )
}

/// Every non-virtual tensor of the JSON is a bound tensor, a scalar or a
/// scratch tensor of `io`, with the same uid, dims, strides, data type and
/// by-value flag; and everything `io` lists is in the JSON.
fn agree(tensors: &HashMap<i64, JsonTensor>, io: &IoSignature) -> Result<()> {
    let mut seen = HashSet::new();
    for t in &io.tensors {
        let j = tensors.get(&t.uid).ok_or_else(|| {
            field_err(t.uid, "presence", format!("`{}`", t.name), "no such tensor")
        })?;
        if j.is_virtual {
            return Err(field_err(t.uid, "isVirtual", false, true));
        }
        if j.by_value {
            return Err(field_err(t.uid, "isByValue", false, true));
        }
        let dtype = dtype_of(j.dtype);
        if dtype != Some(t.spec.dtype()) {
            return Err(field_err(t.uid, "dataType", t.spec.dtype(), j.dtype));
        }
        // The same dims and strides, or the same (dim, stride) pairs in
        // another order: a transposed view of the same memory (the composite
        // attention backward hands cuDNN K as [B, H, D, S]).
        if !same_view(&j.dims, &j.strides, t.spec.dims(), t.spec.strides()) {
            if j.dims.len() != t.spec.dims().len() || sorted(&j.dims) != sorted(t.spec.dims()) {
                return Err(field_err(t.uid, "dim", fmt(t.spec.dims()), fmt(&j.dims)));
            }
            return Err(field_err(
                t.uid,
                "stride",
                fmt(t.spec.strides()),
                fmt(&j.strides),
            ));
        }
        seen.insert(t.uid);
    }
    for &(uid, dtype, _) in &io.scalars {
        let j = tensors
            .get(&uid)
            .ok_or_else(|| field_err(uid, "presence", "a by-value scalar", "no such tensor"))?;
        if !j.by_value {
            return Err(field_err(uid, "isByValue", true, false));
        }
        if dtype_of(j.dtype) != Some(dtype) {
            return Err(field_err(uid, "dataType", dtype, j.dtype));
        }
        if j.dims.iter().any(|&d| d != 1) {
            return Err(field_err(uid, "dim", "all 1 (a scalar)", fmt(&j.dims)));
        }
        if !seen.insert(uid) {
            return Err(field_err(uid, "role", "one role", "listed twice"));
        }
    }
    for &(uid, bytes) in &io.scratch {
        let j = tensors
            .get(&uid)
            .ok_or_else(|| field_err(uid, "presence", "a scratch tensor", "no such tensor"))?;
        if j.is_virtual || j.by_value {
            return Err(field_err(
                uid,
                "isVirtual/isByValue",
                "false/false",
                format!("{}/{}", j.is_virtual, j.by_value),
            ));
        }
        let span = span_bytes(j).ok_or_else(|| field_err(uid, "span", bytes, "overflows"))?;
        if span != bytes {
            return Err(field_err(uid, "span bytes", bytes, span));
        }
        if !seen.insert(uid) {
            return Err(field_err(uid, "role", "one role", "listed twice"));
        }
    }
    for (uid, j) in tensors {
        if !j.is_virtual && !seen.contains(uid) {
            return Err(field_err(
                *uid,
                "role",
                "virtual (it is not in the tensor list)",
                if j.by_value {
                    "a by-value tensor"
                } else {
                    "a tensor to bind"
                },
            ));
        }
    }
    Ok(())
}

fn span_bytes(j: &JsonTensor) -> Option<usize> {
    let mut span: i64 = 1;
    for (d, s) in j.dims.iter().zip(&j.strides) {
        span = (d - 1).checked_mul(*s)?.checked_add(span)?;
    }
    let size = dtype_of(j.dtype)?.size();
    usize::try_from(span).ok()?.checked_mul(size)
}

fn sorted(v: &[i64]) -> Vec<i64> {
    let mut v = v.to_vec();
    v.sort_unstable();
    v
}

/// The same tensor, or a permutation of its axes (same memory, same span).
fn same_view(dims: &[i64], strides: &[i64], want_dims: &[i64], want_strides: &[i64]) -> bool {
    if dims == want_dims && strides == want_strides {
        return true;
    }
    let pairs = |d: &[i64], s: &[i64]| {
        let mut p: Vec<(i64, i64)> = d.iter().copied().zip(s.iter().copied()).collect();
        p.sort_unstable();
        p
    };
    dims.len() == want_dims.len() && pairs(dims, strides) == pairs(want_dims, want_strides)
}

fn fmt(v: &[i64]) -> String {
    format!("{v:?}")
}
