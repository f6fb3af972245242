//! Issue 34: the launch checks the benchmark measures (item 2), and the
//! function tables of the -sys crates after their build cost was cut
//! (item 3: every symbol resolved through one untyped lookup).
//!
//! Item 2:
//! `ConvForwardPlan::launch_checks`, `MatmulSpec::launch_checks` and
//! `nccl::LaunchChecks::all_reduce` refuse and accept exactly what the
//! safe call does, against hand-computed sizes (conv output size from the
//! convolution formula, row-major matrix sizes, IEEE f16's largest finite
//! value) and documented rules (lengths at least the descriptor's, the
//! spec's alignment, send and receive of equal length, no direct call in a
//! group, no per-thread stream in an NCCL call). Views are dangling,
//! aligned addresses that nothing dereferences.
//! The convolution descriptors need cuDNN (host tier); the matmul and
//! NCCL checks call no library (registered as unit tests, so they run
//! where the libraries are missing too).

use crate::support;

use cudnn::Error;
use cudnn::blas::{ComputeType, Epilogue, EpilogueArgs, Layout, MatmulSpec};
use cudnn::dnn::{AlgoChoice, ConvDescriptor, ConvProblem, FilterDescriptor, TensorDescriptor};
use cudnn::runtime::{DeviceSlice, DeviceSliceMut};
use half::f16;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use support::*;

pub fn main() {
    let mut trials = vec![
        host("conv_launch_checks_lengths", conv_lengths),
        host("fuzz_conv_launch_checks_lengths", fuzz_conv),
        unit("matmul_launch_checks_rules", matmul_rules),
        unit("matmul_launch_checks_bias_is_per_column", matmul_bias),
        unit("fuzz_matmul_launch_checks_lengths", fuzz_matmul),
        host("sys_tables_resolve_what_dlsym_finds", tables_match_dlsym),
    ];
    nccl_trials(&mut trials);
    run(trials);
}

fn runner(seed: u64, cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(fuzz_seed(seed)),
        ..Config::default()
    })
}

fn ins<T: cudnn::DataType>(addr: usize, len: usize) -> DeviceSlice<'static, T> {
    // SAFETY: only checked (lengths, alignment), never dereferenced.
    unsafe { DeviceSlice::from_raw_parts(addr as *const T, len) }
}

fn outs<T: cudnn::DataType>(addr: usize, len: usize) -> DeviceSliceMut<'static, T> {
    // SAFETY: as above.
    unsafe { DeviceSliceMut::from_raw_parts_mut(addr as *mut T, len) }
}

/// A `Mismatch` about the buffer `name` (its `what` field starts with the
/// argument's name and a space: "x buffer length ...").
fn is_mismatch(r: &cudnn::Result<()>, name: &str) -> bool {
    matches!(r, Err(Error::Mismatch { what, .. })
        if what.strip_prefix(name).is_some_and(|rest| rest.starts_with(' ')))
}

/// An `InvalidArgument` naming exactly the argument `name`.
fn is_invalid(r: &cudnn::Result<()>, name: &str) -> bool {
    matches!(r, Err(Error::InvalidArgument { arg, .. }) if arg == name)
}

// ---------------------------------------------------------------- conv

/// x 1x32x16x16, w 32x32x3x3, no padding, stride 1: y is 1x32x14x14
/// (16 - 3 + 1 = 14). Lengths in elements, by hand; x, w and y all differ,
/// so a length checked against another buffer's descriptor shows.
const X_LEN: usize = 32 * 16 * 16;
const W_LEN: usize = 32 * 32 * 3 * 3;
const Y_LEN: usize = 32 * 14 * 14;

fn conv_plan() -> cudnn::Result<cudnn::dnn::ConvForwardPlan<f32>> {
    let x = TensorDescriptor::<f32>::nchw(1, 32, 16, 16)?;
    let w = FilterDescriptor::<f32>::nchw(32, 32, 3, 3)?;
    let conv = ConvDescriptor::new_2d([0, 0], [1, 1], [1, 1])?;
    ConvProblem::forward(&x, &w, &conv)?.plan_with(AlgoChoice {
        algo: 1,
        math_type: 0,
        workspace_bytes: 0,
    })
}

fn conv_check(plan: &cudnn::dnn::ConvForwardPlan<f32>, [x, w, y]: [usize; 3]) -> cudnn::Result<()> {
    plan.launch_checks(
        ins::<f32>(0x1000_0000, x),
        ins::<f32>(0x2000_0000, w),
        outs::<f32>(0x3000_0000, y),
        None,
    )
}

