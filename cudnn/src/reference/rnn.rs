//! Recurrent networks in `f64`: RNN (ReLU, tanh), LSTM (with projection)
//! and GRU cells, stacked, uni- or bidirectional, on batches of
//! variable-length sequences, forward and backward (data and weights).
//! The oracles for the cuDNN RNN plans ([`crate::dnn::RnnPlan`]).
//!
//! # Layouts
//! - `x`: `[batch, max_len, input_size]`, packed, batch-major; steps at or
//!   past a sequence's length are padding (ignored).
//! - `y`: `[batch, max_len, projection_size * directions]`, the forward
//!   direction's output first; padding is written as 0.
//! - `hx`, `hy`: `[layers * directions, batch, projection_size]`; `cx`,
//!   `cy` (LSTM): `[layers * directions, batch, hidden_size]`, the
//!   pseudo-layer `layer * directions + direction` slowest. `None` inputs
//!   are zeros.
//! - parameters: the matrices and biases of
//!   [`RnnConfig::weight_shapes`] in that order, each matrix row-major
//!   `rows x cols` followed by its bias ([`param_offsets`]).
//!
//! # Cells
//! With `W_g` the input matrices, `R_g` the recurrent ones, `bW_g`, `bR_g`
//! their biases (0 where the bias mode has none), `x` the step's input and
//! `h` the previous recurrent state:
//! - RNN: `h' = act(W x + bW + R h + bR)`, `act` ReLU or tanh;
//! - LSTM: `a_g = W_g x + bW_g + R_g h + bR_g`; `i = σ(a_0)`, `f = σ(a_1)`,
//!   `g = tanh(a_2)`, `o = σ(a_3)`; `c' = f c + i g`; `k = o tanh(c')`; the
//!   output and next recurrent state is `P k` with a projection, else `k`;
//! - GRU: `r = σ(W_0 x + bW_0 + R_0 h + bR_0)`, `z = σ(W_1 x + … )`,
//!   `n = tanh(W_2 x + bW_2 + r ⊙ (R_2 h + bR_2))`, `h' = (1 - z) n + z h`.
//!
//! Under [`RnnInputMode::Skip`] the first layer has no input matrices: each
//! gate's `W_g x` is `x` itself (`input_size == hidden_size`).
//!
//! A backward direction reads each sequence from its last valid step down
//! to step 0; a sequence's final state (`hy`, `cy`) is the state after its
//! last valid step in that direction (`hx`/`cx` for a length of 0).
//!
//! # Bounds
//! As every reference: checked sizes, at most
//! [`MAX_ELEMENTS`](super::MAX_ELEMENTS) per buffer and
//! [`MAX_WORK`](super::MAX_WORK) multiply-adds per call (counted as valid
//! steps × parameters), refused with [`Error::InvalidArgument`]. The
//! trace the backward pass needs (every layer's input at every valid step,
//! and one record of `2 p + (gates + 4) h` values per layer, direction
//! and valid step) lives in flat buffers that are counted against
//! `MAX_ELEMENTS` up front (an error naming `lengths`) and reserved
//! fallibly: a long sequence is an error, never an abort.

use super::bounds;
use crate::dnn::{RnnCellMode, RnnConfig, RnnInputMode, RnnWeightShape, RnnWeightSide};
use crate::error::{Error, Result};

/// Offsets of each matrix and bias of [`RnnConfig::weight_shapes`] in the
/// reference's packed parameter vector, and its length.
///
/// # Errors
/// The configuration's check; an overflow.
pub fn param_offsets(cfg: &RnnConfig) -> Result<(Vec<(usize, usize)>, usize)> {
    let shapes = cfg.weight_shapes()?;
    let mut offs = Vec::with_capacity(shapes.len());
    let mut n = 0usize;
    for s in &shapes {
        let m = n;
        let b = s
            .rows
            .checked_mul(s.cols)
            .and_then(|k| k.checked_add(n))
            .ok_or_else(|| Error::invalid("parameters", "count overflows", "sizes"))?;
        n = b
            .checked_add(s.bias_len)
            .ok_or_else(|| Error::invalid("parameters", "count overflows", "sizes"))?;
        offs.push((m, b));
    }
    bounds::extent("parameters", n)?;
    Ok((offs, n))
}

/// A batch for the reference: the lengths and the padded length.
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    /// Each sequence's length.
    pub lengths: &'a [usize],
    /// The padded length (every length is at most this).
    pub max_len: usize,
}

