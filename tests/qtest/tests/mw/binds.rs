// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Binding a window and using it: the range it grants, rebinding and the keys it kills, which
//! QPs may use it (type 2: its QP; type 1: its PD), every bind refusal (MW_BIND_ERR) changing
//! nothing, and the window's rights and the QP's.

use super::*;

// ------------------------------------------------------------------------------------------
// Binding and using a window

#[test]
fn windows_grant_exactly_their_range() {
    let mut t = T::new();
    let (woff, wlen) = (100u64, 1000u64);
    for ty in TYPES {
        let what = format!("type {ty}");
        let mw = t.alloc(ty);
        let mut l = t.link();
        let mut key = inc_key(mw);
        let b = t.win(mw, key, woff, wlen, RW);
        t.bind_b(&mut l, &b);
        // The region grants nothing remote of its own: the window does.
        t.write_ok(&mut l, woff, wlen as usize, key, &what);
        t.read_ok(&mut l, woff, wlen as usize, key, &what);
        t.write_ok(&mut l, woff, 1, key, &what);
        t.write_ok(&mut l, woff + wlen - 1, 1, key, &what);
        t.read_ok(&mut l, woff + wlen - 16, 16, key, &what);

        for (off, read) in [
            (woff as i64 - 1, false),
            ((woff + wlen) as i64 - 15, false),
            (woff as i64 - 1, true),
            ((woff + wlen) as i64 - 15, true),
        ] {
            let what = format!("type {ty}: 16 bytes at {off}, read {read}");
            let mut l = t.link();
            if ty != QHCA_MW_TYPE_1 {
                // Through this link's QP: invalidated (from there) and bound again.
                let st = t.local_inv(&mut l.b, &mut l.bcq, key);
                assert_eq!(st, QHCA_WC_SUCCESS, "{what}");
                key = inc_key(key);
                let b = t.win(mw, key, woff, wlen, RW);
                t.bind_b(&mut l, &b);
            }
            // The same 16 bytes moved inside the window do go through.
            let inside = off.clamp(woff as i64, (woff + wlen) as i64 - 16) as u64;
            if read {
                t.read_ok(&mut l, inside, 16, key, &what);
                t.read_refused(&mut l, off, 16, key, &what);
            } else {
                t.write_ok(&mut l, inside, 16, key, &what);
                t.write_refused(&mut l, off, 16, key, &what);
            }
        }
    }
    assert_eq!(t.num_mw(), 3);
}

// ------------------------------------------------------------------------------------------
// Rebinding

#[test]
fn rebinding_changes_the_key() {
    let mut t = T::new();

    // Type 1: a bind of a bound window moves it; the old key stops working at once.
    let (mw, k1, mut l) = t.bound(QHCA_MW_TYPE_1, 0, 512, RW);
    t.write_ok(&mut l, 0, 64, k1, "type 1, first key");
    // mw_key's tag is not checked.
    let k2 = inc_key(k1);
    let b = t.win(inc_key(k2), k2, 1024, 512, RW);
    t.bind_b(&mut l, &b);
    t.write_ok(&mut l, 1024, 64, k2, "type 1, second key");
    let mut l2 = t.link();
    t.write_ok(&mut l2, 1100, 64, k2, "type 1, second key, another QP");
    t.write_refused(&mut l, 0, 64, k1, "type 1, first key after the rebind");
    // A bind to the current tag is refused, and changes nothing.
    let mut l3 = t.link();
    let b = t.win(mw, k2, 0, 512, RW);
    t.bind_refused(&mut l3, &b, "type 1, same tag");
    t.write_ok(&mut l2, 1024, 64, k2, "type 1 after the refused bind");
    t.write_refused(&mut l2, 0, 64, k2, "type 1: the refused bind's range");

    for ty in TYPE2 {
        let what = format!("type {ty}");
        let (mw, k1, mut l) = t.bound(ty, 0, 512, RW);
        t.write_ok(&mut l, 0, 64, k1, &what);
        // Bound: a bind is refused, from another QP of the PD as from its own.
        let mut l2 = t.link();
        let b = t.win(mw, inc_key(k1), 0, 512, RW);
        t.bind_refused(
            &mut l2,
            &b,
            &format!("{what}: bind while bound, another QP"),
        );
        t.write_ok(&mut l, 8, 64, k1, &what);
        assert_eq!(t.local_inv(&mut l.b, &mut l.bcq, k1), QHCA_WC_SUCCESS);
        // Invalidated, but the tag is still the current one.
        let mut l3 = t.link();
        let b = t.win(mw, k1, 0, 512, RW);
        t.bind_refused(&mut l3, &b, &format!("{what}: same tag after LOCAL_INV"));
        let k2 = inc_key(k1);
        let b = t.win(mw, k2, 1024, 512, RW);
        t.bind_b(&mut l, &b);
        t.write_ok(&mut l, 1024, 64, k2, &what);
        // A bind while bound from the QP it is bound to is refused too; the QP comes back
        // (same QPN) and the window is as it was.
        let b = t.win(mw, inc_key(k2), 0, 512, RW);
        t.bind_refused(&mut l, &b, &format!("{what}: bind while bound, its own QP"));
        l.reconnect(&mut t.h, &ConnParams::default(), 0x300);
        t.write_ok(
            &mut l,
            1100,
            64,
            k2,
            &format!("{what}: after the refused bind"),
        );
        t.write_refused(&mut l, 0, 64, k1, &format!("{what}: the old key"));
    }
}

