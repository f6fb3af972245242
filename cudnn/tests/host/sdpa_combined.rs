//! Host tier for issue 24's attention options *together*: the logit
//! softcap, the additive bias (with dBias), ALiBi, attention sinks (with
//! dSink) and the row max / sum_exp outputs were built in parallel, each
//! tested alone; here the real cuDNN 9.28 plans their combinations for an
//! H200 and a B200 through the driver stub (forward as the SDPA operation
//! and as the composite, backward as the composite), and every combination
//! the rules accept must plan. Each line printed is `case target: engine /
//! workspace`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::neg_cmp_op_on_partial_ord)]
use crate::support;
use crate::support::sdpa_plans::{bwd_graph as backward, fwd_graph as forward, loaded};
use cudnn::Error;
use cudnn::graph::*;
use support::*;

fn plan(g: &Graph, target: &str) -> Result<(Option<i64>, usize), Error> {
    let og = g.build()?;
    let (p, _) = Plan::build(&og, &Target::preset(target)?, &Policy::default())?;
    Ok((p.engine(), p.workspace_size()))
}

/// The combinations: (name, config). All bf16, batch 2, 8 heads, 256
/// queries and keys, head dim 64, training.
fn cases() -> Vec<(&'static str, SdpaConfig)> {
    let base = || SdpaConfig::new(2, 8, 256, 64, DType::BF16).training(true);
    vec![
        (
            "softcap+bias(dBias)",
            base()
                .softcap(30.0)
                .bias(AttnBias::new(false, true).with_dbias(true)),
        ),
        (
            "bias(dBias)+sink(dSink)+max_sum_exp",
            base()
                .bias(AttnBias::full().with_dbias(true))
                .sink(true)
                .sink_grad(true)
                .max_sum_exp(true),
        ),
        (
            "softcap+sink(dSink)+max_sum_exp",
            base()
                .softcap(30.0)
                .sink(true)
                .sink_grad(true)
                .max_sum_exp(true),
        ),
        (
            "causal+alibi+sink(dSink)",
            base().causal(true).alibi(true).sink(true).sink_grad(true),
        ),
        (
            "causal+bias+max_sum_exp",
            base()
                .causal(true)
                .bias(AttnBias::new(true, false))
                .max_sum_exp(true),
        ),
        (
            "causal+window+softcap+sink(dSink)+max_sum_exp",
            base()
                .causal(true)
                .sliding_window(64)
                .softcap(30.0)
                .sink(true)
                .sink_grad(true)
                .max_sum_exp(true),
        ),
        (
            "softcap+bias(dBias)+sink(dSink)+max_sum_exp",
            base()
                .softcap(30.0)
                .bias(AttnBias::new(false, true).with_dbias(true))
                .sink(true)
                .sink_grad(true)
                .max_sum_exp(true),
        ),
    ]
}

fn combinations_plan() -> TestResult {
    let v = loaded();
    let mut failures = Vec::new();
    let mut planned = 0;
    let mut refused = 0;
    for (name, cfg) in cases() {
        let mut builds: Vec<(&str, SdpaConfig, bool)> = vec![
            (
                "fwd composite",
                cfg.clone().implementation(SdpaImpl::Composite),
                false,
            ),
            ("bwd auto", cfg.clone(), true),
        ];
        if v >= (9, 21, 0) {
            builds.push((
                "fwd native",
                cfg.clone().implementation(SdpaImpl::Native),
                false,
            ));
        }
        for (how, c, is_bwd) in builds {
            // The rules first: a combination they refuse must say why,
            // typed and naming an option.
            if let Err(e) = c.resolve(is_bwd) {
                let s = e.to_string();
                eprintln!("{name} {how}: refused by the rules: {s}");
                failures.push(format!("{name} {how}: the rules refuse it: {s}"));
                continue;
            }
            let g = if is_bwd { backward(&c) } else { forward(&c) };
            let g = match g {
                Ok(g) => g,
                Err(e) => {
                    failures.push(format!("{name} {how}: graph: {e}"));
                    continue;
                }
            };
            for target in ["h200", "b200"] {
                match plan(&g, target) {
                    Ok((engine, ws)) => {
                        planned += 1;
                        println!("{name} {how} {target}: {engine:?} / {ws}");
                    }
                    // The one combination cuDNN 9.28 has no engine for:
                    // refused up front, typed, naming both options.
                    Err(e)
                        if target == "b200"
                            && is_bwd
                            && c.softcap.is_some()
                            && c.bias.is_some_and(|b| b.dbias) =>
                    {
                        let s = e.to_string();
                        if !(s.starts_with("unsupported")
                            && s.contains("softcap")
                            && s.contains("dBias"))
                        {
                            failures
                                .push(format!("{name} {how} {target}: not the typed rule: {s}"));
                        } else {
                            refused += 1;
                            println!("{name} {how} {target}: refused: {s}");
                        }
                    }
                    Err(e) => failures.push(format!("{name} {how} {target}: {e}")),
                }
            }
        }
    }
    eprintln!("{planned} plans");
    ensure!(
        failures.is_empty(),
        "combinations that did not plan:\n{}",
        failures.join("\n")
    );
    ensure!(planned >= 24, "only {planned} plans");
    ensure!(
        refused == 2,
        "{refused} typed softcap + dBias refusals on the B200, not 2"
    );
    Ok(())
}

