//! The conformance tier: every graph pattern the crate builds is built by
//! NVIDIA's cuDNN frontend too (1.32, through `xtask/conformance/frontend.py`),
//! for the same targets (H200, A100, B200 presets), with no GPU, and the two
//! must agree: heuristics mode A's configuration count and first engine, the
//! engine built and its workspace, the non-virtual tensors of the cuDNN plan
//! JSON matched by role (dims, strides, data type, by-value flag, by-value
//! values), the nodes, and plans cross-loaded both ways (the frontend's
//! through `Plan::from_cudnn_json` with the crate's tensor list, the crate's
//! through the frontend's deserialize), uids mapped. Legitimate differences
//! are listed in `differences.rs`, with their reasons; anything else fails.
//!
//!     cargo xtask test                      (runs it with what it fetched)
//!     cargo run --example conformance -- --frontend-dir DIR --cudnn-lib DIR \
//!         [--only SUBSTR] [--targets h200,a100,b200] [--timing] [--reps N] [--rounds R] [--jobs N] [--verbose] [--keep DIR]
//!         [--oracle-cache DIR] [--finalize-memo DIR]
//!
//! `--frontend-dir` holds `site/` (the frontend wheel installed there),
//! `stub/libcuda.so.1` (the crate's driver stub) and `python` (the
//! interpreter's path); `cargo xtask fetch-libs` makes it. Without it, or
//! without Python, the tier is skipped with the reason, and fails when
//! `CUDNN_RS_REQUIRE_LIBS=1`. `--timing` prints the host times of both
//! sides (op-graph build, heuristics, first finalize, plan load; not asserted)
//! per pattern and as medians per family (conv, matmul, norms, SDPA), then
//! the crate's op-graph build, heuristics and plan load split into the time
//! inside cuDNN's backend calls (what the crate cannot go below while it
//! makes them) and its own code, from as many reps again with the backend
//! clock on (`cudnn::graph::set_backend_clock`);
//! `--reps N` times op-graph build, heuristics and plan load N times on both
//! sides (the median counts; finalize once); `--rounds R` runs both sides
//! R times in turn (the median of the rounds counts, the first round's for
//! finalize: cuDNN keeps compiled kernels in the crate's process); `cargo xtask bench-planning`
//! runs it in a release build; `--jobs N` splits each side over N threads
//! (the crate's) and N Python processes (the frontend's) (default: one per
//! core, at most 4; 1 under `--timing`); `--oracle-cache DIR` remembers the
//! frontend's answers there and reads back those whose request, script,
//! frontend and libraries are unchanged (`oracle.rs`; not under `--timing`;
//! `cargo xtask` keeps them in the target folder); `--finalize-memo DIR`
//! plans the crate's side through the host tier's finalize memo in DIR
//! (`cudnn::graph::enable_finalize_memo`: DIR must hold only what the memo
//! wrote; not under `--timing`; `cargo xtask test` passes the tier's), and
//! fails the run when a plan built here does not reload;
//! `--verbose` lists every finding a documented difference explains.

mod args;
mod compare;
mod differences;
mod oracle;
mod patterns;
mod patterns_sdpa_options;
mod patterns_sdpa_softcap;
// issue 24 (h4): additive bias and ALiBi.
mod patterns_sdpa_bias;
mod patterns_sdpa_softmax;
mod timing;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use cudnn::graph::{HeurMode, IoSignature, Plan, Policy, Target, heuristics};
use serde_json::{Value, json};

use args::{Args, parse_args};
use differences::{DIFFERENCES, Finding, classify};
use patterns::Pattern;

fn required() -> bool {
    std::env::var("CUDNN_RS_REQUIRE_LIBS").is_ok_and(|v| v == "1")
}

fn main() {
    let code = match run() {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(Stop::Fail(why)) => {
            eprintln!("conformance: FAILED: {why}");
            1
        }
        Err(Stop::Missing(why)) => {
            if required() {
                eprintln!("conformance: FAILED (CUDNN_RS_REQUIRE_LIBS=1): {why}");
                1
            } else {
                eprintln!("conformance: SKIPPED: {why}");
                0
            }
        }
    };
    std::process::exit(code);
}

