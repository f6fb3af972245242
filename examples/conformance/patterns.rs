//! The patterns of the conformance tier: each builds its graph with the
//! crate and describes it (family and user-level parameters) for the
//! frontend side (`xtask/conformance/frontend.py`), which builds the same
//! graph from the description with NVIDIA's frontend. Every tensor a user
//! names (inputs and outputs) is named by its role, on both sides.

use cudnn::graph::{
    AttnLayout, ConvParams, DType, Graph, NormPhase, RunningStats, SdpaConfig, SdpaForward,
    SdpaImpl, Tensor, TensorSpec,
};
use std::collections::HashMap;

use serde_json::{Value, json};

#[path = "patterns_fp8.rs"]
mod patterns_fp8;

/// One graph of the tier.
pub struct Pattern {
    /// Unique, stable name.
    pub name: String,
    /// The frontend builder's family (`fam_<family>` in frontend.py).
    pub family: &'static str,
    /// User-level parameters for the frontend side.
    pub params: Value,
    /// An SDPA built as the composite on the crate's side (decompositions
    /// are a documented difference).
    pub composite: bool,
    build: Box<dyn Fn() -> cudnn::Result<Graph> + Send + Sync>,
}

impl Pattern {
    /// The crate's graph.
    pub fn graph(&self) -> cudnn::Result<Graph> {
        (self.build)()
    }
}

/// A pattern (for the pattern files of other sections).
pub fn pattern(
    name: impl Into<String>,
    family: &'static str,
    params: Value,
    build: impl Fn() -> cudnn::Result<Graph> + Send + Sync + 'static,
) -> Pattern {
    p(name, family, params, build)
}

fn p(
    name: impl Into<String>,
    family: &'static str,
    params: Value,
    build: impl Fn() -> cudnn::Result<Graph> + Send + Sync + 'static,
) -> Pattern {
    Pattern {
        name: name.into(),
        family,
        params,
        composite: false,
        build: Box::new(build),
    }
}

fn spec(dt: DType, layout: &str, dims: &[i64]) -> cudnn::Result<TensorSpec> {
    if layout == "nhwc" {
        TensorSpec::nhwc(dt, dims)
    } else {
        TensorSpec::nchw(dt, dims)
    }
}

const CONV_X: [i64; 4] = [16, 64, 28, 28];
/// The factor of the `scale` epilogue step (frontend.py uses the same).
const EPILOGUE_SCALE: f64 = 0.5;
const CONV_W: [i64; 4] = [64, 64, 3, 3];

/// `set_out_layout`: the frontend infers channels-last strides for a
/// convolution's output; a frontend user with NCHW data sets them (as the
/// crate makes the output like the input).
fn conv_json(dt: DType, layout: &str, epilogue: &[&str]) -> Value {
    json!({"io": dt.name(), "pad": [1, 1], "stride": [1, 1], "dilation": [1, 1], "epilogue": epilogue,
           "set_out_layout": layout == "nchw"})
}

fn conv_params() -> ConvParams {
    ConvParams::new_2d([1, 1], [1, 1], [1, 1])
}

fn convs(out: &mut Vec<Pattern>) {
    for layout in ["nhwc", "nchw"] {
        for dt in [DType::F32, DType::F16, DType::BF16] {
            let tag = format!("{layout}_{}", dt.name());
            out.push(p(
                format!("conv_fprop_{tag}"),
                "conv_fprop",
                conv_json(dt, layout, &[]),
                move || {
                    let mut g = Graph::new();
                    let x = g.input("x", spec(dt, layout, &CONV_X)?)?;
                    let w = g.input("w", spec(dt, layout, &CONV_W)?)?;
                    let y = g.conv_fprop(x, w, &conv_params())?;
                    g.output(y, dt)?;
                    g.rename(y, "y")?;
                    Ok(g)
                },
            ));
            out.push(p(
                format!("conv_dgrad_{tag}"),
                "conv_dgrad",
                conv_json(dt, layout, &[]),
                move || {
                    let mut g = Graph::new();
                    let dy = g.input("dy", spec(dt, layout, &CONV_X)?)?;
                    let w = g.input("w", spec(dt, layout, &CONV_W)?)?;
                    let dx = g.conv_dgrad(dy, w, &CONV_X, &conv_params())?;
                    g.output(dx, dt)?;
                    g.rename(dx, "dx")?;
                    Ok(g)
                },
            ));
            out.push(p(
                format!("conv_wgrad_{tag}"),
                "conv_wgrad",
                conv_json(dt, layout, &[]),
                move || {
                    let mut g = Graph::new();
                    let x = g.input("x", spec(dt, layout, &CONV_X)?)?;
                    let dy = g.input("dy", spec(dt, layout, &CONV_X)?)?;
                    let dw = g.conv_wgrad(x, dy, &CONV_W, &conv_params())?;
                    g.output(dw, dt)?;
                    g.rename(dw, "dw")?;
                    Ok(g)
                },
            ));
        }
    }
}

