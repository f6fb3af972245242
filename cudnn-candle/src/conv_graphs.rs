//! `conv2d`'s checks and graphs, pure functions of shapes and dtypes (no
//! device): candle's `Tensor::conv2d` argument conventions mapped onto the
//! crate's [`ConvParams`], every refusal a typed [`cudnn::Error`] naming the
//! argument and its value; the forward (convolution, bias and activation
//! in one graph), data-gradient and filter-gradient graphs, which plan for
//! a named GPU without one (see the host tests).

use candle_core::DType as CDType;
use cudnn::graph::{ConvParams, DType, Graph, Pointwise, TensorSpec};
use cudnn::{Error, Result};

use crate::params::Arg;

/// Names of the convolution graphs' tensors.
pub mod names {
    /// The input `[N, C, H, W]`.
    pub const X: &str = "x";
    /// The filter `[K, C / groups, KH, KW]`.
    pub const W: &str = "w";
    /// The bias, `[1, K, 1, 1]`.
    pub const B: &str = "b";
    /// The output `[N, K, OH, OW]`.
    pub const Y: &str = "y";
    /// The output gradient (of the convolution plus bias, before the activation).
    pub const DY: &str = "dy";
    /// The input gradient.
    pub const DX: &str = "dx";
    /// The filter gradient.
    pub const DW: &str = "dw";
}

/// The activation fused after the convolution and bias (more may come:
/// match with a wildcard arm).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Activation {
    /// None: `y = conv(x, w) + b`.
    #[default]
    None,
    /// `max(z, 0)` (candle's `relu`). Its gradient passes where the
    /// output is positive, fused or not (PyTorch's rule: a pre-activation
    /// of exactly 0 gets none; candle's own `relu` passes it there).
    Relu,
    /// GELU, tanh approximation (candle's `gelu`).
    Gelu,
    /// GELU, erf form (candle's `gelu_erf`).
    GeluErf,
    /// `z * sigmoid(z)` (candle's `silu`; cuDNN's swish with beta 1).
    Silu,
}

impl Activation {
    /// The pointwise mode, none for [`Activation::None`].
    pub fn pointwise(self) -> Option<Pointwise> {
        match self {
            Activation::None => None,
            Activation::Relu => Some(Pointwise::Relu),
            Activation::Gelu => Some(Pointwise::GeluTanh),
            Activation::GeluErf => Some(Pointwise::GeluErf),
            Activation::Silu => Some(Pointwise::Swish { beta: 1.0 }),
        }
    }
}

/// The options of one `conv2d` call, with candle's meaning (symmetric
/// padding, the same stride and dilation in both spatial dims) plus the
/// fused activation. Made with [`Conv2dParams::new`] (or `default()`)
/// and [`Conv2dParams::activation`]: more options may come.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Conv2dParams {
    /// Zero padding on each side of H and W.
    pub padding: usize,
    /// Stride in H and W (>= 1).
    pub stride: usize,
    /// Dilation in H and W (>= 1).
    pub dilation: usize,
    /// Channel groups (>= 1; divides C and K).
    pub groups: usize,
    /// The activation after the bias.
    pub activation: Activation,
}

impl Default for Conv2dParams {
    fn default() -> Self {
        Self {
            padding: 0,
            stride: 1,
            dilation: 1,
            groups: 1,
            activation: Activation::None,
        }
    }
}

impl Conv2dParams {
    /// candle's `conv2d(kernel, padding, stride, dilation, groups)`, no activation.
    pub fn new(padding: usize, stride: usize, dilation: usize, groups: usize) -> Self {
        Self {
            padding,
            stride,
            dilation,
            groups,
            activation: Activation::None,
        }
    }
    /// With an activation.
    pub fn activation(mut self, a: Activation) -> Self {
        self.activation = a;
        self
    }
}

/// A checked `conv2d` call: everything its graphs need.
#[derive(Clone, Debug, PartialEq)]
pub struct ConvCfg {
    /// The element type of x, w, bias and y.
    pub dtype: DType,
    /// x `[N, C, H, W]`.
    pub x: [i64; 4],
    /// w `[K, C / groups, KH, KW]`.
    pub w: [i64; 4],
    /// y `[N, K, OH, OW]`.
    pub y: [i64; 4],
    /// The geometry.
    pub conv: ConvParams,
    /// A bias is added.
    pub bias: bool,
    /// The activation.
    pub activation: Activation,
}

