//! CPU reference convolution in `f64`: the oracle GPU results are checked
//! against.
//!
//! Plain loops, written for clarity rather than speed, and host-only (no
//! library, no device). General in every dimension cuDNN is:
//! - any number of spatial dimensions (1-d, 2-d, 3-d, ...), each with its own
//!   padding, stride and dilation;
//! - groups (depthwise is `groups == channels`);
//! - cross-correlation (the default, what frameworks call convolution) and
//!   true convolution (the filter flipped in every spatial dimension), as
//!   [`ConvMode`];
//! - channels-first (`[n, c, spatial...]`, NCHW) and channels-last
//!   (`[n, spatial..., c]`, NHWC) memory layouts, as [`Layout`].
//!
//! **Shapes are always given logically**: `x` is `[n, c, spatial...]`, the
//! filter `w` is `[k, c / groups, window...]` and the output `y` is
//! `[n, k, out...]`, whatever the layout. The layout only says how the
//! buffers are ordered in memory; the filter follows the same layout as the
//! data (channels-last filters are `[k, window..., c / groups]` in memory).
//!
//! Per spatial dimension, `out = (in + 2*pad - dilation*(window-1) - 1) / stride + 1`,
//! which must be at least 1. Output position `o` and window position `f` read
//! input position `o*stride - pad + f*dilation` (zero outside the input); in
//! [`ConvMode::Convolution`] they use filter element `window-1-f` instead of
//! `f`.
//!
//! Every function validates shapes, parameters and buffer lengths first and
//! returns an [`Error`] instead of panicking.
//!
//! # Bounds
//! As everywhere in [`crate::reference`]: the output (and every buffer the
//! loops use) holds at most [`MAX_ELEMENTS`](super::MAX_ELEMENTS) values,
//! so a huge padding on a tiny input is refused before anything is
//! allocated, and the work may be at most [`MAX_WORK`](super::MAX_WORK)
//! steps, counted as the multiply-adds of the loops: output elements x
//! window positions x input channels per group for [`forward`] and
//! [`backward_filter`] (plus one per output element for
//! [`bias_activation_forward`]), input elements x window positions x output
//! channels per group for [`backward_data`], and the elements of `dy` for
//! [`backward_bias`].
//!
//! ```
//! use cudnn::reference::conv::{self, ConvParams, Layout};
//! // 1-d: x = [1, 2, 3, 4], w = [1, 0, -1]  ->  y = [1 - 3, 2 - 4]
//! let (y, y_shape) = conv::forward(
//!     &[1.0, 2.0, 3.0, 4.0], &[1, 1, 4],
//!     &[1.0, 0.0, -1.0], &[1, 1, 3],
//!     &ConvParams::new(1), Layout::ChannelsFirst,
//! )?;
//! assert_eq!(y_shape, [1, 1, 2]);
//! assert_eq!(y, [-2.0, -2.0]);
//! # Ok::<(), cudnn::Error>(())
//! ```

use super::bounds;
use super::ops::for_each_index;
use crate::dnn::{ActivationMode, TensorFormat};
use crate::error::{Error, Result};

pub use crate::dnn::ConvMode;

/// How a tensor's logical dimensions `[n, c, spatial...]` are ordered in
/// memory (packed, no gaps).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Layout {
    /// `[n, c, spatial...]` from slowest to fastest (NCHW, NCDHW). The default.
    #[default]
    ChannelsFirst,
    /// `[n, spatial..., c]` from slowest to fastest (NHWC, NDHWC).
    ChannelsLast,
}

impl From<TensorFormat> for Layout {
    fn from(format: TensorFormat) -> Self {
        match format {
            TensorFormat::Nchw => Layout::ChannelsFirst,
            TensorFormat::Nhwc => Layout::ChannelsLast,
        }
    }
}

