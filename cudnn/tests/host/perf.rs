//! Issue 34 (planning host cost): what the faster paths must keep.
//!
//! host tier (the real cuDNN, no device; plans for an H200 through the
//! driver stub):
//! - heuristics read each configuration's knobs and workspace only on
//!   demand: what they read then is what cuDNN put in the plan built from
//!   that configuration (its JSON's `knobChoices`, its workspace), and a
//!   policy that limits the workspace judges by the workspace cuDNN reports;
//!   a repeated mode adds nothing; a property test over random policies
//!   checks every verdict against a model of the policy rules;
//! - a plan JSON is parsed and checked once on load: whatever the full
//!   check (against the tensor list) accepts, the shape check the loader
//!   no longer repeats accepts too, over random single-field mutations of
//!   real plans of every family; and the faster scans (duplicate keys,
//!   base64 payloads) still refuse a repeated key and a non-base64 byte in
//!   a real compiled plan; a refusal inside a node names the field's
//!   whole path (hand-written: a conv node's fields and an unknown key, a
//!   native SDPA forward's subgraph uid and its SOFTMAX sub-descriptor's
//!   operation);
//! - `Plan::launch_checks` (the launch benchmark's entry) runs `execute`'s
//!   checks without the library call: one pack per set of pointers, and the
//!   refusals `execute` makes (over random subsets of bindings too);
//! - the backend clock (`bench-planning`'s split of each step into cuDNN's
//!   calls and the crate's code) counts every backend call this thread
//!   makes while it is on, by hand: create, each set, finalize, destroy;
//!   nothing while it is off, nothing another thread makes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use crate::support;
use crate::support::graph_plans;

use std::collections::BTreeMap;

use cudnn::graph::backend::{Descriptor, kind};
use cudnn::graph::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use serde_json::Value;
use support::*;

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        rng_seed: RngSeed::Fixed(34),
        failure_persistence: None,
        ..Config::default()
    })
}

fn permissive() -> Policy {
    Policy::default()
        .with_modes(vec![HeurMode::A])
        .with_allow_tf32(true)
        .with_allow_reduced_precision(true)
}

/// The knob values of a plan JSON's engine, by knob name.
fn json_knobs(json: &str) -> Result<BTreeMap<String, i64>, String> {
    let v: Value = serde_json::from_str(json).map_err(|e| e.to_string())?;
    let k = v["engine"]["knobChoices"]
        .as_object()
        .ok_or("plan JSON without /engine/knobChoices")?;
    k.iter()
        .map(|(n, x)| Ok((n.clone(), x.as_i64().ok_or("a knob value not an integer")?)))
        .collect()
}

fn lazy_knobs_and_workspace_match_the_plan() -> TestResult {
    let target = Target::preset("h200")?;
    for (name, g) in graph_plans::graphs()? {
        let og = g.build()?;
        let cands = heuristics::candidates(&og, &target, &permissive())?;
        let (plan, report) = Plan::build(&og, &target, &permissive())?;
        // Plan::build finalizes the accepted configurations in order; the
        // first that finalized is the chosen one.
        let skipped = report.failures.len();
        let c = cands
            .iter()
            .filter(|c| c.rejected.is_none())
            .nth(skipped)
            .ok_or("the chosen configuration is among the candidates")?;
        ensure!(
            Some(c.engine) == plan.engine(),
            "{name}: engine {} / plan {:?}",
            c.engine,
            plan.engine()
        );
        ensure!(
            c.describe().contains("ws ? B"),
            "{name}: the workspace was read before it was asked for: {}",
            c.describe()
        );
        // The truth: cuDNN's JSON of the plan built from this configuration.
        // The plan lists every knob of its engine, those the configuration
        // leaves at their default as -1.
        let truth = json_knobs(&plan.cudnn_json()?)?;
        let knobs = c.knobs()?;
        let chosen = |v: &mut dyn Iterator<Item = i64>| {
            let mut v: Vec<i64> = v.filter(|&x| x != -1).collect();
            v.sort_unstable();
            v
        };
        let ours = chosen(&mut knobs.iter().map(|k| k.value));
        let theirs = chosen(&mut truth.values().copied());
        ensure!(
            ours == theirs && knobs.len() <= truth.len(),
            "{name}: knob values {ours:?}, the plan's {truth:?}"
        );
        ensure!(c.knobs()? == knobs, "{name}: a second read differs");
        // Scratch tensors add to the plan's workspace, past cuDNN's.
        if og.io().scratch.is_empty() {
            ensure!(
                c.workspace()? as usize == plan.workspace_size(),
                "{name}: workspace {} / the plan's {}",
                c.workspace()?,
                plan.workspace_size()
            );
        } else {
            ensure!(
                (c.workspace()? as usize) < plan.workspace_size(),
                "{name}: cuDNN's workspace {} not below the plan's {} (scratch after it)",
                c.workspace()?,
                plan.workspace_size()
            );
        }
        ensure!(
            !c.describe().contains('?'),
            "{name}: read values not shown: {}",
            c.describe()
        );
        eprintln!(
            "  {name}: {} configurations, engine {} knobs {} ws {} B",
            cands.len(),
            c.engine,
            knobs.len(),
            c.workspace()?
        );
    }
    Ok(())
}

