//! Group calls: several NCCL calls launched together, all or none.

use std::marker::PhantomData;

use super::comm::Communicator;
use super::depth;
use super::op::{Call, NcclType, Op, ReduceOp};
use super::record::{self, Exec, Recorded};
use crate::error::Result;
use crate::runtime::{DeviceSlice, DeviceSliceMut, Stream};

/// The calls of one [`group`]: each is checked and recorded as it is made,
/// and all are issued together when the closure returns `Ok`.
///
/// Every buffer, communicator and stream handed to a group is borrowed for
/// `'env`, the lifetime of the [`group`] call, because NCCL reads the
/// pointers only when the group ends.
#[derive(Debug)]
pub struct Group<'env> {
    calls: Vec<Recorded<'env>>,
    // Invariant in 'env, and neither Send nor Sync: the group belongs to the
    // thread that opened it (NCCL keeps group state per thread).
    _env: PhantomData<*mut &'env ()>,
}

/// Run `f` as one NCCL group (`ncclGroupStart` ... `ncclGroupEnd`).
///
/// Use a group to drive several communicators from one thread (one per
/// device, as from [`Communicator::init_all`]), to post matching sends and
/// receives without deadlock, or to fuse many small collectives into one
/// launch.
///
/// **All or nothing.** The calls made on the [`Group`] are checked and
/// recorded while `f` runs; NCCL sees none of them until `f` returns `Ok`.
/// Then this function issues `ncclGroupStart`, every recorded call and
/// `ncclGroupEnd`. When `f` returns `Err` (a check of this crate, a `?` of
/// the caller) or panics, nothing is launched and no NCCL group was ever
/// opened, so this rank never launches part of a group that the other
/// ranks posted in full. When NCCL itself refuses one of the calls, the
/// group is still ended and NCCL launches none of what it deferred to the
/// group's end; a collective on a communicator of one rank is not deferred
/// (NCCL 2.21 on, 2.28.9 included, issues it as a copy when it is called),
/// so one issued before the refused call has run, and the error names it.
/// (Like every
/// collective, this is per rank: a rank whose closure fails posts nothing,
/// and its peers' matching calls wait for it; bound that wait with
/// [`Communicator::wait`].)
///
/// **After a failed `ncclGroupEnd`** part of the group may be running (NCCL
/// launches communicator by communicator), waiting for peers that may never
/// come. Its buffers stay borrowed by that work: dropping a
/// [`DeviceBuffer`](crate::runtime::DeviceBuffer) then (`cudaFree`, which
/// waits for the whole device) blocks until it ends, so first
/// [`wait`](Communicator::wait) with a deadline (which aborts the
/// communicator and lets the stream drain) or abort the communicators.
/// Non-blocking communicators of a failed group are poisoned (see
/// [`Communicator::is_poisoned`]).
///
/// **Ranks in this process are compared** before anything is issued (see
/// [`Communicator`], "Counts agree across ranks"): a call that disagrees
/// with the same call of another rank of this process fails the group with
/// [`Error::Mismatch`](crate::Error::Mismatch), and nothing is launched.
///
/// Groups do not nest, and while `f` runs the calls that NCCL would defer
/// to the end of a group are refused with [`Error::InGroup`](crate::Error::InGroup):
/// the direct [`Communicator`] collectives, [`Communicator::init_rank`],
/// [`init_all`](Communicator::init_all), [`split`](Communicator::split),
/// [`finalize`](Communicator::finalize), [`destroy`](Communicator::destroy),
/// [`abort`](Communicator::abort) and [`wait`](Communicator::wait).
///
/// ```no_run
/// # fn demo(comm: &cudnn::nccl::Communicator, stream: &cudnn::runtime::Stream,
/// #         a: &cudnn::runtime::DeviceBuffer<f32>, b: &mut cudnn::runtime::DeviceBuffer<f32>)
/// #         -> cudnn::Result<()> {
/// let peer = (comm.rank() + 1) % comm.size();
/// let from = (comm.rank() + comm.size() - 1) % comm.size();
/// cudnn::nccl::group(|g| {
///     g.send(comm, a, peer, stream)?;
///     g.recv(comm, b, from, stream)
/// })?;
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`Error::InGroup`](crate::Error::InGroup) when a group is already being
/// recorded on this thread; the error of `f` (nothing launched);
/// [`Error::Mismatch`](crate::Error::Mismatch) when the sends to oneself
/// and receives from oneself of a communicator do not pair up byte for
/// byte (nothing launched); else the
/// error of the call NCCL refused, or of `ncclGroupEnd`
/// ([`Error::Nccl`](crate::Error::Nccl)), or
/// [`Error::Timeout`](crate::Error::Timeout) when a non-blocking
/// communicator did not finish launching within its
/// [`timeout`](Communicator::timeout).
#[doc(alias = "ncclGroupStart")]
#[doc(alias = "ncclGroupEnd")]
pub fn group<'env, R>(f: impl FnOnce(&mut Group<'env>) -> Result<R>) -> Result<R> {
    run(&mut record::Nccl, f)
}

