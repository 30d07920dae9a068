// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! RNR back-off. Review item 2: a PSN-sequence NAK that arrives while the requester waits out
//! an RNR NAK must not leave the QP waiting for ever. Review item 6: QPs that retry RNR for
//! ever (rnr_retry 7) against empty receive queues back off exponentially, so that 1,024 of
//! them cannot keep the main loop busy; counted with qtest's virtual clock.

use qhca_qtest::abi::*;
use qhca_qtest::verbs::*;
use qhca_qtest::Hca;

/// On a wire with latency (x-wire-queued) a requester sends a whole 3-packet SEND before the
/// first answer comes back; with no receive posted the responder answers the first packet
/// with an RNR NAK and the next two with PSN-sequence NAKs. Before the fix the first
/// PSN-sequence NAK deleted the RNR timer but left the QP waiting: the SEND never completed,
/// even once a receive was posted.
#[test]
fn psn_nak_during_rnr_backoff_does_not_hang() {
    let mut h = Hca::start("num-uars=4,x-wire-queued=on");
    h.bring_up(5, 6);
    let p7 = ConnParams {
        rnr_retry: 7,
        min_rnr_timer: 1,
        retry_cnt: 3,
        ..Default::default()
    };
    let mut p = Pair::new(&mut h, &p7);
    let data = pattern(700, 1);
    let (src, lkey) = p.buf(&mut h, 4096, 0, QHCA_ACCESS_LOCAL_WRITE);
    h.qt.memwrite(src, &data);
    p.a.post_send(
        &mut h,
        &SendWr {
            wr_id: 0x5e,
            opcode: QHCA_WR_SEND,
            flags: QHCA_WQE_SIGNALED,
            sges: vec![(src, 700, lkey)],
            ..Default::default()
        },
    );
    for _ in 0..50 {
        h.qt.clock_step(100_000);
    }
    assert!(p.scq.poll(&mut h).is_none(), "completed without a receive");
    let (_, st) = query_ctx_stats(&mut h, p.uar);
    assert!(st.rnr_retries >= 2, "the SEND met RNR NAKs: {st:?}");
    let (rbuf, rkey) = p.buf(&mut h, 4096, 0xee, QHCA_ACCESS_LOCAL_WRITE);
    p.b.post_recv(&mut h, 0x7e, &[(rbuf, 4096, rkey)]);
    let c = p.scq.wait(&mut h);
    assert_eq!((c.wr_id, c.status as u32), (0x5e, QHCA_WC_SUCCESS), "{c:?}");
    let r = p.rcq.wait(&mut h);
    assert_eq!(
        (r.wr_id, r.status as u32, r.byte_len),
        (0x7e, QHCA_WC_SUCCESS, 700),
        "{r:?}"
    );
    assert_eq!(h.qt.memread(rbuf, 700), data);
    let (_, a) = query_qp(&mut h, p.uar, p.a.qpn);
    assert_eq!(a.state, QHCA_QPS_RTS as u8);
}

/// 1,024 QPs, each connected to itself with nothing in its receive queue, each with a SEND
/// posted, rnr_retry 7 and the shortest RNR timer (10 us): over one virtual second (stepped
/// 1 ms at a time) they retry ~20 times each, not once per step (1,000) as a 10 us timer
/// would. A receive posted afterwards still completes its QP's SEND within the back-off cap.
#[test]
fn rnr_backoff_bounds_retries_of_1024_qps() {
    let mut h = Hca::start("num-uars=4");
    h.bring_up(6, 7);
    let mut m = Mem::default();
    let uar = h.alloc_uar().1 as u32;
    let (_, pdn) = alloc_pd(&mut h, uar);
    let (st, mut cq) = create_cq(&mut h, &mut m, uar, 6);
    assert_eq!(st, QHCA_CMD_OK);
    let caps = QpCaps {
        sq_log: 0,
        sq_stride_log: 7,
        rq_log: 0,
        rq_stride_log: 5,
        max_inline: 16,
        max_sge: 1,
    };
    let p7 = ConnParams {
        rnr_retry: 7,
        min_rnr_timer: 1,
        ..Default::default()
    };
    let mut qps = Vec::new();
    for i in 0..QHCA_LIMIT_QP {
        let (st, q) = create_qp(&mut h, &mut m, uar, pdn, cq.cqn, cq.cqn, &caps);
        assert_eq!(st, QHCA_CMD_OK, "QP #{i}");
        bring_to_rts(&mut h, &q, q.qpn, 0, &p7);
        qps.push(q);
    }
    for q in qps.iter_mut() {
        q.post_send(
            &mut h,
            &SendWr {
                wr_id: q.qpn as u64,
                opcode: QHCA_WR_SEND,
                flags: QHCA_WQE_SIGNALED,
                inline: Some(vec![0x33; 8]),
                ..Default::default()
            },
        );
    }
    let (_, before) = query_ctx_stats(&mut h, uar);
    for _ in 0..1000 {
        h.qt.clock_step(1_000_000);
    }
    let (_, after) = query_ctx_stats(&mut h, uar);
    let per_qp = (after.rnr_retries - before.rnr_retries) as f64 / QHCA_LIMIT_QP as f64;
    eprintln!("RNR retries per QP in one virtual second: {per_qp:.1}");
    assert!(per_qp >= 5.0, "the QPs do retry: {per_qp}");
    assert!(per_qp <= 40.0, "RNR retries per QP per second: {per_qp}");
    assert!(
        cq.poll(&mut h).is_none(),
        "a SEND completed without a receive"
    );

    // Still alive: a receive on one QP lets its SEND through within the back-off cap.
    let (rbuf, rkey) = {
        let a = m.alloc(&mut h, 4096);
        let (st, k) = reg_mr(&mut h, &mut m, uar, pdn, a, 4096, QHCA_ACCESS_LOCAL_WRITE);
        assert_eq!(st, QHCA_CMD_OK);
        (a, k)
    };
    qps[7].post_recv(&mut h, 0x77, &[(rbuf, 64, rkey)]);
    let mut got = Vec::new();
    for _ in 0..150 {
        h.qt.clock_step(1_000_000);
        while let Some(c) = cq.poll(&mut h) {
            got.push(c);
        }
        if got.len() == 2 {
            break;
        }
    }
    let mut ids: Vec<(u64, u32)> = got.iter().map(|c| (c.wr_id, c.status as u32)).collect();
    ids.sort();
    let mut want = vec![
        (0x77, QHCA_WC_SUCCESS),
        (qps[7].qpn as u64, QHCA_WC_SUCCESS),
    ];
    want.sort();
    assert_eq!(ids, want, "{got:?}");
    assert!(h.qt.memread(rbuf, 8).iter().all(|&b| b == 0x33));
}

const QHCA_LIMIT_QP: usize = 1024;