/// What [`forward`] returns.
#[derive(Debug, Clone, PartialEq)]
pub struct RnnOutput {
    /// `[batch, max_len, projection_size * directions]`.
    pub y: Vec<f64>,
    /// `[layers * directions, batch, projection_size]`.
    pub hy: Vec<f64>,
    /// `[layers * directions, batch, hidden_size]` (LSTM), else empty.
    pub cy: Vec<f64>,
}

/// What [`backward`] returns.
#[derive(Debug, Clone, PartialEq)]
pub struct RnnGrads {
    /// Gradient of `x`.
    pub dx: Vec<f64>,
    /// Gradient of `hx`.
    pub dhx: Vec<f64>,
    /// Gradient of `cx` (LSTM), else empty.
    pub dcx: Vec<f64>,
    /// Gradient of the parameters (packed as the parameters).
    pub dparams: Vec<f64>,
}

/// Sizes, checked once.
struct Dims {
    cell: RnnCellMode,
    gates: usize,
    h: usize,
    p: usize,
    dirs: usize,
    layers: usize,
    input: usize,
    batch: usize,
    max_len: usize,
    skip: bool,
    proj: bool,
    shapes: Vec<RnnWeightShape>,
    offs: Vec<(usize, usize)>,
    nparams: usize,
    /// Valid steps of the whole batch (the sum of the lengths).
    steps: usize,
    /// Where each sequence's first step sits among them.
    starts: Vec<usize>,
}

impl Dims {
    fn new(cfg: &RnnConfig, batch: &Batch<'_>) -> Result<Self> {
        let (offs, nparams) = param_offsets(cfg)?;
        let shapes = cfg.weight_shapes()?;
        if cfg.input_mode == RnnInputMode::Skip && cfg.input_size != cfg.hidden_size {
            return Err(Error::invalid(
                "input_size",
                "must equal hidden_size with RnnInputMode::Skip",
                cfg.input_size,
            ));
        }
        for (i, &l) in batch.lengths.iter().enumerate() {
            if l > batch.max_len {
                return Err(Error::invalid(
                    format!("lengths[{i}]"),
                    format!("must be at most max_len ({})", batch.max_len),
                    l,
                ));
            }
        }
        let mut d = Dims {
            cell: cfg.cell,
            gates: cfg.cell.gates(),
            h: cfg.hidden_size,
            p: cfg.projection_size,
            dirs: cfg.direction.count(),
            layers: cfg.num_layers,
            input: cfg.input_size,
            batch: batch.lengths.len(),
            max_len: batch.max_len,
            skip: cfg.input_mode == RnnInputMode::Skip,
            proj: cfg.has_projection(),
            shapes,
            offs,
            nparams,
            steps: 0,
            starts: Vec::new(),
        };
        let steps: usize = batch
            .lengths
            .iter()
            .try_fold(0usize, |a, &l| a.checked_add(l))
            .unwrap_or(usize::MAX);
        bounds::work(
            "lengths",
            "valid steps x parameters x layer passes",
            &[steps.max(1), nparams.max(1), 3],
        )?;
        bounds::elements(
            "x",
            &[d.batch, d.max_len, d.input],
            "[batch, max_len, input_size]",
        )?;
        bounds::elements(
            "y",
            &[d.batch, d.max_len, d.p, d.dirs],
            "[batch, max_len, out]",
        )?;
        bounds::elements(
            "hy",
            &[d.layers, d.dirs, d.batch, d.h],
            "[layers*dirs, batch, hidden]",
        )?;
        // The trace the backward pass reads: every layer's input and
        // output at every valid step, and one record per layer, direction
        // and valid step, all in flat buffers counted here.
        let widest = d.input.max(d.out());
        let records = bounds::elements(
            "lengths",
            &[d.layers, d.dirs, steps, d.width()],
            "the forward trace (layers x directions x valid steps x values per step)",
        )?;
        let values = bounds::elements(
            "lengths",
            &[d.layers + 1, steps, widest],
            "the layer inputs (layers + 1 x valid steps x widest input)",
        )?;
        records
            .checked_add(values)
            .and_then(|n| bounds::extent("lengths", n).ok())
            .ok_or_else(|| {
                Error::invalid(
                    "lengths",
                    format!(
                        "the forward trace and layer inputs together must be at most {} values (reference::MAX_ELEMENTS)",
                        super::MAX_ELEMENTS
                    ),
                    format!("{records} + {values}"),
                )
            })?;
        let mut starts = bounds::buffer("lengths", d.batch)?;
        let mut at = 0usize;
        for &l in batch.lengths {
            starts.push(at);
            at += l; // at most `steps`, which did not overflow
        }
        d.steps = steps;
        d.starts = starts;
        Ok(d)
    }

