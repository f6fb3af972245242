//! [`RnnPlan`]: an [`RnnDescriptor`] and a batch shape on a handle, with
//! the sizes cuDNN asks for (weight space, workspace, reserve), the
//! sequence lengths on the device, and the typed reserve buffer
//! [`RnnReserve`] that carries a training forward to its backward passes.

use std::fmt;

use super::config::{RnnCellMode, RnnInputMode};
use super::data::{RnnDataDescriptor, RnnDataLayout};
use super::descriptor::RnnDescriptor;
use crate::check::{self, cudnn_call};
use crate::dnn::ops::Float;
use crate::dnn::{Handle, TensorDescriptor};
use crate::error::{Error, Result};
use crate::runtime::{Device, DeviceBuffer, Stream};
use crate::sys::cudnn as dnn;

/// The reserve space of one training forward: written by
/// a training [`RnnPlan::forward`], read by [`RnnPlan::backward_data`], then
/// by [`RnnPlan::backward_weights`] (cuDNN's required order, which this
/// type enforces). Made by [`RnnPlan::alloc_reserve`].
pub struct RnnReserve {
    buf: DeviceBuffer<u8>,
    stage: ReserveStage,
    /// The plan whose training forward filled it (0: none).
    filled_by: u64,
    /// The stream of its last use (`None`: never used).
    last: Option<Stream>,
    /// Whether the use that set `stage` was captured into a CUDA graph
    /// (recorded, not run: the reserve does not hold what `stage` says
    /// until the graph is launched).
    captured: bool,
}

/// Identities of plans, so a reserve is only read by the plan that filled it.
static NEXT_PLAN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReserveStage {
    Empty,
    Forward,
    BackwardData,
}

impl fmt::Debug for RnnReserve {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RnnReserve")
            .field("bytes", &self.buf.len())
            .field("stage", &self.stage)
            .finish()
    }
}

impl RnnReserve {
    /// Before a use on `next`: order it after the last use when that was
    /// on another stream (`next` waits for everything queued there so
    /// far), and make `next` the last. The reserve is cuDNN's opaque
    /// scratch, read by the backward passes as the forward left it: a
    /// forward on one handle's stream and a backward on another's would
    /// otherwise race on it (a soundness audit: the crate treats cuDNN's
    /// scratch as possibly holding indices, as for workspaces).
    ///
    /// Returns whether this use is captured (`next` is being captured). A
    /// backward pass run eagerly on a reserve whose forward (or backward
    /// data) was captured is refused: that work has only been recorded,
    /// so cuDNN would read a reserve it never wrote.
    fn use_on(&mut self, next: &Stream, op: &str, stage_setter: bool) -> Result<bool> {
        let status = next.capture_status();
        // The legacy stream's implicit-capture answer (a blocking stream of
        // the device captures): cuDNN's launch would fail there untyped and
        // may invalidate that capture; refused typed, as dropout does.
        let implicit = matches!(&status, Err(Error::Cuda { code, .. })
            if *code == crate::sys::cudart::cudaError::cudaErrorStreamCaptureImplicit.0);
        let status = crate::runtime::implicit_is_capturing(status)?;
        if implicit {
            crate::runtime::capture_rule(
                op,
                status,
                &crate::runtime::Hazard::CapturedEvent("the RNN reserve"),
            )?;
        }
        let captured = status.is_capturing();
        captured_rule(self.captured, captured, stage_setter, self.stage)?;
        if let Some(last) = &self.last {
            next.order_resource_after(last, op, "the RNN reserve")?;
        }
        self.last = Some(next.clone());
        Ok(captured)
    }

    /// Bytes held.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether it holds nothing (an inference-sized plan).
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

/// Sizes in bytes a plan needs, as cuDNN reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct RnnSizes {
    /// The weight space (`cudnnGetRNNWeightSpaceSize`).
    pub weight_space: usize,
    /// Workspace of a training forward and the backward passes.
    pub workspace_training: usize,
    /// Reserve space of a training forward.
    pub reserve: usize,
    /// Workspace of an inference forward.
    pub workspace_inference: usize,
}

