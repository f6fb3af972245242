//! The conformance patterns of issue 24's attention options: the
//! bottom-right causal mask and the sliding window, alone and with
//! padding, forward (the SDPA operation and the composite) and backward
//! (the composite, as the frontend builds every backward). The frontend
//! side (`sdpa_kwargs` in `xtask/conformance/frontend.py`) reads the
//! `diagonal` and `window` parameters (and `ragged`: the offsets set on
//! the tensors).

use cudnn::graph::{DType, DiagonalAlignment, Graph, SdpaConfig, SdpaImpl};
use serde_json::{Value, json};

use crate::patterns::{Pattern, pattern};

/// One band option case.
#[derive(Clone, Copy)]
struct Band {
    name: &'static str,
    causal: bool,
    bottom_right: bool,
    window: Option<i64>,
    padding: bool,
    /// 128 queries against 512 keys (else 256 against 256).
    cross: bool,
}

impl Band {
    fn config(&self, imp: SdpaImpl, training: bool) -> SdpaConfig {
        let mut c = if self.cross {
            SdpaConfig::new(2, 8, 128, 64, DType::BF16).kv_len(512)
        } else {
            SdpaConfig::new(2, 8, 256, 64, DType::BF16)
        }
        .causal(self.causal)
        .padding(self.padding)
        .training(training)
        .implementation(imp);
        if self.bottom_right {
            c = c.diagonal(DiagonalAlignment::BottomRight);
        }
        if let Some(w) = self.window {
            c = c.sliding_window(w);
        }
        c
    }

    fn json(&self, imp: &str, c: &SdpaConfig, training: bool) -> Value {
        json!({"io": "bf16", "scale": c.scale_value(), "causal": self.causal, "padding": self.padding,
               "dropout": 0.0, "training": training, "implementation": imp,
               "diagonal": if self.bottom_right { "bottom_right" } else { "top_left" },
               "window": self.window})
    }
}

const CASES: [Band; 6] = [
    Band {
        name: "br_causal_cross",
        causal: true,
        bottom_right: true,
        window: None,
        padding: false,
        cross: true,
    },
    Band {
        name: "br_causal_padding",
        causal: true,
        bottom_right: true,
        window: None,
        padding: true,
        cross: true,
    },
    Band {
        name: "window_causal",
        causal: true,
        bottom_right: false,
        window: Some(64),
        padding: false,
        cross: false,
    },
    Band {
        name: "window",
        causal: false,
        bottom_right: false,
        window: Some(64),
        padding: false,
        cross: false,
    },
    Band {
        name: "window_br_causal_cross",
        causal: true,
        bottom_right: true,
        window: Some(64),
        padding: false,
        cross: true,
    },
    Band {
        name: "window_br_causal_padding",
        causal: true,
        bottom_right: true,
        window: Some(64),
        padding: true,
        cross: true,
    },
];

fn rename_extras(g: &mut Graph, extras: [Option<cudnn::graph::Tensor>; 2]) -> cudnn::Result<()> {
    for (t, n) in extras.into_iter().zip(["seq_len_q", "seq_len_kv"]) {
        if let Some(t) = t {
            g.rename(t, n)?;
        }
    }
    Ok(())
}

