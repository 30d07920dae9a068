// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Shared receive queues (`qhca-abi.h`, "Shared receive queues"; IBA 10.2.9): RC and UD QPs
//! taking their receive WQEs from one SRQ in the order they come, with each WQE's data, QPN and
//! SRQ index in its CQE; the record of what was taken; an empty SRQ answered with RNR NAKs
//! until a post lets the retry in; the limit event, once; a QP in ERR flushing the WQE it holds
//! and saying QP_LAST_WQE; receive buffers checked against the SRQ's PD; and the commands,
//! doorbells and WQEs the device refuses.

use qhca_qtest::abi::*;
use qhca_qtest::port::port_gid;
use qhca_qtest::srq::*;
use qhca_qtest::ud::*;
use qhca_qtest::verbs::*;
use qhca_qtest::Hca;

const GUID: u64 = 0x0002_c903_0042_5151;
const QKEY: u32 = 0x1111_2222;
const LW: u32 = QHCA_ACCESS_LOCAL_WRITE;

fn start() -> Hca {
    let mut h = Hca::start(&format!("num-uars=8,node-guid={GUID:#x}"));
    h.bring_up(5, 6);
    h
}

/// One context: a PD, a send CQ, a receive CQ and an SRQ of 8 WQEs of 2 SGEs.
struct World {
    m: Mem,
    uar: u32,
    pdn: u32,
    scq: Cq,
    rcq: Cq,
    srq: Srq,
}

impl World {
    fn new(h: &mut Hca) -> World {
        // The context, its PD and CQs, as the UD tests have them.
        let Ud {
            mut m,
            uar,
            pdn,
            scq,
            rcq,
        } = Ud::new(h);
        let (st, srq) = create_srq(h, &mut m, uar, pdn, 3, 6, 2);
        assert_eq!(st, QHCA_CMD_OK, "CREATE_SRQ");
        World {
            m,
            uar,
            pdn,
            scq,
            rcq,
            srq,
        }
    }

    /// A buffer of `len` bytes filled with `fill`, registered in `pdn` for local write.
    fn buf_in(&mut self, h: &mut Hca, pdn: u32, len: u64, fill: u8) -> (u64, u32) {
        let a = self.m.alloc(h, len);
        h.qt.memset(a, len as usize, fill);
        let (st, key) = reg_mr(h, &mut self.m, self.uar, pdn, a, len, LW);
        assert_eq!(st, QHCA_CMD_OK, "REG_MR");
        (a, key)
    }

    fn buf(&mut self, h: &mut Hca, len: u64, fill: u8) -> (u64, u32) {
        let pdn = self.pdn;
        self.buf_in(h, pdn, len, fill)
    }

    /// An RC QP of `ty` on the SRQ, not yet out of RESET.
    fn qp_on_srq(&mut self, h: &mut Hca, ty: u32) -> Qp {
        let (st, q) = create_qp_on_srq(
            h,
            &mut self.m,
            self.uar,
            self.pdn,
            self.scq.cqn,
            self.rcq.cqn,
            &QpCaps::default(),
            ty,
            self.srq.srqn,
        );
        assert_eq!(st, QHCA_CMD_OK, "CREATE_QP on SRQ {:#x}", self.srq.srqn);
        q
    }

    /// A sender with its own queues connected to a receiver on the SRQ, both in RTS.
    fn rc_pair(&mut self, h: &mut Hca, p: &ConnParams) -> (Qp, Qp) {
        let (st, a) = create_qp(
            h,
            &mut self.m,
            self.uar,
            self.pdn,
            self.scq.cqn,
            self.scq.cqn,
            &QpCaps::default(),
        );
        assert_eq!(st, QHCA_CMD_OK);
        let b = self.qp_on_srq(h, QHCA_QPT_RC);
        bring_to_rts(h, &a, b.qpn, 0x100, p);
        bring_to_rts(h, &b, a.qpn, 0x100, p);
        (a, b)
    }
}

