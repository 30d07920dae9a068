// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Unreliable datagram (IBA 9.8, 10.2.5): address handles, UD QPs and their states, datagrams
//! placed behind a GRH with the sender's QPN in the CQE, and what is dropped and counted --
//! a Q_Key that does not match, no receive WQE, a datagram larger than the WQE's buffers, a
//! destination that is no UD QP -- without a byte written. Many senders to one receiver and one
//! sender to many. (Datagrams between IPv4 GIDs and their GRH area: `port.rs`.)

use qhca_qtest::abi::*;
use qhca_qtest::port::query_port;
use qhca_qtest::ud::*;
use qhca_qtest::verbs::*;
use qhca_qtest::Hca;

const GUID: u64 = 0x0002_c903_0042_4242;
const QKEY: u32 = 0x1111_2222;
const FILL: u8 = 0xee;

fn start() -> Hca {
    let mut h = Hca::start(&format!("num-uars=8,node-guid={GUID:#x}"));
    h.bring_up(5, 6);
    h
}

fn stats(h: &mut Hca, uar: u32) -> CtxStats {
    let (st, c) = query_ctx_stats(h, uar);
    assert_eq!(st, QHCA_CMD_OK, "QUERY_CTX");
    c
}

/// The signalled SEND's CQE on `u.scq`: success, from `qp`.
fn sent(h: &mut Hca, u: &mut Ud, qp: &Qp, wr_id: u64) {
    let c = u.scq.wait(h);
    assert_eq!(
        (c.wr_id, c.status as u32, c.opcode as u32, c.qpn),
        (wr_id, QHCA_WC_SUCCESS, QHCA_WC_SEND, qp.qpn),
        "send CQE {c:?}"
    );
}

