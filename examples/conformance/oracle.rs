//! The frontend's side of the tier: NVIDIA's cuDNN frontend run in Python
//! processes (`xtask/conformance/frontend.py`) over a request's items, and
//! the oracle's memory: an answer the frontend gave for the same item,
//! with the same script, frontend, cuDNN and driver stub, is read back
//! instead of asked again (`--oracle-cache DIR`; `cargo xtask test` keeps
//! it in the target folder). Its answers depend on nothing else, so a
//! change to the crate reruns only the crate's side and the items whose
//! request changed. Never under `--timing` (the answers carry times).
//!
//! Also [`par_map`], which splits the crate's side over threads.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};

use crate::Stop;

/// The answers the frontend gave before, in `dir`, for one library set
/// (`env`: every input of the frontend's side other than the request).
pub(crate) struct Oracle {
    dir: PathBuf,
    env: String,
    /// The cuDNN version this process loaded: an answer the frontend gave
    /// on another is never read back.
    cudnn: Option<String>,
}

impl Oracle {
    /// The memory in `dir` (made if missing) for the frontend in `fe`,
    /// the script `script` and the cuDNN folders `cudnn_lib`: their
    /// contents' identity (the script's text; the canonical paths, sizes
    /// and modification times of the installed frontend's metadata, the
    /// driver stub and every cuDNN library file, links followed; the
    /// interpreter's path; the inherited `LD_LIBRARY_PATH` and every
    /// `CUDNN*` variable, which steer what the frontend loads and picks) is
    /// part of every key, so any change there is a miss. `cudnn`: the
    /// version this process loaded; a remembered answer whose run reported
    /// another is a miss too.
    pub(crate) fn open(
        dir: &Path,
        fe: &Path,
        script: &Path,
        cudnn_lib: &[String],
        cudnn: Option<String>,
    ) -> Result<Oracle, Stop> {
        std::fs::create_dir_all(dir).map_err(|e| Stop::Fail(format!("{}: {e}", dir.display())))?;
        let mut env = String::new();
        let text = std::fs::read_to_string(script)
            .map_err(|e| Stop::Fail(format!("{}: {e}", script.display())))?;
        env.push_str(&format!("script {}\n{text}\n", text.len()));
        env.push_str(&format!(
            "python {}\n",
            std::fs::read_to_string(fe.join("python"))
                .unwrap_or_default()
                .trim()
        ));
        env.push_str(&files_identity(&fe.join("site"), |n| {
            n.ends_with(".dist-info")
        }));
        env.push_str(&files_identity(&fe.join("stub"), |_| true));
        for d in cudnn_lib {
            env.push_str(&files_identity(Path::new(d), |_| true));
        }
        let mut vars: Vec<(String, String)> = std::env::vars()
            .filter(|(k, _)| k == "LD_LIBRARY_PATH" || k.starts_with("CUDNN"))
            .collect();
        vars.sort();
        for (k, v) in vars {
            env.push_str(&format!("var {k}={v}\n"));
        }
        Ok(Oracle {
            dir: dir.to_path_buf(),
            env,
            cudnn,
        })
    }

    fn key(&self, mode: &str, req: &Value, item: &Value) -> String {
        format!(
            "mode {mode}\nreps {}\ntargets {}\nenv {}\nitem {item}",
            req["reps"], req["targets"], self.env
        )
    }

