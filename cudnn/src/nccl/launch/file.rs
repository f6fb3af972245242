//! The rendezvous over a shared file.
//!
//! Rank 0 draws a nonce `N` for this job (128 bits from the operating
//! system), creates a private folder `P.N.d` beside the id path `P` (mode
//! 0700, created exclusively, so nobody else can put a file in it), then
//! `P` itself (`O_EXCL`, mode 0600): `CUDNNRS3 <world size> <N> <id>`.
//! Each other rank `r` draws its own nonce `M` and, once it has read `P`
//! and checked that `P.N.d` is a folder of its own user that nobody else
//! can write, works inside it, every file created with `O_EXCL` and mode
//! 0600:
//! - `ack-<r>-<M>`: `<N> <r> <world size> <M>`, written by rank `r`;
//! - `ok-<r>-<M>`: `<N> <M> ok` (or `<N> <M> refused <why>`), written by
//!   rank 0 in answer;
//! - `abort`: `<N> abort <why>`, written by rank 0 when it gives up, so the
//!   waiting ranks stop at once.
//!
//! Rank `r` takes the id only once rank 0 answered its own nonce: an id
//! file left by a crashed run is never taken (nobody alive answers it), a
//! second process claiming a rank already acknowledged is refused, and no
//! process removes a file that is not its own. Rank `r` removes its two
//! files once it has the answer (a rank whose acknowledgement disappeared
//! writes it again); rank 0 removes `P` and then the folder once every
//! answer is taken. When rank 0 gives up while ranks wait, the folder stays
//! with its `abort` note (only its user can read it).
//!
//! Every read is bounded ([`MAX_FILE`] bytes, regular files only, opened
//! non-blocking, without following a symbolic link or taking a terminal,
//! so a FIFO or a device cannot hold it), and every wait ends at the
//! deadline. Files owned by another user are refused.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::deadline::Deadline;
use crate::nccl::{Ranks, UniqueId};

/// The first word of an id file.
const MAGIC: &str = "CUDNNRS3";
/// The largest rendezvous file read (an id file is about 300 bytes).
pub(crate) const MAX_FILE: u64 = 1024;
/// The first pause between looks at the shared folder; it grows by half
/// each time up to [`POLL_MAX`], so a long wait does not load a network
/// file system.
const POLL: Duration = Duration::from_millis(20);
const POLL_MAX: Duration = Duration::from_millis(250);
/// Ranks named in a timeout message, at most.
const SHOW: usize = 16;
/// The abort note's name in the job's folder.
const ABORT: &str = "abort";

/// The pause before the next look, growing.
fn pause(deadline: Deadline, poll: &mut Duration) {
    deadline.sleep(*poll);
    *poll = (*poll + *poll / 2).min(POLL_MAX);
}

/// A fresh 128-bit nonce from the operating system, in hex.
fn nonce() -> Result<String, String> {
    let mut n = [0u8; 16];
    getrandom::fill(&mut n).map_err(|e| format!("drawing a nonce: {e}"))?;
    Ok(n.iter().map(|b| format!("{b:02x}")).collect())
}

