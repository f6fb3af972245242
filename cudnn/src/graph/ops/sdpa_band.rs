//! The diagonal-band options of [`SdpaConfig`]: the bottom-right causal
//! mask ([`DiagonalAlignment::BottomRight`]) and the sliding window
//! ([`SdpaConfig::window`], cuDNN's left bound). Their rules, by cuDNN
//! version and GPU architecture, follow NVIDIA's cuDNN frontend 1.32 (its
//! support surface for f16 / bf16 attention, forward and backward):
//!
//! - bottom-right causal: not with dropout; without a padding mask only
//!   for `seq_q <= seq_kv` (the last query must have a key on its
//!   diagonal); before cuDNN 9.6.0 only for sequence lengths that are
//!   multiples of 64;
//! - sliding window: `window >= 1`; without a padding mask only for
//!   `seq_q <= seq_kv`; before 9.6.0 with a bottom-right diagonal only for
//!   `seq_q == seq_kv`; before 9.10.2 only with a causal mask and no
//!   dropout; not on cuDNN 9.14.0 without a causal mask for `seq_kv > 1024`
//!   (a known bug there); on sm_90 with cuDNN up to 9.9.0 not together with
//!   a bottom-right causal mask when `seq_q == seq_kv`;
//! - cuDNN's SDPA operation ([`SdpaImpl::Native`](super::sdpa::SdpaImpl::Native))
//!   takes either from 9.21 (its mask subgraph); the composite from any
//!   release the rules above allow.
//!
//! The masks are built as NVIDIA's frontend builds them: a right-bound
//! diagonal band (keep `row + shift >= col`, `shift = len_kv - len_q`
//! bottom-right) and a left-bound one (keep `col + window - shift > row`),
//! with the per-batch lengths of the padding inputs when there are any and
//! the full lengths otherwise.

use super::sdpa::{DiagonalAlignment, MAX_SEQ_LEN, SdpaConfig};
use crate::error::{Error, Result};

fn fmt_version(v: (u32, u32, u32)) -> String {
    format!("{}.{}.{}", v.0, v.1, v.2)
}

impl SdpaConfig {
    /// Whether the config has a causal mask aligned bottom-right (the
    /// alignment means nothing without a causal mask or a window).
    pub fn is_bottom_right_causal(&self) -> bool {
        self.is_causal && self.diagonal == DiagonalAlignment::BottomRight
    }

    /// Whether the attention has a diagonal band (a causal mask or a window).
    pub(crate) fn has_band(&self) -> bool {
        self.is_causal || self.window.is_some()
    }

    /// Whether the band needs the query and key lengths (bottom-right
    /// alignment of a causal mask or window).
    pub(crate) fn band_needs_lengths(&self) -> bool {
        self.has_band() && self.diagonal == DiagonalAlignment::BottomRight
    }

    /// The window the graph builds: `window` clamped to
    /// `max(seq_q, seq_kv)`, beyond which it excludes no key (a query's
    /// diagonal position is below both lengths).
    pub(crate) fn effective_window(&self) -> Option<i64> {
        self.window
            .map(|w| w.min(self.seq_q.max(self.seq_kv)).max(1))
    }

    /// The value checks of the band options (part of [`validate`](Self::validate)).
    pub(crate) fn validate_band(&self) -> Result<()> {
        if let Some(w) = self.window {
            if w < 1 {
                return Err(Error::invalid(
                    "SdpaConfig.window",
                    "must be >= 1 (the keys a query sees, its diagonal included)",
                    w,
                ));
            }
            // The masks compute `col + window - shift` in i32.
            let w = self.effective_window().unwrap_or(1);
            if self
                .seq_kv
                .checked_add(self.seq_q)
                .and_then(|s| s.checked_add(w))
                .is_none_or(|s| s > MAX_SEQ_LEN)
            {
                return Err(Error::Unsupported {
                    what: format!(
                        "SdpaConfig.window = {w} with seq_q {} and seq_kv {}: the band mask's index arithmetic is i32 in cuDNN",
                        self.seq_q, self.seq_kv
                    ),
                    needs: Some(
                        "seq_q + seq_kv + min(window, max(seq_q, seq_kv)) <= 2^31 - 1".to_string(),
                    ),
                });
            }
        }
        Ok(())
    }

