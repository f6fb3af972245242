//! Checks of an attention plan's compiled kernels against its graph.
//!
//! cuDNN keeps a runtime-compiled kernel's parameter block as the plan file
//! has it, while it sizes the workspace from the file's operation graph: a
//! block taken from a larger attention (more rows, heads or batches) would
//! make the kernel walk past the bound tensors and the workspace. The SDPA
//! kernels keep their shapes in an attention descriptor at the start of the
//! block, `[B, H_q, H_k, H_v, S_q, S_kv, D_qk, D_v]` as u32 (measured on
//! cuDNN 9.28's sm80, sm90 and sm100 forward and backward kernels; `S_kv`
//! of a paged cache is the keys a page-table row covers, or the score
//! subgraph's key extent where smaller, exactly): it must be the
//! shapes of the plan's one SDPA operation; in a composite attention (no
//! SDPA operation: cuDNN's fused kernels serve the matmul-softmax-matmul
//! pattern) Q, K and V must be tensors of the graph that the plan binds.
//! The same kernels patch cuDNN's
//! own workspace buffers by uids in no graph; those of the backward are
//! accepted only in a plan with an SDPA backward operation.

use super::{Walk, bad};
use crate::error::{Error, Result};

const SDPA_FWD: &str = "CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR";
const SDPA_BWD: &str = "CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR";
const PAGED_LOAD: &str = "CUDNN_BACKEND_OPERATION_PAGED_CACHE_LOAD_DESCRIPTOR";

/// Uids the SDPA backward operation's kernels patch with its workspace
/// buffers (the f32 dQ accumulator and the row sums; measured in cuDNN
/// 9.28's sm80, sm90 and sm100 plans).
const BWD_BUFFERS: [i64; 2] = [2_701_148_414_642_200_600, 5_996_311_671_000_428_175];
/// The same with grouped-query attention (the f32 dK / dV accumulators).
const BWD_GQA_BUFFERS: [i64; 2] = [-12_443_802_042_839_261, 3_759_583_368_913_738_089];
/// Uids the forward kernels of a decode step (one query row) patch with
/// their own workspace buffers, the first three pointers of the parameter
/// block: with the softmax's row max and sum of exponentials as outputs,
/// and with a paged KV cache (measured in cuDNN 9.28's sm80, sm89, sm90
/// and sm100 plans of the SDPA operation and of the composite attention,
/// and in cuDNN 9.19's sm80 and sm90 plans of the composite).
const FWD_DECODE_BUFFERS: [i64; 3] = [
    9_196_583_092_661_000_136,
    6_358_000_813_200_163_156,
    -8_064_203_720_865_845_221,
];
const SOFTMAX: &str = "CUDNN_BACKEND_OPERATION_SOFTMAX_DESCRIPTOR";
const REDUCTION: &str = "CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR";
/// The uid the SDPA backward operation's kernels patch with their dBias
/// accumulator (measured in cuDNN 9.28's sm80, sm89, sm90 and sm100 plans
/// with dBias): accepted only in a backward that writes dBias.
const BWD_DBIAS_BUFFERS: [i64; 1] = [-5_069_943_406_638_448_333];

/// The dims of the tensor a node names under one of `keys`.
fn dims<'w>(w: &'w Walk, fields: &[(String, String)], keys: &[&str]) -> Option<&'w [i64]> {
    let (_, n) = fields.iter().find(|(k, _)| keys.contains(&k.as_str()))?;
    let uid = n.parse::<i64>().ok()?;
    w.tensors.get(&uid).map(|t| &t.dims[..])
}

/// The plan's SDPA operations: `(is_backward, fields)`.
fn sdpa_nodes(w: &Walk) -> Vec<(bool, &[(String, String)])> {
    w.nodes
        .iter()
        .filter_map(|(op, f)| match op.as_str() {
            SDPA_FWD => Some((false, &f[..])),
            SDPA_BWD => Some((true, &f[..])),
            _ => None,
        })
        .collect()
}

/// Whether an SDPA backward operation of the plan has no score subgraph in
/// the JSON.
pub(super) fn backward_without_subgraph(w: &Walk) -> bool {
    w.nodes
        .iter()
        .enumerate()
        .any(|(i, (op, _))| op == SDPA_BWD && !w.subgraphs.contains_key(&i))
}

/// Whether the plan has an SDPA backward operation.
pub(super) fn has_backward_op(w: &Walk) -> bool {
    sdpa_nodes(w).iter().any(|&(bwd, _)| bwd)
}

