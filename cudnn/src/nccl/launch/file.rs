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
//!
//! Both folders are opened once (the id file's folder, and the job's
//! folder with `O_DIRECTORY | O_NOFOLLOW`, then checked through its
//! descriptor), and every file is created, read, listed and removed
//! relative to those descriptors (`openat`, `unlinkat`, `fstatat`): a
//! folder renamed, or replaced by a symbolic link after the check, cannot
//! redirect a write or a removal to another folder. The id file and the
//! job's folder are removed by name only while that name still is the file
//! or folder this rank made.
//!
//! `mkdirat` does not say which folder it made, and in a parent that others
//! may write (no sticky bit) another user can swap a folder of this user in
//! its place before rank 0 opens it (`renameat2` with `RENAME_EXCHANGE`
//! needs no right on the folders it moves). Rank 0 therefore takes the
//! opened folder as the job's only when its name still is that folder and
//! it is empty, as a folder just made is; anything else is refused and left
//! untouched. And when the job's folder is removed, only the names this
//! protocol writes in it (`ack-<rank>-<32 hex>`, `ok-<rank>-<32 hex>`,
//! `abort`) are unlinked, never every entry: a folder that is not the
//! job's loses nothing else (and, not empty, stays). Use a folder only
//! this user can write all the same.

use std::collections::HashMap;
use std::io::{self, Read};
use std::path::Path;
use std::time::Duration;

use super::deadline::Deadline;
use super::dirfd::{Dir, Meta};
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
fn me() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The id path's folder (opened) and file name.
fn split(path: &Path) -> Result<(Dir, String), String> {
    let name = path
        .file_name()
        .ok_or_else(|| format!("{} does not end in a file name", path.display()))?
        .to_str()
        .ok_or_else(|| format!("{}: the file name must be UTF-8", path.display()))?
        .to_string();
    let parent = path.parent().unwrap_or(Path::new(""));
    let dir =
        Dir::open(parent).map_err(|e| format!("opening the folder of {}: {e}", path.display()))?;
    Ok((dir, name))
}

/// The name of the job's private folder beside the id file `name`.
fn folder_name(name: &str, job: &str) -> String {
    format!("{name}.{job}.d")
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

/// Read `name` in `dir` if it is a regular file of at most [`MAX_FILE`]
/// bytes; anything else is an error naming what it is.
fn read_small(dir: &Dir, name: &str) -> Result<Found, String> {
    let shown = dir.show(name);
    let mut file = match dir.open_read(name) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Found::Missing),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(format!(
                "{} is a symbolic link; a rendezvous file is written by rank 0",
                shown.display()
            ));
        }
        Err(e) => return Err(format!("opening {}: {e}", shown.display())),
    };
    let meta = file
        .metadata()
        .map_err(|e| format!("examining {}: {e}", shown.display()))?;
    if !meta.is_file() {
        return Err(format!(
            "{} is not a regular file ({:?}); a rendezvous file is written by rank 0",
            shown.display(),
            meta.file_type()
        ));
    }
    if meta.len() > MAX_FILE {
        return Err(format!(
            "{} holds {} bytes, more than a rendezvous file ({MAX_FILE} at most)",
            shown.display(),
            meta.len()
        ));
    }
    let mut bytes = Vec::new();
    (&mut file)
        .take(MAX_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("reading {}: {e}", shown.display()))?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(format!(
            "{} grew past {MAX_FILE} bytes while read",
            shown.display()
        ));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| format!("{} is not text: not a rendezvous file", shown.display()))?;
    Ok(Found::Text(
        text,
        std::os::unix::fs::MetadataExt::uid(&meta),
    ))
}

/// Open the job's folder `name` in `parent`, never through a symbolic
/// link, and check it through its descriptor: a folder of this user that
/// nobody else may write.
fn open_folder(parent: &Dir, name: &str, me: u32) -> Result<(Dir, Meta), String> {
    let shown = parent.show(name);
    let dir = match parent.open_dir(name) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(format!(
                "rank 0's folder {} is missing: the id file was left by an earlier run, or \
                 rank 0 gave up (remove the id file and start again)",
                shown.display()
            ));
        }
        // O_NOFOLLOW | O_DIRECTORY on a link: ELOOP, or ENOTDIR (Linux).
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
            let link = parent
                .meta_at(name)
                .ok()
                .flatten()
                .is_some_and(|m| m.is_symlink());
            return Err(if link {
                format!(
                    "{} is a symbolic link, not rank 0's folder",
                    shown.display()
                )
            } else {
                format!("{} is not a folder", shown.display())
            });
        }
        Err(e) => return Err(format!("{}: {e}", shown.display())),
    };
    let m = dir
        .meta()
        .map_err(|e| format!("examining {}: {e}", shown.display()))?;
    if !m.is_dir() {
        return Err(format!("{} is not a folder", shown.display()));
    }
    if m.uid != me {
        return Err(format!(
            "{} is owned by user {}, not by this rank's user {me}",
            shown.display(),
            m.uid
        ));
    }
    if m.mode & 0o077 != 0 {
        return Err(format!(
            "{} may be written by others (mode {:o}); rank 0 makes it 0700",
            shown.display(),
            m.mode & 0o777
        ));
    }
    Ok((dir, m))
}

