//! NVRTC for cuDNN's runtime-compiled engines.
//!
//! Older cuDNN 9 releases (9.10 was measured) compile their runtime-fusion
//! kernels (matmul and pointwise fusions, norms, the composite attention)
//! with NVRTC, which they open by file name (`libnvrtc.so.<CUDA major>`).
//! NVIDIA's pip wheels put it in `nvidia/cuda_nvrtc/lib`, a folder those cuDNN
//! releases do not search, and without it their heuristics silently offer no
//! runtime-compiled engine at all. So before the first plan the crate opens
//! every NVRTC it finds (`RTLD_GLOBAL`: cuDNN's later open by file name
//! resolves to it): beside cuDNN's wheel first, then the places every CUDA
//! library is looked for (`NVRTC_LIB_DIR` overrides), and with each one its
//! built-in headers library from the same folder (NVRTC 13.0 does not look
//! for it beside itself; without it every compile fails and cuDNN reports
//! `INTERNAL_ERROR_COMPILATION_FAILED`). Finding none is not an error:
//! cuDNN 9.28 needs no NVRTC to plan.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::sys::cudart::loader::{
    self, Candidate, Environment, LibrarySpec, ProcessEnvironment, Source, WithoutPython,
};

/// How NVRTC is looked for.
pub const SPEC: LibrarySpec = LibrarySpec {
    name: "NVRTC",
    override_var: "NVRTC_LIB_DIR",
    root_vars: &["CUDA_PATH", "CUDA_HOME"],
    sonames: &["libnvrtc.so.13", "libnvrtc.so.12"],
    windows_names: &[],
    wheel: "nvidia-cuda-nvrtc (nvidia-cuda-nvrtc-cu12 for CUDA 12)",
};

/// Folders beside cuDNN's `nvidia/cudnn/lib` where NVIDIA's wheels put NVRTC.
const WHEEL_DIRS: &[&str] = &["../../cuda_nvrtc/lib", "../../cu13/lib", "../../nvrtc/lib"];

/// One NVRTC opened for cuDNN.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Opened {
    /// The file (symbolic links resolved).
    pub path: PathBuf,
    /// What its `nvrtcVersion` answers (major, minor); `None` when it has
    /// no such function or the call fails.
    pub version: Option<(i32, i32)>,
    /// Its built-in headers library (`libnvrtc-builtins.so.<major>.<minor>`
    /// from the same folder), opened with it; `None` when NVRTC came from
    /// the system loader (whose search finds the builtins too) or the
    /// folder has none.
    pub builtins: Option<PathBuf>,
}

static LOADED: OnceLock<Vec<Opened>> = OnceLock::new();

/// The NVRTC files opened for cuDNN (one per CUDA major found; empty when
/// none was found). Opens them on the first call.
pub fn loaded() -> &'static [Opened] {
    LOADED.get_or_init(open_all)
}

/// The candidates: beside cuDNN's wheel (unless `NVRTC_LIB_DIR` is set), then
/// the usual places (with the folders of the `python3` on `PATH`, which is
/// asked for them; the crate's own first pass goes without, see
/// [`loaded`]).
pub fn candidates(cudnn_path: Option<&Path>) -> Vec<Candidate> {
    candidates_in(cudnn_path, &ProcessEnvironment)
}

/// [`candidates`] in environment `env`.
fn candidates_in(cudnn_path: Option<&Path>, env: &dyn Environment) -> Vec<Candidate> {
    let mut list = loader::candidates(&SPEC, env);
    if env.var(SPEC.override_var).is_some() {
        return list;
    }
    if let Some(dir) = cudnn_path.and_then(Path::parent) {
        let first: Vec<Candidate> = WHEEL_DIRS
            .iter()
            .flat_map(|sub| {
                SPEC.sonames.iter().map(move |n| Candidate {
                    path: dir.join(sub).join(n),
                    source: Source::Beside("cuDNN"),
                })
            })
            .collect();
        list.retain(|c| !first.iter().any(|f| f.path == c.path));
        list.splice(0..0, first);
    }
    list
}

