//! The cuBLAS handle: the library context, bound to a stream, with a math
//! mode and an optional owned workspace.

use std::fmt;
use std::ptr::{self, NonNull};

use crate::check::{self, cublas_call};
use crate::error::{Error, Result};
use crate::runtime::{Device, DeviceBuffer, DeviceGuard, QueueHold, Stream, check_device};
use crate::sys::cublas::{cublasContext, cublasHandle_t, cublasMath_t, cublasPointerMode_t};

/// How cuBLAS may trade precision for speed (`cublasSetMathMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum MathMode {
    /// `CUBLAS_DEFAULT_MATH`: tensor cores where they keep the requested
    /// precision; f32 GEMMs are *not* done in TF32.
    #[default]
    Default,
    /// `CUBLAS_TF32_TENSOR_OP_MATH`: f32 GEMMs may round inputs to TF32
    /// (about 1e-3 relative error). Only ever set when asked for.
    Tf32,
    /// `CUBLAS_PEDANTIC_MATH`: the prescribed precision everywhere, no
    /// reduced-precision shortcuts (slowest; for testing).
    Pedantic,
}

impl MathMode {
    /// The cuBLAS constant (the mode alone, without
    /// `CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION`; see
    /// [`to_raw_with`](MathMode::to_raw_with)).
    pub fn to_raw(self) -> cublasMath_t {
        match self {
            MathMode::Default => cublasMath_t::CUBLAS_DEFAULT_MATH,
            MathMode::Tf32 => cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH,
            MathMode::Pedantic => cublasMath_t::CUBLAS_PEDANTIC_MATH,
        }
    }

    /// The value [`Handle::set_math_mode`] passes to `cublasSetMathMode`:
    /// the mode, OR'd with `CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION`
    /// unless `reduced_precision_reduction` is allowed. Without that flag
    /// cuBLAS may do split-K reductions of half-precision GEMMs in the
    /// output type, so a "f32 accumulation" would not be one.
    pub fn to_raw_with(self, reduced_precision_reduction: bool) -> cublasMath_t {
        if reduced_precision_reduction {
            self.to_raw()
        } else {
            cublasMath_t(
                self.to_raw().0 | cublasMath_t::CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION.0,
            )
        }
    }
}

/// A cuBLAS handle (`cublasHandle_t`), bound to one [`Stream`].
///
/// Created in host pointer mode (alpha and beta are read from host memory)
/// and [`MathMode::Default`], with reduced-precision split-K reductions
/// disallowed (`CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION`, so half
/// GEMMs really accumulate in f32; opt out with
/// [`set_reduced_precision_reduction`](Handle::set_reduced_precision_reduction)).
/// Without [`set_workspace`](Handle::set_workspace) cuBLAS uses its own
/// default workspace pool; such a handle refuses to launch while its stream
/// is capturing a CUDA graph ([`Error::CaptureUnsafe`]): set a workspace
/// before [`Stream::capture`](crate::runtime::Stream::capture).
///
/// The handle records the device current at creation
/// ([`device`](Handle::device)). Every GEMM and GEMV on the handle runs with
/// that device current whatever device the calling thread has made current
/// (the previous one is current again afterwards), and the workspace it
/// allocates is allocated there. Its stream and every buffer of an op must
/// belong to that device ([`Error::DeviceMismatch`] before anything is
/// queued); a handle bound to [`Stream::per_thread`] may only be used from
/// the thread that made that stream value ([`Error::WrongThread`]).
///
/// # Threads
/// `Send`, not `Sync`. cuBLAS documents that its functions may be called
/// from several host threads even with the same handle, but that changing a
/// shared handle's configuration (stream, math mode, workspace) or
/// destroying it affects all threads, and "it is not recommended that
/// multiple threads share the same cuBLAS handle". Here every configuration
/// change takes `&mut self`, and the handle is not `Sync`, so it is used by
/// one thread at a time; give each thread its own handle (or use a `Mutex`).
pub struct Handle {
    raw: NonNull<cublasContext>,
    stream: Stream,
    math: MathMode,
    /// Whether split-K reductions may use the output type.
    reduced_precision_reduction: bool,
    /// The device current when the handle was created.
    device: Device,
    /// The user-provided workspace, if any; freed after the handle, in the
    /// order of the handle's stream.
    workspace: Option<DeviceBuffer<u8>>,
    owned: bool,
}

