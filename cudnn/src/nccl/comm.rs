//! Communicators: creation (with or without a deadline), queries, split,
//! polling of non-blocking calls, abort and destruction (the watched wait
//! is in `watch`).

use std::cell::Cell;
use std::ffi::{c_int, c_uint};
use std::fmt;
use std::mem::ManuallyDrop;
use std::ptr::{self, NonNull};
use std::sync::Arc;
use std::time::Duration;

use super::clique::Member;
use super::depth::{self, WHY_LIFECYCLE};

mod abort;
mod calls;
mod init;
mod split;
use super::progress::{self, DEFAULT_COMM_TIMEOUT, Deadline, Settled};
use super::{Ranks, api, nccl_call, sys, text};
use crate::error::{Error, Result};
use crate::runtime::{Device, QueueHold, Stream, check_args, check_device, check_stream_thread};
#[cfg(test)]
pub(crate) use abort::abort_here_for;
pub(crate) use abort::{ABORT_LIMIT, Busy, Family, FamilyUse, abort_bounded};
use abort::{abort_here, abort_raw};
#[cfg(test)]
pub(crate) use init::{parse_nccl_int, refuse_forced_blocking};

/// One rank of an NCCL communicator, bound to one device (`ncclComm_t`).
///
/// Made from a shared [`UniqueId`](super::UniqueId) by every rank ([`init_rank`](Self::init_rank),
/// or [`init_rank_timeout`](Self::init_rank_timeout) with a deadline), for
/// all local devices at once ([`init_all`](Self::init_all)), or from
/// another communicator ([`split`](Self::split)).
///
/// **Blocking and non-blocking.** [`init_rank`](Self::init_rank),
/// [`init_all`](Self::init_all) and their splits make *blocking*
/// communicators: each NCCL call returns when its work is queued (fastest;
/// an initialisation whose peers never come waits for them). A
/// communicator from [`init_rank_timeout`](Self::init_rank_timeout) is
/// *non-blocking*: NCCL answers `ncclInProgress` and finishes on its own
/// threads (at the cost of a host thread per launch), and this type polls
/// every such answer to completion within [`timeout`](Self::timeout),
/// aborting the communicator when the deadline passes. NCCL has no query
/// for a communicator's configuration, so one handed over with
/// [`from_raw`](Self::from_raw) is of unknown mode until NCCL answers
/// `ncclInProgress` (then it is known to be non-blocking); meanwhile
/// `Drop` treats it as blocking, and [`split`](Self::split) polls every
/// answer, whatever it is. Splits inherit their parent's mode. A
/// [`group`](super::group) refuses to mix communicators known to be
/// blocking with ones known to be non-blocking (NCCL would run the whole
/// group in the mode of the last one). `NCCL_COMM_BLOCKING` in the
/// environment overrides the mode NCCL is asked for; this type does not
/// read it.
///
/// **Streams.** NCCL calls refuse [`Stream::per_thread`]: a non-blocking
/// group is launched from one of NCCL's threads, where that handle names
/// another thread's queue. Use a created stream (or [`Stream::legacy`]).
///
/// **Deadlines.** [`wait`](Self::wait) waits for a stream's work while
/// watching NCCL's asynchronous errors, as PyTorch's watchdog does: on an
/// error or at the deadline it aborts the communicator, so a dead peer
/// yields [`Error::Timeout`] or [`Error::Nccl`] instead of a hang. After an
/// abort the communicator refuses further calls ([`is_aborted`](Self::is_aborted)).
///
/// **Drop never waits for a peer without a deadline** (with one exception
/// before NCCL 2.27, below). Dropping an aborted
/// communicator does nothing more. Otherwise, when NCCL reports an
/// asynchronous error, it is aborted (`ncclCommAbort`). A non-blocking
/// communicator is finalized (its work flushed, `ncclCommFinalize`) within
/// its [`timeout`](Self::timeout), then destroyed, or aborted when that
/// fails or the deadline passes. A blocking communicator is aborted: its
/// finalize and destroy would wait for queued work, which never ends when a
/// peer is gone, and nothing bounds them. Work this rank queued and has not
/// finished is abandoned then (peers waiting on it fail or time out), so
/// for an orderly exit wait for the work ([`wait`](Self::wait) or a stream
/// synchronize) and call [`destroy`](Self::destroy) or
/// [`finalize`](Self::finalize), which report errors. `ncclCommAbort`
/// itself can wait without end (behind work queued on a stream that
/// another, stuck communicator shares), so `Drop` (and
/// [`wait`](Self::wait), and the polls of non-blocking calls) run it on a
/// helper thread and wait for it at most 10 s; past that it goes on in
/// the background and the communicator is abandoned. The explicit
/// [`abort`](Self::abort) waits for it. **Before NCCL 2.27** (2.26 and
/// older) there is one exception: the abort of a non-blocking
/// communicator whose last call was not seen finished (a poll that failed
/// or timed out, in a call, in [`wait`](Self::wait) or in the finalize of
/// `Drop`) runs on the calling thread *without a bound*: NCCL then holds
/// that call's job in this thread's storage, and the abort, which joins
/// it, must run on this thread (it can then wait as long as that job
/// does). From NCCL 2.27 the job is on the heap and these aborts are
/// bounded, but for one case: a call whose poll failed or timed out while
/// its job is linked waits for the abort *without a bound* when the
/// bounded wait gives up, because NCCL's job thread could still launch
/// that call's kernels after its buffers are returned to the caller. That
/// wait also covers CUDA graphs holding this communicator's captured work
/// (NCCL's abort waits until they are destroyed): drop such graphs before
/// a call that may time out, or it may not return.
///
/// **Non-blocking calls are settled on the calling thread.** NCCL links a
/// non-blocking launch to the calling thread's job record; every such call
/// is polled to completion and its job released on the same thread before
/// it returns (`ncclCommCount` from NCCL 2.19, an empty group before), so
/// the communicator can move to another thread (it is `Send`) after the
/// calling thread exits.
///
/// **Counts agree across ranks, or NCCL writes out of bounds.** NCCL never
/// compares the calls of different ranks: its peer-to-peer transport lets
/// a sender write up to *its own* count into the receiver's buffer (a
/// broadcast whose root sends more than a rank receives, a send larger than
/// its recv). For ranks in this process (made by [`init_all`](Self::init_all),
/// or by [`init_rank`](Self::init_rank) / [`init_rank_timeout`](Self::init_rank_timeout)
/// with one id from several threads) the crate compares every call before
/// NCCL sees it: the n-th collective of each rank must agree in kind,
/// element type, count, reduction and root, and the n-th send from rank a
/// to rank b must have the size in bytes of the n-th recv of b from a. The
/// rank that calls second gets [`Error::Mismatch`] and launches nothing (the
/// first one's call then waits for a partner: bound it with
/// [`wait`](Self::wait)). A call that was compared but not launched (NCCL
/// refused it, its group failed) puts these ranks out of step: every later
/// call of any of them is refused (make new communicators). **Across
/// processes nothing is compared**: every rank must make the same calls in
/// the same order with the same counts, element types, reductions and
/// roots, and pair every send with a recv of the same size; a program that
/// does not lets NCCL write past a buffer on the device of another process.
/// [`set_check_agreement`](Self::set_check_agreement) compares each call across all
/// ranks (one extra collective and a host wait: a debugging aid). The
/// splits of compared communicators are compared too (the ranks of this
/// process that split with the same color); communicators from
/// [`from_raw`](Self::from_raw) are not.
///
/// **A failed group poisons non-blocking communicators.** When a group of
/// non-blocking communicators fails, NCCL keeps them in its error state for
/// good; they are marked ([`is_poisoned`](Self::is_poisoned)) and refuse
/// every further call (abort or drop them).
///
/// **Splits sharing resources.** When a parent shares its resources with
/// its splits (NCCL decides that from the *parent's* configuration:
/// `splitShare = 1`, or `NCCL_COMM_SPLIT_SHARE_RESOURCES=1`; off by
/// default, and a child's own configuration cannot turn it off), parent
/// and children share one abort flag: aborting any of them (an explicit
/// [`abort`](Self::abort), a [`wait`](Self::wait) that fails, or the
/// `Drop` of a blocking one) stops the work of all of them. With sharing
/// on, end a child with [`finalize`](Self::finalize) or
/// [`destroy`](Self::destroy), not by dropping it. NCCL forbids using a
/// parent and a child that share resources in parallel, or while another
/// of them is being aborted, and an abort can outlive its 10 s bound in
/// the background. So a split family (a communicator and everything split
/// from it) is used by one thread at a time: every NCCL call of a member
/// (a collective, a group, a split, a wait, finalize, destroy, abort,
/// `Drop`) holds the family until it returns; a call from another thread
/// waits for it at most its [`timeout`](Self::timeout) (then
/// [`Error::InvalidArgument`] naming the communicator). While an abort of
/// any member runs, every call of the family that starts then is refused
/// ([`Error::InvalidArgument`]; retry later); a member dropped meanwhile
/// (or while another thread's call holds the family) waits at most 10 s,
/// then is leaked (never touched again); a non-blocking call already
/// issued waits at most 10 s for the abort to end before it is settled,
/// and is aborted past that (a wait without a bound while its job is
/// linked, see above). The crate cannot read whether sharing is on,
/// so this holds for every family.
///
/// `Send`, not `Sync`: NCCL does not allow one communicator to be used from
/// several threads at the same time.
pub struct Communicator {
    raw: NonNull<sys::ncclComm>,
    ranks: Ranks,
    device: usize,
    /// Blocking, non-blocking, or not known (from `from_raw`).
    mode: Cell<Mode>,
    /// Aborted: `raw` is gone.
    aborted: Cell<bool>,
    /// A group of this non-blocking communicator failed: NCCL keeps it in
    /// its error state for good, so every call is refused (`Drop` aborts).
    poisoned: Cell<bool>,
    /// NCCL may hold a job of this communicator in this thread's storage
    /// (a non-blocking call not seen ready): an abort must then run on this
    /// thread (it joins that job), not on a helper.
    job_linked: Cell<bool>,
    /// The deadline of this communicator's own polling.
    timeout: Duration,
    /// Its place among the ranks of the same communicator in this process,
    /// whose calls are compared before NCCL sees them (`clique`); `None`
    /// when not known (`from_raw`, splits).
    member: Option<Member>,
    /// Compare each direct call with every rank's before issuing it
    /// (`set_check_agreement`).
    check_agreement: bool,
    /// The communicators split from one another (this one's root and every
    /// split of it): while an abort of any of them runs, the others are
    /// not used.
    family: Arc<Family>,
}

