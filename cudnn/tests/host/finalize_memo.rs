//! The finalize memo (`cudnn::graph::enable_finalize_memo`, the host tier's
//! test aid): a plan finalized once is loaded, not compiled, by a later
//! process that gives cuDNN the same input, and is the same plan; any change
//! in that input compiles again; a damaged entry is never used.
//!
//! Each step runs in a child process of this binary (the memo is turned on
//! for the process, in the folder `CUDNN_RS_FINALIZE_MEMO` names: here a
//! fresh one), which builds one plan and prints what the memo did.

use cudnn::graph::{DType, Graph, Plan, Policy, Target, TensorSpec};

use crate::support::{TestResult, host_planning, trial};

/// Set in the child: which graph it plans (`base`, `k` for another K).
const CHILD: &str = "CUDNN_RS_FINALIZE_MEMO_CHILD";

pub fn main() {
    if let Ok(which) = std::env::var(CHILD) {
        crate::support::run(vec![trial("host::child", move || child(&which))]);
        return;
    }
    let name = "a_plan_compiled_once_loads_and_is_the_same_plan";
    // With a real driver, plans compile for the device and the memo is off.
    // SAFETY: opening the system's driver library runs its initialisers, as
    // the runtime would when it looks for a driver.
    if unsafe { cudnn::sys::cudart::loader::libloading::Library::new("libcuda.so.1") }.is_ok() {
        eprintln!(
            "skipped: finalize_memo::host::{name}: a real CUDA driver opens here (the memo plans only through the driver stub)"
        );
        crate::support::run(vec![
            trial(format!("host::{name}"), || Ok(())).with_ignored_flag(true),
        ]);
        return;
    }
    crate::support::run(vec![host_planning(
        name,
        a_plan_compiled_once_loads_and_is_the_same_plan,
    )]);
}

/// A matmul with a ReLU epilogue (a runtime-compiled plan) for an H200;
/// `k` is its inner dimension.
fn graph(k: i64) -> cudnn::Result<Graph> {
    let mut g = Graph::new();
    let a = g.input("a", TensorSpec::row_major(DType::F16, &[1, 64, k])?)?;
    let b = g.input("b", TensorSpec::row_major(DType::F16, &[1, k, 32])?)?;
    let c = g.matmul(a, b)?;
    let y = g.relu(c)?;
    g.output(y, DType::F16)?;
    g.rename(y, "y")?;
    Ok(g)
}

/// In the child: plan one graph, then print the SHA-256 of cuDNN's JSON of
/// the plan and the memo's counters. `gap`: a causal SDPA backward
/// operation instead (whose JSON cuDNN 9.28 writes without its score
/// subgraph: not reloadable, the memo's known gap).
fn child(which: &str) -> TestResult {
    if which == "gap" {
        let cfg = cudnn::graph::SdpaConfig::new(2, 8, 256, 64, DType::BF16)
            .causal(true)
            .implementation(cudnn::graph::SdpaImpl::Native);
        let og = crate::support::sdpa_plans::bwd_graph(&cfg)?.build()?;
        Plan::build(&og, &Target::preset("h200")?, &Policy::default())?;
        let s = cudnn::graph::finalize_memo_stats();
        println!(
            "memo-child json=- shape=- hits={} stored={} gap={} bad={} refused={}",
            s.hits, s.stored, s.score_subgraph_gap, s.bad, s.refused
        );
        return Ok(());
    }
    let k = if which == "k" { 48 } else { 64 };
    let og = graph(k)?.build()?;
    let (plan, _) = Plan::build(&og, &Target::preset("h200")?, &Policy::default())?;
    ensure!(
        plan.is_runtime_compiled(),
        "the plan must be runtime-compiled (what the memo saves)"
    );
    let json = plan.cudnn_json()?;
    // The kernel binaries are part of what must be the same.
    ensure!(json.contains("payload"), "no compiled code in the JSON");
    let s = cudnn::graph::finalize_memo_stats();
    println!(
        "memo-child json={} shape={} hits={} stored={} unkeyed={} bad={} refused={}",
        sha256(&json),
        sha256(&without_param_blocks(&json)?),
        s.hits,
        s.stored,
        s.unkeyed,
        s.bad,
        s.refused
    );
    Ok(())
}

/// The JSON without its kernels' parameter blocks (`rawData`): cuDNN leaves
/// host memory in them (measured: a stale host address where a tensor's
/// pointer is patched at launch, and in padding), so two compiles of the
/// same input differ there and nowhere else.
fn without_param_blocks(json: &str) -> Result<String, Box<dyn std::error::Error>> {
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                m.remove("rawData");
                m.values_mut().for_each(strip);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut v: serde_json::Value = serde_json::from_str(json)?;
    strip(&mut v);
    Ok(v.to_string())
}

