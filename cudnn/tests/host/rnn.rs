//! Host tier (the real cuDNN, no GPU) for issue 26's RNN descriptors:
//! round trips of [`RnnDescriptor`] and [`RnnDataDescriptor`] through
//! cuDNN's get functions, and the agreement property tests: for random
//! configurations and batches, valid and invalid, the Rust check accepts
//! exactly when cuDNN's set function does (except the listed stricter
//! rule), refuses with a typed error naming the argument, and never panics.
//!
//! Run against cuDNN 9 (default) and 8.9:
//! `CUDNN_RS_SEARCH_PATH=$PWD/.cuda-libs/cuda12 cargo test -p cudnn-rs --features dnn,blas,reference --test host rnn::`.
//!
//! The sizes a plan needs (`cudnnGetRNNWeightSpaceSize`,
//! `cudnnGetRNNTempSpaceSizes`, `cudnnGetRNNWeightParams`) take a cuDNN
//! handle, which needs a device: they are checked in `gpu/rnn.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Instant;

use cudnn::dnn::*;
use cudnn::{DataType, Error};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::cell::Cell;
use support::*;

fn cudnn_version() -> String {
    Handle::library_version().map_or_else(|e| e.to_string(), |v| v.to_string())
}

fn cudnn_major() -> u32 {
    Handle::library_version().map(|v| v.major).unwrap_or(0)
}

fn round_trip() -> TestResult {
    let mut configs = Vec::new();
    for cell in RnnCellMode::ALL {
        let mut c = RnnConfig::new(cell, 5, 8);
        c.num_layers = 3;
        c.direction = RnnDirection::Bidirectional;
        c.bias = RnnBiasMode::SingleRecurrent;
        if cell == RnnCellMode::Lstm {
            c.projection_size = 3;
        }
        configs.push(c);
        let mut c = RnnConfig::new(cell, 8, 8);
        c.input_mode = RnnInputMode::Skip;
        c.bias = RnnBiasMode::Double;
        c.algo = RnnAlgo::PersistStatic;
        c.math = MathType::TensorOp;
        configs.push(c);
    }
    for c in &configs {
        let d = RnnDescriptor::<f32>::new(c, None).map_err(|e| format!("{c:?}: {e}"))?;
        let got = d.values()?;
        ensure!(
            got == d.expected_values(),
            "{c:?}: cuDNN stored {got:?}, set {:?}",
            d.expected_values()
        );
        // The escape hatch reads the same configuration back.
        let raw = d.into_raw();
        // SAFETY: made by cudnnCreateRNNDescriptor above, ownership moved here.
        let back = unsafe { RnnDescriptor::<f32>::from_raw(raw) }?;
        ensure!(back.config() == c, "from_raw {:?} != {c:?}", back.config());
        back.destroy()?;
    }
    let mut c = RnnConfig::new(RnnCellMode::Gru, 3, 4);
    c.precision = RnnPrecision::F64;
    let d = RnnDescriptor::<f64>::new(&c, None)?;
    ensure!(d.values()? == d.expected_values(), "f64 round trip");
    c.precision = RnnPrecision::F16;
    let d = RnnDescriptor::<half::f16>::new(&c, None)?;
    ensure!(d.values()? == d.expected_values(), "f16/f16 round trip");
    c.precision = RnnPrecision::F32;
    let bf = RnnDescriptor::<half::bf16>::new(&c, None);
    let v = Handle::library_version()?;
    match ((v.major, v.minor) >= (9, 19), bf) {
        (_, Ok(d)) => ensure!(d.values()? == d.expected_values(), "bf16 round trip"),
        // cuDNN 8.x and early 9 releases (9.10) have no bf16 RNNs; 9.19 does.
        (false, Err(Error::Unsupported { .. })) => {}
        (_, r) => return Err(format!("bf16 on cuDNN {v}: {r:?}").into()),
    }
    for layout in RnnDataLayout::ALL {
        let lengths = [4, 4, 2, 1];
        let d = RnnDataDescriptor::<f32>::new(layout, 4, 3, &lengths)?;
        let (dt, l, t, b, v, lens) = d.values()?;
        ensure!(
            (dt, l, t, b, v) == (f32::CUDNN.0, layout.to_raw().0, 4, 4, 3),
            "{layout:?}: read back {dt} {l} {t} {b} {v}"
        );
        ensure!(lens == [4, 4, 2, 1], "{layout:?} lengths {lens:?}");
        let want = if layout == RnnDataLayout::SeqMajorPacked {
            11 * 3
        } else {
            48
        };
        ensure!(
            d.len_required() == want,
            "{layout:?} len {}",
            d.len_required()
        );
        let raw = d.into_raw();
        // SAFETY: made by cudnnCreateRNNDataDescriptor above, ownership moved here.
        let back = unsafe { RnnDataDescriptor::<f32>::from_raw(raw, 4) }?;
        ensure!(
            back.lengths() == lengths && back.layout() == layout,
            "from_raw {back:?}"
        );
        back.destroy()?;
    }
    Ok(())
}

