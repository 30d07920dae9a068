// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Verbs objects: create, query, modify and destroy PDs, MRs, CQs and QPs; ownership by context,
//! dependency checks, limits, key tags, the QP state machine, the object-count registers,
//! FREE_UAR and RESET cleaning up, and doorbell isolation counters.

use qhca_qtest::abi::db::{DbType, DbWord};
use qhca_qtest::abi::*;
use qhca_qtest::hca::*;
use qhca_qtest::verbs::*;
use qhca_qtest::Hca;

fn counts(h: &mut Hca) -> [u32; 5] {
    [
        h.reg(QHCA_REG_NUM_CTX),
        h.reg(QHCA_REG_NUM_PD),
        h.reg(QHCA_REG_NUM_MR),
        h.reg(QHCA_REG_NUM_CQ),
        h.reg(QHCA_REG_NUM_QP),
    ]
}

fn state_attr(state: u32) -> QpAttr {
    QpAttr {
        mask: QHCA_QP_ATTR_STATE,
        state: state as u8,
        ..Default::default()
    }
}

#[test]
fn lifecycle_counts_and_dependencies() {
    let mut h = Hca::start("num-uars=4");
    h.bring_up(4, 5);
    let mut m = Mem::default();
    assert_eq!(counts(&mut h), [0; 5]);
    let uar = h.alloc_uar().1 as u32;
    let (st, pdn) = alloc_pd(&mut h, uar);
    assert_eq!(st, QHCA_CMD_OK);
    let buf = m.alloc(&mut h, 3 * PAGE);
    let (st, key) = reg_mr(&mut h, &mut m, uar, pdn, buf + 5, 2 * PAGE, QHCA_ACCESS_ALL);
    assert_eq!(st, QHCA_CMD_OK);
    let (st, cq) = create_cq(&mut h, &mut m, uar, 4);
    assert_eq!(st, QHCA_CMD_OK);
    let (st, qp) = create_qp(&mut h, &mut m, uar, pdn, cq.cqn, cq.cqn, &QpCaps::default());
    assert_eq!(st, QHCA_CMD_OK);
    assert_eq!(counts(&mut h), [1, 1, 1, 1, 1]);

    // In use: PD by the MR and the QP, CQ by the QP.
    assert_eq!(
        destroy(&mut h, QHCA_CMD_DEALLOC_PD, uar, pdn),
        QHCA_CMD_BAD_STATE
    );
    assert_eq!(
        destroy(&mut h, QHCA_CMD_DESTROY_CQ, uar, cq.cqn),
        QHCA_CMD_BAD_STATE
    );
    assert_eq!(
        destroy(&mut h, QHCA_CMD_DESTROY_QP, uar, qp.qpn),
        QHCA_CMD_OK
    );
    assert_eq!(
        destroy(&mut h, QHCA_CMD_DESTROY_QP, uar, qp.qpn),
        QHCA_CMD_BAD_RESOURCE
    );
    assert_eq!(
        destroy(&mut h, QHCA_CMD_DEALLOC_PD, uar, pdn),
        QHCA_CMD_BAD_STATE
    );
    assert_eq!(
        destroy(&mut h, QHCA_CMD_DESTROY_CQ, uar, cq.cqn),
        QHCA_CMD_OK
    );
    assert_eq!(destroy(&mut h, QHCA_CMD_DEREG_MR, uar, key), QHCA_CMD_OK);
    assert_eq!(
        destroy(&mut h, QHCA_CMD_DEREG_MR, uar, key),
        QHCA_CMD_BAD_RESOURCE
    );
    assert_eq!(destroy(&mut h, QHCA_CMD_DEALLOC_PD, uar, pdn), QHCA_CMD_OK);
    assert_eq!(counts(&mut h), [1, 0, 0, 0, 0]);
    assert_eq!(h.status(), QHCA_STATUS_READY);
}