    /// Values in one step's record: `h_prev` (p), `c_prev` (h), the gate
    /// activations (gates x h), GRU's `u_n` (h), LSTM's `c'` and `k`
    /// (h each) and the output (p).
    fn width(&self) -> usize {
        2 * self.p + (self.gates + 4) * self.h
    }
    fn at_c_prev(&self) -> usize {
        self.p
    }
    fn at_act(&self, g: usize) -> usize {
        self.p + self.h + g * self.h
    }
    fn at_u_n(&self) -> usize {
        self.p + (self.gates + 1) * self.h
    }
    fn at_c(&self) -> usize {
        self.p + (self.gates + 2) * self.h
    }
    fn at_k(&self) -> usize {
        self.p + (self.gates + 3) * self.h
    }
    fn at_out(&self) -> usize {
        self.p + (self.gates + 4) * self.h
    }

    /// Where the record of (layer, dir, sequence b, step t) starts in the
    /// trace.
    fn record(&self, layer: usize, dir: usize, b: usize, t: usize) -> usize {
        ((layer * self.dirs + dir) * self.steps + self.starts[b] + t) * self.width()
    }

    /// The view of one record, with `x` the step's input.
    fn view<'a>(&self, x: &'a [f64], r: &'a [f64]) -> Step<'a> {
        let h = self.h;
        let act = |g: usize| {
            if g < self.gates {
                &r[self.at_act(g)..self.at_act(g) + h]
            } else {
                &r[..0]
            }
        };
        Step {
            x,
            h_prev: &r[..self.p],
            c_prev: &r[self.at_c_prev()..self.at_c_prev() + h],
            act: [act(0), act(1), act(2), act(3)],
            u_n: &r[self.at_u_n()..self.at_u_n() + h],
            c: &r[self.at_c()..self.at_c() + h],
            k: &r[self.at_k()..self.at_k() + h],
        }
    }

    fn out(&self) -> usize {
        self.p * self.dirs
    }

    /// The shape index of (layer, dir, lin id).
    fn idx(&self, layer: usize, dir: usize, id: usize) -> usize {
        let per = 2 * self.gates + usize::from(self.proj);
        (layer * self.dirs + dir) * per + id
    }
}

fn sigmoid(a: f64) -> f64 {
    1.0 / (1.0 + (-a).exp())
}

/// `out += M v` for row-major `rows x cols` `m`.
fn matvec_add(out: &mut [f64], m: &[f64], v: &[f64]) {
    let cols = v.len();
    for (r, o) in out.iter_mut().enumerate() {
        let row = &m[r * cols..(r + 1) * cols];
        *o += row.iter().zip(v).map(|(a, b)| a * b).sum::<f64>();
    }
}

/// `out += M^T v`.
fn matvec_t_add(out: &mut [f64], m: &[f64], v: &[f64]) {
    let cols = out.len();
    for (r, &vr) in v.iter().enumerate() {
        let row = &m[r * cols..(r + 1) * cols];
        for (o, a) in out.iter_mut().zip(row) {
            *o += a * vr;
        }
    }
}

/// `M += u v^T`.
fn outer_add(m: &mut [f64], u: &[f64], v: &[f64]) {
    let cols = v.len();
    for (r, &ur) in u.iter().enumerate() {
        for (a, b) in m[r * cols..(r + 1) * cols].iter_mut().zip(v) {
            *a += ur * b;
        }
    }
}

/// One step's cache for the backward pass: a view of its record in the
/// trace ([`Dims::view`]) and of its input.
struct Step<'a> {
    x: &'a [f64],
    h_prev: &'a [f64],
    c_prev: &'a [f64],
    /// Gate activations (RNN: [h']; LSTM: i, f, g, o; GRU: r, z, n);
    /// empty past the cell's gates.
    act: [&'a [f64]; 4],
    /// GRU: `R_2 h + bR_2`.
    u_n: &'a [f64],
    /// LSTM: c' and k.
    c: &'a [f64],
    k: &'a [f64],
}

struct Params<'a> {
    d: &'a Dims,
    v: &'a [f64],
}

