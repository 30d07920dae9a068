// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Queue pairs, reliable connected and unreliable datagram ([`QpType`]): creation, state
//! changes, and posting without a system call. `ud` has what is UD's own.
//!
//! Who writes what (the QP buffer: SQ slots, then the RQ at the next page boundary):
//!
//! - the provider writes WQEs into free slots only (slots between the device's consumer index
//!   and the producer index last rung are the device's to read), then rings the doorbell with the
//!   new producer index, once per post call;
//! - the device only reads the rings.

use std::sync::Arc;

use qhca_uapi::{
    qhca_ioc_create_qp, qhca_ioc_handle, qhca_ioc_qp_attr, qhca_qp_attr, QHCA_QPS_ERR,
    QHCA_QPS_INIT, QHCA_QPS_RESET, QHCA_QPS_RTR, QHCA_QPS_RTS, QHCA_QP_ATTR_ACCESS,
    QHCA_QP_ATTR_DEST_QPN, QHCA_QP_ATTR_MAX_DEST_RD_ATOMIC, QHCA_QP_ATTR_MAX_RD_ATOMIC,
    QHCA_QP_ATTR_MIN_RNR_TIMER, QHCA_QP_ATTR_PATH_MTU, QHCA_QP_ATTR_RETRY_CNT,
    QHCA_QP_ATTR_RNR_RETRY, QHCA_QP_ATTR_RQ_PSN, QHCA_QP_ATTR_SQ_PSN, QHCA_QP_ATTR_STATE,
    QHCA_QP_ATTR_TIMEOUT,
};
use qhca_uapi::{QHCA_QPT_RC, QHCA_QPT_UD, QHCA_QP_ATTR_AV, QHCA_QP_ATTR_QKEY};

use crate::ah::AhAttr;
use crate::conn::ConnInfo;
use crate::context::Context;
use crate::cq::{Cq, CqInner};
use crate::doorbell::Doorbell;
use crate::error::{Error, PostError, PostReason, Result};
use crate::layout::{QpCaps, QpLayout};
use crate::mem::PageBuf;
use crate::pd::{Access, Pd, PdInner};
use crate::request::Request;
use crate::srq::{Srq, SrqInner};
use crate::wq::WorkQueues;
use crate::wqe::{RecvWr, SendWr};

mod ud;

/// The transport service of a QP (`enum qhca_qp_type`, as `ibv_qp_type`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable connected: one peer QP, set at connection time ([`Qp::connect`]); every
    /// operation.
    #[default]
    Rc,
    /// Unreliable datagram: each send names its destination ([`crate::SendWr::to_ud`]);
    /// SEND and SEND_WITH_IMM of at most [`crate::UD_MAX_MSG`] bytes; receives start with a
    /// [`crate::Grh`]. See [`Qp::ud_ready`].
    Ud,
}

impl QpType {
    /// The raw value (`QHCA_QPT_*`).
    pub fn raw(self) -> u32 {
        match self {
            QpType::Rc => QHCA_QPT_RC,
            QpType::Ud => QHCA_QPT_UD,
        }
    }
}

/// QP states (`enum qhca_qp_state`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum QpState {
    /// Just created.
    #[default]
    Reset,
    /// Receives may be posted.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Error: every request completes with WR_FLUSH_ERR.
    Err,
    /// A value this ABI version does not define.
    Unknown(u8),
}

impl QpState {
    /// The raw value.
    pub fn raw(self) -> u8 {
        (match self {
            QpState::Reset => QHCA_QPS_RESET,
            QpState::Init => QHCA_QPS_INIT,
            QpState::Rtr => QHCA_QPS_RTR,
            QpState::Rts => QHCA_QPS_RTS,
            QpState::Err => QHCA_QPS_ERR,
            QpState::Unknown(v) => u32::from(v),
        }) as u8
    }

