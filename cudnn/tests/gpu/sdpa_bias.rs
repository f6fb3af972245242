//! GPU tier for issue 24's additive bias and ALiBi (skipped visibly
//! without a device; a failure under `CUDNN_RS_REQUIRE_GPU=1`): the
//! forward (training: O and the statistics) through cuDNN's SDPA operation
//! (`Auto`, where the loaded cuDNN has it: 9.21 and newer) and the
//! composite, and the backward (the composite, with dBias) against the f64
//! reference (`reference::attention` with `bias` / `alibi_slopes`, and
//! `dbias`; every broadcast shape of dBias, with padding and GQA, and the
//! native backward with dBias on cuDNN >= 9.28). bf16, packed BHSD; inputs rounded to bf16 before the reference
//! sees them, outputs poisoned with NaN first (NaN never passes), bound 3e-2
//! relative to `max(1, |want|)` (dBias: relative to the largest |dBias|).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// `ensure!(err <= tol)` must fail for NaN: a negated partial comparison on purpose.
#![allow(clippy::neg_cmp_op_on_partial_ord)]
use crate::support;

use crate::support::gpu_sdpa::{bind_backward_inputs, bind_grads};
use crate::support::gpu_sdpa::{
    dims, down_bf16, hashed as value, up_bf16 as up, worst_floor as worst,
};
use cudnn::dnn::Handle;
use cudnn::graph::*;
use cudnn::reference::attention as ra;
use cudnn::runtime::{Device, DeviceBuffer, Stream};
use half::bf16;
use support::*;

type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

struct Inputs {
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
    bias: Vec<f64>,
    slopes: Vec<f64>,
}

/// All of `b`, on the host.
fn down(b: &DeviceBuffer<bf16>) -> R<Vec<f64>> {
    down_bf16(b, b.len())
}

fn inputs(cfg: &SdpaConfig) -> R<Inputs> {
    let n = |s: TensorSpec| s.span_elements();
    Ok(Inputs {
        q: (0..n(cfg.q_spec()?)?).map(|i| value(1, i, 1.0)).collect(),
        k: (0..n(cfg.k_spec()?)?).map(|i| value(2, i, 1.0)).collect(),
        v: (0..n(cfg.v_spec()?)?).map(|i| value(3, i, 1.0)).collect(),
        bias: if cfg.bias.is_some() {
            (0..n(cfg.bias_spec()?)?)
                .map(|i| value(4, i, 2.0))
                .collect()
        } else {
            Vec::new()
        },
        slopes: if cfg.alibi {
            alibi_slopes(cfg.heads as usize)?
                .iter()
                .map(|&s| f64::from(s))
                .collect()
        } else {
            Vec::new()
        },
    })
}

fn ref_cfg<'a>(cfg: &SdpaConfig, a: &'a Inputs) -> R<ra::SdpaConfig<'a>> {
    let mut rc = ra::SdpaConfig::new(cfg.scale_value());
    if cfg.is_causal {
        rc.causal = ra::CausalMask::TopLeft;
    }
    if cfg.bias.is_some() {
        rc.bias = Some(ra::View::bhsd(&a.bias, dims(&cfg.bias_spec()?)));
    }
    if cfg.alibi {
        rc.alibi_slopes = Some(&a.slopes);
    }
    Ok(rc)
}

