//! Agreement of calls across the ranks of one NCCL communicator that live
//! in this process (`init_all`, or `init_rank` with the same id from
//! several threads).
//!
//! NCCL never compares counts across ranks: its peer-to-peer transport lets
//! a sender write up to *its own* count into the receiver's buffer (a
//! broadcast of 8 Mi elements into a 4 Mi buffer, a send larger than its
//! recv), so a mismatch is an out-of-bounds write on the device. Ranks in
//! other processes cannot be checked without a message per call (see
//! `Communicator::check_agreement`); ranks in this process are: every call
//! is *posted* here before NCCL sees it, and the call that comes second is
//! compared with the first.
//!
//! - Collectives of a communicator are matched by their position (NCCL runs
//!   the n-th collective of every rank together): kind, element type,
//!   count, reduction and root must agree.
//! - Sends from rank `a` to rank `b` are matched in order with the receives
//!   of `b` from `a` (NCCL's order too): bytes must agree.
//!
//! The second poster gets [`Error::Mismatch`] and launches nothing, so the
//! larger write never happens (the first poster's call waits for a partner
//! that never comes: bound it with `Communicator::wait`). A call that was
//! posted but then not launched (NCCL refused it, a group failed) puts the
//! ranks out of step: the clique is then *broken* and every later call of
//! its communicators is refused.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use super::UNIQUE_ID_BYTES;
use super::op::{Call, Fingerprint};
use crate::error::{Error, Result};

/// The communicators of one NCCL communicator that live in this process.
#[derive(Debug)]
pub(crate) struct Clique {
    /// The communicator's size (`None` for a split's, known only after).
    size: Option<usize>,
    /// This clique's number in the process (names the cliques of splits).
    serial: u64,
    state: Mutex<State>,
}

static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[derive(Debug, Clone)]
struct Posted {
    fp: Fingerprint,
    /// The rank that posted first.
    first: usize,
    /// The ranks that posted it.
    ranks: Vec<usize>,
}

#[derive(Debug, Clone)]
enum Side {
    Send(usize, String),
    Recv(usize, String),
}

#[derive(Debug, Clone, Default)]
struct State {
    /// Ranks whose communicator lives in this process.
    members: Vec<usize>,
    /// Members whose rank is not known yet (a split under way): until they
    /// are bound, no position is complete, and sends to any rank are kept.
    pending: usize,
    /// Why the ranks are out of step, once they are.
    broken: Option<String>,
    /// The position of each rank's next collective.
    next: HashMap<usize, u64>,
    /// Collectives posted by some members but not yet all.
    posted: BTreeMap<u64, Posted>,
    /// Unmatched sends or receives per (sender, receiver).
    p2p: HashMap<(usize, usize), VecDeque<Side>>,
}

impl State {
    fn complete(&self, p: &Posted) -> bool {
        self.pending == 0 && self.members.iter().all(|m| p.ranks.contains(m))
    }

    /// Drop what no member is left to complete.
    fn prune(&mut self) {
        let done: Vec<u64> = self
            .posted
            .iter()
            .filter(|(_, p)| p.ranks.is_empty() || self.complete(p))
            .map(|(k, _)| *k)
            .collect();
        for k in done {
            self.posted.remove(&k);
        }
        if self.pending == 0 {
            let members = self.members.clone();
            self.p2p
                .retain(|(a, b), _| members.contains(a) && members.contains(b));
        }
    }

    fn collective(&mut self, rank: usize, fp: Fingerprint) -> Result<()> {
        // Nothing changes before the call is known to agree.
        let seq = self.next.get(&rank).copied().unwrap_or(0);
        if let Some(p) = self.posted.get(&seq)
            && p.fp.key != fp.key
        {
            return Err(Error::mismatch(
                format!(
                    "collective #{} of rank {rank} against the same collective of rank \
                             {} (both in this process; NCCL does not compare them, and a larger \
                             count writes past the smaller rank's buffer), rank {} posted",
                    seq.saturating_add(1),
                    p.first,
                    p.first
                ),
                &p.fp.text,
                fp.text,
            ));
        }
        self.next.insert(rank, seq.saturating_add(1));
        match self.posted.get_mut(&seq) {
            Some(p) => p.ranks.push(rank),
            None => {
                self.posted.insert(
                    seq,
                    Posted {
                        fp,
                        first: rank,
                        ranks: vec![rank],
                    },
                );
            }
        }
        if self.posted.get(&seq).is_some_and(|p| self.complete(p)) {
            self.posted.remove(&seq);
        }
        Ok(())
    }