// SAFETY: cuBLAS documents (cuBLAS Library guide, "Thread Safety"): "The library
// is thread safe and its functions can be called from multiple host threads,
// even with the same handle." Moving a handle to another thread is therefore
// allowed; `Handle` stays `!Sync` following NVIDIA's advice not to share one
// handle between threads (configuration changes and destruction are visible to
// all users of the handle). Its stream and workspace are `Send`.
unsafe impl Send for Handle {}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("raw", &self.raw)
            .field("stream", &self.stream)
            .field("math", &self.math)
            .field(
                "reduced_precision_reduction",
                &self.reduced_precision_reduction,
            )
            .field("device", &self.device.ordinal())
            .field("workspace_bytes", &self.workspace_size())
            .finish()
    }
}

impl Handle {
    /// The workspace size NVIDIA recommends for a device of this compute
    /// capability major (32 MiB for Hopper and newer, 4 MiB before).
    pub fn recommended_workspace_size(cc_major: u32) -> usize {
        if cc_major >= 9 { 32 << 20 } else { 4 << 20 }
    }

    /// Create a handle on the current device, bound to `stream` (which must
    /// belong to that device), in host pointer mode and [`MathMode::Default`].
    ///
    /// # Errors
    /// [`Error::WrongThread`] (first) for another thread's
    /// [`Stream::per_thread`]; [`Error::DeviceMismatch`] for a stream of
    /// another device;
    /// [`Error::NoDevice`] without a usable device (cuBLAS's
    /// `CUBLAS_STATUS_NOT_INITIALIZED` kept in its detail);
    /// [`Error::Cublas`] from `cublasCreate` otherwise; [`Error::Load`].
    #[doc(alias = "cublasCreate")]
    #[doc(alias = "cublasCreate_v2")]
    pub fn new(stream: &Stream) -> Result<Self> {
        // Held until the handle is bound: a capture of `stream` does not
        // begin in between.
        let _hold = crate::runtime::check_stream_thread("the stream of a cuBLAS handle", stream)?;
        // cublasCreate allocates (and may synchronize): not inside a
        // capture closure on this thread, nor on a capturing stream.
        crate::runtime::forbid_creation_during_capture("blas::Handle::new", stream)?;
        let api = check::cublas()?;
        let mut raw: cublasHandle_t = ptr::null_mut();
        // SAFETY: `raw` is a valid, writable out-pointer.
        // cuBLAS says only NOT_INITIALIZED without a device: the runtime is
        // asked why.
        unsafe { cublas_call!(api, cublasCreate_v2(&mut raw)) }
            .map_err(crate::no_device::explain)?;
        let raw = NonNull::new(raw)
            .ok_or_else(|| Error::invalid("handle", "cublasCreate returned null", "null"))?;
        let device = match Device::current() {
            Ok(d) => d,
            Err(e) => {
                // SAFETY: `raw` was just created and is destroyed once.
                let _ = unsafe { api.cublasDestroy_v2(raw.as_ptr()) };
                return Err(e);
            }
        };
        // Owned from here on: Drop destroys it if configuring fails.
        let mut h = Handle {
            raw,
            stream: stream.clone(),
            math: MathMode::Default,
            reduced_precision_reduction: false,
            device,
            workspace: None,
            owned: true,
        };
        h.configure(stream)?;
        Ok(h)
    }

    /// Take ownership of a handle created elsewhere; it is bound to `stream`
    /// and set to host pointer mode and [`MathMode::Default`] (reduced-precision
    /// reductions disallowed). The device current now is recorded as the
    /// handle's device: call this with the device the handle was created on
    /// current.
    ///
    /// On error the raw handle has been destroyed (do not destroy it again).
    ///
    /// # Safety
    /// `raw` must be a valid handle from `cublasCreate` that nobody else
    /// destroys or uses while this `Handle` lives; it is destroyed on drop.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for null; [`Error::Cublas`]; [`Error::Cuda`]
    /// when the current device cannot be read.
    pub unsafe fn from_raw(raw: cublasHandle_t, stream: &Stream) -> Result<Self> {
        let raw = NonNull::new(raw)
            .ok_or_else(|| Error::invalid("raw", "must be a non-null cublasHandle_t", "null"))?;
        let device = match Device::current() {
            Ok(d) => d,
            Err(e) => {
                if let Ok(api) = check::cublas() {
                    // SAFETY: we own `raw` (the caller's contract) and destroy it
                    // once, as the doc promises on error.
                    let _ = unsafe { api.cublasDestroy_v2(raw.as_ptr()) };
                }
                return Err(e);
            }
        };
        let mut h = Handle {
            raw,
            stream: stream.clone(),
            math: MathMode::Default,
            reduced_precision_reduction: false,
            device,
            workspace: None,
            owned: true,
        };
        h.configure(stream)?;
        Ok(h)
    }