/// Whether kernel parameter `uid`, which names no tensor of the graph, is
/// one of a decode forward's own workspace buffers: only in a plan whose
/// attention kernels all have one query row, with an SDPA forward operation
/// of one query row, or a softmax operation or a reduction (the composite's
/// softmax, or its row max before cuDNN 9.21) over one row of scores per
/// head.
pub(super) fn forward_buffer(uid: i64, w: &Walk, headers: &[(String, [u32; 8])]) -> bool {
    // Every attention kernel of the plan works on one query row (S_q, the
    // header's fifth field)...
    FWD_DECODE_BUFFERS.contains(&uid)
        && !headers.is_empty()
        && headers.iter().all(|(_, h)| h[4] == 1)
        // ...and so does the graph.
        && w.nodes.iter().any(|(op, f)| {
            // One query row: Q's (the operation), or the scores' third
            // dim (the composite's softmax input; before cuDNN 9.21 its
            // row max's, a reduction).
            let rows = match op.as_str() {
                SDPA_FWD => dims(w, f, &["Q"]),
                SOFTMAX | REDUCTION => dims(w, f, &["X"]),
                _ => None,
            };
            rows.and_then(|d| d.get(2)) == Some(&1)
        })
}

/// Whether kernel parameter `uid`, which names no tensor of the graph, is
/// one of the SDPA backward's own workspace buffers in this plan: only with
/// an SDPA backward operation, the GQA ones only with fewer K or V heads.
pub(super) fn backward_buffer(uid: i64, w: &Walk) -> bool {
    if BWD_DBIAS_BUFFERS.contains(&uid) {
        // A backward that writes dBias to a bound tensor.
        return sdpa_nodes(w).iter().any(|&(bwd, f)| {
            bwd && f.iter().any(|(k, n)| {
                k == "dBiasDesc"
                    && n.parse::<i64>()
                        .ok()
                        .and_then(|u| w.tensors.get(&u))
                        .is_some_and(|t| !t.is_virtual)
            })
        });
    }
    let gqa = BWD_GQA_BUFFERS.contains(&uid);
    if !gqa && !BWD_BUFFERS.contains(&uid) {
        return false;
    }
    sdpa_nodes(w).iter().any(|&(bwd, f)| {
        let heads = |keys: &[&str]| dims(w, f, keys).and_then(|d| d.get(1).copied());
        let (q, k, v) = (
            heads(&["Q", "qDesc"]),
            heads(&["K", "kDesc"]),
            heads(&["V", "vDesc"]),
        );
        bwd && (!gqa || matches!((q, k, v), (Some(q), Some(k), Some(v)) if k < q || v < q))
    })
}

