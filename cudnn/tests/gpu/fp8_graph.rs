//! FP8 graphs on a device (issue 25; gpu tier, skipped visibly without
//! one): `Graph::fp8_matmul` against the f64 reference
//! [`gemm_fp8`](cudnn::reference::gemm_fp8) and `Graph::sdpa_fp8_forward`
//! against [`attention_fp8`](cudnn::reference::attention_fp8), on the same
//! FP8 codes; `Graph::sdpa_fp8_backward` against `attention_fp8::backward`,
//! and its amax outputs agree with the gradients it wrote;
//! `Graph::block_scale_quantize` / `block_scale_dequantize` (Blackwell
//! only, skipped visibly elsewhere) against
//! [`block_scale`](cudnn::reference::block_scale), exactly.
//!
//! Outputs are poisoned (the FP8 NaN code, NaN) before each run, so an
//! element the plan does not write fails. Bounds come from the formats
//! (`tolerance` of each reference); the amax outputs are compared within
//! the same bounds.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// `ensure!(err <= tol, ..)` negates a float comparison on purpose: NaN fails.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use crate::support;
use crate::support::fp8_graphs;

use cudnn::blas::{Epilogue, Layout};
use cudnn::dnn::Handle;
use cudnn::graph::*;
use cudnn::reference::attention_fp8::{self, Fp8AttnBwdScales, Fp8AttnScales, Fp8AttnShape};
use cudnn::reference::block_scale;
use cudnn::reference::gemm::max_relative_error;
use cudnn::reference::gemm_fp8::{Fp8Scales, OutputType, gemm_fp8, tolerance};
use cudnn::runtime::{DeviceBuffer, Stream};
use cudnn::{F8E4M3, F8E5M2, F8E8M0, Fp8Format};
use fp8_graphs::*;
use half::bf16;
use support::*;

type R = Result<(), libtest_mimic::Failed>;

/// Deterministic FP8 codes of values in about [-range, range].
fn codes(n: usize, seed: u64, fmt: Fp8Format, range: f64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let v = ((s >> 33) as f64 / (1u64 << 31) as f64 * 2.0 - 1.0) * range;
            fmt.encode(v, cudnn::Fp8Saturation::SatFinite)
        })
        .collect()
}

fn fmt_of(d: DType) -> Fp8Format {
    if d == DType::Fp8E5M2 {
        Fp8Format::E5M2
    } else {
        Fp8Format::E4M3
    }
}

/// One bound buffer: FP8 codes, f32, or bf16, by the tensor's type.
enum Buf {
    E4(DeviceBuffer<F8E4M3>),
    E8M0(DeviceBuffer<F8E8M0>),
    E5(DeviceBuffer<F8E5M2>),
    F32(DeviceBuffer<f32>),
    Bf16(DeviceBuffer<bf16>),
}

