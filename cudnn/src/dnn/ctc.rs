//! CTC loss through cuDNN (`cudnnCTCLoss_v8`): [`CtcPlan`] checks a batch
//! of labels and lengths, keeps them on the device, sizes the workspace and
//! computes the per-sequence losses and the gradient with respect to the
//! logits.
//!
//! cuDNN's conventions, which this module checks before cuDNN sees a value:
//! - `logits`: `[max_time, batch, alphabet]` `f32`, time-major, packed,
//!   **unnormalized** (cuDNN applies the softmax itself:
//!   `CUDNN_LOSS_NORMALIZATION_SOFTMAX`; log-probabilities work too, as the
//!   softmax of a log-softmax is the same distribution); the gradient is
//!   with respect to them;
//! - the blank is symbol 0: every label is in `1..alphabet`;
//! - labels are concatenated; each sequence has at most
//!   [`CTC_MAX_LABEL_LENGTH`] (255) labels;
//! - each input length is at most `max_time`;
//! - `max_time * batch * alphabet` is at most `i32::MAX`.
//!
//! An input length of 0 is refused on every version, whatever the labels:
//! cuDNN documents nothing about a sample of zero steps (its
//! out-of-bounds rule is `L + R > T`, so `T = 0`, `L = 0` is not "out of
//! bounds" and `CUDNN_CTC_ZERO_OOB_GRADIENTS` says nothing about it), and
//! PyTorch never sends cuDNN one. Such a sample's loss and gradient are 0
//! by definition (no labels: probability 1; labels: none fit, and
//! `zero_infinity` makes it 0), so the caller can drop it from the batch.
//!
//! A sample whose labels need more steps than its input has (their count
//! plus one per pair of equal neighbours,
//! [`required_steps`](crate::reference::ctc::required_steps)) has no valid
//! alignment. On cuDNN 9 such a sample is accepted as PyTorch's
//! `zero_infinity` treats it: its loss is 0 (set by [`CtcPlan::run`]) and
//! its gradient 0 (cuDNN 9's `CUDNN_CTC_ZERO_OOB_GRADIENTS`, which the
//! descriptor sets), so one bad sample no longer refuses the batch; only a
//! label sequence longer than its input is still refused (PyTorch sends
//! cuDNN only samples with `label length <= input length`, having seen
//! illegal memory accesses otherwise). cuDNN 8.9 has no such mode: there
//! [`check_ctc`] refuses every such sample.
//!
//! The gradient is 0 past each sequence's input length: when a sequence is
//! shorter than `max_time`, [`CtcPlan::run`] zeroes the gradient on the
//! handle's stream before cuDNN writes it (cuDNN does not document those
//! frames).
//!
//! The oracle is [`crate::reference::ctc`].

use std::fmt;

use crate::check::{self, cudnn_call};
use crate::dnn::{Handle, TensorDescriptor};
use crate::error::{Error, Result};
use crate::runtime::{Device, DeviceBuffer, DeviceSlice, DeviceSliceMut};
use crate::sys::cudart::Version;
use crate::sys::cudnn as dnn;

/// Owns a `cudnnCTCLossDescriptor_t`.
struct RawCtc(std::ptr::NonNull<dnn::cudnnCTCLossStruct>);

// SAFETY: a cuDNN descriptor is a plain host structure, not tied to a
// handle, stream, device or thread; moving ownership is sound.
unsafe impl Send for RawCtc {}

impl RawCtc {
    fn create() -> Result<Self> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer for the new descriptor.
        unsafe { cudnn_call!(check::cudnn()?, cudnnCreateCTCLossDescriptor(&mut raw)) }?;
        std::ptr::NonNull::new(raw).map(RawCtc).ok_or_else(|| {
            Error::invalid(
                "cudnnCreateCTCLossDescriptor output",
                "must not be null",
                "null",
            )
        })
    }

    fn as_ptr(&self) -> dnn::cudnnCTCLossDescriptor_t {
        self.0.as_ptr()
    }
}

impl Drop for RawCtc {
    fn drop(&mut self) {
        if let Ok(api) = check::cudnn() {
            // SAFETY: created by cudnnCreateCTCLossDescriptor, owned, destroyed once.
            let _ = unsafe { api.cudnnDestroyCTCLossDescriptor(self.0.as_ptr()) };
        }
    }
}

