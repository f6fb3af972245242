//! GPU tier for issue 24's attention options together (skipped visibly
//! without a device; a failure under `CUDNN_RS_REQUIRE_GPU=1`): the logit
//! softcap, an additive bias with dBias, ALiBi, a sink per head with dSink
//! and the row max / sum_exp outputs, combined, forward (`Auto` and the
//! composite) and backward (`Auto`, the composite), against the f64
//! reference (`reference::attention::{forward_parts, backward, dbias,
//! backward_d_sink}`) on bf16-rounded inputs; every output is poisoned
//! with NaN first (NaN never passes). Bounds: O 3e-2, the statistics,
//! max and sum_exp 1e-2 relative to `max(1, |want|)`; dQ, dK, dV 5e-2;
//! dBias and dSink 5e-2 of their largest magnitude.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::neg_cmp_op_on_partial_ord)]
use crate::support;

use crate::support::gpu_sdpa::{bind_backward_inputs, bind_grads};
use crate::support::gpu_sdpa::{
    check, dims as dims4, down_bf16 as down, down_f32 as down32, hashed as value, up_bf16 as up,
    up_f32 as up32,
};
use cudnn::dnn::Handle;
use cudnn::graph::*;
use cudnn::reference::attention as ra;
use cudnn::runtime::{Device, Stream};
use half::bf16;
use support::*;

type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// The host values of one case (bf16-exact where the device reads bf16).
struct Inputs {
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
    bias: Vec<f64>,
    slopes: Vec<f64>,
    sink: Vec<f64>,
}

fn inputs(cfg: &SdpaConfig) -> R<Inputs> {
    let n = |s: TensorSpec| s.span_elements();
    let bias = if cfg.bias.is_some() {
        (0..n(cfg.bias_spec()?)?)
            .map(|i| value(4, i, 2.0))
            .collect()
    } else {
        Vec::new()
    };
    let slopes = if cfg.alibi {
        alibi_slopes(cfg.heads as usize)?
            .iter()
            .map(|&s| f64::from(s))
            .collect()
    } else {
        Vec::new()
    };
    let sink = if cfg.sink {
        (0..cfg.heads as usize).map(|i| value(6, i, 3.0)).collect()
    } else {
        Vec::new()
    };
    Ok(Inputs {
        q: (0..n(cfg.q_spec()?)?).map(|i| value(1, i, 1.0)).collect(),
        k: (0..n(cfg.k_spec()?)?).map(|i| value(2, i, 2.0)).collect(),
        v: (0..n(cfg.v_spec()?)?).map(|i| value(3, i, 1.0)).collect(),
        bias,
        slopes,
        sink,
    })
}

fn ref_cfg<'a>(cfg: &SdpaConfig, a: &'a Inputs) -> R<ra::SdpaConfig<'a>> {
    let mut rc = ra::SdpaConfig::new(cfg.scale_value());
    if cfg.is_causal {
        rc.causal = ra::CausalMask::TopLeft;
    }
    rc.softcap = cfg.softcap;
    if cfg.bias.is_some() {
        rc.bias = Some(ra::View::bhsd(&a.bias, dims4(&cfg.bias_spec()?)));
    }
    if cfg.alibi {
        rc.alibi_slopes = Some(&a.slopes);
    }
    Ok(rc)
}

fn sink_of(a: &Inputs) -> Option<&[f64]> {
    (!a.sink.is_empty()).then_some(a.sink.as_slice())
}

