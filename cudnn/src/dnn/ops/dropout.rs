//! Dropout: [`Dropout`] (the descriptor with its random-number state
//! buffer and seed), [`Handle::dropout_forward`] and
//! [`Handle::dropout_backward`], with the reserve buffer that carries the
//! mask from one to the other.
//!
//! Forward writes `y = x * mask / (1 - p)` (mask 0 with probability `p`) and
//! the mask into the reserve buffer; backward applies the same mask to `dy`.
//! Two [`Dropout`]s made with the same seed and probability give the same
//! masks (on the same device and shapes).
//! The state's uses are ordered across streams (see [`Dropout`]).

use std::fmt;

use super::{DeviceTensor, DeviceTensorMut, check_buffer, check_same_shape};
use crate::check::{self, cudnn_call};
use crate::dnn::tensor::descriptor_owner;
use crate::dnn::{Handle, TensorDescriptor};
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::runtime::{CaptureStatus, DeviceBuffer, DeviceSliceMut, Event, EventFlags, Stream};
use crate::sys::cudnn as dnn;

descriptor_owner!(
    /// Owns a `cudnnDropoutDescriptor_t`.
    RawDropout,
    cudnnDropoutStruct,
    cudnnCreateDropoutDescriptor,
    cudnnDestroyDropoutDescriptor
);

/// Check a dropout probability is in `[0, 1)`.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the value (1 would divide by zero).
pub fn check_dropout_probability(probability: f32) -> Result<()> {
    if !(0.0..1.0).contains(&probability) {
        return Err(Error::invalid(
            "probability",
            "must be in [0, 1) (the kept values are scaled by 1 / (1 - p))",
            probability,
        ));
    }
    Ok(())
}

/// The reserve buffer, in bytes, a dropout of `x` needs (asked of cuDNN;
/// needs no handle or device).
///
/// # Errors
/// What cuDNN reports.
#[doc(alias = "cudnnDropoutGetReserveSpaceSize")]
pub fn dropout_reserve_size<T: DataType>(x: &TensorDescriptor<T>) -> Result<usize> {
    let mut bytes = 0usize;
    // SAFETY: `x` is a live, set descriptor; `bytes` is a valid out-pointer.
    unsafe {
        cudnn_call!(
            check::cudnn()?,
            cudnnDropoutGetReserveSpaceSize(x.as_raw(), &mut bytes)
        )
    }?;
    Ok(bytes)
}

/// What [`Handle::dropout_forward`] and [`Handle::dropout_backward`] check
/// before calling cuDNN: `y` has `x`'s shape and the reserve buffer holds
/// [`dropout_reserve_size`] bytes. Returns that size.
///
/// # Errors
/// [`Error::Mismatch`] naming the shapes or the sizes.
pub fn check_dropout<T: DataType>(
    x: &TensorDescriptor<T>,
    y: &TensorDescriptor<T>,
    reserve_bytes: usize,
) -> Result<usize> {
    check_same_shape("x", x.shape(), "y", y.shape())?;
    let need = dropout_reserve_size(x)?;
    check_buffer("reserve (bytes)", need, reserve_bytes)?;
    Ok(need)
}

/// What can mark a point in a stream and be waited for: [`Event`]; a test
/// double in the unit tests.
trait Mark {
    /// Capture the work queued on `stream` so far.
    fn record(&self, stream: &Stream) -> Result<()>;
    /// Make later work on `stream` wait for the captured work.
    fn wait(&self, stream: &Stream) -> Result<()>;
    /// Block the host until the captured work is done.
    fn synchronize(&self) -> Result<()>;
}

impl Mark for Event {
    fn record(&self, stream: &Stream) -> Result<()> {
        Event::record(self, stream)
    }
    fn wait(&self, stream: &Stream) -> Result<()> {
        stream.wait_event(self)
    }
    fn synchronize(&self) -> Result<()> {
        Event::synchronize(self)
    }
}

