//! GEMM, GEMV and cuBLASLt matmul on a device, against the f64 CPU
//! reference (gpu tier; skipped visibly without a device).
//!
//! Inputs are random and exactly representable in their type (the
//! reference sees the same values); outputs are poisoned (NaN, or i32::MIN
//! for integers) before every run, so an element the library does not
//! write fails, and NaN never passes ([`max_relative_error`] is infinite
//! for it). Bounds, relative to the largest reference value: f64 1e-12,
//! f32 1e-5, TF32 2e-3 (the library may truncate to TF32 rather than
//! round), f16/bf16 outputs or reduced-precision inputs 1e-2, i8 exact;
//! GELU and its gradient in f32 1e-3 (the library may use an approximate
//! tanh).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// `ensure!(err <= tol, ..)` negates a float comparison on purpose: NaN fails.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use crate::support;

use cudnn::blas::{
    AuxKind, ComputeType, Epilogue, EpilogueArgs, GemmTypes, Handle, Layout, LtHandle, MatmulKey,
    MatmulPlan, MatmulSpec, Matrix, MatrixMut, Order, PlanCache,
};
use cudnn::reference::gemm::{self as r, max_relative_error};
use cudnn::runtime::{Device, DeviceBuffer, Stream};
use cudnn::{DataType, Error, Scale};
use half::{bf16, f16};
use support::*;

type R = Result<(), libtest_mimic::Failed>;

pub fn main() {
    run(vec![
        gpu("gemm_f32_every_layout_row_vs_col_major", gemm_layouts),
        gpu("gemm_f32_alpha_beta_and_padded_ld", gemm_alpha_beta),
        gpu("gemm_f32_compute_policies", gemm_f32_policies),
        gpu("gemm_f64", gemm_f64),
        gpu("gemm_f16_f32_accumulate", gemm_f16),
        gpu("gemm_f16_f16_accumulate", gemm_f16_f16acc),
        gpu("gemm_f16_to_f32", gemm_f16_f32),
        gpu("gemm_bf16", gemm_bf16),
        gpu("gemm_i8_to_i32", gemm_i8),
        gpu("gemm_strided_batched_vs_loop", gemm_strided),
        gpu("gemm_pointer_batched_vs_loop", gemm_pointer_batched),
        gpu("gemv_f32_f64", gemv),
        gpu("gemm_short_buffer_is_error_not_call", gemm_short_buffer),
        gpu("lt_forward_epilogues_f32", || {
            lt_forward::<f32, f32>(1e-5, 1e-3)
        }),
        gpu("lt_forward_epilogues_f16", || {
            lt_forward::<f16, f16>(1e-2, 1e-2)
        }),
        gpu("lt_forward_epilogues_bf16", || {
            lt_forward::<bf16, bf16>(1e-2, 1e-2)
        }),
        gpu("lt_forward_f16_to_f32", || {
            lt_forward::<f16, f32>(1e-4, 1e-3)
        }),
        gpu("lt_backward_epilogues_f32", || {
            lt_backward::<f32, f32>(1e-3)
        }),
        gpu("lt_backward_epilogues_f16", || {
            lt_backward::<f16, f16>(1e-2)
        }),
        gpu("lt_alpha_beta_tf32_and_types", lt_alpha_beta),
        gpu("lt_batched_vs_reference", lt_batched),
        gpu("lt_plan_cache_and_reuse", lt_plan_cache),
        gpu("lt_plan_shared_by_threads", lt_plan_threads),
    ])
}

// ---------------------------------------------------------------------------
// Elements, data and the device context

trait Elem: DataType {
    fn of(v: f64) -> Self;
    fn f(self) -> f64;
    fn poison() -> Self;
    fn put(self, out: &mut [u8]);
    fn take(b: &[u8]) -> Self;
}

macro_rules! elem_float {
    ($t:ty, $of:expr, $f:expr) => {
        impl Elem for $t {
            fn of(v: f64) -> Self {
                $of(v)
            }
            fn f(self) -> f64 {
                $f(self)
            }
            fn poison() -> Self {
                Self::of(f64::NAN)
            }
            fn put(self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_le_bytes());
            }
            fn take(b: &[u8]) -> Self {
                <$t>::from_le_bytes(b.try_into().unwrap())
            }
        }
    };
}
elem_float!(f32, |v| v as f32, f64::from);
elem_float!(f64, |v| v, |v| v);
elem_float!(f16, f16::from_f64, f16::to_f64);
elem_float!(bf16, bf16::from_f64, bf16::to_f64);

macro_rules! elem_int {
    ($t:ty) => {
        impl Elem for $t {
            fn of(v: f64) -> Self {
                v.round().clamp(<$t>::MIN as f64, <$t>::MAX as f64) as $t
            }
            fn f(self) -> f64 {
                f64::from(self)
            }
            fn poison() -> Self {
                <$t>::MIN
            }
            fn put(self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_le_bytes());
            }
            fn take(b: &[u8]) -> Self {
                <$t>::from_le_bytes(b.try_into().unwrap())
            }
        }
    };
}
elem_int!(i8);
elem_int!(i32);

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

