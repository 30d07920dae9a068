// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The verbs objects through the core's commands: each takes the request the crate builds
//! (`struct qhca_ioc_*`) and answers it the same way, with the device's numbers, so that the
//! objects' code does not deal with the core's handles.

use qhca_uapi::{
    qhca_ah_attr, qhca_ib_alloc_pd_resp, qhca_ib_create_ah_resp, qhca_ib_create_cq,
    qhca_ib_create_cq_resp, qhca_ib_create_qp, qhca_ib_create_srq, qhca_ib_create_srq_resp,
    qhca_ib_reg_mr, qhca_ioc_alloc_mw, qhca_ioc_create_ah, qhca_ioc_create_cq, qhca_ioc_create_qp,
    qhca_ioc_create_srq, qhca_ioc_handle, qhca_ioc_qp_attr, qhca_ioc_reg_mr, qhca_qp_attr,
    QHCA_ACCESS_LOCAL_WRITE, QHCA_ACCESS_MW_BIND, QHCA_ACCESS_ON_DEMAND, QHCA_ACCESS_REMOTE_ATOMIC,
    QHCA_ACCESS_REMOTE_READ, QHCA_ACCESS_REMOTE_WRITE, QHCA_ACCESS_WATCHED, QHCA_IB_REG_MR_WATCHED,
    QHCA_MW_TYPE_1, QHCA_MW_TYPE_2B, QHCA_QPS_ERR, QHCA_QPS_INIT, QHCA_QPS_RESET, QHCA_QPS_RTR,
    QHCA_QPS_RTS, QHCA_QPT_RC, QHCA_QPT_UD, QHCA_QP_ATTR_ACCESS, QHCA_QP_ATTR_AV,
    QHCA_QP_ATTR_DEST_QPN, QHCA_QP_ATTR_MAX_DEST_RD_ATOMIC, QHCA_QP_ATTR_MAX_RD_ATOMIC,
    QHCA_QP_ATTR_MIN_RNR_TIMER, QHCA_QP_ATTR_PATH_MTU, QHCA_QP_ATTR_QKEY, QHCA_QP_ATTR_RETRY_CNT,
    QHCA_QP_ATTR_RNR_RETRY, QHCA_QP_ATTR_RQ_PSN, QHCA_QP_ATTR_SQ_PSN, QHCA_QP_ATTR_STATE,
    QHCA_QP_ATTR_TIMEOUT,
};

use super::abi::*;
use super::{Kind, Resp, Uverbs};
use crate::error::Errno;

/// The core's `enum ib_qp_type` values qhca has.
const IB_QPT_RC: u8 = 2;
const IB_QPT_UD: u8 = 4;
/// The core's `enum ib_mw_type`.
const IB_MW_TYPE_1: u8 = 1;
const IB_MW_TYPE_2: u8 = 2;
/// The core's `IB_ACCESS_*` bits that differ from qhca's (the four rights are the same bits).
const IB_ACCESS_MW_BIND: u32 = 1 << 4;
const IB_ACCESS_ON_DEMAND: u32 = 1 << 6;
/// The one port.
const PORT: u8 = 1;
/// The core's `enum ib_srq_attr_mask`: qhca changes the limit alone (no resizing).
const IB_SRQ_LIMIT: u32 = 1 << 1;

/// The core's `enum ib_qp_attr_mask`.
mod mask {
    pub const STATE: u32 = 1 << 0;
    pub const ACCESS_FLAGS: u32 = 1 << 3;
    pub const PKEY_INDEX: u32 = 1 << 4;
    pub const PORT: u32 = 1 << 5;
    pub const QKEY: u32 = 1 << 6;
    pub const AV: u32 = 1 << 7;
    pub const PATH_MTU: u32 = 1 << 8;
    pub const TIMEOUT: u32 = 1 << 9;
    pub const RETRY_CNT: u32 = 1 << 10;
    pub const RNR_RETRY: u32 = 1 << 11;
    pub const RQ_PSN: u32 = 1 << 12;
    pub const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    pub const MIN_RNR_TIMER: u32 = 1 << 15;
    pub const SQ_PSN: u32 = 1 << 16;
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
    pub const DEST_QPN: u32 = 1 << 20;
    /// Everything QUERY_QP is asked for.
    pub const QUERY: u32 = (1 << 21) - 1;
}

