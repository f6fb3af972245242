//! Building the bias options of [`sdpa_bias`](super::sdpa_bias): the graph
//! inputs and outputs the attention ops make for them, and the SDPA
//! operation's score-subgraph ops (bias add, ALiBi) that come before its
//! diagonal-band masks. The composite's ops are in
//! `sdpa_composite_bias.rs` (a child of the composite, sharing its builder).

use super::sdpa::{BiasTensors, SdpaConfig};
use super::sdpa_composite::CompositeBias;
use crate::error::Result;
use crate::graph::backend::{AnyOperation, Descriptor, attr, kind};
use crate::graph::graph::{Graph, Role, Tensor};
use crate::graph::tensor::{DType, TensorSpec};
use crate::sys::cudnn as sys;

type M = sys::cudnnPointwiseMode_t;

/// The tensors (graph indices) of the SDPA operation's bias / ALiBi ops.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NativeBias {
    /// The subgraph's input: the scaled scores.
    pub(crate) scores: usize,
    /// `(bias input, scores + bias)`.
    pub(crate) bias: Option<(usize, usize)>,
    /// `[slopes, row index, col index, col - row, slope * (col - row), sum]`.
    pub(crate) alibi: Option<[usize; 6]>,
    /// dBias (a graph output of the backward).
    pub(crate) dbias: Option<usize>,
    /// What the caller sees.
    pub(crate) public: BiasTensors,
}

impl NativeBias {
    pub(crate) fn inputs(&self, v: &mut Vec<(&'static str, usize, bool)>) {
        v.push(("bias_scores", self.scores, false));
        if let Some((b, out)) = self.bias {
            v.push(("bias", b, false));
            v.push(("biased_scores", out, false));
        }
        if let Some([s, r, c, sub, mul, out]) = self.alibi {
            v.push(("alibi_slopes", s, false));
            v.push(("alibi_row", r, false));
            v.push(("alibi_col", c, false));
            v.push(("alibi_distance", sub, false));
            v.push(("alibi_offset", mul, false));
            v.push(("alibi_scores", out, false));
        }
        if let Some(d) = self.dbias {
            v.push(("dbias", d, true));
        }
    }

    pub(crate) fn signature(&self) -> String {
        format!(
            " bias={} alibi={} dbias={}",
            self.bias.is_some(),
            self.alibi.is_some(),
            self.dbias.is_some()
        )
    }

    /// Appends the bias and ALiBi ops to `ops`, reading `from` (the
    /// subgraph's input, or a softcap's output before them); returns the
    /// index of the last tensor they write.
    pub(crate) fn build(
        &self,
        from: usize,
        t: &[Descriptor<kind::Tensor>],
        ops: &mut Vec<Box<dyn AnyOperation + Send>>,
        aux: &mut Vec<Box<dyn std::any::Any + Send>>,
    ) -> Result<usize> {
        let mut last = from;
        let mut pw = |mode: M, math: DType, ins: &[usize], y: usize, axis: Option<i64>| {
            pointwise(t, ops, aux, mode, math, ins, y, axis)
        };
        if let Some((b, out)) = self.bias {
            pw(M::CUDNN_POINTWISE_ADD, DType::F32, &[last, b], out, None)?;
            last = out;
        }
        if let Some([s, r, c, sub, mul, out]) = self.alibi {
            pw(
                M::CUDNN_POINTWISE_GEN_INDEX,
                DType::I32,
                &[last],
                r,
                Some(2),
            )?;
            pw(
                M::CUDNN_POINTWISE_GEN_INDEX,
                DType::I32,
                &[last],
                c,
                Some(3),
            )?;
            pw(M::CUDNN_POINTWISE_SUB, DType::I32, &[c, r], sub, None)?;
            pw(M::CUDNN_POINTWISE_MUL, DType::F32, &[sub, s], mul, None)?;
            pw(M::CUDNN_POINTWISE_ADD, DType::F32, &[last, mul], out, None)?;
            last = out;
        }
        Ok(last)
    }
}

/// One pointwise op of graph tensors `ins` (x, b) into `y`.
#[allow(clippy::too_many_arguments)]
fn pointwise(
    t: &[Descriptor<kind::Tensor>],
    ops: &mut Vec<Box<dyn AnyOperation + Send>>,
    aux: &mut Vec<Box<dyn std::any::Any + Send>>,
    mode: M,
    math: DType,
    ins: &[usize],
    y: usize,
    axis: Option<i64>,
) -> Result<()> {
    let tensor = |i: usize| {
        t.get(i).ok_or_else(|| {
            crate::error::Error::invalid(
                "the attention's bias subgraph",
                "refers to a tensor the graph lacks (an internal invariant)",
                i,
            )
        })
    };
    let mut p = Descriptor::<kind::Pointwise>::new()?;
    p.set(attr::POINTWISE_MODE, &[mode])?;
    p.set(attr::POINTWISE_MATH_PREC, &[math.raw()])?;
    if let Some(a) = axis {
        p.set(attr::POINTWISE_AXIS, &[a])?;
    }
    p.finalize()?;
    let mut d = Descriptor::<kind::PointwiseOp>::new()?;
    d.set_descriptors(attr::OPERATION_POINTWISE_PW_DESCRIPTOR, &[&p])?;
    if let Some(&x) = ins.first() {
        d.set_descriptors(attr::OPERATION_POINTWISE_XDESC, &[tensor(x)?])?;
    }
    if let Some(&b) = ins.get(1) {
        d.set_descriptors(attr::OPERATION_POINTWISE_BDESC, &[tensor(b)?])?;
    }
    d.set_descriptors(attr::OPERATION_POINTWISE_YDESC, &[tensor(y)?])?;
    d.finalize()
        .map_err(|e| e.with_context("the attention's bias / ALiBi subgraph"))?;
    ops.push(Box::new(d));
    aux.push(Box::new(p));
    Ok(())
}

impl Graph {
    /// The bias and ALiBi slopes graph inputs, made after every other
    /// side input (so the UIDs of graphs without them stay as they were).
    fn sdpa_bias_inputs(&mut self, cfg: &SdpaConfig) -> Result<BiasTensors> {
        let base = format!("sdpa{}", self.ops.len());
        let mut out = BiasTensors::default();
        if cfg.bias.is_some() {
            out.bias = Some(self.input(&format!("{base}.bias"), cfg.bias_spec()?)?);
        }
        if cfg.alibi {
            out.alibi_slopes =
                Some(self.input(&format!("{base}.alibi_slopes"), cfg.alibi_slopes_spec()?)?);
        }
        Ok(out)
    }

