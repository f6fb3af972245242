//! The CPU reference GEMM, GEMV and epilogues (unit tier: no library, no
//! device): hand-computed cases, identities ((AB)ᵀ = BᵀAᵀ, layouts that
//! store the same logical matrices agree, batched = a loop), BLAS's
//! `beta == 0` rule, the epilogue definitions and the error metric.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// `ensure!(err <= tol, ..)` negates a float comparison on purpose: NaN fails.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use crate::support;

use cudnn::Error;
use cudnn::blas::{Epilogue, Layout, Order};
use cudnn::reference::gemm::{self as r, EpilogueOutput};
use support::*;

type R = Result<(), libtest_mimic::Failed>;

pub fn main() {
    run(vec![
        unit("hand_2x2_row_and_col_major", hand_2x2),
        unit("hand_2x3_alpha_beta", hand_alpha_beta),
        unit("transpose_identity", transpose_identity),
        unit("all_layout_combinations_agree", layouts_agree),
        unit("padded_ld_leaves_gaps_alone", padded_ld),
        unit("batched_equals_loop", batched_loop),
        unit("beta_zero_ignores_nan", beta_zero_nan),
        unit("k_zero_scales_c", k_zero),
        unit("gemv_hand_and_as_gemm", gemv),
        unit("activations", activations),
        unit("bias_follows_contiguous_dimension", bias_direction),
        unit("aux_and_backward_epilogues", backward),
        unit("bgrad_a_and_b", bgrad),
        unit("reference_validates", validates),
        unit("max_relative_error", metric),
    ])
}

/// A logical m x n matrix (row-major Vec) stored in `l`.
fn store(vals: &[f64], rows: usize, cols: usize, l: &Layout) -> Vec<f64> {
    let mut v = vec![f64::NAN; l.required_len().unwrap()];
    for p in 0..l.batch_count() {
        for i in 0..rows {
            for j in 0..cols {
                v[l.offset(p, i, j).unwrap()] = vals[(p * rows + i) * cols + j];
            }
        }
    }
    v
}

/// Read a logical matrix back (row-major Vec).
fn load(v: &[f64], l: &Layout) -> Vec<f64> {
    let mut out = Vec::new();
    for p in 0..l.batch_count() {
        for i in 0..l.rows() {
            for j in 0..l.cols() {
                out.push(v[l.offset(p, i, j).unwrap()]);
            }
        }
    }
    out
}

/// `r::matmul` with alpha 1 and beta 0 (every epilogue case here): A, B
/// and D with their layouts.
fn mm(
    (a, la): (&[f64], &Layout),
    (b, lb): (&[f64], &Layout),
    (d, ld): (&mut [f64], &Layout),
    epilogue: Epilogue,
    bias: Option<&[f64]>,
    pre: Option<&[f64]>,
) -> cudnn::Result<EpilogueOutput> {
    r::matmul(1.0, a, la, b, lb, 0.0, d, ld, epilogue, bias, pre)
}

fn seq(n: usize, seed: u64) -> Vec<f64> {
    lcg_values(n, seed)
}

fn hand_2x2() -> R {
    let l = Layout::row_major(2, 2);
    let mut c = [0.0; 4];
    r::gemm(
        1.0,
        &[1., 2., 3., 4.],
        &l,
        &[5., 6., 7., 8.],
        &l,
        0.0,
        &mut c,
        &l,
    )?;
    ensure!(c == [19., 22., 43., 50.], "{c:?}");
    // The same matrices stored column-major: [1 3 2 4], [5 7 6 8].
    let l = Layout::col_major(2, 2);
    r::gemm(
        1.0,
        &[1., 3., 2., 4.],
        &l,
        &[5., 7., 6., 8.],
        &l,
        0.0,
        &mut c,
        &l,
    )?;
    ensure!(c == [19., 43., 22., 50.], "{c:?}");
    Ok(())
}

