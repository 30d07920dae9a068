// SPDX-License-Identifier: GPL-2.0

//! Queue pairs of user contexts and kernel consumers ([`super::kobjects`] creates those): the
//! core's creation, attributes and states translated to qhca's (`struct qhca_qp_attr`), and back for QUERY_QP.
//!
//! The transitions and the attributes each one needs are the verbs' (`ib_modify_qp_is_ok`,
//! as rxe checks them); the device checks them again, and its values (ranges, the address
//! vector's GID entry) are final.

use super::{
    ib_mtu,
    objects::{ioc_size, qhca_av, QhcaCq},
    srq::QhcaSrq,
    verbs, QhcaPd, PORT,
};
use crate::{
    context::Ctx,
    kverbs::{cq::KCq, qp::KQp},
    rdma, uapi,
};
use kernel::{bindings, prelude::*, sync::Arc};

/// A queue pair, with what its creation settled (QUERY_QP reports it).
pub(crate) struct QhcaQp {
    ctx: Arc<Ctx>,
    qpn: u32,
    qp_type: bindings::ib_qp_type,
    sq_sig_type: bindings::ib_sig_type,
    cap: bindings::ib_qp_cap,
    /// A kernel QP's rings, and the CQs that report its completions.
    k: Option<KernelQp>,
}

/// What a kernel QP has beyond a user's.
struct KernelQp {
    qp: Arc<KQp>,
    send_cq: Arc<KCq>,
    recv_cq: Arc<KCq>,
}

/// The `IB_QP_*` attributes qhca's QPs take.
const KNOWN: u32 = bindings::ib_qp_attr_mask_IB_QP_STATE
    | bindings::ib_qp_attr_mask_IB_QP_CUR_STATE
    | bindings::ib_qp_attr_mask_IB_QP_ACCESS_FLAGS
    | bindings::ib_qp_attr_mask_IB_QP_PKEY_INDEX
    | bindings::ib_qp_attr_mask_IB_QP_PORT
    | bindings::ib_qp_attr_mask_IB_QP_QKEY
    | bindings::ib_qp_attr_mask_IB_QP_AV
    | bindings::ib_qp_attr_mask_IB_QP_PATH_MTU
    | bindings::ib_qp_attr_mask_IB_QP_TIMEOUT
    | bindings::ib_qp_attr_mask_IB_QP_RETRY_CNT
    | bindings::ib_qp_attr_mask_IB_QP_RNR_RETRY
    | bindings::ib_qp_attr_mask_IB_QP_RQ_PSN
    | bindings::ib_qp_attr_mask_IB_QP_MAX_QP_RD_ATOMIC
    | bindings::ib_qp_attr_mask_IB_QP_MIN_RNR_TIMER
    | bindings::ib_qp_attr_mask_IB_QP_SQ_PSN
    | bindings::ib_qp_attr_mask_IB_QP_MAX_DEST_RD_ATOMIC
    | bindings::ib_qp_attr_mask_IB_QP_DEST_QPN;

/// The responder's access bits (`IB_ACCESS_REMOTE_*`), which are qhca's.
const REMOTE: u32 = uapi::QHCA_ACCESS_ALL & !uapi::QHCA_ACCESS_LOCAL_WRITE;

/// qhca's state of the core's, or `None` for one qhca's QPs do not have (SQD, SQE).
fn qhca_state(s: bindings::ib_qp_state) -> Option<u8> {
    match s {
        bindings::ib_qp_state_IB_QPS_RESET => Some(uapi::QHCA_QPS_RESET as u8),
        bindings::ib_qp_state_IB_QPS_INIT => Some(uapi::QHCA_QPS_INIT as u8),
        bindings::ib_qp_state_IB_QPS_RTR => Some(uapi::QHCA_QPS_RTR as u8),
        bindings::ib_qp_state_IB_QPS_RTS => Some(uapi::QHCA_QPS_RTS as u8),
        bindings::ib_qp_state_IB_QPS_ERR => Some(uapi::QHCA_QPS_ERR as u8),
        _ => None,
    }
}

