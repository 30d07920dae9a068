// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Unbinding type 2 windows: LOCAL_INV and SEND_WITH_INV (the keys they kill, the keys they
//! cannot invalidate), an invalidation or a DEALLOC_MW cutting off a message in progress, and a
//! type 2 window invalidated with the QP it is bound to.

use super::*;

// ------------------------------------------------------------------------------------------
// LOCAL_INV

#[test]
fn local_invalidate() {
    let mut t = T::new();
    for ty in TYPE2 {
        let what = format!("type {ty}");
        let mw = t.alloc(ty);
        let mut l = t.link();
        let k = inc_key(mw);
        let b = t.win(mw, k, 0, 256, RW);
        t.bind_b(&mut l, &b);
        t.write_ok(&mut l, 0, 32, k, &what);

        // A wrong tag invalidates nothing (from another QP of the PD).
        let mut l2 = t.link();
        let st = t.local_inv(&mut l2.a, &mut l2.acq, inc_key(k));
        assert_eq!(
            st, QHCA_WC_LOC_QP_OP_ERR,
            "{what}: LOCAL_INV of a wrong tag"
        );
        t.went_to_err(&[l2.a.qpn]);
        t.write_ok(
            &mut l,
            32,
            32,
            k,
            &format!("{what}: after a wrong LOCAL_INV"),
        );

        // Its own QP invalidates it: the key fails from then on.
        let st = t.local_inv(&mut l.b, &mut l.bcq, k);
        assert_eq!(st, QHCA_WC_SUCCESS, "{what}");
        t.write_refused(&mut l, 0, 32, k, &format!("{what}: after LOCAL_INV"));

        // Unbound now: another LOCAL_INV of it fails.
        let mut l3 = t.link();
        let st = t.local_inv(&mut l3.a, &mut l3.acq, k);
        assert_eq!(
            st, QHCA_WC_LOC_QP_OP_ERR,
            "{what}: LOCAL_INV of an unbound window"
        );
        t.went_to_err(&[l3.a.qpn]);

        // Any QP of the PD may invalidate it.
        let mut l4 = t.link();
        let k2 = inc_key(k);
        let b = t.win(mw, k2, 0, 256, RW);
        t.bind_b(&mut l4, &b);
        t.write_ok(&mut l4, 64, 32, k2, &what);
        let st = t.local_inv(&mut l2.b, &mut l2.bcq, k2);
        assert_eq!(st, QHCA_WC_SUCCESS, "{what}: LOCAL_INV from another QP");
        t.write_refused(
            &mut l4,
            64,
            32,
            k2,
            &format!("{what}: invalidated elsewhere"),
        );
    }

    // Type 1 windows and regions are not invalidated by LOCAL_INV.
    let (_, k, mut l) = t.bound(QHCA_MW_TYPE_1, 0, 256, RW);
    let mut l2 = t.link();
    let st = t.local_inv(&mut l2.a, &mut l2.acq, k);
    assert_eq!(st, QHCA_WC_LOC_QP_OP_ERR, "LOCAL_INV of a type 1 window");
    t.went_to_err(&[l2.a.qpn]);
    t.write_ok(&mut l, 128, 32, k, "type 1 after LOCAL_INV");
    let mut l3 = t.link();
    let mr = t.mr;
    let st = t.local_inv(&mut l3.a, &mut l3.acq, mr);
    assert_eq!(st, QHCA_WC_LOC_QP_OP_ERR, "LOCAL_INV of a region's key");
    t.went_to_err(&[l3.a.qpn]);
    // An unsignalled LOCAL_INV that succeeds writes no CQE.
    let mw = t.alloc(QHCA_MW_TYPE_2A);
    let mut l4 = t.link();
    let k = inc_key(mw);
    let b = t.win(mw, k, 0, 256, RW);
    t.bind_b(&mut l4, &b);
    l4.b.post_send(&mut t.h, &local_inv(0x1f, 0, k));
    l4.bcq.expect_empty(&mut t.h);
    t.write_refused(&mut l4, 0, 8, k, "after an unsignalled LOCAL_INV");
}

// ------------------------------------------------------------------------------------------
// SEND_WITH_INV

