//! Fused convolution + bias + activation ([`ConvBiasActivationPlan`]) and
//! the bias gradient ([`ConvBackwardBiasPlan`]).

use std::cell::Cell;
use std::ffi::c_void;
use std::fmt;

use super::activation::{ActivationDescriptor, ActivationMode};
use super::algo_cache::AlgoChoice;
use super::conv::ConvDescriptor;
use super::conv_ops::{AlgoSearch, ConvAlgo, ConvDataType, ConvFwd, ConvPass, PlanOptions};
use super::conv_plans::ConvForwardPlan;
use super::conv_problem::{ConvProblem, Launch};
use super::filter::FilterDescriptor;
use super::handle::Handle;
use super::pooling::NanPropagation;
use super::tensor::TensorDescriptor;
use crate::check::{self, cudnn_call};
use crate::dtype::{DataType, Scale};
use crate::error::{Error, Result};
use crate::runtime::{DeviceSlice, DeviceSliceMut};

/// Which way a [`ConvBiasActivationPlan`] ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FusedPath {
    /// One `cudnnConvolutionBiasActivationForward` call.
    Fused,
    /// `cudnnConvolutionForward`, `cudnnAddTensor` (residual, bias), then
    /// `cudnnActivationForward` (skipped for identity): 2 to 4 calls.
    Fallback,
}

/// The residual input `z` of a fused convolution, scaled by `alpha2`.
#[derive(Debug, Clone, Copy)]
pub enum Residual<'a, T: DataType> {
    /// No residual.
    None,
    /// `alpha2 * z`, with `z` shaped and laid out like `y`.
    Input {
        /// `alpha2`.
        scale: T::Scale,
        /// The residual tensor.
        z: DeviceSlice<'a, T>,
    },
    /// `alpha2 * y`: the output's current contents are the residual
    /// (in place, as cuDNN allows `z == y`).
    Output {
        /// `alpha2`.
        scale: T::Scale,
    },
}

impl<T: DataType> Residual<'_, T> {
    /// The device of `z` (`None` when there is no separate residual buffer).
    pub fn device(&self) -> Option<crate::runtime::Device> {
        match self {
            Residual::Input { z, .. } => z.device(),
            Residual::None | Residual::Output { .. } => None,
        }
    }
}

/// `[1, k, 1, ...]` of `rank` dimensions, packed: a per-channel bias.
fn bias_descriptor<T: DataType>(k: usize, rank: usize) -> Result<TensorDescriptor<T>> {
    let mut dims = vec![1usize; rank];
    if rank > 1 {
        dims[1] = k;
    }
    TensorDescriptor::packed(&dims)
}

/// Whether `cudnnConvolutionBiasActivationForward` supports `mode` with
/// `algo`: ReLU with any forward algorithm, identity only with
/// `IMPLICIT_PRECOMP_GEMM` (NVIDIA's documented limits; its activation
/// descriptor must also not propagate NaN, which the plan sees to).
///
/// # Errors
/// [`Error::Unsupported`] naming the activation and the algorithm.
pub fn check_fusable(mode: ActivationMode, algo: ConvAlgo) -> Result<()> {
    let ok = match mode {
        ActivationMode::Relu => matches!(algo, ConvAlgo::Forward(_)),
        ActivationMode::Identity => algo == ConvAlgo::IMPLICIT_PRECOMP_GEMM,
        _ => false,
    };
    if ok {
        return Ok(());
    }
    Err(Error::Unsupported {
        what: format!(
            "the fused convolution + bias + activation (cudnnConvolutionBiasActivationForward) with activation {mode:?} and algorithm {algo} ({:?})",
            algo.direction()
        ),
        needs: Some(
            "ReLU with a forward algorithm, or identity with IMPLICIT_PRECOMP_GEMM; use FusedPath::Fallback otherwise"
                .into(),
        ),
    })
}

fn is_not_supported(e: &Error) -> bool {
    e.cudnn_status()
        .is_some_and(|s| (3000..4000).contains(&s.0))
}