#[test]
fn objects_belong_to_their_context() {
    let mut h = Hca::start("num-uars=4");
    h.bring_up(4, 5);
    let mut m = Mem::default();
    let u0 = h.alloc_uar().1 as u32;
    let u1 = h.alloc_uar().1 as u32;
    let (_, pd0) = alloc_pd(&mut h, u0);
    let (_, pd1) = alloc_pd(&mut h, u1);
    let buf = m.alloc(&mut h, PAGE);
    let (st, key0) = reg_mr(&mut h, &mut m, u0, pd0, buf, PAGE, 0);
    assert_eq!(st, QHCA_CMD_OK);
    // u1 cannot register on u0's PD, nor use u0's CQ for its QP.
    assert_eq!(
        reg_mr(&mut h, &mut m, u1, pd0, buf, PAGE, 0).0,
        QHCA_CMD_BAD_RESOURCE
    );
    let (_, cq0) = create_cq(&mut h, &mut m, u0, 2);
    let (_, cq1) = create_cq(&mut h, &mut m, u1, 2);
    let caps = QpCaps::default();
    assert_eq!(
        create_qp(&mut h, &mut m, u1, pd1, cq0.cqn, cq1.cqn, &caps).0,
        QHCA_CMD_BAD_RESOURCE
    );
    assert_eq!(
        create_qp(&mut h, &mut m, u1, pd0, cq1.cqn, cq1.cqn, &caps).0,
        QHCA_CMD_BAD_RESOURCE
    );
    let (st, qp0) = create_qp(&mut h, &mut m, u0, pd0, cq0.cqn, cq0.cqn, &caps);
    assert_eq!(st, QHCA_CMD_OK);
    // Naming another context's objects: BAD_RESOURCE, and they survive.
    assert_eq!(
        destroy(&mut h, QHCA_CMD_DEALLOC_PD, u1, pd0),
        QHCA_CMD_BAD_RESOURCE
    );
    assert_eq!(
        destroy(&mut h, QHCA_CMD_DEREG_MR, u1, key0),
        QHCA_CMD_BAD_RESOURCE
    );
    assert_eq!(
        destroy(&mut h, QHCA_CMD_DESTROY_CQ, u1, cq0.cqn),
        QHCA_CMD_BAD_RESOURCE
    );
    assert_eq!(
        destroy(&mut h, QHCA_CMD_DESTROY_QP, u1, qp0.qpn),
        QHCA_CMD_BAD_RESOURCE
    );
    assert_eq!(
        modify_qp(&mut h, u1, qp0.qpn, &state_attr(QHCA_QPS_INIT)),
        QHCA_CMD_BAD_RESOURCE
    );
    assert_eq!(query_qp(&mut h, u1, qp0.qpn).0, QHCA_CMD_BAD_RESOURCE);
    // Unallocated context.
    assert_eq!(alloc_pd(&mut h, 3).0, QHCA_CMD_BAD_RESOURCE);
    assert_eq!(query_ctx(&mut h, 3).0, QHCA_CMD_BAD_RESOURCE);
    assert_eq!(counts(&mut h), [2, 2, 1, 2, 1]);

    // FREE_UAR takes everything of u0 with it, in dependency order; u1's stay.
    assert_eq!(h.free_uar(u0 as u64), QHCA_CMD_OK);
    assert_eq!(counts(&mut h), [1, 1, 0, 1, 0]);
    assert_eq!(
        destroy(&mut h, QHCA_CMD_DESTROY_CQ, u1, cq1.cqn),
        QHCA_CMD_OK
    );
    // RESET takes the rest.
    h.bring_up(4, 5);
    assert_eq!(counts(&mut h), [0; 5]);
    let u = h.alloc_uar().1 as u32;
    assert_eq!(
        destroy(&mut h, QHCA_CMD_DEALLOC_PD, u, pd1),
        QHCA_CMD_BAD_RESOURCE
    );
}