fn forward_case(cfg: SdpaConfig) -> TestResult {
    Device::new(0)?;
    let stream = Stream::new()?;
    let mut h = Handle::new(&stream)?;
    let cfg = cfg.layout(AttnLayout::Bhsd).training(true);
    let a = inputs(&cfg)?;
    let rc = ref_cfg(&cfg, &a)?;
    let mut g = Graph::new();
    let qt = g.input("q", cfg.q_spec()?)?;
    let kt = g.input("k", cfg.k_spec()?)?;
    let vt = g.input("v", cfg.v_spec()?)?;
    let f = g.sdpa_forward_training(qt, kt, vt, &cfg)?;
    g.rename(f.o, "o")?;
    let (plan, r) = Plan::build(&g.build()?, &Target::device(0)?, &Policy::default())?;
    eprintln!("  {:?}: engine {:?}", cfg.resolve(false)?, r.chosen);
    let rows = cfg.stats_spec()?.span_elements()?;
    let on = cfg.o_spec()?.span_elements()?;
    let (qb, kb, vb) = (up(&a.q)?, up(&a.k)?, up(&a.v)?);
    let biasb = up(if a.bias.is_empty() { &[0.0] } else { &a.bias })?;
    let slopesb = up32(if a.slopes.is_empty() {
        &[0.0]
    } else {
        &a.slopes
    })?;
    let sinkb = up32(if a.sink.is_empty() { &[0.0] } else { &a.sink })?;
    let mut ob = up(&vec![f64::NAN; on])?;
    let nan = vec![f64::NAN; rows];
    let (mut sb, mut mb, mut lb) = (up32(&nan)?, up32(&nan)?, up32(&nan)?);
    {
        let mut bi = plan.bindings();
        bi.input("q", qb.as_slice())?
            .input("k", kb.as_slice())?
            .input("v", vb.as_slice())?
            .output("o", ob.as_slice_mut())?;
        bi.output(g.name(f.stats)?, sb.as_slice_mut())?;
        if let (Some(m), Some(l)) = (f.softmax.max, f.softmax.sum_exp) {
            bi.output(g.name(m)?, mb.as_slice_mut())?
                .output(g.name(l)?, lb.as_slice_mut())?;
        }
        if let Some(t) = f.softmax.sink {
            bi.input(g.name(t)?, sinkb.as_slice())?;
        }
        if let Some(t) = f.bias.bias {
            bi.input(g.name(t)?, biasb.as_slice())?;
        }
        if let Some(t) = f.bias.alibi_slopes {
            bi.input(g.name(t)?, slopesb.as_slice())?;
        }
        plan.execute(&mut h, &mut bi)?;
    }
    h.stream().synchronize()?;
    let (qd, kd, vd) = (
        dims4(&cfg.q_spec()?),
        dims4(&cfg.k_spec()?),
        dims4(&cfg.v_spec()?),
    );
    let want = ra::forward_parts(
        &ra::View::bhsd(&a.q, qd),
        &ra::View::bhsd(&a.k, kd),
        &ra::View::bhsd(&a.v, vd),
        &rc,
        sink_of(&a),
    )?;
    check("o", &down(&ob, on)?, &want.o, 1.0, 3e-2)?;
    check("stats", &down32(&sb, rows)?, &want.stats, 1.0, 1e-2)?;
    if f.softmax.max.is_some() {
        check("max", &down32(&mb, rows)?, &want.max, 1.0, 1e-2)?;
        check("sum_exp", &down32(&lb, rows)?, &want.sum_exp, 1.0, 1e-2)?;
    }
    Ok(())
}