impl Layout {
    /// The stride in elements of each logical dimension of a packed tensor
    /// of logical shape `shape` (`[n, c, spatial...]`) in this layout.
    ///
    /// # Errors
    /// When `shape` has fewer than 2 dimensions, or its element count
    /// overflows `usize`.
    pub fn strides(self, shape: &[usize]) -> Result<Vec<usize>> {
        if shape.len() < 2 {
            return Err(Error::invalid(
                "shape",
                "must have at least 2 dimensions ([n, c, ...])",
                format!("{shape:?}"),
            ));
        }
        element_count("shape", shape)?;
        let rank = shape.len();
        // Physical order, slowest first.
        let order: Vec<usize> = match self {
            Layout::ChannelsFirst => (0..rank).collect(),
            Layout::ChannelsLast => std::iter::once(0)
                .chain(2..rank)
                .chain(std::iter::once(1))
                .collect(),
        };
        let mut strides = vec![0; rank];
        let mut step = 1usize;
        for &d in order.iter().rev() {
            strides[d] = step;
            // Cannot overflow: the product of all dimensions fits (checked above).
            step = step.saturating_mul(shape[d]);
        }
        Ok(strides)
    }
}

/// Padding, stride, dilation (one per spatial dimension), groups and mode of
/// a convolution.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConvParams {
    /// Zero padding on both sides of each spatial dimension.
    pub pad: Vec<usize>,
    /// Step between output positions, `>= 1`.
    pub stride: Vec<usize>,
    /// Step between window taps, `>= 1`.
    pub dilation: Vec<usize>,
    /// Channel groups, `>= 1`; input and output channels must both be
    /// divisible by it.
    pub groups: usize,
    /// Cross-correlation (default) or true convolution.
    pub mode: ConvMode,
}

impl ConvParams {
    /// `spatial_dims` dimensions with no padding, stride 1, dilation 1, one
    /// group, cross-correlation.
    pub fn new(spatial_dims: usize) -> Self {
        ConvParams {
            pad: vec![0; spatial_dims],
            stride: vec![1; spatial_dims],
            dilation: vec![1; spatial_dims],
            groups: 1,
            mode: ConvMode::CrossCorrelation,
        }
    }

    /// Set the padding (one per spatial dimension; checked when used).
    pub fn with_pad(mut self, pad: &[usize]) -> Self {
        self.pad = pad.to_vec();
        self
    }

    /// Set the stride (one per spatial dimension; checked when used).
    pub fn with_stride(mut self, stride: &[usize]) -> Self {
        self.stride = stride.to_vec();
        self
    }

    /// Set the dilation (one per spatial dimension; checked when used).
    pub fn with_dilation(mut self, dilation: &[usize]) -> Self {
        self.dilation = dilation.to_vec();
        self
    }

    /// Set the number of groups (checked when used).
    pub fn with_groups(mut self, groups: usize) -> Self {
        self.groups = groups;
        self
    }

    /// Set the mode.
    pub fn with_mode(mut self, mode: ConvMode) -> Self {
        self.mode = mode;
        self
    }

    /// How many spatial dimensions (the length of `pad`).
    pub fn spatial_dims(&self) -> usize {
        self.pad.len()
    }

    /// The output shape `[n, k, out...]` for input `x_shape` and filter
    /// `w_shape`, every rule of the module docs checked.
    ///
    /// # Errors
    /// The first broken rule, naming the argument and the values.
    pub fn output_shape(&self, x_shape: &[usize], w_shape: &[usize]) -> Result<Vec<usize>> {
        Geometry::new(x_shape, w_shape, self, Layout::ChannelsFirst).map(|g| g.y_shape())
    }
}

/// The fused epilogue of [`bias_activation_forward`]:
/// `y = activation(alpha1 * conv(x, w) + alpha2 * z + bias)`, as
/// `cudnnConvolutionBiasActivationForward` computes it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BiasActivation<'a> {
    /// Scale of the convolution.
    pub alpha1: f64,
    /// The residual input, shaped (and laid out) like the output; `None`
    /// means zeros.
    pub z: Option<&'a [f64]>,
    /// Scale of `z`.
    pub alpha2: f64,
    /// One value per output channel.
    pub bias: &'a [f64],
    /// Applied last.
    pub activation: ActivationMode,
}

impl Default for BiasActivation<'_> {
    /// `alpha1 = 1`, no `z`, `alpha2 = 0`, no bias (must be set to `k`
    /// values before use), identity.
    fn default() -> Self {
        BiasActivation {
            alpha1: 1.0,
            z: None,
            alpha2: 0.0,
            bias: &[],
            activation: ActivationMode::Identity,
        }
    }
}