    /// Decodes a raw value.
    pub fn from_raw(v: u8) -> Self {
        match u32::from(v) {
            QHCA_QPS_RESET => QpState::Reset,
            QHCA_QPS_INIT => QpState::Init,
            QHCA_QPS_RTR => QpState::Rtr,
            QHCA_QPS_RTS => QpState::Rts,
            QHCA_QPS_ERR => QpState::Err,
            _ => QpState::Unknown(v),
        }
    }
}

/// What a MODIFY_QP changes: the fields that are `Some`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpAttr {
    /// New state.
    pub state: Option<QpState>,
    /// Remote rights the QP grants as responder.
    pub access: Option<Access>,
    /// The peer QP.
    pub dest_qpn: Option<u32>,
    /// Expected PSN of the first incoming packet (24 bits).
    pub rq_psn: Option<u32>,
    /// PSN of the first outgoing packet (24 bits).
    pub sq_psn: Option<u32>,
    /// log2(MTU bytes), 8..=12.
    pub path_mtu: Option<u8>,
    /// Local ACK timeout, 4.096 us << timeout (0 = infinite).
    pub timeout: Option<u8>,
    /// Transport retries, 0..=7.
    pub retry_cnt: Option<u8>,
    /// RNR retries, 0..=7 (7 = infinite).
    pub rnr_retry: Option<u8>,
    /// RNR NAK timer, IB encoding 0..=31.
    pub min_rnr_timer: Option<u8>,
    /// RDMA READs and atomics in flight as requester (initiator depth), 0..=16 (0: none);
    /// RTR → RTS and RTS → RTS only.
    pub max_rd_atomic: Option<u8>,
    /// RDMA READs and atomics accepted as responder (responder resources), 0..=16 (0: none);
    /// INIT → RTR and RTR → RTR only.
    pub max_dest_rd_atomic: Option<u8>,
    /// UD only: the Q_Key datagrams to this QP must carry (and the one its sends use when a
    /// request's remote Q_Key has [`crate::QKEY_CONTROLLED`]). Required at RESET → INIT;
    /// a value with [`crate::QKEY_CONTROLLED`] set needs `CAP_NET_RAW` (`EPERM`).
    pub qkey: Option<u32>,
    /// RC only, INIT → RTR only: the peer's address, and the entry of this port's GID table
    /// the QP sends from (see [`AhAttr`]). Until it is set, an RC QP talks to its own port's
    /// GID 0 from GID 0 (both ends on this device).
    pub av: Option<AhAttr>,
}

impl QpAttr {
    /// The ABI struct, with `mask` naming the fields that are set.
    pub fn to_raw(&self) -> qhca_qp_attr {
        let mut a = qhca_qp_attr::default();
        let mut mask = 0;
        let mut set = |bit: u32, present: bool| {
            if present {
                mask |= bit;
            }
        };
        set(QHCA_QP_ATTR_STATE, self.state.is_some());
        set(QHCA_QP_ATTR_ACCESS, self.access.is_some());
        set(QHCA_QP_ATTR_DEST_QPN, self.dest_qpn.is_some());
        set(QHCA_QP_ATTR_RQ_PSN, self.rq_psn.is_some());
        set(QHCA_QP_ATTR_SQ_PSN, self.sq_psn.is_some());
        set(QHCA_QP_ATTR_PATH_MTU, self.path_mtu.is_some());
        set(QHCA_QP_ATTR_TIMEOUT, self.timeout.is_some());
        set(QHCA_QP_ATTR_RETRY_CNT, self.retry_cnt.is_some());
        set(QHCA_QP_ATTR_RNR_RETRY, self.rnr_retry.is_some());
        set(QHCA_QP_ATTR_MIN_RNR_TIMER, self.min_rnr_timer.is_some());
        set(QHCA_QP_ATTR_MAX_RD_ATOMIC, self.max_rd_atomic.is_some());
        set(
            QHCA_QP_ATTR_MAX_DEST_RD_ATOMIC,
            self.max_dest_rd_atomic.is_some(),
        );
        set(QHCA_QP_ATTR_QKEY, self.qkey.is_some());
        set(QHCA_QP_ATTR_AV, self.av.is_some());
        a.mask = mask;
        a.state = self.state.map_or(0, QpState::raw);
        a.access = self.access.map_or(0, |x| x.0);
        a.dest_qpn = self.dest_qpn.unwrap_or(0);
        a.rq_psn = self.rq_psn.unwrap_or(0);
        a.sq_psn = self.sq_psn.unwrap_or(0);
        a.path_mtu = self.path_mtu.unwrap_or(0);
        a.timeout = self.timeout.unwrap_or(0);
        a.retry_cnt = self.retry_cnt.unwrap_or(0);
        a.rnr_retry = self.rnr_retry.unwrap_or(0);
        a.min_rnr_timer = self.min_rnr_timer.unwrap_or(0);
        a.max_rd_atomic = self.max_rd_atomic.unwrap_or(0);
        a.max_dest_rd_atomic = self.max_dest_rd_atomic.unwrap_or(0);
        a.qkey = self.qkey.unwrap_or(0);
        if let Some(av) = &self.av {
            a.av = av.to_raw();
        }
        a
    }
}