#[test]
fn datagram_lands_byte_for_byte_behind_a_grh() {
    let mut h = start();
    let mut u = Ud::new(&mut h);
    let mut a = u.qp(&mut h, QKEY);
    let mut b = u.qp(&mut h, QKEY);
    let ah = u.ah(
        &mut h,
        &AhAttr {
            flow_label: 0xabcde,
            traffic_class: 0x5a,
            hop_limit: 7,
            sl: 3,
            ..AhAttr::to(port_gid(GUID))
        },
    );
    let data = pattern(1000, 9);
    let (src, lkey) = u.buf(&mut h, PAGE, 0);
    h.qt.memwrite(src, &data);
    // The receive buffers: GRH and the first 100 bytes in one, the rest in another, one byte
    // beyond what the datagram needs in each.
    let (dst, dkey) = u.buf(&mut h, 2 * PAGE, FILL);
    let (first, second) = (dst, dst + PAGE);
    b.post_recv(&mut h, 0x51, &[(first, 140, dkey), (second, 901, dkey)]);
    let mut wr = UdWr::send(0x5e, ah, b.qpn, QKEY, &[(src, 1000, lkey)]);
    wr.wr.opcode = QHCA_WR_SEND_WITH_IMM;
    wr.wr.imm = 0xfeed_f00d;
    a.post_ud(&mut h, &wr);
    sent(&mut h, &mut u, &a, 0x5e);

    let c = u.rcq.wait(&mut h);
    assert_eq!(
        (c.wr_id, c.status as u32, c.opcode as u32, c.qpn, c.src_qp),
        (0x51, QHCA_WC_SUCCESS, QHCA_WC_RECV, b.qpn, a.qpn),
        "receive CQE {c:?}"
    );
    assert_eq!(c.byte_len, 40 + 1000, "byte_len counts the GRH");
    assert_eq!(
        c.flags as u32,
        QHCA_CQE_WITH_GRH | QHCA_CQE_WITH_IMM,
        "{c:?}"
    );
    assert_eq!(c.imm, 0xfeed_f00d);
    assert_eq!(c.wqe_index, 0);

    let g = Grh::parse(&h.qt.memread(first, GRH));
    assert_eq!(
        g,
        Grh {
            version: 6,
            traffic_class: 0x5a,
            flow_label: 0xabcde,
            // UDP 8, BTH 12, DETH 8, ImmDt 4, 1000 bytes, ICRC 4.
            paylen: 8 + 12 + 8 + 4 + 1000 + 4,
            next_hdr: 17,
            hop_limit: 7,
            sgid: port_gid(GUID),
            dgid: port_gid(GUID),
        }
    );
    let mut got = h.qt.memread(first + GRH as u64, 100);
    got.extend(h.qt.memread(second, 900));
    assert_eq!(got, data, "the datagram, across both SGEs");
    assert_eq!(h.qt.memread(first + 140, 1), [FILL], "past the first SGE");
    assert_eq!(h.qt.memread(second + 900, 2), [FILL; 2], "past the message");

    // Inline, and empty: the GRH alone (PayLen of no payload, no ImmDt).
    b.post_recv(&mut h, 0x52, &[(dst, 64, dkey)]);
    b.post_recv(&mut h, 0x53, &[(dst + 100, 64, dkey)]);
    let mut wr = UdWr::send(0x5f, ah, b.qpn, QKEY, &[]);
    wr.wr.inline = Some(b"inline datagram".to_vec());
    a.post_ud(&mut h, &wr);
    sent(&mut h, &mut u, &a, 0x5f);
    let c = u.rcq.wait(&mut h);
    assert_eq!(
        (c.wr_id, c.byte_len, c.flags as u32),
        (0x52, 40 + 15, QHCA_CQE_WITH_GRH)
    );
    assert_eq!(h.qt.memread(dst + 40, 15), b"inline datagram");
    a.post_ud(&mut h, &UdWr::send(0x60, ah, b.qpn, QKEY, &[]));
    sent(&mut h, &mut u, &a, 0x60);
    let c = u.rcq.wait(&mut h);
    assert_eq!((c.wr_id, c.byte_len, c.src_qp), (0x53, 40, a.qpn));
    assert_eq!(
        Grh::parse(&h.qt.memread(dst + 100, GRH)).paylen,
        8 + 12 + 8 + 4
    );
    // A QP may send to itself.
    a.post_recv(&mut h, 0x54, &[(dst + 200, 64, dkey)]);
    a.post_ud(&mut h, &UdWr::send(0x61, ah, a.qpn, QKEY, &[]));
    sent(&mut h, &mut u, &a, 0x61);
    let c = u.rcq.wait(&mut h);
    assert_eq!((c.wr_id, c.qpn, c.src_qp), (0x54, a.qpn, a.qpn));
    u.rcq.expect_empty(&mut h);
}

#[test]
fn drops_are_counted_and_write_nothing() {
    let mut h = start();
    let mut u = Ud::new(&mut h);
    let mut a = u.qp(&mut h, QKEY);
    let mut b = u.qp(&mut h, QKEY);
    let ah = u.ah(&mut h, &AhAttr::to(port_gid(GUID)));
    let (src, lkey) = u.buf(&mut h, PAGE, 0x11);
    let (dst, dkey) = u.buf(&mut h, PAGE, FILL);
    let before = stats(&mut h, u.uar);
    assert_eq!(
        (
            before.ud_drop_qkey,
            before.ud_drop_no_recv,
            before.ud_drop_too_long,
            before.ud_drop_fault
        ),
        (0, 0, 0, 0)
    );

    // No receive WQE.
    a.post_ud(&mut h, &UdWr::send(1, ah, b.qpn, QKEY, &[(src, 100, lkey)]));
    sent(&mut h, &mut u, &a, 1);
    // One posted, 40 + 99 bytes: a wrong Q_Key, then 100 bytes, are dropped; the WQE stays.
    b.post_recv(&mut h, 0x77, &[(dst, 139, dkey)]);
    a.post_ud(
        &mut h,
        &UdWr::send(2, ah, b.qpn, QKEY ^ 1, &[(src, 10, lkey)]),
    );
    sent(&mut h, &mut u, &a, 2);
    a.post_ud(&mut h, &UdWr::send(3, ah, b.qpn, QKEY, &[(src, 100, lkey)]));
    sent(&mut h, &mut u, &a, 3);
    u.rcq.expect_empty(&mut h);
    assert!(
        h.qt.memread(dst, PAGE as usize).iter().all(|&x| x == FILL),
        "a dropped datagram wrote into the receive buffer"
    );
    let s = stats(&mut h, u.uar);
    assert_eq!(
        (
            s.ud_drop_no_recv,
            s.ud_drop_qkey,
            s.ud_drop_too_long,
            s.ud_drop_fault
        ),
        (1, 1, 1, 0),
        "{s:?}"
    );
    // The WQE that was passed over takes the next datagram that fits; the QP never left RTS.
    a.post_ud(&mut h, &UdWr::send(4, ah, b.qpn, QKEY, &[(src, 99, lkey)]));
    sent(&mut h, &mut u, &a, 4);
    let c = u.rcq.wait(&mut h);
    assert_eq!((c.wr_id, c.status as u32, c.byte_len), (0x77, 0, 139));
    assert_eq!(h.qt.memread(dst + 40, 99), vec![0x11; 99]);
    let (st, qa) = query_qp(&mut h, u.uar, b.qpn);
    assert_eq!((st, qa.state as u32), (QHCA_CMD_OK, QHCA_QPS_RTS));
}

