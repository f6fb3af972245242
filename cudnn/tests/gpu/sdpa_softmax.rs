//! GPU tier for issue 24's softmax options (skipped visibly without a
//! device; a failure under `CUDNN_RS_REQUIRE_GPU=1`), against the f64
//! reference (`reference::attention::forward_parts`, `backward`,
//! `backward_d_sink`, `combine_partials`) on bf16-rounded inputs, every
//! output poisoned with NaN first (NaN never passes):
//! - the row max and sum of exponentials (`max_sum_exp`) with O and the
//!   statistics, through `Auto` and the composite (bound 3e-2 on O, 1e-2
//!   relative on max / sum_exp / stats);
//! - split-KV: two cuDNN forwards over the two halves of the keys, each
//!   with max / sum_exp, combined on the host, against the attention over
//!   all keys (bound 3e-2);
//! - attention sinks: the forward (O, statistics) and the backward with
//!   dSink (dQ, dK, dV bound 5e-2 relative to `max(1, |want|)`, dSink 5e-2
//!   relative to `max(1, max |dSink|)`).
//!
//! Each runs through `Auto` and the composite, and through the SDPA
//! operation (`_native`: its softmax sub-descriptor and its backward's
//! sink / dSink; ignored, visibly, before cuDNN 9.21, which the device
//! check's 9.19 is: there `Auto` is the composite too).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::neg_cmp_op_on_partial_ord)]
use crate::support;
use crate::support::sdpa_plans::fwd_any;

use crate::support::gpu_sdpa::bind_backward_inputs;
use crate::support::gpu_sdpa::{
    check, down_bf16 as down, down_f32 as down32, hashed, up_bf16 as up, up_f32 as up32,
};
use crate::support::sdpa_plans::loaded;
use cudnn::dnn::Handle;
use cudnn::graph::*;
use cudnn::reference::attention as ra;
use cudnn::runtime::{Device, Stream};
use half::bf16;
use support::*;

type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// Element `i` of stream `seed`, in `[-1, 1)`, bf16-exact.
fn value(seed: u64, i: usize) -> f64 {
    hashed(seed, i, 1.0)
}

/// Q, K, V for a BHSD config (host values, bf16-exact).
fn qkv(cfg: &SdpaConfig, seed: u64) -> R<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    let n = |s: TensorSpec| s.span_elements();
    Ok((
        (0..n(cfg.q_spec()?)?).map(|i| value(seed, i)).collect(),
        (0..n(cfg.k_spec()?)?)
            .map(|i| 2.0 * value(seed + 1, i))
            .collect(),
        (0..n(cfg.v_spec()?)?).map(|i| value(seed + 2, i)).collect(),
    ))
}

/// What one device forward wrote: O, stats, max, sum_exp (packed).
struct Fwd {
    o: Vec<f64>,
    stats: Option<Vec<f64>>,
    max: Option<Vec<f64>>,
    sum_exp: Option<Vec<f64>>,
}

