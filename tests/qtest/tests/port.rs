// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The port without a netdev (`qhca-abi.h`, "The port"): QUERY_PORT's defaults (the MAC, GID 0
//! as the MAC's EUI-64 or the node GUID, no wire, zero counters); SET_GID and everything it
//! refuses; a reset emptying the table; address vectors checked by MODIFY_QP and CREATE_AH and
//! shown by QUERY_QP; RC and UD between the device's own IPv4 GIDs (the UD receive buffer's GRH
//! area holding the datagram's IPv4 header); and an RC QP aimed at a GID the port cannot reach
//! failing with RETRY_EXC_ERR, counted in `tx_no_route`. The RoCEv2 wire itself: `roce.rs`.

use qhca_qtest::abi::*;
use qhca_qtest::hca::{status_name, OUT_RAM};
use qhca_qtest::port::*;
use qhca_qtest::roce::ip_checksum;
use qhca_qtest::ud::*;
use qhca_qtest::verbs::*;
use qhca_qtest::Hca;

const RW: u32 = QHCA_ACCESS_LOCAL_WRITE | QHCA_ACCESS_REMOTE_WRITE | QHCA_ACCESS_REMOTE_READ;
const IP1: [u8; 4] = [10, 0, 0, 1];
const IP2: [u8; 4] = [10, 0, 0, 2];

fn start(props: &str) -> Hca {
    let mut h = Hca::start(props);
    h.bring_up(5, 6);
    h
}

/// Entry 0 as the device must have it for node GUID `guid`.
fn gid0_entry(guid: u64) -> GidEntry {
    GidEntry {
        gid: port_gid(guid),
        flags: QHCA_GID_VALID as u8,
        prefix_len: 64,
        rsvd: [0; 6],
    }
}

/// Only entry 0 is set, and it is `guid`'s.
fn assert_table_empty(a: &PortAttr, guid: u64) {
    assert_eq!(a.gids[0], gid0_entry(guid));
    for (i, e) in a.gids.iter().enumerate().skip(1) {
        assert_eq!(*e, GidEntry::default(), "entry {i}");
    }
}

#[test]
fn query_port_defaults() {
    // No properties: QEMU's first default MAC, GID 0 its EUI-64.
    let mut h = start("");
    let a = query_port(&mut h);
    assert_eq!(a.mac, DEFAULT_MAC);
    assert_eq!(
        (a.state as u32, a.wire as u32, a.max_mtu, a.gid_tbl_len),
        (QHCA_PORT_ACTIVE, QHCA_WIRE_NONE, 12, 16)
    );
    assert_eq!(a.rsvd0, [0; 6]);
    assert_eq!(a.counter_words, [0; 20], "counters after reset");
    assert_table_empty(&a, eui64(DEFAULT_MAC));
    assert_eq!(
        port_gid(eui64(DEFAULT_MAC))[8..],
        [0x50, 0x54, 0, 0xff, 0xfe, 0x12, 0x34, 0x56]
    );

    // A MAC of our own; then a node GUID of our own (GID 0 follows it, the MAC does not).
    let mac = [0x52, 0x54, 0x00, 0xaa, 0xbb, 0xcc];
    let mut h = start(&format!("mac={}", mac_str(mac)));
    let a = query_port(&mut h);
    assert_eq!(a.mac, mac);
    assert_table_empty(&a, 0x5054_00ff_feaa_bbcc);
    let mut h = start(&format!(
        "mac={},node-guid=0x1122334455667788",
        mac_str(mac)
    ));
    let a = query_port(&mut h);
    assert_eq!(a.mac, mac);
    assert_table_empty(&a, 0x1122_3344_5566_7788);

    // The command's own checks: a short buffer, in[] words, no buffer at all.
    assert_eq!(query_port_raw(&mut h, OUT_RAM, 559), QHCA_CMD_BAD_PARAM);
    assert_eq!(query_port_raw(&mut h, 0, 0), QHCA_CMD_BAD_PARAM);
    let (st, _) = obj_cmd(&mut h, QHCA_CMD_QUERY_PORT, [1, 0, 0, 0, 0]);
    assert_eq!(st, QHCA_CMD_BAD_PARAM);
    assert_eq!(
        query_port_raw(&mut h, 0x40_0000_0000, 560),
        QHCA_CMD_DMA_ERROR
    );
}

