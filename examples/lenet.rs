//! `cargo run --example lenet`: trains a small LeNet-style network on the
//! GPU, end to end through this crate, on images it draws itself.
//!
//! **Data.** 16 x 16 single-channel images of four classes (horizontal
//! bar, vertical bar, diagonal, square outline), drawn with random
//! positions, sizes, thickness and brightness, plus uniform noise, by a
//! seeded LCG: 2048 training and 512 test images, the same every run.
//!
//! **Network** (f32, NCHW, batch 64):
//!
//! | layer | op (crate API) | output |
//! |---|---|---|
//! | conv1 | 5x5, 1 -> 8, pad 2, + bias + ReLU (`ConvBiasActivationPlan`) | 8 x 16 x 16 |
//! | bn1 | spatial batch norm, running statistics (`BatchNormPlan`) | 8 x 16 x 16 |
//! | pool1 | max 2x2, stride 2 (`PoolingPlan`) | 8 x 8 x 8 |
//! | conv2 | 3x3, 8 -> 16, pad 1, + bias + ReLU (`ConvBiasActivationPlan`) | 16 x 8 x 8 |
//! | pool2 | max 2x2, stride 2 (`PoolingPlan`) | 16 x 4 x 4 |
//! | fc | 256 -> 4 (`blas::Handle::gemm`) + bias (`Handle::add_tensor`) | 4 |
//! | loss | log-softmax (`Handle::softmax_forward`), cross-entropy | 1 |
//!
//! **Backward**: log-softmax (`softmax_backward`), GEMMs for the FC
//! weights, bias (a GEMM with a ones vector) and input, max-pooling
//! backward, ReLU backward (`activation_backward`), convolution backward
//! data / filter / bias plans, batch-norm backward. **SGD**: `w -= lr * dw`
//! on the device with `add_tensor` (alpha `-lr`, beta 1).
//!
//! Prints the mean loss and training accuracy per epoch, then runs
//! inference (batch norm with its running statistics) on the test set and
//! prints its accuracy, a confusion matrix and a few predictions.
//!
//! Exit status: 0 when the last epoch's loss is below the first's and the
//! test accuracy is above 60% (chance is 25%); 1 otherwise, or when the
//! CUDA libraries or a CUDA device are missing (with a message saying
//! which).
//!
//! `cargo run --example lenet -- --check-data` only draws the data set and
//! prints the class counts and one image per class; it needs no GPU and no
//! CUDA library.
//!
//! `cargo run --example lenet -- --graph` trains twice from the same seed:
//! eagerly, then with one training step (forward, backward, SGD) captured
//! into a CUDA graph (`Stream::capture`) and replayed for every later step
//! (only the batch upload and the read of the log-probabilities stay
//! outside it). It prints both loss curves, their largest difference and
//! the mean time per step, and fails unless the curves agree. Two things
//! happen before the capture, as the crate's capture rules require: the
//! cuBLAS handle gets an explicit workspace (`set_workspace`), and the
//! eager steps run until batch norm's running-average factor has settled
//! at its momentum (a host scalar: a graph replays the value it captured).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use cudnn::dnn::Handle;
use cudnn::runtime::{CaptureMode, CudaGraphExec, Device, Stream};
use cudnn_examples::lenet::*;

/// The eager steps before the capture: until batch norm's factor
/// `max(1 / (n + 1), BN_MOMENTUM)` is the momentum (10 steps).
fn settle_steps() -> usize {
    (1.0 / BN_MOMENTUM).ceil() as usize
}

/// What one training run gives.
struct Run {
    net: Net,
    /// Each epoch's mean loss.
    losses: Vec<f64>,
    /// The mean time of the steps after the capture point (the replayed
    /// ones with `graph`).
    step: Duration,
}

