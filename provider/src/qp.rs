// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Reliable-connected queue pairs: creation, state changes, and posting without a system call.
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

use crate::conn::ConnInfo;
use crate::context::Context;
use crate::cq::{Cq, CqInner};
use crate::doorbell::Doorbell;
use crate::error::{Error, PostError, PostReason, Result};
use crate::layout::{QpCaps, QpLayout};
use crate::mem::PageBuf;
use crate::pd::{Access, Pd, PdInner};
use crate::sys::{self, Request};
use crate::wq::WqShared;
use crate::wqe::{check_recv_wr, check_send_wr, encode_recv_wqe, encode_send_wqe, RecvWr, SendWr};
use crate::{DbType, DbWord};

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
    /// RDMA READs and atomics in flight as requester (initiator depth), 1..=16; RTR → RTS and
    /// RTS → RTS only.
    pub max_rd_atomic: Option<u8>,
    /// RDMA READs and atomics accepted as responder (responder resources), 1..=16; INIT → RTR
    /// and RTR → RTR only.
    pub max_dest_rd_atomic: Option<u8>,
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
        a
    }
}

/// What QUERY_QP reports: every attribute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct QpInfo {
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
}

impl QpInfo {
    /// From the ABI struct.
    pub fn from_raw(a: &qhca_qp_attr) -> Self {
        QpInfo {
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
        }
    }
}

/// A queue pair (RC).
///
/// It holds references to its PD and CQs, so they outlive it; it is destroyed on drop (its
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
    layout: QpLayout,
    db: Arc<Doorbell>,
    wq: Arc<WqShared>,
    // Teardown: `Drop` destroys the QP, then the fields go in this order: the ring memory, then
    // the references that may destroy the CQs and the PD.
    buf: Option<PageBuf>,
    send_cq: Arc<CqInner>,
    recv_cq: Arc<CqInner>,
    pd: Arc<PdInner>,
}

impl Qp {
    /// Creates a QP in RESET with the ring layout for `caps` ([`QpLayout::new`]).
    pub fn new(pd: &Pd, send_cq: &Cq, recv_cq: &Cq, caps: &QpCaps) -> Result<Qp> {
        let layout = QpLayout::new(caps)?;
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
        req.buf_addr = buf.addr();
        req.buf_len = buf.len() as u64;
        ctx.ioctl("CREATE_QP", sys::create_qp, &mut req)?;
        let wq = Arc::new(WqShared::new(layout.sq_depth(), layout.rq_depth()));
        for cq in [send_cq, recv_cq] {
            cq.inner().attach(req.qpn, wq.clone());
        }
        Ok(Qp {
            qpn: req.qpn,
            layout,
            db,
            wq,
            buf: Some(buf),
            send_cq: send_cq.inner().clone(),
            recv_cq: recv_cq.inner().clone(),
            pd: pd.inner.clone(),
        })
    }

