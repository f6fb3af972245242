//! GPU tier for the graph API's norm ops (skipped visibly without a device;
//! a failure under `CUDNN_RS_REQUIRE_GPU=1`): layer, RMS and batch norm,
//! training and inference, fused with a ReLU, and their backwards, planned
//! for the device, executed, and compared with the f64 references of
//! `cudnn::reference::norm`.
//!
//! - inputs are random and rounded to the element type before the reference
//!   sees them; outputs are poisoned with NaN first (NaN never passes);
//! - bounds relative to `max(1, |want|)`: f16 1e-2, bf16 2e-2 (sums over the
//!   batch four times that).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// `ensure!(err <= tol)` must fail for NaN: a negated partial comparison on purpose.
#![allow(clippy::neg_cmp_op_on_partial_ord)]
use crate::support;
use crate::support::gpu_data;

use cudnn::graph::*;
use cudnn::reference::norm as rn;
use cudnn::runtime::DeviceBuffer;
use gpu_data::*;
use half::{bf16, f16};
use support::*;

/// The bound for `T` relative to `max(1, |want|)`.
fn tol<T: El>() -> f64 {
    match T::DT {
        DType::F16 => 1e-2,
        DType::BF16 => 2e-2,
        _ => 1e-5,
    }
}

fn layer_or_rms<T: El>(mode: NormMode, train: bool) -> TestResult {
    norm_rows::<T>(mode, train, false)
}

/// Layer / RMS norm over `[64, 256, 1, 1]`; `fused`: scale and bias in x's
/// type and a relu after the norm, in the same plan.
fn norm_rows<T: El>(mode: NormMode, train: bool, fused: bool) -> TestResult {
    let mut cx = cx(11)?;
    let (n, d) = (64usize, 256usize);
    let dims = [n as i64, d as i64, 1, 1];
    let x = round::<T>(&cx.rng.vec(n * d, -2.0, 2.0));
    let s = cx.rng.vec(d, 0.5, 1.5);
    let b = cx.rng.vec(d, -0.5, 0.5);
    let mut g = Graph::new();
    let xt = g.input("x", TensorSpec::row_major(T::DT, &dims)?)?;
    let pd = [1, d as i64, 1, 1];
    let pdt = if fused { T::DT } else { DType::F32 };
    let st = g.input("scale", TensorSpec::row_major(pdt, &pd)?)?;
    let bt = g.input("bias", TensorSpec::row_major(pdt, &pd)?)?;
    let phase = if train {
        NormPhase::Training
    } else {
        NormPhase::Inference
    };
    let out = match mode {
        NormMode::Layer => g.layer_norm(xt, st, bt, 1e-5, phase)?,
        _ => g.rms_norm(xt, st, Some(bt), 1e-5, phase)?,
    };
    let y = if fused { g.relu(out.y)? } else { out.y };
    g.output(y, T::DT)?;
    g.rename(y, "y")?;
    if let Some(m) = out.mean {
        g.rename(m, "mean")?;
    }
    if let Some(i) = out.inv_variance {
        g.rename(i, "inv")?;
    }
    let p = plan(&cx, &g, "")?;
    let (s, b) = if fused {
        (round::<T>(&s), round::<T>(&b))
    } else {
        (s, b)
    };
    let xb = up::<T>(&x)?;
    let (sb32, bb32, sbt, bbt);
    let (sbs, bbs) = if fused {
        sbt = up::<T>(&s)?;
        bbt = up::<T>(&b)?;
        (None, Some((sbt.as_slice(), bbt.as_slice())))
    } else {
        sb32 = up::<f32>(&s)?;
        bb32 = up::<f32>(&b)?;
        (Some((sb32.as_slice(), bb32.as_slice())), None)
    };
    let mut yb = poisoned::<T>(n * d)?;
    let mut mb = poisoned::<f32>(n)?;
    let mut ib = poisoned::<f32>(n)?;
    {
        let mut bi = p.bindings();
        bi.input("x", xb.as_slice())?
            .output("y", yb.as_slice_mut())?;
        if let Some((a, b)) = sbs {
            bi.input("scale", a)?.input("bias", b)?;
        }
        if let Some((a, b)) = bbs {
            bi.input("scale", a)?.input("bias", b)?;
        }
        if out.mean.is_some() {
            bi.output("mean", mb.as_slice_mut())?;
        }
        if out.inv_variance.is_some() {
            bi.output("inv", ib.as_slice_mut())?;
        }
        p.execute(&mut cx.h, &mut bi)?;
    }
    cx.h.stream().synchronize()?;
    let sr = round::<f32>(&s);
    let br = round::<f32>(&b);
    let shape = [n, d, 1, 1];
    let act = |v: Vec<f64>| -> Vec<f64> {
        if fused {
            v.into_iter().map(|x| x.max(0.0)).collect()
        } else {
            v
        }
    };
    match mode {
        NormMode::Layer => {
            let want = rn::layer_norm_training(&x, &shape, &sr, &br, 1e-5)?;
            close("y", &down(&yb)?, &act(want.y.clone()), tol::<T>())?;
            if train {
                close("mean", &down(&mb)?, &want.mean, 1e-4)?;
                close("inv_variance", &down(&ib)?, &want.inv_variance, 1e-3)?;
            }
        }
        _ => {
            let want = rn::rms_norm_training(&x, &shape, &sr, Some(&br), 1e-5)?;
            close("y", &down(&yb)?, &act(want.y.clone()), tol::<T>())?;
            if train {
                close("inv_rms", &down(&ib)?, &want.inv_rms, 1e-3)?;
            }
        }
    }
    Ok(())
}

