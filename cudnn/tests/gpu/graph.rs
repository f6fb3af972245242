//! GPU tier for the graph API (skipped visibly without a device, a failure
//! under `CUDNN_RS_REQUIRE_GPU=1`): graphs planned for the live device,
//! executed, and compared with f64 references computed here from the
//! definitions (convolution from `cudnn::reference::conv`; matmul,
//! pointwise and reduction by direct loops). Outputs are poisoned with NaN
//! first; a NaN never passes. Bounds: f32 1e-5, f16/bf16 1e-2, relative to
//! the largest reference magnitude.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::sync::Arc;

use cudnn::dnn::Handle;
use cudnn::graph::*;
use cudnn::reference::conv::{self as refc, Layout};
use cudnn::reference::gemm::max_relative_error;
use cudnn::runtime::{DeviceBuffer, Stream};
use half::{bf16, f16};
use support::*;

trait Elem: cudnn::DataType {
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
    fn nan() -> Self;
    const TOL: f64;
}
impl Elem for f32 {
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn nan() -> Self {
        f32::NAN
    }
    const TOL: f64 = 1e-5;
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
    const TOL: f64 = 1e-2;
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
    const TOL: f64 = 1e-2;
}

/// Deterministic values in [-1, 1], rounded to `T`.
fn data<T: Elem>(n: usize, seed: u64) -> Vec<f64> {
    lcg_values(n, seed)
        .into_iter()
        .map(|v| T::from_f64(v).to_f64())
        .collect()
}

/// Logical row-major values -> strided storage of `spec`.
fn to_storage(logical: &[f64], spec: &TensorSpec) -> Vec<f64> {
    let mut out = vec![0.0; spec.span_elements().unwrap()];
    for (i, v) in logical.iter().enumerate() {
        out[offset(i, spec)] = *v;
    }
    out
}

fn from_storage(stored: &[f64], spec: &TensorSpec) -> Vec<f64> {
    let n = spec.element_count() as usize;
    (0..n).map(|i| stored[offset(i, spec)]).collect()
}

fn offset(mut i: usize, spec: &TensorSpec) -> usize {
    let mut off = 0;
    for (&d, &s) in spec.dims().iter().zip(spec.strides()).rev() {
        off += (i % d as usize) * s as usize;
        i /= d as usize;
    }
    off
}

/// Execute `plan` with logical inputs (by name) and return every output (logical order).
fn execute<T: Elem>(
    plan: &Plan,
    inputs: &[(&str, Vec<f64>)],
) -> Result<Vec<(String, Vec<f64>)>, libtest_mimic::Failed> {
    let stream = Stream::new()?;
    let mut handle = Handle::new(&stream)?;
    let mut bufs: Vec<(IoTensor, DeviceBuffer<T>)> = Vec::new();
    for t in &plan.io().tensors {
        let span = t.spec.span_elements()?;
        let host: Vec<T> = if t.is_output {
            vec![T::nan(); span]
        } else {
            let v = &inputs
                .iter()
                .find(|(n, _)| *n == t.name)
                .ok_or(format!("no input {}", t.name))?
                .1;
            to_storage(v, &t.spec)
                .into_iter()
                .map(T::from_f64)
                .collect()
        };
        bufs.push((t.clone(), DeviceBuffer::from_host(&host)?));
    }
    {
        let mut b = plan.bindings();
        for (t, buf) in bufs.iter_mut() {
            if t.is_output {
                b.output(&t.name, buf.as_slice_mut())?;
            } else {
                b.input(&t.name, buf.as_slice())?;
            }
        }
        plan.execute(&mut handle, &mut b)?;
        // A second run reuses the variant pack (same pointers).
        plan.execute(&mut handle, &mut b)?;
    }
    stream.synchronize()?;
    let mut outs = Vec::new();
    for (t, buf) in &bufs {
        if t.is_output {
            let v: Vec<f64> = buf.to_vec()?.into_iter().map(T::to_f64).collect();
            outs.push((t.name.clone(), from_storage(&v, &t.spec)));
        }
    }
    Ok(outs)
}

