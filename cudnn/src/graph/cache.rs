//! A plan cache keyed on graph signature + target + policy: thread-safe, LRU
//! (preferring to evict plans that are cheap to rebuild), and persisted as a
//! file of serialized plans, so a server can start with no planning at all.
//!
//! # Memory over time
//! cuDNN keeps about 0.4 MB of host memory for every runtime-compiled plan
//! it builds (SDPA, matmul and most fusions; measured: about 820 KB of growth
//! per full SDPA build cycle, linear over 200 builds, none of it in this
//! crate), and does not give it back when the plan is destroyed. A cache that
//! evicts such plans and builds them again therefore grows the process
//! without bound. So eviction prefers plans that are cheap to rebuild
//! (precompiled engines), [`CacheStats::rebuilds`] counts plans built again
//! after they were evicted, and a capacity that holds the working set of
//! runtime-compiled plans is the remedy when that count keeps rising.
//!
//! # Trust
//! A runtime-compiled plan carries compiled kernel code, so a cache file is
//! executable code. [`PlanCache::save`] signs the file with a [`PlanKey`]
//! (see its docs); [`PlanCache::load`] takes an explicit [`Trust`] and loads
//! compiled code only from a file whose tag verifies under the given key. A
//! file whose tag does not verify is refused whole; from a file without a
//! tag (or a load without a key) every entry with compiled code is skipped
//! and reported in the `#[must_use]` [`LoadReport`]; the `unsafe`
//! `*_unverified` loaders take compiled code from files no key vouches for.

use std::collections::{HashSet, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use super::graph::{Graph, IoSignature};
use super::heuristics::Policy;
use super::plan::Plan;
use super::plan_auth::{self, Authentication, FileKind, PlanKey, Trust};
use super::plan_file::{Reader, fmt_cudnn_version, loaded_cudnn_version, read_io, write_io};
use super::plan_json::Payload;
use super::target::Target;
use super::tensor::fmt_dims;
use crate::error::{Error, Result};

/// The largest plan-cache file [`PlanCache::load`] reads.
pub const MAX_FILE_BYTES: u64 = 256 << 20;

const HEADER_PREFIX: &str = "cudnn-rs plan cache";

/// The plan-cache file format this crate writes, and the only one it reads.
///
/// 3: as plan-file format 2 (each entry records the cuDNN that made it),
/// with graph keys that name the GELU modes by their form (`GeluErf`,
/// `GeluErfBwd`). Formats 1 and 2 wrote `Gelu` / `GeluBwd` in the keys, so
/// their GELU entries would load under keys no graph has any more (and be
/// silently never found): such files are refused whole, with
/// [`Error::Unsupported`] naming the format. Plan files (one plan, no
/// graph key) keep their own format, [`super::plan_file::FORMAT`].
pub(crate) const CACHE_FORMAT: u32 = 3;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    graph: String,
    target: String,
    policy: String,
}

/// Counters of a [`PlanCache`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheStats {
    /// Lookups that found a plan.
    pub hits: u64,
    /// Lookups that found none.
    pub misses: u64,
    /// Plans built by [`PlanCache::get_or_build`].
    pub builds: u64,
    /// Of those, plans built again for a key that had been evicted (each a
    /// cost in time, and for runtime-compiled plans ~0.4 MB of cuDNN host
    /// memory that is never returned).
    pub rebuilds: u64,
    /// Of the rebuilds, runtime-compiled plans.
    pub runtime_compiled_rebuilds: u64,
    /// Plans evicted to stay within the capacity.
    pub evictions: u64,
}

/// Why an entry of a plan-cache file was not loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SkipReason {
    /// Made by another cuDNN than the one loaded (rebuild it with this one).
    OtherCudnn,
    /// Its plan carries compiled kernel code (a runtime-compiled plan) and
    /// the file is not authenticated under the load's key (see
    /// [`LoadReport::authentication`]).
    CompiledCodeNotAuthenticated,
    /// Loaded, then evicted by later entries of the same file: the file
    /// holds more plans than the cache's capacity.
    OverCapacity,
    /// Its key appears again later in the file, whose plan replaced it.
    Duplicate,
}

