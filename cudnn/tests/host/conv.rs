//! Host tier (the real cuDNN, no GPU) for the convolution ops: the
//! descriptor side of [`ConvProblem`] for a suite of real layers (ResNet-50,
//! MobileNetV2 depthwise, dilated, ResNeXt grouped, 3-d, 1-d as 2-d) in NCHW
//! and NHWC and every convolution element type, with output shapes compared
//! against our own formula and against cuDNN
//! (`cudnnGetConvolutionNdForwardOutputDim`); typed errors for every
//! mismatch; the algorithm cache key's sensitivity; plans built from a
//! known choice (no device) and their workspace check; and the clean error
//! planning gives without a device.
//!
//! Mismatched element types (an f32 tensor with an f16 filter) do not
//! compile: that is a `compile_fail` doc test in `cudnn/src/dnn/conv_ops.rs`
//! (`cargo test -p cudnn-rs --doc conv_ops`), next to the `no_run` example that
//! does compile.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::collections::HashSet;
use std::hash::{BuildHasher, RandomState};
use std::panic::{AssertUnwindSafe, catch_unwind};

use cudnn::dnn::*;
use cudnn::runtime::Stream;
use cudnn::sys::cudnn as raw;
use cudnn::{DataType, Error};
use half::{bf16, f16};
use libtest_mimic::Failed;
use support::*;

/// One convolution layer: `x = [n, c, spatial...]`, `w = [k, c / groups, window...]`.
#[derive(Debug, Clone)]
struct Layer {
    name: &'static str,
    n: usize,
    c: usize,
    k: usize,
    spatial: Vec<usize>,
    window: Vec<usize>,
    pad: Vec<usize>,
    stride: Vec<usize>,
    dilation: Vec<usize>,
    groups: usize,
}

#[allow(clippy::too_many_arguments)]
fn layer(
    name: &'static str,
    n: usize,
    c: usize,
    k: usize,
    spatial: &[usize],
    window: &[usize],
    pad: &[usize],
    stride: &[usize],
    dilation: &[usize],
    groups: usize,
) -> Layer {
    Layer {
        name,
        n,
        c,
        k,
        spatial: spatial.to_vec(),
        window: window.to_vec(),
        pad: pad.to_vec(),
        stride: stride.to_vec(),
        dilation: dilation.to_vec(),
        groups,
    }
}

/// The layer suite (batch 32), as the benchmark uses it.
fn layers() -> Vec<Layer> {
    vec![
        layer(
            "resnet50_stem_7x7s2",
            32,
            3,
            64,
            &[224, 224],
            &[7, 7],
            &[3, 3],
            &[2, 2],
            &[1, 1],
            1,
        ),
        layer(
            "resnet50_1x1_56",
            32,
            64,
            256,
            &[56, 56],
            &[1, 1],
            &[0, 0],
            &[1, 1],
            &[1, 1],
            1,
        ),
        layer(
            "resnet50_3x3_56",
            32,
            64,
            64,
            &[56, 56],
            &[3, 3],
            &[1, 1],
            &[1, 1],
            &[1, 1],
            1,
        ),
        layer(
            "resnet50_1x1s2_56",
            32,
            256,
            512,
            &[56, 56],
            &[1, 1],
            &[0, 0],
            &[2, 2],
            &[1, 1],
            1,
        ),
        layer(
            "resnet50_3x3_28",
            32,
            128,
            128,
            &[28, 28],
            &[3, 3],
            &[1, 1],
            &[1, 1],
            &[1, 1],
            1,
        ),
        layer(
            "resnet50_3x3_14",
            32,
            256,
            256,
            &[14, 14],
            &[3, 3],
            &[1, 1],
            &[1, 1],
            &[1, 1],
            1,
        ),
        layer(
            "resnet50_3x3_7",
            32,
            512,
            512,
            &[7, 7],
            &[3, 3],
            &[1, 1],
            &[1, 1],
            &[1, 1],
            1,
        ),
        layer(
            "mobilenetv2_dw3x3s2",
            32,
            144,
            144,
            &[56, 56],
            &[3, 3],
            &[1, 1],
            &[2, 2],
            &[1, 1],
            144,
        ),
        layer(
            "dilated_3x3_d2",
            32,
            256,
            256,
            &[28, 28],
            &[3, 3],
            &[2, 2],
            &[1, 1],
            &[2, 2],
            1,
        ),
        layer(
            "resnext_3x3_g32",
            32,
            128,
            128,
            &[56, 56],
            &[3, 3],
            &[1, 1],
            &[1, 1],
            &[1, 1],
            32,
        ),
        layer(
            "conv3d_3x3x3",
            8,
            64,
            64,
            &[16, 56, 56],
            &[3, 3, 3],
            &[1, 1, 1],
            &[1, 1, 1],
            &[1, 1, 1],
            1,
        ),
        layer(
            "conv1d_k3_as_2d",
            32,
            256,
            256,
            &[1, 1000],
            &[1, 3],
            &[0, 1],
            &[1, 1],
            &[1, 1],
            1,
        ),
        layer(
            "conv1d_k5s2_as_2d",
            32,
            64,
            128,
            &[1, 999],
            &[1, 5],
            &[0, 2],
            &[1, 2],
            &[1, 1],
            1,
        ),
    ]
}

impl Layer {
    fn x_dims(&self) -> Vec<usize> {
        [self.n, self.c]
            .iter()
            .chain(&self.spatial)
            .copied()
            .collect()
    }
    fn w_dims(&self) -> Vec<usize> {
        [self.k, self.c / self.groups]
            .iter()
            .chain(&self.window)
            .copied()
            .collect()
    }
    /// The output shape by the textbook formula (independent of the crate).
    fn y_dims(&self) -> Vec<usize> {
        let mut out = vec![self.n, self.k];
        for i in 0..self.spatial.len() {
            let eff = self.dilation[i] * (self.window[i] - 1) + 1;
            out.push((self.spatial[i] + 2 * self.pad[i] - eff) / self.stride[i] + 1);
        }
        out
    }
    fn conv(&self) -> cudnn::Result<ConvDescriptor> {
        ConvDescriptor::new(&self.pad, &self.stride, &self.dilation)?.with_groups(self.groups)
    }
}

fn channels_last(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![0; dims.len()];
    let mut step = 1;
    s[1] = 1;
    step *= dims[1];
    for i in (2..dims.len()).rev() {
        s[i] = step;
        step *= dims[i];
    }
    s[0] = step;
    s
}

fn packed(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![0; dims.len()];
    let mut step = 1;
    for i in (0..dims.len()).rev() {
        s[i] = step;
        step *= dims[i];
    }
    s
}