/// Remove the names the protocol writes in the job's folder (through its
/// descriptor), then the folder from `parent` while its name still is that
/// folder. Nothing else is removed: a folder that is not the job's (or a
/// file another process put there) keeps every other entry, and a folder
/// that is not empty then stays.
fn remove_folder(parent: &Dir, name: &str, dir: &Dir, was: &Meta) {
    if let Ok(entries) = dir.list() {
        for e in entries.iter().filter(|e| protocol_name(e)) {
            dir.remove(e);
        }
    }
    parent.rmdir_if(name, was);
}

/// Whether `entry` is a name this module writes in a job's folder:
/// `abort`, or `ack-<rank>-<nonce>` / `ok-<rank>-<nonce>` with a rank
/// without leading zeros and a nonce of 32 lowercase hex digits.
fn protocol_name(entry: &str) -> bool {
    if entry == ABORT {
        return true;
    }
    let Some(rest) = entry
        .strip_prefix("ack-")
        .or_else(|| entry.strip_prefix("ok-"))
    else {
        return false;
    };
    let Some((digits, nonce)) = rest.split_once('-') else {
        return false;
    };
    let rank_ok = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    rank_ok
        && nonce.len() == 32
        && nonce
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
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
fn acks(dir: &Dir) -> Result<Vec<(usize, String)>, String> {
    let entries = dir
        .list()
        .map_err(|e| format!("listing {}: {e}", dir.shown().display()))?;
    Ok(entries.iter().filter_map(|e| ack_of(e)).collect())
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
    publish_with(path, ranks, id, deadline, &|_: &str| {})
}

/// [`publish`], with `made` called between the creation of the job's
/// folder and its opening (tests swap folders there).
fn publish_with(
    path: &Path,
    ranks: Ranks,
    id: &UniqueId,
    deadline: Deadline,
    made: &dyn Fn(&str),
) -> Result<(), String> {
    let (parent, name) = split(path)?;
    if parent.meta_at(&name).ok().flatten().is_some() {
        return Err(format!(
            "{} already exists (left by an earlier run, or another job uses it); \
             remove it and start again",
            path.display()
        ));
    }
    let job = nonce()?;
    let dname = folder_name(&name, &job);
    parent
        .mkdir(&dname)
        .map_err(|e| format!("creating {}: {e}", parent.show(&dname).display()))?;
    made(&dname);
    // From here on the folder is reached only through this descriptor.
    let (dir, dmeta) = open_folder(&parent, &dname, me())?;
    // mkdirat tells nothing of what it made: in a parent others may write
    // (no sticky bit), another user can rename a folder of this user in
    // place of the new one between mkdirat and openat (renameat2 with
    // RENAME_EXCHANGE needs no right on the folders moved). The descriptor
    // is taken as the job's folder only when the name still is it and it
    // is empty, as a folder just made is; otherwise nothing in it or of it
    // is touched.
    let still = parent
        .meta_at(&dname)
        .ok()
        .flatten()
        .is_some_and(|m| m.same(&dmeta));
    let empty = dir.list().is_ok_and(|l| l.is_empty());
    if !still || !empty {
        return Err(format!(
            "{} was replaced by another folder while rank 0 made it (someone renames \
             folders in {}: use a folder only this user can write); nothing in it was touched",
            parent.show(&dname).display(),
            parent.shown().display()
        ));
    }
    let size = ranks.size();
    let idmeta = match parent.create(&name, &format!("{MAGIC} {size} {job} {id}\n")) {
        Ok(m) => m,
        Err(e) => {
            remove_folder(&parent, &dname, &dir, &dmeta);
            return Err(if e.kind() == io::ErrorKind::AlreadyExists {
                format!(
                    "{} appeared while rank 0 was writing it (another job uses it?)",
                    path.display()
                )
            } else {
                format!("creating {}: {e}", path.display())
            });
        }
    };
    let mut refused = Vec::new();
    let result = serve(&dir, size, &job, &mut refused, deadline);
    parent.remove_if(&name, &idmeta);
    match &result {
        Ok(()) => remove_folder(&parent, &dname, &dir, &dmeta),
        Err(why) => {
            // Tell the ranks that wait; with none waiting (the refused ones
            // are told already), leave nothing.
            let _ = dir.create(ABORT, &format!("{job} abort {why}\n"));
            for (r, mine) in &refused {
                dir.remove(&ack_name(*r, mine));
                dir.remove(&ok_name(*r, mine));
            }
            if acks(&dir).is_ok_and(|a| a.is_empty()) {
                remove_folder(&parent, &dname, &dir, &dmeta);
            }
        }
    }
    result
}

/// Answer the ranks until all took their answer; `refused` collects the
/// acknowledgements refused.
fn serve(
    dir: &Dir,
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
            let ack_n = ack_name(r, &mine);
            let ack = dir.show(&ack_n);
            let text = match read_small(dir, &ack_n) {
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
            let ok = ok_name(r, &mine);
            if their_rank != r.to_string() {
                note(format!("{} names rank {their_rank}", ack.display()));
                refused.push((r, mine));
                continue;
            }
            if their_size != size.to_string() {
                let why = format!("rank {r} has world size {their_size}, rank 0 {size}");
                let _ = dir.create(&ok, &format!("{job} {mine} refused {why}\n"));
                refused.push((r, mine));
                return Err(why);
            }
            if seen == Some(false) {
                let why = format!(
                    "rank {r} already acknowledged by another process (two processes with \
                     the same rank?)"
                );
                let _ = dir.create(&ok, &format!("{job} {mine} refused {why}\n"));
                note(why);
                refused.push((r, mine));
                continue;
            }
            dir.create(&ok, &format!("{job} {mine} ok\n"))
                .map_err(|e| format!("creating {}: {e}", dir.show(&ok).display()))?;
            peers.insert(r, Peer::Answered(mine));
        }
        for (&r, state) in peers.iter_mut() {
            if let Peer::Answered(mine) = state
                && dir.meta_at(&ok_name(r, mine)).is_ok_and(|m| m.is_none())
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
    let (parent, name) = split(path)?;
    let mut r = Receiver {
        path,
        parent,
        name,
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
            dir.remove(&ack_name(rank, &r.mine));
        }
        dir.remove(&ok_name(rank, &r.mine));
    }
    result
}

struct Receiver<'a> {
    path: &'a Path,
    /// The id file's folder, opened once, and the id file's name.
    parent: Dir,
    name: String,
    ranks: Ranks,
    /// This rank's own nonce.
    mine: String,
    /// The job's folder (opened once), nonce and id this rank acknowledged.
    acked: Option<(Dir, String, UniqueId)>,
    keep_ack: bool,
}

