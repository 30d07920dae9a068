// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The initiator depth (`max_rd_atomic`) and the responder resources (`max_dest_rd_atomic`)
//! as QP attributes: 16 from CREATE_QP on, each set only at its transitions (RTR->RTS and
//! RTS->RTS; INIT->RTR and RTR->RTR), 0..16 (0: none); the requester keeps at most
//! `max_rd_atomic` READs in flight; a READ beyond the responder's `max_dest_rd_atomic` is an
//! invalid request.

use qhca_qtest::abi::*;
use qhca_qtest::verbs::*;
use qhca_qtest::Hca;

const RW: u32 = QHCA_ACCESS_LOCAL_WRITE
    | QHCA_ACCESS_REMOTE_WRITE
    | QHCA_ACCESS_REMOTE_READ
    | QHCA_ACCESS_REMOTE_ATOMIC;
const PSN: u32 = 0x100;
const RD: u32 = QHCA_QP_ATTR_MAX_RD_ATOMIC;
const DEST: u32 = QHCA_QP_ATTR_MAX_DEST_RD_ATOMIC;

fn start(props: &str, params: &ConnParams) -> (Hca, Pair) {
    let mut h = Hca::start(props);
    h.bring_up(5, 6);
    let caps = QpCaps {
        sq_log: 5,
        ..Default::default()
    };
    let p = Pair::with_caps(&mut h, params, &caps);
    (h, p)
}

fn depths(h: &mut Hca, q: &Qp) -> (u8, u8) {
    let (st, a) = query_qp(h, q.uar, q.qpn);
    assert_eq!(st, QHCA_CMD_OK);
    (a.max_rd_atomic, a.max_dest_rd_atomic)
}

/// Only `mask` (plus `extra` and the state it names) and the two depths.
fn attr(mask: u32, state: u32, rd: u8, dest: u8) -> QpAttr {
    QpAttr {
        mask: mask
            | if state != u32::MAX {
                QHCA_QP_ATTR_STATE
            } else {
                0
            },
        state: if state != u32::MAX { state as u8 } else { 0 },
        max_rd_atomic: rd,
        max_dest_rd_atomic: dest,
        ..Default::default()
    }
}

