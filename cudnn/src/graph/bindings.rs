//! Buffers bound to a plan's inputs and outputs, the workspace each run
//! uses, and the cached variant pack.
//!
//! The workspace is chosen on every run ([`WorkspaceSource::resolve`]): a
//! caller's workspace is borrowed by the bindings for their lifetime; the
//! handle's is looked up from the handle passed to that run (the handle may
//! have grown, released or reallocated it since, and another handle has its
//! own), and the variant pack is rebuilt only when a pointer actually changed
//! ([`pack_is_current`]).

use std::ffi::c_void;
use std::sync::Arc;

use super::backend::{Descriptor, attr, kind};
use super::graph::{Graph, IoSignature, IoTensor, Tensor};
use super::guard::{InputGuard, SeqLengths, guard_of};
use super::tensor::{BYTE_ALIGNMENT, DType, fmt_dims};
use crate::DataType;
use crate::error::{Error, Result};
use crate::runtime::{Device, DeviceSlice, DeviceSliceMut};

pub(super) struct Slot {
    pub(super) uid: i64,
    pub(super) ptr: *mut c_void,
    /// The binding's name, for errors.
    pub(super) name: String,
    /// The buffer's device (`None`: unknown, agrees with any).
    pub(super) device: Option<Device>,
}

/// Where a run's workspace comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WorkspaceSource {
    /// The handle of each run, looked up on every run.
    Handle,
    /// The caller's, borrowed by the bindings (`'a`).
    Caller {
        /// Device address.
        ptr: *mut c_void,
        /// Bytes.
        bytes: usize,
    },
}

impl WorkspaceSource {
    /// The workspace for one run that needs `need` bytes: the caller's as
    /// bound, or `handle_ws(need)` (the handle's, grown if needed) asked now.
    /// A plan that needs none asks the handle for nothing.
    ///
    /// # Errors
    /// The handle's allocation fails.
    pub(crate) fn resolve(
        self,
        need: usize,
        handle_ws: impl FnOnce(usize) -> Result<*mut c_void>,
    ) -> Result<(*mut c_void, usize)> {
        match self {
            WorkspaceSource::Caller { ptr, bytes } => Ok((ptr, bytes)),
            WorkspaceSource::Handle if need == 0 => Ok((std::ptr::null_mut(), 0)),
            WorkspaceSource::Handle => Ok((handle_ws(need)?, need)),
        }
    }
}

/// Whether a variant pack built by plan `packed_for` for `packed` pointers
/// is valid for plan `plan` and the `current` pointers (bound tensors,
/// scalars, then the workspace). A pack is never valid for another plan,
/// even one sharing the same IO signature: the scratch tensors' offsets in
/// the workspace, and the scalars' host copies, are the plan's own.
pub(crate) fn pack_is_current(
    packed_for: Option<u64>,
    plan: u64,
    packed: &[*mut c_void],
    current: impl Iterator<Item = *mut c_void>,
) -> bool {
    packed_for == Some(plan) && !packed.is_empty() && current.eq(packed.iter().copied())
}

/// Buffers bound to a plan's inputs and outputs, by tensor name. Reused
/// across executions, the variant pack is rebuilt only when a pointer
/// changes, the workspace's included: the handle's workspace is looked up on
/// every run (so another plan growing it, `release_workspace`, or running
/// with another handle never leaves a stale pointer), a caller's
/// ([`workspace`](Self::workspace)) stays borrowed.
pub struct Bindings<'a> {
    pub(super) io: Arc<IoSignature>,
    pub(super) slots: Vec<Slot>,
    pub(super) workspace: WorkspaceSource,
    /// The device of a caller's workspace (`None`: the handle's, or unknown).
    pub(super) workspace_device: Option<Device>,
    pack: Option<Descriptor<kind::VariantPack>>,
    packed_ptrs: Vec<*mut c_void>,
    /// The plan (its [`Plan::id`]) the cached pack was built for.
    packed_for: Option<u64>,
    /// How many times a variant pack was built (for tests).
    pub(super) packs_built: usize,
    /// The plan's inputs the GPU uses as addresses or bounds, by UID: bound
    /// only through the call their [`InputGuard`] names, never plain
    /// [`input`](Self::input).
    pub(super) guarded: Arc<[(i64, InputGuard)]>,
    _plan: std::marker::PhantomData<&'a mut ()>,
}

