// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Names the device hands out are never reused soon, so that a stale one never names a new
//! object, and never run out: MR keys (a 31-bit sequence, whatever slot a region takes), QPNs
//! (generation << QHCA_QPN_INDEX_BITS | index; a number a live QP names as its peer is passed
//! over), and type 2 windows, which go with the QP they are bound to.

use std::collections::HashSet;

use qhca_qtest::abi::*;
use qhca_qtest::hca::status_name;
use qhca_qtest::verbs::*;
use qhca_qtest::Hca;

fn ctx(h: &mut Hca) -> (Mem, u32, u32) {
    let m = Mem::default();
    let uar = h.alloc_uar().1 as u32;
    let (st, pdn) = alloc_pd(h, uar);
    assert_eq!(st, QHCA_CMD_OK);
    (m, uar, pdn)
}

/// Registers and deregisters one MR over and over, past the 256 uses after which an 8-bit tag
/// of one index wraps (review item 3): every key is new, and every old key stays dead, for
/// DEREG_MR and for the data path (an RDMA WRITE with it fails REM_ACCESS_ERR and writes
/// nothing into the region registered last).
#[test]
fn mr_keys_never_repeat() {
    let mut h = Hca::start("num-uars=4");
    h.bring_up(5, 6);
    let mut p = Pair::new(&mut h, &ConnParams::default());
    let target = p.m.alloc(&mut h, PAGE);
    let list = p.m.page_list(&mut h, target, 1);
    let reg = reg_mr_bytes(
        p.uar,
        p.pdn,
        target,
        PAGE,
        QHCA_ACCESS_LOCAL_WRITE | QHCA_ACCESS_REMOTE_WRITE,
        1,
        list,
    );
    let mut seen = HashSet::new();
    let mut first = None;
    for i in 0..300 {
        let (st, key) = obj_cmd(&mut h, QHCA_CMD_REG_MR, in_words(&reg));
        assert_eq!(st, QHCA_CMD_OK, "REG_MR #{i}: {}", status_name(st));
        let key = key as u32;
        assert!(
            seen.insert(key),
            "REG_MR #{i} handed out key {key:#x} again"
        );
        first.get_or_insert(key);
        if i == 299 {
            break; // the last one stays registered
        }
        assert_eq!(destroy(&mut h, QHCA_CMD_DEREG_MR, p.uar, key), QHCA_CMD_OK);
        assert_eq!(
            destroy(&mut h, QHCA_CMD_DEREG_MR, p.uar, key),
            QHCA_CMD_BAD_RESOURCE,
            "key {key:#x} dead once deregistered"
        );
    }
    // The first key against the live region: refused, nothing written.
    h.qt.memset(target, PAGE as usize, 0);
    p.a.post_send(
        &mut h,
        &SendWr {
            wr_id: 1,
            opcode: QHCA_WR_RDMA_WRITE,
            flags: QHCA_WQE_SIGNALED,
            remote_addr: target,
            rkey: first.unwrap(),
            inline: Some(vec![0xab; 16]),
            ..Default::default()
        },
    );
    let c = p.scq.wait(&mut h);
    assert_eq!(
        (c.wr_id, c.status as u32),
        (1, QHCA_WC_REM_ACCESS_ERR),
        "{c:?}"
    );
    assert!(
        h.qt.memread(target, 16).iter().all(|&b| b == 0),
        "written through a stale key"
    );
}

/// With max-mr=2 (two regions at once), keys never run out: far more registrations than the
/// 255 per slot after which an 8-bit tag would wrap (or a slot be retired) all succeed, every
/// key new, and the sequence goes on across a device reset. Two regions live at once keep
/// different keys.
#[test]
fn mr_keys_never_run_out() {
    let mut h = Hca::start("max-mr=2");
    h.bring_up(5, 6);
    let (mut m, uar, pdn) = ctx(&mut h);
    let buf = m.alloc(&mut h, PAGE);
    let list = m.page_list(&mut h, buf, 1);
    let reg = reg_mr_bytes(uar, pdn, buf, 64, 0, 1, list);
    let mut seen = HashSet::new();
    let (st, held) = obj_cmd(&mut h, QHCA_CMD_REG_MR, in_words(&reg));
    assert_eq!(st, QHCA_CMD_OK);
    seen.insert(held as u32);
    for i in 0..1200 {
        let (st, key) = obj_cmd(&mut h, QHCA_CMD_REG_MR, in_words(&reg));
        assert_eq!(st, QHCA_CMD_OK, "REG_MR #{i}: {}", status_name(st));
        let key = key as u32;
        assert_eq!(
            key & QHCA_MW_KEY_FLAG,
            0,
            "key {key:#x} has the window flag"
        );
        assert!(seen.insert(key), "key {key:#x} handed out again (#{i})");
        // The slots are full: a third region is refused while two live.
        if i == 0 {
            let (st, _) = obj_cmd(&mut h, QHCA_CMD_REG_MR, in_words(&reg));
            assert_eq!(st, QHCA_CMD_NO_RESOURCES, "a third region with max-mr=2");
        }
        assert_eq!(destroy(&mut h, QHCA_CMD_DEREG_MR, uar, key), QHCA_CMD_OK);
        assert_eq!(
            destroy(&mut h, QHCA_CMD_DEREG_MR, uar, key),
            QHCA_CMD_BAD_RESOURCE,
            "key {key:#x} dead once deregistered"
        );
    }
    assert_eq!(h.reg(QHCA_REG_NUM_MR), 1);
    h.bring_up(5, 6);
    assert_eq!(h.reg(QHCA_REG_NUM_MR), 0, "regions after a reset");
    let (mut m, uar, pdn) = ctx(&mut h);
    let buf = m.alloc(&mut h, PAGE);
    let list = m.page_list(&mut h, buf, 1);
    let reg = reg_mr_bytes(uar, pdn, buf, 64, 0, 1, list);
    for _ in 0..4 {
        let (st, key) = obj_cmd(&mut h, QHCA_CMD_REG_MR, in_words(&reg));
        assert_eq!(st, QHCA_CMD_OK, "REG_MR after a reset: {}", status_name(st));
        assert!(seen.insert(key as u32), "key {key:#x} again after a reset");
        assert_eq!(
            destroy(&mut h, QHCA_CMD_DEREG_MR, uar, key as u32),
            QHCA_CMD_OK
        );
    }
}

