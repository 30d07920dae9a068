// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The port on a netdev: RoCEv2 on the wire, with the test process as the peer. QEMU runs with
//! `-netdev dgram` between two UDP sockets on 127.0.0.1 (each datagram one Ethernet frame);
//! the test reads the device's frames from its own socket and sends it frames it built with its
//! own codec (`qhca_qtest::roce`: headers, ICRC, ARP). The device is 52:54:00:aa:00:01 at
//! 10.7.0.1 (GID entry 1); the test plays 52:54:00:aa:00:02 at 10.7.0.2, QPN 0x123.
//!
//! What is checked: ARP both ways; a requester's WRITE as a frame, every header field, and its
//! completion by the test's ACK; a WRITE and a READ from the test answered with an ACK and
//! READ responses (multi-packet at MTU 1024); frames that are wrong in one way each (ICRC,
//! source address, truncation, IPv4 checksum, size, UDP port, MAC) dropped, nothing written, no
//! answer, the matching counter moved; `x-loss-drop`; 2000 frames of garbage; IPv6 neighbour
//! solicitations for the link-local GID answered (also duplicate address detection), others not.

use std::time::{Duration, Instant};

use qhca_qtest::abi::*;
use qhca_qtest::port::*;
use qhca_qtest::rng::Rng;
use qhca_qtest::roce::*;
use qhca_qtest::roce6::{icmpv6_sum, neighbour_solicitation};
use qhca_qtest::verbs::*;
use qhca_qtest::Hca;

/// Both directions' first PSN.
const PSN: u32 = 0x100;
/// The AV's GRH fields, to be found in every frame's IPv4 header.
const TCLASS: u8 = 0x68;
const HOP_LIMIT: u8 = 33;
const RW: u32 = QHCA_ACCESS_LOCAL_WRITE | QHCA_ACCESS_REMOTE_WRITE | QHCA_ACCESS_REMOTE_READ;
const BUF_LEN: u64 = 0x4000;
const FILL: u8 = 0xee;
/// How long a frame the device owes may take (real time).
const WAIT: Duration = Duration::from_secs(3);
/// How long the test listens to conclude that nothing comes.
const QUIET: Duration = Duration::from_millis(150);

// Indices into PortAttr::counter_words.
const TX_FRAMES: usize = 0;
const TX_BYTES: usize = 1;
const RX_FRAMES: usize = 2;
const RX_MALFORMED: usize = 6;
const RX_BAD_ICRC: usize = 7;
const RX_NOT_OURS: usize = 8;
const RX_OVERSIZE: usize = 9;
const ARP_RX: usize = 10;
const ARP_TX: usize = 11;
const TEST_DROPPED: usize = 12;
const RX_FORGED: usize = 15;

/// A device on a netdev whose other end is the test, with one RC QP connected to the test's.
struct W {
    h: Hca,
    peer: Peer,
    uar: u32,
    cq: Cq,
    qp: Qp,
    /// A region of BUF_LEN bytes with remote read and write.
    buf: u64,
    key: u32,
}

fn params() -> ConnParams {
    ConnParams {
        access: QHCA_ACCESS_REMOTE_WRITE | QHCA_ACCESS_REMOTE_READ,
        path_mtu: 10,
        // 4.3 s of virtual time: no retransmission while the test looks.
        timeout: 20,
        av: Some(AhAttr {
            traffic_class: TCLASS,
            hop_limit: HOP_LIMIT,
            ..AhAttr::from_to(1, v4_gid(PEER_IP))
        }),
        ..Default::default()
    }
}

fn world(props: &str) -> W {
    let peer = Peer::new();
    let netdev = peer.netdev("n0");
    let props = format!("num-uars=8,netdev=n0,mac={}{props}", mac_str(DEV_MAC));
    let mut h = Hca::start_with(&props, &["-netdev", &netdev]);
    h.bring_up(5, 6);
    add_ipv4(&mut h, 1, DEV_IP);
    let mut m = Mem::default();
    let uar = h.alloc_uar().1 as u32;
    let (_, pdn) = alloc_pd(&mut h, uar);
    let (_, cq) = create_cq(&mut h, &mut m, uar, 8);
    let (st, qp) = create_qp(&mut h, &mut m, uar, pdn, cq.cqn, cq.cqn, &QpCaps::default());
    assert_eq!(st, QHCA_CMD_OK);
    bring_to_rts(&mut h, &qp, PEER_QPN, PSN, &params());
    let buf = m.alloc(&mut h, BUF_LEN);
    h.qt.memset(buf, BUF_LEN as usize, FILL);
    let (st, key) = reg_mr(&mut h, &mut m, uar, pdn, buf, BUF_LEN, RW);
    assert_eq!(st, QHCA_CMD_OK);
    W {
        h,
        peer,
        uar,
        cq,
        qp,
        buf,
        key,
    }
}