fn send(wr_id: u64, src: u64, len: u32, lkey: u32) -> SendWr {
    SendWr {
        wr_id,
        opcode: QHCA_WR_SEND,
        flags: QHCA_WQE_SIGNALED,
        sges: vec![(src, len, lkey)],
        ..Default::default()
    }
}

fn to_err(h: &mut Hca, q: &Qp) {
    assert_eq!(
        qp_to_state(h, q, QHCA_QPS_ERR),
        QHCA_CMD_OK,
        "QP {:#x} to ERR",
        q.qpn
    );
}

#[test]
fn rc_qps_take_wqes_from_one_srq_in_the_order_messages_come() {
    let mut h = start();
    assert_ne!(h.reg(QHCA_REG_CAPS_LO) & QHCA_CAP_SRQ, 0, "QHCA_CAP_SRQ");
    let mut w = World::new(&mut h);
    let p = ConnParams::default();
    let (mut a1, b1) = w.rc_pair(&mut h, &p);
    let (mut a2, b2) = w.rc_pair(&mut h, &p);
    let (src, lkey) = w.buf(&mut h, PAGE, 0);
    let (dst, dkey) = w.buf(&mut h, PAGE, 0xee);
    // Four WQEs, one buffer of 256 bytes each, the second in two SGEs.
    for i in 0..4u64 {
        let at = dst + 256 * i;
        if i == 1 {
            w.srq
                .post_recv(&mut h, 100 + i, &[(at, 100, dkey), (at + 100, 156, dkey)]);
        } else {
            w.srq.post_recv(&mut h, 100 + i, &[(at, 256, dkey)]);
        }
    }
    assert_eq!(
        w.srq.query(&mut h),
        (QHCA_CMD_OK, 0, 4),
        "QUERY_SRQ: posted"
    );
    for i in 0..4u16 {
        let (a, b) = if i % 2 == 0 {
            (&mut a1, &b1)
        } else {
            (&mut a2, &b2)
        };
        let len = 150 + 20 * i as u32;
        let data = pattern(len as usize, i as u8);
        h.qt.memwrite(src, &data);
        a.post_send(&mut h, &send(0x10 + i as u64, src, len, lkey));
        let c = w.rcq.wait(&mut h);
        assert_eq!(
            (
                c.wr_id,
                c.status as u32,
                c.opcode as u32,
                c.qpn,
                c.wqe_index,
                c.byte_len
            ),
            (100 + i as u64, QHCA_WC_SUCCESS, QHCA_WC_RECV, b.qpn, i, len),
            "message {i}: the SRQ's next WQE, on the receiving QP: {c:?}"
        );
        let at = dst + 256 * i as u64;
        assert_eq!(h.qt.memread(at, len as usize), data, "message {i}'s data");
        assert_eq!(h.qt.memread(at + len as u64, 1), [0xee], "past message {i}");
        let s = w.scq.wait(&mut h);
        assert_eq!(
            (s.wr_id, s.status as u32),
            (0x10 + i as u64, QHCA_WC_SUCCESS)
        );
        assert_eq!(
            w.srq.ci(&mut h),
            i as u32 + 1,
            "the record after message {i}"
        );
    }
    assert_eq!(w.srq.query(&mut h), (QHCA_CMD_OK, 0, 0), "nothing left");
    // The ring wraps: slot 0 again, for a fifth message.
    for i in 4..9u64 {
        w.srq.post_recv(&mut h, 100 + i, &[(dst, 256, dkey)]);
    }
    a1.post_send(&mut h, &send(0x20, src, 8, lkey));
    let c = w.rcq.wait(&mut h);
    assert_eq!((c.wr_id, c.wqe_index, c.qpn), (104, 4, b1.qpn), "{c:?}");
    w.scq.wait(&mut h);
    assert_eq!(h.counters().guest_errors, 0);
}

