// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Verbs objects from the test side: PDs, MRs, CQs and RC QPs created with real commands,
//! their rings and page lists in guest RAM, WQEs written and doorbells rung the way the provider
//! does, CQEs polled by owner bit. All memory comes from a bump allocator over
//! [`VERBS_RAM`]..[`RAM_SIZE`], physically contiguous, so that a page list is just consecutive
//! pages and an MR's iova is its guest-physical address. Page lists are two-level, as ABI 2
//! has them: a directory of page-list page addresses, each page-list page holding up to
//! `QHCA_PL_PAGE_ENTRIES` page addresses.

use qhca_uapi::db::{DbType, DbWord};
use qhca_uapi::*;

use crate::hca::{Hca, RAM_SIZE};
use crate::port::AhAttr;

/// Where the verbs tests' memory starts (above everything `hca.rs` uses).
pub const VERBS_RAM: u64 = 0x40_0000;
pub const PAGE: u64 = QHCA_PAGE_SIZE as u64;
/// Page addresses in one page-list page.
pub const PL_ENTRIES: usize = QHCA_PL_PAGE_ENTRIES as usize;

/// A bump allocator of guest RAM.
pub struct Mem {
    next: u64,
    end: u64,
}

impl Default for Mem {
    fn default() -> Self {
        Mem {
            next: VERBS_RAM,
            end: RAM_SIZE,
        }
    }
}

impl Mem {
    /// `len` bytes, page aligned, zeroed.
    pub fn alloc(&mut self, h: &mut Hca, len: u64) -> u64 {
        let a = self.next;
        let len = len.max(1).div_ceil(PAGE) * PAGE;
        assert!(a + len <= self.end, "test RAM exhausted");
        self.next += len;
        h.qt.memset(a, len as usize, 0);
        a
    }

    /// An allocator of its own over the next `len` bytes of this one.
    pub fn carve(&mut self, h: &mut Hca, len: u64) -> Mem {
        let next = self.alloc(h, len);
        Mem {
            next,
            end: next + len,
        }
    }

    /// A page list for the contiguous buffer at `addr` (page aligned down), `npages` long:
    /// the directory's address, as a command's `pages_addr` takes it.
    pub fn page_list(&mut self, h: &mut Hca, addr: u64, npages: u64) -> u64 {
        let first = addr & !(PAGE - 1);
        let pages: Vec<u64> = (0..npages).map(|i| first + i * PAGE).collect();
        self.page_list_of(h, &pages)
    }

    /// A two-level page list naming `pages` in order (raw entries: the test may put anything
    /// there): the page-list pages, then the directory. Returns the directory's address.
    pub fn page_list_of(&mut self, h: &mut Hca, pages: &[u64]) -> u64 {
        let lists = pages.len().div_ceil(PL_ENTRIES).max(1) as u64;
        let first = self.alloc(h, lists * PAGE);
        let bytes: Vec<u8> = pages.iter().flat_map(|p| p.to_le_bytes()).collect();
        h.qt.memwrite(first, &bytes);
        let dir: Vec<u64> = (0..lists).map(|j| first + j * PAGE).collect();
        self.directory(h, &dir)
    }

    /// A directory holding `entries` (addresses of page-list pages, raw).
    pub fn directory(&mut self, h: &mut Hca, entries: &[u64]) -> u64 {
        let dir = self.alloc(h, entries.len() as u64 * 8);
        let bytes: Vec<u8> = entries.iter().flat_map(|p| p.to_le_bytes()).collect();
        h.qt.memwrite(dir, &bytes);
        dir
    }
}

/// Raw bytes as the `in[]` words of a command.
pub fn in_words(b: &[u8]) -> [u64; 5] {
    assert!(b.len() <= 40);
    let mut buf = [0u8; 40];
    buf[..b.len()].copy_from_slice(b);
    let mut w = [0u64; 5];
    for (i, x) in w.iter_mut().enumerate() {
        *x = u64::from_le_bytes(buf[i * 8..i * 8 + 8].try_into().unwrap());
    }
    w
}

fn put32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_le_bytes());
}
fn put64(b: &mut [u8], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_le_bytes());
}
fn get32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
fn get64(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}

/// Executes an object command: (status, data[0]).
pub fn obj_cmd(h: &mut Hca, opcode: u32, in_: [u64; 5]) -> (u32, u64) {
    let mut c = h.cmd(opcode);
    c.in_ = in_;
    let e = h.exec(&c);
    (e.status as u32, e.data[0])
}