/// Whether a use of the dropout state on `stream`, whose capture query
/// answered `status`, is captured (`true`), eager (`false`), or refused:
/// the capture rule (the legacy stream's implicit-capture answer counting
/// as capturing), with the one exception of `stream`'s *own* active
/// capture on the stream of the last use ([`capture_on_last_stream`]).
fn captured_by_status(
    op: &str,
    status: Result<CaptureStatus>,
    stream: &Stream,
    last: &Stream,
) -> Result<bool> {
    let own_capture = matches!(status, Ok(CaptureStatus::Active));
    let hazard = crate::runtime::Hazard::CapturedEvent("the dropout state");
    let status = crate::runtime::implicit_is_capturing(status)?;
    match crate::runtime::capture_rule(op, status, &hazard) {
        Ok(()) => Ok(false),
        Err(e) if own_capture => capture_on_last_stream(e, stream, last),
        Err(e) => Err(e),
    }
}

/// A use on a stream that is itself being captured (`refusal`, the
/// capture rule's answer): allowed (`true`: captured, nothing to record)
/// on the stream of the last use, refused otherwise.
fn capture_on_last_stream(refusal: Error, stream: &Stream, last: &Stream) -> Result<bool> {
    if stream == last {
        Ok(true)
    } else {
        Err(refusal)
    }
}

/// The last use of a device resource: its stream, and a mark recorded
/// there after the use. A use on another stream first waits for the mark.
struct LastUse<E: Mark = Event> {
    stream: Stream,
    mark: E,
}

impl<E: Mark> LastUse<E> {
    /// The resource was just used (initialised) by work queued on `stream`.
    fn new(stream: &Stream, mark: E) -> Result<Self> {
        let mut last = LastUse {
            stream: stream.clone(),
            mark,
        };
        last.after(stream)?;
        Ok(last)
    }

    /// Before a use on `next`: order it after the last use.
    fn before(&self, next: &Stream) -> Result<()> {
        if *next == self.stream {
            return Ok(()); // Stream order already holds.
        }
        self.mark.wait(next)
    }

    /// After a use queued on `stream`: it is now the last. If the mark
    /// cannot be recorded, the stream is synchronized instead, so a later
    /// use elsewhere cannot overtake this one; the error is returned.
    fn after(&mut self, stream: &Stream) -> Result<()> {
        self.stream = stream.clone();
        if let Err(e) = self.mark.record(stream) {
            stream.synchronize().ok();
            return Err(e);
        }
        Ok(())
    }

    /// After another use queued on the stream of the last one, by a holder
    /// of a shared borrow (an RNN's training forward, which advances the
    /// state through its descriptor): the mark moves to after it, so later
    /// uses elsewhere and the drop wait for it too. A use on another stream
    /// is refused, as the last use's stream cannot change through `&self`.
    fn again(&self, stream: &Stream) -> Result<()> {
        if *stream != self.stream {
            return Err(Error::invalid(
                "stream",
                "a use through a shared borrow must be on the stream of the last use",
                format!("{:?}", stream.as_raw()),
            ));
        }
        if let Err(e) = self.mark.record(stream) {
            stream.synchronize().ok();
            return Err(e);
        }
        Ok(())
    }

    /// Wait on the host until the last use is done.
    fn finish(&self) -> Result<()> {
        self.mark.synchronize()
    }
}

impl<E: Mark> Drop for LastUse<E> {
    fn drop(&mut self) {
        // Ignored: Drop must not fail. The resource is released after this.
        let _ = self.finish();
    }
}

impl fmt::Debug for LastUse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LastUse")
            .field("stream", &self.stream)
            .field("event", &self.mark)
            .finish()
    }
}