fn tensor<T: DataType>(dims: &[usize], layout: TensorFormat) -> cudnn::Result<TensorDescriptor<T>> {
    match layout {
        TensorFormat::Nchw => TensorDescriptor::new(dims, &packed(dims)),
        TensorFormat::Nhwc => TensorDescriptor::new(dims, &channels_last(dims)),
    }
}

fn count(d: &[usize]) -> usize {
    d.iter().product()
}

/// `Err(Error::Mismatch)` whose `what` contains `needle`.
fn expect_mismatch<T: std::fmt::Debug>(r: cudnn::Result<T>, needle: &str) -> TestResult {
    match r {
        Err(Error::Mismatch { what, .. }) if what.contains(needle) => Ok(()),
        other => Err(format!("expected a Mismatch about `{needle}`, got {other:?}").into()),
    }
}

fn expect_invalid<T: std::fmt::Debug>(r: cudnn::Result<T>, needle: &str) -> TestResult {
    match r {
        Err(Error::InvalidArgument { arg, .. }) if arg.contains(needle) => Ok(()),
        other => Err(format!("expected an InvalidArgument about `{needle}`, got {other:?}").into()),
    }
}

// ---------------------------------------------------------------------------
// The layer suite

fn check_layer<T: ConvDataType>(l: &Layer, layout: TensorFormat) -> TestResult {
    let ctx = format!("{} {} {layout:?}", l.name, T::NAME);
    let (xd, wd, yd) = (l.x_dims(), l.w_dims(), l.y_dims());
    let x = tensor::<T>(&xd, layout)?;
    let w = FilterDescriptor::<T>::new(layout, &wd)?;
    let conv = l.conv()?;
    let fwd = ConvProblem::forward(&x, &w, &conv)?;
    let cudnn_shape = conv.output_shape_from_cudnn(&x, &w)?;
    ensure!(
        fwd.output_shape() == yd.as_slice() && cudnn_shape == yd,
        "{ctx}: ours {:?}, cuDNN {cudnn_shape:?}, formula {yd:?}",
        fwd.output_shape()
    );
    // The output follows the input's layout, packed.
    let want_strides = match layout {
        TensorFormat::Nchw => packed(&yd),
        TensorFormat::Nhwc => channels_last(&yd),
    };
    ensure!(
        fwd.y().strides() == want_strides.as_slice(),
        "{ctx}: y strides {:?}, want {want_strides:?}",
        fwd.y().strides()
    );
    let want_compute = if T::NAME == "f64" {
        ComputeType::F64
    } else {
        ComputeType::F32
    };
    ensure!(
        fwd.compute_type() == want_compute,
        "{ctx}: compute type {:?}",
        fwd.compute_type()
    );
    let flops = 2.0 * count(&yd) as f64 * count(&wd[1..]) as f64;
    ensure!(
        fwd.flops() == flops,
        "{ctx}: flops {} != {flops}",
        fwd.flops()
    );

    let bwd_data = ConvProblem::backward_data(&x, &w, &conv)?;
    let bwd_filter = ConvProblem::backward_filter(&x, &w, &conv)?;
    ensure!(
        bwd_data.output_shape() == yd.as_slice() && bwd_filter.output_shape() == yd.as_slice(),
        "{ctx}: backward problems disagree on dy"
    );
    ensure!(
        bwd_data.direction() == ConvDirection::BackwardData
            && bwd_filter.direction() == ConvDirection::BackwardFilter
            && fwd.direction() == ConvDirection::Forward,
        "{ctx}: directions"
    );

    // Buffer lengths: exact is fine, one short names the buffer of the pass.
    let (xn, wn, yn) = (count(&xd), count(&wd), count(&yd));
    fwd.check_buffers(xn, wn, yn)?;
    fwd.check_buffers(xn + 7, wn, yn + 1)?;
    expect_mismatch(fwd.check_buffers(xn - 1, wn, yn), "x buffer")?;
    expect_mismatch(fwd.check_buffers(xn, wn - 1, yn), "w buffer")?;
    expect_mismatch(fwd.check_buffers(xn, wn, yn - 1), "y buffer")?;
    expect_mismatch(bwd_data.check_buffers(xn - 1, wn, yn), "dx buffer")?;
    expect_mismatch(bwd_data.check_buffers(xn, wn, yn - 1), "dy buffer")?;
    expect_mismatch(bwd_filter.check_buffers(xn, wn - 1, yn), "dw buffer")?;
    expect_mismatch(bwd_filter.check_buffers(xn, wn, 0), "dy buffer")?;

    // Bias gradient: db is [1, k, 1, ...]. bf16 is refused typed (cuDNN's
    // cudnnConvolutionBackwardBias answers NOT_SUPPORTED for it).
    if T::NAME == "bf16" {
        return match bwd_filter.backward_bias_plan() {
            Err(Error::Unsupported { what, .. }) if what.contains("bf16") => Ok(()),
            other => {
                Err(format!("{ctx}: bf16 bias gradient: want Unsupported, got {other:?}").into())
            }
        };
    }
    let bias = bwd_filter.backward_bias_plan()?;
    let mut want_db = vec![1; yd.len()];
    want_db[1] = l.k;
    ensure!(
        bias.db().shape() == want_db.as_slice(),
        "{ctx}: db {:?}",
        bias.db().shape()
    );
    bias.check_buffers(yn, l.k)?;
    expect_mismatch(bias.check_buffers(yn, l.k - 1), "db buffer")?;
    expect_mismatch(bias.check_buffers(yn - 1, l.k), "dy buffer")?;
    Ok(())
}

fn layer_test(l: Layer) -> TestResult {
    for layout in [TensorFormat::Nchw, TensorFormat::Nhwc] {
        check_layer::<f32>(&l, layout)?;
        check_layer::<f64>(&l, layout)?;
        check_layer::<f16>(&l, layout)?;
        check_layer::<bf16>(&l, layout)?;
    }
    Ok(())
}

