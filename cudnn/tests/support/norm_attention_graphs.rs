//! The normalization and attention graphs the host tier plans
//! (`host/graph_norm_attention`): builders per norm mode and attention
//! configuration, and what counts as a typed refusal.
#![allow(dead_code)]

use cudnn::Error;
use cudnn::graph::*;

pub type Builder = fn() -> Result<Graph, Error>;

pub fn rm(dtype: DType, dims: &[i64]) -> Result<TensorSpec, Error> {
    TensorSpec::row_major(dtype, dims)
}

// ---- norm graphs ----

pub const LN_X: [i64; 4] = [256, 768, 1, 1];
pub const BN_X: [i64; 4] = [8, 64, 16, 16];

pub fn layer_norm_fwd(dtype: DType, phase: NormPhase, fuse: &str) -> Result<Graph, Error> {
    let mut g = Graph::new();
    let x = g.input("x", rm(dtype, &LN_X)?)?;
    // Fused after a layer norm, cuDNN's engines want scale and bias no wider
    // than x (f32 parameters with bf16 x: no engine); alone, f32 is fine.
    let pdt = if fuse.is_empty() { DType::F32 } else { dtype };
    let s = g.input("scale", rm(pdt, &[1, 768, 1, 1])?)?;
    let b = g.input("bias", rm(pdt, &[1, 768, 1, 1])?)?;
    let n = g.layer_norm(x, s, b, 1e-5, phase)?;
    let y = match fuse {
        "relu" => g.relu(n.y)?,
        "add" => {
            let r = g.input("residual", rm(dtype, &LN_X)?)?;
            g.add(n.y, r)?
        }
        _ => n.y,
    };
    g.output(y, dtype)?;
    Ok(g)
}

pub fn rms_norm_fwd(dtype: DType, phase: NormPhase, bias: bool) -> Result<Graph, Error> {
    let mut g = Graph::new();
    let x = g.input("x", rm(dtype, &LN_X)?)?;
    let s = g.input("scale", rm(DType::F32, &[1, 768, 1, 1])?)?;
    let b = if bias {
        Some(g.input("bias", rm(DType::F32, &[1, 768, 1, 1])?)?)
    } else {
        None
    };
    let n = g.rms_norm(x, s, b, 1e-6, phase)?;
    g.output(n.y, dtype)?;
    Ok(g)
}

pub fn batch_norm_fwd(dtype: DType, running: bool, fuse: &str) -> Result<Graph, Error> {
    let mut g = Graph::new();
    let x = g.input("x", TensorSpec::nhwc(dtype, &BN_X)?)?;
    let p = TensorSpec::nhwc(DType::F32, &[1, 64, 1, 1])?;
    let s = g.input("scale", p.clone())?;
    let b = g.input("bias", p.clone())?;
    let r = if running {
        Some(RunningStats {
            mean: g.input("running_mean", p.clone())?,
            var: g.input("running_var", p)?,
            momentum: 0.1,
        })
    } else {
        None
    };
    let n = g.batch_norm(x, s, b, 1e-5, r)?;
    let y = match fuse {
        "relu" => g.relu(n.y)?,
        "add_relu" => {
            let z = g.input("residual", TensorSpec::nhwc(dtype, &BN_X)?)?;
            let a = g.add(n.y, z)?;
            g.relu(a)?
        }
        _ => n.y,
    };
    g.output(y, dtype)?;
    Ok(g)
}

pub fn batch_norm_infer(dtype: DType) -> Result<Graph, Error> {
    let mut g = Graph::new();
    let x = g.input("x", TensorSpec::nhwc(dtype, &BN_X)?)?;
    let p = TensorSpec::nhwc(DType::F32, &[1, 64, 1, 1])?;
    let s = g.input("scale", p.clone())?;
    let b = g.input("bias", p.clone())?;
    let m = g.input("mean", p.clone())?;
    let v = g.input("var", p)?;
    let y = g.batch_norm_inference(x, s, b, m, v, 1e-5)?;
    let y = g.relu(y)?;
    g.output(y, dtype)?;
    Ok(g)
}

pub fn norm_bwd(mode: NormMode, dtype: DType) -> Result<Graph, Error> {
    let mut g = Graph::new();
    let (xd, pd, sd): (&[i64], Vec<i64>, Vec<i64>) = match mode {
        NormMode::Batch => (&BN_X, mode.param_dims(&BN_X), mode.stats_dims(&BN_X)),
        _ => (&LN_X, mode.param_dims(&LN_X), mode.stats_dims(&LN_X)),
    };
    let spec = |d: DType, dims: &[i64]| {
        if mode == NormMode::Batch {
            TensorSpec::nhwc(d, dims)
        } else {
            rm(d, dims)
        }
    };
    let x = g.input("x", spec(dtype, xd)?)?;
    let dy = g.input("dy", spec(dtype, xd)?)?;
    let s = g.input("scale", spec(DType::F32, &pd)?)?;
    let inv = g.input("inv_variance", spec(DType::F32, &sd)?)?;
    let grads = match mode {
        NormMode::Layer => {
            let m = g.input("mean", spec(DType::F32, &sd)?)?;
            g.layer_norm_backward(dy, x, s, m, inv)?
        }
        NormMode::Rms => g.rms_norm_backward(dy, x, s, inv, false)?,
        NormMode::Batch => {
            let m = g.input("mean", spec(DType::F32, &sd)?)?;
            g.batch_norm_backward(dy, x, s, m, inv)?
        }
        other => {
            return Err(Error::invalid(
                "norm_bwd mode",
                "a mode this helper builds",
                format!("{other:?}"),
            ));
        }
    };
    g.output(grads.dx, dtype)?;
    Ok(g)
}