/// An RNN on one batch shape: descriptors for `x` (input), `y` (output),
/// `h` and `c` (states), the sizes, and the lengths on the handle's device.
/// Borrows the [`RnnDescriptor`] for `'r` (so, like the descriptor, it is
/// neither `Send` nor `Sync`). Making one asks cuDNN three sizes and copies
/// the lengths; each launch is then one cuDNN call.
pub struct RnnPlan<'r, 'd, T: Float> {
    rnn: &'r RnnDescriptor<'d, T>,
    x: RnnDataDescriptor<T>,
    y: RnnDataDescriptor<T>,
    h: TensorDescriptor<T>,
    c: TensorDescriptor<T>,
    dev_lengths: DeviceBuffer<i32>,
    sizes: RnnSizes,
    device: Device,
    id: u64,
}

impl<T: Float> fmt::Debug for RnnPlan<'_, '_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RnnPlan")
            .field("rnn", self.rnn)
            .field("x", &self.x)
            .field("y", &self.y)
            .field("sizes", &self.sizes)
            .finish()
    }
}

/// A reserve whose `stage` was set by captured work (`filled_captured`:
/// recorded, not run) may be read only by captured work; a training
/// forward (`stage_setter`) may always refill it.
///
/// # Errors
/// [`Error::InvalidArgument`] naming `reserve`.
fn captured_rule(
    filled_captured: bool,
    now_captured: bool,
    stage_setter: bool,
    stage: ReserveStage,
) -> Result<()> {
    if filled_captured && !now_captured && !stage_setter {
        return Err(Error::invalid(
            "reserve",
            "was filled by work captured into a CUDA graph, which has not run: run the \
             backward passes in the same capture, or fill the reserve with an eager training \
             forward",
            format!("{stage:?}"),
        ));
    }
    Ok(())
}

/// Whether a reserve at `stage` may be read by the pass that needs `need`:
/// backward data needs a fresh training forward (it writes the reserve, so
/// a second backward data would read its own intermediates), backward
/// weights a backward data after that forward (it may run again: it only
/// reads the reserve).
fn check_stage(stage: ReserveStage, need: ReserveStage) -> Result<()> {
    if stage == need {
        return Ok(());
    }
    let rule = match need {
        ReserveStage::BackwardData => {
            "must have been used by backward_data after the training forward"
        }
        _ => "must be filled by a training forward, and not yet used by backward_data",
    };
    Err(Error::invalid("reserve", rule, format!("{stage:?}")))
}

/// Check one optional buffer's length.
/// What [`RnnPlan::new`] adds to [`check_rnn_data`](super::check_rnn_data):
/// no sequence of length 0 (see [`RnnPlan::new`]).
pub(crate) fn check_plan_lengths(lengths: &[usize]) -> Result<()> {
    match lengths.iter().position(|&l| l == 0) {
        Some(i) => Err(Error::invalid(
            format!("lengths[{i}]"),
            "must be >= 1 in an RNN plan: cuDNN 9.19's cudnnRNNForward returned hy = 0 \
             for a sequence of length 0, where its final state is hx; drop the sequence \
             from the batch (its hy is its hx)",
            0,
        )),
        None => Ok(()),
    }
}

fn check_len(what: &str, need: usize, got: usize) -> Result<()> {
    if got < need {
        return Err(Error::mismatch(
            format!("{what} buffer length in elements"),
            format!(">= {need}"),
            got,
        ));
    }
    Ok(())
}

/// The states a pass reads or writes: `h` (hidden) and, for LSTM, `c`
/// (cell). `None` means zeros (inputs) or "not wanted" (outputs).
#[derive(Debug, Default)]
pub struct RnnStates<'a, T: Float> {
    /// The hidden state, `[layers * directions, batch, projection_size]`.
    pub h: Option<crate::runtime::DeviceSlice<'a, T>>,
    /// LSTM's cell state, `[layers * directions, batch, hidden_size]`.
    pub c: Option<crate::runtime::DeviceSlice<'a, T>>,
}

