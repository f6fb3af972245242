//! Unit tier (nothing needed): every public function of
//! `cudnn::reference` that `unit/fuzz_reference` does not reach (ragged and
//! paged attention, the softmax parts and dBias, FP8 attention and GEMM,
//! MXFP8 block scaling, CTC, RNN, the conv shape helpers) called with
//! adversarial dims: 0, small sizes, `MAX_ELEMENTS` and just past it,
//! 2^31, 2^40, `usize::MAX / 2`, `usize::MAX - 1` and `usize::MAX`, with
//! buffers of the right, a wrong or no length (issue 31 item 8: the
//! independent fuzz found an abort and overflow panics in these).
//!
//! Every call must return within [`LIMIT`] without panicking (caught with
//! `catch_unwind`), and an error must be typed (`InvalidArgument`,
//! `Mismatch`). The process runs with its address space capped at 2 GiB
//! (`RLIMIT_AS`, unix), so a buffer of a legal but huge size must be
//! reserved fallibly (an error) - an infallible `vec!` of it aborts the
//! process, which fails the test loudly (set `CUDNN_RS_FUZZ_TRACE=1` to
//! print each case before it runs and see which one).
//!
//! Deterministic (SplitMix64, seed from `PROPTEST_RNG_SEED` or fixed);
//! `CUDNN_RS_FUZZ_CASES` multiplies the case counts.

use crate::support;

use std::cell::Cell;
use std::fmt::Debug;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use cudnn::Error;
use cudnn::Fp8Format;
use cudnn::blas::{Epilogue, Layout};
use cudnn::dnn::{RnnBiasMode, RnnCellMode, RnnConfig, RnnDirection, RnnInputMode, RnnWeightSide};
use cudnn::reference::attention::{self, CausalMask, Partial, SdpaConfig, View};
use cudnn::reference::attention_fp8::{
    self as afp8, Fp8AttnBwdScales, Fp8AttnScales, Fp8AttnShape,
};
use cudnn::reference::conv::{ConvParams, Layout as ConvLayout};
use cudnn::reference::gemm_fp8::{self, Fp8Scales, OutputType};
use cudnn::reference::{block_scale, ctc, rnn};
use support::*;

/// The most one call may take (debug build).
const LIMIT: Duration = Duration::from_secs(3);

/// Adversarial sizes: just past the bound, and up to the top of `usize`.
/// (Sizes between a few thousand and `MAX_ELEMENTS` are legal and only
/// slow: a stride-0 view of 2^28 elements is within `MAX_WORK` and takes
/// minutes in a debug build; the bounds promise to refuse what lies beyond.
/// Buffers of exactly `MAX_ELEMENTS` are asked for where they are only
/// allocated, not looped over: the ragged cases.)
///
/// The legal-but-large window (`2^28..=2^30` elements: 2 to 8 GiB of
/// `f64`, within `MAX_ELEMENTS`) is its own size class, [`LARGE`], used
/// by [`legal_but_large`] for the functions whose buffers are sized by
/// their dims alone: under the 2 GiB cap every such buffer must be
/// refused by a fallible allocation (an error, not an abort).
const HUGE: [usize; 6] = [
    (1 << 30) + 1,
    1 << 31,
    1 << 40,
    usize::MAX / 2,
    usize::MAX - 1,
    usize::MAX,
];

