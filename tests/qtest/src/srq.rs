// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Shared receive queues from the test side: CREATE/MODIFY/QUERY/DESTROY_SRQ, the SRQ's ring
//! and the record the device writes its consumer index to, and QPs created on an SRQ.

use qhca_uapi::db::{DbType, DbWord};
use qhca_uapi::*;

use crate::verbs::{in_words, obj_cmd, rwqe_bytes, Mem, Qp, QpCaps, PAGE};
use crate::Hca;

/// An SRQ as the test sees it.
#[derive(Clone, Copy, Debug)]
pub struct Srq {
    pub srqn: u32,
    pub uar: u32,
    pub base: u64,
    pub log: u8,
    pub stride_log: u8,
    /// Producer index (free-running, 16 bits).
    pub pi: u16,
}

/// Pages of an SRQ of 2^`log` slots of 2^`stride_log` bytes, and its record.
pub fn srq_npages(log: u8, stride_log: u8) -> u64 {
    ((1u64 << (log + stride_log)) + 64).div_ceil(PAGE)
}

/// `struct qhca_cmd_create_srq` as bytes.
pub fn create_srq_bytes(
    uar: u32,
    pdn: u32,
    log: u8,
    stride_log: u8,
    max_sge: u16,
    npages: u32,
    pages_addr: u64,
) -> [u8; 40] {
    let mut b = [0u8; 40];
    b[0..4].copy_from_slice(&uar.to_le_bytes());
    b[4..8].copy_from_slice(&pdn.to_le_bytes());
    b[8] = log;
    b[9] = stride_log;
    b[10..12].copy_from_slice(&max_sge.to_le_bytes());
    b[12..16].copy_from_slice(&npages.to_le_bytes());
    b[16..24].copy_from_slice(&pages_addr.to_le_bytes());
    b
}

/// CREATE_SRQ in a ring of its own pages: (status, SRQ).
pub fn create_srq(
    h: &mut Hca,
    m: &mut Mem,
    uar: u32,
    pdn: u32,
    log: u8,
    stride_log: u8,
    max_sge: u16,
) -> (u32, Srq) {
    let n = srq_npages(log, stride_log);
    let base = m.alloc(h, n * PAGE);
    let list = m.page_list(h, base, n);
    let b = create_srq_bytes(uar, pdn, log, stride_log, max_sge, n as u32, list);
    let (st, d) = obj_cmd(h, QHCA_CMD_CREATE_SRQ, in_words(&b));
    (
        st,
        Srq {
            srqn: d as u32,
            uar,
            base,
            log,
            stride_log,
            pi: 0,
        },
    )
}

impl Srq {
    pub fn slot(&self, idx: u16) -> u64 {
        self.base + (((idx as u64) & ((1 << self.log) - 1)) << self.stride_log)
    }

    /// Writes a receive WQE at the producer index without ringing.
    pub fn write_recv(&mut self, h: &mut Hca, wr_id: u64, sges: &[(u64, u32, u32)]) {
        let a = self.slot(self.pi);
        h.qt.memwrite(a, &rwqe_bytes(wr_id, sges));
        self.pi = self.pi.wrapping_add(1);
    }

    pub fn ring(&self, h: &mut Hca) {
        let w = DbWord::new(DbType::Srq, self.srqn, self.pi as u32).raw();
        h.doorbell(self.uar, w);
    }

    pub fn post_recv(&mut self, h: &mut Hca, wr_id: u64, sges: &[(u64, u32, u32)]) {
        self.write_recv(h, wr_id, sges);
        self.ring(h);
    }

    /// The consumer index the device last wrote to the record.
    pub fn ci(&self, h: &mut Hca) -> u32 {
        h.qt.readl(self.base + (1u64 << (self.log + self.stride_log)))
    }

    /// MODIFY_SRQ: arms `limit` (0 disarms); the status.
    pub fn modify(&self, h: &mut Hca, limit: u64) -> u32 {
        obj_cmd(
            h,
            QHCA_CMD_MODIFY_SRQ,
            [self.uar as u64, self.srqn as u64, limit, 0, 0],
        )
        .0
    }

    /// QUERY_SRQ: (status, limit, WQEs posted and not taken).
    pub fn query(&self, h: &mut Hca) -> (u32, u64, u64) {
        let mut c = h.cmd(QHCA_CMD_QUERY_SRQ);
        c.in_ = [self.uar as u64, self.srqn as u64, 0, 0, 0];
        let e = h.exec(&c);
        (e.status as u32, e.data[0], e.data[1])
    }

    pub fn destroy(&self, h: &mut Hca) -> u32 {
        obj_cmd(
            h,
            QHCA_CMD_DESTROY_SRQ,
            [self.uar as u64, self.srqn as u64, 0, 0, 0],
        )
        .0
    }
}

/// CREATE_QP of a QP of `ty` that receives from SRQ `srqn` (`in_ext`): its page list holds the
/// send queue alone, and `caps`' receive queue sizes are sent as 0. (status, QP)
#[allow(clippy::too_many_arguments)]
pub fn create_qp_on_srq(
    h: &mut Hca,
    m: &mut Mem,
    uar: u32,
    pdn: u32,
    scqn: u32,
    rcqn: u32,
    caps: &QpCaps,
    ty: u32,
    srqn: u32,
) -> (u32, Qp) {
    let caps = QpCaps {
        rq_log: 0,
        rq_stride_log: 0,
        ..*caps
    };
    let n = (1u64 << (caps.sq_log + caps.sq_stride_log)).div_ceil(PAGE);
    let base = m.alloc(h, n * PAGE);
    let list = m.page_list(h, base, n);
    let mut b = crate::verbs::create_qp_bytes(uar, pdn, scqn, rcqn, &caps, n as u32, list);
    b[28..32].copy_from_slice(&ty.to_le_bytes());
    let mut c = h.cmd(QHCA_CMD_CREATE_QP);
    c.in_ = in_words(&b);
    c.in_ext = srqn;
    let e = h.exec(&c);
    (
        e.status as u32,
        Qp {
            qpn: e.data[0] as u32,
            uar,
            base,
            sq_log: caps.sq_log,
            sq_stride_log: caps.sq_stride_log,
            rq_log: 0,
            rq_stride_log: 0,
            rq_off: n * PAGE,
            sq_pi: 0,
            rq_pi: 0,
        },
    )
}