#[test]
fn an_empty_srq_is_answered_with_rnr_naks_until_a_post_lets_the_retry_in() {
    let mut h = start();
    let mut w = World::new(&mut h);
    let p = ConnParams {
        rnr_retry: 7,
        ..Default::default()
    };
    let (mut a, b) = w.rc_pair(&mut h, &p);
    let (src, lkey) = w.buf(&mut h, PAGE, 0);
    let (dst, dkey) = w.buf(&mut h, PAGE, 0xee);
    let data = pattern(300, 5);
    h.qt.memwrite(src, &data);
    a.post_send(&mut h, &send(0x31, src, 300, lkey));
    h.settle();
    h.qt.clock_step(50_000_000);
    w.rcq.expect_empty(&mut h);
    w.scq.expect_empty(&mut h);
    let (st, stats) = query_ctx_stats(&mut h, w.uar);
    assert_eq!(st, QHCA_CMD_OK);
    assert!(
        stats.rnr_retries > 0,
        "RNR NAKs while the SRQ is empty: {stats:?}"
    );

    w.srq.post_recv(&mut h, 0x41, &[(dst, 512, dkey)]);
    let c = w.rcq.wait(&mut h);
    assert_eq!(
        (c.wr_id, c.status as u32, c.qpn, c.byte_len),
        (0x41, QHCA_WC_SUCCESS, b.qpn, 300),
        "{c:?}"
    );
    assert_eq!(h.qt.memread(dst, 300), data);
    let s = w.scq.wait(&mut h);
    assert_eq!((s.wr_id, s.status as u32), (0x31, QHCA_WC_SUCCESS));
}

#[test]
fn the_limit_event_comes_once_when_fewer_wqes_than_the_limit_are_left() {
    let mut h = start();
    let mut w = World::new(&mut h);
    let (mut a, _b) = w.rc_pair(&mut h, &ConnParams::default());
    let (src, lkey) = w.buf(&mut h, PAGE, 0);
    let (dst, dkey) = w.buf(&mut h, PAGE, 0);
    for i in 0..4u64 {
        w.srq.post_recv(&mut h, i, &[(dst + 64 * i, 64, dkey)]);
    }
    assert_eq!(
        w.srq.modify(&mut h, 9),
        QHCA_CMD_BAD_PARAM,
        "limit > max_wr"
    );
    assert_eq!(w.srq.modify(&mut h, 3), QHCA_CMD_OK);
    assert_eq!(w.srq.query(&mut h), (QHCA_CMD_OK, 3, 4));
    let mut one = |h: &mut Hca, w: &mut World, i: u64| {
        a.post_send(h, &send(i, src, 16, lkey));
        assert_eq!(w.rcq.wait(h).wr_id, i);
        w.scq.wait(h);
        event_keys(&take_events(h))
    };
    assert_eq!(
        one(&mut h, &mut w, 0),
        vec![],
        "3 left: not below the limit"
    );
    assert_eq!(
        one(&mut h, &mut w, 1),
        vec![(QHCA_EQE_SRQ_LIMIT, w.srq.srqn as u64, w.uar as u64)],
        "2 left: the event"
    );
    assert_eq!(w.srq.query(&mut h), (QHCA_CMD_OK, 0, 2), "disarmed");
    assert_eq!(one(&mut h, &mut w, 2), vec![], "once only");
    // Armed again above what is left: the next WQE taken says so.
    assert_eq!(w.srq.modify(&mut h, 4), QHCA_CMD_OK);
    assert_eq!(
        one(&mut h, &mut w, 3),
        vec![(QHCA_EQE_SRQ_LIMIT, w.srq.srqn as u64, w.uar as u64)]
    );
}