fn workspace_limit_judges_by_the_workspace() -> TestResult {
    let target = Target::preset("h200")?;
    for (name, g) in graph_plans::graphs()? {
        let og = g.build()?;
        let free = heuristics::candidates(&og, &target, &permissive())?;
        for limit in [0u64, 1 << 20] {
            let p = permissive().with_max_workspace(Some(limit));
            let limited = heuristics::candidates(&og, &target, &p)?;
            ensure!(
                limited.len() == free.len(),
                "{name}: {} / {} configurations",
                limited.len(),
                free.len()
            );
            for (c, f) in limited.iter().zip(&free) {
                ensure!(c.engine == f.engine, "{name}: order changed");
                let ws = f.workspace()?;
                let over = ws > limit;
                let said = c
                    .rejected
                    .as_deref()
                    .is_some_and(|r| r.contains("over the limit"));
                ensure!(
                    over == said,
                    "{name}: engine {} ws {ws} B, limit {limit}: {:?}",
                    c.engine,
                    c.rejected
                );
                if !over {
                    ensure!(c.rejected == f.rejected, "{name}: verdicts differ");
                }
            }
        }
    }
    Ok(())
}

/// A configuration: its engine and `(knob type, value)` choices.
type ConfigId = (i64, Vec<(u32, i64)>);

fn repeated_modes_add_nothing() -> TestResult {
    let target = Target::preset("h200")?;
    for (name, g) in graph_plans::graphs()? {
        let og = g.build()?;
        let one = heuristics::candidates(&og, &target, &permissive())?;
        let twice = heuristics::candidates(
            &og,
            &target,
            &permissive().with_modes(vec![HeurMode::A, HeurMode::A]),
        )?;
        let ids = |l: &[Candidate<'_>]| -> cudnn::Result<Vec<ConfigId>> {
            l.iter()
                .map(|c| {
                    Ok((
                        c.engine,
                        c.knobs()?.iter().map(|k| (k.kind, k.value)).collect(),
                    ))
                })
                .collect()
        };
        ensure!(
            ids(&one)? == ids(&twice)?,
            "{name}: mode A twice lists {} configurations, once {}",
            twice.len(),
            one.len()
        );
        let both = heuristics::candidates(
            &og,
            &target,
            &permissive().with_modes(vec![HeurMode::A, HeurMode::Fallback]),
        )?;
        let mut all = ids(&both)?;
        let n = all.len();
        all.sort();
        all.dedup();
        ensure!(all.len() == n, "{name}: a configuration listed twice");
        ensure!(n >= one.len(), "{name}: A + fallback lists fewer than A");
    }
    Ok(())
}

