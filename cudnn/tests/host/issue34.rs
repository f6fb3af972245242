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
//! Host tier: the convolution descriptors need cuDNN; the matmul and
//! NCCL checks need no library (nothing is called), and run here too.

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
        host("matmul_launch_checks_rules", matmul_rules),
        host("fuzz_matmul_launch_checks_lengths", fuzz_matmul),
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

fn is_mismatch(r: &cudnn::Result<()>, name: &str) -> bool {
    matches!(r, Err(e @ Error::Mismatch { .. }) if e.to_string().contains(name))
}

// ---------------------------------------------------------------- conv

/// x 1x32x16x16, w 32x32x3x3, padding 1, stride 1: y is 1x32x16x16
/// (16 + 2 - 3 + 1 = 16). Lengths in elements, by hand.
const X_LEN: usize = 32 * 16 * 16;
const W_LEN: usize = 32 * 32 * 3 * 3;
const Y_LEN: usize = 32 * 16 * 16;

fn conv_plan() -> cudnn::Result<cudnn::dnn::ConvForwardPlan<f32>> {
    let x = TensorDescriptor::<f32>::nchw(1, 32, 16, 16)?;
    let w = FilterDescriptor::<f32>::nchw(32, 32, 3, 3)?;
    let conv = ConvDescriptor::new_2d([1, 1], [1, 1], [1, 1])?;
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
    MatmulSpec::new(
        Layout::row_major(M, K),
        Layout::row_major(K, N),
        Layout::row_major(M, N),
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

fn matmul_rules() -> TestResult {
    let plain = spec(Epilogue::None);
    let full = [(A, M * K), (B, K * N), (D, M * N)];
    mm(&plain, 1.0, full, EpilogueArgs::none())?;
    // One element short, by operand.
    for (i, name) in ["a", "b", "d"].into_iter().enumerate() {
        let mut lens = full;
        lens[i].1 -= 1;
        let r = mm(&plain, 1.0, lens, EpilogueArgs::none());
        ensure!(is_mismatch(&r, name), "{name} one short: {r:?}");
    }
    // Off the spec's 16-byte alignment by one f16 (2 bytes): refused, naming it.
    for (i, name) in ["a", "b", "d"].into_iter().enumerate() {
        let mut ptrs = full;
        ptrs[i].0 += 2;
        match mm(&plain, 1.0, ptrs, EpilogueArgs::none()) {
            Err(e @ Error::InvalidArgument { .. }) if e.to_string().contains(name) => {}
            other => return Err(format!("{name} misaligned: {other:?}").into()),
        }
    }
    // The bias epilogue needs its bias (M elements, one per row of D).
    let bias = spec(Epilogue::Bias);
    let r = mm(&bias, 1.0, full, EpilogueArgs::none());
    ensure!(
        matches!(&r, Err(e @ Error::InvalidArgument { .. }) if e.to_string().contains("epilogue.bias")),
        "bias missing: {r:?}"
    );
    mm(
        &bias,
        1.0,
        full,
        EpilogueArgs::none().bias(ins::<f16>(0x4000_0000, M)),
    )?;
    // ... and no auxiliary buffer.
    let r = mm(
        &bias,
        1.0,
        full,
        EpilogueArgs::none()
            .bias(ins::<f16>(0x4000_0000, M))
            .aux_out(outs::<u8>(0x5000_0000, 1 << 16)),
    );
    ensure!(
        matches!(&r, Err(e @ Error::InvalidArgument { .. }) if e.to_string().contains("epilogue.aux_out")),
        "unexpected aux: {r:?}"
    );
    // With the f16 compute type alpha is an f16: 65504 (the largest finite
    // f16) is held, 1e5 is not.
    let f16c = spec(Epilogue::None).with_compute(ComputeType::F16);
    mm(&f16c, 65504.0, full, EpilogueArgs::none())?;
    match mm(&f16c, 1.0e5, full, EpilogueArgs::none()) {
        Err(e @ Error::InvalidArgument { .. }) if e.to_string().contains("alpha") => {}
        other => return Err(format!("alpha 1e5 in f16: {other:?}").into()),
    }
    Ok(())
}

/// Property: over lengths and 2-byte address offsets of A, B and D, the
/// checks pass exactly when every length reaches rows x cols (row-major,
/// by hand) and every address is a multiple of 16; a refusal is typed.
fn fuzz_matmul() -> TestResult {
    let plain = spec(Epilogue::None);
    let need = [M * K, K * N, M * N];
    let len = |n: usize| (n - 2)..(n + 2);
    runner(0x34c1, 128 * fuzz_scale() as u32)
        .run(
            &(
                (len(need[0]), len(need[1]), len(need[2])),
                (0usize..3, 0usize..3, 0usize..3),
            ),
            |((la, lb, ld), (oa, ob, od))| {
                let args = [(A + 8 * oa, la), (B + 8 * ob, lb), (D + 8 * od, ld)];
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
    t.push(host("nccl_launch_checks_rules", nccl_rules));
    t.push(host("fuzz_nccl_launch_checks_lengths", fuzz_nccl));
}

/// The direct all-reduce's rules (the checks never call NCCL; the group
/// around one may load it).
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
        matches!(&r, Err(e @ Error::Mismatch { .. }) if e.to_string().contains("100") && e.to_string().contains("99")),
        "recv one short: {r:?}"
    );
    // Documented: NCCL calls refuse the per-thread default stream.
    let r = c.all_reduce(
        ins::<f32>(A, 8),
        outs::<f32>(B, 8),
        ReduceOp::Sum,
        &Stream::per_thread(),
    );
    ensure!(
        matches!(&r, Err(e @ Error::InvalidArgument { .. }) if e.to_string().contains("stream")),
        "per-thread stream: {r:?}"
    );
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

/// Every table knows a symbol exactly when the system loader finds it in
/// the file the table loaded and the symbol is not one the crate documents
/// as set aside for that version (`ABI_DIFFERS_IN_CUDNN8` under cuDNN 8,
/// `ABI_DIFFERS_IN_CUDA12` under the CUDA 12 runtime,
/// `ABI_DIFFERS_IN_CUBLAS12` under cuBLAS 12: the setting aside is
/// exercised on the cuda12 stack), and the table found that file through
/// the address of one of its symbols. One function called through the
/// table and through `dlsym`'s address gives the same answer.
fn tables_match_dlsym() -> TestResult {
    use cudnn::sys::cudart::loader::LibraryInfo;
    use cudnn::sys::{cublas, cudart, cudnn as dnn};
    struct Table<'a> {
        name: &'a str,
        symbols: &'a [&'static str],
        has: Box<dyn Fn(&str) -> bool + 'a>,
        info: &'a LibraryInfo,
        set_aside: &'a [&'static str],
    }
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
    let tables = [
        Table {
            name: "cudnn",
            symbols: dnn::Cudnn::SYMBOLS,
            has: Box::new(|s| d.has_symbol(s)),
            info: d.info(),
            set_aside: dnn_old,
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
        },
        Table {
            name: "cublas",
            symbols: cublas::Cublas::SYMBOLS,
            has: Box::new(|s| b.has_symbol(s)),
            info: b.info(),
            set_aside: blas_old(b.info()),
        },
        Table {
            name: "cublasLt",
            symbols: cublas::CublasLt::SYMBOLS,
            has: Box::new(|s| lt.has_symbol(s)),
            info: lt.info(),
            set_aside: blas_old(lt.info()),
        },
    ];
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
        eprintln!(
            "{name}: {found} of {} symbols, as dlsym finds them ({aside} exported but set aside)",
            t.symbols.len()
        );
    }
    // cudnnGetVersion through the table and through dlsym's address.
    let path = d.info().path.clone().ok_or("cudnn: no file")?;
    let addr = dlsym(&path, "cudnnGetVersion")?.ok_or("cudnnGetVersion missing")?;
    // SAFETY: the address of `size_t cudnnGetVersion(void)` in the loaded cuDNN.
    let direct: unsafe extern "C" fn() -> usize = unsafe { std::mem::transmute(addr) };
    // SAFETY: takes nothing, needs no device.
    let (a, v) = (unsafe { direct() }, unsafe { d.cudnnGetVersion() }?);
    ensure!(
        a == v,
        "cudnnGetVersion: {a} by dlsym, {v} through the table"
    );
    Ok(())
}