impl std::fmt::Debug for Bindings<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bindings")
            .field("bound", &self.slots.len())
            .field("workspace", &self.workspace)
            .finish()
    }
}

impl<'a> Bindings<'a> {
    pub(super) fn new(io: Arc<IoSignature>, guarded: Arc<[(i64, InputGuard)]>) -> Self {
        Self {
            io,
            guarded,
            slots: Vec::new(),
            workspace: WorkspaceSource::Handle,
            workspace_device: None,
            pack: None,
            packed_ptrs: Vec::new(),
            packed_for: None,
            packs_built: 0,
            _plan: std::marker::PhantomData,
        }
    }

    /// How many variant packs these bindings have built (one per change of
    /// a pointer, the workspace's included).
    pub fn packs_built(&self) -> usize {
        self.packs_built
    }

    fn find(&self, name: &str) -> Result<IoTensor> {
        self.io
            .tensors
            .iter()
            .find(|t| t.name == name)
            .cloned()
            .ok_or_else(|| {
                let names: Vec<&str> = self.io.tensors.iter().map(|t| t.name.as_str()).collect();
                Error::invalid("binding name", format!("must be one of {names:?}"), name)
            })
    }

    pub(super) fn push(
        &mut self,
        uid: i64,
        bytes: usize,
        dtype: DType,
        ptr: *mut c_void,
        name: &str,
        device: Option<Device>,
    ) -> Result<()> {
        let t = self
            .io
            .tensors
            .iter()
            .find(|t| t.uid == uid)
            .ok_or_else(|| Error::invalid("binding", "unknown tensor", name))?;
        if self.slots.iter().any(|s| s.uid == uid) {
            return Err(Error::invalid(
                format!("binding `{name}`"),
                "must be bound exactly once",
                "bound twice",
            ));
        }
        if dtype != t.spec.dtype() {
            return Err(Error::mismatch(
                format!("binding `{name}` element type"),
                t.spec.dtype(),
                dtype,
            ));
        }
        let need = t.spec.span_bytes()?;
        if bytes < need {
            return Err(Error::mismatch(
                format!(
                    "binding `{name}` bytes (the span of {} {})",
                    t.spec.dtype(),
                    fmt_dims(t.spec.dims())
                ),
                format!("at least {need}"),
                bytes,
            ));
        }
        if ptr.is_null() || !(ptr as usize).is_multiple_of(BYTE_ALIGNMENT) {
            return Err(Error::invalid(
                format!("binding `{name}` pointer"),
                format!("must be non-null and {BYTE_ALIGNMENT}-byte aligned"),
                format!("{ptr:p}"),
            ));
        }
        self.slots.push(Slot {
            uid,
            ptr,
            name: name.to_string(),
            device,
        });
        self.pack = None;
        Ok(())
    }

    /// Bind a graph input.
    ///
    /// An input the GPU uses as addresses or bounds is refused here, with
    /// the call that binds it: a page table of a paged KV cache
    /// ([`input_page_table`](Self::input_page_table), unsafe) and the
    /// sequence lengths of an attention's padding mask
    /// ([`seq_lengths`](Self::seq_lengths), or the unsafe
    /// [`input_seq_lengths`](Self::input_seq_lengths)), and the ragged
    /// offsets of a packed (THD) attention
    /// ([`input_ragged_offsets`](Self::input_ragged_offsets), unsafe): cuDNN reads them
    /// unchecked, so a bad value makes the GPU touch memory outside the
    /// tensors.
    ///
    /// # Errors
    /// Unknown name, an output, a guarded input, bound twice, wrong dtype,
    /// too short, misaligned.
    pub fn input<T: DataType>(
        &mut self,
        name: &str,
        buf: impl Into<DeviceSlice<'a, T>>,
    ) -> Result<&mut Self> {
        let t = self.find(name)?;
        if let Some(g) = guard_of(&self.guarded, t.uid) {
            return Err(g.refusal(name));
        }
        self.input_checked(name, t, buf)
    }

