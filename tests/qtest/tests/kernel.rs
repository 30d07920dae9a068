// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Kernel verbs (`qhca-abi.h`, "Kernel verbs (QHCA_CAP_KERNEL)"): the capability bit; the
//! driver's own context (ALLOC_UAR with `QHCA_UAR_KERNEL`, any other flag refused, forgotten by
//! FREE_UAR and reset); physical regions (REG_MR with `QHCA_ACCESS_PHYSICAL`: a kernel
//! context's only, no page list, bounds and rights as any region's, a guest address reached as
//! it is) under RC WRITEs, READs, atomics and receive buffers; and the GSI QP (CREATE_QP type
//! `QHCA_QPT_GSI`): a kernel context's only, one per device, always QPN 1, a UD QP that takes
//! the datagrams addressed to QPN 1 from this device and from the RoCEv2 wire and sends from
//! QPN 1. Between IPv4 GIDs the GRH area of a datagram it receives holds an IPv4 header the
//! kernel's `ib_get_rdma_header_version()` believes (version 4, IHL 5, a right checksum).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use qhca_qtest::abi::*;
use qhca_qtest::hca::{status_name, BEYOND_RAM, OUT_RAM};
use qhca_qtest::kernel::*;
use qhca_qtest::port::*;
use qhca_qtest::roce::{self, ip_checksum, Peer, Pkt, DEV, DEV_IP, PEER, PEER_IP};
use qhca_qtest::ud::*;
use qhca_qtest::verbs::*;
use qhca_qtest::Hca;

const GUID: u64 = 0x0002_c903_0042_4343;
const FILL: u8 = 0xee;
const KERNEL: u64 = QHCA_UAR_KERNEL as u64;
const GSI: u32 = QHCA_GSI_QPN;
const GSI_QKEY: u32 = QHCA_GSI_QKEY;
const LW: u32 = QHCA_ACCESS_LOCAL_WRITE;
const PHYS: u32 = QHCA_ACCESS_PHYSICAL;
const INDEX_MASK: u32 = (1 << QHCA_QPN_INDEX_BITS) - 1;

fn start() -> Hca {
    let mut h = Hca::start(&format!("num-uars=8,node-guid={GUID:#x}"));
    h.bring_up(5, 6);
    h
}

/// A new PD in `uar` and whether a physical region over every address can be had in it.
fn physical_status(h: &mut Hca, uar: u32) -> u32 {
    let (st, pdn) = alloc_pd(h, uar);
    assert_eq!(st, QHCA_CMD_OK, "ALLOC_PD in {uar}");
    reg_phys(h, uar, pdn, 0, u64::MAX, LW).0
}

fn dereg(h: &mut Hca, uar: u32, key: u32) -> u32 {
    obj_cmd(h, QHCA_CMD_DEREG_MR, [uar as u64, key as u64, 0, 0, 0]).0
}

fn destroy_qp(h: &mut Hca, uar: u32, qpn: u32) -> u32 {
    destroy(h, QHCA_CMD_DESTROY_QP, uar, qpn)
}

/// The next CQE on `cq`, asserted a success of `opcode` on QP `qpn`.
fn cqe_ok(h: &mut Hca, cq: &mut Cq, wr_id: u64, opcode: u32, qpn: u32) -> Cqe {
    let c = cq.wait(h);
    assert_eq!(
        (c.wr_id, c.status as u32, c.opcode as u32, c.qpn),
        (wr_id, QHCA_WC_SUCCESS, opcode, qpn),
        "CQE {c:?}"
    );
    c
}

/// What `ib_get_rdma_header_version()` (drivers/infiniband/core/verbs.c) makes of the 40 bytes
/// at the start of a UD receive buffer: 6 or 4 (0: neither).
fn rdma_header_version(grh: &[u8]) -> u8 {
    let ip4 = &grh[20..40];
    if grh[0] >> 4 != 6 {
        return if ip4[0] >> 4 == 4 { 4 } else { 0 };
    }
    if ip4[0] & 0xf != 5 {
        return 6;
    }
    if ip_checksum(ip4) == 0 {
        4
    } else {
        6
    }
}

/// The GRH area of a datagram between IPv4 GIDs: 20 zero bytes and an IPv4 header from `src`
/// to `dst` with TOS `tos`, TTL `ttl`, protocol UDP, a total length for a message of `len`
/// bytes (SEND_ONLY, no immediate) and a right checksum, which the kernel takes for IPv4.
fn assert_ipv4_grh(grh: &[u8], src: [u8; 4], dst: [u8; 4], tos: u8, ttl: u8, len: u32) {
    assert_eq!(grh[..20], [0; 20], "the first 20 bytes of the GRH area");
    let ip = &grh[20..40];
    assert_eq!(ip[0], 0x45, "version 4, IHL 5: {ip:02x?}");
    assert_eq!(ip_checksum(ip), 0, "header checksum: {ip:02x?}");
    assert_eq!(ip[1], tos, "TOS = traffic class");
    // IPv4 20, UDP 8, BTH 12, DETH 8, the message padded to 4, ICRC 4.
    let total = 20 + 8 + 12 + 8 + len.div_ceil(4) * 4 + 4;
    assert_eq!(
        u16::from_be_bytes([ip[2], ip[3]]) as u32,
        total,
        "total length"
    );
    assert_eq!((ip[8], ip[9]), (ttl, 17), "TTL = hop limit, protocol UDP");
    assert_eq!(
        (&ip[12..16], &ip[16..20]),
        (&src[..], &dst[..]),
        "addresses"
    );
    assert_eq!(rdma_header_version(grh), 4, "the kernel's verdict");
}