/// The next frame from the device within `timeout` that is not its question for the test's
/// MAC, which is answered on the way: the device learns a MAC only by asking.
fn recv_frame(w: &W, timeout: Duration) -> Option<Vec<u8>> {
    w.peer.recv_answering(timeout, DEV, (PEER_MAC, PEER_IP))
}

/// The next frame from the device, a RoCEv2 one, checked by the test's own parser.
fn expect_pkt(w: &W) -> Pkt {
    let f = recv_frame(w, WAIT).expect("a RoCEv2 frame from the device");
    Pkt::parse(&f).unwrap_or_else(|e| panic!("frame from the device: {e}: {f:02x?}"))
}

fn expect_nothing(w: &W) {
    if let Some(f) = recv_frame(w, QUIET) {
        panic!("the device sent a frame: {f:02x?}");
    }
}

/// What every frame of the QP must have: addresses, the AV's GRH fields as TOS and TTL, DF,
/// identification 0, UDP to 4791 from 0xc000.., no UDP checksum, the default P_Key, no SE, no
/// MigReq, transport version 0, the test's QPN.
fn check_headers(p: &Pkt) {
    assert_eq!((p.dst_mac, p.src_mac), (PEER_MAC, DEV_MAC), "{p:?}");
    assert_eq!((p.src_ip, p.dst_ip), (DEV_IP, PEER_IP), "{p:?}");
    assert_eq!(
        (p.tos, p.ttl, p.ip_id, p.ip_frag),
        (TCLASS, HOP_LIMIT, 0, 0x4000),
        "{p:?}"
    );
    assert_eq!(
        (p.dport, p.sport & 0xc000, p.udp_csum),
        (ROCE_PORT, 0xc000, 0),
        "{p:?}"
    );
    assert_eq!(
        (p.se_m, p.tver, p.pkey, p.bth_b4),
        (0, 0, 0xffff, 0),
        "{p:?}"
    );
    assert_eq!(p.dest_qpn, PEER_QPN, "{p:?}");
}

/// An ACK (AETH syndrome kind ACK) of `psn`: its AETH.
fn expect_ack(w: &W, psn: u32) -> Aeth {
    let p = expect_pkt(w);
    check_headers(&p);
    assert_eq!((p.opcode, p.psn), (op::ACK, psn), "{p:?}");
    let a = p.aeth.unwrap();
    assert_eq!(
        a.syndrome & 0xe0,
        0,
        "syndrome {:#x}: not an ACK",
        a.syndrome
    );
    a
}

/// A packet from the test's QP to the device's.
fn from_peer(w: &W, opcode: u8, psn: u32) -> Pkt {
    Pkt::new(PEER, DEV, opcode, w.qp.qpn, psn)
}

/// A WRITE ONLY of `data` at `off` into the region, asking for an ACK.
fn write_req(w: &W, psn: u32, off: u64, data: &[u8]) -> Pkt {
    let mut p = from_peer(w, op::WRITE_ONLY, psn);
    p.ack_req = true;
    p.reth = Some(Reth {
        va: w.buf + off,
        rkey: w.key,
        len: data.len() as u32,
    });
    p.payload = data.to_vec();
    p
}

/// The test asks who has 10.7.0.1 and gets the device's answer (the device does not learn the
/// test's MAC from it: it asks when it has something to send, and [`expect_pkt`] answers).
fn resolve(w: &W) {
    let q = Arp::request(PEER_MAC, PEER_IP, DEV_IP);
    w.peer.send(&q.encode());
    let f = w.peer.recv(WAIT).expect("an ARP reply");
    assert_eq!(Arp::parse(&f), Ok(Arp::reply_to(&q, DEV_MAC)), "{f:02x?}");
}

