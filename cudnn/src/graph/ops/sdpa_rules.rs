//! The attention's rules: shapes and option values ([`SdpaConfig::validate`]),
//! the cuDNN versions that build each option natively or as the composite
//! ([`SdpaConfig::resolve_for`], a pure function of the version), and the
//! per-architecture head-dim limits ([`SdpaConfig::check_target_for`]), after
//! NVIDIA's frontend.

use super::sdpa::*;
use crate::error::{Error, Result};
use crate::graph::tensor::DType;

/// The last cuDNN whose composite backward needs a padding mask for a key
/// length that is not a multiple of 128 (NVIDIA's frontend: up to 9.15.0).
const LAST_NEEDING_PADDING: (u32, u32, u32) = (9, 15, 0);

fn fmt_version(v: (u32, u32, u32)) -> String {
    format!("{}.{}.{}", v.0, v.1, v.2)
}

impl SdpaConfig {
    /// Check the shapes and options, and that the loaded cuDNN can build the
    /// attention as [`implementation`](Self::implementation) asks
    /// (`backward`: for the backward): with `Native`, that its SDPA operation
    /// has every option; with `Auto`, that the construction it picks works.
    ///
    /// # Errors
    /// `InvalidArgument` naming the field for a bad shape or value;
    /// `Unsupported` naming the option and the cuDNN that has it (for `Auto`,
    /// the SDPA operation's reason), or the composite's limit.
    pub fn check(&self, backward: bool) -> Result<()> {
        self.resolve(backward).map(|_| ())
    }

    /// What the graph builder will build for this config with the loaded
    /// cuDNN: [`SdpaImpl::Native`] or [`SdpaImpl::Composite`]. `Auto` picks
    /// the SDPA operation for a forward it supports, the composite for every
    /// other forward and for every backward.
    ///
    /// # Errors
    /// As [`check`](Self::check).
    pub fn resolve(&self, backward: bool) -> Result<SdpaImpl> {
        self.validate()?;
        self.resolve_for(loaded_cudnn()?, backward)
    }

    /// What [`resolve`](Self::resolve) gives with cuDNN `cudnn` (`(major,
    /// minor, patch)`) loaded: the version rules alone, a pure function (no
    /// library needed), so they can be checked for any release.
    ///
    /// # Errors
    /// As [`check`](Self::check).
    pub fn resolve_for(&self, cudnn: (u32, u32, u32), backward: bool) -> Result<SdpaImpl> {
        self.validate()?;
        let v = cudnn;
        self.check_release(v)?;
        self.check_band(v)?;
        self.check_paged(v, backward)?;
        self.check_ragged(v, backward)?;
        self.check_bias(v, backward)?;
        self.check_softmax(v, backward)?;
        match (self.implementation, backward) {
            (SdpaImpl::Native, _) => self.check_native(v, backward).map(|_| SdpaImpl::Native),
            (SdpaImpl::Composite, _) | (SdpaImpl::Auto, true) => self
                .check_composite(v, backward)
                .map(|_| SdpaImpl::Composite),
            (SdpaImpl::Auto, false) => match self.check_native(v, false) {
                Ok(()) => Ok(SdpaImpl::Native),
                Err(native) => match self.check_composite(v, false) {
                    Ok(()) => Ok(SdpaImpl::Composite),
                    // The SDPA operation's reason names the version that has it.
                    Err(_) => Err(native),
                },
            },
        }
    }

    /// Releases whose attention NVIDIA's frontend refuses outright.
    fn check_release(&self, v: (u32, u32, u32)) -> Result<()> {
        if v == (9, 10, 0) || v == (9, 10, 1) {
            return Err(Error::Unsupported {
                what: format!(
                    "f16 / bf16 attention on the loaded cuDNN {} (known bugs; NVIDIA's frontend refuses it too)",
                    fmt_version(v)
                ),
                needs: Some("cuDNN 9.10.2 or newer".to_string()),
            });
        }
        Ok(())
    }