/// `n` random values exactly representable in T, and their f64 values.
fn rand<T: Elem>(n: usize, seed: u64) -> (Vec<T>, Vec<f64>) {
    let mut g = Rng(seed ^ 0x9e37_79b9_7f4a_7c15);
    let scale = if T::IS_FLOAT { 1.0 } else { 8.0 };
    let v: Vec<T> = (0..n).map(|_| T::of(g.next() * scale)).collect();
    let f = v.iter().map(|x| x.f()).collect();
    (v, f)
}

fn poisoned<T: Elem>(n: usize) -> Vec<T> {
    vec![T::poison(); n]
}

fn down<T: Elem>(b: &DeviceBuffer<T>) -> cudnn::Result<Vec<f64>> {
    Ok(b.to_vec()?.into_iter().map(Elem::f).collect())
}

/// The logical matrix (row-major, batch after batch) read through `l`.
fn logical(v: &[f64], l: &Layout) -> Vec<f64> {
    let mut out = Vec::new();
    for p in 0..l.batch_count() {
        for i in 0..l.rows() {
            for j in 0..l.cols() {
                out.push(
                    l.offset(p, i, j)
                        .and_then(|o| v.get(o).copied())
                        .unwrap_or(f64::NAN),
                );
            }
        }
    }
    out
}

struct Cx {
    stream: Stream,
    blas: Handle,
    lt: LtHandle,
}

fn cx() -> cudnn::Result<Cx> {
    Device::new(0)?;
    let stream = Stream::new()?;
    Ok(Cx {
        blas: Handle::new(&stream)?,
        lt: LtHandle::new(&stream)?,
        stream,
    })
}