/// Whether NCCL answers a communicator's calls at once or `ncclInProgress`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Made blocking by this crate (`init_rank`, `init_all`, their splits).
    Blocking,
    /// Made non-blocking (`init_rank_timeout`, its splits), or NCCL
    /// answered `ncclInProgress`.
    NonBlocking,
    /// Handed over with `from_raw` and not seen in progress yet: NCCL has
    /// no query for a communicator's configuration.
    Unknown,
}

// SAFETY: a communicator may be used from any host thread, one at a time
// (NCCL's user guide, "Thread safety": concurrent use of the same
// communicator from several threads is not supported; handing it to another
// thread is). `Communicator` is not `Sync` (its `Cell`s), so use is never
// concurrent.
unsafe impl Send for Communicator {}

impl fmt::Debug for Communicator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Communicator")
            .field("raw", &self.raw)
            .field("rank", &self.ranks.rank())
            .field("size", &self.ranks.size())
            .field("device", &self.device)
            .field("mode", &self.mode.get())
            .field("aborted", &self.aborted.get())
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// `NCCL_CONFIG_INITIALIZER` of the bindings' header, with `blocking` set.
pub(crate) fn config(blocking: bool) -> sys::ncclConfig_t {
    let undef = c_int::MIN;
    sys::ncclConfig_t {
        size: std::mem::size_of::<sys::ncclConfig_t>(),
        magic: sys::NCCL_API_MAGIC as c_uint,
        version: sys::NCCL_VERSION_CODE as c_uint,
        blocking: c_int::from(blocking),
        cgaClusterSize: undef,
        minCTAs: undef,
        maxCTAs: undef,
        netName: ptr::null(),
        splitShare: undef,
        trafficClass: undef,
        commName: ptr::null(),
        collnetEnable: undef,
        CTAPolicy: undef,
        shrinkShare: undef,
        nvlsCTAs: undef,
        nChannelsPerNetPeer: undef,
        nvlinkCentricSched: undef,
        graphUsageMode: undef,
        numRmaCtx: undef,
        maxP2pPeers: undef,
        graphStreamOrdering: undef,
        launchOrderImplicit: undef,
        numRmaSig: undef,
        rmaEagerInit: undef,
        hostCftMode: undef,
        nvlsHostMode: undef,
    }
}

