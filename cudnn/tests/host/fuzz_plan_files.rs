//! Fuzz target (host tier, in CI): every field of valid plan files for a
//! convolution (precompiled, and a runtime-compiled fusion), a matmul, a layer norm, an SDPA forward (also in the
//! frontend's SOFTMAX sub-descriptor form, cuDNN >= 9.21) and a composite SDPA
//! backward (H200 target), mutated one at a time, loaded with
//! `Plan::deserialize` in child processes.
//!
//! Each operation graph's nodes are also removed and duplicated one at a
//! time (issue 31), and each node operand is rewired to other tensors of
//! the graph, of its level and of another (a subgraph's), bounded per file.
//!
//! Asserts for every case: no crash, no panic, bounded time, and either a
//! plan or a typed error (ours before cuDNN, or cuDNN's own status); and that
//! enough cases get past the crate's checks to reach cuDNN. Many cases run
//! in one child (this binary re-executed in worker mode); a child that dies
//! is restarted after the case that killed it, which is reported.
//!
//! `CUDNN_RS_FUZZ_RAW=1` runs the same mutations straight into cuDNN
//! (bypassing the crate's checks), to count what cuDNN itself does with them.
use crate::support;
use crate::support::fuzz_child;
use crate::support::graph_plans;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use cudnn::Error;
use cudnn::graph::*;
use fuzz_child::{Outcome, run_cases};
use graph_plans::*;
use serde_json::Value;
use support::*;

const WORKER: &str = "CUDNN_RS_FUZZ_PLAN_WORKER";

/// One mutation of one plan file.
#[derive(Clone, Debug)]
enum Case {
    /// Set the JSON value at a pointer.
    Set(usize, String, Value),
    /// Remove an object key (pointer to it).
    Remove(usize, String),
    /// Set a node operand (pointer) to another tensor uid of the graph.
    Rewire(usize, String, String),
    /// Replace a line of the file's head (the IO signature section).
    Line(usize, usize, String),
    /// The file with the engine (and compiled code) of another file, loaded
    /// untrusted: the N=8 conv's tensor list and graph with the N=32 conv's
    /// payload, and every family's with every other's. Must be refused.
    Engine(usize, usize),
}

fn number_mutations(v: &Value) -> Vec<Value> {
    let mut m = vec![
        Value::from(0),
        Value::from(-1),
        Value::from(2147483648u64),
        Value::from(i64::MIN),
        Value::from("7"),
    ];
    if let Some(i) = v.as_i64() {
        m.push(Value::from(i.wrapping_add(1)));
    } else {
        m.push(Value::from(1e300));
    }
    m
}

fn string_mutations(s: &str) -> Vec<Value> {
    if s.len() > 256 {
        // Compiled code and parameter blocks: emptied, cut, one byte changed.
        let half: String = s.chars().take(s.len() / 2 / 4 * 4).collect();
        let mut flipped = s.to_string();
        flipped.replace_range(0..1, if s.starts_with('A') { "B" } else { "A" });
        return vec![Value::from(""), Value::from(half), Value::from(flipped)];
    }
    vec![
        Value::from(""),
        Value::from("0"),
        Value::from("2147483648"),
        Value::from("CUDNN_DATA_FLOAT"),
        Value::from(7),
    ]
}

/// Every mutation of every field (arrays: their first 3 entries).
fn json_cases(file: usize, v: &Value, path: &str, out: &mut Vec<Case>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = format!("{path}/{}", k.replace('~', "~0").replace('/', "~1"));
                out.push(Case::Remove(file, p.clone()));
                json_cases(file, x, &p, out);
            }
            out.push(Case::Set(file, format!("{path}/zzUnknown"), Value::from(1)));
        }
        Value::Array(a) => {
            if !path.is_empty() {
                out.push(Case::Set(file, path.to_string(), Value::Array(vec![])));
                out.push(Case::Set(
                    file,
                    path.to_string(),
                    Value::from(2147483648u64),
                ));
                let mut longer = a.clone();
                if let Some(first) = a.first() {
                    longer.push(first.clone());
                    out.push(Case::Set(file, path.to_string(), Value::Array(longer)));
                }
            }
            // An operation graph's nodes: each removed and each duplicated
            // (issue 31: a removed node crashed cuDNN in the trusted load).
            if path.ends_with("/nodes") {
                for i in 0..a.len() {
                    let mut fewer = a.clone();
                    fewer.remove(i);
                    out.push(Case::Set(file, path.to_string(), Value::Array(fewer)));
                    let mut more = a.clone();
                    more.push(a[i].clone());
                    out.push(Case::Set(file, path.to_string(), Value::Array(more)));
                }
            }
            for (i, x) in a.iter().enumerate().take(3) {
                json_cases(file, x, &format!("{path}/{i}"), out);
            }
        }
        Value::Number(_) => {
            for m in number_mutations(v) {
                out.push(Case::Set(file, path.to_string(), m));
            }
        }
        Value::String(s) => {
            for m in string_mutations(s) {
                out.push(Case::Set(file, path.to_string(), m));
            }
        }
        Value::Bool(b) => {
            out.push(Case::Set(file, path.to_string(), Value::from(!b)));
            out.push(Case::Set(file, path.to_string(), Value::from(0)));
        }
        Value::Null => {}
    }
}

