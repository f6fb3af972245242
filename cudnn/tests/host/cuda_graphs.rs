//! Capture safety and the CUDA-graph API without a device.
//!
//! unit tier: the capture rule as logic (`capture_rule`), against a model,
//! over random statuses (the runtime's values and unknown ones), hazards
//! (with sizes up to `usize::MAX`) and op names: `Ok` exactly when not
//! capturing, otherwise `Error::CaptureUnsafe` naming the op, the hazard
//! and the remedy; every hazard's remedy names the API to call beforehand.
//!
//! host tier (the real CUDA runtime, no device needed): the checks that
//! run before any library call (the legacy default stream cannot be
//! captured; the closure never runs when capture cannot begin), and a
//! property test over random sequences of capture calls and guarded
//! hazards on the pseudo-streams: typed errors only, no panic, bounded
//! time. On a machine with a device the no-device assertions are skipped
//! (the GPU tier, `gpu/cuda_graphs`, covers that side).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use crate::support;

use std::cell::Cell;
use std::time::{Duration, Instant};

use cudnn::Error;
use cudnn::runtime::{
    CaptureMode, CaptureStatus, Hazard, Stream, capture_rule, forbid_during_capture,
};
use cudnn::sys::cudart::cudaStreamCaptureStatus;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use support::*;

fn hazard() -> impl Strategy<Value = Hazard> {
    prop_oneof![
        (any::<usize>(), any::<usize>()).prop_map(|(have, need)| Hazard::WorkspaceGrowth {
            owner: "cuDNN",
            have,
            need
        }),
        Just(Hazard::AlgorithmSearch),
        Just(Hazard::ImplicitWorkspace),
        Just(Hazard::HostUpload("the GEMM pointer table")),
        Just(Hazard::Allocation),
        Just(Hazard::HostSync),
    ]
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        rng_seed: RngSeed::Fixed(23),
        failure_persistence: None,
        ..Config::default()
    })
}

fn rule_matches_the_model() -> TestResult {
    let mut r = runner(20_000);
    let start = Instant::now();
    r.run(&(0u32..6, hazard(), "\\PC{0,24}"), |(raw, h, op)| {
        let status = CaptureStatus::from_raw(cudaStreamCaptureStatus(raw));
        // Model: 0 is "none"; 1 active, 2 invalidated, anything else
        // unknown and treated as capturing.
        let capturing = raw != 0;
        prop_assert_eq!(status.is_capturing(), capturing);
        match (capture_rule(&op, status, &h), capturing) {
            (Ok(()), false) => {}
            (
                Err(Error::CaptureUnsafe {
                    op: o,
                    hazard,
                    before,
                }),
                true,
            ) => {
                prop_assert_eq!(&o, &op);
                prop_assert_eq!(hazard, h.what());
                prop_assert_eq!(before, h.before());
                if let Hazard::WorkspaceGrowth { have, need, .. } = h {
                    let text = h.what();
                    prop_assert!(text.contains(&have.to_string()));
                    prop_assert!(text.contains(&need.to_string()));
                }
            }
            (other, c) => {
                return Err(TestCaseError::fail(format!("capturing {c}: {other:?}")));
            }
        }
        Ok(())
    })
    .map_err(|e| format!("{e}"))?;
    ensure!(
        start.elapsed() < Duration::from_secs(60),
        "20,000 cases took {:?}",
        start.elapsed()
    );
    Ok(())
}

fn remedies_name_the_api() -> TestResult {
    let cases = [
        (
            Hazard::WorkspaceGrowth {
                owner: "cuDNN",
                have: 0,
                need: 4096,
            },
            "reserve_workspace(4096)",
        ),
        (Hazard::AlgorithmSearch, "before the capture"),
        (Hazard::ImplicitWorkspace, "set_workspace"),
        (
            Hazard::HostUpload("the GEMM pointer table"),
            "strided-batched",
        ),
        (Hazard::Allocation, "before the capture"),
        (Hazard::HostSync, "after launching the graph"),
    ];
    for (h, needle) in cases {
        let e = capture_rule("op", CaptureStatus::Active, &h).expect_err("capturing");
        let text = e.to_string();
        ensure!(text.contains(needle), "{h:?}: {text}");
        ensure!(
            text.starts_with("op cannot run while its stream is being captured"),
            "{text}"
        );
    }
    Ok(())
}

fn legacy_stream_is_refused_before_any_call() -> TestResult {
    let ran = Cell::new(false);
    let r = Stream::legacy().capture(CaptureMode::Global, |_| -> cudnn::Result<()> {
        ran.set(true);
        Ok(())
    });
    match r {
        Err(Error::InvalidArgument { arg: what, .. }) => {
            ensure!(what == "stream", "names {what}")
        }
        other => return Err(format!("expected InvalidArgument, got {other:?}").into()),
    }
    ensure!(!ran.get(), "the closure ran although capture never began");
    Ok(())
}

