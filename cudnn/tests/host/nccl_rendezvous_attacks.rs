//! The rendezvous against attackers, without a GPU (unit tier; 127.0.0.1
//! only, every wait bounded): a process squatting rank 0's port, a relay
//! that alters the id, a flood of silent connections, a second process
//! with the same rank, a rerun beside a live job, files planted by another
//! user, rank 0 giving up while ranks wait, an acknowledgement removed by
//! someone else, an answer owned by another user, a loopback rendezvous for
//! ranks on other machines; and the secrets' `==` and `Debug`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

crate::nccl_main!(
    "host/nccl_rendezvous_attacks",
    "unit::nccl_rendezvous_attacks"
);

#[cfg(feature = "nccl")]
mod imp {
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::thread::JoinHandle;
    use std::time::{Duration, Instant};

    use cudnn::Error;
    use cudnn::nccl::UniqueId;
    use cudnn::nccl::launch::{self, LaunchEnv, Rendezvous, Token};
    use libtest_mimic::Trial;

    use crate::support::rendezvous::{fixed, on_free_port, tcp};
    use crate::support::{TestResult, has_gpu, run, unit};

    pub fn main() {
        run(vec![
            unit("tcp_squatter_never_sees_the_token", tcp_squatter),
            unit("tcp_relay_altering_the_id_is_caught", tcp_relay),
            unit("tcp_flood_of_silent_connections", tcp_flood),
            unit("file_second_process_with_a_taken_rank", file_same_rank),
            unit("file_rerun_leaves_the_live_job_alone", file_rerun),
            unit("file_planted_files_do_not_abort", file_planted),
            unit("file_abort_note_reaches_waiting_ranks", file_abort),
            unit(
                "file_removed_acknowledgement_is_rewritten",
                file_ack_rewritten,
            ),
            can_chown(unit("file_answer_owned_by_another_user", file_answer_owner)),
            unit("tcp_loopback_refused_for_remote_ranks", tcp_loopback_remote),
            unit("local_rank_variable_named", local_rank_named),
            unit("secrets_compare_and_print", secrets),
        ]);
    }