impl Params<'_> {
    fn mat(&self, i: usize) -> &[f64] {
        let s = &self.d.shapes[i];
        let o = self.d.offs[i].0;
        &self.v[o..o + s.rows * s.cols]
    }
    fn bias(&self, i: usize) -> &[f64] {
        let s = &self.d.shapes[i];
        let o = self.d.offs[i].1;
        &self.v[o..o + s.bias_len]
    }
}

/// The gate pre-activation `W_g x + bW_g + R_g h + bR_g` (GRU's new gate:
/// without the recurrent part, returned separately).
fn pre(
    p: &Params<'_>,
    layer: usize,
    dir: usize,
    g: usize,
    x: &[f64],
    h: &[f64],
    split_rec: bool,
) -> (Vec<f64>, Vec<f64>) {
    let d = p.d;
    let wi = d.idx(layer, dir, g);
    let ri = d.idx(layer, dir, d.gates + g);
    let mut a = vec![0.0; d.h];
    if d.skip && layer == 0 {
        for (o, v) in a.iter_mut().zip(x) {
            *o += v;
        }
    } else {
        matvec_add(&mut a, p.mat(wi), x);
    }
    for (o, b) in a.iter_mut().zip(p.bias(wi)) {
        *o += b;
    }
    let mut u = vec![0.0; d.h];
    matvec_add(&mut u, p.mat(ri), h);
    for (o, b) in u.iter_mut().zip(p.bias(ri)) {
        *o += b;
    }
    if split_rec {
        (a, u)
    } else {
        for (o, v) in a.iter_mut().zip(&u) {
            *o += v;
        }
        (a, Vec::new())
    }
}

/// One step forward from state `h` (and `c`, LSTM) on input `x`; writes
/// the step's record `r` ([`Dims::width`] values, see [`Dims::view`]).
fn step_forward(
    p: &Params<'_>,
    layer: usize,
    dir: usize,
    x: &[f64],
    h: &[f64],
    c: &[f64],
    r: &mut [f64],
) {
    let d = p.d;
    r[..d.p].copy_from_slice(h);
    let put = |r: &mut [f64], at: usize, v: &[f64]| r[at..at + v.len()].copy_from_slice(v);
    match d.cell {
        RnnCellMode::RnnRelu | RnnCellMode::RnnTanh => {
            let (a, _) = pre(p, layer, dir, 0, x, h, false);
            let hn: Vec<f64> = if d.cell == RnnCellMode::RnnRelu {
                a.iter().map(|&v| v.max(0.0)).collect()
            } else {
                a.iter().map(|v| v.tanh()).collect()
            };
            put(r, d.at_act(0), &hn);
            put(r, d.at_out(), &hn);
        }
        RnnCellMode::Lstm => {
            put(r, d.at_c_prev(), c);
            let mut act = Vec::with_capacity(4);
            for g in 0..4 {
                let (a, _) = pre(p, layer, dir, g, x, h, false);
                act.push(if g == 2 {
                    a.iter().map(|v| v.tanh()).collect::<Vec<_>>()
                } else {
                    a.iter().map(|&v| sigmoid(v)).collect()
                });
            }
            let cn: Vec<f64> = (0..d.h)
                .map(|j| act[1][j] * c[j] + act[0][j] * act[2][j])
                .collect();
            let k: Vec<f64> = (0..d.h).map(|j| act[3][j] * cn[j].tanh()).collect();
            if d.proj {
                let mut o = vec![0.0; d.p];
                matvec_add(&mut o, p.mat(d.idx(layer, dir, 8)), &k);
                put(r, d.at_out(), &o);
            } else {
                put(r, d.at_out(), &k);
            }
            for (g, a) in act.iter().enumerate() {
                put(r, d.at_act(g), a);
            }
            put(r, d.at_c(), &cn);
            put(r, d.at_k(), &k);
        }
        RnnCellMode::Gru => {
            let (ar, _) = pre(p, layer, dir, 0, x, h, false);
            let (az, _) = pre(p, layer, dir, 1, x, h, false);
            let (an, un) = pre(p, layer, dir, 2, x, h, true);
            let rg: Vec<f64> = ar.iter().map(|&v| sigmoid(v)).collect();
            let z: Vec<f64> = az.iter().map(|&v| sigmoid(v)).collect();
            let n: Vec<f64> = (0..d.h).map(|j| (an[j] + rg[j] * un[j]).tanh()).collect();
            let out: Vec<f64> = (0..d.h)
                .map(|j| (1.0 - z[j]) * n[j] + z[j] * h[j])
                .collect();
            put(r, d.at_act(0), &rg);
            put(r, d.at_act(1), &z);
            put(r, d.at_act(2), &n);
            put(r, d.at_u_n(), &un);
            put(r, d.at_out(), &out);
        }
    }
}

