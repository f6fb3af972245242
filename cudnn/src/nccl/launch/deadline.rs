//! One deadline for a whole exchange: sleeps, connects, reads and writes
//! never run past it, however a peer paces its bytes.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
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

    /// Wait until `listener` has a connection to accept, at most `d` (or
    /// until the deadline if that comes first). On Unix this wakes as soon
    /// as a peer connects (`poll(2)`); elsewhere it sleeps `d`. A spurious
    /// or failed wait only returns early: the caller's `accept` on its
    /// non-blocking listener says whether anything came.
    pub(crate) fn wait_for_peer(self, listener: &TcpListener, d: Duration) {
        let Some(left) = self.remaining() else {
            return;
        };
        let d = d.min(left);
        #[cfg(unix)]
        {
            use std::os::fd::AsRawFd;
            let start = Instant::now();
            let mut fds = [libc::pollfd {
                fd: listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            }];
            // Round up so a wait shorter than a millisecond still waits.
            let ms = i32::try_from(d.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
            // SAFETY: `fds` is one valid `pollfd` for the call's length; its
            // descriptor is the listener's, open for as long as `listener`
            // is borrowed, which outlives the call.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), 1, ms) };
            let peer = r > 0 && fds[0].revents & libc::POLLIN != 0;
            if r < 0 || (r > 0 && !peer) {
                // EINTR, a failed poll, or an error state with nothing to
                // accept: the rest of the pause, so a caller's loop never
                // spins and the wait stays within `d` and the deadline.
                std::thread::sleep(d.saturating_sub(start.elapsed()));
            }
        }
        #[cfg(not(unix))]
        {
            let _ = listener;
            std::thread::sleep(d);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// A peer that connects ends the wait (on Unix); with no peer the wait
    /// lasts its pause, and never past the deadline.
    #[test]
    fn wait_for_peer_wakes_on_a_connection_and_keeps_its_bounds() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap();
        let far = Deadline::after(Duration::from_secs(60));

        // No peer: the pause, then a `WouldBlock` accept.
        let t = Instant::now();
        far.wait_for_peer(&l, Duration::from_millis(50));
        assert!(
            t.elapsed() >= Duration::from_millis(45),
            "{:?}",
            t.elapsed()
        );
        assert_eq!(
            l.accept().err().map(|e| e.kind()),
            Some(io::ErrorKind::WouldBlock)
        );

        // A deadline nearer than the pause bounds the wait.
        // (Bounds far above the 30 ms asked, far below the 30 s pause: a
        // loaded machine's scheduling delays cannot fail them.)
        let t = Instant::now();
        Deadline::after(Duration::from_millis(30)).wait_for_peer(&l, Duration::from_secs(30));
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        let t = Instant::now();
        Deadline::after(Duration::ZERO).wait_for_peer(&l, Duration::from_secs(30));
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());

        // A peer connecting part-way through a long pause: accepted at once.
        let peer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            TcpStream::connect(addr)
        });
        let t = Instant::now();
        far.wait_for_peer(&l, Duration::from_secs(30));
        let took = t.elapsed();
        let conn = peer.join().unwrap().unwrap();
        if cfg!(unix) {
            assert!(took < Duration::from_secs(2), "woke after {took:?}");
            assert!(
                l.accept().is_ok(),
                "poll said a peer came, accept found none"
            );
        }
        drop(conn);
    }
}
