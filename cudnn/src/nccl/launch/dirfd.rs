//! A folder opened once and worked in through its descriptor (`openat`,
//! `unlinkat`, `fstatat`, `mkdirat`), so that nothing done in it can be
//! redirected by renaming the folder or putting a symbolic link in its place
//! afterwards: the file rendezvous's private folder, and the folder of its
//! id file. Names are single path components this module checks.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// An open folder, and its path for messages only.
#[derive(Debug)]
pub(crate) struct Dir {
    fd: OwnedFd,
    shown: PathBuf,
}

/// What `fstat` says about a file or folder that matters here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Meta {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) uid: u32,
    pub(crate) mode: u32,
    pub(crate) size: u64,
}

// The field types of `stat` and the mode constants differ across Unix
// systems (and architectures): the casts are needed somewhere.
#[allow(clippy::unnecessary_cast)]
impl Meta {
    fn of(st: &libc::stat) -> Self {
        Meta {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
            uid: st.st_uid,
            mode: st.st_mode as u32,
            size: u64::try_from(st.st_size).unwrap_or(0),
        }
    }

    pub(crate) fn is_dir(&self) -> bool {
        self.mode & (libc::S_IFMT as u32) == libc::S_IFDIR as u32
    }

    pub(crate) fn is_symlink(&self) -> bool {
        self.mode & (libc::S_IFMT as u32) == libc::S_IFLNK as u32
    }

    /// Whether both name the same file.
    pub(crate) fn same(&self, other: &Meta) -> bool {
        self.dev == other.dev && self.ino == other.ino
    }
}

