//! The composite attention's masks and cache loads (a child of
//! [`sdpa_composite`](super), split off by job): the padding mask, the
//! diagonal-band masks (causal, bottom-right, sliding window) as i32
//! `GEN_INDEX` comparisons or cuDNN's diagonal band mask operation, and the
//! paged cache loads of a paged KV cache.

use super::{Ctx, M, T};
use crate::error::{Error, Result};
use crate::graph::backend::{Descriptor, attr, kind};
use crate::graph::tensor::DType;

/// The first cuDNN whose diagonal band mask operation the composites build
/// (NVIDIA's frontend lowers its band mask to it from 9.21, and decomposes
/// it before).
pub(crate) const BAND_MASK_OPERATION: (u32, u32, u32) = (9, 21, 0);

/// The diagonal-band masks of a composite (graph tensors by index).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CompositeBand {
    /// The causal mask (the right bound).
    pub(crate) causal: bool,
    /// `(len_q, len_kv)` i32 tensors aligning the band bottom-right: the
    /// padding inputs, or scalars of the full lengths.
    pub(crate) lens: Option<(usize, usize)>,
    /// The window's i32 bound scalar: `window`, or `window - seq_kv +
    /// seq_q` bottom-right with full lengths.
    pub(crate) window: Option<usize>,
    /// Whether the window subtracts the shift from `lens` (bottom-right
    /// with padding).
    pub(crate) window_lens: bool,
    /// Build the masks as cuDNN's diagonal band mask operation (cuDNN >=
    /// 9.21: what NVIDIA's frontend builds there; its bound is then f32
    /// unless `window_lens`).
    pub(crate) unified: bool,
    /// The fill scalars (-inf) of the operation's right and left bound:
    /// one each, as the frontend makes them (`unified` only).
    pub(crate) fills: [Option<usize>; 2],
}

impl CompositeBand {
    pub(super) fn any(&self) -> bool {
        self.causal || self.window.is_some()
    }

    pub(super) fn push_tensors(&self, v: &mut Vec<(&'static str, usize, bool)>) {
        if let Some((a, b)) = self.lens {
            v.push(("band_len_q", a, false));
            v.push(("band_len_kv", b, false));
        }
        if let Some(w) = self.window {
            v.push(("window_bound", w, false));
        }
        for (name, f) in ["band_fill", "window_fill"].into_iter().zip(self.fills) {
            if let Some(f) = f {
                v.push((name, f, false));
            }
        }
    }

    pub(super) fn signature(&self) -> String {
        format!(
            "causal={} bottom_right={} window={}",
            self.causal,
            self.lens.is_some(),
            self.window.is_some()
        )
    }
}

impl Ctx<'_> {
    /// `(row < seq_q && col < seq_kv) ? x : fill`.
    pub(super) fn padding_mask(
        &mut self,
        x: T,
        seq_q: T,
        seq_kv: T,
        fill: T,
        score: &[i64],
    ) -> Result<T> {
        let ri = self.virt(DType::I32, score)?;
        self.pointwise(M::CUDNN_POINTWISE_GEN_INDEX, DType::I32, &[x], ri, Some(2))?;
        let ci = self.virt(DType::I32, score)?;
        self.pointwise(M::CUDNN_POINTWISE_GEN_INDEX, DType::I32, &[x], ci, Some(3))?;
        let rm = self.virt(DType::Bool, score)?;
        self.pointwise(
            M::CUDNN_POINTWISE_CMP_LT,
            DType::Bool,
            &[ri, seq_q],
            rm,
            None,
        )?;
        let cm = self.virt(DType::Bool, score)?;
        self.pointwise(
            M::CUDNN_POINTWISE_CMP_LT,
            DType::Bool,
            &[ci, seq_kv],
            cm,
            None,
        )?;
        let m = self.virt(DType::Bool, score)?;
        self.pointwise(
            M::CUDNN_POINTWISE_LOGICAL_AND,
            DType::Bool,
            &[rm, cm],
            m,
            None,
        )?;
        let out = self.virt(DType::F32, score)?;
        self.pointwise(
            M::CUDNN_POINTWISE_BINARY_SELECT,
            DType::F32,
            &[x, fill, m],
            out,
            None,
        )?;
        Ok(out)
    }

