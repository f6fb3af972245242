//! Connectionist temporal classification (CTC) loss in `f64`: the
//! forward-backward algorithm in log space, the loss and its gradient with
//! respect to the unnormalized activations (logits). The oracle for
//! [`crate::dnn::CtcPlan`].
//!
//! # Layout and definitions
//! - `logits`: `[max_time, batch, alphabet]`, time-major, packed; symbol
//!   `blank` is the blank (cuDNN's is 0). Each step's probabilities are the
//!   softmax of its logits.
//! - `labels`: every sequence's labels concatenated; `label_lengths[b]`
//!   of them belong to sequence `b`; `input_lengths[b]` steps of it are
//!   valid (later steps are padding and get a zero gradient).
//! - the loss of a sequence is `-ln p(labels | logits)`, summed over every
//!   alignment of the extended label sequence `blank, l1, blank, l2, …,
//!   blank` (Graves et al., 2006); the gradient with respect to the logits
//!   is `y(t, k) - (1 / p) Σ_{s: l'_s = k} α_t(s) β_t(s) / y(t, k)`, computed
//!   in log space.
//!
//! A labelling that needs more steps than the input has (its length plus
//! one per pair of equal neighbours) has probability 0: its loss is
//! `+inf` and its gradient is 0 (what [`required_steps`] predicts).
//! [`ctc_loss_zero_infinity`] reports such a sample's loss as 0 instead
//! (PyTorch's `zero_infinity`): the oracle for
//! [`CtcPlan`](crate::dnn::CtcPlan) on cuDNN 9, which accepts these samples
//! with loss 0 and gradient 0. An input length of 0 with no labels has
//! probability 1 (only the empty alignment): loss 0, gradient 0, in both;
//! with labels it is infeasible (`+inf`, 0 under `zero_infinity`).
//! [`CtcPlan`](crate::dnn::CtcPlan) refuses an input length of 0 on every
//! cuDNN version (cuDNN documents nothing about zero steps): these values
//! are what a caller that drops such a sample stands in for.
//!
//! # Bounds
//! As every reference: checked sizes, buffers of at most
//! [`MAX_ELEMENTS`](super::MAX_ELEMENTS), work (valid steps × extended
//! label length, plus the softmax) at most [`MAX_WORK`](super::MAX_WORK).

use super::bounds;
use crate::error::{Error, Result};

/// Steps a labelling needs: its length plus one for every pair of equal
/// neighbours (a blank must separate them).
pub fn required_steps(labels: &[usize]) -> usize {
    labels.len() + labels.windows(2).filter(|w| w[0] == w[1]).count()
}

/// A CTC problem (see the [module docs](self)).
#[derive(Debug, Clone, Copy)]
pub struct CtcProblem<'a> {
    /// `[max_time, batch, alphabet]` logits.
    pub logits: &'a [f64],
    /// Steps per sequence slot.
    pub max_time: usize,
    /// Symbols, the blank included.
    pub alphabet: usize,
    /// The blank symbol.
    pub blank: usize,
    /// Concatenated labels.
    pub labels: &'a [usize],
    /// Labels per sequence.
    pub label_lengths: &'a [usize],
    /// Valid steps per sequence.
    pub input_lengths: &'a [usize],
}

/// Losses (one per sequence) and the gradient `[max_time, batch, alphabet]`.
#[derive(Debug, Clone, PartialEq)]
pub struct CtcResult {
    /// `-ln p` per sequence (`+inf` when infeasible).
    pub losses: Vec<f64>,
    /// d(sum of losses) / d(logits).
    pub grad: Vec<f64>,
}

fn log_add(a: f64, b: f64) -> f64 {
    if a == f64::NEG_INFINITY {
        return b;
    }
    if b == f64::NEG_INFINITY {
        return a;
    }
    let m = a.max(b);
    m + ((a - m).exp() + (b - m).exp()).ln()
}

