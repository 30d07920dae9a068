// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The Ethernet function (`qhca-abi.h`, "The Ethernet function", `QHCA_CAP_ETH`): the port on a
//! `-netdev dgram` whose other end is the test (as `roce.rs` sets it up: the device
//! 52:54:00:aa:00:01 at 10.7.0.1, GID entry 1; the test 52:54:00:aa:00:02 at 10.7.0.2), and the
//! kernel context's Ethernet QP (CREATE_QP type `QHCA_QPT_ETH`).
//!
//! What is checked: the capability with a netdev and not without; the QP a kernel context's
//! only, one per device, no attribute but its state, reached by no packet; frames from the wire
//! (unicast UDP, ARP, broadcast, multicast, neighbour solicitations, UDP to 4791 of an address
//! the port does not have, another EtherType) in the receive buffers byte for byte with their
//! length, `QHCA_CQE_CSUM` and the sum of everything after the Ethernet header, computed here;
//! RoCEv2 for the port's GIDs (IPv4 and IPv6) still the engine's; ARP and neighbour
//! solicitations unanswered while the QP is in RTR or RTS, answered again in INIT, ERR, RESET
//! and once it is gone, while the port still learns from the replies to its own requests;
//! forged frames dropped; frames with no receive WQE, or too small a one, dropped and counted;
//! frames sent through SGEs and inline on the wire byte for byte, their UDP checksum filled in
//! on request; every kind of bad send WQE completing in error with nothing sent and the QP in
//! ERR; nothing sent in RTR; the counters; a reset taking the QP.

use std::time::{Duration, Instant};

use qhca_qtest::abi::*;
use qhca_qtest::hca::{status_name, OUT_RAM};
use qhca_qtest::kernel::Kernel;
use qhca_qtest::port::*;
use qhca_qtest::qmp::{socket_path, Qmp};
use qhca_qtest::roce::*;
use qhca_qtest::roce6::neighbour_solicitation;
use qhca_qtest::ud::*;
use qhca_qtest::verbs::*;
use qhca_qtest::Hca;

const FILL: u8 = 0xee;
const ETH: u32 = QHCA_QPT_ETH;
const HLEN: usize = QHCA_ETH_HLEN as usize;
const FRAME_MAX: usize = QHCA_ETH_FRAME_MAX as usize;
/// How long something the device owes may take (real time).
const WAIT: Duration = Duration::from_secs(3);
/// How long the test listens to conclude that nothing comes.
const QUIET: Duration = Duration::from_millis(200);
/// The test's IPv6 link-local address (its MAC's EUI-64).
const PEER_LL: [u8; 16] = [
    0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0x00, 0xff, 0xfe, 0xaa, 0x00, 0x02,
];
/// Another host's MAC on the segment.
const OTHER_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0xaa, 0x00, 0x09];

// Indices into PortAttr::counter_words.
const TX_FRAMES: usize = 0;
const RX_FRAMES: usize = 2;
const RX_NOT_OURS: usize = 8;
const ARP_RX: usize = 10;
const ARP_TX: usize = 11;
const RX_FORGED: usize = 15;
const ETH_TX: usize = 16;
const ETH_RX: usize = 17;
const ETH_DROP: usize = 18;

/// The Ethernet QP's rings: 512-byte send slots (64 bytes of headers, then up to 256 inline
/// bytes or 4 SGEs), 32 receive WQEs of up to 4 SGEs.
const CAPS: QpCaps = QpCaps {
    sq_log: 4,
    sq_stride_log: 9,
    rq_log: 5,
    rq_stride_log: 7,
    max_inline: 256,
    max_sge: 4,
};

// ---------------------------------------------------------------------------- checksums

/// The IPv4 pseudo-header of a UDP datagram of `udp_len` bytes (RFC 768).
fn pseudo_v4(src: [u8; 4], dst: [u8; 4], udp_len: u16) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    p.extend_from_slice(&[0, 17]);
    p.extend_from_slice(&udp_len.to_be_bytes());
    p
}

/// Whether the UDP checksum of an IPv4 frame (no IP options) is right, as a receiver checks
/// it: the sum over the pseudo-header and the datagram is 0xffff, and the field is not 0.
fn udp4_checksum_ok(f: &[u8]) -> bool {
    let ip = &f[HLEN..HLEN + 20];
    let udp = &f[HLEN + 20..];
    let mut all = pseudo_v4(
        ip[12..16].try_into().unwrap(),
        ip[16..20].try_into().unwrap(),
        udp.len() as u16,
    );
    all.extend_from_slice(udp);
    ones_sum(&all) == 0xffff && udp[6..8] != [0, 0]
}

// ------------------------------------------------------------------------------- frames

fn eth_header(dst: [u8; 6], src: [u8; 6], ty: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(HLEN);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ty.to_be_bytes());
    f
}

/// An Ethernet/IPv4/UDP frame: a right IPv4 header (no options, DF, TTL 64), UDP checksum 0.
fn udp4(
    macs: ([u8; 6], [u8; 6]),
    ips: ([u8; 4], [u8; 4]),
    ports: (u16, u16),
    payload: &[u8],
) -> Vec<u8> {
    let udp_len = (8 + payload.len()) as u16;
    let mut f = eth_header(macs.0, macs.1, ETH_P_IPV4);
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(20 + udp_len).to_be_bytes());
    ip[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
    ip[6] = 0x40;
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&ips.0);
    ip[16..20].copy_from_slice(&ips.1);
    let c = ip_checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&ports.0.to_be_bytes());
    f.extend_from_slice(&ports.1.to_be_bytes());
    f.extend_from_slice(&udp_len.to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}

/// A unicast UDP/IPv4 frame from the test to the device, to UDP port 53.
fn from_peer(payload: &[u8]) -> Vec<u8> {
    udp4((DEV_MAC, PEER_MAC), (PEER_IP, DEV_IP), (4000, 53), payload)
}

/// A UDP/IPv4 frame from the device to the test, as its stack would send it.
fn to_peer(payload: &[u8]) -> Vec<u8> {
    udp4((PEER_MAC, DEV_MAC), (DEV_IP, PEER_IP), (53, 4000), payload)
}

/// A frame of EtherType 0x88b5 (local experimental) of `len` bytes in all.
fn raw_frame(dst: [u8; 6], src: [u8; 6], len: usize, seed: u8) -> Vec<u8> {
    let mut f = eth_header(dst, src, 0x88b5);
    f.extend_from_slice(&pattern(len - HLEN, seed));
    f
}

// --------------------------------------------------------------------------- the world

/// MODIFY_QP of `qp` to `state`, the mask `QHCA_QP_ATTR_STATE` alone: status.
fn to_state(h: &mut Hca, qp: &Qp, state: u32) -> u32 {
    let a = QpAttr {
        mask: QHCA_QP_ATTR_STATE,
        state: state as u8,
        ..Default::default()
    };
    modify_qp(h, qp.uar, qp.qpn, &a)
}

