//! [`RnnWeightViews`]: where each per-layer, per-gate matrix and bias lies
//! in an RNN's weight space, as cuDNN reports it
//! (`cudnnGetRNNWeightParams`), checked against the shapes the
//! configuration implies ([`RnnConfig::weight_shapes`](super::RnnConfig::weight_shapes)).
//! The gate order and its PyTorch equivalent are on [`RnnWeightViews`].

use super::config::RnnWeightShape;
use super::plan::RnnPlan;
use crate::check::{self, cudnn_call};
use crate::dnn::ops::Float;
use crate::dnn::{Handle, TensorDescriptor};
use crate::error::{Error, Result};
use crate::runtime::{DeviceSlice, DeviceSliceMut};
use crate::sys::cudnn as dnn;

/// One matrix (and its bias) in the weight space, in elements of `T`
/// from the start of the space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct RnnWeightView {
    /// Layer, direction, gate, side and shape.
    pub shape: RnnWeightShape,
    /// Offset of the row-major `rows x cols` matrix (`None` when absent).
    pub matrix_offset: Option<usize>,
    /// Offset of the `bias_len` bias (`None` when it has none).
    pub bias_offset: Option<usize>,
}

/// Every matrix and bias of a plan's weight space.
///
/// # Gate order and PyTorch
/// cuDNN numbers the matrices of one layer and direction by `linLayerID`:
/// LSTM `0..4` the input side's gates input, forget, cell (new memory),
/// output and `4..8` the recurrent side's in the same order, `8` the
/// projection; GRU `0..3` the input side's reset, update, new, and `3..6`
/// the recurrent side's; the plain RNN `0` and `1`. PyTorch stacks
/// `weight_ih_l{k}` as `i, f, g, o` (LSTM) and `r, z, n` (GRU): the same
/// order. So rows `g*hidden..(g+1)*hidden` of PyTorch's `weight_ih_l{k}`
/// are cuDNN's matrix `g` of layer `k`, those of `weight_hh_l{k}` matrix
/// `gates + g`, `bias_ih`/`bias_hh` the input/recurrent biases
/// ([`RnnBiasMode::Double`](super::RnnBiasMode::Double)), `weight_hr_l{k}` the
/// projection, and the `_reverse` tensors direction 1. Matrices are
/// row-major `rows x cols`, as PyTorch's.
/// [`RnnWeightShape::pytorch`](super::RnnWeightShape::pytorch) names the
/// parameter and rows of each view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RnnWeightViews {
    /// In cuDNN's order (layer, direction, `linLayerID`).
    pub views: Vec<RnnWeightView>,
    /// Elements of the weight space.
    pub len: usize,
}

fn read_nd(desc: &TensorDescriptor<u8>) -> Result<usize> {
    let mut dt = dnn::cudnnDataType_t(0);
    let mut nb = 0i32;
    let mut dims = [0i32; 3];
    let mut strides = [0i32; 3];
    // SAFETY: live descriptor; `dims`/`strides` hold the 3 values asked for.
    unsafe {
        cudnn_call!(
            check::cudnn()?,
            cudnnGetTensorNdDescriptor(
                desc.as_raw(),
                3,
                &mut dt,
                &mut nb,
                dims.as_mut_ptr(),
                strides.as_mut_ptr()
            )
        )
    }?;
    let n = usize::try_from(nb).unwrap_or(0).min(3);
    dims[..n].iter().try_fold(1usize, |acc, &d| {
        usize::try_from(d)
            .ok()
            .and_then(|d| acc.checked_mul(d))
            .ok_or_else(|| Error::invalid("cudnnGetRNNWeightParams dims", "must be >= 0", d))
    })
}

fn offset(base: usize, addr: usize, size: usize, what: &str) -> Result<usize> {
    let off = addr
        .checked_sub(base)
        .ok_or_else(|| Error::invalid(what, "lies before the weight space", addr))?;
    if off % size != 0 {
        return Err(Error::invalid(what, "is not element-aligned", off));
    }
    Ok(off / size)
}

