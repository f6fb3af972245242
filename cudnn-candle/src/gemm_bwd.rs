//! The backward of [`matmul_bias_act`](crate::matmul_bias_act) (candle's
//! `CustomOp` `bwd`): with `Z = A·B + bias` and `Y = act(Z)`,
//!
//! - `dZ = dY ⊙ act'(Z)`: nothing for no activation; for ReLU `dY` where
//!   the kept output `Y > 0` (`Y > 0` exactly where `Z > 0`: the gradient
//!   is 0 at 0, PyTorch's `threshold_backward` rule, as `conv2d_with`);
//!   for GELU (tanh) `Z` is recomputed by one cuBLASLt GEMM with the bias
//!   epilogue and `gelu_tanh'(Z)` is written from its formula
//!   ([`gelu_tanh_grad`]), in f32;
//! - `dA = dZ·Bᵀ` and `dB = Aᵀ·dZ`, cuBLASLt GEMMs on candle's transposed
//!   views (`t()`: the transposes are in the layouts, nothing is copied);
//!   batched operands give per-matrix gradients, and candle's own
//!   `broadcast_as` backward sums those of a broadcast operand, exactly as
//!   for candle's `broadcast_matmul`;
//! - `dbias = Σ dZ` over every dim but the last, accumulated in f32 (for
//!   GELU from the f32 `dZ`, before the rounding to the op's dtype that
//!   only the GEMMs' copy takes).
//!
//! Why recompute `Z` rather than cuBLASLt's `GELU_AUX` forward and
//! `DGELU` / `DRELU` (`_BGRAD`) backward epilogues, which `cudnn::blas`
//! has: those backward epilogues apply `act'` to the *result of a GEMM*
//! (in an MLP, the `dY = dOut·W₂ᵀ` of the next layer). Here `dY` arrives
//! from candle's autograd already computed, so there is no GEMM of this op
//! to fuse them into (an identity GEMM would cost `m·n²`). Keeping the
//! aux output from the forward instead would hold one more `m x n`
//! buffer per call for the graph's life (the op is stateless and
//! re-entrant today) to save one GEMM in the backward. ReLU needs
//! neither: the output decides its gradient.

use candle_core::{DType as CDType, Tensor};

use crate::params::gemm::MatmulActivation;

/// `sqrt(2 / pi)`.
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
/// The cubic coefficient of the tanh approximation.
const GELU_C: f64 = 0.044_715;

/// `d/dx gelu_tanh(x)` for `gelu_tanh(x) = 0.5·x·(1 + tanh(u))`, `u =
/// sqrt(2/pi)·(x + 0.044715·x³)`:
/// `0.5·(1 + tanh u) + 0.5·x·(1 - tanh² u)·sqrt(2/pi)·(1 + 3·0.044715·x²)`.
pub fn gelu_tanh_grad_f64(x: f64) -> f64 {
    let u = SQRT_2_OVER_PI * (x + GELU_C * x * x * x);
    let t = u.tanh();
    0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_C * x * x)
}

/// [`gelu_tanh_grad_f64`] elementwise on a tensor (any device), in f32.
///
/// # Errors
/// candle's.
pub fn gelu_tanh_grad(z: &Tensor) -> candle_core::Result<Tensor> {
    let z = z.to_dtype(CDType::F32)?;
    let z2 = z.sqr()?;
    // u = z · sqrt(2/pi) · (1 + c·z²)
    let u = z.mul(&z2.affine(SQRT_2_OVER_PI * GELU_C, SQRT_2_OVER_PI)?)?;
    let t = u.tanh()?;
    let first = t.affine(0.5, 0.5)?;
    let sech2 = t.sqr()?.affine(-1.0, 1.0)?;
    let inner = z2.affine(3.0 * GELU_C * SQRT_2_OVER_PI, SQRT_2_OVER_PI)?;
    let second = z.mul(&sech2)?.mul(&inner)?.affine(0.5, 0.0)?;
    first.add(&second)
}

/// The gradients of one call, in the op's dtype: `(dA, dB, dbias)`, each
/// only where asked for (`dbias` only with a bias).
pub(crate) type Grads = (Option<Tensor>, Option<Tensor>, Option<Tensor>);

/// The forward GEMM the backward runs: `x·y (+ bias)`, no activation.
pub(crate) type Mm<'f> =
    &'f dyn Fn(&Tensor, &Tensor, Option<&Tensor>) -> candle_core::Result<Tensor>;

