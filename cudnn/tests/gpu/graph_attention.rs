//! GPU tier for the graph API's attention (skipped visibly without a
//! device; a failure under `CUDNN_RS_REQUIRE_GPU=1`): SDPA forward and
//! backward configurations (masks, padding, GQA, layouts, cross attention,
//! dropout), each through cuDNN's SDPA operation and the composite, planned
//! for the device, executed, and compared with the f64 reference of
//! `cudnn::reference::attention`.
//!
//! - inputs are random and rounded to the element type before the reference
//!   sees them; outputs are poisoned with NaN first (NaN never passes);
//! - bounds relative to `max(1, |want|)`: f16 2e-2, bf16 3e-2 (outputs and
//!   gradients sum over the sequence);
//! - the backward is also checked against central finite differences of the
//!   reference forward (loss `sum(O * dO)`) on a small GQA case;
//! - dropout (whose Philox mask the host cannot reproduce) is checked for
//!   being reproducible with one seed and different with another.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// `ensure!(err <= tol)` must fail for NaN: a negated partial comparison on purpose.
#![allow(clippy::neg_cmp_op_on_partial_ord)]
use crate::support;
use crate::support::gpu_data;

use crate::support::gpu_sdpa::{bind_backward_inputs, bind_grads};
use crate::support::norm_attention_graphs::{sdpa_bwd, sdpa_fwd};
use cudnn::graph::*;
use cudnn::reference::attention as ra;
use cudnn::runtime::DeviceBuffer;
use gpu_data::*;
use half::{bf16, f16};
use support::*;

struct Attn {
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
    lens_q: Vec<usize>,
    lens_kv: Vec<usize>,
}

fn attn_inputs<T: El>(rng: &mut Rng, cfg: &SdpaConfig) -> R<Attn> {
    let n = |s: TensorSpec| s.span_elements();
    Ok(Attn {
        q: round::<T>(&rng.vec(n(cfg.q_spec()?)?, -1.0, 1.0)),
        k: round::<T>(&rng.vec(n(cfg.k_spec()?)?, -1.0, 1.0)),
        v: round::<T>(&rng.vec(n(cfg.v_spec()?)?, -1.0, 1.0)),
        lens_q: (0..cfg.batch as usize)
            .map(|i| (cfg.seq_q as usize).saturating_sub(i * 7).max(1))
            .collect(),
        lens_kv: (0..cfg.batch as usize)
            .map(|i| (cfg.seq_kv as usize).saturating_sub(i * 13).max(1))
            .collect(),
    })
}

fn ref_cfg<'a>(cfg: &SdpaConfig, a: &'a Attn) -> ra::SdpaConfig<'a> {
    let mut r = ra::SdpaConfig::new(cfg.scale_value());
    let bottom_right = cfg.diagonal == DiagonalAlignment::BottomRight;
    if cfg.is_causal {
        r.causal = if bottom_right {
            ra::CausalMask::BottomRight
        } else {
            ra::CausalMask::TopLeft
        };
    }
    // Issue 24: the sliding window.
    r.window = cfg.window.map(|w| ra::Window {
        size: usize::try_from(w).unwrap_or(usize::MAX),
        bottom_right,
    });
    if cfg.padding {
        r.seq_len_q = Some(&a.lens_q);
        r.seq_len_kv = Some(&a.lens_kv);
    }
    r
}

/// Zero the rows a padding mask leaves undefined (queries past their length).
fn mask_rows(v: &mut [f64], cfg: &SdpaConfig, lens: &[usize], width: usize) {
    if !cfg.padding {
        return;
    }
    let (h, s) = (cfg.heads as usize, cfg.seq_q as usize);
    for (n, &len) in lens.iter().enumerate() {
        for hh in 0..h {
            for i in len..s {
                let r = (n * h + hh) * s + i;
                v[r * width..(r + 1) * width].fill(0.0);
            }
        }
    }
}

