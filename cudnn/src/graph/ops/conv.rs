//! Convolution: parameters, output-shape inference (all arithmetic checked),
//! the `Graph` methods (fprop, dgrad, wgrad) and the op's descriptors.

use super::{Built, OpNode};
use crate::error::{Error, Result};
use crate::graph::backend::{Descriptor, attr, kind};
use crate::graph::graph::{Graph, Tensor};
use crate::graph::tensor::{DType, MAX_DIMS, TensorSpec, fmt_dims};
use crate::sys::cudnn as sys;

/// The largest padding, stride or dilation accepted (cuDNN's own limits are lower).
pub const MAX_CONV_PARAM: i64 = 1 << 24;

/// Convolution geometry, per spatial dim (N-d: give as many as the tensors
/// have spatial dims). Cross-correlation (what frameworks call convolution)
/// unless `flip` is set. Made with [`ConvParams::new`] /
/// [`new_2d`](ConvParams::new_2d) and the `with_*` methods (the struct is
/// `#[non_exhaustive]`; its fields stay readable and assignable):
///
/// ```
/// use cudnn::graph::ConvParams;
/// // 3x3, stride 2, padded 0 before and 1 after (TensorFlow's "same").
/// let p = ConvParams::new_2d([0, 0], [2, 2], [1, 1]).with_padding(vec![0, 0], vec![1, 1]);
/// assert_eq!((p.pre_padding, p.post_padding), (vec![0, 0], vec![1, 1]));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct ConvParams {
    /// Padding before each spatial dim.
    pub pre_padding: Vec<i64>,
    /// Padding after each spatial dim.
    pub post_padding: Vec<i64>,
    /// Stride per spatial dim.
    pub stride: Vec<i64>,
    /// Dilation per spatial dim.
    pub dilation: Vec<i64>,
    /// True convolution (flipped filter) instead of cross-correlation.
    pub flip: bool,
}

/// Which convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConvDirection {
    /// `y = conv(x, w)`.
    Fprop,
    /// `dx = conv_backward_data(dy, w)`.
    Dgrad,
    /// `dw = conv_backward_filter(x, dy)`.
    Wgrad,
}

/// Every entry of `dims` (named `what`) is >= 1, and there are 3 to 8 of them.
fn check_dims(op: &str, what: &str, dims: &[i64]) -> Result<()> {
    if dims.len() < 3 || dims.len() > MAX_DIMS {
        return Err(Error::invalid(
            format!("{op}: {what}"),
            format!("must have 3 to {MAX_DIMS} dims ([N, C, spatial...])"),
            fmt_dims(dims),
        ));
    }
    if let Some((i, &d)) = dims.iter().enumerate().find(|(_, d)| **d < 1) {
        return Err(Error::invalid(
            format!("{op}: {what}[{i}]"),
            format!("must be >= 1 ({what} {})", fmt_dims(dims)),
            d,
        ));
    }
    Ok(())
}

impl ConvParams {
    /// 2-d with symmetric padding.
    pub fn new_2d(pad: [i64; 2], stride: [i64; 2], dilation: [i64; 2]) -> Self {
        Self {
            pre_padding: pad.to_vec(),
            post_padding: pad.to_vec(),
            stride: stride.to_vec(),
            dilation: dilation.to_vec(),
            flip: false,
        }
    }

    /// N-d with symmetric padding.
    pub fn new(pad: &[i64], stride: &[i64], dilation: &[i64]) -> Self {
        Self {
            pre_padding: pad.to_vec(),
            post_padding: pad.to_vec(),
            stride: stride.to_vec(),
            dilation: dilation.to_vec(),
            flip: false,
        }
    }

    /// With padding `pre` before and `post` after each spatial dim.
    pub fn with_padding(mut self, pre: Vec<i64>, post: Vec<i64>) -> Self {
        self.pre_padding = pre;
        self.post_padding = post;
        self
    }

    /// With [`stride`](Self::stride).
    pub fn with_stride(mut self, stride: Vec<i64>) -> Self {
        self.stride = stride;
        self
    }

    /// With [`dilation`](Self::dilation).
    pub fn with_dilation(mut self, dilation: Vec<i64>) -> Self {
        self.dilation = dilation;
        self
    }

    /// A true convolution (flipped filter) instead of cross-correlation (or not).
    pub fn with_flip(mut self, on: bool) -> Self {
        self.flip = on;
        self
    }

    /// Number of spatial dims.
    pub fn spatial_dims(&self) -> usize {
        self.stride.len()
    }

