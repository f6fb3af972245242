//! The rendezvous, without a GPU (unit and host tiers; the launch variables
//! are in `unit/launch_variables`, hostile TCP peers in
//! `host/nccl_rendezvous_tcp`, attacks in `host/nccl_rendezvous_attacks`):
//! the file and TCP rendezvous between real processes and threads
//! (127.0.0.1 only), and the file rendezvous against hostile files
//! (/dev/zero, a FIFO, a huge file, a symbolic link, a stale id, old
//! acknowledgements, garbage, another user's file). Every deadline is held
//! to within 10 % + 100 ms.
//!
//! The process tests start this binary again as the other ranks
//! (`HOST_NCCL_RDZV_CHILD` tells it which), so they are real processes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

crate::nccl_main!("host/nccl_rendezvous", "host::nccl_rendezvous");

#[cfg(feature = "nccl")]
mod imp {
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    use cudnn::Error;
    use cudnn::nccl::launch::{self, LaunchEnv, Rendezvous, Token};
    use cudnn::nccl::{Ranks, UniqueId};
    use libtest_mimic::Trial;

    use crate::support::rendezvous::nccl_host as host;
    use crate::support::rendezvous::{fixed, held, on_free_port, rank_of, rank_thread, tcp};
    use crate::support::{TestResult, has_gpu, run, unit};

    const CHILD: &str = "HOST_NCCL_RDZV_CHILD";
    /// Set: read the launch variables from the real environment, print the
    /// outcome and exit.
    const FROM_ENV: &str = "HOST_NCCL_RDZV_FROM_ENV";

    pub fn main() {
        if let Ok(spec) = std::env::var(CHILD) {
            child(&spec);
        }
        if std::env::var_os(FROM_ENV).is_some() {
            match LaunchEnv::from_env() {
                Ok(e) => println!("ok {} {} {}", e.ranks.rank(), e.ranks.size(), e.local_rank),
                Err(e) => println!("err {e}"),
            }
            std::process::exit(0);
        }
        run(vec![
            unit("from_env_in_a_child_process", from_env_child),
            unit("file_refuses_existing_id_file", file_refuses_existing),
            unit("file_dev_zero_fifo_and_huge_files", file_special_files),
            unit("file_garbage_and_half_written_id", file_garbage),
            unit("file_stale_id_is_never_taken", file_stale_id),
            unit("file_old_acknowledgements_ignored", file_old_acks),
            unit("file_world_size_mismatch_both_sides", file_mismatch),
            unit("file_rank0_alone_times_out_and_cleans_up", file_rank0_alone),
            unit("file_fifo_acknowledgement_does_not_hang", file_fifo_ack),
            unit(
                "file_folder_swapped_for_a_link_rank0_touches_nothing_else",
                file_swapped_folder_rank0,
            ),
            unit(
                "file_folder_that_is_a_link_refused_by_ranks",
                file_linked_folder_rank1,
            ),
            can_chown(unit("file_owned_by_another_user_refused", file_other_owner)),
            unit("tcp_world_size_mismatch_process", tcp_world_mismatch),
            host("launch_without_gpu_says_so", launch_without_gpu),
            host("rendezvous_file_three_processes", || {
                rendezvous_processes("file", None)
            }),
            host("rendezvous_tcp_loopback_three_processes", || {
                rendezvous_processes("tcp", None)
            }),
            host("rendezvous_tcp_token_three_processes", || {
                rendezvous_processes("tcp", Some("job-secret-42-0123456789abcdef0123"))
            }),
        ]);
    }

    // ---------------------------------------------------------------- tiers

    // ----------------------------------------------------------- children

