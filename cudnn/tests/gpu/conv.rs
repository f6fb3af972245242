//! GPU tier for the convolution ops (skipped visibly without a device, a
//! failure under `CUDNN_RS_REQUIRE_GPU=1`): every op (forward, backward
//! data, backward filter, bias gradient, fused bias + activation) in every
//! element type and both layouts, with heuristic and exhaustive search,
//! against the f64 CPU reference (`cudnn::reference::conv`).
//!
//! Inputs are fresh random values each run (the seed is printed on
//! failure), rounded to the element type before the reference sees them.
//! Outputs are poisoned with NaN before every run, and a NaN never passes
//! (`err.is_nan() || err > bound` fails). The bound is per element, relative to the same
//! convolution of the absolute values (the condition of each dot product):
//! `|got - want| <= tol * conv(|x|, |w|)`, with `tol` 1e-12 (f64), 2e-5
//! (f32), 2e-3 (TF32), 1e-2 (f16, bf16).
//!
//! cuDNN has no f64 kernels for some channels-last problems: there, and
//! only there, "no algorithm" is reported as a skip on stderr.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::hash::{BuildHasher, RandomState};

use cudnn::dnn::*;
use cudnn::reference::conv::{self as refc, BiasActivation, ConvParams, Layout};
use cudnn::runtime::{Device, DeviceBuffer, Stream};
use cudnn::{Error, Scale};
use half::{bf16, f16};
use libtest_mimic::Failed;
use support::*;

// ---------------------------------------------------------------------------
// Element types

trait Elem: ConvDataType + PartialEq {
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
    fn nan() -> Self;
    fn bits(self) -> u64;
}

impl Elem for f32 {
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn to_f64(self) -> f64 {
        self.into()
    }
    fn nan() -> Self {
        f32::NAN
    }
    fn bits(self) -> u64 {
        self.to_bits().into()
    }
}
impl Elem for f64 {
    fn from_f64(v: f64) -> Self {
        v
    }
    fn to_f64(self) -> f64 {
        self
    }
    fn nan() -> Self {
        f64::NAN
    }
    fn bits(self) -> u64 {
        self.to_bits()
    }
}
impl Elem for f16 {
    fn from_f64(v: f64) -> Self {
        f16::from_f64(v)
    }
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
    fn nan() -> Self {
        f16::NAN
    }
    fn bits(self) -> u64 {
        self.to_bits().into()
    }
}
impl Elem for bf16 {
    fn from_f64(v: f64) -> Self {
        bf16::from_f64(v)
    }
    fn to_f64(self) -> f64 {
        bf16::to_f64(self)
    }
    fn nan() -> Self {
        bf16::NAN
    }
    fn bits(self) -> u64 {
        self.to_bits().into()
    }
}

/// The tolerance of a precision, relative to `conv(|x|, |w|)`.
fn tol<T: Elem>(math: MathPolicy) -> f64 {
    match T::NAME {
        "f64" => 1e-12,
        "f32" if math == MathPolicy::AllowTf32 => 2e-3,
        "f32" => 2e-5,
        _ => 1e-2,
    }
}

fn scale<T: Elem>(v: f64) -> T::Scale {
    <T::Scale as Scale>::from_f64(v)
}

// ---------------------------------------------------------------------------
// Random data, poisoning, comparison

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    }
}

/// A seed that differs per run and per test.
fn fresh_seed(name: &str) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    RandomState::new().hash_one(name) ^ nanos
}

/// `len` random values in [-1, 1), rounded to `T`, and their f64 values.
fn random<T: Elem>(rng: &mut Lcg, len: usize) -> (Vec<T>, Vec<f64>) {
    let t: Vec<T> = (0..len).map(|_| T::from_f64(rng.next())).collect();
    let f = t.iter().map(|&v| v.to_f64()).collect();
    (t, f)
}

fn poisoned<T: Elem>(len: usize) -> cudnn::Result<DeviceBuffer<T>> {
    DeviceBuffer::from_host(&vec![T::nan(); len])
}

fn abs(v: &[f64]) -> Vec<f64> {
    v.iter().map(|x| x.abs()).collect()
}

fn read<T: Elem>(stream: &Stream, b: &DeviceBuffer<T>) -> cudnn::Result<Vec<f64>> {
    stream.synchronize()?;
    Ok(b.to_vec()?.into_iter().map(Elem::to_f64).collect())
}