/// The tensors an operation graph (and each subgraph) declares: `(uid,
/// is_virtual, graph path)`.
fn declared(v: &Value, path: &str, out: &mut Vec<(String, bool, String)>) {
    if let Some(ts) = v.get("tensors").and_then(Value::as_array) {
        for t in ts {
            if let Some(n) = t.get("name").and_then(Value::as_str) {
                let virt = t.get("isVirtual").and_then(Value::as_bool) == Some(true);
                out.push((n.to_string(), virt, path.to_string()));
            }
        }
    }
    if let Some(ns) = v.get("nodes").and_then(Value::as_array) {
        for (i, n) in ns.iter().enumerate() {
            if let Some(sg) = n.get("subgraph") {
                declared(sg, &format!("{path}/nodes/{i}/subgraph"), out);
            }
        }
    }
}

/// Every node's operand fields (a string naming a declared tensor),
/// subgraph nodes and sub-descriptors included: `(pointer, uid, graph)`.
fn operands(v: &Value, path: &str, uids: &[String], out: &mut Vec<(String, String, String)>) {
    let Some(ns) = v.get("nodes").and_then(Value::as_array) else {
        return;
    };
    fn fields(
        n: &Value,
        p: &str,
        graph: &str,
        uids: &[String],
        out: &mut Vec<(String, String, String)>,
    ) {
        let Some(m) = n.as_object() else { return };
        for (k, x) in m {
            match x {
                Value::String(u) if uids.contains(u) => {
                    out.push((format!("{p}/{k}"), u.clone(), graph.to_string()))
                }
                Value::Object(_) if k != "subgraph" => {
                    fields(x, &format!("{p}/{k}"), graph, uids, out)
                }
                _ => {}
            }
        }
    }
    for (i, n) in ns.iter().enumerate() {
        let p = format!("{path}/nodes/{i}");
        fields(n, &p, path, uids, out);
        if let Some(sg) = n.get("subgraph") {
            operands(sg, &format!("{p}/subgraph"), uids, out);
        }
    }
}

/// Most rewires per plan file (bounded run time).
const MAX_REWIRES: usize = 300;

/// Review finding 3: one node operand rewired to another tensor of the
/// graph: the next declared uid, one halfway round, and a virtual tensor of
/// another graph level (a subgraph's, read at the top, or the reverse).
/// Producers and consumers then disagree in dims, or a node reads what no
/// node of its level writes: each case must be refused (typed, or by
/// cuDNN) or load without a crash, through the safe loader
/// (`Trust::NoCompiledCode`). (Loaded unverified instead, 5 rewires of the
/// composite SDPA backward crashed cuDNN 9.28.1: the loader now refuses
/// those shapes, typed; 2 shape-legal ones still crash cuDNN 9.19's
/// unverified load, which an edited file is outside the contract of.)
fn rewire_cases(file: usize, v: &Value, out: &mut Vec<Case>) {
    let Some(g) = v.get("operationGraph") else {
        return;
    };
    let mut decl = Vec::new();
    declared(g, "/operationGraph", &mut decl);
    let mut uids: Vec<String> = decl.iter().map(|d| d.0.clone()).collect();
    uids.sort();
    uids.dedup();
    let mut ops = Vec::new();
    operands(g, "/operationGraph", &uids, &mut ops);
    let n = uids.len();
    let mut count = 0;
    for (ptr, uid, graph) in ops {
        let Some(at) = uids.iter().position(|u| *u == uid) else {
            continue;
        };
        let mut to = vec![uids[(at + 1) % n].clone(), uids[(at + n / 2) % n].clone()];
        if let Some(other) = decl
            .iter()
            .find(|(u, virt, gp)| *virt && *gp != graph && *u != uid)
        {
            to.push(other.0.clone());
        }
        to.sort();
        to.dedup();
        for t in to.into_iter().filter(|t| *t != uid) {
            if count >= MAX_REWIRES {
                return;
            }
            out.push(Case::Rewire(file, ptr.clone(), t));
            count += 1;
        }
    }
}

