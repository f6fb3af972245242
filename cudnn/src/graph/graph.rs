//! The graph builder: tensors and ops in, shapes inferred and checked in Rust,
//! a finalized cuDNN operation graph out.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::backend::{AnyOperation, Descriptor, attr, kind};
use super::ops::conv::ConvParams;
use super::ops::pointwise::{Arity, Pointwise};
use super::tensor::{BYTE_ALIGNMENT, DType, TensorSpec, fmt_dims};
use crate::error::{Error, Result};
use crate::sys::cudnn as sys;

static NEXT_GRAPH: AtomicU64 = AtomicU64::new(1);

/// A tensor of a [`Graph`] (a cheap handle; it belongs to the graph that made it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tensor {
    graph: u64,
    index: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Role {
    Input,
    Virtual,
    Output,
    /// A by-value scalar (passed through the variant pack from host memory).
    Scalar(f64),
    /// A real tensor no caller binds: the plan keeps it in its workspace
    /// (the composite attention backward's row sums and dQ accumulator).
    Scratch,
}

#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub(crate) name: String,
    pub(crate) spec: TensorSpec,
    pub(crate) uid: i64,
    pub(crate) role: Role,
}

/// Reduction operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum Reduce {
    Add,
    Mul,
    Min,
    Max,
    /// Max of absolute values.
    AMax,
    Avg,
    /// Sum of absolute values.
    Norm1,
    /// Square root of the sum of squares.
    Norm2,
    /// Product of the non-zero values.
    MulNoZeros,
}

impl Reduce {
    pub(crate) fn raw(self) -> sys::cudnnReduceTensorOp_t {
        use sys::cudnnReduceTensorOp_t as R;
        match self {
            Reduce::Add => R::CUDNN_REDUCE_TENSOR_ADD,
            Reduce::Mul => R::CUDNN_REDUCE_TENSOR_MUL,
            Reduce::Min => R::CUDNN_REDUCE_TENSOR_MIN,
            Reduce::Max => R::CUDNN_REDUCE_TENSOR_MAX,
            Reduce::AMax => R::CUDNN_REDUCE_TENSOR_AMAX,
            Reduce::Avg => R::CUDNN_REDUCE_TENSOR_AVG,
            Reduce::Norm1 => R::CUDNN_REDUCE_TENSOR_NORM1,
            Reduce::Norm2 => R::CUDNN_REDUCE_TENSOR_NORM2,
            Reduce::MulNoZeros => R::CUDNN_REDUCE_TENSOR_MUL_NO_ZEROS,
        }
    }
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

#[derive(Clone, Debug)]
pub(crate) enum Op {
    Conv {
        dir: ConvDirection,
        /// fprop: x, w -> y; dgrad: dy, w -> dx; wgrad: x, dy -> dw.
        a: usize,
        b: usize,
        out: usize,
        params: ConvParams,
    },
    Matmul {
        a: usize,
        b: usize,
        c: usize,
    },
    Pointwise {
        mode: Pointwise,
        ins: Vec<usize>,
        out: usize,
    },
    Reduction {
        op: Reduce,
        x: usize,
        y: usize,
    },
    /// Extension ops (normalization, attention) build themselves.
    Ext(Arc<dyn super::ops::ExtOp>),
}

impl Op {
    fn name(&self) -> String {
        match self {
            Op::Conv { dir, .. } => match dir {
                ConvDirection::Fprop => "conv_fprop".to_string(),
                ConvDirection::Dgrad => "conv_dgrad".to_string(),
                ConvDirection::Wgrad => "conv_wgrad".to_string(),
            },
            Op::Matmul { .. } => "matmul".to_string(),
            Op::Pointwise { mode, .. } => format!("pointwise {}", mode.name()),
            Op::Reduction { op, .. } => format!("reduction {op:?}"),
            Op::Ext(e) => e.name(),
        }
    }

    /// (role, tensor) pairs: inputs first, then outputs.
    pub(crate) fn tensors(&self) -> Vec<(&'static str, usize, bool)> {
        match self {
            Op::Conv { dir, a, b, out, .. } => match dir {
                ConvDirection::Fprop => vec![("x", *a, false), ("w", *b, false), ("y", *out, true)],
                ConvDirection::Dgrad => {
                    vec![("dy", *a, false), ("w", *b, false), ("dx", *out, true)]
                }
                ConvDirection::Wgrad => {
                    vec![("x", *a, false), ("dy", *b, false), ("dw", *out, true)]
                }
            },
            Op::Matmul { a, b, c } => vec![("a", *a, false), ("b", *b, false), ("c", *c, true)],
            Op::Pointwise { mode, ins, out } => {
                let names: &[&'static str] = match mode.arity() {
                    Arity::Backward => &["dy", "x"],
                    _ => &["x", "b", "t"],
                };
                let mut v: Vec<_> = ins
                    .iter()
                    .zip(names)
                    .map(|(&i, &n)| (n, i, false))
                    .collect();
                v.push((
                    if mode.arity() == Arity::Backward {
                        "dx"
                    } else {
                        "y"
                    },
                    *out,
                    true,
                ));
                v
            }
            Op::Reduction { x, y, .. } => vec![("x", *x, false), ("y", *y, true)],
            Op::Ext(e) => e.tensors(),
        }
    }
}

/// A graph under construction: add inputs, ops and outputs, then
/// [`build`](Graph::build) it into a finalized [`OpGraph`].
///
/// Every op's output starts as a virtual intermediate of the graph's compute
/// type (f32 unless set); [`output`](Graph::output) makes one a real output
/// with a given type. UIDs are assigned by the builder (1, 2, ...).
///
/// ```no_run
/// use cudnn::graph::{ConvParams, DType, Graph, TensorSpec};
/// let mut g = Graph::new();
/// let x = g.input("x", TensorSpec::nhwc(DType::F16, &[8, 64, 56, 56])?)?;
/// let w = g.input("w", TensorSpec::nhwc(DType::F16, &[64, 64, 3, 3])?)?;
/// let b = g.input("bias", TensorSpec::nhwc(DType::F16, &[1, 64, 1, 1])?)?;
/// let y = g.conv_fprop(x, w, &ConvParams::new_2d([1, 1], [1, 1], [1, 1]))?;
/// let y = g.bias(y, b)?;
/// let y = g.relu(y)?;
/// g.output(y, DType::F16)?;
/// assert_eq!(g.dims(y)?, &[8, 64, 56, 56]);
/// # Ok::<(), cudnn::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Graph {
    id: u64,
    pub(crate) nodes: Vec<Node>,
    pub(crate) ops: Vec<Op>,
    compute: DType,
}

