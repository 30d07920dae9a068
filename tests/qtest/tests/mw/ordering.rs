// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! BIND_MW and LOCAL_INV in SQ order: they run once every earlier WQE has completed and
//! before any later one starts (behind WRITEs on the queued wire, behind an RNR wait), are
//! flushed behind a request that fails and then did nothing, are not run twice by a
//! retransmission, and carry no data.

use super::*;

// ------------------------------------------------------------------------------------------
// SQ order

#[test]
fn bind_completes_in_sq_order() {
    let mut t = T::new();
    let (plain, plain_key) = t.p.buf(&mut t.h, PAGE, 0, QHCA_ACCESS_LOCAL_WRITE | RW);
    let (rcv, rcv_key) = t.p.buf(&mut t.h, PAGE, 0, QHCA_ACCESS_LOCAL_WRITE);

    // WRITE, BIND, then a SEND that tells the peer the key, under one doorbell. The window is
    // bound through a, so the peer's WRITE with the key arrives at a.
    let mw = t.alloc(QHCA_MW_TYPE_2A);
    let mut l = t.link();
    let k = inc_key(mw);
    write_bind_send(
        &mut t,
        &mut l,
        (plain, plain_key),
        (rcv, rcv_key),
        2000,
        (mw, k, 1024),
        "CQEs in SQ order",
    );
    let told = u32::from_le_bytes(t.h.qt.memread(rcv, 4).try_into().unwrap());
    assert_eq!(told, k);
    // The peer writes with the key it was told, into a.
    let data = t.data(300);
    t.h.qt.memwrite(t.src, &data);
    l.b.post_send(
        &mut t.h,
        &SendWr::write(t.src, 300, t.lkey, t.tgt + 100, told),
    );
    let c = l.bcq.wait(&mut t.h);
    assert_eq!(
        (c.opcode as u32, c.status as u32),
        (QHCA_WC_RDMA_WRITE, QHCA_WC_SUCCESS),
        "{c:?}"
    );
    t.model[100..400].copy_from_slice(&data);
    t.check_target("WRITE with the key the SEND carried");

    // A bind behind a SEND waiting in RNR completes after it, not before.
    let mut l = t.link_with(&ConnParams {
        rnr_retry: 7,
        min_rnr_timer: 1,
        ..Default::default()
    });
    let mw = t.alloc(QHCA_MW_TYPE_1);
    let k = inc_key(mw);
    let wqe = SendWr {
        wr_id: 0x20,
        opcode: QHCA_WR_SEND,
        flags: QHCA_WQE_SIGNALED,
        inline: Some(vec![1, 2, 3, 4]),
        ..Default::default()
    }
    .encode();
    l.a.write_send_raw(&mut t.h, &wqe);
    let b = t.win(mw, k, 1024, 1024, RW);
    l.a.write_bind(&mut t.h, 0x21, QHCA_WQE_SIGNALED, &b);
    l.a.ring_sq(&mut t.h);
    l.acq.expect_empty(&mut t.h);
    l.b.post_recv(&mut t.h, 0x31, &[(rcv, 64, rcv_key)]);
    let got = cqes(&mut t, &mut l.acq, 2);
    assert_eq!(
        got,
        vec![
            (0x20, QHCA_WC_SEND, QHCA_WC_SUCCESS, 0),
            (0x21, QHCA_WC_BIND_MW, QHCA_WC_SUCCESS, 1),
        ],
        "the bind completes after the SEND it follows"
    );
    let r = l.bcq.wait(&mut t.h);
    assert_eq!((r.wr_id, r.status as u32), (0x31, 0), "{r:?}");
    t.write_ok(&mut l, 1024, 64, k, "after the held bind");

    // Unsignalled: no CQE of its own; the signalled WRITE after it has the next index.
    let mw = t.alloc(QHCA_MW_TYPE_1);
    let k = inc_key(mw);
    let b = t.win(mw, k, 1536, 256, RW);
    l.b.post_bind(&mut t.h, 0x40, 0, &b);
    l.bcq.expect_empty(&mut t.h);
    let data = t.data(16);
    t.h.qt.memwrite(t.src, &data);
    l.b.post_send(
        &mut t.h,
        &SendWr::write(t.src, 16, t.lkey, plain, plain_key),
    );
    let c = l.bcq.wait(&mut t.h);
    assert_eq!(
        (c.opcode as u32, c.status as u32, c.wqe_index),
        (QHCA_WC_RDMA_WRITE, QHCA_WC_SUCCESS, 1),
        "after an unsignalled bind (b's SQ: the bind at 0): {c:?}"
    );
    t.write_ok(&mut l, 1536, 64, k, "an unsignalled bind");

    // A bind that fails completes in order too, and what follows is flushed.
    let mut l = t.link();
    let wqe = SendWr {
        wr_id: 0x50,
        ..SendWr::write(t.src, 16, t.lkey, plain, plain_key)
    }
    .encode();
    l.a.write_send_raw(&mut t.h, &wqe);
    let b = Bind {
        mr_key: plain_key,
        ..t.win(mw, inc_key(k), 0, 16, RW)
    };
    l.a.write_bind(&mut t.h, 0x51, 0, &b);
    let wqe = SendWr {
        wr_id: 0x52,
        ..SendWr::write(t.src, 16, t.lkey, plain, plain_key)
    }
    .encode();
    l.a.write_send_raw(&mut t.h, &wqe);
    l.a.ring_sq(&mut t.h);
    let got = cqes(&mut t, &mut l.acq, 3);
    assert_eq!(
        got,
        vec![
            (0x50, QHCA_WC_RDMA_WRITE, QHCA_WC_SUCCESS, 0),
            (0x51, QHCA_WC_BIND_MW, QHCA_WC_MW_BIND_ERR, 1),
            (0x52, QHCA_WC_RDMA_WRITE, QHCA_WC_WR_FLUSH_ERR, 2),
        ],
        "a failed bind (a region without MW_BIND) in SQ order"
    );
    t.went_to_err(&[l.a.qpn]);
}

