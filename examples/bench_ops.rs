//! `cargo run --release --example bench_ops [-- --quick] [--iters N] [--csv FILE]`:
//! achieved memory bandwidth of the memory-bound cuDNN ops (activation,
//! softmax, pooling, tensor add/op/scale/set/transform, reduction, batch
//! normalization, dropout), forward and backward, for f32 and f16, on an
//! NCHW tensor of 32x64x128x128 (`--quick`: 8x64x64x64, small enough that
//! the host time per call shows), against the device's own copy bandwidth
//! (a device-to-device `cudaMemcpyAsync` of the same tensor). The case
//! list is the body of `bench`, one `row` call per op.
//!
//! Prints a markdown table: the bytes each call must move at least (every
//! input read once, every output written once, blended outputs read too),
//! the device time per call (CUDA events over a timed loop, after a
//! warm-up), the achieved GB/s and its share of the copy's, and the host
//! time to queue one call. An op the device or library refuses is a row
//! with the error, not a stop. `--csv FILE` also writes one row per case in
//! the format of `bench_csv.rs` (read by `xtask/device/compare_torch.py`,
//! which maps each `op` key to its PyTorch counterpart).
//!
//! Not a test: numbers depend on the machine. Exit status 1, with a message
//! saying what is missing, when the CUDA libraries or a device are missing.

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use cudnn::dnn::*;
use cudnn::runtime::{Device, DeviceBuffer, Event, Stream};
use cudnn::{DataType, Scale};
use half::f16;

#[path = "bench_csv.rs"]
mod bench_csv;
use bench_csv::{Csv, CsvRow, dims, flag_value};

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

struct Row {
    /// Machine key (the CSV `op` column).
    key: &'static str,
    /// What the table shows.
    op: String,
    dtype: &'static str,
    bytes: usize,
    /// The timing, or why the op did not run.
    secs: Result<Timing, String>,
}

/// Per call: device seconds and host microseconds to queue.
#[derive(Debug, Clone, Copy)]
struct Timing {
    secs: f64,
    host_us: f64,
}

fn sc<T: DataType>(v: f64) -> T::Scale {
    <T::Scale as Scale>::from_f64(v)
}

/// Time per call of `f`, queued `iters` times on `stream` after two
/// warm-up calls: device time with CUDA events, host time to queue.
fn time(
    stream: &Stream,
    iters: usize,
    mut f: impl FnMut() -> cudnn::Result<()>,
) -> Result<Timing, String> {
    let mut run = || -> cudnn::Result<Timing> {
        for _ in 0..2 {
            f()?;
        }
        stream.synchronize()?;
        let (start, end) = (Event::new()?, Event::new()?);
        start.record(stream)?;
        let t0 = Instant::now();
        for _ in 0..iters {
            f()?;
        }
        let host = t0.elapsed();
        end.record(stream)?;
        end.synchronize()?;
        let n = iters.max(1) as f64;
        Ok(Timing {
            secs: f64::from(Event::elapsed_ms(&start, &end)?) / 1e3 / n,
            host_us: host.as_secs_f64() * 1e6 / n,
        })
    };
    run().map_err(|e| e.to_string())
}

