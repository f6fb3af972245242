//! Normalization ops: layer norm, RMS norm and batch norm, forward
//! (training, saving the statistics the backward needs, and inference) and
//! backward (dx, dscale, dbias), through cuDNN's norm operation descriptors.
//!
//! | mode | normalized over | scale / bias | saved statistics (training) |
//! |---|---|---|---|
//! | [`NormMode::Layer`] | every dim but the first | `[1, rest...]` | mean, inverse std, `[N, 1, ...]` |
//! | [`NormMode::Rms`] | every dim but the first | `[1, rest...]` (bias optional) | inverse RMS, `[N, 1, ...]` |
//! | [`NormMode::Batch`] | every dim but the channels (dim 1) | `[1, C, 1, ...]` | mean, inverse std, `[1, C, 1, ...]` |
//!
//! Statistics are f32 graph outputs; `y` (and `dx`) are ordinary op results,
//! so pointwise ops (relu, add of a residual) fuse after them. Epsilon and
//! momentum are by-value scalars: the plan passes them itself.
//!
//! Fusing after a layer or RMS norm, cuDNN 9.28's engines want `scale` and
//! `bias` no wider than `x` (bf16 `x` with f32 parameters plans alone but
//! gets no engine once a pointwise op follows; bf16 parameters do).
//!
//! ```no_run
//! use cudnn::graph::{DType, Graph, NormPhase, TensorSpec};
//! let mut g = Graph::new();
//! let x = g.input("x", TensorSpec::row_major(DType::BF16, &[4096, 1024, 1, 1])?)?;
//! let s = g.input("scale", TensorSpec::row_major(DType::BF16, &[1, 1024, 1, 1])?)?;
//! let b = g.input("bias", TensorSpec::row_major(DType::BF16, &[1, 1024, 1, 1])?)?;
//! let n = g.layer_norm(x, s, b, 1e-5, NormPhase::Training)?;
//! let y = g.relu(n.y)?;
//! g.output(y, DType::BF16)?;
//! g.rename(y, "y")?;
//! # Ok::<(), cudnn::Error>(())
//! ```

use crate::error::{Error, Result};
use crate::graph::backend::{Descriptor, attr, kind};
use crate::graph::graph::{Graph, Role, Tensor};
use crate::graph::ops::{Built, OpNode};
use crate::graph::tensor::{DType, TensorSpec, fmt_dims};
use crate::sys::cudnn as sys;

/// Which normalization.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NormMode {
    /// Layer norm: statistics per sample over every dim but the first.
    Layer,
    /// RMS norm: no mean; inverse root mean square per sample.
    Rms,
    /// Batch norm: statistics per channel (dim 1) over the batch and spatial dims.
    Batch,
}

/// Forward phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NormPhase {
    /// Training: the statistics the backward needs are graph outputs.
    Training,
    /// Inference: no statistics are saved.
    Inference,
}

impl NormMode {
    fn raw(self) -> sys::cudnnBackendNormMode_t {
        match self {
            NormMode::Layer => sys::cudnnBackendNormMode_t::CUDNN_LAYER_NORM,
            NormMode::Rms => sys::cudnnBackendNormMode_t::CUDNN_RMS_NORM,
            NormMode::Batch => sys::cudnnBackendNormMode_t::CUDNN_BATCH_NORM,
        }
    }

    /// A short name (`"layer_norm"`).
    pub fn name(self) -> &'static str {
        match self {
            NormMode::Layer => "layer_norm",
            NormMode::Rms => "rms_norm",
            NormMode::Batch => "batch_norm",
        }
    }

    /// Whether training saves a mean (layer and batch norm; RMS norm saves only the inverse RMS).
    pub fn saves_mean(self) -> bool {
        self != NormMode::Rms
    }

    fn min_rank(self) -> usize {
        match self {
            NormMode::Batch => 3,
            _ => 2,
        }
    }

    /// The dims of scale and bias for an input of `x` dims.
    pub fn param_dims(self, x: &[i64]) -> Vec<i64> {
        match self {
            NormMode::Batch => x
                .iter()
                .enumerate()
                .map(|(i, &d)| if i == 1 { d } else { 1 })
                .collect(),
            _ => x
                .iter()
                .enumerate()
                .map(|(i, &d)| if i == 0 { 1 } else { d })
                .collect(),
        }
    }

    /// The dims of the saved statistics (mean, inverse std / RMS) for an input of `x` dims.
    pub fn stats_dims(self, x: &[i64]) -> Vec<i64> {
        match self {
            NormMode::Batch => self.param_dims(x),
            _ => x
                .iter()
                .enumerate()
                .map(|(i, &d)| if i == 0 { d } else { 1 })
                .collect(),
        }
    }
}

