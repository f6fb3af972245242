//! Tensor reduction: [`ReduceTensorDescriptor`], [`ReducePlan`] (workspace
//! and index sizes computed once) and [`Handle::reduce_tensor`].
//!
//! `C = alpha * reduce(A) + beta * C`, reducing every dimension where `C`
//! has size 1 and `A` does not. Checked before cuDNN is called: `C` has
//! `A`'s rank and each of its dimensions equals `A`'s or is 1; indices are
//! asked for only with [`ReduceOp::Min`] or [`ReduceOp::Max`] (cuDNN
//! ignores them for the others); an index buffer is given exactly when the
//! descriptor asks for indices. The workspace comes from the handle
//! ([`Handle::workspace`]), sized by cuDNN.

use std::fmt;
use std::marker::PhantomData;
use std::ptr;

use super::tensor_ops::compute_type;
use super::{DeviceTensor, DeviceTensorMut, check_broadcast, check_buffer, scale_ptr};
use crate::check::{self, cudnn_call};
use crate::dnn::tensor::descriptor_owner;
use crate::dnn::{Handle, NanPropagation, TensorDescriptor};
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::runtime::{Device, DeviceSlice, DeviceSliceMut};
use crate::sys::cudnn as dnn;

/// The reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// The sum (`CUDNN_REDUCE_TENSOR_ADD`).
    Add,
    /// The product (`CUDNN_REDUCE_TENSOR_MUL`).
    Mul,
    /// The minimum (`CUDNN_REDUCE_TENSOR_MIN`); can give indices.
    Min,
    /// The maximum (`CUDNN_REDUCE_TENSOR_MAX`); can give indices.
    Max,
    /// The largest absolute value (`CUDNN_REDUCE_TENSOR_AMAX`).
    Amax,
    /// The mean (`CUDNN_REDUCE_TENSOR_AVG`).
    Avg,
    /// The sum of absolute values (`CUDNN_REDUCE_TENSOR_NORM1`).
    Norm1,
    /// The square root of the sum of squares (`CUDNN_REDUCE_TENSOR_NORM2`).
    Norm2,
    /// The product of the non-zero elements (`CUDNN_REDUCE_TENSOR_MUL_NO_ZEROS`).
    MulNoZeros,
}

impl ReduceOp {
    /// Every reduction.
    pub const ALL: [ReduceOp; 9] = [
        ReduceOp::Add,
        ReduceOp::Mul,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Amax,
        ReduceOp::Avg,
        ReduceOp::Norm1,
        ReduceOp::Norm2,
        ReduceOp::MulNoZeros,
    ];

    /// Whether cuDNN gives indices for this reduction (min and max).
    pub fn has_indices(self) -> bool {
        matches!(self, ReduceOp::Min | ReduceOp::Max)
    }

    /// The cuDNN constant.
    pub fn to_raw(self) -> dnn::cudnnReduceTensorOp_t {
        use dnn::cudnnReduceTensorOp_t as R;
        match self {
            ReduceOp::Add => R::CUDNN_REDUCE_TENSOR_ADD,
            ReduceOp::Mul => R::CUDNN_REDUCE_TENSOR_MUL,
            ReduceOp::Min => R::CUDNN_REDUCE_TENSOR_MIN,
            ReduceOp::Max => R::CUDNN_REDUCE_TENSOR_MAX,
            ReduceOp::Amax => R::CUDNN_REDUCE_TENSOR_AMAX,
            ReduceOp::Avg => R::CUDNN_REDUCE_TENSOR_AVG,
            ReduceOp::Norm1 => R::CUDNN_REDUCE_TENSOR_NORM1,
            ReduceOp::Norm2 => R::CUDNN_REDUCE_TENSOR_NORM2,
            ReduceOp::MulNoZeros => R::CUDNN_REDUCE_TENSOR_MUL_NO_ZEROS,
        }
    }

    /// From the cuDNN constant; unknown values are an error.
    pub fn from_raw(raw: dnn::cudnnReduceTensorOp_t) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|o| o.to_raw() == raw)
            .ok_or_else(|| Error::invalid("op", "unknown cudnnReduceTensorOp_t", raw.0))
    }
}

descriptor_owner!(
    /// Owns a `cudnnReduceTensorDescriptor_t`.
    RawReduceTensor,
    cudnnReduceTensorStruct,
    cudnnCreateReduceTensorDescriptor,
    cudnnDestroyReduceTensorDescriptor
);