#[test]
fn arp_for_the_ports_ipv4_gids_is_answered() {
    let mut w = world("");
    let a = query_port(&mut w.h);
    assert_eq!(
        (a.mac, a.wire as u32, a.state as u32),
        (DEV_MAC, QHCA_WIRE_ROCEV2, QHCA_PORT_ACTIVE)
    );
    resolve(&w);
    // Also to its own MAC rather than broadcast; not for an address it does not have.
    let mut q = Arp::request(PEER_MAC, PEER_IP, DEV_IP);
    q.eth_dst = DEV_MAC;
    w.peer.send(&q.encode());
    assert_eq!(
        Arp::parse(&w.peer.recv(WAIT).unwrap()),
        Ok(Arp::reply_to(&q, DEV_MAC))
    );
    w.peer
        .send(&Arp::request(PEER_MAC, PEER_IP, [10, 7, 0, 9]).encode());
    // To another MAC: not the device's business.
    let mut q = Arp::request(PEER_MAC, PEER_IP, DEV_IP);
    q.eth_dst = [0x52, 0x54, 0, 0xaa, 0, 9];
    w.peer.send(&q.encode());
    expect_nothing(&w);
    let c = counter_words(&mut w.h);
    assert_eq!(
        (c[ARP_RX], c[ARP_TX], c[TX_FRAMES], c[RX_MALFORMED]),
        (3, 2, 0, 0)
    );
    // An address the port no longer has.
    assert_eq!(set_gid(&mut w.h, 1, &GidEntry::default()), QHCA_CMD_OK);
    w.peer
        .send(&Arp::request(PEER_MAC, PEER_IP, DEV_IP).encode());
    expect_nothing(&w);
    // Entry 5 now: answered from there.
    add_ipv4(&mut w.h, 5, DEV_IP);
    resolve(&w);
}

#[test]
fn a_write_leaves_as_a_rocev2_frame_after_arp_and_completes_on_the_tests_ack() {
    let mut w = world("");
    let data = pattern(101, 4); // pad 3
    let (src, lkey) = (w.buf + 0x2000, w.key);
    w.h.qt.memwrite(src, &data);
    let (va, rkey) = (0x1122_3344_5566_7000, 0xabcd_0042);
    w.qp.post_send(&mut w.h, &SendWr::write(src, 101, lkey, va, rkey));

    // First the question: who has 10.7.0.2?
    let f = w.peer.recv(WAIT).expect("an ARP request");
    let q = Arp::parse(&f).unwrap();
    assert_eq!(q, Arp::request(DEV_MAC, DEV_IP, PEER_IP), "{f:02x?}");
    expect_nothing(&w);
    w.peer.send(&Arp::reply_to(&q, PEER_MAC).encode());

    let p = expect_pkt(&w);
    check_headers(&p);
    assert_eq!(
        (p.opcode, p.psn, p.ack_req),
        (op::WRITE_ONLY, PSN, true),
        "{p:?}"
    );
    assert_eq!(p.reth, Some(Reth { va, rkey, len: 101 }));
    assert_eq!(p.payload, data);
    let c = counter_words(&mut w.h);
    assert_eq!((c[TX_FRAMES], c[ARP_TX], c[ARP_RX]), (1, 1, 1));
    assert_eq!(c[TX_BYTES] as usize, HDRS_LEN + 16 + 104 + 4);
    w.cq.expect_empty(&mut w.h);

    let mut ack = Pkt::new(PEER, DEV, op::ACK, w.qp.qpn, PSN);
    ack.aeth = Some(Aeth {
        syndrome: 0,
        msn: 1,
    });
    w.peer.send(&ack.encode());
    let c = w.cq.wait(&mut w.h);
    assert_eq!(
        (c.wr_id, c.status as u32, c.opcode as u32),
        (0x77, QHCA_WC_SUCCESS, QHCA_WC_RDMA_WRITE)
    );

    // The MAC is known now: a 2500-byte WRITE goes at once, FIRST/MIDDLE/LAST at MTU 1024.
    let data = pattern(2500, 5);
    w.h.qt.memwrite(src, &data);
    w.qp.post_send(&mut w.h, &SendWr::write(src, 2500, lkey, va, rkey));
    let ps: Vec<Pkt> = (0..3).map(|_| expect_pkt(&w)).collect();
    let ops: Vec<(u8, u32, usize)> = ps
        .iter()
        .map(|p| (p.opcode, p.psn, p.payload.len()))
        .collect();
    assert_eq!(
        ops,
        [
            (op::WRITE_FIRST, PSN + 1, 1024),
            (op::WRITE_MIDDLE, PSN + 2, 1024),
            (op::WRITE_LAST, PSN + 3, 452)
        ]
    );
    ps.iter().for_each(check_headers);
    assert_eq!(
        ps[0].reth,
        Some(Reth {
            va,
            rkey,
            len: 2500
        })
    );
    assert!(ps[2].ack_req, "the last packet asks for an ACK");
    assert_eq!(
        ps.iter()
            .flat_map(|p| p.payload.clone())
            .collect::<Vec<_>>(),
        data
    );
    expect_nothing(&w);
    ack.psn = PSN + 3;
    ack.aeth = Some(Aeth {
        syndrome: 0x1f,
        msn: 2,
    });
    w.peer.send(&ack.encode());
    assert_eq!(w.cq.wait(&mut w.h).status as u32, QHCA_WC_SUCCESS);
}

