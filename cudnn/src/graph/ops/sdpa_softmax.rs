//! The attention softmax's extra inputs and outputs (issue 24, items 5b
//! and 6): the **row max and sum of exponentials** as separate forward
//! outputs ([`SdpaConfig::max_sum_exp`]), and **attention sinks**
//! ([`SdpaConfig::sink`], with dSink from the backward by
//! [`SdpaConfig::sink_grad`]).
//!
//! # Row max and sum of exponentials
//! With `max_sum_exp`, the forward also writes, per query row, `max` (the
//! row max of the scaled, masked scores) and `sum_exp` (the row sum of
//! `exp(S - max)`), both `[B, H, S_q, 1]` f32, packed. A caller that splits the
//! keys into chunks (split-KV decode) runs one attention per chunk and
//! combines them: with `m = max(m_a, m_b)`, `l = l_a exp(m_a - m) + l_b
//! exp(m_b - m)`, `O = (O_a l_a exp(m_a - m) + O_b l_b exp(m_b - m)) / l`
//! ([`reference::attention::combine_partials`](crate::reference::attention::combine_partials)
//! does it in f64). A fully masked row has no defined max or sum on the
//! GPU, and rows past a sequence's length (padding, ragged batches) may be
//! left as they were: the buffers are sized `[B, H, S_q, 1]` and checked
//! when bound, but only the rows of real queries hold values. With dropout
//! they are the softmax's before dropout (the keep mask scales O, not the
//! denominator). The statistics of training (`max + log(sum_exp)`) are
//! written as well in a training forward
//! ([`Graph::sdpa_forward_training`](crate::graph::Graph::sdpa_forward_training)).
//!
//! The SDPA operation writes them through its softmax sub-descriptor
//! (`CUDNN_BACKEND_OPERATION_SOFTMAX_DESCRIPTOR`, cuDNN >= 9.21); the
//! composite makes its row max and row sum graph outputs (any cuDNN the
//! composite runs on). Ragged batches keep them padded `[B, H, S_q, 1]`,
//! as the statistics.
//!
//! ```no_run
//! use cudnn::graph::{DType, Graph, Plan, Policy, SdpaConfig, Target};
//! // One half of a split-KV decode step: 1 query row against 2048 keys.
//! let cfg = SdpaConfig::new(32, 32, 1, 128, DType::BF16)
//!     .gqa(8)
//!     .kv_len(2048)
//!     .max_sum_exp(true);
//! let mut g = Graph::new();
//! let q = g.input("q", cfg.q_spec()?)?;
//! let k = g.input("k", cfg.k_spec()?)?;
//! let v = g.input("v", cfg.v_spec()?)?;
//! let f = g.sdpa_forward(q, k, v, &cfg)?;
//! let (max, sum_exp) = (f.softmax.max, f.softmax.sum_exp);
//! assert!(max.is_some() && sum_exp.is_some());
//! let (plan, _) = Plan::build(&g.build()?, &Target::preset("h200")?, &Policy::default())?;
//! # Ok::<(), cudnn::Error>(())
//! ```
//!
//! # Attention sinks
//! A sink (gpt-oss, StreamingLLM) is one extra logit per head that joins
//! every row's softmax denominator and attends to no value: a graph input
//! `[1, H, 1, 1]` f32 (a plain float tensor; its values cannot move a
//! memory access), with `max' = max(max_j S[i, j], sink)`, `sum' = sum_j
//! exp(S[i, j] - max') + exp(sink - max')`, `P = exp(S - max') / sum'` and
//! the statistics `max' + log(sum')` (`max` / `sum_exp` are `max'` /
//! `sum'`). The backward needs no sink for dQ, dK, dV (the statistics
//! carry it); with [`SdpaConfig::sink_grad`] it takes the sink as an input
//! and writes `dSink[h] = -sum_{b, i} exp(sink[h] - stats[b, h, i]) *
//! sum_t dO[b, h, i, t] O[b, h, i, t]`, `[1, H, 1, 1]` f32. The sum runs
//! over every query row the tensors hold: with padding, the rows past a
//! sequence's length must hold `dO = 0` (as a loss that ignores them
//! gives), a finite O (`0 * NaN` is NaN: zero O's padding rows if the
//! forward left them unwritten) and finite statistics.
//!
//! Rules (NVIDIA's frontend 1.32): sinks from cuDNN 9.13 (the composite),
//! the SDPA operation's softmax sub-descriptor (max / sum_exp, a sink) and
//! its backward's sink / dSink from 9.21; no sink for a single query row
//! (`seq_q = 1`: the frontend refuses decode with a sink); a ragged
//! backward with a sink from 9.26.
//!
//! ## Where this differs from NVIDIA's frontend
//! - The frontend's composite backward (1.32's header) reduces dSink as
//!   `+exp(sink - stats) * rowsum(dO ⊙ O)`; this crate writes the gradient
//!   of the loss, with the minus sign (as the frontend's own sm_80 dSink
//!   kernel does, and as the f64 reference's finite differences confirm).
//! - The frontend's composite softmax before cuDNN 9.21 writes either the
//!   statistics or max and sum_exp, not both; this crate's composite
//!   writes all three when asked (cuDNN plans it; see the host tests).