/// What a norm forward produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NormOutputs {
    /// The normalized, scaled and shifted result (an op result: fuse after
    /// it, or make it an output with [`Graph::output`]).
    pub y: Tensor,
    /// The saved mean (f32 graph output; layer and batch norm in training).
    pub mean: Option<Tensor>,
    /// The saved inverse std (layer, batch norm) or inverse RMS (RMS norm)
    /// (f32 graph output; training).
    pub inv_variance: Option<Tensor>,
    /// The updated running mean (f32 graph output; batch norm with running statistics).
    pub running_mean: Option<Tensor>,
    /// The updated running variance (f32 graph output; batch norm with running statistics).
    pub running_var: Option<Tensor>,
}

/// What a norm backward produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NormGrads {
    /// The input gradient (an op result: fuse after it, or make it an output).
    pub dx: Tensor,
    /// The scale gradient (f32 graph output).
    pub dscale: Tensor,
    /// The bias gradient (f32 graph output; absent for RMS norm without bias).
    pub dbias: Option<Tensor>,
}

/// Batch norm's running statistics: inputs `[1, C, 1, ...]` (f32) updated as
/// `running = (1 - momentum) * running + momentum * batch` (the variance
/// unbiased), written to new outputs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RunningStats {
    /// The running mean input.
    pub mean: Tensor,
    /// The running variance input.
    pub var: Tensor,
    /// The update factor, in `[0, 1]` (PyTorch's `momentum`).
    pub momentum: f64,
}

#[derive(Debug)]
struct NormFwdOp {
    mode: NormMode,
    phase: NormPhase,
    x: usize,
    scale: usize,
    bias: Option<usize>,
    eps: usize,
    y: usize,
    mean: Option<usize>,
    inv_var: Option<usize>,
    /// exp-avg factor, running mean in, running var in, running mean out, running var out.
    running: Option<[usize; 5]>,
}

impl OpNode for NormFwdOp {
    fn name(&self) -> String {
        format!("{} forward", self.mode.name())
    }
    fn tensors(&self) -> Vec<(&'static str, usize, bool)> {
        let mut v = vec![("x", self.x, false), ("scale", self.scale, false)];
        if let Some(b) = self.bias {
            v.push(("bias", b, false));
        }
        v.push(("epsilon", self.eps, false));
        if let Some(r) = self.running {
            v.push(("momentum", r[0], false));
            v.push(("running_mean", r[1], false));
            v.push(("running_var", r[2], false));
        }
        v.push(("y", self.y, true));
        if let Some(m) = self.mean {
            v.push(("mean", m, true));
        }
        if let Some(i) = self.inv_var {
            v.push(("inv_variance", i, true));
        }
        if let Some(r) = self.running {
            v.push(("next_running_mean", r[3], true));
            v.push(("next_running_var", r[4], true));
        }
        v
    }
    fn signature(&self) -> String {
        format!("{:?} {:?}", self.mode, self.phase)
    }
    fn honours_compute_type(&self) -> bool {
        false
    }
    fn build(
        &self,
        t: &[Descriptor<kind::Tensor>],
        _compute: DType,
        built: &mut Built,
    ) -> Result<()> {
        let phase = match self.phase {
            NormPhase::Training => sys::cudnnBackendNormFwdPhase_t::CUDNN_NORM_FWD_TRAINING,
            NormPhase::Inference => sys::cudnnBackendNormFwdPhase_t::CUDNN_NORM_FWD_INFERENCE,
        };
        let mut d = Descriptor::<kind::NormForwardOp>::new()?;
        d.set(attr::OPERATION_NORM_FWD_MODE, &[self.mode.raw()])?;
        d.set(attr::OPERATION_NORM_FWD_PHASE, &[phase])?;
        d.set_descriptors(attr::OPERATION_NORM_FWD_XDESC, &[&t[self.x]])?;
        d.set_descriptors(attr::OPERATION_NORM_FWD_SCALE_DESC, &[&t[self.scale]])?;
        if let Some(b) = self.bias {
            d.set_descriptors(attr::OPERATION_NORM_FWD_BIAS_DESC, &[&t[b]])?;
        }
        d.set_descriptors(attr::OPERATION_NORM_FWD_EPSILON_DESC, &[&t[self.eps]])?;
        d.set_descriptors(attr::OPERATION_NORM_FWD_YDESC, &[&t[self.y]])?;
        if let Some(m) = self.mean {
            d.set_descriptors(attr::OPERATION_NORM_FWD_MEAN_DESC, &[&t[m]])?;
        }
        if let Some(i) = self.inv_var {
            d.set_descriptors(attr::OPERATION_NORM_FWD_INV_VARIANCE_DESC, &[&t[i]])?;
        }
        if let Some(r) = self.running {
            d.set_descriptors(attr::OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC, &[&t[r[0]]])?;
            d.set_descriptors(
                attr::OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC,
                &[&t[r[1]]],
            )?;
            d.set_descriptors(attr::OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC, &[&t[r[2]]])?;
            d.set_descriptors(
                attr::OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC,
                &[&t[r[3]]],
            )?;
            d.set_descriptors(
                attr::OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC,
                &[&t[r[4]]],
            )?;
        }
        d.finalize()?;
        built.ops.push(Box::new(d));
        Ok(())
    }
}

