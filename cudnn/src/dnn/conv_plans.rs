//! The convolution plans ([`ConvForwardPlan`], [`ConvBackwardDataPlan`],
//! [`ConvBackwardFilterPlan`]) and their runs, measured searches on the
//! caller's buffers, the fused plan, and the [`Handle`] conveniences.

use std::ffi::c_void;
use std::fmt;

use super::algo_cache::{AlgoChoice, ConvDirection, MathPolicy};
use super::conv::{ConvDescriptor, MathType};
use super::conv_ops::*;
use super::conv_problem::*;
use super::conv_search::RawBufs;
use super::filter::FilterDescriptor;
use super::handle::Handle;
use super::tensor::TensorDescriptor;
use crate::check::{self, cudnn_call};
use crate::error::{Error, Result};
use crate::runtime::{Device, DeviceSlice, DeviceSliceMut};
use crate::sys::cudnn as dnn;

macro_rules! plan_common {
    ($(#[$meta:meta])* $name:ident, $pass:ty) => {
        $(#[$meta])*
        pub struct $name<T: ConvDataType>(pub(crate) PlanCore<T>);

        impl<T: ConvDataType> $name<T> {
            /// The algorithm.
            pub fn algo(&self) -> ConvAlgo {
                self.0.algo
            }

            /// The math type set on the convolution descriptor (from the
            /// chosen result's `mathType`, adjusted to the policy).
            pub fn math_type(&self) -> MathType {
                self.0.math
            }

            /// Workspace bytes one run needs.
            pub fn workspace_size(&self) -> usize {
                self.0.workspace
            }

            /// Whether the algorithm came from the [`AlgoCache`](crate::dnn::AlgoCache).
            pub fn from_cache(&self) -> bool {
                self.0.from_cache
            }

            /// The time cuDNN measured, for an exhaustive search.
            pub fn measured_time_ms(&self) -> Option<f32> {
                self.0.time_ms
            }

            /// The direction.
            pub fn direction(&self) -> ConvDirection {
                self.0.dir
            }

            /// The input image tensor (`x`, or `dx` for backward data).
            pub fn x(&self) -> &TensorDescriptor<T> {
                &self.0.d.x
            }

            /// The filter (`w`, or `dw` for backward filter).
            pub fn w(&self) -> &FilterDescriptor<T> {
                &self.0.d.w
            }

            /// The output image tensor (`y`, or `dy` in the backward passes).
            pub fn y(&self) -> &TensorDescriptor<T> {
                &self.0.d.y
            }

            /// The convolution descriptor the plan runs with.
            pub fn conv(&self) -> &ConvDescriptor {
                &self.0.d.conv
            }

            /// As [`ConvProblem::check_buffers`].
            ///
            /// # Errors
            /// [`Error::Mismatch`] naming the buffer.
            pub fn check_buffers(&self, x_len: usize, w_len: usize, y_len: usize) -> Result<()> {
                self.0.check_buffers(x_len, w_len, y_len)
            }

            /// Check a caller's workspace of `bytes` bytes is large enough.
            ///
            /// # Errors
            /// [`Error::Mismatch`] naming both sizes.
            pub fn check_workspace(&self, bytes: usize) -> Result<()> {
                self.0.check_workspace(bytes)
            }

            /// What `run_with_workspace` checks of the caller's workspace
            /// starting at `ptr`, `bytes` long: large enough
            /// ([`check_workspace`](Self::check_workspace)) and, when the
            /// plan uses one, starting at a multiple of
            /// [`WORKSPACE_ALIGNMENT`]. Only the address is looked at.
            ///
            /// # Errors
            /// [`Error::Mismatch`] for a short workspace;
            /// [`Error::InvalidArgument`] naming the address and the
            /// alignment for a misaligned one.
            pub fn check_caller_workspace(&self, ptr: *const c_void, bytes: usize) -> Result<()> {
                self.0.check_caller_workspace(ptr, bytes)
            }
        }

        impl<T: ConvDataType> fmt::Debug for $name<T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("problem", &self.0.describe)
                    .field("algo", &self.0.algo)
                    .field("math", &self.0.math)
                    .field("workspace", &self.0.workspace)
                    .field("from_cache", &self.0.from_cache)
                    .finish()
            }
        }

        impl<T: ConvDataType> ConvProblem<T, $pass> {
            /// Pick the algorithm (see [`AlgoSearch`]; an exhaustive search
            /// runs on zeroed scratch buffers) and build the plan. Consults
            /// and fills the cache of `options`. Grows the handle's
            /// workspace to the algorithm's size, so the first run does not
            /// allocate. Uses the current device (the handle's).
            ///
            /// # Errors
            /// [`Error::Unsupported`] listing why each candidate was
            /// rejected when none fits; what cuDNN and CUDA report.
            pub fn plan(&self, handle: &mut Handle, options: &PlanOptions<'_>) -> Result<$name<T>> {
                self.core(handle, options, None).map($name)
            }

            /// A plan from a known choice (a saved cache entry), without a
            /// search or a device, under the default [`MathPolicy`] (as
            /// [`plan_with_policy`](Self::plan_with_policy)). Its first run
            /// asks cuDNN how much workspace the algorithm needs (one extra
            /// call, once) and refuses a choice whose workspace is smaller;
            /// cuDNN reports an algorithm that does not support the problem.
            ///
            /// # Errors
            /// As [`plan_with_policy`](Self::plan_with_policy).
            pub fn plan_with(&self, choice: AlgoChoice) -> Result<$name<T>> {
                self.plan_with_policy(choice, MathPolicy::Default)
            }

            /// As [`plan_with`](Self::plan_with), the choice's math type
            /// adjusted to `math` exactly as a searched candidate's is
            /// (`CUDNN_DEFAULT_MATH` on f32 data becomes `CUDNN_FMA_MATH`
            /// unless TF32 is allowed).
            ///
            /// # Errors
            /// An algorithm outside the direction's enum, an unknown math
            /// type, a math type `math` rules out (tensor-op math on f32
            /// without [`MathPolicy::AllowTf32`]).
            pub fn plan_with_policy(&self, choice: AlgoChoice, math: MathPolicy) -> Result<$name<T>> {
                self.core_with(choice, math).map($name)
            }
        }
    };
}

