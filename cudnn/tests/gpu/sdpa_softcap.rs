//! GPU tier for the attention logit softcap (issue 24, item 5a; skipped
//! visibly without a device, a failure under `CUDNN_RS_REQUIRE_GPU=1`):
//! the forward through cuDNN's SDPA operation (its score-modifier subgraph)
//! and the composite, the backward through the composite (`Auto`) and the
//! SDPA backward operation (`Native`), f16 and bf16, MHA and GQA, BSHD and
//! BHSD, and with the masks Gemma 2 uses it with (causal top-left,
//! bottom-right, causal with a sliding window; both implementations,
//! forward and backward), against the f64 reference with the same cap and
//! masks. Inputs are rounded to
//! the element type before the reference sees them, outputs are poisoned
//! with NaN first (NaN never passes), bounds are relative to `max(1,
//! |want|)` (3e-2 bf16, 2e-2 f16), and each case also checks that the
//! reference *without* the cap is farther than the bound (the cap is
//! active: a device that ignored it would fail). The SDPA operation takes
//! the softcap from cuDNN 9.21: on an older cuDNN (PyTorch 2.11's 9.19)
//! the native cases are reported ignored with a note, never passed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// `ensure!(err <= tol)` must fail for NaN: a negated partial comparison on purpose.
#![allow(clippy::neg_cmp_op_on_partial_ord)]
use crate::support;

use crate::support::gpu_data;

use crate::support::gpu_sdpa::{bind_backward_inputs, bind_grads};
use crate::support::norm_attention_graphs::sdpa_bwd;
use crate::support::sdpa_plans::fwd_parts;
use cudnn::graph::*;
use cudnn::reference::attention as ra;
use gpu_data::*;
use half::{bf16, f16};
use support::*;

/// The bound for `T` relative to `max(1, |want|)`.
fn tol<T: El>() -> f64 {
    match T::DT {
        DType::F16 => 2e-2,
        DType::BF16 => 3e-2,
        _ => 1e-5,
    }
}

/// `got` within `tol` of `want`, and `uncapped` (the reference without the
/// softcap) not.
fn close(what: &str, got: &[f64], want: &[f64], uncapped: &[f64], tol: f64) -> TestResult {
    let (e, u) = (worst(got, want), worst(uncapped, want));
    eprintln!(
        "  {what}: max rel error {e:.2e} (bound {tol:.0e}; the uncapped reference is {u:.2e} away)"
    );
    ensure!(e <= tol, "{what}: rel error {e:.3e} > {tol:.0e}");
    ensure!(
        u > tol,
        "{what}: the cap is not active in this case ({u:.2e})"
    );
    Ok(())
}

/// A case: the cap 2 on scores of scale 0.5 over d = 64 (their spread is a
/// few units: tanh bends).
fn config<T: El>(gqa: bool, layout: AttnLayout, imp: SdpaImpl) -> SdpaConfig {
    let c = SdpaConfig::new(2, 4, 128, 64, T::DT)
        .kv_len(256)
        .scale(0.5)
        .softcap(2.0)
        .layout(layout)
        .implementation(imp);
    if gqa { c.gqa(2) } else { c }
}

struct Inputs {
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
}

fn inputs<T: El>(cfg: &SdpaConfig, seed: u64) -> R<Inputs> {
    let mut rng = Rng(seed);
    Ok(Inputs {
        q: round::<T>(&rng.vec(cfg.q_spec()?.span_elements()?, -1.0, 1.0)),
        k: round::<T>(&rng.vec(cfg.k_spec()?.span_elements()?, -1.0, 1.0)),
        v: round::<T>(&rng.vec(cfg.v_spec()?.span_elements()?, -1.0, 1.0)),
    })
}

/// The masks of a case (Gemma 2 uses the softcap with a causal mask and,
/// on alternate layers, a sliding window).
#[derive(Clone, Copy)]
enum Mask {
    None,
    Causal,
    BottomRight,
    CausalWindow,
}

fn masked(c: SdpaConfig, mask: Mask) -> SdpaConfig {
    match mask {
        Mask::None => c,
        Mask::Causal => c.causal(true),
        Mask::BottomRight => c.causal_bottom_right(),
        Mask::CausalWindow => c.causal(true).sliding_window(48),
    }
}