    fn check_composite(&self, v: (u32, u32, u32), backward: bool) -> Result<()> {
        if !backward {
            return Ok(());
        }
        if self.seq_q == 1 && self.seq_kv == 1 {
            return Err(Error::Unsupported {
                what: "the attention backward with seq_q = seq_kv = 1 (cuDNN's fused backward engines do not take it)".to_string(),
                needs: Some("seq_q > 1 or seq_kv > 1".to_string()),
            });
        }
        // cuDNN up to 9.15.0 computes the composite backward right for key
        // lengths that are not multiples of 128 only under a padding mask
        // (NVIDIA's frontend adds one with full lengths there; 9.15.1 on
        // does not need it).
        if v <= LAST_NEEDING_PADDING && self.seq_kv % 128 != 0 && !self.padding {
            return Err(Error::Unsupported {
                what: format!(
                    "the composite attention backward with seq_kv = {} (not a multiple of 128) and no padding mask on the loaded cuDNN {}",
                    self.seq_kv,
                    fmt_version(v)
                ),
                needs: Some(
                    "SdpaConfig.padding = true (bind full sequence lengths), seq_kv a multiple of 128, or cuDNN >= 9.15.1"
                        .to_string(),
                ),
            });
        }
        Ok(())
    }

    /// The shape and value checks of [`check`](Self::check) alone (no library needed).
    ///
    /// # Errors
    /// As [`check`](Self::check), less the cuDNN version.
    pub fn validate(&self) -> Result<()> {
        for (name, v) in [
            ("batch", self.batch),
            ("heads", self.heads),
            ("kv_heads", self.kv_heads),
            ("seq_q", self.seq_q),
            ("seq_kv", self.seq_kv),
            ("head_dim", self.head_dim),
            ("head_dim_v", self.head_dim_v),
        ] {
            if v < 1 {
                return Err(Error::invalid(
                    format!("SdpaConfig.{name}"),
                    "must be >= 1",
                    v,
                ));
            }
        }
        for (name, v) in [("seq_q", self.seq_q), ("seq_kv", self.seq_kv)] {
            if v > MAX_SEQ_LEN {
                return Err(Error::invalid(
                    format!("SdpaConfig.{name}"),
                    "must be at most 2^31 - 1 (cuDNN's sequence lengths and indices are i32)",
                    v,
                ));
            }
        }
        if self.heads % self.kv_heads != 0 {
            return Err(Error::invalid(
                "SdpaConfig.kv_heads",
                format!(
                    "must divide heads ({}) for grouped-query attention",
                    self.heads
                ),
                self.kv_heads,
            ));
        }
        for (name, v) in [("head_dim", self.head_dim), ("head_dim_v", self.head_dim_v)] {
            if v % 8 != 0 || v > 256 {
                return Err(Error::Unsupported {
                    what: format!(
                        "SdpaConfig.{name} = {v}: cuDNN's fused attention takes head dims that are multiples of 8 up to 256"
                    ),
                    needs: Some(format!("{name} in 8, 16, ..., 256")),
                });
            }
        }
        if !matches!(self.dtype, DType::F16 | DType::BF16) {
            return Err(Error::Unsupported {
                what: format!(
                    "SdpaConfig.dtype = {}: cuDNN's fused attention (this crate's SDPA) takes f16 or bf16",
                    self.dtype
                ),
                needs: Some("dtype f16 or bf16".to_string()),
            });
        }
        let s = self.scale_value();
        if !s.is_finite() || s == 0.0 {
            return Err(Error::invalid(
                "SdpaConfig.scale",
                "must be finite and non-zero",
                s,
            ));
        }
        self.validate_band()?;
        self.validate_paged()?;
        self.validate_ragged()?;
        self.validate_softcap()?;
        self.validate_bias()?;
        self.validate_softmax()?;
        if let Some(d) = self.dropout
            && !(d.probability >= 0.0 && d.probability < 1.0)
        {
            return Err(Error::invalid(
                "SdpaConfig.dropout.probability",
                "must be in [0, 1)",
                d.probability,
            ));
        }
        // Every tensor the attention reads, writes or computes in must have a
        // representable size (the scores are the largest).
        for (what, r) in [
            ("q", self.q_spec()),
            ("k", self.k_spec()),
            ("v", self.v_spec()),
            ("o", self.o_spec()),
            ("the scores [B, H, S_q, S_kv]", self.score_spec()),
        ] {
            r.map_err(|e| {
                Error::invalid(
                    format!("SdpaConfig: {what}"),
                    "must have a representable size",
                    e,
                )
            })?;
        }
        Ok(())
    }