impl Default for Graph {
    fn default() -> Self {
        Self::new()
    }
}

impl Graph {
    /// An empty graph computing in f32.
    pub fn new() -> Self {
        Self {
            id: NEXT_GRAPH.fetch_add(1, Ordering::Relaxed),
            nodes: Vec::new(),
            ops: Vec::new(),
            compute: DType::F32,
        }
    }

    /// The compute (and intermediate) type for ops added after this call.
    pub fn set_compute_type(&mut self, dtype: DType) -> &mut Self {
        self.compute = dtype;
        self
    }

    /// The compute type.
    pub fn compute_type(&self) -> DType {
        self.compute
    }

    pub(crate) fn node(&self, t: Tensor) -> Result<&Node> {
        if t.graph != self.id {
            return Err(Error::invalid(
                "tensor",
                "belongs to another graph",
                format!("{t:?}"),
            ));
        }
        self.nodes
            .get(t.index)
            .ok_or_else(|| Error::invalid("tensor", "unknown", format!("{t:?}")))
    }

    pub(crate) fn index(&self, t: Tensor) -> Result<usize> {
        self.node(t).map(|_| t.index)
    }

    pub(crate) fn handle(&self, index: usize) -> Tensor {
        Tensor {
            graph: self.id,
            index,
        }
    }

    fn push(&mut self, name: String, spec: TensorSpec, role: Role) -> Result<Tensor> {
        if self.nodes.iter().any(|n| n.name == name) {
            return Err(Error::invalid(
                "tensor name",
                "must be unique in the graph",
                name,
            ));
        }
        let uid = i64::try_from(self.nodes.len() + 1)
            .map_err(|_| Error::invalid("graph", "too many tensors", self.nodes.len()))?;
        self.nodes.push(Node {
            name,
            spec,
            uid,
            role,
        });
        Ok(self.handle(self.nodes.len() - 1))
    }

    /// A graph input (bound to a device buffer at execution).
    ///
    /// # Errors
    /// The name is taken.
    pub fn input(&mut self, name: &str, spec: TensorSpec) -> Result<Tensor> {
        self.push(name.to_string(), spec, Role::Input)
    }

    /// A by-value scalar of `rank` dims (all 1), passed from host memory at
    /// execution (no buffer to bind).
    ///
    /// # Errors
    /// Rank out of 1..=8.
    pub fn scalar(&mut self, value: f64, dtype: DType, rank: usize) -> Result<Tensor> {
        let dims = vec![1i64; rank];
        let spec = TensorSpec::new(dtype, &dims, &dims)?;
        let name = format!("scalar{}", self.nodes.len() + 1);
        self.push(name, spec, Role::Scalar(value))
    }

    pub(crate) fn intermediate(&mut self, op: &str, spec: TensorSpec) -> Result<Tensor> {
        let name = format!("{op}#{}.out{}", self.ops.len(), self.nodes.len() + 1);
        self.push(name, spec, Role::Virtual)
    }

    /// A real tensor of the plan's own (in its workspace, nothing to bind).
    pub(crate) fn scratch(&mut self, op: &str, spec: TensorSpec) -> Result<Tensor> {
        // Its size is what the plan reserves: it must be representable.
        spec.span_bytes()?;
        let name = format!("{op}#{}.scratch{}", self.ops.len(), self.nodes.len() + 1);
        self.push(name, spec, Role::Scratch)
    }

    pub(crate) fn push_op(&mut self, op: Op) {
        self.ops.push(op);
    }

    /// Make an op's result a graph output of type `dtype` (bound to a device
    /// buffer at execution); it keeps its layout.
    ///
    /// # Errors
    /// `t` is an input or scalar, or already an output.
    pub fn output(&mut self, t: Tensor, dtype: DType) -> Result<()> {
        let i = self.index(t)?;
        let n = &mut self.nodes[i];
        match n.role {
            Role::Virtual => {
                n.role = Role::Output;
                n.spec = n.spec.with_dtype(dtype);
                Ok(())
            }
            _ => Err(Error::invalid(
                format!("output `{}`", n.name),
                "must be an op's result that is not yet an output",
                format!("{:?}", n.role),
            )),
        }
    }

