//! Fuzz cases in child processes: the test binary re-executes itself in a
//! worker mode (an environment variable) and runs many cases per child,
//! reporting each on stdout as it finishes. A child that dies (a signal, an
//! abort) or stops making progress is restarted after the case that killed
//! it, and that case is reported as a crash or a hang.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What one case did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The call succeeded (it reached the library and was accepted).
    Accepted,
    /// The library itself refused it with a status (it reached the library).
    RefusedByLibrary,
    /// A typed error of the crate's (refused before the library).
    Typed(String),
    /// Another error kind (a failure of the test).
    Untyped(String),
    /// A panic (a failure of the test).
    Panic(String),
}

/// No progress for this long: the child is killed and the case is a hang.
pub const HANG: Duration = Duration::from_secs(60);

fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

/// Worker side: run cases `start..end`, one line each on stdout.
pub fn worker(start: usize, end: usize, mut f: impl FnMut(usize) -> Outcome) {
    let out = std::io::stdout();
    for i in start..end {
        let t0 = Instant::now();
        let o =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(i))).unwrap_or_else(|p| {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                Outcome::Panic(msg)
            });
        let ms = t0.elapsed().as_millis();
        let (code, msg) = match &o {
            Outcome::Accepted => ("A", String::new()),
            Outcome::RefusedByLibrary => ("L", String::new()),
            Outcome::Typed(m) => ("T", one_line(m)),
            Outcome::Untyped(m) => ("U", one_line(m)),
            Outcome::Panic(m) => ("P", one_line(m)),
        };
        let mut l = out.lock();
        let _ = writeln!(l, "case {i} {code} {ms} {msg}");
        let _ = l.flush();
    }
}

/// What the children reported.
#[derive(Debug, Default)]
pub struct Report {
    pub outcomes: Vec<Option<Outcome>>,
    /// `(case, how the child ended, the case)`.
    pub crashes: Vec<(usize, String, String)>,
    pub hangs: Vec<(usize, String)>,
    pub max_ms: u128,
    pub children: usize,
    pub wall: Duration,
}

fn parse(line: &str) -> Option<(usize, Outcome, u128)> {
    let mut it = line.splitn(5, ' ');
    if it.next()? != "case" {
        return None;
    }
    let i = it.next()?.parse().ok()?;
    let code = it.next()?;
    let ms = it.next()?.parse().ok()?;
    let msg = it.next().unwrap_or("").to_string();
    let o = match code {
        "A" => Outcome::Accepted,
        "L" => Outcome::RefusedByLibrary,
        "T" => Outcome::Typed(msg),
        "U" => Outcome::Untyped(msg),
        _ => Outcome::Panic(msg),
    };
    Some((i, o, ms))
}

/// Run cases `0..n` in `jobs` parallel children of this binary (worker
/// mode: `env` set to `arg \x01 start \x01 end`).
pub fn run_cases(
    env: &str,
    arg: &str,
    n: usize,
    jobs: usize,
    describe: impl Fn(usize) -> String + Sync,
) -> Result<Report, String> {
    let t0 = Instant::now();
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let jobs = jobs.max(1);
    let chunk = n.div_ceil(jobs).max(1);
    let results: Vec<Result<Report, String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..jobs)
            .map(|j| {
                let (lo, hi) = ((j * chunk).min(n), ((j + 1) * chunk).min(n));
                let (exe, describe) = (&exe, &describe);
                s.spawn(move || run_range(exe, env, arg, lo, hi, describe))
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a runner thread panicked".into()))
            })
            .collect()
    });
    let mut r = Report {
        outcomes: vec![None; n],
        ..Report::default()
    };
    for part in results {
        let p = part?;
        for (i, o) in p.outcomes.into_iter().enumerate() {
            if let Some(o) = o {
                r.outcomes[i] = Some(o);
            }
        }
        r.crashes.extend(p.crashes);
        r.hangs.extend(p.hangs);
        r.max_ms = r.max_ms.max(p.max_ms);
        r.children += p.children;
    }
    r.wall = t0.elapsed();
    Ok(r)
}