impl<T: Float> RnnPlan<'_, '_, T> {
    /// Ask cuDNN where each matrix and bias lies in `weights` (a weight
    /// space of [`weight_len`](RnnPlan::weight_len) elements) and check
    /// every size against [`RnnConfig::weight_shapes`](super::RnnConfig::weight_shapes)
    /// and the bounds of the space. The offsets hold for any weight
    /// space of this plan.
    ///
    /// # Errors
    /// A short `weights`; a shape or offset cuDNN reports that disagrees
    /// (an [`Error::Mismatch`] naming the layer and `linLayerID`); what
    /// cuDNN reports.
    #[doc(alias = "cudnnGetRNNWeightParams")]
    pub fn weight_views(
        &self,
        handle: &Handle,
        weights: DeviceSlice<'_, T>,
    ) -> Result<RnnWeightViews> {
        let len = self.weight_len();
        if weights.len() < len {
            return Err(Error::mismatch(
                "weights buffer length in elements",
                format!(">= {len}"),
                weights.len(),
            ));
        }
        let cfg = *self.rnn().config();
        let dirs = cfg.direction.count();
        let base = weights.as_raw() as usize;
        let _on = handle.enter()?;
        let api = check::cudnn()?;
        let mut views = Vec::new();
        for shape in cfg.weight_shapes()? {
            // Placeholders cuDNN overwrites; read back raw, then dropped.
            let m = TensorDescriptor::<u8>::packed(&[1, 1, 1])?;
            let b = TensorDescriptor::<u8>::packed(&[1, 1, 1])?;
            let mut m_addr: *mut std::ffi::c_void = std::ptr::null_mut();
            let mut b_addr: *mut std::ffi::c_void = std::ptr::null_mut();
            let pseudo = shape.layer * dirs + shape.direction;
            let to_i32 = |v: usize| {
                i32::try_from(v).map_err(|_| Error::invalid("layer", "must fit an int", v))
            };
            // SAFETY: live handle and descriptors; `weights` holds the
            // weight space's bytes (checked); the addresses written are
            // computed, not dereferenced here.
            unsafe {
                cudnn_call!(
                    api,
                    cudnnGetRNNWeightParams(
                        handle.as_raw(),
                        self.rnn().as_raw(),
                        to_i32(pseudo)?,
                        self.sizes().weight_space,
                        weights.as_raw(),
                        to_i32(shape.lin_layer_id)?,
                        m.as_raw(),
                        &mut m_addr,
                        b.as_raw(),
                        &mut b_addr
                    )
                )
            }
            .map_err(|e| {
                e.with_context(format!(
                    "layer {} direction {} linLayerID {}",
                    shape.layer, shape.direction, shape.lin_layer_id
                ))
            })?;
            let what = format!(
                "layer {} direction {} linLayerID {}",
                shape.layer, shape.direction, shape.lin_layer_id
            );
            let matrix_offset = if m_addr.is_null() {
                None
            } else {
                let n = read_nd(&m)?;
                if n != shape.rows * shape.cols {
                    return Err(Error::mismatch(
                        format!("{what} matrix elements"),
                        shape.rows * shape.cols,
                        n,
                    ));
                }
                Some(offset(base, m_addr as usize, T::SIZE, &what)?)
            };
            let bias_offset = if b_addr.is_null() {
                None
            } else {
                let n = read_nd(&b)?;
                if n != shape.bias_len {
                    return Err(Error::mismatch(
                        format!("{what} bias elements"),
                        shape.bias_len,
                        n,
                    ));
                }
                Some(offset(base, b_addr as usize, T::SIZE, &what)?)
            };
            if matrix_offset.is_none() != (shape.rows == 0)
                || bias_offset.is_none() != (shape.bias_len == 0)
            {
                return Err(Error::mismatch(
                    format!("{what}: which parts exist"),
                    format!("matrix {} bias {}", shape.rows > 0, shape.bias_len > 0),
                    format!(
                        "matrix {} bias {}",
                        matrix_offset.is_some(),
                        bias_offset.is_some()
                    ),
                ));
            }
            let view = RnnWeightView {
                shape,
                matrix_offset,
                bias_offset,
            };
            view.check_bounds(len)?;
            views.push(view);
        }
        Ok(RnnWeightViews { views, len })
    }
}