    pub(crate) fn check(&self, op: &str) -> Result<()> {
        let n = self.stride.len();
        if n == 0 || n > 6 {
            return Err(Error::invalid(
                format!("{op}: stride"),
                "must have 1 to 6 spatial dims",
                n,
            ));
        }
        for (name, v, min) in [
            ("pre_padding", &self.pre_padding, 0),
            ("post_padding", &self.post_padding, 0),
            ("stride", &self.stride, 1),
            ("dilation", &self.dilation, 1),
        ] {
            if v.len() != n {
                return Err(Error::mismatch(
                    format!("{op}: {name} length (one per spatial dim, as stride)"),
                    n,
                    v.len(),
                ));
            }
            if let Some((i, &x)) = v.iter().enumerate().find(|(_, x)| **x < min) {
                return Err(Error::invalid(
                    format!("{op}: {name}[{i}]"),
                    format!("must be >= {min}"),
                    x,
                ));
            }
            if let Some((i, &x)) = v.iter().enumerate().find(|(_, x)| **x > MAX_CONV_PARAM) {
                return Err(Error::invalid(
                    format!("{op}: {name}[{i}]"),
                    "must be <= 2^24",
                    x,
                ));
            }
        }
        Ok(())
    }

    /// The forward output dims for input `x` `[N, C, spatial...]` and filter
    /// `w` `[K, C/groups, spatial...]`. Every dim must be >= 1; the
    /// arithmetic is checked (an extent that overflows is an error).
    ///
    /// # Errors
    /// Ranks disagree, a dim < 1, C not a multiple of the filter's channels,
    /// K not a multiple of the groups, an extent that overflows i64, or an
    /// output extent below 1.
    pub fn output_dims(&self, op: &str, x: &[i64], w: &[i64]) -> Result<Vec<i64>> {
        self.check(op)?;
        let s = self.spatial_dims();
        if x.len() != s + 2 || w.len() != s + 2 {
            return Err(Error::mismatch(
                format!("{op}: x and w ranks (2 + spatial dims of the params)"),
                format!("{} and {}", s + 2, s + 2),
                format!("x {} and w {}", fmt_dims(x), fmt_dims(w)),
            ));
        }
        check_dims(op, "x", x)?;
        check_dims(op, "w", w)?;
        let (c, wc) = (x[1], w[1]);
        // wc >= 1 (checked above), so neither the remainder nor the quotient can trap.
        if c % wc != 0 {
            return Err(Error::mismatch(
                format!("{op}: x channels must be a multiple of w's input channels (groups)"),
                format!("a multiple of {wc}"),
                c,
            ));
        }
        // c >= wc >= 1 here, so groups >= 1.
        let groups = c / wc;
        if w[0] % groups != 0 {
            return Err(Error::mismatch(
                format!("{op}: w output channels must be a multiple of the groups ({groups})"),
                format!("a multiple of {groups}"),
                w[0],
            ));
        }
        let mut y = vec![x[0], w[0]];
        for i in 0..s {
            let overflow = |what: &str| {
                Error::invalid(
                    format!("{op}: spatial dim {i}"),
                    format!(
                        "{what} overflows i64 (x {}, w {}, params {self:?})",
                        fmt_dims(x),
                        fmt_dims(w)
                    ),
                    "overflow",
                )
            };
            let eff = (w[i + 2] - 1)
                .checked_mul(self.dilation[i])
                .and_then(|v| v.checked_add(1))
                .ok_or_else(|| overflow("the dilated filter extent"))?;
            let padded = x[i + 2]
                .checked_add(self.pre_padding[i])
                .and_then(|v| v.checked_add(self.post_padding[i]))
                .ok_or_else(|| overflow("the padded input extent"))?;
            if padded < eff {
                return Err(Error::invalid(
                    format!("{op}: spatial dim {i}"),
                    format!(
                        "padded input ({padded}) must be at least the dilated filter ({eff}); x {}, w {}",
                        fmt_dims(x),
                        fmt_dims(w)
                    ),
                    padded,
                ));
            }
            // padded >= eff >= 1 and stride >= 1: no overflow, no trap.
            y.push((padded - eff) / self.stride[i] + 1);
        }
        Ok(y)
    }
}

/// A convolution node: fprop `x, w -> y`; dgrad `dy, w -> dx`; wgrad `x, dy -> dw`.
#[derive(Clone, Debug)]
pub(crate) struct ConvOp {
    pub(crate) dir: ConvDirection,
    pub(crate) a: usize,
    pub(crate) b: usize,
    pub(crate) out: usize,
    pub(crate) params: ConvParams,
}