fn nhwc_from_nchw(v: &[f64], [n, c, h, w]: [usize; 4]) -> Vec<f64> {
    let mut o = vec![0.0; v.len()];
    for a in 0..n {
        for ch in 0..c {
            for y in 0..h {
                for x in 0..w {
                    o[((a * h + y) * w + x) * c + ch] = v[((a * c + ch) * h + y) * w + x];
                }
            }
        }
    }
    o
}
fn nchw_from_nhwc(v: &[f64], [n, c, h, w]: [usize; 4]) -> Vec<f64> {
    let mut o = vec![0.0; v.len()];
    for a in 0..n {
        for ch in 0..c {
            for y in 0..h {
                for x in 0..w {
                    o[((a * c + ch) * h + y) * w + x] = v[((a * h + y) * w + x) * c + ch];
                }
            }
        }
    }
    o
}

fn batch_norm_train<T: El>() -> TestResult {
    let mut cx = cx(12)?;
    let shape = [4usize, 32, 8, 8];
    let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    let count = shape.iter().product();
    let c = shape[1];
    let x = round::<T>(&cx.rng.vec(count, -2.0, 2.0));
    let s = round::<f32>(&cx.rng.vec(c, 0.5, 1.5));
    let b = round::<f32>(&cx.rng.vec(c, -0.5, 0.5));
    let rm = round::<f32>(&cx.rng.vec(c, -0.2, 0.2));
    let rv = round::<f32>(&cx.rng.vec(c, 0.5, 1.5));
    let mut g = Graph::new();
    let xt = g.input("x", TensorSpec::nhwc(T::DT, &dims)?)?;
    let ps = TensorSpec::nhwc(DType::F32, &[1, c as i64, 1, 1])?;
    let st = g.input("scale", ps.clone())?;
    let bt = g.input("bias", ps.clone())?;
    let rmt = g.input("rm", ps.clone())?;
    let rvt = g.input("rv", ps)?;
    let out = g.batch_norm(
        xt,
        st,
        bt,
        1e-5,
        Some(RunningStats {
            mean: rmt,
            var: rvt,
            momentum: 0.1,
        }),
    )?;
    let y = g.relu(out.y)?;
    g.output(y, T::DT)?;
    g.rename(y, "y")?;
    for (t, name) in [
        (out.mean, "mean"),
        (out.inv_variance, "inv"),
        (out.running_mean, "rm_out"),
        (out.running_var, "rv_out"),
    ] {
        g.rename(t.ok_or(name)?, name)?;
    }
    let p = plan(&cx, &g, "")?;
    let xb = up::<T>(&nhwc_from_nchw(&x, shape))?;
    let (sb, bb, rmb, rvb) = (
        up::<f32>(&s)?,
        up::<f32>(&b)?,
        up::<f32>(&rm)?,
        up::<f32>(&rv)?,
    );
    let mut yb = poisoned::<T>(count)?;
    let mut outs: Vec<DeviceBuffer<f32>> = (0..4).map(|_| poisoned::<f32>(c)).collect::<R<_>>()?;
    {
        let mut bi = p.bindings();
        bi.input("x", xb.as_slice())?
            .input("scale", sb.as_slice())?
            .input("bias", bb.as_slice())?
            .input("rm", rmb.as_slice())?
            .input("rv", rvb.as_slice())?
            .output("y", yb.as_slice_mut())?;
        let [a, b2, c2, d2] = &mut outs[..] else {
            return Err("four outputs".into());
        };
        bi.output("mean", a.as_slice_mut())?
            .output("inv", b2.as_slice_mut())?
            .output("rm_out", c2.as_slice_mut())?
            .output("rv_out", d2.as_slice_mut())?;
        p.execute(&mut cx.h, &mut bi)?;
    }
    cx.h.stream().synchronize()?;
    let want = rn::batch_norm_training(
        &x,
        &shape,
        &s,
        &b,
        1e-5,
        Some(rn::RunningUpdate {
            mean: &rm,
            variance: &rv,
            momentum: 0.1,
        }),
    )?;
    let wy: Vec<f64> = want.y.iter().map(|&v| v.max(0.0)).collect();
    close(
        "y (relu)",
        &nchw_from_nhwc(&down(&yb)?, shape),
        &wy,
        tol::<T>(),
    )?;
    close("mean", &down(&outs[0])?, &want.mean, 1e-4)?;
    close("inv_variance", &down(&outs[1])?, &want.inv_variance, 1e-3)?;
    let run = want.running.ok_or("running stats")?;
    close("running mean", &down(&outs[2])?, &run.mean, 1e-4)?;
    close("running var", &down(&outs[3])?, &run.variance, 1e-3)?;
    Ok(())
}