/// The padding lengths, checked against the sequence extents (a length
/// tensor binds only as `SeqLengths`).
fn seq_lengths(cfg: &SdpaConfig, a: &Attn) -> R<[SeqLengths; 2]> {
    let make = |v: &[usize], extent: i64| -> R<SeqLengths> {
        let v: Vec<i32> = v.iter().map(|&x| x as i32).collect();
        Ok(SeqLengths::new(&v, v.len(), extent)?)
    };
    Ok([make(&a.lens_q, cfg.seq_q)?, make(&a.lens_kv, cfg.seq_kv)?])
}

fn bind_extras<'b>(
    bi: &mut Bindings<'b>,
    g: &Graph,
    extras: [Option<Tensor>; 4],
    lens: &'b [SeqLengths; 2],
    drops: &'b [DeviceBuffer<i64>; 2],
) -> R {
    if let (Some(a), Some(b)) = (extras[0], extras[1]) {
        bi.seq_lengths(g.name(a)?, &lens[0])?
            .seq_lengths(g.name(b)?, &lens[1])?;
    }
    if let (Some(a), Some(b)) = (extras[2], extras[3]) {
        bi.input(g.name(a)?, drops[0].as_slice())?
            .input(g.name(b)?, drops[1].as_slice())?;
    }
    Ok(())
}

/// Run the forward on the device: (o packed BHSD, stats).
fn run_fwd<T: El>(cx: &mut Cx, cfg: &SdpaConfig, a: &Attn, seed: i64) -> R<(Vec<f64>, Vec<f64>)> {
    let (g, f) = sdpa_fwd(cfg)?;
    let p = plan(cx, &g, "")?;
    let (qb, kb, vb) = (up::<T>(&a.q)?, up::<T>(&a.k)?, up::<T>(&a.v)?);
    let os = cfg.o_spec()?;
    let mut ob = poisoned::<T>(os.span_elements()?)?;
    let mut sb = poisoned::<f32>(cfg.stats_spec()?.span_elements()?)?;
    let lens = seq_lengths(cfg, a)?;
    let drops = [
        DeviceBuffer::from_host(&[seed])?,
        DeviceBuffer::from_host(&[7i64])?,
    ];
    {
        let mut bi = p.bindings();
        bi.input("q", qb.as_slice())?
            .input("k", kb.as_slice())?
            .input("v", vb.as_slice())?
            .output("o", ob.as_slice_mut())?;
        if f.stats.is_some() {
            bi.output("stats", sb.as_slice_mut())?;
        }
        bind_extras(
            &mut bi,
            &g,
            [f.seq_len_q, f.seq_len_kv, f.dropout_seed, f.dropout_offset],
            &lens,
            &drops,
        )?;
        p.execute(&mut cx.h, &mut bi)?;
    }
    cx.h.stream().synchronize()?;
    let o = to_bhsd(&down(&ob)?, cfg.layout, dims4(&os));
    Ok((
        o,
        if f.stats.is_some() {
            down(&sb)?
        } else {
            vec![]
        },
    ))
}

fn attention_forward<T: El>(cfg: SdpaConfig) -> TestResult {
    let mut cx = cx(21)?;
    let a = attn_inputs::<T>(&mut cx.rng, &cfg)?;
    let (mut o, mut stats) = run_fwd::<T>(&mut cx, &cfg, &a, 1)?;
    let want = ra::forward(
        &view(&a.q, &cfg.q_spec()?),
        &view(&a.k, &cfg.k_spec()?),
        &view(&a.v, &cfg.v_spec()?),
        &ref_cfg(&cfg, &a),
    )?;
    let mut wo = want.o.clone();
    let dv = cfg.head_dim_v as usize;
    mask_rows(&mut o, &cfg, &a.lens_q, dv);
    mask_rows(&mut wo, &cfg, &a.lens_q, dv);
    let tol = if T::DT == DType::BF16 { 3e-2 } else { 2e-2 };
    close("o", &o, &wo, tol)?;
    if cfg.is_training {
        let mut ws = want.stats.clone();
        mask_rows(&mut stats, &cfg, &a.lens_q, 1);
        mask_rows(&mut ws, &cfg, &a.lens_q, 1);
        close("stats", &stats, &ws, 1e-2)?;
    }
    Ok(())
}

