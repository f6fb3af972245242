//! The rendezvous over TCP.
//!
//! A rank says `CUDNNRS2`, its rank and world size (4 bytes each, big
//! endian), and the token (2-byte length, then its bytes; length 0 for
//! none). Rank 0 answers `0` and the id's 128 bytes, or `1`, a 2-byte
//! length and why it refuses.
//!
//! Rank 0 serves every connection on its own thread (at most
//! [`MAX_IN_FLIGHT`] at once), each within [`CONN_LIMIT`] and the
//! deadline, so a silent or slow peer holds up nobody. A connection that is
//! not a rank of this job (wrong magic, token, world size or rank, a rank
//! already served) is refused and dropped, and the rendezvous goes on; what
//! was refused is listed if rank 0 times out. The deadline bounds the whole
//! exchange on both sides, name resolution included, however a peer paces
//! its bytes.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use super::deadline::{Deadline, read_exact_by, write_all_by};
use super::env::{MAX_TOKEN_BYTES, Token};
use crate::nccl::{Ranks, UNIQUE_ID_BYTES, UniqueId};

const MAGIC: &[u8; 8] = b"CUDNNRS2";
/// The fixed part of a rank's hello: magic, rank, size, token length.
const HELLO: usize = 8 + 4 + 4 + 2;
/// The longest rank 0 spends on one connection.
pub(crate) const CONN_LIMIT: Duration = Duration::from_secs(5);
/// Connections rank 0 serves at once; more are dropped (the ranks retry).
pub(crate) const MAX_IN_FLIGHT: usize = 64;
const POLL: Duration = Duration::from_millis(20);
/// Pause between failed name resolutions.
const RESOLVE_RETRY: Duration = Duration::from_millis(250);
/// How long resolved addresses are used before asking again.
const RESOLVE_AGAIN: Duration = Duration::from_secs(2);
/// The longest one connection attempt may take.
const CONNECT_LIMIT: Duration = Duration::from_secs(2);
/// Refusals remembered for the timeout message, at most.
const NOTES: usize = 16;

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

#[derive(Default)]
struct Book {
    slots: HashMap<usize, Slot>,
    served: usize,
    notes: Vec<String>,
}

impl Book {
    fn note(&mut self, n: String) {
        if self.notes.len() < NOTES && !self.notes.contains(&n) {
            self.notes.push(n);
        }
    }
}

struct Shared {
    size: usize,
    id: [u8; UNIQUE_ID_BYTES],
    token: Option<Token>,
    book: Mutex<Book>,
    in_flight: AtomicUsize,
}

