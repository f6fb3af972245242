//! `cargo run --release --example bench_host [-- --rounds N]`: what the safe
//! layer costs on the host, against the same raw FFI calls made directly.
//! Needs the libraries, not a device: it runs on a build machine.
//!
//! - Descriptor construction: each safe constructor (which validates in
//!   Rust, creates, sets and, on drop, destroys the cuDNN descriptor)
//!   against the create + set + destroy sequence called through
//!   `cudnn::sys::cudnn` with the same values.
//! - The descriptor side of a convolution plan: `ConvProblem::forward` on
//!   prebuilt descriptors against `cudnnGetConvolutionNdForwardOutputDim`
//!   plus the output descriptor. Ours does more than the raw sequence: it
//!   checks the shapes in Rust, compares its output shape with cuDNN's, and
//!   keeps its own copies of the input, filter and convolution descriptors.
//! - `GemmPlan::new`: pure Rust (cuBLAS takes its arguments per call, so
//!   there is no raw counterpart).
//! - Library load time: a fresh process (this program, started again) times
//!   `cudart_sys::load()`, `cudnn_sys::load()` and `cublas_sys::load()`
//!   (search, `dlopen`, resolve every symbol, query the version), against a
//!   fresh process that `dlopen`s the same files and makes the same version
//!   query through one looked-up symbol; the median of 5 processes each.
//!
//! Prints a markdown table: operation, ours ns/op, raw ns/op, ours/raw.
//! Each figure is the median of `--rounds` (default 15) timed rounds of
//! about 20 ms. Exit status 1 when the libraries cannot be loaded.

use std::ffi::c_int;
use std::hint::black_box;
use std::process::{Command, ExitCode};
use std::ptr;
use std::time::{Duration, Instant};

use cudnn::blas::{ComputeType, GemmPlan, Layout};
use cudnn::dnn::{
    ActivationDescriptor, ConvDescriptor, ConvProblem, FilterDescriptor, PoolingDescriptor,
    PoolingMode, TensorDescriptor,
};
use cudnn::sys::cudart::loader::{MissingSymbol, libloading};
use cudnn::sys::cudnn::{self as dnn, Cudnn, cudnnStatus_t};
use cudnn::sys::{cublas, cudart};

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Set in the child process: which loads to time (`ours` or `raw`).
const CHILD_VAR: &str = "CUDNN_RS_BENCH_HOST_CHILD";
/// For the `raw` child: `name=path` pairs joined by `\n`.
const PATHS_VAR: &str = "CUDNN_RS_BENCH_HOST_PATHS";
/// Processes per load measurement.
const LOAD_RUNS: usize = 5;
/// The libraries, in load order.
const LIBS: [&str; 3] = ["cudart", "cudnn", "cublas"];

/// A raw call's status as a `Result`.
fn ok(call: &str, r: Result<cudnnStatus_t, MissingSymbol>) -> AnyResult<()> {
    match r? {
        cudnnStatus_t::CUDNN_STATUS_SUCCESS => Ok(()),
        s => Err(format!("{call} returned {}", s.0).into()),
    }
}

/// Median nanoseconds per call of `f` over `rounds` rounds of about 20 ms.
fn time_ns(rounds: usize, mut f: impl FnMut() -> AnyResult<()>) -> AnyResult<f64> {
    // Warm up, and find how many calls fill about 20 ms.
    let mut iters = 1usize;
    loop {
        let t = Instant::now();
        for _ in 0..iters {
            f()?;
        }
        if t.elapsed() >= Duration::from_millis(20) || iters >= 1 << 24 {
            break;
        }
        iters *= 2;
    }
    let mut per = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..iters {
            f()?;
        }
        per.push(t.elapsed().as_secs_f64() * 1e9 / iters as f64);
    }
    Ok(median(&mut per))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

struct Row {
    op: &'static str,
    ours: f64,
    raw: Option<f64>,
    unit: &'static str,
    raw_does: &'static str,
}

// ---------------------------------------------------------------------------
// The raw sequences. Each creates, sets and destroys, as the safe type does.