fn conv_lengths() -> TestResult {
    let plan = conv_plan()?;
    conv_check(&plan, [X_LEN, W_LEN, Y_LEN])?;
    // Longer buffers are fine (a view of part of them is what is read).
    conv_check(&plan, [X_LEN + 1, W_LEN + 7, Y_LEN + 3])?;
    // x checked against x's size, not y's (y's is smaller), and y against
    // y's (x's is larger).
    let r = conv_check(&plan, [Y_LEN, W_LEN, Y_LEN]);
    ensure!(is_mismatch(&r, "x"), "x of y's length: {r:?}");
    let r = conv_check(&plan, [X_LEN, W_LEN, Y_LEN - 1]);
    ensure!(is_mismatch(&r, "y"), "y one short: {r:?}");
    for (i, name) in ["x", "w", "y"].into_iter().enumerate() {
        let mut lens = [X_LEN, W_LEN, Y_LEN];
        let need = lens[i];
        lens[i] -= 1;
        let r = conv_check(&plan, lens);
        ensure!(is_mismatch(&r, name), "{name} one short: {r:?}");
        let s = r.err().map(|e| e.to_string()).unwrap_or_default();
        ensure!(
            s.contains(&need.to_string()) && s.contains(&(need - 1).to_string()),
            "{name}: the error names both lengths: {s}"
        );
    }
    Ok(())
}

/// Property: the checks pass exactly when every length reaches the
/// hand-computed size; otherwise a typed `Mismatch` naming the first
/// short buffer (in the order x, w, y).
fn fuzz_conv() -> TestResult {
    let plan = conv_plan()?;
    let need = [X_LEN, W_LEN, Y_LEN];
    let len = |n: usize| (n - 3)..(n + 3);
    runner(0x34c0, 128 * fuzz_scale() as u32)
        .run(
            &(len(X_LEN), len(W_LEN), len(Y_LEN), 0usize..2),
            |(x, w, y, zero)| {
                // Sometimes an empty view.
                let lens = [if zero == 1 { 0 } else { x }, w, y];
                let r = conv_check(&plan, lens);
                let short = (0..3).find(|&i| lens[i] < need[i]);
                let ok = match short {
                    None => r.is_ok(),
                    Some(i) => is_mismatch(&r, ["x", "w", "y"][i]),
                };
                if ok {
                    Ok(())
                } else {
                    Err(TestCaseError::fail(format!("{lens:?}: {r:?}")))
                }
            },
        )
        .map_err(|e| e.to_string())?;
    Ok(())
}

// -------------------------------------------------------------- matmul

const M: usize = 64;
const K: usize = 32;
const N: usize = 48;

fn spec(epi: Epilogue) -> MatmulSpec {
    spec_mkn(M, K, N, epi)
}

/// Row-major A (m x k), B (k x n), D (m x n), 16-byte alignment.
fn spec_mkn(m: usize, k: usize, n: usize, epi: Epilogue) -> MatmulSpec {
    MatmulSpec::new(
        Layout::row_major(m, k),
        Layout::row_major(k, n),
        Layout::row_major(m, n),
    )
    .with_epilogue(epi)
    .with_alignment(16)
}

fn mm(
    spec: &MatmulSpec,
    alpha: f32,
    [a, b, d]: [(usize, usize); 3],
    epi: EpilogueArgs<'_, f16>,
) -> cudnn::Result<()> {
    spec.launch_checks::<f16, f16>()?.run(
        alpha,
        ins::<f16>(a.0, a.1),
        ins::<f16>(b.0, b.1),
        0.0,
        outs::<f16>(d.0, d.1),
        epi,
        None,
    )
}

const A: usize = 0x1000_0000;
const B: usize = 0x2000_0000;
const D: usize = 0x3000_0000;
const BIAS: usize = 0x4000_0000;