/// The most labels one sequence may have: 255. cuDNN documents 256, but
/// PyTorch sends cuDNN only label lengths below 256 (and sets the
/// descriptor's maximum to 255); this crate keeps that proven bound until
/// a GPU shows 256 is safe.
pub const CTC_MAX_LABEL_LENGTH: usize = 255;

/// The first cuDNN whose CTC descriptor has a gradient mode
/// (`cudnnCTCGradMode_t`): from it on, samples without a valid alignment
/// are accepted (loss 0, gradient 0; see [`check_ctc`]).
pub const CTC_ZERO_OOB_VERSION: Version = Version::new(9, 0, 0);

/// cuDNN's CTC algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CtcAlgo {
    /// Same result every run (`CUDNN_CTC_LOSS_ALGO_DETERMINISTIC`).
    #[default]
    Deterministic,
    /// May differ in the last bits between runs
    /// (`CUDNN_CTC_LOSS_ALGO_NON_DETERMINISTIC`).
    NonDeterministic,
}

impl CtcAlgo {
    /// The cuDNN constant.
    pub fn to_raw(self) -> dnn::cudnnCTCLossAlgo_t {
        match self {
            CtcAlgo::Deterministic => dnn::cudnnCTCLossAlgo_t::CUDNN_CTC_LOSS_ALGO_DETERMINISTIC,
            CtcAlgo::NonDeterministic => {
                dnn::cudnnCTCLossAlgo_t::CUDNN_CTC_LOSS_ALGO_NON_DETERMINISTIC
            }
        }
    }
}

/// Steps a labelling needs: its length plus one for every pair of equal
/// neighbours (a blank must separate them).
pub(crate) fn required_steps(labels: &[usize]) -> usize {
    labels.len() + labels.windows(2).filter(|w| w[0] == w[1]).count()
}