fn raw_tensor_4d(api: &Cudnn) -> AnyResult<()> {
    let mut d: dnn::cudnnTensorDescriptor_t = ptr::null_mut();
    // SAFETY: `d` is a valid out-pointer for the new descriptor.
    ok("cudnnCreateTensorDescriptor", unsafe {
        api.cudnnCreateTensorDescriptor(&mut d)
    })?;
    // SAFETY: `d` was just created and is live; sizes are positive C ints.
    let set = ok("cudnnSetTensor4dDescriptor", unsafe {
        api.cudnnSetTensor4dDescriptor(
            d,
            dnn::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
            dnn::cudnnDataType_t::CUDNN_DATA_FLOAT,
            32,
            64,
            56,
            56,
        )
    });
    // SAFETY: `d` is live and destroyed once, here.
    let destroy = ok("cudnnDestroyTensorDescriptor", unsafe {
        api.cudnnDestroyTensorDescriptor(d)
    });
    set.and(destroy)
}

fn raw_tensor_nd(api: &Cudnn, dims: &[c_int; 5], strides: &[c_int; 5]) -> AnyResult<()> {
    let mut d: dnn::cudnnTensorDescriptor_t = ptr::null_mut();
    // SAFETY: `d` is a valid out-pointer for the new descriptor.
    ok("cudnnCreateTensorDescriptor", unsafe {
        api.cudnnCreateTensorDescriptor(&mut d)
    })?;
    // SAFETY: `d` is live; both arrays hold 5 C ints, as the count says.
    let set = ok("cudnnSetTensorNdDescriptor", unsafe {
        api.cudnnSetTensorNdDescriptor(
            d,
            dnn::cudnnDataType_t::CUDNN_DATA_FLOAT,
            5,
            dims.as_ptr(),
            strides.as_ptr(),
        )
    });
    // SAFETY: `d` is live and destroyed once, here.
    let destroy = ok("cudnnDestroyTensorDescriptor", unsafe {
        api.cudnnDestroyTensorDescriptor(d)
    });
    set.and(destroy)
}

fn raw_filter(api: &Cudnn) -> AnyResult<()> {
    let mut d: dnn::cudnnFilterDescriptor_t = ptr::null_mut();
    // SAFETY: `d` is a valid out-pointer for the new descriptor.
    ok("cudnnCreateFilterDescriptor", unsafe {
        api.cudnnCreateFilterDescriptor(&mut d)
    })?;
    // SAFETY: `d` is live; sizes are positive C ints.
    let set = ok("cudnnSetFilter4dDescriptor", unsafe {
        api.cudnnSetFilter4dDescriptor(
            d,
            dnn::cudnnDataType_t::CUDNN_DATA_FLOAT,
            dnn::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
            64,
            64,
            3,
            3,
        )
    });
    // SAFETY: `d` is live and destroyed once, here.
    let destroy = ok("cudnnDestroyFilterDescriptor", unsafe {
        api.cudnnDestroyFilterDescriptor(d)
    });
    set.and(destroy)
}

fn raw_conv(api: &Cudnn) -> AnyResult<()> {
    let mut d: dnn::cudnnConvolutionDescriptor_t = ptr::null_mut();
    let (pad, stride, dilation): ([c_int; 2], [c_int; 2], [c_int; 2]) = ([1, 1], [1, 1], [1, 1]);
    // SAFETY: `d` is a valid out-pointer for the new descriptor.
    ok("cudnnCreateConvolutionDescriptor", unsafe {
        api.cudnnCreateConvolutionDescriptor(&mut d)
    })?;
    let set = (|| {
        // SAFETY: `d` is live; the three arrays hold 2 C ints each.
        ok("cudnnSetConvolutionNdDescriptor", unsafe {
            api.cudnnSetConvolutionNdDescriptor(
                d,
                2,
                pad.as_ptr(),
                stride.as_ptr(),
                dilation.as_ptr(),
                dnn::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                dnn::cudnnDataType_t::CUDNN_DATA_FLOAT,
            )
        })?;
        // The safe type sets these two as well (so they survive later changes).
        // SAFETY: `d` is live; 1 group is valid.
        ok("cudnnSetConvolutionGroupCount", unsafe {
            api.cudnnSetConvolutionGroupCount(d, 1)
        })?;
        // SAFETY: `d` is live; the math type is a known constant.
        ok("cudnnSetConvolutionMathType", unsafe {
            api.cudnnSetConvolutionMathType(d, dnn::cudnnMathType_t::CUDNN_DEFAULT_MATH)
        })
    })();
    // SAFETY: `d` is live and destroyed once, here.
    let destroy = ok("cudnnDestroyConvolutionDescriptor", unsafe {
        api.cudnnDestroyConvolutionDescriptor(d)
    });
    set.and(destroy)
}