    /// [`input`](Self::input) by the [`Tensor`] handle `graph` gave instead
    /// of a name typed by hand: the tensor's name in `graph` is bound. Any
    /// graph with the plan's signature serves (the one the plan was built
    /// from, or an identical one rebuilt for a cache hit).
    ///
    /// # Errors
    /// A handle of another graph, a tensor the plan does not bind (virtual,
    /// scalar), and everything [`input`](Self::input) refuses.
    pub fn input_tensor<T: DataType>(
        &mut self,
        graph: &Graph,
        tensor: Tensor,
        buf: impl Into<DeviceSlice<'a, T>>,
    ) -> Result<&mut Self> {
        let name = graph.name(tensor)?.to_string();
        self.input(&name, buf)
    }

    /// Bind the sequence lengths of an attention's padding mask (the
    /// `seq_len_q` / `seq_len_kv` inputs of
    /// [`SdpaConfig::padding`](crate::graph::SdpaConfig::padding)) from
    /// checked host values. The plan knows the sequence extent each length
    /// tensor bounds; `lengths` was checked against the extent it was made
    /// with, and its largest value is checked here against the plan's, so
    /// no length lets the GPU read past Q, K, V or write past O or the
    /// gradients. The device copy is `lengths`' own and never lent
    /// mutably: it cannot change after the check.
    ///
    /// # Errors
    /// Unknown name, not a sequence-length input, a length above the plan's
    /// extent, bound twice, a count other than the tensor's batch.
    pub fn seq_lengths(&mut self, name: &str, lengths: &'a SeqLengths) -> Result<&mut Self> {
        let t = self.find(name)?;
        let Some(InputGuard::SeqLengths { extent }) = guard_of(&self.guarded, t.uid) else {
            return Err(Error::invalid(
                format!("binding `{name}` with `seq_lengths`"),
                "must be sequence lengths of the plan's attention (bind other inputs with `input`)",
                name,
            ));
        };
        if i64::from(lengths.max()) > extent {
            return Err(Error::invalid(
                format!("binding `{name}` with `seq_lengths`: the largest length"),
                format!("must be at most {extent} (the sequence extent the plan's tensors have)"),
                lengths.max(),
            ));
        }
        let want = t.spec.dims().first().copied().unwrap_or(0);
        if i64::try_from(lengths.len()).ok() != Some(want) {
            return Err(Error::mismatch(
                format!("binding `{name}` with `seq_lengths`: lengths (one per sequence)"),
                want,
                lengths.len(),
            ));
        }
        self.input_checked(name, t, lengths.as_slice())
    }

    /// Bind the sequence lengths of an attention's padding mask from a
    /// device buffer whose values the crate cannot check (lengths a kernel
    /// writes, e.g. a KV cache growing on the device). The shape, type,
    /// length, alignment and device are checked as [`input`](Self::input)
    /// checks them. Prefer [`seq_lengths`](Self::seq_lengths).
    ///
    /// # Safety
    /// For every execution with these bindings, until it completes: every
    /// value in `buf`'s first `B` entries is in `0..=extent`, `extent` the
    /// sequence extent [`Plan::guarded_inputs`](crate::graph::Plan::guarded_inputs)
    /// gives it (`seq_q` for `seq_len_q`, `seq_kv` for `seq_len_kv`; the
    /// keys a page-table row covers for a paged SDPA operation without a
    /// score subgraph; the refusal of [`input`](Self::input) names it), and nothing writes
    /// `buf` while a run reads it. cuDNN does not check: a length past the
    /// extent, or negative, makes the GPU read past Q, K or V and write
    /// past O or the gradients.
    ///
    /// # Errors
    /// Unknown name, not a sequence-length input, bound twice, wrong dtype,
    /// too short, misaligned.
    pub unsafe fn input_seq_lengths(
        &mut self,
        name: &str,
        buf: impl Into<DeviceSlice<'a, i32>>,
    ) -> Result<&mut Self> {
        let t = self.find(name)?;
        if !matches!(
            guard_of(&self.guarded, t.uid),
            Some(InputGuard::SeqLengths { .. })
        ) {
            return Err(Error::invalid(
                format!("binding `{name}` with `input_seq_lengths`"),
                "must be sequence lengths of the plan's attention (bind other inputs with `input`)",
                name,
            ));
        }
        self.input_checked(name, t, buf)
    }

