//! The `site-packages` folders of the Python on `PATH`, as the interpreter
//! itself reports them: a pyenv's, a framework install's or the system
//! Python's own folders, which no fixed pattern finds.
//!
//! The interpreter is asked once per process, only when the places before
//! it in the search order found nothing (see `loader::load_lazily`), with a
//! deadline; a missing, failing or slow interpreter adds nothing and never
//! fails a load. It runs isolated (`python3 -I`): the current folder is not
//! on its module path (a `sysconfig.py` there is never run), and neither
//! `PYTHON*` variables nor the user site are read (the loader's own "user
//! site" step covers `~/.local/lib/python3*`). `CUDNN_RS_NO_PYTHON_PROBE=1`
//! turns the probe off.

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the interpreter may take to answer.
pub const TIMEOUT: Duration = Duration::from_secs(3);

/// Set to `1`, the interpreter is never asked.
pub const NO_PROBE_VAR: &str = "CUDNN_RS_NO_PYTHON_PROBE";

/// The most output read from it.
const MAX_OUTPUT: u64 = 64 << 10;

/// What the interpreter runs (isolated, `-I`): `sysconfig`'s purelib and
/// platlib and `site`'s global site folders, one per line, written as the
/// bytes of the file system's encoding (a folder name that is not UTF-8
/// survives). Each part may be missing in an unusual interpreter (an old
/// virtualenv's `site`).
const SCRIPT: &str = "import os, site, sys, sysconfig
out = []
try:
    p = sysconfig.get_paths()
    out += [p.get('purelib'), p.get('platlib')]
except Exception:
    pass
try:
    out += site.getsitepackages()
except Exception:
    pass
sys.stdout.buffer.write(b''.join(os.fsencode(x) + b'\\n' for x in out if x))
";

/// The first `python3` in `path` (a `PATH` value): absolute entries only,
/// so neither an empty entry nor a relative one can run a `python3` from the
/// current folder.
pub fn find_python(path: &OsStr) -> Option<PathBuf> {
    std::env::split_paths(path)
        .filter(|d| d.is_absolute())
        .map(|d| d.join("python3"))
        .find(|p| is_executable(p))
}

#[cfg(unix)]
fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable(p: &Path) -> bool {
    p.is_file()
}

/// Ask the first `python3` of `path` for its site folders, within
/// `timeout`: the absolute folders it printed, in its order; empty when
/// there is no interpreter, it fails, prints nothing usable, or is late
/// (it is then killed).
pub fn site_dirs(path: &OsStr, timeout: Duration) -> Vec<PathBuf> {
    site_dirs_in(path, timeout, None)
}

/// [`site_dirs`], with the interpreter started in folder `cwd` (the
/// current one when `None`).
fn site_dirs_in(path: &OsStr, timeout: Duration, cwd: Option<&Path>) -> Vec<PathBuf> {
    let Some(python) = find_python(path) else {
        return Vec::new();
    };
    let mut cmd = Command::new(&python);
    cmd.args(["-I", "-c", SCRIPT])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    let Ok(mut child) = cmd.spawn() else {
        return Vec::new();
    };
    // Read on a thread, so a full pipe cannot keep the child from exiting.
    let (tx, rx) = std::sync::mpsc::channel();
    if let Some(out) = child.stdout.take() {
        let reader = std::thread::Builder::new()
            .name("cudnn-rs python probe".into())
            .spawn(move || {
                let mut bytes = Vec::new();
                let _ = out.take(MAX_OUTPUT).read_to_end(&mut bytes);
                let _ = tx.send(bytes);
            });
        if reader.is_err() {
            // No thread to read with: the answer is lost, the child reaped.
            end(&mut child);
            return Vec::new();
        }
    }
    let deadline = Instant::now() + timeout;
    let ok = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status.success(),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                end(&mut child);
                break false;
            }
        }
    };
    // The child has exited: its end of the pipe is closed unless a process
    // it started holds it, so the wait for the text has the same deadline.
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(100));
    let bytes = if ok {
        rx.recv_timeout(left).unwrap_or_default()
    } else {
        Vec::new()
    };
    parse(&bytes)
}

