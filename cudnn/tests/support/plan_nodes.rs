//! Reading the plan JSON cuDNN writes (`Plan::cudnn_json`): its operation
//! nodes and tensors, for tests that check how a graph was built.

/// The first object in `v` whose `operation` is `op`.
pub fn find_op<'a>(
    v: &'a serde_json::Value,
    op: &str,
) -> Option<&'a serde_json::Map<String, serde_json::Value>> {
    match v {
        serde_json::Value::Object(m) => {
            if m.get("operation").and_then(|o| o.as_str()) == Some(op) {
                return Some(m);
            }
            m.values().find_map(|x| find_op(x, op))
        }
        serde_json::Value::Array(a) => a.iter().find_map(|x| find_op(x, op)),
        _ => None,
    }
}

/// A uid as the plan JSON writes it (a string or a number), as text.
pub fn uid_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

/// The `dataType` of the tensor with uid `uid` in the plan JSON (its
/// `operationGraph.tensors`, each named by its uid).
pub fn tensor_dtype(v: &serde_json::Value, uid: &str) -> Option<String> {
    v.pointer("/operationGraph/tensors")?
        .as_array()?
        .iter()
        .find(|t| t.get("name").map(uid_text).as_deref() == Some(uid))?
        .get("dataType")?
        .as_str()
        .map(str::to_string)
}

/// Every object in `v` whose `operation` is `op`, in document order.
pub fn find_ops<'a>(
    v: &'a serde_json::Value,
    op: &str,
) -> Vec<&'a serde_json::Map<String, serde_json::Value>> {
    let mut out = Vec::new();
    fn walk<'a>(
        v: &'a serde_json::Value,
        op: &str,
        out: &mut Vec<&'a serde_json::Map<String, serde_json::Value>>,
    ) {
        match v {
            serde_json::Value::Object(m) => {
                if m.get("operation").and_then(|o| o.as_str()) == Some(op) {
                    out.push(m);
                }
                m.values().for_each(|x| walk(x, op, out));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, op, out)),
            _ => {}
        }
    }
    walk(v, op, &mut out);
    out
}

/// A node's tensor field (`X`, `Y`, `B`, `statsDesc`, ...) as uid text.
pub fn field(n: &serde_json::Map<String, serde_json::Value>, key: &str) -> Option<String> {
    n.get(key).map(uid_text)
}

/// The pointwise nodes of `v` in `mode` (`CUDNN_POINTWISE_...`).
pub fn pointwise<'a>(
    v: &'a serde_json::Value,
    mode: &str,
) -> Vec<&'a serde_json::Map<String, serde_json::Value>> {
    find_ops(v, "CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR")
        .into_iter()
        .filter(|n| n.get("pointwiseMode").and_then(|m| m.as_str()) == Some(mode))
        .collect()
}

/// How a plan of an attention composite with a top-left causal mask (and
/// no other mask) builds it, by the loaded cuDNN `loaded`: from 9.21 one
/// diagonal band mask node comparing with `CMP_GE`, with no sequence
/// lengths and no left bound, and no `GEN_INDEX`; before, at least two
/// `GEN_INDEX` nodes, all computing in INT32, and no band node. The band
/// node, from 9.21.
pub fn top_left_causal<'a>(
    v: &'a serde_json::Value,
    loaded: (u32, u32, u32),
    what: &str,
) -> Result<Option<&'a serde_json::Map<String, serde_json::Value>>, String> {
    let band = find_ops(v, "CUDNN_BACKEND_OPERATION_DIAGONAL_BAND_MASK_DESCRIPTOR");
    let gen_index = pointwise(v, "CUDNN_POINTWISE_GEN_INDEX");
    eprintln!(
        "{what} on cuDNN {loaded:?}: {} band mask, {} GEN_INDEX nodes",
        band.len(),
        gen_index.len()
    );
    if loaded < (9, 21, 0) {
        if !band.is_empty() || gen_index.len() < 2 {
            return Err(format!(
                "{what}: before 9.21 the GEN_INDEX compare: {} band, {} GEN_INDEX",
                band.len(),
                gen_index.len()
            ));
        }
        if let Some(n) = gen_index
            .iter()
            .find(|n| n.get("mathPrec").and_then(|m| m.as_str()) != Some("CUDNN_DATA_INT32"))
        {
            return Err(format!("{what}: a GEN_INDEX node not in INT32: {n:?}"));
        }
        return Ok(None);
    }
    let [b] = band.as_slice() else {
        return Err(format!("{what}: {} band mask nodes, want 1", band.len()));
    };
    if !gen_index.is_empty() {
        return Err(format!(
            "{what}: {} GEN_INDEX nodes besides the band",
            gen_index.len()
        ));
    }
    if b.get("comparisonMode").and_then(|m| m.as_str()) != Some("CUDNN_POINTWISE_CMP_GE") {
        return Err(format!(
            "{what}: the band does not compare with CMP_GE: {b:?}"
        ));
    }
    for k in ["seqLenQDesc", "seqLenKVDesc", "leftBoundDesc"] {
        if b.contains_key(k) {
            return Err(format!("{what}: a top-left causal band sets {k}: {b:?}"));
        }
    }
    Ok(Some(b))
}
