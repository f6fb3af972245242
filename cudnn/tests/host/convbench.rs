//! Host tier (no GPU): `bench_conv`'s graph-API rows and the device
//! check's PyTorch comparison.
//!
//! - The CSV rows bench_conv writes (through the examples' own writer,
//!   `examples/bench_csv.rs`) for one conv case through the legacy API and
//!   through the graph API are read by `xtask/device/compare_torch.py`,
//!   paired with ONE PyTorch measurement (its builder runs once per case),
//!   and the report's rates and ratios are the hand-computed ones. Needs
//!   `python3` (skipped, visibly, without it); PyTorch itself is stubbed.
//! - The graph convolutions bench_conv autotunes on the GPU (the example's
//!   own `op_graph` through `bench_conv --plan-only --quick`: grouped,
//!   dilated, depthwise, 3-d, NHWC bf16 and NCHW f32, all three directions)
//!   are accepted by the real cuDNN's heuristics for an H100 and finalize;
//!   by default every accepted configuration is built (and so timed).
//! - bench_conv's timing loop has `time_case`'s length.
use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

use cudnn::graph::*;
use support::*;

use bench_conv::bench_csv::{Csv, CsvRow};

/// `resnet50 1x1 @56` as bench_conv writes its `shape` column.
const SHAPE: &str =
    "n=32;c=64;k=256;spatial=56x56;window=1x1;pad=0x0;stride=1x1;dilation=1x1;groups=1";

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../xtask/device/compare_torch.py")
}

fn python() -> Option<String> {
    let py = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_string());
    let ok = Command::new(&py)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(py)
}

fn row<'a>(op: &'a str, dtype: &'a str, device_us: Option<f64>, detail: &str) -> CsvRow<'a> {
    CsvRow {
        suite: "conv",
        case: "resnet50 1x1 @56",
        op,
        shape: SHAPE.to_string(),
        dtype,
        layout: "NHWC",
        metric: "TFLOP/s",
        // 2 GFLOP a call: 100 µs is 20 TFLOP/s.
        work: 2e9,
        device_us,
        host_us: device_us.map(|_| 10.0),
        detail: detail.to_string(),
    }
}

/// The Python side: read the CSV, run the PyTorch loop with a stub PyTorch
/// (every case 50 µs; the builders count their calls), write the report,
/// and check the TF32 switch conv_case sets for `tf32` and `f32` rows.
const CHECK: &str = r#"
import json, sys, time, types
sys.path.insert(0, sys.argv[1])
import compare_torch as ct

class Any:
    """A permissive stand-in for torch: every attribute and call is another."""
    def __getattr__(self, name):
        v = Any()
        object.__setattr__(self, name, v)
        return v
    def __call__(self, *a, **k):
        return Any()
    def __sub__(self, other):
        return Any()

calls = []
def builder(torch, row, device):
    calls.append((row["suite"], row["op"], row["dtype"]))
    return lambda: None
ct.BUILDERS = {"conv": builder, "gemm": builder}
ct.time_case = lambda torch, fn, ours_us: (50.0, 7.0)
rows, notes = ct.read_rows([sys.argv[2]])
ct.run_torch(Any(), rows, None, time.monotonic(), {})
ct.write_report(sys.argv[3], rows, notes, [], {}, True)

tf32, legacy_tf32 = {}, {}
for dtype in ("tf32", "f32"):
    fake = Any()
    ct.conv_case(fake, dict(rows[0], dtype=dtype), None)
    tf32[dtype] = fake.backends.cudnn.conv.fp32_precision
    # PyTorch before 2.9: no fp32_precision anywhere, only allow_tf32
    # (plain objects, so hasattr answers as that PyTorch would).
    old = Any()
    ns = types.SimpleNamespace
    object.__setattr__(old, "backends", ns(
        cuda=ns(matmul=ns(allow_tf32="untouched")), cudnn=ns(allow_tf32="untouched")))
    ct.conv_case(old, dict(rows[0], dtype=dtype), None)
    legacy_tf32[dtype] = [old.backends.cudnn.allow_tf32, hasattr(old.backends.cudnn, "conv"),
                          old.backends.cuda.matmul.allow_tf32]
print(json.dumps({
    "calls": calls,
    "pairs": [[p[0]["op"] if p[0] else None, p[1]["op"] if p[1] else None,
               p[0]["dtype"] if p[0] and p[1] and p[0]["dtype"] == p[1]["dtype"] else "mixed"]
              for p in ct.conv_pairs(rows)],
    "torch_us": {r["op"] + "/" + r["dtype"]: r["torch_us"] for r in rows},
    "labels": [ct.op_label(r) for r in rows],
    "tf32": tf32,
    "legacy_tf32": legacy_tf32,
}))
"#;

