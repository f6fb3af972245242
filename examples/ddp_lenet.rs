//! `cargo run --example ddp_lenet`: the `lenet` example trained
//! data-parallel over NCCL, one process per GPU.
//!
//! Each rank builds the same network from the same seed (so the initial
//! weights agree), draws the same data set and the same shuffle each epoch,
//! and trains on its shard: batch `k` of the epoch goes to rank
//! `k % WORLD_SIZE`. After each backward pass the eight parameter gradients
//! are averaged across ranks (`all_reduce_in_place` with `ReduceOp::Avg`,
//! fused in one NCCL group) on the network's stream, then every rank takes
//! the same SGD step. The loss and accuracy printed per epoch are summed
//! over all ranks (an all-reduce). At the end the batch-norm running
//! statistics are averaged, every rank evaluates the test set, and a
//! checksum of every weight is all-reduced with `Min` and `Max`: the run
//! fails unless they are equal, i.e. the weights are identical on every
//! rank.
//!
//! Launch (the torchrun convention, see `cudnn::nccl::launch`):
//!
//! ```text
//! # one process on GPU 0: no variables needed
//! cargo run --release --example ddp_lenet
//! # N processes on N GPUs of this machine
//! cargo build --release --example ddp_lenet
//! for r in 0 1; do
//!   RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r CUDNN_RS_RENDEZVOUS=tcp://127.0.0.1:29511 \
//!     target/release/examples/ddp_lenet & done; wait
//! ```
//!
//! Exit status: 0 when, as for `lenet`, the loss fell and the test accuracy
//! is above 60%, and the weights are identical on every rank; 1 otherwise,
//! or when NCCL, cuDNN or a CUDA device is missing (with a message saying
//! which).
//!
//! No rank hangs when another dies: the communicator is made with a
//! deadline (`Communicator::init_rank_timeout`, the rendezvous timeout
//! `CUDNN_RS_RENDEZVOUS_TIMEOUT`), and every wait for collective work goes
//! through `Communicator::wait`, which aborts the communicator when NCCL
//! reports an error or `DDP_LENET_TIMEOUT` seconds (default 120) pass; the
//! surviving ranks then exit with that error.

use std::process::ExitCode;
use std::time::Duration;

use cudnn::dnn::Handle;
use cudnn::nccl::launch::LaunchEnv;
use cudnn::nccl::{self, Communicator, ReduceOp, UniqueId};
use cudnn::runtime::{Device, DeviceBuffer, Stream};
use cudnn_examples::lenet::*;

/// The longest a rank waits for collective work (`DDP_LENET_TIMEOUT`, in
/// seconds; 120 by default).
fn collective_timeout() -> AnyResult<Duration> {
    match std::env::var("DDP_LENET_TIMEOUT") {
        Err(_) => Ok(Duration::from_secs(120)),
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(s) if s > 0 => Ok(Duration::from_secs(s)),
            _ => Err(
                format!("DDP_LENET_TIMEOUT must be a whole number of seconds > 0, got {v:?}")
                    .into(),
            ),
        },
    }
}

/// This rank's device and communicator: the unique id shared over the
/// rendezvous, then a non-blocking communicator made within the rendezvous
/// timeout, whose own calls are bounded by `timeout`.
fn join(env: &LaunchEnv, timeout: Duration) -> AnyResult<(Device, Communicator)> {
    let device = Device::new(env.local_rank)?;
    let id = nccl::launch::exchange_for(env, UniqueId::new)?;
    // SAFETY: every rank runs this program, which makes the same calls in
    // the same order with the same sizes (the model and batch are fixed).
    let mut comm = unsafe {
        Communicator::init_rank_timeout(&id, env.ranks.rank(), env.ranks.size(), env.timeout)
    }?;
    comm.set_timeout(timeout);
    Ok((device, comm))
}

/// Sum `values` over all ranks (f64, on the device).
fn sum_over_ranks(
    comm: &Communicator,
    stream: &Stream,
    values: &[f64],
    timeout: Duration,
) -> AnyResult<Vec<f64>> {
    let mut buf = DeviceBuffer::from_host(values)?;
    comm.all_reduce_in_place(&mut buf, ReduceOp::Sum, stream)?;
    comm.wait(stream, timeout)?;
    Ok(buf.to_vec()?)
}