    fn check_native(&self, v: (u32, u32, u32), backward: bool) -> Result<()> {
        let dir = if backward { "backward" } else { "forward" };
        let need = |option: &str, want: (u32, u32, u32)| -> Result<()> {
            if v >= want {
                Ok(())
            } else {
                Err(Error::Unsupported {
                    what: format!(
                        "SdpaConfig option `{option}` with the loaded cuDNN {} (cuDNN's SDPA operation {dir})",
                        fmt_version(v)
                    ),
                    needs: Some(format!("cuDNN >= {}", fmt_version(want))),
                })
            }
        };
        if backward {
            need("backward (SDPA_BWD)", since::BACKWARD)?;
        } else {
            need("forward (SDPA_FWD)", since::FORWARD)?;
        }
        if self.padding {
            need("padding", since::PADDING)?;
        }
        if self.is_causal {
            need("is_causal", since::SUBGRAPH)?;
        }
        if self.band_needs_lengths() {
            need("diagonal (BottomRight)", since::SUBGRAPH)?;
        }
        if self.window.is_some() {
            need("window", since::SUBGRAPH)?;
        }
        if self.paged.is_some() {
            need("paged", since::PADDING)?;
        }
        self.check_native_softcap(v, backward)?;
        self.check_native_bias(v, backward)?;
        self.check_softmax_native(v, backward)?;
        if self.active_dropout().is_some() {
            if backward {
                need("dropout", since::BACKWARD_DROPOUT)?;
                // The forward that saves statistics with dropout is always the
                // composite (below), and its mask is not the SDPA backward's.
                return Err(Error::Unsupported {
                    what: "SdpaImpl::Native for a backward with dropout: the training forward with dropout is the composite (cuDNN's SDPA operation cannot save statistics with dropout), and a native backward would draw a different dropout mask".to_string(),
                    needs: Some("SdpaImpl::Auto or Composite for the backward (the same construction as the forward)".to_string()),
                });
            }
            need("dropout", since::FORWARD_DROPOUT)?;
            if self.is_training {
                return Err(Error::Unsupported {
                    what: "SdpaConfig option `dropout` in a training forward (`is_training`, which `sdpa_forward_training` sets) on cuDNN's SDPA operation (it cannot save the statistics with dropout; NVIDIA's frontend builds this as the composite)".to_string(),
                    needs: Some("SdpaImpl::Auto or Composite".to_string()),
                });
            }
        }
        Ok(())
    }

    /// Whether cuDNN's engines for a GPU of `device_ver` (cuDNN's encoding,
    /// major*100 + minor*10, as
    /// [`DeviceProperties::device_ver`](crate::graph::DeviceProperties::device_ver))
    /// with cuDNN `cudnn` take this attention (`backward`: its backward), by
    /// the per-architecture limits NVIDIA's frontend 1.32 checks before it
    /// asks cuDNN. A pure function (no library needed); `Plan::build` applies
    /// it with the target's architecture and the loaded cuDNN, so a refusal
    /// comes before cuDNN's heuristics, which would only offer nothing.
    ///
    /// Forward: sm_80 or newer; head dims above 128 need cuDNN newer than
    /// 9.9.0 on sm_8x and 9.9.0 or newer on sm_100; up to 9.9.0 a single
    /// query (`seq_q = 1`) takes neither a causal mask nor, on sm_100, head
    /// dims above 128. Backward: head dims up to 256 on sm_90 (on cuDNN 9.11
    /// and 9.12, a head_dim in (128, 192] with a head_dim_v in (64, 128] only
    /// as 192 or with head_dim_v 128); on sm_100 from cuDNN 9.11 up to 128
    /// and 192 with 128 (the frontend's 256 / 256 from 9.23 is refused, see
    /// the module's list of differences); up to 128 elsewhere.
    ///
    /// # Errors
    /// [`validate`](Self::validate)'s errors; `Unsupported` naming the head
    /// dims (or option), the architecture, the cuDNN and the limit.
    pub fn check_target_for(
        &self,
        backward: bool,
        device_ver: i64,
        cudnn: (u32, u32, u32),
    ) -> Result<()> {
        self.validate()?;
        let limit = self
            .ragged_arch_limit(device_ver, cudnn)
            .or_else(|| self.band_arch_limit(device_ver, cudnn))
            .or_else(|| self.softcap_arch_limit(backward, device_ver))
            .or_else(|| self.bias_arch_limit(backward, device_ver, cudnn))
            .or_else(|| {
                if backward {
                    self.backward_arch_limit(device_ver, cudnn)
                } else {
                    self.forward_arch_limit(device_ver, cudnn)
                }
            });
        match limit {
            None => Ok(()),
            Some(limit) => Err(Error::Unsupported {
                what: format!(
                    "the attention {} with head_dim {}, head_dim_v {}, seq_q {}{}{}{}{}{} on a GPU of compute capability {}.{} with cuDNN {}",
                    if backward { "backward" } else { "forward" },
                    self.head_dim,
                    self.head_dim_v,
                    self.seq_q,
                    match (self.is_causal, self.is_bottom_right_causal()) {
                        (true, true) => ", causal (bottom-right)",
                        (true, false) => ", causal",
                        _ => "",
                    },
                    match self.window {
                        Some(_) => ", sliding window",
                        None => "",
                    },
                    if self.active_dropout().is_some() {
                        ", dropout"
                    } else {
                        ""
                    },
                    if self.ragged { ", ragged" } else { "" },
                    if self.softcap.is_some() {
                        ", softcap"
                    } else {
                        ""
                    },
                    device_ver / 100,
                    (device_ver % 100) / 10,
                    fmt_version(cudnn)
                ),
                needs: Some(limit.to_string()),
            }),
        }
    }

