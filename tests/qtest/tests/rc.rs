// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The RC engine end to end over the loopback wire: two QPs of one device, WQEs and page lists
//! in guest RAM written by the test, doorbells rung, data checked byte for byte, CQEs checked
//! field by field. Then the failures: keys, rights, bounds, PDs, RNR, lost packets, CQ overrun,
//! and what the QP and the rest of its queue do afterwards.

use qhca_qtest::abi::*;
use qhca_qtest::verbs::*;
use qhca_qtest::Hca;

const RW: u32 = QHCA_ACCESS_LOCAL_WRITE | QHCA_ACCESS_REMOTE_WRITE | QHCA_ACCESS_REMOTE_READ;

fn setup(p: &ConnParams) -> (Hca, Pair) {
    let mut h = Hca::start("num-uars=8");
    h.bring_up(5, 6);
    let pair = Pair::new(&mut h, p);
    (h, pair)
}

fn expect_cqe(c: &Cqe, wr_id: u64, opcode: u32, status: u32) {
    assert_eq!(
        (c.wr_id, c.opcode as u32, c.status as u32),
        (wr_id, opcode, status),
        "CQE {c:?}"
    );
}

#[test]
fn write_send_read_atomic_between_two_qps() {
    let (mut h, mut p) = setup(&ConnParams::default());
    let caps = h.reg(QHCA_REG_CAPS_LO) as u64;
    assert_ne!(caps & QHCA_CAP_RC as u64, 0, "QHCA_CAP_RC advertised");
    let mtu = 256usize;

    // RDMA WRITE of 1000 bytes (4 packets at MTU 256) into the middle of a 2-page target.
    let data = pattern(1000, 7);
    let (src, lkey) = p.buf(&mut h, 4096, 0, QHCA_ACCESS_LOCAL_WRITE);
    h.qt.memwrite(src + 3, &data);
    let (dst, rkey) = p.buf(&mut h, 8192, 0xee, RW);
    p.a.post_send(
        &mut h,
        &SendWr {
            wr_id: 0x1111,
            opcode: QHCA_WR_RDMA_WRITE,
            flags: QHCA_WQE_SIGNALED,
            remote_addr: dst + 4000,
            rkey,
            sges: vec![(src + 3, 1000, lkey)],
            ..Default::default()
        },
    );
    let c = p.scq.wait(&mut h);
    expect_cqe(&c, 0x1111, QHCA_WC_RDMA_WRITE, QHCA_WC_SUCCESS);
    assert_eq!(c.qpn, p.a.qpn);
    let got = h.qt.memread(dst, 8192);
    assert_eq!(&got[4000..5000], &data[..], "written bytes");
    assert!(
        got[..4000].iter().all(|&b| b == 0xee),
        "before the target untouched"
    );
    assert!(
        got[5000..].iter().all(|&b| b == 0xee),
        "after the target untouched"
    );
    p.rcq.expect_empty(&mut h);

    // SEND of 700 bytes from two SGEs into a receive of three SGEs (100 + 300 + 1000).
    let (rbuf, rlkey) = p.buf(&mut h, 4096, 0x55, QHCA_ACCESS_LOCAL_WRITE);
    p.b.post_recv(
        &mut h,
        0x2222,
        &[
            (rbuf, 100, rlkey),
            (rbuf + 1000, 300, rlkey),
            (rbuf + 2000, 1000, rlkey),
        ],
    );
    let sdata = pattern(700, 9);
    h.qt.memwrite(src + 1024, &sdata[..200]);
    h.qt.memwrite(src + 2048, &sdata[200..]);
    p.a.post_send(
        &mut h,
        &SendWr {
            wr_id: 0x3333,
            opcode: QHCA_WR_SEND,
            flags: QHCA_WQE_SIGNALED,
            sges: vec![(src + 1024, 200, lkey), (src + 2048, 500, lkey)],
            ..Default::default()
        },
    );
    expect_cqe(&p.scq.wait(&mut h), 0x3333, QHCA_WC_SEND, QHCA_WC_SUCCESS);
    let r = p.rcq.wait(&mut h);
    expect_cqe(&r, 0x2222, QHCA_WC_RECV, QHCA_WC_SUCCESS);
    assert_eq!(
        (r.byte_len, r.qpn, r.src_qp, r.flags),
        (700, p.b.qpn, p.a.qpn, 0)
    );
    let got = h.qt.memread(rbuf, 4096);
    assert_eq!(&got[..100], &sdata[..100]);
    assert_eq!(&got[1000..1300], &sdata[100..400]);
    assert_eq!(&got[2000..2300], &sdata[400..700]);
    assert!(got[100..1000].iter().all(|&b| b == 0x55));
    assert!(got[1300..2000].iter().all(|&b| b == 0x55));
    assert!(
        got[2300..].iter().all(|&b| b == 0x55),
        "beyond the message untouched"
    );

    // SEND_WITH_IMM, inline, unsignaled: the receiver sees the immediate, the sender no CQE.
    p.b.post_recv(&mut h, 0x4444, &[(rbuf, 64, rlkey)]);
    let idata = pattern(50, 3);
    p.a.post_send(
        &mut h,
        &SendWr {
            wr_id: 0x5555,
            opcode: QHCA_WR_SEND_WITH_IMM,
            imm: 0xdead_beef,
            inline: Some(idata.clone()),
            ..Default::default()
        },
    );
    let r = p.rcq.wait(&mut h);
    expect_cqe(&r, 0x4444, QHCA_WC_RECV, QHCA_WC_SUCCESS);
    assert_eq!(
        (r.byte_len, r.imm, r.flags as u32),
        (50, 0xdead_beef, QHCA_CQE_WITH_IMM)
    );
    assert_eq!(h.qt.memread(rbuf, 50), idata);
    p.scq.expect_empty(&mut h);

    // RDMA WRITE_WITH_IMM: data in place, a receive consumed without data, its byte_len the
    // message length.
    p.b.post_recv(&mut h, 0x6666, &[]);
    p.a.post_send(
        &mut h,
        &SendWr {
            wr_id: 0x7777,
            opcode: QHCA_WR_RDMA_WRITE_WITH_IMM,
            flags: QHCA_WQE_SIGNALED,
            imm: 0x0102_0304,
            remote_addr: dst,
            rkey,
            sges: vec![(src + 3, 300, lkey)],
            ..Default::default()
        },
    );
    expect_cqe(
        &p.scq.wait(&mut h),
        0x7777,
        QHCA_WC_RDMA_WRITE,
        QHCA_WC_SUCCESS,
    );
    let r = p.rcq.wait(&mut h);
    expect_cqe(&r, 0x6666, QHCA_WC_RECV_RDMA_WITH_IMM, QHCA_WC_SUCCESS);
    assert_eq!((r.byte_len, r.imm), (300, 0x0102_0304));
    assert_eq!(h.qt.memread(dst, 300), data[..300].to_vec());

    // RDMA READ of 600 bytes (3 response packets) into a local buffer.
    let rdata = pattern(600, 11);
    h.qt.memwrite(dst + 6000, &rdata);
    let (lbuf, llkey) = p.buf(&mut h, 4096, 0x33, QHCA_ACCESS_LOCAL_WRITE);
    p.a.post_send(
        &mut h,
        &SendWr {
            wr_id: 0x8888,
            opcode: QHCA_WR_RDMA_READ,
            flags: QHCA_WQE_SIGNALED,
            remote_addr: dst + 6000,
            rkey,
            sges: vec![(lbuf + 10, 600, llkey)],
            ..Default::default()
        },
    );
    let c = p.scq.wait(&mut h);
    expect_cqe(&c, 0x8888, QHCA_WC_RDMA_READ, QHCA_WC_SUCCESS);
    assert_eq!(c.byte_len, 600);
    let got = h.qt.memread(lbuf, 4096);
    assert_eq!(&got[10..610], &rdata[..]);
    assert!(got[..10].iter().all(|&b| b == 0x33) && got[610..].iter().all(|&b| b == 0x33));
    assert!(600 > 2 * mtu);

    // Atomics on an 8-byte-aligned target.
    let (tgt, tkey) = p.buf(
        &mut h,
        64,
        0,
        QHCA_ACCESS_LOCAL_WRITE | QHCA_ACCESS_REMOTE_ATOMIC,
    );
    h.qt.writeq(tgt + 8, 100);
    p.a.post_send(
        &mut h,
        &SendWr {
            wr_id: 0x9999,
            opcode: QHCA_WR_ATOMIC_FETCH_AND_ADD,
            flags: QHCA_WQE_SIGNALED,
            remote_addr: tgt + 8,
            rkey: tkey,
            swap_add: 23,
            sges: vec![(lbuf + 1000, 8, llkey)],
            ..Default::default()
        },
    );
    let c = p.scq.wait(&mut h);
    expect_cqe(&c, 0x9999, QHCA_WC_FETCH_ADD, QHCA_WC_SUCCESS);
    assert_eq!(c.byte_len, 8);
    assert_eq!(
        h.qt.readq(lbuf + 1000),
        100,
        "fetch-add returns the old value"
    );
    assert_eq!(h.qt.readq(tgt + 8), 123);
    for (compare, swap, want_old, want_new) in [(999, 5, 123, 123), (123, 5, 123, 5)] {
        p.a.post_send(
            &mut h,
            &SendWr {
                wr_id: 0xaaaa,
                opcode: QHCA_WR_ATOMIC_CMP_AND_SWP,
                flags: QHCA_WQE_SIGNALED,
                remote_addr: tgt + 8,
                rkey: tkey,
                swap_add: swap,
                compare,
                sges: vec![(lbuf + 1008, 8, llkey)],
                ..Default::default()
            },
        );
        expect_cqe(
            &p.scq.wait(&mut h),
            0xaaaa,
            QHCA_WC_COMP_SWAP,
            QHCA_WC_SUCCESS,
        );
        assert_eq!(h.qt.readq(lbuf + 1008), want_old);
        assert_eq!(h.qt.readq(tgt + 8), want_new);
    }
    assert_eq!(h.qt.readq(tgt), 0, "neighbouring word untouched");
    assert_eq!(h.qt.readq(tgt + 16), 0, "neighbouring word untouched");

    // A batch: several WQEs, one doorbell, only the signaled ones complete.
    for i in 0..5u64 {
        let b = SendWr {
            wr_id: 0xb000 + i,
            opcode: QHCA_WR_RDMA_WRITE,
            flags: if i % 2 == 0 { QHCA_WQE_SIGNALED } else { 0 },
            remote_addr: dst + 100 * i,
            rkey,
            inline: Some(vec![i as u8 + 1; 100]),
            ..Default::default()
        }
        .encode();
        p.a.write_send_raw(&mut h, &b);
    }
    p.a.ring_sq(&mut h);
    for i in [0u64, 2, 4] {
        expect_cqe(
            &p.scq.wait(&mut h),
            0xb000 + i,
            QHCA_WC_RDMA_WRITE,
            QHCA_WC_SUCCESS,
        );
    }
    p.scq.expect_empty(&mut h);
    let got = h.qt.memread(dst, 500);
    for i in 0..5usize {
        assert!(got[i * 100..i * 100 + 100]
            .iter()
            .all(|&b| b == i as u8 + 1));
    }
    assert!(
        take_events(&mut h).is_empty(),
        "no async events on the happy path"
    );
    let (_, a) = query_qp(&mut h, p.uar, p.a.qpn);
    assert_eq!(a.state, QHCA_QPS_RTS as u8);
    assert_eq!(h.counters().guest_errors, 0);
}

