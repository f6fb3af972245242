//! Unit tier (nothing needed): the launch variables of torchrun, Open MPI
//! and SLURM, which launcher wins, the variable each error names, the
//! timeout's range, rendezvous addresses and unique-id text (lengths and
//! offsets in characters).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

crate::nccl_main!("unit/launch_variables", "unit::launch_variables");

#[cfg(feature = "nccl")]
mod imp {
    use std::time::Duration;

    use cudnn::Error;
    use cudnn::nccl::launch::{self, LaunchEnv, Rendezvous, Token};
    use cudnn::nccl::{Ranks, UniqueId};

    use crate::support::{TestResult, run, unit};

    pub fn main() {
        run(vec![
            unit("launch_variables_torchrun", launch_torchrun),
            unit("launch_variables_mpi_and_slurm", launch_mpi_slurm),
            unit("launch_variables_errors_name_the_variable", launch_errors),
            unit("timeouts_out_of_range", timeouts),
            unit("rendezvous_text", rendezvous_text),
            unit("unique_id_text_counts_characters", unique_id_text),
            unit("tokens_are_128_random_bits_in_hex_or_base64", token_forms),
        ]);
    }

    fn vars(list: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        crate::support::rendezvous::vars(list)
    }

    fn arg_of(e: &Error) -> String {
        match e {
            Error::InvalidArgument { arg, .. } => arg.clone(),
            other => format!("<not InvalidArgument: {other}>"),
        }
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "unit/launch_variables-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn fixed(b: u8) -> UniqueId {
        UniqueId::from([b; 128])
    }