#[test]
fn mr_keys_and_validation() {
    let mut h = Hca::start("num-uars=2");
    h.bring_up(4, 5);
    let mut m = Mem::default();
    let uar = h.alloc_uar().1 as u32;
    let (_, pdn) = alloc_pd(&mut h, uar);
    let buf = m.alloc(&mut h, 4 * PAGE);
    let (st, k1) = reg_mr(&mut h, &mut m, uar, pdn, buf, 100, QHCA_ACCESS_LOCAL_WRITE);
    assert_eq!(st, QHCA_CMD_OK);
    assert_eq!(destroy(&mut h, QHCA_CMD_DEREG_MR, uar, k1), QHCA_CMD_OK);
    let (st, k2) = reg_mr(&mut h, &mut m, uar, pdn, buf, 100, QHCA_ACCESS_LOCAL_WRITE);
    assert_eq!(st, QHCA_CMD_OK);
    assert_ne!(k1, k2);
    assert_eq!(
        destroy(&mut h, QHCA_CMD_DEREG_MR, uar, k1),
        QHCA_CMD_BAD_RESOURCE,
        "stale key"
    );
    assert_eq!(
        obj_cmd(
            &mut h,
            QHCA_CMD_DEREG_MR,
            [uar as u64, (k2 as u64) | 1 << 32, 0, 0, 0]
        )
        .0,
        QHCA_CMD_BAD_RESOURCE
    );

    let list = m.page_list(&mut h, buf, 4);
    let ok = reg_mr_bytes(uar, pdn, buf + 10, 2 * PAGE, 0, 3, list);
    let (st, k3) = obj_cmd(&mut h, QHCA_CMD_REG_MR, in_words(&ok));
    assert_eq!(
        st, QHCA_CMD_OK,
        "iova + 10, two pages long, over three pages"
    );
    let bad: Vec<(&str, [u8; 40])> = vec![
        (
            "npages one short",
            reg_mr_bytes(uar, pdn, buf + 10, 2 * PAGE, 0, 2, list),
        ),
        (
            "npages one long",
            reg_mr_bytes(uar, pdn, buf + 10, 2 * PAGE, 0, 4, list),
        ),
        ("length 0", reg_mr_bytes(uar, pdn, buf, 0, 0, 1, list)),
        (
            "unknown access bit",
            reg_mr_bytes(uar, pdn, buf, 8, 0x10, 1, list),
        ),
        (
            "REMOTE_WRITE without LOCAL_WRITE",
            reg_mr_bytes(uar, pdn, buf, 8, QHCA_ACCESS_REMOTE_WRITE, 1, list),
        ),
        (
            "REMOTE_ATOMIC without LOCAL_WRITE",
            reg_mr_bytes(uar, pdn, buf, 8, QHCA_ACCESS_REMOTE_ATOMIC, 1, list),
        ),
        (
            "iova + length wraps",
            reg_mr_bytes(uar, pdn, u64::MAX - 4, 8, 0, 2, list),
        ),
        (
            "too long",
            reg_mr_bytes(uar, pdn, 0, (1 << 32) + 4096, 0, (1 << 20) + 1, list),
        ),
        ("page list at 0", reg_mr_bytes(uar, pdn, buf, 8, 0, 1, 0)),
    ];
    // A list whose entry is not page aligned; a directory whose entry (a page-list page) is
    // not page aligned; a directory that is not 8-byte aligned.
    let odd_list = m.page_list_of(&mut h, &[buf + 0x10]);
    let good_list = m.page_list(&mut h, buf, 1);
    let pl_page = h.qt.readq(good_list);
    let odd_dir = m.directory(&mut h, &[pl_page + 8]);
    let mut bad = bad;
    bad.push((
        "unaligned page in list",
        reg_mr_bytes(uar, pdn, buf, 8, 0, 1, odd_list),
    ));
    bad.push((
        "unaligned page-list page in the directory",
        reg_mr_bytes(uar, pdn, buf, 8, 0, 1, odd_dir),
    ));
    bad.push((
        "directory not 8-byte aligned",
        reg_mr_bytes(uar, pdn, buf, 8, 0, 1, good_list + 4),
    ));
    for (what, b) in &bad {
        let (st, _) = obj_cmd(&mut h, QHCA_CMD_REG_MR, in_words(b));
        assert_eq!(st, QHCA_CMD_BAD_PARAM, "REG_MR {what}: {}", status_name(st));
    }
    // A directory, or a page-list page, the device cannot read.
    let b = reg_mr_bytes(uar, pdn, buf, 8, 0, 1, BEYOND_RAM);
    assert_eq!(
        obj_cmd(&mut h, QHCA_CMD_REG_MR, in_words(&b)).0,
        QHCA_CMD_DMA_ERROR
    );
    let far_dir = m.directory(&mut h, &[BEYOND_RAM]);
    let b = reg_mr_bytes(uar, pdn, buf, 8, 0, 1, far_dir);
    assert_eq!(
        obj_cmd(&mut h, QHCA_CMD_REG_MR, in_words(&b)).0,
        QHCA_CMD_DMA_ERROR
    );
    assert_eq!(h.reg(QHCA_REG_NUM_MR), 2);
    assert_eq!(
        destroy(&mut h, QHCA_CMD_DEREG_MR, uar, k3 as u32),
        QHCA_CMD_OK
    );
    assert_eq!(h.status(), QHCA_STATUS_READY);
}

