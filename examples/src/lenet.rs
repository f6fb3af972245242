//! The LeNet-style network and data set shared by the `lenet` and
//! `ddp_lenet` examples (moved here from `lenet.rs` unchanged, so both
//! train exactly the same model on exactly the same images). See
//! `examples/lenet.rs` for the description.
// Example code: the network and buffers are plain data holders.
#![allow(missing_debug_implementations, missing_docs)]

use cudnn::blas::{self, ComputeType, Layout, Matrix, MatrixMut};
use cudnn::dnn::{
    ActivationDescriptor, AlgoSearch, BatchNormGrads, BatchNormMode, BatchNormParams,
    BatchNormPlan, BatchNormRunning, BatchNormSaved, BatchNormSavedRef, BatchNormStats,
    ConvBackwardBiasPlan, ConvBackwardDataPlan, ConvBackwardFilterPlan, ConvBiasActivationPlan,
    ConvDescriptor, ConvProblem, DeviceTensor, DeviceTensorMut, FilterDescriptor, Handle,
    PlanOptions, PoolingDescriptor, PoolingMode, PoolingPlan, Residual, SoftmaxAlgorithm,
    SoftmaxMode, TensorDescriptor,
};
use cudnn::runtime::{DeviceBuffer, Stream};

pub type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

// ---------------------------------------------------------------------------
// Sizes and training settings

/// Image side, in pixels.
pub const SIDE: usize = 16;
pub const PIXELS: usize = SIDE * SIDE;
pub const CLASSES: usize = 4;
pub const CLASS_NAMES: [&str; CLASSES] = ["horizontal bar", "vertical bar", "diagonal", "square"];
pub const TRAIN_IMAGES: usize = 2048;
pub const TEST_IMAGES: usize = 512;
pub const TRAIN_SEED: u64 = 0x1e4e_7001;
pub const TEST_SEED: u64 = 0x1e4e_7002;
pub const INIT_SEED: u64 = 0x1e4e_7003;
/// Noise added to every pixel: uniform in `[-NOISE, NOISE]`.
pub const NOISE: f32 = 0.3;

pub const BATCH: usize = 64;
pub const EPOCHS: usize = 8;
pub const LEARNING_RATE: f32 = 0.05;

/// conv1: `C1` filters of `K1` x `K1`; conv2: `C2` filters of `K2` x `K2`.
pub const C1: usize = 8;
pub const K1: usize = 5;
pub const C2: usize = 16;
pub const K2: usize = 3;
/// Inputs of the fully connected layer: conv2's channels after two 2x2 poolings.
pub const FEATURES: usize = C2 * (SIDE / 4) * (SIDE / 4);
pub const BN_EPSILON: f64 = 1e-5;
/// The running statistics' update factor once past the first steps.
pub const BN_MOMENTUM: f64 = 0.1;

/// What the run must reach to pass.
pub const MIN_TEST_ACCURACY: f64 = 0.6;

// ---------------------------------------------------------------------------
// The data set, drawn on the host

/// A 64-bit LCG (Knuth's MMIX constants): deterministic, no dependency.
pub struct Lcg(u64);