/// Apply an epilogue step with the crate (the frontend side applies the
/// same steps by name); `extra` holds the step inputs made beforehand.
fn step(
    g: &mut Graph,
    y: cudnn::graph::Tensor,
    s: &str,
    extra: &HashMap<&str, cudnn::graph::Tensor>,
) -> cudnn::Result<cudnn::graph::Tensor> {
    let get = |n: &str| {
        extra
            .get(n)
            .copied()
            .ok_or_else(|| cudnn::Error::invalid("pattern input", "not made", n))
    };
    match s {
        "bias" => g.bias(y, get("bias")?),
        "add" => g.add(y, get("z")?),
        "mul" => g.mul(y, get("z")?),
        "scale" => g.scale(y, EPILOGUE_SCALE),
        "relu" => g.relu(y),
        "gelu" => g.gelu_erf(y),
        "sigmoid" => g.sigmoid(y),
        "tanh" => g.tanh(y),
        other => Err(cudnn::Error::invalid("epilogue step", "unknown", other)),
    }
}

fn conv_epilogues(out: &mut Vec<Pattern>) {
    let chains: &[&[&str]] = &[
        &["bias", "relu"],
        &["bias"],
        &["relu"],
        &["bias", "gelu"],
        &["bias", "sigmoid"],
        &["bias", "tanh"],
        &["add", "relu"],
        &["mul"],
        &["scale", "bias", "relu"],
    ];
    for chain in chains {
        let dt = DType::F16;
        let chain: Vec<&'static str> = chain.to_vec();
        out.push(p(
            format!("conv_fprop_{}_nhwc_f16", chain.join("_")),
            "conv_fprop",
            conv_json(dt, "nhwc", &chain),
            move || {
                let mut g = Graph::new();
                let x = g.input("x", spec(dt, "nhwc", &CONV_X)?)?;
                let w = g.input("w", spec(dt, "nhwc", &CONV_W)?)?;
                let mut extra = HashMap::new();
                if chain.contains(&"bias") {
                    extra.insert("bias", g.input("bias", spec(dt, "nhwc", &[1, 64, 1, 1])?)?);
                }
                if chain.contains(&"add") || chain.contains(&"mul") {
                    extra.insert("z", g.input("z", spec(dt, "nhwc", &CONV_X)?)?);
                }
                let mut y = g.conv_fprop(x, w, &conv_params())?;
                for s in &chain {
                    y = step(&mut g, y, s, &extra)?;
                }
                g.output(y, dt)?;
                g.rename(y, "y")?;
                Ok(g)
            },
        ));
    }
}

/// The backward of conv + ReLU: the ReLU gradient (from the saved input
/// `x`) fused before the data gradient.
fn dgrad_drelu(out: &mut Vec<Pattern>) {
    let dt = DType::F16;
    out.push(p(
        "conv_dgrad_drelu_nhwc_f16",
        "conv_dgrad",
        conv_json(dt, "nhwc", &["drelu"]),
        move || {
            let mut g = Graph::new();
            let dy = g.input("dy", spec(dt, "nhwc", &CONV_X)?)?;
            let w = g.input("w", spec(dt, "nhwc", &CONV_W)?)?;
            let x = g.input("x", spec(dt, "nhwc", &CONV_X)?)?;
            let dx = g.conv_dgrad(dy, w, &CONV_X, &conv_params())?;
            let dx = g.relu_backward(dx, x)?;
            g.output(dx, dt)?;
            g.rename(dx, "dx")?;
            Ok(g)
        },
    ));
}