/// Random valid configurations: our output shape equals cuDNN's.
fn random_shapes_agree() -> TestResult {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = |m: usize| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((seed >> 33) as usize) % m
    };
    let mut checked = 0;
    for _ in 0..400 {
        let spatial = 1 + next(3);
        let groups = [1, 2, 4][next(3)];
        let c = groups * (1 + next(4));
        let k = groups * (1 + next(4));
        let mut xd = vec![1 + next(3), c];
        let mut wd = vec![k, c / groups];
        let (mut pad, mut stride, mut dil) = (vec![], vec![], vec![]);
        for _ in 0..spatial {
            let win = 1 + next(4);
            let d = 1 + next(3);
            let p = next(3);
            let ext = d * (win - 1) + 1;
            xd.push(ext.saturating_sub(2 * p).max(1) + next(9));
            wd.push(win);
            pad.push(p);
            stride.push(1 + next(3));
            dil.push(d);
        }
        let rank = xd.len();
        if rank < 3 {
            continue;
        }
        let layout = if rank >= 4 && next(2) == 1 {
            TensorFormat::Nhwc
        } else {
            TensorFormat::Nchw
        };
        let x = tensor::<f32>(&xd, layout)?;
        let w = FilterDescriptor::<f32>::new(layout, &wd)?;
        let conv = ConvDescriptor::new(&pad, &stride, &dil)?.with_groups(groups)?;
        let ours = ConvProblem::forward(&x, &w, &conv);
        let theirs = conv.output_shape_from_cudnn(&x, &w);
        match (ours, theirs) {
            (Ok(p), Ok(t)) => {
                ensure!(
                    p.output_shape() == t.as_slice(),
                    "{xd:?} {wd:?} {pad:?} {stride:?} {dil:?} g{groups}: ours {:?} cuDNN {t:?}",
                    p.output_shape()
                );
                checked += 1;
            }
            // The padded input smaller than the dilated window: both must refuse.
            (Err(e), Err(_)) => {
                ensure!(
                    e.cudnn_status().is_none(),
                    "our rejection must be our own: {e}"
                );
            }
            (Err(e), Ok(t)) => {
                // We are stricter only where the output would be empty.
                ensure!(
                    t.contains(&0) && e.cudnn_status().is_none(),
                    "we reject what cuDNN accepts ({t:?}): {e}"
                );
            }
            (Ok(p), Err(e)) => {
                return Err(format!(
                    "cuDNN rejects {xd:?} {wd:?} that we accept ({:?}): {e}",
                    p.output_shape()
                )
                .into());
            }
        }
    }
    ensure!(checked > 200, "only {checked} valid configurations");
    eprintln!("{checked} random configurations agree with cuDNN");
    Ok(())
}

// ---------------------------------------------------------------------------
// Typed errors

fn wrong_filter_channels_for_groups() -> TestResult {
    let x = TensorDescriptor::<f32>::nchw(2, 64, 8, 8)?;
    let conv = ConvDescriptor::new_2d([1, 1], [1, 1], [1, 1])?.with_groups(4)?;
    // 64 channels in 4 groups need 16 filter channels, not 64.
    let w = FilterDescriptor::<f32>::nchw(64, 64, 3, 3)?;
    let r = ConvProblem::forward(&x, &w, &conv);
    expect_mismatch(r, "x channels")?;
    let w = FilterDescriptor::<f32>::nchw(64, 16, 3, 3)?;
    ConvProblem::forward(&x, &w, &conv)?;
    // The pass is a type parameter: inferred from the constructor, or named
    // (`ConvProblem::<f32>` is the forward pass).
    ConvProblem::<f32>::forward(&x, &w, &conv)?;
    ConvProblem::<f32, ConvBwdData>::backward_data(&x, &w, &conv)?;
    ConvProblem::<f32, ConvBwdFilter>::backward_filter(&x, &w, &conv)?;
    // Output channels must divide by the groups.
    let w = FilterDescriptor::<f32>::nchw(62, 16, 3, 3)?;
    expect_invalid(ConvProblem::forward(&x, &w, &conv), "output channels")?;
    // Depthwise: groups = c, one filter channel.
    let dw = ConvDescriptor::new_2d([1, 1], [1, 1], [1, 1])?.with_groups(64)?;
    let w = FilterDescriptor::<f32>::nchw(64, 1, 3, 3)?;
    ConvProblem::backward_filter(&x, &w, &dw)?;
    let w = FilterDescriptor::<f32>::nchw(64, 2, 3, 3)?;
    expect_mismatch(ConvProblem::backward_data(&x, &w, &dw), "x channels")?;
    Ok(())
}

fn rank_and_empty_output_errors() -> TestResult {
    let x = TensorDescriptor::<f32>::packed(&[1, 4, 4, 8, 8])?;
    let w = FilterDescriptor::<f32>::nchw(4, 4, 3, 3)?;
    let conv = ConvDescriptor::new_2d([0, 0], [1, 1], [1, 1])?;
    expect_mismatch(ConvProblem::forward(&x, &w, &conv), "rank")?;
    // A window larger than the padded input: the output would be empty.
    let x = TensorDescriptor::<f32>::nchw(1, 4, 2, 2)?;
    let r = ConvProblem::forward(&x, &w, &conv);
    ensure!(
        matches!(&r, Err(Error::InvalidArgument { .. })),
        "expected InvalidArgument, got {r:?}"
    );
    Ok(())
}

fn compute_type_rules() -> TestResult {
    let conv = ConvDescriptor::new_2d([1, 1], [1, 1], [1, 1])?;
    // f64 data with the default (f32) compute type computes in f64.
    let p = ConvProblem::forward(
        &TensorDescriptor::<f64>::nchw(1, 2, 5, 5)?,
        &FilterDescriptor::<f64>::nchw(2, 2, 3, 3)?,
        &conv,
    )?;
    ensure!(
        p.compute_type() == ComputeType::F64,
        "{:?}",
        p.compute_type()
    );
    // f16 may compute in f16 ("true half") when asked.
    let half =
        ConvDescriptor::new_2d([1, 1], [1, 1], [1, 1])?.with_compute_type(ComputeType::F16)?;
    let p = ConvProblem::forward(
        &TensorDescriptor::<f16>::nhwc(1, 8, 5, 5)?,
        &FilterDescriptor::<f16>::nhwc(8, 8, 3, 3)?,
        &half,
    )?;
    ensure!(
        p.compute_type() == ComputeType::F16,
        "{:?}",
        p.compute_type()
    );
    // bf16 cannot; f32 cannot compute in f64.
    expect_invalid(
        ConvProblem::forward(
            &TensorDescriptor::<bf16>::nhwc(1, 8, 5, 5)?,
            &FilterDescriptor::<bf16>::nhwc(8, 8, 3, 3)?,
            &half,
        ),
        "compute type",
    )?;
    let double =
        ConvDescriptor::new_2d([1, 1], [1, 1], [1, 1])?.with_compute_type(ComputeType::F64)?;
    expect_invalid(
        ConvProblem::forward(
            &TensorDescriptor::<f32>::nchw(1, 2, 5, 5)?,
            &FilterDescriptor::<f32>::nchw(2, 2, 3, 3)?,
            &double,
        ),
        "compute type",
    )?;
    Ok(())
}

