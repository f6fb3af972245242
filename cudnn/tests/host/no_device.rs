//! One error model without a GPU (issue 33 item 3): every public entry point
//! that needs a device, called on a machine without one (the real libraries
//! loaded), returns [`Error::NoDevice`], for which [`Error::is_no_device`]
//! is true, and whose message leads with the crate's reason (what is missing
//! and what to do), the library's own words after it.
//!
//! The independent truth is the CUDA runtime itself: `cudaGetDeviceCount`,
//! called through the raw bindings, must answer with a no-device code (the
//! test is skipped visibly where it does not: a GPU is present), and that
//! code must be the one the error's detail reports for runtime calls.
//!
//! The list of entry points is [`ENTRY_POINTS`]; the unit test
//! `every_device_creating_call_is_covered` reads the crate's sources and
//! fails when a call that creates something on a device (a handle, a
//! stream, an event, memory, a communicator, a context) appears in a file or
//! a number of times this list does not account for, so a new constructor
//! cannot be forgotten here.
//!
//! Also: every file-reading and file-writing entry point (plan cache and
//! algorithm cache save and load, the plan key) reports an I/O failure as
//! [`Error::Io`] naming the path.
//!
//! `CUDNN_RS_REQUIRE_LIBS=1 CUDNN_RS_SEARCH_PATH=$PWD/.cuda-libs/cuda13 \
//!  cargo test -p cudnn-rs --features dnn,blas,reference,nccl,cudarc --test host no_device::`

use crate::support;

use std::path::{Path, PathBuf};

use cudnn::Error;
use cudnn::blas;
use cudnn::dnn;
use cudnn::graph::{self, Target};
use cudnn::runtime::{Device, DeviceBuffer, Event, EventFlags, HostBuffer, Stream, StreamFlags};
use libtest_mimic::Trial;
use support::scan::{count_calls, sources};
use support::*;

/// A device-creating call in `src`: (file under `src/`, the call, how many
/// times it appears there).
type Site = (&'static str, &'static str, usize);

/// Every public entry point that needs a device, by the name its trial
/// carries, and the device-creating calls in `src` it covers (file, call,
/// how many times the call appears there). Methods on values that cannot be
/// had without a device (`Device::create_stream`, `Stream::alloc` on a
/// stream of a device, `Plan::cuda_graph` with a handle, cudarc streams
/// and memory) are reached only through one of these.
const ENTRY_POINTS: &[(&str, &[Site])] = &[
    (
        "Device::count",
        &[
            ("runtime/device.rs", "cudaGetDeviceCount", 1),
            ("no_device/mod.rs", "cudaGetDeviceCount", 1),
        ],
    ),
    ("Device::new", &[("runtime/device.rs", "cudaSetDevice", 1)]),
    ("Device::current", &[]),
    (
        "Stream::new",
        &[("runtime/stream.rs", "cudaStreamCreateWithFlags", 1)],
    ),
    ("Stream::non_blocking", &[]),
    ("Stream::with_flags", &[]),
    ("Stream::legacy().synchronize", &[]),
    (
        "Event::new",
        &[("runtime/event.rs", "cudaEventCreateWithFlags", 1)],
    ),
    ("Event::with_flags", &[]),
    (
        "DeviceBuffer::alloc",
        &[("runtime/buffer.rs", "cudaMalloc", 1)],
    ),
    ("DeviceBuffer::zeroed", &[]),
    ("DeviceBuffer::from_host", &[]),
    (
        "DeviceBuffer::alloc_async",
        &[("runtime/buffer.rs", "cudaMallocAsync", 1)],
    ),
    ("Stream::legacy().alloc", &[]),
    (
        "HostBuffer::new",
        &[("runtime/host.rs", "cudaMallocHost", 1)],
    ),
    ("HostBuffer::from_slice", &[]),
    ("dnn::Handle::new", &[("dnn/handle.rs", "cudnnCreate", 1)]),
    (
        "blas::Handle::new",
        &[("blas/handle.rs", "cublasCreate_v2", 1)],
    ),
    (
        "blas::LtHandle::new",
        &[("blas/lt/handle.rs", "cublasLtCreate", 1)],
    ),
    ("blas::LtHandle::with_workspace", &[]),
    (
        "graph::Target::device",
        &[
            ("graph/target.rs", "DEVICEPROP_DEVICE_ID", 1),
            // `Plan::cuda_graph` takes a dnn::Handle, which needs a device.
            ("graph/cuda_graph.rs", "cudaGraphCreate", 1),
            // `CudaGraph::instantiate` takes a captured graph (a stream of a device).
            ("runtime/graph.rs", "cudaGraphInstantiateWithFlags", 1),
        ],
    ),
    ("graph::DeviceProperties::from_device", &[]),
    (
        "nccl::Communicator::init_rank",
        &[("nccl/comm/init.rs", "ncclCommInitRank", 1)],
    ),
    (
        "nccl::Communicator::init_rank_timeout",
        &[("nccl/comm/init.rs", "ncclCommInitRankConfig", 1)],
    ),
    // `init_all` takes `Device` values, which need a device.
    (
        "nccl::launch::init",
        &[("nccl/comm/init.rs", "ncclCommInitAll", 1)],
    ),
    (
        "interop::context",
        &[("interop/driver.rs", "CudaContext::new", 1)],
    ),
    ("interop::device_count", &[]),
    ("interop::probe_driver", &[]),
];

