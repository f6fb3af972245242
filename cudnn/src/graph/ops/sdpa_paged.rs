//! The paged KV cache option of [`SdpaConfig`] ([`SdpaConfig::paged`]):
//! K and V stored in containers of `num_blocks` pages of `block_size`
//! tokens (`[num_blocks, H_kv, block_size, D]`, in the config's layout),
//! each sequence's pages listed in a page table (`[B, 1, pages, 1]` i32,
//! `pages = ceil(seq_kv / block_size)`), bound like any other input. The
//! key lengths of the padding mask say how many tokens of each sequence
//! are valid, so a cache grows by writing a token into its page and
//! binding the longer length: no new plan.
//!
//! The key lengths may not pass `seq_kv`, nor the last dim of a bias (the
//! kernel indexes it by them); the SDPA operation without a score subgraph
//! (no bias, masks or softcap) takes them up to the keys a table row covers
//! (`pages * block_size`, what its kernel uses), the rest up to `seq_kv`.
//! [`Plan::guarded_inputs`](crate::graph::Plan::guarded_inputs) gives the
//! extent, the same for a plan reloaded from its JSON.
//!
//! The device uses the page tables' values as addresses and cuDNN checks
//! none of them: an entry outside the container, or a key length past the
//! pages a table row covers, makes the GPU read outside K, V or the table.
//! So a plan binds its page tables only through the `unsafe`
//! [`Bindings::input_page_table`](crate::graph::Bindings::input_page_table),
//! whose contract is that rule; the safe
//! [`Bindings::input`](crate::graph::Bindings::input) refuses them (a plan
//! loaded from cuDNN's JSON too: the tables are found in its operations).
//!
//! Rules, after NVIDIA's cuDNN frontend 1.32: the composite (a paged cache
//! load of K and of V before the matmuls) from cuDNN 9.5.0, the SDPA
//! operation (its page-table attributes) from 9.15.0; a padding mask is
//! required; head dims above 128 only after 9.9; forward only (the
//! frontend has no paged backward: a cache serves inference).

use super::sdpa::SdpaConfig;
use super::sdpa_types::PagedKv;
use crate::error::{Error, Result};
use crate::graph::tensor::{DType, TensorSpec, fmt_dims};

/// The first cuDNN with the paged cache load operation.
pub const PAGED_SINCE: (u32, u32, u32) = (9, 5, 0);

impl SdpaConfig {
    /// With a paged KV cache of `num_blocks` pages of `block_size` tokens
    /// (see [`paged`](Self::paged)); turns the padding mask on, which a
    /// paged cache needs.
    pub fn paged(mut self, block_size: i64, num_blocks: i64) -> Self {
        self.paged = Some(PagedKv {
            block_size,
            num_blocks,
        });
        self.padding = true;
        self
    }

    /// Pages per sequence in a page table: `ceil(seq_kv / block_size)`
    /// (`None` without a paged cache or with a block size < 1).
    pub fn pages_per_seq(&self) -> Option<i64> {
        let p = self.paged?;
        (p.block_size >= 1)
            .then(|| self.seq_kv / p.block_size + i64::from(self.seq_kv % p.block_size != 0))
    }

    /// A page table (of K or V): `[B, 1, pages, 1]` i32, packed.
    ///
    /// # Errors
    /// No paged cache, or a bad geometry (see [`validate`](Self::validate)).
    pub fn page_table_spec(&self) -> Result<TensorSpec> {
        let pages = self.pages_per_seq().ok_or_else(|| {
            Error::invalid(
                "SdpaConfig.paged",
                "must be set (with block_size >= 1) for a page table",
                format!("{:?}", self.paged),
            )
        })?;
        TensorSpec::row_major(DType::I32, &[self.batch, 1, pages, 1])
    }

