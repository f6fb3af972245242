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
//! composite, forward and backward), for H200, A100 and B200 targets, and
//! from the plans NVIDIA's cuDNN frontend 1.32 writes for the same graphs
//! (its SDPA forward holds a SOFTMAX operation: a node of its composite, or
//! a sub-descriptor of the SDPA operation that writes the statistics).

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

mod agree;
mod attention;
mod dataflow;
mod dupkeys;
mod engine;
mod guards;
mod refuse;
mod schema;
mod unchecked;

use agree::{Tensors, agree};
pub(crate) use dupkeys::no_duplicate_keys;
use engine::{engine, profile};
use refuse::{At, Idx, Key, KeyIdx, Sub, bad, short};
use schema::Field::*;
use schema::{DATA_TYPES, FINALIZE_MODES, node_fields};

use super::graph::IoSignature;
use super::guard::InputGuard;
use super::target::Target;
use super::tensor::{MAX_DIMS, MAX_EXTENT};
use crate::error::{Error, Result};

/// The largest plan JSON accepted (cuDNN's own reader caps at 64 MiB too).
pub const MAX_JSON_BYTES: usize = 64 << 20;
/// Tensors in one operation graph (or subgraph).
const MAX_TENSORS: usize = 4096;
/// Nodes in one operation graph (or subgraph).
const MAX_NODES: usize = 512;
/// Subgraphs nest at most this deep (SDPA's score subgraph: 1).
const MAX_DEPTH: usize = 2;

/// What the check learned about a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Summary {
    /// The cuDNN that wrote it (`cudnnVersion`, 92801 for 9.28.1).
    pub(crate) cudnn_version: u64,
    /// Its engine carries compiled code (the plan was compiled at run time).
    pub(crate) runtime_compiled: bool,
    /// The inputs the device uses as addresses or bounds, by UID: the page
    /// tables its operations read (a paged KV cache) and the sequence
    /// lengths of its attention ([`guards`]).
    pub(crate) guarded: Vec<(i64, InputGuard)>,
}

pub(super) fn obj(v: &Value, path: impl At) -> Result<&Map<String, Value>> {
    v.as_object()
        .ok_or_else(|| bad(path.at().as_str(), "must be an object", kind(v)))
}

pub(super) fn arr(v: &Value, path: impl At, max: usize) -> Result<&Vec<Value>> {
    let a = v
        .as_array()
        .ok_or_else(|| bad(path.at().as_str(), "must be an array", kind(v)))?;
    if a.len() > max {
        return Err(bad(
            &path.at(),
            format!("must have at most {max} entries"),
            a.len(),
        ));
    }
    Ok(a)
}

pub(super) fn int(v: &Value, path: impl At, lo: i64, hi: i64) -> Result<i64> {
    match v.as_i64() {
        Some(x) if (lo..=hi).contains(&x) => Ok(x),
        _ => Err(bad(
            path.at().as_str(),
            format!("must be an integer in {lo}..={hi}"),
            v,
        )),
    }
}

fn float(v: &Value, path: impl At) -> Result<f64> {
    match v.as_f64() {
        Some(x) if x.is_finite() && (v.is_f64() || v.is_i64()) => Ok(x),
        _ => Err(bad(path.at().as_str(), "must be a finite number", v)),
    }
}

fn boolean(v: &Value, path: impl At) -> Result<bool> {
    v.as_bool()
        .ok_or_else(|| bad(path.at().as_str(), "must be true or false", v))
}