/// The policy rules, written out again: why `p` rejects `c` (`None`:
/// accepted), for a graph with f32 data where `f32`.
fn model(c: &Candidate<'_>, p: &Policy, f32: bool) -> Result<Option<&'static str>, cudnn::Error> {
    let n = &c.numerical_notes;
    let b = &c.behavior_notes;
    Ok(
        if p.max_workspace
            .is_some_and(|m| c.workspace().is_ok_and(|w| w > m))
        {
            Some("over the limit")
        } else if p.deterministic_only && n.contains(&NumericalNote::Nondeterministic) {
            Some("nondeterministic")
        } else if f32 && !p.allow_tf32 && n.contains(&NumericalNote::TensorCore) {
            Some("TF32")
        } else if !p.allow_reduced_precision && n.contains(&NumericalNote::DownConvertInputs) {
            Some("down-converts")
        } else if !p.allow_reduced_precision
            && n.contains(&NumericalNote::ReducedPrecisionReduction)
        {
            Some("reduced-precision")
        } else if !p.allow_runtime_compilation && b.contains(&BehaviorNote::RuntimeCompilation) {
            Some("compiles at run time")
        } else if p.require_native_cuda_graph
            && !b.contains(&BehaviorNote::SupportsCudaGraphNativeApi)
        {
            Some("CUDA-graph")
        } else {
            None
        },
    )
}

fn random_policies_match_the_model() -> TestResult {
    let target = Target::preset("h200")?;
    let graphs: Vec<(&str, OpGraph, bool)> = graph_plans::graphs()?
        .into_iter()
        .map(|(n, g)| {
            let f32 = n == "conv_plain";
            g.build().map(|og| (n, og, f32))
        })
        .collect::<cudnn::Result<_>>()?;
    let mode = prop_oneof![
        Just(HeurMode::A),
        Just(HeurMode::B),
        Just(HeurMode::Fallback),
        Just(HeurMode::Instant)
    ];
    let policy = (
        proptest::collection::vec(mode, 1..3),
        proptest::option::of(prop_oneof![Just(0u64), 1u64..(64 << 20), Just(u64::MAX)]),
        any::<[bool; 5]>(),
    )
        .prop_map(|(modes, max_workspace, f)| {
            Policy::default()
                .with_modes(modes)
                .with_max_workspace(max_workspace)
                .with_deterministic_only(f[0])
                .with_allow_tf32(f[1])
                .with_allow_reduced_precision(f[2])
                .with_allow_runtime_compilation(f[3])
                .with_require_native_cuda_graph(f[4])
        });
    let mut r = runner(48);
    r.run(&(0..graphs.len(), policy), |(i, p)| {
        let (name, og, f32) = &graphs[i];
        let cands = heuristics::candidates(og, &target, &p)
            .map_err(|e| TestCaseError::fail(format!("{name} {p:?}: {e}")))?;
        for c in &cands {
            let want = model(c, &p, *f32).map_err(|e| TestCaseError::fail(e.to_string()))?;
            match (want, &c.rejected) {
                (None, None) => {}
                (Some(w), Some(r)) if r.contains(w) => {}
                (w, r) => {
                    return Err(TestCaseError::fail(format!(
                        "{name} {p:?}: engine {}: model {w:?}, crate {r:?}",
                        c.engine
                    )));
                }
            }
            // Reads on demand agree with themselves.
            let k = c.knobs().map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(c.knobs().ok(), Some(k));
        }
        Ok(())
    })
    .map_err(|e| format!("{e}"))?;
    Ok(())
}

/// Every pointer to a number, string or object member of `v`.
fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                out.push(p.clone());
                pointers(x, p, out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                pointers(x, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

fn mutate(v: &Value, at: &str, how: u8) -> Option<Value> {
    let mut v = v.clone();
    let (parent, key) = at.rsplit_once('/')?;
    let key = key.replace("~1", "/").replace("~0", "~");
    let slot = v.pointer_mut(at)?;
    let new = match (how % 6, &*slot) {
        (0, _) => Value::from(0),
        (1, Value::Number(n)) => Value::from(n.as_i64().unwrap_or(0).wrapping_add(1)),
        (2, Value::Number(n)) => Value::from(n.as_i64().unwrap_or(0).wrapping_neg()),
        (3, Value::String(s)) => Value::from(format!("{s}x")),
        (4, _) => Value::from("CUDNN_DATA_FLOAT"),
        _ => {
            v.pointer_mut(parent)?.as_object_mut()?.remove(&key)?;
            return Some(v);
        }
    };
    *slot = new;
    Some(v)
}

fn full_check_implies_the_shape_check() -> TestResult {
    let target = Target::preset("h200")?;
    let mut plans = Vec::new();
    for (name, g) in graph_plans::graphs()? {
        let og = g.build()?;
        let (plan, _) = Plan::build(&og, &target, &Policy::default())?;
        let json = plan.cudnn_json()?;
        let v: Value = serde_json::from_str(&json).map_err(|e| e.to_string())?;
        let cudnn = v["cudnnVersion"].as_u64();
        let mut ptrs = Vec::new();
        pointers(&v, String::new(), &mut ptrs);
        plans.push((name, og.io().clone(), v, cudnn, ptrs));
    }
    let accepted = std::cell::Cell::new(0usize);
    let mut r = runner(400);
    r.run(
        &(0..plans.len(), any::<prop::sample::Index>(), any::<u8>()),
        |(i, at, how)| {
            let (name, io, v, cudnn, ptrs) = &plans[i];
            let at = at.get(ptrs);
            let Some(m) = mutate(v, at, how) else {
                return Ok(());
            };
            let text = m.to_string();
            if check_plan_json(&text, io, &target, *cudnn).is_err() {
                return Ok(());
            }
            accepted.set(accepted.get() + 1);
            let mut d = Descriptor::<kind::ExecutionPlan>::new()
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let mut bytes = text.into_bytes();
            bytes.push(0);
            // SAFETY: the JSON passed the crate's full check against the
            // plan's own tensor list (what `Plan::from_cudnn_json` hands
            // cuDNN), and the descriptor is dropped unfinalized: cuDNN
            // never builds or runs the plan.
            let shape = unsafe { d.set_plan_json_unchecked(&bytes) };
            prop_assert!(
                shape.is_ok(),
                "{} {} (mutation {}): the full check accepts, the shape check refuses: {:?}",
                name,
                at,
                how % 6,
                shape
            );
            Ok(())
        },
    )
    .map_err(|e| format!("{e}"))?;
    let accepted = accepted.get();
    eprintln!("  {accepted} of 400 mutations accepted by the full check, all by the shape check");
    // Vacuous if the full check refused everything: enough mutations (value
    // edits the tensor list does not pin) must reach the comparison.
    ensure!(
        accepted >= 20,
        "only {accepted} of 400 mutations were accepted by the full check: the comparison with the shape check barely ran"
    );
    Ok(())
}

fn fast_scans_still_refuse() -> TestResult {
    let target = Target::preset("h200")?;
    let og = graph_plans::conv(8)?.build()?;
    let (plan, _) = Plan::build(&og, &target, &Policy::default())?;
    let json = plan.cudnn_json()?;
    let io = std::sync::Arc::new(og.io().clone());
    check_plan_json(&json, &io, &target, None)?;
    // A repeated key at the very end, after the engine's payload (the scan
    // must have skipped every long string, word at a time, to reach it).
    // The engine object is the plan's last member: its closing brace is the
    // one before the root's.
    let root = json
        .trim_end()
        .rfind('}')
        .ok_or("a plan JSON that is no object")?;
    let engine_end = json[..root]
        .trim_end()
        .rfind('}')
        .ok_or("no engine object")?;
    let dup = format!(
        "{},\"engineId\":0{}",
        &json[..engine_end],
        &json[engine_end..]
    );
    ensure!(
        json.contains("\"engineId\""),
        "no engineId in the plan JSON"
    );
    let e = Plan::from_cudnn_json(&dup, &target, io.clone())
        .err()
        .ok_or("a repeated key was loaded")?;
    ensure!(e.to_string().contains("repeat a key"), "{e}");
    // A byte outside base64 in the compiled code, at its start, middle and end.
    let v: Value = serde_json::from_str(&json).map_err(|e| e.to_string())?;
    let Some(payload) = v["engine"]["payload"].as_object() else {
        // cuDNN 9.28's conv + scale plan for an H200 is runtime-compiled;
        // where the libraries are required, a stack whose plan is not must
        // say so loudly rather than pass without the case.
        let loaded = cudnn::sys::cudnn::load()
            .ok()
            .and_then(|l| l.info().version);
        if std::env::var("CUDNN_RS_REQUIRE_LIBS").is_ok_and(|v| v == "1")
            && loaded.is_some_and(|v| (v.major, v.minor) >= (9, 28))
        {
            return Err(format!("cuDNN {loaded:?}: the conv + scale plan carries no compiled code, so the base64 case cannot run").into());
        }
        eprintln!(
            "  skipped (this case): this cuDNN's conv + scale plan carries no compiled code: base64 case not run"
        );
        return Ok(());
    };
    let blob = payload
        .get("Records")
        .or_else(|| payload["kernels"][0].get("cubin"))
        .and_then(Value::as_str)
        .ok_or("a payload without Records or a cubin")?
        .to_string();
    eprintln!("  compiled code: {} base64 bytes", blob.len());
    for at in [0, blob.len() / 2, blob.len() - 2] {
        let mut bad = blob.clone().into_bytes();
        bad[at] = b'!';
        let bad = String::from_utf8(bad).map_err(|e| e.to_string())?;
        let edited = json.replacen(&blob, &bad, 1);
        // The safe loader: its checks run before it refuses compiled code.
        let e = Plan::from_cudnn_json(&edited, &target, io.clone())
            .err()
            .ok_or("a non-base64 payload was loaded")?;
        ensure!(e.to_string().contains("base64"), "at {at}: {e}");
    }
    Ok(())
}

/// Device-properties descriptors are kept per thread (the last 4): plans
/// for 5 presets in turn, twice, each carry their own target's profile.
fn device_properties_kept_per_target() -> TestResult {
    let og = graph_plans::conv_plain(2)?.build()?;
    for round in 0..2 {
        for name in ["h200", "a100", "h100", "l4", "b200"] {
            let t = Target::preset(name)?;
            let (plan, _) = Plan::build(&og, &t, &Policy::default())?;
            let v: Value = serde_json::from_str(&plan.cudnn_json()?).map_err(|e| e.to_string())?;
            let want: Value =
                serde_json::from_str(t.properties().json()).map_err(|e| e.to_string())?;
            for k in ["deviceVer", "multiProcessorCount", "totalGlobalMem"] {
                ensure!(
                    v["GPUProfile"][k] == want[k],
                    "round {round}, {name}: plan {k} {} / target {}",
                    v["GPUProfile"][k],
                    want[k]
                );
            }
            // And reloads for its own target only.
            let io = std::sync::Arc::new(og.io().clone());
            Plan::from_cudnn_json(&plan.cudnn_json()?, &t, io)?;
        }
    }
    Ok(())
}

/// A tensor descriptor made and finalized: one create, five sets, one
/// finalize (seven backend calls).
fn tensor_descriptor() -> cudnn::Result<Descriptor<kind::Tensor>> {
    use cudnn::graph::backend::attr;
    use cudnn::sys::cudnn::cudnnDataType_t;
    let mut t = Descriptor::<kind::Tensor>::new()?;
    t.set(attr::TENSOR_DATA_TYPE, &[cudnnDataType_t::CUDNN_DATA_FLOAT])?;
    t.set(attr::TENSOR_DIMENSIONS, &[1, 8, 4, 4])?;
    t.set(attr::TENSOR_STRIDES, &[128, 16, 4, 1])?;
    t.set(attr::TENSOR_UNIQUE_ID, &[1])?;
    t.set(attr::TENSOR_BYTE_ALIGNMENT, &[16])?;
    t.finalize()?;
    Ok(t)
}

fn backend_clock_counts_this_threads_calls() -> TestResult {
    // No other test turns the clock on: this one owns the switch.
    struct Off;
    impl Drop for Off {
        fn drop(&mut self) {
            set_backend_clock(false);
        }
    }
    let _off = Off;
    set_backend_clock(true);
    let _ = take_backend_clock();
    let t = tensor_descriptor()?;
    let c = take_backend_clock();
    ensure!(c.calls == 7, "create + 5 sets + finalize: {c:?}");
    ensure!(!c.spent.is_zero(), "{c:?}");
    // A read, then the destroy (Drop).
    let mut dims = [0i64; 8];
    t.get(cudnn::graph::backend::attr::TENSOR_DIMENSIONS, &mut dims)?;
    drop(t);
    let c = take_backend_clock();
    ensure!(c.calls == 2, "get + destroy: {c:?}");
    // The explicit destroy is one call too.
    let t = tensor_descriptor()?;
    let _ = take_backend_clock();
    t.destroy()?;
    let c = take_backend_clock();
    ensure!(c.calls == 1, "destroy: {c:?}");
    // A refusal before cuDNN is called is no call.
    let mut t = tensor_descriptor()?;
    let _ = take_backend_clock();
    ensure!(t.finalize().is_err(), "a second finalize must be refused");
    let c = take_backend_clock();
    ensure!(c.calls == 0, "refused before cuDNN: {c:?}");
    drop(t);
    // Another thread's calls are its own.
    let _ = take_backend_clock();
    let other = std::thread::spawn(|| -> cudnn::Result<u64> {
        drop(tensor_descriptor()?);
        Ok(take_backend_clock().calls)
    })
    .join()
    .map_err(|_| "the other thread panicked".to_string())??;
    ensure!(other == 8, "the other thread's own calls: {other}");
    let c = take_backend_clock();
    ensure!(c.calls == 0, "this thread made none: {c:?}");
    // Off: nothing counted.
    set_backend_clock(false);
    drop(tensor_descriptor()?);
    let c = take_backend_clock();
    ensure!(c == BackendClock::default(), "clock off: {c:?}");
    Ok(())
}

/// The descriptor calls a planning step makes are made in one file, at the
/// sites the backend clock wraps: a new call site elsewhere would make
/// `bench-planning`'s split count it as the crate's own code.
fn every_backend_call_is_clocked() -> TestResult {
    use support::scan::{count_calls, sources};
    // (call, sites in graph/backend/mod.rs, each wrapped by the clock)
    const CALLS: [(&str, usize); 5] = [
        ("cudnnBackendCreateDescriptor", 1),
        ("cudnnBackendSetAttribute", 1),
        ("cudnnBackendGetAttribute", 1),
        ("cudnnBackendFinalize", 1),
        ("cudnnBackendDestroyDescriptor", 2),
    ];
    let mut found = Vec::new();
    for (file, text) in sources()? {
        for (call, _) in CALLS {
            let n = count_calls(&text, call);
            if n > 0 {
                found.push((file.clone(), call, n));
            }
        }
    }
    found.sort();
    let mut want: Vec<(String, &str, usize)> = CALLS
        .iter()
        .map(|&(c, n)| ("graph/backend/mod.rs".to_string(), c, n))
        .collect();
    want.sort();
    ensure!(
        found == want,
        "backend call sites {found:?}, expected {want:?}"
    );
    // Each site sits between a clock start and stop.
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/graph/backend/mod.rs"),
    )
    .map_err(|e| e.to_string())?;
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if !CALLS.iter().any(|(c, _)| count_calls(line, c) > 0) {
            continue;
        }
        let before = lines[i.saturating_sub(6)..i]
            .iter()
            .any(|l| l.contains("clock::start()"));
        let after = lines[i..(i + 6).min(lines.len())]
            .iter()
            .any(|l| l.contains("clock::stop(t)"));
        ensure!(
            before && after,
            "line {}: `{}` is not clocked",
            i + 1,
            line.trim()
        );
    }
    Ok(())
}

/// Bind every tensor of `plan` at fake, aligned addresses from `base`
/// (only `Plan::launch_checks` sees them: nothing is launched), except the
/// names in `skip`; f16 tensors only (the graphs here).
fn fake_bindings<'p>(plan: &'p Plan, base: usize, skip: &[&str]) -> cudnn::Result<Bindings<'p>> {
    use cudnn::runtime::{DeviceSlice, DeviceSliceMut};
    let mut b = plan.bindings();
    let mut at = base;
    for t in &plan.io().tensors {
        let n = t.spec.span_bytes()? / 2;
        if !skip.contains(&t.name.as_str()) {
            // SAFETY: these views reach only `launch_checks`, which never
            // hands an address to a library call.
            unsafe {
                if t.is_output {
                    b.output(
                        &t.name,
                        DeviceSliceMut::from_raw_parts_mut(at as *mut half::f16, n),
                    )?;
                } else {
                    b.input(
                        &t.name,
                        DeviceSlice::from_raw_parts(at as *const half::f16, n),
                    )?;
                }
            }
        }
        at += (n * 2).next_multiple_of(256) + 256;
    }
    Ok(b)
}