#[test]
fn alloc_uar_takes_the_kernel_flag_alone_and_the_caps_say_so() {
    let mut h = start();
    let caps = h.reg(QHCA_REG_CAPS_LO) as u64 | (h.reg(QHCA_REG_CAPS_HI) as u64) << 32;
    assert_ne!(caps & QHCA_CAP_KERNEL as u64, 0, "CAPS: {caps:#x}");
    assert_eq!(h.query_device(OUT_RAM, 128), QHCA_CMD_OK);
    let attr = qhca_qtest::wire::decode_attr(&h.qt.memread(OUT_RAM, 128));
    assert_eq!(attr.caps, caps, "QUERY_DEVICE's caps are the register's");

    for flags in [2, 3, 1 << 31, 1 << 32, u64::MAX] {
        let (st, _) = alloc_uar_flags(&mut h, flags);
        assert_eq!(st, QHCA_CMD_BAD_PARAM, "ALLOC_UAR flags {flags:#x}");
    }
    let mut c = h.cmd(QHCA_CMD_ALLOC_UAR);
    c.in_[0] = KERNEL;
    c.in_[1] = 1;
    h.expect_status(&c, QHCA_CMD_BAD_PARAM);
    assert_eq!(
        h.reg(QHCA_REG_NUM_CTX),
        0,
        "refused ALLOC_UARs allocate nothing"
    );

    assert_eq!(alloc_uar_flags(&mut h, KERNEL), (QHCA_CMD_OK, 0));
    assert_eq!(alloc_uar_flags(&mut h, 0), (QHCA_CMD_OK, 1));
    assert_eq!(h.reg(QHCA_REG_NUM_CTX), 2);
    assert_eq!(physical_status(&mut h, 0), QHCA_CMD_OK, "kernel context");
    assert_eq!(
        physical_status(&mut h, 1),
        QHCA_CMD_BAD_PARAM,
        "user context"
    );

    // FREE_UAR forgets what a page was: each comes back as what the next ALLOC_UAR asks for.
    assert_eq!(h.free_uar(0), QHCA_CMD_OK);
    assert_eq!(h.free_uar(1), QHCA_CMD_OK);
    assert_eq!(alloc_uar_flags(&mut h, 0), (QHCA_CMD_OK, 0));
    assert_eq!(alloc_uar_flags(&mut h, KERNEL), (QHCA_CMD_OK, 1));
    assert_eq!(
        physical_status(&mut h, 0),
        QHCA_CMD_BAD_PARAM,
        "page 0, now a user's"
    );
    assert_eq!(
        physical_status(&mut h, 1),
        QHCA_CMD_OK,
        "page 1, now the kernel's"
    );

    // So does a reset.
    h.bring_up(5, 6);
    assert_eq!(h.reg(QHCA_REG_NUM_CTX), 0);
    assert_eq!(h.alloc_uar(), (QHCA_CMD_OK, 0));
    assert_eq!(h.alloc_uar(), (QHCA_CMD_OK, 1));
    assert_eq!(
        physical_status(&mut h, 1),
        QHCA_CMD_BAD_PARAM,
        "after reset"
    );
}

#[test]
fn physical_regions_are_a_kernel_contexts_and_checked_like_any_region() {
    let mut h = start();
    let mut k = Kernel::new(&mut h, Mem::default());
    let user = h.alloc_uar().1 as u32;
    let (_, upd) = alloc_pd(&mut h, user);

    // No user context has one, whatever the rest of the command says.
    for (iova, len, access) in [(0, u64::MAX, LW), (0x40_0000, 4096, 0)] {
        let (st, _) = reg_phys(&mut h, user, upd, iova, len, access);
        assert_eq!(st, QHCA_CMD_BAD_PARAM, "user context: {iova:#x}+{len:#x}");
    }
    // In the kernel context, with a PD of its own only.
    let (st, _) = reg_phys(&mut h, k.uar, upd, 0, u64::MAX, LW);
    assert_eq!(st, QHCA_CMD_BAD_RESOURCE, "another context's PD");

    let list = k.m.page_list(&mut h, 0x40_0000, 1);
    let max = u64::MAX;
    let refused: [(&str, u64, u64, u32, u32, u64); 13] = [
        ("a page count", 0x40_0000, 4096, LW | PHYS, 1, 0),
        ("a page list", 0x40_0000, 4096, LW | PHYS, 0, list),
        ("both", 0x40_0000, 4096, LW | PHYS, 1, list),
        ("ON_DEMAND", 0, max, LW | PHYS | QHCA_ACCESS_ON_DEMAND, 0, 0),
        ("MW_BIND", 0, max, LW | PHYS | QHCA_ACCESS_MW_BIND, 0, 0),
        ("WATCHED", 0, max, LW | PHYS | QHCA_ACCESS_WATCHED, 0, 0),
        ("an unknown bit", 0, max, LW | PHYS | 1 << 9, 0, 0),
        (
            "REMOTE_WRITE without LOCAL_WRITE",
            0,
            max,
            PHYS | QHCA_ACCESS_REMOTE_WRITE,
            0,
            0,
        ),
        (
            "REMOTE_ATOMIC without LOCAL_WRITE",
            0,
            max,
            PHYS | QHCA_ACCESS_REMOTE_ATOMIC,
            0,
            0,
        ),
        ("length 0", 0x1000, 0, LW | PHYS, 0, 0),
        ("past the last address", 2, max, LW | PHYS, 0, 0),
        ("the last byte and one more", max, 2, LW | PHYS, 0, 0),
        (
            "from 0x1000 for UINT64_MAX (wraps)",
            0x1000,
            max,
            LW | PHYS,
            0,
            0,
        ),
    ];
    for (what, iova, len, access, npages, pages) in refused {
        let (st, _) = reg_mr_raw(&mut h, k.uar, k.pdn, iova, len, access, npages, pages);
        assert_eq!(st, QHCA_CMD_BAD_PARAM, "{what}: {}", status_name(st));
    }
    assert_eq!(h.reg(QHCA_REG_NUM_MR), 1, "the kernel's own region alone");

    // Any range that does not wrap, longer than max_mr_size (2^32) too; any rights.
    let accepted = [
        (0, max, QHCA_ACCESS_ALL),
        (1, max, 0),
        (1 << 32, 1 << 40, LW | QHCA_ACCESS_REMOTE_READ),
        (0x1234, 1, QHCA_ACCESS_REMOTE_READ),
        (max, 1, 0),
        (0x40_0000, 4096, QHCA_ACCESS_ALL),
    ];
    let mut keys = vec![k.key];
    for (iova, len, access) in accepted {
        let (st, key) = reg_phys(&mut h, k.uar, k.pdn, iova, len, access);
        assert_eq!(st, QHCA_CMD_OK, "{iova:#x}+{len:#x}: {}", status_name(st));
        assert!(!keys.contains(&key), "key {key:#x} twice");
        keys.push(key);
    }
    assert_eq!(h.reg(QHCA_REG_NUM_MR), keys.len() as u32);

    // No page list to revoke, no on-demand entries to map or invalidate.
    let key = *keys.last().unwrap() as u64;
    let uar = k.uar as u64;
    for (what, op, in_) in [
        ("REVOKE_PAGES", QHCA_CMD_REVOKE_PAGES, [uar, key, 0, 1, 0]),
        (
            "INVALIDATE_ODP",
            QHCA_CMD_INVALIDATE_ODP,
            [uar, key, 0x400, 1, 0],
        ),
        ("MAP_ODP", QHCA_CMD_MAP_ODP, [uar, key, 0x400, 1, list]),
    ] {
        assert_eq!(obj_cmd(&mut h, op, in_).0, QHCA_CMD_BAD_PARAM, "{what}");
    }
    // A user context cannot deregister them; the kernel can.
    assert_eq!(dereg(&mut h, user, keys[1]), QHCA_CMD_BAD_RESOURCE);
    for &key in &keys[1..] {
        assert_eq!(dereg(&mut h, k.uar, key), QHCA_CMD_OK);
        assert_eq!(dereg(&mut h, k.uar, key), QHCA_CMD_BAD_RESOURCE, "twice");
    }
    assert_eq!(h.reg(QHCA_REG_NUM_MR), 1);
}