/// With a receive (wr_id 0x30) posted on `l.b` at `rcv`, under one doorbell on `l.a`: a
/// signalled WRITE (0x10) of `len` fresh bytes from the source page to `dst`, the signalled bind
/// (0x11) of window `mw` to key `k` over the first `win_len` bytes of the target, and a
/// signalled SEND (0x12) carrying `k` inline. Checks that the three complete in SQ order
/// (`what`), that the bytes landed, and that the receive took the 4-byte key.
fn write_bind_send(
    t: &mut T,
    l: &mut Link,
    (dst, dst_key): (u64, u32),
    (rcv, rcv_key): (u64, u32),
    len: u32,
    (mw, k, win_len): (u32, u32, u64),
    what: &str,
) {
    l.b.post_recv(&mut t.h, 0x30, &[(rcv, 64, rcv_key)]);
    let data = t.data(len as usize);
    t.h.qt.memwrite(t.src, &data);
    let wqe = SendWr {
        wr_id: 0x10,
        ..SendWr::write(t.src, len, t.lkey, dst, dst_key)
    }
    .encode();
    l.a.write_send_raw(&mut t.h, &wqe);
    let b = t.win(mw, k, 0, win_len, RW);
    l.a.write_bind(&mut t.h, 0x11, QHCA_WQE_SIGNALED, &b);
    let wqe = SendWr {
        wr_id: 0x12,
        opcode: QHCA_WR_SEND,
        flags: QHCA_WQE_SIGNALED,
        inline: Some(k.to_le_bytes().to_vec()),
        ..Default::default()
    }
    .encode();
    l.a.write_send_raw(&mut t.h, &wqe);
    l.a.ring_sq(&mut t.h);
    assert_eq!(
        cqes(t, &mut l.acq, 3),
        vec![
            (0x10, QHCA_WC_RDMA_WRITE, QHCA_WC_SUCCESS, 0),
            (0x11, QHCA_WC_BIND_MW, QHCA_WC_SUCCESS, 1),
            (0x12, QHCA_WC_SEND, QHCA_WC_SUCCESS, 2),
        ],
        "{what}"
    );
    assert_eq!(t.h.qt.memread(dst, len as usize), data);
    let r = l.bcq.wait(&mut t.h);
    assert_eq!(
        (r.wr_id, r.status as u32, r.byte_len),
        (0x30, 0, 4),
        "{r:?}"
    );
}