fn hand_alpha_beta() -> R {
    // A = [1 2 3; 4 5 6], B = [1 0; 0 1; 1 1], A·B = [4 5; 10 11].
    let (la, lb, lc) = (
        Layout::row_major(2, 3),
        Layout::row_major(3, 2),
        Layout::row_major(2, 2),
    );
    let mut c = [1., 1., 1., 1.];
    r::gemm(
        2.0,
        &[1., 2., 3., 4., 5., 6.],
        &la,
        &[1., 0., 0., 1., 1., 1.],
        &lb,
        0.5,
        &mut c,
        &lc,
    )?;
    ensure!(c == [8.5, 10.5, 20.5, 22.5], "{c:?}");
    Ok(())
}

fn transpose_identity() -> R {
    let (m, n, k) = (3, 5, 4);
    let a = seq(m * k, 1);
    let b = seq(k * n, 2);
    let (la, lb) = (Layout::row_major(m, k), Layout::row_major(k, n));
    let mut c = vec![0.0; m * n];
    r::gemm(1.0, &a, &la, &b, &lb, 0.0, &mut c, &Layout::row_major(m, n))?;
    // Bᵀ·Aᵀ over the same memory, into an n x m row-major D: D = Cᵀ.
    let mut d = vec![0.0; m * n];
    r::gemm(
        1.0,
        &b,
        &lb.t(),
        &a,
        &la.t(),
        0.0,
        &mut d,
        &Layout::row_major(n, m),
    )?;
    for i in 0..m {
        for j in 0..n {
            ensure!(
                (d[j * m + i] - c[i * n + j]).abs() < 1e-12,
                "(AB)^T != B^T A^T at {i},{j}"
            );
        }
    }
    // Writing C through a transposed output view gives the same memory as D.
    let mut e = vec![0.0; m * n];
    r::gemm(
        1.0,
        &a,
        &la,
        &b,
        &lb,
        0.0,
        &mut e,
        &Layout::row_major(n, m).t(),
    )?;
    ensure!(e == d, "output through a transposed view");
    Ok(())
}

fn layouts_agree() -> R {
    let (m, n, k) = (4, 3, 5);
    let a = seq(m * k, 3);
    let b = seq(k * n, 4);
    let orders = [Order::RowMajor, Order::ColMajor];
    let mut want: Option<Vec<f64>> = None;
    for oa in orders {
        for ob in orders {
            for oc in orders {
                for ta in [false, true] {
                    // A transposed view: store Aᵀ (k x m) in `oa` and use `.t()`.
                    let la = if ta {
                        Layout::new(oa, k, m).with_ld(7).t()
                    } else {
                        Layout::new(oa, m, k).with_ld(6)
                    };
                    let lb = Layout::new(ob, k, n);
                    let lc = Layout::new(oc, m, n).with_ld(8);
                    let av = store(&a, m, k, &la);
                    let bv = store(&b, k, n, &lb);
                    let mut cv = vec![0.0; lc.required_len().unwrap()];
                    r::gemm(1.0, &av, &la, &bv, &lb, 0.0, &mut cv, &lc)?;
                    let got = load(&cv, &lc);
                    match &want {
                        None => want = Some(got),
                        Some(w) => ensure!(
                            r::max_relative_error(&got, w) < 1e-14,
                            "{oa:?}{ta} x {ob:?} -> {oc:?} disagrees"
                        ),
                    }
                }
            }
        }
    }
    Ok(())
}

fn padded_ld() -> R {
    let la = Layout::row_major(2, 2).with_ld(3);
    let lc = Layout::col_major(2, 2).with_ld(4);
    let a = [1., 2., -7., 3., 4.];
    let mut c = [9.0; 6];
    r::gemm(
        1.0,
        &a,
        &la,
        &[1., 0., 0., 1.],
        &Layout::row_major(2, 2),
        0.0,
        &mut c,
        &lc,
    )?;
    ensure!(c == [1., 3., 9., 9., 2., 4.], "{c:?}");
    Ok(())
}