impl Lcg {
    pub fn new(seed: u64) -> Self {
        Lcg(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    pub fn next_u32(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 32) as u32
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f32 {
        (self.next_u32() >> 8) as f32 / (1u32 << 24) as f32
    }

    /// Uniform in `[-bound, bound)`.
    pub fn symmetric(&mut self, bound: f32) -> f32 {
        bound * (2.0 * self.unit() - 1.0)
    }

    /// Uniform in `lo..=hi` (`lo <= hi`).
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.next_u32() as usize % (hi - lo + 1)
    }
}

/// Images (`len * PIXELS` values, row-major) and their labels.
pub struct Dataset {
    pub images: Vec<f32>,
    pub labels: Vec<usize>,
}

impl Dataset {
    /// `count` images, the classes in turn (so each class has a quarter).
    pub fn generate(count: usize, seed: u64) -> Dataset {
        let mut rng = Lcg::new(seed);
        let mut images = vec![0.0f32; count * PIXELS];
        let labels: Vec<usize> = (0..count).map(|i| i % CLASSES).collect();
        for (img, &class) in images.chunks_exact_mut(PIXELS).zip(&labels) {
            draw(class, &mut rng, img);
        }
        Dataset { images, labels }
    }

    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    pub fn image(&self, i: usize) -> &[f32] {
        &self.images[i * PIXELS..(i + 1) * PIXELS]
    }
}

/// Draw one image of `class` into `img` (`PIXELS` values, zeroed).
pub fn draw(class: usize, rng: &mut Lcg, img: &mut [f32]) {
    let ink = 0.7 + 0.3 * rng.unit();
    let mut set = |r: usize, c: usize| {
        if r < SIDE && c < SIDE {
            img[r * SIDE + c] = ink;
        }
    };
    match class {
        // A bar 1 or 2 pixels thick, 8 to 14 long; vertical is the transpose.
        0 | 1 => {
            let thick = rng.range(1, 2);
            let len = rng.range(8, 14);
            let across = rng.range(1, SIDE - 1 - thick);
            let along = rng.range(0, SIDE - len);
            for t in 0..thick {
                for a in along..along + len {
                    if class == 0 {
                        set(across + t, a);
                    } else {
                        set(a, across + t);
                    }
                }
            }
        }
        // A diagonal, either way, 8 to 14 rows long and 2 pixels wide.
        2 => {
            let len = rng.range(8, 14);
            let r0 = rng.range(0, SIDE - len);
            let c0 = rng.range(0, SIDE - len - 1);
            let anti = rng.range(0, 1) == 1;
            for t in 0..len {
                let c = if anti { c0 + len - 1 - t } else { c0 + t };
                set(r0 + t, c);
                set(r0 + t, c + 1);
            }
        }
        // A square outline with sides of 5 to 10.
        _ => {
            let s = rng.range(5, 10);
            let r0 = rng.range(0, SIDE - s);
            let c0 = rng.range(0, SIDE - s);
            for t in 0..s {
                set(r0, c0 + t);
                set(r0 + s - 1, c0 + t);
                set(r0 + t, c0);
                set(r0 + t, c0 + s - 1);
            }
        }
    }
    for v in img.iter_mut() {
        *v += rng.symmetric(NOISE);
    }
}

/// The images side by side, as text (one character per pixel).
pub fn render(images: &[&[f32]]) -> String {
    let mut s = String::new();
    for r in 0..SIDE {
        for (i, img) in images.iter().enumerate() {
            if i > 0 {
                s.push_str("    ");
            }
            for &v in &img[r * SIDE..(r + 1) * SIDE] {
                s.push(match v {
                    v if v < 0.35 => ' ',
                    v if v < 0.55 => '.',
                    v if v < 0.75 => '+',
                    _ => '#',
                });
            }
        }
        s.push('\n');
    }
    s
}

/// Shuffle `order` in place (Fisher-Yates).
pub fn shuffle(order: &mut [usize], rng: &mut Lcg) {
    for i in (1..order.len()).rev() {
        order.swap(i, rng.range(0, i));
    }
}

// ---------------------------------------------------------------------------
// The network on the GPU

/// A trainable tensor: its value, its gradient, and a flat `[1, n, 1, 1]`
/// descriptor over both for the SGD step.
pub struct Param {
    pub desc: TensorDescriptor<f32>,
    pub value: DeviceBuffer<f32>,
    pub grad: DeviceBuffer<f32>,
}

impl Param {
    pub fn new(init: &[f32]) -> cudnn::Result<Param> {
        Ok(Param {
            desc: TensorDescriptor::nchw(1, init.len(), 1, 1)?,
            value: DeviceBuffer::from_host(init)?,
            grad: DeviceBuffer::zeroed(init.len())?,
        })
    }