/// This process's effective user id.
#[cfg(unix)]
fn me() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}
#[cfg(not(unix))]
fn me() -> u32 {
    0
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut s: OsString = path.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

/// The job's private folder beside `path`.
fn folder(path: &Path, job: &str) -> PathBuf {
    sibling(path, &format!(".{job}.d"))
}

fn ack_name(rank: usize, mine: &str) -> String {
    format!("ack-{rank}-{mine}")
}

fn ok_name(rank: usize, mine: &str) -> String {
    format!("ok-{rank}-{mine}")
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

/// Open for reading without blocking on a FIFO, following a symbolic link
/// or taking a terminal.
fn open_read(path: &Path) -> io::Result<File> {
    let mut o = OpenOptions::new();
    o.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(
        &mut o,
        libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_NOCTTY,
    );
    o.open(path)
}

/// Read `path` if it is a regular file of at most [`MAX_FILE`] bytes;
/// anything else is an error naming what it is.
fn read_small(path: &Path) -> Result<Found, String> {
    let file = match open_read(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Found::Missing),
        #[cfg(unix)]
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(format!(
                "{} is a symbolic link; a rendezvous file is written by rank 0",
                path.display()
            ));
        }
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

/// Create `path` exclusively (`O_EXCL`, mode 0600) holding `text`.
fn create(path: &Path, text: &str) -> io::Result<()> {
    let mut o = OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    let mut f = o.open(path)?;
    let written = f.write_all(text.as_bytes());
    if written.is_err() {
        // Half a file helps nobody (a full disk, a quota).
        remove(path);
    }
    written
}

fn remove(path: &Path) {
    // Missing is fine; any other failure leaves a file the nonce makes
    // harmless.
    let _ = fs::remove_file(path);
}

/// Create the job's folder: exclusively, mode 0700.
fn make_folder(dir: &Path) -> io::Result<()> {
    let mut b = fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(dir)
}

/// Why `dir` cannot be the job's folder, if it cannot: not a folder of this
/// user that nobody else may write.
fn folder_problem(dir: &Path, me: u32) -> Option<String> {
    let m = match fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Some(format!(
                "rank 0's folder {} is missing: the id file was left by an earlier run, or \
                 rank 0 gave up (remove the id file and start again)",
                dir.display()
            ));
        }
        Err(e) => return Some(format!("{}: {e}", dir.display())),
    };
    if !m.is_dir() {
        return Some(format!("{} is not a folder", dir.display()));
    }
    if owner(&m) != me {
        return Some(format!(
            "{} is owned by user {}, not by this rank's user {me}",
            dir.display(),
            owner(&m)
        ));
    }
    #[cfg(unix)]
    {
        let mode = std::os::unix::fs::PermissionsExt::mode(&m.permissions());
        if mode & 0o077 != 0 {
            return Some(format!(
                "{} may be written by others (mode {:o}); rank 0 makes it 0700",
                dir.display(),
                mode & 0o777
            ));
        }
    }
    None
}

/// Remove the job's folder and what it holds.
fn remove_folder(dir: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            remove(&e.path());
        }
    }
    let _ = fs::remove_dir(dir);
}

/// The complete first line of `text`, `None` while it is being written.
fn line(text: &str) -> Option<&str> {
    text.split_once('\n').map(|(l, _)| l)
}

/// The rank and nonce in `entry` when it is `ack-<rank>-<nonce>`.
fn ack_of(entry: &str) -> Option<(usize, String)> {
    let (digits, mine) = entry.strip_prefix("ack-")?.split_once('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || mine.is_empty() {
        return None;
    }
    // Only the form this module writes (no leading zeros).
    let r: usize = digits.parse().ok()?;
    (r.to_string() == digits).then(|| (r, mine.to_string()))
}

/// The acknowledgements in `dir`.
fn acks(dir: &Path) -> Result<Vec<(usize, String)>, String> {
    let entries = fs::read_dir(dir).map_err(|e| format!("listing {}: {e}", dir.display()))?;
    Ok(entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(ack_of))
        .collect())
}

#[derive(Clone, PartialEq, Eq)]
enum Peer {
    /// Answered `ok` to this nonce, waiting for the rank to take it.
    Answered(String),
    /// Took its answer.
    Done(String),
}

