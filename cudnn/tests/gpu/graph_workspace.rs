//! GPU tier (skipped visibly without a device, a failure under
//! `CUDNN_RS_REQUIRE_GPU=1`): a training step's forward and backward plans
//! share one handle, and their `Bindings` are reused for three steps. The
//! backward needs more workspace than the forward (and the handle's
//! workspace is grown again after every step), so the handle reallocates
//! its workspace between runs: every run must use the workspace the handle
//! holds then, never a freed one. Each step's outputs are poisoned first and
//! checked against the f64 reference (`cudnn::reference::conv`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use cudnn::dnn::Handle;
use cudnn::graph::*;
use cudnn::reference::conv::{self as refc, Layout};
use cudnn::reference::gemm::max_relative_error;
use cudnn::runtime::{DeviceBuffer, DeviceSlice, DeviceSliceMut, Stream};
use support::*;

fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) as f64 / (1u64 << 31) as f64 * 2.0 - 1.0) as f32
        })
        .collect()
}

fn check(label: &str, got: &[f32], want: &[f64]) -> TestResult {
    let got: Vec<f64> = got.iter().map(|&v| f64::from(v)).collect();
    let err = max_relative_error(&got, want);
    eprintln!("  {label}: max relative error {err:.2e}");
    ensure!(!err.is_nan() && err <= 1e-4, "{label}: error {err:e}");
    Ok(())
}

fn forward_and_backward_share_a_handle() -> TestResult {
    let (xd, wd) = ([2usize, 8, 9, 9], [16usize, 8, 3, 3]);
    let rp = refc::ConvParams::new(2)
        .with_pad(&[1, 1])
        .with_stride(&[2, 2]);
    let yd = rp.output_shape(&xd, &wd)?;
    let p = ConvParams::new_2d([1, 1], [2, 2], [1, 1]);
    let i64s = |d: &[usize]| d.iter().map(|&v| v as i64).collect::<Vec<_>>();
    let n = |d: &[usize]| d.iter().product::<usize>();
    let spec = |d: &[usize]| TensorSpec::nchw(DType::F32, &i64s(d));
    let target = Target::device(0)?;

    let mut gf = Graph::new();
    let (x, w) = (gf.input("x", spec(&xd)?)?, gf.input("w", spec(&wd)?)?);
    let y = gf.conv_fprop(x, w, &p)?;
    gf.output(y, DType::F32)?;
    gf.rename(y, "y")?;
    let mut gb = Graph::new();
    let (x, dy) = (gb.input("x", spec(&xd)?)?, gb.input("dy", spec(&yd)?)?);
    let dw = gb.conv_wgrad(x, dy, &i64s(&wd), &p)?;
    gb.output(dw, DType::F32)?;
    gb.rename(dw, "dw")?;
    let (fwd, _) = Plan::build(&gf.build()?, &target, &Policy::default())?;
    let (bwd, _) = Plan::build(&gb.build()?, &target, &Policy::default())?;
    eprintln!(
        "  workspace: forward {} B, backward {} B",
        fwd.workspace_size(),
        bwd.workspace_size()
    );

    let stream = Stream::new()?;
    let mut handle = Handle::new(&stream)?;
    let mut xb = DeviceBuffer::<f32>::zeroed(n(&xd))?;
    let mut wb = DeviceBuffer::<f32>::zeroed(n(&wd))?;
    let mut dyb = DeviceBuffer::<f32>::zeroed(n(&yd))?;
    let mut yb = DeviceBuffer::<f32>::zeroed(n(&yd))?;
    let mut dwb = DeviceBuffer::<f32>::zeroed(n(&wd))?;
    // Views the bindings hold for all three steps, while the test rewrites
    // the inputs and reads the outputs between steps through the buffers.
    // SAFETY: each buffer outlives the views (dropped at the end of this
    // function, after the bindings); the host writes and reads happen only
    // after `stream.synchronize()`, when no run uses the memory.
    let (xv, wv, dyv, yv, dwv) = unsafe {
        (
            DeviceSlice::<f32>::from_raw_parts(xb.as_raw().cast(), xb.len()),
            DeviceSlice::<f32>::from_raw_parts(wb.as_raw().cast(), wb.len()),
            DeviceSlice::<f32>::from_raw_parts(dyb.as_raw().cast(), dyb.len()),
            DeviceSliceMut::<f32>::from_raw_parts_mut(yb.as_raw_mut().cast(), yb.len()),
            DeviceSliceMut::<f32>::from_raw_parts_mut(dwb.as_raw_mut().cast(), dwb.len()),
        )
    };
    let xv2 = xv;
    let mut fb = fwd.bindings();
    fb.input("x", xv)?.input("w", wv)?.output("y", yv)?;
    let mut bb = bwd.bindings();
    bb.input("x", xv2)?.input("dy", dyv)?.output("dw", dwv)?;

    for step in 0..3u64 {
        let (x, w, dy) = (
            data(n(&xd), 10 * step + 1),
            data(n(&wd), 10 * step + 2),
            data(n(&yd), 10 * step + 3),
        );
        xb.copy_from_host(&x)?;
        wb.copy_from_host(&w)?;
        dyb.copy_from_host(&dy)?;
        yb.memset(0xff)?; // NaN
        dwb.memset(0xff)?;
        fwd.execute(&mut handle, &mut fb)?;
        bwd.execute(&mut handle, &mut bb)?;
        // Grow the handle's workspace (a reallocation): the next step's runs
        // must look it up again.
        let grow = handle.workspace_size() + (1 << 20);
        handle.reserve_workspace(grow)?;
        stream.synchronize()?;
        let to64 = |v: &[f32]| v.iter().map(|&a| f64::from(a)).collect::<Vec<_>>();
        let (x64, w64, dy64) = (to64(&x), to64(&w), to64(&dy));
        let want_y = refc::forward(&x64, &xd, &w64, &wd, &rp, Layout::ChannelsFirst)?.0;
        let want_dw =
            refc::backward_filter(&x64, &xd, &dy64, &yd, &wd, &rp, Layout::ChannelsFirst)?;
        check(&format!("step {step} forward"), &yb.to_vec()?, &want_y)?;
        check(&format!("step {step} backward"), &dwb.to_vec()?, &want_dw)?;
    }
    eprintln!(
        "  variant packs built: forward {}, backward {} (rebuilt when the workspace moved)",
        fb.packs_built(),
        bb.packs_built()
    );
    if fwd.workspace_size() > 0 {
        ensure!(fb.packs_built() == 3, "forward packs {}", fb.packs_built());
    }
    if bwd.workspace_size() > 0 {
        ensure!(bb.packs_built() == 3, "backward packs {}", bb.packs_built());
    }
    drop((fb, bb));
    Ok(())
}

