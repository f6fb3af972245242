//! The capture's bookkeeping (no device): what is kept, when the capture
//! is poisoned, the refusals outside a CUDA device.

use proptest::prelude::*;

use super::*;

type L = Ledger<u32, &'static str>;

#[test]
fn a_completed_call_keeps_its_plan_and_tensors() {
    let mut l = L::default();
    l.admit("attention").unwrap();
    l.will_run("attention").unwrap();
    l.ran(7);
    l.keep(["q", "k", "v", "o"]);
    let k = l.finish().unwrap();
    assert_eq!(k.plans, [7]);
    assert_eq!(k.tensors, ["q", "k", "v", "o"]);
    assert_eq!(k.calls, 1);
}

#[test]
fn a_run_without_admission_is_refused_before_it_queues() {
    // An internal path that would not keep its tensors (no entry point
    // admitted it) is refused, typed, and nothing is poisoned.
    let mut l = L::default();
    let e = l.will_run("attention").unwrap_err();
    assert!(matches!(e, Error::CaptureUnsafe { .. }), "{e}");
    assert!(l.poisoned().is_none());
    assert_eq!(l.finish().unwrap().calls, 0);
}

#[test]
fn a_failed_call_after_queueing_poisons_the_capture() {
    let mut l = L::default();
    l.admit("attention").unwrap();
    l.will_run("attention").unwrap();
    l.abandon("bind failed");
    assert_eq!(l.poisoned(), Some("bind failed"));
    // Nothing more is admitted, and the end is an error.
    assert!(matches!(
        l.admit("attention").unwrap_err(),
        Error::CaptureUnsafe { .. }
    ));
    let e = l.finish().unwrap_err().to_string();
    assert!(e.contains("bind failed"), "{e}");
}

#[test]
fn a_refused_call_before_queueing_does_not_poison() {
    // e.g. an input that would be copied: refused after admission, before
    // `will_run`.
    let mut l = L::default();
    l.admit("attention").unwrap();
    l.abandon("q would be copied");
    assert!(l.poisoned().is_none());
    l.admit("attention").unwrap();
    l.will_run("attention").unwrap();
    l.ran(1);
    l.keep(["o"]);
    assert_eq!(l.finish().unwrap().calls, 1);
}

#[test]
fn nested_admission_and_double_runs_are_refused() {
    let mut l = L::default();
    l.admit("a").unwrap();
    assert!(matches!(
        l.admit("b").unwrap_err(),
        Error::CaptureUnsafe { .. }
    ));
    l.will_run("a").unwrap();
    assert!(matches!(
        l.will_run("a").unwrap_err(),
        Error::CaptureUnsafe { .. }
    ));
}

#[test]
fn a_call_in_progress_at_the_end_poisons_if_it_ran() {
    let mut l = L::default();
    l.admit("a").unwrap();
    l.will_run("a").unwrap();
    assert!(l.finish().is_err());
    let mut l = L::default();
    l.admit("a").unwrap();
    assert!(l.finish().is_ok());
}

#[test]
fn capture_needs_a_cuda_device_typed() {
    let e = capture(&candle_core::Device::Cpu, || Ok(())).unwrap_err();
    let candle_core::Error::Cuda(b) = &e else {
        panic!("not the crate's error: {e}");
    };
    let t = b.downcast_ref::<Error>().expect("a cudnn::Error");
    assert!(matches!(t, Error::InvalidArgument { .. }), "{t}");
    assert!(t.to_string().contains("device"), "{t}");
    assert!(!is_capturing());
}

#[test]
fn outside_a_capture_nothing_is_admitted_or_refused() {
    assert!(!is_capturing());
    assert!(admit("attention").unwrap().is_none());
    refuse_inside("conv2d", "x").unwrap();
    let t =
        candle_core::Tensor::zeros(4, candle_core::DType::F32, &candle_core::Device::Cpu).unwrap();
    no_copy(&None, "q", &t, &t.copy().unwrap()).unwrap();
}

#[test]
fn the_address_check_by_hand() {
    assert_eq!(run::checked_addr::<u16>("q", 0x1000, 8).unwrap(), 0x1000);
    assert!(run::checked_addr::<u16>("q", 0x1001, 8).is_err());
    assert!(run::checked_addr::<f32>("q", 0, 1).is_err());
    assert_eq!(run::checked_addr::<f32>("q", 0, 0).unwrap(), 0);
    assert!(run::checked_addr::<f32>("q", u64::MAX - 3, 2).is_err());
}

#[derive(Debug, Clone)]
enum Step {
    Admit,
    WillRun,
    Ran,
    Keep,
    Abandon,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        Just(Step::Admit),
        Just(Step::WillRun),
        Just(Step::Ran),
        Just(Step::Keep),
        Just(Step::Abandon),
    ]
}

