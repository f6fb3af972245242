//! `cargo run --example rnn_adding`: an LSTM learns the adding problem,
//! through cuDNN's RNN API (`cudnn::dnn::RnnPlan`) on the GPU.
//!
//! **Task.** Each sequence has between `MIN_LEN` and `MAX_LEN` steps of
//! two inputs: a value drawn from `U(0, 1)` and a marker that is 1 at
//! exactly two steps; the target is the sum of the two marked values.
//! Predicting the mean (1) scores a mean squared error of 1/6; the network
//! must remember the marked values across the sequence. Batches are padded
//! (variable lengths, batch-major).
//!
//! **Model.** One LSTM layer (f32 on the GPU) whose output at each
//! sequence's last valid step goes through a linear head (on the host) to
//! one number; MSE loss. Backward: the head on the host, then
//! `backward_data` and `backward_weights` on the GPU; Adam on the flat
//! weight space.
//!
//! Without a GPU it says what it needs, then trains a smaller LSTM with the
//! f64 reference (`cudnn::reference::rnn`) on the CPU, the same code path
//! otherwise, and reports that run. Exit status 0 when the trained loss is
//! below a quarter of the baseline's 1/6 on the device run (or a half, on
//! the CPU fallback); 1 otherwise, and 1 without a GPU.

use std::process::ExitCode;

use cudnn::dnn::*;
use cudnn::reference::rnn as rr;
use cudnn::runtime::{Device, DeviceBuffer, Stream};

struct Rng(u64);
impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
    fn below(&mut self, n: usize) -> usize {
        ((self.unit() * n as f64) as usize).min(n - 1)
    }
}

/// A padded batch: `x` `[batch, max_len, 2]`, lengths, targets.
struct Batch {
    x: Vec<f64>,
    lengths: Vec<usize>,
    targets: Vec<f64>,
}

fn batch(rng: &mut Rng, n: usize, min_len: usize, max_len: usize) -> Batch {
    let mut x = vec![0.0; n * max_len * 2];
    let mut lengths = Vec::with_capacity(n);
    let mut targets = Vec::with_capacity(n);
    for b in 0..n {
        let len = min_len + rng.below(max_len - min_len + 1);
        let i = rng.below(len);
        let mut j = rng.below(len - 1);
        if j >= i {
            j += 1;
        }
        let mut sum = 0.0;
        for t in 0..len {
            let v = rng.unit();
            let o = (b * max_len + t) * 2;
            x[o] = v;
            if t == i || t == j {
                x[o + 1] = 1.0;
                sum += v;
            }
        }
        lengths.push(len);
        targets.push(sum);
    }
    Batch {
        x,
        lengths,
        targets,
    }
}

/// The recurrent part: forward (outputs `[batch, max_len, hidden]`), then
/// backward from the gradient of those outputs to the parameters.
trait Recurrent {
    fn params(&mut self) -> &mut Vec<f64>;
    fn forward(&mut self, b: &Batch, max_len: usize) -> cudnn::Result<Vec<f64>>;
    fn backward(&mut self, b: &Batch, max_len: usize, dy: &[f64]) -> cudnn::Result<Vec<f64>>;
}

/// The f64 reference on the CPU.
struct Cpu {
    cfg: RnnConfig,
    params: Vec<f64>,
}

impl Recurrent for Cpu {
    fn params(&mut self) -> &mut Vec<f64> {
        &mut self.params
    }
    fn forward(&mut self, b: &Batch, max_len: usize) -> cudnn::Result<Vec<f64>> {
        let batch = rr::Batch {
            lengths: &b.lengths,
            max_len,
        };
        Ok(rr::forward(&self.cfg, &self.params, &batch, &b.x, None, None)?.y)
    }
    fn backward(&mut self, b: &Batch, max_len: usize, dy: &[f64]) -> cudnn::Result<Vec<f64>> {
        let batch = rr::Batch {
            lengths: &b.lengths,
            max_len,
        };
        Ok(rr::backward(
            &self.cfg,
            &self.params,
            &batch,
            &b.x,
            None,
            None,
            dy,
            None,
            None,
        )?
        .dparams)
    }
}

/// cuDNN on the GPU; the parameters are the flat weight space.
struct Gpu<'r> {
    handle: Handle,
    rnn: &'r RnnDescriptor<'static, f32>,
    params: Vec<f64>,
    state: Option<GpuState<'r>>,
}

struct GpuState<'r> {
    plan: RnnPlan<'r, 'static, f32>,
    x: DeviceBuffer<f32>,
    y: DeviceBuffer<f32>,
    reserve: RnnReserve,
}

