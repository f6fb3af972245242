//! The convolution algorithm cache: [`AlgoCache`].
//!
//! Finding the best algorithm (especially by exhaustive search) is slow, and
//! the answer depends only on the problem ([`AlgoKey`]: device, direction,
//! types, shapes, strides, convolution parameters, math policy, determinism,
//! workspace limit and search kind). So the answer is cached, process-wide
//! ([`AlgoCache::global`]) and bounded: past its capacity the least recently
//! used entry goes.
//!
//! The cache can be saved to and loaded from a text file, so a long-running
//! service (or the next run of a training script) skips the search. The
//! file is written to a temporary file and renamed, so a reader never sees a
//! half-written file; a file that is corrupt, truncated, of another format
//! version or larger than [`AlgoCache::MAX_FILE_BYTES`] is rejected as a
//! whole, naming the line, and the cache is left as it was. Every key the
//! cache can hold saves to a file it loads again (the key's fields are
//! types that hold only values the format has).
//!
//! ```
//! use cudnn::dnn::{AlgoCache, AlgoChoice, AlgoKey, CacheSearch, ConvDirection, MathPolicy};
//! let cache = AlgoCache::new(16);
//! let key = AlgoKey {
//!     device: 0, direction: ConvDirection::Forward,
//!     x_type: 0, w_type: 0, y_type: 0, compute_type: 0,
//!     x_dims: vec![8, 3, 32, 32], x_strides: vec![3072, 1024, 32, 1],
//!     w_dims: vec![16, 3, 3, 3], w_format: 0,
//!     y_dims: vec![8, 16, 32, 32], y_strides: vec![16384, 1024, 32, 1],
//!     pad: vec![1, 1], stride: vec![1, 1], dilation: vec![1, 1], groups: 1, mode: 1,
//!     math: MathPolicy::Default, deterministic: false, workspace_limit: None,
//!     search: CacheSearch::Heuristic,
//! };
//! assert_eq!(cache.get(&key), None);
//! let choice = AlgoChoice { algo: 1, math_type: 0, workspace_bytes: 4096 };
//! cache.insert(key.clone(), choice);
//! assert_eq!(cache.get(&key), Some(choice));
//! assert_eq!((cache.stats().hits, cache.stats().misses), (1, 1));
//! ```

use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::io::Read;
use std::path::Path;
use std::sync::{Mutex, MutexGuard, OnceLock};

use crate::error::{Error, Result};

/// Which convolution direction a cached choice is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConvDirection {
    /// `cudnnConvolutionForward`.
    Forward,
    /// `cudnnConvolutionBackwardData`.
    BackwardData,
    /// `cudnnConvolutionBackwardFilter`.
    BackwardFilter,
}

/// How the math type may be chosen (TF32 only when opted in).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MathPolicy {
    /// The library's default math (no Tensor Core down-conversion, no TF32).
    #[default]
    Default,
    /// Tensor Cores allowed where the data type has them natively.
    AllowTensorCores,
    /// TF32 allowed for f32 data (reduced precision, opted in).
    AllowTf32,
    /// Tensor Cores never used.
    ForbidTensorCores,
}

/// How a cached choice was made: the kind of
/// [`AlgoSearch`](super::AlgoSearch) without a fixed algorithm's value.
/// Saved files write it as 0, 1 or 2 ([`CacheSearch::code`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CacheSearch {
    /// cuDNN's heuristics (code 0). The default.
    #[default]
    Heuristic,
    /// A measured, exhaustive search (code 1).
    Exhaustive,
    /// A fixed algorithm (code 2).
    Fixed,
}

impl CacheSearch {
    /// The code a saved cache file holds: 0 heuristic, 1 exhaustive, 2 fixed.
    pub fn code(self) -> u8 {
        match self {
            CacheSearch::Heuristic => 0,
            CacheSearch::Exhaustive => 1,
            CacheSearch::Fixed => 2,
        }
    }

    /// The kind with this [`code`](CacheSearch::code), if any.
    pub fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(CacheSearch::Heuristic),
            1 => Some(CacheSearch::Exhaustive),
            2 => Some(CacheSearch::Fixed),
            _ => None,
        }
    }
}