/// A fused `y = act(alpha1 * conv(x, w) + alpha2 * z + bias)`, ready to
/// run. The bias is `[1, k, 1, ...]` of the plan's element type; `z` has
/// `y`'s shape and layout.
///
/// The fused path is taken only where NVIDIA documents it ([`check_fusable`]:
/// ReLU, or identity with `IMPLICIT_PRECOMP_GEMM`), checked in Rust before
/// cuDNN is called. The fused call gets its own copy of the activation with
/// `CUDNN_NOT_PROPAGATE_NAN`, the only NaN option it supports
/// ([`fused_activation`](Self::fused_activation)); the fallback keeps the
/// caller's ([`activation`](Self::activation)). When cuDNN still reports the
/// fused call unsupported (`CUDNN_STATUS_NOT_SUPPORTED*`) the run falls back
/// to separate calls and the plan remembers it, so later runs go straight to
/// the fallback; [`run`](Self::run) says which path ran.
pub struct ConvBiasActivationPlan<T: ConvDataType> {
    conv: ConvForwardPlan<T>,
    bias: TensorDescriptor<T>,
    /// The caller's activation (mode and NaN option), for the fallback.
    activation: ActivationDescriptor,
    /// The same mode with `CUDNN_NOT_PROPAGATE_NAN`, for the fused call.
    fused_activation: ActivationDescriptor,
    path: Cell<FusedPath>,
}

impl<T: ConvDataType> fmt::Debug for ConvBiasActivationPlan<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConvBiasActivationPlan")
            .field("conv", &self.conv)
            .field("activation", &self.activation.mode())
            .field("path", &self.path.get())
            .finish()
    }
}

impl<T: ConvDataType> ConvBiasActivationPlan<T> {
    /// # Errors
    /// [`check_fusable`]'s when `path` is [`FusedPath::Fused`]; what
    /// creating the descriptors reports.
    pub(crate) fn new(
        conv: ConvForwardPlan<T>,
        activation: &ActivationDescriptor,
        path: FusedPath,
    ) -> Result<Self> {
        let mode = activation.mode();
        if path == FusedPath::Fused {
            check_fusable(mode, conv.algo())?;
        }
        let y = conv.output();
        let bias = bias_descriptor::<T>(y.shape()[1], y.rank())?;
        let fused_activation = ActivationDescriptor::new(mode, NanPropagation::NotPropagate)?;
        let activation = ActivationDescriptor::new(mode, activation.nan_propagation())?;
        Ok(Self {
            conv,
            bias,
            activation,
            fused_activation,
            path: Cell::new(path),
        })
    }

    /// The convolution part (algorithm, workspace, descriptors).
    pub fn conv_plan(&self) -> &ConvForwardPlan<T> {
        &self.conv
    }

    /// The bias descriptor, `[1, k, 1, ...]`.
    pub fn bias(&self) -> &TensorDescriptor<T> {
        &self.bias
    }

    /// The output (and residual) descriptor.
    pub fn output(&self) -> &TensorDescriptor<T> {
        self.conv.output()
    }

    /// The activation as the caller gave it (the fallback applies it).
    pub fn activation(&self) -> &ActivationDescriptor {
        &self.activation
    }

    /// The activation the fused call is given: the caller's mode with
    /// `CUDNN_NOT_PROPAGATE_NAN`, the only NaN option
    /// `cudnnConvolutionBiasActivationForward` supports.
    pub fn fused_activation(&self) -> &ActivationDescriptor {
        &self.fused_activation
    }

    /// The path the next run takes.
    pub fn path(&self) -> FusedPath {
        self.path.get()
    }

    /// Choose the path of later runs. [`FusedPath::Fused`] where cuDNN
    /// reports the fused call unsupported at run time still falls back (and
    /// the plan remembers that).
    ///
    /// # Errors
    /// [`check_fusable`]'s for [`FusedPath::Fused`] with an activation or
    /// algorithm the fused call does not support (the path is unchanged).
    pub fn set_path(&mut self, path: FusedPath) -> Result<()> {
        if path == FusedPath::Fused {
            check_fusable(self.activation.mode(), self.conv.algo())?;
        }
        self.path.set(path);
        Ok(())
    }

    /// Workspace bytes one run needs.
    pub fn workspace_size(&self) -> usize {
        self.conv.workspace_size()
    }

