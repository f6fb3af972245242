//! The rendezvous over a shared file.
//!
//! Files, beside the id path `P`, all created with `O_EXCL` and mode 0600
//! and all carrying the nonce rank 0 drew for this job:
//! - `P`: `CUDNNRS2 <world size> <nonce> <id>`, written by rank 0;
//! - `P.ack-<r>`: `<nonce> <r> <world size>`, written by rank `r` once it
//!   has read `P`;
//! - `P.ok-<r>`: `<nonce> ok` (or `<nonce> refused <why>`), written by rank
//!   0 in answer to an acknowledgement carrying its nonce.
//!
//! Rank `r` returns the id only after rank 0 answered its acknowledgement
//! with the same nonce: an id file left by a crashed run is never taken,
//! since nobody alive answers for its nonce. Rank `r` removes its two files
//! once it has the answer; rank 0 removes `P` once every answer is gone.
//! Acknowledgements of an earlier run are removed before `P` is written,
//! and ignored for their nonce anyway.
//!
//! Every read is bounded ([`MAX_FILE`] bytes, regular files only, opened
//! non-blocking so a FIFO cannot hold it), and every wait ends at the
//! deadline. Files owned by another user than `P`'s are refused.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::deadline::Deadline;
use crate::nccl::{Ranks, UniqueId};

/// The first word of an id file.
const MAGIC: &str = "CUDNNRS2";
/// The largest rendezvous file read (an id file is about 300 bytes).
pub(crate) const MAX_FILE: u64 = 1024;
/// The first pause between looks at the shared folder; it grows by half
/// each time up to [`POLL_MAX`], so a long wait does not load a network
/// file system.
const POLL: Duration = Duration::from_millis(20);
const POLL_MAX: Duration = Duration::from_millis(250);

/// The pause before the next look, growing.
fn pause(deadline: Deadline, poll: &mut Duration) {
    deadline.sleep(*poll);
    *poll = (*poll + *poll / 2).min(POLL_MAX);
}
/// Ranks named in a timeout message, at most.
const SHOW: usize = 16;

/// A fresh 128-bit nonce, in hex.
fn nonce() -> String {
    let mut out = String::with_capacity(32);
    for salt in 0..2u8 {
        let mut h = RandomState::new().build_hasher();
        h.write_u8(salt);
        h.write_u32(std::process::id());
        let t = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        h.write_u128(t.as_nanos());
        out.push_str(&format!("{:016x}", h.finish()));
    }
    out
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut s: OsString = path.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

fn ack_path(path: &Path, rank: usize) -> PathBuf {
    sibling(path, &format!(".ack-{rank}"))
}

fn ok_path(path: &Path, rank: usize) -> PathBuf {
    sibling(path, &format!(".ok-{rank}"))
}

/// What a bounded read found.
enum Found {
    Missing,
    /// The text and the owner's user id.
    Text(String, u32),
}

#[cfg(unix)]
fn owner(m: &fs::Metadata) -> u32 {
    std::os::unix::fs::MetadataExt::uid(m)
}
#[cfg(not(unix))]
fn owner(_: &fs::Metadata) -> u32 {
    0
}

/// Open for reading without blocking on a FIFO or a device.
fn open_read(path: &Path) -> io::Result<File> {
    let mut o = OpenOptions::new();
    o.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut o, libc::O_NONBLOCK);
    o.open(path)
}

/// Read `path` if it is a regular file of at most [`MAX_FILE`] bytes;
/// anything else is an error naming what it is.
fn read_small(path: &Path) -> Result<Found, String> {
    let file = match open_read(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Found::Missing),
        Err(e) => return Err(format!("opening {}: {e}", path.display())),
    };
    let meta = file
        .metadata()
        .map_err(|e| format!("examining {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!(
            "{} is not a regular file ({:?}); a rendezvous file is written by rank 0",
            path.display(),
            meta.file_type()
        ));
    }
    if meta.len() > MAX_FILE {
        return Err(format!(
            "{} holds {} bytes, more than a rendezvous file ({MAX_FILE} at most)",
            path.display(),
            meta.len()
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("reading {}: {e}", path.display()))?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(format!(
            "{} grew past {MAX_FILE} bytes while read",
            path.display()
        ));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| format!("{} is not text: not a rendezvous file", path.display()))?;
    Ok(Found::Text(text, owner(&meta)))
}

/// Create `path` exclusively (`O_EXCL`, mode 0600) holding `text`; returns
/// its owner.
fn create(path: &Path, text: &str) -> io::Result<u32> {
    let mut o = OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    let mut f = o.open(path)?;
    let written = f.write_all(text.as_bytes()).and_then(|()| f.metadata());
    match written {
        Ok(meta) => Ok(owner(&meta)),
        Err(e) => {
            // Half a file helps nobody (a full disk, a quota).
            remove(path);
            Err(e)
        }
    }
}