fn target() -> Result<Target, libtest_mimic::Failed> {
    Ok(Target::device(0)?)
}

fn check(label: &str, got: &[f64], want: &[f64], tol: f64) -> TestResult {
    let err = max_relative_error(got, want);
    eprintln!("  {label}: max relative error {err:.2e} (bound {tol:.0e})");
    ensure!(
        !err.is_nan() && err <= tol,
        "{label}: error {err:e} over {tol:e}"
    );
    Ok(())
}

fn conv_case<T: Elem>(dtype: DType, nhwc: bool, dir: ConvDirection) -> TestResult {
    let (xd, wd) = ([2usize, 8, 9, 9], [16usize, 8, 3, 3]);
    let p = ConvParams::new_2d([1, 1], [2, 2], [1, 1]);
    let rp = refc::ConvParams::new(2)
        .with_pad(&[1, 1])
        .with_stride(&[2, 2]);
    let yd = rp.output_shape(&xd, &wd)?;
    let i64s = |d: &[usize]| d.iter().map(|&v| v as i64).collect::<Vec<_>>();
    let spec = |d: &[usize]| {
        if nhwc {
            TensorSpec::nhwc(dtype, &i64s(d))
        } else {
            TensorSpec::nchw(dtype, &i64s(d))
        }
    };
    let n = |d: &[usize]| d.iter().product::<usize>();
    let mut g = Graph::new();
    let (x, w, dy) = (
        data::<T>(n(&xd), 1),
        data::<T>(n(&wd), 2),
        data::<T>(n(&yd), 3),
    );
    let (inputs, want) = match dir {
        ConvDirection::Fprop => {
            let xt = g.input("x", spec(&xd)?)?;
            let wt = g.input("w", spec(&wd)?)?;
            let y = g.conv_fprop(xt, wt, &p)?;
            g.output(y, dtype)?;
            g.rename(y, "out")?;
            (
                vec![("x", x.clone()), ("w", w.clone())],
                refc::forward(&x, &xd, &w, &wd, &rp, Layout::ChannelsFirst)?.0,
            )
        }
        ConvDirection::Dgrad => {
            let dyt = g.input("dy", spec(&yd)?)?;
            let wt = g.input("w", spec(&wd)?)?;
            let dx = g.conv_dgrad(dyt, wt, &i64s(&xd), &p)?;
            g.output(dx, dtype)?;
            g.rename(dx, "out")?;
            (
                vec![("dy", dy.clone()), ("w", w.clone())],
                refc::backward_data(&dy, &yd, &w, &wd, &xd, &rp, Layout::ChannelsFirst)?,
            )
        }
        ConvDirection::Wgrad => {
            let xt = g.input("x", spec(&xd)?)?;
            let dyt = g.input("dy", spec(&yd)?)?;
            let dw = g.conv_wgrad(xt, dyt, &i64s(&wd), &p)?;
            g.output(dw, dtype)?;
            g.rename(dw, "out")?;
            (
                vec![("x", x.clone()), ("dy", dy.clone())],
                refc::backward_filter(&x, &xd, &dy, &yd, &wd, &rp, Layout::ChannelsFirst)?,
            )
        }
    };
    let (plan, report) = Plan::build(&g.build()?, &target()?, &Policy::default())?;
    eprintln!(
        "  engine {:?}, {} candidates",
        report.chosen,
        report.candidates.len()
    );
    let got = execute::<T>(&plan, &inputs)?;
    check(
        &format!("{dir:?} {dtype} nhwc={nhwc}"),
        &got[0].1,
        &want,
        T::TOL,
    )
}