fn upload(v: &[f64]) -> cudnn::Result<DeviceBuffer<f32>> {
    DeviceBuffer::from_host(&v.iter().map(|&x| x as f32).collect::<Vec<_>>())
}

fn download(b: &DeviceBuffer<f32>) -> cudnn::Result<Vec<f64>> {
    Ok(b.to_vec()?.into_iter().map(f64::from).collect())
}

impl Recurrent for Gpu<'_> {
    fn params(&mut self) -> &mut Vec<f64> {
        &mut self.params
    }
    fn forward(&mut self, b: &Batch, max_len: usize) -> cudnn::Result<Vec<f64>> {
        let plan = RnnPlan::new(
            &mut self.handle,
            self.rnn,
            RnnDataLayout::BatchMajorUnpacked,
            max_len,
            &b.lengths,
        )?;
        let w = upload(&self.params)?;
        let x = upload(&b.x)?;
        let mut y = DeviceBuffer::<f32>::zeroed(plan.y_desc().len_required())?;
        let mut reserve = plan.alloc_reserve()?;
        plan.forward(
            &mut self.handle,
            x.as_slice(),
            y.as_slice_mut(),
            w.as_slice(),
            RnnStates::default(),
            RnnStatesMut::default(),
            Some(&mut reserve),
        )?;
        self.handle.stream().synchronize()?;
        let out = download(&y)?;
        self.state = Some(GpuState {
            plan,
            x,
            y,
            reserve,
        });
        Ok(out)
    }
    fn backward(&mut self, _b: &Batch, _max_len: usize, dy: &[f64]) -> cudnn::Result<Vec<f64>> {
        let Some(mut s) = self.state.take() else {
            return Err(cudnn::Error::invalid(
                "backward",
                "needs a forward first",
                "none",
            ));
        };
        let w = upload(&self.params)?;
        let dyd = upload(dy)?;
        let mut dx = DeviceBuffer::<f32>::zeroed(s.plan.x_desc().len_required())?;
        s.plan.backward_data(
            &mut self.handle,
            s.y.as_slice(),
            dyd.as_slice(),
            dx.as_slice_mut(),
            w.as_slice(),
            RnnStates::default(),
            RnnStates::default(),
            RnnStatesMut::default(),
            &mut s.reserve,
        )?;
        let mut dw = DeviceBuffer::<f32>::zeroed(s.plan.weight_len())?;
        s.plan.backward_weights(
            &mut self.handle,
            s.x.as_slice(),
            None,
            s.y.as_slice(),
            dw.as_slice_mut(),
            &mut s.reserve,
        )?;
        self.handle.stream().synchronize()?;
        download(&dw)
    }
}

struct Adam {
    m: Vec<f64>,
    v: Vec<f64>,
    t: i32,
    lr: f64,
}

impl Adam {
    fn step(&mut self, p: &mut [f64], g: &[f64]) {
        self.t += 1;
        let (b1, b2) = (0.9f64, 0.999f64);
        for i in 0..p.len() {
            self.m[i] = b1 * self.m[i] + (1.0 - b1) * g[i];
            self.v[i] = b2 * self.v[i] + (1.0 - b2) * g[i] * g[i];
            let mh = self.m[i] / (1.0 - b1.powi(self.t));
            let vh = self.v[i] / (1.0 - b2.powi(self.t));
            p[i] -= self.lr * mh / (vh.sqrt() + 1e-8);
        }
    }
}

struct Setup {
    hidden: usize,
    min_len: usize,
    max_len: usize,
    batch: usize,
    steps: usize,
    lr: f64,
}