pub use super::sdpa_types::SdpaSoftmax;

use super::sdpa::SdpaConfig;
use crate::error::{Error, Result};
use crate::graph::backend::{Descriptor, attr, kind};
use crate::graph::graph::{Graph, Role, Tensor};
use crate::graph::tensor::{DType, TensorSpec};

/// cuDNN's softmax operation as a node of a composite attention forward
/// (NVIDIA's frontend builds its composite's softmax so from 9.21).
pub(crate) const SOFTMAX_OPERATION: (u32, u32, u32) = (9, 21, 0);

/// The first cuDNN with each softmax option, as `(major, minor, patch)`.
pub mod since {
    /// Attention sinks (the composite; NVIDIA's frontend refuses them before).
    pub const SINK: (u32, u32, u32) = (9, 13, 0);
    /// The SDPA operation's softmax sub-descriptor: max / sum_exp and a
    /// sink in the forward, sink / dSink in its backward.
    pub const NATIVE: (u32, u32, u32) = (9, 21, 0);
    /// A ragged (packed THD) backward with a sink.
    pub const RAGGED_SINK_BACKWARD: (u32, u32, u32) = (9, 26, 0);
}

/// Graph indices of the softmax tensors, as the op builders take them.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SoftmaxIdx {
    pub(crate) max: Option<usize>,
    pub(crate) sum_exp: Option<usize>,
    pub(crate) sink: Option<usize>,
    pub(crate) d_sink: Option<usize>,
    /// The SDPA operation's softmax input and output (virtual scores and
    /// probabilities), when it builds the sub-descriptor.
    pub(crate) xy: Option<(usize, usize)>,
}