/// [`group`] with the issuing done by `exec`.
pub(crate) fn run<'env, R>(
    exec: &mut dyn Exec,
    f: impl FnOnce(&mut Group<'env>) -> Result<R>,
) -> Result<R> {
    let recording = depth::enter()?;
    let mut g = Group {
        calls: Vec::new(),
        _env: PhantomData,
    };
    // A panic unwinds from here: `recording` ends, the record is dropped,
    // nothing was issued.
    let out = f(&mut g);
    drop(recording);
    let value = out?;
    record::issue_all(exec, &g.calls)?;
    Ok(value)
}

impl<'env> Group<'env> {
    fn queue<T: NcclType>(
        &mut self,
        comm: &'env Communicator,
        stream: &'env Stream,
        op: Op,
    ) -> Result<()> {
        comm.live()?;
        // Checked now for an early error; checked again, and held through
        // the launch, when the group is issued (`record::issue_all`).
        drop(comm.check_stream(stream)?);
        self.calls.push(Recorded {
            comm,
            stream,
            call: Call::new::<T>(op),
        });
        Ok(())
    }

    /// Record a call made elsewhere (tests of the recording).
    #[cfg(test)]
    pub(crate) fn push(&mut self, rec: Recorded<'env>) {
        self.calls.push(rec);
    }

    /// How many calls were recorded so far.
    pub fn len(&self) -> usize {
        self.calls.len()
    }

    /// Whether no call was recorded yet.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// [`Communicator::all_reduce`] inside the group.
    ///
    /// # Errors
    /// As [`Communicator::all_reduce`].
    pub fn all_reduce<T: NcclType>(
        &mut self,
        comm: &'env Communicator,
        send: impl Into<DeviceSlice<'env, T>>,
        recv: impl Into<DeviceSliceMut<'env, T>>,
        op: ReduceOp,
        stream: &'env Stream,
    ) -> Result<()> {
        let (send, mut recv) = (send.into(), recv.into());
        let op = comm.op_all_reduce(&send, &mut recv, op)?;
        self.queue::<T>(comm, stream, op)
    }

    /// [`Communicator::all_reduce_in_place`] inside the group.
    ///
    /// # Errors
    /// As [`Communicator::all_reduce_in_place`].
    pub fn all_reduce_in_place<T: NcclType>(
        &mut self,
        comm: &'env Communicator,
        buf: impl Into<DeviceSliceMut<'env, T>>,
        op: ReduceOp,
        stream: &'env Stream,
    ) -> Result<()> {
        let mut buf = buf.into();
        let op = comm.op_all_reduce_in_place(&mut buf, op)?;
        self.queue::<T>(comm, stream, op)
    }

    /// [`Communicator::broadcast_in_place`] inside the group.
    ///
    /// # Errors
    /// As [`Communicator::broadcast_in_place`].
    pub fn broadcast_in_place<T: NcclType>(
        &mut self,
        comm: &'env Communicator,
        buf: impl Into<DeviceSliceMut<'env, T>>,
        root: usize,
        stream: &'env Stream,
    ) -> Result<()> {
        let mut buf = buf.into();
        let op = comm.op_broadcast_in_place(&mut buf, root)?;
        self.queue::<T>(comm, stream, op)
    }

    /// [`Communicator::broadcast`] inside the group.
    ///
    /// # Errors
    /// As [`Communicator::broadcast`].
    pub fn broadcast<T: NcclType>(
        &mut self,
        comm: &'env Communicator,
        send: impl Into<DeviceSlice<'env, T>>,
        recv: impl Into<DeviceSliceMut<'env, T>>,
        root: usize,
        stream: &'env Stream,
    ) -> Result<()> {
        let (send, mut recv) = (send.into(), recv.into());
        let op = comm.op_broadcast(&send, &mut recv, root)?;
        self.queue::<T>(comm, stream, op)
    }

    /// [`Communicator::reduce`] inside the group.
    ///
    /// # Errors
    /// As [`Communicator::reduce`].
    pub fn reduce<T: NcclType>(
        &mut self,
        comm: &'env Communicator,
        send: impl Into<DeviceSlice<'env, T>>,
        recv: impl Into<DeviceSliceMut<'env, T>>,
        op: ReduceOp,
        root: usize,
        stream: &'env Stream,
    ) -> Result<()> {
        let (send, mut recv) = (send.into(), recv.into());
        let op = comm.op_reduce(&send, &mut recv, op, root)?;
        self.queue::<T>(comm, stream, op)
    }