fn backward_case(cfg: SdpaConfig) -> TestResult {
    Device::new(0)?;
    let stream = Stream::new()?;
    let mut h = Handle::new(&stream)?;
    let cfg = cfg.layout(AttnLayout::Bhsd).training(true);
    let a = inputs(&cfg)?;
    let rc = ref_cfg(&cfg, &a)?;
    let (qs, ks, vs, os) = (cfg.q_spec()?, cfg.k_spec()?, cfg.v_spec()?, cfg.o_spec()?);
    let (qv, kv, vv) = (
        ra::View::bhsd(&a.q, dims4(&qs)),
        ra::View::bhsd(&a.k, dims4(&ks)),
        ra::View::bhsd(&a.v, dims4(&vs)),
    );
    let f = ra::forward_parts(&qv, &kv, &vv, &rc, sink_of(&a))?;
    let o: Vec<f64> = f.o.iter().map(|&x| f64::from(bf16::from_f64(x))).collect();
    let d_o: Vec<f64> = (0..os.span_elements()?).map(|i| value(5, i, 1.0)).collect();
    let stats: Vec<f64> = f.stats.iter().map(|&s| f64::from(s as f32)).collect();

    let (g, b) = support::norm_attention_graphs::sdpa_bwd(&cfg)?;
    let (plan, r) = Plan::build(&g.build()?, &Target::device(0)?, &Policy::default())?;
    eprintln!("  backward {:?}: engine {:?}", cfg.resolve(true)?, r.chosen);
    let (qb, kb, vb, ob, dob) = (up(&a.q)?, up(&a.k)?, up(&a.v)?, up(&o)?, up(&d_o)?);
    let sb = up32(&stats)?;
    let biasb = up(if a.bias.is_empty() { &[0.0] } else { &a.bias })?;
    let slopesb = up32(if a.slopes.is_empty() {
        &[0.0]
    } else {
        &a.slopes
    })?;
    let sinkb = up32(if a.sink.is_empty() { &[0.0] } else { &a.sink })?;
    let nan = |n: usize| up(&vec![f64::NAN; n]);
    let (mut dq, mut dk, mut dv) = (nan(a.q.len())?, nan(a.k.len())?, nan(a.v.len())?);
    let mut db = nan(a.bias.len().max(1))?;
    let mut dsink = up32(&vec![f64::NAN; a.sink.len().max(1)])?;
    {
        let mut bi = plan.bindings();
        bind_backward_inputs(&mut bi, [&qb, &kb, &vb, &ob, &dob], &sb)?;
        bind_grads(&mut bi, [&mut dq, &mut dk, &mut dv])?;
        if let Some(t) = b.bias.bias {
            bi.input(g.name(t)?, biasb.as_slice())?;
        }
        if let Some(t) = b.bias.alibi_slopes {
            bi.input(g.name(t)?, slopesb.as_slice())?;
        }
        if let Some(t) = b.bias.dbias {
            bi.output(g.name(t)?, db.as_slice_mut())?;
        }
        if let Some(t) = b.softmax.sink {
            bi.input(g.name(t)?, sinkb.as_slice())?;
        }
        if let Some(t) = b.softmax.d_sink {
            bi.output(g.name(t)?, dsink.as_slice_mut())?;
        }
        plan.execute(&mut h, &mut bi)?;
    }
    h.stream().synchronize()?;
    let ov = ra::View::bhsd(&o, dims4(&os));
    let dov = ra::View::bhsd(&d_o, dims4(&os));
    let want = ra::backward(&qv, &kv, &vv, &ov, &dov, &stats, &rc)?;
    check("dq", &down(&dq, a.q.len())?, &want.dq, 1.0, 5e-2)?;
    check("dk", &down(&dk, a.k.len())?, &want.dk, 1.0, 5e-2)?;
    check("dv", &down(&dv, a.v.len())?, &want.dv, 1.0, 5e-2)?;
    if b.bias.dbias.is_some() {
        let w = ra::dbias(&qv, &kv, &vv, &ov, &dov, &stats, &rc)?;
        let scale = w.iter().fold(0f64, |m, x| m.max(x.abs()));
        ensure!(scale > 0.0, "the reference dBias is all zero");
        check("dbias", &down(&db, a.bias.len())?, &w, scale, 5e-2)?;
    }
    if b.softmax.d_sink.is_some() {
        let w = ra::backward_d_sink(&ov, &dov, &stats, &a.sink)?;
        let scale = w.iter().fold(0f64, |m, x| m.max(x.abs()));
        ensure!(scale > 0.0, "the reference dSink is all zero");
        check("dsink", &down32(&dsink, a.sink.len())?, &w, scale, 5e-2)?;
    }
    Ok(())
}

fn base() -> SdpaConfig {
    SdpaConfig::new(2, 4, 128, 64, DType::BF16)
}

pub fn main() {
    let mut t = Vec::new();
    for (suffix, imp) in [("", SdpaImpl::Auto), ("_composite", SdpaImpl::Composite)] {
        t.push(gpu(
            &format!("sdpa_softcap_bias_sink_max_sum_exp_fwd_bf16{suffix}"),
            move || {
                forward_case(
                    base()
                        .softcap(20.0)
                        .bias(AttnBias::new(false, true))
                        .sink(true)
                        .max_sum_exp(true)
                        .implementation(imp),
                )
            },
        ));
        t.push(gpu(
            &format!("sdpa_causal_alibi_sink_fwd_bf16{suffix}"),
            move || {
                forward_case(
                    base()
                        .causal(true)
                        .alibi(true)
                        .sink(true)
                        .implementation(imp),
                )
            },
        ));
    }
    t.push(gpu("sdpa_softcap_bias_dbias_sink_dsink_bwd_bf16", || {
        backward_case(
            base()
                .softcap(20.0)
                .bias(AttnBias::full().with_dbias(true))
                .sink(true)
                .sink_grad(true),
        )
    }));
    t.push(gpu("sdpa_causal_alibi_sink_dsink_bwd_bf16", || {
        backward_case(base().causal(true).alibi(true).sink(true).sink_grad(true))
    }));
    t.push(gpu("sdpa_causal_bias_dbias_sink_dsink_bwd_bf16", || {
        backward_case(
            base()
                .causal(true)
                .bias(AttnBias::new(true, false).with_dbias(true))
                .sink(true)
                .sink_grad(true),
        )
    }));
    run(t)
}
