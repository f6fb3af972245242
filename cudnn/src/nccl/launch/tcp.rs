//! The rendezvous over TCP.
//!
//! 1. A rank sends `CUDNNRS4`, its rank and world size (4 bytes each, big
//!    endian), `1` if it holds a token (else `0`) and a fresh 16-byte nonce.
//! 2. Rank 0 answers `0` and its own fresh nonce (16 bytes), or `1`, a
//!    2-byte length and why it refuses (only when one side holds a token
//!    and the other none: this refusal is not authenticated).
//! 3. The rank sends its proof (32 bytes).
//! 4. Rank 0 checks it; after a wrong proof it sends `2` (nothing keyed by
//!    the token) and ends the connection. Otherwise it sends `0` and its own
//!    proof (32 bytes), then `0`, the id (128 bytes) and a tag (32 bytes),
//!    or `1`, a 2-byte length, why it refuses and a tag.
//! 5. The rank checks rank 0's proof and the tag.
//!
//! With a token, a proof is HMAC-SHA256 keyed by the token over a label for
//! the side, both nonces, the rank and the world size; the id travels
//! masked by an HMAC-derived pad for this connection; the tag is an HMAC
//! over the answer. The token itself never travels, a rank rejects a
//! server that cannot prove it holds the token (or whose answer does not
//! carry a valid tag), and rank 0 refuses a rank that cannot. Without a
//! token the proofs and tags are zeros and the id travels in clear.
//!
//! **The peer proves first.** Rank 0 emits nothing keyed by the token
//! before the peer has proved it holds the token, so a peer that does not
//! know it learns no MAC it could test guesses against offline. The
//! symmetric exposure remains on the other side: whatever answers at rank
//! 0's address (a process that took the port first) chooses the nonce each
//! connecting rank then proves over, so it gets one MAC per connection and
//! can grind guesses against it offline. Tokens are therefore 128 bits
//! or more written as random bytes (hex or base64: see
//! [`Token::new`](super::env::Token::new)), which no offline search
//! exhausts.
//!
//! Rank 0 serves every connection on its own thread, at most
//! [`MAX_IN_FLIGHT`] at once: a connection has [`HELLO_LIMIT`] to prove
//! itself, then up to [`CONN_LIMIT`] (and the deadline) to take its
//! answer. When every place is taken, the oldest connection that has not
//! proved itself yet is dropped for the new one (a rank that loses its
//! place retries), so silent connections cannot keep the ranks out. A
//! connection that is not a rank of this job (wrong magic, proof, world
//! size or rank, a rank already served) is refused and dropped, and the
//! rendezvous goes on; what was refused is listed if rank 0 times out.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use super::deadline::{Deadline, read_exact_by, write_all_by};
use super::env::Token;
use crate::nccl::{Ranks, UNIQUE_ID_BYTES, UniqueId};

const MAGIC: &[u8; 8] = b"CUDNNRS4";
/// Bytes in a nonce.
const NONCE: usize = 16;
/// Bytes in a proof or a tag (HMAC-SHA256).
const TAG: usize = 32;
/// A rank's hello: magic, rank, size, token flag, nonce.
const HELLO: usize = 8 + 4 + 4 + 1 + NONCE;
/// The longest a connection may take to prove itself.
pub(crate) const HELLO_LIMIT: Duration = Duration::from_secs(1);
/// The longest rank 0 spends on one connection in all.
pub(crate) const CONN_LIMIT: Duration = Duration::from_secs(5);
/// Connections rank 0 serves at once; past that, the oldest one that has
/// not proved itself is dropped for the new one.
pub(crate) const MAX_IN_FLIGHT: usize = 64;
/// How often rank 0 looks at its book while no peer connects (a peer that
/// connects wakes it at once on Unix), and a rank's pause between attempts
/// to reach rank 0.
const POLL: Duration = Duration::from_millis(20);
/// Pause between failed name resolutions.
const RESOLVE_RETRY: Duration = Duration::from_millis(250);
/// How long resolved addresses are used before asking again.
const RESOLVE_AGAIN: Duration = Duration::from_secs(2);
/// The longest one connection attempt may take.
const CONNECT_LIMIT: Duration = Duration::from_secs(2);
/// Refusals remembered for the timeout message, at most.
const NOTES: usize = 16;