/// Random RNN configurations, valid and not.
#[derive(Debug, Clone)]
struct Case {
    cell: RnnCellMode,
    sizes: [usize; 4], // input, hidden, projection, layers
    dir: RnnDirection,
    bias: RnnBiasMode,
    input: RnnInputMode,
    algo: RnnAlgo,
    dtype: u8,
    precision: RnnPrecision,
    math: MathType,
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        24 => 1usize..40,
        1 => Just(0usize),
        1 => Just(i32::MAX as usize),
        1 => Just(i32::MAX as usize + 1),
        1 => Just(usize::MAX),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        0usize..4,
        [size(), size(), size(), size()],
        any::<bool>(),
        0usize..4,
        any::<bool>(),
        prop_oneof![3 => Just(0usize), 1 => 0usize..3],
        0u8..5,
        prop_oneof![1 => 0usize..3, 2 => Just(3usize)],
        0usize..4,
        any::<bool>(),
    )
        .prop_map(
            |(cell, mut sizes, bi, bias, skip, algo, dtype, p, math, same)| {
                // p == 3: the precision that matches the element type.
                let p = if p == 3 {
                    [1, 2, 1, 1, 1][dtype as usize]
                } else {
                    p
                };
                // Half the time the projection equals the hidden size.
                if same {
                    sizes[2] = sizes[1];
                }
                Case {
                    cell: RnnCellMode::ALL[cell],
                    sizes,
                    dir: if bi {
                        RnnDirection::Bidirectional
                    } else {
                        RnnDirection::Unidirectional
                    },
                    bias: RnnBiasMode::ALL[bias],
                    input: if skip {
                        RnnInputMode::Skip
                    } else {
                        RnnInputMode::Linear
                    },
                    algo: RnnAlgo::ALL[algo],
                    dtype,
                    precision: [RnnPrecision::F16, RnnPrecision::F32, RnnPrecision::F64][p],
                    math: [
                        MathType::Default,
                        MathType::TensorOp,
                        MathType::TensorOpAllowConversion,
                        MathType::Fma,
                    ][math],
                }
            },
        )
}

fn ours<T: DataType>(c: &RnnConfig) -> Result<(), Error> {
    RnnDescriptor::<T>::new(c, None).map(|_| ())
}

