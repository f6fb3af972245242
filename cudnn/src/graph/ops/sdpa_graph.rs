//! The attention ops' `Graph` methods: [`Graph::sdpa_forward`] and
//! [`Graph::sdpa_backward`] check the tensors against the [`SdpaConfig`],
//! resolve the construction ([`SdpaConfig::resolve`]) and add the SDPA
//! operation ([`sdpa_native`](super::sdpa_native)) or the composite
//! ([`sdpa_composite`](super::sdpa_composite)) with its extra inputs.

use super::sdpa::{
    SdpaBackward, SdpaConfig, SdpaForward, SdpaImpl, SdpaTrainingForward, loaded_cudnn,
};
use super::sdpa_composite::{CompositeBand, CompositeBwdOp, CompositeFwdOp};
use super::sdpa_native::{Band, Common, SdpaBwdOp, SdpaFwdOp};
use super::sdpa_types::RaggedTensor::{K, O, Q, V};
use crate::error::{Error, Result};
use crate::graph::graph::{Graph, Role, Tensor};
use crate::graph::guard::InputGuard;
use crate::graph::tensor::{DType, TensorSpec, fmt_dims};

/// The full sequence lengths as i32 (`validate` bounds them by `i32::MAX`).
fn seq_lens(cfg: &SdpaConfig) -> (i32, i32) {
    (
        i32::try_from(cfg.seq_q).unwrap_or(i32::MAX),
        i32::try_from(cfg.seq_kv).unwrap_or(i32::MAX),
    )
}

/// Whether a composite builds its band masks as cuDNN's diagonal band mask
/// operation: from cuDNN 9.21 (as NVIDIA's frontend does there), for every
/// band (the causal mask, top-left or bottom-right, and the window).
fn composite_unified(cfg: &SdpaConfig) -> Result<bool> {
    Ok(loaded_cudnn()? >= super::sdpa_composite::BAND_MASK_OPERATION && cfg.has_band())
}

impl Graph {
    fn sdpa_expect(&self, op: &str, role: &str, t: Tensor, want: &TensorSpec) -> Result<()> {
        let n = self.node(t)?;
        if n.spec.dims() != want.dims() {
            return Err(Error::mismatch(
                format!(
                    "{op}: {role} `{}` dims ([B, H, S, D] from the SdpaConfig)",
                    n.name
                ),
                fmt_dims(want.dims()),
                fmt_dims(n.spec.dims()),
            ));
        }
        if n.spec.dtype() != want.dtype() {
            return Err(Error::mismatch(
                format!("{op}: {role} `{}` element type (SdpaConfig.dtype)", n.name),
                want.dtype(),
                n.spec.dtype(),
            ));
        }
        if n.spec.strides().last() != Some(&1) {
            return Err(Error::invalid(
                format!("{op}: {role} `{}` strides", n.name),
                "must have the head dim contiguous (last stride 1)",
                fmt_dims(n.spec.strides()),
            ));
        }
        Ok(())
    }

    /// The composites name K's and V's ragged offsets by the node indices
    /// `sdpa_ragged` gives them (`next + 1`, `next + 2`): check it did.
    fn ragged_at(&self, r: Option<super::sdpa_types::SdpaRagged>, next: usize) -> Result<()> {
        let Some(r) = r else { return Ok(()) };
        for (t, want) in [(r.k, next + 1), (r.v, next + 2)] {
            if let Some(t) = t
                && self.index(t)? != want
            {
                return Err(Error::invalid(
                    "composite attention ragged offsets (internal)",
                    format!("must be node {want}"),
                    self.index(t)?,
                ));
            }
        }
        Ok(())
    }

    fn graph_output(&mut self, op: &str, spec: TensorSpec) -> Result<Tensor> {
        let t = self.intermediate(op, spec)?;
        let i = self.index(t)?;
        self.nodes[i].role = Role::Output;
        Ok(t)
    }