plan_common!(
    /// A forward convolution `y = alpha * conv(x, w) + beta * y`, ready to
    /// run: descriptors, algorithm, math type, workspace size. Each
    /// [`run`](Self::run) is one `cudnnConvolutionForward` call.
    ConvForwardPlan,
    ConvFwd
);
plan_common!(
    /// A backward-data convolution `dx = alpha * conv_bwd_data(w, dy) + beta
    /// * dx`, ready to run. Each [`run`](Self::run) is one
    /// `cudnnConvolutionBackwardData` call.
    ConvBackwardDataPlan,
    ConvBwdData
);
plan_common!(
    /// A backward-filter convolution `dw = alpha * conv_bwd_filter(x, dy) +
    /// beta * dw`, ready to run. Each [`run`](Self::run) is one
    /// `cudnnConvolutionBackwardFilter` call.
    ConvBackwardFilterPlan,
    ConvBwdFilter
);

/// Alpha and beta as the `const void *` cuDNN takes.
pub(super) fn scale_ptr<S>(s: &S) -> *const c_void {
    (s as *const S).cast()
}

/// The operation's name in device-mismatch errors.
const FORWARD: &str = "convolution forward";

/// The buffers of a forward run and their devices, as checked against the
/// handle's (or the benchmark's) device.
fn forward_args<T: ConvDataType>(
    x: &DeviceSlice<'_, T>,
    w: &DeviceSlice<'_, T>,
    y: &DeviceSliceMut<'_, T>,
) -> [(&'static str, Option<Device>); 3] {
    [("x", x.device()), ("w", w.device()), ("y", y.device())]
}

/// The handle's workspace of `bytes` bytes and the raw handle, for one launch.
pub(super) fn handle_workspace(
    handle: &mut Handle,
    bytes: usize,
) -> Result<(dnn::cudnnHandle_t, *mut c_void, usize)> {
    let h = handle.as_raw();
    let mut ws = handle.workspace(bytes)?;
    Ok((h, ws.as_raw_mut(), ws.len()))
}

impl<T: ConvDataType> ConvForwardPlan<T> {
    /// The output descriptor `y`.
    pub fn output(&self) -> &TensorDescriptor<T> {
        &self.0.d.y
    }

    /// `y = alpha * conv(x, w) + beta * y` on the handle's stream, with the
    /// handle's workspace. One `cudnnConvolutionForward` call (plus a
    /// workspace allocation if the handle's is too small).
    ///
    /// # Errors
    /// [`Error::Mismatch`] for a buffer shorter than its descriptor needs
    /// (checked before anything runs); what cuDNN reports, with the problem
    /// as context.
    #[doc(alias = "cudnnConvolutionForward")]
    pub fn run<'x, 'w, 'y>(
        &self,
        handle: &mut Handle,
        alpha: T::Scale,
        x: impl Into<DeviceSlice<'x, T>>,
        w: impl Into<DeviceSlice<'w, T>>,
        beta: T::Scale,
        y: impl Into<DeviceSliceMut<'y, T>>,
    ) -> Result<()> {
        let (x, w, mut y) = (x.into(), w.into(), y.into());
        self.0.check_buffers(x.len(), w.len(), y.len())?;
        let _on = handle.launch(FORWARD, &forward_args(&x, &w, &y))?;
        self.0.verify(handle)?;
        let (h, ws, ws_bytes) = handle_workspace(handle, self.0.workspace)?;
        let l = Launch {
            h,
            a: x.as_raw(),
            b: w.as_raw(),
            out: y.as_raw_mut(),
            ws,
            ws_bytes,
        };
        // SAFETY: `h` is live (borrowed from `handle` for this call); the
        // buffers hold at least what the descriptors address (checked
        // above); `y` is exclusively borrowed; the workspace view is valid
        // for `ws_bytes` bytes and only used by work on the handle's stream.
        unsafe { self.launch(&l, alpha, beta) }
    }

    /// Benchmark aid (`examples/bench_launch.rs`, issue 34): the checks of
    /// [`run`](Self::run) that need no handle, the same code, and no
    /// launch (nothing is dereferenced, whatever the views hold): every
    /// buffer's length against its descriptor and, with `device`, every
    /// buffer's device against it (`run` checks them against the handle's
    /// device). What needs a handle (its stream's thread and capture
    /// state, its device made current, the plan's workspace verified once
    /// and the handle's workspace looked up) is left out.
    ///
    /// # Errors
    /// As [`run`](Self::run) for the checks run.
    #[doc(hidden)]
    pub fn launch_checks<'x, 'w, 'y>(
        &self,
        x: impl Into<DeviceSlice<'x, T>>,
        w: impl Into<DeviceSlice<'w, T>>,
        y: impl Into<DeviceSliceMut<'y, T>>,
        device: Option<Device>,
    ) -> Result<()> {
        let (x, w, y) = (x.into(), w.into(), y.into());
        self.0.check_buffers(x.len(), w.len(), y.len())?;
        if let Some(d) = device {
            crate::runtime::check_args(FORWARD, d, &forward_args(&x, &w, &y))?;
        }
        Ok(())
    }

    /// As [`run`](Self::run), with the caller's workspace (at least
    /// [`workspace_size`](Self::workspace_size) bytes), so the handle's is
    /// not touched. The caller orders the workspace's other uses with the
    /// handle's stream.
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
    /// [`check_caller_workspace`](Self::check_caller_workspace) reports (a
    /// short or misaligned workspace).
    #[allow(clippy::too_many_arguments)]
    #[doc(alias = "cudnnConvolutionForward")]
    pub unsafe fn run_with_workspace<'x, 'w, 'y, 's>(
        &self,
        handle: &Handle,
        alpha: T::Scale,
        x: impl Into<DeviceSlice<'x, T>>,
        w: impl Into<DeviceSlice<'w, T>>,
        beta: T::Scale,
        y: impl Into<DeviceSliceMut<'y, T>>,
        workspace: impl Into<DeviceSliceMut<'s, u8>>,
    ) -> Result<()> {
        let (x, w, mut y, mut ws) = (x.into(), w.into(), y.into(), workspace.into());
        self.0.check_buffers(x.len(), w.len(), y.len())?;
        self.0.check_caller_workspace(ws.as_raw(), ws.len())?;
        let _on = handle.launch(
            "convolution forward (caller workspace)",
            &[
                ("x", x.device()),
                ("w", w.device()),
                ("y", y.device()),
                ("workspace", ws.device()),
            ],
        )?;
        self.0.verify(handle)?;
        let l = Launch {
            h: handle.as_raw(),
            a: x.as_raw(),
            b: w.as_raw(),
            out: y.as_raw_mut(),
            ws: ws.as_raw_mut(),
            ws_bytes: self.0.workspace,
        };
        // SAFETY: as in `run`; the caller's workspace holds at least
        // `ws_bytes` bytes (checked) and is exclusively borrowed.
        unsafe { self.launch(&l, alpha, beta) }
    }

    /// The one cuDNN call.
    ///
    /// # Safety
    /// `l.h` is a live handle; `l.a`/`l.b`/`l.out` point to device memory
    /// valid for `x`/`w`/`y` of this plan (`out` writable, not aliasing the
    /// inputs); `l.ws` is valid for `l.ws_bytes` bytes.
    pub(crate) unsafe fn launch(&self, l: &Launch, alpha: T::Scale, beta: T::Scale) -> Result<()> {
        let api = check::cudnn()?;
        let d = &self.0.d;
        let ConvAlgo::Forward(algo) = self.0.algo else {
            return Err(Error::invalid(
                "algo",
                "must be a forward algorithm",
                self.0.algo,
            ));
        };
        // SAFETY: the caller's contract; the descriptors are owned by the
        // plan and live; alpha and beta are `T::Scale`, the type cuDNN reads
        // for `T` data.
        unsafe {
            cudnn_call!(
                api,
                cudnnConvolutionForward(
                    l.h,
                    scale_ptr(&alpha),
                    d.x.as_raw(),
                    l.a,
                    d.w.as_raw(),
                    l.b,
                    d.conv.as_raw(),
                    algo,
                    l.ws,
                    l.ws_bytes,
                    scale_ptr(&beta),
                    d.y.as_raw(),
                    l.out
                )
            )
        }
        .map_err(|e| e.with_context(self.0.context()))
    }
}