fn rnn_agreement() -> TestResult {
    let mut runner = TestRunner::new_with_rng(
        Config {
            failure_persistence: None,
            ..Config::with_cases(20_000)
        },
        proptest::test_runner::TestRng::from_seed(
            proptest::test_runner::RngAlgorithm::ChaCha,
            &[26; 32],
        ),
    );
    let start = Instant::now();
    let (accepted, refused) = (Cell::new(0usize), Cell::new(0usize));
    runner
        .run(&case(), |k| {
            let c = RnnConfig {
                cell: k.cell,
                input_size: k.sizes[0],
                hidden_size: k.sizes[1],
                projection_size: k.sizes[2],
                num_layers: k.sizes[3],
                direction: k.dir,
                bias: k.bias,
                input_mode: k.input,
                algo: k.algo,
                precision: k.precision,
                math: k.math,
            };
            let (dt, r) = match catch_unwind(AssertUnwindSafe(|| match k.dtype {
                0 => (f32::CUDNN, ours::<f32>(&c)),
                1 => (f64::CUDNN, ours::<f64>(&c)),
                2 => (half::f16::CUDNN, ours::<half::f16>(&c)),
                3 => (half::bf16::CUDNN, ours::<half::bf16>(&c)),
                _ => (i8::CUDNN, ours::<i8>(&c)),
            })) {
                Ok(v) => v,
                Err(_) => return Err(TestCaseError::fail(format!("panic on {k:?}"))),
            };
            let fits = k.sizes.iter().all(|&s| s <= i32::MAX as usize);
            let theirs = fits
                && cudnn_accepts_rnn_raw(
                    k.algo,
                    k.cell,
                    k.bias,
                    k.dir,
                    k.input,
                    dt,
                    k.precision,
                    k.math,
                    k.sizes.map(|s| s as i32),
                )
                .is_ok();
            match &r {
                Ok(()) => accepted.set(accepted.get() + 1),
                Err(Error::InvalidArgument { .. }) => refused.set(refused.get() + 1),
                Err(Error::Unsupported { .. }) if k.dtype == 3 => refused.set(refused.get() + 1),
                Err(e) => {
                    return Err(TestCaseError::fail(format!(
                        "{k:?}: refusal is not our own typed error: {e}"
                    )));
                }
            }
            prop_assert_eq!(r.is_ok(), theirs, "{:?}: ours {:?}", k, r);
            Ok(())
        })
        .map_err(|e| format!("{e}"))?;
    let (accepted, refused) = (accepted.get(), refused.get());
    ensure!(
        accepted > 200 && refused > 200,
        "too one-sided: {accepted} accepted, {refused} refused"
    );
    eprintln!(
        "rnn agreement on cuDNN {}: {accepted} accepted, {refused} refused, {:?}",
        cudnn_version(),
        start.elapsed()
    );
    Ok(())
}

fn data_case() -> impl Strategy<Value = (u8, usize, usize, usize, Vec<usize>)> {
    (
        0u8..5,
        0usize..3,
        prop_oneof![6 => 0usize..8, 1 => Just(i32::MAX as usize + 1)],
        prop_oneof![6 => 0usize..6, 1 => Just(usize::MAX)],
        prop::collection::vec(0usize..9, 0..6),
    )
        .prop_map(|(dt, layout, t, v, mut lens)| {
            // Often sorted, so the packed layout is reached.
            if t % 2 == 0 {
                lens.sort_unstable_by(|a, b| b.cmp(a));
                if let Some(f) = lens.first_mut() {
                    *f = t;
                }
            }
            (dt, layout, t, v, lens)
        })
}