/// RESET -> INIT -> RTR (-> RTS), each asserted.
fn activate(h: &mut Hca, qp: &Qp, rts: bool) {
    let mut steps = vec![QHCA_QPS_INIT, QHCA_QPS_RTR];
    if rts {
        steps.push(QHCA_QPS_RTS);
    }
    for st in steps {
        let r = to_state(h, qp, st);
        assert_eq!(r, QHCA_CMD_OK, "Ethernet QP to {st}: {}", status_name(r));
    }
}

fn qp_state(h: &mut Hca, qp: &Qp) -> u8 {
    let (st, a) = query_qp(h, qp.uar, qp.qpn);
    assert_eq!(st, QHCA_CMD_OK, "QUERY_QP");
    a.state
}

/// A device on a netdev whose other end is the test (GID entry 1 = 10.7.0.1), a kernel
/// context, and its Ethernet QP in RESET.
struct W {
    h: Hca,
    peer: Peer,
    k: Kernel,
    qp: Qp,
}

fn world() -> W {
    world_with(&[])
}

/// [`world`], with more QEMU arguments.
fn world_with(extra: &[&str]) -> W {
    let peer = Peer::new();
    let netdev = peer.netdev("n0");
    let props = format!("num-uars=8,netdev=n0,mac={}", mac_str(DEV_MAC));
    let mut args = vec!["-netdev", netdev.as_str()];
    args.extend_from_slice(extra);
    let mut h = Hca::start_with(&props, &args);
    h.bring_up(5, 6);
    add_ipv4(&mut h, 1, DEV_IP);
    let mut k = Kernel::with_caps(&mut h, Mem::default(), CAPS);
    let (st, qp) = k.create(&mut h, ETH);
    assert_eq!(st, QHCA_CMD_OK, "CREATE_QP ETH: {}", status_name(st));
    W { h, peer, k, qp }
}

/// No CQE on `cq` after [`QUIET`] of real time.
fn no_cqe(h: &mut Hca, cq: &mut Cq) {
    let t0 = Instant::now();
    while t0.elapsed() < QUIET {
        h.qt.clock_step(100_000);
        std::thread::sleep(Duration::from_millis(10));
    }
    let c = cq.poll(h);
    assert!(c.is_none(), "unexpected CQE on CQ {}: {c:?}", cq.cqn);
}

fn expect_nothing(w: &W, what: &str) {
    if let Some(f) = w.peer.recv(QUIET) {
        panic!("{what}: the device sent a frame: {f:02x?}");
    }
}

fn expect_frame(w: &W, what: &str) -> Vec<u8> {
    w.peer
        .recv(WAIT)
        .unwrap_or_else(|| panic!("{what}: no frame from the device"))
}

/// Posts a receive WQE of one buffer of `len` bytes (filled with [`FILL`]): its address.
fn post_rx(w: &mut W, wr_id: u64, len: u32) -> u64 {
    let a = w.k.buf(&mut w.h, len as u64 + 64, FILL);
    let key = w.k.key;
    w.qp.post_recv(&mut w.h, wr_id, &[(a, len, key)]);
    a
}

/// Waits for the receive CQE of `frame` in WQE `wr_id` at `buf` and checks it: success,
/// `byte_len`, `QHCA_CQE_CSUM`, the sum, the bytes, nothing written after them.
fn expect_received(w: &mut W, wr_id: u64, buf: u64, frame: &[u8], what: &str) {
    let c = w.k.rcq.wait_real(&mut w.h, WAIT);
    assert_eq!(
        (c.wr_id, c.status as u32, c.opcode as u32, c.qpn),
        (wr_id, QHCA_WC_SUCCESS, QHCA_WC_RECV, w.qp.qpn),
        "{what}: {c:?}"
    );
    assert_eq!(c.byte_len as usize, frame.len(), "{what}: byte_len");
    assert_eq!(c.flags as u32, QHCA_CQE_CSUM, "{what}: flags");
    assert_eq!(
        c.imm,
        ones_sum(&frame[HLEN..]) as u32,
        "{what}: the sum after the Ethernet header"
    );
    let got = w.h.qt.memread(buf, frame.len() + 16);
    assert_eq!(&got[..frame.len()], frame, "{what}: the frame's bytes");
    assert_eq!(&got[frame.len()..], [FILL; 16], "{what}: past the frame");
}