    /// Bind a page table of a paged KV cache (see
    /// [`SdpaConfig::paged`](crate::graph::SdpaConfig::paged)): `[B, 1,
    /// pages, 1]` i32, row `n` listing the container pages of sequence `n`
    /// in token order. The shape, type, length, alignment and device are
    /// checked as [`input`](Self::input) checks them; the values cannot be
    /// (they live on the device and change as a cache grows).
    ///
    /// # Safety
    /// For every execution with these bindings, until it completes: every
    /// entry of the table is in `0..num_blocks` (the pages of the K / V
    /// container the same attention reads), the entries past a sequence's
    /// length included (cuDNN's kernels load keys by tiles, and a tile
    /// may reach past the length; pad a table row with a valid page, not
    /// -1), and every key length bound with it is at most `pages *
    /// block_size`. cuDNN checks neither: an entry outside the container,
    /// or a length past the table, makes the GPU read memory outside K, V
    /// or the table.
    ///
    /// # Errors
    /// Unknown name, not a page table, bound twice, wrong dtype, too short,
    /// misaligned.
    pub unsafe fn input_page_table(
        &mut self,
        name: &str,
        buf: impl Into<DeviceSlice<'a, i32>>,
    ) -> Result<&mut Self> {
        let t = self.find(name)?;
        if guard_of(&self.guarded, t.uid) != Some(InputGuard::PageTable) {
            return Err(Error::invalid(
                format!("binding `{name}` with `input_page_table`"),
                "must be a page table of the plan's paged KV cache (bind other inputs with `input`)",
                name,
            ));
        }
        self.input_checked(name, t, buf)
    }

    /// Bind ragged offsets of a packed (THD) attention (see
    /// [`SdpaConfig::ragged`](crate::graph::SdpaConfig::ragged)): `[B + 1,
    /// 1, 1, 1]` i32, entry `b` the element offset of sequence `b` in the
    /// tensor they address. The shape, type, length, alignment and device
    /// are checked as [`input`](Self::input) checks them; the values
    /// cannot be (they live on the device).
    ///
    /// # Safety
    /// For every execution with these bindings, until it completes, and
    /// for every tensor these offsets address (Q and dQ, K and dK, V and dV,
    /// or O and dO): every entry is `>= 0`, and each sequence `b` (the
    /// `len_b` tokens of `H x D` elements the bound sequence length gives
    /// it, starting at entry `b`) lies inside the tensor's `[B, H, S, D]`
    /// span, and nothing writes `buf` while a run reads it. Offsets that
    /// [`SdpaConfig::ragged_offsets`](crate::graph::SdpaConfig::ragged_offsets)
    /// computes for the config the plan was built from (from any lengths
    /// it accepts) meet this with any sequence lengths bound through
    /// [`seq_lengths`](Self::seq_lengths): every tensor with ragged offsets
    /// has packed BSHD strides (`[S*H*D, D, H*D, 1]`; the graph builder and
    /// the plan JSON loader refuse others, typed), so its span is
    /// `B x S` tokens of `H x D` elements. cuDNN
    /// checks nothing: an offset past the span makes the GPU read past Q,
    /// K, V or write past O or the gradients.
    ///
    /// # Errors
    /// Unknown name, not ragged offsets of the plan, bound twice, wrong
    /// dtype, too short, misaligned.
    pub unsafe fn input_ragged_offsets(
        &mut self,
        name: &str,
        buf: impl Into<DeviceSlice<'a, i32>>,
    ) -> Result<&mut Self> {
        let t = self.find(name)?;
        if guard_of(&self.guarded, t.uid) != Some(InputGuard::RaggedOffsets) {
            return Err(Error::invalid(
                format!("binding `{name}` with `input_ragged_offsets`"),
                "must be ragged offsets of the plan's attention (bind other inputs with `input`)",
                name,
            ));
        }
        self.input_checked(name, t, buf)
    }

