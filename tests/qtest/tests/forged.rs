// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! What the port believes from its wire, as `roce.rs` sets it up: the device 52:54:00:aa:00:01
//! at 10.7.0.1/24 (GID entry 1) on a `-netdev dgram` whose other end is the test, which plays
//! 52:54:00:aa:00:02 at 10.7.0.2 and, now and then, a host that lies.
//!
//! Loopback traffic never reaches the netdev, so a frame from it that claims one of the port's
//! own addresses (its MAC, any GID of its table) or no one host as its source (an unspecified,
//! loopback, multicast or broadcast address, a group MAC) is forged: dropped and counted in
//! `rx_forged`, whatever it carries. Checked for UD datagrams (every kind of source, IPv4 and
//! IPv6), for SENDs into RC connections between the port's own GIDs (the default of the
//! provider, perftest and pingpong: GID 0 at both ends), for ARP and for IPv6 neighbour
//! solicitations; the QPs are untouched and take the next good packet.
//!
//! Whom it learns from: ARP only from replies to its own requests (then again after 30 s).
//! What it holds: a reset drops the frames the netdev holds for it, the one x-loss-reorder
//! holds back and those waiting for a MAC, and delivers none of them.
//! Whom the port sends to: an address vector (CREATE_AH, MODIFY_QP) names one port, so one to
//! an unspecified, loopback, multicast or broadcast GID is refused with BAD_PARAM, and a
//! link-local GID whose EUI-64 names a group MAC has no route.

use std::time::Duration;

use qhca_qtest::abi::*;
use qhca_qtest::port::*;
use qhca_qtest::qmp::{socket_path, Qmp};
use qhca_qtest::roce::*;
use qhca_qtest::roce6::neighbour_solicitation;
use qhca_qtest::ud::*;
use qhca_qtest::verbs::*;
use qhca_qtest::Hca;

/// Another address of the device (entry 2).
const DEV_IP2: [u8; 4] = [10, 8, 0, 1];
/// The test's IPv6 link-local address (its MAC's EUI-64).
const PEER_LL: [u8; 16] = [
    0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0x00, 0xff, 0xfe, 0xaa, 0x00, 0x02,
];
/// A QP the test plays.
const QKEY: u32 = 0x1111_0001;
const FILL: u8 = 0xee;
/// How long something the device owes may take (real time).
const WAIT: Duration = Duration::from_secs(3);
/// How long the test listens to conclude that nothing comes.
const QUIET: Duration = Duration::from_millis(150);

// Indices into PortAttr::counter_words.
const TX_FRAMES: usize = 0;
const RX_FRAMES: usize = 2;
const TX_NO_ROUTE: usize = 4;
const ARP_RX: usize = 10;
const ARP_TX: usize = 11;
const TEST_REORDERED: usize = 14;
const RX_FORGED: usize = 15;

struct W {
    h: Hca,
    peer: Peer,
    /// GID 0, the port's link-local address.
    gid0: [u8; 16],
}

fn world(props: &str) -> W {
    world_with(props, &[])
}

/// [`world`] with more QEMU arguments.
fn world_with(props: &str, extra: &[&str]) -> W {
    let peer = Peer::new();
    let netdev = peer.netdev("n0");
    let props = format!("num-uars=8,netdev=n0,mac={}{props}", mac_str(DEV_MAC));
    let mut args = vec!["-netdev", &netdev];
    args.extend_from_slice(extra);
    let mut h = Hca::start_with(&props, &args);
    h.bring_up(5, 6);
    add_ipv4(&mut h, 1, DEV_IP);
    add_ipv4(&mut h, 2, DEV_IP2);
    let gid0 = query_port(&mut h).gids[0].gid;
    W { h, peer, gid0 }
}

fn expect_nothing(w: &W, what: &str) {
    if let Some(f) = w.peer.recv(QUIET) {
        panic!("{what}: the device sent a frame: {f:02x?}");
    }
}