    fn launch_torchrun() -> TestResult {
        // Nothing set: one process on GPU 0.
        let e = LaunchEnv::from_vars(vars(&[]))?;
        ensure!(e.ranks.rank() == 0 && e.ranks.size() == 1, "{e:?}");
        ensure!(e.local_rank == 0 && e.rendezvous.is_none(), "{e:?}");
        ensure!(
            e.timeout == launch::DEFAULT_TIMEOUT && e.token.is_none(),
            "{e:?}"
        );
        let e = LaunchEnv::from_vars(vars(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "2"),
            ("MASTER_ADDR", "node7"),
            ("MASTER_PORT", "29500"),
            (
                "CUDNN_RS_RENDEZVOUS_TOKEN",
                "hush-0123456789abcdef0123456789abcde",
            ),
        ]))?;
        ensure!(e.ranks.rank() == 3 && e.ranks.size() == 8, "{e:?}");
        ensure!(e.local_rank == 1 && e.local_world_size == Some(2), "{e:?}");
        ensure!(e.rendezvous == Some(tcp_host("node7", 29500)), "{e:?}");
        ensure!(
            e.token == Some(Token::new("hush-0123456789abcdef0123456789abcde")?),
            "token"
        );
        ensure!(
            !format!("{e:?}").contains("hush"),
            "Debug shows the token: {e:?}"
        );
        // IPv6 MASTER_ADDR, bare or in brackets.
        for a in ["::1", "[::1]"] {
            let e = LaunchEnv::from_vars(vars(&[
                ("RANK", "0"),
                ("WORLD_SIZE", "2"),
                ("LOCAL_RANK", "0"),
                ("MASTER_ADDR", a),
                ("MASTER_PORT", "7"),
            ]))?;
            ensure!(e.rendezvous == Some(tcp_host("::1", 7)), "{a}: {e:?}");
        }
        // An explicit rendezvous wins over MASTER_*.
        let e = LaunchEnv::from_vars(vars(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "0"),
            ("MASTER_ADDR", "node7"),
            ("MASTER_PORT", "29500"),
            ("CUDNN_RS_RENDEZVOUS", "file:///shared/job.id"),
            ("CUDNN_RS_RENDEZVOUS_TIMEOUT", "2.5"),
        ]))?;
        ensure!(
            e.rendezvous == Some(Rendezvous::File("/shared/job.id".into())),
            "{e:?}"
        );
        ensure!(e.timeout == Duration::from_millis(2500), "{e:?}");
        Ok(())
    }

    fn tcp_host(host: &str, port: u16) -> Rendezvous {
        Rendezvous::Tcp {
            host: host.into(),
            port,
        }
    }

    fn launch_mpi_slurm() -> TestResult {
        let rdzv = ("CUDNN_RS_RENDEZVOUS", "tcp://10.0.0.1:29511");
        // Open MPI alone.
        let e = LaunchEnv::from_vars(vars(&[
            ("OMPI_COMM_WORLD_RANK", "5"),
            ("OMPI_COMM_WORLD_SIZE", "6"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "2"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "3"),
            rdzv,
        ]))?;
        ensure!(e.ranks.rank() == 5 && e.ranks.size() == 6, "mpi: {e:?}");
        ensure!(
            e.local_rank == 2 && e.local_world_size == Some(3),
            "mpi: {e:?}"
        );
        // SLURM alone.
        let e = LaunchEnv::from_vars(vars(&[
            ("SLURM_PROCID", "9"),
            ("SLURM_NTASKS", "16"),
            ("SLURM_LOCALID", "1"),
            rdzv,
        ]))?;
        ensure!(e.ranks.rank() == 9 && e.ranks.size() == 16, "slurm: {e:?}");
        ensure!(
            e.local_rank == 1 && e.local_world_size.is_none(),
            "slurm: {e:?}"
        );
        // mpirun inside a SLURM allocation: Open MPI's win over SLURM's.
        let e = LaunchEnv::from_vars(vars(&[
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
            ("SLURM_LOCALID", "0"),
            rdzv,
        ]))?;
        ensure!(
            e.ranks.rank() == 3 && e.ranks.size() == 4,
            "mpi over slurm: {e:?}"
        );
        ensure!(e.local_rank == 1, "mpi over slurm: {e:?}");
        // torchrun's win over both.
        let e = LaunchEnv::from_vars(vars(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "0"),
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "3"),
            ("SLURM_PROCID", "7"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "2"),
            rdzv,
        ]))?;
        ensure!(
            e.ranks.rank() == 1 && e.ranks.size() == 2,
            "torchrun wins: {e:?}"
        );
        ensure!(e.local_rank == 0, "torchrun wins: {e:?}");
        Ok(())
    }

    fn launch_errors() -> TestResult {
        // (variables, the variable the error names, what it shows)
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str);
        let two = [("RANK", "1"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "1")];
        let with = |extra: &[(&'static str, &'static str)]| -> Vec<(&'static str, &'static str)> {
            two.iter().chain(extra).copied().collect()
        };
        let master_empty = with(&[("MASTER_ADDR", ""), ("MASTER_PORT", "29500")]);
        let master_blank = with(&[("MASTER_ADDR", "  "), ("MASTER_PORT", "29500")]);
        let master_space = with(&[("MASTER_ADDR", "a b"), ("MASTER_PORT", "29500")]);
        let port_bad = with(&[("MASTER_ADDR", "a"), ("MASTER_PORT", "http")]);
        let port_empty = with(&[("MASTER_ADDR", "a"), ("MASTER_PORT", "")]);
        let port_zero = with(&[("MASTER_ADDR", "a"), ("MASTER_PORT", "0")]);
        let token_empty = with(&[
            ("CUDNN_RS_RENDEZVOUS", "/x"),
            ("CUDNN_RS_RENDEZVOUS_TOKEN", ""),
        ]);
        // 31 bytes: one short of 128 bits as hex digits.
        let token_short = with(&[
            ("CUDNN_RS_RENDEZVOUS", "/x"),
            (
                "CUDNN_RS_RENDEZVOUS_TOKEN",
                "0123456789abcdef0123456789abcde",
            ),
        ]);
        // Two characters of two bytes each: 4 bytes, counted as bytes.
        let token_utf8 = with(&[
            ("CUDNN_RS_RENDEZVOUS", "/x"),
            ("CUDNN_RS_RENDEZVOUS_TOKEN", "éé"),
        ]);
        let long = "t".repeat(257);
        let token_long: Vec<(&str, &str)> = two
            .iter()
            .copied()
            .chain([
                ("CUDNN_RS_RENDEZVOUS", "/x"),
                ("CUDNN_RS_RENDEZVOUS_TOKEN", long.as_str()),
            ])
            .collect();
        let cases: Vec<Case<'_>> = vec![
            (
                &[("RANK", "2"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "0")],
                "RANK",
                "got 2",
            ),
            (&[("RANK", "0"), ("WORLD_SIZE", "0")], "WORLD_SIZE", "got 0"),
            // An invalid world size with no rank is blamed on the world size
            // (it was blamed on the missing RANK).
            (&[("WORLD_SIZE", "0")], "WORLD_SIZE", "got 0"),
            (
                &[("WORLD_SIZE", "2147483648")],
                "WORLD_SIZE",
                "got 2147483648",
            ),
            (
                &[("OMPI_COMM_WORLD_SIZE", "0")],
                "OMPI_COMM_WORLD_SIZE",
                "got 0",
            ),
            (&[("SLURM_NTASKS", "0")], "SLURM_NTASKS", "got 0"),
            // 2^32 is a fine usize but no NCCL world size: WORLD_SIZE is wrong.
            (
                &[("RANK", "0"), ("WORLD_SIZE", "4294967296")],
                "WORLD_SIZE",
                "4294967296",
            ),
            (
                &[("RANK", "0"), ("WORLD_SIZE", "2147483648")],
                "WORLD_SIZE",
                "2147483648",
            ),
            (
                &[("RANK", "0"), ("WORLD_SIZE", "99999999999999999999999")],
                "WORLD_SIZE",
                "999",
            ),
            (&[("RANK", "1")], "WORLD_SIZE", "RANK=1"),
            (&[("WORLD_SIZE", "2")], "RANK", "WORLD_SIZE=2"),
            (&[("RANK", "one"), ("WORLD_SIZE", "2")], "RANK", "\"one\""),
            (&[("RANK", "-1"), ("WORLD_SIZE", "2")], "RANK", "\"-1\""),
            (&[("RANK", ""), ("WORLD_SIZE", "2")], "RANK", "\"\""),
            (
                &[("OMPI_COMM_WORLD_RANK", "4"), ("OMPI_COMM_WORLD_SIZE", "4")],
                "OMPI_COMM_WORLD_RANK",
                "got 4",
            ),
            (
                &[("OMPI_COMM_WORLD_RANK", "0")],
                "OMPI_COMM_WORLD_SIZE",
                "unset",
            ),
            (
                &[("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "0")],
                "OMPI_COMM_WORLD_SIZE",
                "got 0",
            ),
            (
                &[("SLURM_PROCID", "5"), ("SLURM_NTASKS", "4")],
                "SLURM_PROCID",
                "got 5",
            ),
            (&[("SLURM_NTASKS", "4")], "SLURM_PROCID", "unset"),
            (
                &[
                    ("RANK", "1"),
                    ("WORLD_SIZE", "2"),
                    ("MASTER_ADDR", "a"),
                    ("MASTER_PORT", "1"),
                ],
                "LOCAL_RANK",
                "unset",
            ),
            (
                &[
                    ("RANK", "1"),
                    ("WORLD_SIZE", "4"),
                    ("LOCAL_RANK", "2"),
                    ("LOCAL_WORLD_SIZE", "2"),
                ],
                "LOCAL_RANK",
                "got 2",
            ),
            (
                &[
                    ("RANK", "1"),
                    ("WORLD_SIZE", "4"),
                    ("LOCAL_RANK", "0"),
                    ("LOCAL_WORLD_SIZE", "5"),
                ],
                "LOCAL_WORLD_SIZE",
                "got 5",
            ),
            (
                &[
                    ("RANK", "0"),
                    ("WORLD_SIZE", "4"),
                    ("LOCAL_RANK", "0"),
                    ("LOCAL_WORLD_SIZE", "0"),
                ],
                "LOCAL_WORLD_SIZE",
                "got 0",
            ),
            (
                &[
                    ("SLURM_PROCID", "1"),
                    ("SLURM_NTASKS", "4"),
                    ("SLURM_LOCALID", "x"),
                ],
                "SLURM_LOCALID",
                "\"x\"",
            ),
            (&two, "CUDNN_RS_RENDEZVOUS", "MASTER_ADDR unset"),
            (&master_empty, "MASTER_ADDR", "\"\""),
            (&master_blank, "MASTER_ADDR", "\"  \""),
            (&master_space, "MASTER_ADDR", "\"a b\""),
            (&port_bad, "MASTER_PORT", "\"http\""),
            (&port_empty, "MASTER_PORT", "\"\""),
            (&port_zero, "MASTER_PORT", "\"0\""),
            (&token_empty, "CUDNN_RS_RENDEZVOUS_TOKEN", "0 bytes"),
            (&token_long, "CUDNN_RS_RENDEZVOUS_TOKEN", "257 bytes"),
            (&token_short, "CUDNN_RS_RENDEZVOUS_TOKEN", "31 bytes"),
            (&token_utf8, "CUDNN_RS_RENDEZVOUS_TOKEN", "4 bytes"),
            (
                &[("CUDNN_RS_RENDEZVOUS", "")],
                "CUDNN_RS_RENDEZVOUS",
                "\"\"",
            ),
            (
                &[("CUDNN_RS_RENDEZVOUS", "tcp://[abc]:1")],
                "CUDNN_RS_RENDEZVOUS",
                "[abc]",
            ),
        ];
        for (list, arg, shows) in &cases {
            let e = LaunchEnv::from_vars(vars(list)).unwrap_err();
            ensure!(
                arg_of(&e) == *arg,
                "{list:?}: expected an error naming {arg}, got {e}"
            );
            ensure!(
                e.to_string().contains(shows),
                "{list:?}: {e} should show {shows}"
            );
        }
        Ok(())
    }

    fn timeouts() -> TestResult {
        for bad in [
            "1e-300", "0", "-1", "-0", "NaN", "nan", "inf", "-inf", "1e300", "2000000", "", "5s",
            "0x10",
        ] {
            let e = LaunchEnv::from_vars(vars(&[("CUDNN_RS_RENDEZVOUS_TIMEOUT", bad)]))
                .err()
                .ok_or_else(|| format!("timeout {bad:?} accepted"))?;
            ensure!(arg_of(&e) == "CUDNN_RS_RENDEZVOUS_TIMEOUT", "{bad:?}: {e}");
            ensure!(e.to_string().contains(&format!("{bad:?}")), "{bad:?}: {e}");
        }
        for (good, want) in [
            ("0.001", Duration::from_millis(1)),
            ("1000000", launch::MAX_TIMEOUT),
            (" 2.5 ", Duration::from_millis(2500)),
            ("1e2", Duration::from_secs(100)),
        ] {
            let e = LaunchEnv::from_vars(vars(&[("CUDNN_RS_RENDEZVOUS_TIMEOUT", good)]))?;
            ensure!(e.timeout == want, "{good:?}: {:?}", e.timeout);
        }
        // exchange itself: Duration::MAX is clamped, not an overflow.
        let dir = scratch("maxtimeout");
        let r = Rendezvous::File(dir.join("id"));
        std::fs::write(dir.join("id"), "not ours\n").unwrap();
        let e =
            launch::exchange(&r, Ranks::new(1, 2)?, Duration::MAX, || Ok(fixed(1))).unwrap_err();
        ensure!(e.to_string().contains("not a rendezvous file"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
        Ok(())
    }

    fn rendezvous_text() -> TestResult {
        let cases = [
            (
                "file:///tmp/a b/job.id",
                Rendezvous::File("/tmp/a b/job.id".into()),
            ),
            ("/tmp/job.id", Rendezvous::File("/tmp/job.id".into())),
            ("tcp://127.0.0.1:29500", tcp_host("127.0.0.1", 29500)),
            ("tcp://[::1]:7", tcp_host("::1", 7)),
            ("tcp://::1:7", tcp_host("::1", 7)),
            (
                "tcp://node-3.cluster:1234/",
                tcp_host("node-3.cluster", 1234),
            ),
        ];
        for (text, want) in cases {
            let got: Rendezvous = text.parse().map_err(|e| format!("{text}: {e}"))?;
            ensure!(got == want, "{text}: {got:?}");
            let again: Rendezvous = got.to_string().parse()?;
            ensure!(again == want, "{text}: display {} does not parse back", got);
        }
        for bad in [
            "tcp://host",
            "tcp://:80",
            "tcp://h:0",
            "tcp://h:70000",
            "tcp://h:+80",
            "tcp://h: 80",
            "tcp://[abc]:80",
            "tcp://[::1:80",
            "tcp://a b:80",
            "tcp://a/b:80",
            "tcp://x@y:80",
            "tcp://1:2:3:80x",
            "http://x",
            "",
            "file://",
            "/a\0b",
        ] {
            let e = bad
                .parse::<Rendezvous>()
                .err()
                .ok_or_else(|| format!("{bad:?} accepted"))?;
            ensure!(arg_of(&e) == "CUDNN_RS_RENDEZVOUS", "{bad:?}: {e}");
        }
        let long = format!("tcp://{}:80", "a".repeat(254));
        ensure!(
            long.parse::<Rendezvous>().is_err(),
            "a 254-character host accepted"
        );
        Ok(())
    }

    fn unique_id_text() -> TestResult {
        let e = "ab".parse::<UniqueId>().unwrap_err();
        ensure!(
            e.to_string().contains("2 characters (2 bytes of text)"),
            "{e}"
        );
        // 128 two-byte characters: 256 bytes but 128 characters, each
        // named as what it is.
        let e = "é".repeat(128).parse::<UniqueId>().unwrap_err();
        ensure!(
            e.to_string().contains("128 characters (256 bytes of text)"),
            "{e}"
        );
        // 100 three-byte characters around whitespace, which is not counted.
        let e = format!("  {}\n", "€".repeat(100))
            .parse::<UniqueId>()
            .unwrap_err();
        ensure!(
            e.to_string().contains("100 characters (300 bytes of text)"),
            "{e}"
        );
        // 256 characters, one of them not ASCII: its character offset.
        let mut text = "0".repeat(255);
        text.insert(10, 'é');
        let e = text.parse::<UniqueId>().unwrap_err();
        ensure!(e.to_string().contains("'é' at character 10"), "{e}");
        let mut text = "0".repeat(256);
        text.replace_range(11..12, "g");
        let e = text.parse::<UniqueId>().unwrap_err();
        ensure!(e.to_string().contains("'g' at character 11"), "{e}");
        // A known pattern: bytes 0..128 -> "000102...7f".
        let bytes: Vec<u8> = (0u8..128).collect();
        let id = UniqueId::from_bytes(&bytes)?;
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        ensure!(id.to_string() == hex, "display is not lowercase hex");
        ensure!(hex.to_uppercase().parse::<UniqueId>()? == id, "upper case");
        ensure!(format!(" {hex}\n").parse::<UniqueId>()? == id, "whitespace");
        let arr: [u8; 128] = bytes.clone().try_into().unwrap();
        ensure!(UniqueId::from(arr) == id, "From<[u8; 128]>");
        Ok(())
    }

    /// The token rule by hand-checked cases: byte counts are not bits. The
    /// review's phrase (32 bytes, valid base64url of 24 bytes, one kind of
    /// character) was accepted before the fix.
    fn token_forms() -> TestResult {
        let accepted = [
            // 32 hex digits = 128 bits; upper case hex too.
            "0123456789abcdef0123456789abcdef",
            "0123456789ABCDEF0123456789ABCDEF",
            // `openssl rand -base64 16`: 24 characters, 16 bytes.
            "q3X0v8kM1yZpB9cT4hWf2A==",
            // The same without padding: 22 characters, 16 bytes.
            "q3X0v8kM1yZpB9cT4hWf2A",
            // base64url of 18 bytes.
            "q3X0v8kM1yZpB9cT4hWf2A-_",
            // 22 bytes of base64 with + and /.
            "Zm9v+/Zm9vYmFyYmF6cXV4cXV1eHh4",
            // A phrase in camel case is valid base64 of 19 bytes mixing
            // cases: the form cannot catch every phrase (Token::new's
            // docs say so; only randomness protects).
            "MyTrainingJobTokenForTeamA",
        ];
        for t in accepted {
            ensure!(Token::new(t).is_ok(), "{t:?} refused");
        }
        let refused = [
            // The review's phrase: lower case and hyphens only.
            "my-training-job-token-for-team-a",
            // 31 hex digits: 124 bits.
            "0123456789abcdef0123456789abcde",
            // 20 base64 characters: 15 bytes.
            "q3X0v8kM1yZpB9cT4hWf",
            // 21 characters: no base64 text has a length of 4n + 1.
            "q3X0v8kM1yZpB9cT4hWf2",
            // Both alphabets at once.
            "q3X0v8kM1yZpB9cT4h+f2A-_",
            // Padding that does not end a multiple of 4.
            "q3X0v8kM1yZpB9cT4hWf2A=",
            "q3X0v8kM1yZpB9cT4hWf2A===",
            // Upper case only.
            "MY_TRAINING_JOB_TOKEN_FOR_TEAM_A",
            // Not base64 at all.
            "correct horse battery staple 12345",
        ];
        for t in refused {
            match Token::new(t) {
                Err(Error::InvalidArgument { arg, rule, value }) => {
                    ensure!(arg == "token", "{t:?}: {arg}");
                    ensure!(value == format!("{} bytes", t.len()), "{t:?}: {value}");
                    ensure!(rule.contains("128 bits") && rule.contains("hex"), "{rule}");
                }
                other => return Err(format!("{t:?}: {other:?}").into()),
            }
        }
        // Through the environment the variable is named.
        let e = LaunchEnv::from_vars(vars(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "0"),
            ("MASTER_ADDR", "a"),
            ("MASTER_PORT", "29500"),
            (
                "CUDNN_RS_RENDEZVOUS_TOKEN",
                "my-training-job-token-for-team-a",
            ),
        ]))
        .unwrap_err();
        ensure!(arg_of(&e) == "CUDNN_RS_RENDEZVOUS_TOKEN", "{e:?}");
        ensure!(e.to_string().contains("32 bytes"), "{e}");
        let g = Token::generate()?;
        ensure!(
            Token::new(g.expose()).is_ok(),
            "a generated token is refused"
        );
        Ok(())
    }
}
