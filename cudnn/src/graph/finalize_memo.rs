//! The finalize memo: a test aid that lets a test suite skip cuDNN's kernel
//! compiles for plans it built before, in an earlier run, from the same
//! input.
//!
//! Finalizing a runtime-compiled plan is cuDNN compiling its kernels (NVRTC
//! and NVVM inside `libcudnn_graph`, about 0.4 s a plan), and that is most
//! of what the crate's host tests spend. Once [`enable_finalize_memo`] is
//! called, every descriptor keeps a [`transcript`](super::backend) of what
//! cuDNN was given, and [`Plan::build`](super::Plan::build) keys each
//! execution plan's finalize on it: the first finalize of that input stores
//! cuDNN's JSON of the plan in the memo's folder; a later one (in this
//! process or another) loads that JSON instead, which cuDNN deserializes
//! without compiling.
//!
//! The key covers the input and nothing else: the whole transcript (every
//! attribute of every descriptor down to the tensors, in the order set,
//! the engine configuration, the target's device properties), in a folder
//! named after the environment that gives it meaning (the loaded cuDNN's
//! version and files, the NVRTC opened for it, the driver stub). A change in
//! how the crate builds descriptors changes the transcript, so the plan is
//! compiled again; a change anywhere else reuses what cuDNN made from the
//! same input. Failed finalizes are not kept (each is asked again).
//!
//! An entry is loaded as a plan file is: through the crate's plan loader and
//! its checks ([`Plan::check_json`](super::Plan)). A plan is stored only if
//! its JSON passes them and cuDNN loads it back with the compiled plan's
//! workspace and JSON. One that does not is a plan the crate builds and cannot
//! reload: counted apart when the reason is cuDNN's known serialization gap
//! alone (an SDPA backward's JSON without its score subgraph), else counted
//! as refused, with the reason, for the test tier to report. So with the
//! memo on, every plan the tier compiles is reloaded once when it is
//! stored, and every plan it takes from the memo is a reload. (In a run
//! that takes a plan from the memo, a test that reloads the plan it built
//! reloads a reloaded plan; the compiled plan was reloaded when stored,
//! and a run from a clean target folder, as CI's, compiles every plan.)
//!
//! Only with the crate's driver stub: with a real driver, plans compile
//! for the device as they always do.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use sha2::{Digest, Sha256};

use super::backend::{Descriptor, kind};
use super::driver::Driver;
use crate::error::Result;

/// The first line of every entry: the format, which the key's meaning
/// follows.
const HEADER: &str = "cudnn-rs finalize memo 1";

/// The largest entry read back: cuDNN's plan JSON, as the crate's JSON reader
/// bounds it, and the two header lines.
const MAX_ENTRY_BYTES: u64 = (64 << 20) + 256;

/// The folder [`enable_finalize_memo`] was given.
static BASE: OnceLock<PathBuf> = OnceLock::new();

/// The memo's folder for this environment (under [`BASE`]), found at the
/// first finalize: `Err` says why the memo is off.
static FOLDER: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();

static HITS: AtomicU64 = AtomicU64::new(0);
static STORED: AtomicU64 = AtomicU64::new(0);
static UNKEYED: AtomicU64 = AtomicU64::new(0);
static GAP: AtomicU64 = AtomicU64::new(0);
/// Entries that did not verify or load, and why.
static BAD_WHY: Mutex<(u64, Vec<String>)> = Mutex::new((0, Vec::new()));
/// Plans finalized that the crate's loader refuses, and why.
static REFUSED: Mutex<(u64, Vec<String>)> = Mutex::new((0, Vec::new()));

/// How many reasons [`FinalizeMemoStats`] keeps of each kind.
const KEPT_REASONS: usize = 20;