/// Written states (see [`RnnStates`]).
#[derive(Debug, Default)]
pub struct RnnStatesMut<'a, T: Float> {
    /// The hidden state.
    pub h: Option<crate::runtime::DeviceSliceMut<'a, T>>,
    /// LSTM's cell state.
    pub c: Option<crate::runtime::DeviceSliceMut<'a, T>>,
}

fn ptr<T: Float>(s: &Option<crate::runtime::DeviceSlice<'_, T>>) -> *const std::ffi::c_void {
    s.as_ref().map_or(std::ptr::null(), |s| s.as_raw())
}

fn ptr_mut<T: Float>(
    s: &mut Option<crate::runtime::DeviceSliceMut<'_, T>>,
) -> *mut std::ffi::c_void {
    s.as_mut().map_or(std::ptr::null_mut(), |s| s.as_raw_mut())
}

fn dev<T: Float>(s: &Option<crate::runtime::DeviceSlice<'_, T>>) -> Option<Device> {
    s.as_ref().and_then(|s| s.device())
}

fn dev_mut<T: Float>(s: &Option<crate::runtime::DeviceSliceMut<'_, T>>) -> Option<Device> {
    s.as_ref().and_then(|s| s.device())
}

impl<'r, 'd, T: Float> RnnPlan<'r, 'd, T> {
    /// Plan `rnn` for a batch of `lengths.len()` sequences of at most
    /// `max_seq_len` steps in `layout`: makes the data and state
    /// descriptors, asks cuDNN for the sizes and copies the lengths to the
    /// handle's device.
    ///
    /// Every sequence has at least one step: cuDNN 9.19's `cudnnRNNForward`
    /// gave a sequence of length 0 the final state `hy = 0` (first GPU
    /// run, H100), where the recurrence leaves it at `hx`; cuDNN documents
    /// nothing about a length of 0 in a batch (ONNX Runtime works around
    /// the same limitation of cuDNN's RNN by running such sequences with
    /// length 1 and masking the output). Drop such a sequence from the
    /// batch: its `hy` is its `hx`, its `y` all padding.
    ///
    /// # Errors
    /// [`check_rnn_data`](super::check_rnn_data)'s for the batch;
    /// [`Error::InvalidArgument`] naming `lengths[i]` for a length of 0;
    /// [`RnnInputMode::Skip`] with `input_size != hidden_size`; what cuDNN or
    /// the allocation reports.
    ///
    /// The padded steps of `y` and `dx` (unpacked layouts) are filled with
    /// 0 (what a PyTorch user sees there after `pad_packed_sequence`;
    /// PyTorch itself hands cuDNN packed sequences, so it never uses this
    /// fill); [`with_padding_fill`](Self::with_padding_fill) chooses
    /// another value.
    #[doc(alias = "cudnnGetRNNWeightSpaceSize")]
    #[doc(alias = "cudnnGetRNNTempSpaceSizes")]
    pub fn new(
        handle: &mut Handle,
        rnn: &'r RnnDescriptor<'d, T>,
        layout: RnnDataLayout,
        max_seq_len: usize,
        lengths: &[usize],
    ) -> Result<Self> {
        Self::with_padding_fill(handle, rnn, layout, max_seq_len, lengths, T::default())
    }