impl Buf {
    /// A device buffer of `spec`'s type holding `values` (FP8: the codes'
    /// values), or poisoned for an output.
    fn new(spec: &TensorSpec, values: Option<&[f64]>) -> Result<Self, libtest_mimic::Failed> {
        let n = spec.span_elements()?;
        let v = |i: usize| values.and_then(|v| v.get(i).copied()).unwrap_or(f64::NAN);
        Ok(match spec.dtype() {
            DType::Fp8E4M3 => Buf::E4(DeviceBuffer::from_host(
                &(0..n).map(|i| F8E4M3::from_f64(v(i))).collect::<Vec<_>>(),
            )?),
            DType::Fp8E5M2 => Buf::E5(DeviceBuffer::from_host(
                &(0..n).map(|i| F8E5M2::from_f64(v(i))).collect::<Vec<_>>(),
            )?),
            // Powers of two (NaN poisons an output).
            DType::Fp8E8M0 => Buf::E8M0(DeviceBuffer::from_host(
                &(0..n)
                    .map(|i| {
                        let x = v(i);
                        F8E8M0::from_exponent(x.log2().round() as i32)
                            .filter(|c| c.to_f64() == x)
                            .unwrap_or(F8E8M0::NAN)
                    })
                    .collect::<Vec<_>>(),
            )?),
            DType::F32 => Buf::F32(DeviceBuffer::from_host(
                &(0..n).map(|i| v(i) as f32).collect::<Vec<_>>(),
            )?),
            DType::BF16 => Buf::Bf16(DeviceBuffer::from_host(
                &(0..n).map(|i| bf16::from_f64(v(i))).collect::<Vec<_>>(),
            )?),
            other => return Err(format!("no buffer for {other}").into()),
        })
    }
    fn bind<'a>(&'a mut self, b: &mut Bindings<'a>, name: &str, out: bool) -> cudnn::Result<()> {
        match (self, out) {
            (Buf::E4(x), false) => b.input(name, x.as_slice()).map(|_| ()),
            (Buf::E4(x), true) => b.output(name, x.as_slice_mut()).map(|_| ()),
            (Buf::E5(x), false) => b.input(name, x.as_slice()).map(|_| ()),
            (Buf::E5(x), true) => b.output(name, x.as_slice_mut()).map(|_| ()),
            (Buf::E8M0(x), false) => b.input(name, x.as_slice()).map(|_| ()),
            (Buf::E8M0(x), true) => b.output(name, x.as_slice_mut()).map(|_| ()),
            (Buf::F32(x), false) => b.input(name, x.as_slice()).map(|_| ()),
            (Buf::F32(x), true) => b.output(name, x.as_slice_mut()).map(|_| ()),
            (Buf::Bf16(x), false) => b.input(name, x.as_slice()).map(|_| ()),
            (Buf::Bf16(x), true) => b.output(name, x.as_slice_mut()).map(|_| ()),
        }
    }
    fn host(&self) -> cudnn::Result<Vec<f64>> {
        Ok(match self {
            Buf::E4(x) => x.to_vec()?.into_iter().map(|v| v.to_f64()).collect(),
            Buf::E5(x) => x.to_vec()?.into_iter().map(|v| v.to_f64()).collect(),
            Buf::E8M0(x) => x.to_vec()?.into_iter().map(|v| v.to_f64()).collect(),
            Buf::F32(x) => x.to_vec()?.into_iter().map(f64::from).collect(),
            Buf::Bf16(x) => x.to_vec()?.into_iter().map(|v| v.to_f64()).collect(),
        })
    }
}

/// Plan `g` for device 0 and run it on `inputs` (by name, packed in the
/// tensor's storage order); returns every output by name (storage order).
fn run_graph(
    g: &Graph,
    inputs: &[(&str, Vec<f64>)],
) -> Result<Vec<(String, Vec<f64>)>, libtest_mimic::Failed> {
    let og = g.build()?;
    let target = Target::device(0)?;
    let (plan, _) = Plan::build(&og, &target, &Policy::default())?;
    eprintln!(
        "  plan: engine {:?}, workspace {} bytes",
        plan.engine(),
        plan.workspace_size()
    );
    let stream = Stream::new()?;
    let mut handle = Handle::new(&stream)?;
    let mut bufs = Vec::new();
    for t in &plan.io().tensors {
        let vals = if t.is_output {
            None
        } else {
            Some(
                inputs
                    .iter()
                    .find(|(n, _)| *n == t.name)
                    .map(|(_, v)| v.as_slice())
                    .ok_or(format!("no input {}", t.name))?,
            )
        };
        bufs.push((t.clone(), Buf::new(&t.spec, vals)?));
    }
    {
        let mut b = plan.bindings();
        for (t, buf) in bufs.iter_mut() {
            buf.bind(&mut b, &t.name, t.is_output)?;
        }
        plan.execute(&mut handle, &mut b)?;
    }
    stream.synchronize()?;
    let mut outs = Vec::new();
    for (t, buf) in &bufs {
        if t.is_output {
            outs.push((t.name.clone(), buf.host()?));
        }
    }
    Ok(outs)
}

fn get<'a>(outs: &'a [(String, Vec<f64>)], name: &str) -> Result<&'a [f64], libtest_mimic::Failed> {
    Ok(outs
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_slice())
        .ok_or(format!("no output {name}"))?)
}

fn check(label: &str, got: &[f64], want: &[f64], tol: f64) -> R {
    let err = max_relative_error(got, want);
    eprintln!("  {label}: max relative error {err:.2e} (bound {tol:.2e})");
    ensure!(
        !err.is_nan() && err <= tol,
        "{label}: error {err:e} over {tol:e}"
    );
    Ok(())
}

fn check_scalar(label: &str, got: f64, want: f64, tol: f64) -> R {
    let err = (got - want).abs() / want.abs().max(1e-30);
    eprintln!("  {label}: {got} vs {want} (relative {err:.2e}, bound {tol:.2e})");
    ensure!(!err.is_nan() && err <= tol, "{label}: {got} vs {want}");
    Ok(())
}