/// qhca's path MTU (log2 bytes, 8..12) of the core's `ib_mtu` (1..5).
fn qhca_mtu(mtu: bindings::ib_mtu) -> Result<u8> {
    match mtu {
        1..=5 => Ok(mtu as u8 + 7),
        _ => Err(EINVAL),
    }
}

/// The core's state of qhca's (which uses the verbs' numbers).
fn ib_state(s: u8) -> bindings::ib_qp_state {
    bindings::ib_qp_state::from(s)
}

/// A user QP of `pd`, RC or UD, with rings the driver input describes, receiving from `srq` if
/// it has one (then the driver input has no receive queue, and the core's receive capabilities
/// are ignored, as the verbs say); its events go to the core's QP.
pub(super) fn create(
    pd: &QhcaPd,
    ev: rdma::QpEvents,
    init: &mut bindings::ib_qp_init_attr,
    send_cq: &QhcaCq,
    recv_cq: &QhcaCq,
    srq: Option<&QhcaSrq>,
    udata: &mut rdma::Udata<'_>,
) -> Result<(QhcaQp, u32)> {
    let type_ = match init.qp_type {
        bindings::ib_qp_type_IB_QPT_RC => uapi::QHCA_QPT_RC,
        bindings::ib_qp_type_IB_QPT_UD => uapi::QHCA_QPT_UD,
        _ => return Err(EOPNOTSUPP),
    };
    if init.create_flags != 0 {
        return Err(EOPNOTSUPP);
    }
    let u: uapi::qhca_ib_create_qp = udata.read_in()?;
    let cap = &mut init.cap;
    if srq.is_some() {
        cap.max_recv_wr = 0;
        cap.max_recv_sge = 0;
    }
    let fits = |log: u8, wr: u32| log < 32 && (1u64 << log) >= u64::from(wr);
    let max_sge =
        u16::try_from(cap.max_send_sge.max(cap.max_recv_sge).max(1)).map_err(|_| EINVAL)?;
    let max_inline = u16::try_from(cap.max_inline_data).map_err(|_| EINVAL)?;
    if u.comp_mask != 0 || !fits(u.sq_log, cap.max_send_wr) || !fits(u.rq_log, cap.max_recv_wr) {
        return Err(EINVAL);
    }
    let a = uapi::qhca_ioc_create_qp {
        size: ioc_size::<uapi::qhca_ioc_create_qp>(),
        pdn: pd.pdn,
        send_cqn: send_cq.cqn,
        recv_cqn: recv_cq.cqn,
        sq_log: u.sq_log,
        sq_stride_log: u.sq_stride_log,
        rq_log: u.rq_log,
        rq_stride_log: u.rq_stride_log,
        max_inline,
        max_sge,
        type_,
        buf_addr: u.buf_addr,
        buf_len: u.buf_len,
        srqn: srq.map_or(0, |s| s.srqn),
        ..Default::default()
    };
    // Every object of the command is the context's (the core looked them up in it), so the
    // context's commands find them.
    let qpn = verbs(&pd.ctx)?.create_qp(&a, ev)?;
    cap.max_send_wr = 1 << u.sq_log;
    cap.max_send_sge = u32::from(max_sge);
    if srq.is_none() {
        cap.max_recv_wr = 1 << u.rq_log;
        cap.max_recv_sge = u32::from(max_sge);
    }
    cap.max_inline_data = u32::from(max_inline);
    let qp = QhcaQp {
        ctx: pd.ctx.clone(),
        qpn,
        qp_type: init.qp_type,
        sq_sig_type: init.sq_sig_type,
        cap: init.cap,
        k: None,
    };
    Ok((qp, qpn))
}

impl QhcaQp {
    /// A kernel QP of `pd` (the kernel context's), created as `init` says, with rings `qp`
    /// reporting into the CQs given.
    pub(super) fn kernel(
        pd: &QhcaPd,
        init: &bindings::ib_qp_init_attr,
        qpn: u32,
        qp: Arc<KQp>,
        send_cq: Arc<KCq>,
        recv_cq: Arc<KCq>,
    ) -> Self {
        Self {
            ctx: pd.ctx.clone(),
            qpn,
            qp_type: init.qp_type,
            sq_sig_type: init.sq_sig_type,
            cap: init.cap,
            k: Some(KernelQp {
                qp,
                send_cq,
                recv_cq,
            }),
        }
    }