fn matmul_rules() -> TestResult {
    let plain = spec(Epilogue::None);
    let full = [(A, M * K), (B, K * N), (D, M * N)];
    mm(&plain, 1.0, full, EpilogueArgs::none())?;
    // One element short, by operand (the sizes differ: 2048, 1536, 3072).
    for (i, name) in ["a", "b", "d"].into_iter().enumerate() {
        let mut lens = full;
        lens[i].1 -= 1;
        let r = mm(&plain, 1.0, lens, EpilogueArgs::none());
        ensure!(is_mismatch(&r, name), "{name} one short: {r:?}");
    }
    // B given A's length (larger than B's): accepted; A given B's
    // (smaller than A's): refused, naming a.
    mm(
        &plain,
        1.0,
        [full[0], (B, M * K), full[2]],
        EpilogueArgs::none(),
    )?;
    let r = mm(
        &plain,
        1.0,
        [(A, K * N), full[1], full[2]],
        EpilogueArgs::none(),
    );
    ensure!(is_mismatch(&r, "a"), "a of b's length: {r:?}");
    // Off the spec's 16-byte alignment by one f16 (2 bytes): refused, naming it.
    for (i, name) in ["a", "b", "d"].into_iter().enumerate() {
        let mut ptrs = full;
        ptrs[i].0 += 2;
        let r = mm(&plain, 1.0, ptrs, EpilogueArgs::none());
        ensure!(is_invalid(&r, name), "{name} misaligned: {r:?}");
    }
    // The bias epilogue needs its bias, and no auxiliary buffer.
    let bias = spec(Epilogue::Bias);
    let r = mm(&bias, 1.0, full, EpilogueArgs::none());
    ensure!(is_invalid(&r, "epilogue.bias"), "bias missing: {r:?}");
    let r = mm(
        &bias,
        1.0,
        full,
        EpilogueArgs::none()
            .bias(ins::<f16>(BIAS, N))
            .aux_out(outs::<u8>(0x5000_0000, 1 << 16)),
    );
    ensure!(is_invalid(&r, "epilogue.aux_out"), "unexpected aux: {r:?}");
    // With the f16 compute type alpha is an f16: 65504 (the largest finite
    // f16) is held, 1e5 is not.
    let f16c = spec(Epilogue::None).with_compute(ComputeType::F16);
    mm(&f16c, 65504.0, full, EpilogueArgs::none())?;
    let r = mm(&f16c, 1.0e5, full, EpilogueArgs::none());
    ensure!(is_invalid(&r, "alpha"), "alpha 1e5 in f16: {r:?}");
    Ok(())
}

/// The bias of row-major D (m x n) has one element per column of D: n.
/// cuBLASLt's bias has one element per row of D in its column-major frame
/// (cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_POINTER), and a row-major m x n
/// D is the column-major n x m Dᵀ there. By hand: n accepted, n - 1
/// refused; with m < n, a bias of m elements refused too.
fn matmul_bias() -> TestResult {
    for (m, k, n) in [(M, K, N), (32, 16, 48)] {
        let spec = spec_mkn(m, k, n, Epilogue::Bias);
        let full = [(A, m * k), (B, k * n), (D, m * n)];
        let with = |len: usize| EpilogueArgs::none().bias(ins::<f16>(BIAS, len));
        mm(&spec, 1.0, full, with(n)).map_err(|e| format!("{m}x{n}, bias of n: {e}"))?;
        let r = mm(&spec, 1.0, full, with(n - 1));
        ensure!(
            is_mismatch(&r, "epilogue.bias"),
            "{m}x{n}, bias of n - 1: {r:?}"
        );
        if m < n {
            let r = mm(&spec, 1.0, full, with(m));
            ensure!(
                is_mismatch(&r, "epilogue.bias"),
                "{m}x{n}, bias of m: {r:?}"
            );
        }
    }
    Ok(())
}

/// Property: over lengths and 4-byte address offsets (0 to 16 bytes) of
/// A, B and D, the checks pass exactly when every length reaches rows x
/// cols (row-major, by hand) and every address is a multiple of 16; a
/// refusal is typed.
fn fuzz_matmul() -> TestResult {
    let plain = spec(Epilogue::None);
    let need = [M * K, K * N, M * N];
    let len = |n: usize| (n - 2)..(n + 2);
    runner(0x34c1, 128 * fuzz_scale() as u32)
        .run(
            &(
                (len(need[0]), len(need[1]), len(need[2])),
                (0usize..5, 0usize..5, 0usize..5),
            ),
            |((la, lb, ld), (oa, ob, od))| {
                let args = [(A + 4 * oa, la), (B + 4 * ob, lb), (D + 4 * od, ld)];
                let r = mm(&plain, 1.0, args, EpilogueArgs::none());
                let want_ok = args
                    .iter()
                    .zip(need)
                    .all(|(&(p, l), n)| l >= n && p % 16 == 0);
                match (&r, want_ok) {
                    (Ok(()), true) => Ok(()),
                    (Err(Error::Mismatch { .. } | Error::InvalidArgument { .. }), false) => Ok(()),
                    _ => Err(TestCaseError::fail(format!("{args:?}: {r:?}"))),
                }
            },
        )
        .map_err(|e| e.to_string())?;
    Ok(())
}