    /// `x` with the diagonal-band masks applied: the right bound (causal,
    /// `row + shift >= col ? x : fill`) then the left bound (window,
    /// `col + bound - shift > row ? x : fill`), `shift = len_kv - len_q`
    /// from `band.lens` (bottom-right; 0 top-left), each mask its own
    /// `GEN_INDEX` / i32 arithmetic / compare / `BINARY_SELECT`, as NVIDIA's
    /// frontend decomposes its band mask before cuDNN 9.21.
    pub(super) fn band_mask(
        &mut self,
        x: T,
        fill: Option<T>,
        score: &[i64],
        band: &CompositeBand,
    ) -> Result<T> {
        if band.unified {
            return self.band_mask_op(x, fill, score, band);
        }
        let fill = fill.ok_or_else(|| {
            Error::invalid(
                "the composite's band mask",
                "needs the mask fill scalar (an internal invariant)",
                "none",
            )
        })?;
        let mut last = x;
        if band.causal {
            let ri = self.virt(DType::I32, score)?;
            self.pointwise(
                M::CUDNN_POINTWISE_GEN_INDEX,
                DType::I32,
                &[last],
                ri,
                Some(2),
            )?;
            let ci = self.virt(DType::I32, score)?;
            self.pointwise(
                M::CUDNN_POINTWISE_GEN_INDEX,
                DType::I32,
                &[last],
                ci,
                Some(3),
            )?;
            let mut r = ri;
            if let Some((lq, lkv)) = band.lens {
                let a = self.virt(DType::I32, score)?;
                self.pointwise(M::CUDNN_POINTWISE_ADD, DType::I32, &[r, T::G(lkv)], a, None)?;
                let b = self.virt(DType::I32, score)?;
                self.pointwise(M::CUDNN_POINTWISE_SUB, DType::I32, &[a, T::G(lq)], b, None)?;
                r = b;
            }
            let m = self.virt(DType::Bool, score)?;
            self.pointwise(M::CUDNN_POINTWISE_CMP_GE, DType::Bool, &[r, ci], m, None)?;
            let out = self.virt(DType::F32, score)?;
            self.pointwise(
                M::CUDNN_POINTWISE_BINARY_SELECT,
                DType::F32,
                &[last, fill, m],
                out,
                None,
            )?;
            last = out;
        }
        if let Some(bound) = band.window {
            let ri = self.virt(DType::I32, score)?;
            self.pointwise(
                M::CUDNN_POINTWISE_GEN_INDEX,
                DType::I32,
                &[last],
                ri,
                Some(2),
            )?;
            let ci = self.virt(DType::I32, score)?;
            self.pointwise(
                M::CUDNN_POINTWISE_GEN_INDEX,
                DType::I32,
                &[last],
                ci,
                Some(3),
            )?;
            let mut c = self.virt(DType::I32, score)?;
            self.pointwise(
                M::CUDNN_POINTWISE_ADD,
                DType::I32,
                &[ci, T::G(bound)],
                c,
                None,
            )?;
            if let (true, Some((lq, lkv))) = (band.window_lens, band.lens) {
                let a = self.virt(DType::I32, score)?;
                self.pointwise(M::CUDNN_POINTWISE_SUB, DType::I32, &[c, T::G(lkv)], a, None)?;
                let b = self.virt(DType::I32, score)?;
                self.pointwise(M::CUDNN_POINTWISE_ADD, DType::I32, &[a, T::G(lq)], b, None)?;
                c = b;
            }
            let m = self.virt(DType::Bool, score)?;
            self.pointwise(M::CUDNN_POINTWISE_CMP_GT, DType::Bool, &[c, ri], m, None)?;
            let out = self.virt(DType::F32, score)?;
            self.pointwise(
                M::CUDNN_POINTWISE_BINARY_SELECT,
                DType::F32,
                &[last, fill, m],
                out,
                None,
            )?;
            last = out;
        }
        Ok(last)
    }