/// Each bit only at its own transitions, values 0..16, QUERY_QP reports what was set, and a QP
/// that never sets them has 16 of each.
#[test]
fn each_depth_only_at_its_transitions_and_in_range() {
    let params = ConnParams::default();
    let (mut h, p) = start("num-uars=8", &params);
    let q = &p.a;
    assert_eq!(
        depths(&mut h, q),
        (16, 16),
        "after CREATE_QP and a plain connect"
    );
    let modify = |h: &mut Hca, a: &QpAttr| modify_qp(h, q.uar, q.qpn, a);
    let none = u32::MAX;

    assert_eq!(modify(&mut h, &attr(0, QHCA_QPS_RESET, 0, 0)), QHCA_CMD_OK);
    // RESET->INIT, INIT->INIT: neither.
    assert_eq!(
        modify(&mut h, &attr(RD, QHCA_QPS_INIT, 4, 0)),
        QHCA_CMD_BAD_PARAM
    );
    assert_eq!(
        modify(&mut h, &attr(DEST, QHCA_QPS_INIT, 0, 4)),
        QHCA_CMD_BAD_PARAM
    );
    assert_eq!(modify(&mut h, &attr(0, QHCA_QPS_INIT, 0, 0)), QHCA_CMD_OK);
    assert_eq!(modify(&mut h, &attr(RD, none, 4, 0)), QHCA_CMD_BAD_PARAM);
    assert_eq!(modify(&mut h, &attr(DEST, none, 0, 4)), QHCA_CMD_BAD_PARAM);

    // INIT->RTR: max_dest_rd_atomic only, 1..16.
    let rtr = |mask: u32, rd: u8, dest: u8| QpAttr {
        mask: mask
            | QHCA_QP_ATTR_STATE
            | QHCA_QP_ATTR_DEST_QPN
            | QHCA_QP_ATTR_RQ_PSN
            | QHCA_QP_ATTR_PATH_MTU,
        state: QHCA_QPS_RTR as u8,
        dest_qpn: p.b.qpn,
        rq_psn: PSN,
        path_mtu: 8,
        max_rd_atomic: rd,
        max_dest_rd_atomic: dest,
        ..Default::default()
    };
    assert_eq!(
        modify(&mut h, &rtr(RD, 4, 0)),
        QHCA_CMD_BAD_PARAM,
        "RD at INIT->RTR"
    );
    assert_eq!(
        modify(&mut h, &rtr(DEST, 0, 17)),
        QHCA_CMD_BAD_PARAM,
        "dest 17"
    );
    assert_eq!(
        modify(&mut h, &rtr(DEST, 0, 255)),
        QHCA_CMD_BAD_PARAM,
        "dest 255"
    );
    assert_eq!(
        modify(&mut h, &rtr(0, 0, 3)),
        QHCA_CMD_BAD_PARAM,
        "dest outside the mask"
    );
    assert_eq!(
        depths(&mut h, q),
        (16, 16),
        "a refused modify changes nothing"
    );
    assert_eq!(modify(&mut h, &rtr(DEST, 0, 1)), QHCA_CMD_OK);
    assert_eq!(depths(&mut h, q), (16, 1));
    // RTR->RTR: max_dest_rd_atomic again, not max_rd_atomic.
    assert_eq!(modify(&mut h, &attr(RD, none, 2, 0)), QHCA_CMD_BAD_PARAM);
    assert_eq!(modify(&mut h, &attr(DEST, none, 0, 16)), QHCA_CMD_OK);
    assert_eq!(depths(&mut h, q), (16, 16));
    assert_eq!(modify(&mut h, &attr(DEST, none, 0, 7)), QHCA_CMD_OK);

    // RTR->RTS: max_rd_atomic only, 1..16.
    let rts = |mask: u32, rd: u8, dest: u8| QpAttr {
        mask: mask
            | QHCA_QP_ATTR_STATE
            | QHCA_QP_ATTR_SQ_PSN
            | QHCA_QP_ATTR_TIMEOUT
            | QHCA_QP_ATTR_RETRY_CNT
            | QHCA_QP_ATTR_RNR_RETRY,
        state: QHCA_QPS_RTS as u8,
        sq_psn: PSN,
        timeout: 8,
        retry_cnt: 3,
        rnr_retry: 3,
        max_rd_atomic: rd,
        max_dest_rd_atomic: dest,
        ..Default::default()
    };
    assert_eq!(
        modify(&mut h, &rts(DEST, 0, 4)),
        QHCA_CMD_BAD_PARAM,
        "dest at RTR->RTS"
    );
    assert_eq!(modify(&mut h, &rts(RD, 17, 0)), QHCA_CMD_BAD_PARAM, "rd 17");
    assert_eq!(
        modify(&mut h, &rts(0, 5, 0)),
        QHCA_CMD_BAD_PARAM,
        "rd outside the mask"
    );
    assert_eq!(modify(&mut h, &rts(RD, 5, 0)), QHCA_CMD_OK);
    assert_eq!(depths(&mut h, q), (5, 7));
    // RTS->RTS: max_rd_atomic again, not max_dest_rd_atomic.
    assert_eq!(modify(&mut h, &attr(DEST, none, 0, 2)), QHCA_CMD_BAD_PARAM);
    assert_eq!(modify(&mut h, &attr(RD, none, 0, 0)), QHCA_CMD_OK);
    assert_eq!(depths(&mut h, q), (0, 7), "0: no READs or atomics");
    assert_eq!(modify(&mut h, &attr(RD, none, 16, 0)), QHCA_CMD_OK);
    assert_eq!(depths(&mut h, q), (16, 7));
    assert_eq!(modify(&mut h, &attr(RD, none, 1, 0)), QHCA_CMD_OK);
    // ERR and RESET take neither; RESET keeps the values.
    assert_eq!(
        modify(&mut h, &attr(RD, QHCA_QPS_ERR, 2, 0)),
        QHCA_CMD_BAD_PARAM
    );
    assert_eq!(
        modify(&mut h, &attr(DEST, QHCA_QPS_RESET, 0, 2)),
        QHCA_CMD_BAD_PARAM
    );
    assert_eq!(modify(&mut h, &attr(0, QHCA_QPS_RESET, 0, 0)), QHCA_CMD_OK);
    assert_eq!(depths(&mut h, q), (1, 7));
}

/// QUERY_DEVICE reports both maxima as 16.
#[test]
fn query_device_reports_the_maxima() {
    let mut h = Hca::start("num-uars=8");
    h.bring_up(5, 6);
    assert_eq!(h.query_device(qhca_qtest::hca::OUT_RAM, 128), QHCA_CMD_OK);
    let a = qhca_qtest::wire::decode_attr(&h.qt.memread(qhca_qtest::hca::OUT_RAM, 128));
    assert_eq!((a.max_qp_rd_atom, a.max_qp_init_rd_atom), (16, 16));
}