    fn p2p(
        &mut self,
        me: usize,
        peer: usize,
        send: bool,
        bytes: usize,
        text: String,
    ) -> Result<()> {
        if !self.members.contains(&peer) && self.pending == 0 {
            // The peer lives in another process: not checkable here.
            return Ok(());
        }
        let key = if send { (me, peer) } else { (peer, me) };
        let q = self.p2p.entry(key).or_default();
        let partner = match q.front() {
            Some(Side::Recv(b, t)) if send => Some((*b, t)),
            Some(Side::Send(b, t)) if !send => Some((*b, t)),
            _ => None,
        };
        // Nothing changes before the call is known to agree.
        match partner {
            Some((b, t)) => {
                if b != bytes {
                    let e = Error::mismatch(
                        format!(
                            "the {} of rank {me} against its partner on rank {peer} (both in \
                             this process; NCCL lets a sender write its own size into the \
                             receiver's buffer), in bytes: rank {peer} posted {t}, rank {me}",
                            if send { "send" } else { "recv" },
                        ),
                        b,
                        format!("{bytes} ({text})"),
                    );
                    if q.is_empty() {
                        self.p2p.remove(&key);
                    }
                    return Err(e);
                }
                q.pop_front();
            }
            None => q.push_back(if send {
                Side::Send(bytes, text)
            } else {
                Side::Recv(bytes, text)
            }),
        }
        if q.is_empty() {
            self.p2p.remove(&key);
        }
        Ok(())
    }

    fn post(&mut self, rank: usize, call: &Call) -> Result<()> {
        if let Some(why) = &self.broken {
            return Err(broken_error(rank, why));
        }
        match call.p2p() {
            Some((send, peer)) => self.p2p(rank, peer, send, call.bytes(), call.describe()),
            None => self.collective(rank, call.fingerprint()),
        }
    }

    fn leave(&mut self, rank: usize) {
        self.members.retain(|&m| m != rank);
        for p in self.posted.values_mut() {
            p.ranks.retain(|&r| r != rank);
        }
        self.p2p.retain(|(a, b), _| *a != rank && *b != rank);
        self.next.remove(&rank);
        self.prune();
    }
}

fn broken_error(rank: usize, why: &str) -> Error {
    Error::invalid(
        "communicator",
        format!(
            "is out of step with the other ranks of this process ({why}); abort its \
             communicators and make new ones"
        ),
        format!("rank {rank}"),
    )
}

impl Clique {
    fn new(size: Option<usize>, members: Vec<usize>) -> Self {
        Clique {
            size,
            serial: SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            state: Mutex::new(State {
                members,
                ..State::default()
            }),
        }
    }