    /// A QP over fresh memory that no device knows, for host tests of posting: the test reads
    /// the ring ([`Qp::ring`]) and the doorbell the way the device would.
    #[cfg(test)]
    pub(crate) fn fake(pd: &Pd, send_cq: &Cq, recv_cq: &Cq, caps: &QpCaps, qpn: u32) -> Result<Qp> {
        let layout = QpLayout::new(caps)?;
        let wq = Arc::new(WqShared::new(layout.sq_depth(), layout.rq_depth()));
        for cq in [send_cq, recv_cq] {
            cq.inner().attach(qpn, wq.clone());
        }
        Ok(Qp {
            qpn,
            layout,
            db: pd.inner.ctx.doorbell()?,
            wq,
            buf: Some(PageBuf::new(layout.buf_len)?),
            send_cq: send_cq.inner().clone(),
            recv_cq: recv_cq.inner().clone(),
            pd: pd.inner.clone(),
        })
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

    /// The ring layout (depths, strides, limits).
    pub fn layout(&self) -> &QpLayout {
        &self.layout
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
        self.wq
            .sq
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .outstanding()
    }

    /// Receive requests posted and not yet completed.
    pub fn recv_outstanding(&self) -> u32 {
        self.wq
            .rq
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .outstanding()
    }

    /// `QHCA_IOCTL_MODIFY_QP` with the fields of `attr` that are set.
    ///
    /// A move to RESET also empties the provider's view of both queues: the device forgets
    /// every posted request and starts its indices again at 0, and so do we; and the QP's
    /// unpolled CQEs are removed from its CQs (as rdma-core's mlx5 does), so none of them is
    /// polled, or credited to the QP's new requests, afterwards.
    pub fn modify(&self, attr: &QpAttr) -> Result<()> {
        let mut req = qhca_ioc_qp_attr::request();
        req.qpn = self.qpn;
        req.attr = attr.to_raw();
        self.pd.ctx.ioctl("MODIFY_QP", sys::modify_qp, &mut req)?;
        if attr.state == Some(QpState::Reset) {
            self.clean_cqs();
            self.wq.reset();
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

    /// `QHCA_IOCTL_QUERY_QP`.
    pub fn query(&self) -> Result<QpInfo> {
        let mut req = qhca_ioc_qp_attr::request();
        req.qpn = self.qpn;
        self.pd.ctx.ioctl("QUERY_QP", sys::query_qp, &mut req)?;
        Ok(QpInfo::from_raw(&req.attr))
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
    /// Fails with [`Error::Invalid`] if `local.qpn` is not this QP or a PSN is wider than 24
    /// bits, and with the MODIFY_QP errors.
    pub fn connect(&self, local: &ConnInfo, remote: &ConnInfo, opts: &ConnOpts) -> Result<()> {
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
        for attr in connect_attrs(local, remote, opts) {
            self.modify(&attr)?;
        }
        Ok(())
    }

    /// Start of a ring slot.
    fn slot(&mut self, rq: bool, index: u32) -> &mut [u8] {
        let l = &self.layout;
        let (base, log, stride) = if rq {
            (l.rq_offset, l.rq_log, l.rq_stride())
        } else {
            (0, l.sq_log, l.sq_stride())
        };
        let off = base + ((index & ((1 << log) - 1)) as usize) * stride;
        let buf = self.buf.as_ref().expect("present until drop");
        debug_assert!(off + stride <= buf.len());
        // SAFETY:
        // - in bounds: `off + stride` is at most the ring's end, inside `buf` by the layout;
        // - exclusive: the slot is free (the caller took it from the tracker), so the device does
        //   not read it (it reads only slots up to the producer index rung, and this index is not
        //   rung yet), and `&mut self` excludes any other slice of ours;
        // - lifetime: the slice borrows `self`, which owns `buf`.
        unsafe { std::slice::from_raw_parts_mut(buf.as_ptr().add(off), stride) }
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
        let wq = self.wq.clone();
        let mut sq = wq.sq.lock().unwrap_or_else(|e| e.into_inner());
        let mut result = Ok(());
        let mut posted = 0;
        for (i, wr) in wrs.iter().enumerate() {
            if let Err(reason) = check_send_wr(wr, &self.layout) {
                result = Err(PostError { index: i, reason });
                break;
            }
            if sq.free() == 0 {
                let reason = PostReason::QueueFull {
                    outstanding: sq.outstanding(),
                    depth: sq.depth(),
                };
                result = Err(PostError { index: i, reason });
                break;
            }
            let index = sq.push();
            encode_send_wqe(self.slot(false, index), wr);
            posted += 1;
        }
        if posted > 0 {
            self.db
                .ring(DbWord::new(DbType::Sq, self.qpn, sq.head() & 0xffff).raw());
        }
        result
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
    pub fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        self.check_alive()?;
        let wq = self.wq.clone();
        let mut rq = wq.rq.lock().unwrap_or_else(|e| e.into_inner());
        let mut result = Ok(());
        let mut posted = 0;
        for (i, wr) in wrs.iter().enumerate() {
            if let Err(reason) = check_recv_wr(wr, &self.layout) {
                result = Err(PostError { index: i, reason });
                break;
            }
            if rq.free() == 0 {
                let reason = PostReason::QueueFull {
                    outstanding: rq.outstanding(),
                    depth: rq.depth(),
                };
                result = Err(PostError { index: i, reason });
                break;
            }
            let index = rq.push();
            encode_recv_wqe(self.slot(true, index), wr);
            posted += 1;
        }
        if posted > 0 {
            self.db
                .ring(DbWord::new(DbType::Rq, self.qpn, rq.head() & 0xffff).raw());
        }
        result
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        let mut req = qhca_ioc_handle::request();
        req.handle = self.qpn;
        let destroyed = self
            .pd
            .ctx
            .ioctl("DESTROY_QP", sys::destroy_qp, &mut req)
            .is_ok();
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
/// resources), RTR → RTS (with the initiator depth).
fn connect_attrs(local: &ConnInfo, remote: &ConnInfo, opts: &ConnOpts) -> [QpAttr; 3] {
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
    /// ibv_qp_attr.max_rd_atomic), 1..=16; set at RTR → RTS.
    pub max_rd_atomic: u8,
    /// RDMA READs and atomics this QP accepts in flight as responder (the responder resources,
    /// ibv_qp_attr.max_dest_rd_atomic), 1..=16; set at INIT → RTR.
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
mod tests {
    use super::*;

    #[test]
    fn attr_mask_follows_the_fields_set() {
        let a = QpAttr::default().to_raw();
        assert_eq!(a.mask, 0);
        let a = QpAttr {
            state: Some(QpState::Rtr),
            dest_qpn: Some(0x12_3456),
            rq_psn: Some(0xab_cdef),
            path_mtu: Some(10),
            min_rnr_timer: Some(12),
            ..QpAttr::default()
        }
        .to_raw();
        assert_eq!(
            a.mask,
            QHCA_QP_ATTR_STATE
                | QHCA_QP_ATTR_DEST_QPN
                | QHCA_QP_ATTR_RQ_PSN
                | QHCA_QP_ATTR_PATH_MTU
                | QHCA_QP_ATTR_MIN_RNR_TIMER
        );
        assert_eq!(
            (a.state, a.dest_qpn, a.rq_psn, a.path_mtu, a.min_rnr_timer),
            (2, 0x12_3456, 0xab_cdef, 10, 12)
        );
        assert_eq!(
            (a.max_rd_atomic, a.max_dest_rd_atomic, a.rsvd1),
            (0, 0, [0; 9])
        );
        let all = QpAttr {
            state: Some(QpState::Err),
            access: Some(Access::ALL),
            dest_qpn: Some(1),
            rq_psn: Some(1),
            sq_psn: Some(1),
            path_mtu: Some(12),
            timeout: Some(1),
            retry_cnt: Some(1),
            rnr_retry: Some(1),
            min_rnr_timer: Some(1),
            max_rd_atomic: Some(3),
            max_dest_rd_atomic: Some(4),
        }
        .to_raw();
        assert_eq!(all.mask, qhca_uapi::QHCA_QP_ATTR_ALL);
        assert_eq!((all.max_rd_atomic, all.max_dest_rd_atomic), (3, 4));
        assert_eq!((all.state, all.access), (6, 0xf));
        let info = QpInfo::from_raw(&all);
        assert_eq!(info.state, QpState::Err);
        assert_eq!(info.access, Access::ALL);
        assert_eq!((info.max_rd_atomic, info.max_dest_rd_atomic), (3, 4));
    }

    /// connect() sets the responder resources at INIT → RTR and the initiator depth at RTR →
    /// RTS, the only transitions the device takes them at; 16 of each unless asked.
    #[test]
    fn connect_sets_the_rd_atomic_depths() {
        let me = ConnInfo {
            qpn: 0x42,
            psn: 1,
            ..ConnInfo::default()
        };
        let peer = ConnInfo {
            qpn: 0x43,
            psn: 2,
            ..ConnInfo::default()
        };
        let o = ConnOpts::default();
        assert_eq!((o.max_rd_atomic, o.max_dest_rd_atomic), (16, 16));
        let o = ConnOpts {
            max_rd_atomic: 3,
            max_dest_rd_atomic: 5,
            ..o
        };
        let [init, rtr, rts] = connect_attrs(&me, &peer, &o).map(|a| a.to_raw());
        assert_eq!(
            init.mask & (QHCA_QP_ATTR_MAX_RD_ATOMIC | QHCA_QP_ATTR_MAX_DEST_RD_ATOMIC),
            0
        );
        assert_eq!(rtr.mask & QHCA_QP_ATTR_MAX_RD_ATOMIC, 0);
        assert_ne!(rtr.mask & QHCA_QP_ATTR_MAX_DEST_RD_ATOMIC, 0);
        assert_eq!(
            (rtr.dest_qpn, rtr.rq_psn, rtr.max_dest_rd_atomic),
            (0x43, 2, 5)
        );
        assert_eq!(rts.mask & QHCA_QP_ATTR_MAX_DEST_RD_ATOMIC, 0);
        assert_ne!(rts.mask & QHCA_QP_ATTR_MAX_RD_ATOMIC, 0);
        assert_eq!((rts.sq_psn, rts.max_rd_atomic), (1, 3));
    }

    /// A context on an ordinary 4 KiB file: its "doorbell page" is the file, so the test reads
    /// the last doorbell word back from it; ioctls on it fail (ENOTTY), which only makes the
    /// objects' drops leak their rings.
    struct FakeDevice {
        path: std::path::PathBuf,
        ctx: Arc<Context>,
    }

    impl FakeDevice {
        fn new(tag: &str) -> FakeDevice {
            let path = std::env::temp_dir().join(format!("qhca-fake-{tag}-{}", std::process::id()));
            let f = std::fs::File::create(&path).unwrap();
            f.set_len(4096).unwrap();
            let ctx = Arc::new(Context::open_unchecked(&path).unwrap());
            FakeDevice { path, ctx }
        }

        fn last_doorbell(&self) -> DbWord {
            let b = std::fs::read(&self.path).unwrap();
            DbWord::from_raw(u64::from_le_bytes(b[0..8].try_into().unwrap()))
        }
    }

    impl Drop for FakeDevice {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    fn bytes(buf: &PageBuf, off: usize, len: usize) -> Vec<u8> {
        // SAFETY: inside the test's own mapping, which nothing else writes now.
        unsafe { std::slice::from_raw_parts(buf.as_ptr().add(off), len) }.to_vec()
    }

    #[test]
    fn post_writes_slots_rings_once_and_polling_frees_them() {
        use crate::cq::tests::{cqe_at, device_write_cqe};
        use crate::wqe::{Sge, WrOp};
        use crate::{RecvWr, SendFlags, SendWr};

        let dev = FakeDevice::new("post");
        let pd = Pd::fake(&dev.ctx, 3);
        let mut cq = Cq::fake(&dev.ctx, 9, 8).unwrap();
        let caps = QpCaps {
            max_send_wr: 4,
            max_recv_wr: 2,
            max_sge: 1,
            max_inline: 16,
        };
        let mut qp = Qp::fake(&pd, &cq, &cq, &caps, 0x42).unwrap();
        let l = *qp.layout();
        assert_eq!((l.sq_depth(), l.sq_stride(), l.rq_offset), (4, 128, 4096));

        let sge = [Sge {
            addr: 0x1000,
            length: 8,
            lkey: 0x77,
        }];
        let op = WrOp::Write {
            raddr: 0x2000,
            rkey: 0x88,
        };
        let wrs = [
            SendWr::new(10, op, &sge).with_flags(SendFlags::NONE),
            SendWr::inline(11, WrOp::Send, b"hi"),
            SendWr::new(12, op, &sge).with_flags(SendFlags::NONE),
        ];
        qp.post_send(&wrs).unwrap();
        // One doorbell for the batch, naming the SQ and producer index 3.
        assert_eq!(dev.last_doorbell(), DbWord::new(DbType::Sq, 0x42, 3));
        // Slot 1 holds the inline SEND, byte for byte.
        let slot1 = bytes(qp.ring(), 128, 66);
        assert_eq!(slot1[0..8], 11u64.to_le_bytes());
        assert_eq!(slot1[8..12], [2, 0b101, 0, 0]);
        assert_eq!(slot1[16..20], 2u32.to_le_bytes());
        assert_eq!(slot1[64..66], *b"hi");
        // Slot 2's SGE.
        assert_eq!(
            bytes(qp.ring(), 256 + 64, 16)[12..16],
            0x77u32.to_le_bytes()
        );
        assert_eq!(qp.send_outstanding(), 3);

        // Two more fit; the third is refused with its index.
        let more = [wrs[0], wrs[0], wrs[0]];
        let e = qp.post_send(&more).unwrap_err();
        assert_eq!(e.index, 1);
        assert_eq!(
            e.reason,
            PostReason::QueueFull {
                outstanding: 4,
                depth: 4
            }
        );
        assert_eq!(dev.last_doorbell(), DbWord::new(DbType::Sq, 0x42, 4));

        // The device completes the signaled SEND (slot 1): slots 0 and 1 are free again.
        device_write_cqe(cq.ring_ptr(), 3, 0, &cqe_at(11, 0x00, 0, 0x42, 1));
        let mut wc = [crate::Wc::default(); 4];
        assert_eq!(cq.poll(&mut wc), 1);
        assert_eq!((wc[0].wr_id, wc[0].qpn), (11, 0x42));
        assert_eq!(qp.send_outstanding(), 2);
        // A flush of slot 2 (unsignaled), then of slot 3.
        device_write_cqe(cq.ring_ptr(), 3, 1, &cqe_at(12, 0x01, 5, 0x42, 2));
        device_write_cqe(cq.ring_ptr(), 3, 2, &cqe_at(10, 0x01, 5, 0x42, 3));
        assert_eq!(cq.poll(&mut wc), 2);
        assert_eq!(qp.send_outstanding(), 0);
        // The consumer index was published in the doorbell record.
        assert_eq!(bytes(cq.ring_ptr(), 32 << 3, 4), 3u32.to_le_bytes());

        // Receives: the RQ at its page, its own doorbell; a receive CQE frees one slot.
        let rsge = [Sge {
            addr: 0x3000,
            length: 64,
            lkey: 5,
        }];
        qp.post_recv(&[
            RecvWr {
                wr_id: 20,
                sges: &rsge,
            },
            RecvWr {
                wr_id: 21,
                sges: &rsge,
            },
        ])
        .unwrap();
        assert_eq!(dev.last_doorbell(), DbWord::new(DbType::Rq, 0x42, 2));
        assert_eq!(bytes(qp.ring(), 4096 + 32, 12)[0..8], 21u64.to_le_bytes());
        assert!(qp
            .post_recv(&[RecvWr {
                wr_id: 22,
                sges: &rsge
            }])
            .is_err());
        device_write_cqe(cq.ring_ptr(), 3, 3, &cqe_at(20, 0x80, 0, 0x42, 0));
        assert_eq!(cq.poll(&mut wc), 1);
        assert!(wc[0].is_recv);
        assert_eq!(qp.recv_outstanding(), 1);

        // Arm names the CQ and the consumer index.
        cq.arm();
        assert_eq!(dev.last_doorbell(), DbWord::new(DbType::CqArm, 9, 4));
        assert!(cq.wait(None).is_err(), "no eventfd");
    }

    #[test]
    fn states_round_trip() {
        for s in [
            QpState::Reset,
            QpState::Init,
            QpState::Rtr,
            QpState::Rts,
            QpState::Err,
        ] {
            assert_eq!(QpState::from_raw(s.raw()), s);
        }
        assert_eq!(QpState::from_raw(4), QpState::Unknown(4));
        assert_eq!(QpState::Unknown(5).raw(), 5);
    }

    /// What a move to RESET does after the driver accepted it (the fake device refuses every
    /// ioctl, so the test does those steps itself): the QP's unpolled CQEs are gone from a CQ
    /// it shares with another QP, the other QP's stay, and a stale CQE cannot free a slot of the
    /// requests posted after the reset.
    #[test]
    fn reset_cleans_the_cq_and_stale_cqes_free_nothing() {
        use crate::cq::tests::{cqe_at, device_write_cqe};
        use crate::{SendWr, WrOp};

        let dev = FakeDevice::new("reset");
        let pd = Pd::fake(&dev.ctx, 3);
        let mut cq = Cq::fake(&dev.ctx, 9, 8).unwrap();
        let caps = QpCaps {
            max_send_wr: 4,
            max_recv_wr: 2,
            max_sge: 1,
            max_inline: 16,
        };
        let mut qp = Qp::fake(&pd, &cq, &cq, &caps, 0x42).unwrap();
        let mut other = Qp::fake(&pd, &cq, &cq, &caps, 0x43).unwrap();
        let send = |id| SendWr::inline(id, WrOp::Send, b"x");
        qp.post_send(&[send(1), send(2), send(3)]).unwrap();
        other.post_send(&[send(7)]).unwrap();
        device_write_cqe(cq.ring_ptr(), 3, 0, &cqe_at(1, 0, 0, 0x42, 0));
        device_write_cqe(cq.ring_ptr(), 3, 1, &cqe_at(7, 0, 0, 0x43, 0));
        device_write_cqe(cq.ring_ptr(), 3, 2, &cqe_at(3, 0, 0, 0x42, 2));
        // RESET.
        qp.clean_cqs();
        qp.wq.reset();
        assert_eq!(qp.send_outstanding(), 0);
        qp.post_send(&[send(10), send(11)]).unwrap();
        let mut wc = [crate::Wc::default(); 8];
        assert_eq!(cq.poll(&mut wc), 1, "only the other QP's CQE is left");
        assert_eq!((wc[0].qpn, wc[0].wr_id), (0x43, 7));
        assert_eq!(other.send_outstanding(), 0);
        assert_eq!(qp.send_outstanding(), 2, "nothing stale was credited");
        // A CQE for an index not outstanding (a stale or forged one) frees nothing.
        device_write_cqe(cq.ring_ptr(), 3, 3, &cqe_at(99, 0, 0, 0x42, 5));
        assert_eq!(cq.poll(&mut wc), 1);
        assert_eq!(qp.send_outstanding(), 2);
        assert_eq!(cq.stray_cqes(), 1);
        device_write_cqe(cq.ring_ptr(), 3, 4, &cqe_at(11, 0, 0, 0x42, 1));
        assert_eq!(cq.poll(&mut wc), 1);
        assert_eq!(qp.send_outstanding(), 0);
        assert_eq!(cq.stray_cqes(), 1);
    }

    #[test]
    fn connect_takes_the_records_and_checks_them() {
        let dev = FakeDevice::new("connect");
        let pd = Pd::fake(&dev.ctx, 3);
        let cq = Cq::fake(&dev.ctx, 9, 8).unwrap();
        let qp = Qp::fake(&pd, &cq, &cq, &QpCaps::default(), 0x42).unwrap();
        let me = qp.conn_info(0x1234);
        assert_eq!((me.qpn, me.psn, me.rkey), (0x42, 0x1234, 0));
        let peer = ConnInfo {
            qpn: 0x43,
            psn: 5,
            ..ConnInfo::default()
        };
        let o = ConnOpts::default();
        // The records the wrong way round: refused before the driver is asked.
        let e = qp.connect(&peer, &me, &o).unwrap_err();
        assert!(e.to_string().contains("local record of QP 0x43"), "{e}");
        let wide = ConnInfo {
            psn: 1 << 24,
            ..peer
        };
        assert!(matches!(
            qp.connect(&me, &wide, &o),
            Err(Error::Invalid { .. })
        ));
        // The right way round reaches the driver (which the fake device is not).
        assert!(matches!(
            qp.connect(&me, &peer, &o),
            Err(Error::Ioctl {
                op: "MODIFY_QP",
                ..
            })
        ));
    }

    /// rnr_retry 7 retries for ever: a forgotten receive hung the requester silently.
    #[test]
    fn default_rnr_retry_is_finite() {
        let o = ConnOpts::default();
        assert!(o.rnr_retry < 7, "{o:?}");
        assert!(o.retry_cnt <= 7 && o.path_mtu == 12);
    }

    #[test]
    fn posting_on_a_dead_context_writes_nothing() {
        let dev = FakeDevice::new("dead");
        let pd = Pd::fake(&dev.ctx, 3);
        let cq = Cq::fake(&dev.ctx, 9, 8).unwrap();
        let mut qp = Qp::fake(&pd, &cq, &cq, &QpCaps::default(), 0x42).unwrap();
        dev.ctx.dead_if_err(libc::POLLERR, "test").unwrap_err();
        let e = qp
            .post_send(&[crate::SendWr::inline(1, crate::WrOp::Send, b"x")])
            .unwrap_err();
        assert_eq!((e.index, e.reason), (0, PostReason::Disassociated));
        assert_eq!(e.errno(), crate::Errno::ENODEV);
        assert!(qp
            .post_recv(&[crate::RecvWr {
                wr_id: 1,
                sges: &[]
            }])
            .is_err());
        assert_eq!((qp.send_outstanding(), qp.recv_outstanding()), (0, 0));
        assert_eq!(dev.last_doorbell().raw(), 0, "no doorbell rung");
    }

    /// A spin-wait on a CQ ends: at its timeout while the device is there, and within a few
    /// milliseconds once the context is disassociated (the old tools spun on `poll` for ever).
    #[test]
    fn poll_wait_times_out_and_stops_on_a_dead_context() {
        use std::time::{Duration, Instant};
        let dev = FakeDevice::new("pollwait");
        let mut cq = Cq::fake(&dev.ctx, 9, 8).unwrap();
        let mut wc = [crate::Wc::default(); 2];
        let t = Instant::now();
        assert_eq!(
            cq.poll_wait(&mut wc, Some(Duration::from_millis(30)))
                .unwrap(),
            0
        );
        assert!(t.elapsed() >= Duration::from_millis(30));
        dev.ctx.dead_if_err(libc::POLLERR, "test").unwrap_err();
        let t = Instant::now();
        assert!(matches!(
            cq.poll_wait(&mut wc, None),
            Err(Error::Disassociated { .. })
        ));
        assert!(t.elapsed() < Duration::from_secs(1));
    }
}