// ---------------------------------------------------------------- nccl

#[cfg(not(feature = "nccl"))]
fn nccl_trials(_: &mut Vec<libtest_mimic::Trial>) {
    eprintln!("skipped: host::launch_checks nccl cases: built without the `nccl` feature");
}

#[cfg(feature = "nccl")]
fn nccl_trials(t: &mut Vec<libtest_mimic::Trial>) {
    t.push(unit("nccl_launch_checks_rules", nccl_rules));
    t.push(unit("fuzz_nccl_launch_checks_lengths", fuzz_nccl));
}

/// The direct all-reduce's rules (the checks never call NCCL, nor does a
/// group whose closure fails: it issues nothing).
#[cfg(feature = "nccl")]
fn nccl_rules() -> TestResult {
    use cudnn::nccl::{LaunchChecks, ReduceOp};
    use cudnn::runtime::Stream;
    let c = LaunchChecks::new()?;
    let legacy = Stream::legacy();
    c.all_reduce(
        ins::<f32>(A, 100),
        outs::<f32>(B, 100),
        ReduceOp::Sum,
        &legacy,
    )?;
    // A call of 0 elements is checked and accepted (nothing to launch).
    c.all_reduce(ins::<f32>(A, 0), outs::<f32>(B, 0), ReduceOp::Max, &legacy)?;
    let r = c.all_reduce(
        ins::<f32>(A, 100),
        outs::<f32>(B, 99),
        ReduceOp::Sum,
        &legacy,
    );
    ensure!(
        matches!(&r, Err(Error::Mismatch { expected, got, .. })
            if expected == "100" && got == "99"),
        "recv one short: {r:?}"
    );
    // Documented: NCCL calls refuse the per-thread default stream.
    let r = c.all_reduce(
        ins::<f32>(A, 8),
        outs::<f32>(B, 8),
        ReduceOp::Sum,
        &Stream::per_thread(),
    );
    ensure!(is_invalid(&r, "stream"), "per-thread stream: {r:?}");
    // Documented: a direct call inside a group is refused.
    let r = cudnn::nccl::group(|_| {
        c.all_reduce(ins::<f32>(A, 8), outs::<f32>(B, 8), ReduceOp::Sum, &legacy)
    });
    ensure!(
        matches!(&r, Err(Error::InGroup { .. })),
        "in a group: {r:?}"
    );
    Ok(())
}

/// Property: send and receive lengths; accepted exactly when equal.
#[cfg(feature = "nccl")]
fn fuzz_nccl() -> TestResult {
    use cudnn::nccl::{LaunchChecks, ReduceOp};
    use cudnn::runtime::Stream;
    let c = LaunchChecks::new()?;
    let legacy = Stream::legacy();
    runner(0x34c2, 128 * fuzz_scale() as u32)
        .run(&(0usize..6, 0usize..6), |(s, r)| {
            let got = c.all_reduce(ins::<f32>(A, s), outs::<f32>(B, r), ReduceOp::Sum, &legacy);
            match (&got, s == r) {
                (Ok(()), true) | (Err(Error::Mismatch { .. }), false) => Ok(()),
                _ => Err(TestCaseError::fail(format!("{s} / {r}: {got:?}"))),
            }
        })
        .map_err(|e| e.to_string())?;
    Ok(())
}

// ------------------------------------------------------- -sys tables