    /// The file of `key`: its 64-bit FNV-1a hash (stable across toolchains).
    fn file(key: &str) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in key.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        format!("{h:016x}.json")
    }

    /// The remembered answer for `key` (its whole key compared, so two keys
    /// sharing a file name never mix), with the run's other fields.
    fn get(&self, key: &str) -> Option<(Value, Value)> {
        let text = std::fs::read_to_string(self.dir.join(Self::file(key))).ok()?;
        let v: Value = serde_json::from_str(&text).ok()?;
        let same_cudnn =
            self.cudnn.is_some() && v["top"]["cudnn"].as_str() == self.cudnn.as_deref();
        (v["key"].as_str() == Some(key) && same_cudnn)
            .then(|| (v["answer"].clone(), v["top"].clone()))
    }

    /// Remember `answer` (written whole, then renamed into place: a reader
    /// never sees half a file). A write that fails only costs a rerun. An
    /// answer carrying an error is not remembered (it may be a passing
    /// failure of that run: asked again next time).
    fn put(&self, key: &str, answer: &Value, top: &Value) {
        if !answer["error"].is_null() {
            return;
        }
        let name = Self::file(key);
        let tmp = self.dir.join(format!("{name}.{}.tmp", std::process::id()));
        let v = json!({"key": key, "answer": answer, "top": top});
        if std::fs::write(&tmp, v.to_string()).is_ok() {
            let _ = std::fs::rename(&tmp, self.dir.join(name));
        }
    }
}

/// `name canonical-path size mtime` of each entry of `dir` whose name
/// `keep` accepts (sorted; links followed; for `.dist-info` entries, the
/// folders themselves).
fn files_identity(dir: &Path, keep: impl Fn(&str) -> bool) -> String {
    let mut rows = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !keep(&name) {
                continue;
            }
            // Links followed: the file's own identity and where it is.
            let path = e.path();
            let real = std::fs::canonicalize(&path).unwrap_or(path.clone());
            let (len, mtime) = std::fs::metadata(&path).map_or((0, 0), |m| {
                let t = m
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_nanos());
                (m.len(), t)
            });
            rows.push(format!("{name} {} {len} {mtime}", real.display()));
        }
    }
    rows.sort();
    format!("dir {}\n{}\n", dir.display(), rows.join("\n"))
}

/// The frontend's side of `mode` for `req`'s items: the answers `oracle`
/// remembers, and the others asked of the frontend in `jobs` Python
/// processes at once ([`python_jobs`]) and remembered; in the items' order.
pub(crate) fn frontend(
    req: &Value,
    mode: &str,
    fe: &Path,
    work: &Path,
    jobs: usize,
    oracle: Option<&Oracle>,
) -> Result<Value, Stop> {
    let Some(oracle) = oracle else {
        return python_jobs(req, mode, fe, work, jobs);
    };
    let items = req["items"].as_array().cloned().unwrap_or_default();
    let keys: Vec<String> = items.iter().map(|it| oracle.key(mode, req, it)).collect();
    let mut answers: Vec<Option<Value>> = Vec::with_capacity(items.len());
    let mut top = Value::Null;
    let mut missing = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        match oracle.get(k) {
            Some((a, t)) => {
                answers.push(Some(a));
                if top.is_null() {
                    top = t;
                }
            }
            None => {
                answers.push(None);
                missing.push(i);
            }
        }
    }
    eprintln!(
        "conformance: frontend {mode}: {} of {} answers remembered, {} asked",
        items.len() - missing.len(),
        items.len(),
        missing.len()
    );
    if !missing.is_empty() {
        let mut r = req.clone();
        r["items"] = Value::Array(missing.iter().map(|&i| items[i].clone()).collect());
        let mut got = python_jobs(&r, mode, fe, work, jobs)?;
        let results = got["results"].take();
        let results = results.as_array().cloned().unwrap_or_default();
        if results.len() != missing.len() {
            return Err(Stop::Fail(format!(
                "the frontend side answered {} of {} items",
                results.len(),
                missing.len()
            )));
        }
        got.as_object_mut().map(|o| o.remove("results"));
        for (&i, a) in missing.iter().zip(results) {
            oracle.put(&keys[i], &a, &got);
            answers[i] = Some(a);
        }
        top = got;
    }
    let mut out = if top.is_object() { top } else { json!({}) };
    out["results"] = Value::Array(
        answers
            .into_iter()
            .map(|a| a.unwrap_or(Value::Null))
            .collect(),
    );
    Ok(out)
}

/// The frontend's side's script.
pub(crate) fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("xtask")
        .join("conformance")
        .join("frontend.py")
}