    /// Check buffer lengths in elements: `x`, `w`, `y` as
    /// [`ConvForwardPlan::check_buffers`], `z` (when given) like `y`, `bias`
    /// at least `k`.
    ///
    /// # Errors
    /// [`Error::Mismatch`] naming the buffer.
    pub fn check_buffers(
        &self,
        x_len: usize,
        w_len: usize,
        z_len: Option<usize>,
        bias_len: usize,
        y_len: usize,
    ) -> Result<()> {
        self.conv.check_buffers(x_len, w_len, y_len)?;
        let need = self.conv.output().len_required();
        if let Some(z) = z_len.filter(|&z| z < need) {
            return Err(Error::mismatch(
                "z buffer length in elements (len_required of y's descriptor)",
                format!("at least {need}"),
                z,
            ));
        }
        if bias_len < self.bias.len_required() {
            return Err(Error::mismatch(
                "bias buffer length in elements (output channels)",
                format!("at least {}", self.bias.len_required()),
                bias_len,
            ));
        }
        Ok(())
    }

    /// `y = act(alpha1 * conv(x, w) + alpha2 * z + bias)` on the handle's
    /// stream, with the handle's workspace; returns the path that ran.
    ///
    /// # Errors
    /// [`Error::Mismatch`] for a short buffer (checked before anything
    /// runs); what cuDNN reports.
    #[allow(clippy::too_many_arguments)]
    #[doc(alias = "cudnnConvolutionBiasActivationForward")]
    pub fn run<'x, 'w, 'b, 'y>(
        &self,
        handle: &mut Handle,
        alpha1: T::Scale,
        x: impl Into<DeviceSlice<'x, T>>,
        w: impl Into<DeviceSlice<'w, T>>,
        residual: Residual<'_, T>,
        bias: impl Into<DeviceSlice<'b, T>>,
        y: impl Into<DeviceSliceMut<'y, T>>,
    ) -> Result<FusedPath> {
        let (x, w, bias, mut y) = (x.into(), w.into(), bias.into(), y.into());
        self.check(&x, &w, &residual, &bias, &y)?;
        let _on = handle.launch(
            "convolution bias activation",
            &[
                ("x", x.device()),
                ("w", w.device()),
                ("bias", bias.device()),
                ("y", y.device()),
                ("z", residual.device()),
            ],
        )?;
        self.conv.0.verify(handle)?;
        let h = handle.as_raw();
        let mut ws = handle.workspace(self.conv.workspace_size())?;
        let l = Launch {
            h,
            a: x.as_raw(),
            b: w.as_raw(),
            out: y.as_raw_mut(),
            ws: ws.as_raw_mut(),
            ws_bytes: ws.len(),
        };
        // SAFETY: `h` is live (borrowed from `handle`); every buffer holds
        // at least what its descriptor addresses (checked above); `y` is
        // exclusively borrowed so `z` and the inputs cannot alias it; the
        // workspace is valid for `ws_bytes` bytes.
        unsafe { self.launch(&l, alpha1, residual, bias.as_raw()) }
    }