/// One forward on the device (BHSD config), the sink bound if asked.
fn device_forward(
    cfg: &SdpaConfig,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    sink: Option<&[f64]>,
) -> R<Fwd> {
    let stream = Stream::new()?;
    let mut h = Handle::new(&stream)?;
    let target = Target::device(0)?;
    let mut g = Graph::new();
    let qt = g.input("q", cfg.q_spec()?)?;
    let kt = g.input("k", cfg.k_spec()?)?;
    let vt = g.input("v", cfg.v_spec()?)?;
    let f = fwd_any(&mut g, qt, kt, vt, cfg)?;
    let (plan, r) = Plan::build(&g.build()?, &target, &Policy::default())?;
    eprintln!("  {:?}: engine {:?}", cfg.resolve(false)?, r.chosen);
    let rows = cfg.stats_spec()?.span_elements()?;
    let on = cfg.o_spec()?.span_elements()?;
    let (qb, kb, vb) = (up(q)?, up(k)?, up(v)?);
    let mut ob = up(&vec![f64::NAN; on])?;
    let nan = vec![f64::NAN; rows];
    let (mut sb, mut mb, mut lb) = (up32(&nan)?, up32(&nan)?, up32(&nan)?);
    let kbuf = up32(sink.unwrap_or(&[0.0]))?;
    let name = |t: Tensor| -> R<String> { Ok(g.name(t)?.to_string()) };
    {
        let mut bi = plan.bindings();
        bi.input("q", qb.as_slice())?
            .input("k", kb.as_slice())?
            .input("v", vb.as_slice())?
            .output(&name(f.o)?, ob.as_slice_mut())?;
        if let Some(s) = f.stats {
            bi.output(&name(s)?, sb.as_slice_mut())?;
        }
        if let (Some(m), Some(l)) = (f.softmax.max, f.softmax.sum_exp) {
            bi.output(&name(m)?, mb.as_slice_mut())?
                .output(&name(l)?, lb.as_slice_mut())?;
        }
        if let Some(s) = f.softmax.sink {
            bi.input(&name(s)?, kbuf.as_slice())?;
        }
        plan.execute(&mut h, &mut bi)?;
    }
    h.stream().synchronize()?;
    Ok(Fwd {
        o: down(&ob, on)?,
        stats: f.stats.map(|_| down32(&sb, rows)).transpose()?,
        max: f.softmax.max.map(|_| down32(&mb, rows)).transpose()?,
        sum_exp: f.softmax.sum_exp.map(|_| down32(&lb, rows)).transpose()?,
    })
}

fn bhsd(cfg: &SdpaConfig) -> SdpaConfig {
    cfg.clone().layout(AttnLayout::Bhsd)
}

fn dims(cfg: &SdpaConfig) -> ([usize; 4], [usize; 4], [usize; 4]) {
    let (b, h, hk, sq, skv, d, dv) = (
        cfg.batch as usize,
        cfg.heads as usize,
        cfg.kv_heads as usize,
        cfg.seq_q as usize,
        cfg.seq_kv as usize,
        cfg.head_dim as usize,
        cfg.head_dim_v as usize,
    );
    ([b, h, sq, d], [b, hk, skv, d], [b, hk, skv, dv])
}

/// max / sum_exp (and O, stats) against the reference.
fn max_sum_exp_case(imp: SdpaImpl) -> TestResult {
    Device::new(0)?;
    let cfg = bhsd(&SdpaConfig::new(2, 4, 128, 64, DType::BF16).kv_len(192))
        .causal(true)
        .training(true)
        .max_sum_exp(true)
        .implementation(imp);
    let (q, k, v) = qkv(&cfg, 21)?;
    let got = device_forward(&cfg, &q, &k, &v, None)?;
    let (qd, kd, vd) = dims(&cfg);
    let mut rc = ra::SdpaConfig::new(cfg.scale_value());
    rc.causal = ra::CausalMask::TopLeft;
    let want = ra::forward_parts(
        &ra::View::bhsd(&q, qd),
        &ra::View::bhsd(&k, kd),
        &ra::View::bhsd(&v, vd),
        &rc,
        None,
    )?;
    check("o", &got.o, &want.o, 1.0, 3e-2)?;
    check(
        "stats",
        got.stats.as_deref().ok_or("stats")?,
        &want.stats,
        1.0,
        1e-2,
    )?;
    check(
        "max",
        got.max.as_deref().ok_or("max")?,
        &want.max,
        1.0,
        1e-2,
    )?;
    check(
        "sum_exp",
        got.sum_exp.as_deref().ok_or("sum_exp")?,
        &want.sum_exp,
        1.0,
        1e-2,
    )?;
    Ok(())
}

fn partial(f: &Fwd) -> R<ra::Partial<'_>> {
    Ok(ra::Partial {
        o: &f.o,
        max: f.max.as_deref().ok_or("max")?,
        sum_exp: f.sum_exp.as_deref().ok_or("sum_exp")?,
    })
}

