//! `cargo run -p cudnn-examples --features cudarc --example cudarc_interop`:
//! this crate on memory and a stream that cudarc owns, as a cudarc-based
//! framework (candle, burn) would hand them in.
//!
//! With a GPU: tensors allocated and filled with cudarc on a cudarc stream;
//! a fused convolution + bias + ReLU graph and an SDPA forward graph run
//! through this crate on that stream, and a cuBLASLt GEMM with a bias
//! epilogue; results read back with cudarc and compared with the f64
//! reference (`cudnn::reference`). Exit status 1 when a result is outside
//! its bound.
//!
//! Without one: says what it would run, shows that the interop answers a
//! missing driver with a typed error (cudarc alone panics), and plans both
//! graphs for an H200 (deviceless planning). Exit status 0.

use std::process::ExitCode;
use std::sync::Arc;

use cudnn::blas::{Epilogue, EpilogueArgs, Layout, LtHandle, MatmulSpec, PlanCache};
use cudnn::dnn::Handle;
use cudnn::graph::{
    ConvParams, DType, Graph, Plan, Policy, SdpaConfig, SdpaImpl, Target, TensorSpec,
};
use cudnn::interop::cudarc::driver::{CudaSlice, CudaStream, DriverError};
use cudnn::interop::{self, CudarcStream};
use cudnn::reference::attention as ra;
use cudnn::reference::conv::{self as refc, Layout as RefLayout};
use cudnn::reference::gemm::{self as refg, max_relative_error};
use half::{bf16, f16};

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

// The convolution: x [N, C, H, H] * w [K, C, 3, 3], pad 1, + bias[K], ReLU.
const N: i64 = 2;
const C: i64 = 16;
const K: i64 = 32;
const H: i64 = 16;

fn conv_graph() -> cudnn::Result<Graph> {
    let mut g = Graph::new();
    let x = g.input("x", TensorSpec::nhwc(DType::F16, &[N, C, H, H])?)?;
    let w = g.input("w", TensorSpec::nhwc(DType::F16, &[K, C, 3, 3])?)?;
    let b = g.input("bias", TensorSpec::nhwc(DType::F16, &[1, K, 1, 1])?)?;
    let y = g.conv_fprop(x, w, &ConvParams::new_2d([1, 1], [1, 1], [1, 1]))?;
    let y = g.bias(y, b)?;
    let y = g.relu(y)?;
    g.output(y, DType::F16)?;
    g.rename(y, "y")?;
    Ok(g)
}

/// Inference attention: batch 2, 4 heads, sequence 128, head dim 64, bf16,
/// causal, BSHD storage.
fn sdpa_config() -> SdpaConfig {
    SdpaConfig::new(2, 4, 128, 64, DType::BF16)
        .causal(true)
        .training(false)
        .implementation(SdpaImpl::Auto)
}

fn sdpa_graph(cfg: &SdpaConfig) -> cudnn::Result<Graph> {
    let mut g = Graph::new();
    let q = g.input("q", cfg.q_spec()?)?;
    let k = g.input("k", cfg.k_spec()?)?;
    let v = g.input("v", cfg.v_spec()?)?;
    let f = g.sdpa_forward(q, k, v, cfg)?;
    g.rename(f.o, "o")?;
    Ok(g)
}

fn plan(g: &Graph, target: &Target, what: &str) -> cudnn::Result<Plan> {
    let (plan, report) = Plan::build(&g.build()?, target, &Policy::default())?;
    println!(
        "{what}: engine {:?} of {} candidates, workspace {} B",
        report.chosen,
        report.candidates.len(),
        plan.workspace_size()
    );
    Ok(plan)
}

/// Deterministic values in [-1, 1) (exact in bf16 and f16).
fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            bf16::from_f64(((s >> 33) as f64 / (1u64 << 31) as f64) * 2.0 - 1.0).to_f64()
        })
        .collect()
}

fn de(call: &'static str) -> impl Fn(DriverError) -> cudnn::Error {
    move |e| interop::driver_error(call, e)
}

fn report(name: &str, err: f64, bound: f64) -> bool {
    let ok = err <= bound;
    println!(
        "{name:<48} max relative error {err:.2e} (bound {bound:.0e}) {}",
        if ok { "ok" } else { "FAILED" }
    );
    ok
}

/// Upload through cudarc (a framework's tensor storage).
fn up16(cs: &Arc<CudaStream>, v: &[f64]) -> cudnn::Result<CudaSlice<f16>> {
    let h: Vec<f16> = v.iter().map(|&x| f16::from_f64(x)).collect();
    cs.clone_htod(&h).map_err(de("clone_htod"))
}