/// As [`obj_cmd`], with an output buffer.
pub fn obj_cmd_out(h: &mut Hca, opcode: u32, in_: [u64; 5], out: u64, out_len: u32) -> u32 {
    let mut c = h.cmd(opcode);
    c.in_ = in_;
    c.out_addr = out;
    c.out_len = out_len;
    h.exec(&c).status as u32
}

pub fn alloc_pd(h: &mut Hca, uar: u32) -> (u32, u32) {
    let (st, d) = obj_cmd(h, QHCA_CMD_ALLOC_PD, [uar as u64, 0, 0, 0, 0]);
    (st, d as u32)
}

pub fn destroy(h: &mut Hca, opcode: u32, uar: u32, handle: u32) -> u32 {
    obj_cmd(h, opcode, [uar as u64, handle as u64, 0, 0, 0]).0
}

/// `struct qhca_cmd_reg_mr` as bytes.
pub fn reg_mr_bytes(
    uar: u32,
    pdn: u32,
    iova: u64,
    length: u64,
    access: u32,
    npages: u32,
    pages_addr: u64,
) -> [u8; 40] {
    let mut b = [0u8; 40];
    put32(&mut b, 0, uar);
    put32(&mut b, 4, pdn);
    put64(&mut b, 8, iova);
    put64(&mut b, 16, length);
    put32(&mut b, 24, access);
    put32(&mut b, 28, npages);
    put64(&mut b, 32, pages_addr);
    b
}

/// REG_MR exactly as given: (status, key).
#[allow(clippy::too_many_arguments)]
pub fn reg_mr_raw(
    h: &mut Hca,
    uar: u32,
    pdn: u32,
    iova: u64,
    len: u64,
    access: u32,
    npages: u32,
    pages_addr: u64,
) -> (u32, u32) {
    let b = reg_mr_bytes(uar, pdn, iova, len, access, npages, pages_addr);
    let (st, key) = obj_cmd(h, QHCA_CMD_REG_MR, in_words(&b));
    (st, key as u32)
}

/// Pages an MR over [addr, addr + len) needs.
pub fn mr_npages(addr: u64, len: u64) -> u64 {
    ((addr & (PAGE - 1)) + len).div_ceil(PAGE)
}

/// REG_MR over guest-physical [addr, addr + len): (status, key).
pub fn reg_mr(
    h: &mut Hca,
    m: &mut Mem,
    uar: u32,
    pdn: u32,
    addr: u64,
    len: u64,
    access: u32,
) -> (u32, u32) {
    let n = mr_npages(addr, len);
    let list = m.page_list(h, addr, n);
    let b = reg_mr_bytes(uar, pdn, addr, len, access, n as u32, list);
    let (st, d) = obj_cmd(h, QHCA_CMD_REG_MR, in_words(&b));
    (st, d as u32)
}

/// A CQ as the test sees it.
#[derive(Clone, Copy, Debug)]
pub struct Cq {
    pub cqn: u32,
    pub uar: u32,
    pub base: u64,
    pub log: u32,
    /// Consumer index (free-running).
    pub ci: u32,
}

pub fn cq_bytes(log: u32) -> u64 {
    (32u64 << log) + 64
}

pub fn create_cq_bytes(uar: u32, log: u32, npages: u32, pages_addr: u64) -> [u8; 40] {
    let mut b = [0u8; 40];
    put32(&mut b, 0, uar);
    put32(&mut b, 4, log);
    put32(&mut b, 8, npages);
    put64(&mut b, 16, pages_addr);
    b
}

pub fn create_cq(h: &mut Hca, m: &mut Mem, uar: u32, log: u32) -> (u32, Cq) {
    let bytes = cq_bytes(log);
    let base = m.alloc(h, bytes);
    let n = bytes.div_ceil(PAGE);
    let list = m.page_list(h, base, n);
    let b = create_cq_bytes(uar, log, n as u32, list);
    let (st, d) = obj_cmd(h, QHCA_CMD_CREATE_CQ, in_words(&b));
    (
        st,
        Cq {
            cqn: d as u32,
            uar,
            base,
            log,
            ci: 0,
        },
    )
}

/// A CQE, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cqe {
    pub wr_id: u64,
    pub byte_len: u32,
    pub imm: u32,
    pub qpn: u32,
    pub src_qp: u32,
    pub opcode: u8,
    pub status: u8,
    pub flags: u8,
    /// The SQ or RQ index of the WQE completed (free-running, 16 bits).
    pub wqe_index: u16,
}

