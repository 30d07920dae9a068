// SPDX-License-Identifier: GPL-2.0

//! A kernel consumer's completion queue: the device writes CQEs into the driver's ring, and
//! `poll_cq` turns them into the core's `ib_wc`s, in order, under the CQ's lock (the core may
//! poll from interrupt context). The ring's format is the ABI header's ("Completion queue"):
//! an entry is the device's once its owner bit matches the pass, and the consumer index goes
//! back to the device in the doorbell record behind the entries.
//!
//! A send completion also frees its QP's send slots up to the WQE it names, and a receive
//! completion the receive slot, so the CQ keeps the QPs that complete into it
//! ([`KCq::attach`]): the QP's number is all a CQE carries.

use super::{qp::KQp, ring::KRing};
use crate::{context::reserve_unlocked, device::QhcaDevice, uapi};
use core::{
    mem::MaybeUninit,
    sync::atomic::{fence, Ordering},
};
use kernel::{
    alloc::kvec::PushError,
    bindings, new_spinlock_irq,
    prelude::*,
    sync::{Arc, SpinLockIrq},
};

struct CqState {
    /// Free-running consumer index.
    ci: u32,
    /// The QPs whose completions come here (send or receive side).
    qps: KVec<Arc<KQp>>,
}

/// See the module documentation.
#[pin_data]
pub(crate) struct KCq {
    dev: Arc<QhcaDevice>,
    ring: Arc<KRing>,
    uar: u32,
    cqn: u32,
    log: u32,
    #[pin]
    state: SpinLockIrq<CqState>,
}

// The device's completion status and opcode numbers are the verbs' (the ABI header says so).
const _: () = {
    assert!(uapi::QHCA_WC_SUCCESS == bindings::ib_wc_status_IB_WC_SUCCESS);
    assert!(uapi::QHCA_WC_WR_FLUSH_ERR == bindings::ib_wc_status_IB_WC_WR_FLUSH_ERR);
    assert!(uapi::QHCA_WC_RNR_RETRY_EXC_ERR == bindings::ib_wc_status_IB_WC_RNR_RETRY_EXC_ERR);
    assert!(uapi::QHCA_WC_GENERAL_ERR == bindings::ib_wc_status_IB_WC_GENERAL_ERR);
    assert!(uapi::QHCA_WC_SEND == bindings::ib_wc_opcode_IB_WC_SEND);
    assert!(uapi::QHCA_WC_LOCAL_INV == bindings::ib_wc_opcode_IB_WC_LOCAL_INV);
    assert!(uapi::QHCA_WC_REG_MR == bindings::ib_wc_opcode_IB_WC_REG_MR);
    assert!(uapi::QHCA_WC_RECV == bindings::ib_wc_opcode_IB_WC_RECV);
    assert!(uapi::QHCA_WC_RECV_RDMA_WITH_IMM == bindings::ib_wc_opcode_IB_WC_RECV_RDMA_WITH_IMM);
};

/// CQE field offsets, from the ABI's `struct qhca_cqe`.
mod cqe {
    use crate::uapi::qhca_cqe;
    use core::mem::offset_of;

    pub(super) const WR_ID: usize = offset_of!(qhca_cqe, wr_id);
    pub(super) const BYTE_LEN: usize = offset_of!(qhca_cqe, byte_len);
    pub(super) const IMM: usize = offset_of!(qhca_cqe, imm_data);
    pub(super) const QPN: usize = offset_of!(qhca_cqe, qpn);
    pub(super) const SRC_QP: usize = offset_of!(qhca_cqe, src_qp);
    pub(super) const OPCODE: usize = offset_of!(qhca_cqe, opcode);
    pub(super) const STATUS: usize = offset_of!(qhca_cqe, status);
    pub(super) const VENDOR_ERR: usize = offset_of!(qhca_cqe, vendor_err);
    pub(super) const FLAGS: usize = offset_of!(qhca_cqe, flags);
    pub(super) const WQE_INDEX: usize = offset_of!(qhca_cqe, wqe_index);
    pub(super) const OWNER: usize = offset_of!(qhca_cqe, owner);
}

impl KCq {
    /// The ring for a CQ of `2^log` entries, and its doorbell record.
    pub(crate) fn ring_bytes(log: u32) -> u64 {
        (u64::from(uapi::QHCA_CQE_SIZE) << log) + 64
    }

