//! Host tier (no GPU): `bench_conv`'s graph-API rows and the device
//! check's PyTorch comparison.
//!
//! - The CSV rows bench_conv writes (through the examples' own writer,
//!   `examples/bench_csv.rs`) for one conv case through the legacy API and
//!   through the graph API are read by `xtask/device/compare_torch.py`,
//!   paired with ONE PyTorch measurement (its builder runs once per case),
//!   and the report's rates and ratios are the hand-computed ones. Needs
//!   `python3` (skipped, visibly, without it); PyTorch itself is stubbed.
//! - The graph convolutions bench_conv autotunes on the GPU (grouped,
//!   dilated, depthwise, 3-d, NHWC bf16 and NCHW f32, all three directions)
//!   are accepted by the real cuDNN's heuristics for an H100 and finalize.
use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

use cudnn::graph::*;
use support::*;

#[path = "../../../examples/bench_csv.rs"]
mod bench_csv;
use bench_csv::{Csv, CsvRow};

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
import json, sys, time
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
    calls.append((row["suite"], row["op"]))
    return lambda: None
ct.BUILDERS = {"conv": builder, "gemm": builder}
ct.time_case = lambda torch, fn, ours_us: (50.0, 7.0)
rows, notes = ct.read_rows([sys.argv[2]])
ct.run_torch(Any(), rows, None, time.monotonic(), {})
ct.write_report(sys.argv[3], rows, notes, [], {}, True)

tf32 = {}
for dtype in ("tf32", "f32"):
    fake = Any()
    ct.conv_case(fake, dict(rows[0], dtype=dtype), None)
    tf32[dtype] = fake.backends.cudnn.conv.fp32_precision
print(json.dumps({
    "calls": calls,
    "pairs": [[p[0]["op"] if p[0] else None, p[1]["op"] if p[1] else None] for p in ct.conv_pairs(rows)],
    "torch_us": {r["op"]: r["torch_us"] for r in rows},
    "labels": [ct.op_label(r) for r in rows],
    "tf32": tf32,
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
        "engine 62 (best of 16 timed), tuned in 80 ms",
    ))?;
    csv.row(&row(
        "bwd_data_graph",
        "bf16",
        None,
        "unsupported: no engine",
    ))?;
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
    let calls = serde_json::json!([["conv", "fwd"], ["conv", "bwd_data"]]);
    ensure!(v["calls"] == calls, "PyTorch builders ran {}", v["calls"]);
    let pairs = serde_json::json!([["fwd", "fwd_graph"], ["bwd_data", "bwd_data_graph"]]);
    ensure!(v["pairs"] == pairs, "pairs {}", v["pairs"]);
    for op in ["fwd", "fwd_graph", "bwd_data", "bwd_data_graph"] {
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
        "conv bwd data (graph)"
    ]);
    ensure!(v["labels"] == labels, "labels {}", v["labels"]);
    ensure!(
        v["tf32"] == serde_json::json!({"tf32": "tf32", "f32": "ieee"}),
        "conv_case TF32 switch {}",
        v["tf32"]
    );
    // 2 GFLOP: ours 100 µs = 20.0, 25 µs = 80.0, 200 µs = 10.0 TFLOP/s;
    // PyTorch 50 µs = 40.0; ratios 0.50, 2.00, 0.25.
    for line in [
        "| conv fwd (legacy) | resnet50 1x1 @56: x 32x64x56x56, w 256x64x1x1 | bf16 NHWC | TFLOP/s | 20.0 | 40.0 | 0.50 |",
        "| conv fwd (graph) | resnet50 1x1 @56: x 32x64x56x56, w 256x64x1x1 | bf16 NHWC | TFLOP/s | 80.0 | 40.0 | 2.00 |",
        "| conv fwd | resnet50 1x1 @56: x 32x64x56x56, w 256x64x1x1 | bf16 NHWC | 20.0 | 80.0 | 40.0 | 0.50 | 2.00 | IMPLICIT_GEMM | engine 62 (best of 16 timed), tuned in 80 ms |",
        "| conv bwd data | resnet50 1x1 @56: x 32x64x56x56, w 256x64x1x1 | bf16 NHWC | 10.0 | unsupported: no engine | 40.0 | 0.25 | — | ALGO_1 | — |",
        // sqrt(0.50 * 0.25) = 0.354.
        "- conv (legacy): 0.35 (2 rows)",
        "- conv (graph): 2.00 (1 row)",
    ] {
        ensure!(
            report.lines().any(|l| l == line),
            "report lacks `{line}`:\n{report}"
        );
    }
    Ok(())
}