#[test]
fn a_write_from_the_wire_is_placed_and_acknowledged() {
    let mut w = world("");
    resolve(&w);
    let data = pattern(77, 9);
    w.peer.send(&write_req(&w, PSN, 8, &data).encode());
    expect_ack(&w, PSN);
    let got = w.h.qt.memread(w.buf, 128);
    assert_eq!(got[8..85], data[..]);
    assert!(got[..8].iter().chain(&got[85..]).all(|&x| x == FILL));
    let c = counter_words(&mut w.h);
    assert_eq!((c[RX_FRAMES], c[TX_FRAMES]), (1, 1));
}

/// One way each for a frame to be wrong: nothing written, no answer, the right counter.
#[test]
fn bad_frames_are_dropped_and_counted() {
    let mut w = world("");
    resolve(&w);
    let data = pattern(64, 1);
    let good = write_req(&w, PSN, 0x100, &data);
    let corrupt = |f: fn(&mut Vec<u8>)| {
        let mut b = good.encode();
        f(&mut b);
        b
    };
    let mut cases: Vec<(&str, Vec<u8>, usize)> = vec![
        (
            "a bad ICRC",
            corrupt(|b| *b.last_mut().unwrap() ^= 1),
            RX_BAD_ICRC,
        ),
        (
            "a payload byte changed",
            corrupt(|b| b[HDRS_LEN + 20] ^= 4),
            RX_BAD_ICRC,
        ),
        (
            "truncated by 10 bytes",
            corrupt(|b| b.truncate(b.len() - 10)),
            RX_MALFORMED,
        ),
        (
            "truncated in the IPv4 header",
            corrupt(|b| b.truncate(ETH_LEN + 12)),
            RX_MALFORMED,
        ),
        (
            "a bad IPv4 checksum",
            corrupt(|b| b[ETH_LEN + 10] ^= 0x55),
            RX_MALFORMED,
        ),
        (
            "IPv4 options (IHL 6)",
            corrupt(|b| b[ETH_LEN] = 0x46),
            RX_MALFORMED,
        ),
        (
            "a fragment",
            corrupt(|b| b[ETH_LEN + 6] = 0x20),
            RX_MALFORMED,
        ),
    ];
    let mut p = good.clone();
    p.payload = pattern(4100, 2);
    p.reth.as_mut().unwrap().len = 4100;
    cases.push(("a 4100-byte payload", p.encode(), RX_OVERSIZE));
    let mut p = good.clone();
    p.dport = ROCE_PORT + 1;
    cases.push(("UDP to 4792", p.encode(), RX_NOT_OURS));
    let mut p = good.clone();
    p.dst_ip = [10, 7, 0, 9];
    cases.push(("to another address", p.encode(), RX_NOT_OURS));
    let mut p = good.clone();
    p.pkey = 0x7ffe;
    cases.push(("another P_Key", p.encode(), RX_MALFORMED));
    let mut p = good.clone();
    p.tver = 1;
    cases.push(("transport version 1", p.encode(), RX_MALFORMED));
    for (what, frame, counter) in cases {
        let before = counter_words(&mut w.h);
        w.peer.send(&frame);
        let after = wait_counter(&mut w.h, counter, &before, WAIT);
        for (i, (a, b)) in after.iter().zip(&before).enumerate() {
            let want = b + (i == counter) as u64;
            assert_eq!(*a, want, "{what}: counter {i}: {before:?} -> {after:?}");
        }
        expect_nothing(&w);
        assert!(
            w.h.qt.memread(w.buf, 8192).iter().all(|&x| x == FILL),
            "{what}: memory"
        );
    }

    // From the right port but another address: decoded, then refused by the QP.
    let mut p = good.clone();
    p.src_ip = [10, 7, 0, 3];
    w.peer.send(&p.encode());
    let t0 = Instant::now();
    while query_ctx_stats(&mut w.h, w.uar).1.pkt_foreign == 0 {
        assert!(t0.elapsed() < WAIT, "pkt_foreign stayed 0");
        std::thread::sleep(Duration::from_millis(5));
    }
    // To another MAC: ignored without a count; the good frame behind it is taken.
    let mut p = good.clone();
    p.dst_mac = [0x52, 0x54, 0, 0xaa, 0, 9];
    w.peer.send(&p.encode());
    expect_nothing(&w);
    assert!(w.h.qt.memread(w.buf, 8192).iter().all(|&x| x == FILL));

    w.peer.send(&good.encode());
    expect_ack(&w, PSN);
    assert_eq!(w.h.qt.memread(w.buf + 0x100, 64), data);
    let c = counter_words(&mut w.h);
    assert_eq!(c[RX_FRAMES], 2, "the foreign one and the good one");
    assert_eq!(query_ctx_stats(&mut w.h, w.uar).1.pkt_foreign, 1);
}