/// Posts one WQE on QP a and returns its CQE; then checks QP a went to ERR with a QP_ERR
/// event, and reconnects the pair.
fn failing(h: &mut Hca, p: &mut Pair, wr: SendWr, status: u32, psn: u32) -> Cqe {
    p.a.post_send(h, &wr);
    let c = p.scq.wait(h);
    assert_eq!(
        (c.wr_id, c.status as u32),
        (wr.wr_id, status),
        "expected status {status:#x} for {wr:?}: {c:?}"
    );
    // The next WQE is flushed.
    p.a.post_send(
        h,
        &SendWr {
            wr_id: 0xf1,
            opcode: QHCA_WR_SEND,
            ..Default::default()
        },
    );
    let f = p.scq.wait(h);
    expect_cqe(&f, 0xf1, QHCA_WC_SEND, QHCA_WC_WR_FLUSH_ERR);
    let ev = take_events(h);
    assert_eq!(query_qp(h, p.uar, p.a.qpn).1.state, QHCA_QPS_ERR as u8);
    assert!(
        event_keys(&ev).contains(&(QHCA_EQE_QP_ERR, p.a.qpn as u64, p.uar as u64)),
        "QP_ERR event for QP {}: {ev:?}",
        p.a.qpn
    );
    p.reconnect(h, &ConnParams::default(), psn);
    c
}