/// Mutations of the IO section: each tensor and scalar line, one field at a time.
fn line_cases(file: usize, head: &str, out: &mut Vec<Case>) {
    let lines: Vec<&str> = head.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        let f: Vec<&str> = l.split(' ').collect();
        let mut variants = Vec::new();
        if f.len() == 6 {
            // uid in|out dtype dims strides name_len
            let swap = |k: usize, v: String| {
                let mut g: Vec<String> = f.iter().map(|s| s.to_string()).collect();
                g[k] = v;
                g.join(" ")
            };
            variants.push(swap(
                0,
                format!("{}", f[0].parse::<i64>().unwrap_or(0) + 100),
            ));
            variants.push(swap(1, if f[1] == "in" { "out" } else { "in" }.into()));
            variants.push(swap(2, if f[2] == "f32" { "f16" } else { "f32" }.into()));
            let dims: Vec<i64> = f[3].split(',').filter_map(|x| x.parse().ok()).collect();
            if let Some(d0) = dims.first() {
                let mut d = dims.clone();
                d[0] = d0 * 4;
                variants.push(swap(
                    3,
                    d.iter()
                        .map(|x| x.to_string())
                        .collect::<Vec<_>>()
                        .join(","),
                ));
            }
            let strides: Vec<i64> = f[4].split(',').filter_map(|x| x.parse().ok()).collect();
            if let Some(s0) = strides.first() {
                let mut s = strides.clone();
                s[0] = s0 + 1;
                variants.push(swap(
                    4,
                    s.iter()
                        .map(|x| x.to_string())
                        .collect::<Vec<_>>()
                        .join(","),
                ));
            }
        } else if f.len() == 3 && f[1].len() <= 4 && f[0].parse::<i64>().is_ok() {
            // A scalar: uid dtype bits.
            variants.push(format!(
                "{} {} {}",
                f[0],
                if f[1] == "f32" { "f16" } else { "f32" },
                f[2]
            ));
            variants.push(format!(
                "{} {} {}",
                f[0].parse::<i64>().unwrap_or(0) + 100,
                f[1],
                f[2]
            ));
        } else if f.len() == 2 && f[0] == "cudnn" {
            variants.push("cudnn 90000".to_string());
        }
        for v in variants {
            out.push(Case::Line(file, i, v));
        }
    }
}

/// Files named `*.src` are only the source of engine swaps, not mutated.
const SOURCE_ONLY: &str = ".src";

fn all_cases(files: &[(String, String)]) -> Result<Vec<Case>, String> {
    let mut out = Vec::new();
    for (i, (name, f)) in files.iter().enumerate() {
        if name.ends_with(SOURCE_ONLY) {
            continue;
        }
        let (head, json) = split_plan_file(f).ok_or("plan file without JSON")?;
        let v: Value = serde_json::from_str(json).map_err(|e| e.to_string())?;
        json_cases(i, &v, "", &mut out);
        rewire_cases(i, &v, &mut out);
        line_cases(i, head, &mut out);
        for j in 0..files.len() {
            if j != i {
                out.push(Case::Engine(i, j));
            }
        }
    }
    Ok(out)
}