#[test]
fn controlled_qkey_is_the_senders_own() {
    let mut h = start();
    let mut u = Ud::new(&mut h);
    let mut a = u.qp(&mut h, 0x4242);
    let mut b = u.qp(&mut h, 0x4242);
    let mut c = u.qp(&mut h, 0x4243);
    let ah = u.ah(&mut h, &AhAttr::to(port_gid(GUID)));
    let (dst, dkey) = u.buf(&mut h, PAGE, FILL);
    b.post_recv(&mut h, 0xb, &[(dst, 64, dkey)]);
    c.post_recv(&mut h, 0xc, &[(dst + 64, 64, dkey)]);
    // The high bit: the sending QP's Q_Key (0x4242) goes out whatever the rest says.
    for (wr_id, to) in [(1, b.qpn), (2, c.qpn)] {
        a.post_ud(&mut h, &UdWr::send(wr_id, ah, to, 0x8000_4243, &[]));
        sent(&mut h, &mut u, &a, wr_id);
    }
    let got = u.rcq.wait(&mut h);
    assert_eq!((got.wr_id, got.src_qp), (0xb, a.qpn));
    u.rcq.expect_empty(&mut h);
    assert_eq!(
        stats(&mut h, u.uar).ud_drop_qkey,
        1,
        "QP c's Q_Key is 0x4243"
    );
}

#[test]
fn datagrams_that_reach_no_qp_are_counted_by_the_device() {
    let mut h = start();
    let mut u = Ud::new(&mut h);
    let mut a = u.qp(&mut h, QKEY);
    let mut init = u.qp_reset(&mut h, &QpCaps::default());
    assert_eq!(
        ud_modify(&mut h, &init, QHCA_QPS_INIT, QHCA_QP_ATTR_QKEY, QKEY, 0),
        QHCA_CMD_OK
    );
    let (st, rc) = create_qp(
        &mut h,
        &mut u.m,
        u.uar,
        u.pdn,
        u.scq.cqn,
        u.rcq.cqn,
        &QpCaps::default(),
    );
    assert_eq!(st, QHCA_CMD_OK);
    let mut rc = rc;
    bring_to_rts(&mut h, &rc, a.qpn, 0, &ConnParams::default());
    let (dst, dkey) = u.buf(&mut h, PAGE, FILL);
    init.post_recv(&mut h, 1, &[(dst, 64, dkey)]);
    rc.post_recv(&mut h, 2, &[(dst + 64, 64, dkey)]);
    let here = u.ah(&mut h, &AhAttr::to(port_gid(GUID)));
    let elsewhere = u.ah(&mut h, &AhAttr::to(port_gid(GUID + 1)));
    // A QPN that names nothing (a's index, another generation), an RC QP, a QP not yet in
    // RTR; and a port that is not this one (a's own QPN there): with no netdev it has no
    // route, so it never reaches the device's receive side (the port's tx_no_route).
    let stale = a.qpn ^ 1 << QHCA_QPN_INDEX_BITS;
    let targets = [
        (here, stale),
        (here, rc.qpn),
        (here, init.qpn),
        (elsewhere, a.qpn),
    ];
    a.post_recv(&mut h, 3, &[(dst + 128, 64, dkey)]);
    assert_eq!(h.reg(QHCA_REG_UD_NO_QP), 0);
    for (i, &(ah, qpn)) in targets.iter().enumerate() {
        a.post_ud(&mut h, &UdWr::send(i as u64, ah, qpn, QKEY, &[]));
        sent(&mut h, &mut u, &a, i as u64);
    }
    u.rcq.expect_empty(&mut h);
    assert_eq!(h.reg(QHCA_REG_UD_NO_QP), 3);
    assert_eq!(query_port(&mut h).counters.tx_no_route, 1);
    assert!(h.qt.memread(dst, 192).iter().all(|&x| x == FILL));
    let (st, q) = query_qp(&mut h, u.uar, rc.qpn);
    assert_eq!(
        (st, q.state as u32),
        (QHCA_CMD_OK, QHCA_QPS_RTS),
        "the RC QP"
    );
}