impl SoftmaxIdx {
    pub(crate) fn push_tensors(&self, v: &mut Vec<(&'static str, usize, bool)>) {
        if let Some((x, y)) = self.xy {
            v.push(("softmax_scores", x, false));
            v.push(("softmax_probs", y, false));
        }
        if let Some(s) = self.sink {
            v.push(("sink", s, false));
        }
        if let Some(m) = self.max {
            v.push(("max", m, true));
        }
        if let Some(s) = self.sum_exp {
            v.push(("sum_exp", s, true));
        }
        if let Some(d) = self.d_sink {
            v.push(("d_sink", d, true));
        }
    }

    /// The op signature's suffix: empty without these options (so every
    /// other attention graph keeps its signature and cache key).
    pub(crate) fn signature(&self) -> String {
        if self.max.is_none() && self.sink.is_none() && self.d_sink.is_none() {
            return String::new();
        }
        format!(
            " max_sum_exp={} sink={} d_sink={}",
            self.max.is_some(),
            self.sink.is_some(),
            self.d_sink.is_some()
        )
    }

    /// The SDPA forward's softmax sub-descriptor (statistics, max,
    /// sum_exp, sink), set on `d`; `false` (nothing set) when the config
    /// asks for none of max / sum_exp / sink (the statistics then go
    /// straight on the operation).
    pub(crate) fn set_native_forward(
        &self,
        d: &mut Descriptor<kind::SdpaForwardOp>,
        t: &[Descriptor<kind::Tensor>],
        stats: Option<usize>,
        built: &mut super::Built,
    ) -> Result<bool> {
        let Some((x, y)) = self.xy else {
            return Ok(false);
        };
        let mut s = Descriptor::<kind::SoftmaxOp>::new()?;
        s.set_descriptors(attr::OPERATION_SOFTMAX_XDESC, &[&t[x]])?;
        s.set_descriptors(attr::OPERATION_SOFTMAX_YDESC, &[&t[y]])?;
        if let Some(st) = stats {
            s.set_descriptors(attr::OPERATION_SOFTMAX_STATS_DESC, &[&t[st]])?;
        }
        if let Some(m) = self.max {
            s.set_descriptors(attr::OPERATION_SOFTMAX_MAX_DESC, &[&t[m]])?;
        }
        if let Some(l) = self.sum_exp {
            s.set_descriptors(attr::OPERATION_SOFTMAX_SUM_EXP_DESC, &[&t[l]])?;
        }
        if let Some(k) = self.sink {
            s.set_descriptors(attr::OPERATION_SOFTMAX_SINK_DESC, &[&t[k]])?;
        }
        s.finalize()
            .map_err(|e| e.with_context("the attention's softmax sub-descriptor"))?;
        d.set_descriptors(attr::OPERATION_SDPA_FWD_SOFTMAX_DESC, &[&s])?;
        built.aux.push(Box::new(s));
        Ok(true)
    }

    /// The SDPA backward's sink and dSink.
    pub(crate) fn set_native_backward(
        &self,
        d: &mut Descriptor<kind::SdpaBackwardOp>,
        t: &[Descriptor<kind::Tensor>],
    ) -> Result<()> {
        if let Some(k) = self.sink {
            d.set_descriptors(attr::OPERATION_SDPA_BWD_SINK_DESC, &[&t[k]])?;
        }
        if let Some(g) = self.d_sink {
            d.set_descriptors(attr::OPERATION_SDPA_BWD_DSINK_DESC, &[&t[g]])?;
        }
        Ok(())
    }
}

fn fmt_version(v: (u32, u32, u32)) -> String {
    format!("{}.{}.{}", v.0, v.1, v.2)
}

impl SdpaConfig {
    /// Also output the row max and the row sum of exponentials (forward;
    /// see [`max_sum_exp`](Self::max_sum_exp) the field, and the
    /// [module docs](super::sdpa_softmax)).
    pub fn max_sum_exp(mut self, on: bool) -> Self {
        self.max_sum_exp = on;
        self
    }
    /// With an attention sink per head (a `[1, H, 1, 1]` f32 input; see the
    /// [module docs](super::sdpa_softmax)).
    pub fn sink(mut self, on: bool) -> Self {
        self.sink = on;
        self
    }
    /// The backward also writes dSink (needs [`sink`](Self::sink)).
    pub fn sink_grad(mut self, on: bool) -> Self {
        self.sink_grad = on;
        self
    }

    /// The sink logits and dSink: `[1, H, 1, 1]` f32.
    ///
    /// # Errors
    /// `heads < 1`.
    pub fn sink_spec(&self) -> Result<TensorSpec> {
        TensorSpec::row_major(DType::F32, &[1, self.heads, 1, 1]).map_err(|e| {
            Error::invalid(
                "SdpaConfig.heads (the sink's [1, H, 1, 1])",
                format!("must make a valid tensor ({e})"),
                self.heads,
            )
        })
    }

    /// The shape rules of the softmax options (no library needed).
    pub(crate) fn validate_softmax(&self) -> Result<()> {
        if self.sink_grad && !self.sink {
            return Err(Error::invalid(
                "SdpaConfig.sink_grad",
                "needs SdpaConfig.sink (dSink is the gradient of the sink input)",
                self.sink_grad,
            ));
        }
        if self.sink && self.seq_q == 1 {
            return Err(Error::Unsupported {
                what: "SdpaConfig option `sink` with seq_q = 1 (NVIDIA's frontend 1.32 refuses a sink for decode-only attention)".to_string(),
                needs: Some("seq_q > 1, or no sink".to_string()),
            });
        }
        Ok(())
    }

