//! Comparing two cuDNN plan JSONs of the same graph (the crate's and the
//! frontend's): the non-virtual tensors matched by role, the nodes with
//! their tensor references normalized, and the uid maps the cross-loads use.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

/// A tensor of a plan JSON.
#[derive(Clone, Debug, PartialEq)]
pub struct JTensor {
    pub dims: Vec<i64>,
    pub strides: Vec<i64>,
    pub dtype: String,
    pub is_virtual: bool,
    pub by_value: bool,
}

fn ints(v: &Value) -> Vec<i64> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_i64).collect())
        .unwrap_or_default()
}

/// Every tensor of the graph and its subgraphs, by uid.
pub fn tensors(plan: &Value) -> BTreeMap<i64, JTensor> {
    let mut out = BTreeMap::new();
    fn walk(v: &Value, out: &mut BTreeMap<i64, JTensor>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::Array(ts)) = m.get("tensors") {
                    for t in ts {
                        let Some(uid) = t
                            .get("name")
                            .and_then(Value::as_str)
                            .and_then(|s| s.parse().ok())
                        else {
                            continue;
                        };
                        out.insert(
                            uid,
                            JTensor {
                                dims: ints(&t["dim"]),
                                strides: ints(&t["stride"]),
                                dtype: t["dataType"].as_str().unwrap_or("?").to_string(),
                                is_virtual: t["isVirtual"].as_bool().unwrap_or(false),
                                by_value: t["isByValue"].as_bool().unwrap_or(false),
                            },
                        );
                    }
                }
                for (k, x) in m {
                    if k != "tensors" {
                        walk(x, out);
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    walk(&plan["operationGraph"], &mut out);
    out
}

/// `(role path, uid)` for every tensor reference of every node: the path is
/// the node's position and operation and the slot's key
/// (`0:SDPA_FWD/softmax:SOFTMAX/statsDesc`).
pub fn slots(plan: &Value, known: &BTreeMap<i64, JTensor>) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    fn op_name(m: &serde_json::Map<String, Value>) -> String {
        m.get("operation")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .trim_start_matches("CUDNN_BACKEND_OPERATION_")
            .trim_end_matches("_DESCRIPTOR")
            .to_string()
    }
    fn walk(v: &Value, path: &str, known: &BTreeMap<i64, JTensor>, out: &mut Vec<(String, i64)>) {
        match v {
            Value::Object(m) => {
                let here = if m.contains_key("operation") {
                    format!("{path}:{}", op_name(m))
                } else {
                    path.to_string()
                };
                for (k, x) in m {
                    if k == "tensors" {
                        continue;
                    }
                    if let Some(uid) = x.as_str().and_then(|s| s.parse::<i64>().ok())
                        && known.contains_key(&uid)
                    {
                        out.push((format!("{here}/{k}"), uid));
                    } else {
                        walk(x, &format!("{here}/{k}"), known, out);
                    }
                }
            }
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    if let Some(uid) = x.as_str().and_then(|s| s.parse::<i64>().ok())
                        && known.contains_key(&uid)
                    {
                        out.push((format!("{path}[{i}]"), uid));
                    } else {
                        walk(x, &format!("{path}[{i}]"), known, out);
                    }
                }
            }
            _ => {}
        }
    }
    walk(&plan["operationGraph"]["nodes"], "", known, &mut out);
    out
}

/// Whether a JSON key holds a tensor uid as a number (`subgraphInputUid`).
fn uid_key(key: &str) -> bool {
    key == "uid" || key.ends_with("Uid")
}