fn remove(path: &Path) {
    // Missing is fine; any other failure leaves a file the nonce makes
    // harmless.
    let _ = fs::remove_file(path);
}

/// The complete first line of `text`, `None` while it is being written.
fn line(text: &str) -> Option<&str> {
    text.split_once('\n').map(|(l, _)| l)
}

/// The parent folder and file name of `path`.
fn split(path: &Path) -> Result<(PathBuf, String), String> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| format!("{} does not end in a UTF-8 file name", path.display()))?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((parent, name.to_string()))
}

/// The rank in `entry` when it is `<name><kind><rank>`.
fn rank_of(entry: &str, name: &str, kind: &str) -> Option<usize> {
    let digits = entry.strip_prefix(name)?.strip_prefix(kind)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Only the form this module writes (no leading zeros).
    digits
        .parse()
        .ok()
        .filter(|r: &usize| r.to_string() == digits)
}

/// The names in `dir` that are `<name><kind><rank>`, with their ranks.
fn listed(dir: &Path, name: &str, kind: &str) -> Result<Vec<usize>, String> {
    let entries = fs::read_dir(dir).map_err(|e| format!("listing {}: {e}", dir.display()))?;
    Ok(entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| rank_of(s, name, kind)))
        .collect())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Peer {
    /// Answered `ok`, waiting for the rank to take its answer.
    Answered,
    /// Took its answer.
    Done,
}

/// Rank 0: publish `id`, answer every rank, clean up.
pub(crate) fn publish(
    path: &Path,
    ranks: Ranks,
    id: &UniqueId,
    deadline: Deadline,
) -> Result<(), String> {
    let (dir, name) = split(path)?;
    if fs::symlink_metadata(path).is_ok() {
        return Err(format!(
            "{} already exists (left by an earlier run, or another job uses it); \
             remove it and start again",
            path.display()
        ));
    }
    // Acknowledgements and answers of an earlier run.
    for kind in [".ack-", ".ok-"] {
        for r in listed(&dir, &name, kind)? {
            let p = sibling(path, &format!("{kind}{r}"));
            remove(&p);
        }
    }
    let nonce = nonce();
    let size = ranks.size();
    let me = match create(path, &format!("{MAGIC} {size} {nonce} {id}\n")) {
        Ok(uid) => uid,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            return Err(format!(
                "{} appeared while rank 0 was writing it (another job uses it?)",
                path.display()
            ));
        }
        Err(e) => return Err(format!("creating {}: {e}", path.display())),
    };
    let result = serve(path, &dir, &name, size, &nonce, me, deadline);
    // Success or not, nothing of this job stays behind.
    remove(path);
    if result.is_err() {
        for kind in [".ok-", ".ack-"] {
            for r in listed(&dir, &name, kind).unwrap_or_default() {
                let p = sibling(path, &format!("{kind}{r}"));
                if let Ok(Found::Text(t, _)) = read_small(&p)
                    && t.starts_with(&nonce)
                {
                    remove(&p);
                }
            }
        }
    }
    result
}

fn serve(
    path: &Path,
    dir: &Path,
    name: &str,
    size: usize,
    nonce: &str,
    me: u32,
    deadline: Deadline,
) -> Result<(), String> {
    let mut peers: HashMap<usize, Peer> = HashMap::new();
    let mut done = 0usize;
    let mut notes: Vec<String> = Vec::new();
    let mut poll = POLL;
    let mut note = |n: String| {
        if notes.len() < SHOW && !notes.contains(&n) {
            notes.push(n);
        }
    };
    loop {
        for r in listed(dir, name, ".ack-")? {
            if r == 0 || r >= size || peers.contains_key(&r) {
                continue;
            }
            let ack = ack_path(path, r);
            let text = match read_small(&ack) {
                Ok(Found::Text(t, uid)) if uid == me => t,
                Ok(Found::Text(_, uid)) => {
                    note(format!(
                        "{} is owned by user {uid}, not {me}",
                        ack.display()
                    ));
                    continue;
                }
                Ok(Found::Missing) => continue,
                Err(e) => {
                    note(e);
                    continue;
                }
            };
            let Some(l) = line(&text) else { continue };
            let mut words = l.split(' ');
            if words.next() != Some(nonce) {
                // An earlier job's, or one not finished writing.
                continue;
            }
            let (their_rank, their_size) = (words.next(), words.next());
            let answer = if their_rank != Some(&*r.to_string()) {
                note(format!("{} names rank {their_rank:?}", ack.display()));
                continue;
            } else if their_size != Some(&*size.to_string()) {
                let why = format!(
                    "rank {r} has world size {}, rank 0 {size}",
                    their_size.unwrap_or("?")
                );
                let _ = create(&ok_path(path, r), &format!("{nonce} refused {why}\n"));
                return Err(why);
            } else {
                format!("{nonce} ok\n")
            };
            let ok = ok_path(path, r);
            remove(&ok);
            create(&ok, &answer).map_err(|e| format!("creating {}: {e}", ok.display()))?;
            peers.insert(r, Peer::Answered);
        }
        for (&r, state) in peers.iter_mut() {
            if *state == Peer::Answered && fs::symlink_metadata(ok_path(path, r)).is_err() {
                *state = Peer::Done;
                done += 1;
            }
        }
        if done + 1 >= size {
            return Ok(());
        }
        if deadline.remaining().is_none() {
            let waiting: Vec<usize> = (1..size)
                .filter(|r| peers.get(r) != Some(&Peer::Done))
                .take(SHOW)
                .collect();
            let more = size - 1 - done;
            return Err(format!(
                "timed out waiting for {more} rank(s) ({waiting:?}{}) to read {} and take rank \
                 0's answer{}",
                if more > waiting.len() { ", ..." } else { "" },
                path.display(),
                if notes.is_empty() {
                    String::new()
                } else {
                    format!("; seen: {}", notes.join("; "))
                }
            ));
        }
        pause(deadline, &mut poll);
    }
}