/// Every CQE of the next `n` on `cq`: (wr_id, opcode, status, wqe_index).
fn cqes(t: &mut T, cq: &mut Cq, n: usize) -> Vec<(u64, u32, u32, u16)> {
    (0..n)
        .map(|_| {
            let c = cq.wait(&mut t.h);
            (c.wr_id, c.opcode as u32, c.status as u32, c.wqe_index)
        })
        .collect()
}

/// On the queued wire, where a burst of WRITEs is in flight before the first ACK comes back:
/// a bind behind four of them waits for them, completes after them in SQ order, and is in
/// force for the WQEs after it (a WRITE through its key from the same SQ; a SEND telling the
/// peer the key of a type 2 window bound next). A LOCAL_INV behind three unsignalled WRITEs
/// likewise completes after them and kills the key.
#[test]
fn a_bind_behind_outstanding_writes_runs_after_them() {
    let (mut t, trace) = ReqTrace::start("num-uars=8,x-wire-queued=on", "burst");
    let (plain, plain_key) = t.p.buf(&mut t.h, PAGE, 0, QHCA_ACCESS_LOCAL_WRITE | RW);
    let (rcv, rcv_key) = t.p.buf(&mut t.h, PAGE, 0, QHCA_ACCESS_LOCAL_WRITE);
    let w1 = t.alloc(QHCA_MW_TYPE_1);
    let k1 = inc_key(w1);
    let w2 = t.alloc(QHCA_MW_TYPE_2A);
    let k2 = inc_key(w2);
    let mut l = t.link();
    l.b.post_recv(&mut t.h, 0x30, &[(rcv, 64, rcv_key)]);

    // Four WRITEs of 1 KiB into a plain region, then BIND (type 1), a WRITE through its key
    // into the target, BIND (type 2A, through a), and a SEND of that key: one doorbell.
    let data = t.data(PAGE as usize);
    t.h.qt.memwrite(t.src, &data);
    for i in 0..4u64 {
        let wqe = SendWr {
            wr_id: 0x10 + i,
            ..SendWr::write(t.src + i * 1024, 1024, t.lkey, plain + i * 1024, plain_key)
        }
        .encode();
        l.a.write_send_raw(&mut t.h, &wqe);
    }
    let b1 = t.win(w1, k1, 0, 1024, RW);
    l.a.write_bind(&mut t.h, 0x14, QHCA_WQE_SIGNALED, &b1);
    let wqe = SendWr {
        wr_id: 0x15,
        ..SendWr::write(t.src, 256, t.lkey, t.tgt + 512, k1)
    }
    .encode();
    l.a.write_send_raw(&mut t.h, &wqe);
    let b2 = t.win(w2, k2, 1024, 1024, RW);
    l.a.write_bind(&mut t.h, 0x16, QHCA_WQE_SIGNALED, &b2);
    let wqe = SendWr {
        wr_id: 0x17,
        opcode: QHCA_WR_SEND,
        flags: QHCA_WQE_SIGNALED,
        inline: Some(k2.to_le_bytes().to_vec()),
        ..Default::default()
    }
    .encode();
    l.a.write_send_raw(&mut t.h, &wqe);
    l.a.ring_sq(&mut t.h);
    let got = cqes(&mut t, &mut l.acq, 8);
    let ops = [
        QHCA_WC_RDMA_WRITE,
        QHCA_WC_RDMA_WRITE,
        QHCA_WC_RDMA_WRITE,
        QHCA_WC_RDMA_WRITE,
        QHCA_WC_BIND_MW,
        QHCA_WC_RDMA_WRITE,
        QHCA_WC_BIND_MW,
        QHCA_WC_SEND,
    ];
    let want: Vec<_> = (0..8)
        .map(|i| (0x10 + i as u64, ops[i], QHCA_WC_SUCCESS, i as u16))
        .collect();
    assert_eq!(got, want, "binds behind four WRITEs in flight");
    l.acq.expect_empty(&mut t.h);
    // The device's trace: the four WRITEs were in flight together; each bind started only
    // once every WQE before it had completed, and completed before the next one started.
    let ev = trace.events(&mut t, l.a.qpn);
    for i in 0..4 {
        assert!(at(&ev, ('s', i)) < at(&ev, ('c', 0)), "WRITE {i}: {ev:?}");
    }
    for i in [4, 6] {
        assert!(
            at(&ev, ('c', i - 1)) < at(&ev, ('s', i)),
            "bind {i}: {ev:?}"
        );
        assert!(
            at(&ev, ('c', i)) < at(&ev, ('s', i + 1)),
            "bind {i}: {ev:?}"
        );
    }
    assert_eq!(
        t.h.qt.memread(plain, PAGE as usize),
        data,
        "the four WRITEs"
    );
    t.model[512..768].copy_from_slice(&data[..256]);
    t.check_target("the WRITE through the key bound just before it");
    let r = l.bcq.wait(&mut t.h);
    assert_eq!(
        (r.wr_id, r.status as u32, r.byte_len),
        (0x30, QHCA_WC_SUCCESS, 4),
        "{r:?}"
    );
    let told = u32::from_le_bytes(t.h.qt.memread(rcv, 4).try_into().unwrap());
    assert_eq!(told, k2);
    // The peer writes with the key it was told, into a (the type 2A window is bound to a).
    let data = t.data(300);
    t.h.qt.memwrite(t.src, &data);
    l.b.post_send(
        &mut t.h,
        &SendWr::write(t.src, 300, t.lkey, t.tgt + 1100, told),
    );
    let c = l.bcq.wait(&mut t.h);
    assert_eq!(
        (c.opcode as u32, c.status as u32),
        (QHCA_WC_RDMA_WRITE, QHCA_WC_SUCCESS),
        "{c:?}"
    );
    t.model[1100..1400].copy_from_slice(&data);
    t.check_target("the peer's WRITE with the key the SEND carried");

    // Three unsignalled WRITEs, LOCAL_INV of k2, a SEND: one doorbell. The LOCAL_INV's CQE
    // (SQ index 11) says the WRITEs before it are complete.
    l.b.post_recv(&mut t.h, 0x31, &[(rcv, 64, rcv_key)]);
    let data = t.data(3 * 1024);
    t.h.qt.memwrite(t.src, &data);
    for i in 0..3u64 {
        let wqe = SendWr {
            wr_id: 0x18 + i,
            flags: 0,
            ..SendWr::write(t.src + i * 1024, 1024, t.lkey, plain + i * 1024, plain_key)
        }
        .encode();
        l.a.write_send_raw(&mut t.h, &wqe);
    }
    l.a.write_send_raw(&mut t.h, &local_inv(0x1b, QHCA_WQE_SIGNALED, k2).encode());
    let wqe = SendWr {
        wr_id: 0x1c,
        opcode: QHCA_WR_SEND,
        flags: QHCA_WQE_SIGNALED,
        inline: Some(vec![9; 4]),
        ..Default::default()
    }
    .encode();
    l.a.write_send_raw(&mut t.h, &wqe);
    l.a.ring_sq(&mut t.h);
    assert_eq!(
        cqes(&mut t, &mut l.acq, 2),
        vec![
            (0x1b, QHCA_WC_LOCAL_INV, QHCA_WC_SUCCESS, 11),
            (0x1c, QHCA_WC_SEND, QHCA_WC_SUCCESS, 12),
        ],
        "a LOCAL_INV behind three unsignalled WRITEs"
    );
    l.acq.expect_empty(&mut t.h);
    let ev = trace.events(&mut t, l.a.qpn);
    for i in 8..11 {
        assert!(at(&ev, ('s', i)) < at(&ev, ('c', 8)), "WRITE {i}: {ev:?}");
    }
    assert!(at(&ev, ('c', 10)) < at(&ev, ('s', 11)), "LOCAL_INV: {ev:?}");
    assert!(at(&ev, ('c', 11)) < at(&ev, ('s', 12)), "LOCAL_INV: {ev:?}");
    assert_eq!(t.h.qt.memread(plain, 3 * 1024), data, "the three WRITEs");
    let r = l.bcq.wait(&mut t.h);
    assert_eq!((r.wr_id, r.status as u32), (0x31, QHCA_WC_SUCCESS), "{r:?}");
    // The peer's WRITE with the key now fails, and lands nothing.
    let data = t.data(64);
    t.h.qt.memwrite(t.src, &data);
    l.b.post_send(
        &mut t.h,
        &SendWr::write(t.src, 64, t.lkey, t.tgt + 1100, k2),
    );
    let c = l.bcq.wait(&mut t.h);
    assert_eq!(
        (c.opcode as u32, c.status as u32),
        (QHCA_WC_RDMA_WRITE, QHCA_WC_REM_ACCESS_ERR),
        "the peer's WRITE after the LOCAL_INV: {c:?}"
    );
    t.check_target("the peer's WRITE after the LOCAL_INV");
    t.went_to_err(&[l.a.qpn, l.b.qpn]);
    // The type 1 window is still bound: from a fresh link.
    let mut l2 = t.link();
    t.write_ok(&mut l2, 0, 1024, k1, "the type 1 window bound in the burst");
}
// ------------------------------------------------------------------------------------------
// Retransmissions, flushes, malformed local operations