/// Sends each frame and checks that it was counted as forged and as nothing else, and that the
/// device answered nothing.
fn expect_forged(w: &mut W, cases: &[(String, Vec<u8>)]) {
    for (what, frame) in cases {
        let before = counter_words(&mut w.h);
        w.peer.send(frame);
        let after = wait_counter(&mut w.h, RX_FORGED, &before, WAIT);
        for (i, (a, b)) in after.iter().zip(&before).enumerate() {
            let want = b + (i == RX_FORGED) as u64;
            assert_eq!(*a, want, "{what}: counter {i}: {before:?} -> {after:?}");
        }
        expect_nothing(w, what);
    }
}

/// A UD datagram from `src` to the device's `qpn`, Q_Key [`QKEY`], from the test's QP.
fn datagram(src: ([u8; 6], [u8; 4]), qpn: u32) -> Pkt {
    let mut p = Pkt::new(src, DEV, op::UD_SEND_ONLY, qpn, 0);
    p.deth = Some((QKEY, PEER_QPN));
    p.payload = pattern(40, 3);
    p
}

/// An IPv6 address from its eight 16-bit groups.
fn v6(g: [u16; 8]) -> [u8; 16] {
    let mut a = [0u8; 16];
    for (i, x) in g.iter().enumerate() {
        a[2 * i..2 * i + 2].copy_from_slice(&x.to_be_bytes());
    }
    a
}

#[test]
fn datagrams_from_the_port_itself_or_from_no_one_host_are_dropped_and_counted() {
    let mut w = world("");
    let mut u = Ud::new(&mut w.h);
    let mut qp = u.qp(&mut w.h, QKEY);
    let (buf, key) = u.buf(&mut w.h, 512, FILL);
    qp.post_recv(&mut w.h, 1, &[(buf, 256, key)]);
    qp.post_recv(&mut w.h, 2, &[(buf + 256, 256, key)]);

    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    let ipv4_sources = [
        ("the port's own address", DEV_IP),
        ("the port's other address", DEV_IP2),
        ("0.0.0.0", [0, 0, 0, 0]),
        ("0.1.2.3 (this network)", [0, 1, 2, 3]),
        ("127.0.0.1", [127, 0, 0, 1]),
        ("224.0.0.1 (multicast)", [224, 0, 0, 1]),
        ("239.1.2.3 (multicast)", [239, 1, 2, 3]),
        ("240.0.0.1 (reserved)", [240, 0, 0, 1]),
        ("255.255.255.255", [255; 4]),
        (
            "10.7.0.255, the broadcast of the port's /24",
            [10, 7, 0, 255],
        ),
    ];
    for (what, ip) in ipv4_sources {
        let p = datagram((PEER_MAC, ip), qp.qpn);
        cases.push((format!("IPv4 from {what}"), p.encode()));
    }
    let macs = [
        ("the port's own MAC", DEV_MAC),
        ("the broadcast MAC", BROADCAST),
        ("a multicast MAC", [0x01, 0x00, 0x5e, 0, 0, 1]),
        ("MAC 0", [0; 6]),
    ];
    for (what, mac) in macs {
        let p = datagram((mac, PEER_IP), qp.qpn);
        cases.push((format!("Ethernet from {what}"), p.encode()));
    }
    let ipv6_sources = [
        ("GID 0, the port's link-local address", w.gid0),
        ("::", [0; 16]),
        ("::1", v6([0, 0, 0, 0, 0, 0, 0, 1])),
        ("ff02::1", v6([0xff02, 0, 0, 0, 0, 0, 0, 1])),
        ("the port's IPv4 address, mapped", v4_gid(DEV_IP)),
        ("another IPv4-mapped address", v4_gid(PEER_IP)),
    ];
    for (what, sgid) in ipv6_sources {
        let p = datagram(PEER, qp.qpn);
        cases.push((format!("IPv6 from {what}"), p.encode_v6(sgid, w.gid0)));
    }
    expect_forged(&mut w, &cases);
    u.rcq.expect_empty(&mut w.h);
    let (_, st) = query_ctx_stats(&mut w.h, u.uar);
    assert_eq!(
        (st.ud_drop_qkey, st.ud_drop_no_recv, st.ud_drop_too_long),
        (0, 0, 0),
        "nothing reached the QP"
    );
    assert_eq!(w.h.reg(QHCA_REG_UD_NO_QP), 0);

    // The QP takes the next good datagrams, over IPv4 and over IPv6, into its first receives.
    let good = datagram(PEER, qp.qpn);
    w.peer.send(&good.encode());
    w.peer.send(&good.encode_v6(PEER_LL, w.gid0));
    for (wr_id, sgid, dgid) in [(1, v4_gid(PEER_IP), v4_gid(DEV_IP)), (2, PEER_LL, w.gid0)] {
        let c = u.rcq.wait_real(&mut w.h, WAIT);
        assert_eq!(
            (c.wr_id, c.status as u32, c.byte_len, c.src_qp),
            (wr_id, QHCA_WC_SUCCESS, GRH as u32 + 40, PEER_QPN),
            "{c:?}"
        );
        let b = w.h.qt.memread(buf + 256 * (wr_id - 1), GRH + 40);
        if sgid == PEER_LL {
            let g = Grh::parse(&b);
            assert_eq!((g.sgid, g.dgid), (sgid, dgid));
        } else {
            // 20 zero bytes and the datagram's IPv4 header.
            assert_eq!(&b[20 + 12..20 + 20], &[PEER_IP, DEV_IP].concat()[..]);
        }
        assert_eq!(b[GRH..], pattern(40, 3)[..]);
    }
    assert_eq!(counter_words(&mut w.h)[RX_FORGED], cases.len() as u64);
}