/// Rank 0: publish `id`, answer every rank, clean up.
pub(crate) fn publish(
    path: &Path,
    ranks: Ranks,
    id: &UniqueId,
    deadline: Deadline,
) -> Result<(), String> {
    if path.file_name().is_none() {
        return Err(format!("{} does not end in a file name", path.display()));
    }
    if fs::symlink_metadata(path).is_ok() {
        return Err(format!(
            "{} already exists (left by an earlier run, or another job uses it); \
             remove it and start again",
            path.display()
        ));
    }
    let job = nonce()?;
    let dir = folder(path, &job);
    make_folder(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    if let Some(p) = folder_problem(&dir, me()) {
        return Err(p);
    }
    let size = ranks.size();
    if let Err(e) = create(path, &format!("{MAGIC} {size} {job} {id}\n")) {
        remove_folder(&dir);
        return Err(if e.kind() == io::ErrorKind::AlreadyExists {
            format!(
                "{} appeared while rank 0 was writing it (another job uses it?)",
                path.display()
            )
        } else {
            format!("creating {}: {e}", path.display())
        });
    }
    let mut refused = Vec::new();
    let result = serve(&dir, size, &job, &mut refused, deadline);
    remove(path);
    match &result {
        Ok(()) => remove_folder(&dir),
        Err(why) => {
            // Tell the ranks that wait; with none waiting (the refused ones
            // are told already), leave nothing.
            let _ = create(&dir.join(ABORT), &format!("{job} abort {why}\n"));
            for (r, mine) in &refused {
                remove(&dir.join(ack_name(*r, mine)));
                remove(&dir.join(ok_name(*r, mine)));
            }
            if acks(&dir).is_ok_and(|a| a.is_empty()) {
                remove_folder(&dir);
            }
        }
    }
    result
}

/// Answer the ranks until all took their answer; `refused` collects the
/// acknowledgements refused.
fn serve(
    dir: &Path,
    size: usize,
    job: &str,
    refused: &mut Vec<(usize, String)>,
    deadline: Deadline,
) -> Result<(), String> {
    let me = me();
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
        for (r, mine) in acks(dir)? {
            let seen = match peers.get(&r) {
                Some(Peer::Answered(n) | Peer::Done(n)) => Some(n == &mine),
                None => None,
            };
            if seen == Some(true) || refused.contains(&(r, mine.clone())) || r == 0 || r >= size {
                continue;
            }
            let ack = dir.join(ack_name(r, &mine));
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
            let words: Vec<&str> = l.split(' ').collect();
            let (their_rank, their_size) = match words.as_slice() {
                [n, r, s, m] if *n == job && *m == mine => (*r, *s),
                _ => {
                    note(format!(
                        "{} is not an acknowledgement of this job",
                        ack.display()
                    ));
                    refused.push((r, mine));
                    continue;
                }
            };
            let ok = dir.join(ok_name(r, &mine));
            if their_rank != r.to_string() {
                note(format!("{} names rank {their_rank}", ack.display()));
                refused.push((r, mine));
                continue;
            }
            if their_size != size.to_string() {
                let why = format!("rank {r} has world size {their_size}, rank 0 {size}");
                let _ = create(&ok, &format!("{job} {mine} refused {why}\n"));
                refused.push((r, mine));
                return Err(why);
            }
            if seen == Some(false) {
                let why = format!(
                    "rank {r} already acknowledged by another process (two processes with \
                     the same rank?)"
                );
                let _ = create(&ok, &format!("{job} {mine} refused {why}\n"));
                note(why);
                refused.push((r, mine));
                continue;
            }
            create(&ok, &format!("{job} {mine} ok\n"))
                .map_err(|e| format!("creating {}: {e}", ok.display()))?;
            peers.insert(r, Peer::Answered(mine));
        }
        for (&r, state) in peers.iter_mut() {
            if let Peer::Answered(mine) = state
                && fs::symlink_metadata(dir.join(ok_name(r, mine))).is_err()
            {
                *state = Peer::Done(std::mem::take(mine));
                done += 1;
            }
        }
        if done + 1 >= size {
            return Ok(());
        }
        if deadline.remaining().is_none() {
            let waiting: Vec<usize> = (1..size)
                .filter(|r| !matches!(peers.get(r), Some(Peer::Done(_))))
                .take(SHOW)
                .collect();
            let more = size - 1 - done;
            return Err(format!(
                "timed out waiting for {more} rank(s) ({waiting:?}{}) to read the id file and \
                 take rank 0's answer{}",
                if more > waiting.len() { ", ..." } else { "" },
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
    job: String,
    size: String,
    id: UniqueId,
}

fn parse_id_file(path: &Path, l: &str) -> Result<Published, String> {
    let words: Vec<&str> = l.split(' ').collect();
    match words.as_slice() {
        [MAGIC, size, job, id] if job.len() == 32 && job.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Ok(Published {
                job: job.to_string(),
                size: size.to_string(),
                id: id.parse().map_err(|e| format!("{}: {e}", path.display()))?,
            })
        }
        [first, ..] if first.starts_with("CUDNNRS") && *first != MAGIC => Err(format!(
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
    let mut r = Receiver {
        path,
        ranks,
        mine: nonce()?,
        acked: None,
        keep_ack: false,
    };
    let result = r.run(deadline);
    // The acknowledgement first: rank 0 takes a missing answer as done. A
    // rank refused for its world size leaves its acknowledgement for rank
    // 0 to read.
    if let Some((dir, _, _)) = &r.acked {
        let rank = ranks.rank();
        if !r.keep_ack {
            remove(&dir.join(ack_name(rank, &r.mine)));
        }
        remove(&dir.join(ok_name(rank, &r.mine)));
    }
    result
}

struct Receiver<'a> {
    path: &'a Path,
    ranks: Ranks,
    /// This rank's own nonce.
    mine: String,
    /// The job's folder, nonce and id this rank acknowledged.
    acked: Option<(PathBuf, String, UniqueId)>,
    keep_ack: bool,
}

impl Receiver<'_> {
    fn run(&mut self, deadline: Deadline) -> Result<UniqueId, String> {
        let (path, rank, size) = (self.path, self.ranks.rank(), self.ranks.size());
        let me = me();
        let mut waiting_for = "rank 0 to write it";
        let mut poll = POLL;
        let ack_text = |job: &str| format!("{job} {rank} {size} {}\n", self.mine);
        loop {
            match read_small(path)? {
                Found::Missing => {}
                Found::Text(_, owner) if owner != me => {
                    return Err(format!(
                        "{} is owned by user {owner}, not by this rank's user {me}",
                        path.display()
                    ));
                }
                Found::Text(text, _) => match line(&text) {
                    None => waiting_for = "rank 0 to finish writing it",
                    Some(l) => {
                        let p = parse_id_file(path, l)?;
                        if self.acked.as_ref().map(|(_, j, _)| j) != Some(&p.job) {
                            let dir = folder(path, &p.job);
                            if let Some(why) = folder_problem(&dir, me) {
                                return Err(why);
                            }
                            if let Some((old, _, _)) = &self.acked {
                                // The id file of another run replaced the
                                // one acknowledged: forget that one.
                                remove(&old.join(ack_name(rank, &self.mine)));
                                remove(&old.join(ok_name(rank, &self.mine)));
                            }
                            let ack = dir.join(ack_name(rank, &self.mine));
                            create(&ack, &ack_text(&p.job))
                                .map_err(|e| format!("creating {}: {e}", ack.display()))?;
                            self.acked = Some((dir, p.job.clone(), p.id));
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
            if let Some((dir, job, id)) = &self.acked {
                let ok = dir.join(ok_name(rank, &self.mine));
                match read_small(&ok)? {
                    Found::Text(_, uid) if uid != me => {
                        return Err(format!(
                            "{} is owned by user {uid}, not by this rank's user {me}",
                            ok.display()
                        ));
                    }
                    Found::Text(t, _) => {
                        let head = format!("{job} {} ", self.mine);
                        if let Some(rest) = line(&t).and_then(|l| l.strip_prefix(&head)) {
                            if rest == "ok" {
                                return Ok(*id);
                            }
                            if let Some(why) = rest.strip_prefix("refused ") {
                                return Err(format!("rank 0 refused: {why}"));
                            }
                        }
                    }
                    Found::Missing => {
                        // Removed by someone: write it again.
                        let ack = dir.join(ack_name(rank, &self.mine));
                        match create(&ack, &ack_text(job)) {
                            Ok(()) => {}
                            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                                return Err(format!(
                                    "rank 0's folder {} is gone: rank 0 gave up or finished \
                                     without this rank",
                                    dir.display()
                                ));
                            }
                            Err(e) => return Err(format!("creating {}: {e}", ack.display())),
                        }
                    }
                }
                if let Found::Text(t, uid) = read_small(&dir.join(ABORT))?
                    && uid == me
                    && let Some(why) =
                        line(&t).and_then(|l| l.strip_prefix(&format!("{job} abort ")))
                {
                    return Err(format!("rank 0 gave up: {why}"));
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