impl<T: ConvDataType> ConvBackwardDataPlan<T> {
    /// The output descriptor `dx`.
    pub fn output(&self) -> &TensorDescriptor<T> {
        &self.0.d.x
    }

    /// `dx = alpha * conv_bwd_data(w, dy) + beta * dx` on the handle's
    /// stream. One `cudnnConvolutionBackwardData` call.
    ///
    /// # Errors
    /// As [`ConvForwardPlan::run`].
    #[doc(alias = "cudnnConvolutionBackwardData")]
    pub fn run<'w, 'y, 'x>(
        &self,
        handle: &mut Handle,
        alpha: T::Scale,
        w: impl Into<DeviceSlice<'w, T>>,
        dy: impl Into<DeviceSlice<'y, T>>,
        beta: T::Scale,
        dx: impl Into<DeviceSliceMut<'x, T>>,
    ) -> Result<()> {
        let (w, dy, mut dx) = (w.into(), dy.into(), dx.into());
        self.0.check_buffers(dx.len(), w.len(), dy.len())?;
        let _on = handle.launch(
            "convolution backward data",
            &[("w", w.device()), ("dy", dy.device()), ("dx", dx.device())],
        )?;
        self.0.verify(handle)?;
        let (h, ws, ws_bytes) = handle_workspace(handle, self.0.workspace)?;
        let l = Launch {
            h,
            a: w.as_raw(),
            b: dy.as_raw(),
            out: dx.as_raw_mut(),
            ws,
            ws_bytes,
        };
        // SAFETY: as in `ConvForwardPlan::run` (w, dy read; dx written).
        unsafe { self.launch(&l, alpha, beta) }
    }

    /// As [`run`](Self::run), with the caller's workspace.
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
    /// [`check_caller_workspace`](Self::check_caller_workspace) reports (a
    /// short or misaligned workspace).
    #[allow(clippy::too_many_arguments)]
    #[doc(alias = "cudnnConvolutionBackwardData")]
    pub unsafe fn run_with_workspace<'w, 'y, 'x, 's>(
        &self,
        handle: &Handle,
        alpha: T::Scale,
        w: impl Into<DeviceSlice<'w, T>>,
        dy: impl Into<DeviceSlice<'y, T>>,
        beta: T::Scale,
        dx: impl Into<DeviceSliceMut<'x, T>>,
        workspace: impl Into<DeviceSliceMut<'s, u8>>,
    ) -> Result<()> {
        let (w, dy, mut dx, mut ws) = (w.into(), dy.into(), dx.into(), workspace.into());
        self.0.check_buffers(dx.len(), w.len(), dy.len())?;
        self.0.check_caller_workspace(ws.as_raw(), ws.len())?;
        let _on = handle.launch(
            "convolution backward data (caller workspace)",
            &[
                ("w", w.device()),
                ("dy", dy.device()),
                ("dx", dx.device()),
                ("workspace", ws.device()),
            ],
        )?;
        self.0.verify(handle)?;
        let l = Launch {
            h: handle.as_raw(),
            a: w.as_raw(),
            b: dy.as_raw(),
            out: dx.as_raw_mut(),
            ws: ws.as_raw_mut(),
            ws_bytes: self.0.workspace,
        };
        // SAFETY: as in `ConvForwardPlan::run_with_workspace`.
        unsafe { self.launch(&l, alpha, beta) }
    }

    /// # Safety
    /// As [`ConvForwardPlan::launch`], with `a` = `w`, `b` = `dy`, `out` = `dx`.
    unsafe fn launch(&self, l: &Launch, alpha: T::Scale, beta: T::Scale) -> Result<()> {
        let api = check::cudnn()?;
        let d = &self.0.d;
        let ConvAlgo::BackwardData(algo) = self.0.algo else {
            return Err(Error::invalid(
                "algo",
                "must be a backward-data algorithm",
                self.0.algo,
            ));
        };
        // SAFETY: the caller's contract; descriptors owned by the plan;
        // alpha and beta are `T::Scale`.
        unsafe {
            cudnn_call!(
                api,
                cudnnConvolutionBackwardData(
                    l.h,
                    scale_ptr(&alpha),
                    d.w.as_raw(),
                    l.a,
                    d.y.as_raw(),
                    l.b,
                    d.conv.as_raw(),
                    algo,
                    l.ws,
                    l.ws_bytes,
                    scale_ptr(&beta),
                    d.x.as_raw(),
                    l.out
                )
            )
        }
        .map_err(|e| e.with_context(self.0.context()))
    }
}