/// conv + bias + relu, NHWC.
fn conv_bias_relu<T: Elem>(dtype: DType) -> TestResult {
    let (xd, wd) = ([2usize, 16, 8, 8], [16usize, 16, 3, 3]);
    let rp = refc::ConvParams::new(2).with_pad(&[1, 1]);
    let i64s = |d: &[usize]| d.iter().map(|&v| v as i64).collect::<Vec<_>>();
    let mut g = Graph::new();
    let xt = g.input("x", TensorSpec::nhwc(dtype, &i64s(&xd))?)?;
    let wt = g.input("w", TensorSpec::nhwc(dtype, &i64s(&wd))?)?;
    let bt = g.input("bias", TensorSpec::nhwc(dtype, &[1, 16, 1, 1])?)?;
    let y = g.conv_fprop(xt, wt, &ConvParams::new_2d([1, 1], [1, 1], [1, 1]))?;
    let y = g.bias(y, bt)?;
    let y = g.relu(y)?;
    g.output(y, dtype)?;
    g.rename(y, "y")?;
    let (x, w, b) = (
        data::<T>(2 * 16 * 64, 4),
        data::<T>(16 * 16 * 9, 5),
        data::<T>(16, 6),
    );
    let (conv, yd) = refc::forward(&x, &xd, &w, &wd, &rp, Layout::ChannelsFirst)?;
    let hw = yd[2] * yd[3];
    let want: Vec<f64> = conv
        .iter()
        .enumerate()
        .map(|(i, v)| (v + b[(i / hw) % 16]).max(0.0))
        .collect();
    let (plan, _) = Plan::build(&g.build()?, &target()?, &Policy::default())?;
    let got = execute::<T>(&plan, &[("x", x), ("w", w), ("bias", b)])?;
    check(&format!("conv+bias+relu {dtype}"), &got[0].1, &want, T::TOL)
}

fn matmul_ref(
    a: &[f64],
    b: &[f64],
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    b_batched: bool,
) -> Vec<f64> {
    let mut c = vec![0.0; batch * m * n];
    for z in 0..batch {
        let bz = if b_batched { z } else { 0 };
        for i in 0..m {
            for j in 0..n {
                c[(z * m + i) * n + j] = (0..k)
                    .map(|p| a[(z * m + i) * k + p] * b[(bz * k + p) * n + j])
                    .sum();
            }
        }
    }
    c
}

/// matmul (+ bias + gelu), b optionally broadcast or transposed in storage.
fn matmul_case<T: Elem>(
    dtype: DType,
    broadcast: bool,
    transposed: bool,
    epilogue: bool,
) -> TestResult {
    let (batch, m, k, n) = (3usize, 32usize, 48usize, 40usize);
    let bb = if broadcast { 1 } else { batch };
    let mut g = Graph::new();
    let at = g.input(
        "a",
        TensorSpec::row_major(dtype, &[batch as i64, m as i64, k as i64])?,
    )?;
    let bspec = if transposed {
        TensorSpec::new(
            dtype,
            &[bb as i64, k as i64, n as i64],
            &[(k * n) as i64, 1, k as i64],
        )?
    } else {
        TensorSpec::row_major(dtype, &[bb as i64, k as i64, n as i64])?
    };
    let bt = g.input("b", bspec)?;
    let mut c = g.matmul(at, bt)?;
    let (a, b, bias) = (
        data::<T>(batch * m * k, 7),
        data::<T>(bb * k * n, 8),
        data::<T>(n, 9),
    );
    let mut want = matmul_ref(&a, &b, batch, m, k, n, !broadcast);
    let mut inputs = vec![("a", a), ("b", b)];
    if epilogue {
        let biast = g.input("bias", TensorSpec::row_major(dtype, &[1, 1, n as i64])?)?;
        c = g.bias(c, biast)?;
        c = g.gelu_erf(c)?;
        for (i, v) in want.iter_mut().enumerate() {
            *v = cudnn::reference::gelu::gelu_erf(*v + bias[i % n]);
        }
        inputs.push(("bias", bias));
    }
    g.output(c, dtype)?;
    let (plan, _) = Plan::build(&g.build()?, &target()?, &Policy::default())?;
    let got = execute::<T>(&plan, &inputs)?;
    check(
        &format!("matmul {dtype} bcast={broadcast} trans={transposed} epi={epilogue}"),
        &got[0].1,
        &want,
        T::TOL * (k as f64).sqrt(),
    )
}