/// Everything that determines the best algorithm.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AlgoKey {
    /// CUDA device ordinal.
    pub device: i32,
    /// Forward, backward data or backward filter.
    pub direction: ConvDirection,
    /// Raw `cudnnDataType_t` of `x`.
    pub x_type: u32,
    /// Raw `cudnnDataType_t` of `w`.
    pub w_type: u32,
    /// Raw `cudnnDataType_t` of `y`.
    pub y_type: u32,
    /// Raw `cudnnDataType_t` of the convolution's compute type.
    pub compute_type: u32,
    /// Dimensions of `x`.
    pub x_dims: Vec<i64>,
    /// Strides of `x`.
    pub x_strides: Vec<i64>,
    /// Dimensions of `w`.
    pub w_dims: Vec<i64>,
    /// Raw `cudnnTensorFormat_t` of `w`.
    pub w_format: u32,
    /// Dimensions of `y`.
    pub y_dims: Vec<i64>,
    /// Strides of `y`.
    pub y_strides: Vec<i64>,
    /// Padding per spatial dimension.
    pub pad: Vec<i64>,
    /// Stride per spatial dimension.
    pub stride: Vec<i64>,
    /// Dilation per spatial dimension.
    pub dilation: Vec<i64>,
    /// Group count.
    pub groups: i64,
    /// Raw `cudnnConvolutionMode_t`.
    pub mode: u32,
    /// Which math types were allowed.
    pub math: MathPolicy,
    /// Whether only deterministic algorithms were allowed.
    pub deterministic: bool,
    /// The workspace limit in bytes, if any.
    pub workspace_limit: Option<usize>,
    /// How the choice was made.
    pub search: CacheSearch,
}

/// What was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlgoChoice {
    /// Raw algorithm enum value (`cudnnConvolutionFwdAlgo_t` and friends).
    pub algo: u32,
    /// Raw `cudnnMathType_t`.
    pub math_type: u32,
    /// Workspace the algorithm needs, in bytes.
    pub workspace_bytes: usize,
}

/// Counters of an [`AlgoCache`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CacheStats {
    /// [`AlgoCache::get`] calls that found an entry.
    pub hits: u64,
    /// [`AlgoCache::get`] calls that found none.
    pub misses: u64,
    /// Entries dropped to stay within the capacity.
    pub evictions: u64,
}

struct Inner {
    map: HashMap<AlgoKey, (AlgoChoice, u64)>,
    capacity: usize,
    tick: u64,
    stats: CacheStats,
}

impl Inner {
    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    fn put(&mut self, key: AlgoKey, choice: AlgoChoice) {
        if self.capacity == 0 {
            return;
        }
        let tick = self.next_tick();
        self.map.insert(key, (choice, tick));
        self.evict_to(self.capacity);
    }

    /// Drop the least recently used entries until at most `cap` remain.
    fn evict_to(&mut self, cap: usize) {
        let excess = self.map.len().saturating_sub(cap);
        if excess == 0 {
            return;
        }
        if excess == 1 {
            let oldest = self
                .map
                .iter()
                .min_by_key(|(_, (_, t))| *t)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.map.remove(&k);
            }
        } else {
            let mut by_age: Vec<(u64, AlgoKey)> =
                self.map.iter().map(|(k, (_, t))| (*t, k.clone())).collect();
            by_age.sort_unstable_by_key(|(t, _)| *t);
            for (_, k) in by_age.into_iter().take(excess) {
                self.map.remove(&k);
            }
        }
        self.stats.evictions += excess as u64;
    }
}

/// Thread-safe, bounded (LRU) cache shared by all handles of the process
/// (keys carry the device).
///
/// All methods take `&self` and lock an internal mutex briefly; a panic in
/// another thread while it held the lock does not make the cache unusable.
pub struct AlgoCache {
    inner: Mutex<Inner>,
}

impl fmt::Debug for AlgoCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.lock();
        f.debug_struct("AlgoCache")
            .field("len", &inner.map.len())
            .field("capacity", &inner.capacity)
            .field("stats", &inner.stats)
            .finish()
    }
}

impl Default for AlgoCache {
    /// An empty cache of [`AlgoCache::DEFAULT_CAPACITY`].
    fn default() -> Self {
        AlgoCache::new(AlgoCache::DEFAULT_CAPACITY)
    }
}

/// First line of a saved cache, up to the version number.
const HEADER_PREFIX: &str = "cudnn-rs algorithm cache, format ";
/// The format version this build writes and reads.
const FORMAT_VERSION: u32 = 1;
/// Field names of an entry line, in order (`name=value`, one space apart).
const FIELDS: [&str; 24] = [
    "device",
    "direction",
    "x_type",
    "w_type",
    "y_type",
    "compute_type",
    "x_dims",
    "x_strides",
    "w_dims",
    "w_format",
    "y_dims",
    "y_strides",
    "pad",
    "stride",
    "dilation",
    "groups",
    "mode",
    "math",
    "deterministic",
    "workspace_limit",
    "search",
    "algo",
    "math_type",
    "workspace_bytes",
];