    /// Uniform in `[-bound, bound)`.
    pub fn uniform(len: usize, bound: f32, rng: &mut Lcg) -> cudnn::Result<Param> {
        let init: Vec<f32> = (0..len).map(|_| rng.symmetric(bound)).collect();
        Param::new(&init)
    }

    pub fn filled(len: usize, v: f32) -> cudnn::Result<Param> {
        Param::new(&vec![v; len])
    }

    /// `value -= lr * grad`, on the device: `cudnnAddTensor` computes
    /// `value = alpha * grad + beta * value` with alpha `-lr`, beta 1.
    pub fn sgd(&mut self, dnn: &mut Handle, lr: f32) -> cudnn::Result<()> {
        dnn.add_tensor(
            -lr,
            DeviceTensor::new(&self.desc, &self.grad)?,
            1.0,
            DeviceTensorMut::new(&self.desc, &mut self.value)?,
        )
    }
}

/// An error unless `got` is `want` (the layer sizes this file assumes).
pub fn expect_shape(what: &str, got: &[usize], want: &[usize]) -> AnyResult<()> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: shape {got:?}, expected {want:?}").into())
    }
}

/// Every descriptor, plan and buffer of the network, for one batch size.
/// Buffer names: `x` input, `a1` conv1 + ReLU, `n1` batch norm, `p1`
/// pool1, `a2` conv2 + ReLU, `p2` pool2, `logits`, `logp` (log-softmax);
/// a `d` prefix is the gradient of the loss with respect to it (`dz1`,
/// `dz2`: before the ReLUs).
pub struct Net {
    pub stream: Stream,
    pub dnn: Handle,
    pub blas: blas::Handle,

    pub conv1: ConvBiasActivationPlan<f32>,
    pub conv1_filter: ConvBackwardFilterPlan<f32>,
    pub conv1_bias: ConvBackwardBiasPlan<f32>,
    pub bn1: BatchNormPlan<f32>,
    pub pool1: PoolingPlan<f32>,
    pub conv2: ConvBiasActivationPlan<f32>,
    pub conv2_data: ConvBackwardDataPlan<f32>,
    pub conv2_filter: ConvBackwardFilterPlan<f32>,
    pub conv2_bias: ConvBackwardBiasPlan<f32>,
    pub pool2: PoolingPlan<f32>,
    pub relu: ActivationDescriptor,
    /// `[BATCH, CLASSES, 1, 1]`: logits, log-probabilities and their gradients.
    pub logits_desc: TensorDescriptor<f32>,
    /// `[1, CLASSES, 1, 1]`: the FC bias, broadcast over the batch.
    pub fc_bias_desc: TensorDescriptor<f32>,

    pub w1: Param,
    pub b1: Param,
    pub gamma1: Param,
    pub beta1: Param,
    pub w2: Param,
    pub b2: Param,
    /// FC weights, `CLASSES x FEATURES`, row-major.
    pub w3: Param,
    pub b3: Param,
    pub running_mean: DeviceBuffer<f32>,
    pub running_var: DeviceBuffer<f32>,
    pub saved_mean: DeviceBuffer<f32>,
    pub saved_inv_std: DeviceBuffer<f32>,
    pub bn_updates: u32,

    pub x: DeviceBuffer<f32>,
    pub a1: DeviceBuffer<f32>,
    pub n1: DeviceBuffer<f32>,
    pub p1: DeviceBuffer<f32>,
    pub a2: DeviceBuffer<f32>,
    pub p2: DeviceBuffer<f32>,
    pub logits: DeviceBuffer<f32>,
    pub logp: DeviceBuffer<f32>,
    /// `BATCH` ones: the FC bias gradient is `dlogitsᵀ · ones`.
    pub ones: DeviceBuffer<f32>,