fn batch_norm_inference<T: El>() -> TestResult {
    let mut cx = cx(13)?;
    let shape = [2usize, 16, 4, 4];
    let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    let count = shape.iter().product();
    let c = shape[1];
    let x = round::<T>(&cx.rng.vec(count, -2.0, 2.0));
    let [s, b, m, v] = [
        cx.rng.vec(c, 0.5, 1.5),
        cx.rng.vec(c, -0.5, 0.5),
        cx.rng.vec(c, -0.3, 0.3),
        cx.rng.vec(c, 0.5, 2.0),
    ]
    .map(|p| round::<f32>(&p));
    let mut g = Graph::new();
    let xt = g.input("x", TensorSpec::nhwc(T::DT, &dims)?)?;
    let ps = TensorSpec::nhwc(DType::F32, &[1, c as i64, 1, 1])?;
    let ts: Vec<Tensor> = ["scale", "bias", "mean", "var"]
        .iter()
        .map(|n| g.input(n, ps.clone()))
        .collect::<Result<_, _>>()?;
    let y = g.batch_norm_inference(xt, ts[0], ts[1], ts[2], ts[3], 1e-5)?;
    g.output(y, T::DT)?;
    g.rename(y, "y")?;
    let (p, _) = Plan::build(
        &g.build()?,
        &cx.target,
        &Policy::default().with_allow_tf32(true),
    )?;
    let xb = up::<T>(&nhwc_from_nchw(&x, shape))?;
    let bufs = [&s, &b, &m, &v].map(|p| up::<f32>(p));
    let mut yb = poisoned::<T>(count)?;
    {
        let mut bi = p.bindings();
        bi.input("x", xb.as_slice())?;
        for (name, buf) in ["scale", "bias", "mean", "var"].iter().zip(&bufs) {
            let buf = buf.as_ref().map_err(|e| e.to_string())?;
            bi.input(name, buf.as_slice())?;
        }
        bi.output("y", yb.as_slice_mut())?;
        p.execute(&mut cx.h, &mut bi)?;
    }
    cx.h.stream().synchronize()?;
    let inv = rn::inv_std(&v, 1e-5)?;
    let want = rn::batch_norm_inference(&x, &shape, &s, &b, &m, &inv)?;
    close("y", &nchw_from_nhwc(&down(&yb)?, shape), &want, tol::<T>())
}

