//! The search order's corrections (issue 33 item 7): no Windows folder on
//! Linux, no empty entry read as the current folder, the Python on `PATH`
//! asked for its own folders, and only when nothing before it opens.

use super::*;
use std::path::{Path, PathBuf};

const SPEC: LibrarySpec = LibrarySpec {
    name: "test library",
    override_var: "TEST_LIB_DIR",
    root_vars: &[],
    sonames: &["libcudnn_rs_loader_test.so.1"],
    windows_names: &["cudnn_rs_loader_test.dll"],
    wheel: "none",
};

/// Variables, directory listings and the interpreter's answer from lists.
struct Fake {
    vars: Vec<(&'static str, String)>,
    dirs: Vec<(PathBuf, Vec<&'static str>)>,
    python: Vec<PathBuf>,
}

impl Environment for Fake {
    fn var(&self, name: &str) -> Option<OsString> {
        self.vars
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| OsString::from(v))
    }
    fn list_dir(&self, dir: &Path) -> Vec<String> {
        self.dirs
            .iter()
            .find(|(d, _)| d == dir)
            .map(|(_, n)| n.iter().map(|s| s.to_string()).collect())
            .unwrap_or_default()
    }
    fn python_sites(&self) -> Vec<PathBuf> {
        self.python.clone()
    }
}

fn fake(vars: &[(&'static str, &str)]) -> Fake {
    Fake {
        vars: vars.iter().map(|(k, v)| (*k, v.to_string())).collect(),
        dirs: vec![],
        python: vec![],
    }
}

fn file() -> &'static str {
    if cfg!(windows) {
        SPEC.windows_names[0]
    } else {
        SPEC.sonames[0]
    }
}

#[test]
fn empty_entries_of_the_search_lists_are_skipped() {
    for var in [SEARCH_PATH_VAR, FALLBACK_PATH_VAR] {
        for value in ["/a::/b", ":/a:/b", "/a:/b:", "/a:::/b"] {
            let list = candidates(&SPEC, &fake(&[(var, value)]));
            // The bare file name comes only from the system loader; a
            // relative path (`./lib...`, `nvidia/cudnn/lib/lib...`) only
            // from an empty entry.
            assert!(
                list.iter()
                    .all(|c| c.path.is_absolute() || c.source == Source::SystemLoader),
                "{var}={value:?}: {:?}",
                list.iter()
                    .filter(|c| !c.path.is_absolute())
                    .collect::<Vec<_>>()
            );
            for d in ["/a", "/b"] {
                assert!(
                    list.iter().any(|c| c.path == Path::new(d).join(file())),
                    "{var}={value:?}: {d} is searched"
                );
            }
        }
    }
}

#[test]
fn the_windows_site_folder_only_on_windows() {
    let e = Fake {
        dirs: vec![(PathBuf::from("/venv/lib"), vec!["python3.12"])],
        ..fake(&[("VIRTUAL_ENV", "/venv"), ("HOME", "/home/u")])
    };
    let list = candidates(&SPEC, &e);
    let windows_style = list
        .iter()
        .any(|c| c.path.components().any(|p| p.as_os_str() == "Lib"));
    assert_eq!(windows_style, cfg!(windows), "{list:?}");
    assert!(
        list.iter().any(|c| c.path
            == Path::new("/venv/lib/python3.12/site-packages/nvidia/cudnn/lib").join(file()))
    );
}

#[test]
fn the_interpreters_folders_come_after_the_environments_and_before_the_fallback() {
    let e = Fake {
        python: vec![PathBuf::from(
            "/home/u/.pyenv/versions/3.12.1/lib/python3.12/site-packages",
        )],
        ..fake(&[
            ("VIRTUAL_ENV", "/venv"),
            ("HOME", "/home/u"),
            (FALLBACK_PATH_VAR, "/fallback"),
        ])
    };
    let e = Fake {
        dirs: vec![(PathBuf::from("/venv/lib"), vec!["python3.12"])],
        ..e
    };
    let list = candidates(&SPEC, &e);
    let at = |p: &Path| list.iter().position(|c| c.path == p.join(file()));
    let venv = at(Path::new(
        "/venv/lib/python3.12/site-packages/nvidia/cudnn/lib",
    ))
    .unwrap();
    let pyenv = at(Path::new(
        "/home/u/.pyenv/versions/3.12.1/lib/python3.12/site-packages/nvidia/cudnn/lib",
    ))
    .unwrap();
    let fallback = at(Path::new("/fallback")).unwrap();
    assert!(
        venv < pyenv && pyenv < fallback,
        "{venv} {pyenv} {fallback}"
    );
    assert_eq!(list[pyenv].source, Source::Python("python3 on PATH"));
    assert_eq!(list[pyenv].source.to_string(), "python python3 on PATH");
    // Without an interpreter, nothing of it is listed.
    let none = candidates(&SPEC, &fake(&[("HOME", "/home/u")]));
    assert!(
        none.iter()
            .all(|c| c.source != Source::Python("python3 on PATH"))
    );
}

/// [`Fake`], counting how often the interpreter is asked.
struct Counting {
    inner: Fake,
    asked: std::cell::Cell<usize>,
}

impl Environment for Counting {
    fn var(&self, name: &str) -> Option<OsString> {
        self.inner.var(name)
    }
    fn list_dir(&self, dir: &Path) -> Vec<String> {
        self.inner.list_dir(dir)
    }
    fn python_sites(&self) -> Vec<PathBuf> {
        self.asked.set(self.asked.get() + 1);
        self.inner.python_sites()
    }
}

/// A fresh scratch folder.
fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "cudart-sys-lazy-{tag}-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Put the test library's file name in `dir` as a link to the C library
/// this process already runs (the loader then hands back the copy it has
/// loaded: no second copy is mapped). `None` where that cannot be done.
#[cfg(unix)]
fn plant(dir: &Path) -> Option<()> {
    let libc_path = path_of_address(libc::malloc as *const core::ffi::c_void)?;
    std::fs::create_dir_all(dir).ok()?;
    std::os::unix::fs::symlink(libc_path, dir.join(file())).ok()
}

fn lazily(env: &Counting) -> Result<LibraryInfo, LoadError> {
    load_lazily_in(&SPEC, env, |e| candidates(&SPEC, e), |_lib, info| info)
}

/// A place before the interpreter's folders opens: the interpreter is never
/// asked (the Python on `PATH` is not started for every library).
#[cfg(unix)]
#[test]
fn the_interpreter_is_not_asked_when_the_first_pass_opens() {
    let d = scratch("first");
    let Some(()) = plant(&d) else {
        eprintln!("skipped: cannot link to this process's C library");
        return;
    };
    let env = Counting {
        inner: Fake {
            python: vec![PathBuf::from("/py/site-packages")],
            ..fake(&[(SEARCH_PATH_VAR, d.to_str().unwrap())])
        },
        asked: Default::default(),
    };
    let info = lazily(&env).unwrap();
    assert_eq!(info.source, Some(Source::SearchPath));
    assert_eq!(env.asked.get(), 0);
    std::fs::remove_dir_all(&d).unwrap();
}

/// Nothing before the interpreter opens: it is asked once, and its folder
/// comes before the user site, as documented (the first pass ends before
/// the user and system sites, so a copy in the user site does not win).
#[cfg(unix)]
#[test]
fn the_interpreter_is_asked_once_and_comes_before_the_user_site() {
    let d = scratch("second");
    let home = d.join("home");
    let user = home.join(".local/lib/python3.12/site-packages/nvidia/cudnn/lib");
    let py = d.join("py/site-packages");
    let (Some(()), Some(())) = (plant(&user), plant(&py.join("nvidia/cudnn/lib"))) else {
        eprintln!("skipped: cannot link to this process's C library");
        return;
    };
    let env = Counting {
        inner: Fake {
            python: vec![py.clone()],
            dirs: vec![(home.join(".local/lib"), vec!["python3.12"])],
            ..fake(&[("HOME", home.to_str().unwrap())])
        },
        asked: Default::default(),
    };
    let info = lazily(&env).unwrap();
    assert_eq!(info.source, Some(Source::Python(PYTHON_ON_PATH)));
    assert_eq!(
        info.path.as_deref(),
        Some(py.join("nvidia/cudnn/lib").join(file()).as_path())
    );
    assert_eq!(env.asked.get(), 1);
    // Without the interpreter's folder, the user site's copy is found, in
    // the second pass.
    std::fs::remove_dir_all(&py).unwrap();
    let env = Counting {
        asked: Default::default(),
        ..env
    };
    let info = lazily(&env).unwrap();
    assert_eq!(info.source, Some(Source::Python(USER_SITE)));
    assert_eq!(env.asked.get(), 1);
    std::fs::remove_dir_all(&d).unwrap();
}

/// Nothing anywhere: asked once, and the error lists the interpreter's
/// folder among the places.
#[test]
fn a_miss_asks_once_and_lists_the_interpreters_folder() {
    let env = Counting {
        inner: Fake {
            python: vec![PathBuf::from("/nonexistent-py/site-packages")],
            ..fake(&[])
        },
        asked: Default::default(),
    };
    let err = lazily(&env).unwrap_err();
    assert_eq!(env.asked.get(), 1);
    assert!(
        err.attempts
            .iter()
            .any(|a| a.candidate.source == Source::Python(PYTHON_ON_PATH)),
        "{err:#}"
    );
}

/// The first pass stops at the first interpreter, user site, system site
/// or fallback place, whichever comes first.
#[test]
fn the_first_pass_ends_before_the_interpreters_place() {
    let e = Fake {
        dirs: vec![(PathBuf::from("/venv/lib"), vec!["python3.12"])],
        python: vec![PathBuf::from("/py")],
        ..fake(&[
            ("VIRTUAL_ENV", "/venv"),
            ("HOME", "/home/u"),
            (FALLBACK_PATH_VAR, "/fallback"),
        ])
    };
    let all = candidates(&SPEC, &e);
    let first = first_pass(all.clone());
    assert!(
        first
            .iter()
            .any(|c| c.source == Source::Python("VIRTUAL_ENV"))
    );
    assert_eq!(first[..], all[..first.len()]);
    assert_eq!(all[first.len()].source, Source::Python(PYTHON_ON_PATH));
    // Made without the interpreter: it ends at the system site.
    let without = first_pass(candidates(&SPEC, &WithoutPython(&e)));
    assert_eq!(without, first);
}
