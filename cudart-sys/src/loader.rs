//! Finding and opening the CUDA libraries at run time.
//!
//! [`candidates`] turns an environment into the ordered list of places to try
//! (a pure function, so the order is testable without a file system);
//! [`open_first`] tries them in order and stops at the first that opens. A miss
//! is a [`LoadError`] that lists every attempt and says what to set.
//!
//! The order, for each library:
//! 1. its override variable (`CUDNN_LIB_DIR`, `CUBLAS_LIB_DIR`,
//!    `CUBLASLT_LIB_DIR`, `CUDART_LIB_DIR`): a directory or the file itself.
//!    When set, nothing else is tried, so a wrong override is reported, never
//!    silently replaced by another copy;
//! 2. the roots `CUDNN_PATH` (cuDNN only), `CUDA_PATH`, `CUDA_HOME`, each with
//!    `lib64`, `lib`, `targets/x86_64-linux/lib`;
//! 3. `CUDNN_RS_SEARCH_PATH`: directories (`:`-separated), each searched
//!    directly and as a Python `site-packages` (`nvidia/*/lib`);
//! 4. the system loader by soname (honours `LD_LIBRARY_PATH`, `ld.so.cache`);
//! 5. standard directories (`/usr/local/cuda/lib64`, distro library dirs);
//! 6. Python environments: `nvidia/{cudnn,cu13,cublas,cuda_runtime,nccl}/lib` in
//!    the `site-packages` of `VIRTUAL_ENV`, `CONDA_PREFIX`, the `python3` on
//!    `PATH` (its own answer: a pyenv's or the system Python's folders), the
//!    user site (`~/.local/lib/python3*`) and the system site dirs;
//! 7. `CUDNN_RS_FALLBACK_PATH`, like 3 but last (a checkout of this project
//!    sets it to its fetched-library cache in `.cargo/config.toml`).
//!
//! The `python3` on `PATH` is asked once per process, isolated (`-I`) and
//! with a deadline (see [`crate::python_site`]), and only when nothing up to
//! it opened: [`load_lazily`] first tries steps 1 to 5, `VIRTUAL_ENV` and
//! `CONDA_PREFIX` ([`first_pass`]), then, when none of them opens, the whole
//! list in the order above. `CUDNN_RS_NO_PYTHON_PROBE=1` never asks it.
//!
//! An empty entry of `CUDNN_RS_SEARCH_PATH` or `CUDNN_RS_FALLBACK_PATH`
//! (`a::b`, a leading or trailing `:`) is skipped, never read as the current
//! folder.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

pub use libloading;

/// The address of the symbol `name` (NUL-terminated) in `lib`, untyped;
/// `None` when the library lacks it or it is null. The first address
/// found is kept in `first`. One non-generic lookup that every function
/// table's builder (`__define_functions!`) calls, so the loader's generic
/// code is compiled once, not once per C signature.
#[doc(hidden)]
pub fn symbol_address(
    lib: &libloading::Library,
    name: &[u8],
    first: &mut Option<usize>,
) -> Option<*mut core::ffi::c_void> {
    // SAFETY: the symbol is read as an address only (a pointer-sized value
    // typed `*mut c_void`), never called or dereferenced here; the caller
    // gives it its C type.
    let p = unsafe { lib.get::<*mut core::ffi::c_void>(name) }
        .ok()
        .map(|s| *s)
        .filter(|p| !p.is_null())?;
    first.get_or_insert(p as usize);
    Some(p)
}

/// What to look for, for one library.
#[derive(Debug, Clone, Copy)]
pub struct LibrarySpec {
    /// Human name, e.g. `"cuDNN"`.
    pub name: &'static str,
    /// The variable that overrides the search (a directory or a file).
    pub override_var: &'static str,
    /// Root variables, searched in order.
    pub root_vars: &'static [&'static str],
    /// Linux file names, newest first.
    pub sonames: &'static [&'static str],
    /// Windows file names (untested).
    pub windows_names: &'static [&'static str],
    /// The pip wheel that provides it, for the error text.
    pub wheel: &'static str,
}

/// Sub-directories of a Python `site-packages` where NVIDIA's wheels put libraries.
pub const PYTHON_LIB_DIRS: &[&str] = &[
    "nvidia/cudnn/lib",
    "nvidia/cu13/lib",
    "nvidia/cublas/lib",
    "nvidia/cuda_runtime/lib",
    "nvidia/nccl/lib",
];

