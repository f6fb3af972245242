// A plan key whose bytes the crate did not keep to itself is `unsafe`:
// whoever knows the bytes can tag any file, and the safe loaders then run
// its compiled kernels (a soundness audit made a key of known bytes, from
// the caller's bytes and from a key file it wrote, and tagged another
// graph's plan with it). `PlanKey::generate` is the safe key.
use cudnn::graph::PlanKey;

fn main() -> cudnn::Result<()> {
    let _key = PlanKey::from_bytes(&[7u8; 32])?;
    let dir = std::path::Path::new("keys");
    let _key = PlanKey::load_or_create(dir)?;
    let _key = PlanKey::load(dir)?;
    let _key = PlanKey::generate()?;
    Ok(())
}