fn compare(
    what: &str,
    seed: u64,
    got: &[f64],
    want: &[f64],
    scale: &[f64],
    tol: f64,
) -> TestResult {
    ensure!(
        got.len() == want.len() && want.len() == scale.len(),
        "{what}: lengths {} {} {}",
        got.len(),
        want.len(),
        scale.len()
    );
    for i in 0..got.len() {
        let bound = tol * scale[i] + 1e-30;
        let err = (got[i] - want[i]).abs();
        if err.is_nan() || err > bound {
            return Err(format!(
                "{what} (seed {seed:#x}): element {i}: got {}, want {}, |err| {err:e} > bound {bound:e} (tol {tol:e})",
                got[i], want[i]
            )
            .into());
        }
    }
    Ok(())
}

/// `Ok(None)` (and a skip line) for "cuDNN cannot do this" where it is
/// allowed to say so; other errors pass through.
fn allow_unsupported<P>(
    r: cudnn::Result<P>,
    allowed: bool,
    what: &str,
) -> Result<Option<P>, Failed> {
    match r {
        Ok(p) => Ok(Some(p)),
        Err(e)
            if allowed
                && (matches!(e, Error::Unsupported { .. })
                    || e.cudnn_status()
                        .is_some_and(|s| (3000..4000).contains(&s.0))) =>
        {
            eprintln!("skipped: {what}: cuDNN cannot: {e}");
            Ok(None)
        }
        Err(e) => Err(format!("{what}: {e}").into()),
    }
}

// ---------------------------------------------------------------------------
// Cases

#[derive(Debug, Clone)]
struct Case {
    name: &'static str,
    n: usize,
    c: usize,
    k: usize,
    spatial: Vec<usize>,
    window: Vec<usize>,
    pad: Vec<usize>,
    stride: Vec<usize>,
    dilation: Vec<usize>,
    groups: usize,
}

#[allow(clippy::too_many_arguments)]
fn case(
    name: &'static str,
    n: usize,
    c: usize,
    k: usize,
    spatial: &[usize],
    window: &[usize],
    pad: &[usize],
    stride: &[usize],
    dilation: &[usize],
    groups: usize,
) -> Case {
    Case {
        name,
        n,
        c,
        k,
        spatial: spatial.to_vec(),
        window: window.to_vec(),
        pad: pad.to_vec(),
        stride: stride.to_vec(),
        dilation: dilation.to_vec(),
        groups,
    }
}

fn cases() -> Vec<Case> {
    vec![
        case(
            "2d_3x3",
            2,
            8,
            16,
            &[10, 10],
            &[3, 3],
            &[1, 1],
            &[1, 1],
            &[1, 1],
            1,
        ),
        case(
            "2d_strided_dilated",
            2,
            8,
            8,
            &[11, 13],
            &[3, 3],
            &[2, 1],
            &[2, 1],
            &[2, 1],
            1,
        ),
        case(
            "2d_grouped_g4",
            2,
            16,
            16,
            &[9, 9],
            &[3, 3],
            &[1, 1],
            &[1, 1],
            &[1, 1],
            4,
        ),
        case(
            "2d_depthwise",
            2,
            16,
            16,
            &[9, 9],
            &[3, 3],
            &[1, 1],
            &[2, 2],
            &[1, 1],
            16,
        ),
        case(
            "3d_3x3x3",
            1,
            4,
            8,
            &[5, 6, 7],
            &[3, 3, 3],
            &[1, 1, 1],
            &[1, 1, 1],
            &[1, 1, 1],
            1,
        ),
        case(
            "1d_as_2d_k5",
            2,
            8,
            8,
            &[1, 20],
            &[1, 5],
            &[0, 2],
            &[1, 1],
            &[1, 1],
            1,
        ),
    ]
}

impl Case {
    fn x_dims(&self) -> Vec<usize> {
        [self.n, self.c]
            .iter()
            .chain(&self.spatial)
            .copied()
            .collect()
    }
    fn w_dims(&self) -> Vec<usize> {
        [self.k, self.c / self.groups]
            .iter()
            .chain(&self.window)
            .copied()
            .collect()
    }
    fn params(&self) -> ConvParams {
        ConvParams::new(self.spatial.len())
            .with_pad(&self.pad)
            .with_stride(&self.stride)
            .with_dilation(&self.dilation)
            .with_groups(self.groups)
    }
    fn descs<T: Elem>(
        &self,
        layout: TensorFormat,
    ) -> cudnn::Result<(TensorDescriptor<T>, FilterDescriptor<T>, ConvDescriptor)> {
        let xd = self.x_dims();
        let strides = Layout::from(layout).strides(&xd)?;
        Ok((
            TensorDescriptor::new(&xd, &strides)?,
            FilterDescriptor::new(layout, &self.w_dims())?,
            ConvDescriptor::new(&self.pad, &self.stride, &self.dilation)?
                .with_groups(self.groups)?,
        ))
    }
}