#[test]
fn set_gid_sets_shows_and_clears() {
    let mut h = start("node-guid=0x77");
    for (i, ip, plen) in [
        (1, IP1, 24),
        (15, [192, 168, 7, 9], 32),
        (7, [1, 2, 3, 4], 0),
    ] {
        assert_eq!(set_gid(&mut h, i, &GidEntry::v4(ip, plen)), QHCA_CMD_OK);
    }
    let a = query_port(&mut h);
    assert_eq!(a.gids[0], gid0_entry(0x77));
    assert_eq!(a.gids[1], GidEntry::v4(IP1, 24));
    assert_eq!(
        a.gids[1].gid,
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1]
    );
    assert_eq!(a.gids[15], GidEntry::v4([192, 168, 7, 9], 32));
    assert_eq!(a.gids[7], GidEntry::v4([1, 2, 3, 4], 0));
    for i in [2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14] {
        assert_eq!(a.gids[i], GidEntry::default(), "entry {i}");
    }
    // Overwritten in place (the same address at its own index is no duplicate), cleared.
    assert_eq!(set_gid(&mut h, 1, &GidEntry::v4(IP1, 16)), QHCA_CMD_OK);
    assert_eq!(set_gid(&mut h, 7, &GidEntry::default()), QHCA_CMD_OK);
    let a = query_port(&mut h);
    assert_eq!(a.gids[1], GidEntry::v4(IP1, 16));
    assert_eq!(a.gids[7], GidEntry::default());
    // Clearing an empty entry is fine; a cleared address may go elsewhere.
    assert_eq!(set_gid(&mut h, 7, &GidEntry::default()), QHCA_CMD_OK);
    assert_eq!(set_gid(&mut h, 1, &GidEntry::default()), QHCA_CMD_OK);
    assert_eq!(set_gid(&mut h, 2, &GidEntry::v4(IP1, 24)), QHCA_CMD_OK);
    assert_eq!(query_port(&mut h).gids[2], GidEntry::v4(IP1, 24));
}

#[test]
fn set_gid_refuses_what_is_not_an_ipv4_unicast_entry() {
    let mut h = start("node-guid=0x77");
    assert_eq!(set_gid(&mut h, 1, &GidEntry::v4(IP1, 24)), QHCA_CMD_OK);
    let before = query_port(&mut h).gids;
    let good = GidEntry::v4(IP2, 24);
    let v6 = GidEntry {
        gid: port_gid(0x1234),
        ..good
    };
    let mut not_mapped = good;
    not_mapped.gid[10] = 0xfe; // ::fffe:a.b.c.d
    let mut high = good;
    high.gid[0] = 0x20; // 2000::ffff:a.b.c.d
    let mut cases: Vec<(&str, u32, GidEntry)> = vec![
        ("index 0 (fixed)", 0, good),
        ("index 16", 16, good),
        ("index 0x1_0001", 0x1_0001, good),
        ("index u32::MAX", u32::MAX, good),
        ("an IPv6 GID", 2, v6),
        ("::fffe:0:0/96", 2, not_mapped),
        ("2000::ffff:a.b.c.d", 2, high),
        ("0.0.0.0", 2, GidEntry::v4([0, 0, 0, 0], 24)),
        ("0.1.2.3", 2, GidEntry::v4([0, 1, 2, 3], 24)),
        ("127.0.0.1", 2, GidEntry::v4([127, 0, 0, 1], 8)),
        ("224.0.0.1", 2, GidEntry::v4([224, 0, 0, 1], 24)),
        ("239.1.1.1", 2, GidEntry::v4([239, 1, 1, 1], 24)),
        ("240.0.0.1", 2, GidEntry::v4([240, 0, 0, 1], 24)),
        ("255.255.255.255", 2, GidEntry::v4([255; 4], 32)),
        ("prefix 33", 2, GidEntry::v4(IP2, 33)),
        ("prefix 255", 2, GidEntry::v4(IP2, 255)),
        ("a duplicate of entry 1", 2, GidEntry::v4(IP1, 24)),
        ("entry 0's GID", 2, before[0]),
        ("flags 3", 2, GidEntry { flags: 3, ..good }),
        ("flags 2", 2, GidEntry { flags: 2, ..good }),
        (
            "flags 0x80",
            2,
            GidEntry {
                flags: 0x80,
                ..good
            },
        ),
        ("cleared with a GID left", 2, GidEntry { flags: 0, ..good }),
        (
            "cleared with a prefix left",
            2,
            GidEntry {
                prefix_len: 24,
                ..GidEntry::default()
            },
        ),
        ("cleared, entry 0", 0, GidEntry::default()),
    ];
    for i in 0..6 {
        let mut e = good;
        e.rsvd[i] = 1 << i;
        cases.push(("entry rsvd", 2, e));
    }
    for (what, index, e) in cases {
        assert_eq!(set_gid(&mut h, index, &e), QHCA_CMD_BAD_PARAM, "{what}");
    }
    // The command's reserved words: rsvd0, rsvd1, and what it does not use.
    let mut b = set_gid_bytes(2, &good);
    b[4] = 1;
    assert_eq!(set_gid_raw(&mut h, &b), QHCA_CMD_BAD_PARAM, "rsvd0");
    let mut b = set_gid_bytes(2, &good);
    b[39] = 0x80;
    assert_eq!(set_gid_raw(&mut h, &b), QHCA_CMD_BAD_PARAM, "rsvd1");
    let mut c = h.cmd(QHCA_CMD_SET_GID);
    c.in_ = in_words(&set_gid_bytes(2, &good));
    c.out_addr = OUT_RAM;
    c.out_len = 64;
    h.expect_status(&c, QHCA_CMD_BAD_PARAM);
    assert_eq!(
        query_port(&mut h).gids,
        before,
        "nothing refused changed the table"
    );
    assert_eq!(
        set_gid(&mut h, 2, &good),
        QHCA_CMD_OK,
        "the good entry after all that"
    );
}