/// An entry of a plan-cache file that was not loaded, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SkippedEntry {
    /// Its position in the file (0-based).
    pub index: usize,
    /// Why, as a value.
    pub why: SkipReason,
    /// Why, in words (e.g. made by another cuDNN, both versions named).
    pub reason: String,
}

/// What a plan-cache load did: how many entries it loaded, which it
/// skipped and why, and what the file's tag said.
///
/// A load that skips entries is not an error: a skipped plan is rebuilt by
/// the next [`PlanCache::get_or_build`] for its key, as after a cuDNN
/// upgrade. But it costs a build, so the report must be looked at: it is
/// `#[must_use]`, and its `Display` gives the counts (`loaded 4 of 6
/// entries; skipped 2 ...`). A caller that wants an error for an incomplete
/// load calls [`complete`](Self::complete):
///
/// ```no_run
/// # use cudnn::graph::{PlanCache, PlanKey, Target, Trust};
/// #[deny(unused_must_use)]
/// fn restore(cache: &PlanCache, key: &PlanKey) -> cudnn::Result<()> {
///     let target = Target::preset("h200")?;
///     let path = std::path::Path::new("plans.txt");
///     cache.load(path, &target, Trust::SignedBy(key))?.complete()?;
///     Ok(())
/// }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[must_use = "a plan-cache load can skip entries: look at the report (its Display gives the count) or call `complete()`"]
pub struct LoadReport {
    /// Plans loaded into the cache.
    pub loaded: usize,
    /// Of those, plans with compiled kernel code (runtime-compiled).
    pub runtime_compiled: usize,
    /// Entries skipped, each with its reason (by position in the file).
    pub skipped: Vec<SkippedEntry>,
    /// Plans the cache evicted during the load to stay within its capacity:
    /// plans it held before, and entries of this file evicted by later ones
    /// (those are also in `skipped`, as [`SkipReason::OverCapacity`]).
    pub evicted: usize,
    /// What the file's tag said under the load's key.
    pub authentication: Authentication,
}

impl LoadReport {
    /// Entries in the file (loaded and skipped).
    pub fn entries(&self) -> usize {
        self.loaded.saturating_add(self.skipped.len())
    }

    /// Whether every entry was loaded and is in the cache after the load.
    pub fn is_complete(&self) -> bool {
        self.skipped.is_empty()
    }

    /// `Ok` if every entry of the file was loaded and is in the cache, else
    /// an error with the counts and reasons.
    ///
    /// This checks the report; it does not undo the load: the plans that
    /// were loaded stay in the cache either way (they are sound to use; a
    /// caller that wants none of them calls [`PlanCache::clear`]).
    ///
    /// # Errors
    /// `Unsupported`, with this report's `Display`.
    pub fn complete(self) -> Result<()> {
        if self.is_complete() {
            return Ok(());
        }
        Err(Error::Unsupported {
            what: format!("an incomplete plan-cache load: {self}"),
            needs: Some(
                "a cache file this program saved with the loaded cuDNN, loaded with \
                 `Trust::SignedBy` the key it was saved with"
                    .to_string(),
            ),
        })
    }
}

impl std::fmt::Display for LoadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "loaded {} of {} plan-cache entries ({} runtime-compiled)",
            self.loaded,
            self.entries(),
            self.runtime_compiled
        )?;
        if self.evicted > 0 {
            write!(
                f,
                "; {} plans evicted to stay within capacity",
                self.evicted
            )?;
        }
        if self.skipped.is_empty() {
            return Ok(());
        }
        let count = |w| self.skipped.iter().filter(|e| e.why == w).count();
        write!(f, "; skipped {}", self.skipped.len())?;
        let code = count(SkipReason::CompiledCodeNotAuthenticated);
        let other = count(SkipReason::OtherCudnn);
        let over = count(SkipReason::OverCapacity);
        let dup = count(SkipReason::Duplicate);
        let mut sep = ": ";
        if code > 0 {
            write!(
                f,
                "{sep}{code} carrying compiled kernel code, not loaded because {}",
                self.authentication
            )?;
            sep = ", ";
        }
        if other > 0 {
            write!(f, "{sep}{other} made by another cuDNN")?;
            sep = ", ";
        }
        if over > 0 {
            write!(
                f,
                "{sep}{over} evicted by later entries (more plans than the cache holds)"
            )?;
            sep = ", ";
        }
        if dup > 0 {
            write!(f, "{sep}{dup} replaced by a later entry with the same key")?;
            sep = ", ";
        }
        let rest = self
            .skipped
            .len()
            .saturating_sub(code)
            .saturating_sub(other)
            .saturating_sub(over)
            .saturating_sub(dup);
        if rest > 0 {
            write!(f, "{sep}{rest} for other reasons")?;
        }
        Ok(())
    }
}