/// Check a CTC batch against cuDNN's conventions for the loaded cuDNN
/// `version` ([`Handle::library_version`]): the blank is symbol 0, every
/// label is in `1..alphabet`; the label lengths add up to `labels.len()`,
/// each at most [`CTC_MAX_LABEL_LENGTH`]; each input length is at most
/// `max_time`; `max_time * batch * alphabet` is at most `i32::MAX`.
/// Returns the longest label sequence.
///
/// Every input length is at least 1, on every version: cuDNN documents
/// nothing about a sample of zero steps (see the module docs); its
/// loss and gradient are 0 by definition, so drop it from the batch.
///
/// Every label length is at least 1, on every version: cuDNN documents
/// nothing about an empty labelling, and cuDNN 9.19 returned the loss -0
/// for one (first GPU run, H100) where the loss is `-sum_t log p_t(blank)`.
///
/// A sample without a valid alignment (its input length below what its
/// labels need, their count plus one per pair of equal neighbours): from
/// [`CTC_ZERO_OOB_VERSION`] (cuDNN 9) on it is accepted, as long as its
/// label count is at most its input length (what PyTorch sends cuDNN), and
/// [`CtcPlan`] gives it loss 0 and gradient 0 (PyTorch's `zero_infinity`);
/// on cuDNN 8.9 it is refused.
///
/// # Errors
/// [`Error::InvalidArgument`] or [`Error::Mismatch`] naming the argument
/// (`labels[4]`, `input_lengths[1]`, `label_lengths[2]`) and the value.
pub fn check_ctc(
    version: Version,
    max_time: usize,
    alphabet: usize,
    labels: &[usize],
    label_lengths: &[usize],
    input_lengths: &[usize],
) -> Result<usize> {
    let batch = input_lengths.len();
    if batch == 0 {
        return Err(Error::invalid(
            "input_lengths",
            "must hold one length per sequence (batch >= 1)",
            0,
        ));
    }
    if label_lengths.len() != batch {
        return Err(Error::mismatch(
            "label_lengths length (one per sequence)",
            batch,
            label_lengths.len(),
        ));
    }
    if alphabet < 2 {
        return Err(Error::invalid(
            "alphabet",
            "must be >= 2 (the blank 0 and a label)",
            alphabet,
        ));
    }
    if max_time == 0 {
        return Err(Error::invalid("max_time", "must be >= 1", 0));
    }
    let count = max_time
        .checked_mul(batch)
        .and_then(|n| n.checked_mul(alphabet));
    if count.is_none_or(|n| n > i32::MAX as usize) {
        return Err(Error::invalid(
            "max_time * batch * alphabet",
            "must be at most i32::MAX",
            format!("{max_time} * {batch} * {alphabet}"),
        ));
    }
    let total = label_lengths
        .iter()
        .try_fold(0usize, |a, &l| a.checked_add(l));
    if total != Some(labels.len()) {
        return Err(Error::mismatch(
            "labels length (the sum of label_lengths)",
            total.map_or_else(|| "overflow".to_string(), |t| t.to_string()),
            labels.len(),
        ));
    }
    for (i, &l) in labels.iter().enumerate() {
        if l == 0 || l >= alphabet {
            return Err(Error::invalid(
                format!("labels[{i}]"),
                format!("must be in 1..{alphabet} (0 is the blank)"),
                l,
            ));
        }
    }
    let zero_oob = version >= CTC_ZERO_OOB_VERSION;
    let mut start = 0usize;
    let mut longest = 0usize;
    for b in 0..batch {
        let ll = label_lengths[b];
        if ll > CTC_MAX_LABEL_LENGTH {
            return Err(Error::invalid(
                format!("label_lengths[{b}]"),
                format!(
                    "sequence {b} must have at most {CTC_MAX_LABEL_LENGTH} labels (fewer than 256, \
                     as PyTorch sends cuDNN)"
                ),
                ll,
            ));
        }
        longest = longest.max(ll);
        let t = input_lengths[b];
        if t > max_time {
            return Err(Error::invalid(
                format!("input_lengths[{b}]"),
                format!("must be at most max_time ({max_time})"),
                t,
            ));
        }
        if t == 0 {
            return Err(Error::invalid(
                format!("input_lengths[{b}]"),
                format!(
                    "must be >= 1 on every cuDNN version (cuDNN documents nothing about a \
                     sample of zero steps); sequence {b}'s loss and gradient are 0 by \
                     definition: drop it from the batch"
                ),
                t,
            ));
        }
        if ll == 0 {
            return Err(Error::invalid(
                format!("label_lengths[{b}]"),
                format!(
                    "must be >= 1: for an empty labelling cuDNN 9.19 returns the loss -0 \
                     (first GPU run, H100), where the loss is minus the sum of the log \
                     probabilities of blank over sequence {b}'s {t} steps (> 0), and cuDNN \
                     documents nothing about a labelling of length 0: compute that sample \
                     on the host (log-softmax of the blank) and drop it from the batch"
                ),
                ll,
            ));
        }
        // `start + ll <= labels.len()`: the lengths add up (checked).
        let need = required_steps(&labels[start..start + ll]);
        start += ll;
        if t >= need {
            continue;
        }
        if !zero_oob {
            return Err(Error::invalid(
                format!("input_lengths[{b}]"),
                format!(
                    "must be at least {need} (the {ll} labels and a blank between each pair \
                     of repeats) on cuDNN {version}: only cuDNN 9 zeroes the loss and \
                     gradient of a sample without a valid alignment"
                ),
                t,
            ));
        }
        if ll > t {
            return Err(Error::invalid(
                format!("input_lengths[{b}]"),
                format!(
                    "must be at least the {ll} labels of sequence {b} (PyTorch sends cuDNN no \
                     longer labelling: cuDNN has read out of bounds there)"
                ),
                t,
            ));
        }
    }
    Ok(longest)
}

/// The samples [`check_ctc`] accepted without a valid alignment (input
/// length below what the labels need; it refuses a length of 0): their
/// loss is set to 0.
fn zeroed_samples(
    labels: &[usize],
    label_lengths: &[usize],
    input_lengths: &[usize],
) -> Vec<usize> {
    let mut start = 0usize;
    let mut out = Vec::new();
    for (b, (&ll, &t)) in label_lengths.iter().zip(input_lengths).enumerate() {
        // Checked by `check_ctc`: the lengths add up to labels.len().
        let lab = labels.get(start..start.saturating_add(ll)).unwrap_or(&[]);
        start = start.saturating_add(ll);
        if t < required_steps(lab) {
            out.push(b);
        }
    }
    out
}