/// Forward (training) on the device against the reference: O and stats.
fn forward_case(cfg: SdpaConfig) -> TestResult {
    Device::new(0)?;
    let stream = Stream::new()?;
    let mut h = Handle::new(&stream)?;
    let target = Target::device(0)?;
    let cfg = cfg.layout(AttnLayout::Bhsd).training(true);
    let a = inputs(&cfg)?;
    let mut g = Graph::new();
    let qt = g.input("q", cfg.q_spec()?)?;
    let kt = g.input("k", cfg.k_spec()?)?;
    let vt = g.input("v", cfg.v_spec()?)?;
    let f = g.sdpa_forward_training(qt, kt, vt, &cfg)?;
    g.rename(f.o, "o")?;
    let st = f.stats;
    g.rename(st, "stats")?;
    let (plan, r) = Plan::build(&g.build()?, &target, &Policy::default())?;
    eprintln!(
        "  forward {:?}: engine {:?} of {} configs",
        cfg.resolve(false)?,
        r.chosen,
        r.candidates.len()
    );
    let (qb, kb, vb) = (up(&a.q)?, up(&a.k)?, up(&a.v)?);
    let biasb = up(if a.bias.is_empty() { &[0.0] } else { &a.bias })?;
    let slopes32: Vec<f32> = a.slopes.iter().map(|&s| s as f32).collect();
    let slopesb = DeviceBuffer::from_host(if slopes32.is_empty() {
        &[0.0]
    } else {
        &slopes32
    })?;
    let os = cfg.o_spec()?;
    let mut ob = up(&vec![f64::NAN; os.span_elements()?])?;
    let mut sb = DeviceBuffer::from_host(&vec![f32::NAN; cfg.stats_spec()?.span_elements()?])?;
    {
        let mut bi = plan.bindings();
        bi.input("q", qb.as_slice())?
            .input("k", kb.as_slice())?
            .input("v", vb.as_slice())?
            .output("o", ob.as_slice_mut())?
            .output("stats", sb.as_slice_mut())?;
        if let Some(t) = f.bias.bias {
            bi.input(g.name(t)?, biasb.as_slice())?;
        }
        if let Some(t) = f.bias.alibi_slopes {
            bi.input(g.name(t)?, slopesb.as_slice())?;
        }
        plan.execute(&mut h, &mut bi)?;
    }
    h.stream().synchronize()?;
    let rc = ref_cfg(&cfg, &a)?;
    let want = ra::forward(
        &ra::View::bhsd(&a.q, dims(&cfg.q_spec()?)),
        &ra::View::bhsd(&a.k, dims(&cfg.k_spec()?)),
        &ra::View::bhsd(&a.v, dims(&cfg.v_spec()?)),
        &rc,
    )?;
    let o = down(&ob)?;
    let mut stats = vec![0f32; sb.len()];
    sb.copy_to_host(&mut stats)?;
    let stats: Vec<f64> = stats.iter().map(|&x| f64::from(x)).collect();
    let (eo, es) = (worst(&o, &want.o, 1.0), worst(&stats, &want.stats, 1.0));
    eprintln!("  o: max rel error {eo:.2e}, stats {es:.2e} (bound 3e-2)");
    ensure!(eo <= 3e-2, "O differs from the reference: {eo}");
    ensure!(es <= 3e-2, "stats differ from the reference: {es}");
    Ok(())
}

