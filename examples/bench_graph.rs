//! Graph API costs, as a table (a program, not a timed test):
//!
//! 1. per graph: planning (graph build + heuristics + finalize), loading
//!    the plan from its serialized form, and, on a GPU, host time per
//!    execute (the hot path: one `cudnnBackendExecute`);
//! 2. on the host: our typed layer against the raw C sequence (the same
//!    descriptor calls through `cudnn-sys` directly), for building and
//!    finalizing a conv operation graph and for loading a plan, in one run,
//!    as a ratio.
//!
//!     cargo run --release --example bench_graph [-- --iters N]

use std::ffi::c_void;
use std::sync::Arc;
use std::time::Instant;

use cudnn::graph::{ConvParams, DType, Graph, Plan, Policy, Target, TensorSpec};
use cudnn::sys::cudnn as sys;
use sys::cudnnBackendAttributeName_t as A;
use sys::cudnnBackendAttributeType_t as T;
use sys::cudnnBackendDescriptorType_t as D;

fn conv() -> cudnn::Result<Graph> {
    let mut g = Graph::new();
    let x = g.input("x", TensorSpec::nhwc(DType::F16, &[32, 64, 56, 56])?)?;
    let w = g.input("w", TensorSpec::nhwc(DType::F16, &[64, 64, 3, 3])?)?;
    let y = g.conv_fprop(x, w, &ConvParams::new_2d([1, 1], [1, 1], [1, 1]))?;
    g.output(y, DType::F16)?;
    Ok(g)
}

fn conv_bias_relu() -> cudnn::Result<Graph> {
    let mut g = Graph::new();
    let x = g.input("x", TensorSpec::nhwc(DType::F16, &[32, 64, 56, 56])?)?;
    let w = g.input("w", TensorSpec::nhwc(DType::F16, &[64, 64, 3, 3])?)?;
    let b = g.input("b", TensorSpec::nhwc(DType::F16, &[1, 64, 1, 1])?)?;
    let y = g.conv_fprop(x, w, &ConvParams::new_2d([1, 1], [1, 1], [1, 1]))?;
    let y = g.bias(y, b)?;
    let y = g.relu(y)?;
    g.output(y, DType::F16)?;
    Ok(g)
}