fn within(what: &str, got: &[f64], want: &[f64], tol: f64) -> R {
    let err = max_relative_error(got, want);
    ensure!(
        err <= tol,
        "{what}: relative error {err:e} > {tol:e} (NaN or a length mismatch reads as inf)"
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// cublasGemmEx

/// Run C = alpha·A·B + beta·C on the GPU and in f64; returns the GPU's logical C.
#[allow(clippy::too_many_arguments)]
fn check_gemm<A: Elem + GemmTypes<C>, C: Elem>(
    cx: &Cx,
    la: Layout,
    lb: Layout,
    lc: Layout,
    compute: ComputeType,
    alpha: f64,
    beta: f64,
    tol: f64,
    seed: u64,
) -> Result<Vec<f64>, libtest_mimic::Failed> {
    let (a, af) = rand::<A>(la.required_len().unwrap(), seed);
    let (b, bf) = rand::<B<A>>(lb.required_len().unwrap(), seed + 1);
    let (c0, mut want) = if beta == 0.0 {
        let p = poisoned::<C>(lc.required_len().unwrap());
        let f = p.iter().map(|x| x.f()).collect();
        (p, f)
    } else {
        rand::<C>(lc.required_len().unwrap(), seed + 2)
    };
    let (da, db) = (DeviceBuffer::from_host(&a)?, DeviceBuffer::from_host(&b)?);
    let mut dc = DeviceBuffer::from_host(&c0)?;
    cx.blas.gemm(
        <A as DataType>::Scale::from_f64(alpha),
        Matrix::new(&da, la),
        Matrix::new(&db, lb),
        <A as DataType>::Scale::from_f64(beta),
        MatrixMut::new(&mut dc, lc),
        compute,
    )?;
    cx.stream.synchronize()?;
    let got = down(&dc)?;
    r::gemm(alpha, &af, &la, &bf, &lb, beta, &mut want, &lc)?;
    let (g, w) = (logical(&got, &lc), logical(&want, &lc));
    within(
        &format!(
            "{} -> {} {compute:?}: a {la}, b {lb}, c {lc}",
            A::NAME,
            C::NAME
        ),
        &g,
        &w,
        tol,
    )?;
    Ok(g)
}

/// B has A's element type (a type alias keeps the call sites short).
type B<A> = A;

fn layout(o: Order, rows: usize, cols: usize, transposed: bool, pad: usize) -> Layout {
    if transposed {
        let l = Layout::new(o, cols, rows);
        l.with_ld(l.ld() + pad).t()
    } else {
        let l = Layout::new(o, rows, cols);
        l.with_ld(l.ld() + pad)
    }
}

fn gemm_layouts() -> R {
    let cx = cx()?;
    let (m, n, k) = (67, 45, 33);
    let mut results: Vec<(String, Vec<f64>)> = Vec::new();
    let mut seed = 100;
    for oa in [Order::RowMajor, Order::ColMajor] {
        for ob in [Order::RowMajor, Order::ColMajor] {
            for oc in [Order::RowMajor, Order::ColMajor] {
                for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                    // Same seed per (A, B) logical content is not possible across
                    // layouts, so each run is checked against the reference, and
                    // row- vs column-major C are compared on identical inputs below.
                    seed += 3;
                    let la = layout(oa, m, k, ta, 0);
                    let lb = layout(ob, k, n, tb, 0);
                    let lc = Layout::new(oc, m, n);
                    check_gemm::<f32, f32>(
                        &cx,
                        la,
                        lb,
                        lc,
                        ComputeType::Default,
                        1.0,
                        0.0,
                        1e-5,
                        seed,
                    )?;
                }
            }
        }
    }
    // Identical A and B buffers, C row-major vs column-major: same answer.
    for (la, lb) in [
        (Layout::row_major(m, k), Layout::row_major(k, n)),
        (Layout::col_major(m, k), Layout::col_major(k, n)),
        (Layout::row_major(k, m).t(), Layout::col_major(n, k).t()),
    ] {
        for lc in [
            Layout::row_major(m, n),
            Layout::col_major(m, n),
            Layout::row_major(n, m).t(),
        ] {
            let g =
                check_gemm::<f32, f32>(&cx, la, lb, lc, ComputeType::Default, 1.0, 0.0, 1e-5, 7)?;
            results.push((format!("a {la} b {lb} c {lc}"), g));
        }
    }
    for chunk in results.chunks(3) {
        for (name, g) in &chunk[1..] {
            within(&format!("{name} vs {}", chunk[0].0), g, &chunk[0].1, 1e-5)?;
        }
    }
    Ok(())
}

fn gemm_alpha_beta() -> R {
    let cx = cx()?;
    let (m, n, k) = (40, 24, 56);
    check_gemm::<f32, f32>(
        &cx,
        Layout::row_major(m, k),
        Layout::col_major(k, n),
        Layout::row_major(m, n),
        ComputeType::Default,
        0.5,
        -1.5,
        1e-5,
        11,
    )?;
    // Padded leading dimensions: the gaps keep their poison.
    let lc = Layout::col_major(m, n).with_ld(m + 9);
    let la = Layout::row_major(m, k).with_ld(k + 5);
    let lb = Layout::col_major(k, n).with_ld(k + 3);
    let (a, _) = rand::<f32>(la.required_len().unwrap(), 1);
    let (b, _) = rand::<f32>(lb.required_len().unwrap(), 2);
    let (da, db) = (DeviceBuffer::from_host(&a)?, DeviceBuffer::from_host(&b)?);
    let mut dc = DeviceBuffer::from_host(&poisoned::<f32>(lc.required_len().unwrap()))?;
    cx.blas.gemm(
        1.0,
        Matrix::new(&da, la),
        Matrix::new(&db, lb),
        0.0,
        MatrixMut::new(&mut dc, lc),
        ComputeType::Default,
    )?;
    cx.stream.synchronize()?;
    let got = dc.to_vec()?;
    for j in 0..n {
        for i in m..m + 9 {
            if let Some(v) = got.get(j * (m + 9) + i) {
                ensure!(v.is_nan(), "gap ({i}, {j}) was written: {v}");
            }
        }
    }
    check_gemm::<f32, f32>(&cx, la, lb, lc, ComputeType::Default, 1.0, 0.0, 1e-5, 12)?;
    Ok(())
}

fn gemm_f32_policies() -> R {
    let cx = cx()?;
    let (la, lb, lc) = (
        Layout::row_major(128, 256),
        Layout::row_major(256, 96),
        Layout::row_major(128, 96),
    );
    for (ct, tol) in [
        (ComputeType::Default, 1e-5),
        (ComputeType::F32, 1e-5),
        (ComputeType::F32Pedantic, 1e-5),
        (ComputeType::Tf32, 2e-3),
        (ComputeType::F32Fast16F, 1e-2),
        (ComputeType::F32Fast16BF, 1e-2),
    ] {
        check_gemm::<f32, f32>(&cx, la, lb, lc, ct, 1.0, 0.0, tol, 21)?;
    }
    Ok(())
}

fn gemm_f64() -> R {
    let cx = cx()?;
    for ct in [ComputeType::Default, ComputeType::F64Pedantic] {
        check_gemm::<f64, f64>(
            &cx,
            Layout::col_major(70, 50),
            Layout::row_major(50, 30),
            Layout::row_major(70, 30),
            ct,
            1.25,
            0.5,
            1e-12,
            31,
        )?;
    }
    Ok(())
}

fn gemm_f16() -> R {
    let cx = cx()?;
    for (lc, seed) in [
        (Layout::row_major(96, 64), 41),
        (Layout::col_major(96, 64), 42),
    ] {
        check_gemm::<f16, f16>(
            &cx,
            Layout::row_major(96, 128),
            Layout::col_major(128, 64),
            lc,
            ComputeType::Default,
            1.0,
            0.0,
            1e-2,
            seed,
        )?;
    }
    Ok(())
}

fn gemm_f16_f16acc() -> R {
    let cx = cx()?;
    check_gemm::<f16, f16>(
        &cx,
        Layout::row_major(64, 64),
        Layout::row_major(64, 64),
        Layout::row_major(64, 64),
        ComputeType::F16,
        1.0,
        0.0,
        1e-2,
        51,
    )?;
    Ok(())
}

fn gemm_f16_f32() -> R {
    let cx = cx()?;
    check_gemm::<f16, f32>(
        &cx,
        Layout::row_major(80, 96),
        Layout::row_major(96, 48),
        Layout::row_major(80, 48),
        ComputeType::Default,
        1.0,
        0.5,
        1e-4,
        61,
    )?;
    Ok(())
}

fn gemm_bf16() -> R {
    let cx = cx()?;
    check_gemm::<bf16, bf16>(
        &cx,
        Layout::row_major(80, 96),
        Layout::col_major(96, 48),
        Layout::row_major(80, 48),
        ComputeType::Default,
        1.0,
        0.0,
        1e-2,
        71,
    )?;
    check_gemm::<bf16, f32>(
        &cx,
        Layout::col_major(80, 96),
        Layout::row_major(96, 48),
        Layout::col_major(80, 48),
        ComputeType::Default,
        1.0,
        0.0,
        1e-4,
        72,
    )?;
    Ok(())
}

fn gemm_i8() -> R {
    let cx = cx()?;
    // Sizes and lds multiples of 4 and alpha 1 / beta 0: the conservative
    // conditions of cuBLAS's integer path.
    for (la, lb, lc) in [
        (
            Layout::row_major(64, 32),
            Layout::col_major(32, 48),
            Layout::col_major(64, 48),
        ),
        (
            Layout::row_major(64, 32),
            Layout::row_major(32, 48),
            Layout::row_major(64, 48),
        ),
    ] {
        check_gemm::<i8, i32>(&cx, la, lb, lc, ComputeType::Default, 1.0, 0.0, 0.0, 81)?;
    }
    Ok(())
}

fn gemm_strided() -> R {
    let cx = cx()?;
    let (m, n, k, batch) = (32, 24, 16, 6);
    let la = Layout::row_major(m, k).batched(batch, m * k + 8);
    let lb = Layout::row_major(k, n).batched(batch, 0); // one B for the batch
    let lc = Layout::row_major(m, n).batched(batch, m * n + 16);
    let batched =
        check_gemm::<f32, f32>(&cx, la, lb, lc, ComputeType::Default, 1.0, 0.0, 1e-5, 91)?;
    // The same batch as a loop of single GEMMs on sub-slices.
    let (a, _) = rand::<f32>(la.required_len().unwrap(), 91);
    let (b, _) = rand::<f32>(lb.required_len().unwrap(), 92);
    let (da, db) = (DeviceBuffer::from_host(&a)?, DeviceBuffer::from_host(&b)?);
    let mut dc = DeviceBuffer::from_host(&poisoned::<f32>(lc.required_len().unwrap()))?;
    for p in 0..batch {
        let a_p = da.slice(p * (m * k + 8)..)?;
        let c_p = dc.slice_mut(p * (m * n + 16)..)?;
        cx.blas.gemm(
            1.0,
            Matrix::new(a_p, Layout::row_major(m, k)),
            Matrix::new(&db, Layout::row_major(k, n)),
            0.0,
            MatrixMut::new(c_p, Layout::row_major(m, n)),
            ComputeType::Default,
        )?;
    }
    cx.stream.synchronize()?;
    within(
        "strided batch vs loop",
        &logical(&down(&dc)?, &lc),
        &batched,
        1e-5,
    )
}

fn gemm_pointer_batched() -> R {
    let cx = cx()?;
    let (m, n, k, batch) = (20, 28, 12, 5);
    let (la, lb, lc) = (
        Layout::col_major(m, k),
        Layout::row_major(k, n),
        Layout::row_major(m, n),
    );
    let mut ins = Vec::new();
    let mut want = Vec::new();
    for p in 0..batch {
        let (a, af) = rand::<f32>(m * k, 200 + p as u64);
        let (b, bf) = rand::<f32>(k * n, 300 + p as u64);
        let mut w = vec![f64::NAN; m * n];
        r::gemm(1.0, &af, &la, &bf, &lb, 0.0, &mut w, &lc)?;
        want.extend(w);
        ins.push((DeviceBuffer::from_host(&a)?, DeviceBuffer::from_host(&b)?));
    }
    let mut outs: Vec<DeviceBuffer<f32>> = (0..batch)
        .map(|_| DeviceBuffer::from_host(&poisoned::<f32>(m * n)))
        .collect::<Result<_, _>>()?;
    {
        let a: Vec<_> = ins.iter().map(|(a, _)| Matrix::new(a, la)).collect();
        let b: Vec<_> = ins.iter().map(|(_, b)| Matrix::new(b, lb)).collect();
        let mut c: Vec<_> = outs.iter_mut().map(|c| MatrixMut::new(c, lc)).collect();
        cx.blas
            .gemm_batched(1.0, &a, &b, 0.0, &mut c, ComputeType::Default)?;
    }
    cx.stream.synchronize()?;
    let mut got = Vec::new();
    for o in &outs {
        got.extend(down(o)?);
    }
    within("pointer-array batch vs reference", &got, &want, 1e-5)?;
    // And vs a loop of single GEMMs.
    let mut loop_out = Vec::new();
    for (a, b) in &ins {
        let mut c = DeviceBuffer::from_host(&poisoned::<f32>(m * n))?;
        cx.blas.gemm(
            1.0,
            Matrix::new(a, la),
            Matrix::new(b, lb),
            0.0,
            MatrixMut::new(&mut c, lc),
            ComputeType::Default,
        )?;
        cx.stream.synchronize()?;
        loop_out.extend(down(&c)?);
    }
    within("pointer-array batch vs loop", &got, &loop_out, 1e-5)
}

fn gemv_one<T: Elem + cudnn::blas::GemvType + GemmTypes<T>>(cx: &Cx, la: Layout, tol: f64) -> R {
    let (a, af) = rand::<T>(la.required_len().unwrap(), 401);
    let (x, xf) = rand::<T>(la.cols(), 402);
    let (y0, mut want) = rand::<T>(la.rows(), 403);
    let (da, dx) = (DeviceBuffer::from_host(&a)?, DeviceBuffer::from_host(&x)?);
    let mut dy = DeviceBuffer::from_host(&y0)?;
    cx.blas
        .gemv(T::of(0.75), Matrix::new(&da, la), &dx, T::of(-0.5), &mut dy)?;
    cx.stream.synchronize()?;
    r::gemv(0.75, &af, &la, &xf, 1, -0.5, &mut want, 1)?;
    within(&format!("gemv {} a {la}", T::NAME), &down(&dy)?, &want, tol)
}

fn gemv() -> R {
    let cx = cx()?;
    for la in [
        Layout::row_major(77, 53),
        Layout::col_major(77, 53).with_ld(80),
        Layout::row_major(53, 77).t(),
    ] {
        gemv_one::<f32>(&cx, la, 1e-5)?;
        gemv_one::<f64>(&cx, la, 1e-12)?;
    }
    Ok(())
}

fn gemm_short_buffer() -> R {
    let cx = cx()?;
    let a = DeviceBuffer::<f32>::alloc(15)?;
    let b = DeviceBuffer::<f32>::alloc(16)?;
    let mut c = DeviceBuffer::<f32>::alloc(16)?;
    let l = Layout::col_major(4, 4);
    match cx.blas.gemm(
        1.0,
        Matrix::new(&a, l),
        Matrix::new(&b, l),
        0.0,
        MatrixMut::new(&mut c, l),
        ComputeType::Default,
    ) {
        Err(Error::Mismatch { what, .. }) if what.contains("a buffer length") => Ok(()),
        other => Err(format!("expected a length error, got {other:?}").into()),
    }
}

// ---------------------------------------------------------------------------
// cuBLASLt

/// Encode the aux input of a backward epilogue from pre-activation values
/// (laid out like D) as cuBLASLt stores it.
fn encode_aux<D: Elem>(
    shape: &cudnn::blas::MatmulShape,
    ld: &Layout,
    pre: &[f64],
    kind: AuxKind,
) -> Vec<u8> {
    let mut aux = vec![0u8; shape.aux_bytes()];
    for p in 0..ld.batch_count() {
        for i in 0..ld.rows() {
            for j in 0..ld.cols() {
                let v = pre[ld.offset(p, i, j).unwrap()];
                let o = shape.aux_offset(p, i, j).unwrap();
                match kind {
                    AuxKind::ReluMask => {
                        if v > 0.0 {
                            aux[o / 8] |= 1 << (o % 8);
                        }
                    }
                    AuxKind::GeluInput => D::of(v).put(&mut aux[o * D::SIZE..(o + 1) * D::SIZE]),
                    other => unreachable!("an aux kind this test does not know: {other:?}"),
                }
            }
        }
    }
    aux
}

/// Decode an aux output as pre-activation values laid out like D (the
/// ReLU mask as 1.0 / 0.0).
fn decode_aux<D: Elem>(
    shape: &cudnn::blas::MatmulShape,
    ld: &Layout,
    aux: &[u8],
    kind: AuxKind,
) -> Vec<f64> {
    let mut out = vec![f64::NAN; ld.required_len().unwrap()];
    for p in 0..ld.batch_count() {
        for i in 0..ld.rows() {
            for j in 0..ld.cols() {
                let o = shape.aux_offset(p, i, j).unwrap();
                out[ld.offset(p, i, j).unwrap()] = match kind {
                    AuxKind::ReluMask => f64::from((aux[o / 8] >> (o % 8)) & 1),
                    AuxKind::GeluInput => D::take(&aux[o * D::SIZE..(o + 1) * D::SIZE]).f(),
                    other => unreachable!("an aux kind this test does not know: {other:?}"),
                };
            }
        }
    }
    out
}

/// One cuBLASLt matmul against the reference. Returns false when the
/// library has no algorithm for it (reported on stderr), for the
/// epilogues NVIDIA documents as not available everywhere.
#[allow(clippy::too_many_arguments)]
fn lt_case<A: Elem + GemmTypes<D>, D: Elem>(
    cx: &Cx,
    spec: MatmulSpec,
    alpha: f64,
    beta: f64,
    tol: f64,
    aux_tol: f64,
    seed: u64,
    optional: bool,
) -> Result<bool, libtest_mimic::Failed> {
    let (la, lb, ld) = spec.layouts();
    let e = spec.epilogue();
    let name = format!("{} -> {} {e:?}: a {la}, b {lb}, d {ld}", A::NAME, D::NAME);
    let plan = match MatmulPlan::<A, D>::new(&cx.lt, &spec) {
        Err(Error::Unsupported { what, .. }) if optional => {
            eprintln!("note: {name}: cuBLASLt has no algorithm on this device: {what}");
            return Ok(false);
        }
        r => r?,
    };
    let shape = *plan.shape();
    let (a, af) = rand::<A>(la.required_len().unwrap(), seed);
    let (b, bf) = rand::<A>(lb.required_len().unwrap(), seed + 1);
    let (d0, mut want) = if beta == 0.0 {
        let p = poisoned::<D>(ld.required_len().unwrap());
        let f = p.iter().map(|x| x.f()).collect();
        (p, f)
    } else {
        rand::<D>(ld.required_len().unwrap(), seed + 2)
    };
    let (bias, bias_f) = rand::<D>(shape.bias_len().max(1), seed + 3);
    let (_, pre) = rand::<D>(ld.required_len().unwrap(), seed + 4);
    let (da, db) = (DeviceBuffer::from_host(&a)?, DeviceBuffer::from_host(&b)?);
    let mut dd = DeviceBuffer::from_host(&d0)?;
    let dbias = DeviceBuffer::from_host(&bias)?;
    let mut dgrad = DeviceBuffer::from_host(&poisoned::<D>(shape.bias_buffer_len().max(1)))?;
    let aux_kind = e.aux().map(|(k, _)| k);
    let aux_init = match e.aux() {
        Some((k, false)) => encode_aux::<D>(&shape, &ld, &pre, k),
        _ => vec![0xA5u8; shape.aux_bytes().max(1)],
    };
    let mut daux = DeviceBuffer::from_host(&aux_init)?;
    let mut args = EpilogueArgs::none();
    match e.bias_use() {
        Some(cudnn::blas::BiasUse::Bias) => args = args.bias(&dbias),
        Some(cudnn::blas::BiasUse::Gradient) => args = args.bias_grad(&mut dgrad),
        None => {}
    }
    match e.aux() {
        Some((_, true)) => args = args.aux_out(&mut daux),
        Some((_, false)) => args = args.aux_in(daux.as_slice()),
        None => {}
    }
    plan.run(
        &cx.lt,
        Scale::from_f64(alpha),
        &da,
        &db,
        Scale::from_f64(beta),
        &mut dd,
        args,
    )?;
    cx.stream.synchronize()?;
    // The backward reference reads the activation input the aux encodes.
    let pre_ref = match e.aux() {
        Some((k, false)) => decode_aux::<D>(&shape, &ld, &aux_init, k),
        _ => pre,
    };
    let pre_ref = match aux_kind {
        Some(AuxKind::ReluMask) if matches!(e.aux(), Some((_, false))) => pre_ref
            .iter()
            .map(|m| if *m > 0.5 { 1.0 } else { -1.0 })
            .collect(),
        _ => pre_ref,
    };
    let out = r::matmul(
        alpha,
        &af,
        &la,
        &bf,
        &lb,
        beta,
        &mut want,
        &ld,
        e,
        Some(&bias_f),
        Some(&pre_ref),
    )?;
    within(
        &format!("{name}: D"),
        &logical(&down(&dd)?, &ld),
        &logical(&want, &ld),
        tol,
    )?;
    if e.bias_use() == Some(cudnn::blas::BiasUse::Gradient) {
        let got = down(&dgrad)?;
        within(
            &format!("{name}: bias gradient"),
            &got[..out.bias_grad.len()],
            &out.bias_grad,
            tol,
        )?;
    }
    if let Some((kind, true)) = e.aux() {
        let got = decode_aux::<D>(&shape, &ld, &daux.to_vec()?, kind);
        let (g, w) = (logical(&got, &ld), logical(&out.pre_activation, &ld));
        match kind {
            AuxKind::GeluInput => within(&format!("{name}: GELU input (aux)"), &g, &w, aux_tol)?,
            AuxKind::ReluMask => {
                // Compare the mask where the sign is not a rounding call.
                let scale = w.iter().fold(1e-30f64, |s, v| s.max(v.abs()));
                for (idx, (mg, pw)) in g.iter().zip(&w).enumerate() {
                    if pw.abs() > 1e-2 * scale {
                        ensure!(
                            *mg == r::relu_grad(*pw),
                            "{name}: ReLU mask bit {idx}: {mg} for input {pw}"
                        );
                    }
                }
            }
            other => {
                return Err(
                    format!("{name}: an aux kind this test does not know: {other:?}").into(),
                );
            }
        }
    }
    Ok(true)
}

fn lt_forward<A: Elem + GemmTypes<D>, D: Elem>(tol: f64, gelu_tol: f64) -> R {
    let cx = cx()?;
    let (m, n, k) = (96, 80, 64);
    for (la, lb, ld) in [
        (
            Layout::col_major(m, k),
            Layout::col_major(k, n),
            Layout::col_major(m, n),
        ),
        (
            Layout::row_major(m, k),
            Layout::row_major(n, k).t(),
            Layout::row_major(m, n),
        ),
    ] {
        for e in [
            Epilogue::None,
            Epilogue::Relu,
            Epilogue::Bias,
            Epilogue::ReluBias,
            Epilogue::GeluTanh,
            Epilogue::GeluTanhBias,
            Epilogue::ReluAux,
            Epilogue::ReluAuxBias,
            Epilogue::GeluTanhAux,
            Epilogue::GeluTanhAuxBias,
        ] {
            let t = if matches!(
                e,
                Epilogue::GeluTanh
                    | Epilogue::GeluTanhBias
                    | Epilogue::GeluTanhAux
                    | Epilogue::GeluTanhAuxBias
            ) {
                gelu_tol
            } else {
                tol
            };
            // The aux variants are training-time extras: optional.
            let optional = e.aux().is_some();
            lt_case::<A, D>(
                &cx,
                MatmulSpec::new(la, lb, ld).with_epilogue(e),
                1.0,
                0.0,
                t,
                t,
                500,
                optional,
            )?;
        }
    }
    Ok(())
}

fn lt_backward<A: Elem + GemmTypes<D>, D: Elem>(tol: f64) -> R {
    let cx = cx()?;
    let (m, n, k) = (96, 80, 64);
    let mut ran = 0;
    for (la, lb, ld) in [
        (
            Layout::col_major(m, k),
            Layout::col_major(k, n),
            Layout::col_major(m, n),
        ),
        (
            Layout::row_major(m, k),
            Layout::row_major(k, n),
            Layout::row_major(m, n),
        ),
        (
            Layout::row_major(k, m).t(),
            Layout::row_major(k, n),
            Layout::col_major(m, n),
        ),
    ] {
        for e in [
            Epilogue::DRelu,
            Epilogue::DReluBgrad,
            Epilogue::DGeluTanh,
            Epilogue::DGeluTanhBgrad,
            Epilogue::BgradA,
            Epilogue::BgradB,
        ] {
            if lt_case::<A, D>(
                &cx,
                MatmulSpec::new(la, lb, ld).with_epilogue(e),
                1.0,
                0.0,
                tol,
                tol,
                600,
                true,
            )? {
                ran += 1;
            }
        }
    }
    ensure!(
        ran > 0,
        "cuBLASLt ran none of the backward epilogues for {} -> {}",
        A::NAME,
        D::NAME
    );
    Ok(())
}

fn lt_alpha_beta() -> R {
    let cx = cx()?;
    let l = |o| {
        (
            Layout::new(o, 64, 48),
            Layout::new(o, 48, 32),
            Layout::new(o, 64, 32),
        )
    };
    for o in [Order::ColMajor, Order::RowMajor] {
        let (la, lb, ld) = l(o);
        let spec = MatmulSpec::new(la, lb, ld);
        lt_case::<f32, f32>(&cx, spec, 0.5, 2.0, 1e-5, 1e-5, 700, false)?;
        lt_case::<f32, f32>(
            &cx,
            spec.with_epilogue(Epilogue::Bias),
            1.5,
            -0.5,
            1e-5,
            1e-5,
            701,
            false,
        )?;
        lt_case::<f32, f32>(
            &cx,
            spec.with_compute(ComputeType::Tf32),
            1.0,
            0.0,
            2e-3,
            2e-3,
            702,
            false,
        )?;
        lt_case::<f64, f64>(&cx, spec, 1.0, 1.0, 1e-12, 1e-12, 703, true)?;
        lt_case::<bf16, f32>(
            &cx,
            spec.with_epilogue(Epilogue::GeluTanhBias),
            1.0,
            0.0,
            1e-3,
            1e-3,
            704,
            false,
        )?;
        lt_case::<f16, f16>(
            &cx,
            spec.with_compute(ComputeType::F16),
            1.0,
            0.0,
            1e-2,
            1e-2,
            705,
            false,
        )?;
        lt_case::<i8, i32>(&cx, spec, 1.0, 0.0, 0.0, 0.0, 706, true)?;
    }
    Ok(())
}

fn lt_batched() -> R {
    let cx = cx()?;
    let (m, n, k, batch) = (64, 32, 48, 4);
    for o in [Order::ColMajor, Order::RowMajor] {
        let la = Layout::new(o, m, k).batched(batch, m * k);
        let lb = Layout::new(o, k, n).batched(batch, k * n);
        let ld = Layout::new(o, m, n).batched(batch, m * n);
        for e in [Epilogue::None, Epilogue::GeluTanhBias, Epilogue::ReluAux] {
            lt_case::<f32, f32>(
                &cx,
                MatmulSpec::new(la, lb, ld).with_epilogue(e),
                1.0,
                0.0,
                1e-3,
                1e-3,
                800,
                e.aux().is_some(),
            )?;
        }
        lt_case::<f16, f16>(
            &cx,
            MatmulSpec::new(la, lb.batched(batch, 0), ld),
            1.0,
            0.0,
            1e-2,
            1e-2,
            801,
            false,
        )?;
        lt_case::<f32, f32>(
            &cx,
            MatmulSpec::new(la, lb, ld).with_epilogue(Epilogue::DReluBgrad),
            1.0,
            0.0,
            1e-4,
            1e-4,
            802,
            true,
        )?;
    }
    Ok(())
}

fn lt_plan_cache() -> R {
    let cx = cx()?;
    let cache = PlanCache::<f16, f16>::new();
    let spec = MatmulSpec::new(
        Layout::row_major(128, 64),
        Layout::row_major(64, 32),
        Layout::row_major(128, 32),
    )
    .with_epilogue(Epilogue::Bias);
    let (a, af) = rand::<f16>(128 * 64, 900);
    let (b, bf) = rand::<f16>(64 * 32, 901);
    let (bias, biasf) = rand::<f16>(32, 902);
    let (da, db, dbias) = (
        DeviceBuffer::from_host(&a)?,
        DeviceBuffer::from_host(&b)?,
        DeviceBuffer::from_host(&bias)?,
    );
    let mut want = vec![0.0; 128 * 32];
    let (la, lb, ld) = spec.layouts();
    r::matmul(
        1.0,
        &af,
        &la,
        &bf,
        &lb,
        0.0,
        &mut want,
        &ld,
        Epilogue::Bias,
        Some(&biasf),
        None,
    )?;
    for round in 0..3 {
        let mut dd = DeviceBuffer::from_host(&poisoned::<f16>(128 * 32))?;
        let plan = cache.get_or_create(&cx.lt, &spec)?;
        plan.run(
            &cx.lt,
            1.0,
            &da,
            &db,
            0.0,
            &mut dd,
            EpilogueArgs::none().bias(&dbias),
        )?;
        cx.stream.synchronize()?;
        within(
            &format!("cached plan, round {round}"),
            &down(&dd)?,
            &want,
            1e-2,
        )?;
    }
    ensure!(cache.len() == 1, "one spec, one plan: {}", cache.len());
    ensure!(
        cache.contains(&MatmulKey::new::<f16, f16>(&spec, cx.lt.workspace_size())),
        "keyed by spec and workspace"
    );
    cache.get_or_create(&cx.lt, &spec.with_epilogue(Epilogue::ReluBias))?;
    ensure!(cache.len() == 2, "a new epilogue is a new plan");
    // A missing bias is refused before the library is called.
    let mut dd = DeviceBuffer::from_host(&poisoned::<f16>(128 * 32))?;
    match cache.get_or_create(&cx.lt, &spec)?.run(
        &cx.lt,
        1.0,
        &da,
        &db,
        0.0,
        &mut dd,
        EpilogueArgs::none(),
    ) {
        Err(Error::InvalidArgument { arg, .. }) if arg == "epilogue.bias" => {}
        other => return Err(format!("expected a missing-bias error, got {other:?}").into()),
    }
    // A misaligned sub-slice is refused under the default 256-byte alignment.
    match cache.get_or_create(&cx.lt, &spec)?.run(
        &cx.lt,
        1.0,
        da.slice(1..)?,
        &db,
        0.0,
        &mut dd,
        EpilogueArgs::none().bias(&dbias),
    ) {
        Err(Error::InvalidArgument { arg, .. }) if arg == "a" => {}
        Err(Error::Mismatch { .. }) => {} // the slice is also one element short
        other => return Err(format!("expected an alignment error, got {other:?}").into()),
    }
    cache.clear();
    ensure!(cache.is_empty(), "cleared");
    Ok(())
}

/// One cuBLASLt plan with a bias epilogue, shared (`Arc`, `run(&self)`) by
/// four threads, each with its own stream and handle and its own bias and
/// inputs, many runs each: every output matches the f64 reference of its
/// own bias (a run that read another thread's bias pointer from the shared
/// descriptor would not).
fn lt_plan_threads() -> R {
    Device::new(0)?;
    let spec = MatmulSpec::new(
        Layout::row_major(64, 32),
        Layout::row_major(32, 48),
        Layout::row_major(64, 48),
    )
    .with_epilogue(Epilogue::Bias);
    let stream = Stream::new()?;
    let cache = PlanCache::<f32, f32>::new();
    let plan = cache.get_or_create(&LtHandle::new(&stream)?, &spec)?;
    let workers: Vec<_> = (0..4u64)
        .map(|t| {
            let plan = std::sync::Arc::clone(&plan);
            std::thread::spawn(move || -> Result<(), String> {
                let run = || -> R {
                    Device::new(0)?;
                    let stream = Stream::new()?;
                    let lt = LtHandle::new(&stream)?;
                    let (a, af) = rand::<f32>(64 * 32, 1000 + t);
                    let (b, bf) = rand::<f32>(32 * 48, 1100 + t);
                    let (bias, biasf) = rand::<f32>(48, 1200 + t);
                    let (la, lb, ld) = spec.layouts();
                    let mut want = vec![0.0; 64 * 48];
                    r::matmul(
                        1.0,
                        &af,
                        &la,
                        &bf,
                        &lb,
                        0.0,
                        &mut want,
                        &ld,
                        Epilogue::Bias,
                        Some(&biasf),
                        None,
                    )?;
                    let (da, db, dbias) = (
                        DeviceBuffer::from_host(&a)?,
                        DeviceBuffer::from_host(&b)?,
                        DeviceBuffer::from_host(&bias)?,
                    );
                    for round in 0..50 {
                        let mut dd = DeviceBuffer::from_host(&poisoned::<f32>(64 * 48))?;
                        plan.run(
                            &lt,
                            1.0,
                            &da,
                            &db,
                            0.0,
                            &mut dd,
                            EpilogueArgs::none().bias(&dbias),
                        )?;
                        stream.synchronize()?;
                        within(
                            &format!("thread {t}, round {round}"),
                            &down(&dd)?,
                            &want,
                            1e-4,
                        )?;
                    }
                    Ok(())
                };
                run().map_err(|e| e.message().unwrap_or("failed").to_string())
            })
        })
        .collect();
    for (t, w) in workers.into_iter().enumerate() {
        w.join()
            .map_err(|_| format!("thread {t} panicked"))?
            .map_err(|e| format!("thread {t}: {e}"))?;
    }
    Ok(())
}
