//! Authenticated plan files: which compiled code a safe loader may hand to
//! cuDNN.
//!
//! A runtime-compiled plan carries kernel binaries that cuDNN loads and the
//! GPU runs with the buffers bound to the plan; no check can tell what such
//! a kernel reads or writes. So the safe loaders accept compiled code only
//! from a file the program can prove it wrote: the crate appends to the plan
//! files and plan-cache files it writes a tag, an HMAC-SHA256 under a
//! [`PlanKey`] the program holds, over the whole file before the tag. A file
//! without a tag loads only its plans without compiled code (every plan is
//! still checked against its tensor list); a file whose tag does not verify
//! under the key (another key's, or changed since) is refused whole.
//! Anything else goes through the `unsafe` `*_unverified` loaders, whose
//! caller vouches for the file.
//!
//! The tag is the file's last line, `hmac-sha256 <64 hex digits>`. Its input
//! is framed so that a tag made for one purpose validates nothing else: a
//! fixed label with the framing's version, the kind of file (a single plan
//! or a plan cache), the length of the text, then the text itself, header
//! included: everything that reaches cuDNN is covered.

use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::error::{Error, Result};

/// The start of the name of the key file [`PlanKey::load_or_create`] keeps
/// in a folder: `cudnn-rs-plan-<uid>.key`, one per user (see
/// [`PlanKey::key_file`]).
pub const KEY_FILE_PREFIX: &str = "cudnn-rs-plan-";

/// The shortest key [`PlanKey::from_bytes`] takes: 32 bytes, the output
/// length of SHA-256 (RFC 2104, section 3, discourages shorter HMAC keys).
pub const MIN_KEY_BYTES: usize = 32;

/// The longest key [`PlanKey::from_bytes`] takes.
pub const MAX_KEY_BYTES: usize = 1024;

/// Bytes of a generated key (and of a key file).
const KEY_BYTES: usize = 32;

/// The label every tag's input starts with: what it authenticates, and the
/// version of this framing.
const DOMAIN: &[u8] = b"cudnn-rs plan file authentication, HMAC-SHA256 framing v1\n";

/// The tag line's prefix.
const TRAILER: &str = "hmac-sha256 ";

/// The secret that vouches for plan files: the program that holds it wrote
/// every file whose tag verifies under it.
///
/// Get one from [`generate`](Self::generate) (safe: for files that live
/// only as long as the process), or, `unsafe` because the crate cannot
/// tell who else knows the bytes, from [`load_or_create`](Self::load_or_create)
/// (the user's own key file in the cache's folder; [`load`](Self::load)
/// reads it without ever creating one) or [`from_bytes`](Self::from_bytes)
/// (a secret the program keeps elsewhere).
///
/// **Whoever holds the key can make files the safe loaders run as code.**
/// Keep it as private as the program's own executable: do not share it with
/// another party, and do not tag files by other means than this crate's
/// writers ([`Plan::serialize_signed`](super::Plan::serialize_signed),
/// [`PlanCache::save`](super::PlanCache::save)); doing either is the same as
/// calling the `unsafe` loaders on those files.
///
/// ```no_run
/// use cudnn::graph::{PlanCache, PlanKey, Target, Trust};
/// let dir = std::path::Path::new("plan-cache");
/// let file = dir.join("plans.txt");
/// // SAFETY: the folder is this program's; only `load_or_create` writes
/// // its key file (dir/cudnn-rs-plan-<uid>.key, 0600).
/// let key = unsafe { PlanKey::load_or_create(dir) }?;
/// let target = Target::preset("h200")?;
/// let cache = PlanCache::new(64);
/// if file.exists() {
///     // Every entry this program saved, runtime-compiled plans included.
///     let report = cache.load(&file, &target, Trust::SignedBy(&key))?;
///     println!("{report}");
/// }
/// // ... cache.get_or_build(&graph, &target, &policy)? ...
/// cache.save(&file, &key)?;
/// # Ok::<(), cudnn::Error>(())
/// ```
#[derive(Clone)]
pub struct PlanKey {
    bytes: Vec<u8>,
}

impl std::fmt::Debug for PlanKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PlanKey({} secret bytes)", self.bytes.len())
    }
}

