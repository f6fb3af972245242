//! The graph-API half of `bench_conv` (included with `#[path]`): each case
//! and direction again through `cudnn::graph` (`conv_fprop`, `conv_dgrad`,
//! `conv_wgrad`), autotuned as PyTorch's `cudnn.benchmark = True` does:
//! every engine configuration cuDNN's heuristics (mode A, then the fallback
//! list) offer and the policy accepts is built and timed on the device, and
//! the fastest is kept (`Plan::autotune`). The chosen plan is then timed on
//! the benchmark's own buffers like the legacy rows.
//!
//! Policy, like PyTorch's `filterEngineConfigs`: engines that down-convert
//! their inputs are left out; TF32 (tensor cores on f32 data) is allowed
//! exactly when the legacy rows allow it. Unlike PyTorch, engines that
//! declare a reduced-precision reduction are left out too (the crate's
//! `allow_reduced_precision` covers both notes).

use std::time::Instant;

use cudnn::dnn::{Handle, TensorFormat};
use cudnn::graph::heuristics::candidates;
use cudnn::graph::{ConvParams, DType, Graph, OpGraph, Plan, Policy, Target, TensorSpec};
use cudnn::runtime::{DeviceBuffer, Stream};

use super::{AnyResult, Elem, Layer, Timing, time};

/// The three directions, in table order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    Fwd,
    BwdData,
    BwdFilter,
}

impl Dir {
    pub const ALL: [Dir; 3] = [Dir::Fwd, Dir::BwdData, Dir::BwdFilter];

    /// The table's direction column.
    pub fn label(self) -> &'static str {
        match self {
            Dir::Fwd => "fwd (graph)",
            Dir::BwdData => "bwd data (graph)",
            Dir::BwdFilter => "bwd filter (graph)",
        }
    }

    /// The CSV `op` key: the legacy key with `_graph` after it
    /// (`compare_torch.py` pairs both with one PyTorch row).
    pub fn op_key(self) -> &'static str {
        match self {
            Dir::Fwd => "fwd_graph",
            Dir::BwdData => "bwd_data_graph",
            Dir::BwdFilter => "bwd_filter_graph",
        }
    }
}

/// What one graph row measured.
pub struct GraphResult {
    /// `engine E (config #P; timed M of N accepted)`: the chosen plan's
    /// engine and position among the plans built, how many plans were timed
    /// and how many configurations the policy accepted.
    pub detail: String,
    pub workspace: usize,
    pub timing: Timing,
    /// Wall time of building and timing the candidates, ms.
    pub tune_ms: f64,
}

/// The autotuning policy: at most `attempts` candidates (`usize::MAX`:
/// every accepted one, as PyTorch times every plan it builds), TF32 as
/// `tf32`.
pub fn policy(tf32: bool, attempts: usize) -> Policy {
    Policy::default()
        .with_allow_tf32(tf32)
        .with_max_attempts(attempts)
}

fn i64s(v: &[usize]) -> AnyResult<Vec<i64>> {
    v.iter()
        .map(|&d| i64::try_from(d).map_err(|_| format!("dim {d} over i64::MAX").into()))
        .collect()
}

fn spec(dtype: DType, dims: &[i64], layout: TensorFormat) -> cudnn::Result<TensorSpec> {
    match layout {
        TensorFormat::Nhwc => TensorSpec::nhwc(dtype, dims),
        TensorFormat::Nchw => TensorSpec::nchw(dtype, dims),
    }
}

/// The op graph of one direction of `layer`, tensors named as the legacy
/// rows' buffers: fprop `x`, `w` -> `y`; dgrad `dy`, `w` -> `dx`; wgrad
/// `x`, `dy` -> `dw`. Filters share the activations' layout (KRSC for NHWC).
pub fn op_graph(layer: &Layer, dtype: DType, layout: TensorFormat, dir: Dir) -> AnyResult<OpGraph> {
    let (xd, wd) = (i64s(&layer.x_dims())?, i64s(&layer.w_dims())?);
    let params = ConvParams::new(
        &i64s(layer.pad)?,
        &i64s(layer.stride)?,
        &i64s(layer.dilation)?,
    );
    let yd = params.output_dims("bench_conv", &xd, &wd)?;
    let mut g = Graph::new();
    let out = match dir {
        Dir::Fwd => {
            let x = g.input("x", spec(dtype, &xd, layout)?)?;
            let w = g.input("w", spec(dtype, &wd, layout)?)?;
            let y = g.conv_fprop(x, w, &params)?;
            (y, "y")
        }
        Dir::BwdData => {
            let dy = g.input("dy", spec(dtype, &yd, layout)?)?;
            let w = g.input("w", spec(dtype, &wd, layout)?)?;
            (g.conv_dgrad(dy, w, &xd, &params)?, "dx")
        }
        Dir::BwdFilter => {
            let x = g.input("x", spec(dtype, &xd, layout)?)?;
            let dy = g.input("dy", spec(dtype, &yd, layout)?)?;
            (g.conv_wgrad(x, dy, &wd, &params)?, "dw")
        }
    };
    g.output(out.0, dtype)?;
    g.rename(out.0, out.1)?;
    Ok(g.build()?)
}