#[test]
fn send_with_invalidate() {
    let mut t = T::new();
    // A receive page for l.b.
    let (rcv, rcv_key) = t.p.buf(&mut t.h, PAGE, 0x44, QHCA_ACCESS_LOCAL_WRITE);
    for (ty, len) in [(QHCA_MW_TYPE_2A, 600usize), (QHCA_MW_TYPE_2B, 40)] {
        let what = format!("type {ty}, {len} bytes");
        let mw = t.alloc(ty);
        let mut l = t.link();
        let k = inc_key(mw);
        let b = t.win(mw, k, 0, 512, RW);
        t.bind_b(&mut l, &b);
        t.write_ok(&mut l, 0, 64, k, &what);

        fill_page(&mut t, rcv, 0x44);
        l.b.post_recv(&mut t.h, 0x5e, &[(rcv, PAGE as u32, rcv_key)]);
        let data = t.data(len);
        t.h.qt.memwrite(t.src, &data);
        let wr = send_inv(
            0x5d,
            QHCA_WQE_SIGNALED,
            k,
            vec![(t.src, len as u32, t.lkey)],
        );
        let c = t.post(&mut l, &wr);
        assert_eq!(
            (c.opcode as u32, c.status as u32),
            (QHCA_WC_SEND, QHCA_WC_SUCCESS),
            "{what}: {c:?}"
        );
        let r = l.bcq.wait(&mut t.h);
        assert_eq!(
            (r.wr_id, r.opcode as u32, r.status as u32),
            (0x5e, QHCA_WC_RECV, QHCA_WC_SUCCESS),
            "{what}: {r:?}"
        );
        assert_eq!(
            (r.flags as u32, r.imm, r.byte_len, r.qpn, r.src_qp),
            (QHCA_CQE_WITH_INV, k, len as u32, l.b.qpn, l.a.qpn),
            "{what}: the receive CQE names the key: {r:?}"
        );
        assert_eq!(t.h.qt.memread(rcv, len), data, "{what}");
        t.write_refused(&mut l, 0, 64, k, &format!("{what}: after SEND_WITH_INV"));
        // Unbound, not broken: it binds again.
        let mut l2 = t.link();
        let k2 = inc_key(k);
        let b = t.win(mw, k2, 0, 512, RW);
        t.bind_b(&mut l2, &b);
        t.write_ok(&mut l2, 0, 64, k2, &format!("{what}: bound again"));
    }

    // Keys a SEND_WITH_INV cannot invalidate on the QP it lands on.
    let w1 = t.alloc(QHCA_MW_TYPE_1);
    let mut l1 = t.link();
    let k1 = inc_key(w1);
    let b = t.win(w1, k1, 1024, 256, RW);
    t.bind_b(&mut l1, &b);
    let w2 = t.alloc(QHCA_MW_TYPE_2A);
    let mut l2 = t.link();
    let k2 = inc_key(w2);
    let b = t.win(w2, k2, 1536, 256, RW);
    t.bind_b(&mut l2, &b);
    let w3 = t.alloc(QHCA_MW_TYPE_2B);
    // None: the wrong tag of a type 2 window bound to the QP the SEND lands on.
    let cases = [
        (Some(k1), "a type 1 window"),
        (Some(k2), "a type 2 window bound to another QP"),
        (Some(inc_key(w3)), "an unbound type 2 window"),
        (Some(t.mr), "a region"),
        (Some(0x1234_5678 | QHCA_MW_KEY_FLAG), "nothing"),
        (None, "the wrong tag of a type 2 window bound to this QP"),
    ];
    for (key, what) in cases {
        let mut l = t.link();
        let mut mine = None;
        let key = key.unwrap_or_else(|| {
            let w = t.alloc(QHCA_MW_TYPE_2B);
            let k = inc_key(w);
            let b = t.win(w, k, 2048, 256, RW);
            t.bind_b(&mut l, &b);
            mine = Some(k);
            inc_key(k)
        });
        l.b.post_recv(&mut t.h, 0x6e, &[(rcv, PAGE as u32, rcv_key)]);
        let wr = send_inv(0x6d, QHCA_WQE_SIGNALED, key, vec![(t.src, 16, t.lkey)]);
        let c = t.post(&mut l, &wr);
        assert_eq!(
            (c.opcode as u32, c.status as u32),
            (QHCA_WC_SEND, QHCA_WC_REM_INV_REQ_ERR),
            "{what}: sender {c:?}"
        );
        let r = l.bcq.wait(&mut t.h);
        assert_eq!(
            (r.wr_id, r.opcode as u32, r.status as u32, r.flags),
            (0x6e, QHCA_WC_RECV, QHCA_WC_REM_INV_REQ_ERR, 0),
            "{what}: receiver {r:?}"
        );
        t.went_to_err(&[l.a.qpn, l.b.qpn]);
        if let Some(k) = mine {
            // Still bound with its key: LOCAL_INV of exactly that key works.
            let mut lx = t.link();
            assert_eq!(
                t.local_inv(&mut lx.a, &mut lx.acq, k),
                QHCA_WC_SUCCESS,
                "{what}"
            );
        }
    }
    // The windows named are as they were.
    let mut l3 = t.link();
    t.write_ok(&mut l3, 1024, 32, k1, "type 1 after a SEND_WITH_INV of it");
    t.write_ok(
        &mut l2,
        1536,
        32,
        k2,
        "type 2A after a SEND_WITH_INV elsewhere",
    );
}