    /// The inputs every SDPA graph takes beside q, k, v, made in this
    /// order (their UIDs and the signature depend on it): the scale scalar,
    /// the sequence lengths (padding), the dropout seed and offset.
    /// Returns `(scale, seq, (seed, offset, p), extra)`, `extra` being the
    /// caller-visible inputs `[seq_len_q, seq_len_kv, seed, offset]`.
    #[allow(clippy::type_complexity)]
    fn sdpa_side_inputs(
        &mut self,
        cfg: &SdpaConfig,
    ) -> Result<(
        Tensor,
        Option<(usize, usize)>,
        Option<(usize, usize, f64)>,
        [Option<Tensor>; 4],
    )> {
        let base = format!("sdpa{}", self.ops.len());
        let scale = self.scalar(cfg.scale_value(), DType::F32, 4)?;
        let mut extra = [None; 4];
        let seq = if cfg.padding {
            let spec = TensorSpec::row_major(DType::I32, &[cfg.batch, 1, 1, 1])?;
            let a = self.input(&format!("{base}.seq_len_q"), spec.clone())?;
            let b = self.input(&format!("{base}.seq_len_kv"), spec)?;
            extra[0] = Some(a);
            extra[1] = Some(b);
            let (ia, ib) = (self.index(a)?, self.index(b)?);
            // The kernels use the lengths as row bounds, unchecked: plans
            // bind them only through `Bindings::seq_lengths` (checked).
            self.guarded.extend([
                (ia, InputGuard::SeqLengths { extent: cfg.seq_q }),
                (ib, InputGuard::SeqLengths { extent: cfg.seq_kv }),
            ]);
            Some((ia, ib))
        } else {
            None
        };
        let dropout = match cfg.active_dropout() {
            Some(p) => {
                let spec = TensorSpec::row_major(DType::I64, &[1, 1, 1, 1])?;
                let a = self.input(&format!("{base}.dropout_seed"), spec.clone())?;
                let b = self.input(&format!("{base}.dropout_offset"), spec)?;
                extra[2] = Some(a);
                extra[3] = Some(b);
                Some((self.index(a)?, self.index(b)?, p))
            }
            None => None,
        };
        Ok((scale, seq, dropout, extra))
    }

    /// The tensors of the native mask subgraph, made as NVIDIA's frontend
    /// makes them: the scores, the fill, for a bottom-right alignment the
    /// lengths (the padding inputs, else i32 scalars of the full lengths),
    /// the right bound's output (causal) and the left bound's output and
    /// bound (window: an f32 scalar `window` top-left, `window - seq_kv +
    /// seq_q` bottom-right with full lengths, an i32 `window` with the
    /// padding lengths).
    fn sdpa_band(&mut self, cfg: &SdpaConfig, seq: Option<(usize, usize)>) -> Result<Option<Band>> {
        if !cfg.has_band() {
            return Ok(None);
        }
        let spec = cfg.score_spec()?;
        let scores = self.intermediate("sdpa_scores", spec.clone())?;
        let bottom_right = cfg.band_needs_lengths();
        let full_lens = |g: &mut Graph| -> Result<(usize, usize)> {
            let (sq, skv) = seq_lens(cfg);
            let a = g.scalar(f64::from(sq), DType::I32, 4)?;
            let b = g.scalar(f64::from(skv), DType::I32, 4)?;
            Ok((g.index(a)?, g.index(b)?))
        };
        let right = if cfg.is_causal {
            let lens = match (bottom_right, seq) {
                (false, _) => None,
                (true, Some(s)) => Some(s),
                (true, None) => Some(full_lens(self)?),
            };
            let out = self.intermediate("sdpa_masked_scores", spec.clone())?;
            let fill = self.scalar(f64::NEG_INFINITY, DType::F32, 4)?;
            Some((self.index(out)?, self.index(fill)?, lens))
        } else {
            None
        };
        let left = match cfg.effective_window() {
            Some(w) => {
                let (bound, lens) = match (bottom_right, seq) {
                    (false, _) => (self.scalar(w as f64, DType::F32, 4)?, None),
                    (true, None) => (
                        self.scalar((w - cfg.seq_kv + cfg.seq_q) as f64, DType::F32, 4)?,
                        None,
                    ),
                    (true, Some(s)) => (self.scalar(w as f64, DType::I32, 4)?, Some(s)),
                };
                let out = self.intermediate("sdpa_window_scores", spec)?;
                let fill = self.scalar(f64::NEG_INFINITY, DType::F32, 4)?;
                Some((
                    self.index(out)?,
                    self.index(fill)?,
                    self.index(bound)?,
                    lens,
                ))
            }
            None => None,
        };
        Ok(Some(Band {
            scores: self.index(scores)?,
            right,
            left,
        }))
    }