fn matmuls(out: &mut Vec<Pattern>) {
    /// Name, A dims, B dims, epilogue, data type.
    type Case = (
        &'static str,
        [i64; 3],
        [i64; 3],
        &'static [&'static str],
        DType,
    );
    const BF: DType = DType::BF16;
    let cases: &[Case] = &[
        ("batched", [4, 256, 512], [4, 512, 1024], &[], BF),
        ("broadcast", [4, 256, 512], [1, 512, 1024], &[], BF),
        ("batched", [4, 256, 512], [4, 512, 1024], &[], DType::F16),
        (
            "batched_bias_gelu",
            [4, 256, 512],
            [4, 512, 1024],
            &["bias", "gelu"],
            BF,
        ),
        (
            "broadcast_bias_gelu",
            [4, 256, 512],
            [1, 512, 1024],
            &["bias", "gelu"],
            BF,
        ),
        (
            "batched_bias_gelu",
            [4, 256, 512],
            [4, 512, 1024],
            &["bias", "gelu"],
            DType::F16,
        ),
    ];
    for &(tag, a, b, chain, dt) in cases {
        let chain: Vec<&'static str> = chain.to_vec();
        out.push(p(
            format!("matmul_{tag}_{}", dt.name()),
            "matmul",
            json!({"io": dt.name(), "epilogue": chain}),
            move || {
                let mut g = Graph::new();
                let ta = g.input("a", TensorSpec::row_major(dt, &a)?)?;
                let tb = g.input("b", TensorSpec::row_major(dt, &b)?)?;
                let mut extra = HashMap::new();
                if chain.contains(&"bias") {
                    extra.insert(
                        "bias",
                        g.input("bias", TensorSpec::row_major(dt, &[1, 1, b[2]])?)?,
                    );
                }
                let mut y = g.matmul(ta, tb)?;
                for s in &chain {
                    y = step(&mut g, y, s, &extra)?;
                }
                g.output(y, dt)?;
                g.rename(y, "y")?;
                Ok(g)
            },
        ));
    }
}

const NORM_X: [i64; 4] = [256, 1024, 1, 1];
const BN_X: [i64; 4] = [16, 64, 28, 28];