    /// The version rules of the softmax options for any construction.
    pub(crate) fn check_softmax(&self, v: (u32, u32, u32), backward: bool) -> Result<()> {
        let need = |what: &str, want: (u32, u32, u32)| -> Result<()> {
            if v >= want {
                return Ok(());
            }
            Err(Error::Unsupported {
                what: format!(
                    "SdpaConfig option {what} with the loaded cuDNN {}",
                    fmt_version(v)
                ),
                needs: Some(format!("cuDNN >= {}", fmt_version(want))),
            })
        };
        if self.sink {
            need("`sink`", since::SINK)?;
            if backward && self.ragged && self.sink_grad {
                need(
                    "`sink` with `ragged` in the backward",
                    since::RAGGED_SINK_BACKWARD,
                )?;
            }
        }
        Ok(())
    }

    /// The version rules of the softmax options on cuDNN's SDPA operation.
    pub(crate) fn check_softmax_native(&self, v: (u32, u32, u32), backward: bool) -> Result<()> {
        let forward_parts = !backward && (self.max_sum_exp || self.sink);
        let backward_parts = backward && self.sink_grad;
        if (forward_parts || backward_parts) && v < since::NATIVE {
            let what = if backward {
                "`sink_grad` (the SDPA backward's sink / dSink)"
            } else if self.max_sum_exp {
                "`max_sum_exp` (the SDPA operation's softmax sub-descriptor)"
            } else {
                "`sink` (the SDPA operation's softmax sub-descriptor)"
            };
            return Err(Error::Unsupported {
                what: format!(
                    "SdpaConfig option {what} with the loaded cuDNN {}",
                    fmt_version(v)
                ),
                needs: Some(format!("cuDNN >= {}", fmt_version(since::NATIVE))),
            });
        }
        Ok(())
    }
}

impl Graph {
    fn softmax_output(&mut self, spec: TensorSpec) -> Result<Tensor> {
        let t = self.intermediate("sdpa", spec)?;
        let i = self.index(t)?;
        if let Some(n) = self.nodes.get_mut(i) {
            n.role = Role::Output;
        }
        Ok(t)
    }

    /// The forward's softmax tensors: the sink input, the max and sum_exp
    /// outputs, and (`native`) the SDPA operation's softmax scores and
    /// probabilities. Made after every other tensor of the attention, so
    /// graphs without these options keep their UIDs.
    pub(crate) fn sdpa_softmax_forward(
        &mut self,
        cfg: &SdpaConfig,
        native: bool,
    ) -> Result<(SdpaSoftmax, SoftmaxIdx)> {
        let mut out = SdpaSoftmax::default();
        let mut idx = SoftmaxIdx::default();
        let base = format!("sdpa{}", self.ops.len());
        if cfg.sink {
            let s = self.input(&format!("{base}.sink"), cfg.sink_spec()?)?;
            out.sink = Some(s);
            idx.sink = Some(self.index(s)?);
        }
        if cfg.max_sum_exp {
            let m = self.softmax_output(cfg.stats_spec()?)?;
            let l = self.softmax_output(cfg.stats_spec()?)?;
            out.max = Some(m);
            out.sum_exp = Some(l);
            idx.max = Some(self.index(m)?);
            idx.sum_exp = Some(self.index(l)?);
        }
        if native && (cfg.sink || cfg.max_sum_exp) {
            let x = self.intermediate("sdpa_softmax_in", cfg.score_spec()?)?;
            let y = self.intermediate("sdpa_softmax_out", cfg.score_spec()?)?;
            idx.xy = Some((self.index(x)?, self.index(y)?));
        }
        Ok((out, idx))
    }

    /// The backward's softmax tensors: with `sink_grad`, the sink input and
    /// the dSink output.
    pub(crate) fn sdpa_softmax_backward(
        &mut self,
        cfg: &SdpaConfig,
    ) -> Result<(SdpaSoftmax, SoftmaxIdx)> {
        let mut out = SdpaSoftmax::default();
        let mut idx = SoftmaxIdx::default();
        if cfg.sink_grad {
            let base = format!("sdpa{}", self.ops.len());
            let s = self.input(&format!("{base}.sink"), cfg.sink_spec()?)?;
            let g = self.softmax_output(cfg.sink_spec()?)?;
            out.sink = Some(s);
            out.d_sink = Some(g);
            idx.sink = Some(self.index(s)?);
            idx.d_sink = Some(self.index(g)?);
        }
        Ok((out, idx))
    }
}
