//! GPU tier for the graph API's norm and attention ops (skipped visibly
//! without a device; a failure under `CUDNN_RS_REQUIRE_GPU=1`): each norm
//! mode and attention configuration planned for the device, executed, and
//! compared with the f64 references of `cudnn::reference::{norm, attention}`.
//!
//! - inputs are random and rounded to the element type before the reference
//!   sees them; outputs are poisoned with NaN first (NaN never passes);
//! - bounds relative to `max(1, |want|)`: f16 1e-2, bf16 2e-2 (attention
//!   outputs and gradients 3e-2 in bf16: they sum over the sequence);
//! - attention backward is also checked against central finite differences
//!   of the reference forward (loss `sum(O * dO)`) on a small GQA case;
//! - dropout (whose Philox mask the host cannot reproduce) is checked for
//!   being reproducible with one seed and different with another.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// `ensure!(err <= tol)` must fail for NaN: a negated partial comparison on purpose.
#![allow(clippy::neg_cmp_op_on_partial_ord)]
#[path = "support/mod.rs"]
mod support;

use cudnn::DataType;
use cudnn::dnn::Handle;
use cudnn::graph::*;
use cudnn::reference::{attention as ra, norm as rn};
use cudnn::runtime::{Device, DeviceBuffer, Stream};
use half::{bf16, f16};
use support::*;

type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
    fn vec(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..n).map(|_| lo + (hi - lo) * self.next()).collect()
    }
}

/// An element type the tests run in.
trait El: DataType + Copy {
    const DT: DType;
    const TOL: f64;
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
}
impl El for f16 {
    const DT: DType = DType::F16;
    const TOL: f64 = 1e-2;
    fn from_f64(v: f64) -> Self {
        f16::from_f64(v)
    }
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
}
impl El for bf16 {
    const DT: DType = DType::BF16;
    const TOL: f64 = 2e-2;
    fn from_f64(v: f64) -> Self {
        bf16::from_f64(v)
    }
    fn to_f64(self) -> f64 {
        bf16::to_f64(self)
    }
}
impl El for f32 {
    const DT: DType = DType::F32;
    const TOL: f64 = 1e-5;
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
}

/// Round to `T` and back: what the device sees.
fn round<T: El>(v: &[f64]) -> Vec<f64> {
    v.iter().map(|&x| T::from_f64(x).to_f64()).collect()
}
fn up<T: El>(v: &[f64]) -> R<DeviceBuffer<T>> {
    let h: Vec<T> = v.iter().map(|&x| T::from_f64(x)).collect();
    Ok(DeviceBuffer::from_host(&h)?)
}
fn poisoned<T: El>(n: usize) -> R<DeviceBuffer<T>> {
    up::<T>(&vec![f64::NAN; n])
}
fn down<T: El>(b: &DeviceBuffer<T>) -> R<Vec<f64>> {
    let mut h = vec![T::from_f64(0.0); b.len()];
    b.copy_to_host(&mut h)?;
    Ok(h.iter().map(|x| x.to_f64()).collect())
}

fn close(what: &str, got: &[f64], want: &[f64], tol: f64) -> TestResult {
    ensure!(
        got.len() == want.len(),
        "{what}: {} values, want {}",
        got.len(),
        want.len()
    );
    let mut worst = (0.0f64, 0usize);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let e = (g - w).abs() / w.abs().max(1.0);
        if e.is_nan() || e > worst.0 {
            worst = (if e.is_nan() { f64::INFINITY } else { e }, i);
        }
    }
    eprintln!("  {what}: max rel error {:.2e} (bound {tol:.0e})", worst.0);
    ensure!(
        worst.0 <= tol,
        "{what}: element {} is {}, want {} (rel error {:.3e} > {tol:.0e})",
        worst.1,
        got[worst.1],
        want[worst.1],
        worst.0
    );
    Ok(())
}

struct Cx {
    h: Handle,
    target: Target,
    rng: Rng,
}

fn cx(seed: u64) -> R<Cx> {
    Device::new(0)?;
    let stream = Stream::new()?;
    Ok(Cx {
        h: Handle::new(&stream)?,
        target: Target::device(0)?,
        rng: Rng(seed),
    })
}

fn plan(cx: &Cx, g: &Graph) -> R<Plan> {
    let (p, r) = Plan::build(&g.build()?, &cx.target, &Policy::default())?;
    eprintln!(
        "  engine {:?} of {} configs, ws {} B",
        r.chosen,
        r.candidates.len(),
        p.workspace_size()
    );
    Ok(p)
}

// ---- norms ----

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
    let p = plan(&cx, &g)?;
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
            close("y", &down(&yb)?, &act(want.y.clone()), T::TOL)?;
            if train {
                close("mean", &down(&mb)?, &want.mean, 1e-4)?;
                close("inv_variance", &down(&ib)?, &want.inv_variance, 1e-3)?;
            }
        }
        _ => {
            let want = rn::rms_norm_training(&x, &shape, &sr, Some(&br), 1e-5)?;
            close("y", &down(&yb)?, &act(want.y.clone()), T::TOL)?;
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
    let p = plan(&cx, &g)?;
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
    close("y (relu)", &nchw_from_nhwc(&down(&yb)?, shape), &wy, T::TOL)?;
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
        &Policy {
            allow_tf32: true,
            ..Policy::default()
        },
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
    close("y", &nchw_from_nhwc(&down(&yb)?, shape), &want, T::TOL)
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
    };
    g.output(grads.dx, T::DT)?;
    g.rename(grads.dx, "dx")?;
    g.rename(grads.dscale, "dscale")?;
    if let Some(db) = grads.dbias {
        g.rename(db, "dbias")?;
    }
    let p = plan(&cx, &g)?;
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
    };
    close("dx", &unlay(down(&dxb)?), &wdx, T::TOL)?;
    // Parameter gradients sum over many elements: bound relative to the sum's size.
    let sum_tol = T::TOL * 4.0;
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