fn matmul_case(case: MatmulCase) -> R {
    eprintln!("fp8 matmul {}", case.tag());
    let [batch, m, k, n] = case.dims;
    ensure!(batch == 1, "the reference GEMM takes one matrix");
    let (m, k, n) = (m as usize, k as usize, n as usize);
    let (fa, fb) = (fmt_of(case.a), fmt_of(case.b));
    let a = codes(m * k, 1, fa, 2.0);
    let b = codes(k * n, 2, fb, 2.0);
    let (da, db, sc) = (0.5, 0.25, 4.0);
    let out = match case.out {
        DType::Fp8E4M3 => OutputType::Fp8(Fp8Format::E4M3),
        DType::Fp8E5M2 => OutputType::Fp8(Fp8Format::E5M2),
        DType::BF16 => OutputType::BF16,
        DType::F16 => OutputType::F16,
        _ => OutputType::F32,
    };
    let scale_c = if case.out.is_fp8() { sc } else { 1.0 };
    let want = gemm_fp8(
        1.0,
        (&a, fa, &Layout::row_major(m, k)),
        (&b, fb, &Layout::col_major(k, n)),
        0.0,
        None,
        &Layout::row_major(m, n),
        out,
        &Fp8Scales {
            a: da,
            b: db,
            c: 1.0,
            d: scale_c,
        },
        Epilogue::None,
        None,
    )?;
    let g = case.graph()?;
    let dec = |c: &[u8], f: Fp8Format| c.iter().map(|&x| f.decode(x)).collect::<Vec<_>>();
    let mut inputs = vec![
        ("a", dec(&a, fa)),
        ("b", dec(&b, fb)),
        ("descale_a", vec![da]),
        ("descale_b", vec![db]),
    ];
    if case.out.is_fp8() {
        inputs.push(("scale_c", vec![sc]));
    }
    let outs = run_graph(&g, &inputs)?;
    let tol = tolerance(k, out, false);
    check("c", get(&outs, "c")?, &want.d, tol)?;
    if case.amax {
        check_scalar("amax", get(&outs, "amax")?[0], want.amax, tol)?;
    }
    Ok(())
}

fn sdpa_case(cfg: Fp8SdpaConfig) -> R {
    eprintln!("fp8 sdpa forward {}", sdpa_tag(&cfg));
    let fmt = fmt_of(cfg.dtype);
    let shape = Fp8AttnShape {
        batch: cfg.batch as usize,
        heads: cfg.heads as usize,
        seq_q: cfg.seq_q as usize,
        seq_kv: cfg.seq_kv as usize,
        head_dim: cfg.head_dim as usize,
    };
    let nq = shape.batch * shape.heads * shape.seq_q * shape.head_dim;
    let nkv = shape.batch * shape.heads * shape.seq_kv * shape.head_dim;
    let dec = |c: Vec<u8>| c.into_iter().map(|x| fmt.decode(x)).collect::<Vec<_>>();
    let (q, k, v) = (
        dec(codes(nq, 3, fmt, 4.0)),
        dec(codes(nkv, 4, fmt, 4.0)),
        dec(codes(nkv, 5, fmt, 4.0)),
    );
    // Distinct powers of two, none 1, so a dropped or swapped scale
    // moves O or an amax by a factor the tolerance cannot hide (q, k, v in
    // [-4, 4]: S stays small, P·256 <= 448, |O| <= 8 before scale_o).
    let scales = Fp8AttnScales {
        descale_q: 0.5,
        descale_k: 0.25,
        descale_v: 2.0,
        descale_s: 1.0 / 256.0,
        scale_s: 256.0,
        scale_o: 4.0,
    };
    let out = if cfg.o_dtype.is_fp8() {
        OutputType::Fp8(fmt_of(cfg.o_dtype))
    } else {
        OutputType::BF16
    };
    let want = attention_fp8::forward(
        &q,
        &k,
        &v,
        shape,
        cfg.scale_value(),
        cfg.is_causal,
        fmt,
        out,
        &scales,
    )?;
    let g = sdpa_fwd_graph(&cfg)?;
    let outs = run_graph(
        &g,
        &[
            ("q", q),
            ("k", k),
            ("v", v),
            ("descale_q", vec![scales.descale_q]),
            ("descale_k", vec![scales.descale_k]),
            ("descale_v", vec![scales.descale_v]),
            ("descale_s", vec![scales.descale_s]),
            ("scale_s", vec![scales.scale_s]),
            ("scale_o", vec![scales.scale_o]),
        ],
    )?;
    let tol = attention_fp8::tolerance(shape, fmt, out)?;
    check("o", get(&outs, "o")?, &want.o, tol)?;
    if cfg.is_training {
        check("stats", get(&outs, "stats")?, &want.stats, 1e-4)?;
    }
    check_scalar("amax_s", get(&outs, "amax_s")?[0], want.amax_s, 1e-4)?;
    check_scalar("amax_o", get(&outs, "amax_o")?[0], want.amax_o, tol)?;
    Ok(())
}