#[derive(Debug)]
struct NormBwdOp {
    mode: NormMode,
    x: usize,
    dy: usize,
    scale: usize,
    mean: Option<usize>,
    inv_var: usize,
    dx: usize,
    dscale: usize,
    dbias: Option<usize>,
}

impl OpNode for NormBwdOp {
    fn name(&self) -> String {
        format!("{} backward", self.mode.name())
    }
    fn tensors(&self) -> Vec<(&'static str, usize, bool)> {
        let mut v = vec![
            ("dy", self.dy, false),
            ("x", self.x, false),
            ("scale", self.scale, false),
        ];
        if let Some(m) = self.mean {
            v.push(("mean", m, false));
        }
        v.push(("inv_variance", self.inv_var, false));
        v.push(("dx", self.dx, true));
        v.push(("dscale", self.dscale, true));
        if let Some(b) = self.dbias {
            v.push(("dbias", b, true));
        }
        v
    }
    fn signature(&self) -> String {
        format!("{:?} dbias={}", self.mode, self.dbias.is_some())
    }
    fn honours_compute_type(&self) -> bool {
        false
    }
    fn build(
        &self,
        t: &[Descriptor<kind::Tensor>],
        _compute: DType,
        built: &mut Built,
    ) -> Result<()> {
        let mut d = Descriptor::<kind::NormBackwardOp>::new()?;
        d.set(attr::OPERATION_NORM_BWD_MODE, &[self.mode.raw()])?;
        d.set_descriptors(attr::OPERATION_NORM_BWD_XDESC, &[&t[self.x]])?;
        d.set_descriptors(attr::OPERATION_NORM_BWD_DYDESC, &[&t[self.dy]])?;
        d.set_descriptors(attr::OPERATION_NORM_BWD_SCALE_DESC, &[&t[self.scale]])?;
        if let Some(m) = self.mean {
            d.set_descriptors(attr::OPERATION_NORM_BWD_MEAN_DESC, &[&t[m]])?;
        }
        d.set_descriptors(
            attr::OPERATION_NORM_BWD_INV_VARIANCE_DESC,
            &[&t[self.inv_var]],
        )?;
        d.set_descriptors(attr::OPERATION_NORM_BWD_DXDESC, &[&t[self.dx]])?;
        d.set_descriptors(attr::OPERATION_NORM_BWD_DSCALE_DESC, &[&t[self.dscale]])?;
        if let Some(b) = self.dbias {
            d.set_descriptors(attr::OPERATION_NORM_BWD_DBIAS_DESC, &[&t[b]])?;
        }
        d.finalize()?;
        built.ops.push(Box::new(d));
        Ok(())
    }
}