#[test]
fn reset_keeps_entry_0_alone_and_zeroes_the_counters() {
    let mut h = start("node-guid=0x77");
    for i in 1..16 {
        add_ipv4(&mut h, i, [10, 1, 0, i as u8]);
    }
    // Something counted: a datagram to an address the port does not have.
    let mut u = Ud::new(&mut h);
    let ah = u.ah(&mut h, &AhAttr::from_to(1, v4_gid([10, 9, 9, 9])));
    let mut q = u.qp(&mut h, 1);
    q.post_ud(&mut h, &UdWr::send(1, ah, 1, 1, &[]));
    assert_eq!(u.scq.wait(&mut h).status as u32, QHCA_WC_SUCCESS);
    let a = query_port(&mut h);
    assert_eq!(a.counters.tx_no_route, 1);
    assert!(a.gids.iter().all(|e| e.flags == QHCA_GID_VALID as u8));

    h.bring_up(5, 6);
    let a = query_port(&mut h);
    assert_table_empty(&a, 0x77);
    assert_eq!(a.counter_words, [0; 20]);
    // The entries are free again, and an AV can no longer name them.
    let (st, uar) = h.alloc_uar();
    assert_eq!(st, QHCA_CMD_OK);
    let (_, pdn) = alloc_pd(&mut h, uar as u32);
    let (st, _) = create_ah(&mut h, uar as u32, pdn, &AhAttr::from_to(1, v4_gid(IP2)));
    assert_eq!(st, QHCA_CMD_BAD_PARAM, "entry 1 is gone");
    // 10.1.0.15 was entry 15's: no duplicate any more.
    add_ipv4(&mut h, 1, [10, 1, 0, 15]);
}

fn to_reset() -> QpAttr {
    QpAttr {
        mask: QHCA_QP_ATTR_STATE,
        state: QHCA_QPS_RESET as u8,
        ..Default::default()
    }
}

fn rtr_with(av: AhAttr) -> QpAttr {
    QpAttr {
        mask: QHCA_QP_ATTR_STATE
            | QHCA_QP_ATTR_DEST_QPN
            | QHCA_QP_ATTR_RQ_PSN
            | QHCA_QP_ATTR_PATH_MTU
            | QHCA_QP_ATTR_AV,
        state: QHCA_QPS_RTR as u8,
        dest_qpn: 1,
        path_mtu: 10,
        av,
        ..Default::default()
    }
}