/// Ascending sample indices merged into runs of consecutive ones, so a
/// run zeroes them with one memset per run instead of one per sample.
fn index_ranges(indices: &[usize]) -> Vec<std::ops::Range<usize>> {
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    for &b in indices {
        match out.last_mut() {
            Some(r) if r.end == b => r.end += 1,
            // `b < batch`, so `b + 1` does not overflow.
            _ => out.push(b..b + 1),
        }
    }
    out
}

/// A planned CTC loss: the checked batch on the device, the descriptors
/// and the workspace size.
///
/// `logits` are `[max_time, batch, alphabet]` `f32`, time-major, packed and
/// **unnormalized**: cuDNN applies the softmax itself
/// (`CUDNN_LOSS_NORMALIZATION_SOFTMAX`; log-probabilities work too, the
/// softmax of a log-softmax being the same distribution), and the gradient
/// is with respect to them, 0 past each input length. The
/// labels are concatenated (see [`check_ctc`]). The oracle is
/// [`crate::reference::ctc`].
pub struct CtcPlan {
    raw: RawCtc,
    algo: CtcAlgo,
    logits: TensorDescriptor<f32>,
    labels: DeviceBuffer<i32>,
    label_lengths: DeviceBuffer<i32>,
    input_lengths: DeviceBuffer<i32>,
    batch: usize,
    /// Some input length is below `max_time` (frames cuDNN does not
    /// document are zeroed before each run).
    short: bool,
    /// Samples without a valid alignment (cuDNN 9 only), as runs of
    /// consecutive indices: their cost is set to 0 after each run, one
    /// memset per run.
    zeroed: Vec<std::ops::Range<usize>>,
    workspace: usize,
    device: Device,
}

impl fmt::Debug for CtcPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CtcPlan")
            .field("algo", &self.algo)
            .field("logits", &self.logits.shape())
            .field("workspace", &self.workspace)
            .finish()
    }
}

/// Set a CTC loss descriptor as [`CtcPlan`] does for the loaded cuDNN
/// (`f32`, softmax normalization; on cuDNN 9 through
/// `cudnnSetCTCLossDescriptor_v9` with `CUDNN_CTC_ZERO_OOB_GRADIENTS`, on
/// 8.9 through the `_v8` call with mode 0) with `max_label_length`, and
/// read it back the same way: `(compType, normMode, gradMode,
/// maxLabelLength)`. Host only; the host tier's round trip.
///
/// # Errors
/// `max_label_length` over [`CTC_MAX_LABEL_LENGTH`]; what cuDNN reports.
#[doc(hidden)]
pub fn ctc_descriptor_round_trip(max_label_length: usize) -> Result<(u32, u32, u32, i32)> {
    let version = Handle::library_version()?;
    let raw = make_descriptor(max_label_length, version)?;
    let mut dt = dnn::cudnnDataType_t(0);
    let mut norm = dnn::cudnnLossNormalizationMode_t(0);
    let mut m = 0i32;
    let grad = if version >= CTC_ZERO_OOB_VERSION {
        let mut grad = dnn::cudnnCTCGradMode_t(u32::MAX);
        // SAFETY: live descriptor; valid out-pointers.
        unsafe {
            cudnn_call!(
                check::cudnn()?,
                cudnnGetCTCLossDescriptor_v9(raw.as_ptr(), &mut dt, &mut norm, &mut grad, &mut m)
            )
        }?;
        grad.0
    } else {
        let mut grad = dnn::cudnnNanPropagation_t(u32::MAX);
        // SAFETY: live descriptor; valid out-pointers.
        unsafe {
            cudnn_call!(
                check::cudnn()?,
                cudnnGetCTCLossDescriptor_v8(raw.as_ptr(), &mut dt, &mut norm, &mut grad, &mut m)
            )
        }?;
        grad.0
    };
    Ok((dt.0, norm.0, grad, m))
}