/// `f` over `items` in `jobs` threads (each takes the next item not yet
/// taken), the results in the items' order: for the crate's side, whose
/// items are planned each on its own, so the split changes nothing but the
/// wall time. A thread that panics is a failure of the tier.
pub(crate) fn par_map<T: Sync, R: Send>(
    items: &[T],
    jobs: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Result<Vec<R>, Stop> {
    let jobs = jobs.clamp(1, items.len().max(1));
    if jobs == 1 {
        return Ok(items.iter().map(f).collect());
    }
    let next = AtomicUsize::new(0);
    let parts: Vec<std::thread::Result<Vec<(usize, R)>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..jobs)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(i) else { break };
                        mine.push((i, f(item)));
                    }
                    mine
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join()).collect()
    });
    let mut all = Vec::with_capacity(items.len());
    for p in parts {
        all.extend(p.map_err(|_| Stop::Fail("a thread of the crate's side panicked".into()))?);
    }
    all.sort_by_key(|(i, _)| *i);
    Ok(all.into_iter().map(|(_, r)| r).collect())
}

/// The frontend's side of `mode` for `req`'s items, in `jobs` Python
/// processes at once (contiguous shares of the items, answers joined in
/// order; the first process's other fields kept): the frontend plans each
/// item on its own, so the split changes nothing but the wall time. One
/// process under `--timing` (parallel runs would disturb the times).
fn python_jobs(
    req: &Value,
    mode: &str,
    fe: &Path,
    work: &Path,
    jobs: usize,
) -> Result<Value, Stop> {
    let items = req["items"].as_array().cloned().unwrap_or_default();
    let jobs = jobs.clamp(1, items.len().max(1));
    if jobs == 1 {
        return python(req, mode, mode, fe, work);
    }
    let share = items.len().div_ceil(jobs);
    let answers: Vec<Result<Value, Stop>> = std::thread::scope(|s| {
        let handles: Vec<_> = items
            .chunks(share)
            .enumerate()
            .map(|(i, chunk)| {
                let mut r = req.clone();
                r["items"] = Value::Array(chunk.to_vec());
                let tag = format!("{mode}-{i}");
                s.spawn(move || python(&r, mode, &tag, fe, work))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Stop::Fail("a frontend job's thread panicked".into())))
            })
            .collect()
    });
    let mut joined: Option<Value> = None;
    let mut results = Vec::new();
    for a in answers {
        let a = a?;
        results.extend(a["results"].as_array().cloned().unwrap_or_default());
        joined.get_or_insert(a);
    }
    let mut out = joined.unwrap_or_else(|| json!({}));
    out["results"] = Value::Array(results);
    Ok(out)
}

fn python(req: &Value, mode: &str, tag: &str, fe: &Path, work: &Path) -> Result<Value, Stop> {
    if !fe.join("site").join("cudnn").is_dir() {
        return Err(Stop::Missing(format!(
            "no cuDNN frontend in {} (`cargo xtask fetch-libs` installs it)",
            fe.join("site").display()
        )));
    }
    let py = std::fs::read_to_string(fe.join("python"))
        .map(|s| s.trim().to_string())
        .map_err(|e| Stop::Missing(format!("{}: {e}", fe.join("python").display())))?;
    let script = script();
    let rq = work.join(format!("{tag}-request.json"));
    let rs = work.join(format!("{tag}-result.json"));
    std::fs::write(&rq, req.to_string())
        .map_err(|e| Stop::Fail(format!("{}: {e}", rq.display())))?;
    let out = std::process::Command::new(&py)
        .arg(&script)
        .arg(mode)
        .arg(&rq)
        .arg(&rs)
        .env("PYTHONNOUSERSITE", "1")
        .env_remove("PYTHONPATH")
        .output()
        .map_err(|e| Stop::Missing(format!("running {py}: {e}")))?;
    if !out.status.success() {
        return Err(Stop::Fail(format!(
            "{py} {} {mode} failed ({}): {}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let text =
        std::fs::read_to_string(&rs).map_err(|e| Stop::Fail(format!("{}: {e}", rs.display())))?;
    serde_json::from_str(&text).map_err(|e| Stop::Fail(format!("{}: {e}", rs.display())))
}
