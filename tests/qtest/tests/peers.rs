// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Review item 1: RC is connected. Every packet carries its source (port and QPN); a responder
//! takes requests only from the QP it is connected to, a requester takes responses only from
//! its peer. A third QP that names a victim as its destination can neither fail it, nor feed
//! it data, nor forge its ACKs: its packets are dropped and counted in QUERY_CTX's
//! `pkt_foreign` of the victim's context.

use qhca_qtest::abi::*;
use qhca_qtest::verbs::*;
use qhca_qtest::Hca;

const RW: u32 = QHCA_ACCESS_LOCAL_WRITE | QHCA_ACCESS_REMOTE_WRITE | QHCA_ACCESS_REMOTE_READ;

/// A second context (the attacker) with its own PD, CQ and `n` QPs in RESET.
struct Other {
    uar: u32,
    pdn: u32,
    cq: Cq,
    qps: Vec<Qp>,
}

fn other(h: &mut Hca, m: &mut Mem, n: usize) -> Other {
    let uar = h.alloc_uar().1 as u32;
    let (_, pdn) = alloc_pd(h, uar);
    let (st, cq) = create_cq(h, m, uar, 6);
    assert_eq!(st, QHCA_CMD_OK);
    let qps = (0..n)
        .map(|_| {
            let (st, q) = create_qp(h, m, uar, pdn, cq.cqn, cq.cqn, &QpCaps::default());
            assert_eq!(st, QHCA_CMD_OK);
            q
        })
        .collect();
    Other { uar, pdn, cq, qps }
}

fn quick() -> ConnParams {
    ConnParams {
        timeout: 4,
        retry_cnt: 1,
        ..Default::default()
    }
}

#[test]
fn a_third_qp_cannot_fail_or_feed_a_connected_responder() {
    let mut h = Hca::start("num-uars=4");
    h.bring_up(5, 6);
    let mut p = Pair::new(&mut h, &ConnParams::default());
    let mut o = other(&mut h, &mut p.m, 1);
    // The attacker's QP names b as its destination, with b's expected PSN.
    let mut x = o.qps[0];
    bring_to_rts(&mut h, &x, p.b.qpn, 0x100, &quick());
    let (rbuf, rlkey) = p.buf(&mut h, 4096, 0x11, QHCA_ACCESS_LOCAL_WRITE);
    p.b.post_recv(&mut h, 0xb0, &[(rbuf, 4096, rlkey)]);

    // A WRITE with a key b does not know would fail b's R_Key check (b to ERR, flushed); a
    // SEND would land in b's receive buffer with src_qp a. Neither reaches b.
    let (xm, xkey) = {
        let a = p.m.alloc(&mut h, 4096);
        h.qt.memset(a, 4096, 0x66);
        let (st, k) = reg_mr(
            &mut h,
            &mut p.m,
            o.uar,
            o.pdn,
            a,
            4096,
            QHCA_ACCESS_LOCAL_WRITE,
        );
        assert_eq!(st, QHCA_CMD_OK);
        (a, k)
    };
    x.post_send(
        &mut h,
        &SendWr {
            wr_id: 1,
            opcode: QHCA_WR_RDMA_WRITE,
            flags: QHCA_WQE_SIGNALED,
            remote_addr: 0x1000,
            rkey: 0xdead_0001,
            sges: vec![(xm, 64, xkey)],
            ..Default::default()
        },
    );
    let c = o.cq.wait(&mut h);
    assert_eq!(
        (c.wr_id, c.status as u32),
        (1, QHCA_WC_RETRY_EXC_ERR),
        "{c:?}"
    );
    // x's QP_ERR event (and b's, if b had failed) before more commands.
    let mut ev = event_keys(&take_events(&mut h));
    // Again from a fresh connection: a SEND.
    let st = modify_qp(
        &mut h,
        o.uar,
        x.qpn,
        &QpAttr {
            mask: QHCA_QP_ATTR_STATE,
            state: QHCA_QPS_RESET as u8,
            ..Default::default()
        },
    );
    assert_eq!(st, QHCA_CMD_OK);
    while o.cq.poll(&mut h).is_some() {}
    x.sq_pi = 0;
    bring_to_rts(&mut h, &x, p.b.qpn, 0x100, &quick());
    x.post_send(
        &mut h,
        &SendWr {
            wr_id: 2,
            opcode: QHCA_WR_SEND,
            flags: QHCA_WQE_SIGNALED,
            sges: vec![(xm, 64, xkey)],
            ..Default::default()
        },
    );
    let c = o.cq.wait(&mut h);
    assert_eq!(
        (c.wr_id, c.status as u32),
        (2, QHCA_WC_RETRY_EXC_ERR),
        "{c:?}"
    );
    ev.extend(event_keys(&take_events(&mut h)));
    assert!(
        !ev.contains(&(QHCA_EQE_QP_ERR, p.b.qpn as u64, p.uar as u64)),
        "b went to ERR: {ev:?}"
    );
    assert!(
        ev.contains(&(QHCA_EQE_QP_ERR, x.qpn as u64, o.uar as u64)),
        "{ev:?}"
    );

    // b is untouched: RTS, its receive still posted, its buffer as it was, nothing on its CQ.
    let (_, b) = query_qp(&mut h, p.uar, p.b.qpn);
    assert_eq!((b.state, b.rq_psn), (QHCA_QPS_RTS as u8, 0x100));
    p.rcq.expect_empty(&mut h);
    assert!(h.qt.memread(rbuf, 4096).iter().all(|&v| v == 0x11));
    let (_, st) = query_ctx_stats(&mut h, p.uar);
    // Each attempt is the first send plus retry_cnt resends.
    assert!(st.pkt_foreign >= 4, "foreign packets counted: {st:?}");
    let (_, ost) = query_ctx_stats(&mut h, o.uar);
    assert_eq!(
        ost.pkt_foreign, 0,
        "counted for the victim's context: {ost:?}"
    );

    // The real peer still gets through, and the CQE names it.
    let (src, lkey) = p.buf(&mut h, 4096, 0x77, QHCA_ACCESS_LOCAL_WRITE);
    p.a.post_send(
        &mut h,
        &SendWr {
            wr_id: 3,
            opcode: QHCA_WR_SEND,
            flags: QHCA_WQE_SIGNALED,
            sges: vec![(src, 100, lkey)],
            ..Default::default()
        },
    );
    let c = p.scq.wait(&mut h);
    assert_eq!((c.wr_id, c.status as u32), (3, QHCA_WC_SUCCESS), "{c:?}");
    let r = p.rcq.wait(&mut h);
    assert_eq!(
        (r.wr_id, r.status as u32, r.byte_len, r.src_qp, r.qpn),
        (0xb0, QHCA_WC_SUCCESS, 100, p.a.qpn, p.b.qpn),
        "{r:?}"
    );
    assert!(h.qt.memread(rbuf, 100).iter().all(|&v| v == 0x77));
}