    /// The rings of a kernel QP (`None` for a user's).
    pub(super) fn kernel_qp(&self) -> Option<&Arc<KQp>> {
        self.k.as_ref().map(|k| &k.qp)
    }

    /// MODIFY_QP: the transition the verbs allow, with the attributes it needs.
    ///
    /// # Errors
    ///
    /// `EOPNOTSUPP` for attributes qhca's QPs do not have (alternate paths, migration, SQD,
    /// capability changes, rate limits); `EINVAL` for a transition or attribute set the verbs
    /// do not allow, a P_Key index other than 0 or a port other than 1, an MTU out of range, or
    /// what the device refuses.
    pub(super) fn modify(
        &self,
        attr: &bindings::ib_qp_attr,
        mask: u32,
        udata: Option<&mut rdma::Udata<'_>>,
    ) -> Result {
        if let Some(u) = udata {
            u.input_zero()?;
        }
        if mask & !KNOWN != 0 {
            return Err(EOPNOTSUPP);
        }
        let has = |m: u32| mask & m != 0;
        let v = verbs(&self.ctx)?;
        let cur = if has(bindings::ib_qp_attr_mask_IB_QP_CUR_STATE) {
            attr.cur_qp_state
        } else {
            ib_state(v.query_qp(self.qpn)?.state)
        };
        let next = if has(bindings::ib_qp_attr_mask_IB_QP_STATE) {
            attr.qp_state
        } else {
            cur
        };
        // SAFETY: A pure function of its arguments.
        if !unsafe { bindings::ib_modify_qp_is_ok(cur, next, self.qp_type, mask) } {
            return Err(EINVAL);
        }
        if (has(bindings::ib_qp_attr_mask_IB_QP_PKEY_INDEX) && attr.pkey_index != 0)
            || (has(bindings::ib_qp_attr_mask_IB_QP_PORT) && attr.port_num != PORT)
        {
            return Err(EINVAL);
        }
        // Each attribute the mask names, with its qhca bit; the others stay zero, as the device
        // wants them.
        let mut q = uapi::qhca_qp_attr::default();
        macro_rules! copy {
            ($ib:ident, $bit:ident, $field:ident = $value:expr) => {
                if has(bindings::$ib) {
                    q.mask |= uapi::$bit;
                    q.$field = $value;
                }
            };
        }
        copy!(
            ib_qp_attr_mask_IB_QP_STATE,
            QHCA_QP_ATTR_STATE,
            state = qhca_state(next).ok_or(EOPNOTSUPP)?
        );
        copy!(
            ib_qp_attr_mask_IB_QP_ACCESS_FLAGS,
            QHCA_QP_ATTR_ACCESS,
            access = attr.qp_access_flags as u32 & REMOTE
        );
        copy!(
            ib_qp_attr_mask_IB_QP_QKEY,
            QHCA_QP_ATTR_QKEY,
            qkey = attr.qkey
        );
        copy!(
            ib_qp_attr_mask_IB_QP_AV,
            QHCA_QP_ATTR_AV,
            av = qhca_av(&rdma::Av::from_core(&attr.ah_attr)?)?
        );
        copy!(
            ib_qp_attr_mask_IB_QP_PATH_MTU,
            QHCA_QP_ATTR_PATH_MTU,
            path_mtu = qhca_mtu(attr.path_mtu)?
        );
        copy!(
            ib_qp_attr_mask_IB_QP_TIMEOUT,
            QHCA_QP_ATTR_TIMEOUT,
            timeout = attr.timeout
        );
        copy!(
            ib_qp_attr_mask_IB_QP_RETRY_CNT,
            QHCA_QP_ATTR_RETRY_CNT,
            retry_cnt = attr.retry_cnt
        );
        copy!(
            ib_qp_attr_mask_IB_QP_RNR_RETRY,
            QHCA_QP_ATTR_RNR_RETRY,
            rnr_retry = attr.rnr_retry
        );
        copy!(
            ib_qp_attr_mask_IB_QP_RQ_PSN,
            QHCA_QP_ATTR_RQ_PSN,
            rq_psn = attr.rq_psn
        );
        copy!(
            ib_qp_attr_mask_IB_QP_SQ_PSN,
            QHCA_QP_ATTR_SQ_PSN,
            sq_psn = attr.sq_psn
        );
        copy!(
            ib_qp_attr_mask_IB_QP_MIN_RNR_TIMER,
            QHCA_QP_ATTR_MIN_RNR_TIMER,
            min_rnr_timer = attr.min_rnr_timer
        );
        copy!(
            ib_qp_attr_mask_IB_QP_MAX_QP_RD_ATOMIC,
            QHCA_QP_ATTR_MAX_RD_ATOMIC,
            max_rd_atomic = attr.max_rd_atomic
        );
        copy!(
            ib_qp_attr_mask_IB_QP_MAX_DEST_RD_ATOMIC,
            QHCA_QP_ATTR_MAX_DEST_RD_ATOMIC,
            max_dest_rd_atomic = attr.max_dest_rd_atomic
        );
        copy!(
            ib_qp_attr_mask_IB_QP_DEST_QPN,
            QHCA_QP_ATTR_DEST_QPN,
            dest_qpn = attr.dest_qp_num
        );
        if q.mask == 0 {
            // Nothing the device keeps (a P_Key index or port only).
            return Ok(());
        }
        v.modify_qp(self.qpn, &q)
    }