/// A cuDNN dropout descriptor with its random-number state (device memory
/// it owns), probability and seed.
///
/// # Streams
/// The random-number state is device memory that every forward reads and
/// advances. Its uses are ordered across streams: an event is recorded on
/// the stream of each use (the state's initialisation included), and a use
/// on another stream first makes that stream wait for it (one
/// `cudaEventRecord` per forward; a wait only when the stream changes). So
/// a `Dropout` may follow its handle from stream to stream
/// ([`Handle::set_stream`]) or be used by handles on different streams, and
/// the masks come out as they would on one stream. Dropping it waits (on
/// the host) for its last use before the state is freed.
///
/// In a [`Stream::capture`](crate::runtime::Stream::capture), the dropout
/// ops (and an RNN training forward with dropout) are captured on the
/// stream of the state's last use, without recording the event: the
/// captured use follows the last eager use in stream order, the event
/// keeps marking that eager use, and the graph's replays are ordered with
/// other uses by the replay contract
/// ([`CudaGraphExec::launch`](crate::runtime::CudaGraphExec::launch), 2).
/// On another capturing stream they are refused
/// ([`Error::CaptureUnsafe`](crate::Error::CaptureUnsafe)): use the
/// dropout once on the capturing stream before the capture.
///
/// `Send` (the descriptor is a host structure, the state is device memory
/// it owns, the event may be used from any thread), not `Sync`. Dropping it
/// waits for the state's last use, destroys the descriptor, then frees the
/// state.
pub struct Dropout {
    // Field order: the last use is waited for, then the descriptor is
    // destroyed, then its state is freed.
    last_use: LastUse,
    raw: RawDropout,
    states: DeviceBuffer<u8>,
    probability: f32,
    seed: u64,
}

impl fmt::Debug for Dropout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dropout")
            .field("probability", &self.probability)
            .field("seed", &self.seed)
            .field("states", &self.states)
            .field("last_use", &self.last_use)
            .field("raw", &self.raw)
            .finish()
    }
}

impl Dropout {
    /// The random-number state cuDNN needs on `handle`'s device, in bytes.
    ///
    /// # Errors
    /// What cuDNN reports.
    #[doc(alias = "cudnnDropoutGetStatesSize")]
    pub fn states_size(handle: &Handle) -> Result<usize> {
        let _on = handle.enter()?;
        let mut bytes = 0usize;
        // SAFETY: live handle; `bytes` is a valid out-pointer.
        unsafe {
            cudnn_call!(
                check::cudnn()?,
                cudnnDropoutGetStatesSize(handle.as_raw(), &mut bytes)
            )
        }?;
        Ok(bytes)
    }

    /// A dropout of `probability` seeded with `seed`: allocates the state
    /// and queues its initialization on `handle`'s stream (later uses on
    /// other streams wait for it).
    ///
    /// # Errors
    /// [`check_dropout_probability`]'s (before anything else), an
    /// allocation failure, then what cuDNN or the CUDA runtime (the
    /// ordering event) reports.
    #[doc(alias = "cudnnSetDropoutDescriptor")]
    pub fn new(handle: &mut Handle, probability: f32, seed: u64) -> Result<Self> {
        check_dropout_probability(probability)?;
        // The state, its ordering event and its initialization belong to
        // the handle's device, whatever device is current.
        let _on = handle.enter()?;
        let bytes = Self::states_size(handle)?;
        let mut states = DeviceBuffer::<u8>::alloc(bytes)?;
        let raw = RawDropout::create()?;
        let event = Event::with_flags(EventFlags::DISABLE_TIMING)?;
        // SAFETY: live descriptor and handle; `states` is device memory of
        // exactly `bytes` bytes, which cuDNN asked for; it is owned by the
        // returned value, which keeps it alive as long as the descriptor.
        unsafe {
            cudnn_call!(
                check::cudnn()?,
                cudnnSetDropoutDescriptor(
                    raw.as_ptr(),
                    handle.as_raw(),
                    probability,
                    states.as_raw_mut(),
                    bytes,
                    seed
                )
            )
        }?;
        // If this fails the state is released only after the stream is
        // synchronized (see `LastUse::after`).
        let last_use = LastUse::new(handle.stream(), event)?;
        Ok(Self {
            last_use,
            raw,
            states,
            probability,
            seed,
        })
    }