#[test]
fn a_forged_send_does_not_reach_a_connection_between_the_ports_own_gids() {
    let mut w = world("");
    let gid0 = w.gid0;
    // GID 0 to GID 0: what a connection set up without an address vector has; then the
    // port's IPv4 address to itself.
    let v4 = ConnParams {
        av: Some(AhAttr::from_to(1, v4_gid(DEV_IP))),
        ..Default::default()
    };
    let mut p = Pair::new(&mut w.h, &ConnParams::default());
    let (buf, key) = p.buf(&mut w.h, 0x1000, FILL, QHCA_ACCESS_LOCAL_WRITE);
    for (n, params) in [ConnParams::default(), v4].iter().enumerate() {
        if n > 0 {
            p.reconnect(&mut w.h, params, 0x100);
            w.h.qt.memset(buf, 256, FILL);
        }
        let wr_id = 0xb0 + n as u64;
        p.b.post_recv(&mut w.h, wr_id, &[(buf, 256, key)]);
        // At the PSN b expects: a SEND whose data would land in b's buffer, and one longer
        // than the receive, which would put b in ERR.
        let send = |len: usize| {
            let mut s = Pkt::new(PEER, DEV, op::SEND_ONLY, p.b.qpn, 0x100);
            s.ack_req = true;
            s.payload = pattern(len, 7);
            if params.av.is_some() {
                s.src_ip = DEV_IP;
                s.encode()
            } else {
                s.encode_v6(gid0, gid0)
            }
        };
        let from = if n == 0 {
            "GID 0 to GID 0"
        } else {
            "10.7.0.1 to 10.7.0.1"
        };
        expect_forged(
            &mut w,
            &[
                (format!("a SEND from {from}"), send(48)),
                (format!("a long SEND from {from}"), send(300)),
            ],
        );
        p.rcq.expect_empty(&mut w.h);
        let (_, st) = query_ctx_stats(&mut w.h, p.uar);
        assert_eq!(st.pkt_foreign, 0, "{from}: nothing reached a QP");
        assert_eq!(w.h.qt.memread(buf, 256), [FILL; 256], "{from}");

        // The connection carries on at the PSNs it had.
        let data = pattern(64, 9);
        w.h.qt.memwrite(buf + 0x800, &data);
        let wr = SendWr {
            wr_id: 0xa,
            opcode: QHCA_WR_SEND,
            flags: QHCA_WQE_SIGNALED,
            sges: vec![(buf + 0x800, 64, key)],
            ..Default::default()
        };
        p.a.post_send(&mut w.h, &wr);
        let c = p.scq.wait(&mut w.h);
        assert_eq!(
            (c.wr_id, c.status as u32),
            (0xa, QHCA_WC_SUCCESS),
            "{from}: {c:?}"
        );
        let c = p.rcq.wait(&mut w.h);
        assert_eq!(
            (c.wr_id, c.status as u32, c.byte_len),
            (wr_id, QHCA_WC_SUCCESS, 64),
            "{from}: {c:?}"
        );
        assert_eq!(w.h.qt.memread(buf, 64), data, "{from}");
        let (_, a) = query_qp(&mut w.h, p.uar, p.b.qpn);
        assert_eq!(a.state, QHCA_QPS_RTS as u8, "{from}");
    }
    assert_eq!(counter_words(&mut w.h)[RX_FRAMES], 0, "no frame was taken");
}

