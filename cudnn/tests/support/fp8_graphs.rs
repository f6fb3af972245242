//! The FP8 graphs the host, fuzz and GPU tiers build (`host/graph_fp8`,
//! `gpu/fp8_graph`): an FP8 matmul per operand types, output and layout.
#![allow(dead_code)]

use cudnn::Error;
use cudnn::graph::*;

/// One FP8 matmul case: `[batch, M, K] @ [batch, K, N]`.
#[derive(Clone, Copy, Debug)]
pub struct MatmulCase {
    pub a: DType,
    pub b: DType,
    /// The stored type of `c` (an FP8 type gets `scale_c`).
    pub out: DType,
    pub amax: bool,
    /// `b` stored with K contiguous (column-major, the "TN" layout FP8
    /// tensor cores read); otherwise row-major (N contiguous).
    pub b_k_major: bool,
    pub dims: [i64; 4],
}

impl MatmulCase {
    pub fn new(a: DType, b: DType, out: DType) -> Self {
        Self {
            a,
            b,
            out,
            amax: true,
            b_k_major: true,
            dims: [2, 128, 256, 64],
        }
    }
    pub fn tag(&self) -> String {
        format!(
            "{}x{}->{}{}{}",
            self.a,
            self.b,
            self.out,
            if self.amax { "+amax" } else { "" },
            if self.b_k_major { "" } else { " b-row-major" }
        )
    }
    pub fn b_spec(&self) -> Result<TensorSpec, Error> {
        let [batch, _, k, n] = self.dims;
        if self.b_k_major {
            TensorSpec::new(self.b, &[batch, k, n], &[k * n, 1, k])
        } else {
            TensorSpec::row_major(self.b, &[batch, k, n])
        }
    }
    /// The graph, its tensors named `a`, `b`, `descale_a`, `descale_b`,
    /// `scale_c` (FP8 outputs), `c` and `amax`.
    pub fn graph(&self) -> Result<Graph, Error> {
        let [batch, m, k, _] = self.dims;
        let mut g = Graph::new();
        let a = g.input("a", TensorSpec::row_major(self.a, &[batch, m, k])?)?;
        let b = g.input("b", self.b_spec()?)?;
        let one = TensorSpec::row_major(DType::F32, &[1, 1, 1])?;
        let descale_a = g.input("descale_a", one.clone())?;
        let descale_b = g.input("descale_b", one.clone())?;
        let scale_c = if self.out.is_fp8() {
            Some(g.input("scale_c", one)?)
        } else {
            None
        };
        let r = g.fp8_matmul(
            a,
            b,
            &Fp8MatmulScales {
                descale_a,
                descale_b,
                scale_c,
            },
            self.amax,
        )?;
        g.output(r.c, self.out)?;
        g.rename(r.c, "c")?;
        if let Some(m) = r.amax {
            g.rename(m, "amax")?;
        }
        Ok(g)
    }
}

/// The cases the host tier plans per target.
pub fn matmul_cases() -> Vec<MatmulCase> {
    use DType::*;
    let mut v = vec![
        MatmulCase::new(Fp8E4M3, Fp8E4M3, BF16),
        MatmulCase::new(Fp8E4M3, Fp8E4M3, Fp8E4M3),
        MatmulCase::new(Fp8E4M3, Fp8E5M2, BF16),
        MatmulCase::new(Fp8E5M2, Fp8E4M3, Fp8E5M2),
        MatmulCase::new(Fp8E4M3, Fp8E4M3, F32),
        MatmulCase::new(Fp8E4M3, Fp8E4M3, F16),
        MatmulCase {
            amax: false,
            ..MatmulCase::new(Fp8E4M3, Fp8E4M3, BF16)
        },
        MatmulCase {
            b_k_major: false,
            ..MatmulCase::new(Fp8E4M3, Fp8E4M3, BF16)
        },
    ];
    v.push(MatmulCase {
        b_k_major: false,
        ..MatmulCase::new(Fp8E4M3, Fp8E4M3, Fp8E4M3)
    });
    v
}