impl AlgoCache {
    /// The capacity of [`AlgoCache::global`] and [`AlgoCache::default`].
    pub const DEFAULT_CAPACITY: usize = 4096;

    /// The largest file [`AlgoCache::load`] reads and [`AlgoCache::save`]
    /// writes: 64 MiB (an entry is a few hundred bytes, so this is room
    /// for well over a hundred thousand entries). Larger files are refused
    /// without being read past the limit.
    pub const MAX_FILE_BYTES: u64 = 64 << 20;

    /// An empty cache holding at most `capacity` entries (0: caches nothing).
    pub fn new(capacity: usize) -> Self {
        AlgoCache {
            inner: Mutex::new(Inner {
                map: HashMap::new(),
                capacity,
                tick: 0,
                stats: CacheStats::default(),
            }),
        }
    }

    /// The process-wide cache, of [`AlgoCache::DEFAULT_CAPACITY`], shared by
    /// every handle.
    pub fn global() -> &'static AlgoCache {
        static GLOBAL: OnceLock<AlgoCache> = OnceLock::new();
        GLOBAL.get_or_init(AlgoCache::default)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The data is consistent after every statement that can panic (none
        // should), so a poisoned lock is safe to keep using.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cached choice for `key`. Counts a hit or a miss; a hit makes the
    /// entry the most recently used.
    pub fn get(&self, key: &AlgoKey) -> Option<AlgoChoice> {
        let mut inner = self.lock();
        let tick = inner.next_tick();
        match inner.map.get_mut(key) {
            Some((choice, t)) => {
                *t = tick;
                let choice = *choice;
                inner.stats.hits += 1;
                Some(choice)
            }
            None => {
                inner.stats.misses += 1;
                None
            }
        }
    }

    /// Cache `choice` for `key` (replacing any earlier one) as the most
    /// recently used entry, evicting the least recently used past the
    /// capacity. With capacity 0 nothing is stored.
    pub fn insert(&self, key: AlgoKey, choice: AlgoChoice) {
        self.lock().put(key, choice);
    }

    /// Remove and return the entry for `key` (not counted in the stats).
    pub fn remove(&self, key: &AlgoKey) -> Option<AlgoChoice> {
        self.lock().map.remove(key).map(|(c, _)| c)
    }

    /// How many entries are cached.
    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.lock().map.is_empty()
    }

    /// The most entries kept.
    pub fn capacity(&self) -> usize {
        self.lock().capacity
    }

    /// Change the capacity, evicting the least recently used entries down
    /// to it (counted as evictions).
    pub fn set_capacity(&self, capacity: usize) {
        let mut inner = self.lock();
        inner.capacity = capacity;
        inner.evict_to(capacity);
    }

    /// Remove every entry. The stats are kept (see [`AlgoCache::reset_stats`]).
    pub fn clear(&self) {
        self.lock().map.clear();
    }

    /// The hit, miss and eviction counters.
    pub fn stats(&self) -> CacheStats {
        self.lock().stats
    }

    /// Set the counters back to zero.
    pub fn reset_stats(&self) {
        self.lock().stats = CacheStats::default();
    }

    /// A snapshot of every entry, least recently used first. Neither the
    /// stats nor the recency change.
    pub fn entries(&self) -> Vec<(AlgoKey, AlgoChoice)> {
        let inner = self.lock();
        let mut all: Vec<(u64, AlgoKey, AlgoChoice)> = inner
            .map
            .iter()
            .map(|(k, (c, t))| (*t, k.clone(), *c))
            .collect();
        drop(inner);
        all.sort_unstable_by_key(|(t, _, _)| *t);
        all.into_iter().map(|(_, k, c)| (k, c)).collect()
    }

    /// Write every entry to `path` (a text file: a format header, one entry
    /// per line least recently used first, then an `end` line with the
    /// count). The file is written beside `path` under a new temporary name,
    /// synced and renamed over it (then the folder is synced), so `path` is
    /// either the old file or the whole new one, also after a crash.
    ///
    /// # Errors
    /// [`Error::Io`] naming the path and the step when it cannot be written
    /// (the temporary file, the rename, the folder's sync);
    /// [`Error::InvalidArgument`] naming the file when `path` names no file,
    /// or when the text would be larger than [`AlgoCache::MAX_FILE_BYTES`]
    /// (which [`AlgoCache::load`] would refuse); nothing is written then.
    pub fn save(&self, path: &Path) -> Result<()> {
        self.save_limited(path, Self::MAX_FILE_BYTES)
    }

