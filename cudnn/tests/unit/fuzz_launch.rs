//! Unit tier (nothing needed): a fuzz target over the launch convention,
//! run by proptest with a fixed seed (`PROPTEST_RNG_SEED` picks another):
//! launch variables (`LaunchEnv::from_vars`), rendezvous addresses, unique
//! ids (text and bytes), tokens, hostile id files, hostile answers from a
//! hand-played rank 0, `exchange_for` on a loopback address for ranks on
//! other machines, and hostile hellos (and proofs) sent to a live TCP
//! rendezvous on 127.0.0.1.
//!
//! Every call must return (no panic, caught with `catch_unwind`) within a
//! second, with a typed error naming the argument or variable. Beyond
//! that, each family checks its results against the documented rules:
//! a launch that is accepted has the rank, size, local rank, rendezvous,
//! timeout and token the rules give; a launch that is refused names a
//! variable that, set to a good value, makes that error go away; an
//! accepted address prints and parses back to itself; an id survives text
//! and bytes; a hostile file or hello never yields an id, and the server
//! still serves the real rank afterwards.
//!
//! Prints `fuzz: N cases, ...` on stderr. `CUDNN_RS_FUZZ_CASES` multiplies
//! the case counts (for a longer local run).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

crate::nccl_main!("unit/fuzz_launch", "unit::fuzz_launch");

#[cfg(feature = "nccl")]
mod tokens;

#[cfg(feature = "nccl")]
mod imp {
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::panic::{AssertUnwindSafe, catch_unwind};
    use std::path::PathBuf;
    use std::time::{Duration, Instant};