/// `Plan::launch_checks` runs `execute`'s checks without the library
/// call: the pack is built once and reused while no pointer changes,
/// rebuilt when the workspace moves; a missing binding, a short workspace
/// and another plan's bindings are refused as `execute` refuses them.
fn launch_checks_are_executes() -> TestResult {
    use cudnn::runtime::DeviceSliceMut;
    let target = Target::preset("h200")?;
    let og = graph_plans::conv(8)?.build()?;
    let (plan, _) = Plan::build(&og, &target, &Policy::default())?;
    let ws = plan.workspace_size().max(1);
    let mut b = fake_bindings(&plan, 0x7f00_0000_0000, &[])?;
    if plan.workspace_size() > 0 {
        let e = plan
            .launch_checks(&mut b, None, LaunchStage::Pack)
            .err()
            .ok_or("no workspace bound, and no handle to take one from")?;
        ensure!(e.to_string().contains("workspace"), "{e}");
    }
    // SAFETY: as in `fake_bindings`.
    let view = unsafe { DeviceSliceMut::from_raw_parts_mut(0x7e00_0000_0000 as *mut u8, ws) };
    b.workspace(view)?;
    for _ in 0..3 {
        plan.launch_checks(&mut b, None, LaunchStage::Pack)?;
    }
    ensure!(
        b.packs_built() == 1,
        "{} packs for one set of pointers",
        b.packs_built()
    );
    // SAFETY: as in `fake_bindings`.
    let view = unsafe { DeviceSliceMut::from_raw_parts_mut(0x7d00_0000_0000 as *mut u8, ws) };
    b.workspace(view)?;
    plan.launch_checks(&mut b, None, LaunchStage::Pack)?;
    ensure!(
        b.packs_built() == 2,
        "the moved workspace did not rebuild the pack"
    );
    // The earlier stages build nothing.
    plan.launch_checks(&mut b, None, LaunchStage::Lock)?;
    ensure!(b.packs_built() == 2, "the lock stage built a pack");
    // Too short a workspace.
    if plan.workspace_size() > 1 {
        // SAFETY: as in `fake_bindings`.
        let short = unsafe {
            DeviceSliceMut::from_raw_parts_mut(
                0x7c00_0000_0000 as *mut u8,
                plan.workspace_size() - 1,
            )
        };
        b.workspace(short)?;
        ensure!(
            plan.launch_checks(&mut b, None, LaunchStage::Bindings)
                .is_err(),
            "a short workspace passed"
        );
    }
    // The bindings of a plan of another graph (plans of one graph share
    // its tensor list, and bindings between them).
    let other_graph = graph_plans::conv(16)?.build()?;
    let (other, _) = Plan::build(&other_graph, &target, &Policy::default())?;
    let mut ob = fake_bindings(&other, 0x7b00_0000_0000, &[])?;
    // SAFETY: as in `fake_bindings`.
    let view = unsafe { DeviceSliceMut::from_raw_parts_mut(0x7a00_0000_0000 as *mut u8, ws) };
    ob.workspace(view)?;
    let e = plan
        .launch_checks(&mut ob, None, LaunchStage::Bindings)
        .err()
        .ok_or("another plan's bindings passed")?;
    ensure!(e.to_string().contains("another plan"), "{e}");
    Ok(())
}