#[test]
fn rc_write_read_and_atomics_through_physical_keys() {
    let mut h = start();
    let mut k = Kernel::new(&mut h, Mem::default());
    let (st, mut a) = k.create(&mut h, QHCA_QPT_RC);
    assert_eq!(st, QHCA_CMD_OK);
    let caps = QpCaps::default();
    let (st, mut b) = create_qp(&mut h, &mut k.m, k.uar, k.pdn, k.rcq.cqn, k.rcq.cqn, &caps);
    assert_eq!(st, QHCA_CMD_OK);
    // MTU 256: a 1000-byte message is four packets, each translated on its own.
    let p = ConnParams {
        path_mtu: 8,
        ..Default::default()
    };
    bring_to_rts(&mut h, &a, b.qpn, 0x10, &p);
    bring_to_rts(&mut h, &b, a.qpn, 0x10, &p);
    let data = pattern(1000, 5);
    let src = k.buf(&mut h, 4096, 0);
    h.qt.memwrite(src, &data);
    let dst = k.buf(&mut h, 4096, FILL);

    a.post_send(&mut h, &SendWr::write(src, 1000, k.key, dst + 8, k.key));
    cqe_ok(&mut h, &mut k.scq, 0x77, QHCA_WC_RDMA_WRITE, a.qpn);
    assert_eq!(
        h.qt.memread(dst + 8, 1000),
        data,
        "WRITE through physical keys"
    );
    assert_eq!(h.qt.memread(dst, 8), [FILL; 8], "before the target");
    assert_eq!(h.qt.memread(dst + 1008, 8), [FILL; 8], "after the target");

    let rd = k.buf(&mut h, 4096, FILL);
    let read = SendWr {
        wr_id: 0x78,
        opcode: QHCA_WR_RDMA_READ,
        flags: QHCA_WQE_SIGNALED,
        remote_addr: dst + 8,
        rkey: k.key,
        sges: vec![(rd, 300, k.key), (rd + 2048, 700, k.key)],
        ..Default::default()
    };
    a.post_send(&mut h, &read);
    let c = cqe_ok(&mut h, &mut k.scq, 0x78, QHCA_WC_RDMA_READ, a.qpn);
    assert_eq!(c.byte_len, 1000);
    assert_eq!(h.qt.memread(rd, 300), data[..300], "READ, first SGE");
    assert_eq!(
        h.qt.memread(rd + 2048, 700),
        data[300..],
        "READ, second SGE"
    );
    assert_eq!(h.qt.memread(rd + 300, 8), [FILL; 8], "between the SGEs");

    // Atomics on a word the physical key names, their results into another.
    let word = dst + 2048;
    let result = rd + 3072;
    h.qt.memwrite(word, &41u64.to_le_bytes());
    let atomic = |wr_id, opcode, swap_add, compare| SendWr {
        wr_id,
        opcode,
        flags: QHCA_WQE_SIGNALED,
        remote_addr: word,
        rkey: k.key,
        swap_add,
        compare,
        sges: vec![(result, 8, k.key)],
        ..Default::default()
    };
    let read_u64 = |h: &mut Hca, a| u64::from_le_bytes(h.qt.memread(a, 8).try_into().unwrap());
    a.post_send(&mut h, &atomic(0x79, QHCA_WR_ATOMIC_FETCH_AND_ADD, 1, 0));
    cqe_ok(&mut h, &mut k.scq, 0x79, QHCA_WC_FETCH_ADD, a.qpn);
    assert_eq!((read_u64(&mut h, result), read_u64(&mut h, word)), (41, 42));
    a.post_send(&mut h, &atomic(0x7a, QHCA_WR_ATOMIC_CMP_AND_SWP, 7, 42));
    cqe_ok(&mut h, &mut k.scq, 0x7a, QHCA_WC_COMP_SWAP, a.qpn);
    assert_eq!((read_u64(&mut h, result), read_u64(&mut h, word)), (42, 7));

    // A SEND into a receive buffer named by the physical key.
    let inbox = k.buf(&mut h, 4096, FILL);
    b.post_recv(&mut h, 0x7b, &[(inbox + 16, 2000, k.key)]);
    let send = SendWr {
        wr_id: 0x7c,
        opcode: QHCA_WR_SEND,
        flags: QHCA_WQE_SIGNALED,
        sges: vec![(src, 1000, k.key)],
        ..Default::default()
    };
    a.post_send(&mut h, &send);
    cqe_ok(&mut h, &mut k.scq, 0x7c, QHCA_WC_SEND, a.qpn);
    let c = cqe_ok(&mut h, &mut k.rcq, 0x7b, QHCA_WC_RECV, b.qpn);
    assert_eq!((c.byte_len, c.src_qp), (1000, a.qpn));
    assert_eq!(
        h.qt.memread(inbox + 16, 1000),
        data,
        "received through the key"
    );
    assert_eq!(h.qt.memread(inbox + 1016, 8), [FILL; 8]);

    // A physical region with bounds: 256 bytes from win. One WRITE fills it exactly; one
    // byte past its end is a remote access error that writes nothing.
    let bounded = k.buf(&mut h, 4096, FILL);
    let win = bounded + 100;
    let rights = LW | QHCA_ACCESS_REMOTE_WRITE;
    let (st, wkey) = reg_phys(&mut h, k.uar, k.pdn, win, 256, rights);
    assert_eq!(st, QHCA_CMD_OK);
    a.post_send(&mut h, &SendWr::write(src, 256, k.key, win, wkey));
    cqe_ok(&mut h, &mut k.scq, 0x77, QHCA_WC_RDMA_WRITE, a.qpn);
    assert_eq!(h.qt.memread(win, 256), data[..256]);
    a.post_send(&mut h, &SendWr::write(src, 1, k.key, win + 256, wkey));
    let c = k.scq.wait(&mut h);
    assert_eq!(c.status as u32, QHCA_WC_REM_ACCESS_ERR, "{c:?}");
    assert_eq!(
        h.qt.memread(win + 256, 8),
        [FILL; 8],
        "nothing past the region"
    );

    // ... and a local SGE one byte before it is a local protection error.
    reconnect(
        &mut h,
        [&mut a, &mut b],
        [&mut k.scq, &mut k.rcq],
        &p,
        0x200,
    );
    a.post_send(&mut h, &SendWr::write(win - 1, 2, wkey, dst, k.key));
    let c = k.scq.wait(&mut h);
    assert_eq!(c.status as u32, QHCA_WC_LOC_PROT_ERR, "{c:?}");
    assert_eq!(h.qt.memread(dst, 8), [FILL; 8], "nothing written");

    // An address where no memory answers fails as a DMA error would, and the device lives on.
    reconnect(
        &mut h,
        [&mut a, &mut b],
        [&mut k.scq, &mut k.rcq],
        &p,
        0x300,
    );
    a.post_send(&mut h, &SendWr::write(BEYOND_RAM, 16, k.key, dst, k.key));
    let c = k.scq.wait(&mut h);
    assert_eq!(c.status as u32, QHCA_WC_LOC_ACCESS_ERR, "{c:?}");
    assert_eq!(h.qt.memread(dst, 8), [FILL; 8], "nothing written");
    h.alive();
    assert_eq!(h.status(), QHCA_STATUS_READY);
}

