//! The launch convention: which rank this process is, where the ranks meet
//! to share the [`UniqueId`], and which GPU it drives.
//!
//! Read from the environment the way torchrun (and `torch.distributed`'s
//! `env://`) sets it:
//!
//! | variable | meaning | when absent |
//! |---|---|---|
//! | `RANK` | this process's rank, `0..WORLD_SIZE` | single process, if `WORLD_SIZE` is absent too |
//! | `WORLD_SIZE` | number of processes | single process, if `RANK` is absent too |
//! | `LOCAL_RANK` | rank on this machine: the GPU ordinal it uses | `0` when `WORLD_SIZE` is 1, else an error |
//! | `LOCAL_WORLD_SIZE` | processes on this machine (checked against `LOCAL_RANK`) | not checked |
//! | `CUDNN_RS_RENDEZVOUS` | `file:///path`, a plain path, or `tcp://host:port` | `tcp://$MASTER_ADDR:$MASTER_PORT` |
//! | `MASTER_ADDR`, `MASTER_PORT` | host and port rank 0 listens on | an error when `WORLD_SIZE` > 1 |
//! | `CUDNN_RS_RENDEZVOUS_TIMEOUT` | seconds to wait for the others | 300 |
//!
//! Rank 0 makes the id and publishes it; the others wait for it:
//! - **file**: rank 0 writes the file atomically (a rename), every other
//!   rank reads it and leaves an acknowledgement file beside it, and rank 0
//!   removes them all once everyone has read it. The path must be on a file
//!   system all ranks see, and must not exist when the job starts (rank 0
//!   refuses to overwrite one left by a crashed run, rather than hand out a
//!   stale id);
//! - **tcp**: rank 0 listens on the port (on `host` when it is one of this
//!   machine's addresses, else on all interfaces), every other rank
//!   connects (retrying until rank 0 is up), says its rank and world size,
//!   and receives the id. Wrong world sizes and duplicate ranks are
//!   reported to both sides.
//!
//! Under torchrun itself, `MASTER_PORT` is taken by torchrun's own store:
//! set `CUDNN_RS_RENDEZVOUS=tcp://$MASTER_ADDR:<another port>`. Launchers
//! that only set the variables (mpirun, SLURM scripts) need nothing more.

use std::fmt;
use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant};

use super::{Communicator, Ranks, UniqueId, id::UNIQUE_ID_BYTES};
use crate::error::{Error, Result};
use crate::runtime::Device;

/// The variable naming the rendezvous explicitly.
pub const RENDEZVOUS_VAR: &str = "CUDNN_RS_RENDEZVOUS";
/// The variable giving the rendezvous timeout in seconds.
pub const TIMEOUT_VAR: &str = "CUDNN_RS_RENDEZVOUS_TIMEOUT";
/// The timeout when [`TIMEOUT_VAR`] is not set.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

const MAGIC: &[u8; 8] = b"CUDNNRS1";

/// Where the ranks meet to share the unique id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Rendezvous {
    /// A file on a file system every rank sees.
    File(PathBuf),
    /// A TCP address rank 0 listens on.
    Tcp {
        /// Host name or address.
        host: String,
        /// Port.
        port: u16,
    },
}

impl fmt::Display for Rendezvous {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rendezvous::File(p) => write!(f, "file://{}", p.display()),
            Rendezvous::Tcp { host, port } if host.contains(':') => {
                write!(f, "tcp://[{host}]:{port}")
            }
            Rendezvous::Tcp { host, port } => write!(f, "tcp://{host}:{port}"),
        }
    }
}

impl FromStr for Rendezvous {
    type Err = Error;

    /// `file:///path`, a plain path, or `tcp://host:port` (IPv6 hosts in
    /// brackets).
    fn from_str(s: &str) -> Result<Self> {
        let bad = |rule: &str| Error::invalid(RENDEZVOUS_VAR, rule.to_string(), format!("{s:?}"));
        if let Some(rest) = s.strip_prefix("tcp://") {
            let rest = rest.trim_end_matches('/');
            let (host, port) = rest
                .rsplit_once(':')
                .ok_or_else(|| bad("a tcp rendezvous is tcp://host:port"))?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            if host.is_empty() {
                return Err(bad("a tcp rendezvous names a host"));
            }
            let port: u16 = port
                .parse()
                .map_err(|_| bad("the port is a number in 1..=65535"))?;
            if port == 0 {
                return Err(bad("the port is a number in 1..=65535"));
            }
            return Ok(Rendezvous::Tcp {
                host: host.to_string(),
                port,
            });
        }
        let path = s.strip_prefix("file://").unwrap_or(s);
        if path.is_empty() || s.contains("://") && !s.starts_with("file://") {
            return Err(bad("must be file:///path, a path, or tcp://host:port"));
        }
        Ok(Rendezvous::File(PathBuf::from(path)))
    }
}

