//! Pooling forward and backward: [`Handle::pooling_forward`],
//! [`Handle::pooling_backward`], and [`PoolingPlan`], which owns the output
//! descriptor.
//!
//! cuDNN pools 4-d (2 spatial dimensions) and 5-d (3 spatial dimensions)
//! tensors in any layout; other ranks are reported by cuDNN
//! (`CUDNN_STATUS_NOT_SUPPORTED`).

use super::{
    DeviceTensor, DeviceTensorMut, TensorLayout, check_buffer, check_same_shape, packed_in_layout,
    scale_ptr,
};
use crate::check::{self, cudnn_call};
use crate::dnn::{Handle, PoolingDescriptor, TensorDescriptor};
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::runtime::{DeviceSlice, DeviceSliceMut};

/// What [`Handle::pooling_forward`] checks before calling cuDNN: `y` has
/// the shape [`pool.output_shape(x)`](PoolingDescriptor::output_shape).
///
/// # Errors
/// The pooling rules of [`pooling_output_shape`](crate::dnn::pooling_output_shape)
/// (rank, window larger than the padded input), or [`Error::Mismatch`]
/// naming both shapes.
pub fn check_pooling_forward<T: DataType>(
    pool: &PoolingDescriptor,
    x: &TensorDescriptor<T>,
    y: &TensorDescriptor<T>,
) -> Result<()> {
    let want = pool.output_shape(x)?;
    if y.shape() != want.as_slice() {
        return Err(Error::mismatch(
            "y shape (the pooling output shape of x)",
            format!("{want:?}"),
            format!("{:?}", y.shape()),
        ));
    }
    Ok(())
}

/// What [`Handle::pooling_backward`] checks before calling cuDNN: `y` is
/// the pooling output of `x`, `dy` has `y`'s shape, `dx` has `x`'s.
///
/// # Errors
/// As [`check_pooling_forward`], and [`Error::Mismatch`] naming the
/// gradient whose shape differs.
pub fn check_pooling_backward<T: DataType>(
    pool: &PoolingDescriptor,
    y: &TensorDescriptor<T>,
    dy: &TensorDescriptor<T>,
    x: &TensorDescriptor<T>,
    dx: &TensorDescriptor<T>,
) -> Result<()> {
    check_pooling_forward(pool, x, y)?;
    check_same_shape("y", y.shape(), "dy", dy.shape())?;
    check_same_shape("x", x.shape(), "dx", dx.shape())
}

impl Handle {
    /// `y = alpha * pool(x) + beta * y`.
    ///
    /// # Errors
    /// [`check_pooling_forward`]'s, then what cuDNN reports.
    #[doc(alias = "cudnnPoolingForward")]
    pub fn pooling_forward<T: DataType>(
        &mut self,
        pool: &PoolingDescriptor,
        alpha: T::Scale,
        x: DeviceTensor<'_, T>,
        beta: T::Scale,
        mut y: DeviceTensorMut<'_, T>,
    ) -> Result<()> {
        check_pooling_forward(pool, x.desc(), y.desc())?;
        let _on = self.launch("pooling_forward", &[("x", x.device()), ("y", y.device())])?;
        let api = check::cudnn()?;
        // SAFETY: the handle and descriptors are live; `x` and `y` hold at
        // least their descriptors' spans (checked when they were bound);
        // `y` is written only inside its span and cannot overlap `x` (it is
        // an exclusive borrow); alpha and beta are host values of the
        // element type's scaling type, as cuDNN reads them.
        unsafe {
            cudnn_call!(
                api,
                cudnnPoolingForward(
                    self.as_raw(),
                    pool.as_raw(),
                    scale_ptr(&alpha),
                    x.desc().as_raw(),
                    x.ptr(),
                    scale_ptr(&beta),
                    y.desc().as_raw(),
                    y.ptr()
                )
            )
        }
    }

    /// `dx = alpha * pool'(x, y, dy) + beta * dx`, where `y` is the forward
    /// output for `x` (max pooling routes each `dy` to its window's maximum;
    /// average pooling spreads it over the window).
    ///
    /// # Errors
    /// [`check_pooling_backward`]'s, then what cuDNN reports.
    #[allow(clippy::too_many_arguments)] // cuDNN's arguments, in cuDNN's order
    #[doc(alias = "cudnnPoolingBackward")]
    pub fn pooling_backward<T: DataType>(
        &mut self,
        pool: &PoolingDescriptor,
        alpha: T::Scale,
        y: DeviceTensor<'_, T>,
        dy: DeviceTensor<'_, T>,
        x: DeviceTensor<'_, T>,
        beta: T::Scale,
        mut dx: DeviceTensorMut<'_, T>,
    ) -> Result<()> {
        check_pooling_backward(pool, y.desc(), dy.desc(), x.desc(), dx.desc())?;
        let _on = self.launch(
            "pooling_backward",
            &[
                ("y", y.device()),
                ("dy", dy.device()),
                ("x", x.device()),
                ("dx", dx.device()),
            ],
        )?;
        let api = check::cudnn()?;
        // SAFETY: as in `pooling_forward`: live handle and descriptors, every
        // buffer at least its descriptor's span, `dx` exclusive.
        unsafe {
            cudnn_call!(
                api,
                cudnnPoolingBackward(
                    self.as_raw(),
                    pool.as_raw(),
                    scale_ptr(&alpha),
                    y.desc().as_raw(),
                    y.ptr(),
                    dy.desc().as_raw(),
                    dy.ptr(),
                    x.desc().as_raw(),
                    x.ptr(),
                    scale_ptr(&beta),
                    dx.desc().as_raw(),
                    dx.ptr()
                )
            )
        }
    }
}