    /// As [`new`](Self::new), with `fill` written by cuDNN at the padded
    /// steps of `y` (forward) and `dx` (backward data) in an unpacked
    /// layout (the data descriptors' `paddingFill`,
    /// [`RnnDataDescriptor::with_padding_fill`]).
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn with_padding_fill(
        handle: &mut Handle,
        rnn: &'r RnnDescriptor<'d, T>,
        layout: RnnDataLayout,
        max_seq_len: usize,
        lengths: &[usize],
        fill: T,
    ) -> Result<Self> {
        check_plan_lengths(lengths)?;
        let cfg = *rnn.config();
        if cfg.input_mode == RnnInputMode::Skip && cfg.input_size != cfg.hidden_size {
            return Err(Error::invalid(
                "input_size",
                format!(
                    "must equal hidden_size ({}) with RnnInputMode::Skip",
                    cfg.hidden_size
                ),
                cfg.input_size,
            ));
        }
        let out = cfg
            .output_size()
            .checked_mul(cfg.direction.count())
            .ok_or_else(|| {
                Error::invalid(
                    "projection_size",
                    "times directions overflows",
                    cfg.projection_size,
                )
            })?;
        let x = RnnDataDescriptor::<T>::with_padding_fill(
            layout,
            max_seq_len,
            cfg.input_size,
            lengths,
            fill,
        )?;
        let y = RnnDataDescriptor::<T>::with_padding_fill(layout, max_seq_len, out, lengths, fill)?;
        let h = TensorDescriptor::<T>::packed(&cfg.state_shape(lengths.len(), false)?)?;
        let c = TensorDescriptor::<T>::packed(&cfg.state_shape(lengths.len(), true)?)?;
        let _on = handle.enter()?;
        let api = check::cudnn()?;
        let mut weight_space = 0usize;
        // SAFETY: live handle and descriptor; valid out-pointer.
        unsafe {
            cudnn_call!(
                api,
                cudnnGetRNNWeightSpaceSize(handle.as_raw(), rnn.as_raw(), &mut weight_space)
            )
        }?;
        let (mut wt, mut rt, mut wi, mut ri) = (0usize, 0usize, 0usize, 0usize);
        // SAFETY: live handle and descriptors; valid out-pointers.
        unsafe {
            cudnn_call!(
                api,
                cudnnGetRNNTempSpaceSizes(
                    handle.as_raw(),
                    rnn.as_raw(),
                    dnn::cudnnForwardMode_t::CUDNN_FWD_MODE_TRAINING,
                    x.as_raw(),
                    &mut wt,
                    &mut rt
                )
            )
        }?;
        // SAFETY: as above.
        unsafe {
            cudnn_call!(
                api,
                cudnnGetRNNTempSpaceSizes(
                    handle.as_raw(),
                    rnn.as_raw(),
                    dnn::cudnnForwardMode_t::CUDNN_FWD_MODE_INFERENCE,
                    x.as_raw(),
                    &mut wi,
                    &mut ri
                )
            )
        }?;
        let dev_lengths = DeviceBuffer::from_host(&x.lengths_i32())?;
        Ok(RnnPlan {
            rnn,
            x,
            y,
            h,
            c,
            dev_lengths,
            sizes: RnnSizes {
                weight_space,
                workspace_training: wt,
                reserve: rt,
                workspace_inference: wi,
            },
            device: handle.device(),
            id: NEXT_PLAN.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        })
    }

    /// The sizes cuDNN reported.
    pub fn sizes(&self) -> RnnSizes {
        self.sizes
    }

    /// Elements of `T` the weight space holds (rounded up).
    pub fn weight_len(&self) -> usize {
        self.sizes.weight_space.div_ceil(T::SIZE)
    }

    /// The input batch descriptor (`vector_size = input_size`).
    pub fn x_desc(&self) -> &RnnDataDescriptor<T> {
        &self.x
    }

    /// The output batch descriptor (`vector_size = projection_size * directions`).
    pub fn y_desc(&self) -> &RnnDataDescriptor<T> {
        &self.y
    }

    /// The hidden-state descriptor.
    pub fn h_desc(&self) -> &TensorDescriptor<T> {
        &self.h
    }

    /// The cell-state descriptor (LSTM).
    pub fn c_desc(&self) -> &TensorDescriptor<T> {
        &self.c
    }

    /// The RNN.
    pub fn rnn(&self) -> &'r RnnDescriptor<'d, T> {
        self.rnn
    }

    /// A reserve buffer for this plan's training passes, on the plan's
    /// (its handle's) device. A reserve filled by one plan's forward is
    /// refused by another plan's backward passes.
    ///
    /// # Errors
    /// The allocation's; the device cannot be made current.
    pub fn alloc_reserve(&self) -> Result<RnnReserve> {
        let _on = self.device.guard()?;
        Ok(RnnReserve {
            buf: DeviceBuffer::alloc(self.sizes.reserve)?,
            stage: ReserveStage::Empty,
            filled_by: 0,
            last: None,
            captured: false,
        })
    }