    /// The version rules of the band options that hold for every
    /// construction (NVIDIA's frontend checks them before it builds either).
    pub(crate) fn check_band(&self, v: (u32, u32, u32)) -> Result<()> {
        let unsupported = |what: String, needs: &str| Error::Unsupported {
            what,
            needs: Some(needs.to_string()),
        };
        let dropout = self.active_dropout().is_some();
        if self.is_bottom_right_causal() {
            if dropout {
                return Err(unsupported(
                    "SdpaConfig option `diagonal` = BottomRight (a bottom-right causal mask) with `dropout` (cuDNN's attention engines do not combine them)".to_string(),
                    "no dropout, or a top-left causal mask",
                ));
            }
            if !self.padding && self.seq_q > self.seq_kv {
                return Err(unsupported(
                    format!(
                        "SdpaConfig option `diagonal` = BottomRight (a bottom-right causal mask) with seq_q {} > seq_kv {} and no padding mask",
                        self.seq_q, self.seq_kv
                    ),
                    "seq_q <= seq_kv (slice Q: the first seq_q - seq_kv queries see no key), or a padding mask",
                ));
            }
            if v < (9, 6, 0) && (self.seq_q % 64 != 0 || self.seq_kv % 64 != 0) {
                return Err(unsupported(
                    format!(
                        "SdpaConfig option `diagonal` = BottomRight (a bottom-right causal mask) with seq_q {} and seq_kv {} (not both multiples of 64) on the loaded cuDNN {}",
                        self.seq_q,
                        self.seq_kv,
                        fmt_version(v)
                    ),
                    "cuDNN >= 9.6.0, or sequence lengths that are multiples of 64",
                ));
            }
        }
        if let Some(w) = self.window {
            if !self.padding && self.seq_q > self.seq_kv {
                return Err(unsupported(
                    format!(
                        "SdpaConfig option `window` = {w} with seq_q {} > seq_kv {} and no padding mask",
                        self.seq_q, self.seq_kv
                    ),
                    "seq_q <= seq_kv, or a padding mask",
                ));
            }
            if v < (9, 6, 0)
                && self.diagonal == DiagonalAlignment::BottomRight
                && self.seq_q != self.seq_kv
            {
                return Err(unsupported(
                    format!(
                        "SdpaConfig option `window` = {w} aligned bottom-right with seq_q {} != seq_kv {} on the loaded cuDNN {}",
                        self.seq_q,
                        self.seq_kv,
                        fmt_version(v)
                    ),
                    "cuDNN >= 9.6.0, or seq_q == seq_kv",
                ));
            }
            if v < (9, 10, 2) && (!self.is_causal || dropout) {
                return Err(unsupported(
                    format!(
                        "SdpaConfig option `window` = {w} {} on the loaded cuDNN {}",
                        if dropout {
                            "with dropout"
                        } else {
                            "without a causal mask"
                        },
                        fmt_version(v)
                    ),
                    "cuDNN >= 9.10.2, or a causal mask and no dropout",
                ));
            }
            if v == (9, 14, 0) && !self.is_causal && self.seq_kv > 1024 {
                return Err(unsupported(
                    format!(
                        "SdpaConfig option `window` = {w} without a causal mask for seq_kv {} > 1024 on cuDNN 9.14.0 (a known bug there; NVIDIA's frontend refuses it too)",
                        self.seq_kv
                    ),
                    "cuDNN 9.14.1 or newer, a causal mask, or seq_kv <= 1024",
                ));
            }
        }
        Ok(())
    }

    /// The band options' per-architecture limit this config breaks, if any
    /// (forward and backward alike).
    pub(crate) fn band_arch_limit(
        &self,
        device_ver: i64,
        v: (u32, u32, u32),
    ) -> Option<&'static str> {
        if device_ver / 100 == 9
            && v <= (9, 9, 0)
            && self.window.is_some()
            && self.is_bottom_right_causal()
            && self.seq_q == self.seq_kv
        {
            return Some(
                "on sm_90 with cuDNN up to 9.9.0, no sliding window with a bottom-right causal mask for seq_q == seq_kv (or cuDNN >= 9.10.2)",
            );
        }
        None
    }
}