    // ------------------------------------------------------------ helpers

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "host_nccl_rdzv_attacks-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn files_in(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    fn rank_thread(
        r: &Rendezvous,
        rank: usize,
        size: usize,
        t: Duration,
        token: Option<&str>,
    ) -> JoinHandle<cudnn::Result<UniqueId>> {
        let token = token.map(|t| Token::new(t).unwrap());
        crate::support::rendezvous::rank_thread(r, rank, size, t, token)
    }

    /// The first entry of `dir` whose name starts with `prefix`, waited for
    /// at most `t`.
    fn wait_for(dir: &Path, prefix: &str, t: Duration) -> Result<PathBuf, String> {
        let start = Instant::now();
        loop {
            if let Ok(entries) = std::fs::read_dir(dir) {
                for e in entries.flatten() {
                    if e.file_name().to_string_lossy().starts_with(prefix) {
                        return Ok(e.path());
                    }
                }
            }
            if start.elapsed() > t {
                return Err(format!("no {prefix}* in {} after {t:?}", dir.display()));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn can_chown(t: Trial) -> Trial {
        if chown_works() {
            t
        } else {
            eprintln!(
                "skipped: {}: this user cannot give a file to another user",
                t.name()
            );
            t.with_ignored_flag(true)
        }
    }

    fn chown_works() -> bool {
        let dir = scratch("chown-probe");
        let p = dir.join("probe");
        std::fs::write(&p, "").unwrap();
        let ok = std::os::unix::fs::chown(&p, Some(65534), None).is_ok();
        let _ = std::fs::remove_dir_all(dir);
        ok
    }

    const JOB: &str = "0123456789abcdef0123456789abcdef";

    /// Play rank 0 by hand: its private folder and the id file.
    fn fake_rank0(dir: &Path, size: usize, id: UniqueId) -> PathBuf {
        let folder = dir.join(format!("job.id.{JOB}.d"));
        std::fs::create_dir(&folder).unwrap();
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::write(dir.join("job.id"), format!("CUDNNRS3 {size} {JOB} {id}\n")).unwrap();
        folder
    }

    /// The nonce in an `ack-<r>-<nonce>` path.
    fn nonce_of(ack: &Path, rank: usize) -> String {
        let name = ack.file_name().unwrap().to_string_lossy().into_owned();
        name.strip_prefix(&format!("ack-{rank}-"))
            .unwrap()
            .to_string()
    }

    // ---------------------------------------------------------------- tcp

    /// A process that took rank 0's port first: with a token, the rank
    /// never sends the token and rejects it, at once; without one, it can
    /// hand the rank an id of its own (the documented exposure).
    fn tcp_squatter() -> TestResult {
        let token = "job-secret-7f3a9c-0123456789abcdef";
        for with_token in [true, false] {
            let l = TcpListener::bind("127.0.0.1:0")?;
            let port = l.local_addr()?.port();
            let squatter = std::thread::spawn(move || -> Vec<u8> {
                let mut seen = Vec::new();
                let Ok((mut c, _)) = l.accept() else {
                    return seen;
                };
                c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                let mut hello = [0u8; 33];
                if c.read_exact(&mut hello).is_err() {
                    return seen;
                }
                seen.extend_from_slice(&hello);
                // A challenge: a nonce of the squatter's choosing.
                let mut challenge = vec![0u8];
                challenge.extend_from_slice(&[0x11; 16]);
                let _ = c.write_all(&challenge);
                let mut rest = [0u8; 32];
                if c.read_exact(&mut rest).is_ok() {
                    seen.extend_from_slice(&rest);
                    // A made-up proof, then a forged id with a tag of zeros.
                    let mut answer = vec![0u8];
                    answer.extend_from_slice(&[if with_token { 0x22 } else { 0 }; 32]);
                    answer.push(0);
                    answer.extend_from_slice(&[0xEE; 128]);
                    answer.extend_from_slice(&[0; 32]);
                    let _ = c.write_all(&answer);
                }
                let mut more = Vec::new();
                let _ = c.read_to_end(&mut more);
                seen.extend_from_slice(&more);
                seen
            });
            let start = Instant::now();
            let r = rank_thread(
                &tcp(port),
                1,
                2,
                Duration::from_secs(5),
                with_token.then_some(token),
            )
            .join()
            .unwrap();
            let took = start.elapsed();
            let seen = squatter.join().unwrap();
            ensure!(
                !seen.windows(token.len()).any(|w| w == token.as_bytes()),
                "the rank sent its token to the squatter"
            );
            if with_token {
                let e = r.unwrap_err().to_string();
                ensure!(e.contains("failed to prove"), "{e}");
                ensure!(took < Duration::from_secs(2), "{took:?}");
                // The rank proves first: the squatter gets its hello and one
                // MAC over the squatter's nonce (the documented exposure,
                // hopeless to grind with a token of 128 bits), nothing more.
                ensure!(seen.len() == 33 + 32, "the rank sent {} bytes", seen.len());
            } else {
                ensure!(
                    r? == fixed(0xEE),
                    "without a token, a squatter's id is taken"
                );
            }
        }
        Ok(())
    }

    /// A relay between a rank and rank 0 that flips one bit of the id: the
    /// rank refuses the id rather than take it.
    fn tcp_relay() -> TestResult {
        on_free_port(tcp_relay_on)
    }

    fn tcp_relay_on(port: u16) -> TestResult {
        let h0 = rank_thread(
            &tcp(port),
            0,
            2,
            Duration::from_secs(10),
            Some("tok-0123456789abcdef0123456789abcdef"),
        );
        let l = TcpListener::bind("127.0.0.1:0")?;
        let relay_port = l.local_addr()?.port();
        let relay = std::thread::spawn(move || {
            let (client, _) = l.accept().unwrap();
            let start = Instant::now();
            let server = loop {
                match TcpStream::connect(("127.0.0.1", port)) {
                    Ok(s) => break s,
                    Err(_) if start.elapsed() < Duration::from_secs(5) => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    Err(e) => panic!("relay: {e}"),
                }
            };
            let (mut c_in, mut s_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            let up = std::thread::spawn(move || {
                let _ = std::io::copy(&mut c_in, &mut s_out);
                let _ = s_out.shutdown(Shutdown::Write);
            });
            let (mut s_in, mut c_out) = (server, client);
            let mut at = 0usize;
            let mut buf = [0u8; 256];
            while let Ok(n) = s_in.read(&mut buf) {
                if n == 0 {
                    break;
                }
                for b in &mut buf[..n] {
                    // Status and nonce (17 bytes), status and proof (33),
                    // status, then the id from byte 51.
                    if at == 60 {
                        *b ^= 1;
                    }
                    at += 1;
                }
                if c_out.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = c_out.shutdown(Shutdown::Both);
            let _ = up.join();
        });
        let e = rank_thread(
            &tcp(relay_port),
            1,
            2,
            Duration::from_secs(10),
            Some("tok-0123456789abcdef0123456789abcdef"),
        )
        .join()
        .unwrap()
        .unwrap_err()
        .to_string();
        // Rank 0 bound its port (or the port was taken: tried again).
        if let Err(e0) = h0.join().unwrap()
            && e0.to_string().contains("Address already in use")
        {
            return Err(e0.into());
        }
        ensure!(e.contains("tag is wrong"), "{e}");
        let _ = relay.join();
        Ok(())
    }

    /// 100 silent connections, each opened again as soon as rank 0 drops
    /// it: the real rank still gets the id, well within its 4 s.
    fn tcp_flood() -> TestResult {
        on_free_port(tcp_flood_on)
    }

    fn tcp_flood_on(port: u16) -> TestResult {
        let h0 = rank_thread(&tcp(port), 0, 2, Duration::from_secs(20), None);
        let stop = Arc::new(AtomicBool::new(false));
        let flood = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let open = || -> Option<TcpStream> {
                    let c = TcpStream::connect(("127.0.0.1", port)).ok()?;
                    c.set_nonblocking(true).ok()?;
                    Some(c)
                };
                let start = Instant::now();
                let mut socks: Vec<Option<TcpStream>> = Vec::new();
                while socks.len() < 100 && start.elapsed() < Duration::from_secs(5) {
                    match open() {
                        Some(c) => socks.push(Some(c)),
                        None => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
                let mut reopened = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    for s in socks.iter_mut() {
                        let closed = match s {
                            Some(c) => {
                                let mut b = [0u8; 1];
                                match c.read(&mut b) {
                                    // Closed (0), or rank 0 said something.
                                    Ok(0) | Ok(_) => true,
                                    Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
                                }
                            }
                            None => true,
                        };
                        if closed {
                            *s = open();
                            reopened += 1;
                        }
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                reopened
            })
        };
        std::thread::sleep(Duration::from_millis(500));
        let start = Instant::now();
        let r1 = rank_thread(&tcp(port), 1, 2, Duration::from_secs(4), None)
            .join()
            .unwrap();
        let took = start.elapsed();
        stop.store(true, Ordering::Relaxed);
        let reopened = flood.join().unwrap();
        let id0 = h0.join().unwrap();
        eprintln!("note: tcp_flood: {reopened} connections reopened; rank 1 took {took:?}");
        let id0 = id0?;
        ensure!(r1? == id0, "rank 1's id");
        Ok(())
    }

    /// With `LOCAL_WORLD_SIZE` below `WORLD_SIZE`, a loopback rendezvous
    /// is refused at once; without it, a timeout names the loopback address.
    fn tcp_loopback_remote() -> TestResult {
        on_free_port(tcp_loopback_remote_on)
    }

    fn tcp_loopback_remote_on(port: u16) -> TestResult {
        let rdzv = format!("tcp://127.0.0.1:{port}");
        let vars = |lws: &'static str, rdzv: String| {
            move |name: &str| -> Option<String> {
                match name {
                    "RANK" | "LOCAL_RANK" => Some("0".into()),
                    "WORLD_SIZE" => Some("2".into()),
                    "LOCAL_WORLD_SIZE" if !lws.is_empty() => Some(lws.into()),
                    "CUDNN_RS_RENDEZVOUS" => Some(rdzv.clone()),
                    "CUDNN_RS_RENDEZVOUS_TIMEOUT" => Some("0.5".into()),
                    _ => None,
                }
            }
        };
        let env = LaunchEnv::from_vars(vars("1", rdzv.clone()))?;
        let start = Instant::now();
        let e = launch::exchange_for(&env, || Ok(fixed(1))).unwrap_err();
        ensure!(matches!(e, Error::Rendezvous { .. }), "{e}");
        ensure!(e.to_string().contains("loopback"), "{e}");
        ensure!(start.elapsed() < Duration::from_millis(300), "not at once");
        // All local: served, until nobody comes; the timeout says loopback.
        let env = LaunchEnv::from_vars(vars("", rdzv))?;
        let e = launch::exchange_for(&env, || Ok(fixed(1))).unwrap_err();
        ensure!(
            e.to_string().contains("timed out") && e.to_string().contains("loopback"),
            "{e}"
        );
        Ok(())
    }

    // --------------------------------------------------------------- file

    /// A second process claiming rank 1 while the first waits for its
    /// answer: refused, and the first one's files stay.
    fn file_same_rank() -> TestResult {
        let dir = scratch("samerank");
        let path = dir.join("job.id");
        let r = Rendezvous::File(path.clone());
        let h0 = rank_thread(&r, 0, 2, Duration::from_secs(20), None);
        let folder = wait_for(&dir, "job.id.", Duration::from_secs(5))?;
        let start = Instant::now();
        while !path.exists() {
            ensure!(start.elapsed() < Duration::from_secs(5), "no id file");
            std::thread::sleep(Duration::from_millis(2));
        }
        let text = crate::support::rendezvous::read_written(&path, Duration::from_secs(5))?;
        let job = text.split(' ').nth(2).unwrap().to_string();
        // The first process for rank 1 (played here): acknowledged, answered,
        // and slow to take its answer.
        let first = "11111111111111111111111111111111";
        std::fs::write(
            folder.join(format!("ack-1-{first}")),
            format!("{job} 1 2 {first}\n"),
        )?;
        let ok = wait_for(&folder, &format!("ok-1-{first}"), Duration::from_secs(5))?;
        ensure!(
            crate::support::rendezvous::read_written(&ok, Duration::from_secs(5))?
                == format!("{job} {first} ok\n"),
            "the answer"
        );
        // The second: refused at once.
        let start = Instant::now();
        let e = rank_thread(&r, 1, 2, Duration::from_secs(5), None)
            .join()
            .unwrap()
            .unwrap_err()
            .to_string();
        ensure!(e.contains("already acknowledged"), "{e}");
        ensure!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        ensure!(
            files_in(&folder) == [format!("ack-1-{first}"), format!("ok-1-{first}")],
            "the first process's files: {:?}",
            files_in(&folder)
        );
        // The first takes its answer; rank 0 finishes and cleans up.
        std::fs::remove_file(folder.join(format!("ack-1-{first}")))?;
        std::fs::remove_file(&ok)?;
        ensure!(h0.join().unwrap()? == fixed(0xA0), "rank 0");
        ensure!(files_in(&dir).is_empty(), "left: {:?}", files_in(&dir));
        let _ = std::fs::remove_dir_all(dir);
        Ok(())
    }

    /// A rerun (rank 0 and a rank 1) beside a live job changes none of its
    /// files, and the live job finishes.
    fn file_rerun() -> TestResult {
        let dir = scratch("rerun");
        let path = dir.join("job.id");
        let r = Rendezvous::File(path.clone());
        let h0 = rank_thread(&r, 0, 3, Duration::from_secs(20), None);
        let start = Instant::now();
        while !path.exists() {
            ensure!(start.elapsed() < Duration::from_secs(5), "no id file");
            std::thread::sleep(Duration::from_millis(2));
        }
        let h1 = rank_thread(&r, 1, 3, Duration::from_secs(20), None);
        std::thread::sleep(Duration::from_millis(300));
        let before = (files_in(&dir), std::fs::read_to_string(&path)?);
        let e = rank_thread(&r, 0, 3, Duration::from_secs(2), None)
            .join()
            .unwrap()
            .unwrap_err()
            .to_string();
        ensure!(e.contains("already exists"), "{e}");
        ensure!(
            before == (files_in(&dir), std::fs::read_to_string(&path)?),
            "the rerun changed the live job's files"
        );
        let h2 = rank_thread(&r, 2, 3, Duration::from_secs(20), None);
        let id0 = h0.join().unwrap()?;
        ensure!(
            h1.join().unwrap()? == id0 && h2.join().unwrap()? == id0,
            "ids"
        );
        ensure!(files_in(&dir).is_empty(), "left: {:?}", files_in(&dir));
        let _ = std::fs::remove_dir_all(dir);
        Ok(())
    }

    /// Files another user left in a shared sticky folder, under the names
    /// of acknowledgements and answers: the job runs all the same.
    fn file_planted() -> TestResult {
        let dir = scratch("planted");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777))?;
        let planted = [
            "job.id.ack-1",
            "job.id.ack-2",
            "job.id.ok-1",
            "job.id.ok-2",
            "job.id.d",
        ];
        for p in &planted[..4] {
            std::fs::write(dir.join(p), "x\n")?;
        }
        std::fs::create_dir(dir.join(planted[4]))?;
        if chown_works() {
            for p in planted {
                std::os::unix::fs::chown(dir.join(p), Some(65534), Some(65534))?;
            }
        } else {
            eprintln!("note: file_planted_files_do_not_abort: planted as this user");
        }
        let r = Rendezvous::File(dir.join("job.id"));
        let t = Duration::from_secs(20);
        let hs = [
            rank_thread(&r, 1, 3, t, None),
            rank_thread(&r, 2, 3, t, None),
            rank_thread(&r, 0, 3, t, None),
        ];
        let ids: Vec<UniqueId> = hs
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<cudnn::Result<_>>()?;
        ensure!(ids.iter().all(|i| *i == fixed(0xA0)), "ids");
        let mut want: Vec<String> = planted.iter().map(|s| s.to_string()).collect();
        want.sort();
        ensure!(files_in(&dir) == want, "{:?}", files_in(&dir));
        let _ = std::fs::remove_dir_all(dir);
        Ok(())
    }

    /// Rank 0 gives up while a rank waits: the rank stops at once, told
    /// why; rank 0 leaves its note only while someone may still read it.
    fn file_abort() -> TestResult {
        // The rank's side: rank 0 played by hand.
        let dir = scratch("abort-rank");
        let folder = fake_rank0(&dir, 2, fixed(9));
        let start = Instant::now();
        let h1 = rank_thread(
            &Rendezvous::File(dir.join("job.id")),
            1,
            2,
            Duration::from_secs(20),
            None,
        );
        let ack = wait_for(&folder, "ack-1-", Duration::from_secs(5))?;
        std::fs::write(
            folder.join("abort"),
            format!("{JOB} abort a test gave up\n"),
        )?;
        let e = h1.join().unwrap().unwrap_err().to_string();
        ensure!(e.contains("rank 0 gave up: a test gave up"), "{e}");
        ensure!(
            start.elapsed() < Duration::from_secs(3),
            "{:?}",
            start.elapsed()
        );
        ensure!(!ack.exists(), "the rank left its acknowledgement");
        // An abort note of another job is not this job's.
        let folder2 = {
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir)?;
            fake_rank0(&dir, 2, fixed(9))
        };
        std::fs::write(folder2.join("abort"), "ffff abort another job\n")?;
        let e = rank_thread(
            &Rendezvous::File(dir.join("job.id")),
            1,
            2,
            Duration::from_millis(500),
            None,
        )
        .join()
        .unwrap()
        .unwrap_err()
        .to_string();
        ensure!(e.contains("timed out"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
        // Rank 0's side: it times out with an answered rank that never took
        // its answer; the note stays for it, tagged with the job's nonce.
        let dir = scratch("abort-rank0");
        let path = dir.join("job.id");
        let h0 = rank_thread(
            &Rendezvous::File(path.clone()),
            0,
            3,
            Duration::from_millis(1500),
            None,
        );
        let folder = wait_for(&dir, "job.id.", Duration::from_secs(5))?;
        let start = Instant::now();
        while !path.exists() {
            ensure!(start.elapsed() < Duration::from_secs(5), "no id file");
            std::thread::sleep(Duration::from_millis(2));
        }
        let job = crate::support::rendezvous::read_written(&path, Duration::from_secs(5))?
            .split(' ')
            .nth(2)
            .unwrap()
            .to_string();
        let mine = "22222222222222222222222222222222";
        std::fs::write(
            folder.join(format!("ack-1-{mine}")),
            format!("{job} 1 3 {mine}\n"),
        )?;
        let e = h0.join().unwrap().unwrap_err().to_string();
        ensure!(e.contains("timed out"), "{e}");
        let note = std::fs::read_to_string(folder.join("abort"))?;
        ensure!(
            note.starts_with(&format!("{job} abort timed out")),
            "{note:?}"
        );
        ensure!(!path.exists(), "the id file stayed");
        let _ = std::fs::remove_dir_all(dir);
        Ok(())
    }

    /// Someone removes a waiting rank's acknowledgement: it writes it again,
    /// and takes its answer.
    fn file_ack_rewritten() -> TestResult {
        let dir = scratch("rewrite");
        let folder = fake_rank0(&dir, 2, fixed(7));
        let h1 = rank_thread(
            &Rendezvous::File(dir.join("job.id")),
            1,
            2,
            Duration::from_secs(10),
            None,
        );
        let ack = wait_for(&folder, "ack-1-", Duration::from_secs(5))?;
        let mine = nonce_of(&ack, 1);
        std::fs::remove_file(&ack)?;
        let again = wait_for(&folder, "ack-1-", Duration::from_secs(3))?;
        ensure!(nonce_of(&again, 1) == mine, "another nonce");
        std::fs::write(
            folder.join(format!("ok-1-{mine}")),
            format!("{JOB} {mine} ok\n"),
        )?;
        ensure!(h1.join().unwrap()? == fixed(7), "the id");
        ensure!(files_in(&folder).is_empty(), "{:?}", files_in(&folder));
        let _ = std::fs::remove_dir_all(dir);
        Ok(())
    }

    /// A well-formed answer owned by another user is refused.
    fn file_answer_owner() -> TestResult {
        let dir = scratch("answerowner");
        let folder = fake_rank0(&dir, 2, fixed(7));
        let h1 = rank_thread(
            &Rendezvous::File(dir.join("job.id")),
            1,
            2,
            Duration::from_secs(10),
            None,
        );
        let ack = wait_for(&folder, "ack-1-", Duration::from_secs(5))?;
        let mine = nonce_of(&ack, 1);
        let tmp = dir.join("answer");
        std::fs::write(&tmp, format!("{JOB} {mine} ok\n"))?;
        std::os::unix::fs::chown(&tmp, Some(65534), Some(65534))?;
        std::fs::rename(&tmp, folder.join(format!("ok-1-{mine}")))?;
        let e = h1.join().unwrap().unwrap_err().to_string();
        ensure!(e.contains("owned by user 65534"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
        Ok(())
    }

    // ------------------------------------------------------ env, secrets

    /// The local rank's variable is remembered and named.
    fn local_rank_named() -> TestResult {
        let slurm = |name: &str| -> Option<String> {
            match name {
                "SLURM_PROCID" => Some("1".into()),
                "SLURM_NTASKS" => Some("2".into()),
                "SLURM_LOCALID" => Some("1".into()),
                "CUDNN_RS_RENDEZVOUS" => Some("tcp://127.0.0.1:9".into()),
                _ => None,
            }
        };
        let env = LaunchEnv::from_vars(slurm)?;
        ensure!(env.local_rank_var == "SLURM_LOCALID", "{env:?}");
        let single = LaunchEnv::from_vars(|_| None)?;
        ensure!(single.local_rank_var == "LOCAL_RANK", "{single:?}");
        if has_gpu() {
            eprintln!("note: local_rank_variable_named: this machine has a GPU; init not tried");
            return Ok(());
        }
        // SAFETY: every other rank runs this same test code: the same calls in the same order.
        let e = unsafe { launch::init(env) }.unwrap_err();
        if matches!(e, Error::Load(_)) {
            eprintln!(
                "note: local_rank_variable_named: no CUDA runtime here; init's message not checked"
            );
            return Ok(());
        }
        let e = e.to_string();
        ensure!(
            e.contains("SLURM_LOCALID") && !e.contains("LOCAL_RANK="),
            "{e}"
        );
        Ok(())
    }

    fn secrets() -> TestResult {
        let a = Token::new("same-secret-0123456789abcdef012345")?;
        ensure!(
            a == Token::new("same-secret-0123456789abcdef012345")?,
            "equal tokens"
        );
        for other in [
            "same-secret-0123456789abcdef01234T",
            "same-secret-0123456789abcdef0123",
            "same-secret-0123456789abcdef0123456",
            "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx1",
        ] {
            ensure!(a != Token::new(other)?, "{other}");
        }
        let id = UniqueId::from([0xAB; 128]);
        let shown = format!("{id:?}");
        ensure!(
            shown.starts_with("UniqueId(sha256:") && !shown.contains("abab"),
            "{shown}"
        );
        ensure!(shown.len() < 40, "{shown}");
        ensure!(
            format!("{:?}", UniqueId::from([0xAC; 128])) != shown,
            "two ids, one fingerprint"
        );
        Ok(())
    }
}