/// The bench's graph convolutions for an H100: each direction of a grouped,
/// a depthwise, a dilated and a 3-d case, NHWC bf16 and NCHW f32 (TF32
/// allowed), gets candidates from cuDNN and a finalized plan.
fn bench_graphs_plan_for_h100() -> TestResult {
    let t = Target::preset("h100")?;
    let policy = Policy::default().with_allow_tf32(true).with_max_attempts(4);
    // (x dims, w dims, pad, stride, dilation)
    type Case = (Vec<i64>, Vec<i64>, Vec<i64>, Vec<i64>, Vec<i64>);
    let cases: Vec<Case> = vec![
        // resnext 3x3 g32 @56 (w has C/groups = 4 channels)
        (
            vec![32, 128, 56, 56],
            vec![128, 4, 3, 3],
            vec![1, 1],
            vec![1, 1],
            vec![1, 1],
        ),
        // mobilenetv2 dw 3x3/2
        (
            vec![32, 144, 56, 56],
            vec![144, 1, 3, 3],
            vec![1, 1],
            vec![2, 2],
            vec![1, 1],
        ),
        // dilated 3x3 d2 @28
        (
            vec![32, 256, 28, 28],
            vec![256, 256, 3, 3],
            vec![2, 2],
            vec![1, 1],
            vec![2, 2],
        ),
        // 3d 3x3x3 @16x56x56
        (
            vec![8, 64, 16, 56, 56],
            vec![64, 64, 3, 3, 3],
            vec![1, 1, 1],
            vec![1, 1, 1],
            vec![1, 1, 1],
        ),
    ];
    for (xd, wd, pad, stride, dil) in &cases {
        let p = ConvParams::new(pad, stride, dil);
        let yd = p.output_dims("test", xd, wd)?;
        for (dt, nhwc) in [(DType::BF16, true), (DType::F32, false)] {
            let spec = |d: &[i64]| {
                if nhwc {
                    TensorSpec::nhwc(dt, d)
                } else {
                    TensorSpec::nchw(dt, d)
                }
            };
            for dir in 0..3 {
                let mut g = Graph::new();
                let out = match dir {
                    0 => {
                        let x = g.input("x", spec(xd)?)?;
                        let w = g.input("w", spec(wd)?)?;
                        g.conv_fprop(x, w, &p)?
                    }
                    1 => {
                        let dy = g.input("dy", spec(&yd)?)?;
                        let w = g.input("w", spec(wd)?)?;
                        g.conv_dgrad(dy, w, xd, &p)?
                    }
                    _ => {
                        let x = g.input("x", spec(xd)?)?;
                        let dy = g.input("dy", spec(&yd)?)?;
                        g.conv_wgrad(x, dy, wd, &p)?
                    }
                };
                g.output(out, dt)?;
                let og = g.build()?;
                let (plans, report) = Plan::build_all(&og, &t, &policy)?;
                ensure!(
                    !plans.is_empty() && !report.candidates.is_empty(),
                    "x {xd:?} w {wd:?} {dt} dir {dir}: no plan ({:?})",
                    report.failures
                );
            }
        }
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
        host_planning("convbench_graphs_plan_for_h100", bench_graphs_plan_for_h100),
        host_planning(
            "convbench_one_engine_several_configurations",
            one_engine_several_configurations,
        ),
    ]);
}