    /// The page tables of a paged cache (graph inputs `[B, 1, pages, 1]`
    /// i32), made after the other side inputs so the UIDs of every other
    /// attention graph stay as they were.
    fn sdpa_page_tables(&mut self, cfg: &SdpaConfig) -> Result<Option<(Tensor, Tensor)>> {
        if cfg.paged.is_none() {
            return Ok(None);
        }
        let base = format!("sdpa{}", self.ops.len());
        let spec = cfg.page_table_spec()?;
        let a = self.input(&format!("{base}.page_table_k"), spec.clone())?;
        let b = self.input(&format!("{base}.page_table_v"), spec)?;
        // The device reads K and V at the pages these tables name, unchecked:
        // plans bind them only through the `unsafe` `input_page_table`.
        let (ia, ib) = (self.index(a)?, self.index(b)?);
        self.guarded
            .extend([(ia, InputGuard::PageTable), (ib, InputGuard::PageTable)]);
        Ok(Some((a, b)))
    }

    fn sdpa_common(
        &mut self,
        op: &str,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        cfg: &SdpaConfig,
    ) -> Result<(Common, [Option<Tensor>; 6])> {
        self.sdpa_expect(op, "q", q, &cfg.q_spec()?)?;
        self.sdpa_expect(op, "k", k, &cfg.k_spec()?)?;
        self.sdpa_expect(op, "v", v, &cfg.v_spec()?)?;
        let (scale, seq, dropout, extra) = self.sdpa_side_inputs(cfg)?;
        let pages = self.sdpa_page_tables(cfg)?;
        let band = self.sdpa_band(cfg, seq)?;
        let softcap = self.sdpa_softcap_native(cfg, band.map(|b| b.scores))?;
        let bias = self.sdpa_native_bias(cfg)?;
        // A paged SDPA operation with no score subgraph bounds its key
        // lengths only by the keys its page-table rows cover (pages x
        // block_size: cuDNN's kernel takes that as its S_kv, and a plan
        // reloaded from its JSON finds that extent, nothing smaller); with a
        // subgraph (a bias, masks, a softcap) its scores' key extent,
        // `seq_kv`, bounds them too, as the bias must not be read past.
        if band.is_none()
            && softcap.is_none()
            && bias.is_none()
            && let (Some(pages), Some(p), Some((_, kv))) = (cfg.pages_per_seq(), cfg.paged, seq)
            && let Some(cover) = pages.checked_mul(p.block_size)
        {
            for (i, g) in &mut self.guarded {
                if *i == kv {
                    *g = InputGuard::SeqLengths { extent: cover };
                }
            }
        }
        Ok((
            Common {
                q: self.index(q)?,
                k: self.index(k)?,
                v: self.index(v)?,
                scale: self.index(scale)?,
                seq,
                lens: seq_lens(cfg),
                dropout,
                band,
                paged: match pages {
                    Some((a, b)) => Some((self.index(a)?, self.index(b)?)),
                    None => None,
                },
                softcap,
                bias,
            },
            [
                extra[0],
                extra[1],
                extra[2],
                extra[3],
                pages.map(|p| p.0),
                pages.map(|p| p.1),
            ],
        ))
    }