/// A plan built for another architecture than the handle's device: a typed
/// error before cuDNN is called.
fn plan_for_another_architecture_is_refused() -> TestResult {
    let here = Target::device(0)?.properties().device_ver();
    let other = if here == 800 { "h200" } else { "a100" };
    let mut g = Graph::new();
    let x = g.input("x", TensorSpec::nchw(DType::F32, &[1, 8, 8, 8])?)?;
    let w = g.input("w", TensorSpec::nchw(DType::F32, &[8, 8, 3, 3])?)?;
    let y = g.conv_fprop(x, w, &ConvParams::new_2d([1, 1], [1, 1], [1, 1]))?;
    g.output(y, DType::F32)?;
    g.rename(y, "y")?;
    let (plan, _) = Plan::build(&g.build()?, &Target::preset(other)?, &Policy::default())?;
    let stream = Stream::new()?;
    let mut handle = Handle::new(&stream)?;
    let xb = DeviceBuffer::<f32>::zeroed(512)?;
    let wb = DeviceBuffer::<f32>::zeroed(576)?;
    let mut yb = DeviceBuffer::<f32>::zeroed(512)?;
    let mut b = plan.bindings();
    b.input("x", xb.as_slice())?
        .input("w", wb.as_slice())?
        .output("y", yb.as_slice_mut())?;
    match plan.execute(&mut handle, &mut b) {
        Err(cudnn::Error::Unsupported { what, .. }) => {
            eprintln!("  {what}");
            ensure!(what.contains("sm"), "{what}");
            Ok(())
        }
        r => Err(format!("a plan for {other} ran on sm{}: {r:?}", here / 10).into()),
    }
}

pub fn main() {
    run(vec![
        gpu(
            "graph_plans_share_a_handle_workspace_across_steps",
            forward_and_backward_share_a_handle,
        ),
        gpu(
            "graph_plan_for_another_architecture_is_refused",
            plan_for_another_architecture_is_refused,
        ),
    ])
}