#[test]
fn arp_and_neighbour_solicitations_from_the_port_itself_are_dropped_and_counted() {
    let mut w = world("");
    let evil = [0x52, 0x54, 0x00, 0xaa, 0x00, 0x66];
    let req = |sha: [u8; 6], spa: [u8; 4], tpa: [u8; 4]| Arp::request(sha, spa, tpa);
    let mut cases: Vec<(String, Vec<u8>)> = vec![
        (
            "who has 10.7.0.1, tell 10.7.0.1".into(),
            req(evil, DEV_IP, DEV_IP).encode(),
        ),
        (
            "who has 10.7.0.2, tell 10.7.0.1".into(),
            req(evil, DEV_IP, PEER_IP).encode(),
        ),
        (
            "a reply from the port's other address".into(),
            Arp::reply_to(&req(DEV_MAC, DEV_IP, DEV_IP2), evil).encode(),
        ),
    ];
    for (what, spa) in [
        ("127.0.0.1", [127, 0, 0, 1]),
        ("224.0.0.1", [224, 0, 0, 1]),
        ("255.255.255.255", [255; 4]),
        ("10.7.0.255", [10, 7, 0, 255]),
    ] {
        cases.push((format!("tell {what}"), req(evil, spa, DEV_IP).encode()));
    }
    for (what, sha, eth_src) in [
        ("the sender's MAC is the port's", DEV_MAC, PEER_MAC),
        (
            "the sender's MAC is multicast",
            [0x01, 0, 0x5e, 0, 0, 1],
            PEER_MAC,
        ),
        ("the sender's MAC is 0", [0; 6], PEER_MAC),
        ("from the port's MAC", PEER_MAC, DEV_MAC),
        ("from the broadcast MAC", PEER_MAC, BROADCAST),
    ] {
        let mut a = req(sha, PEER_IP, DEV_IP);
        a.eth_src = eth_src;
        cases.push((format!("ARP: {what}"), a.encode()));
    }
    for (what, src) in [
        ("GID 0, the port's own", w.gid0),
        ("ff02::1", v6([0xff02, 0, 0, 0, 0, 0, 0, 1])),
        ("::1", v6([0, 0, 0, 0, 0, 0, 0, 1])),
        ("::ffff:10.7.0.2", v4_gid(PEER_IP)),
    ] {
        let f = neighbour_solicitation((PEER_MAC, src), w.gid0, 255, None);
        cases.push((format!("a solicitation from {what}"), f));
    }
    let f = neighbour_solicitation((DEV_MAC, PEER_LL), w.gid0, 255, Some(DEV_MAC));
    cases.push(("a solicitation from the port's MAC".into(), f));
    expect_forged(&mut w, &cases);

    // A probe (RFC 5227: from 0.0.0.0) is no forgery: counted, not answered.
    let before = counter_words(&mut w.h);
    w.peer.send(&req(PEER_MAC, [0; 4], DEV_IP).encode());
    let c = wait_counter(&mut w.h, ARP_RX, &before, WAIT);
    assert_eq!(
        (c[RX_FORGED], c[ARP_TX]),
        (before[RX_FORGED], before[ARP_TX])
    );
    expect_nothing(&w, "a probe");
    // The port still answers its neighbours.
    let q = req(PEER_MAC, PEER_IP, DEV_IP);
    w.peer.send(&q.encode());
    let f = w.peer.recv(WAIT).expect("an ARP reply");
    assert_eq!(Arp::parse(&f), Ok(Arp::reply_to(&q, DEV_MAC)));
    let f = neighbour_solicitation((PEER_MAC, PEER_LL), w.gid0, 255, None);
    w.peer.send(&f);
    let f = w.peer.recv(WAIT).expect("a neighbour advertisement");
    assert_eq!((&f[..6], &f[6..12]), (&PEER_MAC[..], &DEV_MAC[..]));
    assert_eq!(counter_words(&mut w.h)[RX_FORGED], cases.len() as u64);
}