#[test]
fn address_vectors_are_checked_by_modify_qp_and_shown_by_query_qp() {
    let mut h = start("node-guid=0x77");
    add_ipv4(&mut h, 1, IP1);
    add_ipv4(&mut h, 3, IP2);
    let mut m = Mem::default();
    let (uar, _, _cq, qp) = rc_qp_in_init(&mut h, &mut m);

    // Before any AV: GID 0 to GID 0, hop limit 64, port 1.
    let (st, a) = query_qp(&mut h, uar, qp.qpn);
    assert_eq!(st, QHCA_CMD_OK);
    assert_eq!(a.av, AhAttr::to(port_gid(0x77)));

    let v4 = v4_gid([10, 7, 0, 2]);
    let good = AhAttr {
        flow_label: 0xf_ffff,
        traffic_class: 0x28,
        hop_limit: 7,
        sl: 15,
        ..AhAttr::from_to(3, v4)
    };
    let bad: Vec<(&str, AhAttr)> = vec![
        (
            "sgid_index 16",
            AhAttr {
                sgid_index: 16,
                ..good
            },
        ),
        (
            "sgid_index 255",
            AhAttr {
                sgid_index: 255,
                ..good
            },
        ),
        (
            "sgid_index 2: no entry",
            AhAttr {
                sgid_index: 2,
                ..good
            },
        ),
        (
            "IPv4 dgid from GID 0",
            AhAttr {
                sgid_index: 0,
                ..good
            },
        ),
        (
            "IPv6 dgid from an IPv4 entry",
            AhAttr {
                dgid: port_gid(0x88),
                ..good
            },
        ),
        (
            "port 0",
            AhAttr {
                port_num: 0,
                ..good
            },
        ),
        (
            "port 2",
            AhAttr {
                port_num: 2,
                ..good
            },
        ),
        (
            "flow label 2^20",
            AhAttr {
                flow_label: 1 << 20,
                ..good
            },
        ),
        ("SL 16", AhAttr { sl: 16, ..good }),
    ];
    for (what, av) in &bad {
        assert_eq!(
            modify_qp(&mut h, uar, qp.qpn, &rtr_with(*av)),
            QHCA_CMD_BAD_PARAM,
            "{what}"
        );
    }
    for i in 25..32 {
        let mut raw = rtr_with(good).encode();
        raw[32 + i] = 0x40;
        assert_eq!(
            modify_qp_raw(&mut h, uar, qp.qpn, &raw),
            QHCA_CMD_BAD_PARAM,
            "av byte {i}"
        );
    }
    // AV bytes without the mask bit; the bit at RESET->INIT would have been refused too.
    let no_bit = QpAttr {
        mask: rtr_with(good).mask & !QHCA_QP_ATTR_AV,
        ..rtr_with(good)
    };
    assert_eq!(modify_qp(&mut h, uar, qp.qpn, &no_bit), QHCA_CMD_BAD_PARAM);
    let (_, a) = query_qp(&mut h, uar, qp.qpn);
    assert_eq!(a.state, QHCA_QPS_INIT as u8, "nothing refused moved the QP");
    assert_eq!(a.av, AhAttr::to(port_gid(0x77)), "nor changed its AV");

    assert_eq!(modify_qp(&mut h, uar, qp.qpn, &rtr_with(good)), QHCA_CMD_OK);
    let (_, a) = query_qp(&mut h, uar, qp.qpn);
    assert_eq!((a.state, a.av), (QHCA_QPS_RTR as u8, good));
    // Only INIT->RTR takes it: not RTR->RTS, not RTR->RTR.
    let rts = QpAttr {
        mask: QHCA_QP_ATTR_STATE | QHCA_QP_ATTR_SQ_PSN | QHCA_QP_ATTR_AV,
        state: QHCA_QPS_RTS as u8,
        av: good,
        ..Default::default()
    };
    assert_eq!(
        modify_qp(&mut h, uar, qp.qpn, &rts),
        QHCA_CMD_BAD_PARAM,
        "RTR->RTS"
    );
    let rtr_rtr = QpAttr {
        mask: QHCA_QP_ATTR_STATE | QHCA_QP_ATTR_AV,
        state: QHCA_QPS_RTR as u8,
        av: good,
        ..Default::default()
    };
    assert_eq!(
        modify_qp(&mut h, uar, qp.qpn, &rtr_rtr),
        QHCA_CMD_BAD_PARAM,
        "RTR->RTR"
    );
    // The QP keeps the AV whatever becomes of its source entry.
    assert_eq!(set_gid(&mut h, 3, &GidEntry::default()), QHCA_CMD_OK);
    assert_eq!(query_qp(&mut h, uar, qp.qpn).1.av, good);

    // RESET->INIT of a fresh RC QP, and a UD QP at every step: refused.
    let (uar2, _, _, qp2) = rc_qp_in_init(&mut h, &mut m);
    assert_eq!(modify_qp(&mut h, uar2, qp2.qpn, &to_reset()), QHCA_CMD_OK);
    let init_av = QpAttr {
        mask: QHCA_QP_ATTR_STATE | QHCA_QP_ATTR_AV,
        state: QHCA_QPS_INIT as u8,
        av: AhAttr::from_to(1, v4),
        ..Default::default()
    };
    assert_eq!(
        modify_qp(&mut h, uar2, qp2.qpn, &init_av),
        QHCA_CMD_BAD_PARAM,
        "RESET->INIT"
    );
    let mut u = Ud::with_mem(&mut h, m);
    let ud = u.qp_reset(&mut h, &QpCaps::default());
    let ud_av = |state: u32, extra: u32, qkey: u32| QpAttr {
        mask: QHCA_QP_ATTR_STATE | QHCA_QP_ATTR_AV | extra,
        state: state as u8,
        qkey,
        av: AhAttr::from_to(1, v4),
        ..Default::default()
    };
    let init = ud_av(QHCA_QPS_INIT, QHCA_QP_ATTR_QKEY, 5);
    assert_eq!(
        modify_qp(&mut h, u.uar, ud.qpn, &init),
        QHCA_CMD_BAD_PARAM,
        "UD RESET->INIT"
    );
    assert_eq!(
        ud_modify(&mut h, &ud, QHCA_QPS_INIT, QHCA_QP_ATTR_QKEY, 5, 0),
        QHCA_CMD_OK
    );
    let rtr = ud_av(QHCA_QPS_RTR, 0, 0);
    assert_eq!(
        modify_qp(&mut h, u.uar, ud.qpn, &rtr),
        QHCA_CMD_BAD_PARAM,
        "UD INIT->RTR"
    );
    let (st, a) = query_qp(&mut h, u.uar, ud.qpn);
    assert_eq!(
        (st, a.state, a.av),
        (QHCA_CMD_OK, QHCA_QPS_INIT as u8, AhAttr::default())
    );
}