    fn input_checked<T: DataType>(
        &mut self,
        name: &str,
        t: IoTensor,
        buf: impl Into<DeviceSlice<'a, T>>,
    ) -> Result<&mut Self> {
        if t.is_output {
            return Err(Error::invalid(
                format!("binding `{name}`"),
                "is an output: bind it with `output`",
                name,
            ));
        }
        let s: DeviceSlice<'a, T> = buf.into();
        let dtype = DType::of::<T>().ok_or_else(|| {
            Error::invalid(
                format!("binding `{name}`"),
                "element type has no graph dtype",
                T::NAME,
            )
        })?;
        self.push(
            t.uid,
            s.byte_len(),
            dtype,
            s.as_raw() as *mut c_void,
            name,
            s.device(),
        )?;
        Ok(self)
    }

    /// Bind a graph output.
    ///
    /// # Errors
    /// Unknown name, an input, bound twice, wrong dtype, too short, misaligned.
    pub fn output<T: DataType>(
        &mut self,
        name: &str,
        buf: impl Into<DeviceSliceMut<'a, T>>,
    ) -> Result<&mut Self> {
        let t = self.find(name)?;
        if !t.is_output {
            return Err(Error::invalid(
                format!("binding `{name}`"),
                "is an input: bind it with `input`",
                name,
            ));
        }
        let mut s: DeviceSliceMut<'a, T> = buf.into();
        let dtype = DType::of::<T>().ok_or_else(|| {
            Error::invalid(
                format!("binding `{name}`"),
                "element type has no graph dtype",
                T::NAME,
            )
        })?;
        let device = s.device();
        self.push(t.uid, s.byte_len(), dtype, s.as_raw_mut(), name, device)?;
        Ok(self)
    }

    /// [`output`](Self::output) by the [`Tensor`] handle `graph` gave (as
    /// [`input_tensor`](Self::input_tensor)).
    ///
    /// # Errors
    /// A handle of another graph, a tensor the plan does not bind, and
    /// everything [`output`](Self::output) refuses.
    pub fn output_tensor<T: DataType>(
        &mut self,
        graph: &Graph,
        tensor: Tensor,
        buf: impl Into<DeviceSliceMut<'a, T>>,
    ) -> Result<&mut Self> {
        let name = graph.name(tensor)?.to_string();
        self.output(&name, buf)
    }

    /// Use a caller's workspace instead of the handle's, borrowed for the
    /// bindings' lifetime.
    ///
    /// # Errors
    /// Misaligned.
    pub fn workspace(&mut self, ws: impl Into<DeviceSliceMut<'a, u8>>) -> Result<&mut Self> {
        let mut s: DeviceSliceMut<'a, u8> = ws.into();
        let p = s.as_raw_mut();
        if !p.is_null() && !(p as usize).is_multiple_of(BYTE_ALIGNMENT) {
            return Err(Error::invalid(
                "workspace pointer",
                format!("must be {BYTE_ALIGNMENT}-byte aligned"),
                format!("{p:p}"),
            ));
        }
        self.workspace = WorkspaceSource::Caller {
            ptr: p,
            bytes: s.byte_len(),
        };
        self.workspace_device = s.device();
        self.pack = None;
        Ok(self)
    }