/// Random subsets of bindings: the checks pass exactly when every tensor
/// is bound, and a missing one is named.
fn launch_checks_random_bindings() -> TestResult {
    use cudnn::runtime::DeviceSliceMut;
    let target = Target::preset("h200")?;
    let og = graph_plans::conv(8)?.build()?;
    let (plan, _) = Plan::build(&og, &target, &Policy::default())?;
    let names: Vec<String> = plan.io().tensors.iter().map(|t| t.name.clone()).collect();
    let ws = plan.workspace_size().max(1);
    let mut r = runner(64);
    r.run(
        &(
            proptest::collection::vec(any::<bool>(), names.len()),
            1usize..1 << 20,
        ),
        |(keep, page)| {
            let skip: Vec<&str> = names
                .iter()
                .zip(&keep)
                .filter(|(_, k)| !**k)
                .map(|(n, _)| n.as_str())
                .collect();
            let base = 0x1000_0000_0000 + page * 4096;
            let mut b = fake_bindings(&plan, base, &skip)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            // SAFETY: as in `fake_bindings`.
            let view =
                unsafe { DeviceSliceMut::from_raw_parts_mut(0x7e00_0000_0000 as *mut u8, ws) };
            b.workspace(view)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let r = plan.launch_checks(&mut b, None, LaunchStage::Pack);
            match (skip.first(), r) {
                (None, Ok(())) => {}
                (Some(n), Err(e)) => prop_assert!(e.to_string().contains(*n), "{n}: {e}"),
                (s, r) => return Err(TestCaseError::fail(format!("skipped {s:?}: {r:?}"))),
            }
            Ok(())
        },
    )
    .map_err(|e| format!("{e}"))?;
    Ok(())
}

