//! Scaled FP8 cuBLASLt matmul on a device against the f64 reference
//! [`gemm_fp8`] (gpu tier; skipped visibly without a device).
//!
//! Inputs are random FP8 codes (finite, of moderate magnitude); outputs are
//! poisoned (NaN, or the FP8 NaN code) before each run, so an element the
//! library does not write fails. Bounds: [`tolerance`] (final rounding of
//! D's type plus k accumulation roundings of 2^-14 each: Hopper's FP8
//! tensor cores keep about 14 bits while accumulating, with fast
//! accumulation or without (see `case_with`); plus 1e-3 for GELU's
//! approximation), relative to max |D|; the amax of D within the
//! accumulation bound of the reference's (which is taken before `scale_d`,
//! as cuBLASLt documents). Misuse is refused before
//! the call, naming the argument.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// `ensure!(err <= tol, ..)` negates a float comparison on purpose: NaN fails.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use crate::support;

use cudnn::blas::{
    Epilogue, Fp8Bias, Fp8Input, Fp8MatmulPlan, Fp8MatmulSpec, Fp8Output, Fp8OutputType,
    Fp8Scaling, Layout, LtHandle,
};
use cudnn::reference::gemm::max_relative_error;
use cudnn::reference::gemm_fp8::{Fp8Scales, OutputType, gemm_fp8, tolerance};
use cudnn::runtime::{Device, DeviceBuffer, Stream};
use cudnn::{DataType, Error, F8E4M3, F8E5M2};
use half::{bf16, f16};
use support::*;

type R = Result<(), libtest_mimic::Failed>;

pub fn main() {
    run(vec![
        gpu("fp8_e4m3_e4m3_to_bf16_scaled", || {
            case::<F8E4M3, F8E4M3, bf16>(Epilogue::None, false, true)
        }),
        gpu("fp8_e4m3_e4m3_to_f32_bias_relu", || {
            case::<F8E4M3, F8E4M3, f32>(Epilogue::ReluBias, false, false)
        }),
        gpu("fp8_e4m3_e5m2_to_f16_gelu_bias", || {
            case::<F8E4M3, F8E5M2, f16>(Epilogue::GeluTanhBias, false, false)
        }),
        gpu("fp8_e5m2_e4m3_to_bf16_fast_accum", || {
            case::<F8E5M2, F8E4M3, bf16>(Epilogue::None, true, false)
        }),
        gpu("fp8_e4m3_to_e4m3_with_scale_d_and_amax", || {
            case::<F8E4M3, F8E4M3, F8E4M3>(Epilogue::None, false, true)
        }),
        gpu("fp8_e4m3_e5m2_to_e5m2_bias", || {
            // An E5M2 D needs an E5M2 operand (E4M3 x E4M3 -> E5M2 is
            // refused in Rust); with a bf16 bias, as NVIDIA's table lists.
            case::<F8E4M3, F8E5M2, F8E5M2>(Epilogue::Bias, false, true)
        }),
        gpu("fp8_e4m3_to_e4m3_f16_c_and_bias", || {
            case_with::<F8E4M3, F8E4M3, F8E4M3, f16>(Epilogue::ReluBias, false, true)
        }),
        gpu("fp8_e4m3_e5m2_to_e5m2_f16_c_and_bias", || {
            case_with::<F8E4M3, F8E5M2, F8E5M2, f16>(Epilogue::Bias, false, true)
        }),
        gpu("fp8_output_saturates_as_satfinite", saturation),
        gpu("fp8_to_bf16_in_place_beta", in_place),
        gpu("fp8_misuse_refused_before_the_call", misuse),
    ])
}

trait Out: Fp8Output {
    fn f(self) -> f64;
    fn poison() -> Self;
    fn out_type() -> OutputType;
}
impl Out for f32 {
    fn f(self) -> f64 {
        f64::from(self)
    }
    fn poison() -> Self {
        f32::NAN
    }
    fn out_type() -> OutputType {
        OutputType::F32
    }
}
impl Out for f16 {
    fn f(self) -> f64 {
        self.to_f64()
    }
    fn poison() -> Self {
        f16::NAN
    }
    fn out_type() -> OutputType {
        OutputType::F16
    }
}
impl Out for bf16 {
    fn f(self) -> f64 {
        self.to_f64()
    }
    fn poison() -> Self {
        bf16::NAN
    }
    fn out_type() -> OutputType {
        OutputType::BF16
    }
}
impl Out for F8E4M3 {
    fn f(self) -> f64 {
        self.to_f64()
    }
    fn poison() -> Self {
        F8E4M3::NAN
    }
    fn out_type() -> OutputType {
        OutputType::Fp8(cudnn::Fp8Format::E4M3)
    }
}
impl Out for F8E5M2 {
    fn f(self) -> f64 {
        self.to_f64()
    }
    fn poison() -> Self {
        F8E5M2::NAN
    }
    fn out_type() -> OutputType {
        OutputType::Fp8(cudnn::Fp8Format::E5M2)
    }
}