impl Cq {
    /// The next CQE if its owner bit says it is there; consumes it and publishes the consumer
    /// index in the doorbell record.
    pub fn poll(&mut self, h: &mut Hca) -> Option<Cqe> {
        let slot = (self.ci & ((1 << self.log) - 1)) as u64;
        let b = h.qt.memread(self.base + slot * 32, 32);
        let want = (((self.ci >> self.log) + 1) & 1) as u8;
        if b[31] & 1 != want {
            return None;
        }
        assert_eq!(b[31] & !1, 0, "CQE owner byte reserved bits: {b:?}");
        assert_eq!(b[26], 0, "CQE vendor_err: {b:?}");
        assert_eq!(b[30], 0, "CQE reserved byte: {b:?}");
        self.ci = self.ci.wrapping_add(1);
        h.qt.writel(self.base + (32u64 << self.log), self.ci);
        Some(Cqe {
            wr_id: get64(&b, 0),
            byte_len: get32(&b, 8),
            imm: get32(&b, 12),
            qpn: get32(&b, 16),
            src_qp: get32(&b, 20),
            opcode: b[24],
            status: b[25],
            flags: b[27],
            wqe_index: u16::from_le_bytes([b[28], b[29]]),
        })
    }

    /// Waits (virtual time) for the next CQE.
    pub fn wait(&mut self, h: &mut Hca) -> Cqe {
        let mut got = None;
        let ok = h.poll(|h| {
            got = self.poll(h);
            got.is_some()
        });
        assert!(ok, "no CQE on CQ {} (ci {})", self.cqn, self.ci);
        got.unwrap()
    }

    /// Waits (virtual time) until `n` CQEs came: `(wr_id, status, wqe_index)` of each, in
    /// order; fewer if the polling rounds ran out first.
    pub fn wait_n(&mut self, h: &mut Hca, n: usize) -> Vec<(u64, u32, u16)> {
        let mut got = Vec::new();
        h.poll(|h| {
            while let Some(c) = self.poll(h) {
                got.push((c.wr_id, c.status as u32, c.wqe_index));
            }
            got.len() >= n
        });
        got
    }

    /// Waits for the next CQE at most `limit` of real time, the virtual clock moving on
    /// meanwhile: for CQEs of frames from a netdev, which arrive when QEMU reads them.
    pub fn wait_real(&mut self, h: &mut Hca, limit: std::time::Duration) -> Cqe {
        let t0 = std::time::Instant::now();
        loop {
            if let Some(c) = self.poll(h) {
                return c;
            }
            assert!(t0.elapsed() < limit, "no CQE on CQ {}", self.cqn);
            h.qt.clock_step(100_000);
        }
    }

    /// Asserts that no CQE arrives within a settle period.
    pub fn expect_empty(&mut self, h: &mut Hca) {
        h.settle();
        let c = self.poll(h);
        assert!(c.is_none(), "unexpected CQE on CQ {}: {c:?}", self.cqn);
    }

    pub fn arm(&mut self, h: &mut Hca) {
        let w = DbWord::new(DbType::CqArm, self.cqn, self.ci).raw();
        h.doorbell(self.uar, w);
    }
}

/// A QP as the test sees it.
#[derive(Clone, Copy, Debug)]
pub struct Qp {
    pub qpn: u32,
    pub uar: u32,
    pub base: u64,
    pub sq_log: u8,
    pub sq_stride_log: u8,
    pub rq_log: u8,
    pub rq_stride_log: u8,
    pub rq_off: u64,
    pub sq_pi: u16,
    pub rq_pi: u16,
}

#[derive(Clone, Copy, Debug)]
pub struct QpCaps {
    pub sq_log: u8,
    pub sq_stride_log: u8,
    pub rq_log: u8,
    pub rq_stride_log: u8,
    pub max_inline: u16,
    pub max_sge: u16,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps {
            sq_log: 4,
            sq_stride_log: 8,
            rq_log: 4,
            rq_stride_log: 6,
            max_inline: 128,
            max_sge: 3,
        }
    }
}

pub fn qp_layout(c: &QpCaps) -> (u64, u64) {
    let sq = 1u64 << (c.sq_log + c.sq_stride_log);
    let rq_off = sq.div_ceil(PAGE) * PAGE;
    let total = rq_off + (1u64 << (c.rq_log + c.rq_stride_log));
    (rq_off, total.div_ceil(PAGE))
}