fn conv_on(
    cs: &Arc<CudaStream>,
    s: &CudarcStream,
    h: &mut Handle,
    target: &Target,
) -> AnyResult<bool> {
    let plan = plan(&conv_graph()?, target, "conv + bias + relu")?;
    let dims = |d: [i64; 4]| d.map(|v| v as usize);
    let (x, w, b) = (
        values((N * C * H * H) as usize, 1),
        values((K * C * 9) as usize, 2),
        values(K as usize, 3),
    );
    let nhwc = |v: &[f64], d: [usize; 4]| {
        refc::convert_layout(v, &d, RefLayout::ChannelsFirst, RefLayout::ChannelsLast)
    };
    let cx = up16(cs, &nhwc(&x, dims([N, C, H, H]))?)?;
    let cw = up16(cs, &nhwc(&w, dims([K, C, 3, 3]))?)?;
    let cb = up16(cs, &b)?;
    let mut cy = up16(cs, &vec![f64::NAN; (N * K * H * H) as usize])?;
    {
        // cudarc's DevicePtr guards, bound to the plan for this run.
        // SAFETY: the views go to ops on handles bound to `s` only; the guards drop at the block's end.
        let (xr, wr, br, mut yw) =
            unsafe { (s.read(&cx)?, s.read(&cw)?, s.read(&cb)?, s.write(&mut cy)?) };
        let mut bind = plan.bindings();
        bind.input("x", &xr)?
            .input("w", &wr)?
            .input("bias", &br)?
            .output("y", &mut yw)?;
        plan.execute(h, &mut bind)?;
    }
    let got: Vec<f64> = cs
        .clone_dtoh(&cy)
        .map_err(de("clone_dtoh"))?
        .into_iter()
        .map(f16::to_f64)
        .collect();
    let got = refc::convert_layout(
        &got,
        &dims([N, K, H, H]),
        RefLayout::ChannelsLast,
        RefLayout::ChannelsFirst,
    )?;
    let p = refc::ConvParams::new(2).with_pad(&[1, 1]);
    let (conv, _) = refc::forward(
        &x,
        &dims([N, C, H, H]),
        &w,
        &dims([K, C, 3, 3]),
        &p,
        RefLayout::ChannelsFirst,
    )?;
    let hw = (H * H) as usize;
    let want: Vec<f64> = conv
        .iter()
        .enumerate()
        .map(|(i, v)| (v + b[(i / hw) % K as usize]).max(0.0))
        .collect();
    Ok(report(
        "graph conv+bias+relu f16 (cudarc memory)",
        max_relative_error(&got, &want),
        1e-2,
    ))
}

fn view<'a>(data: &'a [f64], spec: &TensorSpec) -> ra::View<'a> {
    let (d, s) = (spec.dims(), spec.strides());
    let u = |v: &[i64]| [v[0] as usize, v[1] as usize, v[2] as usize, v[3] as usize];
    ra::View::new(data, u(d), u(s))
}

/// Storage order to packed BHSD, as the reference returns.
fn to_bhsd(v: &[f64], spec: &TensorSpec) -> Vec<f64> {
    let (d, s) = (spec.dims(), spec.strides());
    let mut o = Vec::with_capacity(v.len());
    for b in 0..d[0] {
        for h in 0..d[1] {
            for i in 0..d[2] {
                for t in 0..d[3] {
                    o.push(v[(b * s[0] + h * s[1] + i * s[2] + t * s[3]) as usize]);
                }
            }
        }
    }
    o
}

fn sdpa_on(
    cs: &Arc<CudaStream>,
    s: &CudarcStream,
    h: &mut Handle,
    target: &Target,
) -> AnyResult<bool> {
    let cfg = sdpa_config();
    let plan = plan(&sdpa_graph(&cfg)?, target, "sdpa forward")?;
    let (qs, ks, vs, os) = (cfg.q_spec()?, cfg.k_spec()?, cfg.v_spec()?, cfg.o_spec()?);
    let (q, k, v) = (
        values(qs.span_elements()?, 4),
        values(ks.span_elements()?, 5),
        values(vs.span_elements()?, 6),
    );
    let up = |v: &[f64]| -> cudnn::Result<CudaSlice<bf16>> {
        let h: Vec<bf16> = v.iter().map(|&x| bf16::from_f64(x)).collect();
        cs.clone_htod(&h).map_err(de("clone_htod"))
    };
    let (cq, ck, cv) = (up(&q)?, up(&k)?, up(&v)?);
    let mut co = up(&vec![f64::NAN; os.span_elements()?])?;
    {
        // SAFETY: the views go to ops on handles bound to `s` only; the guards drop at the block's end.
        let (qr, kr, vr, mut ow) =
            unsafe { (s.read(&cq)?, s.read(&ck)?, s.read(&cv)?, s.write(&mut co)?) };
        let mut bind = plan.bindings();
        bind.input("q", &qr)?
            .input("k", &kr)?
            .input("v", &vr)?
            .output("o", &mut ow)?;
        plan.execute(h, &mut bind)?;
    }
    let o: Vec<f64> = cs
        .clone_dtoh(&co)
        .map_err(de("clone_dtoh"))?
        .into_iter()
        .map(bf16::to_f64)
        .collect();
    let mut rc = ra::SdpaConfig::new(cfg.scale_value());
    rc.causal = ra::CausalMask::TopLeft;
    let want = ra::forward(&view(&q, &qs), &view(&k, &ks), &view(&v, &vs), &rc)?;
    let got = to_bhsd(&o, &os);
    let err = got
        .iter()
        .zip(&want.o)
        .map(|(g, w)| {
            let e = (g - w).abs() / w.abs().max(1.0);
            if e.is_nan() { f64::INFINITY } else { e }
        })
        .fold(0.0, f64::max);
    Ok(report(
        "graph sdpa forward bf16 causal (cudarc memory)",
        err,
        3e-2,
    ))
}