/// What the id file says.
struct Published {
    nonce: String,
    size: String,
    id: UniqueId,
}

fn parse_id_file(path: &Path, l: &str) -> Result<Published, String> {
    let words: Vec<&str> = l.split(' ').collect();
    match words.as_slice() {
        [MAGIC, size, nonce, id] if !nonce.is_empty() => Ok(Published {
            nonce: nonce.to_string(),
            size: size.to_string(),
            id: id.parse().map_err(|e| format!("{}: {e}", path.display()))?,
        }),
        [first, ..] if first.starts_with("CUDNNRS") => Err(format!(
            "{} was written by another version of this crate ({first})",
            path.display()
        )),
        _ => Err(format!(
            "{} is not a rendezvous file of this crate",
            path.display()
        )),
    }
}

/// A non-zero rank: read the id, acknowledge it, wait for rank 0's answer.
pub(crate) fn receive(path: &Path, ranks: Ranks, deadline: Deadline) -> Result<UniqueId, String> {
    let (ack, ok) = (ack_path(path, ranks.rank()), ok_path(path, ranks.rank()));
    let mut r = Receiver {
        path,
        ranks,
        acked: None,
        keep_ack: false,
    };
    let result = r.run(deadline);
    // The acknowledgement first: rank 0 takes a missing answer as done. A
    // rank refused for its world size leaves its acknowledgement for rank
    // 0 to read (and remove).
    if !r.keep_ack {
        remove(&ack);
    }
    if r.acked.is_some() {
        remove(&ok);
    }
    result
}

struct Receiver<'a> {
    path: &'a Path,
    ranks: Ranks,
    /// The nonce this rank acknowledged, and the id that came with it.
    acked: Option<(String, UniqueId)>,
    keep_ack: bool,
}

impl Receiver<'_> {
    fn run(&mut self, deadline: Deadline) -> Result<UniqueId, String> {
        let (path, rank, size) = (self.path, self.ranks.rank(), self.ranks.size());
        let (ack, ok) = (ack_path(path, rank), ok_path(path, rank));
        let mut waiting_for = "rank 0 to write it";
        let mut poll = POLL;
        loop {
            match read_small(path)? {
                Found::Missing => {}
                Found::Text(text, owner) => match line(&text) {
                    None => waiting_for = "rank 0 to finish writing it",
                    Some(l) => {
                        let p = parse_id_file(path, l)?;
                        if self.acked.as_ref().map(|(n, _)| n) != Some(&p.nonce) {
                            remove(&ok);
                            remove(&ack);
                            let me = create(&ack, &format!("{} {rank} {size}\n", p.nonce))
                                .map_err(|e| format!("creating {}: {e}", ack.display()))?;
                            self.acked = Some((p.nonce.clone(), p.id));
                            if me != owner {
                                return Err(format!(
                                    "{} is owned by user {owner}, not by this rank's user {me}",
                                    path.display()
                                ));
                            }
                            waiting_for = "rank 0 to answer (an id file left by an earlier \
                                           run is never answered: remove it)";
                        }
                        if p.size != size.to_string() {
                            self.keep_ack = true;
                            return Err(format!(
                                "{} says world size {}, this rank has {size}",
                                path.display(),
                                p.size
                            ));
                        }
                    }
                },
            }
            if let Some((nonce, id)) = &self.acked
                && let Found::Text(t, _) = read_small(&ok)?
                && let Some(l) = line(&t)
                && let Some(rest) = l.strip_prefix(nonce.as_str())
            {
                if rest == " ok" {
                    return Ok(*id);
                }
                if let Some(why) = rest.strip_prefix(" refused ") {
                    return Err(format!("rank 0 refused: {why}"));
                }
            }
            if deadline.remaining().is_none() {
                return Err(format!(
                    "timed out waiting for {waiting_for} at {}",
                    path.display()
                ));
            }
            pause(deadline, &mut poll);
        }
    }
}