    /// Attention forward for inference: `O = softmax(mask(scale * Q Kᵀ)) V`
    /// with `q`, `k`, `v` of [`SdpaConfig::q_spec`],
    /// [`k_spec`](SdpaConfig::k_spec), [`v_spec`](SdpaConfig::v_spec) dims
    /// and dtype (any strides with the head dim contiguous). `o` is a graph
    /// output; sequence-length, dropout, bias and ALiBi-slope inputs are
    /// added as the config asks ([`SdpaForward`] names them). No softmax
    /// statistics are saved: a forward for training is
    /// [`sdpa_forward_training`](Self::sdpa_forward_training).
    ///
    /// # Errors
    /// [`SdpaConfig::check`]'s errors; q / k / v dims or dtype not the
    /// config's; [`SdpaConfig::is_training`] set (a training forward is
    /// [`sdpa_forward_training`](Self::sdpa_forward_training), whose
    /// statistics are typed).
    #[doc(alias = "CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR")]
    pub fn sdpa_forward(
        &mut self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        cfg: &SdpaConfig,
    ) -> Result<SdpaForward> {
        if cfg.is_training {
            return Err(Error::invalid(
                format!(
                    "sdpa_forward op #{}: SdpaConfig::is_training",
                    self.ops.len()
                ),
                "must be false for Graph::sdpa_forward (an inference forward); \
                 a training forward is Graph::sdpa_forward_training, whose stats output is a Tensor",
                true,
            ));
        }
        Ok(self.sdpa_forward_any(q, k, v, cfg)?.map_stats(|_| ()))
    }

    /// Attention forward for training: as [`sdpa_forward`](Self::sdpa_forward),
    /// and the softmax statistics (log-sum-exp per query row, `[B, H, S_q,
    /// 1]` f32) are a graph output too, [`SdpaTrainingForward::stats`],
    /// for [`sdpa_backward`](Self::sdpa_backward). The forward is built in
    /// training mode whatever [`SdpaConfig::is_training`] says (the mode is
    /// this call's); the backward takes the same config.
    ///
    /// # Errors
    /// [`SdpaConfig::check`]'s errors for the config in training mode; q /
    /// k / v dims or dtype not the config's.
    #[doc(alias = "CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR")]
    pub fn sdpa_forward_training(
        &mut self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        cfg: &SdpaConfig,
    ) -> Result<SdpaTrainingForward> {
        let cfg = cfg.clone().training(true);
        let f = self.sdpa_forward_any(q, k, v, &cfg)?;
        match f.stats {
            Some(s) => Ok(f.map_stats(|_| s)),
            None => Err(Error::invalid(
                "sdpa_forward_training",
                "made no statistics output (an internal error)",
                "stats: None",
            )),
        }
    }

    /// The forward in the config's mode: `stats` is `Some` exactly in training.
    fn sdpa_forward_any(
        &mut self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        cfg: &SdpaConfig,
    ) -> Result<SdpaForward<Option<Tensor>>> {
        let op = format!("sdpa_forward op #{}", self.ops.len());
        cfg.validate().map_err(|e| e.with_context(op.clone()))?;
        self.sdpa_expect(&op, "q", q, &cfg.q_spec()?)?;
        self.sdpa_expect(&op, "k", k, &cfg.k_spec()?)?;
        self.sdpa_expect(&op, "v", v, &cfg.v_spec()?)?;
        self.sdpa_ragged_strides(cfg, &op, &[("q", q, Q), ("k", k, K), ("v", v, V)])?;
        let imp = cfg.resolve(false).map_err(|e| e.with_context(op.clone()))?;
        let base = format!("sdpa{}", self.ops.len());
        if imp == SdpaImpl::Composite {
            let mut f = self.sdpa_forward_composite(q, k, v, cfg)?;
            let next = self.nodes.len();
            f.ragged = self.sdpa_ragged(cfg, &base, &[(q, Q), (k, K), (v, V), (f.o, O)])?;
            self.ragged_at(f.ragged, next)?;
            return Ok(f);
        }
        let (c, extra) = self.sdpa_common(&op, q, k, v, cfg)?;
        let bias_io = c.bias.map(|b| b.public).unwrap_or_default();
        let qs = self.node(q)?.spec.clone();
        let o = self.graph_output(
            "sdpa",
            TensorSpec::like(cfg.dtype, cfg.o_spec()?.dims(), &qs)?,
        )?;
        let stats = if cfg.is_training {
            Some(self.graph_output("sdpa", cfg.stats_spec()?)?)
        } else {
            None
        };
        let (softmax, sm) = self.sdpa_softmax_forward(cfg, true)?;
        let ext = SdpaFwdOp {
            c,
            o: self.index(o)?,
            stats: stats.map(|s| self.index(s)).transpose()?,
            sm,
            cfg: cfg.clone(),
        };
        self.push_op(ext);
        let ragged = self.sdpa_ragged(cfg, &base, &[(q, Q), (k, K), (v, V), (o, O)])?;
        Ok(SdpaForward {
            o,
            stats,
            seq_len_q: extra[0],
            seq_len_kv: extra[1],
            dropout_seed: extra[2],
            dropout_offset: extra[3],
            page_table_k: extra.get(4).copied().flatten(),
            page_table_v: extra.get(5).copied().flatten(),
            ragged,
            bias: bias_io,
            softmax,
        })
    }