/// A pooling for one input shape: owns the pooling descriptor, the input
/// descriptor and the output descriptor (packed, in the input's
/// [`TensorLayout`]). Gradients use the same descriptors (`dy` as `y`, `dx` as
/// `x`). Validated once; running it checks only buffer lengths.
///
/// ```no_run
/// # use cudnn::dnn::*;
/// # use cudnn::runtime::{DeviceBuffer, Stream};
/// let stream = Stream::new()?;
/// let mut h = Handle::new(&stream)?;
/// let pool = PoolingDescriptor::new_2d(PoolingMode::Max, [2, 2], [0, 0], [2, 2])?;
/// let plan = PoolingPlan::new(pool, TensorDescriptor::<f32>::nhwc(8, 64, 32, 32)?)?;
/// assert_eq!(plan.y_desc().shape(), [8, 64, 16, 16]);
/// let x = DeviceBuffer::<f32>::zeroed(plan.x_desc().len_required())?;
/// let mut y = DeviceBuffer::<f32>::alloc(plan.y_desc().len_required())?;
/// plan.forward(&mut h, 1.0, &x, 0.0, &mut y)?;
/// # Ok::<(), cudnn::Error>(())
/// ```
#[derive(Debug)]
pub struct PoolingPlan<T: DataType> {
    pool: PoolingDescriptor,
    x: TensorDescriptor<T>,
    y: TensorDescriptor<T>,
}

impl<T: DataType> PoolingPlan<T> {
    /// Pool `x` with `pool`; the output is packed in `x`'s layout.
    ///
    /// # Errors
    /// The pooling rules (rank, window larger than the padded input).
    pub fn new(pool: PoolingDescriptor, x: TensorDescriptor<T>) -> Result<Self> {
        let shape = pool.output_shape(&x)?;
        let y = packed_in_layout(&shape, TensorLayout::of(&x))?;
        Ok(Self { pool, x, y })
    }

    /// Pool `x` into `y`, both given.
    ///
    /// # Errors
    /// [`check_pooling_forward`]'s.
    pub fn with_output(
        pool: PoolingDescriptor,
        x: TensorDescriptor<T>,
        y: TensorDescriptor<T>,
    ) -> Result<Self> {
        check_pooling_forward(&pool, &x, &y)?;
        Ok(Self { pool, x, y })
    }

    /// The pooling descriptor.
    pub fn pooling(&self) -> &PoolingDescriptor {
        &self.pool
    }

    /// The input (and `dx`) descriptor.
    pub fn x_desc(&self) -> &TensorDescriptor<T> {
        &self.x
    }

    /// The output (and `dy`) descriptor.
    pub fn y_desc(&self) -> &TensorDescriptor<T> {
        &self.y
    }

    /// `y = alpha * pool(x) + beta * y`.
    ///
    /// # Errors
    /// A buffer shorter than its descriptor's span (named), then what cuDNN reports.
    #[doc(alias = "cudnnPoolingForward")]
    pub fn forward<'a>(
        &self,
        handle: &mut Handle,
        alpha: T::Scale,
        x: impl Into<DeviceSlice<'a, T>>,
        beta: T::Scale,
        y: impl Into<DeviceSliceMut<'a, T>>,
    ) -> Result<()> {
        let (x, y) = (x.into(), y.into());
        check_buffer("x", self.x.len_required(), x.len())?;
        check_buffer("y", self.y.len_required(), y.len())?;
        handle.pooling_forward(
            &self.pool,
            alpha,
            DeviceTensor::new(&self.x, x)?,
            beta,
            DeviceTensorMut::new(&self.y, y)?,
        )
    }

    /// `dx = alpha * pool'(x, y, dy) + beta * dx`.
    ///
    /// # Errors
    /// A buffer shorter than its descriptor's span (named), then what cuDNN reports.
    #[allow(clippy::too_many_arguments)] // cuDNN's arguments, in cuDNN's order
    #[doc(alias = "cudnnPoolingBackward")]
    pub fn backward<'a>(
        &self,
        handle: &mut Handle,
        alpha: T::Scale,
        y: impl Into<DeviceSlice<'a, T>>,
        dy: impl Into<DeviceSlice<'a, T>>,
        x: impl Into<DeviceSlice<'a, T>>,
        beta: T::Scale,
        dx: impl Into<DeviceSliceMut<'a, T>>,
    ) -> Result<()> {
        let (y, dy, x, dx) = (y.into(), dy.into(), x.into(), dx.into());
        for (name, need, got) in [
            ("y", self.y.len_required(), y.len()),
            ("dy", self.y.len_required(), dy.len()),
            ("x", self.x.len_required(), x.len()),
            ("dx", self.x.len_required(), dx.len()),
        ] {
            check_buffer(name, need, got)?;
        }
        handle.pooling_backward(
            &self.pool,
            alpha,
            DeviceTensor::new(&self.y, y)?,
            DeviceTensor::new(&self.y, dy)?,
            DeviceTensor::new(&self.x, x)?,
            beta,
            DeviceTensorMut::new(&self.x, dx)?,
        )
    }
}