/// A refusal inside a node names the field's whole path (joined only when
/// a refusal is made): written here by hand for edits of a real conv plan.
fn node_refusals_name_the_path() -> TestResult {
    let target = Target::preset("h200")?;
    let og = graph_plans::conv(8)?.build()?;
    let (plan, _) = Plan::build(&og, &target, &Policy::default())?;
    let json = plan.cudnn_json()?;
    let io = std::sync::Arc::new(og.io().clone());
    let doc: Value = serde_json::from_str(&json).map_err(|e| e.to_string())?;
    let nodes = doc["operationGraph"]["nodes"]
        .as_array()
        .ok_or("no nodes")?;
    let n = nodes
        .iter()
        .position(|n| n["operation"] == "CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR")
        .ok_or("no convolution node")?;
    for (at, value, path) in [
        (
            format!("/operationGraph/nodes/{n}/W"),
            Value::from(""),
            format!("/operationGraph/nodes/{n}/W"),
        ),
        (
            format!("/operationGraph/nodes/{n}/stride/1"),
            Value::from(0),
            format!("/operationGraph/nodes/{n}/stride/1"),
        ),
        (
            format!("/operationGraph/nodes/{n}/mode"),
            Value::from("x"),
            format!("/operationGraph/nodes/{n}/mode"),
        ),
        (
            format!("/operationGraph/nodes/{n}/operation"),
            Value::from(7),
            format!("/operationGraph/nodes/{n}/operation"),
        ),
    ] {
        let mut d = doc.clone();
        *d.pointer_mut(&at).ok_or(format!("no {at}"))? = value;
        let e = check_plan_json(&d.to_string(), &io, &target, None)
            .err()
            .ok_or(format!("{at}: the edit was accepted"))?;
        ensure!(
            e.to_string().contains(&format!("{path} "))
                || e.to_string().contains(&format!("{path}`"))
                || e.to_string().contains(&format!("{path}:")),
            "{at}: {e}"
        );
    }
    // An unknown key of the node.
    refused_at(
        &doc,
        &io,
        &target,
        "unknown key",
        &format!("/operationGraph/nodes/{n}/notAKey"),
        |d| {
            d.pointer_mut(&format!("/operationGraph/nodes/{n}"))?
                .as_object_mut()?
                .insert("notAKey".into(), Value::from(1));
            Some(())
        },
    )?;
    Ok(())
}