pub fn norm_cases() -> Vec<(&'static str, Builder)> {
    use NormPhase::*;
    vec![
        ("layer_norm fwd train f16", || {
            layer_norm_fwd(DType::F16, Training, "")
        }),
        ("layer_norm fwd train bf16", || {
            layer_norm_fwd(DType::BF16, Training, "")
        }),
        ("layer_norm fwd infer bf16", || {
            layer_norm_fwd(DType::BF16, Inference, "")
        }),
        ("layer_norm fwd train bf16 + relu", || {
            layer_norm_fwd(DType::BF16, Training, "relu")
        }),
        ("layer_norm fwd infer bf16 + add", || {
            layer_norm_fwd(DType::BF16, Inference, "add")
        }),
        ("layer_norm fwd train f16 + add", || {
            layer_norm_fwd(DType::F16, Training, "add")
        }),
        ("rms_norm fwd train bf16", || {
            rms_norm_fwd(DType::BF16, Training, false)
        }),
        ("rms_norm fwd infer bf16", || {
            rms_norm_fwd(DType::BF16, Inference, false)
        }),
        ("rms_norm fwd train f16 + bias", || {
            rms_norm_fwd(DType::F16, Training, true)
        }),
        ("batch_norm fwd train f16", || {
            batch_norm_fwd(DType::F16, false, "")
        }),
        ("batch_norm fwd train f16 + running", || {
            batch_norm_fwd(DType::F16, true, "")
        }),
        ("batch_norm fwd train bf16 + running + relu", || {
            batch_norm_fwd(DType::BF16, true, "relu")
        }),
        ("batch_norm fwd train f16 + add + relu", || {
            batch_norm_fwd(DType::F16, false, "add_relu")
        }),
        ("batch_norm infer f16 (pointwise) + relu", || {
            batch_norm_infer(DType::F16)
        }),
        ("layer_norm bwd bf16", || {
            norm_bwd(NormMode::Layer, DType::BF16)
        }),
        ("rms_norm bwd bf16", || norm_bwd(NormMode::Rms, DType::BF16)),
        ("batch_norm bwd f16", || {
            norm_bwd(NormMode::Batch, DType::F16)
        }),
    ]
}

// ---- attention graphs ----

/// [`fwd_parts`](crate::support::sdpa_plans::fwd_parts) with the statistics
/// (where training saves them) named `stats`.
pub fn sdpa_fwd(cfg: &SdpaConfig) -> Result<(Graph, SdpaForward<Option<Tensor>>), Error> {
    let (mut g, f) = crate::support::sdpa_plans::fwd_parts(cfg)?;
    if let Some(s) = f.stats {
        g.rename(s, "stats")?;
    }
    Ok((g, f))
}

/// [`bwd_parts`](crate::support::sdpa_plans::bwd_parts) with `dk` and
/// `dv` named too.
pub fn sdpa_bwd(cfg: &SdpaConfig) -> Result<(Graph, SdpaBackward), Error> {
    let (mut g, b) = crate::support::sdpa_plans::bwd_parts(cfg)?;
    g.rename(b.dk, "dk")?;
    g.rename(b.dv, "dv")?;
    Ok((g, b))
}

pub fn base(dtype: DType) -> SdpaConfig {
    SdpaConfig::new(2, 8, 256, 64, dtype)
}

pub fn sdpa_cases() -> Vec<(&'static str, bool, SdpaConfig)> {
    use DType::*;
    vec![
        ("fwd infer f16", false, base(F16)),
        ("fwd infer bf16", false, base(BF16)),
        ("fwd train bf16", false, base(BF16).training(true)),
        (
            "fwd train bf16 causal",
            false,
            base(BF16).training(true).causal(true),
        ),
        ("fwd infer f16 scale 0.5", false, base(F16).scale(0.5)),
        (
            "fwd train bf16 padding",
            false,
            base(BF16).training(true).padding(true),
        ),
        (
            "fwd train bf16 dropout 0.1",
            false,
            base(BF16).training(true).dropout(0.1),
        ),
        (
            "fwd train bf16 gqa 8:2",
            false,
            base(BF16).training(true).gqa(2),
        ),
        (
            "fwd train bf16 bhsd",
            false,
            base(BF16).training(true).layout(AttnLayout::Bhsd),
        ),
        (
            "fwd infer bf16 s_kv 512 d 128",
            false,
            SdpaConfig::new(2, 8, 128, 128, BF16).kv_len(512),
        ),
        (
            "fwd train bf16 causal gqa padding bhsd",
            false,
            base(BF16)
                .training(true)
                .causal(true)
                .gqa(4)
                .padding(true)
                .layout(AttnLayout::Bhsd),
        ),
        ("bwd f16", true, base(F16)),
        ("bwd bf16", true, base(BF16)),
        ("bwd bf16 causal", true, base(BF16).causal(true)),
        ("bwd bf16 padding", true, base(BF16).padding(true)),
        ("bwd bf16 gqa 8:2", true, base(BF16).gqa(2)),
        ("bwd bf16 bhsd", true, base(BF16).layout(AttnLayout::Bhsd)),
        ("bwd bf16 dropout 0.1", true, base(BF16).dropout(0.1)),
    ]
}

pub fn sdpa_graph(cfg: &SdpaConfig, bwd: bool) -> Result<Graph, Error> {
    if bwd {
        sdpa_bwd(cfg).map(|x| x.0)
    } else {
        sdpa_fwd(cfg).map(|x| x.0)
    }
}

pub fn is_typed_refusal(e: &Error) -> bool {
    matches!(
        e,
        Error::Unsupported { .. }
            | Error::Cudnn { .. }
            | Error::InvalidArgument { .. }
            | Error::Mismatch { .. }
    )
}