/// Each qhca QP attribute with the core's bit for it.
const ATTRS: [(u32, u32); 14] = [
    (QHCA_QP_ATTR_STATE, mask::STATE),
    (QHCA_QP_ATTR_ACCESS, mask::ACCESS_FLAGS),
    (QHCA_QP_ATTR_DEST_QPN, mask::DEST_QPN),
    (QHCA_QP_ATTR_RQ_PSN, mask::RQ_PSN),
    (QHCA_QP_ATTR_SQ_PSN, mask::SQ_PSN),
    (QHCA_QP_ATTR_PATH_MTU, mask::PATH_MTU),
    (QHCA_QP_ATTR_TIMEOUT, mask::TIMEOUT),
    (QHCA_QP_ATTR_RETRY_CNT, mask::RETRY_CNT),
    (QHCA_QP_ATTR_RNR_RETRY, mask::RNR_RETRY),
    (QHCA_QP_ATTR_MIN_RNR_TIMER, mask::MIN_RNR_TIMER),
    (QHCA_QP_ATTR_MAX_RD_ATOMIC, mask::MAX_QP_RD_ATOMIC),
    (QHCA_QP_ATTR_MAX_DEST_RD_ATOMIC, mask::MAX_DEST_RD_ATOMIC),
    (QHCA_QP_ATTR_QKEY, mask::QKEY),
    (QHCA_QP_ATTR_AV, mask::AV),
];

/// What the core requires of a transition (`ib_modify_qp_is_ok`'s table, for RC and UD) that
/// qhca's MODIFY_QP lets a caller leave out (the device keeps its current value). What both
/// require is left to the caller: the core refuses it with `EINVAL`, as the device would.
fn fill_ins(qp_type: u8, cur: u8, next: u8) -> u32 {
    let rc = qp_type == IB_QPT_RC;
    match (cur as u32, next as u32) {
        (QHCA_QPS_RESET, QHCA_QPS_INIT) if rc => mask::PKEY_INDEX | mask::PORT | mask::ACCESS_FLAGS,
        (QHCA_QPS_RESET, QHCA_QPS_INIT) => mask::PKEY_INDEX | mask::PORT,
        (QHCA_QPS_INIT, QHCA_QPS_RTR) if rc => {
            mask::AV | mask::MAX_DEST_RD_ATOMIC | mask::MIN_RNR_TIMER
        }
        (QHCA_QPS_RTR, QHCA_QPS_RTS) if rc => mask::MAX_QP_RD_ATOMIC,
        _ => 0,
    }
}

/// Whether a transition to `next` may, from some current state, lack an attribute that
/// [`fill_ins`] names and `ib_mask` does not have: only then is the QP queried for its state and
/// values (a caller that gives them all, as `Qp::connect` does, costs one command a transition).
fn may_lack(qp_type: u8, next: u8, ib_mask: u32) -> bool {
    (QHCA_QPS_RESET as u8..=QHCA_QPS_ERR as u8)
        .any(|cur| fill_ins(qp_type, cur, next) & !ib_mask != 0)
}

/// qhca's path MTU (log2 of bytes, 8..=12) as the core's `enum ib_mtu` (1..=5), and back.
fn ib_mtu(log: u8) -> u8 {
    log.saturating_sub(7)
}
fn qhca_mtu(ib: u8) -> u8 {
    if ib == 0 {
        0
    } else {
        ib + 7
    }
}

/// An address vector as the core's QP destination.
fn dest_of(av: &qhca_ah_attr) -> ib_uverbs_qp_dest {
    ib_uverbs_qp_dest {
        dgid: av.dgid,
        flow_label: av.flow_label,
        sgid_index: av.sgid_index,
        hop_limit: av.hop_limit,
        traffic_class: av.traffic_class,
        sl: av.sl,
        is_global: 1,
        port_num: PORT,
        ..Default::default()
    }
}