#[test]
fn create_ah_takes_a_source_entry() {
    let mut h = start("node-guid=0x77");
    add_ipv4(&mut h, 5, IP1);
    let mut u = Ud::new(&mut h);
    let ok = [
        AhAttr::from_to(5, v4_gid([10, 7, 0, 2])),
        AhAttr::from_to(5, v4_gid(IP1)),
        AhAttr::from_to(0, port_gid(0x99)),
    ];
    for a in ok {
        let (st, ah) = create_ah(&mut h, u.uar, u.pdn, &a);
        assert_eq!(st, QHCA_CMD_OK, "{a:?}");
        assert_eq!(destroy_ah(&mut h, u.uar, ah), QHCA_CMD_OK);
    }
    let bad = [
        AhAttr::from_to(4, v4_gid(IP2)),
        AhAttr::from_to(16, v4_gid(IP2)),
        AhAttr::from_to(0, v4_gid(IP2)),
        AhAttr::from_to(5, port_gid(0x99)),
    ];
    for a in bad {
        assert_eq!(
            create_ah(&mut h, u.uar, u.pdn, &a).0,
            QHCA_CMD_BAD_PARAM,
            "{a:?}"
        );
    }
    let mut b = create_ah_bytes(u.uar, u.pdn, &AhAttr::from_to(5, v4_gid(IP2)));
    b[39] = 1; // attr.rsvd[6]
    assert_eq!(
        obj_cmd(&mut h, QHCA_CMD_CREATE_AH, in_words(&b)).0,
        QHCA_CMD_BAD_PARAM
    );
    assert_eq!(h.reg(QHCA_REG_NUM_AH), 0);
    let _ = u.ah(&mut h, &AhAttr::from_to(5, v4_gid(IP2)));
}