/// Directories searched after the system loader.
pub const STANDARD_DIRS: &[&str] = &[
    "/usr/local/cuda/lib64",
    "/usr/local/cuda/targets/x86_64-linux/lib",
    "/usr/local/cuda/lib",
    "/opt/cuda/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
];

/// Library sub-directories of a CUDA root.
pub const ROOT_LIB_DIRS: &[&str] = &["lib64", "lib", "targets/x86_64-linux/lib"];

/// Extra search list set by the user (step 3).
pub const SEARCH_PATH_VAR: &str = "CUDNN_RS_SEARCH_PATH";
/// Extra search list ranked last (step 7).
pub const FALLBACK_PATH_VAR: &str = "CUDNN_RS_FALLBACK_PATH";

/// Why a place was tried.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Source {
    /// The library's override variable.
    Override(&'static str),
    /// A root variable such as `CUDA_PATH`.
    Root(&'static str),
    /// `CUDNN_RS_SEARCH_PATH`.
    SearchPath,
    /// The system loader, by file name.
    SystemLoader,
    /// A standard directory.
    StandardDir,
    /// A Python environment named by this variable (or `"user site"`, `"system site"`).
    Python(&'static str),
    /// `CUDNN_RS_FALLBACK_PATH`.
    Fallback,
    /// The directory of another library already loaded, that this one is a
    /// dependency of (cuBLASLt beside cuBLAS).
    Beside(&'static str),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Override(v) | Source::Root(v) => write!(f, "${v}"),
            Source::SearchPath => write!(f, "${SEARCH_PATH_VAR}"),
            Source::SystemLoader => f.write_str("system loader"),
            Source::StandardDir => f.write_str("standard dir"),
            Source::Python(v) if v.contains(' ') => write!(f, "python {v}"),
            Source::Python(v) => write!(f, "python ${v}"),
            Source::Fallback => write!(f, "${FALLBACK_PATH_VAR}"),
            Source::Beside(lib) => write!(f, "{lib}'s folder"),
        }
    }
}

/// One place to try: an absolute path, or a bare file name for the system loader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The path or file name handed to the loader.
    pub path: PathBuf,
    /// Why it is on the list.
    pub source: Source,
}

/// Read access to the environment, so [`candidates`] stays pure.
pub trait Environment {
    /// The value of a variable, if set and not empty.
    fn var(&self, name: &str) -> Option<OsString>;
    /// Names of the entries of a directory (empty when it cannot be read).
    fn list_dir(&self, dir: &Path) -> Vec<String>;
    /// The `site-packages` folders the `python3` on `PATH` reports (see
    /// [`crate::python_site`]); none by default.
    fn python_sites(&self) -> Vec<PathBuf> {
        Vec::new()
    }
}

/// The real process environment and file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessEnvironment;

impl Environment for ProcessEnvironment {
    fn var(&self, name: &str) -> Option<OsString> {
        std::env::var_os(name).filter(|v| !v.is_empty())
    }
    fn list_dir(&self, dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }
    fn python_sites(&self) -> Vec<PathBuf> {
        crate::python_site::process_site_dirs().to_vec()
    }
}

/// An environment without its interpreter's answer (`python_sites` is
/// empty, never asked): the first pass of [`load_lazily_in`], so the
/// interpreter runs only when that pass finds nothing.
#[derive(Clone, Copy)]
pub struct WithoutPython<'a>(pub &'a dyn Environment);

impl Environment for WithoutPython<'_> {
    fn var(&self, name: &str) -> Option<OsString> {
        self.0.var(name)
    }
    fn list_dir(&self, dir: &Path) -> Vec<String> {
        self.0.list_dir(dir)
    }
}

impl fmt::Debug for WithoutPython<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WithoutPython")
    }
}

/// Why a Python folder found by the interpreter was tried.
pub const PYTHON_ON_PATH: &str = "python3 on PATH";
/// Why a folder of `~/.local/lib/python3*` was tried.
pub const USER_SITE: &str = "user site";
/// Why a system `site-packages` or `dist-packages` folder was tried.
pub const SYSTEM_SITE: &str = "system site";