/// On a wire with latency (x-wire-queued), where a requester sends a burst before the first
/// answer: a SEND_WITH_INV whose ACK is lost is sent again and the duplicate is only
/// re-acknowledged (no second invalidation, no REM_INV_REQ_ERR); and a lost WRITE before a
/// bind makes the requester go back to it, without running the bind (type 2: a second run
/// would fail) again, the CQEs in SQ order.
#[test]
fn retransmission_runs_nothing_twice() {
    // The first two packets on the wire are the SEND_WITH_INV and its ACK: the ACK is lost.
    let mut h = Hca::start("num-uars=8,x-wire-queued=on,x-wire-drop=0x2");
    h.bring_up(5, 6);
    let mut t = T::on(h);
    let mw = t.alloc(QHCA_MW_TYPE_2B);
    let mut l = t.link();
    let k = inc_key(mw);
    let b = t.win(mw, k, 0, 512, RW);
    t.bind_b(&mut l, &b);
    let (rcv, rcv_key) = t.p.buf(&mut t.h, PAGE, 0, QHCA_ACCESS_LOCAL_WRITE);
    l.b.post_recv(&mut t.h, 0x5e, &[(rcv, 64, rcv_key)]);
    let wr = send_inv(0x5d, QHCA_WQE_SIGNALED, k, vec![(t.src, 32, t.lkey)]);
    let c = t.post(&mut l, &wr);
    assert_eq!(
        (c.opcode as u32, c.status as u32),
        (QHCA_WC_SEND, QHCA_WC_SUCCESS),
        "SEND_WITH_INV sent twice: {c:?}"
    );
    let r = l.bcq.wait(&mut t.h);
    assert_eq!(
        (r.status as u32, r.flags as u32, r.imm),
        (QHCA_WC_SUCCESS, QHCA_CQE_WITH_INV, k),
        "{r:?}"
    );
    l.bcq.expect_empty(&mut t.h);
    assert_eq!(
        query_qp(&mut t.h, t.p.uar, l.b.qpn).1.state,
        QHCA_QPS_RTS as u8
    );
    t.write_refused(&mut l, 0, 16, k, "after the SEND_WITH_INV");

    // The first packet (a WRITE) is lost; the SEND after the bind gets a PSN sequence NAK.
    let mut h = Hca::start("num-uars=8,x-wire-queued=on,x-wire-drop=0x1");
    h.bring_up(5, 6);
    let mut t = T::on(h);
    let (plain, plain_key) = t.p.buf(&mut t.h, PAGE, 0, QHCA_ACCESS_LOCAL_WRITE | RW);
    let (rcv, rcv_key) = t.p.buf(&mut t.h, PAGE, 0, QHCA_ACCESS_LOCAL_WRITE);
    let mw = t.alloc(QHCA_MW_TYPE_2A);
    let mut l = t.link();
    let k = inc_key(mw);
    write_bind_send(
        &mut t,
        &mut l,
        (plain, plain_key),
        (rcv, rcv_key),
        64,
        (mw, k, 512),
        "go-back-N over a bind",
    );
    l.bcq.expect_empty(&mut t.h);
    // The window is bound through a, once, with the key: b's WRITE with it lands.
    let data = t.data(64);
    t.h.qt.memwrite(t.src, &data);
    l.b.post_send(&mut t.h, &SendWr::write(t.src, 64, t.lkey, t.tgt + 64, k));
    let c = l.bcq.wait(&mut t.h);
    assert_eq!(c.status as u32, QHCA_WC_SUCCESS, "{c:?}");
    t.model[64..128].copy_from_slice(&data);
    t.check_target("b's WRITE through the window a bound");
}