    fn size_matches(&self, size: usize) -> bool {
        self.size.is_none_or(|s| s == size)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // No code that can panic runs under the lock; take the data anyway.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A clique of every rank of a `size`-rank communicator (`init_all`):
    /// one member per rank.
    pub(crate) fn all_local(size: usize) -> Vec<Member> {
        let c = Arc::new(Clique::new(Some(size), (0..size).collect()));
        (0..size)
            .map(|rank| Member::new(Arc::clone(&c), rank))
            .collect()
    }
}

/// One communicator's place in its clique; leaving (drop) takes its rank
/// out, so the others stop waiting for it.
#[derive(Debug)]
pub(crate) struct Member {
    clique: Arc<Clique>,
    rank: usize,
    /// How many splits this member took part in (every rank of a
    /// communicator splits in the same order, so the n-th split of each
    /// names the same new communicators).
    splits: std::sync::atomic::AtomicU64,
    /// Left the clique already (its communicator was aborted).
    left: std::sync::atomic::AtomicBool,
}

impl Drop for Member {
    fn drop(&mut self) {
        self.leave();
    }
}

/// A member of a split's clique whose rank is not known yet: registered
/// before `ncclCommSplit` is called, bound to its rank after.
#[derive(Debug)]
pub(crate) struct Pending {
    clique: Option<Arc<Clique>>,
}

impl Pending {
    /// The new communicator's rank is `rank` of `size`. Always a member of
    /// the split's clique: when the new communicator cannot be compared
    /// with the others (its clique is out of step already, or it does not
    /// fit them) the clique is, or is made, broken, so every call of it is
    /// refused; it never goes on uncompared (a sibling may have launched a
    /// call with a count it would not be compared with). A split with no
    /// color (NCCL makes no communicator for it) binds to a clique of its
    /// own, broken.
    pub(crate) fn bind(mut self, rank: usize, size: usize) -> Member {
        let Some(c) = self.clique.take() else {
            let c = Arc::new(Clique::new(None, Vec::new()));
            c.lock().broken = Some(format!(
                "rank {rank} of {size} split with no color, yet NCCL made a communicator"
            ));
            return Member::new(c, rank);
        };
        {
            let mut s = c.lock();
            s.pending = s.pending.saturating_sub(1);
            if s.broken.is_none() {
                if c.size_matches(size) && !s.members.contains(&rank) {
                    s.members.push(rank);
                } else {
                    // Not comparable after all (should not happen): refuse
                    // the clique's calls rather than compare wrongly.
                    s.broken = Some(format!(
                        "a split's communicator of rank {rank} of {size} did not fit the others"
                    ));
                }
            }
            // With the last pending member bound, what waited for it (a
            // send to a rank of another process) can go.
            s.prune();
        }
        Member::new(c, rank)
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(c) = self.clique.take() {
            let mut s = c.lock();
            s.pending = s.pending.saturating_sub(1);
            s.prune();
        }
    }
}

impl Member {
    fn new(clique: Arc<Clique>, rank: usize) -> Self {
        Member {
            clique,
            rank,
            splits: std::sync::atomic::AtomicU64::new(0),
            left: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Take this rank out of its clique (once): its communicator was
    /// aborted and makes no more calls, so the other ranks' positions no
    /// longer wait for it (they complete, and are forgotten, without it).
    pub(crate) fn leave(&self) {
        if !self.left.swap(true, std::sync::atomic::Ordering::AcqRel) {
            self.clique.lock().leave(self.rank);
        }
    }

    /// Register for the communicator this member's next split with
    /// `color` makes (`None`: no color, no new communicator), before
    /// `ncclCommSplit` is called: the ranks of this process that split with
    /// the same color join one clique.
    pub(crate) fn split(&self, color: Option<u32>) -> Pending {
        let seq = self
            .splits
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Some(color) = color else {
            return Pending { clique: None };
        };
        let key = Key::Split(self.clique.serial, seq, color);
        let mut reg = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
        let reg = reg.get_or_insert_with(HashMap::new);
        reg.retain(|_, w| w.strong_count() > 0);
        let c = match reg.get(&key).and_then(Weak::upgrade) {
            Some(c) => c,
            None => {
                let c = Arc::new(Clique::new(None, Vec::new()));
                reg.insert(key, Arc::downgrade(&c));
                c
            }
        };
        c.lock().pending += 1;
        Pending { clique: Some(c) }
    }

    /// Positions and p2p entries its clique still holds (tests).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        let s = self.clique.lock();
        s.posted.len() + s.p2p.values().map(VecDeque::len).sum::<usize>()
    }

    /// The rank this member was registered with.
    pub(crate) fn rank(&self) -> usize {
        self.rank
    }

    /// Mark the clique out of step: a call was posted and not launched.
    pub(crate) fn break_with(&self, why: &str) {
        let mut s = self.clique.lock();
        if s.broken.is_none() {
            s.broken = Some(why.to_string());
        }
    }
}

/// What names a clique in the registry: the unique id of `init_rank`, or
/// (parent clique, split number, color) of a split.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Id([u8; UNIQUE_ID_BYTES]),
    Split(u64, u64, u32),
}

type Registry = HashMap<Key, Weak<Clique>>;

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

/// Register rank `rank` of the `size`-rank communicator named by `id`,
/// *before* NCCL is asked to make it: NCCL's initialisation returns on no
/// rank before every rank called it, so every rank of this process is a
/// member before any of them can post a call. A rank registered twice (a
/// reused id) gets a clique of its own (its calls are not compared).
pub(crate) fn join(id: &[u8; UNIQUE_ID_BYTES], rank: usize, size: usize) -> Member {
    let mut reg = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    let reg = reg.get_or_insert_with(HashMap::new);
    reg.retain(|_, w| w.strong_count() > 0);
    let key = Key::Id(*id);
    let member = |clique| Member::new(clique, rank);
    if let Some(c) = reg.get(&key).and_then(Weak::upgrade)
        && c.size_matches(size)
    {
        let mut s = c.lock();
        if !s.members.contains(&rank) && s.broken.is_none() {
            s.members.push(rank);
            drop(s);
            return member(c);
        }
    }
    let c = Arc::new(Clique::new(Some(size), vec![rank]));
    if reg.get(&key).is_none_or(|w| w.strong_count() == 0) {
        reg.insert(key, Arc::downgrade(&c));
    }
    member(c)
}

/// Post `calls` (each with its member) to their cliques: all are compared
/// and, only when every one agrees, recorded; on a mismatch nothing is
/// recorded. Cliques are locked in address order (no deadlock with another
/// thread posting to the same ones).
///
/// # Errors
/// [`Error::Mismatch`] naming both calls; [`Error::InvalidArgument`] when a
/// clique is out of step.
pub(crate) fn post(calls: &[(&Member, &Call)]) -> Result<()> {
    if let [(m, call)] = calls {
        // One call: `State::post` changes nothing unless it agrees.
        return m.clique.lock().post(m.rank, call);
    }
    let mut cliques: Vec<&Arc<Clique>> = Vec::new();
    for (m, _) in calls {
        if !cliques.iter().any(|c| Arc::ptr_eq(c, &m.clique)) {
            cliques.push(&m.clique);
        }
    }
    cliques.sort_by_key(|c| Arc::as_ptr(c) as usize);
    let mut guards: Vec<MutexGuard<'_, State>> = cliques.iter().map(|c| c.lock()).collect();
    let mut scratch: Vec<State> = guards.iter().map(|g| (**g).clone()).collect();
    for (m, call) in calls {
        let i = cliques
            .iter()
            .position(|c| Arc::ptr_eq(c, &m.clique))
            .unwrap_or_default();
        if let Some(s) = scratch.get_mut(i) {
            s.post(m.rank, call)?;
        }
    }
    for (g, s) in guards.iter_mut().zip(scratch) {
        **g = s;
    }
    Ok(())
}