/// WRITE (3000 bytes), SEND (700) from a to b and READ (2000) back by b, each checked.
fn transfer(h: &mut Hca, p: &mut Pair) {
    let data = pattern(3000, 3);
    let (src, lkey) = p.buf(h, 4096, 0, RW);
    h.qt.memwrite(src, &data);
    let (dst, rkey) = p.buf(h, 4096, 0xee, RW);
    p.a.post_send(h, &SendWr::write(src, 3000, lkey, dst + 10, rkey));
    let c = p.scq.wait(h);
    assert_eq!(
        (c.wr_id, c.status as u32),
        (0x77, QHCA_WC_SUCCESS),
        "WRITE {c:?}"
    );
    assert_eq!(h.qt.memread(dst + 10, 3000), data);
    let (rbuf, rlkey) = p.buf(h, 4096, 0x55, RW);
    p.b.post_recv(h, 0xb, &[(rbuf, 4096, rlkey)]);
    let send = SendWr {
        wr_id: 0x5e,
        opcode: QHCA_WR_SEND,
        flags: QHCA_WQE_SIGNALED,
        sges: vec![(src, 700, lkey)],
        ..Default::default()
    };
    p.a.post_send(h, &send);
    assert_eq!(p.scq.wait(h).status as u32, QHCA_WC_SUCCESS);
    let c = p.rcq.wait(h);
    assert_eq!((c.wr_id, c.byte_len, c.src_qp), (0xb, 700, p.a.qpn));
    assert_eq!(h.qt.memread(rbuf, 700), data[..700]);
    let read = SendWr {
        wr_id: 0x4e,
        opcode: QHCA_WR_RDMA_READ,
        flags: QHCA_WQE_SIGNALED,
        remote_addr: dst + 10,
        rkey,
        sges: vec![(rbuf + 1000, 2000, rlkey)],
        ..Default::default()
    };
    p.b.post_send(h, &read);
    assert_eq!(p.rcq.wait(h).status as u32, QHCA_WC_SUCCESS);
    assert_eq!(h.qt.memread(rbuf + 1000, 2000), data[..2000]);
}

#[test]
fn rc_between_ipv4_gids_of_the_device() {
    // Both ends on one address: each QP's AV names the device's 10.0.0.1 from that entry.
    let mut h = start("num-uars=8");
    add_ipv4(&mut h, 4, IP1);
    let p = ConnParams {
        av: Some(AhAttr::from_to(4, v4_gid(IP1))),
        ..Default::default()
    };
    let mut pair = Pair::new(&mut h, &p);
    transfer(&mut h, &mut pair);
    assert_eq!(query_ctx_stats(&mut h, pair.uar).1.pkt_foreign, 0);
    let a = query_port(&mut h);
    assert_eq!((a.counters.tx_no_route, a.counters.tx_frames), (0, 0));

    // Two addresses: a at 10.0.0.1 talks to b at 10.0.0.2 and back.
    let mut h = start("num-uars=8");
    add_ipv4(&mut h, 1, IP1);
    add_ipv4(&mut h, 2, IP2);
    let mut pair = Pair::new(&mut h, &ConnParams::default());
    let to = |sgid_index, ip| ConnParams {
        av: Some(AhAttr::from_to(sgid_index, v4_gid(ip))),
        ..Default::default()
    };
    for q in [pair.a, pair.b] {
        assert_eq!(modify_qp(&mut h, q.uar, q.qpn, &to_reset()), QHCA_CMD_OK);
    }
    bring_to_rts(&mut h, &pair.a, pair.b.qpn, 0x100, &to(1, IP2));
    bring_to_rts(&mut h, &pair.b, pair.a.qpn, 0x100, &to(2, IP1));
    transfer(&mut h, &mut pair);
    assert_eq!(query_ctx_stats(&mut h, pair.uar).1.pkt_foreign, 0);
}