fn with_y_checks_shape_and_uses_strides() -> TestResult {
    let x = TensorDescriptor::<f32>::nchw(2, 3, 9, 9)?;
    let w = FilterDescriptor::<f32>::nchw(4, 3, 3, 3)?;
    let conv = ConvDescriptor::new_2d([1, 1], [1, 1], [1, 1])?;
    let p = ConvProblem::forward(&x, &w, &conv)?;
    let wrong = TensorDescriptor::<f32>::nchw(2, 4, 8, 9)?;
    expect_mismatch(
        ConvProblem::forward(&x, &w, &conv)?.with_y(&wrong),
        "y shape",
    )?;
    expect_mismatch(
        ConvProblem::backward_data(&x, &w, &conv)?.with_y(&wrong),
        "dy shape",
    )?;
    // A y with padded rows (stride 16 instead of 9): needs a longer buffer.
    let strided = TensorDescriptor::<f32>::new(&[2, 4, 9, 9], &[4 * 9 * 16, 9 * 16, 16, 1])?;
    let p2 = p.with_y(&strided)?;
    let need = strided.len_required();
    ensure!(need > 2 * 4 * 9 * 9, "span {need}");
    p2.check_buffers(2 * 3 * 81, 4 * 27, need)?;
    expect_mismatch(p2.check_buffers(2 * 3 * 81, 4 * 27, 2 * 4 * 81), "y buffer")?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Plans from a known choice (no device): workspace checks, math types

fn small() -> cudnn::Result<(TensorDescriptor<f32>, FilterDescriptor<f32>, ConvDescriptor)> {
    Ok((
        TensorDescriptor::<f32>::nchw(2, 8, 12, 12)?,
        FilterDescriptor::<f32>::nchw(16, 8, 3, 3)?,
        ConvDescriptor::new_2d([1, 1], [1, 1], [1, 1])?,
    ))
}

fn plans_from_choice_check_workspace() -> TestResult {
    let (x, w, conv) = small()?;
    let choice = AlgoChoice {
        algo: 1,
        math_type: MathType::Fma.to_raw().0,
        workspace_bytes: 4096,
    };
    let fwd = ConvProblem::forward(&x, &w, &conv)?.plan_with(choice)?;
    ensure!(
        fwd.algo() == ConvAlgo::IMPLICIT_PRECOMP_GEMM,
        "{}",
        fwd.algo()
    );
    ensure!(
        fwd.math_type() == MathType::Fma && fwd.conv().math_type() == MathType::Fma,
        "math"
    );
    ensure!(fwd.workspace_size() == 4096 && !fwd.from_cache(), "{fwd:?}");
    fwd.check_workspace(4096)?;
    fwd.check_workspace(1 << 20)?;
    expect_mismatch(fwd.check_workspace(4095), "workspace")?;
    ensure!(
        fwd.output().shape() == [2, 16, 12, 12],
        "{:?}",
        fwd.output().shape()
    );

    let bd =
        ConvProblem::backward_data(&x, &w, &conv)?.plan_with(AlgoChoice { algo: 5, ..choice })?;
    ensure!(bd.algo().name() == "WINOGRAD_NONFUSED", "{}", bd.algo());
    ensure!(bd.output().shape() == x.shape(), "dx shape");
    expect_mismatch(bd.check_workspace(0), "workspace")?;
    expect_mismatch(bd.check_buffers(2 * 8 * 144, 16 * 72, 10), "dy buffer")?;

    // Tensor-op math on f32 is TF32: only with the opt-in.
    let bf = ConvProblem::backward_filter(&x, &w, &conv)?.plan_with_policy(
        AlgoChoice {
            algo: 0,
            math_type: MathType::TensorOp.to_raw().0,
            workspace_bytes: 0,
        },
        MathPolicy::AllowTf32,
    )?;
    ensure!(bf.math_type() == MathType::TensorOp, "math");
    bf.check_workspace(0)?;
    ensure!(bf.output().shape() == w.shape(), "dw shape");
    Ok(())
}

fn plan_with_rejects_bad_choices() -> TestResult {
    let (x, w, conv) = small()?;
    let p = ConvProblem::backward_data(&x, &w, &conv)?;
    // Backward data has 6 algorithms.
    expect_invalid(
        p.plan_with(AlgoChoice {
            algo: 6,
            math_type: 0,
            workspace_bytes: 0,
        }),
        "algo",
    )?;
    let r = p.plan_with(AlgoChoice {
        algo: 0,
        math_type: 99,
        workspace_bytes: 0,
    });
    ensure!(matches!(&r, Err(Error::InvalidArgument { .. })), "{r:?}");
    ensure!(
        ConvAlgo::from_raw(ConvDirection::Forward, 8).is_err(),
        "fwd 8"
    );
    ensure!(
        ConvAlgo::from_raw(ConvDirection::BackwardFilter, 7).is_err(),
        "bwd filter 7"
    );
    Ok(())
}

fn fused_plan_checks_buffers() -> TestResult {
    let (x, w, conv) = small()?;
    let p = ConvProblem::forward(&x, &w, &conv)?;
    let relu = ActivationDescriptor::relu()?;
    let choice = AlgoChoice {
        algo: 1,
        math_type: 0,
        workspace_bytes: 256,
    };
    let fused = p.plan_bias_activation_with(choice, &relu, FusedPath::Fused)?;
    ensure!(fused.path() == FusedPath::Fused, "path");
    ensure!(
        fused.bias().shape() == [1, 16, 1, 1],
        "{:?}",
        fused.bias().shape()
    );
    ensure!(fused.workspace_size() == 256, "ws");
    let (xn, wn, yn) = (2 * 8 * 144, 16 * 72, 2 * 16 * 144);
    fused.check_buffers(xn, wn, None, 16, yn)?;
    fused.check_buffers(xn, wn, Some(yn), 16, yn)?;
    expect_mismatch(
        fused.check_buffers(xn, wn, Some(yn - 1), 16, yn),
        "z buffer",
    )?;
    expect_mismatch(fused.check_buffers(xn, wn, None, 15, yn), "bias buffer")?;
    expect_mismatch(fused.check_buffers(xn, wn, None, 16, yn - 1), "y buffer")?;
    let mut fb = p.plan_bias_activation_with(
        choice,
        &ActivationDescriptor::new(ActivationMode::Tanh, NanPropagation::Propagate)?,
        FusedPath::Fallback,
    )?;
    ensure!(fb.path() == FusedPath::Fallback, "fallback");
    // tanh cannot be fused: refused, and the path stays.
    ensure!(
        matches!(
            fb.set_path(FusedPath::Fused),
            Err(Error::Unsupported { .. })
        ),
        "set_path(Fused) for tanh"
    );
    ensure!(
        fb.path() == FusedPath::Fallback,
        "set_path changed the path"
    );
    let mut relu_fb = p.plan_bias_activation_with(choice, &relu, FusedPath::Fallback)?;
    relu_fb.set_path(FusedPath::Fused)?;
    ensure!(relu_fb.path() == FusedPath::Fused, "set_path");
    Ok(())
}

/// The NaN option cuDNN holds in a raw activation descriptor (read back
/// with `cudnnGetActivationDescriptor`, not from our side).
fn nan_in_cudnn(d: &ActivationDescriptor) -> Result<raw::cudnnNanPropagation_t, Failed> {
    let api = raw::load()?;
    let mut mode = raw::cudnnActivationMode_t(u32::MAX);
    let mut nan = raw::cudnnNanPropagation_t(u32::MAX);
    let mut coef = 0.0f64;
    // SAFETY: a live descriptor owned by `d`; valid out-pointers.
    let st =
        unsafe { api.cudnnGetActivationDescriptor(d.as_raw(), &mut mode, &mut nan, &mut coef) }?;
    ensure!(
        api.normalize_status(st) == raw::cudnnStatus_t::CUDNN_STATUS_SUCCESS,
        "cudnnGetActivationDescriptor returned {}",
        st.0
    );
    ensure!(mode == d.mode().to_raw(), "mode {} in cuDNN", mode.0);
    Ok(nan)
}

/// Issue 13, item 1: cuDNN's fused call supports only
/// `CUDNN_NOT_PROPAGATE_NAN`; the fused descriptor must say so in cuDNN
/// whatever the caller chose, and the fallback keeps the caller's choice.
fn fused_descriptor_does_not_propagate_nan() -> TestResult {
    let (x, w, conv) = small()?;
    let p = ConvProblem::forward(&x, &w, &conv)?;
    let precomp = AlgoChoice {
        algo: ConvAlgo::IMPLICIT_PRECOMP_GEMM.to_raw(),
        math_type: MathType::Fma.to_raw().0,
        workspace_bytes: 1 << 16,
    };
    for mode in [ActivationMode::Relu, ActivationMode::Identity] {
        for nan in [NanPropagation::Propagate, NanPropagation::NotPropagate] {
            let act = ActivationDescriptor::new(mode, nan)?;
            let plan = p.plan_bias_activation_with(precomp, &act, FusedPath::Fused)?;
            let fused = nan_in_cudnn(plan.fused_activation())?;
            ensure!(
                fused == raw::cudnnNanPropagation_t::CUDNN_NOT_PROPAGATE_NAN,
                "{mode:?} {nan:?}: the fused descriptor holds NaN option {} in cuDNN",
                fused.0
            );
            ensure!(
                plan.fused_activation().nan_propagation() == NanPropagation::NotPropagate,
                "{mode:?} {nan:?}: fused_activation() says {:?}",
                plan.fused_activation().nan_propagation()
            );
            let fallback = nan_in_cudnn(plan.activation())?;
            ensure!(
                fallback == nan.to_raw() && plan.activation().nan_propagation() == nan,
                "{mode:?} {nan:?}: the fallback descriptor holds {} in cuDNN",
                fallback.0
            );
        }
    }
    // `ActivationDescriptor::relu()` propagates NaN, and is what callers pass.
    let plan =
        p.plan_bias_activation_with(precomp, &ActivationDescriptor::relu()?, FusedPath::Fused)?;
    ensure!(
        nan_in_cudnn(plan.fused_activation())?
            == raw::cudnnNanPropagation_t::CUDNN_NOT_PROPAGATE_NAN,
        "relu(): fused descriptor propagates NaN"
    );
    Ok(())
}

/// Issue 13, item 1: the documented limits of the fused call (ReLU, or
/// identity with IMPLICIT_PRECOMP_GEMM) are typed errors before cuDNN.
fn fused_limits_are_typed_errors() -> TestResult {
    let (x, w, conv) = small()?;
    let p = ConvProblem::forward(&x, &w, &conv)?;
    let choice = |algo: u32| AlgoChoice {
        algo,
        math_type: MathType::Fma.to_raw().0,
        workspace_bytes: 1 << 16,
    };
    let (implicit, precomp, fft) = (0, 1, 4);
    let unsupported = |r: cudnn::Result<ConvBiasActivationPlan<f32>>, what: &str| -> TestResult {
        match r {
            Err(e @ Error::Unsupported { .. }) => {
                ensure!(e.cudnn_status().is_none(), "{what}: a cuDNN status: {e}");
                let msg = e.to_string();
                ensure!(
                    msg.contains("IMPLICIT_PRECOMP_GEMM") && msg.contains("activation"),
                    "{what}: {msg}"
                );
                Ok(())
            }
            other => Err(format!("{what}: expected Unsupported, got {other:?}").into()),
        }
    };
    for mode in [
        ActivationMode::Sigmoid,
        ActivationMode::Tanh,
        ActivationMode::ClippedRelu { ceiling: 6.0 },
        ActivationMode::Elu { alpha: 1.0 },
        ActivationMode::Swish { beta: 1.0 },
    ] {
        let act = ActivationDescriptor::new(mode, NanPropagation::NotPropagate)?;
        for algo in [implicit, precomp, fft] {
            unsupported(
                p.plan_bias_activation_with(choice(algo), &act, FusedPath::Fused),
                &format!("{mode:?} algo {algo}"),
            )?;
            let fb = p.plan_bias_activation_with(choice(algo), &act, FusedPath::Fallback)?;
            ensure!(fb.path() == FusedPath::Fallback, "{mode:?}");
        }
    }
    let identity = ActivationDescriptor::new(ActivationMode::Identity, NanPropagation::Propagate)?;
    for algo in [implicit, fft] {
        unsupported(
            p.plan_bias_activation_with(choice(algo), &identity, FusedPath::Fused),
            &format!("identity algo {algo}"),
        )?;
        let mut fb = p.plan_bias_activation_with(choice(algo), &identity, FusedPath::Fallback)?;
        ensure!(
            matches!(
                fb.set_path(FusedPath::Fused),
                Err(Error::Unsupported { .. })
            ),
            "identity algo {algo}: set_path(Fused)"
        );
    }
    let ok = p.plan_bias_activation_with(choice(precomp), &identity, FusedPath::Fused)?;
    ensure!(ok.path() == FusedPath::Fused, "identity with precomp");
    let relu = ActivationDescriptor::relu()?;
    for algo in [implicit, precomp, fft] {
        let r = p.plan_bias_activation_with(choice(algo), &relu, FusedPath::Fused)?;
        ensure!(r.path() == FusedPath::Fused, "relu algo {algo}");
    }
    // The check itself, for every pairing.
    ensure!(
        check_fusable(
            ActivationMode::Relu,
            ConvAlgo::from_raw(ConvDirection::Forward, fft)?
        )
        .is_ok(),
        "relu fft"
    );
    ensure!(
        check_fusable(ActivationMode::Identity, ConvAlgo::IMPLICIT_PRECOMP_GEMM).is_ok(),
        "identity precomp"
    );
    ensure!(
        check_fusable(
            ActivationMode::Relu,
            ConvAlgo::from_raw(ConvDirection::BackwardData, 1)?
        )
        .is_err(),
        "relu with a backward-data algorithm"
    );
    Ok(())
}

fn temp_file(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("cudnn-rs-host-conv-{}-{name}", std::process::id()))
}