/// The calls that create something on a device (or ask for one).
const CREATING_CALLS: &[&str] = &[
    "cudaGetDeviceCount",
    "cudaSetDevice",
    "cudaStreamCreate",
    "cudaStreamCreateWithFlags",
    "cudaStreamCreateWithPriority",
    "cudaEventCreate",
    "cudaEventCreateWithFlags",
    "cudaMalloc",
    "cudaMallocAsync",
    "cudaMallocHost",
    "cudaMallocManaged",
    "cudaMallocPitch",
    "cudaHostAlloc",
    "cudaHostRegister",
    "cudaGraphCreate",
    "cudaGraphInstantiate",
    "cudaGraphInstantiateWithFlags",
    "cudnnCreate",
    "cublasCreate_v2",
    "cublasLtCreate",
    "ncclCommInitRank",
    "ncclCommInitRankConfig",
    "ncclCommInitRankScalable",
    "ncclCommInitAll",
    "CudaContext::new",
    "DEVICEPROP_DEVICE_ID",
];

pub fn main() {
    let mut trials = vec![unit(
        "every_device_creating_call_is_covered",
        every_device_creating_call_is_covered,
    )];
    for (name, _) in ENTRY_POINTS {
        trials.push(no_device(name));
    }
    trials.push(if has_gpu() {
        eprintln!("skipped: no_device::host::fuzz_ordinals: a CUDA device is present");
        crate::support::trial("host::fuzz_ordinals", || Ok(())).with_ignored_flag(true)
    } else {
        host("fuzz_ordinals", fuzz_ordinals)
    });
    trials.push(host("io_errors_carry_the_path", io_errors_carry_the_path));
    // The same with the planning stub loaded as the driver (what planning a
    // graph does without one), in a child process: the stub stays loaded.
    if std::env::var_os(STUB_CHILD).is_some() {
        trials.push(crate::support::trial("host::stub_child", stub_child));
    } else if let Some(why) = cannot_check("graph::").or_else(stub_cannot_load) {
        eprintln!("skipped: no_device::host::with_the_planning_stub: {why}");
        trials.push(
            crate::support::trial("host::with_the_planning_stub", || Ok(()))
                .with_ignored_flag(true),
        );
    } else {
        trials.push(host("with_the_planning_stub", with_the_planning_stub));
    }
    // Each in a process of its own: what a call answers without a device
    // depends on whether the planning stub is already loaded, which other
    // modules of this binary do.
    run(trials.into_iter().map(isolated).collect());
}