    /// Attention backward: dQ, dK, dV (graph outputs in the layouts of q, k,
    /// v) from the forward's inputs, its output `o`, the output gradient
    /// `d_o` (`o`'s dims) and the saved `stats` (`[B, H, S_q, 1]` f32). The
    /// config must be the forward's (masks, scale, dropout, bias, ALiBi);
    /// with [`AttnBias::dbias`](super::sdpa::AttnBias::dbias), dBias is a
    /// graph output too ([`SdpaBackward::bias`]).
    ///
    /// # Errors
    /// [`SdpaConfig::check`]'s errors; a tensor's dims or dtype not the config's.
    #[doc(alias = "CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR")]
    #[allow(clippy::too_many_arguments)]
    pub fn sdpa_backward(
        &mut self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        o: Tensor,
        d_o: Tensor,
        stats: Tensor,
        cfg: &SdpaConfig,
    ) -> Result<SdpaBackward> {
        let op = format!("sdpa_backward op #{}", self.ops.len());
        cfg.validate().map_err(|e| e.with_context(op.clone()))?;
        let os = cfg.o_spec()?;
        self.sdpa_expect(&op, "o", o, &os)?;
        self.sdpa_expect(&op, "do", d_o, &os)?;
        let ss = cfg.stats_spec()?;
        let sn = self.node(stats)?;
        if sn.spec.dims() != ss.dims() || sn.spec.dtype() != DType::F32 {
            return Err(Error::mismatch(
                format!("{op}: stats `{}` ([B, H, S_q, 1] f32)", sn.name),
                format!("f32 {}", fmt_dims(ss.dims())),
                format!("{} {}", sn.spec.dtype(), fmt_dims(sn.spec.dims())),
            ));
        }
        for (role, t, spec) in [
            ("q", q, cfg.q_spec()?),
            ("k", k, cfg.k_spec()?),
            ("v", v, cfg.v_spec()?),
        ] {
            self.sdpa_expect(&op, role, t, &spec)?;
        }
        self.sdpa_ragged_strides(
            cfg,
            &op,
            &[
                ("q", q, Q),
                ("k", k, K),
                ("v", v, V),
                ("o", o, O),
                ("do", d_o, O),
            ],
        )?;
        let imp = cfg.resolve(true).map_err(|e| e.with_context(op.clone()))?;
        let base = format!("sdpa{}", self.ops.len());
        if imp == SdpaImpl::Composite {
            self.sdpa_expect(&op, "q", q, &cfg.q_spec()?)?;
            self.sdpa_expect(&op, "k", k, &cfg.k_spec()?)?;
            self.sdpa_expect(&op, "v", v, &cfg.v_spec()?)?;
            let mut b = self.sdpa_backward_composite([q, k, v, o, d_o, stats], cfg)?;
            let next = self.nodes.len();
            b.ragged = self.sdpa_ragged(
                cfg,
                &base,
                &[
                    (q, Q),
                    (k, K),
                    (v, V),
                    (o, O),
                    (d_o, O),
                    (b.dq, Q),
                    (b.dk, K),
                    (b.dv, V),
                ],
            )?;
            self.ragged_at(b.ragged, next)?;
            return Ok(b);
        }
        let (mut c, extra) = self.sdpa_common(&op, q, k, v, cfg)?;
        let (qs, ks, vs) = (
            self.node(q)?.spec.clone(),
            self.node(k)?.spec.clone(),
            self.node(v)?.spec.clone(),
        );
        let dq = self.graph_output("sdpa_bwd", qs.clone())?;
        let dk = self.graph_output("sdpa_bwd", ks)?;
        let dv = self.graph_output("sdpa_bwd", vs)?;
        self.sdpa_native_dbias(cfg, &mut c.bias)?;
        let bias_io = c.bias.map(|b| b.public).unwrap_or_default();
        let (softmax, sm) = self.sdpa_softmax_backward(cfg)?;
        let ext = SdpaBwdOp {
            sm,
            c,
            o: self.index(o)?,
            d_o: self.index(d_o)?,
            stats: self.index(stats)?,
            dq: self.index(dq)?,
            dk: self.index(dk)?,
            dv: self.index(dv)?,
            cfg: cfg.clone(),
        };
        self.push_op(ext);
        let ragged = self.sdpa_ragged(
            cfg,
            &base,
            &[
                (q, Q),
                (k, K),
                (v, V),
                (o, O),
                (d_o, O),
                (dq, Q),
                (dk, K),
                (dv, V),
            ],
        )?;
        Ok(SdpaBackward {
            dq,
            dk,
            dv,
            seq_len_q: extra[0],
            seq_len_kv: extra[1],
            dropout_seed: extra[2],
            dropout_offset: extra[3],
            ragged,
            bias: bias_io,
            softmax,
        })
    }