/// Every attention descriptor in the plan's kernels is the shapes of its one
/// SDPA operation.
pub(super) fn check_headers(w: &Walk, headers: &[(String, [u32; 8])]) -> Result<()> {
    let Some((path, _)) = headers.first() else {
        return Ok(());
    };
    let nodes = sdpa_nodes(w);
    let f = match nodes[..] {
        [(_, f)] => f,
        [] => return check_composite_headers(w, headers),
        _ => {
            return Err(bad(
                path,
                "must belong to the plan's one SDPA operation",
                format!("{} SDPA operations", nodes.len()),
            ));
        }
    };
    let d = |keys: &[&str]| dims(w, f, keys).filter(|d| d.len() == 4);
    let (Some(q), Some(k), Some(v)) = (d(&["Q", "qDesc"]), d(&["K", "kDesc"]), d(&["V", "vDesc"]))
    else {
        return Err(bad(
            path,
            "must belong to an SDPA operation with 4-d Q, K and V",
            "other",
        ));
    };
    // Paged: the keys a page-table row covers (pages x page size), for K
    // and for V; else the sequence dim of K and of V.
    let paged = dims(w, f, &["pageTableK"]).is_some() || dims(w, f, &["pageTableV"]).is_some();
    let seq = |table: &str, c: &[i64]| match dims(w, f, &[table]) {
        Some(t) => t.get(2).and_then(|p| p.checked_mul(c[2])),
        None => Some(c[2]),
    };
    let (sk, sv) = (seq("pageTableK", k), seq("pageTableV", v));
    // The score subgraph's tensors (a bias) bound the rows and keys too.
    let index = w
        .nodes
        .iter()
        .position(|(op, g)| (op == SDPA_FWD || op == SDPA_BWD) && std::ptr::eq(&g[..], f));
    let (sub_q, sub_kv) = index.map_or((None, None), |i| super::guards::subgraph_extents(w, i));
    // The kernel's S_kv: K's and V's sequence dim; with a paged cache
    // exactly the keys a table row covers, or the score subgraph's key
    // extent where that is smaller (measured: cuDNN 9.28.1 writes 352 for
    // 351 keys in pages of 32 on the B200 preset, 100 for a bias of 100
    // keys in 7 pages of 16 on the H200 preset). The key lengths' guard is
    // that same value (`guards::guarded`, and the graph's own for a built
    // plan), so a kernel whose S_kv is below it (lengths between the two
    // would pass the guard) is refused; never past a subgraph tensor's key
    // extent.
    let reach = match (sk, sv) {
        (Some(sk), Some(sv)) if sk == sv || paged => {
            Some(sk.min(sv).min(sub_kv.unwrap_or(i64::MAX)))
        }
        _ => None,
    };
    let kv_ok = |got: i64| match (reach, sk) {
        (Some(reach), _) if paged => got == reach,
        (Some(reach), Some(sk)) => got == sk && got <= reach,
        _ => false,
    };
    // The kernel's S_q: never past the sequence dim of any tensor the query
    // lengths index (O, the gradients, the statistics; Q's is checked equal
    // below), so the lengths' guard ([`guards::Q_BOUND`]) bounds the kernel.
    let q_reach = super::guards::Q_BOUND
        .iter()
        .filter_map(|n| dims(w, f, &[*n]).and_then(|d| d.get(2).copied()))
        .min();
    for (path, h) in headers {
        let got = h.map(i64::from);
        let same = [q[0], q[1], k[1], v[1], q[2], q[3], v[3]]
            == [got[0], got[1], got[2], got[3], got[4], got[6], got[7]];
        if !same
            || !kv_ok(got[5])
            || sub_q.is_some_and(|s| got[4] > s)
            || q_reach.is_some_and(|s| got[4] > s)
        {
            let want_kv = match (reach, sk) {
                (Some(r), _) if paged => r.to_string(),
                (_, Some(sk)) => sk.to_string(),
                _ => "K and V of one sequence extent".to_string(),
            };
            return Err(Error::mismatch(
                format!(
                    "plan JSON {path}: the attention kernel's descriptor (B, H_q, H_k, H_v, S_q, \
                     S_kv, D_qk, D_v) against its SDPA operation's Q, K, V (and its score \
                     subgraph's S_q {sub_q:?}, S_kv {sub_kv:?}; O's, the gradients' and the \
                     statistics' S_q {q_reach:?})"
                ),
                format!(
                    "[{}, {}, {}, {}, {}, {want_kv}, {}, {}]",
                    q[0], q[1], k[1], v[1], q[2], q[3], v[3]
                ),
                format!("{got:?}"),
            ));
        }
    }
    Ok(())
}

