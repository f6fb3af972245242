//! Which inputs of a loaded plan the GPU uses as addresses or bounds: the
//! page tables (a paged KV cache), the ragged offsets (a packed THD
//! attention: the tensors another names as its `isRagged`) and the
//! sequence lengths, with the extent
//! each length bounds, recovered from the plan JSON alone (a loaded plan
//! has no graph to ask).
//!
//! A length's extent is the smallest over the nodes that use it as a bound:
//! the SDPA operations (`seqLenQ*` bounds the sequence dim of Q, O, dQ,
//! dO and the statistics ([`Q_BOUND`]), `seqLenKV*` that of K, V, dK and dV, or, paged, the pages a row of
//! each page table covers), the band mask (its scores' rows / columns), the
//! matmul overrides (`mOverride` A's and C's rows, `nOverride` B's and C's
//! columns, `kOverride` A's columns and B's rows) and the paged cache load
//! (its output's sequence dim and the pages a table row covers). Lengths
//! and page tables must also cover the attention's batch
//! ([`check_batches`]). In an attention plan, every other i32
//! `[B, 1, 1, 1]` input is treated as lengths too (conservatively): bounded
//! by the smaller of the last two dims of the 4-d tensors a node reads it
//! with, else by the smallest sequence-like dim of the plan.

use std::collections::BTreeMap;

use super::Walk;
use super::schema::SOFTMAX;
use crate::error::{Error, Result};
use crate::graph::guard::InputGuard;

const SDPA_FWD: &str = "CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR";
const SDPA_BWD: &str = "CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR";
const BAND: &str = "CUDNN_BACKEND_OPERATION_DIAGONAL_BAND_MASK_DESCRIPTOR";
const PAGED_LOAD: &str = "CUDNN_BACKEND_OPERATION_PAGED_CACHE_LOAD_DESCRIPTOR";
const MATMUL: &str = "CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR";
/// Fields whose tensor's values are plain data (a dropout seed or offset,
/// an RNG's, a softmax scale): an i32 `[1, 1, 1, 1]` read only through
/// these is not taken for lengths.
const DATA_FIELDS: &[&str] = &[
    "dropoutSeed",
    "dropoutOffset",
    "seedTensor",
    "offset",
    "scale",
    "scaleDesc",
];
const Q_LEN: &[&str] = &["seqLenQ", "seqLenQDesc"];
/// The tensors of an SDPA operation whose sequence dim (dim 2) the query
/// lengths index: Q, O, their gradients and the statistics `[B, H, S_q, 1]`
/// (set directly, or through the forward's SOFTMAX sub-descriptor: its
/// statistics, row max and sum of exponentials).
pub(super) const Q_BOUND: &[&str] = &[
    "Q",
    "qDesc",
    "O",
    "oDesc",
    "dQDesc",
    "dODesc",
    "stats",
    "statsDesc",
    "softmax.statsDesc",
    "softmax.maxDesc",
    "softmax.sumExpDesc",
];
const KV_LEN: &[&str] = &["seqLenKV", "seqLenKVDesc"];

/// `dims` of a per-sequence length tensor: `[B, 1, 1, 1]`.
fn len_shaped(dims: &[i64]) -> bool {
    dims.len() == 4 && dims.get(1..) == Some(&[1, 1, 1][..])
}

