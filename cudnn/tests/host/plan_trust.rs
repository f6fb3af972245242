//! Host tier for authenticated plan files (issue 31 item 9, issue 33 item 4):
//! no GPU, the real cuDNN (>= 9.8). Runtime-compiled plans (compiled kernel
//! code) are made for an H200 without a device. A file this program signed
//! reloads whole through the safe loaders; an unsigned file loads only its
//! plans without compiled code, the rest reported; a file whose tag does not
//! verify (another key's, any byte changed) is refused whole; the `unsafe`
//! loaders still take unsigned files.
//! The truth compared against: the plans built here (their count, which are
//! runtime-compiled, their cuDNN JSON).
use crate::support;
use crate::support::graph_plans;

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use cudnn::Error;
use cudnn::graph::*;
use graph_plans::*;
use proptest::prelude::*;
use support::*;

fn h200() -> cudnn::Result<Target> {
    Target::preset("h200")
}

/// A cache of two precompiled and two runtime-compiled plans (the count of
/// runtime-compiled ones as the plans say), with each plan's JSON.
struct Fixture {
    cache: PlanCache,
    compiled: usize,
    graphs: Vec<Graph>,
    json: Vec<String>,
}

fn fixture(t: &Target) -> Result<Fixture, Box<dyn std::error::Error>> {
    let cache = PlanCache::new(8);
    let graphs = vec![conv_plain(2)?, conv_plain(4)?, matmul()?, norm()?];
    let mut compiled = 0;
    let mut json = Vec::new();
    for g in &graphs {
        let p = cache.get_or_build(g, t, &Policy::default())?;
        compiled += usize::from(p.is_runtime_compiled());
        json.push(p.cudnn_json()?);
    }
    if compiled < 1 || compiled == graphs.len() {
        return Err(format!("want both kinds of plan, got {compiled} runtime-compiled").into());
    }
    Ok(Fixture {
        cache,
        compiled,
        graphs,
        json,
    })
}

/// A private folder made fresh for one test: mode 0700, a name no earlier
/// folder had (`create_dir` fails on anything already there, so a folder
/// another user made first is never used; another name is tried).
fn temp_dir(tag: &str) -> std::io::Result<std::path::PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let mut last = None;
    for attempt in 0..16u32 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let d = std::env::temp_dir().join(format!(
            "cudnn-rs-trust-{tag}-{}-{nanos:x}-{attempt}",
            std::process::id()
        ));
        match std::fs::DirBuilder::new().mode(0o700).create(&d) {
            Ok(()) => return Ok(d),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no fresh folder name")))
}

/// The refusal of a file whose tag does not verify: `InvalidArgument` naming
/// `what` and saying the tag does not verify.
fn tag_refused(r: cudnn::Result<impl std::fmt::Debug>, what: &str) -> TestResult {
    match r {
        Err(Error::InvalidArgument { arg, rule, value })
            if arg.contains(what)
                && rule.contains("tag must verify")
                && value.contains("does not verify") =>
        {
            Ok(())
        }
        other => Err(format!("{what}: want the tag refused, got {other:?}").into()),
    }
}

/// The idiom the docs give for an all-or-nothing report, compiled under
/// `deny(unused_must_use)` (before `complete()` returned `Result<()>`, its
/// `Ok` was a `#[must_use]` report and this did not compile).
#[deny(unused_must_use)]
fn load_complete(
    c: &PlanCache,
    path: &std::path::Path,
    t: &Target,
    key: &PlanKey,
) -> cudnn::Result<()> {
    c.load(path, t, Trust::SignedBy(key))?.complete()?;
    Ok(())
}

/// Every plan of `f` is in `c`, with the JSON it was built with.
fn holds_every_plan(c: &PlanCache, f: &Fixture, t: &Target) -> TestResult {
    for (g, want) in f.graphs.iter().zip(&f.json) {
        let p = c.get(g, t, &Policy::default()).ok_or("a plan is missing")?;
        ensure!(p.cudnn_json()? == *want, "a reloaded plan's JSON differs");
    }
    Ok(())
}