/// One training run from the seed; prints a line per epoch.
fn run_epochs(stream: &Stream, train: &Dataset, graph: bool, compare: bool) -> AnyResult<Run> {
    let mut rng = Lcg::new(INIT_SEED);
    let mut net = Net::new(stream, &mut rng)?;
    if compare {
        // cuBLAS must not take workspace from its own pool during a capture;
        // the eager run of a comparison gets the same workspace, so both run
        // the same kernels.
        net.blas
            .set_workspace(cudnn::blas::Handle::recommended_workspace_size(9))?;
    }
    let label = if graph { "graph" } else { "eager" };
    let mut exec: Option<CudaGraphExec> = None;
    let mut order: Vec<usize> = (0..train.len()).collect();
    let mut epochs = Vec::with_capacity(EPOCHS);
    let (mut step, mut timed, mut spent) = (0usize, 0u32, Duration::ZERO);
    for epoch in 1..=EPOCHS {
        shuffle(&mut order, &mut rng);
        let (mut loss, mut correct, mut seen) = (0.0, 0, 0);
        for batch in order.chunks_exact(BATCH) {
            let t0 = Instant::now();
            let labels = net.load(train, batch)?;
            if graph && exec.is_none() && step == settle_steps() {
                let g = stream.capture(CaptureMode::Global, |_| -> AnyResult<()> {
                    net.forward(true)?;
                    net.backward()?;
                    Ok(net.sgd(LEARNING_RATE)?)
                })?;
                println!(
                    "graph: captured step {step} ({} nodes); replaying it from now on",
                    g.node_count()?
                );
                exec = Some(g.instantiate()?);
            }
            match &exec {
                // SAFETY: the graph uses the network's buffers, handles and
                // plans, all owned by `net`, which outlives `exec` (both are
                // locals here; `exec` is dropped first, at the end of this
                // function, after `read_logp` synchronized the stream). The
                // host writes the inputs (`load`) only after synchronizing.
                Some(e) => unsafe { e.launch(stream) }?,
                None => {
                    net.forward(true)?;
                    net.backward()?;
                    net.sgd(LEARNING_RATE)?;
                }
            }
            let (l, c) = score(&net.read_logp()?, &labels);
            if step > settle_steps() {
                spent += t0.elapsed();
                timed += 1;
            }
            step += 1;
            loss += l;
            correct += c;
            seen += labels.len();
        }
        let mean = loss / seen as f64;
        let accuracy = correct as f64 / seen as f64;
        println!(
            "{label} epoch {epoch:>2}/{EPOCHS}: loss {mean:.4}, training accuracy {:5.1}%",
            100.0 * accuracy
        );
        if !mean.is_finite() {
            return Err("the loss is not finite; training diverged".into());
        }
        epochs.push(mean);
    }
    drop(exec);
    Ok(Run {
        net,
        losses: epochs,
        step: spent / timed.max(1),
    })
}