#[allow(clippy::too_many_arguments)]
pub fn create_qp_bytes(
    uar: u32,
    pdn: u32,
    scqn: u32,
    rcqn: u32,
    c: &QpCaps,
    npages: u32,
    pages_addr: u64,
) -> [u8; 40] {
    let mut b = [0u8; 40];
    put32(&mut b, 0, uar);
    put32(&mut b, 4, pdn);
    put32(&mut b, 8, scqn);
    put32(&mut b, 12, rcqn);
    b[16] = c.sq_log;
    b[17] = c.sq_stride_log;
    b[18] = c.rq_log;
    b[19] = c.rq_stride_log;
    b[20..22].copy_from_slice(&c.max_inline.to_le_bytes());
    b[22..24].copy_from_slice(&c.max_sge.to_le_bytes());
    put32(&mut b, 24, npages);
    put64(&mut b, 32, pages_addr);
    b
}

pub fn create_qp(
    h: &mut Hca,
    m: &mut Mem,
    uar: u32,
    pdn: u32,
    scqn: u32,
    rcqn: u32,
    c: &QpCaps,
) -> (u32, Qp) {
    create_qp_typed(h, m, uar, pdn, scqn, rcqn, c, QHCA_QPT_RC)
}

/// CREATE_QP of a QP of `ty` (`QHCA_QPT_*`, or anything): (status, QP).
#[allow(clippy::too_many_arguments)]
pub fn create_qp_typed(
    h: &mut Hca,
    m: &mut Mem,
    uar: u32,
    pdn: u32,
    scqn: u32,
    rcqn: u32,
    c: &QpCaps,
    ty: u32,
) -> (u32, Qp) {
    let (rq_off, n) = qp_layout(c);
    let base = m.alloc(h, n * PAGE);
    let list = m.page_list(h, base, n);
    let mut b = create_qp_bytes(uar, pdn, scqn, rcqn, c, n as u32, list);
    b[28..32].copy_from_slice(&ty.to_le_bytes());
    let (st, d) = obj_cmd(h, QHCA_CMD_CREATE_QP, in_words(&b));
    (
        st,
        Qp {
            qpn: d as u32,
            uar,
            base,
            sq_log: c.sq_log,
            sq_stride_log: c.sq_stride_log,
            rq_log: c.rq_log,
            rq_stride_log: c.rq_stride_log,
            rq_off,
            sq_pi: 0,
            rq_pi: 0,
        },
    )
}

/// `struct qhca_qp_attr`, host side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpAttr {
    pub mask: u32,
    pub state: u8,
    pub path_mtu: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub access: u32,
    pub dest_qpn: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub qkey: u32,
    /// Where the peer is (RC, `QHCA_QP_ATTR_AV`); all zeros when the mask does not name it.
    pub av: AhAttr,
}

impl QpAttr {
    pub fn encode(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        put32(&mut b, 0, self.mask);
        b[4] = self.state;
        b[5] = self.path_mtu;
        b[6] = self.timeout;
        b[7] = self.retry_cnt;
        b[8] = self.rnr_retry;
        b[9] = self.min_rnr_timer;
        b[10] = self.max_rd_atomic;
        b[11] = self.max_dest_rd_atomic;
        put32(&mut b, 12, self.access);
        put32(&mut b, 16, self.dest_qpn);
        put32(&mut b, 20, self.rq_psn);
        put32(&mut b, 24, self.sq_psn);
        put32(&mut b, 28, self.qkey);
        b[32..].copy_from_slice(&self.av.encode());
        b
    }

    pub fn decode(b: &[u8]) -> QpAttr {
        QpAttr {
            mask: get32(b, 0),
            state: b[4],
            path_mtu: b[5],
            timeout: b[6],
            retry_cnt: b[7],
            rnr_retry: b[8],
            min_rnr_timer: b[9],
            max_rd_atomic: b[10],
            max_dest_rd_atomic: b[11],
            access: get32(b, 12),
            dest_qpn: get32(b, 16),
            rq_psn: get32(b, 20),
            sq_psn: get32(b, 24),
            qkey: get32(b, 28),
            av: AhAttr::decode(&b[32..64]),
        }
    }
}

/// A mailbox for MODIFY_QP / QUERY outputs.
pub const MAILBOX: u64 = 0x3f_0000;

pub fn modify_qp_raw(h: &mut Hca, uar: u32, qpn: u32, attr: &[u8; 64]) -> u32 {
    h.qt.memwrite(MAILBOX, attr);
    obj_cmd(
        h,
        QHCA_CMD_MODIFY_QP,
        [uar as u64, qpn as u64, MAILBOX, 0, 0],
    )
    .0
}