/// The dtypes `conv2d` runs: f32, f16, bf16.
///
/// # Errors
/// Another dtype, naming `arg`.
pub fn conv_dtype(arg: &str, dt: CDType) -> Result<DType> {
    match dt {
        CDType::F32 => Ok(DType::F32),
        CDType::F16 => Ok(DType::F16),
        CDType::BF16 => Ok(DType::BF16),
        other => Err(Error::invalid(
            format!("{arg} dtype"),
            "must be f32, f16 or bf16 (cuDNN's convolution graphs)",
            format!("{other:?}"),
        )),
    }
}

fn dims4(a: &Arg<'_>) -> Result<[i64; 4]> {
    let d: [usize; 4] = a.dims.try_into().map_err(|_| {
        Error::invalid(
            format!("{} dims", a.name),
            "must have 4 dims (N, C, H, W) / (K, C / groups, KH, KW)",
            format!("{:?}", a.dims),
        )
    })?;
    let mut out = [0i64; 4];
    for (i, (o, v)) in out.iter_mut().zip(d).enumerate() {
        *o = i64::try_from(v).ok().filter(|&v| v >= 1).ok_or_else(|| {
            Error::invalid(
                format!("{}[{i}]", a.name),
                format!("must be >= 1 and fit i64 ({} {:?})", a.name, a.dims),
                v,
            )
        })?;
    }
    Ok(out)
}

/// The contiguous (row-major) strides of `dims`; `None` when they overflow.
pub fn contiguous_strides(dims: &[usize]) -> Option<Vec<usize>> {
    let mut s = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1].checked_mul(dims[i + 1])?;
    }
    Some(s)
}

/// `a` is contiguous (candle's row-major strides; a dim of 1 may have any stride).
///
/// # Errors
/// Other strides, naming the argument.
pub fn check_contiguous(a: &Arg<'_>) -> Result<()> {
    let want = contiguous_strides(a.dims).ok_or_else(|| {
        Error::invalid(
            format!("{} dims", a.name),
            "element count must fit usize",
            format!("{:?}", a.dims),
        )
    })?;
    let ok = a.strides.len() == want.len()
        && a.dims
            .iter()
            .zip(a.strides.iter().zip(&want))
            .all(|(&d, (&s, &w))| d == 1 || s == w);
    if !ok {
        return Err(Error::invalid(
            format!("{} strides", a.name),
            format!("must be contiguous {want:?} (call .contiguous())"),
            format!("{:?}", a.strides),
        ));
    }
    Ok(())
}

fn to_i64(arg: &str, v: usize) -> Result<i64> {
    i64::try_from(v).map_err(|_| Error::invalid(arg, "must fit i64", v))
}