#[test]
fn a_read_from_the_wire_is_answered_with_read_responses() {
    let mut w = world("");
    resolve(&w);
    let data = pattern(3000, 6);
    w.h.qt.memwrite(w.buf + 0x800, &data);
    let mut p = from_peer(&w, op::READ_REQUEST, PSN);
    p.ack_req = true;
    p.reth = Some(Reth {
        va: w.buf + 0x800,
        rkey: w.key,
        len: 3000,
    });
    w.peer.send(&p.encode());
    let ps: Vec<Pkt> = (0..3).map(|_| expect_pkt(&w)).collect();
    ps.iter().for_each(check_headers);
    let ops: Vec<(u8, u32, usize)> = ps
        .iter()
        .map(|p| (p.opcode, p.psn, p.payload.len()))
        .collect();
    assert_eq!(
        ops,
        [
            (op::READ_RESP_FIRST, PSN, 1024),
            (op::READ_RESP_MIDDLE, PSN + 1, 1024),
            (op::READ_RESP_LAST, PSN + 2, 952)
        ]
    );
    // AETH (an ACK) on FIRST and LAST only.
    for p in [&ps[0], &ps[2]] {
        assert_eq!(p.aeth.expect("AETH").syndrome & 0xe0, 0, "{p:?}");
    }
    assert_eq!(ps[1].aeth, None);
    assert_eq!(
        ps.iter()
            .flat_map(|p| p.payload.clone())
            .collect::<Vec<_>>(),
        data
    );
    expect_nothing(&w);
    // The READ took three PSNs: the next request is PSN + 3.
    w.peer.send(&write_req(&w, PSN + 3, 0, &[1, 2, 3]).encode());
    expect_ack(&w, PSN + 3);
}

/// IBA 9.7.5.1.2 and C9-148: the AETH's MSN is the number of messages the responder has
/// completed, a READ counting from the moment it is accepted; rxe's responder keeps it so.
#[test]
fn acks_and_read_responses_carry_the_msn() {
    let w = world("");
    resolve(&w);
    w.peer.send(&write_req(&w, PSN, 0, &[1; 8]).encode());
    assert_eq!(expect_ack(&w, PSN).msn, 1, "the first WRITE's ACK");
    let mut p = from_peer(&w, op::READ_REQUEST, PSN + 1);
    p.reth = Some(Reth {
        va: w.buf,
        rkey: w.key,
        len: 3000, // FIRST, MIDDLE, LAST at path MTU 1024
    });
    w.peer.send(&p.encode());
    let msns: Vec<Option<u32>> = (0..2).map(|_| expect_pkt(&w).aeth.map(|a| a.msn)).collect();
    assert_eq!(msns, [Some(2), None], "READ RESPONSE FIRST, MIDDLE");
    assert_eq!(
        expect_pkt(&w).aeth.map(|a| a.msn),
        Some(2),
        "READ RESPONSE LAST"
    );
    // The READ took PSN + 1 ..= PSN + 3.
    w.peer.send(&write_req(&w, PSN + 4, 0, &[2; 8]).encode());
    assert_eq!(expect_ack(&w, PSN + 4).msn, 3, "the WRITE after the READ");
}

