//! The additive score options of [`SdpaConfig`]: an **additive bias**
//! ([`SdpaConfig::bias`], a broadcastable `[B or 1, H or 1, S_q, S_kv]`
//! graph input, with its gradient dBias as an optional output of the
//! backward) and **ALiBi** ([`SdpaConfig::alibi`], `slope[h] * (col - row)`
//! added to the scores, the slopes an f32 `[1, H, 1, 1]` graph input).
//!
//! Both are added to the scaled scores `scale * Q Kᵀ`, after a score
//! modifier and before the padding and diagonal-band masks, in the order
//! NVIDIA's cuDNN frontend 1.32 applies them (bias, then ALiBi): in the SDPA
//! operation's score subgraph (cuDNN >= 9.21) and as pointwise ops in the
//! composite. The backward's dBias is the gradient of the pre-mask scores
//! (`P ⊙ (dP - rowsum(dO ⊙ O))`, dropout-scaled), reduced over the dims the
//! bias broadcasts: a reduction op in the composite, the backward
//! operation's `DBIAS_DESC` (cuDNN >= 9.28) with [`SdpaImpl::Native`](super::sdpa::SdpaImpl::Native).
//!
//! The graph inputs are made by the attention op, like the sequence
//! lengths: [`SdpaForward::bias`](super::sdpa::SdpaForward::bias) and
//! [`SdpaBackward::bias`](super::sdpa::SdpaBackward::bias) name them
//! ([`BiasTensors`]). The bias and the slopes are plain float tensors
//! (their values cannot make the GPU leave a buffer), bound with
//! `Bindings::input` like Q.
//!
//! Rules, after the frontend's support surface (checked by
//! [`SdpaConfig::check`] / [`SdpaConfig::resolve_for`] /
//! [`SdpaConfig::check_target_for`]):
//! - bias element type: the I/O type or f32 (never boolean: a boolean mask
//!   is not a bias);
//! - bias or ALiBi not with a bottom-right causal mask;
//! - before cuDNN 9.10.2, a sliding window not with a bias;
//! - ALiBi needs a causal mask aligned top-left (the frontend's right bound
//!   0);
//! - dBias before cuDNN 9.5.0: not with a padding mask, and only for
//!   `seq_q` and `seq_kv` multiples of 64; not with ragged batches on
//!   sm_100;
//! - the SDPA operation (native) takes a bias or ALiBi from cuDNN 9.21
//!   (its score subgraph) and, in the backward, dBias from 9.28, in dQ's
//!   data type only (cuDNN's header: a bias of the I/O type);
//!   [`SdpaImpl::Auto`](super::sdpa::SdpaImpl::Auto) builds the composite
//!   below that;
//! - a paged cache's maximum key length is `seq_kv`, the bias's last dim by
//!   construction (the frontend's rule that they match holds always);
//! - FP8 attention ([`Fp8SdpaConfig`](super::sdpa_fp8::Fp8SdpaConfig)) has
//!   no bias (the frontend refuses it too).
//!
//! Not a rule: cuDNN 9.28.1's heuristics offer no engine for the SDPA
//! backward operation with dBias and ragged batches (on every target the
//! host tier plans for), so [`SdpaImpl::Native`](super::sdpa::SdpaImpl::Native)
//! with both is refused at planning with the typed `Unsupported` "no
//! engine"; [`SdpaImpl::Auto`](super::sdpa::SdpaImpl::Auto) builds the
//! composite, which plans on Hopper. NVIDIA documents no such limit (the
//! frontend never builds that operation) and a later cuDNN may add
//! engines, so the crate does not refuse it earlier.
//!
//! # Where this differs from NVIDIA's frontend
//! The frontend computes the ALiBi slopes itself and writes them into its
//! plan's workspace at each execution. Here the slopes are a graph input
//! the caller binds (f32 `[1, H, 1, 1]`; [`alibi_slopes`] gives the
//! standard ones), so a plan holds no host-side data to copy and a caller
//! may use other slopes. The graph is otherwise the frontend's (the same
//! `GEN_INDEX` / `SUB` / `MUL` / `ADD` ops).

pub use super::sdpa_types::{AttnBias, BiasTensors};

use super::sdpa::{DiagonalAlignment, SdpaConfig};
use crate::error::{Error, Result};
use crate::graph::tensor::{DType, TensorSpec};

/// The first cuDNN whose SDPA backward operation takes dBias (`DBIAS_DESC`).
pub const NATIVE_DBIAS_SINCE: (u32, u32, u32) = (9, 28, 0);
/// The first cuDNN whose SDPA operation takes a bias or ALiBi (its score subgraph).
pub const NATIVE_BIAS_SINCE: (u32, u32, u32) = (9, 21, 0);