/// `symbol`'s address in the already loaded library at `path`, asked of
/// the system loader directly (`dlopen` with `RTLD_NOLOAD`, `dlsym`).
fn dlsym(path: &std::path::Path, symbol: &str) -> Result<Option<usize>, String> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let p = CString::new(path.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
    let s = CString::new(symbol).map_err(|e| e.to_string())?;
    // SAFETY: NUL-terminated strings; RTLD_NOLOAD opens nothing new (the
    // library is loaded already), and the reference taken is released below.
    let h = unsafe { libc::dlopen(p.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if h.is_null() {
        return Err(format!("{} is not loaded", path.display()));
    }
    // SAFETY: a live handle and a NUL-terminated name.
    let a = unsafe { libc::dlsym(h, s.as_ptr()) };
    // SAFETY: the handle from the dlopen above, closed once.
    unsafe { libc::dlclose(h) };
    Ok((!a.is_null()).then_some(a as usize))
}

/// A function of one table called twice: through the table, and through
/// the address `dlsym` gives for it. Both answers as integers (a status
/// and a value; the status 0 for a function that returns its value).
struct Probe<'a> {
    symbol: &'static str,
    through_table: Box<dyn Fn() -> Result<(i64, i64), String> + 'a>,
    through_address: fn(usize) -> (i64, i64),
}

/// `size_t f(void)` at `addr`.
fn call_size_t(addr: usize) -> (i64, i64) {
    // SAFETY: `addr` is the address of a `size_t (void)` function of a
    // loaded library (the probes below name one), callable without a device.
    let f: unsafe extern "C" fn() -> usize = unsafe { std::mem::transmute(addr) };
    // SAFETY: as above.
    (0, unsafe { f() } as i64)
}

/// `status f(int *)` at `addr`, the status an `int`-sized C enum.
fn call_out_int(addr: usize) -> (i64, i64) {
    // SAFETY: `addr` is the address of a `status (int *)` function of a
    // loaded library (cudaRuntimeGetVersion, ncclGetVersion), callable
    // without a device; the status is a C enum, an `int`.
    let f: unsafe extern "C" fn(*mut i32) -> i32 = unsafe { std::mem::transmute(addr) };
    let mut v = 0;
    // SAFETY: a valid out-pointer.
    let st = unsafe { f(&mut v) };
    (i64::from(st), i64::from(v))
}

struct Table<'a> {
    name: &'a str,
    symbols: &'a [&'static str],
    has: Box<dyn Fn(&str) -> bool + 'a>,
    info: &'a cudnn::sys::cudart::loader::LibraryInfo,
    set_aside: &'a [&'static str],
    probe: Probe<'a>,
}