/// The statistics of the crate's forward (training) on the device with
/// padding lengths `lq` / `lkv`, the buffer NaN before the run.
fn device_stats(
    cfg: &SdpaConfig,
    a: &Inputs,
    lq: &[usize],
    lkv: &[usize],
    h: &mut Handle,
    target: &Target,
) -> R<Vec<f32>> {
    let cfg = cfg.clone().training(true);
    let mut g = Graph::new();
    let qt = g.input("q", cfg.q_spec()?)?;
    let kt = g.input("k", cfg.k_spec()?)?;
    let vt = g.input("v", cfg.v_spec()?)?;
    let f = g.sdpa_forward_training(qt, kt, vt, &cfg)?;
    g.rename(f.o, "o")?;
    g.rename(f.stats, "stats")?;
    let (plan, _) = Plan::build(&g.build()?, target, &Policy::default())?;
    let (qb, kb, vb) = (up(&a.q)?, up(&a.k)?, up(&a.v)?);
    let biasb = up(if a.bias.is_empty() { &[0.0] } else { &a.bias })?;
    let slopes32: Vec<f32> = a.slopes.iter().map(|&s| s as f32).collect();
    let slopesb = DeviceBuffer::from_host(if slopes32.is_empty() {
        &[0.0]
    } else {
        &slopes32
    })?;
    let mut ob = up(&vec![f64::NAN; cfg.o_spec()?.span_elements()?])?;
    let mut sb = DeviceBuffer::from_host(&vec![f32::NAN; cfg.stats_spec()?.span_elements()?])?;
    let i32v = |v: &[usize]| v.iter().map(|&x| x as i32).collect::<Vec<_>>();
    let sq = SeqLengths::new(&i32v(lq), lq.len(), cfg.seq_q)?;
    let skv = SeqLengths::new(&i32v(lkv), lkv.len(), cfg.seq_kv)?;
    let name = |t: Option<Tensor>| -> R<String> { Ok(g.name(t.ok_or("an input")?)?.to_string()) };
    {
        let mut bi = plan.bindings();
        bi.input("q", qb.as_slice())?
            .input("k", kb.as_slice())?
            .input("v", vb.as_slice())?
            .output("o", ob.as_slice_mut())?
            .output("stats", sb.as_slice_mut())?
            .seq_lengths(&name(f.seq_len_q)?, &sq)?
            .seq_lengths(&name(f.seq_len_kv)?, &skv)?;
        if let Some(t) = f.bias.bias {
            bi.input(g.name(t)?, biasb.as_slice())?;
        }
        if let Some(t) = f.bias.alibi_slopes {
            bi.input(g.name(t)?, slopesb.as_slice())?;
        }
        plan.execute(h, &mut bi)?;
    }
    h.stream().synchronize()?;
    let mut stats = vec![0f32; sb.len()];
    sb.copy_to_host(&mut stats)?;
    Ok(stats)
}