/// Accumulate one gate's parameter gradients and its input and recurrent
/// gradients from `da` (the gate's pre-activation gradient); `du` is the
/// recurrent part's gradient where it differs (GRU's new gate).
#[allow(clippy::too_many_arguments)]
fn gate_backward(
    p: &Params<'_>,
    dp: &mut [f64],
    layer: usize,
    dir: usize,
    g: usize,
    s: &Step<'_>,
    da: &[f64],
    du: &[f64],
    dx: &mut [f64],
    dh: &mut [f64],
) {
    let d = p.d;
    let wi = d.idx(layer, dir, g);
    let ri = d.idx(layer, dir, d.gates + g);
    let (wm, wb) = d.offs[wi];
    let (rm, rb) = d.offs[ri];
    if d.skip && layer == 0 {
        for (o, v) in dx.iter_mut().zip(da) {
            *o += v;
        }
    } else {
        let n = d.shapes[wi].rows * d.shapes[wi].cols;
        outer_add(&mut dp[wm..wm + n], da, s.x);
        matvec_t_add(dx, p.mat(wi), da);
    }
    for (o, v) in dp[wb..wb + d.shapes[wi].bias_len].iter_mut().zip(da) {
        *o += v;
    }
    let n = d.shapes[ri].rows * d.shapes[ri].cols;
    outer_add(&mut dp[rm..rm + n], du, s.h_prev);
    matvec_t_add(dh, p.mat(ri), du);
    for (o, v) in dp[rb..rb + d.shapes[ri].bias_len].iter_mut().zip(du) {
        *o += v;
    }
}

/// Backward through one step: `dout` the gradient of the step's output
/// (recurrent state), `dc` of its cell state; returns the gradients of the
/// step's input, previous state and previous cell state.
fn step_backward(
    p: &Params<'_>,
    dp: &mut [f64],
    layer: usize,
    dir: usize,
    s: &Step<'_>,
    dout: &[f64],
    dc: &[f64],
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let d = p.d;
    let mut dx = vec![0.0; s.x.len()];
    let mut dh = vec![0.0; d.p];
    let mut dcp = Vec::new();
    match d.cell {
        RnnCellMode::RnnRelu | RnnCellMode::RnnTanh => {
            let hn = &s.act[0];
            let da: Vec<f64> = (0..d.h)
                .map(|j| {
                    let deriv = if d.cell == RnnCellMode::RnnRelu {
                        if hn[j] > 0.0 { 1.0 } else { 0.0 }
                    } else {
                        1.0 - hn[j] * hn[j]
                    };
                    dout[j] * deriv
                })
                .collect();
            gate_backward(p, dp, layer, dir, 0, s, &da, &da, &mut dx, &mut dh);
        }
        RnnCellMode::Lstm => {
            let dk: Vec<f64> = if d.proj {
                let pi = d.idx(layer, dir, 8);
                let (pm, _) = d.offs[pi];
                outer_add(&mut dp[pm..pm + d.p * d.h], dout, s.k);
                let mut dk = vec![0.0; d.h];
                matvec_t_add(&mut dk, p.mat(pi), dout);
                dk
            } else {
                dout.to_vec()
            };
            let [i, f, g, o] = s.act;
            let mut das = vec![vec![0.0; d.h]; 4];
            dcp = vec![0.0; d.h];
            for j in 0..d.h {
                let tc = s.c[j].tanh();
                let dct = dc[j] + dk[j] * o[j] * (1.0 - tc * tc);
                das[0][j] = dct * g[j] * i[j] * (1.0 - i[j]);
                das[1][j] = dct * s.c_prev[j] * f[j] * (1.0 - f[j]);
                das[2][j] = dct * i[j] * (1.0 - g[j] * g[j]);
                das[3][j] = dk[j] * tc * o[j] * (1.0 - o[j]);
                dcp[j] = dct * f[j];
            }
            for (gate, da) in das.iter().enumerate() {
                gate_backward(p, dp, layer, dir, gate, s, da, da, &mut dx, &mut dh);
            }
        }
        RnnCellMode::Gru => {
            let [r, z, n, _] = s.act;
            let mut dan = vec![0.0; d.h];
            let mut dun = vec![0.0; d.h];
            let mut dar = vec![0.0; d.h];
            let mut daz = vec![0.0; d.h];
            for j in 0..d.h {
                let dn = dout[j] * (1.0 - z[j]);
                let dz = dout[j] * (s.h_prev[j] - n[j]);
                dh[j] += dout[j] * z[j];
                dan[j] = dn * (1.0 - n[j] * n[j]);
                dun[j] = dan[j] * r[j];
                dar[j] = dan[j] * s.u_n[j] * r[j] * (1.0 - r[j]);
                daz[j] = dz * z[j] * (1.0 - z[j]);
            }
            gate_backward(p, dp, layer, dir, 0, s, &dar, &dar, &mut dx, &mut dh);
            gate_backward(p, dp, layer, dir, 1, s, &daz, &daz, &mut dx, &mut dh);
            gate_backward(p, dp, layer, dir, 2, s, &dan, &dun, &mut dx, &mut dh);
        }
    }
    (dx, dh, dcp)
}