impl<T: ConvDataType> ConvBackwardFilterPlan<T> {
    /// The output descriptor `dw`.
    pub fn output(&self) -> &FilterDescriptor<T> {
        &self.0.d.w
    }

    /// `dw = alpha * conv_bwd_filter(x, dy) + beta * dw` on the handle's
    /// stream. One `cudnnConvolutionBackwardFilter` call.
    ///
    /// # Errors
    /// As [`ConvForwardPlan::run`].
    #[doc(alias = "cudnnConvolutionBackwardFilter")]
    pub fn run<'x, 'y, 'w>(
        &self,
        handle: &mut Handle,
        alpha: T::Scale,
        x: impl Into<DeviceSlice<'x, T>>,
        dy: impl Into<DeviceSlice<'y, T>>,
        beta: T::Scale,
        dw: impl Into<DeviceSliceMut<'w, T>>,
    ) -> Result<()> {
        let (x, dy, mut dw) = (x.into(), dy.into(), dw.into());
        self.0.check_buffers(x.len(), dw.len(), dy.len())?;
        let _on = handle.launch(
            "convolution backward filter",
            &[("x", x.device()), ("dy", dy.device()), ("dw", dw.device())],
        )?;
        self.0.verify(handle)?;
        let (h, ws, ws_bytes) = handle_workspace(handle, self.0.workspace)?;
        let l = Launch {
            h,
            a: x.as_raw(),
            b: dy.as_raw(),
            out: dw.as_raw_mut(),
            ws,
            ws_bytes,
        };
        // SAFETY: as in `ConvForwardPlan::run` (x, dy read; dw written).
        unsafe { self.launch(&l, alpha, beta) }
    }

    /// As [`run`](Self::run), with the caller's workspace.
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
    /// [`check_caller_workspace`](Self::check_caller_workspace) reports (a
    /// short or misaligned workspace).
    #[allow(clippy::too_many_arguments)]
    #[doc(alias = "cudnnConvolutionBackwardFilter")]
    pub unsafe fn run_with_workspace<'x, 'y, 'w, 's>(
        &self,
        handle: &Handle,
        alpha: T::Scale,
        x: impl Into<DeviceSlice<'x, T>>,
        dy: impl Into<DeviceSlice<'y, T>>,
        beta: T::Scale,
        dw: impl Into<DeviceSliceMut<'w, T>>,
        workspace: impl Into<DeviceSliceMut<'s, u8>>,
    ) -> Result<()> {
        let (x, dy, mut dw, mut ws) = (x.into(), dy.into(), dw.into(), workspace.into());
        self.0.check_buffers(x.len(), dw.len(), dy.len())?;
        self.0.check_caller_workspace(ws.as_raw(), ws.len())?;
        let _on = handle.launch(
            "convolution backward filter (caller workspace)",
            &[
                ("x", x.device()),
                ("dy", dy.device()),
                ("dw", dw.device()),
                ("workspace", ws.device()),
            ],
        )?;
        self.0.verify(handle)?;
        let l = Launch {
            h: handle.as_raw(),
            a: x.as_raw(),
            b: dy.as_raw(),
            out: dw.as_raw_mut(),
            ws: ws.as_raw_mut(),
            ws_bytes: self.0.workspace,
        };
        // SAFETY: as in `ConvForwardPlan::run_with_workspace`.
        unsafe { self.launch(&l, alpha, beta) }
    }

    /// # Safety
    /// As [`ConvForwardPlan::launch`], with `a` = `x`, `b` = `dy`, `out` = `dw`.
    unsafe fn launch(&self, l: &Launch, alpha: T::Scale, beta: T::Scale) -> Result<()> {
        let api = check::cudnn()?;
        let d = &self.0.d;
        let ConvAlgo::BackwardFilter(algo) = self.0.algo else {
            return Err(Error::invalid(
                "algo",
                "must be a backward-filter algorithm",
                self.0.algo,
            ));
        };
        // SAFETY: the caller's contract; descriptors owned by the plan;
        // alpha and beta are `T::Scale`.
        unsafe {
            cudnn_call!(
                api,
                cudnnConvolutionBackwardFilter(
                    l.h,
                    scale_ptr(&alpha),
                    d.x.as_raw(),
                    l.a,
                    d.y.as_raw(),
                    l.b,
                    d.conv.as_raw(),
                    algo,
                    l.ws,
                    l.ws_bytes,
                    scale_ptr(&beta),
                    d.w.as_raw(),
                    l.out
                )
            )
        }
        .map_err(|e| e.with_context(self.0.context()))
    }
}

