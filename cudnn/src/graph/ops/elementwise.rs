//! Pointwise ops in the graph: the `Graph` methods (any mode, and the
//! common ones by name), broadcasting, and the op's descriptors. The modes
//! themselves are in [`pointwise`](super::pointwise).

use super::pointwise::{Arity, Pointwise};
use super::{Built, OpNode};
use crate::error::{Error, Result};
use crate::graph::backend::{Descriptor, attr, kind};
use crate::graph::graph::{Graph, Tensor};
use crate::graph::tensor::{DType, TensorSpec, fmt_dims};

/// `y = f(x[, b[, t]])` or `dx = f'(x) dy`.
#[derive(Clone, Debug)]
pub(crate) struct PointwiseOp {
    pub(crate) mode: Pointwise,
    pub(crate) ins: Vec<usize>,
    pub(crate) out: usize,
}

impl OpNode for PointwiseOp {
    fn name(&self) -> String {
        format!("pointwise {}", self.mode.name())
    }
    fn tensors(&self) -> Vec<(&'static str, usize, bool)> {
        let backward = self.mode.arity() == Arity::Backward;
        let names: &[&'static str] = if backward {
            &["dy", "x"]
        } else {
            &["x", "b", "t"]
        };
        let mut v: Vec<_> = self
            .ins
            .iter()
            .zip(names)
            .map(|(&i, &n)| (n, i, false))
            .collect();
        v.push((if backward { "dx" } else { "y" }, self.out, true));
        v
    }
    fn signature(&self) -> String {
        format!("{:?}", self.mode)
    }
    fn build(
        &self,
        t: &[Descriptor<kind::Tensor>],
        compute: DType,
        built: &mut Built,
    ) -> Result<()> {
        let input = |k: usize| {
            self.ins.get(k).map(|&i| &t[i]).ok_or_else(|| {
                Error::mismatch(
                    format!("pointwise {}: inputs", self.mode.name()),
                    k + 1,
                    self.ins.len(),
                )
            })
        };
        let pw = pointwise_descriptor(self.mode, compute)?;
        let mut d = Descriptor::<kind::PointwiseOp>::new()?;
        d.set_descriptors(attr::OPERATION_POINTWISE_PW_DESCRIPTOR, &[&pw])?;
        if self.mode.arity() == Arity::Backward {
            d.set_descriptors(attr::OPERATION_POINTWISE_DYDESC, &[input(0)?])?;
            d.set_descriptors(attr::OPERATION_POINTWISE_XDESC, &[input(1)?])?;
            d.set_descriptors(attr::OPERATION_POINTWISE_DXDESC, &[&t[self.out]])?;
        } else {
            d.set_descriptors(attr::OPERATION_POINTWISE_XDESC, &[input(0)?])?;
            if self.ins.len() > 1 {
                d.set_descriptors(attr::OPERATION_POINTWISE_BDESC, &[input(1)?])?;
            }
            if self.ins.len() > 2 {
                d.set_descriptors(attr::OPERATION_POINTWISE_TDESC, &[input(2)?])?;
            }
            d.set_descriptors(attr::OPERATION_POINTWISE_YDESC, &[&t[self.out]])?;
        }
        d.finalize()?;
        built.ops.push(Box::new(d));
        built.aux.push(Box::new(pw));
        Ok(())
    }
}

pub(crate) fn broadcast(op: &str, a: &[i64], b: &[i64]) -> Result<Vec<i64>> {
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

impl Graph {
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
            self.compute_type()
        };
        let out = self.intermediate("pointwise", TensorSpec::like(dtype, &dims, like)?)?;
        let ins = inputs
            .iter()
            .map(|&t| self.index(t))
            .collect::<Result<Vec<_>>>()?;
        self.push_op(PointwiseOp {
            mode,
            ins,
            out: self.index(out)?,
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
    /// GELU, erf (exact) form: `0.5·x·(1 + erf(x/√2))`
    /// ([`Pointwise::GeluErf`], `CUDNN_POINTWISE_GELU_FWD`; PyTorch's
    /// `nn.GELU()`). cuBLASLt's GELU epilogues are the other form,
    /// [`gelu_tanh`](Self::gelu_tanh); the two differ by up to about 5·10⁻⁴
    /// (see [`reference::gelu`](crate::reference::gelu)).
    ///
    /// # Errors
    /// As [`pointwise`](Self::pointwise).
    #[doc(alias = "CUDNN_POINTWISE_GELU_FWD")]
    pub fn gelu_erf(&mut self, x: Tensor) -> Result<Tensor> {
        self.pointwise(Pointwise::GeluErf, &[x])
    }
    /// GELU, tanh approximation:
    /// `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`
    /// ([`Pointwise::GeluTanh`], `CUDNN_POINTWISE_GELU_APPROX_TANH_FWD`): the
    /// form of cuBLASLt's GELU epilogues
    /// ([`Epilogue::GeluTanh`](crate::blas::Epilogue::GeluTanh)); PyTorch's
    /// `nn.GELU(approximate="tanh")`.
    ///
    /// # Errors
    /// As [`pointwise`](Self::pointwise).
    #[doc(alias = "CUDNN_POINTWISE_GELU_APPROX_TANH_FWD")]
    pub fn gelu_tanh(&mut self, x: Tensor) -> Result<Tensor> {
        self.pointwise(Pointwise::GeluTanh, &[x])
    }
    /// GELU, erf form: the old name of [`gelu_erf`](Self::gelu_erf).
    ///
    /// # Errors
    /// As [`pointwise`](Self::pointwise).
    #[deprecated(
        note = "renamed Graph::gelu_erf (the erf form); the tanh form is Graph::gelu_tanh"
    )]
    pub fn gelu(&mut self, x: Tensor) -> Result<Tensor> {
        self.gelu_erf(x)
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
}
