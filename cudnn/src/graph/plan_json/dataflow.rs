//! The data flow of a plan JSON's operation graph, checked before cuDNN
//! sees it: every virtual tensor (and every scratch tensor the plan keeps
//! in its workspace) that a node reads is written by a node of the plan (or
//! is the input an SDPA operation hands its score subgraph), no tensor is
//! written by two nodes, and no chain of nodes feeds itself.
//!
//! cuDNN does not check this: the plan of an SDPA backward with one node
//! removed (a reduction writing a virtual tensor, or the node reading it)
//! crashes cuDNN 9.28 in the trusted load (SIGSEGV, issue 31), and only the
//! graph was edited, not the compiled kernels.

use std::collections::{HashMap, HashSet};

use super::{JsonTensor, bad};
use crate::error::Result;

/// What one node reads and writes, by tensor name.
///
/// Producers are scoped to their graph level (`scope`: the JSON path of
/// the graph or subgraph the node is in): a virtual tensor a subgraph node
/// writes satisfies reads inside that subgraph and its operation's
/// `subgraphOutputUid` (a read in `sub_reads`), never a read elsewhere (a
/// subgraph's tensor may be declared again at the top level).
#[derive(Clone, Debug, Default)]
pub(super) struct Flow {
    /// The node's JSON path.
    pub(super) path: String,
    /// The JSON path of the graph the node is in.
    pub(super) scope: String,
    /// Reads resolved in `scope`.
    pub(super) reads: Vec<String>,
    /// Reads resolved in another scope: the operation's
    /// `subgraphOutputUid`, in its subgraph.
    pub(super) sub_reads: Vec<(String, String)>,
    pub(super) writes: Vec<String>,
    /// A sub-descriptor (the SDPA forward's SOFTMAX): it reads what its
    /// operation computes inside (the scores), so its own reads need no
    /// producer node; nobody else's reads are exempted by it.
    pub(super) own_inputs: bool,
    /// A reshape (its output is a view, there to be read).
    pub(super) view: bool,
}

