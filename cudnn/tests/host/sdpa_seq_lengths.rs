//! Host tier for the sequence lengths of an attention's padding mask: the
//! GPU uses them as row bounds unchecked, so a plan records them with the
//! sequence extent each bounds, the safe `input` refuses them, and they
//! bind through `Bindings::seq_lengths` (a `SeqLengths` whose largest value
//! is within the extent) or the `unsafe` `input_seq_lengths`. Directed
//! cases over the SDPA operation and the composite, forward and backward,
//! built and reloaded from cuDNN's plan JSON (with renamed tensors); and a
//! property case over random values, counts and extents.
//!
//! No device: the `SeqLengths` bound here wrap a fake device address
//! (`from_device_unchecked`) that nothing dereferences (no plan runs) and
//! that is never freed (`mem::forget`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use crate::support;
use crate::support::sdpa_plans::fwd_any;
use std::sync::Arc;

use cudnn::Error;
use cudnn::graph::*;
use cudnn::runtime::{DeviceBuffer, DeviceSlice};
use proptest::prelude::*;
use support::*;

const BATCH: i64 = 2;
const SQ: i64 = 128;
const SKV: i64 = 256;

/// A `SeqLengths` of `n` entries claiming `max`, at a fake aligned address.
fn fake(n: usize, max: i32) -> Result<SeqLengths, Error> {
    // SAFETY: the address is never dereferenced (no plan runs in this
    // file) and never freed (every fake is forgotten).
    unsafe {
        let buf = DeviceBuffer::<i32>::from_raw(0x7f00_0000_0000usize as *mut i32, n);
        SeqLengths::from_device_unchecked(buf, max)
    }
}

fn empty() -> DeviceSlice<'static, i32> {
    // SAFETY: a zero-length view over a null pointer is never dereferenced.
    unsafe { DeviceSlice::<i32>::from_raw_parts(std::ptr::null(), 0) }
}

fn cfg(imp: SdpaImpl) -> SdpaConfig {
    SdpaConfig::new(BATCH, 4, SQ, 64, DType::BF16)
        .kv_len(SKV)
        .padding(true)
        .implementation(imp)
}

/// A padded attention graph whose length tensors are renamed `lq` / `lkv`.
fn graph(c: &SdpaConfig, backward: bool) -> Result<Graph, Error> {
    let mut g = Graph::new();
    let q = g.input("q", c.q_spec()?)?;
    let k = g.input("k", c.k_spec()?)?;
    let v = g.input("v", c.v_spec()?)?;
    let (lq, lkv) = if backward {
        let o = g.input("o", c.o_spec()?)?;
        let d_o = g.input("do", c.o_spec()?)?;
        let st = g.input("stats", c.stats_spec()?)?;
        let b = g.sdpa_backward(q, k, v, o, d_o, st, c)?;
        (b.seq_len_q, b.seq_len_kv)
    } else {
        let f = fwd_any(&mut g, q, k, v, c)?;
        (f.seq_len_q, f.seq_len_kv)
    };
    g.rename(
        lq.ok_or(Error::invalid("graph", "has lengths", "none"))?,
        "lq",
    )?;
    g.rename(
        lkv.ok_or(Error::invalid("graph", "has lengths", "none"))?,
        "lkv",
    )?;
    Ok(g)
}