fn sha256(s: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What one child printed: cuDNN's JSON digest (whole, and without the
/// parameter blocks) and the counters by name.
struct Seen {
    json: String,
    shape: String,
    counts: std::collections::HashMap<String, u64>,
}

fn run_child(which: &str, memo: &std::path::Path) -> Result<Seen, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = std::process::Command::new(exe)
        .args(["--exact", "finalize_memo::host::child", "--nocapture"])
        .env(CHILD, which)
        .env("CUDNN_RS_TEST_MODULE", "finalize_memo")
        .env("CUDNN_RS_FINALIZE_MEMO", memo)
        .output()
        .map_err(|e| e.to_string())?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let line = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("memo-child "))
        .filter(|_| out.status.success())
        .ok_or_else(|| format!("the child ({which}) failed or printed nothing:\n{text}"))?;
    let mut json = String::new();
    let mut shape = String::new();
    let mut counts = std::collections::HashMap::new();
    for kv in line.split_whitespace() {
        let (k, v) = kv.split_once('=').ok_or(format!("not k=v: {kv}"))?;
        if k == "json" {
            json = v.to_string();
        } else if k == "shape" {
            shape = v.to_string();
        } else {
            counts.insert(
                k.to_string(),
                v.parse().map_err(|_| format!("not a count: {kv}"))?,
            );
        }
    }
    Ok(Seen {
        json,
        shape,
        counts,
    })
}

/// `want` counters (by name) equal what the child printed.
fn counts(step: &str, s: &Seen, want: &[(&str, u64)]) -> TestResult {
    for &(k, v) in want {
        let got = s.counts.get(k).copied();
        ensure!(got == Some(v), "{step}: {k} = {got:?}, want {v}");
    }
    Ok(())
}

fn a_plan_compiled_once_loads_and_is_the_same_plan() -> TestResult {
    let memo = std::env::temp_dir().join(format!(
        "cudnn-rs-finalize-memo-test-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    let result = steps(&memo);
    let _ = std::fs::remove_dir_all(&memo);
    result
}

fn steps(memo: &std::path::Path) -> TestResult {
    // 1. An empty memo: cuDNN compiles, and the plan is stored.
    let first = run_child("base", memo)?;
    counts(
        "first",
        &first,
        &[("hits", 0), ("stored", 1), ("bad", 0), ("refused", 0)],
    )?;
    // 2. Another process, the same input: loaded, nothing compiled, and
    // cuDNN's JSON of the plan (kernels included) is the same.
    let second = run_child("base", memo)?;
    counts("second", &second, &[("hits", 1), ("stored", 0), ("bad", 0)])?;
    ensure!(
        second.json == first.json,
        "the plan loaded from the memo is not the plan compiled: {} vs {}",
        second.json,
        first.json
    );
    // 3. One dimension changed: not a hit, compiled and stored.
    let other = run_child("k", memo)?;
    counts("other K", &other, &[("hits", 0), ("stored", 1), ("bad", 0)])?;
    ensure!(
        other.shape != first.shape,
        "another graph, the same plan JSON"
    );
    // 4. Every entry damaged (one byte of its JSON changed): never loaded;
    // the plan is compiled again, the same as the first time (but for the
    // host memory cuDNN leaves in parameter blocks).
    let mut damaged = 0;
    for folder in std::fs::read_dir(memo)?.flatten() {
        for f in std::fs::read_dir(folder.path())?.flatten() {
            let p = f.path();
            if p.extension().is_some_and(|e| e == "plan") {
                let mut bytes = std::fs::read(&p)?;
                let last = bytes.len() - 2;
                bytes[last] ^= 1;
                std::fs::write(&p, bytes)?;
                damaged += 1;
            }
        }
    }
    ensure!(damaged == 2, "the memo holds {damaged} entries, want 2");
    let again = run_child("base", memo)?;
    counts("damaged", &again, &[("hits", 0), ("stored", 1), ("bad", 1)])?;
    ensure!(
        again.shape == first.shape,
        "compiled again, another plan JSON"
    );
    // 5. A plan the loader refuses for cuDNN's known serialization gap (a
    // causal SDPA backward's JSON without its score subgraph): not stored,
    // counted as the gap, not as refused; and again the next time.
    if crate::support::sdpa_plans::loaded() >= (9, 28, 0) {
        for step in ["gap", "gap again"] {
            let gap = run_child("gap", memo)?;
            counts(
                step,
                &gap,
                &[
                    ("hits", 0),
                    ("stored", 0),
                    ("gap", 1),
                    ("bad", 0),
                    ("refused", 0),
                ],
            )?;
        }
    } else {
        eprintln!(
            "  (step 5 needs cuDNN >= 9.28, which plans the SDPA backward operation without a device)"
        );
    }
    Ok(())
}