/// The error of an NCCL result that is not `ncclSuccess`.
pub(super) fn nccl_error(call: &'static str, code: sys::ncclResult_t) -> Error {
    match super::check_result(call, code) {
        Err(e) => e,
        Ok(()) => Error::invalid("NCCL result", "an error was expected", "ncclSuccess"),
    }
}

impl Communicator {
    /// Wrap a communicator made elsewhere, taking ownership (it is
    /// destroyed, or aborted, by `Drop`: see the type's docs). Its rank,
    /// size and device are read from NCCL. A non-blocking communicator
    /// still initialising (`ncclInProgress`) is polled until it is ready,
    /// for at most [`DEFAULT_COMM_TIMEOUT`](super::DEFAULT_COMM_TIMEOUT).
    /// Its blocking mode is not known (see the type's docs).
    ///
    /// # Safety
    /// `raw` must be a live communicator that nothing else destroys or uses
    /// concurrently. When it is non-blocking, NCCL must hold no job of it
    /// in another thread's storage: its last call was seen complete (a
    /// query such as `ncclCommCount`, or `ncclCommGetAsyncError` answering
    /// `ncclSuccess` from NCCL 2.26, made on the thread that issued that
    /// call; before NCCL 2.19 an empty group on that thread), or that
    /// thread outlives every use of the returned communicator. Otherwise
    /// NCCL joins and resets a job record in that thread's storage when the
    /// communicator is next used or dropped.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a null pointer, [`Error::Nccl`] when
    /// NCCL reports an error for it (its initialisation failed, or queued
    /// work did) or cannot say its state, rank, size or device,
    /// [`Error::Timeout`] when it does not become ready in time. On error
    /// the caller still owns `raw` (and should abort it).
    pub unsafe fn from_raw(raw: sys::ncclComm_t) -> Result<Self> {
        let nn =
            NonNull::new(raw).ok_or_else(|| Error::invalid("raw", "must not be null", "null"))?;
        // SAFETY: `raw` is live (caller).
        let st = unsafe { progress::state(raw) }?;
        if st != sys::ncclResult_t::ncclSuccess && st != sys::ncclResult_t::ncclInProgress {
            return Err(nccl_error("ncclCommGetAsyncError", st).with_context(
                "the communicator handed to from_raw is in error (not aborted: the caller \
                 still owns it)",
            ));
        }
        let non_blocking = st == sys::ncclResult_t::ncclInProgress;
        if non_blocking {
            let deadline = Deadline::after(DEFAULT_COMM_TIMEOUT);
            // SAFETY: as above.
            match unsafe { progress::settle(raw, &deadline) }? {
                Settled::Ready => {}
                Settled::Failed(code) => {
                    return Err(nccl_error("ncclCommGetAsyncError", code).with_context(
                        "a non-blocking communicator handed to from_raw failed to initialise \
                         (not aborted: the caller still owns it)",
                    ));
                }
                Settled::TimedOut => {
                    return Err(Error::Timeout {
                        what: "a non-blocking communicator handed to from_raw to finish \
                               initialising (not aborted: the caller still owns it)"
                            .into(),
                        waited: deadline.waited(),
                        rank: None,
                    });
                }
            }
        }
        // SAFETY: as above.
        let c = unsafe { Self::wrap(nn) }?;
        if non_blocking {
            c.mode.set(Mode::NonBlocking);
        }
        Ok(c)
    }