fn matmul_gelu() -> cudnn::Result<Graph> {
    let mut g = Graph::new();
    let a = g.input("a", TensorSpec::row_major(DType::BF16, &[8, 512, 1024])?)?;
    let b = g.input("b", TensorSpec::row_major(DType::BF16, &[8, 1024, 1024])?)?;
    let c = g.matmul(a, b)?;
    let c = g.gelu_erf(c)?;
    g.output(c, DType::BF16)?;
    Ok(g)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn time<R>(iters: usize, mut f: impl FnMut() -> cudnn::Result<R>) -> cudnn::Result<f64> {
    let mut v = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        f()?;
        v.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok(median(v))
}

fn main() {
    if let Err(e) = run() {
        eprintln!("bench_graph: {e}");
        std::process::exit(1);
    }
}

fn run() -> cudnn::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let iters = args
        .iter()
        .position(|a| a == "--iters")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(50usize);
    let gpu = cudnn::runtime::Device::count().is_ok_and(|n| n > 0);
    let target = if gpu {
        Target::device(0)?
    } else {
        Target::preset("h200")?
    };
    println!(
        "target {}; {}",
        target.fingerprint(),
        if gpu {
            "GPU present"
        } else {
            "no GPU: execute column not run"
        }
    );
    println!();
    println!("| graph | plan (first, ms) | plan load (us) | JSON bytes | execute host (us) |");
    println!("|---|---|---|---|---|");
    for (name, g) in [
        ("conv f16 NHWC", conv()?),
        ("conv+bias+relu f16", conv_bias_relu()?),
        ("matmul+gelu bf16", matmul_gelu()?),
    ] {
        let t0 = Instant::now();
        let (plan, _) = Plan::build(&g.build()?, &target, &Policy::default())?;
        let plan_ms = t0.elapsed().as_secs_f64() * 1e3;
        let json = plan.cudnn_json()?;
        let io = Arc::new(plan.io().clone());
        // JSON this program just made (matmul+gelu carries code).
        let load_us = time(iters.min(20), || {
            // SAFETY: cuDNN's JSON of the plan just built for this tensor
            // list, unchanged.
            unsafe { Plan::from_cudnn_json_unverified(&json, &target, io.clone()) }
        })?;
        let exec = if gpu {
            format!("{:.1}", execute_host_us(&plan, iters)?)
        } else {
            "not run".to_string()
        };
        println!(
            "| {name} | {plan_ms:.1} | {load_us:.0} | {} | {exec} |",
            json.len()
        );
    }
    println!();
    println!("Typed layer against the raw C sequence (same calls), median of {iters}:");
    println!();
    println!("| step | ours (us) | raw (us) | ratio |");
    println!("|---|---|---|---|");
    let ours = time(iters, || conv()?.build())?;
    let raw = time(iters, raw_conv_graph)?;
    println!(
        "| build + finalize conv op graph | {ours:.1} | {raw:.1} | {:.2} |",
        ours / raw
    );
    let (plan, _) = Plan::build(&conv()?.build()?, &target, &Policy::default())?;
    let json = plan.cudnn_json()?;
    let io = Arc::new(plan.io().clone());
    let ours = time(iters, || {
        // SAFETY: cuDNN's JSON of the plan just built for this tensor list,
        // unchanged.
        unsafe { Plan::from_cudnn_json_unverified(&json, &target, io.clone()) }
    })?;
    let raw = time(iters, || raw_load(&json, target.properties().json()))?;
    println!(
        "| load a conv plan from JSON | {ours:.1} | {raw:.1} | {:.2} |",
        ours / raw
    );
    Ok(())
}

fn execute_host_us(plan: &Plan, iters: usize) -> cudnn::Result<f64> {
    use cudnn::runtime::{DeviceBuffer, Stream};
    let stream = Stream::new()?;
    let handle = cudnn::dnn::Handle::new(&stream)?;
    let mut bufs = Vec::new();
    let mut ptrs = Vec::new();
    for t in &plan.io().tensors {
        let mut b = DeviceBuffer::<u8>::zeroed(t.spec.span_bytes()?)?;
        ptrs.push((t.uid, b.as_raw_mut()));
        bufs.push(b);
    }
    let mut ws = DeviceBuffer::<u8>::zeroed(plan.workspace_size().max(1))?;
    let wsp = ws.as_raw_mut();
    // SAFETY: every pointer is a live buffer of its tensor's span; the
    // stream is synchronized before the buffers are dropped.
    let run = || unsafe { plan.execute_raw(handle.as_raw(), &ptrs, wsp, plan.workspace_size()) };
    run()?;
    stream.synchronize()?;
    let mut v = Vec::new();
    for _ in 0..iters {
        let t = Instant::now();
        run()?;
        v.push(t.elapsed().as_secs_f64() * 1e6);
        stream.synchronize()?;
    }
    drop(bufs);
    Ok(median(v))
}

/// Check a raw status.
fn ok(api: &sys::Cudnn, st: sys::cudnnStatus_t, what: &str) -> cudnn::Result<()> {
    if api.normalize_status(st) == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(cudnn::Error::invalid(what, "raw call failed", st.0))
    }
}

struct Raw<'a>(&'a sys::Cudnn, sys::cudnnBackendDescriptor_t);
impl Drop for Raw<'_> {
    fn drop(&mut self) {
        // SAFETY: created by cudnnBackendCreateDescriptor, destroyed once.
        let _ = unsafe { self.0.cudnnBackendDestroyDescriptor(self.1) };
    }
}