pub fn modify_qp(h: &mut Hca, uar: u32, qpn: u32, a: &QpAttr) -> u32 {
    modify_qp_raw(h, uar, qpn, &a.encode())
}

pub fn query_qp(h: &mut Hca, uar: u32, qpn: u32) -> (u32, QpAttr) {
    let out = MAILBOX + 0x1000;
    h.qt.memset(out, 64, 0xee);
    let st = obj_cmd_out(
        h,
        QHCA_CMD_QUERY_QP,
        [uar as u64, qpn as u64, 0, 0, 0],
        out,
        64,
    );
    (st, QpAttr::decode(&h.qt.memread(out, 64)))
}

/// QUERY_CTX: (status, db_accepted, db_violations).
pub fn query_ctx(h: &mut Hca, uar: u32) -> (u32, u64, u64) {
    let (st, c) = query_ctx_stats(h, uar);
    (st, c.db_accepted, c.db_violations)
}

/// `struct qhca_ctx_stats`, decoded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtxStats {
    pub db_accepted: u64,
    pub db_violations: u64,
    pub pkt_foreign: u64,
    pub rnr_retries: u64,
    pub odp_req_faults: u64,
    pub odp_resp_faults: u64,
    pub odp_fault_rnr_naks: u64,
    pub odp_invalidations: u64,
    pub ud_drop_qkey: u64,
    pub ud_drop_no_recv: u64,
    pub ud_drop_too_long: u64,
    pub ud_drop_fault: u64,
}

/// QUERY_CTX: (status, every counter).
pub fn query_ctx_stats(h: &mut Hca, uar: u32) -> (u32, CtxStats) {
    let out = MAILBOX + 0x2000;
    h.qt.memset(out, 96, 0xee);
    let st = obj_cmd_out(h, QHCA_CMD_QUERY_CTX, [uar as u64, 0, 0, 0, 0], out, 96);
    let b = h.qt.memread(out, 96);
    let c = CtxStats {
        db_accepted: get64(&b, 0),
        db_violations: get64(&b, 8),
        pkt_foreign: get64(&b, 16),
        rnr_retries: get64(&b, 24),
        odp_req_faults: get64(&b, 32),
        odp_resp_faults: get64(&b, 40),
        odp_fault_rnr_naks: get64(&b, 48),
        odp_invalidations: get64(&b, 56),
        ud_drop_qkey: get64(&b, 64),
        ud_drop_no_recv: get64(&b, 72),
        ud_drop_too_long: get64(&b, 80),
        ud_drop_fault: get64(&b, 88),
    };
    (st, c)
}

/// Connection parameters used by [`connect`].
#[derive(Clone, Copy, Debug)]
pub struct ConnParams {
    pub access: u32,
    pub path_mtu: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    /// RTR -> RTS `max_rd_atomic`; 0: not set (the device's 16).
    pub max_rd_atomic: u8,
    /// INIT -> RTR `max_dest_rd_atomic`; 0: not set (the device's 16).
    pub max_dest_rd_atomic: u8,
    /// INIT -> RTR address vector; `None`: not set (GID 0 to GID 0, this device).
    pub av: Option<AhAttr>,
}

impl Default for ConnParams {
    fn default() -> Self {
        ConnParams {
            access: QHCA_ACCESS_REMOTE_WRITE | QHCA_ACCESS_REMOTE_READ | QHCA_ACCESS_REMOTE_ATOMIC,
            path_mtu: 8,
            timeout: 8,
            retry_cnt: 3,
            rnr_retry: 3,
            min_rnr_timer: 1,
            max_rd_atomic: 0,
            max_dest_rd_atomic: 0,
            av: None,
        }
    }
}