    /// As [`run`](Self::run), with the caller's workspace (at least
    /// [`workspace_size`](Self::workspace_size) bytes, starting at a multiple
    /// of [`WORKSPACE_ALIGNMENT`](super::WORKSPACE_ALIGNMENT)).
    ///
    /// # Safety
    /// The workspace is read and written by work queued on the handle's
    /// stream, after this call returns. Until that work has finished, no
    /// other work (on any stream) may use the workspace, and it must not be
    /// freed: order other uses after the handle's stream (an event, or
    /// [`Stream::wait_for`](crate::runtime::Stream::wait_for)), and do not
    /// pass a stream-ordered buffer of another stream. cuDNN keeps indices
    /// there, so a race is an out-of-bounds access, not just wrong numbers.
    ///
    /// # Errors
    /// As [`run`](Self::run); what
    /// [`ConvForwardPlan::check_caller_workspace`] reports (a short or
    /// misaligned workspace).
    #[allow(clippy::too_many_arguments)]
    #[doc(alias = "cudnnConvolutionBiasActivationForward")]
    pub unsafe fn run_with_workspace<'x, 'w, 'b, 'y, 's>(
        &self,
        handle: &Handle,
        alpha1: T::Scale,
        x: impl Into<DeviceSlice<'x, T>>,
        w: impl Into<DeviceSlice<'w, T>>,
        residual: Residual<'_, T>,
        bias: impl Into<DeviceSlice<'b, T>>,
        y: impl Into<DeviceSliceMut<'y, T>>,
        workspace: impl Into<DeviceSliceMut<'s, u8>>,
    ) -> Result<FusedPath> {
        let (x, w, bias, mut y, mut ws) =
            (x.into(), w.into(), bias.into(), y.into(), workspace.into());
        self.check(&x, &w, &residual, &bias, &y)?;
        self.conv.check_caller_workspace(ws.as_raw(), ws.len())?;
        let _on = handle.launch(
            "convolution bias activation (caller workspace)",
            &[
                ("x", x.device()),
                ("w", w.device()),
                ("bias", bias.device()),
                ("y", y.device()),
                ("workspace", ws.device()),
                ("z", residual.device()),
            ],
        )?;
        self.conv.0.verify(handle)?;
        let l = Launch {
            h: handle.as_raw(),
            a: x.as_raw(),
            b: w.as_raw(),
            out: y.as_raw_mut(),
            ws: ws.as_raw_mut(),
            ws_bytes: self.conv.workspace_size(),
        };
        // SAFETY: as in `run`; the caller's workspace holds at least
        // `ws_bytes` bytes (checked) and is exclusively borrowed.
        unsafe { self.launch(&l, alpha1, residual, bias.as_raw()) }
    }

    fn check(
        &self,
        x: &DeviceSlice<'_, T>,
        w: &DeviceSlice<'_, T>,
        residual: &Residual<'_, T>,
        bias: &DeviceSlice<'_, T>,
        y: &DeviceSliceMut<'_, T>,
    ) -> Result<()> {
        let z = match residual {
            Residual::Input { z, .. } => Some(z.len()),
            _ => None,
        };
        self.check_buffers(x.len(), w.len(), z, bias.len(), y.len())
    }

    /// # Safety
    /// As [`ConvForwardPlan::launch`]; `bias` valid for the bias
    /// descriptor, the residual's `z` for `y`'s.
    unsafe fn launch(
        &self,
        l: &Launch,
        alpha1: T::Scale,
        residual: Residual<'_, T>,
        bias: *const c_void,
    ) -> Result<FusedPath> {
        if self.path.get() == FusedPath::Fused {
            // SAFETY: `fused` has this function's contract, which our caller
            // upheld: `l`, `bias` and the residual are valid for the plan.
            match unsafe { self.fused(l, alpha1, residual, bias) } {
                Ok(()) => return Ok(FusedPath::Fused),
                Err(e) if is_not_supported(&e) => self.path.set(FusedPath::Fallback),
                Err(e) => return Err(e),
            }
        }
        // SAFETY: as above; `fallback` has the same contract.
        unsafe { self.fallback(l, alpha1, residual, bias) }?;
        Ok(FusedPath::Fallback)
    }

    /// # Safety
    /// As [`launch`](Self::launch).
    unsafe fn fused(
        &self,
        l: &Launch,
        alpha1: T::Scale,
        residual: Residual<'_, T>,
        bias: *const c_void,
    ) -> Result<()> {
        check_fusable(self.fused_activation.mode(), self.conv.algo())?;
        let api = check::cudnn()?;
        let core = &self.conv.0;
        let d = &core.d;
        let ConvAlgo::Forward(algo) = self.conv.algo() else {
            return Err(Error::invalid(
                "algo",
                "must be a forward algorithm",
                self.conv.algo(),
            ));
        };
        // Without a residual, cuDNN still takes a z: `y` with alpha2 = 0.
        let (alpha2, z): (T::Scale, *const c_void) = match residual {
            Residual::None => (T::Scale::from_f64(0.0), l.out.cast_const()),
            Residual::Input { scale, z } => (scale, z.as_raw()),
            Residual::Output { scale } => (scale, l.out.cast_const()),
        };
        // SAFETY: the caller's contract; descriptors owned by the plan;
        // `z` is either the caller's residual (valid for y's descriptor) or
        // `y` itself, which cuDNN allows; alphas are `T::Scale`.
        unsafe {
            cudnn_call!(
                api,
                cudnnConvolutionBiasActivationForward(
                    l.h,
                    (&alpha1 as *const T::Scale).cast(),
                    d.x.as_raw(),
                    l.a,
                    d.w.as_raw(),
                    l.b,
                    d.conv.as_raw(),
                    algo,
                    l.ws,
                    l.ws_bytes,
                    (&alpha2 as *const T::Scale).cast(),
                    d.y.as_raw(),
                    z,
                    self.bias.as_raw(),
                    bias,
                    self.fused_activation.as_raw(),
                    d.y.as_raw(),
                    l.out
                )
            )
        }
        .map_err(|e| e.with_context(core.context()))
    }

    /// # Safety
    /// As [`launch`](Self::launch).
    unsafe fn fallback(
        &self,
        l: &Launch,
        alpha1: T::Scale,
        residual: Residual<'_, T>,
        bias: *const c_void,
    ) -> Result<()> {
        let api = check::cudnn()?;
        let y_desc = self.conv.output();
        let one = T::Scale::from_f64(1.0);
        let beta = match residual {
            Residual::Output { scale } => scale,
            _ => T::Scale::from_f64(0.0),
        };
        // SAFETY: `l` satisfies `ConvForwardPlan::launch` (this function's
        // contract); it computes y = alpha1 * conv + beta * y.
        unsafe { self.conv.launch(l, alpha1, beta) }?;
        if let Residual::Input { scale, z } = residual {
            // SAFETY: `z` is valid for y's descriptor (checked by the caller);
            // `y` is writable and does not alias it.
            unsafe {
                cudnn_call!(
                    api,
                    cudnnAddTensor(
                        l.h,
                        (&scale as *const T::Scale).cast(),
                        y_desc.as_raw(),
                        z.as_raw(),
                        (&one as *const T::Scale).cast(),
                        y_desc.as_raw(),
                        l.out
                    )
                )
            }?;
        }
        // SAFETY: `bias` is valid for the bias descriptor, which broadcasts
        // over y's (every dimension 1 but the channels, equal to y's).
        unsafe {
            cudnn_call!(
                api,
                cudnnAddTensor(
                    l.h,
                    (&one as *const T::Scale).cast(),
                    self.bias.as_raw(),
                    bias,
                    (&one as *const T::Scale).cast(),
                    y_desc.as_raw(),
                    l.out
                )
            )
        }?;
        if self.activation.mode() != ActivationMode::Identity {
            let zero = T::Scale::from_f64(0.0);
            // SAFETY: in place on `y` (cuDNN allows x == y for activations);
            // the activation descriptor is owned by the plan.
            unsafe {
                cudnn_call!(
                    api,
                    cudnnActivationForward(
                        l.h,
                        self.activation.as_raw(),
                        (&one as *const T::Scale).cast(),
                        y_desc.as_raw(),
                        l.out.cast_const(),
                        (&zero as *const T::Scale).cast(),
                        y_desc.as_raw(),
                        l.out
                    )
                )
            }?;
        }
        Ok(())
    }
}