/// BIND_MW and LOCAL_INV carry no data (SGEs or INLINE: LOC_QP_OP_ERR, nothing done); flushed
/// from a QP in ERR, they complete with their own opcodes and run not at all.
#[test]
fn local_operations_carry_no_data_and_flushed_ones_do_nothing() {
    let mut t = T::new();
    let mw = t.alloc(QHCA_MW_TYPE_2A);
    let k = inc_key(mw);
    let b = t.win(mw, k, 0, 512, RW);
    for (what, byte, value) in [
        ("BIND_MW with an SGE", 10, 1u8),
        (
            "BIND_MW with INLINE",
            9,
            (QHCA_WQE_SIGNALED | QHCA_WQE_INLINE) as u8,
        ),
    ] {
        let mut l = t.link();
        let mut wqe = b.wqe(0xb2, QHCA_WQE_SIGNALED);
        wqe[byte] = value;
        l.b.write_send_raw(&mut t.h, &wqe);
        l.b.ring_sq(&mut t.h);
        let c = l.bcq.wait(&mut t.h);
        assert_eq!(
            (c.wr_id, c.opcode as u32, c.status as u32),
            (0xb2, QHCA_WC_BIND_MW, QHCA_WC_LOC_QP_OP_ERR),
            "{what}: {c:?}"
        );
        t.went_to_err(&[l.b.qpn]);
        // A flushed bind: the QP is in ERR.
        l.b.post_bind(&mut t.h, 0xb3, 0, &b);
        let c = l.bcq.wait(&mut t.h);
        assert_eq!(
            (c.wr_id, c.opcode as u32, c.status as u32),
            (0xb3, QHCA_WC_BIND_MW, QHCA_WC_WR_FLUSH_ERR),
            "{what}: flushed bind {c:?}"
        );
    }
    // Neither bind ran: the window is unbound, and binds to k now.
    let mut l = t.link();
    t.write_refused(&mut l, 0, 16, k, "after the refused and flushed binds");
    let mut l = t.link();
    t.bind_b(&mut l, &b);
    t.write_ok(&mut l, 0, 16, k, "bound at last");

    // LOCAL_INV with data, and flushed: the window stays bound.
    for (what, byte, value) in [
        ("LOCAL_INV with an SGE", 10, 1u8),
        (
            "LOCAL_INV with INLINE",
            9,
            (QHCA_WQE_SIGNALED | QHCA_WQE_INLINE) as u8,
        ),
    ] {
        let mut lx = t.link();
        let mut wqe = local_inv(0x1d, QHCA_WQE_SIGNALED, k).encode();
        wqe[byte] = value;
        lx.a.write_send_raw(&mut t.h, &wqe);
        lx.a.ring_sq(&mut t.h);
        let c = lx.acq.wait(&mut t.h);
        assert_eq!(
            (c.wr_id, c.opcode as u32, c.status as u32),
            (0x1d, QHCA_WC_LOCAL_INV, QHCA_WC_LOC_QP_OP_ERR),
            "{what}: {c:?}"
        );
        t.went_to_err(&[lx.a.qpn]);
        lx.a.post_send(&mut t.h, &local_inv(0x1c, 0, k));
        let c = lx.acq.wait(&mut t.h);
        assert_eq!(
            (c.wr_id, c.opcode as u32, c.status as u32),
            (0x1c, QHCA_WC_LOCAL_INV, QHCA_WC_WR_FLUSH_ERR),
            "{what}: flushed LOCAL_INV {c:?}"
        );
        t.write_ok(&mut l, 16, 16, k, &format!("{what}: still bound"));
    }
}