fn rtr_with(av: AhAttr) -> QpAttr {
    QpAttr {
        mask: QHCA_QP_ATTR_STATE
            | QHCA_QP_ATTR_DEST_QPN
            | QHCA_QP_ATTR_RQ_PSN
            | QHCA_QP_ATTR_PATH_MTU
            | QHCA_QP_ATTR_AV,
        state: QHCA_QPS_RTR as u8,
        dest_qpn: PEER_QPN,
        path_mtu: 10,
        av,
        ..Default::default()
    }
}

#[test]
fn address_vectors_name_one_port() {
    let mut w = world("");
    let mut m = Mem::default();
    let (uar, pdn, _cq, qp) = rc_qp_in_init(&mut w.h, &mut m);
    let not_unicast = [
        (1, v4_gid([0, 0, 0, 0])),
        (1, v4_gid([0, 1, 2, 3])),
        (1, v4_gid([127, 0, 0, 1])),
        (1, v4_gid([224, 0, 0, 1])),
        (1, v4_gid([239, 255, 255, 250])),
        (1, v4_gid([240, 0, 0, 1])),
        (1, v4_gid([255, 255, 255, 255])),
        // The broadcast addresses of the port's subnets, 10.7.0.0/24 and 10.8.0.0/24.
        (1, v4_gid([10, 7, 0, 255])),
        (2, v4_gid([10, 8, 0, 255])),
        (0, [0; 16]),
        (0, v6([0, 0, 0, 0, 0, 0, 0, 1])),
        (0, v6([0xff02, 0, 0, 0, 0, 0, 0, 1])),
        (0, v6([0xff0e, 0, 0, 0, 0, 0, 1, 2])),
    ];
    for (sgid_index, dgid) in not_unicast {
        let av = AhAttr::from_to(sgid_index, dgid);
        assert_eq!(
            create_ah(&mut w.h, uar, pdn, &av).0,
            QHCA_CMD_BAD_PARAM,
            "CREATE_AH to {dgid:02x?}"
        );
        assert_eq!(
            modify_qp(&mut w.h, uar, qp.qpn, &rtr_with(av)),
            QHCA_CMD_BAD_PARAM,
            "MODIFY_QP to {dgid:02x?}"
        );
    }
    assert_eq!(w.h.reg(QHCA_REG_NUM_AH), 0);
    assert_eq!(query_qp(&mut w.h, uar, qp.qpn).1.state, QHCA_QPS_INIT as u8);
    let unicast = [
        (1, v4_gid(PEER_IP)),
        (1, v4_gid(DEV_IP)),
        (1, v4_gid([10, 7, 0, 0])),
        (1, v4_gid([10, 9, 0, 255])),
        (0, w.gid0),
        (0, v6([0xfe80, 0, 0, 0, 0, 0, 0, 1])),
        (0, v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 1])),
    ];
    for (sgid_index, dgid) in unicast {
        let (st, ah) = create_ah(&mut w.h, uar, pdn, &AhAttr::from_to(sgid_index, dgid));
        assert_eq!(st, QHCA_CMD_OK, "CREATE_AH to {dgid:02x?}");
        assert_eq!(destroy_ah(&mut w.h, uar, ah), QHCA_CMD_OK);
    }
    let av = AhAttr::from_to(1, v4_gid(PEER_IP));
    assert_eq!(modify_qp(&mut w.h, uar, qp.qpn, &rtr_with(av)), QHCA_CMD_OK);

    // A link-local GID whose EUI-64 names a group MAC (01:00:5e:00:00:01) is unicast IPv6, but
    // no station's: the port does not send to it.
    let group = v6([0xfe80, 0, 0, 0, 0x0300, 0x5eff, 0xfe00, 0x0001]);
    let mut u = Ud::with_mem(&mut w.h, m);
    let mut ud = u.qp(&mut w.h, QKEY);
    let ah = u.ah(&mut w.h, &AhAttr::from_to(0, group));
    let (src, key) = u.buf(&mut w.h, 64, 1);
    let before = counter_words(&mut w.h);
    ud.post_ud(
        &mut w.h,
        &UdWr::send(5, ah, PEER_QPN, QKEY, &[(src, 64, key)]),
    );
    let c = u.scq.wait(&mut w.h);
    assert_eq!((c.wr_id, c.status as u32), (5, QHCA_WC_SUCCESS));
    let after = counter_words(&mut w.h);
    assert_eq!(after[TX_NO_ROUTE], before[TX_NO_ROUTE] + 1, "{after:?}");
    assert_eq!(after[TX_FRAMES], before[TX_FRAMES]);
    expect_nothing(&w, "a datagram to a group MAC's EUI-64");
}