#[test]
fn protection_failures_leave_memory_alone() {
    let (mut h, mut p) = setup(&ConnParams::default());
    let (src, lkey) = p.buf(&mut h, 4096, 0xaa, QHCA_ACCESS_LOCAL_WRITE);
    // The target: 100 bytes inside a page of 0xee.
    let page = p.m.alloc(&mut h, 4096);
    h.qt.memset(page, 4096, 0xee);
    let (st, rkey) = reg_mr(&mut h, &mut p.m, p.uar, p.pdn, page + 1000, 100, RW);
    assert_eq!(st, QHCA_CMD_OK);
    let (st, ro_key) = reg_mr(
        &mut h,
        &mut p.m,
        p.uar,
        p.pdn,
        page + 1000,
        100,
        QHCA_ACCESS_REMOTE_READ,
    );
    assert_eq!(st, QHCA_CMD_OK);
    let (_, pd2) = alloc_pd(&mut h, p.uar);
    let (st, other_pd_key) = reg_mr(&mut h, &mut p.m, p.uar, pd2, page + 1000, 100, RW);
    assert_eq!(st, QHCA_CMD_OK);
    let (st, stale) = reg_mr(&mut h, &mut p.m, p.uar, p.pdn, page + 1000, 100, RW);
    assert_eq!(st, QHCA_CMD_OK);
    assert_eq!(
        destroy(&mut h, QHCA_CMD_DEREG_MR, p.uar, stale),
        QHCA_CMD_OK
    );

    let write = |addr: u64, len: u32, key: u32| SendWr {
        wr_id: 0xe0,
        opcode: QHCA_WR_RDMA_WRITE,
        flags: QHCA_WQE_SIGNALED,
        remote_addr: addr,
        rkey: key,
        sges: vec![(src, len, lkey)],
        ..Default::default()
    };
    let cases: Vec<(&str, SendWr, u32)> = vec![
        (
            "stale R_Key",
            write(page + 1000, 100, stale),
            QHCA_WC_REM_ACCESS_ERR,
        ),
        (
            "R_Key never issued",
            write(page + 1000, 100, 0xfff_fff00),
            QHCA_WC_REM_ACCESS_ERR,
        ),
        (
            "MR without REMOTE_WRITE",
            write(page + 1000, 100, ro_key),
            QHCA_WC_REM_ACCESS_ERR,
        ),
        (
            "MR of another PD",
            write(page + 1000, 100, other_pd_key),
            QHCA_WC_REM_ACCESS_ERR,
        ),
        (
            "one byte past the end",
            write(page + 1000, 101, rkey),
            QHCA_WC_REM_ACCESS_ERR,
        ),
        (
            "one byte before the start",
            write(page + 999, 100, rkey),
            QHCA_WC_REM_ACCESS_ERR,
        ),
        (
            "last byte plus one",
            write(page + 1100, 1, rkey),
            QHCA_WC_REM_ACCESS_ERR,
        ),
        (
            "bad local L_Key",
            write(page + 1000, 100, rkey ^ 0x100),
            QHCA_WC_SUCCESS,
        ),
    ];
    let mut psn = 0x1000;
    for (what, mut wr, want) in cases {
        if want == QHCA_WC_SUCCESS {
            // Local key failure instead: the remote side is fine.
            wr.sges = vec![(src, 100, lkey ^ 0x100)];
            let c = failing(&mut h, &mut p, wr, QHCA_WC_LOC_PROT_ERR, psn);
            assert_eq!(c.opcode as u32, QHCA_WC_RDMA_WRITE, "{what}");
        } else {
            failing(&mut h, &mut p, wr, want, psn);
        }
        psn += 0x100;
        let got = h.qt.memread(page, 4096);
        assert!(
            got.iter().all(|&b| b == 0xee),
            "{what}: target page changed"
        );
    }

    // The exact bounds work: all 100 bytes, first byte, last byte.
    for (addr, len) in [(page + 1000, 100u32), (page + 1000, 1), (page + 1099, 1)] {
        p.a.post_send(&mut h, &write(addr, len, rkey));
        expect_cqe(
            &p.scq.wait(&mut h),
            0xe0,
            QHCA_WC_RDMA_WRITE,
            QHCA_WC_SUCCESS,
        );
    }
    let got = h.qt.memread(page, 4096);
    assert!(got[..1000].iter().all(|&b| b == 0xee) && got[1100..].iter().all(|&b| b == 0xee));
    assert!(got[1000..1100].iter().all(|&b| b == 0xaa));

    // The QP's own rights: a responder without REMOTE_WRITE refuses even a good key.
    let st = modify_qp(
        &mut h,
        p.uar,
        p.b.qpn,
        &QpAttr {
            mask: QHCA_QP_ATTR_ACCESS,
            access: QHCA_ACCESS_REMOTE_READ,
            ..Default::default()
        },
    );
    assert_eq!(st, QHCA_CMD_OK);
    h.qt.memset(page, 4096, 0xee);
    failing(
        &mut h,
        &mut p,
        write(page + 1000, 100, rkey),
        QHCA_WC_REM_ACCESS_ERR,
        psn,
    );
    assert!(h.qt.memread(page, 4096).iter().all(|&b| b == 0xee));
    psn += 0x100;

    // RDMA READ into a local MR without LOCAL_WRITE: a local protection error.
    let (ro_local, ro_lkey) = p.buf(&mut h, 4096, 0x77, 0);
    let rd = SendWr {
        wr_id: 0xe1,
        opcode: QHCA_WR_RDMA_READ,
        flags: QHCA_WQE_SIGNALED,
        remote_addr: page + 1000,
        rkey,
        sges: vec![(ro_local, 100, ro_lkey)],
        ..Default::default()
    };
    failing(&mut h, &mut p, rd, QHCA_WC_LOC_PROT_ERR, psn);
    assert!(h.qt.memread(ro_local, 4096).iter().all(|&b| b == 0x77));
    psn += 0x100;

    // A READ past the end of the remote MR.
    let (lbuf, llkey) = p.buf(&mut h, 4096, 0x66, QHCA_ACCESS_LOCAL_WRITE);
    let rd = SendWr {
        wr_id: 0xe2,
        opcode: QHCA_WR_RDMA_READ,
        flags: QHCA_WQE_SIGNALED,
        remote_addr: page + 1001,
        rkey,
        sges: vec![(lbuf, 100, llkey)],
        ..Default::default()
    };
    failing(&mut h, &mut p, rd, QHCA_WC_REM_ACCESS_ERR, psn);
    assert!(h.qt.memread(lbuf, 4096).iter().all(|&b| b == 0x66));
    psn += 0x100;

    // Atomics: misaligned is an invalid request, a key without REMOTE_ATOMIC an access error.
    let at = |addr: u64, key: u32| SendWr {
        wr_id: 0xe3,
        opcode: QHCA_WR_ATOMIC_FETCH_AND_ADD,
        flags: QHCA_WQE_SIGNALED,
        remote_addr: addr,
        rkey: key,
        swap_add: 1,
        sges: vec![(lbuf, 8, llkey)],
        ..Default::default()
    };
    let (abuf, akey) = p.buf(
        &mut h,
        64,
        0x11,
        QHCA_ACCESS_LOCAL_WRITE | QHCA_ACCESS_REMOTE_ATOMIC,
    );
    failing(
        &mut h,
        &mut p,
        at(abuf + 4, akey),
        QHCA_WC_REM_INV_REQ_ERR,
        psn,
    );
    psn += 0x100;
    failing(
        &mut h,
        &mut p,
        at(page + 1000, rkey),
        QHCA_WC_REM_ACCESS_ERR,
        psn,
    );
    assert!(h.qt.memread(abuf, 64).iter().all(|&b| b == 0x11));
    assert!(h.qt.memread(lbuf, 4096).iter().all(|&b| b == 0x66));

    // A SEND longer than the receive buffer: the receiver completes with LOC_LEN_ERR, the
    // sender with REM_INV_REQ_ERR, nothing written past the receive buffer.
    let (rbuf, rlkey) = p.buf(&mut h, 4096, 0x44, QHCA_ACCESS_LOCAL_WRITE);
    p.b.post_recv(&mut h, 0xd0, &[(rbuf, 50, rlkey)]);
    let send = SendWr {
        wr_id: 0xe4,
        opcode: QHCA_WR_SEND,
        flags: QHCA_WQE_SIGNALED,
        sges: vec![(src, 51, lkey)],
        ..Default::default()
    };
    p.a.post_send(&mut h, &send);
    expect_cqe(
        &p.scq.wait(&mut h),
        0xe4,
        QHCA_WC_SEND,
        QHCA_WC_REM_INV_REQ_ERR,
    );
    expect_cqe(&p.rcq.wait(&mut h), 0xd0, QHCA_WC_RECV, QHCA_WC_LOC_LEN_ERR);
    assert!(h
        .qt
        .memread(rbuf + 50, 4096 - 50)
        .iter()
        .all(|&b| b == 0x44));
    let ev = event_keys(&take_events(&mut h));
    assert!(
        ev.contains(&(QHCA_EQE_QP_ERR, p.a.qpn as u64, p.uar as u64)),
        "{ev:?}"
    );
    assert!(
        ev.contains(&(QHCA_EQE_QP_ERR, p.b.qpn as u64, p.uar as u64)),
        "{ev:?}"
    );
    assert_eq!(h.status(), QHCA_STATUS_READY);
}