fn run_range(
    exe: &std::path::Path,
    env: &str,
    arg: &str,
    lo: usize,
    hi: usize,
    describe: &(impl Fn(usize) -> String + Sync),
) -> Result<Report, String> {
    let mut r = Report {
        outcomes: vec![None; hi],
        ..Report::default()
    };
    let mut next = lo;
    while next < hi {
        r.children += 1;
        let mut child = Command::new(exe)
            .env(env, format!("{arg}\u{1}{next}\u{1}{hi}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("spawning a worker: {e}"))?;
        let stdout = child.stdout.take().ok_or("no worker stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let mut hung = false;
        let mut reported = false;
        loop {
            match rx.recv_timeout(HANG) {
                Ok(l) => {
                    if let Some((i, o, ms)) = parse(&l)
                        && i < hi
                    {
                        r.max_ms = r.max_ms.max(ms);
                        r.outcomes[i] = Some(o);
                        next = i + 1;
                        reported = true;
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let _ = child.kill();
                    hung = true;
                    break;
                }
            }
        }
        let status = child.wait().map_err(|e| e.to_string())?;
        if next >= hi {
            break;
        }
        if !reported && !hung {
            // Died before its first case: the worker cannot start here
            // (not a case's fault); stop rather than retry every case.
            return Err(format!(
                "a worker died before its first case ({status}); run it alone with {env} set to see why"
            ));
        }
        // The child ended before its last case: `next` killed it.
        if hung {
            r.hangs.push((next, describe(next)));
        } else {
            r.crashes.push((next, format!("{status}"), describe(next)));
        }
        next += 1;
    }
    Ok(r)
}

impl Report {
    /// Print the counts, and fail on any crash, hang, panic or untyped
    /// error, on a case slower than `max_case`, or when fewer than
    /// `min_reached` cases reached the library.
    pub fn print_and_check(&self, min_reached: usize, max_case: Duration) -> Result<(), String> {
        let count =
            |f: &dyn Fn(&Outcome) -> bool| self.outcomes.iter().flatten().filter(|o| f(o)).count();
        let accepted = count(&|o| *o == Outcome::Accepted);
        let library = count(&|o| *o == Outcome::RefusedByLibrary);
        let typed = count(&|o| matches!(o, Outcome::Typed(_)));
        let untyped: Vec<_> = self
            .outcomes
            .iter()
            .enumerate()
            .filter_map(|(i, o)| match o {
                Some(Outcome::Untyped(m) | Outcome::Panic(m)) => Some((i, m.clone())),
                _ => None,
            })
            .collect();
        eprintln!(
            "  {} cases in {:.1} s ({} children): {accepted} accepted, {library} refused by cuDNN \
             (so {} reached cuDNN), {typed} typed errors before cuDNN, {} untyped or panics, \
             {} crashes, {} hangs; slowest case {} ms",
            self.outcomes.len(),
            self.wall.as_secs_f64(),
            self.children,
            accepted + library,
            untyped.len(),
            self.crashes.len(),
            self.hangs.len(),
            self.max_ms,
        );
        let mut by_signal = std::collections::BTreeMap::<&str, usize>::new();
        for (_, how, _) in &self.crashes {
            *by_signal.entry(how.as_str()).or_default() += 1;
        }
        if !by_signal.is_empty() {
            eprintln!("    crashes by how the child ended: {by_signal:?}");
        }
        let all = std::env::var("CUDNN_RS_FUZZ_ALL").is_ok();
        for (i, how, what) in self.crashes.iter().take(if all { usize::MAX } else { 20 }) {
            eprintln!("    crash: case {i} ({how}): {what}");
        }
        for (i, what) in self.hangs.iter().take(20) {
            eprintln!("    hang: case {i}: {what}");
        }
        for (i, m) in untyped.iter().take(20) {
            eprintln!("    untyped or panic: case {i}: {m}");
        }
        let missing = self.outcomes.iter().filter(|o| o.is_none()).count();
        if !self.crashes.is_empty() || !self.hangs.is_empty() || !untyped.is_empty() {
            return Err(format!(
                "{} crashes, {} hangs, {} untyped errors or panics",
                self.crashes.len(),
                self.hangs.len(),
                untyped.len()
            ));
        }
        if missing > 0 {
            return Err(format!("{missing} cases never reported"));
        }
        if self.max_ms > max_case.as_millis() {
            return Err(format!(
                "a case took {} ms (bound {max_case:?})",
                self.max_ms
            ));
        }
        if accepted + library < min_reached {
            return Err(format!(
                "only {} cases reached cuDNN (want at least {min_reached})",
                accepted + library
            ));
        }
        Ok(())
    }
}