#[test]
fn x_loss_drop_1000_sends_nothing() {
    let mut w = world(",x-loss-drop=1000");
    resolve(&w); // ARP is never lost
    let src = w.buf + 0x2000;
    w.qp.post_send(&mut w.h, &SendWr::write(src, 64, w.key, 0x1000, 0x42));
    expect_nothing(&w);
    // A request from the test is placed; its ACK is lost.
    w.peer.send(&write_req(&w, PSN, 0, &[7; 16]).encode());
    let mut one = [0; 20];
    one[TEST_DROPPED] = 1;
    let c = wait_counter(&mut w.h, TEST_DROPPED, &one, WAIT);
    expect_nothing(&w);
    assert_eq!(w.h.qt.memread(w.buf, 16), [7; 16]);
    assert_eq!((c[TEST_DROPPED], c[TX_FRAMES], c[TX_BYTES]), (2, 0, 0));
    // The test's question and the device's, each answered.
    assert_eq!((c[ARP_TX], c[ARP_RX]), (2, 2));
}

/// A frame of garbage after a prefix that gets it some way into the device.
fn garbage(rng: &mut Rng, w: &W) -> Vec<u8> {
    let (psn, off, n) = (
        PSN + rng.below(32) as u32,
        rng.below(BUF_LEN),
        rng.below(64),
    );
    let good = write_req(w, psn, off, &rng.bytes(n as usize));
    let mut f = good.encode();
    match rng.below(10) {
        // Random bytes after the UDP header, lengths right, a right ICRC or not.
        0..=2 => {
            let n = rng.below(300) as usize;
            f.truncate(ETH_LEN + IPV4_LEN + UDP_LEN);
            let tail = rng.bytes(n);
            f.extend(tail);
            if rng.chance(1, 2) && f.len() >= HDRS_LEN + ICRC_LEN {
                f[HDRS_LEN - BTH_LEN + 2..HDRS_LEN - BTH_LEN + 4].copy_from_slice(&[0xff, 0xff]);
                f[HDRS_LEN - BTH_LEN + 1] &= 0x30;
            }
            fix_lengths(&mut f);
        }
        // A BTH of a known opcode (mostly) to the QP (mostly), its extended headers random but
        // for the region's address and key half the time, a payload if it has one (now and
        // then too long), a right ICRC: deep into the engine.
        3..=7 => {
            f.truncate(HDRS_LEN);
            let b = HDRS_LEN - BTH_LEN;
            let opcode = if rng.chance(7, 8) {
                *rng.pick(&OPCODES)
            } else {
                rng.next_u32() as u8
            };
            let (ext, payload) = ext_len(opcode).unwrap_or((rng.below(40) as usize, true));
            let n = match (payload || rng.chance(1, 16), rng.chance(1, 20)) {
                (false, _) => 0,
                (true, false) => rng.below(1100) as usize,
                (true, true) => 4000 + rng.below(300) as usize,
            };
            let pad = if rng.chance(7, 8) {
                (4 - n % 4) % 4
            } else {
                rng.below(4) as usize
            };
            f[b] = opcode;
            f[b + 1] = (pad as u8) << 4 | (rng.chance(1, 16) as u8) << 7;
            f[b + 8] = (rng.chance(1, 2) as u8) << 7;
            if rng.chance(1, 8) {
                f[b + 7] ^= rng.next_u32() as u8;
            }
            let mut h = rng.bytes(ext);
            if ext >= 16 && opcode != op::UD_SEND_ONLY && rng.chance(1, 2) {
                // RETH or AtomicETH: somewhere in the region (8-aligned for atomics), its key.
                let va = w.buf + (rng.below(BUF_LEN) & !7);
                h[..8].copy_from_slice(&va.to_be_bytes());
                h[8..12].copy_from_slice(&w.key.to_be_bytes());
                if opcode != op::CMP_SWAP && opcode != op::FETCH_ADD {
                    let max = if rng.chance(1, 2) { 64 } else { 5000 };
                    let len = rng.below(max) as u32;
                    h[12..16].copy_from_slice(&len.to_be_bytes());
                }
            }
            f.extend(h);
            let payload = rng.bytes(n);
            f.extend(payload);
            f.extend([0; 4].iter().take((4 - n % 4) % 4));
            f.extend([0; 4]);
            fix_lengths(&mut f);
        }
        // Random IPv4 and UDP header bytes.
        8 => {
            let i = ETH_LEN + rng.below((IPV4_LEN + UDP_LEN) as u64) as usize;
            f[i] = rng.next_u32() as u8;
            if rng.chance(1, 2) {
                // Never to 0 bytes: QEMU's dgram netdev takes an empty datagram for the end of
                // the connection and stops reading.
                f.truncate(1 + rng.below(f.len() as u64 - 1) as usize);
            }
        }
        // ARP-shaped garbage.
        _ => {
            f.truncate(ETH_LEN);
            f[12..14].copy_from_slice(&ETH_P_ARP.to_be_bytes());
            let n = rng.below(40) as usize;
            f.extend(rng.bytes(n));
        }
    }
    f
}