// ------------------------------------------------------------------------------------------
// Which QPs may use a window

#[test]
fn type2_windows_belong_to_their_qp_type1_to_their_pd() {
    let mut t = T::new();
    for ty in TYPE2 {
        let what = format!("type {ty}");
        let (_, k, mut l) = t.bound(ty, 0, 512, RW);
        t.write_ok(&mut l, 0, 64, k, &what);
        let mut l2 = t.link();
        t.write_refused(
            &mut l2,
            0,
            64,
            k,
            &format!("{what}: WRITE through another QP"),
        );
        let mut l3 = t.link();
        t.read_refused(
            &mut l3,
            0,
            64,
            k,
            &format!("{what}: READ through another QP"),
        );
        t.read_ok(&mut l, 0, 64, k, &format!("{what}: its QP"));
    }

    // Type 1: bound through a QP that is never a responder, used through any QP of the PD.
    let mw = t.alloc(QHCA_MW_TYPE_1);
    let mut l = t.link();
    let k = inc_key(mw);
    let b = t.win(mw, k, 1024, 512, RW);
    let c = t.bind(&mut l.a, &mut l.acq, &b);
    assert_eq!(c.status as u32, QHCA_WC_SUCCESS, "{c:?}");
    t.write_ok(&mut l, 1024, 64, k, "type 1, the binding link");
    let mut l2 = t.link();
    t.write_ok(&mut l2, 1100, 64, k, "type 1, another link");
    t.read_ok(&mut l2, 1024, 512, k, "type 1, another link");

    // Not through a QP of another PD (of the same context).
    let (st, pd2) = alloc_pd(&mut t.h, t.p.uar);
    assert_eq!(st, QHCA_CMD_OK);
    let mut lo = Link::new(&mut t.h, &mut t.p.m, t.p.uar, pd2, &ConnParams::default());
    let (src, tgt) = (t.src, t.tgt);
    let pd2_src = reg_in(&mut t, pd2, src, PAGE, QHCA_ACCESS_LOCAL_WRITE);
    let pd2_tgt = reg_in(&mut t, pd2, tgt, TGT_LEN, QHCA_ACCESS_LOCAL_WRITE | RW);
    // That link works with keys of its PD...
    let data = t.data(16);
    t.h.qt.memwrite(t.src, &data);
    let c = t.post(
        &mut lo,
        &SendWr::write(t.src, 16, pd2_src, t.tgt + 1024, pd2_tgt),
    );
    assert_eq!(c.status as u32, QHCA_WC_SUCCESS, "{c:?}");
    t.model[1024..1040].copy_from_slice(&data);
    t.check_target("a WRITE of the other PD");
    // ... but not with the window's.
    let data = t.data(64);
    t.h.qt.memwrite(t.src, &data);
    let c = t.post(&mut lo, &SendWr::write(t.src, 64, pd2_src, t.tgt + 1024, k));
    assert_eq!(
        c.status as u32, QHCA_WC_REM_ACCESS_ERR,
        "type 1 through a QP of another PD: {c:?}"
    );
    t.check_target("type 1 through a QP of another PD");
    t.went_to_err(&[lo.a.qpn, lo.b.qpn]);
    // Nor bound from there.
    let mut lo = Link::new(&mut t.h, &mut t.p.m, t.p.uar, pd2, &ConnParams::default());
    let mr2 = reg_in(&mut t, pd2, tgt, TGT_LEN, BINDABLE);
    let mut b = t.win(mw, inc_key(k), 0, 256, RW);
    b.mr_key = mr2;
    t.bind_refused(&mut lo, &b, "a window of another PD");
    t.write_ok(&mut l2, 1024, 16, k, "type 1 after a bind from another PD");
}

// ------------------------------------------------------------------------------------------
// What a bind needs, and the rights it gives