impl Receiver<'_> {
    fn run(&mut self, deadline: Deadline) -> Result<UniqueId, String> {
        let (path, rank, size) = (self.path, self.ranks.rank(), self.ranks.size());
        let me = me();
        let mut waiting_for = "rank 0 to write it";
        let mut poll = POLL;
        let mine = self.mine.clone();
        let ack_text = |job: &str| format!("{job} {rank} {size} {mine}\n");
        let ack_n = ack_name(rank, &self.mine);
        let ok_n = ok_name(rank, &self.mine);
        loop {
            match read_small(&self.parent, &self.name)? {
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
                            let (dir, _) =
                                open_folder(&self.parent, &folder_name(&self.name, &p.job), me)?;
                            if let Some((old, _, _)) = &self.acked {
                                // The id file of another run replaced the
                                // one acknowledged: forget that one.
                                old.remove(&ack_n);
                                old.remove(&ok_n);
                            }
                            dir.create(&ack_n, &ack_text(&p.job)).map_err(|e| {
                                format!("creating {}: {e}", dir.show(&ack_n).display())
                            })?;
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
                match read_small(dir, &ok_n)? {
                    Found::Text(_, uid) if uid != me => {
                        return Err(format!(
                            "{} is owned by user {uid}, not by this rank's user {me}",
                            dir.show(&ok_n).display()
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
                        match dir.create(&ack_n, &ack_text(job)) {
                            Ok(_) => {}
                            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                                return Err(format!(
                                    "rank 0's folder {} is gone: rank 0 gave up or finished \
                                     without this rank",
                                    dir.shown().display()
                                ));
                            }
                            Err(e) => {
                                return Err(format!(
                                    "creating {}: {e}",
                                    dir.show(&ack_n).display()
                                ));
                            }
                        }
                    }
                }
                if let Found::Text(t, uid) = read_small(dir, ABORT)?
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::path::PathBuf;

    /// A fresh private folder for one test.
    fn scratch(tag: &str) -> PathBuf {
        let mut n = [0u8; 8];
        let _ = getrandom::fill(&mut n);
        let hex: String = n.iter().map(|b| format!("{b:02x}")).collect();
        let p = std::env::temp_dir().join(format!("cudnn-rs-{tag}-{hex}"));
        std::fs::create_dir(&p).unwrap();
        p
    }

    fn c(p: &Path) -> CString {
        CString::new(p.as_os_str().as_bytes()).unwrap()
    }

    /// Where the victim's file is, after any swap: under `ckpt` or under
    /// the name rank 0 made.
    fn victim_file(base: &Path) -> Option<PathBuf> {
        std::fs::read_dir(base)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("weights"))
            .find(|p| p.is_file())
    }

    /// The attack of the review: a folder of this user is swapped in place
    /// of the job's folder between mkdirat and openat. Rank 0 must refuse
    /// it and touch nothing in it (before the fix a one-rank job finished
    /// at once and emptied and removed the victim's folder).
    #[test]
    fn swapped_folder_is_refused_and_untouched() {
        let base = scratch("swap");
        let ckpt = base.join("ckpt");
        std::fs::create_dir(&ckpt).unwrap();
        let mut perm = std::fs::metadata(&ckpt).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o700);
        std::fs::set_permissions(&ckpt, perm).unwrap();
        std::fs::write(ckpt.join("weights"), b"precious").unwrap();
        let id = UniqueId::from_bytes(&[7u8; crate::nccl::UNIQUE_ID_BYTES]).unwrap();
        let ranks = Ranks::new(0, 1).unwrap();
        let swap = |dname: &str| {
            let a = c(&base.join(dname));
            let b = c(&ckpt);
            // SAFETY: both are NUL-terminated paths; RENAME_EXCHANGE swaps
            // two existing names atomically.
            let r = unsafe {
                libc::renameat2(
                    libc::AT_FDCWD,
                    a.as_ptr(),
                    libc::AT_FDCWD,
                    b.as_ptr(),
                    libc::RENAME_EXCHANGE,
                )
            };
            assert_eq!(r, 0, "renameat2: {}", io::Error::last_os_error());
        };
        let r = publish_with(
            &base.join("id"),
            ranks,
            &id,
            Deadline::after(Duration::from_secs(2)),
            &swap,
        );
        let found = victim_file(&base);
        let text = found.as_ref().map(std::fs::read_to_string);
        let _ = std::fs::remove_dir_all(&base);
        let e = r.expect_err("a swapped folder must be refused");
        assert!(e.contains("replaced by another folder"), "{e}");
        assert_eq!(
            text.and_then(|t| t.ok()).as_deref(),
            Some("precious"),
            "the victim's file must survive"
        );
    }

    /// Removing the job's folder removes only the names the protocol
    /// writes (before the fix it unlinked every entry).
    #[test]
    fn remove_folder_keeps_foreign_names() {
        let base = scratch("rm");
        let d = base.join("job.d");
        std::fs::create_dir(&d).unwrap();
        let nonce = "0123456789abcdef0123456789abcdef";
        let ours = [
            format!("ack-1-{nonce}"),
            format!("ok-12-{nonce}"),
            "abort".to_string(),
        ];
        // Near misses: not written by the protocol.
        let foreign = [
            "weights".to_string(),
            format!("ack-01-{nonce}"),
            format!("ok-1-{}", nonce.to_uppercase()),
            format!("ack-1-{nonce}0"),
            "ack-1-".to_string(),
            "aborted".to_string(),
        ];
        for n in ours.iter().chain(&foreign) {
            std::fs::write(d.join(n), b"x").unwrap();
        }
        let parent = Dir::open(&base).unwrap();
        let dir = parent.open_dir("job.d").unwrap();
        let was = dir.meta().unwrap();
        remove_folder(&parent, "job.d", &dir, &was);
        let left: Vec<String> = std::fs::read_dir(&d)
            .map(|r| {
                r.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        let _ = std::fs::remove_dir_all(&base);
        for n in &foreign {
            assert!(left.contains(n), "{n} was removed; left {left:?}");
        }
        for n in &ours {
            assert!(!left.contains(n), "{n} was kept; left {left:?}");
        }
    }

    /// The names the protocol writes are recognised, and nothing else
    /// (hand-written cases).
    #[test]
    fn protocol_names() {
        let n = "ffffffffffffffffffffffffffffffff";
        assert!(protocol_name("abort"));
        assert!(protocol_name(&format!("ack-0-{n}")));
        assert!(protocol_name(&format!("ok-4095-{n}")));
        assert!(!protocol_name(&format!("ack-00-{n}")));
        assert!(!protocol_name(&format!("ack--{n}")));
        assert!(!protocol_name(&format!("nak-1-{n}")));
        assert!(!protocol_name(&format!("ok-1-{}", &n[1..])));
        assert!(!protocol_name(&format!("ok-1-{}g", &n[1..])));
        assert!(!protocol_name(""));
        assert!(!protocol_name("."));
    }
}