    /// [`AlgoCache::save`] with `limit` in place of
    /// [`AlgoCache::MAX_FILE_BYTES`] (so the refusal can be tested on a
    /// small cache).
    fn save_limited(&self, path: &Path, limit: u64) -> Result<()> {
        let entries = self.entries();
        let mut text = format!("{HEADER_PREFIX}{FORMAT_VERSION}\n");
        for (key, choice) in &entries {
            text.push_str(&format_entry(key, choice));
            text.push('\n');
        }
        text.push_str(&format!("end {}\n", entries.len()));
        if text.len() as u64 > limit {
            return Err(Error::invalid(
                "algorithm cache file",
                format!(
                    "the {} entries take {} bytes, more than the {limit} a cache file may have \
                     (AlgoCache::MAX_FILE_BYTES); lower the capacity",
                    entries.len(),
                    text.len(),
                ),
                path.display(),
            ));
        }

        if path.file_name().is_none() {
            return Err(Error::invalid(
                "algorithm cache file",
                "must name a file",
                path.display(),
            ));
        }
        crate::atomic_file::replace(path, text.as_bytes()).map_err(|e| {
            Error::io(
                format!("{} the algorithm cache file", e.step.words()),
                &e.path,
                &e.source,
            )
        })
    }

    /// Merge the entries saved in `path` into this cache, as the most
    /// recently used (in the file's order), replacing entries with the same
    /// key; returns how many the file held. The whole file is checked before
    /// anything is inserted. Entries past the capacity are evicted as usual.
    ///
    /// # Errors
    /// [`Error::Io`] naming the path when the file is missing or cannot be
    /// read. [`Error::InvalidArgument`] with arg `"algorithm cache file"`, the
    /// problem and its line (`"bad number `x` for `groups` at line 3"`) and
    /// the path as the value, when it is not a regular file (a FIFO is
    /// opened without blocking and refused), is larger than
    /// [`AlgoCache::MAX_FILE_BYTES`] (no more than that is read), is empty, has another
    /// header or format version, a malformed, duplicated or truncated
    /// entry, or no final `end` line with the right count. The cache is
    /// then unchanged.
    pub fn load(&self, path: &Path) -> Result<usize> {
        let bad = |rule: String| Error::invalid("algorithm cache file", rule, path.display());
        let mut bytes = Vec::new();
        let mut o = fs::OpenOptions::new();
        o.read(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            // A FIFO at the path must not block the open.
            o.custom_flags(libc::O_NONBLOCK);
        }
        let f = o
            .open(path)
            .map_err(|e| Error::io("opening the algorithm cache file", path, &e))?;
        let m = f
            .metadata()
            .map_err(|e| Error::io("reading the algorithm cache file's metadata", path, &e))?;
        if !m.file_type().is_file() {
            return Err(bad(
                "must be a regular file (not a FIFO, a device or a folder)".to_string(),
            ));
        }
        f.take(Self::MAX_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| Error::io("reading the algorithm cache file", path, &e))?;
        if bytes.len() as u64 > Self::MAX_FILE_BYTES {
            return Err(bad(format!(
                "larger than the {} bytes a cache file may have (AlgoCache::MAX_FILE_BYTES)",
                Self::MAX_FILE_BYTES
            )));
        }
        let text = std::str::from_utf8(&bytes).map_err(|e| {
            let line = bytes[..e.valid_up_to()]
                .iter()
                .filter(|&&b| b == b'\n')
                .count()
                + 1;
            bad(format!("not UTF-8 text at line {line}"))
        })?;
        let entries = parse(text).map_err(|(what, line)| bad(format!("{what} at line {line}")))?;
        let n = entries.len();
        let mut inner = self.lock();
        for (key, choice) in entries {
            inner.put(key, choice);
        }
        Ok(n)
    }
}

fn direction_name(d: ConvDirection) -> &'static str {
    match d {
        ConvDirection::Forward => "forward",
        ConvDirection::BackwardData => "backward-data",
        ConvDirection::BackwardFilter => "backward-filter",
    }
}

fn math_name(m: MathPolicy) -> &'static str {
    match m {
        MathPolicy::Default => "default",
        MathPolicy::AllowTensorCores => "tensor-cores",
        MathPolicy::AllowTf32 => "tf32",
        MathPolicy::ForbidTensorCores => "no-tensor-cores",
    }
}