    fn configure(&mut self, stream: &Stream) -> Result<()> {
        self.bind(stream)?;
        let api = check::cublas()?;
        // SAFETY: the handle is valid; host pointer mode is a documented constant.
        unsafe {
            cublas_call!(
                api,
                cublasSetPointerMode_v2(
                    self.raw.as_ptr(),
                    cublasPointerMode_t::CUBLAS_POINTER_MODE_HOST
                )
            )
        }?;
        self.set_math_mode(MathMode::Default)
    }

    fn bind(&mut self, stream: &Stream) -> Result<()> {
        let _hold = self.check_stream(stream)?;
        let _on = self.device.guard()?;
        let api = check::cublas()?;
        // SAFETY: the handle is valid and `stream` is alive (we keep a clone).
        unsafe { cublas_call!(api, cublasSetStream_v2(self.raw.as_ptr(), stream.as_raw())) }?;
        self.stream = stream.clone();
        // cublasSetStream resets the workspace to cuBLAS's default pool: set ours again.
        if let Some(ws) = self.workspace.as_mut() {
            let (p, n) = (ws.as_raw_mut(), ws.len());
            // SAFETY: `p` is device memory of `n` bytes owned by this handle and
            // freed only after the handle stops using it (see `set_workspace`, Drop).
            unsafe { cublas_call!(api, cublasSetWorkspace_v2(self.raw.as_ptr(), p, n)) }?;
        }
        Ok(())
    }

    /// A handle may only be bound to a stream of its device, usable from
    /// this thread; the hold counts the caller as queueing on it.
    fn check_stream(&self, stream: &Stream) -> Result<QueueHold> {
        let hold = crate::runtime::check_stream_thread("the stream of a cuBLAS handle", stream)?;
        check_device(
            || "the stream of a cuBLAS handle".to_string(),
            self.device,
            stream.device(),
        )?;
        Ok(hold)
    }

    /// Give up ownership: returns the raw handle, which the caller must
    /// destroy (`cublasDestroy`), with the [`Stream`] it stays bound to: the
    /// raw handle queues work there until the caller rebinds it
    /// (`cublasSetStream`), so keep that stream alive until then (dropping
    /// the last clone of an owned stream destroys it). A workspace set with
    /// [`set_workspace`](Handle::set_workspace) is detached first
    /// (`cublasSetStream` on the handle's stream puts cuBLAS back on its
    /// default pool; `cublasSetWorkspace(NULL, 0)` would instead leave it
    /// with no workspace at all) and freed in the stream's order, after the
    /// work already queued that may use it.
    pub fn into_raw(mut self) -> (cublasHandle_t, Stream) {
        if let Some(ws) = self.workspace.take() {
            // Best effort: into_raw cannot report errors. If resetting fails
            // the workspace is leaked rather than freed under the handle.
            if self.reset_to_default_pool().is_ok() {
                let _ = ws.destroy_after(&self.stream);
            } else {
                let _ = ws.into_raw();
            }
        }
        self.owned = false;
        (self.raw.as_ptr(), self.stream.clone())
    }

    /// `cublasSetStream` on the current stream: cuBLAS documents that it
    /// resets the user workspace to the default workspace pool.
    fn reset_to_default_pool(&mut self) -> Result<()> {
        let _on = self.device.guard()?;
        let api = check::cublas()?;
        // SAFETY: the handle is valid and the stream is alive (we keep a clone).
        unsafe {
            cublas_call!(
                api,
                cublasSetStream_v2(self.raw.as_ptr(), self.stream.as_raw())
            )
        }
    }

    /// The device current when the handle was created. Every op runs with
    /// it current, its workspace is allocated there, and the handle's stream
    /// and the buffers of each op must belong to it.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Prepare to queue work through the handle: check that its stream may
    /// be used from this thread (not another thread's
    /// [`Stream::per_thread`]), then make the handle's device current until
    /// the guard drops (one `cudaGetDevice`, plus a `cudaSetDevice` only when
    /// another device is current, and one to put it back). While the guard
    /// lives the stream counts as being queued on: a [`Stream::capture`] of
    /// it waits (up to 1 s, then refuses) for the guard to drop, so work
    /// queued under it never joins a capture begun meanwhile; do not hold
    /// it across a capture of the same stream. Every op of the
    /// crate does this; call it before using [`as_raw`](Handle::as_raw) with
    /// cuBLAS directly.
    ///
    /// # Errors
    /// [`Error::WrongThread`]; [`Error::Cuda`] when the device cannot be
    /// made current.
    pub fn enter(&self) -> Result<DeviceGuard> {
        let hold =
            crate::runtime::check_stream_thread("the stream of a cuBLAS handle", self.stream())?;
        Ok(self.device.guard()?.holding(hold))
    }