/// The raw answer of `cudaGetDeviceCount` (the oracle), or why none.
fn raw_device_count() -> Result<(u32, i32), String> {
    let rt = cudnn::sys::cudart::load().map_err(|e| e.to_string())?;
    let mut n = 0;
    // SAFETY: `n` is a valid out-pointer for the call.
    let st = unsafe { rt.cudaGetDeviceCount(&mut n) }.map_err(|e| e.to_string())?;
    Ok((st.0, n))
}

/// Why entry point `name` cannot be checked in this build or on this
/// machine, if it cannot.
fn cannot_check(name: &str) -> Option<String> {
    if name.starts_with("nccl::") && !cfg!(feature = "nccl") {
        return Some("needs the `nccl` feature (--features dnn,blas,reference,nccl,cudarc)".into());
    }
    if name.starts_with("interop::") && !cfg!(feature = "cudarc") {
        return Some(
            "needs the `cudarc` feature (--features dnn,blas,reference,nccl,cudarc)".into(),
        );
    }
    if libs_missing().is_some() {
        // `host` reports it (a failure under CUDNN_RS_REQUIRE_LIBS=1).
        return None;
    }
    if has_gpu() {
        return Some("a CUDA device is present".into());
    }
    if name.starts_with("graph::")
        && let Err(e) = graph::require_graph_support()
    {
        return Some(format!("needs cuDNN >= 9.8: {e}"));
    }
    if name.starts_with("nccl::")
        && let Some(why) = nccl_missing()
    {
        return Some(why);
    }
    None
}

/// The trial for one entry point: host tier, skipped visibly (stderr,
/// reported as ignored) where it cannot be checked.
fn no_device(name: &'static str) -> Trial {
    if let Some(why) = cannot_check(name) {
        eprintln!("skipped: no_device::host::{name}: {why}");
        return crate::support::trial(format!("host::{name}"), || Ok(())).with_ignored_flag(true);
    }
    host(name, move || check_entry(name))
}

#[cfg(feature = "nccl")]
fn nccl_missing() -> Option<String> {
    cudnn::nccl::version()
        .err()
        .map(|e| format!("NCCL does not load: {e}"))
}

#[cfg(not(feature = "nccl"))]
fn nccl_missing() -> Option<String> {
    None
}

/// Call `name` and check its error.
fn check_entry(name: &str) -> TestResult {
    let (code, count) = raw_device_count()?;
    // The runtime's no-device codes (cudaError_t in driver_types.h):
    // InitializationError 3, StubLibrary 34, InsufficientDriver 35,
    // DevicesUnavailable 46, NoDevice 100, SystemNotReady 802,
    // SystemDriverMismatch 803, CompatNotSupportedOnDevice 804; or success
    // with a count of 0.
    ensure!(
        [3, 34, 35, 46, 100, 802, 803, 804].contains(&code) || (code == 0 && count == 0),
        "the runtime sees a device here (cudaGetDeviceCount: {code}, {count}); this test needs none"
    );
    let e = call(name)?;
    check_error(name, &e, code)?;
    eprintln!("{name}: {e}");
    Ok(())
}