/// The core's QP destination as an address vector.
fn av_of(d: &ib_uverbs_qp_dest) -> qhca_ah_attr {
    qhca_ah_attr {
        dgid: d.dgid,
        flow_label: d.flow_label,
        traffic_class: d.traffic_class,
        hop_limit: d.hop_limit,
        sl: d.sl,
        port_num: d.port_num,
        sgid_index: d.sgid_index,
        ..Default::default()
    }
}

/// qhca's region rights as the core's access flags and qhca's REG_MR flags.
fn reg_access(access: u32) -> Result<(u32, u32), Errno> {
    let rights = QHCA_ACCESS_LOCAL_WRITE
        | QHCA_ACCESS_REMOTE_WRITE
        | QHCA_ACCESS_REMOTE_READ
        | QHCA_ACCESS_REMOTE_ATOMIC;
    let known = rights | QHCA_ACCESS_ON_DEMAND | QHCA_ACCESS_WATCHED | QHCA_ACCESS_MW_BIND;
    if access & !known != 0 {
        return Err(Errno::EINVAL);
    }
    let mut ib = access & rights;
    if access & QHCA_ACCESS_ON_DEMAND != 0 {
        ib |= IB_ACCESS_ON_DEMAND;
    }
    if access & QHCA_ACCESS_MW_BIND != 0 {
        ib |= IB_ACCESS_MW_BIND;
    }
    let flags = if access & QHCA_ACCESS_WATCHED != 0 {
        QHCA_IB_REG_MR_WATCHED
    } else {
        0
    };
    Ok((ib, flags))
}

impl Uverbs {
    pub(crate) fn alloc_pd(&self, req: &mut qhca_ioc_handle) -> Result<(), Errno> {
        let mut resp = Resp::<ib_uverbs_alloc_pd_resp, qhca_ib_alloc_pd_resp>::default();
        let cmd = ib_uverbs_alloc_pd {
            ..Default::default()
        };
        self.run(IB_USER_VERBS_CMD_ALLOC_PD, cmd, (), &mut resp)?;
        self.remember(Kind::Pd, resp.drv.pdn.into(), resp.core.pd_handle);
        req.handle = resp.drv.pdn;
        Ok(())
    }

    pub(crate) fn dealloc_pd(&self, req: &mut qhca_ioc_handle) -> Result<(), Errno> {
        let cmd = ib_uverbs_dealloc_pd {
            pd_handle: self.handle(Kind::Pd, req.handle)?,
        };
        self.run(IB_USER_VERBS_CMD_DEALLOC_PD, cmd, (), &mut ())?;
        self.forget(Kind::Pd, req.handle.into());
        Ok(())
    }

    pub(crate) fn reg_mr(&self, req: &mut qhca_ioc_reg_mr) -> Result<(), Errno> {
        let (access_flags, flags) = reg_access(req.access)?;
        let cmd_pd = self.handle(Kind::Pd, req.pdn)?;
        let mut resp = ib_uverbs_reg_mr_resp::default();
        let cmd = ib_uverbs_reg_mr {
            start: req.addr,
            length: req.length,
            hca_va: req.addr,
            pd_handle: cmd_pd,
            access_flags,
            ..Default::default()
        };
        let drv = qhca_ib_reg_mr {
            comp_mask: 0,
            flags,
        };
        self.run(IB_USER_VERBS_CMD_REG_MR, cmd, drv, &mut resp)?;
        self.remember(Kind::Mr, resp.lkey.into(), resp.mr_handle);
        self.remember(Kind::MrPd, resp.lkey.into(), cmd_pd);
        req.lkey = resp.lkey;
        req.rkey = resp.rkey;
        Ok(())
    }

    /// DEREG_MR: the core's unbinds the region's windows first, as `QHCA_DEREG_MR_UNBIND_MWS`.
    pub(crate) fn dereg_mr(&self, req: &mut qhca_ioc_handle) -> Result<(), Errno> {
        let cmd = ib_uverbs_dereg_mr {
            mr_handle: self.handle(Kind::Mr, req.handle)?,
        };
        self.run(IB_USER_VERBS_CMD_DEREG_MR, cmd, (), &mut ())?;
        self.forget(Kind::Mr, req.handle.into());
        self.forget(Kind::MrPd, req.handle.into());
        Ok(())
    }

