// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! RESIZE_CQ: a CQ moved to a new ring, larger or smaller, with CQEs not taken yet, keeps every
//! one of them in order and goes on at the consumer's index through wraps of the new ring; an
//! armed CQ stays armed; a ring too small for what is pending, a CQ in error and malformed
//! commands are refused and change nothing.

use qhca_qtest::abi::*;
use qhca_qtest::verbs::*;
use qhca_qtest::Hca;

const RW: u32 = QHCA_ACCESS_LOCAL_WRITE | QHCA_ACCESS_REMOTE_WRITE | QHCA_ACCESS_REMOTE_READ;

struct World {
    h: Hca,
    p: Pair,
    /// A signalled 8-byte RDMA WRITE from QP a (its CQE on `p.scq`), `wr_id` to be set.
    w: SendWr,
    next_id: u64,
}

fn setup() -> World {
    let mut h = Hca::start("num-uars=8");
    h.bring_up(5, 6);
    let mut p = Pair::new(&mut h, &ConnParams::default());
    let (src, lkey) = p.buf(&mut h, 4096, 1, QHCA_ACCESS_LOCAL_WRITE);
    let (dst, rkey) = p.buf(&mut h, 4096, 0, RW);
    let w = SendWr {
        opcode: QHCA_WR_RDMA_WRITE,
        flags: QHCA_WQE_SIGNALED,
        remote_addr: dst,
        rkey,
        sges: vec![(src, 8, lkey)],
        ..Default::default()
    };
    World {
        h,
        p,
        w,
        next_id: 0x100,
    }
}

impl World {
    /// Posts `n` WRITEs and lets them complete (their CQEs not taken): their wr_ids. A few at
    /// a time, so that the 16-slot SQ never overflows.
    fn complete(&mut self, n: usize) -> Vec<u64> {
        let ids: Vec<u64> = (0..n as u64).map(|i| self.next_id + i).collect();
        self.next_id += n as u64;
        for chunk in ids.chunks(8) {
            for &id in chunk {
                let wr = SendWr {
                    wr_id: id,
                    ..self.w.clone()
                };
                self.p.a.post_send(&mut self.h, &wr);
            }
            self.h.settle();
        }
        ids
    }

    /// Takes `n` CQEs that must be there: their wr_ids.
    fn take(&mut self, n: usize) -> Vec<u64> {
        (0..n)
            .map(|_| {
                let c = self.p.scq.poll(&mut self.h).expect("a CQE");
                assert_eq!(
                    (c.opcode as u32, c.status as u32, c.qpn),
                    (QHCA_WC_RDMA_WRITE, QHCA_WC_SUCCESS, self.p.a.qpn),
                    "CQE {c:?}"
                );
                c.wr_id
            })
            .collect()
    }

    /// A fresh ring of 2^log entries for the send CQ: its address, pages and page list.
    fn ring(&mut self, log: u32) -> (u64, u64, u64) {
        let bytes = cq_bytes(log);
        let base = self.p.m.alloc(&mut self.h, bytes);
        // Garbage that must not read as CQEs: the device initialises every slot.
        self.h.qt.memset(base, bytes as usize, 0xa5);
        let n = bytes.div_ceil(4096);
        let list = self.p.m.page_list(&mut self.h, base, n);
        (base, n, list)
    }

    /// RESIZE_CQ of the send CQ into a fresh ring of 2^log entries: the status and the CQEs
    /// moved; on success the test's CQ polls the new ring.
    fn resize(&mut self, log: u32) -> (u32, u64) {
        let (base, n, list) = self.ring(log);
        let cq = self.p.scq;
        let (st, moved) = obj_cmd(
            &mut self.h,
            QHCA_CMD_RESIZE_CQ,
            [cq.uar as u64, cq.cqn as u64, log as u64, n, list],
        );
        if st == QHCA_CMD_OK {
            self.p.scq.base = base;
            self.p.scq.log = log;
        }
        (st, moved)
    }
}

#[test]
fn resize_keeps_pending_cqes_and_goes_on_through_wraps() {
    let mut w = setup();
    // 10 CQEs, 3 taken: 7 pending, moved into a ring of 8 (smaller than the 64 it had).
    let ids = w.complete(10);
    assert_eq!(w.take(3), ids[..3]);
    assert_eq!(w.resize(3), (QHCA_CMD_OK, 7));
    assert_eq!(
        w.h.qt.readl(w.p.scq.base + (32 << 3)),
        3,
        "the new record holds the consumer index"
    );
    assert_eq!(w.take(7), ids[3..], "pending CQEs in order in the new ring");
    assert!(w.p.scq.poll(&mut w.h).is_none(), "garbage read as a CQE");
    // Round after round through the 8-entry ring: 6 at a time, so slots and passes shift.
    for _ in 0..10 {
        let ids = w.complete(6);
        assert_eq!(w.take(6), ids);
        assert!(w.p.scq.poll(&mut w.h).is_none());
    }
    // Full (8 pending) into a larger ring, then the ring is filled past the old size.
    let ids = w.complete(8);
    assert_eq!(w.resize(5), (QHCA_CMD_OK, 8));
    let more = w.complete(20);
    assert_eq!(w.take(28), [ids, more].concat());
    // Empty into the smallest ring.
    assert_eq!(w.resize(1), (QHCA_CMD_OK, 0));
    for _ in 0..5 {
        let ids = w.complete(2);
        assert_eq!(w.take(2), ids);
    }
    assert!(w.p.scq.poll(&mut w.h).is_none());
    assert!(take_events(&mut w.h).is_empty(), "no CQ error, no event");
}