/// Ours, through both constructors: `new` and `with_padding_fill` (a
/// fill of all-ones bits) must accept and refuse alike, and a descriptor
/// made with a fill must read it back bit for bit (`new`'s: all zeros).
fn data_ours<T: DataType>(
    l: RnnDataLayout,
    t: usize,
    v: usize,
    lens: &[usize],
) -> Result<(), Error> {
    let plain = RnnDataDescriptor::<T>::new(l, t, v, lens);
    let mut ones = T::default();
    // SAFETY: any bit pattern is a valid DataType value (the trait's rule);
    // the write covers exactly the value's bytes.
    unsafe {
        std::ptr::write_bytes(
            (&mut ones as *mut T).cast::<u8>(),
            0xFF,
            std::mem::size_of::<T>(),
        )
    };
    let filled = RnnDataDescriptor::<T>::with_padding_fill(l, t, v, lens, ones);
    let bytes = |x: T| {
        // SAFETY: reads the value's own bytes (plain numbers, no padding).
        unsafe {
            std::slice::from_raw_parts((&x as *const T).cast::<u8>(), std::mem::size_of::<T>())
                .to_vec()
        }
    };
    match (&plain, &filled) {
        (Ok(p), Ok(f)) => {
            let (pf, ff) = (p.padding_fill()?, f.padding_fill()?);
            if bytes(pf).iter().any(|&b| b != 0) || bytes(ff).iter().any(|&b| b != 0xFF) {
                return Err(Error::invalid("padding fill", "read back differs", T::NAME));
            }
        }
        (Err(_), Err(_)) => {}
        _ => {
            return Err(Error::invalid(
                "with_padding_fill",
                "must accept exactly what new accepts",
                format!("{:?} vs {:?}", plain.is_ok(), filled.is_ok()),
            ));
        }
    }
    plain.map(|_| ())
}

fn data_agreement() -> TestResult {
    let major = cudnn_major();
    let mut runner = TestRunner::new_with_rng(
        Config {
            failure_persistence: None,
            ..Config::with_cases(20_000)
        },
        proptest::test_runner::TestRng::from_seed(
            proptest::test_runner::RngAlgorithm::ChaCha,
            &[62; 32],
        ),
    );
    let (accepted, refused) = (Cell::new(0usize), Cell::new(0usize));
    runner
        .run(&data_case(), |(dt, layout, t, v, lens)| {
            let layout = RnnDataLayout::ALL[layout];
            let (code, r) = match catch_unwind(AssertUnwindSafe(|| match dt {
                0 => (f32::CUDNN, data_ours::<f32>(layout, t, v, &lens)),
                1 => (f64::CUDNN, data_ours::<f64>(layout, t, v, &lens)),
                2 => (
                    half::f16::CUDNN,
                    data_ours::<half::f16>(layout, t, v, &lens),
                ),
                3 => (
                    half::bf16::CUDNN,
                    data_ours::<half::bf16>(layout, t, v, &lens),
                ),
                _ => (i32::CUDNN, data_ours::<i32>(layout, t, v, &lens)),
            })) {
                Ok(x) => x,
                Err(_) => return Err(TestCaseError::fail("panic".to_string())),
            };
            match &r {
                Ok(()) => accepted.set(accepted.get() + 1),
                Err(Error::InvalidArgument { .. }) => refused.set(refused.get() + 1),
                Err(Error::Unsupported { .. }) if dt == 3 => refused.set(refused.get() + 1),
                Err(e) => return Err(TestCaseError::fail(format!("not our typed error: {e}"))),
            }
            // cuDNN 8.9 crashes on an empty batch and accepts unsorted
            // packed lengths (wrong results): ask it only where it is sane.
            let sane = !lens.is_empty() && (major >= 9 || layout != RnnDataLayout::SeqMajorPacked);
            let fits = t <= i32::MAX as usize && v <= i32::MAX as usize;
            let stricter = t
                .checked_mul(lens.len())
                .and_then(|n| n.checked_mul(v))
                .is_none_or(|n| n > i32::MAX as usize);
            if sane && fits && !stricter {
                let lens32: Vec<i32> = lens.iter().map(|&l| l as i32).collect();
                let theirs = cudnn_accepts_rnn_data_raw(
                    code,
                    layout,
                    t as i32,
                    lens.len() as i32,
                    v as i32,
                    &lens32,
                )
                .is_ok();
                prop_assert_eq!(
                    r.is_ok(),
                    theirs,
                    "{:?} t {} v {} {:?}: ours {:?}",
                    layout,
                    t,
                    v,
                    lens,
                    r
                );
            }
            Ok(())
        })
        .map_err(|e| format!("{e}"))?;
    let (accepted, refused) = (accepted.get(), refused.get());
    ensure!(
        accepted > 100 && refused > 100,
        "too one-sided: {accepted} accepted, {refused} refused"
    );
    eprintln!(
        "rnn data agreement on cuDNN {}: {accepted} accepted, {refused} refused",
        cudnn_version()
    );
    Ok(())
}