fn pointwise_case(mode: Pointwise, f: fn(f64, f64) -> f64) -> TestResult {
    let shape = [2i64, 16, 64];
    let mut g = Graph::new();
    let x = g.input("x", TensorSpec::row_major(DType::F32, &shape)?)?;
    let (xs, bs) = (
        data::<f32>(2048, 10),
        data::<f32>(2048, 11)
            .iter()
            .map(|v| v + 1.5)
            .collect::<Vec<_>>(),
    );
    let mut inputs = vec![("x", xs.clone())];
    let y = match mode.arity() {
        Arity::Unary => g.pointwise(mode, &[x])?,
        Arity::Binary => {
            let b = g.input("b", TensorSpec::row_major(DType::F32, &shape)?)?;
            inputs.push(("b", bs.clone()));
            g.pointwise(mode, &[x, b])?
        }
        Arity::Backward => {
            let dy = g.input("b", TensorSpec::row_major(DType::F32, &shape)?)?;
            inputs.push(("b", bs.clone()));
            g.pointwise(mode, &[dy, x])?
        }
        Arity::Ternary => return Err("ternary not covered here".into()),
    };
    g.output(y, DType::F32)?;
    let want: Vec<f64> = xs.iter().zip(&bs).map(|(&x, &b)| f(x, b)).collect();
    let (plan, _) = Plan::build(&g.build()?, &target()?, &Policy::default())?;
    let got = execute::<f32>(&plan, &inputs)?;
    check(&format!("{mode:?}"), &got[0].1, &want, 1e-5)
}