/// What the launcher told this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchEnv {
    /// Rank and world size.
    pub ranks: Ranks,
    /// Rank on this machine: the ordinal of the GPU this process drives.
    pub local_rank: usize,
    /// Processes on this machine, when the launcher said.
    pub local_world_size: Option<usize>,
    /// Where to meet; `None` for a single process.
    pub rendezvous: Option<Rendezvous>,
    /// How long to wait for the other ranks.
    pub timeout: Duration,
}

impl LaunchEnv {
    /// Read the process environment (see the [module docs](self)).
    ///
    /// # Errors
    /// As [`LaunchEnv::from_vars`].
    pub fn from_env() -> Result<Self> {
        Self::from_vars(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
    }

    /// Read the convention from `var` (a variable's value, `None` when
    /// unset), so it can be checked without touching the environment.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the variable: not a number, `RANK`
    /// without `WORLD_SIZE` (or the reverse), `RANK >= WORLD_SIZE`,
    /// `LOCAL_RANK` missing with several ranks or `>= LOCAL_WORLD_SIZE`, no
    /// rendezvous with several ranks, a malformed rendezvous.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let num = |name: &str| -> Result<Option<usize>> {
            match var(name) {
                None => Ok(None),
                Some(v) => v.trim().parse::<usize>().map(Some).map_err(|_| {
                    Error::invalid(name, "must be a non-negative integer", format!("{v:?}"))
                }),
            }
        };
        let (rank, size) = match (num("RANK")?, num("WORLD_SIZE")?) {
            (None, None) => (0, 1),
            (Some(r), Some(s)) => (r, s),
            (Some(r), None) => {
                return Err(Error::invalid(
                    "WORLD_SIZE",
                    "must be set when RANK is",
                    format!("unset (RANK={r})"),
                ));
            }
            (None, Some(s)) => {
                return Err(Error::invalid(
                    "RANK",
                    "must be set when WORLD_SIZE is",
                    format!("unset (WORLD_SIZE={s})"),
                ));
            }
        };
        let ranks = Ranks::new(rank, size).map_err(|e| match e {
            Error::InvalidArgument { rule, value, .. } if size == 0 => Error::InvalidArgument {
                arg: "WORLD_SIZE".into(),
                rule,
                value,
            },
            Error::InvalidArgument { rule, value, .. } => Error::InvalidArgument {
                arg: "RANK".into(),
                rule: format!("{rule} (WORLD_SIZE)"),
                value,
            },
            other => other,
        })?;
        let local_world_size = num("LOCAL_WORLD_SIZE")?;
        let local_rank = match num("LOCAL_RANK")? {
            Some(l) => l,
            None if size == 1 => 0,
            None => {
                return Err(Error::invalid(
                    "LOCAL_RANK",
                    "must be set when WORLD_SIZE > 1 (it picks this process's GPU)",
                    "unset",
                ));
            }
        };
        if let Some(lws) = local_world_size
            && local_rank >= lws
        {
            return Err(Error::invalid(
                "LOCAL_RANK",
                format!("must be less than LOCAL_WORLD_SIZE ({lws})"),
                local_rank,
            ));
        }
        let rendezvous = match var(RENDEZVOUS_VAR) {
            Some(r) => Some(r.parse()?),
            None => match (var("MASTER_ADDR"), var("MASTER_PORT")) {
                (Some(host), Some(port)) => Some(
                    format!("tcp://{}:{}", host.trim(), port.trim())
                        .parse::<Rendezvous>()
                        .map_err(|_| {
                            Error::invalid(
                                "MASTER_PORT",
                                "must be a port number in 1..=65535",
                                format!("{port:?}"),
                            )
                        })?,
                ),
                _ if size == 1 => None,
                (a, p) => {
                    return Err(Error::invalid(
                        RENDEZVOUS_VAR,
                        "must be set, or MASTER_ADDR and MASTER_PORT, when WORLD_SIZE > 1",
                        format!(
                            "unset (MASTER_ADDR {}, MASTER_PORT {})",
                            a.map_or("unset".into(), |a| format!("{a:?}")),
                            p.map_or("unset".into(), |p| format!("{p:?}"))
                        ),
                    ));
                }
            },
        };
        let timeout = match var(TIMEOUT_VAR) {
            None => DEFAULT_TIMEOUT,
            Some(t) => Duration::from_secs_f64(
                t.trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s > 0.0 && *s < 1e9)
                    .ok_or_else(|| {
                        Error::invalid(
                            TIMEOUT_VAR,
                            "must be a positive number of seconds",
                            format!("{t:?}"),
                        )
                    })?,
            ),
        };
        Ok(LaunchEnv {
            ranks,
            local_rank,
            local_world_size,
            rendezvous,
            timeout,
        })
    }
}

