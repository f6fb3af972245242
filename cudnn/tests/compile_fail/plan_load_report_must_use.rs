// A plan-cache load that skips entries says so in its report, which cannot
// be ignored silently (issue 33 item 4): `LoadReport` is `#[must_use]`.
#![deny(unused_must_use)]
use cudnn::graph::{PlanCache, Target, Trust};

fn main() -> cudnn::Result<()> {
    let t = Target::preset("h200")?;
    PlanCache::new(1).load_text("", &t, Trust::NoCompiledCode)?;
    Ok(())
}