/// What QUERY_QP reports: every attribute (`qkey` is a UD QP's, 0 on RC; `av` an RC QP's,
/// all zero on UD), and the QP's type when known ([`Qp::query`] knows it; the ABI struct alone
/// does not say).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct QpInfo {
    pub qp_type: Option<QpType>,
    pub state: QpState,
    pub access: Access,
    pub dest_qpn: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub path_mtu: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub qkey: u32,
    pub av: AhAttr,
}

impl QpInfo {
    /// From the ABI struct (`qp_type` `None`: the struct does not carry it).
    pub fn from_raw(a: &qhca_qp_attr) -> Self {
        QpInfo {
            qp_type: None,
            state: QpState::from_raw(a.state),
            access: Access(a.access),
            dest_qpn: a.dest_qpn,
            rq_psn: a.rq_psn,
            sq_psn: a.sq_psn,
            path_mtu: a.path_mtu,
            timeout: a.timeout,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
            min_rnr_timer: a.min_rnr_timer,
            max_rd_atomic: a.max_rd_atomic,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            qkey: a.qkey,
            av: AhAttr::from_raw(&a.av),
        }
    }
}

/// A queue pair, RC ([`Qp::new`]) or UD ([`Qp::new_ud`]), with a receive queue of its own or
/// receiving from a shared receive queue ([`Qp::with_srq`]).
///
/// It holds references to its PD, CQs and SRQ, so they outlive it; it is destroyed on drop (its
/// unpolled CQEs are then removed from its CQs), and its ring memory is freed only after the
/// device object is gone (leaked if the destroy fails).
///
/// Posting is safe: every SGE is checked by the device against a registered region (key, PD,
/// rights, bounds), and regions are not freed while registered ([`crate::MrBuf`] owns its
/// memory and frees it only after a successful deregistration; the `unsafe`
/// [`crate::Pd::reg_mr`] makes its caller promise the same), so no request can make the device
/// touch memory that is not a live region. Inline data is copied at post time.
///
/// Slots are freed as completions are polled: a send CQE frees its WQE and every earlier one
/// (signaled or not), by the WQE index the CQE carries, checked against what is outstanding.
#[derive(Debug)]
pub struct Qp {
    qpn: u32,
    qp_type: QpType,
    // Over `buf`'s memory, which outlives it (`buf` is leaked, never freed, while the device may
    // use it).
    queues: WorkQueues,
    // Teardown: `Drop` destroys the QP, then the fields go in this order: the ring memory, then
    // the references that may destroy the CQs, the PD and the SRQ.
    buf: Option<PageBuf>,
    send_cq: Arc<CqInner>,
    recv_cq: Arc<CqInner>,
    pd: Arc<PdInner>,
    srq: Option<Arc<SrqInner>>,
}