/// The frontend's uids mapped to the crate's for the non-virtual tensors:
/// the same uid where the frontend was given the crate's (named inputs and
/// outputs); else the crate tensor in the same role (node slot) of the same
/// kind (by-value flag, data type); else, for by-value scalars, the one of
/// the same value (`values`: uid -> f32 bits in hex, each side), and for
/// the rest the one of the same dims, strides and data type.
pub fn map_uids(
    crate_plan: &Value,
    fe_plan: &Value,
    named: &[i64],
    values: (&HashMap<i64, String>, &HashMap<i64, String>),
) -> (HashMap<i64, i64>, Vec<String>) {
    let ct = tensors(crate_plan);
    let ft = tensors(fe_plan);
    let cs = slots(crate_plan, &ct);
    let fs = slots(fe_plan, &ft);
    let crate_at: HashMap<&str, i64> = cs.iter().map(|(p, u)| (p.as_str(), *u)).collect();
    let mut map = HashMap::new();
    let mut taken: std::collections::HashSet<i64> = named.iter().copied().collect();
    let mut rest = Vec::new();
    for (&uid, t) in &ft {
        if t.is_virtual {
            continue;
        }
        if named.contains(&uid) {
            map.insert(uid, uid);
        } else {
            rest.push(uid);
        }
    }
    let same_kind = |c: i64, f: &JTensor| {
        ct.get(&c)
            .is_some_and(|x| !x.is_virtual && x.by_value == f.by_value && x.dtype == f.dtype)
    };
    // By role.
    let mut left = Vec::new();
    for uid in rest {
        let f = &ft[&uid];
        let hit = fs
            .iter()
            .filter(|(_, u)| *u == uid)
            .filter_map(|(p, _)| crate_at.get(p.as_str()).copied())
            .find(|c| !taken.contains(c) && same_kind(*c, f));
        match hit {
            Some(c) => {
                taken.insert(c);
                map.insert(uid, c);
            }
            None => left.push(uid),
        }
    }
    // By value (scalars), then by layout (scratch tensors).
    let mut unmatched = Vec::new();
    for uid in left {
        let f = &ft[&uid];
        let hit = ct
            .iter()
            .filter(|(c, _)| !taken.contains(*c) && same_kind(**c, f))
            .find(|(c, x)| {
                if f.by_value {
                    values
                        .1
                        .get(&uid)
                        .is_some_and(|v| values.0.get(*c) == Some(v))
                } else {
                    x.dims == f.dims && x.strides == f.strides
                }
            })
            .map(|(c, _)| *c);
        match hit {
            Some(c) => {
                taken.insert(c);
                map.insert(uid, c);
            }
            None => unmatched.push(format!(
                "frontend tensor uid {uid} ({} {:?}{}) has no crate tensor in the same role (slots {:?})",
                t_desc(f),
                f.dims,
                if f.by_value { " by value" } else { "" },
                fs.iter()
                    .filter(|(_, u)| *u == uid)
                    .map(|(p, _)| p.as_str())
                    .collect::<Vec<_>>()
            )),
        }
    }
    (map, unmatched)
}

fn t_desc(t: &JTensor) -> &str {
    t.dtype.trim_start_matches("CUDNN_DATA_")
}

/// The role path of a crate uid (its first slot), for messages and the
/// documented differences.
pub fn role_of(plan: &Value, uid: i64) -> String {
    let t = tensors(plan);
    slots(plan, &t)
        .into_iter()
        .find(|(_, u)| *u == uid)
        .map(|(p, _)| p)
        .unwrap_or_else(|| format!("uid {uid}"))
}

/// Rewrite a plan JSON's uids through `map` (tensor names, node slots and
/// the engine's kernel parameter uids) into the other side's uid space,
/// whose uids are `theirs`: a tensor `map` leaves out (a virtual one, or
/// one with no counterpart) keeps its uid unless that uid is a mapped one
/// or one of `theirs`, where it would pass for another tensor; then it
/// gets a fresh one.
pub fn remap(
    plan: &Value,
    map: &HashMap<i64, i64>,
    theirs: &std::collections::HashSet<i64>,
) -> Value {
    let ts = tensors(plan);
    let mut full: HashMap<i64, i64> = map.clone();
    let taken: std::collections::HashSet<i64> =
        map.values().chain(theirs.iter()).copied().collect();
    let mut next = ts.keys().chain(taken.iter()).copied().max().unwrap_or(0) + 1000;
    let mut ours: Vec<i64> = ts.keys().copied().collect();
    ours.sort_unstable();
    for uid in ours {
        if full.contains_key(&uid) {
            continue;
        }
        if taken.contains(&uid) {
            full.insert(uid, next);
            next += 1;
        } else {
            full.insert(uid, uid);
        }
    }
    fn walk(v: &mut Value, full: &HashMap<i64, i64>, key: &str) {
        match v {
            Value::Object(m) => {
                for (k, x) in m.iter_mut() {
                    walk(x, full, k);
                }
            }
            Value::Array(a) => a.iter_mut().for_each(|x| walk(x, full, key)),
            Value::String(s) if key != "operation" => {
                if let Some(n) = s.parse::<i64>().ok().and_then(|u| full.get(&u)) {
                    *s = n.to_string();
                }
            }
            Value::Number(n) if uid_key(key) => {
                if let Some(m) = n.as_i64().and_then(|u| full.get(&u)) {
                    *v = Value::from(*m);
                }
            }
            _ => {}
        }
    }
    let mut out = plan.clone();
    if let Some(g) = out.get_mut("operationGraph") {
        walk(g, &full, "");
    }
    if let Some(e) = out.get_mut("engine") {
        walk(e, &full, "");
    }
    out
}