/// A checksum of the bits of every parameter (FNV-1a over the f32 bit
/// patterns, in order): equal exactly when the weights are bit-identical
/// (up to hash collisions).
fn checksum(net: &mut Net) -> AnyResult<u64> {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in net.params_mut() {
        for v in p.value.to_vec()? {
            for b in v.to_bits().to_le_bytes() {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        }
    }
    Ok(h)
}

fn train(device: Device, comm: Communicator, timeout: Duration) -> AnyResult<bool> {
    let (rank, world) = (comm.rank(), comm.size());
    let lead = rank == 0;
    if lead {
        println!(
            "ddp_lenet: {world} rank(s); rank 0 on device {}: {}",
            device.ordinal(),
            device.name()?
        );
    }
    let stream = device.create_stream()?;
    let ok = train_on(&comm, &stream, timeout)?;
    // Every wait succeeded: finalize (flush and leave together, within the
    // communicator's timeout).
    comm.finalize()?;
    Ok(ok)
}

fn train_on(comm: &Communicator, stream: &Stream, timeout: Duration) -> AnyResult<bool> {
    let (rank, world) = (comm.rank(), comm.size());
    let lead = rank == 0;
    let stream = stream.clone();
    let train = Dataset::generate(TRAIN_IMAGES, TRAIN_SEED);
    let test = Dataset::generate(TEST_IMAGES, TEST_SEED);
    let mut rng = Lcg::new(INIT_SEED);
    let mut net = Net::new(&stream, &mut rng)?;
    if lead {
        net.describe();
    }
    let batches_per_epoch = train.len() / BATCH;
    let steps = batches_per_epoch / world;
    if steps == 0 {
        return Err(format!(
            "{world} ranks is more than the {batches_per_epoch} batches of an epoch"
        )
        .into());
    }
    if lead {
        println!(
            "training: {EPOCHS} epochs of SGD, learning rate {LEARNING_RATE}, {steps} steps of {world} x {BATCH} images per epoch, gradients averaged over the ranks"
        );
    }

    let mut order: Vec<usize> = (0..train.len()).collect();
    let mut epoch_losses = Vec::with_capacity(EPOCHS);
    for epoch in 1..=EPOCHS {
        shuffle(&mut order, &mut rng);
        let batches: Vec<&[usize]> = order.chunks_exact(BATCH).collect();
        let (mut loss, mut correct, mut seen) = (0.0, 0, 0);
        for step in 0..steps {
            let batch = batches[step * world + rank];
            let labels = net.load(&train, batch)?;
            net.forward(true)?;
            let (l, c) = score(&net.read_logp()?, &labels);
            net.backward()?;
            // Average the gradients over the ranks, on the network's
            // stream (after backward, before the SGD step), in one launch.
            let s = net.stream.clone();
            nccl::group(|g| {
                for p in net.params_mut() {
                    g.all_reduce_in_place(comm, &mut p.grad, ReduceOp::Avg, &s)?;
                }
                Ok(())
            })?;
            // Bounded: a dead peer aborts the communicator and ends the run
            // with an error, instead of the next synchronize hanging.
            comm.wait(&s, timeout)?;
            net.sgd(LEARNING_RATE)?;
            loss += l;
            correct += c;
            seen += labels.len();
        }
        let total = sum_over_ranks(comm, &stream, &[loss, correct as f64, seen as f64], timeout)?;
        let mean = total[0] / total[2];
        if lead {
            println!(
                "epoch {epoch:>2}/{EPOCHS}: loss {mean:.4}, training accuracy {:5.1}% (all ranks)",
                100.0 * total[1] / total[2]
            );
        }
        if !mean.is_finite() {
            eprintln!("ddp_lenet: rank {rank}: the loss is not finite; training diverged");
            return Ok(false);
        }
        epoch_losses.push(mean);
    }

    // Batch-norm running statistics: each rank saw other batches; average them.
    let s = net.stream.clone();
    nccl::group(|g| {
        g.all_reduce_in_place(comm, &mut net.running_mean, ReduceOp::Avg, &s)?;
        g.all_reduce_in_place(comm, &mut net.running_var, ReduceOp::Avg, &s)
    })?;
    comm.wait(&s, timeout)?;

    // Identical weights on every rank: min and max of the checksums agree.
    let sum = checksum(&mut net)?;
    let mut lo = DeviceBuffer::from_host(&[sum as i64])?;
    let mut hi = DeviceBuffer::from_host(&[sum as i64])?;
    nccl::group(|g| {
        g.all_reduce_in_place(comm, &mut lo, ReduceOp::Min, &stream)?;
        g.all_reduce_in_place(comm, &mut hi, ReduceOp::Max, &stream)
    })?;
    comm.wait(&stream, timeout)?;
    let identical = lo.to_vec()? == hi.to_vec()?;

    // Inference on the test set, on every rank (identical weights, identical result).
    let (mut loss, mut correct) = (0.0, 0);
    let indices: Vec<usize> = (0..test.len()).collect();
    for batch in indices.chunks_exact(BATCH) {
        let labels = net.load(&test, batch)?;
        net.forward(false)?;
        let (l, c) = score(&net.read_logp()?, &labels);
        loss += l;
        correct += c;
    }
    let n = (test.len() / BATCH * BATCH) as f64;
    let accuracy = correct as f64 / n;
    let (first, last) = match (epoch_losses.first(), epoch_losses.last()) {
        (Some(&f), Some(&l)) => (f, l),
        _ => return Err("no epoch ran".into()),
    };
    let loss_fell = last < first;
    let accurate = accuracy > MIN_TEST_ACCURACY;
    if lead {
        println!(
            "\ninference on {n} test images: loss {:.4}, accuracy {:.1}% (chance 25%)",
            loss / n,
            100.0 * accuracy
        );
        if identical {
            println!("weights identical on all {world} rank(s) (checksum {sum:#018x})");
        }
    }
    let mut ok = true;
    if !identical {
        eprintln!(
            "ddp_lenet: rank {rank}: the weights differ between ranks (checksum {sum:#018x})"
        );
        ok = false;
    }
    if !loss_fell {
        eprintln!("ddp_lenet: rank {rank}: the loss did not fall: {first:.4} -> {last:.4}");
        ok = false;
    }
    if !accurate {
        eprintln!(
            "ddp_lenet: rank {rank}: test accuracy {:.1}% is not above {:.0}%",
            100.0 * accuracy,
            100.0 * MIN_TEST_ACCURACY
        );
        ok = false;
    }
    if ok && lead {
        println!(
            "ddp_lenet: ok ({world} rank(s), loss {first:.4} -> {last:.4}, test accuracy {:.1}%)",
            100.0 * accuracy
        );
    }
    Ok(ok)
}

/// What is missing to train, when something is.
fn missing() -> Option<String> {
    if let Err(e) = nccl::version() {
        return Some(format!("the NCCL library could not be loaded:\n{e}"));
    }
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
    if std::env::args().len() > 1 {
        eprintln!(
            "usage: ddp_lenet (ranks come from RANK, WORLD_SIZE, LOCAL_RANK; see the source)"
        );
        return ExitCode::FAILURE;
    }
    // Read the launch variables first, so a mistake there is reported even
    // on a machine without a GPU.
    let env = match nccl::launch::LaunchEnv::from_env() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("ddp_lenet: bad launch variables: {e}");
            return ExitCode::FAILURE;
        }
    };
    let timeout = match collective_timeout() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("ddp_lenet: bad launch variables: {e}");
            return ExitCode::FAILURE;
        }
    };
    let rank = env.ranks.rank();
    if let Some(why) = missing() {
        eprintln!("ddp_lenet: rank {rank}: cannot run: {why}");
        eprintln!(
            "(data-parallel training needs NCCL, the CUDA libraries and one CUDA device per rank; `cargo run --example doctor` says what is missing)"
        );
        return ExitCode::FAILURE;
    }
    let (device, comm) = match join(&env, timeout) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("ddp_lenet: rank {rank}: could not join the job: {e}");
            return ExitCode::FAILURE;
        }
    };
    match train(device, comm, timeout) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("ddp_lenet: rank {rank}: failed: {e}");
            ExitCode::FAILURE
        }
    }
}