fn null_graph_is_refused() -> TestResult {
    // SAFETY: null is exactly what the function must refuse; nothing is adopted.
    let r = unsafe { cudnn::runtime::CudaGraph::from_raw(std::ptr::null_mut(), None) };
    ensure!(
        matches!(&r, Err(Error::InvalidArgument { arg, .. }) if arg == "raw"),
        "{r:?}"
    );
    Ok(())
}

fn no_device_capture_is_typed() -> TestResult {
    if has_gpu() {
        eprintln!("note: a device is present; the no-device case is the GPU tier's");
        return Ok(());
    }
    let ran = Cell::new(false);
    let r = Stream::per_thread().capture(CaptureMode::ThreadLocal, |_| -> cudnn::Result<()> {
        ran.set(true);
        Ok(())
    });
    ensure!(r.is_err(), "capture without a device succeeded: {r:?}");
    ensure!(!ran.get(), "the closure ran although capture never began");
    let s = Stream::per_thread().capture_status();
    ensure!(
        !matches!(s, Ok(CaptureStatus::Active | CaptureStatus::Invalidated)),
        "a stream without a device is capturing: {s:?}"
    );
    Ok(())
}

#[derive(Debug, Clone)]
enum Action {
    CaptureLegacy,
    CapturePerThread(bool),
    Status(bool),
    Guard(bool, Hazard),
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        Just(Action::CaptureLegacy),
        any::<bool>().prop_map(Action::CapturePerThread),
        any::<bool>().prop_map(Action::Status),
        (any::<bool>(), hazard()).prop_map(|(l, h)| Action::Guard(l, h)),
    ]
}

fn typed(e: &Error) -> bool {
    matches!(
        e,
        Error::InvalidArgument { .. }
            | Error::Cuda { .. }
            | Error::NoDevice { .. }
            | Error::CaptureUnsafe { .. }
            | Error::MissingSymbol(_)
            | Error::WrongThread { .. }
    )
}

fn random_capture_sequences() -> TestResult {
    if has_gpu() {
        eprintln!("note: a device is present; the GPU tier runs captures");
        return Ok(());
    }
    let mut r = runner(300);
    let start = Instant::now();
    r.run(&proptest::collection::vec(action(), 1..12), |actions| {
        for a in actions {
            let stream = |legacy: bool| {
                if legacy {
                    Stream::legacy()
                } else {
                    Stream::per_thread()
                }
            };
            let ran = Cell::new(false);
            let res: cudnn::Result<()> = match &a {
                Action::CaptureLegacy => Stream::legacy()
                    .capture(CaptureMode::Global, |_| -> cudnn::Result<()> {
                        ran.set(true);
                        Ok(())
                    })
                    .map(|_| ()),
                Action::CapturePerThread(fail) => Stream::per_thread()
                    .capture(CaptureMode::Global, |_| -> cudnn::Result<()> {
                        ran.set(true);
                        if *fail {
                            Err(Error::invalid("step", "fails", 1))
                        } else {
                            Ok(())
                        }
                    })
                    .map(|_| ()),
                Action::Status(l) => stream(*l).capture_status().map(|_| ()),
                Action::Guard(l, h) => forbid_during_capture("op", &stream(*l), h.clone()),
            };
            prop_assert!(!ran.get(), "{a:?}: a capture began without a device");
            if let Err(e) = &res {
                prop_assert!(typed(e), "{a:?}: untyped {e:?}");
                // Without a device nothing is capturing: a guard never
                // claims a capture.
                prop_assert!(!matches!(e, Error::CaptureUnsafe { .. }), "{a:?}: {e}");
            }
        }
        Ok(())
    })
    .map_err(|e| format!("{e}"))?;
    ensure!(
        start.elapsed() < Duration::from_secs(90),
        "300 sequences took {:?}",
        start.elapsed()
    );
    Ok(())
}

fn native_version_rule_matches_the_model() -> TestResult {
    use cudnn::graph::{NATIVE_CUDA_GRAPH_FAULTY, NATIVE_CUDA_GRAPH_MIN, native_cuda_graph_rule};
    use cudnn::sys::cudart::Version;
    // The bounds, written out: 9.5.0 is the first; [9.13.0, 9.15.0) refused.
    ensure!(NATIVE_CUDA_GRAPH_MIN == Version::new(9, 5, 0), "min");
    ensure!(
        NATIVE_CUDA_GRAPH_FAULTY == (Version::new(9, 13, 0), Version::new(9, 15, 0)),
        "faulty range"
    );
    let mut r = runner(10_000);
    r.run(&(0u32..12, 0u32..40, 0u32..200), |(ma, mi, pa)| {
        let v = Version::new(ma, mi, pa);
        let code = ma * 10_000 + mi * 100 + pa.min(99);
        let allowed = code >= 90_500 && !(91_300..91_500).contains(&code);
        match native_cuda_graph_rule(v) {
            Ok(()) => prop_assert!(allowed, "{v} allowed"),
            Err(Error::Unsupported { what, needs }) => {
                prop_assert!(!allowed, "{v} refused: {what}");
                prop_assert!(what.contains(&v.to_string()), "{what}");
                prop_assert!(needs.is_some());
            }
            Err(e) => return Err(TestCaseError::fail(format!("{v}: {e:?}"))),
        }
        Ok(())
    })
    .map_err(|e| format!("{e}"))?;
    Ok(())
}