/// The loaded report of a load that must not have taken compiled code.
fn no_compiled(r: &LoadReport, f: &Fixture, what: &str) -> TestResult {
    ensure!(
        r.runtime_compiled == 0
            && r.loaded == f.graphs.len() - f.compiled
            && r.skipped.len() == f.compiled
            && r.skipped
                .iter()
                .all(|s| s.why == SkipReason::CompiledCodeNotAuthenticated),
        "{what}: {r:?}"
    );
    ensure!(
        r.to_string().contains(&format!("skipped {}", f.compiled)),
        "{what}: the Display lacks the count: {r}"
    );
    Ok(())
}

/// The byte offset of a character inside the first compiled kernel's
/// binary (`cubin`, base64) in `text`, and a different base64 character.
fn kernel_byte(text: &str) -> Option<(usize, u8)> {
    let at = text.find("\"cubin\":\"")? + 9 + 1000;
    let b = *text.as_bytes().get(at)?;
    b.is_ascii_alphanumeric()
        .then_some((at, if b == b'A' { b'B' } else { b'A' }))
}

fn with_byte(text: &str, at: usize, b: u8) -> Option<String> {
    let mut v = text.as_bytes().to_vec();
    *v.get_mut(at)? = b;
    String::from_utf8(v).ok()
}