/// A kernel context with the GSI QP and a user context with a UD QP whose Q_Key is QP1's
/// (which the device lets any QP have; the driver asks for CAP_NET_RAW): datagrams both ways,
/// each CQE naming the right QPs, the GSI QP's buffers plain guest addresses under the
/// physical key.
#[test]
fn gsi_qp_and_a_ud_qp_exchange_datagrams() {
    let mut h = start();
    let mut k = Kernel::new(&mut h, Mem::default());
    let um = k.m.carve(&mut h, 8 << 20);
    let mut u = Ud::with_mem(&mut h, um);
    let mut gsi = k.gsi(&mut h);
    let mut ud = u.qp(&mut h, GSI_QKEY);
    let (st, a) = query_qp(&mut h, k.uar, GSI);
    assert_eq!(
        (st, a.state, a.qkey),
        (QHCA_CMD_OK, QHCA_QPS_RTS as u8, GSI_QKEY)
    );
    let k_ah = k.ah(&mut h, &AhAttr::to(port_gid(GUID)));
    let u_ah = u.ah(&mut h, &AhAttr::to(port_gid(GUID)));

    // UD QP -> QPN 1, Q_Key 0x80010000 (the high bit: the sender's own, QP1's here).
    let inbox = k.buf(&mut h, 4096, FILL);
    gsi.post_recv(&mut h, 0x61, &[(inbox, 256, k.key)]);
    let (src, skey) = u.buf(&mut h, 4096, 0);
    let mad = pattern(100, 21);
    h.qt.memwrite(src, &mad);
    ud.post_ud(
        &mut h,
        &UdWr::send(0x11, u_ah, GSI, GSI_QKEY, &[(src, 100, skey)]),
    );
    cqe_ok(&mut h, &mut u.scq, 0x11, QHCA_WC_SEND, ud.qpn);
    let c = cqe_ok(&mut h, &mut k.rcq, 0x61, QHCA_WC_RECV, GSI);
    assert_eq!(
        (c.src_qp, c.byte_len, c.flags as u32),
        (ud.qpn, 40 + 100, QHCA_CQE_WITH_GRH),
        "the GSI QP's receive CQE"
    );
    let g = Grh::parse(&h.qt.memread(inbox, GRH));
    assert_eq!(
        (g.version, g.sgid, g.dgid),
        (6, port_gid(GUID), port_gid(GUID))
    );
    assert_eq!(h.qt.memread(inbox + 40, 100), mad, "the MAD");
    assert_eq!(h.qt.memread(inbox + 140, 4), [FILL; 4]);

    // QPN 1 -> the UD QP, from the physical key; its CQE says it came from QPN 1.
    let (dst, dkey) = u.buf(&mut h, 4096, FILL);
    ud.post_recv(&mut h, 0x62, &[(dst, 512, dkey)]);
    let out = k.buf(&mut h, 4096, 0);
    let reply = pattern(64, 22);
    h.qt.memwrite(out + 8, &reply);
    gsi.post_ud(
        &mut h,
        &UdWr::send(0x12, k_ah, ud.qpn, GSI_QKEY, &[(out + 8, 64, k.key)]),
    );
    cqe_ok(&mut h, &mut k.scq, 0x12, QHCA_WC_SEND, GSI);
    let c = cqe_ok(&mut h, &mut u.rcq, 0x62, QHCA_WC_RECV, ud.qpn);
    assert_eq!(
        (c.src_qp, c.byte_len),
        (GSI, 40 + 64),
        "sent from QPN 1: {c:?}"
    );
    assert_eq!(h.qt.memread(dst + 40, 64), reply);

    // With an explicit Q_Key, to a QP that has that one, with immediate data.
    let mut other = u.qp(&mut h, 0x1234_5678);
    other.post_recv(&mut h, 0x63, &[(dst + 1024, 512, dkey)]);
    let mut wr = UdWr::send(0x13, k_ah, other.qpn, 0x1234_5678, &[(out + 8, 64, k.key)]);
    wr.wr.opcode = QHCA_WR_SEND_WITH_IMM;
    wr.wr.imm = 0xabcd;
    gsi.post_ud(&mut h, &wr);
    cqe_ok(&mut h, &mut k.scq, 0x13, QHCA_WC_SEND, GSI);
    let c = cqe_ok(&mut h, &mut u.rcq, 0x63, QHCA_WC_RECV, other.qpn);
    assert_eq!((c.src_qp, c.imm, c.byte_len), (GSI, 0xabcd, 40 + 64));

    // A QP whose own Q_Key is another sends "QP1's" Q_Key as its own: dropped at QPN 1 and
    // counted for the kernel context, the receive WQE still posted for the next datagram.
    let (st, before) = query_ctx_stats(&mut h, k.uar);
    assert_eq!(st, QHCA_CMD_OK);
    let no_qp = h.reg(QHCA_REG_UD_NO_QP);
    gsi.post_recv(&mut h, 0x64, &[(inbox + 2048, 256, k.key)]);
    other.post_ud(
        &mut h,
        &UdWr::send(0x14, u_ah, GSI, GSI_QKEY, &[(src, 100, skey)]),
    );
    cqe_ok(&mut h, &mut u.scq, 0x14, QHCA_WC_SEND, other.qpn);
    k.rcq.expect_empty(&mut h);
    let (_, after) = query_ctx_stats(&mut h, k.uar);
    assert_eq!(after.ud_drop_qkey, before.ud_drop_qkey + 1, "{after:?}");
    assert_eq!(h.qt.memread(inbox + 2048, 8), [FILL; 8], "nothing written");
    ud.post_ud(
        &mut h,
        &UdWr::send(0x15, u_ah, GSI, GSI_QKEY, &[(src, 100, skey)]),
    );
    cqe_ok(&mut h, &mut u.scq, 0x15, QHCA_WC_SEND, ud.qpn);
    let c = cqe_ok(&mut h, &mut k.rcq, 0x64, QHCA_WC_RECV, GSI);
    assert_eq!(c.src_qp, ud.qpn);
    assert_eq!(h.qt.memread(inbox + 2048 + 40, 100), mad);
    assert_eq!(
        h.reg(QHCA_REG_UD_NO_QP),
        no_qp,
        "every datagram found its QP"
    );

    // QPN 1 is the kernel context's: the user context can neither ring it nor name it.
    let (_, ustats) = query_ctx_stats(&mut h, u.uar);
    let violations = h.reg(QHCA_REG_DB_VIOLATIONS);
    h.doorbell(
        u.uar,
        qhca_uapi::db::DbWord::new(qhca_uapi::db::DbType::Sq, GSI, 1).raw(),
    );
    assert_eq!(h.reg(QHCA_REG_DB_VIOLATIONS), violations + 1);
    let (_, now) = query_ctx_stats(&mut h, u.uar);
    assert_eq!(now.db_violations, ustats.db_violations + 1);
    assert_eq!(query_qp(&mut h, u.uar, GSI).0, QHCA_CMD_BAD_RESOURCE);
    assert_eq!(destroy_qp(&mut h, u.uar, GSI), QHCA_CMD_BAD_RESOURCE);
    k.scq.expect_empty(&mut h);
}

