//! Plan a fused convolution + bias + ReLU for an H200 on a machine without
//! a GPU (the cuDNN libraries are needed, no device), then save the plan,
//! signed with a key of this run, and load it back through the safe loader.
//!
//! `cargo run -p cudnn-rs --example plan_for_named_gpu [-- a100|h100|h200|l4|b200]`

use cudnn::graph::{ConvParams, DType, Graph, Plan, PlanKey, Policy, Target, TensorSpec, Trust};

fn main() -> cudnn::Result<()> {
    let name = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "h200".to_string());
    let target = Target::preset(&name)?;

    // y = relu(conv(x, w) + bias), f16, NHWC.
    let mut g = Graph::new();
    let x = g.input("x", TensorSpec::nhwc(DType::F16, &[8, 64, 56, 56])?)?;
    let w = g.input("w", TensorSpec::nhwc(DType::F16, &[64, 64, 3, 3])?)?;
    let b = g.input("bias", TensorSpec::nhwc(DType::F16, &[1, 64, 1, 1])?)?;
    let y = g.conv_fprop(x, w, &ConvParams::new_2d([1, 1], [1, 1], [1, 1]))?;
    let y = g.bias(y, b)?;
    let y = g.relu(y)?;
    g.output(y, DType::F16)?;
    let graph = g.build()?;

    let (plan, report) = Plan::build(&graph, &target, &Policy::default())?;
    println!(
        "{}: {} candidates, chose engine {:?}, workspace {} bytes",
        target.fingerprint(),
        report.candidates.len(),
        report.chosen,
        plan.workspace_size()
    );

    // A plan file with compiled kernels is code: the safe loader takes it
    // only with a tag from a key this program holds.
    let key = PlanKey::generate()?;
    let text = plan.serialize_signed(&key)?;
    let back = Plan::deserialize(&text, &target, Trust::SignedBy(&key))?;
    println!(
        "saved {} bytes, reloaded: workspace {} bytes",
        text.len(),
        back.workspace_size()
    );
    Ok(())
}