/// A plan and the names of its length tensors (q, kv).
type Named = (Plan, [&'static str; 2]);

/// The built plan, and the same plan loaded from its cuDNN JSON with the
/// tensor list, the length tensors renamed there (`xq`, `xkv`).
fn plans(og: &OpGraph, t: &Target) -> Result<Vec<Named>, Box<dyn std::error::Error>> {
    let policy = Policy::default().with_max_attempts(1);
    let (plan, _) = Plan::build(og, t, &policy)?;
    let mut out = Vec::new();
    match plan.cudnn_json() {
        Ok(json) => {
            let mut io = plan.io().clone();
            for x in &mut io.tensors {
                x.name = match x.name.as_str() {
                    "lq" => "xq".to_string(),
                    "lkv" => "xkv".to_string(),
                    n => n.to_string(),
                };
            }
            let io = Arc::new(io);
            // This program wrote the JSON: its compiled code is trusted.
            let loaded = if plan.is_runtime_compiled() {
                // SAFETY: `json` is cuDNN's JSON, unchanged, of the plan built just above with
                // the loaded cuDNN; `io` is that plan's IoSignature with only tensor names
                // changed (names are not part of what the contract protects).
                unsafe { Plan::from_cudnn_json_unverified(&json, t, io) }
            } else {
                Plan::from_cudnn_json(&json, t, io)
            };
            match loaded {
                Ok(p) => out.push((p, ["xq", "xkv"])),
                // Refused by the plan JSON check (typed): nothing to bind.
                Err(e) => eprintln!("  the JSON is not reloaded here: {e}"),
            }
        }
        Err(e) => eprintln!("  no JSON here ({e})"),
    }
    out.insert(0, (plan, ["lq", "lkv"]));
    Ok(out)
}

/// Every rule on one plan: `input` refuses a length tensor naming
/// `seq_lengths`; `seq_lengths` accepts lengths up to the extent and
/// refuses one above it, a wrong count and a tensor that is not a length;
/// `input_seq_lengths` takes lengths only.
fn check_plan(plan: &Plan, names: [&str; 2], what: &str) -> TestResult {
    // The plan lists exactly its two length tensors, each with the extent
    // of the sequence it bounds (S_q for the queries', S_kv for the keys').
    let mut listed = plan.guarded_inputs();
    listed.sort_by_key(|&(n, _)| n != names[0]);
    ensure!(
        listed
            == [
                (names[0], InputGuard::SeqLengths { extent: SQ }),
                (names[1], InputGuard::SeqLengths { extent: SKV }),
            ],
        "{what}: guarded inputs {listed:?}, want {names:?} with extents {SQ} / {SKV}"
    );
    for (name, extent) in names.into_iter().zip([SQ, SKV]) {
        let mut b = plan.bindings();
        let e = b
            .input(name, empty())
            .err()
            .ok_or(format!("{what}: `{name}` bound with the safe `input`"))?;
        ensure!(
            matches!(e, Error::Unsupported { .. }) && e.to_string().contains("seq_lengths"),
            "{what}: {e}"
        );
        let mx = i32::try_from(extent)?;
        let over = fake(BATCH as usize, mx + 1)?;
        let e = b.seq_lengths(name, &over).err().ok_or(format!(
            "{what}: `{name}` took a length of {} > {extent}",
            mx + 1
        ))?;
        ensure!(
            e.to_string().contains(&format!("at most {extent}")),
            "{what}: {e}"
        );
        let three = fake(3, 1)?;
        let e = b
            .seq_lengths(name, &three)
            .err()
            .ok_or(format!("{what}: `{name}` took 3 lengths for a batch of 2"))?;
        ensure!(matches!(e, Error::Mismatch { .. }), "{what}: {e}");
        let e = b
            .seq_lengths("q", &three)
            .err()
            .ok_or(format!("{what}: q bound as lengths"))?;
        ensure!(
            e.to_string().contains("must be sequence lengths"),
            "{what}: {e}"
        );
        // SAFETY: refused before any use (too short; not lengths).
        let e = unsafe { b.input_seq_lengths(name, empty()) }
            .err()
            .ok_or("empty lengths accepted")?;
        ensure!(e.to_string().contains("bytes"), "{what}: {e}");
        // SAFETY: refused before any use (not lengths).
        let e = unsafe { b.input_seq_lengths("q", empty()) }
            .err()
            .ok_or("q bound as lengths")?;
        ensure!(
            e.to_string().contains("must be sequence lengths"),
            "{what}: {e}"
        );
        let ok = fake(BATCH as usize, mx)?;
        b.seq_lengths(name, &ok)
            .map_err(|e| format!("{what}: `{name}` at the extent {extent}: {e}"))?;
        drop(b);
        std::mem::forget(over);
        std::mem::forget(three);
        std::mem::forget(ok);
    }
    Ok(())
}

fn lengths_need_checked_binding() -> TestResult {
    let t = Target::preset("h200")?;
    let mut built = 0;
    let mut reloaded = 0usize;
    for imp in [SdpaImpl::Native, SdpaImpl::Composite] {
        for backward in [false, true] {
            let c = cfg(imp);
            let what = format!("{imp:?} backward={backward}");
            if let Err(e) = c.resolve(backward) {
                eprintln!("  {what}: refused here (typed): {e}");
                continue;
            }
            let og = match graph(&c, backward).and_then(|g| g.build()) {
                Ok(og) => og,
                Err(e) => {
                    eprintln!("  {what}: not built here (typed): {e}");
                    continue;
                }
            };
            let ps = match plans(&og, &t) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("  {what}: no plan here: {e}");
                    continue;
                }
            };
            for (i, (p, names)) in ps.iter().enumerate() {
                check_plan(p, *names, &format!("{what} plan {i}"))?;
            }
            eprintln!("  {what}: {} plan(s) checked", ps.len());
            built += 1;
            reloaded += usize::from(ps.len() >= 2);
        }
    }
    // The composite forward plans on every cuDNN this crate loads (9.5+).
    ensure!(built >= 1, "no padded attention planned");
    // A plan loaded from JSON finds its lengths in the JSON alone: at least
    // one must have been checked (the composite forward reloads), else the
    // loader's identification went untested; on cuDNN 9.28 all four
    // (the native backward too).
    ensure!(reloaded >= 1, "no padded attention reloaded from its JSON");
    let v = cudnn::sys::cudnn::load()?.info().version;
    if v.is_some_and(|v| (v.major, v.minor) >= (9, 28)) {
        ensure!(reloaded == 4, "{reloaded} of 4 padded attentions reloaded");
    }
    Ok(())
}