/// The mutated plan file of a case.
fn apply(files: &[String], case: &Case) -> Option<String> {
    let file = match case {
        Case::Set(f, ..)
        | Case::Remove(f, _)
        | Case::Line(f, ..)
        | Case::Engine(f, _)
        | Case::Rewire(f, ..) => files.get(*f)?,
    };
    let (head, json) = split_plan_file(file)?;
    match case {
        Case::Line(_, i, l) => {
            let mut lines: Vec<&str> = head.lines().collect();
            *lines.get_mut(*i)? = l;
            Some(with_json(&format!("{}\n", lines.join("\n")), json))
        }
        Case::Rewire(_, p, u) => {
            let mut doc: Value = serde_json::from_str(json).ok()?;
            *doc.pointer_mut(p)? = Value::String(u.clone());
            Some(with_json(head, &doc.to_string()))
        }
        Case::Set(_, p, v) => {
            let mut doc: Value = serde_json::from_str(json).ok()?;
            let (parent, key) = p.rsplit_once('/')?;
            match doc.pointer_mut(parent)? {
                Value::Object(m) => {
                    m.insert(key.replace("~1", "/").replace("~0", "~"), v.clone());
                }
                other => *other.pointer_mut(&format!("/{key}"))? = v.clone(),
            }
            Some(with_json(head, &doc.to_string()))
        }
        Case::Engine(_, from) => {
            let (_, other) = split_plan_file(files.get(*from)?)?;
            let other: Value = serde_json::from_str(other).ok()?;
            let mut doc: Value = serde_json::from_str(json).ok()?;
            *doc.pointer_mut("/engine")? = other.pointer("/engine")?.clone();
            Some(with_json(head, &doc.to_string()))
        }
        Case::Remove(_, p) => {
            let mut doc: Value = serde_json::from_str(json).ok()?;
            let (parent, key) = p.rsplit_once('/')?;
            doc.pointer_mut(parent)?
                .as_object_mut()?
                .remove(&key.replace("~1", "/").replace("~0", "~"));
            Some(with_json(head, &doc.to_string()))
        }
    }
}

fn describe(files: &[(String, String)], case: &Case) -> String {
    let name = |f: &usize| {
        files
            .get(*f)
            .map(|x| x.0.as_str())
            .unwrap_or("?")
            .to_string()
    };
    match case {
        Case::Set(f, p, v) => format!("{} {p} = {}", name(f), short(&v.to_string())),
        Case::Remove(f, p) => format!("{} remove {p}", name(f)),
        Case::Rewire(f, p, u) => format!("{} rewire {p} to tensor uid {u}", name(f)),
        Case::Line(f, i, l) => format!("{} line {i} = {l}", name(f)),
        Case::Engine(f, g) => format!("{} with the engine of {} (untrusted)", name(f), name(g)),
    }
}

fn short(s: &str) -> String {
    if s.len() > 60 {
        format!(
            "{}...",
            &s[..s.char_indices().nth(60).map(|c| c.0).unwrap_or(s.len())]
        )
    } else {
        s.to_string()
    }
}

/// Load one case: through the crate, or (raw) straight into cuDNN. The
/// field mutations load trusted (compiled code passed on, so the checks
/// that keep cuDNN from crashing are what is fuzzed); engine swaps load
/// untrusted, and a swap accepted with compiled code is a failure.
fn load_case(text: &str, raw: bool, t: &Target, trusted: bool, baseline: &Guards) -> Outcome {
    if raw {
        let json = split_plan_file(text).map(|x| x.1).unwrap_or("{}");
        return match raw_plan_finalize(json) {
            Ok(0) => Outcome::Accepted,
            Ok(_) => Outcome::RefusedByLibrary,
            Err(e) => Outcome::Untyped(format!("{e:?}")),
        };
    }
    let r = if trusted {
        // SAFETY: outside the contract on purpose for mutated inputs: `text` is a plan
        // file built here or a random mutation of one; the property under test is that
        // the checks refuse every mutation that would reach cuDNN unsafely, and no
        // loaded plan is ever executed (host test).
        unsafe { Plan::deserialize_unverified(text, t) }
    } else {
        Plan::deserialize(text, t, Trust::NoCompiledCode)
    };
    match r {
        Ok(p) if !trusted && p.is_runtime_compiled() => {
            Outcome::Untyped("an untrusted file with compiled code was loaded".to_string())
        }
        Ok(p) => match guard_defect(&p, baseline) {
            None => Outcome::Accepted,
            Some(d) => Outcome::Untyped(d),
        },
        Err(Error::Cudnn { .. }) => Outcome::RefusedByLibrary,
        Err(
            e
            @ (Error::InvalidArgument { .. } | Error::Mismatch { .. } | Error::Unsupported { .. }),
        ) => Outcome::Typed(e.to_string()),
        Err(e) => Outcome::Untyped(format!("{e:?}")),
    }
}

/// A plan's guarded inputs, by name.
type Guards = Vec<(String, InputGuard)>;