fn attention_dropout<T: El>(imp: SdpaImpl) -> TestResult {
    let cfg = SdpaConfig::new(1, 4, 128, 64, T::DT)
        .training(true)
        .dropout(0.2)
        .implementation(imp);
    let mut cx = cx(22)?;
    let a = attn_inputs::<T>(&mut cx.rng, &cfg)?;
    let (o1, _) = run_fwd::<T>(&mut cx, &cfg, &a, 1234)?;
    let (o2, _) = run_fwd::<T>(&mut cx, &cfg, &a, 1234)?;
    let (o3, _) = run_fwd::<T>(&mut cx, &cfg, &a, 999)?;
    ensure!(o1.iter().all(|v| v.is_finite()), "finite output");
    ensure!(o1 == o2, "same seed and offset: same output");
    ensure!(o1 != o3, "another seed: another mask");
    let plain = ra::forward(
        &view(&a.q, &cfg.q_spec()?),
        &view(&a.k, &cfg.k_spec()?),
        &view(&a.v, &cfg.v_spec()?),
        &ra::SdpaConfig::new(cfg.scale_value()),
    )?;
    ensure!(
        close("o (no dropout)", &o1, &plain.o, 3e-2).is_err(),
        "dropout 0.2 must change the output"
    );
    Ok(())
}

/// Backward on the device: (dq, dk, dv) packed BHSD.
/// `reload`: run the plan reloaded from its cuDNN JSON (trusted: the
/// runtime-compiled code this process made), not the built one.
#[allow(clippy::too_many_arguments)]
fn run_bwd<T: El>(
    cx: &mut Cx,
    cfg: &SdpaConfig,
    a: &Attn,
    o: &[f64],
    d_o: &[f64],
    stats: &[f64],
    reload: bool,
) -> R<[Vec<f64>; 3]> {
    let (g, b) = sdpa_bwd(cfg)?;
    let mut p = plan(cx, &g, "")?;
    if reload {
        let io = std::sync::Arc::new(p.io().clone());
        // SAFETY: cuDNN's JSON (plan file) of the plan built here for this tensor list, unchanged.
        let back = unsafe { Plan::from_cudnn_json_unverified(&p.cudnn_json()?, &cx.target, io) }?;
        ensure!(
            back.workspace_size() == p.workspace_size(),
            "reloaded workspace {} vs built {}",
            back.workspace_size(),
            p.workspace_size()
        );
        eprintln!("  running the plan reloaded from its JSON, on a workspace of 0xFF bytes");
        p = back;
    }
    // The reloaded plan runs on a caller workspace filled with 0xFF (f32
    // NaN): accumulators it did not clear itself would poison dQ / dK / dV.
    let mut ws = DeviceBuffer::<u8>::from_host(&vec![0xFF; p.workspace_size().max(1)])?;
    let (qb, kb, vb) = (up::<T>(&a.q)?, up::<T>(&a.k)?, up::<T>(&a.v)?);
    let (ob, dob, sb) = (up::<T>(o)?, up::<T>(d_o)?, up::<f32>(stats)?);
    let mut dq = poisoned::<T>(a.q.len())?;
    let mut dk = poisoned::<T>(a.k.len())?;
    let mut dv = poisoned::<T>(a.v.len())?;
    let lens = seq_lengths(cfg, a)?;
    let drops = [
        DeviceBuffer::from_host(&[1i64])?,
        DeviceBuffer::from_host(&[7i64])?,
    ];
    {
        let mut bi = p.bindings();
        bind_backward_inputs(&mut bi, [&qb, &kb, &vb, &ob, &dob], &sb)?;
        bind_grads(&mut bi, [&mut dq, &mut dk, &mut dv])?;
        if reload {
            bi.workspace(ws.as_slice_mut())?;
        }
        bind_extras(
            &mut bi,
            &g,
            [b.seq_len_q, b.seq_len_kv, b.dropout_seed, b.dropout_offset],
            &lens,
            &drops,
        )?;
        p.execute(&mut cx.h, &mut bi)?;
    }
    cx.h.stream().synchronize()?;
    Ok([
        to_bhsd(&down(&dq)?, cfg.layout, dims4(&cfg.q_spec()?)),
        to_bhsd(&down(&dk)?, cfg.layout, dims4(&cfg.k_spec()?)),
        to_bhsd(&down(&dv)?, cfg.layout, dims4(&cfg.v_spec()?)),
    ])
}