/// The math type cuDNN holds in a plan's convolution descriptor
/// (`cudnnGetConvolutionMathType`).
fn math_in_cudnn(conv: &ConvDescriptor) -> Result<raw::cudnnMathType_t, Failed> {
    let api = raw::load()?;
    let mut m = raw::cudnnMathType_t(u32::MAX);
    // SAFETY: a live descriptor owned by `conv`; a valid out-pointer.
    let st = unsafe { api.cudnnGetConvolutionMathType(conv.as_raw(), &mut m) }?;
    ensure!(
        api.normalize_status(st) == raw::cudnnStatus_t::CUDNN_STATUS_SUCCESS,
        "cudnnGetConvolutionMathType returned {}",
        st.0
    );
    Ok(m)
}

/// Entries written to a cache file and loaded back, as a later process sees them.
fn loaded_entries(name: &str, entries: &[(AlgoKey, AlgoChoice)]) -> Result<AlgoCache, Failed> {
    let path = temp_file(name);
    let writer = AlgoCache::new(16);
    for (k, c) in entries {
        writer.insert(k.clone(), *c);
    }
    writer.save(&path)?;
    let cache = AlgoCache::new(16);
    let n = cache.load(&path);
    let _ = std::fs::remove_file(&path);
    ensure!(n? == entries.len(), "loaded count");
    Ok(cache)
}