    pub(crate) fn new(
        dev: Arc<QhcaDevice>,
        ring: Arc<KRing>,
        uar: u32,
        cqn: u32,
        log: u32,
    ) -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                dev,
                ring,
                uar,
                cqn,
                log,
                state <- new_spinlock_irq!(CqState { ci: 0, qps: KVec::new() }),
            }),
            GFP_KERNEL,
        )
    }

    /// Completions of `qp` come here from now on. May sleep.
    pub(crate) fn attach(&self, qp: Arc<KQp>) -> Result {
        let mut qp = qp;
        loop {
            reserve_unlocked(&self.state, |st| &mut st.qps)?;
            match self.state.lock().qps.push_within_capacity(qp) {
                Ok(()) => return Ok(()),
                // Another attach took the room meanwhile: make more.
                Err(PushError(back)) => qp = back,
            }
        }
    }

    /// `qp` is destroyed: its completions are no longer reported (a CQE of it still in the
    /// ring is dropped when polled).
    pub(crate) fn detach(&self, qpn: u32) {
        self.state.lock().qps.retain(|q| q.qpn() != qpn);
    }

    /// Offset of entry `ci`.
    fn slot(&self, ci: u32) -> usize {
        ((ci & ((1 << self.log) - 1)) as usize) * uapi::QHCA_CQE_SIZE as usize
    }

    /// True if entry `ci` is the device's (its owner bit matches the pass).
    fn ready(&self, ci: u32) -> bool {
        let pass = ci >> self.log;
        self.ring.read8(self.slot(ci) + cqe::OWNER) & uapi::QHCA_CQE_OWNER as u8
            == ((pass + 1) & 1) as u8
    }

    /// `poll_cq`: see [`crate::rdma::Driver::poll_cq`].
    pub(crate) fn poll(&self, out: &mut [MaybeUninit<bindings::ib_wc>]) -> usize {
        let mut st = self.state.lock();
        let mut got = 0;
        while got < out.len() && self.ready(st.ci) {
            // The entry's body after its owner byte (the device wrote it first): `dma_rmb`,
            // which orders loads from coherent memory as an acquire fence does.
            fence(Ordering::Acquire);
            let off = self.slot(st.ci);
            st.ci = st.ci.wrapping_add(1);
            let qpn = self.ring.read32(off + cqe::QPN);
            let opcode = self.ring.read8(off + cqe::OPCODE);
            let index = self.ring.read16(off + cqe::WQE_INDEX);
            let recv = u32::from(opcode) & uapi::QHCA_WC_RECV != 0;
            let Some(qp) = st.qps.iter().find(|q| q.qpn() == qpn) else {
                // A QP destroyed since (or a device naming one that never completed here).
                continue;
            };
            if recv {
                qp.recv_done(index);
            } else {
                qp.send_done(index);
            }
            let status = u32::from(self.ring.read8(off + cqe::STATUS));
            let flags = u32::from(self.ring.read8(off + cqe::FLAGS));
            let imm = self.ring.read32(off + cqe::IMM);
            let mut wc: bindings::ib_wc = pin_init::zeroed();
            wc.__bindgen_anon_1.wr_id = self.ring.read64(off + cqe::WR_ID);
            // The device's numbers are the verbs' (checked above); one it should not write is
            // a general error of its side's plainest opcode.
            let known = matches!(
                u32::from(opcode),
                uapi::QHCA_WC_SEND
                    ..=uapi::QHCA_WC_LOCAL_INV
                        | uapi::QHCA_WC_REG_MR
                        | uapi::QHCA_WC_RECV
                        | uapi::QHCA_WC_RECV_RDMA_WITH_IMM
            );
            wc.status = if status <= uapi::QHCA_WC_GENERAL_ERR && known {
                status
            } else {
                bindings::ib_wc_status_IB_WC_GENERAL_ERR
            };
            wc.opcode = match (known, recv) {
                (true, _) => u32::from(opcode),
                (false, true) => bindings::ib_wc_opcode_IB_WC_RECV,
                (false, false) => bindings::ib_wc_opcode_IB_WC_SEND,
            };
            wc.vendor_err = u32::from(self.ring.read8(off + cqe::VENDOR_ERR));
            wc.byte_len = self.ring.read32(off + cqe::BYTE_LEN);
            wc.qp = qp.core_qp();
            wc.src_qp = self.ring.read32(off + cqe::SRC_QP) & uapi::QHCA_DB_QN_MASK;
            let mut wflags = 0;
            if flags & uapi::QHCA_CQE_WITH_IMM != 0 {
                wflags |= bindings::ib_wc_flags_IB_WC_WITH_IMM;
                wc.ex.imm_data = imm;
            }
            if flags & uapi::QHCA_CQE_WITH_INV != 0 {
                wflags |= bindings::ib_wc_flags_IB_WC_WITH_INVALIDATE;
                wc.ex.invalidate_rkey = imm;
            }
            if flags & uapi::QHCA_CQE_CSUM != 0 {
                // The Ethernet QP's frame sum, for its one consumer, the driver's own
                // Ethernet function (`qhca_eth.c`).
                wflags |= bindings::ib_wc_flags_IB_WC_WITH_IMM;
                wc.ex.imm_data = imm;
            }
            if flags & uapi::QHCA_CQE_WITH_GRH != 0 {
                wflags |= bindings::ib_wc_flags_IB_WC_GRH;
            }
            wc.wc_flags = wflags as i32;
            wc.port_num = 1;
            out[got].write(wc);
            got += 1;
        }
        if got != 0 {
            // The doorbell record: the device overwrites nothing before this.
            self.ring
                .write32(st.ci, (uapi::QHCA_CQE_SIZE as usize) << self.log);
        }
        got
    }

    /// `req_notify_cq`: see [`crate::rdma::Driver::req_notify_cq`]. The device has one kind
    /// of arming, for the next completion, which serves a request for the next solicited one
    /// as well (an event too many is allowed).
    pub(crate) fn arm(&self, report_missed: bool) -> bool {
        let st = self.state.lock();
        self.dev
            .ring_queue(self.uar, self.cqn, uapi::QHCA_DB_CQ_ARM, st.ci);
        report_missed && self.ready(st.ci)
    }
}