    /// Rename a tensor (names are how plans bind buffers).
    ///
    /// # Errors
    /// The name is taken.
    pub fn rename(&mut self, t: Tensor, name: &str) -> Result<()> {
        let i = self.index(t)?;
        if self
            .nodes
            .iter()
            .enumerate()
            .any(|(j, n)| j != i && n.name == name)
        {
            return Err(Error::invalid(
                "tensor name",
                "must be unique in the graph",
                name,
            ));
        }
        self.nodes[i].name = name.to_string();
        Ok(())
    }

    /// A tensor's dims.
    ///
    /// # Errors
    /// Not a tensor of this graph.
    pub fn dims(&self, t: Tensor) -> Result<&[i64]> {
        Ok(self.node(t)?.spec.dims())
    }

    /// A tensor's spec (type and layout).
    ///
    /// # Errors
    /// Not a tensor of this graph.
    pub fn spec(&self, t: Tensor) -> Result<&TensorSpec> {
        Ok(&self.node(t)?.spec)
    }

    /// A tensor's name.
    ///
    /// # Errors
    /// Not a tensor of this graph.
    pub fn name(&self, t: Tensor) -> Result<&str> {
        Ok(&self.node(t)?.name)
    }

    fn label(&self) -> String {
        format!("op #{}", self.ops.len())
    }

    // ---- convolution ----

    /// `y = conv(x, w)`: `x` `[N, C, spatial...]`, `w` `[K, C/groups, spatial...]`.
    ///
    /// # Errors
    /// Shapes that do not fit the params (named, with both shapes).
    pub fn conv_fprop(&mut self, x: Tensor, w: Tensor, params: &ConvParams) -> Result<Tensor> {
        let op = format!("conv_fprop {}", self.label());
        let (xs, ws) = (self.node(x)?.spec.clone(), self.node(w)?.spec.clone());
        let ydims = params.output_dims(&op, xs.dims(), ws.dims())?;
        let y = self.intermediate("conv_fprop", TensorSpec::like(self.compute, &ydims, &xs)?)?;
        self.push_op(Op::Conv {
            dir: ConvDirection::Fprop,
            a: x.index,
            b: w.index,
            out: y.index,
            params: params.clone(),
        });
        Ok(y)
    }

    /// `dx = conv_backward_data(dy, w)`; `x_dims` are the forward input's dims
    /// (not implied by `dy` when strided).
    ///
    /// # Errors
    /// `dy` is not what the forward of `x_dims` gives.
    pub fn conv_dgrad(
        &mut self,
        dy: Tensor,
        w: Tensor,
        x_dims: &[i64],
        params: &ConvParams,
    ) -> Result<Tensor> {
        let op = format!("conv_dgrad {}", self.label());
        let (dys, ws) = (self.node(dy)?.spec.clone(), self.node(w)?.spec.clone());
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
        let dx = self.intermediate("conv_dgrad", TensorSpec::like(self.compute, x_dims, &dys)?)?;
        self.push_op(Op::Conv {
            dir: ConvDirection::Dgrad,
            a: dy.index,
            b: w.index,
            out: dx.index,
            params: params.clone(),
        });
        Ok(dx)
    }

    /// `dw = conv_backward_filter(x, dy)`; `w_dims` are the filter's dims.
    ///
    /// # Errors
    /// `dy` is not what the forward of `x` and `w_dims` gives.
    pub fn conv_wgrad(
        &mut self,
        x: Tensor,
        dy: Tensor,
        w_dims: &[i64],
        params: &ConvParams,
    ) -> Result<Tensor> {
        let op = format!("conv_wgrad {}", self.label());
        let (xs, dys) = (self.node(x)?.spec.clone(), self.node(dy)?.spec.clone());
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
        let dw = self.intermediate("conv_wgrad", TensorSpec::like(self.compute, w_dims, &xs)?)?;
        self.push_op(Op::Conv {
            dir: ConvDirection::Wgrad,
            a: x.index,
            b: dy.index,
            out: dw.index,
            params: params.clone(),
        });
        Ok(dw)
    }

    // ---- matmul ----

    /// `c = a @ b`: `a` `[batch..., M, K]`, `b` `[batch..., K, N]`, the same
    /// rank (2 to 8); batch dims equal or 1 (broadcast). Transposes are
    /// strides: pass `b` with swapped strides for `a @ bᵀ`.
    ///
    /// # Errors
    /// Ranks differ, inner dims differ, or batch dims do not broadcast.
    pub fn matmul(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        let op = format!("matmul {}", self.label());
        let (as_, bs) = (self.node(a)?.spec.clone(), self.node(b)?.spec.clone());
        let (ad, bd) = (as_.dims(), bs.dims());
        if ad.len() != bd.len() || ad.len() < 2 {
            return Err(Error::mismatch(
                format!("{op}: a and b ranks (equal, at least 2)"),
                format!("rank {} for both", ad.len().max(2)),
                format!("a {} and b {}", fmt_dims(ad), fmt_dims(bd)),
            ));
        }
        let r = ad.len();
        if ad[r - 1] != bd[r - 2] {
            return Err(Error::mismatch(
                format!(
                    "{op}: inner dims (a's last = b's second to last): a {} b {}",
                    fmt_dims(ad),
                    fmt_dims(bd)
                ),
                ad[r - 1],
                bd[r - 2],
            ));
        }
        let mut cd = broadcast(&op, &ad[..r - 2], &bd[..r - 2])?;
        cd.push(ad[r - 2]);
        cd.push(bd[r - 1]);
        let c = self.intermediate("matmul", TensorSpec::row_major(self.compute, &cd)?)?;
        self.push_op(Op::Matmul {
            a: a.index,
            b: b.index,
            c: c.index,
        });
        Ok(c)
    }

