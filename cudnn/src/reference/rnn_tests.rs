//! Tests of the f64 RNN reference (hand cases, central differences,
//! property cases); a file of their own so the reference stays one job.

use super::*;
use crate::dnn::{RnnBiasMode, RnnDirection};

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * (1.0 + a.abs().max(b.abs()))
}

#[test]
fn unit_rnn_tanh_by_hand() {
    let cfg = RnnConfig::new(RnnCellMode::RnnTanh, 1, 1);
    // W, bW, R, bR
    let params = [0.5, 0.1, -1.0, 0.2];
    let batch = Batch {
        lengths: &[2],
        max_len: 2,
    };
    let out = forward(&cfg, &params, &batch, &[1.0, 2.0], Some(&[0.3]), None).unwrap();
    assert!(close(out.y[0], 0.46211715726000974, 1e-14), "{:?}", out.y);
    assert!(close(out.y[1], 0.6846860472584387, 1e-14), "{:?}", out.y);
    assert_eq!(out.hy, vec![out.y[1]]);
}

#[test]
fn unit_lstm_by_hand() {
    let cfg = RnnConfig::new(RnnCellMode::Lstm, 1, 1);
    let w = [0.1, 0.2, 0.3, 0.4];
    let r = [0.5, -0.5, 0.25, -0.25];
    let bw = [0.01, 0.02, 0.03, 0.04];
    let mut params = Vec::new();
    for g in 0..4 {
        params.extend([w[g], bw[g]]);
    }
    for rg in r {
        params.extend([rg, 0.0]);
    }
    let batch = Batch {
        lengths: &[2],
        max_len: 2,
    };
    let out = forward(
        &cfg,
        &params,
        &batch,
        &[1.0, -1.0],
        Some(&[0.1]),
        Some(&[-0.2]),
    )
    .unwrap();
    assert!(close(out.y[0], 0.04540116731507153, 1e-14), "{:?}", out.y);
    assert!(close(out.y[1], -0.03595695185421391, 1e-14), "{:?}", out.y);
    assert!(
        close(out.cy[0], -0.08831228442124373, 1e-14),
        "{:?}",
        out.cy
    );
}

#[test]
fn unit_gru_by_hand() {
    let cfg = RnnConfig::new(RnnCellMode::Gru, 1, 1);
    let w = [0.3, -0.2, 0.5];
    let r = [0.1, 0.4, -0.6];
    let bw = [0.0, 0.0, 0.1];
    let br = [0.0, 0.0, 0.2];
    let mut params = Vec::new();
    for g in 0..3 {
        params.extend([w[g], bw[g]]);
    }
    for g in 0..3 {
        params.extend([r[g], br[g]]);
    }
    let batch = Batch {
        lengths: &[1],
        max_len: 1,
    };
    let out = forward(&cfg, &params, &batch, &[2.0], Some(&[0.5]), None).unwrap();
    assert!(close(out.y[0], 0.6515489718541958, 1e-14), "{:?}", out.y);
}

#[test]
fn unit_bidirectional_reads_backwards_and_pads_with_zero() {
    // A ReLU RNN with W = 1, R = 1, no bias sums its inputs: the
    // forward direction gives prefix sums, the backward suffix sums.
    let mut cfg = RnnConfig::new(RnnCellMode::RnnRelu, 1, 1);
    cfg.bias = RnnBiasMode::None;
    cfg.direction = RnnDirection::Bidirectional;
    let params = [1.0, 1.0, 1.0, 1.0];
    let batch = Batch {
        lengths: &[3, 1, 0],
        max_len: 4,
    };
    let x = [1.0, 2.0, 3.0, 9.0, 5.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0];
    let out = forward(&cfg, &params, &batch, &x, None, None).unwrap();
    let y0: Vec<f64> = out.y[..8].to_vec();
    assert_eq!(y0, vec![1.0, 6.0, 3.0, 5.0, 6.0, 3.0, 0.0, 0.0]);
    assert_eq!(&out.y[8..10], &[5.0, 5.0]);
    assert!(out.y[10..].iter().all(|&v| v == 0.0));
    // hy: [layer*dir][batch]: forward final 6, 5, 0; backward final 6, 5, 0.
    assert_eq!(out.hy, vec![6.0, 5.0, 0.0, 6.0, 5.0, 0.0]);
}