/// Why the tier stopped: something it needs is missing here (no Python,
/// no frontend, no cuDNN: skipped, or failed under
/// `CUDNN_RS_REQUIRE_LIBS=1`), or the frontend side broke (always a failure).
enum Stop {
    Missing(String),
    Fail(String),
}

impl From<cudnn::Error> for Stop {
    fn from(e: cudnn::Error) -> Self {
        Stop::Missing(format!("{e:#}"))
    }
}

/// One side's result for one pattern and target.
#[derive(Default)]
pub(crate) struct Side {
    error: Option<String>,
    count_a: Option<i64>,
    first_engine: Option<i64>,
    chosen: Option<i64>,
    workspace: Option<u64>,
    plan_json: Option<String>,
    t_graph: f64,
    t_heur: f64,
    t_finalize: f64,
    t_load: Option<f64>,
    /// `--timing`, the crate's side: cuDNN's own calls in each step.
    cudnn: timing::CudnnPart,
}

pub(crate) struct Row {
    pattern: usize,
    target: String,
    ours: Side,
    io: Option<Arc<IoSignature>>,
    theirs: Side,
    blob: Option<String>,
    pass_by_values: Value,
    findings: Vec<Finding>,
    identical: bool,
    /// Cross-loads done: the frontend's plan here, the crate's there.
    loaded: (bool, bool),
    map: HashMap<i64, i64>,
}

fn policy() -> Policy {
    Policy::default()
        .with_modes(vec![HeurMode::A])
        .with_allow_tf32(true)
        .with_allow_reduced_precision(true)
}

fn ours(
    p: &Pattern,
    target: &Target,
    reps: usize,
    clock: bool,
) -> cudnn::Result<(Side, Arc<IoSignature>)> {
    // Timed: the graph calls and Graph::build (the frontend's side times
    // its graph calls, validate and build_operation_graph likewise), then
    // heuristics on that graph; `reps` times, the medians count.
    let (mut t_graph, mut t_heur) = (Vec::new(), Vec::new());
    let mut last = None;
    for _ in 0..reps.max(1) {
        let t0 = Instant::now();
        let g = p.graph()?;
        let og = g.build()?;
        let t1 = Instant::now();
        let cands = heuristics::candidates(&og, target, &policy())?;
        let t2 = Instant::now();
        t_graph.push((t1 - t0).as_secs_f64());
        t_heur.push((t2 - t1).as_secs_f64());
        // The candidates borrow the graph: keep what is compared, then let
        // them go before the graph moves.
        let (count, first) = (cands.len(), cands.first().map(|c| c.engine));
        drop(cands);
        last = Some((og, count, first));
    }
    let Some((og, count, first)) = last else {
        return Err(cudnn::Error::invalid("--reps", "must be at least 1", reps));
    };
    // `--timing`: the same steps again, `reps` times, with the backend
    // clock on (the times above are taken with it off).
    let mut part = timing::CudnnPart::default();
    if clock {
        let _on = timing::ClockOn::start();
        let (mut g, mut h) = (Vec::new(), Vec::new());
        for _ in 0..reps.max(1) {
            // The graph is returned, so it is dropped outside the span (as
            // in the reps above).
            let (r, s) = timing::split(|| p.graph().and_then(|g| g.build().map(|og| (g, og))));
            g.push(s);
            let (_graph, og) = r?;
            let (cands, s) = timing::split(|| heuristics::candidates(&og, target, &policy()));
            h.push(s);
            drop(cands?);
        }
        part.graph = timing::median_part(g);
        part.heur = timing::median_part(h);
    }
    let (plan, report) = Plan::build(&og, target, &policy())?;
    let side = Side {
        count_a: Some(count as i64),
        first_engine: first,
        chosen: plan.engine(),
        workspace: Some(plan.workspace_size() as u64),
        plan_json: Some(plan.cudnn_json()?),
        t_graph: timing::median(&mut t_graph),
        t_heur: timing::median(&mut t_heur),
        t_finalize: report.finalize_s,
        cudnn: part,
        ..Side::default()
    };
    Ok((side, Arc::new(og.io().clone())))
}

fn io_tensors(io: &IoSignature) -> Vec<Value> {
    io.tensors
        .iter()
        .map(|t| {
            json!({"name": t.name, "uid": t.uid, "dims": t.spec.dims(), "strides": t.spec.strides(),
                   "dtype": t.spec.dtype().name(), "output": t.is_output})
        })
        .collect()
}