/// Kill and reap `child`.
fn end(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// The absolute folders of the interpreter's output (one per line, bytes
/// of the file system's encoding), in order, without duplicates.
fn parse(bytes: &[u8]) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for line in bytes.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(p) = path_of_bytes(line) else {
            continue;
        };
        if p.is_absolute() && !dirs.contains(&p) {
            dirs.push(p);
        }
    }
    dirs
}

#[cfg(unix)]
fn path_of_bytes(b: &[u8]) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    (!b.is_empty()).then(|| PathBuf::from(OsStr::from_bytes(b)))
}

#[cfg(not(unix))]
fn path_of_bytes(b: &[u8]) -> Option<PathBuf> {
    std::str::from_utf8(b)
        .ok()
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
}

/// Whether a value of [`NO_PROBE_VAR`] turns the probe off (`1`).
fn probe_disabled(value: Option<&OsStr>) -> bool {
    value.is_some_and(|v| v == "1")
}

/// [`site_dirs`] of the process's `PATH`, asked once per process.
/// Empty, without asking, when [`NO_PROBE_VAR`] is `1`.
pub fn process_site_dirs() -> &'static [PathBuf] {
    static DIRS: std::sync::OnceLock<Vec<PathBuf>> = std::sync::OnceLock::new();
    if probe_disabled(std::env::var_os(NO_PROBE_VAR).as_deref()) {
        return &[];
    }
    DIRS.get_or_init(|| {
        std::env::var_os("PATH")
            .map(|p| site_dirs(&p, TIMEOUT))
            .unwrap_or_default()
    })
}