/// The legal-but-large window: one buffer of this many `f64` is 2 to 8
/// GiB, past the 2 GiB cap, yet within `MAX_ELEMENTS` (2^30).
const LARGE: [usize; 5] = [1 << 28, (1 << 28) + 1, 3 << 27, 1 << 29, 1 << 30];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        crate::support::splitmix64(&mut self.0)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn coin(&mut self, p_percent: usize) -> bool {
        self.below(100) < p_percent
    }
    /// A dim: mostly 0..=3, sometimes 5, sometimes huge.
    fn dim(&mut self) -> usize {
        match self.below(10) {
            0..=5 => self.below(4),
            6 => 5,
            _ => HUGE[self.below(HUGE.len())],
        }
    }
    fn f(&mut self) -> f64 {
        match self.below(20) {
            0 => f64::NAN,
            1 => f64::INFINITY,
            2 => 0.0,
            _ => (self.next() >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0,
        }
    }
    fn i32(&mut self) -> i32 {
        match self.below(6) {
            0 => -1,
            1 => i32::MAX,
            2 => i32::MIN,
            _ => self.below(8) as i32,
        }
    }
    /// `n` values when `n` is small (the right length), else a short or
    /// empty buffer (a wrong one); sometimes off by one.
    fn buf(&mut self, n: Option<usize>) -> Vec<f64> {
        let len = match n {
            Some(n) if n <= 4096 && self.coin(80) => n,
            Some(n) if n <= 4096 => n + 1,
            _ => self.below(3),
        };
        (0..len).map(|_| self.f()).collect()
    }
    fn bytes(&mut self, n: Option<usize>) -> Vec<u8> {
        let len = match n {
            Some(n) if n <= 4096 && self.coin(85) => n,
            _ => self.below(3),
        };
        (0..len).map(|_| self.next() as u8).collect()
    }
    fn fp8(&mut self) -> Fp8Format {
        if self.coin(50) {
            Fp8Format::E4M3
        } else {
            Fp8Format::E5M2
        }
    }
    fn out(&mut self) -> OutputType {
        match self.below(5) {
            0 => OutputType::F32,
            1 => OutputType::F16,
            2 => OutputType::BF16,
            3 => OutputType::Fp8(Fp8Format::E4M3),
            _ => OutputType::Fp8(Fp8Format::E5M2),
        }
    }
}

fn product(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

#[derive(Default)]
struct Tally {
    calls: Cell<u64>,
    oks: Cell<u64>,
    failures: std::cell::RefCell<Vec<String>>,
}

impl Tally {
    /// Run one call: no panic, within [`LIMIT`], `Ok` or a typed error.
    fn call<T>(&self, what: &str, case: &dyn Debug, f: impl FnOnce() -> Result<T, Error>) {
        if std::env::var("CUDNN_RS_FUZZ_TRACE").is_ok_and(|v| v == "1") {
            eprintln!("case {what}: {case:?}");
        }
        self.calls.set(self.calls.get() + 1);
        let start = Instant::now();
        let r = catch_unwind(AssertUnwindSafe(f));
        let took = start.elapsed();
        let fail = |why: String| {
            let mut v = self.failures.borrow_mut();
            if v.len() < 20 {
                v.push(format!("{what}: {why}: {case:?}"));
            }
        };
        if took > LIMIT {
            fail(format!("took {took:?}"));
        }
        match r {
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                fail(format!("panicked: {msg}"));
            }
            Ok(Ok(_)) => self.oks.set(self.oks.get() + 1),
            Ok(Err(Error::InvalidArgument { arg, .. })) if !arg.is_empty() => {}
            Ok(Err(Error::Mismatch { what, .. })) if !what.is_empty() => {}
            Ok(Err(e)) => fail(format!("untyped error {e:?}")),
        }
    }

    /// As [`call`](Self::call), and the call must not succeed: under the
    /// address-space cap its buffer cannot exist.
    fn must_fail<T>(&self, what: &str, case: &dyn Debug, f: impl FnOnce() -> Result<T, Error>) {
        let ok = Cell::new(false);
        self.call(what, case, || {
            let r = f();
            ok.set(r.is_ok());
            r
        });
        if ok.get() {
            let mut v = self.failures.borrow_mut();
            v.push(format!("{what}: succeeded under the 2 GiB cap: {case:?}"));
        }
    }

    /// A function that returns no `Result`: it must only not panic.
    fn total<T>(&self, what: &str, case: &dyn Debug, f: impl FnOnce() -> T) {
        self.call(what, case, || Ok(f()));
    }

    fn finish(&self, family: &str, min_oks: u64) -> TestResult {
        let f = self.failures.borrow();
        eprintln!(
            "fuzz {family}: {} calls, {} Ok, {} failures",
            self.calls.get(),
            self.oks.get(),
            f.len()
        );
        ensure!(f.is_empty(), "{family}: {f:#?}");
        ensure!(
            self.oks.get() >= min_oks,
            "{family}: only {} calls returned Ok (the fuzz must reach the computations too)",
            self.oks.get()
        );
        Ok(())
    }
}