pub(super) fn string(v: &Value, path: impl At, max: usize) -> Result<&str> {
    match v.as_str() {
        Some(s) if !s.is_empty() && s.len() <= max => Ok(s),
        _ => Err(bad(
            &path.at(),
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
pub(super) fn keys(
    m: &Map<String, Value>,
    path: &str,
    allowed: &[&str],
    required: &[&str],
) -> Result<()> {
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

pub(super) fn one_of<'v>(v: &'v Value, path: impl At, allowed: &[&str]) -> Result<&'v str> {
    match v.as_str() {
        Some(s) if allowed.contains(&s) => Ok(s),
        _ => Err(bad(
            &path.at(),
            format!("must be one of {}", allowed.join(", ")),
            v,
        )),
    }
}

/// The node fields that read a page table (a paged KV cache): the SDPA
/// forward's and the paged cache load's.
const PAGE_TABLE_FIELDS: &[&str] = &["pageTableK", "pageTableV", "pageTable"];

/// One tensor of the plan, as the JSON declares it.
#[derive(Debug, PartialEq)]
struct JsonTensor {
    dtype: &'static str,
    dims: Vec<i64>,
    strides: Vec<i64>,
    is_virtual: bool,
    by_value: bool,
    /// The uid of its ragged offsets (packed THD attention), if any.
    ragged: Option<i64>,
}

struct Walk {
    tensors: HashMap<i64, JsonTensor>,
    /// Tensors some node writes, and some node reads, by name.
    written: HashSet<String>,
    read: HashSet<String>,
    /// Tensors some node reads as a page table, by name.
    page_tables: HashSet<String>,
    /// Every node's operation and the `(field, tensor name)` it reads or
    /// writes, for [`guards`].
    nodes: Vec<(String, Vec<(String, String)>)>,
    /// What each node reads and writes, for [`dataflow`].
    flow: Vec<dataflow::Flow>,
    /// The score-subgraph inputs (their SDPA operation writes them) and
    /// the subgraph they are handed to.
    provided: HashSet<(String, String)>,
    /// The tensors of each node's subgraph (an SDPA operation's score
    /// modifiers and masks), by the node's index in `nodes`.
    subgraphs: HashMap<usize, Vec<i64>>,
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
        // Optional: a ragged offset tensor (packed THD attention), declared
        // inline as a one-element list; `agree` checks the tensor list
        // names it as such, so safe code never binds it.
        const K_RAGGED: &[&str] = &[
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
            "isRagged",
        ];
        keys(m, path, K_RAGGED, K)?;
        let ragged = match m.get("isRagged") {
            None => None,
            Some(r) => {
                let rp = format!("{path}/isRagged");
                let list = arr(r, &rp, 1)?;
                let first = list
                    .first()
                    .ok_or_else(|| bad(&rp, "must hold one offsets tensor", "[]"))?;
                let fp = format!("{rp}/0");
                if obj(first, &fp)?.contains_key("isRagged") {
                    return Err(bad(&fp, "must have no ragged offsets itself", "isRagged"));
                }
                let off = self.tensor(first, &fp)?;
                Some(
                    off.parse::<i64>()
                        .map_err(|_| bad(&fp, "must be a tensor uid", off))?,
                )
            }
        };
        let name = string(&m["name"], Sub(path, "/name"), 20)?;
        let uid: i64 = name.parse().map_err(|_| {
            bad(
                Sub(path, "/name"),
                "must be a tensor uid (an integer)",
                name,
            )
        })?;
        let dtype_name = one_of(&m["dataType"], Sub(path, "/dataType"), DATA_TYPES)?;
        let dtype = DATA_TYPES
            .iter()
            .copied()
            .find(|d| *d == dtype_name)
            .unwrap_or("CUDNN_DATA_FLOAT");
        let dims = arr(&m["dim"], Sub(path, "/dim"), MAX_DIMS)?;
        let strides = arr(&m["stride"], Sub(path, "/stride"), MAX_DIMS)?;
        if dims.is_empty() || dims.len() != strides.len() {
            return Err(bad(
                Sub(path, "/stride"),
                format!("must have as many entries as dim (1..={MAX_DIMS})"),
                format!("{} dims, {} strides", dims.len(), strides.len()),
            ));
        }
        let dims = dims
            .iter()
            .enumerate()
            .map(|(i, d)| int(d, Idx(path, "/dim/", i), 1, MAX_EXTENT))
            .collect::<Result<Vec<_>>>()?;
        let strides = strides
            .iter()
            .enumerate()
            .map(|(i, d)| int(d, Idx(path, "/stride/", i), 1, MAX_EXTENT))
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
                        Sub(path, "/dim"),
                        format!("spans more than {MAX_EXTENT} elements"),
                        format!("{dims:?} strides {strides:?}"),
                    )
                })?;
        }
        let is_virtual = boolean(&m["isVirtual"], Sub(path, "/isVirtual"))?;
        let by_value = boolean(&m["isByValue"], Sub(path, "/isByValue"))?;
        int(&m["vectCount"], Sub(path, "/vectCount"), 1, 1)?;
        int(&m["vectDim"], Sub(path, "/vectDim"), -1, -1)?;
        int(&m["ptrAlignment"], Sub(path, "/ptrAlignment"), 16, 16)?;
        one_of(
            &m["reordering"],
            Sub(path, "/reordering"),
            &["CUDNN_TENSOR_REORDERING_NONE"],
        )?;
        if is_virtual && by_value {
            return Err(bad(path, "cannot be both virtual and by value", name));
        }
        let t = JsonTensor {
            dtype,
            dims,
            strides,
            is_virtual,
            by_value,
            ragged,
        };
        // A tensor declared again must be the same tensor: an attention
        // mask subgraph lists the sequence lengths it shares with its SDPA
        // operation (NVIDIA's frontend's plans do).
        match self.tensors.get(&uid) {
            Some(prev) if *prev == t => {}
            Some(_) => {
                return Err(bad(
                    Sub(path, "/name"),
                    "must be unique in the plan (or declare the same tensor again)",
                    uid,
                ));
            }
            None => {
                self.tensors.insert(uid, t);
            }
        }
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
            Sub(path, "/finalizeMode"),
            FINALIZE_MODES,
        )?;
        let tensors = arr(&m["tensors"], Sub(path, "/tensors"), MAX_TENSORS)?;
        let nodes = arr(&m["nodes"], Sub(path, "/nodes"), MAX_NODES)?;
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
            self.node(n, &format!("{path}/nodes/{i}"), depth, &names, false, path)?;
        }
        Ok(())
    }

    /// A node; `nested` when it is another node's sub-descriptor (which
    /// may not hold one in turn).
    fn node(
        &mut self,
        v: &Value,
        path: &str,
        depth: usize,
        names: &HashSet<String>,
        nested: bool,
        scope: &str,
    ) -> Result<()> {
        let m = obj(v, path)?;
        let op_path = Sub(path, "/operation");
        let op = string(
            m.get("operation")
                .ok_or_else(|| bad(Sub(path, "/operation"), "is required", "missing"))?,
            Sub(path, "/operation"),
            80,
        )?;
        let fields = node_fields(op).ok_or_else(|| {
            bad(
                op_path,
                "must be an operation of the graphs this crate builds",
                op,
            )
        })?;
        let mut sub_names: Option<HashSet<String>> = None;
        let mut io_fields: Vec<(String, String)> = Vec::new();
        let mut flow = dataflow::Flow {
            path: path.to_string(),
            scope: scope.to_string(),
            own_inputs: nested,
            view: op == "CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR",
            ..dataflow::Flow::default()
        };
        // Named only for a node with a subgraph (its uids are checked
        // against it; a node without one refuses subgraph uids first).
        let sub_scope = if m.contains_key("subgraph") {
            format!("{path}/subgraph")
        } else {
            String::new()
        };
        // The subgraph first, so its uids are known to `SubgraphUid`.
        if let Some(sg) = m.get("subgraph") {
            if !fields.iter().any(|(k, _)| *k == "subgraph") {
                return Err(bad(
                    Sub(path, "/subgraph"),
                    "is not allowed here",
                    "a subgraph",
                ));
            }
            let before: HashSet<i64> = self.tensors.keys().copied().collect();
            self.graph(sg, &sub_scope, depth + 1, names)?;
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
            let p = Key(path, k);
            let Some((_, f)) = fields.iter().find(|(name, _)| name == k) else {
                let known: Vec<&str> = fields.iter().map(|(n, _)| *n).collect();
                return Err(bad(
                    p,
                    format!(
                        "is not a key of {op} (known: operation, {})",
                        known.join(", ")
                    ),
                    k,
                ));
            };
            match *f {
                In | Out | Stat => {
                    let s = string(val, p, 20)?;
                    if !names.contains(s) {
                        return Err(bad(p, "must name a tensor of the graph", s));
                    }
                    let writes = match *f {
                        Out => true,
                        // Written in training, read in inference.
                        Stat => {
                            m.get("fmode").and_then(Value::as_str)
                                != Some("CUDNN_NORM_FWD_INFERENCE")
                        }
                        _ => false,
                    };
                    if writes {
                        self.written.insert(s.to_string());
                        flow.writes.push(s.to_string());
                    } else {
                        self.read.insert(s.to_string());
                        flow.reads.push(s.to_string());
                    }
                    if PAGE_TABLE_FIELDS.contains(&k.as_str()) {
                        self.page_tables.insert(s.to_string());
                    }
                    io_fields.push((k.clone(), s.to_string()));
                }
                Enum(allowed) => {
                    one_of(val, p, allowed)?;
                }
                Float => {
                    float(val, p)?;
                }
                Prob => {
                    let x = float(val, p)?;
                    if !(0.0..=1.0).contains(&x) {
                        return Err(bad(p, "must be in 0..=1", x));
                    }
                }
                Bool => {
                    boolean(val, p)?;
                }
                Ints(lo) => {
                    let a = arr(val, p, MAX_DIMS)?;
                    if a.is_empty() {
                        return Err(bad(p, format!("must have 1..={MAX_DIMS} entries"), 0));
                    }
                    for (i, x) in a.iter().enumerate() {
                        int(x, KeyIdx(path, k, i), lo, 1 << 20)?;
                    }
                }
                Axis => {
                    int(val, p, 0, MAX_DIMS as i64 - 1)?;
                }
                Int(lo, hi) => {
                    int(val, p, lo, hi)?;
                }
                Subgraph => {}
                SubOp(want) => {
                    if nested {
                        return Err(bad(p, "must not nest in a sub-descriptor", k));
                    }
                    let sub = obj(val, p)?;
                    let got = sub.get("operation").and_then(Value::as_str);
                    if got != Some(want) {
                        return Err(bad(
                            Sub(&p.at(), "/operation"),
                            format!("must be {want}"),
                            got.unwrap_or("missing"),
                        ));
                    }
                    self.node(val, &p.at(), depth, names, true, scope)?;
                    // The sub-descriptor's tensors are the operation's too
                    // (its statistics are indexed by the operation's
                    // lengths): listed as `softmax.statsDesc` and so on.
                    if let Some((_, sub)) = self.nodes.last() {
                        let sub: Vec<(String, String)> = sub
                            .iter()
                            .map(|(f, n)| (format!("{k}.{f}"), n.clone()))
                            .collect();
                        io_fields.extend(sub);
                    }
                }
                SubgraphUid => {
                    let uid = int(val, p, i64::MIN, i64::MAX)?;
                    if !sub_names
                        .as_ref()
                        .is_some_and(|s| s.contains(&uid.to_string()))
                    {
                        return Err(bad(p, "must name a tensor of the node's subgraph", uid));
                    }
                    // The operation hands its subgraph the input and reads
                    // back the output (which a subgraph node must write).
                    // Both in the subgraph's scope: the input is provided
                    // to its nodes only, the output must be written there.
                    if k == "subgraphInputUid" {
                        self.provided.insert((uid.to_string(), sub_scope.clone()));
                    } else {
                        flow.sub_reads.push((uid.to_string(), sub_scope.clone()));
                    }
                }
            }
        }
        // cuDNN 9.10 names the RNG's output `yDesc`, 9.28 `Y`: one output,
        // under either name, never both (cuDNN reads one of them; the
        // other would count as a producer of a tensor nothing writes).
        if m.contains_key("Y") && m.contains_key("yDesc") {
            return Err(bad(path, "names its output both `Y` and `yDesc`", op));
        }
        if m.contains_key("stats") && m.contains_key("softmax") {
            return Err(bad(
                path,
                "sets the statistics both directly and through its softmax sub-descriptor",
                op,
            ));
        }
        if sub_names.is_none()
            && (m.contains_key("subgraphInputUid") || m.contains_key("subgraphOutputUid"))
        {
            return Err(bad(path, "names subgraph tensors but has no subgraph", op));
        }
        // A sub-descriptor (the SDPA forward's SOFTMAX) reads what its
        // operation computes inside (the scores): `own_inputs` exempts its
        // own reads, nobody else's.
        self.nodes.push((op.to_string(), io_fields));
        self.flow.push(flow);
        if let Some(sub) = &sub_names {
            let uids = sub.iter().filter_map(|n| n.parse::<i64>().ok()).collect();
            self.subgraphs.insert(self.nodes.len() - 1, uids);
        }
        Ok(())
    }
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
    let v = serde_json::from_str(json)
        .map_err(|e| bad("", format!("must be JSON ({e})"), short(json)))?;
    no_duplicate_keys(json)?;
    Ok(v)
}