/// The graph's nodes with tensor references normalized: a non-virtual
/// tensor as `T<uid>` (the frontend's through `map`), a virtual one by the
/// role path where it is first used (so extra virtual tensors elsewhere do
/// not renumber the rest).
pub fn normalized_nodes(plan: &Value, map: Option<&HashMap<i64, i64>>) -> Value {
    let ts = tensors(plan);
    let mut first: HashMap<i64, String> = HashMap::new();
    for (p, u) in slots(plan, &ts) {
        first.entry(u).or_insert(p);
    }
    let name = |uid: i64| -> Option<String> {
        let t = ts.get(&uid)?;
        Some(if t.is_virtual {
            format!("V{}", first.get(&uid).cloned().unwrap_or_default())
        } else {
            format!("T{}", map.and_then(|m| m.get(&uid)).copied().unwrap_or(uid))
        })
    };
    fn walk(v: &Value, key: &str, name: &dyn Fn(i64) -> Option<String>) -> Value {
        match v {
            Value::Object(m) => {
                let mut o = serde_json::Map::new();
                for (k, x) in m {
                    if k == "tensors" {
                        continue;
                    }
                    o.insert(k.clone(), walk(x, k, name));
                }
                Value::Object(o)
            }
            Value::Array(a) => Value::Array(a.iter().map(|x| walk(x, key, name)).collect()),
            Value::String(s) if key != "operation" => s
                .parse::<i64>()
                .ok()
                .and_then(name)
                .map(Value::String)
                .unwrap_or_else(|| v.clone()),
            Value::Number(n) if uid_key(key) => n
                .as_i64()
                .and_then(name)
                .map(Value::String)
                .unwrap_or_else(|| v.clone()),
            _ => v.clone(),
        }
    }
    walk(&plan["operationGraph"]["nodes"], "", &name)
}

/// `(path, crate value, frontend value)` where two JSON values differ.
pub fn diff(a: &Value, b: &Value, path: &str, out: &mut Vec<(String, String, String)>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => diff(p, q, &format!("{path}/{k}"), out),
                    (p, q) => out.push((format!("{path}/{k}"), show(p), show(q))),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                diff(p, q, &format!("{path}[{i}]"), out);
            }
        }
        (Value::Number(x), Value::Number(y))
            if x.as_f64().zip(y.as_f64()).is_some_and(|(p, q)| p == q) => {}
        _ if a == b => {}
        _ => out.push((path.to_string(), short(a), short(b))),
    }
}

fn show(v: Option<&Value>) -> String {
    v.map(short).unwrap_or_else(|| "(absent)".to_string())
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 120 {
        let mut end = 120;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}...", &s[..end])
    } else {
        s
    }
}

#[cfg(test)]
mod unit {
    use super::*;
    use serde_json::json;

    fn tensor(uid: i64, dims: &[i64], virt: bool, by_value: bool) -> Value {
        json!({"name": uid.to_string(), "dataType": "CUDNN_DATA_FLOAT", "dim": dims,
               "stride": dims.iter().map(|_| 1).collect::<Vec<_>>(),
               "isVirtual": virt, "isByValue": by_value})
    }

    /// x(1) * scale(2, by value) -> v(3, virtual) -> relu -> y(4)
    fn plan(uids: [i64; 4], scale_slot: &str) -> Value {
        let [x, s, v, y] = uids;
        json!({
            "operationGraph": {
                "tensors": [tensor(x, &[2, 3], false, false), tensor(s, &[1, 1], false, true),
                            tensor(v, &[2, 3], true, false), tensor(y, &[2, 3], false, false)],
                "nodes": [
                    {"operation": "CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR", "X": x.to_string(),
                     scale_slot: s.to_string(), "Y": v.to_string()},
                    {"operation": "CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR", "X": v.to_string(),
                     "Y": y.to_string(), "subgraphInputUid": v}
                ]
            },
            "engine": {"payload": {"kernels": [{"kernelParams": {"offsets": [{"uid": s}, {"uid": 999}]}}]}}
        })
    }

    #[test]
    fn unit_map_by_name_then_role() {
        // The frontend gave x and y the crate's uids; its scale is uid 7.
        let ours = plan([1, 2, 3, 4], "B");
        let theirs = plan([1, 7, 2, 4], "B");
        let none = HashMap::new();
        let (map, unmatched) = map_uids(&ours, &theirs, &[1, 4], (&none, &none));
        assert!(unmatched.is_empty(), "{unmatched:?}");
        assert_eq!(map.get(&7), Some(&2));
        assert_eq!(map.get(&1), Some(&1));
        assert_eq!(map.get(&4), Some(&4));
        assert!(!map.contains_key(&2), "a virtual tensor is never mapped");
    }