/// An RC QP connected to the test's QP (PSNs from 0x100, from entry 1 to `ip`) and a region
/// of 0x1000 bytes to write from.
struct Rc {
    cq: Cq,
    qp: Qp,
    buf: u64,
    key: u32,
}

fn rc_to(w: &mut W, m: &mut Mem, ip: [u8; 4]) -> Rc {
    let uar = w.h.alloc_uar().1 as u32;
    let (_, pdn) = alloc_pd(&mut w.h, uar);
    let (_, cq) = create_cq(&mut w.h, m, uar, 6);
    let (st, qp) = create_qp(&mut w.h, m, uar, pdn, cq.cqn, cq.cqn, &QpCaps::default());
    assert_eq!(st, QHCA_CMD_OK);
    let params = ConnParams {
        path_mtu: 10,
        // 4.3 s of virtual time: no retransmission while the test looks.
        timeout: 20,
        av: Some(AhAttr::from_to(1, v4_gid(ip))),
        ..Default::default()
    };
    bring_to_rts(&mut w.h, &qp, PEER_QPN, 0x100, &params);
    let buf = m.alloc(&mut w.h, 0x1000);
    let (st, key) = reg_mr(&mut w.h, m, uar, pdn, buf, 0x1000, 0);
    assert_eq!(st, QHCA_CMD_OK);
    Rc { cq, qp, buf, key }
}

impl Rc {
    /// Posts a 16-byte WRITE.
    fn write(&mut self, w: &mut W) {
        let wr = SendWr::write(self.buf, 16, self.key, 0x1000, 0x42);
        self.qp.post_send(&mut w.h, &wr);
    }

