//! The conformance patterns of issue 24's additive bias and ALiBi: forward
//! (the SDPA operation and the composite) with a full bias, a
//! batch-broadcast bias and ALiBi (causal), and backward (the composite, as
//! the frontend builds every backward) with dBias (full and
//! batch-broadcast) and with ALiBi. The frontend side (the `h4` block of
//! `xtask/conformance/frontend.py`) passes `bias`, `dBias` and
//! `use_alibi_mask`.

use cudnn::graph::{AttnBias, DType, Graph, SdpaConfig, SdpaImpl, Tensor};
use serde_json::json;

use crate::patterns::{Pattern, pattern};

fn rename(g: &mut Graph, named: [(Option<Tensor>, &str); 3]) -> cudnn::Result<()> {
    for (t, n) in named {
        if let Some(t) = t {
            g.rename(t, n)?;
        }
    }
    Ok(())
}

/// Every pattern of the bias options.
pub fn attention_bias(out: &mut Vec<Pattern>) {
    let base = || SdpaConfig::new(2, 8, 256, 64, DType::BF16).training(true);
    let fwd_cases = [
        ("bias_full", base().bias(AttnBias::full())),
        (
            "bias_batch_broadcast",
            base().bias(AttnBias::new(false, true)),
        ),
        ("alibi_causal", base().causal(true).alibi(true)),
    ];
    for (case, cfg) in fwd_cases {
        for (imp, name) in [
            (SdpaImpl::Native, "native"),
            (SdpaImpl::Composite, "composite"),
        ] {
            let c = cfg.clone().implementation(imp);
            let params = json!({"io": "bf16", "scale": c.scale_value(), "causal": c.is_causal,
                "padding": false, "dropout": 0.0, "training": true, "implementation": name,
                "diagonal": "top_left", "window": null, "alibi": c.alibi, "heads": c.heads});
            let mut pat = pattern(
                format!("sdpa_opt_fwd_{name}_{case}"),
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
                    rename(
                        &mut g,
                        [
                            (f.bias.bias, "bias"),
                            (f.bias.alibi_slopes, "alibi_slopes"),
                            (None, ""),
                        ],
                    )?;
                    Ok(g)
                },
            );
            pat.composite = imp == SdpaImpl::Composite;
            out.push(pat);
        }
    }
    let bwd_cases = [
        (
            "bias_full_dbias",
            base().bias(AttnBias::full().with_dbias(true)),
        ),
        (
            "bias_batch_broadcast_dbias",
            base().bias(AttnBias::new(false, true).with_dbias(true)),
        ),
        ("alibi_causal", base().causal(true).alibi(true)),
    ];
    for (case, c) in bwd_cases {
        let params = json!({"io": "bf16", "scale": c.scale_value(), "causal": c.is_causal,
            "padding": false, "dropout": 0.0, "training": true, "implementation": "auto",
            "diagonal": "top_left", "window": null, "alibi": c.alibi, "heads": c.heads});
        let mut pat = pattern(
            format!("sdpa_opt_bwd_composite_{case}"),
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
                rename(
                    &mut g,
                    [
                        (r.bias.bias, "bias"),
                        (r.bias.alibi_slopes, "alibi_slopes"),
                        (r.bias.dbias, "dbias"),
                    ],
                )?;
                Ok(g)
            },
        );
        pat.composite = true;
        out.push(pat);
    }
}