    /// A container `[num_blocks, H_kv, block_size, d]` in the config's layout.
    pub(crate) fn container_spec(&self, p: PagedKv, d: i64) -> Result<TensorSpec> {
        for (name, v) in [
            ("paged.block_size", p.block_size),
            ("paged.num_blocks", p.num_blocks),
        ] {
            if v < 1 {
                return Err(Error::invalid(
                    format!("SdpaConfig.{name}"),
                    "must be >= 1",
                    v,
                ));
            }
        }
        let dims = [p.num_blocks, self.kv_heads, p.block_size, d];
        // The plan JSON loader refuses a tensor spanning more than 2^48
        // elements; a container past it would plan and then not reload
        // (issue 31: 2^40 blocks).
        let limit = crate::graph::tensor::MAX_EXTENT;
        let elems = dims.iter().try_fold(1i64, |a, &x| a.checked_mul(x));
        if elems.is_none_or(|n| n > limit) {
            return Err(Error::invalid(
                "SdpaConfig.paged (the K / V container)",
                format!("must hold at most 2^48 elements ({limit}; the plan JSON loader's bound)"),
                fmt_dims(&dims),
            ));
        }
        let strides = self
            .layout
            .strides(p.num_blocks, self.kv_heads, p.block_size, d)
            .map_err(|e| {
                Error::invalid(
                    "SdpaConfig.paged (the K / V container)",
                    format!("must have representable strides ({e})"),
                    fmt_dims(&dims),
                )
            })?;
        TensorSpec::new(self.dtype, &dims, &strides)
    }

    /// The value checks of the paged option (part of [`validate`](Self::validate)).
    pub(crate) fn validate_paged(&self) -> Result<()> {
        let Some(p) = self.paged else { return Ok(()) };
        // Measured, not documented: cuDNN 9.28.1 (H200) finalized paged
        // attention (the SDPA operation and the composite, head dims 64 and
        // 128) only for page sizes that are powers of two (over 1..=40: 1,
        // 2, 4, 8, 16, 32); a page of 7 passed here and was refused at
        // finalize (issue 31). NVIDIA documents no such rule (its own tests
        // draw power-of-two page sizes).
        if p.block_size >= 1 && p.block_size.count_ones() != 1 {
            return Err(Error::invalid(
                "SdpaConfig.paged.block_size",
                "must be a power of two (measured on cuDNN 9.28.1 (H200): cuDNN plans paged \
                 attention only for page sizes that are powers of two; NVIDIA documents no \
                 such rule)",
                p.block_size,
            ));
        }
        self.container_spec(p, self.head_dim)?;
        self.container_spec(p, self.head_dim_v)?;
        self.page_table_spec()?;
        Ok(())
    }

    /// The rules of the paged option for the construction asked for.
    pub(crate) fn check_paged(&self, v: (u32, u32, u32), backward: bool) -> Result<()> {
        if self.paged.is_none() {
            return Ok(());
        }
        let unsupported = |what: String, needs: &str| Error::Unsupported {
            what,
            needs: Some(needs.to_string()),
        };
        if backward {
            return Err(unsupported(
                "SdpaConfig option `paged` in the attention backward (cuDNN and NVIDIA's frontend have no paged backward: a KV cache serves inference)".to_string(),
                "contiguous K and V for training",
            ));
        }
        if !self.padding {
            return Err(unsupported(
                "SdpaConfig option `paged` without `padding` (the key lengths say how much of each sequence's pages is valid)".to_string(),
                "SdpaConfig.padding = true (SdpaConfig::paged sets it)",
            ));
        }
        if v < PAGED_SINCE {
            return Err(unsupported(
                format!(
                    "SdpaConfig option `paged` with the loaded cuDNN {}.{}.{} (the paged cache load operation)",
                    v.0, v.1, v.2
                ),
                "cuDNN >= 9.5.0",
            ));
        }
        if v <= (9, 9, 0) && (self.head_dim > 128 || self.head_dim_v > 128) {
            return Err(unsupported(
                format!(
                    "SdpaConfig option `paged` with head dims {} / {} on the loaded cuDNN {}.{}.{}",
                    self.head_dim, self.head_dim_v, v.0, v.1, v.2
                ),
                "head dims up to 128, or cuDNN > 9.9.0",
            ));
        }
        Ok(())
    }
}