// ---------------------------------------------------------------------------
// Measured searches on the caller's buffers

impl<T: ConvDataType> ConvProblem<T, ConvFwd> {
    /// As [`plan`](Self::plan), but an exhaustive search measures on the
    /// caller's buffers (`y` is overwritten with scratch results).
    ///
    /// # Errors
    /// As [`plan`](Self::plan); [`Error::Mismatch`] for a short buffer.
    #[doc(alias = "cudnnFindConvolutionForwardAlgorithmEx")]
    pub fn plan_on<'x, 'w, 'y>(
        &self,
        handle: &mut Handle,
        options: &PlanOptions<'_>,
        x: impl Into<DeviceSlice<'x, T>>,
        w: impl Into<DeviceSlice<'w, T>>,
        y: impl Into<DeviceSliceMut<'y, T>>,
    ) -> Result<ConvForwardPlan<T>> {
        let (x, w, mut y) = (x.into(), w.into(), y.into());
        self.check_buffers(x.len(), w.len(), y.len())?;
        let bufs = RawBufs {
            x: x.as_raw().cast_mut(),
            w: w.as_raw().cast_mut(),
            y: y.as_raw_mut(),
        };
        let _on = handle.launch(
            "convolution forward search",
            &[("x", x.device()), ("w", w.device()), ("y", y.device())],
        )?;
        self.core(handle, options, Some(bufs)).map(ConvForwardPlan)
    }
}