#[test]
fn sixty_four_senders_one_receiver() {
    const SENDERS: usize = 64;
    const EACH: usize = 4;
    let mut h = start();
    let mut u = Ud::new(&mut h);
    let small = QpCaps {
        sq_log: 3,
        rq_log: 1,
        ..QpCaps::default()
    };
    let mut rx = u.qp_with(
        &mut h,
        QKEY,
        &QpCaps {
            rq_log: 8,
            ..QpCaps::default()
        },
    );
    let mut tx: Vec<Qp> = (0..SENDERS)
        .map(|_| u.qp_with(&mut h, QKEY, &small))
        .collect();
    let ah = u.ah(&mut h, &AhAttr::to(port_gid(GUID)));
    let (src, lkey) = u.buf(&mut h, PAGE, 0);
    let (dst, dkey) = u.buf(&mut h, (SENDERS * EACH * 64) as u64, FILL);
    for i in 0..SENDERS * EACH {
        rx.post_recv(&mut h, i as u64, &[(dst + i as u64 * 64, 64, dkey)]);
    }
    // Each sender's message: its number and sequence, 8 bytes.
    for k in 0..EACH {
        for (s, q) in tx.iter_mut().enumerate() {
            let off = ((s * EACH + k) * 8) as u64;
            h.qt.memwrite(src + off, &[s as u8, k as u8, 0xaa, 0x55, 1, 2, 3, 4]);
            let mut wr = UdWr::send(off, ah, rx.qpn, QKEY, &[(src + off, 8, lkey)]);
            wr.wr.flags = 0;
            q.post_ud(&mut h, &wr);
        }
    }
    let mut per_sender = vec![Vec::new(); SENDERS];
    for i in 0..SENDERS * EACH {
        let c = u.rcq.wait(&mut h);
        assert_eq!(
            (c.status as u32, c.wr_id, c.byte_len),
            (0, i as u64, 48),
            "{c:?}"
        );
        let m = h.qt.memread(dst + i as u64 * 64 + 40, 8);
        let s = m[0] as usize;
        assert_eq!(c.src_qp, tx[s].qpn, "src_qp of sender {s}'s datagram");
        assert_eq!(&m[2..], &[0xaa, 0x55, 1, 2, 3, 4]);
        per_sender[s].push(m[1]);
    }
    for (s, got) in per_sender.iter().enumerate() {
        assert_eq!(
            got,
            &[0, 1, 2, 3],
            "sender {s}: each datagram once, in order"
        );
    }
    u.rcq.expect_empty(&mut h);
    u.scq.expect_empty(&mut h);
    let st = stats(&mut h, u.uar);
    assert_eq!((st.ud_drop_no_recv, st.ud_drop_qkey), (0, 0));
}