fn norms(out: &mut Vec<Pattern>) {
    let dt = DType::BF16;
    for (kind, training) in [
        ("layer", true),
        ("layer", false),
        ("rms", true),
        ("rms", false),
    ] {
        let stats: Vec<&str> = match (kind, training) {
            (_, false) => vec![],
            ("layer", true) => vec!["mean", "inv_variance"],
            _ => vec!["inv_variance"],
        };
        let phase = if training { "training" } else { "inference" };
        out.push(p(
            format!("{kind}_norm_fwd_{phase}_bf16"),
            if kind == "layer" {
                "layer_norm"
            } else {
                "rms_norm"
            },
            json!({"io": dt.name(), "training": training, "stats": stats}),
            move || {
                let mut g = Graph::new();
                let x = g.input("x", TensorSpec::nchw(dt, &NORM_X)?)?;
                let pd = [1, NORM_X[1], 1, 1];
                let s = g.input("scale", TensorSpec::nchw(DType::F32, &pd)?)?;
                let phase = if training {
                    NormPhase::Training
                } else {
                    NormPhase::Inference
                };
                let o = if kind == "layer" {
                    let b = g.input("bias", TensorSpec::nchw(DType::F32, &pd)?)?;
                    g.layer_norm(x, s, b, 1e-5, phase)?
                } else {
                    g.rms_norm(x, s, None, 1e-5, phase)?
                };
                g.output(o.y, dt)?;
                g.rename(o.y, "y")?;
                if let Some(m) = o.mean {
                    g.rename(m, "mean")?;
                }
                if let Some(i) = o.inv_variance {
                    g.rename(i, "inv_variance")?;
                }
                Ok(g)
            },
        ));
    }
    for kind in ["layer", "rms", "batch"] {
        let xd = if kind == "batch" { BN_X } else { NORM_X };
        out.push(p(
            format!("{kind}_norm_bwd_bf16"),
            "norm_backward",
            json!({"io": dt.name(), "kind": kind, "dbias": false, "set_out_layout": true}),
            move || {
                let mut g = Graph::new();
                let layout = |d: &[i64]| TensorSpec::nchw(dt, d);
                let dy = g.input("dy", layout(&xd)?)?;
                let x = g.input("x", layout(&xd)?)?;
                let (pd, sd): (Vec<i64>, Vec<i64>) = if kind == "batch" {
                    (vec![1, xd[1], 1, 1], vec![1, xd[1], 1, 1])
                } else {
                    (vec![1, xd[1], 1, 1], vec![xd[0], 1, 1, 1])
                };
                let s = g.input("scale", TensorSpec::nchw(DType::F32, &pd)?)?;
                let mean = if kind == "rms" {
                    None
                } else {
                    Some(g.input("mean", TensorSpec::nchw(DType::F32, &sd)?)?)
                };
                let iv = g.input("inv_variance", TensorSpec::nchw(DType::F32, &sd)?)?;
                let r = match (kind, mean) {
                    ("layer", Some(m)) => g.layer_norm_backward(dy, x, s, m, iv)?,
                    ("batch", Some(m)) => g.batch_norm_backward(dy, x, s, m, iv)?,
                    _ => g.rms_norm_backward(dy, x, s, iv, false)?,
                };
                g.output(r.dx, dt)?;
                g.rename(r.dx, "dx")?;
                g.rename(r.dscale, "dscale")?;
                if let Some(b) = r.dbias {
                    g.rename(b, "dbias")?;
                }
                Ok(g)
            },
        ));
    }
    out.push(p(
        "batch_norm_fwd_inference_bf16",
        "bn_inference_pointwise",
        json!({"io": dt.name(), "epsilon": 1e-5, "set_out_layout": true}),
        move || {
            let mut g = Graph::new();
            let x = g.input("x", TensorSpec::nhwc(dt, &BN_X)?)?;
            let pd = [1, BN_X[1], 1, 1];
            let f32 = |g: &mut Graph, n: &str| g.input(n, TensorSpec::nhwc(DType::F32, &pd)?);
            let (s, b) = (f32(&mut g, "scale")?, f32(&mut g, "bias")?);
            let (m, v) = (f32(&mut g, "mean")?, f32(&mut g, "var")?);
            let y = g.batch_norm_inference(x, s, b, m, v, 1e-5)?;
            g.output(y, dt)?;
            g.rename(y, "y")?;
            Ok(g)
        },
    ));
    for running in [false, true] {
        let tag = if running { "_running" } else { "" };
        out.push(p(
            format!("batch_norm_fwd_training{tag}_bf16"),
            "batch_norm",
            json!({"io": dt.name()}),
            move || {
                let mut g = Graph::new();
                let x = g.input("x", TensorSpec::nhwc(dt, &BN_X)?)?;
                let pd = [1, BN_X[1], 1, 1];
                let s = g.input("scale", TensorSpec::nhwc(DType::F32, &pd)?)?;
                let b = g.input("bias", TensorSpec::nhwc(DType::F32, &pd)?)?;
                let run = if running {
                    Some(RunningStats {
                        mean: g.input("running_mean", TensorSpec::nhwc(DType::F32, &pd)?)?,
                        var: g.input("running_var", TensorSpec::nhwc(DType::F32, &pd)?)?,
                        momentum: 0.1,
                    })
                } else {
                    None
                };
                let o = g.batch_norm(x, s, b, 1e-5, run)?;
                g.output(o.y, dt)?;
                g.rename(o.y, "y")?;
                for (t, n) in [
                    (o.mean, "mean"),
                    (o.inv_variance, "inv_variance"),
                    (o.running_mean, "next_running_mean"),
                    (o.running_var, "next_running_var"),
                ] {
                    if let Some(t) = t {
                        g.rename(t, n)?;
                    }
                }
                Ok(g)
            },
        ));
    }
}

