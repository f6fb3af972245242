//! Direct collectives and point-to-point calls: one call, one launch, on
//! the communicator's stream order. (Several calls launched together go
//! through [`group`](super::group).)

use std::mem::ManuallyDrop;

use super::clique;
use super::comm::Communicator;
use super::depth;
use super::op::{Call, NcclType, ReduceOp};
use super::sys;
use crate::error::{Error, Result};
use crate::runtime::{DeviceSlice, DeviceSliceMut, Stream};
use crate::sys::cudart::cudaStream_t;

/// How a checked call reaches NCCL: [`Call::launch`], or nothing
/// ([`LaunchChecks`], the benchmark's).
type Launcher = unsafe fn(&Call, sys::ncclComm_t, cudaStream_t) -> Result<sys::ncclResult_t>;

/// Issue one checked call by itself, through `launch`.
///
/// # Safety
/// The call's pointers come from views borrowed for the whole calling
/// method and were checked against its counts; `launch` passes them on
/// to NCCL unchanged, or to nothing.
unsafe fn issue_via(
    comm: &Communicator,
    call: Call,
    stream: &Stream,
    launch: Launcher,
) -> Result<()> {
    if !comm.checks_agreement() {
        // Nothing to exchange first: `issue_checked_via` takes the family,
        // checks and holds the stream and checks the communicator, in this
        // order, once (taking them here as well doubled the host cost).
        // SAFETY: as this function's caller guarantees.
        return unsafe { issue_checked_via(comm, call, stream, launch) };
    }
    // Held through the exchange and the launch: no capture of the stream
    // begins meanwhile, and no other member of the split family is used.
    let _use = comm.enter_family()?;
    let _hold = comm.check_stream(stream)?;
    comm.live()?;
    comm.agree_across(&call, stream)?;
    // SAFETY: as this function's caller guarantees.
    unsafe { issue_checked_via(comm, call, stream, launch) }
}

/// [`issue_via`] through [`Call::launch`], without the opt-in comparison
/// across processes.
///
/// # Safety
/// As [`issue_via`].
pub(super) unsafe fn issue_checked(comm: &Communicator, call: Call, stream: &Stream) -> Result<()> {
    // SAFETY: as this function's caller guarantees.
    unsafe { issue_checked_via(comm, call, stream, Call::launch) }
}

/// [`issue_checked`] through `launch`.
///
/// # Safety
/// As [`issue_via`].
unsafe fn issue_checked_via(
    comm: &Communicator,
    call: Call,
    stream: &Stream,
    launch: Launcher,
) -> Result<()> {
    // Held until the enqueue (and its poll) returned: a capture of the
    // stream cannot begin between this check and the launch, and no other
    // member of the split family is used meanwhile (re-entrant from `issue`).
    let _use = comm.enter_family()?;
    let _hold = comm.check_stream(stream)?;
    let raw = comm.live()?;
    // Compared with the same call of the ranks in this process (calls of
    // 0 elements too, so the positions stay in step), before NCCL sees it.
    if let Some(m) = comm.member() {
        clique::post(&[(m, &call)])?;
    }
    if call.count() == 0 {
        return Ok(());
    }
    // SAFETY: the caller vouches for the buffers; `raw` is live and the
    // stream is borrowed for the call. Device memory is freed only after
    // queued work (cudaFree synchronizes; stream-ordered frees are ordered
    // after it).
    let r = unsafe { launch(&call, raw, stream.as_raw()) };
    let r = match r {
        Ok(r) => r,
        Err(e) => {
            comm.out_of_step(&call);
            return Err(e);
        }
    };
    if r != sys::ncclResult_t::ncclSuccess && r != sys::ncclResult_t::ncclInProgress {
        // Posted, not launched: the ranks of this process are out of step.
        comm.out_of_step(&call);
    }
    comm.finish(call.op.nccl_name(), r)
        .map_err(|e| e.with_context(call.describe()))
}

/// The direct (not grouped) launch of a checked call, through `$launch`
/// ([`Call::launch`] unless given: [`LaunchChecks`] passes [`no_launch`]).
macro_rules! run {
    ($self:ident, $stream:ident, $op:expr) => {
        run!($self, $stream, $op, Call::launch)
    };
    ($self:ident, $stream:ident, $op:expr, $launch:expr) => {{
        depth::refuse("a Communicator collective", depth::WHY_DIRECT)?;
        let op = $op?;
        // SAFETY: the op's pointers come from views borrowed for this call
        // and checked against the counts; `$launch` is `Call::launch` or
        // `no_launch` (which passes nothing on).
        unsafe { issue_via($self, Call::new::<T>(op), $stream, $launch) }
    }};
}

