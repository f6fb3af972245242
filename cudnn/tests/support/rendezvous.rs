//! Helpers shared by the rendezvous tests (`host/nccl_rendezvous`,
//! `_tcp`, `_attacks`): free loopback ports, the id each rank makes, and
//! the deadline rule (not before the timeout, not past 10 % + 100 ms).
#![allow(dead_code, clippy::unwrap_used)]

use std::net::TcpListener;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cudnn::nccl::launch::{self, Rendezvous, Token};
use cudnn::nccl::{Ranks, UniqueId};

use crate::ensure;
use crate::support::TestResult;

pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Run `f` on a free port; when another process took the port between
/// [`free_port`] and rank 0's bind, run it again on another (3 tries).
pub fn on_free_port(f: impl Fn(u16) -> TestResult) -> TestResult {
    let mut last = Ok(());
    for _ in 0..3 {
        last = f(free_port());
        match &last {
            Err(e) if format!("{e:?}").contains("Address already in use") => {
                eprintln!("note: the port was taken meanwhile; trying another: {e:?}");
            }
            _ => return last,
        }
    }
    last
}

pub fn tcp(port: u16) -> Rendezvous {
    Rendezvous::Tcp {
        host: "127.0.0.1".into(),
        port,
    }
}

pub fn fixed(b: u8) -> UniqueId {
    UniqueId::from([b; 128])
}

/// A timeout was held: not before `timeout`, not past 10 % + 100 ms.
pub fn held(what: &str, elapsed: Duration, timeout: Duration) -> TestResult {
    ensure!(
        elapsed + Duration::from_millis(5) >= timeout,
        "{what}: gave up after {elapsed:?}, before its {timeout:?} deadline"
    );
    ensure!(
        elapsed <= timeout.mul_f64(1.1) + Duration::from_millis(100),
        "{what}: took {elapsed:?} for a {timeout:?} deadline"
    );
    Ok(())
}

pub fn rank_of(
    r: &Rendezvous,
    rank: usize,
    size: usize,
    t: Duration,
) -> (cudnn::Result<UniqueId>, Duration) {
    let start = Instant::now();
    let e = launch::exchange(r, Ranks::new(rank, size).unwrap(), t, || {
        Ok(fixed(rank as u8 + 1))
    });
    (e, start.elapsed())
}

pub fn rank_thread(
    r: &Rendezvous,
    rank: usize,
    size: usize,
    t: Duration,
    token: Option<Token>,
) -> JoinHandle<cudnn::Result<UniqueId>> {
    let r = r.clone();
    std::thread::spawn(move || {
        launch::exchange_with_token(
            &r,
            Ranks::new(rank, size).unwrap(),
            t,
            token.as_ref(),
            || Ok(fixed(0xA0 + rank as u8)),
        )
    })
}

/// A host-tier test that needs NCCL (no device). Skipped visibly without
/// it, a failure when `CUDNN_RS_REQUIRE_LIBS=1`.
pub fn nccl_host(
    name: &str,
    f: impl FnOnce() -> TestResult + Send + 'static,
) -> libtest_mimic::Trial {
    let name = format!("host::{name}");
    match cudnn::sys::nccl::load().err().map(|e| e.to_string()) {
        None => crate::support::trial(name, f),
        Some(why) if std::env::var("CUDNN_RS_REQUIRE_LIBS").is_ok_and(|v| v == "1") => {
            crate::support::trial(name, move || {
                Err(format!("CUDNN_RS_REQUIRE_LIBS=1 but: {why}").into())
            })
        }
        Some(why) => {
            eprintln!(
                "skipped: {name}: {}",
                why.lines().next().unwrap_or_default()
            );
            crate::support::trial(name, f).with_ignored_flag(true)
        }
    }
}

/// The argument an `InvalidArgument` names (a marker for any other error).
pub fn arg_of(e: &cudnn::Error) -> String {
    match e {
        cudnn::Error::InvalidArgument { arg, .. } => arg.clone(),
        other => format!("<not InvalidArgument: {other}>"),
    }
}

/// A variable lookup over `list` (what `LaunchEnv` reads from the process
/// environment otherwise).
pub fn vars(list: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let list: Vec<(String, String)> = list
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    move |name| list.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
}

/// `nccl::group`'s refusal of a group nested in another.
pub fn nested_group(e: &cudnn::Error) -> bool {
    matches!(
        e,
        cudnn::Error::InGroup {
            call: "nccl::group",
            ..
        }
    )
}

/// The text of `path` once its writer has finished it (rank 0 writes its
/// files in place, a line at a time: a reader that comes between the create
/// and the write sees a part), waited for at most `t`.
pub fn read_written(path: &std::path::Path, t: std::time::Duration) -> Result<String, String> {
    let start = std::time::Instant::now();
    loop {
        match std::fs::read_to_string(path) {
            Ok(s) if s.ends_with('\n') => return Ok(s),
            _ if start.elapsed() > t => {
                return Err(format!("{} not written in {t:?}", path.display()));
            }
            _ => std::thread::sleep(std::time::Duration::from_millis(2)),
        }
    }
}