fn guards_of(p: &Plan) -> Guards {
    p.guarded_inputs()
        .into_iter()
        .map(|(n, g)| (n.to_string(), g))
        .collect()
}

/// What is wrong with an accepted plan's guarded inputs, if anything: each
/// must be a distinct input of its signature (an output is not bound as an
/// input), and no mutation may give lengths a larger extent than the
/// unmutated file (`baseline`) gives lengths of that name (a mutation can
/// only take bounds away from the loader's view, never add room); lengths
/// the baseline does not have stay within its largest extent or dim.
fn guard_defect(p: &Plan, baseline: &Guards) -> Option<String> {
    let io = p.io();
    let roomiest = io
        .tensors
        .iter()
        .flat_map(|t| t.spec.dims().iter().copied())
        .chain(baseline.iter().filter_map(|(_, g)| match g {
            InputGuard::SeqLengths { extent } => Some(*extent),
            _ => None,
        }))
        .max()
        .unwrap_or(0);
    let listed = p.guarded_inputs();
    for (i, &(name, g)) in listed.iter().enumerate() {
        if listed[..i].iter().any(|&(n, _)| n == name) {
            return Some(format!("guarded input `{name}` listed twice"));
        }
        match io.tensors.iter().find(|t| t.name == name) {
            Some(t) if !t.is_output => {}
            _ => return Some(format!("guarded `{name}` is not an input of the plan")),
        }
        let InputGuard::SeqLengths { extent } = g else {
            continue;
        };
        let before = baseline.iter().find_map(|(n, b)| match b {
            InputGuard::SeqLengths { extent } if n == name => Some(*extent),
            _ => None,
        });
        let limit = before.unwrap_or(roomiest);
        if !(0..=limit).contains(&extent) {
            return Some(format!(
                "lengths `{name}` bounded by {extent}, outside 0..={limit} (unmutated: {before:?})"
            ));
        }
    }
    None
}

fn read_files(dir: &Path) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| e.to_string())?
        .flatten()
        .map(|e| e.path())
        .collect();
    names.sort();
    for p in names {
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        out.push((
            name,
            std::fs::read_to_string(&p).map_err(|e| e.to_string())?,
        ));
    }
    Ok(out)
}