fn check_scalar(op: &str, what: &str, v: f64, lo: f64, hi: f64, lo_open: bool) -> Result<()> {
    let ok = v.is_finite() && (if lo_open { v > lo } else { v >= lo }) && v <= hi;
    if ok {
        Ok(())
    } else {
        let open = if lo_open { "(" } else { "[" };
        Err(Error::invalid(
            format!("{op}: {what}"),
            format!("must be finite and in {open}{lo}, {hi}]"),
            v,
        ))
    }
}

impl Graph {
    fn norm_check_dims(
        &self,
        op: &str,
        role: &str,
        t: Tensor,
        want: &[i64],
        x_dims: &[i64],
    ) -> Result<()> {
        let n = self.node(t)?;
        if n.spec.dims() != want {
            return Err(Error::mismatch(
                format!(
                    "{op}: {role} `{}` dims (for x {})",
                    n.name,
                    fmt_dims(x_dims)
                ),
                fmt_dims(want),
                fmt_dims(n.spec.dims()),
            ));
        }
        Ok(())
    }

    fn norm_x(&self, op: &str, mode: NormMode, x: Tensor) -> Result<TensorSpec> {
        let xs = self.node(x)?.spec.clone();
        if xs.dims().len() < mode.min_rank() {
            return Err(Error::invalid(
                format!("{op}: x `{}` rank", self.node(x)?.name),
                format!(
                    "must be at least {} ({})",
                    mode.min_rank(),
                    if mode == NormMode::Batch {
                        "[N, C, spatial...]"
                    } else {
                        "[N, features...]"
                    }
                ),
                fmt_dims(xs.dims()),
            ));
        }
        if !xs.dtype().is_float() {
            return Err(Error::invalid(
                format!("{op}: x `{}` element type", self.node(x)?.name),
                "must be a floating-point type",
                xs.dtype(),
            ));
        }
        Ok(xs)
    }

    /// An op result that is a graph output right away (saved statistics, weight gradients).
    fn stat_output(&mut self, op: &str, spec: TensorSpec) -> Result<Tensor> {
        let t = self.intermediate(op, spec)?;
        let i = self.index(t)?;
        self.nodes[i].role = Role::Output;
        Ok(t)
    }

    #[allow(clippy::too_many_arguments)]
    fn norm_forward(
        &mut self,
        mode: NormMode,
        x: Tensor,
        scale: Tensor,
        bias: Option<Tensor>,
        epsilon: f64,
        phase: NormPhase,
        running: Option<RunningStats>,
    ) -> Result<NormOutputs> {
        let op = format!("{} op #{}", mode.name(), self.ops.len());
        let xs = self.norm_x(&op, mode, x)?;
        let xd = xs.dims().to_vec();
        check_scalar(&op, "epsilon", epsilon, 0.0, 1.0, true)?;
        let pd = mode.param_dims(&xd);
        self.norm_check_dims(&op, "scale", scale, &pd, &xd)?;
        if let Some(b) = bias {
            self.norm_check_dims(&op, "bias", b, &pd, &xd)?;
        }
        let sd = mode.stats_dims(&xd);
        let run_idx = match running {
            Some(r) => {
                check_scalar(&op, "momentum", r.momentum, 0.0, 1.0, false)?;
                self.norm_check_dims(&op, "running mean", r.mean, &sd, &xd)?;
                self.norm_check_dims(&op, "running var", r.var, &sd, &xd)?;
                Some((self.index(r.mean)?, self.index(r.var)?, r.momentum))
            }
            None => None,
        };
        let (xi, si) = (self.index(x)?, self.index(scale)?);
        let bi = bias.map(|b| self.index(b)).transpose()?;
        let rank = xd.len();
        let eps = self.scalar(epsilon, DType::F32, rank)?;
        let y = self.intermediate(
            mode.name(),
            TensorSpec::like(self.compute_type(), &xd, &xs)?,
        )?;
        let stat_spec = TensorSpec::like(DType::F32, &sd, &xs)?;
        let (mut mean, mut inv_var) = (None, None);
        if phase == NormPhase::Training {
            if mode.saves_mean() {
                mean = Some(self.stat_output(mode.name(), stat_spec.clone())?);
            }
            inv_var = Some(self.stat_output(mode.name(), stat_spec.clone())?);
        }
        let mut running_out = None;
        let running_idx = match run_idx {
            Some((rm, rv, momentum)) => {
                let f = self.scalar(momentum, DType::F32, rank)?;
                let om = self.stat_output(mode.name(), stat_spec.clone())?;
                let ov = self.stat_output(mode.name(), stat_spec)?;
                running_out = Some((om, ov));
                Some([self.index(f)?, rm, rv, self.index(om)?, self.index(ov)?])
            }
            None => None,
        };
        let ext = NormFwdOp {
            mode,
            phase,
            x: xi,
            scale: si,
            bias: bi,
            eps: self.index(eps)?,
            y: self.index(y)?,
            mean: mean.map(|t| self.index(t)).transpose()?,
            inv_var: inv_var.map(|t| self.index(t)).transpose()?,
            running: running_idx,
        };
        self.push_op(ext);
        Ok(NormOutputs {
            y,
            mean,
            inv_variance: inv_var,
            running_mean: running_out.map(|r| r.0),
            running_var: running_out.map(|r| r.1),
        })
    }

