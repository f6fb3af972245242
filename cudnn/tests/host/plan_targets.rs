//! Which named GPUs the attention modules' per-case planning loops cover
//! (issue 32). The H100 and the H200 are both sm_90 with 132 SMs, and
//! cuDNN gives their attention graphs the same answer: the same engines,
//! heuristic configurations, chosen engine and workspace (171 of 171 cases
//! on cuDNN 9.28 when the loops planned both). So the loops plan for the
//! H200 alone, and this module keeps the claim honest on every stack that
//! runs those modules: every sixth case of each module's list, in each
//! construction (the SDPA operation, the composite, `Auto`), planned for
//! both, must get the same answer. Should a cuDNN tell the two apart, this
//! fails, and "h100" goes back in the loops.

use crate::support::sdpa_plans::{Counts, bwd_graph, counts, fwd_graph, names_option};
use crate::support::*;
use cudnn::Error;
use cudnn::graph::{SdpaConfig, SdpaImpl};

/// One case's answer on a target: its counts (the first plan that
/// finalizes of at most three candidates, as the loops ask for the H200:
/// the same memo key, so a graph a loop planned for the H200 in this
/// process is not planned again here), or the kind of refusal.
fn answer(g: &cudnn::graph::Graph, target: &str) -> Result<Counts, String> {
    counts(g, target, 3).map_err(|e| match e {
        Error::Unsupported { .. } => "refused (Unsupported)".to_string(),
        e => format!("failed: {e}"),
    })
}

/// A module's case: its name, whether it is a backward, its config.
type Case = (&'static str, bool, SdpaConfig);

fn same(a: &Counts, b: &Counts) -> bool {
    (a.engines, a.configs, a.plans, a.engine, a.workspace)
        == (b.engines, b.configs, b.plans, b.engine, b.workspace)
}

fn h100_plans_as_h200() -> TestResult {
    // The softcap's mask cases, forward and backward.
    let masks = super::sdpa_softcap::masks_cases()
        .into_iter()
        .flat_map(|(name, cfg)| [(name, false, cfg.clone()), (name, true, cfg)])
        .collect();
    let lists: [(&str, Vec<Case>); 6] = [
        ("sdpa_bias", super::sdpa_bias::cases()),
        ("sdpa_options", super::sdpa_options::band_cases()),
        ("sdpa_ragged", super::sdpa_ragged::cases()),
        ("sdpa_softcap", super::sdpa_softcap::cases()),
        ("sdpa_softcap masks", masks),
        ("sdpa_softmax", super::sdpa_softmax::cases()),
    ];
    let (mut planned, mut refused, mut unbuilt) = (0, 0, 0);
    let mut failures = Vec::new();
    for (module, cases) in lists {
        for (name, backward, cfg) in cases.into_iter().step_by(6) {
            // Each construction the loops planned (`Auto` often builds
            // what one of the others did: the same graph, counted once).
            for imp in [SdpaImpl::Native, SdpaImpl::Composite, SdpaImpl::Auto] {
                let cfg = cfg.clone().implementation(imp);
                let g = if backward {
                    bwd_graph(&cfg)
                } else {
                    fwd_graph(&cfg)
                };
                let g = match g {
                    Ok(g) => g,
                    // A construction this cuDNN lacks for the case: typed.
                    Err(e) if names_option(&e) => {
                        unbuilt += 1;
                        continue;
                    }
                    Err(e) => {
                        failures.push(format!("{module}: {name} {imp:?}: untyped refusal: {e}"));
                        continue;
                    }
                };
                match (answer(&g, "h200"), answer(&g, "h100")) {
                    (Ok(a), Ok(b)) if same(&a, &b) => planned += 1,
                    (Err(a), Err(b)) if a == b && a.starts_with("refused") => refused += 1,
                    (a, b) => {
                        failures.push(format!("{module}: {name} {imp:?}: h200 {a:?}, h100 {b:?}"))
                    }
                }
            }
        }
    }
    eprintln!(
        "h100 vs h200: {planned} graphs planned alike, {refused} refused alike, {unbuilt} constructions refused (typed) on this cuDNN"
    );
    ensure!(
        failures.is_empty(),
        "cuDNN plans these for the H100 unlike the H200 (put \"h100\" back in the loops):\n{}",
        failures.join("\n")
    );
    // Never vacuous: the sample must plan on both.
    ensure!(
        planned >= 8,
        "only {planned} sampled cases planned on both targets"
    );
    Ok(())
}

pub fn main() {
    // Named `sdpa_*`: the cudnn910 stage runs the `sdpa` tests.
    run(vec![host_planning(
        "sdpa_h100_plans_as_h200",
        h100_plans_as_h200,
    )]);
}