/// `local` (a BIND_MW or LOCAL_INV WQE, wr_id 0x11, completing with `opcode`) on `l.a` behind
/// a WRITE that the responder refuses (the target region's own key grants nothing remote),
/// under one doorbell: the WRITE fails, the local operation is flushed after it without ever
/// starting (the device's trace), the target is untouched and both QPs go to ERR.
fn behind_a_failing_write(
    t: &mut T,
    trace: &ReqTrace,
    l: &mut Link,
    local: &[u8],
    opcode: u32,
    what: &str,
) {
    let data = t.data(64);
    t.h.qt.memwrite(t.src, &data);
    let wqe = SendWr {
        wr_id: 0x10,
        ..SendWr::write(t.src, 64, t.lkey, t.tgt, t.mr)
    }
    .encode();
    l.a.write_send_raw(&mut t.h, &wqe);
    l.a.write_send_raw(&mut t.h, local);
    l.a.ring_sq(&mut t.h);
    assert_eq!(
        cqes(t, &mut l.acq, 2),
        vec![
            (0x10, QHCA_WC_RDMA_WRITE, QHCA_WC_REM_ACCESS_ERR, 0),
            (0x11, opcode, QHCA_WC_WR_FLUSH_ERR, 1),
        ],
        "{what}: flushed behind a failing WRITE"
    );
    l.acq.expect_empty(&mut t.h);
    assert_eq!(
        trace.events(t, l.a.qpn),
        vec![('s', 0), ('c', 0)],
        "{what}: the WRITE started and completed, nothing else"
    );
    t.check_target(what);
    t.went_to_err(&[l.a.qpn, l.b.qpn]);
}