/// The launcher of [`LaunchChecks`]: NCCL is not called and nothing is
/// dereferenced; the answer is NCCL's success.
///
/// # Safety
/// None needed (nothing is touched); `unsafe` to be a [`Launcher`].
unsafe fn no_launch(_: &Call, _: sys::ncclComm_t, _: cudaStream_t) -> Result<sys::ncclResult_t> {
    Ok(sys::ncclResult_t::ncclSuccess)
}

/// Benchmark aid (`examples/bench_launch.rs`, issue 34): the host work of
/// a direct collective up to the library call, with no NCCL and no
/// device. It holds a communicator that NCCL never sees (rank 0 of 1 on
/// device 0; its calls reach a launcher that calls nothing), and runs the
/// same code as [`Communicator::all_reduce`] (one body, given another
/// launcher): the group refusal, the buffers' devices and lengths, the
/// split family taken, the stream's checks and queue hold, the
/// communicator's state; then, in place of `ncclAllReduce`, nothing. The
/// communicator is never dropped (its drop would hand its dangling handle
/// to NCCL): dropping a `LaunchChecks` leaks its few bytes.
#[doc(hidden)]
#[derive(Debug)]
pub struct LaunchChecks {
    comm: ManuallyDrop<Communicator>,
}

impl LaunchChecks {
    /// The checks of rank 0 of 1 on device 0.
    ///
    /// # Errors
    /// None in practice (the rank and size are valid).
    pub fn new() -> Result<Self> {
        Ok(LaunchChecks {
            comm: Communicator::never_launched()?,
        })
    }

    /// The checks of [`Communicator::all_reduce`], then no launch.
    ///
    /// # Errors
    /// As [`Communicator::all_reduce`] for the checks.
    pub fn all_reduce<'s, 'r, T: NcclType>(
        &self,
        send: impl Into<DeviceSlice<'s, T>>,
        recv: impl Into<DeviceSliceMut<'r, T>>,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<()> {
        self.comm.all_reduce_via(send, recv, op, stream, no_launch)
    }
}

/// Sending to or receiving from oneself hangs unless the matching call is
/// in the same group.
fn refuse_self(comm: &Communicator, peer: usize) -> Result<()> {
    if peer == comm.rank() {
        return Err(Error::invalid(
            "peer",
            format!(
                "must not be this rank ({}) outside a group: a send to oneself completes only \
                 with its matching recv in the same nccl::group",
                comm.rank()
            ),
            peer,
        ));
    }
    Ok(())
}

impl Communicator {
    /// Reduce `send` across all ranks with `op`; every rank receives the
    /// result in `recv` (`ncclAllReduce`). Enqueued on `stream`.
    ///
    /// # Errors
    /// [`Error::Mismatch`](crate::Error::Mismatch) when the lengths differ
    /// (before NCCL is called); [`Error::Nccl`](crate::Error::Nccl) naming
    /// the rank and NCCL's text.
    /// Like every direct call: [`Error::InGroup`](crate::Error::InGroup)
    /// inside a [`group`](super::group); [`Error::DeviceMismatch`](crate::Error::DeviceMismatch)
    /// when the stream or a buffer is on another device than the
    /// communicator; [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// naming `stream` for [`Stream::per_thread`](crate::runtime::Stream::per_thread)
    /// (see [`Communicator`]); [`Error::Timeout`](crate::Error::Timeout) when a
    /// non-blocking communicator passes its [`timeout`](Communicator::timeout)
    /// (it is then aborted).
    #[doc(alias = "ncclAllReduce")]
    pub fn all_reduce<'s, 'r, T: NcclType>(
        &self,
        send: impl Into<DeviceSlice<'s, T>>,
        recv: impl Into<DeviceSliceMut<'r, T>>,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<()> {
        self.all_reduce_via(send, recv, op, stream, Call::launch)
    }

    /// [`all_reduce`](Self::all_reduce) through `launch` (`Call::launch`,
    /// or [`LaunchChecks`]'s `no_launch`): one body for both.
    fn all_reduce_via<'s, 'r, T: NcclType>(
        &self,
        send: impl Into<DeviceSlice<'s, T>>,
        recv: impl Into<DeviceSliceMut<'r, T>>,
        op: ReduceOp,
        stream: &Stream,
        launch: Launcher,
    ) -> Result<()> {
        let (send, mut recv) = (send.into(), recv.into());
        run!(
            self,
            stream,
            self.op_all_reduce(&send, &mut recv, op),
            launch
        )
    }