fn batched_loop() -> R {
    let (m, n, k, batch) = (3, 4, 2, 5);
    let la = Layout::col_major(m, k).batched(batch, m * k + 1);
    let lb = Layout::row_major(k, n).batched(batch, 0); // one B for all
    let lc = Layout::row_major(m, n).batched(batch, m * n + 2);
    let a = seq(la.required_len().unwrap(), 5);
    let b = seq(lb.required_len().unwrap(), 6);
    let c0 = seq(lc.required_len().unwrap(), 7);
    let mut c = c0.clone();
    r::gemm(0.5, &a, &la, &b, &lb, -1.0, &mut c, &lc)?;
    for p in 0..batch {
        let one_a = &a[p * (m * k + 1)..];
        let one_c0 = &c0[p * (m * n + 2)..p * (m * n + 2) + m * n];
        let mut one_c = one_c0.to_vec();
        r::gemm(
            0.5,
            one_a,
            &Layout::col_major(m, k),
            &b,
            &Layout::row_major(k, n),
            -1.0,
            &mut one_c,
            &Layout::row_major(m, n),
        )?;
        let got = &c[p * (m * n + 2)..p * (m * n + 2) + m * n];
        ensure!(got == one_c.as_slice(), "batch {p}");
        // The gaps between outputs are untouched.
        ensure!(
            c.get(p * (m * n + 2) + m * n) == c0.get(p * (m * n + 2) + m * n),
            "gap after {p}"
        );
    }
    Ok(())
}

fn beta_zero_nan() -> R {
    let l = Layout::col_major(2, 2);
    let mut c = [f64::NAN; 4];
    r::gemm(
        1.0,
        &[1., 0., 0., 1.],
        &l,
        &[1., 2., 3., 4.],
        &l,
        0.0,
        &mut c,
        &l,
    )?;
    ensure!(c == [1., 2., 3., 4.], "beta 0 must not read C: {c:?}");
    let mut c = [f64::NAN; 4];
    r::gemm(
        1.0,
        &[1., 0., 0., 1.],
        &l,
        &[1., 2., 3., 4.],
        &l,
        1.0,
        &mut c,
        &l,
    )?;
    ensure!(c.iter().all(|v| v.is_nan()), "beta 1 reads C");
    Ok(())
}

fn k_zero() -> R {
    let mut c = [1., 2., 3., 4.];
    r::gemm(
        1.0,
        &[],
        &Layout::col_major(2, 0),
        &[],
        &Layout::col_major(0, 2),
        3.0,
        &mut c,
        &Layout::col_major(2, 2),
    )?;
    ensure!(c == [3., 6., 9., 12.], "{c:?}");
    Ok(())
}

fn gemv() -> R {
    // [1 2 3; 4 5 6] · [1 1 2] = [9, 21]
    let la = Layout::row_major(2, 3);
    let a = [1., 2., 3., 4., 5., 6.];
    let mut y = [1., 1.];
    r::gemv(1.0, &a, &la, &[1., 1., 2.], 1, 2.0, &mut y, 1)?;
    ensure!(y == [11., 23.], "{y:?}");
    // Increments.
    let mut y = [0., -1., 0.];
    r::gemv(1.0, &a, &la, &[1., 9., 1., 9., 2.], 2, 0.0, &mut y, 2)?;
    ensure!(y == [9., -1., 21.], "{y:?}");
    // Same as a GEMM with n = 1, for a column-major A.
    let lac = Layout::col_major(4, 3).with_ld(5);
    let a = seq(lac.required_len().unwrap(), 8);
    let x = seq(3, 9);
    let mut y = [0.0; 4];
    r::gemv(1.5, &a, &lac, &x, 1, 0.0, &mut y, 1)?;
    let mut c = [0.0; 4];
    r::gemm(
        1.5,
        &a,
        &lac,
        &x,
        &Layout::col_major(3, 1),
        0.0,
        &mut c,
        &Layout::col_major(4, 1),
    )?;
    ensure!(r::max_relative_error(&y, &c) < 1e-15, "{y:?} vs {c:?}");
    match r::gemv(1.0, &a, &lac, &x, 0, 0.0, &mut y, 1) {
        Err(Error::InvalidArgument { arg, .. }) if arg == "incx" => {}
        other => return Err(format!("{other:?}").into()),
    }
    Ok(())
}