fn check_len(arg: &str, need: usize, got: usize) -> Result<()> {
    if got != need {
        return Err(Error::mismatch(format!("{arg} length"), need, got));
    }
    Ok(())
}

/// Everything the forward pass keeps, in flat buffers allocated
/// fallibly and counted by [`Dims::new`].
struct Trace {
    /// Per layer `l`, its input at every valid step (`[steps, width]`,
    /// the steps of sequence `b` from `starts[b]`), `l = layers` the last
    /// layer's output.
    inputs: Vec<Vec<f64>>,
    /// One record per layer, direction and valid step ([`Dims::record`]).
    records: Vec<f64>,
    out: RnnOutput,
}

fn run_forward(
    d: &Dims,
    params: &[f64],
    batch: &Batch<'_>,
    x: &[f64],
    hx: Option<&[f64]>,
    cx: Option<&[f64]>,
) -> Result<Trace> {
    check_len("params", d.nparams, params.len())?;
    check_len("x", d.batch * d.max_len * d.input, x.len())?;
    let nh = d.layers * d.dirs * d.batch * d.p;
    let nc = d.layers * d.dirs * d.batch * d.h;
    if let Some(hx) = hx {
        check_len("hx", nh, hx.len())?;
    }
    let lstm = d.cell == RnnCellMode::Lstm;
    if let Some(cx) = cx {
        if !lstm {
            return Err(Error::invalid("cx", "only LSTM has a cell state", "Some"));
        }
        check_len("cx", nc, cx.len())?;
    }
    let p = Params { d, v: params };
    let mut hy = bounds::zeros("hy", nh)?;
    let mut cy = if lstm {
        bounds::zeros("cy", nc)?
    } else {
        Vec::new()
    };
    // Sizes below were counted by Dims::new. The largest buffer first, so
    // a refused allocation touches nothing.
    let mut records = bounds::zeros("trace", d.layers * d.dirs * d.steps * d.width())?;
    let mut inputs = bounds::buffer("layer inputs", d.layers + 1)?;
    let mut first = bounds::zeros("layer inputs", d.steps * d.input)?;
    for (b, &len) in batch.lengths.iter().enumerate() {
        let from = b * d.max_len * d.input;
        let to = d.starts[b] * d.input;
        first[to..to + len * d.input].copy_from_slice(&x[from..from + len * d.input]);
    }
    inputs.push(first);
    let (w, out_at) = (d.width(), d.at_out());
    for layer in 0..d.layers {
        let in_size = if layer == 0 { d.input } else { d.out() };
        let mut next = bounds::zeros("layer inputs", d.steps * d.out())?;
        let input = &inputs[layer];
        for dir in 0..d.dirs {
            let pl = layer * d.dirs + dir;
            for b in 0..d.batch {
                let len = batch.lengths[b];
                let so = (pl * d.batch + b) * d.p;
                let co = (pl * d.batch + b) * d.h;
                let mut h = hx.map_or(vec![0.0; d.p], |v| v[so..so + d.p].to_vec());
                let mut c = if lstm {
                    cx.map_or(vec![0.0; d.h], |v| v[co..co + d.h].to_vec())
                } else {
                    Vec::new()
                };
                for k in 0..len {
                    let t = if dir == 0 { k } else { len - 1 - k };
                    let xi = (d.starts[b] + t) * in_size;
                    let ro = d.record(layer, dir, b, t);
                    let r = &mut records[ro..ro + w];
                    step_forward(&p, layer, dir, &input[xi..xi + in_size], &h, &c, r);
                    h.copy_from_slice(&r[out_at..out_at + d.p]);
                    if lstm {
                        c.copy_from_slice(&r[d.at_c()..d.at_c() + d.h]);
                    }
                    let no = (d.starts[b] + t) * d.out() + dir * d.p;
                    next[no..no + d.p].copy_from_slice(&h);
                }
                hy[so..so + d.p].copy_from_slice(&h);
                if lstm {
                    cy[co..co + d.h].copy_from_slice(&c);
                }
            }
        }
        inputs.push(next);
    }
    let mut y = bounds::zeros("y", d.batch * d.max_len * d.out())?;
    let last = &inputs[d.layers];
    for (b, &len) in batch.lengths.iter().enumerate() {
        let o = b * d.max_len * d.out();
        let from = d.starts[b] * d.out();
        y[o..o + len * d.out()].copy_from_slice(&last[from..from + len * d.out()]);
    }
    Ok(Trace {
        inputs,
        records,
        out: RnnOutput { y, hy, cy },
    })
}