impl<T: ConvDataType> ConvProblem<T, ConvBwdData> {
    /// As [`plan`](Self::plan), but an exhaustive search measures on the
    /// caller's buffers (`dx` is overwritten).
    ///
    /// # Errors
    /// As [`plan`](Self::plan); [`Error::Mismatch`] for a short buffer.
    #[doc(alias = "cudnnFindConvolutionBackwardDataAlgorithmEx")]
    pub fn plan_on<'w, 'y, 'x>(
        &self,
        handle: &mut Handle,
        options: &PlanOptions<'_>,
        w: impl Into<DeviceSlice<'w, T>>,
        dy: impl Into<DeviceSlice<'y, T>>,
        dx: impl Into<DeviceSliceMut<'x, T>>,
    ) -> Result<ConvBackwardDataPlan<T>> {
        let (w, dy, mut dx) = (w.into(), dy.into(), dx.into());
        self.check_buffers(dx.len(), w.len(), dy.len())?;
        let bufs = RawBufs {
            x: dx.as_raw_mut(),
            w: w.as_raw().cast_mut(),
            y: dy.as_raw().cast_mut(),
        };
        let _on = handle.launch(
            "convolution backward data search",
            &[("w", w.device()), ("dy", dy.device()), ("dx", dx.device())],
        )?;
        self.core(handle, options, Some(bufs))
            .map(ConvBackwardDataPlan)
    }
}