/// RESET -> INIT -> RTR -> RTS towards `dest`, PSNs starting at `psn`.
pub fn bring_to_rts(h: &mut Hca, qp: &Qp, dest: u32, psn: u32, p: &ConnParams) {
    let st = modify_qp(
        h,
        qp.uar,
        qp.qpn,
        &QpAttr {
            mask: QHCA_QP_ATTR_STATE | QHCA_QP_ATTR_ACCESS,
            state: QHCA_QPS_INIT as u8,
            access: p.access,
            ..Default::default()
        },
    );
    assert_eq!(st, QHCA_CMD_OK, "QP {} RESET->INIT", qp.qpn);
    let st = modify_qp(
        h,
        qp.uar,
        qp.qpn,
        &QpAttr {
            mask: QHCA_QP_ATTR_STATE
                | QHCA_QP_ATTR_DEST_QPN
                | QHCA_QP_ATTR_RQ_PSN
                | QHCA_QP_ATTR_PATH_MTU
                | QHCA_QP_ATTR_MIN_RNR_TIMER
                | if p.max_dest_rd_atomic != 0 {
                    QHCA_QP_ATTR_MAX_DEST_RD_ATOMIC
                } else {
                    0
                }
                | if p.av.is_some() { QHCA_QP_ATTR_AV } else { 0 },
            state: QHCA_QPS_RTR as u8,
            dest_qpn: dest,
            rq_psn: psn,
            path_mtu: p.path_mtu,
            min_rnr_timer: p.min_rnr_timer,
            max_dest_rd_atomic: p.max_dest_rd_atomic,
            av: p.av.unwrap_or_default(),
            ..Default::default()
        },
    );
    assert_eq!(st, QHCA_CMD_OK, "QP {} INIT->RTR", qp.qpn);
    let st = modify_qp(
        h,
        qp.uar,
        qp.qpn,
        &QpAttr {
            mask: QHCA_QP_ATTR_STATE
                | QHCA_QP_ATTR_SQ_PSN
                | QHCA_QP_ATTR_TIMEOUT
                | QHCA_QP_ATTR_RETRY_CNT
                | QHCA_QP_ATTR_RNR_RETRY
                | if p.max_rd_atomic != 0 {
                    QHCA_QP_ATTR_MAX_RD_ATOMIC
                } else {
                    0
                },
            state: QHCA_QPS_RTS as u8,
            sq_psn: psn,
            timeout: p.timeout,
            retry_cnt: p.retry_cnt,
            rnr_retry: p.rnr_retry,
            max_rd_atomic: p.max_rd_atomic,
            ..Default::default()
        },
    );
    assert_eq!(st, QHCA_CMD_OK, "QP {} RTR->RTS", qp.qpn);
}

/// A send WQE, host side.
#[derive(Clone, Debug, Default)]
pub struct SendWr {
    pub wr_id: u64,
    pub opcode: u32,
    pub flags: u32,
    pub imm: u32,
    pub remote_addr: u64,
    pub rkey: u32,
    pub swap_add: u64,
    pub compare: u64,
    /// (addr, length, lkey)
    pub sges: Vec<(u64, u32, u32)>,
    pub inline: Option<Vec<u8>>,
}

impl SendWr {
    /// A signalled RDMA WRITE (`wr_id` 0x77) of `len` bytes at `src` (key `lkey`) to `dst`
    /// (key `rkey`).
    pub fn write(src: u64, len: u32, lkey: u32, dst: u64, rkey: u32) -> SendWr {
        SendWr {
            wr_id: 0x77,
            opcode: QHCA_WR_RDMA_WRITE,
            flags: QHCA_WQE_SIGNALED,
            remote_addr: dst,
            rkey,
            sges: vec![(src, len, lkey)],
            ..Default::default()
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        put64(&mut b, 0, self.wr_id);
        b[8] = self.opcode as u8;
        let mut flags = self.flags;
        if self.inline.is_some() {
            flags |= QHCA_WQE_INLINE;
        }
        b[9] = flags as u8;
        b[10] = self.sges.len() as u8;
        put32(&mut b, 12, self.imm);
        put32(
            &mut b,
            16,
            self.inline.as_ref().map_or(0, |d| d.len() as u32),
        );
        put64(&mut b, 32, self.remote_addr);
        put32(&mut b, 40, self.rkey);
        put64(&mut b, 48, self.swap_add);
        put64(&mut b, 56, self.compare);
        if let Some(d) = &self.inline {
            b.extend_from_slice(d);
        } else {
            for &(a, l, k) in &self.sges {
                let mut s = [0u8; 16];
                put64(&mut s, 0, a);
                put32(&mut s, 8, l);
                put32(&mut s, 12, k);
                b.extend_from_slice(&s);
            }
        }
        b
    }
}

impl Qp {
    pub fn sq_slot(&self, idx: u16) -> u64 {
        self.base + (((idx as u64) & ((1 << self.sq_log) - 1)) << self.sq_stride_log)
    }

    pub fn rq_slot(&self, idx: u16) -> u64 {
        self.base + self.rq_off + (((idx as u64) & ((1 << self.rq_log) - 1)) << self.rq_stride_log)
    }