fn graph_rows_pair_with_pytorch() -> TestResult {
    let Some(py) = python() else {
        return Err("python3 not found (set PYTHON)".into());
    };
    let dir = std::env::temp_dir().join(format!("cudnn-convbench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (csv_path, md) = (dir.join("conv.csv"), dir.join("compare.md"));
    let mut csv = Csv::create(Some(&csv_path))?;
    // Legacy then graph, as bench_conv writes them: fwd at 100 and 25 µs,
    // bwd data at 200 µs (legacy) and failed (graph).
    csv.row(&row("fwd", "bf16", Some(100.0), "IMPLICIT_GEMM"))?;
    csv.row(&row("bwd_data", "bf16", Some(200.0), "ALGO_1"))?;
    csv.row(&row(
        "fwd_graph",
        "bf16",
        Some(25.0),
        "engine 62 (config #5; timed 35 of 35 accepted), tuned in 80 ms",
    ))?;
    csv.row(&row(
        "bwd_data_graph",
        "bf16",
        None,
        "unsupported: no engine",
    ))?;
    // The same case and shape in f32 data twice: TF32 allowed (`tf32`) and
    // f32 math (`f32`), each its own PyTorch case with its own TF32 switch:
    // tf32 fwd 40 and 50 µs, f32 fwd 250 and 200 µs (legacy, graph).
    csv.row(&row("fwd", "tf32", Some(40.0), "IMPLICIT_PRECOMP_GEMM"))?;
    csv.row(&row("fwd", "f32", Some(250.0), "IMPLICIT_GEMM"))?;
    csv.row(&row("fwd_graph", "tf32", Some(50.0), "engine 5"))?;
    csv.row(&row("fwd_graph", "f32", Some(200.0), "engine 7"))?;
    csv.finish()?;
    let out = Command::new(&py)
        .arg("-c")
        .arg(CHECK)
        .arg(script().parent().ok_or("no script dir")?)
        .arg(&csv_path)
        .arg(&md)
        .output()?;
    ensure!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The PyTorch loop prints a progress line per row; the JSON comes last.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(last)?;
    let report = std::fs::read_to_string(&md)?;
    let _ = std::fs::remove_dir_all(&dir);

    // One PyTorch case per conv case, whatever API ours ran.
    let calls = serde_json::json!([
        ["conv", "fwd", "bf16"],
        ["conv", "bwd_data", "bf16"],
        ["conv", "fwd", "tf32"],
        ["conv", "fwd", "f32"]
    ]);
    ensure!(v["calls"] == calls, "PyTorch builders ran {}", v["calls"]);
    let pairs = serde_json::json!([
        ["fwd", "fwd_graph", "bf16"],
        ["bwd_data", "bwd_data_graph", "bf16"],
        ["fwd", "fwd_graph", "tf32"],
        ["fwd", "fwd_graph", "f32"]
    ]);
    ensure!(v["pairs"] == pairs, "pairs {}", v["pairs"]);
    for op in [
        "fwd/bf16",
        "fwd_graph/bf16",
        "bwd_data/bf16",
        "bwd_data_graph/bf16",
        "fwd/tf32",
        "fwd_graph/tf32",
        "fwd/f32",
        "fwd_graph/f32",
    ] {
        ensure!(
            v["torch_us"][op] == 50.0,
            "{op}: PyTorch {}",
            v["torch_us"][op]
        );
    }
    let labels = serde_json::json!([
        "conv fwd (legacy)",
        "conv bwd data (legacy)",
        "conv fwd (graph)",
        "conv bwd data (graph)",
        "conv fwd (legacy)",
        "conv fwd (legacy)",
        "conv fwd (graph)",
        "conv fwd (graph)"
    ]);
    ensure!(v["labels"] == labels, "labels {}", v["labels"]);
    ensure!(
        v["tf32"] == serde_json::json!({"tf32": "tf32", "f32": "ieee"}),
        "conv_case TF32 switch {}",
        v["tf32"]
    );
    // PyTorch before 2.9: the allow_tf32 flag of cuDNN only (cuDNN's conv
    // object never made, the matmul flag left alone).
    ensure!(
        v["legacy_tf32"]
            == serde_json::json!({
                "tf32": [true, false, "untouched"],
                "f32": [false, false, "untouched"]
            }),
        "conv_case TF32 switch on an older PyTorch {}",
        v["legacy_tf32"]
    );
    // 2 GFLOP: ours 100 µs = 20.0, 25 µs = 80.0, 200 µs = 10.0,
    // 40 µs = 50.0, 250 µs = 8.0 TFLOP/s; PyTorch 50 µs = 40.0; ratios
    // 0.50, 2.00, 0.25, 1.25, 1.00, 0.20.
    for line in [
        "| conv fwd (legacy) | resnet50 1x1 @56: x 32x64x56x56, w 256x64x1x1 | bf16 NHWC | TFLOP/s | 20.0 | 40.0 | 0.50 |",
        "| conv fwd (graph) | resnet50 1x1 @56: x 32x64x56x56, w 256x64x1x1 | bf16 NHWC | TFLOP/s | 80.0 | 40.0 | 2.00 |",
        "| conv fwd | resnet50 1x1 @56: x 32x64x56x56, w 256x64x1x1 | bf16 NHWC | 20.0 | 80.0 | 40.0 | 0.50 | 2.00 | IMPLICIT_GEMM | engine 62 (config #5; timed 35 of 35 accepted), tuned in 80 ms |",
        "| conv bwd data | resnet50 1x1 @56: x 32x64x56x56, w 256x64x1x1 | bf16 NHWC | 10.0 | unsupported: no engine | 40.0 | 0.25 | — | ALGO_1 | — |",
        // tf32 and f32 of one case: two rows, apart.
        "| conv fwd | resnet50 1x1 @56: x 32x64x56x56, w 256x64x1x1 | tf32 NHWC | 50.0 | 40.0 | 40.0 | 1.25 | 1.00 | IMPLICIT_PRECOMP_GEMM | engine 5 |",
        "| conv fwd | resnet50 1x1 @56: x 32x64x56x56, w 256x64x1x1 | f32 NHWC | 8.0 | 10.0 | 40.0 | 0.20 | 0.25 | IMPLICIT_GEMM | engine 7 |",
        // (0.50 * 0.25 * 1.25 * 0.20)^(1/4) = 0.03125^(1/4) = 0.420;
        // (2.00 * 1.00 * 0.25)^(1/3) = 0.5^(1/3) = 0.794.
        "- conv (legacy): 0.42 (4 rows)",
        "- conv (graph): 0.79 (3 rows)",
        // The candidate sets' difference, said in the conv section.
        "The graph API's candidates are not quite PyTorch's: ours also leave out engines with the \
         numerical note REDUCED_PRECISION_REDUCTION, which PyTorch's filterEngineConfigs keeps \
         (both leave out DOWN_CONVERT_INPUTS ones); the detail column says how many were timed.",
    ] {
        ensure!(
            report.lines().any(|l| l == line),
            "report lacks `{line}`:\n{report}"
        );
    }
    Ok(())
}

/// The example itself, so the host tier runs its own graphs (`op_graph`)
/// and command line, not a copy of them.
#[allow(dead_code)]
#[path = "../../../examples/bench_conv.rs"]
mod bench_conv;

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// `bench_conv --plan-only --quick` for an H100 (no device): every one of
/// its 60 graph cases (grouped, depthwise, dilated, 3-d; NHWC bf16 and NCHW
/// f32; fprop, dgrad, wgrad), built by the example's own `op_graph`, gets
/// candidates from the real cuDNN and finalized plans; the run fails when
/// any case does not plan. Two attempts a case keep it short: what is
/// checked is the graphs, not how many configurations finalize.
fn bench_conv_plan_only_for_h100() -> TestResult {
    bench_conv::run(&args(&[
        "--plan-only",
        "--quick",
        "--target",
        "h100",
        "--graph-attempts",
        "2",
    ]))
    .map_err(|e| format!("bench_conv --plan-only: {e}"))?;
    Ok(())
}

/// The graph rows time every accepted candidate by default (PyTorch's
/// `get_plans_from_find` builds and times every plan): for the example's
/// `resnet50 1x1 @56` NHWC bf16 forward graph on an H100, the real cuDNN
/// accepts more than the 16 configurations `--quick` used to cap it at
/// (the review counted 35), and the default policy builds every accepted
/// one that finalizes (plans + failures = accepted).
fn bench_conv_times_every_accepted_candidate() -> TestResult {
    for a in [&[][..], &["--quick"][..]] {
        let n = bench_conv::graph_attempts(&args(a))?;
        ensure!(n == usize::MAX, "{a:?}: --graph-attempts default {n}");
    }
    let n = bench_conv::graph_attempts(&args(&["--graph-attempts", "7"]))?;
    ensure!(n == 7, "--graph-attempts 7 gave {n}");
    let layer = bench_conv::LAYERS
        .iter()
        .find(|l| l.name == "resnet50 1x1 @56")
        .ok_or("no resnet50 1x1 @56 layer")?;
    let g = bench_conv::graph::op_graph(
        layer,
        DType::BF16,
        cudnn::dnn::TensorFormat::Nhwc,
        bench_conv::graph::Dir::Fwd,
    )?;
    let t = Target::preset("h100")?;
    let policy = bench_conv::graph::policy(true, usize::MAX);
    let accepted = heuristics::candidates(&g, &t, &policy)?
        .iter()
        .filter(|c| c.rejected.is_none())
        .count();
    let (plans, report) = Plan::build_all(&g, &t, &policy)?;
    eprintln!(
        "  {accepted} accepted, {} built, {} failed",
        plans.len(),
        report.failures.len()
    );
    ensure!(accepted > 16, "only {accepted} accepted");
    ensure!(
        plans.len() + report.failures.len() == accepted,
        "{} built + {} failed of {accepted} accepted",
        plans.len(),
        report.failures.len()
    );
    Ok(())
}

/// The timing loop's length, as `compare_torch.py`'s `time_case` sizes
/// PyTorch's: `int(min(500, max(5, 0.05 / per_call_s)))` (values computed
/// by hand and with Python), and never fewer than `--runs`.
fn bench_conv_loop_matches_time_case() -> TestResult {
    for (per_s, runs, want) in [
        (20e-6, 1, 500),    // 2500 -> capped at 500
        (33e-6, 5, 500),    // 1515 -> 500
        (1e-3, 5, 50),      // 50
        (2e-3, 5, 25),      // 25
        (123.4e-6, 5, 405), // 405.18 -> 405
        (0.1, 5, 5),        // 0.5 -> at least 5
        (0.1, 10, 10),      // --runs 10 wins
        (20e-6, 800, 800),  // --runs past the cap wins
    ] {
        let got = bench_conv::loop_iters(per_s, runs);
        ensure!(
            got == want,
            "per {per_s} s, runs {runs}: {got}, want {want}"
        );
    }
    Ok(())
}

/// The premise of `Plan::autotune` choosing by position: for the 1x1 bf16
/// NHWC convolution on an H100, cuDNN offers one engine with several knob
/// choices (plans whose JSON differs while the engine is the same), and two
/// builds list the same configurations in the same order (so the GPU test
/// can compare the chosen plan's JSON with the one at the fastest position).
fn one_engine_several_configurations() -> TestResult {
    let t = Target::preset("h100")?;
    let policy = Policy::default().with_max_attempts(64);
    let graph = || -> Result<OpGraph, cudnn::Error> {
        let mut g = Graph::new();
        let x = g.input("x", TensorSpec::nhwc(DType::BF16, &[32, 64, 56, 56])?)?;
        let w = g.input("w", TensorSpec::nhwc(DType::BF16, &[256, 64, 1, 1])?)?;
        let y = g.conv_fprop(x, w, &ConvParams::new_2d([0, 0], [1, 1], [1, 1]))?;
        g.output(y, DType::BF16)?;
        g.build()
    };
    let jsons = |plans: &[Plan]| -> Result<Vec<(Option<i64>, String)>, cudnn::Error> {
        plans
            .iter()
            .map(|p| Ok((p.engine(), p.cudnn_json()?)))
            .collect()
    };
    let a = jsons(&Plan::build_all(&graph()?, &t, &policy)?.0)?;
    let b = jsons(&Plan::build_all(&graph()?, &t, &policy)?.0)?;
    ensure!(a == b, "two builds list other configurations");
    let twins = a
        .iter()
        .enumerate()
        .flat_map(|(i, x)| a[i + 1..].iter().map(move |y| (x, y)))
        .filter(|(x, y)| x.0 == y.0 && x.1 != y.1)
        .count();
    eprintln!(
        "  {} plans, {twins} pairs of one engine with other knobs",
        a.len()
    );
    ensure!(twins > 0, "no engine with several configurations");
    Ok(())
}

pub fn main() {
    let pairing = "convbench_graph_rows_pair_with_pytorch";
    let pairing = if python().is_none() {
        eprintln!("skipped: host::{pairing}: python3 not found (set PYTHON)");
        trial(format!("host::{pairing}"), graph_rows_pair_with_pytorch).with_ignored_flag(true)
    } else {
        trial(format!("host::{pairing}"), graph_rows_pair_with_pytorch)
    };
    run(vec![
        pairing,
        host_planning(
            "convbench_bench_conv_plan_only_for_h100",
            bench_conv_plan_only_for_h100,
        ),
        host_planning(
            "convbench_bench_conv_times_every_accepted_candidate",
            bench_conv_times_every_accepted_candidate,
        ),
        trial(
            "host::convbench_bench_conv_loop_matches_time_case",
            bench_conv_loop_matches_time_case,
        ),
        host_planning(
            "convbench_one_engine_several_configurations",
            one_engine_several_configurations,
        ),
    ]);
}