proptest! {
    /// Against a model: the capture ends Ok exactly when no call that
    /// queued work ended unkept; then every plan that ran and every tensor
    /// kept is returned, and the call count is the number of kept calls
    /// that ran.
    #[test]
    fn ledger_matches_the_model(steps in proptest::collection::vec(step(), 0..40)) {
        let mut l = Ledger::<usize, usize>::default();
        let (mut pending, mut poisoned) = (None::<bool>, false);
        let (mut plans, mut kept, mut calls) = (Vec::new(), Vec::new(), 0usize);
        for (i, s) in steps.into_iter().enumerate() {
            match s {
                Step::Admit => {
                    let ok = l.admit("a").is_ok();
                    prop_assert_eq!(ok, !poisoned && pending.is_none());
                    if ok { pending = Some(false); }
                }
                Step::WillRun => {
                    let ok = l.will_run("a").is_ok();
                    prop_assert_eq!(ok, pending == Some(false));
                    if ok { pending = Some(true); }
                }
                Step::Ran => {
                    if pending == Some(true) { l.ran(i); plans.push(i); }
                }
                Step::Keep => {
                    if pending.is_some() {
                        l.keep([i]);
                        kept.push(i);
                        if pending == Some(true) { calls += 1; }
                        pending = None;
                    }
                }
                Step::Abandon => {
                    l.abandon("x");
                    if pending == Some(true) { poisoned = true; }
                    pending = None;
                }
            }
        }
        if pending == Some(true) { poisoned = true; }
        match l.finish() {
            Ok(k) => {
                prop_assert!(!poisoned);
                prop_assert_eq!(k.plans, plans);
                prop_assert_eq!(k.tensors, kept);
                prop_assert_eq!(k.calls, calls);
            }
            Err(e) => {
                prop_assert!(poisoned, "{}", e);
            }
        }
    }
}

#[test]
fn kvcache_in_capture_needs_an_open_capture_typed() {
    let t = candle_core::Tensor::zeros(
        (1, 1, 2, 8),
        candle_core::DType::BF16,
        &candle_core::Device::Cpu,
    )
    .unwrap();
    let e = flash_attn_kvcache(&t, &t, &t, &[1], &crate::AttnParams::new(1.0)).unwrap_err();
    let candle_core::Error::Cuda(b) = &e else {
        panic!("not the crate's error: {e}");
    };
    let t = b.downcast_ref::<Error>().expect("a cudnn::Error");
    assert!(matches!(t, Error::InvalidArgument { .. }), "{t}");
    assert!(
        t.to_string().contains("inside cudnn_candle::capture"),
        "{t}"
    );
}

#[test]
fn kvcache_lens_by_hand() {
    use crate::params::kvcache_lens;
    // Three sequences, one query each, capacity 8, causal.
    let (q, kv) = kvcache_lens(3, 1, 8, true, &[1, 8, 5]).unwrap();
    assert_eq!(q, [1, 1, 1]);
    assert_eq!(kv, [1, 8, 5]);
    let e = kvcache_lens(3, 1, 8, true, &[1, 9, 5])
        .unwrap_err()
        .to_string();
    assert!(e.contains("cache_seqlens[1]"), "{e}");
    let e = kvcache_lens(3, 2, 8, true, &[2, 1, 5])
        .unwrap_err()
        .to_string();
    assert!(e.contains("cache_seqlens[1]"), "{e}");
    // Not causal: a sequence shorter than the queries is fine.
    assert!(kvcache_lens(3, 2, 8, false, &[2, 1, 0]).is_ok());
    assert!(matches!(
        kvcache_lens(3, 1, 8, true, &[1, 1]).unwrap_err(),
        Error::Mismatch { .. }
    ));
    assert!(kvcache_lens(1, 1, usize::MAX, false, &[u32::MAX]).is_err());
}

proptest! {
    /// `kvcache_lens` accepts exactly the lengths the graph may read: one
    /// per sequence, each in `0..=capacity` (and i32), causal ones at
    /// least the query count; and returns them unchanged.
    #[test]
    fn kvcache_lens_accepts_exactly_the_readable(
        batch in 0usize..6,
        seq_q in 0usize..5,
        cap in 0usize..40,
        causal: bool,
        lens in proptest::collection::vec(0u32..48, 0..7),
    ) {
        let r = crate::params::kvcache_lens(batch, seq_q, cap, causal, &lens);
        let ok = lens.len() == batch
            && lens.iter().all(|&l| l as usize <= cap && (!causal || l as usize >= seq_q));
        prop_assert_eq!(r.is_ok(), ok, "{:?}", r);
        if let Ok((q, kv)) = r {
            prop_assert!(q.iter().all(|&x| x as usize == seq_q));
            prop_assert_eq!(kv.iter().map(|&x| x as u32).collect::<Vec<_>>(), lens);
        }
    }
}