    pub dlogp: DeviceBuffer<f32>,
    pub dlogits: DeviceBuffer<f32>,
    pub dp2: DeviceBuffer<f32>,
    pub da2: DeviceBuffer<f32>,
    pub dz2: DeviceBuffer<f32>,
    pub dp1: DeviceBuffer<f32>,
    pub dn1: DeviceBuffer<f32>,
    pub da1: DeviceBuffer<f32>,
    pub dz1: DeviceBuffer<f32>,
}

impl Net {
    pub fn new(stream: &Stream, rng: &mut Lcg) -> AnyResult<Net> {
        let mut dnn = Handle::new(stream)?;
        let blas = blas::Handle::new(stream)?;
        let opts = PlanOptions::new(AlgoSearch::Heuristic);
        let relu = ActivationDescriptor::relu()?;

        // conv1 (+ bias + ReLU) and its gradients; no data gradient (the input).
        let x_desc = TensorDescriptor::<f32>::nchw(BATCH, 1, SIDE, SIDE)?;
        let w1_desc = FilterDescriptor::<f32>::nchw(C1, 1, K1, K1)?;
        let conv1_desc = ConvDescriptor::new_2d([K1 / 2, K1 / 2], [1, 1], [1, 1])?;
        let fwd1 = ConvProblem::forward(&x_desc, &w1_desc, &conv1_desc)?;
        expect_shape(
            "conv1 output",
            fwd1.output_shape(),
            &[BATCH, C1, SIDE, SIDE],
        )?;
        let conv1 = fwd1.plan_bias_activation(&mut dnn, &opts, &relu)?;
        let conv1_filter =
            ConvProblem::backward_filter(&x_desc, &w1_desc, &conv1_desc)?.plan(&mut dnn, &opts)?;
        let conv1_bias = fwd1.backward_bias_plan()?;

        let bn1 = BatchNormPlan::new(
            BatchNormMode::Spatial,
            TensorDescriptor::nchw(BATCH, C1, SIDE, SIDE)?,
            BN_EPSILON,
        )?;
        expect_shape("bn1 parameters", bn1.param_desc().shape(), &[1, C1, 1, 1])?;

        let max_2x2 = || PoolingDescriptor::new_2d(PoolingMode::Max, [2, 2], [0, 0], [2, 2]);
        let pool1 = PoolingPlan::new(max_2x2()?, TensorDescriptor::nchw(BATCH, C1, SIDE, SIDE)?)?;
        let (h1, h2) = (SIDE / 2, SIDE / 4);
        expect_shape("pool1 output", pool1.y_desc().shape(), &[BATCH, C1, h1, h1])?;

        // conv2 (+ bias + ReLU) and its three gradients.
        let p1_desc = pool1.y_desc();
        let w2_desc = FilterDescriptor::<f32>::nchw(C2, C1, K2, K2)?;
        let conv2_desc = ConvDescriptor::new_2d([K2 / 2, K2 / 2], [1, 1], [1, 1])?;
        let fwd2 = ConvProblem::forward(p1_desc, &w2_desc, &conv2_desc)?;
        expect_shape("conv2 output", fwd2.output_shape(), &[BATCH, C2, h1, h1])?;
        let conv2 = fwd2.plan_bias_activation(&mut dnn, &opts, &relu)?;
        let conv2_data =
            ConvProblem::backward_data(p1_desc, &w2_desc, &conv2_desc)?.plan(&mut dnn, &opts)?;
        let conv2_filter =
            ConvProblem::backward_filter(p1_desc, &w2_desc, &conv2_desc)?.plan(&mut dnn, &opts)?;
        let conv2_bias = fwd2.backward_bias_plan()?;

        let pool2 = PoolingPlan::new(max_2x2()?, TensorDescriptor::nchw(BATCH, C2, h1, h1)?)?;
        expect_shape("pool2 output", pool2.y_desc().shape(), &[BATCH, C2, h2, h2])?;

        // Parameters: He-style uniform initial weights, zero biases, batch
        // norm scale 1 and shift 0; running mean 0 and variance 1.
        let fan_in = |n: usize| (6.0 / n as f32).sqrt();
        let w1 = Param::uniform(w1_desc.element_count(), fan_in(K1 * K1), rng)?;
        let w2 = Param::uniform(w2_desc.element_count(), fan_in(C1 * K2 * K2), rng)?;
        let w3 = Param::uniform(CLASSES * FEATURES, (3.0 / FEATURES as f32).sqrt(), rng)?;
        let len = |d: &TensorDescriptor<f32>| d.element_count();
        let zeros = |n: usize| DeviceBuffer::<f32>::zeroed(n);

        Ok(Net {
            stream: stream.clone(),
            b1: Param::filled(C1, 0.0)?,
            gamma1: Param::filled(C1, 1.0)?,
            beta1: Param::filled(C1, 0.0)?,
            b2: Param::filled(C2, 0.0)?,
            b3: Param::filled(CLASSES, 0.0)?,
            w1,
            w2,
            w3,
            running_mean: zeros(C1)?,
            running_var: DeviceBuffer::from_host(&[1.0f32; C1])?,
            saved_mean: zeros(C1)?,
            saved_inv_std: zeros(C1)?,
            bn_updates: 0,

            x: zeros(len(&x_desc))?,
            a1: zeros(len(conv1.output()))?,
            n1: zeros(len(conv1.output()))?,
            p1: zeros(len(pool1.y_desc()))?,
            a2: zeros(len(conv2.output()))?,
            p2: zeros(len(pool2.y_desc()))?,
            logits: zeros(BATCH * CLASSES)?,
            logp: zeros(BATCH * CLASSES)?,
            ones: DeviceBuffer::from_host(&[1.0f32; BATCH])?,

            dlogp: zeros(BATCH * CLASSES)?,
            dlogits: zeros(BATCH * CLASSES)?,
            dp2: zeros(len(pool2.y_desc()))?,
            da2: zeros(len(conv2.output()))?,
            dz2: zeros(len(conv2.output()))?,
            dp1: zeros(len(pool1.y_desc()))?,
            dn1: zeros(len(conv1.output()))?,
            da1: zeros(len(conv1.output()))?,
            dz1: zeros(len(conv1.output()))?,

            logits_desc: TensorDescriptor::nchw(BATCH, CLASSES, 1, 1)?,
            fc_bias_desc: TensorDescriptor::nchw(1, CLASSES, 1, 1)?,
            dnn,
            blas,
            conv1,
            conv1_filter,
            conv1_bias,
            bn1,
            pool1,
            conv2,
            conv2_data,
            conv2_filter,
            conv2_bias,
            pool2,
            relu,
        })
    }