    /// The probability of dropping an element.
    pub fn probability(&self) -> f32 {
        self.probability
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The state buffer's size in bytes.
    pub fn states_len(&self) -> usize {
        self.states.len()
    }

    /// The raw descriptor, still owned by `self`. Do not set it through this
    /// pointer: the settings kept on the Rust side would no longer match.
    pub fn as_raw(&self) -> dnn::cudnnDropoutDescriptor_t {
        self.raw.as_ptr()
    }

    /// The stream the state was last used on (its initialisation or the
    /// last forward); a use on another stream waits for that use first.
    pub fn last_stream(&self) -> &Stream {
        &self.last_use.stream
    }

    /// After an RNN's training forward queued on `stream` (which must be
    /// [`last_stream`](Self::last_stream)) advanced the state through the
    /// RNN descriptor that borrows `self`: that forward becomes the last
    /// use, so a later use on another stream, and the drop, wait for it.
    /// On a capturing stream nothing is recorded (see [`captured_use`](Self::captured_use)).
    pub(crate) fn used_by_rnn(&self, stream: &Stream) -> Result<()> {
        if self.captured_use("RNN training forward", stream)? {
            return Ok(());
        }
        self.last_use.again(stream)
    }

    /// Whether a use of the state on `stream` is being captured. On a
    /// capturing stream the use is recorded into the graph and the
    /// ordering event is *not* recorded (it would become a graph node, and
    /// later eager waits for it would fail): the eager mark stays that of
    /// the last eager use, which the captured use follows in stream order;
    /// replays are ordered by the graph's contract 2
    /// ([`CudaGraphExec::launch`](crate::runtime::CudaGraphExec::launch)).
    /// Refused ([`Error::CaptureUnsafe`]) when the capturing stream is not
    /// the stream of the last use: ordering after it would need a wait for
    /// the eager event inside the capture, and the last use would move to
    /// a stream whose work runs only in replays. Also refused when the
    /// stream is not itself being captured but counts as capturing (the
    /// legacy stream while a blocking stream of its device captures: its
    /// work would join, and invalidate, that other capture). Asked before
    /// anything is queued.
    ///
    /// # Errors
    /// [`Error::CaptureUnsafe`]; [`Error::Cuda`] from the query.
    pub(crate) fn captured_use(&self, op: &str, stream: &Stream) -> Result<bool> {
        captured_by_status(op, stream.capture_status(), stream, self.last_stream())
    }

    /// Give up ownership: the raw descriptor and the state buffer it uses
    /// (free the buffer only after destroying the descriptor). Waits on the
    /// host for the state's last use first, since the caller takes over
    /// ordering its uses.
    pub fn into_raw(self) -> (dnn::cudnnDropoutDescriptor_t, DeviceBuffer<u8>) {
        let Dropout {
            last_use,
            raw,
            states,
            ..
        } = self;
        drop(last_use);
        (raw.into_raw(), states)
    }

    /// Take ownership of a descriptor made elsewhere and of the state buffer
    /// it was set with, reading the probability and seed back from cuDNN.
    /// The state's earlier uses are taken to be ordered before work queued
    /// on `handle`'s stream from now on (that stream is its last use).
    ///
    /// # Errors
    /// A null pointer, a descriptor whose state is not `states`, a
    /// probability outside `[0, 1)`, what the CUDA runtime reports making
    /// the ordering event. On error the descriptor is left alone
    /// (not destroyed) but `states` is freed: set the descriptor anew
    /// before using it again.
    ///
    /// # Safety
    /// `raw` was made by `cudnnCreateDropoutDescriptor` and set with
    /// `states` (which is at least the state size cuDNN asked for), is not
    /// destroyed, and nothing else destroys or modifies it from now on.
    #[doc(alias = "cudnnGetDropoutDescriptor")]
    pub unsafe fn from_raw(
        raw: dnn::cudnnDropoutDescriptor_t,
        states: DeviceBuffer<u8>,
        handle: &Handle,
    ) -> Result<Self> {
        if raw.is_null() {
            return Err(Error::invalid("raw", "must not be null", "null"));
        }
        let _on = handle.launch("Dropout::from_raw", &[("states", states.device())])?;
        let mut probability = f32::NAN;
        let mut states_ptr = std::ptr::null_mut();
        let mut seed = 0u64;
        // SAFETY: the caller promises `raw` is a live, set dropout
        // descriptor; the handle is live; the out-pointers are valid.
        unsafe {
            cudnn_call!(
                check::cudnn()?,
                cudnnGetDropoutDescriptor(
                    raw,
                    handle.as_raw(),
                    &mut probability,
                    &mut states_ptr,
                    &mut seed
                )
            )
        }?;
        if states_ptr.cast_const() != states.as_raw() {
            return Err(Error::mismatch(
                "dropout state pointer",
                format!("{:p}", states.as_raw()),
                format!("{states_ptr:p}"),
            ));
        }
        check_dropout_probability(probability)?;
        let event = Event::with_flags(EventFlags::DISABLE_TIMING)?;
        let last_use = LastUse::new(handle.stream(), event)?;
        // SAFETY: the caller hands us ownership of a live descriptor.
        let raw = unsafe { RawDropout::adopt(raw) }?;
        Ok(Self {
            last_use,
            raw,
            states,
            probability,
            seed,
        })
    }

    /// Wait for the state's last use, destroy the descriptor, then free the
    /// state, reporting every status.
    ///
    /// # Errors
    /// What cuDNN or the CUDA runtime reports (the first failure).
    #[doc(alias = "cudnnDestroyDropoutDescriptor")]
    pub fn destroy(self) -> Result<()> {
        let Dropout {
            last_use,
            raw,
            states,
            ..
        } = self;
        // Reported here; dropping `last_use` then waits again, at no cost.
        let w = last_use.finish();
        drop(last_use);
        let r = raw.destroy();
        let s = states.destroy();
        w.and(r).and(s)
    }
}

impl Handle {
    /// `y = x * mask / (1 - p)`, a fresh mask written to `reserve` (at least
    /// [`dropout_reserve_size`] bytes); keep `reserve` for the backward pass.
    /// On a stream other than the state's last, waits for that use first
    /// (see [`Dropout`]).
    ///
    /// # Errors
    /// [`check_dropout`]'s, then what cuDNN or the CUDA runtime (the
    /// ordering event) reports.
    #[doc(alias = "cudnnDropoutForward")]
    pub fn dropout_forward<T: DataType>(
        &mut self,
        dropout: &mut Dropout,
        x: DeviceTensor<'_, T>,
        mut y: DeviceTensorMut<'_, T>,
        mut reserve: DeviceSliceMut<'_, u8>,
    ) -> Result<()> {
        check_dropout(x.desc(), y.desc(), reserve.len())?;
        let _on = self.launch(
            "dropout_forward",
            &[
                ("x", x.device()),
                ("y", y.device()),
                ("reserve", reserve.device()),
                ("dropout state", dropout.states.device()),
            ],
        )?;
        let captured = dropout.captured_use("dropout_forward", self.stream())?;
        let api = check::cudnn()?;
        if !captured {
            dropout.last_use.before(self.stream())?;
        }
        // SAFETY: live handle and descriptors; `x` and `y` hold at least their
        // spans (checked when bound), `y` is exclusive; `reserve` holds at
        // least the size cuDNN asked for (checked) and its true size is
        // passed; the dropout state is owned by `dropout`, borrowed mutably
        // (cuDNN advances it).
        unsafe {
            cudnn_call!(
                api,
                cudnnDropoutForward(
                    self.as_raw(),
                    dropout.as_raw(),
                    x.desc().as_raw(),
                    x.ptr(),
                    y.desc().as_raw(),
                    y.ptr(),
                    reserve.as_raw_mut(),
                    reserve.len()
                )
            )
        }?;
        if captured {
            // Recorded into the graph, after the last eager use in stream
            // order; the eager mark stays valid (see `captured_use`).
            return Ok(());
        }
        dropout.last_use.after(self.stream())
    }