    // ---- pointwise ----

    /// Any pointwise mode: `inputs` as the mode's arity needs (unary: x;
    /// binary: x, b; ternary: x, b, t; backward: dy, x). Binary inputs
    /// broadcast (each dim equal or 1; same rank).
    ///
    /// # Errors
    /// Wrong input count, ranks differ, or dims do not broadcast.
    pub fn pointwise(&mut self, mode: Pointwise, inputs: &[Tensor]) -> Result<Tensor> {
        let op = format!("pointwise {} {}", mode.name(), self.label());
        let want = match mode.arity() {
            Arity::Unary => 1,
            Arity::Binary | Arity::Backward => 2,
            Arity::Ternary => 3,
        };
        if inputs.len() != want {
            return Err(Error::mismatch(
                format!("{op}: number of inputs"),
                want,
                inputs.len(),
            ));
        }
        let specs: Vec<TensorSpec> = inputs
            .iter()
            .map(|&t| self.node(t).map(|n| n.spec.clone()))
            .collect::<Result<_>>()?;
        let mut dims = specs[0].dims().to_vec();
        for s in &specs[1..] {
            dims = broadcast(&op, &dims, s.dims())?;
        }
        // Layout of the first full-size input.
        let like = specs
            .iter()
            .find(|s| s.dims() == dims.as_slice())
            .unwrap_or(&specs[0]);
        let dtype = if mode.is_logical() {
            DType::Bool
        } else {
            self.compute
        };
        let out = self.intermediate("pointwise", TensorSpec::like(dtype, &dims, like)?)?;
        let ins = inputs.iter().map(|t| t.index).collect();
        self.push_op(Op::Pointwise {
            mode,
            ins,
            out: out.index,
        });
        Ok(out)
    }

    /// `x + b` (broadcast).
    ///
    /// # Errors
    /// As [`pointwise`](Self::pointwise).
    pub fn add(&mut self, x: Tensor, b: Tensor) -> Result<Tensor> {
        self.pointwise(Pointwise::Add, &[x, b])
    }
    /// `x - b`.
    ///
    /// # Errors
    /// As [`pointwise`](Self::pointwise).
    pub fn sub(&mut self, x: Tensor, b: Tensor) -> Result<Tensor> {
        self.pointwise(Pointwise::Sub, &[x, b])
    }
    /// `x * b`.
    ///
    /// # Errors
    /// As [`pointwise`](Self::pointwise).
    pub fn mul(&mut self, x: Tensor, b: Tensor) -> Result<Tensor> {
        self.pointwise(Pointwise::Mul, &[x, b])
    }
    /// `x / b`.
    ///
    /// # Errors
    /// As [`pointwise`](Self::pointwise).
    pub fn div(&mut self, x: Tensor, b: Tensor) -> Result<Tensor> {
        self.pointwise(Pointwise::Div, &[x, b])
    }
    /// `x + bias`, `bias` broadcast (e.g. `[1, C, 1, 1]`).
    ///
    /// # Errors
    /// As [`pointwise`](Self::pointwise).
    pub fn bias(&mut self, x: Tensor, bias: Tensor) -> Result<Tensor> {
        self.pointwise(Pointwise::Add, &[x, bias])
    }
    /// `x * s` with a by-value scalar `s`.
    ///
    /// # Errors
    /// As [`pointwise`](Self::pointwise).
    pub fn scale(&mut self, x: Tensor, s: f64) -> Result<Tensor> {
        let rank = self.dims(x)?.len();
        let s = self.scalar(s, DType::F32, rank)?;
        self.pointwise(Pointwise::Mul, &[x, s])
    }
    /// `max(x, 0)`.
    ///
    /// # Errors
    /// As [`pointwise`](Self::pointwise).
    pub fn relu(&mut self, x: Tensor) -> Result<Tensor> {
        self.pointwise(Pointwise::Relu, &[x])
    }
    /// GELU (erf form).
    ///
    /// # Errors
    /// As [`pointwise`](Self::pointwise).
    pub fn gelu(&mut self, x: Tensor) -> Result<Tensor> {
        self.pointwise(Pointwise::Gelu, &[x])
    }
    /// Sigmoid.
    ///
    /// # Errors
    /// As [`pointwise`](Self::pointwise).
    pub fn sigmoid(&mut self, x: Tensor) -> Result<Tensor> {
        self.pointwise(Pointwise::Sigmoid, &[x])
    }
    /// Tanh.
    ///
    /// # Errors
    /// As [`pointwise`](Self::pointwise).
    pub fn tanh(&mut self, x: Tensor) -> Result<Tensor> {
        self.pointwise(Pointwise::Tanh, &[x])
    }
    /// ReLU backward: `dx = dy * (x > 0)`.
    ///
    /// # Errors
    /// As [`pointwise`](Self::pointwise).
    pub fn relu_backward(&mut self, dy: Tensor, x: Tensor) -> Result<Tensor> {
        self.pointwise(Pointwise::ReluBwd, &[dy, x])
    }

