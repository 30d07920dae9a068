// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Windows as objects: ALLOC_MW/DEALLOC_MW checks, counts, slots and key generations; regions
//! with windows bound (DEREG_MR refused, or unbinding them with `QHCA_DEREG_MR_UNBIND_MWS`);
//! contexts and the device torn down with windows bound.

use super::*;

// ------------------------------------------------------------------------------------------
// ALLOC_MW and DEALLOC_MW

#[test]
fn alloc_and_dealloc_are_checked() {
    let mut h = Hca::start("num-uars=8");
    h.bring_up(5, 6);
    assert_eq!(h.query_device(OUT_RAM, wire::ATTR_SIZE as u32), QHCA_CMD_OK);
    let a = wire::decode_attr(&h.qt.memread(OUT_RAM, wire::ATTR_SIZE));
    assert_ne!(a.caps & CAP_MW, 0, "QHCA_CAP_MW: {a:?}");
    assert_eq!(a.max_mw, 4096, "{a:?}");
    assert_ne!(h.reg(QHCA_REG_CAPS_LO) & QHCA_CAP_MW, 0, "CAPS register");
    // REG_NUM_MW is read-only: a write is a guest error and changes nothing.
    let errors = h.guest_errors();
    h.set_reg(QHCA_REG_NUM_MW, 7);
    assert_eq!(h.reg(QHCA_REG_NUM_MW), 0);
    assert_eq!(h.guest_errors(), errors + 1, "a write to REG_NUM_MW");

    let (st, uar) = h.alloc_uar();
    assert_eq!(st, QHCA_CMD_OK);
    let uar = uar as u32;
    let (st, pdn) = alloc_pd(&mut h, uar);
    assert_eq!(st, QHCA_CMD_OK);
    let (st, other) = h.alloc_uar();
    assert_eq!(st, QHCA_CMD_OK);
    let other = other as u32;
    let (st, other_pd) = alloc_pd(&mut h, other);
    assert_eq!(st, QHCA_CMD_OK);

    let raw = |h: &mut Hca, in_: [u64; 5]| obj_cmd(h, QHCA_CMD_ALLOC_MW, in_).0;
    let (u, p) = (uar as u64, pdn as u64);
    for (in_, want, what) in [
        ([u, p, 0, 0, 0], QHCA_CMD_BAD_PARAM, "type 0"),
        ([u, p, 4, 0, 0], QHCA_CMD_BAD_PARAM, "type 4"),
        (
            [u, p, 1 << 32 | 1, 0, 0],
            QHCA_CMD_BAD_PARAM,
            "type above 32 bits",
        ),
        ([u, p, 1, 1, 0], QHCA_CMD_BAD_PARAM, "in[3] reserved"),
        ([u, p, 1, 0, 1], QHCA_CMD_BAD_PARAM, "in[4] reserved"),
        (
            [u | 1 << 32, p, 1, 0, 0],
            QHCA_CMD_BAD_PARAM,
            "uar above 32 bits",
        ),
        (
            [7, p, 1, 0, 0],
            QHCA_CMD_BAD_RESOURCE,
            "a UAR not allocated",
        ),
        (
            [other as u64, p, 1, 0, 0],
            QHCA_CMD_BAD_RESOURCE,
            "another context's PD",
        ),
        (
            [u, other_pd as u64, 2, 0, 0],
            QHCA_CMD_BAD_RESOURCE,
            "another context's PD (2)",
        ),
        (
            [u, 999, 1, 0, 0],
            QHCA_CMD_BAD_RESOURCE,
            "a PD that does not exist",
        ),
    ] {
        assert_eq!(raw(&mut h, in_), want, "ALLOC_MW: {what}");
    }
    assert_eq!(
        h.reg(QHCA_REG_NUM_MW),
        0,
        "a refused ALLOC_MW allocates nothing"
    );

    let mut keys = vec![];
    for (i, ty) in TYPES.into_iter().enumerate() {
        let (st, key) = alloc_mw(&mut h, uar, pdn, ty);
        assert_eq!(st, QHCA_CMD_OK, "type {ty}");
        assert_ne!(
            key & QHCA_MW_KEY_FLAG,
            0,
            "key {key:#x} has QHCA_MW_KEY_FLAG"
        );
        assert!(!keys.contains(&key), "{key:#x} twice");
        keys.push(key);
        assert_eq!(h.reg(QHCA_REG_NUM_MW), i as u32 + 1, "REG_NUM_MW counts");
    }

    let dealloc_raw = |h: &mut Hca, in_: [u64; 5]| obj_cmd(h, QHCA_CMD_DEALLOC_MW, in_).0;
    let k0 = keys[0] as u64;
    for (in_, want, what) in [
        ([u, k0, 1, 0, 0], QHCA_CMD_BAD_PARAM, "in[2] reserved"),
        (
            [other as u64, k0, 0, 0, 0],
            QHCA_CMD_BAD_RESOURCE,
            "another context",
        ),
        (
            [7, k0, 0, 0, 0],
            QHCA_CMD_BAD_RESOURCE,
            "a UAR not allocated",
        ),
        (
            [u, k0 & !(QHCA_MW_KEY_FLAG as u64), 0, 0, 0],
            QHCA_CMD_BAD_RESOURCE,
            "no MW flag",
        ),
        (
            [u, k0 | 1 << 32, 0, 0, 0],
            QHCA_CMD_BAD_RESOURCE,
            "key above 32 bits",
        ),
        (
            [u, k0 ^ (1 << 20), 0, 0, 0],
            QHCA_CMD_BAD_RESOURCE,
            "another generation",
        ),
        (
            [u, k0 | 0x7f << TAG_BITS, 0, 0, 0],
            QHCA_CMD_BAD_RESOURCE,
            "a free slot",
        ),
    ] {
        assert_eq!(dealloc_raw(&mut h, in_), want, "DEALLOC_MW: {what}");
    }
    assert_eq!(h.reg(QHCA_REG_NUM_MW), 3);
    // The tag is not checked.
    assert_eq!(dealloc_mw(&mut h, uar, inc_key(keys[0])), QHCA_CMD_OK);
    assert_eq!(
        dealloc_mw(&mut h, uar, keys[0]),
        QHCA_CMD_BAD_RESOURCE,
        "twice"
    );
    assert_eq!(h.reg(QHCA_REG_NUM_MW), 2);

    // A PD with windows cannot go; without them it can.
    let (st, pd2) = alloc_pd(&mut h, uar);
    assert_eq!(st, QHCA_CMD_OK);
    let (st, w) = alloc_mw(&mut h, uar, pd2, QHCA_MW_TYPE_2B);
    assert_eq!(st, QHCA_CMD_OK);
    assert_eq!(
        destroy(&mut h, QHCA_CMD_DEALLOC_PD, uar, pd2),
        QHCA_CMD_BAD_STATE,
        "DEALLOC_PD of a PD with a window"
    );
    assert_eq!(dealloc_mw(&mut h, uar, w), QHCA_CMD_OK);
    assert_eq!(destroy(&mut h, QHCA_CMD_DEALLOC_PD, uar, pd2), QHCA_CMD_OK);

    // ON_DEMAND regions take no windows.
    let b = reg_mr_bytes(
        uar,
        pdn,
        0x7f00_0000_0000,
        PAGE,
        QHCA_ACCESS_LOCAL_WRITE | QHCA_ACCESS_ON_DEMAND | QHCA_ACCESS_MW_BIND,
        0,
        0,
    );
    assert_eq!(
        obj_cmd(&mut h, QHCA_CMD_REG_MR, in_words(&b)).0,
        QHCA_CMD_BAD_PARAM,
        "REG_MR ON_DEMAND | MW_BIND"
    );

    for k in &keys[1..] {
        assert_eq!(dealloc_mw(&mut h, uar, *k), QHCA_CMD_OK);
    }
    assert_eq!(h.reg(QHCA_REG_NUM_MW), 0);
    assert_eq!(destroy(&mut h, QHCA_CMD_DEALLOC_PD, uar, pdn), QHCA_CMD_OK);
}