#[test]
fn one_gsi_qp_per_device_always_qpn_1() {
    let mut h = start();
    let mut k = Kernel::new(&mut h, Mem::default());
    let um = k.m.carve(&mut h, 16 << 20);
    let mut u = Ud::with_mem(&mut h, um);

    // Not in a user context, not as an unknown type.
    let caps = QpCaps::default();
    let (uar, pdn, cqn) = (u.uar, u.pdn, u.scq.cqn);
    let (st, _) = create_qp_typed(&mut h, &mut u.m, uar, pdn, cqn, cqn, &caps, QHCA_QPT_GSI);
    assert_eq!(st, QHCA_CMD_BAD_PARAM, "a GSI QP in a user context");
    assert_eq!(k.create(&mut h, QHCA_QPT_GSI + 1).0, QHCA_CMD_BAD_PARAM);
    assert_eq!(h.reg(QHCA_REG_NUM_QP), 0);

    let (st, gsi) = k.create(&mut h, QHCA_QPT_GSI);
    assert_eq!((st, gsi.qpn), (QHCA_CMD_OK, GSI));
    assert_eq!(h.reg(QHCA_REG_NUM_QP), 1, "it is a QP as any other");
    assert_eq!(k.create(&mut h, QHCA_QPT_GSI).0, QHCA_CMD_NO_RESOURCES);
    let km = k.m.carve(&mut h, 8 << 20);
    let mut k2 = Kernel::new(&mut h, km);
    assert_eq!(
        k2.create(&mut h, QHCA_QPT_GSI).0,
        QHCA_CMD_NO_RESOURCES,
        "one per device, not per context"
    );

    // A UD QP's state machine and attributes.
    let modify = |h: &mut Hca, uar, a: QpAttr| modify_qp(h, uar, GSI, &a);
    let init = QpAttr {
        mask: QHCA_QP_ATTR_STATE,
        state: QHCA_QPS_INIT as u8,
        ..Default::default()
    };
    assert_eq!(modify(&mut h, k.uar, init), QHCA_CMD_BAD_PARAM, "no Q_Key");
    let rc_attr = QpAttr {
        mask: QHCA_QP_ATTR_STATE | QHCA_QP_ATTR_QKEY | QHCA_QP_ATTR_ACCESS,
        qkey: GSI_QKEY,
        access: QHCA_ACCESS_REMOTE_READ,
        ..init
    };
    assert_eq!(
        modify(&mut h, k.uar, rc_attr),
        QHCA_CMD_BAD_PARAM,
        "RC attribute"
    );
    assert_eq!(
        modify(&mut h, u.uar, init),
        QHCA_CMD_BAD_RESOURCE,
        "another context"
    );
    ud_to_rts(&mut h, &gsi, GSI_QKEY, 0x33);
    let (st, a) = query_qp(&mut h, k.uar, GSI);
    assert_eq!(
        (st, a.state, a.qkey, a.sq_psn),
        (QHCA_CMD_OK, QHCA_QPS_RTS as u8, GSI_QKEY, 0x33)
    );

    // Other QPs never get number 1: their numbers have a generation.
    let ud = u.qp(&mut h, GSI_QKEY);
    let (st, rc) = k.create(&mut h, QHCA_QPT_RC);
    assert_eq!(st, QHCA_CMD_OK);
    for q in [ud.qpn, rc.qpn] {
        assert!(q >> QHCA_QPN_INDEX_BITS >= 1, "QPN {q:#x}");
    }

    // Destroyed, number 1 names nothing: commands, doorbells, datagrams.
    assert_eq!(destroy_qp(&mut h, k.uar, GSI), QHCA_CMD_OK);
    assert_eq!(destroy_qp(&mut h, k.uar, GSI), QHCA_CMD_BAD_RESOURCE);
    assert_eq!(query_qp(&mut h, k.uar, GSI).0, QHCA_CMD_BAD_RESOURCE);
    assert_eq!(modify(&mut h, k.uar, init), QHCA_CMD_BAD_RESOURCE);
    let violations = h.reg(QHCA_REG_DB_VIOLATIONS);
    h.doorbell(
        k.uar,
        qhca_uapi::db::DbWord::new(qhca_uapi::db::DbType::Rq, GSI, 1).raw(),
    );
    assert_eq!(h.reg(QHCA_REG_DB_VIOLATIONS), violations + 1, "doorbell");
    let mut sender = ud;
    let ah = u.ah(&mut h, &AhAttr::to(port_gid(GUID)));
    let no_qp = h.reg(QHCA_REG_UD_NO_QP);
    sender.post_ud(&mut h, &UdWr::send(1, ah, GSI, GSI_QKEY, &[]));
    cqe_ok(&mut h, &mut u.scq, 1, QHCA_WC_SEND, sender.qpn);
    assert_eq!(h.reg(QHCA_REG_UD_NO_QP), no_qp + 1, "a datagram to no QP");

    // Another kernel context's GSI QP is number 1 again, and takes what comes to 1.
    let mut gsi2 = k2.gsi(&mut h);
    let inbox = k2.buf(&mut h, 4096, FILL);
    gsi2.post_recv(&mut h, 0x21, &[(inbox, 64, k2.key)]);
    sender.post_ud(&mut h, &UdWr::send(2, ah, GSI, GSI_QKEY, &[]));
    cqe_ok(&mut h, &mut u.scq, 2, QHCA_WC_SEND, sender.qpn);
    let c = cqe_ok(&mut h, &mut k2.rcq, 0x21, QHCA_WC_RECV, GSI);
    assert_eq!((c.src_qp, c.byte_len), (sender.qpn, 40));

    // FREE_UAR takes it with the context; then the first context may have one again.
    let num_qp = h.reg(QHCA_REG_NUM_QP);
    assert_eq!(h.free_uar(k2.uar as u64), QHCA_CMD_OK);
    assert_eq!(h.reg(QHCA_REG_NUM_QP), num_qp - 1);
    let (st, again) = k.create(&mut h, QHCA_QPT_GSI);
    assert_eq!((st, again.qpn), (QHCA_CMD_OK, GSI));

    // A reset takes it too.
    h.bring_up(5, 6);
    let mut k = Kernel::new(&mut h, Mem::default());
    let (st, after_reset) = k.create(&mut h, QHCA_QPT_GSI);
    assert_eq!((st, after_reset.qpn), (QHCA_CMD_OK, GSI), "after reset");
}