/// The backward runs; every gradient is finite and each amax is the max
/// |gradient| before its scale (within the gradient type's rounding).
fn sdpa_bwd_case(cfg: Fp8SdpaConfig, grad: DType) -> R {
    eprintln!("fp8 sdpa backward {} grad {grad}", sdpa_tag(&cfg));
    let fmt = fmt_of(cfg.dtype);
    let gfmt = fmt_of(grad);
    let n = |s: i64| (cfg.batch * cfg.heads * s * cfg.head_dim) as usize;
    let dec = |c: Vec<u8>, f: Fp8Format| c.into_iter().map(|x| f.decode(x)).collect::<Vec<_>>();
    let (nq, nkv) = (n(cfg.seq_q), n(cfg.seq_kv));
    // Statistics from the reference forward (unit scales), so P is a softmax.
    let shape = Fp8AttnShape {
        batch: cfg.batch as usize,
        heads: cfg.heads as usize,
        seq_q: cfg.seq_q as usize,
        seq_kv: cfg.seq_kv as usize,
        head_dim: cfg.head_dim as usize,
    };
    let (q, k, v) = (
        dec(codes(nq, 6, fmt, 2.0), fmt),
        dec(codes(nkv, 7, fmt, 2.0), fmt),
        dec(codes(nkv, 8, fmt, 2.0), fmt),
    );
    // Q, K, V and O as stored with non-unit descales (O stored as
    // O_true · 0.5, so descale_o = 2): the forward that makes O and the
    // statistics uses the same descales, so Δ and P are consistent.
    let fwd = attention_fp8::forward(
        &q,
        &k,
        &v,
        shape,
        cfg.scale_value(),
        cfg.is_causal,
        fmt,
        OutputType::Fp8(fmt),
        &Fp8AttnScales {
            descale_q: 0.5,
            descale_k: 2.0,
            descale_v: 2.0,
            scale_o: 0.5,
            ..Fp8AttnScales::default()
        },
    )?;
    let d_o = dec(codes(nq, 9, gfmt, 1.0), gfmt);
    let mut inputs: Vec<(&str, Vec<f64>)> = vec![
        ("q", q),
        ("k", k),
        ("v", v),
        ("o", fwd.o.clone()),
        ("do", d_o),
        ("stats", fwd.stats.clone()),
    ];
    // Every scale a power of two other than 1 (but the gradients' common
    // 16), distinct where two could be swapped: dQ carries descale_k and
    // dK descale_q (2 against 0.5), dV descale_do.
    let scale_of = |name: &str| match name {
        "scale_dq" | "scale_dk" | "scale_dv" => 16.0,
        "scale_s" => 256.0,
        "descale_s" => 1.0 / 256.0,
        "scale_dp" => 64.0,
        "descale_dp" => 1.0 / 64.0,
        "descale_q" => 0.5,
        "descale_k" | "descale_v" | "descale_o" => 2.0,
        "descale_do" => 0.25,
        _ => 1.0,
    };
    for name in FP8_BWD_SCALE_NAMES {
        inputs.push((name, vec![scale_of(name)]));
    }
    let g = sdpa_bwd_graph(&cfg, grad)?;
    let outs = run_graph(&g, &inputs)?;
    // Against the f64 reference of the same composite.
    let sc = Fp8AttnBwdScales {
        descale_q: scale_of("descale_q"),
        descale_k: scale_of("descale_k"),
        descale_v: scale_of("descale_v"),
        descale_o: scale_of("descale_o"),
        descale_do: scale_of("descale_do"),
        descale_s: scale_of("descale_s"),
        descale_dp: scale_of("descale_dp"),
        scale_s: scale_of("scale_s"),
        scale_dq: scale_of("scale_dq"),
        scale_dk: scale_of("scale_dk"),
        scale_dv: scale_of("scale_dv"),
        scale_dp: scale_of("scale_dp"),
    };
    let input = |n: &str| {
        inputs
            .iter()
            .find(|(m, _)| *m == n)
            .map(|(_, v)| v.clone())
            .ok_or(format!("no {n}"))
    };
    let want = attention_fp8::backward(
        &input("q")?,
        &input("k")?,
        &input("v")?,
        &input("o")?,
        &input("do")?,
        &input("stats")?,
        shape,
        cfg.scale_value(),
        cfg.is_causal,
        fmt,
        gfmt,
        &sc,
    )?;
    let tol = attention_fp8::backward_tolerance(shape, fmt, gfmt)?;
    check("dq", get(&outs, "dq")?, &want.dq, tol)?;
    check("dk", get(&outs, "dk")?, &want.dk, tol)?;
    check("dv", get(&outs, "dv")?, &want.dv, tol)?;
    for (i, n) in ["amax_dq", "amax_dk", "amax_dv", "amax_dp"]
        .iter()
        .enumerate()
    {
        check_scalar(n, get(&outs, n)?[0], want.amax[i], tol)?;
    }
    for (grad_name, amax_name) in [("dq", "amax_dq"), ("dk", "amax_dk"), ("dv", "amax_dv")] {
        let x = get(&outs, grad_name)?;
        ensure!(
            x.iter().all(|v| v.is_finite()),
            "{grad_name}: a non-finite value (or unwritten)"
        );
        let max = x.iter().fold(0.0f64, |m, v| m.max(v.abs())) / 16.0;
        let amax = get(&outs, amax_name)?[0];
        check_scalar(
            &format!("{amax_name} vs max|{grad_name}|/scale"),
            max,
            amax,
            2.0 * gfmt.unit_roundoff(),
        )?;
    }
    let adp = get(&outs, "amax_dp")?[0];
    ensure!(adp.is_finite() && adp > 0.0, "amax_dp {adp}");
    Ok(())
}

