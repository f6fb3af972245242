//! Host tier for the graph API's normalization and attention ops: no GPU;
//! the real cuDNN finalizes plans for named targets with the driver stub.
//! Each configuration prints `engines / configs / plans` per target.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use crate::support;
use crate::support::norm_attention_graphs;
use crate::support::plan_nodes;
use crate::support::sdpa_plans;
use crate::support::sdpa_plans::fwd_any;
use cudnn::Error;
use cudnn::graph::*;
use norm_attention_graphs::*;
use support::*;

const TARGETS: [&str; 3] = ["h200", "a100", "b200"];

/// How many engines cuDNN has, how many configs heuristics offer, whether
/// a plan finalizes for `target` (the first of at most `max` candidates
/// that does), and that plan's engine (`sdpa_plans::counts`: a graph planned
/// before for the same target is not planned again).
#[allow(clippy::type_complexity)]
fn counts(g: &Graph, target: &str, max: usize) -> Result<(i64, usize, usize, Option<i64>), Error> {
    let c = sdpa_plans::counts(g, target, max)?;
    Ok((c.engines, c.configs, c.plans, c.engine))
}

/// A host test that needs graph planning (cuDNN >= 9.8): on an older
/// stack, whose refusal must be the typed `Unsupported` naming the version
/// needed, it is reported as ignored (skipped, visibly), never as passed.
fn host9(name: &str, f: impl FnOnce() -> TestResult + Send + 'static) -> libtest_mimic::Trial {
    if libs_missing().is_none() {
        match require_graph_support() {
            Ok(()) => {}
            Err(e @ Error::Unsupported { .. }) => {
                eprintln!(
                    "skipped: host::{name}: planning needs cuDNN >= 9.8 (typed refusal: {e})"
                );
                return crate::support::trial(format!("host::{name}"), f).with_ignored_flag(true);
            }
            // Any other refusal is a defect: the test runs and reports it.
            Err(e) => {
                let msg = format!("require_graph_support: an untyped refusal: {e:?}");
                return host(name, move || Err(msg.into()));
            }
        }
    }
    host(name, f)
}