    /// The backward's dBias output (the bias's dims and type), if asked for.
    fn sdpa_dbias_output(&mut self, cfg: &SdpaConfig) -> Result<Option<Tensor>> {
        if !cfg.has_dbias() {
            return Ok(None);
        }
        let t = self.intermediate("sdpa_bwd", cfg.bias_spec()?)?;
        let i = self.index(t)?;
        if let Some(n) = self.nodes.get_mut(i) {
            n.role = Role::Output;
        }
        Ok(Some(t))
    }

    /// The SDPA operation's bias / ALiBi tensors (inputs and the score
    /// subgraph's intermediates), `None` without either option.
    pub(crate) fn sdpa_native_bias(&mut self, cfg: &SdpaConfig) -> Result<Option<NativeBias>> {
        if cfg.bias.is_none() && !cfg.alibi {
            return Ok(None);
        }
        let public = self.sdpa_bias_inputs(cfg)?;
        let score = cfg.score_spec()?;
        let index_spec = TensorSpec::row_major(DType::I32, score.dims())?;
        let scores = self.intermediate("sdpa_bias", score.clone())?;
        let bias = match public.bias {
            Some(b) => {
                let out = self.intermediate("sdpa_bias", score.clone())?;
                Some((self.index(b)?, self.index(out)?))
            }
            None => None,
        };
        let alibi = match public.alibi_slopes {
            Some(s) => {
                let mut ids = [self.index(s)?, 0, 0, 0, 0, 0];
                for (slot, spec) in ids.iter_mut().skip(1).zip([
                    &index_spec,
                    &index_spec,
                    &index_spec,
                    &score,
                    &score,
                ]) {
                    let x = self.intermediate("sdpa_alibi", spec.clone())?;
                    *slot = self.index(x)?;
                }
                Some(ids)
            }
            None => None,
        };
        Ok(Some(NativeBias {
            scores: self.index(scores)?,
            bias,
            alibi,
            dbias: None,
            public,
        }))
    }

    /// Adds the native backward's dBias output to `bias` (if asked for).
    pub(crate) fn sdpa_native_dbias(
        &mut self,
        cfg: &SdpaConfig,
        bias: &mut Option<NativeBias>,
    ) -> Result<()> {
        if let Some(b) = bias.as_mut()
            && let Some(d) = self.sdpa_dbias_output(cfg)?
        {
            b.dbias = Some(self.index(d)?);
            b.public.dbias = Some(d);
        }
        Ok(())
    }

    /// The composite's bias / ALiBi inputs (and the backward's dBias).
    pub(crate) fn sdpa_composite_bias(
        &mut self,
        cfg: &SdpaConfig,
        backward: bool,
    ) -> Result<Option<CompositeBias>> {
        if cfg.bias.is_none() && !cfg.alibi {
            return Ok(None);
        }
        let mut public = self.sdpa_bias_inputs(cfg)?;
        if backward {
            public.dbias = self.sdpa_dbias_output(cfg)?;
        }
        let idx = |g: &Graph, t: Option<Tensor>| t.map(|t| g.index(t)).transpose();
        Ok(Some(CompositeBias {
            bias: idx(self, public.bias)?,
            slopes: idx(self, public.alibi_slopes)?,
            dbias: idx(self, public.dbias)?,
            public,
        }))
    }
}