/// The GSI QP holds a slot of the QP table (so QHCA_LIMIT_MAX_QP counts it) without using up
/// a generation of it: the next QP in that slot gets the generation after the last one there.
#[test]
fn the_gsi_qp_holds_a_slot_and_spares_its_generations() {
    let mut h = start();
    let mut k = Kernel::new(&mut h, Mem::default());
    // Every slot taken on one shared ring, but one.
    let caps = QpCaps {
        sq_log: 0,
        sq_stride_log: 7,
        rq_log: 0,
        rq_stride_log: 5,
        max_inline: 0,
        max_sge: 1,
    };
    let (_, n) = qp_layout(&caps);
    let ring = k.m.alloc(&mut h, n * PAGE);
    let list = k.m.page_list(&mut h, ring, n);
    let create = |ty: u32| {
        let mut b = create_qp_bytes(k.uar, k.pdn, k.scq.cqn, k.rcq.cqn, &caps, n as u32, list);
        b[28..32].copy_from_slice(&ty.to_le_bytes());
        in_words(&b)
    };
    let (ud, gsi) = (create(QHCA_QPT_UD), create(QHCA_QPT_GSI));
    let mut held = Vec::new();
    loop {
        let (st, qpn) = obj_cmd(&mut h, QHCA_CMD_CREATE_QP, ud);
        if st == QHCA_CMD_NO_RESOURCES {
            break;
        }
        assert_eq!(st, QHCA_CMD_OK);
        held.push(qpn as u32);
    }
    assert_eq!(held.len(), 1024, "QUERY_DEVICE's max_qp");
    assert_eq!(
        obj_cmd(&mut h, QHCA_CMD_CREATE_QP, gsi).0,
        QHCA_CMD_NO_RESOURCES,
        "no slot for the GSI QP"
    );
    let last = held.pop().unwrap();
    assert_eq!(destroy_qp(&mut h, k.uar, last), QHCA_CMD_OK);

    let mut seen = HashSet::from([last]);
    let mut prev = last;
    for round in 0..3 {
        // The GSI QP takes the free slot: none left for another QP.
        assert_eq!(
            obj_cmd(&mut h, QHCA_CMD_CREATE_QP, gsi),
            (QHCA_CMD_OK, GSI as u64)
        );
        assert_eq!(
            obj_cmd(&mut h, QHCA_CMD_CREATE_QP, ud).0,
            QHCA_CMD_NO_RESOURCES,
            "round {round}: the GSI QP holds the slot"
        );
        assert_eq!(destroy_qp(&mut h, k.uar, GSI), QHCA_CMD_OK);
        // The next QP there has the slot's next generation.
        let (st, qpn) = obj_cmd(&mut h, QHCA_CMD_CREATE_QP, ud);
        assert_eq!(st, QHCA_CMD_OK);
        let qpn = qpn as u32;
        assert_eq!(qpn & INDEX_MASK, last & INDEX_MASK, "the one free slot");
        assert_eq!(
            qpn >> QHCA_QPN_INDEX_BITS,
            (prev >> QHCA_QPN_INDEX_BITS) + 1,
            "round {round}: QPN {qpn:#x} after {prev:#x}"
        );
        assert!(seen.insert(qpn), "QPN {qpn:#x} handed out twice");
        assert_eq!(destroy_qp(&mut h, k.uar, qpn), QHCA_CMD_OK);
        prev = qpn;
    }
}

