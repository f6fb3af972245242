//! A plan JSON's tensors against the tensor list it comes with
//! ([`agree`]): uid, dims, strides, data type, by-value flag, role, the
//! ragged offsets and the packed storage of the tensors they address.

use std::collections::{HashMap, HashSet};

use super::{JsonTensor, schema::dtype_of};
use crate::error::{Error, Result};
use crate::graph::graph::IoSignature;

pub(super) fn field_err(
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

/// The tensors of a plan JSON, and which of them its nodes write and read.
pub(super) struct Tensors {
    pub(super) all: HashMap<i64, JsonTensor>,
    pub(super) written: HashSet<String>,
    pub(super) read: HashSet<String>,
    /// What each node reads and writes ([`super::dataflow`]).
    pub(super) flow: Vec<super::dataflow::Flow>,
    /// The score-subgraph inputs.
    pub(super) provided: HashSet<(String, String)>,
    /// Kernel parameters of an SDPA backward that name no tensor of the
    /// JSON (refused; told apart by [`super::score_subgraph_gap`]).
    pub(super) unresolved: Vec<super::engine::Param>,
    /// Whether an SDPA backward node has no score subgraph in the JSON.
    pub(super) backward_without_subgraph: bool,
}

/// Every non-virtual tensor of the JSON is a bound tensor, a scalar or a
/// scratch tensor of `io`, with the same uid, dims, strides, data type and
/// by-value flag; and everything `io` lists is in the JSON. Roles agree: a
/// bound tensor some node writes is an output of `io`, one that nodes only
/// read an input, and no node writes a by-value scalar (safe code binds an
/// input through a shared borrow, so cuDNN must never write it).
///
/// `absent`: entries of `io` not required in the JSON (none, but when
/// [`super::score_subgraph_gap`] asks whether nothing else is wrong).
pub(super) fn agree(roles: &Tensors, io: &IoSignature, absent: &HashSet<i64>) -> Result<()> {
    let tensors = &roles.all;
    let mut seen = HashSet::new();
    for t in &io.tensors {
        if absent.contains(&t.uid) && !tensors.contains_key(&t.uid) {
            seen.insert(t.uid);
            continue;
        }
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
        let name = t.uid.to_string();
        let written = written_by_node(roles, &name);
        if written != t.is_output {
            return Err(field_err(
                t.uid,
                "role",
                role(t.is_output),
                if written {
                    "an output (a node writes it)"
                } else if roles.read.contains(&name) {
                    "an input (nodes only read it)"
                } else {
                    "no node's tensor"
                },
            ));
        }
        seen.insert(t.uid);
    }
    for &(uid, dtype, _) in &io.scalars {
        if absent.contains(&uid) && !tensors.contains_key(&uid) {
            seen.insert(uid);
            continue;
        }
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
        if written_by_node(roles, &uid.to_string()) {
            return Err(field_err(
                uid,
                "role",
                "a by-value scalar (read only)",
                "an output (a node writes it)",
            ));
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
    // The ragged offsets the JSON names are exactly those the tensor list
    // marks (which keep the plan off the safe `Plan::execute`).
    let named: std::collections::BTreeSet<i64> =
        tensors.values().filter_map(|j| j.ragged).collect();
    let listed: std::collections::BTreeSet<i64> = io.ragged_offsets.iter().copied().collect();
    if named != listed {
        return Err(Error::mismatch(
            "plan JSON ragged offset tensors (the tensor list says, the JSON has)",
            format!("{listed:?}"),
            format!("{named:?}"),
        ));
    }
    // cuDNN reads `B + 1` offsets (sequence `b` starts at entry `b`) of
    // each: a shorter offsets tensor would make it read past the bound
    // buffer, whatever the caller vouched for the values.
    for (uid, j) in tensors {
        let Some(off) = j.ragged else { continue };
        let o = tensors
            .get(&off)
            .ok_or_else(|| field_err(*uid, "isRagged", "a declared tensor", off))?;
        let want = j
            .dims
            .first()
            .and_then(|b| b.checked_add(1))
            .map(|n| vec![n, 1, 1, 1]);
        if want.as_deref() != Some(&o.dims[..]) {
            return Err(field_err(
                off,
                "dim (ragged offsets: the batch of the tensor they address + 1)",
                format!("{want:?}"),
                fmt(&o.dims),
            ));
        }
        // cuDNN counts the offsets in elements and the crate's contract in
        // tokens of `H x D` elements of packed BSHD storage: a tensor laid
        // out otherwise (a batch stride below `S x H x D`, a fused QKV
        // buffer) would be addressed outside its buffer or on the wrong
        // elements by offsets that meet the contract. Checked on the tensor
        // list's view (the JSON's may be a transposed view of it, which
        // `same_view` above tied to it).
        if !j.is_virtual {
            let listed = io.tensors.iter().find(|t| t.uid == *uid);
            let packed = listed.is_some_and(|t| {
                crate::graph::ops::sdpa_ragged::packed_bshd(t.spec.dims(), t.spec.strides())
            });
            if !packed {
                return Err(field_err(
                    *uid,
                    "stride (a tensor with ragged offsets: packed BSHD [S*H*D, D, H*D, 1])",
                    "packed BSHD strides",
                    listed.map_or_else(|| fmt(&j.strides), |t| fmt(t.spec.strides())),
                ));
            }
        }
        // Offsets are named only through `isRagged`: one an operation also
        // reads (as sequence lengths, say) would be bound under the
        // offsets' contract and used under another.
        let key = off.to_string();
        if roles.read.contains(&key) || roles.written.contains(&key) {
            return Err(field_err(
                off,
                "ragged offsets",
                "named only by `isRagged`",
                "also an operation's operand",
            ));
        }
        if !matches!(o.dtype, "CUDNN_DATA_INT32" | "CUDNN_DATA_INT64") || o.is_virtual || o.by_value
        {
            return Err(field_err(
                off,
                "ragged offsets",
                "a bound INT32 or INT64 input",
                o.dtype,
            ));
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

fn written_by_node(t: &Tensors, name: &str) -> bool {
    t.written.contains(name)
}

fn role(is_output: bool) -> &'static str {
    if is_output { "an output" } else { "an input" }
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