fn raw_pooling(api: &Cudnn) -> AnyResult<()> {
    let mut d: dnn::cudnnPoolingDescriptor_t = ptr::null_mut();
    let (window, pad, stride): ([c_int; 2], [c_int; 2], [c_int; 2]) = ([2, 2], [0, 0], [2, 2]);
    // SAFETY: `d` is a valid out-pointer for the new descriptor.
    ok("cudnnCreatePoolingDescriptor", unsafe {
        api.cudnnCreatePoolingDescriptor(&mut d)
    })?;
    // SAFETY: `d` is live; the three arrays hold 2 C ints each.
    let set = ok("cudnnSetPoolingNdDescriptor", unsafe {
        api.cudnnSetPoolingNdDescriptor(
            d,
            dnn::cudnnPoolingMode_t::CUDNN_POOLING_MAX,
            dnn::cudnnNanPropagation_t::CUDNN_PROPAGATE_NAN,
            2,
            window.as_ptr(),
            pad.as_ptr(),
            stride.as_ptr(),
        )
    });
    // SAFETY: `d` is live and destroyed once, here.
    let destroy = ok("cudnnDestroyPoolingDescriptor", unsafe {
        api.cudnnDestroyPoolingDescriptor(d)
    });
    set.and(destroy)
}

fn raw_activation(api: &Cudnn) -> AnyResult<()> {
    let mut d: dnn::cudnnActivationDescriptor_t = ptr::null_mut();
    // SAFETY: `d` is a valid out-pointer for the new descriptor.
    ok("cudnnCreateActivationDescriptor", unsafe {
        api.cudnnCreateActivationDescriptor(&mut d)
    })?;
    // SAFETY: `d` is live; mode and NaN option are known constants.
    let set = ok("cudnnSetActivationDescriptor", unsafe {
        api.cudnnSetActivationDescriptor(
            d,
            dnn::cudnnActivationMode_t::CUDNN_ACTIVATION_RELU,
            dnn::cudnnNanPropagation_t::CUDNN_PROPAGATE_NAN,
            0.0,
        )
    });
    // SAFETY: `d` is live and destroyed once, here.
    let destroy = ok("cudnnDestroyActivationDescriptor", unsafe {
        api.cudnnDestroyActivationDescriptor(d)
    });
    set.and(destroy)
}

/// What a C program does to plan a forward convolution's output: ask cuDNN
/// for the output shape, then describe the output tensor.
fn raw_conv_output(
    api: &Cudnn,
    x: dnn::cudnnTensorDescriptor_t,
    w: dnn::cudnnFilterDescriptor_t,
    conv: dnn::cudnnConvolutionDescriptor_t,
) -> AnyResult<()> {
    let mut out: [c_int; 4] = [0; 4];
    // SAFETY: the three descriptors are live (owned by the caller's safe
    // values for the whole loop); `out` holds the 4 C ints asked for.
    ok("cudnnGetConvolutionNdForwardOutputDim", unsafe {
        api.cudnnGetConvolutionNdForwardOutputDim(conv, x, w, 4, out.as_mut_ptr())
    })?;
    let mut y: dnn::cudnnTensorDescriptor_t = ptr::null_mut();
    // SAFETY: `y` is a valid out-pointer for the new descriptor.
    ok("cudnnCreateTensorDescriptor", unsafe {
        api.cudnnCreateTensorDescriptor(&mut y)
    })?;
    // SAFETY: `y` is live; the sizes came from cuDNN.
    let set = ok("cudnnSetTensor4dDescriptor", unsafe {
        api.cudnnSetTensor4dDescriptor(
            y,
            dnn::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
            dnn::cudnnDataType_t::CUDNN_DATA_FLOAT,
            out[0],
            out[1],
            out[2],
            out[3],
        )
    });
    // SAFETY: `y` is live and destroyed once, here.
    let destroy = ok("cudnnDestroyTensorDescriptor", unsafe {
        api.cudnnDestroyTensorDescriptor(y)
    });
    set.and(destroy)
}