    pub fn describe(&self) {
        let params = [
            &self.w1,
            &self.b1,
            &self.gamma1,
            &self.beta1,
            &self.w2,
            &self.b2,
            &self.w3,
            &self.b3,
        ]
        .iter()
        .map(|p| p.value.len())
        .sum::<usize>();
        println!("network (f32, NCHW, batch {BATCH}, {params} parameters):");
        println!(
            "  conv1  {K1}x{K1}, 1 -> {C1}, pad {}, + bias + ReLU  -> {:?}   forward {}, filter gradient {}",
            K1 / 2,
            self.conv1.output().shape(),
            self.conv1.conv_plan().algo(),
            self.conv1_filter.algo()
        );
        println!(
            "  bn1    spatial batch norm (training: batch statistics; inference: running ones)"
        );
        println!(
            "  pool1  max 2x2, stride 2                -> {:?}",
            self.pool1.y_desc().shape()
        );
        println!(
            "  conv2  {K2}x{K2}, {C1} -> {C2}, pad {}, + bias + ReLU -> {:?}   forward {}, data gradient {}, filter gradient {}",
            K2 / 2,
            self.conv2.output().shape(),
            self.conv2.conv_plan().algo(),
            self.conv2_data.algo(),
            self.conv2_filter.algo()
        );
        println!(
            "  pool2  max 2x2, stride 2                -> {:?}",
            self.pool2.y_desc().shape()
        );
        println!("  fc     GEMM {FEATURES} -> {CLASSES}, + bias          -> {BATCH} x {CLASSES}");
        println!("  loss   log-softmax (cuDNN), cross-entropy (host)");
    }