#[derive(Debug, Default)]
struct Inner {
    entries: VecDeque<(Key, Arc<Plan>)>,
    evicted: HashSet<Key>,
    stats: CacheStats,
}

/// Plans by (graph, target, policy), most recently used last.
#[derive(Debug)]
pub struct PlanCache {
    inner: Mutex<Inner>,
    capacity: usize,
}

impl PlanCache {
    /// An empty cache holding at most `capacity` plans (at least 1).
    pub fn new(capacity: usize) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            capacity: capacity.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
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
        let Some(i) = l.entries.iter().position(|(k, _)| *k == key) else {
            l.stats.misses = l.stats.misses.saturating_add(1);
            return None;
        };
        l.stats.hits = l.stats.hits.saturating_add(1);
        let e = l.entries.remove(i)?;
        let plan = e.1.clone();
        l.entries.push_back(e);
        Some(plan)
    }

    fn insert(&self, key: Key, plan: Arc<Plan>) {
        let mut l = self.lock();
        self.insert_locked(&mut l, key, plan);
    }

    /// Insert under the lock; the number of plans evicted.
    fn insert_locked(&self, l: &mut Inner, key: Key, plan: Arc<Plan>) -> usize {
        let mut evicted = 0usize;
        if let Some(i) = l.entries.iter().position(|(k, _)| *k == key) {
            l.entries.remove(i);
        }
        l.evicted.remove(&key);
        l.entries.push_back((key, plan));
        while l.entries.len() > self.capacity {
            // Among the least recently used half (at least two), evict the
            // oldest plan that is cheap to rebuild, else the oldest.
            let window = (l.entries.len() / 2).max(2);
            let victim = l
                .entries
                .iter()
                .take(window)
                .position(|(_, p)| !p.is_runtime_compiled())
                .unwrap_or(0);
            if let Some((k, _)) = l.entries.remove(victim) {
                // Bounded: at most the keys ever evicted, forgotten when
                // they come back.
                if l.evicted.len() < 1 << 16 {
                    l.evicted.insert(k);
                }
                l.stats.evictions = l.stats.evictions.saturating_add(1);
                evicted = evicted.saturating_add(1);
            }
        }
        evicted
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
        let key = Self::key(graph, target, policy);
        {
            let mut l = self.lock();
            l.stats.builds = l.stats.builds.saturating_add(1);
            if l.evicted.contains(&key) {
                l.stats.rebuilds = l.stats.rebuilds.saturating_add(1);
                if plan.is_runtime_compiled() {
                    l.stats.runtime_compiled_rebuilds =
                        l.stats.runtime_compiled_rebuilds.saturating_add(1);
                }
            }
        }
        self.insert(key, plan.clone());
        Ok(plan)
    }

    /// The cache's counters.
    pub fn stats(&self) -> CacheStats {
        self.lock().stats
    }

    /// Number of cached plans.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forget every plan.
    pub fn clear(&self) {
        self.lock().entries.clear();
    }

    /// The cache as text: every plan serialized with its key and the cuDNN
    /// version that made it (format 3, see the module's notes), unsigned: its runtime-compiled plans
    /// load only through the `unsafe`
    /// [`load_text_unverified`](Self::load_text_unverified). See
    /// [`to_signed_text`](Self::to_signed_text).
    ///
    /// # Errors
    /// cuDNN's refusal to serialize a plan.
    pub fn to_text(&self) -> Result<String> {
        let entries: Vec<(Key, Arc<Plan>)> = self.lock().entries.iter().cloned().collect();
        let version = loaded_cudnn_version()?;
        let mut s = format!(
            "{HEADER_PREFIX} v{CACHE_FORMAT}\nentries {}\n",
            entries.len()
        );
        for (k, plan) in entries {
            let json = plan.cudnn_json()?;
            s.push_str(&format!("graph {}\n{}\n", k.graph.len(), k.graph));
            s.push_str(&format!("target {}\n", k.target));
            s.push_str(&format!("cudnn {version}\n"));
            s.push_str(&format!("policy {}\n{}\n", k.policy.len(), k.policy));
            write_io(&mut s, plan.io());
            s.push_str(&format!("json {}\n{json}\n", json.len()));
        }
        Ok(s)
    }

    /// [`to_text`](Self::to_text) with a last line that authenticates it:
    /// an HMAC-SHA256 under `key` over everything before it (see
    /// [`PlanKey`]). [`load_text`](Self::load_text) with
    /// [`Trust::SignedBy`] the same key loads every entry, runtime-compiled
    /// plans included.
    ///
    /// # Errors
    /// As [`to_text`](Self::to_text).
    pub fn to_signed_text(&self, key: &PlanKey) -> Result<String> {
        plan_auth::sign(key, FileKind::PlanCache, self.to_text()?)
    }

    /// Save to `path`, signed with `key` (as
    /// [`to_signed_text`](Self::to_signed_text)), so that
    /// [`load`](Self::load) with [`Trust::SignedBy`] the same key restores
    /// every plan. The file is written to a temporary file of its own in the
    /// same folder, synced, then renamed over `path` (and the folder synced),
    /// so a concurrent reader sees the old or the new file, never a mix,
    /// concurrent saves do not collide, and a crash leaves one of the two.
    ///
    /// Saving always signs: an unsigned cache file would lose its
    /// runtime-compiled plans on every safe load. A per-user key across
    /// runs: [`PlanKey::load_or_create`] (`unsafe`) on the cache's folder.
    ///
    /// # Errors
    /// Serialization, or I/O (`Io`, naming the path).
    pub fn save(&self, path: &Path, key: &PlanKey) -> Result<()> {
        if path.file_name().is_none() {
            return Err(Error::invalid(
                "plan cache file",
                "must name a file",
                path.display().to_string(),
            ));
        }
        let text = self.to_signed_text(key)?;
        crate::atomic_file::replace(path, text.as_bytes()).map_err(|e| {
            Error::io(
                format!("{} the plan cache file", e.step.words()),
                &e.path,
                &e.source,
            )
        })
    }

    /// Load every plan in `text` for `target`, accepting compiled code as
    /// `trust` says. A malformed file, an entry for another target, or a
    /// plan that disagrees with its tensor list or that cuDNN refuses leaves
    /// the cache unchanged (all or nothing). Files of formats 1 and 2
    /// (written before the GELU modes were renamed, which changed the graph
    /// keys) are refused whole with [`Error::Unsupported`]: plan again and
    /// save.
    ///
    /// Skipped, with the reason in the report, and the rest loaded: an entry
    /// made by another cuDNN than the one loaded; an entry whose plan carries
    /// compiled kernel code (a runtime-compiled plan: SDPA, matmul and norm
    /// fusions) unless `trust` is [`Trust::SignedBy`] a key the file's tag
    /// verifies under (a file [`save`](Self::save) or
    /// [`to_signed_text`](Self::to_signed_text) wrote with that key). Such
    /// code cannot be checked against its tensor list, and cuDNN cannot
    /// rebuild the plan without it (a later `get_or_build` builds it). Every
    /// entry, authenticated or not, is checked against its tensor list.
    /// Entries evicted by later entries of the same file (a file with more
    /// plans than the capacity) are reported as skipped too.
    ///
    /// Under [`Trust::SignedBy`], a file whose tag is present but does not
    /// verify (another key's, or the file changed after it was signed) is
    /// refused whole: nothing of it reaches cuDNN. A file without a tag loads
    /// its plans without compiled code.
    ///
    /// # Errors
    /// What is wrong and on which line; a foreign target names both; a tag
    /// that does not verify (`InvalidArgument`); a file of an older format
    /// (`Unsupported`, naming it).
    pub fn load_text(&self, text: &str, target: &Target, trust: Trust<'_>) -> Result<LoadReport> {
        self.load_text_named(text, target, trust, "plan cache text")
    }

    fn load_text_named(
        &self,
        text: &str,
        target: &Target,
        trust: Trust<'_>,
        name: &str,
    ) -> Result<LoadReport> {
        let key = match trust {
            Trust::NoCompiledCode => None,
            Trust::SignedBy(k) => Some(k),
        };
        let (body, auth) = plan_auth::check(text, FileKind::PlanCache, key);
        if auth == Authentication::Invalid {
            return Err(plan_auth::tag_refused(name));
        }
        self.load_text_with(body, target, auth)
    }

    /// [`load_text`](Self::load_text) that also loads the compiled code of
    /// an unsigned file (a tag, if any, is ignored); every other check runs.
    ///
    /// # Safety
    /// If the file carries compiled code, each entry's plan JSON must be
    /// cuDNN's JSON, unchanged, of a plan built with the loaded cuDNN for a
    /// graph whose IoSignature is exactly the entry's tensor list (names
    /// aside): otherwise executing a loaded plan can read and write memory
    /// outside the bound buffers. A file this crate's
    /// [`to_text`](Self::to_text) or [`save`](Self::save) wrote with the
    /// loaded cuDNN, not changed since, is one. See
    /// [`Plan::from_cudnn_json_unverified`](super::Plan::from_cudnn_json_unverified).
    ///
    /// # Errors
    /// As [`load_text`](Self::load_text).
    pub unsafe fn load_text_unverified(&self, text: &str, target: &Target) -> Result<LoadReport> {
        let (body, _) = plan_auth::split(text);
        self.load_text_with(body, target, Authentication::Vouched)
    }

    fn load_text_with(
        &self,
        text: &str,
        target: &Target,
        auth: Authentication,
    ) -> Result<LoadReport> {
        let payload = if auth.allows_compiled_code() {
            Payload::Keep
        } else {
            Payload::Refuse
        };
        let mut r = Reader::named(text, "plan cache file");
        let header = r.line()?;
        match header
            .strip_prefix(HEADER_PREFIX)
            .and_then(|v| v.strip_prefix(" v"))
            .and_then(|v| v.parse::<u32>().ok())
        {
            Some(CACHE_FORMAT) => {}
            Some(old @ (1 | 2)) => {
                return Err(Error::Unsupported {
                    what: format!(
                        "a plan cache file of format v{old} (`{header}`): its graph keys name \
                         the GELU modes as before they were renamed, so its GELU plans would \
                         never be found"
                    ),
                    needs: Some(format!(
                        "a plan cache file of format v{CACHE_FORMAT}: plan the graphs again \
                         and save the cache"
                    )),
                });
            }
            _ => return Err(r.bad(&format!("`{HEADER_PREFIX} v{CACHE_FORMAT}`"))),
        }
        let n = r.field("entries")?;
        let n: usize = r.parse("entries", &n)?;
        if n > 1 << 16 {
            return Err(r.bad("at most 65536 entries"));
        }
        let loaded_version = loaded_cudnn_version()?;
        let mut loaded = Vec::with_capacity(n.min(1024));
        let mut skipped = Vec::new();
        for index in 0..n {
            let graph = r.blob("graph")?;
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
            let v = r.field("cudnn")?;
            let made_by = r.parse::<u64>("cudnn version", &v)?;
            let policy = r.blob("policy")?;
            let io = read_io(&mut r)?;
            let json = r.blob("json")?;
            // The tensor list is the key's graph's (the plan JSON is then
            // checked against the tensor list).
            io_matches_signature(&graph, &io)
                .map_err(|e| e.with_context(format!("plan cache entry {index}")))?;
            if made_by != loaded_version {
                skipped.push(SkippedEntry {
                    index,
                    why: SkipReason::OtherCudnn,
                    reason: format!(
                        "made by cuDNN {}, and cuDNN {} is loaded",
                        fmt_cudnn_version(made_by),
                        fmt_cudnn_version(loaded_version)
                    ),
                });
                continue;
            }
            // Checked once: what the check found decides whether the entry
            // may load, and the load reuses it.
            let io = Arc::new(io);
            let checked = Plan::check_json(&json, target, &io)
                .map_err(|e| e.with_context(format!("plan cache entry {index}")))?;
            if payload == Payload::Refuse && checked.runtime_compiled() {
                skipped.push(SkippedEntry {
                    index,
                    why: SkipReason::CompiledCodeNotAuthenticated,
                    reason: format!(
                        "carries compiled kernel code (a runtime-compiled plan), and {auth}"
                    ),
                });
                continue;
            }
            let plan = Plan::from_checked_json(checked, payload)
                .map_err(|e| e.with_context(format!("plan cache entry {index}")))?;
            loaded.push((
                index,
                Key {
                    graph,
                    // Normalized: a compatible fingerprint (`H200|sm90|132sms`)
                    // is stored as the key `get` looks up (`sm90|132sms`).
                    target: target.properties().arch_key(),
                    policy,
                },
                Arc::new(plan),
            ));
        }
        if !r.at_end() {
            return Err(r.bad("the end of the file"));
        }
        // Insert under one lock, then see which of this file's plans are
        // still there: a file with more plans than the capacity evicts its
        // own first entries, and a key listed twice keeps its last plan.
        let mut l = self.lock();
        let mut evicted = 0usize;
        for (_, k, p) in &loaded {
            evicted = evicted.saturating_add(self.insert_locked(&mut l, k.clone(), p.clone()));
        }
        let (mut count, mut runtime_compiled) = (0usize, 0usize);
        for (i, (index, k, p)) in loaded.iter().enumerate() {
            if l.entries
                .iter()
                .any(|(ck, cp)| ck == k && Arc::ptr_eq(cp, p))
            {
                count += 1;
                runtime_compiled += usize::from(p.is_runtime_compiled());
            } else if loaded[i + 1..].iter().any(|(_, later, _)| later == k) {
                skipped.push(SkippedEntry {
                    index: *index,
                    why: SkipReason::Duplicate,
                    reason: "its key appears again later in the file".to_string(),
                });
            } else {
                skipped.push(SkippedEntry {
                    index: *index,
                    why: SkipReason::OverCapacity,
                    reason: format!(
                        "evicted by later entries of the file: the cache holds at most {} plans",
                        self.capacity
                    ),
                });
            }
        }
        drop(l);
        skipped.sort_by_key(|e| e.index);
        Ok(LoadReport {
            loaded: count,
            runtime_compiled,
            skipped,
            evicted,
            authentication: auth,
        })
    }

    /// Load a file saved by [`save`](Self::save), for `target`, accepting
    /// compiled code as `trust` says (see [`load_text`](Self::load_text)):
    /// `cache.load(path, &target, Trust::SignedBy(&key))` restores every plan
    /// of a file saved with `key`.
    ///
    /// # Errors
    /// Larger than [`MAX_CACHE_FILE_BYTES`](super::MAX_CACHE_FILE_BYTES),
    /// missing or unreadable (`Io`, naming the path), not a regular file (a
    /// FIFO, a device, a folder: `InvalidArgument` naming the path), or as
    /// [`load_text`](Self::load_text) (a tag that does not verify names the
    /// path).
    pub fn load(&self, path: &Path, target: &Target, trust: Trust<'_>) -> Result<LoadReport> {
        let name = format!("plan cache file {}", path.display());
        self.load_text_named(&read_file(path)?, target, trust, &name)
    }

    /// [`load`](Self::load) that also loads the compiled code of an
    /// unsigned file.
    ///
    /// # Safety
    /// As [`load_text_unverified`](Self::load_text_unverified), for the file
    /// at `path` (which no other process may change while it is read).
    ///
    /// # Errors
    /// As [`load`](Self::load).
    pub unsafe fn load_unverified(&self, path: &Path, target: &Target) -> Result<LoadReport> {
        let text = read_file(path)?;
        // SAFETY: the caller vouches for the file at `path` (this fn's
        // contract), which is the text just read.
        unsafe { self.load_text_unverified(&text, target) }
    }
}