// ---------------------------------------------------------------------------

fn descriptor_rows(rounds: usize) -> AnyResult<Vec<Row>> {
    let api = dnn::load()?;
    let mut rows = Vec::new();

    rows.push(Row {
        op: "TensorDescriptor::nchw (4-d, f32)",
        ours: time_ns(rounds, || {
            black_box(TensorDescriptor::<f32>::nchw(32, 64, 56, 56)?);
            Ok(())
        })?,
        raw: Some(time_ns(rounds, || raw_tensor_4d(api))?),
        unit: "ns",
        raw_does: "cudnnCreateTensorDescriptor + cudnnSetTensor4dDescriptor + destroy",
    });

    let dims5 = [8usize, 64, 16, 56, 56];
    let strides5 = [64 * 16 * 56 * 56, 16 * 56 * 56, 56 * 56, 56, 1usize];
    let (dims_c, strides_c) = (dims5.map(|v| v as c_int), strides5.map(|v| v as c_int));
    rows.push(Row {
        op: "TensorDescriptor::new (5-d, strided)",
        ours: time_ns(rounds, || {
            black_box(TensorDescriptor::<f32>::new(&dims5, &strides5)?);
            Ok(())
        })?,
        raw: Some(time_ns(rounds, || raw_tensor_nd(api, &dims_c, &strides_c))?),
        unit: "ns",
        raw_does: "create + cudnnSetTensorNdDescriptor + destroy",
    });

    rows.push(Row {
        op: "FilterDescriptor::nchw",
        ours: time_ns(rounds, || {
            black_box(FilterDescriptor::<f32>::nchw(64, 64, 3, 3)?);
            Ok(())
        })?,
        raw: Some(time_ns(rounds, || raw_filter(api))?),
        unit: "ns",
        raw_does: "create + cudnnSetFilter4dDescriptor + destroy",
    });

    rows.push(Row {
        op: "ConvDescriptor::new_2d",
        ours: time_ns(rounds, || {
            black_box(ConvDescriptor::new_2d([1, 1], [1, 1], [1, 1])?);
            Ok(())
        })?,
        raw: Some(time_ns(rounds, || raw_conv(api))?),
        unit: "ns",
        raw_does: "create + cudnnSetConvolutionNdDescriptor + GroupCount + MathType + destroy",
    });

    rows.push(Row {
        op: "PoolingDescriptor::new_2d",
        ours: time_ns(rounds, || {
            black_box(PoolingDescriptor::new_2d(
                PoolingMode::Max,
                [2, 2],
                [0, 0],
                [2, 2],
            )?);
            Ok(())
        })?,
        raw: Some(time_ns(rounds, || raw_pooling(api))?),
        unit: "ns",
        raw_does: "create + cudnnSetPoolingNdDescriptor + destroy",
    });

    rows.push(Row {
        op: "ActivationDescriptor::relu",
        ours: time_ns(rounds, || {
            black_box(ActivationDescriptor::relu()?);
            Ok(())
        })?,
        raw: Some(time_ns(rounds, || raw_activation(api))?),
        unit: "ns",
        raw_does: "create + cudnnSetActivationDescriptor + destroy",
    });

    // The descriptor side of a forward-convolution plan, on prebuilt descriptors.
    let x = TensorDescriptor::<f32>::nchw(32, 64, 56, 56)?;
    let w = FilterDescriptor::<f32>::nchw(64, 64, 3, 3)?;
    let conv = ConvDescriptor::new_2d([1, 1], [1, 1], [1, 1])?;
    rows.push(Row {
        op: "ConvProblem::forward (plan's descriptor side)",
        ours: time_ns(rounds, || {
            black_box(ConvProblem::forward(&x, &w, &conv)?);
            Ok(())
        })?,
        raw: Some(time_ns(rounds, || {
            raw_conv_output(api, x.as_raw(), w.as_raw(), conv.as_raw())
        })?),
        unit: "ns",
        raw_does: "cudnnGetConvolutionNdForwardOutputDim + create/set/destroy y",
    });

    rows.push(Row {
        op: "GemmPlan::new (f32, row-major 1024³)",
        ours: time_ns(rounds, || {
            black_box(GemmPlan::<f32, f32>::new(
                Layout::row_major(1024, 1024),
                Layout::row_major(1024, 1024),
                Layout::row_major(1024, 1024),
                ComputeType::F32,
            )?);
            Ok(())
        })?,
        raw: None,
        unit: "ns",
        raw_does: "nothing: cublasGemmEx takes its arguments per call",
    });
    Ok(rows)
}

