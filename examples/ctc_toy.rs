//! `cargo run --example ctc_toy`: CTC loss (`cudnn::dnn::CtcPlan`, cuDNN's
//! `cudnnCTCLoss_v8`) aligns free per-frame scores to a label sequence.
//!
//! The "network" is a table of logits, `[frames, batch, alphabet]`, learned
//! directly by gradient descent on the CTC loss of a few target label
//! sequences (with repeats, which need a blank between them, and different
//! input lengths). After training, greedy decoding (the best symbol per
//! frame, repeats merged, blanks dropped) must give back every target, and
//! the program prints each learned alignment.
//!
//! Without a GPU it says what it needs, then runs the same descent with the
//! f64 reference (`cudnn::reference::ctc`) on the CPU and reports it. Exit
//! status 0 when every target decodes on the device run; 1 otherwise, and 1
//! without a GPU.

use std::process::ExitCode;

use cudnn::dnn::{CtcAlgo, CtcPlan, Handle};
use cudnn::reference::ctc as rctc;
use cudnn::runtime::{Device, DeviceBuffer, Stream};

const FRAMES: usize = 12;
const ALPHABET: usize = 5; // blank 0 and the letters a..d
const TARGETS: [&[usize]; 3] = [&[1, 2, 2, 3], &[4, 4, 4], &[3, 1]];
const INPUT_LENGTHS: [usize; 3] = [12, 9, 6];

fn letters(l: &[usize]) -> String {
    l.iter()
        .map(|&s| {
            if s == 0 {
                '-'
            } else {
                (b'a' + (s - 1) as u8) as char
            }
        })
        .collect()
}

/// Loss per sequence and the gradient, from one backend.
type LossFn<'a> = dyn FnMut(&[f64]) -> cudnn::Result<(Vec<f64>, Vec<f64>)> + 'a;

fn descend(loss: &mut LossFn<'_>) -> cudnn::Result<(Vec<f64>, f64, f64)> {
    let batch = TARGETS.len();
    let mut logits = vec![0.0; FRAMES * batch * ALPHABET];
    let (mut first, mut last) = (0.0, 0.0);
    for step in 0..300 {
        let (costs, grad) = loss(&logits)?;
        let total: f64 = costs.iter().sum();
        if step == 0 {
            first = total;
        }
        last = total;
        for (w, g) in logits.iter_mut().zip(&grad) {
            *w -= 1.0 * g;
        }
        if step % 100 == 0 {
            println!("step {step:3}: CTC loss {total:.4}");
        }
    }
    Ok((logits, first, last))
}

/// Greedy decoding of sequence `b`: its best path and the labels.
fn decode(logits: &[f64], b: usize) -> (Vec<usize>, Vec<usize>) {
    let batch = TARGETS.len();
    let mut path = Vec::new();
    for t in 0..INPUT_LENGTHS[b] {
        let row = &logits[(t * batch + b) * ALPHABET..(t * batch + b + 1) * ALPHABET];
        let best = (0..ALPHABET).fold(0, |m, k| if row[k] > row[m] { k } else { m });
        path.push(best);
    }
    let mut labels = Vec::new();
    let mut prev = 0;
    for &s in &path {
        if s != 0 && s != prev {
            labels.push(s);
        }
        prev = s;
    }
    (path, labels)
}

fn report(logits: &[f64]) -> bool {
    let mut ok = true;
    for (b, target) in TARGETS.iter().enumerate() {
        let (path, labels) = decode(logits, b);
        let hit = labels == *target;
        ok &= hit;
        println!(
            "  target {:6} frames {:2}: alignment {:12} -> {:6} {}",
            letters(target),
            INPUT_LENGTHS[b],
            letters(&path),
            letters(&labels),
            if hit { "ok" } else { "WRONG" }
        );
    }
    ok
}

fn flat_labels() -> (Vec<usize>, Vec<usize>) {
    let labels: Vec<usize> = TARGETS.iter().flat_map(|t| t.iter().copied()).collect();
    let lengths: Vec<usize> = TARGETS.iter().map(|t| t.len()).collect();
    (labels, lengths)
}

fn cpu() -> cudnn::Result<bool> {
    let (labels, label_lengths) = flat_labels();
    let mut f = |logits: &[f64]| {
        let r = rctc::ctc_loss(&rctc::CtcProblem {
            logits,
            max_time: FRAMES,
            alphabet: ALPHABET,
            blank: 0,
            labels: &labels,
            label_lengths: &label_lengths,
            input_lengths: &INPUT_LENGTHS,
        })?;
        Ok((r.losses, r.grad))
    };
    let (logits, first, last) = descend(&mut f)?;
    println!("ctc_toy (CPU reference): loss {first:.4} -> {last:.4}");
    Ok(report(&logits))
}

fn gpu() -> cudnn::Result<bool> {
    Device::new(0)?;
    let stream = Stream::new()?;
    let mut h = Handle::new(&stream)?;
    let (labels, label_lengths) = flat_labels();
    let plan = CtcPlan::new(
        &mut h,
        CtcAlgo::Deterministic,
        FRAMES,
        ALPHABET,
        &labels,
        &label_lengths,
        &INPUT_LENGTHS,
    )?;
    let n = FRAMES * TARGETS.len() * ALPHABET;
    let mut costs = DeviceBuffer::<f32>::zeroed(TARGETS.len())?;
    let mut grad = DeviceBuffer::<f32>::zeroed(n)?;
    let mut f = |logits: &[f64]| {
        let x = DeviceBuffer::from_host(&logits.iter().map(|&v| v as f32).collect::<Vec<_>>())?;
        plan.run(
            &mut h,
            x.as_slice(),
            costs.as_slice_mut(),
            grad.as_slice_mut(),
        )?;
        h.stream().synchronize()?;
        let c = costs.to_vec()?.into_iter().map(f64::from).collect();
        let g = grad.to_vec()?.into_iter().map(f64::from).collect();
        Ok((c, g))
    };
    let (logits, first, last) = descend(&mut f)?;
    println!("ctc_toy (cuDNN): loss {first:.4} -> {last:.4}");
    Ok(report(&logits))
}

fn missing() -> Option<String> {
    if let Err(e) = Handle::library_version() {
        return Some(format!("the cuDNN library could not be loaded:\n{e}"));
    }
    match Device::count() {
        Ok(0) => Some("no CUDA device: cudaGetDeviceCount reported 0 devices".into()),
        Ok(_) => None,
        Err(e) => Some(e.to_string()),
    }
}

fn main() -> ExitCode {
    if let Some(why) = missing() {
        eprintln!("ctc_toy: cannot run on a GPU: {why}");
        eprintln!(
            "(cuDNN's CTC loss needs the CUDA libraries and a CUDA device; `cargo run --example doctor` says what is missing; running the CPU reference instead)"
        );
        match cpu() {
            Ok(true) => println!("ctc_toy (CPU reference): every target decodes"),
            Ok(false) => println!("ctc_toy (CPU reference): some targets do not decode"),
            Err(e) => eprintln!("ctc_toy (CPU reference): failed: {e}"),
        }
        return ExitCode::FAILURE;
    }
    match gpu() {
        Ok(true) => {
            println!("ctc_toy: ok");
            ExitCode::SUCCESS
        }
        Ok(false) => {
            eprintln!("ctc_toy: some targets do not decode");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("ctc_toy: failed: {e}");
            ExitCode::FAILURE
        }
    }
}