/// The reference with every option at once (softcap, bias, ALiBi off as it
/// needs a causal mask here on, a sink, a causal mask), its gradients
/// against central finite differences of `L = sum(O * dO)`: dQ, dK, dV
/// from `backward`, dBias from `dbias`, dSink from `backward_d_sink`, all
/// with the sink-including statistics `forward_parts` gives.
fn reference_finite_differences() -> TestResult {
    use cudnn::reference::attention as ra;
    let (b, h, sq, skv, d) = (1usize, 2usize, 3usize, 4usize, 3usize);
    let val = |seed: u64, i: usize| {
        let x = ((seed * 7919 + i as u64 * 104_729) % 1000) as f64 / 500.0 - 1.0;
        x * 1.5
    };
    let q: Vec<f64> = (0..b * h * sq * d).map(|i| val(1, i)).collect();
    let k: Vec<f64> = (0..b * h * skv * d).map(|i| val(2, i)).collect();
    let v: Vec<f64> = (0..b * h * skv * d).map(|i| val(3, i)).collect();
    let bias: Vec<f64> = (0..h * sq * skv).map(|i| val(4, i)).collect();
    let sink: Vec<f64> = (0..h).map(|i| val(5, i)).collect();
    let d_o: Vec<f64> = (0..b * h * sq * d).map(|i| val(6, i)).collect();
    let loss = |q: &[f64], k: &[f64], v: &[f64], bias: &[f64], sink: &[f64]| -> f64 {
        let mut rc = ra::SdpaConfig::new(0.7);
        rc.causal = ra::CausalMask::BottomRight;
        rc.softcap = Some(2.5);
        rc.bias = Some(ra::View::bhsd(bias, [1, h, sq, skv]));
        let f = ra::forward_parts(
            &ra::View::bhsd(q, [b, h, sq, d]),
            &ra::View::bhsd(k, [b, h, skv, d]),
            &ra::View::bhsd(v, [b, h, skv, d]),
            &rc,
            Some(sink),
        )
        .expect("forward");
        f.o.iter().zip(&d_o).map(|(a, b)| a * b).sum()
    };
    let mut rc = ra::SdpaConfig::new(0.7);
    rc.causal = ra::CausalMask::BottomRight;
    rc.softcap = Some(2.5);
    rc.bias = Some(ra::View::bhsd(&bias, [1, h, sq, skv]));
    let (qv, kv, vv) = (
        ra::View::bhsd(&q, [b, h, sq, d]),
        ra::View::bhsd(&k, [b, h, skv, d]),
        ra::View::bhsd(&v, [b, h, skv, d]),
    );
    let f = ra::forward_parts(&qv, &kv, &vv, &rc, Some(&sink))?;
    let ov = ra::View::bhsd(&f.o, [b, h, sq, d]);
    let dov = ra::View::bhsd(&d_o, [b, h, sq, d]);
    let g = ra::backward(&qv, &kv, &vv, &ov, &dov, &f.stats, &rc)?;
    let dbias = ra::dbias(&qv, &kv, &vv, &ov, &dov, &f.stats, &rc)?;
    let dsink = ra::backward_d_sink(&ov, &dov, &f.stats, &sink)?;
    let eps = 1e-5;
    let mut checked = 0;
    let mut worst = 0f64;
    let mut fd = |which: usize, got: &[f64]| {
        let base = [&q, &k, &v, &bias, &sink][which].clone();
        for (i, &want) in got.iter().enumerate() {
            let mut plus = base.clone();
            let mut minus = base.clone();
            plus[i] += eps;
            minus[i] -= eps;
            let mut args = [q.clone(), k.clone(), v.clone(), bias.clone(), sink.clone()];
            args[which] = plus;
            let lp = loss(&args[0], &args[1], &args[2], &args[3], &args[4]);
            args[which] = minus;
            let lm = loss(&args[0], &args[1], &args[2], &args[3], &args[4]);
            let num = (lp - lm) / (2.0 * eps);
            let diff = (num - want).abs();
            worst = if diff.is_nan() {
                f64::INFINITY
            } else {
                worst.max(diff)
            };
            checked += 1;
        }
    };
    fd(0, &g.dq);
    fd(1, &g.dk);
    fd(2, &g.dv);
    fd(3, &dbias);
    fd(4, &dsink);
    eprintln!("  {checked} gradient entries, worst |analytic - numeric| {worst:.2e}");
    ensure!(checked == 18 + 24 + 24 + 24 + 2, "{checked} entries");
    ensure!(worst < 1e-6, "the reference's gradients disagree: {worst}");
    ensure!(
        dsink.iter().any(|x| x.abs() > 1e-3) && dbias.iter().any(|x| x.abs() > 1e-3),
        "degenerate case: dSink or dBias all ~0"
    );
    Ok(())
}

pub fn main() {
    let fd = unit(
        "sdpa_reference_combined_finite_differences",
        reference_finite_differences,
    );
    if loaded() < (9, 13, 0) && support::libs_missing().is_none() {
        eprintln!("skipped: host::sdpa_combined_options_plan: sinks need cuDNN >= 9.13");
        run(vec![
            fd,
            crate::support::trial("host::sdpa_combined_options_plan", combinations_plan)
                .with_ignored_flag(true),
        ]);
        return;
    }
    run(vec![
        fd,
        host_planning("sdpa_combined_options_plan", combinations_plan),
    ]);
}
