//! The conformance patterns of issue 24's softmax options (h6): the row max
//! and sum of exponentials as outputs, and attention sinks, forward (the
//! SDPA operation and the composite) and the composite backward with dSink.
//! The frontend side (`softmax_kwargs` in `xtask/conformance/frontend.py`)
//! passes `score_max`, `score_sum_exp`, `sink_token` and `dSink_token`.

use cudnn::graph::{DType, Graph, SdpaConfig, SdpaImpl, SdpaSoftmax};
use serde_json::json;

use crate::patterns::{Pattern, pattern};

fn rename(g: &mut Graph, s: SdpaSoftmax) -> cudnn::Result<()> {
    for (t, n) in [
        (s.max, "max"),
        (s.sum_exp, "sum_exp"),
        (s.sink, "sink"),
        (s.d_sink, "d_sink"),
    ] {
        if let Some(t) = t {
            g.rename(t, n)?;
        }
    }
    Ok(())
}

/// Every pattern of the softmax options.
pub fn softmax_options(out: &mut Vec<Pattern>) {
    let base = || SdpaConfig::new(2, 8, 256, 64, DType::BF16).causal(true);
    let cases = [
        ("max_sum_exp", base().max_sum_exp(true).training(false)),
        ("max_sum_exp_train", base().max_sum_exp(true).training(true)),
        ("sink_train", base().sink(true).training(true)),
    ];
    for (case, c) in cases {
        for (imp, name) in [
            (SdpaImpl::Native, "native"),
            (SdpaImpl::Composite, "composite"),
        ] {
            let c = c.clone().implementation(imp);
            let params = json!({"io": "bf16", "scale": c.scale_value(), "causal": true, "padding": false,
                "dropout": 0.0, "training": c.is_training, "implementation": name, "diagonal": "top_left",
                "window": null, "max_sum_exp": c.max_sum_exp, "sink": c.sink});
            let mut pat = pattern(
                format!("sdpa_softmax_fwd_{name}_{case}"),
                "sdpa_fwd",
                params,
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
                    rename(&mut g, f.softmax)?;
                    Ok(g)
                },
            );
            pat.composite = imp == SdpaImpl::Composite;
            out.push(pat);
        }
    }
    let c = base().sink(true).sink_grad(true);
    let params = json!({"io": "bf16", "scale": c.scale_value(), "causal": true, "padding": false,
        "dropout": 0.0, "training": true, "implementation": "auto", "diagonal": "top_left",
        "window": null, "sink": true, "d_sink": true});
    let mut pat = pattern(
        "sdpa_softmax_bwd_composite_sink_d_sink".to_string(),
        "sdpa_bwd",
        params,
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
            rename(&mut g, r.softmax)?;
            Ok(g)
        },
    );
    pat.composite = true;
    out.push(pat);
}
