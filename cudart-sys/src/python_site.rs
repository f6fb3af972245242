//! The `site-packages` folders of the Python on `PATH`, as the interpreter
//! itself reports them: a pyenv's, a framework install's or the system
//! Python's own folders, which no fixed pattern finds.
//!
//! The interpreter is asked once per process, only when the places before
//! it in the search order found nothing (see `loader::load_with`), with a
//! deadline; a missing, failing or slow interpreter adds nothing and never
//! fails a load.

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long the interpreter may take to answer.
pub const TIMEOUT: Duration = Duration::from_secs(3);

/// The most output read from it.
const MAX_OUTPUT: u64 = 64 << 10;

/// What the interpreter runs: `sysconfig`'s purelib and platlib, `site`'s
/// global site folders and the user site, one per line. Each part may be
/// missing in an unusual interpreter (an old virtualenv's `site`).
const SCRIPT: &str = "import site, sysconfig
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
try:
    if site.ENABLE_USER_SITE:
        out.append(site.getusersitepackages())
except Exception:
    pass
print('\\n'.join(x for x in out if x))
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
    let Some(python) = find_python(path) else {
        return Vec::new();
    };
    let mut child = match Command::new(&python)
        .args(["-c", SCRIPT])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(c) => c,
        Err(_) => return Vec::new(),
    };
    // Read on a thread, so a full pipe cannot keep the child from exiting.
    let (tx, rx) = std::sync::mpsc::channel();
    if let Some(out) = child.stdout.take() {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = out.take(MAX_OUTPUT).read_to_string(&mut text);
            let _ = tx.send(text);
        });
    }
    let deadline = Instant::now() + timeout;
    let ok = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status.success(),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break false;
            }
        }
    };
    // The child has exited: its end of the pipe is closed unless a process
    // it started holds it, so the wait for the text has the same deadline.
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(100));
    let text = if ok {
        rx.recv_timeout(left).unwrap_or_default()
    } else {
        String::new()
    };
    let mut dirs: Vec<PathBuf> = Vec::new();
    for line in text.lines() {
        let p = PathBuf::from(line.trim_end_matches('\r'));
        if p.is_absolute() && !dirs.contains(&p) {
            dirs.push(p);
        }
    }
    dirs
}

/// [`site_dirs`] of the process's `PATH`, asked once per process.
pub fn process_site_dirs() -> &'static [PathBuf] {
    static DIRS: std::sync::OnceLock<Vec<PathBuf>> = std::sync::OnceLock::new();
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