fn attention_backward<T: El>(cfg: SdpaConfig) -> TestResult {
    attention_backward_from::<T>(cfg, false)
}

/// As [`attention_backward`]; `reload`: through the plan reloaded from JSON.
fn attention_backward_from<T: El>(cfg: SdpaConfig, reload: bool) -> TestResult {
    let mut cx = cx(23)?;
    let a = attn_inputs::<T>(&mut cx.rng, &cfg)?;
    let rc = ref_cfg(&cfg, &a);
    let (qv, kv, vv) = (
        view(&a.q, &cfg.q_spec()?),
        view(&a.k, &cfg.k_spec()?),
        view(&a.v, &cfg.v_spec()?),
    );
    let f = ra::forward(&qv, &kv, &vv, &rc)?;
    // O in the config's layout, rounded as the device holds it.
    let os = cfg.o_spec()?;
    let o_store = round::<T>(&store(&f.o, cfg.layout, dims4(&os)));
    let d_o = round::<T>(&cx.rng.vec(os.span_elements()?, -1.0, 1.0));
    let stats: Vec<f64> = f
        .stats
        .iter()
        .map(|&s| if s.is_finite() { s } else { 0.0 })
        .collect();
    let got = run_bwd::<T>(
        &mut cx,
        &cfg,
        &a,
        &o_store,
        &d_o,
        &round::<f32>(&stats),
        reload,
    )?;
    let want = ra::backward(
        &qv,
        &kv,
        &vv,
        &view(&o_store, &os),
        &view(&d_o, &os),
        &f.stats,
        &rc,
    )?;
    let tol = if T::DT == DType::BF16 { 3e-2 } else { 2e-2 };
    let [mut dq, mut dk, mut dv] = got;
    let (mut wdq, mut wdk, mut wdv) = (want.dq, want.dk, want.dv);
    // Padding: rows past a batch's length are not defined on the device.
    let (d, dvw) = (cfg.head_dim as usize, cfg.head_dim_v as usize);
    mask_rows(&mut dq, &cfg, &a.lens_q, d);
    mask_rows(&mut wdq, &cfg, &a.lens_q, d);
    let mut kv = cfg.clone();
    (kv.heads, kv.seq_q) = (cfg.kv_heads, cfg.seq_kv);
    mask_rows(&mut dk, &kv, &a.lens_kv, d);
    mask_rows(&mut wdk, &kv, &a.lens_kv, d);
    mask_rows(&mut dv, &kv, &a.lens_kv, dvw);
    mask_rows(&mut wdv, &kv, &a.lens_kv, dvw);
    close("dq", &dq, &wdq, tol)?;
    close("dk", &dk, &wdk, tol)?;
    close("dv", &dv, &wdv, tol)?;
    Ok(())
}