#[test]
fn resize_into_its_own_pages() {
    let mut w = setup();
    let ids = w.complete(40);
    assert_eq!(w.take(25), ids[..25]);
    // The same ring, named again: read whole before it is written.
    let cq = w.p.scq;
    let bytes = cq_bytes(cq.log);
    let n = bytes.div_ceil(4096);
    let list = w.p.m.page_list(&mut w.h, cq.base, n);
    let (st, moved) = obj_cmd(
        &mut w.h,
        QHCA_CMD_RESIZE_CQ,
        [cq.uar as u64, cq.cqn as u64, cq.log as u64, n, list],
    );
    assert_eq!((st, moved), (QHCA_CMD_OK, 15));
    assert_eq!(w.take(15), ids[25..]);
    let ids = w.complete(64);
    assert_eq!(w.take(64), ids);
}

#[test]
fn an_armed_cq_stays_armed() {
    let mut w = setup();
    w.p.scq.arm(&mut w.h);
    w.h.settle();
    assert_eq!(w.resize(4).0, QHCA_CMD_OK);
    assert!(take_events(&mut w.h).is_empty());
    let ids = w.complete(1);
    let ev = event_keys(&take_events(&mut w.h));
    assert_eq!(
        ev,
        vec![(QHCA_EQE_CQ_COMP, w.p.scq.cqn as u64, w.p.uar as u64)]
    );
    assert_eq!(w.take(1), ids);
}

#[test]
fn refusals_change_nothing() {
    let mut w = setup();
    let ids = w.complete(7);
    let cq = w.p.scq;
    // Too small for the 7 pending.
    assert_eq!(w.resize(2).0, QHCA_CMD_BAD_PARAM);
    // Sizes and page counts this device does not take.
    let (_, n, list) = w.ring(3);
    for (log, npages) in [(0, 1), (17, 1025), (3, n + 1), (3, 0), (u64::MAX, n)] {
        let (st, _) = obj_cmd(
            &mut w.h,
            QHCA_CMD_RESIZE_CQ,
            [cq.uar as u64, cq.cqn as u64, log, npages, list],
        );
        assert_eq!(st, QHCA_CMD_BAD_PARAM, "log {log} npages {npages}");
    }
    // Another context's, a CQN that is none, one out of range.
    let (st, other) = w.h.alloc_uar();
    assert_eq!(st, QHCA_CMD_OK);
    for (uar, cqn) in [
        (other, cq.cqn as u64),
        (cq.uar as u64, 1000),
        (cq.uar as u64, 1 << 32),
    ] {
        let (st, _) = obj_cmd(&mut w.h, QHCA_CMD_RESIZE_CQ, [uar, cqn, 3, n, list]);
        assert_eq!(st, QHCA_CMD_BAD_RESOURCE, "uar {uar} cqn {cqn}");
    }
    // The old ring is untouched and still the CQ's.
    assert_eq!(w.take(7), ids);
    let ids = w.complete(3);
    assert_eq!(w.take(3), ids);

    // A CQ in error stays where it is: a 2-entry CQ overrun.
    let (_, small) = create_cq(&mut w.h, &mut w.p.m, w.p.uar, 1);
    let caps = QpCaps::default();
    let (_, mut x) = create_qp(
        &mut w.h, &mut w.p.m, w.p.uar, w.p.pdn, small.cqn, small.cqn, &caps,
    );
    let (_, y) = create_qp(
        &mut w.h, &mut w.p.m, w.p.uar, w.p.pdn, small.cqn, small.cqn, &caps,
    );
    bring_to_rts(&mut w.h, &x, y.qpn, 0, &ConnParams::default());
    bring_to_rts(&mut w.h, &y, x.qpn, 0, &ConnParams::default());
    for id in 0..3 {
        let wr = SendWr {
            wr_id: id,
            ..w.w.clone()
        };
        x.post_send(&mut w.h, &wr);
    }
    let ev = event_keys(&take_events(&mut w.h));
    assert!(ev.contains(&(QHCA_EQE_CQ_ERR, small.cqn as u64, w.p.uar as u64)));
    let (_, n, list) = w.ring(4);
    let (st, _) = obj_cmd(
        &mut w.h,
        QHCA_CMD_RESIZE_CQ,
        [small.uar as u64, small.cqn as u64, 4, n, list],
    );
    assert_eq!(st, QHCA_CMD_BAD_STATE);
    w.h.alive();
}