impl OpNode for ConvOp {
    fn name(&self) -> String {
        match self.dir {
            ConvDirection::Fprop => "conv_fprop",
            ConvDirection::Dgrad => "conv_dgrad",
            ConvDirection::Wgrad => "conv_wgrad",
        }
        .to_string()
    }

    fn tensors(&self) -> Vec<(&'static str, usize, bool)> {
        let (a, b, out) = (self.a, self.b, self.out);
        match self.dir {
            ConvDirection::Fprop => vec![("x", a, false), ("w", b, false), ("y", out, true)],
            ConvDirection::Dgrad => vec![("dy", a, false), ("w", b, false), ("dx", out, true)],
            ConvDirection::Wgrad => vec![("x", a, false), ("dy", b, false), ("dw", out, true)],
        }
    }

    fn signature(&self) -> String {
        format!("{:?}", self.params)
    }

    fn tf32_inputs(&self) -> Vec<usize> {
        vec![self.a, self.b]
    }

    fn build(
        &self,
        t: &[Descriptor<kind::Tensor>],
        compute: DType,
        built: &mut Built,
    ) -> Result<()> {
        let conv = conv_descriptor(&self.params, compute)?;
        let (a, b, out) = (&t[self.a], &t[self.b], &t[self.out]);
        match self.dir {
            ConvDirection::Fprop => {
                let mut d = Descriptor::<kind::ConvForwardOp>::new()?;
                d.set_descriptors(attr::OPERATION_CONVOLUTION_FORWARD_X, &[a])?;
                d.set_descriptors(attr::OPERATION_CONVOLUTION_FORWARD_W, &[b])?;
                d.set_descriptors(attr::OPERATION_CONVOLUTION_FORWARD_Y, &[out])?;
                d.set_descriptors(attr::OPERATION_CONVOLUTION_FORWARD_CONV_DESC, &[&conv])?;
                d.set(attr::OPERATION_CONVOLUTION_FORWARD_ALPHA, &[1.0])?;
                d.set(attr::OPERATION_CONVOLUTION_FORWARD_BETA, &[0.0])?;
                d.finalize()?;
                built.ops.push(Box::new(d));
            }
            ConvDirection::Dgrad => {
                let mut d = Descriptor::<kind::ConvDataOp>::new()?;
                d.set_descriptors(attr::OPERATION_CONVOLUTION_BWD_DATA_DY, &[a])?;
                d.set_descriptors(attr::OPERATION_CONVOLUTION_BWD_DATA_W, &[b])?;
                d.set_descriptors(attr::OPERATION_CONVOLUTION_BWD_DATA_DX, &[out])?;
                d.set_descriptors(attr::OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, &[&conv])?;
                d.set(attr::OPERATION_CONVOLUTION_BWD_DATA_ALPHA, &[1.0])?;
                d.set(attr::OPERATION_CONVOLUTION_BWD_DATA_BETA, &[0.0])?;
                d.finalize()?;
                built.ops.push(Box::new(d));
            }
            ConvDirection::Wgrad => {
                let mut d = Descriptor::<kind::ConvFilterOp>::new()?;
                d.set_descriptors(attr::OPERATION_CONVOLUTION_BWD_FILTER_X, &[a])?;
                d.set_descriptors(attr::OPERATION_CONVOLUTION_BWD_FILTER_DY, &[b])?;
                d.set_descriptors(attr::OPERATION_CONVOLUTION_BWD_FILTER_DW, &[out])?;
                d.set_descriptors(attr::OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, &[&conv])?;
                d.set(attr::OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, &[1.0])?;
                d.set(attr::OPERATION_CONVOLUTION_BWD_FILTER_BETA, &[0.0])?;
                d.finalize()?;
                built.ops.push(Box::new(d));
            }
        }
        built.aux.push(Box::new(conv));
        Ok(())
    }
}

fn conv_descriptor(params: &ConvParams, compute: DType) -> Result<Descriptor<kind::Convolution>> {
    let mut c = Descriptor::<kind::Convolution>::new()?;
    let spatial = i64::try_from(params.spatial_dims()).map_err(|_| {
        Error::invalid(
            "conv params",
            "too many spatial dims",
            params.spatial_dims(),
        )
    })?;
    c.set(attr::CONVOLUTION_SPATIAL_DIMS, &[spatial])?;
    c.set(attr::CONVOLUTION_COMP_TYPE, &[compute.raw()])?;
    let mode = if params.flip {
        sys::cudnnConvolutionMode_t::CUDNN_CONVOLUTION
    } else {
        sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION
    };
    c.set(attr::CONVOLUTION_CONV_MODE, &[mode])?;
    c.set(attr::CONVOLUTION_PRE_PADDINGS, &params.pre_padding)?;
    c.set(attr::CONVOLUTION_POST_PADDINGS, &params.post_padding)?;
    c.set(attr::CONVOLUTION_FILTER_STRIDES, &params.stride)?;
    c.set(attr::CONVOLUTION_DILATIONS, &params.dilation)?;
    c.finalize()?;
    Ok(c)
}

