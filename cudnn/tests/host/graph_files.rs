//! Host tier for plan files, plan caches and the driver stub: no GPU, the
//! real cuDNN (>= 9.8). Plan JSON is checked against its tensor list and an
//! allow-list before cuDNN sees it (each crash reproducer is first shown to
//! crash cuDNN in a child process, then to be a typed error through the
//! crate); files record the cuDNN version; the cache saves atomically under
//! concurrency and counts rebuilds; a plan's descriptor cannot deadlock its
//! own thread; the driver stub ignores what others planted at its old path.
use crate::support;
use crate::support::graph_plans;

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cudnn::Error;
use cudnn::graph::backend::{Descriptor, attr, kind};
use cudnn::graph::*;
use graph_plans::*;
use libtest_mimic::Failed;
use serde_json::Value;
use support::*;

const CHILD: &str = "CUDNN_RS_GRAPH_FILES_CHILD";

fn h200() -> cudnn::Result<Target> {
    Target::preset("h200")
}

fn typed(e: &Error) -> bool {
    matches!(
        e,
        Error::InvalidArgument { .. } | Error::Mismatch { .. } | Error::Unsupported { .. }
    )
}

/// The three JSON edits that crashed cuDNN 9.28.1 (issue 19), each with
/// the graph whose plan it edits.
type GraphFn = fn() -> cudnn::Result<Graph>;
fn crash_edits() -> Vec<(&'static str, GraphFn, &'static str, Value)> {
    vec![
        (
            "conv: nodes = 2147483648 (SIGSEGV)",
            || conv(8),
            "/operationGraph/nodes",
            Value::from(2147483648u64),
        ),
        (
            "conv: a node's W = \"\" (SIGABRT)",
            || conv(8),
            "/operationGraph/nodes/0/W",
            Value::from(""),
        ),
        (
            "matmul: a tensor dim = 0 (SIGFPE)",
            matmul,
            "/operationGraph/tensors/1/dim/0",
            Value::from(0),
        ),
    ]
}

fn edit(json: &str, path: &str, v: Value) -> Result<String, Failed> {
    let mut doc: Value = serde_json::from_str(json)?;
    *doc.pointer_mut(path).ok_or(format!("no {path}"))? = v;
    Ok(doc.to_string())
}

fn conv_plan() -> cudnn::Result<Plan> {
    Ok(Plan::build(&conv(8)?.build()?, &h200()?, &Policy::default())?.0)
}

/// Child: finalize a plan JSON (read from the file named) through cuDNN's
/// C API, as cuDNN would see it without the crate's checks.
fn child_raw_finalize(path: &str) -> i32 {
    match std::fs::read_to_string(path) {
        Ok(json) => println!("raw finalize: cuDNN status {:?}", raw_plan_finalize(&json)),
        Err(e) => println!("raw finalize: {e}"),
    }
    0
}

/// Child: plant a folder or a link at the driver stub's old path, then plan.
fn child_planted(mode: &str, target_dir: &str) -> i32 {
    let old = std::env::temp_dir().join(format!("cudnn-rs-driver-stub-{}", std::process::id()));
    let planted = b"planted by another user\n";
    let setup = match mode {
        "folder" => std::fs::create_dir(&old)
            .and_then(|()| std::fs::write(old.join("libcuda.so.1"), planted)),
        _ => std::os::unix::fs::symlink(target_dir, &old),
    };
    if let Err(e) = setup {
        println!("setup failed: {e}");
        return 2;
    }
    let d = cudnn::graph::driver::ensure();
    let untouched = match mode {
        "folder" => std::fs::read(old.join("libcuda.so.1")).is_ok_and(|b| b == planted),
        _ => std::fs::read_dir(target_dir).is_ok_and(|mut d| d.next().is_none()),
    };
    let outside = match &d {
        Ok(cudnn::graph::driver::Driver::Stub(p)) => !p.starts_with(&old),
        _ => false,
    };
    println!("driver: {d:?}; planted untouched: {untouched}; outside the planted path: {outside}");
    let _ = std::io::Write::flush(&mut std::io::stdout());
    let r = (|| -> cudnn::Result<usize> {
        let (p, _) = Plan::build(&conv(8)?.build()?, &h200()?, &Policy::default())?;
        Ok(p.workspace_size())
    })();
    let _ = std::fs::remove_file(old.join("libcuda.so.1"));
    let _ = std::fs::remove_dir(&old);
    let _ = std::fs::remove_file(&old);
    println!("plan with that driver: {r:?}");
    i32::from(!(d.is_ok() && r.is_ok() && untouched))
}

/// Child: a plan from JSON whose device properties were set with no
/// values, finalized (cuDNN 9.28.1 crashes: SIGSEGV, as with none set).
fn child_empty_deviceprop() -> i32 {
    let r = (|| -> cudnn::Result<()> {
        let p = conv_plan()?;
        let mut json = p.cudnn_json()?.into_bytes();
        json.push(0);
        let mut d = Descriptor::<kind::ExecutionPlan>::new()?;
        d.set_descriptors(attr::EXECUTION_PLAN_DEVICEPROP, &[])?;
        // SAFETY: cuDNN's own JSON of a plan it just made, unchanged.
        unsafe { d.set_plan_json_unchecked(&json) }?;
        d.finalize()
    })();
    println!("empty deviceprop: {r:?}");
    match r {
        Err(Error::InvalidArgument { .. } | Error::Cudnn { .. }) => 0,
        _ => 1,
    }
}

