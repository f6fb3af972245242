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
