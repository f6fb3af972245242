//! The conformance run's command line (the options are listed in
//! `main.rs`'s header).

use std::path::PathBuf;

/// The parsed options.
pub struct Args {
    pub frontend_dir: Option<PathBuf>,
    pub cudnn_lib: Vec<String>,
    pub only: Vec<String>,
    pub targets: Vec<String>,
    pub timing: bool,
    pub reps: usize,
    pub rounds: usize,
    /// Python processes for the frontend's side (1 under `--timing`).
    pub jobs: usize,
    pub verbose: bool,
    pub keep: Option<PathBuf>,
    /// `--oracle-cache DIR`: the frontend's answers remembered there
    /// (`oracle`; not under `--timing`).
    pub oracle_cache: Option<PathBuf>,
    /// `--finalize-memo DIR`: the crate's side plans through the test
    /// suite's finalize memo there (not under `--timing`, which times the
    /// finalize).
    pub finalize_memo: Option<PathBuf>,
}

pub fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        frontend_dir: None,
        cudnn_lib: Vec::new(),
        only: Vec::new(),
        targets: vec!["h200".into(), "a100".into(), "b200".into()],
        timing: false,
        reps: 1,
        rounds: 1,
        jobs: 0,
        verbose: false,
        keep: None,
        oracle_cache: None,
        finalize_memo: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let mut val = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match x.as_str() {
            "--frontend-dir" => a.frontend_dir = Some(PathBuf::from(val("--frontend-dir")?)),
            "--cudnn-lib" => a.cudnn_lib.push(val("--cudnn-lib")?),
            "--only" => a.only.push(val("--only")?),
            "--targets" => a.targets = val("--targets")?.split(',').map(str::to_string).collect(),
            "--timing" | "--vs-frontend" => a.timing = true,
            "--jobs" => {
                let v = val("--jobs")?;
                a.jobs = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=64).contains(n))
                    .ok_or(format!("--jobs takes a count in 1..=64, not `{v}`"))?;
            }
            "--rounds" => {
                let v = val("--rounds")?;
                a.rounds = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=100).contains(n))
                    .ok_or(format!("--rounds takes a count in 1..=100, not `{v}`"))?;
            }
            "--reps" => {
                let v = val("--reps")?;
                a.reps = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=1000).contains(n))
                    .ok_or(format!("--reps takes a count in 1..=1000, not `{v}`"))?;
            }
            "--verbose" | "-v" => a.verbose = true,
            "--keep" => a.keep = Some(PathBuf::from(val("--keep")?)),
            "--oracle-cache" => a.oracle_cache = Some(PathBuf::from(val("--oracle-cache")?)),
            "--finalize-memo" => a.finalize_memo = Some(PathBuf::from(val("--finalize-memo")?)),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    // The backend clock is one switch for every thread: the crate's side
    // times one pattern at a time.
    if a.timing && a.jobs > 1 {
        return Err("--jobs above 1 with --timing: the timing runs one job".to_string());
    }
    if a.timing && a.finalize_memo.is_some() {
        return Err("--finalize-memo with --timing: the timing measures the finalize".to_string());
    }
    // Default: one Python process per core (at most 4), one under --timing.
    if a.jobs == 0 {
        a.jobs = if a.timing {
            1
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
        };
    }
    Ok(a)
}