fn plan_notes_are_the_engines() -> TestResult {
    use cudnn::graph::*;
    let mut g = Graph::new();
    let x = g.input("x", TensorSpec::nchw(DType::F32, &[1, 8, 16, 16])?)?;
    let w = g.input("w", TensorSpec::nchw(DType::F32, &[8, 8, 3, 3])?)?;
    let y = g.conv_fprop(x, w, &ConvParams::new_2d([1, 1], [1, 1], [1, 1]))?;
    g.output(y, DType::F32)?;
    let og = g.build()?;
    let target = Target::preset("h200")?;
    let (plan, _) = Plan::build(&og, &target, &Policy::default())?;
    let engine = plan.engine().ok_or("a built plan knows its engine")?;
    // The truth: cuDNN's heuristics, queried again, for that engine.
    let cands = heuristics::candidates(&og, &target, &Policy::default())?;
    let c = cands
        .iter()
        .find(|c| c.engine == engine)
        .ok_or("the chosen engine is among the candidates")?;
    let want = c
        .behavior_notes
        .contains(&BehaviorNote::SupportsCudaGraphNativeApi);
    ensure!(
        plan.supports_native_cuda_graph() == Some(want),
        "plan says {:?}, heuristics {want}",
        plan.supports_native_cuda_graph()
    );
    ensure!(plan.notes() == Some(&c.behavior_notes[..]), "notes differ");
    eprintln!(
        "  h200 conv fprop: engine {engine}, native CUDA graph note {want}; {} of {} candidates declare it",
        cands
            .iter()
            .filter(|c| c
                .behavior_notes
                .contains(&BehaviorNote::SupportsCudaGraphNativeApi))
            .count(),
        cands.len()
    );
    for c in cands.iter().filter(|c| {
        c.behavior_notes
            .contains(&BehaviorNote::SupportsCudaGraphNativeApi)
    }) {
        eprintln!(
            "  engine {} declares it; rejected: {:?}",
            c.engine, c.rejected
        );
    }
    // A policy that requires the note builds such an engine (cuDNN 9.5+).
    // (On cuDNN 9.28 for an H200 the one such engine uses TF32: allow it.)
    if cands.iter().any(|c| {
        c.behavior_notes
            .contains(&BehaviorNote::SupportsCudaGraphNativeApi)
    }) {
        let native = Policy::default()
            .with_require_native_cuda_graph(true)
            .with_allow_tf32(true);
        let (p, _) = Plan::build(&og, &target, &native)?;
        ensure!(
            p.supports_native_cuda_graph() == Some(true),
            "policy ignored"
        );
        eprintln!("  require_native_cuda_graph chose engine {:?}", p.engine());
        ensure!(
            native.signature() != Policy::default().signature(),
            "same cache key"
        );
        ensure!(
            Policy::default().signature().ends_with("rtc=true"),
            "the default key changed: {}",
            Policy::default().signature()
        );
    }
    // A plan loaded from JSON has no notes: unknown, not "unsupported".
    let reloaded = Plan::from_cudnn_json(
        &plan.cudnn_json()?,
        &target,
        std::sync::Arc::new(og.io().clone()),
    )?;
    ensure!(
        reloaded.supports_native_cuda_graph().is_none(),
        "a JSON plan claims to know its notes"
    );
    Ok(())
}

pub fn main() {
    run(vec![
        unit("capture::rule_matches_the_model", rule_matches_the_model),
        unit("capture::remedies_name_the_api", remedies_name_the_api),
        host(
            "capture::legacy_stream_is_refused_before_any_call",
            legacy_stream_is_refused_before_any_call,
        ),
        host(
            "capture::no_device_capture_is_typed",
            no_device_capture_is_typed,
        ),
        host("capture::null_graph_is_refused", null_graph_is_refused),
        host(
            "capture::random_capture_sequences",
            random_capture_sequences,
        ),
        unit(
            "native::version_rule_matches_the_model",
            native_version_rule_matches_the_model,
        ),
        host_planning(
            "native::plan_notes_are_the_engines",
            plan_notes_are_the_engines,
        ),
    ])
}