    /// ALLOC_MW: the core's type 2 is qhca's 2B (a type 2A window cannot be asked for here).
    pub(crate) fn alloc_mw(&self, req: &mut qhca_ioc_alloc_mw) -> Result<(), Errno> {
        let mw_type = match req.type_ {
            QHCA_MW_TYPE_1 => IB_MW_TYPE_1,
            QHCA_MW_TYPE_2B => IB_MW_TYPE_2,
            _ => return Err(Errno::EOPNOTSUPP),
        };
        let mut resp = ib_uverbs_alloc_mw_resp::default();
        let cmd = ib_uverbs_alloc_mw {
            pd_handle: self.handle(Kind::Pd, req.pdn)?,
            mw_type,
            ..Default::default()
        };
        self.run(IB_USER_VERBS_CMD_ALLOC_MW, cmd, (), &mut resp)?;
        self.remember(Kind::Mw, resp.rkey.into(), resp.mw_handle);
        req.key = resp.rkey;
        Ok(())
    }

    pub(crate) fn dealloc_mw(&self, req: &mut qhca_ioc_handle) -> Result<(), Errno> {
        let cmd = ib_uverbs_dealloc_mw {
            mw_handle: self.handle(Kind::Mw, req.handle)?,
        };
        self.run(IB_USER_VERBS_CMD_DEALLOC_MW, cmd, (), &mut ())?;
        self.forget(Kind::Mw, req.handle.into());
        Ok(())
    }

    pub(crate) fn create_ah(&self, req: &mut qhca_ioc_create_ah) -> Result<(), Errno> {
        let a = &req.attr;
        let mut resp = Resp::<ib_uverbs_create_ah_resp, qhca_ib_create_ah_resp>::default();
        let cmd = ib_uverbs_create_ah {
            pd_handle: self.handle(Kind::Pd, req.pdn)?,
            attr: ib_uverbs_ah_attr {
                grh: ib_uverbs_global_route {
                    dgid: a.dgid,
                    flow_label: a.flow_label,
                    sgid_index: a.sgid_index,
                    hop_limit: a.hop_limit,
                    traffic_class: a.traffic_class,
                    reserved: 0,
                },
                sl: a.sl,
                is_global: 1,
                port_num: PORT,
                ..Default::default()
            },
            ..Default::default()
        };
        self.run(IB_USER_VERBS_CMD_CREATE_AH, cmd, (), &mut resp)?;
        self.remember(Kind::Ah, resp.drv.ah.into(), resp.core.ah_handle);
        req.ah = resp.drv.ah;
        Ok(())
    }

    pub(crate) fn destroy_ah(&self, req: &mut qhca_ioc_handle) -> Result<(), Errno> {
        let cmd = ib_uverbs_destroy_ah {
            ah_handle: self.handle(Kind::Ah, req.handle)?,
        };
        self.run(IB_USER_VERBS_CMD_DESTROY_AH, cmd, (), &mut ())?;
        self.forget(Kind::Ah, req.handle.into());
        Ok(())
    }

    /// CREATE_CQ: `req.eventfd` is a completion channel of this context
    /// ([`Uverbs::create_comp_channel`]) or -1. The core reports the CQ's events by the ring's
    /// address.
    pub(crate) fn create_cq(&self, req: &mut qhca_ioc_create_cq) -> Result<(), Errno> {
        let mut resp = Resp::<ib_uverbs_create_cq_resp, qhca_ib_create_cq_resp>::default();
        let cmd = ib_uverbs_create_cq {
            user_handle: req.buf_addr,
            cqe: 1u32.checked_shl(req.log_entries).ok_or(Errno::EINVAL)?,
            comp_vector: 0,
            comp_channel: req.eventfd,
            ..Default::default()
        };
        let drv = qhca_ib_create_cq {
            buf_addr: req.buf_addr,
            buf_len: req.buf_len,
            log_entries: req.log_entries,
            comp_mask: 0,
        };
        self.run(IB_USER_VERBS_CMD_CREATE_CQ, cmd, drv, &mut resp)?;
        let cqn = resp.drv.cqn;
        self.remember(Kind::Cq, cqn.into(), resp.core.cq_handle);
        self.remember(Kind::CqEvents, req.buf_addr, cqn);
        req.cqn = cqn;
        Ok(())
    }