/// Refuses `edit` of `doc` (a plan JSON of `io`) and names `path` (one of
/// the forms a refusal writes a path in).
fn refused_at(
    doc: &Value,
    io: &std::sync::Arc<cudnn::graph::IoSignature>,
    target: &Target,
    label: &str,
    path: &str,
    edit: impl FnOnce(&mut Value) -> Option<()>,
) -> TestResult {
    let mut d = doc.clone();
    edit(&mut d).ok_or(format!("{label}: the edit found nothing to change"))?;
    let e = check_plan_json(&d.to_string(), io, target, None)
        .err()
        .ok_or(format!("{label}: the edit was accepted"))?;
    let s = e.to_string();
    ensure!(
        s.contains(&format!("{path} "))
            || s.contains(&format!("{path}`"))
            || s.contains(&format!("{path}:")),
        "{label}: wants {path}: {e}"
    );
    Ok(())
}

/// The refusals inside a node that the conv plan cannot show, named by the
/// hand-written path: a subgraph uid that names a tensor outside the node's
/// subgraph (the native SDPA forward's causal
/// mask), and the SOFTMAX sub-descriptor's operation (the SDPA forward in
/// the form NVIDIA's frontend writes, `softmax.operation`).
fn sdpa_node_refusals_name_the_path() -> TestResult {
    let target = Target::preset("h200")?;
    // The native SDPA forward (causal: a mask subgraph; training: stats).
    let og = graph_plans::sdpa(false)?.build()?;
    let (plan, _) = Plan::build(&og, &target, &Policy::default())?;
    let json = plan.cudnn_json()?;
    let io = std::sync::Arc::new(plan.io().clone());
    let doc: Value = serde_json::from_str(&json).map_err(|e| e.to_string())?;
    let sdpa = doc["operationGraph"]["nodes"]
        .as_array()
        .and_then(|n| {
            n.iter().position(|n| {
                n["operation"] == "CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR"
                    && n.get("subgraph").is_some()
            })
        })
        .ok_or("no native SDPA forward node with a mask subgraph")?;
    let node = format!("/operationGraph/nodes/{sdpa}");
    // Q's uid is a tensor of the graph, not of the node's subgraph.
    let q = doc.pointer(&format!("{node}/Q")).cloned().ok_or("no Q")?;
    let q: i64 = q
        .as_str()
        .and_then(|s| s.parse().ok())
        .ok_or("Q is not a uid")?;
    refused_at(
        &doc,
        &io,
        &target,
        "subgraph uid outside the subgraph",
        &format!("{node}/subgraphInputUid"),
        |d| {
            *d.pointer_mut(&format!("{node}/subgraphInputUid"))? = Value::from(q);
            Some(())
        },
    )?;
    // The frontend's form: the statistics through a SOFTMAX sub-descriptor.
    let form = graph_plans::softmax_form(&json).ok_or("the SDPA forward plan sets no stats")?;
    let doc: Value = serde_json::from_str(&form).map_err(|e| e.to_string())?;
    refused_at(
        &doc,
        &io,
        &target,
        "another operation in softmax",
        &format!("{node}/softmax/operation"),
        |d| {
            *d.pointer_mut(&format!("{node}/softmax/operation"))? =
                Value::from("CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR");
            Some(())
        },
    )?;
    // And the form itself passes (the refusal is the edit's).
    check_plan_json(&form, &io, &target, None)?;
    Ok(())
}

