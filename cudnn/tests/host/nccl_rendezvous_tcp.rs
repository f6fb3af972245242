//! The TCP rendezvous against hostile peers, without a GPU (unit tier;
//! 127.0.0.1 only): wrong magic, world size or rank, a rank twice, tokens
//! (right, wrong, missing), silent and trickling peers on either side, a
//! listener that never accepts, a full accept queue, a name that does not
//! resolve, an address that is not this machine's. Every deadline is held
//! to within 10 % + 100 ms. (Attacks on the token and the flood are in
//! `host/nccl_rendezvous_attacks`, the process tests in
//! `host/nccl_rendezvous`.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

crate::nccl_main!("host/nccl_rendezvous_tcp", "unit::nccl_rendezvous_tcp");

#[cfg(feature = "nccl")]
mod imp {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::time::{Duration, Instant};

    use cudnn::Error;
    use cudnn::nccl::launch::{self, Rendezvous, Token};

    use crate::support::rendezvous::{
        fixed, free_port, held, on_free_port, rank_of, rank_thread, tcp,
    };
    use crate::support::{TestResult, run, unit};

    pub fn main() {
        run(vec![
            unit("tcp_hostile_peers_are_dropped", tcp_hostile_peers),
            unit("tcp_rank_taken_twice", tcp_duplicate_rank),
            unit("tcp_token", tcp_token),
            unit("tcp_trickling_server", tcp_trickling_server),
            unit("tcp_trickling_client", tcp_trickling_client),
            unit("tcp_listener_never_accepts", tcp_never_accepts),
            unit("tcp_deadline_passes_during_connect", tcp_connect_hangs),
            unit("tcp_unresolvable_name_retries", tcp_unresolvable),
            unit("tcp_binds_the_given_address_only", tcp_binds_given),
            unit(
                "tcp_peer_without_the_token_learns_no_mac",
                tcp_no_mac_before_proof,
            ),
            unit("tcp_short_token_refused", tcp_short_token),
        ]);
    }

    // ------------------------------------------------------------ helpers

    fn tcp_host(host: &str, port: u16) -> Rendezvous {
        Rendezvous::Tcp {
            host: host.into(),
            port,
        }
    }

    // ------------------------------------------------------- tcp, hostile

    /// A hello: magic, rank, size, token flag, nonce.
    fn hello(rank: u32, size: u32, flag: u8) -> Vec<u8> {
        let mut h = b"CUDNNRS4".to_vec();
        h.extend_from_slice(&rank.to_be_bytes());
        h.extend_from_slice(&size.to_be_bytes());
        h.push(flag);
        h.extend_from_slice(&[0x5a; 16]);
        h
    }