/// Forward convolution: `y[n, k, o] = sum over c in k's group and window f of
/// x[n, c, o*stride - pad + f*dilation] * w[k, c, f]` (`f` flipped in
/// [`ConvMode::Convolution`]).
///
/// Returns `y` (in `layout`) and its logical shape `[n, k, out...]`.
///
/// # Errors
/// A shape, parameter or buffer length that breaks the rules of the module
/// docs.
pub fn forward(
    x: &[f64],
    x_shape: &[usize],
    w: &[f64],
    w_shape: &[usize],
    p: &ConvParams,
    layout: Layout,
) -> Result<(Vec<f64>, Vec<usize>)> {
    let g = Geometry::new(x_shape, w_shape, p, layout)?;
    check_len("x", g.x_len, x.len())?;
    check_len("w", g.w_len, w.len())?;
    let y = g.forward(x, w)?;
    Ok((y, g.y_shape()))
}

/// Backward data: the gradient of `<forward(x, w), dy>` with respect to `x`,
/// `dx[n, c, i] = sum over k in c's group, window f and output o with
/// o*stride - pad + f*dilation = i of dy[n, k, o] * w[k, c, f]`.
///
/// `dy` has the logical shape of the forward output for `x_shape`; the
/// result has `x_shape`, in `layout`.
///
/// # Errors
/// A shape, parameter or buffer length that breaks the rules of the module
/// docs, or a `dy_shape` that is not the forward output shape.
pub fn backward_data(
    dy: &[f64],
    dy_shape: &[usize],
    w: &[f64],
    w_shape: &[usize],
    x_shape: &[usize],
    p: &ConvParams,
    layout: Layout,
) -> Result<Vec<f64>> {
    let g = Geometry::new(x_shape, w_shape, p, layout)?;
    g.check_dy_shape(dy_shape)?;
    check_len("dy", g.y_len, dy.len())?;
    check_len("w", g.w_len, w.len())?;
    g.backward_data(dy, w)
}

/// Backward filter: the gradient of `<forward(x, w), dy>` with respect to
/// `w`, `dw[k, c, f] = sum over n and output o of
/// x[n, c, o*stride - pad + f*dilation] * dy[n, k, o]` (`f` flipped in
/// [`ConvMode::Convolution`]).
///
/// The result has `w_shape`, in `layout`.
///
/// # Errors
/// A shape, parameter or buffer length that breaks the rules of the module
/// docs, or a `dy_shape` that is not the forward output shape.
pub fn backward_filter(
    x: &[f64],
    x_shape: &[usize],
    dy: &[f64],
    dy_shape: &[usize],
    w_shape: &[usize],
    p: &ConvParams,
    layout: Layout,
) -> Result<Vec<f64>> {
    let g = Geometry::new(x_shape, w_shape, p, layout)?;
    g.check_dy_shape(dy_shape)?;
    check_len("x", g.x_len, x.len())?;
    check_len("dy", g.y_len, dy.len())?;
    g.backward_filter(x, dy)
}

/// Bias gradient: `db[k] = sum over n and every spatial position of
/// dy[n, k, ...]` (what `cudnnConvolutionBackwardBias` computes).
///
/// # Errors
/// A `dy_shape` of rank below 3 or with a zero dimension, or a buffer
/// length that does not match it.
pub fn backward_bias(dy: &[f64], dy_shape: &[usize], layout: Layout) -> Result<Vec<f64>> {
    check_shape("dy_shape", dy_shape)?;
    let len = element_count("dy_shape", dy_shape)?;
    check_len("dy", len, dy.len())?;
    bounds::count("dy_shape", dy_shape)?;
    let strides = layout.strides(dy_shape)?;
    let (n, k) = (dy_shape[0], dy_shape[1]);
    let spatial = &dy_shape[2..];
    let mut offsets = bounds::buffer("dy_shape", bounds::count("dy_shape", spatial)?)?;
    for_each_index(spatial, |s| offsets.push(offset(s, &strides[2..])));
    let mut db = bounds::zeros("dy_shape", k)?;
    for (kk, out) in db.iter_mut().enumerate() {
        let mut acc = 0.0;
        for nn in 0..n {
            let base = nn * strides[0] + kk * strides[1];
            for &o in &offsets {
                acc += dy[base + o];
            }
        }
        *out = acc;
    }
    Ok(db)
}