#[derive(Clone, Copy)]
struct Attn {
    causal: bool,
    padding: bool,
    gqa: bool,
    dropout: f64,
    training: bool,
    /// Q, K, V, O stored BHSD (else BSHD).
    bhsd: bool,
    /// Cross-attention: 512 keys for 256 queries.
    cross: bool,
}

impl Attn {
    fn tag(&self) -> String {
        let mut s = String::new();
        for (on, t) in [
            (self.causal, "_causal"),
            (self.padding, "_padding"),
            (self.gqa, "_gqa"),
            (self.dropout > 0.0, "_dropout"),
            (self.bhsd, "_bhsd"),
            (self.cross, "_cross"),
            (self.training, "_training"),
        ] {
            if on {
                s.push_str(t);
            }
        }
        s
    }

    fn config(&self, imp: SdpaImpl) -> SdpaConfig {
        let mut c = SdpaConfig::new(2, 8, 256, 64, DType::BF16)
            .layout(if self.bhsd {
                AttnLayout::Bhsd
            } else {
                AttnLayout::Bshd
            })
            .causal(self.causal)
            .padding(self.padding)
            .training(self.training)
            .implementation(imp);
        if self.gqa {
            c = c.gqa(2);
        }
        if self.cross {
            c = c.kv_len(512);
        }
        if self.dropout > 0.0 {
            c = c.dropout(self.dropout);
        }
        c
    }

    fn json(&self, imp: &str, c: &SdpaConfig) -> Value {
        json!({"io": "bf16", "scale": c.scale_value(), "causal": self.causal, "padding": self.padding,
               "dropout": self.dropout, "training": self.training, "implementation": imp})
    }
}

fn rename_extras(g: &mut Graph, extras: [Option<cudnn::graph::Tensor>; 4]) -> cudnn::Result<()> {
    for (t, n) in
        extras
            .into_iter()
            .zip(["seq_len_q", "seq_len_kv", "dropout_seed", "dropout_offset"])
    {
        if let Some(t) = t {
            g.rename(t, n)?;
        }
    }
    Ok(())
}