/// The CTC loss descriptor as `CtcPlan` sets it reads back the same on
/// both stacks (cuDNN's set function checks nothing here: it accepts any
/// length and mode, so the batch rules are checked in Rust, against the
/// f64 reference, in `dnn::ctc`'s unit tests).
fn ctc_descriptor() -> TestResult {
    for m in [1usize, 7, CTC_MAX_LABEL_LENGTH] {
        let got = ctc_descriptor_round_trip(m)?;
        ensure!(
            got == (f32::CUDNN.0, 1, 0, m as i32),
            "max label length {m}: read back {got:?}"
        );
    }
    ensure!(
        matches!(
            ctc_descriptor_round_trip(CTC_MAX_LABEL_LENGTH + 1),
            Err(Error::InvalidArgument { .. })
        ),
        "257 accepted"
    );
    Ok(())
}

/// Issue 31 item 7: RNN data descriptors carry a padding fill, 0 by default
/// (PyTorch zero-fills padded outputs); cuDNN reads it back in the
/// element type's own encoding (bits checked against the IEEE encodings
/// written out here, not against the crate's conversion): f32 1.5 is
/// 0x3FC00000, f64 -2.25 is 0xC002000000000000, f16 1.5 is 0x3E00, bf16
/// 1.5 is 0x3FC0.
fn rnn_data_padding_fill() -> TestResult {
    let v = Handle::library_version()?;
    let lens = [3usize, 1];
    for layout in RnnDataLayout::ALL {
        let d = RnnDataDescriptor::<f32>::new(layout, 3, 2, &lens)?;
        ensure!(d.padding_fill()?.to_bits() == 0, "{layout:?}: default fill");
        let d = RnnDataDescriptor::<f32>::with_padding_fill(layout, 3, 2, &lens, 1.5)?;
        ensure!(
            d.padding_fill()?.to_bits() == 0x3FC0_0000,
            "{layout:?}: f32 fill {}",
            d.padding_fill()?
        );
        let d = RnnDataDescriptor::<f64>::with_padding_fill(layout, 3, 2, &lens, -2.25)?;
        ensure!(
            d.padding_fill()?.to_bits() == 0xC002_0000_0000_0000,
            "{layout:?}: f64 fill"
        );
        let d = RnnDataDescriptor::<half::f16>::new(layout, 3, 2, &lens)?;
        ensure!(d.padding_fill()?.to_bits() == 0, "f16 default");
        let d = RnnDataDescriptor::<half::f16>::with_padding_fill(
            layout,
            3,
            2,
            &lens,
            half::f16::from_bits(0x3E00),
        )?;
        ensure!(d.padding_fill()?.to_bits() == 0x3E00, "f16 fill");
        if v.major >= 9 {
            match RnnDataDescriptor::<half::bf16>::with_padding_fill(
                layout,
                3,
                2,
                &lens,
                half::bf16::from_bits(0x3FC0),
            ) {
                Ok(d) => ensure!(d.padding_fill()?.to_bits() == 0x3FC0, "bf16 fill"),
                Err(Error::Unsupported { .. }) => {}
                Err(e) => return Err(format!("bf16: {e}").into()),
            }
        }
    }
    Ok(())
}