    /// The band masks as cuDNN's diagonal band mask operation (>= 9.21):
    /// a right bound (`CMP_GE`, the lengths when aligned bottom-right),
    /// then a left bound (`CMP_GT`, the bound, the lengths with padding).
    pub(super) fn band_mask_op(
        &mut self,
        x: T,
        fill: Option<T>,
        score: &[i64],
        band: &CompositeBand,
    ) -> Result<T> {
        let mut last = x;
        let masks = [
            (
                band.causal,
                None,
                band.lens,
                M::CUDNN_POINTWISE_CMP_GE,
                band.fills[0],
            ),
            (
                band.window.is_some(),
                band.window,
                if band.window_lens { band.lens } else { None },
                M::CUDNN_POINTWISE_CMP_GT,
                band.fills[1],
            ),
        ];
        for (on, bound, lens, mode, own_fill) in masks {
            if !on {
                continue;
            }
            let fill = own_fill.map(T::G).or(fill).ok_or_else(|| {
                Error::invalid(
                    "the composite's diagonal band mask",
                    "needs a fill scalar (an internal invariant)",
                    "none",
                )
            })?;
            let out = self.virt(DType::F32, score)?;
            let mut m = Descriptor::<kind::DiagonalBandMaskOp>::new()?;
            m.set_descriptors(attr::OPERATION_DIAGONAL_BAND_MASK_XDESC, &[self.d(last)])?;
            m.set_descriptors(attr::OPERATION_DIAGONAL_BAND_MASK_BDESC, &[self.d(fill)])?;
            if let Some((q, kv)) = lens {
                m.set_descriptors(
                    attr::OPERATION_DIAGONAL_BAND_MASK_SEQ_LEN_QDESC,
                    &[self.d(T::G(q))],
                )?;
                m.set_descriptors(
                    attr::OPERATION_DIAGONAL_BAND_MASK_SEQ_LEN_KVDESC,
                    &[self.d(T::G(kv))],
                )?;
            }
            if let Some(b) = bound {
                m.set_descriptors(
                    attr::OPERATION_DIAGONAL_BAND_MASK_LEFT_BOUND_DESC,
                    &[self.d(T::G(b))],
                )?;
            }
            m.set_descriptors(attr::OPERATION_DIAGONAL_BAND_MASK_YDESC, &[self.d(out)])?;
            m.set(attr::OPERATION_DIAGONAL_BAND_MASK_COMPARISON_MODE, &[mode])?;
            m.finalize()
                .map_err(|e| e.with_context("the composite's diagonal band mask"))?;
            self.ops.push(Box::new(m));
            last = out;
        }
        Ok(last)
    }

    /// `y` = the rows of `container` the page table and lengths address.
    pub(super) fn paged_load(&mut self, container: T, table: T, lens: T, y: T) -> Result<()> {
        let mut d = Descriptor::<kind::PagedCacheLoadOp>::new()?;
        d.set_descriptors(
            attr::OPERATION_PAGED_CACHE_LOAD_CONTAINER_DESC,
            &[self.d(container)],
        )?;
        d.set_descriptors(
            attr::OPERATION_PAGED_CACHE_LOAD_PAGE_TABLE_DESC,
            &[self.d(table)],
        )?;
        d.set_descriptors(
            attr::OPERATION_PAGED_CACHE_LOAD_SEQUENCE_DESC,
            &[self.d(lens)],
        )?;
        d.set_descriptors(attr::OPERATION_PAGED_CACHE_LOAD_YDESC, &[self.d(y)])?;
        d.finalize()
            .map_err(|e| e.with_context("the paged cache load"))?;
        self.ops.push(Box::new(d));
        Ok(())
    }
}