/// The bias gradient `db = alpha * sum(dy over n and space) + beta * db`
/// (`cudnnConvolutionBackwardBias`), `db` being `[1, k, 1, ...]`. One cuDNN
/// call per run; no workspace.
pub struct ConvBackwardBiasPlan<T: ConvDataType> {
    dy: TensorDescriptor<T>,
    db: TensorDescriptor<T>,
}

impl<T: ConvDataType> fmt::Debug for ConvBackwardBiasPlan<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConvBackwardBiasPlan")
            .field("dy", &self.dy)
            .field("db", &self.db)
            .finish()
    }
}

impl<T: ConvDataType> ConvBackwardBiasPlan<T> {
    /// A plan for `dy` (any layout); `db` is `[1, k, 1, ...]`.
    ///
    /// `bf16` is refused: `cudnnConvolutionBackwardBias` answers
    /// `CUDNN_STATUS_NOT_SUPPORTED` for it in NCHW and NHWC alike (cuDNN
    /// 9.19 on an H100, first GPU run; cuDNN's reductions,
    /// `cudnnReduceTensor`, refuse bf16 too). Sum `dy` in f32 (a graph
    /// reduction, or a cast and an f32 plan) instead.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for `bf16`; what creating the descriptors
    /// reports.
    pub fn new(dy: &TensorDescriptor<T>) -> Result<Self> {
        if T::CUDNN == crate::sys::cudnn::cudnnDataType_t::CUDNN_DATA_BFLOAT16 {
            return Err(Error::Unsupported {
                what: format!(
                    "the bf16 bias gradient (cudnnConvolutionBackwardBias) of dy {:?}",
                    dy.shape()
                ),
                needs: Some(
                    "f32, f64 or f16: cuDNN's legacy bias gradient answers NOT_SUPPORTED for bf16 in every layout"
                        .into(),
                ),
            });
        }
        Ok(Self {
            dy: super::conv_ops::clone_tensor(dy)?,
            db: bias_descriptor::<T>(dy.shape()[1], dy.rank())?,
        })
    }