#[test]
fn a_bind_needs_the_rights_of_its_region() {
    let mut t = T::new();
    let no_bind = t.reg(QHCA_ACCESS_LOCAL_WRITE | REMOTE);
    let read_only = t.reg(QHCA_ACCESS_MW_BIND | QHCA_ACCESS_REMOTE_READ);
    let (st, pd2) = alloc_pd(&mut t.h, t.p.uar);
    assert_eq!(st, QHCA_CMD_OK);
    let (st, other_pd) = reg_mr(&mut t.h, &mut t.p.m, t.p.uar, pd2, t.tgt, TGT_LEN, BINDABLE);
    assert_eq!(st, QHCA_CMD_OK);
    let gone = t.reg(BINDABLE);
    assert_eq!(dereg(&mut t, gone), QHCA_CMD_OK);
    let dead = t.alloc(QHCA_MW_TYPE_1);
    assert_eq!(dealloc_mw(&mut t.h, t.p.uar, dead), QHCA_CMD_OK);
    let (st, foreign) = alloc_mw(&mut t.h, t.p.uar, pd2, QHCA_MW_TYPE_1);
    assert_eq!(st, QHCA_CMD_OK);

    // A bound type 1 window and an unbound type 2 one go through the same refusals.
    for ty in [QHCA_MW_TYPE_1, QHCA_MW_TYPE_2A] {
        let mw = t.alloc(ty);
        let mut lc = t.link();
        let k1 = inc_key(mw);
        if ty == QHCA_MW_TYPE_1 {
            let b = t.win(mw, k1, 256, 256, RW);
            t.bind_b(&mut lc, &b);
        }
        let k2 = inc_key(k1);
        let current = if ty == QHCA_MW_TYPE_1 { k1 } else { mw };
        let base = t.win(mw, k2, 512, 256, RW);
        let end = t.tgt + TGT_LEN;
        let cases: Vec<(&str, Bind)> = vec![
            (
                "a region without MW_BIND",
                Bind {
                    mr_key: no_bind,
                    ..base
                },
            ),
            (
                "REMOTE_WRITE on a region without LOCAL_WRITE",
                Bind {
                    mr_key: read_only,
                    access: QHCA_ACCESS_REMOTE_WRITE,
                    ..base
                },
            ),
            (
                "REMOTE_ATOMIC on a region without LOCAL_WRITE",
                Bind {
                    mr_key: read_only,
                    access: QHCA_ACCESS_REMOTE_READ | QHCA_ACCESS_REMOTE_ATOMIC,
                    ..base
                },
            ),
            (
                "a byte before the region",
                Bind {
                    addr: t.tgt - 1,
                    length: 16,
                    ..base
                },
            ),
            (
                "a byte past the region",
                Bind {
                    addr: end - 15,
                    length: 16,
                    ..base
                },
            ),
            (
                "longer than the region",
                Bind {
                    addr: t.tgt,
                    length: TGT_LEN + 1,
                    ..base
                },
            ),
            (
                "beyond the region",
                Bind {
                    addr: end,
                    length: 1,
                    ..base
                },
            ),
            (
                "a length that wraps",
                Bind {
                    addr: t.tgt + 8,
                    length: u64::MAX,
                    ..base
                },
            ),
            (
                "LOCAL_WRITE as a window right",
                Bind {
                    access: RW | QHCA_ACCESS_LOCAL_WRITE,
                    ..base
                },
            ),
            (
                "MW_BIND as a window right",
                Bind {
                    access: RW | QHCA_ACCESS_MW_BIND,
                    ..base
                },
            ),
            (
                "a region of another PD",
                Bind {
                    mr_key: other_pd,
                    ..base
                },
            ),
            (
                "a region deregistered",
                Bind {
                    mr_key: gone,
                    ..base
                },
            ),
            (
                "a new key of another window",
                Bind {
                    new_key: k2 ^ (1 << TAG_BITS),
                    ..base
                },
            ),
            (
                "a new key without the MW flag",
                Bind {
                    new_key: k2 & !QHCA_MW_KEY_FLAG,
                    ..base
                },
            ),
            (
                "the current tag",
                Bind {
                    new_key: current,
                    ..base
                },
            ),
            (
                "a window deallocated",
                Bind {
                    mw_key: dead,
                    new_key: inc_key(dead),
                    ..base
                },
            ),
            (
                "a window of another PD",
                Bind {
                    mw_key: foreign,
                    new_key: inc_key(foreign),
                    ..base
                },
            ),
        ];
        for (what, b) in cases {
            let what = format!("type {ty}: {what}");
            let mut lf = t.link();
            t.bind_refused(&mut lf, &b, &what);
            if ty == QHCA_MW_TYPE_1 {
                t.write_ok(
                    &mut lc,
                    256,
                    256,
                    k1,
                    &format!("{what}: the window as it was"),
                );
            }
        }
        if ty == QHCA_MW_TYPE_1 {
            t.write_refused(&mut lc, 512, 16, k2, "type 1: a key no bind gave");
            // Each refused bind was `base` but for what it names: `base` itself is good.
            let mut l = t.link();
            t.bind_b(&mut l, &base);
            t.write_ok(&mut l, 512, 256, k2, "type 1: base bound");
            t.write_refused(&mut l, 256, 16, k1, "type 1: k1 after base");
        } else {
            t.write_refused(&mut lc, 512, 16, k2, "type 2: still unbound");
            // REMOTE_READ needs no LOCAL_WRITE: that bind is good, and it is the first.
            let mut l = t.link();
            let b = Bind {
                mr_key: read_only,
                access: QHCA_ACCESS_REMOTE_READ,
                ..base
            };
            t.bind_b(&mut l, &b);
            t.read_ok(&mut l, 512, 256, k2, "type 2: bound at last");
        }
    }
}