/// Check a cuDNN plan JSON against the IO signature it is paired with and
/// the target it is loaded for, before cuDNN sees it: a strict allow-list of
/// the shape cuDNN writes for the graphs this crate builds (every key known,
/// of the type and in the range cuDNN writes it, counts within limits, every
/// dim at least 1, every tensor reference naming a tensor of the graph, the device
/// profile of `target`'s architecture), made by cuDNN `cudnn` when given
/// (`major * 10000 + minor * 100 + patch`), and every non-virtual tensor,
/// by-value scalar and scratch tensor in agreement with `io` (uid, dims,
/// strides or a transposed view of the same memory, data type, by-value).
/// cuDNN's own parser is not a validator: some malformed plans crash the
/// process (SIGSEGV, SIGABRT, SIGFPE) instead of returning an error.
///
/// Node fields are read as inputs or outputs: every bound tensor a node
/// writes must be an output of `io`, every one nodes only read an input, and
/// no node may write a by-value scalar. A runtime-compiled plan's payload is
/// checked for structure and for parameter uids naming tensors of the graph;
/// whether compiled code may be loaded at all is the loader's decision (a
/// signed file under its key, or the `unsafe` `*_unverified` loaders).
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

/// What a plan JSON's compiled code (the engine's `payload`: kernel binaries
/// and the parameter blocks patched with tensor addresses) is trusted with.
///
/// cuDNN 9.28 cannot finalize a runtime-compiled plan whose JSON has its
/// payload removed (measured: `CUDNN_STATUS_BAD_PARAM` for a conv + scale,
/// matmul + relu, layer norm, SDPA forward and composite SDPA backward), so
/// an untrusted payload is refused, not stripped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Payload {
    /// Not trusted: a plan JSON with compiled code is refused.
    Refuse,
    /// Trusted (the caller vouches for the file): the payload is passed on,
    /// after its structure and tensor references are checked.
    Keep,
}