/// Issue 13, item 5: a math type from a cache file (or a caller's saved
/// choice) goes through the math policy like a searched one, so f32 never
/// runs TF32 under the default policy.
fn cached_math_goes_through_policy() -> TestResult {
    let (x, w, conv) = small()?;
    let fwd = ConvProblem::forward(&x, &w, &conv)?;
    let opts = PlanOptions::default();
    let key = fwd.algo_key(&opts, 0);
    let default_math = AlgoChoice {
        algo: ConvAlgo::IMPLICIT_PRECOMP_GEMM.to_raw(),
        math_type: raw::cudnnMathType_t::CUDNN_DEFAULT_MATH.0,
        workspace_bytes: 4096,
    };
    let cache = loaded_entries("f32-default-math", &[(key.clone(), default_math)])?;
    let entry = cache.get(&key).ok_or("the loaded entry is missing")?;
    ensure!(entry == default_math, "{entry:?}");
    // CUDNN_DEFAULT_MATH allows TF32 for f32 on Ampere and newer: without
    // the opt-in it must become CUDNN_FMA_MATH, in cuDNN too.
    let plan = fwd.plan_with(entry)?;
    ensure!(
        plan.math_type() == MathType::Fma,
        "plan_with: {:?}",
        plan.math_type()
    );
    let held = math_in_cudnn(plan.conv())?;
    ensure!(
        held == raw::cudnnMathType_t::CUDNN_FMA_MATH,
        "cuDNN holds math type {} for an f32 plan under the default policy",
        held.0
    );
    for policy in [
        MathPolicy::Default,
        MathPolicy::AllowTensorCores,
        MathPolicy::ForbidTensorCores,
    ] {
        let p = fwd.plan_with_policy(entry, policy)?;
        ensure!(
            p.math_type() == MathType::Fma,
            "{policy:?}: {:?}",
            p.math_type()
        );
    }
    let tf32 = fwd.plan_with_policy(entry, MathPolicy::AllowTf32)?;
    ensure!(
        tf32.math_type() == MathType::Default,
        "AllowTf32: {:?}",
        tf32.math_type()
    );
    ensure!(
        math_in_cudnn(tf32.conv())? == raw::cudnnMathType_t::CUDNN_DEFAULT_MATH,
        "AllowTf32 in cuDNN"
    );
    // A tensor-op entry for f32 is TF32: refused without the opt-in.
    let tensor_op = AlgoChoice {
        math_type: raw::cudnnMathType_t::CUDNN_TENSOR_OP_MATH.0,
        ..default_math
    };
    let cache = loaded_entries("f32-tensor-op", &[(key.clone(), tensor_op)])?;
    let entry = cache.get(&key).ok_or("the loaded entry is missing")?;
    expect_invalid(fwd.plan_with(entry), "math")?;
    expect_invalid(
        fwd.plan_with_policy(entry, MathPolicy::ForbidTensorCores),
        "math",
    )?;
    expect_invalid(
        fwd.plan_bias_activation_with(entry, &ActivationDescriptor::relu()?, FusedPath::Fused),
        "math",
    )?;
    let p = fwd.plan_with_policy(entry, MathPolicy::AllowTf32)?;
    ensure!(p.math_type() == MathType::TensorOp, "{:?}", p.math_type());
    // Half data keeps tensor cores under the default policy; forbidding
    // them turns default math into FMA and refuses tensor-op math.
    let xh = TensorDescriptor::<f16>::nchw(2, 8, 12, 12)?;
    let wh = FilterDescriptor::<f16>::nchw(16, 8, 3, 3)?;
    let half = ConvProblem::backward_data(&xh, &wh, &conv)?;
    let hkey = half.algo_key(&opts, 0);
    let cache = loaded_entries(
        "f16",
        &[(
            hkey.clone(),
            AlgoChoice {
                algo: 1,
                ..tensor_op
            },
        )],
    )?;
    let entry = cache.get(&hkey).ok_or("the loaded f16 entry is missing")?;
    ensure!(
        half.plan_with(entry)?.math_type() == MathType::TensorOp,
        "f16 tensor op"
    );
    expect_invalid(
        half.plan_with_policy(entry, MathPolicy::ForbidTensorCores),
        "math",
    )?;
    let dflt = AlgoChoice {
        math_type: raw::cudnnMathType_t::CUDNN_DEFAULT_MATH.0,
        ..entry
    };
    ensure!(
        half.plan_with(dflt)?.math_type() == MathType::Default,
        "f16 default"
    );
    ensure!(
        half.plan_with_policy(dflt, MathPolicy::ForbidTensorCores)?
            .math_type()
            == MathType::Fma,
        "f16 default, tensor cores forbidden"
    );
    // Down-conversion is for half data only.
    let conversion = AlgoChoice {
        math_type: raw::cudnnMathType_t::CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION.0,
        ..default_math
    };
    expect_invalid(
        fwd.plan_with_policy(conversion, MathPolicy::AllowTf32),
        "math",
    )?;
    Ok(())
}