fn lt_on(cs: &Arc<CudaStream>, s: &CudarcStream) -> AnyResult<bool> {
    let lt = LtHandle::new(s)?;
    let (tokens, d_in, d_out) = (128, 256, 512);
    let spec = MatmulSpec::new(
        Layout::row_major(tokens, d_in),
        Layout::row_major(d_out, d_in).t(),
        Layout::row_major(tokens, d_out),
    )
    .with_epilogue(Epilogue::ReluBias);
    let (x, w, b) = (
        values(tokens * d_in, 7),
        values(d_out * d_in, 8)
            .iter()
            .map(|v| v * 0.1)
            .collect::<Vec<_>>(),
        values(d_out, 9),
    );
    let (cx, cw, cb) = (up16(cs, &x)?, up16(cs, &w)?, up16(cs, &b)?);
    let mut cy = up16(cs, &vec![f64::NAN; tokens * d_out])?;
    let plans = PlanCache::<f16, f16>::new();
    {
        // SAFETY: the views go to ops on handles bound to `s` only; the guards drop at the block's end.
        let (xr, wr, br, mut yw) =
            unsafe { (s.read(&cx)?, s.read(&cw)?, s.read(&cb)?, s.write(&mut cy)?) };
        plans.get_or_create(&lt, &spec)?.run(
            &lt,
            1.0,
            &xr,
            &wr,
            0.0,
            &mut yw,
            EpilogueArgs::none().bias(&br),
        )?;
    }
    let got: Vec<f64> = cs
        .clone_dtoh(&cy)
        .map_err(de("clone_dtoh"))?
        .into_iter()
        .map(f16::to_f64)
        .collect();
    let (la, lb, ly) = spec.layouts();
    let mut want = vec![0.0; tokens * d_out];
    refg::matmul(
        1.0,
        &x,
        &la,
        &w,
        &lb,
        0.0,
        &mut want,
        &ly,
        Epilogue::ReluBias,
        Some(&b),
        None,
    )?;
    Ok(report(
        "cuBLASLt f16 relu(X·Wᵀ + b) (cudarc memory)",
        max_relative_error(&got, &want),
        1e-2,
    ))
}

fn on_gpu() -> AnyResult<bool> {
    let ctx = interop::context(0)?;
    let cs = ctx.new_stream().map_err(de("new_stream"))?;
    let s = CudarcStream::new(&cs)?;
    println!(
        "cudarc stream on device {} bound as {:?}",
        ctx.ordinal(),
        s.stream()
    );
    let mut h = Handle::new(&s)?;
    let target = Target::device(0)?;
    let mut ok = conv_on(&cs, &s, &mut h, &target)?;
    ok &= sdpa_on(&cs, &s, &mut h, &target)?;
    ok &= lt_on(&cs, &s)?;
    Ok(ok)
}

fn plan_only() -> AnyResult<()> {
    println!("no GPU here: nothing is executed.");
    match interop::context(0) {
        Ok(_) => println!("(a cudarc context opened, but the CUDA runtime sees no device)"),
        Err(e) => println!("cudarc without a driver, through cudnn::interop: typed error: {e}"),
    }
    println!(
        "on a GPU it would: allocate x, w, bias, q, k, v with cudarc on a cudarc stream; run \
         conv+bias+relu (f16 NHWC {N}x{C}x{H}x{H} * {K}x{C}x3x3) and a causal bf16 SDPA forward \
         through cuDNN graphs, and relu(X·Wᵀ + b) through cuBLASLt, all on that stream with \
         cudarc's DevicePtr guards; read back with cudarc; compare with the f64 reference"
    );
    let target = Target::preset("h200")?;
    println!("planning for {}:", target.fingerprint());
    plan(&conv_graph()?, &target, "conv + bias + relu")?;
    let cfg = sdpa_config();
    match cfg.check(false) {
        Ok(()) => {
            plan(&sdpa_graph(&cfg)?, &target, "sdpa forward")?;
        }
        Err(e) => println!("sdpa forward: not with this cuDNN ({e})"),
    }
    Ok(())
}

fn main() -> ExitCode {
    let gpu = matches!(cudnn::runtime::Device::count(), Ok(n) if n > 0);
    let r = if gpu {
        on_gpu().inspect(|&ok| {
            if ok {
                println!("every result through cudarc memory agrees with the f64 reference");
            }
        })
    } else {
        plan_only().map(|()| true)
    };
    match r {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("cudarc_interop: {e}");
            ExitCode::FAILURE
        }
    }
}