#[test]
fn rnr_without_retries_fails_with_retries_waits() {
    let p0 = ConnParams {
        rnr_retry: 0,
        ..Default::default()
    };
    let (mut h, mut p) = setup(&p0);
    let (src, lkey) = p.buf(&mut h, 4096, 0x5a, QHCA_ACCESS_LOCAL_WRITE);
    let send = SendWr {
        wr_id: 0xc0,
        opcode: QHCA_WR_SEND,
        flags: QHCA_WQE_SIGNALED,
        sges: vec![(src, 64, lkey)],
        ..Default::default()
    };
    // No receive posted, no RNR retries: RNR_RETRY_EXC_ERR at once.
    p.a.post_send(&mut h, &send);
    expect_cqe(
        &p.scq.wait(&mut h),
        0xc0,
        QHCA_WC_SEND,
        QHCA_WC_RNR_RETRY_EXC_ERR,
    );

    // Two retries with the shortest timer: three RNR NAKs, then the error.
    let p2 = ConnParams {
        rnr_retry: 2,
        min_rnr_timer: 1,
        ..Default::default()
    };
    p.reconnect(&mut h, &p2, 0x200);
    p.a.post_send(&mut h, &send);
    expect_cqe(
        &p.scq.wait(&mut h),
        0xc0,
        QHCA_WC_SEND,
        QHCA_WC_RNR_RETRY_EXC_ERR,
    );

    // rnr_retry 7 retries for ever: the send waits (and the QP stays in RTS) until a receive
    // is posted, then completes; the receiver gets the data once.
    let p7 = ConnParams {
        rnr_retry: 7,
        min_rnr_timer: 14, // 1.28 ms
        ..Default::default()
    };
    p.reconnect(&mut h, &p7, 0x300);
    p.a.post_send(&mut h, &send);
    for _ in 0..5 {
        h.settle(); // 3 ms of virtual time each
    }
    assert!(
        p.scq.poll(&mut h).is_none(),
        "send completed without a receive"
    );
    assert_eq!(query_qp(&mut h, p.uar, p.a.qpn).1.state, QHCA_QPS_RTS as u8);
    let (rbuf, rlkey) = p.buf(&mut h, 4096, 0, QHCA_ACCESS_LOCAL_WRITE);
    p.b.post_recv(&mut h, 0xd1, &[(rbuf, 4096, rlkey)]);
    expect_cqe(&p.scq.wait(&mut h), 0xc0, QHCA_WC_SEND, QHCA_WC_SUCCESS);
    let r = p.rcq.wait(&mut h);
    expect_cqe(&r, 0xd1, QHCA_WC_RECV, QHCA_WC_SUCCESS);
    assert_eq!(r.byte_len, 64);
    assert!(h.qt.memread(rbuf, 64).iter().all(|&b| b == 0x5a));
    p.rcq.expect_empty(&mut h);
    assert!(take_events(&mut h).is_empty());
}

#[test]
fn a_qp_blocked_in_rnr_does_not_stop_the_others() {
    let p7 = ConnParams {
        rnr_retry: 7,
        min_rnr_timer: 0, // 655 ms: blocked for the whole test
        ..Default::default()
    };
    let (mut h, mut p) = setup(&p7);
    // A second pair in the same context.
    let (_, c) = create_cq(&mut h, &mut p.m, p.uar, 4);
    let caps = QpCaps::default();
    let (_, mut x) = create_qp(&mut h, &mut p.m, p.uar, p.pdn, c.cqn, c.cqn, &caps);
    let (_, y) = create_qp(&mut h, &mut p.m, p.uar, p.pdn, c.cqn, c.cqn, &caps);
    bring_to_rts(&mut h, &x, y.qpn, 0, &ConnParams::default());
    bring_to_rts(&mut h, &y, x.qpn, 0, &ConnParams::default());
    let mut c = c;
    let (src, lkey) = p.buf(&mut h, 4096, 1, QHCA_ACCESS_LOCAL_WRITE);
    let (dst, rkey) = p.buf(&mut h, 4096, 0, RW);
    // QP a: a SEND nobody will receive, then more work behind it.
    for i in 0..3 {
        p.a.post_send(
            &mut h,
            &SendWr {
                wr_id: i,
                opcode: QHCA_WR_SEND,
                flags: QHCA_WQE_SIGNALED,
                sges: vec![(src, 8, lkey)],
                ..Default::default()
            },
        );
    }
    // QP x: 20 writes, all complete.
    for i in 0..12u64 {
        x.post_send(
            &mut h,
            &SendWr {
                wr_id: 0x100 + i,
                opcode: QHCA_WR_RDMA_WRITE,
                flags: QHCA_WQE_SIGNALED,
                remote_addr: dst + i * 64,
                rkey,
                sges: vec![(src, 64, lkey)],
                ..Default::default()
            },
        );
    }
    for i in 0..12u64 {
        expect_cqe(
            &c.wait(&mut h),
            0x100 + i,
            QHCA_WC_RDMA_WRITE,
            QHCA_WC_SUCCESS,
        );
    }
    assert!(h.qt.memread(dst, 12 * 64).iter().all(|&b| b == 1));
    assert!(p.scq.poll(&mut h).is_none());
    // Moving the blocked QP to ERR flushes all three.
    let st = modify_qp(
        &mut h,
        p.uar,
        p.a.qpn,
        &QpAttr {
            mask: QHCA_QP_ATTR_STATE,
            state: QHCA_QPS_ERR as u8,
            ..Default::default()
        },
    );
    assert_eq!(st, QHCA_CMD_OK);
    for i in 0..3 {
        expect_cqe(&p.scq.wait(&mut h), i, QHCA_WC_SEND, QHCA_WC_WR_FLUSH_ERR);
    }
    assert!(
        take_events(&mut h).is_empty(),
        "a requested ERR posts no event"
    );
}

#[test]
fn lost_packets_exhaust_retry_cnt() {
    let (mut h, mut p) = setup(&ConnParams::default());
    // QP a talks to a QP that does not exist: every packet is dropped, the ACK timer fires.
    let st = modify_qp(
        &mut h,
        p.uar,
        p.a.qpn,
        &QpAttr {
            mask: QHCA_QP_ATTR_STATE,
            state: QHCA_QPS_RESET as u8,
            ..Default::default()
        },
    );
    assert_eq!(st, QHCA_CMD_OK);
    p.a.sq_pi = 0;
    bring_to_rts(
        &mut h,
        &p.a,
        0x7777,
        0,
        &ConnParams {
            timeout: 4, // 65 us
            retry_cnt: 2,
            ..Default::default()
        },
    );
    let (src, lkey) = p.buf(&mut h, 4096, 1, QHCA_ACCESS_LOCAL_WRITE);
    p.a.post_send(
        &mut h,
        &SendWr {
            wr_id: 0x10,
            opcode: QHCA_WR_SEND,
            sges: vec![(src, 8, lkey)],
            ..Default::default()
        },
    );
    expect_cqe(
        &p.scq.wait(&mut h),
        0x10,
        QHCA_WC_SEND,
        QHCA_WC_RETRY_EXC_ERR,
    );
    let ev = event_keys(&take_events(&mut h));
    assert_eq!(ev, vec![(QHCA_EQE_QP_ERR, p.a.qpn as u64, p.uar as u64)]);
}