/// IPv4 total length, checksum, UDP length and the ICRC made right for the frame as it is.
fn fix_lengths(f: &mut [u8]) {
    let n = f.len();
    f[ETH_LEN + 2..ETH_LEN + 4].copy_from_slice(&((n - ETH_LEN) as u16).to_be_bytes());
    f[ETH_LEN + 10..ETH_LEN + 12].fill(0);
    let c = ip_checksum(&f[ETH_LEN..ETH_LEN + IPV4_LEN]);
    f[ETH_LEN + 10..ETH_LEN + 12].copy_from_slice(&c.to_be_bytes());
    let u = ETH_LEN + IPV4_LEN;
    f[u + 4..u + 6].copy_from_slice(&((n - u) as u16).to_be_bytes());
    if n >= HDRS_LEN + ICRC_LEN {
        let crc = icrc(f);
        f[n - ICRC_LEN..].copy_from_slice(&crc.to_le_bytes());
    }
}

/// The QP through RESET back to RTS, PSNs from `psn`.
fn reconnect(w: &mut W, psn: u32) {
    let reset = QpAttr {
        mask: QHCA_QP_ATTR_STATE,
        state: QHCA_QPS_RESET as u8,
        ..Default::default()
    };
    assert_eq!(modify_qp(&mut w.h, w.uar, w.qp.qpn, &reset), QHCA_CMD_OK);
    while w.cq.poll(&mut w.h).is_some() {}
    bring_to_rts(&mut w.h, &w.qp, PEER_QPN, psn, &params());
}

/// Frames taken apart by the device: each one ends in exactly one of these.
fn rx_total(c: &[u64; 20]) -> u64 {
    [
        RX_FRAMES,
        RX_MALFORMED,
        RX_BAD_ICRC,
        RX_NOT_OURS,
        RX_OVERSIZE,
        ARP_RX,
        RX_FORGED,
    ]
    .iter()
    .map(|&i| c[i])
    .sum()
}

