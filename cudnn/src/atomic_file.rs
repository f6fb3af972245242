//! Replacing a file whole, for the caches' `save`: the text goes to a new
//! temporary file beside it (never an existing file or a link: `create_new`),
//! is synced, renamed over the target, and the folder is synced so that the
//! rename itself survives a crash. A reader sees the old file or the new one,
//! never a part.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A step of [`replace`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Writing and syncing the temporary file.
    Write,
    /// Renaming it over the target.
    Rename,
    /// Syncing the target's folder.
    SyncFolder,
}

impl Step {
    /// The step in words, before a path: "writing", "renaming into", "syncing the folder of".
    pub(crate) fn words(self) -> &'static str {
        match self {
            Step::Write => "writing",
            Step::Rename => "renaming into",
            Step::SyncFolder => "syncing the folder of",
        }
    }
}

/// Which step failed, on which path.
#[derive(Debug)]
pub(crate) struct ReplaceError {
    pub step: Step,
    /// The temporary file (writing) or the target (the other steps).
    pub path: PathBuf,
    pub source: std::io::Error,
}

/// Replace `path` with `bytes`. The temporary file is removed on failure.
pub(crate) fn replace(path: &Path, bytes: &[u8]) -> Result<(), ReplaceError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let tmp = path.with_file_name(format!(
        ".{}.tmp-{}-{}",
        name.as_deref().unwrap_or("file"),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()
    };
    if let Err(source) = write() {
        let _ = std::fs::remove_file(&tmp);
        return Err(ReplaceError {
            step: Step::Write,
            path: tmp,
            source,
        });
    }
    if let Err(source) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(ReplaceError {
            step: Step::Rename,
            path: path.to_path_buf(),
            source,
        });
    }
    sync_folder(path).map_err(|source| ReplaceError {
        step: Step::SyncFolder,
        path: path.to_path_buf(),
        source,
    })
}

/// Sync the folder holding `path` (its entry for the renamed file). A
/// folder this process cannot open for reading, or a file system that does
/// not sync folders, is not an error: the file itself is already in place.
pub(crate) fn sync_folder(path: &Path) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let f = match std::fs::File::open(dir) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => return Ok(()),
        Err(e) => return Err(e),
    };
    match f.sync_all() {
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::InvalidInput | std::io::ErrorKind::Unsupported
            ) =>
        {
            Ok(())
        }
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "cudnn-rs-atomic-{tag}-{}-{}",
            std::process::id(),
            COUNTER_T.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
    static COUNTER_T: AtomicU64 = AtomicU64::new(0);

    fn entries(d: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn unit_replace_writes_and_replaces_leaving_no_temporary() {
        let d = folder("ok");
        let p = d.join("cache.txt");
        replace(&p, b"first").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"first");
        replace(&p, b"second, longer").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"second, longer");
        assert_eq!(entries(&d), vec!["cache.txt".to_string()]);
        // A bare file name (the current folder's) has a folder to sync too.
        assert!(sync_folder(Path::new("cache.txt")).is_ok());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn unit_replace_into_a_missing_folder_names_the_step() {
        let d = folder("missing");
        let p = d.join("no").join("such").join("cache.txt");
        let e = replace(&p, b"x").unwrap_err();
        assert_eq!(e.step, Step::Write);
        assert_eq!(e.source.kind(), std::io::ErrorKind::NotFound);
        assert_eq!(entries(&d), Vec::<String>::new());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn unit_replace_over_a_folder_fails_and_cleans_up() {
        // The target is a non-empty folder: the rename fails, the temporary
        // file goes, the folder stays.
        let d = folder("dir");
        let p = d.join("taken");
        std::fs::create_dir(&p).unwrap();
        std::fs::write(p.join("inside"), b"keep").unwrap();
        let e = replace(&p, b"x").unwrap_err();
        assert_eq!(e.step, Step::Rename);
        assert_eq!(entries(&d), vec!["taken".to_string()]);
        assert_eq!(std::fs::read(p.join("inside")).unwrap(), b"keep");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
