//! Collectives and point-to-point calls on a communicator.

use std::ffi::c_void;

use super::comm::Communicator;
use super::{api, sys};
use crate::dtype::DataType;
use crate::error::Result;
use crate::runtime::{DeviceSlice, DeviceSliceMut, Stream};

mod sealed {
    pub trait Sealed {}
}

/// An element type NCCL can reduce and move, with its `ncclDataType_t`.
/// Sealed: the codes must be right.
pub trait NcclType: DataType + sealed::Sealed {
    /// The NCCL type code.
    const NCCL: sys::ncclDataType_t;
}

macro_rules! nccl_type {
    ($t:ty, $code:ident) => {
        impl sealed::Sealed for $t {}
        impl NcclType for $t {
            const NCCL: sys::ncclDataType_t = sys::ncclDataType_t::$code;
        }
    };
}
nccl_type!(f32, ncclFloat32);
nccl_type!(f64, ncclFloat64);
nccl_type!(half::f16, ncclFloat16);
nccl_type!(half::bf16, ncclBfloat16);
nccl_type!(i8, ncclInt8);
nccl_type!(u8, ncclUint8);
nccl_type!(i32, ncclInt32);
nccl_type!(i64, ncclInt64);

/// A reduction (`ncclRedOp_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReduceOp {
    /// Sum (`ncclSum`).
    Sum,
    /// Product (`ncclProd`).
    Prod,
    /// Minimum (`ncclMin`).
    Min,
    /// Maximum (`ncclMax`).
    Max,
    /// Sum divided by the number of ranks (`ncclAvg`; integers divide
    /// with truncation).
    Avg,
}

impl ReduceOp {
    /// The NCCL code.
    pub fn as_raw(self) -> sys::ncclRedOp_t {
        match self {
            ReduceOp::Sum => sys::ncclRedOp_t::ncclSum,
            ReduceOp::Prod => sys::ncclRedOp_t::ncclProd,
            ReduceOp::Min => sys::ncclRedOp_t::ncclMin,
            ReduceOp::Max => sys::ncclRedOp_t::ncclMax,
            ReduceOp::Avg => sys::ncclRedOp_t::ncclAvg,
        }
    }

    fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::Avg => "avg",
        }
    }
}

/// One call, resolved to raw pointers and counts after every check.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Op {
    AllReduce {
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        op: ReduceOp,
    },
    Broadcast {
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        root: i32,
    },
    Reduce {
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        op: ReduceOp,
        root: i32,
    },
    AllGather {
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
    },
    ReduceScatter {
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        op: ReduceOp,
    },
    Send {
        send: *const c_void,
        count: usize,
        peer: i32,
    },
    Recv {
        recv: *mut c_void,
        count: usize,
        peer: i32,
    },
}

impl Op {
    fn count(&self) -> usize {
        match *self {
            Op::AllReduce { count, .. }
            | Op::Broadcast { count, .. }
            | Op::Reduce { count, .. }
            | Op::AllGather { count, .. }
            | Op::ReduceScatter { count, .. }
            | Op::Send { count, .. }
            | Op::Recv { count, .. } => count,
        }
    }

    fn describe<T: NcclType>(&self) -> String {
        let n = self.count();
        let t = T::NAME;
        match *self {
            Op::AllReduce { op, .. } => format!("all_reduce of {n} x {t} ({})", op.name()),
            Op::Broadcast { root, .. } => format!("broadcast of {n} x {t} from rank {root}"),
            Op::Reduce { op, root, .. } => {
                format!("reduce of {n} x {t} ({}) to rank {root}", op.name())
            }
            Op::AllGather { .. } => format!("all_gather of {n} x {t} per rank"),
            Op::ReduceScatter { op, .. } => {
                format!("reduce_scatter to {n} x {t} per rank ({})", op.name())
            }
            Op::Send { peer, .. } => format!("send of {n} x {t} to rank {peer}"),
            Op::Recv { peer, .. } => format!("recv of {n} x {t} from rank {peer}"),
        }
    }