#[test]
fn unit_fill_padding_by_hand() {
    // The same summing RNN, one direction, width 1: y of [3, 1, 0] over 4
    // steps is prefix sums then 0 (forward's zero fill); fill_padding puts
    // -7 at exactly the 3 + 1 + 4 = 8 padded positions.
    let mut cfg = RnnConfig::new(RnnCellMode::RnnRelu, 1, 1);
    cfg.bias = RnnBiasMode::None;
    let params = [1.0, 1.0];
    let batch = Batch {
        lengths: &[3, 1, 0],
        max_len: 4,
    };
    let x = [1.0, 2.0, 3.0, 9.0, 5.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0];
    let mut y = forward(&cfg, &params, &batch, &x, None, None).unwrap().y;
    assert_eq!(
        y,
        vec![1.0, 3.0, 6.0, 0.0, 5.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    );
    fill_padding(&mut y, &batch, 1, -7.0).unwrap();
    let p = -7.0;
    assert_eq!(y, vec![1.0, 3.0, 6.0, p, 5.0, p, p, p, p, p, p, p]);
    // Width 2: whole vectors.
    let mut y2 = vec![1.0; 2 * 2 * 2];
    let b2 = Batch {
        lengths: &[1, 2],
        max_len: 2,
    };
    fill_padding(&mut y2, &b2, 2, 0.0).unwrap();
    assert_eq!(y2, vec![1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]);
    // Refusals: wrong length, a length past max_len (nothing written),
    // an overflowing size.
    assert!(matches!(
        fill_padding(&mut y2, &b2, 3, 0.0),
        Err(Error::Mismatch { .. })
    ));
    let mut z = vec![1.0; 4];
    let bad = Batch {
        lengths: &[1, 3],
        max_len: 2,
    };
    assert!(fill_padding(&mut z, &bad, 1, 0.0).is_err());
    assert_eq!(z, vec![1.0; 4]);
    let huge = Batch {
        lengths: &[0],
        max_len: usize::MAX,
    };
    assert!(fill_padding(&mut z, &huge, usize::MAX, 0.0).is_err());
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.next()).collect()
    }
}

fn loss(
    cfg: &RnnConfig,
    params: &[f64],
    batch: &Batch<'_>,
    x: &[f64],
    hx: &[f64],
    cx: Option<&[f64]>,
    w: (&[f64], &[f64], &[f64]),
) -> f64 {
    let o = forward(cfg, params, batch, x, Some(hx), cx).unwrap();
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(p, q)| p * q).sum::<f64>();
    dot(&o.y, w.0) + dot(&o.hy, w.1) + dot(&o.cy, w.2)
}

/// Every gradient of [`backward`] against central differences of the
/// loss `dy·y + dhy·hy + dcy·cy`, for each cell, two layers, both
/// directions, projection, skip input, every bias mode, lengths with 0.
#[test]
fn unit_backward_matches_finite_differences() {
    let mut rng = Rng(0x2626_2626);
    let mut cases = 0;
    for cell in RnnCellMode::ALL {
        for (k, bias) in RnnBiasMode::ALL.into_iter().enumerate() {
            let mut cfg = RnnConfig::new(cell, 3, 3);
            cfg.bias = bias;
            cfg.num_layers = 2;
            cfg.direction = if k % 2 == 0 {
                RnnDirection::Bidirectional
            } else {
                RnnDirection::Unidirectional
            };
            if cell == RnnCellMode::Lstm && k < 2 {
                cfg.projection_size = 2;
            }
            if k == 3 {
                cfg.input_mode = RnnInputMode::Skip;
            }
            let lengths = [3, 0, 2];
            let batch = Batch {
                lengths: &lengths,
                max_len: 3,
            };
            let (_, np) = param_offsets(&cfg).unwrap();
            let params = rng.vec(np);
            let x = rng.vec(3 * 3 * 3);
            let nh = 2 * cfg.direction.count() * 3 * cfg.projection_size;
            let nc = 2 * cfg.direction.count() * 3 * 3;
            let hx = rng.vec(nh);
            let lstm = cell == RnnCellMode::Lstm;
            let cx = lstm.then(|| rng.vec(nc));
            let dy = rng.vec(3 * 3 * cfg.projection_size * cfg.direction.count());
            let dhy = rng.vec(nh);
            let dcy = if lstm { rng.vec(nc) } else { Vec::new() };
            let g = backward(
                &cfg,
                &params,
                &batch,
                &x,
                Some(&hx),
                cx.as_deref(),
                &dy,
                Some(&dhy),
                lstm.then_some(&dcy[..]),
            )
            .unwrap();
            let w = (&dy[..], &dhy[..], &dcy[..]);
            let eps = 1e-6;
            let check = |name: &str, analytic: &[f64], f: &dyn Fn(usize, f64) -> f64| {
                for (i, &a) in analytic.iter().enumerate() {
                    let num = (f(i, eps) - f(i, -eps)) / (2.0 * eps);
                    assert!(
                        close(a, num, 1e-6),
                        "{cfg:?} {name}[{i}]: analytic {a}, numeric {num}"
                    );
                }
            };
            check("dparams", &g.dparams, &|i, e| {
                let mut p = params.clone();
                p[i] += e;
                loss(&cfg, &p, &batch, &x, &hx, cx.as_deref(), w)
            });
            check("dx", &g.dx, &|i, e| {
                let mut v = x.clone();
                v[i] += e;
                loss(&cfg, &params, &batch, &v, &hx, cx.as_deref(), w)
            });
            check("dhx", &g.dhx, &|i, e| {
                let mut v = hx.clone();
                v[i] += e;
                loss(&cfg, &params, &batch, &x, &v, cx.as_deref(), w)
            });
            if let Some(cx) = &cx {
                check("dcx", &g.dcx, &|i, e| {
                    let mut v = cx.clone();
                    v[i] += e;
                    loss(&cfg, &params, &batch, &x, &hx, Some(&v), w)
                });
            }
            // Padding and the empty sequence get no gradient.
            assert!(g.dx[9..18].iter().all(|&v| v == 0.0));
            assert!(g.dx[24..27].iter().all(|&v| v == 0.0));
            cases += 1;
        }
    }
    assert_eq!(cases, 16);
}