    /// Connect, retrying until the server is up (5 s).
    fn connect(port: u16) -> TcpStream {
        let start = Instant::now();
        loop {
            match TcpStream::connect(("127.0.0.1", port)) {
                Ok(c) => return c,
                Err(e) if start.elapsed() > Duration::from_secs(5) => panic!("connect: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }

    fn refusal(c: &mut TcpStream) -> String {
        let mut len = [0u8; 2];
        if c.read_exact(&mut len).is_err() {
            return "closed".into();
        }
        let mut msg = vec![0u8; u16::from_be_bytes(len) as usize];
        if c.read_exact(&mut msg).is_err() {
            return "closed".into();
        }
        String::from_utf8_lossy(&msg).into_owned()
    }

    /// Send `bytes` as a hello, then (if rank 0 answers with its challenge)
    /// a proof of zeros, as a rank without a token does; return rank 0's
    /// answer: `Ok(id bytes)`, `Err(why)`, or `Err("closed")`.
    fn ask(port: u16, bytes: &[u8]) -> Result<Vec<u8>, String> {
        let mut c = connect(port);
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = c.write_all(bytes);
        let mut status = [0u8; 1];
        if c.read_exact(&mut status).is_err() {
            return Err("closed".into());
        }
        if status[0] == 1 {
            return Err(refusal(&mut c));
        }
        // Rank 0's nonce, then this peer proves first (zeros).
        let mut nonce = [0u8; 16];
        c.read_exact(&mut nonce).map_err(|e| e.to_string())?;
        let _ = c.write_all(&[0u8; 32]);
        if c.read_exact(&mut status).is_err() {
            return Err("closed".into());
        }
        if status[0] == 2 {
            return Err("wrong proof".into());
        }
        // Rank 0's own proof, then its answer.
        let mut proof = [0u8; 32];
        c.read_exact(&mut proof).map_err(|e| e.to_string())?;
        if c.read_exact(&mut status).is_err() {
            return Err("closed".into());
        }
        if status[0] == 0 {
            let mut id = vec![0u8; 128];
            c.read_exact(&mut id).map_err(|e| e.to_string())?;
            return Ok(id);
        }
        Err(refusal(&mut c))
    }

    fn tcp_hostile_peers() -> TestResult {
        on_free_port(tcp_hostile_peers_on)
    }

    fn tcp_hostile_peers_on(port: u16) -> TestResult {
        let r = tcp(port);
        let start = Instant::now();
        let h0 = rank_thread(&r, 0, 3, Duration::from_secs(30), None);
        // Silent peers, held open for the whole test.
        let silent: Vec<TcpStream> = (0..10).map(|_| connect(port)).collect();
        // A peer trickling its hello, one byte per 200 ms.
        let trickle = std::thread::spawn(move || {
            let mut c = connect(port);
            for b in hello(1, 3, 0) {
                if c.write_all(&[b]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        // Not ours at all: dropped without an answer.
        ensure!(
            ask(port, b"GET / HTTP/1.0\r\n\r\n").unwrap_err() == "closed",
            "http"
        );
        ensure!(ask(port, &[0u8; 3]).unwrap_err() == "closed", "short");
        // Ours, but not a rank of this job: refused with the reason.
        let e = ask(port, &hello(1, 4, 0)).unwrap_err();
        ensure!(e.contains("world size 4"), "world size: {e}");
        let e = ask(port, &hello(0, 3, 0)).unwrap_err();
        ensure!(e.contains("claims rank 0"), "rank 0: {e}");
        let e = ask(port, &hello(3, 3, 0)).unwrap_err();
        ensure!(e.contains("claims rank 3"), "rank 3: {e}");
        let e = ask(port, &hello(u32::MAX, u32::MAX, 0)).unwrap_err();
        ensure!(e.contains("world size 4294967295"), "u32::MAX: {e}");
        let e = ask(port, &hello(1, 3, 7)).unwrap_err();
        ensure!(e == "closed", "token flag 7: {e}");
        let e = ask(port, &hello(1, 3, 1)).unwrap_err();
        ensure!(e.contains("rank 0 has none"), "unexpected token: {e}");
        // The real ranks are served all the same, and quickly.
        let h1 = rank_thread(&r, 1, 3, Duration::from_secs(30), None);
        let h2 = rank_thread(&r, 2, 3, Duration::from_secs(30), None);
        let id0 = h0.join().unwrap()?;
        let took = start.elapsed();
        ensure!(h1.join().unwrap()? == id0, "rank 1");
        ensure!(h2.join().unwrap()? == id0, "rank 2");
        ensure!(
            took < Duration::from_secs(4),
            "silent and trickling peers held the rendezvous for {took:?}"
        );
        drop(silent);
        let _ = trickle.join();
        Ok(())
    }

    fn tcp_duplicate_rank() -> TestResult {
        on_free_port(tcp_duplicate_rank_on)
    }

    fn tcp_duplicate_rank_on(port: u16) -> TestResult {
        let r = tcp(port);
        let h0 = rank_thread(&r, 0, 3, Duration::from_secs(20), None);
        // Without a token, anyone can take rank 1's place (the documented
        // exposure) ...
        let stolen = ask(port, &hello(1, 3, 0))?;
        ensure!(stolen == fixed(0xA0).to_bytes(), "the id");
        // ... and the real rank 1 is refused, while the rest goes on.
        let (e1, _) = rank_of(&r, 1, 3, Duration::from_secs(20));
        let e1 = e1.unwrap_err().to_string();
        ensure!(
            e1.contains("refused") && e1.contains("connected twice"),
            "{e1}"
        );
        let h2 = rank_thread(&r, 2, 3, Duration::from_secs(20), None);
        ensure!(h2.join().unwrap()? == fixed(0xA0), "rank 2");
        ensure!(h0.join().unwrap()? == fixed(0xA0), "rank 0");
        Ok(())
    }

    fn tcp_token() -> TestResult {
        on_free_port(tcp_token_on)
    }

    fn tcp_token_on(port: u16) -> TestResult {
        let r = tcp(port);
        let tok = Token::new("s3cret-0123456789abcdef0123456789ab")?;
        let t = Duration::from_secs(20);
        let h0 = rank_thread(&r, 0, 3, t, Some(tok.clone()));
        // A hello without a token is told rank 0 requires one.
        let e = ask(port, &hello(1, 3, 0)).unwrap_err();
        ensure!(e.contains("requires one"), "no token: {e}");
        // A hello claiming a token, then a proof of zeros: told its proof
        // is wrong, and nothing keyed by the token comes back.
        let e = ask(port, &hello(1, 3, 1)).unwrap_err();
        ensure!(e == "wrong proof", "a proof of zeros: {e}");
        // Ranks with another token prove first and are refused, at once.
        for other in [
            "s3cret-0123456789abcdef0123456789aB",
            "s3cret-0123456789abcdef0123456789a",
            "s3cret-0123456789abcdef0123456789abc",
        ] {
            let start = Instant::now();
            let e = rank_thread(&r, 1, 3, t, Some(Token::new(other)?))
                .join()
                .unwrap()
                .unwrap_err()
                .to_string();
            ensure!(e.contains("refused this rank's proof"), "{other}: {e}");
            ensure!(start.elapsed() < Duration::from_secs(3), "{other}: slow");
        }
        // A rank without the token is refused and told why.
        let (e, _) = rank_of(&r, 2, 3, t);
        let e = e.unwrap_err().to_string();
        ensure!(e.contains("requires one"), "{e}");
        let h1 = rank_thread(&r, 1, 3, t, Some(tok.clone()));
        let h2 = rank_thread(&r, 2, 3, t, Some(tok));
        let id0 = h0.join().unwrap()?;
        ensure!(
            h1.join().unwrap()? == id0 && h2.join().unwrap()? == id0,
            "ids"
        );
        Ok(())
    }

    /// Rank 0 faces a peer sending a byte every 200 ms: its deadline holds.
    fn tcp_trickling_server() -> TestResult {
        on_free_port(tcp_trickling_server_on)
    }

    fn tcp_trickling_server_on(port: u16) -> TestResult {
        let t = Duration::from_secs(1);
        let start = Instant::now();
        let h0 = rank_thread(&tcp(port), 0, 2, t, None);
        let trickle = std::thread::spawn(move || {
            let mut c = connect(port);
            for b in hello(1, 2, 0).iter().cycle().take(40) {
                if c.write_all(&[*b]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        let e = h0.join().unwrap().unwrap_err().to_string();
        ensure!(e.contains("timed out waiting for 1 rank(s) ([1])"), "{e}");
        held("rank 0 with a trickling peer", start.elapsed(), t)?;
        let _ = trickle.join();
        Ok(())
    }

    /// A "rank 0" answering a byte every 200 ms: the rank's deadline holds.
    fn tcp_trickling_client() -> TestResult {
        let l = TcpListener::bind("127.0.0.1:0")?;
        let port = l.local_addr()?.port();
        let server = std::thread::spawn(move || {
            if let Ok((mut c, _)) = l.accept() {
                let mut h = [0u8; 33];
                let _ = c.read_exact(&mut h);
                for _ in 0..40 {
                    if c.write_all(&[0]).is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        });
        let t = Duration::from_secs(1);
        let (e, took) = rank_of(&tcp(port), 1, 2, t);
        let e = e.unwrap_err().to_string();
        ensure!(e.contains("timed out"), "{e}");
        held("a rank with a trickling rank 0", took, t)?;
        let _ = server.join();
        Ok(())
    }

    /// Connected (the kernel's backlog) but never served: the read still
    /// ends at the deadline.
    fn tcp_never_accepts() -> TestResult {
        let l = TcpListener::bind("127.0.0.1:0")?;
        let port = l.local_addr()?.port();
        let t = Duration::from_millis(800);
        let (e, took) = rank_of(&tcp(port), 1, 2, t);
        let e = e.unwrap_err().to_string();
        ensure!(e.contains("timed out"), "{e}");
        held("a listener that never accepts", took, t)?;
        drop(l);
        Ok(())
    }

    /// A listener whose accept queue is full: the kernel drops further
    /// SYNs, so connecting hangs until the deadline passes in the middle of
    /// it; the rank still returns on time.
    fn tcp_connect_hangs() -> TestResult {
        let l = TcpListener::bind("127.0.0.1:0")?;
        let port = l.local_addr()?.port();
        let addr = l.local_addr()?;
        // Fill the queue (std listens with a backlog of 128).
        let mut queued = Vec::new();
        let fill = Instant::now();
        while fill.elapsed() < Duration::from_secs(5) {
            match TcpStream::connect_timeout(&addr, Duration::from_millis(100)) {
                Ok(c) => queued.push(c),
                Err(_) => break,
            }
        }
        if queued.len() > 1000 {
            eprintln!(
                "note: tcp_deadline_passes_during_connect: the accept queue never filled; connect did not hang"
            );
        }
        let t = Duration::from_millis(1500);
        let (e, took) = rank_of(&tcp(port), 1, 2, t);
        let e = e.unwrap_err().to_string();
        ensure!(e.contains("timed out"), "{e}");
        if queued.len() <= 1000 {
            ensure!(
                e.contains("connecting to 127.0.0.1"),
                "not the connect phase: {e}"
            );
        }
        held("connecting to a full accept queue", took, t)?;
        eprintln!(
            "note: tcp_deadline_passes_during_connect: {} connections queued; {e}",
            queued.len()
        );
        drop(queued);
        drop(l);
        Ok(())
    }

    fn tcp_unresolvable() -> TestResult {
        let r = tcp_host("no-such-host.invalid", 29511);
        let t = Duration::from_secs(1);
        for rank in [1, 0] {
            let (e, took) = rank_of(&r, rank, 2, t);
            let e = e.unwrap_err().to_string();
            ensure!(
                e.contains("timed out") && e.contains("resolving"),
                "rank {rank}: {e}"
            );
            held(
                &format!("rank {rank}, a name that does not resolve"),
                took,
                t,
            )?;
        }
        Ok(())
    }

    /// An address that is not this machine's: rank 0 says so at once
    /// rather than listen on every interface.
    fn tcp_binds_given() -> TestResult {
        let r = tcp_host("192.0.2.1", free_port());
        let (e, took) = rank_of(&r, 0, 2, Duration::from_secs(5));
        let e = e.unwrap_err().to_string();
        ensure!(e.contains("cannot listen on 192.0.2.1"), "{e}");
        ensure!(took < Duration::from_secs(1), "{took:?}");
        Ok(())
    }

    // ------------------------------------------------- tcp, the token's MAC

    fn tcp_no_mac_before_proof() -> TestResult {
        on_free_port(tcp_no_mac_before_proof_on)
    }

    /// The attack: a peer that does not know the token connects,
    /// claims a token and sends a proof of its own. Before the fix rank 0
    /// answered with its HMAC over the peer's nonce (32 bytes after its
    /// own nonce), which a two-character token was recovered from offline.
    /// Now all that comes back is the nonce and the refusal of the proof:
    /// 18 bytes, nothing keyed by the token, whatever the peer sends.
    fn tcp_no_mac_before_proof_on(port: u16) -> TestResult {
        let tok = Token::new("no-mac-0123456789abcdef012345678")?;
        let r = tcp(port);
        let h0 = rank_thread(&r, 0, 2, Duration::from_secs(20), Some(tok.clone()));
        for attempt in 0..3u8 {
            let mut c = connect(port);
            c.set_read_timeout(Some(Duration::from_secs(5)))?;
            let mut h = hello(1, 2, 1);
            // The peer chooses its nonce (as an attacker would).
            for b in h.iter_mut().skip(17) {
                *b = attempt;
            }
            c.write_all(&h)?;
            c.write_all(&[attempt; 32])?;
            let mut all = Vec::new();
            let _ = c.read_to_end(&mut all);
            ensure!(
                all.len() == 18 && all[0] == 0 && all[17] == 2,
                "attempt {attempt}: rank 0 sent {} bytes: {all:?}",
                all.len()
            );
        }
        // A rank with the token is served all the same.
        let id = rank_thread(&r, 1, 2, Duration::from_secs(20), Some(tok))
            .join()
            .unwrap()?;
        ensure!(id == h0.join().unwrap()?, "the id");
        Ok(())
    }

    /// A token of fewer than 32 bytes (128 bits as hex digits) is refused,
    /// the error naming it and its length in bytes; 32 bytes pass, and so
    /// does a generated one.
    fn tcp_short_token() -> TestResult {
        for short in ["", "a", "ab", "0123456789abcdef0123456789abcde"] {
            match Token::new(short) {
                Err(Error::InvalidArgument { arg, value, .. }) => {
                    ensure!(arg == "token", "{arg}");
                    ensure!(value == format!("{} bytes", short.len()), "{value}");
                }
                other => return Err(format!("{short:?}: {other:?}").into()),
            }
        }
        Token::new("0123456789abcdef0123456789abcdef")?;
        let g = Token::generate()?;
        ensure!(
            g.expose().len() == 32 && g.expose().bytes().all(|b| b.is_ascii_hexdigit()),
            "generated: {} bytes",
            g.expose().len()
        );
        ensure!(Token::generate()? != g, "two generated tokens are equal");
        // Through the environment the variable is named.
        let vars = [
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "0"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29500"),
            ("CUDNN_RS_RENDEZVOUS_TOKEN", "ab"),
        ];
        let e = launch::LaunchEnv::from_vars(|k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
        .unwrap_err();
        match e {
            Error::InvalidArgument { arg, value, .. } => {
                ensure!(arg == "CUDNN_RS_RENDEZVOUS_TOKEN", "{arg}");
                ensure!(value == "2 bytes", "{value}");
            }
            other => return Err(format!("{other:?}").into()),
        }
        Ok(())
    }
}