#[test]
fn one_sender_many_receivers_in_other_contexts() {
    const RECEIVERS: usize = 12;
    let mut h = start();
    let mut u = Ud::new(&mut h);
    let mut a = u.qp(&mut h, QKEY);
    let ah = u.ah(&mut h, &AhAttr::to(port_gid(GUID)));
    let (src, lkey) = u.buf(&mut h, PAGE, 0);
    // Three other contexts, four receivers each, every receiver its own Q_Key.
    let mut ctxs: Vec<Ud> = (0..3)
        .map(|_| {
            let m = u.m.carve(&mut h, 4 << 20);
            Ud::with_mem(&mut h, m)
        })
        .collect();
    let mut rx = Vec::new();
    for i in 0..RECEIVERS {
        let c = &mut ctxs[i % 3];
        let q = c.qp(&mut h, 0x100 + i as u32);
        let (dst, dkey) = c.buf(&mut h, PAGE, FILL);
        let mut q = q;
        q.post_recv(&mut h, i as u64, &[(dst, 128, dkey)]);
        rx.push((q, dst));
    }
    for (i, (q, _)) in rx.iter().enumerate() {
        h.qt.memwrite(src + i as u64 * 16, &pattern(16, i as u8));
        let wr = UdWr::send(
            i as u64,
            ah,
            q.qpn,
            0x100 + i as u32,
            &[(src + i as u64 * 16, 16, lkey)],
        );
        a.post_ud(&mut h, &wr);
        sent(&mut h, &mut u, &a, i as u64);
    }
    for (i, (q, dst)) in rx.iter().enumerate() {
        let c = ctxs[i % 3].rcq.wait(&mut h);
        assert_eq!(
            (c.wr_id, c.qpn, c.src_qp, c.byte_len),
            (i as u64, q.qpn, a.qpn, 56)
        );
        assert_eq!(h.qt.memread(dst + 40, 16), pattern(16, i as u8));
    }
}