    /// Writes raw WQE bytes at the SQ producer index without ringing.
    pub fn write_send_raw(&mut self, h: &mut Hca, bytes: &[u8]) {
        let a = self.sq_slot(self.sq_pi);
        h.qt.memwrite(a, bytes);
        self.sq_pi = self.sq_pi.wrapping_add(1);
    }

    pub fn ring_sq(&self, h: &mut Hca) {
        let w = DbWord::new(DbType::Sq, self.qpn, self.sq_pi as u32).raw();
        h.doorbell(self.uar, w);
    }

    pub fn ring_rq(&self, h: &mut Hca) {
        let w = DbWord::new(DbType::Rq, self.qpn, self.rq_pi as u32).raw();
        h.doorbell(self.uar, w);
    }

    pub fn post_send(&mut self, h: &mut Hca, wr: &SendWr) {
        let b = wr.encode();
        self.write_send_raw(h, &b);
        self.ring_sq(h);
    }

    pub fn post_recv(&mut self, h: &mut Hca, wr_id: u64, sges: &[(u64, u32, u32)]) {
        let a = self.rq_slot(self.rq_pi);
        h.qt.memwrite(a, &rwqe_bytes(wr_id, sges));
        self.rq_pi = self.rq_pi.wrapping_add(1);
        self.ring_rq(h);
    }
}

/// MAP_ODP of raw entries (addresses with their `QHCA_ODP_*` bits) of region `key` from
/// virtual page `first`, the entries in a buffer from `m`: the status.
pub fn map_odp_raw(h: &mut Hca, m: &mut Mem, uar: u32, key: u32, first: u64, e: &[u64]) -> u32 {
    let buf = m.alloc(h, (e.len() as u64 * 8).max(8));
    let bytes: Vec<u8> = e.iter().flat_map(|x| x.to_le_bytes()).collect();
    h.qt.memwrite(buf, &bytes);
    let in_ = [uar as u64, key as u64, first, e.len() as u64, buf];
    obj_cmd(h, QHCA_CMD_MAP_ODP, in_).0
}

/// MAP_ODP of `npages` pages of region `key` from `va` (page aligned) onto RAM at `ram`,
/// present and writable: the status.
pub fn map_odp(
    h: &mut Hca,
    m: &mut Mem,
    uar: u32,
    key: u32,
    va: u64,
    npages: u64,
    ram: u64,
) -> u32 {
    let bits = (QHCA_ODP_PRESENT | QHCA_ODP_WRITABLE) as u64;
    let e: Vec<u64> = (0..npages).map(|i| (ram + i * PAGE) | bits).collect();
    map_odp_raw(h, m, uar, key, va / PAGE, &e)
}

/// RESUME of the page fault `token` with `status` (`QHCA_RESUME_*`): the command's status.
pub fn resume(h: &mut Hca, uar: u32, token: u32, status: u32) -> u32 {
    let in_ = [uar as u64, token as u64, status as u64, 0, 0];
    obj_cmd(h, QHCA_CMD_RESUME, in_).0
}

/// MODIFY_QP of `qp` to `state` alone: the status.
pub fn qp_to_state(h: &mut Hca, qp: &Qp, state: u32) -> u32 {
    let a = QpAttr {
        mask: QHCA_QP_ATTR_STATE,
        state: state as u8,
        ..Default::default()
    };
    modify_qp(h, qp.uar, qp.qpn, &a)
}

/// A receive WQE (`struct qhca_rwqe` and its SGEs `(addr, length, lkey)`) as bytes.
pub fn rwqe_bytes(wr_id: u64, sges: &[(u64, u32, u32)]) -> Vec<u8> {
    let mut b = vec![0u8; 16];
    put64(&mut b, 0, wr_id);
    put32(&mut b, 8, sges.len() as u32);
    for &(a, l, k) in sges {
        let mut s = [0u8; 16];
        put64(&mut s, 0, a);
        put32(&mut s, 8, l);
        put32(&mut s, 12, k);
        b.extend_from_slice(&s);
    }
    b
}

/// The verbs world most tests start from: one context with a PD, two CQs and two QPs
/// connected to each other (QP a sends on `scq`, QP b receives on `rcq`).
pub struct Pair {
    pub m: Mem,
    pub uar: u32,
    pub pdn: u32,
    pub scq: Cq,
    pub rcq: Cq,
    pub a: Qp,
    pub b: Qp,
}

impl Pair {
    pub fn new(h: &mut Hca, p: &ConnParams) -> Pair {
        Self::with_caps(h, p, &QpCaps::default())
    }