    /// [`all_reduce`](Self::all_reduce) with the result written over the input.
    ///
    /// # Errors
    /// [`Error::Nccl`](crate::Error::Nccl).
    /// Like every direct call: [`Error::InGroup`](crate::Error::InGroup)
    /// inside a [`group`](super::group); [`Error::DeviceMismatch`](crate::Error::DeviceMismatch)
    /// when the stream or a buffer is on another device than the
    /// communicator; [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// naming `stream` for [`Stream::per_thread`](crate::runtime::Stream::per_thread)
    /// (see [`Communicator`]); [`Error::Timeout`](crate::Error::Timeout) when a
    /// non-blocking communicator passes its [`timeout`](Communicator::timeout)
    /// (it is then aborted).
    #[doc(alias = "ncclAllReduce")]
    pub fn all_reduce_in_place<'b, T: NcclType>(
        &self,
        buf: impl Into<DeviceSliceMut<'b, T>>,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<()> {
        let mut buf = buf.into();
        run!(self, stream, self.op_all_reduce_in_place(&mut buf, op))
    }

    /// Copy `send` of rank `root` into `recv` of every rank
    /// (`ncclBroadcast`; `send` is read on `root` only).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `root`
    /// is not a rank; [`Error::Mismatch`](crate::Error::Mismatch) when the
    /// lengths differ; [`Error::Nccl`](crate::Error::Nccl).
    /// Like every direct call: [`Error::InGroup`](crate::Error::InGroup)
    /// inside a [`group`](super::group); [`Error::DeviceMismatch`](crate::Error::DeviceMismatch)
    /// when the stream or a buffer is on another device than the
    /// communicator; [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// naming `stream` for [`Stream::per_thread`](crate::runtime::Stream::per_thread)
    /// (see [`Communicator`]); [`Error::Timeout`](crate::Error::Timeout) when a
    /// non-blocking communicator passes its [`timeout`](Communicator::timeout)
    /// (it is then aborted).
    #[doc(alias = "ncclBroadcast")]
    pub fn broadcast<'s, 'r, T: NcclType>(
        &self,
        send: impl Into<DeviceSlice<'s, T>>,
        recv: impl Into<DeviceSliceMut<'r, T>>,
        root: usize,
        stream: &Stream,
    ) -> Result<()> {
        let (send, mut recv) = (send.into(), recv.into());
        run!(self, stream, self.op_broadcast(&send, &mut recv, root))
    }

    /// [`broadcast`](Self::broadcast) within one buffer: `root`'s contents
    /// replace everyone's.
    ///
    /// # Errors
    /// As [`broadcast`](Self::broadcast).
    /// Like every direct call: [`Error::InGroup`](crate::Error::InGroup)
    /// inside a [`group`](super::group); [`Error::DeviceMismatch`](crate::Error::DeviceMismatch)
    /// when the stream or a buffer is on another device than the
    /// communicator; [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// naming `stream` for [`Stream::per_thread`](crate::runtime::Stream::per_thread)
    /// (see [`Communicator`]); [`Error::Timeout`](crate::Error::Timeout) when a
    /// non-blocking communicator passes its [`timeout`](Communicator::timeout)
    /// (it is then aborted).
    #[doc(alias = "ncclBcast")]
    pub fn broadcast_in_place<'b, T: NcclType>(
        &self,
        buf: impl Into<DeviceSliceMut<'b, T>>,
        root: usize,
        stream: &Stream,
    ) -> Result<()> {
        let mut buf = buf.into();
        run!(self, stream, self.op_broadcast_in_place(&mut buf, root))
    }

    /// Reduce `send` across all ranks with `op` into `recv` of rank `root`
    /// (`ncclReduce`; `recv` is written on `root` only).
    ///
    /// # Errors
    /// As [`broadcast`](Self::broadcast).
    /// Like every direct call: [`Error::InGroup`](crate::Error::InGroup)
    /// inside a [`group`](super::group); [`Error::DeviceMismatch`](crate::Error::DeviceMismatch)
    /// when the stream or a buffer is on another device than the
    /// communicator; [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// naming `stream` for [`Stream::per_thread`](crate::runtime::Stream::per_thread)
    /// (see [`Communicator`]); [`Error::Timeout`](crate::Error::Timeout) when a
    /// non-blocking communicator passes its [`timeout`](Communicator::timeout)
    /// (it is then aborted).
    #[doc(alias = "ncclReduce")]
    pub fn reduce<'s, 'r, T: NcclType>(
        &self,
        send: impl Into<DeviceSlice<'s, T>>,
        recv: impl Into<DeviceSliceMut<'r, T>>,
        op: ReduceOp,
        root: usize,
        stream: &Stream,
    ) -> Result<()> {
        let (send, mut recv) = (send.into(), recv.into());
        run!(self, stream, self.op_reduce(&send, &mut recv, op, root))
    }

    /// [`reduce`](Self::reduce) with the result written over `root`'s input.
    ///
    /// # Errors
    /// As [`broadcast`](Self::broadcast).
    /// Like every direct call: [`Error::InGroup`](crate::Error::InGroup)
    /// inside a [`group`](super::group); [`Error::DeviceMismatch`](crate::Error::DeviceMismatch)
    /// when the stream or a buffer is on another device than the
    /// communicator; [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// naming `stream` for [`Stream::per_thread`](crate::runtime::Stream::per_thread)
    /// (see [`Communicator`]); [`Error::Timeout`](crate::Error::Timeout) when a
    /// non-blocking communicator passes its [`timeout`](Communicator::timeout)
    /// (it is then aborted).
    #[doc(alias = "ncclReduce")]
    pub fn reduce_in_place<'b, T: NcclType>(
        &self,
        buf: impl Into<DeviceSliceMut<'b, T>>,
        op: ReduceOp,
        root: usize,
        stream: &Stream,
    ) -> Result<()> {
        let mut buf = buf.into();
        run!(self, stream, self.op_reduce_in_place(&mut buf, op, root))
    }

    /// Gather every rank's `send` (n elements) into `recv` (size x n, in
    /// rank order) on every rank (`ncclAllGather`).
    ///
    /// # Errors
    /// [`Error::Mismatch`](crate::Error::Mismatch) when `recv` is not
    /// `size * send.len()`; [`Error::Nccl`](crate::Error::Nccl).
    /// Like every direct call: [`Error::InGroup`](crate::Error::InGroup)
    /// inside a [`group`](super::group); [`Error::DeviceMismatch`](crate::Error::DeviceMismatch)
    /// when the stream or a buffer is on another device than the
    /// communicator; [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// naming `stream` for [`Stream::per_thread`](crate::runtime::Stream::per_thread)
    /// (see [`Communicator`]); [`Error::Timeout`](crate::Error::Timeout) when a
    /// non-blocking communicator passes its [`timeout`](Communicator::timeout)
    /// (it is then aborted).
    #[doc(alias = "ncclAllGather")]
    pub fn all_gather<'s, 'r, T: NcclType>(
        &self,
        send: impl Into<DeviceSlice<'s, T>>,
        recv: impl Into<DeviceSliceMut<'r, T>>,
        stream: &Stream,
    ) -> Result<()> {
        let (send, mut recv) = (send.into(), recv.into());
        run!(self, stream, self.op_all_gather(&send, &mut recv))
    }

    /// [`all_gather`](Self::all_gather) within one buffer of size x n: this
    /// rank's block (`rank * n ..`) is its input.
    ///
    /// # Errors
    /// [`Error::Mismatch`](crate::Error::Mismatch) when the length is not a
    /// multiple of the size; [`Error::Nccl`](crate::Error::Nccl).
    /// Like every direct call: [`Error::InGroup`](crate::Error::InGroup)
    /// inside a [`group`](super::group); [`Error::DeviceMismatch`](crate::Error::DeviceMismatch)
    /// when the stream or a buffer is on another device than the
    /// communicator; [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// naming `stream` for [`Stream::per_thread`](crate::runtime::Stream::per_thread)
    /// (see [`Communicator`]); [`Error::Timeout`](crate::Error::Timeout) when a
    /// non-blocking communicator passes its [`timeout`](Communicator::timeout)
    /// (it is then aborted).
    #[doc(alias = "ncclAllGather")]
    pub fn all_gather_in_place<'b, T: NcclType>(
        &self,
        buf: impl Into<DeviceSliceMut<'b, T>>,
        stream: &Stream,
    ) -> Result<()> {
        let mut buf = buf.into();
        run!(self, stream, self.op_all_gather_in_place(&mut buf))
    }

    /// Reduce `send` (size x n) across ranks with `op`; rank `r` receives
    /// block `r` of the result in `recv` (n) (`ncclReduceScatter`).
    ///
    /// # Errors
    /// [`Error::Mismatch`](crate::Error::Mismatch) when `send` is not
    /// `size * recv.len()`; [`Error::Nccl`](crate::Error::Nccl).
    /// Like every direct call: [`Error::InGroup`](crate::Error::InGroup)
    /// inside a [`group`](super::group); [`Error::DeviceMismatch`](crate::Error::DeviceMismatch)
    /// when the stream or a buffer is on another device than the
    /// communicator; [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// naming `stream` for [`Stream::per_thread`](crate::runtime::Stream::per_thread)
    /// (see [`Communicator`]); [`Error::Timeout`](crate::Error::Timeout) when a
    /// non-blocking communicator passes its [`timeout`](Communicator::timeout)
    /// (it is then aborted).
    #[doc(alias = "ncclReduceScatter")]
    pub fn reduce_scatter<'s, 'r, T: NcclType>(
        &self,
        send: impl Into<DeviceSlice<'s, T>>,
        recv: impl Into<DeviceSliceMut<'r, T>>,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<()> {
        let (send, mut recv) = (send.into(), recv.into());
        run!(self, stream, self.op_reduce_scatter(&send, &mut recv, op))
    }

    /// [`reduce_scatter`](Self::reduce_scatter) within one buffer of size x
    /// n: this rank's block (`rank * n ..`) receives its result.
    ///
    /// # Errors
    /// As [`all_gather_in_place`](Self::all_gather_in_place).
    /// Like every direct call: [`Error::InGroup`](crate::Error::InGroup)
    /// inside a [`group`](super::group); [`Error::DeviceMismatch`](crate::Error::DeviceMismatch)
    /// when the stream or a buffer is on another device than the
    /// communicator; [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// naming `stream` for [`Stream::per_thread`](crate::runtime::Stream::per_thread)
    /// (see [`Communicator`]); [`Error::Timeout`](crate::Error::Timeout) when a
    /// non-blocking communicator passes its [`timeout`](Communicator::timeout)
    /// (it is then aborted).
    #[doc(alias = "ncclReduceScatter")]
    pub fn reduce_scatter_in_place<'b, T: NcclType>(
        &self,
        buf: impl Into<DeviceSliceMut<'b, T>>,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<()> {
        let mut buf = buf.into();
        run!(self, stream, self.op_reduce_scatter_in_place(&mut buf, op))
    }

    /// Send `send` to rank `peer`, which must post a matching
    /// [`recv`](Self::recv) (`ncclSend`). To exchange in both directions
    /// without deadlock, post both inside one [`group`](super::group). With
    /// [`set_check_agreement`](Communicator::set_check_agreement) on, a
    /// direct send or recv waits on the host until its peer reaches the
    /// matching call: a ring of direct `send(i + 1); recv(i - 1)` then
    /// times out; group such calls.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `peer`
    /// is not a rank, or is this rank (a send to oneself needs its recv in
    /// the same group, where [`Group::send`](super::Group::send) allows it);
    /// [`Error::Nccl`](crate::Error::Nccl).
    /// Like every direct call: [`Error::InGroup`](crate::Error::InGroup)
    /// inside a [`group`](super::group); [`Error::DeviceMismatch`](crate::Error::DeviceMismatch)
    /// when the stream or a buffer is on another device than the
    /// communicator; [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// naming `stream` for [`Stream::per_thread`](crate::runtime::Stream::per_thread)
    /// (see [`Communicator`]); [`Error::Timeout`](crate::Error::Timeout) when a
    /// non-blocking communicator passes its [`timeout`](Communicator::timeout)
    /// (it is then aborted).
    #[doc(alias = "ncclSend")]
    pub fn send<'s, T: NcclType>(
        &self,
        send: impl Into<DeviceSlice<'s, T>>,
        peer: usize,
        stream: &Stream,
    ) -> Result<()> {
        let send = send.into();
        refuse_self(self, peer)?;
        run!(self, stream, self.op_send(&send, peer))
    }

    /// Receive `recv.len()` elements from rank `peer` (`ncclRecv`).
    ///
    /// # Errors
    /// As [`send`](Self::send).
    /// Like every direct call: [`Error::InGroup`](crate::Error::InGroup)
    /// inside a [`group`](super::group); [`Error::DeviceMismatch`](crate::Error::DeviceMismatch)
    /// when the stream or a buffer is on another device than the
    /// communicator; [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// naming `stream` for [`Stream::per_thread`](crate::runtime::Stream::per_thread)
    /// (see [`Communicator`]); [`Error::Timeout`](crate::Error::Timeout) when a
    /// non-blocking communicator passes its [`timeout`](Communicator::timeout)
    /// (it is then aborted).
    #[doc(alias = "ncclRecv")]
    pub fn recv<'r, T: NcclType>(
        &self,
        recv: impl Into<DeviceSliceMut<'r, T>>,
        peer: usize,
        stream: &Stream,
    ) -> Result<()> {
        let mut recv = recv.into();
        refuse_self(self, peer)?;
        run!(self, stream, self.op_recv(&mut recv, peer))
    }
}