#[test]
fn a_qp_in_err_flushes_the_wqe_it_holds_and_says_last_wqe_once() {
    let mut h = start();
    let mut w = World::new(&mut h);
    // A UD QP on the SRQ, and a sender with its own queues.
    let r = w.qp_on_srq(&mut h, QHCA_QPT_UD);
    ud_to_rts(&mut h, &r, QKEY, 0);
    let (st, mut s) = create_qp_typed(
        &mut h,
        &mut w.m,
        w.uar,
        w.pdn,
        w.scq.cqn,
        w.scq.cqn,
        &QpCaps::default(),
        QHCA_QPT_UD,
    );
    assert_eq!(st, QHCA_CMD_OK);
    ud_to_rts(&mut h, &s, QKEY, 0);
    let (st, ah) = create_ah(&mut h, w.uar, w.pdn, &AhAttr::to(port_gid(GUID)));
    assert_eq!(st, QHCA_CMD_OK);
    let (src, lkey) = w.buf(&mut h, PAGE, 0);
    let (dst, dkey) = w.buf(&mut h, PAGE, 0xee);
    // The first WQE is too small for GRH + 100 bytes; the second would do.
    w.srq.post_recv(&mut h, 0x71, &[(dst, 64, dkey)]);
    w.srq.post_recv(&mut h, 0x72, &[(dst + 1024, 1024, dkey)]);
    for n in 1..=2u64 {
        s.post_ud(&mut h, &UdWr::send(n, ah, r.qpn, QKEY, &[(src, 100, lkey)]));
        w.scq.wait(&mut h);
        h.settle();
        let (_, st) = query_ctx_stats(&mut h, w.uar);
        assert_eq!(st.ud_drop_too_long, n, "datagram {n} dropped");
    }
    w.rcq.expect_empty(&mut h);
    // The QP took the first WQE once and kept it for its next datagram.
    assert_eq!(w.srq.ci(&mut h), 1, "one WQE taken");
    assert_eq!(w.srq.query(&mut h), (QHCA_CMD_OK, 0, 1));
    assert_eq!(h.qt.memread(dst, 64), [0xee; 64], "nothing written");

    take_events(&mut h);
    to_err(&mut h, &r);
    let c = w.rcq.wait(&mut h);
    assert_eq!(
        (
            c.wr_id,
            c.status as u32,
            c.opcode as u32,
            c.qpn,
            c.wqe_index
        ),
        (0x71, QHCA_WC_WR_FLUSH_ERR, QHCA_WC_RECV, r.qpn, 0),
        "the held WQE flushed: {c:?}"
    );
    assert_eq!(
        event_keys(&take_events(&mut h)),
        vec![(QHCA_EQE_QP_LAST_WQE, r.qpn as u64, w.uar as u64)]
    );
    w.rcq.expect_empty(&mut h);
    assert_eq!(
        w.srq.query(&mut h),
        (QHCA_CMD_OK, 0, 1),
        "the SRQ keeps the rest"
    );
    // A doorbell on the QP in ERR flushes nothing more and says nothing more.
    s.post_ud(&mut h, &UdWr::send(3, ah, r.qpn, QKEY, &[(src, 100, lkey)]));
    w.scq.wait(&mut h);
    assert!(take_events(&mut h).is_empty());

    // An RC QP on the SRQ that holds nothing: the event alone. Then RESET and back, and ERR
    // again says it again.
    let (_a, b) = w.rc_pair(&mut h, &ConnParams::default());
    to_err(&mut h, &b);
    assert_eq!(
        event_keys(&take_events(&mut h)),
        vec![(QHCA_EQE_QP_LAST_WQE, b.qpn as u64, w.uar as u64)]
    );
    w.rcq.expect_empty(&mut h);

    // The SRQ is in use until its QPs go.
    assert_eq!(w.srq.destroy(&mut h), QHCA_CMD_BAD_STATE);
    for q in [&r, &b] {
        assert_eq!(
            destroy(&mut h, QHCA_CMD_DESTROY_QP, w.uar, q.qpn),
            QHCA_CMD_OK
        );
    }
    assert_eq!(w.srq.destroy(&mut h), QHCA_CMD_OK);
    assert_eq!(w.srq.query(&mut h).0, QHCA_CMD_BAD_RESOURCE, "gone");
}