/// The reference's options for `cfg` (its masks too), capped or not.
fn ref_config(cfg: &SdpaConfig, cap: bool) -> ra::SdpaConfig<'static> {
    let mut rc = ra::SdpaConfig::new(cfg.scale_value());
    rc.softcap = if cap { cfg.softcap } else { None };
    let br = cfg.diagonal == DiagonalAlignment::BottomRight;
    if cfg.is_causal {
        rc.causal = if br {
            ra::CausalMask::BottomRight
        } else {
            ra::CausalMask::TopLeft
        };
    }
    rc.window = cfg.window.map(|w| ra::Window {
        size: w as usize,
        bottom_right: br,
    });
    rc
}

fn reference(cfg: &SdpaConfig, a: &Inputs, cap: bool) -> R<ra::SdpaForward> {
    let rc = ref_config(cfg, cap);
    Ok(ra::forward(
        &view(&a.q, &cfg.q_spec()?),
        &view(&a.k, &cfg.k_spec()?),
        &view(&a.v, &cfg.v_spec()?),
        &rc,
    )?)
}

/// The forward (training: O and the statistics) against the reference.
fn forward<T: El>(cfg: SdpaConfig) -> TestResult {
    let cfg = cfg.training(true);
    let mut cx = cx(0)?;
    let a = inputs::<T>(&cfg, 31)?;
    let (mut g, f) = fwd_parts(&cfg)?;
    g.rename(f.stats.ok_or("training saves stats")?, "stats")?;
    let p = plan(&cx, &g, &format!("{:?} forward", cfg.resolve(false)?))?;
    let (qb, kb, vb) = (up::<T>(&a.q)?, up::<T>(&a.k)?, up::<T>(&a.v)?);
    let os = cfg.o_spec()?;
    let mut ob = poisoned::<T>(os.span_elements()?)?;
    let mut sb = poisoned::<f32>(cfg.stats_spec()?.span_elements()?)?;
    {
        let mut bi = p.bindings();
        bi.input("q", qb.as_slice())?
            .input("k", kb.as_slice())?
            .input("v", vb.as_slice())?
            .output("o", ob.as_slice_mut())?
            .output("stats", sb.as_slice_mut())?;
        p.execute(&mut cx.h, &mut bi)?;
    }
    cx.h.stream().synchronize()?;
    let o = to_bhsd(&down(&ob)?, cfg.layout, dims4(&os));
    let stats = down(&sb)?;
    let (want, plain) = (reference(&cfg, &a, true)?, reference(&cfg, &a, false)?);
    close("o", &o, &want.o, &plain.o, tol::<T>())?;
    close("stats", &stats, &want.stats, &plain.stats, 1e-2)?;
    Ok(())
}

/// The backward (dQ, dK, dV) against the reference's, from the
/// reference's O and statistics.
fn backward<T: El>(cfg: SdpaConfig) -> TestResult {
    let mut cx = cx(0)?;
    let a = inputs::<T>(&cfg, 32)?;
    let f = reference(&cfg, &a, true)?;
    let os = cfg.o_spec()?;
    let o_store = round::<T>(&store(&f.o, cfg.layout, dims4(&os)));
    let d_o = round::<T>(&Rng(33).vec(os.span_elements()?, -1.0, 1.0));
    let (g, _) = sdpa_bwd(&cfg)?;
    let p = plan(&cx, &g, &format!("{:?} backward", cfg.resolve(true)?))?;
    let (qb, kb, vb) = (up::<T>(&a.q)?, up::<T>(&a.k)?, up::<T>(&a.v)?);
    let (ob, dob, sb) = (up::<T>(&o_store)?, up::<T>(&d_o)?, up::<f32>(&f.stats)?);
    let mut dq = poisoned::<T>(a.q.len())?;
    let mut dk = poisoned::<T>(a.k.len())?;
    let mut dv = poisoned::<T>(a.v.len())?;
    {
        let mut bi = p.bindings();
        bind_backward_inputs(&mut bi, [&qb, &kb, &vb, &ob, &dob], &sb)?;
        bind_grads(&mut bi, [&mut dq, &mut dk, &mut dv])?;
        p.execute(&mut cx.h, &mut bi)?;
    }
    cx.h.stream().synchronize()?;
    let grads = |capped: bool| -> R<ra::SdpaGrads> {
        let rc = ref_config(&cfg, capped);
        Ok(ra::backward(
            &view(&a.q, &cfg.q_spec()?),
            &view(&a.k, &cfg.k_spec()?),
            &view(&a.v, &cfg.v_spec()?),
            &view(&o_store, &os),
            &view(&d_o, &os),
            &f.stats,
            &rc,
        )?)
    };
    let (want, plain) = (grads(true)?, grads(false)?);
    let got = [
        to_bhsd(&down(&dq)?, cfg.layout, dims4(&cfg.q_spec()?)),
        to_bhsd(&down(&dk)?, cfg.layout, dims4(&cfg.k_spec()?)),
        to_bhsd(&down(&dv)?, cfg.layout, dims4(&cfg.v_spec()?)),
    ];
    close("dq", &got[0], &want.dq, &plain.dq, tol::<T>())?;
    close("dk", &got[1], &want.dk, &plain.dk, tol::<T>())?;
    // dV does not see the cap's derivative, only P: still capped.
    close("dv", &got[2], &want.dv, &plain.dv, tol::<T>())?;
    Ok(())
}