impl Qp {
    /// Creates an RC QP in RESET with the ring layout for `caps` ([`QpLayout::new`]).
    pub fn new(pd: &Pd, send_cq: &Cq, recv_cq: &Cq, caps: &QpCaps) -> Result<Qp> {
        Self::with_type(pd, send_cq, recv_cq, caps, QpType::Rc)
    }

    /// Creates a UD QP in RESET (`EOPNOTSUPP` on a device without UD,
    /// [`crate::DeviceAttr::supports_ud`]); [`Qp::ud_ready`] brings it to RTS.
    pub fn new_ud(pd: &Pd, send_cq: &Cq, recv_cq: &Cq, caps: &QpCaps) -> Result<Qp> {
        Self::with_type(pd, send_cq, recv_cq, caps, QpType::Ud)
    }

    /// Creates a QP of type `qp_type` in RESET with the ring layout for `caps`.
    pub fn with_type(
        pd: &Pd,
        send_cq: &Cq,
        recv_cq: &Cq,
        caps: &QpCaps,
        qp_type: QpType,
    ) -> Result<Qp> {
        Self::create(pd, send_cq, recv_cq, QpLayout::new(caps)?, qp_type, None)
    }

    /// Creates a QP of type `qp_type` (RC or UD) in RESET that receives from `srq`: its ring is
    /// the send queue of `caps` alone ([`QpLayout::on_srq`]; `caps.max_recv_wr` is not looked
    /// at). Each message that needs a receive request takes the SRQ's oldest, which completes on
    /// `recv_cq`; [`Qp::post_recv`] is refused ([`PostReason::QpOnSrq`]). The QP holds the SRQ
    /// (the device object outlives the QP, whatever happens to the handle). The SRQ may be in
    /// another PD of the context.
    ///
    /// Fails as [`Qp::with_type`] does, and with [`Error::Invalid`] for an SRQ of another
    /// context.
    pub fn with_srq(
        pd: &Pd,
        send_cq: &Cq,
        recv_cq: &Cq,
        srq: &Srq,
        caps: &QpCaps,
        qp_type: QpType,
    ) -> Result<Qp> {
        if !Arc::ptr_eq(srq.context(), &pd.inner.ctx) {
            return Err(Error::Invalid {
                what: format!("a QP on SRQ {:#x} of another context", srq.srqn()),
            });
        }
        let layout = QpLayout::on_srq(caps)?;
        Self::create(pd, send_cq, recv_cq, layout, qp_type, Some(srq))
    }

    fn create(
        pd: &Pd,
        send_cq: &Cq,
        recv_cq: &Cq,
        layout: QpLayout,
        qp_type: QpType,
        srq: Option<&Srq>,
    ) -> Result<Qp> {
        let ctx: &Arc<Context> = &pd.inner.ctx;
        let db = ctx.doorbell()?;
        let buf = PageBuf::new(layout.buf_len)?;
        let mut req = qhca_ioc_create_qp::request();
        req.pdn = pd.inner.pdn;
        req.send_cqn = send_cq.cqn();
        req.recv_cqn = recv_cq.cqn();
        req.sq_log = layout.sq_log as u8;
        req.sq_stride_log = layout.sq_stride_log as u8;
        req.rq_log = layout.rq_log as u8;
        req.rq_stride_log = layout.rq_stride_log as u8;
        req.max_inline = layout.max_inline.min(u32::from(u16::MAX)) as u16;
        req.max_sge = layout.max_sge as u16;
        req.type_ = qp_type.raw();
        req.buf_addr = buf.addr();
        req.buf_len = buf.len() as u64;
        req.srqn = srq.map_or(0, Srq::srqn);
        ctx.cmd_create_qp(&mut req)?;
        Ok(Self::with_buf(
            pd, send_cq, recv_cq, layout, buf, req.qpn, qp_type, srq, db,
        ))
    }