/// A composite attention's descriptors: Q `[B, H_q, S_q, D_qk]`, K
/// `[B, H_k, S_kv, D_qk]` (or its transpose) and V `[B, H_v, S_kv, D_v]`
/// are each the dims of a tensor the plan binds (not virtual: the tensor
/// list pins those to the buffers bound), so no descriptor reaches past them.
fn check_composite_headers(w: &Walk, headers: &[(String, [u32; 8])]) -> Result<()> {
    let bound: Vec<Vec<i64>> = w
        .tensors
        .values()
        .filter(|t| !t.is_virtual && !t.by_value && t.dims.len() == 4)
        .map(|t| t.dims.clone())
        .collect();
    // A paged cache load reaches at most the keys its page-table rows
    // cover in a bound container, and its output `Y` holds fewer when the
    // sequence is not a whole number of pages (100 keys in 7 pages of 16):
    // `[B, H, S, D]` for S the smaller of both, exactly (measured: cuDNN
    // 9.28.1 writes 100 there on the H200 preset). That is the key
    // lengths' guard (the load's `sequence`), so a kernel whose S_kv is
    // smaller (lengths between the two passing the guard) is refused.
    let mut paged: Vec<[i64; 4]> = Vec::new();
    for (op, f) in &w.nodes {
        if op != PAGED_LOAD {
            continue;
        }
        let y = f
            .iter()
            .find(|(k, _)| k == "Y")
            .and_then(|(_, n)| n.parse::<i64>().ok())
            .and_then(|u| w.tensors.get(&u))
            .and_then(|t| super::guards::paged_y_seq(&t.dims, &t.strides));
        if let (Some(t), Some(c), Some(y)) =
            (dims(w, f, &["pageTable"]), dims(w, f, &["container"]), y)
            && t.len() == 4
            && c.len() == 4
            && let Some(s) = t[2].checked_mul(c[2])
        {
            paged.push([t[0], c[1], s.min(y), c[3]]);
        }
    }
    let has = |d: [i64; 4]| {
        bound.iter().any(|b| b[..] == d[..])
            || paged
                .iter()
                .any(|p| p[0] == d[0] && p[1] == d[1] && p[3] == d[3] && p[2] == d[2])
    };
    for (path, h) in headers {
        let [b, hq, hk, hv, sq, skv, dqk, dv] = h.map(i64::from);
        let q = has([b, hq, sq, dqk]);
        // Kᵀ of a bound K (`[B, H, D, S]`); a paged load's Y is matched by
        // its sequence axis above.
        let k = has([b, hk, skv, dqk]) || bound.iter().any(|x| x[..] == [b, hk, dqk, skv]);
        let v = has([b, hv, skv, dv]);
        if !(q && k && v) {
            return Err(bad(
                path,
                "must describe Q, K and V tensors the plan binds (B, H, S, D as its descriptor says)",
                format!("{:?}", h),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::*;
    use crate::graph::plan_json::JsonTensor;

    fn t(dims: &[i64]) -> JsonTensor {
        let mut strides = vec![1; dims.len()];
        for i in (0..dims.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * dims[i + 1];
        }
        JsonTensor {
            dtype: "CUDNN_DATA_HALF",
            dims: dims.to_vec(),
            strides,
            is_virtual: false,
            by_value: false,
            ragged: None,
        }
    }

    /// A paged SDPA forward: Q `[2, 4, 1, 64]`, containers of pages of 16,
    /// page tables of 7 pages per sequence (112 keys), optionally a bias
    /// of 100 keys in its score subgraph.
    fn paged(bias: bool) -> Walk {
        let mut tensors: HashMap<i64, JsonTensor> = [
            (1, t(&[2, 4, 1, 64])),
            (2, t(&[15, 4, 16, 64])),
            (3, t(&[15, 4, 16, 64])),
            (4, t(&[2, 4, 1, 64])),
            (5, t(&[2, 1, 7, 1])),
            (6, t(&[2, 1, 7, 1])),
        ]
        .into_iter()
        .collect();
        let mut subgraphs = HashMap::new();
        if bias {
            tensors.insert(30, t(&[2, 4, 1, 100]));
            subgraphs.insert(0, vec![30]);
        }
        let f = [
            ("Q", 1),
            ("K", 2),
            ("V", 3),
            ("O", 4),
            ("pageTableK", 5),
            ("pageTableV", 6),
        ];
        Walk {
            tensors,
            written: HashSet::new(),
            read: HashSet::new(),
            page_tables: HashSet::new(),
            flow: Vec::new(),
            provided: HashSet::new(),
            subgraphs,
            nodes: vec![(
                SDPA_FWD.to_string(),
                f.iter()
                    .map(|(k, u)| (k.to_string(), u.to_string()))
                    .collect(),
            )],
        }
    }

    fn header(skv: u32) -> Vec<(String, [u32; 8])> {
        vec![("/engine/kernel/0".to_string(), [2, 4, 4, 4, 1, skv, 64, 64])]
    }

    /// Review finding 2: a paged kernel's S_kv must be the coverage (or the
    /// bias's key extent), what cuDNN 9.28.1 writes and the guard holds
    /// lengths to; one below it let lengths between the two pass.
    #[test]
    fn unit_paged_header_skv_is_the_guard() {
        let w = paged(false);
        assert!(check_headers(&w, &header(112)).is_ok());
        for bad in [1, 100, 111, 113] {
            assert!(
                matches!(check_headers(&w, &header(bad)), Err(Error::Mismatch { .. })),
                "S_kv {bad}"
            );
        }
        let w = paged(true);
        assert!(check_headers(&w, &header(100)).is_ok());
        for bad in [64, 99, 101, 112] {
            assert!(check_headers(&w, &header(bad)).is_err(), "bias, S_kv {bad}");
        }
    }

    /// Review finding 4: the kernel's S_q is held to the statistics' rows
    /// too (a plan whose statistics hold fewer rows than Q is refused).
    #[test]
    fn unit_header_sq_bounded_by_statistics() {
        for field in [
            "stats",
            "softmax.statsDesc",
            "softmax.maxDesc",
            "softmax.sumExpDesc",
        ] {
            let mut w = paged(false);
            w.nodes[0].1.push((field.to_string(), "7".to_string()));
            w.tensors.insert(7, t(&[2, 4, 1, 1]));
            assert!(check_headers(&w, &header(112)).is_ok(), "{field}");
            // Q of 2 rows, statistics of 1: a kernel header with S_q 2.
            let mut w = paged(false);
            w.tensors.insert(1, t(&[2, 4, 2, 64]));
            w.tensors.insert(4, t(&[2, 4, 2, 64]));
            w.nodes[0].1.push((field.to_string(), "7".to_string()));
            w.tensors.insert(7, t(&[2, 4, 1, 1]));
            let h = vec![("/k".to_string(), [2, 4, 4, 4, 2, 112, 64, 64])];
            assert!(
                matches!(check_headers(&w, &h), Err(Error::Mismatch { .. })),
                "{field}"
            );
        }
    }
}