#[test]
fn paged_in_capture_needs_an_open_capture_typed() {
    let t = candle_core::Tensor::zeros(
        (1, 1, 2, 8),
        candle_core::DType::BF16,
        &candle_core::Device::Cpu,
    )
    .unwrap();
    let e = flash_attn_paged(&t, &t, &t, &[0], 1, &[1], &crate::AttnParams::new(1.0)).unwrap_err();
    let candle_core::Error::Cuda(b) = &e else {
        panic!("not the crate's error: {e}");
    };
    let t = b.downcast_ref::<Error>().expect("a cudnn::Error");
    assert!(matches!(t, Error::InvalidArgument { .. }), "{t}");
    assert!(
        t.to_string().contains("inside cudnn_candle::capture"),
        "{t}"
    );
}

#[test]
fn paged_update_is_checked_as_the_eager_call() {
    use crate::params::{self, Arg};
    // q (2, 1, 4, 8), caches (6 blocks, 4 per block, 2 kv heads, 8).
    let (qd, kd) = ([2usize, 1, 4, 8], [6usize, 4, 2, 8]);
    let (qs, ks) = ([32usize, 32, 8, 1], [64usize, 16, 8, 1]);
    let q = Arg {
        name: "q",
        dims: &qd,
        strides: &qs,
        dtype: candle_core::DType::BF16,
    };
    let k = Arg {
        name: "k_cache",
        dims: &kd,
        strides: &ks,
        dtype: candle_core::DType::BF16,
    };
    let v = Arg {
        name: "v_cache",
        ..k
    };
    let p = crate::AttnParams::new(1.0).causal(true);
    let table = [0i64, 1, 2, 3, 4, 5];
    let first = params::paged(&q, &k, &v, (&[2, 3], &table), &[5, 12], &p).unwrap();
    let check = PagedCheck::new([&q, &k, &v], &[2, 3], &p, &first.cfg);
    let (t, kv) = check.check(&[5, 4, 3, 2, 1, 0], &[1, 12]).unwrap();
    assert_eq!(t, [5, 4, 3, 2, 1, 0]);
    assert_eq!(kv, [1, 12]);
    // Every entry in 0..6, those past the length included.
    let e = check
        .check(&[0, 1, 2, 3, 4, 6], &[1, 1])
        .unwrap_err()
        .to_string();
    assert!(e.contains("block_table[1][2]"), "{e}");
    let e = check
        .check(&[0, 1, 2, 3, 4, -1], &[1, 1])
        .unwrap_err()
        .to_string();
    assert!(e.contains("block_table[1][2]"), "{e}");
    // At most 3 blocks x 4 keys per sequence; causal: at least 1.
    let e = check
        .check(&table.map(|x| x as i32), &[13, 1])
        .unwrap_err()
        .to_string();
    assert!(e.contains("cache_seqlens[0]"), "{e}");
    assert!(check.check(&table.map(|x| x as i32), &[0, 1]).is_err());
    // Another shape of table.
    assert!(check.check(&[0, 1, 2], &[1, 1]).is_err());
    assert!(check.check(&table.map(|x| x as i32), &[1]).is_err());
}

#[test]
fn a_capturing_candle_stream_is_refused_typed() {
    // Review finding 1: every status but `None` (cudarc's capture, active
    // or invalidated) refuses, typed `CaptureUnsafe`, naming the call.
    use cudnn::runtime::CaptureStatus;
    idle_status(CaptureStatus::None, "attention").unwrap();
    for st in [CaptureStatus::Active, CaptureStatus::Invalidated] {
        let e = idle_status(st, "capture").unwrap_err();
        assert!(matches!(e, Error::CaptureUnsafe { .. }), "{e}");
        let s = e.to_string();
        assert!(s.contains("cudnn-candle capture inside"), "{s}");
        assert!(s.contains("candle's stream is being captured"), "{s}");
    }
}

#[test]
fn teardown_waits_for_every_launch() {
    // Review finding 4, the bookkeeping: never launched, nothing to wait
    // for; launched with the event recorded after, the event; a launch
    // whose event record failed, the whole device.
    assert_eq!(Launches::None.wait(), Wait::Nothing);
    assert_eq!(Launches::Recorded.wait(), Wait::Event);
    assert_eq!(Launches::Unrecorded.wait(), Wait::Device);
}

#[test]
fn a_step_can_move_to_another_thread() {
    // Its `Drop` waits for its launches wherever they ran (finding 4):
    // being `Send` is what makes that wait necessary.
    fn send<T: Send>() {}
    send::<CapturedStep>();
}