/// This process's part of the job: what the launcher said, its device
/// (current on the calling thread) and its communicator.
#[derive(Debug)]
pub struct Launch {
    /// What the launcher said.
    pub env: LaunchEnv,
    /// The GPU this rank drives (`LOCAL_RANK`).
    pub device: Device,
    /// This rank's communicator over all `WORLD_SIZE` ranks.
    pub comm: Communicator,
}

/// Read the convention, bind to GPU `LOCAL_RANK`, share the unique id and
/// join the communicator. With no variables set this is a one-rank job on
/// GPU 0.
///
/// # Errors
/// As [`LaunchEnv::from_env`]; [`Error::NoDevice`] or
/// [`Error::InvalidArgument`] when `LOCAL_RANK` names no GPU;
/// [`Error::Rendezvous`] when the ranks cannot meet; [`Error::Nccl`] when
/// NCCL cannot build the communicator.
pub fn init_from_env() -> Result<Launch> {
    let env = LaunchEnv::from_env()?;
    init(env)
}

/// [`init_from_env`] with a [`LaunchEnv`] already read.
///
/// # Errors
/// As [`init_from_env`].
pub fn init(env: LaunchEnv) -> Result<Launch> {
    let lr = env.local_rank;
    let device = Device::new(lr).map_err(|e| match e {
        Error::InvalidArgument { rule, value, .. } => Error::InvalidArgument {
            arg: "LOCAL_RANK".into(),
            rule: format!("names this process's GPU, so it {rule}"),
            value,
        },
        Error::NoDevice { reason } => Error::NoDevice {
            reason: format!("{reason} (LOCAL_RANK={lr})"),
        },
        other => other.with_context(format!("LOCAL_RANK={lr}")),
    })?;
    let id = match &env.rendezvous {
        None => UniqueId::new()?,
        Some(r) => exchange(r, env.ranks, env.timeout, UniqueId::new)?,
    };
    let comm = Communicator::init_rank(&id, env.ranks.rank(), env.ranks.size())?;
    Ok(Launch { env, device, comm })
}

/// Share a unique id among `ranks.size()` processes over `rendezvous`: rank
/// 0 calls `make` and publishes the id, every other rank waits for it (up
/// to `timeout`). Returns the id on every rank. Needs no GPU.
///
/// # Errors
/// [`Error::Rendezvous`] naming the rendezvous and what went wrong (I/O,
/// timeout, a peer with another world size, a rank seen twice); `make`'s
/// error on rank 0.
pub fn exchange(
    rendezvous: &Rendezvous,
    ranks: Ranks,
    timeout: Duration,
    make: impl FnOnce() -> Result<UniqueId>,
) -> Result<UniqueId> {
    let deadline = Instant::now() + timeout;
    let fail = |detail: String| Error::Rendezvous {
        rendezvous: rendezvous.to_string(),
        detail: format!("rank {} of {}: {detail}", ranks.rank(), ranks.size()),
    };
    if ranks.size() == 1 {
        return make();
    }
    match rendezvous {
        Rendezvous::File(path) => {
            if ranks.rank() == 0 {
                let id = make()?;
                file_publish(path, ranks, &id, deadline).map_err(fail)?;
                Ok(id)
            } else {
                file_receive(path, ranks, deadline).map_err(fail)
            }
        }
        Rendezvous::Tcp { host, port } => {
            if ranks.rank() == 0 {
                let id = make()?;
                tcp_serve(host, *port, ranks, &id, deadline).map_err(fail)?;
                Ok(id)
            } else {
                tcp_receive(host, *port, ranks, deadline).map_err(fail)
            }
        }
    }
}

