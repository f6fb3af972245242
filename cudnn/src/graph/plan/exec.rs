//! Running a plan: the bindings checked against it, the variant pack, the
//! library call; and the same checks without the call, for the launch
//! benchmark ([`Plan::launch_checks`]).

use std::ffi::c_void;
use std::sync::Arc;

use super::{Held, Plan};
use crate::check::{cudnn, cudnn_call};
use crate::error::{Error, Result};
use crate::graph::bindings::{Bindings, PackParts, WorkspaceSource};

impl Plan {
    /// Check a set of bindings against the plan: every input and output bound
    /// exactly once, with the right dtype, at least the tensor's span, and
    /// [`BYTE_ALIGNMENT`](crate::graph::BYTE_ALIGNMENT)-aligned; the workspace of
    /// this run holds at least [`workspace_size`](Self::workspace_size) bytes.
    fn check_bindings(&self, b: &Bindings<'_>, workspace_bytes: usize) -> Result<()> {
        // Two plans can share one tensor list (`from_cudnn_json` takes it
        // from the caller) and still differ in which inputs are page tables:
        // bindings checked for one are not valid for the other.
        if !Arc::ptr_eq(&b.io, &self.io) || b.guarded[..] != self.guarded[..] {
            return Err(Error::invalid(
                "bindings",
                "must come from this plan's `bindings()` (they were checked against another plan's tensors)",
                "another plan's bindings",
            ));
        }
        for t in &self.io.tensors {
            if !b.slots.iter().any(|s| s.uid == t.uid) {
                return Err(Error::invalid(
                    format!("binding `{}`", t.name),
                    format!(
                        "every graph {} must be bound",
                        if t.is_output { "output" } else { "input" }
                    ),
                    "not bound",
                ));
            }
        }
        if workspace_bytes < self.workspace {
            return Err(Error::mismatch(
                "workspace bytes",
                self.workspace,
                workspace_bytes,
            ));
        }
        Ok(())
    }