/// The error `name` returns; an `Err` of the test when it succeeds.
fn call(name: &str) -> Result<Error, String> {
    fn err<T>(r: cudnn::Result<T>, name: &str) -> Result<Error, String> {
        r.err()
            .ok_or_else(|| format!("{name} succeeded without a device"))
    }
    let legacy = Stream::legacy;
    match name {
        "Device::count" => err(Device::count(), name),
        "Device::new" => err(Device::new(0), name),
        "Device::current" => err(Device::current(), name),
        "Stream::new" => err(Stream::new(), name),
        "Stream::non_blocking" => err(Stream::non_blocking(), name),
        "Stream::with_flags" => err(Stream::with_flags(StreamFlags::NON_BLOCKING), name),
        "Stream::legacy().synchronize" => err(legacy().synchronize(), name),
        "Event::new" => err(Event::new(), name),
        "Event::with_flags" => err(Event::with_flags(EventFlags::DISABLE_TIMING), name),
        "DeviceBuffer::alloc" => err(DeviceBuffer::<f32>::alloc(16), name),
        "DeviceBuffer::zeroed" => err(DeviceBuffer::<f32>::zeroed(16), name),
        "DeviceBuffer::from_host" => err(DeviceBuffer::<u8>::from_host(&[1, 2, 3]), name),
        // SAFETY: fails without a device; nothing is allocated or used.
        "DeviceBuffer::alloc_async" => err(
            unsafe { DeviceBuffer::<f32>::alloc_async(16, &legacy()) },
            name,
        ),
        "Stream::legacy().alloc" => err(legacy().alloc::<f32>(16), name),
        "HostBuffer::new" => err(HostBuffer::<f32>::new(4), name),
        "HostBuffer::from_slice" => err(HostBuffer::<f32>::from_slice(&[1.0, 2.0]), name),
        "dnn::Handle::new" => err(dnn::Handle::new(&legacy()), name),
        "blas::Handle::new" => err(blas::Handle::new(&legacy()), name),
        "blas::LtHandle::new" => err(blas::LtHandle::new(&legacy()), name),
        "blas::LtHandle::with_workspace" => {
            err(blas::LtHandle::with_workspace(&legacy(), 1 << 20), name)
        }
        "graph::Target::device" => err(Target::device(0), name),
        "graph::DeviceProperties::from_device" => {
            err(graph::DeviceProperties::from_device(0), name)
        }
        "nccl::Communicator::init_rank" => nccl_call(name, false),
        "nccl::Communicator::init_rank_timeout" => nccl_call(name, true),
        "nccl::launch::init" => nccl_launch(name),
        "interop::context" => interop_call(name, 0),
        "interop::device_count" => interop_call(name, 1),
        "interop::probe_driver" => interop_call(name, 2),
        other => Err(format!("no call written for entry point {other}")),
    }
}

#[cfg(feature = "nccl")]
fn nccl_call(name: &str, timeout: bool) -> Result<Error, String> {
    use cudnn::nccl::{Communicator, UniqueId};
    let id = UniqueId::new().map_err(|e| format!("UniqueId::new: {e}"))?;
    let r = if timeout {
        // SAFETY: every other rank runs this same test code: the same calls in the same order.
        unsafe { Communicator::init_rank_timeout(&id, 0, 1, std::time::Duration::from_secs(20)) }
    } else {
        // SAFETY: every other rank runs this same test code: the same calls in the same order.
        unsafe { Communicator::init_rank(&id, 0, 1) }
    };
    r.err()
        .ok_or_else(|| format!("{name} succeeded without a device"))
}

#[cfg(feature = "nccl")]
fn nccl_launch(name: &str) -> Result<Error, String> {
    use cudnn::nccl::launch::{self, LaunchEnv};
    // A one-rank job, read from an empty environment (not this process's).
    let env = LaunchEnv::from_vars(|_| None).map_err(|e| format!("LaunchEnv: {e}"))?;
    // SAFETY: every other rank runs this same test code: the same calls in the same order.
    unsafe { launch::init(env) }
        .err()
        .ok_or_else(|| format!("{name} succeeded without a device"))
}

#[cfg(not(feature = "nccl"))]
fn nccl_call(name: &str, _: bool) -> Result<Error, String> {
    Err(format!(
        "{name} needs the `nccl` feature: run with --features dnn,blas,reference,nccl,cudarc"
    ))
}

#[cfg(not(feature = "nccl"))]
fn nccl_launch(name: &str) -> Result<Error, String> {
    nccl_call(name, false)
}