fn make_descriptor(max_label_length: usize, version: Version) -> Result<RawCtc> {
    if max_label_length > CTC_MAX_LABEL_LENGTH {
        return Err(Error::invalid(
            "max_label_length",
            format!("must be at most {CTC_MAX_LABEL_LENGTH}"),
            max_label_length,
        ));
    }
    // At most 255: fits.
    let m = max_label_length as i32;
    let raw = RawCtc::create()?;
    let api = check::cudnn()?;
    if version >= CTC_ZERO_OOB_VERSION {
        // SAFETY: live descriptor; constants of the bindings; the length
        // fits. ZERO_OOB: a sample without a valid alignment gets a zero
        // gradient (check_ctc lets such samples through on cuDNN 9 only).
        unsafe {
            cudnn_call!(
                api,
                cudnnSetCTCLossDescriptor_v9(
                    raw.as_ptr(),
                    dnn::cudnnDataType_t::CUDNN_DATA_FLOAT,
                    dnn::cudnnLossNormalizationMode_t::CUDNN_LOSS_NORMALIZATION_SOFTMAX,
                    dnn::cudnnCTCGradMode_t::CUDNN_CTC_ZERO_OOB_GRADIENTS,
                    m
                )
            )
        }?;
    } else {
        // SAFETY: live descriptor; constants of the bindings; the length
        // fits. cuDNN 8.9 has no gradient mode; check_ctc refuses samples
        // without a valid alignment there.
        unsafe {
            cudnn_call!(
                api,
                cudnnSetCTCLossDescriptor_v8(
                    raw.as_ptr(),
                    dnn::cudnnDataType_t::CUDNN_DATA_FLOAT,
                    dnn::cudnnLossNormalizationMode_t::CUDNN_LOSS_NORMALIZATION_SOFTMAX,
                    dnn::cudnnNanPropagation_t::CUDNN_NOT_PROPAGATE_NAN,
                    m
                )
            )
        }?;
    }
    Ok(raw)
}

fn to_i32(v: &[usize]) -> Vec<i32> {
    // Every value was checked to fit (labels < alphabet <= i32::MAX,
    // lengths <= max_time <= i32::MAX).
    v.iter()
        .map(|&x| i32::try_from(x).unwrap_or(i32::MAX))
        .collect()
}

impl CtcPlan {
    /// Check the batch ([`check_ctc`]), copy labels and lengths to the
    /// handle's device, and ask cuDNN for the workspace.
    ///
    /// # Errors
    /// The check's errors (before anything else); what cuDNN or the
    /// allocations report.
    #[doc(alias = "cudnnGetCTCLossWorkspaceSize_v8")]
    pub fn new(
        handle: &mut Handle,
        algo: CtcAlgo,
        max_time: usize,
        alphabet: usize,
        labels: &[usize],
        label_lengths: &[usize],
        input_lengths: &[usize],
    ) -> Result<Self> {
        let version = Handle::library_version()?;
        let longest = check_ctc(
            version,
            max_time,
            alphabet,
            labels,
            label_lengths,
            input_lengths,
        )?;
        let batch = input_lengths.len();
        let raw = make_descriptor(longest.max(1), version)?;
        let logits = TensorDescriptor::<f32>::packed(&[max_time, batch, alphabet])?;
        let _on = handle.enter()?;
        let mut workspace = 0usize;
        // SAFETY: live handle and descriptors; valid out-pointer.
        unsafe {
            cudnn_call!(
                check::cudnn()?,
                cudnnGetCTCLossWorkspaceSize_v8(
                    handle.as_raw(),
                    algo.to_raw(),
                    raw.as_ptr(),
                    logits.as_raw(),
                    logits.as_raw(),
                    &mut workspace
                )
            )
        }?;
        // An empty label list still gets a valid device pointer.
        let lab = if labels.is_empty() {
            vec![0]
        } else {
            to_i32(labels)
        };
        Ok(CtcPlan {
            raw,
            algo,
            labels: DeviceBuffer::from_host(&lab)?,
            label_lengths: DeviceBuffer::from_host(&to_i32(label_lengths))?,
            input_lengths: DeviceBuffer::from_host(&to_i32(input_lengths))?,
            logits,
            batch,
            short: input_lengths.iter().any(|&l| l < max_time),
            zeroed: index_ranges(&zeroed_samples(labels, label_lengths, input_lengths)),
            workspace,
            device: handle.device(),
        })
    }