/// Every per-sequence input of an attention (sequence lengths, page
/// tables) covers the batch of the tensors it serves: cuDNN reads one
/// length or one table row per sequence, so a plan declaring fewer would
/// make it read past the bound buffer (and use what lies there as a bound
/// or a page), whatever the bound values.
pub(super) fn check_batches(w: &Walk) -> Result<()> {
    let dims = |n: &str| {
        n.parse::<i64>()
            .ok()
            .and_then(|u| w.tensors.get(&u))
            .map(|t| &t.dims[..])
    };
    for (op, fields) in &w.nodes {
        let (anchor, per_seq): (&[&str], &[&str]) = match op.as_str() {
            SDPA_FWD | SDPA_BWD => (
                &["Q", "qDesc"],
                &[
                    "seqLenQ",
                    "seqLenQDesc",
                    "seqLenKV",
                    "seqLenKVDesc",
                    "pageTableK",
                    "pageTableV",
                ],
            ),
            BAND => (&["X"], &["seqLenQDesc", "seqLenKVDesc"]),
            PAGED_LOAD => (&["Y"], &["pageTable", "sequence"]),
            _ => continue,
        };
        let Some(batch) = fields
            .iter()
            .find(|(k, _)| anchor.contains(&k.as_str()))
            .and_then(|(_, n)| dims(n)?.first().copied())
        else {
            continue;
        };
        for (k, n) in fields {
            if !per_seq.contains(&k.as_str()) {
                continue;
            }
            // A by-value scalar (the full lengths of a mask without
            // padding) lives in the plan, not in device memory: nothing is
            // read past a buffer.
            let by_value = n
                .parse::<i64>()
                .ok()
                .and_then(|u| w.tensors.get(&u))
                .is_some_and(|t| t.by_value);
            if by_value {
                continue;
            }
            let got = dims(n).and_then(|d| d.first().copied());
            // The band mask takes a one-entry length tensor for a mask over
            // full, equal lengths (the crate and NVIDIA's frontend both
            // build it so when there is no padding) and broadcasts it; the
            // SDPA and paged-load nodes index theirs by sequence.
            let broadcast = op.as_str() == BAND && got == Some(1);
            if !broadcast && got.is_none_or(|g| g < batch) {
                return Err(Error::mismatch(
                    format!(
                        "plan JSON {op} `{k}` (tensor uid {n}): its batch dim (one entry per \
                         sequence of the attention's batch, at least)"
                    ),
                    batch,
                    got.map_or_else(|| "none".to_string(), |g| g.to_string()),
                ));
            }
        }
    }
    Ok(())
}

/// The sequence extent of a paged cache load's output `Y`, which holds the
/// sequence as `[B, H, S, D]` or transposed as `[B, H, D, S]` (the composite
/// attention loads Kᵀ so); transposed when its stride 2 is 1, as NVIDIA's
/// frontend (and cuDNN) decide. `None` unless 4-d.
pub(super) fn paged_y_seq(dims: &[i64], strides: &[i64]) -> Option<i64> {
    if dims.len() != 4 || strides.len() != 4 {
        return None;
    }
    Some(if strides[2] == 1 { dims[3] } else { dims[2] })
}

/// Every paged cache load's `Y` is 4-d, and its head-dim axis (by its
/// strides, see [`paged_y_seq`]) is the container's `D`: the sequence
/// extent its lengths get is then the other axis. (cuDNN 9.10 and 9.28
/// refuse such a plan at finalize too; this does not rely on it.)
pub(super) fn check_paged_loads(w: &Walk) -> Result<()> {
    let tensor = |n: &str| n.parse::<i64>().ok().and_then(|u| w.tensors.get(&u));
    for (op, fields) in &w.nodes {
        if op.as_str() != PAGED_LOAD {
            continue;
        }
        let get = |k: &str| {
            fields
                .iter()
                .find(|(f, _)| f == k)
                .and_then(|(_, n)| tensor(n))
        };
        let (Some(y), Some(c)) = (get("Y"), get("container")) else {
            // A node without them is refused by cuDNN (nothing is bound).
            continue;
        };
        let d = c.dims.get(3).copied();
        let y_d = (y.dims.len() == 4 && y.strides.len() == 4).then(|| {
            if y.strides[2] == 1 {
                y.dims[2]
            } else {
                y.dims[3]
            }
        });
        if y_d.is_none() || y_d != d {
            return Err(Error::mismatch(
                format!(
                    "plan JSON {PAGED_LOAD} `Y` (dims {:?}, strides {:?}): its head dim (4-d; \
                     dim 2 where stride 2 is 1, else dim 3) must be the container's",
                    y.dims, y.strides
                ),
                d.map_or_else(|| "a 4-d container".to_string(), |d| d.to_string()),
                y_d.map_or_else(|| "none".to_string(), |d| d.to_string()),
            ));
        }
    }
    Ok(())
}

/// The smallest query and key extents (dims 2 and 3) over the 4-d tensors
/// of node `i`'s subgraph (the scores, a bias, masks: `[B or 1, H or 1,
/// S_q, S_kv]`); axes of extent 1 are broadcasts (ALiBi slopes, sinks) and
/// bound nothing. A bias indexed by a length past its last dim would be
/// read out of bounds (issue 31), so the lengths of the operation are
/// bounded by these too.
pub(super) fn subgraph_extents(w: &Walk, i: usize) -> (Option<i64>, Option<i64>) {
    let Some(uids) = w.subgraphs.get(&i) else {
        return (None, None);
    };
    let dims: Vec<&[i64]> = uids
        .iter()
        .filter_map(|u| w.tensors.get(u))
        .map(|t| &t.dims[..])
        .filter(|d| d.len() == 4)
        .collect();
    let least = |axis: usize| dims.iter().map(|d| d[axis]).filter(|&x| x > 1).min();
    (least(2), least(3))
}