#[cfg(feature = "cudarc")]
fn interop_call(name: &str, which: u8) -> Result<Error, String> {
    use cudnn::interop;
    let r = match which {
        0 => interop::context(0).map(|_| ()),
        1 => interop::device_count().map(|_| ()),
        _ => interop::probe_driver(),
    };
    r.err()
        .ok_or_else(|| format!("{name} succeeded without a device"))
}

#[cfg(not(feature = "cudarc"))]
fn interop_call(name: &str, _: u8) -> Result<Error, String> {
    Err(format!(
        "{name} needs the `cudarc` feature: run with --features dnn,blas,reference,nccl,cudarc"
    ))
}

/// Words that belong to a library's own text, not to the crate's reason.
const LIBRARY_WORDS: &[&str] = &[
    "CUDNN_STATUS",
    "CUBLAS_STATUS",
    "cudaError",
    "CUDA_ERROR",
    "ncclUnhandledCudaError",
    "cuDNN says",
    "returned",
];

fn check_error(name: &str, e: &Error, runtime_code: u32) -> TestResult {
    ensure!(
        e.is_no_device(),
        "{name}: is_no_device() is false for {e:?}"
    );
    let Error::NoDevice { reason, detail } = e else {
        return Err(format!("{name}: expected Error::NoDevice, got {e:?}").into());
    };
    let msg = e.to_string();
    ensure!(
        msg.starts_with("no usable CUDA device: ") && msg[23..].starts_with(reason.as_str()),
        "{name}: the message must lead with the crate's reason: {msg}"
    );
    for w in LIBRARY_WORDS {
        ensure!(
            !reason.contains(w),
            "{name}: the reason holds library text ({w}): {reason}"
        );
    }
    ensure!(
        [
            "install", "check", "remove", "see", "reload", "start", "set"
        ]
        .iter()
        .any(|w| reason.contains(w)),
        "{name}: the reason must say what to do: {reason}"
    );
    // Where a CUDA runtime call found it, the detail keeps the runtime's
    // code as the oracle gave it (the cudarc probes report the driver's
    // loader instead).
    if !name.starts_with("interop::")
        && let Some(d) = detail
        && runtime_code != 0
    {
        ensure!(
            d.contains(&format!("returned {runtime_code} ")),
            "{name}: the detail must keep the runtime's code {runtime_code}: {d}"
        );
    }
    // A library that found it first keeps its own status in the detail.
    let library = match name {
        "dnn::Handle::new" => Some("cudnnCreate"),
        "blas::Handle::new" => Some("cublasCreate"),
        _ => None,
    };
    if let Some(call) = library {
        let d = detail.as_deref().unwrap_or_default();
        ensure!(
            d.contains(call) || d.contains("cudaGetDevice") || d.contains("cudaStreamIsCapturing"),
            "{name}: the detail must name the failing call: {d}"
        );
    }
    Ok(())
}

/// Set in the child process of `with_the_planning_stub`.
const STUB_CHILD: &str = "CUDNN_RS_TEST_NO_DEVICE_STUB_CHILD";

/// What the child prints once it has checked every entry point with the
/// stub loaded: without it the child tested nothing.
const STUB_CHECKED: &str = "no_device stub case: checked";

/// Why the planning stub would not be the driver in the child, where that
/// can be known without loading it: a real driver opens, or the stub is
/// turned off.
fn stub_cannot_load() -> Option<String> {
    if std::env::var_os("CUDNN_RS_NO_DRIVER_STUB").is_some_and(|v| v == "1") {
        return Some("CUDNN_RS_NO_DRIVER_STUB=1 turns the planning stub off".into());
    }
    // SAFETY: opening the system's driver library runs its initialisers,
    // as the runtime would when it looks for a driver.
    unsafe { cudnn::sys::cudart::loader::libloading::Library::new("libcuda.so.1") }
        .ok()
        .map(|_| "a real CUDA driver (libcuda.so.1) opens here, so the stub is never loaded".into())
}