const POLL: Duration = Duration::from_millis(20);

fn ack_path(path: &Path, rank: usize) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(format!(".ack-{rank}"));
    PathBuf::from(s)
}

fn file_publish(path: &Path, ranks: Ranks, id: &UniqueId, deadline: Instant) -> Result<(), String> {
    if path.exists() {
        return Err(format!(
            "{} already exists (left by an earlier run?); remove it and start again",
            path.display()
        ));
    }
    let mut tmp = path.as_os_str().to_os_string();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let text = format!("{} {} {id}\n", String::from_utf8_lossy(MAGIC), ranks.size());
    fs::write(&tmp, text).map_err(|e| format!("writing {}: {e}", tmp.display()))?;
    fs::rename(&tmp, path)
        .map_err(|e| format!("renaming {} to {}: {e}", tmp.display(), path.display()))?;
    let mut waiting: Vec<usize> = (1..ranks.size()).collect();
    loop {
        waiting.retain(|&r| !ack_path(path, r).exists());
        if waiting.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            let _ = fs::remove_file(path);
            return Err(format!(
                "timed out waiting for ranks {waiting:?} to read {}",
                path.display()
            ));
        }
        std::thread::sleep(POLL);
    }
    let _ = fs::remove_file(path);
    for r in 1..ranks.size() {
        let _ = fs::remove_file(ack_path(path, r));
    }
    Ok(())
}

fn file_receive(path: &Path, ranks: Ranks, deadline: Instant) -> Result<UniqueId, String> {
    let text = loop {
        match fs::read_to_string(path) {
            Ok(t) => break t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("reading {}: {e}", path.display())),
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "timed out waiting for rank 0 to write {}",
                path.display()
            ));
        }
        std::thread::sleep(POLL);
    };
    let mut parts = text.split_whitespace();
    let (magic, size, id) = (parts.next(), parts.next(), parts.next());
    if magic != Some(&*String::from_utf8_lossy(MAGIC)) {
        return Err(format!(
            "{} is not a rendezvous file of this crate",
            path.display()
        ));
    }
    let size: Option<usize> = size.and_then(|s| s.parse().ok());
    if size != Some(ranks.size()) {
        return Err(format!(
            "rank 0 has world size {}, this rank {}",
            size.map_or("?".into(), |s| s.to_string()),
            ranks.size()
        ));
    }
    let id: UniqueId = id
        .unwrap_or_default()
        .parse()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let ack = ack_path(path, ranks.rank());
    fs::write(&ack, b"").map_err(|e| format!("writing {}: {e}", ack.display()))?;
    Ok(id)
}

fn remaining(deadline: Instant) -> Option<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
}

fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    (host, port)
        .to_socket_addrs()
        .map(Iterator::collect)
        .map_err(|e| format!("resolving {host}: {e}"))
}

fn tcp_serve(
    host: &str,
    port: u16,
    ranks: Ranks,
    id: &UniqueId,
    deadline: Instant,
) -> Result<(), String> {
    let addrs = resolve(host, port)?;
    let mut listener = None;
    let mut errors = Vec::new();
    for a in &addrs {
        match TcpListener::bind(a) {
            Ok(l) => {
                listener = Some(l);
                break;
            }
            Err(e) => errors.push(format!("{a}: {e}")),
        }
    }
    let listener = match listener {
        Some(l) => l,
        // `host` is not an address of this machine (a name that resolves
        // elsewhere, a NAT): listen on every interface.
        None => TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).map_err(|e| {
            format!(
                "cannot listen on port {port} ({}; 0.0.0.0: {e})",
                errors.join("; ")
            )
        })?,
    };
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("listening socket: {e}"))?;
    let mut served = vec![false; ranks.size()];
    served[0] = true;
    while served.iter().any(|s| !s) {
        let Some(left) = remaining(deadline) else {
            let missing: Vec<usize> = (0..ranks.size()).filter(|&r| !served[r]).collect();
            return Err(format!(
                "timed out waiting for ranks {missing:?} to connect"
            ));
        };
        let conn = match listener.accept() {
            Ok((c, _)) => c,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(POLL);
                continue;
            }
            Err(e) => return Err(format!("accepting: {e}")),
        };
        // A connection that is not a rank (a port scanner, a stale client)
        // is dropped; only a rank's own mismatch fails the rendezvous.
        if let Some(rank) = serve_one(
            conn,
            ranks,
            id,
            left.min(Duration::from_secs(10)),
            &mut served,
        )? {
            served[rank] = true;
        }
    }
    Ok(())
}