/// A cuDNN reduce-tensor descriptor for tensors of `T`: the reduction, NaN
/// propagation (min and max only), whether flattened 32-bit indices are
/// computed, and the compute type (`f64` for `f64` tensors, `f32`
/// otherwise, chosen from `T`).
///
/// `Send` (a plain host structure, tied to no handle, stream or thread), not `Sync`.
pub struct ReduceTensorDescriptor<T: DataType> {
    raw: RawReduceTensor,
    op: ReduceOp,
    nan: NanPropagation,
    indices: bool,
    _t: PhantomData<T>,
}

impl<T: DataType> ReduceTensorDescriptor<T> {
    /// A reduction of tensors of `T`; with `indices`, cuDNN also writes the
    /// position of each minimum or maximum within its reduced sub-tensor
    /// (`CUDNN_REDUCE_TENSOR_FLATTENED_INDICES`, in `0..` the sub-tensor's
    /// element count). With one reduced dimension that is the index along
    /// it; over several, cuDNN does not document the flattening order, so
    /// do not decode such an index into coordinates.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for indices with a reduction other than
    /// min or max (checked before cuDNN is called).
    #[doc(alias = "cudnnSetReduceTensorDescriptor")]
    pub fn new(op: ReduceOp, nan: NanPropagation, indices: bool) -> Result<Self> {
        if indices && !op.has_indices() {
            return Err(Error::invalid(
                "indices",
                format!("cuDNN computes indices only for Min and Max, not {op:?}"),
                indices,
            ));
        }
        let raw = RawReduceTensor::create()?;
        let ind = if indices {
            dnn::cudnnReduceTensorIndices_t::CUDNN_REDUCE_TENSOR_FLATTENED_INDICES
        } else {
            dnn::cudnnReduceTensorIndices_t::CUDNN_REDUCE_TENSOR_NO_INDICES
        };
        // SAFETY: `raw` is a live descriptor we own; all values are known constants.
        unsafe {
            cudnn_call!(
                check::cudnn()?,
                cudnnSetReduceTensorDescriptor(
                    raw.as_ptr(),
                    op.to_raw(),
                    compute_type::<T>(),
                    nan.to_raw(),
                    ind,
                    dnn::cudnnIndicesType_t::CUDNN_32BIT_INDICES
                )
            )
        }?;
        Ok(Self {
            raw,
            op,
            nan,
            indices,
            _t: PhantomData,
        })
    }

    /// The reduction.
    pub fn op(&self) -> ReduceOp {
        self.op
    }

    /// NaN propagation.
    pub fn nan_propagation(&self) -> NanPropagation {
        self.nan
    }

    /// Whether indices are computed.
    pub fn indices(&self) -> bool {
        self.indices
    }

    /// The raw descriptor, still owned by `self`. Do not set it through this
    /// pointer: the settings kept on the Rust side would no longer match.
    pub fn as_raw(&self) -> dnn::cudnnReduceTensorDescriptor_t {
        self.raw.as_ptr()
    }

    /// Give up ownership of the raw descriptor (the caller destroys it).
    pub fn into_raw(self) -> dnn::cudnnReduceTensorDescriptor_t {
        self.raw.into_raw()
    }