/// The places of `list` that come before the interpreter's folders in the
/// search order: everything up to the first `python3 on PATH`, user site,
/// system site or fallback place. A list made with [`WithoutPython`] has no
/// interpreter folders, so this is the part that needs no interpreter.
pub fn first_pass(list: Vec<Candidate>) -> Vec<Candidate> {
    list.into_iter()
        .take_while(|c| {
            !matches!(
                c.source,
                Source::Fallback | Source::Python(PYTHON_ON_PATH | USER_SITE | SYSTEM_SITE)
            )
        })
        .collect()
}

fn file_names(spec: &LibrarySpec) -> &'static [&'static str] {
    if cfg!(windows) {
        spec.windows_names
    } else {
        spec.sonames
    }
}

/// Does an override value name a file rather than a directory? (Pure: decided
/// from the name, so that a file that does not exist is reported as that file.)
fn names_a_file(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.contains(".so") || n.ends_with(".dll") || n.ends_with(".dylib"))
}

/// The `site-packages` folders of a Python prefix (`<prefix>/lib/python3*/site-packages`).
fn site_packages(env: &dyn Environment, prefix: &Path, leaf: &str) -> Vec<PathBuf> {
    let lib = prefix.join("lib");
    let mut out: Vec<PathBuf> = env
        .list_dir(&lib)
        .into_iter()
        .filter(|n| n.starts_with("python3"))
        .map(|n| lib.join(n).join(leaf))
        .collect();
    // Windows layout (untested): only on Windows.
    if cfg!(windows) {
        out.push(prefix.join("Lib").join("site-packages"));
    }
    out
}

/// Every place to try for `spec`, in order, without duplicates.
pub fn candidates(spec: &LibrarySpec, env: &dyn Environment) -> Vec<Candidate> {
    let names = file_names(spec);
    let mut out: Vec<Candidate> = Vec::new();
    let mut push = |path: PathBuf, source: Source| {
        if !out.iter().any(|c| c.path == path) {
            out.push(Candidate { path, source });
        }
    };
    let in_dir = |dir: &Path, source: Source, push: &mut dyn FnMut(PathBuf, Source)| {
        for n in names {
            push(dir.join(n), source.clone());
        }
    };

    // 1. override: only it.
    if let Some(v) = env.var(spec.override_var) {
        let p = PathBuf::from(v);
        let src = Source::Override(spec.override_var);
        if names_a_file(&p) {
            push(p, src);
        } else {
            in_dir(&p, src, &mut push);
        }
        return out;
    }
    // 2. roots
    for var in spec.root_vars {
        if let Some(root) = env.var(var) {
            let root = PathBuf::from(root);
            for sub in ROOT_LIB_DIRS {
                in_dir(&root.join(sub), Source::Root(var), &mut push);
            }
        }
    }
    // 3. search path
    let search_list = |var: &str, source: Source, push: &mut dyn FnMut(PathBuf, Source)| {
        if let Some(list) = env.var(var) {
            // An empty entry is skipped: it would be the current folder.
            for dir in std::env::split_paths(&list).filter(|d| !d.as_os_str().is_empty()) {
                in_dir(&dir, source.clone(), push);
                for sub in PYTHON_LIB_DIRS {
                    in_dir(&dir.join(sub), source.clone(), push);
                }
            }
        }
    };
    search_list(SEARCH_PATH_VAR, Source::SearchPath, &mut push);
    // 4. system loader
    for n in names {
        push(PathBuf::from(n), Source::SystemLoader);
    }
    // 5. standard dirs
    if !cfg!(windows) {
        for d in STANDARD_DIRS {
            in_dir(Path::new(d), Source::StandardDir, &mut push);
        }
    }
    // 6. Python environments
    let mut sites: Vec<(PathBuf, &'static str)> = Vec::new();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(prefix) = env.var(var) {
            for s in site_packages(env, Path::new(&prefix), "site-packages") {
                sites.push((s, var));
            }
        }
    }
    for s in env.python_sites() {
        sites.push((s, PYTHON_ON_PATH));
    }
    if let Some(home) = env.var("HOME") {
        for s in site_packages(env, &Path::new(&home).join(".local"), "site-packages") {
            sites.push((s, USER_SITE));
        }
    }
    sites.push((PathBuf::from("/usr/lib/python3/dist-packages"), SYSTEM_SITE));
    for prefix in ["/usr/local", "/usr"] {
        for leaf in ["dist-packages", "site-packages"] {
            for s in site_packages(env, Path::new(prefix), leaf) {
                sites.push((s, SYSTEM_SITE));
            }
        }
    }
    for (site, var) in sites {
        for sub in PYTHON_LIB_DIRS {
            in_dir(&site.join(sub), Source::Python(var), &mut push);
        }
    }
    // 7. fallback
    search_list(FALLBACK_PATH_VAR, Source::Fallback, &mut push);
    out
}