#[test]
fn ipv4_grh_of_datagrams_to_and_from_the_gsi_qp_is_a_valid_ipv4_header() {
    const IP1: [u8; 4] = [10, 3, 0, 1];
    const IP2: [u8; 4] = [10, 3, 0, 2];
    let mut h = start();
    add_ipv4(&mut h, 1, IP1);
    add_ipv4(&mut h, 2, IP2);
    let mut k = Kernel::new(&mut h, Mem::default());
    let um = k.m.carve(&mut h, 8 << 20);
    let mut u = Ud::with_mem(&mut h, um);
    let mut gsi = k.gsi(&mut h);
    let mut ud = u.qp(&mut h, GSI_QKEY);
    let to_gsi = u.ah(
        &mut h,
        &AhAttr {
            traffic_class: 0x28,
            hop_limit: 17,
            ..AhAttr::from_to(1, v4_gid(IP2))
        },
    );
    let to_ud = k.ah(
        &mut h,
        &AhAttr {
            traffic_class: 0xb8,
            hop_limit: 255,
            ..AhAttr::from_to(2, v4_gid(IP1))
        },
    );
    let (ubuf, ukey) = u.buf(&mut h, 4096, FILL);
    let kbuf = k.buf(&mut h, 4096, FILL);
    // Message lengths with every padding.
    for (i, len) in [0u32, 1, 2, 3, 256].into_iter().enumerate() {
        let wr_id = i as u64;
        h.qt.memset(ubuf, 4096, FILL);
        h.qt.memset(kbuf, 4096, FILL);
        if len > 0 {
            h.qt.memwrite(ubuf + 2048, &pattern(len as usize, 1));
            h.qt.memwrite(kbuf + 2048, &pattern(len as usize, 2));
        }

        gsi.post_recv(&mut h, wr_id, &[(kbuf, 1024, k.key)]);
        let sges = [(ubuf + 2048, len, ukey)];
        ud.post_ud(
            &mut h,
            &UdWr::send(wr_id, to_gsi, GSI, GSI_QKEY, &sges[..(len > 0) as usize]),
        );
        cqe_ok(&mut h, &mut u.scq, wr_id, QHCA_WC_SEND, ud.qpn);
        let c = cqe_ok(&mut h, &mut k.rcq, wr_id, QHCA_WC_RECV, GSI);
        assert_eq!((c.src_qp, c.byte_len), (ud.qpn, 40 + len));
        let grh = h.qt.memread(kbuf, 40);
        assert_ipv4_grh(&grh, IP1, IP2, 0x28, 17, len);
        assert_eq!(
            h.qt.memread(kbuf + 40, len as usize + 4)[..len as usize],
            pattern(len as usize, 1)
        );

        ud.post_recv(&mut h, wr_id, &[(ubuf, 1024, ukey)]);
        let sges = [(kbuf + 2048, len, k.key)];
        gsi.post_ud(
            &mut h,
            &UdWr::send(wr_id, to_ud, ud.qpn, GSI_QKEY, &sges[..(len > 0) as usize]),
        );
        cqe_ok(&mut h, &mut k.scq, wr_id, QHCA_WC_SEND, GSI);
        let c = cqe_ok(&mut h, &mut u.rcq, wr_id, QHCA_WC_RECV, ud.qpn);
        assert_eq!((c.src_qp, c.byte_len), (GSI, 40 + len));
        let grh = h.qt.memread(ubuf, 40);
        assert_ipv4_grh(&grh, IP2, IP1, 0xb8, 255, len);
        assert_eq!(
            h.qt.memread(ubuf + 40, len as usize + 4)[..len as usize],
            pattern(len as usize, 2)
        );
    }
}

/// How long something the device owes on the wire may take (real time).
const WAIT: Duration = Duration::from_secs(3);

/// The port on `-netdev dgram` with the test as its peer (`roce.rs`): a datagram from the
/// wire to QPN 1 reaches the GSI QP, with the DETH's source QP in its CQE and a GRH area whose
/// IPv4 header is right; the GSI QP's datagram leaves with source QP 1 in its DETH; once the
/// GSI QP is gone, a datagram to QPN 1 is counted in UD_NO_QP.
#[test]
fn gsi_qp_on_the_rocev2_wire() {
    let peer = Peer::new();
    let netdev = peer.netdev("n0");
    let props = format!("num-uars=8,netdev=n0,mac={}", mac_str(roce::DEV_MAC));
    let mut h = Hca::start_with(&props, &["-netdev", &netdev]);
    h.bring_up(5, 6);
    add_ipv4(&mut h, 1, DEV_IP);
    let mut k = Kernel::new(&mut h, Mem::default());
    let mut gsi = k.gsi(&mut h);
    let inbox = k.buf(&mut h, 4096, FILL);
    gsi.post_recv(&mut h, 0x31, &[(inbox, 512, k.key)]);

    let mad = pattern(256, 9);
    let mut p = Pkt::new(PEER, DEV, roce::op::UD_SEND_ONLY, GSI, 0x42);
    p.deth = Some((GSI_QKEY, roce::PEER_QPN));
    p.tos = 0x10;
    p.ttl = 9;
    p.payload = mad.clone();
    peer.send(&p.encode());
    let c = k.rcq.wait_real(&mut h, WAIT);
    assert_eq!(
        (c.wr_id, c.status as u32, c.qpn, c.src_qp, c.byte_len),
        (0x31, QHCA_WC_SUCCESS, GSI, roce::PEER_QPN, 40 + 256),
        "{c:?}"
    );
    let grh = h.qt.memread(inbox, 40);
    assert_ipv4_grh(&grh, PEER_IP, DEV_IP, 0x10, 9, 256);
    assert_eq!(h.qt.memread(inbox + 40, 256), mad);

    // The answer, from QPN 1 (the device asks for the test's MAC first).
    let ah = k.ah(
        &mut h,
        &AhAttr {
            traffic_class: 0x20,
            hop_limit: 30,
            ..AhAttr::from_to(1, v4_gid(PEER_IP))
        },
    );
    let out = k.buf(&mut h, 4096, 0);
    h.qt.memwrite(out, &mad[..100]);
    gsi.post_ud(
        &mut h,
        &UdWr::send(0x32, ah, roce::PEER_QPN, GSI_QKEY, &[(out, 100, k.key)]),
    );
    let f = peer
        .recv_answering(WAIT, DEV, PEER)
        .expect("the GSI QP's datagram on the wire");
    let got = Pkt::parse(&f).unwrap_or_else(|e| panic!("{e}: {f:02x?}"));
    assert_eq!(
        (got.opcode, got.dest_qpn, got.deth),
        (
            roce::op::UD_SEND_ONLY,
            roce::PEER_QPN,
            Some((GSI_QKEY, GSI))
        ),
        "{got:?}"
    );
    assert_eq!(
        (got.src_ip, got.dst_ip, got.tos, got.ttl),
        (DEV_IP, PEER_IP, 0x20, 30)
    );
    assert_eq!(got.payload, mad[..100]);
    let c = k.scq.wait_real(&mut h, WAIT);
    assert_eq!((c.wr_id, c.status as u32, c.qpn), (0x32, 0, GSI), "{c:?}");

    // No GSI QP: a datagram to QPN 1 finds no QP.
    assert_eq!(destroy_qp(&mut h, k.uar, GSI), QHCA_CMD_OK);
    let before = h.reg(QHCA_REG_UD_NO_QP);
    peer.send(&p.encode());
    let t0 = Instant::now();
    while h.reg(QHCA_REG_UD_NO_QP) == before {
        assert!(t0.elapsed() < WAIT, "the datagram to QPN 1 was not counted");
        h.qt.clock_step(100_000);
    }
    assert_eq!(h.reg(QHCA_REG_UD_NO_QP), before + 1);
}