    /// The workspace cuDNN asked for, in bytes.
    pub fn workspace_size(&self) -> usize {
        self.workspace
    }

    /// The logits (and gradient) descriptor, `[max_time, batch, alphabet]`.
    pub fn logits_desc(&self) -> &TensorDescriptor<f32> {
        &self.logits
    }

    /// Losses (one per sequence, `costs[b] = -ln p`) and the gradient of
    /// their sum with respect to `logits` (same layout; 0 past each input
    /// length: when a sequence is shorter than `max_time`, the first
    /// `max_time * batch * alphabet` elements of `grad` are zeroed on the
    /// handle's stream first). A sample without a valid alignment (cuDNN 9
    /// only, see [`check_ctc`]) gets loss 0 (written on the handle's stream
    /// after cuDNN) and gradient 0 (cuDNN's `CUDNN_CTC_ZERO_OOB_GRADIENTS`).
    ///
    /// # Errors
    /// Buffer lengths ([`Error::Mismatch`]); buffers on another device;
    /// what cuDNN reports.
    #[doc(alias = "cudnnCTCLoss_v8")]
    pub fn run(
        &self,
        handle: &mut Handle,
        logits: DeviceSlice<'_, f32>,
        mut costs: DeviceSliceMut<'_, f32>,
        mut grad: DeviceSliceMut<'_, f32>,
    ) -> Result<()> {
        let n = self.logits.element_count();
        for (what, got, need) in [
            ("logits", logits.len(), n),
            ("grad", grad.len(), n),
            ("costs", costs.len(), self.batch),
        ] {
            if got < need {
                return Err(Error::mismatch(
                    format!("{what} buffer length in elements"),
                    format!(">= {need}"),
                    got,
                ));
            }
        }
        let _on = handle.launch(
            "ctc_loss",
            &[
                ("logits", logits.device()),
                ("costs", costs.device()),
                ("grad", grad.device()),
                ("plan", Some(self.device)),
            ],
        )?;
        if self.short {
            grad.slice_mut(..n)?.memset_async(0, handle.stream())?;
        }
        let api = check::cudnn()?;
        let h = handle.as_raw();
        let bytes = self.workspace;
        let mut ws = handle.workspace(bytes)?;
        // SAFETY: live handle and descriptors; `logits` and `grad` hold the
        // descriptor's elements, `costs` one per sequence (checked), outputs
        // exclusive; labels and lengths are the plan's device buffers,
        // checked at planning; the workspace holds `bytes`.
        let ran = unsafe {
            cudnn_call!(
                api,
                cudnnCTCLoss_v8(
                    h,
                    self.algo.to_raw(),
                    self.raw.as_ptr(),
                    self.logits.as_raw(),
                    logits.as_raw(),
                    self.labels.as_slice().as_ptr(),
                    self.label_lengths.as_slice().as_ptr(),
                    self.input_lengths.as_slice().as_ptr(),
                    costs.as_raw_mut(),
                    self.logits.as_raw(),
                    grad.as_raw_mut(),
                    bytes,
                    ws.as_raw_mut()
                )
            )
        };
        ran?;
        // cuDNN does not document the cost of a sample without a valid
        // alignment; PyTorch's zero_infinity (and the reference's
        // `ctc_loss_zero_infinity`) make it 0. Ordered after the call on
        // the same stream; every range ends at most at `batch <=
        // costs.len()` (checked above). One memset per run of consecutive
        // samples.
        for r in &self.zeroed {
            costs
                .slice_mut(r.clone())?
                .memset_async(0, handle.stream())?;
        }
        Ok(())
    }
}

#[cfg(all(test, feature = "reference"))]
mod tests {
    use super::*;
    use crate::reference::ctc::{CtcProblem, ctc_loss, ctc_loss_zero_infinity};

    const V9: Version = Version::new(9, 19, 0);
    const V8: Version = Version::new(8, 9, 7);