    /// The forward's per-architecture limit this config breaks, if any.
    fn forward_arch_limit(&self, device_ver: i64, v: (u32, u32, u32)) -> Option<&'static str> {
        let major = device_ver / 100;
        let wide = self.head_dim > 128 || self.head_dim_v > 128;
        let upto_9_9 = v <= (9, 9, 0);
        if major < 8 {
            return Some("a GPU of compute capability 8.0 or newer (cuDNN's f16 / bf16 attention)");
        }
        if major == 8 && upto_9_9 && wide {
            return Some("head dims up to 128 on sm_8x with cuDNN up to 9.9.0 (or a newer cuDNN)");
        }
        if major == 10 && v < (9, 9, 0) && wide {
            return Some("head dims up to 128 on sm_100 before cuDNN 9.9.0 (or a newer cuDNN)");
        }
        if self.seq_q == 1 && upto_9_9 {
            if major == 10 && wide {
                return Some(
                    "head dims up to 128 for seq_q = 1 on sm_100 with cuDNN up to 9.9.0 (or a newer cuDNN)",
                );
            }
            if self.is_causal {
                return Some(
                    "no causal mask for seq_q = 1 with cuDNN up to 9.9.0 (or a newer cuDNN)",
                );
            }
        }
        None
    }

    /// The backward's per-architecture limit this config breaks, if any.
    fn backward_arch_limit(&self, device_ver: i64, v: (u32, u32, u32)) -> Option<&'static str> {
        let major = device_ver / 100;
        let (d, dv) = (self.head_dim, self.head_dim_v);
        let upto_128 = d <= 128 && dv <= 128;
        match major {
            9 => {
                if ((9, 11, 0)..(9, 13, 0)).contains(&v)
                    && (129..=192).contains(&d)
                    && (65..=128).contains(&dv)
                    && dv != 128
                    && d != 192
                {
                    Some(
                        "on sm_90 with cuDNN 9.11 and 9.12, head dims with head_dim in (128, 192] and head_dim_v in (64, 128] only as head_dim 192 or head_dim_v 128 (or cuDNN >= 9.13)",
                    )
                } else if d <= 256 && dv <= 256 {
                    None
                } else {
                    Some("head dims up to 256 on sm_90")
                }
            }
            10 if v >= (9, 11, 0) => {
                if d == 192 {
                    (dv != 128).then_some("head dims 192 only with head_dim_v 128 on sm_100")
                } else if v >= (9, 23, 0) && d == 256 && dv == 256 {
                    Some(
                        "head dims up to 128 (or 192 with 128) on sm_100: NVIDIA's frontend serves 256 / 256 (from cuDNN 9.23, without dropout) only with its deterministic algorithm, a pinned engine configuration this crate does not build (the engine cuDNN 9.28's heuristics offer for the composite fails to compile)",
                    )
                } else {
                    (!upto_128).then_some("head dims up to 128 on sm_100 (or 192 with 128)")
                }
            }
            _ => (!upto_128).then_some("head dims up to 128 on this architecture"),
        }
    }
}