    /// [`enter`](Handle::enter), after checking that every buffer of the op
    /// `op` is on the handle's device.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] naming the first buffer on another device;
    /// as [`enter`](Handle::enter).
    pub(crate) fn launch(&self, op: &str, args: &[(&str, Option<Device>)]) -> Result<DeviceGuard> {
        crate::runtime::check_args(op, self.device, args)?;
        if self.workspace.is_none() {
            // cuBLAS would take workspace from its own pool (possibly a
            // cudaMalloc): not on a capturing stream, nor inside a capture
            // closure on this thread whatever the stream.
            let hazard = crate::runtime::Hazard::ImplicitWorkspace;
            crate::runtime::forbid_allocation_during_capture(op, &self.stream, hazard)?;
        }
        self.enter()
    }

    /// The raw handle, valid while `self` lives.
    pub fn as_raw(&self) -> cublasHandle_t {
        self.raw.as_ptr()
    }

    /// The stream the handle queues work on.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Queue later work on `stream`. Work on the new stream first waits for
    /// what is queued on the old one (it may be using the workspace: the
    /// user's, or cuBLAS's default pool of this handle). Re-applies the
    /// workspace, which `cublasSetStream` resets.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] for a stream of another device and
    /// [`Error::WrongThread`] for another thread's per-thread stream (the
    /// handle is unchanged); [`Error::Cublas`]; [`Error::Cuda`] from the
    /// ordering event; [`Error::CaptureUnsafe`] when the streams differ and
    /// either is being captured.
    #[doc(alias = "cublasSetStream")]
    #[doc(alias = "cublasSetStream_v2")]
    pub fn set_stream(&mut self, stream: &Stream) -> Result<()> {
        // Held through the ordering wait queued on `stream` and the bind.
        let _hold = self.check_stream(stream)?;
        // Always, not only with a user workspace: without one cuBLAS uses
        // its default pool of this handle, which the old stream's work may
        // still use (an audit's point; one event per change).
        stream.order_resource_after(
            &self.stream,
            "blas::Handle::set_stream",
            "the cuBLAS handle's workspace",
        )?;
        self.bind(stream)
    }

    /// The math mode.
    pub fn math_mode(&self) -> MathMode {
        self.math
    }

    /// Set the math mode. TF32 is used only after `set_math_mode(MathMode::Tf32)`.
    /// The reduced-precision-reduction setting is kept.
    ///
    /// # Errors
    /// [`Error::Cublas`].
    #[doc(alias = "cublasSetMathMode")]
    pub fn set_math_mode(&mut self, mode: MathMode) -> Result<()> {
        self.apply_math(mode, self.reduced_precision_reduction)
    }

    /// Whether split-K reductions of half-precision GEMMs may be done in the
    /// output type (faster on some shapes, less accurate). `false` by default.
    pub fn reduced_precision_reduction(&self) -> bool {
        self.reduced_precision_reduction
    }

    /// Allow (`true`) or disallow (`false`, the default) reduced-precision
    /// split-K reductions (`CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION`).
    ///
    /// # Errors
    /// [`Error::Cublas`].
    #[doc(alias = "CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION")]
    pub fn set_reduced_precision_reduction(&mut self, allow: bool) -> Result<()> {
        self.apply_math(self.math, allow)
    }

    fn apply_math(&mut self, mode: MathMode, allow_reduced: bool) -> Result<()> {
        let _on = self.device.guard()?;
        let api = check::cublas()?;
        let raw = mode.to_raw_with(allow_reduced);
        // SAFETY: the handle is valid; the value is a documented mode OR'd with
        // a documented flag (cuBLAS: the flag "can be combined with other
        // values using a bitwise OR").
        unsafe { cublas_call!(api, cublasSetMathMode(self.raw.as_ptr(), raw)) }?;
        self.math = mode;
        self.reduced_precision_reduction = allow_reduced;
        Ok(())
    }