/// `SeqLengths::check` over random values, counts and extents: no panic,
/// `Ok` exactly when the count and every value are right, else a typed
/// error; and a random name, count and largest length through
/// `seq_lengths` on a real plan: bound exactly when a length tensor's, of
/// the batch's count and within the extent (`input_seq_lengths` of an empty
/// buffer: always a typed refusal).
fn property_seq_lengths() -> TestResult {
    let mut runner = crate::support::prop_runner(512);
    runner
        .run(
            &(
                prop::collection::vec(-3i32..300, 0..6),
                0usize..6,
                prop_oneof![-2i64..300, Just(i64::MIN), Just(i64::MAX)],
            ),
            |(values, batch, extent)| {
                let want = values.len() == batch
                    && extent >= 0
                    && values.iter().all(|&v| v >= 0 && i64::from(v) <= extent);
                match SeqLengths::check(&values, batch, extent) {
                    Ok(max) => {
                        prop_assert!(want, "{values:?} accepted for {batch} / {extent}");
                        prop_assert_eq!(max, values.iter().copied().max().unwrap_or(0));
                    }
                    Err(Error::InvalidArgument { .. } | Error::Mismatch { .. }) => {
                        prop_assert!(!want, "{values:?} refused for {batch} / {extent}")
                    }
                    Err(e) => prop_assert!(false, "untyped {e:?}"),
                }
                Ok(())
            },
        )
        .map_err(|e| format!("{e}"))?;

    let c = cfg(SdpaImpl::Composite);
    if let Err(e) = c.resolve(false) {
        eprintln!("  composite: refused here (typed): {e}");
        return Ok(());
    }
    let og = graph(&c, false)?.build()?;
    let (plan, _) = Plan::build(
        &og,
        &Target::preset("h200")?,
        &Policy::default().with_max_attempts(1),
    )?;
    let mut runner = crate::support::prop_runner(256);
    runner
        .run(
            &(
                prop_oneof![
                    Just("lq".to_string()),
                    Just("lkv".to_string()),
                    Just("q".to_string()),
                    ".{0,8}"
                ],
                -1i32..400,
                0usize..4,
            ),
            |(name, max, n)| {
                let extent = match name.as_str() {
                    "lq" => Some(SQ),
                    "lkv" => Some(SKV),
                    _ => None,
                };
                let l = match fake(n, max) {
                    Ok(l) => l,
                    Err(Error::InvalidArgument { .. }) => {
                        prop_assert!(max < 0);
                        return Ok(());
                    }
                    Err(e) => return Err(TestCaseError::fail(format!("untyped {e:?}"))),
                };
                let mut b = plan.bindings();
                // SAFETY: refused before any use (empty, or not lengths).
                let raw = unsafe { b.input_seq_lengths(&name, empty()) }.map(|_| ());
                prop_assert!(
                    matches!(
                        raw,
                        Err(Error::InvalidArgument { .. } | Error::Mismatch { .. })
                    ),
                    "`{name}`: input_seq_lengths of nothing gave {raw:?}"
                );
                let r = b.seq_lengths(&name, &l).map(|_| ());
                let want = extent.is_some_and(|e| i64::from(max) <= e) && n == BATCH as usize;
                drop(b);
                std::mem::forget(l);
                match r {
                    Ok(()) => prop_assert!(want, "`{name}` took {n} lengths up to {max}"),
                    Err(Error::InvalidArgument { .. } | Error::Mismatch { .. }) => {
                        prop_assert!(!want, "`{name}` refused {n} lengths up to {max}")
                    }
                    Err(e) => prop_assert!(false, "untyped {e:?}"),
                }
                Ok(())
            },
        )
        .map_err(|e| format!("{e}").into())
}

