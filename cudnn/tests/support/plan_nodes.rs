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
