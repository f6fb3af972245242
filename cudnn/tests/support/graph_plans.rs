//! Valid plans of every graph family, for the plan-file tests and fuzz
//! targets: convolution (precompiled, and + scale), matmul (+ relu), layer norm, SDPA
//! forward (native, causal, training; the causal composite with max /
//! sum_exp and a sink; FP8, causal, training), SDPA backward (composite, with
//! scratch tensors in the workspace) and a paged KV cache decode (composite:
//! page tables and sequence lengths, the guarded inputs, and Kᵀ loaded
//! transposed from its pages).
#![allow(dead_code)]

use cudnn::Result;
use cudnn::graph::*;

/// `(name, graph)` of every family.
pub fn graphs() -> Result<Vec<(&'static str, Graph)>> {
    Ok(vec![
        ("conv_plain", conv_plain(2)?),
        ("conv", conv(8)?),
        ("matmul", matmul()?),
        ("norm", norm()?),
        ("sdpa_fwd", sdpa(false)?),
        ("sdpa_fwd_composite", sdpa_composite_softmax()?),
        ("sdpa_fp8_fwd", sdpa_fp8()?),
        ("sdpa_bwd", sdpa(true)?),
        ("sdpa_paged", sdpa_paged()?),
    ])
}

/// A conv fprop (NHWC f16, batch `n`) followed by a scale (a by-value scalar).
pub fn conv(n: i64) -> Result<Graph> {
    let mut g = Graph::new();
    let x = g.input("x", TensorSpec::nhwc(DType::F16, &[n, 64, 28, 28])?)?;
    let w = g.input("w", TensorSpec::nhwc(DType::F16, &[64, 64, 3, 3])?)?;
    let y = g.conv_fprop(x, w, &ConvParams::new_2d([1, 1], [1, 1], [1, 1]))?;
    let y = g.scale(y, 0.5)?;
    g.output(y, DType::F16)?;
    g.rename(y, "y")?;
    Ok(g)
}

/// A plain conv fprop (f32 NCHW, precompiled engines), batch `n`.
pub fn conv_plain(n: i64) -> Result<Graph> {
    let mut g = Graph::new();
    let x = g.input("x", TensorSpec::nchw(DType::F32, &[n, 8, 16, 16])?)?;
    let w = g.input("w", TensorSpec::nchw(DType::F32, &[8, 8, 3, 3])?)?;
    let y = g.conv_fprop(x, w, &ConvParams::new_2d([1, 1], [1, 1], [1, 1]))?;
    g.output(y, DType::F32)?;
    g.rename(y, "y")?;
    Ok(g)
}

pub fn matmul() -> Result<Graph> {
    let mut g = Graph::new();
    let a = g.input("a", TensorSpec::row_major(DType::BF16, &[4, 128, 64])?)?;
    let b = g.input("b", TensorSpec::row_major(DType::BF16, &[4, 64, 256])?)?;
    let c = g.matmul(a, b)?;
    let c = g.relu(c)?;
    g.output(c, DType::BF16)?;
    g.rename(c, "c")?;
    Ok(g)
}

pub fn norm() -> Result<Graph> {
    let mut g = Graph::new();
    let x = g.input("x", TensorSpec::row_major(DType::BF16, &[256, 768, 1, 1])?)?;
    let s = g.input("scale", TensorSpec::row_major(DType::F32, &[1, 768, 1, 1])?)?;
    let b = g.input("bias", TensorSpec::row_major(DType::F32, &[1, 768, 1, 1])?)?;
    let n = g.layer_norm(x, s, b, 1e-5, NormPhase::Training)?;
    g.output(n.y, DType::BF16)?;
    Ok(g)
}

pub fn sdpa_config() -> SdpaConfig {
    SdpaConfig::new(2, 4, 128, 64, DType::BF16)
        .training(true)
        .causal(true)
}

/// SDPA forward (native where the loaded cuDNN has it), or the composite
/// backward (scratch tensors in the workspace).
pub fn sdpa(backward: bool) -> Result<Graph> {
    if backward {
        let cfg = sdpa_config().implementation(SdpaImpl::Composite);
        Ok(crate::support::norm_attention_graphs::sdpa_bwd(&cfg)?.0)
    } else {
        crate::support::sdpa_plans::fwd_graph(&sdpa_config())
    }
}