#[cfg(not(unix))]
fn open_all() -> Vec<Opened> {
    Vec::new()
}

#[cfg(unix)]
fn open_all() -> Vec<Opened> {
    let cudnn_path = crate::check::cudnn()
        .ok()
        .and_then(|api| api.info().path.clone());
    open_lazily(cudnn_path.as_deref(), &ProcessEnvironment)
}

/// Open NVRTC as the libraries are loaded (`loader::load_lazily`): first
/// from the places before the `python3` on `PATH`, without starting it;
/// only when none opens, from the whole list, with the interpreter's
/// folders (so the first graph plan of a process does not start Python
/// when NVRTC is beside cuDNN or anywhere before).
#[cfg(unix)]
fn open_lazily(cudnn_path: Option<&Path>, env: &dyn Environment) -> Vec<Opened> {
    let first = loader::first_pass(candidates_in(cudnn_path, &WithoutPython(env)));
    let opened = open_from(&first);
    if !opened.is_empty() {
        return opened;
    }
    open_from(&candidates_in(cudnn_path, env))
}

/// For each NVRTC file name, the first of `list` that opens.
#[cfg(unix)]
fn open_from(list: &[Candidate]) -> Vec<Opened> {
    let mut opened = Vec::new();
    for soname in SPEC.sonames {
        for c in list
            .iter()
            .filter(|c| c.path.file_name().is_some_and(|f| f == *soname))
        {
            if c.path.is_absolute() && !c.path.is_file() {
                continue;
            }
            let flags = libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL;
            // SAFETY: NVIDIA's NVRTC, found by file name in the documented
            // places; its initialisers have no preconditions on us.
            if let Ok(lib) = unsafe { libloading::os::unix::Library::open(Some(&c.path), flags) } {
                let version = version_of(&lib);
                let builtins = if c.path.is_absolute() {
                    open_builtins(&c.path, version)
                } else {
                    None
                };
                // Kept for the life of the process: cuDNN holds its functions.
                std::mem::forget(lib);
                opened.push(Opened {
                    path: std::fs::canonicalize(&c.path).unwrap_or_else(|_| c.path.clone()),
                    version,
                    builtins,
                });
                break;
            }
        }
    }
    opened
}

/// NVRTC opens its built-in headers (`libnvrtc-builtins.so.<major>.<minor>`)
/// by file name when it first compiles. NVRTC 13.0 looks for them only where
/// the system loader looks, not beside itself, so with NVIDIA's wheels (where
/// they lie beside it, in no folder the loader searches) every compile fails
/// and cuDNN reports `INTERNAL_ERROR_COMPILATION_FAILED`. Opening them first,
/// from NVRTC's own folder and with `RTLD_GLOBAL`, makes NVRTC's later open
/// by name find the loaded copy. Returns the file opened.
#[cfg(unix)]
fn open_builtins(nvrtc: &Path, version: Option<(i32, i32)>) -> Option<PathBuf> {
    let dir = nvrtc.parent()?;
    let mut names: Vec<String> = Vec::new();
    if let Some((major, minor)) = version {
        names.push(format!("libnvrtc-builtins.so.{major}.{minor}"));
    }
    // Whatever else the folder holds (a version that did not answer);
    // never the `.alt` variant, which pairs with `libnvrtc.alt`.
    if let Ok(entries) = std::fs::read_dir(dir) {
        let mut more: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("libnvrtc-builtins.so.") && !names.contains(n))
            .collect();
        more.sort();
        names.extend(more);
    }
    for name in names {
        let path = dir.join(&name);
        if !path.is_file() {
            continue;
        }
        let flags = libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL;
        // SAFETY: NVIDIA's NVRTC builtins from the folder of the NVRTC just
        // opened; a data library whose initialisers have no preconditions.
        if let Ok(lib) = unsafe { libloading::os::unix::Library::open(Some(&path), flags) } {
            // Kept for the life of the process, as NVRTC itself.
            std::mem::forget(lib);
            return Some(std::fs::canonicalize(&path).unwrap_or(path));
        }
    }
    None
}