/// Issue 13, item 11: a caller's workspace must be large enough and start
/// at a multiple of `WORKSPACE_ALIGNMENT` (only the address is checked).
fn caller_workspace_alignment() -> TestResult {
    let (x, w, conv) = small()?;
    let p = ConvProblem::forward(&x, &w, &conv)?;
    let choice = AlgoChoice {
        algo: 1,
        math_type: MathType::Fma.to_raw().0,
        workspace_bytes: 4096,
    };
    ensure!(WORKSPACE_ALIGNMENT == 256, "{WORKSPACE_ALIGNMENT}");
    let plan = p.plan_with(choice)?;
    let base = 0x7f00_0000_0000usize;
    let at = |a: usize| a as *const std::ffi::c_void;
    plan.check_caller_workspace(at(base), 4096)?;
    plan.check_caller_workspace(at(base + 256), 1 << 20)?;
    for off in [1, 4, 8, 16, 128, 255] {
        let r = plan.check_caller_workspace(at(base + off), 8192);
        match &r {
            Err(Error::InvalidArgument { arg, rule, .. })
                if arg == "workspace" && rule.contains("256") => {}
            other => return Err(format!("offset {off}: {other:?}").into()),
        }
    }
    expect_mismatch(plan.check_caller_workspace(at(base), 4095), "workspace")?;
    // The fused plan checks the same way.
    let fused =
        p.plan_bias_activation_with(choice, &ActivationDescriptor::relu()?, FusedPath::Fused)?;
    expect_invalid(
        fused
            .conv_plan()
            .check_caller_workspace(at(base + 64), 4096),
        "workspace",
    )?;
    // No workspace needed: any pointer (null included).
    let none = p.plan_with(AlgoChoice {
        workspace_bytes: 0,
        ..choice
    })?;
    none.check_caller_workspace(std::ptr::null(), 0)?;
    none.check_caller_workspace(at(base + 3), 0)?;
    let bd = ConvProblem::backward_data(&x, &w, &conv)?.plan_with(choice)?;
    expect_invalid(bd.check_caller_workspace(at(base + 32), 4096), "workspace")?;
    let bf =
        ConvProblem::backward_filter(&x, &w, &conv)?.plan_with(AlgoChoice { algo: 0, ..choice })?;
    expect_invalid(bf.check_caller_workspace(at(base + 32), 4096), "workspace")?;
    Ok(())
}

// ---------------------------------------------------------------------------
// The cache key

fn key_of<T: ConvDataType, D: ConvPass>(p: &ConvProblem<T, D>, o: &PlanOptions<'_>) -> AlgoKey {
    p.algo_key(o, 0)
}