fn fwd_case<T: El>(gqa: bool, layout: AttnLayout, imp: SdpaImpl, mask: Mask) -> TestResult {
    forward::<T>(masked(config::<T>(gqa, layout, imp), mask))
}

fn bwd_case<T: El>(gqa: bool, layout: AttnLayout, imp: SdpaImpl, mask: Mask) -> TestResult {
    backward::<T>(masked(config::<T>(gqa, layout, imp), mask))
}

/// The loaded cuDNN, if one loads.
fn loaded() -> Option<(u32, u32, u32)> {
    cudnn::sys::cudnn::load()
        .ok()
        .and_then(|a| a.info().version)
        .map(|v| (v.major, v.minor, v.patch))
}

/// A GPU trial; a native one on a cuDNN before 9.21 (no score-modifier
/// subgraph: the crate refuses it, typed) is reported ignored with a note,
/// never passed.
fn trial(
    name: String,
    native: bool,
    f: impl FnOnce() -> TestResult + Send + 'static,
) -> libtest_mimic::Trial {
    match loaded() {
        Some(v) if native && v < (9, 21, 0) => {
            eprintln!(
                "skipped: gpu::{name}: the SDPA operation takes a softcap from cuDNN 9.21 (loaded: {}.{}.{})",
                v.0, v.1, v.2
            );
            crate::support::trial(format!("gpu::{name}"), f).with_ignored_flag(true)
        }
        _ => gpu(&name, f),
    }
}

pub fn main() {
    use AttnLayout::{Bhsd, Bshd};
    use SdpaImpl::{Auto, Composite, Native};
    let mut trials = Vec::new();
    for (name, gqa, layout) in [("mha_bshd", false, Bshd), ("gqa_bhsd", true, Bhsd)] {
        for (imp_name, imp) in [("native", Native), ("composite", Composite)] {
            let native = imp == Native;
            trials.push(trial(
                format!("sdpa_softcap_fwd_{imp_name}_{name}_bf16"),
                native,
                move || fwd_case::<bf16>(gqa, layout, imp, Mask::None),
            ));
            trials.push(trial(
                format!("sdpa_softcap_fwd_{imp_name}_{name}_f16"),
                native,
                move || fwd_case::<f16>(gqa, layout, imp, Mask::None),
            ));
        }
        for (imp_name, imp) in [("auto", Auto), ("native", Native)] {
            let native = imp == Native;
            trials.push(trial(
                format!("sdpa_softcap_bwd_{imp_name}_{name}_bf16"),
                native,
                move || bwd_case::<bf16>(gqa, layout, imp, Mask::None),
            ));
            trials.push(trial(
                format!("sdpa_softcap_bwd_{imp_name}_{name}_f16"),
                native,
                move || bwd_case::<f16>(gqa, layout, imp, Mask::None),
            ));
        }
    }
    // With the masks (the frontend refuses them beside its score mod; cuDNN
    // plans them): causal top-left, bottom-right (s_q 128 < s_kv 256) and
    // causal with a window, bf16, forward and backward, each way.
    for (mask_name, mask) in [
        ("causal", Mask::Causal),
        ("bottom_right", Mask::BottomRight),
        ("causal_window", Mask::CausalWindow),
    ] {
        for (imp_name, imp) in [("native", Native), ("composite", Composite)] {
            let native = imp == Native;
            trials.push(trial(
                format!("sdpa_softcap_{mask_name}_fwd_{imp_name}_gqa_bshd_bf16"),
                native,
                move || fwd_case::<bf16>(true, Bshd, imp, mask),
            ));
            trials.push(trial(
                format!("sdpa_softcap_{mask_name}_bwd_{imp_name}_gqa_bshd_bf16"),
                native,
                move || bwd_case::<bf16>(true, Bshd, imp, mask),
            ));
        }
    }
    run(trials)
}