    /// [`Communicator::reduce_in_place`] inside the group.
    ///
    /// # Errors
    /// As [`Communicator::reduce_in_place`].
    pub fn reduce_in_place<T: NcclType>(
        &mut self,
        comm: &'env Communicator,
        buf: impl Into<DeviceSliceMut<'env, T>>,
        op: ReduceOp,
        root: usize,
        stream: &'env Stream,
    ) -> Result<()> {
        let mut buf = buf.into();
        let op = comm.op_reduce_in_place(&mut buf, op, root)?;
        self.queue::<T>(comm, stream, op)
    }

    /// [`Communicator::all_gather_in_place`] inside the group.
    ///
    /// # Errors
    /// As [`Communicator::all_gather_in_place`].
    pub fn all_gather_in_place<T: NcclType>(
        &mut self,
        comm: &'env Communicator,
        buf: impl Into<DeviceSliceMut<'env, T>>,
        stream: &'env Stream,
    ) -> Result<()> {
        let mut buf = buf.into();
        let op = comm.op_all_gather_in_place(&mut buf)?;
        self.queue::<T>(comm, stream, op)
    }

    /// [`Communicator::reduce_scatter_in_place`] inside the group.
    ///
    /// # Errors
    /// As [`Communicator::reduce_scatter_in_place`].
    pub fn reduce_scatter_in_place<T: NcclType>(
        &mut self,
        comm: &'env Communicator,
        buf: impl Into<DeviceSliceMut<'env, T>>,
        op: ReduceOp,
        stream: &'env Stream,
    ) -> Result<()> {
        let mut buf = buf.into();
        let op = comm.op_reduce_scatter_in_place(&mut buf, op)?;
        self.queue::<T>(comm, stream, op)
    }

    /// [`Communicator::all_gather`] inside the group.
    ///
    /// # Errors
    /// As [`Communicator::all_gather`].
    pub fn all_gather<T: NcclType>(
        &mut self,
        comm: &'env Communicator,
        send: impl Into<DeviceSlice<'env, T>>,
        recv: impl Into<DeviceSliceMut<'env, T>>,
        stream: &'env Stream,
    ) -> Result<()> {
        let (send, mut recv) = (send.into(), recv.into());
        let op = comm.op_all_gather(&send, &mut recv)?;
        self.queue::<T>(comm, stream, op)
    }

    /// [`Communicator::reduce_scatter`] inside the group.
    ///
    /// # Errors
    /// As [`Communicator::reduce_scatter`].
    pub fn reduce_scatter<T: NcclType>(
        &mut self,
        comm: &'env Communicator,
        send: impl Into<DeviceSlice<'env, T>>,
        recv: impl Into<DeviceSliceMut<'env, T>>,
        op: ReduceOp,
        stream: &'env Stream,
    ) -> Result<()> {
        let (send, mut recv) = (send.into(), recv.into());
        let op = comm.op_reduce_scatter(&send, &mut recv, op)?;
        self.queue::<T>(comm, stream, op)
    }

    /// [`Communicator::send`] inside the group. Here `peer` may be this
    /// rank: a send to oneself, which completes with the matching
    /// [`recv`](Self::recv) of the same group (sends and receives to
    /// oneself pair up in order and must be of equal size in bytes; the
    /// group checks that before it launches anything).
    ///
    /// # Errors
    /// As [`Communicator::send`], except that `peer` may be this rank.
    pub fn send<T: NcclType>(
        &mut self,
        comm: &'env Communicator,
        send: impl Into<DeviceSlice<'env, T>>,
        peer: usize,
        stream: &'env Stream,
    ) -> Result<()> {
        let send = send.into();
        let op = comm.op_send(&send, peer)?;
        self.queue::<T>(comm, stream, op)
    }

    /// [`Communicator::recv`] inside the group; `peer` may be this rank (see
    /// [`send`](Self::send)).
    ///
    /// # Errors
    /// As [`Communicator::recv`], except that `peer` may be this rank.
    pub fn recv<T: NcclType>(
        &mut self,
        comm: &'env Communicator,
        recv: impl Into<DeviceSliceMut<'env, T>>,
        peer: usize,
        stream: &'env Stream,
    ) -> Result<()> {
        let mut recv = recv.into();
        let op = comm.op_recv(&mut recv, peer)?;
        self.queue::<T>(comm, stream, op)
    }
}