/// `--check-data`: draw both sets and show them; no GPU involved.
fn check_data() -> ExitCode {
    let train = Dataset::generate(TRAIN_IMAGES, TRAIN_SEED);
    let test = Dataset::generate(TEST_IMAGES, TEST_SEED);
    println!(
        "lenet --check-data: {} training and {} test images of {SIDE}x{SIDE}, {CLASSES} classes",
        train.len(),
        test.len()
    );
    let mut balanced = true;
    for (class, name) in CLASS_NAMES.iter().enumerate() {
        let count = |d: &Dataset| d.labels.iter().filter(|&&l| l == class).count();
        let (n_train, n_test) = (count(&train), count(&test));
        balanced &= n_train == TRAIN_IMAGES / CLASSES && n_test == TEST_IMAGES / CLASSES;
        // The mean of the bright ("ink") pixels, a quick sanity check of the drawing.
        let ink: Vec<f32> = (0..train.len())
            .filter(|&i| train.labels[i] == class)
            .flat_map(|i| train.image(i).iter().copied().filter(|&v| v > 0.5))
            .collect();
        let mean_ink = ink.iter().map(|&v| f64::from(v)).sum::<f64>() / ink.len().max(1) as f64;
        println!(
            "  class {class} {name:<15} {n_train:>5} train {n_test:>4} test   {:>5.1} ink pixels per image (mean {mean_ink:.2})",
            ink.len() as f64 / n_train.max(1) as f64
        );
    }
    let checksum: f64 = train
        .images
        .iter()
        .chain(&test.images)
        .map(|&v| f64::from(v))
        .sum();
    println!("  pixel sum over both sets: {checksum:.4} (the same every run)");
    println!("\nthe first training image of each class:");
    let firsts: Vec<&[f32]> = (0..CLASSES).map(|i| train.image(i)).collect();
    print!("{}", render(&firsts));
    if balanced {
        ExitCode::SUCCESS
    } else {
        eprintln!("lenet --check-data: the classes are not balanced");
        ExitCode::FAILURE
    }
}
fn train(graph: bool) -> AnyResult<bool> {
    let dev = Device::new(0)?;
    println!("lenet: device 0: {}", dev.name()?);
    let stream = dev.create_stream()?;
    let train = Dataset::generate(TRAIN_IMAGES, TRAIN_SEED);
    let test = Dataset::generate(TEST_IMAGES, TEST_SEED);
    println!(
        "data: {} training and {} test images of {SIDE}x{SIDE}, classes {CLASS_NAMES:?}",
        train.len(),
        test.len()
    );
    println!("training: {EPOCHS} epochs of SGD, learning rate {LEARNING_RATE}");
    let (mut net, eager, eager_step) = match run_epochs(&stream, &train, false, graph) {
        Ok(r) => (r.net, r.losses, r.step),
        Err(e) => {
            eprintln!("lenet: {e}");
            return Ok(false);
        }
    };
    net.describe();
    let mut curves_agree = true;
    if graph {
        let Run {
            net: gnet,
            losses: replayed,
            step: graph_step,
        } = run_epochs(&stream, &train, true, true)?;
        let worst = eager
            .iter()
            .zip(&replayed)
            .map(|(a, b)| (a - b).abs() / a.abs().max(1e-12))
            // NaN propagates (f64::max would drop it).
            .fold(0.0f64, |w, d| if d.is_nan() || d > w { d } else { w });
        println!(
            "graph: loss curves differ by at most {worst:.2e} (relative); mean step {:.1} us eager, {:.1} us replayed (upload and read included)",
            eager_step.as_secs_f64() * 1e6,
            graph_step.as_secs_f64() * 1e6
        );
        // Written so that NaN fails: the same kernels in the same order
        // (a nondeterministic backward kernel may differ in the last bits).
        curves_agree = worst <= 1e-3;
        if !curves_agree {
            eprintln!("lenet: the replayed training's losses differ from the eager run's");
        }
        net = gnet;
    }
    let epoch_losses = eager;
    println!(
        "conv + bias + ReLU ran {:?} (conv1) and {:?} (conv2)",
        net.conv1.path(),
        net.conv2.path()
    );

    // Inference on the test set: batch norm with the running statistics.
    let (mut loss, mut correct) = (0.0, 0);
    let mut confusion = [[0usize; CLASSES]; CLASSES];
    let mut shown = Vec::new();
    let indices: Vec<usize> = (0..test.len()).collect();
    for batch in indices.chunks_exact(BATCH) {
        let labels = net.load(&test, batch)?;
        net.forward(false)?;
        let logp = net.read_logp()?;
        let (l, c) = score(&logp, &labels);
        loss += l;
        correct += c;
        for ((row, &label), &i) in logp.chunks_exact(CLASSES).zip(&labels).zip(batch) {
            let predicted = argmax(row);
            confusion[label][predicted] += 1;
            if shown.len() < 8 {
                shown.push((i, label, predicted, row[predicted].exp()));
            }
        }
    }
    let n = (test.len() / BATCH * BATCH) as f64;
    let accuracy = correct as f64 / n;
    println!(
        "\ninference on {n} test images: loss {:.4}, accuracy {:.1}% (chance 25%)",
        loss / n,
        100.0 * accuracy
    );
    println!("confusion (rows: true class, columns: predicted):");
    for (class, row) in confusion.iter().enumerate() {
        println!("  {:<15} {row:?}", CLASS_NAMES[class]);
    }
    println!("first test images:");
    for &(i, label, predicted, p) in &shown {
        println!(
            "  #{i:<3} {:<15} predicted {:<15} (p = {p:.3}) {}",
            CLASS_NAMES[label],
            CLASS_NAMES[predicted],
            if label == predicted { "ok" } else { "WRONG" }
        );
    }
    let firsts: Vec<&[f32]> = shown.iter().take(4).map(|s| test.image(s.0)).collect();
    print!("{}", render(&firsts));

    let (first, last) = match (epoch_losses.first(), epoch_losses.last()) {
        (Some(&f), Some(&l)) => (f, l),
        _ => return Err("no epoch ran".into()),
    };
    // Written so that NaN fails both.
    let loss_fell = last < first;
    let accurate = accuracy > MIN_TEST_ACCURACY;
    let mut ok = curves_agree;
    if !loss_fell {
        eprintln!(
            "lenet: the loss did not fall: {first:.4} in epoch 1, {last:.4} in epoch {EPOCHS}"
        );
        ok = false;
    }
    if !accurate {
        eprintln!(
            "lenet: test accuracy {:.1}% is not above {:.0}%",
            100.0 * accuracy,
            100.0 * MIN_TEST_ACCURACY
        );
        ok = false;
    }
    if ok {
        println!(
            "lenet: ok (loss {first:.4} -> {last:.4}, test accuracy {:.1}%)",
            100.0 * accuracy
        );
    }
    Ok(ok)
}

/// What is missing to train, when something is.
fn missing() -> Option<String> {
    if let Err(e) = Handle::library_version() {
        return Some(format!("the cuDNN library could not be loaded:\n{e}"));
    }
    match Device::count() {
        Ok(0) => Some("no CUDA device: cudaGetDeviceCount reported 0 devices".into()),
        Ok(_) => None,
        // `Error::NoDevice` reads "no usable CUDA device: <what is missing and
        // what to do> (detail: <the runtime's words>)".
        Err(e) => Some(e.to_string()),
    }
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let graph = match (args.next().as_deref(), args.next()) {
        (None, _) => false,
        (Some("--check-data"), None) => return check_data(),
        (Some("--graph"), None) => true,
        _ => {
            eprintln!("usage: lenet [--check-data | --graph]");
            return ExitCode::FAILURE;
        }
    };
    if let Some(why) = missing() {
        eprintln!("lenet: cannot run: {why}");
        if graph {
            eprintln!(
                "(--graph would train {EPOCHS} epochs eagerly, then again replaying one training step captured after {} eager steps, and compare the loss curves)",
                settle_steps()
            );
        }
        eprintln!(
            "(training needs the CUDA libraries and a CUDA device; `cargo run --example doctor` says what is missing, and `--check-data` runs the data pipeline alone)"
        );
        return ExitCode::FAILURE;
    }
    if graph {
        println!("lenet --graph: an eager run, then a run replaying one captured training step");
    }
    match train(graph) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("lenet: failed: {e}");
            ExitCode::FAILURE
        }
    }
}