    /// `dx = dy * mask / (1 - p)`, with the mask the forward pass wrote to
    /// `reserve` (the state is not advanced; the caller orders `reserve`
    /// after the forward, as any buffer). On a stream other than the
    /// state's last, waits for that use first.
    ///
    /// # Errors
    /// [`check_dropout`]'s (for `dy` and `dx`), then what cuDNN or the CUDA
    /// runtime reports.
    #[doc(alias = "cudnnDropoutBackward")]
    pub fn dropout_backward<T: DataType>(
        &mut self,
        dropout: &Dropout,
        dy: DeviceTensor<'_, T>,
        mut dx: DeviceTensorMut<'_, T>,
        mut reserve: DeviceSliceMut<'_, u8>,
    ) -> Result<()> {
        check_dropout(dy.desc(), dx.desc(), reserve.len())?;
        let _on = self.launch(
            "dropout_backward",
            &[
                ("dy", dy.device()),
                ("dx", dx.device()),
                ("reserve", reserve.device()),
                ("dropout state", dropout.states.device()),
            ],
        )?;
        let captured = dropout.captured_use("dropout_backward", self.stream())?;
        let api = check::cudnn()?;
        if !captured {
            dropout.last_use.before(self.stream())?;
        }
        // SAFETY: as in `dropout_forward`; `dx` is exclusive.
        unsafe {
            cudnn_call!(
                api,
                cudnnDropoutBackward(
                    self.as_raw(),
                    dropout.as_raw(),
                    dy.desc().as_raw(),
                    dy.ptr(),
                    dx.desc().as_raw(),
                    dx.ptr(),
                    reserve.as_raw_mut(),
                    reserve.len()
                )
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use super::*;

    /// Records what the ordering does, with the stream each call names.
    struct Log {
        calls: Rc<RefCell<Vec<String>>>,
        fail_record: bool,
    }

    fn name(s: &Stream) -> String {
        format!("{:?}", s.as_raw())
    }

    impl Mark for Log {
        fn record(&self, stream: &Stream) -> Result<()> {
            self.calls
                .borrow_mut()
                .push(format!("record {}", name(stream)));
            if self.fail_record {
                return Err(Error::invalid("event", "test double refuses", "record"));
            }
            Ok(())
        }
        fn wait(&self, stream: &Stream) -> Result<()> {
            self.calls
                .borrow_mut()
                .push(format!("wait {}", name(stream)));
            Ok(())
        }
        fn synchronize(&self) -> Result<()> {
            self.calls.borrow_mut().push("synchronize".into());
            Ok(())
        }
    }

    fn take(calls: &Rc<RefCell<Vec<String>>>) -> Vec<String> {
        std::mem::take(&mut *calls.borrow_mut())
    }

    /// A use on the stream of the last one needs nothing before it; a use
    /// on another waits for the mark of the last; every use records after
    /// itself; dropping waits for the last use. (`Stream::legacy` and
    /// `per_thread` are values: no device is needed.)
    #[test]
    fn uses_on_other_streams_wait_for_the_last_one() {
        let calls = Rc::new(RefCell::new(Vec::new()));
        let (a, b) = (Stream::legacy(), Stream::per_thread());
        let (na, nb) = (name(&a), name(&b));
        let mark = Log {
            calls: calls.clone(),
            fail_record: false,
        };
        let mut last = LastUse::new(&a, mark).unwrap();
        // Initialised on `a`: marked there.
        assert_eq!(take(&calls), [format!("record {na}")]);
        assert!(last.stream == a);

        // Another use on `a`: stream order suffices.
        last.before(&a).unwrap();
        last.after(&a).unwrap();
        assert_eq!(take(&calls), [format!("record {na}")]);

        // On `b`: wait for `a`'s use, then mark `b`.
        last.before(&b).unwrap();
        last.after(&b).unwrap();
        assert_eq!(take(&calls), [format!("wait {nb}"), format!("record {nb}")]);
        assert!(last.stream == b);

        // Back on `a`: now `a` waits for `b`.
        last.before(&a).unwrap();
        last.after(&a).unwrap();
        assert_eq!(take(&calls), [format!("wait {na}"), format!("record {na}")]);

        // A read-only use (backward) on `b` waits but is not the last use.
        last.before(&b).unwrap();
        assert_eq!(take(&calls), [format!("wait {nb}")]);
        assert!(last.stream == a);

        drop(last);
        assert_eq!(take(&calls), ["synchronize"]);
    }

    /// A use through a shared borrow (an RNN's training forward) on the
    /// last use's stream moves the mark after it, so a later use on another
    /// stream waits for the RNN too; on another stream it is refused.
    #[test]
    fn a_shared_use_on_the_last_stream_moves_the_mark() {
        let calls = Rc::new(RefCell::new(Vec::new()));
        let (a, b) = (Stream::legacy(), Stream::per_thread());
        let (na, nb) = (name(&a), name(&b));
        let mark = Log {
            calls: calls.clone(),
            fail_record: false,
        };
        let last = LastUse::new(&a, mark).unwrap();
        take(&calls);
        last.again(&a).unwrap();
        assert_eq!(take(&calls), [format!("record {na}")]);
        assert!(last.again(&b).is_err());
        assert!(take(&calls).is_empty());
        assert!(last.stream == a);
        // The next use elsewhere waits for the mark recorded after the RNN.
        last.before(&b).unwrap();
        assert_eq!(take(&calls), [format!("wait {nb}")]);
    }

    /// When the mark cannot be recorded the use is still the last one (so
    /// the stream changes), and the error comes back.
    #[test]
    fn a_failed_record_is_reported_and_the_use_stays_last() {
        let calls = Rc::new(RefCell::new(Vec::new()));
        let (a, b) = (Stream::legacy(), Stream::per_thread());
        let ok = Log {
            calls: calls.clone(),
            fail_record: false,
        };
        let mut last = LastUse::new(&a, ok).unwrap();
        last.mark.fail_record = true;
        take(&calls);
        // `b.synchronize()` fails without a device; that is ignored.
        assert!(last.after(&b).is_err());
        assert!(last.stream == b);
        assert_eq!(take(&calls), [format!("record {}", name(&b))]);
    }

    /// A dropout use on a capturing stream (the capture rule refused it,
    /// `refusal`) is allowed, as captured and with nothing to record, on
    /// the stream of the last use, and refused with the rule's typed error
    /// on any other stream. (Before the fix every use on a capturing
    /// stream was refused, which broke capturing a training step with
    /// dropout, as the CUDA-graph docs promise.)
    #[test]
    fn unit_captured_use_only_on_the_last_stream() {
        let refusal = || {
            crate::runtime::capture_rule(
                "dropout_forward",
                crate::runtime::CaptureStatus::Active,
                &crate::runtime::Hazard::CapturedEvent("the dropout state"),
            )
            .expect_err("capturing")
        };
        let a = Stream::per_thread();
        let b = Stream::legacy();
        assert!(matches!(
            capture_on_last_stream(refusal(), &a, &a.clone()),
            Ok(true)
        ));
        match capture_on_last_stream(refusal(), &b, &a) {
            Err(Error::CaptureUnsafe { op, hazard, .. }) => {
                assert_eq!(op, "dropout_forward");
                assert!(
                    hazard.contains("other than that of its last use"),
                    "{hazard}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    /// Only the stream's *own* active capture makes a use on the last
    /// stream a captured one. The legacy stream while a blocking stream of
    /// its device captures answers `cudaErrorStreamCaptureImplicit` (906,
    /// documented in the runtime API): work launched there would join and
    /// invalidate that other thread's capture, so the use is refused with
    /// the typed error even on the stream of the last use. An invalidated
    /// capture is refused too; a stream not capturing is an eager use.
    /// (Before the fix the implicit answer on the last stream was taken
    /// as captured, `Ok(true)`, and the dropout launched.)
    #[test]
    fn unit_implicit_capture_is_refused_even_on_the_last_stream() {
        let implicit = || {
            Err(Error::Cuda {
                call: "cudaStreamIsCapturing",
                code: 906,
                name: "cudaErrorStreamCaptureImplicit".into(),
                text: String::new(),
                context: None,
            })
        };
        let legacy = Stream::legacy();
        match captured_by_status("dropout_forward", implicit(), &legacy, &legacy.clone()) {
            Err(Error::CaptureUnsafe { op, .. }) => assert_eq!(op, "dropout_forward"),
            other => panic!("an implicit capture was not refused: {other:?}"),
        }
        let a = Stream::per_thread();
        assert!(matches!(
            captured_by_status("f", Ok(CaptureStatus::Active), &a, &a.clone()),
            Ok(true)
        ));
        assert!(matches!(
            captured_by_status("f", Ok(CaptureStatus::Invalidated), &a, &a.clone()),
            Err(Error::CaptureUnsafe { .. })
        ));
        assert!(matches!(
            captured_by_status("f", Ok(CaptureStatus::None), &a, &a.clone()),
            Ok(false)
        ));
        assert!(matches!(
            captured_by_status("f", Ok(CaptureStatus::Active), &a, &legacy),
            Err(Error::CaptureUnsafe { .. })
        ));
        // Another failure of the query is reported as it is.
        let other = Err(Error::Cuda {
            call: "cudaStreamIsCapturing",
            code: 400,
            name: "cudaErrorInvalidResourceHandle".into(),
            text: String::new(),
            context: None,
        });
        assert!(matches!(
            captured_by_status("f", other, &a, &a.clone()),
            Err(Error::Cuda { code: 400, .. })
        ));
    }

    proptest::proptest! {
        /// Every capture answer on the stream of the last use or another:
        /// captured only for the stream's own active capture on the last
        /// stream; eager when not capturing; a query failure other than
        /// the implicit answer is returned; every other case is the typed
        /// refusal. The truth is the rule as written in the docs.
        #[test]
        fn unit_property_captured_use_follows_the_rule(answer in 0u8..5, same in proptest::bool::ANY) {
            let status = match answer {
                0 => Ok(CaptureStatus::None),
                1 => Ok(CaptureStatus::Active),
                2 => Ok(CaptureStatus::Invalidated),
                n => Err(Error::Cuda {
                    call: "cudaStreamIsCapturing",
                    code: if n == 3 { 906 } else { 400 },
                    name: String::new(),
                    text: String::new(),
                    context: None,
                }),
            };
            let a = Stream::per_thread();
            let last = if same { a.clone() } else { Stream::legacy() };
            let r = captured_by_status("op", status, &a, &last);
            match (answer, same) {
                (0, _) => proptest::prop_assert!(matches!(r, Ok(false)), "{:?}", r),
                (1, true) => proptest::prop_assert!(matches!(r, Ok(true)), "{:?}", r),
                (4, _) => proptest::prop_assert!(matches!(r, Err(Error::Cuda { code: 400, .. })), "{:?}", r),
                _ => proptest::prop_assert!(matches!(r, Err(Error::CaptureUnsafe { .. })), "{:?}", r),
            }
        }
    }
}