    /// Take ownership of a descriptor made elsewhere, reading its settings
    /// back from cuDNN.
    ///
    /// # Errors
    /// A null pointer, settings this type does not know or rejects (indices
    /// other than 32-bit, indices with a reduction other than min or max, a
    /// compute type other than `T`'s). On error the descriptor is left alone.
    ///
    /// # Safety
    /// `raw` was made by `cudnnCreateReduceTensorDescriptor`, is not
    /// destroyed, and nothing else destroys or modifies it from now on.
    #[doc(alias = "cudnnGetReduceTensorDescriptor")]
    pub unsafe fn from_raw(raw: dnn::cudnnReduceTensorDescriptor_t) -> Result<Self> {
        if raw.is_null() {
            return Err(Error::invalid("raw", "must not be null", "null"));
        }
        let mut op = dnn::cudnnReduceTensorOp_t(u32::MAX);
        let mut comp = dnn::cudnnDataType_t(u32::MAX);
        let mut nan = dnn::cudnnNanPropagation_t(u32::MAX);
        let mut ind = dnn::cudnnReduceTensorIndices_t(u32::MAX);
        let mut ind_type = dnn::cudnnIndicesType_t(u32::MAX);
        // SAFETY: the caller promises `raw` is a live reduce-tensor
        // descriptor; the out-pointers are valid.
        unsafe {
            cudnn_call!(
                check::cudnn()?,
                cudnnGetReduceTensorDescriptor(
                    raw,
                    &mut op,
                    &mut comp,
                    &mut nan,
                    &mut ind,
                    &mut ind_type
                )
            )
        }?;
        if comp != compute_type::<T>() {
            return Err(Error::mismatch(
                format!("reduce-tensor compute type for {} tensors", T::NAME),
                compute_type::<T>().0,
                comp.0,
            ));
        }
        let (op, nan) = (ReduceOp::from_raw(op)?, NanPropagation::from_raw(nan)?);
        let indices = match ind {
            dnn::cudnnReduceTensorIndices_t::CUDNN_REDUCE_TENSOR_NO_INDICES => false,
            dnn::cudnnReduceTensorIndices_t::CUDNN_REDUCE_TENSOR_FLATTENED_INDICES => true,
            other => {
                return Err(Error::invalid(
                    "indices",
                    "unknown cudnnReduceTensorIndices_t",
                    other.0,
                ));
            }
        };
        if indices {
            if ind_type != dnn::cudnnIndicesType_t::CUDNN_32BIT_INDICES {
                return Err(Error::invalid(
                    "indices type",
                    "must be CUDNN_32BIT_INDICES (the only one cuDNN supports)",
                    ind_type.0,
                ));
            }
            if !op.has_indices() {
                return Err(Error::invalid(
                    "indices",
                    format!("cuDNN computes indices only for Min and Max, not {op:?}"),
                    indices,
                ));
            }
        }
        // SAFETY: the caller hands us ownership of a live descriptor.
        let raw = unsafe { RawReduceTensor::adopt(raw) }?;
        Ok(Self {
            raw,
            op,
            nan,
            indices,
            _t: PhantomData,
        })
    }

    /// Destroy the descriptor now and report cuDNN's status (dropping it
    /// ignores the status).
    #[doc(alias = "cudnnDestroyReduceTensorDescriptor")]
    pub fn destroy(self) -> Result<()> {
        self.raw.destroy()
    }
}

impl<T: DataType> fmt::Debug for ReduceTensorDescriptor<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReduceTensorDescriptor")
            .field("dtype", &T::NAME)
            .field("op", &self.op)
            .field("nan", &self.nan)
            .field("indices", &self.indices)
            .field("raw", &self.raw)
            .finish()
    }
}

/// What a reduction checks before calling cuDNN: `c` has `a`'s rank, each
/// of its dimensions equals `a`'s or is 1, and at least one differs.
///
/// cuDNN refuses a reduction that reduces nothing (`c`'s shape equal to
/// `a`'s): `cudnnReduceTensor` returns `CUDNN_STATUS_BAD_PARAM` with the
/// message `!dims_differ` (cuDNN 9.19 on an H100, first GPU run). Refused
/// here, typed; [`Handle::transform_tensor`] is the copy.
///
/// # Errors
/// As [`check_broadcast`] (with `c` as the broadcast operand), then
/// [`Error::InvalidArgument`] naming `c.shape` when it equals `a`'s.
pub fn check_reduce<T: DataType>(a: &TensorDescriptor<T>, c: &TensorDescriptor<T>) -> Result<()> {
    check_broadcast("c", c.shape(), "a", a.shape())?;
    if c.shape() == a.shape() {
        return Err(Error::invalid(
            "c.shape",
            format!(
                "must differ from a.shape ({:?}) in at least one dimension: cuDNN's \
                 cudnnReduceTensor refuses a reduction that reduces nothing \
                 (BAD_PARAM, dims_differ); copy with transform_tensor instead",
                a.shape()
            ),
            format!("{:?}", c.shape()),
        ));
    }
    Ok(())
}