/// cuDNN's parameter-block uids that name no tensor of the graph: pointers
/// cuDNN patches itself (measured in cuDNN 9.28's plans: the first pointer
/// after the attention descriptor in every SDPA payload; and a pointer of
/// the sm100 SDPA forward kernel with dropout; and the sentinel 0xbadbadbaddd
/// of the sm80 SDPA backward kernel; five pointers of the sm90 / sm100
/// attention kernels with ragged offsets (packed THD); in the crate's
/// plans and the frontend's alike).
const INTERNAL_PARAM_UIDS: &[i64] = &[
    0x2839_af92_655f_e804,
    -7_322_303_068_214_233_619,
    0x0bad_badb_addd,
    -9_004_140_354_173_595_721,
    -3_781_560_665_018_533_726,
    -1_504_676_450_671_020_737,
    -507_205_713_341_733_187,
    8_197_888_589_163_993_711,
];

/// More of cuDNN's own pointers, patched only in kernels of a ragged (packed
/// THD) attention backward whose K and V carry their offsets (measured in
/// cuDNN 9.28.1's sm90 plans of the composite backward, with and without
/// grouped-query attention, bias, dBias): accepted only in a plan with
/// ragged tensors.
const RAGGED_PARAM_UIDS: &[i64] = &[
    -5_208_890_643_914_892_462,
    655_857_035_306_566_210,
    -7_004_828_186_068_582_583,
];