#[test]
fn states_and_attributes() {
    let mut h = start();
    let mut u = Ud::new(&mut h);
    let caps = QpCaps::default();
    let (st, _) = create_qp_typed(
        &mut h, &mut u.m, u.uar, u.pdn, u.scq.cqn, u.rcq.cqn, &caps, 2,
    );
    assert_eq!(st, QHCA_CMD_BAD_PARAM, "QP type 2");
    let q = u.qp_reset(&mut h, &caps);
    let cases = [
        ("INIT without a Q_Key", QHCA_QPS_INIT, 0),
        (
            "INIT with RC's access",
            QHCA_QPS_INIT,
            QHCA_QP_ATTR_QKEY | QHCA_QP_ATTR_ACCESS,
        ),
        (
            "INIT with a path MTU",
            QHCA_QPS_INIT,
            QHCA_QP_ATTR_QKEY | QHCA_QP_ATTR_PATH_MTU,
        ),
    ];
    for (what, state, mask) in cases {
        let mut a = QpAttr {
            mask: mask | QHCA_QP_ATTR_STATE,
            state: state as u8,
            qkey: 5,
            ..Default::default()
        };
        if mask & QHCA_QP_ATTR_PATH_MTU != 0 {
            a.path_mtu = 10;
        }
        if mask & QHCA_QP_ATTR_QKEY == 0 {
            a.qkey = 0;
        }
        assert_eq!(
            modify_qp(&mut h, u.uar, q.qpn, &a),
            QHCA_CMD_BAD_PARAM,
            "{what}"
        );
    }
    assert_eq!(
        ud_modify(&mut h, &q, QHCA_QPS_INIT, QHCA_QP_ATTR_QKEY, 5, 0),
        QHCA_CMD_OK
    );
    assert_eq!(
        ud_modify(&mut h, &q, QHCA_QPS_RTR, QHCA_QP_ATTR_QKEY, 6, 0),
        QHCA_CMD_OK
    );
    assert_eq!(
        ud_modify(&mut h, &q, QHCA_QPS_RTS, 0, 0, 0),
        QHCA_CMD_BAD_PARAM,
        "RTS needs an SQ PSN"
    );
    assert_eq!(
        ud_modify(&mut h, &q, QHCA_QPS_RTS, QHCA_QP_ATTR_SQ_PSN, 0, 0x42),
        QHCA_CMD_OK
    );
    let (st, a) = query_qp(&mut h, u.uar, q.qpn);
    assert_eq!(st, QHCA_CMD_OK);
    assert_eq!((a.state as u32, a.qkey, a.sq_psn), (QHCA_QPS_RTS, 6, 0x42));
    // Q_Key alone, in RTS; a Q_Key set outside the mask is refused.
    let mut qk = QpAttr {
        mask: QHCA_QP_ATTR_QKEY,
        qkey: 7,
        ..Default::default()
    };
    assert_eq!(modify_qp(&mut h, u.uar, q.qpn, &qk), QHCA_CMD_OK);
    assert_eq!(query_qp(&mut h, u.uar, q.qpn).1.qkey, 7);
    qk.mask = QHCA_QP_ATTR_SQ_PSN;
    assert_eq!(modify_qp(&mut h, u.uar, q.qpn, &qk), QHCA_CMD_BAD_PARAM);
    // An RC QP takes no Q_Key.
    let (st, rc) = create_qp(&mut h, &mut u.m, u.uar, u.pdn, u.scq.cqn, u.rcq.cqn, &caps);
    assert_eq!(st, QHCA_CMD_OK);
    let a = QpAttr {
        mask: QHCA_QP_ATTR_STATE | QHCA_QP_ATTR_QKEY,
        state: QHCA_QPS_INIT as u8,
        qkey: 1,
        ..Default::default()
    };
    assert_eq!(modify_qp(&mut h, u.uar, rc.qpn, &a), QHCA_CMD_BAD_PARAM);

    // In RTR a UD QP receives but does not send: its WQE waits for RTS.
    let mut r = u.qp_reset(&mut h, &caps);
    assert_eq!(
        ud_modify(&mut h, &r, QHCA_QPS_INIT, QHCA_QP_ATTR_QKEY, QKEY, 0),
        QHCA_CMD_OK
    );
    assert_eq!(ud_modify(&mut h, &r, QHCA_QPS_RTR, 0, 0, 0), QHCA_CMD_OK);
    let mut s = u.qp(&mut h, QKEY);
    let ah = u.ah(&mut h, &AhAttr::to(port_gid(GUID)));
    let (dst, dkey) = u.buf(&mut h, PAGE, FILL);
    r.post_recv(&mut h, 0x1, &[(dst, 64, dkey)]);
    s.post_recv(&mut h, 0x2, &[(dst + 64, 64, dkey)]);
    r.post_ud(&mut h, &UdWr::send(0x10, ah, s.qpn, QKEY, &[]));
    s.post_ud(&mut h, &UdWr::send(0x20, ah, r.qpn, QKEY, &[]));
    sent(&mut h, &mut u, &s, 0x20);
    assert_eq!(u.rcq.wait(&mut h).wr_id, 0x1, "RTR receives");
    u.scq.expect_empty(&mut h);
    u.rcq.expect_empty(&mut h);
    assert_eq!(
        ud_modify(&mut h, &r, QHCA_QPS_RTS, QHCA_QP_ATTR_SQ_PSN, 0, 0),
        QHCA_CMD_OK
    );
    sent(&mut h, &mut u, &r, 0x10);
    assert_eq!(u.rcq.wait(&mut h).wr_id, 0x2);
}

