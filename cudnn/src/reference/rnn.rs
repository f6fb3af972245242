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
//! steps × parameters), refused with [`Error::InvalidArgument`].

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
        let d = Dims {
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
        Ok(d)
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

/// One step's cache for the backward pass.
#[derive(Clone, Default)]
struct Step {
    x: Vec<f64>,
    h_prev: Vec<f64>,
    c_prev: Vec<f64>,
    /// Gate activations (RNN: [h']; LSTM: i, f, g, o; GRU: r, z, n).
    act: Vec<Vec<f64>>,
    /// GRU: `R_2 h + bR_2`.
    u_n: Vec<f64>,
    /// LSTM: c' and k.
    c: Vec<f64>,
    k: Vec<f64>,
    out: Vec<f64>,
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

fn step_forward(p: &Params<'_>, layer: usize, dir: usize, x: &[f64], h: &[f64], c: &[f64]) -> Step {
    let d = p.d;
    let mut s = Step {
        x: x.to_vec(),
        h_prev: h.to_vec(),
        c_prev: c.to_vec(),
        ..Step::default()
    };
    match d.cell {
        RnnCellMode::RnnRelu | RnnCellMode::RnnTanh => {
            let (a, _) = pre(p, layer, dir, 0, x, h, false);
            let hn: Vec<f64> = if d.cell == RnnCellMode::RnnRelu {
                a.iter().map(|&v| v.max(0.0)).collect()
            } else {
                a.iter().map(|v| v.tanh()).collect()
            };
            s.out = hn.clone();
            s.act = vec![hn];
        }
        RnnCellMode::Lstm => {
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
            s.out = if d.proj {
                let mut o = vec![0.0; d.p];
                matvec_add(&mut o, p.mat(d.idx(layer, dir, 8)), &k);
                o
            } else {
                k.clone()
            };
            s.act = act;
            s.c = cn;
            s.k = k;
        }
        RnnCellMode::Gru => {
            let (ar, _) = pre(p, layer, dir, 0, x, h, false);
            let (az, _) = pre(p, layer, dir, 1, x, h, false);
            let (an, un) = pre(p, layer, dir, 2, x, h, true);
            let r: Vec<f64> = ar.iter().map(|&v| sigmoid(v)).collect();
            let z: Vec<f64> = az.iter().map(|&v| sigmoid(v)).collect();
            let n: Vec<f64> = (0..d.h).map(|j| (an[j] + r[j] * un[j]).tanh()).collect();
            s.out = (0..d.h)
                .map(|j| (1.0 - z[j]) * n[j] + z[j] * h[j])
                .collect();
            s.act = vec![r, z, n];
            s.u_n = un;
        }
    }
    s
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
    s: &Step,
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
        outer_add(&mut dp[wm..wm + n], da, &s.x);
        matvec_t_add(dx, p.mat(wi), da);
    }
    for (o, v) in dp[wb..wb + d.shapes[wi].bias_len].iter_mut().zip(da) {
        *o += v;
    }
    let n = d.shapes[ri].rows * d.shapes[ri].cols;
    outer_add(&mut dp[rm..rm + n], du, &s.h_prev);
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
    s: &Step,
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
                outer_add(&mut dp[pm..pm + d.p * d.h], dout, &s.k);
                let mut dk = vec![0.0; d.h];
                matvec_t_add(&mut dk, p.mat(pi), dout);
                dk
            } else {
                dout.to_vec()
            };
            let (i, f, g, o) = (&s.act[0], &s.act[1], &s.act[2], &s.act[3]);
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
            let (r, z, n) = (&s.act[0], &s.act[1], &s.act[2]);
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

/// Everything the forward pass keeps: per layer, direction and sequence,
/// the steps in processing order.
struct Trace {
    steps: Vec<Vec<Vec<Vec<Step>>>>,
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
    // The current layer's input per sequence and step.
    let mut input: Vec<Vec<Vec<f64>>> = (0..d.batch)
        .map(|b| {
            (0..batch.lengths[b])
                .map(|t| {
                    let o = (b * d.max_len + t) * d.input;
                    x[o..o + d.input].to_vec()
                })
                .collect()
        })
        .collect();
    let mut steps = Vec::with_capacity(d.layers);
    for layer in 0..d.layers {
        let mut layer_steps = Vec::with_capacity(d.dirs);
        let mut next: Vec<Vec<Vec<f64>>> = (0..d.batch)
            .map(|b| vec![vec![0.0; d.out()]; batch.lengths[b]])
            .collect();
        for dir in 0..d.dirs {
            let pl = layer * d.dirs + dir;
            let mut dir_steps = Vec::with_capacity(d.batch);
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
                let mut seq = Vec::with_capacity(len);
                for k in 0..len {
                    let t = if dir == 0 { k } else { len - 1 - k };
                    let s = step_forward(&p, layer, dir, &input[b][t], &h, &c);
                    h = s.out.clone();
                    if lstm {
                        c = s.c.clone();
                    }
                    next[b][t][dir * d.p..(dir + 1) * d.p].copy_from_slice(&s.out);
                    seq.push(s);
                }
                hy[so..so + d.p].copy_from_slice(&h);
                if lstm {
                    cy[co..co + d.h].copy_from_slice(&c);
                }
                dir_steps.push(seq);
            }
            layer_steps.push(dir_steps);
        }
        steps.push(layer_steps);
        input = next;
    }
    let mut y = bounds::zeros("y", d.batch * d.max_len * d.out())?;
    for (b, seq) in input.iter().enumerate() {
        for (t, v) in seq.iter().enumerate() {
            let o = (b * d.max_len + t) * d.out();
            y[o..o + d.out()].copy_from_slice(v);
        }
    }
    Ok(Trace {
        steps,
        out: RnnOutput { y, hy, cy },
    })
}

/// Write `fill` at the padded steps (`t >= lengths[b]`) of `y`, a
/// `[batch, max_len, width]` output of [`forward`] (or a `dx` of
/// [`backward`]), leaving the valid steps alone: what cuDNN does with a
/// data descriptor's padding fill. [`forward`] itself writes 0 there
/// (PyTorch's zero fill, the default of
/// [`RnnPlan`](crate::dnn::RnnPlan)).
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
    // Gradient of the current layer's output, per sequence and step.
    let mut dout: Vec<Vec<Vec<f64>>> = (0..d.batch)
        .map(|b| {
            (0..batch.lengths[b])
                .map(|t| {
                    let o = (b * d.max_len + t) * d.out();
                    dy[o..o + d.out()].to_vec()
                })
                .collect()
        })
        .collect();
    for layer in (0..d.layers).rev() {
        let in_size = if layer == 0 { d.input } else { d.out() };
        let mut din: Vec<Vec<Vec<f64>>> = (0..d.batch)
            .map(|b| vec![vec![0.0; in_size]; batch.lengths[b]])
            .collect();
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
                let seq = &trace.steps[layer][dir][b];
                for k in (0..len).rev() {
                    let t = if dir == 0 { k } else { len - 1 - k };
                    let mut g = dout[b][t][dir * d.p..(dir + 1) * d.p].to_vec();
                    for (a, v) in g.iter_mut().zip(&dh) {
                        *a += v;
                    }
                    let (dxs, dhp, dcp) = step_backward(&p, &mut dp, layer, dir, &seq[k], &g, &dc);
                    for (a, v) in din[b][t].iter_mut().zip(&dxs) {
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
    for (b, seq) in dout.iter().enumerate() {
        for (t, v) in seq.iter().enumerate() {
            let o = (b * d.max_len + t) * d.input;
            dx[o..o + d.input].copy_from_slice(v);
        }
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