/// Train; returns (first 20 steps' mean loss, last 50 steps' mean loss).
fn train(net: &mut dyn Recurrent, s: &Setup, seed: u64) -> cudnn::Result<(f64, f64)> {
    let mut rng = Rng(seed);
    let scale = 1.0 / (s.hidden as f64).sqrt();
    for p in net.params().iter_mut() {
        *p = (rng.unit() * 2.0 - 1.0) * scale;
    }
    let n = net.params().len();
    let mut head: Vec<f64> = (0..s.hidden)
        .map(|_| (rng.unit() * 2.0 - 1.0) * scale)
        .collect();
    let mut head_b = 1.0;
    let mut opt = Adam {
        m: vec![0.0; n],
        v: vec![0.0; n],
        t: 0,
        lr: s.lr,
    };
    let mut opt_head = Adam {
        m: vec![0.0; s.hidden + 1],
        v: vec![0.0; s.hidden + 1],
        t: 0,
        lr: s.lr,
    };
    let mut losses = Vec::with_capacity(s.steps);
    for step in 0..s.steps {
        let b = batch(&mut rng, s.batch, s.min_len, s.max_len);
        let y = net.forward(&b, s.max_len)?;
        let mut dy = vec![0.0; y.len()];
        let mut dhead = vec![0.0; s.hidden + 1];
        let mut loss = 0.0;
        for i in 0..s.batch {
            let o = (i * s.max_len + b.lengths[i] - 1) * s.hidden;
            let h = &y[o..o + s.hidden];
            let pred = head_b + head.iter().zip(h).map(|(w, v)| w * v).sum::<f64>();
            let err = pred - b.targets[i];
            loss += err * err / s.batch as f64;
            let g = 2.0 * err / s.batch as f64;
            for k in 0..s.hidden {
                dhead[k] += g * h[k];
                dy[o + k] = g * head[k];
            }
            dhead[s.hidden] += g;
        }
        let dp = net.backward(&b, s.max_len, &dy)?;
        let mut hp: Vec<f64> = head.iter().copied().chain([head_b]).collect();
        opt_head.step(&mut hp, &dhead);
        head_b = hp[s.hidden];
        head = hp[..s.hidden].to_vec();
        opt.step(net.params(), &dp);
        losses.push(loss);
        if step % 100 == 0 || step + 1 == s.steps {
            println!("step {step:4}: loss {loss:.4}");
        }
    }
    let first = losses.iter().take(20).sum::<f64>() / 20f64.min(losses.len() as f64);
    let tail = losses.len().min(50);
    let last = losses[losses.len() - tail..].iter().sum::<f64>() / tail as f64;
    Ok((first, last))
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

const BASELINE: f64 = 1.0 / 6.0;

fn cpu_fallback() -> ExitCode {
    let cfg = RnnConfig::new(RnnCellMode::Lstm, 2, 8);
    let n = match rr::param_offsets(&cfg) {
        Ok((_, n)) => n,
        Err(e) => {
            eprintln!("rnn_adding: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut cpu = Cpu {
        cfg,
        params: vec![0.0; n],
    };
    let setup = Setup {
        hidden: 8,
        min_len: 4,
        max_len: 8,
        batch: 16,
        steps: 400,
        lr: 0.02,
    };
    println!("rnn_adding: CPU fallback (f64 reference): LSTM 2 -> 8, lengths 4..=8, batch 16");
    match train(&mut cpu, &setup, 7) {
        Ok((first, last)) => {
            println!(
                "rnn_adding (CPU reference): loss {first:.4} -> {last:.4} (baseline {BASELINE:.4})"
            );
            if last < BASELINE / 2.0 {
                println!("rnn_adding (CPU reference): learned");
            } else {
                println!("rnn_adding (CPU reference): did not learn");
            }
        }
        Err(e) => eprintln!("rnn_adding (CPU reference): failed: {e}"),
    }
    ExitCode::FAILURE
}

fn gpu() -> cudnn::Result<bool> {
    Device::new(0)?;
    let stream = Stream::new()?;
    let handle = Handle::new(&stream)?;
    let cfg = RnnConfig::new(RnnCellMode::Lstm, 2, 32);
    let rnn = RnnDescriptor::<f32>::new(&cfg, None)?;
    let mut gpu = Gpu {
        handle,
        rnn: &rnn,
        params: Vec::new(),
        state: None,
    };
    // The weight-space length, from a plan of any batch.
    let n = RnnPlan::new(
        &mut gpu.handle,
        &rnn,
        RnnDataLayout::BatchMajorUnpacked,
        1,
        &[1],
    )?
    .weight_len();
    gpu.params = vec![0.0; n];
    let setup = Setup {
        hidden: 32,
        min_len: 10,
        max_len: 20,
        batch: 64,
        steps: 2000,
        lr: 0.01,
    };
    println!(
        "rnn_adding: LSTM 2 -> 32 on the GPU (cuDNN), lengths 10..=20, batch 64, {} steps",
        setup.steps
    );
    let (first, last) = train(&mut gpu, &setup, 11)?;
    println!("rnn_adding: loss {first:.4} -> {last:.4} (baseline {BASELINE:.4})");
    Ok(last < BASELINE / 4.0)
}

fn main() -> ExitCode {
    if let Some(why) = missing() {
        eprintln!("rnn_adding: cannot run on a GPU: {why}");
        eprintln!(
            "(the cuDNN run needs the CUDA libraries and a CUDA device; `cargo run --example doctor` says what is missing; running the CPU reference instead)"
        );
        return cpu_fallback();
    }
    match gpu() {
        Ok(true) => {
            println!("rnn_adding: ok");
            ExitCode::SUCCESS
        }
        Ok(false) => {
            eprintln!("rnn_adding: the loss did not fall below a quarter of the baseline");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("rnn_adding: failed: {e}");
            ExitCode::FAILURE
        }
    }
}