/// The lookup by key stays exact while regions come and go in every order: each live key finds
/// its own region (DEREG_MR of the wrong context is refused, of the right one works once), dead
/// keys find nothing.
#[test]
fn mr_keys_find_their_region() {
    let mut h = Hca::start("num-uars=4,max-mr=64");
    h.bring_up(5, 6);
    let (mut m, uar, pdn) = ctx(&mut h);
    let (_, other, _) = ctx(&mut h);
    let buf = m.alloc(&mut h, PAGE);
    let list = m.page_list(&mut h, buf, 1);
    let reg = reg_mr_bytes(uar, pdn, buf, 64, 0, 1, list);
    let mut rng = qhca_qtest::rng::Rng::new(7);
    let mut live: Vec<u32> = Vec::new();
    let mut dead: Vec<u32> = Vec::new();
    for _ in 0..3000 {
        if live.len() < 64 && (live.is_empty() || rng.below(3) != 0) {
            let (st, key) = obj_cmd(&mut h, QHCA_CMD_REG_MR, in_words(&reg));
            assert_eq!(st, QHCA_CMD_OK);
            live.push(key as u32);
        } else {
            let key = live.swap_remove(rng.below(live.len() as u64) as usize);
            assert_eq!(
                destroy(&mut h, QHCA_CMD_DEREG_MR, other, key),
                QHCA_CMD_BAD_RESOURCE
            );
            assert_eq!(destroy(&mut h, QHCA_CMD_DEREG_MR, uar, key), QHCA_CMD_OK);
            dead.push(key);
        }
    }
    for key in dead.iter().rev().take(200) {
        assert_eq!(
            destroy(&mut h, QHCA_CMD_DEREG_MR, uar, *key),
            QHCA_CMD_BAD_RESOURCE
        );
    }
    for key in live.drain(..) {
        assert_eq!(destroy(&mut h, QHCA_CMD_DEREG_MR, uar, key), QHCA_CMD_OK);
    }
    assert_eq!(h.reg(QHCA_REG_NUM_MR), 0);
}