trait BiasElem: DataType {
    fn of(v: f64) -> Self;
    fn back(self) -> f64;
}
impl BiasElem for bf16 {
    fn of(v: f64) -> Self {
        bf16::from_f64(v)
    }
    fn back(self) -> f64 {
        self.to_f64()
    }
}
impl BiasElem for f16 {
    fn of(v: f64) -> Self {
        f16::from_f64(v)
    }
    fn back(self) -> f64 {
        self.to_f64()
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as f64 / (1u64 << 31) as f64) * 2.0 - 1.0
    }
}

/// `n` FP8 values of A's format, uniform in [-4, 4) before rounding.
fn rand_fp8<T: Fp8Input>(n: usize, seed: u64) -> Vec<u8> {
    let mut g = Rng(seed ^ 0x9e37_79b9_7f4a_7c15);
    (0..n)
        .map(|_| T::FORMAT.encode(g.next() * 4.0, cudnn::Fp8Saturation::SatFinite))
        .collect()
}

fn as_type<T: Fp8Input>(codes: &[u8]) -> Vec<T> {
    codes.iter().map(|&c| T::from_bits(c)).collect()
}

fn case<A: Fp8Input, B: Fp8Input, D: Out>(epi: Epilogue, fast: bool, scaled: bool) -> R
where
    D::Bias: BiasElem,
{
    case_with::<A, B, D, D::Bias>(epi, fast, scaled)
}