    use cudnn::Error;
    use cudnn::nccl::launch::{
        self, LOCAL_RANK_VARS, LOCAL_SIZE_VARS, LaunchEnv, RANK_VARS, Rendezvous, Token, VARIABLES,
    };
    use cudnn::nccl::{Ranks, UniqueId};
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};

    use crate::support::{TestResult, run, unit};

    /// The slowest one call may be. Calls take milliseconds; the bound is
    /// loose because CI shares two cores among the test threads, and a
    /// loopback round trip can stall past a second there (seen once in
    /// eight runs with a 1 s bound). A hang still fails.
    const CALL_LIMIT: Duration = Duration::from_secs(5);

    pub fn main() {
        run(vec![
            unit("fuzz_launch::launch_variables", || {
                family("launch variables", 60_000, fuzz_vars)
            }),
            unit("fuzz_launch::rendezvous_addresses", || {
                family("rendezvous addresses", 20_000, fuzz_addresses)
            }),
            unit("fuzz_launch::unique_ids", || {
                family("unique ids", 20_000, fuzz_ids)
            }),
            unit("fuzz_launch::tokens", || {
                family("tokens", 5_000, super::tokens::fuzz_tokens)
            }),
            unit("fuzz_launch::hostile_id_files", || {
                family("hostile id files", 2_000, fuzz_files)
            }),
            unit("fuzz_launch::hostile_answers", || {
                family("hostile answers from rank 0", 200, fuzz_answers)
            }),
            unit("fuzz_launch::loopback_for_remote_ranks", || {
                family("loopback for remote ranks", 300, fuzz_loopback)
            }),
            unit("fuzz_launch::hostile_tcp_hellos", fuzz_tcp),
        ]);
    }

    fn seed() -> u64 {
        crate::support::fuzz_seed(0x1a0c_4e11)
    }

    fn cases(n: u32) -> u32 {
        crate::support::fuzz_cases(n)
    }

    fn config(n: u32) -> Config {
        Config {
            cases: cases(n),
            failure_persistence: None,
            rng_seed: RngSeed::Fixed(seed()),
            max_shrink_iters: 256,
            ..Config::default()
        }
    }

    /// Run one family: `f` builds the runner's test over its strategy.
    fn family(name: &str, n: u32, f: fn(&mut TestRunner) -> Result<(), String>) -> TestResult {
        let start = Instant::now();
        let mut runner = TestRunner::new(config(n));
        f(&mut runner).map_err(|e| format!("{name}: {e}"))?;
        eprintln!(
            "fuzz: {name}: {} cases, 0 panics, {:.1} s",
            cases(n),
            start.elapsed().as_secs_f64()
        );
        Ok(())
    }

    /// `f` under `catch_unwind` and a clock.
    pub(crate) fn call<T>(what: &str, f: impl FnOnce() -> T) -> Result<T, TestCaseError> {
        let start = Instant::now();
        let r = catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            TestCaseError::fail(format!("{what}: panicked: {msg}"))
        })?;
        let took = start.elapsed();
        if took > CALL_LIMIT {
            return Err(TestCaseError::fail(format!("{what}: took {took:?}")));
        }
        Ok(r)
    }

    pub(crate) fn fail(msg: String) -> TestCaseError {
        TestCaseError::fail(msg)
    }

    // ------------------------------------------------------ launch variables

    fn number() -> impl Strategy<Value = String> {
        prop_oneof![
            8 => (0u32..10).prop_map(|n| n.to_string()),
            2 => (0u64..100_000).prop_map(|n| n.to_string()),
            2 => prop::sample::select(vec![
                "2147483647", "2147483648", "4294967295", "4294967296",
                "18446744073709551615", "18446744073709551616", "-1", "-0", "", " ",
                " 3 ", "+2", "1e3", "0x1", "3.0", "٣", "NaN",
            ])
            .prop_map(str::to_string),
            1 => "\\PC{0,6}",
        ]
    }

    fn host() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => prop::sample::select(vec![
                "node7", "127.0.0.1", "::1", "[::1]", "10.0.0.1", "a-b.c_d", " node7 ", "",
                "  ", "a b", "[abc]", "fe80::1%eth0", "x@y", "a/b", "[::1", "1:2:3",
            ])
            .prop_map(str::to_string),
            1 => "[a-z0-9.:\\-\\[\\]]{0,12}",
            1 => "\\PC{0,8}",
            1 => Just("h".repeat(254)),
        ]
    }

    fn port() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => (0u32..70_000).prop_map(|n| n.to_string()),
            1 => prop::sample::select(vec!["", "http", "+80", " 80 ", "080", "-1"])
                .prop_map(str::to_string),
        ]
    }

    fn address() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => (host(), port(), any::<bool>()).prop_map(|(h, p, slash)| {
                format!("tcp://{h}:{p}{}", if slash { "/" } else { "" })
            }),
            1 => "(file://)?/[a-z ]{0,8}(/[a-z]{1,4}){0,2}",
            1 => "[a-z]{0,5}://\\PC{0,10}",
            1 => "\\PC{0,16}",
            1 => Just(String::new()),
        ]
    }

    fn timeout() -> impl Strategy<Value = String> {
        prop_oneof![
            2 => (0.0f64..1e7).prop_map(|t| t.to_string()),
            1 => prop::sample::select(vec![
                "1e-300", "0", "-1", "NaN", "inf", "-inf", "0.001", "0.0009", "1000000",
                "1000000.1", "", "5s", "1e2",
            ])
            .prop_map(str::to_string),
            1 => "\\PC{0,6}",
        ]
    }

    fn value_for(name: &'static str) -> BoxedStrategy<String> {
        match name {
            "MASTER_ADDR" => host().boxed(),
            "MASTER_PORT" => port().boxed(),
            "CUDNN_RS_RENDEZVOUS" => address().boxed(),
            "CUDNN_RS_RENDEZVOUS_TIMEOUT" => timeout().boxed(),
            "CUDNN_RS_RENDEZVOUS_TOKEN" => prop_oneof![
                1 => "[a-z0-9]{0,8}",
                1 => "[a-z0-9]{30,34}",
                1 => (250usize..260).prop_map(|n| "t".repeat(n)),
            ]
            .boxed(),
            _ => number().boxed(),
        }
    }

    /// A set of variables: each one set with some probability.
    fn env() -> impl Strategy<Value = Vec<(&'static str, String)>> {
        let each: Vec<BoxedStrategy<Option<(&'static str, String)>>> = VARIABLES
            .iter()
            .map(|&name| {
                prop::option::weighted(0.35, value_for(name).prop_map(move |v| (name, v))).boxed()
            })
            .collect();
        each.prop_map(|v| v.into_iter().flatten().collect())
    }

    /// A launch as a launcher would set it (mostly valid), then up to two
    /// variables replaced by hostile values.
    fn coherent() -> impl Strategy<Value = Vec<(&'static str, String)>> {
        let base = (
            0usize..4,
            1usize..9,
            0usize..10,
            0usize..3,
            0usize..3,
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(src, size, rank, local, rdzv, timeout, token)| {
                let mut v: Vec<(&'static str, String)> = Vec::new();
                let rank = rank % (size + 1);
                if let Some((r, s)) = RANK_VARS.get(src) {
                    v.push((r, rank.to_string()));
                    v.push((s, size.to_string()));
                    if let Some(l) = LOCAL_RANK_VARS.get(src) {
                        v.push((l, (rank % 2 + local).to_string()));
                    }
                    if src < 2 {
                        v.push((LOCAL_SIZE_VARS[src], "2".to_string()));
                    }
                }
                match rdzv {
                    0 => v.push(("CUDNN_RS_RENDEZVOUS", "tcp://127.0.0.1:29511".into())),
                    1 => {
                        v.push(("MASTER_ADDR", "node1".into()));
                        v.push(("MASTER_PORT", "29500".into()));
                    }
                    _ => v.push(("CUDNN_RS_RENDEZVOUS", "file:///shared/job.id".into())),
                }
                if timeout {
                    v.push(("CUDNN_RS_RENDEZVOUS_TIMEOUT", "12.5".into()));
                }
                if token {
                    v.push((
                        "CUDNN_RS_RENDEZVOUS_TOKEN",
                        "job-7-0123456789abcdef0123456789abcdef".into(),
                    ));
                }
                v
            });
        let mutation = prop::sample::select(VARIABLES.to_vec())
            .prop_flat_map(|name| value_for(name).prop_map(move |v| (name, v)));
        (base, prop::collection::vec(mutation, 0..3)).prop_map(|(mut v, muts)| {
            for (name, value) in muts {
                v.retain(|(k, _)| *k != name);
                v.push((name, value));
            }
            v
        })
    }

    fn lookup<'a>(list: &'a [(&'static str, String)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |n| list.iter().find(|(k, _)| *k == n).map(|(_, v)| v.clone())
    }

    /// A value the variable may take given the others (for a local world
    /// size: the world size).
    fn good(name: &str, list: &[(&'static str, String)]) -> String {
        let v = match name {
            "WORLD_SIZE" | "OMPI_COMM_WORLD_SIZE" | "SLURM_NTASKS" => "2147483647",
            "LOCAL_WORLD_SIZE" | "OMPI_COMM_WORLD_LOCAL_SIZE" => {
                let size = RANK_VARS
                    .iter()
                    .find(|(r, s)| value_of(list, r).is_some() || value_of(list, s).is_some())
                    .and_then(|(_, s)| value_of(list, s))
                    .and_then(num)
                    .filter(|&s| (1..=i32::MAX as usize).contains(&s))
                    .unwrap_or(1);
                return size.to_string();
            }
            "MASTER_ADDR" => "127.0.0.1",
            "MASTER_PORT" => "29500",
            "CUDNN_RS_RENDEZVOUS" => "tcp://127.0.0.1:29500",
            "CUDNN_RS_RENDEZVOUS_TIMEOUT" => "5",
            "CUDNN_RS_RENDEZVOUS_TOKEN" => "t0123456789abcdef0123456789abcde",
            _ => "0",
        };
        v.to_string()
    }

    fn num(v: &str) -> Option<usize> {
        v.trim().parse().ok()
    }

    fn fuzz_vars(runner: &mut TestRunner) -> Result<(), String> {
        let (accepted, refused) = (std::cell::Cell::new(0u64), std::cell::Cell::new(0u64));
        let out = runner
            .run(&prop_oneof![env(), coherent()], |list| {
                let r = call("from_vars", || LaunchEnv::from_vars(lookup(&list)))?;
                let get = |n: &str| value_of(&list, n);
                match r {
                    Ok(e) => {
                        accepted.set(accepted.get() + 1);
                        check_accepted(&e, &list)
                    }
                    Err(Error::InvalidArgument { arg, rule, value }) => {
                        refused.set(refused.get() + 1);
                        let Some(&name) = VARIABLES.iter().find(|&&v| v == arg) else {
                            return Err(fail(format!(
                                "{list:?}: error names {arg:?}, no variable"
                            )));
                        };
                        if get(name).is_none() && !value.contains("unset") {
                            return Err(fail(format!("{list:?}: {name} is unset but: {value}")));
                        }
                        // Giving the named variable a good value removes this error.
                        let mut fixed: Vec<(&'static str, String)> =
                            list.iter().filter(|(k, _)| *k != name).cloned().collect();
                        let g = good(name, &list);
                        fixed.push((name, g.clone()));
                        let again =
                            call("from_vars (fixed)", || LaunchEnv::from_vars(lookup(&fixed)))?;
                        if let Err(Error::InvalidArgument {
                            arg: a2,
                            rule: r2,
                            value: v2,
                        }) = &again
                            && *a2 == arg
                            && *r2 == rule
                            && *v2 == value
                        {
                            return Err(fail(format!(
                                "{list:?}: blames {arg}, but with {arg}={g} the same error: {rule}"
                            )));
                        }
                        Ok(())
                    }
                    Err(other) => Err(fail(format!("{list:?}: untyped error {other:?}"))),
                }
            })
            .map_err(|e| e.to_string());
        eprintln!(
            "fuzz: launch variables: {} accepted, {} refused with the variable named",
            accepted.get(),
            refused.get()
        );
        out
    }

    /// An accepted launch agrees with the documented rules, computed here.
    fn value_of<'a>(list: &'a [(&'static str, String)], n: &str) -> Option<&'a str> {
        list.iter().find(|(k, _)| *k == n).map(|(_, v)| v.as_str())
    }

    fn check_accepted(e: &LaunchEnv, list: &[(&'static str, String)]) -> Result<(), TestCaseError> {
        let get = |n: &str| value_of(list, n);
        let bad = |what: &str| Err(fail(format!("{what}: {e:?}")));
        let pair = RANK_VARS
            .iter()
            .find(|(r, s)| get(r).is_some() || get(s).is_some());
        let (rank, size) = match pair {
            None => (Some(0), Some(1)),
            Some((r, s)) => (get(r).and_then(num), get(s).and_then(num)),
        };
        if (Some(e.ranks.rank()), Some(e.ranks.size())) != (rank, size)
            || e.ranks.size() > i32::MAX as usize
        {
            return bad(&format!("rank/size, expected {rank:?}/{size:?}"));
        }
        let size = e.ranks.size();
        let local = LOCAL_RANK_VARS.iter().find_map(|n| get(n)).and_then(num);
        if e.local_rank != local.unwrap_or(0) || (local.is_none() && size != 1) {
            return bad("local rank");
        }
        let lws = LOCAL_SIZE_VARS.iter().find_map(|n| get(n)).and_then(num);
        if e.local_world_size != lws || lws.is_some_and(|l| l == 0 || l > size || e.local_rank >= l)
        {
            return bad("local world size");
        }
        let want = match (
            get("CUDNN_RS_RENDEZVOUS"),
            get("MASTER_ADDR"),
            get("MASTER_PORT"),
        ) {
            (Some(r), _, _) => Some(r.parse::<Rendezvous>().map_err(|x| fail(x.to_string()))?),
            (None, Some(h), Some(p)) => {
                let h = h.trim();
                let h = h
                    .strip_prefix('[')
                    .and_then(|x| x.strip_suffix(']'))
                    .unwrap_or(h);
                Some(Rendezvous::Tcp {
                    host: h.to_string(),
                    port: p
                        .trim()
                        .parse()
                        .map_err(|_| fail(format!("port {p:?} accepted")))?,
                })
            }
            _ => None,
        };
        if e.rendezvous != want || (size > 1 && want.is_none()) {
            return bad(&format!("rendezvous, expected {want:?}"));
        }
        match get("CUDNN_RS_RENDEZVOUS_TIMEOUT") {
            None if e.timeout != launch::DEFAULT_TIMEOUT => return bad("default timeout"),
            None => {}
            Some(t) => {
                let s: f64 = t
                    .trim()
                    .parse()
                    .map_err(|_| fail(format!("timeout {t:?} accepted")))?;
                if !(0.001..=1e6).contains(&s) || (e.timeout.as_secs_f64() - s).abs() > 1e-6 * s {
                    return bad(&format!("timeout {t:?}"));
                }
            }
        }
        let token = get("CUDNN_RS_RENDEZVOUS_TOKEN");
        if e.token != token.map(|t| Token::new(t).unwrap())
            || token.is_some_and(|t| format!("{e:?}").contains(&format!("\"{t}\"")))
        {
            return bad("token");
        }
        Ok(())
    }

    // ------------------------------------------------------------ addresses

    fn valid_host() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z][a-z0-9\\-]{0,10}(\\.[a-z0-9]{1,5}){0,3}",
            (any::<u8>(), any::<u8>(), any::<u8>(), any::<u8>())
                .prop_map(|(a, b, c, d)| format!("{a}.{b}.{c}.{d}")),
            any::<u128>().prop_map(|n| std::net::Ipv6Addr::from(n).to_string()),
        ]
    }

    fn fuzz_addresses(runner: &mut TestRunner) -> Result<(), String> {
        let s = prop_oneof![
            3 => address(),
            1 => (valid_host(), 1u16..).prop_map(|(h, p)| {
                if h.contains(':') { format!("tcp://[{h}]:{p}") } else { format!("tcp://{h}:{p}") }
            }),
        ];
        runner
            .run(&s, |text| {
                let r = call("parse", || text.parse::<Rendezvous>())?;
                match r {
                    Ok(v) => {
                        let shown = v.to_string();
                        let again = call("parse display", || shown.parse::<Rendezvous>())?
                            .map_err(|e| fail(format!("{text:?} -> {shown:?}: {e}")))?;
                        if again != v {
                            return Err(fail(format!(
                                "{text:?} -> {v:?} -> {shown:?} -> {again:?}"
                            )));
                        }
                        if let Rendezvous::Tcp { host, port } = &v
                            && (host.is_empty()
                                || host.len() > 253
                                || *port == 0
                                || host.contains(char::is_whitespace))
                        {
                            return Err(fail(format!("{text:?} accepted as {v:?}")));
                        }
                        Ok(())
                    }
                    Err(Error::InvalidArgument { arg, .. }) if arg == "CUDNN_RS_RENDEZVOUS" => {
                        // A well-formed tcp address must not be refused.
                        if let Some(rest) = text.strip_prefix("tcp://")
                            && let Some((h, p)) = rest.rsplit_once(':')
                            && p.parse::<u16>().is_ok_and(|p| p > 0)
                            && !p.starts_with('+')
                        {
                            let bracketed = h.starts_with('[');
                            let h = h
                                .strip_prefix('[')
                                .and_then(|x| x.strip_suffix(']'))
                                .unwrap_or(h);
                            let plain = !bracketed
                                && !h.is_empty()
                                && h.len() <= 253
                                && h.chars()
                                    .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
                            let v6 =
                                h.parse::<std::net::Ipv6Addr>().is_ok() && rest.starts_with('[');
                            if plain || v6 {
                                return Err(fail(format!("{text:?} refused")));
                            }
                        }
                        Ok(())
                    }
                    Err(other) => Err(fail(format!("{text:?}: untyped error {other:?}"))),
                }
            })
            .map_err(|e| e.to_string())
    }

    // ------------------------------------------------------------ unique ids

    fn fuzz_ids(runner: &mut TestRunner) -> Result<(), String> {
        let s = prop_oneof![
            1 => prop::collection::vec(any::<u8>(), 128).prop_map(Ok),
            1 => prop::collection::vec(any::<u8>(), 0..300).prop_map(Ok),
            2 => (prop::collection::vec(any::<u8>(), 128), 0usize..256, any::<char>(), any::<bool>())
                .prop_map(|(b, at, c, upper)| {
                    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
                    let mut chars: Vec<char> = if upper { hex.to_uppercase() } else { hex }.chars().collect();
                    chars[at] = c;
                    Err(chars.into_iter().collect::<String>())
                }),
            1 => "\\PC{0,300}".prop_map(Err),
        ];
        runner
            .run(&s, |case| {
                match case {
                    Ok(bytes) => {
                        let r = call("from_bytes", || UniqueId::from_bytes(&bytes))?;
                        match r {
                            Ok(id) if bytes.len() == 128 => {
                                let text = id.to_string();
                                let back = call("parse", || text.parse::<UniqueId>())?
                                    .map_err(|e| fail(e.to_string()))?;
                                let arr: [u8; 128] = bytes.clone().try_into().unwrap();
                                if back != id
                                    || id.to_bytes().to_vec() != bytes
                                    || UniqueId::from(arr) != id
                                    || UniqueId::from_raw(id.as_raw()) != id
                                {
                                    return Err(fail("round trip".into()));
                                }
                            }
                            Ok(_) => return Err(fail(format!("{} bytes accepted", bytes.len()))),
                            Err(Error::InvalidArgument { arg, value, .. }) => {
                                if arg != "bytes"
                                    || value != format!("{} bytes", bytes.len())
                                    || bytes.len() == 128
                                {
                                    return Err(fail(format!("{arg} {value}")));
                                }
                            }
                            Err(e) => return Err(fail(format!("untyped {e:?}"))),
                        }
                    }
                    Err(text) => {
                        let r = call("parse", || text.parse::<UniqueId>())?;
                        let t = text.trim();
                        let ok =
                            t.chars().count() == 256 && t.chars().all(|c| c.is_ascii_hexdigit());
                        match r {
                            Ok(id) if ok => {
                                if id.to_string() != t.to_lowercase() {
                                    return Err(fail(format!("{t:?} -> {id}")));
                                }
                            }
                            Ok(id) => return Err(fail(format!("{text:?} accepted as {id}"))),
                            Err(Error::InvalidArgument { arg, value, .. }) if !ok => {
                                let n = t.chars().count();
                                if arg != "unique id text"
                                    || (n != 256
                                        && value
                                            != format!(
                                                "{n} characters ({} bytes of text)",
                                                t.len()
                                            ))
                                {
                                    return Err(fail(format!("{text:?}: {arg} {value}")));
                                }
                                if n == 256 {
                                    let (at, c) = t
                                        .chars()
                                        .enumerate()
                                        .find(|(_, c)| !c.is_ascii_hexdigit())
                                        .unwrap();
                                    if value != format!("{c:?} at character {at}") {
                                        return Err(fail(format!("{text:?}: {value}")));
                                    }
                                }
                            }
                            Err(e) => return Err(fail(format!("{text:?}: {e:?}"))),
                        }
                    }
                }
                Ok(())
            })
            .map_err(|e| e.to_string())
    }

    // ---------------------------------------------------- hostile id files

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("unit_fuzz_launch-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn fuzz_files(runner: &mut TestRunner) -> Result<(), String> {
        let dir = scratch("files");
        let path = dir.join("job.id");
        let id: String = (0..128).map(|i| format!("{:02x}", i as u8)).collect();
        let valid = format!("CUDNNRS3 2 0123456789abcdef0123456789abcdef {id}\n");
        let s = prop_oneof![
            1 => prop::collection::vec(any::<u8>(), 0..1100),
            2 => (0usize..valid.len(), prop::collection::vec(any::<u8>(), 0..8), 0usize..4)
                .prop_map(move |(at, ins, cut)| {
                    let mut b = valid.clone().into_bytes();
                    let end = (at + cut).min(b.len());
                    b.splice(at..end, ins);
                    b
                }),
        ];
        runner
            .run(&s, |bytes| {
                std::fs::write(&path, &bytes).unwrap();
                let r = call("exchange (file)", || {
                    launch::exchange(
                        &Rendezvous::File(path.clone()),
                        Ranks::new(1, 2).unwrap(),
                        Duration::ZERO,
                        || Err(Error::invalid("make", "only rank 0", 1)),
                    )
                })?;
                match r {
                    Ok(id) => {
                        return Err(fail(format!(
                            "{:?} gave an id: {id}",
                            String::from_utf8_lossy(&bytes)
                        )));
                    }
                    Err(Error::Rendezvous { .. }) => {}
                    Err(e) => return Err(fail(format!("untyped {e:?}"))),
                }
                let left: Vec<_> = std::fs::read_dir(&dir)
                    .unwrap()
                    .flatten()
                    .map(|e| e.file_name())
                    .collect();
                if left.len() != 1 {
                    return Err(fail(format!("left behind: {left:?}")));
                }
                Ok(())
            })
            .map_err(|e| e.to_string())?;
        let _ = std::fs::remove_dir_all(dir);
        Ok(())
    }

    // --------------------------------------- loopback for remote ranks

    /// `exchange_for` as rank 0 of a job whose local world size is below its
    /// world size, on a loopback address (written in several ways): refused
    /// at once with a typed error naming the loopback address, never served.
    fn fuzz_loopback(runner: &mut TestRunner) -> Result<(), String> {
        let s = (
            2usize..5000,
            any::<u16>(),
            prop::sample::select(vec![
                "127.0.0.1",
                "127.0.1.1",
                "127.200.3.4",
                "[::1]",
                "localhost",
            ]),
            1u16..u16::MAX,
        );
        runner
            .run(&s, |(size, lws_seed, host, port)| {
                let lws = 1 + usize::from(lws_seed) % (size - 1);
                let (size_s, lws_s) = (size.to_string(), lws.to_string());
                let rdzv = format!("tcp://{host}:{port}");
                let vars = |name: &str| -> Option<String> {
                    match name {
                        "RANK" | "LOCAL_RANK" => Some("0".into()),
                        "WORLD_SIZE" => Some(size_s.clone()),
                        "LOCAL_WORLD_SIZE" => Some(lws_s.clone()),
                        "CUDNN_RS_RENDEZVOUS" => Some(rdzv.clone()),
                        "CUDNN_RS_RENDEZVOUS_TIMEOUT" => Some("2".into()),
                        _ => None,
                    }
                };
                let env = LaunchEnv::from_vars(vars).map_err(|e| fail(format!("{rdzv}: {e}")))?;
                let r = call("exchange_for", || {
                    launch::exchange_for(&env, || Ok(UniqueId::from([1; 128])))
                })?;
                match r {
                    Err(Error::Rendezvous { detail, .. }) if detail.contains("loopback") => Ok(()),
                    Err(Error::Rendezvous { detail, .. })
                        if host == "localhost" && detail.contains("resolving") =>
                    {
                        Ok(())
                    }
                    other => Err(fail(format!("{rdzv}, {lws} of {size} local: {other:?}"))),
                }
            })
            .map_err(|e| e.to_string())
    }

    // ------------------------------------------------ hostile answers

    /// Rank 0 played by hand answers a waiting rank with hostile text (a
    /// valid answer mutated, or bytes), then an abort note so a case ends
    /// quickly: the rank takes the id only for the exact `ok` answer to its
    /// own nonce, and is refused only for a well-formed refusal.
    fn fuzz_answers(runner: &mut TestRunner) -> Result<(), String> {
        const JOB: &str = "0123456789abcdef0123456789abcdef";
        let dir = scratch("answers");
        let path = dir.join("job.id");
        let folder = dir.join(format!("job.id.{JOB}.d"));
        std::fs::create_dir(&folder).unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        let id = UniqueId::from([0x3c; 128]);
        std::fs::write(&path, format!("CUDNNRS3 2 {JOB} {id}\n")).unwrap();
        // How the answer is formed from the rank's nonce `M`.
        let s = prop_oneof![
            1 => prop::collection::vec(any::<u8>(), 0..80).prop_map(|b| (None, b)),
            3 => (0usize..4, 0usize..80, prop::collection::vec(any::<u8>(), 0..4), 0usize..3)
                .prop_map(|(form, at, ins, cut)| (Some((form, at, cut)), ins)),
        ];
        let answered = std::cell::Cell::new(0u32);
        runner
            .run(&s, |(how, bytes)| {
                let r = Rendezvous::File(path.clone());
                let rank = std::thread::spawn(move || {
                    launch::exchange(
                        &r,
                        Ranks::new(1, 2).unwrap(),
                        Duration::from_secs(3),
                        || Err(Error::invalid("make", "only rank 0", 1)),
                    )
                });
                let start = Instant::now();
                let mine = loop {
                    let found = std::fs::read_dir(&folder).unwrap().flatten().find_map(|e| {
                        e.file_name()
                            .to_str()
                            .and_then(|n| n.strip_prefix("ack-1-"))
                            .map(str::to_string)
                    });
                    if let Some(m) = found {
                        break m;
                    }
                    if start.elapsed() > CALL_LIMIT {
                        return Err(fail("the rank wrote no acknowledgement".into()));
                    }
                    std::thread::sleep(Duration::from_millis(1));
                };
                let text: Vec<u8> = match how {
                    None => bytes,
                    Some((form, at, cut)) => {
                        let base = match form {
                            0 => format!("{JOB} {mine} ok\n"),
                            1 => format!("{JOB} {mine} refused no\n"),
                            2 => format!("{JOB} {mine} ok"),
                            _ => format!("{JOB} {} ok\n", "0".repeat(32)),
                        };
                        let mut b = base.into_bytes();
                        if !bytes.is_empty() || cut > 0 {
                            let at = at.min(b.len());
                            let end = (at + cut).min(b.len());
                            b.splice(at..end, bytes);
                        }
                        b
                    }
                };
                // The first complete line counts (rank 0 writes one).
                let exact_ok = String::from_utf8(text.clone()).is_ok_and(|t| {
                    t.split_once('\n').map(|(l, _)| l) == Some(&format!("{JOB} {mine} ok"))
                });
                let refusal = String::from_utf8(text.clone()).ok().and_then(|t| {
                    t.split_once('\n')
                        .and_then(|(l, _)| l.strip_prefix(&format!("{JOB} {mine} refused ")))
                        .map(str::to_string)
                });
                std::fs::write(folder.join(format!("ok-1-{mine}")), &text).unwrap();
                std::fs::write(folder.join("abort"), format!("{JOB} abort case over\n")).unwrap();
                let got = call("exchange (answer)", || rank.join())?
                    .map_err(|_| fail("the rank panicked".into()))?;
                let _ = std::fs::remove_file(folder.join("abort"));
                let _ = std::fs::remove_file(folder.join(format!("ok-1-{mine}")));
                match got {
                    Ok(got) if exact_ok && got == id => answered.set(answered.get() + 1),
                    Ok(got) => {
                        return Err(fail(format!(
                            "{:?} gave an id: {got}",
                            String::from_utf8_lossy(&text)
                        )));
                    }
                    Err(Error::Rendezvous { detail, .. }) => {
                        let says_refused = detail.contains("rank 0 refused: ");
                        let says_abort = detail.contains("rank 0 gave up: case over")
                            || detail.contains(&format!("ok-1-{mine} is not text"));
                        let fine = match &refusal {
                            Some(why) => {
                                says_refused && detail.ends_with(why.as_str()) || says_abort
                            }
                            // A valid answer the rank had no poll to see
                            // before the abort note.
                            None => says_abort,
                        };
                        if !fine {
                            return Err(fail(format!(
                                "{:?}: {detail}",
                                String::from_utf8_lossy(&text)
                            )));
                        }
                    }
                    Err(e) => return Err(fail(format!("untyped {e:?}"))),
                }
                if !std::fs::read_dir(&folder).unwrap().flatten().all(|e| {
                    !e.file_name()
                        .to_string_lossy()
                        .starts_with(&format!("ack-1-{mine}"))
                }) {
                    return Err(fail("the rank left its acknowledgement".into()));
                }
                Ok(())
            })
            .map_err(|e| e.to_string())?;
        eprintln!(
            "fuzz: hostile answers: {} valid answers taken",
            answered.get()
        );
        let _ = std::fs::remove_dir_all(dir);
        Ok(())
    }

    // --------------------------------------------------- hostile tcp hellos

    /// Magic, rank, size, token flag, nonce; then, optionally, a proof.
    fn hello(rank: u32, size: u32, flag: u8, nonce: &[u8], proof: Option<&[u8]>) -> Vec<u8> {
        let mut h = b"CUDNNRS4".to_vec();
        h.extend_from_slice(&rank.to_be_bytes());
        h.extend_from_slice(&size.to_be_bytes());
        h.push(flag);
        h.extend_from_slice(nonce);
        if let Some(p) = proof {
            h.extend_from_slice(p);
        }
        h
    }

    /// What rank 0 sent back, all of it (empty: closed at once).
    fn ask(port: u16, bytes: &[u8]) -> std::io::Result<Vec<u8>> {
        let mut c = TcpStream::connect(("127.0.0.1", port))?;
        c.set_read_timeout(Some(Duration::from_secs(5)))?;
        let _ = c.write_all(bytes);
        let _ = c.shutdown(std::net::Shutdown::Write);
        let mut all = Vec::new();
        let _ = c.read_to_end(&mut all);
        Ok(all)
    }

    fn fuzz_tcp() -> TestResult {
        let start = Instant::now();
        let n = cases(1_000);
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        let port = l.local_addr()?.port();
        drop(l);
        let r = Rendezvous::Tcp {
            host: "127.0.0.1".into(),
            port,
        };
        let tok = Token::new("fuzz-token-0123456789abcdef012345678")?;
        let server = {
            let (r, tok) = (r.clone(), tok.clone());
            std::thread::spawn(move || {
                launch::exchange_with_token(
                    &r,
                    Ranks::new(0, 3).unwrap(),
                    Duration::from_secs(110),
                    Some(&tok),
                    || Ok(UniqueId::from([0x42; 128])),
                )
            })
        };
        let s = prop_oneof![
            1 => prop::collection::vec(any::<u8>(), 0..80),
            3 => (
                any::<u32>(),
                prop_oneof![Just(3u32), any::<u32>()],
                prop_oneof![Just(1u8), Just(0u8), any::<u8>()],
                prop::collection::vec(any::<u8>(), 14..18),
                prop::option::of(prop::collection::vec(any::<u8>(), 30..34)),
            )
                .prop_map(|(rank, size, flag, nonce, proof)| {
                    hello(rank, size, flag, &nonce, proof.as_deref())
                }),
        ];
        let mut runner = TestRunner::new(config(1_000));
        let answers: RefCell<HashMap<Option<u8>, u64>> = RefCell::new(HashMap::new());
        // Wait for the server.
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if start.elapsed() > Duration::from_secs(10) {
                return Err("the server did not come up".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        runner
            .run(&s, |bytes| {
                let a = call("ask", || ask(port, &bytes))?
                    .map_err(|e| fail(format!("connect: {e}")))?;
                // No random proof holds the token: at most rank 0's
                // challenge (status 0, nonce) and its refusal of the proof
                // (one byte) come back; never anything keyed by the token
                // (its proof, an answer).
                // (A refusal, status 1, is plain text and carries no MAC.)
                if a.first() == Some(&0) && a.len() > 1 + 16 + 1 {
                    return Err(fail(format!("{bytes:?} got past the proof: {a:?}")));
                }
                if a.first() == Some(&0) && a.len() == 18 && a.last() != Some(&2) {
                    return Err(fail(format!("{bytes:?}: not the refusal: {a:?}")));
                }
                *answers.borrow_mut().entry(a.first().copied()).or_default() += 1;
                Ok(())
            })
            .map_err(|e| e.to_string())?;
        // The real ranks are still served.
        for rank in [1, 2] {
            let id = launch::exchange_with_token(
                &r,
                Ranks::new(rank, 3)?,
                Duration::from_secs(20),
                Some(&tok),
                || Err(Error::invalid("make", "only rank 0", 1)),
            )?;
            if id != UniqueId::from([0x42; 128]) {
                return Err(format!("rank {rank} got another id").into());
            }
        }
        server.join().map_err(|_| "the server panicked")??;
        let answers = answers.into_inner();
        eprintln!(
            "fuzz: hostile tcp hellos: {n} cases (closed {}, challenged {}, refused {}), 0 panics, \
             {:.1} s",
            answers.get(&None).unwrap_or(&0),
            answers.get(&Some(0)).unwrap_or(&0),
            answers.get(&Some(1)).unwrap_or(&0),
            start.elapsed().as_secs_f64()
        );
        Ok(())
    }
}