impl PlanKey {
    /// A key from the caller's secret bytes (at least [`MIN_KEY_BYTES`], at
    /// most [`MAX_KEY_BYTES`]), for a key kept elsewhere than a key file (a
    /// secret store, a system without Unix permissions).
    ///
    /// # Safety
    /// Whoever knows the bytes can tag any file, and the safe loaders
    /// ([`Trust::SignedBy`]) then hand its compiled kernels to cuDNN, which
    /// run on the bound buffers: so the bytes must be a secret (random, and
    /// known only to programs trusted as this one is), and files must be
    /// tagged with them only by this crate's writers
    /// ([`Plan::serialize_signed`](super::Plan::serialize_signed),
    /// [`PlanCache::save`](super::PlanCache::save)). Making a key from known
    /// bytes, or tagging by other means, is calling the `unsafe` loaders on
    /// those files. ([`generate`](Self::generate) and the key files of
    /// [`load_or_create`](Self::load_or_create) are safe: their bytes come
    /// from the operating system's random source and never leave the
    /// crate.)
    ///
    /// # Errors
    /// A length out of range (`InvalidArgument`, naming it).
    pub unsafe fn from_bytes(bytes: &[u8]) -> Result<Self> {
        if !(MIN_KEY_BYTES..=MAX_KEY_BYTES).contains(&bytes.len()) {
            return Err(Error::invalid(
                "plan key bytes",
                format!("must be {MIN_KEY_BYTES} to {MAX_KEY_BYTES} bytes long"),
                format!("{} bytes", bytes.len()),
            ));
        }
        Ok(Self {
            bytes: bytes.to_vec(),
        })
    }

    /// A fresh random key of 32 bytes from the operating system.
    ///
    /// # Errors
    /// The operating system's random source failing.
    pub fn generate() -> Result<Self> {
        Ok(Self {
            bytes: random_key()?.to_vec(),
        })
    }

    /// The running user's key in `folder` (the folder of a plan cache): the
    /// file [`key_file`](Self::key_file) names there (one per user, so users
    /// sharing a folder each keep their own), created when missing with 32
    /// random bytes from the operating system, readable and writable by the
    /// user only (mode 0600, set and checked on the new file, whatever the
    /// umask; created whole, never through an existing file or link, and two
    /// processes creating it at once agree on one key).
    ///
    /// An existing key file is refused (`InvalidArgument` naming its path and
    /// what is wrong) when it is a symbolic link or not a regular file, has
    /// more than one name (hard links), is owned by another user, can be
    /// read or written by the group or others, or does not hold exactly 32
    /// bytes: a key others can read lets them make files this program runs
    /// as code. Keep the folder itself private where other users can write
    /// to it (a shared temporary folder is not a place for keys).
    ///
    /// # Errors
    /// As above; the folder missing or unwritable (`Io`, naming the path);
    /// a new key file that does not end up private (a file system without
    /// Unix modes: `InvalidArgument`, naming it; nothing is left behind);
    /// on a system without Unix permissions, `Unsupported` (use
    /// [`from_bytes`](Self::from_bytes)).
    ///
    /// # Safety
    /// The key file in `folder` is written only by this function and read
    /// only by programs trusted as this one is. Whoever knows the key's
    /// bytes can tag any file, and the safe loaders ([`Trust::SignedBy`])
    /// then hand its compiled kernels to cuDNN, which run on the bound
    /// buffers. The checks above keep other users out; a key file the
    /// program (or another of the same user) wrote itself, with bytes it
    /// knows, passes them, and the crate cannot tell it from one it made.
    /// (For files that live only as long as the process,
    /// [`generate`](Self::generate) is the safe key: its bytes never leave
    /// the crate.)
    pub unsafe fn load_or_create(folder: &Path) -> Result<Self> {
        let path = Self::key_file(folder);
        key_file::load_or_create(&path).map(|bytes| Self { bytes })
    }

    /// The running user's existing key in `folder`, with the checks of
    /// [`load_or_create`](Self::load_or_create); `None` if there is no key
    /// file. Never creates anything (for a reader of plan files, which may
    /// be in a read-only folder: without a key, load with
    /// [`Trust::NoCompiledCode`]).
    ///
    /// # Errors
    /// As [`load_or_create`](Self::load_or_create), but for creating.
    ///
    /// # Safety
    /// As [`load_or_create`](Self::load_or_create): the key file was made
    /// by it and nothing else writes it.
    pub unsafe fn load(folder: &Path) -> Result<Option<Self>> {
        let path = Self::key_file(folder);
        key_file::load(&path).map(|k| k.map(|bytes| Self { bytes }))
    }