/// Why one candidate did not load.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AttemptError {
    /// No file at that path.
    NotFound,
    /// The path exists but is not a regular file (a directory, say).
    NotAFile,
    /// The loader refused it; its own text.
    Dlopen(String),
}

impl fmt::Display for AttemptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttemptError::NotFound => f.write_str("not found"),
            AttemptError::NotAFile => f.write_str("not a file"),
            AttemptError::Dlopen(t) => write!(f, "{t}"),
        }
    }
}

/// One failed attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// What was tried.
    pub candidate: Candidate,
    /// Why it failed.
    pub error: AttemptError,
}

/// A library could not be loaded. Lists every attempt and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    /// Which library (`"cuDNN"`).
    pub library: &'static str,
    /// The variable that would fix it.
    pub override_var: &'static str,
    /// The file names looked for.
    pub file_names: &'static [&'static str],
    /// The pip wheel that provides it.
    pub wheel: &'static str,
    /// Every attempt, in order.
    pub attempts: Vec<Attempt>,
}

impl LoadError {
    /// Whether any attempt found a file that then failed to load (as opposed to
    /// every place being empty).
    pub fn found_but_failed(&self) -> bool {
        self.attempts.iter().any(|a| {
            matches!(a.error, AttemptError::Dlopen(_) | AttemptError::NotAFile)
                && a.candidate.path.is_absolute()
        })
    }
}

impl LoadError {
    /// The attempts grouped by place: one entry per directory (or the
    /// system loader), in the order first tried, with why it was tried,
    /// how many file names were tried there and the distinct failures.
    pub fn places(&self) -> Vec<Place> {
        let mut out: Vec<Place> = Vec::new();
        for a in &self.attempts {
            let c = &a.candidate;
            let dir = if c.path.is_absolute() {
                c.path.parent().map(place_of)
            } else {
                None
            };
            let i = match out
                .iter()
                .position(|p| p.dir == dir && p.source == c.source)
            {
                Some(i) => i,
                None => {
                    out.push(Place {
                        source: c.source.clone(),
                        dir,
                        tried: 0,
                        failures: Vec::new(),
                    });
                    out.len() - 1
                }
            };
            let p = &mut out[i];
            p.tried += 1;
            if !is_absent(a) {
                let name = c.path.file_name().map_or_else(
                    || c.path.display().to_string(),
                    |n| n.to_string_lossy().into_owned(),
                );
                p.failures.push((name, a.error.clone()));
            }
        }
        out
    }

    /// The one thing to do about it.
    pub fn fix(&self) -> String {
        format!(
            "set {} to the directory that holds {} (or to the file itself); \
             NVIDIA's pip wheel `{}` provides it",
            self.override_var,
            self.file_names.first().copied().unwrap_or("the library"),
            self.wheel
        )
    }
}

/// The place a directory belongs to: a Python environment's wheel folders
/// (`<site>/nvidia/<package>/lib`) count as their site, one place.
fn place_of(dir: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in dir.components() {
        if c.as_os_str() == "nvidia" {
            return out;
        }
        out.push(c);
    }
    dir.to_path_buf()
}

/// Whether an attempt found nothing there (the system loader says so in
/// its own words: "cannot open shared object file: No such file").
fn is_absent(a: &Attempt) -> bool {
    match &a.error {
        AttemptError::NotFound => true,
        AttemptError::Dlopen(t) => {
            !a.candidate.path.is_absolute()
                && (t.contains("No such file")
                    || t.contains("cannot find")
                    || t.contains("not found"))
        }
        AttemptError::NotAFile => false,
    }
}

/// A place [`LoadError::places`] reports: a directory, or the system loader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// Why it was tried.
    pub source: Source,
    /// The directory (`None` for the system loader, which gets bare names).
    pub dir: Option<PathBuf>,
    /// How many file names were tried there.
    pub tried: usize,
    /// The file names that were there but did not load, with why (a place
    /// where nothing was found has none).
    pub failures: Vec<(String, AttemptError)>,
}