/// The buffers of one case (the legacy rows' own).
pub struct Bufs<'a, T: Elem> {
    pub x: &'a DeviceBuffer<T>,
    pub w: &'a DeviceBuffer<T>,
    pub dy: &'a DeviceBuffer<T>,
    pub y: &'a mut DeviceBuffer<T>,
    pub dx: &'a mut DeviceBuffer<T>,
    pub dw: &'a mut DeviceBuffer<T>,
}

/// Autotune one direction, then time the chosen plan on `b`.
#[allow(clippy::too_many_arguments)]
pub fn bench_dir<T: Elem>(
    h: &mut Handle,
    stream: &Stream,
    target: &Target,
    policy: &Policy,
    graph: &OpGraph,
    dir: Dir,
    b: &mut Bufs<'_, T>,
    runs: usize,
) -> AnyResult<GraphResult> {
    // How many configurations the policy accepts (heuristics only, no
    // plan built): the detail says how many of them were timed.
    let accepted = candidates(graph, target, policy)?
        .iter()
        .filter(|c| c.rejected.is_none())
        .count();
    let t0 = Instant::now();
    let (plan, timings) = Plan::autotune_timed(graph, target, policy, h, 3)?;
    let tune_ms = t0.elapsed().as_secs_f64() * 1e3;
    let engine = plan
        .engine()
        .map_or_else(|| "engine ?".to_string(), |e| format!("engine {e}"));
    let fastest = timings
        .iter()
        .min_by(|a, b| a.median_ms.total_cmp(&b.median_ms))
        .map_or_else(|| "?".to_string(), |t| t.position.to_string());
    let detail = format!(
        "{engine} (config #{fastest}; timed {} of {accepted} accepted)",
        timings.len()
    );
    let workspace = plan.workspace_size();
    let mut bind = plan.bindings();
    match dir {
        Dir::Fwd => {
            bind.input("x", b.x)?
                .input("w", b.w)?
                .output("y", &mut *b.y)?;
        }
        Dir::BwdData => {
            bind.input("dy", b.dy)?
                .input("w", b.w)?
                .output("dx", &mut *b.dx)?;
        }
        Dir::BwdFilter => {
            bind.input("x", b.x)?
                .input("dy", b.dy)?
                .output("dw", &mut *b.dw)?;
        }
    }
    let timing = time(stream, runs, || plan.execute(h, &mut bind))?;
    Ok(GraphResult {
        detail,
        workspace,
        timing,
        tune_ms,
    })
}

/// `--plan-only`: no device needed. Build every case's graph, ask cuDNN's
/// heuristics for `target` and finalize every accepted plan up to the
/// policy's attempts (what `Plan::autotune` builds before it times them),
/// and print one line per case: candidates offered, how many the policy
/// accepts, plans built, the heuristics' first engine, and the host time
/// of the whole build (the part of a GPU run's tuning that is not timing).
/// Returns how many cases failed to plan.
pub fn plan_only(
    cases: &[(&'static Layer, DType, TensorFormat)],
    target: &Target,
    policy: &Policy,
) -> usize {
    println!(
        "planning only, for {} (no device needed)\n",
        target.fingerprint()
    );
    println!(
        "| layer | config | direction | candidates | accepted | plans built | first engine | workspace MiB | build ms |"
    );
    println!("|---|---|---|---:|---:|---:|---|---:|---:|");
    let all = Instant::now();
    let mut failed = 0;
    for &(layer, dtype, layout) in cases {
        for dir in Dir::ALL {
            let config = format!("{layout:?} {}", dtype.name());
            let t0 = Instant::now();
            let built = op_graph(layer, dtype, layout, dir)
                .and_then(|g| Plan::build_all(&g, target, policy).map_err(Into::into));
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            match built {
                Ok((plans, report)) => {
                    let accepted = report
                        .candidates
                        .iter()
                        .filter(|c| !c.contains("rejected"))
                        .count();
                    let ws = plans.first().map_or(0, Plan::workspace_size);
                    println!(
                        "| {} | {config} | {} | {} | {accepted} | {} | {} | {:.1} | {ms:.0} |",
                        layer.name,
                        dir.label(),
                        report.candidates.len(),
                        plans.len(),
                        report
                            .chosen
                            .map_or_else(|| "?".to_string(), |e| e.to_string()),
                        ws as f64 / (1 << 20) as f64
                    );
                }
                Err(e) => {
                    failed += 1;
                    let first = e.to_string();
                    let first = first.lines().next().unwrap_or_default().replace('|', "/");
                    println!(
                        "| {} | {config} | {} | | | | failed: {first} | | {ms:.0} |",
                        layer.name,
                        dir.label()
                    );
                }
            }
        }
    }
    println!(
        "\nplanned {} cases in {:.1} s",
        cases.len() * 3,
        all.elapsed().as_secs_f64()
    );
    failed
}