    /// The graph inputs and scalars both composites take:
    /// `(scale, seq, dropout, fill, extra)`.
    #[allow(clippy::type_complexity)]
    fn composite_common(
        &mut self,
        cfg: &SdpaConfig,
    ) -> Result<(
        usize,
        Option<(usize, usize)>,
        Option<(usize, usize, f64, usize)>,
        Option<usize>,
        [Option<Tensor>; 4],
    )> {
        let (scale, seq, seeds, extra) = self.sdpa_side_inputs(cfg)?;
        let dropout = match seeds {
            Some((seed, offset, p)) => {
                let s = self.scalar(1.0 / (1.0 - p), DType::F32, 4)?;
                Some((seed, offset, p, self.index(s)?))
            }
            None => None,
        };
        // The shared fill serves the padding mask and the GEN_INDEX band
        // masks (the diagonal band mask operation has its own).
        let fill = if cfg.padding || (cfg.has_band() && !composite_unified(cfg)?) {
            // The fused engines before cuDNN 9.10 expect the lowest finite value.
            let v = if loaded_cudnn()? >= (9, 10, 0) {
                f64::NEG_INFINITY
            } else {
                f64::from(f32::MIN)
            };
            let f = self.scalar(v, DType::F32, 4)?;
            Some(self.index(f)?)
        } else {
            None
        };
        Ok((self.index(scale)?, seq, dropout, fill, extra))
    }

