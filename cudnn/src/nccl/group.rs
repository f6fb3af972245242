//! Group calls: several NCCL calls launched together.

use std::cell::Cell;
use std::marker::PhantomData;

use super::collectives::{NcclType, Op, ReduceOp};
use super::comm::Communicator;
use super::{api, nccl_call};
use crate::error::Result;
use crate::runtime::{DeviceSlice, DeviceSliceMut, Stream};

/// The calls of one [`group`]: they are queued as they are made and
/// launched together when the group ends.
///
/// Every buffer, communicator and stream handed to a group is borrowed for
/// `'env`, the lifetime of the [`group`] call, because NCCL reads the
/// pointers only when the group ends.
#[derive(Debug)]
pub struct Group<'env> {
    calls: usize,
    // Invariant in 'env, and neither Send nor Sync: the group belongs to the
    // thread that opened it (NCCL keeps group state per thread).
    _env: PhantomData<*mut &'env ()>,
}

thread_local! {
    /// How many [`group`]s are open on this thread.
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// Whether a [`group`] is open on this thread. The `Communicator` methods
/// refuse to run then: NCCL would only queue the call, and read its
/// buffers when the group ends, after they may have been freed; inside a
/// group, calls go through [`Group`], which borrows them until then.
pub(crate) fn in_group() -> bool {
    DEPTH.with(|d| d.get() > 0)
}

/// Run `f` as one NCCL group (`ncclGroupStart` ... `ncclGroupEnd`).
///
/// Use a group to drive several communicators from one thread (one per
/// device, as from [`Communicator::init_all`]), to post matching sends and
/// receives without deadlock, or to fuse many small collectives into one
/// launch. The group always ends, whether `f` returns `Ok`, `Err` or
/// panics, so it cannot be left open (the calls queued before an error or
/// a panic are still launched, as NCCL does at `ncclGroupEnd`); an error
/// from `f` is returned in preference to one from ending the group.
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
/// The first error of `f`, else [`Error::Nccl`](crate::Error::Nccl) from
/// `ncclGroupEnd` (where NCCL reports errors of the queued calls).
#[doc(alias = "ncclGroupStart")]
#[doc(alias = "ncclGroupEnd")]
pub fn group<'env, R>(f: impl FnOnce(&mut Group<'env>) -> Result<R>) -> Result<R> {
    let api = api()?;
    // SAFETY: takes no arguments; opens a group on this thread, which the
    // guard below closes on every path.
    unsafe { nccl_call!(api, ncclGroupStart()) }?;
    struct End(bool);
    impl Drop for End {
        fn drop(&mut self) {
            DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
            if !self.0
                && let Ok(api) = super::api()
            {
                // SAFETY: closes the group this function opened (unwinding
                // path only); the status is ignored: Drop must not fail.
                let _ = unsafe { api.ncclGroupEnd() };
            }
        }
    }
    DEPTH.with(|d| d.set(d.get() + 1));
    let mut guard = End(false);
    let mut g = Group {
        calls: 0,
        _env: PhantomData,
    };
    let out = f(&mut g);
    guard.0 = true;
    drop(guard);
    // SAFETY: closes the group opened above; every pointer queued in it is
    // borrowed for 'env, which outlives this call.
    let end = unsafe { nccl_call!(api, ncclGroupEnd()) };
    let out = out?;
    end.map_err(|e| e.with_context(format!("ending a group of {} calls", g.calls)))?;
    Ok(out)
}

impl<'env> Group<'env> {
    fn queue<T: NcclType>(
        &mut self,
        comm: &'env Communicator,
        stream: &'env Stream,
        op: Op,
    ) -> Result<()> {
        // SAFETY: the pointers come from views borrowed for 'env, which
        // outlives the group (NCCL reads them at ncclGroupEnd) and the
        // checks derived the counts from the views' lengths.
        unsafe { op.launch::<T>(comm, stream) }?;
        self.calls += 1;
        Ok(())
    }

    /// How many calls were queued so far.
    pub fn len(&self) -> usize {
        self.calls
    }

    /// Whether no call was queued yet.
    pub fn is_empty(&self) -> bool {
        self.calls == 0
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
        let op = comm.op_all_reduce_in_place(&mut buf, op);
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

    /// [`Communicator::send`] inside the group.
    ///
    /// # Errors
    /// As [`Communicator::send`].
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

    /// [`Communicator::recv`] inside the group.
    ///
    /// # Errors
    /// As [`Communicator::recv`].
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