    // ---- reduction ----

    /// Reduce `x` to `out_dims` (each dim 1 or equal to x's).
    ///
    /// # Errors
    /// Ranks differ or a dim is neither 1 nor x's.
    pub fn reduction(&mut self, op: Reduce, x: Tensor, out_dims: &[i64]) -> Result<Tensor> {
        let label = format!("reduction {op:?} {}", self.label());
        let xs = self.node(x)?.spec.clone();
        if out_dims.len() != xs.dims().len() {
            return Err(Error::mismatch(
                format!("{label}: output rank"),
                xs.dims().len(),
                out_dims.len(),
            ));
        }
        for (i, (&o, &d)) in out_dims.iter().zip(xs.dims()).enumerate() {
            if o != 1 && o != d {
                return Err(Error::invalid(
                    format!("{label}: out_dims[{i}]"),
                    format!("must be 1 or x's dim {d} (x {})", fmt_dims(xs.dims())),
                    o,
                ));
            }
        }
        let y = self.intermediate("reduction", TensorSpec::like(self.compute, out_dims, &xs)?)?;
        self.push_op(Op::Reduction {
            op,
            x: x.index,
            y: y.index,
        });
        Ok(y)
    }

    // ---- build ----

    /// A canonical text of the graph (tensors with types and layouts, ops
    /// with params), the cache key's graph part. Names are included, since
    /// plans bind buffers by name.
    pub fn signature(&self) -> String {
        let mut s = String::new();
        for n in &self.nodes {
            let role = match &n.role {
                Role::Input => "in".to_string(),
                Role::Virtual => "virt".to_string(),
                Role::Output => "out".to_string(),
                Role::Scalar(v) => format!("scalar={v:e}"),
                Role::Scratch => "scratch".to_string(),
            };
            s.push_str(&format!(
                "t{} {} {} {} {} {};",
                n.uid,
                n.name,
                role,
                n.spec.dtype(),
                fmt_dims(n.spec.dims()),
                fmt_dims(n.spec.strides())
            ));
        }
        for op in &self.ops {
            let ts: Vec<String> = op
                .tensors()
                .iter()
                .map(|(r, i, _)| format!("{r}=t{}", i + 1))
                .collect();
            let extra = match op {
                Op::Conv { params, .. } => format!("{params:?}"),
                Op::Pointwise { mode, .. } => format!("{mode:?}"),
                Op::Ext(e) => e.signature(),
                _ => String::new(),
            };
            s.push_str(&format!("{} {} {};", op.name(), ts.join(","), extra));
        }
        s
    }