    /// The path of the running user's key file in `folder`:
    /// `folder/cudnn-rs-plan-<uid>.key` (the effective uid; without Unix
    /// users, `folder/cudnn-rs-plan-0.key`).
    pub fn key_file(folder: &Path) -> std::path::PathBuf {
        #[cfg(unix)]
        // SAFETY: geteuid takes no arguments, touches no memory and cannot fail.
        let uid = unsafe { libc::geteuid() };
        #[cfg(not(unix))]
        let uid = 0u32;
        folder.join(format!("{KEY_FILE_PREFIX}{uid}.key"))
    }

    fn mac(&self, kind: FileKind, body: &[u8]) -> Option<Hmac<Sha256>> {
        framed_mac(&self.bytes, kind, body)
    }
}

/// Which compiled code a plan loader accepts: the explicit choice every safe
/// loader of plan files takes ([`Plan::deserialize`](super::Plan::deserialize),
/// [`PlanCache::load`](super::PlanCache::load),
/// [`PlanCache::load_text`](super::PlanCache::load_text)).
///
/// Plans without compiled code load under either choice, each checked
/// against its tensor list. Loading compiled code from a file no key vouches
/// for is the `unsafe` `*_unverified` loaders' job.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum Trust<'k> {
    /// No compiled code: a runtime-compiled plan is refused (a single plan)
    /// or skipped and reported (a plan cache). Tags are not checked.
    NoCompiledCode,
    /// Compiled code only from a file whose tag verifies under this key (a
    /// file this program saved with it). A file with a tag that does not
    /// verify (another key's, or changed since it was signed) is refused
    /// whole (`InvalidArgument`); a file without a tag loads as under
    /// [`NoCompiledCode`](Self::NoCompiledCode).
    SignedBy(&'k PlanKey),
}

/// What a loader found out about a file's tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Authentication {
    /// Not checked: the load took no key ([`Trust::NoCompiledCode`]).
    NotChecked,
    /// The file's tag verifies under the key: its compiled code was loaded.
    Verified,
    /// The file carries no tag (written unsigned, or by another program).
    Missing,
    /// The file's tag does not verify under the key (made with another key,
    /// or the file was changed after it was written). The safe loaders
    /// refuse such a file, so no load report carries this value.
    Invalid,
    /// Loaded by an `unsafe` `*_unverified` loader: its caller vouched for
    /// the file, and no tag was checked.
    Vouched,
}

impl Authentication {
    /// Whether compiled code from the file may be loaded.
    pub(crate) fn allows_compiled_code(self) -> bool {
        matches!(self, Authentication::Verified | Authentication::Vouched)
    }
}

impl std::fmt::Display for Authentication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Authentication::NotChecked => "the load took no key",
            Authentication::Verified => "its tag verifies under the key",
            Authentication::Missing => "the file carries no tag",
            Authentication::Invalid => {
                "the file's tag does not verify under the key (another key, or the file was changed)"
            }
            Authentication::Vouched => "the caller vouched for the file (an unverified load)",
        })
    }
}

/// The kind of file a tag is made for (part of the tag's input, so a tag
/// over one kind of file validates no other).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FileKind {
    /// A single plan (`Plan::serialize_signed`).
    Plan,
    /// A plan cache (`PlanCache::save`).
    PlanCache,
}

impl FileKind {
    fn label(self) -> &'static [u8] {
        match self {
            FileKind::Plan => b"kind: plan\n",
            FileKind::PlanCache => b"kind: plan cache\n",
        }
    }
}

/// The HMAC of `body` as a file of `kind`, under the raw `key`: the domain
/// label, the kind, the body's length (8 bytes, big-endian) and the body.
/// `None` only if the MAC refuses the key (HMAC takes every length).
fn framed_mac(key: &[u8], kind: FileKind, body: &[u8]) -> Option<Hmac<Sha256>> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).ok()?;
    m.update(DOMAIN);
    m.update(kind.label());
    m.update(&(body.len() as u64).to_be_bytes());
    m.update(body);
    Some(m)
}