    /// RESIZE_CQ: the device moves CQ `cqn` to the ring `ring` names (the rules of CREATE_CQ's
    /// ring), with the CQEs not consumed yet; returns the core's `cqe`, `2^ring.log_entries`.
    /// The core goes on reporting the CQ's events by the handle CREATE_CQ gave, the first
    /// ring's address: the caller keeps that address from being reused while the CQ lives.
    pub(crate) fn resize_cq(&self, cqn: u32, ring: &qhca_ib_create_cq) -> Result<u32, Errno> {
        let mut resp = ib_uverbs_resize_cq_resp::default();
        let cmd = ib_uverbs_resize_cq {
            cq_handle: self.handle(Kind::Cq, cqn)?,
            cqe: 1u32.checked_shl(ring.log_entries).ok_or(Errno::EINVAL)?,
            ..Default::default()
        };
        self.run(IB_USER_VERBS_CMD_RESIZE_CQ, cmd, *ring, &mut resp)?;
        Ok(resp.cqe)
    }

    pub(crate) fn destroy_cq(&self, req: &mut qhca_ioc_handle) -> Result<(), Errno> {
        let mut resp = ib_uverbs_destroy_cq_resp::default();
        let cmd = ib_uverbs_destroy_cq {
            cq_handle: self.handle(Kind::Cq, req.handle)?,
            ..Default::default()
        };
        self.run(IB_USER_VERBS_CMD_DESTROY_CQ, cmd, (), &mut resp)?;
        self.forget(Kind::Cq, req.handle.into());
        self.handles()
            .0
            .retain(|&(k, _), v| !(k == Kind::CqEvents && *v == req.handle));
        Ok(())
    }

    /// CREATE_QP (RC or UD): the core reports the QP's events by its rings' address. A QP of an
    /// SRQ (`req.srqn` not 0) names the SRQ's core handle and asks for no receive queue
    /// (`max_recv_wr` and `max_recv_sge` 0; `rq_log` and `rq_stride_log` are 0 in the udata).
    pub(crate) fn create_qp(&self, req: &mut qhca_ioc_create_qp) -> Result<(), Errno> {
        let qp_type = match req.type_ {
            QHCA_QPT_RC => IB_QPT_RC,
            QHCA_QPT_UD => IB_QPT_UD,
            _ => return Err(Errno::EOPNOTSUPP),
        };
        let wr = |log: u8| 1u32.checked_shl(log.into()).ok_or(Errno::EINVAL);
        let (srq_handle, max_recv_wr, max_recv_sge) = match req.srqn {
            0 => (0, wr(req.rq_log)?, req.max_sge.into()),
            srqn => (self.handle(Kind::Srq, srqn)?, 0, 0),
        };
        let mut resp = ib_uverbs_create_qp_resp::default();
        let cmd = ib_uverbs_create_qp {
            user_handle: req.buf_addr,
            pd_handle: self.handle(Kind::Pd, req.pdn)?,
            send_cq_handle: self.handle(Kind::Cq, req.send_cqn)?,
            recv_cq_handle: self.handle(Kind::Cq, req.recv_cqn)?,
            srq_handle,
            max_send_wr: wr(req.sq_log)?,
            max_recv_wr,
            max_send_sge: req.max_sge.into(),
            max_recv_sge,
            max_inline_data: req.max_inline.into(),
            qp_type,
            is_srq: u8::from(req.srqn != 0),
            ..Default::default()
        };
        let drv = qhca_ib_create_qp {
            buf_addr: req.buf_addr,
            buf_len: req.buf_len,
            sq_log: req.sq_log,
            sq_stride_log: req.sq_stride_log,
            rq_log: req.rq_log,
            rq_stride_log: req.rq_stride_log,
            comp_mask: 0,
        };
        self.run(IB_USER_VERBS_CMD_CREATE_QP, cmd, drv, &mut resp)?;
        self.remember(Kind::Qp, resp.qpn.into(), resp.qp_handle);
        self.remember(Kind::QpEvents, req.buf_addr, resp.qpn);
        // The QP's type, for the transitions' required attributes.
        self.remember(Kind::QpType, resp.qpn.into(), qp_type.into());
        req.qpn = resp.qpn;
        Ok(())
    }

