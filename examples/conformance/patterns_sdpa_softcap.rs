//! The conformance patterns of issue 24's logit softcap: the forward
//! through the SDPA operation (its score-modifier subgraph) and the
//! composite, training and inference, MHA and GQA, and the backward
//! (the composite, as the frontend builds every backward). The frontend
//! side (`softcap_kwargs` in `xtask/conformance/frontend.py`) passes the
//! frontend's `score_mod` / `score_mod_bprop` callbacks, written as its
//! Softcap score modifier is (div, tanh, mul; mul, tanh_backward, div).

use cudnn::graph::{AttnLayout, DType, Graph, SdpaConfig, SdpaImpl};
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
    json!({"io": "bf16", "scale": c.scale_value(), "causal": false, "padding": false,
           "dropout": 0.0, "training": training, "implementation": imp,
           "diagonal": "top_left", "window": null, "softcap": c.softcap})
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
                        let f = g.sdpa_forward(q, k, v, &c)?;
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
}