#[test]
fn prepared_slopes_and_sinks_that_are_copies_are_refused() {
    // Review finding 3: inside a capture (an admitted call, modelled here
    // without a device), slopes and sinks the preparation copies (bf16 /
    // f16 sinks widened to f32 by candle's `to_dtype`, a strided view made
    // contiguous) are refused, typed, naming them; the caller's own f32
    // contiguous tensors pass (a replay reads them, in-place updates
    // included). Outside a capture nothing is refused.
    use candle_core::{DType, Device, Tensor};
    let inside = Some(Admit {
        _not_send: std::marker::PhantomData,
        done: true,
    });
    let cpu = Device::Cpu;
    let f32s = Tensor::new(&[0.5f32, 0.25, 0.125, 0.0625], &cpu).unwrap();
    let own = crate::AttnParams::new(1.0)
        .alibi_slopes(Some(f32s.clone()))
        .sinks(Some(f32s.clone()));
    let ready = crate::side::ready_params(&own).unwrap();
    no_side_copy(&inside, &own, &ready).unwrap();
    let bf = crate::AttnParams::new(1.0).sinks(Some(f32s.to_dtype(DType::BF16).unwrap()));
    let ready = crate::side::ready_params(&bf).unwrap();
    let e = no_side_copy(&inside, &bf, &ready).unwrap_err().to_string();
    assert!(e.contains("sinks would be copied first (BF16"), "{e}");
    no_side_copy(&None, &bf, &ready).unwrap();
    let strided = Tensor::new(&[[0.5f32, 0.0], [0.25, 0.0]], &cpu)
        .unwrap()
        .narrow(1, 0, 1)
        .unwrap()
        .squeeze(1)
        .unwrap();
    assert!(!strided.is_contiguous());
    let sv = crate::AttnParams::new(1.0).alibi_slopes(Some(strided));
    let ready = crate::side::ready_params(&sv).unwrap();
    let e = no_side_copy(&inside, &sv, &ready).unwrap_err().to_string();
    assert!(e.contains("alibi_slopes would be copied first"), "{e}");
}

#[test]
fn a_slot_of_another_step_is_refused_typed() {
    // Review finding 5: a slot names its capture; one of another step with
    // the same index is refused, typed, naming `slot` (before: it updated
    // this step's call of that index).
    let s = |step, index| LensSlot { step, index };
    assert_eq!(slot_index(7, 2, s(7, 1), "KV-cache").unwrap(), 1);
    for bad in [s(8, 1), s(7, 2), s(6, 0)] {
        let e = slot_index(7, 2, bad, "KV-cache").unwrap_err();
        match &e {
            Error::InvalidArgument { arg, .. } => assert_eq!(arg, "slot"),
            other => panic!("not typed: {other}"),
        }
    }
}

/// The typed error inside a candle error, if any.
fn typed_in(e: &candle_core::Error) -> Option<&Error> {
    match e {
        candle_core::Error::Cuda(b) => b.downcast_ref::<Error>(),
        candle_core::Error::WithBacktrace { inner, .. } => typed_in(inner),
        _ => None,
    }
}

/// `capture_step` on a device that is not CUDA: refused, typed, naming
/// `device`, before the step runs and before any capture opens (the
/// documented argument check; no device needed).
#[test]
fn capture_step_refuses_a_non_cuda_device_before_the_step_runs() {
    let mut ran = false;
    // SAFETY: refused before any capture begins (what the test checks).
    let r = unsafe {
        capture_step(&candle_core::Device::Cpu, || {
            ran = true;
            Ok(())
        })
    };
    let e = r.expect_err("a CPU device");
    match typed_in(&e) {
        Some(Error::InvalidArgument { arg, .. }) => assert_eq!(arg, "device"),
        other => panic!("not typed: {other:?} ({e})"),
    }
    assert!(!ran, "the step did not run");
    assert!(!is_capturing());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The slot check of `CapturedCandleStep::set_cache_seqlens` and
    /// `update_block_table`, over any step number, call count and slot: a
    /// slot is accepted exactly when it names this step and one of its
    /// calls (the rule written by hand), and then gives its index;
    /// otherwise the refusal is typed, naming `slot`.
    #[test]
    fn captured_step_slot_check_property(
        id in 0u64..6,
        n in 0usize..5,
        step in 0u64..6,
        index in 0usize..7,
    ) {
        let r = slot_index(id, n, LensSlot { step, index }, "KV-cache");
        if step == id && index < n {
            prop_assert_eq!(r.ok(), Some(index));
        } else {
            prop_assert!(
                matches!(&r, Err(Error::InvalidArgument { arg, .. }) if arg == "slot"),
                "{:?}",
                r
            );
        }
    }
}
