//! Building the checked calls ([`Op`]) from a communicator and views:
//! shared by the direct collectives and by groups.

use std::ffi::c_void;

use super::Communicator;
use crate::error::Result;
use crate::nccl::op::{NcclType, Op, ReduceOp};
use crate::runtime::{DeviceSlice, DeviceSliceMut};

// Building the checked calls; shared by `Communicator` and `Group`.
impl Communicator {
    pub(crate) fn op_all_reduce<T: NcclType>(
        &self,
        send: &DeviceSlice<'_, T>,
        recv: &mut DeviceSliceMut<'_, T>,
        op: ReduceOp,
    ) -> Result<Op> {
        self.check_buffers(
            "all_reduce",
            &[("send", send.device()), ("recv", recv.device())],
        )?;
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
    ) -> Result<Op> {
        self.check_buffers("all_reduce_in_place", &[("buf", buf.device())])?;
        let p = buf.as_raw_mut();
        Ok(Op::AllReduce {
            send: p,
            recv: p,
            count: buf.len(),
            op,
        })
    }

    pub(crate) fn op_broadcast<T: NcclType>(
        &self,
        send: &DeviceSlice<'_, T>,
        recv: &mut DeviceSliceMut<'_, T>,
        root: usize,
    ) -> Result<Op> {
        self.check_buffers(
            "broadcast",
            &[("send", send.device()), ("recv", recv.device())],
        )?;
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
        self.check_buffers("broadcast_in_place", &[("buf", buf.device())])?;
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
        self.check_buffers(
            "reduce",
            &[("send", send.device()), ("recv", recv.device())],
        )?;
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
        self.check_buffers("reduce_in_place", &[("buf", buf.device())])?;
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
        self.check_buffers(
            "all_gather",
            &[("send", send.device()), ("recv", recv.device())],
        )?;
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
        self.check_buffers("all_gather_in_place", &[("buf", buf.device())])?;
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
        self.check_buffers(
            "reduce_scatter",
            &[("send", send.device()), ("recv", recv.device())],
        )?;
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
        self.check_buffers("reduce_scatter_in_place", &[("buf", buf.device())])?;
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
        self.check_buffers("send", &[("send", send.device())])?;
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
        self.check_buffers("recv", &[("recv", recv.device())])?;
        let peer = self.ranks().check_rank("peer", peer)?;
        Ok(Op::Recv {
            recv: recv.as_raw_mut(),
            count: recv.len(),
            peer,
        })
    }
}