/// What a rank reports when rank 0 fails to prove the token.
const NOT_RANK0: &str = "what listens there failed to prove it holds the token \
     (CUDNN_RS_RENDEZVOUS_TOKEN): it is not rank 0 of this job (another job, \
     a process holding the port, or rank 0 with another token)";

/// A fresh nonce from the operating system.
fn nonce() -> Result<[u8; NONCE], String> {
    let mut n = [0u8; NONCE];
    getrandom::fill(&mut n).map_err(|e| format!("drawing a nonce: {e}"))?;
    Ok(n)
}

/// What both sides' proofs, the pad and the tags cover.
struct Context {
    bytes: Vec<u8>,
}

impl Context {
    fn new(rank_nonce: &[u8], rank0_nonce: &[u8], rank: u32, size: u32) -> Self {
        let mut bytes = Vec::with_capacity(2 * NONCE + 8);
        bytes.extend_from_slice(rank_nonce);
        bytes.extend_from_slice(rank0_nonce);
        bytes.extend_from_slice(&rank.to_be_bytes());
        bytes.extend_from_slice(&size.to_be_bytes());
        Context { bytes }
    }

    /// The keyed MAC of `label`, this context and `extra`; zeros without a
    /// token.
    fn mac(&self, token: Option<&Token>, label: &[u8], extra: &[&[u8]]) -> [u8; TAG] {
        match token {
            None => [0u8; TAG],
            Some(t) => {
                let mut parts: Vec<&[u8]> = vec![label, &self.bytes];
                parts.extend_from_slice(extra);
                t.mac(&parts)
            }
        }
    }

    fn check(&self, token: Option<&Token>, label: &[u8], extra: &[&[u8]], tag: &[u8]) -> bool {
        match token {
            None => true,
            Some(t) => {
                let mut parts: Vec<&[u8]> = vec![label, &self.bytes];
                parts.extend_from_slice(extra);
                t.verify(&parts, tag)
            }
        }
    }

    /// The id masked (or unmasked) with this connection's pad.
    fn mask(&self, token: Option<&Token>, id: &mut [u8; UNIQUE_ID_BYTES]) {
        if token.is_none() {
            return;
        }
        for (i, chunk) in id.chunks_mut(TAG).enumerate() {
            let pad = self.mac(token, b"cudnn-rs id pad", &[&[i as u8]]);
            for (b, p) in chunk.iter_mut().zip(pad) {
                *b ^= p;
            }
        }
    }
}

const RANK0_PROOF: &[u8] = b"cudnn-rs rank 0 proof";
/// Rank 0's answer to a wrong proof (then it ends the connection).
const WRONG_PROOF: u8 = 2;
const RANK_PROOF: &[u8] = b"cudnn-rs rank proof";
const ANSWER_TAG: &[u8] = b"cudnn-rs answer";

/// `host:port`'s addresses, asked on another thread so a slow resolver
/// cannot hold the caller past the deadline.
fn resolve(host: &str, port: u16, deadline: Deadline) -> Result<Vec<SocketAddr>, String> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let left = deadline
        .remaining()
        .ok_or_else(|| format!("resolving {host}: the deadline passed"))?;
    let (tx, rx) = mpsc::channel();
    let name = host.to_string();
    std::thread::Builder::new()
        .name("cudnn-rendezvous-resolve".into())
        .spawn(move || {
            let r = (name.as_str(), port)
                .to_socket_addrs()
                .map(Iterator::collect::<Vec<_>>);
            let _ = tx.send(r);
        })
        .map_err(|e| format!("resolving {host}: cannot start a thread: {e}"))?;
    match rx.recv_timeout(left) {
        Ok(Ok(addrs)) if !addrs.is_empty() => Ok(addrs),
        Ok(Ok(_)) => Err(format!("resolving {host}: no address")),
        Ok(Err(e)) => Err(format!("resolving {host}: {e}")),
        Err(_) => Err(format!("resolving {host}: no answer before the deadline")),
    }
}