/// The loss and gradient.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the argument: an alphabet of fewer
/// than 2 symbols, a blank outside it, a label that is the blank or outside
/// the alphabet, lengths that do not add up or exceed `max_time`, a
/// `logits` of the wrong length ([`Error::Mismatch`]); the bounds.
pub fn ctc_loss(p: &CtcProblem<'_>) -> Result<CtcResult> {
    let batch = p.input_lengths.len();
    if p.alphabet < 2 {
        return Err(Error::invalid(
            "alphabet",
            "must be >= 2 (the blank and a label)",
            p.alphabet,
        ));
    }
    if p.blank >= p.alphabet {
        return Err(Error::invalid(
            "blank",
            format!("must be < alphabet ({})", p.alphabet),
            p.blank,
        ));
    }
    if p.label_lengths.len() != batch {
        return Err(Error::mismatch(
            "label_lengths length (batch)",
            batch,
            p.label_lengths.len(),
        ));
    }
    let n = bounds::elements(
        "logits",
        &[p.max_time, batch, p.alphabet],
        "[max_time, batch, alphabet]",
    )?;
    if p.logits.len() != n {
        return Err(Error::mismatch("logits length", n, p.logits.len()));
    }
    let total = p
        .label_lengths
        .iter()
        .try_fold(0usize, |a, &l| a.checked_add(l));
    if total != Some(p.labels.len()) {
        return Err(Error::invalid(
            "label_lengths",
            format!("must add up to labels.len() ({})", p.labels.len()),
            format!("{:?}", p.label_lengths),
        ));
    }
    for (i, &l) in p.labels.iter().enumerate() {
        if l >= p.alphabet || l == p.blank {
            return Err(Error::invalid(
                format!("labels[{i}]"),
                format!(
                    "must be in 0..{} and not the blank ({})",
                    p.alphabet, p.blank
                ),
                l,
            ));
        }
    }
    for (b, &t) in p.input_lengths.iter().enumerate() {
        if t > p.max_time {
            return Err(Error::invalid(
                format!("input_lengths[{b}]"),
                format!("must be at most max_time ({})", p.max_time),
                t,
            ));
        }
    }
    let ext_max = p
        .label_lengths
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .saturating_mul(2)
        .saturating_add(1);
    bounds::work(
        "logits",
        "steps x (alphabet + extended labels)",
        &[p.max_time, batch, p.alphabet.saturating_add(ext_max)],
    )?;
    // The forward and backward variables of one sequence are
    // input_lengths[b] x (2 label_lengths[b] + 1) values each: bounded
    // (and allocated fallibly below), as every buffer of a reference.
    for (b, (&t, &l)) in p.input_lengths.iter().zip(p.label_lengths).enumerate() {
        bounds::elements(
            &format!("input_lengths[{b}] x (2 label_lengths[{b}] + 1)"),
            &[t, l.saturating_mul(2).saturating_add(1)],
            format!("{t} x {}", l.saturating_mul(2).saturating_add(1)),
        )?;
    }
    let a = p.alphabet;
    // Log-softmax of every step.
    let mut logy = bounds::zeros("log_softmax", n)?;
    for (row, out) in p.logits.chunks_exact(a).zip(logy.chunks_exact_mut(a)) {
        let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let lse = m + row.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
        for (o, v) in out.iter_mut().zip(row) {
            *o = v - lse;
        }
    }
    let mut losses = bounds::zeros("losses", batch)?;
    let mut grad = bounds::zeros("grad", n)?;
    let mut start = 0usize;
    #[allow(clippy::needless_range_loop)] // `b` indexes four arrays and the layout
    for b in 0..batch {
        let ll = p.label_lengths[b];
        let lab = &p.labels[start..start + ll];
        start += ll;
        let tb = p.input_lengths[b];
        let idx = |t: usize, k: usize| (t * batch + b) * a + k;
        if required_steps(lab) > tb {
            losses[b] = f64::INFINITY;
            continue;
        }
        if tb == 0 {
            // Only the empty labelling fits zero steps: probability 1.
            continue;
        }
        let s_len = 2 * ll + 1;
        let ext = |s: usize| {
            if s.is_multiple_of(2) {
                p.blank
            } else {
                lab[s / 2]
            }
        };
        let ninf = f64::NEG_INFINITY;
        // Row-major [tb][s_len], within MAX_ELEMENTS (checked above).
        let at = |t: usize, s: usize| t * s_len + s;
        let mut alpha = bounds::zeros("alpha", tb * s_len)?;
        alpha.fill(ninf);
        let mut beta = bounds::zeros("beta", tb * s_len)?;
        beta.fill(ninf);
        alpha[at(0, 0)] = logy[idx(0, p.blank)];
        if s_len > 1 {
            alpha[at(0, 1)] = logy[idx(0, ext(1))];
        }
        for t in 1..tb {
            for s in 0..s_len {
                let mut v = alpha[at(t - 1, s)];
                if s >= 1 {
                    v = log_add(v, alpha[at(t - 1, s - 1)]);
                }
                if s >= 2 && ext(s) != p.blank && ext(s) != ext(s - 2) {
                    v = log_add(v, alpha[at(t - 1, s - 2)]);
                }
                alpha[at(t, s)] = v + logy[idx(t, ext(s))];
            }
        }
        beta[at(tb - 1, s_len - 1)] = logy[idx(tb - 1, p.blank)];
        if s_len > 1 {
            beta[at(tb - 1, s_len - 2)] = logy[idx(tb - 1, ext(s_len - 2))];
        }
        for t in (0..tb - 1).rev() {
            for s in 0..s_len {
                let mut v = beta[at(t + 1, s)];
                if s + 1 < s_len {
                    v = log_add(v, beta[at(t + 1, s + 1)]);
                }
                if s + 2 < s_len && ext(s) != p.blank && ext(s) != ext(s + 2) {
                    v = log_add(v, beta[at(t + 1, s + 2)]);
                }
                beta[at(t, s)] = v + logy[idx(t, ext(s))];
            }
        }
        let mut logp = alpha[at(tb - 1, s_len - 1)];
        if s_len > 1 {
            logp = log_add(logp, alpha[at(tb - 1, s_len - 2)]);
        }
        losses[b] = -logp;
        for t in 0..tb {
            // log Σ_{s: ext(s) = k} α β, per symbol.
            let mut acc = vec![ninf; a];
            for s in 0..s_len {
                acc[ext(s)] = log_add(acc[ext(s)], alpha[at(t, s)] + beta[at(t, s)]);
            }
            for k in 0..a {
                let ly = logy[idx(t, k)];
                grad[idx(t, k)] = ly.exp() - (acc[k] - logp - ly).exp();
            }
        }
    }
    Ok(CtcResult { losses, grad })
}