    /// Layer norm over every dim but the first: `x` `[N, features...]`,
    /// `scale` and `bias` `[1, features...]`. Training saves the mean and
    /// inverse std (`[N, 1, ...]`, f32 outputs).
    ///
    /// # Errors
    /// `x` of rank < 2 or not floating point, scale / bias dims not
    /// `[1, features...]`, epsilon not in (0, 1].
    pub fn layer_norm(
        &mut self,
        x: Tensor,
        scale: Tensor,
        bias: Tensor,
        epsilon: f64,
        phase: NormPhase,
    ) -> Result<NormOutputs> {
        self.norm_forward(NormMode::Layer, x, scale, Some(bias), epsilon, phase, None)
    }

    /// RMS norm over every dim but the first: `y = x * inv_rms * scale (+ bias)`.
    /// Training saves the inverse RMS (`[N, 1, ...]`, f32 output; no mean).
    ///
    /// # Errors
    /// As [`layer_norm`](Self::layer_norm).
    pub fn rms_norm(
        &mut self,
        x: Tensor,
        scale: Tensor,
        bias: Option<Tensor>,
        epsilon: f64,
        phase: NormPhase,
    ) -> Result<NormOutputs> {
        self.norm_forward(NormMode::Rms, x, scale, bias, epsilon, phase, None)
    }

    /// Batch norm in training: statistics per channel of `x` `[N, C,
    /// spatial...]`; `scale`, `bias` `[1, C, 1, ...]`. Saves the batch mean
    /// and inverse std (`[1, C, 1, ...]`, f32 outputs) and, with `running`,
    /// writes the updated running statistics to two more outputs.
    ///
    /// # Errors
    /// `x` of rank < 3, scale / bias / running dims not `[1, C, 1, ...]`,
    /// epsilon not in (0, 1], momentum not in [0, 1].
    pub fn batch_norm(
        &mut self,
        x: Tensor,
        scale: Tensor,
        bias: Tensor,
        epsilon: f64,
        running: Option<RunningStats>,
    ) -> Result<NormOutputs> {
        self.norm_forward(
            NormMode::Batch,
            x,
            scale,
            Some(bias),
            epsilon,
            NormPhase::Training,
            running,
        )
    }

    /// Batch norm in inference with given statistics (`mean`, `var`, `[1, C,
    /// 1, ...]`): `y = (x - mean) / sqrt(var + epsilon) * scale + bias`, as
    /// fused pointwise ops.
    ///
    /// # Errors
    /// As [`batch_norm`](Self::batch_norm), for `mean` and `var` too.
    pub fn batch_norm_inference(
        &mut self,
        x: Tensor,
        scale: Tensor,
        bias: Tensor,
        mean: Tensor,
        var: Tensor,
        epsilon: f64,
    ) -> Result<Tensor> {
        let mode = NormMode::Batch;
        let op = format!("batch_norm_inference op #{}", self.ops.len());
        let xs = self.norm_x(&op, mode, x)?;
        let xd = xs.dims().to_vec();
        check_scalar(&op, "epsilon", epsilon, 0.0, 1.0, true)?;
        let pd = mode.param_dims(&xd);
        for (role, t) in [
            ("scale", scale),
            ("bias", bias),
            ("mean", mean),
            ("var", var),
        ] {
            self.norm_check_dims(&op, role, t, &pd, &xd)?;
        }
        let rank = xd.len();
        let eps = self.scalar(epsilon, DType::F32, rank)?;
        let centered = self.sub(x, mean)?;
        let v = self.add(var, eps)?;
        let inv_std = self.pointwise(super::pointwise::Pointwise::Rsqrt, &[v])?;
        let normed = self.mul(centered, inv_std)?;
        let scaled = self.mul(normed, scale)?;
        self.add(scaled, bias)
    }