    /// Upload one batch of images (`indices` into `data`), and, for
    /// training, the gradient of the loss with respect to the
    /// log-probabilities: `-1 / BATCH` at each image's label, 0 elsewhere
    /// (the loss is `-mean(logp[label])`). Returns the labels.
    pub fn load(&mut self, data: &Dataset, indices: &[usize]) -> AnyResult<Vec<usize>> {
        // The previous step's kernels may still read `x` and `dlogp`.
        self.stream.synchronize()?;
        let mut images = Vec::with_capacity(BATCH * PIXELS);
        let mut labels = Vec::with_capacity(BATCH);
        let mut dlogp = vec![0.0f32; BATCH * CLASSES];
        for (row, &i) in indices.iter().enumerate() {
            images.extend_from_slice(data.image(i));
            labels.push(data.labels[i]);
            dlogp[row * CLASSES + data.labels[i]] = -1.0 / BATCH as f32;
        }
        self.x.copy_from_host(&images)?;
        self.dlogp.copy_from_host(&dlogp)?;
        Ok(labels)
    }

    /// The forward pass, from `x` to `logp`. `training`: batch norm
    /// normalizes with the batch's statistics, updates the running ones and
    /// saves what the backward pass needs; otherwise (inference) it uses the
    /// running statistics.
    pub fn forward(&mut self, training: bool) -> AnyResult<()> {
        let dnn = &mut self.dnn;
        // a1 = relu(conv(x, w1) + b1)
        self.conv1.run(
            dnn,
            1.0,
            &self.x,
            &self.w1.value,
            Residual::None,
            &self.b1.value,
            &mut self.a1,
        )?;
        // n1 = batch_norm(a1)
        let params = BatchNormParams {
            scale: self.gamma1.value.as_slice(),
            bias: self.beta1.value.as_slice(),
        };
        if training {
            // 1 on the first step (replacing the initial guesses), then a
            // cumulative average until it reaches the momentum.
            let factor = (1.0 / f64::from(self.bn_updates + 1)).max(BN_MOMENTUM);
            self.bn1.forward_training(
                dnn,
                1.0,
                0.0,
                &self.a1,
                &mut self.n1,
                params,
                factor,
                BatchNormRunning {
                    mean: self.running_mean.as_slice_mut(),
                    variance: self.running_var.as_slice_mut(),
                },
                Some(BatchNormSaved {
                    mean: self.saved_mean.as_slice_mut(),
                    inv_variance: self.saved_inv_std.as_slice_mut(),
                }),
            )?;
            self.bn_updates += 1;
        } else {
            self.bn1.forward_inference(
                dnn,
                1.0,
                0.0,
                &self.a1,
                &mut self.n1,
                params,
                BatchNormStats {
                    mean: self.running_mean.as_slice(),
                    variance: self.running_var.as_slice(),
                },
            )?;
        }
        // p1 = maxpool(n1); a2 = relu(conv(p1, w2) + b2); p2 = maxpool(a2)
        self.pool1.forward(dnn, 1.0, &self.n1, 0.0, &mut self.p1)?;
        self.conv2.run(
            dnn,
            1.0,
            &self.p1,
            &self.w2.value,
            Residual::None,
            &self.b2.value,
            &mut self.a2,
        )?;
        self.pool2.forward(dnn, 1.0, &self.a2, 0.0, &mut self.p2)?;
        // logits (BATCH x CLASSES) = p2 (BATCH x FEATURES, the NCHW tensor
        // flattened per image) · w3ᵀ, then + b3 broadcast over the batch.
        self.blas.gemm(
            1.0,
            Matrix::new(&self.p2, Layout::row_major(BATCH, FEATURES)),
            Matrix::new(&self.w3.value, Layout::row_major(CLASSES, FEATURES).t()),
            0.0,
            MatrixMut::new(&mut self.logits, Layout::row_major(BATCH, CLASSES)),
            ComputeType::F32,
        )?;
        dnn.add_tensor(
            1.0,
            DeviceTensor::new(&self.fc_bias_desc, &self.b3.value)?,
            1.0,
            DeviceTensorMut::new(&self.logits_desc, &mut self.logits)?,
        )?;
        // logp = log_softmax(logits), per image.
        dnn.softmax_forward(
            SoftmaxAlgorithm::Log,
            SoftmaxMode::Instance,
            1.0,
            DeviceTensor::new(&self.logits_desc, &self.logits)?,
            0.0,
            DeviceTensorMut::new(&self.logits_desc, &mut self.logp)?,
        )?;
        Ok(())
    }