fn seed(family: u64) -> Rng {
    let s = crate::support::fuzz_seed(0x3105_d1a5);
    Rng(s ^ family.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

fn cases(n: usize) -> usize {
    n.saturating_mul(crate::support::fuzz_scale())
}

fn dims4(r: &mut Rng) -> [usize; 4] {
    [r.dim(), r.dim(), r.dim(), r.dim()]
}

/// Packed BHSD strides for `dims` (saturating: huge dims get huge strides),
/// or random ones.
fn strides4(r: &mut Rng, d: [usize; 4]) -> [usize; 4] {
    if r.coin(70) {
        let s3 = 1usize;
        let s2 = d[3].max(1);
        let s1 = s2.saturating_mul(d[2].max(1));
        let s0 = s1.saturating_mul(d[1].max(1));
        [s0, s1, s2, s3]
    } else {
        [r.dim(), r.dim(), r.dim(), r.dim()]
    }
}

fn view_data(r: &mut Rng, d: [usize; 4]) -> Vec<f64> {
    r.buf(product(&d))
}

fn ragged_and_paged() -> TestResult {
    let t = Tally::default();
    let mut r = seed(1);
    for _ in 0..cases(3000) {
        let dims = dims4(&mut r);
        let b = dims[0];
        let offsets: Vec<i32> = (0..if b <= 8 { b + 1 } else { r.below(3) })
            .map(|_| r.i32())
            .collect();
        let lens: Vec<usize> = (0..if b <= 8 { b } else { r.below(3) })
            .map(|_| if r.coin(50) { r.below(3) } else { r.dim() })
            .collect();
        let packed = {
            let n = r.below(64);
            r.buf(Some(n))
        };
        let case = (dims, &offsets, &lens, packed.len());
        t.call("ragged_unpack", &case, || {
            attention::ragged_unpack(&packed, &offsets, &lens, dims)
        });
        let bhsd = r.buf(product(&dims));
        let len = match r.below(4) {
            0 | 1 => r.below(64),
            2 => 1 << 30,
            _ => r.dim(),
        };
        t.call("ragged_pack", &(case, len), || {
            attention::ragged_pack(&bhsd, &offsets, &lens, dims, len)
        });
        // Paged: a container [blocks, h, block, d], a table of b * pages.
        let cd = dims4(&mut r);
        let data = view_data(&mut r, cd);
        let cs = strides4(&mut r, cd);
        let (pb, pages, s_kv) = (r.dim(), r.dim(), r.dim());
        let table: Vec<i32> = (0..product(&[pb, pages]).filter(|&n| n <= 64).unwrap_or(2))
            .map(|_| r.i32())
            .collect();
        let container = View::new(&data, cd, cs);
        t.call(
            "paged_gather",
            &(cd, cs, data.len(), &table, pb, pages, s_kv),
            || attention::paged_gather(&container, &table, pb, pages, s_kv),
        );
    }
    // The exact inputs of the independent fuzz (an abort before the fix):
    // legal sizes whose 8 GiB buffers the capped process cannot get.
    t.call("ragged_unpack", &"[1, 1, 1 << 27, 8]", || {
        attention::ragged_unpack(&[], &[0, 0], &[0], [1, 1, 1 << 27, 8])
    });
    t.call("ragged_pack", &"len 1 << 30", || {
        attention::ragged_pack(&[0.0], &[0, 0], &[0], [1, 1, 1, 1], 1 << 30)
    });
    t.finish("ragged / paged", 10)
}

fn softmax_parts_and_dbias() -> TestResult {
    let t = Tally::default();
    let mut r = seed(2);
    for _ in 0..cases(1500) {
        // Mostly coherent shapes (q [b, h, sq, d], k/v [b, h, skv, d]).
        let [b, h, sq, d] = dims4(&mut r);
        let skv = r.dim();
        let qd = [b, h, sq, d];
        let kd = if r.coin(80) {
            [b, h, skv, d]
        } else {
            dims4(&mut r)
        };
        let (qv, kv, vv) = (
            view_data(&mut r, qd),
            view_data(&mut r, kd),
            view_data(&mut r, kd),
        );
        let (qs, ks) = (strides4(&mut r, qd), strides4(&mut r, kd));
        let q = View::new(&qv, qd, qs);
        let k = View::new(&kv, kd, ks);
        let v = View::new(&vv, kd, ks);
        let mut cfg = SdpaConfig::new(if r.coin(90) { 0.5 } else { r.f() });
        if r.coin(30) {
            cfg.causal = CausalMask::TopLeft;
        }
        let sink = r.buf(product(&[h]));
        let with_sink = r.coin(50);
        let case = (qd, qs, qv.len(), kd, ks, kv.len());
        t.call("forward_parts", &case, || {
            attention::forward_parts(&q, &k, &v, &cfg, with_sink.then_some(&sink[..]))
        });
        let od = [b, h, sq, kd[3]];
        let (ov, dov) = (view_data(&mut r, od), view_data(&mut r, od));
        let os = strides4(&mut r, od);
        let o = View::new(&ov, od, os);
        let d_o = View::new(&dov, od, os);
        let stats = r.buf(product(&[b, h, sq]));
        t.call("backward_d_sink", &(case, od, os, stats.len()), || {
            attention::backward_d_sink(&o, &d_o, &stats, &sink)
        });
        t.call("dbias", &(case, od, os, stats.len()), || {
            attention::dbias(&q, &k, &v, &o, &d_o, &stats, &cfg)
        });
        let d_v = r.dim();
        let rows = product(&[b, h, sq]);
        let parts_o: Vec<Vec<f64>> = (0..r.below(3))
            .map(|_| r.buf(rows.and_then(|n| n.checked_mul(d_v))))
            .collect();
        let maxes: Vec<Vec<f64>> = parts_o.iter().map(|_| r.buf(rows)).collect();
        let sums: Vec<Vec<f64>> = parts_o.iter().map(|_| r.buf(rows)).collect();
        let parts: Vec<Partial<'_>> = parts_o
            .iter()
            .zip(&maxes)
            .zip(&sums)
            .map(|((o, max), sum_exp)| Partial { o, max, sum_exp })
            .collect();
        t.call("combine_partials", &(parts.len(), d_v, rows), || {
            attention::combine_partials(&parts, d_v)
        });
    }
    t.finish("softmax parts / dbias", 10)
}

fn fp8_attention() -> TestResult {
    let t = Tally::default();
    let mut r = seed(3);
    for _ in 0..cases(2000) {
        let shape = Fp8AttnShape {
            batch: r.dim(),
            heads: r.dim(),
            seq_q: r.dim(),
            seq_kv: r.dim(),
            head_dim: r.dim(),
        };
        let (fmt, grad, out) = (r.fp8(), r.fp8(), r.out());
        t.call("attention_fp8::tolerance", &shape, || {
            afp8::tolerance(shape, fmt, out)
        });
        t.call("attention_fp8::backward_tolerance", &shape, || {
            afp8::backward_tolerance(shape, fmt, grad)
        });
        let qn = product(&[shape.batch, shape.heads, shape.seq_q, shape.head_dim]);
        let kn = product(&[shape.batch, shape.heads, shape.seq_kv, shape.head_dim]);
        let (q, k, v) = (r.buf(qn), r.buf(kn), r.buf(kn));
        let causal = r.coin(50);
        let scale = if r.coin(90) { 0.25 } else { r.f() };
        t.call("attention_fp8::forward", &shape, || {
            afp8::forward(
                &q,
                &k,
                &v,
                shape,
                scale,
                causal,
                fmt,
                out,
                &Fp8AttnScales::default(),
            )
        });
        let (o, d_o) = (r.buf(qn), r.buf(qn));
        let stats = r.buf(product(&[shape.batch, shape.heads, shape.seq_q]));
        t.call("attention_fp8::backward", &shape, || {
            afp8::backward(
                &q,
                &k,
                &v,
                &o,
                &d_o,
                &stats,
                shape,
                scale,
                causal,
                fmt,
                grad,
                &Fp8AttnBwdScales::default(),
            )
        });
    }
    // The exact inputs of the independent fuzz.
    for (seq_q, seq_kv) in [(1, usize::MAX), (usize::MAX, 1), (usize::MAX, usize::MAX)] {
        let shape = Fp8AttnShape {
            batch: 1,
            heads: 1,
            seq_q,
            seq_kv,
            head_dim: 64,
        };
        t.call("attention_fp8::tolerance", &shape, || {
            afp8::tolerance(shape, Fp8Format::E4M3, OutputType::F32)
        });
        t.call("attention_fp8::backward_tolerance", &shape, || {
            afp8::backward_tolerance(shape, Fp8Format::E4M3, Fp8Format::E5M2)
        });
    }
    t.finish("fp8 attention", 10)
}

fn layout(r: &mut Rng) -> Layout {
    let (rows, cols) = (r.dim(), r.dim());
    let l = if r.coin(50) {
        Layout::row_major(rows, cols)
    } else {
        Layout::col_major(rows, cols)
    };
    let l = if r.coin(20) { l.t() } else { l };
    let l = if r.coin(20) { l.with_ld(r.dim()) } else { l };
    if r.coin(20) {
        l.batched(r.dim(), r.dim())
    } else {
        l
    }
}

fn fp8_gemm_and_block_scale() -> TestResult {
    let t = Tally::default();
    let mut r = seed(4);
    for _ in 0..cases(2000) {
        let (la, lb) = (layout(&mut r), layout(&mut r));
        let ld = layout(&mut r);
        let (a, b) = (r.bytes(la.required_len()), r.bytes(lb.required_len()));
        let c = r.buf(ld.required_len());
        let with_c = r.coin(30);
        let epi = Epilogue::ALL[r.below(Epilogue::ALL.len())];
        let bias = {
            let n = r.below(8);
            r.buf(Some(n))
        };
        let (fa, fb, out) = (r.fp8(), r.fp8(), r.out());
        let beta = if with_c { 0.5 } else { 0.0 };
        t.call("gemm_fp8", &(la, lb, ld, epi), || {
            gemm_fp8::gemm_fp8(
                1.0,
                (&a, fa, &la),
                (&b, fb, &lb),
                beta,
                with_c.then_some(&c[..]),
                &ld,
                out,
                &Fp8Scales::default(),
                epi,
                r_bias(&bias, epi),
            )
        });
        let k = r.dim();
        let fast = r.coin(50);
        t.total("gemm_fp8::tolerance", &k, || {
            gemm_fp8::tolerance(k, out, fast)
        });
        t.total("supports_epilogue", &epi, || {
            gemm_fp8::supports_epilogue(epi)
        });
        // Block scaling.
        let row = if r.coin(50) { 32 * r.below(4) } else { r.dim() };
        let x = {
            let n = r.below(4) * 64;
            r.buf(Some(n))
        };
        let fmt = r.fp8();
        t.call("block_scale::quantize", &(x.len(), row), || {
            block_scale::quantize(&x, row, fmt)
        });
        let values = {
            let n = r.below(4) * 64;
            r.bytes(Some(n))
        };
        let scales = {
            let n = r.below(9);
            r.bytes(Some(n))
        };
        t.call(
            "block_scale::dequantize",
            &(values.len(), scales.len(), row),
            || block_scale::dequantize(&values, &scales, row, fmt),
        );
        let amax = r.f() * 1e3;
        t.call("block_scale::scale_code", &amax, || {
            block_scale::scale_code(amax, fmt)
        });
        let code = r.next() as u8;
        t.total("block_scale::e8m0_value", &code, || {
            block_scale::e8m0_value(code)
        });
    }
    t.finish("fp8 gemm / block scale", 10)
}

fn r_bias(bias: &[f64], epi: Epilogue) -> Option<&[f64]> {
    (!matches!(epi, Epilogue::None | Epilogue::Relu | Epilogue::GeluTanh)).then_some(bias)
}

fn ctc_all() -> TestResult {
    let t = Tally::default();
    let ctc_checked = Cell::new(0u64);
    let mut r = seed(5);
    for _ in 0..cases(2000) {
        let (max_time, batch, alphabet) = (r.dim(), r.dim(), r.dim());
        let blank = if r.coin(80) { 0 } else { r.dim() };
        let label_lengths: Vec<usize> = (0..if batch <= 8 { batch } else { r.below(3) })
            .map(|_| if r.coin(80) { r.below(4) } else { r.dim() })
            .collect();
        let total: usize = label_lengths
            .iter()
            .fold(0usize, |a, &l| a.saturating_add(l));
        let labels: Vec<usize> = (0..if total <= 64 { total } else { r.below(4) })
            .map(|_| {
                if r.coin(90) {
                    r.below(alphabet.clamp(1, 8))
                } else {
                    r.dim()
                }
            })
            .collect();
        let input_lengths: Vec<usize> = (0..label_lengths.len())
            .map(|_| {
                if r.coin(80) {
                    r.below(max_time.clamp(1, 8) + 1)
                } else {
                    r.dim()
                }
            })
            .collect();
        let logits = r.buf(product(&[max_time, input_lengths.len(), alphabet]));
        let p = ctc::CtcProblem {
            logits: &logits,
            max_time,
            alphabet,
            blank,
            labels: &labels,
            label_lengths: &label_lengths,
            input_lengths: &input_lengths,
        };
        let plain = Cell::new(None);
        let zi = Cell::new(None);
        t.call("ctc_loss", &p, || {
            let r = ctc::ctc_loss(&p);
            plain.set(r.as_ref().ok().cloned());
            r
        });
        t.call("ctc_loss_zero_infinity", &p, || {
            let r = ctc::ctc_loss_zero_infinity(&p);
            zi.set(r.as_ref().ok().cloned());
            r
        });
        // The truth by definition: zero_infinity is the plain loss where
        // that is finite and 0 where it is +inf, with the same gradient;
        // the two accept the same inputs. With finite logits a loss is
        // -ln p for a probability p <= 1: at least 0 (up to rounding).
        match (plain.take(), zi.take()) {
            (Some(a), Some(b)) => {
                ctc_checked.set(ctc_checked.get() + 1);
                let finite_logits = logits.iter().all(|v| v.is_finite());
                for (i, (&la, &lb)) in a.losses.iter().zip(&b.losses).enumerate() {
                    let good = if la == f64::INFINITY {
                        lb == 0.0
                    } else {
                        la.to_bits() == lb.to_bits()
                    };
                    let sane = !finite_logits || la >= -1e-9;
                    if !good || !sane {
                        t.failures.borrow_mut().push(format!(
                            "ctc sample {i}: plain {la}, zero_infinity {lb}: {p:?}"
                        ));
                    }
                }
                let same_grad = a.grad.len() == b.grad.len()
                    && a.grad
                        .iter()
                        .zip(&b.grad)
                        .all(|(x, y)| x.to_bits() == y.to_bits());
                if !same_grad {
                    t.failures
                        .borrow_mut()
                        .push(format!("ctc gradients differ: {p:?}"));
                }
            }
            (None, None) => {}
            (a, b) => t.failures.borrow_mut().push(format!(
                "ctc_loss ok {} but zero_infinity ok {}: {p:?}",
                a.is_some(),
                b.is_some()
            )),
        }
        t.total("required_steps", &labels, || ctc::required_steps(&labels));
    }
    eprintln!(
        "fuzz ctc: {} results compared with zero_infinity",
        ctc_checked.get()
    );
    ensure!(ctc_checked.get() >= 10, "too few ctc values compared");
    t.finish("ctc", 10)
}

fn rnn_all() -> TestResult {
    let t = Tally::default();
    let mut r = seed(6);
    for _ in 0..cases(1500) {
        let cell = RnnCellMode::ALL[r.below(4)];
        let mut cfg = RnnConfig::new(cell, r.dim(), r.dim());
        if r.coin(30) {
            cfg.projection_size = r.dim();
        }
        cfg.num_layers = if r.coin(80) { 1 + r.below(2) } else { r.dim() };
        if r.coin(50) {
            cfg.direction = RnnDirection::Bidirectional;
        }
        cfg.bias = RnnBiasMode::ALL[r.below(4)];
        if r.coin(20) {
            cfg.input_mode = RnnInputMode::Skip;
        }
        t.call("param_offsets", &cfg, || rnn::param_offsets(&cfg));
        t.call("param_layout", &cfg, || rnn::param_layout(&cfg));
        let side = if r.coin(50) {
            RnnWeightSide::Input
        } else {
            RnnWeightSide::Recurrent
        };
        t.total("has_bias", &cfg, || rnn::has_bias(&cfg, side));
        let n_params = rnn::param_offsets(&cfg).ok().map(|(_, n)| n);
        let params = r.buf(n_params);
        let max_len = if r.coin(80) { r.below(4) } else { r.dim() };
        let nb = if r.coin(85) { r.below(4) } else { r.dim() };
        let lengths: Vec<usize> = (0..nb.min(8))
            .map(|_| {
                if r.coin(85) {
                    r.below(max_len.clamp(0, 4) + 1)
                } else {
                    r.dim()
                }
            })
            .collect();
        let batch = rnn::Batch {
            lengths: &lengths,
            max_len,
        };
        let dirs = if cfg.direction == RnnDirection::Bidirectional {
            2
        } else {
            1
        };
        let out = if cfg.projection_size > 0 && cell == RnnCellMode::Lstm {
            cfg.projection_size
        } else {
            cfg.hidden_size
        };
        let x = r.buf(product(&[lengths.len(), max_len, cfg.input_size]));
        let nh = product(&[cfg.num_layers, dirs, lengths.len(), out]);
        let hx = r.buf(nh);
        let with_hx = r.coin(50);
        t.call("rnn::forward", &(cfg, &lengths, max_len), || {
            rnn::forward(&cfg, &params, &batch, &x, with_hx.then_some(&hx[..]), None)
        });
        let dy = r.buf(product(&[lengths.len(), max_len, out, dirs]));
        t.call("rnn::backward", &(cfg, &lengths, max_len), || {
            rnn::backward(
                &cfg,
                &params,
                &batch,
                &x,
                with_hx.then_some(&hx[..]),
                None,
                &dy,
                None,
                None,
            )
        });
        let width = r.dim();
        let mut y = r.buf(product(&[lengths.len(), max_len, width]));
        let before = y.clone();
        let fill = r.f();
        let filled = Cell::new(false);
        t.call("fill_padding", &(&lengths, max_len, width, y.len()), || {
            let res = rnn::fill_padding(&mut y, &batch, width, fill);
            filled.set(res.is_ok());
            res
        });
        // By the definition: step t of sequence b is the fill past its
        // length and unchanged before it.
        if filled.get() {
            for (i, (&a, &b)) in y.iter().zip(&before).enumerate() {
                let (seq, t_) = (
                    i / (max_len * width).max(1),
                    (i / width.max(1)) % max_len.max(1),
                );
                let want = if t_ >= lengths[seq] { fill } else { b };
                if a.to_bits() != want.to_bits() {
                    t.failures.borrow_mut().push(format!(
                        "fill_padding element {i}: {a}, want {want}: {lengths:?} {max_len} {width}"
                    ));
                    break;
                }
            }
        }
    }
    t.finish("rnn", 10)
}

fn conv_shapes() -> TestResult {
    let t = Tally::default();
    let mut r = seed(7);
    for _ in 0..cases(3000) {
        let nd = r.below(4);
        let v = |r: &mut Rng| (0..nd).map(|_| r.dim()).collect::<Vec<_>>();
        let p = ConvParams::new(nd)
            .with_pad(&v(&mut r))
            .with_stride(&v(&mut r))
            .with_dilation(&v(&mut r))
            .with_groups(if r.coin(80) { 1 } else { r.dim() });
        let x: Vec<usize> = (0..nd + 2).map(|_| r.dim()).collect();
        let w: Vec<usize> = (0..nd + 2).map(|_| r.dim()).collect();
        t.call("ConvParams::output_shape", &(&p, &x, &w), || {
            p.output_shape(&x, &w)
        });
        let layout = if r.coin(50) {
            ConvLayout::ChannelsFirst
        } else {
            ConvLayout::ChannelsLast
        };
        t.call("conv::Layout::strides", &(&x, layout), || {
            layout.strides(&x)
        });
    }
    t.finish("conv shapes", 10)
}

/// The legal-but-large window ([`LARGE`]): the functions whose buffers
/// are sized by their dims alone (the inputs stay small: empty, stride 0
/// or refused later), with one dim in the window and the others 1 or 2.
/// Under the 2 GiB cap none of these calls can succeed: each must return
/// a typed error (a fallible allocation or a bound), never abort. Plus
/// the RNN cases of the review (issue 31), by hand.
fn legal_but_large() -> TestResult {
    if !CAPPED.load(std::sync::atomic::Ordering::Relaxed) {
        return Err("the address space is not capped here: the window cannot be provoked".into());
    }
    let t = Tally::default();
    let mut r = seed(8);
    for _ in 0..cases(200) {
        let big = LARGE[r.below(LARGE.len())];
        let small = 1 + r.below(2);
        // Ragged: one dim of the [b, h, s, d] output in the window.
        let mut dims = [1usize; 4];
        dims[1 + r.below(3)] = big;
        if r.coin(50) {
            dims[3 - r.below(2)] *= small;
        }
        t.must_fail("ragged_unpack", &dims, || {
            attention::ragged_unpack(&[], &[0, 0], &[0], dims)
        });
        t.must_fail("ragged_pack", &big, || {
            attention::ragged_pack(&[0.0], &[0, 0], &[0], [1, 1, 1, 1], big)
        });
        // Paged: a stride-0 container of `big` tokens in one page, s_kv
        // of them: the [1, 1, s_kv, 1] output is in the window.
        let data = [0.5];
        let container = View::new(&data, [1, 1, big, 1], [0, 0, 0, 0]);
        t.must_fail("paged_gather", &big, || {
            attention::paged_gather(&container, &[0], 1, 1, big)
        });
        // RNN: one sequence of `big` steps (x not given: the trace is
        // refused before x is read).
        let cell = RnnCellMode::ALL[r.below(4)];
        let cfg = RnnConfig {
            bias: RnnBiasMode::None,
            ..RnnConfig::new(cell, 1, 1)
        };
        let n = rnn::param_offsets(&cfg).map(|(_, n)| n).unwrap_or(0);
        let params = vec![0.5; n];
        let lengths = [big];
        let batch = rnn::Batch {
            lengths: &lengths,
            max_len: big,
        };
        t.must_fail("rnn::forward", &(cell, big), || {
            rnn::forward(&cfg, &params, &batch, &[], None, None)
        });
        t.must_fail("rnn::backward", &(cell, big), || {
            rnn::backward(&cfg, &params, &batch, &[], None, None, &[], None, None)
        });
    }
    // The review's input: ReLU, one unit, no bias, params [1, 1], one
    // sequence of 2^29 steps (x of 2^29 zeros cannot exist under the cap;
    // the trace is refused before x is read). It aborted before the fix.
    let cfg = RnnConfig {
        bias: RnnBiasMode::None,
        ..RnnConfig::new(RnnCellMode::RnnRelu, 1, 1)
    };
    let lengths = [1usize << 29];
    let batch = rnn::Batch {
        lengths: &lengths,
        max_len: 1 << 29,
    };
    t.must_fail("rnn::forward", &"review input", || {
        rnn::forward(&cfg, &[1.0, 1.0], &batch, &[], None, None)
    });
    // Within every count but past the cap: 2^26 steps with a real x (512
    // MiB of zero pages, never touched): the trace (7 x 2^26 values, 3.5
    // GiB) is counted legal and must be refused by its fallible
    // allocation.
    let n = 1usize << 26;
    let x = vec![0.0f64; n];
    let lengths = [n];
    let batch = rnn::Batch {
        lengths: &lengths,
        max_len: n,
    };
    t.must_fail("rnn::forward", &"2^26 steps, real x", || {
        rnn::forward(&cfg, &[1.0, 1.0], &batch, &x, None, None)
    });
    t.must_fail("rnn::backward", &"2^26 steps, real x", || {
        rnn::backward(&cfg, &[1.0, 1.0], &batch, &x, None, None, &x, None, None)
    });
    drop(x);
    t.finish("legal but large", 0)
}

static CAPPED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Cap the address space (unix) so a huge infallible allocation aborts
/// here, as it did in the independent fuzz, instead of succeeding lazily.
fn cap_address_space() {
    #[cfg(unix)]
    {
        let cap: libc::rlim_t = 2 << 30;
        let lim = libc::rlimit {
            rlim_cur: cap,
            rlim_max: cap,
        };
        // SAFETY: setrlimit reads the struct we pass and only lowers this
        // process's own limit.
        if unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) } != 0 {
            eprintln!("fuzz: could not cap the address space; huge allocations are not provoked");
        } else {
            CAPPED.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Set in the child process that runs these tests under the address-space
/// cap (a limit is process-wide and inherited: the other unit tests, and the
/// children they start, must not run under it).
pub const CAPPED_CHILD: &str = "CUDNN_RS_DIMS_CAPPED_CHILD";

/// One capped test: its name and body.
type Case = (&'static str, fn() -> TestResult);

const TESTS: &[Case] = &[
    ("ragged_and_paged", ragged_and_paged),
    ("softmax_parts_and_dbias", softmax_parts_and_dbias),
    ("fp8_attention", fp8_attention),
    ("fp8_gemm_and_block_scale", fp8_gemm_and_block_scale),
    ("ctc", ctc_all),
    ("rnn", rnn_all),
    ("conv_shapes", conv_shapes),
    ("legal_but_large", legal_but_large),
];

pub fn main() {
    if std::env::var_os(CAPPED_CHILD).is_some() {
        cap_address_space();
        run(TESTS
            .iter()
            .map(|(name, f)| unit(&format!("fuzz_reference_dims::{name}"), *f))
            .collect());
        return;
    }
    // Each test runs alone in a child process of this binary, under the cap.
    run(TESTS
        .iter()
        .map(|(name, _)| {
            let name = format!("fuzz_reference_dims::{name}");
            let full = support::full_name(format!("unit::{name}"));
            unit(&name, move || in_capped_child(&full))
        })
        .collect());
}

fn in_capped_child(full: &str) -> TestResult {
    let out = std::process::Command::new(std::env::current_exe()?)
        .args(["--exact", full, "--test-threads", "1", "--nocapture"])
        .env(CAPPED_CHILD, "1")
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprint!("{stderr}");
    ensure!(
        out.status.success() && stdout.contains("1 passed"),
        "the capped child for {full} failed ({}):\n{stdout}",
        out.status
    );
    Ok(())
}