/// ALLOC_MW of `n` windows of type 1, 32 commands under one doorbell at a time.
fn alloc_many(h: &mut Hca, uar: u32, pdn: u32, n: usize) -> Vec<u32> {
    let mut keys = vec![];
    while keys.len() < n {
        let cmds: Vec<_> = (0..(n - keys.len()).min(32))
            .map(|_| {
                let mut c = h.cmd(QHCA_CMD_ALLOC_MW);
                c.in_ = [uar as u64, pdn as u64, QHCA_MW_TYPE_1 as u64, 0, 0];
                c
            })
            .collect();
        h.post_batch(&cmds);
        for c in &cmds {
            let e = h.completion_of(c);
            assert_eq!(e.status as u32, QHCA_CMD_OK, "window #{}", keys.len());
            keys.push(e.data[0] as u32);
        }
    }
    keys
}

#[test]
fn window_slots_run_out_and_come_back_with_new_keys() {
    let mut h = Hca::start("num-uars=8");
    h.bring_up(5, 6);
    let (st, uar) = h.alloc_uar();
    assert_eq!(st, QHCA_CMD_OK);
    let uar = uar as u32;
    let (st, pdn) = alloc_pd(&mut h, uar);
    assert_eq!(st, QHCA_CMD_OK);

    let keys = alloc_many(&mut h, uar, pdn, 4096);
    assert_eq!(h.reg(QHCA_REG_NUM_MW), 4096);
    let mut slots: Vec<u32> = keys.iter().map(|&k| slot(k)).collect();
    slots.sort_unstable();
    assert_eq!(slots, (0..4096).collect::<Vec<_>>(), "every slot once");
    assert!(keys.iter().all(|k| k & QHCA_MW_KEY_FLAG != 0));
    assert_eq!(
        alloc_mw(&mut h, uar, pdn, QHCA_MW_TYPE_2A).0,
        QHCA_CMD_NO_RESOURCES,
        "max_mw windows"
    );

    // The one slot freed comes back, with another generation: the old key names nothing.
    let old = keys[1234];
    assert_eq!(dealloc_mw(&mut h, uar, old), QHCA_CMD_OK);
    let (st, new) = alloc_mw(&mut h, uar, pdn, QHCA_MW_TYPE_2A);
    assert_eq!(st, QHCA_CMD_OK);
    assert_eq!(slot(new), slot(old), "the only free slot");
    assert_ne!(new, old, "a reused slot gives another key");
    assert_ne!(
        new >> 20,
        old >> 20,
        "another generation: {old:#x} -> {new:#x}"
    );
    assert_eq!(
        dealloc_mw(&mut h, uar, old),
        QHCA_CMD_BAD_RESOURCE,
        "the old key names nothing"
    );
    assert_eq!(h.reg(QHCA_REG_NUM_MW), 4096);

    // The context's end takes them all.
    assert_eq!(h.free_uar(uar as u64), QHCA_CMD_OK);
    assert_eq!(h.reg(QHCA_REG_NUM_MW), 0);
    assert_eq!(h.reg(QHCA_REG_NUM_PD), 0);
}