/// Check the index buffer against the descriptor and the sizes cuDNN wants.
fn check_indices(
    wants: bool,
    indices: Option<&DeviceSliceMut<'_, i32>>,
    c: &TensorDescriptor<impl DataType>,
    indices_bytes: usize,
) -> Result<()> {
    match (wants, indices) {
        (false, None) => Ok(()),
        (false, Some(_)) => Err(Error::invalid(
            "indices",
            "must be None: the reduce descriptor computes no indices",
            "Some",
        )),
        (true, None) => Err(Error::invalid(
            "indices",
            "must be given: the reduce descriptor computes indices",
            "None",
        )),
        (true, Some(ind)) => {
            check_buffer("indices", c.len_required(), ind.len())?;
            if ind.byte_len() < indices_bytes {
                return Err(Error::mismatch(
                    "indices buffer size in bytes (cudnnGetReductionIndicesSize)",
                    format!(">= {indices_bytes}"),
                    ind.byte_len(),
                ));
            }
            Ok(())
        }
    }
}

/// Ask cuDNN for the workspace and index sizes of a reduction.
fn reduce_sizes<T: DataType>(
    handle: &Handle,
    desc: &ReduceTensorDescriptor<T>,
    a: &TensorDescriptor<T>,
    c: &TensorDescriptor<T>,
) -> Result<(usize, usize)> {
    let _on = handle.enter()?;
    let api = check::cudnn()?;
    let (mut ws, mut ind) = (0usize, 0usize);
    // SAFETY: live handle and descriptors (shapes checked); valid out-pointers.
    unsafe {
        cudnn_call!(
            api,
            cudnnGetReductionWorkspaceSize(
                handle.as_raw(),
                desc.as_raw(),
                a.as_raw(),
                c.as_raw(),
                &mut ws
            )
        )
    }?;
    // SAFETY: as above.
    unsafe {
        cudnn_call!(
            api,
            cudnnGetReductionIndicesSize(
                handle.as_raw(),
                desc.as_raw(),
                a.as_raw(),
                c.as_raw(),
                &mut ind
            )
        )
    }?;
    Ok((ws, ind))
}

/// Run a checked reduction with known sizes.
#[allow(clippy::too_many_arguments)]
fn run_reduce<T: DataType>(
    handle: &mut Handle,
    desc: &ReduceTensorDescriptor<T>,
    (workspace_bytes, indices_bytes): (usize, usize),
    alpha: T::Scale,
    a: DeviceTensor<'_, T>,
    beta: T::Scale,
    mut c: DeviceTensorMut<'_, T>,
    mut indices: Option<DeviceSliceMut<'_, i32>>,
) -> Result<()> {
    check_reduce(a.desc(), c.desc())?;
    check_indices(desc.indices(), indices.as_ref(), c.desc(), indices_bytes)?;
    let (ind_ptr, ind_bytes) = match indices.as_mut() {
        Some(i) => (i.as_raw_mut(), i.byte_len()),
        None => (ptr::null_mut(), 0),
    };
    let _on = handle.launch(
        "reduce_tensor",
        &[
            ("a", a.device()),
            ("c", c.device()),
            ("indices", indices.as_ref().and_then(|i| i.device())),
        ],
    )?;
    let h = handle.as_raw();
    let api = check::cudnn()?;
    let mut ws = handle.workspace(workspace_bytes)?;
    let (ws_ptr, ws_len) = (ws.as_raw_mut(), ws.byte_len());
    // SAFETY: live handle and descriptors; `a` and `c` hold at least their
    // spans (checked when bound), `c` is exclusive; the shapes obey the
    // reduction rule; the workspace and index buffers are at least the sizes
    // cuDNN asked for and their true sizes are passed; the workspace is used
    // only by work on the handle's stream (the handle's contract).
    unsafe {
        cudnn_call!(
            api,
            cudnnReduceTensor(
                h,
                desc.as_raw(),
                ind_ptr.cast(),
                ind_bytes,
                ws_ptr,
                ws_len,
                scale_ptr(&alpha),
                a.desc().as_raw(),
                a.ptr(),
                scale_ptr(&beta),
                c.desc().as_raw(),
                c.ptr()
            )
        )
    }
}