/// Every op for element type `T` on an NCHW tensor of `shape`.
fn bench<T: Float>(
    h: &mut Handle,
    stream: &Stream,
    shape: [usize; 4],
    iters: usize,
    rows: &mut Vec<Row>,
) -> AnyResult<()> {
    let [n, c, hh, w] = shape;
    let xd = TensorDescriptor::<T>::nchw(n, c, hh, w)?;
    let len = xd.len_required();
    let b = len * T::SIZE;
    let mut row = |key: &'static str, op: &str, bytes: usize, secs: Result<Timing, String>| {
        rows.push(Row {
            key,
            op: op.to_string(),
            dtype: T::NAME,
            bytes,
            secs,
        })
    };
    let mut x = DeviceBuffer::<T>::alloc(len)?;
    h.set_tensor(DeviceTensorMut::new(&xd, &mut x)?, T::from_f64(0.5))?;
    let mut y = DeviceBuffer::<T>::zeroed(len)?;
    let dy = x.try_clone()?;
    let mut dx = DeviceBuffer::<T>::zeroed(len)?;

    // The yardstick: a device-to-device copy reads and writes the tensor once.
    row(
        "copy",
        "copy (device to device)",
        2 * b,
        time(stream, iters, || y.copy_from_device_async(&x, stream)),
    );

    for (name, mode, fwd_key, bwd_key) in [
        ("relu", ActivationMode::Relu, "relu_fwd", "relu_bwd"),
        (
            "sigmoid",
            ActivationMode::Sigmoid,
            "sigmoid_fwd",
            "sigmoid_bwd",
        ),
    ] {
        let act = ActivationDescriptor::new(mode, NanPropagation::Propagate)?;
        row(
            fwd_key,
            &format!("activation {name} forward"),
            2 * b,
            time(stream, iters, || {
                h.activation_forward(
                    &act,
                    sc::<T>(1.0),
                    DeviceTensor::new(&xd, &x)?,
                    sc::<T>(0.0),
                    DeviceTensorMut::new(&xd, &mut y)?,
                )
            }),
        );
        row(
            bwd_key,
            &format!("activation {name} backward"),
            4 * b,
            time(stream, iters, || {
                h.activation_backward(
                    &act,
                    sc::<T>(1.0),
                    DeviceTensor::new(&xd, &y)?,
                    DeviceTensor::new(&xd, &dy)?,
                    DeviceTensor::new(&xd, &x)?,
                    sc::<T>(0.0),
                    DeviceTensorMut::new(&xd, &mut dx)?,
                )
            }),
        );
    }

    for (algo, name, fwd_key, bwd_key) in [
        (
            SoftmaxAlgorithm::Accurate,
            "softmax channel",
            "softmax_fwd",
            "softmax_bwd",
        ),
        (
            SoftmaxAlgorithm::Log,
            "log-softmax channel",
            "log_softmax_fwd",
            "log_softmax_bwd",
        ),
    ] {
        row(
            fwd_key,
            &format!("{name} forward"),
            2 * b,
            time(stream, iters, || {
                h.softmax_forward(
                    algo,
                    SoftmaxMode::Channel,
                    sc::<T>(1.0),
                    DeviceTensor::new(&xd, &x)?,
                    sc::<T>(0.0),
                    DeviceTensorMut::new(&xd, &mut y)?,
                )
            }),
        );
        row(
            bwd_key,
            &format!("{name} backward"),
            3 * b,
            time(stream, iters, || {
                h.softmax_backward(
                    algo,
                    SoftmaxMode::Channel,
                    sc::<T>(1.0),
                    DeviceTensor::new(&xd, &y)?,
                    DeviceTensor::new(&xd, &dy)?,
                    sc::<T>(0.0),
                    DeviceTensorMut::new(&xd, &mut dx)?,
                )
            }),
        );
    }

    // Pooling 2x2 stride 2: the output is a quarter of the input.
    let pool = PoolingPlan::new(
        PoolingDescriptor::new_2d(PoolingMode::Max, [2, 2], [0, 0], [2, 2])?,
        TensorDescriptor::<T>::nchw(n, c, hh, w)?,
    )?;
    let ylen = pool.y_desc().len_required();
    let yb = ylen * T::SIZE;
    let mut py = DeviceBuffer::<T>::zeroed(ylen)?;
    let pdy = DeviceBuffer::<T>::zeroed(ylen)?;
    row(
        "maxpool_fwd",
        "max pool 2x2/2 forward",
        b + yb,
        time(stream, iters, || {
            pool.forward(h, sc::<T>(1.0), &x, sc::<T>(0.0), &mut py)
        }),
    );
    row(
        "maxpool_bwd",
        "max pool 2x2/2 backward",
        2 * b + 2 * yb,
        time(stream, iters, || {
            pool.backward(h, sc::<T>(1.0), &py, &pdy, &x, sc::<T>(0.0), &mut dx)
        }),
    );

    // Tensor arithmetic.
    let bias_d = TensorDescriptor::<T>::nchw(1, c, 1, 1)?;
    let bias = DeviceBuffer::<T>::zeroed(c)?;
    row(
        "add_bias",
        "add bias [1,C,1,1] (beta 1)",
        2 * b,
        time(stream, iters, || {
            h.add_tensor(
                sc::<T>(1.0),
                DeviceTensor::new(&bias_d, &bias)?,
                sc::<T>(1.0),
                DeviceTensorMut::new(&xd, &mut y)?,
            )
        }),
    );
    let add = OpTensorDescriptor::<T>::new(OpTensorOp::Add, NanPropagation::Propagate)?;
    row(
        "add",
        "op tensor add (a + b)",
        3 * b,
        time(stream, iters, || {
            h.op_tensor(
                &add,
                sc::<T>(1.0),
                DeviceTensor::new(&xd, &x)?,
                sc::<T>(1.0),
                Some(DeviceTensor::new(&xd, &dy)?),
                sc::<T>(0.0),
                DeviceTensorMut::new(&xd, &mut y)?,
            )
        }),
    );
    row(
        "scale",
        "scale",
        2 * b,
        time(stream, iters, || {
            h.scale_tensor(DeviceTensorMut::new(&xd, &mut y)?, sc::<T>(1.0))
        }),
    );
    row(
        "set",
        "set",
        b,
        time(stream, iters, || {
            h.set_tensor(DeviceTensorMut::new(&xd, &mut y)?, T::from_f64(1.0))
        }),
    );
    let nhwc = TensorDescriptor::<T>::nhwc(n, c, hh, w)?;
    row(
        "nchw_to_nhwc",
        "transform NCHW -> NHWC",
        2 * b,
        time(stream, iters, || {
            h.transform_tensor(
                sc::<T>(1.0),
                DeviceTensor::new(&xd, &x)?,
                sc::<T>(0.0),
                DeviceTensorMut::new(&nhwc, &mut y)?,
            )
        }),
    );
    let reduce = ReducePlan::new(
        h,
        ReduceTensorDescriptor::<T>::new(ReduceOp::Add, NanPropagation::Propagate, false)?,
        TensorDescriptor::nchw(n, c, hh, w)?,
        TensorDescriptor::nchw(1, c, 1, 1)?,
    )?;
    let mut sums = DeviceBuffer::<T>::zeroed(c)?;
    row(
        "reduce_sum",
        "reduce sum to [1,C,1,1]",
        b,
        time(stream, iters, || {
            reduce.run(h, sc::<T>(1.0), &x, sc::<T>(0.0), &mut sums, None)
        }),
    );

    // Batch normalization, spatial.
    let bn = BatchNormPlan::new(
        BatchNormMode::Spatial,
        TensorDescriptor::nchw(n, c, hh, w)?,
        1e-5,
    )?;
    let ones = {
        let mut p = DeviceBuffer::<T::Param>::zeroed(c)?;
        let pd = bn.param_desc();
        h.set_tensor(DeviceTensorMut::new(pd, &mut p)?, T::Param::from_f64(1.0))?;
        p
    };
    let zeros = DeviceBuffer::<T::Param>::zeroed(c)?;
    let (mut rm, mut rv) = (zeros.try_clone()?, ones.try_clone()?);
    let (mut sm, mut si) = (zeros.try_clone()?, ones.try_clone()?);
    let (mut ds, mut db) = (zeros.try_clone()?, zeros.try_clone()?);
    row(
        "bn_infer",
        "batch norm inference",
        2 * b,
        time(stream, iters, || {
            bn.forward_inference(
                h,
                sc::<T>(1.0),
                sc::<T>(0.0),
                &x,
                &mut y,
                BatchNormParams {
                    scale: ones.as_slice(),
                    bias: zeros.as_slice(),
                },
                BatchNormStats {
                    mean: zeros.as_slice(),
                    variance: ones.as_slice(),
                },
            )
        }),
    );
    row(
        "bn_train_fwd",
        "batch norm training forward",
        2 * b,
        time(stream, iters, || {
            bn.forward_training(
                h,
                sc::<T>(1.0),
                sc::<T>(0.0),
                &x,
                &mut y,
                BatchNormParams {
                    scale: ones.as_slice(),
                    bias: zeros.as_slice(),
                },
                0.1,
                BatchNormRunning {
                    mean: rm.as_slice_mut(),
                    variance: rv.as_slice_mut(),
                },
                Some(BatchNormSaved {
                    mean: sm.as_slice_mut(),
                    inv_variance: si.as_slice_mut(),
                }),
            )
        }),
    );
    row(
        "bn_bwd",
        "batch norm backward",
        3 * b,
        time(stream, iters, || {
            bn.backward(
                h,
                (sc::<T>(1.0), sc::<T>(0.0)),
                (sc::<T>(1.0), sc::<T>(0.0)),
                &x,
                &dy,
                &mut dx,
                ones.as_slice(),
                BatchNormGrads {
                    dscale: ds.as_slice_mut(),
                    dbias: db.as_slice_mut(),
                },
                Some(BatchNormSavedRef {
                    mean: sm.as_slice(),
                    inv_variance: si.as_slice(),
                }),
            )
        }),
    );

    // Dropout: the mask goes to the reserve buffer.
    let mut dr = Dropout::new(h, 0.5, 1)?;
    let reserve_len = dropout_reserve_size(&xd)?;
    let mut reserve = DeviceBuffer::<u8>::zeroed(reserve_len)?;
    row(
        "dropout_fwd",
        "dropout forward (p 0.5)",
        2 * b + reserve_len,
        time(stream, iters, || {
            h.dropout_forward(
                &mut dr,
                DeviceTensor::new(&xd, &x)?,
                DeviceTensorMut::new(&xd, &mut y)?,
                reserve.as_slice_mut(),
            )
        }),
    );
    row(
        "dropout_bwd",
        "dropout backward",
        2 * b + reserve_len,
        time(stream, iters, || {
            h.dropout_backward(
                &dr,
                DeviceTensor::new(&xd, &dy)?,
                DeviceTensorMut::new(&xd, &mut dx)?,
                reserve.as_slice_mut(),
            )
        }),
    );
    stream.synchronize()?;
    Ok(())
}

