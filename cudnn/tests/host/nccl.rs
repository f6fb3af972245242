//! NCCL without a GPU (unit and host tiers): discovery and loading from the
//! wheel layout, the override variable, a missing library, the version,
//! unique ids through bytes and text, the error text of every result code,
//! and the rank and length rules. The launch variables and the rendezvous
//! are tested in `host/nccl_rendezvous`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

crate::nccl_main!("host/nccl", "host::nccl");

#[cfg(feature = "nccl")]
mod imp {
    use std::collections::HashSet;
    use std::ffi::{CStr, OsString};
    use std::path::{Path, PathBuf};

    use cudnn::Error;
    use cudnn::nccl::{self, Communicator, Ranks, UniqueId};
    use cudnn::sys::cudart::loader::{self, Environment, Source};
    use cudnn::sys::nccl as sys;

    use crate::support::rendezvous::{arg_of, nccl_host as host};
    use crate::support::{TestResult, has_gpu, run, unit};

    pub fn main() {
        run(vec![
            unit("ranks_rules", ranks_rules),
            unit("decode_version", decode_version),
            unit(
                "discovery_candidates_include_wheel_dir",
                discovery_candidates,
            ),
            host("load_from_wheel_layout", load_wheel_layout),
            host(
                "override_variable_and_missing_library",
                override_and_missing,
            ),
            host("version", version),
            host("unique_id_round_trip", unique_id_round_trip),
            host("error_text_of_every_result_code", error_strings),
            host("init_rank_misuse", init_rank_misuse),
            host("group_always_closes", group_closes),
        ]);
    }

    // ---------------------------------------------------------------- tiers

    // ----------------------------------------------------------- children

    // ---------------------------------------------------------- unit tier

    fn ranks_rules() -> TestResult {
        let e = Ranks::new(2, 2).unwrap_err();
        ensure!(arg_of(&e) == "rank", "rank == size: {e}");
        ensure!(e.to_string().contains("got 2"), "{e}");
        let e = Ranks::new(5, 2).unwrap_err();
        ensure!(arg_of(&e) == "rank", "rank > size: {e}");
        let e = Ranks::new(0, 0).unwrap_err();
        ensure!(arg_of(&e) == "size", "size 0: {e}");
        let r = Ranks::new(1, 4).unwrap();
        ensure!(r.rank() == 1 && r.size() == 4, "{r:?}");
        // roots and peers
        ensure!(r.check_rank("root", 3).unwrap() == 3, "root 3 of 4");
        let e = r.check_rank("root", 4).unwrap_err();
        ensure!(
            arg_of(&e) == "root" && e.to_string().contains("got 4"),
            "{e}"
        );
        let e = r.check_rank("peer", 9).unwrap_err();
        ensure!(arg_of(&e) == "peer", "{e}");
        // lengths, by hand: size 4
        ensure!(r.same_len("all_reduce", 10, 10).unwrap() == 10, "same");
        let e = r.same_len("all_reduce", 10, 9).unwrap_err();
        ensure!(
            matches!(&e, Error::Mismatch { expected, got, .. } if expected == "10" && got == "9"),
            "{e}"
        );
        ensure!(r.all_gather(3, 12).unwrap() == 3, "all_gather 3 -> 12");
        let e = r.all_gather(3, 11).unwrap_err();
        ensure!(
            matches!(&e, Error::Mismatch { expected, got, .. } if expected == "12" && got == "11"),
            "{e}"
        );
        ensure!(
            r.reduce_scatter(20, 5).unwrap() == 5,
            "reduce_scatter 20 -> 5"
        );
        let e = r.reduce_scatter(21, 5).unwrap_err();
        ensure!(
            matches!(&e, Error::Mismatch { expected, got, .. } if expected == "20" && got == "21"),
            "{e}"
        );
        ensure!(r.all_gather_in_place(16).unwrap() == 4, "in place 16 / 4");
        ensure!(r.reduce_scatter_in_place(8).unwrap() == 2, "in place 8 / 4");
        let e = r.all_gather_in_place(10).unwrap_err();
        ensure!(
            e.to_string()
                .contains("multiple of the communicator size 4"),
            "{e}"
        );
        let e = r.reduce_scatter_in_place(7).unwrap_err();
        ensure!(matches!(e, Error::Mismatch { .. }), "{e}");
        Ok(())
    }

    fn decode_version() -> TestResult {
        ensure!(
            sys::decode_version(23203) == loader::Version::new(2, 32, 3),
            "23203"
        );
        ensure!(
            sys::decode_version(21805) == loader::Version::new(2, 18, 5),
            "21805"
        );
        ensure!(
            sys::decode_version(2804) == loader::Version::new(2, 8, 4),
            "2804 (old scheme)"
        );
        Ok(())
    }