impl Handle {
    /// `c = alpha * reduce(a) + beta * c`; `indices` (one per element of
    /// `c`) exactly when the descriptor computes them. Asks cuDNN for the
    /// workspace and index sizes on every call; a [`ReducePlan`] asks once.
    ///
    /// # Errors
    /// [`check_reduce`]'s, an index buffer given or missing against the
    /// descriptor or too short, then what cuDNN reports.
    #[doc(alias = "cudnnReduceTensor")]
    pub fn reduce_tensor<T: DataType>(
        &mut self,
        desc: &ReduceTensorDescriptor<T>,
        alpha: T::Scale,
        a: DeviceTensor<'_, T>,
        beta: T::Scale,
        c: DeviceTensorMut<'_, T>,
        indices: Option<DeviceSliceMut<'_, i32>>,
    ) -> Result<()> {
        check_reduce(a.desc(), c.desc())?;
        let sizes = reduce_sizes(self, desc, a.desc(), c.desc())?;
        run_reduce(self, desc, sizes, alpha, a, beta, c, indices)
    }
}

/// A reduction for one pair of shapes: owns the reduce descriptor, the
/// input and output descriptors, and the workspace and index sizes cuDNN
/// asked for (so running it makes one library call).
#[derive(Debug)]
pub struct ReducePlan<T: DataType> {
    desc: ReduceTensorDescriptor<T>,
    a: TensorDescriptor<T>,
    c: TensorDescriptor<T>,
    workspace_bytes: usize,
    indices_bytes: usize,
    /// The device the sizes were asked for (the planning handle's).
    device: Device,
}

impl<T: DataType> ReducePlan<T> {
    /// Plan reducing `a` into `c` on `handle`'s device.
    ///
    /// # Errors
    /// [`check_reduce`]'s, then what cuDNN reports for the sizes.
    #[doc(alias = "cudnnGetReductionWorkspaceSize")]
    #[doc(alias = "cudnnGetReductionIndicesSize")]
    pub fn new(
        handle: &Handle,
        desc: ReduceTensorDescriptor<T>,
        a: TensorDescriptor<T>,
        c: TensorDescriptor<T>,
    ) -> Result<Self> {
        check_reduce(&a, &c)?;
        let (workspace_bytes, indices_bytes) = reduce_sizes(handle, &desc, &a, &c)?;
        Ok(Self {
            desc,
            a,
            c,
            workspace_bytes,
            indices_bytes,
            device: handle.device(),
        })
    }

    /// The reduce descriptor.
    pub fn reduce_desc(&self) -> &ReduceTensorDescriptor<T> {
        &self.desc
    }

    /// The input descriptor.
    pub fn a_desc(&self) -> &TensorDescriptor<T> {
        &self.a
    }

    /// The output descriptor.
    pub fn c_desc(&self) -> &TensorDescriptor<T> {
        &self.c
    }

    /// The workspace the reduction takes from the handle, in bytes.
    pub fn workspace_bytes(&self) -> usize {
        self.workspace_bytes
    }

    /// The index space cuDNN wants, in bytes (when computing indices).
    pub fn indices_bytes(&self) -> usize {
        self.indices_bytes
    }

    /// The shortest index buffer, in `i32` elements, [`run`](Self::run) accepts.
    pub fn indices_len(&self) -> usize {
        self.c.len_required().max(self.indices_bytes.div_ceil(4))
    }

    /// `c = alpha * reduce(a) + beta * c`; `indices` exactly when the
    /// descriptor computes them. On a handle of another device than the
    /// planning one, the sizes are asked for again there first.
    ///
    /// # Errors
    /// A buffer shorter than its descriptor's span (named), an index buffer
    /// given or missing against the descriptor, then what cuDNN reports.
    #[doc(alias = "cudnnReduceTensor")]
    pub fn run<'a>(
        &self,
        handle: &mut Handle,
        alpha: T::Scale,
        a: impl Into<DeviceSlice<'a, T>>,
        beta: T::Scale,
        c: impl Into<DeviceSliceMut<'a, T>>,
        indices: Option<DeviceSliceMut<'_, i32>>,
    ) -> Result<()> {
        let (a, c) = (a.into(), c.into());
        check_buffer("a", self.a.len_required(), a.len())?;
        check_buffer("c", self.c.len_required(), c.len())?;
        // The sizes were asked for the planning handle's device; another
        // device (another architecture) may need more: ask again there.
        let sizes = if handle.device() == self.device {
            (self.workspace_bytes, self.indices_bytes)
        } else {
            reduce_sizes(handle, &self.desc, &self.a, &self.c)?
        };
        run_reduce(
            handle,
            &self.desc,
            sizes,
            alpha,
            DeviceTensor::new(&self.a, a)?,
            beta,
            DeviceTensorMut::new(&self.c, c)?,
            indices,
        )
    }
}