impl<T: ConvDataType> ConvProblem<T, ConvBwdFilter> {
    /// As [`plan`](Self::plan), but an exhaustive search measures on the
    /// caller's buffers (`dw` is overwritten).
    ///
    /// # Errors
    /// As [`plan`](Self::plan); [`Error::Mismatch`] for a short buffer.
    #[doc(alias = "cudnnFindConvolutionBackwardFilterAlgorithmEx")]
    pub fn plan_on<'x, 'y, 'w>(
        &self,
        handle: &mut Handle,
        options: &PlanOptions<'_>,
        x: impl Into<DeviceSlice<'x, T>>,
        dy: impl Into<DeviceSlice<'y, T>>,
        dw: impl Into<DeviceSliceMut<'w, T>>,
    ) -> Result<ConvBackwardFilterPlan<T>> {
        let (x, dy, mut dw) = (x.into(), dy.into(), dw.into());
        self.check_buffers(x.len(), dw.len(), dy.len())?;
        let bufs = RawBufs {
            x: x.as_raw().cast_mut(),
            w: dw.as_raw_mut(),
            y: dy.as_raw().cast_mut(),
        };
        let _on = handle.launch(
            "convolution backward filter search",
            &[("x", x.device()), ("dy", dy.device()), ("dw", dw.device())],
        )?;
        self.core(handle, options, Some(bufs))
            .map(ConvBackwardFilterPlan)
    }
}