    fn check_structure(&self) -> Result<()> {
        if self.ops.is_empty() {
            return Err(Error::invalid("graph", "has no operations", 0));
        }
        let mut produced = vec![0usize; self.nodes.len()];
        let mut consumed = vec![0usize; self.nodes.len()];
        for op in &self.ops {
            for (_, i, is_out) in op.tensors() {
                if is_out {
                    produced[i] += 1;
                } else {
                    consumed[i] += 1;
                }
            }
        }
        for (i, n) in self.nodes.iter().enumerate() {
            match n.role {
                Role::Virtual if consumed[i] == 0 => {
                    return Err(Error::invalid(
                        format!("tensor `{}`", n.name),
                        "is computed but neither used nor marked an output (call Graph::output)",
                        fmt_dims(n.spec.dims()),
                    ));
                }
                Role::Input if consumed[i] == 0 => {
                    return Err(Error::invalid(
                        format!("input `{}`", n.name),
                        "is not used by any op",
                        fmt_dims(n.spec.dims()),
                    ));
                }
                _ => {}
            }
            if produced[i] > 1 {
                return Err(Error::invalid(
                    format!("tensor `{}`", n.name),
                    "is written by more than one op",
                    produced[i],
                ));
            }
        }
        // Connected: union of ops through shared tensors.
        let mut group: Vec<usize> = (0..self.ops.len()).collect();
        fn find(g: &mut [usize], mut i: usize) -> usize {
            while g[i] != i {
                g[i] = g[g[i]];
                i = g[i];
            }
            i
        }
        let mut owner: Vec<Option<usize>> = vec![None; self.nodes.len()];
        for (k, op) in self.ops.iter().enumerate() {
            for (_, i, _) in op.tensors() {
                if matches!(self.nodes[i].role, Role::Scalar(_)) {
                    continue;
                }
                match owner[i] {
                    None => owner[i] = Some(k),
                    Some(o) => {
                        let (a, b) = (find(&mut group, o), find(&mut group, k));
                        group[a] = b;
                    }
                }
            }
        }
        let root = find(&mut group, 0);
        for k in 1..self.ops.len() {
            if find(&mut group, k) != root {
                return Err(Error::invalid(
                    "graph",
                    "must be connected (cuDNN offers no engine for disjoint ops); build separate graphs",
                    format!(
                        "op #{k} ({}) shares no tensor with op #0",
                        self.ops[k].name()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Check the graph and finalize it in cuDNN: every tensor, every op, then
    /// the operation graph. Needs cuDNN >= 9.8; no device.
    ///
    /// # Errors
    /// Structure errors (unused intermediates, disconnected ops) before any
    /// call; cuDNN's refusal of an op, with the op, its tensors and their
    /// shapes, and cuDNN's reason.
    pub fn build(&self) -> Result<OpGraph> {
        super::require_graph_support()?;
        super::driver::ensure()?;
        self.check_structure()?;
        let mut tensors = Vec::with_capacity(self.nodes.len());
        for n in &self.nodes {
            tensors.push(
                tensor_descriptor(n).map_err(|e| e.with_context(format!("tensor `{}`", n.name)))?,
            );
        }
        let mut built = Built::default();
        for (k, op) in self.ops.iter().enumerate() {
            let describe = || {
                let ts: Vec<String> = op
                    .tensors()
                    .iter()
                    .map(|(r, i, _)| {
                        let n = &self.nodes[*i];
                        format!(
                            "{r} `{}` {} {}",
                            n.name,
                            n.spec.dtype(),
                            fmt_dims(n.spec.dims())
                        )
                    })
                    .collect();
                format!(
                    "op #{k} {}: {} (shapes inferred by cudnn-rs)",
                    op.name(),
                    ts.join(", ")
                )
            };
            build_op(op, &tensors, self.compute, &mut built)
                .map_err(|e| e.with_context(describe()))?;
        }
        let mut graph = Descriptor::<kind::OperationGraph>::new()?;
        let ops: Vec<&dyn AnyOperation> = built
            .ops
            .iter()
            .map(|o| o.as_ref() as &dyn AnyOperation)
            .collect();
        graph.set_operations(attr::OPERATIONGRAPH_OPS, &ops)?;
        graph.finalize().map_err(|e| {
            e.with_context(format!("the operation graph of {} ops", self.ops.len()))
        })?;
        let io = IoSignature::of(self);
        // TF32 is a question only where f32 data feeds a matmul or convolution
        // (tensor-core notes on norm, attention or pointwise engines are not TF32).
        let tf32_data = self.ops.iter().any(|op| match op {
            Op::Conv { a, b, .. } | Op::Matmul { a, b, .. } => [*a, *b]
                .iter()
                .any(|&i| self.nodes[i].spec.dtype() == DType::F32),
            _ => false,
        });
        Ok(OpGraph {
            tf32_data,
            desc: graph,
            _tensors: tensors,
            _built: built,
            io: Arc::new(io),
            signature: self.signature(),
        })
    }
}

fn broadcast(op: &str, a: &[i64], b: &[i64]) -> Result<Vec<i64>> {
    if a.len() != b.len() {
        return Err(Error::mismatch(
            format!(
                "{op}: ranks of the broadcast operands {} and {}",
                fmt_dims(a),
                fmt_dims(b)
            ),
            a.len(),
            b.len(),
        ));
    }
    a.iter()
        .zip(b)
        .enumerate()
        .map(|(i, (&x, &y))| {
            if x == y || y == 1 {
                Ok(x)
            } else if x == 1 {
                Ok(y)
            } else {
                Err(Error::mismatch(
                    format!(
                        "{op}: dim {i} of {} and {} (equal, or one of them 1)",
                        fmt_dims(a),
                        fmt_dims(b)
                    ),
                    x,
                    y,
                ))
            }
        })
        .collect()
}

fn tensor_descriptor(n: &Node) -> Result<Descriptor<kind::Tensor>> {
    let mut d = Descriptor::<kind::Tensor>::new()?;
    d.set(attr::TENSOR_DATA_TYPE, &[n.spec.dtype().raw()])?;
    d.set(attr::TENSOR_DIMENSIONS, n.spec.dims())?;
    d.set(attr::TENSOR_STRIDES, n.spec.strides())?;
    d.set(attr::TENSOR_UNIQUE_ID, &[n.uid])?;
    d.set(attr::TENSOR_BYTE_ALIGNMENT, &[BYTE_ALIGNMENT as i64])?;
    match n.role {
        Role::Virtual => d.set(attr::TENSOR_IS_VIRTUAL, &[true])?,
        Role::Scalar(_) => d.set(attr::TENSOR_IS_BY_VALUE, &[true])?,
        _ => {}
    }
    d.finalize()?;
    Ok(d)
}

/// Descriptors an op graph keeps alive.
#[derive(Default)]
pub(crate) struct Built {
    pub(crate) ops: Vec<Box<dyn AnyOperation + Send>>,
    pub(crate) aux: Vec<Box<dyn std::any::Any + Send>>,
}

fn conv_descriptor(params: &ConvParams, compute: DType) -> Result<Descriptor<kind::Convolution>> {
    let mut c = Descriptor::<kind::Convolution>::new()?;
    c.set(
        attr::CONVOLUTION_SPATIAL_DIMS,
        &[params.spatial_dims() as i64],
    )?;
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

fn build_op(
    op: &Op,
    t: &[Descriptor<kind::Tensor>],
    compute: DType,
    built: &mut Built,
) -> Result<()> {
    match op {
        Op::Conv {
            dir,
            a,
            b,
            out,
            params,
        } => {
            let conv = conv_descriptor(params, compute)?;
            match dir {
                ConvDirection::Fprop => {
                    let mut d = Descriptor::<kind::ConvForwardOp>::new()?;
                    d.set_descriptors(attr::OPERATION_CONVOLUTION_FORWARD_X, &[&t[*a]])?;
                    d.set_descriptors(attr::OPERATION_CONVOLUTION_FORWARD_W, &[&t[*b]])?;
                    d.set_descriptors(attr::OPERATION_CONVOLUTION_FORWARD_Y, &[&t[*out]])?;
                    d.set_descriptors(attr::OPERATION_CONVOLUTION_FORWARD_CONV_DESC, &[&conv])?;
                    d.set(attr::OPERATION_CONVOLUTION_FORWARD_ALPHA, &[1.0])?;
                    d.set(attr::OPERATION_CONVOLUTION_FORWARD_BETA, &[0.0])?;
                    d.finalize()?;
                    built.ops.push(Box::new(d));
                }
                ConvDirection::Dgrad => {
                    let mut d = Descriptor::<kind::ConvDataOp>::new()?;
                    d.set_descriptors(attr::OPERATION_CONVOLUTION_BWD_DATA_DY, &[&t[*a]])?;
                    d.set_descriptors(attr::OPERATION_CONVOLUTION_BWD_DATA_W, &[&t[*b]])?;
                    d.set_descriptors(attr::OPERATION_CONVOLUTION_BWD_DATA_DX, &[&t[*out]])?;
                    d.set_descriptors(attr::OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, &[&conv])?;
                    d.set(attr::OPERATION_CONVOLUTION_BWD_DATA_ALPHA, &[1.0])?;
                    d.set(attr::OPERATION_CONVOLUTION_BWD_DATA_BETA, &[0.0])?;
                    d.finalize()?;
                    built.ops.push(Box::new(d));
                }
                ConvDirection::Wgrad => {
                    let mut d = Descriptor::<kind::ConvFilterOp>::new()?;
                    d.set_descriptors(attr::OPERATION_CONVOLUTION_BWD_FILTER_X, &[&t[*a]])?;
                    d.set_descriptors(attr::OPERATION_CONVOLUTION_BWD_FILTER_DY, &[&t[*b]])?;
                    d.set_descriptors(attr::OPERATION_CONVOLUTION_BWD_FILTER_DW, &[&t[*out]])?;
                    d.set_descriptors(attr::OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, &[&conv])?;
                    d.set(attr::OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, &[1.0])?;
                    d.set(attr::OPERATION_CONVOLUTION_BWD_FILTER_BETA, &[0.0])?;
                    d.finalize()?;
                    built.ops.push(Box::new(d));
                }
            }
            built.aux.push(Box::new(conv));
        }
        Op::Matmul { a, b, c } => {
            let mut m = Descriptor::<kind::Matmul>::new()?;
            m.set(attr::MATMUL_COMP_TYPE, &[compute.raw()])?;
            m.finalize()?;
            let mut d = Descriptor::<kind::MatmulOp>::new()?;
            d.set_descriptors(attr::OPERATION_MATMUL_ADESC, &[&t[*a]])?;
            d.set_descriptors(attr::OPERATION_MATMUL_BDESC, &[&t[*b]])?;
            d.set_descriptors(attr::OPERATION_MATMUL_CDESC, &[&t[*c]])?;
            d.set_descriptors(attr::OPERATION_MATMUL_DESC, &[&m])?;
            d.finalize()?;
            built.ops.push(Box::new(d));
            built.aux.push(Box::new(m));
        }
        Op::Pointwise { mode, ins, out } => {
            let pw = pointwise_descriptor(*mode, compute)?;
            let mut d = Descriptor::<kind::PointwiseOp>::new()?;
            d.set_descriptors(attr::OPERATION_POINTWISE_PW_DESCRIPTOR, &[&pw])?;
            if mode.arity() == Arity::Backward {
                d.set_descriptors(attr::OPERATION_POINTWISE_DYDESC, &[&t[ins[0]]])?;
                d.set_descriptors(attr::OPERATION_POINTWISE_XDESC, &[&t[ins[1]]])?;
                d.set_descriptors(attr::OPERATION_POINTWISE_DXDESC, &[&t[*out]])?;
            } else {
                d.set_descriptors(attr::OPERATION_POINTWISE_XDESC, &[&t[ins[0]]])?;
                if let Some(&b) = ins.get(1) {
                    d.set_descriptors(attr::OPERATION_POINTWISE_BDESC, &[&t[b]])?;
                }
                if let Some(&m) = ins.get(2) {
                    d.set_descriptors(attr::OPERATION_POINTWISE_TDESC, &[&t[m]])?;
                }
                d.set_descriptors(attr::OPERATION_POINTWISE_YDESC, &[&t[*out]])?;
            }
            d.finalize()?;
            built.ops.push(Box::new(d));
            built.aux.push(Box::new(pw));
        }
        Op::Reduction { op, x, y } => {
            let mut r = Descriptor::<kind::Reduction>::new()?;
            r.set(attr::REDUCTION_OPERATOR, &[op.raw()])?;
            r.set(attr::REDUCTION_COMP_TYPE, &[compute.raw()])?;
            r.finalize()?;
            let mut d = Descriptor::<kind::ReductionOp>::new()?;
            d.set_descriptors(attr::OPERATION_REDUCTION_XDESC, &[&t[*x]])?;
            d.set_descriptors(attr::OPERATION_REDUCTION_YDESC, &[&t[*y]])?;
            d.set_descriptors(attr::OPERATION_REDUCTION_DESC, &[&r])?;
            d.finalize()?;
            built.ops.push(Box::new(d));
            built.aux.push(Box::new(r));
        }
        Op::Ext(e) => e.build(t, compute, built)?,
    }
    Ok(())
}

fn pointwise_descriptor(mode: Pointwise, compute: DType) -> Result<Descriptor<kind::Pointwise>> {
    mode.check_loaded()?;
    let mut p = Descriptor::<kind::Pointwise>::new()?;
    p.set(attr::POINTWISE_MODE, &[mode.raw()])?;
    p.set(attr::POINTWISE_MATH_PREC, &[compute.raw()])?;
    match mode {
        Pointwise::ReluClipped {
            lower,
            upper,
            slope,
        }
        | Pointwise::ReluClippedBwd {
            lower,
            upper,
            slope,
        } => {
            p.set(attr::POINTWISE_RELU_LOWER_CLIP, &[lower])?;
            p.set(attr::POINTWISE_RELU_UPPER_CLIP, &[upper])?;
            p.set(attr::POINTWISE_RELU_LOWER_CLIP_SLOPE, &[slope])?;
        }
        Pointwise::Swish { beta } | Pointwise::SwishBwd { beta } => {
            p.set(attr::POINTWISE_SWISH_BETA, &[beta])?
        }
        Pointwise::Elu { alpha } | Pointwise::EluBwd { alpha } => {
            p.set(attr::POINTWISE_ELU_ALPHA, &[alpha])?
        }
        Pointwise::Softplus { beta } | Pointwise::SoftplusBwd { beta } => {
            p.set(attr::POINTWISE_SOFTPLUS_BETA, &[beta])?
        }
        Pointwise::GenIndex { axis } => p.set(attr::POINTWISE_AXIS, &[axis])?,
        _ => {}
    }
    p.finalize()?;
    Ok(p)
}

/// One graph input or output as a plan binds it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IoTensor {
    /// Its name in the graph.
    pub name: String,
    /// Its UID.
    pub uid: i64,
    /// Type and layout.
    pub spec: TensorSpec,
    /// Whether the plan writes it.
    pub is_output: bool,
}

/// What a plan reads and writes: the tensors to bind, and the by-value scalars it passes itself.
#[derive(Clone, Debug, PartialEq)]
pub struct IoSignature {
    /// Inputs and outputs, in UID order.
    pub tensors: Vec<IoTensor>,
    /// `(uid, dtype, value)` of each by-value scalar.
    pub scalars: Vec<(i64, DType, f64)>,
    /// `(uid, bytes)` of each tensor the plan keeps in its own workspace
    /// (nothing to bind; counted in [`Plan::workspace_size`](super::Plan::workspace_size)).
    pub scratch: Vec<(i64, usize)>,
}

impl IoSignature {
    fn of(g: &Graph) -> Self {
        let mut tensors = Vec::new();
        let mut scalars = Vec::new();
        let mut scratch = Vec::new();
        for n in &g.nodes {
            match n.role {
                Role::Input | Role::Output => tensors.push(IoTensor {
                    name: n.name.clone(),
                    uid: n.uid,
                    spec: n.spec.clone(),
                    is_output: n.role == Role::Output,
                }),
                Role::Scalar(v) => scalars.push((n.uid, n.spec.dtype(), v)),
                // `Graph::scratch` checked that the size is representable.
                Role::Scratch => scratch.push((n.uid, n.spec.span_bytes().unwrap_or(usize::MAX))),
                Role::Virtual => {}
            }
        }
        Self {
            tensors,
            scalars,
            scratch,
        }
    }
}

/// A finalized cuDNN operation graph, ready for heuristics and plans.
pub struct OpGraph {
    pub(crate) desc: Descriptor<kind::OperationGraph>,
    /// Whether f32 data feeds a matmul or convolution (where TF32 applies).
    pub(crate) tf32_data: bool,
    _tensors: Vec<Descriptor<kind::Tensor>>,
    _built: Built,
    pub(crate) io: Arc<IoSignature>,
    pub(crate) signature: String,
}

impl std::fmt::Debug for OpGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpGraph")
            .field("io", &self.io)
            .finish_non_exhaustive()
    }
}

impl OpGraph {
    /// What plans of this graph bind.
    pub fn io(&self) -> &IoSignature {
        &self.io
    }

    /// The graph's canonical text (see [`Graph::signature`]).
    pub fn signature(&self) -> &str {
        &self.signature
    }

    /// The finalized operation graph descriptor (for the backend layer).
    pub fn descriptor(&self) -> &Descriptor<kind::OperationGraph> {
        &self.desc
    }

    /// How many engines cuDNN has for this graph in total (`ENGINE_GLOBAL_COUNT`).
    ///
    /// # Errors
    /// cuDNN's refusal.
    pub fn engine_count(&self) -> Result<i64> {
        self.desc.get_one(attr::OPERATIONGRAPH_ENGINE_GLOBAL_COUNT)
    }
}