/// Write `fill` at the padded steps (`t >= lengths[b]`) of `y`, a
/// `[batch, max_len, width]` output of [`forward`] (or a `dx` of
/// [`backward`]), leaving the valid steps alone: what cuDNN does with a
/// data descriptor's padding fill. [`forward`] itself writes 0 there (the
/// default fill of [`RnnPlan`](crate::dnn::RnnPlan), and what
/// PyTorch's `pad_packed_sequence` puts at padded steps).
///
/// # Errors
/// `y` not `batch * max_len * width` long ([`Error::Mismatch`]), a length
/// past `max_len`, or sizes that overflow.
pub fn fill_padding(y: &mut [f64], batch: &Batch<'_>, width: usize, fill: f64) -> Result<()> {
    let n = bounds::elements(
        "y",
        &[batch.lengths.len(), batch.max_len, width],
        "[batch, max_len, width]",
    )?;
    check_len("y", n, y.len())?;
    if let Some((b, &len)) = batch
        .lengths
        .iter()
        .enumerate()
        .find(|&(_, &l)| l > batch.max_len)
    {
        return Err(Error::invalid(
            format!("lengths[{b}]"),
            format!("must be at most max_len ({})", batch.max_len),
            len,
        ));
    }
    for (b, &len) in batch.lengths.iter().enumerate() {
        // In bounds: b < batch, len <= max_len, and the product is n.
        let row = b * batch.max_len * width;
        y[row + len * width..row + batch.max_len * width].fill(fill);
    }
    Ok(())
}

/// The forward pass (see the [module docs](self) for layouts and cells).
///
/// # Errors
/// A configuration [`RnnConfig::check`] refuses; lengths past `max_len`;
/// buffer lengths that do not match ([`Error::Mismatch`]); `cx` for a cell
/// other than LSTM; the bounds.
pub fn forward(
    cfg: &RnnConfig,
    params: &[f64],
    batch: &Batch<'_>,
    x: &[f64],
    hx: Option<&[f64]>,
    cx: Option<&[f64]>,
) -> Result<RnnOutput> {
    let d = Dims::new(cfg, batch)?;
    Ok(run_forward(&d, params, batch, x, hx, cx)?.out)
}