/// The standard ALiBi slopes for `heads` query heads (Press et al., "Train
/// Short, Test Long"): for `n` the largest power of two `<= heads`, head
/// `h < n` gets `2^(-8 (h + 1) / n)`; the remaining `heads - n` heads get
/// every other slope of the `2n` sequence, `2^(-8 (2 i + 1) / (2 n))`,
/// `i = 0, 1, ...`. What NVIDIA's frontend writes into its workspace.
///
/// # Errors
/// `heads` of 0 or above 2^20.
pub fn alibi_slopes(heads: usize) -> Result<Vec<f32>> {
    if heads == 0 || heads > 1 << 20 {
        return Err(Error::invalid(
            "alibi_slopes heads",
            "must be in 1..=2^20",
            heads,
        ));
    }
    let n = 1usize << (usize::BITS - 1 - heads.leading_zeros());
    let mut out = Vec::with_capacity(heads);
    for h in 0..n {
        out.push((-8.0 * (h + 1) as f64 / n as f64).exp2() as f32);
    }
    for i in 0..heads - n {
        out.push((-8.0 * (2 * i + 1) as f64 / (2 * n) as f64).exp2() as f32);
    }
    Ok(out)
}

fn fmt_version(v: (u32, u32, u32)) -> String {
    format!("{}.{}.{}", v.0, v.1, v.2)
}

impl SdpaConfig {
    /// With an additive bias (see [`AttnBias`] and the module docs of
    /// [`sdpa_bias`](self)).
    pub fn bias(mut self, bias: AttnBias) -> Self {
        self.bias = Some(bias);
        self
    }

    /// With ALiBi (or not): `slope[h] * (col - row)` added to the scores,
    /// the slopes an f32 `[1, H, 1, 1]` graph input ([`alibi_slopes`]
    /// gives the standard ones); needs a top-left causal mask.
    pub fn alibi(mut self, on: bool) -> Self {
        self.alibi = on;
        self
    }

    /// The bias's element type (its own, else the I/O type).
    pub fn bias_dtype(&self) -> DType {
        self.bias.and_then(|b| b.dtype).unwrap_or(self.dtype)
    }

    /// The bias (and dBias): `[B or 1, H or 1, S_q, S_kv]`, packed.
    ///
    /// # Errors
    /// No bias; a dim < 1 or a size that overflows.
    pub fn bias_spec(&self) -> Result<TensorSpec> {
        let b = self.bias.ok_or_else(|| {
            Error::invalid("SdpaConfig.bias", "must be set for a bias spec", "None")
        })?;
        let dims = [
            if b.per_batch { self.batch } else { 1 },
            if b.per_head { self.heads } else { 1 },
            self.seq_q,
            self.seq_kv,
        ];
        TensorSpec::row_major(self.bias_dtype(), &dims)
    }

    /// The ALiBi slopes: f32 `[1, H, 1, 1]`, packed.
    ///
    /// # Errors
    /// `heads` < 1.
    pub fn alibi_slopes_spec(&self) -> Result<TensorSpec> {
        TensorSpec::row_major(DType::F32, &[1, self.heads, 1, 1])
    }

    /// Whether the backward outputs dBias.
    pub(crate) fn has_dbias(&self) -> bool {
        self.bias.is_some_and(|b| b.dbias)
    }

    /// The value checks of the bias options (part of [`validate`](Self::validate)).
    pub(crate) fn validate_bias(&self) -> Result<()> {
        let Some(_) = self.bias else { return Ok(()) };
        let dt = self.bias_dtype();
        if dt == DType::Bool {
            return Err(Error::invalid(
                "SdpaConfig.bias.dtype",
                "must not be boolean (a bias is added to the scores; NVIDIA's frontend refuses a boolean bias too)",
                dt,
            ));
        }
        if dt != self.dtype && dt != DType::F32 {
            return Err(Error::invalid(
                "SdpaConfig.bias.dtype",
                format!("must be the I/O type ({}) or f32", self.dtype),
                dt,
            ));
        }
        self.bias_spec().map_err(|e| {
            Error::invalid(
                "SdpaConfig.bias",
                format!("must make a valid tensor ({e})"),
                format!("{:?}", self.bias),
            )
        })?;
        Ok(())
    }