    /// Enqueue the call on `stream`.
    ///
    /// # Safety
    /// The pointers are valid device memory for the counts the checks
    /// derived (and the in-place aliasing NCCL allows), and stay valid until
    /// the work completes on `stream` (for a call inside a group: until the
    /// group ends, then until the work completes).
    pub(crate) unsafe fn launch<T: NcclType>(
        self,
        comm: &Communicator,
        stream: &Stream,
    ) -> Result<()> {
        if self.count() == 0 {
            return Ok(());
        }
        let api = api()?;
        let c = comm.as_raw();
        let s = stream.as_raw();
        let t = T::NCCL;
        // SAFETY: (every arm) the caller guarantees the buffers; the
        // communicator and stream are live for the call.
        let (call, r) = unsafe {
            match self {
                Op::AllReduce {
                    send,
                    recv,
                    count,
                    op,
                } => (
                    "ncclAllReduce",
                    api.ncclAllReduce(send, recv, count, t, op.as_raw(), c, s)?,
                ),
                Op::Broadcast {
                    send,
                    recv,
                    count,
                    root,
                } => (
                    "ncclBroadcast",
                    api.ncclBroadcast(send, recv, count, t, root, c, s)?,
                ),
                Op::Reduce {
                    send,
                    recv,
                    count,
                    op,
                    root,
                } => (
                    "ncclReduce",
                    api.ncclReduce(send, recv, count, t, op.as_raw(), root, c, s)?,
                ),
                Op::AllGather { send, recv, count } => (
                    "ncclAllGather",
                    api.ncclAllGather(send, recv, count, t, c, s)?,
                ),
                Op::ReduceScatter {
                    send,
                    recv,
                    count,
                    op,
                } => (
                    "ncclReduceScatter",
                    api.ncclReduceScatter(send, recv, count, t, op.as_raw(), c, s)?,
                ),
                Op::Send { send, count, peer } => {
                    ("ncclSend", api.ncclSend(send, count, t, peer, c, s)?)
                }
                Op::Recv { recv, count, peer } => {
                    ("ncclRecv", api.ncclRecv(recv, count, t, peer, c, s)?)
                }
            }
        };
        super::check_result(call, r)
            .map_err(|e| comm.annotate(e).with_context(self.describe::<T>()))
    }
}

// Building the checked calls; shared by `Communicator` and `Group`.
impl Communicator {
    pub(crate) fn op_all_reduce<T: NcclType>(
        &self,
        send: &DeviceSlice<'_, T>,
        recv: &mut DeviceSliceMut<'_, T>,
        op: ReduceOp,
    ) -> Result<Op> {
        let count = self
            .ranks()
            .same_len("all_reduce", send.len(), recv.len())?;
        Ok(Op::AllReduce {
            send: send.as_raw(),
            recv: recv.as_raw_mut(),
            count,
            op,
        })
    }

    pub(crate) fn op_all_reduce_in_place<T: NcclType>(
        &self,
        buf: &mut DeviceSliceMut<'_, T>,
        op: ReduceOp,
    ) -> Op {
        let p = buf.as_raw_mut();
        Op::AllReduce {
            send: p,
            recv: p,
            count: buf.len(),
            op,
        }
    }

    pub(crate) fn op_broadcast<T: NcclType>(
        &self,
        send: &DeviceSlice<'_, T>,
        recv: &mut DeviceSliceMut<'_, T>,
        root: usize,
    ) -> Result<Op> {
        let root = self.ranks().check_rank("root", root)?;
        let count = self.ranks().same_len("broadcast", send.len(), recv.len())?;
        Ok(Op::Broadcast {
            send: send.as_raw(),
            recv: recv.as_raw_mut(),
            count,
            root,
        })
    }

    pub(crate) fn op_broadcast_in_place<T: NcclType>(
        &self,
        buf: &mut DeviceSliceMut<'_, T>,
        root: usize,
    ) -> Result<Op> {
        let root = self.ranks().check_rank("root", root)?;
        let p = buf.as_raw_mut();
        Ok(Op::Broadcast {
            send: p,
            recv: p,
            count: buf.len(),
            root,
        })
    }

    pub(crate) fn op_reduce<T: NcclType>(
        &self,
        send: &DeviceSlice<'_, T>,
        recv: &mut DeviceSliceMut<'_, T>,
        op: ReduceOp,
        root: usize,
    ) -> Result<Op> {
        let root = self.ranks().check_rank("root", root)?;
        let count = self.ranks().same_len("reduce", send.len(), recv.len())?;
        Ok(Op::Reduce {
            send: send.as_raw(),
            recv: recv.as_raw_mut(),
            count,
            op,
            root,
        })
    }

    pub(crate) fn op_reduce_in_place<T: NcclType>(
        &self,
        buf: &mut DeviceSliceMut<'_, T>,
        op: ReduceOp,
        root: usize,
    ) -> Result<Op> {
        let root = self.ranks().check_rank("root", root)?;
        let p = buf.as_raw_mut();
        Ok(Op::Reduce {
            send: p,
            recv: p,
            count: buf.len(),
            op,
            root,
        })
    }

    pub(crate) fn op_all_gather<T: NcclType>(
        &self,
        send: &DeviceSlice<'_, T>,
        recv: &mut DeviceSliceMut<'_, T>,
    ) -> Result<Op> {
        let count = self.ranks().all_gather(send.len(), recv.len())?;
        Ok(Op::AllGather {
            send: send.as_raw(),
            recv: recv.as_raw_mut(),
            count,
        })
    }

    pub(crate) fn op_all_gather_in_place<T: NcclType>(
        &self,
        buf: &mut DeviceSliceMut<'_, T>,
    ) -> Result<Op> {
        let count = self.ranks().all_gather_in_place(buf.len())?;
        let base = buf.as_mut_ptr();
        // This rank's block is the send buffer (NCCL's in-place rule).
        let send = base.wrapping_add(self.rank() * count) as *const c_void;
        Ok(Op::AllGather {
            send,
            recv: base as *mut c_void,
            count,
        })
    }