/// A kernel context's datagram may carry its address vector (`QHCA_WQE_AV`): no AH, checked
/// as CREATE_AH checks one; data and inline bytes follow it. A bad vector, an AH number beside
/// it, or the flag in a user context's WQE: `LOC_QP_OP_ERR` and the QP in ERR.
#[test]
fn address_vectors_in_kernel_wqes() {
    let mut h = start();
    let mut k = Kernel::new(&mut h, Mem::default());
    let um = k.m.carve(&mut h, 8 << 20);
    let mut u = Ud::with_mem(&mut h, um);
    let mut gsi = k.gsi(&mut h);
    let mut ud = u.qp(&mut h, 0x1111_2222);
    let av = AhAttr::to(port_gid(GUID));

    // From QPN 1 with the vector in the WQE, scattered, then inline.
    let (dst, dkey) = u.buf(&mut h, 4096, FILL);
    ud.post_recv(&mut h, 0x71, &[(dst, 512, dkey)]);
    ud.post_recv(&mut h, 0x72, &[(dst + 1024, 512, dkey)]);
    let out = k.buf(&mut h, 4096, 0);
    let msg = pattern(200, 31);
    h.qt.memwrite(out, &msg);
    let wr = UdWr::send(0x21, 0, ud.qpn, 0x1111_2222, &[(out, 200, k.key)]);
    gsi.write_send_raw(&mut h, &wr.encode_av(&av));
    gsi.ring_sq(&mut h);
    cqe_ok(&mut h, &mut k.scq, 0x21, QHCA_WC_SEND, GSI);
    let c = cqe_ok(&mut h, &mut u.rcq, 0x71, QHCA_WC_RECV, ud.qpn);
    assert_eq!((c.src_qp, c.byte_len), (GSI, 40 + 200), "{c:?}");
    assert_eq!(h.qt.memread(dst + 40, 200), msg);
    let g = Grh::parse(&h.qt.memread(dst, GRH));
    assert_eq!((g.sgid, g.dgid), (port_gid(GUID), port_gid(GUID)));

    let small = pattern(24, 32);
    let mut wr = UdWr::send(0x22, 0, ud.qpn, 0x1111_2222, &[]);
    wr.wr.inline = Some(small.clone());
    gsi.write_send_raw(&mut h, &wr.encode_av(&av));
    gsi.ring_sq(&mut h);
    cqe_ok(&mut h, &mut k.scq, 0x22, QHCA_WC_SEND, GSI);
    let c = cqe_ok(&mut h, &mut u.rcq, 0x72, QHCA_WC_RECV, ud.qpn);
    assert_eq!(c.byte_len, 40 + 24);
    assert_eq!(h.qt.memread(dst + 1024 + 40, 24), small);

    // An AH number beside the vector: refused, the QP to ERR.
    let mut wr = UdWr::send(0x23, 0, ud.qpn, 0x1111_2222, &[(out, 8, k.key)]);
    let k_ah = k.ah(&mut h, &av);
    wr.ah = k_ah;
    let mut bytes = wr.encode_av(&av);
    bytes[32..36].copy_from_slice(&k_ah.to_le_bytes());
    gsi.write_send_raw(&mut h, &bytes);
    gsi.ring_sq(&mut h);
    let c = k.scq.wait(&mut h);
    assert_eq!(
        (c.wr_id, c.status as u32),
        (0x23, QHCA_WC_LOC_QP_OP_ERR),
        "{c:?}"
    );
    let e = h.next_eqe();
    assert_eq!(
        (e.type_ as u32, e.data),
        (QHCA_EQE_QP_ERR, [GSI as u64, k.uar as u64]),
        "the GSI QP went to ERR"
    );

    // A vector naming an invalid GID entry, on a fresh kernel UD QP.
    let (st, mut kud) = k.create(&mut h, QHCA_QPT_UD);
    assert_eq!(st, QHCA_CMD_OK);
    ud_to_rts(&mut h, &kud, 0x33, 0);
    let mut bad = av;
    bad.sgid_index = (QHCA_GID_TABLE_LEN - 1) as u8;
    let wr = UdWr::send(0x24, 0, ud.qpn, 0x1111_2222, &[(out, 8, k.key)]);
    kud.write_send_raw(&mut h, &wr.encode_av(&bad));
    kud.ring_sq(&mut h);
    let c = k.scq.wait(&mut h);
    assert_eq!(
        (c.wr_id, c.status as u32, c.qpn),
        (0x24, QHCA_WC_LOC_QP_OP_ERR, kud.qpn),
        "{c:?}"
    );
    let e = h.next_eqe();
    assert_eq!(
        e.data,
        [kud.qpn as u64, k.uar as u64],
        "QP_ERR of the UD QP"
    );

    // In a user context the flag is refused, whatever the vector.
    let (src, skey) = u.buf(&mut h, 4096, 0);
    let mut sender = u.qp(&mut h, 0x44);
    let wr = UdWr::send(0x25, 0, ud.qpn, 0x1111_2222, &[(src, 8, skey)]);
    sender.write_send_raw(&mut h, &wr.encode_av(&av));
    sender.ring_sq(&mut h);
    let c = u.scq.wait(&mut h);
    assert_eq!(
        (c.wr_id, c.status as u32, c.qpn),
        (0x25, QHCA_WC_LOC_QP_OP_ERR, sender.qpn),
        "{c:?}"
    );
    u.rcq.expect_empty(&mut h);
}
