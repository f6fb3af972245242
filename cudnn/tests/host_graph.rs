//! Host tier for the graph API: no GPU; the real cuDNN plans for named
//! targets with the driver stub.
#[path = "support/mod.rs"]
mod support;
use cudnn::graph::*;
use support::*;

fn main() {
    let mut t = vec![];
    t.push(host("smoke", || {
        let mut g = Graph::new();
        let x = g.input("x", TensorSpec::nhwc(DType::F16, &[8, 64, 56, 56])?)?;
        let w = g.input("w", TensorSpec::nhwc(DType::F16, &[64, 64, 3, 3])?)?;
        let y = g.conv_fprop(x, w, &ConvParams::new_2d([1, 1], [1, 1], [1, 1]))?;
        g.output(y, DType::F16)?;
        let og = g.build()?;
        for tgt in ["h200", "a100", "b200"] {
            let target = Target::preset(tgt)?;
            let c = heuristics::candidates(&og, &target, &Policy::default())?;
            eprintln!("{tgt}: {} candidates", c.len());
            let (p, r) = Plan::build(&og, &target, &Policy::default())?;
            eprintln!(
                "{tgt}: chosen {:?} ws {} fin {:.4}s",
                r.chosen,
                p.workspace_size(),
                r.finalize_s
            );
        }
        let mut g = Graph::new();
        let a = g.input("a", TensorSpec::row_major(DType::BF16, &[4, 128, 64])?)?;
        let b = g.input("b", TensorSpec::row_major(DType::BF16, &[4, 64, 256])?)?;
        let bias = g.input("bias", TensorSpec::row_major(DType::BF16, &[1, 1, 256])?)?;
        let c = g.matmul(a, b)?;
        let c = g.bias(c, bias)?;
        let c = g.gelu(c)?;
        g.output(c, DType::BF16)?;
        let og = g.build()?;
        let target = Target::preset("h200")?;
        let (p, r) = Plan::build(&og, &target, &Policy::default())?;
        eprintln!(
            "matmul: chosen {:?} ws {} cands {} fin {:.4}s {:?}",
            r.chosen,
            p.workspace_size(),
            r.candidates.len(),
            r.finalize_s,
            r.failures
        );
        let s = p.serialize()?;
        eprintln!("plan file {} bytes", s.len());
        let p2 = Plan::deserialize(&s, &target)?;
        ensure!(p2.workspace_size() == p.workspace_size(), "ws");
        Ok(())
    }));
    run(t)
}