/// Split-KV: two device forwards over the key halves, combined on the host.
fn split_kv_case(imp: SdpaImpl) -> TestResult {
    Device::new(0)?;
    let full = bhsd(&SdpaConfig::new(2, 8, 64, 128, DType::BF16).kv_len(512));
    let half = full
        .clone()
        .kv_len(256)
        .max_sum_exp(true)
        .implementation(imp);
    let (q, k, v) = qkv(&full, 31)?;
    let (b, hk, d, dv) = (2usize, 8usize, 128usize, 128usize);
    // The halves of K and V, packed BHSD each.
    let cut = |x: &[f64], w: usize, lo: usize| -> Vec<f64> {
        let mut out = Vec::with_capacity(b * hk * 256 * w);
        for n in 0..b {
            for hh in 0..hk {
                let base = (n * hk + hh) * 512 * w;
                out.extend_from_slice(&x[base + lo * w..base + (lo + 256) * w]);
            }
        }
        out
    };
    let a = device_forward(&half, &q, &cut(&k, d, 0), &cut(&v, dv, 0), None)?;
    let c = device_forward(&half, &q, &cut(&k, d, 256), &cut(&v, dv, 256), None)?;
    let combined = ra::combine_partials(&[partial(&a)?, partial(&c)?], dv)?;
    let (qd, kd, vd) = dims(&full);
    let want = ra::forward(
        &ra::View::bhsd(&q, qd),
        &ra::View::bhsd(&k, kd),
        &ra::View::bhsd(&v, vd),
        &ra::SdpaConfig::new(full.scale_value()),
    )?;
    check("split-KV combined o", &combined, &want.o, 1.0, 3e-2)
}

/// A sink: the forward (O, stats), then the backward with dSink from the
/// reference's O and statistics.
fn sink_case(imp: SdpaImpl) -> TestResult {
    Device::new(0)?;
    let cfg = bhsd(&SdpaConfig::new(2, 4, 128, 64, DType::BF16))
        .causal(true)
        .training(true)
        .sink(true)
        .sink_grad(true)
        .implementation(imp);
    let (q, k, v) = qkv(&cfg, 41)?;
    let sink: Vec<f64> = (0..4)
        .map(|i| f64::from(bf16::from_f64(1.5 * value(44, i))))
        .collect();
    let fwd_cfg = cfg.clone().sink_grad(false);
    let got = device_forward(&fwd_cfg, &q, &k, &v, Some(&sink))?;
    let (qd, kd, vd) = dims(&cfg);
    let mut rc = ra::SdpaConfig::new(cfg.scale_value());
    rc.causal = ra::CausalMask::TopLeft;
    let (qv, kv, vv) = (
        ra::View::bhsd(&q, qd),
        ra::View::bhsd(&k, kd),
        ra::View::bhsd(&v, vd),
    );
    let want = ra::forward_parts(&qv, &kv, &vv, &rc, Some(&sink))?;
    check("sink o", &got.o, &want.o, 1.0, 3e-2)?;
    check(
        "sink stats",
        got.stats.as_deref().ok_or("stats")?,
        &want.stats,
        1.0,
        1e-2,
    )?;

    // Backward from the reference's O (rounded to bf16) and statistics (f32).
    let o: Vec<f64> = want
        .o
        .iter()
        .map(|&x| f64::from(bf16::from_f64(x)))
        .collect();
    let stats: Vec<f64> = want.stats.iter().map(|&x| f64::from(x as f32)).collect();
    let d_o: Vec<f64> = (0..o.len()).map(|i| value(45, i)).collect();
    let stream = Stream::new()?;
    let mut h = Handle::new(&stream)?;
    let mut g = Graph::new();
    let qt = g.input("q", cfg.q_spec()?)?;
    let kt = g.input("k", cfg.k_spec()?)?;
    let vt = g.input("v", cfg.v_spec()?)?;
    let ot = g.input("o", cfg.o_spec()?)?;
    let dot = g.input("do", cfg.o_spec()?)?;
    let st = g.input("stats", cfg.stats_spec()?)?;
    let bw = g.sdpa_backward(qt, kt, vt, ot, dot, st, &cfg)?;
    let (plan, r) = Plan::build(&g.build()?, &Target::device(0)?, &Policy::default())?;
    eprintln!("  backward {:?}: engine {:?}", cfg.resolve(true)?, r.chosen);
    let (qb, kb, vb, ob, dob) = (up(&q)?, up(&k)?, up(&v)?, up(&o)?, up(&d_o)?);
    let sbuf = up32(&stats)?;
    let kbuf = up32(&sink)?;
    let (nq, nk, nv) = (q.len(), k.len(), v.len());
    let (mut dqb, mut dkb, mut dvb) = (
        up(&vec![f64::NAN; nq])?,
        up(&vec![f64::NAN; nk])?,
        up(&vec![f64::NAN; nv])?,
    );
    let mut dsb = up32(&[f64::NAN; 4])?;
    let name = |t: Tensor| -> R<String> { Ok(g.name(t)?.to_string()) };
    {
        let mut bi = plan.bindings();
        bind_backward_inputs(&mut bi, [&qb, &kb, &vb, &ob, &dob], &sbuf)?;
        bi.input(
            &name(bw.softmax.sink.ok_or("sink input")?)?,
            kbuf.as_slice(),
        )?
        .output(&name(bw.dq)?, dqb.as_slice_mut())?
        .output(&name(bw.dk)?, dkb.as_slice_mut())?
        .output(&name(bw.dv)?, dvb.as_slice_mut())?
        .output(
            &name(bw.softmax.d_sink.ok_or("d_sink output")?)?,
            dsb.as_slice_mut(),
        )?;
        plan.execute(&mut h, &mut bi)?;
    }
    h.stream().synchronize()?;
    let ov = ra::View::bhsd(&o, [qd[0], qd[1], qd[2], vd[3]]);
    let dov = ra::View::bhsd(&d_o, [qd[0], qd[1], qd[2], vd[3]]);
    let grads = ra::backward(&qv, &kv, &vv, &ov, &dov, &stats, &rc)?;
    let ds = ra::backward_d_sink(&ov, &dov, &stats, &sink)?;
    check("dq", &down(&dqb, nq)?, &grads.dq, 1.0, 5e-2)?;
    check("dk", &down(&dkb, nk)?, &grads.dk, 1.0, 5e-2)?;
    check("dv", &down(&dvb, nv)?, &grads.dv, 1.0, 5e-2)?;
    let scale = ds.iter().fold(1f64, |m, x| m.max(x.abs()));
    check("d_sink", &down32(&dsb, 4)?, &ds, scale, 5e-2)?;
    Ok(())
}