fn create<'a>(api: &'a sys::Cudnn, ty: D) -> cudnn::Result<Raw<'a>> {
    let mut d = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    let st = unsafe { api.cudnnBackendCreateDescriptor(ty, &mut d) }?;
    ok(api, st, "create")?;
    Ok(Raw(api, d))
}

/// # Safety
/// `V` must be the C type that `t` names.
unsafe fn set<V>(api: &sys::Cudnn, d: &Raw<'_>, a: A, t: T, v: &[V]) -> cudnn::Result<()> {
    // SAFETY: `v` holds v.len() values of the C type `t` names (the caller's contract).
    let st = unsafe {
        api.cudnnBackendSetAttribute(d.1, a, t, v.len() as i64, v.as_ptr() as *const c_void)
    }?;
    ok(api, st, "set")
}

fn fin(api: &sys::Cudnn, d: &Raw<'_>) -> cudnn::Result<()> {
    // SAFETY: a live descriptor.
    let st = unsafe { api.cudnnBackendFinalize(d.1) }?;
    ok(api, st, "finalize")
}

fn raw_tensor<'a>(api: &'a sys::Cudnn, dims: [i64; 4], uid: i64) -> cudnn::Result<Raw<'a>> {
    let t = create(api, D::CUDNN_BACKEND_TENSOR_DESCRIPTOR)?;
    let [n, c, h, w] = dims;
    let strides = [h * w * c, 1, w * c, c];
    let dt = sys::cudnnDataType_t::CUDNN_DATA_HALF;
    // SAFETY: each value array is of the C type its attribute type names.
    unsafe {
        set(
            api,
            &t,
            A::CUDNN_ATTR_TENSOR_DATA_TYPE,
            T::CUDNN_TYPE_DATA_TYPE,
            &[dt],
        )?
    };
    // SAFETY: each value array is of the C type its attribute type names.
    unsafe {
        set(
            api,
            &t,
            A::CUDNN_ATTR_TENSOR_DIMENSIONS,
            T::CUDNN_TYPE_INT64,
            &[n, c, h, w],
        )?
    };
    // SAFETY: each value array is of the C type its attribute type names.
    unsafe {
        set(
            api,
            &t,
            A::CUDNN_ATTR_TENSOR_STRIDES,
            T::CUDNN_TYPE_INT64,
            &strides,
        )?
    };
    // SAFETY: each value array is of the C type its attribute type names.
    unsafe {
        set(
            api,
            &t,
            A::CUDNN_ATTR_TENSOR_UNIQUE_ID,
            T::CUDNN_TYPE_INT64,
            &[uid],
        )?
    };
    // SAFETY: each value array is of the C type its attribute type names.
    unsafe {
        set(
            api,
            &t,
            A::CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT,
            T::CUDNN_TYPE_INT64,
            &[16i64],
        )?
    };
    fin(api, &t)?;
    Ok(t)
}