    /// QUERY_QP: the device's attributes, in the core's terms, and the creation's.
    pub(super) fn query(
        &self,
        attr: &mut bindings::ib_qp_attr,
        init: &mut bindings::ib_qp_init_attr,
    ) -> Result {
        let q = verbs(&self.ctx)?.query_qp(self.qpn)?;
        attr.qp_state = ib_state(q.state);
        attr.cur_qp_state = attr.qp_state;
        attr.path_mtu = ib_mtu(q.path_mtu).ok_or(EIO)?;
        attr.qkey = q.qkey;
        attr.rq_psn = q.rq_psn;
        attr.sq_psn = q.sq_psn;
        attr.dest_qp_num = q.dest_qpn;
        attr.qp_access_flags = (q.access & REMOTE) as i32;
        attr.cap = self.cap;
        attr.pkey_index = 0;
        attr.port_num = PORT;
        attr.timeout = q.timeout;
        attr.retry_cnt = q.retry_cnt;
        attr.rnr_retry = q.rnr_retry;
        attr.min_rnr_timer = q.min_rnr_timer;
        attr.max_rd_atomic = q.max_rd_atomic;
        attr.max_dest_rd_atomic = q.max_dest_rd_atomic;
        if self.qp_type == bindings::ib_qp_type_IB_QPT_RC {
            let av = rdma::Av {
                dgid: q.av.dgid,
                flow_label: q.av.flow_label,
                traffic_class: q.av.traffic_class,
                hop_limit: q.av.hop_limit,
                sl: q.av.sl,
                port: PORT,
                sgid_index: q.av.sgid_index,
            };
            av.write_to(&mut attr.ah_attr);
        }
        init.qp_type = self.qp_type;
        init.sq_sig_type = self.sq_sig_type;
        init.cap = self.cap;
        init.port_num = PORT;
        Ok(())
    }

    /// DESTROY_QP; its event route and page faults go with it, and a kernel QP's completions
    /// still in its CQs are no longer reported (the core frees its QP next).
    pub(super) fn destroy(&self) -> Result {
        verbs(&self.ctx)?.destroy_or_stop(uapi::QHCA_CMD_DESTROY_QP, self.qpn, 0);
        if let Some(k) = &self.k {
            k.send_cq.detach(self.qpn);
            k.recv_cq.detach(self.qpn);
        }
        Ok(())
    }
}