fn attention(out: &mut Vec<Pattern>) {
    let plain = Attn {
        causal: false,
        padding: false,
        gqa: false,
        dropout: 0.0,
        training: true,
        bhsd: false,
        cross: false,
    };
    let fwd = [
        plain,
        Attn {
            training: false,
            ..plain
        },
        Attn {
            causal: true,
            ..plain
        },
        Attn {
            padding: true,
            ..plain
        },
        Attn { gqa: true, ..plain },
        Attn {
            dropout: 0.1,
            training: false,
            ..plain
        },
        Attn {
            dropout: 0.1,
            ..plain
        },
        Attn {
            bhsd: true,
            ..plain
        },
        Attn {
            cross: true,
            ..plain
        },
    ];
    for a in fwd {
        for (imp, name) in [
            (SdpaImpl::Native, "native"),
            (SdpaImpl::Composite, "composite"),
        ] {
            let c = a.config(imp);
            // The SDPA operation cannot save statistics with dropout.
            if imp == SdpaImpl::Native && a.dropout > 0.0 && a.training {
                continue;
            }
            let mut pat = p(
                format!("sdpa_fwd_{name}{}", a.tag()),
                "sdpa_fwd",
                a.json(name, &c),
                move || {
                    let mut g = Graph::new();
                    let q = g.input("q", c.q_spec()?)?;
                    let k = g.input("k", c.k_spec()?)?;
                    let v = g.input("v", c.v_spec()?)?;
                    let f = crate::patterns::sdpa_fwd_any(&mut g, q, k, v, &c)?;
                    g.rename(f.o, "o")?;
                    if let Some(s) = f.stats {
                        g.rename(s, "stats")?;
                    }
                    rename_extras(
                        &mut g,
                        [f.seq_len_q, f.seq_len_kv, f.dropout_seed, f.dropout_offset],
                    )?;
                    Ok(g)
                },
            );
            pat.composite = imp == SdpaImpl::Composite;
            out.push(pat);
        }
    }
    // Auto on both sides: the implementation each picks must be the same
    // (the crate's resolve(), the frontend's AUTO).
    for a in [
        plain,
        Attn {
            training: false,
            ..plain
        },
        Attn {
            causal: true,
            ..plain
        },
        Attn {
            dropout: 0.1,
            training: false,
            ..plain
        },
        Attn {
            dropout: 0.1,
            ..plain
        },
    ] {
        let c = a.config(SdpaImpl::Auto);
        let composite = matches!(c.resolve(false), Ok(SdpaImpl::Composite));
        let mut pat = p(
            format!("sdpa_fwd_auto{}", a.tag()),
            "sdpa_fwd",
            a.json("auto", &c),
            move || {
                let mut g = Graph::new();
                let q = g.input("q", c.q_spec()?)?;
                let k = g.input("k", c.k_spec()?)?;
                let v = g.input("v", c.v_spec()?)?;
                let f = crate::patterns::sdpa_fwd_any(&mut g, q, k, v, &c)?;
                g.rename(f.o, "o")?;
                if let Some(s) = f.stats {
                    g.rename(s, "stats")?;
                }
                rename_extras(
                    &mut g,
                    [f.seq_len_q, f.seq_len_kv, f.dropout_seed, f.dropout_offset],
                )?;
                Ok(g)
            },
        );
        pat.composite = composite;
        out.push(pat);
    }
    let bwd = [
        plain,
        Attn {
            causal: true,
            ..plain
        },
        Attn {
            padding: true,
            ..plain
        },
        Attn { gqa: true, ..plain },
        Attn {
            dropout: 0.1,
            ..plain
        },
        Attn {
            bhsd: true,
            ..plain
        },
        Attn {
            cross: true,
            ..plain
        },
    ];
    for a in bwd {
        // The frontend 1.32 builds every backward as the composite (so does
        // the crate's Auto).
        let c = a.config(SdpaImpl::Auto);
        let mut pat = p(
            format!("sdpa_bwd_composite{}", a.tag()),
            "sdpa_bwd",
            a.json("auto", &c),
            move || {
                let mut g = Graph::new();
                let q = g.input("q", c.q_spec()?)?;
                let k = g.input("k", c.k_spec()?)?;
                let v = g.input("v", c.v_spec()?)?;
                let o = g.input("o", c.o_spec()?)?;
                let d_o = g.input("do", c.o_spec()?)?;
                let st = g.input("stats", c.stats_spec()?)?;
                let b = g.sdpa_backward(q, k, v, o, d_o, st, &c)?;
                g.rename(b.dq, "dq")?;
                g.rename(b.dk, "dk")?;
                g.rename(b.dv, "dv")?;
                rename_extras(
                    &mut g,
                    [b.seq_len_q, b.seq_len_kv, b.dropout_seed, b.dropout_offset],
                )?;
                Ok(g)
            },
        );
        pat.composite = true;
        out.push(pat);
    }
}

/// Every pattern, in a stable order.
pub fn all() -> Vec<Pattern> {
    let mut out = Vec::new();
    convs(&mut out);
    conv_epilogues(&mut out);
    dgrad_drelu(&mut out);
    matmuls(&mut out);
    norms(&mut out);
    attention(&mut out);
    patterns_fp8::fp8(&mut out);
    crate::patterns_sdpa_options::attention_options(&mut out);
    crate::patterns_sdpa_softcap::softcap(&mut out);
    crate::patterns_sdpa_bias::attention_bias(&mut out);
    crate::patterns_sdpa_softmax::softmax_options(&mut out);
    out
}

/// The attention forward in the config's mode (`Graph::sdpa_forward_training`
/// when `is_training` is set, `Graph::sdpa_forward` otherwise), the
/// statistics as an `Option`.
pub(crate) fn sdpa_fwd_any(
    g: &mut Graph,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    c: &SdpaConfig,
) -> cudnn::Result<SdpaForward<Option<Tensor>>> {
    Ok(if c.is_training {
        g.sdpa_forward_training(q, k, v, c)?.map_stats(Some)
    } else {
        g.sdpa_forward(q, k, v, c)?.map_stats(|()| None)
    })
}