/// `nvrtcVersion` of an opened NVRTC.
#[cfg(unix)]
fn version_of(lib: &libloading::os::unix::Library) -> Option<(i32, i32)> {
    type VersionFn = unsafe extern "C" fn(*mut i32, *mut i32) -> i32;
    // SAFETY: `nvrtcVersion(int *major, int *minor)` returns `nvrtcResult`
    // (an int) in every NVRTC; the symbol is only called while `lib` lives.
    let f = unsafe { lib.get::<VersionFn>(b"nvrtcVersion\0") }.ok()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two valid, writable out-pointers; NVRTC needs no set-up.
    let r = unsafe { f(&mut major, &mut minor) };
    (r == 0).then_some((major, minor))
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::ffi::OsString;

    /// Variables from a list, no folder listings, the interpreter's answer
    /// from a list, counting how often it is asked.
    struct Counting {
        vars: Vec<(&'static str, OsString)>,
        python: Vec<PathBuf>,
        asked: Cell<usize>,
    }

    impl Environment for Counting {
        fn var(&self, name: &str) -> Option<OsString> {
            self.vars
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.clone())
        }
        fn list_dir(&self, _: &Path) -> Vec<String> {
            Vec::new()
        }
        fn python_sites(&self) -> Vec<PathBuf> {
            self.asked.set(self.asked.get() + 1);
            self.python.clone()
        }
    }

    /// A fetched stack of this checkout that holds an NVRTC (a
    /// `site-packages`-like folder), if any.
    fn stack_with_nvrtc() -> Option<PathBuf> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.cuda-libs");
        ["torch211", "cudnn910", "candle"]
            .iter()
            .map(|s| root.join(s))
            .find(|stack| {
                ["nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"]
                    .iter()
                    .any(|d| SPEC.sonames.iter().any(|n| stack.join(d).join(n).is_file()))
            })
    }

    /// NVRTC found before the Python places (here through
    /// `CUDNN_RS_SEARCH_PATH`): the interpreter is never asked, so the
    /// first graph plan of a process does not start Python.
    #[test]
    fn unit_python_is_not_asked_when_nvrtc_opens_first() {
        let Some(stack) = stack_with_nvrtc() else {
            eprintln!("skipped: no fetched stack with NVRTC (cargo xtask fetch-libs)");
            return;
        };
        let env = Counting {
            vars: vec![("CUDNN_RS_SEARCH_PATH", stack.clone().into_os_string())],
            python: vec![PathBuf::from("/nonexistent-python-site")],
            asked: Cell::new(0),
        };
        let opened = open_lazily(None, &env);
        assert!(
            !opened.is_empty(),
            "no NVRTC opened from {}",
            stack.display()
        );
        assert_eq!(env.asked.get(), 0, "{opened:?}");
    }

    /// Nothing before the Python places opens: the interpreter is asked
    /// (once) and NVRTC is opened from the folder it names.
    #[test]
    fn unit_python_is_asked_when_nothing_before_opens() {
        let Some(stack) = stack_with_nvrtc() else {
            eprintln!("skipped: no fetched stack with NVRTC (cargo xtask fetch-libs)");
            return;
        };
        let env = Counting {
            vars: Vec::new(),
            python: vec![stack.clone()],
            asked: Cell::new(0),
        };
        let first = loader::first_pass(candidates_in(None, &WithoutPython(&env)));
        if !open_from(&first).is_empty() {
            eprintln!(
                "skipped: an NVRTC opens from a system place here (or by file name, \
                 already loaded), so the second pass cannot be shown"
            );
            return;
        }
        let opened = open_lazily(None, &env);
        assert_eq!(env.asked.get(), 1);
        let stack = std::fs::canonicalize(&stack).unwrap_or(stack);
        assert!(
            opened.first().is_some_and(|o| o.path.starts_with(&stack)),
            "{opened:?}"
        );
    }
}