#[test]
fn two_thousand_frames_of_garbage() {
    let mut w = world("");
    resolve(&w);
    let mut rng = Rng::new(0x0ce2_0001);
    let mut sent = 1u64; // the ARP request
    let mut events = Vec::new();
    let (mut resets, mut answers) = (0, 0);
    for _ in 0..40 {
        for _ in 0..50 {
            w.peer.send(&garbage(&mut rng, &w));
            sent += 1;
        }
        // Every frame is counted once, then the next batch (the socket's buffer stays small).
        let t0 = Instant::now();
        loop {
            let (a, ev) = query_port_amid_events(&mut w.h);
            events.extend(ev);
            if rx_total(&a.counter_words) == sent {
                break;
            }
            assert!(
                t0.elapsed() < WAIT,
                "{} of {sent} frames counted: {a:?}",
                rx_total(&a.counter_words)
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        // Whatever the batch did is done (no more frames come): a QP in ERR starts again.
        events.extend(take_events(&mut w.h));
        w.h.alive();
        if query_qp(&mut w.h, w.uar, w.qp.qpn).1.state == QHCA_QPS_ERR as u8 {
            reconnect(&mut w, PSN);
            resets += 1;
        }
        // What the device said back (ACKs, NAKs, READ responses, ARP) is well formed; its
        // question for the test's MAC is answered.
        for f in w.peer.drain(Duration::from_millis(1)) {
            if w.peer.answer_arp(&f, DEV, (PEER_MAC, PEER_IP)) {
                sent += 1;
            } else if Arp::parse(&f).is_err() {
                let p = Pkt::parse(&f).unwrap_or_else(|e| panic!("from the device: {e}: {f:02x?}"));
                check_headers(&p);
            }
            answers += 1;
        }
    }
    assert_eq!(w.h.status(), QHCA_STATUS_READY);
    let c = counter_words(&mut w.h);
    eprintln!(
        "after the garbage: {c:?}; {} events, {resets} QP resets, {answers} frames back",
        events.len()
    );
    for i in [
        RX_FRAMES,
        RX_MALFORMED,
        RX_BAD_ICRC,
        RX_NOT_OURS,
        RX_OVERSIZE,
    ] {
        assert!(c[i] > 0, "counter {i}: {c:?}");
    }
    assert!(events.iter().all(|e| e.type_ as u32 != QHCA_EQE_CMD_DONE));

    // A fresh connection, and the ordinary exchange works.
    w.peer.drain(QUIET);
    reconnect(&mut w, 0x5000);
    w.h.qt.memset(w.buf, 64, FILL);
    resolve(&w);
    w.peer.send(&write_req(&w, 0x5000, 0, &[9; 33]).encode());
    expect_ack(&w, 0x5000);
    assert_eq!(w.h.qt.memread(w.buf, 34), [&[9; 33][..], &[FILL]].concat());
}

/// The test's own IPv6 link-local address (its MAC's EUI-64).
const PEER_LL: [u8; 16] = [
    0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0x00, 0xff, 0xfe, 0xaa, 0x00, 0x02,
];

/// A neighbour solicitation from the test for `target`: from `src` (all zero for duplicate
/// address detection), to the target's solicited-node group or, with `unicast`, to the device's
/// MAC and `target` itself.
fn ns_frame(src: [u8; 16], target: [u8; 16], hop_limit: u8, unicast: bool) -> Vec<u8> {
    neighbour_solicitation(
        (PEER_MAC, src),
        target,
        hop_limit,
        unicast.then_some(DEV_MAC),
    )
}

/// Checks `f` as the device's advertisement of `target` to `to` (MAC `to_mac`) with `flags`.
fn check_na(f: &[u8], target: [u8; 16], to: [u8; 16], to_mac: [u8; 6], flags: u8) {
    assert_eq!(f.len(), 14 + 40 + 32, "{f:02x?}");
    assert_eq!(
        (&f[..6], &f[6..12], &f[12..14]),
        (&to_mac[..], &DEV_MAC[..], &[0x86, 0xdd][..])
    );
    let ip = &f[14..54];
    assert_eq!(
        (ip[0] >> 4, u16::from_be_bytes([ip[4], ip[5]]), ip[6], ip[7]),
        (6, 32, 58, 255)
    );
    assert_eq!((&ip[8..24], &ip[24..40]), (&target[..], &to[..]));
    let na = &f[54..];
    let src: [u8; 16] = ip[8..24].try_into().unwrap();
    assert_eq!(icmpv6_sum(&src, &to, na), 0, "ICMPv6 checksum: {na:02x?}");
    assert_eq!(
        (na[0], na[1], na[4], &na[5..8]),
        (136, 0, flags, &[0u8; 3][..])
    );
    assert_eq!(&na[8..24], &target[..]);
    assert_eq!(
        (na[24], na[25], &na[26..32]),
        (2, 1, &DEV_MAC[..]),
        "target link-layer address"
    );
}

#[test]
fn ipv6_neighbour_solicitations_for_the_link_local_gid_are_answered() {
    let mut w = world("");
    let ll = query_port(&mut w.h).gids[0].gid;
    assert_eq!(&ll[..8], &[0xfe, 0x80, 0, 0, 0, 0, 0, 0]);
    let before = counter_words(&mut w.h);
    // To the solicited-node group, then to the device's own MAC: answered, solicited.
    for unicast in [false, true] {
        w.peer.send(&ns_frame(PEER_LL, ll, 255, unicast));
        let f = w.peer.recv(WAIT).expect("a neighbour advertisement");
        check_na(&f, ll, PEER_LL, PEER_MAC, 0x60);
    }
    // Duplicate address detection (from ::): to all nodes, not solicited.
    w.peer.send(&ns_frame([0; 16], ll, 255, false));
    let f = w.peer.recv(WAIT).expect("an advertisement to all nodes");
    let all_nodes = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    check_na(&f, ll, all_nodes, [0x33, 0x33, 0, 0, 0, 1], 0x20);
    // Not answered: another target, the port's IPv4 GID, a hop limit below 255 (from beyond
    // the link), a wrong checksum.
    let mut other = ll;
    other[15] ^= 1;
    w.peer.send(&ns_frame(PEER_LL, other, 255, false));
    w.peer.send(&ns_frame(PEER_LL, v4_gid(DEV_IP), 255, false));
    w.peer.send(&ns_frame(PEER_LL, ll, 254, false));
    let mut bad = ns_frame(PEER_LL, ll, 255, false);
    bad[14 + 40 + 2] ^= 0x10;
    w.peer.send(&bad);
    expect_nothing(&w);
    let c = counter_words(&mut w.h);
    assert_eq!(
        (
            c[ARP_RX] - before[ARP_RX],
            c[ARP_TX] - before[ARP_TX],
            c[TX_FRAMES] - before[TX_FRAMES]
        ),
        (3, 3, 0)
    );
}