    pub fn with_caps(h: &mut Hca, p: &ConnParams, caps: &QpCaps) -> Pair {
        let mut m = Mem::default();
        let (st, uar) = h.alloc_uar();
        assert_eq!(st, QHCA_CMD_OK);
        let uar = uar as u32;
        let (st, pdn) = alloc_pd(h, uar);
        assert_eq!(st, QHCA_CMD_OK);
        let (st, scq) = create_cq(h, &mut m, uar, 6);
        assert_eq!(st, QHCA_CMD_OK);
        let (st, rcq) = create_cq(h, &mut m, uar, 6);
        assert_eq!(st, QHCA_CMD_OK);
        let (st, a) = create_qp(h, &mut m, uar, pdn, scq.cqn, scq.cqn, caps);
        assert_eq!(st, QHCA_CMD_OK);
        let (st, b) = create_qp(h, &mut m, uar, pdn, rcq.cqn, rcq.cqn, caps);
        assert_eq!(st, QHCA_CMD_OK);
        bring_to_rts(h, &a, b.qpn, 0x100, p);
        bring_to_rts(h, &b, a.qpn, 0x100, p);
        Pair {
            m,
            uar,
            pdn,
            scq,
            rcq,
            a,
            b,
        }
    }

    /// A buffer of `len` bytes filled with `fill`, registered with `access`: (addr, key).
    pub fn buf(&mut self, h: &mut Hca, len: u64, fill: u8, access: u32) -> (u64, u32) {
        let a = self.m.alloc(h, len);
        h.qt.memset(a, len as usize, fill);
        let (st, key) = reg_mr(h, &mut self.m, self.uar, self.pdn, a, len, access);
        assert_eq!(st, QHCA_CMD_OK, "REG_MR");
        (a, key)
    }

    /// Both QPs back to RTS after an error, with fresh PSNs and empty queues.
    pub fn reconnect(&mut self, h: &mut Hca, p: &ConnParams, psn: u32) {
        reconnect(
            h,
            [&mut self.a, &mut self.b],
            [&mut self.scq, &mut self.rcq],
            p,
            psn,
        );
    }
}

/// Two QPs connected to each other back to RTS after an error (same QPNs, first PSN `psn`),
/// with empty queues, and whatever the flush left in their CQs drained.
pub fn reconnect(h: &mut Hca, qps: [&mut Qp; 2], cqs: [&mut Cq; 2], p: &ConnParams, psn: u32) {
    // The QP_ERR events first, so that they do not meet the commands' completions.
    take_events(h);
    let [a, b] = qps;
    for q in [&mut *a, &mut *b] {
        let st = qp_to_state(h, q, QHCA_QPS_RESET);
        assert_eq!(st, QHCA_CMD_OK, "QP {:#x} to RESET", q.qpn);
        q.sq_pi = 0;
        q.rq_pi = 0;
    }
    for cq in cqs {
        while cq.poll(h).is_some() {}
    }
    bring_to_rts(h, a, b.qpn, psn, p);
    bring_to_rts(h, b, a.qpn, psn, p);
}

/// Deterministic test pattern.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

/// Every event the device has posted so far (after letting it settle), consumed.
pub fn take_events(h: &mut Hca) -> Vec<qhca_eqe> {
    h.settle();
    let n = h.eq_pi().wrapping_sub(h.eq_ci);
    (0..n).map(|_| h.next_eqe()).collect()
}

/// `(type, data[0], data[1])` of events, for comparisons.
pub fn event_keys(ev: &[qhca_eqe]) -> Vec<(u32, u64, u64)> {
    ev.iter()
        .map(|e| (e.type_ as u32, e.data[0], e.data[1]))
        .collect()
}

/// A new context (doorbell page) with a PD, a CQ and an RC QP in INIT: uar, pdn, the CQ, the QP.
pub fn rc_qp_in_init(h: &mut Hca, m: &mut Mem) -> (u32, u32, Cq, Qp) {
    let uar = h.alloc_uar().1 as u32;
    let (_, pdn) = alloc_pd(h, uar);
    let (_, cq) = create_cq(h, m, uar, 6);
    let (st, qp) = create_qp(h, m, uar, pdn, cq.cqn, cq.cqn, &QpCaps::default());
    assert_eq!(st, QHCA_CMD_OK);
    let init = QpAttr {
        mask: QHCA_QP_ATTR_STATE,
        state: QHCA_QPS_INIT as u8,
        ..Default::default()
    };
    assert_eq!(modify_qp(h, uar, qp.qpn, &init), QHCA_CMD_OK);
    (uar, pdn, cq, qp)
}