fn norm_backward<T: El>(mode: NormMode) -> TestResult {
    let mut cx = cx(14)?;
    let batch = mode == NormMode::Batch;
    let shape = if batch {
        [4usize, 16, 4, 4]
    } else {
        [32, 128, 1, 1]
    };
    let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    let count: usize = shape.iter().product();
    let x = round::<T>(&cx.rng.vec(count, -2.0, 2.0));
    let dy = round::<T>(&cx.rng.vec(count, -1.0, 1.0));
    let pd = mode.param_dims(&dims);
    let sd = mode.stats_dims(&dims);
    let np: usize = pd.iter().product::<i64>() as usize;
    let s = round::<f32>(&cx.rng.vec(np, 0.5, 1.5));
    let zero = vec![0.0; np];
    // Saved statistics from the reference forward, rounded to f32.
    let (mean, inv) = match mode {
        NormMode::Layer => {
            let f = rn::layer_norm_training(&x, &shape, &s, &zero, 1e-5)?;
            (Some(round::<f32>(&f.mean)), round::<f32>(&f.inv_variance))
        }
        NormMode::Rms => {
            let f = rn::rms_norm_training(&x, &shape, &s, None, 1e-5)?;
            (None, round::<f32>(&f.inv_rms))
        }
        NormMode::Batch => {
            let f = rn::batch_norm_training(&x, &shape, &s, &zero, 1e-5, None)?;
            (Some(round::<f32>(&f.mean)), round::<f32>(&f.inv_variance))
        }
        other => return Err(format!("a norm mode this test does not know: {other:?}").into()),
    };
    let spec = |d: DType, dims: &[i64]| {
        if batch {
            TensorSpec::nhwc(d, dims)
        } else {
            TensorSpec::row_major(d, dims)
        }
    };
    let mut g = Graph::new();
    let xt = g.input("x", spec(T::DT, &dims)?)?;
    let dyt = g.input("dy", spec(T::DT, &dims)?)?;
    let st = g.input("scale", spec(DType::F32, &pd)?)?;
    let it = g.input("inv", spec(DType::F32, &sd)?)?;
    let grads = match mode {
        NormMode::Layer => {
            let mt = g.input("mean", spec(DType::F32, &sd)?)?;
            g.layer_norm_backward(dyt, xt, st, mt, it)?
        }
        NormMode::Rms => g.rms_norm_backward(dyt, xt, st, it, false)?,
        NormMode::Batch => {
            let mt = g.input("mean", spec(DType::F32, &sd)?)?;
            g.batch_norm_backward(dyt, xt, st, mt, it)?
        }
        other => return Err(format!("a norm mode this test does not know: {other:?}").into()),
    };
    g.output(grads.dx, T::DT)?;
    g.rename(grads.dx, "dx")?;
    g.rename(grads.dscale, "dscale")?;
    if let Some(db) = grads.dbias {
        g.rename(db, "dbias")?;
    }
    let p = plan(&cx, &g, "")?;
    let lay = |v: &[f64]| {
        if batch {
            nhwc_from_nchw(v, shape)
        } else {
            v.to_vec()
        }
    };
    let (xb, dyb) = (up::<T>(&lay(&x))?, up::<T>(&lay(&dy))?);
    let (sb, ib) = (up::<f32>(&s)?, up::<f32>(&inv)?);
    let mb = mean.as_ref().map(|m| up::<f32>(m)).transpose()?;
    let mut dxb = poisoned::<T>(count)?;
    let mut dsb = poisoned::<f32>(np)?;
    let mut dbb = poisoned::<f32>(np)?;
    {
        let mut bi = p.bindings();
        bi.input("x", xb.as_slice())?
            .input("dy", dyb.as_slice())?
            .input("scale", sb.as_slice())?
            .input("inv", ib.as_slice())?
            .output("dx", dxb.as_slice_mut())?
            .output("dscale", dsb.as_slice_mut())?;
        if let Some(m) = &mb {
            bi.input("mean", m.as_slice())?;
        }
        if grads.dbias.is_some() {
            bi.output("dbias", dbb.as_slice_mut())?;
        }
        p.execute(&mut cx.h, &mut bi)?;
    }
    cx.h.stream().synchronize()?;
    let unlay = |v: Vec<f64>| if batch { nchw_from_nhwc(&v, shape) } else { v };
    let (wdx, wds, wdb) = match mode {
        NormMode::Layer => {
            let r =
                rn::layer_norm_backward(&x, &shape, &dy, &s, mean.as_deref().unwrap_or(&[]), &inv)?;
            (r.dx, r.dscale, Some(r.dbias))
        }
        NormMode::Rms => {
            let r = rn::rms_norm_backward(&x, &shape, &dy, &s, &inv, false)?;
            (r.dx, r.dscale, None)
        }
        NormMode::Batch => {
            let r =
                rn::batch_norm_backward(&x, &shape, &dy, &s, mean.as_deref().unwrap_or(&[]), &inv)?;
            (r.dx, r.dscale, Some(r.dbias))
        }
        other => return Err(format!("a norm mode this test does not know: {other:?}").into()),
    };
    close("dx", &unlay(down(&dxb)?), &wdx, tol::<T>())?;
    // Parameter gradients sum over many elements: bound relative to the sum's size.
    let sum_tol = tol::<T>() * 4.0;
    let ds: Vec<f64> = down(&dsb)?;
    let scale_of = wds.iter().fold(1.0f64, |a, &b| a.max(b.abs()));
    close(
        "dscale",
        &ds.iter().map(|v| v / scale_of).collect::<Vec<_>>(),
        &wds.iter().map(|v| v / scale_of).collect::<Vec<_>>(),
        sum_tol,
    )?;
    if let Some(wdb) = wdb {
        let db = down(&dbb)?;
        let scale_of = wdb.iter().fold(1.0f64, |a, &b| a.max(b.abs()));
        close(
            "dbias",
            &db.iter().map(|v| v / scale_of).collect::<Vec<_>>(),
            &wdb.iter().map(|v| v / scale_of).collect::<Vec<_>>(),
            sum_tol,
        )?;
    }
    Ok(())
}