/// `-` for an empty list, else comma-separated.
fn list(v: &[i64]) -> String {
    if v.is_empty() {
        "-".into()
    } else {
        v.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
    }
}

fn format_entry(k: &AlgoKey, c: &AlgoChoice) -> String {
    let values: [String; 24] = [
        k.device.to_string(),
        direction_name(k.direction).into(),
        k.x_type.to_string(),
        k.w_type.to_string(),
        k.y_type.to_string(),
        k.compute_type.to_string(),
        list(&k.x_dims),
        list(&k.x_strides),
        list(&k.w_dims),
        k.w_format.to_string(),
        list(&k.y_dims),
        list(&k.y_strides),
        list(&k.pad),
        list(&k.stride),
        list(&k.dilation),
        k.groups.to_string(),
        k.mode.to_string(),
        math_name(k.math).into(),
        u8::from(k.deterministic).to_string(),
        k.workspace_limit
            .map_or_else(|| "none".into(), |w| w.to_string()),
        k.search.code().to_string(),
        c.algo.to_string(),
        c.math_type.to_string(),
        c.workspace_bytes.to_string(),
    ];
    FIELDS
        .iter()
        .zip(values)
        .map(|(name, v)| format!("{name}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A problem and its (1-based) line.
type ParseError = (String, usize);

/// Parse a whole file; nothing is returned unless every line is valid.
fn parse(text: &str) -> std::result::Result<Vec<(AlgoKey, AlgoChoice)>, ParseError> {
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    let Some((_, header)) = lines.next() else {
        return Err(("empty file (no header)".into(), 1));
    };
    match header.strip_prefix(HEADER_PREFIX) {
        Some(v) if v == FORMAT_VERSION.to_string() => {}
        Some(v) => {
            return Err((
                format!("unsupported format version `{v}` (this build reads {FORMAT_VERSION})"),
                1,
            ));
        }
        None => {
            return Err((
                format!(
                    "not an algorithm cache (the header must be `{HEADER_PREFIX}{FORMAT_VERSION}`)"
                ),
                1,
            ));
        }
    }
    let mut entries = Vec::new();
    let mut seen: HashMap<AlgoKey, usize> = HashMap::new();
    let mut last_line = 1;
    let mut ended = false;
    for (no, line) in lines {
        last_line = no;
        if ended {
            return Err(("unexpected content after the `end` line".into(), no));
        }
        if let Some(count) = line.strip_prefix("end ") {
            let count: usize = count
                .parse()
                .map_err(|_| (format!("bad entry count `{count}` in the `end` line"), no))?;
            if count != entries.len() {
                return Err((
                    format!(
                        "the `end` line says {count} entries but the file has {}",
                        entries.len()
                    ),
                    no,
                ));
            }
            ended = true;
            continue;
        }
        let (key, choice) = parse_entry(line).map_err(|what| (what, no))?;
        if let Some(first) = seen.insert(key.clone(), no) {
            return Err((format!("duplicate entry (same key as line {first})"), no));
        }
        entries.push((key, choice));
    }
    if !ended {
        return Err(("truncated file (no final `end` line)".into(), last_line + 1));
    }
    Ok(entries)
}

fn parse_entry(line: &str) -> std::result::Result<(AlgoKey, AlgoChoice), String> {
    let parts: Vec<&str> = line.split(' ').collect();
    if parts.len() != FIELDS.len() {
        return Err(format!(
            "malformed entry ({} fields, expected {})",
            parts.len(),
            FIELDS.len()
        ));
    }
    let mut values = Vec::with_capacity(FIELDS.len());
    for (part, name) in parts.iter().zip(FIELDS) {
        let value = part
            .strip_prefix(name)
            .and_then(|rest| rest.strip_prefix('='))
            .ok_or_else(|| format!("expected field `{name}=...`, found `{part}`"))?;
        values.push((name, value));
    }
    let mut it = values.into_iter();
    let mut next = || it.next().ok_or_else(|| "missing field".to_string());

    fn num<T: std::str::FromStr>((name, v): (&str, &str)) -> std::result::Result<T, String> {
        v.parse()
            .map_err(|_| format!("bad number `{v}` for `{name}`"))
    }
    fn nums((name, v): (&str, &str)) -> std::result::Result<Vec<i64>, String> {
        if v == "-" {
            return Ok(Vec::new());
        }
        v.split(',').map(|x| num((name, x))).collect()
    }

    let device = num(next()?)?;
    let direction = match next()? {
        (_, "forward") => ConvDirection::Forward,
        (_, "backward-data") => ConvDirection::BackwardData,
        (_, "backward-filter") => ConvDirection::BackwardFilter,
        (name, v) => return Err(format!("unknown value `{v}` for `{name}`")),
    };
    let x_type = num(next()?)?;
    let w_type = num(next()?)?;
    let y_type = num(next()?)?;
    let compute_type = num(next()?)?;
    let x_dims = nums(next()?)?;
    let x_strides = nums(next()?)?;
    let w_dims = nums(next()?)?;
    let w_format = num(next()?)?;
    let y_dims = nums(next()?)?;
    let y_strides = nums(next()?)?;
    let pad = nums(next()?)?;
    let stride = nums(next()?)?;
    let dilation = nums(next()?)?;
    let groups = num(next()?)?;
    let mode = num(next()?)?;
    let math = match next()? {
        (_, "default") => MathPolicy::Default,
        (_, "tensor-cores") => MathPolicy::AllowTensorCores,
        (_, "tf32") => MathPolicy::AllowTf32,
        (_, "no-tensor-cores") => MathPolicy::ForbidTensorCores,
        (name, v) => return Err(format!("unknown value `{v}` for `{name}`")),
    };
    let deterministic = match next()? {
        (_, "0") => false,
        (_, "1") => true,
        (name, v) => return Err(format!("`{name}` must be 0 or 1, found `{v}`")),
    };
    let workspace_limit = match next()? {
        (_, "none") => None,
        field => Some(num(field)?),
    };
    let search = match next()? {
        (_, "0") => CacheSearch::Heuristic,
        (_, "1") => CacheSearch::Exhaustive,
        (_, "2") => CacheSearch::Fixed,
        (name, v) => return Err(format!("`{name}` must be 0, 1 or 2, found `{v}`")),
    };
    let choice = AlgoChoice {
        algo: num(next()?)?,
        math_type: num(next()?)?,
        workspace_bytes: num(next()?)?,
    };
    let key = AlgoKey {
        device,
        direction,
        x_type,
        w_type,
        y_type,
        compute_type,
        x_dims,
        x_strides,
        w_dims,
        w_format,
        y_dims,
        y_strides,
        pad,
        stride,
        dilation,
        groups,
        mode,
        math,
        deterministic,
        workspace_limit,
        search,
    };
    Ok((key, choice))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: i64) -> AlgoKey {
        AlgoKey {
            device: 0,
            direction: ConvDirection::Forward,
            x_type: 0,
            w_type: 0,
            y_type: 0,
            compute_type: 0,
            x_dims: vec![n, 3, 8, 8],
            x_strides: vec![192, 64, 8, 1],
            w_dims: vec![4, 3, 3, 3],
            w_format: 0,
            y_dims: vec![n, 4, 8, 8],
            y_strides: vec![256, 64, 8, 1],
            pad: vec![1, 1],
            stride: vec![1, 1],
            dilation: vec![1, 1],
            groups: 1,
            mode: 1,
            math: MathPolicy::Default,
            deterministic: false,
            workspace_limit: None,
            search: CacheSearch::Exhaustive,
        }
    }

    /// A cache whose file would pass the limit is not saved (so whatever
    /// `save` writes, `load` reads), and the old file stays.
    #[test]
    fn save_refuses_a_file_over_the_limit() {
        let dir = std::env::temp_dir().join(format!("cudnn-rs-save-limit-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("algos.txt");
        let cache = AlgoCache::new(64);
        let choice = AlgoChoice {
            algo: 1,
            math_type: 0,
            workspace_bytes: 0,
        };
        cache.insert(key(1), choice);
        cache.save_limited(&path, 4096).unwrap();
        let old = fs::read(&path).unwrap();
        for n in 2..40 {
            cache.insert(key(n), choice);
        }
        let e = cache.save_limited(&path, 4096).unwrap_err().to_string();
        assert!(
            e.contains("MAX_FILE_BYTES") && e.contains("39 entries"),
            "{e}"
        );
        assert_eq!(fs::read(&path).unwrap(), old);
        // The same cache fits the real limit and loads back whole.
        cache.save(&path).unwrap();
        let loaded = AlgoCache::new(64);
        assert_eq!(loaded.load(&path).unwrap(), 39);
        assert_eq!(loaded.entries(), cache.entries());
        let _ = fs::remove_dir_all(&dir);
    }
}