// ------------------------------------------------------------------------------------------
// Regions and contexts with windows bound

#[test]
fn dereg_mr_waits_for_its_windows() {
    let mut t = T::new();
    let mut l = t.link();

    // Two windows on one region: it goes when both are.
    let mr2 = t.reg(BINDABLE);
    let n_mr = t.h.reg(QHCA_REG_NUM_MR);
    let w2 = t.alloc(QHCA_MW_TYPE_2A);
    let k2 = inc_key(w2);
    let b = Bind {
        mr_key: mr2,
        ..t.win(w2, k2, 0, 256, RW)
    };
    t.bind_b(&mut l, &b);
    assert_eq!(
        dereg(&mut t, mr2),
        QHCA_CMD_BAD_STATE,
        "a type 2 window bound"
    );
    assert_eq!(t.h.reg(QHCA_REG_NUM_MR), n_mr);
    t.write_ok(&mut l, 0, 64, k2, "after the refused DEREG_MR");
    let w1 = t.alloc(QHCA_MW_TYPE_1);
    let k1 = inc_key(w1);
    let b = Bind {
        mr_key: mr2,
        ..t.win(w1, k1, 256, 256, RW)
    };
    t.bind_b(&mut l, &b);
    assert_eq!(t.local_inv(&mut l.b, &mut l.bcq, k2), QHCA_WC_SUCCESS);
    assert_eq!(
        dereg(&mut t, mr2),
        QHCA_CMD_BAD_STATE,
        "a type 1 window bound"
    );
    t.write_ok(&mut l, 256, 64, k1, "type 1 still bound");
    assert_eq!(dealloc_mw(&mut t.h, t.p.uar, k1), QHCA_CMD_OK);
    assert_eq!(dereg(&mut t, mr2), QHCA_CMD_OK, "no window bound");
    assert_eq!(t.h.reg(QHCA_REG_NUM_MR), n_mr - 1);
    assert_eq!(t.num_mw(), 1);
    t.write_refused(&mut l, 256, 64, k1, "a deallocated window's key");

    // A rebind moves the hold; an unbind (type 1, length 0) lets go.
    let mut l = t.link();
    let (mr3, mr4) = (t.reg(BINDABLE), t.reg(BINDABLE));
    let w = t.alloc(QHCA_MW_TYPE_1);
    let k3 = inc_key(w);
    let b = Bind {
        mr_key: mr3,
        ..t.win(w, k3, 0, 256, RW)
    };
    t.bind_b(&mut l, &b);
    assert_eq!(dereg(&mut t, mr3), QHCA_CMD_BAD_STATE);
    let k4 = inc_key(k3);
    let b = Bind {
        mr_key: mr4,
        ..t.win(w, k4, 0, 256, RW)
    };
    t.bind_b(&mut l, &b);
    assert_eq!(dereg(&mut t, mr3), QHCA_CMD_OK, "the window moved away");
    assert_eq!(
        dereg(&mut t, mr4),
        QHCA_CMD_BAD_STATE,
        "the window moved here"
    );
    t.write_ok(&mut l, 0, 64, k4, "rebound");
    let k5 = inc_key(k4);
    let b = Bind {
        addr: 0,
        length: 0,
        mw_key: w,
        new_key: k5,
        mr_key: 0,
        access: 0,
    };
    t.bind_b(&mut l, &b);
    assert_eq!(dereg(&mut t, mr4), QHCA_CMD_OK, "unbound");
    let mut l2 = t.link();
    t.write_refused(&mut l2, 0, 64, k5, "an unbound type 1 window's new key");
    t.write_refused(&mut l, 0, 64, k4, "an unbound type 1 window's old key");

    // A SEND_WITH_INV and a DEALLOC_MW of a bound type 2 window let go too.
    let mut l = t.link();
    let (mr5, mr6) = (t.reg(BINDABLE), t.reg(BINDABLE));
    let w5 = t.alloc(QHCA_MW_TYPE_2B);
    let k5 = inc_key(w5);
    let b = Bind {
        mr_key: mr5,
        ..t.win(w5, k5, 0, 256, RW)
    };
    t.bind_b(&mut l, &b);
    let w6 = t.alloc(QHCA_MW_TYPE_2A);
    let k6 = inc_key(w6);
    let b = Bind {
        mr_key: mr6,
        ..t.win(w6, k6, 0, 256, RW)
    };
    t.bind_b(&mut l, &b);
    assert_eq!(dereg(&mut t, mr5), QHCA_CMD_BAD_STATE);
    assert_eq!(dereg(&mut t, mr6), QHCA_CMD_BAD_STATE);
    let (rcv, rcv_key) = t.p.buf(&mut t.h, PAGE, 0, QHCA_ACCESS_LOCAL_WRITE);
    l.b.post_recv(&mut t.h, 0x7e, &[(rcv, 64, rcv_key)]);
    let wr = send_inv(0x7d, QHCA_WQE_SIGNALED, k5, vec![]);
    let c = t.post(&mut l, &wr);
    assert_eq!(c.status as u32, QHCA_WC_SUCCESS, "{c:?}");
    let r = l.bcq.wait(&mut t.h);
    assert_eq!(
        (r.status as u32, r.flags as u32, r.imm, r.byte_len),
        (QHCA_WC_SUCCESS, QHCA_CQE_WITH_INV, k5, 0),
        "{r:?}"
    );
    assert_eq!(dereg(&mut t, mr5), QHCA_CMD_OK, "after SEND_WITH_INV");
    assert_eq!(dealloc_mw(&mut t.h, t.p.uar, w6), QHCA_CMD_OK);
    assert_eq!(dereg(&mut t, mr6), QHCA_CMD_OK, "after DEALLOC_MW");
    t.write_refused(&mut l, 0, 64, k6, "a deallocated type 2 window's key");
}