#[test]
fn packets_from_the_wrong_address_are_foreign() {
    // a sends from 10.0.0.1 to 10.0.0.1; b was never given an AV (GID 0 to GID 0): b takes
    // nothing from a, a's WRITE is never acknowledged.
    let mut h = start("num-uars=8");
    add_ipv4(&mut h, 1, IP1);
    let mut pair = Pair::new(&mut h, &ConnParams::default());
    let quick = ConnParams {
        timeout: 4,
        retry_cnt: 1,
        ..Default::default()
    };
    assert_eq!(
        modify_qp(&mut h, pair.uar, pair.a.qpn, &to_reset()),
        QHCA_CMD_OK
    );
    let av = ConnParams {
        av: Some(AhAttr::from_to(1, v4_gid(IP1))),
        ..quick
    };
    bring_to_rts(&mut h, &pair.a, pair.b.qpn, 0x100, &av);
    let (src, lkey) = pair.buf(&mut h, 4096, 0x11, RW);
    let (dst, rkey) = pair.buf(&mut h, 4096, 0xee, RW);
    pair.a
        .post_send(&mut h, &SendWr::write(src, 64, lkey, dst, rkey));
    let c = pair.scq.wait(&mut h);
    assert_eq!(c.status as u32, QHCA_WC_RETRY_EXC_ERR, "{c:?}");
    assert!(h.qt.memread(dst, 4096).iter().all(|&x| x == 0xee));
    let ev = event_keys(&take_events(&mut h));
    assert_eq!(ev, [(QHCA_EQE_QP_ERR, pair.a.qpn as u64, pair.uar as u64)]);
    assert_eq!(
        query_ctx_stats(&mut h, pair.uar).1.pkt_foreign,
        2,
        "the WRITE and its retry"
    );
    let (_, b) = query_qp(&mut h, pair.uar, pair.b.qpn);
    assert_eq!(b.state, QHCA_QPS_RTS as u8, "b is untouched");
}

#[test]
fn rc_to_a_gid_the_port_cannot_reach_fails_with_retry_exceeded() {
    let mut h = start("num-uars=8");
    add_ipv4(&mut h, 1, IP1);
    let p = ConnParams {
        timeout: 4,
        retry_cnt: 2,
        av: Some(AhAttr::from_to(1, v4_gid([10, 7, 0, 2]))),
        ..Default::default()
    };
    let mut pair = Pair::new(&mut h, &p);
    let (src, lkey) = pair.buf(&mut h, 4096, 0x11, RW);
    let (dst, rkey) = pair.buf(&mut h, 4096, 0xee, RW);
    pair.a
        .post_send(&mut h, &SendWr::write(src, 64, lkey, dst, rkey));
    let c = pair.scq.wait(&mut h);
    assert_eq!(
        (c.wr_id, c.status as u32),
        (0x77, QHCA_WC_RETRY_EXC_ERR),
        "{c:?}"
    );
    let ev = event_keys(&take_events(&mut h));
    assert_eq!(ev, [(QHCA_EQE_QP_ERR, pair.a.qpn as u64, pair.uar as u64)]);
    let a = query_port(&mut h);
    assert_eq!(a.counters.tx_no_route, 3, "the WRITE and its two retries");
    assert_eq!(a.counters.tx_frames, 0);
    assert!(h.qt.memread(dst, 4096).iter().all(|&x| x == 0xee));
}