#[test]
fn receive_buffers_are_checked_against_the_srqs_pd_and_bad_wqes_fail_the_qp() {
    let mut h = start();
    let mut w = World::new(&mut h);
    // The SRQ in a PD of its own; the QPs in the context's first.
    let (st, pd2) = alloc_pd(&mut h, w.uar);
    assert_eq!(st, QHCA_CMD_OK);
    assert_eq!(w.srq.destroy(&mut h), QHCA_CMD_OK);
    let (st, srq) = create_srq(&mut h, &mut w.m, w.uar, pd2, 3, 6, 2);
    assert_eq!(st, QHCA_CMD_OK);
    w.srq = srq;
    let p = ConnParams::default();
    let (mut a, b) = w.rc_pair(&mut h, &p);
    let (src, lkey) = w.buf(&mut h, PAGE, 0);
    let (dst2, key2) = w.buf_in(&mut h, pd2, PAGE, 0xee);
    let (dst1, key1) = w.buf(&mut h, PAGE, 0xee);
    w.srq.post_recv(&mut h, 0x81, &[(dst2, 64, key2)]);
    a.post_send(&mut h, &send(1, src, 32, lkey));
    let c = w.rcq.wait(&mut h);
    assert_eq!(
        (c.wr_id, c.status as u32),
        (0x81, QHCA_WC_SUCCESS),
        "SRQ's PD: {c:?}"
    );
    w.scq.wait(&mut h);
    // A buffer of the QP's PD is not the SRQ's.
    w.srq.post_recv(&mut h, 0x82, &[(dst1, 64, key1)]);
    a.post_send(&mut h, &send(2, src, 32, lkey));
    let c = w.rcq.wait(&mut h);
    assert_eq!(
        (c.wr_id, c.status as u32, c.qpn),
        (0x82, QHCA_WC_LOC_PROT_ERR, b.qpn),
        "the QP's PD: {c:?}"
    );
    assert_eq!(h.qt.memread(dst1, 32), [0xee; 32], "nothing written");
    let s = w.scq.wait(&mut h);
    assert_eq!((s.wr_id, s.status as u32), (2, QHCA_WC_REM_OP_ERR), "{s:?}");

    // A WQE with more SGEs than the SRQ's max_sge: the QP that takes it fails.
    take_events(&mut h);
    let (mut a, b) = w.rc_pair(&mut h, &p);
    let sges = [(dst2, 8, key2); 3];
    w.srq.post_recv(&mut h, 0x83, &sges);
    a.post_send(&mut h, &send(3, src, 8, lkey));
    let c = w.rcq.wait(&mut h);
    assert_eq!(
        (c.wr_id, c.status as u32, c.qpn, c.wqe_index),
        (0x83, QHCA_WC_LOC_QP_OP_ERR, b.qpn, 2),
        "{c:?}"
    );
    assert_eq!(w.srq.ci(&mut h), 3, "taken all the same");
    let ev = event_keys(&take_events(&mut h));
    assert!(
        ev.contains(&(QHCA_EQE_QP_ERR, b.qpn as u64, w.uar as u64))
            && ev.contains(&(QHCA_EQE_QP_LAST_WQE, b.qpn as u64, w.uar as u64)),
        "{ev:?}"
    );
    h.alive();
}