pub fn main() {
    let mut t = vec![];
    for dir in [
        ConvDirection::Fprop,
        ConvDirection::Dgrad,
        ConvDirection::Wgrad,
    ] {
        t.push(gpu(&format!("conv_{dir:?}_f32_nchw"), move || {
            conv_case::<f32>(DType::F32, false, dir)
        }));
        t.push(gpu(&format!("conv_{dir:?}_f16_nhwc"), move || {
            conv_case::<f16>(DType::F16, true, dir)
        }));
        t.push(gpu(&format!("conv_{dir:?}_bf16_nhwc"), move || {
            conv_case::<bf16>(DType::BF16, true, dir)
        }));
    }
    t.push(gpu("conv_bias_relu_f16", || {
        conv_bias_relu::<f16>(DType::F16)
    }));
    t.push(gpu("conv_bias_relu_bf16", || {
        conv_bias_relu::<bf16>(DType::BF16)
    }));
    for (b, tr, e) in [
        (false, false, false),
        (true, false, false),
        (false, true, false),
        (false, false, true),
    ] {
        t.push(gpu(&format!("matmul_f16_b{b}_t{tr}_e{e}"), move || {
            matmul_case::<f16>(DType::F16, b, tr, e)
        }));
        t.push(gpu(&format!("matmul_bf16_b{b}_t{tr}_e{e}"), move || {
            matmul_case::<bf16>(DType::BF16, b, tr, e)
        }));
    }
    type Formula = fn(f64, f64) -> f64;
    let modes: Vec<(Pointwise, Formula)> = vec![
        (Pointwise::Add, |x, b| x + b),
        (Pointwise::Sub, |x, b| x - b),
        (Pointwise::Mul, |x, b| x * b),
        (Pointwise::Div, |x, b| x / b),
        (Pointwise::Max, |x, b| x.max(b)),
        (Pointwise::Min, |x, b| x.min(b)),
        (Pointwise::Relu, |x, _| x.max(0.0)),
        (Pointwise::Tanh, |x, _| x.tanh()),
        (Pointwise::Sigmoid, |x, _| 1.0 / (1.0 + (-x).exp())),
        (Pointwise::Exp, |x, _| x.exp()),
        (Pointwise::Abs, |x, _| x.abs()),
        (Pointwise::Neg, |x, _| -x),
        (Pointwise::GeluErf, |x, _| {
            cudnn::reference::gelu::gelu_erf(x)
        }),
        (Pointwise::ReluBwd, |x, dy| if x > 0.0 { dy } else { 0.0 }),
        (Pointwise::TanhBwd, |x, dy| dy * (1.0 - x.tanh().powi(2))),
    ];
    for (mode, f) in modes {
        t.push(gpu(&format!("pointwise_{mode:?}"), move || {
            pointwise_case(mode, f)
        }));
    }
    t.push(gpu("reduction_add_per_channel", || {
        let mut g = Graph::new();
        let x = g.input("x", TensorSpec::nhwc(DType::F32, &[4, 8, 6, 6])?)?;
        let r = g.reduction(Reduce::Add, x, &[1, 8, 1, 1])?;
        g.output(r, DType::F32)?;
        let xs = data::<f32>(4 * 8 * 36, 12);
        let want: Vec<f64> = (0..8)
            .map(|c| {
                (0..4)
                    .flat_map(|n| (0..36).map(move |s| (n, s)))
                    .map(|(n, s)| xs[(n * 8 + c) * 36 + s])
                    .sum()
            })
            .collect();
        let (plan, _) = Plan::build(&g.build()?, &target()?, &Policy::default())?;
        let got = execute::<f32>(&plan, &[("x", xs)])?;
        check("reduction add to [1,C,1,1]", &got[0].1, &want, 1e-5)
    }));
    t.push(gpu("host_planned_plan_executes", || {
        // Planned for the device's properties without touching it (as the
        // host tier does for a preset), serialized, reloaded, executed.
        let mut g = Graph::new();
        let x = g.input("x", TensorSpec::nhwc(DType::F16, &[2, 16, 8, 8])?)?;
        let y = g.relu(x)?;
        g.output(y, DType::F16)?;
        g.rename(y, "y")?;
        let props = DeviceProperties::from_device(0)?;
        eprintln!("  device properties JSON: {}", props.json());
        let offline = Target::json(props.json())?;
        let (plan, _) = Plan::build(&g.build()?, &offline, &Policy::default())?;
        // Signed by this test, so its compiled code loads without `unsafe`
        // and runs on the device.
        let key = PlanKey::generate()?;
        let text = plan.serialize_signed(&key)?;
        let loaded = Plan::deserialize(&text, &target()?, Trust::SignedBy(&key))?;
        ensure!(
            loaded.is_runtime_compiled() == plan.is_runtime_compiled(),
            "the signed reload lost its compiled code"
        );
        let xs = data::<f16>(2 * 16 * 64, 13);
        let want: Vec<f64> = xs.iter().map(|v| v.max(0.0)).collect();
        let got = execute::<f16>(&loaded, &[("x", xs)])?;
        check("relu from a reloaded plan", &got[0].1, &want, 1e-2)?;
        // The preset for this GPU, when it is one we have: the same path a CPU-only AOT build takes.
        for name in ["h200", "h100", "a100", "b200", "l4"] {
            let preset = Target::preset(name)?;
            if preset.properties().compatible(&props.fingerprint()) {
                let (p, _) = Plan::build(&g.build()?, &preset, &Policy::default())?;
                // SAFETY: cuDNN's JSON (plan file) of the plan built here for this tensor list, unchanged.
                let q = unsafe {
                    Plan::from_cudnn_json_unverified(
                        &p.cudnn_json()?,
                        &target()?,
                        Arc::new(p.io().clone()),
                    )
                }?;
                let xs = data::<f16>(2 * 16 * 64, 14);
                let want: Vec<f64> = xs.iter().map(|v| v.max(0.0)).collect();
                let got = execute::<f16>(&q, &[("x", xs)])?;
                check(
                    &format!("relu planned for preset {name}"),
                    &got[0].1,
                    &want,
                    1e-2,
                )?;
            }
        }
        Ok(())
    }));
    t.push(gpu("autotune_at_least_as_fast_as_heuristic_first", || {
        let mut g = Graph::new();
        let x = g.input("x", TensorSpec::nhwc(DType::F16, &[16, 64, 56, 56])?)?;
        let w = g.input("w", TensorSpec::nhwc(DType::F16, &[64, 64, 3, 3])?)?;
        let y = g.conv_fprop(x, w, &ConvParams::new_2d([1, 1], [1, 1], [1, 1]))?;
        g.output(y, DType::F16)?;
        let og = g.build()?;
        let stream = Stream::new()?;
        let mut handle = Handle::new(&stream)?;
        let policy = Policy::default().with_max_attempts(8);
        // A target of another architecture than the device: refused before
        // anything runs (Plan::autotune checks as execute does).
        let here = target()?.properties().device_ver();
        for name in ["a100", "h200", "b200"] {
            let other = Target::preset(name)?;
            if other.properties().device_ver() != here {
                match Plan::autotune(&og, &other, &policy, &mut handle, 1) {
                    Err(cudnn::Error::Unsupported { what, .. }) => eprintln!("  {name}: {what}"),
                    r => return Err(format!("autotune for {name}: {:?}", r.map(|_| ())).into()),
                }
                break;
            }
        }
        // The old API answers (engine, ms) for each plan timed.
        let (_, times) = Plan::autotune(&og, &target()?, &policy, &mut handle, 3)?;
        ensure!(!times.is_empty(), "no timings");
        // The chosen plan is the build_all plan at the fastest timing's
        // position (found here by a plain scan, the first of equals): its
        // cuDNN JSON (engine and knobs) is compared, not only its engine.
        let t = target()?;
        let (plans, _) = Plan::build_all(&og, &t, &policy)?;
        let (best, timed) = Plan::autotune_timed(&og, &t, &policy, &mut handle, 10)?;
        eprintln!("  timings: {timed:?}; chosen engine {:?}", best.engine());
        let mut fastest = 0;
        for (i, x) in timed.iter().enumerate() {
            if x.median_ms < timed[fastest].median_ms {
                fastest = i;
            }
        }
        let at = timed[fastest].position;
        let want = plans
            .get(at)
            .ok_or("fastest position past build_all's plans")?;
        ensure!(
            best.cudnn_json()? == want.cudnn_json()?,
            "chosen plan is not build_all's #{at} (the fastest timing {:?})",
            timed[fastest]
        );
        Ok(())
    }));
    // One engine often comes with several knob choices (on an H100, 30
    // configurations of one engine for this 1x1 bf16 convolution): the plan
    // autotune returns must be the fastest configuration, not the first of
    // the fastest engine. Its cuDNN JSON (engine and knobs) is compared with
    // the one of the plan build_all lists at the fastest timing's position.
    t.push(gpu("autotune_returns_the_fastest_configuration", || {
        let mut g = Graph::new();
        let x = g.input("x", TensorSpec::nhwc(DType::BF16, &[32, 64, 56, 56])?)?;
        let w = g.input("w", TensorSpec::nhwc(DType::BF16, &[256, 64, 1, 1])?)?;
        let y = g.conv_fprop(x, w, &ConvParams::new_2d([0, 0], [1, 1], [1, 1]))?;
        g.output(y, DType::BF16)?;
        let og = g.build()?;
        let stream = Stream::new()?;
        let mut handle = Handle::new(&stream)?;
        let (t, policy) = (target()?, Policy::default().with_max_attempts(64));
        let (plans, _) = Plan::build_all(&og, &t, &policy)?;
        let (best, timed) = Plan::autotune_timed(&og, &t, &policy, &mut handle, 5)?;
        let mut fastest = 0;
        for (i, x) in timed.iter().enumerate() {
            if x.median_ms < timed[fastest].median_ms {
                fastest = i;
            }
        }
        let engines: Vec<Option<i64>> = plans.iter().map(Plan::engine).collect();
        eprintln!(
            "  {} plans ({} timed), engines {engines:?}; fastest {:?}",
            plans.len(),
            timed.len(),
            timed[fastest]
        );
        // Each timing names its plan's position (plans that failed their
        // first run are skipped without shifting the others).
        for x in &timed {
            let p = plans
                .get(x.position)
                .ok_or("position past build_all's plans")?;
            ensure!(
                p.engine() == x.engine,
                "timing {x:?} against plan engine {:?}",
                p.engine()
            );
        }
        let at = timed[fastest].position;
        ensure!(
            best.cudnn_json()? == plans[at].cudnn_json()?,
            "autotune returned another configuration than its fastest (#{at}, engine {:?})",
            timed[fastest].engine
        );
        Ok(())
    }));
    run(t)
}