/// bf16 rows of `cols` whose every block of 32 has the amax
/// `336 · 2^k` (k from -4 to 4 by block): amax / 448 = 0.75 · 2^k, far
/// from a power of two, so the GPU's f32 quotient rounds up to the scale
/// the f64 reference finds. Values are bf16 (exactly what the GPU reads).
fn block_inputs(rows: usize, cols: usize) -> Vec<f64> {
    let n = rows * cols;
    let mut s = 0x5eed_u64;
    let mut x = Vec::with_capacity(n);
    for i in 0..n {
        let b = i / block_scale::BLOCK;
        let amax = 336.0 * 2f64.powi((b % 9) as i32 - 4);
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let u = (s >> 33) as f64 / (1u64 << 31) as f64 * 2.0 - 1.0;
        let v = if i % block_scale::BLOCK == (b % 32) {
            if b.is_multiple_of(2) { amax } else { -amax }
        } else {
            u * amax
        };
        x.push(bf16::from_f64(v).to_f64());
    }
    x
}

/// MXFP8 quantize on a Blackwell device: bf16 `[128, 256]` to E4M3 values
/// and E8M0 scales `[128, 8]`, both exactly as the f64 reference (NVIDIA's
/// formula) makes them.
fn block_quantize_case() -> R {
    let (rows, cols) = (128usize, 256usize);
    let mut g = Graph::new();
    let x = g.input(
        "x",
        TensorSpec::row_major(DType::BF16, &[rows as i64, cols as i64])?,
    )?;
    let q = g.block_scale_quantize(x, DType::Fp8E4M3)?;
    g.rename(q.y, "y")?;
    g.rename(q.scale, "scale")?;
    let xs = block_inputs(rows, cols);
    let want = block_scale::quantize(&xs, cols, Fp8Format::E4M3)?;
    let outs = run_graph(&g, &[("x", xs)])?;
    let (y, sc) = (get(&outs, "y")?, get(&outs, "scale")?);
    let want_y: Vec<f64> = want
        .values
        .iter()
        .map(|&c| Fp8Format::E4M3.decode(c))
        .collect();
    let want_s: Vec<f64> = want
        .scales
        .iter()
        .map(|&c| block_scale::e8m0_value(c))
        .collect();
    let bad_s = sc.iter().zip(&want_s).filter(|(a, b)| a != b).count();
    let bad_y = y.iter().zip(&want_y).filter(|(a, b)| a != b).count();
    eprintln!(
        "  quantize: {bad_s} of {} scales and {bad_y} of {} values differ from the reference",
        want_s.len(),
        want_y.len()
    );
    ensure!(
        sc.len() == want_s.len() && y.len() == want_y.len(),
        "output sizes"
    );
    ensure!(
        bad_s == 0 && bad_y == 0,
        "quantize differs from the reference"
    );
    Ok(())
}