fn activations() -> R {
    ensure!(
        r::relu(-1.0) == 0.0 && r::relu(2.5) == 2.5 && r::relu(0.0) == 0.0,
        "relu"
    );
    ensure!(
        r::relu_grad(-1.0) == 0.0 && r::relu_grad(0.5) == 1.0,
        "relu grad"
    );
    ensure!(cudnn::reference::gelu::gelu_tanh(0.0) == 0.0, "gelu(0)");
    // Reference values of the tanh approximation.
    ensure!(
        (cudnn::reference::gelu::gelu_tanh(1.0) - 0.841_191_990_6).abs() < 1e-9,
        "gelu(1) = {}",
        cudnn::reference::gelu::gelu_tanh(1.0)
    );
    ensure!(
        (cudnn::reference::gelu::gelu_tanh(-1.0) + 0.158_808_009_4).abs() < 1e-9,
        "gelu(-1) = {}",
        cudnn::reference::gelu::gelu_tanh(-1.0)
    );
    ensure!(
        (cudnn::reference::gelu::gelu_tanh(3.0) - 2.996_362_607_9).abs() < 1e-9,
        "gelu(3) = {}",
        cudnn::reference::gelu::gelu_tanh(3.0)
    );
    for x in [-3.0, -1.0, -0.2, 0.0, 0.3, 1.0, 2.5] {
        let h = 1e-6;
        let fd = (cudnn::reference::gelu::gelu_tanh(x + h)
            - cudnn::reference::gelu::gelu_tanh(x - h))
            / (2.0 * h);
        ensure!(
            (cudnn::reference::gelu::gelu_tanh_grad(x) - fd).abs() < 1e-8,
            "gelu'({x}) = {} vs {fd}",
            cudnn::reference::gelu::gelu_tanh_grad(x)
        );
    }
    Ok(())
}

fn bias_direction() -> R {
    // A·B = I (2x3 with k = 2): D = [1 0 0; 0 1 0] + bias.
    let la = Layout::row_major(2, 2);
    let id = [1., 0., 0., 1.];
    let b = [1., 0., 0., 0., 1., 0.];
    let lb = Layout::row_major(2, 3);
    // Row-major D: one bias per column (3).
    let ld = Layout::row_major(2, 3);
    ensure!(r::bias_len(Epilogue::Bias, &ld) == 3, "row-major bias len");
    let mut d = [f64::NAN; 6];
    mm(
        (&id, &la),
        (&b, &lb),
        (&mut d, &ld),
        Epilogue::Bias,
        Some(&[10., 20., 30.]),
        None,
    )?;
    ensure!(d == [11., 20., 30., 10., 21., 30.], "{d:?}");
    // Column-major D: one bias per row (2).
    let ld = Layout::col_major(2, 3);
    ensure!(
        r::bias_len(Epilogue::ReluBias, &ld) == 2,
        "col-major bias len"
    );
    mm(
        (&id, &la),
        (&b, &lb),
        (&mut d, &ld),
        Epilogue::ReluBias,
        Some(&[-0.5, 5.]),
        None,
    )?;
    ensure!(d == [0.5, 5., 0., 6., 0., 5.], "{d:?}");
    // GELU + bias = gelu(x + bias).
    let mut d = [0.0; 6];
    mm(
        (&id, &la),
        (&b, &lb),
        (&mut d, &ld),
        Epilogue::GeluTanhBias,
        Some(&[0., -2.]),
        None,
    )?;
    ensure!(
        d[0] == cudnn::reference::gelu::gelu_tanh(1.0)
            && d[1] == cudnn::reference::gelu::gelu_tanh(-2.0)
            && d[3] == cudnn::reference::gelu::gelu_tanh(-1.0),
        "{d:?}"
    );
    // Missing or short bias is an error.
    ensure!(
        mm(
            (&id, &la),
            (&b, &lb),
            (&mut d, &ld),
            Epilogue::Bias,
            None,
            None
        )
        .is_err(),
        "no bias"
    );
    ensure!(
        mm(
            (&id, &la),
            (&b, &lb),
            (&mut d, &ld),
            Epilogue::Bias,
            Some(&[1.]),
            None
        )
        .is_err(),
        "short bias"
    );
    Ok(())
}