/// The refusal of a plan JSON that carries compiled code, untrusted.
pub(crate) fn compiled_code_refused() -> Error {
    Error::Unsupported {
        what: "this plan carries compiled kernel code (a runtime-compiled plan), which no \
               check can tie to its tensor list; cuDNN cannot rebuild the plan without it"
            .to_string(),
        needs: Some(
            "a file this program signed (`Plan::serialize_signed`, `PlanCache::save`) \
             loaded with `Trust::SignedBy` its key; for a file from elsewhere the `unsafe` \
             `*_unverified` loaders; or a plan rebuilt from its graph"
                .to_string(),
        ),
    }
}

#[cfg(test)]
thread_local! {
    /// How many plan JSONs [`check_summary`] checked on this thread (unit
    /// tests count a loader's checks with it).
    pub(crate) static CHECKS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

pub(crate) fn check_summary(
    json: &str,
    io: &IoSignature,
    target: &Target,
    cudnn: Option<u64>,
) -> Result<Summary> {
    #[cfg(test)]
    CHECKS.with(|c| c.set(c.get() + 1));
    let (summary, tensors) = shape(json, Some(target), cudnn)?;
    refuse_unresolved(&tensors)?;
    against_io(&summary, &tensors, io, &HashSet::new())?;
    Ok(summary)
}

/// The checks of a plan JSON's tensors against the tensor list `io` (every
/// entry of `io` but those in `absent` present in the JSON).
fn against_io(
    summary: &Summary,
    tensors: &Tensors,
    io: &IoSignature,
    absent: &HashSet<i64>,
) -> Result<()> {
    agree(tensors, io, absent)?;
    // Scratch tensors (bound in the JSON, placed in the workspace) need
    // their producer as virtual ones do.
    let scratch: HashSet<i64> = io.scratch.iter().map(|&(u, _)| u).collect();
    dataflow::check(&tensors.flow, &tensors.all, &scratch, &tensors.provided)?;
    // The device uses a page table's or an offset's values as addresses
    // and a length's as a row bound: each must be a bound input (which only
    // its guarded binding call binds), never a by-value scalar (its value
    // baked into the plan), a scratch or virtual tensor (computed by the
    // graph, e.g. a bound length plus a constant) the crate cannot vouch for.
    for (uid, g) in &summary.guarded {
        // A by-value scalar (the full lengths of a band mask without
        // padding, as the crate and NVIDIA's frontend build it) is not
        // device memory; its value is the tensor list's scalar, passed at
        // every launch: a length within the extent it bounds, as a bound
        // length tensor's values are checked (the tensor list's fields are
        // the caller's to edit; a soundness audit found a by-value length
        // of 1e9 passed unchecked, reachable once such a plan needs no
        // compiled code).
        if tensors.all.get(uid).is_some_and(|t| t.by_value) {
            let scalar = io.scalars.iter().find(|s| s.0 == *uid);
            let value = scalar.map(|s| s.2);
            let what = format!("plan JSON tensor uid {uid}");
            // An integer type: a float's bytes read as a length are another
            // number (128.0 as f32 is 1,124,073,472 as i32).
            let integral =
                scalar.is_some_and(|s| matches!(s.1, super::DType::I32 | super::DType::I64));
            match (g, value) {
                (InputGuard::SeqLengths { extent }, Some(v))
                    if integral && v.fract() == 0.0 && v >= 0.0 && v <= *extent as f64 =>
                {
                    continue;
                }
                (InputGuard::SeqLengths { extent }, v) => {
                    return Err(Error::invalid(
                        what,
                        format!(
                            "a by-value sequence length must be an integer scalar (I32 or \
                             I64) whose value is a whole number in 0..={extent} (the extent it \
                             bounds)"
                        ),
                        v.map_or_else(|| "none".to_string(), |v| v.to_string()),
                    ));
                }
                (InputGuard::PageTable | InputGuard::RaggedOffsets, _) => {
                    return Err(Error::invalid(
                        what,
                        "must be a bound input of the tensor list (page tables and ragged \
                         offsets are device memory, never a by-value scalar)",
                        uid,
                    ));
                }
            }
        }
        if !io.tensors.iter().any(|t| t.uid == *uid && !t.is_output) {
            let what = match g {
                InputGuard::PageTable => "a page table",
                InputGuard::RaggedOffsets => "ragged offsets",
                InputGuard::SeqLengths { .. } => "sequence lengths (a row bound)",
            };
            return Err(Error::invalid(
                format!("plan JSON tensor uid {uid}"),
                format!("must be a bound input of the tensor list (it is read as {what})"),
                uid,
            ));
        }
    }
    Ok(())
}

/// The shape check alone (no tensor list, no target): what the typed
/// backend API runs before finalizing an execution plan from JSON.
pub(crate) fn check_shape(json: &str) -> Result<()> {
    let (_, t) = shape(json, None, None)?;
    refuse_unresolved(&t)?;
    // The data flow too (no tensor list here: virtual tensors only).
    dataflow::check(&t.flow, &t.all, &HashSet::new(), &t.provided)
}

fn shape(json: &str, target: Option<&Target>, cudnn: Option<u64>) -> Result<(Summary, Tensors)> {
    let v = parse(json)?;
    let top = obj(&v, "/")?;
    const TOP: &[&str] = &[
        "cudnnVersion",
        "schemaVersion",
        "operationGraph",
        "GPUProfile",
        "engine",
    ];
    keys(top, "", TOP, TOP)?;
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
    let device_ver = profile(&top["GPUProfile"], target)?;
    let engine::EngineInfo {
        runtime_compiled,
        param_uids,
        attn_headers,
    } = engine(&top["engine"], device_ver)?;
    let mut w = Walk {
        tensors: HashMap::new(),
        written: HashSet::new(),
        read: HashSet::new(),
        page_tables: HashSet::new(),
        nodes: Vec::new(),
        flow: Vec::new(),
        provided: HashSet::new(),
        subgraphs: HashMap::new(),
    };
    w.graph(
        &top["operationGraph"],
        "/operationGraph",
        0,
        &HashSet::new(),
    )?;
    // Every kernel parameter patched from a tensor names a tensor of this
    // graph (a payload taken from another graph's plan can name tensors this
    // one does not have). Virtual tensors count: cuDNN places some of them
    // in the workspace and patches their address (composite SDPA backward).
    // In a plan with an SDPA backward operation, a parameter naming no
    // tensor of the JSON is kept for the caller to refuse, or to tell as
    // cuDNN's serialization gap (`score_subgraph_gap`).
    let backward_op = attention::has_backward_op(&w);
    let backward_without_subgraph = attention::backward_without_subgraph(&w);
    let mut unresolved = Vec::new();
    for param in &param_uids {
        let uid = param.uid;
        let ragged_buffer =
            RAGGED_PARAM_UIDS.contains(&uid) && w.tensors.values().any(|t| t.ragged.is_some());
        if !w.tensors.contains_key(&uid)
            && !INTERNAL_PARAM_UIDS.contains(&uid)
            && !attention::backward_buffer(uid, &w)
            && !attention::forward_buffer(uid, &w, &attn_headers)
            && !ragged_buffer
        {
            if !backward_op {
                return Err(bad(&param.path, "must name a tensor of the graph", uid));
            }
            unresolved.push(param.clone());
        }
    }
    guards::check_batches(&w)?;
    dataflow::check_shapes(&w.nodes, &w.tensors)?;
    guards::check_paged_loads(&w)?;
    attention::check_headers(&w, &attn_headers)?;
    Ok((
        Summary {
            cudnn_version: version,
            runtime_compiled,
            guarded: guards::guarded(&w),
        },
        Tensors {
            all: w.tensors,
            written: w.written,
            read: w.read,
            flow: w.flow,
            provided: w.provided,
            unresolved,
            backward_without_subgraph,
        },
    ))
}

/// Refuse a kernel parameter that names no tensor of the JSON (the first).
fn refuse_unresolved(t: &Tensors) -> Result<()> {
    match t.unresolved.first() {
        Some(p) => Err(bad(&p.path, "must name a tensor of the graph", p.uid)),
        None => Ok(()),
    }
}

/// Whether a plan JSON that [`check_summary`] refuses (for the tensor list
/// `io`) is refused for cuDNN's serialization gap alone, and nothing else:
/// cuDNN 9.28 writes an SDPA backward operation's JSON without its score
/// subgraph (the causal mask, window, bias, ALiBi or softcap), while the
/// compiled kernels still patch some of that subgraph's tensors (measured:
/// by-value scalars and inputs of `io`). The loader refuses such a plan
/// (after a reload, cuDNN would have nothing to fill those parameters
/// from); the finalize memo tells this known refusal from others. So: an
/// SDPA backward node without a `subgraph`; every kernel parameter naming
/// no tensor of the JSON names a by-value scalar of `io` (patched with its
/// size) or an input of `io` (by address); every entry of `io` the JSON
/// lacks is a by-value scalar or an input; something is lacking; and every
/// other check passes.
pub(crate) fn score_subgraph_gap(json: &str, io: &IoSignature, target: &Target) -> bool {
    let Ok((summary, t)) = shape(json, Some(target), None) else {
        return false;
    };
    let scalar = |uid: i64, size: Option<i64>| {
        io.scalars.iter().any(|&(u, dtype, _)| {
            u == uid && size.is_none_or(|n| i64::try_from(dtype.size()).is_ok_and(|s| s == n))
        })
    };
    let input = |uid: i64| io.tensors.iter().any(|x| x.uid == uid && !x.is_output);
    let params_in_io = t.unresolved.iter().all(|p| {
        if p.by_value {
            scalar(p.uid, Some(p.size))
        } else {
            input(p.uid)
        }
    });
    let absent: HashSet<i64> = io
        .tensors
        .iter()
        .map(|x| x.uid)
        .chain(io.scalars.iter().map(|x| x.0))
        .chain(io.scratch.iter().map(|x| x.0))
        .filter(|u| !t.all.contains_key(u))
        .collect();
    let absent_are_subgraph = absent.iter().all(|&u| scalar(u, None) || input(u));
    t.backward_without_subgraph
        && params_in_io
        && absent_are_subgraph
        && !(absent.is_empty() && t.unresolved.is_empty())
        && against_io(&summary, &t, io, &absent).is_ok()
}