pub fn main() {
    let mut t = vec![];

    t.push(host9("norm_modes_plan_per_target", || {
        let mut failures = vec![];
        for (name, build) in norm_cases() {
            let must_plan = true;
            for tgt in crate::support::targets(&TARGETS) {
                match build().and_then(|g| counts(&g, tgt, 3)) {
                    Ok((e, c, p, _)) => {
                        eprintln!(
                            "norm  {name:<45} {tgt}: engines {e:>3} configs {c:>3} plans {p:>3}"
                        );
                        if tgt == "h200" && p == 0 {
                            failures.push(format!("{name} on {tgt}: no plan"));
                        }
                    }
                    Err(err) => {
                        let first = err.to_string();
                        eprintln!(
                            "norm  {name:<45} {tgt}: refused: {}",
                            &first[..first.len().min(160)]
                        );
                        ensure!(is_typed_refusal(&err), "{name} {tgt}: untyped {err:?}");
                        if tgt == "h200" && must_plan {
                            failures.push(format!("{name} on {tgt}: {err}"));
                        }
                    }
                }
            }
        }
        ensure!(
            failures.is_empty(),
            "H200 must plan every norm mode: {failures:#?}"
        );
        Ok(())
    }));

    t.push(host9("sdpa_composite_plans_per_target", || {
        let mut failures = vec![];
        for (name, bwd, cfg) in sdpa_cases() {
            let cfg = cfg.implementation(SdpaImpl::Composite);
            for tgt in crate::support::targets(&TARGETS) {
                match sdpa_graph(&cfg, bwd).and_then(|g| counts(&g, tgt, 2)) {
                    Ok((e, c, p, eng)) => {
                        eprintln!(
                            "composite {name:<40} {tgt}: engines {e:>3} configs {c:>3} plans {p:>3}, engine {eng:?}"
                        );
                        if tgt == "h200" && p == 0 {
                            failures.push(format!("{name} on {tgt}: no plan"));
                        }
                    }
                    Err(err) => {
                        let first = err.to_string();
                        eprintln!("composite {name:<40} {tgt}: refused: {}", &first[..first.len().min(300)]);
                        ensure!(is_typed_refusal(&err), "{name} {tgt}: untyped {err:?}");
                        if tgt == "h200" {
                            failures.push(format!("{name} on {tgt}: {err}"));
                        }
                    }
                }
            }
        }
        ensure!(failures.is_empty(), "H200 must plan every composite forward: {failures:#?}");
        Ok(())
    }));

    t.push(host9("norm_statistics_per_mode", || {
        // Which statistics each mode saves, and their dims and types.
        let mut g = Graph::new();
        let x = g.input("x", rm(DType::BF16, &[6, 10, 4, 1])?)?;
        let s = g.input("s", rm(DType::F32, &[1, 10, 4, 1])?)?;
        let b = g.input("b", rm(DType::F32, &[1, 10, 4, 1])?)?;
        let tr = g.layer_norm(x, s, b, 1e-5, NormPhase::Training)?;
        let (m, iv) = (tr.mean.ok_or("mean")?, tr.inv_variance.ok_or("inv")?);
        ensure!(g.dims(m)? == [6, 1, 1, 1], "ln mean dims {:?}", g.dims(m)?);
        ensure!(g.dims(iv)? == [6, 1, 1, 1], "ln inv dims");
        ensure!(g.spec(m)?.dtype() == DType::F32, "stats are f32");
        ensure!(tr.running_mean.is_none(), "no running stats for layer norm");
        let inf = g.layer_norm(x, s, b, 1e-5, NormPhase::Inference)?;
        ensure!(
            inf.mean.is_none() && inf.inv_variance.is_none(),
            "inference saves none"
        );
        let r = g.rms_norm(x, s, None, 1e-5, NormPhase::Training)?;
        ensure!(r.mean.is_none(), "rms saves no mean");
        ensure!(
            g.dims(r.inv_variance.ok_or("inv rms")?)? == [6, 1, 1, 1],
            "rms dims"
        );
        let mut g = Graph::new();
        let x = g.input("x", TensorSpec::nhwc(DType::F16, &[2, 3, 5, 7])?)?;
        let p = TensorSpec::nhwc(DType::F32, &[1, 3, 1, 1])?;
        let (s, b) = (g.input("s", p.clone())?, g.input("b", p.clone())?);
        let (rm_, rv) = (g.input("rm", p.clone())?, g.input("rv", p)?);
        let bn = g.batch_norm(
            x,
            s,
            b,
            1e-5,
            Some(RunningStats {
                mean: rm_,
                var: rv,
                momentum: 0.1,
            }),
        )?;
        for t in [
            bn.mean.ok_or("mean")?,
            bn.inv_variance.ok_or("inv")?,
            bn.running_mean.ok_or("rm")?,
            bn.running_var.ok_or("rv")?,
        ] {
            ensure!(g.dims(t)? == [1, 3, 1, 1], "bn stats dims {:?}", g.dims(t)?);
        }
        let io = {
            g.output(bn.y, DType::F16)?;
            g.build()?.io().clone()
        };
        let outs = io.tensors.iter().filter(|t| t.is_output).count();
        ensure!(outs == 5, "y + 2 saved + 2 running outputs, got {outs}");
        ensure!(
            io.scalars.len() == 2,
            "epsilon and momentum by value: {:?}",
            io.scalars
        );
        let eps = io
            .scalars
            .iter()
            .any(|s| s.1 == DType::F32 && (s.2 - 1e-5).abs() < 1e-12);
        ensure!(eps, "epsilon 1e-5 passed by value: {:?}", io.scalars);
        Ok(())
    }));

    t.push(host("norm_shape_errors_are_typed", || {
        let mut g = Graph::new();
        let x = g.input("x", rm(DType::BF16, &[6, 10, 1, 1])?)?;
        let bad = g.input("bad_scale", rm(DType::F32, &[1, 9, 1, 1])?)?;
        let s = g.input("s", rm(DType::F32, &[1, 10, 1, 1])?)?;
        let bn_bad = g.input("bn_scale", rm(DType::F32, &[1, 10, 1, 2])?)?;
        let e = g
            .layer_norm(x, bad, s, 1e-5, NormPhase::Training)
            .unwrap_err();
        ensure!(
            matches!(e, Error::InvalidArgument { .. } | Error::Mismatch { .. })
                && e.to_string().contains("bad_scale"),
            "names the scale: {e}"
        );
        let e = g.layer_norm(x, s, s, 0.0, NormPhase::Training).unwrap_err();
        ensure!(e.to_string().contains("epsilon"), "names epsilon: {e}");
        let e = g
            .layer_norm(x, s, s, f64::NAN, NormPhase::Training)
            .unwrap_err();
        ensure!(e.to_string().contains("epsilon"), "NaN epsilon: {e}");
        let e = g.batch_norm(x, bn_bad, bn_bad, 1e-5, None).unwrap_err();
        ensure!(
            e.to_string().contains("bn_scale"),
            "bn scale [1, C, 1, 1]: {e}"
        );
        let e = g
            .batch_norm(
                x,
                s,
                s,
                1e-5,
                Some(RunningStats {
                    mean: s,
                    var: s,
                    momentum: 1.5,
                }),
            )
            .unwrap_err();
        ensure!(
            e.to_string().contains("momentum"),
            "momentum in [0, 1]: {e}"
        );
        let v = g.input("vec", rm(DType::F32, &[10])?)?;
        let e = g
            .rms_norm(v, s, None, 1e-5, NormPhase::Inference)
            .unwrap_err();
        ensure!(e.to_string().contains("rank"), "rank: {e}");
        let i = g.input("ints", rm(DType::I32, &[6, 10, 1, 1])?)?;
        let e = g
            .rms_norm(i, s, None, 1e-5, NormPhase::Inference)
            .unwrap_err();
        ensure!(e.to_string().contains("floating"), "dtype: {e}");
        let dy = g.input("dy", rm(DType::BF16, &[6, 11, 1, 1])?)?;
        let st = g.input("st", rm(DType::F32, &[6, 1, 1, 1])?)?;
        let e = g.layer_norm_backward(dy, x, s, st, st).unwrap_err();
        ensure!(e.to_string().contains("dy"), "dy dims: {e}");
        let e = g.layer_norm_backward(x, x, s, s, st).unwrap_err();
        ensure!(e.to_string().contains("mean"), "mean dims: {e}");
        Ok(())
    }));

    t.push(host9("sdpa_configs_plan_per_target", || {
        let mut failures = vec![];
        for (name, bwd, cfg) in sdpa_cases() {
            for tgt in crate::support::targets(&TARGETS) {
                match sdpa_graph(&cfg, bwd).and_then(|g| counts(&g, tgt, 3)) {
                    Ok((e, c, p, eng)) => {
                        eprintln!(
                            "sdpa  {name:<40} {tgt}: engines {e:>3} configs {c:>3} plans {p:>3}, engine {eng:?}"
                        );
                        if tgt == "h200" && p == 0 {
                            failures.push(format!("{name} on {tgt}: no plan"));
                        }
                    }
                    Err(err) => {
                        eprintln!("sdpa  {name:<40} {tgt}: refused: {err}");
                        ensure!(is_typed_refusal(&err), "{name} {tgt}: untyped {err:?}");
                        if tgt == "h200" {
                            failures.push(format!("{name} on {tgt}: {err}"));
                        }
                    }
                }
            }
        }
        for f in &failures {
            eprintln!("H200 refusal: {f}");
        }
        ensure!(
            failures.is_empty(),
            "H200 must plan every attention configuration: {failures:#?}"
        );
        Ok(())
    }));

    t.push(host("sdpa_unsupported_options_are_typed", || {
        let e = sdpa_fwd(&base(DType::F32)).unwrap_err();
        ensure!(
            matches!(&e, Error::Unsupported { what, .. } if what.contains("dtype")),
            "f32 names dtype: {e}"
        );
        let e = sdpa_fwd(&SdpaConfig::new(1, 4, 64, 100, DType::F16)).unwrap_err();
        ensure!(
            matches!(&e, Error::Unsupported { what, .. } if what.contains("head_dim")),
            "head dim 100 names head_dim: {e}"
        );
        let e = sdpa_fwd(&SdpaConfig::new(1, 4, 64, 512, DType::F16)).unwrap_err();
        ensure!(e.to_string().contains("head_dim"), "head dim 512: {e}");
        let e = sdpa_fwd(&base(DType::F16).gqa(3)).unwrap_err();
        ensure!(
            matches!(&e, Error::InvalidArgument { .. }) && e.to_string().contains("kv_heads"),
            "kv_heads must divide heads: {e}"
        );
        let e = sdpa_fwd(&base(DType::F16).dropout(1.0)).unwrap_err();
        ensure!(e.to_string().contains("dropout"), "dropout 1.0: {e}");
        let e = sdpa_fwd(&base(DType::F16).scale(f64::INFINITY)).unwrap_err();
        ensure!(e.to_string().contains("scale"), "scale inf: {e}");
        // q built for another config.
        let cfg = base(DType::BF16);
        let mut g = Graph::new();
        let q = g.input("q", SdpaConfig::new(2, 8, 128, 64, DType::BF16).q_spec()?)?;
        let k = g.input("k", cfg.k_spec()?)?;
        let v = g.input("v", cfg.v_spec()?)?;
        let e = fwd_any(&mut g, q, k, v, &cfg).unwrap_err();
        ensure!(e.to_string().contains("`q`"), "names q: {e}");
        let q2 = g.input("q2", cfg.q_spec()?.with_dtype(DType::F16))?;
        let e = fwd_any(&mut g, q2, k, v, &cfg).unwrap_err();
        ensure!(e.to_string().contains("element type"), "q dtype: {e}");
        Ok(())
    }));

    t.push(host("sdpa_options_need_cudnn_versions", || {
        // What the loaded cuDNN has decides; each option names its version.
        let v = cudnn::dnn::Handle::library_version()?;
        eprintln!("loaded cuDNN {v:?}");
        // CI pins the stack: the cuDNN loaded must be the one asked for.
        if let Ok(want) = std::env::var("CUDNN_RS_EXPECT_CUDNN") {
            let got = format!("{}.{}.{}", v.major, v.minor, v.patch);
            ensure!(
                got == want || got.starts_with(&format!("{want}.")),
                "CUDNN_RS_EXPECT_CUDNN={want}, loaded {got}"
            );
        }
        let have = (v.major, v.minor, v.patch);
        use ops::sdpa::since;
        if have == (9, 10, 0) || have == (9, 10, 1) {
            // NVIDIA's frontend refuses f16 / bf16 attention on these releases.
            for bwd in [false, true] {
                let r = base(DType::BF16).check(bwd);
                ensure!(
                    matches!(&r, Err(Error::Unsupported { needs: Some(n), .. }) if n.contains("9.10.2")),
                    "9.10.0/9.10.1 refused: {r:?}"
                );
            }
            return Ok(());
        }
        let refused_naming = |r: &Result<(), Error>, word: &str| {
            matches!(r, Err(e @ Error::Unsupported { .. }) if e.to_string().contains(word))
        };
        // Native forward: causal + padding need 9.21 (the SDPA operation 9.13.1, padding 9.15).
        let masks = base(DType::BF16).causal(true).padding(true);
        let fwd = masks.clone().implementation(SdpaImpl::Native).check(false);
        eprintln!("native fwd causal+padding: {fwd:?}");
        ensure!(
            fwd.is_ok() == (have >= since::SUBGRAPH),
            "forward with causal + padding needs 9.21: {fwd:?}"
        );
        if let Err(e) = &fwd {
            ensure!(
                matches!(e, Error::Unsupported { needs: Some(n), .. } if n.contains("9.")),
                "the refusal names the version: {e}"
            );
        }
        // Native inference forward with dropout: 9.22.
        let drop_inf = base(DType::BF16).dropout(0.1).implementation(SdpaImpl::Native);
        let r = drop_inf.check(false);
        ensure!(
            r.is_ok() == (have >= since::FORWARD_DROPOUT),
            "inference dropout needs 9.22: {r:?}"
        );
        // Native training forward with dropout: never (no statistics with dropout).
        let drop_train = drop_inf.clone().training(true);
        // (Before the SDPA operation exists, the refusal names that instead.)
        let r = drop_train.check(false);
        let word = if have >= since::FORWARD { "dropout" } else { "SDPA_FWD" };
        ensure!(refused_naming(&r, word), "training + dropout native fwd: {r:?}");
        // Native backward with dropout: never (the forward's mask is the composite's).
        let r = drop_inf.check(true);
        let word = if have >= since::BACKWARD { "dropout" } else { "SDPA_BWD" };
        ensure!(refused_naming(&r, word), "native bwd with dropout: {r:?}");
        // Native backward without dropout: the SDPA_BWD operation (9.21) and the options.
        let r = masks.clone().implementation(SdpaImpl::Native).check(true);
        ensure!(
            r.is_ok() == (have >= since::SUBGRAPH),
            "native bwd causal + padding: {r:?}"
        );
        // Auto: the SDPA operation for a forward it supports, the composite
        // for every other forward and every backward (as frontend 1.32).
        let want = |native_ok: bool| {
            if native_ok {
                SdpaImpl::Native
            } else {
                SdpaImpl::Composite
            }
        };
        ensure!(masks.resolve(false)? == want(fwd.is_ok()), "auto fwd masks");
        ensure!(masks.resolve(true)? == SdpaImpl::Composite, "auto bwd masks");
        let train_drop = base(DType::BF16).training(true).dropout(0.1);
        ensure!(
            train_drop.resolve(false)? == SdpaImpl::Composite
                && train_drop.resolve(true)? == SdpaImpl::Composite,
            "a training step with dropout is composite both ways"
        );
        let plain = base(DType::BF16);
        ensure!(
            plain.resolve(false)? == want(have >= since::FORWARD),
            "auto plain fwd (the SDPA operation from 9.13.1)"
        );
        ensure!(plain.resolve(true)? == SdpaImpl::Composite, "auto plain bwd");
        // Dropout 0 is no dropout: a native training forward is fine again.
        let zero = base(DType::BF16).training(true).dropout(0.0);
        ensure!(zero.active_dropout().is_none(), "p = 0 is off");
        ensure!(
            zero.resolve(false)? == want(have >= since::FORWARD),
            "p = 0 resolves as no dropout"
        );
        let forced = plain.clone().implementation(SdpaImpl::Composite);
        ensure!(forced.resolve(false)? == SdpaImpl::Composite, "forced composite fwd");
        ensure!(forced.resolve(true)? == SdpaImpl::Composite, "forced composite bwd");
        // The composite backward refuses s_q = s_kv = 1 (the forward takes it).
        let one = SdpaConfig::new(2, 4, 1, 64, DType::BF16).padding(true);
        let r = one.check(true);
        ensure!(refused_naming(&r, "seq_q = seq_kv = 1"), "s_q = s_kv = 1: {r:?}");
        ensure!(one.check(false).is_ok(), "the forward takes s = 1");
        // Up to cuDNN 9.15.0 the composite backward needs a padding mask when
        // seq_kv is not a multiple of 128.
        let odd = base(DType::BF16)
            .kv_len(200)
            .implementation(SdpaImpl::Composite);
        let r = odd.check(true);
        eprintln!("composite bwd s_kv 200 without padding: {r:?}");
        if have <= (9, 15, 0) {
            ensure!(
                matches!(&r, Err(Error::Unsupported { needs: Some(n), .. }) if n.contains("padding")),
                "names padding: {r:?}"
            );
            ensure!(odd.clone().padding(true).check(true).is_ok(), "with padding");
        } else {
            ensure!(r.is_ok(), "cuDNN >= 9.15.1: {r:?}");
        }
        ensure!(odd.check(false).is_ok(), "the forward has no such limit");
        Ok(())
    }));

    t.push(host9("sdpa_timing_fills_and_causal_index_type", || {
        // Timing runs (`Plan::autotune`) fill a padded attention's sequence
        // lengths with the full lengths, per construction and direction.
        let cfg = SdpaConfig::new(2, 4, 128, 64, DType::BF16)
            .kv_len(256)
            .padding(true)
            .causal(true)
            .training(true);
        for imp in [SdpaImpl::Auto, SdpaImpl::Composite] {
            let cfg = cfg.clone().implementation(imp);
            for bwd in [false, true] {
                let (g, lens) = if bwd {
                    let (g, b) = sdpa_bwd(&cfg)?;
                    (g, [b.seq_len_q, b.seq_len_kv])
                } else {
                    let (g, f) = sdpa_fwd(&cfg)?;
                    (g, [f.seq_len_q, f.seq_len_kv])
                };
                let og = g.build()?;
                let uid = |t: Option<Tensor>| -> Result<i64, Error> {
                    let name = g.name(t.ok_or_else(|| Error::invalid("test", "no seq len", 0))?)?;
                    og.io()
                        .tensors
                        .iter()
                        .find(|x| x.name == name)
                        .map(|x| x.uid)
                        .ok_or_else(|| Error::invalid("test", "not bound", name))
                };
                let want = vec![(uid(lens[0])?, 128), (uid(lens[1])?, 256)];
                let mut got = og.timing_fills().to_vec();
                got.sort_unstable();
                ensure!(
                    got == want,
                    "{imp:?} bwd={bwd}: fills {got:?}, want {want:?}"
                );
            }
        }
        let (plain, _) = sdpa_fwd(&base(DType::BF16))?;
        ensure!(
            plain.build()?.timing_fills().is_empty(),
            "no padding: nothing to fill"
        );
        // Before cuDNN 9.21 the composite's causal mask computes its indices
        // in INT32, as its padding mask does (NVIDIA's frontend leaves its
        // decomposed mask's GEN_INDEX to the graph's f32; see the sdpa
        // module's list of differences): every GEN_INDEX node of the plan's
        // JSON says so. From 9.21 the mask is cuDNN's diagonal band mask
        // operation (as the frontend builds it), forward and backward: in
        // the forward it feeds the softmax operation, in the backward it
        // masks `S - stats` before the exponential.
        let t = Target::preset("h200")?;
        let causal = base(DType::BF16)
            .causal(true)
            .training(true)
            .implementation(SdpaImpl::Composite);
        let v = cudnn::dnn::Handle::library_version()?;
        let v = (v.major, v.minor, v.patch);
        let plan_json = |g: Graph| -> Result<(serde_json::Value, Plan), libtest_mimic::Failed> {
            let (p, _) = Plan::build(&g.build()?, &t, &Policy::default())?;
            Ok((serde_json::from_str(&p.cudnn_json()?)?, p))
        };
        let (fj, _) = plan_json(sdpa_fwd(&causal)?.0)?;
        if let Some(b) = plan_nodes::top_left_causal(&fj, v, "composite causal forward")? {
            let sm = plan_nodes::find_ops(&fj, "CUDNN_BACKEND_OPERATION_SOFTMAX_DESCRIPTOR");
            ensure!(
                sm.len() == 1 && plan_nodes::field(sm[0], "X") == plan_nodes::field(b, "Y"),
                "the band's Y {:?} does not feed the softmax operation: {sm:?}",
                plan_nodes::field(b, "Y")
            );
        }
        let (bj, bp) = plan_json(sdpa_bwd(&causal)?.0)?;
        if let Some(b) = plan_nodes::top_left_causal(&bj, v, "composite causal backward")? {
            let stats = bp
                .io()
                .tensors
                .iter()
                .find(|x| x.name == "stats")
                .map(|x| x.uid.to_string())
                .ok_or("the backward binds no stats")?;
            let subs = plan_nodes::pointwise(&bj, "CUDNN_POINTWISE_SUB");
            ensure!(
                subs.iter()
                    .any(|n| plan_nodes::field(n, "B").as_ref() == Some(&stats)
                        && plan_nodes::field(n, "Y") == plan_nodes::field(b, "X")),
                "the backward's band does not mask S - stats (stats uid {stats}): band {b:?}"
            );
        }
        Ok(())
    }));

    t.push(host9("sdpa_backward_head_dims_per_target", || {
        // The composite backward's engines take head dims up to 256 on
        // sm_90, up to 128 on sm_80 (and on sm_100, but 192/128): beyond,
        // planning is a typed refusal naming the limit before cuDNN's
        // heuristics are asked.
        let v = cudnn::dnn::Handle::library_version()?;
        let cfg = SdpaConfig::new(1, 2, 128, 256, DType::BF16);
        let og = sdpa_bwd(&cfg)?.0.build()?;
        let policy = Policy::default().with_max_attempts(1);
        for (target, ok) in [
            ("h200", true),
            ("a100", false),
            // The frontend's 256 / 256 on sm_100 (9.23+) takes a pinned
            // deterministic engine; the one heuristics offer for the
            // composite fails to compile (cuDNN 9.28): refused.
            ("b200", false),
        ] {
            let t = Target::preset(target)?;
            let r = og.check_target(&t);
            eprintln!("bwd d=256 on {target}: {r:?}");
            ensure!(r.is_ok() == ok, "{target}: {r:?}");
            if !ok {
                let e = Plan::build(&og, &t, &policy).err();
                ensure!(
                    matches!(&e, Some(Error::Unsupported { needs: Some(n), .. }) if n.contains("head dims")),
                    "{target}: Plan::build refuses naming the head dims: {e:?}"
                );
            }
        }
        let d160 = sdpa_bwd(&SdpaConfig::new(1, 2, 128, 160, DType::BF16))?.0.build()?;
        let r = d160.check_target(&Target::preset("b200")?);
        ensure!(r.is_err(), "d=160 on sm_100: {r:?}");
        let d64 = sdpa_bwd(&SdpaConfig::new(1, 2, 128, 64, DType::BF16))?.0.build()?;
        for target in TARGETS {
            d64.check_target(&Target::preset(target)?)?;
        }
        // The forward: head dims above 128 on sm_80 need a cuDNN newer
        // than 9.9.0 (every stack planning here has one).
        let have = (v.major, v.minor, v.patch);
        let f = sdpa_fwd(&cfg.clone().training(true))?.0.build()?;
        let r = f.check_target(&Target::preset("a100")?);
        eprintln!("fwd d=256 on a100 with cuDNN {have:?}: {r:?}");
        ensure!(r.is_ok() == (have > (9, 9, 0)), "a100 forward d=256: {r:?}");
        // The native backward has the same limits as the composite.
        if have >= ops::sdpa::since::BACKWARD {
            let native = cfg.clone().implementation(SdpaImpl::Native);
            // cuDNN 9.19 (the GPU machine's torch wheel) refuses this op
            // graph itself (BAD_PARAM); the crate's rule is checked where
            // the op graph builds (9.28 in CI).
            let og = match sdpa_bwd(&native)?.0.build() {
                Ok(og) => og,
                Err(e @ Error::Cudnn { .. }) => {
                    eprintln!(
                        "skipped (native backward part): cuDNN {have:?} refuses the native \
                         backward's op graph: {e}"
                    );
                    return Ok(());
                }
                Err(e) => return Err(e.into()),
            };
            let r = og.check_target(&Target::preset("a100")?);
            ensure!(
                matches!(&r, Err(Error::Unsupported { needs: Some(n), .. }) if n.contains("head dims")),
                "native backward d=256 on a100: {r:?}"
            );
            og.check_target(&Target::preset("h200")?)?;
            let e = Plan::build(&og, &Target::preset("a100")?, &policy).err();
            ensure!(
                matches!(&e, Some(Error::Unsupported { .. })),
                "Plan::build refuses the native backward on a100: {e:?}"
            );
        }
        Ok(())
    }));

    t.push(host9("sdpa_dropout_zero_builds_no_rng", || {
        // Dropout of probability 0 is no dropout: no seed or offset inputs,
        // the same graph as without it, and no RNG op in the plan.
        let t = Target::preset("h200")?;
        let cfg = base(DType::BF16)
            .training(true)
            .implementation(SdpaImpl::Composite);
        let (g0, f0) = sdpa_fwd(&cfg.clone().dropout(0.0))?;
        let (gn, _) = sdpa_fwd(&cfg)?;
        let (gd, fd) = sdpa_fwd(&cfg.clone().dropout(0.1))?;
        ensure!(
            f0.dropout_seed.is_none() && f0.dropout_offset.is_none(),
            "p = 0: no seed / offset inputs"
        );
        ensure!(fd.dropout_seed.is_some(), "p = 0.1: a seed input");
        ensure!(
            g0.signature() == gn.signature(),
            "p = 0 is the graph without dropout"
        );
        let (b0, bb0) = sdpa_bwd(&cfg.clone().dropout(0.0))?;
        let (bn, _) = sdpa_bwd(&cfg)?;
        ensure!(bb0.dropout_seed.is_none(), "backward p = 0: no seed");
        ensure!(
            b0.signature() == bn.signature(),
            "backward p = 0 is without dropout"
        );
        let rng = "CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR";
        let json = |g: &Graph| -> Result<String, Error> {
            Plan::build(&g.build()?, &t, &Policy::default())?
                .0
                .cudnn_json()
        };
        ensure!(!json(&g0)?.contains(rng), "p = 0: no RNG op in the plan");
        ensure!(json(&gd)?.contains(rng), "p = 0.1: an RNG op in the plan");
        Ok(())
    }));

    t.push(host9(
        "sdpa_dropout_plan_json_rng_output_is_y_or_ydesc",
        || {
            // cuDNN 9.28 writes the RNG node's output as `Y`, 9.10 as `yDesc`:
            // the loader's check takes the plan under either name, and refuses
            // a node with both (cuDNN reads one; the other would pass as a
            // producer of a tensor nothing writes).
            let t = Target::preset("h200")?;
            let cfg = base(DType::BF16)
                .training(true)
                .dropout(0.1)
                .implementation(SdpaImpl::Composite);
            let (g, _) = sdpa_fwd(&cfg)?;
            let (p, _) = Plan::build(&g.build()?, &t, &Policy::default())?;
            let json = p.cudnn_json()?;
            let io = p.io().clone();
            check_plan_json(&json, &io, &t, None)?;
            let mut v: serde_json::Value = serde_json::from_str(&json)?;
            let nodes = v
                .pointer_mut("/operationGraph/nodes")
                .and_then(|n| n.as_array_mut())
                .ok_or("no nodes")?;
            let rng = nodes
                .iter_mut()
                .find(|n| n["operation"] == "CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR")
                .and_then(|n| n.as_object_mut())
                .ok_or("no RNG node in a plan with dropout")?;
            let (ours, other) = if rng.contains_key("Y") {
                ("Y", "yDesc")
            } else {
                ("yDesc", "Y")
            };
            let out = rng.get(ours).cloned().ok_or("the RNG node has no output")?;
            eprintln!("  this cuDNN names the RNG's output `{ours}`");
            // The other name alone: the same plan, accepted.
            rng.remove(ours);
            rng.insert(other.to_string(), out.clone());
            check_plan_json(&v.to_string(), &io, &t, None)
                .map_err(|e| format!("the RNG output as `{other}`: {e}"))?;
            // Both names: refused, naming them.
            let rng = v
                .pointer_mut("/operationGraph/nodes")
                .and_then(|n| n.as_array_mut())
                .and_then(|n| {
                    n.iter_mut()
                        .find(|n| n["operation"] == "CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR")
                })
                .and_then(|n| n.as_object_mut())
                .ok_or("no RNG node")?;
            rng.insert(ours.to_string(), out);
            match check_plan_json(&v.to_string(), &io, &t, None) {
                Err(e @ Error::InvalidArgument { .. }) if e.to_string().contains("yDesc") => {
                    eprintln!("  both names: refused: {e}");
                    Ok(())
                }
                other => Err(format!("an RNG node naming `Y` and `yDesc`: {other:?}").into()),
            }
        },
    ));

    t.push(host9("sdpa_nvrtc_found_for_older_cudnn", || {
        // Planning opens NVRTC where it is found (cuDNN 9.10's
        // runtime-compiled engines need it; 9.28's do not).
        let g = sdpa_fwd(&base(DType::BF16).implementation(SdpaImpl::Composite))?.0;
        let _ = g.build()?;
        let v = cudnn::dnn::Handle::library_version()?;
        let loaded = nvrtc::loaded();
        eprintln!("cuDNN {v:?}; NVRTC opened: {loaded:?}");
        if (v.major, v.minor) < (9, 28) && std::env::var_os("NVRTC_LIB_DIR").is_none() {
            let cudnn_dir = cudnn::sys::cudnn::load()?
                .info()
                .path
                .clone()
                .and_then(|p| p.parent().map(|d| d.to_path_buf()))
                .ok_or("cuDNN's folder")?;
            ensure!(
                !loaded.is_empty(),
                "cuDNN {v:?} from {} plans runtime-compiled engines only with NVRTC; none was opened",
                cudnn_dir.display()
            );
            for p in loaded {
                ensure!(p.path.is_absolute() && p.path.is_file(), "{p:?}");
                // From a folder of its own (a wheel), NVRTC's built-in
                // headers must be opened with it (NVRTC 13.0 does not
                // look beside itself).
                let b = p.builtins.as_ref().ok_or_else(|| format!("{p:?}: builtins not opened"))?;
                ensure!(
                    b.is_file()
                        && b.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                            n.starts_with("libnvrtc-builtins.so.")
                        }),
                    "{p:?}"
                );
            }
        }
        Ok(())
    }));

    t.push(host9("sdpa_composite_scratch_and_files", || {
        let target = Target::preset("h200")?;
        // The backward keeps two f32 tensors in the plan's workspace: the
        // row sums [B, H, S_q, 1] and the dQ accumulator [B, H, S_q, D].
        let cfg = base(DType::BF16).implementation(SdpaImpl::Composite);
        let og = sdpa_bwd(&cfg)?.0.build()?;
        let sums = 2 * 8 * 256 * 4;
        let accum = 2 * 8 * 256 * 64 * 4;
        let mut bytes: Vec<usize> = og.io().scratch.iter().map(|s| s.1).collect();
        bytes.sort_unstable();
        ensure!(bytes == [sums, accum], "scratch sizes {bytes:?}");
        ensure!(
            og.io().tensors.iter().all(|t| !t.name.contains("scratch")),
            "scratch tensors are not bound by callers: {:?}",
            og.io().tensors
        );
        let (p, _) = Plan::build(&og, &target, &Policy::default())?;
        let raw: i64 =
            p.with_descriptor(|d| d.get_one(backend::attr::EXECUTION_PLAN_WORKSPACE_SIZE))??;
        let raw = usize::try_from(raw)?;
        let want = raw.next_multiple_of(256) + sums + accum;
        eprintln!(
            "composite bwd: cuDNN workspace {raw} B, with scratch {} B",
            p.workspace_size()
        );
        ensure!(
            p.workspace_size() == want,
            "workspace {} = cuDNN's {raw} rounded to 256 + {sums} + {accum}",
            p.workspace_size()
        );
        let text = p.serialize()?;
        ensure!(
            text.contains("\nscratch 2\n"),
            "the plan file lists the scratch"
        );
        // Serialized by this test: trusted (SDPA carries compiled code).
        // SAFETY: `text` is `serialize()` of the plan built just above with the loaded
        // cuDNN, unchanged.
        let p2 = unsafe { Plan::deserialize_unverified(&text, &target) }?;
        ensure!(p2.io() == p.io(), "io (with scratch) round trips");
        ensure!(
            p2.workspace_size() == p.workspace_size(),
            "workspace round trips"
        );
        // A scratch line that lies is refused.
        let bad = text.replacen("\nscratch 2\n", "\nscratch 99\n", 1);
        ensure!(
            Plan::deserialize(&bad, &target, Trust::NoCompiledCode).is_err(),
            "bad scratch count"
        );
        // The forward has none, and its file has no scratch section.
        let og = sdpa_fwd(&cfg.clone().training(true))?.0.build()?;
        ensure!(og.io().scratch.is_empty(), "forward scratch");
        let (p, _) = Plan::build(&og, &target, &Policy::default())?;
        ensure!(!p.serialize()?.contains("scratch"), "no scratch section");
        // The composite and the SDPA operation are different graphs to a cache.
        let native = sdpa_fwd(&base(DType::BF16).implementation(SdpaImpl::Native));
        if let Ok((g, _)) = native {
            let c = sdpa_fwd(&cfg)?.0;
            ensure!(g.signature() != c.signature(), "signatures differ");
            ensure!(c.signature().contains("composite"), "{}", c.signature());
        }
        Ok(())
    }));

    t.push(host9("sdpa_property_random_shapes", || {
        use proptest::prelude::*;

        use std::sync::Mutex;
        let tally = Mutex::new((0usize, 0usize, 0usize));
        let mut runner = crate::support::prop_runner(32);
        let strat = (
            1i64..4,
            prop::sample::select(vec![1i64, 2, 4, 8]),
            prop::sample::select(vec![1i64, 2, 4]),
            1i64..700,
            1i64..700,
            prop::sample::select(vec![8i64, 32, 64, 72, 100, 128, 256, 264]),
            prop::sample::select(vec![DType::F16, DType::BF16, DType::F32]),
            any::<(bool, bool, bool, bool, bool)>(),
            prop::sample::select(vec![0.0f64, 0.1, 0.25, 1.0]),
            prop::sample::select(vec![SdpaImpl::Auto, SdpaImpl::Native, SdpaImpl::Composite]),
        );
        runner
            .run(&strat, |(b, h, hkv, sq, skv, d, dt, flags, p, imp)| {
                let (causal, padding, bhsd, train, bwd) = flags;
                let mut cfg = SdpaConfig::new(b, h, sq, d, dt)
                    .kv_len(skv)
                    .gqa(hkv)
                    .causal(causal)
                    .padding(padding)
                    .training(train || bwd)
                    .implementation(imp);
                if bhsd {
                    cfg = cfg.layout(AttnLayout::Bhsd);
                }
                if p > 0.0 {
                    cfg = cfg.dropout(p);
                }
                let r = sdpa_graph(&cfg, bwd).and_then(|g| {
                    let og = g.build()?;
                    Plan::build(
                        &og,
                        &Target::preset("h200")?,
                        &Policy::default().with_max_attempts(2),
                    )
                });
                let mut t = tally.lock().map_err(|_| TestCaseError::fail("poisoned"))?;
                match r {
                    Ok((plan, _)) => {
                        t.0 += 1;
                        eprintln!("accept {cfg:?} bwd={bwd}: ws {}", plan.workspace_size());
                    }
                    Err(e) => {
                        // Rejected before cuDNN (Rust checks) or by cuDNN, never a panic.
                        let rust =
                            matches!(e, Error::InvalidArgument { .. } | Error::Unsupported { .. });
                        if rust {
                            t.1 += 1
                        } else {
                            t.2 += 1
                        }
                        let s = e.to_string();
                        eprintln!(
                            "reject {cfg:?} bwd={bwd}: {}",
                            s.lines().next().unwrap_or("")
                        );
                        prop_assert!(is_typed_refusal(&e), "untyped {e:?}");
                        // Rejections that Rust can predict must name the field.
                        // (in the order SdpaConfig::check tests them)
                        if h % hkv != 0 {
                            prop_assert!(s.contains("kv_heads"), "{s}");
                        } else if d % 8 != 0 || d > 256 {
                            prop_assert!(s.contains("head_dim"), "{s}");
                        } else if dt == DType::F32 {
                            prop_assert!(s.contains("dtype"), "{s}");
                        } else if p >= 1.0 {
                            prop_assert!(s.contains("dropout"), "{s}");
                        }
                    }
                }
                Ok(())
            })
            .map_err(|e| format!("{e}"))?;
        let t = tally.lock().map_err(|_| "poisoned")?;
        eprintln!(
            "property: {} accepted, {} rejected in Rust, {} rejected by cuDNN",
            t.0, t.1, t.2
        );
        Ok(())
    }));

    t.push(host9("serialized_plans_round_trip", || {
        let target = Target::preset("h200")?;
        let graphs: Vec<(&str, Graph)> = vec![
            (
                "layer_norm train",
                layer_norm_fwd(DType::BF16, NormPhase::Training, "")?,
            ),
            (
                "batch_norm train running",
                batch_norm_fwd(DType::F16, true, "")?,
            ),
            (
                "sdpa fwd train causal",
                sdpa_fwd(&base(DType::BF16).training(true).causal(true))?.0,
            ),
            ("sdpa bwd", sdpa_bwd(&base(DType::BF16))?.0),
            (
                "sdpa composite fwd train causal dropout",
                sdpa_fwd(
                    &base(DType::BF16)
                        .training(true)
                        .causal(true)
                        .dropout(0.1)
                        .implementation(SdpaImpl::Composite),
                )?
                .0,
            ),
            (
                "sdpa composite bwd padding gqa",
                sdpa_bwd(
                    &base(DType::BF16)
                        .padding(true)
                        .gqa(2)
                        .implementation(SdpaImpl::Composite),
                )?
                .0,
            ),
        ];
        for (name, g) in graphs {
            let og = g.build()?;
            let (p, _) = Plan::build(&og, &target, &Policy::default())?;
            let s = p.serialize()?;
            // Serialized by this test: trusted (compiled code loads).
            // SAFETY: `s` is `serialize()` of the plan built just above with the loaded
            // cuDNN, unchanged.
            let p2 = unsafe { Plan::deserialize_unverified(&s, &target) }?;
            ensure!(
                p2.workspace_size() == p.workspace_size(),
                "{name}: workspace"
            );
            ensure!(p2.io() == p.io(), "{name}: io signature");
            ensure!(
                p2.cudnn_json()? == p.cudnn_json()?,
                "{name}: cuDNN JSON differs"
            );
            let other = Target::preset("a100")?;
            ensure!(
                Plan::deserialize(&s, &other, Trust::NoCompiledCode).is_err(),
                "{name}: a plan for H200 must not load for A100"
            );
            eprintln!(
                "{name}: plan file {} bytes, ws {}",
                s.len(),
                p.workspace_size()
            );
        }
        Ok(())
    }));

    run(t)
}