/// What the memo did in this process.
#[doc(hidden)]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FinalizeMemoStats {
    /// The folder of this environment's entries; `None` before the first
    /// finalize, or when the memo is off.
    pub folder: Option<PathBuf>,
    /// Why the memo is off, when it was enabled but could not work.
    pub off: Option<String>,
    /// Finalizes answered from the memo (no compile).
    pub hits: u64,
    /// Finalizes run and stored.
    pub stored: u64,
    /// Finalizes run without a key (a descriptor made before the memo was
    /// on, or given something a transcript cannot say).
    pub unkeyed: u64,
    /// Entries that did not verify or load (removed, the plan finalized).
    pub bad: u64,
    /// Why, for the first of them.
    pub bad_why: Vec<String>,
    /// Plans cuDNN finalized that the crate's loader refuses for cuDNN's
    /// known serialization gap (an SDPA backward's JSON without its score
    /// subgraph, whose tensors its kernels still use; see `Plan`'s loader):
    /// not stored.
    pub score_subgraph_gap: u64,
    /// Plans cuDNN finalized whose JSON the crate's own loader refuses for
    /// any other reason (not stored): plans the crate builds and cannot
    /// reload.
    pub refused: u64,
    /// Why, for the first of them.
    pub refused_why: Vec<String>,
}

/// The counters since the process started.
#[doc(hidden)]
pub fn finalize_memo_stats() -> FinalizeMemoStats {
    let folder = FOLDER.get();
    let bad = BAD_WHY.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let refused = REFUSED.lock().unwrap_or_else(|e| e.into_inner()).clone();
    FinalizeMemoStats {
        folder: folder.and_then(|f| f.as_ref().ok().cloned()),
        off: folder.and_then(|f| f.as_ref().err().cloned()),
        hits: HITS.load(Ordering::Relaxed),
        stored: STORED.load(Ordering::Relaxed),
        unkeyed: UNKEYED.load(Ordering::Relaxed),
        score_subgraph_gap: GAP.load(Ordering::Relaxed),
        bad: bad.0,
        bad_why: bad.1,
        refused: refused.0,
        refused_why: refused.1,
    }
}

/// Turn the finalize memo on for this process: from now on descriptors
/// keep transcripts, and execution plans are finalized through the memo, in
/// a folder under `dir` named after this environment (made at the first
/// finalize). Nothing else happens here (no library is loaded). Only the
/// first call's `dir` counts.
///
/// A test aid, not part of the crate's API: see the module docs.
///
/// # Safety
/// Every file under `dir` must have been written by this memo (or the folder
/// be empty): an entry's kernels are handed to cuDNN with no check but the
/// entry's own checksum, and run on the GPU when the plan is executed. A file
/// put there by anything else can make a plan read and write memory outside
/// its buffers, or crash cuDNN.
#[doc(hidden)]
pub unsafe fn enable_finalize_memo(dir: &Path) {
    let _ = BASE.set(dir.to_path_buf());
    super::backend::keep_transcripts();
}

/// This environment's folder, made: only with the driver stub (with a real
/// driver plans compile for the device).
fn folder(base: &Path) -> std::result::Result<PathBuf, String> {
    match super::driver::ensure() {
        Ok(Driver::Stub(_)) => {}
        Ok(_) => return Err("a real driver: plans compile for the device".to_string()),
        Err(e) => return Err(e.to_string()),
    }
    let (name, described) = environment().map_err(|e| e.to_string())?;
    let folder = base.join(name);
    std::fs::create_dir_all(&folder).map_err(|e| format!("making {}: {e}", folder.display()))?;
    let about = folder.join("environment.txt");
    if !about.exists() {
        let _ = crate::atomic_file::replace(&about, described.as_bytes());
    }
    Ok(folder)
}

/// The folder name for this environment and its description: the loaded
/// cuDNN (version, and every `libcudnn*` file beside it by name, size and
/// modification time), the NVRTC files opened for it, and the driver stub's
/// digest.
fn environment() -> Result<(String, String)> {
    let api = crate::check::cudnn()?;
    let info = api.info();
    let mut d = String::new();
    let _ = writeln!(d, "{HEADER}");
    let _ = writeln!(d, "cudnn {:?}", info.version);
    if let Some(path) = &info.path {
        let _ = writeln!(d, "cudnn file {}", path.display());
        let mut files: Vec<std::path::PathBuf> = Vec::new();
        if let Some(entries) = path.parent().and_then(|p| std::fs::read_dir(p).ok()) {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with("libcudnn") {
                    files.push(e.path());
                }
            }
        }
        files.sort();
        for f in files {
            let _ = writeln!(d, "  {}", identity(&f));
        }
    }
    for n in super::nvrtc::loaded() {
        let _ = writeln!(d, "nvrtc {:?} {}", n.version, identity(&n.path));
        if let Some(b) = &n.builtins {
            let _ = writeln!(d, "  builtins {}", identity(b));
        }
    }
    let stub = Sha256::digest(super::driver::stub_bytes());
    let _ = writeln!(d, "driver stub sha256 {}", hex(&stub));
    let name = hex(&Sha256::digest(d.as_bytes())[..12]);
    Ok((name, d))
}