// ---------------------------------------------------------------------------
// Library load time, in fresh processes.

/// In the child: time each load and print `name ms` lines.
fn child(mode: &str) -> AnyResult<()> {
    let mut times = Vec::new();
    if mode == "ours" {
        let t = Instant::now();
        cudart::load()?;
        times.push(("cudart".to_string(), t.elapsed()));
        let t = Instant::now();
        dnn::load()?;
        times.push(("cudnn".to_string(), t.elapsed()));
        let t = Instant::now();
        cublas::load()?;
        times.push(("cublas".to_string(), t.elapsed()));
    } else {
        let paths = std::env::var(PATHS_VAR)?;
        let mut keep = Vec::new();
        for line in paths.lines() {
            let Some((name, path)) = line.split_once('=') else {
                continue;
            };
            let t = Instant::now();
            keep.push(raw_open(name, path)?);
            times.push((name.to_string(), t.elapsed()));
        }
        black_box(&keep);
    }
    for (name, d) in times {
        println!("{name} {:.3}", d.as_secs_f64() * 1e3);
    }
    Ok(())
}

/// What a C program does to start using a library it knows the path of:
/// `dlopen` it, look up the version query our loader also makes, call it.
fn raw_open(name: &str, path: &str) -> AnyResult<libloading::Library> {
    // SAFETY: the file is the CUDA library our loader found and opened in
    // the parent process; its initialisers are NVIDIA's.
    let lib = unsafe { libloading::Library::new(path) }?;
    match name {
        "cudart" => {
            type F = unsafe extern "C" fn(*mut c_int) -> cudart::cudaError_t;
            // SAFETY: the type is the declaration in our bindings.
            let f = unsafe { lib.get::<F>(b"cudaRuntimeGetVersion\0") }?;
            let mut v: c_int = 0;
            // SAFETY: `v` is a valid out-pointer; no device is needed.
            black_box(unsafe { f(&mut v) });
            black_box(v);
        }
        "cudnn" => {
            type F = unsafe extern "C" fn() -> usize;
            // SAFETY: the type is the declaration in our bindings.
            let f = unsafe { lib.get::<F>(b"cudnnGetVersion\0") }?;
            // SAFETY: takes no arguments and needs no device.
            black_box(unsafe { f() });
        }
        _ => {
            type F = unsafe extern "C" fn(
                cudart::libraryPropertyType,
                *mut c_int,
            ) -> cublas::cublasStatus_t;
            // SAFETY: the type is the declaration in our bindings.
            let f = unsafe { lib.get::<F>(b"cublasGetProperty\0") }?;
            let mut v: c_int = 0;
            // SAFETY: `v` is a valid out-pointer; no handle or device is needed.
            black_box(unsafe { f(cudart::libraryPropertyType::MAJOR_VERSION, &mut v) });
            black_box(v);
        }
    }
    Ok(lib)
}