/// A name as a C string: one path component, no NUL.
fn component(name: &str) -> io::Result<CString> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a file name"),
        ));
    }
    CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in a name"))
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn open_dir_at(at: libc::c_int, path: &CString, nofollow: bool) -> io::Result<OwnedFd> {
    let mut flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    if nofollow {
        flags |= libc::O_NOFOLLOW;
    }
    // SAFETY: `path` is NUL-terminated; `at` is a folder descriptor or
    // AT_FDCWD; the result is a new descriptor we own.
    let fd = cvt(unsafe { libc::openat(at, path.as_ptr(), flags) })?;
    // SAFETY: `fd` was just opened and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl Dir {
    /// Open the folder `path` (following symbolic links: the caller's own
    /// path); `.` for an empty one.
    pub(crate) fn open(path: &Path) -> io::Result<Dir> {
        let p = if path.as_os_str().is_empty() {
            Path::new(".")
        } else {
            path
        };
        let c = CString::new(p.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in a path"))?;
        Ok(Dir {
            fd: open_dir_at(libc::AT_FDCWD, &c, false)?,
            shown: p.to_path_buf(),
        })
    }

    /// The folder `name` in this one, never through a symbolic link
    /// (`O_DIRECTORY | O_NOFOLLOW`).
    pub(crate) fn open_dir(&self, name: &str) -> io::Result<Dir> {
        let c = component(name)?;
        Ok(Dir {
            fd: open_dir_at(self.fd.as_raw_fd(), &c, true)?,
            shown: self.shown.join(name),
        })
    }

    /// The path of `name` in this folder, for messages.
    pub(crate) fn show(&self, name: &str) -> PathBuf {
        self.shown.join(name)
    }

    /// The path of this folder, for messages.
    pub(crate) fn shown(&self) -> &Path {
        &self.shown
    }

    /// This folder itself (`fstat`).
    pub(crate) fn meta(&self) -> io::Result<Meta> {
        // SAFETY: an all-zero `stat` is a valid value to be overwritten.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is open; `st` is a valid out-pointer.
        cvt(unsafe { libc::fstat(self.fd.as_raw_fd(), &mut st) })?;
        Ok(Meta::of(&st))
    }

    /// `name` in this folder, not following a symbolic link (`fstatat`);
    /// `None` when missing.
    pub(crate) fn meta_at(&self, name: &str) -> io::Result<Option<Meta>> {
        let c = component(name)?;
        // SAFETY: an all-zero `stat` is a valid value to be overwritten.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is open, `c` NUL-terminated, `st` a valid out-pointer.
        let r = unsafe {
            libc::fstatat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        match cvt(r) {
            Ok(_) => Ok(Some(Meta::of(&st))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Open `name` for reading without following a symbolic link, blocking
    /// on a FIFO or taking a terminal.
    pub(crate) fn open_read(&self, name: &str) -> io::Result<File> {
        let c = component(name)?;
        let flags =
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_NOCTTY | libc::O_CLOEXEC;
        // SAFETY: `fd` is open and `c` NUL-terminated; the result is a new
        // descriptor we own.
        let fd = cvt(unsafe { libc::openat(self.fd.as_raw_fd(), c.as_ptr(), flags) })?;
        // SAFETY: just opened, owned by nothing else.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// Create `name` exclusively (mode 0600, never through a symbolic
    /// link) holding `text`; what was created is returned.
    pub(crate) fn create(&self, name: &str, text: &str) -> io::Result<Meta> {
        let c = component(name)?;
        let flags =
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: `fd` is open and `c` NUL-terminated; the mode is passed as
        // the variadic argument O_CREAT needs.
        let fd = cvt(unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                flags,
                0o600 as libc::c_uint,
            )
        })?;
        // SAFETY: just opened, owned by nothing else.
        let mut f = unsafe { File::from_raw_fd(fd) };
        // SAFETY: an all-zero `stat` is a valid value to be overwritten.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `f` is open; `st` a valid out-pointer.
        let meta = cvt(unsafe { libc::fstat(f.as_raw_fd(), &mut st) }).map(|_| Meta::of(&st));
        let written = f.write_all(text.as_bytes()).and(meta);
        if written.is_err() {
            // Half a file helps nobody (a full disk, a quota).
            self.remove(name);
        }
        written
    }

    /// Remove the file `name` from this folder (missing is fine).
    pub(crate) fn remove(&self, name: &str) {
        if let Ok(c) = component(name) {
            // SAFETY: `fd` is open and `c` NUL-terminated; unlinkat never
            // follows a symbolic link (it removes the link itself).
            let _ = unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) };
        }
    }

    /// Remove the file `name` only while it is still `was` (a file put in
    /// its place meanwhile is left alone).
    pub(crate) fn remove_if(&self, name: &str, was: &Meta) {
        if self
            .meta_at(name)
            .ok()
            .flatten()
            .is_some_and(|m| m.same(was))
        {
            self.remove(name);
        }
    }

    /// Create the folder `name` (mode 0700, exclusively).
    pub(crate) fn mkdir(&self, name: &str) -> io::Result<()> {
        let c = component(name)?;
        // SAFETY: `fd` is open and `c` NUL-terminated.
        cvt(unsafe { libc::mkdirat(self.fd.as_raw_fd(), c.as_ptr(), 0o700) }).map(|_| ())
    }

    /// Remove the empty folder `name` only while it is still `was`.
    pub(crate) fn rmdir_if(&self, name: &str, was: &Meta) {
        if self
            .meta_at(name)
            .ok()
            .flatten()
            .is_some_and(|m| m.same(was))
            && let Ok(c) = component(name)
        {
            // SAFETY: `fd` is open and `c` NUL-terminated; AT_REMOVEDIR
            // removes only an empty folder.
            let _ = unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), libc::AT_REMOVEDIR) };
        }
    }

    /// The names in this folder (not `.` and `..`), read through the
    /// descriptor.
    pub(crate) fn list(&self) -> io::Result<Vec<String>> {
        // A fresh descriptor of the same folder for the listing (closedir
        // closes it), read from the start.
        let dot = component_dot();
        let fd = open_dir_at(self.fd.as_raw_fd(), &dot, true)?;
        let raw = std::os::fd::IntoRawFd::into_raw_fd(fd);
        // SAFETY: `raw` is an open folder descriptor whose ownership passes
        // to the stream (closed by closedir below).
        let d = unsafe { libc::fdopendir(raw) };
        if d.is_null() {
            let e = io::Error::last_os_error();
            // SAFETY: fdopendir failed, so `raw` is still ours to close.
            unsafe { libc::close(raw) };
            return Err(e);
        }
        let mut out = Vec::new();
        loop {
            // SAFETY: `d` is an open stream; the entry stays valid until
            // the next readdir on it, and is copied at once.
            let e = unsafe { libc::readdir(d) };
            if e.is_null() {
                break;
            }
            // SAFETY: readdir returned a valid entry whose d_name is
            // NUL-terminated.
            let name = unsafe { std::ffi::CStr::from_ptr((*e).d_name.as_ptr()) };
            let name = OsStr::from_bytes(name.to_bytes());
            if let Some(s) = name.to_str()
                && s != "."
                && s != ".."
            {
                out.push(s.to_string());
            }
        }
        // SAFETY: `d` is open and closed once.
        unsafe { libc::closedir(d) };
        Ok(out)
    }
}

fn component_dot() -> CString {
    CString::from(c".")
}