pub fn main() {
    let mut t = Vec::new();
    // The SDPA operation's softmax sub-descriptor and its backward's
    // sink / dSink (cuDNN >= 9.21): `Auto` and the composite run on older
    // stacks (the device check's 9.19), so the native path gets its own
    // trials, ignored (visibly) before 9.21.
    let v = loaded();
    let native_missing = v < (9, 21, 0);
    let native = |name: &str, f: fn(SdpaImpl) -> TestResult| {
        let trial = gpu(name, move || f(SdpaImpl::Native));
        if native_missing {
            eprintln!("skipped: gpu::{name}: needs cuDNN >= 9.21 (loaded {v:?})");
            trial.with_ignored_flag(true)
        } else {
            trial
        }
    };
    t.push(native("sdpa_max_sum_exp_bf16_native", max_sum_exp_case));
    t.push(native("sdpa_split_kv_combine_bf16_native", split_kv_case));
    t.push(native("sdpa_sink_fwd_bwd_bf16_native", sink_case));
    for (suffix, imp) in [("", SdpaImpl::Auto), ("_composite", SdpaImpl::Composite)] {
        t.push(gpu(&format!("sdpa_max_sum_exp_bf16{suffix}"), move || {
            max_sum_exp_case(imp)
        }));
        t.push(gpu(
            &format!("sdpa_split_kv_combine_bf16{suffix}"),
            move || split_kv_case(imp),
        ));
        t.push(gpu(&format!("sdpa_sink_fwd_bwd_bf16{suffix}"), move || {
            sink_case(imp)
        }));
    }
    run(t)
}