    #[test]
    fn unit_repeats_and_limits_by_hand() {
        for v in [V8, V9] {
            // "1 1" needs 3 steps, "1 2" needs 2.
            assert!(check_ctc(v, 3, 3, &[1, 1], &[2], &[3]).is_ok());
            assert!(check_ctc(v, 3, 3, &[1, 2], &[2], &[2]).is_ok());
            let e = check_ctc(v, 3, 3, &[0], &[1], &[2]).unwrap_err();
            assert!(e.to_string().contains("labels[0]"), "{e}");
            let e = check_ctc(v, usize::MAX, 2, &[], &[0], &[1]).unwrap_err();
            assert!(e.to_string().contains("i32::MAX"), "{e}");
            let e = check_ctc(v, 3, 3, &[1], &[1], &[4]).unwrap_err();
            assert!(e.to_string().contains("input_lengths[0]"), "{e}");
        }
        // cuDNN 8.9: a sample without a valid alignment refuses the batch.
        let e = check_ctc(V8, 3, 3, &[1, 1], &[2], &[2]).unwrap_err();
        assert!(
            e.to_string().contains("input_lengths[0]") && e.to_string().contains("cuDNN 9"),
            "{e}"
        );
        let e = check_ctc(V8, 3, 3, &[1], &[1, 0], &[3, 0]).unwrap_err();
        assert!(e.to_string().contains("input_lengths[1]"), "{e}");
        // cuDNN 9: accepted (loss 0, gradient 0), unless the labels
        // outnumber the input steps (PyTorch's guard).
        assert!(check_ctc(V9, 3, 3, &[1, 1], &[2], &[2]).is_ok());
        let e = check_ctc(V9, 3, 3, &[1, 2, 1], &[1, 2], &[3, 1]).unwrap_err();
        assert!(
            e.to_string().contains("input_lengths[1]") && e.to_string().contains("2 labels"),
            "{e}"
        );
        let e = check_ctc(V9, 3, 3, &[1], &[1], &[0]).unwrap_err();
        assert!(e.to_string().contains("input_lengths[0]"), "{e}");
        // Zeroed samples: the infeasible one only.
        assert_eq!(zeroed_samples(&[1, 1, 2], &[2, 0, 1], &[2, 1, 3]), [0]);
    }

    /// Issue 31: the zeroed samples are memset per run of consecutive
    /// indices (by hand), not once per sample.
    #[test]
    fn unit_zeroed_samples_merge_into_runs() {
        assert_eq!(index_ranges(&[]), Vec::<std::ops::Range<usize>>::new());
        assert_eq!(index_ranges(&[3]), [std::ops::Range { start: 3, end: 4 }]);
        assert_eq!(index_ranges(&[0, 1, 2, 5, 7, 8]), [0..3, 5..6, 7..9]);
        // Samples 0, 1 ("1 1" and "2 2" in 2 steps) and 3 ("1 1" in 1):
        // two runs.
        let z = zeroed_samples(&[1, 1, 2, 2, 1, 1, 1], &[2, 2, 1, 2], &[2, 2, 1, 1]);
        assert_eq!(z, [0, 1, 3]);
        assert_eq!(index_ranges(&z), [0..2, 3..4]);
    }

    /// Issue 31: an input length of 0 (with or without labels) is refused
    /// on every version, naming the sample and saying it can be dropped;
    /// cuDNN's OOB rule (L + R > T) does not cover T = 0, L = 0, and no
    /// document says what the kernel does with zero steps. Before the fix
    /// cuDNN 9 accepted both batches below.
    #[test]
    fn unit_zero_input_length_is_refused_on_every_version() {
        for v in [V8, V9] {
            for (labels, ll, il) in [
                (&[1usize][..], &[1usize, 0][..], &[3usize, 0][..]),
                (&[1, 1], &[1, 1], &[3, 0]),
            ] {
                let e = check_ctc(v, 3, 3, labels, ll, il).unwrap_err();
                let t = e.to_string();
                assert!(
                    matches!(&e, Error::InvalidArgument { arg, .. } if arg == "input_lengths[1]")
                        && t.contains("drop it")
                        && t.contains("every cuDNN version"),
                    "{v}: {t}"
                );
            }
        }
    }