    /// What the variant pack needs of this plan.
    fn pack_parts(&self) -> PackParts<'_> {
        PackParts {
            scalars: &self.scalars,
            scratch: &self.scratch,
            id: self.id,
        }
    }

    /// Start binding buffers for [`execute`](Self::execute).
    pub fn bindings(&self) -> Bindings<'_> {
        Bindings::new(self.io.clone(), self.guarded.clone())
    }

    /// Refuse a device of another architecture than the plan's target.
    pub(super) fn check_device(&self, device: crate::runtime::Device) -> Result<()> {
        let (major, minor) = device.compute_capability()?;
        let ver = i64::from(major) * 100 + i64::from(minor) * 10;
        if ver != self.device_ver {
            return Err(Error::Unsupported {
                what: format!(
                    "running a plan built for `{}` (sm{}) on device {} (sm{})",
                    self.target,
                    self.device_ver / 10,
                    device.ordinal(),
                    ver / 10
                ),
                needs: Some("a plan built for this device's architecture".to_string()),
            });
        }
        Ok(())
    }

    /// Run the plan on the handle's stream with `bindings` (one cuDNN call
    /// when the pointers are those of the previous run). The handle's device
    /// is made current for the call. The workspace is the caller's when the
    /// bindings carry one, else the handle's, looked up on every run (grown
    /// if needed): a workspace another plan reallocated is never used stale.
    ///
    /// # Errors
    /// A binding missing; the handle's device of another architecture than
    /// the plan's target (typed `Unsupported`, before cuDNN is called); the
    /// plan's descriptor held by this thread; cuDNN's refusal (no device:
    /// `NOT_INITIALIZED` at handle creation already).
    #[doc(alias = "cudnnBackendExecute")]
    pub fn execute(
        &self,
        handle: &mut crate::dnn::Handle,
        bindings: &mut Bindings<'_>,
    ) -> Result<()> {
        self.with_pack(handle, bindings, |raw_handle, plan, pack| {
            let api = cudnn()?;
            // SAFETY: the plan is finalized; the variant pack holds a pointer for
            // every graph input and output, each checked for dtype, span and
            // alignment and borrowed by `bindings` for its lifetime; the
            // workspace holds at least `self.workspace` bytes and is the one this
            // run resolved: the caller's (same contract as their buffers) or the
            // handle's as it is now (used on the handle's stream); scalar
            // pointers point into `self.scalars`.
            unsafe { cudnn_call!(api, cudnnBackendExecute(raw_handle, plan, pack)) }
                .map_err(|e| e.with_context("executing a graph plan"))
        })
    }

    /// The checks and the variant pack of a run: the handle's device (of
    /// the plan's architecture) current, every binding on it and checked,
    /// the workspace resolved (the handle's grown if needed: refused during
    /// a capture), the plan locked; then `f(handle, plan, pack)`.
    pub(in crate::graph) fn with_pack<R>(
        &self,
        handle: &mut crate::dnn::Handle,
        bindings: &mut Bindings<'_>,
        f: impl FnOnce(
            crate::sys::cudnn::cudnnHandle_t,
            crate::sys::cudnn::cudnnBackendDescriptor_t,
            crate::sys::cudnn::cudnnBackendDescriptor_t,
        ) -> Result<R>,
    ) -> Result<R> {
        let device = handle.device();
        self.check_device(device)?;
        // The handle's device current for the call (restored after), its
        // stream usable from this thread, and every bound buffer on it.
        let _on = handle.launch("a graph plan", &bindings.devices())?;
        let (workspace, workspace_bytes) = bindings.workspace.resolve(self.workspace, |n| {
            let mut ws = handle.workspace(n)?;
            Ok(ws.as_raw_mut())
        })?;
        let (held, pack) = self.checked_pack(bindings, workspace, workspace_bytes)?;
        f(handle.as_raw(), held.guard.as_raw(), pack)
    }

    /// The host part of a run once the workspace is resolved: every
    /// binding checked against the plan, the plan locked, and the variant
    /// pack (the cached one when no pointer changed).
    fn checked_pack(
        &self,
        bindings: &mut Bindings<'_>,
        workspace: *mut c_void,
        workspace_bytes: usize,
    ) -> Result<(Held<'_>, crate::sys::cudnn::cudnnBackendDescriptor_t)> {
        self.check_bindings(bindings, workspace_bytes)?;
        let held = self.lock()?;
        let pack = bindings.pack(self.pack_parts(), workspace)?;
        Ok((held, pack))
    }

    /// Benchmark aid (`examples/bench_launch.rs`, issue 34): the checks of
    /// one [`execute`](Self::execute) that need no device, the same code,
    /// up to and including `stage`, and no launch: nothing is executed,
    /// whatever the bindings hold (the `Pack` stage builds cuDNN's variant
    /// pack, a host object, as `execute` does). What needs a device (the
    /// architecture check, the handle's device made current, the handle's
    /// workspace) is left out: the bindings must carry a workspace of their
    /// own ([`Bindings::workspace`]) when the plan needs one. The device
    /// check of the bound buffers runs against `device`.
    ///
    /// # Errors
    /// As [`execute`](Self::execute) for the stages run; a plan that needs
    /// a workspace with bindings that carry none.
    #[doc(hidden)]
    pub fn launch_checks(
        &self,
        bindings: &mut Bindings<'_>,
        device: Option<crate::runtime::Device>,
        stage: LaunchStage,
    ) -> Result<()> {
        let devices = bindings.devices();
        if let Some(d) = device {
            crate::runtime::check_args("a graph plan", d, &devices)?;
        }
        drop(devices);
        if stage == LaunchStage::Devices {
            return Ok(());
        }
        let (workspace, workspace_bytes) = bindings.workspace.resolve(self.workspace, |n| {
            Err(Error::invalid(
                "bindings workspace",
                "must be bound (`Bindings::workspace`) for launch_checks, which has no handle",
                n,
            ))
        })?;
        match stage {
            LaunchStage::Devices | LaunchStage::Workspace => Ok(()),
            LaunchStage::Bindings => self.check_bindings(bindings, workspace_bytes),
            LaunchStage::Lock => {
                self.check_bindings(bindings, workspace_bytes)?;
                self.lock().map(drop)
            }
            LaunchStage::Pack => self
                .checked_pack(bindings, workspace, workspace_bytes)
                .map(drop),
        }
    }

    /// Run with raw device pointers owned by someone else: `(uid, pointer)`
    /// for every graph input and output, a workspace of
    /// [`workspace_size`](Self::workspace_size) bytes, and a raw cuDNN handle
    /// (whose stream the work is queued on).
    ///
    /// # Safety
    /// Each pointer must be device memory of at least its tensor's span and
    /// type, valid until the work completes; the workspace likewise; the
    /// handle's device must be current and of the plan's architecture. The
    /// values of guarded inputs meet the contracts of their binding calls
    /// (page tables: [`Bindings::input_page_table`]; sequence lengths:
    /// [`Bindings::input_seq_lengths`]; ragged offsets of a packed THD
    /// attention: [`Bindings::input_ragged_offsets`]).
    pub unsafe fn execute_raw(
        &self,
        handle: crate::sys::cudnn::cudnnHandle_t,
        ptrs: &[(i64, *mut c_void)],
        workspace: *mut c_void,
        workspace_bytes: usize,
    ) -> Result<()> {
        let mut b = self.bindings();
        for &(uid, p) in ptrs {
            let t = self
                .io
                .tensors
                .iter()
                .find(|t| t.uid == uid)
                .ok_or_else(|| {
                    Error::invalid("uid", "is not an input or output of the plan", uid)
                })?;
            b.push(
                t.uid,
                t.spec.span_bytes()?,
                t.spec.dtype(),
                p,
                &t.name.clone(),
                None,
            )?;
        }
        b.workspace = WorkspaceSource::Caller {
            ptr: workspace,
            bytes: workspace_bytes,
        };
        self.check_bindings(&b, workspace_bytes)?;
        let held = self.lock()?;
        let pack = b.pack(self.pack_parts(), workspace)?;
        let api = cudnn()?;
        // SAFETY: the caller guarantees the pointers and the handle; every
        // graph tensor is bound (checked above).
        unsafe { cudnn_call!(api, cudnnBackendExecute(handle, held.guard.as_raw(), pack)) }
    }
}

/// How far [`Plan::launch_checks`] goes (each stage includes the ones
/// before it): the bound buffers' devices, the workspace resolved, the
/// bindings checked against the plan, the plan's lock taken, the variant
/// pack (reused when no pointer changed). Benchmark aid.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LaunchStage {
    /// The devices of the bound buffers.
    Devices,
    /// The workspace resolved.
    Workspace,
    /// Every binding checked against the plan.
    Bindings,
    /// The plan's descriptor locked (and released).
    Lock,
    /// The variant pack, built or reused.
    Pack,
}