    /// The log-probabilities of the last forward pass, `BATCH x CLASSES`.
    pub fn read_logp(&self) -> AnyResult<Vec<f32>> {
        self.stream.synchronize()?;
        Ok(self.logp.to_vec()?)
    }

    /// The backward pass after a training forward pass: every parameter's
    /// gradient, from `dlogp` (see [`load`](Self::load)). Each op writes its
    /// output with beta 0, so nothing needs zeroing between steps.
    pub fn backward(&mut self) -> AnyResult<()> {
        let dnn = &mut self.dnn;
        // dlogits = dlogp - softmax * sum(dlogp) = (softmax - onehot) / BATCH.
        dnn.softmax_backward(
            SoftmaxAlgorithm::Log,
            SoftmaxMode::Instance,
            1.0,
            DeviceTensor::new(&self.logits_desc, &self.logp)?,
            DeviceTensor::new(&self.logits_desc, &self.dlogp)?,
            0.0,
            DeviceTensorMut::new(&self.logits_desc, &mut self.dlogits)?,
        )?;
        // FC: dw3 = dlogitsᵀ · p2; db3 = dlogitsᵀ · ones; dp2 = dlogits · w3.
        let dlogits = Matrix::new(&self.dlogits, Layout::row_major(BATCH, CLASSES));
        self.blas.gemm(
            1.0,
            dlogits.t(),
            Matrix::new(&self.p2, Layout::row_major(BATCH, FEATURES)),
            0.0,
            MatrixMut::new(&mut self.w3.grad, Layout::row_major(CLASSES, FEATURES)),
            ComputeType::F32,
        )?;
        self.blas.gemm(
            1.0,
            dlogits.t(),
            Matrix::new(&self.ones, Layout::col_major(BATCH, 1)),
            0.0,
            MatrixMut::new(&mut self.b3.grad, Layout::col_major(CLASSES, 1)),
            ComputeType::F32,
        )?;
        self.blas.gemm(
            1.0,
            dlogits,
            Matrix::new(&self.w3.value, Layout::row_major(CLASSES, FEATURES)),
            0.0,
            MatrixMut::new(&mut self.dp2, Layout::row_major(BATCH, FEATURES)),
            ComputeType::F32,
        )?;
        // pool2, then conv2's ReLU. The fused forward keeps only the ReLU's
        // output a2, so it stands in for the input too: relu'(z) = [z > 0]
        // = [relu(z) > 0].
        self.pool2
            .backward(dnn, 1.0, &self.p2, &self.dp2, &self.a2, 0.0, &mut self.da2)?;
        let a2_desc = self.conv2.output();
        dnn.activation_backward(
            &self.relu,
            1.0,
            DeviceTensor::new(a2_desc, &self.a2)?,
            DeviceTensor::new(a2_desc, &self.da2)?,
            DeviceTensor::new(a2_desc, &self.a2)?,
            0.0,
            DeviceTensorMut::new(a2_desc, &mut self.dz2)?,
        )?;
        // conv2: bias, filter and data gradients.
        self.conv2_bias
            .run(dnn, 1.0, &self.dz2, 0.0, &mut self.b2.grad)?;
        self.conv2_filter
            .run(dnn, 1.0, &self.p1, &self.dz2, 0.0, &mut self.w2.grad)?;
        self.conv2_data
            .run(dnn, 1.0, &self.w2.value, &self.dz2, 0.0, &mut self.dp1)?;
        // pool1, batch norm (with the statistics its forward pass saved).
        self.pool1
            .backward(dnn, 1.0, &self.p1, &self.dp1, &self.n1, 0.0, &mut self.dn1)?;
        self.bn1.backward(
            dnn,
            (1.0, 0.0),
            (1.0, 0.0),
            &self.a1,
            &self.dn1,
            &mut self.da1,
            self.gamma1.value.as_slice(),
            BatchNormGrads {
                dscale: self.gamma1.grad.as_slice_mut(),
                dbias: self.beta1.grad.as_slice_mut(),
            },
            Some(BatchNormSavedRef {
                mean: self.saved_mean.as_slice(),
                inv_variance: self.saved_inv_std.as_slice(),
            }),
        )?;
        // conv1's ReLU (as for conv2), then its bias and filter gradients.
        let a1_desc = self.conv1.output();
        dnn.activation_backward(
            &self.relu,
            1.0,
            DeviceTensor::new(a1_desc, &self.a1)?,
            DeviceTensor::new(a1_desc, &self.da1)?,
            DeviceTensor::new(a1_desc, &self.a1)?,
            0.0,
            DeviceTensorMut::new(a1_desc, &mut self.dz1)?,
        )?;
        self.conv1_bias
            .run(dnn, 1.0, &self.dz1, 0.0, &mut self.b1.grad)?;
        self.conv1_filter
            .run(dnn, 1.0, &self.x, &self.dz1, 0.0, &mut self.w1.grad)?;
        Ok(())
    }

