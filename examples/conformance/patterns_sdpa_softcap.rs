//! The conformance patterns of issue 24's logit softcap: the forward
//! through the SDPA operation (its score-modifier subgraph) and the
//! composite, training and inference, MHA and GQA, and the backward
//! (the composite, as the frontend builds every backward). The frontend
//! side (`softcap_kwargs` in `xtask/conformance/frontend.py`) passes the
//! frontend's `score_mod` / `score_mod_bprop` callbacks, written as its
//! Softcap score modifier is (div, tanh, mul; mul, tanh_backward, div).
//! The softcap with a causal mask (top-left; bottom-right with a window):
//! the frontend refuses any mask beside its score mod (a rule of its
//! own: cuDNN plans these). For the top-left causal composites the
//! frontend side writes the causal mask into its score mod (as a frontend
//! user would), so those rows are compared and cross-loaded; the SDPA
//! operation's rows and the bottom-right windowed composites are the
//! documented difference `DSM` (the crate's plan JSON round-tripped in
//! `host/sdpa_softcap`).

use cudnn::graph::{AttnLayout, DType, DiagonalAlignment, Graph, SdpaConfig, SdpaImpl};
use serde_json::json;

use crate::patterns::{Pattern, pattern};

/// Gemma 2's attention-logit cap.
const CAP: f64 = 50.0;

fn cases() -> [(&'static str, SdpaConfig); 2] {
    [
        (
            "mha",
            SdpaConfig::new(2, 8, 256, 128, DType::BF16).softcap(CAP),
        ),
        (
            "gqa_cross_bhsd",
            SdpaConfig::new(2, 8, 128, 64, DType::BF16)
                .kv_len(256)
                .gqa(2)
                .layout(AttnLayout::Bhsd)
                .softcap(30.0),
        ),
    ]
}

fn params(c: &SdpaConfig, imp: &str, training: bool) -> serde_json::Value {
    let diagonal = if c.diagonal == DiagonalAlignment::BottomRight {
        "bottom_right"
    } else {
        "top_left"
    };
    json!({"io": "bf16", "scale": c.scale_value(), "causal": c.is_causal, "padding": false,
           "dropout": 0.0, "training": training, "implementation": imp,
           "diagonal": diagonal, "window": c.window, "softcap": c.softcap})
}

fn fwd_graph(c: &SdpaConfig) -> cudnn::Result<Graph> {
    let mut g = Graph::new();
    let q = g.input("q", c.q_spec()?)?;
    let k = g.input("k", c.k_spec()?)?;
    let v = g.input("v", c.v_spec()?)?;
    let f = crate::patterns::sdpa_fwd_any(&mut g, q, k, v, c)?;
    g.rename(f.o, "o")?;
    if let Some(s) = f.stats {
        g.rename(s, "stats")?;
    }
    Ok(g)
}

fn bwd_graph(c: &SdpaConfig) -> cudnn::Result<Graph> {
    let mut g = Graph::new();
    let q = g.input("q", c.q_spec()?)?;
    let k = g.input("k", c.k_spec()?)?;
    let v = g.input("v", c.v_spec()?)?;
    let o = g.input("o", c.o_spec()?)?;
    let d_o = g.input("do", c.o_spec()?)?;
    let st = g.input("stats", c.stats_spec()?)?;
    let r = g.sdpa_backward(q, k, v, o, d_o, st, c)?;
    g.rename(r.dq, "dq")?;
    g.rename(r.dk, "dk")?;
    g.rename(r.dv, "dv")?;
    Ok(g)
}

/// The softcap with masks (the frontend refuses them: difference `DSM`).
fn with_masks(out: &mut Vec<Pattern>) {
    let causal = SdpaConfig::new(2, 8, 256, 128, DType::BF16)
        .softcap(CAP)
        .causal(true)
        .training(true);
    let br_window = SdpaConfig::new(2, 8, 128, 128, DType::BF16)
        .kv_len(384)
        .softcap(CAP)
        .causal_bottom_right()
        .sliding_window(64)
        .training(true);
    for (case, base) in [("causal", causal), ("bottom_right_window", br_window)] {
        for (imp, name) in [
            (SdpaImpl::Native, "native"),
            (SdpaImpl::Composite, "composite"),
        ] {
            let c = base.clone().implementation(imp);
            let mut pat = pattern(
                format!("sdpa_softcap_{case}_fwd_{name}"),
                "sdpa_fwd",
                params(&c, name, true),
                move || fwd_graph(&c),
            );
            pat.composite = imp == SdpaImpl::Composite;
            out.push(pat);
        }
        let c = base.clone();
        let mut pat = pattern(
            format!("sdpa_softcap_{case}_bwd_composite"),
            "sdpa_bwd",
            params(&c, "auto", true),
            move || bwd_graph(&c),
        );
        pat.composite = true;
        out.push(pat);
    }
}

/// Every softcap pattern.
pub fn softcap(out: &mut Vec<Pattern>) {
    for (case, base) in cases() {
        for training in [false, true] {
            for (imp, name) in [
                (SdpaImpl::Native, "native"),
                (SdpaImpl::Composite, "composite"),
            ] {
                let c = base.clone().implementation(imp).training(training);
                let mode = if training { "train" } else { "infer" };
                let mut pat = pattern(
                    format!("sdpa_softcap_fwd_{name}_{case}_{mode}"),
                    "sdpa_fwd",
                    params(&c, name, training),
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
                        Ok(g)
                    },
                );
                pat.composite = imp == SdpaImpl::Composite;
                out.push(pat);
            }
        }
        let c = base.clone().training(true);
        let mut pat = pattern(
            format!("sdpa_softcap_bwd_composite_{case}"),
            "sdpa_bwd",
            params(&c, "auto", true),
            move || {
                let mut g = Graph::new();
                let q = g.input("q", c.q_spec()?)?;
                let k = g.input("k", c.k_spec()?)?;
                let v = g.input("v", c.v_spec()?)?;
                let o = g.input("o", c.o_spec()?)?;
                let d_o = g.input("do", c.o_spec()?)?;
                let st = g.input("stats", c.stats_spec()?)?;
                let r = g.sdpa_backward(q, k, v, o, d_o, st, &c)?;
                g.rename(r.dq, "dq")?;
                g.rename(r.dk, "dk")?;
                g.rename(r.dv, "dv")?;
                Ok(g)
            },
        );
        pat.composite = true;
        out.push(pat);
    }
    with_masks(out);
}