fn algo_key_changes_with_every_input() -> TestResult {
    let base_opts = PlanOptions::default();
    let conv = |pad: usize, stride: usize, dil: usize, groups: usize| {
        ConvDescriptor::new_2d([pad, pad], [stride, stride], [dil, dil])?.with_groups(groups)
    };
    let x = TensorDescriptor::<f32>::nchw(4, 32, 28, 28)?;
    let w = FilterDescriptor::<f32>::nchw(64, 32, 3, 3)?;
    let base = ConvProblem::forward(&x, &w, &conv(1, 1, 1, 1)?)?;
    let k0 = key_of(&base, &base_opts);

    // The same problem built again: the same key, the same hash.
    let again = key_of(
        &ConvProblem::forward(&x, &w, &conv(1, 1, 1, 1)?)?,
        &base_opts,
    );
    let rs = RandomState::new();
    ensure!(
        again == k0 && rs.hash_one(&again) == rs.hash_one(&k0),
        "rebuilt key differs"
    );

    let mut variants: Vec<(&str, AlgoKey)> = vec![
        (
            "batch",
            key_of(
                &ConvProblem::forward(
                    &TensorDescriptor::<f32>::nchw(8, 32, 28, 28)?,
                    &w,
                    &conv(1, 1, 1, 1)?,
                )?,
                &base_opts,
            ),
        ),
        (
            "spatial",
            key_of(
                &ConvProblem::forward(
                    &TensorDescriptor::<f32>::nchw(4, 32, 30, 28)?,
                    &w,
                    &conv(1, 1, 1, 1)?,
                )?,
                &base_opts,
            ),
        ),
        (
            "stride",
            key_of(
                &ConvProblem::forward(&x, &w, &conv(1, 2, 1, 1)?)?,
                &base_opts,
            ),
        ),
        (
            "pad",
            key_of(
                &ConvProblem::forward(&x, &w, &conv(0, 1, 1, 1)?)?,
                &base_opts,
            ),
        ),
        (
            "dilation",
            key_of(
                &ConvProblem::forward(&x, &w, &conv(1, 1, 2, 1)?)?,
                &base_opts,
            ),
        ),
        (
            "groups",
            key_of(
                &ConvProblem::forward(
                    &x,
                    &FilterDescriptor::<f32>::nchw(64, 16, 3, 3)?,
                    &conv(1, 1, 1, 2)?,
                )?,
                &base_opts,
            ),
        ),
        (
            "filter size",
            key_of(
                &ConvProblem::forward(
                    &x,
                    &FilterDescriptor::<f32>::nchw(64, 32, 5, 5)?,
                    &conv(1, 1, 1, 1)?,
                )?,
                &base_opts,
            ),
        ),
        (
            "layout",
            key_of(
                &ConvProblem::forward(
                    &TensorDescriptor::<f32>::nhwc(4, 32, 28, 28)?,
                    &FilterDescriptor::<f32>::nhwc(64, 32, 3, 3)?,
                    &conv(1, 1, 1, 1)?,
                )?,
                &base_opts,
            ),
        ),
        (
            "x strides only",
            key_of(
                &ConvProblem::forward(
                    &TensorDescriptor::<f32>::nhwc(4, 32, 28, 28)?,
                    &w,
                    &conv(1, 1, 1, 1)?,
                )?,
                &base_opts,
            ),
        ),
        (
            "filter format only",
            key_of(
                &ConvProblem::forward(
                    &x,
                    &FilterDescriptor::<f32>::nhwc(64, 32, 3, 3)?,
                    &conv(1, 1, 1, 1)?,
                )?,
                &base_opts,
            ),
        ),
        (
            "dtype",
            key_of(
                &ConvProblem::forward(
                    &TensorDescriptor::<f16>::nchw(4, 32, 28, 28)?,
                    &FilterDescriptor::<f16>::nchw(64, 32, 3, 3)?,
                    &conv(1, 1, 1, 1)?,
                )?,
                &base_opts,
            ),
        ),
        (
            "mode",
            key_of(
                &ConvProblem::forward(
                    &x,
                    &w,
                    &conv(1, 1, 1, 1)?.with_mode(ConvMode::Convolution)?,
                )?,
                &base_opts,
            ),
        ),
        (
            "direction",
            key_of(
                &ConvProblem::backward_data(&x, &w, &conv(1, 1, 1, 1)?)?,
                &base_opts,
            ),
        ),
        (
            "direction 2",
            key_of(
                &ConvProblem::backward_filter(&x, &w, &conv(1, 1, 1, 1)?)?,
                &base_opts,
            ),
        ),
        (
            "math",
            key_of(&base, &base_opts.with_math(MathPolicy::AllowTf32)),
        ),
        (
            "math 2",
            key_of(&base, &base_opts.with_math(MathPolicy::ForbidTensorCores)),
        ),
        (
            "determinism",
            key_of(&base, &base_opts.with_deterministic(true)),
        ),
        (
            "workspace limit",
            key_of(&base, &base_opts.with_workspace_limit(Some(1 << 20))),
        ),
        (
            "search",
            key_of(&base, &base_opts.with_search(AlgoSearch::Exhaustive)),
        ),
        ("device", base.algo_key(&base_opts, 1)),
    ];
    // A strided y (with_y) changes the key too.
    let strided = TensorDescriptor::<f32>::new(&[4, 64, 28, 28], &[64 * 28 * 32, 28 * 32, 32, 1])?;
    variants.push((
        "y strides",
        key_of(
            &ConvProblem::forward(&x, &w, &conv(1, 1, 1, 1)?)?.with_y(&strided)?,
            &base_opts,
        ),
    ));
    let mut seen = HashSet::new();
    seen.insert(k0.clone());
    for (what, k) in &variants {
        ensure!(*k != k0, "changing {what} did not change the key");
        ensure!(
            seen.insert(k.clone()),
            "changing {what} gave the key of another variant"
        );
    }
    // The key carries the problem's values.
    ensure!(
        k0.x_dims == [4, 32, 28, 28] && k0.y_dims == [4, 64, 28, 28],
        "{k0:?}"
    );
    ensure!(
        k0.compute_type == ComputeType::F32.to_raw().0 && k0.search == CacheSearch::Heuristic,
        "{k0:?}"
    );
    ensure!(
        AlgoSearch::Fixed(ConvAlgo::IMPLICIT_PRECOMP_GEMM).code() == 2,
        "fixed code"
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// No device

fn plan_without_device_is_clean_error() -> TestResult {
    if has_gpu() {
        eprintln!("skipped: host::plan_without_device_is_clean_error: a CUDA device is present");
        return Ok(());
    }
    let (x, w, conv) = small()?;
    let problem = ConvProblem::forward(&x, &w, &conv)?;
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        Handle::new(&Stream::legacy()).and_then(|mut h| {
            problem
                .plan(&mut h, &PlanOptions::default())
                .map(|p| p.algo())
        })
    }));
    let r = outcome.map_err(|_| "planning without a device panicked")?;
    let e = r.err().ok_or("planning without a device must fail")?;
    ensure!(
        e.cudnn_status() == Some(cudnn::sys::cudnn::cudnnStatus_t::CUDNN_STATUS_NOT_INITIALIZED)
            || matches!(e, Error::NoDevice { .. }),
        "expected NOT_INITIALIZED or NoDevice, got {e:?}"
    );
    // The convenience path fails the same way, before any search.
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        Handle::new(&Stream::legacy()).and_then(|mut h| {
            h.conv_forward_plan(&x, &w, &conv, AlgoSearch::Exhaustive)
                .map(|_| ())
        })
    }));
    ensure!(
        matches!(outcome, Ok(Err(_))),
        "conv_forward_plan without a device: {outcome:?}"
    );
    eprintln!("plan without a device: {e}");
    Ok(())
}

// ---------------------------------------------------------------------------
// Unit

fn algo_names_and_options() -> TestResult {
    ensure!(
        ConvAlgo::IMPLICIT_PRECOMP_GEMM.to_string() == "IMPLICIT_PRECOMP_GEMM",
        "name"
    );
    ensure!(
        ConvAlgo::IMPLICIT_PRECOMP_GEMM.direction() == ConvDirection::Forward,
        "direction"
    );
    let o = PlanOptions::default();
    ensure!(
        o.search == AlgoSearch::Heuristic
            && o.math == MathPolicy::Default
            && !o.deterministic
            && o.workspace_limit.is_none()
            && matches!(o.cache, CachePolicy::Global),
        "{o:?}"
    );
    ensure!(CachePolicy::Off.cache().is_none(), "off");
    let own = AlgoCache::new(4);
    ensure!(CachePolicy::Use(&own).cache().is_some(), "use");
    ensure!(
        PlanOptions::new(AlgoSearch::Exhaustive).search.code() == 1,
        "new"
    );
    Ok(())
}

pub fn main() {
    let mut trials = vec![
        unit("conv_algo_names_and_plan_options", algo_names_and_options),
        host("random_output_shapes_agree_with_cudnn", random_shapes_agree),
        host(
            "wrong_filter_channels_for_groups_is_typed_error",
            wrong_filter_channels_for_groups,
        ),
        host(
            "rank_mismatch_and_empty_output_are_typed_errors",
            rank_and_empty_output_errors,
        ),
        host("compute_type_follows_element_type", compute_type_rules),
        host(
            "with_y_checks_shape_and_uses_strides",
            with_y_checks_shape_and_uses_strides,
        ),
        host(
            "plans_from_choice_check_workspace_size",
            plans_from_choice_check_workspace,
        ),
        host(
            "plan_with_rejects_bad_choices",
            plan_with_rejects_bad_choices,
        ),
        host(
            "fused_plan_checks_buffer_lengths",
            fused_plan_checks_buffers,
        ),
        host(
            "fused_descriptor_does_not_propagate_nan",
            fused_descriptor_does_not_propagate_nan,
        ),
        host(
            "fused_limits_are_typed_errors",
            fused_limits_are_typed_errors,
        ),
        host(
            "cached_math_type_goes_through_the_policy",
            cached_math_goes_through_policy,
        ),
        host("caller_workspace_alignment", caller_workspace_alignment),
        host(
            "algo_key_changes_with_every_input",
            algo_key_changes_with_every_input,
        ),
        host(
            "plan_without_device_is_clean_error",
            plan_without_device_is_clean_error,
        ),
    ];
    for l in layers() {
        let name = format!("layer_shapes_{}", l.name);
        trials.push(host(&name, move || layer_test(l)));
    }
    run(trials)
}