/// Run `stub_child` in a child process and require it to pass, having
/// checked (its marker printed).
fn with_the_planning_stub() -> TestResult {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = std::process::Command::new(exe)
        .args(["--exact", "no_device::host::stub_child", "--nocapture"])
        .env(STUB_CHILD, "1")
        .output()
        .map_err(|e| e.to_string())?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        out.status.success() && text.contains("1 passed"),
        "the child failed:\n{text}"
    );
    ensure!(
        text.contains(STUB_CHECKED),
        "the child passed without checking anything (no marker):\n{text}"
    );
    eprint!(
        "{}",
        text.lines()
            .filter(|l| l.contains(": no usable"))
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    );
    Ok(())
}

/// In the child: load the planning stub, then every runtime entry point and
/// `Target::device` answer "no device" (the runtime's 34, a stub driver, or
/// 35 when the runtime had looked for a driver before).
fn stub_child() -> TestResult {
    match graph::driver::ensure() {
        Ok(graph::driver::Driver::Stub(_)) => {}
        Ok(other) => {
            return Err(format!("{other:?} loads here; the stub case did not run").into());
        }
        Err(e) => {
            return Err(format!(
                "the planning stub is not available ({e}); the stub case did not run"
            )
            .into());
        }
    }
    let (code, _) = raw_device_count()?;
    for name in [
        "Stream::new",
        "DeviceBuffer::alloc",
        "dnn::Handle::new",
        "graph::Target::device",
    ] {
        let e = call(name)?;
        check_error(name, &e, code)?;
        if let Error::NoDevice { reason, .. } = &e {
            ensure!(
                reason.contains("planning stub") && reason.contains("install the NVIDIA driver"),
                "{name}: the reason must say the stub is the only driver: {reason}"
            );
        }
        eprintln!("{name} (stub loaded): {e}");
    }
    println!("{STUB_CHECKED}");
    Ok(())
}

/// Any ordinal, any size: without a device every answer is "no device"
/// (never a panic, never another kind), for the constructors that take one.
fn fuzz_ordinals() -> TestResult {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let mut runner = TestRunner::new(Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    });
    let graph = graph::require_graph_support().is_ok();
    runner
        .run(
            &(any::<i32>(), any::<usize>(), 1usize..(1 << 20)),
            |(ordinal, big, len)| {
                let e = Device::new(big).err();
                prop_assert!(e.as_ref().is_some_and(Error::is_no_device), "{:?}", e);
                if graph {
                    let e = Target::device(ordinal).err();
                    prop_assert!(e.as_ref().is_some_and(Error::is_no_device), "{:?}", e);
                }
                let e = DeviceBuffer::<u8>::alloc(len).err();
                prop_assert!(e.as_ref().is_some_and(Error::is_no_device), "{:?}", e);
                let e = HostBuffer::<u8>::new(len).err();
                prop_assert!(e.as_ref().is_some_and(Error::is_no_device), "{:?}", e);
                Ok(())
            },
        )
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// Every device-creating call in `src` is covered by an entry point of
/// [`ENTRY_POINTS`], in the file and number listed: a new one fails here
/// until its constructor is added to the list (and so to the host test).
fn every_device_creating_call_is_covered() -> TestResult {
    // The scanner itself, on hand-written lines: a call counts, a comment,
    // a longer name and a doc alias do not.
    let sample = "unsafe { cuda_call!(rt, cudaMalloc(&mut p, n)) }?; // cudaMalloc(\n\
                  cudaMallocAsync(&mut p)\n#[doc(alias = \"cudaMalloc\")]\n\
                  d.set(attr::DEVICEPROP_DEVICE_ID, &[0])";
    ensure!(
        count_calls(sample, "cudaMalloc") == 1,
        "scanner: cudaMalloc"
    );
    ensure!(
        count_calls(sample, "cudaMallocAsync") == 1,
        "scanner: async"
    );
    ensure!(
        count_calls(sample, "DEVICEPROP_DEVICE_ID") == 1,
        "scanner: attribute"
    );
    let mut found: Vec<(String, &str, usize)> = Vec::new();
    for (file, text) in sources()? {
        if file.ends_with("tests.rs") || file.contains("/tests") || file.contains("_tests") {
            continue;
        }
        for call in CREATING_CALLS {
            let n = count_calls(&text, call);
            if n > 0 {
                found.push((file.clone(), call, n));
            }
        }
    }
    let mut listed: Vec<(String, &str, usize)> = ENTRY_POINTS
        .iter()
        .flat_map(|(_, calls)| calls.iter())
        .map(|&(f, c, n)| (f.to_string(), c, n))
        .collect();
    found.sort();
    listed.sort();
    let missing: Vec<_> = found.iter().filter(|f| !listed.contains(f)).collect();
    let stale: Vec<_> = listed.iter().filter(|l| !found.contains(l)).collect();
    ensure!(
        missing.is_empty() && stale.is_empty(),
        "device-creating calls not covered by ENTRY_POINTS (add the public entry point that \
         reaches each to the list and to `call`): {missing:?}; listed but not found: {stale:?}"
    );
    // Every entry point has a call written for it (checked without calling).
    let names: Vec<&str> = ENTRY_POINTS.iter().map(|(n, _)| *n).collect();
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    ensure!(unique.len() == names.len(), "duplicate entry points");
    Ok(())
}