    pub(crate) fn destroy_qp(&self, req: &mut qhca_ioc_handle) -> Result<(), Errno> {
        let mut resp = ib_uverbs_destroy_qp_resp::default();
        let cmd = ib_uverbs_destroy_qp {
            qp_handle: self.handle(Kind::Qp, req.handle)?,
            ..Default::default()
        };
        self.run(IB_USER_VERBS_CMD_DESTROY_QP, cmd, (), &mut resp)?;
        self.forget(Kind::Qp, req.handle.into());
        self.forget(Kind::QpType, req.handle.into());
        self.handles()
            .0
            .retain(|&(k, _), v| !(k == Kind::QpEvents && *v == req.handle));
        Ok(())
    }

    /// CREATE_SRQ: the core's `max_wr` is the ring's `2^log` slots, `max_sge` the SGEs a slot
    /// holds, `srq_limit` 0 (not armed: [`Uverbs::modify_srq`] arms it); the core reports the
    /// SRQ's events by its ring's address.
    pub(crate) fn create_srq(&self, req: &mut qhca_ioc_create_srq) -> Result<(), Errno> {
        let mut resp = Resp::<ib_uverbs_create_srq_resp, qhca_ib_create_srq_resp>::default();
        let cmd = ib_uverbs_create_srq {
            user_handle: req.buf_addr,
            pd_handle: self.handle(Kind::Pd, req.pdn)?,
            max_wr: 1u32.checked_shl(req.log.into()).ok_or(Errno::EINVAL)?,
            max_sge: req.max_sge.into(),
            srq_limit: 0,
            ..Default::default()
        };
        let drv = qhca_ib_create_srq {
            buf_addr: req.buf_addr,
            buf_len: req.buf_len,
            log: req.log,
            stride_log: req.stride_log,
            rsvd: 0,
            comp_mask: 0,
        };
        self.run(IB_USER_VERBS_CMD_CREATE_SRQ, cmd, drv, &mut resp)?;
        let srqn = resp.drv.srqn;
        self.remember(Kind::Srq, srqn.into(), resp.core.srq_handle);
        self.remember(Kind::SrqEvents, req.buf_addr, srqn);
        req.srqn = srqn;
        Ok(())
    }

    /// MODIFY_SRQ: arms the limit (`IB_SRQ_LIMIT` alone; 0 disarms).
    pub(crate) fn modify_srq(&self, srqn: u32, limit: u32) -> Result<(), Errno> {
        let cmd = ib_uverbs_modify_srq {
            srq_handle: self.handle(Kind::Srq, srqn)?,
            attr_mask: IB_SRQ_LIMIT,
            max_wr: 0,
            srq_limit: limit,
            ..Default::default()
        };
        self.run(IB_USER_VERBS_CMD_MODIFY_SRQ, cmd, (), &mut ())
    }

    /// QUERY_SRQ: `(max_wr, max_sge, srq_limit)`.
    pub(crate) fn query_srq(&self, srqn: u32) -> Result<(u32, u32, u32), Errno> {
        let mut resp = ib_uverbs_query_srq_resp::default();
        let cmd = ib_uverbs_query_srq {
            srq_handle: self.handle(Kind::Srq, srqn)?,
            ..Default::default()
        };
        self.run(IB_USER_VERBS_CMD_QUERY_SRQ, cmd, (), &mut resp)?;
        Ok((resp.max_wr, resp.max_sge, resp.srq_limit))
    }

    /// DESTROY_SRQ: the core refuses it (`EBUSY`) while a QP receives from the SRQ.
    pub(crate) fn destroy_srq(&self, req: &mut qhca_ioc_handle) -> Result<(), Errno> {
        let mut resp = ib_uverbs_destroy_srq_resp::default();
        let cmd = ib_uverbs_destroy_srq {
            srq_handle: self.handle(Kind::Srq, req.handle)?,
            ..Default::default()
        };
        self.run(IB_USER_VERBS_CMD_DESTROY_SRQ, cmd, (), &mut resp)?;
        self.forget(Kind::Srq, req.handle.into());
        self.handles()
            .0
            .retain(|&(k, _), v| !(k == Kind::SrqEvents && *v == req.handle));
        Ok(())
    }