    struct FakeEnv {
        vars: Vec<(String, String)>,
        dirs: Vec<(PathBuf, Vec<String>)>,
    }
    impl Environment for FakeEnv {
        fn var(&self, name: &str) -> Option<OsString> {
            self.vars
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.into())
        }
        fn list_dir(&self, dir: &Path) -> Vec<String> {
            self.dirs
                .iter()
                .find(|(d, _)| d == dir)
                .map(|(_, l)| l.clone())
                .unwrap_or_default()
        }
    }
    fn fake(vars: &[(&str, &str)]) -> FakeEnv {
        FakeEnv {
            vars: vars
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
            dirs: vec![(PathBuf::from("/venv/lib"), vec!["python3.12".into()])],
        }
    }

    fn discovery_candidates() -> TestResult {
        let e = fake(&[
            ("NCCL_HOME", "/opt/nccl"),
            ("CUDA_PATH", "/opt/cuda"),
            ("CUDNN_RS_SEARCH_PATH", "/s1"),
            ("VIRTUAL_ENV", "/venv"),
        ]);
        let list = loader::candidates(&sys::SPEC, &e);
        let pos = |p: &str| list.iter().position(|c| c.path == Path::new(p));
        let order = [
            "/opt/nccl/lib64/libnccl.so.2",
            "/opt/nccl/lib/libnccl.so.2",
            "/opt/cuda/lib64/libnccl.so.2",
            "/s1/libnccl.so.2",
            "/s1/nvidia/nccl/lib/libnccl.so.2",
            "libnccl.so.2",
            "libnccl.so",
            "/usr/local/cuda/lib64/libnccl.so.2",
            "/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2",
        ];
        let mut last: Option<(&str, usize)> = None;
        for p in order {
            let i = pos(p).ok_or_else(|| format!("{p} is not a candidate: {list:#?}"))?;
            if let Some((lp, li)) = last {
                ensure!(i > li, "{p} (#{i}) should come after {lp} (#{li})");
            }
            last = Some((p, i));
        }
        let venv = list
            .iter()
            .find(|c| {
                c.path
                    .ends_with("python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2")
            })
            .unwrap();
        ensure!(venv.source == Source::Python("VIRTUAL_ENV"), "{venv:?}");
        // The override is exclusive: only it is tried.
        let e = fake(&[("NCCL_LIB_DIR", "/my/nccl"), ("CUDA_PATH", "/opt/cuda")]);
        let list = loader::candidates(&sys::SPEC, &e);
        ensure!(
            list.iter()
                .all(|c| c.source == Source::Override("NCCL_LIB_DIR")),
            "{list:?}"
        );
        ensure!(
            list[0].path == Path::new("/my/nccl/libnccl.so.2"),
            "{list:?}"
        );
        Ok(())
    }

    // ---------------------------------------------------------- host tier

    fn load_wheel_layout() -> TestResult {
        let t = sys::load().map_err(|e| e.to_string())?;
        let info = t.info();
        let path = info.path.clone().ok_or("no path recorded")?;
        ensure!(
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libnccl.so")),
            "{}",
            path.display()
        );
        // From a checkout (and in CI), NCCL comes from the fetched wheels, laid
        // out as site-packages/nvidia/nccl/lib.
        if std::env::var_os("CUDNN_RS_EXPECT_STACK").is_some() {
            ensure!(
                path.parent()
                    .is_some_and(|d| d.ends_with("nvidia/nccl/lib")),
                "{}",
                path.display()
            );
            ensure!(
                matches!(
                    info.source,
                    Some(Source::SearchPath) | Some(Source::Fallback)
                ),
                "{:?}",
                info.source
            );
        }
        // Every declared function the host tier uses is there.
        for s in [
            "ncclGetVersion",
            "ncclGetUniqueId",
            "ncclGetErrorString",
            "ncclGetLastError",
            "ncclCommInitRank",
            "ncclAllReduce",
            "ncclGroupStart",
            "ncclGroupEnd",
            "ncclSend",
            "ncclRecv",
        ] {
            ensure!(t.has_symbol(s), "{s} missing");
        }
        // The pinned wheels provide every function the bindings declare (an
        // older NCCL elsewhere, e.g. PyTorch's, may lack the newest ones).
        if std::env::var_os("CUDNN_RS_EXPECT_STACK").is_some() {
            ensure!(
                t.missing_symbols().is_empty(),
                "missing: {:?}",
                t.missing_symbols()
            );
        }
        Ok(())
    }

    fn override_and_missing() -> TestResult {
        let real = sys::load()
            .map_err(|e| e.to_string())?
            .info()
            .path
            .clone()
            .ok_or("no path")?;
        let dir = real
            .parent()
            .ok_or("no dir")?
            .to_string_lossy()
            .into_owned();
        // The override, as a directory, finds the library there and only there.
        let e = fake(&[("NCCL_LIB_DIR", &dir)]);
        let (_lib, found) = loader::open_first(&sys::SPEC, loader::candidates(&sys::SPEC, &e))
            .map_err(|e| e.to_string())?;
        ensure!(
            found.source == Source::Override("NCCL_LIB_DIR"),
            "{found:?}"
        );
        ensure!(found.path.starts_with(&dir), "{found:?}");
        // As the file itself.
        let e = fake(&[("NCCL_LIB_DIR", &real.to_string_lossy())]);
        let (_lib, found) = loader::open_first(&sys::SPEC, loader::candidates(&sys::SPEC, &e))
            .map_err(|e| e.to_string())?;
        ensure!(found.path == real, "{found:?}");
        // A wrong override is reported, never replaced by another copy.
        let e = fake(&[
            ("NCCL_LIB_DIR", "/nowhere/nccl"),
            ("CUDNN_RS_SEARCH_PATH", &dir),
        ]);
        let err = loader::open_first(&sys::SPEC, loader::candidates(&sys::SPEC, &e)).unwrap_err();
        ensure!(err.attempts.len() == sys::SPEC.sonames.len(), "{err}");
        let text = err.to_string();
        ensure!(text.contains("NCCL could not be loaded"), "{text}");
        ensure!(
            format!("{err:#}").contains("/nowhere/nccl/libnccl.so.2: not found")
                && text.contains("/nowhere/nccl: not found (2 paths)"),
            "{err:#}"
        );
        ensure!(
            text.contains("set NCCL_LIB_DIR") && text.contains("nvidia-nccl-cu13"),
            "{text}"
        );
        // And through the safe crate's error type.
        let wrapped: Error = err.into();
        ensure!(matches!(wrapped, Error::Load(_)), "{wrapped}");
        Ok(())
    }

    fn version() -> TestResult {
        let v = nccl::version()?;
        let t = sys::load().map_err(|e| e.to_string())?;
        let mut raw = 0;
        // SAFETY: valid out-pointer; no device needed.
        let st = unsafe { t.ncclGetVersion(&mut raw) }?;
        ensure!(st == sys::ncclResult_t::ncclSuccess, "{st:?}");
        ensure!(sys::decode_version(raw) == v, "{raw} vs {v}");
        ensure!(t.info().version == Some(v), "{:?}", t.info().version);
        if std::env::var_os("CUDNN_RS_EXPECT_STACK").is_some() {
            // Both stacks pin NCCL 2.32.3 (xtask/src/fetch.rs).
            ensure!(
                v == loader::Version::new(2, 32, 3),
                "NCCL {v}, pinned 2.32.3"
            );
            ensure!(
                v == sys::HEADER_VERSION,
                "header {} vs library {v}",
                sys::HEADER_VERSION
            );
        }
        Ok(())
    }

    fn unique_id_round_trip() -> TestResult {
        let a = UniqueId::new()?;
        let b = UniqueId::new()?;
        ensure!(a != b, "two fresh ids are equal");
        ensure!(a.to_bytes().iter().any(|&x| x != 0), "id is all zeros");
        ensure!(
            UniqueId::from_bytes(&a.to_bytes())? == a,
            "bytes round trip"
        );
        let text = a.to_string();
        ensure!(
            text.len() == 256 && text.bytes().all(|c| c.is_ascii_hexdigit()),
            "{text}"
        );
        ensure!(text.parse::<UniqueId>()? == a, "text round trip");
        ensure!(UniqueId::from_raw(a.as_raw()) == a, "raw round trip");
        // The raw struct NCCL filled holds the same bytes.
        let raw = a.as_raw();
        ensure!(
            raw.internal
                .iter()
                .zip(a.to_bytes())
                .all(|(&r, b)| r as u8 == b),
            "raw bytes"
        );
        Ok(())
    }

    fn error_strings() -> TestResult {
        let t = sys::load().map_err(|e| e.to_string())?;
        // The result codes of nccl.h, by hand.
        let names = [
            (1, "ncclUnhandledCudaError"),
            (2, "ncclSystemError"),
            (3, "ncclInternalError"),
            (4, "ncclInvalidArgument"),
            (5, "ncclInvalidUsage"),
            (6, "ncclRemoteError"),
            (7, "ncclInProgress"),
            (8, "ncclTimeout"),
        ];
        ensure!(
            nccl::check_result("ncclX", sys::ncclResult_t(0)).is_ok(),
            "success is an error"
        );
        let mut texts = HashSet::new();
        for (code, name) in names {
            let r = sys::ncclResult_t(code);
            // SAFETY: accepts any code, returns a static string.
            let p = unsafe { t.ncclGetErrorString(r) }?;
            ensure!(!p.is_null(), "null text for {name}");
            // SAFETY: NUL-terminated static string.
            let lib = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
            ensure!(!lib.is_empty(), "empty text for {name}");
            texts.insert(lib.clone());
            let e = nccl::check_result("ncclAllReduce", r).unwrap_err();
            match &e {
                Error::Nccl {
                    call,
                    code: c,
                    name: n,
                    text,
                    rank,
                    ..
                } => {
                    ensure!(*call == "ncclAllReduce" && *c == code, "{e}");
                    ensure!(*n == name, "{code}: {n} vs {name}");
                    ensure!(*text == lib, "{code}: {text} vs {lib}");
                    ensure!(rank.is_none(), "{e}");
                }
                other => return Err(format!("{code}: {other}").into()),
            }
            let shown = e.to_string();
            ensure!(
                shown.contains("ncclAllReduce failed")
                    && shown.contains(name)
                    && shown.contains(&lib),
                "{shown}"
            );
            ensure!(nccl::result_name(r) == name, "{}", nccl::result_name(r));
        }
        ensure!(
            texts.len() == names.len(),
            "texts are not distinct: {texts:?}"
        );
        // A code these bindings do not know keeps its number.
        let e = nccl::check_result("ncclAllReduce", sys::ncclResult_t(1234)).unwrap_err();
        ensure!(
            matches!(&e, Error::Nccl { code: 1234, name, .. } if *name == "unknown"),
            "{e}"
        );
        ensure!(e.to_string().contains("1234"), "{e}");
        ensure!(
            nccl::result_name(sys::ncclResult_t(1234)) == "ncclResult_1234",
            "name"
        );
        Ok(())
    }

    fn init_rank_misuse() -> TestResult {
        let id = UniqueId::new()?;
        // SAFETY: every other rank runs this same test code: the same calls in the same order.
        let e = unsafe { Communicator::init_rank(&id, 2, 2) }.unwrap_err();
        ensure!(
            arg_of(&e) == "rank" && e.to_string().contains("size 2"),
            "{e}"
        );
        // SAFETY: every other rank runs this same test code: the same calls in the same order.
        let e = unsafe { Communicator::init_rank(&id, 3, 2) }.unwrap_err();
        ensure!(arg_of(&e) == "rank", "{e}");
        // SAFETY: every other rank runs this same test code: the same calls in the same order.
        let e = unsafe { Communicator::init_rank(&id, 0, 0) }.unwrap_err();
        ensure!(arg_of(&e) == "size", "{e}");
        let e = Communicator::init_all(&[]).unwrap_err();
        ensure!(arg_of(&e) == "devices", "{e}");
        if !has_gpu() {
            // A valid call without a device is the typed NoDevice (issue
            // 33), found by asking the runtime before NCCL is called.
            // SAFETY: every other rank runs this same test code: the same calls in the same order.
            let e = unsafe { Communicator::init_rank(&id, 0, 1) }.unwrap_err();
            ensure!(
                matches!(e, Error::NoDevice { .. }) && e.is_no_device(),
                "expected NoDevice, got {e:?}"
            );
        }
        Ok(())
    }

    /// `ncclGroupEnd` with no group open is `ncclInvalidUsage`: after each
    /// way out of `group`, no group may be left open.
    fn group_closes() -> TestResult {
        let t = sys::load().map_err(|e| e.to_string())?;
        let closed = || -> TestResult {
            // SAFETY: no arguments; with no group open NCCL reports misuse.
            let r = unsafe { t.ncclGroupEnd() }?;
            ensure!(
                r == sys::ncclResult_t::ncclInvalidUsage,
                "a group was left open (ncclGroupEnd gave {r:?})"
            );
            Ok(())
        };
        closed()?;
        ensure!(nccl::group(|g| Ok(g.len() + 5))? == 5, "value");
        closed()?;
        let e = nccl::group(|_| -> cudnn::Result<()> { Err(Error::invalid("x", "test", 1)) })
            .unwrap_err();
        ensure!(arg_of(&e) == "x", "the closure's error is returned: {e}");
        closed()?;
        let caught = std::panic::catch_unwind(|| {
            let _ = nccl::group(|_| -> cudnn::Result<()> { panic!("inside a group") });
        });
        ensure!(caught.is_err(), "the panic went through");
        closed()?;
        Ok(())
    }
}