/// MXFP8 dequantize on a Blackwell device: E4M3 `[128, 256]` times E8M0
/// scales `[128, 8]` (2^-7 to 2^7) to f32, exactly the reference's
/// products (a power of two times an E4M3 value is an f32).
fn block_dequantize_case() -> R {
    let (rows, cols) = (128usize, 256usize);
    let mut g = Graph::new();
    let x = g.input(
        "x",
        TensorSpec::row_major(DType::Fp8E4M3, &[rows as i64, cols as i64])?,
    )?;
    let nb = cols / block_scale::BLOCK;
    let sc = g.input(
        "scale",
        TensorSpec::row_major(DType::Fp8E8M0, &[rows as i64, nb as i64])?,
    )?;
    let y = g.block_scale_dequantize(x, sc)?;
    g.output(y, DType::F32)?;
    g.rename(y, "y")?;
    let codes = codes(rows * cols, 11, Fp8Format::E4M3, 400.0);
    let scales: Vec<u8> = (0..rows * nb).map(|i| 120 + (i * 7 % 15) as u8).collect();
    let want = block_scale::dequantize(&codes, &scales, cols, Fp8Format::E4M3)?;
    let outs = run_graph(
        &g,
        &[
            (
                "x",
                codes.iter().map(|&c| Fp8Format::E4M3.decode(c)).collect(),
            ),
            (
                "scale",
                scales.iter().map(|&c| block_scale::e8m0_value(c)).collect(),
            ),
        ],
    )?;
    let got = get(&outs, "y")?;
    let bad = got.iter().zip(&want).filter(|(a, b)| a != b).count();
    eprintln!(
        "  dequantize: {bad} of {} values differ from the reference",
        want.len()
    );
    ensure!(
        got.len() == want.len() && bad == 0,
        "dequantize differs from the reference"
    );
    Ok(())
}

/// A GPU test that needs a Blackwell device (the block-scale operations):
/// skipped visibly, not passed, on an older one.
fn blackwell(name: &str, f: impl FnOnce() -> R + Send + 'static) -> libtest_mimic::Trial {
    if support::has_gpu() {
        match Target::device(0).map(|t| t.properties().device_ver()) {
            Ok(v) if v < 1000 => {
                let full = format!("gpu::{name}");
                eprintln!(
                    "skipped: {full}: needs a Blackwell GPU (compute capability 10.0 or newer), device 0 is {}.{}",
                    v / 100,
                    (v % 100) / 10
                );
                return crate::support::trial(full, f).with_ignored_flag(true);
            }
            _ => {}
        }
    }
    gpu(name, f)
}

pub fn main() {
    use DType::*;
    let one = |c: MatmulCase| MatmulCase {
        dims: [1, 256, 512, 128],
        ..c
    };
    run(vec![
        gpu("fp8_graph_matmul_e4m3_to_bf16_amax", move || {
            matmul_case(one(MatmulCase::new(Fp8E4M3, Fp8E4M3, BF16)))
        }),
        gpu("fp8_graph_matmul_e4m3_to_e4m3_scaled", move || {
            matmul_case(one(MatmulCase::new(Fp8E4M3, Fp8E4M3, Fp8E4M3)))
        }),
        gpu("fp8_graph_matmul_e4m3_e5m2_to_f32", move || {
            matmul_case(one(MatmulCase::new(Fp8E4M3, Fp8E5M2, F32)))
        }),
        gpu("fp8_graph_sdpa_forward_d128", || {
            sdpa_case({
                let mut c = sdpa_fwd_cfg(128, false, true, Fp8E4M3);
                c.seq_q = 128;
                c.seq_kv = 128;
                c
            })
        }),
        gpu("fp8_graph_sdpa_forward_d64_causal", || {
            sdpa_case({
                let mut c = sdpa_fwd_cfg(64, true, true, Fp8E4M3);
                c.seq_q = 128;
                c.seq_kv = 256;
                c
            })
        }),
        blackwell("fp8_graph_block_scale_quantize_mxfp8", block_quantize_case),
        blackwell(
            "fp8_graph_block_scale_dequantize_mxfp8",
            block_dequantize_case,
        ),
        gpu("fp8_graph_sdpa_backward_d128", || {
            sdpa_bwd_case(
                {
                    let mut c = sdpa_fwd_cfg(128, false, true, Fp8E4M3);
                    c.seq_q = 128;
                    c.seq_kv = 128;
                    c
                },
                Fp8E5M2,
            )
        }),
    ])
}