    /// The QP over `buf`, which a QP numbered `qpn` was created on (or no device knows: the
    /// tests' fakes).
    #[allow(clippy::too_many_arguments)]
    fn with_buf(
        pd: &Pd,
        send_cq: &Cq,
        recv_cq: &Cq,
        layout: QpLayout,
        buf: PageBuf,
        qpn: u32,
        qp_type: QpType,
        srq: Option<&Srq>,
        db: Arc<Doorbell>,
    ) -> Qp {
        debug_assert_eq!(layout.has_rq(), srq.is_none());
        // SAFETY: `buf` is `layout.buf_len` fresh, zeroed, page-aligned bytes that the QP owns
        // (in the field after `queues`) and that are freed only after the queues are gone and
        // the device object is destroyed (or leaked).
        let queues = unsafe { WorkQueues::new(buf.as_ptr(), layout, qpn, qp_type, db) };
        for cq in [send_cq, recv_cq] {
            cq.inner().attach(qpn, queues.shared().clone());
        }
        Qp {
            qpn,
            qp_type,
            queues,
            buf: Some(buf),
            send_cq: send_cq.inner().clone(),
            recv_cq: recv_cq.inner().clone(),
            pd: pd.inner.clone(),
            srq: srq.map(|s| s.inner().clone()),
        }
    }

    /// A QP over fresh memory that no device knows, for host tests of posting: the test reads
    /// the ring ([`Qp::ring`]) and the doorbell the way the device would.
    #[cfg(test)]
    pub(crate) fn fake(pd: &Pd, send_cq: &Cq, recv_cq: &Cq, caps: &QpCaps, qpn: u32) -> Result<Qp> {
        Self::fake_typed(pd, send_cq, recv_cq, caps, qpn, QpType::Rc)
    }

    /// [`Qp::fake`] of another type.
    #[cfg(test)]
    pub(crate) fn fake_typed(
        pd: &Pd,
        send_cq: &Cq,
        recv_cq: &Cq,
        caps: &QpCaps,
        qpn: u32,
        qp_type: QpType,
    ) -> Result<Qp> {
        let layout = QpLayout::new(caps)?;
        let buf = PageBuf::new(layout.buf_len)?;
        let db = pd.inner.ctx.doorbell()?;
        Ok(Self::with_buf(
            pd, send_cq, recv_cq, layout, buf, qpn, qp_type, None, db,
        ))
    }

    /// [`Qp::fake`] on an SRQ.
    #[cfg(test)]
    pub(crate) fn fake_on_srq(
        pd: &Pd,
        send_cq: &Cq,
        recv_cq: &Cq,
        srq: &Srq,
        caps: &QpCaps,
        qpn: u32,
        qp_type: QpType,
    ) -> Result<Qp> {
        let layout = QpLayout::on_srq(caps)?;
        let buf = PageBuf::new(layout.buf_len)?;
        let db = pd.inner.ctx.doorbell()?;
        Ok(Self::with_buf(
            pd,
            send_cq,
            recv_cq,
            layout,
            buf,
            qpn,
            qp_type,
            Some(srq),
            db,
        ))
    }

    /// The ring memory (tests).
    #[cfg(test)]
    pub(crate) fn ring(&self) -> &PageBuf {
        self.buf.as_ref().expect("present")
    }

    /// The device's QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// The SRQ it receives from ([`Qp::with_srq`]), if any.
    pub fn srqn(&self) -> Option<u32> {
        self.srq.as_ref().map(|s| s.srqn)
    }

    /// Its transport service.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// The ring layout (depths, strides, limits).
    pub fn layout(&self) -> &QpLayout {
        self.queues.layout()
    }

    /// The context it belongs to.
    pub fn context(&self) -> &Arc<Context> {
        &self.pd.ctx
    }

    /// The PD number.
    pub fn pdn(&self) -> u32 {
        self.pd.pdn
    }

    /// Send requests posted and not yet completed.
    pub fn send_outstanding(&self) -> u32 {
        self.queues.outstanding().0
    }