/// [`resolve`], retried until it works or the deadline passes.
fn resolve_until(host: &str, port: u16, deadline: Deadline) -> Result<Vec<SocketAddr>, String> {
    loop {
        match resolve(host, port, deadline) {
            Ok(a) => return Ok(a),
            Err(e) if deadline.remaining().is_none() => return Err(format!("timed out: {e}")),
            Err(_) => deadline.sleep(RESOLVE_RETRY),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Slot {
    InProgress,
    Served,
}

/// One connection being served.
struct Conn {
    since: Instant,
    /// A handle on the same socket, to drop the connection from outside.
    stream: TcpStream,
    proved: bool,
}

#[derive(Default)]
struct Book {
    slots: HashMap<usize, Slot>,
    served: usize,
    notes: Vec<String>,
    conns: HashMap<u64, Conn>,
    next: u64,
}

impl Book {
    fn note(&mut self, n: String) {
        if self.notes.len() < NOTES && !self.notes.contains(&n) {
            self.notes.push(n);
        }
    }

    /// Make room for one more connection: `false` when every place is held
    /// by a connection that proved itself.
    fn make_room(&mut self) -> bool {
        if self.conns.len() < MAX_IN_FLIGHT {
            return true;
        }
        let oldest = self
            .conns
            .iter()
            .filter(|(_, c)| !c.proved)
            .min_by_key(|(_, c)| c.since)
            .map(|(&k, _)| k);
        match oldest.and_then(|k| self.conns.remove(&k)) {
            Some(c) => {
                // Its thread sees the connection end and returns.
                let _ = c.stream.shutdown(Shutdown::Both);
                if let Ok(p) = c.stream.peer_addr() {
                    self.note(format!(
                        "{p}: dropped for a newer connection, silent for {:?}",
                        c.since.elapsed()
                    ));
                }
                true
            }
            None => false,
        }
    }
}

struct Shared {
    size: usize,
    id: [u8; UNIQUE_ID_BYTES],
    token: Option<Token>,
    book: Mutex<Book>,
}

impl Shared {
    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        // A handler thread cannot panic holding the lock (no panicking code
        // runs under it); take the data even if one did.
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Rank 0: listen on `host:port` and hand `id` to every other rank.
/// `remote_ranks`: the launcher says some ranks run on other machines, so
/// a loopback address cannot be the rendezvous.
pub(crate) fn serve(
    host: &str,
    port: u16,
    ranks: Ranks,
    id: &UniqueId,
    token: Option<&Token>,
    remote_ranks: bool,
    deadline: Deadline,
) -> Result<(), String> {
    let addrs = resolve_until(host, port, deadline)?;
    let mut errors = Vec::new();
    let mut in_use = 0;
    let mut listener = None;
    for a in &addrs {
        if remote_ranks && a.ip().is_loopback() {
            errors.push(format!(
                "{a} is a loopback address, and the launcher's local world size says \
                 some ranks run on other machines, which cannot reach it"
            ));
            continue;
        }
        match TcpListener::bind(a) {
            Ok(l) => {
                listener = Some(l);
                break;
            }
            Err(e) => {
                in_use += usize::from(e.kind() == std::io::ErrorKind::AddrInUse);
                errors.push(format!("{a}: {e}"));
            }
        }
    }
    if listener.is_none() && in_use > 0 && in_use == errors.len() {
        // Taken (torchrun's own store on MASTER_PORT): say what to set first.
        let var = |name: &str| std::env::var(name).ok();
        return Err(format!(
            "{} ({})",
            super::in_use::hint(host, port, &var),
            errors.join("; ")
        ));
    }
    let listener = listener.ok_or_else(|| {
        format!(
            "cannot listen on {host} port {port} ({}); rank 0 listens on the rendezvous \
             address itself, so it must be one of rank 0's own addresses that every rank \
             reaches",
            errors.join("; ")
        )
    })?;
    let bound = listener.local_addr().map(|a| a.ip()).ok();
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("listening socket: {e}"))?;
    let shared = Arc::new(Shared {
        size: ranks.size(),
        id: id.to_bytes(),
        token: token.cloned(),
        book: Mutex::new(Book::default()),
    });
    loop {
        {
            let book = shared.book();
            if book.served + 1 >= shared.size {
                return Ok(());
            }
            if deadline.remaining().is_none() {
                let missing: Vec<usize> = (1..shared.size)
                    .filter(|r| book.slots.get(r) != Some(&Slot::Served))
                    .take(NOTES)
                    .collect();
                let more = shared.size - 1 - book.served;
                let hint = match bound {
                    Some(ip) if ip.is_loopback() => format!(
                        "; rank 0 listens on {ip}, a loopback address: ranks on other \
                         machines cannot reach it (set MASTER_ADDR or {} to an address of \
                         rank 0's they reach)",
                        super::address::RENDEZVOUS_VAR
                    ),
                    _ => String::new(),
                };
                return Err(format!(
                    "timed out waiting for {more} rank(s) ({missing:?}{}) to connect{}{hint}",
                    if more > missing.len() { ", ..." } else { "" },
                    if book.notes.is_empty() {
                        String::new()
                    } else {
                        format!("; refused: {}", book.notes.join("; "))
                    }
                ));
            }
        }
        match listener.accept() {
            Ok((conn, peer)) => accept(&shared, conn, peer, deadline),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                deadline.wait_for_peer(&listener, POLL)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                // Out of descriptors, a connection reset before accept: the
                // listener itself is fine.
                shared.book().note(format!("accepting: {e}"));
                deadline.sleep(POLL);
            }
        }
    }
}

/// Book a new connection (dropping the oldest unproved one if need be)
/// and serve it on its own thread.
fn accept(shared: &Arc<Shared>, conn: TcpStream, peer: SocketAddr, deadline: Deadline) {
    let Ok(handle_copy) = conn.try_clone() else {
        shared
            .book()
            .note(format!("{peer}: dropped, cannot share its socket"));
        return;
    };
    let key = {
        let mut book = shared.book();
        if !book.make_room() {
            book.note(format!(
                "{peer}: dropped, {MAX_IN_FLIGHT} ranks already being served"
            ));
            return;
        }
        let key = book.next;
        book.next = book.next.wrapping_add(1);
        book.conns.insert(
            key,
            Conn {
                since: Instant::now(),
                stream: handle_copy,
                proved: false,
            },
        );
        key
    };
    let s = Arc::clone(shared);
    let spawned = std::thread::Builder::new()
        .name("cudnn-rendezvous-serve".into())
        .spawn(move || {
            handle(conn, peer, &s, key, deadline);
            s.book().conns.remove(&key);
        });
    if let Err(e) = spawned {
        let mut book = shared.book();
        book.conns.remove(&key);
        book.note(format!("{peer}: dropped, cannot start a thread: {e}"));
    }
}

fn word(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        w.copy_from_slice(s);
    }
    u32::from_be_bytes(w)
}

/// A refusal: `1`, length, message, then (when `tag` is given) its tag.
fn refusal(why: &str, tag: Option<(&Context, Option<&Token>)>) -> Vec<u8> {
    let msg = why.as_bytes();
    let len = msg.len().min(u16::MAX as usize);
    let msg = msg.get(..len).unwrap_or_default();
    let mut reply = vec![1u8];
    reply.extend_from_slice(&(len as u16).to_be_bytes());
    reply.extend_from_slice(msg);
    if let Some((ctx, token)) = tag {
        reply.extend_from_slice(&ctx.mac(token, ANSWER_TAG, &[&[1u8], msg]));
    }
    reply
}

/// Serve one connection; every outcome is booked.
fn handle(mut conn: TcpStream, peer: SocketAddr, shared: &Shared, key: u64, deadline: Deadline) {
    let hello_limit = deadline.or_within(HELLO_LIMIT);
    let limit = deadline.or_within(CONN_LIMIT);
    if conn.set_nonblocking(false).is_err() {
        return;
    }
    let _ = conn.set_nodelay(true);
    let mut hello = [0u8; HELLO];
    if read_exact_by(&mut conn, &mut hello, hello_limit).is_err() || !hello.starts_with(MAGIC) {
        return;
    }
    let (rank, size) = (word(&hello, 8), word(&hello, 12));
    let has_token = hello.get(16).copied().unwrap_or_default();
    let their_nonce = hello.get(17..).unwrap_or_default();
    let token = shared.token.as_ref();
    let presence = match (token.is_some(), has_token) {
        (true, 0) => Some("no token, but rank 0 requires one (CUDNN_RS_RENDEZVOUS_TOKEN)"),
        (false, 1) => Some(
            "a token, but rank 0 has none (give every rank the same \
             CUDNN_RS_RENDEZVOUS_TOKEN, or none)",
        ),
        (_, 0 | 1) => None,
        _ => return,
    };
    if let Some(why) = presence {
        let _ = write_all_by(&mut conn, &refusal(why, None), hello_limit);
        shared.book().note(format!("{peer}: {why}"));
        return;
    }
    let Ok(mine) = nonce() else {
        shared.book().note(format!("{peer}: dropped, no nonce"));
        return;
    };
    let ctx = Context::new(their_nonce, &mine, rank, size);
    // Only the nonce: nothing keyed by the token before the peer proved it.
    let mut challenge = vec![0u8];
    challenge.extend_from_slice(&mine);
    if write_all_by(&mut conn, &challenge, hello_limit).is_err() {
        return;
    }
    let mut proof = [0u8; TAG];
    if read_exact_by(&mut conn, &mut proof, hello_limit).is_err() {
        return;
    }
    if !ctx.check(token, RANK_PROOF, &[], &proof) {
        let _ = write_all_by(&mut conn, &[WRONG_PROOF], hello_limit);
        shared
            .book()
            .note(format!("{peer}: a wrong token (CUDNN_RS_RENDEZVOUS_TOKEN)"));
        return;
    }
    {
        let mut book = shared.book();
        match book.conns.get_mut(&key) {
            Some(c) => c.proved = true,
            // Dropped for a newer connection meanwhile.
            None => return,
        }
    }
    // The peer proved the token: now rank 0 proves it too, before its
    // answer.
    let mut proved = vec![0u8];
    proved.extend_from_slice(&ctx.mac(token, RANK0_PROOF, &[]));
    if write_all_by(&mut conn, &proved, limit).is_err() {
        return;
    }
    let refuse = |conn: &mut TcpStream, why: String| {
        let _ = write_all_by(conn, &refusal(&why, Some((&ctx, token))), limit);
        shared.book().note(format!("{peer}: {why}"));
    };
    let (rank, size) = (rank as usize, size as usize);
    if size != shared.size {
        return refuse(
            &mut conn,
            format!("rank {rank} has world size {size}, rank 0 {}", shared.size),
        );
    }
    if rank == 0 || rank >= size {
        return refuse(
            &mut conn,
            format!("a peer claims rank {rank} (valid: 1..{size})"),
        );
    }
    {
        let mut book = shared.book();
        if book.slots.contains_key(&rank) {
            drop(book);
            return refuse(
                &mut conn,
                format!("rank {rank} connected twice (two processes with the same rank?)"),
            );
        }
        book.slots.insert(rank, Slot::InProgress);
    }
    let mut body = shared.id;
    ctx.mask(token, &mut body);
    let mut reply = Vec::with_capacity(1 + UNIQUE_ID_BYTES + TAG);
    reply.push(0u8);
    reply.extend_from_slice(&body);
    reply.extend_from_slice(&ctx.mac(token, ANSWER_TAG, &[&[0u8], &body]));
    let sent = write_all_by(&mut conn, &reply, limit);
    let mut book = shared.book();
    match sent {
        Ok(()) => {
            book.slots.insert(rank, Slot::Served);
            book.served += 1;
        }
        Err(e) => {
            book.slots.remove(&rank);
            book.note(format!("{peer}: sending the id to rank {rank}: {e}"));
        }
    }
}

/// What one attempt to talk to rank 0 gave.
enum Attempt {
    Id(UniqueId),
    /// Rank 0 (or whatever listens there) said no: final.
    Refused(String),
    /// The connection failed: try again until the deadline.
    Io(String),
}

fn talk(conn: &mut TcpStream, ranks: Ranks, token: Option<&Token>, deadline: Deadline) -> Attempt {
    let io = |e: io::Error| Attempt::Io(format!("talking to rank 0: {e}"));
    let mine = match nonce() {
        Ok(n) => n,
        Err(e) => return Attempt::Refused(e),
    };
    // Ranks::new keeps the size within i32, so both fit u32.
    let (rank, size) = (ranks.rank() as u32, ranks.size() as u32);
    let mut hello = Vec::with_capacity(HELLO);
    hello.extend_from_slice(MAGIC);
    hello.extend_from_slice(&rank.to_be_bytes());
    hello.extend_from_slice(&size.to_be_bytes());
    hello.push(u8::from(token.is_some()));
    hello.extend_from_slice(&mine);
    if let Err(e) = write_all_by(conn, &hello, deadline) {
        return io(e);
    }
    let mut status = [0u8; 1];
    if let Err(e) = read_exact_by(conn, &mut status, deadline) {
        return io(e);
    }
    match status[0] {
        0 => {}
        1 => {
            return match read_refusal(conn, deadline) {
                Ok(msg) => Attempt::Refused(format!(
                    "rank 0 refused{}: {}",
                    if token.is_some() {
                        " (not authenticated)"
                    } else {
                        ""
                    },
                    String::from_utf8_lossy(&msg)
                )),
                Err(e) => io(e),
            };
        }
        other => {
            return Attempt::Refused(format!(
                "what listens there is not rank 0 of this crate's rendezvous (answered \
                 {other:#04x})"
            ));
        }
    }
    let mut theirs = [0u8; NONCE];
    if let Err(e) = read_exact_by(conn, &mut theirs, deadline) {
        return io(e);
    }
    let ctx = Context::new(&mine, &theirs, rank, size);
    // This rank proves first (see the module's docs).
    if let Err(e) = write_all_by(conn, &ctx.mac(token, RANK_PROOF, &[]), deadline) {
        return io(e);
    }
    if let Err(e) = read_exact_by(conn, &mut status, deadline) {
        return io(e);
    }
    match status[0] {
        0 => {}
        WRONG_PROOF => {
            return Attempt::Refused(
                "rank 0 refused this rank's proof (not authenticated): the tokens differ \
                 (CUDNN_RS_RENDEZVOUS_TOKEN), or what listens there is not rank 0 of this job"
                    .into(),
            );
        }
        other => {
            return Attempt::Refused(format!(
                "what listens there is not rank 0 of this crate's rendezvous (answered \
                 {other:#04x})"
            ));
        }
    }
    let mut proof = [0u8; TAG];
    if let Err(e) = read_exact_by(conn, &mut proof, deadline) {
        return io(e);
    }
    if !ctx.check(token, RANK0_PROOF, &[], &proof) {
        return Attempt::Refused(NOT_RANK0.into());
    }
    if let Err(e) = read_exact_by(conn, &mut status, deadline) {
        return io(e);
    }
    match status[0] {
        0 => {
            let mut body = [0u8; UNIQUE_ID_BYTES];
            let mut tag = [0u8; TAG];
            if let Err(e) = read_exact_by(conn, &mut body, deadline)
                .and_then(|()| read_exact_by(conn, &mut tag, deadline))
            {
                return io(e);
            }
            if !ctx.check(token, ANSWER_TAG, &[&[0u8], &body], &tag) {
                return Attempt::Refused(format!("the id's tag is wrong: {NOT_RANK0}"));
            }
            ctx.mask(token, &mut body);
            Attempt::Id(UniqueId::from(body))
        }
        1 => {
            let msg = match read_refusal(conn, deadline) {
                Ok(m) => m,
                Err(e) => return io(e),
            };
            let mut tag = [0u8; TAG];
            if let Err(e) = read_exact_by(conn, &mut tag, deadline) {
                return io(e);
            }
            if !ctx.check(token, ANSWER_TAG, &[&[1u8], &msg], &tag) {
                return Attempt::Refused(format!("the refusal's tag is wrong: {NOT_RANK0}"));
            }
            Attempt::Refused(format!("rank 0 refused: {}", String::from_utf8_lossy(&msg)))
        }
        other => Attempt::Refused(format!(
            "what listens there is not rank 0 of this crate's rendezvous (answered {other:#04x})"
        )),
    }
}

/// A refusal's length and message.
fn read_refusal(conn: &mut TcpStream, deadline: Deadline) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 2];
    read_exact_by(conn, &mut len, deadline)?;
    let mut msg = vec![0u8; u16::from_be_bytes(len) as usize];
    read_exact_by(conn, &mut msg, deadline)?;
    Ok(msg)
}