/// Check the flow of `nodes` over `tensors`; `scratch` are the uids of the
/// tensors the plan keeps in its workspace (written by cuDNN's kernels
/// from the nodes, like virtual ones); `provided` the score-subgraph inputs
/// `(tensor, subgraph scope)` (their SDPA operation writes them, for the
/// nodes of that subgraph only).
pub(super) fn check(
    nodes: &[Flow],
    tensors: &HashMap<i64, JsonTensor>,
    scratch: &HashSet<i64>,
    provided: &HashSet<(String, String)>,
) -> Result<()> {
    let internal = |name: &str| {
        name.parse::<i64>()
            .ok()
            .is_some_and(|u| scratch.contains(&u) || tensors.get(&u).is_some_and(|t| t.is_virtual))
    };
    // One writer per tensor.
    let mut writer: HashMap<&str, usize> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        for w in &n.writes {
            if let Some(&first) = writer.get(w.as_str())
                && first != i
            {
                return Err(bad(
                    &n.path,
                    format!(
                        "writes tensor uid {w}, which {} writes too (a tensor has one producer)",
                        nodes.get(first).map_or("another node", |f| f.path.as_str())
                    ),
                    w,
                ));
            }
            writer.insert(w.as_str(), i);
        }
    }
    // Every virtual or scratch tensor read has its producer in the scope
    // it is read in (or is its subgraph's input there).
    let produced_in = |r: &str, scope: &str| {
        writer
            .get(r)
            .and_then(|&i| nodes.get(i))
            .is_some_and(|w| w.scope == scope)
            || provided.contains(&(r.to_string(), scope.to_string()))
    };
    for n in nodes {
        if n.own_inputs {
            continue;
        }
        let reads = n.reads.iter().map(|r| (r, &n.scope));
        for (r, scope) in reads.chain(n.sub_reads.iter().map(|(r, s)| (r, s))) {
            if internal(r) && !produced_in(r, scope) {
                return Err(bad(
                    &n.path,
                    if writer.contains_key(r.as_str()) {
                        format!(
                            "reads a virtual (or scratch) tensor that only a node of another \
                             graph level writes (read in {scope})"
                        )
                    } else {
                        "reads a virtual (or scratch) tensor that no node of the plan writes"
                            .to_string()
                    },
                    format!("tensor uid {r}"),
                ));
            }
        }
    }
    // Every scratch tensor written, and every view a reshape makes, is
    // read: cuDNN compiles a runtime-fused plan's kernels for its graph,
    // and a graph whose edit left either unread (its reader rewired
    // elsewhere) crashed cuDNN 9.28.1 in the trusted load (SIGSEGV;
    // operand-rewire fuzz of the composite SDPA backward). Other virtual
    // results may go unread: the composite SDPA forward computes its
    // statistics in inference too, unread (cuDNN takes such plans).
    let is_scratch = |name: &str| {
        name.parse::<i64>()
            .ok()
            .is_some_and(|u| scratch.contains(&u))
    };
    let read_somewhere: HashSet<&str> = nodes
        .iter()
        .flat_map(|n| {
            n.reads
                .iter()
                .map(String::as_str)
                .chain(n.sub_reads.iter().map(|(r, _)| r.as_str()))
        })
        .collect();
    for n in nodes.iter().filter(|n| !n.own_inputs) {
        for w in &n.writes {
            if internal(w) && (n.view || is_scratch(w)) && !read_somewhere.contains(w.as_str()) {
                return Err(bad(
                    &n.path,
                    "writes a scratch tensor (or a reshaped view) that no node of the plan reads",
                    format!("tensor uid {w}"),
                ));
            }
        }
    }
    // No cycle: Kahn's order over producer -> consumer edges.
    let mut indegree = vec![0usize; nodes.len()];
    let mut next: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (j, n) in nodes.iter().enumerate() {
        let mut from: Vec<usize> = n
            .reads
            .iter()
            .chain(n.sub_reads.iter().map(|(r, _)| r))
            .filter_map(|r| writer.get(r.as_str()).copied())
            .collect();
        from.sort_unstable();
        from.dedup();
        for i in from {
            if let (Some(e), Some(d)) = (next.get_mut(i), indegree.get_mut(j)) {
                e.push(j);
                *d += 1;
            }
        }
    }
    let mut ready: Vec<usize> = (0..nodes.len()).filter(|&i| indegree[i] == 0).collect();
    let mut done = 0usize;
    while let Some(i) = ready.pop() {
        done += 1;
        for &j in next.get(i).map_or(&[][..], |v| &v[..]) {
            if let Some(d) = indegree.get_mut(j) {
                *d -= 1;
                if *d == 0 {
                    ready.push(j);
                }
            }
        }
    }
    if done != nodes.len() {
        let on_cycle = indegree
            .iter()
            .position(|&d| d > 0)
            .and_then(|i| nodes.get(i))
            .map_or("", |n| n.path.as_str());
        return Err(bad(
            on_cycle,
            "is on a cycle of nodes (a node's input is computed from its own output)",
            format!("{} of {} nodes ordered", done, nodes.len()),
        ));
    }
    Ok(())
}