#[test]
fn unit_refusals_are_typed() {
    let cfg = RnnConfig::new(RnnCellMode::Gru, 2, 2);
    let (_, np) = param_offsets(&cfg).unwrap();
    let p = vec![0.0; np];
    let b = Batch {
        lengths: &[3],
        max_len: 2,
    };
    let e = forward(&cfg, &p, &b, &[0.0; 4], None, None).unwrap_err();
    assert!(e.to_string().contains("lengths[0]"), "{e}");
    let b = Batch {
        lengths: &[2],
        max_len: 2,
    };
    let e = forward(&cfg, &p, &b, &[0.0; 3], None, None).unwrap_err();
    assert!(e.to_string().contains("x length"), "{e}");
    let e = forward(&cfg, &p, &b, &[0.0; 4], None, Some(&[0.0; 2])).unwrap_err();
    assert!(e.to_string().contains("cx"), "{e}");
    let mut big = cfg;
    big.hidden_size = 1 << 20;
    big.projection_size = 1 << 20;
    assert!(forward(&big, &p, &b, &[0.0; 4], None, None).is_err());
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config::with_cases(600))]

    /// Random and adversarial problems (sizes up to absurd, lengths past
    /// the padding, buffers of the wrong length): `forward` and
    /// `backward` return a value or a typed error, never panic, and
    /// stay fast (the bounds refuse the large ones first).
    #[test]
    fn unit_property_reference_is_total(
        cell in 0usize..4,
        sizes in [0usize..5, 0usize..5, 0usize..5, 0usize..3],
        huge in 0usize..6,
        bi in proptest::prelude::any::<bool>(),
        bias in 0usize..4,
        skip in proptest::prelude::any::<bool>(),
        lengths in proptest::collection::vec(0usize..5, 0..4),
        max_len in 0usize..5,
        wrong in 0usize..4,
    ) {
        let mut c = RnnConfig::new(RnnCellMode::ALL[cell], sizes[0], sizes[1]);
        c.projection_size = if sizes[2] == 0 { sizes[1] } else { sizes[2] };
        c.num_layers = sizes[3];
        c.direction = if bi { RnnDirection::Bidirectional } else { RnnDirection::Unidirectional };
        c.bias = RnnBiasMode::ALL[bias];
        c.input_mode = if skip { RnnInputMode::Skip } else { RnnInputMode::Linear };
        match huge {
            1 => c.hidden_size = 1 << 14,
            2 => c.input_size = usize::MAX,
            3 => c.num_layers = 1 << 19,
            _ => {}
        }
        let np = param_offsets(&c).map(|(_, n)| n).unwrap_or(3).min(1 << 16);
        let batch = Batch { lengths: &lengths, max_len };
        let out = c.projection_size.min(64) * c.direction.count();
        let nx = (lengths.len() * max_len * c.input_size.min(64)).saturating_add(usize::from(wrong == 1));
        let nh = c.num_layers.min(4) * c.direction.count() * lengths.len() * c.projection_size.min(64);
        let params = vec![0.1; np + usize::from(wrong == 2)];
        let x = vec![0.5; nx];
        let hx = vec![0.0; nh];
        let dy = vec![1.0; (lengths.len() * max_len * out).saturating_add(usize::from(wrong == 3))];
        let start = std::time::Instant::now();
        for r in [
            forward(&c, &params, &batch, &x, Some(&hx), None).map(|_| ()),
            backward(&c, &params, &batch, &x, Some(&hx), None, &dy, None, None).map(|_| ()),
        ] {
            if let Err(e) = r {
                proptest::prop_assert!(
                    matches!(e, Error::InvalidArgument { .. } | Error::Mismatch { .. }),
                    "untyped: {e}"
                );
            }
        }
        proptest::prop_assert!(start.elapsed() < std::time::Duration::from_secs(5));
    }
}