/// The file at `path` as text, at most [`MAX_FILE_BYTES`]. Opened without
/// blocking (a FIFO put at the path does not hang the open) and refused
/// unless it is a regular file.
fn read_file(path: &Path) -> Result<String> {
    use std::io::Read;
    let mut o = std::fs::OpenOptions::new();
    o.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(libc::O_NONBLOCK);
    }
    let f = o
        .open(path)
        .map_err(|e| Error::io("opening the plan cache file", path, &e))?;
    let m = f
        .metadata()
        .map_err(|e| Error::io("reading the plan cache file's metadata", path, &e))?;
    if !m.file_type().is_file() {
        return Err(Error::invalid(
            format!("plan cache file {}", path.display()),
            "must be a regular file",
            "another kind of file (a FIFO, a device or a folder)",
        ));
    }
    let mut bytes = Vec::new();
    f.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io("reading the plan cache file", path, &e))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(Error::invalid(
            format!("plan cache file {}", path.display()),
            format!("must be at most {MAX_FILE_BYTES} bytes"),
            "larger",
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        Error::invalid(
            format!("plan cache file {}", path.display()),
            "must be UTF-8 text",
            e,
        )
    })
}

/// Where tensor `uid` is listed in a graph signature (`t<uid> <len>:<name> `
/// at the start or after a `;`): the rest of the signature after its name.
fn after_name(sig: &str, uid: i64) -> Option<&str> {
    let head = format!("t{uid} ");
    let mut from = 0;
    while let Some(at) = sig.get(from..)?.find(&head) {
        let start = from + at;
        if start == 0 || sig[..start].ends_with(';') {
            let rest = &sig[start + head.len()..];
            let (len, rest) = rest.split_once(':')?;
            let len: usize = len.parse().ok()?;
            return rest.get(len..)?.strip_prefix(' ');
        }
        from = start + head.len();
    }
    None
}

