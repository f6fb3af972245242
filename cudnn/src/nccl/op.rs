//! The types shared by the direct collectives and by groups: element
//! types, reductions, and one checked call ([`Call`]) resolved to raw
//! pointers and counts (the rules that build it from a communicator and
//! views are `Communicator`'s, in `comm/calls.rs`).

use std::ffi::c_void;

use super::{api, sys};
use crate::dtype::DataType;
use crate::error::Result;
use crate::sys::cudart::cudaStream_t;

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

    /// What the call does, for error messages.
    fn describe(&self, t: &str) -> String {
        let n = self.count();
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

    /// The NCCL function that runs it.
    pub(crate) fn nccl_name(&self) -> &'static str {
        match self {
            Op::AllReduce { .. } => "ncclAllReduce",
            Op::Broadcast { .. } => "ncclBroadcast",
            Op::Reduce { .. } => "ncclReduce",
            Op::AllGather { .. } => "ncclAllGather",
            Op::ReduceScatter { .. } => "ncclReduceScatter",
            Op::Send { .. } => "ncclSend",
            Op::Recv { .. } => "ncclRecv",
        }
    }
}

/// What a collective must agree on (its text is kept for messages).
#[derive(Debug, Clone)]
pub(crate) struct Fingerprint {
    pub(crate) key: (&'static str, u32, usize, Option<u32>, Option<i32>),
    pub(crate) text: String,
}

/// One checked call with its element type: what a group records and what
/// a direct call issues.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Call {
    pub(crate) op: Op,
    dtype: sys::ncclDataType_t,
    type_name: &'static str,
    elem_size: usize,
}

impl Call {
    pub(crate) fn new<T: NcclType>(op: Op) -> Self {
        Call {
            op,
            dtype: T::NCCL,
            type_name: T::NAME,
            elem_size: T::SIZE,
        }
    }

    /// Bytes per rank (saturating: only compared, never used as a size).
    pub(crate) fn bytes(&self) -> usize {
        self.count().saturating_mul(self.elem_size)
    }

    /// Elements per rank; a call of 0 elements is checked but not issued.
    pub(crate) fn count(&self) -> usize {
        self.op.count()
    }

    /// What the call does, for error messages.
    pub(crate) fn describe(&self) -> String {
        self.op.describe(self.type_name)
    }

    /// For a send or a recv: whether it sends, and the peer.
    pub(crate) fn p2p(&self) -> Option<(bool, usize)> {
        match self.op {
            Op::Send { peer, .. } => Some((true, usize::try_from(peer).ok()?)),
            Op::Recv { peer, .. } => Some((false, usize::try_from(peer).ok()?)),
            _ => None,
        }
    }

    /// What every rank's call of a collective must agree on: kind, element
    /// type, count, reduction and root.
    pub(crate) fn fingerprint(&self) -> Fingerprint {
        let (op, root) = match self.op {
            Op::AllReduce { op, .. } | Op::ReduceScatter { op, .. } => (Some(op.as_raw().0), None),
            Op::Reduce { op, root, .. } => (Some(op.as_raw().0), Some(root)),
            Op::Broadcast { root, .. } => (None, Some(root)),
            Op::Send { peer, .. } | Op::Recv { peer, .. } => (None, Some(peer)),
            Op::AllGather { .. } => (None, None),
        };
        Fingerprint {
            key: (self.op.nccl_name(), self.dtype.0, self.count(), op, root),
            text: self.describe(),
        }
    }

    /// Issue the call on `stream` and return NCCL's raw result
    /// (`ncclInProgress` is left to the caller).
    ///
    /// # Safety
    /// `comm` and `stream` are live; the pointers are valid device memory
    /// for the counts the checks derived (and the in-place aliasing NCCL
    /// allows), and stay valid until the work completes on `stream`.
    pub(crate) unsafe fn launch(
        &self,
        comm: sys::ncclComm_t,
        stream: cudaStream_t,
    ) -> Result<sys::ncclResult_t> {
        let api = api()?;
        let (c, s, t) = (comm, stream, self.dtype);
        // SAFETY: (every arm) the caller guarantees the buffers, the
        // communicator and the stream.
        let r = unsafe {
            match self.op {
                Op::AllReduce {
                    send,
                    recv,
                    count,
                    op,
                } => api.ncclAllReduce(send, recv, count, t, op.as_raw(), c, s)?,
                Op::Broadcast {
                    send,
                    recv,
                    count,
                    root,
                } => api.ncclBroadcast(send, recv, count, t, root, c, s)?,
                Op::Reduce {
                    send,
                    recv,
                    count,
                    op,
                    root,
                } => api.ncclReduce(send, recv, count, t, op.as_raw(), root, c, s)?,
                Op::AllGather { send, recv, count } => {
                    api.ncclAllGather(send, recv, count, t, c, s)?
                }
                Op::ReduceScatter {
                    send,
                    recv,
                    count,
                    op,
                } => api.ncclReduceScatter(send, recv, count, t, op.as_raw(), c, s)?,
                Op::Send { send, count, peer } => api.ncclSend(send, count, t, peer, c, s)?,
                Op::Recv { recv, count, peer } => api.ncclRecv(recv, count, t, peer, c, s)?,
            }
        };
        Ok(r)
    }
}