    /// `(name, device)` of every bound buffer and a caller's workspace, for
    /// the handle's device check before a run.
    pub(super) fn devices(&self) -> Vec<(&str, Option<Device>)> {
        let mut v: Vec<(&str, Option<Device>)> = self
            .slots
            .iter()
            .map(|s| (s.name.as_str(), s.device))
            .collect();
        v.push(("workspace", self.workspace_device));
        v
    }

    /// The variant pack for the current pointers and `workspace` (the one
    /// this run resolved), rebuilt only when one of them changed. `plan` is
    /// the running plan's by-value scalars, scratch offsets and id.
    pub(super) fn pack(
        &mut self,
        plan: PackParts<'_>,
        workspace: *mut c_void,
    ) -> Result<crate::sys::cudnn::cudnnBackendDescriptor_t> {
        // Hot path: the same pointers as last time, compared without allocating.
        if let Some(p) = &self.pack {
            let current = self
                .slots
                .iter()
                .map(|s| s.ptr)
                .chain(plan.scalars.iter().map(|(_, b)| b.as_ptr() as *mut c_void))
                .chain(std::iter::once(workspace));
            if pack_is_current(self.packed_for, plan.id, &self.packed_ptrs, current) {
                return Ok(p.as_raw());
            }
        }
        self.pack = None;
        self.packed_for = None;
        let mut uids: Vec<i64> = Vec::with_capacity(self.slots.len() + plan.scalars.len());
        let mut ptrs: Vec<*mut c_void> = Vec::with_capacity(uids.capacity());
        for s in &self.slots {
            uids.push(s.uid);
            ptrs.push(s.ptr);
        }
        for (uid, bytes) in plan.scalars {
            uids.push(*uid);
            ptrs.push(bytes.as_ptr() as *mut c_void);
        }
        let bound = ptrs.len();
        for &(uid, offset) in plan.scratch {
            // The workspace holds at least `plan.workspace` bytes (checked by
            // `check_bindings`), and every offset lies below that.
            uids.push(uid);
            ptrs.push(workspace.cast::<u8>().wrapping_add(offset).cast::<c_void>());
        }
        let mut pack = Descriptor::<kind::VariantPack>::new()?;
        pack.set(attr::VARIANT_PACK_UNIQUE_IDS, &uids)?;
        // SAFETY: the pointers are borrowed by `self` ('a), point into the
        // plan's scalars, or into the workspace of this run at the plan's
        // scratch offsets; the pack is used only by the run that resolved
        // `workspace`, and rebuilt when any of them changes.
        unsafe {
            pack.set_device_ptrs(attr::VARIANT_PACK_DATA_POINTERS, &ptrs)?;
            pack.set_device_ptrs(attr::VARIANT_PACK_WORKSPACE, &[workspace])?;
        }
        pack.finalize()?;
        // The cache key: the bound and scalar pointers and the workspace (the
        // scratch pointers follow from the workspace).
        ptrs.truncate(bound);
        ptrs.push(workspace);
        self.packed_ptrs = ptrs;
        self.packed_for = Some(plan.id);
        self.packs_built = self.packs_built.saturating_add(1);
        let raw = pack.as_raw();
        self.pack = Some(pack);
        Ok(raw)
    }
}