/// A QP whose peer is destroyed stays in RTS and keeps naming the peer's QPN: that number is
/// not handed out again while it does, even to a process that holds every other QP slot and
/// cycles the one left through all its generations (after which, before the fix, it got the
/// peer's number and the orphan took its packets). Once the orphan leaves RTS, the number may
/// come back.
#[test]
fn qpn_named_by_a_live_peer_does_not_come_back() {
    let mut h = Hca::start("num-uars=4");
    h.bring_up(5, 6);
    let mut p = Pair::new(&mut h, &ConnParams::default());
    let victim = p.b.qpn;
    let index_mask = (1u32 << QHCA_QPN_INDEX_BITS) - 1;
    assert_eq!(
        destroy(&mut h, QHCA_CMD_DESTROY_QP, p.uar, victim),
        QHCA_CMD_OK
    );
    let (st, a) = query_qp(&mut h, p.uar, p.a.qpn);
    assert_eq!(
        (st, a.state, a.dest_qpn),
        (QHCA_CMD_OK, QHCA_QPS_RTS as u8, victim)
    );

    // Another context takes every free slot but the victim's, on one shared ring.
    let (_, uar, pdn) = ctx(&mut h);
    let (st, cq) = create_cq(&mut h, &mut p.m, uar, 4);
    assert_eq!(st, QHCA_CMD_OK);
    let caps = QpCaps {
        sq_log: 0,
        sq_stride_log: 7,
        rq_log: 0,
        rq_stride_log: 5,
        max_inline: 0,
        max_sge: 1,
    };
    let (_, n) = qp_layout(&caps);
    let ring = p.m.alloc(&mut h, n * PAGE);
    let list = p.m.page_list(&mut h, ring, n);
    let create = create_qp_bytes(uar, pdn, cq.cqn, cq.cqn, &caps, n as u32, list);
    let mut held = Vec::new();
    loop {
        let (st, qpn) = obj_cmd(&mut h, QHCA_CMD_CREATE_QP, in_words(&create));
        if st == QHCA_CMD_NO_RESOURCES {
            break;
        }
        assert_eq!(st, QHCA_CMD_OK);
        held.push(qpn as u32);
    }
    // Free the victim's slot only.
    let pos = held
        .iter()
        .position(|q| q & index_mask == victim & index_mask)
        .expect("a QP in the victim's slot");
    let q = held.swap_remove(pos);
    assert_eq!(destroy(&mut h, QHCA_CMD_DESTROY_QP, uar, q), QHCA_CMD_OK);
    let gens = (1u32 << (24 - QHCA_QPN_INDEX_BITS)) - 1;
    let cycle = |h: &mut Hca, n: u32| -> bool {
        for _ in 0..n {
            let (st, qpn) = obj_cmd(h, QHCA_CMD_CREATE_QP, in_words(&create));
            assert_eq!(st, QHCA_CMD_OK);
            let qpn = qpn as u32;
            assert_eq!(qpn & index_mask, victim & index_mask, "the one free slot");
            assert_eq!(destroy(h, QHCA_CMD_DESTROY_QP, uar, qpn), QHCA_CMD_OK);
            if qpn == victim {
                return true;
            }
        }
        false
    };
    assert!(
        !cycle(&mut h, gens + 4),
        "QPN {victim:#x} handed out while QP {:#x} names it as its peer",
        p.a.qpn
    );
    // The orphan leaves RTS: the number is free to come back.
    let err = QpAttr {
        mask: QHCA_QP_ATTR_STATE,
        state: QHCA_QPS_ERR as u8,
        ..Default::default()
    };
    assert_eq!(modify_qp(&mut h, p.uar, p.a.qpn, &err), QHCA_CMD_OK);
    assert!(cycle(&mut h, gens + 4), "QPN {victim:#x} never came back");
}

/// A QPN carries a generation: once a QP is destroyed and its index reused, the old QPN names
/// nothing, for commands (BAD_RESOURCE) and doorbells (a violation, counted).
#[test]
fn stale_qpn_names_nothing() {
    let mut h = Hca::start("num-uars=4");
    h.bring_up(5, 6);
    let (mut m, uar, pdn) = ctx(&mut h);
    let (_, cq) = create_cq(&mut h, &mut m, uar, 4);
    let caps = QpCaps::default();
    let (st, first) = create_qp(&mut h, &mut m, uar, pdn, cq.cqn, cq.cqn, &caps);
    assert_eq!(st, QHCA_CMD_OK);
    let index = first.qpn & ((1 << QHCA_QPN_INDEX_BITS) - 1);
    assert!(first.qpn <= QHCA_DB_QN_MASK);
    assert_eq!(
        destroy(&mut h, QHCA_CMD_DESTROY_QP, uar, first.qpn),
        QHCA_CMD_OK
    );
    // Create and destroy until the index comes back (round-robin: after every other index).
    let mut seen = HashSet::from([first.qpn]);
    let again = loop {
        let (st, q) = create_qp(&mut h, &mut m, uar, pdn, cq.cqn, cq.cqn, &caps);
        assert_eq!(st, QHCA_CMD_OK);
        assert!(seen.insert(q.qpn), "QPN {:#x} handed out twice", q.qpn);
        if q.qpn & ((1 << QHCA_QPN_INDEX_BITS) - 1) == index {
            break q;
        }
        assert_eq!(
            destroy(&mut h, QHCA_CMD_DESTROY_QP, uar, q.qpn),
            QHCA_CMD_OK
        );
        assert!(seen.len() <= 2 * 1024, "index {index} never came back");
    };
    assert_ne!(again.qpn, first.qpn, "same index, new generation");
    assert_eq!(query_qp(&mut h, uar, first.qpn).0, QHCA_CMD_BAD_RESOURCE);
    assert_eq!(
        destroy(&mut h, QHCA_CMD_DESTROY_QP, uar, first.qpn),
        QHCA_CMD_BAD_RESOURCE
    );
    let (st, a) = query_qp(&mut h, uar, again.qpn);
    assert_eq!((st, a.state), (QHCA_CMD_OK, QHCA_QPS_RESET as u8));
    let before = h.reg(QHCA_REG_DB_VIOLATIONS);
    h.doorbell(
        uar,
        qhca_uapi::db::DbWord::new(qhca_uapi::db::DbType::Sq, first.qpn, 0).raw(),
    );
    assert_eq!(
        h.reg(QHCA_REG_DB_VIOLATIONS),
        before + 1,
        "doorbell on a stale QPN"
    );
}