fn find(
    kind: &'static str,
    path: impl Into<String>,
    a: impl ToString,
    b: impl ToString,
) -> Finding {
    Finding {
        kind,
        path: path.into(),
        ours: a.to_string(),
        theirs: b.to_string(),
    }
}

fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref()
        .map(|x| x.to_string())
        .unwrap_or_else(|| "-".into())
}

/// Compare what both sides planned: the findings, the frontend-to-crate
/// uid map, and whether the plan JSONs are byte-identical.
fn compare(row: &Row) -> (Vec<Finding>, HashMap<i64, i64>, bool) {
    let mut out = Vec::new();
    let (o, t) = (&row.ours, &row.theirs);
    match (&o.error, &t.error) {
        (Some(a), Some(b)) => {
            out.push(find("crate", "plan", a, b));
            return (out, HashMap::new(), false);
        }
        (Some(a), None) => {
            out.push(find("crate", "plan", a, "planned"));
            return (out, HashMap::new(), false);
        }
        (None, Some(b)) => {
            out.push(find("frontend", "plan", "planned", b));
            return (out, HashMap::new(), false);
        }
        _ => {}
    }
    for (kind, a, b) in [
        ("count", o.count_a, t.count_a),
        ("first_engine", o.first_engine, t.first_engine),
        ("chosen_engine", o.chosen, t.chosen),
    ] {
        if a != b {
            out.push(find(kind, kind, opt(&a), opt(&b)));
        }
    }
    if o.workspace != t.workspace {
        out.push(find(
            "workspace",
            "workspace",
            opt(&o.workspace),
            opt(&t.workspace),
        ));
    }
    let (Some(cj), Some(fj)) = (&o.plan_json, &t.plan_json) else {
        return (out, HashMap::new(), false);
    };
    let identical = cj == fj;
    let (Ok(cv), Ok(fv)) = (
        serde_json::from_str::<Value>(cj),
        serde_json::from_str::<Value>(fj),
    ) else {
        out.push(find("node", "plan JSON", "parse", "parse"));
        return (out, HashMap::new(), identical);
    };
    let Some(io) = &row.io else {
        return (out, HashMap::new(), identical);
    };
    let named: Vec<i64> = io.tensors.iter().map(|t| t.uid).collect();
    let ours_values: HashMap<i64, String> = io
        .scalars
        .iter()
        .map(|&(u, _, v)| (u, format!("{:08X}", (v as f32).to_bits())))
        .collect();
    let theirs_values: HashMap<i64, String> = row
        .pass_by_values
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| {
                    Some((
                        k.parse().ok()?,
                        v.get("value")?.as_str()?.to_ascii_uppercase(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    let (map, unmatched) = compare::map_uids(&cv, &fv, &named, (&ours_values, &theirs_values));
    for u in unmatched {
        out.push(find("unmatched", u, "-", "-"));
    }
    let ct = compare::tensors(&cv);
    let ft = compare::tensors(&fv);
    // Non-virtual tensors by role.
    for (&fuid, &cuid) in &map {
        let (Some(c), Some(f)) = (ct.get(&cuid), ft.get(&fuid)) else {
            continue;
        };
        let role = match io.tensors.iter().find(|t| t.uid == cuid) {
            Some(t) => format!("`{}`", t.name),
            None => compare::role_of(&cv, cuid),
        };
        let fields: [(&str, String, String); 4] = [
            ("dim", format!("{:?}", c.dims), format!("{:?}", f.dims)),
            (
                "stride",
                format!("{:?}", c.strides),
                format!("{:?}", f.strides),
            ),
            ("dataType", c.dtype.clone(), f.dtype.clone()),
            ("isByValue", c.by_value.to_string(), f.by_value.to_string()),
        ];
        for (field, a, b) in fields {
            if a != b {
                out.push(find(
                    "tensor",
                    format!("{role} {field}"),
                    a.replace(' ', ""),
                    b.replace(' ', ""),
                ));
            }
        }
        if c.by_value
            && let Some((_, _, v)) = io.scalars.iter().find(|s| s.0 == cuid)
        {
            // The frontend records the values it bakes into the plan.
            if let Some(hex) = t_pass_by_value(&row.pass_by_values, fuid) {
                let ours = format!("{:08X}", (*v as f32).to_bits());
                if !hex.eq_ignore_ascii_case(&ours) {
                    out.push(find("tensor", format!("{role} value"), ours, hex));
                }
            }
        }
    }
    for (&cuid, c) in &ct {
        if !c.is_virtual && !map.values().any(|&v| v == cuid) {
            out.push(find(
                "unmatched",
                format!("crate tensor uid {cuid} ({})", compare::role_of(&cv, cuid)),
                "-",
                "-",
            ));
        }
    }
    // The implementation each side chose (the SDPA operation or a composite).
    let imp = |v: &Value| {
        let text = v["operationGraph"]["nodes"].to_string();
        if text.contains("OPERATION_SDPA_") {
            "the SDPA operation"
        } else if text.contains("OPERATION_MATMUL_") && text.contains("SOFTMAX")
            || text.contains("REDUCE_TENSOR_MAX")
        {
            "a composite"
        } else {
            "-"
        }
    };
    if p_family_is_sdpa(&cv) && imp(&cv) != imp(&fv) {
        out.push(find("implementation", "SDPA", imp(&cv), imp(&fv)));
    }
    // Nodes, tensor references normalized.
    let cn = compare::normalized_nodes(&cv, None);
    let fnodes = compare::normalized_nodes(&fv, Some(&map));
    let mut d = Vec::new();
    compare::diff(&cn, &fnodes, "nodes", &mut d);
    for (path, a, b) in d {
        out.push(find("node", path, a, b));
    }
    (out, map, identical)
}

/// `io` with every uid renamed into the frontend's through `map` (frontend
/// uid to crate uid), which must be one to one and cover every uid of `io`.
fn io_in_their_uids(io: &IoSignature, map: &HashMap<i64, i64>) -> Option<IoSignature> {
    let inverse: HashMap<i64, i64> = map.iter().map(|(f, c)| (*c, *f)).collect();
    if inverse.len() != map.len() {
        return None;
    }
    let m = |u: i64| inverse.get(&u).copied();
    let mut out = io.clone();
    for t in &mut out.tensors {
        t.uid = m(t.uid)?;
    }
    for s in &mut out.scalars {
        s.0 = m(s.0)?;
    }
    for s in &mut out.scratch {
        s.0 = m(s.0)?;
    }
    for r in &mut out.ragged_offsets {
        *r = m(*r)?;
    }
    out.tensors.sort_by_key(|t| t.uid);
    out.scalars.sort_by_key(|s| s.0);
    out.scratch.sort_by_key(|s| s.0);
    out.ragged_offsets.sort_unstable();
    Some(out)
}

/// A fresh private temporary folder: mode 0700, a name no folder had
/// (`create` fails on anything already there, so one another user made first
/// is never used; another name is tried).
fn fresh_private_folder() -> Result<PathBuf, Stop> {
    #[cfg(unix)]
    use std::os::unix::fs::DirBuilderExt;
    let base = std::env::temp_dir();
    for attempt in 0..64u32 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let d = base.join(format!(
            "cudnn-rs-conformance-{}-{nanos:x}-{attempt}",
            std::process::id()
        ));
        let mut b = std::fs::DirBuilder::new();
        #[cfg(unix)]
        b.mode(0o700);
        match b.create(&d) {
            Ok(()) => return Ok(d),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Stop::Fail(format!("{}: {e}", d.display()))),
        }
    }
    Err(Stop::Fail(format!(
        "no fresh folder name in {}",
        base.display()
    )))
}

fn t_pass_by_value(values: &Value, uid: i64) -> Option<String> {
    values
        .get(uid.to_string())
        .and_then(|v| v.get("value"))
        .and_then(Value::as_str)
        .map(str::to_string)
}

fn side_from(r: &Value) -> Side {
    Side {
        error: r["error"].as_str().map(str::to_string),
        count_a: r["count_a"].as_i64(),
        first_engine: r["first_engine"].as_i64(),
        chosen: r["built_engine"].as_i64(),
        workspace: r["workspace"].as_u64(),
        plan_json: r["plan_json"].as_str().map(str::to_string),
        t_graph: r["t_graph_s"].as_f64().unwrap_or(0.0),
        t_heur: r["t_heur_s"].as_f64().unwrap_or(0.0),
        t_finalize: r["t_finalize_s"].as_f64().unwrap_or(0.0),
        t_load: None,
        cudnn: timing::CudnnPart::default(),
    }
}

fn run() -> Result<bool, Stop> {
    let args = parse_args().map_err(|e| Stop::Fail(format!("usage: {e}")))?;
    let Some(fe) = args.frontend_dir.clone() else {
        return Err(Stop::Missing(
            "no --frontend-dir (run through `cargo xtask test`, or `cargo xtask fetch-libs` and pass its frontend folder)"
                .to_string(),
        ));
    };
    cudnn::graph::require_graph_support()?;
    if let Some(dir) = &args.finalize_memo {
        // SAFETY: the folder is the test suite's memo (`cargo xtask test`
        // passes the host tier's, in the target folder): only the memo
        // writes there.
        unsafe { cudnn::graph::enable_finalize_memo(dir) };
    }
    // --keep: the caller's folder. Otherwise a fresh private one: the plans
    // the frontend writes there are loaded back as code.
    let work = match &args.keep {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(|e| Stop::Fail(format!("{}: {e}", d.display())))?;
            d.clone()
        }
        None => fresh_private_folder()?,
    };
    let pats: Vec<Pattern> = patterns::all()
        .into_iter()
        .filter(|p| args.only.is_empty() || args.only.iter().any(|o| p.name.contains(o.as_str())))
        .collect();
    let mut targets = Vec::new();
    for name in &args.targets {
        let t = Target::preset(name)?;
        let sm = t.properties().device_ver() / 10;
        let json = t.properties().json().to_string();
        targets.push((name.clone(), t, sm, json));
    }
    // The frontend's remembered answers (`--oracle-cache`), never under
    // `--timing`: the answers carry the frontend's times.
    let oracle = match &args.oracle_cache {
        Some(dir) if !args.timing => Some(oracle::Oracle::open(
            dir,
            &fe,
            &oracle::script(),
            &args.cudnn_lib,
            loaded_cudnn(),
        )?),
        _ => None,
    };
    let t_start = Instant::now();
    // `--rounds`: the whole run again (the crate's side, then the
    // frontend's, each time), the times the median over the rounds; what
    // is compared is the last round's.
    let mut rounds = Vec::new();
    for _ in 0..args.rounds {
        rounds.push(round(&args, &pats, &targets, &fe, &work, oracle.as_ref())?);
    }
    let rows = timing::merge(rounds);
    if args.keep.is_none() {
        let _ = std::fs::remove_dir_all(&work);
    }
    Ok(report(
        &pats,
        &rows,
        args.timing,
        args.verbose,
        t_start.elapsed().as_secs_f64(),
    ))
}

/// The version of the cuDNN this process loaded (`major.minor.patch`, as
/// the frontend reports its own).
fn loaded_cudnn() -> Option<String> {
    cudnn::sys::cudnn::load()
        .ok()
        .and_then(|a| a.info().version)
        .map(|v| format!("{}.{}.{}", v.major, v.minor, v.patch))
}

/// One pass over every pattern and target: the crate's side, the
/// frontend's, the comparison and the cross-loads.
fn round(
    args: &Args,
    pats: &[Pattern],
    targets: &[(String, Target, i64, String)],
    fe: &Path,
    work: &Path,
    oracle: Option<&oracle::Oracle>,
) -> Result<Vec<Row>, Stop> {
    // The crate's side: every pattern for every target, in `--jobs`
    // threads (one under `--timing`, as the frontend's side).
    let pairs: Vec<(usize, usize)> = (0..pats.len())
        .flat_map(|pi| (0..targets.len()).map(move |ti| (pi, ti)))
        .collect();
    let planned = oracle::par_map(&pairs, args.jobs, |&(pi, ti)| {
        ours(&pats[pi], &targets[ti].1, args.reps, args.timing)
    })?;
    let mut rows = Vec::new();
    let mut items = Vec::new();
    for (&(pi, ti), planned) in pairs.iter().zip(planned) {
        let p = &pats[pi];
        {
            let name = &targets[ti].0;
            let (side, io) = match planned {
                Ok((s, io)) => (s, Some(io)),
                Err(e) => (
                    Side {
                        error: Some(format!("{e:#}")),
                        ..Side::default()
                    },
                    None,
                ),
            };
            // The frontend needs the tensor list even where the crate failed.
            let tensors = match &io {
                Some(io) => io_tensors(io),
                None => p
                    .graph()
                    .ok()
                    .and_then(|g| g.build().ok())
                    .map(|og| io_tensors(og.io()))
                    .unwrap_or_default(),
            };
            items.push(
                json!({"target": name, "spec": {"name": p.name, "family": p.family,
                "params": p.params, "tensors": tensors}}),
            );
            rows.push(Row {
                pattern: pi,
                target: name.clone(),
                ours: side,
                io,
                theirs: Side::default(),
                blob: None,
                pass_by_values: Value::Null,
                findings: Vec::new(),
                identical: false,
                loaded: (false, false),
                map: HashMap::new(),
            });
        }
    }
    let env = json!({"site": fe.join("site"), "stub": fe.join("stub").join("libcuda.so.1"),
                     "cudnn_lib": args.cudnn_lib});
    let tjson: Vec<Value> = targets
        .iter()
        .map(|(n, _, sm, j)| json!({"name": n, "sm_version": sm, "json": j}))
        .collect();
    // The frontend's side.
    let built = oracle::frontend(
        &json!({"env": env, "targets": tjson, "items": items, "reps": args.reps}),
        "build",
        fe,
        work,
        args.jobs,
        oracle,
    )?;
    eprintln!(
        "conformance: NVIDIA cuDNN frontend {} on cuDNN {}",
        built["frontend"].as_str().unwrap_or("?"),
        built["cudnn"].as_str().unwrap_or("?")
    );
    // The frontend's plans are loaded unverified below only where its run
    // reported the cuDNN this process loaded (a remembered answer from
    // another is never read back: `oracle.rs`).
    let same_cudnn = loaded_cudnn().is_some_and(|v| built["cudnn"].as_str() == Some(v.as_str()));
    let results = built["results"].as_array().cloned().unwrap_or_default();
    if results.len() != rows.len() {
        return Err(Stop::Fail(format!(
            "the frontend side answered {} of {} items",
            results.len(),
            rows.len()
        )));
    }
    for (row, r) in rows.iter_mut().zip(&results) {
        row.theirs = side_from(r);
        row.blob = r["blob"].as_str().map(str::to_string);
        row.pass_by_values = r["pass_by_values"].clone();
        let (f, map, identical) = compare(row);
        row.findings = f;
        row.map = map;
        row.identical = identical;
    }
    // Cross-load: the frontend's plan into the crate (uids mapped to ours),
    // and ours into the frontend (uids mapped to the frontend's).
    let mut loads = Vec::new();
    let mut load_rows = Vec::new();
    for (i, row) in rows.iter_mut().enumerate() {
        let (Some(io), Some(fj), Some(cj), Some(blob)) = (
            row.io.clone(),
            row.theirs.plan_json.clone(),
            row.ours.plan_json.clone(),
            row.blob.clone(),
        ) else {
            continue;
        };
        let (Ok(fv), Ok(cv)) = (
            serde_json::from_str::<Value>(&fj),
            serde_json::from_str::<Value>(&cj),
        ) else {
            continue;
        };
        let target = &targets.iter().find(|t| t.0 == row.target).map(|t| &t.1);
        let Some(target) = target else { continue };
        // Where the comparison tied every bound tensor, scalar and scratch
        // tensor of the two graphs one to one (no `tensor` or `unmatched`
        // finding), the frontend's JSON is loaded unchanged, with this
        // pattern's tensor list renamed into the frontend's uids; elsewhere
        // only through the safe loader (compiled code refused), the JSON's
        // uids renamed into ours.
        let tied = !row
            .findings
            .iter()
            .any(|f| matches!(f.kind, "tensor" | "unmatched"));
        let theirs_io = if tied && same_cudnn {
            io_in_their_uids(&io, &row.map).map(Arc::new)
        } else {
            None
        };
        // The non-tied path loads the JSON with its uids renamed into ours
        // (renamed here, outside the timed load).
        let ours_uids: std::collections::HashSet<i64> =
            compare::tensors(&cv).keys().copied().collect();
        let mapped = compare::remap(&fv, &row.map, &ours_uids).to_string();
        let mut t_load = Vec::new();
        let load = || {
            let t0 = Instant::now();
            let r = match &theirs_io {
                // SAFETY: `fj` is, unchanged, cuDNN's JSON of the plan NVIDIA's
                // frontend built for this pattern on the cuDNN version this
                // process loaded (`same_cudnn`: the run that answered reported
                // it; in this run, or in an earlier one whose request,
                // frontend, cuDNN files, stub and environment were the same:
                // `oracle.rs` compares them all); `theirs_io` is this pattern's IoSignature with every
                // uid (tensors, scalars, scratch, ragged marks) renamed through
                // the one-to-one map `compare` built by matching the frontend's
                // tensors to ours, and `compare` found no tensor whose shape,
                // strides, type, by-value flag or scalar value differs and none
                // unmatched: it is the IoSignature of the graph the frontend
                // built the plan from (names aside).
                Some(tio) => unsafe { Plan::from_cudnn_json_unverified(&fj, target, tio.clone()) },
                None => Plan::from_cudnn_json(&mapped, target, io.clone()),
            };
            (r, t0.elapsed().as_secs_f64())
        };
        // `--reps`: every load a plan of its own; the median counts.
        let (mut loaded, t) = load();
        t_load.push(t);
        for _ in 1..args.reps {
            if loaded.is_err() {
                break;
            }
            let (l, t) = load();
            loaded = l;
            t_load.push(t);
        }
        // `--timing`: cuDNN's own part of the load, the loads again with
        // the backend clock on.
        if args.timing && loaded.is_ok() {
            let _on = timing::ClockOn::start();
            let mut parts = Vec::new();
            for _ in 0..args.reps.max(1) {
                let ((r, _), s) = timing::split(load);
                parts.push(s);
                if r.is_err() {
                    break;
                }
            }
            row.ours.cudnn.load = timing::median_part(parts);
        }
        match loaded {
            Ok(plan) => {
                row.ours.t_load = Some(timing::median(&mut t_load));
                row.loaded.0 = true;
                if Some(plan.workspace_size() as u64) != row.theirs.workspace {
                    row.findings.push(find(
                        "load_into_crate",
                        "workspace of the frontend's plan loaded here",
                        plan.workspace_size(),
                        opt(&row.theirs.workspace),
                    ));
                }
            }
            // The graphs differ and the plan carries compiled code: not
            // loaded here (no contract covers it), which is no finding.
            Err(cudnn::Error::Unsupported { what, .. })
                if !tied && what.contains("compiled kernel code") =>
            {
                eprintln!(
                    "{} on {}: not loaded into the crate (the graphs differ, and the plan carries compiled code)",
                    pats[row.pattern].name, row.target
                );
            }
            Err(e) => row.findings.push(find(
                "load_into_crate",
                "Plan::from_cudnn_json",
                format!("{e:#}"),
                "-",
            )),
        }
        let inverse: HashMap<i64, i64> = row.map.iter().map(|(f, c)| (*c, *f)).collect();
        let their_uids: std::collections::HashSet<i64> =
            compare::tensors(&fv).keys().copied().collect();
        let ours_in_theirs = compare::remap(&cv, &inverse, &their_uids).to_string();
        loads.push(
            json!({"pattern": pats[row.pattern].name, "target": row.target,
                          "blob": blob, "plan_json": ours_in_theirs}),
        );
        load_rows.push(i);
    }
    let loaded = oracle::frontend(
        &json!({"env": env, "targets": tjson, "items": loads, "reps": args.reps}),
        "load",
        fe,
        work,
        args.jobs,
        oracle,
    )?;
    let lres = loaded["results"].as_array().cloned().unwrap_or_default();
    for (&i, r) in load_rows.iter().zip(&lres) {
        let row = &mut rows[i];
        row.theirs.t_load = r["t_load_s"].as_f64();
        row.loaded.1 = r["error"].is_null();
        if let Some(e) = r["error"].as_str() {
            row.findings
                .push(find("load_into_frontend", "deserialize", "-", e));
        } else if r["workspace"].as_u64() != row.ours.workspace {
            row.findings.push(find(
                "load_into_frontend",
                "workspace of the crate's plan loaded there",
                opt(&row.ours.workspace),
                opt(&r["workspace"].as_u64()),
            ));
        }
    }
    Ok(rows)
}

fn report(pats: &[Pattern], rows: &[Row], timing: bool, verbose: bool, secs: f64) -> bool {
    println!(
        "| pattern | target | engines (mode A) | first engine | chosen | workspace B | plan JSON | cross-load | result |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut failed = 0;
    let mut used: Vec<&str> = Vec::new();
    let mut open_all = Vec::new();
    for row in rows {
        let p = &pats[row.pattern];
        let (ids, explained, open) = classify(p, &row.findings);
        if verbose {
            for (id, f) in &explained {
                eprintln!(
                    "  {} {} [{id}] [{}] {}: crate {} / frontend {}",
                    p.name, row.target, f.kind, f.path, f.ours, f.theirs
                );
            }
        }
        let pair = |a: String, b: String| if a == b { a } else { format!("{a} / {b}") };
        let verdict = if !open.is_empty() {
            failed += 1;
            open_all.push((p.name.clone(), row.target.clone(), open.clone()));
            "DIFFERS".to_string()
        } else if ids.is_empty() {
            "agree".to_string()
        } else {
            for id in &ids {
                if !used.contains(id) {
                    used.push(id);
                }
            }
            format!("agree but {}", ids.join(", "))
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            p.name,
            row.target,
            pair(opt(&row.ours.count_a), opt(&row.theirs.count_a)),
            pair(opt(&row.ours.first_engine), opt(&row.theirs.first_engine)),
            pair(opt(&row.ours.chosen), opt(&row.theirs.chosen)),
            pair(opt(&row.ours.workspace), opt(&row.theirs.workspace)),
            if row.identical {
                "identical"
            } else {
                "differs"
            },
            match row.loaded {
                (true, true) => "both ways",
                (true, false) => "theirs here only",
                (false, true) => "ours there only",
                (false, false) => "none",
            },
            verdict
        );
    }
    for d in DIFFERENCES.iter().filter(|d| used.contains(&d.id)) {
        println!("\n{}: {}\n    why: {}", d.id, d.what, d.why);
    }
    for (name, target, open) in &open_all {
        println!("\n{name} on {target}: not explained by a documented difference:");
        for f in open {
            println!(
                "  [{}] {}: crate {} / frontend {}",
                f.kind, f.path, f.ours, f.theirs
            );
        }
    }
    if timing {
        timing::report(pats, rows);
    }
    let both = rows.iter().filter(|r| r.loaded == (true, true)).count();
    println!(
        "\nconformance: {} graphs x targets ({} patterns), {} agree (exactly or by a documented difference), {} differ; plans cross-loaded both ways: {}; {:.1} s",
        rows.len(),
        pats.len(),
        rows.len() - failed,
        failed,
        both,
        secs
    );
    failed == 0 && memo_report()
}

/// What the finalize memo did (`--finalize-memo`), on stdout; false when a
/// plan the crate built here does not reload through its own loader (the
/// host tier's rule).
fn memo_report() -> bool {
    let memo = cudnn::graph::finalize_memo_stats();
    if let Some(off) = &memo.off {
        println!("conformance: the finalize memo is off ({off})");
    }
    if memo.folder.is_some() {
        println!(
            "conformance: the crate's plans: {} loaded from the finalize memo, {} compiled and stored, \
             {} not reloadable for cuDNN's score-subgraph gap (known), {} refused by the crate's loader",
            memo.hits, memo.stored, memo.score_subgraph_gap, memo.refused
        );
        for why in &memo.bad_why {
            println!("  bad memo entry (compiled again): {why}");
        }
    }
    for why in &memo.refused_why {
        println!("  FAILED: a plan built here does not reload: {why}");
    }
    memo.refused == 0
}

/// Whether a plan is an attention graph (the SDPA operation, or a composite
/// with a row max or a softmax).
fn p_family_is_sdpa(v: &Value) -> bool {
    let text = v["operationGraph"]["nodes"].to_string();
    text.contains("OPERATION_SDPA_")
        || text.contains("REDUCE_TENSOR_MAX")
        || text.contains("SOFTMAX")
}