    /// The gradient's descriptor.
    pub fn dy(&self) -> &TensorDescriptor<T> {
        &self.dy
    }

    /// The bias gradient's descriptor, `[1, k, 1, ...]`.
    pub fn db(&self) -> &TensorDescriptor<T> {
        &self.db
    }

    /// Check buffer lengths in elements.
    ///
    /// # Errors
    /// [`Error::Mismatch`] naming the buffer.
    pub fn check_buffers(&self, dy_len: usize, db_len: usize) -> Result<()> {
        for (name, need, got) in [
            ("dy", self.dy.len_required(), dy_len),
            ("db", self.db.len_required(), db_len),
        ] {
            if got < need {
                return Err(Error::mismatch(
                    format!("{name} buffer length in elements"),
                    format!("at least {need}"),
                    got,
                ));
            }
        }
        Ok(())
    }

    /// `db = alpha * sum(dy) + beta * db` on the handle's stream.
    ///
    /// # Errors
    /// [`Error::Mismatch`] for a short buffer; what cuDNN reports.
    #[doc(alias = "cudnnConvolutionBackwardBias")]
    pub fn run<'y, 'b>(
        &self,
        handle: &Handle,
        alpha: T::Scale,
        dy: impl Into<DeviceSlice<'y, T>>,
        beta: T::Scale,
        db: impl Into<DeviceSliceMut<'b, T>>,
    ) -> Result<()> {
        let (dy, mut db) = (dy.into(), db.into());
        self.check_buffers(dy.len(), db.len())?;
        let _on = handle.launch(
            "convolution backward bias",
            &[("dy", dy.device()), ("db", db.device())],
        )?;
        let api = check::cudnn()?;
        // SAFETY: the handle is live for the call; `dy` and `db` hold at
        // least what their descriptors address (checked); `db` is
        // exclusively borrowed; alpha and beta are `T::Scale`.
        unsafe {
            cudnn_call!(
                api,
                cudnnConvolutionBackwardBias(
                    handle.as_raw(),
                    (&alpha as *const T::Scale).cast(),
                    self.dy.as_raw(),
                    dy.as_raw(),
                    (&beta as *const T::Scale).cast(),
                    self.db.as_raw(),
                    db.as_raw_mut()
                )
            )
        }
        .map_err(|e| {
            e.with_context(format!(
                "{} bias gradient of dy {:?} (strides {:?})",
                T::NAME,
                self.dy.shape(),
                self.dy.strides()
            ))
        })
    }
}

// ---------------------------------------------------------------------------
// Building fused and bias-gradient plans from a problem

impl<T: ConvDataType, D: ConvPass> ConvProblem<T, D> {
    /// A plan for the bias gradient of this convolution (`db` from `dy`).
    ///
    /// # Errors
    /// What creating the bias descriptor reports.
    pub fn backward_bias_plan(&self) -> Result<ConvBackwardBiasPlan<T>> {
        ConvBackwardBiasPlan::new(&self.y)
    }
}

/// The search a fused plan tries first: `IMPLICIT_PRECOMP_GEMM` for the
/// activations the fused call supports (ReLU, identity), unless the caller
/// fixed another algorithm; `None` when there is nothing to try first.
pub(super) fn fused_first_search(mode: ActivationMode, search: AlgoSearch) -> Option<AlgoSearch> {
    let precomp = AlgoSearch::Fixed(ConvAlgo::IMPLICIT_PRECOMP_GEMM);
    match (mode, search) {
        (ActivationMode::Relu | ActivationMode::Identity, AlgoSearch::Fixed(a))
            if a != ConvAlgo::IMPLICIT_PRECOMP_GEMM =>
        {
            None
        }
        (ActivationMode::Relu | ActivationMode::Identity, _) => Some(precomp),
        _ => None,
    }
}