/// A requester with a WRITE in flight to a peer that never answers (b is not ready) must not
/// take an ACK from anyone else: the attacker connects y to a (with a's PSN) and makes y's
/// responder ACK by sending to y from z. a's WRITE fails with RETRY_EXC_ERR; before, it
/// completed successfully though b never saw it.
#[test]
fn a_requester_takes_responses_only_from_its_peer() {
    let mut h = Hca::start("num-uars=4");
    h.bring_up(5, 6);
    let mut p = Pair::new(&mut h, &ConnParams::default());
    // a towards b with a short ACK timeout; b back to INIT: it drops a's packets.
    for (q, st) in [(&p.a, QHCA_QPS_RESET), (&p.b, QHCA_QPS_RESET)] {
        let r = modify_qp(
            &mut h,
            p.uar,
            q.qpn,
            &QpAttr {
                mask: QHCA_QP_ATTR_STATE,
                state: st as u8,
                ..Default::default()
            },
        );
        assert_eq!(r, QHCA_CMD_OK);
    }
    p.a.sq_pi = 0;
    let slow = ConnParams {
        timeout: 10, // 4 ms
        retry_cnt: 1,
        ..Default::default()
    };
    bring_to_rts(&mut h, &p.a, p.b.qpn, 0x500, &slow);
    let (dst, rkey) = p.buf(&mut h, 4096, 0, RW);
    let (src, lkey) = p.buf(&mut h, 4096, 0x42, QHCA_ACCESS_LOCAL_WRITE);

    let mut o = other(&mut h, &mut p.m, 2);
    let (y, mut z) = (o.qps[0], o.qps[1]);
    bring_to_rts(&mut h, &y, p.a.qpn, 0x500, &ConnParams::default());
    bring_to_rts(&mut h, &z, y.qpn, 0x500, &quick());
    let (ybuf, ykey) = {
        let a = p.m.alloc(&mut h, 4096);
        let (st, k) = reg_mr(&mut h, &mut p.m, o.uar, o.pdn, a, 4096, RW);
        assert_eq!(st, QHCA_CMD_OK);
        (a, k)
    };

    p.a.post_send(
        &mut h,
        &SendWr {
            wr_id: 0xa,
            opcode: QHCA_WR_RDMA_WRITE,
            flags: QHCA_WQE_SIGNALED,
            remote_addr: dst,
            rkey,
            sges: vec![(src, 64, lkey)],
            ..Default::default()
        },
    );
    // z -> y: y's responder answers towards a, PSN 0x500.
    z.post_send(
        &mut h,
        &SendWr {
            wr_id: 0xf,
            opcode: QHCA_WR_RDMA_WRITE,
            flags: QHCA_WQE_SIGNALED,
            remote_addr: ybuf,
            rkey: ykey,
            inline: Some(vec![1; 8]),
            ..Default::default()
        },
    );
    let c = p.scq.wait(&mut h);
    assert_eq!(
        (c.wr_id, c.status as u32),
        (0xa, QHCA_WC_RETRY_EXC_ERR),
        "a's WRITE completed on an ACK that did not come from b: {c:?}"
    );
    assert!(h.qt.memread(dst, 64).iter().all(|&v| v == 0));
    let zc = o.cq.wait(&mut h);
    take_events(&mut h);
    let (_, st) = query_ctx_stats(&mut h, o.uar);
    assert!(
        st.pkt_foreign >= 1,
        "z's packets to y dropped and counted: {st:?}"
    );
    assert_eq!(zc.wr_id, 0xf);
    assert_eq!(zc.status as u32, QHCA_WC_RETRY_EXC_ERR, "{zc:?}");
}