/// [`case`] with the bias type (C's type for an FP8 D) chosen: issue 31
/// item 7, an FP8 D with an f16 C and bias, as NVIDIA's table allows.
fn case_with<A: Fp8Input, B: Fp8Input, D: Out, Bi: Fp8Bias + BiasElem>(
    epi: Epilogue,
    fast: bool,
    scaled: bool,
) -> R {
    Device::new(0)?;
    let stream = Stream::new()?;
    let lt = LtHandle::new(&stream)?;
    let (m, n, k) = (128, 96, 256);
    let fp8_out = D::TYPE.is_fp8();
    for (la, lb, ld) in [
        // Column-major D: A row-major m x k, B column-major k x n.
        (
            Layout::row_major(m, k),
            Layout::col_major(k, n),
            Layout::col_major(m, n),
        ),
        // Row-major D (the operands are swapped in the library's frame).
        (
            Layout::row_major(m, k),
            Layout::row_major(n, k).t(),
            Layout::row_major(m, n),
        ),
    ] {
        let spec = Fp8MatmulSpec::new(la, lb, ld)
            .with_epilogue(epi)
            .with_fast_accum(fast)
            .with_amax_d(scaled && fp8_out);
        let name = format!(
            "{} x {} -> {} (bias {}) {epi:?} fast {fast}: a {la}, b {lb}, d {ld}",
            A::NAME,
            B::NAME,
            D::NAME,
            Bi::NAME
        );
        let plan = Fp8MatmulPlan::<A, B, D, Bi>::new(&lt, &spec)?;
        let a = rand_fp8::<A>(la.required_len().unwrap(), 11);
        let b = rand_fp8::<B>(lb.required_len().unwrap(), 12);
        let bias_len = plan.shape().bias_len();
        let mut g = Rng(99);
        let bias: Vec<f64> = (0..bias_len.max(1))
            .map(|_| Bi::of(g.next() * 8.0))
            .map(BiasElem::back)
            .collect();
        // Scales: powers of two and a non-power (0.75) for A.
        let sc = if scaled {
            Fp8Scales {
                a: 0.75,
                b: 2.0,
                c: 1.0,
                d: if fp8_out { 0.125 } else { 1.0 },
            }
        } else {
            Fp8Scales::default()
        };
        let want = gemm_fp8(
            1.0,
            (&a, A::FORMAT, &la),
            (&b, B::FORMAT, &lb),
            0.0,
            None,
            &ld,
            D::out_type(),
            &sc,
            epi,
            (bias_len > 0).then_some(&bias[..]),
        )?;
        let da = DeviceBuffer::from_host(&as_type::<A>(&a))?;
        let db = DeviceBuffer::from_host(&as_type::<B>(&b))?;
        let mut dd = DeviceBuffer::from_host(&vec![D::poison(); ld.required_len().unwrap()])?;
        let dbias = DeviceBuffer::from_host(&bias.iter().map(|&v| Bi::of(v)).collect::<Vec<_>>())?;
        let s_a = DeviceBuffer::from_host(&[sc.a as f32])?;
        let s_b = DeviceBuffer::from_host(&[sc.b as f32])?;
        let s_d = DeviceBuffer::from_host(&[sc.d as f32])?;
        let mut amax = DeviceBuffer::from_host(&[f32::NAN])?;
        let mut scaling = Fp8Scaling::default();
        scaling.a = scaled.then(|| (&s_a).into());
        scaling.b = scaled.then(|| (&s_b).into());
        scaling.d = (scaled && fp8_out).then(|| (&s_d).into());
        scaling.amax_d = (scaled && fp8_out).then(|| (&mut amax).into());
        plan.run(
            &lt,
            1.0,
            &da,
            &db,
            0.0,
            &mut dd,
            scaling,
            (bias_len > 0).then(|| (&dbias).into()),
        )?;
        stream.synchronize()?;
        let got: Vec<f64> = dd.to_vec()?.into_iter().map(Out::f).collect();
        // GELU: plus 1e-3, the allowance gpu/gemm gives cuBLASLt's tanh
        // approximation.
        let gelu = matches!(epi, Epilogue::GeluTanh | Epilogue::GeluTanhBias);
        // Accumulation: the fast model (u_acc = 2^-14 per term) with and
        // without CUBLASLT_MATMUL_DESC_FAST_ACCUM. Hopper's FP8 tensor cores
        // keep about 14 significant bits while they accumulate (DeepSeek-V3
        // technical report, section 3.3.2, "Increasing Accumulation
        // Precision": ~14 bits on H800, up to ~2% relative error at
        // k = 4096; NVIDIA Transformer Engine's FP8 notes likewise), and
        // without fast accumulation cuBLASLt promotes the partial sums to
        // f32 at an interval it does not document, so each of the k terms
        // may carry 2^-14 of max |D| at worst: k * 2^-14 (1.6e-2 at k =
        // 256). The first GPU run (H100, cuBLAS 13.1) measured 2.1e-4
        // with an f32 D, above the f32-accumulation bound 1.5e-5 that
        // assumed 2^-24 per term. An error of layout, scale or bias is
        // O(1), far above either bound.
        let tol = tolerance(k, D::out_type(), true) + if gelu { 1e-3 } else { 0.0 };
        let err = max_relative_error(&got, &want.d);
        ensure!(
            err <= tol,
            "{name}: D relative error {err:e} > {tol:e} (NaN or unwritten reads as inf)"
        );
        if scaled && fp8_out {
            // cuBLASLt's amax of D is the largest |D| before scale_d and
            // before D's rounding to FP8 (the first GPU run agrees: 490.71
            // against the reference's 490.78 before scale_d, 61.3 after),
            // computed from the same accumulated values as D: each differs
            // from the reference by at most the accumulation error above
            // (k * 2^-14 of max |D|), so the max does too; plus an f32
            // rounding of the stored amax.
            let got_amax = f64::from(amax.to_vec()?[0]);
            let e = (got_amax - want.amax).abs() / want.amax.max(1e-30);
            ensure!(
                e <= tolerance(k, OutputType::F32, true),
                "{name}: amax {got_amax} vs reference (before scale_d) {} (after scale_d it would be {})",
                want.amax,
                want.amax * sc.d
            );
        }
        eprintln!("{name}: max relative error {err:.3e} (bound {tol:.3e})");
    }
    Ok(())
}