    /// Receive requests posted and not yet completed (0 on a QP of an SRQ: see
    /// [`Srq::outstanding`]).
    pub fn recv_outstanding(&self) -> u32 {
        self.queues.outstanding().1
    }

    /// `MODIFY_QP` with the fields of `attr` that are set.
    ///
    /// A move to RESET also empties the provider's view of both queues: the device forgets
    /// every posted request and starts its indices again at 0, and so do we; and the QP's
    /// unpolled CQEs are removed from its CQs (as rdma-core's mlx5 does), so none of them is
    /// polled, or credited to the QP's new requests, afterwards.
    pub fn modify(&self, attr: &QpAttr) -> Result<()> {
        if let Some(av) = &attr.av {
            av.check()?;
        }
        let mut req = qhca_ioc_qp_attr::request();
        req.qpn = self.qpn;
        req.attr = attr.to_raw();
        self.pd.ctx.cmd_modify_qp(&mut req)?;
        if attr.state == Some(QpState::Reset) {
            self.clean_cqs();
            self.queues.shared().reset();
        }
        Ok(())
    }

    /// Drops this QP's unpolled CQEs from its CQs (the device writes none any more).
    fn clean_cqs(&self) {
        self.send_cq.clean(self.qpn);
        if !Arc::ptr_eq(&self.send_cq, &self.recv_cq) {
            self.recv_cq.clean(self.qpn);
        }
    }

    /// `QUERY_QP`.
    pub fn query(&self) -> Result<QpInfo> {
        let mut req = qhca_ioc_qp_attr::request();
        req.qpn = self.qpn;
        self.pd.ctx.cmd_query_qp(&mut req)?;
        Ok(QpInfo {
            qp_type: Some(self.qp_type),
            ..QpInfo::from_raw(&req.attr)
        })
    }

    /// RESET → INIT, granting `access` to peers.
    pub fn to_init(&self, access: Access) -> Result<()> {
        self.modify(&QpAttr {
            state: Some(QpState::Init),
            access: Some(access),
            ..QpAttr::default()
        })
    }

    /// INIT → RTR, connected to `dest_qpn`, expecting `rq_psn` first.
    pub fn to_rtr(
        &self,
        dest_qpn: u32,
        rq_psn: u32,
        path_mtu: u8,
        min_rnr_timer: u8,
    ) -> Result<()> {
        self.modify(&QpAttr {
            state: Some(QpState::Rtr),
            dest_qpn: Some(dest_qpn),
            rq_psn: Some(rq_psn),
            path_mtu: Some(path_mtu),
            min_rnr_timer: Some(min_rnr_timer),
            ..QpAttr::default()
        })
    }

    /// RTR → RTS, sending from `sq_psn`.
    pub fn to_rts(&self, sq_psn: u32, timeout: u8, retry_cnt: u8, rnr_retry: u8) -> Result<()> {
        self.modify(&QpAttr {
            state: Some(QpState::Rts),
            sq_psn: Some(sq_psn),
            timeout: Some(timeout),
            retry_cnt: Some(retry_cnt),
            rnr_retry: Some(rnr_retry),
            ..QpAttr::default()
        })
    }

    /// This QP's connection record with first send PSN `psn` (24 bits), and no region: set
    /// `rkey`, `addr` and `len` to lend the peer one (see [`ConnInfo::with_region`]).
    pub fn conn_info(&self, psn: u32) -> ConnInfo {
        ConnInfo {
            qpn: self.qpn,
            psn,
            ..ConnInfo::default()
        }
    }