/// Forward convolution with the fused epilogue of
/// `cudnnConvolutionBiasActivationForward`:
/// `y = activation(alpha1 * forward(x, w) + alpha2 * z + bias[k])`.
///
/// Returns `y` (in `layout`) and its logical shape.
///
/// # Errors
/// As [`forward`], and when `bias` does not have `k` values, `z` does not
/// have the output's length, or the activation's coefficient is invalid.
pub fn bias_activation_forward(
    x: &[f64],
    x_shape: &[usize],
    w: &[f64],
    w_shape: &[usize],
    p: &ConvParams,
    layout: Layout,
    fused: &BiasActivation<'_>,
) -> Result<(Vec<f64>, Vec<usize>)> {
    fused.activation.validate()?;
    let g = Geometry::new(x_shape, w_shape, p, layout)?;
    check_len("x", g.x_len, x.len())?;
    check_len("w", g.w_len, w.len())?;
    check_len("bias", g.k, fused.bias.len())?;
    if let Some(z) = fused.z {
        check_len("z", g.y_len, z.len())?;
    }
    let conv_work = g.check_forward()?;
    bounds::total_work(
        "w_shape",
        "the convolution's, plus one per output element",
        &[conv_work, g.y_len as u64],
    )?;
    let mut y = g.forward(x, w)?;
    for nn in 0..g.n {
        for (kk, &b) in fused.bias.iter().enumerate() {
            let base = nn * g.y_strides[0] + kk * g.y_strides[1];
            for_each_index(&g.ys, |o| {
                let i = base + offset(o, &g.y_strides[2..]);
                let z = fused.z.map_or(0.0, |z| z[i]);
                y[i] = activate(fused.activation, fused.alpha1 * y[i] + fused.alpha2 * z + b);
            });
        }
    }
    Ok((y, g.y_shape()))
}

/// Reorder a packed tensor of logical shape `shape` from one layout to
/// another (NCHW to NHWC and back, in any number of spatial dimensions).
///
/// # Errors
/// A `shape` of rank below 2, or a buffer length that does not match it.
pub fn convert_layout(data: &[f64], shape: &[usize], from: Layout, to: Layout) -> Result<Vec<f64>> {
    let len = element_count("shape", shape)?;
    let src = from.strides(shape)?;
    let dst = to.strides(shape)?;
    check_len("data", len, data.len())?;
    bounds::count("shape", shape)?;
    let mut out = bounds::zeros("shape", len)?;
    for_each_index(shape, |idx| {
        out[offset(idx, &dst)] = data[offset(idx, &src)]
    });
    Ok(out)
}

/// The activation functions of [`ActivationMode`], NaN propagated.
fn activate(mode: ActivationMode, v: f64) -> f64 {
    if v.is_nan() {
        return v;
    }
    match mode {
        ActivationMode::Sigmoid => 1.0 / (1.0 + (-v).exp()),
        ActivationMode::Relu => v.max(0.0),
        ActivationMode::Tanh => v.tanh(),
        ActivationMode::ClippedRelu { ceiling } => v.max(0.0).min(ceiling),
        ActivationMode::Elu { alpha } => {
            if v > 0.0 {
                v
            } else {
                alpha * v.exp_m1()
            }
        }
        ActivationMode::Swish { beta } => v / (1.0 + (-beta * v).exp()),
        ActivationMode::Identity => v,
    }
}

/// Everything the loops need, validated: after [`Geometry::new`] every index
/// the loops compute is in bounds of buffers whose lengths were checked.
struct Geometry {
    n: usize,
    c: usize,
    k: usize,
    /// Input channels per group.
    cpg: usize,
    /// Output channels per group.
    kpg: usize,
    /// Input, window and output spatial sizes.
    xs: Vec<usize>,
    ws: Vec<usize>,
    ys: Vec<usize>,
    pad: Vec<i64>,
    stride: Vec<i64>,
    dilation: Vec<i64>,
    flip: bool,
    x_strides: Vec<usize>,
    w_strides: Vec<usize>,
    y_strides: Vec<usize>,
    x_len: usize,
    w_len: usize,
    y_len: usize,
}

