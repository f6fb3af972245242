//! The FP8 patterns of the conformance tier (issue 25): the per-tensor
//! scaled FP8 matmul as `Graph::fp8_matmul` builds it; frontend.py's
//! `fam_fp8_matmul` makes the same calls a frontend user makes (matmul, two
//! descale multiplies, the amax reduction, the output scale).

use cudnn::graph::{DType, FP8_BWD_SCALE_NAMES, Fp8MatmulScales, Fp8SdpaConfig, Graph, TensorSpec};
use serde_json::json;

use super::{Pattern, p};

/// `[batch, M, K] @ [batch, K, N]`, `b` stored K-major (the layout FP8
/// tensor cores read).
const DIMS: [i64; 4] = [4, 256, 512, 1024];

/// FP8 attention forward patterns: the crate's composite against the
/// frontend's `sdpa_fp8` with the composite implementation.
fn sdpa_fwd(out: &mut Vec<Pattern>) {
    for (causal, training, d) in [(false, false, 128), (true, true, 128), (true, false, 64)] {
        let mut c = Fp8SdpaConfig::new(2, 4, 256, 256, d);
        c.is_causal = causal;
        c.is_training = training;
        let tag = format!(
            "d{d}{}{}",
            if causal { "_causal" } else { "" },
            if training { "_training" } else { "" }
        );
        let mut pat = p(
            format!("sdpa_fp8_fwd_{tag}"),
            "sdpa_fp8_fwd",
            json!({"io": "f32", "scale": c.scale_value(), "causal": causal, "training": training}),
            move || {
                let mut g = Graph::new();
                let q = g.input("q", c.q_spec()?)?;
                let k = g.input("k", c.kv_spec()?)?;
                let v = g.input("v", c.kv_spec()?)?;
                let f = if c.is_training {
                    g.sdpa_fp8_forward_training(q, k, v, &c)?.map_stats(Some)
                } else {
                    g.sdpa_fp8_forward(q, k, v, &c)?.map_stats(|()| None)
                };
                for (t, n) in [
                    (f.descale_q, "descale_q"),
                    (f.descale_k, "descale_k"),
                    (f.descale_v, "descale_v"),
                    (f.descale_s, "descale_s"),
                    (f.scale_s, "scale_s"),
                    (f.scale_o, "scale_o"),
                    (f.o, "o"),
                    (f.amax_s, "amax_s"),
                    (f.amax_o, "amax_o"),
                ] {
                    g.rename(t, n)?;
                }
                if let Some(s) = f.stats {
                    g.rename(s, "stats")?;
                }
                Ok(g)
            },
        );
        // Decomposed like the crate's composite SDPA (documented difference D4).
        pat.composite = true;
        out.push(pat);
    }
}

/// FP8 attention backward patterns (composite on both sides).
fn sdpa_bwd(out: &mut Vec<Pattern>) {
    for (causal, grad) in [(false, DType::Fp8E4M3), (true, DType::Fp8E5M2)] {
        let mut c = Fp8SdpaConfig::new(2, 4, 256, 256, 128);
        c.is_causal = causal;
        c.is_training = true;
        let tag = format!(
            "d128{}_{}",
            if causal { "_causal" } else { "" },
            grad.name()
        );
        let mut pat = p(
            format!("sdpa_fp8_bwd_{tag}"),
            "sdpa_fp8_bwd",
            json!({"io": "f32", "scale": c.scale_value(), "causal": causal}),
            move || {
                let mut g = Graph::new();
                let q = g.input("q", c.q_spec()?)?;
                let k = g.input("k", c.kv_spec()?)?;
                let v = g.input("v", c.kv_spec()?)?;
                let o = g.input("o", c.q_spec()?.with_dtype(c.o_dtype))?;
                let d_o = g.input("do", c.q_spec()?.with_dtype(grad))?;
                let st = g.input("stats", c.stats_spec()?)?;
                let b = g.sdpa_fp8_backward(q, k, v, o, d_o, st, grad, &c)?;
                for (t, n) in [(b.dq, "dq"), (b.dk, "dk"), (b.dv, "dv")] {
                    g.rename(t, n)?;
                }
                for (t, n) in b
                    .amax
                    .iter()
                    .zip(["amax_dq", "amax_dk", "amax_dv", "amax_dp"])
                {
                    g.rename(*t, n)?;
                }
                for (t, n) in b.scales.iter().zip(FP8_BWD_SCALE_NAMES) {
                    g.rename(*t, n)?;
                }
                Ok(g)
            },
        );
        pat.composite = true;
        out.push(pat);
    }
}

/// FP8 matmul and attention patterns.
pub fn fp8(out: &mut Vec<Pattern>) {
    sdpa_fwd(out);
    sdpa_bwd(out);
    use DType::{BF16, Fp8E4M3, Fp8E5M2};
    let cases = [
        (Fp8E4M3, Fp8E4M3, BF16, true),
        (Fp8E4M3, Fp8E4M3, BF16, false),
        (Fp8E4M3, Fp8E4M3, Fp8E4M3, true),
        (Fp8E4M3, Fp8E5M2, Fp8E5M2, true),
    ];
    for (at, bt, ct, amax) in cases {
        let tag = format!(
            "{}_{}_{}{}",
            at.name(),
            bt.name(),
            ct.name(),
            if amax { "_amax" } else { "" }
        );
        out.push(p(
            format!("fp8_matmul_{tag}"),
            "fp8_matmul",
            json!({"io": if ct.is_fp8() { "f32" } else { ct.name() }, "amax": amax}),
            move || {
                let [batch, m, k, n] = DIMS;
                let mut g = Graph::new();
                let a = g.input("a", TensorSpec::row_major(at, &[batch, m, k])?)?;
                let b = g.input("b", TensorSpec::new(bt, &[batch, k, n], &[k * n, 1, k])?)?;
                let one = TensorSpec::row_major(DType::F32, &[1, 1, 1])?;
                let descale_a = g.input("descale_a", one.clone())?;
                let descale_b = g.input("descale_b", one.clone())?;
                let scale_c = if ct.is_fp8() {
                    Some(g.input("scale_c", one)?)
                } else {
                    None
                };
                let scales = Fp8MatmulScales {
                    descale_a,
                    descale_b,
                    scale_c,
                };
                let r = g.fp8_matmul(a, b, &scales, amax)?;
                g.output(r.c, ct)?;
                g.rename(r.c, "c")?;
                if let Some(x) = r.amax {
                    g.rename(x, "amax")?;
                }
                Ok(g)
            },
        ));
    }
}