    /// RESET → INIT → RTR → RTS against a peer, as ibv_rc_pingpong does, from the two
    /// connection records the sides exchanged ([`crate::conn`]):
    ///
    /// - `local` is ours: `local.qpn` must be this QP, and `local.psn` is the PSN of our first
    ///   outgoing packet (the requester's `sq_psn`);
    /// - `remote` is the peer's: `remote.qpn` becomes our `dest_qpn`, and `remote.psn`, the
    ///   PSN of the peer's first outgoing packet, is the PSN our responder expects first
    ///   (`rq_psn`).
    ///
    /// So each side passes its own record as `local` and the other's as `remote`; the regions
    /// in the records play no part here. To connect a QP to itself, pass the same record twice.
    ///
    /// When the records name GIDs ([`ConnInfo::with_gid`]), INIT → RTR also sets the QP's
    /// address vector ([`QpAttr::av`]): to `remote.gid`, from this port's entry
    /// `local.gid_index`. Records without (the default) leave it unset: the QP talks to its own
    /// port's GID 0, so both ends must be QPs of this device.
    ///
    /// Fails with [`Error::Invalid`] if this is a UD QP (see [`Qp::ud_ready`]), `local.qpn` is
    /// not this QP, a PSN is wider than 24 bits or only one record names a GID, and with the
    /// MODIFY_QP errors.
    pub fn connect(&self, local: &ConnInfo, remote: &ConnInfo, opts: &ConnOpts) -> Result<()> {
        if self.qp_type != QpType::Rc {
            return Err(Error::Invalid {
                what: format!(
                    "connect on UD QP {:#x}: a UD QP has no peer (Qp::ud_ready)",
                    self.qpn
                ),
            });
        }
        if local.qpn != self.qpn {
            return Err(Error::Invalid {
                what: format!(
                    "connect QP {:#x} with the local record of QP {:#x}",
                    self.qpn, local.qpn
                ),
            });
        }
        if local.psn > 0xff_ffff || remote.psn > 0xff_ffff {
            return Err(Error::Invalid {
                what: format!("PSNs {:#x} / {:#x}: 24 bits", local.psn, remote.psn),
            });
        }
        if local.gid.is_zero() != remote.gid.is_zero() {
            let (with, without) = if local.gid.is_zero() {
                ("the peer's", "ours")
            } else {
                ("our", "the peer's")
            };
            return Err(Error::Invalid {
                what: format!(
                    "connect QP {:#x}: {with} record names a GID and {without} does not \
                     (both or neither)",
                    self.qpn
                ),
            });
        }
        for attr in connect_attrs(local, remote, opts) {
            self.modify(&attr)?;
        }
        Ok(())
    }

    /// Posts send requests in order: each is checked, written into the next free slot, and after
    /// the loop the doorbell is rung once with the new producer index. No system call.
    ///
    /// On a refused request, the ones before it are posted (and rung) and the error names its
    /// index and the reason, as rdma-core's `bad_wr`.
    ///
    /// On a disassociated context ([`Context::is_dead`], one atomic load) nothing is posted:
    /// [`PostReason::Disassociated`].
    pub fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        self.check_alive()?;
        self.queues.post_send(wrs)
    }

    fn check_alive(&self) -> Result<(), PostError> {
        if self.pd.ctx.is_dead() {
            return Err(PostError {
                index: 0,
                reason: PostReason::Disassociated,
            });
        }
        Ok(())
    }

    /// Posts receive requests, as [`Qp::post_send`] does.
    ///
    /// A receive that only a WRITE_WITH_IMM will consume needs no buffer: `sges` may be empty
    /// (see [`crate::WcOpcode::RecvRdmaWithImm`]).
    ///
    /// A QP of an SRQ has no receive queue: any request is refused with [`PostReason::QpOnSrq`]
    /// (`EINVAL`); post to the SRQ ([`Srq::post_recv`]).
    pub fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        self.check_alive()?;
        self.queues.post_recv(wrs)
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        let mut req = qhca_ioc_handle::request();
        req.handle = self.qpn;
        let destroyed = self.pd.ctx.cmd_destroy_qp(&mut req).is_ok();
        for cq in [&self.send_cq, &self.recv_cq] {
            cq.detach(self.qpn);
        }
        if destroyed {
            // Its unpolled CQEs must not be polled later, when the QPN may name another QP.
            self.clean_cqs();
        } else {
            // The device may still read the rings: never let the addresses be reused.
            if let Some(b) = self.buf.take() {
                b.leak();
            }
        }
    }
}