impl Geometry {
    fn new(x_shape: &[usize], w_shape: &[usize], p: &ConvParams, layout: Layout) -> Result<Self> {
        check_shape("x_shape", x_shape)?;
        check_shape("w_shape", w_shape)?;
        let nd = x_shape.len() - 2;
        if w_shape.len() != x_shape.len() {
            return Err(Error::mismatch(
                "w_shape rank (equal to x_shape rank)",
                x_shape.len(),
                w_shape.len(),
            ));
        }
        for (name, v) in [
            ("pad", &p.pad),
            ("stride", &p.stride),
            ("dilation", &p.dilation),
        ] {
            if v.len() != nd {
                return Err(Error::mismatch(
                    format!("{name} length (spatial dimensions of x_shape {x_shape:?})"),
                    nd,
                    v.len(),
                ));
            }
        }
        for (name, v) in [("stride", &p.stride), ("dilation", &p.dilation)] {
            if let Some(d) = v.iter().position(|&s| s == 0) {
                return Err(Error::invalid(format!("{name}[{d}]"), "must be >= 1", 0));
            }
        }
        if p.groups == 0 {
            return Err(Error::invalid("groups", "must be >= 1", 0));
        }
        let (n, c, k, wc) = (x_shape[0], x_shape[1], w_shape[0], w_shape[1]);
        if c % p.groups != 0 {
            return Err(Error::invalid(
                "groups",
                format!("must divide the input channels {c}"),
                p.groups,
            ));
        }
        if k % p.groups != 0 {
            return Err(Error::invalid(
                "groups",
                format!("must divide the output channels {k}"),
                p.groups,
            ));
        }
        let cpg = c / p.groups;
        if wc != cpg {
            return Err(Error::mismatch(
                format!("w_shape[1] (input channels {c} / groups {})", p.groups),
                cpg,
                wc,
            ));
        }
        let xs = x_shape[2..].to_vec();
        let ws = w_shape[2..].to_vec();
        let mut ys = Vec::with_capacity(nd);
        let (mut pad, mut stride, mut dilation) = (vec![], vec![], vec![]);
        for d in 0..nd {
            let stride_d = to_i64(format!("stride[{d}]"), p.stride[d])?;
            let dilation_d = to_i64(format!("dilation[{d}]"), p.dilation[d])?;
            let (i, f) = (xs[d] as i128, ws[d] as i128);
            let (pd, s, dl) = (p.pad[d] as i128, p.stride[d] as i128, p.dilation[d] as i128);
            let padded = i + 2 * pd;
            if padded > i64::MAX as i128 {
                return Err(Error::invalid(
                    format!("pad[{d}]"),
                    format!("x_shape[{}] + 2*pad must fit in i64", d + 2),
                    p.pad[d],
                ));
            }
            let extent = dl * (f - 1) + 1;
            if extent > padded {
                return Err(Error::invalid(
                    format!("w_shape[{}]", d + 2),
                    format!(
                        "the dilated window dilation*(w-1)+1 = {extent} must fit in the padded \
                         input x + 2*pad = {padded} (else the output is empty)"
                    ),
                    ws[d],
                ));
            }
            // `out <= padded <= i64::MAX`; every coordinate the loops compute
            // is bounded by `padded` too, so i64 arithmetic cannot overflow.
            let out = (padded - extent) / s + 1;
            ys.push(usize::try_from(out).map_err(|_| {
                Error::invalid(
                    format!("x_shape[{}]", d + 2),
                    "the output size must fit in usize",
                    xs[d],
                )
            })?);
            pad.push(pd as i64);
            stride.push(stride_d);
            dilation.push(dilation_d);
        }
        let mut y_shape = vec![n, k];
        y_shape.extend_from_slice(&ys);
        let x_len = element_count("x_shape", x_shape)?;
        let w_len = element_count("w_shape", w_shape)?;
        let y_len = element_count("output shape", &y_shape)?;
        Ok(Geometry {
            n,
            c,
            k,
            cpg,
            kpg: k / p.groups,
            xs,
            ws,
            ys,
            pad,
            stride,
            dilation,
            flip: p.mode == ConvMode::Convolution,
            x_strides: layout.strides(x_shape)?,
            w_strides: layout.strides(w_shape)?,
            y_strides: layout.strides(&y_shape)?,
            x_len,
            w_len,
            y_len,
        })
    }