impl<T: ConvDataType> ConvProblem<T, ConvFwd> {
    /// A fused `y = act(alpha1 * conv(x, w) + alpha2 * z + bias)` plan
    /// (`cudnnConvolutionBiasActivationForward`). The fused form is used
    /// where NVIDIA documents it ([`check_fusable`](super::check_fusable)):
    /// ReLU, or identity with the `IMPLICIT_PRECOMP_GEMM` algorithm. For
    /// both, `IMPLICIT_PRECOMP_GEMM` is tried first (the algorithm the fused
    /// call supports most widely; unless `options` fixes another), then the
    /// search of `options` (ReLU stays fused, identity falls back). Any other
    /// activation, or cuDNN reporting the fused call unsupported at run time,
    /// takes the fallback: convolution, add and activation ([`FusedPath`]).
    ///
    /// # Errors
    /// As [`plan`](Self::plan).
    pub fn plan_bias_activation(
        &self,
        handle: &mut Handle,
        options: &PlanOptions<'_>,
        activation: &ActivationDescriptor,
    ) -> Result<ConvBiasActivationPlan<T>> {
        let mode = activation.mode();
        if let Some(first) = fused_first_search(mode, options.search) {
            let fixed = PlanOptions {
                search: first,
                ..*options
            };
            if let Ok(p) = self.plan(handle, &fixed) {
                return ConvBiasActivationPlan::new(p, activation, FusedPath::Fused);
            }
        }
        let plan = self.plan(handle, options)?;
        let path = if super::check_fusable(mode, plan.algo()).is_ok() {
            FusedPath::Fused
        } else {
            FusedPath::Fallback
        };
        ConvBiasActivationPlan::new(plan, activation, path)
    }

    /// A fused plan from a known forward choice (see
    /// [`plan_with`](Self::plan_with)), taking `path`.
    ///
    /// # Errors
    /// As [`plan_with`](Self::plan_with);
    /// [`check_fusable`](super::check_fusable)'s for [`FusedPath::Fused`]
    /// with an activation or algorithm the fused call does not support.
    pub fn plan_bias_activation_with(
        &self,
        choice: AlgoChoice,
        activation: &ActivationDescriptor,
        path: FusedPath,
    ) -> Result<ConvBiasActivationPlan<T>> {
        ConvBiasActivationPlan::new(self.plan_with(choice)?, activation, path)
    }
}

impl Handle {
    /// A fused convolution + bias + activation plan, default options.
    ///
    /// # Errors
    /// As [`ConvProblem::forward`] and [`ConvProblem::plan_bias_activation`].
    pub fn conv_bias_activation_plan<T: ConvDataType>(
        &mut self,
        x: &TensorDescriptor<T>,
        w: &FilterDescriptor<T>,
        conv: &ConvDescriptor,
        activation: &ActivationDescriptor,
        search: AlgoSearch,
    ) -> Result<ConvBiasActivationPlan<T>> {
        ConvProblem::forward(x, w, conv)?.plan_bias_activation(
            self,
            &PlanOptions::new(search),
            activation,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::cudnn as dnn;

    #[test]
    fn fused_plans_try_precomp_gemm_first_for_relu_and_identity() {
        let precomp = Some(AlgoSearch::Fixed(ConvAlgo::IMPLICIT_PRECOMP_GEMM));
        for mode in [ActivationMode::Relu, ActivationMode::Identity] {
            for search in [AlgoSearch::Heuristic, AlgoSearch::Exhaustive] {
                assert_eq!(
                    fused_first_search(mode, search),
                    precomp,
                    "{mode:?} {search:?}"
                );
            }
            // The caller's own fixed algorithm is respected.
            let gemm =
                ConvAlgo::Forward(dnn::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_GEMM);
            assert_eq!(fused_first_search(mode, AlgoSearch::Fixed(gemm)), None);
            assert_eq!(
                fused_first_search(mode, AlgoSearch::Fixed(ConvAlgo::IMPLICIT_PRECOMP_GEMM)),
                precomp
            );
        }
        for mode in [
            ActivationMode::Tanh,
            ActivationMode::Sigmoid,
            ActivationMode::ClippedRelu { ceiling: 6.0 },
        ] {
            assert_eq!(fused_first_search(mode, AlgoSearch::Heuristic), None);
        }
    }
}