// ---------------------------------------------------------------------------
// Handle conveniences

impl Handle {
    /// A forward plan for `x` by `w` with default options and `search`
    /// (see [`ConvProblem::forward`] and [`ConvProblem::plan`]).
    ///
    /// ```no_run
    /// # use cudnn::dnn::*;
    /// # use cudnn::runtime::{Device, DeviceBuffer};
    /// # fn main() -> cudnn::Result<()> {
    /// let dev = Device::new(0)?;
    /// let stream = dev.create_stream()?;
    /// let mut dnn = Handle::new(&stream)?;
    /// let x = TensorDescriptor::<f32>::nchw(8, 3, 224, 224)?;
    /// let w = FilterDescriptor::<f32>::nchw(64, 3, 7, 7)?;
    /// let conv = ConvDescriptor::new_2d([3, 3], [2, 2], [1, 1])?;
    /// let plan = dnn.conv_forward_plan(&x, &w, &conv, AlgoSearch::Heuristic)?;
    /// let x_dev = DeviceBuffer::<f32>::zeroed(x.len_required())?;
    /// let w_dev = DeviceBuffer::<f32>::zeroed(w.element_count())?;
    /// let mut y = DeviceBuffer::<f32>::zeroed(plan.output().element_count())?;
    /// plan.run(&mut dnn, 1.0, &x_dev, &w_dev, 0.0, &mut y)?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`ConvProblem::forward`] and [`ConvProblem::plan`].
    pub fn conv_forward_plan<T: ConvDataType>(
        &mut self,
        x: &TensorDescriptor<T>,
        w: &FilterDescriptor<T>,
        conv: &ConvDescriptor,
        search: AlgoSearch,
    ) -> Result<ConvForwardPlan<T>> {
        ConvProblem::forward(x, w, conv)?.plan(self, &PlanOptions::new(search))
    }

    /// A backward-data plan (`dx` described by `dx`), default options.
    ///
    /// # Errors
    /// As [`ConvProblem::backward_data`] and [`ConvProblem::plan`].
    pub fn conv_backward_data_plan<T: ConvDataType>(
        &mut self,
        dx: &TensorDescriptor<T>,
        w: &FilterDescriptor<T>,
        conv: &ConvDescriptor,
        search: AlgoSearch,
    ) -> Result<ConvBackwardDataPlan<T>> {
        ConvProblem::backward_data(dx, w, conv)?.plan(self, &PlanOptions::new(search))
    }

    /// A backward-filter plan (`dw` described by `dw`), default options.
    ///
    /// # Errors
    /// As [`ConvProblem::backward_filter`] and [`ConvProblem::plan`].
    pub fn conv_backward_filter_plan<T: ConvDataType>(
        &mut self,
        x: &TensorDescriptor<T>,
        dw: &FilterDescriptor<T>,
        conv: &ConvDescriptor,
        search: AlgoSearch,
    ) -> Result<ConvBackwardFilterPlan<T>> {
        ConvProblem::backward_filter(x, dw, conv)?.plan(self, &PlanOptions::new(search))
    }
}