#[test]
fn cq_and_qp_validation() {
    let mut h = Hca::start("num-uars=2");
    h.bring_up(4, 5);
    let mut m = Mem::default();
    let uar = h.alloc_uar().1 as u32;
    let (_, pdn) = alloc_pd(&mut h, uar);
    let ring = m.alloc(&mut h, 64 * PAGE);
    let list = m.page_list(&mut h, ring, 64);
    for log in [0u32, 13, 16, 17, u32::MAX] {
        let b = create_cq_bytes(uar, log, 64, list);
        assert_eq!(
            obj_cmd(&mut h, QHCA_CMD_CREATE_CQ, in_words(&b)).0,
            QHCA_CMD_BAD_PARAM,
            "log {log}"
        );
    }
    // 2^7 CQEs = 4 KiB, plus the 64-byte record: two pages.
    let b = create_cq_bytes(uar, 7, 1, list);
    assert_eq!(
        obj_cmd(&mut h, QHCA_CMD_CREATE_CQ, in_words(&b)).0,
        QHCA_CMD_BAD_PARAM
    );
    let mut b = create_cq_bytes(uar, 7, 2, list);
    b[12] = 1; // rsvd0
    assert_eq!(
        obj_cmd(&mut h, QHCA_CMD_CREATE_CQ, in_words(&b)).0,
        QHCA_CMD_BAD_PARAM
    );
    let mut b = create_cq_bytes(uar, 7, 2, list);
    b[39] = 1; // rsvd1
    assert_eq!(
        obj_cmd(&mut h, QHCA_CMD_CREATE_CQ, in_words(&b)).0,
        QHCA_CMD_BAD_PARAM
    );
    let b = create_cq_bytes(uar, 7, 2, list);
    let (st, cqn) = obj_cmd(&mut h, QHCA_CMD_CREATE_CQ, in_words(&b));
    assert_eq!(st, QHCA_CMD_OK);
    let cqn = cqn as u32;

    let good = QpCaps::default();
    let (_, n) = qp_layout(&good);
    let variants: Vec<(&str, QpCaps, u32)> = vec![
        (
            "sq stride too small",
            QpCaps {
                sq_stride_log: 6,
                ..good
            },
            n as u32,
        ),
        (
            "sq stride too big",
            QpCaps {
                sq_stride_log: 12,
                ..good
            },
            n as u32,
        ),
        (
            "rq stride too small",
            QpCaps {
                rq_stride_log: 4,
                ..good
            },
            n as u32,
        ),
        // Deeper than max_qp_wr (2^15, the ABI's QHCA_WQ_MAX_LOG).
        ("sq too deep", QpCaps { sq_log: 16, ..good }, n as u32),
        ("rq too deep", QpCaps { rq_log: 16, ..good }, n as u32),
        (
            "max_sge over the limit",
            QpCaps {
                max_sge: 17,
                sq_stride_log: 11,
                rq_stride_log: 9,
                ..good
            },
            n as u32,
        ),
        (
            "max_sge not fitting the RQ stride",
            QpCaps {
                max_sge: 4,
                rq_stride_log: 6,
                ..good
            },
            n as u32,
        ),
        (
            "max_inline over the limit",
            QpCaps {
                max_inline: 257,
                sq_stride_log: 11,
                ..good
            },
            n as u32,
        ),
        ("npages wrong", good, n as u32 + 1),
    ];
    for (what, c, npages) in &variants {
        let b = create_qp_bytes(uar, pdn, cqn, cqn, c, *npages, list);
        let st = obj_cmd(&mut h, QHCA_CMD_CREATE_QP, in_words(&b)).0;
        assert_eq!(
            st,
            QHCA_CMD_BAD_PARAM,
            "CREATE_QP {what}: {}",
            status_name(st)
        );
    }
    let mut b = create_qp_bytes(uar, pdn, cqn, cqn, &good, n as u32, list);
    b[28] = 2; // type: neither QHCA_QPT_RC nor QHCA_QPT_UD
    assert_eq!(
        obj_cmd(&mut h, QHCA_CMD_CREATE_QP, in_words(&b)).0,
        QHCA_CMD_BAD_PARAM
    );
    let b = create_qp_bytes(uar, pdn + 1, cqn, cqn, &good, n as u32, list);
    assert_eq!(
        obj_cmd(&mut h, QHCA_CMD_CREATE_QP, in_words(&b)).0,
        QHCA_CMD_BAD_RESOURCE
    );
    let b = create_qp_bytes(uar, pdn, cqn, cqn, &good, n as u32, list);
    let (st, qpn) = obj_cmd(&mut h, QHCA_CMD_CREATE_QP, in_words(&b));
    assert_eq!(st, QHCA_CMD_OK);
    let qpn = qpn as u32;

    // The state machine.
    let (st, a) = query_qp(&mut h, uar, qpn);
    assert_eq!(
        (st, a.state, a.mask),
        (QHCA_CMD_OK, QHCA_QPS_RESET as u8, QHCA_QP_ATTR_ALL)
    );
    assert_eq!(
        modify_qp(&mut h, uar, qpn, &state_attr(QHCA_QPS_RTR)),
        QHCA_CMD_BAD_STATE
    );
    assert_eq!(
        modify_qp(&mut h, uar, qpn, &state_attr(QHCA_QPS_RTS)),
        QHCA_CMD_BAD_STATE
    );
    assert_eq!(
        modify_qp(&mut h, uar, qpn, &state_attr(4)),
        QHCA_CMD_BAD_PARAM,
        "state 4"
    );
    assert_eq!(
        modify_qp(
            &mut h,
            uar,
            qpn,
            &QpAttr {
                mask: QHCA_QP_ATTR_STATE | QHCA_QP_ATTR_SQ_PSN,
                state: 1,
                sq_psn: 5,
                ..Default::default()
            }
        ),
        QHCA_CMD_BAD_PARAM,
        "RESET->INIT does not take an SQ PSN"
    );
    assert_eq!(
        modify_qp(&mut h, uar, qpn, &state_attr(QHCA_QPS_INIT)),
        QHCA_CMD_OK
    );
    // INIT->RTR without its required attributes.
    assert_eq!(
        modify_qp(&mut h, uar, qpn, &state_attr(QHCA_QPS_RTR)),
        QHCA_CMD_BAD_PARAM
    );
    let rtr = QpAttr {
        mask: QHCA_QP_ATTR_STATE
            | QHCA_QP_ATTR_DEST_QPN
            | QHCA_QP_ATTR_RQ_PSN
            | QHCA_QP_ATTR_PATH_MTU,
        state: QHCA_QPS_RTR as u8,
        dest_qpn: qpn,
        rq_psn: 0x123456,
        path_mtu: 9,
        ..Default::default()
    };
    for (what, a) in [
        ("path_mtu 7", QpAttr { path_mtu: 7, ..rtr }),
        (
            "path_mtu 13",
            QpAttr {
                path_mtu: 13,
                ..rtr
            },
        ),
        (
            "rq_psn over 24 bits",
            QpAttr {
                rq_psn: 1 << 24,
                ..rtr
            },
        ),
        (
            "unknown mask bit",
            QpAttr {
                mask: rtr.mask | 1 << 13,
                ..rtr
            },
        ),
        ("field set outside the mask", QpAttr { timeout: 3, ..rtr }),
        (
            "LOCAL_WRITE is not a QP right",
            QpAttr {
                mask: rtr.mask | QHCA_QP_ATTR_ACCESS,
                access: QHCA_ACCESS_LOCAL_WRITE,
                ..rtr
            },
        ),
    ] {
        assert_eq!(
            modify_qp(&mut h, uar, qpn, &a),
            QHCA_CMD_BAD_PARAM,
            "{what}"
        );
    }
    let mut raw = rtr.encode();
    raw[10] = 1; // max_rd_atomic, outside the mask
    assert_eq!(modify_qp_raw(&mut h, uar, qpn, &raw), QHCA_CMD_BAD_PARAM);
    let mut raw = rtr.encode();
    raw[63] = 1; // av.rsvd[6], and the mask has no QHCA_QP_ATTR_AV
    assert_eq!(modify_qp_raw(&mut h, uar, qpn, &raw), QHCA_CMD_BAD_PARAM);
    assert_eq!(modify_qp(&mut h, uar, qpn, &rtr), QHCA_CMD_OK);
    let rts = QpAttr {
        mask: QHCA_QP_ATTR_STATE
            | QHCA_QP_ATTR_SQ_PSN
            | QHCA_QP_ATTR_TIMEOUT
            | QHCA_QP_ATTR_RETRY_CNT
            | QHCA_QP_ATTR_RNR_RETRY,
        state: QHCA_QPS_RTS as u8,
        sq_psn: 0xabcdef,
        timeout: 12,
        retry_cnt: 5,
        rnr_retry: 7,
        ..Default::default()
    };
    assert_eq!(
        modify_qp(
            &mut h,
            uar,
            qpn,
            &QpAttr {
                retry_cnt: 8,
                ..rts
            }
        ),
        QHCA_CMD_BAD_PARAM
    );
    assert_eq!(modify_qp(&mut h, uar, qpn, &rts), QHCA_CMD_OK);
    let (_, a) = query_qp(&mut h, uar, qpn);
    assert_eq!(
        (
            a.state,
            a.path_mtu,
            a.dest_qpn,
            a.rq_psn,
            a.sq_psn,
            a.timeout,
            a.retry_cnt,
            a.rnr_retry
        ),
        (QHCA_QPS_RTS as u8, 9, qpn, 0x123456, 0xabcdef, 12, 5, 7)
    );
    // RTS->RTS may change access; RTS->INIT is not a transition.
    assert_eq!(
        modify_qp(
            &mut h,
            uar,
            qpn,
            &QpAttr {
                mask: QHCA_QP_ATTR_ACCESS,
                access: QHCA_ACCESS_REMOTE_READ,
                ..Default::default()
            }
        ),
        QHCA_CMD_OK
    );
    assert_eq!(query_qp(&mut h, uar, qpn).1.access, QHCA_ACCESS_REMOTE_READ);
    assert_eq!(
        modify_qp(&mut h, uar, qpn, &state_attr(QHCA_QPS_INIT)),
        QHCA_CMD_BAD_STATE
    );
    assert_eq!(
        modify_qp(&mut h, uar, qpn, &state_attr(QHCA_QPS_ERR)),
        QHCA_CMD_OK
    );
    assert_eq!(
        modify_qp(&mut h, uar, qpn, &state_attr(QHCA_QPS_RTS)),
        QHCA_CMD_BAD_STATE
    );
    assert_eq!(
        modify_qp(&mut h, uar, qpn, &state_attr(QHCA_QPS_RESET)),
        QHCA_CMD_OK
    );
    assert_eq!(
        modify_qp(&mut h, uar, qpn, &state_attr(QHCA_QPS_ERR)),
        QHCA_CMD_OK,
        "RESET->ERR"
    );
    // A mailbox the device cannot read, and a missing one.
    assert_eq!(
        obj_cmd(
            &mut h,
            QHCA_CMD_MODIFY_QP,
            [uar as u64, qpn as u64, BEYOND_RAM, 0, 0]
        )
        .0,
        QHCA_CMD_DMA_ERROR
    );
    assert_eq!(
        obj_cmd(
            &mut h,
            QHCA_CMD_MODIFY_QP,
            [uar as u64, qpn as u64, 0, 0, 0]
        )
        .0,
        QHCA_CMD_BAD_PARAM
    );
    // Query outputs: too short, or no buffer.
    assert_eq!(
        obj_cmd_out(
            &mut h,
            QHCA_CMD_QUERY_QP,
            [uar as u64, qpn as u64, 0, 0, 0],
            MAILBOX,
            63
        ),
        QHCA_CMD_BAD_PARAM
    );
    assert_eq!(
        obj_cmd_out(&mut h, QHCA_CMD_QUERY_CTX, [uar as u64, 0, 0, 0, 0], 0, 96),
        QHCA_CMD_BAD_PARAM
    );
    assert_eq!(
        obj_cmd_out(
            &mut h,
            QHCA_CMD_QUERY_CTX,
            [uar as u64, 0, 0, 0, 0],
            MAILBOX,
            95
        ),
        QHCA_CMD_BAD_PARAM,
        "QUERY_CTX into less than struct qhca_ctx_stats"
    );
    assert_eq!(
        obj_cmd_out(
            &mut h,
            QHCA_CMD_QUERY_CTX,
            [uar as u64, 0, 0, 0, 0],
            BEYOND_RAM,
            96
        ),
        QHCA_CMD_DMA_ERROR
    );
    // Words beyond what an opcode uses must be zero.
    assert_eq!(
        obj_cmd(&mut h, QHCA_CMD_ALLOC_PD, [uar as u64, 1, 0, 0, 0]).0,
        QHCA_CMD_BAD_PARAM
    );
    assert_eq!(
        obj_cmd(
            &mut h,
            QHCA_CMD_DESTROY_QP,
            [uar as u64, qpn as u64, 0, 0, 1]
        )
        .0,
        QHCA_CMD_BAD_PARAM
    );
    assert_eq!(h.status(), QHCA_STATUS_READY);
}