/// The responder QP back to INIT: the requester's packets are dropped on arrival.
fn mute(h: &mut Hca, q: &mut Qp, access: u32) {
    for (state, mask) in [
        (QHCA_QPS_RESET, QHCA_QP_ATTR_STATE),
        (QHCA_QPS_INIT, QHCA_QP_ATTR_STATE | QHCA_QP_ATTR_ACCESS),
    ] {
        let a = QpAttr {
            mask,
            state: state as u8,
            access: if state == QHCA_QPS_INIT { access } else { 0 },
            ..Default::default()
        };
        assert_eq!(modify_qp(h, q.uar, q.qpn, &a), QHCA_CMD_OK);
    }
    q.sq_pi = 0;
    q.rq_pi = 0;
}

fn read_wr(i: u64, local: u64, lkey: u32, remote: u64, rkey: u32, len: u32) -> Vec<u8> {
    SendWr {
        wr_id: 0x70 + i,
        opcode: QHCA_WR_RDMA_READ,
        flags: QHCA_WQE_SIGNALED,
        remote_addr: remote + i * len as u64,
        rkey,
        sges: vec![(local + i * len as u64, len, lkey)],
        ..Default::default()
    }
    .encode()
}

/// max_rd_atomic 1: of 4 one-packet READs posted at once towards a responder that does not
/// answer, one goes out (16 would without the attribute); once the responder is back, all 4
/// complete in order with the right data.
#[test]
fn max_rd_atomic_one_keeps_one_read_in_flight() {
    let params = ConnParams {
        timeout: 12, // ~17 ms: nothing is resent while the test counts
        max_rd_atomic: 1,
        ..Default::default()
    };
    let (mut h, mut p) = start("num-uars=8", &params);
    assert_eq!(depths(&mut h, &p.a), (1, 16));
    mute(&mut h, &mut p.b, params.access);
    let (local, lkey) = p.buf(&mut h, 4096, 0, QHCA_ACCESS_LOCAL_WRITE);
    let (remote, rkey) = p.buf(&mut h, 4096, 0, RW);
    h.qt.memwrite(remote, &pattern(4 * 64, 0x44));
    for i in 0..4u64 {
        p.a.write_send_raw(&mut h, &read_wr(i, local, lkey, remote, rkey, 64));
    }
    p.a.ring_sq(&mut h);
    h.settle();
    let (_, a) = query_qp(&mut h, p.uar, p.a.qpn);
    assert_eq!(a.sq_psn, PSN + 1, "READs in flight: {}", a.sq_psn - PSN);
    assert!(p.scq.poll(&mut h).is_none());

    let st = modify_qp(&mut h, p.b.uar, p.b.qpn, &attr(0, QHCA_QPS_RESET, 0, 0));
    assert_eq!(st, QHCA_CMD_OK);
    bring_to_rts(&mut h, &p.b, p.a.qpn, PSN, &params);
    let got = p.scq.wait_n(&mut h, 4);
    let want: Vec<_> = (0..4u16)
        .map(|i| (0x70 + i as u64, QHCA_WC_SUCCESS, i))
        .collect();
    assert_eq!(got, want);
    assert_eq!(h.qt.memread(local, 4 * 64), pattern(4 * 64, 0x44));
}

/// A responder with max_dest_rd_atomic 1 and a requester with 16: two 16 KiB READs (64
/// packets each at MTU 256) in one doorbell. The second arrives while the first is still
/// being answered: an invalid request. The responder NAKs it and goes to ERR (QP_ERR event);
/// the requester completes its oldest outstanding WQE, the READ whose answer stopped, with
/// REM_INV_REQ_ERR, flushes the other and goes to ERR. With the default 16 both complete.
#[test]
fn a_read_beyond_the_responder_resources_is_an_invalid_request() {
    const LEN: u32 = 16 * 1024;
    for dest in [16u8, 1] {
        let params = ConnParams {
            max_dest_rd_atomic: dest,
            ..Default::default()
        };
        let (mut h, mut p) = start("num-uars=8", &params);
        assert_eq!(depths(&mut h, &p.b), (16, dest));
        let (local, lkey) = p.buf(&mut h, 2 * LEN as u64, 0, QHCA_ACCESS_LOCAL_WRITE);
        let (remote, rkey) = p.buf(&mut h, 2 * LEN as u64, 0x5a, RW);
        for i in 0..2u64 {
            p.a.write_send_raw(&mut h, &read_wr(i, local, lkey, remote, rkey, LEN));
        }
        p.a.ring_sq(&mut h);
        let got = p.scq.wait_n(&mut h, 2);
        assert_eq!(got.len(), 2, "{got:?}");
        if dest == 16 {
            assert_eq!(
                got,
                vec![(0x70, QHCA_WC_SUCCESS, 0), (0x71, QHCA_WC_SUCCESS, 1)]
            );
            assert!(h
                .qt
                .memread(local, 2 * LEN as usize)
                .iter()
                .all(|&b| b == 0x5a));
            assert!(take_events(&mut h).is_empty());
            continue;
        }
        assert_eq!(
            got,
            vec![
                (0x70, QHCA_WC_REM_INV_REQ_ERR, 0),
                (0x71, QHCA_WC_WR_FLUSH_ERR, 1)
            ]
        );
        h.settle();
        let mut ev = event_keys(&take_events(&mut h));
        ev.sort();
        let mut want = vec![
            (QHCA_EQE_QP_ERR, p.a.qpn as u64, p.uar as u64),
            (QHCA_EQE_QP_ERR, p.b.qpn as u64, p.uar as u64),
        ];
        want.sort();
        assert_eq!(ev, want);
        let (_, a) = query_qp(&mut h, p.uar, p.a.qpn);
        let (_, b) = query_qp(&mut h, p.uar, p.b.qpn);
        assert_eq!((a.state, b.state), (QHCA_QPS_ERR as u8, QHCA_QPS_ERR as u8));
    }
}