/// The conv graph of `conv()` built with direct C calls.
fn raw_conv_graph() -> cudnn::Result<()> {
    let api = sys::load()?;
    let x = raw_tensor(api, [32, 64, 56, 56], 1)?;
    let w = raw_tensor(api, [64, 64, 3, 3], 2)?;
    let y = raw_tensor(api, [32, 64, 56, 56], 3)?;
    let c = create(api, D::CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR)?;
    // SAFETY: each value array is of the C type its attribute type names.
    unsafe {
        set(
            api,
            &c,
            A::CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS,
            T::CUDNN_TYPE_INT64,
            &[2i64],
        )?
    };
    // SAFETY: each value array is of the C type its attribute type names.
    unsafe {
        set(
            api,
            &c,
            A::CUDNN_ATTR_CONVOLUTION_COMP_TYPE,
            T::CUDNN_TYPE_DATA_TYPE,
            &[sys::cudnnDataType_t::CUDNN_DATA_FLOAT],
        )?
    };
    // SAFETY: each value array is of the C type its attribute type names.
    unsafe {
        set(
            api,
            &c,
            A::CUDNN_ATTR_CONVOLUTION_CONV_MODE,
            T::CUDNN_TYPE_CONVOLUTION_MODE,
            &[sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION],
        )?
    };
    // SAFETY: each value array is of the C type its attribute type names.
    unsafe {
        set(
            api,
            &c,
            A::CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS,
            T::CUDNN_TYPE_INT64,
            &[1i64, 1],
        )?
    };
    // SAFETY: each value array is of the C type its attribute type names.
    unsafe {
        set(
            api,
            &c,
            A::CUDNN_ATTR_CONVOLUTION_POST_PADDINGS,
            T::CUDNN_TYPE_INT64,
            &[1i64, 1],
        )?
    };
    // SAFETY: each value array is of the C type its attribute type names.
    unsafe {
        set(
            api,
            &c,
            A::CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES,
            T::CUDNN_TYPE_INT64,
            &[1i64, 1],
        )?
    };
    // SAFETY: each value array is of the C type its attribute type names.
    unsafe {
        set(
            api,
            &c,
            A::CUDNN_ATTR_CONVOLUTION_DILATIONS,
            T::CUDNN_TYPE_INT64,
            &[1i64, 1],
        )?
    };
    fin(api, &c)?;
    let op = create(
        api,
        D::CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
    )?;
    let bd = T::CUDNN_TYPE_BACKEND_DESCRIPTOR;
    // SAFETY: each value array is of the C type its attribute type names.
    unsafe {
        set(
            api,
            &op,
            A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
            bd,
            &[x.1],
        )?
    };
    // SAFETY: each value array is of the C type its attribute type names.
    unsafe {
        set(
            api,
            &op,
            A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
            bd,
            &[w.1],
        )?
    };
    // SAFETY: each value array is of the C type its attribute type names.
    unsafe {
        set(
            api,
            &op,
            A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
            bd,
            &[y.1],
        )?
    };
    // SAFETY: each value array is of the C type its attribute type names.
    unsafe {
        set(
            api,
            &op,
            A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
            bd,
            &[c.1],
        )?
    };
    // SAFETY: each value array is of the C type its attribute type names.
    unsafe {
        set(
            api,
            &op,
            A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
            T::CUDNN_TYPE_DOUBLE,
            &[1.0f64],
        )?
    };
    // SAFETY: each value array is of the C type its attribute type names.
    unsafe {
        set(
            api,
            &op,
            A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
            T::CUDNN_TYPE_DOUBLE,
            &[0.0f64],
        )?
    };
    fin(api, &op)?;
    let g = create(api, D::CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)?;
    // SAFETY: each value array is of the C type its attribute type names.
    unsafe { set(api, &g, A::CUDNN_ATTR_OPERATIONGRAPH_OPS, bd, &[op.1])? };
    fin(api, &g)
}

fn raw_load(json: &str, props_json: &str) -> cudnn::Result<()> {
    let api = sys::load()?;
    let p = create(api, D::CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR)?;
    let mut pj = props_json.as_bytes().to_vec();
    pj.push(0);
    // SAFETY: each value array is of the C type its attribute type names.
    unsafe {
        set(
            api,
            &p,
            A::CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION,
            T::CUDNN_TYPE_CHAR,
            &pj,
        )?
    };
    fin(api, &p)?;
    let plan = create(api, D::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR)?;
    // SAFETY: each value array is of the C type its attribute type names.
    unsafe {
        set(
            api,
            &plan,
            A::CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP,
            T::CUDNN_TYPE_BACKEND_DESCRIPTOR,
            &[p.1],
        )?
    };
    let mut j = json.as_bytes().to_vec();
    j.push(0);
    // SAFETY: each value array is of the C type its attribute type names.
    unsafe {
        set(
            api,
            &plan,
            A::CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION,
            T::CUDNN_TYPE_CHAR,
            &j,
        )?
    };
    fin(api, &plan)
}