#[test]
fn limits_are_enforced() {
    let mut h = Hca::start("num-uars=2");
    h.bring_up(8, 9);
    let uar = h.alloc_uar().1 as u32;
    h.query_device(OUT_RAM, 128);
    let a = qhca_qtest::wire::decode_attr(&h.qt.memread(OUT_RAM, 128));
    // PDs: max_pd of them, then NO_RESOURCES; batches of commands to keep it quick.
    let mut left = a.max_pd;
    while left > 0 {
        let n = left.min(128);
        let cmds: Vec<_> = (0..n)
            .map(|_| {
                let mut c = h.cmd(QHCA_CMD_ALLOC_PD);
                c.in_[0] = uar as u64;
                c
            })
            .collect();
        h.post_batch(&cmds);
        for c in &cmds {
            let e = h.completion_of(c);
            assert_eq!(e.status as u32, QHCA_CMD_OK);
        }
        left -= n;
    }
    assert_eq!(h.reg(QHCA_REG_NUM_PD), a.max_pd);
    assert_eq!(alloc_pd(&mut h, uar).0, QHCA_CMD_NO_RESOURCES);
    // CQs deeper than max_cqe are refused.
    let mut m = Mem::default();
    let too_deep = (a.max_cqe.trailing_zeros() + 1) as u32;
    let bytes = cq_bytes(too_deep);
    let base = m.alloc(&mut h, bytes);
    let n = bytes.div_ceil(PAGE);
    let list = m.page_list(&mut h, base, n);
    let b = create_cq_bytes(uar, too_deep, n as u32, list);
    assert_eq!(
        obj_cmd(&mut h, QHCA_CMD_CREATE_CQ, in_words(&b)).0,
        QHCA_CMD_BAD_PARAM
    );
    // FREE_UAR returns all of them.
    assert_eq!(h.free_uar(uar as u64), QHCA_CMD_OK);
    assert_eq!(h.reg(QHCA_REG_NUM_PD), 0);
    let uar = h.alloc_uar().1 as u32;
    assert_eq!(alloc_pd(&mut h, uar), (QHCA_CMD_OK, 0));
}