#[test]
fn cq_arm_event_and_overrun() {
    let (mut h, mut p) = setup(&ConnParams::default());
    let (src, lkey) = p.buf(&mut h, 4096, 1, QHCA_ACCESS_LOCAL_WRITE);
    let (dst, rkey) = p.buf(&mut h, 4096, 0, RW);
    let w = SendWr {
        wr_id: 0x20,
        opcode: QHCA_WR_RDMA_WRITE,
        flags: QHCA_WQE_SIGNALED,
        remote_addr: dst,
        rkey,
        sges: vec![(src, 8, lkey)],
        ..Default::default()
    };
    // Armed: the next CQE posts CQ_COMP {cqn, uar} once.
    p.scq.arm(&mut h);
    p.a.post_send(&mut h, &w);
    p.scq.wait(&mut h);
    let ev = event_keys(&take_events(&mut h));
    assert_eq!(ev, vec![(QHCA_EQE_CQ_COMP, p.scq.cqn as u64, p.uar as u64)]);
    p.a.post_send(&mut h, &w);
    p.scq.wait(&mut h);
    assert!(take_events(&mut h).is_empty(), "disarmed after one event");
    // Arming behind CQEs already there fires at once.
    p.a.post_send(&mut h, &w);
    h.settle();
    p.scq.arm(&mut h);
    let ev = event_keys(&take_events(&mut h));
    assert_eq!(ev, vec![(QHCA_EQE_CQ_COMP, p.scq.cqn as u64, p.uar as u64)]);
    p.scq.wait(&mut h);

    // A 2-entry CQ that nobody consumes: the third CQE overruns it.
    let (_, mut small) = create_cq(&mut h, &mut p.m, p.uar, 1);
    let caps = QpCaps::default();
    let (_, mut x) = create_qp(&mut h, &mut p.m, p.uar, p.pdn, small.cqn, small.cqn, &caps);
    let (_, y) = create_qp(&mut h, &mut p.m, p.uar, p.pdn, small.cqn, small.cqn, &caps);
    bring_to_rts(&mut h, &x, y.qpn, 0, &ConnParams::default());
    bring_to_rts(&mut h, &y, x.qpn, 0, &ConnParams::default());
    for _ in 0..2 {
        x.post_send(&mut h, &w);
    }
    h.settle();
    assert!(take_events(&mut h).is_empty());
    x.post_send(&mut h, &w);
    let ev = event_keys(&take_events(&mut h));
    assert!(
        ev.contains(&(QHCA_EQE_CQ_ERR, small.cqn as u64, p.uar as u64)),
        "CQ_ERR on overrun: {ev:?}"
    );
    // The two CQEs that fit are intact.
    expect_cqe(
        &small.poll(&mut h).unwrap(),
        0x20,
        QHCA_WC_RDMA_WRITE,
        QHCA_WC_SUCCESS,
    );
    expect_cqe(
        &small.poll(&mut h).unwrap(),
        0x20,
        QHCA_WC_RDMA_WRITE,
        QHCA_WC_SUCCESS,
    );
    assert!(small.poll(&mut h).is_none());
    assert_eq!(h.status(), QHCA_STATUS_READY);
}

/// Not a check, a number: `cargo test --release -p qhca-qtest --test rc -- --ignored
/// --nocapture throughput`. RDMA WRITEs and SENDs of 64 KiB at MTU 4096 over the loopback
/// wire, wall time from the doorbell to the last CQE (the qtest round trips included).
#[test]
#[ignore]
fn throughput() {
    let params = ConnParams {
        path_mtu: 12,
        ..Default::default()
    };
    let mut h = Hca::start("num-uars=8");
    h.bring_up(5, 6);
    let caps = QpCaps {
        sq_log: 7,
        rq_log: 7,
        ..Default::default()
    };
    let mut p = Pair::with_caps(&mut h, &params, &caps);
    let len = 64u64 << 10;
    let n = 60u64; // the CQs hold 64
    let (src, lkey) = p.buf(&mut h, len, 0x42, QHCA_ACCESS_LOCAL_WRITE);
    let (dst, rkey) = p.buf(&mut h, len, 0, RW);
    for (what, opcode) in [("RDMA WRITE", QHCA_WR_RDMA_WRITE), ("SEND", QHCA_WR_SEND)] {
        if opcode == QHCA_WR_SEND {
            for _ in 0..n {
                p.b.post_recv(&mut h, 1, &[(dst, len as u32, rkey)]);
            }
        }
        let t0 = std::time::Instant::now();
        for i in 0..n {
            let b = SendWr {
                wr_id: i,
                opcode,
                flags: if i == n - 1 { QHCA_WQE_SIGNALED } else { 0 },
                remote_addr: dst,
                rkey,
                sges: vec![(src, len as u32, lkey)],
                ..Default::default()
            }
            .encode();
            p.a.write_send_raw(&mut h, &b);
        }
        p.a.ring_sq(&mut h);
        let c = p.scq.wait(&mut h);
        let dt = t0.elapsed();
        assert_eq!(c.status as u32, QHCA_WC_SUCCESS);
        let mib = (n * len) as f64 / (1 << 20) as f64;
        eprintln!(
            "{what}: {n} x {} KiB in {:.1} ms = {:.0} MiB/s, {:.1} us per message",
            len >> 10,
            dt.as_secs_f64() * 1e3,
            mib / dt.as_secs_f64(),
            dt.as_secs_f64() * 1e6 / n as f64
        );
        if opcode == QHCA_WR_SEND {
            for _ in 0..n {
                p.rcq.wait(&mut h);
            }
        }
    }
    assert_eq!(h.qt.readb(dst + len - 1), 0x42);
    for props in ["num-uars=8", "num-uars=8,x-wire-queued=on"] {
        message_rate(props);
    }
}

/// Small-message rate: rounds of 120 RDMA WRITEs of 64 B (only the last signaled), one
/// doorbell per round, wall time from the doorbell to the round's CQE summed over the rounds
/// (writing the WQEs through qtest is not counted).
fn message_rate(props: &str) {
    let mut h = Hca::start(props);
    h.bring_up(5, 6);
    let caps = QpCaps {
        sq_log: 7,
        rq_log: 7,
        ..Default::default()
    };
    let mut p = Pair::with_caps(&mut h, &ConnParams::default(), &caps);
    let (src, lkey) = p.buf(&mut h, 4096, 0x42, QHCA_ACCESS_LOCAL_WRITE);
    let (dst, rkey) = p.buf(&mut h, 4096, 0, RW);
    let (rounds, per) = (50u64, 120u64);
    let mut busy = std::time::Duration::ZERO;
    for r in 0..rounds {
        for i in 0..per {
            let b = SendWr {
                wr_id: r * per + i,
                opcode: QHCA_WR_RDMA_WRITE,
                flags: if i == per - 1 { QHCA_WQE_SIGNALED } else { 0 },
                remote_addr: dst + (i % 64) * 64,
                rkey,
                sges: vec![(src, 64, lkey)],
                ..Default::default()
            }
            .encode();
            p.a.write_send_raw(&mut h, &b);
        }
        let t0 = std::time::Instant::now();
        p.a.ring_sq(&mut h);
        let c = p.scq.wait(&mut h);
        busy += t0.elapsed();
        assert_eq!(
            (c.wr_id, c.status as u32),
            (r * per + per - 1, QHCA_WC_SUCCESS)
        );
    }
    let n = rounds * per;
    eprintln!(
        "64 B RDMA WRITE ({props}): {n} messages in {:.1} ms = {:.0} messages/s",
        busy.as_secs_f64() * 1e3,
        n as f64 / busy.as_secs_f64()
    );
}