/// An entry's tensor list against its key's graph signature (which lists
/// every tensor with its uid, name, role, type and layout): every bound
/// tensor, by-value scalar and scratch tensor as the graph has it.
fn io_matches_signature(sig: &str, io: &IoSignature) -> Result<()> {
    let mismatch = |uid: i64, want: String| {
        Error::mismatch(
            format!("plan cache entry tensor uid {uid} (its graph key has, its tensor list says)"),
            after_name(sig, uid)
                .and_then(|r| r.split(';').next())
                .unwrap_or("no such tensor")
                .to_string(),
            want,
        )
    };
    for t in &io.tensors {
        let want = format!(
            "{} {} {} {};",
            if t.is_output { "out" } else { "in" },
            t.spec.dtype(),
            fmt_dims(t.spec.dims()),
            fmt_dims(t.spec.strides())
        );
        let named = format!("t{} {}:{} {want}", t.uid, t.name.len(), t.name);
        if !(sig.starts_with(&named) || sig.contains(&format!(";{named}"))) {
            return Err(mismatch(
                t.uid,
                format!("{}:{} {want}", t.name.len(), t.name),
            ));
        }
    }
    for &(uid, dtype, v) in &io.scalars {
        let want = format!("scalar={v:e} {dtype} ");
        if !after_name(sig, uid).is_some_and(|r| r.starts_with(&want)) {
            return Err(mismatch(uid, want));
        }
    }
    for &(uid, _) in &io.scratch {
        if !after_name(sig, uid).is_some_and(|r| r.starts_with("scratch ")) {
            return Err(mismatch(uid, "scratch".to_string()));
        }
    }
    Ok(())
}