/// The backward of `Y = act(A·B + bias)` given `dY`, with `mm(x, y, bias)`
/// the forward GEMM `x·y (+ bias)` of the same batch dims (no activation,
/// no gradient tracked): `a`, `b`, `bias` as the op received them (batch
/// dims equal), `y` its output. `need`: which of `(dA, dB, dbias)` to
/// compute (candle's `track_op` of each input: a GEMM is skipped for an
/// input no gradient flows to, e.g. a first layer's data).
///
/// # Errors
/// `mm`'s; candle's.
pub(crate) fn backward(
    (a, b, bias): (&Tensor, &Tensor, Option<&Tensor>),
    y: &Tensor,
    dy: &Tensor,
    act: MatmulActivation,
    mm: Mm<'_>,
    need: [bool; 3],
) -> candle_core::Result<Grads> {
    let dt = a.dtype();
    let dy = dy.to_dtype(dt)?;
    // `dz` in the op's dtype for the GEMMs; `dz32`, GELU's dZ before that
    // rounding, for dbias (a sum of unrounded terms, rounded once).
    let (dz, dz32) = match act {
        MatmulActivation::None => (dy, None),
        MatmulActivation::Relu => (y.gt(0f64)?.where_cond(&dy, &dy.zeros_like()?)?, None),
        MatmulActivation::GeluTanh => {
            let z = mm(a, b, bias)?;
            let dz32 = dy.to_dtype(CDType::F32)?.mul(&gelu_tanh_grad(&z)?)?;
            (dz32.to_dtype(dt)?, Some(dz32))
        }
    };
    let r = dz.rank();
    let da = need[0].then(|| mm(&dz, &b.t()?, None)).transpose()?;
    let db = need[1].then(|| mm(&a.t()?, &dz, None)).transpose()?;
    let dbias = match bias {
        Some(x) if need[2] => {
            let n = dz.dim(r - 1)?;
            let full = match dz32 {
                Some(t) => t,
                None => dz.to_dtype(CDType::F32)?,
            };
            let flat = full.reshape(((), n))?;
            Some(flat.sum(0)?.to_dtype(x.dtype())?)
        }
        _ => None,
    };
    Ok((da, db, dbias))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    fn rand(d: &[usize], seed: u64) -> Tensor {
        // Deterministic values in [-2, 2) (no RNG state shared across tests).
        let n: usize = d.iter().product();
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        let v: Vec<f32> = (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
            })
            .collect();
        Tensor::from_vec(v, d, &Device::Cpu).unwrap()
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        assert_eq!(a.dims(), b.dims());
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    }

    /// The formula against central differences of the GELU (tanh) it
    /// differentiates, and by hand at 0 (0.5) and far out (0 and 1).
    #[test]
    fn gelu_tanh_grad_matches_finite_differences() {
        let g = |x: f64| 0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + GELU_C * x * x * x)).tanh());
        for i in -60..=60 {
            let x = i as f64 / 10.0;
            let h = 1e-5;
            let fd = (g(x + h) - g(x - h)) / (2.0 * h);
            assert!(
                (gelu_tanh_grad_f64(x) - fd).abs() < 1e-8,
                "x {x}: {} vs {fd}",
                gelu_tanh_grad_f64(x)
            );
        }
        assert_eq!(gelu_tanh_grad_f64(0.0), 0.5);
        assert!(gelu_tanh_grad_f64(-20.0).abs() < 1e-12);
        assert!((gelu_tanh_grad_f64(20.0) - 1.0).abs() < 1e-12);
        let xs: Vec<f32> = (-60..=60).map(|i| i as f32 / 10.0).collect();
        let t = Tensor::new(xs.as_slice(), &Device::Cpu).unwrap();
        let got = gelu_tanh_grad(&t).unwrap().to_vec1::<f32>().unwrap();
        for (x, g) in xs.iter().zip(got) {
            assert!((f64::from(g) - gelu_tanh_grad_f64(f64::from(*x))).abs() < 1e-6);
        }
    }

    /// The tensor form against candle's own autograd of its `gelu` (the
    /// tanh form): an independent implementation of the same derivative.
    #[test]
    fn gelu_tanh_grad_matches_candles_autograd() {
        let x = Var::from_tensor(&rand(&[257], 3)).unwrap();
        let grads = x
            .as_tensor()
            .gelu()
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let want = grads.get(x.as_tensor()).unwrap();
        let got = gelu_tanh_grad(x.as_tensor()).unwrap();
        assert!(max_diff(&got, want) < 1e-5);
    }

    /// The backward's algebra (dZ, both GEMMs on transposed views, dbias)
    /// with candle's CPU matmul standing in for cuBLASLt, against candle's
    /// CPU autograd of `act(a.matmul(b) + bias)`: every activation, with
    /// and without a bias, 2-d and batched.
    #[test]
    fn backward_matches_candles_autograd_on_the_cpu() {
        let mm = |x: &Tensor, y: &Tensor, bias: Option<&Tensor>| -> candle_core::Result<Tensor> {
            let p = x.matmul(y)?;
            match bias {
                Some(b) => p.broadcast_add(b),
                None => Ok(p),
            }
        };
        let mut seed = 10;
        for (ad, bd) in [
            (vec![7, 5], vec![5, 3]),
            (vec![3, 4, 6], vec![3, 6, 2]),
            (vec![2, 2, 3, 8], vec![2, 2, 8, 5]),
        ] {
            for act in [
                MatmulActivation::None,
                MatmulActivation::Relu,
                MatmulActivation::GeluTanh,
            ] {
                for with_bias in [false, true] {
                    seed += 1;
                    let n = bd[bd.len() - 1];
                    let a = Var::from_tensor(&rand(&ad, seed)).unwrap();
                    let b = Var::from_tensor(&rand(&bd, seed + 100)).unwrap();
                    let x = Var::from_tensor(&rand(&[n], seed + 200)).unwrap();
                    let mut out_shape = ad[..ad.len() - 1].to_vec();
                    out_shape.push(n);
                    let w = rand(&out_shape, seed + 300);
                    let z = mm(
                        a.as_tensor(),
                        b.as_tensor(),
                        with_bias.then_some(x.as_tensor()),
                    )
                    .unwrap();
                    let y = match act {
                        MatmulActivation::None => z,
                        MatmulActivation::Relu => z.relu().unwrap(),
                        MatmulActivation::GeluTanh => z.gelu().unwrap(),
                    };
                    let grads = (&y * &w).unwrap().sum_all().unwrap().backward().unwrap();
                    let (da, db, dx) = backward(
                        (
                            &a.as_tensor().detach(),
                            &b.as_tensor().detach(),
                            with_bias.then(|| x.as_tensor().detach()).as_ref(),
                        ),
                        &y.detach(),
                        &w,
                        act,
                        &mm,
                        [true; 3],
                    )
                    .unwrap();
                    let (da, db) = (da.unwrap(), db.unwrap());
                    let ctx = format!("{ad:?} x {bd:?} {act:?} bias {with_bias}");
                    assert!(
                        max_diff(&da, grads.get(a.as_tensor()).unwrap()) < 1e-4,
                        "dA {ctx}"
                    );
                    assert!(
                        max_diff(&db, grads.get(b.as_tensor()).unwrap()) < 1e-4,
                        "dB {ctx}"
                    );
                    match dx {
                        Some(dx) => assert!(
                            max_diff(&dx, grads.get(x.as_tensor()).unwrap()) < 1e-4,
                            "dbias {ctx}"
                        ),
                        None => assert!(!with_bias, "{ctx}"),
                    }
                }
            }
        }
    }

    proptest::proptest! {
        /// Random shapes (0 to 2 batch dims, b 2-d or batched like a),
        /// every activation, with and without a bias: the backward against
        /// candle's CPU autograd.
        #[test]
        fn backward_property_against_candles_autograd(
            batch in proptest::collection::vec(1usize..4, 0..3),
            (m, k, n) in (1usize..7, 1usize..7, 1usize..7),
            b_batched in proptest::bool::ANY,
            act in proptest::sample::select(vec![
                MatmulActivation::None,
                MatmulActivation::Relu,
                MatmulActivation::GeluTanh,
            ]),
            with_bias in proptest::bool::ANY,
            seed in 0u64..1000,
        ) {
            let mm = |x: &Tensor, y: &Tensor, bias: Option<&Tensor>| -> candle_core::Result<Tensor> {
                let p = x.broadcast_matmul(y)?;
                match bias {
                    Some(b) => p.broadcast_add(b),
                    None => Ok(p),
                }
            };
            let mut ad = batch.clone();
            ad.extend([m, k]);
            let mut bd = if b_batched { batch.clone() } else { Vec::new() };
            bd.extend([k, n]);
            let a = Var::from_tensor(&rand(&ad, seed)).unwrap();
            let b = Var::from_tensor(&rand(&bd, seed + 1)).unwrap();
            let x = Var::from_tensor(&rand(&[n], seed + 2)).unwrap();
            let z = mm(a.as_tensor(), b.as_tensor(), with_bias.then_some(x.as_tensor())).unwrap();
            let y = match act {
                MatmulActivation::None => z,
                MatmulActivation::Relu => z.relu().unwrap(),
                MatmulActivation::GeluTanh => z.gelu().unwrap(),
            };
            let w = rand(y.dims(), seed + 3);
            let grads = (&y * &w).unwrap().sum_all().unwrap().backward().unwrap();
            // The op sees b broadcast to a's batch dims (the caller's
            // broadcast_as, whose own backward candle sums).
            let bb = b.as_tensor().broadcast_as(
                [batch.clone(), vec![k, n]].concat()
            ).unwrap();
            let (da, db, dx) = backward(
                (&a.as_tensor().detach(), &bb, with_bias.then(|| x.as_tensor().detach()).as_ref()),
                &y.detach(),
                &w,
                act,
                &mm,
                [true; 3],
            ).unwrap();
            let (da, db) = (da.unwrap(), db.unwrap());
            // The broadcast's backward: sum over the batch dims b lacks.
            let db = if b_batched || batch.is_empty() {
                db
            } else {
                db.sum(((0..batch.len()).collect::<Vec<_>>()).as_slice()).unwrap()
            };
            proptest::prop_assert!(max_diff(&da, grads.get(a.as_tensor()).unwrap()) < 1e-4);
            proptest::prop_assert!(max_diff(&db, grads.get(b.as_tensor()).unwrap()) < 1e-4);
            if let Some(dx) = dx {
                proptest::prop_assert!(max_diff(&dx, grads.get(x.as_tensor()).unwrap()) < 1e-4);
            }
        }
    }

    /// Values `step · i` for integers `i` in `[-lim, lim]`, deterministic:
    /// few enough bits that products and short sums are exact in bf16.
    fn grid(d: &[usize], seed: u64, lim: i64, step: f32) -> Tensor {
        let n: usize = d.iter().product();
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(7);
        let v: Vec<f32> = (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let i = ((s >> 33) % (2 * lim as u64 + 1)) as i64 - lim;
                i as f32 * step
            })
            .collect();
        Tensor::from_vec(v, d, &Device::Cpu).unwrap()
    }

    proptest::proptest! {
        /// bf16: dbias against candle's CPU autograd in f32 of the same
        /// values. `a` in halves of [-2, 2], `b` in halves of [-1, 1], the
        /// bias in odd eighths of [-1.875, 2.125] and k < 7: every product
        /// and partial sum of `Z = a·b + bias` has at most 7 significant
        /// bits, so `Z` is exact in bf16 (whatever the sum order) and
        /// equals the reference's, and is never 0 (where candle's ReLU
        /// gradient, 1 at 0, and the op's, 0, differ by design); `dY` is
        /// bf16-valued. The only roundings left are
        /// f32 arithmetic and dbias's one rounding to bf16, so per column
        /// `|dbias_j - ref_j| <= 2^-8·|ref_j| + 2e-5·Σ_i |dY_ij|` (bf16's
        /// unit roundoff; f32's formula and sum order, with `|act'| <=
        /// 1.13`). Summing dZ after rounding it to bf16 (as the op did)
        /// adds up to 2^-8·|dZ_ij| per term and breaks this bound.
        #[test]
        fn bf16_dbias_is_rounded_once(
            batch in proptest::collection::vec(1usize..4, 0..3),
            (m, k, n) in (1usize..7, 1usize..7, 1usize..7),
            b_batched in proptest::bool::ANY,
            act in proptest::sample::select(vec![
                MatmulActivation::None,
                MatmulActivation::Relu,
                MatmulActivation::GeluTanh,
            ]),
            seed in 0u64..1000,
        ) {
            let bf = CDType::BF16;
            let mm = |x: &Tensor, y: &Tensor, bias: Option<&Tensor>| -> candle_core::Result<Tensor> {
                let p = x.broadcast_matmul(y)?;
                match bias {
                    Some(b) => p.broadcast_add(b),
                    None => Ok(p),
                }
            };
            let mut ad = batch.clone();
            ad.extend([m, k]);
            let mut bd = if b_batched { batch.clone() } else { Vec::new() };
            bd.extend([k, n]);
            let (a, b, x) = (grid(&ad, seed, 4, 0.5), grid(&bd, seed + 1, 2, 0.5), (grid(&[n], seed + 2, 8, 0.25) + 0.125).unwrap());
            let mut yd = ad[..ad.len() - 1].to_vec();
            yd.push(n);
            let w = rand(&yd, seed + 3).to_dtype(bf).unwrap().to_dtype(CDType::F32).unwrap();
            // The reference: f32 autograd of the same (bf16-exact) values.
            let vx = Var::from_tensor(&x).unwrap();
            let z = mm(&a, &b, Some(vx.as_tensor())).unwrap();
            let y = match act {
                MatmulActivation::None => z,
                MatmulActivation::Relu => z.relu().unwrap(),
                MatmulActivation::GeluTanh => z.gelu().unwrap(),
            };
            let grads = (&y * &w).unwrap().sum_all().unwrap().backward().unwrap();
            let want = grads.get(vx.as_tensor()).unwrap().to_vec1::<f32>().unwrap();
            // The op's backward in bf16 (b broadcast as the op sees it).
            let h = |t: &Tensor| t.to_dtype(bf).unwrap();
            let bb = h(&b).broadcast_as([batch.clone(), vec![k, n]].concat()).unwrap();
            let (_, _, dx) = backward(
                (&h(&a), &bb, Some(&h(&x))),
                &h(&y),
                &h(&w),
                act,
                &mm,
                [false, false, true],
            ).unwrap();
            let dx = dx.unwrap();
            proptest::prop_assert_eq!(dx.dtype(), bf);
            let got = dx.to_dtype(CDType::F32).unwrap().to_vec1::<f32>().unwrap();
            let wsum = w.abs().unwrap().reshape(((), n)).unwrap().sum(0).unwrap().to_vec1::<f32>().unwrap();
            for j in 0..n {
                let bound = want[j].abs() / 256.0 + 2e-5 * wsum[j];
                proptest::prop_assert!(
                    (got[j] - want[j]).abs() <= bound,
                    "{:?} x {:?} {:?} column {}: {} vs {} (bound {:e})",
                    ad, bd, act, j, got[j], want[j], bound
                );
            }
        }
    }

    /// ReLU's gradient at exactly 0 is 0 (PyTorch's rule), by hand: a row
    /// of A of zeros makes that row of Z zero, without a bias.
    #[test]
    fn relu_gradient_is_zero_at_zero() {
        let a = Tensor::new(&[[0f32, 0.0], [1.0, 2.0]], &Device::Cpu).unwrap();
        let b = Tensor::new(&[[1f32, -1.0], [1.0, 1.0]], &Device::Cpu).unwrap();
        // Z = [[0, 0], [3, 1]]: Y = Z; dY = 1 everywhere.
        let y = a.matmul(&b).unwrap().relu().unwrap();
        let dy = Tensor::ones((2, 2), CDType::F32, &Device::Cpu).unwrap();
        let mm = |x: &Tensor, y: &Tensor, _: Option<&Tensor>| x.matmul(y);
        let relu = MatmulActivation::Relu;
        let (da, db, _) = backward((&a, &b, None), &y, &dy, relu, &mm, [true; 3]).unwrap();
        let (da, db) = (da.unwrap(), db.unwrap());
        // Only what is asked for.
        let (none_a, some_b, none_x) =
            backward((&a, &b, None), &y, &dy, relu, &mm, [false, true, true]).unwrap();
        assert!(none_a.is_none() && some_b.is_some() && none_x.is_none());
        // dZ = [[0, 0], [1, 1]]; dA = dZ·Bᵀ = [[0, 0], [0, 2]];
        // dB = Aᵀ·dZ = [[1, 1], [2, 2]].
        assert_eq!(
            da.to_vec2::<f32>().unwrap(),
            vec![vec![0.0, 0.0], vec![0.0, 2.0]]
        );
        assert_eq!(
            db.to_vec2::<f32>().unwrap(),
            vec![vec![1.0, 1.0], vec![2.0, 2.0]]
        );
    }
}