#[test]
fn large_read_and_write_across_many_turns() {
    // 192 KiB at MTU 256: 768 packets each way, far more than one QP turn; the responder
    // answers the READ a budget at a time, and a second pair keeps completing meanwhile.
    let (mut h, mut p) = setup(&ConnParams::default());
    let len = 192usize << 10;
    let data = pattern(len, 42);
    let (remote, rkey) = p.buf(&mut h, len as u64, 0, RW);
    h.qt.memwrite(remote, &data);
    let (local, lkey) = p.buf(&mut h, len as u64 + 8, 0x99, QHCA_ACCESS_LOCAL_WRITE);
    let (_, c) = create_cq(&mut h, &mut p.m, p.uar, 5);
    let mut c = c;
    let caps = QpCaps::default();
    let (_, mut x) = create_qp(&mut h, &mut p.m, p.uar, p.pdn, c.cqn, c.cqn, &caps);
    let (_, y) = create_qp(&mut h, &mut p.m, p.uar, p.pdn, c.cqn, c.cqn, &caps);
    bring_to_rts(&mut h, &x, y.qpn, 0, &ConnParams::default());
    bring_to_rts(&mut h, &y, x.qpn, 0, &ConnParams::default());
    let (small, skey) = p.buf(&mut h, 64, 7, RW);

    p.a.post_send(
        &mut h,
        &SendWr {
            wr_id: 0x1,
            opcode: QHCA_WR_RDMA_READ,
            flags: QHCA_WQE_SIGNALED,
            remote_addr: remote,
            rkey,
            sges: vec![(local + 4, len as u32, lkey)],
            ..Default::default()
        },
    );
    for i in 0..8u64 {
        x.post_send(
            &mut h,
            &SendWr {
                wr_id: 0x100 + i,
                opcode: QHCA_WR_RDMA_WRITE,
                flags: QHCA_WQE_SIGNALED,
                remote_addr: small + i,
                rkey: skey,
                inline: Some(vec![i as u8]),
                ..Default::default()
            },
        );
    }
    for i in 0..8u64 {
        expect_cqe(
            &c.wait(&mut h),
            0x100 + i,
            QHCA_WC_RDMA_WRITE,
            QHCA_WC_SUCCESS,
        );
    }
    let r = p.scq.wait(&mut h);
    expect_cqe(&r, 0x1, QHCA_WC_RDMA_READ, QHCA_WC_SUCCESS);
    assert_eq!(r.byte_len as usize, len);
    let got = h.qt.memread(local, len + 8);
    assert_eq!(&got[..4], &[0x99; 4]);
    assert!(got[4..4 + len] == data[..], "READ data differs");
    assert_eq!(&got[4 + len..], &[0x99; 4]);

    // And back with one WRITE.
    h.qt.memset(remote, len, 0);
    p.a.post_send(
        &mut h,
        &SendWr {
            wr_id: 0x2,
            opcode: QHCA_WR_RDMA_WRITE,
            flags: QHCA_WQE_SIGNALED,
            remote_addr: remote,
            rkey,
            sges: vec![(local + 4, len as u32, lkey)],
            ..Default::default()
        },
    );
    expect_cqe(
        &p.scq.wait(&mut h),
        0x2,
        QHCA_WC_RDMA_WRITE,
        QHCA_WC_SUCCESS,
    );
    assert!(h.qt.memread(remote, len) == data, "WRITE data differs");
    assert!(take_events(&mut h).is_empty());
}

#[test]
fn mismatched_psns_are_retried_then_fail() {
    // The requester starts behind the responder (its packets are duplicates, re-ACKed with a
    // PSN outside its message) or ahead (NAKed as a PSN sequence error): either way nothing
    // it can use comes back, the ACK timer resends retry_cnt times, then RETRY_EXC_ERR. The
    // responder executes nothing.
    let (mut h, mut p) = setup(&ConnParams::default());
    let (src, lkey) = p.buf(&mut h, 4096, 0x21, QHCA_ACCESS_LOCAL_WRITE);
    let (dst, rkey) = p.buf(&mut h, 4096, 0, RW);
    let quick = ConnParams {
        timeout: 4,
        retry_cnt: 2,
        ..Default::default()
    };
    for (sq_psn, rq_psn) in [(0x100u32, 0x200u32), (0x300, 0x100)] {
        for q in [&mut p.a, &mut p.b] {
            let st = modify_qp(
                &mut h,
                q.uar,
                q.qpn,
                &QpAttr {
                    mask: QHCA_QP_ATTR_STATE,
                    state: QHCA_QPS_RESET as u8,
                    ..Default::default()
                },
            );
            assert_eq!(st, QHCA_CMD_OK);
            q.sq_pi = 0;
            q.rq_pi = 0;
        }
        bring_to_rts(&mut h, &p.a, p.b.qpn, sq_psn, &quick);
        bring_to_rts(&mut h, &p.b, p.a.qpn, rq_psn, &quick);
        p.a.post_send(
            &mut h,
            &SendWr {
                wr_id: sq_psn as u64,
                opcode: QHCA_WR_RDMA_WRITE,
                flags: QHCA_WQE_SIGNALED,
                remote_addr: dst,
                rkey,
                sges: vec![(src, 600, lkey)],
                ..Default::default()
            },
        );
        let c = p.scq.wait(&mut h);
        expect_cqe(&c, sq_psn as u64, QHCA_WC_RDMA_WRITE, QHCA_WC_RETRY_EXC_ERR);
        assert!(
            h.qt.memread(dst, 4096).iter().all(|&b| b == 0),
            "nothing written"
        );
        let ev = event_keys(&take_events(&mut h));
        assert_eq!(ev, vec![(QHCA_EQE_QP_ERR, p.a.qpn as u64, p.uar as u64)]);
        let (_, b) = query_qp(&mut h, p.uar, p.b.qpn);
        assert_eq!(
            (b.state, b.rq_psn),
            (QHCA_QPS_RTS as u8, rq_psn),
            "responder unmoved"
        );
    }
}

/// An MR of `pages` pages at `iova` (page aligned) whose pages all alias `fill_page` but the
/// last, which is `last_page`: a region far larger than guest RAM, cheap to set up. Returns
/// the key.
fn aliased_mr(
    h: &mut Hca,
    p: &mut Pair,
    iova: u64,
    pages: u64,
    fill_page: u64,
    last_page: u64,
    access: u32,
) -> u32 {
    let mut list = vec![fill_page; pages as usize];
    *list.last_mut().unwrap() = last_page;
    let dir = p.m.page_list_of(h, &list);
    let b = reg_mr_bytes(p.uar, p.pdn, iova, pages * 4096, access, pages as u32, dir);
    let (st, key) = obj_cmd(h, QHCA_CMD_REG_MR, in_words(&b));
    assert_eq!(st, QHCA_CMD_OK, "REG_MR of {pages} aliased pages");
    key as u32
}