/// The three MODIFY_QPs of [`Qp::connect`]: RESET → INIT, INIT → RTR (with the responder
/// resources, and the address vector when the peer's record names a GID), RTR → RTS (with the
/// initiator depth).
fn connect_attrs(local: &ConnInfo, remote: &ConnInfo, opts: &ConnOpts) -> [QpAttr; 3] {
    let av = (!remote.gid.is_zero()).then(|| AhAttr::new(remote.gid).from_index(local.gid_index));
    [
        QpAttr {
            state: Some(QpState::Init),
            access: Some(opts.access),
            ..QpAttr::default()
        },
        QpAttr {
            state: Some(QpState::Rtr),
            dest_qpn: Some(remote.qpn),
            rq_psn: Some(remote.psn),
            path_mtu: Some(opts.path_mtu),
            min_rnr_timer: Some(opts.min_rnr_timer),
            max_dest_rd_atomic: Some(opts.max_dest_rd_atomic),
            av,
            ..QpAttr::default()
        },
        QpAttr {
            state: Some(QpState::Rts),
            sq_psn: Some(local.psn),
            timeout: Some(opts.timeout),
            retry_cnt: Some(opts.retry_cnt),
            rnr_retry: Some(opts.rnr_retry),
            max_rd_atomic: Some(opts.max_rd_atomic),
            ..QpAttr::default()
        },
    ]
}

/// Connection parameters for [`Qp::connect`].
///
/// The defaults are ibv_rc_pingpong's, except that RNR retries are finite, as perftest's: a
/// SEND or WRITE_WITH_IMM that finds no receive posted at the peer is retried 6 times, each
/// after the peer's RNR timer (12: 0.64 ms at least), and then fails with
/// [`crate::WcStatus::RnrRetryExcErr`] (the QP goes to ERR). A forgotten receive is an error
/// within milliseconds, not a silent hang. Set `rnr_retry` to 7 to retry for ever.
///
/// `max_rd_atomic` and `max_dest_rd_atomic` default to 16, the device's maximum
/// ([`crate::DeviceAttr::max_qp_init_rd_atom`], [`crate::DeviceAttr::max_qp_rd_atom`]), as
/// perftest uses. A peer's `max_rd_atomic` above this side's `max_dest_rd_atomic` lets it send
/// more READs and atomics than this side accepts: the one too many fails with
/// [`crate::WcStatus::RemInvReqErr`] and both QPs go to ERR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnOpts {
    /// Remote rights the QP grants its peer as responder (REMOTE_WRITE, REMOTE_READ,
    /// REMOTE_ATOMIC); each region must grant them too.
    pub access: Access,
    /// log2(path MTU): 8 = 256 .. 12 = 4096.
    pub path_mtu: u8,
    /// Local ACK timeout: 4.096 us << timeout (0: none). 14 is about 67 ms.
    pub timeout: u8,
    /// Transport retries after an ACK timeout or a PSN-sequence NAK, 0..=7.
    pub retry_cnt: u8,
    /// RNR retries, 0..=6, or 7 for ever.
    pub rnr_retry: u8,
    /// The RNR timer this QP asks its peer to wait as responder (IB encoding: 12 = 0.64 ms).
    pub min_rnr_timer: u8,
    /// RDMA READs and atomics this QP keeps in flight as requester (the initiator depth,
    /// ibv_qp_attr.max_rd_atomic), 0..=16 (0: none); set at RTR → RTS.
    pub max_rd_atomic: u8,
    /// RDMA READs and atomics this QP accepts in flight as responder (the responder resources,
    /// ibv_qp_attr.max_dest_rd_atomic), 0..=16 (0: none); set at INIT → RTR.
    pub max_dest_rd_atomic: u8,
}

impl Default for ConnOpts {
    fn default() -> Self {
        ConnOpts {
            access: Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
            path_mtu: 12,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 6,
            min_rnr_timer: 12,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