    /// Read rank, size and device of a live communicator and own it.
    ///
    /// # Safety
    /// As [`from_raw`](Self::from_raw).
    unsafe fn wrap(raw: NonNull<sys::ncclComm>) -> Result<Self> {
        let api = api()?;
        let (mut rank, mut size, mut dev): (c_int, c_int, c_int) = (0, 0, 0);
        // SAFETY: `raw` is live (caller); the out-pointers are valid.
        unsafe { nccl_call!(api, ncclCommUserRank(raw.as_ptr(), &mut rank)) }?;
        // SAFETY: as above.
        unsafe { nccl_call!(api, ncclCommCount(raw.as_ptr(), &mut size)) }?;
        // SAFETY: as above.
        unsafe { nccl_call!(api, ncclCommCuDevice(raw.as_ptr(), &mut dev)) }?;
        let ranks = Ranks::new(
            usize::try_from(rank).unwrap_or(usize::MAX),
            usize::try_from(size).unwrap_or(0),
        )?;
        let device = usize::try_from(dev)
            .map_err(|_| Error::invalid("ncclCommCuDevice", "must be a device ordinal", dev))?;
        Ok(Communicator {
            raw,
            ranks,
            device,
            mode: Cell::new(Mode::Unknown),
            aborted: Cell::new(false),
            poisoned: Cell::new(false),
            job_linked: Cell::new(false),
            timeout: DEFAULT_COMM_TIMEOUT,
            member: None,
            check_agreement: false,
            family: Arc::default(),
        })
    }

    /// Set the known mode (tests of the recording).
    #[cfg(test)]
    pub(crate) fn set_mode(&self, mode: Mode) {
        self.mode.set(mode);
    }

    /// A communicator no NCCL call may see (tests of the recording).
    #[cfg(test)]
    pub(crate) fn fake(raw: NonNull<sys::ncclComm>) -> Self {
        // The tests keep it in a `ManuallyDrop` of their own.
        let mut c =
            ManuallyDrop::into_inner(Self::never_launched().unwrap_or_else(|_| unreachable!()));
        c.raw = raw;
        c
    }

    /// A communicator NCCL never sees, rank 0 of 1 on device 0, for
    /// [`LaunchChecks`](super::LaunchChecks): its handle is a dangling
    /// pointer that only a launcher calling nothing receives. It comes in a
    /// `ManuallyDrop`, so it is never dropped unless its holder takes it
    /// out: its drop would hand the dangling handle to NCCL
    /// (`ncclCommGetAsyncError`).
    pub(crate) fn never_launched() -> Result<ManuallyDrop<Self>> {
        Ok(ManuallyDrop::new(Communicator {
            raw: NonNull::dangling(),
            ranks: Ranks::new(0, 1)?,
            device: 0,
            mode: Cell::new(Mode::Unknown),
            aborted: Cell::new(false),
            poisoned: Cell::new(false),
            job_linked: Cell::new(false),
            timeout: DEFAULT_COMM_TIMEOUT,
            member: None,
            check_agreement: false,
            family: Arc::default(),
        }))
    }

    /// A fake communicator (as [`fake`](Self::fake)) of rank `member.rank()`
    /// of `size`, in `member`'s clique (tests of the comparison).
    #[cfg(test)]
    pub(crate) fn fake_in(raw: NonNull<sys::ncclComm>, size: usize, member: Member) -> Self {
        let mut c = Self::fake(raw);
        c.ranks = Ranks::new(member.rank(), size).unwrap_or_else(|_| unreachable!());
        c.member = Some(member);
        c
    }

    /// Its place among the ranks of this process (see [`clique`]).
    pub(crate) fn member(&self) -> Option<&Member> {
        self.member.as_ref()
    }

    /// A call of this communicator was compared with the ranks of this
    /// process but not launched: they are out of step, and every later call
    /// of the communicators of the clique is refused.
    pub(crate) fn out_of_step(&self, call: &super::op::Call) {
        if let Some(m) = &self.member {
            m.break_with(&format!(
                "rank {}'s {} was not launched",
                self.rank(),
                call.describe()
            ));
        }
    }

    /// A group of this communicator failed: a non-blocking one is then in
    /// NCCL's error state for good, and refuses every further call.
    pub(crate) fn poison_if_non_blocking(&self) {
        if self.mode.get() == Mode::NonBlocking {
            self.poisoned.set(true);
        }
    }