/// The shapes a pointwise and a matmul node relate (cuDNN's rules, which
/// its trusted load of a runtime-compiled plan does not check: a pointwise
/// input wider than its output, or not broadcastable to it, crashed cuDNN
/// 9.28.1 there, SIGSEGV, in the operand-rewire fuzz): every pointwise
/// input (`X`, `B`, `T`) has its output's rank and each dim equal to the
/// output's or 1; a matmul's `A [.., M, K]`, `B [.., K, N]` and
/// `C [.., M, N]` share their rank, M, N and K, and A's and B's batch dims
/// are C's or divide it (1, or grouped-query attention's K and V heads); a
/// softmax's `Y` has its `X`'s dims, its statistics, row max and sum of
/// exponentials `X`'s with the last dim 1, and its sink `X`'s rank with
/// `X`'s heads (dim 1) and every other dim 1 (a composite attention's node
/// from cuDNN 9.21, or the SDPA operation's sub-descriptor).
pub(super) fn check_shapes(
    nodes: &[(String, Vec<(String, String)>)],
    tensors: &HashMap<i64, JsonTensor>,
) -> Result<()> {
    const POINTWISE: &str = "CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR";
    const MATMUL: &str = "CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR";
    const SOFTMAX: &str = super::schema::SOFTMAX;
    for (op, fields) in nodes {
        let dims = |k: &str| {
            let (_, n) = fields.iter().find(|(f, _)| f == k)?;
            let t = tensors.get(&n.parse::<i64>().ok()?)?;
            Some((&t.dims[..], n.as_str()))
        };
        let fail = |what: String, got: String| Err(bad(&format!("{op} node"), what, got));
        if op == POINTWISE {
            let Some((y, yn)) = dims("Y") else { continue };
            for k in ["X", "B", "T"] {
                let Some((x, xn)) = dims(k) else { continue };
                let fits = x.len() == y.len() && x.iter().zip(y).all(|(a, b)| a == b || *a == 1);
                if !fits {
                    return fail(
                        format!(
                            "input `{k}` (tensor uid {xn}) must broadcast to its output `Y` \
                             (tensor uid {yn}, dims {y:?}): each dim equal or 1"
                        ),
                        format!("{x:?}"),
                    );
                }
            }
        } else if op == MATMUL {
            let (Some((a, an)), Some((b, bn)), Some((c, cn))) =
                (dims("matA"), dims("matB"), dims("matC"))
            else {
                continue;
            };
            // A batch dim of A or B is C's, or divides it (grouped-query
            // attention: K's heads serve groups of Q's).
            let groups = |x: i64, c: i64| x >= 1 && c % x == 0;
            let r = c.len();
            let ok = r >= 2
                && a.len() == r
                && b.len() == r
                && a[r - 2] == c[r - 2]
                && b[r - 1] == c[r - 1]
                && a[r - 1] == b[r - 2]
                && (0..r - 2).all(|i| groups(a[i], c[i]) && groups(b[i], c[i]));
            if !ok {
                return fail(
                    format!(
                        "A [.., M, K], B [.., K, N] and C [.., M, N] must agree (uids {an}, \
                         {bn}, {cn})"
                    ),
                    format!("A {a:?}, B {b:?}, C {c:?}"),
                );
            }
        } else if op == SOFTMAX {
            let Some((x, xn)) = dims("X") else { continue };
            let Some((_, lead)) = x.split_last() else {
                return fail(format!("input `X` (tensor uid {xn}) has dims"), "[]".into());
            };
            let row: Vec<i64> = lead.iter().copied().chain([1]).collect();
            let sink: Vec<i64> = (0..x.len())
                .map(|i| if i == 1 { x[1] } else { 1 })
                .collect();
            for (k, want) in [
                ("Y", x),
                ("statsDesc", &row[..]),
                ("maxDesc", &row[..]),
                ("sumExpDesc", &row[..]),
                ("sinkDesc", &sink[..]),
            ] {
                let Some((got, n)) = dims(k) else { continue };
                if got != want {
                    return fail(
                        format!(
                            "`{k}` (tensor uid {n}) must have dims {want:?} (from `X`, tensor \
                             uid {xn}, dims {x:?})"
                        ),
                        format!("{got:?}"),
                    );
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    fn virt(v: bool) -> JsonTensor {
        JsonTensor {
            dtype: "CUDNN_DATA_FLOAT",
            dims: vec![1, 1, 1, 1],
            strides: vec![1, 1, 1, 1],
            is_virtual: v,
            by_value: false,
            ragged: None,
        }
    }

    fn node(path: &str, reads: &[i64], writes: &[i64]) -> Flow {
        in_scope("/g", path, reads, writes)
    }

    fn in_scope(scope: &str, path: &str, reads: &[i64], writes: &[i64]) -> Flow {
        Flow {
            path: path.to_string(),
            scope: scope.to_string(),
            reads: reads.iter().map(|u| u.to_string()).collect(),
            writes: writes.iter().map(|u| u.to_string()).collect(),
            ..Flow::default()
        }
    }

    fn tensors() -> HashMap<i64, JsonTensor> {
        // 1, 2 bound; 10, 11 virtual.
        [
            (1, virt(false)),
            (2, virt(false)),
            (10, virt(true)),
            (11, virt(true)),
        ]
        .into_iter()
        .collect()
    }

    fn run(nodes: &[Flow]) -> Result<()> {
        check(nodes, &tensors(), &HashSet::new(), &HashSet::new())
    }

    #[test]
    fn unit_dataflow_chain_ok_and_each_edit_refused() {
        // 1 -> a -> 10 -> b -> 11 -> c -> 2
        let a = node("/n/0", &[1], &[10]);
        let b = node("/n/1", &[10], &[11]);
        let c = node("/n/2", &[11], &[2]);
        assert!(run(&[a.clone(), b.clone(), c.clone()]).is_ok());
        // Any order is fine (a graph, not a list).
        assert!(run(&[c.clone(), a.clone(), b.clone()]).is_ok());
        // The producer of a virtual tensor removed: its reader is refused.
        for nodes in [vec![b.clone(), c.clone()], vec![a.clone(), c.clone()]] {
            let e = run(&nodes).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
            assert!(e.to_string().contains("no node of the plan writes"), "{e}");
        }
        // A duplicated node: two producers.
        let e = run(&[a.clone(), a.clone(), b.clone(), c.clone()]).unwrap_err();
        assert!(e.to_string().contains("one producer"), "{e}");
        // A cycle: b also reads c's output through a virtual 11 -> b.
        let b2 = node("/n/1", &[10, 11], &[11]);
        let e = run(&[a.clone(), b2]).unwrap_err();
        assert!(e.to_string().contains("one producer") || e.to_string().contains("cycle"));
        let x = node("/n/0", &[11], &[10]);
        let y = node("/n/1", &[10], &[11]);
        let e = run(&[x, y]).unwrap_err();
        assert!(e.to_string().contains("cycle"), "{e}");
        // A scratch tensor (bound in the JSON, kept in the workspace) needs
        // its producer too; a subgraph input is provided by its operation.
        let s: HashSet<i64> = [2].into_iter().collect();
        let e = check(
            &[node("/n/0", &[2], &[10])],
            &tensors(),
            &s,
            &HashSet::new(),
        );
        assert!(e.is_err());
        let p: HashSet<(String, String)> =
            [("10".to_string(), "/g".to_string())].into_iter().collect();
        assert!(
            check(
                &[node("/s/0", &[10], &[11]), node("/n/0", &[11], &[2])],
                &tensors(),
                &HashSet::new(),
                &p
            )
            .is_ok()
        );
    }

    /// Operand-rewire fuzz: an unread scratch tensor or reshaped view, and
    /// pointwise / matmul shapes that do not relate, are refused (each
    /// crashed cuDNN 9.28.1's trusted load of a composite SDPA backward).
    #[test]
    fn unit_rewire_shapes_and_unread_views() {
        // Scratch 2 written, never read: refused; read: fine.
        let s: HashSet<i64> = [2].into_iter().collect();
        let w = node("/n/0", &[1], &[2]);
        let e = check(std::slice::from_ref(&w), &tensors(), &s, &HashSet::new()).unwrap_err();
        assert!(e.to_string().contains("no node of the plan reads"), "{e}");
        let r = node("/n/1", &[2], &[]);
        assert!(check(&[w, r], &tensors(), &s, &HashSet::new()).is_ok());
        // A reshape's virtual output unread: refused; another virtual
        // result unread (inference statistics): fine.
        let mut v = node("/n/0", &[1], &[10]);
        v.view = true;
        assert!(run(&[v.clone()]).is_err());
        v.view = false;
        assert!(run(&[v]).is_ok());

        let t = |d: &[i64]| JsonTensor {
            dims: d.to_vec(),
            ..virt(true)
        };
        let ts: HashMap<i64, JsonTensor> = [
            (1, t(&[2, 4, 128, 1])),
            (2, t(&[2, 4, 128, 128])),
            (3, t(&[2, 4, 128, 64])),
            (4, t(&[2, 2, 128, 64])),
            (5, t(&[2, 4, 64, 128])),
            (6, t(&[2, 3, 128, 64])),
            (7, t(&[1, 4, 1, 1])),
            (8, t(&[2, 4, 128])),
        ]
        .into_iter()
        .collect();
        let n = |op: &str, f: &[(&str, i64)]| {
            (
                format!("CUDNN_BACKEND_OPERATION_{op}_DESCRIPTOR"),
                f.iter()
                    .map(|(k, u)| (k.to_string(), u.to_string()))
                    .collect::<Vec<_>>(),
            )
        };
        let ok = |x: (String, Vec<(String, String)>)| check_shapes(&[x], &ts).is_ok();
        // Pointwise: inputs broadcast to Y.
        assert!(ok(n("POINTWISE", &[("X", 2), ("B", 1), ("Y", 2)])));
        assert!(!ok(n("POINTWISE", &[("X", 2), ("Y", 1)])), "X wider than Y");
        assert!(
            !ok(n("POINTWISE", &[("X", 2), ("B", 3), ("Y", 2)])),
            "64 vs 128"
        );
        // Matmul: [.., M, K] x [.., K, N] -> [.., M, N]; GQA heads divide.
        assert!(ok(n("MATMUL", &[("matA", 3), ("matB", 5), ("matC", 2)])));
        assert!(ok(n("MATMUL", &[("matA", 2), ("matB", 4), ("matC", 3)])));
        assert!(
            !ok(n("MATMUL", &[("matA", 2), ("matB", 6), ("matC", 3)])),
            "3 heads of 4"
        );
        assert!(
            !ok(n("MATMUL", &[("matA", 3), ("matB", 3), ("matC", 2)])),
            "K"
        );
        assert!(
            !ok(n("MATMUL", &[("matA", 2), ("matB", 3), ("matC", 2)])),
            "N"
        );
        // Softmax: Y as X, the row outputs [.., 1], the sink [1, H, 1, 1].
        assert!(ok(n(
            "SOFTMAX",
            &[
                ("X", 2),
                ("Y", 2),
                ("statsDesc", 1),
                ("maxDesc", 1),
                ("sumExpDesc", 1),
                ("sinkDesc", 7)
            ]
        )));
        assert!(!ok(n("SOFTMAX", &[("X", 2), ("Y", 3)])), "Y not X");
        assert!(!ok(n("SOFTMAX", &[("X", 2), ("statsDesc", 3)])), "stats");
        assert!(!ok(n("SOFTMAX", &[("X", 2), ("maxDesc", 2)])), "max");
        assert!(
            !ok(n("SOFTMAX", &[("X", 2), ("sumExpDesc", 8)])),
            "sum_exp rank"
        );
        assert!(!ok(n("SOFTMAX", &[("X", 2), ("sinkDesc", 1)])), "sink");
    }

    /// Review finding 3: producers are scoped to their graph level, and
    /// what a subgraph or a sub-descriptor is handed is theirs alone.
    #[test]
    fn unit_dataflow_scoped_to_graph_levels() {
        let sub = "/g/nodes/0/subgraph";
        let provided: HashSet<(String, String)> =
            [("10".to_string(), sub.to_string())].into_iter().collect();
        let run = |nodes: &[Flow]| check(nodes, &tensors(), &HashSet::new(), &provided);
        // The SDPA operation hands its subgraph 10 (the scores); a subgraph
        // node writes 11, which the operation reads back (subgraphOutputUid).
        let mut op = node("/g/nodes/0", &[1], &[2]);
        op.sub_reads.push(("11".to_string(), sub.to_string()));
        let inner = in_scope(sub, &format!("{sub}/nodes/0"), &[10], &[11]);
        assert!(run(&[inner.clone(), op.clone()]).is_ok());
        // A top-level node reading 11, which only the subgraph writes: refused.
        let outside = node("/g/nodes/1", &[11], &[]);
        let e = run(&[inner.clone(), op.clone(), outside]).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
        assert!(e.to_string().contains("another graph level"), "{e}");
        // A top-level node reading the subgraph's input 10: refused (it is
        // provided inside the subgraph only).
        let e = run(&[inner.clone(), op.clone(), node("/g/nodes/1", &[10], &[])]).unwrap_err();
        assert!(e.to_string().contains("no node of the plan writes"), "{e}");
        // The operation's read-back must come from its subgraph, not from a
        // top-level producer of the same uid.
        let top_writer = node("/g/nodes/1", &[1], &[11]);
        let e = run(&[op.clone(), top_writer]).unwrap_err();
        assert!(e.to_string().contains("another graph level"), "{e}");
        // A sub-descriptor's own reads need no producer; it exempts no one
        // else's read of the same tensor.
        let mut softmax = node("/g/nodes/0/softmax", &[10], &[]);
        softmax.own_inputs = true;
        assert!(run(&[softmax.clone()]).is_ok());
        let e = run(&[softmax, node("/g/nodes/1", &[10], &[])]).unwrap_err();
        assert!(e.to_string().contains("no node of the plan writes"), "{e}");
    }
}