/// A causal composite SDPA training forward with the row max / sum of
/// exponentials and a sink: from cuDNN 9.21 its causal mask is one
/// DIAGONAL_BAND_MASK node and its softmax one SOFTMAX node with every
/// output and the sink (issue 34).
pub fn sdpa_composite_softmax() -> Result<Graph> {
    let cfg = SdpaConfig::new(2, 4, 128, 64, DType::BF16)
        .training(true)
        .causal(true)
        .max_sum_exp(true)
        .sink(true)
        .implementation(SdpaImpl::Composite);
    crate::support::sdpa_plans::fwd_graph(&cfg)
}

/// A causal FP8 attention training forward (from cuDNN 9.21 its mask and
/// softmax are cuDNN's band and softmax operations; Hopper and newer).
pub fn sdpa_fp8() -> Result<Graph> {
    let c = crate::support::fp8_graphs::sdpa_fwd_cfg(128, true, true, DType::Fp8E4M3);
    crate::support::fp8_graphs::sdpa_fwd_graph(&c)
}

/// A decode step against a paged KV cache (composite; 1,024 keys in pages of
/// 64, 16 to a table row, D = 128, GQA).
pub fn sdpa_paged() -> Result<Graph> {
    let cfg = SdpaConfig::new(4, 8, 1, 128, DType::BF16)
        .gqa(2)
        .kv_len(1024)
        .causal_bottom_right()
        .paged(64, 80)
        .implementation(SdpaImpl::Composite);
    crate::support::sdpa_plans::fwd_graph(&cfg)
}

/// The plan file of every family for `target` (families the loaded cuDNN
/// cannot plan are left out, with a note on stderr).
pub fn plan_files(target: &Target) -> Result<Vec<(&'static str, String)>> {
    let mut out = Vec::new();
    for (name, g) in graphs()? {
        match Plan::build(&g.build()?, target, &Policy::default()) {
            Ok((p, _)) => out.push((name, p.serialize()?)),
            Err(e) => eprintln!("  note: no {name} plan here: {e}"),
        }
    }
    Ok(out)
}

/// Split a plan file into (everything before the JSON, the JSON).
pub fn split_plan_file(file: &str) -> Option<(&str, &str)> {
    let at = file.find("\njson ")?;
    let head = &file[..at + 1];
    let rest = &file[at + 1..];
    let nl = rest.find('\n')?;
    let json = rest[nl + 1..].strip_suffix('\n')?;
    Some((head, json))
}

/// A plan file with its JSON replaced.
pub fn with_json(head: &str, json: &str) -> String {
    format!("{head}json {}\n{json}\n", json.len())
}

/// Whether the loaded cuDNN can plan graphs here (>= 9.8).
pub fn can_plan() -> bool {
    cudnn::graph::require_graph_support().is_ok()
}

/// A host-tier test that needs cuDNN >= 9.8 to plan graphs: on a stack
/// with an older cuDNN it is reported as ignored (with a note on stderr),
/// never as passed.
pub fn host9(
    name: &str,
    f: impl FnOnce() -> crate::support::TestResult + Send + 'static,
) -> libtest_mimic::Trial {
    if crate::support::libs_missing().is_none() && !can_plan() {
        eprintln!("skipped: host::{name}: needs cuDNN >= 9.8 (this stack has an older cuDNN)");
        return crate::support::trial(format!("host::{name}"), f).with_ignored_flag(true);
    }
    crate::support::host(name, f)
}