impl RnnWeightView {
    fn check_bounds(&self, len: usize) -> Result<()> {
        let m = self.shape.rows.checked_mul(self.shape.cols);
        for (part, off, n) in [
            ("matrix", self.matrix_offset, m),
            ("bias", self.bias_offset, Some(self.shape.bias_len)),
        ] {
            if let Some(off) = off
                && off
                    .checked_add(n.unwrap_or(usize::MAX))
                    .is_none_or(|end| end > len)
            {
                return Err(Error::invalid(
                    format!(
                        "layer {} linLayerID {} {part}",
                        self.shape.layer, self.shape.lin_layer_id
                    ),
                    format!("must lie inside the weight space of {len} elements"),
                    off,
                ));
            }
        }
        Ok(())
    }
}

fn span(off: usize, n: Option<usize>) -> Result<std::ops::Range<usize>> {
    let end = n
        .and_then(|n| off.checked_add(n))
        .ok_or_else(|| Error::invalid("view", "offset plus size overflows", off))?;
    Ok(off..end)
}

impl RnnWeightViews {
    /// The view of layer `layer`, direction `direction`, `linLayerID` `id`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when there is none.
    pub fn get(&self, layer: usize, direction: usize, id: usize) -> Result<&RnnWeightView> {
        self.views
            .iter()
            .find(|v| {
                v.shape.layer == layer
                    && v.shape.direction == direction
                    && v.shape.lin_layer_id == id
            })
            .ok_or_else(|| {
                Error::invalid(
                    "(layer, direction, linLayerID)",
                    "names no weight",
                    format!("({layer}, {direction}, {id})"),
                )
            })
    }

    /// The matrix of `view` inside `weights` (a weight space of this plan).
    ///
    /// # Errors
    /// No matrix, or `weights` too short.
    pub fn matrix<'a, T: Float>(
        &self,
        view: &RnnWeightView,
        weights: DeviceSlice<'a, T>,
    ) -> Result<DeviceSlice<'a, T>> {
        let off = view
            .matrix_offset
            .ok_or_else(|| Error::invalid("view", "has no matrix", view.shape.lin_layer_id))?;
        weights.slice(span(off, view.shape.rows.checked_mul(view.shape.cols))?)
    }

    /// The bias of `view` inside `weights`.
    ///
    /// # Errors
    /// No bias, or `weights` too short.
    pub fn bias<'a, T: Float>(
        &self,
        view: &RnnWeightView,
        weights: DeviceSlice<'a, T>,
    ) -> Result<DeviceSlice<'a, T>> {
        let off = view
            .bias_offset
            .ok_or_else(|| Error::invalid("view", "has no bias", view.shape.lin_layer_id))?;
        weights.slice(span(off, Some(view.shape.bias_len))?)
    }

    /// The matrix of `view` inside `weights`, writable (to load weights).
    ///
    /// # Errors
    /// No matrix, or `weights` too short.
    pub fn matrix_mut<'a, T: Float>(
        &self,
        view: &RnnWeightView,
        weights: DeviceSliceMut<'a, T>,
    ) -> Result<DeviceSliceMut<'a, T>> {
        let off = view
            .matrix_offset
            .ok_or_else(|| Error::invalid("view", "has no matrix", view.shape.lin_layer_id))?;
        weights.into_slice_mut(span(off, view.shape.rows.checked_mul(view.shape.cols))?)
    }

    /// The bias of `view` inside `weights`, writable.
    ///
    /// # Errors
    /// No bias, or `weights` too short.
    pub fn bias_mut<'a, T: Float>(
        &self,
        view: &RnnWeightView,
        weights: DeviceSliceMut<'a, T>,
    ) -> Result<DeviceSliceMut<'a, T>> {
        let off = view
            .bias_offset
            .ok_or_else(|| Error::invalid("view", "has no bias", view.shape.lin_layer_id))?;
        weights.into_slice_mut(span(off, Some(view.shape.bias_len))?)
    }
}