    #[allow(clippy::too_many_arguments)]
    fn norm_backward(
        &mut self,
        mode: NormMode,
        dy: Tensor,
        x: Tensor,
        scale: Tensor,
        mean: Option<Tensor>,
        inv_variance: Tensor,
        with_dbias: bool,
    ) -> Result<NormGrads> {
        let op = format!("{}_backward op #{}", mode.name(), self.ops.len());
        let xs = self.norm_x(&op, mode, x)?;
        let xd = xs.dims().to_vec();
        self.norm_check_dims(&op, "dy", dy, &xd, &xd)?;
        let pd = mode.param_dims(&xd);
        self.norm_check_dims(&op, "scale", scale, &pd, &xd)?;
        let sd = mode.stats_dims(&xd);
        if let Some(m) = mean {
            self.norm_check_dims(&op, "mean", m, &sd, &xd)?;
        }
        self.norm_check_dims(&op, "inv_variance", inv_variance, &sd, &xd)?;
        let dx = self.intermediate(
            &format!("{}_bwd", mode.name()),
            TensorSpec::like(self.compute_type(), &xd, &xs)?,
        )?;
        let pspec = TensorSpec::like(DType::F32, &pd, &xs)?;
        let dscale = self.stat_output(&format!("{}_bwd", mode.name()), pspec.clone())?;
        let dbias = if with_dbias {
            Some(self.stat_output(&format!("{}_bwd", mode.name()), pspec)?)
        } else {
            None
        };
        let ext = NormBwdOp {
            mode,
            x: self.index(x)?,
            dy: self.index(dy)?,
            scale: self.index(scale)?,
            mean: mean.map(|m| self.index(m)).transpose()?,
            inv_var: self.index(inv_variance)?,
            dx: self.index(dx)?,
            dscale: self.index(dscale)?,
            dbias: dbias.map(|b| self.index(b)).transpose()?,
        };
        self.push_op(ext);
        Ok(NormGrads { dx, dscale, dbias })
    }

    /// Layer norm backward from the saved `mean` and `inv_variance`: dx,
    /// dscale and dbias (both f32 outputs, `[1, features...]`).
    ///
    /// # Errors
    /// `dy` not of x's dims, or scale / statistics dims not what the forward uses.
    pub fn layer_norm_backward(
        &mut self,
        dy: Tensor,
        x: Tensor,
        scale: Tensor,
        mean: Tensor,
        inv_variance: Tensor,
    ) -> Result<NormGrads> {
        self.norm_backward(
            NormMode::Layer,
            dy,
            x,
            scale,
            Some(mean),
            inv_variance,
            true,
        )
    }

    /// RMS norm backward from the saved inverse RMS: dx, dscale and (with
    /// `with_dbias`, when the forward had a bias) dbias.
    ///
    /// # Errors
    /// As [`layer_norm_backward`](Self::layer_norm_backward).
    pub fn rms_norm_backward(
        &mut self,
        dy: Tensor,
        x: Tensor,
        scale: Tensor,
        inv_rms: Tensor,
        with_dbias: bool,
    ) -> Result<NormGrads> {
        self.norm_backward(NormMode::Rms, dy, x, scale, None, inv_rms, with_dbias)
    }

    /// Batch norm backward from the saved batch `mean` and `inv_variance`
    /// (`[1, C, 1, ...]`): dx, dscale and dbias.
    ///
    /// # Errors
    /// As [`layer_norm_backward`](Self::layer_norm_backward).
    pub fn batch_norm_backward(
        &mut self,
        dy: Tensor,
        x: Tensor,
        scale: Tensor,
        mean: Tensor,
        inv_variance: Tensor,
    ) -> Result<NormGrads> {
        self.norm_backward(
            NormMode::Batch,
            dy,
            x,
            scale,
            Some(mean),
            inv_variance,
            true,
        )
    }
}