fn spawn(args: &[&str]) -> Result<std::process::Output, Failed> {
    spawn_env(args, &[])
}

fn spawn_env(args: &[&str], env: &[(&str, &str)]) -> Result<std::process::Output, Failed> {
    let mut c = Command::new(std::env::current_exe()?);
    c.env(CHILD, args.join("\u{1}"));
    for (k, v) in env {
        c.env(k, v);
    }
    Ok(c.output()?)
}

pub fn main() {
    if let Ok(args) = std::env::var(CHILD) {
        let a: Vec<&str> = args.split('\u{1}').collect();
        std::process::exit(match a.as_slice() {
            ["raw", path] => child_raw_finalize(path),
            ["planted", mode, dir] => child_planted(mode, dir),
            ["empty_deviceprop"] => child_empty_deviceprop(),
            _ => 3,
        });
    }
    let mut t = vec![];

    t.push(host9(
        "runtime_compiled_plans_are_refused_unless_trusted",
        || {
            let t = h200()?;
            let mut families = 0;
            for (name, g) in graphs()? {
                let Ok((p, _)) = Plan::build(&g.build()?, &t, &Policy::default()) else {
                    continue;
                };
                let json = p.cudnn_json()?;
                let doc: Value = serde_json::from_str(&json)?;
                let has_code = doc.pointer("/engine/payload").is_some();
                ensure!(
                    has_code == p.is_runtime_compiled(),
                    "{name}: payload {has_code}"
                );
                let file = p.serialize()?;
                let io = Arc::new(p.io().clone());
                if !has_code {
                    Plan::deserialize(&file, &t, Trust::NoCompiledCode)?;
                    continue;
                }
                families += 1;
                for (what, r) in [
                    (
                        "deserialize",
                        Plan::deserialize(&file, &t, Trust::NoCompiledCode).map(|_| ()),
                    ),
                    (
                        "from_cudnn_json",
                        Plan::from_cudnn_json(&json, &t, io.clone()).map(|_| ()),
                    ),
                ] {
                    match r {
                        Err(Error::Unsupported { what: w, .. })
                            if w.contains("compiled kernel code") => {}
                        other => return Err(format!("{name}: {what}: {other:?}").into()),
                    }
                }
                // SAFETY: `file` is `serialize()` of the plan built just above with the loaded
                // cuDNN, unchanged.
                let back = unsafe { Plan::deserialize_unverified(&file, &t) }?;
                ensure!(back.is_runtime_compiled(), "{name}: trusted load");
                // SAFETY: `json` is cuDNN's JSON, unchanged, of the plan built just above with the
                // loaded cuDNN, and `io` is that plan's own IoSignature.
                unsafe { Plan::from_cudnn_json_unverified(&json, &t, io) }?;
                // Why refused and not stripped: cuDNN cannot finalize the plan
                // without its payload (it does not recompile from the graph).
                let mut stripped = doc.clone();
                if let Some(e) = stripped
                    .pointer_mut("/engine")
                    .and_then(Value::as_object_mut)
                {
                    e.remove("payload");
                }
                let st = raw_plan_finalize(&stripped.to_string())?;
                eprintln!("  {name}: payload removed: cuDNN finalize status {st}");
                ensure!(
                    st != 0,
                    "{name}: cuDNN finalized a plan without its code: strip instead"
                );
                // A trusted payload still names only tensors of the graph.
                if let Some(offs) = doc.pointer("/engine/payload/kernels/0/kernelParams/offsets") {
                    let i = offs
                        .as_array()
                        .and_then(|a| {
                            a.iter()
                                .position(|o| o.get("update_as").is_some_and(|u| u != "workspace"))
                        })
                        .ok_or("no tensor parameter")?;
                    let bad = edit(
                        &json,
                        &format!("/engine/payload/kernels/0/kernelParams/offsets/{i}/uid"),
                        Value::from(987_654),
                    )?;
                    // SAFETY: outside the contract on purpose: `bad` is an edit (a kernel
                    // parameter's uid made one no tensor has) that the crate's checks must
                    // refuse before cuDNN sees it; the typed refusal is asserted below, and
                    // no plan is executed.
                    match unsafe {
                        Plan::from_cudnn_json_unverified(&bad, &t, Arc::new(p.io().clone()))
                    } {
                        Err(e) if typed(&e) && e.to_string().contains("must name a tensor") => {}
                        other => return Err(format!("{name}: foreign param uid: {other:?}").into()),
                    }
                }
            }
            ensure!(
                families >= 3,
                "only {families} runtime-compiled families here"
            );
            // The reviewer's case: an N=8 tensor list and operation graph, with
            // the engine (and compiled code) of the N=32 plan.
            let (p8, _) = Plan::build(&conv(8)?.build()?, &t, &Policy::default())?;
            let (p32, _) = Plan::build(&conv(32)?.build()?, &t, &Policy::default())?;
            let mut j8: Value = serde_json::from_str(&p8.cudnn_json()?)?;
            let j32: Value = serde_json::from_str(&p32.cudnn_json()?)?;
            *j8.pointer_mut("/engine").ok_or("no engine")? =
                j32.pointer("/engine").ok_or("no engine")?.clone();
            let file8 = p8.serialize()?;
            let (head8, _) = split_plan_file(&file8).ok_or("no JSON")?;
            let swapped = with_json(head8, &j8.to_string());
            match Plan::deserialize(&swapped, &t, Trust::NoCompiledCode) {
                Err(Error::Unsupported { what, .. }) if what.contains("compiled kernel code") => {
                    eprintln!("  N=8 graph + N=32 payload: {what}")
                }
                other => return Err(format!("payload swap: {other:?}").into()),
            }
            // A cache: untrusted, the runtime-compiled entry is skipped with its
            // reason and the precompiled one loads; trusted, both load.
            let c = PlanCache::new(4);
            c.get_or_build(&conv_plain(2)?, &t, &Policy::default())?;
            c.get_or_build(&matmul()?, &t, &Policy::default())?;
            let text = c.to_text()?;
            let r = PlanCache::new(4).load_text(&text, &t, Trust::NoCompiledCode)?;
            eprintln!("  cache, untrusted: {r:?}");
            ensure!(
                r.loaded == 1 && r.skipped.len() == 1 && r.skipped[0].reason.contains("compiled"),
                "{r:?}"
            );
            let key = PlanKey::generate()?;
            let r =
                PlanCache::new(4).load_text(&c.to_signed_text(&key)?, &t, Trust::SignedBy(&key))?;
            ensure!(r.loaded == 2 && r.skipped.is_empty(), "signed: {r:?}");
            Ok(())
        },
    ));

    t.push(host9("plan_file_roles_must_match_what_nodes_write", || {
        let t = h200()?;
        // A precompiled conv: y is written by the conv, x and w only read.
        let (p, _) = Plan::build(&conv_plain(2)?.build()?, &t, &Policy::default())?;
        let file = p.serialize()?;
        Plan::deserialize(&file, &t, Trust::NoCompiledCode)?;
        let json = p.cudnn_json()?;
        for name in ["y", "x", "w"] {
            let mut io = p.io().clone();
            let tt = io
                .tensors
                .iter_mut()
                .find(|x| x.name == name)
                .ok_or(format!("no {name}"))?;
            tt.is_output = !tt.is_output;
            let uid = tt.uid;
            match Plan::from_cudnn_json(&json, &t, Arc::new(io)) {
                Err(Error::Mismatch {
                    what,
                    expected,
                    got,
                }) => {
                    eprintln!("  {name} flipped: {what}: {expected} vs {got}");
                    ensure!(what.contains(&format!("uid {uid} role")), "{name}: {what}");
                }
                other => return Err(format!("{name} flipped: {other:?}").into()),
            }
        }
        // Through the file: y declared `in` (safe code would bind it as a
        // shared input, and cuDNN would write it).
        let y = p
            .io()
            .tensors
            .iter()
            .find(|x| x.name == "y")
            .ok_or("no y")?;
        let line = format!("\n{} out ", y.uid);
        ensure!(file.contains(&line), "no y line");
        let bad = file.replacen(&line, &format!("\n{} in ", y.uid), 1);
        match Plan::deserialize(&bad, &t, Trust::NoCompiledCode) {
            Err(e @ Error::Mismatch { .. }) if e.to_string().contains("role") => {}
            other => return Err(format!("y as input: {other:?}").into()),
        }
        Ok(())
    }));

    t.push(host9("plan_json_crash_reproducers_are_typed_errors", || {
        use std::os::unix::process::ExitStatusExt;
        let t = h200()?;
        let dir = std::env::temp_dir().join(format!("cudnn-rs-h19-repro-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let mut crashed = 0;
        for (label, graph, path, v) in crash_edits() {
            let g = graph()?;
            let c = PlanCache::new(4);
            let p = c.get_or_build(&g, &t, &Policy::default())?;
            let bad = edit(&p.cudnn_json()?, path, v)?;
            // 1. cuDNN itself, in a child process.
            let f = dir.join("bad.json");
            std::fs::write(&f, &bad)?;
            let out = spawn(&["raw", &f.to_string_lossy()])?;
            let signal = out.status.signal();
            eprintln!(
                "  {label}: cuDNN without the check: {}",
                match signal {
                    Some(s) => format!("killed by signal {s}"),
                    None => String::from_utf8_lossy(&out.stdout).trim().to_string(),
                }
            );
            crashed += usize::from(signal.is_some());
            // 2. Through the crate: a typed error, quickly, by every entry point.
            let t0 = Instant::now();
            let r1 = Plan::from_cudnn_json(&bad, &t, Arc::new(p.io().clone()));
            let file = p.serialize()?;
            let (head, _) = split_plan_file(&file).ok_or("plan file without JSON")?;
            let r2 = Plan::deserialize(&with_json(head, &bad), &t, Trust::NoCompiledCode);
            let text = c.to_text()?;
            let (h, _) = split_plan_file(&text).ok_or("cache text without JSON")?;
            let r3 = PlanCache::new(4).load_text(&with_json(h, &bad), &t, Trust::NoCompiledCode);
            let took = t0.elapsed();
            for (what, r) in [
                ("from_cudnn_json", r1.map(|_| ())),
                ("deserialize", r2.map(|_| ())),
                ("load_text", r3.map(|_| ())),
            ] {
                match r {
                    Err(e) if typed(&e) => eprintln!("    {what}: {e}"),
                    other => return Err(format!("{label}: {what}: {other:?}").into()),
                }
            }
            ensure!(took < Duration::from_secs(20), "{label}: took {took:?}");
        }
        let _ = std::fs::remove_dir_all(&dir);
        eprintln!("  {crashed} of 3 edits crash cuDNN itself here; all 3 are typed errors through the crate");
        Ok(())
    }));

    t.push(host9(
        "plan_json_disagreeing_with_tensor_list_is_refused",
        || {
            let t = h200()?;
            // The measured case: an N=8 conv's tensor list with an N=32 conv's plan.
            let p8 = conv_plan()?;
            let (p32, _) = Plan::build(&conv(32)?.build()?, &t, &Policy::default())?;
            let file8 = p8.serialize()?;
            let (head8, _) = split_plan_file(&file8).ok_or("no JSON")?;
            let swapped = with_json(head8, &p32.cudnn_json()?);
            match Plan::deserialize(&swapped, &t, Trust::NoCompiledCode) {
                Err(Error::Mismatch {
                    what,
                    expected,
                    got,
                }) => {
                    eprintln!("  N=8 list, N=32 plan: {what}: {expected} vs {got}");
                    ensure!(
                        what.contains("uid 1")
                            && what.contains("dim")
                            && expected.contains("[8,")
                            && got.contains("[32,"),
                        "{what} {expected} {got}"
                    );
                }
                other => return Err(format!("N=8/N=32 accepted or untyped: {other:?}").into()),
            }
            // One field at a time, through the JSON.
            let json = p8.cudnn_json()?;
            let io = Arc::new(p8.io().clone());
            let cases: Vec<(&str, &str, Value, &str)> = vec![
                (
                    "x dtype",
                    "/operationGraph/tensors/0/dataType",
                    "CUDNN_DATA_FLOAT".into(),
                    "dataType",
                ),
                (
                    "x stride",
                    "/operationGraph/tensors/0/stride/0",
                    Value::from(50177),
                    "stride",
                ),
                (
                    "x by value",
                    "/operationGraph/tensors/0/isByValue",
                    true.into(),
                    "isByValue",
                ),
                (
                    "x virtual",
                    "/operationGraph/tensors/0/isVirtual",
                    true.into(),
                    "isVirtual",
                ),
                (
                    "x uid",
                    "/operationGraph/tensors/0/name",
                    "77".into(),
                    "uid",
                ),
                (
                    "scale not by value",
                    "/operationGraph/tensors/3/isByValue",
                    false.into(),
                    "isByValue",
                ),
                (
                    "scale dtype",
                    "/operationGraph/tensors/3/dataType",
                    "CUDNN_DATA_HALF".into(),
                    "dataType",
                ),
                (
                    "virtual made real",
                    "/operationGraph/tensors/2/isVirtual",
                    false.into(),
                    "role",
                ),
            ];
            for (label, path, v, field) in cases {
                let bad = edit(&json, path, v)?;
                match Plan::from_cudnn_json(&bad, &t, io.clone()) {
                    Err(e) if typed(&e) => {
                        let s = e.to_string();
                        eprintln!("  {label}: {s}");
                        ensure!(
                            s.contains(field) || s.contains("must name a tensor"),
                            "{label}: {s}"
                        );
                    }
                    other => return Err(format!("{label}: {other:?}").into()),
                }
            }
            // Scratch tensors (composite SDPA backward): a size that disagrees.
            if let Ok(og) = sdpa(true)?.build() {
                let (p, _) = Plan::build(&og, &t, &Policy::default())?;
                let mut io = p.io().clone();
                ensure!(
                    !io.scratch.is_empty(),
                    "the composite backward keeps scratch tensors"
                );
                io.scratch[0].1 += 256;
                match Plan::from_cudnn_json(&p.cudnn_json()?, &t, Arc::new(io)) {
                    Err(Error::Mismatch { what, .. }) if what.contains("span") => {
                        eprintln!("  scratch size: {what}")
                    }
                    other => return Err(format!("scratch size: {other:?}").into()),
                }
                // And the right one loads.
                // SAFETY: `p.cudnn_json()` is cuDNN's JSON, unchanged, of the plan built just above with the
                // loaded cuDNN, and `p.io()` is that plan's own IoSignature.
                unsafe {
                    Plan::from_cudnn_json_unverified(&p.cudnn_json()?, &t, Arc::new(p.io().clone()))
                }?;
            }
            Ok(())
        },
    ));

    t.push(host9("plan_files_record_the_cudnn_version", || {
        let t = h200()?;
        let p = conv_plan()?;
        let file = p.serialize()?;
        let v = cudnn::sys::cudnn::load()?
            .info()
            .version
            .ok_or("no version")?;
        let n = v.major * 10000 + v.minor * 100 + v.patch;
        ensure!(file.starts_with("cudnn-rs plan v2\n"), "header");
        ensure!(file.contains(&format!("\ncudnn {n}\n")), "no cudnn line");
        // Another cuDNN: refused, naming both.
        let other = file.replacen(&format!("\ncudnn {n}\n"), "\ncudnn 90000\n", 1);
        match Plan::deserialize(&other, &t, Trust::NoCompiledCode) {
            Err(Error::Unsupported { what, .. }) => {
                ensure!(
                    what.contains("9.0.0") && what.contains(&v.to_string()),
                    "{what}"
                )
            }
            other => return Err(format!("foreign cuDNN: {other:?}").into()),
        }
        // Format 1 (no version line): read, its JSON's cudnnVersion checked.
        let v1 = file
            .replacen("cudnn-rs plan v2\n", "cudnn-rs plan v1\n", 1)
            .replacen(&format!("\ncudnn {n}\n"), "\n", 1);
        // SAFETY: `v1` is `serialize()` of the plan built above, rewritten only in its
        // header to format 1 (the version line dropped); its tensor list and plan JSON
        // are unchanged, which is what the contract asks of them.
        unsafe { Plan::deserialize_unverified(&v1, &t) }?;
        let (h1, j1) = split_plan_file(&v1).ok_or("no JSON")?;
        let old = with_json(
            h1,
            &j1.replacen(
                &format!("\"cudnnVersion\":{n}"),
                "\"cudnnVersion\":90000",
                1,
            ),
        );
        ensure!(old != v1, "edit applied");
        ensure!(
            Plan::deserialize(&old, &t, Trust::NoCompiledCode).is_err(),
            "v1 file of another cuDNN loaded"
        );
        // A cache file: the foreign entry is skipped with its reason, the rest loads.
        let c = PlanCache::new(4);
        c.get_or_build(&conv_plain(2)?, &t, &Policy::default())?;
        c.get_or_build(&conv_plain(4)?, &t, &Policy::default())?;
        let text = c.to_text()?;
        let mixed = text.replacen(&format!("\ncudnn {n}\n"), "\ncudnn 91000\n", 1);
        let r = PlanCache::new(4).load_text(&mixed, &t, Trust::NoCompiledCode)?;
        eprintln!("  mixed cache file: {r:?}");
        ensure!(r.loaded == 1 && r.skipped.len() == 1, "{r:?}");
        ensure!(
            r.skipped[0].index == 0 && r.skipped[0].reason.contains("9.10.0"),
            "{r:?}"
        );
        // A format-1 cache file (no version lines) is refused whole: its
        // graph keys are of before the GELU rename (see the next test).
        let v1c = text
            .replacen("cudnn-rs plan cache v3\n", "cudnn-rs plan cache v1\n", 1)
            .replace(&format!("\ncudnn {n}\n"), "\n");
        ensure!(v1c != text, "edit applied");
        match PlanCache::new(4).load_text(&v1c, &t, Trust::NoCompiledCode) {
            Err(Error::Unsupported { what, .. }) if what.contains("format v1") => {}
            other => return Err(format!("v1 cache file: {other:?}").into()),
        }
        Ok(())
    }));

    t.push(host9(
        "plan_cache_files_of_before_the_gelu_rename_are_refused",
        || {
            // c = gelu_erf(a @ b): cuDNN's GELU_FWD, named `Gelu` in the
            // graph keys of cache formats 1 and 2, `GeluErf` since format 3.
            let t = h200()?;
            let mut g = Graph::new();
            let a = g.input("a", TensorSpec::row_major(DType::F16, &[1, 128, 64])?)?;
            let b = g.input("b", TensorSpec::row_major(DType::F16, &[1, 64, 256])?)?;
            let c = g.matmul(a, b)?;
            let y = g.gelu_erf(c)?;
            g.output(y, DType::F16)?;
            g.rename(y, "y")?;
            let c = PlanCache::new(4);
            c.get_or_build(&g, &t, &Policy::default())?;
            let key = PlanKey::generate()?;
            let text = c.to_signed_text(&key)?;
            ensure!(
                text.starts_with("cudnn-rs plan cache v3\n"),
                "header: {:?}",
                text.lines().next()
            );
            ensure!(text.contains("GeluErf"), "the key names the erf form");
            // The same file as format 2 wrote it (header v2, key `Gelu`):
            // refused whole, naming the format, nothing loaded. Without the
            // refusal it would load its plan under a key no graph has.
            let v2 = c
                .to_text()?
                .replacen("cudnn-rs plan cache v3\n", "cudnn-rs plan cache v2\n", 1)
                .replace("GeluErf", "Gelu");
            ensure!(v2.starts_with("cudnn-rs plan cache v2\n"), "edit applied");
            let loaded = PlanCache::new(4);
            match loaded.load_text(&v2, &t, Trust::NoCompiledCode) {
                Err(Error::Unsupported { what, needs }) => {
                    eprintln!("  v2 file: {what} (needs {needs:?})");
                    ensure!(what.contains("format v2"), "{what}");
                    ensure!(loaded.is_empty(), "nothing loaded");
                }
                other => return Err(format!("v2 file: {other:?}").into()),
            }
            // Format 3 loads, and the plan is found under its graph.
            let loaded = PlanCache::new(4);
            loaded
                .load_text(&text, &t, Trust::SignedBy(&key))?
                .complete()?;
            ensure!(loaded.get(&g, &t, &Policy::default()).is_some(), "v3 found");
            Ok(())
        },
    ));

    t.push(host9(
        "plan_cache_entry_must_belong_to_its_graph_key",
        || {
            let t = h200()?;
            let (g2, g4) = (conv_plain(2)?, conv_plain(4)?);
            let c = PlanCache::new(4);
            c.get_or_build(&g2, &t, &Policy::default())?;
            let text = c.to_text()?;
            let (s2, s4) = (g2.signature(), g4.signature());
            let blob = |s: &str| format!("graph {}\n{s}\n", s.len());
            ensure!(text.contains(&blob(&s2)), "no graph blob in the cache text");
            // The N=4 graph's key over the N=2 graph's tensor list and plan: the
            // JSON agrees with the list, but the list is not the key's graph's.
            let lying = text.replacen(&blob(&s2), &blob(&s4), 1);
            match PlanCache::new(4).load_text(&lying, &t, Trust::NoCompiledCode) {
                Err(Error::Mismatch {
                    what,
                    expected,
                    got,
                }) => {
                    eprintln!("  N=4 key, N=2 entry: {what}: {expected} vs {got}");
                    ensure!(
                        what.contains("uid") && expected.contains("[4,"),
                        "{what} {expected}"
                    );
                }
                other => return Err(format!("N=4 key over an N=2 entry: {other:?}").into()),
            }
            // A compatible target written as a full fingerprint: loaded under
            // the key `get` looks up, so it is hit.
            let arch = t.properties().arch_key();
            let full = text.replacen(
                &format!("\ntarget {arch}\n"),
                &format!("\ntarget {}\n", t.fingerprint()),
                1,
            );
            ensure!(full != text, "target line not found");
            let c2 = PlanCache::new(4);
            ensure!(
                c2.load_text(&full, &t, Trust::NoCompiledCode)?.loaded == 1,
                "not loaded"
            );
            ensure!(
                c2.get(&g2, &t, &Policy::default()).is_some(),
                "a compatible fingerprint's entry is never hit"
            );
            Ok(())
        },
    ));

    t.push(host9("plan_cache_concurrent_save_and_load", || {
        let t = h200()?;
        let c = Arc::new(PlanCache::new(8));
        c.get_or_build(&conv_plain(2)?, &t, &Policy::default())?;
        c.get_or_build(&conv_plain(4)?, &t, &Policy::default())?;
        let dir = std::env::temp_dir().join(format!("cudnn-rs-h19-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let path = Arc::new(dir.join("plans.tmp"));
        let key = Arc::new(PlanKey::generate()?);
        c.save(&path, &key)?;
        let stop = Arc::new(AtomicBool::new(false));
        let (saves, loads, failures) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(std::sync::Mutex::new(Vec::<String>::new())),
        );
        let mut hs = vec![];
        for i in 0..4 {
            let (c, path, stop, saves, loads, failures, t, key) = (
                c.clone(),
                path.clone(),
                stop.clone(),
                saves.clone(),
                loads.clone(),
                failures.clone(),
                t.clone(),
                key.clone(),
            );
            hs.push(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let r = if i < 2 {
                        c.save(&path, &key)
                            .map(|()| saves.fetch_add(1, Ordering::Relaxed))
                    } else {
                        match PlanCache::new(8).load(&path, &t, Trust::SignedBy(&key)) {
                            Ok(r) if r.loaded == 2 => Ok(loads.fetch_add(1, Ordering::Relaxed)),
                            Ok(r) => Err(Error::invalid("load", "2 plans", format!("{r:?}"))),
                            Err(e) => Err(e),
                        }
                    };
                    if let Err(e) = r
                        && let Ok(mut f) = failures.lock()
                    {
                        f.push(format!("{}: {e}", if i < 2 { "save" } else { "load" }));
                    }
                }
            }));
        }
        std::thread::sleep(Duration::from_secs(3));
        stop.store(true, Ordering::Relaxed);
        for h in hs {
            h.join().map_err(|_| "a thread panicked")?;
        }
        let failures = failures.lock().map_err(|_| "poisoned")?.clone();
        let (s, l) = (saves.load(Ordering::Relaxed), loads.load(Ordering::Relaxed));
        eprintln!("  3 s, 2 savers and 2 loaders on one `.tmp` path: {s} saves, {l} full loads, {} failures", failures.len());
        let leftovers: Vec<_> = std::fs::read_dir(&dir)?.flatten().map(|e| e.file_name()).collect();
        let _ = std::fs::remove_dir_all(&dir);
        ensure!(failures.is_empty(), "failures: {:?}", &failures[..failures.len().min(5)]);
        ensure!(s > 10 && l > 10, "too few operations: {s} saves, {l} loads");
        ensure!(leftovers.len() == 1, "temporary files left: {leftovers:?}");
        Ok(())
    }));

    t.push(host9("with_descriptor_reentry_is_a_typed_error", || {
        let p = Arc::new(conv_plan()?);
        let (tx, rx) = std::sync::mpsc::channel();
        let q = p.clone();
        std::thread::spawn(move || {
            let r = q.with_descriptor(|d| {
                let ws = d.get_one(attr::EXECUTION_PLAN_WORKSPACE_SIZE);
                (
                    ws.is_ok(),
                    q.serialize().err(),
                    q.cudnn_json().err(),
                    q.with_descriptor(|_| ()).err(),
                )
            });
            let _ = tx.send(r.map(|(a, b, c, d)| {
                (
                    a,
                    b.map(|e| e.to_string()),
                    c.map(|e| e.to_string()),
                    d.map(|e| e.to_string()),
                )
            }));
        });
        let (ws_ok, ser, json, nested) = rx
            .recv_timeout(Duration::from_secs(30))
            .map_err(|_| "deadlock: with_descriptor + serialize did not return in 30 s")??;
        ensure!(ws_ok, "the descriptor is usable inside the closure");
        for (what, e) in [
            ("serialize", ser),
            ("cudnn_json", json),
            ("nested with_descriptor", nested),
        ] {
            let e = e.ok_or(format!("{what} inside with_descriptor succeeded"))?;
            ensure!(e.contains("nested lock on one thread"), "{what}: {e}");
        }
        // Released afterwards, on this and other threads.
        p.serialize()?;
        p.with_descriptor(|_| ())?;
        Ok(())
    }));

    t.push(host9("nested_locks_of_two_plans_are_typed_errors", || {
        // Thread 1 holds A and asks for B while thread 2 holds B and asks for
        // A: without a refusal both wait forever. Each nested call must be a
        // typed error, and both threads return.
        let a = Arc::new(conv_plan()?);
        let b = Arc::new(Plan::build(&conv_plain(2)?.build()?, &h200()?, &Policy::default())?.0);
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let (tx, rx) = std::sync::mpsc::channel();
        for (first, second) in [(a.clone(), b.clone()), (b.clone(), a.clone())] {
            let (tx, barrier) = (tx.clone(), barrier.clone());
            std::thread::spawn(move || {
                let r = first.with_descriptor(|_| {
                    barrier.wait();
                    let inner = second.with_descriptor(|_| ()).err().map(|e| e.to_string());
                    let json = second.cudnn_json().err().map(|e| e.to_string());
                    (inner, json)
                });
                let _ = tx.send(r.map_err(|e| e.to_string()));
            });
        }
        for _ in 0..2 {
            let (inner, json) = rx
                .recv_timeout(Duration::from_secs(30))
                .map_err(|_| "deadlock: two plans nested in opposite orders")??;
            for (what, e) in [("with_descriptor", inner), ("cudnn_json", json)] {
                let e = e.ok_or(format!("nested {what} of another plan succeeded"))?;
                ensure!(e.contains("nested lock on one thread"), "{what}: {e}");
            }
        }
        // Each plan alone still works.
        a.cudnn_json()?;
        b.with_descriptor(|_| ())?;
        Ok(())
    }));

    t.push(host9(
        "plan_cache_prefers_cheap_evictions_and_counts_rebuilds",
        || {
            let t = h200()?;
            let pol = Policy::default();
            let c = PlanCache::new(2);
            let mm = c.get_or_build(&matmul()?, &t, &pol)?;
            let a = c.get_or_build(&conv_plain(2)?, &t, &pol)?;
            ensure!(
                mm.is_runtime_compiled() && !a.is_runtime_compiled(),
                "matmul runtime-compiled, plain conv not"
            );
            // A third plan: the oldest entry is the matmul, but the cheap conv goes.
            c.get_or_build(&conv_plain(4)?, &t, &pol)?;
            ensure!(
                c.get(&matmul()?, &t, &pol).is_some(),
                "the runtime-compiled plan was evicted"
            );
            ensure!(
                c.get(&conv_plain(2)?, &t, &pol).is_none(),
                "the cheap plan stayed"
            );
            c.get_or_build(&conv_plain(2)?, &t, &pol)?;
            let s = c.stats();
            eprintln!("  {s:?}");
            ensure!(
                s.builds == 4
                    && s.rebuilds == 1
                    && s.runtime_compiled_rebuilds == 0
                    && s.evictions == 2,
                "{s:?}"
            );
            Ok(())
        },
    ));

    t.push(host9(
        "backend_attribute_set_with_no_values_is_not_set",
        || {
            // The finalize cuDNN crashes on (a plan from JSON with no device
            // properties) must stay refused when the properties were "set" with
            // an empty list; in a child process, so a crash is seen as one.
            use std::os::unix::process::ExitStatusExt;
            let out = spawn(&["empty_deviceprop"])?;
            let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
            eprintln!("  {said}");
            ensure!(
                out.status.signal().is_none(),
                "the child was killed by signal {:?}",
                out.status.signal()
            );
            ensure!(out.status.code() == Some(0), "not a typed error: {said}");
            Ok(())
        },
    ));

    t.push(host9(
        "backend_finalize_without_required_attributes_is_typed",
        || {
            // The crash of issue 19: a plan from JSON with no device properties
            // and no handle (SIGSEGV in cuDNN 9.28.1); and, found by the backend
            // fuzz target, an engine config with no engine and a plan with nothing.
            let p = conv_plan()?;
            let mut json = p.cudnn_json()?.into_bytes();
            json.push(0);
            let mut d = Descriptor::<kind::ExecutionPlan>::new()?;
            // The safe setter refuses a plan JSON outright (cuDNN does not
            // validate it); the unsafe one checks its shape only.
            match d.set(attr::EXECUTION_PLAN_JSON_REPRESENTATION, &json) {
                Err(e @ Error::InvalidArgument { .. }) => {
                    let s = e.to_string();
                    eprintln!("  plan JSON through the safe setter: {s}");
                    ensure!(s.contains("Plan::from_cudnn_json"), "{s}");
                }
                other => return Err(format!("safe set of a plan JSON: {other:?}").into()),
            }
            // SAFETY: cuDNN's own JSON of a plan it just made, unchanged.
            unsafe { d.set_plan_json_unchecked(&json) }?;
            let t0 = Instant::now();
            match d.finalize() {
                Err(e @ Error::InvalidArgument { .. }) => {
                    let s = e.to_string();
                    eprintln!("  plan from JSON, no device: {s}");
                    ensure!(s.contains("DEVICEPROP") && s.contains("HANDLE"), "{s}");
                }
                other => return Err(format!("finalize without device: {other:?}").into()),
            }
            ensure!(!d.is_finalized(), "still unfinalized");
            match Descriptor::<kind::EngineConfig>::new()?.finalize() {
                Err(e @ Error::InvalidArgument { .. }) => {
                    ensure!(e.to_string().contains("ENGINECFG_ENGINE"), "{e}")
                }
                other => return Err(format!("engine config: {other:?}").into()),
            }
            match Descriptor::<kind::ExecutionPlan>::new()?.finalize() {
                Err(Error::InvalidArgument { .. }) => {}
                other => return Err(format!("empty plan: {other:?}").into()),
            }
            // A malformed plan JSON set through the typed API: refused at set.
            let mut bad = br#"{"operationGraph":{"nodes":2147483648}}"#.to_vec();
            bad.push(0);
            // SAFETY: refused before cuDNN sees it (its shape is checked),
            // which is what this asserts.
            match unsafe { Descriptor::<kind::ExecutionPlan>::new()?.set_plan_json_unchecked(&bad) }
            {
                Err(e) if typed(&e) => eprintln!("  malformed JSON at set: {e}"),
                other => return Err(format!("malformed JSON: {other:?}").into()),
            }
            ensure!(t0.elapsed() < Duration::from_secs(10), "slow");
            Ok(())
        },
    ));

    t.push(host9(
        "driver_stub_ignores_a_planted_folder_or_link",
        || {
            if cudnn::graph::driver::ensure()? == cudnn::graph::driver::Driver::Real {
                eprintln!(
                    "  a real driver is loaded here: the stub is not used (nothing to check)"
                );
                return Ok(());
            }
            let target_dir = std::env::temp_dir()
                .join(format!("cudnn-rs-h19-link-target-{}", std::process::id()));
            std::fs::create_dir_all(&target_dir)?;
            // Each planted thing, with the memory file, and with the
            // private-folder fallback forced (the test aid switch).
            for no_memfd in [false, true] {
                for mode in ["folder", "link"] {
                    let env: &[(&str, &str)] = if no_memfd {
                        &[("CUDNN_RS_DRIVER_STUB_NO_MEMFD", "1")]
                    } else {
                        &[]
                    };
                    let out = spawn_env(&["planted", mode, &target_dir.to_string_lossy()], env)?;
                    let text = String::from_utf8_lossy(&out.stdout);
                    eprintln!(
                        "  {mode} at the old path{}: {}",
                        if no_memfd { " (no memory file)" } else { "" },
                        text.trim()
                    );
                    ensure!(text.contains("planted untouched: true"), "{mode}: {text}");
                    ensure!(
                        out.status.success() && text.contains("plan with that driver: Ok"),
                        "{mode}: planning after the stub loaded failed ({}): {text}",
                        out.status
                    );
                    if no_memfd {
                        // A fresh private folder of its own: the pid, a nonce
                        // and an attempt number, never the old planted path.
                        ensure!(
                            !text.contains("/proc/self/fd/")
                                && text.contains("Stub(\"")
                                && text.contains("cudnn-rs-driver-stub-")
                                && text.contains("outside the planted path: true"),
                            "{mode}: not loaded from a private folder: {text}"
                        );
                    } else {
                        ensure!(
                            text.contains("/proc/self/fd/"),
                            "{mode}: the stub was not loaded from a memory file: {text}"
                        );
                    }
                }
            }
            let _ = std::fs::remove_dir_all(&target_dir);
            Ok(())
        },
    ));

    run(t)
}