/// Child process: make the key file in the given folder under umask 0377.
fn child_umask(dir: &str) -> i32 {
    // SAFETY: umask takes a mode, touches no memory and cannot fail; this
    // process runs nothing else.
    unsafe { libc::umask(0o377) };
    // SAFETY: a key file only `load_or_create` writes, in this test's own folder.
    match unsafe { PlanKey::load_or_create(std::path::Path::new(dir)) } {
        Ok(_) => 0,
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

pub fn main() {
    if let Ok(dir) = std::env::var("CUDNN_RS_TRUST_CHILD_UMASK") {
        std::process::exit(child_umask(&dir));
    }
    let mut t = vec![];

    t.push(host9("a_new_key_file_is_0600_whatever_the_umask", || {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("umask")?;
        // Made in a child process (a umask is process-wide).
        let out = std::process::Command::new(std::env::current_exe()?)
            .env("CUDNN_RS_TRUST_CHILD_UMASK", &dir)
            .output()?;
        ensure!(
            out.status.success(),
            "the child failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let m = std::fs::metadata(PlanKey::key_file(&dir))?;
        // The documented mode, not what the umask left (0400).
        ensure!(
            m.permissions().mode() & 0o777 == 0o600,
            "mode {:o}",
            m.permissions().mode() & 0o777
        );
        ensure!(
            // SAFETY: the key file `load_or_create` just wrote in this
            // test's own folder.
            unsafe { PlanKey::load(&dir) }?.is_some(),
            "the key reads back"
        );
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }));

    t.push(host9("signed_cache_reloads_every_entry", || {
        let t = h200()?;
        let f = fixture(&t)?;
        let dir = temp_dir("signed")?;
        // SAFETY: a key file only `load_or_create` writes, in this test's own folder.
        let key = unsafe { PlanKey::load_or_create(&dir) }?;
        let path = dir.join("plans.txt");
        f.cache.save(&path, &key)?;
        // A new key object from the same key file (a later run).
        // SAFETY: a key file only `load_or_create` writes, in this test's own folder.
        let again = unsafe { PlanKey::load_or_create(&dir) }?;
        let c = PlanCache::new(8);
        let r = c.load(&path, &t, Trust::SignedBy(&again))?;
        eprintln!("  {r}");
        ensure!(
            r.loaded == f.graphs.len()
                && r.runtime_compiled == f.compiled
                && r.is_complete()
                && r.authentication == Authentication::Verified,
            "{r:?}"
        );
        ensure!(
            r.to_string()
                == format!(
                    "loaded 4 of 4 plan-cache entries ({} runtime-compiled)",
                    f.compiled
                ),
            "{r}"
        );
        holds_every_plan(&c, &f, &t)?;
        load_complete(&PlanCache::new(8), &path, &t, &again)?;
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }));

    t.push(host9(
        "unsigned_or_keyless_loads_skip_compiled_code_and_say_so",
        || {
            let t = h200()?;
            let f = fixture(&t)?;
            let key = PlanKey::generate()?;
            let signed = f.cache.to_signed_text(&key)?;
            let unsigned = f.cache.to_text()?;
            let r = PlanCache::new(8).load_text(&unsigned, &t, Trust::SignedBy(&key))?;
            eprintln!("  unsigned, with a key: {r}");
            no_compiled(&r, &f, "unsigned")?;
            ensure!(r.authentication == Authentication::Missing, "{r:?}");
            ensure!(r.to_string().contains("carries no tag"), "{r}");
            let r = PlanCache::new(8).load_text(&signed, &t, Trust::NoCompiledCode)?;
            eprintln!("  signed, no key: {r}");
            no_compiled(&r, &f, "no key")?;
            ensure!(r.authentication == Authentication::NotChecked, "{r:?}");
            // All or nothing on request.
            match r.complete() {
                Err(Error::Unsupported { what, .. }) if what.contains("skipped") => {}
                other => return Err(format!("complete(): {other:?}").into()),
            }
            // A single plan: refused unless signed with the key.
            let p = f
                .cache
                .get(&f.graphs[2], &t, &Policy::default())
                .ok_or("matmul")?;
            ensure!(p.is_runtime_compiled(), "matmul is runtime-compiled");
            for (what, text, trust) in [
                ("unsigned", p.serialize()?, Trust::SignedBy(&key)),
                ("no key", p.serialize_signed(&key)?, Trust::NoCompiledCode),
            ] {
                match Plan::deserialize(&text, &t, trust) {
                    Err(Error::Unsupported { what: w, .. })
                        if w.contains("compiled kernel code") =>
                    {
                        eprintln!("  single plan, {what}: {w}")
                    }
                    other => return Err(format!("{what}: {:?}", other.map(|_| ())).into()),
                }
            }
            let back = Plan::deserialize(&p.serialize_signed(&key)?, &t, Trust::SignedBy(&key))?;
            ensure!(
                back.is_runtime_compiled() && back.cudnn_json()? == f.json[2],
                "signed single plan"
            );
            // A precompiled plan loads from any file, tag or not.
            let q = f
                .cache
                .get(&f.graphs[0], &t, &Policy::default())
                .ok_or("conv")?;
            Plan::deserialize(&q.serialize()?, &t, Trust::SignedBy(&key))?;
            Plan::deserialize(&q.serialize_signed(&key)?, &t, Trust::NoCompiledCode)?;
            Ok(())
        },
    ));

    t.push(host9(
        "a_changed_byte_anywhere_or_another_key_refuses_compiled_code",
        || {
            let t = h200()?;
            let f = fixture(&t)?;
            let key = PlanKey::generate()?;
            let signed = f.cache.to_signed_text(&key)?;
            // Another key's tag: the whole file refused (nothing of it
            // reaches cuDNN), a cache and a single plan alike.
            // SAFETY: a known test key: it tags only files this test writes.
            let other = unsafe { PlanKey::from_bytes(&[0x5a; 32]) }?;
            let c = PlanCache::new(8);
            tag_refused(
                c.load_text(&signed, &t, Trust::SignedBy(&other)),
                "plan cache text",
            )?;
            ensure!(c.is_empty(), "a refused file left plans in the cache");
            let p = f
                .cache
                .get(&f.graphs[0], &t, &Policy::default())
                .ok_or("conv")?;
            ensure!(!p.is_runtime_compiled(), "conv is precompiled");
            tag_refused(
                Plan::deserialize(&p.serialize_signed(&key)?, &t, Trust::SignedBy(&other)),
                "plan file",
            )?;
            // A file on disk: the refusal names its path.
            let dir = temp_dir("invalid")?;
            let path = dir.join("plans.txt");
            std::fs::write(&path, &signed)?;
            tag_refused(
                PlanCache::new(8).load(&path, &t, Trust::SignedBy(&other)),
                &path.display().to_string(),
            )?;
            std::fs::remove_dir_all(&dir)?;
            // One byte of a compiled kernel's binary: still a well-formed
            // file, refused by the tag.
            let (at, b) = kernel_byte(&signed).ok_or("no kernel binary")?;
            let changed = with_byte(&signed, at, b).ok_or("utf-8")?;
            tag_refused(
                PlanCache::new(8).load_text(&changed, &t, Trust::SignedBy(&key)),
                "plan cache text",
            )?;
            // The tag itself, the header, the tensor list, the JSON: every
            // region, a byte changed, refuses the whole file.
            let tag_at = signed.rfind("hmac-sha256 ").ok_or("no tag")? + 12;
            let regions = [
                ("tag", tag_at + 5),
                ("header", signed.find(" v3").ok_or("header")? + 2),
                ("entry count", signed.find("entries ").ok_or("entries")? + 8),
                (
                    "tensor list",
                    signed.find("\ntensors ").ok_or("tensors")? + 12,
                ),
                // The last entry's policy (part of its key; parsed, not
                // checked against anything else).
                ("policy", signed.rfind("\npolicy ").ok_or("policy")? + 12),
                ("json", signed.find("\"cudnnVersion\"").ok_or("json")? + 3),
            ];
            for (what, at) in regions {
                let old = signed.as_bytes()[at];
                let new = if old.is_ascii_digit() {
                    if old == b'9' { b'8' } else { old + 1 }
                } else if old == b'a' {
                    b'b'
                } else {
                    b'a'
                };
                let text = with_byte(&signed, at, new).ok_or("utf-8")?;
                tag_refused(
                    PlanCache::new(8).load_text(&text, &t, Trust::SignedBy(&key)),
                    "plan cache text",
                )
                .map_err(|e| format!("{what}: {}", e.message().unwrap_or_default()))?;
            }
            // A file without a tag still loads its plans without compiled
            // code under the key (the partial load is for unsigned files).
            let r = PlanCache::new(8).load_text(&f.cache.to_text()?, &t, Trust::SignedBy(&key))?;
            no_compiled(&r, &f, "unsigned")?;
            ensure!(r.authentication == Authentication::Missing, "{r:?}");
            // Cut after the tag line, or bytes appended: no tag is recognised.
            for (what, text) in [
                ("appended", format!("{signed}x\n")),
                ("tag line cut", signed[..signed.len() - 1].to_string()),
            ] {
                match PlanCache::new(8).load_text(&text, &t, Trust::SignedBy(&key)) {
                    Err(_) => {}
                    Ok(r) => no_compiled(&r, &f, what)?,
                }
            }
            Ok(())
        },
    ));

    t.push(host9(
        "the_unsafe_loaders_still_load_unsigned_files",
        || {
            let t = h200()?;
            let f = fixture(&t)?;
            let unsigned = f.cache.to_text()?;
            let c = PlanCache::new(8);
            // SAFETY: this cache's own unchanged text, written with the loaded
            // cuDNN; nothing loaded here runs on a GPU.
            let r = unsafe { c.load_text_unverified(&unsigned, &t) }?;
            ensure!(
                r.loaded == 4
                    && r.runtime_compiled == f.compiled
                    && r.authentication == Authentication::Vouched,
                "{r:?}"
            );
            holds_every_plan(&c, &f, &t)?;
            let dir = temp_dir("unverified")?;
            let path = dir.join("plans.txt");
            std::fs::write(&path, &unsigned)?;
            // SAFETY: the file holds `unsigned`, this cache's own unchanged
            // text written with the loaded cuDNN, in a 0700 folder this test
            // just made fresh (no other user can change it); nothing loaded
            // runs on a GPU.
            let r = unsafe { PlanCache::new(8).load_unverified(&path, &t) }?;
            ensure!(r.loaded == 4 && r.is_complete(), "{r:?}");
            let p = f
                .cache
                .get(&f.graphs[2], &t, &Policy::default())
                .ok_or("matmul")?;
            // SAFETY: `serialize()` of a plan built here with the loaded
            // cuDNN, passed on unchanged.
            let q = unsafe { Plan::deserialize_unverified(&p.serialize()?, &t) }?;
            ensure!(q.is_runtime_compiled(), "unverified single plan");
            std::fs::remove_dir_all(&dir)?;
            Ok(())
        },
    ));

    t.push(host9(
        "a_missing_plan_cache_file_is_an_io_error_naming_it",
        || {
            let t = h200()?;
            let dir = temp_dir("missing")?;
            let path = dir.join("none.txt");
            match PlanCache::new(2).load(&path, &t, Trust::NoCompiledCode) {
                Err(Error::Io {
                    path: p, kind, op, ..
                }) if p == path && kind == std::io::ErrorKind::NotFound => {
                    eprintln!("  {op}")
                }
                other => return Err(format!("{other:?}").into()),
            }
            // Saving into a missing folder names the temporary file's folder.
            let key = PlanKey::generate()?;
            match PlanCache::new(2).save(&dir.join("no").join("plans.txt"), &key) {
                Err(Error::Io { path: p, .. }) if p.starts_with(dir.join("no")) => {}
                other => return Err(format!("{other:?}").into()),
            }
            std::fs::remove_dir_all(&dir)?;
            Ok(())
        },
    ));

    t.push(host9(
        "fuzz_changed_signed_files_never_load_compiled_code",
        || {
            let t = h200()?;
            let f = Arc::new(fixture(&t)?);
            let key = PlanKey::generate()?;
            let signed = f.cache.to_signed_text(&key)?;
            let len = signed.len();
            // 1 to 3 edits: (position, kind 0 = replace / 1 = insert / 2 = delete, byte).
            let edits = prop::collection::vec((0..len, 0u8..3, any::<u8>()), 1..4);
            let mut runner = crate::support::prop_runner(160);
            let (refused, partial) = (Cell::new(0), Cell::new(0));
            runner
                .run(&edits, |edits| {
                    let mut b = signed.as_bytes().to_vec();
                    for (at, kind, byte) in edits {
                        let at = at.min(b.len().saturating_sub(1));
                        match kind {
                            0 => b[at] = byte,
                            1 => b.insert(at, byte),
                            _ => {
                                b.remove(at);
                            }
                        }
                    }
                    let text = String::from_utf8_lossy(&b).into_owned();
                    if text == signed {
                        return Ok(());
                    }
                    let r = catch_unwind(AssertUnwindSafe(|| {
                        PlanCache::new(8).load_text(&text, &t, Trust::SignedBy(&key))
                    }));
                    match r {
                        Err(_) => Err(TestCaseError::fail("panicked")),
                        Ok(Err(_)) => {
                            refused.set(refused.get() + 1);
                            Ok(())
                        }
                        // Loaded only when the edit removed the tag line
                        // (an unsigned file), never with a wrong tag.
                        Ok(Ok(r))
                            if r.runtime_compiled == 0
                                && r.authentication == Authentication::Missing =>
                        {
                            partial.set(partial.get() + 1);
                            Ok(())
                        }
                        Ok(Ok(r)) => {
                            Err(TestCaseError::fail(format!("compiled code loaded: {r:?}")))
                        }
                    }
                })
                .map_err(|e| format!("{e}"))?;
            eprintln!(
                "  {} refused, {} loaded without compiled code",
                refused.get(),
                partial.get()
            );
            // A single plan file: the same rule.
            let p = f
                .cache
                .get(&f.graphs[2], &t, &Policy::default())
                .ok_or("matmul")?;
            let one = p.serialize_signed(&key)?;
            let edits = prop::collection::vec((0..one.len(), any::<u8>()), 1..3);
            let mut runner = crate::support::prop_runner(80);
            runner
                .run(&edits, |edits| {
                    let mut b = one.as_bytes().to_vec();
                    for (at, byte) in edits {
                        b[at] = byte;
                    }
                    let text = String::from_utf8_lossy(&b).into_owned();
                    if text == one {
                        return Ok(());
                    }
                    match catch_unwind(AssertUnwindSafe(|| {
                        Plan::deserialize(&text, &t, Trust::SignedBy(&key))
                    })) {
                        Err(_) => Err(TestCaseError::fail("panicked")),
                        Ok(Ok(p)) if p.is_runtime_compiled() => {
                            Err(TestCaseError::fail("compiled code loaded"))
                        }
                        Ok(_) => Ok(()),
                    }
                })
                .map_err(|e| format!("{e}"))?;
            // Random text, signed or not: never a panic, never compiled code.
            let mut runner = crate::support::prop_runner(200);
            let head = signed[..signed.find("\ngraph ").ok_or("graph")? + 1].to_string();
            runner
                .run(
                    &(prop::collection::vec(any::<u8>(), 0..400), any::<bool>()),
                    |(bytes, with_head)| {
                        let tail = String::from_utf8_lossy(&bytes);
                        let text = if with_head {
                            format!("{head}{tail}")
                        } else {
                            tail.into_owned()
                        };
                        let r = catch_unwind(AssertUnwindSafe(|| {
                            PlanCache::new(8).load_text(&text, &t, Trust::SignedBy(&key))
                        }));
                        match r {
                            Err(_) => Err(TestCaseError::fail("panicked")),
                            Ok(Ok(r)) if r.runtime_compiled > 0 => {
                                Err(TestCaseError::fail(format!("compiled code loaded: {r:?}")))
                            }
                            Ok(_) => Ok(()),
                        }
                    },
                )
                .map_err(|e| format!("{e}"))?;
            Ok(())
        },
    ));

    t.push(host9(
        "a_file_larger_than_the_capacity_is_an_incomplete_load",
        || {
            let t = h200()?;
            let f = fixture(&t)?;
            let key = PlanKey::generate()?;
            let signed = f.cache.to_signed_text(&key)?;
            // Four entries, a capacity of two: two stay, two are evicted by
            // later entries of the same file (counted by hand).
            let c = PlanCache::new(2);
            let r = c.load_text(&signed, &t, Trust::SignedBy(&key))?;
            eprintln!("  {r}");
            ensure!(c.len() == 2, "the cache holds {}", c.len());
            ensure!(
                r.loaded == 2
                    && r.entries() == 4
                    && r.evicted == 2
                    && !r.is_complete()
                    && r.skipped.len() == 2
                    && r.skipped.iter().all(|s| s.why == SkipReason::OverCapacity),
                "{r:?}"
            );
            let text = r.to_string();
            ensure!(
                text.starts_with("loaded 2 of 4") && text.contains("2 plans evicted"),
                "{text}"
            );
            ensure!(
                r.complete().is_err(),
                "an over-capacity load is not complete"
            );
            // The survivors are the plans the report counts as loaded.
            let held = f
                .graphs
                .iter()
                .filter(|g| c.get(g, &t, &Policy::default()).is_some())
                .count();
            ensure!(held == 2, "{held} of the file's plans are in the cache");
            // Enough room: complete, nothing evicted.
            let r = PlanCache::new(4).load_text(&signed, &t, Trust::SignedBy(&key))?;
            ensure!(r.is_complete() && r.evicted == 0, "{r:?}");
            // Plans held before the load, evicted by it, are counted too.
            let c = PlanCache::new(4);
            c.get_or_build(&conv_plain(8)?, &t, &Policy::default())?;
            let r = c.load_text(&signed, &t, Trust::SignedBy(&key))?;
            ensure!(r.is_complete() && r.evicted == 1 && c.len() == 4, "{r:?}");
            Ok(())
        },
    ));

    t.push(host9("a_fifo_at_the_cache_path_is_refused_at_once", || {
        let t = h200()?;
        let dir = temp_dir("fifo")?;
        let fifo = dir.join("plans.txt");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes())?;
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        ensure!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) } == 0, "mkfifo");
        // Before the fix the open blocked for a writer that never comes: the
        // load runs on a thread, waited for at most 20 s.
        let (tx, rx) = std::sync::mpsc::channel();
        let (p, tt) = (fifo.clone(), t.clone());
        std::thread::spawn(move || {
            let r = PlanCache::new(2).load(&p, &tt, Trust::NoCompiledCode);
            let _ = tx.send(r.map(|r| r.to_string()));
        });
        let r = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .map_err(|_| "loading a FIFO blocked for 20 s")?;
        match r {
            Err(Error::InvalidArgument { arg, rule, .. })
                if arg.contains(&fifo.display().to_string()) && rule.contains("regular file") => {}
            other => return Err(format!("{other:?}").into()),
        }
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }));

    t.push(host9("fuzz_capacity_and_load_reports_agree", || {
        let t = h200()?;
        let f = fixture(&t)?;
        let key = PlanKey::generate()?;
        let signed = f.cache.to_signed_text(&key)?;
        let mut runner = crate::support::prop_runner(24);
        // Any capacity, any number of plans held before: the report's
        // counts are the cache's (4 entries in the file, counted by hand).
        runner
            .run(&(1usize..7, 0usize..3), |(cap, before)| {
                let c = PlanCache::new(cap);
                for n in 0..before {
                    c.get_or_build(
                        &conv_plain(8 + 2 * n as i64).map_err(fail)?,
                        &t,
                        &Policy::default(),
                    )
                    .map_err(fail)?;
                }
                let held = c.len();
                let r = c
                    .load_text(&signed, &t, Trust::SignedBy(&key))
                    .map_err(fail)?;
                let want_loaded = 4.min(cap);
                let ok = r.entries() == 4
                    && r.loaded == want_loaded
                    && r.skipped.len() == 4 - want_loaded
                    && r.is_complete() == (cap >= 4)
                    && r.evicted == (held + 4).saturating_sub(cap)
                    && c.len() == (held + 4).min(cap);
                if ok {
                    Ok(())
                } else {
                    Err(TestCaseError::fail(format!(
                        "cap {cap}, {held} held: {r:?}, cache {}",
                        c.len()
                    )))
                }
            })
            .map_err(|e| format!("{e}"))?;
        Ok(())
    }));

    t.push(host9(
        "fuzz_key_files_load_only_when_private_and_whole",
        || {
            use std::os::unix::fs::PermissionsExt;
            let dir = temp_dir("keys")?;
            let mut runner = crate::support::prop_runner(64);
            // A key file of any length and mode: PlanKey::load reads it only
            // when it is 32 bytes and private (the documented rules), never
            // creates one, and never panics.
            runner
                .run(
                    &(
                        prop::collection::vec(any::<u8>(), 0..70),
                        0u32..0o1000,
                        any::<bool>(),
                    ),
                    |(bytes, mode, present)| {
                        let path = PlanKey::key_file(&dir);
                        let _ = std::fs::remove_file(&path);
                        if present {
                            std::fs::write(&path, &bytes).map_err(fail)?;
                            std::fs::set_permissions(
                                &path,
                                std::fs::Permissions::from_mode(mode | 0o400),
                            )
                            .map_err(fail)?;
                        }
                        // SAFETY: the test's own key bytes; the key tags
                        // only this test's empty cache, never loaded as code.
                        let r = unsafe { PlanKey::load(&dir) };
                        let private = (mode | 0o400) & 0o077 == 0;
                        let good = present && bytes.len() == 32 && private;
                        match (r, present) {
                            (Ok(None), false) if !path.exists() => Ok(()),
                            (Ok(Some(k)), true) if good => {
                                // The key read is the file's bytes: an empty
                                // cache signed with both keys has one tag.
                                // SAFETY: the key file's own bytes: it
                                // tags only this test's empty cache.
                                let want = unsafe { PlanKey::from_bytes(&bytes) }.map_err(fail)?;
                                let empty = PlanCache::new(1);
                                let a = empty.to_signed_text(&k).map_err(fail)?;
                                let b = empty.to_signed_text(&want).map_err(fail)?;
                                if a == b {
                                    Ok(())
                                } else {
                                    Err(TestCaseError::fail("the key read differs from the file"))
                                }
                            }
                            (Err(Error::InvalidArgument { arg, .. }), true)
                                if !good && arg.contains(&path.display().to_string()) =>
                            {
                                Ok(())
                            }
                            (other, _) => Err(TestCaseError::fail(format!(
                                "{} bytes, mode {mode:o}, present {present}: {other:?}",
                                bytes.len()
                            ))),
                        }
                    },
                )
                .map_err(|e| format!("{e}"))?;
            std::fs::remove_dir_all(&dir)?;
            Ok(())
        },
    ));

    run(t)
}

fn fail(e: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}