/// [`ctc_loss`] with PyTorch's `zero_infinity`: a sample whose loss is
/// `+inf` (no valid alignment: its labels need more steps than its input
/// length, or it has labels and an input length of 0) gets loss 0; its
/// gradient is 0 in both (every alignment term is empty). What
/// [`CtcPlan`](crate::dnn::CtcPlan) computes on cuDNN 9.
///
/// # Errors
/// As [`ctc_loss`].
pub fn ctc_loss_zero_infinity(p: &CtcProblem<'_>) -> Result<CtcResult> {
    let mut r = ctc_loss(p)?;
    for l in &mut r.losses {
        if *l == f64::INFINITY {
            *l = 0.0;
        }
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * (1.0 + a.abs().max(b.abs()))
    }

    #[test]
    fn unit_by_hand_uniform_two_steps() {
        // Alphabet {blank, a}, uniform probabilities 1/2, two steps, label
        // "a": the alignments "a-", "-a", "aa" each have probability 1/4.
        let logits = [0.0; 4];
        let r = ctc_loss(&CtcProblem {
            logits: &logits,
            max_time: 2,
            alphabet: 2,
            blank: 0,
            labels: &[1],
            label_lengths: &[1],
            input_lengths: &[2],
        })
        .unwrap();
        assert!(close(r.losses[0], -(0.75f64).ln(), 1e-15), "{:?}", r.losses);
        // d/du(t, k) = y - (paths through k at t)/p: at t = 0 the blank is
        // on "-a" only: 1/2 - (1/4)/(3/4) = 1/6; "a" on "a-" and "aa":
        // 1/2 - (2/4)/(3/4) = -1/6.
        assert!(close(r.grad[0], 1.0 / 6.0, 1e-14), "{:?}", r.grad);
        assert!(close(r.grad[1], -1.0 / 6.0, 1e-14), "{:?}", r.grad);
    }

    #[test]
    fn unit_repeats_need_a_blank_between() {
        assert_eq!(required_steps(&[1, 1, 2, 2, 2]), 8);
        assert_eq!(required_steps(&[]), 0);
        // "aa" in 3 steps: only "a-a": probability (1/2)^3.
        let r = ctc_loss(&CtcProblem {
            logits: &[0.0; 6],
            max_time: 3,
            alphabet: 2,
            blank: 0,
            labels: &[1, 1],
            label_lengths: &[2],
            input_lengths: &[3],
        })
        .unwrap();
        assert!(close(r.losses[0], 3.0 * 2f64.ln(), 1e-14));
        // In 2 steps it is impossible.
        let r = ctc_loss(&CtcProblem {
            logits: &[0.0; 6],
            max_time: 3,
            alphabet: 2,
            blank: 0,
            labels: &[1, 1],
            label_lengths: &[2],
            input_lengths: &[2],
        })
        .unwrap();
        assert_eq!(r.losses[0], f64::INFINITY);
        assert!(r.grad.iter().all(|&g| g == 0.0));
    }

    #[test]
    fn unit_alpha_beta_are_bounded_and_fallible() {
        // 2^20 steps and 1024 labels: within MAX_WORK (2^20 x 2051 steps)
        // but alpha and beta would be 2^20 x 2049 values each (17 GB,
        // allocated infallibly before): now refused at once, naming the
        // sample.
        let t = 1usize << 20;
        let logits = vec![0.0; t * 2];
        let labels = vec![1usize; 1024];
        let start = std::time::Instant::now();
        let e = ctc_loss(&CtcProblem {
            logits: &logits,
            max_time: t,
            alphabet: 2,
            blank: 0,
            labels: &labels,
            label_lengths: &[1024],
            input_lengths: &[t],
        })
        .unwrap_err();
        assert!(start.elapsed() < std::time::Duration::from_secs(1));
        let text = e.to_string();
        assert!(
            text.contains("input_lengths[0] x (2 label_lengths[0] + 1)")
                && text.contains("MAX_ELEMENTS"),
            "{text}"
        );
    }

    #[test]
    fn unit_zero_infinity_by_hand() {
        // Three samples, uniform logits over {blank, a}, max_time 3:
        // "aa" in 3 steps (probability 1/8, loss 3 ln 2), "aa" in 2 steps
        // (infeasible: loss 0, gradient 0 with zero_infinity), no labels
        // in 0 steps (probability 1: loss 0, gradient 0).
        let p = CtcProblem {
            logits: &[0.0; 18],
            max_time: 3,
            alphabet: 2,
            blank: 0,
            labels: &[1, 1, 1, 1],
            label_lengths: &[2, 2, 0],
            input_lengths: &[3, 2, 0],
        };
        let plain = ctc_loss(&p).unwrap();
        assert_eq!(plain.losses[1], f64::INFINITY);
        assert_eq!(plain.losses[2], 0.0);
        let r = ctc_loss_zero_infinity(&p).unwrap();
        assert!(close(r.losses[0], 3.0 * 2f64.ln(), 1e-14), "{:?}", r.losses);
        assert_eq!((r.losses[1], r.losses[2]), (0.0, 0.0));
        // Gradient [t][b][k]: samples 1 and 2 are zero everywhere; sample
        // 0 equals the plain one.
        for t in 0..3 {
            for b in 0..3 {
                for k in 0..2 {
                    let i = (t * 3 + b) * 2 + k;
                    if b == 0 {
                        assert_eq!(r.grad[i], plain.grad[i]);
                    } else {
                        assert_eq!(r.grad[i], 0.0, "t {t} b {b} k {k}");
                    }
                }
            }
        }
        // "a-a" is the only path: at t = 0 the blank gets y = 1/2, "a"
        // 1/2 - 1 = -1/2.
        assert!(close(r.grad[0], 0.5, 1e-14) && close(r.grad[1], -0.5, 1e-14));
    }

    #[test]
    fn unit_gradient_matches_finite_differences() {
        let mut seed = 0x000c_7c26_u64;
        let mut rnd = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0
        };
        let (t, batch, a) = (6, 3, 4);
        let logits: Vec<f64> = (0..t * batch * a).map(|_| rnd()).collect();
        let labels = [1, 2, 2, 3, 1, 3];
        let label_lengths = [3, 0, 3];
        let input_lengths = [6, 2, 5];
        fn mk<'a>(
            l: &'a [f64],
            labels: &'a [usize],
            label_lengths: &'a [usize],
            input_lengths: &'a [usize],
        ) -> CtcProblem<'a> {
            CtcProblem {
                logits: l,
                max_time: 6,
                alphabet: 4,
                blank: 0,
                labels,
                label_lengths,
                input_lengths,
            }
        }
        let r = ctc_loss(&mk(&logits, &labels, &label_lengths, &input_lengths)).unwrap();
        assert!(
            r.losses.iter().all(|l| l.is_finite() && *l > 0.0),
            "{:?}",
            r.losses
        );
        let eps = 1e-6;
        for i in 0..logits.len() {
            let mut up = logits.clone();
            up[i] += eps;
            let mut dn = logits.clone();
            dn[i] -= eps;
            let f = |l: &[f64]| {
                ctc_loss(&mk(l, &labels, &label_lengths, &input_lengths))
                    .unwrap()
                    .losses
                    .iter()
                    .sum::<f64>()
            };
            let num = (f(&up) - f(&dn)) / (2.0 * eps);
            assert!(
                close(r.grad[i], num, 1e-6),
                "grad[{i}]: {} vs {num}",
                r.grad[i]
            );
        }
        // Padding steps (t >= input length) get no gradient: sequence 1 from t = 2.
        for step in 2..t {
            for k in 0..a {
                assert_eq!(r.grad[(step * batch + 1) * a + k], 0.0);
            }
        }
    }

    #[test]
    fn unit_refusals_name_the_argument() {
        let base = CtcProblem {
            logits: &[0.0; 6],
            max_time: 3,
            alphabet: 2,
            blank: 0,
            labels: &[1],
            label_lengths: &[1],
            input_lengths: &[3],
        };
        let e = ctc_loss(&CtcProblem {
            labels: &[0],
            ..base
        })
        .unwrap_err();
        assert!(e.to_string().contains("labels[0]"), "{e}");
        let e = ctc_loss(&CtcProblem {
            input_lengths: &[4],
            ..base
        })
        .unwrap_err();
        assert!(e.to_string().contains("input_lengths[0]"), "{e}");
        let e = ctc_loss(&CtcProblem {
            label_lengths: &[2],
            ..base
        })
        .unwrap_err();
        assert!(e.to_string().contains("label_lengths"), "{e}");
        let e = ctc_loss(&CtcProblem { blank: 2, ..base }).unwrap_err();
        assert!(e.to_string().contains("blank"), "{e}");
        let e = ctc_loss(&CtcProblem {
            max_time: usize::MAX,
            ..base
        })
        .unwrap_err();
        assert!(e.to_string().contains("logits"), "{e}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(3000))]

        /// Random and adversarial problems: a value or a typed error, never
        /// a panic; a finite loss exactly when the labels fit their input.
        #[test]
        fn unit_property_ctc_reference_is_total(
            max_time in proptest::prop_oneof![0usize..6, proptest::strategy::Just(usize::MAX)],
            alphabet in 0usize..5,
            blank in 0usize..5,
            labels in proptest::collection::vec(0usize..6, 0..6),
            label_lengths in proptest::collection::vec(0usize..4, 0..4),
            input_lengths in proptest::collection::vec(0usize..7, 0..4),
            extra in 0usize..2,
        ) {
            let n = max_time.saturating_mul(input_lengths.len()).saturating_mul(alphabet).min(4096);
            let logits = vec![0.25; n + extra];
            let r = ctc_loss(&CtcProblem {
                logits: &logits,
                max_time,
                alphabet,
                blank,
                labels: &labels,
                label_lengths: &label_lengths,
                input_lengths: &input_lengths,
            });
            match r {
                Ok(r) => {
                    let mut start = 0;
                    for (b, &ll) in label_lengths.iter().enumerate() {
                        let need = required_steps(&labels[start..start + ll]);
                        start += ll;
                        proptest::prop_assert_eq!(r.losses[b].is_finite(), need <= input_lengths[b]);
                    }
                }
                Err(e) => proptest::prop_assert!(
                    matches!(e, Error::InvalidArgument { .. } | Error::Mismatch { .. }),
                    "untyped: {e}"
                ),
            }
        }
    }
}