pub fn main() {
    let mut t = vec![];
    t.push(gpu("layer_norm_train_bf16", || {
        layer_or_rms::<bf16>(NormMode::Layer, true)
    }));
    t.push(gpu("layer_norm_train_f16", || {
        layer_or_rms::<f16>(NormMode::Layer, true)
    }));
    t.push(gpu("layer_norm_infer_bf16", || {
        layer_or_rms::<bf16>(NormMode::Layer, false)
    }));
    t.push(gpu("rms_norm_train_bf16", || {
        layer_or_rms::<bf16>(NormMode::Rms, true)
    }));
    t.push(gpu("rms_norm_infer_f16", || {
        layer_or_rms::<f16>(NormMode::Rms, false)
    }));
    t.push(gpu("layer_norm_train_relu_fused_bf16", || {
        norm_rows::<bf16>(NormMode::Layer, true, true)
    }));
    t.push(gpu("rms_norm_infer_relu_fused_f16", || {
        norm_rows::<f16>(NormMode::Rms, false, true)
    }));
    t.push(gpu(
        "batch_norm_train_running_relu_f16",
        batch_norm_train::<f16>,
    ));
    t.push(gpu(
        "batch_norm_train_running_relu_bf16",
        batch_norm_train::<bf16>,
    ));
    t.push(gpu("batch_norm_inference_f16", batch_norm_inference::<f16>));
    t.push(gpu("layer_norm_backward_bf16", || {
        norm_backward::<bf16>(NormMode::Layer)
    }));
    t.push(gpu("rms_norm_backward_bf16", || {
        norm_backward::<bf16>(NormMode::Rms)
    }));
    t.push(gpu("batch_norm_backward_f16", || {
        norm_backward::<f16>(NormMode::Batch)
    }));
    run(t)
}
