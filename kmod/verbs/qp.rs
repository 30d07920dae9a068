// SPDX-License-Identifier: GPL-2.0

//! Queue pairs: CREATE_QP (reliable connected or unreliable datagram), MODIFY_QP and QUERY_QP;
//! DESTROY_QP goes through [`Verbs::destroy`].

use super::{
    ah::{av_from_le, av_to_le, check_av},
    page_align, position, Objects, RingMem, Verbs,
};
use crate::{cmdq::Cmd, limits::Pool, pagelist::span_pages, rdma::QpEvents, shim::Umem, uapi};
use kernel::{
    dma::{Coherent, CoherentBox},
    prelude::*,
    transmute::{AsBytes, FromBytes},
};

/// A queue pair: its number, the objects it names (busy while it lives) and its rings, pinned.
pub(super) struct Qp {
    pub(super) qpn: u32,
    pub(super) pdn: u32,
    pub(super) send_cqn: u32,
    pub(super) recv_cqn: u32,
    /// The SRQ it receives from, or 0.
    pub(super) srqn: u32,
    _mem: RingMem,
}

/// `ENOENT` unless the PD, CQs and SRQ `a` names are the context's.
fn refs_exist(objs: &Objects, a: &uapi::qhca_ioc_create_qp) -> Result {
    position(&objs.pds, |&p| p == a.pdn)?;
    position(&objs.cqs, |c| c.cqn == a.send_cqn)?;
    position(&objs.cqs, |c| c.cqn == a.recv_cqn)?;
    if a.srqn != 0 {
        position(&objs.srqs, |s| s.srqn == a.srqn)?;
    }
    Ok(())
}

/// `2^log` entries of `2^stride_log` bytes: the ring's size, or `EINVAL` if out of the ABI's
/// limits.
fn ring_bytes(log: u8, stride_log: u8, min_stride: u32, max_stride: u32) -> Result<u64> {
    let (log, stride_log) = (u32::from(log), u32::from(stride_log));
    if !(1..=uapi::QHCA_WQ_MAX_LOG).contains(&log)
        || !(min_stride..=max_stride).contains(&stride_log)
    {
        return Err(EINVAL);
    }
    Ok(1u64 << (log + stride_log))
}