fn backward() -> R {
    let (m, n, k) = (3, 4, 5);
    let la = Layout::row_major(m, k);
    let lb = Layout::col_major(k, n);
    let ld = Layout::row_major(m, n);
    let a = seq(m * k, 10);
    let b = seq(k * n, 11);
    let bias = seq(n, 12);
    // Forward with aux: the pre-activation is x + bias, D = gelu of it.
    let mut d = vec![0.0; m * n];
    let out = mm(
        (&a, &la),
        (&b, &lb),
        (&mut d, &ld),
        Epilogue::GeluTanhAuxBias,
        Some(&bias),
        None,
    )?;
    let mut plain = vec![0.0; m * n];
    r::gemm(1.0, &a, &la, &b, &lb, 0.0, &mut plain, &ld)?;
    for i in 0..m * n {
        ensure!(
            (out.pre_activation[i] - (plain[i] + bias[i % n])).abs() < 1e-14,
            "pre {i}"
        );
        ensure!(
            d[i] == cudnn::reference::gelu::gelu_tanh(out.pre_activation[i]),
            "gelu {i}"
        );
    }
    ensure!(out.bias_grad.is_empty(), "no gradient in forward");
    let out_relu = mm(
        (&a, &la),
        (&b, &lb),
        (&mut d, &ld),
        Epilogue::ReluAux,
        None,
        None,
    )?;
    ensure!(out_relu.pre_activation == plain, "relu aux keeps the input");
    // Backward: D = x · act'(pre); bgrad = Σ over rows of row-major D (per column).
    let pre = out.pre_activation.clone();
    let mut g = vec![0.0; m * n];
    let o = mm(
        (&a, &la),
        (&b, &lb),
        (&mut g, &ld),
        Epilogue::DGeluTanhBgrad,
        None,
        Some(&pre),
    )?;
    for i in 0..m * n {
        ensure!(
            (g[i] - plain[i] * cudnn::reference::gelu::gelu_tanh_grad(pre[i])).abs() < 1e-14,
            "dgelu {i}"
        );
    }
    ensure!(o.bias_grad.len() == n, "one per column");
    for j in 0..n {
        let s: f64 = (0..m).map(|i| g[i * n + j]).sum();
        ensure!((o.bias_grad[j] - s).abs() < 1e-14, "bgrad {j}");
    }
    let mut g2 = vec![0.0; m * n];
    let o2 = mm(
        (&a, &la),
        (&b, &lb),
        (&mut g2, &ld),
        Epilogue::DRelu,
        None,
        Some(&pre),
    )?;
    ensure!(o2 == EpilogueOutput::default(), "DRelu has no extra output");
    for i in 0..m * n {
        ensure!(
            g2[i] == if pre[i] > 0.0 { plain[i] } else { 0.0 },
            "drelu {i}"
        );
    }
    ensure!(
        mm(
            (&a, &la),
            (&b, &lb),
            (&mut g2, &ld),
            Epilogue::DRelu,
            None,
            None
        )
        .is_err(),
        "backward needs pre"
    );
    Ok(())
}