/// The paged-cache patterns: a decode step and a prefill, forward, the
/// SDPA operation and the composite.
fn paged(out: &mut Vec<Pattern>) {
    let decode = SdpaConfig::new(2, 8, 1, 128, DType::BF16)
        .gqa(2)
        .kv_len(1024)
        .causal_bottom_right()
        .paged(64, 40);
    let prefill = SdpaConfig::new(2, 8, 256, 128, DType::BF16)
        .gqa(2)
        .kv_len(256)
        .causal_bottom_right()
        .paged(64, 10);
    for (case, base) in [("decode", decode), ("prefill", prefill)] {
        for (imp, name) in [
            (SdpaImpl::Native, "native"),
            (SdpaImpl::Composite, "composite"),
        ] {
            let c = base.clone().implementation(imp);
            let params = json!({"io": "bf16", "scale": c.scale_value(), "causal": true, "padding": true,
                "dropout": 0.0, "training": false, "implementation": name, "diagonal": "bottom_right",
                "window": null, "paged_max_seq_len_kv": c.seq_kv});
            let mut pat = pattern(
                format!("sdpa_opt_fwd_{name}_paged_{case}"),
                "sdpa_fwd",
                params,
                move || {
                    let mut g = Graph::new();
                    let q = g.input("q", c.q_spec()?)?;
                    let k = g.input("k", c.k_spec()?)?;
                    let v = g.input("v", c.v_spec()?)?;
                    let f = crate::patterns::sdpa_fwd_any(&mut g, q, k, v, &c)?;
                    g.rename(f.o, "o")?;
                    rename_extras(&mut g, [f.seq_len_q, f.seq_len_kv])?;
                    for (t, n) in [
                        (f.page_table_k, "page_table_k"),
                        (f.page_table_v, "page_table_v"),
                    ] {
                        if let Some(t) = t {
                            g.rename(t, n)?;
                        }
                    }
                    Ok(g)
                },
            );
            pat.composite = imp == SdpaImpl::Composite;
            out.push(pat);
        }
    }
}

/// Renames an attention's ragged offsets as the frontend side reads them.
fn rename_ragged(g: &mut Graph, r: Option<cudnn::graph::SdpaRagged>) -> cudnn::Result<()> {
    if let Some(r) = r {
        for (t, n) in [
            (Some(r.q), "ragged_offset_q"),
            (r.k, "ragged_offset_k"),
            (r.v, "ragged_offset_v"),
            (Some(r.o), "ragged_offset_o"),
        ] {
            if let Some(t) = t {
                g.rename(t, n)?;
            }
        }
    }
    Ok(())
}

/// The ragged (packed THD) pattern: the SDPA operation's forward (causal,
/// training, GQA 8:2). Not here yet: the ragged composites, forward and
/// backward, which differ from the frontend's on cuDNN 9.28 (its forward
/// composite has one more by-value tensor and 17408 bytes of workspace
/// against 13184; the backward 384 bytes more workspace, and an A100 plan
/// where the crate's only engine fails to compile): the host tier
/// (`host/sdpa_ragged`) plans them per target.
fn ragged(out: &mut Vec<Pattern>) {
    let c = SdpaConfig::new(2, 8, 256, 128, DType::BF16)
        .gqa(2)
        .causal(true)
        .training(true)
        .ragged()
        .implementation(SdpaImpl::Native);
    let params = json!({"io": "bf16", "scale": c.scale_value(), "causal": true, "padding": true,
        "dropout": 0.0, "training": true, "implementation": "native", "diagonal": "top_left",
        "window": null, "ragged": true});
    out.push(pattern(
        "sdpa_opt_fwd_native_ragged".to_string(),
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
            rename_extras(&mut g, [f.seq_len_q, f.seq_len_kv])?;
            rename_ragged(&mut g, f.ragged)?;
            Ok(g)
        },
    ));
}

/// Every pattern of the attention options.
pub fn attention_options(out: &mut Vec<Pattern>) {
    paged(out);
    ragged(out);
    for b in CASES {
        for (imp, name) in [
            (SdpaImpl::Native, "native"),
            (SdpaImpl::Composite, "composite"),
        ] {
            let c = b.config(imp, true);
            let mut pat = pattern(
                format!("sdpa_opt_fwd_{name}_{}", b.name),
                "sdpa_fwd",
                b.json(name, &c, true),
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
                    rename_extras(&mut g, [f.seq_len_q, f.seq_len_kv])?;
                    Ok(g)
                },
            );
            pat.composite = imp == SdpaImpl::Composite;
            out.push(pat);
        }
        let c = b.config(SdpaImpl::Auto, true);
        let mut pat = pattern(
            format!("sdpa_opt_bwd_composite_{}", b.name),
            "sdpa_bwd",
            b.json("auto", &c, true),
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
                rename_extras(&mut g, [r.seq_len_q, r.seq_len_kv])?;
                Ok(g)
            },
        );
        pat.composite = true;
        out.push(pat);
    }
}