/// A fresh folder under the system's temporary folder.
fn scratch(tag: &str) -> Result<PathBuf, String> {
    let d = std::env::temp_dir().join(format!("cudnn-rs-no-device-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
    Ok(d)
}

/// `r` is an `Error::Io` whose path is `path` or inside `dir` (a temporary
/// file beside it).
fn is_io_at<T>(r: cudnn::Result<T>, what: &str, path: &Path, dir: &Path) -> TestResult {
    match r {
        Err(Error::Io { path: p, op, .. }) => {
            ensure!(
                p == path || p.starts_with(dir),
                "{what}: Io names {} (op {op}), expected {}",
                p.display(),
                path.display()
            );
            Ok(())
        }
        Err(e) => Err(format!("{what}: expected Error::Io, got {e:?}").into()),
        Ok(_) => Err(format!("{what}: succeeded on {}", path.display()).into()),
    }
}

/// Every file-reading and file-writing entry point reports an I/O failure
/// as `Error::Io` with the path: a missing file to read, a missing folder
/// to write into.
fn io_errors_carry_the_path() -> TestResult {
    let dir = scratch("io")?;
    let gone = dir.join("missing-folder");
    let missing = dir.join("missing.plans");
    let into_gone = gone.join("out.plans");

    // SAFETY: a known test key: it tags only files this test writes.
    let key = unsafe { graph::PlanKey::from_bytes(&[7u8; 32]) }?;
    let cache = graph::PlanCache::new(4);
    is_io_at(
        cache.save(&into_gone, &key),
        "graph::PlanCache::save",
        &into_gone,
        &gone,
    )?;
    let target = Target::preset("h200")?;
    is_io_at(
        cache.load(&missing, &target, graph::Trust::NoCompiledCode),
        "graph::PlanCache::load",
        &missing,
        &dir,
    )?;
    // SAFETY: the file does not exist; nothing is loaded.
    let r = unsafe { cache.load_unverified(&missing, &target) };
    is_io_at(r, "graph::PlanCache::load_unverified", &missing, &dir)?;

    let algos = dnn::AlgoCache::new(4);
    is_io_at(
        algos.save(&into_gone),
        "dnn::AlgoCache::save",
        &into_gone,
        &gone,
    )?;
    is_io_at(algos.load(&missing), "dnn::AlgoCache::load", &missing, &dir)?;

    let key_file = graph::PlanKey::key_file(&gone);
    is_io_at(
        // SAFETY: a key file only `load_or_create` writes, in this test's own folder.
        unsafe { graph::PlanKey::load_or_create(&gone) },
        "graph::PlanKey::load_or_create",
        &key_file,
        &gone,
    )?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