/// The tensor shape `[n, c, h, w]` (NCHW) every op runs on.
fn shape(quick: bool) -> [usize; 4] {
    if quick {
        [8, 64, 64, 64]
    } else {
        [32, 64, 128, 128]
    }
}

fn run() -> AnyResult<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let iters = match flag_value(&args, "--iters") {
        Some(v) => v
            .parse::<usize>()
            .ok()
            .filter(|&v| v > 0)
            .ok_or("--iters needs a positive number")?,
        None if args.iter().any(|a| a == "--iters") => {
            return Err("--iters needs a positive number".into());
        }
        None => 20,
    };
    let count = Device::count()?;
    if count == 0 {
        return Err("no CUDA device found".into());
    }
    let mut csv = Csv::create(flag_value(&args, "--csv").map(Path::new))?;
    let dev = Device::new(0)?;
    let stream = Stream::new()?;
    let mut h = Handle::new(&stream)?;
    let shape = shape(quick);
    println!(
        "# cuDNN memory-bound ops on {} (cuDNN {}), NCHW {shape:?}, {iters} calls per op\n",
        dev.name()?,
        Handle::library_version()?
    );
    let mut rows = Vec::new();
    bench::<f32>(&mut h, &stream, shape, iters, &mut rows)?;
    bench::<f16>(&mut h, &stream, shape, iters, &mut rows)?;

    println!("| op | dtype | MiB moved | µs per call | GB/s | % of copy | host µs per call |");
    println!("|---|---|---:|---:|---:|---:|---:|");
    let mut copy = None;
    let shape_key = format!(
        "n={};c={};h={};w={}",
        shape[0], shape[1], shape[2], shape[3]
    );
    for r in &rows {
        let mut out = CsvRow {
            suite: "ops",
            case: &r.op,
            op: r.key,
            shape: shape_key.clone(),
            dtype: r.dtype,
            layout: "NCHW",
            metric: "GB/s",
            work: r.bytes as f64,
            device_us: None,
            host_us: None,
            detail: String::new(),
        };
        match &r.secs {
            Ok(t) => {
                let gbs = r.bytes as f64 / t.secs / 1e9;
                if r.key == "copy" {
                    copy = Some(gbs);
                }
                let pct = copy.map_or("-".to_string(), |c| format!("{:.0}%", 100.0 * gbs / c));
                println!(
                    "| {} | {} | {:.1} | {:.1} | {:.0} | {} | {:.1} |",
                    r.op,
                    r.dtype,
                    r.bytes as f64 / (1u64 << 20) as f64,
                    t.secs * 1e6,
                    gbs,
                    pct,
                    t.host_us
                );
                out.device_us = Some(t.secs * 1e6);
                out.host_us = Some(t.host_us);
            }
            Err(e) => {
                println!("| {} | {} | - | - | - | error: {e} | - |", r.op, r.dtype);
                out.detail = format!("error: {e}");
            }
        }
        csv.row(&out)?;
    }
    csv.finish()?;
    println!(
        "\nShape {} NCHW. MiB moved: the least each call must read and write (inputs once, outputs once, blended outputs also read). \
         % of copy: against a device-to-device copy of the same tensor in the same element type.",
        dims(&shape)
    );
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench_ops: cannot run: {e}");
            eprintln!(
                "(this benchmark needs the CUDA libraries and a CUDA device; `cargo run --example doctor` says what is missing)"
            );
            ExitCode::FAILURE
        }
    }
}