#[test]
fn window_rights_are_enforced() {
    let mut t = T::new();
    // The region's own key grants nothing remote.
    let mut l0 = t.link();
    let mr = t.mr;
    t.write_refused(&mut l0, 0, 16, mr, "the region's own key");

    // READ only.
    let (_, k, mut l) = t.bound(QHCA_MW_TYPE_1, 0, 512, QHCA_ACCESS_REMOTE_READ);
    t.read_ok(&mut l, 0, 512, k, "READ-only window");
    t.write_refused(&mut l, 0, 16, k, "WRITE through a READ-only window");

    // WRITE only (type 2A).
    let (_, k, mut l) = t.bound(QHCA_MW_TYPE_2A, 512, 512, QHCA_ACCESS_REMOTE_WRITE);
    t.write_ok(&mut l, 512, 512, k, "WRITE-only window");
    t.read_refused(&mut l, 512, 16, k, "READ through a WRITE-only window");

    // Atomics need REMOTE_ATOMIC on the window.
    let fadd = |t: &mut T, l: &mut Link, off: u64, rkey: u32| -> Cqe {
        t.h.qt.memset(t.rbuf, 8, 0x33);
        let wr = SendWr {
            wr_id: 0xfa,
            opcode: QHCA_WR_ATOMIC_FETCH_AND_ADD,
            flags: QHCA_WQE_SIGNALED,
            remote_addr: t.tgt + off,
            rkey,
            swap_add: 5,
            sges: vec![(t.rbuf, 8, t.rlkey)],
            ..Default::default()
        };
        let c = t.post(l, &wr);
        assert_eq!(c.opcode as u32, QHCA_WC_FETCH_ADD, "{c:?}");
        c
    };
    let (_, k, mut l) = t.bound(QHCA_MW_TYPE_2B, 1024, 64, QHCA_ACCESS_REMOTE_ATOMIC);
    let orig = u64::from_le_bytes(t.model[1032..1040].try_into().unwrap());
    let c = fadd(&mut t, &mut l, 1032, k);
    assert_eq!(c.status as u32, QHCA_WC_SUCCESS, "{c:?}");
    assert_eq!(t.h.qt.readq(t.rbuf), orig, "the value before");
    t.model[1032..1040].copy_from_slice(&orig.wrapping_add(5).to_le_bytes());
    t.check_target("FETCH_ADD through an atomic window");
    let mw = t.alloc(QHCA_MW_TYPE_1);
    let mut l = t.link();
    let k = inc_key(mw);
    let b = t.win(mw, k, 1024, 64, RW);
    t.bind_b(&mut l, &b);
    let c = fadd(&mut t, &mut l, 1032, k);
    assert_eq!(
        c.status as u32, QHCA_WC_REM_ACCESS_ERR,
        "FETCH_ADD, no atomic right: {c:?}"
    );
    t.check_target("FETCH_ADD refused");
    t.went_to_err(&[l.a.qpn, l.b.qpn]);

    // The QP's rights count too.
    let mut lr = t.link_with(&ConnParams {
        access: QHCA_ACCESS_REMOTE_READ,
        ..Default::default()
    });
    let mw = t.alloc(QHCA_MW_TYPE_2A);
    let k = inc_key(mw);
    let b = t.win(mw, k, 0, 512, RW);
    t.bind_b(&mut lr, &b);
    t.read_ok(&mut lr, 0, 64, k, "READ, QP with REMOTE_READ");
    t.write_refused(&mut lr, 0, 64, k, "WRITE, QP without REMOTE_WRITE");

    // A window's key is no local key.
    let (_, k, _l) = t.bound(QHCA_MW_TYPE_1, 0, 512, RW);
    let mut l2 = t.link();
    let tgt = t.tgt;
    let c = t.post(&mut l2, &SendWr::write(tgt, 16, k, tgt + 1024, k));
    assert_eq!(
        c.status as u32, QHCA_WC_LOC_PROT_ERR,
        "a window key as an lkey: {c:?}"
    );
    t.went_to_err(&[l2.a.qpn]);
    t.check_target("a window key as an lkey");
}