/// An E4M3 D with scale_d = 64: most results exceed 448. The reference
/// saturates (`SatFinite`, what the `cvt.rn.satfinite` conversion of the
/// epilogue does); a library that did not would write NaN there, which
/// fails with a message saying so.
fn saturation() -> R {
    Device::new(0)?;
    let stream = Stream::new()?;
    let lt = LtHandle::new(&stream)?;
    let (m, n, k) = (64, 64, 64);
    let (la, lb, ld) = (
        Layout::row_major(m, k),
        Layout::col_major(k, n),
        Layout::col_major(m, n),
    );
    let spec = Fp8MatmulSpec::new(la, lb, ld).with_amax_d(true);
    let plan = Fp8MatmulPlan::<F8E4M3, F8E4M3, F8E4M3>::new(&lt, &spec)?;
    let a = rand_fp8::<F8E4M3>(m * k, 21);
    let b = rand_fp8::<F8E4M3>(k * n, 22);
    let sc = Fp8Scales {
        d: 64.0,
        ..Fp8Scales::default()
    };
    let want = gemm_fp8(
        1.0,
        (&a, cudnn::Fp8Format::E4M3, &la),
        (&b, cudnn::Fp8Format::E4M3, &lb),
        0.0,
        None,
        &ld,
        OutputType::Fp8(cudnn::Fp8Format::E4M3),
        &sc,
        Epilogue::None,
        None,
    )?;
    let saturated = want.d.iter().filter(|v| v.abs() == 448.0).count();
    ensure!(
        saturated > m * n / 4,
        "the case must saturate: only {saturated} at 448"
    );
    let da = DeviceBuffer::from_host(&as_type::<F8E4M3>(&a))?;
    let db = DeviceBuffer::from_host(&as_type::<F8E4M3>(&b))?;
    let mut dd = DeviceBuffer::from_host(&vec![F8E4M3::NAN; m * n])?;
    let s_d = DeviceBuffer::from_host(&[64.0f32])?;
    let mut amax = DeviceBuffer::from_host(&[f32::NAN])?;
    let scaling = Fp8Scaling::default()
        .with_d((&s_d).into())
        .with_amax_d((&mut amax).into());
    plan.run(&lt, 1.0, &da, &db, 0.0, &mut dd, scaling, None)?;
    stream.synchronize()?;
    let got: Vec<f64> = dd.to_vec()?.into_iter().map(F8E4M3::to_f64).collect();
    let nans = got.iter().filter(|v| v.is_nan()).count();
    ensure!(
        nans == 0,
        "{nans} of {} outputs are NaN: the library's FP8 output does not saturate (NoSat) where the reference does",
        got.len()
    );
    let tol = tolerance(k, OutputType::Fp8(cudnn::Fp8Format::E4M3), false);
    let err = max_relative_error(&got, &want.d);
    ensure!(err <= tol, "saturated D: relative error {err:e} > {tol:e}");
    eprintln!(
        "saturation: {saturated} of {} results at ±448, max relative error {err:.3e}",
        m * n
    );
    Ok(())
}

/// A bf16 D accumulated in place (beta 0.5, C = D's previous contents),
/// both D orders: the in-place form C == D with D's own layout, against the
/// reference given the same C.
fn in_place() -> R {
    Device::new(0)?;
    let stream = Stream::new()?;
    let lt = LtHandle::new(&stream)?;
    let (m, n, k) = (64, 48, 64);
    for ld in [Layout::col_major(m, n), Layout::row_major(m, n)] {
        let (la, lb) = (Layout::row_major(m, k), Layout::col_major(k, n));
        let spec = Fp8MatmulSpec::new(la, lb, ld);
        let plan = Fp8MatmulPlan::<F8E4M3, F8E4M3, bf16>::new(&lt, &spec)?;
        let a = rand_fp8::<F8E4M3>(m * k, 31);
        let b = rand_fp8::<F8E4M3>(k * n, 32);
        let mut g = Rng(33);
        let c: Vec<bf16> = (0..m * n)
            .map(|_| bf16::from_f64(g.next() * 16.0))
            .collect();
        let c64: Vec<f64> = c.iter().map(|v| v.to_f64()).collect();
        let sc = Fp8Scales::default();
        let want = gemm_fp8(
            1.0,
            (&a, cudnn::Fp8Format::E4M3, &la),
            (&b, cudnn::Fp8Format::E4M3, &lb),
            0.5,
            Some(&c64),
            &ld,
            OutputType::BF16,
            &sc,
            Epilogue::None,
            None,
        )?;
        let da = DeviceBuffer::from_host(&as_type::<F8E4M3>(&a))?;
        let db = DeviceBuffer::from_host(&as_type::<F8E4M3>(&b))?;
        let mut dd = DeviceBuffer::from_host(&c)?;
        plan.run(
            &lt,
            1.0,
            &da,
            &db,
            0.5,
            &mut dd,
            Fp8Scaling::default(),
            None,
        )?;
        stream.synchronize()?;
        let got: Vec<f64> = dd.to_vec()?.into_iter().map(|v| v.to_f64()).collect();
        let tol = tolerance(k, OutputType::BF16, false);
        let err = max_relative_error(&got, &want.d);
        ensure!(
            err <= tol,
            "in place, d {ld}: relative error {err:e} > {tol:e}"
        );
        eprintln!("in place, d {ld}: max relative error {err:.3e}");
    }
    Ok(())
}