    /// The scalars of a composite's band masks (see [`CompositeBand`]).
    fn composite_band(
        &mut self,
        cfg: &SdpaConfig,
        seq: Option<(usize, usize)>,
    ) -> Result<CompositeBand> {
        let bottom_right = cfg.band_needs_lengths();
        // NVIDIA's frontend builds the band as cuDNN's diagonal band mask
        // operation from 9.21; so does the crate (before, its own i32
        // GEN_INDEX compares, see `sdpa`'s list of differences).
        let unified = composite_unified(cfg)?;
        let lens = match (bottom_right, seq) {
            (false, _) => None,
            (true, Some(s)) => Some(s),
            // Only the causal mask uses full lengths (the window folds them
            // into its bound).
            (true, None) if !cfg.is_causal => None,
            (true, None) => {
                let (sq, skv) = seq_lens(cfg);
                let a = self.scalar(f64::from(sq), DType::I32, 4)?;
                let b = self.scalar(f64::from(skv), DType::I32, 4)?;
                Some((self.index(a)?, self.index(b)?))
            }
        };
        let mut fills = [None; 2];
        if unified {
            for (slot, on) in fills.iter_mut().zip([cfg.is_causal, cfg.window.is_some()]) {
                if on {
                    let f = self.scalar(f64::NEG_INFINITY, DType::F32, 4)?;
                    *slot = Some(self.index(f)?);
                }
            }
        }
        let window = match cfg.effective_window() {
            Some(w) => {
                // validate_band keeps seq_q + seq_kv + w within i32.
                let bound = if bottom_right && seq.is_none() {
                    w - cfg.seq_kv + cfg.seq_q
                } else {
                    w
                };
                // The operation takes the bound as f32 unless it is
                // combined with per-batch lengths (as the frontend makes it).
                let dt = if unified && !(bottom_right && seq.is_some()) {
                    DType::F32
                } else {
                    DType::I32
                };
                let t = self.scalar(bound as f64, dt, 4)?;
                Some(self.index(t)?)
            }
            None => None,
        };
        Ok(CompositeBand {
            causal: cfg.is_causal,
            lens,
            window,
            window_lens: bottom_right && seq.is_some(),
            unified,
            fills,
        })
    }

    /// The first UID of a composite's own tensors: above the graph's (which
    /// count from 1), 2^16 per op.
    fn composite_uid_base(&self) -> Result<i64> {
        i64::try_from(self.ops.len())
            .ok()
            .filter(|&n| n < 1 << 20)
            .map(|n| (1i64 << 40) + (n << 16))
            .ok_or_else(|| Error::invalid("graph", "too many ops (at most 2^20)", self.ops.len()))
    }

    fn sdpa_forward_composite(
        &mut self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        cfg: &SdpaConfig,
    ) -> Result<SdpaForward<Option<Tensor>>> {
        let uid_base = self.composite_uid_base()?;
        let (scale, seq, dropout, fill, extra) = self.composite_common(cfg)?;
        let pages = self.sdpa_page_tables(cfg)?;
        let extra = [
            extra[0],
            extra[1],
            extra[2],
            extra[3],
            pages.map(|p| p.0),
            pages.map(|p| p.1),
        ];
        let bias = self.sdpa_composite_bias(cfg, false)?;
        let qs = self.node(q)?.spec.clone();
        let k_spec = self.node(k)?.spec.clone();
        let o = self.graph_output(
            "sdpa",
            TensorSpec::like(cfg.dtype, cfg.o_spec()?.dims(), &qs)?,
        )?;
        let stats = if cfg.is_training {
            Some(self.graph_output("sdpa", cfg.stats_spec()?)?)
        } else {
            None
        };
        let (softmax, sm) = self.sdpa_softmax_forward(cfg, false)?;
        let mut ext = CompositeFwdOp {
            sm,
            softmax_op: loaded_cudnn()? >= super::sdpa_softmax::SOFTMAX_OPERATION,
            q: self.index(q)?,
            k: self.index(k)?,
            k_ragged: None,
            v: self.index(v)?,
            scale,
            k_spec,
            dims: [
                cfg.batch,
                cfg.heads,
                cfg.seq_q,
                cfg.seq_kv,
                cfg.head_dim,
                cfg.head_dim_v,
            ],
            io: cfg.dtype,
            seq,
            dropout,
            band: self.composite_band(cfg, seq)?,
            paged: match pages {
                Some((a, b)) => Some((self.index(a)?, self.index(b)?)),
                None => None,
            },
            fill,
            softcap: self.sdpa_softcap_scalar(cfg)?,
            o: self.index(o)?,
            stats: stats.map(|s| self.index(s)).transpose()?,
            uid_base,
            cfg: cfg.clone(),
            bias,
        };
        // `sdpa_ragged` makes the offsets next, in the order Q, K, V, O
        // (the caller checks that they land here).
        if cfg.ragged && cfg.paged.is_none() {
            ext.k_ragged = Some(self.nodes.len() + 1);
        }
        self.push_op(ext);
        Ok(SdpaForward {
            o,
            stats,
            seq_len_q: extra[0],
            seq_len_kv: extra[1],
            dropout_seed: extra[2],
            dropout_offset: extra[3],
            page_table_k: extra.get(4).copied().flatten(),
            page_table_v: extra.get(5).copied().flatten(),
            ragged: None,
            bias: bias.map(|b| b.public).unwrap_or_default(),
            softmax,
        })
    }