    pub(crate) fn op_reduce_scatter<T: NcclType>(
        &self,
        send: &DeviceSlice<'_, T>,
        recv: &mut DeviceSliceMut<'_, T>,
        op: ReduceOp,
    ) -> Result<Op> {
        let count = self.ranks().reduce_scatter(send.len(), recv.len())?;
        Ok(Op::ReduceScatter {
            send: send.as_raw(),
            recv: recv.as_raw_mut(),
            count,
            op,
        })
    }

    pub(crate) fn op_reduce_scatter_in_place<T: NcclType>(
        &self,
        buf: &mut DeviceSliceMut<'_, T>,
        op: ReduceOp,
    ) -> Result<Op> {
        let count = self.ranks().reduce_scatter_in_place(buf.len())?;
        let base = buf.as_mut_ptr();
        // This rank's block receives the result (NCCL's in-place rule).
        let recv = base.wrapping_add(self.rank() * count) as *mut c_void;
        Ok(Op::ReduceScatter {
            send: base as *const c_void,
            recv,
            count,
            op,
        })
    }

    pub(crate) fn op_send<T: NcclType>(
        &self,
        send: &DeviceSlice<'_, T>,
        peer: usize,
    ) -> Result<Op> {
        let peer = self.ranks().check_rank("peer", peer)?;
        Ok(Op::Send {
            send: send.as_raw(),
            count: send.len(),
            peer,
        })
    }

    pub(crate) fn op_recv<T: NcclType>(
        &self,
        recv: &mut DeviceSliceMut<'_, T>,
        peer: usize,
    ) -> Result<Op> {
        let peer = self.ranks().check_rank("peer", peer)?;
        Ok(Op::Recv {
            recv: recv.as_raw_mut(),
            count: recv.len(),
            peer,
        })
    }
}

/// The direct (not grouped) launch of a checked call.
macro_rules! run {
    ($self:ident, $stream:ident, $op:expr) => {{
        if super::group::in_group() {
            return Err(crate::Error::Unsupported {
                what: "a Communicator collective while an nccl::group is open on this thread \
                       (NCCL would read the buffers only when the group ends)"
                    .into(),
                needs: Some("the Group's method (g.all_reduce(...)), which borrows the buffers until the group ends".into()),
            });
        }
        let op = $op?;
        // SAFETY: the op's pointers come from views borrowed for this call
        // and checked against the counts; NCCL enqueues on `stream`, and
        // device memory is freed only after queued work (cudaFree
        // synchronizes; stream-ordered frees are ordered after it).
        unsafe { op.launch::<T>($self, $stream) }
    }};
}

impl Communicator {
    /// Reduce `send` across all ranks with `op`; every rank receives the
    /// result in `recv` (`ncclAllReduce`). Enqueued on `stream`.
    ///
    /// # Errors
    /// [`Error::Mismatch`](crate::Error::Mismatch) when the lengths differ
    /// (before NCCL is called); [`Error::Nccl`](crate::Error::Nccl) naming
    /// the rank and NCCL's text.
    #[doc(alias = "ncclAllReduce")]
    pub fn all_reduce<'s, 'r, T: NcclType>(
        &self,
        send: impl Into<DeviceSlice<'s, T>>,
        recv: impl Into<DeviceSliceMut<'r, T>>,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<()> {
        let (send, mut recv) = (send.into(), recv.into());
        run!(self, stream, self.op_all_reduce(&send, &mut recv, op))
    }

    /// [`all_reduce`](Self::all_reduce) with the result written over the input.
    ///
    /// # Errors
    /// [`Error::Nccl`](crate::Error::Nccl).
    #[doc(alias = "ncclAllReduce")]
    pub fn all_reduce_in_place<'b, T: NcclType>(
        &self,
        buf: impl Into<DeviceSliceMut<'b, T>>,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<()> {
        let mut buf = buf.into();
        run!(
            self,
            stream,
            Ok::<_, crate::Error>(self.op_all_reduce_in_place(&mut buf, op))
        )
    }

    /// Copy `send` of rank `root` into `recv` of every rank
    /// (`ncclBroadcast`; `send` is read on `root` only).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `root`
    /// is not a rank; [`Error::Mismatch`](crate::Error::Mismatch) when the
    /// lengths differ; [`Error::Nccl`](crate::Error::Nccl).
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
    /// without deadlock, post both inside one [`group`](super::group).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `peer`
    /// is not a rank; [`Error::Nccl`](crate::Error::Nccl).
    #[doc(alias = "ncclSend")]
    pub fn send<'s, T: NcclType>(
        &self,
        send: impl Into<DeviceSlice<'s, T>>,
        peer: usize,
        stream: &Stream,
    ) -> Result<()> {
        let send = send.into();
        run!(self, stream, self.op_send(&send, peer))
    }

    /// Receive `recv.len()` elements from rank `peer` (`ncclRecv`).
    ///
    /// # Errors
    /// As [`send`](Self::send).
    #[doc(alias = "ncclRecv")]
    pub fn recv<'r, T: NcclType>(
        &self,
        recv: impl Into<DeviceSliceMut<'r, T>>,
        peer: usize,
        stream: &Stream,
    ) -> Result<()> {
        let mut recv = recv.into();
        run!(self, stream, self.op_recv(&mut recv, peer))
    }
}
