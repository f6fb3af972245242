//! A plan cache keyed on graph signature + target + policy: thread-safe, LRU,
//! and persisted as a file of serialized plans, so a server can start with
//! no planning at all.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use super::graph::Graph;
use super::heuristics::Policy;
use super::plan::{Plan, Reader, read_io, write_io};
use super::target::Target;
use crate::error::{Error, Result};

/// The largest plan-cache file [`PlanCache::load`] reads.
pub const MAX_FILE_BYTES: u64 = 256 << 20;

const HEADER: &str = "cudnn-rs plan cache v1";

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    graph: String,
    target: String,
    policy: String,
}

/// Plans by (graph, target, policy), most recently used last.
#[derive(Debug)]
pub struct PlanCache {
    inner: Mutex<VecDeque<(Key, Arc<Plan>)>>,
    capacity: usize,
}

impl PlanCache {
    /// An empty cache holding at most `capacity` plans (at least 1).
    pub fn new(capacity: usize) -> Self {
        Self {
            inner: Mutex::new(VecDeque::new()),
            capacity: capacity.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<(Key, Arc<Plan>)>> {
        // A panic while holding the lock cannot leave the list inconsistent
        // (every mutation is a single push/remove), so a poisoned lock is usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn key(graph: &Graph, target: &Target, policy: &Policy) -> Key {
        Key {
            graph: graph.signature(),
            target: target.properties().arch_key(),
            policy: policy.signature(),
        }
    }

    /// The cached plan, if any (marks it most recently used).
    pub fn get(&self, graph: &Graph, target: &Target, policy: &Policy) -> Option<Arc<Plan>> {
        let key = Self::key(graph, target, policy);
        let mut l = self.lock();
        let i = l.iter().position(|(k, _)| *k == key)?;
        let e = l.remove(i)?;
        let plan = e.1.clone();
        l.push_back(e);
        Some(plan)
    }

    fn insert(&self, key: Key, plan: Arc<Plan>) {
        let mut l = self.lock();
        if let Some(i) = l.iter().position(|(k, _)| *k == key) {
            l.remove(i);
        }
        l.push_back((key, plan));
        while l.len() > self.capacity {
            l.pop_front();
        }
    }

    /// The cached plan, or build one (graph build + heuristics + finalize) and cache it.
    ///
    /// # Errors
    /// As [`Graph::build`] and [`Plan::build`].
    pub fn get_or_build(
        &self,
        graph: &Graph,
        target: &Target,
        policy: &Policy,
    ) -> Result<Arc<Plan>> {
        if let Some(p) = self.get(graph, target, policy) {
            return Ok(p);
        }
        let (plan, _) = Plan::build(&graph.build()?, target, policy)?;
        let plan = Arc::new(plan);
        self.insert(Self::key(graph, target, policy), plan.clone());
        Ok(plan)
    }

    /// Number of cached plans.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forget every plan.
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// The cache as text: every plan serialized with its key.
    ///
    /// # Errors
    /// cuDNN's refusal to serialize a plan.
    pub fn to_text(&self) -> Result<String> {
        let entries: Vec<(Key, Arc<Plan>)> = self.lock().iter().cloned().collect();
        let mut s = format!("{HEADER}\nentries {}\n", entries.len());
        for (k, plan) in entries {
            let json = plan.cudnn_json()?;
            s.push_str(&format!("graph {}\n{}\n", k.graph.len(), k.graph));
            s.push_str(&format!("target {}\n", k.target));
            s.push_str(&format!("policy {}\n{}\n", k.policy.len(), k.policy));
            write_io(&mut s, plan.io());
            s.push_str(&format!("json {}\n{json}\n", json.len()));
        }
        Ok(s)
    }

    /// Save to `path` (written to a temporary file, then renamed).
    ///
    /// # Errors
    /// Serialization or I/O (the path named).
    pub fn save(&self, path: &Path) -> Result<()> {
        let text = self.to_text()?;
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).map_err(|e| io_error("writing", &tmp, e))?;
        std::fs::rename(&tmp, path).map_err(|e| io_error("renaming into", path, e))
    }

    /// Load every plan in `text` for `target`. All or nothing: a malformed
    /// entry, an entry for another target, or a plan cuDNN refuses leaves the
    /// cache unchanged. Returns how many plans were loaded.
    ///
    /// # Errors
    /// What is wrong and on which line; a foreign target names both.
    pub fn load_text(&self, text: &str, target: &Target) -> Result<usize> {
        let mut r = Reader::named(text, "plan cache file");
        r.expect_line(HEADER)?;
        let n = r.field("entries")?;
        let n: usize = r.parse("entries", &n)?;
        if n > 1 << 16 {
            return Err(r.bad("at most 65536 entries"));
        }
        let mut loaded = Vec::with_capacity(n);
        for _ in 0..n {
            let graph = blob_line(&mut r, "graph")?;
            let t = r.field("target")?;
            if !target.properties().compatible(&t) {
                return Err(Error::Unsupported {
                    what: format!(
                        "the plan cache file holds plans for `{t}`, not `{}`",
                        target.fingerprint()
                    ),
                    needs: Some("a cache file made for this target".to_string()),
                });
            }
            let policy = blob_line(&mut r, "policy")?;
            let io = read_io(&mut r)?;
            let json = r.blob("json")?;
            let plan = Plan::from_cudnn_json(&json, target, Arc::new(io))?;
            loaded.push((
                Key {
                    graph,
                    target: t,
                    policy,
                },
                Arc::new(plan),
            ));
        }
        if !r.at_end() {
            return Err(r.bad("the end of the file"));
        }
        let count = loaded.len();
        for (k, p) in loaded {
            self.insert(k, p);
        }
        Ok(count)
    }

    /// Load a file saved by [`save`](Self::save), for `target`.
    ///
    /// # Errors
    /// Larger than [`MAX_CACHE_FILE_BYTES`](super::MAX_CACHE_FILE_BYTES), unreadable, or as [`load_text`](Self::load_text).
    pub fn load(&self, path: &Path, target: &Target) -> Result<usize> {
        use std::io::Read;
        let f = std::fs::File::open(path).map_err(|e| io_error("opening", path, e))?;
        let mut bytes = Vec::new();
        f.take(MAX_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| io_error("reading", path, e))?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(Error::invalid(
                format!("plan cache file {}", path.display()),
                format!("must be at most {MAX_FILE_BYTES} bytes"),
                "larger",
            ));
        }
        let text = String::from_utf8(bytes).map_err(|e| {
            Error::invalid(
                format!("plan cache file {}", path.display()),
                "must be UTF-8 text",
                e,
            )
        })?;
        self.load_text(&text, target)
    }
}

fn blob_line(r: &mut Reader<'_>, key: &str) -> Result<String> {
    r.blob(key)
}

fn io_error(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::invalid(
        format!("plan cache file {}", path.display()),
        format!("{what} failed"),
        e,
    )
}