    fn sdpa_backward_composite(
        &mut self,
        [q, k, v, o, d_o, stats]: [Tensor; 6],
        cfg: &SdpaConfig,
    ) -> Result<SdpaBackward> {
        let uid_base = self.composite_uid_base()?;
        let (scale, seq, dropout, fill, extra) = self.composite_common(cfg)?;
        let keep = self.scalar(
            cfg.active_dropout().map(|p| 1.0 - p).unwrap_or(1.0),
            DType::F32,
            4,
        )?;
        let (qs, ks, vs) = (
            self.node(q)?.spec.clone(),
            self.node(k)?.spec.clone(),
            self.node(v)?.spec.clone(),
        );
        let softmax_sum = self.scratch("sdpa_bwd", cfg.stats_spec()?)?;
        // With dBias, dQ comes straight from dS·K (NVIDIA's frontend's
        // dP-workspace form, the only one its engines take dBias in).
        let dq_accum = if cfg.has_dbias() {
            None
        } else {
            Some(self.scratch(
                "sdpa_bwd",
                TensorSpec::row_major(
                    DType::F32,
                    &[cfg.batch, cfg.heads, cfg.seq_q, cfg.head_dim],
                )?,
            )?)
        };
        let dq = self.graph_output("sdpa_bwd", qs)?;
        let dk = self.graph_output("sdpa_bwd", ks.clone())?;
        let dv = self.graph_output("sdpa_bwd", vs.clone())?;
        let bias = self.sdpa_composite_bias(cfg, true)?;
        let (softmax, sm) = self.sdpa_softmax_backward(cfg)?;
        let mut ext = CompositeBwdOp {
            sm,
            q: self.index(q)?,
            k: self.index(k)?,
            v: self.index(v)?,
            kv_ragged: None,
            o: self.index(o)?,
            d_o: self.index(d_o)?,
            stats: self.index(stats)?,
            scale,
            k_spec: ks,
            v_spec: vs,
            dims: [
                cfg.batch,
                cfg.heads,
                cfg.kv_heads,
                cfg.seq_q,
                cfg.seq_kv,
                cfg.head_dim,
                cfg.head_dim_v,
            ],
            io: cfg.dtype,
            seq,
            dropout,
            keep: self.index(keep)?,
            band: self.composite_band(cfg, seq)?,
            fill,
            repad: cfg.padding && loaded_cudnn()? < (9, 10, 0),
            softcap: self.sdpa_softcap_scalar(cfg)?,
            softmax_sum: self.index(softmax_sum)?,
            dq_accum: dq_accum.map(|t| self.index(t)).transpose()?,
            dq: self.index(dq)?,
            dk: self.index(dk)?,
            dv: self.index(dv)?,
            uid_base,
            cfg: cfg.clone(),
            bias,
        };
        // As in the forward: ragged offsets of K and V exist only for a
        // packed (not paged) K and V.
        if cfg.ragged && cfg.paged.is_none() {
            ext.kv_ragged = Some((self.nodes.len() + 1, self.nodes.len() + 2));
        }
        self.push_op(ext);
        Ok(SdpaBackward {
            dq,
            dk,
            dv,
            seq_len_q: extra[0],
            seq_len_kv: extra[1],
            dropout_seed: extra[2],
            dropout_offset: extra[3],
            ragged: None,
            bias: bias.map(|b| b.public).unwrap_or_default(),
            softmax,
        })
    }
}