/// What [`Bindings::pack`] needs of the plan it runs (the plan's own
/// fields, so this file does not depend on the plan's).
#[derive(Clone, Copy)]
pub(super) struct PackParts<'p> {
    /// By-value scalars: uid and the 8 bytes cuDNN reads.
    pub scalars: &'p [(i64, Box<[u8; 8]>)],
    /// Scratch tensors: uid and their offset into the workspace.
    pub scratch: &'p [(i64, usize)],
    /// The plan's process-unique id.
    pub id: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(a: usize) -> *mut c_void {
        a as *mut c_void
    }

    /// A handle whose workspace moves when it grows, as `Handle::workspace` does.
    struct FakeHandle {
        ptr: usize,
        bytes: usize,
        asks: usize,
    }
    impl FakeHandle {
        fn workspace(&mut self, need: usize) -> Result<*mut c_void> {
            self.asks += 1;
            if need > self.bytes {
                self.ptr += 0x10_0000;
                self.bytes = need;
            }
            Ok(p(self.ptr))
        }
    }

    #[test]
    fn unit_handle_workspace_is_looked_up_every_run() {
        // Forward needs 256 B, backward 4096 B, on one handle: the backward
        // reallocates, and the forward's next run must see the new pointer.
        let mut h = FakeHandle {
            ptr: 0x1000,
            bytes: 0,
            asks: 0,
        };
        let src = WorkspaceSource::Handle;
        let (fwd1, n) = src.resolve(256, |b| h.workspace(b)).unwrap();
        assert_eq!(n, 256);
        let (bwd, _) = src.resolve(4096, |b| h.workspace(b)).unwrap();
        assert_ne!(fwd1, bwd, "the backward grew the workspace");
        let (fwd2, _) = src.resolve(256, |b| h.workspace(b)).unwrap();
        assert_eq!(fwd2, bwd, "the forward's next run uses the live workspace");
        assert_eq!(h.asks, 3);
        // The pack built with fwd1 is stale for fwd2.
        let bound = [p(0x100), p(0x200)];
        let packed: Vec<_> = bound.iter().copied().chain([fwd1]).collect();
        assert!(!pack_is_current(
            Some(1),
            1,
            &packed,
            bound.iter().copied().chain([fwd2])
        ));
        assert!(pack_is_current(
            Some(1),
            1,
            &packed,
            bound.iter().copied().chain([fwd1])
        ));
    }

    #[test]
    fn unit_other_handle_gives_its_own_workspace() {
        let mut h1 = FakeHandle {
            ptr: 0x1000,
            bytes: 1 << 20,
            asks: 0,
        };
        let mut h2 = FakeHandle {
            ptr: 0x9000_0000,
            bytes: 1 << 20,
            asks: 0,
        };
        let src = WorkspaceSource::Handle;
        let (a, _) = src.resolve(64, |b| h1.workspace(b)).unwrap();
        let (b, _) = src.resolve(64, |b| h2.workspace(b)).unwrap();
        assert_eq!(a, p(0x1000));
        assert_eq!(
            b,
            p(0x9000_0000),
            "handle 2's run uses handle 2's workspace"
        );
    }

    #[test]
    fn unit_caller_workspace_is_kept_and_handle_not_asked() {
        let src = WorkspaceSource::Caller {
            ptr: p(0x4000),
            bytes: 512,
        };
        let mut asked = false;
        let r = src.resolve(256, |_| {
            asked = true;
            Ok(p(1))
        });
        assert_eq!(r.unwrap(), (p(0x4000), 512));
        assert!(!asked);
        // No workspace needed: the handle is not asked either.
        let r = WorkspaceSource::Handle.resolve(0, |_| {
            asked = true;
            Ok(p(1))
        });
        assert_eq!(r.unwrap(), (std::ptr::null_mut(), 0));
        assert!(!asked);
        assert!(!pack_is_current(Some(1), 1, &[], std::iter::empty()));
    }

    #[test]
    fn unit_pack_is_keyed_on_the_plan() {
        // Two plans sharing one IO signature (build_all, or two builds of one
        // graph) bind the same pointers; their scratch offsets differ, so a
        // pack built for plan 7 must not serve plan 8.
        let ptrs = [p(0x100), p(0x200), p(0x1000)];
        assert!(pack_is_current(Some(7), 7, &ptrs, ptrs.iter().copied()));
        assert!(!pack_is_current(Some(7), 8, &ptrs, ptrs.iter().copied()));
        assert!(!pack_is_current(None, 7, &ptrs, ptrs.iter().copied()));
    }
}