// The cache is shared between threads (its map behind a lock).
const _: () = {
    fn shared<T: Send + Sync>() {}
    let _ = shared::<PlanCache>;
};

#[cfg(test)]
mod tests {
    use super::*;

    /// What loading a file with `header` as its first line says about the
    /// header (the rest of the file is one empty entry list).
    fn header_answer(header: &str) -> Option<Error> {
        let Ok(target) = Target::preset("h200") else {
            return None;
        };
        let text = format!("{header}\nentries 0\n");
        PlanCache::new(1)
            .load_text(&text, &target, Trust::NoCompiledCode)
            .err()
    }

    /// `load_text` checks each entry's plan JSON once: the check that
    /// finds whether an unauthenticated entry carries compiled code is the
    /// one its load uses. Counted by hand: two entries that both load (no
    /// runtime-compiled engine allowed, so neither is skipped), two checks.
    /// The old loader checked an entry once to find it compiled and skip
    /// it, and twice to load it: four checks here. (A signed load would not
    /// tell them apart: the old loader skipped the compiled-code check for
    /// an authenticated file.)
    #[test]
    fn unit_load_checks_each_entry_once() {
        use crate::graph::{ConvParams, DType, TensorSpec};
        // A cuDNN too old to plan without a device (8.9 on the cuda12
        // stack) skips, visibly, on every stack: nothing is missing there.
        if let Err(e @ crate::Error::Unsupported { .. }) = crate::graph::require_graph_support() {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED unit_load_checks_each_entry_once: {e}"
            );
            return;
        }
        // Only a missing cuDNN or driver skips, visibly (failing under
        // CUDNN_RS_REQUIRE_LIBS=1); any other planning error fails the test.
        let missing = crate::graph::require_graph_support()
            .err()
            .or_else(|| crate::graph::driver::ensure().err())
            .map(|e| e.to_string())
            .or_else(|| Target::preset("h200").err().map(|e| e.to_string()));
        if let Some(why) = missing {
            use std::io::Write as _;
            // With CUDNN_RS_REQUIRE_LIBS=1 (CI) a missing library fails.
            assert!(
                std::env::var_os("CUDNN_RS_REQUIRE_LIBS").is_none_or(|v| v != "1"),
                "CUDNN_RS_REQUIRE_LIBS=1 but: {why}"
            );
            // Straight to stderr: libtest captures eprintln, not this.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED unit_load_checks_each_entry_once: {why}"
            );
            return;
        }
        let target = Target::preset("h200").expect("h200 preset");
        let conv = |k: i64| -> Result<Graph> {
            let mut g = Graph::new();
            let x = g.input("x", TensorSpec::nhwc(DType::F16, &[1, 8, 8, 8])?)?;
            let w = g.input("w", TensorSpec::nhwc(DType::F16, &[k, 8, 3, 3])?)?;
            let y = g.conv_fprop(x, w, &ConvParams::new_2d([1, 1], [1, 1], [1, 1]))?;
            g.output(y, DType::F16)?;
            Ok(g)
        };
        let cache = PlanCache::new(4);
        let policy = Policy::default().with_allow_runtime_compilation(false);
        for k in [8, 16] {
            let g = conv(k).expect("conv graph");
            cache
                .get_or_build(&g, &target, &policy)
                .expect("a precompiled conv plan on the h200 preset");
        }
        let text = cache.to_text().expect("to_text");
        let checks = || crate::graph::plan_json::CHECKS.with(std::cell::Cell::get);
        let before = checks();
        let r = PlanCache::new(4)
            .load_text(&text, &target, Trust::NoCompiledCode)
            .expect("load_text");
        let counted = checks() - before;
        assert_eq!((r.loaded, r.runtime_compiled), (2, 0), "{r:?}");
        assert!(r.skipped.is_empty(), "{r:?}");
        assert_eq!(counted, 2, "one check per entry");
    }

    proptest::proptest! {
        /// Every version a header can name: 1 and 2 (keys of before the
        /// GELU rename) are refused as an older format, naming it; any
        /// other but 3 is a malformed first line; 3 passes the header (what
        /// follows may still fail: cuDNN may be missing here). The truth is
        /// the rule `load_text` documents.
        #[test]
        fn unit_property_only_format_3_headers_are_read(v in 0u32..10_000, prefix in proptest::bool::ANY) {
            let header = if prefix {
                format!("{HEADER_PREFIX} v{v}")
            } else {
                format!("cudnn-rs plan v{v}")
            };
            match (prefix, v, header_answer(&header)) {
                (true, 3, e) => proptest::prop_assert!(
                    !matches!(&e, Some(Error::InvalidArgument { rule, .. }) if rule.contains("line 1"))
                        && !matches!(&e, Some(Error::Unsupported { what, .. }) if what.contains("format v")),
                    "{e:?}"
                ),
                (true, 1 | 2, Some(Error::Unsupported { what, needs })) => {
                    proptest::prop_assert!(what.contains(&format!("format v{v}")), "{what}");
                    proptest::prop_assert!(needs.is_some_and(|n| n.contains("v3")));
                }
                (_, _, Some(Error::InvalidArgument { arg, rule, .. })) => {
                    proptest::prop_assert!(!prefix || !(1..=3).contains(&v));
                    proptest::prop_assert_eq!(arg, "plan cache file");
                    proptest::prop_assert!(rule.contains("line 1") && rule.contains("v3"), "{rule}");
                }
                (p, v, other) => proptest::prop_assert!(false, "prefix {p}, v{v}: {other:?}"),
            }
        }
    }
}