#[cfg(test)]
#[cfg(unix)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// One test at a time: a script written while another test's thread
    /// forks can be held open for writing by that child, and executing it
    /// then fails with "text file busy".
    fn serial() -> std::sync::MutexGuard<'static, ()> {
        static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
        LOCK.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "cudart-sys-python-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn fake_python(dir: &Path, body: &str) {
        let p = dir.join("python3");
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn a_fake_interpreter_is_asked_and_its_folders_kept_in_order() {
        let _serial = serial();
        let d = scratch("ok");
        fake_python(
            &d,
            "printf '/opt/py/lib/python3.12/site-packages\\n/opt/py/lib/python3.12/site-packages\\nrelative/x\\n/home/u/.local/lib/python3.12/site-packages\\n'",
        );
        let path = std::env::join_paths([Path::new("/nonexistent-dir"), &d]).unwrap();
        assert_eq!(find_python(&path), Some(d.join("python3")));
        assert_eq!(
            site_dirs(&path, TIMEOUT),
            vec![
                PathBuf::from("/opt/py/lib/python3.12/site-packages"),
                PathBuf::from("/home/u/.local/lib/python3.12/site-packages"),
            ]
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_missing_failing_or_slow_interpreter_adds_nothing() {
        let _serial = serial();
        let empty = scratch("none");
        assert!(site_dirs(empty.as_os_str(), TIMEOUT).is_empty());
        let failing = scratch("fail");
        fake_python(&failing, "echo /opt/x; exit 3");
        assert!(site_dirs(failing.as_os_str(), TIMEOUT).is_empty());
        // Exits at once but leaves a process holding its output open.
        let held = scratch("held");
        fake_python(&held, "echo /opt/held; sleep 30 &");
        let t = Instant::now();
        let _ = site_dirs(held.as_os_str(), Duration::from_millis(300));
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        std::fs::remove_dir_all(&held).unwrap();
        let slow = scratch("slow");
        fake_python(&slow, "exec sleep 30");
        let t = Instant::now();
        assert!(site_dirs(slow.as_os_str(), Duration::from_millis(200)).is_empty());
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        for d in [empty, failing, slow] {
            std::fs::remove_dir_all(&d).unwrap();
        }
    }

    /// A folder name that is not UTF-8 is kept, byte for byte, beside the
    /// others (it was dropped with the whole answer when read as text).
    #[test]
    fn a_non_utf8_folder_survives() {
        use std::os::unix::ffi::OsStrExt;
        let _serial = serial();
        let d = scratch("bytes");
        fake_python(
            &d,
            "printf '/opt/caf\\351/site-packages\\n/opt/ok\\r\\n\\n'",
        );
        let dirs = site_dirs(d.as_os_str(), TIMEOUT);
        assert_eq!(
            dirs,
            vec![
                PathBuf::from(OsStr::from_bytes(b"/opt/caf\xe9/site-packages")),
                PathBuf::from("/opt/ok"),
            ]
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// The interpreter is started with `-I`: the fake one records its
    /// arguments, and the script is the third.
    #[test]
    fn the_interpreter_runs_isolated() {
        let _serial = serial();
        let d = scratch("args");
        fake_python(&d, "printf '%s\\n' \"/opt/$1\" \"/opt/$2\"");
        assert_eq!(
            site_dirs(d.as_os_str(), TIMEOUT),
            vec![PathBuf::from("/opt/-I"), PathBuf::from("/opt/-c")]
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// `CUDNN_RS_NO_PYTHON_PROBE=1` turns the probe off; other values do not.
    #[test]
    fn the_opt_out_value() {
        assert!(probe_disabled(Some(OsStr::new("1"))));
        for v in ["0", "", "yes"] {
            assert!(!probe_disabled(Some(OsStr::new(v))), "{v:?}");
        }
        assert!(!probe_disabled(None));
    }

    /// The real interpreter, started in a folder holding a hostile
    /// `sysconfig.py` (and `site.py`, `os.py`) that would create a file when
    /// imported: it is never run, and the answer is the same as from a
    /// clean folder. Control: the same interpreter without `-I`, in that
    /// folder, does run it (so the test can see an import from there).
    #[test]
    fn a_sysconfig_py_in_the_current_folder_is_not_run() {
        let _serial = serial();
        let Some(path) = std::env::var_os("PATH") else {
            eprintln!("skipped: no PATH");
            return;
        };
        let Some(py) = find_python(&path) else {
            eprintln!("skipped: no python3 on PATH");
            return;
        };
        let d = scratch("hostile");
        let marker = d.join("ran");
        let body = format!(
            "open({:?}, 'a').write(__name__ + '\\n')\n",
            marker.to_str().unwrap()
        );
        for m in ["sysconfig.py", "site.py", "os.py"] {
            std::fs::write(d.join(m), &body).unwrap();
        }
        let clean = scratch("clean");
        let expected = site_dirs_in(&path, TIMEOUT, Some(&clean));
        let got = site_dirs_in(&path, TIMEOUT, Some(&d));
        assert!(
            !marker.exists(),
            "the hostile module ran: {:?}",
            std::fs::read_to_string(&marker)
        );
        assert_eq!(got, expected);
        assert!(!got.is_empty(), "{} printed no site folder", py.display());
        // Control: without -I, `import sysconfig` from that folder runs it.
        let st = Command::new(&py)
            .args(["-c", "import sysconfig"])
            .current_dir(&d)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success());
        assert!(
            std::fs::read_to_string(&marker).is_ok_and(|t| t.contains("sysconfig")),
            "control: the hostile sysconfig.py was not imported without -I"
        );
        std::fs::remove_dir_all(&d).unwrap();
        std::fs::remove_dir_all(&clean).unwrap();
    }

    #[test]
    fn empty_and_relative_path_entries_never_run_a_local_python() {
        // A `python3` in the current folder would be found through an empty
        // entry (`PATH=":/usr/bin"`) or `.`: neither is searched.
        let path = OsStr::new(":.:relative/bin");
        assert_eq!(find_python(path), None);
    }

    /// The real interpreter, where one is on PATH: every folder it names is
    /// absolute, and for a python3 under /usr its purelib is among them.
    #[test]
    fn the_real_interpreter_if_any() {
        let _serial = serial();
        let Some(path) = std::env::var_os("PATH") else {
            eprintln!("skipped: no PATH");
            return;
        };
        let Some(py) = find_python(&path) else {
            eprintln!("skipped: no python3 on PATH");
            return;
        };
        let dirs = site_dirs(&path, TIMEOUT);
        eprintln!("{}: {dirs:?}", py.display());
        assert!(dirs.iter().all(|d| d.is_absolute()));
        assert!(!dirs.is_empty(), "{} printed no site folder", py.display());
    }
}
