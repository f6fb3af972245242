//! One deadline for a whole exchange: sleeps, connects, reads and writes
//! never run past it, however a peer paces its bytes.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::env::MAX_TIMEOUT;

/// The moment an exchange gives up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline(Instant);

impl Deadline {
    /// `timeout` from now (at most [`MAX_TIMEOUT`]).
    pub(crate) fn after(timeout: Duration) -> Self {
        let now = Instant::now();
        Deadline(now.checked_add(timeout.min(MAX_TIMEOUT)).unwrap_or(now))
    }

    /// The earlier of this deadline and `limit` from now.
    pub(crate) fn or_within(self, limit: Duration) -> Self {
        let now = Instant::now();
        match now.checked_add(limit) {
            Some(t) if t < self.0 => Deadline(t),
            _ => self,
        }
    }

    /// Time left, `None` once it has passed.
    pub(crate) fn remaining(self) -> Option<Duration> {
        self.0
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
    }

    /// Sleep `d`, or until the deadline if that comes first.
    pub(crate) fn sleep(self, d: Duration) {
        if let Some(left) = self.remaining() {
            std::thread::sleep(d.min(left));
        }
    }
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "the rendezvous deadline passed")
}

/// `read_exact` that gives up at `deadline`, whatever the pace of the
/// peer's bytes (each read waits at most the time left).
pub(crate) fn read_exact_by(
    conn: &mut TcpStream,
    buf: &mut [u8],
    deadline: Deadline,
) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let left = deadline.remaining().ok_or_else(timed_out)?;
        conn.set_read_timeout(Some(left))?;
        let rest = buf.get_mut(done..).unwrap_or_default();
        match conn.read(rest) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the peer closed the connection",
                ));
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(timed_out());
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `write_all` that gives up at `deadline`.
pub(crate) fn write_all_by(conn: &mut TcpStream, buf: &[u8], deadline: Deadline) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let left = deadline.remaining().ok_or_else(timed_out)?;
        conn.set_write_timeout(Some(left))?;
        let rest = buf.get(done..).unwrap_or_default();
        match conn.write(rest) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "the peer stopped reading",
                ));
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(timed_out());
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