/// cuDNN itself, with none of the crate's checks: finalize an execution plan
/// from `json` for an H200, through the raw C API (for the tests that show
/// what cuDNN does with a plan JSON the crate refuses). Returns cuDNN's
/// status, or the crate's error while setting up the device properties.
pub fn raw_plan_finalize(json: &str) -> cudnn::Result<u32> {
    use cudnn::graph::backend::{Descriptor, attr, kind};
    use cudnn::sys::cudnn as sys;
    let _ = cudnn::graph::driver::ensure()?;
    let api = sys::load()?;
    let mut props = Descriptor::<kind::DeviceProp>::new()?;
    let mut pj = DeviceSpec::h200().to_json().into_bytes();
    pj.push(0);
    props.set(attr::DEVICEPROP_JSON_REPRESENTATION, &pj)?;
    props.finalize()?;
    let mut bytes: Vec<u8> = json.bytes().filter(|&b| b != 0).collect();
    bytes.push(0);
    let mut plan: sys::cudnnBackendDescriptor_t = std::ptr::null_mut();
    let raw_props = props.as_raw();
    // SAFETY: plain C API calls on a descriptor created here and destroyed
    // at the end; every pointer is to live memory of the type and count given.
    unsafe {
        let st = api.cudnnBackendCreateDescriptor(
            sys::cudnnBackendDescriptorType_t::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR,
            &mut plan,
        )?;
        if st != sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
            return Ok(st.0);
        }
        let _ = api.cudnnBackendSetAttribute(
            plan,
            sys::cudnnBackendAttributeName_t::CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP,
            sys::cudnnBackendAttributeType_t::CUDNN_TYPE_BACKEND_DESCRIPTOR,
            1,
            (&raw_props as *const sys::cudnnBackendDescriptor_t).cast(),
        )?;
        let _ = api.cudnnBackendSetAttribute(
            plan,
            sys::cudnnBackendAttributeName_t::CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION,
            sys::cudnnBackendAttributeType_t::CUDNN_TYPE_CHAR,
            bytes.len() as i64,
            bytes.as_ptr().cast(),
        )?;
        let st = api.cudnnBackendFinalize(plan)?;
        let _ = api.cudnnBackendDestroyDescriptor(plan);
        Ok(st.0)
    }
}

/// An SDPA forward plan JSON whose statistics are set directly on the SDPA
/// operation (`stats`), rewritten into the form NVIDIA's frontend 1.32
/// writes on cuDNN >= 9.21: the statistics written through a SOFTMAX
/// sub-descriptor, between two new virtual f32 score tensors
/// `[b, h, s_q, s_kv]`. `None` when the plan has no such node.
pub fn softmax_form(json: &str) -> Option<String> {
    use serde_json::{Value, json};
    let mut v: Value = serde_json::from_str(json).ok()?;
    let og = v.get_mut("operationGraph")?;
    let tensors = og.get("tensors")?.as_array()?.clone();
    let dims_of = |name: &str| {
        tensors
            .iter()
            .find(|t| t["name"] == name)
            .and_then(|t| t["dim"].as_array().cloned())
    };
    let next = tensors
        .iter()
        .filter_map(|t| t["name"].as_str()?.parse::<i64>().ok())
        .max()?
        + 1;
    let nodes = og.get_mut("nodes")?.as_array_mut()?;
    let node = nodes.iter_mut().find(|n| {
        n["operation"] == "CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR" && n.get("stats").is_some()
    })?;
    let q = dims_of(node["Q"].as_str()?)?;
    let k = dims_of(node["K"].as_str()?)?;
    let (b, h, sq, skv) = (q.first()?, q.get(1)?, q.get(2)?, k.get(2)?);
    let m = node.as_object_mut()?;
    let stats = m.remove("stats")?;
    m.insert(
        "softmax".into(),
        json!({
            "operation": "CUDNN_BACKEND_OPERATION_SOFTMAX_DESCRIPTOR",
            "X": next.to_string(),
            "Y": (next + 1).to_string(),
            "statsDesc": stats,
        }),
    );
    let (hh, ss, kk) = (h.as_i64()?, sq.as_i64()?, skv.as_i64()?);
    let scores = |name: i64| {
        json!({
            "name": name.to_string(), "dataType": "CUDNN_DATA_FLOAT",
            "dim": [b, h, sq, skv], "stride": [hh * ss * kk, ss * kk, kk, 1],
            "isVirtual": true, "isByValue": false, "vectCount": 1, "vectDim": -1,
            "ptrAlignment": 16, "reordering": "CUDNN_TENSOR_REORDERING_NONE"
        })
    };
    let (x, y) = (scores(next), scores(next + 1));
    let ts = v.pointer_mut("/operationGraph/tensors")?.as_array_mut()?;
    ts.push(x);
    ts.push(y);
    Some(v.to_string())
}