    /// QUERY_QP: every attribute qhca's QPs have.
    fn query_raw(&self, qpn: u32) -> Result<ib_uverbs_query_qp_resp, Errno> {
        let mut resp = ib_uverbs_query_qp_resp::default();
        let cmd = ib_uverbs_query_qp {
            qp_handle: self.handle(Kind::Qp, qpn)?,
            attr_mask: mask::QUERY,
            ..Default::default()
        };
        self.run(IB_USER_VERBS_CMD_QUERY_QP, cmd, (), &mut resp)?;
        Ok(resp)
    }

    pub(crate) fn query_qp(&self, req: &mut qhca_ioc_qp_attr) -> Result<(), Errno> {
        let r = self.query_raw(req.qpn)?;
        req.attr = qhca_qp_attr {
            mask: ATTRS.iter().fold(0, |m, (q, _)| m | q),
            state: r.qp_state,
            path_mtu: qhca_mtu(r.path_mtu),
            timeout: r.timeout,
            retry_cnt: r.retry_cnt,
            rnr_retry: r.rnr_retry,
            min_rnr_timer: r.min_rnr_timer,
            max_rd_atomic: r.max_rd_atomic,
            max_dest_rd_atomic: r.max_dest_rd_atomic,
            access: r.qp_access_flags
                & (QHCA_ACCESS_REMOTE_WRITE | QHCA_ACCESS_REMOTE_READ | QHCA_ACCESS_REMOTE_ATOMIC),
            dest_qpn: r.dest_qp_num,
            rq_psn: r.rq_psn,
            sq_psn: r.sq_psn,
            qkey: r.qkey,
            av: av_of(&r.dest),
        };
        Ok(())
    }