    /// The test's ACK of `psn`, and the WRITE's completion.
    fn ack(&mut self, w: &mut W, psn: u32, msn: u32) {
        let mut ack = Pkt::new(PEER, DEV, op::ACK, self.qp.qpn, psn);
        ack.aeth = Some(Aeth { syndrome: 0, msn });
        w.peer.send(&ack.encode());
        let c = self.cq.wait_real(&mut w.h, WAIT);
        assert_eq!(c.status as u32, QHCA_WC_SUCCESS, "{c:?}");
    }
}

/// The next frame from the device: an ARP request (Err) or a RoCEv2 frame (Ok).
fn next_frame(w: &W, what: &str) -> Result<Pkt, Arp> {
    let f = w
        .peer
        .recv(WAIT)
        .unwrap_or_else(|| panic!("{what}: no frame"));
    match Arp::parse(&f) {
        Ok(a) => Err(a),
        Err(_) => Ok(Pkt::parse(&f).unwrap_or_else(|e| panic!("{what}: {e}: {f:02x?}"))),
    }
}

#[test]
fn arp_is_learnt_only_from_replies_to_the_ports_own_requests() {
    let mut w = world("");
    let mut m = Mem::default();
    let mut rc = rc_to(&mut w, &mut m, PEER_IP);
    let evil = [0x52, 0x54, 0x00, 0xaa, 0x00, 0x66];
    let ask = Arp::request(DEV_MAC, DEV_IP, PEER_IP);

    // The test asks for the device, then a liar tells it, unasked, that 10.7.0.2 is at its MAC
    // (a reply, then a request: answered, as any is). None of them teaches the device a MAC.
    let q = Arp::request(PEER_MAC, PEER_IP, DEV_IP);
    w.peer.send(&q.encode());
    assert_eq!(
        Arp::parse(&w.peer.recv(WAIT).unwrap()),
        Ok(Arp::reply_to(&q, DEV_MAC))
    );
    w.peer.send(&Arp::reply_to(&ask, evil).encode());
    let lie = Arp::request(evil, PEER_IP, DEV_IP);
    w.peer.send(&lie.encode());
    assert_eq!(
        Arp::parse(&w.peer.recv(WAIT).unwrap()),
        Ok(Arp::reply_to(&lie, DEV_MAC))
    );
    rc.write(&mut w);
    assert_eq!(
        next_frame(&w, "the first WRITE"),
        Err(ask),
        "the device asks first"
    );

    // While it asks: a reply to someone else (broadcast), then the test's answer, then the
    // liar's, too late. The test's is believed.
    let mut other = Arp::reply_to(&ask, evil);
    (other.eth_dst, other.tha) = (BROADCAST, [0x52, 0x54, 0, 0xaa, 0, 7]);
    w.peer.send(&other.encode());
    w.peer.send(&Arp::reply_to(&ask, PEER_MAC).encode());
    w.peer.send(&Arp::reply_to(&ask, evil).encode());
    let p = next_frame(&w, "the WRITE").expect("the WRITE");
    assert_eq!(
        (p.dst_mac, p.opcode, p.psn),
        (PEER_MAC, op::WRITE_ONLY, 0x100)
    );
    rc.ack(&mut w, 0x100, 1);
    rc.write(&mut w);
    let p = next_frame(&w, "the second WRITE").expect("no question: the MAC is known");
    assert_eq!((p.dst_mac, p.psn), (PEER_MAC, 0x101));
    rc.ack(&mut w, 0x101, 2);
    expect_nothing(&w, "after the second WRITE");

    // 30 s later the MAC is still used, and asked for again; the answer (the test moved to
    // another NIC) is believed.
    let moved = [0x52, 0x54, 0x00, 0xaa, 0x00, 0x03];
    w.h.qt.clock_step(30_000_000_000);
    rc.write(&mut w);
    let p = next_frame(&w, "the third WRITE").expect("the WRITE first");
    assert_eq!((p.dst_mac, p.psn), (PEER_MAC, 0x102));
    assert_eq!(next_frame(&w, "the question"), Err(ask));
    w.peer.send(&Arp::reply_to(&ask, moved).encode());
    rc.ack(&mut w, 0x102, 3);
    rc.write(&mut w);
    let p = next_frame(&w, "the fourth WRITE").expect("the WRITE");
    assert_eq!((p.dst_mac, p.psn), (moved, 0x103));
    expect_nothing(&w, "after the fourth WRITE");
    let c = counter_words(&mut w.h);
    // Two answers, two questions; nothing here was forged.
    assert_eq!((c[ARP_TX], c[ARP_RX], c[RX_FORGED]), (4, 7, 0), "{c:?}");
}