#[test]
fn ud_between_ipv4_gids_has_an_ipv4_header_in_the_grh_area() {
    let mut h = start("num-uars=8");
    add_ipv4(&mut h, 1, [10, 3, 0, 1]);
    add_ipv4(&mut h, 2, [10, 3, 0, 2]);
    let mut u = Ud::new(&mut h);
    let mut a = u.qp(&mut h, 0x42);
    let mut b = u.qp(&mut h, 0x42);
    let ah = u.ah(
        &mut h,
        &AhAttr {
            traffic_class: 0x28,
            hop_limit: 17,
            ..AhAttr::from_to(1, v4_gid([10, 3, 0, 2]))
        },
    );
    let (buf, key) = u.buf(&mut h, 4096, 0xee);
    for (n, imm) in [(13u32, false), (0, false), (64, true)] {
        h.qt.memset(buf, 4096, 0xee);
        let sges: &[(u64, u32, u32)] = if n == 0 {
            &[]
        } else {
            h.qt.memwrite(buf + 2048, &pattern(n as usize, 1));
            &[(buf + 2048, n, key)]
        };
        b.post_recv(&mut h, 0xb, &[(buf, 1024, key)]);
        let mut wr = UdWr::send(1, ah, b.qpn, 0x42, sges);
        if imm {
            wr.wr.opcode = QHCA_WR_SEND_WITH_IMM;
            wr.wr.imm = 0x1234_5678;
        }
        a.post_ud(&mut h, &wr);
        assert_eq!(u.scq.wait(&mut h).status as u32, QHCA_WC_SUCCESS);
        let c = u.rcq.wait(&mut h);
        assert_eq!(
            (c.wr_id, c.status as u32, c.byte_len, c.src_qp),
            (0xb, 0, 40 + n, a.qpn)
        );
        assert_ne!(c.flags as u32 & QHCA_CQE_WITH_GRH, 0);
        let g = h.qt.memread(buf, 40);
        assert_eq!(g[..20], [0; 20], "the first 20 bytes of the GRH area");
        let ip = &g[20..];
        let paylen = 12 + 8 + if imm { 4 } else { 0 } + n.div_ceil(4) * 4 + 4;
        assert_eq!(ip[0], 0x45, "version 4, IHL 5");
        assert_eq!(ip[1], 0x28, "TOS = traffic class");
        assert_eq!(
            u16::from_be_bytes([ip[2], ip[3]]) as u32,
            20 + 8 + paylen,
            "total length"
        );
        assert_eq!(u16::from_be_bytes([ip[6], ip[7]]) & 0x4000, 0x4000, "DF");
        assert_eq!((ip[8], ip[9]), (17, 17), "TTL = hop limit, protocol UDP");
        assert_eq!(ip_checksum(ip), 0, "header checksum {ip:02x?}");
        assert_eq!(
            (&ip[12..16], &ip[16..20]),
            (&[10, 3, 0, 1][..], &[10, 3, 0, 2][..])
        );
        let got = h.qt.memread(buf + 40, n as usize + 4);
        assert_eq!(got[..n as usize], pattern(n as usize, 1));
        assert_eq!(got[n as usize..], [0xee; 4], "past the message");
    }
}

/// 600 SET_GIDs of random, mostly nearly valid input: whatever is accepted, the table stays one
/// SET_GID would build (entry 0 intact; every other entry empty or a unicast IPv4 address with
/// a prefix of at most 32, flags VALID, rsvd zero; no address twice), and what is refused
/// changes nothing.
#[test]
fn random_set_gid_inputs_keep_the_table_valid() {
    let mut h = start("node-guid=0x77");
    let mut rng = qhca_qtest::rng::Rng::new(0x61d5_0001);
    let mut table = query_port(&mut h).gids;
    let mut accepted = 0;
    for _ in 0..600 {
        let index = if rng.chance(7, 8) {
            rng.below(17) as u32
        } else {
            rng.next_u32()
        };
        let ip = [
            *rng.pick(&[10, 0, 127, 192, 224, 255]),
            0,
            0,
            rng.below(4) as u8,
        ];
        let mut e = if rng.chance(1, 6) {
            GidEntry::default()
        } else {
            GidEntry::v4(ip, rng.below(40) as u8)
        };
        if rng.chance(1, 8) {
            e.gid[rng.below(16) as usize] ^= 1 << rng.below(8);
        }
        if rng.chance(1, 10) {
            e.flags = rng.next_u32() as u8;
        }
        if rng.chance(1, 10) {
            e.rsvd[rng.below(6) as usize] = rng.next_u32() as u8;
        }
        let mut b = set_gid_bytes(index, &e);
        if rng.chance(1, 20) {
            b[4 + rng.below(2) as usize * 28] = 1; // rsvd0 or rsvd1
        }
        let st = set_gid_raw(&mut h, &b);
        let now = query_port(&mut h).gids;
        if st == QHCA_CMD_OK {
            accepted += 1;
            table[index as usize] = e;
        } else {
            assert_eq!(st, QHCA_CMD_BAD_PARAM, "{index} {e:?}");
        }
        assert_eq!(
            now,
            table,
            "after SET_GID {index} {e:?}: {}",
            status_name(st)
        );
    }
    assert_eq!(table[0], gid0_entry(0x77));
    for (i, e) in table.iter().enumerate().skip(1) {
        if *e == GidEntry::default() {
            continue;
        }
        let first = e.gid[12];
        assert!(e.gid[..12] == v4_gid([0; 4])[..12] && (1..224).contains(&first) && first != 127);
        assert!(e.flags == QHCA_GID_VALID as u8 && e.prefix_len <= 32 && e.rsvd == [0; 6]);
        assert!(
            table[i + 1..].iter().all(|o| o.gid != e.gid),
            "entry {i} twice"
        );
    }
    assert!(accepted > 30, "only {accepted} accepted");
}