    fn check_states(&self, what: &str, h: Option<usize>, c: Option<usize>) -> Result<()> {
        if let Some(n) = h {
            check_len(&format!("{what} h"), self.h.element_count(), n)?;
        }
        if let Some(n) = c {
            if self.rnn.config().cell != RnnCellMode::Lstm {
                return Err(Error::invalid(
                    format!("{what} c"),
                    "only LSTM has a cell state",
                    format!("{:?}", self.rnn.config().cell),
                ));
            }
            check_len(&format!("{what} c"), self.c.element_count(), n)?;
        }
        Ok(())
    }

    fn check_owner(&self, reserve: &RnnReserve) -> Result<()> {
        if reserve.filled_by != self.id {
            return Err(Error::invalid(
                "reserve",
                "must have been filled by this plan's training forward",
                "another plan's reserve",
            ));
        }
        Ok(())
    }

    fn check_dropout_stream(&self, handle: &Handle) -> Result<()> {
        if let Some(d) = self.rnn.dropout()
            && d.last_stream() != handle.stream()
        {
            return Err(Error::invalid(
                "handle",
                "must run on the stream the RNN's dropout was last used on (its random state is ordered by stream)",
                format!("{:?}", handle.stream()),
            ));
        }
        Ok(())
    }

    /// Forward pass. `training`: `Some(reserve)` for a training forward
    /// (writes the reserve for the backward passes), `None` for inference.
    /// `hx`/`cx` of `None` are zeros; `hy`/`cy` of `None` are not written.
    /// In an unpacked layout the padded steps of `y` hold the plan's
    /// padding fill (0 unless planned
    /// [`with_padding_fill`](Self::with_padding_fill)), written by cuDNN.
    ///
    /// # Errors
    /// Buffer lengths ([`Error::Mismatch`]), a cell state for a non-LSTM,
    /// buffers on another device, a dropout used on another stream; what
    /// cuDNN reports; [`Error::CaptureUnsafe`] for a reserve last used on
    /// another stream while either stream is being captured, and a reserve
    /// filled by captured work read eagerly ([`Error::InvalidArgument`]).
    #[doc(alias = "cudnnRNNForward")]
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        handle: &mut Handle,
        x: crate::runtime::DeviceSlice<'_, T>,
        mut y: crate::runtime::DeviceSliceMut<'_, T>,
        weights: crate::runtime::DeviceSlice<'_, T>,
        hx: RnnStates<'_, T>,
        mut out: RnnStatesMut<'_, T>,
        training: Option<&mut RnnReserve>,
    ) -> Result<()> {
        check_len("x", self.x.len_required(), x.len())?;
        check_len("y", self.y.len_required(), y.len())?;
        check_len("weights", self.weight_len(), weights.len())?;
        self.check_states(
            "hx",
            hx.h.as_ref().map(|s| s.len()),
            hx.c.as_ref().map(|s| s.len()),
        )?;
        self.check_states(
            "hy",
            out.h.as_ref().map(|s| s.len()),
            out.c.as_ref().map(|s| s.len()),
        )?;
        self.check_dropout_stream(handle)?;
        let (mode, ws_bytes) = match &training {
            Some(_) => (
                dnn::cudnnForwardMode_t::CUDNN_FWD_MODE_TRAINING,
                self.sizes.workspace_training,
            ),
            None => (
                dnn::cudnnForwardMode_t::CUDNN_FWD_MODE_INFERENCE,
                self.sizes.workspace_inference,
            ),
        };
        let mut training = training;
        let (reserve_bytes, reserve_ptr, reserve_dev) = match training.as_mut() {
            Some(r) => {
                check_len("reserve (bytes)", self.sizes.reserve, r.buf.len())?;
                let dev = r.buf.device();
                (self.sizes.reserve, r.buf.as_slice_mut().as_raw_mut(), dev)
            }
            None => (0, std::ptr::null_mut(), None),
        };
        let _on = handle.launch(
            "rnn_forward",
            &[
                ("x", x.device()),
                ("y", y.device()),
                ("weights", weights.device()),
                ("hx", dev(&hx.h)),
                ("cx", dev(&hx.c)),
                ("hy", dev_mut(&out.h)),
                ("cy", dev_mut(&out.c)),
                ("reserve", reserve_dev),
                ("plan", Some(self.device)),
            ],
        )?;
        let api = check::cudnn()?;
        if training.is_some() && self.rnn.dropout().is_some() {
            // Captured only on the stream of the state's last use, without
            // recording its ordering event (see `Dropout::captured_use`).
            self.rnn.dropout().map_or(Ok(false), |d| {
                d.captured_use("RNN training forward", handle.stream())
            })?;
        }
        let stream = handle.stream().clone();
        let h = handle.as_raw();
        let mut ws = handle.workspace(ws_bytes)?;
        // After the workspace (its capture refusal first, before anything
        // is queued).
        let captured = match training.as_mut() {
            Some(r) => {
                let c = r.use_on(&stream, "RnnPlan::forward", true)?;
                // Until the call succeeds the reserve holds no stage: a
                // failed call may have written part of it.
                r.stage = ReserveStage::Empty;
                c
            }
            None => false,
        };
        // SAFETY: live handle and descriptors; every buffer holds at least
        // what its descriptor needs (checked above), outputs are exclusive
        // borrows, the reserve is exclusively borrowed, ordered after its
        // last use (`use_on`) and large enough, the
        // workspace holds `ws_bytes`; the device lengths belong to the plan.
        unsafe {
            cudnn_call!(
                api,
                cudnnRNNForward(
                    h,
                    self.rnn.as_raw(),
                    mode,
                    self.dev_lengths.as_slice().as_ptr(),
                    self.x.as_raw(),
                    x.as_raw(),
                    self.y.as_raw(),
                    y.as_raw_mut(),
                    self.h.as_raw(),
                    ptr(&hx.h),
                    ptr_mut(&mut out.h),
                    self.c.as_raw(),
                    ptr(&hx.c),
                    ptr_mut(&mut out.c),
                    self.sizes.weight_space,
                    weights.as_raw(),
                    ws_bytes,
                    ws.as_raw_mut(),
                    reserve_bytes,
                    reserve_ptr
                )
            )
        }?;
        if let Some(r) = training {
            r.stage = ReserveStage::Forward;
            r.filled_by = self.id;
            r.captured = captured;
            // A training forward advanced the dropout's random state on
            // this stream: make it the state's last use, so a later
            // dropout op on another stream (or the dropout's drop) waits
            // for it.
            if let Some(d) = self.rnn.dropout() {
                d.used_by_rnn(handle.stream())?;
            }
        }
        Ok(())
    }

    /// Backward data: `dx`, `dhx`, `dcx` from `dy`, `dhy`, `dcy`, after a
    /// training [`forward`](Self::forward) that filled `reserve` (with the
    /// same `y`, `hx`, `cx` and weights). cuDNN writes the reserve here, so
    /// each training forward takes one backward data. In an unpacked
    /// layout the padded steps of `dx` hold the plan's padding fill (0
    /// unless planned with another), written by cuDNN.
    ///
    /// # Errors
    /// As [`forward`](Self::forward); a reserve no training forward filled,
    /// or one a backward data already used.
    #[doc(alias = "cudnnRNNBackwardData_v8")]
    #[allow(clippy::too_many_arguments)]
    pub fn backward_data(
        &self,
        handle: &mut Handle,
        y: crate::runtime::DeviceSlice<'_, T>,
        dy: crate::runtime::DeviceSlice<'_, T>,
        mut dx: crate::runtime::DeviceSliceMut<'_, T>,
        weights: crate::runtime::DeviceSlice<'_, T>,
        hx: RnnStates<'_, T>,
        dhy: RnnStates<'_, T>,
        mut dhx: RnnStatesMut<'_, T>,
        reserve: &mut RnnReserve,
    ) -> Result<()> {
        check_len("y", self.y.len_required(), y.len())?;
        check_len("dy", self.y.len_required(), dy.len())?;
        check_len("dx", self.x.len_required(), dx.len())?;
        check_len("weights", self.weight_len(), weights.len())?;
        self.check_states(
            "hx",
            hx.h.as_ref().map(|s| s.len()),
            hx.c.as_ref().map(|s| s.len()),
        )?;
        self.check_states(
            "dhy",
            dhy.h.as_ref().map(|s| s.len()),
            dhy.c.as_ref().map(|s| s.len()),
        )?;
        self.check_states(
            "dhx",
            dhx.h.as_ref().map(|s| s.len()),
            dhx.c.as_ref().map(|s| s.len()),
        )?;
        check_len("reserve (bytes)", self.sizes.reserve, reserve.buf.len())?;
        check_stage(reserve.stage, ReserveStage::Forward)?;
        self.check_owner(reserve)?;
        let _on = handle.launch(
            "rnn_backward_data",
            &[
                ("y", y.device()),
                ("dy", dy.device()),
                ("dx", dx.device()),
                ("weights", weights.device()),
                ("hx", dev(&hx.h)),
                ("cx", dev(&hx.c)),
                ("dhy", dev(&dhy.h)),
                ("dcy", dev(&dhy.c)),
                ("dhx", dev_mut(&dhx.h)),
                ("dcx", dev_mut(&dhx.c)),
                ("reserve", reserve.buf.device()),
                ("plan", Some(self.device)),
            ],
        )?;
        let api = check::cudnn()?;
        let h = handle.as_raw();
        let ws_bytes = self.sizes.workspace_training;
        let stream = handle.stream().clone();
        let mut ws = handle.workspace(ws_bytes)?;
        let captured = reserve.use_on(&stream, "RnnPlan::backward_data", false)?;
        // No stage until the call succeeds (it rewrites the reserve).
        reserve.stage = ReserveStage::Empty;
        let reserve_ptr = reserve.buf.as_slice_mut().as_raw_mut();
        // SAFETY: as in `forward`; `dx`, `dhx`, `dcx` and the reserve are
        // exclusive borrows.
        unsafe {
            cudnn_call!(
                api,
                cudnnRNNBackwardData_v8(
                    h,
                    self.rnn.as_raw(),
                    self.dev_lengths.as_slice().as_ptr(),
                    self.y.as_raw(),
                    y.as_raw(),
                    dy.as_raw(),
                    self.x.as_raw(),
                    dx.as_raw_mut(),
                    self.h.as_raw(),
                    ptr(&hx.h),
                    ptr(&dhy.h),
                    ptr_mut(&mut dhx.h),
                    self.c.as_raw(),
                    ptr(&hx.c),
                    ptr(&dhy.c),
                    ptr_mut(&mut dhx.c),
                    self.sizes.weight_space,
                    weights.as_raw(),
                    ws_bytes,
                    ws.as_raw_mut(),
                    self.sizes.reserve,
                    reserve_ptr
                )
            )
        }?;
        reserve.stage = ReserveStage::BackwardData;
        reserve.captured = captured;
        Ok(())
    }

    /// Backward weights: adds the weight gradient to `dweights` (cuDNN's
    /// `CUDNN_WGRAD_MODE_ADD`: zero it first for a fresh gradient), after
    /// [`backward_data`](Self::backward_data) on the same reserve.
    ///
    /// # Errors
    /// As [`forward`](Self::forward); a reserve backward data has not used.
    #[doc(alias = "cudnnRNNBackwardWeights_v8")]
    pub fn backward_weights(
        &self,
        handle: &mut Handle,
        x: crate::runtime::DeviceSlice<'_, T>,
        hx: Option<crate::runtime::DeviceSlice<'_, T>>,
        y: crate::runtime::DeviceSlice<'_, T>,
        mut dweights: crate::runtime::DeviceSliceMut<'_, T>,
        reserve: &mut RnnReserve,
    ) -> Result<()> {
        check_len("x", self.x.len_required(), x.len())?;
        check_len("y", self.y.len_required(), y.len())?;
        check_len("dweights", self.weight_len(), dweights.len())?;
        self.check_states("hx", hx.as_ref().map(|s| s.len()), None)?;
        check_len("reserve (bytes)", self.sizes.reserve, reserve.buf.len())?;
        check_stage(reserve.stage, ReserveStage::BackwardData)?;
        self.check_owner(reserve)?;
        let _on = handle.launch(
            "rnn_backward_weights",
            &[
                ("x", x.device()),
                ("hx", dev(&hx)),
                ("y", y.device()),
                ("dweights", dweights.device()),
                ("reserve", reserve.buf.device()),
                ("plan", Some(self.device)),
            ],
        )?;
        let api = check::cudnn()?;
        let h = handle.as_raw();
        let ws_bytes = self.sizes.workspace_training;
        let stream = handle.stream().clone();
        let mut ws = handle.workspace(ws_bytes)?;
        reserve.use_on(&stream, "RnnPlan::backward_weights", false)?;
        let reserve_ptr = reserve.buf.as_slice_mut().as_raw_mut();
        // SAFETY: as in `forward`; `dweights` and the reserve are exclusive.
        unsafe {
            cudnn_call!(
                api,
                cudnnRNNBackwardWeights_v8(
                    h,
                    self.rnn.as_raw(),
                    dnn::cudnnWgradMode_t::CUDNN_WGRAD_MODE_ADD,
                    self.dev_lengths.as_slice().as_ptr(),
                    self.x.as_raw(),
                    x.as_raw(),
                    self.h.as_raw(),
                    ptr(&hx),
                    self.y.as_raw(),
                    y.as_raw(),
                    self.sizes.weight_space,
                    dweights.as_raw_mut(),
                    ws_bytes,
                    ws.as_raw_mut(),
                    self.sizes.reserve,
                    reserve_ptr
                )
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// cuDNN's order: forward, one backward data, then backward weights
    /// (again if wanted); anything else is a typed error naming `reserve`.
    #[test]
    fn unit_reserve_order() {
        use ReserveStage::*;
        assert!(check_stage(Forward, Forward).is_ok());
        assert!(check_stage(BackwardData, BackwardData).is_ok());
        for (stage, need) in [
            (Empty, Forward),
            (BackwardData, Forward),
            (Empty, BackwardData),
            (Forward, BackwardData),
        ] {
            let e = check_stage(stage, need).unwrap_err();
            assert!(
                matches!(&e, Error::InvalidArgument { arg, .. } if arg == "reserve"),
                "{stage:?} for {need:?}: {e}"
            );
        }
    }

    /// A reserve whose stage was set by captured work is read only by
    /// captured work (a review found an eager backward after a captured
    /// forward read a reserve cuDNN never wrote); a training forward may
    /// always refill it. Every combination, by hand.
    #[test]
    fn unit_captured_fill_is_read_only_in_a_capture() {
        for filled in [false, true] {
            for now in [false, true] {
                for setter in [false, true] {
                    let r = captured_rule(filled, now, setter, ReserveStage::Forward);
                    let refused = filled && !now && !setter;
                    assert_eq!(r.is_err(), refused, "{filled} {now} {setter}");
                    if let Err(e) = r {
                        assert!(
                            matches!(&e, Error::InvalidArgument { arg, .. } if arg == "reserve"),
                            "{e}"
                        );
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod plan_length_tests {
    use super::check_plan_lengths;
    use crate::error::Error;

    #[test]
    fn a_zero_length_is_refused_by_index() {
        assert!(check_plan_lengths(&[4, 3, 1]).is_ok());
        match check_plan_lengths(&[4, 0, 2]) {
            Err(Error::InvalidArgument { arg, value, .. }) => {
                assert_eq!(arg, "lengths[1]");
                assert_eq!(value, "0");
            }
            other => panic!("{other:?}"),
        }
    }

    proptest::proptest! {
        #[test]
        fn refused_exactly_when_a_length_is_zero(
            lens in proptest::collection::vec(0usize..4, 1..8)
        ) {
            let first_zero = lens.iter().position(|&l| l == 0);
            match (check_plan_lengths(&lens), first_zero) {
                (Ok(()), None) => {}
                (Err(Error::InvalidArgument { arg, .. }), Some(i)) => {
                    proptest::prop_assert_eq!(arg, format!("lengths[{i}]"));
                }
                (r, z) => proptest::prop_assert!(false, "{:?} for {:?} (first zero {:?})", r, lens, z),
            }
        }
    }
}