fn counts(h: &mut Hca) -> [u32; 6] {
    [
        QHCA_REG_NUM_CTX,
        QHCA_REG_NUM_PD,
        QHCA_REG_NUM_MR,
        QHCA_REG_NUM_CQ,
        QHCA_REG_NUM_QP,
        QHCA_REG_NUM_MW,
    ]
    .map(|r| h.reg(r))
}

/// Windows of every type bound through `t`'s own pair and a link, plus one unbound.
fn bind_some(t: &mut T) {
    let before = t.num_mw();
    let mut l = t.link();
    let mr2 = t.reg(BINDABLE);
    for (i, ty) in TYPES.into_iter().enumerate() {
        let mw = t.alloc(ty);
        let k = inc_key(mw);
        let off = i as u64 * 512;
        let mut b = t.win(mw, k, off, 512, REMOTE);
        if i == 2 {
            b.mr_key = mr2;
        }
        t.bind_b(&mut l, &b);
        t.write_ok(&mut l, off, 64, k, "before the teardown");
    }
    t.alloc(QHCA_MW_TYPE_2B);
    let mr = t.mr;
    assert_eq!(dereg(t, mr), QHCA_CMD_BAD_STATE);
    assert_eq!(dereg(t, mr2), QHCA_CMD_BAD_STATE);
    let (uar, pdn) = (t.p.uar, t.p.pdn);
    assert_eq!(
        destroy(&mut t.h, QHCA_CMD_DEALLOC_PD, uar, pdn),
        QHCA_CMD_BAD_STATE
    );
    assert_eq!(t.num_mw(), before + 4);
}