#[test]
fn a_reset_drops_the_frames_the_port_holds_and_delivers_none() {
    let qmp_path = socket_path("qmp");
    let qmp_arg = format!("unix:{},server=on,wait=off", qmp_path.display());
    let mut w = world_with(",x-loss-reorder=1000", &["-qmp", &qmp_arg]);
    let mut qmp = Qmp::connect(&qmp_path);
    let ask = Arp::request(DEV_MAC, DEV_IP, PEER_IP);

    // A frame the netdev holds for the port: with the VM stopped it queues there (QEMU delivers
    // nothing to a stopped machine's NICs). A reset while it waits must not take it in: the
    // request would be answered from the table the reset is about to empty.
    qmp.ok(r#"{"execute":"stop"}"#);
    w.peer
        .send(&Arp::request(PEER_MAC, PEER_IP, DEV_IP).encode());
    std::thread::sleep(Duration::from_millis(200));
    w.h.reset();
    qmp.ok(r#"{"execute":"cont"}"#);
    expect_nothing(&w, "after a reset with a request held");
    w.h.bring_up(5, 6);
    assert_eq!(counter_words(&mut w.h), [0; 20], "nothing reached the port");
    add_ipv4(&mut w.h, 1, DEV_IP);

    // A frame x-loss-reorder holds back, and one waiting for a neighbour's MAC.
    let mut m = Mem::default();
    let mut rc = rc_to(&mut w, &mut m, PEER_IP);
    rc.write(&mut w);
    assert_eq!(next_frame(&w, "the WRITE"), Err(ask));
    w.peer.send(&Arp::reply_to(&ask, PEER_MAC).encode());
    let c = wait_counter(&mut w.h, TEST_REORDERED, &[0; 20], WAIT);
    assert_eq!(c[TX_FRAMES], 0, "the WRITE is held back");
    let mut rc3 = rc_to(&mut w, &mut m, [10, 7, 0, 3]);
    rc3.write(&mut w);
    let ask3 = Arp::request(DEV_MAC, DEV_IP, [10, 7, 0, 3]);
    assert_eq!(next_frame(&w, "the WRITE to 10.7.0.3"), Err(ask3));
    w.h.reset();
    // Long past the 1 ms hold; then the question's answer, to the device brought up again.
    w.h.qt.clock_step(10_000_000);
    expect_nothing(&w, "after a reset with a frame held back");
    w.h.bring_up(5, 6);
    add_ipv4(&mut w.h, 1, DEV_IP);
    w.peer.send(&Arp::reply_to(&ask3, PEER_MAC).encode());
    w.peer.send(&Arp::reply_to(&ask, PEER_MAC).encode());
    expect_nothing(&w, "after a reset with frames waiting for a MAC");
    let c = counter_words(&mut w.h);
    assert_eq!((c[TX_FRAMES], c[ARP_RX], c[ARP_TX]), (0, 2, 0), "{c:?}");
    // The port works: it answers, and asks.
    let q = Arp::request(PEER_MAC, PEER_IP, DEV_IP);
    w.peer.send(&q.encode());
    assert_eq!(
        Arp::parse(&w.peer.recv(WAIT).unwrap()),
        Ok(Arp::reply_to(&q, DEV_MAC))
    );
}