// ------------------------------------------------------------------------------------------
// A message in progress

/// A region of `pages` pages at `iova` whose pages all alias `fill_page` but the last,
/// `last_page`: far larger than guest RAM, cheap to set up.
fn aliased_mr(
    t: &mut T,
    iova: u64,
    pages: u64,
    fill_page: u64,
    last_page: u64,
    access: u32,
) -> u32 {
    let mut list = vec![fill_page; pages as usize];
    *list.last_mut().unwrap() = last_page;
    let dir = t.p.m.page_list_of(&mut t.h, &list);
    let b = reg_mr_bytes(
        t.p.uar,
        t.p.pdn,
        iova,
        pages * PAGE,
        access,
        pages as u32,
        dir,
    );
    let (st, key) = obj_cmd(&mut t.h, QHCA_CMD_REG_MR, in_words(&b));
    assert_eq!(st, QHCA_CMD_OK, "REG_MR of {pages} aliased pages");
    key as u32
}

/// The responder checks a window's key on every packet: a 256 MiB READ (2^20 response
/// packets, answered a budget per engine turn) through a type 2 window that a LOCAL_INV (from
/// another QP of the PD) invalidates meanwhile is cut off (its last page never arrives); the same
/// for a 256 MiB WRITE through a type 1 window deallocated meanwhile.
#[test]
fn invalidation_stops_a_message_in_progress() {
    let mut t = T::new();
    let pages = 1u64 << 16;
    let len = pages * PAGE;
    let fill = t.p.m.alloc(&mut t.h, PAGE);
    t.h.qt.memset(fill, PAGE as usize, 0x5a);
    let last_remote = t.p.m.alloc(&mut t.h, PAGE);
    let last_local = t.p.m.alloc(&mut t.h, PAGE);
    let (remote, local) = (0x10_0000_0000u64, 0x20_0000_0000u64);
    let rmr = aliased_mr(&mut t, remote, pages, fill, last_remote, BINDABLE);
    let lmr = aliased_mr(
        &mut t,
        local,
        pages,
        fill,
        last_local,
        QHCA_ACCESS_LOCAL_WRITE,
    );

    let mw = t.alloc(QHCA_MW_TYPE_2A);
    let mut l = t.link();
    let k = inc_key(mw);
    let b = Bind {
        addr: remote,
        length: len,
        mw_key: mw,
        new_key: k,
        mr_key: rmr,
        access: RW,
    };
    t.bind_b(&mut l, &b);
    t.h.qt.memset(last_remote, PAGE as usize, 0x77);
    let read = SendWr {
        wr_id: 0x4d,
        opcode: QHCA_WR_RDMA_READ,
        flags: QHCA_WQE_SIGNALED,
        remote_addr: remote,
        rkey: k,
        sges: vec![(local, len as u32, lmr)],
        ..Default::default()
    };
    l.a.post_send(&mut t.h, &read);
    // From another QP of the PD: l.b's own SQ waits while its responder streams the answer.
    let mut lx = t.link();
    let st = t.local_inv(&mut lx.a, &mut lx.acq, k);
    assert_eq!(st, QHCA_WC_SUCCESS);
    let c = l.acq.wait(&mut t.h);
    assert_eq!(
        (c.wr_id, c.opcode as u32, c.status as u32),
        (0x4d, QHCA_WC_RDMA_READ, QHCA_WC_REM_ACCESS_ERR),
        "READ through a window invalidated mid-message: {c:?}"
    );
    assert!(
        t.h.qt
            .memread(last_local, PAGE as usize)
            .iter()
            .all(|&b| b == 0),
        "the READ's last page arrived after the LOCAL_INV"
    );
    t.went_to_err(&[l.a.qpn, l.b.qpn]);

    let mw = t.alloc(QHCA_MW_TYPE_1);
    let mut l = t.link();
    let k = inc_key(mw);
    let b = Bind {
        mw_key: mw,
        new_key: k,
        ..b
    };
    t.bind_b(&mut l, &b);
    t.h.qt.memset(last_remote, PAGE as usize, 0);
    t.h.qt.memset(last_local, PAGE as usize, 0x3c);
    let write = SendWr {
        wr_id: 0x4e,
        opcode: QHCA_WR_RDMA_WRITE,
        flags: QHCA_WQE_SIGNALED,
        remote_addr: remote,
        rkey: k,
        sges: vec![(local, len as u32, lmr)],
        ..Default::default()
    };
    l.a.post_send(&mut t.h, &write);
    assert_eq!(dealloc_mw(&mut t.h, t.p.uar, k), QHCA_CMD_OK);
    let c = l.acq.wait(&mut t.h);
    assert_eq!(
        (c.wr_id, c.opcode as u32, c.status as u32),
        (0x4e, QHCA_WC_RDMA_WRITE, QHCA_WC_REM_ACCESS_ERR),
        "WRITE through a window deallocated mid-message: {c:?}"
    );
    assert!(
        t.h.qt
            .memread(last_remote, PAGE as usize)
            .iter()
            .all(|&b| b == 0),
        "the WRITE's last page landed after the DEALLOC_MW"
    );
    t.went_to_err(&[l.a.qpn, l.b.qpn]);
    // The region is free to go now.
    assert_eq!(dereg(&mut t, rmr), QHCA_CMD_OK);
}