impl Graph {
    /// `y = conv(x, w)`: `x` `[N, C, spatial...]`, `w` `[K, C/groups, spatial...]`.
    ///
    /// # Errors
    /// Shapes that do not fit the params (named, with both shapes).
    pub fn conv_fprop(&mut self, x: Tensor, w: Tensor, params: &ConvParams) -> Result<Tensor> {
        let op = format!("conv_fprop {}", self.label());
        let (xs, ws) = (self.node(x)?.spec.clone(), self.node(w)?.spec.clone());
        let ydims = params.output_dims(&op, xs.dims(), ws.dims())?;
        let y = self.intermediate(
            "conv_fprop",
            TensorSpec::like(self.compute_type(), &ydims, &xs)?,
        )?;
        self.push_op(ConvOp {
            dir: ConvDirection::Fprop,
            a: self.index(x)?,
            b: self.index(w)?,
            out: self.index(y)?,
            params: params.clone(),
        });
        Ok(y)
    }

    /// `dx = conv_backward_data(dy, w)`; `x_dims` are the forward input's dims
    /// (not implied by `dy` when strided), each >= 1.
    ///
    /// # Errors
    /// `x_dims` has a dim < 1; `dy` is not what the forward of `x_dims` gives.
    pub fn conv_dgrad(
        &mut self,
        dy: Tensor,
        w: Tensor,
        x_dims: &[i64],
        params: &ConvParams,
    ) -> Result<Tensor> {
        let op = format!("conv_dgrad {}", self.label());
        let (dys, ws) = (self.node(dy)?.spec.clone(), self.node(w)?.spec.clone());
        check_dims(&op, "x_dims", x_dims)?;
        let expect = params.output_dims(&op, x_dims, ws.dims())?;
        if expect != dys.dims() {
            return Err(Error::mismatch(
                format!(
                    "{op}: dy `{}` shape (the forward output of x {} and w {})",
                    self.node(dy)?.name,
                    fmt_dims(x_dims),
                    fmt_dims(ws.dims())
                ),
                fmt_dims(&expect),
                fmt_dims(dys.dims()),
            ));
        }
        let dx = self.intermediate(
            "conv_dgrad",
            TensorSpec::like(self.compute_type(), x_dims, &dys)?,
        )?;
        self.push_op(ConvOp {
            dir: ConvDirection::Dgrad,
            a: self.index(dy)?,
            b: self.index(w)?,
            out: self.index(dx)?,
            params: params.clone(),
        });
        Ok(dx)
    }

    /// `dw = conv_backward_filter(x, dy)`; `w_dims` are the filter's dims, each >= 1.
    ///
    /// # Errors
    /// `w_dims` has a dim < 1; `dy` is not what the forward of `x` and `w_dims` gives.
    pub fn conv_wgrad(
        &mut self,
        x: Tensor,
        dy: Tensor,
        w_dims: &[i64],
        params: &ConvParams,
    ) -> Result<Tensor> {
        let op = format!("conv_wgrad {}", self.label());
        let (xs, dys) = (self.node(x)?.spec.clone(), self.node(dy)?.spec.clone());
        check_dims(&op, "w_dims", w_dims)?;
        let expect = params.output_dims(&op, xs.dims(), w_dims)?;
        if expect != dys.dims() {
            return Err(Error::mismatch(
                format!(
                    "{op}: dy `{}` shape (the forward output of x {} and w {})",
                    self.node(dy)?.name,
                    fmt_dims(xs.dims()),
                    fmt_dims(w_dims)
                ),
                fmt_dims(&expect),
                fmt_dims(dys.dims()),
            ));
        }
        let dw = self.intermediate(
            "conv_wgrad",
            TensorSpec::like(self.compute_type(), w_dims, &xs)?,
        )?;
        self.push_op(ConvOp {
            dir: ConvDirection::Wgrad,
            a: self.index(x)?,
            b: self.index(dy)?,
            out: self.index(dw)?,
            params: params.clone(),
        });
        Ok(dw)
    }
}