fn attention_backward_finite_differences(imp: SdpaImpl) -> TestResult {
    type T = bf16;
    let cfg = SdpaConfig::new(1, 4, 32, 32, DType::BF16)
        .gqa(2)
        .causal(true)
        .training(true)
        .implementation(imp);
    let mut cx = cx(24)?;
    let a = attn_inputs::<T>(&mut cx.rng, &cfg)?;
    let rc = ref_cfg(&cfg, &a);
    let (qs, ks, vs, os) = (cfg.q_spec()?, cfg.k_spec()?, cfg.v_spec()?, cfg.o_spec()?);
    let d_o = round::<T>(&cx.rng.vec(os.span_elements()?, -1.0, 1.0));
    let f = ra::forward(&view(&a.q, &qs), &view(&a.k, &ks), &view(&a.v, &vs), &rc)?;
    let o_store = round::<T>(&store(&f.o, cfg.layout, dims4(&os)));
    let got = run_bwd::<T>(
        &mut cx,
        &cfg,
        &a,
        &o_store,
        &d_o,
        &round::<f32>(&f.stats),
        false,
    )?;
    let d_o_bhsd = to_bhsd(&d_o, cfg.layout, dims4(&os));
    let loss = |q: &[f64], k: &[f64], v: &[f64]| -> R<f64> {
        let f = ra::forward(&view(q, &qs), &view(k, &ks), &view(v, &vs), &rc)?;
        Ok(f.o.iter().zip(&d_o_bhsd).map(|(a, b)| a * b).sum())
    };
    let h = 1e-4;
    let mut checked = 0;
    for (which, spec) in [(0usize, &qs), (1, &ks), (2, &vs)] {
        let dims = dims4(spec);
        let n = dims.iter().product::<usize>();
        for sample in 0..12 {
            let logical = (sample * 7919 + 13 * which) % n;
            // logical BHSD index -> storage index
            let (t, r) = (logical % dims[3], logical / dims[3]);
            let (i, r) = (r % dims[2], r / dims[2]);
            let (hh, b) = (r % dims[1], r / dims[1]);
            let st = spec.strides();
            let at =
                b * st[0] as usize + hh * st[1] as usize + i * st[2] as usize + t * st[3] as usize;
            let mut plus = [a.q.clone(), a.k.clone(), a.v.clone()];
            let mut minus = plus.clone();
            plus[which][at] += h;
            minus[which][at] -= h;
            let fd = (loss(&plus[0], &plus[1], &plus[2])? - loss(&minus[0], &minus[1], &minus[2])?)
                / (2.0 * h);
            let g = got[which][logical];
            let e = (g - fd).abs() / fd.abs().max(1.0);
            ensure!(
                e <= 3e-2,
                "{} at {logical}: device {g}, finite difference {fd} (rel {e:.3e})",
                ["dq", "dk", "dv"][which]
            );
            checked += 1;
        }
    }
    eprintln!("  {checked} gradient entries agree with finite differences");
    Ok(())
}