/// Check a `conv2d` call: x `(N, C, H, W)`, w `(K, C / groups, KH, KW)`,
/// bias `(K)`, all of one dtype (f32, f16, bf16) and contiguous.
///
/// # Errors
/// A rank, dim, dtype, stride or parameter that does not fit, naming the
/// argument and its value (`groups`, `stride`, `dilation`, `padding`,
/// `w[1]`, `bias dims`, ...).
pub fn conv2d(
    x: &Arg<'_>,
    w: &Arg<'_>,
    bias: Option<&Arg<'_>>,
    p: &Conv2dParams,
) -> Result<ConvCfg> {
    let dtype = conv_dtype(x.name, x.dtype)?;
    if w.dtype != x.dtype {
        return Err(Error::mismatch(
            format!("{} dtype ({}'s)", w.name, x.name),
            format!("{:?}", x.dtype),
            format!("{:?}", w.dtype),
        ));
    }
    let (xd, wd) = (dims4(x)?, dims4(w)?);
    check_contiguous(x)?;
    check_contiguous(w)?;
    if p.groups == 0 {
        return Err(Error::invalid("groups", "must be >= 1", p.groups));
    }
    if p.stride == 0 {
        return Err(Error::invalid("stride", "must be >= 1", p.stride));
    }
    if p.dilation == 0 {
        return Err(Error::invalid("dilation", "must be >= 1", p.dilation));
    }
    let groups = to_i64("groups", p.groups)?;
    let c_per_group = xd[1] / groups;
    if xd[1] % groups != 0 || c_per_group != wd[1] {
        return Err(Error::mismatch(
            format!(
                "{}[1] (the input channels {} over groups {})",
                w.name, xd[1], p.groups
            ),
            if xd[1] % groups == 0 {
                c_per_group.to_string()
            } else {
                format!("C = {} divisible by groups {}", xd[1], p.groups)
            },
            wd[1],
        ));
    }
    if wd[0] % groups != 0 {
        return Err(Error::invalid(
            format!("{}[0]", w.name),
            format!("must be a multiple of groups {}", p.groups),
            wd[0],
        ));
    }
    if let Some(b) = bias {
        if b.dtype != x.dtype {
            return Err(Error::mismatch(
                format!("{} dtype ({}'s)", b.name, x.name),
                format!("{:?}", x.dtype),
                format!("{:?}", b.dtype),
            ));
        }
        if b.dims.len() != 1 || to_i64(b.name, b.dims[0])? != wd[0] {
            return Err(Error::mismatch(
                format!("{} dims (w's output channels)", b.name),
                format!("[{}]", wd[0]),
                format!("{:?}", b.dims),
            ));
        }
        check_contiguous(b)?;
    }
    let pad = to_i64("padding", p.padding)?;
    let conv = ConvParams::new_2d(
        [pad, pad],
        [to_i64("stride", p.stride)?; 2],
        [to_i64("dilation", p.dilation)?; 2],
    );
    let y = conv.output_dims("conv2d", &xd, &wd)?;
    let y: [i64; 4] = y
        .try_into()
        .map_err(|_| Error::invalid("conv2d output", "must have 4 dims", "other"))?;
    Ok(ConvCfg {
        dtype,
        x: xd,
        w: wd,
        y,
        conv,
        bias: bias.is_some(),
        activation: p.activation,
    })
}

fn nchw(dtype: DType, d: [i64; 4]) -> Result<TensorSpec> {
    TensorSpec::nchw(dtype, &d)
}

/// The forward graph: `x`, `w` (and `b`) in, `y = act(conv(x, w) + b)` out,
/// all NCHW-packed (candle-contiguous).
///
/// # Errors
/// The builder's.
pub fn forward(c: &ConvCfg) -> Result<Graph> {
    let mut g = Graph::new();
    let x = g.input(names::X, nchw(c.dtype, c.x)?)?;
    let w = g.input(names::W, nchw(c.dtype, c.w)?)?;
    let mut y = g.conv_fprop(x, w, &c.conv)?;
    if c.bias {
        let b = g.input(names::B, nchw(c.dtype, [1, c.w[0], 1, 1])?)?;
        y = g.bias(y, b)?;
    }
    if let Some(m) = c.activation.pointwise() {
        y = g.pointwise(m, &[y])?;
    }
    g.output(y, c.dtype)?;
    g.rename(y, names::Y)?;
    Ok(g)
}

/// The data-gradient graph: `dy` (the gradient of `conv + bias`), `w` in, `dx` out.
///
/// # Errors
/// The builder's.
pub fn dgrad(c: &ConvCfg) -> Result<Graph> {
    let mut g = Graph::new();
    let dy = g.input(names::DY, nchw(c.dtype, c.y)?)?;
    let w = g.input(names::W, nchw(c.dtype, c.w)?)?;
    let dx = g.conv_dgrad(dy, w, &c.x, &c.conv)?;
    g.output(dx, c.dtype)?;
    g.rename(dx, names::DX)?;
    Ok(g)
}

/// The filter-gradient graph: `x`, `dy` in, `dw` out.
///
/// # Errors
/// The builder's.
pub fn wgrad(c: &ConvCfg) -> Result<Graph> {
    let mut g = Graph::new();
    let x = g.input(names::X, nchw(c.dtype, c.x)?)?;
    let dy = g.input(names::DY, nchw(c.dtype, c.y)?)?;
    let dw = g.conv_wgrad(x, dy, &c.w, &c.conv)?;
    g.output(dw, c.dtype)?;
    g.rename(dw, names::DW)?;
    Ok(g)
}

#[cfg(test)]
mod tests;