/// One FP8 attention forward case.
pub fn sdpa_fwd_cfg(d: i64, causal: bool, training: bool, o: DType) -> Fp8SdpaConfig {
    let mut c = Fp8SdpaConfig::new(2, 4, 256, 256, d);
    c.is_causal = causal;
    c.is_training = training;
    c.o_dtype = o;
    c
}

pub fn sdpa_tag(c: &Fp8SdpaConfig) -> String {
    format!(
        "d{} s{}x{} {}->{}{}{}",
        c.head_dim,
        c.seq_q,
        c.seq_kv,
        c.dtype,
        c.o_dtype,
        if c.is_causal { " causal" } else { "" },
        if c.is_training { " training" } else { "" }
    )
}

/// The FP8 attention forward graph, its tensors named `q`, `k`, `v`, `o`,
/// `stats`, `amax_s`, `amax_o` and the scales by their role.
pub fn sdpa_fwd_graph(c: &Fp8SdpaConfig) -> Result<Graph, Error> {
    let mut g = Graph::new();
    let q = g.input("q", c.q_spec()?)?;
    let k = g.input("k", c.kv_spec()?)?;
    let v = g.input("v", c.kv_spec()?)?;
    let f = if c.is_training {
        g.sdpa_fp8_forward_training(q, k, v, c)?.map_stats(Some)
    } else {
        g.sdpa_fp8_forward(q, k, v, c)?.map_stats(|()| None)
    };
    for (t, n) in [
        (f.o, "o"),
        (f.amax_s, "amax_s"),
        (f.amax_o, "amax_o"),
        (f.descale_q, "descale_q"),
        (f.descale_k, "descale_k"),
        (f.descale_v, "descale_v"),
        (f.descale_s, "descale_s"),
        (f.scale_s, "scale_s"),
        (f.scale_o, "scale_o"),
    ] {
        g.rename(t, n)?;
    }
    if let Some(s) = f.stats {
        g.rename(s, "stats")?;
    }
    Ok(g)
}

pub fn sdpa_fwd_cases() -> Vec<Fp8SdpaConfig> {
    use DType::*;
    vec![
        sdpa_fwd_cfg(128, false, false, Fp8E4M3),
        sdpa_fwd_cfg(128, true, true, Fp8E4M3),
        sdpa_fwd_cfg(64, true, false, Fp8E4M3),
        sdpa_fwd_cfg(128, false, true, Fp8E5M2).dtype(Fp8E5M2),
        sdpa_fwd_cfg(128, false, false, BF16),
        sdpa_fwd_cfg(256, false, false, Fp8E4M3),
    ]
}

/// The FP8 attention backward graph (dO and the gradients in `grad`), its
/// tensors named by role.
pub fn sdpa_bwd_graph(c: &Fp8SdpaConfig, grad: DType) -> Result<Graph, Error> {
    let mut g = Graph::new();
    let q = g.input("q", c.q_spec()?)?;
    let k = g.input("k", c.kv_spec()?)?;
    let v = g.input("v", c.kv_spec()?)?;
    let o = g.input("o", c.q_spec()?.with_dtype(c.o_dtype))?;
    let d_o = g.input("do", c.q_spec()?.with_dtype(grad))?;
    let st = g.input("stats", c.stats_spec()?)?;
    let b = g.sdpa_fp8_backward(q, k, v, o, d_o, st, grad, c)?;
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
}

/// Backward cases: (config, gradient type).
pub fn sdpa_bwd_cases() -> Vec<(Fp8SdpaConfig, DType)> {
    use DType::*;
    vec![
        (sdpa_fwd_cfg(128, false, true, Fp8E4M3), Fp8E4M3),
        (sdpa_fwd_cfg(128, true, true, Fp8E4M3), Fp8E5M2),
        (sdpa_fwd_cfg(64, true, true, Fp8E4M3), Fp8E5M2),
    ]
}