/// Dropout with the mask fixed: one training step (forward and backward
/// with the same seed and offset) against the reference with the device's
/// own mask. The mask is read from the device first: with Q = 0 every
/// probability is `1 / s_kv`, and with V the identity per head (`d_v =
/// s_kv`) the output is the dropout multiplier itself (`O[i, j] = D[i, j] /
/// s_kv`); the Philox stream depends on the seed, offset and position only.
/// Then O, the statistics, dQ, dK and dV are checked against the reference
/// with that mask, and the gradients against central finite differences of
/// the reference forward's loss `sum(O * dO)` with the mask held fixed.
fn attention_dropout_step(imp: SdpaImpl) -> TestResult {
    type T = bf16;
    let p = 0.2;
    let (s, d) = (64usize, 64usize);
    let cfg = SdpaConfig::new(1, 2, s as i64, d as i64, DType::BF16)
        .layout(AttnLayout::Bhsd)
        .training(true)
        .dropout(p)
        .implementation(imp);
    // A training step with dropout is the composite both ways (one mask).
    ensure!(
        cfg.resolve(false)? == SdpaImpl::Composite && cfg.resolve(true)? == SdpaImpl::Composite,
        "forward and backward must share the construction"
    );
    let mut cx = cx(25)?;
    let a = attn_inputs::<T>(&mut cx.rng, &cfg)?;
    let (qs, ks, vs, os) = (cfg.q_spec()?, cfg.k_spec()?, cfg.v_spec()?, cfg.o_spec()?);
    // 1. The mask, as the device draws it for seed 1, offset 7 (run_bwd's).
    let heads = 2;
    let mut ident = vec![0.0; vs.span_elements()?];
    for hh in 0..heads {
        for j in 0..s {
            ident[(hh * s + j) * d + j] = 1.0;
        }
    }
    let probe = Attn {
        q: vec![0.0; a.q.len()],
        k: a.k.clone(),
        v: ident,
        lens_q: a.lens_q.clone(),
        lens_kv: a.lens_kv.clone(),
    };
    let (po, _) = run_fwd::<T>(&mut cx, &cfg, &probe, 1)?;
    let keep = 1.0 / (1.0 - p);
    let mut mask = Vec::with_capacity(po.len());
    for (i, &x) in po.iter().enumerate() {
        let m = x * s as f64;
        let dm = if m > 0.5 * keep { keep } else { 0.0 };
        ensure!(
            (m - dm).abs() < 0.05,
            "probe output {i}: {m} is neither 0 nor {keep}"
        );
        mask.push(dm);
    }
    let kept = mask.iter().filter(|&&m| m > 0.0).count() as f64 / mask.len() as f64;
    eprintln!("  mask: {:.3} kept (want about {:.2})", kept, 1.0 - p);
    ensure!((kept - (1.0 - p)).abs() < 0.05, "kept fraction {kept}");
    // 2. The forward against the reference with that mask.
    let mut rc = ref_cfg(&cfg, &a);
    rc.dropout = Some(&mask);
    let (o, stats) = run_fwd::<T>(&mut cx, &cfg, &a, 1)?;
    let f = ra::forward(&view(&a.q, &qs), &view(&a.k, &ks), &view(&a.v, &vs), &rc)?;
    close("o (dropout, mask fixed)", &o, &f.o, 3e-2)?;
    close("stats (dropout)", &stats, &f.stats, 1e-2)?;
    // 3. The backward of the same step against the reference.
    let o_store = round::<T>(&store(&f.o, cfg.layout, dims4(&os)));
    let d_o = round::<T>(&cx.rng.vec(os.span_elements()?, -1.0, 1.0));
    let got = run_bwd::<T>(
        &mut cx,
        &cfg,
        &a,
        &o_store,
        &d_o,
        &round::<f32>(&f.stats),
        false,
    )?;
    let want = ra::backward(
        &view(&a.q, &qs),
        &view(&a.k, &ks),
        &view(&a.v, &vs),
        &view(&o_store, &os),
        &view(&d_o, &os),
        &f.stats,
        &rc,
    )?;
    close("dq (dropout)", &got[0], &want.dq, 3e-2)?;
    close("dk (dropout)", &got[1], &want.dk, 3e-2)?;
    close("dv (dropout)", &got[2], &want.dv, 3e-2)?;
    // 4. Finite differences with the mask held fixed.
    let d_o_bhsd = to_bhsd(&d_o, cfg.layout, dims4(&os));
    let loss = |q: &[f64], k: &[f64], v: &[f64]| -> R<f64> {
        let f = ra::forward(&view(q, &qs), &view(k, &ks), &view(v, &vs), &rc)?;
        Ok(f.o.iter().zip(&d_o_bhsd).map(|(a, b)| a * b).sum())
    };
    let h = 1e-4;
    let mut checked = 0;
    for (which, spec) in [(0usize, &qs), (1, &ks), (2, &vs)] {
        let n = dims4(spec).iter().product::<usize>();
        for sample in 0..10 {
            // BHSD layout: the logical index is the storage index.
            let at = (sample * 7919 + 31 * which) % n;
            let mut plus = [a.q.clone(), a.k.clone(), a.v.clone()];
            let mut minus = plus.clone();
            plus[which][at] += h;
            minus[which][at] -= h;
            let fd = (loss(&plus[0], &plus[1], &plus[2])? - loss(&minus[0], &minus[1], &minus[2])?)
                / (2.0 * h);
            let g = got[which][at];
            let e = (g - fd).abs() / fd.abs().max(1.0);
            ensure!(
                e <= 3e-2,
                "{} at {at}: device {g}, finite difference {fd} (rel {e:.3e})",
                ["dq", "dk", "dv"][which]
            );
            checked += 1;
        }
    }
    eprintln!("  {checked} gradient entries agree with finite differences (mask fixed)");
    Ok(())
}
pub fn main() {
    let mut t = vec![];
    let base = |dt| SdpaConfig::new(2, 8, 128, 64, dt);
    let cross = |dt| SdpaConfig::new(2, 4, 96, 64, dt).kv_len(256);
    let fwd: Vec<(&str, SdpaConfig)> = vec![
        ("sdpa_fwd_infer_f16", base(DType::F16)),
        ("sdpa_fwd_infer_bf16", base(DType::BF16)),
        ("sdpa_fwd_train_bf16", base(DType::BF16).training(true)),
        (
            "sdpa_fwd_train_causal_bf16",
            base(DType::BF16).training(true).causal(true),
        ),
        ("sdpa_fwd_scale_f16", base(DType::F16).scale(0.3)),
        (
            "sdpa_fwd_padding_bf16",
            base(DType::BF16).training(true).padding(true),
        ),
        ("sdpa_fwd_gqa_bf16", base(DType::BF16).training(true).gqa(2)),
        (
            "sdpa_fwd_bhsd_f16",
            base(DType::F16).training(true).layout(AttnLayout::Bhsd),
        ),
        (
            "sdpa_fwd_cross_d128_bf16",
            SdpaConfig::new(2, 4, 64, 128, DType::BF16)
                .kv_len(192)
                .training(true),
        ),
        // Issue 24: the bottom-right causal mask and the sliding window,
        // alone and with padding (queries fewer than keys: a chunked
        // prefill against a cache), and a decode step.
        (
            "sdpa_fwd_br_causal_cross_bf16",
            cross(DType::BF16).causal_bottom_right().training(true),
        ),
        (
            "sdpa_fwd_br_causal_padding_bf16",
            cross(DType::BF16)
                .causal_bottom_right()
                .padding(true)
                .training(true),
        ),
        (
            "sdpa_fwd_decode_br_causal_f16",
            SdpaConfig::new(4, 8, 1, 128, DType::F16)
                .kv_len(320)
                .causal_bottom_right(),
        ),
        (
            "sdpa_fwd_window_causal_bf16",
            base(DType::BF16)
                .causal(true)
                .sliding_window(48)
                .training(true),
        ),
        ("sdpa_fwd_window_f16", base(DType::F16).sliding_window(40)),
        (
            "sdpa_fwd_window_br_causal_padding_bf16",
            cross(DType::BF16)
                .causal_bottom_right()
                .sliding_window(64)
                .padding(true)
                .training(true),
        ),
    ];
    // Each configuration through cuDNN's SDPA operation (Auto resolves to it
    // on a cuDNN that has it) and through the composite pattern.
    let imps = [("", SdpaImpl::Auto), ("_composite", SdpaImpl::Composite)];
    for (name, cfg) in fwd {
        for (suffix, imp) in imps {
            let name = format!("{name}{suffix}");
            let cfg = cfg.clone().implementation(imp);
            if cfg.dtype == DType::F16 {
                t.push(gpu(&name, move || attention_forward::<f16>(cfg)));
            } else {
                t.push(gpu(&name, move || attention_forward::<bf16>(cfg)));
            }
        }
    }
    t.push(gpu("sdpa_fwd_dropout_bf16", || {
        attention_dropout::<bf16>(SdpaImpl::Auto)
    }));
    t.push(gpu("sdpa_dropout_step_mask_fixed_bf16", || {
        attention_dropout_step(SdpaImpl::Auto)
    }));
    t.push(gpu("sdpa_dropout_step_mask_fixed_bf16_composite", || {
        attention_dropout_step(SdpaImpl::Composite)
    }));
    t.push(gpu("sdpa_fwd_dropout_bf16_composite", || {
        attention_dropout::<bf16>(SdpaImpl::Composite)
    }));
    let bwd: Vec<(&str, SdpaConfig)> = vec![
        ("sdpa_bwd_f16", base(DType::F16)),
        ("sdpa_bwd_bf16", base(DType::BF16)),
        ("sdpa_bwd_causal_bf16", base(DType::BF16).causal(true)),
        ("sdpa_bwd_padding_bf16", base(DType::BF16).padding(true)),
        ("sdpa_bwd_gqa_bf16", base(DType::BF16).gqa(4)),
        (
            "sdpa_bwd_bhsd_bf16",
            base(DType::BF16).layout(AttnLayout::Bhsd),
        ),
        // Issue 24.
        (
            "sdpa_bwd_br_causal_cross_bf16",
            cross(DType::BF16).causal_bottom_right(),
        ),
        (
            "sdpa_bwd_window_causal_bf16",
            base(DType::BF16).causal(true).sliding_window(48),
        ),
        (
            "sdpa_bwd_window_br_causal_padding_bf16",
            cross(DType::BF16)
                .causal_bottom_right()
                .sliding_window(64)
                .padding(true),
        ),
    ];
    for (name, cfg) in bwd {
        for (suffix, imp) in imps {
            let name = format!("{name}{suffix}");
            let cfg = cfg.clone().implementation(imp);
            if cfg.dtype == DType::F16 {
                t.push(gpu(&name, move || attention_backward::<f16>(cfg)));
            } else {
                t.push(gpu(&name, move || attention_backward::<bf16>(cfg)));
            }
        }
    }
    // The SDPA backward operation's plan reloaded from its cuDNN JSON (its
    // kernel parameters name cuDNN's own workspace buffers), run against the
    // reference: plain, padding, GQA. The operation needs cuDNN 9.21 (the
    // GPU machine's 9.19 refuses it, typed): reported ignored before.
    let loaded = cudnn::sys::cudnn::load()
        .ok()
        .and_then(|a| a.info().version)
        .map(|v| (v.major, v.minor, v.patch));
    for (name, cfg) in [
        ("sdpa_bwd_native_reloaded_bf16", base(DType::BF16)),
        (
            "sdpa_bwd_native_reloaded_padding_bf16",
            base(DType::BF16).padding(true),
        ),
        (
            "sdpa_bwd_native_reloaded_gqa_bf16",
            base(DType::BF16).gqa(4),
        ),
    ] {
        let cfg = cfg.implementation(SdpaImpl::Native);
        let f = move || attention_backward_from::<bf16>(cfg, true);
        match loaded {
            Some(v) if v < ops::sdpa::since::BACKWARD => {
                eprintln!(
                    "skipped: gpu::{name}: cuDNN's SDPA backward operation needs cuDNN 9.21 (loaded: {}.{}.{})",
                    v.0, v.1, v.2
                );
                t.push(crate::support::trial(format!("gpu::{name}"), f).with_ignored_flag(true));
            }
            _ => t.push(gpu(name, f)),
        }
    }
    t.push(gpu("sdpa_bwd_finite_differences_bf16", || {
        attention_backward_finite_differences(SdpaImpl::Auto)
    }));
    t.push(gpu("sdpa_bwd_finite_differences_bf16_composite", || {
        attention_backward_finite_differences(SdpaImpl::Composite)
    }));
    run(t)
}