    /// Give cuBLAS an owned workspace of `bytes` bytes (see
    /// [`recommended_workspace_size`](Handle::recommended_workspace_size)),
    /// allocated on the handle's [`device`](Handle::device); `0` goes back to
    /// cuBLAS's default pool (through `cublasSetStream`, which cuBLAS
    /// documents as resetting the workspace to the default pool). The new
    /// workspace is attached before the old one is freed, and the old one is
    /// freed in the order of the handle's stream (after the work queued there
    /// that may still use it).
    ///
    /// # Errors
    /// [`Error::Cuda`] when the allocation fails; [`Error::Cublas`];
    /// [`Error::CaptureUnsafe`] while the handle's stream is capturing or
    /// inside a [`Stream::capture`](crate::runtime::Stream::capture) closure.
    #[doc(alias = "cublasSetWorkspace")]
    #[doc(alias = "cublasSetWorkspace_v2")]
    pub fn set_workspace(&mut self, bytes: usize) -> Result<()> {
        // Allocating, or freeing the old one after a synchronize: not during
        // a capture (checked before anything is released).
        if bytes != 0 || self.workspace.is_some() {
            let hazard = crate::runtime::Hazard::Allocation;
            crate::runtime::forbid_allocation_during_capture(
                "blas::Handle::set_workspace",
                &self.stream,
                hazard,
            )?;
        }
        let _on = self.device.guard()?;
        let api = check::cublas()?;
        if bytes == 0 {
            if self.workspace.is_some() {
                self.reset_to_default_pool()?;
            }
        } else {
            let mut new = {
                let _on = self.device.guard()?;
                DeviceBuffer::<u8>::alloc(bytes).map_err(|e| {
                    e.with_context(format!("allocating a {bytes}-byte cuBLAS workspace"))
                })?
            };
            let (p, n) = (new.as_raw_mut(), new.len());
            // SAFETY: `p` is device memory of `n` bytes that this handle keeps
            // until it is replaced or the handle is destroyed.
            unsafe { cublas_call!(api, cublasSetWorkspace_v2(self.raw.as_ptr(), p, n)) }?;
            if let Some(old) = self.workspace.replace(new) {
                return old.destroy_after(&self.stream);
            }
            return Ok(());
        }
        match self.workspace.take() {
            Some(old) => old.destroy_after(&self.stream),
            None => Ok(()),
        }
    }

    /// Bytes of owned workspace (0: cuBLAS's default pool).
    pub fn workspace_size(&self) -> usize {
        self.workspace.as_ref().map_or(0, DeviceBuffer::len)
    }

    /// Destroy the handle now, reporting cuBLAS's status.
    ///
    /// # Errors
    /// [`Error::Cublas`] from `cublasDestroy`; [`Error::Cuda`] from freeing the workspace.
    #[doc(alias = "cublasDestroy")]
    #[doc(alias = "cublasDestroy_v2")]
    pub fn destroy(mut self) -> Result<()> {
        self.owned = false;
        let _on = self.device.guard()?;
        let api = check::cublas()?;
        // SAFETY: we own the handle; `owned` is cleared so Drop will not destroy
        // it again. The workspace is freed after it.
        let r = unsafe { cublas_call!(api, cublasDestroy_v2(self.raw.as_ptr())) };
        let w = match self.workspace.take() {
            Some(ws) => ws.destroy_after(&self.stream),
            None => Ok(()),
        };
        r.and(w)
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // On the handle's device (nothing changes if that fails).
        let _on = self.device.guard();
        if self.owned
            && let Ok(api) = check::cublas()
        {
            // SAFETY: we own the handle and destroy it once; the status is
            // ignored (Drop must not fail).
            let _ = unsafe { api.cublasDestroy_v2(self.raw.as_ptr()) };
        }
        if let Some(ws) = self.workspace.take() {
            // Freed after the work queued on the handle's stream.
            let _ = ws.destroy_after(&self.stream);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::hold_check::{PretendCurrent, assert_enter_holds_the_stream};

    /// A capture's beginning waits while the guard of `Handle::enter` (the
    /// entry of every cuBLAS call) lives. No CUDA call: a pretended
    /// current device, a handle value that is never destroyed.
    #[test]
    fn unit_enter_guard_holds_the_stream() {
        let _dev = PretendCurrent::device(4);
        let stream = Stream::fake_for_tests(0x3200);
        let h = Handle {
            raw: NonNull::dangling(),
            stream: stream.clone(),
            math: MathMode::Default,
            reduced_precision_reduction: false,
            device: Device::from_runtime(4),
            // A user workspace (empty), so `launch` asks no capture query.
            // SAFETY: null with length 0 is the documented empty buffer;
            // the handle is forgotten, so nothing is ever freed.
            workspace: Some(unsafe { DeviceBuffer::from_raw(ptr::null_mut(), 0) }),
            owned: false,
        };
        assert_enter_holds_the_stream(&stream, || h.enter());
        assert_enter_holds_the_stream(&stream, || h.launch("op", &[("x", None)]));
        std::mem::forget(h);
    }
}