/// Review item 7: rights taken away by MODIFY_QP hold from the next packet, not from the next
/// message. A 256 MiB RDMA READ (2^20 packets) is answered a budget of packets per engine turn;
/// MODIFY_QP revokes REMOTE_READ on the responder meanwhile: the rest is refused
/// (REM_ACCESS_ERR) and the last page of the local buffer never written. Then the same for a
/// 256 MiB RDMA WRITE and REMOTE_WRITE. (The regions alias one page but their last.)
#[test]
fn rights_revoked_mid_message_stop_the_next_packet() {
    let (mut h, mut p) = setup(&ConnParams::default());
    let pages = 1u64 << 16;
    let len = pages * 4096;
    let fill = p.m.alloc(&mut h, 4096);
    h.qt.memset(fill, 4096, 0x5a);
    let last_remote = p.m.alloc(&mut h, 4096);
    let last_local = p.m.alloc(&mut h, 4096);
    let (remote, local) = (0x10_0000_0000u64, 0x20_0000_0000u64);
    let rkey = aliased_mr(&mut h, &mut p, remote, pages, fill, last_remote, RW);
    let lkey = aliased_mr(
        &mut h,
        &mut p,
        local,
        pages,
        fill,
        last_local,
        QHCA_ACCESS_LOCAL_WRITE,
    );
    let revoke = |h: &mut Hca, p: &Pair, access: u32| {
        let st = modify_qp(
            h,
            p.uar,
            p.b.qpn,
            &QpAttr {
                mask: QHCA_QP_ATTR_ACCESS,
                access,
                ..Default::default()
            },
        );
        assert_eq!(st, QHCA_CMD_OK);
    };
    h.qt.memset(last_remote, 4096, 0x77);
    p.a.post_send(
        &mut h,
        &SendWr {
            wr_id: 0x4d,
            opcode: QHCA_WR_RDMA_READ,
            flags: QHCA_WQE_SIGNALED,
            remote_addr: remote,
            rkey,
            sges: vec![(local, len as u32, lkey)],
            ..Default::default()
        },
    );
    revoke(&mut h, &p, QHCA_ACCESS_REMOTE_WRITE);
    let c = p.scq.wait(&mut h);
    expect_cqe(&c, 0x4d, QHCA_WC_RDMA_READ, QHCA_WC_REM_ACCESS_ERR);
    assert!(
        h.qt.memread(last_local, 4096).iter().all(|&b| b == 0),
        "the READ's last page arrived after the revoke"
    );
    let ev = event_keys(&take_events(&mut h));
    assert!(
        ev.contains(&(QHCA_EQE_QP_ERR, p.b.qpn as u64, p.uar as u64)),
        "{ev:?}"
    );
    assert_eq!(query_qp(&mut h, p.uar, p.b.qpn).1.state, QHCA_QPS_ERR as u8);

    // WRITE: b (now without REMOTE_WRITE too) refuses the rest of a message it began.
    let full = ConnParams::default();
    p.reconnect(&mut h, &full, 0x1000);
    h.qt.memset(last_local, 4096, 0x3c);
    h.qt.memset(last_remote, 4096, 0);
    p.a.post_send(
        &mut h,
        &SendWr {
            wr_id: 0x4e,
            opcode: QHCA_WR_RDMA_WRITE,
            flags: QHCA_WQE_SIGNALED,
            remote_addr: remote,
            rkey,
            sges: vec![(local, len as u32, lkey)],
            ..Default::default()
        },
    );
    revoke(&mut h, &p, QHCA_ACCESS_REMOTE_READ);
    let c = p.scq.wait(&mut h);
    expect_cqe(&c, 0x4e, QHCA_WC_RDMA_WRITE, QHCA_WC_REM_ACCESS_ERR);
    assert!(
        h.qt.memread(last_remote, 4096).iter().all(|&b| b == 0),
        "the WRITE's last page landed after the revoke"
    );
}

/// Every CQE carries the index of the WQE it completes: SQ indices for send completions
/// (unsignaled WQEs in between are skipped, but counted), RQ indices for receives, and for
/// flushed WQEs too.
#[test]
fn cqes_carry_the_wqe_index() {
    let (mut h, mut p) = setup(&ConnParams::default());
    let (dst, rkey) = p.buf(&mut h, 4096, 0, RW);
    let (rbuf, rlkey) = p.buf(&mut h, 4096, 0, QHCA_ACCESS_LOCAL_WRITE);
    for i in 0..3u64 {
        p.b.post_recv(&mut h, 0x100 + i, &[(rbuf, 4096, rlkey)]);
    }
    // SQ 0 unsignaled WRITE, 1 signaled WRITE, 2 SEND (RQ 0), 3 unsignaled, 4 SEND (RQ 1).
    let write = |id: u64, flags: u32| SendWr {
        wr_id: id,
        opcode: QHCA_WR_RDMA_WRITE,
        flags,
        remote_addr: dst,
        rkey,
        inline: Some(vec![1; 4]),
        ..Default::default()
    };
    let send = |id: u64| SendWr {
        wr_id: id,
        opcode: QHCA_WR_SEND,
        flags: QHCA_WQE_SIGNALED,
        inline: Some(vec![2; 4]),
        ..Default::default()
    };
    p.a.post_send(&mut h, &write(0, 0));
    p.a.post_send(&mut h, &write(1, QHCA_WQE_SIGNALED));
    p.a.post_send(&mut h, &send(2));
    p.a.post_send(&mut h, &write(3, 0));
    p.a.post_send(&mut h, &send(4));
    let got: Vec<(u64, u16)> = (0..3)
        .map(|_| {
            let c = p.scq.wait(&mut h);
            (c.wr_id, c.wqe_index)
        })
        .collect();
    assert_eq!(got, vec![(1, 1), (2, 2), (4, 4)]);
    let got: Vec<(u64, u16)> = (0..2)
        .map(|_| {
            let c = p.rcq.wait(&mut h);
            (c.wr_id, c.wqe_index)
        })
        .collect();
    assert_eq!(got, vec![(0x100, 0), (0x101, 1)]);
    // Into ERR: the third receive is flushed with its index.
    let st = modify_qp(
        &mut h,
        p.uar,
        p.b.qpn,
        &QpAttr {
            mask: QHCA_QP_ATTR_STATE,
            state: QHCA_QPS_ERR as u8,
            ..Default::default()
        },
    );
    assert_eq!(st, QHCA_CMD_OK);
    let c = p.rcq.wait(&mut h);
    assert_eq!(
        (c.wr_id, c.status as u32, c.wqe_index),
        (0x102, QHCA_WC_WR_FLUSH_ERR, 2)
    );
}

/// The engine runs in this test's QEMU, counted from the trace: (runs from a doorbell, runs of
/// the bottom half, QP timers armed).
fn engine_runs(path: &std::path::Path) -> (usize, usize, usize) {
    let t = std::fs::read_to_string(path).unwrap_or_default();
    let n = |s: &str| t.lines().filter(|l| l.contains(s)).count();
    (
        n("qhca_engine_run_begin ns") - n("inline 0"),
        n("inline 0"),
        n("qhca_timer_arm "),
    )
}