fn misuse() -> R {
    Device::new(0)?;
    let stream = Stream::new()?;
    let lt = LtHandle::new(&stream)?;
    let (m, n, k) = (32, 32, 32);
    let spec = Fp8MatmulSpec::new(
        Layout::row_major(m, k),
        Layout::col_major(k, n),
        Layout::col_major(m, n),
    );
    let a = DeviceBuffer::from_host(&vec![F8E4M3::from_f32(1.0); m * k])?;
    let b = DeviceBuffer::from_host(&vec![F8E4M3::from_f32(1.0); k * n])?;
    let one = DeviceBuffer::from_host(&[1.0f32])?;
    let named = |r: cudnn::Result<()>, arg: &str| match r {
        Err(Error::InvalidArgument { arg: got, .. }) if got == arg => Ok(()),
        other => Err(format!("want InvalidArgument naming {arg}, got {other:?}")),
    };
    // FP8 D: beta must be 0; no C scale.
    let p8 = Fp8MatmulPlan::<F8E4M3, F8E4M3, F8E4M3>::new(&lt, &spec)?;
    let mut d8 = DeviceBuffer::from_host(&vec![F8E4M3::ZERO; m * n])?;
    named(
        p8.run(&lt, 1.0, &a, &b, 1.0, &mut d8, Fp8Scaling::default(), None),
        "beta",
    )?;
    let s = Fp8Scaling::default().with_c((&one).into());
    named(p8.run(&lt, 1.0, &a, &b, 0.0, &mut d8, s, None), "scale.c")?;
    // bf16 D: no D scale; amax only when the spec asks; bias only with a
    // bias epilogue.
    let pb = Fp8MatmulPlan::<F8E4M3, F8E4M3, bf16>::new(&lt, &spec)?;
    let mut db = DeviceBuffer::from_host(&vec![bf16::ZERO; m * n])?;
    let s = Fp8Scaling::default().with_d((&one).into());
    named(pb.run(&lt, 1.0, &a, &b, 0.0, &mut db, s, None), "scale.d")?;
    // No C scale for any D here (cuBLASLt takes one for an FP8 C only).
    let s = Fp8Scaling::default().with_c((&one).into());
    named(pb.run(&lt, 1.0, &a, &b, 0.5, &mut db, s, None), "scale.c")?;
    let mut amax = DeviceBuffer::from_host(&[0.0f32])?;
    let s = Fp8Scaling::default().with_amax_d((&mut amax).into());
    named(
        pb.run(&lt, 1.0, &a, &b, 0.0, &mut db, s, None),
        "scale.amax_d",
    )?;
    let bias = DeviceBuffer::from_host(&vec![bf16::ZERO; m])?;
    named(
        pb.run(
            &lt,
            1.0,
            &a,
            &b,
            0.0,
            &mut db,
            Fp8Scaling::default(),
            Some((&bias).into()),
        ),
        "bias",
    )?;
    named(
        pb.run(
            &lt,
            f32::NAN,
            &a,
            &b,
            0.0,
            &mut db,
            Fp8Scaling::default(),
            None,
        ),
        "alpha",
    )?;
    // A short A is a mismatch, not a call.
    let short = DeviceBuffer::from_host(&vec![F8E4M3::ZERO; m * k - 1])?;
    ensure!(
        matches!(
            pb.run(
                &lt,
                1.0,
                &short,
                &b,
                0.0,
                &mut db,
                Fp8Scaling::default(),
                None
            ),
            Err(Error::Mismatch { .. })
        ),
        "short a"
    );
    // An empty scale is a mismatch naming it, not a call.
    let empty = DeviceBuffer::<f32>::from_host(&[])?;
    let s = Fp8Scaling::default().with_a((&empty).into());
    ensure!(
        matches!(
            pb.run(&lt, 1.0, &a, &b, 0.0, &mut db, s, None),
            Err(Error::Mismatch { ref what, .. }) if what.contains("scale.a")
        ),
        "empty scale.a"
    );
    // The output type tag agrees with the trait.
    ensure!(<bf16 as Fp8Output>::TYPE == Fp8OutputType::BF16, "tag");
    Ok(())
}
