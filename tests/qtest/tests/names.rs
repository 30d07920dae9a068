// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Names the device hands out are never reused soon, so that a stale one never names a new
//! object: MR keys (index << 8 | tag, indices round-robin, an index retired once its 255 tags
//! are used) and QPNs (generation << QHCA_QPN_INDEX_BITS | index).

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

/// With max-mr=2, each index serves 255 registrations and is then retired: 510 distinct keys,
/// then NO_RESOURCES for good (a device reset does not bring the keys back).
#[test]
fn mr_index_retired_when_its_tags_are_used_up() {
    let mut h = Hca::start("max-mr=2");
    h.bring_up(5, 6);
    let (mut m, uar, pdn) = ctx(&mut h);
    let buf = m.alloc(&mut h, PAGE);
    let list = m.page_list(&mut h, buf, 1);
    let reg = reg_mr_bytes(uar, pdn, buf, 64, 0, 1, list);
    let mut seen = HashSet::new();
    loop {
        let (st, key) = obj_cmd(&mut h, QHCA_CMD_REG_MR, in_words(&reg));
        if st == QHCA_CMD_NO_RESOURCES {
            break;
        }
        assert_eq!(st, QHCA_CMD_OK, "REG_MR: {}", status_name(st));
        let key = key as u32;
        assert!(key >> 8 < 2, "key {key:#x} beyond max-mr");
        assert!(seen.insert(key), "key {key:#x} handed out again");
        assert_eq!(destroy(&mut h, QHCA_CMD_DEREG_MR, uar, key), QHCA_CMD_OK);
        assert!(seen.len() <= 510, "more than 255 keys per index");
    }
    assert_eq!(seen.len(), 510, "255 keys per index, then retired");
    assert_eq!(h.reg(QHCA_REG_NUM_MR), 0);
    h.bring_up(5, 6);
    let (_, uar, pdn) = ctx(&mut h);
    let reg = reg_mr_bytes(uar, pdn, buf, 64, 0, 1, list);
    assert_eq!(
        obj_cmd(&mut h, QHCA_CMD_REG_MR, in_words(&reg)).0,
        QHCA_CMD_NO_RESOURCES,
        "retired for good, across a reset"
    );
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