/// A host-planning test that needs the native SDPA forward with a mask
/// subgraph (what `graph_plans::sdpa(false)` resolves to): ignored, with a
/// note on stderr, where the loaded cuDNN builds it otherwise.
fn host_native_sdpa(name: &str, f: fn() -> TestResult) -> libtest_mimic::Trial {
    if libs_missing().is_none() && graph_plans::can_plan() {
        match graph_plans::sdpa_config().resolve(false) {
            Ok(SdpaImpl::Native) => {}
            other => {
                eprintln!(
                    "skipped: host::{name}: the loaded cuDNN has no native SDPA forward here ({other:?})"
                );
                return trial(format!("host::{name}"), f).with_ignored_flag(true);
            }
        }
    }
    host_planning(name, f)
}

pub fn main() {
    run(vec![
        host(
            "clock::backend_clock_counts_this_threads_calls",
            backend_clock_counts_this_threads_calls,
        ),
        unit(
            "clock::every_backend_call_is_clocked",
            every_backend_call_is_clocked,
        ),
        host_planning(
            "launch::launch_checks_are_executes",
            launch_checks_are_executes,
        ),
        host_planning(
            "launch::launch_checks_random_bindings",
            launch_checks_random_bindings,
        ),
        host_planning(
            "target::device_properties_kept_per_target",
            device_properties_kept_per_target,
        ),
        host_planning(
            "heuristics::lazy_knobs_and_workspace_match_the_plan",
            lazy_knobs_and_workspace_match_the_plan,
        ),
        host_planning(
            "heuristics::workspace_limit_judges_by_the_workspace",
            workspace_limit_judges_by_the_workspace,
        ),
        host_planning(
            "heuristics::repeated_modes_add_nothing",
            repeated_modes_add_nothing,
        ),
        host_planning(
            "heuristics::random_policies_match_the_model",
            random_policies_match_the_model,
        ),
        host_planning(
            "plan_load::full_check_implies_the_shape_check",
            full_check_implies_the_shape_check,
        ),
        host_planning(
            "plan_load::fast_scans_still_refuse",
            fast_scans_still_refuse,
        ),
        host_planning(
            "plan_load::node_refusals_name_the_path",
            node_refusals_name_the_path,
        ),
        host_native_sdpa(
            "plan_load::sdpa_node_refusals_name_the_path",
            sdpa_node_refusals_name_the_path,
        ),
    ])
}