/// The page tables and sequence lengths of the walked plan, by UID.
pub(super) fn guarded(w: &Walk) -> Vec<(i64, InputGuard)> {
    let uid = |n: &str| n.parse::<i64>().ok();
    let dims = |n: &str| uid(n).and_then(|u| w.tensors.get(&u)).map(|t| &t.dims[..]);
    let dim = |n: Option<&str>, axis_from_end: usize| {
        let d = dims(n?)?;
        d.get(d.len().checked_sub(axis_from_end)?).copied()
    };
    let page_tables: Vec<i64> = w.page_tables.iter().filter_map(|n| uid(n)).collect();
    // Ragged offsets (a packed THD attention): the tensors some tensor
    // names as its `isRagged` offsets. Also `[B + 1, 1, 1, 1]` i32, so
    // kept out of the lengths below.
    let ragged: Vec<i64> = {
        let mut r: Vec<i64> = w.tensors.values().filter_map(|t| t.ragged).collect();
        r.sort_unstable();
        r.dedup();
        r
    };
    let is_page_table = |u: i64| page_tables.contains(&u) || ragged.contains(&u);

    // Extents from the nodes that use a tensor as a bound (`keyed`), and
    // from other nodes that read a length-shaped i32 input (`loose`).
    let mut keyed: BTreeMap<i64, Option<i64>> = BTreeMap::new();
    let mut loose: BTreeMap<i64, Option<i64>> = BTreeMap::new();
    let merge = |m: &mut BTreeMap<i64, Option<i64>>, u: i64, e: Option<i64>| {
        let slot = m.entry(u).or_insert(e);
        *slot = match (*slot, e) {
            (Some(a), Some(b)) => Some(a.min(b)),
            // An unknown extent stays unknown (the fallback bounds it).
            _ => None,
        };
    };
    // Tensors some node reads through a field that is not plain data.
    let mut not_data: Vec<i64> = Vec::new();
    let mut matmuls = 0usize;
    let mut attention = false;
    for (node_index, (op, fields)) in w.nodes.iter().enumerate() {
        let get = |keys: &[&str]| {
            fields
                .iter()
                .find(|(k, _)| keys.contains(&k.as_str()))
                .map(|(_, n)| n.as_str())
        };
        let mut bound: Vec<(&[&str], Option<i64>)> = Vec::new();
        match op.as_str() {
            SDPA_FWD | SDPA_BWD => {
                attention = true;
                // The smallest sequence dim over every tensor a length
                // bounds (Q, O and their gradients; K, V and theirs): a
                // plan whose V (or dO) is shorter than K (or Q) must not
                // let a length reach past the shorter one.
                let seq = |names: &[&str]| names.iter().filter_map(|n| dim(get(&[*n]), 2)).min();
                let q = seq(Q_BOUND);
                // Paged: the pages a table row covers, for K and for V.
                let paged = |pt: &str, c: &str| {
                    let p = get(&[pt])?;
                    dim(Some(p), 2)?.checked_mul(dim(get(&[c]), 2)?)
                };
                let kv = if get(&["pageTableK"]).is_some() || get(&["pageTableV"]).is_some() {
                    // Both tables must be known; a missing one leaves the
                    // extent to the fallback.
                    paged("pageTableK", "K")
                        .zip(paged("pageTableV", "V"))
                        .map(|(a, b)| a.min(b))
                } else {
                    seq(&["K", "kDesc", "V", "vDesc", "dKDesc", "dVDesc"])
                };
                // And by the tensors of its score subgraph (a bias).
                let (sub_q, sub_kv) = subgraph_extents(w, node_index);
                let least = |a: Option<i64>, b: Option<i64>| match (a, b) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                bound.push((Q_LEN, least(q, sub_q)));
                bound.push((KV_LEN, least(kv, sub_kv)));
            }
            BAND => {
                attention = true;
                bound.push((Q_LEN, dim(get(&["X"]), 2)));
                bound.push((KV_LEN, dim(get(&["X"]), 1)));
            }
            PAGED_LOAD => {
                attention = true;
                // Y's sequence dim, and the pages a table row covers (a
                // longer sequence would read table entries past its row).
                let covered = dim(get(&["pageTable"]), 2)
                    .zip(dim(get(&["container"]), 2))
                    .and_then(|(p, b)| p.checked_mul(b));
                // Y's sequence axis ([`paged_y_seq`]; the smaller of its
                // last two dims where its strides do not say, which
                // [`check_paged_loads`] refuses anyway).
                let y = get(&["Y"])
                    .and_then(uid)
                    .and_then(|u| w.tensors.get(&u))
                    .and_then(|t| paged_y_seq(&t.dims, &t.strides))
                    .or_else(|| {
                        let (s, last) = (dim(get(&["Y"]), 2), dim(get(&["Y"]), 1));
                        s.zip(last).map(|(a, b)| a.min(b)).or(s).or(last)
                    });
                bound.push((
                    &["sequence"],
                    match (y, covered) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    },
                ));
            }
            MATMUL => {
                matmuls = matmuls.saturating_add(1);
                // Each override bounds every matrix with that dim: M A's
                // and C's rows, N B's and C's columns, K A's columns and
                // B's rows (the smallest, should they differ).
                let least = |uses: &[(&str, usize)]| {
                    uses.iter()
                        .filter_map(|&(f, axis)| dim(get(&[f]), axis))
                        .min()
                };
                bound.push((&["mOverride"], least(&[("matA", 2), ("matC", 2)])));
                bound.push((&["nOverride"], least(&[("matB", 1), ("matC", 1)])));
                bound.push((&["kOverride"], least(&[("matA", 1), ("matB", 2)])));
            }
            SOFTMAX => attention = true,
            _ => {}
        }
        not_data.extend(
            fields
                .iter()
                .filter(|(k, _)| !DATA_FIELDS.contains(&k.as_str()))
                .filter_map(|(_, n)| uid(n)),
        );
        let mut keyed_here = Vec::new();
        for (keys, e) in bound {
            for (k, n) in fields {
                if keys.contains(&k.as_str())
                    && let Some(u) = uid(n)
                {
                    merge(&mut keyed, u, e);
                    keyed_here.push(u);
                }
            }
        }
        // Another node reading a length-shaped input beside 4-d tensors:
        // bounded by the smaller of their last two dims.
        let beside = fields
            .iter()
            .filter_map(|(_, n)| dims(n))
            .filter(|d| d.len() == 4 && !len_shaped(d))
            .filter_map(|d| Some(*d.get(2)?.min(d.get(3)?)))
            .min();
        for (_, n) in fields {
            if let Some(u) = uid(n)
                && !keyed_here.contains(&u)
                && dims(n).is_some_and(len_shaped)
            {
                merge(&mut loose, u, beside);
            }
        }
    }
    // The composite attention: two matmuls (or more) around a softmax.
    attention |= matmuls >= 2;

    // The smallest sequence-like dim of the plan: the last two dims of every
    // 4-d tensor that is neither a length nor a page table.
    let fallback = w
        .tensors
        .iter()
        .filter(|(u, t)| t.dims.len() == 4 && !len_shaped(&t.dims) && !is_page_table(**u))
        .filter_map(|(_, t)| Some(*t.dims.get(2)?.min(t.dims.get(3)?)))
        .min()
        .unwrap_or(0);
    let mut lengths: BTreeMap<i64, i64> = BTreeMap::new();
    for (&u, &e) in &keyed {
        lengths.insert(u, e.unwrap_or(fallback).max(0));
    }
    if attention {
        for (&u, t) in &w.tensors {
            let candidate = t.dtype == "CUDNN_DATA_INT32"
                && !t.is_virtual
                && !t.by_value
                && len_shaped(&t.dims)
                && !w.written.contains(&u.to_string())
                // Read only as a seed, an offset or a scale: data.
                && (not_data.contains(&u) || !w.read.contains(&u.to_string()));
            if candidate && !lengths.contains_key(&u) {
                let e = loose.get(&u).copied().flatten().unwrap_or(fallback);
                lengths.insert(u, e.max(0));
            }
        }
    }
    let mut out: Vec<(i64, InputGuard)> = page_tables
        .iter()
        .map(|&u| (u, InputGuard::PageTable))
        .collect();
    out.extend(
        ragged
            .iter()
            .filter(|u| !page_tables.contains(u))
            .map(|&u| (u, InputGuard::RaggedOffsets)),
    );
    for (u, extent) in lengths {
        if !is_page_table(u) {
            out.push((u, InputGuard::SeqLengths { extent }));
        }
    }
    out.sort_unstable_by_key(|&(u, _)| u);
    out
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::*;
    use crate::graph::plan_json::JsonTensor;

    /// A packed (row-major) tensor.
    fn t(dtype: &'static str, dims: &[i64]) -> JsonTensor {
        let mut strides = vec![1; dims.len()];
        for i in (0..dims.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * dims[i + 1];
        }
        ts(dtype, dims, &strides)
    }

    fn ts(dtype: &'static str, dims: &[i64], strides: &[i64]) -> JsonTensor {
        JsonTensor {
            dtype,
            dims: dims.to_vec(),
            strides: strides.to_vec(),
            is_virtual: false,
            by_value: false,
            ragged: None,
        }
    }

    const H: &str = "CUDNN_DATA_HALF";
    const I: &str = "CUDNN_DATA_INT32";
    const PW: &str = "CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR";

    fn walk(tensors: Vec<(i64, JsonTensor)>, nodes: &[(&str, &[(&str, i64)])]) -> Walk {
        Walk {
            tensors: tensors.into_iter().collect::<HashMap<_, _>>(),
            written: HashSet::new(),
            read: HashSet::new(),
            page_tables: HashSet::new(),
            flow: Vec::new(),
            provided: HashSet::new(),
            subgraphs: HashMap::new(),
            nodes: nodes
                .iter()
                .map(|(op, f)| {
                    let f = f.iter().map(|(k, u)| (k.to_string(), u.to_string()));
                    (op.to_string(), f.collect())
                })
                .collect(),
        }
    }

    fn len(extent: i64) -> InputGuard {
        InputGuard::SeqLengths { extent }
    }

    #[test]
    fn unit_composite_lengths_from_matmul_overrides() {
        // S = Q·Kᵀ with M / N overridden, O = P·V with M / K overridden.
        let w = walk(
            vec![
                (1, t(H, &[2, 4, 128, 64])),
                (2, t(H, &[2, 4, 64, 256])),
                (3, t(H, &[2, 4, 256, 64])),
                (4, t(H, &[2, 4, 128, 256])),
                (10, t(I, &[2, 1, 1, 1])),
                (11, t(I, &[2, 1, 1, 1])),
            ],
            &[
                (
                    MATMUL,
                    &[
                        ("matA", 1),
                        ("matB", 2),
                        ("mOverride", 10),
                        ("nOverride", 11),
                    ],
                ),
                // The padding mask compares the lengths with indices: not a
                // bound, so it does not lower the matmuls' extents.
                (PW, &[("X", 4), ("B", 10)]),
                (
                    MATMUL,
                    &[
                        ("matA", 4),
                        ("matB", 3),
                        ("mOverride", 10),
                        ("kOverride", 11),
                    ],
                ),
            ],
        );
        assert_eq!(guarded(&w), vec![(10, len(128)), (11, len(256))]);
    }

    #[test]
    fn unit_unidentified_lengths_are_bounded_conservatively() {
        // Two matmuls (an attention); 12 is read beside scores [.., 128, 256]
        // (the smaller bounds it), 13 by nothing 4-d (the plan's smallest
        // sequence-like dim, 64, bounds it).
        let w = walk(
            vec![
                (1, t(H, &[2, 4, 128, 64])),
                (4, t(H, &[2, 4, 128, 256])),
                (12, t(I, &[2, 1, 1, 1])),
                (13, t(I, &[2, 1, 1, 1])),
            ],
            &[
                (MATMUL, &[("matA", 1)]),
                (MATMUL, &[("matA", 4)]),
                (PW, &[("X", 4), ("B", 12)]),
                (PW, &[("X", 13)]),
            ],
        );
        assert_eq!(guarded(&w), vec![(12, len(128)), (13, len(64))]);
        // Not an attention (one matmul, no override): i32 inputs are data.
        let w = walk(
            vec![(1, t(H, &[2, 4, 128, 64])), (12, t(I, &[2, 1, 1, 1]))],
            &[(MATMUL, &[("matA", 1)]), (PW, &[("X", 1), ("B", 12)])],
        );
        assert_eq!(guarded(&w), vec![]);
    }

    #[test]
    fn unit_sdpa_node_lengths_and_page_tables() {
        // Paged: K is a container of 64-token pages, 4 pages per sequence;
        // a page table shaped like lengths stays a page table.
        let mut w = walk(
            vec![
                (1, t(H, &[2, 4, 1, 64])),
                (2, t(H, &[80, 4, 64, 64])),
                (3, t(H, &[80, 4, 64, 64])),
                (5, t(I, &[2, 1, 4, 1])),
                (6, t(I, &[2, 1, 1, 1])),
                (10, t(I, &[2, 1, 1, 1])),
                (11, t(I, &[2, 1, 1, 1])),
            ],
            &[(
                SDPA_FWD,
                &[
                    ("Q", 1),
                    ("K", 2),
                    ("V", 3),
                    ("seqLenQ", 10),
                    ("seqLenKV", 11),
                    ("pageTableK", 5),
                    ("pageTableV", 6),
                ],
            )],
        );
        w.page_tables = ["5", "6"].into_iter().map(String::from).collect();
        assert_eq!(
            guarded(&w),
            vec![
                (5, InputGuard::PageTable),
                (6, InputGuard::PageTable),
                (10, len(1)),
                // K's table covers 4 pages of 64, V's (6) only 1: the
                // smaller bounds the key lengths.
                (11, len(64))
            ]
        );
        assert!(check_batches(&w).is_ok());
    }

    #[test]
    fn unit_paged_sdpa_lengths_bounded_by_its_subgraph_bias() {
        // 100 keys in 7 pages of 16 (112 covered); the score subgraph adds a
        // bias [1, 4, 1, 100] (uid 30) to the scores [2, 4, 1, 100] (31):
        // key lengths stop at 100, not at the page coverage. ALiBi-like
        // slopes [1, 4, 1, 1] (32) are broadcasts and bound nothing.
        let mut w = walk(
            vec![
                (1, t(H, &[2, 4, 1, 64])),
                (2, t(H, &[15, 4, 16, 64])),
                (3, t(H, &[15, 4, 16, 64])),
                (5, t(I, &[2, 1, 7, 1])),
                (6, t(I, &[2, 1, 7, 1])),
                (10, t(I, &[2, 1, 1, 1])),
                (11, t(I, &[2, 1, 1, 1])),
                (30, t(H, &[1, 4, 1, 100])),
                (31, t("CUDNN_DATA_FLOAT", &[2, 4, 1, 100])),
                (32, t("CUDNN_DATA_FLOAT", &[1, 4, 1, 1])),
            ],
            &[(
                SDPA_FWD,
                &[
                    ("Q", 1),
                    ("K", 2),
                    ("V", 3),
                    ("seqLenQ", 10),
                    ("seqLenKV", 11),
                    ("pageTableK", 5),
                    ("pageTableV", 6),
                ],
            )],
        );
        w.page_tables = ["5", "6"].into_iter().map(String::from).collect();
        let lens = |w: &Walk| {
            guarded(w)
                .into_iter()
                .filter(|(_, g)| matches!(g, InputGuard::SeqLengths { .. }))
                .collect::<Vec<_>>()
        };
        // Without the subgraph: the coverage, 7 x 16.
        assert_eq!(lens(&w), vec![(10, len(1)), (11, len(112))]);
        w.subgraphs.insert(0, vec![30, 31, 32]);
        assert_eq!(lens(&w), vec![(10, len(1)), (11, len(100))]);
    }

    /// Review finding 4: the query lengths index the statistics
    /// (`[B, H, S_q, 1]`) too, set directly (`stats`, `statsDesc`) or
    /// through the SOFTMAX sub-descriptor (its statistics, max, sum of
    /// exponentials: fields `softmax.*` of the operation): a shorter one
    /// bounds them (hand values).
    #[test]
    fn unit_sdpa_q_lengths_bounded_by_statistics() {
        for (op, field) in [
            (SDPA_FWD, "stats"),
            (SDPA_BWD, "statsDesc"),
            (SDPA_FWD, "softmax.statsDesc"),
            (SDPA_FWD, "softmax.maxDesc"),
            (SDPA_FWD, "softmax.sumExpDesc"),
        ] {
            let (q, k, v, o, lq, lk) = if op == SDPA_FWD {
                ("Q", "K", "V", "O", "seqLenQ", "seqLenKV")
            } else {
                (
                    "qDesc",
                    "kDesc",
                    "vDesc",
                    "oDesc",
                    "seqLenQDesc",
                    "seqLenKVDesc",
                )
            };
            let w = walk(
                vec![
                    (1, t(H, &[2, 4, 128, 64])),
                    (2, t(H, &[2, 4, 256, 64])),
                    (3, t(H, &[2, 4, 256, 64])),
                    (4, t(H, &[2, 4, 128, 64])),
                    (5, t("CUDNN_DATA_FLOAT", &[2, 4, 40, 1])),
                    (10, t(I, &[2, 1, 1, 1])),
                    (11, t(I, &[2, 1, 1, 1])),
                ],
                &[(
                    op,
                    &[
                        (q, 1),
                        (k, 2),
                        (v, 3),
                        (o, 4),
                        (field, 5),
                        (lq, 10),
                        (lk, 11),
                    ],
                )],
            );
            assert_eq!(
                guarded(&w),
                vec![(10, len(40)), (11, len(256))],
                "{op} {field}"
            );
        }
    }

    #[test]
    fn unit_sdpa_extent_is_the_smallest_over_q_o_k_v() {
        // V (3) is shorter than K (2), O (4) shorter than Q (1): the
        // lengths must not reach past the shorter tensors.
        let w = walk(
            vec![
                (1, t(H, &[2, 4, 128, 64])),
                (2, t(H, &[2, 4, 256, 64])),
                (3, t(H, &[2, 4, 96, 64])),
                (4, t(H, &[2, 4, 100, 64])),
                (10, t(I, &[2, 1, 1, 1])),
                (11, t(I, &[2, 1, 1, 1])),
            ],
            &[(
                SDPA_FWD,
                &[
                    ("Q", 1),
                    ("K", 2),
                    ("V", 3),
                    ("O", 4),
                    ("seqLenQ", 10),
                    ("seqLenKV", 11),
                ],
            )],
        );
        assert_eq!(guarded(&w), vec![(10, len(100)), (11, len(96))]);
        // A matmul's K override bounds B's rows too.
        let w = walk(
            vec![
                (1, t(H, &[2, 4, 128, 64])),
                (2, t(H, &[2, 4, 32, 256])),
                (5, t(H, &[2, 4, 128, 256])),
                (12, t(I, &[2, 1, 1, 1])),
            ],
            &[(
                MATMUL,
                &[("matA", 1), ("matB", 2), ("matC", 5), ("kOverride", 12)],
            )],
        );
        assert_eq!(guarded(&w), vec![(12, len(32))]);
    }

    #[test]
    fn unit_dropout_seed_is_data() {
        // An i32 `[1, 1, 1, 1]` dropout seed and offset (a frontend may
        // declare them so) are data; a length beside them is still one.
        let mut w = walk(
            vec![
                (1, t(H, &[1, 4, 64, 64])),
                (2, t(H, &[1, 4, 64, 64])),
                (7, t(I, &[1, 1, 1, 1])),
                (8, t(I, &[1, 1, 1, 1])),
                (11, t(I, &[1, 1, 1, 1])),
            ],
            &[(
                SDPA_FWD,
                &[
                    ("Q", 1),
                    ("K", 2),
                    ("dropoutSeed", 7),
                    ("dropoutOffset", 8),
                    ("seqLenKV", 11),
                ],
            )],
        );
        w.read = ["1", "2", "7", "8", "11"]
            .into_iter()
            .map(String::from)
            .collect();
        assert_eq!(guarded(&w), vec![(11, len(64))]);
    }

    #[test]
    fn unit_paged_load_extent_is_the_pages_a_row_covers() {
        // Y claims 512 rows, the table covers 2 pages of 64: 128 bounds.
        let w = walk(
            vec![
                (1, t(H, &[80, 4, 64, 64])),
                (2, t(I, &[2, 1, 2, 1])),
                (3, t(H, &[2, 4, 512, 64])),
                (10, t(I, &[2, 1, 1, 1])),
            ],
            &[(
                PAGED_LOAD,
                &[
                    ("container", 1),
                    ("pageTable", 2),
                    ("sequence", 10),
                    ("Y", 3),
                ],
            )],
        );
        let mut w = w;
        w.page_tables = ["2"].into_iter().map(String::from).collect();
        assert_eq!(
            guarded(&w),
            vec![(2, InputGuard::PageTable), (10, len(128))]
        );
    }

    #[test]
    fn unit_paged_load_of_a_transposed_y() {
        // The composite attention loads Kᵀ: Y [B, H, D = 128, S = 1024]
        // (stride 2 is 1) from pages of 64, 16 to a row: the sequence axis
        // is Y's last (1024), not its D (128); V's load as a packed
        // [B, H, S, D] agrees. A Y whose head-dim axis (by its strides) is
        // not the container's D is refused: the dims alone would not say
        // which axis cuDNN walks.
        let load = |y: JsonTensor| {
            let mut w = walk(
                vec![
                    (1, t(H, &[80, 8, 64, 128])),
                    (2, t(I, &[4, 1, 16, 1])),
                    (3, y),
                    (10, t(I, &[4, 1, 1, 1])),
                ],
                &[(
                    PAGED_LOAD,
                    &[
                        ("container", 1),
                        ("pageTable", 2),
                        ("sequence", 10),
                        ("Y", 3),
                    ],
                )],
            );
            w.page_tables = ["2"].into_iter().map(String::from).collect();
            w
        };
        let k_t = ts(H, &[4, 8, 128, 1024], &[1 << 20, 1 << 17, 1, 128]);
        for (y, want) in [(k_t, 1024), (t(H, &[4, 8, 1024, 128]), 1024)] {
            let w = load(y);
            assert!(check_paged_loads(&w).is_ok());
            assert_eq!(
                guarded(&w),
                vec![(2, InputGuard::PageTable), (10, len(want))]
            );
        }
        // Kᵀ's dims with packed strides (D would be dim 3 = 1024), a packed
        // Y with the wrong D, a 3-d Y: refused, naming the load.
        for y in [
            t(H, &[4, 8, 128, 1024]),
            t(H, &[4, 8, 1024, 96]),
            t(H, &[32, 1024, 128]),
        ] {
            let e = check_paged_loads(&load(y)).unwrap_err();
            assert!(matches!(e, Error::Mismatch { .. }), "{e}");
            assert!(e.to_string().contains("PAGED_CACHE_LOAD"), "{e}");
        }
    }

    #[test]
    fn unit_per_sequence_inputs_cover_the_batch() {
        // Q has 4 sequences; lengths of 2 would be read past their buffer.
        let fwd = |len_b: i64, pt_b: i64| {
            walk(
                vec![
                    (1, t(H, &[4, 4, 64, 64])),
                    (2, t(H, &[80, 4, 64, 64])),
                    (5, t(I, &[pt_b, 1, 4, 1])),
                    (10, t(I, &[len_b, 1, 1, 1])),
                ],
                &[(
                    SDPA_FWD,
                    &[("Q", 1), ("K", 2), ("seqLenKV", 10), ("pageTableK", 5)],
                )],
            )
        };
        assert!(check_batches(&fwd(4, 4)).is_ok());
        let e = check_batches(&fwd(2, 4)).unwrap_err().to_string();
        assert!(e.contains("seqLenKV") && e.contains('4'), "{e}");
        let e = check_batches(&fwd(4, 1)).unwrap_err().to_string();
        assert!(e.contains("pageTableK"), "{e}");
        let band = walk(
            vec![(1, t(H, &[4, 4, 64, 64])), (10, t(I, &[1, 1, 1, 1]))],
            &[(BAND, &[("X", 1), ("seqLenKVDesc", 10)])],
        );
        // A one-entry length broadcast by the band mask is accepted; two
        // entries for four sequences are not.
        assert!(check_batches(&band).is_ok());
        let band2 = walk(
            vec![(1, t(H, &[4, 4, 64, 64])), (10, t(I, &[2, 1, 1, 1]))],
            &[(BAND, &[("X", 1), ("seqLenKVDesc", 10)])],
        );
        assert!(check_batches(&band2).is_err());
        // The same one-entry length passed by value (a mask over full
        // lengths) is a host scalar in the plan: accepted.
        let mut scalar = t(I, &[1, 1, 1, 1]);
        scalar.by_value = true;
        let band = walk(
            vec![(1, t(H, &[4, 4, 64, 64])), (10, scalar)],
            &[(BAND, &[("X", 1), ("seqLenKVDesc", 10)])],
        );
        assert!(check_batches(&band).is_ok());
    }

    #[test]
    fn unit_ragged_offsets_are_not_lengths() {
        // Packed THD: Q and O name offsets 20 and 21 (`[B + 1, 1, 1, 1]`
        // i32, length-shaped); they are ragged offsets, not lengths.
        let mut q = t(H, &[2, 4, 64, 64]);
        q.ragged = Some(20);
        let mut o = t(H, &[2, 4, 64, 64]);
        o.ragged = Some(21);
        let w = walk(
            vec![
                (1, q),
                (2, t(H, &[2, 4, 64, 64])),
                (3, o),
                (10, t(I, &[2, 1, 1, 1])),
                (11, t(I, &[2, 1, 1, 1])),
                (20, t(I, &[3, 1, 1, 1])),
                (21, t(I, &[3, 1, 1, 1])),
            ],
            &[(
                SDPA_FWD,
                &[
                    ("Q", 1),
                    ("K", 2),
                    ("O", 3),
                    ("seqLenQ", 10),
                    ("seqLenKV", 11),
                ],
            )],
        );
        assert_eq!(
            guarded(&w),
            vec![
                (10, len(64)),
                (11, len(64)),
                (20, InputGuard::RaggedOffsets),
                (21, InputGuard::RaggedOffsets)
            ]
        );
    }
}