/// Issue 31 item 7: a sample without a valid alignment ("1 1" in 2 steps)
/// is accepted on cuDNN 9 (its descriptor reads back
/// `CUDNN_CTC_ZERO_OOB_GRADIENTS` through cuDNN 9's own `_v9` getter, so
/// the loss-0 / gradient-0 contract is the library's mode, not ours) and
/// refused on cuDNN 8.9, which has no such mode (run this test on both
/// stacks). An input length of 0 is refused on both (issue 31 item 8:
/// cuDNN documents nothing about zero steps), naming the sample. The label
/// limit is below 256 on both: 255 is accepted, 256 refused naming the
/// sample.
fn ctc_zero_oob_by_loaded_cudnn() -> TestResult {
    let v = Handle::library_version()?;
    let infeasible = check_ctc(v, 3, 3, &[1, 1], &[2], &[2]);
    match check_ctc(v, 3, 3, &[1], &[1, 0], &[3, 0]) {
        Err(Error::InvalidArgument { arg, rule, .. })
            if arg == "input_lengths[1]" && rule.contains("every cuDNN version") => {}
        other => return Err(format!("cuDNN {v}, input length 0: {other:?}").into()),
    }
    if v.major >= 9 {
        ensure!(infeasible.is_ok(), "cuDNN {v}: {infeasible:?}");
        // The descriptor's mode as cuDNN 9 reads it back.
        let (_, _, grad, _) = ctc_descriptor_round_trip(4)?;
        ensure!(
            grad == cudnn::sys::cudnn::cudnnCTCGradMode_t::CUDNN_CTC_ZERO_OOB_GRADIENTS.0,
            "cuDNN {v}: grad mode {grad}"
        );
        // Labels outnumbering the input are refused even here.
        let e = check_ctc(v, 3, 3, &[1, 2], &[2], &[1]);
        ensure!(
            matches!(&e, Err(Error::InvalidArgument { arg, .. }) if arg == "input_lengths[0]"),
            "{e:?}"
        );
    } else {
        match infeasible {
            Err(Error::InvalidArgument { arg, rule, .. })
                if arg == "input_lengths[0]" && rule.contains("cuDNN 9") => {}
            other => return Err(format!("cuDNN {v}, infeasible: {other:?}").into()),
        }
    }
    // An empty labelling is refused on every version, naming the sample
    // (cuDNN 9.19 returned the loss -0 for one, where -sum log p(blank) is
    // the loss; first GPU run): checked after the input length.
    match check_ctc(v, 3, 3, &[1], &[1, 0], &[3, 2]) {
        Err(Error::InvalidArgument { arg, value, .. })
            if arg == "label_lengths[1]" && value == "0" => {}
        other => return Err(format!("cuDNN {v}, empty labelling: {other:?}").into()),
    }
    // No repeats ("1 2 1 2 ..."): 255 labels need 255 steps.
    let ok: Vec<usize> = (0..255).map(|i| 1 + i % 2).collect();
    ensure!(
        check_ctc(v, 300, 3, &ok, &[255], &[300])? == 255,
        "255 labels"
    );
    let long: Vec<usize> = (0..256).map(|i| 1 + i % 2).collect();
    match check_ctc(v, 300, 3, &long, &[256], &[300]) {
        Err(Error::InvalidArgument { arg, value, .. })
            if arg == "label_lengths[0]" && value == "256" => {}
        other => return Err(format!("256 labels: {other:?}").into()),
    }
    eprintln!(
        "ctc on cuDNN {v}: zero-OOB samples {}",
        if v.major >= 9 { "accepted" } else { "refused" }
    );
    Ok(())
}

pub fn main() {
    run(vec![
        host("ctc_descriptor_round_trip", ctc_descriptor),
        host("ctc_zero_oob_by_loaded_cudnn", ctc_zero_oob_by_loaded_cudnn),
        host("rnn_data_padding_fill", rnn_data_padding_fill),
        host("rnn_descriptor_round_trip", round_trip),
        host("rnn_descriptor_agrees_with_cudnn", rnn_agreement),
        host("rnn_data_descriptor_agrees_with_cudnn", data_agreement),
    ])
}