/// A small WRITE completes within its doorbell's own engine turn, and then nothing is left for
/// the bottom half, and no ACK timer was armed (its ACK came back inside the send): the
/// doorbell wakes no main loop (issue 11: each wake-up from a vCPU thread cost a write to an
/// eventfd and a main loop wanting the BQL the vCPU holds). Counted with the device's own trace
/// events, which this test's QEMU writes to a file.
#[test]
fn a_message_done_in_its_doorbell_wakes_no_main_loop() {
    let dir = std::env::temp_dir().join(format!("qhca-qtest-bh-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("trace.log");
    let _ = std::fs::remove_file(&log);
    let mut h = Hca::start_with(
        "num-uars=8",
        &[
            "-trace",
            "qhca_engine_run_begin",
            "-trace",
            "qhca_timer_arm",
            "-D",
            log.to_str().unwrap(),
        ],
    );
    h.bring_up(5, 6);
    let mut p = Pair::new(&mut h, &ConnParams::default());
    let (src, lkey) = p.buf(&mut h, 4096, 0x3c, QHCA_ACCESS_LOCAL_WRITE);
    let (dst, rkey) = p.buf(&mut h, 4096, 0, RW);
    h.settle();
    let (inline0, bh0, timers0) = engine_runs(&log);
    for i in 0..10u64 {
        p.a.post_send(
            &mut h,
            &SendWr {
                wr_id: i,
                opcode: QHCA_WR_RDMA_WRITE,
                flags: QHCA_WQE_SIGNALED,
                remote_addr: dst + i * 8,
                rkey,
                sges: vec![(src, 8, lkey)],
                ..Default::default()
            },
        );
        let c = p.scq.wait(&mut h);
        assert_eq!((c.wr_id, c.status as u32), (i, QHCA_WC_SUCCESS));
    }
    h.settle();
    h.alive();
    let (inline1, bh1, timers1) = engine_runs(&log);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(h.qt.memread(dst, 80).iter().all(|&b| b == 0x3c));
    assert_eq!(
        (inline1 - inline0, bh1 - bh0, timers1 - timers0),
        (10, 0, 0),
        "engine runs from the doorbells, from the bottom half; timers armed"
    );
}

/// Four small WRITEs under one doorbell: the ACK of each comes back inside its send, during the
/// QP's own turn, which then starts the next; nothing is left for the bottom half. (The turn
/// used to queue its own QP again from each ACK, and that woke the bottom half for nothing.)
#[test]
fn several_writes_under_one_doorbell_wake_no_main_loop() {
    let dir = std::env::temp_dir().join(format!("qhca-qtest-bh3-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("trace.log");
    let _ = std::fs::remove_file(&log);
    let mut h = Hca::start_with(
        "num-uars=8",
        &[
            "-trace",
            "qhca_engine_run_begin",
            "-trace",
            "qhca_timer_arm",
            "-D",
            log.to_str().unwrap(),
        ],
    );
    h.bring_up(5, 6);
    let mut p = Pair::new(&mut h, &ConnParams::default());
    let (src, lkey) = p.buf(&mut h, 4096, 0x5a, QHCA_ACCESS_LOCAL_WRITE);
    let (dst, rkey) = p.buf(&mut h, 4096, 0, RW);
    h.settle();
    let (inline0, bh0, timers0) = engine_runs(&log);
    for i in 0..4u64 {
        let wr = SendWr {
            wr_id: i,
            opcode: QHCA_WR_RDMA_WRITE,
            flags: QHCA_WQE_SIGNALED,
            remote_addr: dst + i * 8,
            rkey,
            sges: vec![(src, 8, lkey)],
            ..Default::default()
        };
        p.a.write_send_raw(&mut h, &wr.encode());
    }
    p.a.ring_sq(&mut h);
    for i in 0..4u64 {
        let c = p.scq.wait(&mut h);
        assert_eq!((c.wr_id, c.status as u32), (i, QHCA_WC_SUCCESS));
    }
    h.settle();
    h.alive();
    let (inline1, bh1, timers1) = engine_runs(&log);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(h.qt.memread(dst, 32).iter().all(|&b| b == 0x5a));
    assert_eq!(
        (inline1 - inline0, bh1 - bh0, timers1 - timers0),
        (1, 0, 0),
        "engine runs from the doorbell, from the bottom half; timers armed"
    );
}

/// The same for the other small operations: a receive posted, then an 8-byte RDMA READ, a
/// fetch-and-add and an 8-byte SEND, five times. Each completes within its doorbell's turn
/// (the responder answers the READ and the atomic from the request's own delivery): no bottom
/// half runs and no timer is armed.
#[test]
fn small_reads_atomics_and_sends_wake_no_main_loop() {
    let dir = std::env::temp_dir().join(format!("qhca-qtest-bh2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("trace.log");
    let _ = std::fs::remove_file(&log);
    let mut h = Hca::start_with(
        "num-uars=8",
        &[
            "-trace",
            "qhca_engine_run_begin",
            "-trace",
            "qhca_timer_arm",
            "-D",
            log.to_str().unwrap(),
        ],
    );
    h.bring_up(5, 6);
    let mut p = Pair::new(&mut h, &ConnParams::default());
    let (local, lkey) = p.buf(&mut h, 4096, 0, QHCA_ACCESS_LOCAL_WRITE);
    let (remote, rkey) = p.buf(&mut h, 4096, 0, RW | QHCA_ACCESS_REMOTE_ATOMIC);
    h.qt.memwrite(remote, &pattern(8, 9));
    h.settle();
    let (inline0, bh0, timers0) = engine_runs(&log);
    for i in 0..5u64 {
        p.b.post_recv(&mut h, 0x50 + i, &[(local + 2048, 64, lkey)]);
        for (op, remote_addr, local_addr) in [
            (QHCA_WR_RDMA_READ, remote, local + 64 * i),
            (
                QHCA_WR_ATOMIC_FETCH_AND_ADD,
                remote + 64,
                local + 1024 + 8 * i,
            ),
            (QHCA_WR_SEND, 0, local + 64 * i),
        ] {
            p.a.post_send(
                &mut h,
                &SendWr {
                    wr_id: i,
                    opcode: op,
                    flags: QHCA_WQE_SIGNALED,
                    remote_addr,
                    rkey,
                    swap_add: 1,
                    sges: vec![(local_addr, 8, lkey)],
                    ..Default::default()
                },
            );
            let c = p.scq.wait(&mut h);
            assert_eq!((c.wr_id, c.status as u32), (i, QHCA_WC_SUCCESS), "op {op}");
        }
        let r = p.rcq.wait(&mut h);
        assert_eq!((r.wr_id, r.status as u32, r.byte_len), (0x50 + i, 0, 8));
        assert_eq!(h.qt.memread(local + 64 * i, 8), pattern(8, 9));
        let f = u64::from_le_bytes(h.qt.memread(local + 1024 + 8 * i, 8).try_into().unwrap());
        assert_eq!(f, i, "fetch-and-add {i}");
    }
    h.settle();
    h.alive();
    let (inline1, bh1, timers1) = engine_runs(&log);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        (inline1 - inline0, bh1 - bh0, timers1 - timers0),
        (20, 0, 0),
        "engine runs from the doorbells, from the bottom half; timers armed"
    );
}