impl Shared {
    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        // A handler thread cannot panic holding the lock (no panicking code
        // runs under it); take the data even if one did.
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Rank 0: listen on `host:port` and hand `id` to every other rank.
pub(crate) fn serve(
    host: &str,
    port: u16,
    ranks: Ranks,
    id: &UniqueId,
    token: Option<&Token>,
    deadline: Deadline,
) -> Result<(), String> {
    let addrs = resolve_until(host, port, deadline)?;
    let mut errors = Vec::new();
    let mut listener = None;
    for a in &addrs {
        match TcpListener::bind(a) {
            Ok(l) => {
                listener = Some(l);
                break;
            }
            Err(e) => errors.push(format!("{a}: {e}")),
        }
    }
    let listener = listener.ok_or_else(|| {
        format!(
            "cannot listen on {host} port {port} ({}); rank 0 listens on the rendezvous \
             address itself, so it must be one of rank 0's own addresses",
            errors.join("; ")
        )
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("listening socket: {e}"))?;
    let shared = Arc::new(Shared {
        size: ranks.size(),
        id: id.to_bytes(),
        token: token.cloned(),
        book: Mutex::new(Book::default()),
        in_flight: AtomicUsize::new(0),
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
                return Err(format!(
                    "timed out waiting for {more} rank(s) ({missing:?}{}) to connect{}",
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
            Ok((conn, peer)) => {
                if shared.in_flight.load(Ordering::Acquire) >= MAX_IN_FLIGHT {
                    shared.book().note(format!(
                        "{peer}: dropped, {MAX_IN_FLIGHT} connections already in progress"
                    ));
                    continue;
                }
                shared.in_flight.fetch_add(1, Ordering::AcqRel);
                let s = Arc::clone(&shared);
                let limit = deadline.or_within(CONN_LIMIT);
                let spawned = std::thread::Builder::new()
                    .name("cudnn-rendezvous-serve".into())
                    .spawn(move || {
                        handle(conn, peer, &s, limit);
                        s.in_flight.fetch_sub(1, Ordering::AcqRel);
                    });
                if let Err(e) = spawned {
                    shared.in_flight.fetch_sub(1, Ordering::AcqRel);
                    shared
                        .book()
                        .note(format!("{peer}: dropped, cannot start a thread: {e}"));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => deadline.sleep(POLL),
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

fn word(b: &[u8], at: usize) -> usize {
    let mut w = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        w.copy_from_slice(s);
    }
    u32::from_be_bytes(w) as usize
}

/// Serve one connection within `limit`; every outcome is booked.
fn handle(mut conn: TcpStream, peer: SocketAddr, shared: &Shared, limit: Deadline) {
    if conn.set_nonblocking(false).is_err() {
        return;
    }
    let _ = conn.set_nodelay(true);
    let mut hello = [0u8; HELLO];
    if read_exact_by(&mut conn, &mut hello, limit).is_err() || !hello.starts_with(MAGIC) {
        return;
    }
    let (rank, size) = (word(&hello, 8), word(&hello, 12));
    let token_len = u16::from_be_bytes([hello[16], hello[17]]) as usize;
    let refuse = |conn: &mut TcpStream, why: String| {
        let msg = why.as_bytes();
        let len = msg.len().min(u16::MAX as usize);
        let mut reply = vec![1u8];
        reply.extend_from_slice(&(len as u16).to_be_bytes());
        reply.extend_from_slice(msg.get(..len).unwrap_or_default());
        let _ = write_all_by(conn, &reply, limit);
        shared.book().note(format!("{peer}: {why}"));
    };
    if token_len > MAX_TOKEN_BYTES {
        return refuse(&mut conn, format!("a token of {token_len} bytes"));
    }
    let mut token = vec![0u8; token_len];
    if read_exact_by(&mut conn, &mut token, limit).is_err() {
        return;
    }
    match &shared.token {
        Some(t) if !t.matches(&token) => {
            return refuse(
                &mut conn,
                "a wrong or missing token (CUDNN_RS_RENDEZVOUS_TOKEN)".into(),
            );
        }
        None if token_len > 0 => {
            return refuse(
                &mut conn,
                "a token, but rank 0 has none (give every rank the same \
                 CUDNN_RS_RENDEZVOUS_TOKEN)"
                    .into(),
            );
        }
        _ => {}
    }
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
    let mut reply = Vec::with_capacity(1 + UNIQUE_ID_BYTES);
    reply.push(0u8);
    reply.extend_from_slice(&shared.id);
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
    let t = token.map(Token::as_bytes).unwrap_or_default();
    let mut hello = Vec::with_capacity(HELLO + t.len());
    hello.extend_from_slice(MAGIC);
    // Ranks::new keeps the size within i32, so both fit u32.
    hello.extend_from_slice(&(ranks.rank() as u32).to_be_bytes());
    hello.extend_from_slice(&(ranks.size() as u32).to_be_bytes());
    hello.extend_from_slice(&(t.len() as u16).to_be_bytes());
    hello.extend_from_slice(t);
    if let Err(e) = write_all_by(conn, &hello, deadline) {
        return io(e);
    }
    let mut status = [0u8; 1];
    if let Err(e) = read_exact_by(conn, &mut status, deadline) {
        return io(e);
    }
    match status[0] {
        0 => {
            let mut bytes = [0u8; UNIQUE_ID_BYTES];
            match read_exact_by(conn, &mut bytes, deadline) {
                Ok(()) => Attempt::Id(UniqueId::from(bytes)),
                Err(e) => io(e),
            }
        }
        1 => {
            let mut len = [0u8; 2];
            if let Err(e) = read_exact_by(conn, &mut len, deadline) {
                return io(e);
            }
            let mut msg = vec![0u8; u16::from_be_bytes(len) as usize];
            if let Err(e) = read_exact_by(conn, &mut msg, deadline) {
                return io(e);
            }
            Attempt::Refused(format!("rank 0 refused: {}", String::from_utf8_lossy(&msg)))
        }
        other => Attempt::Refused(format!(
            "what listens there is not rank 0 of this crate's rendezvous (answered {other:#04x})"
        )),
    }
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