    /// Every trainable parameter, in a fixed order (for data-parallel
    /// training: their gradients are what the ranks average).
    pub fn params_mut(&mut self) -> [&mut Param; 8] {
        [
            &mut self.w1,
            &mut self.b1,
            &mut self.gamma1,
            &mut self.beta1,
            &mut self.w2,
            &mut self.b2,
            &mut self.w3,
            &mut self.b3,
        ]
    }

    /// One SGD step on every parameter.
    pub fn sgd(&mut self, lr: f32) -> cudnn::Result<()> {
        for p in [
            &mut self.w1,
            &mut self.b1,
            &mut self.gamma1,
            &mut self.beta1,
            &mut self.w2,
            &mut self.b2,
            &mut self.w3,
            &mut self.b3,
        ] {
            p.sgd(&mut self.dnn, lr)?;
        }
        Ok(())
    }
}

/// The summed loss `-logp[label]` and the number of correct predictions of
/// one batch. The cross-entropy is computed here on the host, from the
/// log-probabilities cuDNN computed (64 x 4 values a step; copying them is
/// nothing at this size); its gradient never leaves the device.
pub fn score(logp: &[f32], labels: &[usize]) -> (f64, usize) {
    let mut loss = 0.0;
    let mut correct = 0;
    for (row, &label) in logp.chunks_exact(CLASSES).zip(labels) {
        loss -= f64::from(row[label]);
        if argmax(row) == label {
            correct += 1;
        }
    }
    (loss, correct)
}

pub fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best
}