    fn y_shape(&self) -> Vec<usize> {
        let mut s = vec![self.n, self.k];
        s.extend_from_slice(&self.ys);
        s
    }

    fn check_dy_shape(&self, dy_shape: &[usize]) -> Result<()> {
        let expected = self.y_shape();
        if dy_shape != expected.as_slice() {
            return Err(Error::mismatch(
                "dy_shape (the forward output shape of x_shape and w_shape)",
                format!("{expected:?}"),
                format!("{dy_shape:?}"),
            ));
        }
        Ok(())
    }

    /// The window positions, flat (`ws.len()` indices each), and for each
    /// the offset of its filter element within one `[k, c]` slice (flipped
    /// in convolution mode).
    fn taps(&self) -> Result<(Vec<usize>, Vec<usize>)> {
        let count = bounds::count("w_shape", &self.ws)?;
        let nd = self.ws.len();
        let mut taps = bounds::buffer(
            "w_shape",
            bounds::elements("w_shape", &[count, nd], "window positions x spatial dims")?,
        )?;
        let mut offsets = bounds::buffer("w_shape", count)?;
        for_each_index(&self.ws, |f| {
            taps.extend_from_slice(f);
            offsets.push(
                f.iter()
                    .zip(&self.ws)
                    .zip(&self.w_strides[2..])
                    .map(|((&fd, &wd), &st)| if self.flip { wd - 1 - fd } else { fd } * st)
                    .sum(),
            );
        });
        Ok((taps, offsets))
    }

    /// The number of window positions.
    fn tap_count(&self) -> usize {
        self.ws.iter().product()
    }

    /// Check the output bound and the work of [`Geometry::forward`] (also
    /// that of [`Geometry::backward_filter`], the same loops); returns the
    /// work.
    fn check_forward(&self) -> Result<u64> {
        let y_shape = self.y_shape();
        bounds::count(
            "output shape (from x_shape, w_shape, pad, stride and dilation)",
            &y_shape,
        )?;
        bounds::count("w_shape", &self.ws)?;
        bounds::work(
            "w_shape",
            "output elements x window positions x input channels per group",
            &[self.y_len, self.tap_count(), self.cpg],
        )
    }

    /// The input offset (within one `[n, c]` slice) that output position `o`
    /// and window position `f` read, or `None` in the padding.
    fn input_at(&self, o: &[usize], f: &[usize]) -> Option<usize> {
        let mut off = 0;
        for d in 0..o.len() {
            let i = o[d] as i64 * self.stride[d] - self.pad[d] + f[d] as i64 * self.dilation[d];
            if i < 0 || i as usize >= self.xs[d] {
                return None;
            }
            off += i as usize * self.x_strides[d + 2];
        }
        Some(off)
    }

    /// The output offset (within one `[n, k]` slice) whose window position
    /// `f` reads input position `i`, or `None` when there is none.
    fn output_at(&self, i: &[usize], f: &[usize]) -> Option<usize> {
        let mut off = 0;
        for d in 0..i.len() {
            let t = i[d] as i64 + self.pad[d] - f[d] as i64 * self.dilation[d];
            if t < 0 || t % self.stride[d] != 0 {
                return None;
            }
            let o = (t / self.stride[d]) as usize;
            if o >= self.ys[d] {
                return None;
            }
            off += o * self.y_strides[d + 2];
        }
        Some(off)
    }

    /// Gather over outputs.
    fn forward(&self, x: &[f64], w: &[f64]) -> Result<Vec<f64>> {
        self.check_forward()?;
        let mut y = bounds::zeros("output shape", self.y_len)?;
        let (taps, w_offsets) = self.taps()?;
        // At least 1: `check_shape` asks for a rank of at least 3.
        let nd = self.ws.len();
        let (xst, wst, yst) = (&self.x_strides, &self.w_strides, &self.y_strides);
        for n in 0..self.n {
            for k in 0..self.k {
                let g = k / self.kpg;
                for_each_index(&self.ys, |o| {
                    let mut acc = 0.0;
                    for (f, &wo) in taps.chunks_exact(nd).zip(&w_offsets) {
                        let Some(xo) = self.input_at(o, f) else {
                            continue;
                        };
                        for cl in 0..self.cpg {
                            let c = g * self.cpg + cl;
                            acc +=
                                x[n * xst[0] + c * xst[1] + xo] * w[k * wst[0] + cl * wst[1] + wo];
                        }
                    }
                    y[n * yst[0] + k * yst[1] + offset(o, &yst[2..])] = acc;
                });
            }
        }
        Ok(y)
    }