fn bgrad() -> R {
    // A = [1 2; 3 4; 5 6] (3x2), B = [1 1 1 1; 2 2 2 2] (2x4).
    let a = [1., 2., 3., 4., 5., 6.];
    let b = [1., 1., 1., 1., 2., 2., 2., 2.];
    let (la, lb) = (Layout::row_major(3, 2), Layout::row_major(2, 4));
    for ld in [Layout::row_major(3, 4), Layout::col_major(3, 4)] {
        let mut d = vec![0.0; 12];
        let o = mm(
            (&a, &la),
            (&b, &lb),
            (&mut d, &ld),
            Epilogue::BgradA,
            None,
            None,
        )?;
        ensure!(o.bias_grad == [3., 7., 11.], "{:?}", o.bias_grad);
        let o = mm(
            (&a, &la),
            (&b, &lb),
            (&mut d, &ld),
            Epilogue::BgradB,
            None,
            None,
        )?;
        ensure!(o.bias_grad == [3., 3., 3., 3.], "{:?}", o.bias_grad);
        ensure!(
            load(&d, &ld) == [5., 5., 5., 5., 11., 11., 11., 11., 17., 17., 17., 17.],
            "D is the plain product"
        );
    }
    // Batched: one gradient per matrix.
    let la = Layout::row_major(3, 2).batched(2, 0);
    let lb = Layout::row_major(2, 4).batched(2, 0);
    let ld = Layout::row_major(3, 4).batched(2, 12);
    let mut d = vec![0.0; 24];
    let o = mm(
        (&a, &la),
        (&b, &lb),
        (&mut d, &ld),
        Epilogue::BgradA,
        None,
        None,
    )?;
    ensure!(
        o.bias_grad == [3., 7., 11., 3., 7., 11.],
        "{:?}",
        o.bias_grad
    );
    Ok(())
}

fn validates() -> R {
    let mut c = [0.0; 4];
    let l = Layout::col_major(2, 2);
    match r::gemm(1.0, &[0.0; 3], &l, &[0.0; 4], &l, 0.0, &mut c, &l) {
        Err(Error::Mismatch { what, .. }) if what.contains("a buffer length") => {}
        other => return Err(format!("{other:?}").into()),
    }
    match r::gemm(
        1.0,
        &[0.0; 6],
        &Layout::col_major(2, 3),
        &[0.0; 4],
        &l,
        0.0,
        &mut c,
        &l,
    ) {
        Err(Error::Mismatch { what, .. }) if what.contains("b rows (k)") => {}
        other => return Err(format!("{other:?}").into()),
    }
    let lc = Layout::col_major(2, 2).batched(2, 3);
    let mut c = [0.0; 7];
    match r::gemm(
        1.0,
        &[0.0; 4],
        &l.batched(2, 0),
        &[0.0; 4],
        &l.batched(2, 0),
        0.0,
        &mut c,
        &lc,
    ) {
        Err(Error::InvalidArgument { arg, .. }) if arg == "c.batch_stride" => {}
        other => return Err(format!("{other:?}").into()),
    }
    Ok(())
}

fn metric() -> R {
    ensure!(
        r::max_relative_error(&[1.0, 2.0], &[1.0, 2.0]) == 0.0,
        "equal"
    );
    ensure!(
        (r::max_relative_error(&[1.0, 2.1], &[1.0, 2.0]) - 0.05).abs() < 1e-12,
        "0.1 / 2"
    );
    ensure!(
        r::max_relative_error(&[f64::NAN, 2.0], &[1.0, 2.0]).is_infinite(),
        "NaN never passes"
    );
    ensure!(
        !(r::max_relative_error(&[f64::NAN], &[1.0]) <= 1.0),
        "NaN fails any bound"
    );
    ensure!(
        r::max_relative_error(&[1.0], &[1.0, 2.0]).is_infinite(),
        "length mismatch"
    );
    ensure!(
        r::max_relative_error(&[f64::INFINITY], &[1.0]).is_infinite(),
        "inf"
    );
    Ok(())
}