// ---- attention ----

fn to_bhsd(v: &[f64], layout: AttnLayout, [b, h, s, d]: [usize; 4]) -> Vec<f64> {
    if layout == AttnLayout::Bhsd {
        return v.to_vec();
    }
    let mut o = vec![0.0; v.len()];
    for n in 0..b {
        for hh in 0..h {
            for i in 0..s {
                for t in 0..d {
                    o[((n * h + hh) * s + i) * d + t] = v[((n * s + i) * h + hh) * d + t];
                }
            }
        }
    }
    o
}

fn dims4(spec: &TensorSpec) -> [usize; 4] {
    let d = spec.dims();
    [d[0] as usize, d[1] as usize, d[2] as usize, d[3] as usize]
}

fn view<'a>(data: &'a [f64], spec: &TensorSpec) -> ra::View<'a> {
    let s = spec.strides();
    ra::View::new(
        data,
        dims4(spec),
        [s[0] as usize, s[1] as usize, s[2] as usize, s[3] as usize],
    )
}

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
    let mut g = Graph::new();
    let q = g.input("q", cfg.q_spec()?)?;
    let k = g.input("k", cfg.k_spec()?)?;
    let v = g.input("v", cfg.v_spec()?)?;
    let f = g.sdpa_forward(q, k, v, cfg)?;
    g.rename(f.o, "o")?;
    if let Some(s) = f.stats {
        g.rename(s, "stats")?;
    }
    let p = plan(cx, &g)?;
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
fn run_bwd<T: El>(
    cx: &mut Cx,
    cfg: &SdpaConfig,
    a: &Attn,
    o: &[f64],
    d_o: &[f64],
    stats: &[f64],
) -> R<[Vec<f64>; 3]> {
    let mut g = Graph::new();
    let q = g.input("q", cfg.q_spec()?)?;
    let k = g.input("k", cfg.k_spec()?)?;
    let v = g.input("v", cfg.v_spec()?)?;
    let ot = g.input("o", cfg.o_spec()?)?;
    let dot = g.input("do", cfg.o_spec()?)?;
    let st = g.input("stats", cfg.stats_spec()?)?;
    let b = g.sdpa_backward(q, k, v, ot, dot, st, cfg)?;
    g.rename(b.dq, "dq")?;
    g.rename(b.dk, "dk")?;
    g.rename(b.dv, "dv")?;
    let p = plan(cx, &g)?;
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
        bi.input("q", qb.as_slice())?
            .input("k", kb.as_slice())?
            .input("v", vb.as_slice())?
            .input("o", ob.as_slice())?
            .input("do", dob.as_slice())?
            .input("stats", sb.as_slice())?
            .output("dq", dq.as_slice_mut())?
            .output("dk", dk.as_slice_mut())?
            .output("dv", dv.as_slice_mut())?;
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
    let got = run_bwd::<T>(&mut cx, &cfg, &a, &o_store, &d_o, &round::<f32>(&stats))?;
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
    let kv = SdpaConfig {
        heads: cfg.kv_heads,
        seq_q: cfg.seq_kv,
        ..cfg.clone()
    };
    mask_rows(&mut dk, &kv, &a.lens_kv, d);
    mask_rows(&mut wdk, &kv, &a.lens_kv, d);
    mask_rows(&mut dv, &kv, &a.lens_kv, dvw);
    mask_rows(&mut wdv, &kv, &a.lens_kv, dvw);
    close("dq", &dq, &wdq, tol)?;
    close("dk", &dk, &wdk, tol)?;
    close("dv", &dv, &wdv, tol)?;
    Ok(())
}

/// Packed BHSD into the layout's storage.
fn store(v: &[f64], layout: AttnLayout, [b, h, s, d]: [usize; 4]) -> Vec<f64> {
    if layout == AttnLayout::Bhsd {
        return v.to_vec();
    }
    let mut o = vec![0.0; v.len()];
    for n in 0..b {
        for hh in 0..h {
            for i in 0..s {
                for t in 0..d {
                    o[((n * s + i) * h + hh) * d + t] = v[((n * h + hh) * s + i) * d + t];
                }
            }
        }
    }
    o
}

/// dQ, dK, dV against central finite differences of the reference forward's
/// loss `sum(O * dO)` at sampled coordinates (small GQA causal case, bf16).
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
    let got = run_bwd::<T>(&mut cx, &cfg, &a, &o_store, &d_o, &round::<f32>(&f.stats))?;
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
    let got = run_bwd::<T>(&mut cx, &cfg, &a, &o_store, &d_o, &round::<f32>(&f.stats))?;
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

fn main() {
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
    t.push(gpu("sdpa_bwd_finite_differences_bf16", || {
        attention_backward_finite_differences(SdpaImpl::Auto)
    }));
    t.push(gpu("sdpa_bwd_finite_differences_bf16_composite", || {
        attention_backward_finite_differences(SdpaImpl::Composite)
    }));
    run(t)
}