pub fn main() {
    if let Ok(args) = std::env::var(WORKER) {
        // Worker: dir, first case, end.
        let a: Vec<&str> = args.split('\u{1}').collect();
        let code = (|| -> Result<(), String> {
            let [dir, start, end] = a.as_slice() else {
                return Err("worker arguments".into());
            };
            let files = read_files(Path::new(dir))?;
            let texts: Vec<String> = files.iter().map(|f| f.1.clone()).collect();
            let cases = all_cases(&files)?;
            let raw = std::env::var("CUDNN_RS_FUZZ_RAW").is_ok_and(|v| v == "1");
            let t = Target::preset("h200").map_err(|e| e.to_string())?;
            let (start, end): (usize, usize) = (
                start.parse().map_err(|_| "start")?,
                end.parse().map_err(|_| "end")?,
            );
            // Each unmutated file's guarded inputs, the bounds no mutation
            // may widen.
            let baselines: Vec<Guards> = texts
                .iter()
                .map(|x| {
                    // SAFETY: `x` is `serialize()` of a plan built in this process with the loaded
                    // cuDNN, unchanged (the unmutated baselines).
                    unsafe { Plan::deserialize_unverified(x, &t) }
                        .map(|p| guards_of(&p))
                        .unwrap_or_default()
                })
                .collect();
            fuzz_child::worker(start, end.min(cases.len()), |i| {
                let case = cases.get(i);
                let text = case.and_then(|c| apply(&texts, c)).unwrap_or_default();
                // Rewires load through the safe loader: an edited file is
                // outside the unverified loaders' contract (cuDNN 9.19's
                // trusted load crashed on shape-legal rewires of composite
                // SDPA plans, whose kernels were compiled for the unedited
                // graph), and the safe path must hold for any file.
                let trusted = !matches!(case, Some(Case::Engine(..) | Case::Rewire(..)));
                let file = match case {
                    Some(
                        Case::Set(f, ..)
                        | Case::Remove(f, _)
                        | Case::Line(f, ..)
                        | Case::Engine(f, _)
                        | Case::Rewire(f, ..),
                    ) => *f,
                    None => 0,
                };
                let none = Guards::new();
                let baseline = baselines.get(file).unwrap_or(&none);
                load_case(&text, raw, &t, trusted, baseline)
            });
            Ok(())
        })();
        std::process::exit(i32::from(code.is_err()));
    }

    let t = vec![host9("fuzz_plan_file_mutations", || {
        let t0 = Instant::now();
        let target = Target::preset("h200")?;
        let dir = std::env::temp_dir().join(format!("cudnn-rs-fuzz-plans-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let files = plan_files(&target)?;
        let n = files.len();
        for (i, (name, text)) in files.into_iter().enumerate() {
            // The SDPA forward also in the frontend's form (its statistics
            // through a SOFTMAX sub-descriptor), where cuDNN loads it.
            if name == "sdpa_fwd"
                && cudnn::sys::cudnn::load()?
                    .info()
                    .version
                    .is_some_and(|v| (v.major, v.minor) >= (9, 21))
                && let Some((head, json)) = split_plan_file(&text)
                && let Some(form) = softmax_form(json)
            {
                std::fs::write(
                    dir.join(format!("{n}-sdpa_fwd_softmax.plan")),
                    with_json(head, &form),
                )?;
            }
            std::fs::write(dir.join(format!("{i}-{name}.plan")), text)?;
        }
        // The N=32 conv, whose engine is swapped into the N=8 conv's file.
        let (p32, _) = Plan::build(&conv(32)?.build()?, &target, &Policy::default())?;
        std::fs::write(dir.join(format!("z-conv32{SOURCE_ONLY}")), p32.serialize()?)?;
        let files = read_files(&dir)?;
        ensure!(
            !files.is_empty(),
            "no plan of any family could be built here"
        );
        let cases = all_cases(&files)?;
        eprintln!(
            "  {} plan files ({}), {} mutations, built in {:.1} s",
            files.len(),
            files
                .iter()
                .map(|f| f.0.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            cases.len(),
            t0.elapsed().as_secs_f64()
        );
        let report = run_cases(WORKER, &dir.to_string_lossy(), cases.len(), 2, |i| {
            cases
                .get(i)
                .map(|c| describe(&files, c))
                .unwrap_or_default()
        })?;
        let _ = std::fs::remove_dir_all(&dir);
        let mut per_file: BTreeMap<String, [usize; 3]> = BTreeMap::new();
        let mut rewires = [0usize; 3];
        for (i, o) in report.outcomes.iter().enumerate() {
            let f = match cases.get(i) {
                Some(
                    Case::Set(f, ..)
                    | Case::Remove(f, _)
                    | Case::Line(f, ..)
                    | Case::Engine(f, _)
                    | Case::Rewire(f, ..),
                ) => *f,
                None => continue,
            };
            if let Some(Case::Rewire(..)) = cases.get(i) {
                let k = match o {
                    Some(Outcome::Accepted) => 0,
                    Some(Outcome::RefusedByLibrary) => 1,
                    _ => 2,
                };
                rewires[k] += 1;
            }
            let e = per_file.entry(files[f].0.clone()).or_default();
            match o {
                Some(Outcome::Accepted) => e[0] += 1,
                Some(Outcome::RefusedByLibrary) => e[1] += 1,
                _ => e[2] += 1,
            }
        }
        for (f, [ok, lib, typed]) in &per_file {
            eprintln!("    {f}: {ok} loaded, {lib} refused by cuDNN, {typed} refused by the crate");
        }
        // A file none of whose mutations loads is a file the loader refuses
        // unmutated (a too-strict rule): its mutations then prove nothing.
        let dead: Vec<&String> = per_file
            .iter()
            .filter(|(_, c)| c[0] == 0)
            .map(|(f, _)| f)
            .collect();
        ensure!(dead.is_empty(), "no mutation of {dead:?} loads");
        let [ok, lib, other] = rewires;
        eprintln!(
            "    operand rewires: {ok} loaded, {lib} refused by cuDNN, {other} refused by the crate \
             (or a failure, listed above)"
        );
        ensure!(
            ok + lib + other > 0 || files.is_empty(),
            "no operand rewire case ran"
        );
        let checked = report.print_and_check(cases.len() / 20, std::time::Duration::from_secs(20));
        if std::env::var("CUDNN_RS_FUZZ_RAW").is_ok_and(|v| v == "1") {
            eprintln!("  (raw mode: cuDNN without the crate's checks; counts only)");
            return Ok(());
        }
        Ok(checked?)
    })];
    run(t)
}