#[test]
fn bad_send_wqes_complete_in_error() {
    let mut h = start();
    let mut u = Ud::new(&mut h);
    let m = u.m.carve(&mut h, 2 << 20);
    let mut other = Ud::with_mem(&mut h, m);
    let ah = u.ah(&mut h, &AhAttr::to(port_gid(GUID)));
    let (st, pd2) = alloc_pd(&mut h, u.uar);
    assert_eq!(st, QHCA_CMD_OK);
    let (st, ah_pd2) = create_ah(&mut h, u.uar, pd2, &AhAttr::to(port_gid(GUID)));
    assert_eq!(st, QHCA_CMD_OK);
    let ah_other = other.ah(&mut h, &AhAttr::to(port_gid(GUID)));
    let gone = u.ah(&mut h, &AhAttr::to(port_gid(GUID)));
    assert_eq!(destroy_ah(&mut h, u.uar, gone), QHCA_CMD_OK);
    let (src, lkey) = u.buf(&mut h, 2 * PAGE, 0);
    let big = UdWr::send(1, ah, 1, QKEY, &[(src, QHCA_UD_MAX_MSG + 1, lkey)]);
    let mut write = UdWr::send(1, ah, 1, QKEY, &[(src, 8, lkey)]);
    write.wr.opcode = QHCA_WR_RDMA_WRITE;
    let mut rsvd = UdWr::send(1, ah, 1, QKEY, &[]).encode();
    rsvd[44] = 1; // the UD segment's rsvd
    let op = |ah| UdWr::send(1, ah, 1, QKEY, &[]).encode();
    let cases = [
        ("an RDMA WRITE", write.encode(), QHCA_WC_LOC_QP_OP_ERR),
        ("an AH of another PD", op(ah_pd2), QHCA_WC_LOC_QP_OP_ERR),
        (
            "an AH of another context",
            op(ah_other),
            QHCA_WC_LOC_QP_OP_ERR,
        ),
        ("a destroyed AH", op(gone), QHCA_WC_LOC_QP_OP_ERR),
        ("a reserved field", rsvd, QHCA_WC_LOC_QP_OP_ERR),
        ("more than the MTU", big.encode(), QHCA_WC_LOC_LEN_ERR),
    ];
    for (what, wqe, status) in cases {
        let mut q = u.qp(&mut h, QKEY);
        q.write_send_raw(&mut h, &wqe);
        q.ring_sq(&mut h);
        // A second WQE behind it is flushed.
        q.post_ud(&mut h, &UdWr::send(2, ah, 1, QKEY, &[]));
        let c = u.scq.wait(&mut h);
        assert_eq!(
            (c.wr_id, c.status as u32, c.qpn),
            (1, status, q.qpn),
            "{what}: {c:?}"
        );
        let c = u.scq.wait(&mut h);
        assert_eq!(
            (c.wr_id, c.status as u32),
            (2, QHCA_WC_WR_FLUSH_ERR),
            "{what}"
        );
        assert_eq!(
            event_keys(&take_events(&mut h)),
            [(QHCA_EQE_QP_ERR, q.qpn as u64, u.uar as u64)],
            "{what}"
        );
        let (st, a) = query_qp(&mut h, u.uar, q.qpn);
        assert_eq!((st, a.state as u32), (QHCA_CMD_OK, QHCA_QPS_ERR), "{what}");
    }
    assert_eq!(h.reg(QHCA_REG_UD_NO_QP), 0, "none of them left");
    // Exactly the MTU goes.
    let mut q = u.qp(&mut h, QKEY);
    let (dst, dkey) = u.buf(&mut h, 2 * PAGE, FILL);
    q.post_recv(&mut h, 9, &[(dst, 40 + QHCA_UD_MAX_MSG, dkey)]);
    q.post_ud(
        &mut h,
        &UdWr::send(3, ah, q.qpn, QKEY, &[(src, QHCA_UD_MAX_MSG, lkey)]),
    );
    sent(&mut h, &mut u, &q, 3);
    assert_eq!(u.rcq.wait(&mut h).byte_len, 40 + QHCA_UD_MAX_MSG);
}

#[test]
fn a_receive_wqe_the_device_cannot_use_fails_the_qp() {
    let mut h = start();
    let mut u = Ud::new(&mut h);
    let mut a = u.qp(&mut h, QKEY);
    let mut b = u.qp(&mut h, QKEY);
    let ah = u.ah(&mut h, &AhAttr::to(port_gid(GUID)));
    let (dst, dkey) = u.buf(&mut h, PAGE, FILL);
    b.post_recv(&mut h, 0x31, &[(dst, 64, dkey ^ 0x100)]);
    b.post_recv(&mut h, 0x32, &[(dst, 64, dkey)]);
    a.post_ud(&mut h, &UdWr::send(1, ah, b.qpn, QKEY, &[]));
    sent(&mut h, &mut u, &a, 1);
    let c = u.rcq.wait(&mut h);
    assert_eq!(
        (c.wr_id, c.status as u32),
        (0x31, QHCA_WC_LOC_PROT_ERR),
        "{c:?}"
    );
    let c = u.rcq.wait(&mut h);
    assert_eq!((c.wr_id, c.status as u32), (0x32, QHCA_WC_WR_FLUSH_ERR));
    assert!(h.qt.memread(dst, 64).iter().all(|&x| x == FILL));
    assert_eq!(
        event_keys(&take_events(&mut h)),
        [(QHCA_EQE_QP_ERR, b.qpn as u64, u.uar as u64)]
    );
    let (st, q) = query_qp(&mut h, u.uar, b.qpn);
    assert_eq!((st, q.state as u32), (QHCA_CMD_OK, QHCA_QPS_ERR));
}