/// `{}`: one line per place (the file names once, at the top);
/// `{:#}`: every attempt, in order.
impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            writeln!(
                f,
                "{} could not be loaded ({}); {} places tried, in order:",
                self.library,
                self.file_names.join(", "),
                self.attempts.len()
            )?;
            for a in &self.attempts {
                writeln!(
                    f,
                    "  [{}] {}: {}",
                    a.candidate.source,
                    a.candidate.path.display(),
                    a.error
                )?;
            }
            return write!(f, "fix: {}", self.fix());
        }
        let places = self.places();
        writeln!(
            f,
            "{} could not be loaded ({}); {} places tried ({} paths):",
            self.library,
            self.file_names.join(", "),
            places.len(),
            self.attempts.len()
        )?;
        for p in &places {
            let at = p
                .dir
                .as_ref()
                .map_or_else(|| "(by file name)".to_string(), |d| d.display().to_string());
            if p.failures.is_empty() {
                writeln!(f, "  [{}] {at}: not found ({} paths)", p.source, p.tried)?;
            } else {
                for (name, why) in &p.failures {
                    writeln!(f, "  [{}] {at}: {name}: {why}", p.source)?;
                }
            }
        }
        write!(f, "fix: {}", self.fix())
    }
}

impl std::error::Error for LoadError {}

/// A library version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// Major.
    pub major: u32,
    /// Minor.
    pub minor: u32,
    /// Patch level.
    pub patch: u32,
}

impl Version {
    /// A version from its parts.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Where a loaded library came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibraryInfo {
    /// Which library.
    pub library: &'static str,
    /// The file actually loaded (resolved by the loader when opened by name);
    /// `None` when linked at build time and the loader cannot say.
    pub path: Option<PathBuf>,
    /// How it was found.
    pub source: Option<Source>,
    /// Its version, once asked.
    pub version: Option<Version>,
}

impl LibraryInfo {
    /// A [`MissingSymbol`] for `symbol` in this library.
    pub fn missing(&self, symbol: &'static str) -> MissingSymbol {
        MissingSymbol {
            symbol,
            library: self.library,
            version: self.version,
            path: self.path.clone(),
        }
    }
}

/// The loaded library lacks a function the bindings declare (it is older, or
/// the function's ABI differs in that version).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingSymbol {
    /// The C function.
    pub symbol: &'static str,
    /// Which library.
    pub library: &'static str,
    /// The loaded library's version.
    pub version: Option<Version>,
    /// The loaded file.
    pub path: Option<PathBuf>,
}

impl fmt::Display for MissingSymbol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.library)?;
        if let Some(v) = self.version {
            write!(f, " {v}")?;
        }
        if let Some(p) = &self.path {
            write!(f, " ({})", p.display())?;
        }
        write!(
            f,
            " does not provide `{}` (an older library, or one whose ABI for it differs)",
            self.symbol
        )
    }
}

impl std::error::Error for MissingSymbol {}

/// Try `candidates` in order; the first that opens wins.
pub fn open_first(
    spec: &LibrarySpec,
    candidates: Vec<Candidate>,
) -> Result<(libloading::Library, Candidate), LoadError> {
    let mut attempts = Vec::new();
    for c in candidates {
        if c.path.is_absolute() {
            match std::fs::metadata(&c.path) {
                Err(_) => {
                    attempts.push(Attempt {
                        candidate: c,
                        error: AttemptError::NotFound,
                    });
                    continue;
                }
                Ok(m) if !m.is_file() => {
                    attempts.push(Attempt {
                        candidate: c,
                        error: AttemptError::NotAFile,
                    });
                    continue;
                }
                Ok(_) => {}
            }
        }
        // SAFETY: opening a shared library runs its initialisers. These are
        // NVIDIA's CUDA libraries (chosen by file name from the documented
        // search order); their initialisers have no preconditions on us.
        match unsafe { libloading::Library::new(&c.path) } {
            Ok(lib) => return Ok((lib, c)),
            Err(e) => {
                attempts.push(Attempt {
                    candidate: c,
                    error: AttemptError::Dlopen(error_text(&e)),
                });
            }
        }
    }
    Err(LoadError {
        library: spec.name,
        override_var: spec.override_var,
        file_names: file_names(spec),
        wheel: spec.wheel,
        attempts,
    })
}

/// The loader's own words, with libloading's source chain appended.
fn error_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        let t = s.to_string();
        if !text.contains(&t) {
            text.push_str(": ");
            text.push_str(&t);
        }
        src = s.source();
    }
    text
}