/// A file by path, size and modification time (its path alone where it
/// cannot be read: a name the system loader resolved).
fn identity(path: &Path) -> String {
    match std::fs::metadata(path) {
        Ok(m) => {
            let mtime = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |t| t.as_nanos());
            format!("{} {} bytes, modified {mtime} ns", path.display(), m.len())
        }
        Err(_) => path.display().to_string(),
    }
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// The file the memo keeps the plan `p` finalizes to under: `None` when
/// the memo is off, or `p` keeps no transcript (counted as unkeyed).
pub(in crate::graph) fn entry_path(p: &Descriptor<kind::ExecutionPlan>) -> Option<PathBuf> {
    let base = BASE.get()?;
    let folder = FOLDER.get_or_init(|| folder(base)).as_ref().ok()?;
    match p.digest() {
        Some(key) => Some(folder.join(format!("{}.plan", hex(&key)))),
        None => {
            UNKEYED.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

/// A plan was loaded from the memo.
pub(in crate::graph) fn loaded() {
    HITS.fetch_add(1, Ordering::Relaxed);
}

/// The entry at `path` did not load (`why`): removed.
pub(in crate::graph) fn bad(path: &Path, why: &str) {
    note(&BAD_WHY, format!("{}: {why}", path.display()));
    let _ = std::fs::remove_file(path);
}

/// Store `json` (cuDNN's JSON of a plan that reloaded) at `path`.
pub(in crate::graph) fn store(path: &Path, json: &str) {
    let entry = format!(
        "{HEADER}\n{}\n{json}",
        hex(&Sha256::digest(json.as_bytes()))
    );
    if crate::atomic_file::replace(path, entry.as_bytes()).is_ok() {
        STORED.fetch_add(1, Ordering::Relaxed);
    }
}

/// A plan the loader refuses for cuDNN's known serialization gap.
pub(in crate::graph) fn gap() {
    GAP.fetch_add(1, Ordering::Relaxed);
}

/// A plan the loader refuses for anything else (`why`): its JSON, if any,
/// is kept beside the entries (`<entry>.refused.json`), for whoever fixes
/// the loader.
pub(in crate::graph) fn refused(path: &Path, json: Option<&str>, why: &str) {
    match json {
        Some(json) => {
            let kept = path.with_extension("refused.json");
            let _ = crate::atomic_file::replace(&kept, json.as_bytes());
            note(&REFUSED, format!("{why} (its JSON: {})", kept.display()));
        }
        None => note(&REFUSED, why.to_string()),
    }
}

/// Record `why` in `list` (the first [`KEPT_REASONS`]; the count is kept in
/// full).
fn note(list: &Mutex<(u64, Vec<String>)>, why: String) {
    let mut l = list.lock().unwrap_or_else(|e| e.into_inner());
    l.0 += 1;
    if l.1.len() < KEPT_REASONS {
        l.1.push(why);
    }
}

/// An entry's JSON, when the file is there, bounded, of this format and
/// matches its checksum.
pub(in crate::graph) fn read_entry(path: &Path) -> Option<String> {
    use std::io::Read as _;
    let file = std::fs::File::open(path).ok()?;
    // Bounded as it is read (the file could change after any size query).
    let mut bytes = Vec::new();
    let read = file.take(MAX_ENTRY_BYTES + 1).read_to_end(&mut bytes);
    let text = match (read, bytes.len() as u64 > MAX_ENTRY_BYTES) {
        (Ok(_), false) => String::from_utf8(bytes).ok(),
        _ => None,
    };
    let checked = text.as_deref().and_then(|text| {
        let rest = text.strip_prefix(HEADER)?.strip_prefix('\n')?;
        let (sum, json) = rest.split_once('\n')?;
        (hex(&Sha256::digest(json.as_bytes())) == sum).then(|| json.to_string())
    });
    if checked.is_none() {
        note(&BAD_WHY, format!("{}: not a whole entry", path.display()));
        let _ = std::fs::remove_file(path);
    }
    checked
}