/// Backward (the config's construction, with dBias when it asks) on the
/// device against the reference's dQ, dK, dV and dBias. With `lens`
/// (per-batch query and key lengths: a padding mask), dQ / dK / dV are
/// compared on the valid rows (cuDNN leaves the padded ones as they
/// were) and dBias everywhere: a padded row or column must add nothing to
/// a broadcast dBias; the statistics then come from the crate's forward on
/// the device (padded rows as it leaves them).
fn backward_case(cfg: SdpaConfig, lens: Option<(Vec<usize>, Vec<usize>)>) -> TestResult {
    Device::new(0)?;
    let stream = Stream::new()?;
    let mut h = Handle::new(&stream)?;
    let target = Target::device(0)?;
    let cfg = cfg.layout(AttnLayout::Bhsd).padding(lens.is_some());
    let a = inputs(&cfg)?;
    let mut rc = ref_cfg(&cfg, &a)?;
    if let Some((lq, lkv)) = &lens {
        rc.seq_len_q = Some(lq);
        rc.seq_len_kv = Some(lkv);
    }
    let (qs, ks, vs, os) = (cfg.q_spec()?, cfg.k_spec()?, cfg.v_spec()?, cfg.o_spec()?);
    let (qv, kv, vv) = (
        ra::View::bhsd(&a.q, dims(&qs)),
        ra::View::bhsd(&a.k, dims(&ks)),
        ra::View::bhsd(&a.v, dims(&vs)),
    );
    let f = ra::forward(&qv, &kv, &vv, &rc)?;
    let o: Vec<f64> = f.o.iter().map(|&x| f64::from(bf16::from_f64(x))).collect();
    let d_o: Vec<f64> = (0..os.span_elements()?).map(|i| value(5, i, 1.0)).collect();
    let mut stats32: Vec<f32> = f.stats.iter().map(|&s| s as f32).collect();
    if let Some((lq, lkv)) = &lens {
        // As in training: the statistics the crate's own forward wrote
        // (padded rows as it leaves them, the buffer NaN before), so a
        // padded row's stats cannot leak into dBias unseen.
        let dev = device_stats(&cfg, &a, lq, lkv, &mut h, &target)?;
        let [_, hh, ss, _] = dims(&qs);
        let mut worst_lse = 0f64;
        for (r, (&d, &w)) in dev.iter().zip(&stats32).enumerate() {
            if r % ss < lq.get(r / (hh * ss)).copied().unwrap_or(0) {
                let e = (f64::from(d) - f64::from(w)).abs();
                worst_lse = if e.is_nan() {
                    f64::INFINITY
                } else {
                    worst_lse.max(e)
                };
            }
        }
        eprintln!("  device stats (valid rows): max error {worst_lse:.2e} (bound 1e-2)");
        ensure!(worst_lse <= 1e-2, "device stats differ: {worst_lse}");
        stats32 = dev;
    }
    let stats: Vec<f64> = stats32.iter().map(|&s| f64::from(s)).collect();

    let (g, b) = support::norm_attention_graphs::sdpa_bwd(&cfg)?;
    let (plan, r) = Plan::build(&g.build()?, &target, &Policy::default())?;
    eprintln!(
        "  backward {:?}: engine {:?} of {} configs",
        cfg.resolve(true)?,
        r.chosen,
        r.candidates.len()
    );
    let (qb, kb, vb, ob, dob) = (up(&a.q)?, up(&a.k)?, up(&a.v)?, up(&o)?, up(&d_o)?);
    let sb = DeviceBuffer::from_host(&stats32)?;
    let biasb = up(if a.bias.is_empty() { &[0.0] } else { &a.bias })?;
    let slopes32: Vec<f32> = a.slopes.iter().map(|&s| s as f32).collect();
    let slopesb = DeviceBuffer::from_host(if slopes32.is_empty() {
        &[0.0]
    } else {
        &slopes32
    })?;
    let nan = |n: usize| up(&vec![f64::NAN; n]);
    let (mut dq, mut dk, mut dv) = (nan(a.q.len())?, nan(a.k.len())?, nan(a.v.len())?);
    let mut db = nan(a.bias.len().max(1))?;
    let i32v = |v: &[usize]| v.iter().map(|&x| x as i32).collect::<Vec<_>>();
    let seq = match &lens {
        Some((lq, lkv)) => Some((
            SeqLengths::new(&i32v(lq), lq.len(), cfg.seq_q)?,
            SeqLengths::new(&i32v(lkv), lkv.len(), cfg.seq_kv)?,
        )),
        None => None,
    };
    {
        let mut bi = plan.bindings();
        if let Some((lq, lkv)) = &seq {
            let name = |t: Option<Tensor>| -> R<String> {
                Ok(g.name(t.ok_or("a length input")?)?.to_string())
            };
            bi.seq_lengths(&name(b.seq_len_q)?, lq)?
                .seq_lengths(&name(b.seq_len_kv)?, lkv)?;
        }
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
        plan.execute(&mut h, &mut bi)?;
    }
    h.stream().synchronize()?;
    let ov = ra::View::bhsd(&o, dims(&os));
    let dov = ra::View::bhsd(&d_o, dims(&os));
    let want = ra::backward(&qv, &kv, &vv, &ov, &dov, &stats, &rc)?;
    // The valid rows of a [B, H, S, D] gradient (all without padding).
    let valid = |x: Vec<f64>, spec: &TensorSpec, lens: Option<&Vec<usize>>| -> Vec<f64> {
        let [_, hh, ss, dd] = dims(spec);
        x.into_iter()
            .enumerate()
            .filter(|(i, _)| {
                let (n, row) = (i / (hh * ss * dd), i / dd % ss);
                lens.is_none_or(|l| l.get(n).is_some_and(|&len| row < len))
            })
            .map(|(_, v)| v)
            .collect()
    };
    let (lq, lkv) = (lens.as_ref().map(|l| &l.0), lens.as_ref().map(|l| &l.1));
    for (name, got, w) in [
        (
            "dq",
            valid(down(&dq)?, &qs, lq),
            valid(want.dq.clone(), &qs, lq),
        ),
        (
            "dk",
            valid(down(&dk)?, &ks, lkv),
            valid(want.dk.clone(), &ks, lkv),
        ),
        (
            "dv",
            valid(down(&dv)?, &vs, lkv),
            valid(want.dv.clone(), &vs, lkv),
        ),
    ] {
        ensure!(!got.is_empty(), "{name}: no valid rows compared");
        let e = worst(&got, &w, 1.0);
        eprintln!("  {name}: max rel error {e:.2e} (bound 3e-2)");
        ensure!(e <= 3e-2, "{name} differs from the reference: {e}");
    }
    ensure!(
        b.bias.dbias.is_some() == cfg.bias.is_some_and(|x| x.dbias),
        "dBias output {:?} not as the config asks",
        b.bias.dbias
    );
    if b.bias.dbias.is_some() {
        let wdb = ra::dbias(&qv, &kv, &vv, &ov, &dov, &stats, &rc)?;
        let scale = wdb.iter().fold(0f64, |m, x| m.max(x.abs()));
        ensure!(scale > 0.0, "the reference dBias is all zero");
        let e = worst(&down(&db)?, &wdb, scale);
        eprintln!("  dbias: max error {e:.2e} of the largest |dBias| {scale:.2e} (bound 3e-2)");
        ensure!(e <= 3e-2, "dBias differs from the reference: {e}");
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
            &format!("sdpa_bias_full_fwd_bf16{suffix}"),
            move || forward_case(base().bias(AttnBias::full()).implementation(imp)),
        ));
        t.push(gpu(
            &format!("sdpa_bias_batch_broadcast_causal_fwd_bf16{suffix}"),
            move || {
                forward_case(
                    base()
                        .bias(AttnBias::new(false, true))
                        .causal(true)
                        .implementation(imp),
                )
            },
        ));
        t.push(gpu(
            &format!("sdpa_alibi_causal_fwd_bf16{suffix}"),
            move || forward_case(base().causal(true).alibi(true).implementation(imp)),
        ));
    }
    t.push(gpu("sdpa_bias_full_dbias_bwd_bf16", || {
        backward_case(base().bias(AttnBias::full().with_dbias(true)), None)
    }));
    t.push(gpu("sdpa_bias_head_broadcast_dbias_bwd_bf16", || {
        backward_case(
            base()
                .bias(AttnBias::new(false, true).with_dbias(true))
                .causal(true),
            None,
        )
    }));
    // Every broadcast shape of dBias: [1, 1] and [B, 1] too.
    t.push(gpu("sdpa_bias_shared_dbias_bwd_bf16", || {
        backward_case(
            base().bias(AttnBias::new(false, false).with_dbias(true)),
            None,
        )
    }));
    t.push(gpu("sdpa_bias_batch_dbias_bwd_bf16", || {
        backward_case(
            base().bias(AttnBias::new(true, false).with_dbias(true)),
            None,
        )
    }));
    // Padding: batch 1's padded rows / columns must add nothing to the
    // head-broadcast dBias (batch 0 full, so every entry is compared).
    t.push(gpu(
        "sdpa_bias_head_broadcast_dbias_padding_bwd_bf16",
        || {
            backward_case(
                base().bias(AttnBias::new(false, true).with_dbias(true)),
                Some((vec![128, 77], vec![128, 93])),
            )
        },
    ));
    // GQA: the bias per query head.
    t.push(gpu("sdpa_bias_full_dbias_gqa_bwd_bf16", || {
        backward_case(base().gqa(2).bias(AttnBias::full().with_dbias(true)), None)
    }));
    t.push(gpu("sdpa_alibi_causal_bwd_bf16", || {
        backward_case(base().causal(true).alibi(true), None)
    }));
    // cuDNN's SDPA backward operation with dBias (cuDNN >= 9.28).
    let native = base()
        .bias(AttnBias::full().with_dbias(true))
        .implementation(SdpaImpl::Native);
    let trial = gpu("sdpa_bias_full_dbias_native_bwd_bf16", {
        let native = native.clone();
        move || backward_case(native, None)
    });
    t.push(match native.resolve(true) {
        Err(e @ cudnn::Error::Unsupported { .. }) => {
            eprintln!("skipped: gpu::sdpa_bias_full_dbias_native_bwd_bf16: {e}");
            trial.with_ignored_flag(true)
        }
        _ => trial,
    });
    run(t)
}
