// A plan key made from the caller's bytes is `unsafe`: whoever knows the
// bytes can tag any file, and the safe loaders then run its compiled
// kernels (a soundness audit made a key of known bytes and tagged another
// graph's plan with it).
use cudnn::graph::PlanKey;

fn main() -> cudnn::Result<()> {
    let _key = PlanKey::from_bytes(&[7u8; 32])?;
    Ok(())
}