/// 0 is a depth too, meaning none (the verbs', and what rdma_cm asks for when a connection
/// reads nothing): a requester with `max_rd_atomic` 0 completes a READ with LOC_QP_OP_ERR,
/// after the WRITE before it, and goes to ERR; a responder with `max_dest_rd_atomic` 0 (set at
/// INIT->RTR) answers a READ as an invalid request.
#[test]
fn depth_zero_means_no_reads_or_atomics() {
    let params = ConnParams::default();
    let (mut h, mut p) = start("num-uars=8", &params);
    let (local, lkey) = p.buf(&mut h, 4096, 0, QHCA_ACCESS_LOCAL_WRITE);
    let (remote, rkey) = p.buf(&mut h, 4096, 0x5a, RW);
    let st = modify_qp(&mut h, p.uar, p.a.qpn, &attr(RD, u32::MAX, 0, 0));
    assert_eq!(st, QHCA_CMD_OK);
    assert_eq!(depths(&mut h, &p.a), (0, 16));
    p.a.write_send_raw(
        &mut h,
        &SendWr {
            wr_id: 0x60,
            ..SendWr::write(local, 64, lkey, remote + 1024, rkey)
        }
        .encode(),
    );
    p.a.write_send_raw(&mut h, &read_wr(0, local, lkey, remote, rkey, 64));
    p.a.ring_sq(&mut h);
    let mut got = Vec::new();
    assert!(h.poll(|h| {
        while let Some(c) = p.scq.poll(h) {
            got.push((c.wr_id, c.status as u32));
        }
        got.len() == 2
    }));
    assert_eq!(
        got,
        vec![(0x60, QHCA_WC_SUCCESS), (0x70, QHCA_WC_LOC_QP_OP_ERR)]
    );
    assert!(
        h.qt.memread(local, 64).iter().all(|&b| b == 0),
        "nothing read"
    );

    // The responder side, on a fresh pair: B reconnected with no responder resources.
    let (mut h, mut p) = start("num-uars=8", &params);
    let (local, lkey) = p.buf(&mut h, 4096, 0, QHCA_ACCESS_LOCAL_WRITE);
    let (remote, rkey) = p.buf(&mut h, 4096, 0x5a, RW);
    mute(&mut h, &mut p.b, params.access);
    let rtr = QpAttr {
        mask: DEST
            | QHCA_QP_ATTR_STATE
            | QHCA_QP_ATTR_DEST_QPN
            | QHCA_QP_ATTR_RQ_PSN
            | QHCA_QP_ATTR_PATH_MTU,
        state: QHCA_QPS_RTR as u8,
        dest_qpn: p.a.qpn,
        rq_psn: PSN,
        path_mtu: 8,
        max_dest_rd_atomic: 0,
        ..Default::default()
    };
    assert_eq!(modify_qp(&mut h, p.b.uar, p.b.qpn, &rtr), QHCA_CMD_OK);
    assert_eq!(depths(&mut h, &p.b), (16, 0));
    p.a.write_send_raw(&mut h, &read_wr(0, local, lkey, remote, rkey, 64));
    p.a.ring_sq(&mut h);
    let c = p.scq.wait(&mut h);
    assert_eq!(
        (c.wr_id, c.status as u32),
        (0x70, QHCA_WC_REM_INV_REQ_ERR),
        "{c:?}"
    );
    assert!(
        h.qt.memread(local, 64).iter().all(|&b| b == 0),
        "nothing read"
    );
}