/// `body` with its tag line appended (a newline first if `body` lacks one).
///
/// # Errors
/// The MAC refusing the key (never for the keys [`PlanKey`] holds).
pub(crate) fn sign(key: &PlanKey, kind: FileKind, mut body: String) -> Result<String> {
    if !body.ends_with('\n') {
        body.push('\n');
    }
    let tag = key
        .mac(kind, body.as_bytes())
        .ok_or_else(|| Error::invalid("plan key", "must be usable as an HMAC key", "refused"))?
        .finalize()
        .into_bytes();
    body.push_str(TRAILER);
    for b in tag {
        body.push_str(&format!("{b:02x}"));
    }
    body.push('\n');
    Ok(body)
}

/// The refusal of a file whose tag is present but does not verify under the
/// load's key: `what` names the file.
pub(crate) fn tag_refused(what: &str) -> Error {
    Error::invalid(
        what,
        "its tag must verify under the key of `Trust::SignedBy` (a file this \
         program signed with that key); a file whose tag does not verify is \
         refused whole",
        "a tag that does not verify: made with another key, or the file was \
         changed after it was signed",
    )
}

/// The text before the tag line, and the tag line's value, if the text ends
/// with one (a last line starting `hmac-sha256 `).
pub(crate) fn split(text: &str) -> (&str, Option<&str>) {
    let Some(without_nl) = text.strip_suffix('\n') else {
        return (text, None);
    };
    let start = without_nl.rfind('\n').map_or(0, |i| i + 1);
    match without_nl[start..].strip_prefix(TRAILER) {
        Some(tag) => (&text[..start], Some(tag)),
        None => (text, None),
    }
}

/// The text a loader parses (without the tag line) and what its tag says
/// under `key` (none: [`Authentication::NotChecked`]). The comparison is
/// constant-time.
pub(crate) fn check<'t>(
    text: &'t str,
    kind: FileKind,
    key: Option<&PlanKey>,
) -> (&'t str, Authentication) {
    let (body, tag) = split(text);
    let Some(key) = key else {
        return (body, Authentication::NotChecked);
    };
    let Some(tag) = tag else {
        return (body, Authentication::Missing);
    };
    let verified = decode_hex(tag).is_some_and(|t| {
        key.mac(kind, body.as_bytes())
            .is_some_and(|m| m.verify_slice(&t).is_ok())
    });
    let auth = if verified {
        Authentication::Verified
    } else {
        Authentication::Invalid
    };
    (body, auth)
}

/// 64 hex digits as 32 bytes.
fn decode_hex(s: &str) -> Option<[u8; 32]> {
    let b = s.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in b.chunks_exact(2).enumerate() {
        let hi = (pair[0] as char).to_digit(16)?;
        let lo = (pair[1] as char).to_digit(16)?;
        out[i] = u8::try_from(hi * 16 + lo).ok()?;
    }
    Some(out)
}

fn random_key() -> Result<[u8; KEY_BYTES]> {
    let mut k = [0u8; KEY_BYTES];
    getrandom::fill(&mut k).map_err(|e| Error::Unsupported {
        what: format!("drawing a plan key from the operating system's random source: {e}"),
        needs: Some("a working random source (getrandom)".to_string()),
    })?;
    Ok(k)
}

#[cfg(unix)]
mod key_file {
    use std::io::{Read, Write};
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::{KEY_BYTES, random_key};
    use crate::error::{Error, Result};

    fn refuse(path: &Path, rule: impl Into<String>, value: impl std::fmt::Display) -> Error {
        Error::invalid(format!("plan key file {}", path.display()), rule, value)
    }

    pub(super) fn load_or_create(path: &Path) -> Result<Vec<u8>> {
        // Read; if missing, create; if another process created it first,
        // read theirs.
        for _ in 0..2 {
            if let Some(k) = read(path)? {
                return Ok(k);
            }
            if let Some(k) = create(path)? {
                return Ok(k);
            }
        }
        Err(Error::Io {
            op: "reading the plan key file".to_string(),
            path: path.to_path_buf(),
            kind: std::io::ErrorKind::NotFound,
            detail: "it was created and removed again by another process".to_string(),
        })
    }

    pub(super) fn load(path: &Path) -> Result<Option<Vec<u8>>> {
        read(path)
    }