#[test]
fn doorbell_isolation_is_counted_per_context() {
    let mut h = Hca::start("num-uars=4");
    h.bring_up(4, 5);
    let mut m = Mem::default();
    let u0 = h.alloc_uar().1 as u32;
    let u1 = h.alloc_uar().1 as u32;
    let (_, pd0) = alloc_pd(&mut h, u0);
    let (_, cq0) = create_cq(&mut h, &mut m, u0, 3);
    let (_, mut qp0) = create_qp(
        &mut h,
        &mut m,
        u0,
        pd0,
        cq0.cqn,
        cq0.cqn,
        &QpCaps::default(),
    );

    // u0 rings its own queues: accepted.
    qp0.rq_pi = 1;
    qp0.ring_rq(&mut h);
    let mut cq = cq0;
    cq.arm(&mut h);
    assert_eq!(query_ctx(&mut h, u0), (QHCA_CMD_OK, 2, 0));
    assert_eq!(h.reg(QHCA_REG_DB_VIOLATIONS), 0);

    // u1 rings u0's QP and CQ from its own page: dropped, counted for u1 and device-wide.
    let before = h.guest_errors();
    for w in [
        DbWord::new(DbType::Sq, qp0.qpn, 1).raw(),
        DbWord::new(DbType::Rq, qp0.qpn, 2).raw(),
        DbWord::new(DbType::CqArm, cq0.cqn, 0).raw(),
        DbWord::new(DbType::Sq, 0x00ff_fff0, 1).raw(),
    ] {
        h.doorbell(u1, w);
    }
    assert_eq!(h.reg(QHCA_REG_DB_VIOLATIONS), 4);
    assert_eq!(h.guest_errors(), before, "violations are not guest errors");
    assert_eq!(query_ctx(&mut h, u1), (QHCA_CMD_OK, 0, 4));
    assert_eq!(query_ctx(&mut h, u0), (QHCA_CMD_OK, 2, 0));

    // Bad indices on one's own queue: dropped as guest errors, not accepted.
    let sq_entries = 1u32 << QpCaps::default().sq_log;
    for (what, idx) in [
        ("SQ producer more than the ring ahead", sq_entries + 1),
        ("SQ index wider than 16 bits", 0x1_0001),
    ] {
        let g = h.guest_errors();
        h.doorbell(u0, DbWord::new(DbType::Sq, qp0.qpn, idx).raw());
        assert_eq!(h.guest_errors(), g + 1, "{what}");
    }
    let g = h.guest_errors();
    h.doorbell(u0, DbWord::new(DbType::Rq, qp0.qpn, 0).raw());
    assert_eq!(h.guest_errors(), g + 1, "RQ producer moving backwards");
    let g = h.guest_errors();
    h.doorbell(u0, DbWord::new(DbType::CqArm, cq0.cqn, 5).raw());
    assert_eq!(
        h.guest_errors(),
        g + 1,
        "CQ arm index ahead of the producer"
    );
    assert_eq!(query_ctx(&mut h, u0), (QHCA_CMD_OK, 2, 0));
    // A QP in RESET executes nothing: no CQE ever.
    cq.expect_empty(&mut h);
    assert_eq!(h.status(), QHCA_STATUS_READY);

    // A freed context's counters start from zero when the page is handed out again.
    assert_eq!(h.free_uar(u1 as u64), QHCA_CMD_OK);
    assert_eq!(h.alloc_uar(), (QHCA_CMD_OK, u1 as u64));
    assert_eq!(query_ctx(&mut h, u1), (QHCA_CMD_OK, 0, 0));
}