/// Waits (real time) until counter `i` has moved by `n` from `before`; the counters then.
fn wait_counter_by(h: &mut Hca, i: usize, before: &[u64; 20], n: u64) -> [u64; 20] {
    let t0 = Instant::now();
    loop {
        let c = counter_words(h);
        if c[i] >= before[i] + n {
            assert_eq!(c[i], before[i] + n, "counter {i}: {c:?}");
            return c;
        }
        assert!(
            t0.elapsed() < WAIT,
            "counter {i} at {} (from {}), not +{n}",
            c[i],
            before[i]
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The test asks who has 10.7.0.1: the device's reply, if one comes within `timeout`.
fn ask_arp(w: &W, timeout: Duration) -> Option<Arp> {
    let q = Arp::request(PEER_MAC, PEER_IP, DEV_IP);
    w.peer.send(&q.encode());
    let f = w.peer.recv(timeout)?;
    let a = Arp::parse(&f).unwrap_or_else(|e| panic!("{e}: {f:02x?}"));
    assert_eq!(a, Arp::reply_to(&q, DEV_MAC), "the device's answer");
    Some(a)
}

/// The QP_ERR event of `qp`, next in the event queue.
fn expect_qp_err(h: &mut Hca, qp: &Qp) {
    let e = h.next_eqe();
    assert_eq!(
        (e.type_ as u32, e.data),
        (QHCA_EQE_QP_ERR, [qp.qpn as u64, qp.uar as u64]),
        "the QP_ERR event of QP {:#x}",
        qp.qpn
    );
}

/// A signalled SEND of the frame in `sges`, `flags` added.
fn send_wr(wr_id: u64, flags: u32, sges: Vec<(u64, u32, u32)>) -> SendWr {
    SendWr {
        wr_id,
        opcode: QHCA_WR_SEND,
        flags: QHCA_WQE_SIGNALED | flags,
        sges,
        ..Default::default()
    }
}

/// Puts `frame` in guest memory and posts it as one SGE: the WQE's buffer address.
fn post_frame(w: &mut W, wr_id: u64, flags: u32, imm: u32, frame: &[u8]) -> u64 {
    let a = w.k.buf(&mut w.h, frame.len() as u64, 0);
    w.h.qt.memwrite(a, frame);
    let mut wr = send_wr(wr_id, flags, vec![(a, frame.len() as u32, w.k.key)]);
    wr.imm = imm;
    w.qp.post_send(&mut w.h, &wr);
    a
}

fn expect_send_cqe(w: &mut W, wr_id: u64) {
    let c = w.k.scq.wait_real(&mut w.h, WAIT);
    assert_eq!(
        (c.wr_id, c.status as u32, c.opcode as u32, c.qpn),
        (wr_id, QHCA_WC_SUCCESS, QHCA_WC_SEND, w.qp.qpn),
        "{c:?}"
    );
}

// -------------------------------------------------------------------------------- tests

fn caps_of(h: &mut Hca) -> u64 {
    let caps = h.reg(QHCA_REG_CAPS_LO) as u64 | (h.reg(QHCA_REG_CAPS_HI) as u64) << 32;
    assert_eq!(h.query_device(OUT_RAM, 128), QHCA_CMD_OK);
    let attr = qhca_qtest::wire::decode_attr(&h.qt.memread(OUT_RAM, 128));
    assert_eq!(attr.caps, caps, "QUERY_DEVICE's caps are the registers'");
    caps
}

#[test]
fn the_capability_and_the_qp_come_with_a_netdev() {
    let eth = QHCA_CAP_ETH as u64;
    let mut h = Hca::start("num-uars=8");
    h.bring_up(5, 6);
    let plain = caps_of(&mut h);
    assert_eq!(plain & eth, 0, "no netdev, no QHCA_CAP_ETH: {plain:#x}");
    let mut k = Kernel::with_caps(&mut h, Mem::default(), CAPS);
    let (st, _) = k.create(&mut h, ETH);
    assert_eq!(st, QHCA_CMD_BAD_PARAM, "an Ethernet QP without a netdev");
    assert_eq!(h.reg(QHCA_REG_NUM_QP), 0);

    let w = world();
    let mut h = w.h;
    let caps = caps_of(&mut h);
    assert_ne!(caps & eth, 0, "a netdev: QHCA_CAP_ETH: {caps:#x}");
    assert_eq!(caps & !eth, plain, "the other bits as without a netdev");
}

#[test]
fn the_qp_is_a_kernel_contexts_one_per_device_with_no_attribute_but_its_state() {
    let mut w = world();
    let h = &mut w.h;
    let qp = w.qp;
    assert_ne!(
        qp.qpn >> QHCA_QPN_INDEX_BITS,
        0,
        "an ordinary QPN, with a generation: {:#x}",
        qp.qpn
    );

    // A user context's: refused; a second one, from any kernel context: no resources.
    let um = w.k.m.carve(h, 4 << 20);
    let mut u = Ud::with_mem(h, um);
    let (st, _) = create_qp_typed(h, &mut u.m, u.uar, u.pdn, u.scq.cqn, u.rcq.cqn, &CAPS, ETH);
    assert_eq!(st, QHCA_CMD_BAD_PARAM, "in a user context");
    let (st, _) = w.k.create(h, ETH);
    assert_eq!(st, QHCA_CMD_NO_RESOURCES, "a second one");
    let km = w.k.m.carve(h, 4 << 20);
    let mut k2 = Kernel::with_caps(h, km, CAPS);
    let (st, _) = k2.create(h, ETH);
    assert_eq!(
        st, QHCA_CMD_NO_RESOURCES,
        "a second one, another kernel context"
    );

    // No attribute but the state, whatever the transition.
    for (mask, state, what) in [
        (
            QHCA_QP_ATTR_STATE | QHCA_QP_ATTR_QKEY,
            QHCA_QPS_INIT,
            "QKEY",
        ),
        (
            QHCA_QP_ATTR_STATE | QHCA_QP_ATTR_ACCESS,
            QHCA_QPS_INIT,
            "ACCESS",
        ),
        (QHCA_QP_ATTR_QKEY, 0, "QKEY alone"),
        (QHCA_QP_ATTR_SQ_PSN, 0, "SQ_PSN alone"),
        (
            QHCA_QP_ATTR_STATE | QHCA_QP_ATTR_SQ_PSN,
            QHCA_QPS_ERR,
            "SQ_PSN to ERR",
        ),
    ] {
        let a = QpAttr {
            mask,
            state: state as u8,
            qkey: if mask & QHCA_QP_ATTR_QKEY != 0 { 7 } else { 0 },
            access: if mask & QHCA_QP_ATTR_ACCESS != 0 {
                QHCA_ACCESS_REMOTE_WRITE
            } else {
                0
            },
            sq_psn: if mask & QHCA_QP_ATTR_SQ_PSN != 0 {
                5
            } else {
                0
            },
            ..Default::default()
        };
        let st = modify_qp(h, qp.uar, qp.qpn, &a);
        assert_eq!(st, QHCA_CMD_BAD_PARAM, "{what}: {}", status_name(st));
    }
    assert_eq!(qp_state(h, &qp), QHCA_QPS_RESET as u8, "refused: no change");

    // A UD QP's transitions, the state alone.
    for (state, want) in [
        (QHCA_QPS_RTR, QHCA_CMD_BAD_STATE),
        (QHCA_QPS_RTS, QHCA_CMD_BAD_STATE),
        (QHCA_QPS_INIT, QHCA_CMD_OK),
        (QHCA_QPS_INIT, QHCA_CMD_OK),
        (QHCA_QPS_RTS, QHCA_CMD_BAD_STATE),
        (QHCA_QPS_RTR, QHCA_CMD_OK),
        (QHCA_QPS_INIT, QHCA_CMD_BAD_STATE),
        (QHCA_QPS_RTR, QHCA_CMD_OK),
        (QHCA_QPS_RTS, QHCA_CMD_OK),
        (QHCA_QPS_RTR, QHCA_CMD_BAD_STATE),
        (QHCA_QPS_RTS, QHCA_CMD_OK),
        (QHCA_QPS_ERR, QHCA_CMD_OK),
        (QHCA_QPS_RTS, QHCA_CMD_BAD_STATE),
        (QHCA_QPS_RESET, QHCA_CMD_OK),
        (QHCA_QPS_INIT, QHCA_CMD_OK),
    ] {
        let from = qp_state(h, &qp);
        let st = to_state(h, &qp, state);
        assert_eq!(st, want, "{from} -> {state}: {}", status_name(st));
        let now = if st == QHCA_CMD_OK { state as u8 } else { from };
        assert_eq!(qp_state(h, &qp), now, "after {from} -> {state}");
    }
    assert_eq!(to_state(h, &qp, QHCA_QPS_RTR), QHCA_CMD_OK);
    assert_eq!(to_state(h, &qp, QHCA_QPS_RTS), QHCA_CMD_OK);

    // No packet reaches it: a datagram from a UD QP of this device to its number is one to
    // no UD QP.
    let mut ud = u.qp(h, 0x77);
    let ah = u.ah(h, &AhAttr::from_to(1, v4_gid(DEV_IP)));
    let before = h.reg(QHCA_REG_UD_NO_QP);
    ud.post_ud(h, &UdWr::send(1, ah, qp.qpn, 0x77, &[]));
    let c = u.scq.wait(h);
    assert_eq!((c.wr_id, c.status as u32), (1, QHCA_WC_SUCCESS), "{c:?}");
    assert_eq!(h.reg(QHCA_REG_UD_NO_QP), before + 1, "to no UD QP");
    w.k.rcq.expect_empty(h);

    // Destroyed, it may be had again, in the other kernel context too.
    let destroy_qp = |h: &mut Hca, uar: u32, qpn: u32| destroy(h, QHCA_CMD_DESTROY_QP, uar, qpn);
    assert_eq!(destroy_qp(h, qp.uar, qp.qpn), QHCA_CMD_OK);
    assert_eq!(query_qp(h, qp.uar, qp.qpn).0, QHCA_CMD_BAD_RESOURCE);
    let (st, again) = k2.create(h, ETH);
    assert_eq!(st, QHCA_CMD_OK, "after DESTROY_QP");
    assert_ne!(again.qpn, qp.qpn, "a new number");
    // FREE_UAR takes it with its context.
    assert_eq!(h.free_uar(k2.uar as u64), QHCA_CMD_OK);
    let (st, third) = w.k.create(h, ETH);
    assert_eq!(st, QHCA_CMD_OK, "after FREE_UAR of its context");
    // So does a reset.
    let num_qp = h.reg(QHCA_REG_NUM_QP);
    assert!(num_qp >= 2, "NUM_QP {num_qp}");
    h.bring_up(5, 6);
    assert_eq!(h.reg(QHCA_REG_NUM_QP), 0);
    let mut k = Kernel::with_caps(h, Mem::default(), CAPS);
    let (st, after) = k.create(h, ETH);
    assert_eq!(st, QHCA_CMD_OK, "after a reset");
    assert_ne!(after.qpn, third.qpn);
}

#[test]
fn frames_from_the_wire_land_in_the_receive_buffers_with_their_sum() {
    let mut w = world();
    let qp = w.qp;
    // RTR receives.
    activate(&mut w.h, &qp, false);
    let gid0 = port_gid(eui64(DEV_MAC));
    let before = counter_words(&mut w.h);
    let mut frames: Vec<(&str, Vec<u8>)> = vec![
        (
            "UDP to the port, 101 bytes of payload",
            from_peer(&pattern(101, 1)),
        ),
        ("an ARP request for the port's address", {
            Arp::request(PEER_MAC, PEER_IP, DEV_IP).encode()
        }),
        (
            "a broadcast",
            udp4(
                (BROADCAST, PEER_MAC),
                (PEER_IP, [255; 4]),
                (68, 67),
                &pattern(300, 2),
            ),
        ),
        (
            "a multicast (mDNS)",
            udp4(
                ([0x01, 0, 0x5e, 0, 0, 0xfb], PEER_MAC),
                (PEER_IP, [224, 0, 0, 251]),
                (5353, 5353),
                &pattern(77, 3),
            ),
        ),
        (
            "a neighbour solicitation for GID 0",
            neighbour_solicitation((PEER_MAC, PEER_LL), gid0, 255, None),
        ),
        (
            "UDP to 4791 of an address the port does not have",
            udp4(
                (DEV_MAC, PEER_MAC),
                (PEER_IP, [10, 7, 0, 9]),
                (0xc000, ROCE_PORT),
                &pattern(40, 4),
            ),
        ),
        (
            "another EtherType, 1500 bytes",
            raw_frame(DEV_MAC, PEER_MAC, 1500, 5),
        ),
        ("the shortest frame", raw_frame(DEV_MAC, PEER_MAC, HLEN, 0)),
    ];
    // One frame over three SGEs: 20 bytes, 1000, and the rest.
    let split = from_peer(&pattern(1000, 6));
    let mut bufs = Vec::new();
    for (i, _) in frames.iter().enumerate() {
        bufs.push(post_rx(&mut w, i as u64, 2048));
    }
    let two = w.k.buf(&mut w.h, 4096, FILL);
    let key = w.k.key;
    w.qp.post_recv(
        &mut w.h,
        99,
        &[
            (two, 20, key),
            (two + 1024, 1000, key),
            (two + 2048, 1000, key),
        ],
    );
    for (_, f) in &frames {
        w.peer.send(f);
    }
    w.peer.send(&split);
    // Another host's unicast: not the port's business.
    let other = raw_frame(OTHER_MAC, PEER_MAC, 100, 7);
    w.peer.send(&other);
    for (i, (what, f)) in frames.iter().enumerate() {
        expect_received(&mut w, i as u64, bufs[i], f, what);
    }
    let c = w.k.rcq.wait_real(&mut w.h, WAIT);
    assert_eq!(
        (c.wr_id, c.status as u32, c.byte_len as usize, c.imm),
        (99, 0, split.len(), ones_sum(&split[HLEN..]) as u32),
        "{c:?}"
    );
    assert_eq!(w.h.qt.memread(two, 20), split[..20]);
    assert_eq!(w.h.qt.memread(two + 1024, 1000), split[20..1020]);
    let rest = split.len() - 1020;
    assert_eq!(w.h.qt.memread(two + 2048, rest), split[1020..]);
    for gap in [two + 20, two + 2024, two + 2048 + rest as u64] {
        assert_eq!(w.h.qt.memread(gap, 4), [FILL; 4], "at {gap:#x}");
    }
    // Nothing for the other host's frame, and the port answered nothing itself.
    frames.push(("split", split));
    no_cqe(&mut w.h, &mut w.k.rcq);
    expect_nothing(
        &w,
        "an ARP request and a solicitation while the QP is in RTR",
    );
    let c = counter_words(&mut w.h);
    assert_eq!(c[ETH_RX] - before[ETH_RX], frames.len() as u64, "{c:?}");
    assert_eq!(
        (
            c[ETH_DROP],
            c[ETH_TX],
            c[ARP_TX],
            c[RX_NOT_OURS],
            c[RX_FRAMES]
        ),
        (0, 0, 0, 0, 0),
        "{c:?}"
    );
    assert_eq!(
        c[ARP_RX] - before[ARP_RX],
        1,
        "the ARP request was looked at"
    );
}

#[test]
fn rocev2_for_the_ports_gids_still_goes_to_the_engine() {
    let mut w = world();
    let qp = w.qp;
    activate(&mut w.h, &qp, true);
    let mut bufs = Vec::new();
    for i in 0..4 {
        bufs.push(post_rx(&mut w, i, 2048));
    }
    // An RC QP of a user context connected to the test's, and a region to WRITE into.
    let mut m = w.k.m.carve(&mut w.h, 4 << 20);
    let uar = w.h.alloc_uar().1 as u32;
    let (_, pdn) = alloc_pd(&mut w.h, uar);
    let (_, mut cq) = create_cq(&mut w.h, &mut m, uar, 6);
    let (st, rc) = create_qp(
        &mut w.h,
        &mut m,
        uar,
        pdn,
        cq.cqn,
        cq.cqn,
        &QpCaps::default(),
    );
    assert_eq!(st, QHCA_CMD_OK);
    let p = ConnParams {
        access: QHCA_ACCESS_REMOTE_WRITE,
        path_mtu: 10,
        timeout: 20,
        av: Some(AhAttr::from_to(1, v4_gid(PEER_IP))),
        ..Default::default()
    };
    bring_to_rts(&mut w.h, &rc, PEER_QPN, 0x100, &p);
    let dst = m.alloc(&mut w.h, 4096);
    w.h.qt.memset(dst, 4096, FILL);
    let access = QHCA_ACCESS_LOCAL_WRITE | QHCA_ACCESS_REMOTE_WRITE;
    let (st, rkey) = reg_mr(&mut w.h, &mut m, uar, pdn, dst, 4096, access);
    assert_eq!(st, QHCA_CMD_OK);

    // A WRITE from the test: placed, and the device asks for the test's MAC to ACK it.
    let data = pattern(200, 8);
    let mut wr = Pkt::new(PEER, DEV, op::WRITE_ONLY, rc.qpn, 0x100);
    wr.ack_req = true;
    wr.reth = Some(Reth {
        va: dst + 16,
        rkey,
        len: 200,
    });
    wr.payload = data.clone();
    w.peer.send(&wr.encode());
    let f = expect_frame(&w, "the device's ARP request for the test");
    let q = Arp::parse(&f).unwrap_or_else(|e| panic!("{e}: {f:02x?}"));
    assert_eq!(q, Arp::request(DEV_MAC, DEV_IP, PEER_IP));
    // The reply teaches the port (its ACK goes out) and reaches the Ethernet QP too.
    let reply = Arp::reply_to(&q, PEER_MAC).encode();
    w.peer.send(&reply);
    let f = expect_frame(&w, "the ACK");
    let ack = Pkt::parse(&f).unwrap_or_else(|e| panic!("{e}: {f:02x?}"));
    assert_eq!(
        (ack.opcode, ack.psn, ack.dst_mac, ack.dest_qpn),
        (op::ACK, 0x100, PEER_MAC, PEER_QPN),
        "{ack:?}"
    );
    assert_eq!(w.h.qt.memread(dst + 16, 200), data, "the WRITE's data");
    expect_received(&mut w, 0, bufs[0], &reply, "the ARP reply");
    cq.expect_empty(&mut w.h);

    // Datagrams over IPv4 and IPv6 to a QPN no UD QP has: the engine's (UD_NO_QP).
    let before = w.h.reg(QHCA_REG_UD_NO_QP);
    let mut ud = Pkt::new(PEER, DEV, op::UD_SEND_ONLY, 0x3ff, 1);
    ud.deth = Some((0x1234, PEER_QPN));
    ud.payload = pattern(64, 9);
    w.peer.send(&ud.encode());
    let gid0 = port_gid(eui64(DEV_MAC));
    w.peer.send(&ud.encode_v6(PEER_LL, gid0));
    let t0 = Instant::now();
    while w.h.reg(QHCA_REG_UD_NO_QP) < before + 2 {
        assert!(
            t0.elapsed() < WAIT,
            "the datagrams did not reach the engine"
        );
        w.h.qt.clock_step(100_000);
    }
    assert_eq!(w.h.reg(QHCA_REG_UD_NO_QP), before + 2);
    no_cqe(&mut w.h, &mut w.k.rcq);
    let c = counter_words(&mut w.h);
    assert_eq!(
        (c[RX_FRAMES], c[ETH_RX], c[ETH_DROP]),
        (3, 1, 0),
        "three RoCEv2 frames, one for the Ethernet QP: {c:?}"
    );
}

#[test]
fn the_port_answers_arp_and_solicitations_only_while_the_qp_is_not_active() {
    let mut w = world();
    let qp = w.qp;
    let gid0 = port_gid(eui64(DEV_MAC));
    let ns = neighbour_solicitation((PEER_MAC, PEER_LL), gid0, 255, None);
    let answers_ns = |w: &W| {
        w.peer.send(&ns);
        w.peer.recv(QUIET).is_some()
    };
    // The QP in RESET, then INIT: the port answers.
    assert!(ask_arp(&w, WAIT).is_some(), "RESET: ARP answered");
    assert!(answers_ns(&w), "RESET: solicitation answered");
    assert_eq!(to_state(&mut w.h, &qp, QHCA_QPS_INIT), QHCA_CMD_OK);
    assert!(ask_arp(&w, WAIT).is_some(), "INIT: ARP answered");

    // RTR, RTS: not; the frames reach the QP.
    let mut wr_id = 0;
    for state in [QHCA_QPS_RTR, QHCA_QPS_RTS] {
        assert_eq!(to_state(&mut w.h, &qp, state), QHCA_CMD_OK);
        let a = post_rx(&mut w, wr_id, 256);
        let b = post_rx(&mut w, wr_id + 1, 256);
        assert!(ask_arp(&w, QUIET).is_none(), "state {state}: ARP answered");
        assert!(!answers_ns(&w), "state {state}: solicitation answered");
        let q = Arp::request(PEER_MAC, PEER_IP, DEV_IP).encode();
        expect_received(&mut w, wr_id, a, &q, "the ARP request");
        expect_received(&mut w, wr_id + 1, b, &ns, "the solicitation");
        wr_id += 2;
    }
    // ERR: the port answers again; then RESET, and RTS again.
    assert_eq!(to_state(&mut w.h, &qp, QHCA_QPS_ERR), QHCA_CMD_OK);
    assert!(ask_arp(&w, WAIT).is_some(), "ERR: ARP answered");
    assert_eq!(to_state(&mut w.h, &qp, QHCA_QPS_RESET), QHCA_CMD_OK);
    assert!(ask_arp(&w, WAIT).is_some(), "RESET again: ARP answered");
    assert!(answers_ns(&w), "RESET again: solicitation answered");
    activate(&mut w.h, &qp, true);
    assert!(ask_arp(&w, QUIET).is_none(), "RTS again: ARP answered");
    // Destroyed: the port answers.
    assert_eq!(
        destroy(&mut w.h, QHCA_CMD_DESTROY_QP, qp.uar, qp.qpn),
        QHCA_CMD_OK
    );
    assert!(ask_arp(&w, WAIT).is_some(), "no QP: ARP answered");
    assert!(answers_ns(&w), "no QP: solicitation answered");
    let c = counter_words(&mut w.h);
    assert_eq!(c[ETH_RX], 4, "{c:?}");
    assert_eq!(
        c[ETH_DROP], 1,
        "the ARP request in RTS again, with no receive WQE: {c:?}"
    );
}

#[test]
fn forged_frames_never_reach_the_qp() {
    let mut w = world();
    let qp = w.qp;
    activate(&mut w.h, &qp, true);
    for i in 0..4 {
        post_rx(&mut w, i, 2048);
    }
    let before = counter_words(&mut w.h);
    let forged = [
        ("from the port's own MAC", DEV_MAC),
        ("from a group MAC", [0x01, 0, 0x5e, 0, 0, 1]),
        ("from the broadcast MAC", BROADCAST),
        ("from MAC 0", [0; 6]),
    ];
    for (_, src) in &forged {
        w.peer.send(&raw_frame(DEV_MAC, *src, 100, 1));
    }
    let c = wait_counter_by(&mut w.h, RX_FORGED, &before, forged.len() as u64);
    no_cqe(&mut w.h, &mut w.k.rcq);
    assert_eq!(
        (c[ETH_RX], c[ETH_DROP]),
        (before[ETH_RX], before[ETH_DROP]),
        "{c:?}"
    );
    // The next good frame takes the first WQE.
    let f = raw_frame(DEV_MAC, PEER_MAC, 100, 2);
    w.peer.send(&f);
    let c = w.k.rcq.wait_real(&mut w.h, WAIT);
    assert_eq!((c.wr_id, c.status as u32), (0, QHCA_WC_SUCCESS), "{c:?}");
}

#[test]
fn frames_without_a_big_enough_receive_wqe_are_dropped_and_counted() {
    let mut w = world();
    let qp = w.qp;
    activate(&mut w.h, &qp, true);
    let before = counter_words(&mut w.h);

    // No WQE.
    w.peer.send(&raw_frame(DEV_MAC, PEER_MAC, 60, 1));
    let c = wait_counter_by(&mut w.h, ETH_DROP, &before, 1);
    assert_eq!(c[ETH_RX], 0);
    // A WQE of 20 bytes: a 60-byte frame is dropped and the WQE stays for a 20-byte one.
    let a = post_rx(&mut w, 7, 20);
    w.peer.send(&raw_frame(DEV_MAC, PEER_MAC, 60, 2));
    let c = wait_counter_by(&mut w.h, ETH_DROP, &before, 2);
    assert_eq!(c[ETH_RX], 0);
    no_cqe(&mut w.h, &mut w.k.rcq);
    let small = raw_frame(DEV_MAC, PEER_MAC, 20, 3);
    w.peer.send(&small);
    expect_received(&mut w, 7, a, &small, "20 bytes into 20");
    // Longer than QHCA_ETH_FRAME_MAX: dropped whatever the WQE; FRAME_MAX itself is taken.
    let big = post_rx(&mut w, 8, 16384);
    w.peer.send(&raw_frame(DEV_MAC, PEER_MAC, FRAME_MAX + 1, 4));
    let c = wait_counter_by(&mut w.h, ETH_DROP, &before, 3);
    assert_eq!(c[ETH_RX], 1);
    let max = raw_frame(DEV_MAC, PEER_MAC, FRAME_MAX, 5);
    w.peer.send(&max);
    expect_received(&mut w, 8, big, &max, "QHCA_ETH_FRAME_MAX bytes");

    // A receive WQE the device cannot use: an error CQE and the QP in ERR.
    w.qp.post_recv(&mut w.h, 9, &[(0x40_0000, 64, 0xdead_0000)]);
    w.peer.send(&raw_frame(DEV_MAC, PEER_MAC, 60, 6));
    let c = w.k.rcq.wait_real(&mut w.h, WAIT);
    assert_eq!(
        (c.wr_id, c.status as u32, c.opcode as u32),
        (9, QHCA_WC_LOC_PROT_ERR, QHCA_WC_RECV),
        "{c:?}"
    );
    expect_qp_err(&mut w.h, &qp);
    assert_eq!(qp_state(&mut w.h, &qp), QHCA_QPS_ERR as u8);
    // Not active any more: the port answers ARP itself.
    assert!(ask_arp(&w, WAIT).is_some(), "ERR: ARP answered");
    let c = counter_words(&mut w.h);
    assert_eq!((c[ETH_RX], c[ETH_DROP]), (2, 3), "{c:?}");
}

#[test]
fn frames_sent_leave_on_the_wire_byte_for_byte() {
    let mut w = world();
    let qp = w.qp;
    activate(&mut w.h, &qp, true);
    let before = counter_words(&mut w.h);

    // Gathered from three SGEs.
    let f1 = to_peer(&pattern(1000, 1));
    let a = w.k.buf(&mut w.h, 4096, 0);
    w.h.qt.memwrite(a, &f1[..10]);
    w.h.qt.memwrite(a + 1024, &f1[10..500]);
    w.h.qt.memwrite(a + 2048, &f1[500..]);
    let key = w.k.key;
    let sges = vec![
        (a, 10, key),
        (a + 1024, 490, key),
        (a + 2048, f1.len() as u32 - 500, key),
    ];
    w.qp.post_send(&mut w.h, &send_wr(1, 0, sges));
    assert_eq!(expect_frame(&w, "the gathered frame"), f1);
    expect_send_cqe(&mut w, 1);

    // Inline, 60 bytes; then one unsignalled (no CQE, still sent) and the largest.
    let f2 = raw_frame(PEER_MAC, DEV_MAC, 60, 2);
    let mut wr = send_wr(2, 0, vec![]);
    wr.inline = Some(f2.clone());
    w.qp.post_send(&mut w.h, &wr);
    assert_eq!(expect_frame(&w, "the inline frame"), f2);
    expect_send_cqe(&mut w, 2);
    let f3 = raw_frame(BROADCAST, DEV_MAC, 64, 3);
    let b = w.k.buf(&mut w.h, 64, 0);
    w.h.qt.memwrite(b, &f3);
    let mut wr = send_wr(3, 0, vec![(b, 64, key)]);
    wr.flags = 0;
    w.qp.post_send(&mut w.h, &wr);
    let f4 = raw_frame(PEER_MAC, DEV_MAC, FRAME_MAX, 4);
    post_frame(&mut w, 4, 0, 0, &f4);
    assert_eq!(expect_frame(&w, "the unsignalled frame"), f3);
    assert_eq!(expect_frame(&w, "QHCA_ETH_FRAME_MAX bytes"), f4);
    let c = w.k.scq.wait_real(&mut w.h, WAIT);
    assert_eq!(
        (c.wr_id, c.wqe_index),
        (4, 3),
        "only the signalled one: {c:?}"
    );
    expect_nothing(&w, "after four frames");

    let c = counter_words(&mut w.h);
    assert_eq!(c[ETH_TX] - before[ETH_TX], 4, "{c:?}");
    assert_eq!(
        (c[TX_FRAMES], c[ARP_TX]),
        (0, 0),
        "not RoCEv2, not ARP: {c:?}"
    );
}

/// Linux's CHECKSUM_PARTIAL for UDP over IPv4: the stack puts the pseudo-header's sum (folded,
/// not complemented) in the checksum field and asks the device for the rest.
#[test]
fn checksum_offload_yields_a_udp_checksum_a_receiver_accepts() {
    let mut w = world();
    let qp = w.qp;
    activate(&mut w.h, &qp, true);
    let start = (HLEN + 20) as u32;
    let offset = 6u32;
    for (i, len) in [0usize, 1, 2, 3, 100, 1471, 8000].into_iter().enumerate() {
        let mut f = to_peer(&pattern(len, i as u8));
        let udp_len = (8 + len) as u16;
        let pseudo = ones_sum(&pseudo_v4(DEV_IP, PEER_IP, udp_len));
        f[HLEN + 26..HLEN + 28].copy_from_slice(&pseudo.to_be_bytes());
        assert!(!udp4_checksum_ok(&f), "{len}: not right before");
        let wr_id = 0x100 + i as u64;
        post_frame(&mut w, wr_id, QHCA_WQE_CSUM, start | offset << 16, &f);
        let got = expect_frame(&w, "the offloaded frame");
        assert_eq!(got.len(), f.len());
        assert!(
            udp4_checksum_ok(&got),
            "{len}-byte payload: checksum {:02x?} not accepted",
            &got[HLEN + 26..HLEN + 28]
        );
        assert_eq!(
            (&got[..HLEN + 26], &got[HLEN + 28..]),
            (&f[..HLEN + 26], &f[HLEN + 28..]),
            "{len}: only the checksum changed"
        );
        expect_send_cqe(&mut w, wr_id);
    }

    // A sum that comes to 0 is sent as 0xffff: 14 bytes of header, then bytes whose sum with
    // the checksum field (0) is 0xffff.
    let mut f = eth_header(PEER_MAC, DEV_MAC, 0x88b5);
    f.extend_from_slice(&[0xff, 0xff, 0, 0]);
    post_frame(&mut w, 0x200, QHCA_WQE_CSUM, HLEN as u32 | 2 << 16, &f);
    let got = expect_frame(&w, "the frame whose checksum is 0");
    assert_eq!(got[HLEN..], [0xff, 0xff, 0xff, 0xff]);
    expect_send_cqe(&mut w, 0x200);
    assert_eq!(counter_words(&mut w.h)[ETH_TX], 8);
}

/// A send WQE that must fail: its frame, opcode, flags and `imm_data`, and the status.
struct Bad {
    what: &'static str,
    frame: Vec<u8>,
    opcode: u32,
    flags: u32,
    imm: u32,
    status: u32,
}

impl Bad {
    /// A signalled SEND of `frame`, to complete with `status`.
    fn new(what: &'static str, frame: &[u8], status: u32) -> Bad {
        Bad {
            what,
            frame: frame.to_vec(),
            opcode: QHCA_WR_SEND,
            flags: 0,
            imm: 0,
            status,
        }
    }

    fn opcode(self, opcode: u32) -> Bad {
        Bad { opcode, ..self }
    }

    fn flags(self, flags: u32) -> Bad {
        Bad { flags, ..self }
    }

    /// With `QHCA_WQE_CSUM` and `imm_data` = `imm`.
    fn csum(self, imm: u32) -> Bad {
        Bad {
            flags: QHCA_WQE_CSUM,
            imm,
            ..self
        }
    }
}

#[test]
fn bad_send_wqes_complete_in_error_with_nothing_sent() {
    let mut w = world();
    let qp = w.qp;
    let good = to_peer(&pattern(50, 1));
    let mut foreign = good.clone();
    foreign[6..12].copy_from_slice(&OTHER_MAC);
    let short = good[..HLEN - 1].to_vec();
    let long = raw_frame(PEER_MAC, DEV_MAC, FRAME_MAX + 1, 2);
    let n = good.len() as u32;
    let (op_err, len_err) = (QHCA_WC_LOC_QP_OP_ERR, QHCA_WC_LOC_LEN_ERR);
    let cases = [
        Bad::new("a foreign source MAC", &foreign, op_err),
        Bad::new("13 bytes", &short, len_err),
        Bad::new("QHCA_ETH_FRAME_MAX + 1 bytes", &long, len_err),
        Bad::new("csum_start in the Ethernet header", &good, op_err).csum(13 | 6 << 16),
        Bad::new("the checksum's last byte past the frame", &good, op_err)
            .csum(34 | (n - 34 - 1) << 16),
        Bad::new("csum_start past the frame", &good, op_err).csum(n),
        Bad::new("SEND_WITH_IMM", &good, op_err).opcode(QHCA_WR_SEND_WITH_IMM),
        Bad::new("RDMA_WRITE", &good, op_err).opcode(QHCA_WR_RDMA_WRITE),
        Bad::new("QHCA_WQE_SOLICITED", &good, op_err).flags(QHCA_WQE_SOLICITED),
        Bad::new("QHCA_WQE_AV", &good, op_err).flags(QHCA_WQE_AV),
    ];
    let before = counter_words(&mut w.h);
    for Bad {
        what,
        frame,
        opcode,
        flags,
        imm,
        status,
    } in cases
    {
        activate(&mut w.h, &qp, true);
        let a = w.k.buf(&mut w.h, frame.len() as u64, 0);
        w.h.qt.memwrite(a, &frame);
        let mut wr = send_wr(1, flags, vec![(a, frame.len() as u32, w.k.key)]);
        wr.opcode = opcode;
        wr.imm = imm;
        w.qp.post_send(&mut w.h, &wr);
        // A good one behind it is flushed.
        post_frame(&mut w, 2, 0, 0, &good);
        let c = w.k.scq.wait_real(&mut w.h, WAIT);
        assert_eq!(
            (c.wr_id, c.status as u32, c.qpn),
            (1, status, qp.qpn),
            "{what}: {c:?}"
        );
        let c = w.k.scq.wait_real(&mut w.h, WAIT);
        assert_eq!(
            (c.wr_id, c.status as u32),
            (2, QHCA_WC_WR_FLUSH_ERR),
            "{what}: the WQE behind it: {c:?}"
        );
        expect_qp_err(&mut w.h, &qp);
        assert_eq!(qp_state(&mut w.h, &qp), QHCA_QPS_ERR as u8, "{what}");
        expect_nothing(&w, what);
        assert_eq!(to_state(&mut w.h, &qp, QHCA_QPS_RESET), QHCA_CMD_OK);
        w.qp.sq_pi = 0;
        w.qp.rq_pi = 0;
    }
    // Inline data longer than max_inline.
    activate(&mut w.h, &qp, true);
    let mut wr = send_wr(3, 0, vec![]);
    wr.inline = Some(raw_frame(PEER_MAC, DEV_MAC, 257, 3));
    w.qp.write_send_raw(&mut w.h, &wr.encode());
    w.qp.ring_sq(&mut w.h);
    let c = w.k.scq.wait_real(&mut w.h, WAIT);
    assert_eq!(
        (c.wr_id, c.status as u32),
        (3, QHCA_WC_LOC_LEN_ERR),
        "{c:?}"
    );
    expect_qp_err(&mut w.h, &qp);
    expect_nothing(&w, "inline past max_inline");
    let c = counter_words(&mut w.h);
    assert_eq!(c[ETH_TX], before[ETH_TX], "nothing sent: {c:?}");

    // The QP works again after RESET.
    assert_eq!(to_state(&mut w.h, &qp, QHCA_QPS_RESET), QHCA_CMD_OK);
    w.qp.sq_pi = 0;
    w.qp.rq_pi = 0;
    activate(&mut w.h, &qp, true);
    post_frame(&mut w, 4, 0, 0, &good);
    assert_eq!(expect_frame(&w, "a good frame"), good);
    expect_send_cqe(&mut w, 4);
}

#[test]
fn nothing_is_sent_in_rtr_and_rts_sends_what_waited() {
    let mut w = world();
    let qp = w.qp;
    activate(&mut w.h, &qp, false);
    let f = to_peer(&pattern(64, 1));
    post_frame(&mut w, 1, 0, 0, &f);
    expect_nothing(&w, "a send WQE in RTR");
    no_cqe(&mut w.h, &mut w.k.scq);
    assert_eq!(counter_words(&mut w.h)[ETH_TX], 0);
    assert_eq!(to_state(&mut w.h, &qp, QHCA_QPS_RTS), QHCA_CMD_OK);
    assert_eq!(expect_frame(&w, "the WQE posted in RTR, at RTS"), f);
    expect_send_cqe(&mut w, 1);
    assert_eq!(counter_words(&mut w.h)[ETH_TX], 1);
}

#[test]
fn a_reset_takes_the_qp_and_zeroes_its_counters() {
    let mut w = world();
    let qp = w.qp;
    activate(&mut w.h, &qp, true);
    let a = post_rx(&mut w, 1, 256);
    let f = raw_frame(DEV_MAC, PEER_MAC, 80, 1);
    w.peer.send(&f);
    expect_received(&mut w, 1, a, &f, "before the reset");
    w.peer.send(&f);
    post_frame(&mut w, 2, 0, 0, &to_peer(&[1, 2, 3]));
    expect_frame(&w, "a frame sent");
    expect_send_cqe(&mut w, 2);
    let before = counter_words(&mut w.h);
    assert_eq!((before[ETH_TX], before[ETH_RX]), (1, 1), "{before:?}");
    let t0 = Instant::now();
    while counter_words(&mut w.h)[ETH_DROP] == 0 {
        assert!(t0.elapsed() < WAIT, "the second frame found no WQE");
        std::thread::sleep(Duration::from_millis(5));
    }

    w.h.bring_up(5, 6);
    let c = query_port(&mut w.h).counter_words;
    assert_eq!((c[ETH_TX], c[ETH_RX], c[ETH_DROP]), (0, 0, 0), "{c:?}");
    assert_eq!(w.h.reg(QHCA_REG_NUM_QP), 0);
    add_ipv4(&mut w.h, 1, DEV_IP);
    assert!(ask_arp(&w, WAIT).is_some(), "no Ethernet QP: ARP answered");
    let mut k = Kernel::with_caps(&mut w.h, Mem::default(), CAPS);
    let (st, _) = k.create(&mut w.h, ETH);
    assert_eq!(st, QHCA_CMD_OK, "a new Ethernet QP after the reset");
}

/// The link: QMP's `set_link` takes the netdev's link down and up again. Each change raises
/// one `QHCA_EQE_PORT_CHANGE` (port 1, the new state), and QUERY_PORT says the same; while the
/// link is down a frame the Ethernet QP sends completes and goes nowhere, and a frame from the
/// wire reaches no receive WQE; once it is up both flow again. Setting the link to what it
/// already is raises nothing.
#[test]
fn the_link_going_down_and_up_raises_port_change_events() {
    let qmp_path = socket_path("qmp");
    let qmp_arg = format!("unix:{},server=on,wait=off", qmp_path.display());
    let mut w = world_with(&["-qmp", &qmp_arg]);
    let mut qmp = Qmp::connect(&qmp_path);
    let qp = w.qp;
    activate(&mut w.h, &qp, true);
    assert_eq!(query_port(&mut w.h).state, QHCA_PORT_ACTIVE as u8);
    // set_link, then the one event it raises and the port's state.
    let set_link = |w: &mut W, qmp: &mut Qmp, up: bool| {
        qmp.ok(&format!(
            r#"{{"execute":"set_link","arguments":{{"name":"n0","up":{up}}}}}"#
        ));
        let state = if up { QHCA_PORT_ACTIVE } else { QHCA_PORT_DOWN };
        assert_eq!(
            event_keys(&take_events(&mut w.h)),
            [(QHCA_EQE_PORT_CHANGE, 1, state as u64)],
            "one event: port 1 up {up}"
        );
        assert_eq!(query_port(&mut w.h).state, state as u8);
    };

    set_link(&mut w, &mut qmp, false);
    qmp.ok(r#"{"execute":"set_link","arguments":{"name":"n0","up":false}}"#);
    assert_eq!(
        event_keys(&take_events(&mut w.h)),
        [],
        "no change, no event"
    );
    let before = counter_words(&mut w.h);
    post_frame(&mut w, 1, 0, 0, &to_peer(&pattern(200, 1)));
    expect_send_cqe(&mut w, 1);
    expect_nothing(&w, "a frame sent while the link is down");
    let buf = post_rx(&mut w, 2, 2048);
    w.peer.send(&from_peer(&pattern(100, 2)));
    no_cqe(&mut w.h, &mut w.k.rcq);
    let c = counter_words(&mut w.h);
    assert_eq!(
        (c[ETH_TX], c[ETH_RX], c[ETH_DROP]),
        (before[ETH_TX], before[ETH_RX], before[ETH_DROP]),
        "nothing counted while the link is down: {c:?}"
    );

    set_link(&mut w, &mut qmp, true);
    let f = to_peer(&pattern(300, 3));
    post_frame(&mut w, 3, 0, 0, &f);
    assert_eq!(expect_frame(&w, "a frame sent once the link is up"), f);
    expect_send_cqe(&mut w, 3);
    let g = from_peer(&pattern(120, 4));
    w.peer.send(&g);
    expect_received(&mut w, 2, buf, &g, "a frame received once the link is up");
}