fn count(d: &[usize]) -> usize {
    d.iter().product()
}

struct Gpu {
    stream: Stream,
    h: Handle,
}

fn gpu_ctx() -> Result<Gpu, Failed> {
    Device::new(0)?;
    let stream = Stream::new()?;
    let h = Handle::new(&stream)?;
    Ok(Gpu { stream, h })
}

// ---------------------------------------------------------------------------
// Forward, backward data, backward filter, bias gradient

fn conv_trial<T: Elem>(
    case: &Case,
    layout: TensorFormat,
    search: AlgoSearch,
    math: MathPolicy,
) -> TestResult {
    let name = format!("{} {} {layout:?} {search:?} {math:?}", case.name, T::NAME);
    let seed = fresh_seed(&name);
    let mut rng = Lcg(seed);
    let Gpu { stream, mut h } = gpu_ctx()?;
    // cuDNN's legacy API may lack channels-last f64, and channels-last 3-d
    // (NDHWC) for any type: those may report unsupported (a visible skip).
    let may_lack = layout == TensorFormat::Nhwc && (T::NAME == "f64" || case.spatial.len() == 3);
    let tol = tol::<T>(math);
    let (xdesc, wdesc, conv) = case.descs::<T>(layout)?;
    let (p, rl) = (case.params(), Layout::from(layout));
    let (xs, ws) = (case.x_dims(), case.w_dims());
    let opts = PlanOptions::default()
        .with_search(search)
        .with_math(math)
        .with_cache(CachePolicy::Off);
    let fwd = ConvProblem::forward(&xdesc, &wdesc, &conv)?;
    let ys = fwd.output_shape().to_vec();
    let (xh, x64) = random::<T>(&mut rng, count(&xs));
    let (wh, w64) = random::<T>(&mut rng, count(&ws));
    let (dyh, dy64) = random::<T>(&mut rng, count(&ys));
    let x = DeviceBuffer::from_host(&xh)?;
    let w = DeviceBuffer::from_host(&wh)?;
    let dy = DeviceBuffer::from_host(&dyh)?;
    let (one, zero) = (scale::<T>(1.0), scale::<T>(0.0));
    let check_math = |m: MathType, what: &str| -> TestResult {
        if T::NAME == "f32" && math != MathPolicy::AllowTf32 {
            ensure!(
                m == MathType::Fma,
                "{name} {what}: f32 without TF32 opt-in ran with {m:?}"
            );
        }
        Ok(())
    };

    // Forward, into a view of a larger buffer whose guards must stay NaN.
    let yn = count(&ys);
    let mut y_big = poisoned::<T>(yn + 64)?;
    let plan = {
        let mut view = y_big.slice_mut(32..32 + yn)?;
        let r = match search {
            AlgoSearch::Exhaustive => fwd.plan_on(&mut h, &opts, &x, &w, &mut view),
            _ => fwd.plan(&mut h, &opts),
        };
        allow_unsupported(r, may_lack, &format!("{name} forward"))?
    };
    if let Some(plan) = plan {
        check_math(plan.math_type(), "forward")?;
        ensure!(
            h.workspace_size() >= plan.workspace_size(),
            "workspace not reserved"
        );
        y_big.copy_from_host(&vec![T::nan(); yn + 64])?;
        let ran = plan.run(&mut h, one, &x, &w, zero, y_big.slice_mut(32..32 + yn)?);
        // A run cuDNN refuses (NOT_SUPPORTED) where it may lack the layout.
        if allow_unsupported(ran, may_lack, &format!("{name} forward run"))?.is_some() {
            let got = read(&stream, &y_big)?;
            let (want, _) = refc::forward(&x64, &xs, &w64, &ws, &p, rl)?;
            let (sc, _) = refc::forward(&abs(&x64), &xs, &abs(&w64), &ws, &p, rl)?;
            ensure!(
                got[..32].iter().chain(&got[32 + yn..]).all(|v| v.is_nan()),
                "{name}: forward wrote outside its view"
            );
            compare(
                &format!("{name} forward ({})", plan.algo()),
                seed,
                &got[32..32 + yn],
                &want,
                &sc,
                tol,
            )?;
            // beta reads y: y = 0.5 * conv + 1 * y = 1.5 * conv.
            plan.run(
                &mut h,
                scale::<T>(0.5),
                &x,
                &w,
                one,
                y_big.slice_mut(32..32 + yn)?,
            )?;
            let got = read(&stream, &y_big)?;
            let want15: Vec<f64> = want.iter().map(|v| 1.5 * v).collect();
            let sc15: Vec<f64> = sc.iter().map(|v| 2.0 * v).collect();
            compare(
                &format!("{name} forward beta=1"),
                seed,
                &got[32..32 + yn],
                &want15,
                &sc15,
                tol,
            )?;
        }
    }

    // Backward data.
    let bd = ConvProblem::backward_data(&xdesc, &wdesc, &conv)?;
    let mut dx = poisoned::<T>(count(&xs))?;
    let r = match search {
        AlgoSearch::Exhaustive => bd.plan_on(&mut h, &opts, &w, &dy, &mut dx),
        _ => bd.plan(&mut h, &opts),
    };
    if let Some(plan) = allow_unsupported(r, may_lack, &format!("{name} backward data"))? {
        check_math(plan.math_type(), "backward data")?;
        dx.copy_from_host(&vec![T::nan(); count(&xs)])?;
        let ran = plan.run(&mut h, one, &w, &dy, zero, &mut dx);
        // A run cuDNN refuses (NOT_SUPPORTED) where it may lack the layout.
        if allow_unsupported(ran, may_lack, &format!("{name} backward data run"))?.is_some() {
            let got = read(&stream, &dx)?;
            let want = refc::backward_data(&dy64, &ys, &w64, &ws, &xs, &p, rl)?;
            let sc = refc::backward_data(&abs(&dy64), &ys, &abs(&w64), &ws, &xs, &p, rl)?;
            compare(
                &format!("{name} backward data ({})", plan.algo()),
                seed,
                &got,
                &want,
                &sc,
                tol,
            )?;
        }
    }

    // Backward filter.
    let bf = ConvProblem::backward_filter(&xdesc, &wdesc, &conv)?;
    let mut dw = poisoned::<T>(count(&ws))?;
    let r = match search {
        AlgoSearch::Exhaustive => bf.plan_on(&mut h, &opts, &x, &dy, &mut dw),
        _ => bf.plan(&mut h, &opts),
    };
    if let Some(plan) = allow_unsupported(r, may_lack, &format!("{name} backward filter"))? {
        check_math(plan.math_type(), "backward filter")?;
        dw.copy_from_host(&vec![T::nan(); count(&ws)])?;
        let ran = plan.run(&mut h, one, &x, &dy, zero, &mut dw);
        // A run cuDNN refuses (NOT_SUPPORTED) where it may lack the layout.
        if allow_unsupported(ran, may_lack, &format!("{name} backward filter run"))?.is_some() {
            let got = read(&stream, &dw)?;
            let want = refc::backward_filter(&x64, &xs, &dy64, &ys, &ws, &p, rl)?;
            let sc = refc::backward_filter(&abs(&x64), &xs, &abs(&dy64), &ys, &ws, &p, rl)?;
            compare(
                &format!("{name} backward filter ({})", plan.algo()),
                seed,
                &got,
                &want,
                &sc,
                tol,
            )?;
        }
    }

    // Bias gradient. bf16 is refused typed before cuDNN, whose
    // cudnnConvolutionBackwardBias answers NOT_SUPPORTED for it in both
    // layouts (cuDNN 9.19, H100).
    if T::NAME == "bf16" {
        return match bf.backward_bias_plan() {
            Err(Error::Unsupported { what, .. }) if what.contains("bf16") => Ok(()),
            other => {
                Err(format!("{name} bias gradient: want Unsupported (bf16), got {other:?}").into())
            }
        };
    }
    let bias = bf.backward_bias_plan()?;
    let mut db = poisoned::<T>(case.k)?;
    let r = bias.run(&h, one, &dy, zero, &mut db);
    if allow_unsupported(r, may_lack, &format!("{name} bias gradient"))?.is_some() {
        let got = read(&stream, &db)?;
        let want = refc::backward_bias(&dy64, &ys, rl)?;
        let sc = refc::backward_bias(&abs(&dy64), &ys, rl)?;
        compare(
            &format!("{name} bias gradient"),
            seed,
            &got,
            &want,
            &sc,
            tol,
        )?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Fused convolution + bias + activation

fn fused_trial<T: Elem>(layout: TensorFormat) -> TestResult {
    let case = &cases()[0];
    let name = format!("fused {} {layout:?}", T::NAME);
    let seed = fresh_seed(&name);
    let mut rng = Lcg(seed);
    let Gpu { stream, mut h } = gpu_ctx()?;
    let may_lack = T::NAME == "f64" && layout == TensorFormat::Nhwc;
    let tol = tol::<T>(MathPolicy::Default);
    let (xdesc, wdesc, conv) = case.descs::<T>(layout)?;
    let (p, rl) = (case.params(), Layout::from(layout));
    let (xs, ws) = (case.x_dims(), case.w_dims());
    let fwd = ConvProblem::forward(&xdesc, &wdesc, &conv)?;
    let ys = fwd.output_shape().to_vec();
    let yn = count(&ys);
    let (xh, x64) = random::<T>(&mut rng, count(&xs));
    let (wh, w64) = random::<T>(&mut rng, count(&ws));
    let (zh, z64) = random::<T>(&mut rng, yn);
    let (bh, b64) = random::<T>(&mut rng, case.k);
    let x = DeviceBuffer::from_host(&xh)?;
    let w = DeviceBuffer::from_host(&wh)?;
    let z = DeviceBuffer::from_host(&zh)?;
    let b = DeviceBuffer::from_host(&bh)?;
    let (alpha1, alpha2) = (0.75, 0.5);
    let opts = PlanOptions::default().with_cache(CachePolicy::Off);
    let mut paths = Vec::new();
    for mode in [
        ActivationMode::Relu,
        ActivationMode::Identity,
        ActivationMode::Tanh,
    ] {
        let act = ActivationDescriptor::new(mode, NanPropagation::Propagate)?;
        let r = fwd.plan_bias_activation(&mut h, &opts, &act);
        let Some(mut plan) = allow_unsupported(r, may_lack, &format!("{name} {mode:?}"))? else {
            continue;
        };
        if mode == ActivationMode::Tanh {
            ensure!(
                plan.path() == FusedPath::Fallback,
                "{name}: tanh must take the fallback"
            );
            ensure!(
                matches!(
                    plan.set_path(FusedPath::Fused),
                    Err(Error::Unsupported { .. })
                ),
                "{name}: tanh cannot be set to the fused path"
            );
        } else {
            // ReLU is planned fused with any algorithm; both ReLU and
            // identity try IMPLICIT_PRECOMP_GEMM first, which every f32/f16
            // channels-first 2-d convolution has.
            let plain = matches!(T::NAME, "f32" | "f16") && layout == TensorFormat::Nchw;
            if mode == ActivationMode::Relu || plain {
                ensure!(
                    plan.path() == FusedPath::Fused,
                    "{name} {mode:?}: planned {:?} ({})",
                    plan.path(),
                    plan.conv_plan().algo()
                );
            }
            if plain {
                ensure!(
                    plan.conv_plan().algo() == ConvAlgo::IMPLICIT_PRECOMP_GEMM,
                    "{name} {mode:?}: planned {}",
                    plan.conv_plan().algo()
                );
            }
        }
        for forced in [false, true] {
            if forced {
                plan.set_path(FusedPath::Fallback)?;
            }
            for residual in ["none", "input", "output"] {
                let mut y = match residual {
                    "output" => DeviceBuffer::from_host(&zh)?,
                    _ => poisoned::<T>(yn)?,
                };
                let res = match residual {
                    "none" => Residual::None,
                    "input" => Residual::Input {
                        scale: scale::<T>(alpha2),
                        z: z.as_slice(),
                    },
                    _ => Residual::Output {
                        scale: scale::<T>(alpha2),
                    },
                };
                let ran = plan.run(&mut h, scale::<T>(alpha1), &x, &w, res, &b, &mut y)?;
                if forced {
                    ensure!(
                        ran == FusedPath::Fallback,
                        "{name}: forced fallback ran {ran:?}"
                    );
                }
                paths.push((mode, residual, ran));
                let got = read(&stream, &y)?;
                let with_z = residual != "none";
                let epi = BiasActivation {
                    alpha1,
                    z: with_z.then_some(z64.as_slice()),
                    alpha2: if with_z { alpha2 } else { 0.0 },
                    bias: &b64,
                    activation: mode,
                };
                let (want, _) = refc::bias_activation_forward(&x64, &xs, &w64, &ws, &p, rl, &epi)?;
                let (xa, wa, za, ba) = (abs(&x64), abs(&w64), abs(&z64), abs(&b64));
                let abs_epi = BiasActivation {
                    alpha1,
                    z: with_z.then_some(za.as_slice()),
                    alpha2: if with_z { alpha2 } else { 0.0 },
                    bias: &ba,
                    activation: ActivationMode::Identity,
                };
                let (sc, _) = refc::bias_activation_forward(&xa, &xs, &wa, &ws, &p, rl, &abs_epi)?;
                compare(
                    &format!(
                        "{name} {mode:?} residual {residual} ({ran:?}, {})",
                        plan.conv_plan().algo()
                    ),
                    seed,
                    &got,
                    &want,
                    &sc,
                    tol,
                )?;
            }
        }
    }
    eprintln!("{name}: paths {paths:?}");
    // The fused path must really run for the plain f32/f16 channels-first
    // ReLU and identity (the caller's activation propagates NaN; the fused
    // descriptor does not, as cuDNN requires), with every residual form.
    if matches!(T::NAME, "f32" | "f16") && layout == TensorFormat::Nchw {
        for mode in [ActivationMode::Relu, ActivationMode::Identity] {
            for residual in ["none", "input", "output"] {
                ensure!(
                    paths.contains(&(mode, residual, FusedPath::Fused)),
                    "{name}: {mode:?} with residual {residual} never ran fused: {paths:?}"
                );
            }
        }
    }
    Ok(())
}

mod plans;
use plans::*;

// ---------------------------------------------------------------------------

pub fn main() {
    let mut trials = Vec::new();
    let layouts = [TensorFormat::Nchw, TensorFormat::Nhwc];
    let searches = [AlgoSearch::Heuristic, AlgoSearch::Exhaustive];
    for c in cases() {
        for layout in layouts {
            for search in searches {
                let tag = |t: &str| {
                    format!(
                        "conv_{}_{t}_{}_{}",
                        c.name,
                        if layout == TensorFormat::Nchw {
                            "nchw"
                        } else {
                            "nhwc"
                        },
                        if search == AlgoSearch::Heuristic {
                            "heuristic"
                        } else {
                            "exhaustive"
                        }
                    )
                };
                let cc = c.clone();
                trials.push(gpu(&tag("f32"), move || {
                    conv_trial::<f32>(&cc, layout, search, MathPolicy::Default)
                }));
                let cc = c.clone();
                trials.push(gpu(&tag("tf32"), move || {
                    conv_trial::<f32>(&cc, layout, search, MathPolicy::AllowTf32)
                }));
                let cc = c.clone();
                trials.push(gpu(&tag("f64"), move || {
                    conv_trial::<f64>(&cc, layout, search, MathPolicy::Default)
                }));
                let cc = c.clone();
                trials.push(gpu(&tag("f16"), move || {
                    conv_trial::<f16>(&cc, layout, search, MathPolicy::Default)
                }));
                let cc = c.clone();
                trials.push(gpu(&tag("bf16"), move || {
                    conv_trial::<bf16>(&cc, layout, search, MathPolicy::Default)
                }));
            }
        }
    }
    for layout in layouts {
        let l = if layout == TensorFormat::Nchw {
            "nchw"
        } else {
            "nhwc"
        };
        trials.push(gpu(&format!("fused_bias_activation_f32_{l}"), move || {
            fused_trial::<f32>(layout)
        }));
        trials.push(gpu(&format!("fused_bias_activation_f64_{l}"), move || {
            fused_trial::<f64>(layout)
        }));
        trials.push(gpu(&format!("fused_bias_activation_f16_{l}"), move || {
            fused_trial::<f16>(layout)
        }));
        trials.push(gpu(&format!("fused_bias_activation_bf16_{l}"), move || {
            fused_trial::<bf16>(layout)
        }));
    }
    trials.push(gpu(
        "second_identical_plan_hits_the_cache",
        cache_hit_on_second_plan,
    ));
    trials.push(gpu("deterministic_f32_nchw_bitwise_equal", || {
        deterministic_runs_are_bitwise_equal::<f32>(TensorFormat::Nchw)
    }));
    trials.push(gpu("deterministic_f16_nhwc_bitwise_equal", || {
        deterministic_runs_are_bitwise_equal::<f16>(TensorFormat::Nhwc)
    }));
    trials.push(gpu(
        "caller_workspace_limits_and_refusals",
        caller_workspace_and_limits,
    ));
    trials.push(gpu(
        "exhaustive_search_sizes_workspace_to_the_choice",
        exhaustive_search_sizes_workspace_to_choice,
    ));
    run(trials)
}