/// Start this program again `LOAD_RUNS` times in `mode`; the median
/// milliseconds for each library, in [`LIBS`] order.
fn load_times(mode: &str, paths: &str) -> AnyResult<Vec<f64>> {
    let exe = std::env::current_exe()?;
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); LIBS.len()];
    for _ in 0..LOAD_RUNS {
        let out = Command::new(&exe)
            .env(CHILD_VAR, mode)
            .env(PATHS_VAR, paths)
            .output()?;
        if !out.status.success() {
            return Err(format!(
                "the `{mode}` load child failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )
            .into());
        }
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let mut it = line.split_whitespace();
            let (Some(name), Some(ms)) = (it.next(), it.next()) else {
                continue;
            };
            if let (Some(i), Ok(ms)) = (LIBS.iter().position(|l| *l == name), ms.parse()) {
                samples[i].push(ms);
            }
        }
    }
    Ok(samples.iter_mut().map(|s| median(s)).collect())
}

fn load_rows() -> AnyResult<Vec<Row>> {
    let path_of = |p: Option<&std::path::PathBuf>, lib: &str| -> AnyResult<String> {
        Ok(p.ok_or(format!(
            "the loader does not know which file {lib} came from"
        ))?
        .display()
        .to_string())
    };
    let paths = [
        format!(
            "cudart={}",
            path_of(cudart::load()?.info().path.as_ref(), "cudart")?
        ),
        format!(
            "cudnn={}",
            path_of(dnn::load()?.info().path.as_ref(), "cudnn")?
        ),
        format!(
            "cublas={}",
            path_of(cublas::load()?.info().path.as_ref(), "cublas")?
        ),
    ]
    .join("\n");
    let ours = load_times("ours", &paths)?;
    let raw = load_times("raw", &paths)?;
    let what: [&'static str; 3] = [
        "load the CUDA runtime (cudart_sys::load)",
        "load cuDNN (cudnn_sys::load)",
        "load cuBLAS (cublas_sys::load)",
    ];
    Ok((0..LIBS.len())
        .map(|i| Row {
            op: what[i],
            ours: ours[i],
            raw: Some(raw[i]),
            unit: "ms",
            raw_does: "dlopen of the same file + its version query (no search, one symbol)",
        })
        .collect())
}

fn run() -> AnyResult<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rounds = match args.iter().position(|a| a == "--rounds") {
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&v| v > 0)
            .ok_or("--rounds needs a positive number")?,
        None => 15,
    };
    let api = dnn::load()?;
    println!(
        "# Host cost of the safe layer (cuDNN {} from {}; {rounds} rounds, median)\n",
        api.info()
            .version
            .map_or("?".to_string(), |v| v.to_string()),
        api.info()
            .path
            .as_ref()
            .map_or("?".to_string(), |p| p.display().to_string())
    );
    let mut rows = descriptor_rows(rounds)?;
    rows.extend(load_rows()?);
    println!("| operation | ours | raw | ours / raw | raw does |");
    println!("|---|---:|---:|---:|---|");
    for r in &rows {
        let fmt = |v: f64| {
            if r.unit == "ms" {
                format!("{v:.2} ms")
            } else {
                format!("{v:.0} ns")
            }
        };
        let (raw, ratio) = match r.raw {
            Some(raw) => (fmt(raw), format!("{:.2}", r.ours / raw)),
            None => ("—".to_string(), "—".to_string()),
        };
        println!(
            "| {} | {} | {} | {} | {} |",
            r.op,
            fmt(r.ours),
            raw,
            ratio,
            r.raw_does
        );
    }
    println!(
        "\nDescriptor rows: per construct-and-drop, median of {rounds} rounds. \
         Load rows: per fresh process, median of {LOAD_RUNS} processes."
    );
    Ok(())
}

fn main() -> ExitCode {
    if let Ok(mode) = std::env::var(CHILD_VAR) {
        return match child(&mode) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("bench_host ({mode} load child): {e}");
                ExitCode::FAILURE
            }
        };
    }
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench_host: cannot run: {e}");
            eprintln!(
                "(this benchmark needs the cuDNN, cuBLAS and CUDA runtime libraries, not a device; \
                 `cargo run --example doctor` says what is missing)"
            );
            ExitCode::FAILURE
        }
    }
}
