// Loading compiled GPU code from a file no key vouches for is `unsafe`
// (issue 31 item 9): the unverified loaders cannot be called from safe code.
use cudnn::graph::{Plan, PlanCache, Target};

fn main() -> cudnn::Result<()> {
    let t = Target::preset("h200")?;
    let _ = Plan::deserialize_unverified("", &t);
    let _ = PlanCache::new(1).load_text_unverified("", &t);
    Ok(())
}