/// Handle one connection: `Ok(Some(rank))` when served, `Ok(None)` when it
/// was not one of ours, `Err` for a rank that does not fit this job.
fn serve_one(
    mut conn: TcpStream,
    ranks: Ranks,
    id: &UniqueId,
    timeout: Duration,
    served: &mut [bool],
) -> Result<Option<usize>, String> {
    if conn.set_nonblocking(false).is_err()
        || conn.set_read_timeout(Some(timeout)).is_err()
        || conn.set_write_timeout(Some(timeout)).is_err()
    {
        return Ok(None);
    }
    let mut hello = [0u8; 16];
    if conn.read_exact(&mut hello).is_err() || &hello[..8] != MAGIC {
        return Ok(None);
    }
    let word = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
    let (rank, size) = (word(&hello[8..12]), word(&hello[12..16]));
    let problem = if size != ranks.size() {
        Some(format!(
            "rank {rank} has world size {size}, rank 0 {}",
            ranks.size()
        ))
    } else if rank == 0 || rank >= size {
        Some(format!("a peer claims rank {rank} (valid: 1..{size})"))
    } else if served[rank] {
        Some(format!(
            "rank {rank} connected twice (two processes with the same RANK?)"
        ))
    } else {
        None
    };
    match problem {
        None => {
            let mut reply = Vec::with_capacity(1 + UNIQUE_ID_BYTES);
            reply.push(0u8);
            reply.extend_from_slice(&id.to_bytes());
            conn.write_all(&reply)
                .map_err(|e| format!("sending the id to rank {rank}: {e}"))?;
            Ok(Some(rank))
        }
        Some(p) => {
            let msg = p.as_bytes();
            let len = msg.len().min(u16::MAX as usize);
            let mut reply = vec![1u8];
            reply.extend_from_slice(&(len as u16).to_be_bytes());
            reply.extend_from_slice(&msg[..len]);
            let _ = conn.write_all(&reply);
            Err(p)
        }
    }
}

fn tcp_receive(host: &str, port: u16, ranks: Ranks, deadline: Instant) -> Result<UniqueId, String> {
    let mut last_err = String::from("no address");
    loop {
        let Some(left) = remaining(deadline) else {
            return Err(format!("timed out connecting to rank 0 ({last_err})"));
        };
        let mut conn = None;
        for a in resolve(host, port)? {
            match TcpStream::connect_timeout(&a, left.min(Duration::from_secs(2))) {
                Ok(c) => {
                    conn = Some(c);
                    break;
                }
                Err(e) => last_err = format!("{a}: {e}"),
            }
        }
        let Some(mut conn) = conn else {
            std::thread::sleep(POLL);
            continue;
        };
        let io = |e: std::io::Error| format!("talking to rank 0: {e}");
        conn.set_read_timeout(remaining(deadline)).map_err(io)?;
        let mut hello = Vec::with_capacity(16);
        hello.extend_from_slice(MAGIC);
        hello.extend_from_slice(&(ranks.rank() as u32).to_be_bytes());
        hello.extend_from_slice(&(ranks.size() as u32).to_be_bytes());
        conn.write_all(&hello).map_err(io)?;
        let mut status = [0u8; 1];
        conn.read_exact(&mut status).map_err(io)?;
        if status[0] == 0 {
            let mut bytes = [0u8; UNIQUE_ID_BYTES];
            conn.read_exact(&mut bytes).map_err(io)?;
            return UniqueId::from_bytes(&bytes).map_err(|e| e.to_string());
        }
        let mut len = [0u8; 2];
        conn.read_exact(&mut len).map_err(io)?;
        let mut msg = vec![0u8; u16::from_be_bytes(len) as usize];
        conn.read_exact(&mut msg).map_err(io)?;
        return Err(format!("rank 0 refused: {}", String::from_utf8_lossy(&msg)));
    }
}