// ------------------------------------------------------------------------------------------
// A type 2 window goes with its QP

/// A type 2 window is invalidated when the QP it is bound to is destroyed, so that no QP that
/// gets that QPN later can use it (a type 2A window checks only the QPN): its key fails through
/// any QP, its region is no longer held (DEREG_MR without the flag works), a LOCAL_INV of the
/// key finds nothing to invalidate, and the window binds again to a live QP.
#[test]
fn a_type2_window_goes_with_its_qp() {
    let mut t = T::new();
    for ty in TYPE2 {
        let what = format!("type {ty}");
        let mrx = t.reg(BINDABLE);
        let w = t.alloc(ty);
        let k = inc_key(w);
        let mut l = t.link();
        let b = Bind {
            mr_key: mrx,
            ..t.win(w, k, 0, 512, RW)
        };
        t.bind_b(&mut l, &b);
        t.write_ok(&mut l, 0, 64, k, &what);
        let n_qp = t.h.reg(QHCA_REG_NUM_QP);
        assert_eq!(
            destroy(&mut t.h, QHCA_CMD_DESTROY_QP, t.p.uar, l.b.qpn),
            QHCA_CMD_OK,
            "{what}: DESTROY_QP of the window's QP"
        );
        assert_eq!(t.h.reg(QHCA_REG_NUM_QP), n_qp - 1);
        let mut lx = t.link();
        t.write_refused(&mut lx, 0, 64, k, &format!("{what}: through another QP"));
        let mut lx = t.link();
        assert_eq!(
            t.local_inv(&mut lx.a, &mut lx.acq, k),
            QHCA_WC_LOC_QP_OP_ERR,
            "{what}: LOCAL_INV of a window its QP's destroy invalidated"
        );
        t.went_to_err(&[lx.a.qpn]);
        assert_eq!(dereg(&mut t, mrx), QHCA_CMD_OK, "{what}: the region let go");
        let mut l2 = t.link();
        let k2 = inc_key(k);
        let b = t.win(w, k2, 512, 512, RW);
        t.bind_b(&mut l2, &b);
        t.write_ok(&mut l2, 512, 64, k2, &format!("{what}: bound again"));
        assert_eq!(t.local_inv(&mut l2.b, &mut l2.bcq, k2), QHCA_WC_SUCCESS);
        assert_eq!(dealloc_mw(&mut t.h, t.p.uar, w), QHCA_CMD_OK);
    }

    // A type 1 window is not the QP's: it stays bound and usable.
    let w = t.alloc(QHCA_MW_TYPE_1);
    let k = inc_key(w);
    let mut l = t.link();
    let b = t.win(w, k, 0, 512, RW);
    t.bind_b(&mut l, &b);
    assert_eq!(
        destroy(&mut t.h, QHCA_CMD_DESTROY_QP, t.p.uar, l.b.qpn),
        QHCA_CMD_OK
    );
    let mut lx = t.link();
    t.write_ok(&mut lx, 0, 64, k, "type 1 after its binding QP went");
}
