//! The FP8 patterns of the conformance tier (issue 25): the per-tensor
//! scaled FP8 matmul as `Graph::fp8_matmul` builds it; frontend.py's
//! `fam_fp8_matmul` makes the same calls a frontend user makes (matmul, two
//! descale multiplies, the amax reduction, the output scale).

use cudnn::graph::{DType, Fp8MatmulScales, Graph, TensorSpec};
use serde_json::json;

use super::{Pattern, p};

/// `[batch, M, K] @ [batch, K, N]`, `b` stored K-major (the layout FP8
/// tensor cores read).
const DIMS: [i64; 4] = [4, 256, 512, 1024];

/// FP8 matmul patterns.
pub fn fp8(out: &mut Vec<Pattern>) {
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