    /// The version rules of the bias options that hold for every construction.
    pub(crate) fn check_bias(&self, v: (u32, u32, u32), backward: bool) -> Result<()> {
        let unsupported = |what: String, needs: &str| Error::Unsupported {
            what,
            needs: Some(needs.to_string()),
        };
        let bias = self.bias.is_some();
        if (bias || self.alibi) && self.is_bottom_right_causal() {
            return Err(unsupported(
                format!(
                    "SdpaConfig option `{}` with a bottom-right causal mask (`diagonal` = BottomRight; NVIDIA's frontend refuses them together)",
                    if bias { "bias" } else { "alibi" }
                ),
                "a top-left causal mask, or no bias / ALiBi",
            ));
        }
        if self.alibi && !(self.is_causal && self.diagonal == DiagonalAlignment::TopLeft) {
            return Err(unsupported(
                "SdpaConfig option `alibi` without a top-left causal mask (NVIDIA's frontend requires the causal right bound 0 with ALiBi)".to_string(),
                "SdpaConfig::causal(true) with the top-left diagonal",
            ));
        }
        if bias && self.window.is_some() && v < (9, 10, 2) {
            return Err(unsupported(
                format!(
                    "SdpaConfig option `bias` with `window` on the loaded cuDNN {}",
                    fmt_version(v)
                ),
                "cuDNN >= 9.10.2, or no sliding window",
            ));
        }
        if backward && self.has_dbias() && v < (9, 5, 0) {
            if self.padding {
                return Err(unsupported(
                    format!(
                        "SdpaConfig option `bias.dbias` with `padding` on the loaded cuDNN {}",
                        fmt_version(v)
                    ),
                    "cuDNN >= 9.5.0, or no padding mask",
                ));
            }
            if self.seq_q % 64 != 0 || self.seq_kv % 64 != 0 {
                return Err(unsupported(
                    format!(
                        "SdpaConfig option `bias.dbias` with seq_q {} and seq_kv {} (not both multiples of 64) on the loaded cuDNN {}",
                        self.seq_q,
                        self.seq_kv,
                        fmt_version(v)
                    ),
                    "cuDNN >= 9.5.0, or sequence lengths that are multiples of 64",
                ));
            }
        }
        Ok(())
    }

    /// The SDPA operation's version rules for the bias options.
    pub(crate) fn check_native_bias(&self, v: (u32, u32, u32), backward: bool) -> Result<()> {
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
        if self.bias.is_some() {
            need("bias", NATIVE_BIAS_SINCE)?;
        }
        if self.alibi {
            need("alibi", NATIVE_BIAS_SINCE)?;
        }
        if backward && self.has_dbias() {
            need("bias.dbias", NATIVE_DBIAS_SINCE)?;
            // cuDNN's header: the backward operation's dBias has dQ's data
            // type (the I/O type); dBias has the bias's.
            let dt = self.bias_dtype();
            if dt != self.dtype {
                return Err(Error::Unsupported {
                    what: format!(
                        "SdpaConfig option `bias.dbias` with a {dt} bias and {} I/O on cuDNN's SDPA backward operation (its dBias must have dQ's data type)",
                        self.dtype
                    ),
                    needs: Some(format!(
                        "a {} bias, or SdpaImpl::Auto / Composite (the composite reduces into any bias type)",
                        self.dtype
                    )),
                });
            }
        }
        Ok(())
    }

    /// The bias options' per-architecture limit this config breaks, if any.
    pub(crate) fn bias_arch_limit(
        &self,
        backward: bool,
        device_ver: i64,
        _v: (u32, u32, u32),
    ) -> Option<&'static str> {
        if backward && self.has_dbias() && self.ragged && device_ver / 100 == 10 {
            return Some(
                "no dBias with ragged batches on sm_100 (NVIDIA's frontend refuses it); drop `bias.dbias` or the ragged layout",
            );
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f32], b: &[f64]) -> bool {
        a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(&x, &y)| (f64::from(x) - y).abs() <= 1e-7 * y.abs())
    }

    #[test]
    fn unit_alibi_slopes_powers_of_two() {
        // H = 8: 2^-1, 2^-2, ..., 2^-8.
        let want: Vec<f64> = (1..=8).map(|i| 0.5f64.powi(i)).collect();
        assert!(close(&alibi_slopes(8).unwrap(), &want));
        // H = 16: 2^-0.5, 2^-1, ..., 2^-8.
        let want: Vec<f64> = (1..=16).map(|i| 2f64.powf(-0.5 * f64::from(i))).collect();
        assert!(close(&alibi_slopes(16).unwrap(), &want));
        assert!(close(&alibi_slopes(1).unwrap(), &[2f64.powi(-8)]));
    }

    #[test]
    fn unit_alibi_slopes_other_counts() {
        // H = 12: the 8 slopes of H = 8, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5
        // (the odd entries of the H = 16 sequence).
        let mut want: Vec<f64> = (1..=8).map(|i| 0.5f64.powi(i)).collect();
        want.extend([-0.5, -1.5, -2.5, -3.5].map(|e: f64| e.exp2()));
        assert!(close(&alibi_slopes(12).unwrap(), &want));
        // H = 6: 2^-2, 2^-4, 2^-6, 2^-8, then 2^-1, 2^-3.
        let want = [-2.0, -4.0, -6.0, -8.0, -1.0, -3.0].map(|e: f64| e.exp2());
        assert!(close(&alibi_slopes(6).unwrap(), &want));
        assert!(alibi_slopes(0).is_err());
        assert!(alibi_slopes(usize::MAX).is_err());
    }
}