/// The backward pass: gradients of `x`, `hx`, `cx` and the parameters
/// given the gradients `dy` of `y` (padding ignored), `dhy` of `hy` and
/// `dcy` of `cy` (`None`: zero).
///
/// # Errors
/// As [`forward`]; `dy`, `dhy`, `dcy` of the wrong length.
#[allow(clippy::too_many_arguments)]
pub fn backward(
    cfg: &RnnConfig,
    params: &[f64],
    batch: &Batch<'_>,
    x: &[f64],
    hx: Option<&[f64]>,
    cx: Option<&[f64]>,
    dy: &[f64],
    dhy: Option<&[f64]>,
    dcy: Option<&[f64]>,
) -> Result<RnnGrads> {
    let d = Dims::new(cfg, batch)?;
    let trace = run_forward(&d, params, batch, x, hx, cx)?;
    check_len("dy", d.batch * d.max_len * d.out(), dy.len())?;
    let nh = d.layers * d.dirs * d.batch * d.p;
    let nc = d.layers * d.dirs * d.batch * d.h;
    let lstm = d.cell == RnnCellMode::Lstm;
    if let Some(v) = dhy {
        check_len("dhy", nh, v.len())?;
    }
    if let Some(v) = dcy {
        if !lstm {
            return Err(Error::invalid("dcy", "only LSTM has a cell state", "Some"));
        }
        check_len("dcy", nc, v.len())?;
    }
    let p = Params { d: &d, v: params };
    let mut dp = bounds::zeros("dparams", d.nparams)?;
    let mut dhx = bounds::zeros("dhx", nh)?;
    let mut dcx = if lstm {
        bounds::zeros("dcx", nc)?
    } else {
        Vec::new()
    };
    // Gradient of the current layer's output at every valid step.
    let mut dout = bounds::zeros("layer inputs", d.steps * d.out())?;
    for (b, &len) in batch.lengths.iter().enumerate() {
        let o = b * d.max_len * d.out();
        let to = d.starts[b] * d.out();
        dout[to..to + len * d.out()].copy_from_slice(&dy[o..o + len * d.out()]);
    }
    let w = d.width();
    for layer in (0..d.layers).rev() {
        let in_size = if layer == 0 { d.input } else { d.out() };
        let mut din = bounds::zeros("layer inputs", d.steps * in_size)?;
        let input = &trace.inputs[layer];
        for dir in 0..d.dirs {
            let pl = layer * d.dirs + dir;
            for b in 0..d.batch {
                let len = batch.lengths[b];
                let so = (pl * d.batch + b) * d.p;
                let co = (pl * d.batch + b) * d.h;
                let mut dh = dhy.map_or(vec![0.0; d.p], |v| v[so..so + d.p].to_vec());
                let mut dc = if lstm {
                    dcy.map_or(vec![0.0; d.h], |v| v[co..co + d.h].to_vec())
                } else {
                    Vec::new()
                };
                for k in (0..len).rev() {
                    let t = if dir == 0 { k } else { len - 1 - k };
                    let at = d.starts[b] + t;
                    let go = at * d.out() + dir * d.p;
                    let mut g = dout[go..go + d.p].to_vec();
                    for (a, v) in g.iter_mut().zip(&dh) {
                        *a += v;
                    }
                    let ro = d.record(layer, dir, b, t);
                    let xi = at * in_size;
                    let s = d.view(&input[xi..xi + in_size], &trace.records[ro..ro + w]);
                    let (dxs, dhp, dcp) = step_backward(&p, &mut dp, layer, dir, &s, &g, &dc);
                    for (a, v) in din[xi..xi + in_size].iter_mut().zip(&dxs) {
                        *a += v;
                    }
                    dh = dhp;
                    dc = dcp;
                }
                dhx[so..so + d.p].copy_from_slice(&dh);
                if lstm {
                    dcx[co..co + d.h].copy_from_slice(&dc);
                }
            }
        }
        dout = din;
    }
    let mut dx = bounds::zeros("dx", d.batch * d.max_len * d.input)?;
    for (b, &len) in batch.lengths.iter().enumerate() {
        let o = b * d.max_len * d.input;
        let from = d.starts[b] * d.input;
        dx[o..o + len * d.input].copy_from_slice(&dout[from..from + len * d.input]);
    }
    Ok(RnnGrads {
        dx,
        dhx,
        dcx,
        dparams: dp,
    })
}

/// Which side a packed parameter belongs to, for the tests and for
/// loading: `(shape, matrix offset, bias offset)` per weight.
///
/// # Errors
/// As [`param_offsets`].
pub fn param_layout(cfg: &RnnConfig) -> Result<Vec<(RnnWeightShape, usize, usize)>> {
    let shapes = cfg.weight_shapes()?;
    let (offs, _) = param_offsets(cfg)?;
    Ok(shapes
        .into_iter()
        .zip(offs)
        .map(|(s, (m, b))| (s, m, b))
        .collect())
}

/// Whether `side` has a bias under the configuration (for docs and tests).
pub fn has_bias(cfg: &RnnConfig, side: RnnWeightSide) -> bool {
    match side {
        RnnWeightSide::Input => cfg.bias.input_bias(),
        RnnWeightSide::Recurrent => cfg.bias.recurrent_bias(),
        RnnWeightSide::Projection => false,
    }
}

#[cfg(test)]
#[path = "rnn_tests.rs"]
mod tests;