/// Every table knows a symbol exactly when the system loader finds it in
/// the file the table loaded and the symbol is not one the crate documents
/// as set aside for that version (`ABI_DIFFERS_IN_CUDNN8` under cuDNN 8,
/// `ABI_DIFFERS_IN_CUDA12` under the CUDA 12 runtime,
/// `ABI_DIFFERS_IN_CUBLAS12` under cuBLAS 12: the setting aside is
/// exercised on the cuda12 stack; NCCL's list is empty), and the table
/// found that file through the address of one of its symbols. In each
/// table one function that needs no device (`cudnnGetVersion`,
/// `cudaRuntimeGetVersion`, `cublasGetCudartVersion`,
/// `cublasLtGetVersion`, `ncclGetVersion`) called through the table and
/// through `dlsym`'s address gives the same answer. NCCL's table is
/// checked when NCCL loads (built with `nccl`).
fn tables_match_dlsym() -> TestResult {
    use cudnn::sys::cudart::loader::LibraryInfo;
    use cudnn::sys::{cublas, cudart, cudnn as dnn};
    let (d, r, b, lt) = (
        dnn::load()?,
        cudart::load()?,
        cublas::load()?,
        cublas::load_lt()?,
    );
    let major = |i: &LibraryInfo| i.version.map_or(0, |v| v.major);
    let none: &[&str] = &[];
    let dnn_old = if major(d.info()) < 9 {
        dnn::ABI_DIFFERS_IN_CUDNN8
    } else {
        none
    };
    let blas_old = |i: &LibraryInfo| {
        if major(i) < 13 {
            cublas::ABI_DIFFERS_IN_CUBLAS12
        } else {
            none
        }
    };
    let e = |e: cudnn::sys::cudart::loader::MissingSymbol| e.to_string();
    #[allow(unused_mut)]
    let mut tables = vec![
        Table {
            name: "cudnn",
            symbols: dnn::Cudnn::SYMBOLS,
            has: Box::new(|s| d.has_symbol(s)),
            info: d.info(),
            set_aside: dnn_old,
            probe: Probe {
                symbol: "cudnnGetVersion",
                through_table: Box::new(move || {
                    // SAFETY: takes nothing, needs no device.
                    let v = unsafe { d.cudnnGetVersion() }.map_err(e)?;
                    Ok((0, v as i64))
                }),
                through_address: call_size_t,
            },
        },
        Table {
            name: "cudart",
            symbols: cudart::Cudart::SYMBOLS,
            has: Box::new(|s| r.has_symbol(s)),
            info: r.info(),
            set_aside: if major(r.info()) < 13 {
                cudart::ABI_DIFFERS_IN_CUDA12
            } else {
                none
            },
            probe: Probe {
                symbol: "cudaRuntimeGetVersion",
                through_table: Box::new(move || {
                    let mut v = 0;
                    // SAFETY: a valid out-pointer; needs no device.
                    let st = unsafe { r.cudaRuntimeGetVersion(&mut v) }.map_err(e)?;
                    Ok((i64::from(st.0), i64::from(v)))
                }),
                through_address: call_out_int,
            },
        },
        Table {
            name: "cublas",
            symbols: cublas::Cublas::SYMBOLS,
            has: Box::new(|s| b.has_symbol(s)),
            info: b.info(),
            set_aside: blas_old(b.info()),
            probe: Probe {
                symbol: "cublasGetCudartVersion",
                through_table: Box::new(move || {
                    // SAFETY: takes nothing, needs no device.
                    let v = unsafe { b.cublasGetCudartVersion() }.map_err(e)?;
                    Ok((0, v as i64))
                }),
                through_address: call_size_t,
            },
        },
        Table {
            name: "cublasLt",
            symbols: cublas::CublasLt::SYMBOLS,
            has: Box::new(|s| lt.has_symbol(s)),
            info: lt.info(),
            set_aside: blas_old(lt.info()),
            probe: Probe {
                symbol: "cublasLtGetVersion",
                through_table: Box::new(move || {
                    // SAFETY: takes nothing, needs no device.
                    let v = unsafe { lt.cublasLtGetVersion() }.map_err(e)?;
                    Ok((0, v as i64))
                }),
                through_address: call_size_t,
            },
        },
    ];
    #[cfg(feature = "nccl")]
    match cudnn::sys::nccl::load() {
        Ok(n) => tables.push(Table {
            name: "nccl",
            symbols: cudnn::sys::nccl::Nccl::SYMBOLS,
            has: Box::new(|s| n.has_symbol(s)),
            info: n.info(),
            set_aside: cudnn::sys::nccl::ABI_DIFFERS_IN_NCCL_CU12,
            probe: Probe {
                symbol: "ncclGetVersion",
                through_table: Box::new(move || {
                    let mut v = 0;
                    // SAFETY: a valid out-pointer; needs no device.
                    let st = unsafe { n.ncclGetVersion(&mut v) }.map_err(e)?;
                    Ok((i64::from(st.0), i64::from(v)))
                }),
                through_address: call_out_int,
            },
        }),
        Err(e) => eprintln!("skipped: the NCCL table: NCCL does not load here: {e}"),
    }
    #[cfg(not(feature = "nccl"))]
    eprintln!("skipped: the NCCL table: built without the `nccl` feature");
    for t in &tables {
        let name = t.name;
        let path = t
            .info
            .path
            .as_ref()
            .ok_or(format!("{name}: the table names no file"))?;
        let (mut found, mut aside) = (0, 0);
        for s in t.symbols {
            let by_loader = dlsym(path, s)?.is_some();
            let set_aside = t.set_aside.contains(s);
            let want = by_loader && !set_aside;
            ensure!(
                (t.has)(s) == want,
                "{name}: {s}: the table says {}, dlsym says {by_loader}, set aside {set_aside}",
                (t.has)(s)
            );
            found += usize::from(want);
            aside += usize::from(by_loader && set_aside);
        }
        ensure!(found > 0, "{name}: no symbol found in {}", path.display());
        ensure!(
            !(t.has)("not_a_symbol_of_any_library"),
            "{name}: an unknown name is not a symbol"
        );
        let p = &t.probe;
        let addr = dlsym(path, p.symbol)?.ok_or(format!("{name}: {} missing", p.symbol))?;
        let (direct, tabled) = ((p.through_address)(addr), (p.through_table)()?);
        ensure!(
            direct == tabled,
            "{name}: {}: (status, value) {direct:?} by dlsym's address, {tabled:?} through the table",
            p.symbol
        );
        ensure!(direct.0 == 0, "{name}: {} failed: {direct:?}", p.symbol);
        eprintln!(
            "{name}: {found} of {} symbols, as dlsym finds them ({aside} exported but set aside); {} = {} both ways",
            t.symbols.len(),
            p.symbol,
            direct.1
        );
    }
    Ok(())
}