    /// `HOST_NCCL_RDZV_CHILD="<rendezvous> <rank> <size> <timeout_s> [token]"`:
    /// take part in the exchange as a non-zero rank and print the id.
    fn child(spec: &str) -> ! {
        let parts: Vec<&str> = spec.split(' ').collect();
        let (rdzv, rank, size, timeout, token) = match parts.as_slice() {
            [a, b, c, d] => (*a, *b, *c, *d, None),
            [a, b, c, d, t] => (*a, *b, *c, *d, Some(Token::new(*t).unwrap())),
            _ => {
                eprintln!("bad {CHILD}: {spec:?}");
                std::process::exit(2);
            }
        };
        let r: Rendezvous = rdzv.parse().expect("rendezvous");
        let ranks = Ranks::new(rank.parse().unwrap(), size.parse().unwrap()).expect("ranks");
        let timeout = Duration::from_secs_f64(timeout.parse().unwrap());
        match launch::exchange_with_token(&r, ranks, timeout, token.as_ref(), || {
            panic!("only rank 0 makes the id")
        }) {
            Ok(id) => {
                println!("{id}");
                std::process::exit(0)
            }
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(1)
            }
        }
    }

    fn spawn(
        rdzv: &Rendezvous,
        rank: usize,
        size: usize,
        timeout: f64,
        token: Option<&str>,
    ) -> Child {
        let mut spec = format!("{rdzv} {rank} {size} {timeout}");
        if let Some(t) = token {
            spec.push(' ');
            spec.push_str(t);
        }
        Command::new(std::env::current_exe().unwrap())
            .env(CHILD, spec)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning a rank")
    }

    fn finish(c: Child) -> (bool, String, String) {
        let out = c.wait_with_output().expect("waiting for a rank");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        )
    }

    // ------------------------------------------------------------ helpers

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("host_nccl_rdzv-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn files_in(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    fn vars(list: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        crate::support::rendezvous::vars(list)
    }

    // ---------------------------------------------------- launch variables

    /// `LaunchEnv::from_env` on a real environment (a child's, so this
    /// process's stays untouched): Open MPI's variables, and a variable that
    /// is not UTF-8, which is named rather than taken as unset.
    fn from_env_child() -> TestResult {
        use std::ffi::OsStr;
        use std::os::unix::ffi::OsStrExt;
        let go = |vars: &[(&str, &OsStr)]| -> String {
            let mut c = Command::new(std::env::current_exe().unwrap());
            c.env(FROM_ENV, "1");
            for v in launch::VARIABLES {
                c.env_remove(v);
            }
            for (k, v) in vars {
                c.env(k, v);
            }
            let out = c.output().expect("running a child");
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        let o = |s: &'static str| OsStr::new(s);
        let got = go(&[
            ("OMPI_COMM_WORLD_RANK", o("3")),
            ("OMPI_COMM_WORLD_SIZE", o("4")),
            ("OMPI_COMM_WORLD_LOCAL_RANK", o("1")),
            ("CUDNN_RS_RENDEZVOUS", o("/shared/job.id")),
        ]);
        ensure!(got == "ok 3 4 1", "mpi: {got}");
        ensure!(go(&[]) == "ok 0 1 0", "nothing set: {}", go(&[]));
        let got = go(&[
            ("RANK", OsStr::from_bytes(b"\xff1")),
            ("WORLD_SIZE", o("2")),
        ]);
        ensure!(
            got.starts_with("err") && got.contains("RANK") && got.contains("UTF-8"),
            "{got}"
        );
        let got = go(&[("RANK", o("")), ("WORLD_SIZE", o("2"))]);
        ensure!(
            got.starts_with("err") && got.contains("RANK"),
            "empty RANK: {got}"
        );
        Ok(())
    }

    // ------------------------------------------------------ file, hostile

    fn file_refuses_existing() -> TestResult {
        let dir = scratch("existing");
        let path = dir.join("job.id");
        std::fs::write(&path, "left over").unwrap();
        let (e, _) = rank_of(
            &Rendezvous::File(path.clone()),
            0,
            2,
            Duration::from_secs(5),
        );
        let e = e.unwrap_err();
        ensure!(matches!(e, Error::Rendezvous { .. }), "{e}");
        ensure!(e.to_string().contains("already exists"), "{e}");
        ensure!(
            std::fs::read_to_string(&path).unwrap() == "left over",
            "file was touched"
        );
        let _ = std::fs::remove_dir_all(dir);
        Ok(())
    }

    fn mkfifo(p: &Path) -> TestResult {
        let st = Command::new("mkfifo").arg(p).status()?;
        ensure!(st.success(), "mkfifo {} failed", p.display());
        Ok(())
    }

    fn file_special_files() -> TestResult {
        let dir = scratch("special");
        let t = Duration::from_secs(3);
        // /dev/zero behind the id path.
        let zero = dir.join("zero.id");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let (e, took) = rank_of(&Rendezvous::File(zero.clone()), 1, 2, t);
        let e = e.unwrap_err().to_string();
        ensure!(e.contains("symbolic link"), "a link to /dev/zero: {e}");
        ensure!(
            took < Duration::from_secs(1),
            "a link to /dev/zero: {took:?}"
        );
        let (e, took) = rank_of(&Rendezvous::File("/dev/zero".into()), 1, 2, t);
        let e = e.unwrap_err().to_string();
        ensure!(e.contains("not a regular file"), "/dev/zero: {e}");
        ensure!(took < Duration::from_secs(1), "/dev/zero: {took:?}");
        let (e, _) = rank_of(&Rendezvous::File(zero.clone()), 0, 2, t);
        ensure!(
            e.unwrap_err().to_string().contains("already exists"),
            "rank 0 at /dev/zero"
        );
        // A FIFO nobody writes: opening it must not block.
        let fifo = dir.join("fifo.id");
        mkfifo(&fifo)?;
        let (e, took) = rank_of(&Rendezvous::File(fifo.clone()), 1, 2, t);
        let e = e.unwrap_err().to_string();
        ensure!(e.contains("not a regular file"), "fifo: {e}");
        ensure!(took < Duration::from_secs(1), "fifo: {took:?}");
        // A sparse terabyte: refused by its size, not read.
        let huge = dir.join("huge.id");
        std::fs::File::create(&huge)
            .unwrap()
            .set_len(1 << 40)
            .unwrap();
        let (e, took) = rank_of(&Rendezvous::File(huge.clone()), 1, 2, t);
        let e = e.unwrap_err().to_string();
        ensure!(e.contains("1099511627776 bytes"), "huge: {e}");
        ensure!(took < Duration::from_secs(1), "huge: {took:?}");
        // A file just past the limit.
        let big = dir.join("big.id");
        std::fs::write(&big, vec![b'a'; 1025]).unwrap();
        let (e, _) = rank_of(&Rendezvous::File(big), 1, 2, t);
        ensure!(
            e.unwrap_err().to_string().contains("1025 bytes"),
            "1025 bytes"
        );
        let _ = std::fs::remove_dir_all(dir);
        Ok(())
    }

    fn file_garbage() -> TestResult {
        let dir = scratch("garbage");
        let t = Duration::from_secs(1);
        for (name, text, says) in [
            ("a.id", "hello world\n", "not a rendezvous file"),
            ("b.id", "CUDNNRS1 2 00ff\n", "another version"),
            (
                "c.id",
                "CUDNNRS3 2 0123456789abcdef0123456789abcdef 00ff\n",
                "hex digits",
            ),
            ("g.id", "CUDNNRS3 2 abc 00ff\n", "not a rendezvous file"),
            ("d.id", "\u{0}\u{1}\n", "not a rendezvous file"),
        ] {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            let (e, took) = rank_of(&Rendezvous::File(p.clone()), 1, 2, t);
            let e = e.unwrap_err().to_string();
            ensure!(e.contains(says), "{text:?}: {e}");
            ensure!(took < t, "{text:?}: it waited {took:?}");
            ensure!(p.exists(), "{text:?}: a rank removed the id file");
        }
        // Not UTF-8.
        let p = dir.join("e.id");
        std::fs::write(&p, [0xffu8, 0xfe, b'\n']).unwrap();
        let (e, _) = rank_of(&Rendezvous::File(p), 1, 2, t);
        ensure!(e.unwrap_err().to_string().contains("not text"), "bytes");
        // Half written (no newline yet): waited for, until the deadline.
        let p = dir.join("f.id");
        std::fs::write(&p, "CUDNNRS3 2 ab").unwrap();
        let (e, took) = rank_of(&Rendezvous::File(p), 1, 2, t);
        let e = e.unwrap_err().to_string();
        ensure!(
            e.contains("timed out") && e.contains("finish writing"),
            "{e}"
        );
        held("half-written id file", took, t)?;
        let _ = std::fs::remove_dir_all(dir);
        Ok(())
    }

    fn file_stale_id() -> TestResult {
        let dir = scratch("stale");
        let path = dir.join("job.id");
        let stale = fixed(0x5e);
        let job = "0123456789abcdef0123456789abcdef";
        std::fs::write(&path, format!("CUDNNRS3 2 {job} {stale}\n")).unwrap();
        // Its folder gone too: refused at once.
        let t = Duration::from_millis(1500);
        let r = Rendezvous::File(path.clone());
        let (e, took) = rank_of(&r, 1, 2, t);
        let e = e.unwrap_err().to_string();
        ensure!(e.contains("missing") && e.contains("earlier run"), "{e}");
        ensure!(took < Duration::from_secs(1), "{took:?}");
        // Its folder still there (rank 0 killed): waited for, never taken.
        let folder = dir.join(format!("job.id.{job}.d"));
        std::fs::create_dir(&folder).unwrap();
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o700)).unwrap();
        let start = Instant::now();
        let h = rank_thread(&r, 1, 2, t, None);
        // While it waits: its acknowledgement names both nonces, mode 0600.
        let ack = wait_for(&folder, "ack-1-", t)?;
        let text = std::fs::read_to_string(&ack).map_err(|e| format!("no acknowledgement: {e}"))?;
        let mine = ack
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .strip_prefix("ack-1-")
            .unwrap()
            .to_string();
        ensure!(mine.len() == 32, "{mine:?}");
        ensure!(text == format!("{job} 1 2 {mine}\n"), "{text:?}");
        let mode = std::fs::metadata(&ack).unwrap().permissions().mode() & 0o777;
        ensure!(mode == 0o600, "acknowledgement mode {mode:o}");
        let e = h.join().unwrap();
        let took = start.elapsed();
        let e = match e {
            Ok(id) => return Err(format!("a stale id was taken: {id}").into()),
            Err(e) => e.to_string(),
        };
        ensure!(e.contains("timed out") && e.contains("earlier run"), "{e}");
        held("stale id file", took, t)?;
        // The id file is rank 0's to remove; the rank's own files are gone.
        ensure!(files_in(&folder).is_empty(), "{:?}", files_in(&folder));
        let _ = std::fs::remove_dir_all(dir);
        Ok(())
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

    fn file_old_acks() -> TestResult {
        let dir = scratch("oldacks");
        let path = dir.join("job.id");
        // An earlier run's leftovers (and a stray): never counted, never
        // touched.
        let planted = [
            "job.id.ack-1",
            "job.id.ack-2",
            "job.id.ack-7",
            "job.id.ok-1",
            "job.id.feedfeedfeedfeedfeedfeedfeedfeed.d",
        ];
        for p in &planted[..4] {
            std::fs::write(dir.join(p), "feedfeedfeedfeed 1 3\n").unwrap();
        }
        std::fs::create_dir(dir.join(planted[4])).unwrap();
        std::fs::write(dir.join(planted[4]).join("ack-1-0"), "feed 1 3 0\n").unwrap();
        let r = Rendezvous::File(path.clone());
        let t = Duration::from_secs(20);
        // Rank 0 first, this time: with the old acknowledgements counted it
        // would remove the id before the ranks read it.
        let h0 = rank_thread(&r, 0, 3, t, None);
        let start = Instant::now();
        while !path.exists() {
            ensure!(start.elapsed() < Duration::from_secs(10), "no id file");
            std::thread::sleep(Duration::from_millis(5));
        }
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        ensure!(mode == 0o600, "id file mode {mode:o}");
        std::thread::sleep(Duration::from_millis(200));
        ensure!(path.exists(), "rank 0 removed the id before anyone read it");
        let h1 = rank_thread(&r, 1, 3, t, None);
        let h2 = rank_thread(&r, 2, 3, t, None);
        let id0 = h0.join().unwrap()?;
        ensure!(id0 == fixed(0xA0), "rank 0's id");
        ensure!(h1.join().unwrap()? == id0, "rank 1");
        ensure!(h2.join().unwrap()? == id0, "rank 2");
        let mut want = planted.to_vec();
        want.sort();
        ensure!(
            files_in(&dir) == want,
            "left behind or removed: {:?}",
            files_in(&dir)
        );
        ensure!(
            files_in(&dir.join(planted[4])) == ["ack-1-0"],
            "another job's folder touched"
        );
        let _ = std::fs::remove_dir_all(dir);
        Ok(())
    }

    fn file_mismatch() -> TestResult {
        let dir = scratch("mismatch");
        let r = Rendezvous::File(dir.join("job.id"));
        let h0 = rank_thread(&r, 0, 2, Duration::from_secs(20), None);
        let h1 = rank_thread(&r, 1, 3, Duration::from_secs(20), None);
        let e0 = h0.join().unwrap().unwrap_err().to_string();
        let e1 = h1.join().unwrap().unwrap_err().to_string();
        ensure!(
            e0.contains("rank 1 has world size 3, rank 0 2"),
            "rank 0: {e0}"
        );
        ensure!(e1.contains("world size 2, this rank has 3"), "rank 1: {e1}");
        ensure!(
            files_in(&dir).is_empty(),
            "left behind: {:?}",
            files_in(&dir)
        );
        let _ = std::fs::remove_dir_all(dir);
        Ok(())
    }

    fn file_rank0_alone() -> TestResult {
        let dir = scratch("alone");
        let t = Duration::from_secs(1);
        let (e, took) = rank_of(&Rendezvous::File(dir.join("job.id")), 0, 4, t);
        let e = e.unwrap_err().to_string();
        ensure!(
            e.contains("timed out waiting for 3 rank(s) ([1, 2, 3])"),
            "{e}"
        );
        held("rank 0 alone", took, t)?;
        ensure!(
            files_in(&dir).is_empty(),
            "left behind: {:?}",
            files_in(&dir)
        );
        // A rank alone, no id file at all.
        let (e, took) = rank_of(&Rendezvous::File(dir.join("never")), 1, 2, t);
        ensure!(
            e.unwrap_err().to_string().contains("rank 0 to write it"),
            "rank 1 alone"
        );
        held("rank 1 alone", took, t)?;
        let _ = std::fs::remove_dir_all(dir);
        Ok(())
    }

    /// A FIFO where rank 0 reads an acknowledgement: no hang.
    fn file_fifo_ack() -> TestResult {
        let dir = scratch("fifoack");
        let path = dir.join("job.id");
        let t = Duration::from_secs(1);
        let start = Instant::now();
        let h0 = rank_thread(&Rendezvous::File(path.clone()), 0, 2, t, None);
        let folder = wait_for(&dir, "job.id.", t)?;
        mkfifo(&folder.join("ack-1-00ff"))?;
        let e = h0.join().unwrap().unwrap_err().to_string();
        ensure!(e.contains("timed out"), "{e}");
        held("FIFO acknowledgement", start.elapsed(), t)?;
        let _ = std::fs::remove_dir_all(dir);
        Ok(())
    }

    /// The ownership test needs to give a file away (root); elsewhere it is
    /// skipped, visibly.
    fn can_chown(t: Trial) -> Trial {
        let dir = scratch("chown-probe");
        let p = dir.join("probe");
        std::fs::write(&p, "").unwrap();
        let ok = std::os::unix::fs::chown(&p, Some(65534), None).is_ok();
        let _ = std::fs::remove_dir_all(dir);
        if ok {
            t
        } else {
            eprintln!(
                "skipped: {}: this user cannot give a file to another user",
                t.name()
            );
            t.with_ignored_flag(true)
        }
    }

    /// An id file planted by another user is refused, never answered.
    fn file_other_owner() -> TestResult {
        let dir = scratch("owner");
        let path = dir.join("job.id");
        std::fs::write(
            &path,
            format!("CUDNNRS3 2 0123456789abcdef0123456789abcdef {}\n", fixed(3)),
        )
        .unwrap();
        std::os::unix::fs::chown(&path, Some(65534), Some(65534))?;
        let t = Duration::from_secs(3);
        let (e, took) = rank_of(&Rendezvous::File(path.clone()), 1, 2, t);
        let e = e.unwrap_err().to_string();
        ensure!(e.contains("owned by user 65534"), "{e}");
        ensure!(took < Duration::from_secs(1), "{took:?}");
        ensure!(files_in(&dir) == ["job.id"], "{:?}", files_in(&dir));
        let _ = std::fs::remove_dir_all(dir);
        Ok(())
    }

    fn tcp_world_mismatch() -> TestResult {
        on_free_port(tcp_world_mismatch_on)
    }

    fn tcp_world_mismatch_on(port: u16) -> TestResult {
        let r = tcp(port);
        // The child thinks the job has 3 ranks; rank 0 says 2.
        let c = spawn(&r, 1, 3, 20.0, None);
        let t = Duration::from_secs(3);
        let (e, took) = rank_of(&r, 0, 2, t);
        let e = e.unwrap_err().to_string();
        let (ok, out, err) = finish(c);
        ensure!(!ok && out.is_empty(), "the child got an id: {out}");
        ensure!(
            err.contains("refused") && err.contains("world size 3"),
            "child: {err}"
        );
        // Rank 0 went on waiting for a real rank 1, then listed the refusal.
        ensure!(
            e.contains("timed out") && e.contains("world size 3"),
            "rank 0: {e}"
        );
        held("rank 0 after a refusal", took, t)?;
        Ok(())
    }

    // ---------------------------------------------------------- host tier

    /// Joining a job on a machine without a GPU fails with `NoDevice`,
    /// naming `LOCAL_RANK`, before any rendezvous.
    fn launch_without_gpu() -> TestResult {
        if has_gpu() {
            eprintln!(
                "note: host::launch_without_gpu_says_so: this machine has a GPU; not applicable"
            );
            return Ok(());
        }
        let env = LaunchEnv::from_vars(vars(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "1"),
            // Nobody listens here: reaching the rendezvous would time out.
            ("CUDNN_RS_RENDEZVOUS", "tcp://127.0.0.1:9"),
            ("CUDNN_RS_RENDEZVOUS_TIMEOUT", "60"),
        ]))?;
        let t = Instant::now();
        // SAFETY: every other rank runs this same test code: the same calls in the same order.
        let e = unsafe { launch::init(env) }.unwrap_err();
        ensure!(matches!(e, Error::NoDevice { .. }), "{e}");
        ensure!(e.to_string().contains("LOCAL_RANK=1"), "{e}");
        ensure!(
            t.elapsed() < Duration::from_secs(20),
            "it waited for the rendezvous: {e}"
        );
        Ok(())
    }

    fn rendezvous_processes(kind: &str, token: Option<&str>) -> TestResult {
        on_free_port(|port| rendezvous_processes_on(kind, token, port))
    }

    fn rendezvous_processes_on(kind: &str, token: Option<&str>, port: u16) -> TestResult {
        let dir = scratch(&format!("{kind}-{}", token.is_some()));
        let r = match kind {
            "file" => Rendezvous::File(dir.join("job.id")),
            _ => tcp(port),
        };
        // The other ranks start first, so they must wait for rank 0.
        let children = [spawn(&r, 1, 3, 60.0, token), spawn(&r, 2, 3, 60.0, token)];
        std::thread::sleep(Duration::from_millis(200));
        let tok = token.map(Token::new).transpose()?;
        let id = launch::exchange_with_token(
            &r,
            Ranks::new(0, 3)?,
            Duration::from_secs(60),
            tok.as_ref(),
            UniqueId::new,
        )?;
        for (i, c) in children.into_iter().enumerate() {
            let (ok, out, err) = finish(c);
            ensure!(ok, "rank {} failed: {err}", i + 1);
            let got: UniqueId = out
                .parse()
                .map_err(|e| format!("rank {}: {e}: {out:?}", i + 1))?;
            ensure!(got == id, "rank {} received another id", i + 1);
        }
        ensure!(
            files_in(&dir).is_empty(),
            "rendezvous files left behind: {:?}",
            files_in(&dir)
        );
        let _ = std::fs::remove_dir_all(dir);
        Ok(())
    }

    // -------------------------------------------- file, a folder swapped

    /// The attack on rank 0: once rank 0 made its private folder,
    /// someone who may write the shared folder renames it away and puts a
    /// symbolic link to another folder of the user in its place. Before the
    /// fix rank 0 then wrote its `abort` note into that folder and, finding
    /// no acknowledgement there, emptied it (a checkpoint was deleted). Now
    /// it works through the descriptor of the folder it made: the other
    /// folder is untouched, the link is left alone, and the note went into
    /// rank 0's own (moved) folder.
    fn file_swapped_folder_rank0() -> TestResult {
        let base = scratch("swap-rank0");
        let shared = base.join("shared");
        let victim = base.join("victim");
        let moved = base.join("moved");
        std::fs::create_dir(&shared)?;
        std::fs::create_dir(&victim)?;
        std::fs::write(victim.join("checkpoint.pt"), "weights")?;
        let path = shared.join("job.id");
        let h0 = {
            let r = Rendezvous::File(path.clone());
            std::thread::spawn(move || {
                launch::exchange(
                    &r,
                    Ranks::new(0, 2).unwrap(),
                    Duration::from_millis(1500),
                    || Ok(fixed(1)),
                )
            })
        };
        let start = Instant::now();
        while !path.exists() {
            ensure!(start.elapsed() < Duration::from_secs(5), "no id file");
            std::thread::sleep(Duration::from_millis(2));
        }
        let job = crate::support::rendezvous::read_written(&path, Duration::from_secs(5))?
            .split(' ')
            .nth(2)
            .unwrap_or_default()
            .to_string();
        let folder = shared.join(format!("job.id.{job}.d"));
        std::fs::rename(&folder, &moved)?;
        std::os::unix::fs::symlink(&victim, &folder)?;
        let e = h0.join().unwrap().unwrap_err().to_string();
        ensure!(e.contains("timed out"), "{e}");
        ensure!(
            files_in(&victim) == ["checkpoint.pt"],
            "rank 0 touched the folder the link points to: {:?}",
            files_in(&victim)
        );
        ensure!(
            std::fs::read_to_string(victim.join("checkpoint.pt"))? == "weights",
            "the checkpoint changed"
        );
        ensure!(
            std::fs::symlink_metadata(&folder)?.file_type().is_symlink(),
            "the link was removed"
        );
        ensure!(!path.exists(), "the id file stayed");
        // Rank 0 emptied its own folder (where it is now), not the link.
        ensure!(files_in(&moved).is_empty(), "{:?}", files_in(&moved));
        let _ = std::fs::remove_dir_all(base);
        Ok(())
    }

    /// A rank finds the job's folder to be a symbolic link (to a folder of
    /// its own user, mode 0700): it refuses, naming the link, and writes
    /// nothing where the link points.
    fn file_linked_folder_rank1() -> TestResult {
        let base = scratch("swap-rank1");
        let victim = base.join("victim");
        std::fs::create_dir(&victim)?;
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o700))?;
        let job = "0123456789abcdef0123456789abcdef";
        std::os::unix::fs::symlink(&victim, base.join(format!("job.id.{job}.d")))?;
        std::fs::write(
            base.join("job.id"),
            format!("CUDNNRS3 2 {job} {}\n", fixed(3)),
        )?;
        let (e, _) = rank_of(
            &Rendezvous::File(base.join("job.id")),
            1,
            2,
            Duration::from_secs(2),
        );
        let e = e.unwrap_err().to_string();
        ensure!(e.contains("symbolic link"), "{e}");
        ensure!(files_in(&victim).is_empty(), "{:?}", files_in(&victim));
        let _ = std::fs::remove_dir_all(base);
        Ok(())
    }
}