#[test]
fn srq_commands_and_doorbells_are_checked() {
    let mut h = start();
    let mut w = World::new(&mut h);
    let (uar, pdn) = (w.uar, w.pdn);
    let other = h.alloc_uar().1 as u32;
    let (_, other_pd) = alloc_pd(&mut h, other);
    let bad = |h: &mut Hca, b: [u8; 40], want: u32, what: &str| {
        let (st, _) = obj_cmd(h, QHCA_CMD_CREATE_SRQ, in_words(&b));
        assert_eq!(st, want, "CREATE_SRQ: {what}");
    };
    let ring = w.m.alloc(&mut h, PAGE);
    let list = w.m.page_list(&mut h, ring, 1);
    let ok = create_srq_bytes(uar, pdn, 3, 6, 2, 1, list);
    for (at, v, what) in [
        (8, 16, "2^16 WQEs"),
        (9, 4, "stride below 32 bytes"),
        (9, 10, "stride above 512 bytes"),
        (10, 4, "4 SGEs in 64 bytes"),
        (12, 2, "npages"),
        (24, 1, "reserved"),
    ] {
        let mut b = ok;
        b[at] = v;
        bad(&mut h, b, QHCA_CMD_BAD_PARAM, what);
    }
    bad(
        &mut h,
        create_srq_bytes(uar, other_pd, 3, 6, 2, 1, list),
        QHCA_CMD_BAD_RESOURCE,
        "another context's PD",
    );
    let mut c = h.cmd(QHCA_CMD_ALLOC_PD);
    c.in_[0] = uar as u64;
    c.in_ext = w.srq.srqn;
    h.expect_status(&c, QHCA_CMD_BAD_PARAM);

    // Names: never 0, the slot below QHCA_SRQ_INDEX_BITS, a new one for the same slot.
    let first = w.srq.srqn;
    assert_ne!(first >> QHCA_SRQ_INDEX_BITS, 0, "generation: {first:#x}");
    assert_eq!(w.srq.destroy(&mut h), QHCA_CMD_OK);
    assert_eq!(w.srq.destroy(&mut h), QHCA_CMD_BAD_RESOURCE, "twice");
    let (st, again) = create_srq(&mut h, &mut w.m, uar, pdn, 3, 6, 2);
    assert_eq!(st, QHCA_CMD_OK);
    assert_ne!(again.srqn, first, "a destroyed SRQ's number names nothing");
    w.srq = again;
    assert_eq!(dealloc(&mut h, uar, pdn), QHCA_CMD_BAD_STATE, "PD in use");

    // CREATE_QP on an SRQ: RC or UD, no receive queue of its own, an SRQ of its context.
    let caps = QpCaps::default();
    let (st, _) = create_qp_on_srq(
        &mut h,
        &mut w.m,
        uar,
        pdn,
        w.scq.cqn,
        w.rcq.cqn,
        &caps,
        QHCA_QPT_RC,
        first,
    );
    assert_eq!(st, QHCA_CMD_BAD_RESOURCE, "a destroyed SRQ");
    let oc = create_cq(&mut h, &mut w.m, other, 6).1;
    let (st, _) = create_qp_on_srq(
        &mut h,
        &mut w.m,
        other,
        other_pd,
        oc.cqn,
        oc.cqn,
        &caps,
        QHCA_QPT_RC,
        w.srq.srqn,
    );
    assert_eq!(st, QHCA_CMD_BAD_RESOURCE, "another context's SRQ");
    let (_, n) = qp_layout(&caps);
    let base = w.m.alloc(&mut h, n * PAGE);
    let list = w.m.page_list(&mut h, base, n);
    let mut c = h.cmd(QHCA_CMD_CREATE_QP);
    c.in_ = in_words(&create_qp_bytes(
        uar, pdn, w.scq.cqn, w.rcq.cqn, &caps, n as u32, list,
    ));
    c.in_ext = w.srq.srqn;
    h.expect_status(&c, QHCA_CMD_BAD_PARAM);

    // Doorbells: an SRQ of another context, more WQEs than slots, the RQ of a QP on an SRQ.
    let q = w.qp_on_srq(&mut h, QHCA_QPT_RC);
    let before = h.counters();
    let mut o = w.srq;
    o.uar = other;
    o.pi = 1;
    o.ring(&mut h);
    let mut big = w.srq;
    big.pi = 9;
    big.ring(&mut h);
    let mut rq = q;
    rq.rq_pi = 1;
    rq.ring_rq(&mut h);
    let after = h.counters();
    assert_eq!(after.db_violations, before.db_violations + 1, "foreign SRQ");
    assert_eq!(after.guest_errors, before.guest_errors + 2, "index, RQ");
    assert_eq!(w.srq.query(&mut h), (QHCA_CMD_OK, 0, 0), "nothing posted");

    // Freeing the context takes its QPs, then its SRQs.
    assert_eq!(h.free_uar(uar as u64), QHCA_CMD_OK);
    assert_eq!(h.reg(QHCA_REG_NUM_QP), 0);
    h.alive();
}