    /// Gather over inputs: each input position collects the outputs that read it.
    fn backward_data(&self, dy: &[f64], w: &[f64]) -> Result<Vec<f64>> {
        bounds::elements("x_shape", &[self.x_len], "the input")?;
        bounds::count("w_shape", &self.ws)?;
        bounds::work(
            "w_shape",
            "input elements x window positions x output channels per group",
            &[self.x_len, self.tap_count(), self.kpg],
        )?;
        let mut dx = bounds::zeros("x_shape", self.x_len)?;
        let (taps, w_offsets) = self.taps()?;
        let nd = self.ws.len();
        let (xst, wst, yst) = (&self.x_strides, &self.w_strides, &self.y_strides);
        for n in 0..self.n {
            for c in 0..self.c {
                let (g, cl) = (c / self.cpg, c % self.cpg);
                for_each_index(&self.xs, |i| {
                    let mut acc = 0.0;
                    for (f, &wo) in taps.chunks_exact(nd).zip(&w_offsets) {
                        let Some(yo) = self.output_at(i, f) else {
                            continue;
                        };
                        for kl in 0..self.kpg {
                            let k = g * self.kpg + kl;
                            acc +=
                                dy[n * yst[0] + k * yst[1] + yo] * w[k * wst[0] + cl * wst[1] + wo];
                        }
                    }
                    dx[n * xst[0] + c * xst[1] + offset(i, &xst[2..])] = acc;
                });
            }
        }
        Ok(dx)
    }

    /// Gather over filter elements: each sums over the batch and the outputs.
    fn backward_filter(&self, x: &[f64], dy: &[f64]) -> Result<Vec<f64>> {
        self.check_forward()?;
        bounds::elements("w_shape", &[self.w_len], "the filter")?;
        let mut dw = bounds::zeros("w_shape", self.w_len)?;
        let (taps, w_offsets) = self.taps()?;
        let nd = self.ws.len();
        let (xst, wst, yst) = (&self.x_strides, &self.w_strides, &self.y_strides);
        for k in 0..self.k {
            let g = k / self.kpg;
            for cl in 0..self.cpg {
                let c = g * self.cpg + cl;
                for (f, &wo) in taps.chunks_exact(nd).zip(&w_offsets) {
                    let mut acc = 0.0;
                    for n in 0..self.n {
                        for_each_index(&self.ys, |o| {
                            let Some(xo) = self.input_at(o, f) else {
                                return;
                            };
                            acc += x[n * xst[0] + c * xst[1] + xo]
                                * dy[n * yst[0] + k * yst[1] + offset(o, &yst[2..])];
                        });
                    }
                    dw[k * wst[0] + cl * wst[1] + wo] = acc;
                }
            }
        }
        Ok(dw)
    }
}

/// Rank at least 3 (`[n, c, spatial...]`), every dimension at least 1.
fn check_shape(name: &str, shape: &[usize]) -> Result<()> {
    if shape.len() < 3 {
        return Err(Error::invalid(
            name,
            "must have at least 3 dimensions ([n, c, spatial...])",
            format!("{shape:?}"),
        ));
    }
    if let Some(d) = shape.iter().position(|&v| v == 0) {
        return Err(Error::invalid(format!("{name}[{d}]"), "must be >= 1", 0));
    }
    Ok(())
}

fn to_i64(name: String, v: usize) -> Result<i64> {
    i64::try_from(v).map_err(|_| Error::invalid(name, "must be <= i64::MAX", v))
}

fn element_count(name: &str, shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| {
            Error::invalid(
                name,
                "element count must fit in usize",
                format!("{shape:?}"),
            )
        })
}

fn check_len(name: &str, expected: usize, got: usize) -> Result<()> {
    if expected != got {
        return Err(Error::mismatch(
            format!("{name} buffer length"),
            expected,
            got,
        ));
    }
    Ok(())
}

fn offset(idx: &[usize], strides: &[usize]) -> usize {
    idx.iter().zip(strides).map(|(i, s)| i * s).sum()
}