#[test]
fn address_handles() {
    let mut h = start();
    let mut u = Ud::new(&mut h);
    let m = u.m.carve(&mut h, 1 << 20);
    let other = Ud::with_mem(&mut h, m);
    let good = AhAttr::to(port_gid(GUID));
    let bad = [
        (
            "port 2",
            AhAttr {
                port_num: 2,
                ..good
            },
        ),
        (
            "port 0",
            AhAttr {
                port_num: 0,
                ..good
            },
        ),
        (
            "flow label of 21 bits",
            AhAttr {
                flow_label: 1 << 20,
                ..good
            },
        ),
        ("SL 16", AhAttr { sl: 16, ..good }),
    ];
    for (what, a) in bad {
        assert_eq!(
            create_ah(&mut h, u.uar, u.pdn, &a).0,
            QHCA_CMD_BAD_PARAM,
            "{what}"
        );
    }
    let mut raw = create_ah_bytes(u.uar, u.pdn, &good);
    raw[32] = 1; // rsvd
    assert_eq!(
        obj_cmd(&mut h, QHCA_CMD_CREATE_AH, in_words(&raw)).0,
        QHCA_CMD_BAD_PARAM
    );
    assert_eq!(
        create_ah(&mut h, u.uar, other.pdn, &good).0,
        QHCA_CMD_BAD_RESOURCE,
        "another context's PD"
    );
    // Any GID is an address (one not on the fabric loses its datagrams).
    let first = u.ah(&mut h, &AhAttr::to([0x42; 16]));
    assert_eq!(h.reg(QHCA_REG_NUM_AH), 1);
    assert_eq!(
        destroy(&mut h, QHCA_CMD_DEALLOC_PD, u.uar, u.pdn),
        QHCA_CMD_BAD_STATE
    );
    assert_eq!(
        destroy_ah(&mut h, other.uar, first),
        QHCA_CMD_BAD_RESOURCE,
        "not its AH"
    );
    assert_eq!(destroy_ah(&mut h, u.uar, first), QHCA_CMD_OK);
    assert_eq!(
        destroy_ah(&mut h, u.uar, first),
        QHCA_CMD_BAD_RESOURCE,
        "twice"
    );
    // Every slot once more: the first one comes back with another generation.
    let mut seen = Vec::new();
    for _ in 0..QHCA_LIMIT_MAX_AH {
        let (st, ah) = create_ah(&mut h, u.uar, u.pdn, &good);
        assert_eq!(st, QHCA_CMD_OK);
        seen.push(ah);
    }
    assert_eq!(
        create_ah(&mut h, u.uar, u.pdn, &good).0,
        QHCA_CMD_NO_RESOURCES,
        "all taken"
    );
    let again = *seen
        .iter()
        .find(|&&ah| ah & (QHCA_LIMIT_MAX_AH - 1) == first & (QHCA_LIMIT_MAX_AH - 1))
        .unwrap();
    assert_ne!(again, first, "a slot's number changes with its generation");
    assert_eq!(
        destroy_ah(&mut h, u.uar, first),
        QHCA_CMD_BAD_RESOURCE,
        "stale number"
    );
    // The context's end takes its AHs.
    assert_eq!(h.free_uar(u.uar as u64), QHCA_CMD_OK);
    assert_eq!(h.reg(QHCA_REG_NUM_AH), 0);
}

const QHCA_LIMIT_MAX_AH: u32 = 1 << QHCA_AH_INDEX_BITS;