    /// MODIFY_QP. qhca lets a transition leave out attributes the core requires (the device
    /// keeps what it has): those are taken from a QUERY_QP first, if the caller left any out;
    /// P_Key index 0 and port 1 go with every move to INIT (required from RESET, allowed from
    /// INIT).
    pub(crate) fn modify_qp(&self, req: &mut qhca_ioc_qp_attr) -> Result<(), Errno> {
        let a = &req.attr;
        // PSNs are 24 bits: the device refuses more, the core would mask them with a warning.
        let psn = |bit: u32, v: u32| a.mask & bit != 0 && v > 0xff_ffff;
        if psn(QHCA_QP_ATTR_RQ_PSN, a.rq_psn) || psn(QHCA_QP_ATTR_SQ_PSN, a.sq_psn) {
            return Err(Errno::EINVAL);
        }
        let mut ib_mask = ATTRS
            .iter()
            .filter(|(q, _)| a.mask & q != 0)
            .fold(0, |m, (_, ib)| m | ib);
        let mut cmd = ib_uverbs_modify_qp {
            qp_handle: self.handle(Kind::Qp, req.qpn)?,
            qkey: a.qkey,
            rq_psn: a.rq_psn,
            sq_psn: a.sq_psn,
            dest_qp_num: a.dest_qpn,
            qp_access_flags: a.access,
            qp_state: a.state,
            path_mtu: ib_mtu(a.path_mtu),
            max_rd_atomic: a.max_rd_atomic,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            min_rnr_timer: a.min_rnr_timer,
            port_num: PORT,
            timeout: a.timeout,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
            ..Default::default()
        };
        if a.mask & QHCA_QP_ATTR_AV != 0 {
            cmd.dest = dest_of(&a.av);
        }
        if a.mask & QHCA_QP_ATTR_STATE != 0 && u32::from(a.state) == QHCA_QPS_INIT {
            // P_Key index 0 and port 1 are already in the command.
            ib_mask |= mask::PKEY_INDEX | mask::PORT;
        }
        let qp_type = u8::try_from(self.handle(Kind::QpType, req.qpn)?).unwrap_or(0);
        if a.mask & QHCA_QP_ATTR_STATE != 0 && may_lack(qp_type, a.state, ib_mask) {
            let cur = self.query_raw(req.qpn)?;
            let missing = fill_ins(qp_type, cur.qp_state, a.state) & !ib_mask;
            // The device's current value of each attribute filled in.
            macro_rules! take {
                ($($bit:ident: $field:ident),*) => {$(
                    if missing & mask::$bit != 0 {
                        cmd.$field = cur.$field;
                    }
                )*};
            }
            take!(
                ACCESS_FLAGS: qp_access_flags,
                MAX_DEST_RD_ATOMIC: max_dest_rd_atomic,
                MAX_QP_RD_ATOMIC: max_rd_atomic,
                MIN_RNR_TIMER: min_rnr_timer
            );
            if missing & mask::AV != 0 {
                cmd.dest = ib_uverbs_qp_dest {
                    is_global: 1,
                    port_num: PORT,
                    ..cur.dest
                };
            }
            ib_mask |= missing;
        }
        cmd.attr_mask = ib_mask;
        self.run(IB_USER_VERBS_CMD_MODIFY_QP, cmd, (), &mut ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transitions_fill_in_what_only_the_core_requires() {
        let (r, i, rtr, rts) = (
            QHCA_QPS_RESET as u8,
            QHCA_QPS_INIT as u8,
            QHCA_QPS_RTR as u8,
            QHCA_QPS_RTS as u8,
        );
        assert_eq!(fill_ins(IB_QPT_UD, r, i), mask::PKEY_INDEX | mask::PORT);
        assert_eq!(fill_ins(IB_QPT_UD, i, rtr), 0);
        assert_eq!(fill_ins(IB_QPT_UD, rtr, rts), 0);
        assert_eq!(
            fill_ins(IB_QPT_RC, i, rtr),
            mask::AV | mask::MAX_DEST_RD_ATOMIC | mask::MIN_RNR_TIMER
        );
        assert_eq!(fill_ins(IB_QPT_RC, rtr, rts), mask::MAX_QP_RD_ATOMIC);
        assert_eq!(fill_ins(IB_QPT_RC, rts, rts), 0);
    }

    #[test]
    fn a_transition_queries_only_if_something_may_be_missing() {
        let (i, rtr, rts, err) = (
            QHCA_QPS_INIT as u8,
            QHCA_QPS_RTR as u8,
            QHCA_QPS_RTS as u8,
            QHCA_QPS_ERR as u8,
        );
        let base = mask::STATE | mask::PKEY_INDEX | mask::PORT;
        // What Qp::connect gives: nothing to fill in, no query.
        assert!(!may_lack(IB_QPT_RC, i, base | mask::ACCESS_FLAGS));
        let rtr_all = base | mask::AV | mask::MAX_DEST_RD_ATOMIC | mask::MIN_RNR_TIMER;
        assert!(!may_lack(IB_QPT_RC, rtr, rtr_all));
        assert!(!may_lack(IB_QPT_RC, rts, base | mask::MAX_QP_RD_ATOMIC));
        assert!(!may_lack(IB_QPT_UD, i, base));
        assert!(!may_lack(IB_QPT_UD, rtr, base));
        assert!(!may_lack(IB_QPT_RC, err, mask::STATE));
        // Left out: queried.
        assert!(may_lack(IB_QPT_RC, i, base));
        assert!(may_lack(IB_QPT_RC, rtr, rtr_all & !mask::MIN_RNR_TIMER));
        assert!(may_lack(IB_QPT_RC, rts, base));
    }

    #[test]
    fn mtus_and_rights_translate() {
        assert_eq!((ib_mtu(12), qhca_mtu(5)), (5, 12));
        assert_eq!((ib_mtu(8), qhca_mtu(1)), (1, 8));
        assert_eq!(
            reg_access(QHCA_ACCESS_LOCAL_WRITE | QHCA_ACCESS_ON_DEMAND),
            Ok((1 | IB_ACCESS_ON_DEMAND, 0))
        );
        assert_eq!(
            reg_access(QHCA_ACCESS_WATCHED | QHCA_ACCESS_MW_BIND),
            Ok((IB_ACCESS_MW_BIND, QHCA_IB_REG_MR_WATCHED))
        );
        assert_eq!(reg_access(1 << 20), Err(Errno::EINVAL));
    }
}