    #[test]
    fn unit_label_limit_is_255() {
        // PyTorch sends cuDNN only label lengths < 256: 255 passes, 256
        // is refused naming the sample and its length.
        assert_eq!(CTC_MAX_LABEL_LENGTH, 255);
        for v in [V8, V9] {
            let ok = vec![1usize; 255];
            assert_eq!(check_ctc(v, 1000, 2, &ok, &[255], &[1000]).ok(), Some(255));
            let long = vec![1usize; 257];
            let e = check_ctc(v, 1000, 2, &long, &[1, 256], &[1, 1000]).unwrap_err();
            let t = e.to_string();
            assert!(
                t.contains("label_lengths[1]") && t.contains("sequence 1") && t.contains("256"),
                "{t}"
            );
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(4000))]

        /// Against the f64 reference as the truth: on cuDNN 8.9 the check
        /// accepts exactly the batches the reference gives a finite loss
        /// for, minus cuDNN's own limits (blank 0), input lengths of 0 and
        /// empty labellings (refused on every version); on
        /// cuDNN 9 also those with infinite losses whose labels do not
        /// outnumber their input steps, and for those the zero_infinity
        /// reference gives loss 0; refusals are typed and never panic.
        #[test]
        fn unit_property_check_ctc_agrees_with_the_reference(
            t in 0usize..7,
            alphabet in 0usize..5,
            label_lengths in proptest::collection::vec(0usize..4, 0..4),
            seed in proptest::prelude::any::<u64>(),
            extra in 0usize..3,
            nine in proptest::prelude::any::<bool>(),
        ) {
            let version = if nine { V9 } else { V8 };
            let batch = label_lengths.len();
            let mut s = seed | 1;
            let mut next = |m: usize| {
                s ^= s << 13; s ^= s >> 7; s ^= s << 17;
                (s % (m as u64).max(1)) as usize
            };
            let total: usize = label_lengths.iter().sum();
            let labels: Vec<usize> = (0..total + usize::from(extra == 2)).map(|_| next(alphabet + 1)).collect();
            let input_lengths: Vec<usize> = (0..batch).map(|_| next(t + 2)).collect();
            let ours = check_ctc(version, t, alphabet, &labels, &label_lengths, &input_lengths);
            if let Err(e) = &ours {
                proptest::prop_assert!(
                    matches!(e, Error::InvalidArgument { .. } | Error::Mismatch { .. }),
                    "untyped: {e}"
                );
            }
            let logits = vec![0.0; t * batch * alphabet];
            let problem = CtcProblem {
                logits: &logits,
                max_time: t,
                alphabet,
                blank: 0,
                labels: &labels,
                label_lengths: &label_lengths,
                input_lengths: &input_lengths,
            };
            let truth = ctc_loss(&problem);
            // Input lengths >= 1 on every version (zero steps: undocumented);
            // label lengths too (cuDNN 9.19 gave an empty labelling loss -0).
            let valid = truth.is_ok()
                && batch >= 1
                && t >= 1
                && input_lengths.iter().all(|&l| l >= 1)
                && label_lengths.iter().all(|&l| l >= 1);
            let want = if nine {
                valid && label_lengths.iter().zip(&input_lengths).all(|(&l, &i)| l <= i)
            } else {
                valid && matches!(&truth, Ok(r) if r.losses.iter().all(|l| l.is_finite()))
            };
            proptest::prop_assert_eq!(
                ours.is_ok(),
                want,
                "{} ours {:?}, truth {:?}", version, ours, truth.map(|r| r.losses)
            );
            if ours.is_ok() {
                let zi = ctc_loss_zero_infinity(&problem);
                proptest::prop_assert!(matches!(&zi, Ok(r) if r.losses.iter().all(|l| l.is_finite())));
                let zeroed = zeroed_samples(&labels, &label_lengths, &input_lengths);
                if let (Ok(zi), Ok(plain)) = (&zi, &truth) {
                    for b in 0..batch {
                        let z = zeroed.contains(&b);
                        proptest::prop_assert_eq!(z, !plain.losses[b].is_finite());
                        if z {
                            proptest::prop_assert_eq!(zi.losses[b], 0.0);
                        }
                    }
                }
            }
        }
    }
}