/// A non-zero rank: connect to rank 0 (until it is up) and receive the id.
pub(crate) fn receive(
    host: &str,
    port: u16,
    ranks: Ranks,
    token: Option<&Token>,
    deadline: Deadline,
) -> Result<UniqueId, String> {
    let mut last = String::from("no attempt finished");
    // Addresses are asked again at most every RESOLVE_AGAIN while rank 0
    // is not up yet.
    let mut known: Option<(Vec<SocketAddr>, Instant)> = None;
    loop {
        if deadline.remaining().is_none() {
            return Err(format!("timed out reaching rank 0 ({last})"));
        }
        let addrs = match &known {
            Some((a, at)) if at.elapsed() < RESOLVE_AGAIN => a.clone(),
            _ => match resolve(host, port, deadline) {
                Ok(a) => {
                    known = Some((a.clone(), Instant::now()));
                    a
                }
                Err(e) => {
                    last = e;
                    deadline.sleep(RESOLVE_RETRY);
                    continue;
                }
            },
        };
        let mut conn = None;
        for a in &addrs {
            let Some(left) = deadline.remaining() else {
                last = format!("connecting to {a}: the deadline passed");
                break;
            };
            match TcpStream::connect_timeout(a, left.min(CONNECT_LIMIT)) {
                Ok(c) => {
                    conn = Some(c);
                    break;
                }
                Err(e) => last = format!("connecting to {a}: {e}"),
            }
        }
        let Some(mut conn) = conn else {
            deadline.sleep(POLL);
            continue;
        };
        let _ = conn.set_nodelay(true);
        match talk(&mut conn, ranks, token, deadline) {
            Attempt::Id(id) => return Ok(id),
            Attempt::Refused(why) => return Err(why),
            Attempt::Io(e) => {
                last = e;
                deadline.sleep(POLL);
            }
        }
    }
}