#[test]
fn context_teardown_frees_bound_windows() {
    let mut t = T::new();
    bind_some(&mut t);
    assert_eq!(t.h.free_uar(t.p.uar as u64), QHCA_CMD_OK);
    assert_eq!(
        counts(&mut t.h),
        [0; 6],
        "after FREE_UAR with windows bound"
    );

    // The device is sound afterwards: a new context binds and uses a window.
    let mut t = T::on(t.h);
    let (_, k, mut l) = t.bound(QHCA_MW_TYPE_2A, 0, 512, RW);
    t.write_ok(&mut l, 0, 512, k, "a new context");

    // A device reset with windows bound leaves nothing behind either.
    bind_some(&mut t);
    t.h.bring_up(5, 6);
    assert_eq!(
        counts(&mut t.h),
        [0; 6],
        "after CTRL.RESET with windows bound"
    );
}

/// DEREG_MR with `QHCA_DEREG_MR_UNBIND_MWS` of a region with windows of every type bound:
/// they are unbound first (their keys fail, a type 2 one names nothing to invalidate), the
/// region goes, and the windows bind again to another region and are deallocated as ever. A
/// window bound to another region is left alone; without the flag it stays BAD_STATE; any
/// other bit of in[2], or in[3], is BAD_PARAM.
#[test]
fn dereg_mr_can_unbind_its_windows() {
    let mut t = T::new();
    let mut l = t.link();
    let mrx = t.reg(BINDABLE);
    let n_mr = t.h.reg(QHCA_REG_NUM_MR);
    let mut wins = vec![];
    for (i, ty) in TYPES.into_iter().enumerate() {
        let w = t.alloc(ty);
        let k = inc_key(w);
        let off = i as u64 * 512;
        let b = Bind {
            mr_key: mrx,
            ..t.win(w, k, off, 512, RW)
        };
        t.bind_b(&mut l, &b);
        t.write_ok(&mut l, off, 64, k, &format!("type {ty} on the region"));
        wins.push((ty, w, k, off));
    }
    // Another window on the target's own region.
    let other = t.alloc(QHCA_MW_TYPE_1);
    let ko = inc_key(other);
    let b = t.win(other, ko, 1536, 512, RW);
    t.bind_b(&mut l, &b);

    assert_eq!(
        dereg(&mut t, mrx),
        QHCA_CMD_BAD_STATE,
        "windows bound, in[2] = 0"
    );
    let (uar, key) = (t.p.uar as u64, mrx as u64);
    for (in_, what) in [
        ([uar, key, 2, 0, 0], "in[2] = 2"),
        ([uar, key, 3, 0, 0], "in[2] = UNBIND_MWS | 2"),
        (
            [uar, key, 1 << 32 | 1, 0, 0],
            "in[2] = UNBIND_MWS | 1 << 32",
        ),
        ([uar, key, 1 << 63, 0, 0], "in[2] = 1 << 63"),
        ([uar, key, 1, 1, 0], "UNBIND_MWS with in[3] = 1"),
        ([uar, key, 1, 0, 1], "UNBIND_MWS with in[4] = 1"),
    ] {
        assert_eq!(
            obj_cmd(&mut t.h, QHCA_CMD_DEREG_MR, in_).0,
            QHCA_CMD_BAD_PARAM,
            "DEREG_MR: {what}"
        );
    }
    assert_eq!(t.h.reg(QHCA_REG_NUM_MR), n_mr, "refused DEREG_MRs");
    for &(ty, _, k, off) in &wins {
        let what = format!("type {ty} after the refused DEREG_MRs");
        t.write_ok(&mut l, off + 64, 64, k, &what);
    }

    let unbind = QHCA_DEREG_MR_UNBIND_MWS as u64;
    assert_eq!(dereg_flags(&mut t, mrx, unbind), QHCA_CMD_OK, "UNBIND_MWS");
    assert_eq!(t.h.reg(QHCA_REG_NUM_MR), n_mr - 1);
    assert_eq!(t.num_mw(), 4, "the windows stay");
    assert_eq!(
        dereg_flags(&mut t, mrx, unbind),
        QHCA_CMD_BAD_RESOURCE,
        "the region is gone"
    );
    for (i, &(ty, _, k, off)) in wins.iter().enumerate() {
        let what = format!("type {ty} after DEREG_MR with UNBIND_MWS");
        t.write_refused(&mut l, off as i64, 64, k, &what);
        l.reconnect(&mut t.h, &ConnParams::default(), 0x300 + 0x100 * i as u32);
    }
    let mut lx = t.link();
    let k2a = wins[1].2;
    assert_eq!(
        t.local_inv(&mut lx.a, &mut lx.acq, k2a),
        QHCA_WC_LOC_QP_OP_ERR,
        "LOCAL_INV of a type 2 window unbound by DEREG_MR"
    );
    t.went_to_err(&[lx.a.qpn]);
    t.write_ok(&mut l, 1536, 64, ko, "a window on another region");

    // Bound again, to another region, then deallocated: that region goes without the flag.
    let mry = t.reg(BINDABLE);
    let mut l2 = t.link();
    for &(ty, w, k, off) in &wins {
        let k2 = inc_key(k);
        let b = Bind {
            mr_key: mry,
            ..t.win(w, k2, off, 256, RW)
        };
        t.bind_b(&mut l2, &b);
        let what = format!("type {ty} bound to another region");
        t.write_ok(&mut l2, off + 128, 64, k2, &what);
    }
    assert_eq!(dereg(&mut t, mry), QHCA_CMD_BAD_STATE);
    for &(ty, w, ..) in &wins {
        assert_eq!(dealloc_mw(&mut t.h, t.p.uar, w), QHCA_CMD_OK, "type {ty}");
    }
    assert_eq!(t.num_mw(), 1);
    assert_eq!(dereg(&mut t, mry), QHCA_CMD_OK, "DEALLOC_MW let go");
    // The flag on a region without windows: an ordinary DEREG_MR.
    let mrz = t.reg(BINDABLE);
    assert_eq!(dereg_flags(&mut t, mrz, unbind), QHCA_CMD_OK);
    assert_eq!(t.h.reg(QHCA_REG_NUM_MR), n_mr - 1);
    t.write_ok(&mut l, 1600, 64, ko, "the other window at the end");
}