/// A hostile JSON of a native attention whose key lengths are declared
/// `[1, 1, 1, 1]` for a batch of 2 (tensor list agreeing): cuDNN reads one
/// length per sequence, so the second would come from past the bound
/// buffer. Refused, typed, before cuDNN sees it.
fn lengths_cover_the_batch() -> TestResult {
    let t = Target::preset("h200")?;
    let c = cfg(SdpaImpl::Native);
    if let Err(e) = c.resolve(false) {
        eprintln!("  native forward refused here (typed): {e}");
        return Ok(());
    }
    let og = graph(&c, false)?.build()?;
    let policy = Policy::default().with_max_attempts(1);
    let (plan, _) = Plan::build(&og, &t, &policy)?;
    let json = plan.cudnn_json()?;
    let uid = plan
        .io()
        .tensors
        .iter()
        .find(|x| x.name == "lkv")
        .ok_or("no lkv tensor")?
        .uid;
    let trusted = |j: &str, io: cudnn::graph::IoSignature| {
        if plan.is_runtime_compiled() {
            // SAFETY: called with the plan's own unchanged JSON and IoSignature, and once
            // outside the contract on purpose with the length tensor shrunk in both, an
            // edit the crate's checks must refuse before cuDNN sees it (asserted below);
            // no plan is executed.
            unsafe { Plan::from_cudnn_json_unverified(j, &t, Arc::new(io)) }
        } else {
            Plan::from_cudnn_json(j, &t, Arc::new(io))
        }
    };
    // The unmodified JSON loads (else the refusal below proves nothing).
    trusted(&json, plan.io().clone())?;
    let mut v: serde_json::Value = serde_json::from_str(&json)?;
    support::sdpa_plans::shrink_tensor(&mut v, &uid.to_string());
    let short = serde_json::to_string(&v)?;
    ensure!(short != json, "the length tensor was found in the JSON");
    let mut io = plan.io().clone();
    for x in io.tensors.iter_mut().filter(|x| x.uid == uid) {
        x.spec = TensorSpec::row_major(DType::I32, &[1, 1, 1, 1])?;
    }
    match trusted(&short, io) {
        // The crate's own refusal (cuDNN 9.28 also refuses this form at
        // finalize, BAD_PARAM: the check is defence in depth, and must come
        // first, before cuDNN is asked).
        Err(e) if e.to_string().contains("seqLenKV") && e.to_string().contains("batch dim") => {
            eprintln!("  refused: {e}");
            Ok(())
        }
        other => Err(format!("lengths shorter than the batch: {:?}", other.err()).into()),
    }
}

pub fn main() {
    run(vec![
        host("sdpa_seq_lengths_cover_the_batch", lengths_cover_the_batch),
        host_planning(
            "sdpa_seq_lengths_need_checked_binding",
            lengths_need_checked_binding,
        ),
        host_planning("sdpa_seq_lengths_random", property_seq_lengths),
    ])
}