    #[test]
    fn unit_map_by_value_when_roles_differ() {
        let ours = plan([1, 2, 3, 4], "B");
        let theirs = plan([1, 7, 3, 4], "T");
        let (a, b): (HashMap<i64, String>, HashMap<i64, String>) = (
            [(2, "3F000000".to_string())].into(),
            [(7, "3F000000".to_string())].into(),
        );
        let (map, unmatched) = map_uids(&ours, &theirs, &[1, 4], (&a, &b));
        assert!(unmatched.is_empty(), "{unmatched:?}");
        assert_eq!(map.get(&7), Some(&2));
        // A different value: no match, reported.
        let c: HashMap<i64, String> = [(7, "3E000000".to_string())].into();
        let (map, unmatched) = map_uids(&ours, &theirs, &[1, 4], (&a, &c));
        assert!(!map.contains_key(&7));
        assert_eq!(unmatched.len(), 1, "{unmatched:?}");
    }

    #[test]
    fn unit_remap_everywhere_and_moves_colliding_virtuals() {
        // Frontend scale 7 -> crate 2; the frontend's virtual uid 2 collides.
        let theirs = plan([1, 7, 2, 4], "B");
        let map: HashMap<i64, i64> = [(1, 1), (7, 2), (4, 4)].into();
        let out = remap(&theirs, &map, &[1, 2, 3, 4].into());
        let t = tensors(&out);
        assert!(t[&2].by_value, "the scale is uid 2 now");
        let virt: Vec<i64> = t
            .iter()
            .filter(|(_, x)| x.is_virtual)
            .map(|(u, _)| *u)
            .collect();
        assert_eq!(virt.len(), 1);
        assert!(
            virt[0] > 4,
            "the virtual tensor moved to a fresh uid: {virt:?}"
        );
        let nodes = &out["operationGraph"]["nodes"];
        assert_eq!(nodes[0]["B"], "2");
        assert_eq!(nodes[0]["Y"], virt[0].to_string());
        assert_eq!(nodes[1]["X"], virt[0].to_string());
        assert_eq!(nodes[1]["subgraphInputUid"], virt[0]);
        let offsets = &out["engine"]["payload"]["kernels"][0]["kernelParams"]["offsets"];
        assert_eq!(offsets[0]["uid"], 2);
        assert_eq!(offsets[1]["uid"], 999, "a uid of no tensor is left alone");
    }

    #[test]
    fn unit_remap_moves_what_would_pass_for_their_tensor() {
        // The frontend's virtual uid 5 and its unmatched scalar 7 are uids
        // the crate's graph uses (for tensors the map does not reach): both
        // move; its virtual 9, which the crate does not use, stays.
        let theirs = json!({"operationGraph": {"tensors": [
            tensor(1, &[2, 3], false, false), tensor(5, &[2, 3], true, false),
            tensor(7, &[1, 1], false, true), tensor(9, &[2, 3], true, false)],
            "nodes": [{"X": "1", "Y": "5", "B": "7"}, {"X": "5", "Y": "9"}]}});
        let map: HashMap<i64, i64> = [(1, 1)].into();
        let out = remap(&theirs, &map, &[1, 5, 7, 8].into());
        let t = tensors(&out);
        assert!(t.contains_key(&1) && t.contains_key(&9), "{t:?}");
        assert!(!t.contains_key(&5) && !t.contains_key(&7), "{t:?}");
        assert_eq!(t.len(), 4, "no two tensors merged: {t:?}");
        let n = &out["operationGraph"]["nodes"];
        assert_eq!(
            n[0]["Y"], n[1]["X"],
            "the moved virtual is renamed everywhere"
        );
        assert!(t[&n[0]["B"].as_str().unwrap().parse::<i64>().unwrap()].by_value);
    }

    #[test]
    fn unit_normalized_nodes_ignore_uid_choice() {
        let ours = plan([1, 2, 3, 4], "B");
        let theirs = plan([1, 7, 9, 4], "B");
        let map: HashMap<i64, i64> = [(1, 1), (7, 2), (4, 4)].into();
        let mut d = Vec::new();
        diff(
            &normalized_nodes(&ours, None),
            &normalized_nodes(&theirs, Some(&map)),
            "nodes",
            &mut d,
        );
        assert!(d.is_empty(), "{d:?}");
        // A real difference is found, with its path.
        let other = plan([1, 7, 9, 4], "T");
        diff(
            &normalized_nodes(&ours, None),
            &normalized_nodes(&other, Some(&map)),
            "nodes",
            &mut d,
        );
        assert!(d.iter().any(|(p, _, _)| p == "nodes[0]/B"), "{d:?}");
        assert!(d.iter().any(|(p, _, _)| p == "nodes[0]/T"), "{d:?}");
    }
}