impl Verbs<'_> {
    /// A QP as `a` describes it (its header and output fields ignored), whose events go to
    /// the core's QP `route`: its number.
    pub(crate) fn create_qp(&self, a: &uapi::qhca_ioc_create_qp, route: QpEvents) -> Result<u32> {
        if !matches!(a.type_, uapi::QHCA_QPT_RC | uapi::QHCA_QPT_UD) {
            return Err(EINVAL);
        }
        let (sq, rq) = self.check_qp(a)?;
        if a.buf_addr % u64::from(uapi::QHCA_PAGE_SIZE) != 0
            || a.buf_len < page_align(sq) + rq
            || a.buf_len > page_align(sq) + page_align(rq)
        {
            return Err(EINVAL);
        }
        span_pages(a.buf_addr, a.buf_len)?;
        // Checked before pinning (a bad handle costs no pin) and again under the lock.
        refs_exist(&self.objs.lock(), a)?;
        let mem = Umem::pin(a.buf_addr, a.buf_len, true)?;
        self.create_qp_in(a, RingMem::User(mem), route)
    }

    /// Checks the shape and limits `a` asks for: the bytes of its send and receive rings.
    pub(super) fn check_qp(&self, a: &uapi::qhca_ioc_create_qp) -> Result<(u64, u64)> {
        let attr = self.dev.attr()?;
        if a.type_ == uapi::QHCA_QPT_UD && attr.caps & u64::from(uapi::QHCA_CAP_UD) == 0 {
            return Err(EOPNOTSUPP);
        }
        let sq = ring_bytes(
            a.sq_log,
            a.sq_stride_log,
            uapi::QHCA_SQ_MIN_STRIDE_LOG,
            uapi::QHCA_SQ_MAX_STRIDE_LOG,
        )?;
        // On an SRQ: no receive queue of its own.
        let (rq, rq_room) = if a.srqn != 0 {
            if a.rq_log != 0 || a.rq_stride_log != 0 {
                return Err(EINVAL);
            }
            (0, u32::MAX)
        } else {
            let rq = ring_bytes(
                a.rq_log,
                a.rq_stride_log,
                uapi::QHCA_RQ_MIN_STRIDE_LOG,
                uapi::QHCA_RQ_MAX_STRIDE_LOG,
            )?;
            (rq, (1u32 << a.rq_stride_log) - 16)
        };
        let sq_room = (1u32 << a.sq_stride_log) - uapi::QHCA_WQE_DATA_OFFSET;
        if a.max_sge == 0
            || u32::from(a.max_sge) > attr.max_sge
            || u32::from(a.max_inline) > attr.max_inline
            || 16 * u32::from(a.max_sge) > sq_room
            || u32::from(a.max_inline) > sq_room
            || 16 * u32::from(a.max_sge) > rq_room
            || (1u32 << a.sq_log) > attr.max_qp_wr
            || (1u32 << a.rq_log) > attr.max_qp_wr
        {
            return Err(EINVAL);
        }
        Ok((sq, rq))
    }

    /// CREATE_QP as `a` describes it, checked by the caller, with its rings in `mem`: its
    /// number.
    pub(super) fn create_qp_in(
        &self,
        a: &uapi::qhca_ioc_create_qp,
        mut mem: RingMem,
        route: QpEvents,
    ) -> Result<u32> {
        self.locked(|bound, objs| {
            // A concurrent destroy may have removed them since the caller looked.
            refs_exist(objs, a)?;
            objs.qps.reserve(1, GFP_KERNEL)?;
            self.ctx.reserve()?;
            let list = mem.page_list(bound)?;
            let args = uapi::qhca_cmd_create_qp {
                uar: self.uar.to_le(),
                pdn: a.pdn.to_le(),
                send_cqn: a.send_cqn.to_le(),
                recv_cqn: a.recv_cqn.to_le(),
                sq_log: a.sq_log,
                sq_stride_log: a.sq_stride_log,
                rq_log: a.rq_log,
                rq_stride_log: a.rq_stride_log,
                max_inline: a.max_inline.to_le(),
                max_sge: a.max_sge.to_le(),
                npages: list.npages().to_le(),
                type_: a.type_.to_le(),
                pages_addr: list.dma_address().to_le(),
            };
            let cmd = Cmd::new(uapi::QHCA_CMD_CREATE_QP)
                .input_struct(&args)
                .input_ext(a.srqn);
            let qpn = self.charged(Pool::Qps, || self.create(cmd, "qpn"))?;
            // Neither can fail: room was reserved above.
            self.ctx.add_qp(qpn, route)?;
            let qp = Qp {
                qpn,
                pdn: a.pdn,
                send_cqn: a.send_cqn,
                recv_cqn: a.recv_cqn,
                srqn: a.srqn,
                _mem: mem,
            };
            objs.qps.push(qp, GFP_KERNEL)?;
            Ok(qpn)
        })
    }

    /// MODIFY_QP of QP `qpn` with `q` (CPU byte order).
    ///
    /// # Errors
    ///
    /// `EINVAL` for an empty or unknown mask, an address vector that [`check_av`] refuses (or
    /// one the mask does not name that is not all zero) or a transition the device refuses
    /// (it checks the transition); `EOPNOTSUPP` for an address vector on a device without a
    /// port; `EPERM` for a controlled Q_Key (`QHCA_QKEY_CONTROLLED`, IBA 10.2.5) without
    /// `CAP_NET_RAW`; `ENOENT` for a QP this context did not create.
    pub(crate) fn modify_qp(&self, qpn: u32, q: &uapi::qhca_qp_attr) -> Result {
        if q.mask == 0 || q.mask & !uapi::QHCA_QP_ATTR_ALL != 0 {
            return Err(EINVAL);
        }
        if q.mask & uapi::QHCA_QP_ATTR_AV != 0 {
            check_av(&q.av)?;
            if self.dev.attr()?.caps & u64::from(uapi::QHCA_CAP_PORT) == 0 {
                return Err(EOPNOTSUPP);
            }
        } else if q.av.as_bytes().iter().any(|&b| b != 0) {
            // Like every field the mask does not name.
            return Err(EINVAL);
        }
        if q.mask & uapi::QHCA_QP_ATTR_QKEY != 0
            && q.qkey & uapi::QHCA_QKEY_CONTROLLED != 0
            && !self.ctx.kernel
            && !crate::shim::capable_net_raw()
        {
            return Err(EPERM);
        }
        let mut le = *q;
        le.mask = q.mask.to_le();
        le.access = q.access.to_le();
        le.dest_qpn = q.dest_qpn.to_le();
        le.rq_psn = q.rq_psn.to_le();
        le.sq_psn = q.sq_psn.to_le();
        le.qkey = q.qkey.to_le();
        le.av = av_to_le(&q.av);
        self.locked(|bound, objs| {
            position(&objs.qps, |x| x.qpn == qpn)?;
            let mailbox: Coherent<[u8]> =
                CoherentBox::<[u8]>::from_slice(bound, le.as_bytes(), GFP_KERNEL)?.into();
            self.dev
                .exec(
                    Cmd::new(uapi::QHCA_CMD_MODIFY_QP)
                        .input(0, self.uar.into())
                        .input(1, qpn.into())
                        .input(2, mailbox.dma_address()),
                )
                // BAD_STATE: not a transition from the QP's state.
                .map_err(|e| if e == EBUSY { EINVAL } else { e })?;
            Ok(())
        })
    }

    /// QUERY_QP of QP `qpn`: its attributes in CPU byte order.
    pub(crate) fn query_qp(&self, qpn: u32) -> Result<uapi::qhca_qp_attr> {
        const SIZE: usize = core::mem::size_of::<uapi::qhca_qp_attr>();
        let bytes = self.locked(|bound, objs| {
            position(&objs.qps, |x| x.qpn == qpn)?;
            let cmd = Cmd::new(uapi::QHCA_CMD_QUERY_QP)
                .input(0, self.uar.into())
                .input(1, qpn.into());
            self.query::<SIZE>(bound, cmd)
        })?;
        let le = uapi::qhca_qp_attr::from_bytes_copy(&bytes).ok_or(EIO)?;
        Ok(uapi::qhca_qp_attr {
            mask: u32::from_le(le.mask),
            access: u32::from_le(le.access),
            dest_qpn: u32::from_le(le.dest_qpn),
            rq_psn: u32::from_le(le.rq_psn),
            sq_psn: u32::from_le(le.sq_psn),
            qkey: u32::from_le(le.qkey),
            av: av_from_le(&le.av),
            ..le
        })
    }
}