/// A local operation behind a request that fails is flushed, and did nothing: it runs only
/// once every WQE before it has completed. On both wires (on the queued one, the failing
/// WRITE is still unanswered when the requester reaches the bind). A flushed bind of an
/// unbound type 1 or type 2 window leaves it unbound (its would-be key fails or names nothing
/// bound, its region is held by nothing, and a bind to that very key goes afterwards: the tag
/// did not move); a flushed rebind of a bound type 1 window leaves its old key and range
/// working; a flushed LOCAL_INV leaves its window bound; a bind behind a WRITE in flight and a
/// malformed WQE waits for both and is flushed.
#[test]
fn a_local_operation_behind_a_failing_request_is_flushed() {
    for queued in [false, true] {
        let (args, wire) = if queued {
            ("num-uars=8,x-wire-queued=on", "queued wire")
        } else {
            ("num-uars=8", "default wire")
        };
        let (mut t, trace) = ReqTrace::start(args, &wire.replace(' ', "-"));

        // Type 1, unbound.
        let what = format!("{wire}: bind of an unbound type 1 window");
        let w = t.alloc(QHCA_MW_TYPE_1);
        let k1 = inc_key(w);
        let mrx = t.reg(BINDABLE);
        let b = Bind {
            mr_key: mrx,
            ..t.win(w, k1, 0, 512, RW)
        };
        let mut lf = t.link();
        behind_a_failing_write(
            &mut t,
            &trace,
            &mut lf,
            &b.wqe(0x11, QHCA_WQE_SIGNALED),
            QHCA_WC_BIND_MW,
            &what,
        );
        let mut lx = t.link();
        t.write_refused(&mut lx, 0, 64, k1, &format!("{what}: its key"));
        assert_eq!(
            dereg(&mut t, mrx),
            QHCA_CMD_OK,
            "{what}: its region is held by no window"
        );
        let mut l = t.link();
        let b = t.win(w, k1, 0, 512, RW);
        t.bind_b(&mut l, &b);
        t.write_ok(&mut l, 0, 64, k1, &format!("{what}: bound to its key now"));

        // Type 1, bound with k1 over [0, 512): a flushed rebind to k2 over [1024, 1536).
        let what = format!("{wire}: rebind of a bound type 1 window");
        let k2 = inc_key(k1);
        let b = t.win(w, k2, 1024, 512, RW);
        let mut lf = t.link();
        behind_a_failing_write(
            &mut t,
            &trace,
            &mut lf,
            &b.wqe(0x11, QHCA_WQE_SIGNALED),
            QHCA_WC_BIND_MW,
            &what,
        );
        t.write_ok(&mut l, 64, 64, k1, &format!("{what}: the old key"));
        let mut lx = t.link();
        t.write_refused(&mut lx, 1024, 64, k2, &format!("{what}: its key"));
        let mut lx = t.link();
        t.write_refused(
            &mut lx,
            1024,
            64,
            k1,
            &format!("{what}: the old key over its range"),
        );
        t.write_ok(&mut l, 448, 64, k1, &format!("{what}: the old range"));

        for ty in TYPE2 {
            // Type 2, unbound: neither bound to the QP the bind was posted on nor at all.
            let what = format!("{wire}: bind of an unbound type {ty} window");
            let w = t.alloc(ty);
            let k = inc_key(w);
            let mrx = t.reg(BINDABLE);
            let b = Bind {
                mr_key: mrx,
                ..t.win(w, k, 0, 512, RW)
            };
            let mut lf = t.link();
            behind_a_failing_write(
                &mut t,
                &trace,
                &mut lf,
                &b.wqe(0x11, QHCA_WQE_SIGNALED),
                QHCA_WC_BIND_MW,
                &what,
            );
            let mut lx = t.link();
            assert_eq!(
                t.local_inv(&mut lx.a, &mut lx.acq, k),
                QHCA_WC_LOC_QP_OP_ERR,
                "{what}: LOCAL_INV of its key (nothing bound)"
            );
            t.went_to_err(&[lx.a.qpn]);
            // Still held by nothing, unbound, its tag not moved: a bind to k goes.
            assert_eq!(
                dereg(&mut t, mrx),
                QHCA_CMD_OK,
                "{what}: its region is held by no window"
            );
            let mry = t.reg(BINDABLE);
            let mut l = t.link();
            let b = Bind {
                mr_key: mry,
                ..t.win(w, k, 0, 512, RW)
            };
            t.bind_b(&mut l, &b);
            t.write_ok(&mut l, 0, 64, k, &format!("{what}: bound to its key now"));

            // LOCAL_INV of it (from another QP of the PD) behind a failing WRITE: flushed, the
            // window stays bound with its key, holding its region.
            let what = format!("{wire}: LOCAL_INV of a bound type {ty} window");
            let mut lf = t.link();
            behind_a_failing_write(
                &mut t,
                &trace,
                &mut lf,
                &local_inv(0x11, QHCA_WQE_SIGNALED, k).encode(),
                QHCA_WC_LOCAL_INV,
                &what,
            );
            t.write_ok(&mut l, 64, 64, k, &format!("{what}: still bound"));
            assert_eq!(
                dereg(&mut t, mry),
                QHCA_CMD_BAD_STATE,
                "{what}: its region still held"
            );
            let mut lx = t.link();
            assert_eq!(
                t.local_inv(&mut lx.a, &mut lx.acq, k),
                QHCA_WC_SUCCESS,
                "{what}: a LOCAL_INV that runs"
            );
            t.write_refused(&mut l, 0, 64, k, &format!("{what}: invalidated at last"));
            assert_eq!(dereg(&mut t, mry), QHCA_CMD_OK, "{what}: let go");
        }

        // Behind a WRITE that succeeds (in flight, on the queued wire) and a WQE refused
        // before anything is sent (an unknown opcode): the bind waits for both, is flushed.
        let what = format!("{wire}: bind behind a malformed WQE");
        let (plain, plain_key) = t.p.buf(&mut t.h, PAGE, 0, QHCA_ACCESS_LOCAL_WRITE | RW);
        let w = t.alloc(QHCA_MW_TYPE_1);
        let k = inc_key(w);
        let mut lf = t.link();
        let good = SendWr {
            wr_id: 0x20,
            ..SendWr::write(t.src, 64, t.lkey, plain, plain_key)
        };
        let bad = SendWr {
            wr_id: 0x21,
            opcode: 0x7f,
            ..good.clone()
        };
        lf.a.write_send_raw(&mut t.h, &good.encode());
        lf.a.write_send_raw(&mut t.h, &bad.encode());
        let b = t.win(w, k, 0, 512, RW);
        lf.a.write_bind(&mut t.h, 0x22, QHCA_WQE_SIGNALED, &b);
        lf.a.ring_sq(&mut t.h);
        let got: Vec<_> = cqes(&mut t, &mut lf.acq, 3)
            .into_iter()
            .map(|(id, op, st, i)| (id, if id == 0x21 { 0 } else { op }, st, i))
            .collect();
        assert_eq!(
            got,
            vec![
                (0x20, QHCA_WC_RDMA_WRITE, QHCA_WC_SUCCESS, 0),
                (0x21, 0, QHCA_WC_LOC_QP_OP_ERR, 1),
                (0x22, QHCA_WC_BIND_MW, QHCA_WC_WR_FLUSH_ERR, 2),
            ],
            "{what}"
        );
        assert_eq!(
            trace.events(&mut t, lf.a.qpn),
            vec![('s', 0), ('c', 0), ('c', 1)],
            "{what}: the bind never started"
        );
        t.went_to_err(&[lf.a.qpn]);
        let mut lx = t.link();
        t.write_refused(&mut lx, 0, 64, k, &format!("{what}: its key"));
    }
}