    /// Whether a failed group left this communicator unusable (it refuses
    /// every call; abort or drop it).
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.get()
    }

    /// Join `member` when it names this communicator's rank.
    fn join(&mut self, member: Member) {
        if member.rank() == self.rank() {
            self.member = Some(member);
        }
    }

    /// The raw `ncclComm_t`, for calls this crate does not wrap. It stays
    /// owned by `self`. Null once the communicator was aborted.
    pub fn as_raw(&self) -> sys::ncclComm_t {
        if self.aborted.get() {
            return ptr::null_mut();
        }
        self.raw.as_ptr()
    }

    /// Give up ownership: the caller must destroy the communicator. Null
    /// when it was aborted (nothing is left to destroy).
    pub fn into_raw(mut self) -> sys::ncclComm_t {
        let raw = self.as_raw();
        // Leave the clique: the caller's later calls are not compared.
        drop(self.member.take());
        std::mem::forget(self);
        raw
    }

    /// The communicator, or an error once it was aborted, poisoned, or
    /// while an abort of its split family runs.
    pub(crate) fn live(&self) -> Result<sys::ncclComm_t> {
        let raw = self.usable()?;
        self.refuse_family_abort()?;
        Ok(raw)
    }

    /// The communicator, or an error once it was aborted or poisoned.
    fn usable(&self) -> Result<sys::ncclComm_t> {
        if self.poisoned.get() {
            return Err(Error::invalid(
                "communicator",
                "failed in a group (non-blocking: NCCL keeps it in its error state for \
                 good); abort it (or drop it) and make a new one",
                format!("rank {} of {}", self.rank(), self.size()),
            ));
        }
        if self.aborted.get() {
            return Err(Error::invalid(
                "communicator",
                "was aborted (after an error or a deadline); make a new one",
                format!("rank {} of {}", self.rank(), self.size()),
            ));
        }
        Ok(self.raw.as_ptr())
    }

    /// Take this communicator's split family for the calling thread, for
    /// the whole of an NCCL call (NCCL forbids members that share
    /// resources to be used in parallel): waits at most
    /// [`timeout`](Self::timeout) for another thread's call of the family
    /// to return; refused at once while an abort of a member runs.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the communicator.
    pub(crate) fn enter_family(&self) -> Result<FamilyUse> {
        self.family
            .enter(false, self.timeout)
            .map_err(|b| self.family_busy(b))
    }

    /// The error of a family that could not be taken.
    pub(crate) fn family_busy(&self, b: Busy) -> Error {
        let why = match b {
            Busy::Aborting => {
                "must not be used while a communicator it was split from, or split off, is \
                 being aborted (NCCL forbids it when they share resources); the abort still \
                 runs in the background: retry later, or drop this one"
            }
            Busy::Held => {
                "must not be used while a communicator it was split from, or split off, is in \
                 an NCCL call on another thread (NCCL forbids it when they share resources), \
                 and that call did not return within the communicator's timeout"
            }
        };
        Error::invalid(
            "communicator",
            why,
            format!("rank {} of {}", self.rank(), self.size()),
        )
    }

    /// Refuse while an abort of a communicator of this one's split family
    /// runs (see [`Family`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the communicator.
    fn refuse_family_abort(&self) -> Result<()> {
        if self.family.aborting() {
            return Err(self.family_busy(Busy::Aborting));
        }
        Ok(())
    }

    /// Whether NCCL may hold a job of it in this thread's storage (tests).
    #[cfg(test)]
    pub(crate) fn job_linked(&self) -> bool {
        self.job_linked.get()
    }

    /// Its split family.
    pub(crate) fn family(&self) -> &Arc<Family> {
        &self.family
    }

    /// This process's rank.
    #[doc(alias = "ncclCommUserRank")]
    pub fn rank(&self) -> usize {
        self.ranks.rank()
    }

    /// The number of ranks.
    #[doc(alias = "ncclCommCount")]
    pub fn size(&self) -> usize {
        self.ranks.size()
    }

    /// Rank and size, with the argument rules of every collective.
    pub fn ranks(&self) -> Ranks {
        self.ranks
    }

    /// The device this rank runs on, made current on the calling thread
    /// (work for this communicator must be queued with it current).
    ///
    /// # Errors
    /// As [`Device::new`].
    #[doc(alias = "ncclCommCuDevice")]
    pub fn device(&self) -> Result<Device> {
        Device::new(self.device)
    }

    /// The CUDA ordinal of this rank's device (no call made).
    pub fn device_ordinal(&self) -> usize {
        self.device
    }

    /// Whether this communicator is known to be non-blocking (made by
    /// [`init_rank_timeout`](Self::init_rank_timeout), split from one, or
    /// NCCL answered `ncclInProgress`).
    pub fn is_non_blocking(&self) -> bool {
        self.mode.get() == Mode::NonBlocking
    }

    /// Whether this communicator was aborted (by [`wait`](Self::wait), or
    /// by a non-blocking call that failed or passed its deadline); it then
    /// refuses every call.
    pub fn is_aborted(&self) -> bool {
        self.aborted.get()
    }

    /// The deadline of this communicator's own polling: `ncclInProgress`
    /// answers of a non-blocking communicator, and its finalize in `Drop`.
    /// [`DEFAULT_COMM_TIMEOUT`](super::DEFAULT_COMM_TIMEOUT) unless set.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Set [`timeout`](Self::timeout).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Compare every direct call of this communicator with the same call of
    /// every other rank before issuing it (or stop): the ranks exchange a
    /// fingerprint of the call (kind, element type, count, reduction, root;
    /// the size in bytes of a send or recv with its partner) through NCCL,
    /// wait for it within [`timeout`](Self::timeout), and all refuse the
    /// call with [`Error::Mismatch`] naming both calls when any differs,
    /// launching nothing. This checks what the crate cannot check across
    /// processes otherwise (see the type's docs), at the cost of one more
    /// NCCL call and a host wait per call: a debugging aid. It makes this
    /// communicator's device current on the calling thread.
    ///
    /// **Every rank must turn it on** (and at the same point of its calls):
    /// the exchange is itself a collective, which a rank without it would
    /// pair with its next call. Calls inside a [`group`](super::group) are
    /// not exchanged (ranks in this process are compared all the same).
    ///
    /// **Group your sends and recvs.** With the check on, each *direct*
    /// [`send`](Self::send) or [`recv`](Self::recv) first swaps sizes with
    /// its peer and waits for the answer on the host, so it returns only
    /// once the peer has reached its matching call. Direct calls that NCCL
    /// would run concurrently then wait on each other: in a ring where
    /// every rank calls `send(rank + 1)` then `recv(rank - 1)`, each send
    /// waits for a peer that is itself waiting in its own send, until
    /// [`timeout`](Self::timeout) passes and the communicator is aborted.
    /// Put such calls in one [`group`](super::group) (as NCCL asks for
    /// concurrent point-to-point calls anyway); pairs that meet in the same
    /// order on both sides (rank a sends while rank b receives) work
    /// directly.
    pub fn set_check_agreement(&mut self, on: bool) {
        self.check_agreement = on;
    }

    /// Whether [`set_check_agreement`](Self::set_check_agreement) is on.
    pub fn checks_agreement(&self) -> bool {
        self.check_agreement
    }

    /// How NCCL answers this communicator's calls, as far as known.
    pub(crate) fn mode(&self) -> Mode {
        self.mode.get()
    }

    /// Made by a blocking call: blocking, unless NCCL was seen answering
    /// `ncclInProgress` (`NCCL_COMM_BLOCKING=0` overrides the default).
    fn known_blocking(&self) {
        if self.mode.get() == Mode::Unknown {
            self.mode.set(Mode::Blocking);
        }
    }

    pub(crate) fn mark_non_blocking(&self) {
        self.mode.set(Mode::NonBlocking);
    }

    /// Abort now (once); later calls are refused.
    /// The abort is bounded by [`ABORT_LIMIT`] (see [`abort_bounded`]);
    /// `false` when it had not ended by then.
    /// Before NCCL 2.27, a communicator whose job NCCL may still hold in
    /// this thread's storage is aborted on this thread, without a bound:
    /// the abort joins that job, which only this thread may do safely (see
    /// [`ABORT_LIMIT`]). This rank leaves its clique (the others no longer
    /// wait for its calls). The caller holds the family ([`enter_family`](Self::enter_family)),
    /// except a poll that could not take it (see [`poll_with`](Self::poll_with)).
    pub(super) fn abort_now(&self) -> bool {
        if !self.aborted.replace(true) {
            if let Some(m) = &self.member {
                m.leave();
            }
            let raw = self.raw.as_ptr();
            if abort_here(self.job_linked.get()) {
                let _running = self.family.begin_abort();
                // SAFETY: live and owned; from here on `aborted` keeps every
                // path from using `raw` again.
                unsafe { abort_raw(raw) };
                return true;
            }
            // SAFETY: as above; no job of it is held in this thread's
            // storage (none linked, or NCCL 2.27+ keeps it on the heap).
            return unsafe { abort_bounded(raw, ABORT_LIMIT, &self.family) };
        }
        true
    }

    /// Abort after a call failed or timed out, and return only when NCCL
    /// can no longer launch that call's work. The call's buffers are
    /// borrowed only until the call returns, and while its group job is
    /// linked NCCL's job thread may still enqueue its kernels (NCCL 2.27+
    /// `groupLaunch` does not check the abort flag before it launches;
    /// `ncclCommAbort` returns only once it has joined the job). So when
    /// the bounded abort ([`ABORT_LIMIT`]) gives up with the job linked, this
    /// waits for the abort without a bound: a hang rather than kernels on
    /// freed memory.
    fn abort_for_call(&self) {
        let linked = self.job_linked.get();
        if !self.abort_now() && linked {
            self.family.wait_aborts_end();
        }
    }

    /// The result `r` of `call`: `ncclInProgress` (a non-blocking
    /// communicator) is polled until NCCL is done, within
    /// [`timeout`](Self::timeout); an asynchronous failure, the deadline, or
    /// a poll that fails aborts the communicator.
    pub(crate) fn finish(&self, call: &'static str, r: sys::ncclResult_t) -> Result<()> {
        if r == sys::ncclResult_t::ncclSuccess {
            return Ok(());
        }
        if r != sys::ncclResult_t::ncclInProgress {
            return Err(self.annotate(nccl_error(call, r)));
        }
        self.mark_non_blocking();
        self.poll(call)
    }

    /// Poll until NCCL's last operation on this communicator is done
    /// (`ncclCommGetAsyncError` no longer `ncclInProgress`; a blocking
    /// communicator answers at once), within [`timeout`](Self::timeout).
    /// On an asynchronous failure, at the deadline, or when the poll itself
    /// fails, the communicator is aborted (joining NCCL's threads, so
    /// nothing of the operation runs on afterwards) and the error returned.
    ///
    /// An abort of another member of its split family that began after the
    /// call was issued does not stop the poll (the call's job would stay in
    /// this thread's storage): it is waited for, at most [`ABORT_LIMIT`],
    /// then this communicator is settled; past that it is aborted (on this
    /// thread where NCCL's job requires it).
    pub(crate) fn poll(&self, call: &'static str) -> Result<()> {
        self.poll_with(&progress::Nccl, call)
    }

    /// [`poll`](Self::poll) through `calls` (a test double in tests).
    pub(crate) fn poll_with<A: progress::JobCalls>(
        &self,
        calls: &A,
        call: &'static str,
    ) -> Result<()> {
        // Not `live`: a family abort is waited for below, not refused.
        let raw = self.usable()?;
        // Until seen ready, NCCL may hold the call's job (non-blocking
        // communicators, or not known to be blocking); a blocking
        // communicator's groups never leave one.
        if self.mode.get() != Mode::Blocking {
            self.job_linked.set(true);
        }
        let _use = match self.family.enter(true, ABORT_LIMIT) {
            Ok(u) => u,
            Err(b) => {
                let what = match b {
                    Busy::Aborting => "being aborted",
                    Busy::Held => "in a call on another thread",
                };
                self.abort_for_call();
                return Err(Error::invalid(
                    "communicator",
                    format!(
                        "could not settle its {call}: another communicator of its split family \
                         was {what} for more than {} s (NCCL forbids using both at once); this \
                         one was aborted",
                        ABORT_LIMIT.as_secs()
                    ),
                    format!("rank {} of {}", self.rank(), self.size()),
                ));
            }
        };
        let deadline = Deadline::after(self.timeout);
        // SAFETY: `raw` is live; no group is open on this thread (the
        // group's end returned before its settle).
        let settled = match unsafe { progress::settle_with(calls, raw, &deadline) } {
            Ok(s) => s,
            Err(e) => {
                let e = self.annotate(e);
                self.abort_for_call();
                return Err(e.with_context(format!(
                    "polling {call} failed; the communicator was aborted"
                )));
            }
        };
        match settled {
            Settled::Ready => {
                // Settled on this thread (progress::release_job).
                self.job_linked.set(false);
                Ok(())
            }
            Settled::Failed(code) => {
                let e = self.annotate(nccl_error(call, code));
                self.abort_for_call();
                Err(e.with_context("asynchronous failure; the communicator was aborted"))
            }
            Settled::TimedOut => {
                let waited = deadline.waited();
                self.abort_for_call();
                Err(Error::Timeout {
                    what: format!(
                        "{call} on a non-blocking communicator to finish; \
                         the communicator was aborted"
                    ),
                    waited,
                    rank: u32::try_from(self.rank()).ok(),
                })
            }
        }
    }

    /// This rank's device, as the runtime's value (no call made).
    pub(crate) fn runtime_device(&self) -> Device {
        Device::from_runtime(c_int::try_from(self.device).unwrap_or(c_int::MAX))
    }

    /// The stream of a call must be a real stream or the legacy default
    /// stream (not a per-thread default stream: a non-blocking group is
    /// launched from NCCL's own thread, where `cudaStreamPerThread` names
    /// that thread's queue), usable from this thread, and on this
    /// communicator's device.
    ///
    /// The returned hold counts this call as queueing on `stream` (a
    /// [`Stream::capture`] of it cannot begin meanwhile, so the NCCL work
    /// never silently joins another thread's graph): keep it until the
    /// enqueue returned.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming `stream` for a per-thread default
    /// stream; [`Error::WrongThread`]; [`Error::DeviceMismatch`];
    /// [`Error::CaptureUnsafe`] while another thread captures `stream`.
    pub(crate) fn check_stream(&self, stream: &Stream) -> Result<QueueHold> {
        if stream.thread().is_some() {
            return Err(Error::invalid(
                "stream",
                "must not be a per-thread default stream (Stream::per_thread) in an NCCL call: \
                 NCCL may launch the work from its own thread (non-blocking communicators), \
                 where that handle names another queue; use a created stream",
                format!("{stream:?}"),
            ));
        }
        let hold = check_stream_thread("the stream of an NCCL call", stream)?;
        check_device(
            || format!("the stream of an NCCL call on rank {}", self.rank()),
            self.runtime_device(),
            stream.device(),
        )?;
        Ok(hold)
    }

    /// The buffers of a call must be on this communicator's device.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] naming the argument and the call.
    pub(crate) fn check_buffers(&self, op: &str, args: &[(&str, Option<Device>)]) -> Result<()> {
        check_args(op, self.runtime_device(), args)
    }

    /// Flush outstanding work and release the communicator's resources,
    /// waiting for the peers (`ncclCommFinalize`); then destroy it. A
    /// non-blocking communicator is polled within its
    /// [`timeout`](Self::timeout); a blocking one waits without a deadline
    /// ([`wait`](Self::wait) first to bound it).
    ///
    /// # Errors
    /// [`Error::InGroup`] inside a [`group`](super::group) (the
    /// communicator is then dropped: see the type's docs); [`Error::Nccl`];
    /// [`Error::Timeout`]; [`Error::InvalidArgument`] while an abort of a
    /// communicator of its split family runs, or when another thread's call
    /// of the family holds it past [`timeout`](Self::timeout) (it is then
    /// dropped: see the type's docs on splits). The communicator is destroyed (or aborted)
    /// either way.
    #[doc(alias = "ncclCommFinalize")]
    pub fn finalize(self) -> Result<()> {
        depth::refuse("Communicator::finalize", WHY_LIFECYCLE)?;
        if self.aborted.get() {
            return Ok(());
        }
        let _use = self.enter_family()?;
        let raw = self.live()?;
        let api = api()?;
        // SAFETY: the communicator is live and owned by `self`.
        let r = unsafe { api.ncclCommFinalize(raw) }?;
        match self.finish("ncclCommFinalize", r) {
            Ok(()) => self.destroy(),
            Err(e) => {
                let _ = self.abort();
                Err(e)
            }
        }
    }

    /// Destroy the communicator, reporting failure (`ncclCommDestroy`). It
    /// waits for this rank's queued work, without a deadline: with a dead
    /// peer, [`wait`](Self::wait) first (which aborts instead of hanging).
    /// Nothing is left to destroy after an abort: `Ok`.
    ///
    /// # Errors
    /// [`Error::InGroup`] inside a [`group`](super::group) (the
    /// communicator is then dropped: see the type's docs); [`Error::Nccl`];
    /// [`Error::InvalidArgument`] while an abort of a communicator of its
    /// split family runs, or when another thread's call of the family holds
    /// it past [`timeout`](Self::timeout) (it is then dropped: see the
    /// type's docs on splits).
    #[doc(alias = "ncclCommDestroy")]
    pub fn destroy(self) -> Result<()> {
        depth::refuse("Communicator::destroy", WHY_LIFECYCLE)?;
        let _use = self.enter_family()?;
        let rank = self.rank();
        let raw = self.into_raw();
        if raw.is_null() {
            return Ok(());
        }
        let api = api()?;
        // SAFETY: `raw` is live and owned; ownership ends here.
        unsafe { nccl_call!(api, ncclCommDestroy(raw)) }.map_err(|e| with_rank(e, rank))
    }

    /// Stop all work and free the communicator at once, without waiting
    /// for the peers (`ncclCommAbort`): the way out after an error. `Ok`
    /// when it was aborted already.
    ///
    /// # Errors
    /// [`Error::InGroup`] inside a [`group`](super::group) (the
    /// communicator is then dropped, which aborts it anyway);
    /// [`Error::Nccl`]; [`Error::InvalidArgument`] while an abort of
    /// another communicator of its split family runs, or when another
    /// thread's call of the family holds it past [`timeout`](Self::timeout)
    /// (it is then dropped: see the type's docs on splits).
    #[doc(alias = "ncclCommAbort")]
    pub fn abort(self) -> Result<()> {
        depth::refuse("Communicator::abort", WHY_LIFECYCLE)?;
        if self.aborted.get() {
            return Ok(());
        }
        let family = Arc::clone(&self.family);
        let _use = self.enter_family()?;
        let rank = self.rank();
        let raw = self.into_raw();
        if raw.is_null() {
            return Ok(());
        }
        let api = api()?;
        let _running = family.begin_abort();
        // SAFETY: `raw` is live and owned; ownership ends here.
        unsafe { nccl_call!(api, ncclCommAbort(raw)) }.map_err(|e| with_rank(e, rank))
    }

    /// Add this rank and `ncclGetLastError` to an NCCL error.
    pub(crate) fn annotate(&self, e: Error) -> Error {
        let e = with_rank(e, self.rank());
        match e {
            Error::Nccl {
                call,
                code,
                name,
                text: t,
                last_error: None,
                rank,
                context,
            } => {
                let last = api().ok().and_then(|api| {
                    // SAFETY: the communicator is live; the returned string
                    // is NCCL's and is copied at once.
                    unsafe { api.ncclGetLastError(self.as_raw()) }
                        .ok()
                        .map(text)
                        .filter(|s| !s.trim().is_empty())
                });
                Error::Nccl {
                    call,
                    code,
                    name,
                    text: t,
                    last_error: last.map(|s| s.trim().into()),
                    rank,
                    context,
                }
            }
            other => other,
        }
    }
}

pub(crate) fn with_rank(e: Error, r: usize) -> Error {
    match e {
        Error::Nccl {
            call,
            code,
            name,
            text,
            last_error,
            rank: _,
            context,
        } => Error::Nccl {
            call,
            code,
            name,
            text,
            last_error,
            rank: u32::try_from(r).ok(),
            context,
        },
        other => other,
    }
}