fn dealloc(h: &mut Hca, uar: u32, pdn: u32) -> u32 {
    destroy(h, QHCA_CMD_DEALLOC_PD, uar, pdn)
}

/// A SEND into an on-demand buffer of an SRQ WQE: the QP that took the WQE keeps it through
/// the fault, and the retry lands in it (not in the next WQE).
#[test]
fn a_receive_buffer_fault_keeps_the_srq_wqe_with_its_qp() {
    const VA: u64 = 0x7f00_0000_0000;
    let mut h = start();
    let mut w = World::new(&mut h);
    let p = ConnParams {
        rnr_retry: 7,
        ..Default::default()
    };
    let (mut a, b) = w.rc_pair(&mut h, &p);
    let len = 5000u64;
    let (src, lkey) = w.buf(&mut h, 2 * PAGE, 0);
    let data = pattern(len as usize, 3);
    h.qt.memwrite(src, &data);
    let b_odp = reg_mr_bytes(w.uar, w.pdn, VA, 2 * PAGE, LW | QHCA_ACCESS_ON_DEMAND, 0, 0);
    let (st, key) = obj_cmd(&mut h, QHCA_CMD_REG_MR, in_words(&b_odp));
    assert_eq!(st, QHCA_CMD_OK);
    let (other, okey) = w.buf(&mut h, 2 * PAGE, 0xee);
    w.srq
        .post_recv(&mut h, 0x91, &[(VA, 2 * PAGE as u32, key as u32)]);
    w.srq
        .post_recv(&mut h, 0x92, &[(other, 2 * PAGE as u32, okey)]);
    a.post_send(&mut h, &send(1, src, len as u32, lkey));
    let ev = take_events(&mut h);
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0].type_ as u32, QHCA_EQE_PAGE_FAULT, "{ev:?}");
    assert_eq!(
        (ev[0].data[1] >> 32) as u32,
        b.qpn,
        "the receiving QP faults"
    );
    assert_eq!(w.srq.ci(&mut h), 1, "one WQE taken");
    // The retries while the fault is served take nothing more.
    h.qt.clock_step(20_000_000);
    h.settle();
    assert_eq!(w.srq.ci(&mut h), 1, "still one");
    w.rcq.expect_empty(&mut h);

    let dst = w.m.alloc(&mut h, 2 * PAGE);
    let st = map_odp(&mut h, &mut w.m, w.uar, key as u32, VA, 2, dst);
    assert_eq!(st, QHCA_CMD_OK, "MAP_ODP");
    let st = resume(&mut h, w.uar, ev[0].token, QHCA_RESUME_OK);
    assert_eq!(st, QHCA_CMD_OK, "RESUME");
    let mut c = None;
    for _ in 0..20 {
        if h.poll(|h| {
            c = w.rcq.poll(h);
            c.is_some()
        }) {
            break;
        }
    }
    let c = c.expect("the message after RESUME");
    assert_eq!(
        (c.wr_id, c.status as u32, c.wqe_index, c.byte_len),
        (0x91, QHCA_WC_SUCCESS, 0, len as u32),
        "{c:?}"
    );
    assert_eq!(h.qt.memread(dst, len as usize), data);
    assert_eq!(h.qt.memread(other, 8), [0xee; 8], "the next WQE untouched");
    assert_eq!(w.srq.query(&mut h), (QHCA_CMD_OK, 0, 1));
}