    /// A key file's metadata against the rules: a regular file of the
    /// running user, private, one name, `KEY_BYTES` long.
    fn check(path: &Path, m: &std::fs::Metadata) -> Result<()> {
        if !m.file_type().is_file() {
            return Err(refuse(
                path,
                "must be a regular file",
                "another kind of file",
            ));
        }
        // SAFETY: geteuid takes no arguments, touches no memory and cannot fail.
        let me = unsafe { libc::geteuid() };
        if m.uid() != me {
            return Err(refuse(
                path,
                format!("must be owned by the user running the program (uid {me})"),
                format!("owned by uid {}", m.uid()),
            ));
        }
        if m.mode() & 0o077 != 0 {
            return Err(refuse(
                path,
                "must be readable and writable by its owner only (mode 0600)",
                format!("mode {:04o}", m.mode() & 0o7777),
            ));
        }
        if m.nlink() != 1 {
            return Err(refuse(
                path,
                "must have exactly one name (no hard links)",
                format!("{} names", m.nlink()),
            ));
        }
        if m.len() != KEY_BYTES as u64 {
            return Err(refuse(
                path,
                format!("must hold exactly {KEY_BYTES} bytes"),
                format!("{} bytes", m.len()),
            ));
        }
        Ok(())
    }

    /// The key in the existing file at `path`, checked; `None` if there is none.
    fn read(path: &Path) -> Result<Option<Vec<u8>>> {
        match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io("reading the plan key file", path, &e)),
            Ok(m) if m.file_type().is_symlink() => {
                return Err(refuse(
                    path,
                    "must not be a symbolic link",
                    "a symbolic link",
                ));
            }
            Ok(_) => {}
        }
        // No link followed (one swapped in since is refused with ELOOP), and
        // a FIFO put there does not block the open.
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path);
        let mut f = match f {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(refuse(
                    path,
                    "must not be a symbolic link",
                    "a symbolic link",
                ));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io("opening the plan key file", path, &e)),
        };
        let meta = |f: &std::fs::File| {
            f.metadata()
                .map_err(|e| Error::io("reading the plan key file's metadata", path, &e))
        };
        let mut m = meta(&f)?;
        // A key file another process is creating has two names for the
        // moment between its link into place and the removal of its
        // temporary name: wait for that, boundedly (about 100 ms).
        for _ in 0..100 {
            if m.nlink() != 2 || !m.file_type().is_file() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
            m = meta(&f)?;
        }
        check(path, &m)?;
        let mut k = vec![0u8; KEY_BYTES];
        f.read_exact(&mut k)
            .map_err(|e| Error::io("reading the plan key file", path, &e))?;
        Ok(Some(k))
    }

    /// Create the key file at `path` whole: a new temporary file (no link
    /// followed), set to 0600 whatever the umask and checked as a reader
    /// checks it, written and synced, then hard-linked to `path`, which fails
    /// if anything is there. `None` if another process was first. Removes
    /// only the temporary file this call created.
    fn create(path: &Path) -> Result<Option<Vec<u8>>> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let key = random_key()?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp: PathBuf = path.with_file_name(format!(
            ".{name}.tmp-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            // Nothing was created: nothing to remove (a file already at
            // `tmp` is not this call's).
            .map_err(|e| Error::io("creating the plan key file", &tmp, &e))?;
        // From here `tmp` is this call's own file: removed on every failure.
        let made = (|| -> Result<()> {
            let io = |e: std::io::Error| Error::io("creating the plan key file", &tmp, &e);
            f.set_permissions(std::fs::Permissions::from_mode(0o600))
                .map_err(io)?;
            f.write_all(&key).map_err(io)?;
            f.sync_all().map_err(io)?;
            // What every later reader will check, on what was made.
            let m = f.metadata().map_err(io)?;
            check(&tmp, &m)
        })();
        drop(f);
        if let Err(e) = made {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        let linked = std::fs::hard_link(&tmp, path);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => {
                // The key is in place; a folder that cannot be synced only
                // risks losing it in a crash (then a new one is made).
                let _ = crate::atomic_file::sync_folder(path);
                Ok(Some(key.to_vec()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(None),
            Err(e) => Err(Error::io("creating the plan key file", path, &e)),
        }
    }
}

#[cfg(not(unix))]
mod key_file {
    use std::path::Path;

    use crate::error::{Error, Result};

    pub(super) fn load_or_create(path: &Path) -> Result<Vec<u8>> {
        Err(Error::Unsupported {
            what: format!(
                "a plan key file ({}) needs Unix permissions to be kept private",
                path.display()
            ),
            needs: Some("`PlanKey::from_bytes` (unsafe) with a secret kept elsewhere".to_string()),
        })
    }

    pub(super) fn load(path: &Path) -> Result<Option<Vec<u8>>> {
        load_or_create(path).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn unit_hmac_wiring_matches_rfc4231_case_2() {
        // RFC 4231, test case 2: key "Jefe", data "what do ya want for nothing?".
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(b"Jefe").unwrap();
        m.update(b"what do ya want for nothing?");
        assert_eq!(
            hex(&m.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn unit_framing_is_label_kind_length_body() {
        // The framed MAC equals a plain HMAC over the input written out by
        // hand: the tag commits to the label, the kind and the length.
        let key = [0x0bu8; 20];
        let mut input = Vec::new();
        input.extend_from_slice(b"cudnn-rs plan file authentication, HMAC-SHA256 framing v1\n");
        input.extend_from_slice(b"kind: plan cache\n");
        input.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 3]);
        input.extend_from_slice(b"ab\n");
        let mut plain = <Hmac<Sha256> as Mac>::new_from_slice(&key).unwrap();
        plain.update(&input);
        let framed = framed_mac(&key, FileKind::PlanCache, b"ab\n").unwrap();
        assert_eq!(
            framed.finalize().into_bytes(),
            plain.finalize().into_bytes()
        );
    }

    #[test]
    fn unit_sign_then_check_verifies_and_strips_the_tag() {
        // SAFETY: a test key: it tags only files this test writes.
        let k = unsafe { PlanKey::from_bytes(&[7u8; 32]) }.unwrap();
        let signed = sign(&k, FileKind::Plan, "cudnn-rs plan v2\nx\n".into()).unwrap();
        let (body, tag) = split(&signed);
        assert_eq!(body, "cudnn-rs plan v2\nx\n");
        assert_eq!(tag.map(str::len), Some(64));
        assert_eq!(
            check(&signed, FileKind::Plan, Some(&k)),
            ("cudnn-rs plan v2\nx\n", Authentication::Verified)
        );
        assert_eq!(
            check(&signed, FileKind::Plan, None),
            ("cudnn-rs plan v2\nx\n", Authentication::NotChecked)
        );
        // Unsigned text: missing, parsed whole.
        assert_eq!(
            check("a\nb\n", FileKind::Plan, Some(&k)),
            ("a\nb\n", Authentication::Missing)
        );
    }

    #[test]
    fn unit_a_tag_is_bound_to_its_kind_and_key() {
        // SAFETY: a test key: it tags only files this test writes.
        let k = unsafe { PlanKey::from_bytes(&[7u8; 32]) }.unwrap();
        // SAFETY: a test key: it tags only files this test writes.
        let other = unsafe { PlanKey::from_bytes(&[8u8; 32]) }.unwrap();
        let signed = sign(&k, FileKind::Plan, "same text\n".into()).unwrap();
        // The same bytes as a plan cache: another purpose, refused.
        assert_eq!(
            check(&signed, FileKind::PlanCache, Some(&k)).1,
            Authentication::Invalid
        );
        assert_eq!(
            check(&signed, FileKind::Plan, Some(&other)).1,
            Authentication::Invalid
        );
        // Domain separation: the tag is not a plain HMAC of the text.
        let mut plain = <Hmac<Sha256> as Mac>::new_from_slice(&[7u8; 32]).unwrap();
        plain.update(b"same text\n");
        let forged = format!(
            "same text\n{TRAILER}{}\n",
            hex(&plain.finalize().into_bytes())
        );
        assert_eq!(
            check(&forged, FileKind::Plan, Some(&k)).1,
            Authentication::Invalid
        );
    }

    #[test]
    fn unit_every_changed_byte_fails_the_tag() {
        // SAFETY: a test key: it tags only files this test writes.
        let k = unsafe { PlanKey::from_bytes(&[9u8; 32]) }.unwrap();
        let signed = sign(&k, FileKind::PlanCache, "h\nt 1\njson 2\n{}\n".into()).unwrap();
        let bytes = signed.as_bytes();
        for i in 0..bytes.len() {
            let mut b = bytes.to_vec();
            b[i] ^= 0x01;
            let Ok(t) = String::from_utf8(b) else {
                continue;
            };
            assert_ne!(
                check(&t, FileKind::PlanCache, Some(&k)).1,
                Authentication::Verified,
                "byte {i}"
            );
        }
    }

    #[test]
    fn unit_key_lengths_are_checked_and_debug_hides_the_key() {
        assert!(matches!(
            // SAFETY: a test key: it tags only files this test writes.
            unsafe { PlanKey::from_bytes(&[1u8; 31]) },
            Err(Error::InvalidArgument { .. })
        ));
        // RFC 2104 section 3: not shorter than the hash output (32 bytes).
        assert_eq!(MIN_KEY_BYTES, 32);
        // SAFETY: a test key: it tags only files this test writes.
        assert!(unsafe { PlanKey::from_bytes(&[1u8; 1025]) }.is_err());
        // SAFETY: a test key: it tags only files this test writes.
        let k = unsafe { PlanKey::from_bytes(&[0xabu8; 32]) }.unwrap();
        assert_eq!(format!("{k:?}"), "PlanKey(32 secret bytes)");
        let g = PlanKey::generate().unwrap();
        assert_eq!(g.bytes.len(), 32);
        assert_ne!(g.bytes, PlanKey::generate().unwrap().bytes);
    }

    #[cfg(unix)]
    fn folder(tag: &str) -> std::path::PathBuf {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let d = std::env::temp_dir().join(format!(
            "cudnn-rs-plan-key-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        // Made fresh (a folder already there is an error), private.
        std::fs::create_dir(&d).unwrap();
        d
    }

    #[cfg(unix)]
    #[test]
    fn unit_key_file_is_created_0600_and_read_back() {
        use std::os::unix::fs::PermissionsExt;
        let d = folder("new");
        // SAFETY: a test's key file: the key tags no file that loads as code.
        let a = unsafe { PlanKey::load_or_create(&d) }.unwrap();
        let p = PlanKey::key_file(&d);
        let m = std::fs::symlink_metadata(&p).unwrap();
        assert!(m.file_type().is_file());
        assert_eq!(m.permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read(&p).unwrap(), a.bytes);
        assert_eq!(
            // SAFETY: a test's key file: the key tags no file that loads as code.
            unsafe { PlanKey::load_or_create(&d) }.unwrap().bytes,
            a.bytes
        );
        // Only the key file is left (no temporary).
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn unit_key_file_created_by_racing_threads_is_one_key() {
        let d = folder("race");
        let keys: Vec<Vec<u8>> = std::thread::scope(|s| {
            let h: Vec<_> = (0..8)
                // SAFETY: a test's key file: the key tags no file that loads as code.
                .map(|_| s.spawn(|| unsafe { PlanKey::load_or_create(&d) }.unwrap().bytes))
                .collect();
            h.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(keys.iter().all(|k| *k == keys[0]));
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn unit_key_file_readable_by_others_a_link_or_the_wrong_size_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let d = folder("bad");
        let p = PlanKey::key_file(&d);
        std::fs::write(&p, [5u8; 32]).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        // SAFETY: a test's key file: the key tags no file that loads as code.
        let e = unsafe { PlanKey::load_or_create(&d) }.unwrap_err();
        let s = e.to_string();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
        assert!(
            s.contains(&p.display().to_string()) && s.contains("mode 0644"),
            "{s}"
        );
        // Group-readable is refused too; 0600 is accepted.
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        // SAFETY: a test's key file: the key tags no file that loads as code.
        assert!(unsafe { PlanKey::load_or_create(&d) }.is_err());
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(
            // SAFETY: a test's key file: the key tags no file that loads as code.
            unsafe { PlanKey::load_or_create(&d) }.unwrap().bytes,
            vec![5u8; 32]
        );
        // A second name (a hard link) for the key file.
        let twin = d.join("twin");
        std::fs::hard_link(&p, &twin).unwrap();
        // SAFETY: a test's key file: the key tags no file that loads as code.
        let s = unsafe { PlanKey::load_or_create(&d) }
            .unwrap_err()
            .to_string();
        assert!(s.contains("2 names"), "{s}");
        std::fs::remove_file(&twin).unwrap();
        // A short file.
        std::fs::write(&p, [5u8; 31]).unwrap();
        // SAFETY: a test's key file: the key tags no file that loads as code.
        let s = unsafe { PlanKey::load_or_create(&d) }
            .unwrap_err()
            .to_string();
        assert!(s.contains("31 bytes"), "{s}");
        // A symbolic link to a private, well-formed key file elsewhere.
        std::fs::remove_file(&p).unwrap();
        let elsewhere = folder("target");
        let real = elsewhere.join("real.key");
        std::fs::write(&real, [6u8; 32]).unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(&real, &p).unwrap();
        // SAFETY: a test's key file: the key tags no file that loads as code.
        let e = unsafe { PlanKey::load_or_create(&d) }.unwrap_err();
        let s = e.to_string();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
        assert!(
            s.contains("symbolic link") && s.contains(&p.display().to_string()),
            "{s}"
        );
        // A dangling link is not replaced by a new key either.
        std::fs::remove_file(&real).unwrap();
        // SAFETY: a test's key file: the key tags no file that loads as code.
        assert!(unsafe { PlanKey::load_or_create(&d) }.is_err());
        assert!(!real.exists());
        // A folder in the key file's place.
        std::fs::remove_file(&p).unwrap();
        std::fs::create_dir(&p).unwrap();
        // SAFETY: a test's key file: the key tags no file that loads as code.
        let s = unsafe { PlanKey::load_or_create(&d) }
            .unwrap_err()
            .to_string();
        assert!(s.contains("regular file"), "{s}");
        // A missing folder: an I/O error naming the path.
        let gone = d.join("no-such-folder");
        // SAFETY: a test's key file: the key tags no file that loads as code.
        match unsafe { PlanKey::load_or_create(&gone) } {
            Err(Error::Io { path, kind, .. }) => {
                assert!(path.starts_with(&gone), "{path:?}");
                assert_eq!(kind, std::io::ErrorKind::NotFound);
            }
            other => panic!("{other:?}"),
        }
        std::fs::remove_dir_all(&d).unwrap();
        std::fs::remove_dir_all(&elsewhere).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn unit_key_file_is_per_user_and_load_never_creates() {
        // SAFETY: geteuid takes no arguments, touches no memory and cannot fail.
        let uid = unsafe { libc::geteuid() };
        let d = folder("peruser");
        let p = PlanKey::key_file(&d);
        assert_eq!(p, d.join(format!("cudnn-rs-plan-{uid}.key")));
        // `load` on an empty folder: no key, nothing created.
        // SAFETY: a test's key file: the key tags no file that loads as code.
        assert!(unsafe { PlanKey::load(&d) }.unwrap().is_none());
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
        // Another user's key file beside it does not stand in the way.
        std::fs::write(d.join("cudnn-rs-plan-4242424.key"), [1u8; 32]).unwrap();
        // SAFETY: a test's key file: the key tags no file that loads as code.
        let k = unsafe { PlanKey::load_or_create(&d) }.unwrap();
        assert_eq!(
            // SAFETY: a test's key file: the key tags no file that loads as code.
            unsafe { PlanKey::load(&d) }.unwrap().map(|k| k.bytes),
            Some(k.bytes)
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn unit_key_creation_removes_only_its_own_temporary_file() {
        // Files already at every temporary name this process can use in
        // the folder (the counter is far below 512 here): the creation
        // fails at its exclusive open, and must leave them all in place
        // (before the fix it removed the one it collided with).
        let d = folder("tmpclash");
        let name = PlanKey::key_file(&d)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let pid = std::process::id();
        for n in 0..512 {
            std::fs::write(d.join(format!(".{name}.tmp-{pid}-{n}")), b"not ours").unwrap();
        }
        // SAFETY: a test's key file: the key tags no file that loads as code.
        match unsafe { PlanKey::load_or_create(&d) } {
            Err(Error::Io { kind, .. }) => assert_eq!(kind, std::io::ErrorKind::AlreadyExists),
            other => panic!("{other:?}"),
        }
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 512);
        assert!(!PlanKey::key_file(&d).exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn unit_split_and_check_never_panic_on_odd_text() {
        // SAFETY: a test key: it tags only files this test writes.
        let k = unsafe { PlanKey::from_bytes(&[1u8; 32]) }.unwrap();
        for t in [
            "",
            "\n",
            "hmac-sha256 \n",
            "hmac-sha256 zz\n",
            "x\nhmac-sha256 é\n",
            &format!("{TRAILER}{}\n", "0".repeat(64)),
            &format!("{TRAILER}{}\n", "é".repeat(32)),
        ] {
            let (_, a) = check(t, FileKind::Plan, Some(&k));
            assert_ne!(a, Authentication::Verified, "{t:?}");
        }
    }
}