/// The file that holds the code at `addr`, as the dynamic loader sees it.
/// `addr` is only compared with the loader's tables, never dereferenced.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn path_of_address(addr: *const core::ffi::c_void) -> Option<PathBuf> {
    #[cfg(unix)]
    {
        let mut info = libc::Dl_info {
            dli_fname: core::ptr::null(),
            dli_fbase: core::ptr::null_mut(),
            dli_sname: core::ptr::null(),
            dli_saddr: core::ptr::null_mut(),
        };
        // SAFETY: dladdr only reads `addr` as a number and writes `info`, a
        // valid out-pointer; it returns 0 when it knows nothing.
        let ok = unsafe { libc::dladdr(addr, &mut info) };
        if ok == 0 || info.dli_fname.is_null() {
            return None;
        }
        // SAFETY: dli_fname is a NUL-terminated string owned by the loader,
        // valid while the library stays loaded; we copy it at once.
        let name = unsafe { core::ffi::CStr::from_ptr(info.dli_fname) };
        use std::os::unix::ffi::OsStrExt;
        let p = PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes()));
        std::fs::canonicalize(&p).ok().or(Some(p))
    }
    #[cfg(not(unix))]
    {
        let _ = addr;
        None
    }
}

/// Load `spec` with the process environment and build its table.
pub fn load_with<T>(
    spec: &LibrarySpec,
    build: impl FnOnce(libloading::Library, LibraryInfo) -> T,
) -> Result<T, LoadError> {
    load_lazily(spec, |env| candidates(spec, env), build)
}

/// Load `spec` from the list `list` makes for an environment, asking the
/// Python on `PATH` only when needed: first the places before its folders
/// ([`first_pass`] of the list made [`WithoutPython`]); when none opens,
/// the whole list made with the interpreter's folders, in its order (the
/// error then lists every place).
pub fn load_lazily<T>(
    spec: &LibrarySpec,
    list: impl Fn(&dyn Environment) -> Vec<Candidate>,
    build: impl FnOnce(libloading::Library, LibraryInfo) -> T,
) -> Result<T, LoadError> {
    load_lazily_in(spec, &ProcessEnvironment, list, build)
}

/// [`load_lazily`] in environment `env` (whose `python_sites` is asked
/// only for the second pass).
pub fn load_lazily_in<T>(
    spec: &LibrarySpec,
    env: &dyn Environment,
    list: impl Fn(&dyn Environment) -> Vec<Candidate>,
    build: impl FnOnce(libloading::Library, LibraryInfo) -> T,
) -> Result<T, LoadError> {
    match open_first(spec, first_pass(list(&WithoutPython(env)))) {
        Ok((lib, found)) => Ok(build(lib, info_of(spec, found))),
        Err(_) => load_from(spec, list(env), build),
    }
}

fn info_of(spec: &LibrarySpec, found: Candidate) -> LibraryInfo {
    LibraryInfo {
        library: spec.name,
        path: Some(found.path),
        source: Some(found.source),
        version: None,
    }
}

/// The candidates for `spec`, with the directory of `companion` (a library
/// already loaded from `companion_path`, which depends on this one) tried
/// first, unless `spec`'s override variable is set (which stays exclusive).
/// The loader would find the companion's copy anyway (it is in the process
/// already); trying its directory first says so, and never pairs the
/// companion with a different version.
pub fn candidates_beside(
    spec: &LibrarySpec,
    env: &dyn Environment,
    companion: &'static str,
    companion_path: Option<&Path>,
) -> Vec<Candidate> {
    let mut list = candidates(spec, env);
    if env.var(spec.override_var).is_some() {
        return list;
    }
    if let Some(dir) = companion_path.and_then(Path::parent) {
        let first: Vec<Candidate> = file_names(spec)
            .iter()
            .map(|n| Candidate {
                path: dir.join(n),
                source: Source::Beside(companion),
            })
            .collect();
        list.retain(|c| !first.iter().any(|f| f.path == c.path));
        list.splice(0..0, first);
    }
    list
}

/// Load `spec` from `list` (in order) and build its table.
pub fn load_from<T>(
    spec: &LibrarySpec,
    list: Vec<Candidate>,
    build: impl FnOnce(libloading::Library, LibraryInfo) -> T,
) -> Result<T, LoadError> {
    let (lib, found) = open_first(spec, list)?;
    Ok(build(lib, info_of(spec, found)))
}

#[cfg(test)]
#[path = "loader_tests.rs"]
mod tests;
