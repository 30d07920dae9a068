// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Fast registration (`qhca-abi.h`, "Fast registration (QHCA_CAP_FAST_REG)"), what NVMe over
//! RDMA registers every I/O with: REG_MR with `QHCA_ACCESS_FAST_REG` makes an invalid region of
//! a kernel context that owns a block of 256 keys; a REG_MR WQE maps a page list into it with a
//! key of its block, rights, iova and length, in SQ order; the region then serves WRITEs and
//! READs by that exact key, until a LOCAL_INV or a SEND_WITH_INV makes it invalid again. A bad
//! registration completes in error and changes nothing.

use qhca_qtest::abi::*;
use qhca_qtest::hca::status_name;
use qhca_qtest::mw::{inc_key, local_inv, send_inv, Link};
use qhca_qtest::verbs::*;
use qhca_qtest::Hca;

const KERNEL: u64 = QHCA_UAR_KERNEL as u64;
const FAST: u32 = QHCA_ACCESS_FAST_REG;
const LW: u32 = QHCA_ACCESS_LOCAL_WRITE;
const RW: u32 = LW | QHCA_ACCESS_REMOTE_WRITE | QHCA_ACCESS_REMOTE_READ;
const TAG: u32 = (1 << QHCA_KEY_TAG_BITS) - 1;
const FILL: u8 = 0xee;
const PAGE: u64 = QHCA_PAGE_SIZE as u64;

/// A kernel context with a PD and the physical key over every address (the local DMA key).
struct Kernel {
    m: Mem,
    uar: u32,
    pdn: u32,
    dma_key: u32,
}

fn start() -> (Hca, Kernel) {
    let mut h = Hca::start("num-uars=8");
    h.bring_up(5, 6);
    let mut c = h.cmd(QHCA_CMD_ALLOC_UAR);
    c.in_[0] = KERNEL;
    let e = h.exec(&c);
    assert_eq!(e.status as u32, QHCA_CMD_OK, "ALLOC_UAR QHCA_UAR_KERNEL");
    let uar = e.data[0] as u32;
    let (st, pdn) = alloc_pd(&mut h, uar);
    assert_eq!(st, QHCA_CMD_OK);
    let (st, dma_key) = reg(
        &mut h,
        uar,
        pdn,
        0,
        u64::MAX,
        QHCA_ACCESS_ALL | QHCA_ACCESS_PHYSICAL,
        0,
    );
    assert_eq!(st, QHCA_CMD_OK, "the physical region");
    let k = Kernel {
        m: Mem::default(),
        uar,
        pdn,
        dma_key,
    };
    (h, k)
}

/// REG_MR as given, with no page list: (status, key).
fn reg(
    h: &mut Hca,
    uar: u32,
    pdn: u32,
    iova: u64,
    len: u64,
    access: u32,
    npages: u32,
) -> (u32, u32) {
    reg_mr_raw(h, uar, pdn, iova, len, access, npages, 0)
}

/// A fast-registration region of up to `npages` pages.
fn alloc_fast(h: &mut Hca, k: &Kernel, npages: u32) -> u32 {
    let (st, key) = reg(h, k.uar, k.pdn, 0, 0, FAST, npages);
    assert_eq!(st, QHCA_CMD_OK, "fast REG_MR: {}", status_name(st));
    key
}

fn dereg(h: &mut Hca, uar: u32, key: u32) -> u32 {
    obj_cmd(h, QHCA_CMD_DEREG_MR, [uar as u64, key as u64, 0, 0, 0]).0
}

/// `struct qhca_wqe_reg_mr`, host side.
#[derive(Clone, Copy, Debug)]
struct RegMr {
    iova: u64,
    length: u64,
    pages_addr: u64,
    key: u32,
    access: u32,
}

impl RegMr {
    fn wqe(&self, wr_id: u64) -> Vec<u8> {
        let mut b = SendWr {
            wr_id,
            opcode: QHCA_WR_REG_MR,
            flags: QHCA_WQE_SIGNALED,
            ..Default::default()
        }
        .encode();
        let s = &mut b[32..64];
        s[0..8].copy_from_slice(&self.iova.to_le_bytes());
        s[8..16].copy_from_slice(&self.length.to_le_bytes());
        s[16..24].copy_from_slice(&self.pages_addr.to_le_bytes());
        s[24..28].copy_from_slice(&self.key.to_le_bytes());
        s[28..32].copy_from_slice(&self.access.to_le_bytes());
        b
    }
}

fn post_reg(h: &mut Hca, qp: &mut Qp, r: &RegMr, wr_id: u64) {
    qp.write_send_raw(h, &r.wqe(wr_id));
    qp.ring_sq(h);
}

/// The next CQE, asserted (wr_id, status, opcode).
fn expect(h: &mut Hca, cq: &mut Cq, wr_id: u64, status: u32, opcode: u32) -> Cqe {
    let c = cq.wait(h);
    assert_eq!(
        (c.wr_id, c.status as u32, c.opcode as u32),
        (wr_id, status, opcode),
        "CQE {c:?}"
    );
    c
}

/// `n` pages of guest memory, not contiguous (every other page of a run), filled with `fill`,
/// and a page list naming them: (pages, list address).
fn scattered(h: &mut Hca, k: &mut Kernel, n: usize, fill: u8) -> (Vec<u64>, u64) {
    let run = k.m.alloc(h, 2 * n as u64 * PAGE + PAGE);
    let first = run.next_multiple_of(PAGE);
    let pages: Vec<u64> = (0..n as u64).map(|i| first + 2 * i * PAGE).collect();
    for &p in &pages {
        h.qt.memset(p, PAGE as usize, fill);
    }
    let list = flat_list(h, k, &pages);
    (pages, list)
}

/// A REG_MR WQE's page list: the addresses, little-endian, one after another (no directory).
fn flat_list(h: &mut Hca, k: &mut Kernel, pages: &[u64]) -> u64 {
    let list = k.m.alloc(h, 8 * pages.len() as u64);
    let bytes: Vec<u8> = pages.iter().flat_map(|p| p.to_le_bytes()).collect();
    h.qt.memwrite(list, &bytes);
    list
}

#[test]
fn fast_regions_are_a_kernel_contexts_and_hold_a_block_of_keys() {
    let (mut h, k) = start();
    let caps = h.reg(QHCA_REG_CAPS_LO) as u64 | (h.reg(QHCA_REG_CAPS_HI) as u64) << 32;
    assert_ne!(caps & QHCA_CAP_FAST_REG as u64, 0, "CAPS: {caps:#x}");

    let user = h.alloc_uar().1 as u32;
    let (_, upd) = alloc_pd(&mut h, user);
    let (st, _) = reg(&mut h, user, upd, 0, 0, FAST, 4);
    assert_eq!(st, QHCA_CMD_BAD_PARAM, "a user context's");
    let max = QHCA_FAST_REG_MAX_PAGES;
    let refused: [(&str, u64, u64, u32, u32); 7] = [
        ("no pages", 0, 0, FAST, 0),
        ("more than the most", 0, 0, FAST, max + 1),
        ("an iova", 0x1000, 0, FAST, 4),
        ("a length", 0, 4096, FAST, 4),
        ("rights", 0, 0, FAST | LW, 4),
        ("physical too", 0, 0, FAST | QHCA_ACCESS_PHYSICAL, 4),
        ("on demand too", 0, 0, FAST | QHCA_ACCESS_ON_DEMAND, 4),
    ];
    for (what, iova, len, access, npages) in refused {
        let (st, _) = reg(&mut h, k.uar, k.pdn, iova, len, access, npages);
        assert_eq!(st, QHCA_CMD_BAD_PARAM, "{what}: {}", status_name(st));
    }
    let b = reg_mr_bytes(k.uar, k.pdn, 0, 0, FAST, 4, 0x10_0000);
    assert_eq!(
        obj_cmd(&mut h, QHCA_CMD_REG_MR, in_words(&b)).0,
        QHCA_CMD_BAD_PARAM,
        "a list"
    );
    assert_eq!(h.reg(QHCA_REG_NUM_MR), 1, "nothing but the physical region");

    // Interleaved with registrations of plain regions, no key falls into a fast one's block.
    let mut blocks = vec![];
    let mut plain = vec![];
    for i in 0..8 {
        let key = alloc_fast(&mut h, &k, if i % 2 == 0 { 1 } else { max });
        assert_eq!(key & TAG, 0, "a block's first key: {key:#x}");
        blocks.push(key);
        let (st, p) = reg(&mut h, k.uar, k.pdn, 0, 1 << 20, QHCA_ACCESS_PHYSICAL, 0);
        assert_eq!(st, QHCA_CMD_OK);
        plain.push(p);
    }
    for &p in &plain {
        assert!(
            !blocks.contains(&(p & !TAG)),
            "key {p:#x} in a fast region's block {blocks:x?}"
        );
    }
    // Another context cannot deregister one; its first key does, in any state, once.
    assert_eq!(dereg(&mut h, user, blocks[0]), QHCA_CMD_BAD_RESOURCE);
    assert_eq!(
        dereg(&mut h, k.uar, blocks[0] | 1),
        QHCA_CMD_BAD_RESOURCE,
        "another key of the block"
    );
    for &b in &blocks {
        assert_eq!(dereg(&mut h, k.uar, b), QHCA_CMD_OK);
        assert_eq!(dereg(&mut h, k.uar, b), QHCA_CMD_BAD_RESOURCE, "twice");
    }
    // No page list to revoke.
    let key = alloc_fast(&mut h, &k, 4);
    let in_ = [k.uar as u64, key as u64, 0, 1, 0];
    assert_eq!(
        obj_cmd(&mut h, QHCA_CMD_REVOKE_PAGES, in_).0,
        QHCA_CMD_BAD_PARAM
    );
}

#[test]
fn a_registered_region_serves_its_exact_key_until_invalidated() {
    let (mut h, mut k) = start();
    let p = ConnParams {
        path_mtu: 8, // 256 bytes: a message crosses pages packet by packet
        ..Default::default()
    };
    let mut l = Link::new(&mut h, &mut k.m, k.uar, k.pdn, &p);
    let base = alloc_fast(&mut h, &k, 8);

    // Four scattered pages, the region starting 0x100 into the first: iova is any number.
    let (pages, list) = scattered(&mut h, &mut k, 4, FILL);
    let key = inc_key(base);
    let iova = 0xdead_0000_0100u64;
    let len = 3 * PAGE + 0x200;
    let r = RegMr {
        iova,
        length: len,
        pages_addr: list,
        key,
        access: RW,
    };
    post_reg(&mut h, &mut l.b, &r, 0x10);
    expect(&mut h, &mut l.bcq, 0x10, QHCA_WC_SUCCESS, QHCA_WC_REG_MR);
    // The list is copied: changing it now changes nothing.
    h.qt.memset(list, 32, 0);

    // A WRITE across the whole region lands in the scattered pages.
    let data = pattern(len as usize, 9);
    let src = k.m.alloc(&mut h, len);
    h.qt.memwrite(src, &data);
    l.a.post_send(
        &mut h,
        &SendWr::write(src, len as u32, k.dma_key, iova, key),
    );
    expect(
        &mut h,
        &mut l.acq,
        0x77,
        QHCA_WC_SUCCESS,
        QHCA_WC_RDMA_WRITE,
    );
    let mut off = 0usize;
    for (i, &pg) in pages.iter().enumerate() {
        let start = if i == 0 { 0x100 } else { 0 };
        let n = ((PAGE - start) as usize).min(len as usize - off);
        assert_eq!(h.qt.memread(pg + start, n), data[off..off + n], "page {i}");
        off += n;
    }
    assert_eq!(
        h.qt.memread(pages[0], 0x100),
        vec![FILL; 0x100],
        "before iova"
    );
    assert_eq!(
        h.qt.memread(pages[3] + 0x300, 0x100),
        vec![FILL; 0x100],
        "past the end"
    );

    // A READ through it, and its own L_Key as a local buffer.
    let rd = k.m.alloc(&mut h, len);
    let read = SendWr {
        wr_id: 0x78,
        opcode: QHCA_WR_RDMA_READ,
        flags: QHCA_WQE_SIGNALED,
        remote_addr: iova + 0x80,
        rkey: key,
        sges: vec![(rd, 2 * PAGE as u32, k.dma_key)],
        ..Default::default()
    };
    l.a.post_send(&mut h, &read);
    expect(&mut h, &mut l.acq, 0x78, QHCA_WC_SUCCESS, QHCA_WC_RDMA_READ);
    assert_eq!(
        h.qt.memread(rd, 2 * PAGE as usize),
        data[0x80..0x80 + 2 * PAGE as usize]
    );
    l.b.post_recv(&mut h, 0x30, &[(iova + PAGE, 64, key)]);
    l.a.post_send(
        &mut h,
        &SendWr {
            wr_id: 0x31,
            opcode: QHCA_WR_SEND,
            flags: QHCA_WQE_SIGNALED,
            sges: vec![(src + len - 64, 64, k.dma_key)],
            ..Default::default()
        },
    );
    expect(&mut h, &mut l.acq, 0x31, QHCA_WC_SUCCESS, QHCA_WC_SEND);
    expect(&mut h, &mut l.bcq, 0x30, QHCA_WC_SUCCESS, QHCA_WC_RECV);
    assert_eq!(
        h.qt.memread(pages[1] + 0x100, 64),
        data[len as usize - 64..],
        "received"
    );

    // One byte past the end, and the block's other keys, are refused.
    for (what, va, rkey) in [
        ("past the end", iova + len - 8, key),
        ("the first key", iova, base),
        ("the next tag", iova, inc_key(key)),
    ] {
        l.a.post_send(&mut h, &SendWr::write(src, 16, k.dma_key, va, rkey));
        let c = l.acq.wait(&mut h);
        assert_eq!(c.status as u32, QHCA_WC_REM_ACCESS_ERR, "{what}: {c:?}");
        l.reconnect(&mut h, &p, 0x300);
    }

    // LOCAL_INV by that key: the key stops working.
    l.b.post_send(&mut h, &local_inv(0x40, QHCA_WQE_SIGNALED, key));
    expect(&mut h, &mut l.bcq, 0x40, QHCA_WC_SUCCESS, QHCA_WC_LOCAL_INV);
    l.a.post_send(&mut h, &SendWr::write(src, 16, k.dma_key, iova, key));
    expect(
        &mut h,
        &mut l.acq,
        0x77,
        QHCA_WC_REM_ACCESS_ERR,
        QHCA_WC_RDMA_WRITE,
    );
    l.reconnect(&mut h, &p, 0x400);

    // Registered again with the next tag, smaller, read-only: only that holds.
    let (pages2, list2) = scattered(&mut h, &mut k, 1, 0);
    let key2 = inc_key(key);
    let r2 = RegMr {
        iova: 0x5000,
        length: 512,
        pages_addr: list2,
        key: key2,
        access: QHCA_ACCESS_REMOTE_READ,
    };
    post_reg(&mut h, &mut l.b, &r2, 0x11);
    expect(&mut h, &mut l.bcq, 0x11, QHCA_WC_SUCCESS, QHCA_WC_REG_MR);
    h.qt.memwrite(pages2[0], &data[..512]);
    let read = SendWr {
        remote_addr: 0x5000,
        rkey: key2,
        sges: vec![(rd, 512, k.dma_key)],
        ..read
    };
    l.a.post_send(&mut h, &read);
    expect(&mut h, &mut l.acq, 0x78, QHCA_WC_SUCCESS, QHCA_WC_RDMA_READ);
    assert_eq!(h.qt.memread(rd, 512), data[..512]);
    l.a.post_send(&mut h, &SendWr::write(src, 16, k.dma_key, 0x5000, key2));
    expect(
        &mut h,
        &mut l.acq,
        0x77,
        QHCA_WC_REM_ACCESS_ERR,
        QHCA_WC_RDMA_WRITE,
    );
    l.reconnect(&mut h, &p, 0x500);

    // A SEND_WITH_INV from the peer invalidates it as well; the CQE says which key.
    let rbuf = k.m.alloc(&mut h, 64);
    l.b.post_recv(&mut h, 0x50, &[(rbuf, 64, k.dma_key)]);
    l.a.post_send(
        &mut h,
        &send_inv(0x51, QHCA_WQE_SIGNALED, key2, vec![(src, 8, k.dma_key)]),
    );
    expect(&mut h, &mut l.acq, 0x51, QHCA_WC_SUCCESS, QHCA_WC_SEND);
    let c = expect(&mut h, &mut l.bcq, 0x50, QHCA_WC_SUCCESS, QHCA_WC_RECV);
    assert_ne!(c.flags as u32 & QHCA_CQE_WITH_INV, 0, "CQE {c:?}");
    assert_eq!(c.imm, key2, "the invalidated key");
    l.a.post_send(&mut h, &read);
    expect(
        &mut h,
        &mut l.acq,
        0x78,
        QHCA_WC_REM_ACCESS_ERR,
        QHCA_WC_RDMA_READ,
    );
    l.reconnect(&mut h, &p, 0x600);

    // Invalidating an invalid region by its key is no error; by another key it is.
    l.b.post_send(&mut h, &local_inv(0x41, QHCA_WQE_SIGNALED, key2));
    expect(&mut h, &mut l.bcq, 0x41, QHCA_WC_SUCCESS, QHCA_WC_LOCAL_INV);
    l.b.post_send(&mut h, &local_inv(0x42, QHCA_WQE_SIGNALED, key));
    expect(
        &mut h,
        &mut l.bcq,
        0x42,
        QHCA_WC_LOC_QP_OP_ERR,
        QHCA_WC_LOCAL_INV,
    );
    l.reconnect(&mut h, &p, 0x700);
    // A SEND_WITH_INV of a key no region has: a remote invalid request on both sides.
    l.b.post_recv(&mut h, 0x52, &[(rbuf, 64, k.dma_key)]);
    l.a.post_send(
        &mut h,
        &send_inv(0x53, QHCA_WQE_SIGNALED, key, vec![(src, 8, k.dma_key)]),
    );
    expect(
        &mut h,
        &mut l.acq,
        0x53,
        QHCA_WC_REM_INV_REQ_ERR,
        QHCA_WC_SEND,
    );
    expect(
        &mut h,
        &mut l.bcq,
        0x52,
        QHCA_WC_REM_INV_REQ_ERR,
        QHCA_WC_RECV,
    );

    // Deregistered while valid: its keys name nothing.
    l.reconnect(&mut h, &p, 0x800);
    let r3 = RegMr {
        key: inc_key(key2),
        ..r2
    };
    post_reg(&mut h, &mut l.b, &r3, 0x12);
    expect(&mut h, &mut l.bcq, 0x12, QHCA_WC_SUCCESS, QHCA_WC_REG_MR);
    assert_eq!(dereg(&mut h, k.uar, base), QHCA_CMD_OK);
    l.a.post_send(
        &mut h,
        &SendWr {
            rkey: r3.key,
            ..read
        },
    );
    expect(
        &mut h,
        &mut l.acq,
        0x78,
        QHCA_WC_REM_ACCESS_ERR,
        QHCA_WC_RDMA_READ,
    );
}

#[test]
fn a_bad_registration_completes_in_error_and_changes_nothing() {
    let (mut h, mut k) = start();
    let p = ConnParams::default();
    let base = alloc_fast(&mut h, &k, 4);
    let (_, list) = scattered(&mut h, &mut k, 4, 0);
    let odd = {
        let pages = [k.m.alloc(&mut h, 3 * PAGE).next_multiple_of(PAGE) + 8];
        flat_list(&mut h, &mut k, &pages)
    };
    let (st, other_pd) = alloc_pd(&mut h, k.uar);
    assert_eq!(st, QHCA_CMD_OK);
    let other = {
        let (st, key) = reg(&mut h, k.uar, other_pd, 0, 0, FAST, 4);
        assert_eq!(st, QHCA_CMD_OK);
        key
    };
    let (st, phys) = reg(
        &mut h,
        k.uar,
        k.pdn,
        0,
        u64::MAX,
        LW | QHCA_ACCESS_PHYSICAL,
        0,
    );
    assert_eq!(st, QHCA_CMD_OK);
    let good = RegMr {
        iova: 0x10000,
        length: 4 * PAGE,
        pages_addr: list,
        key: inc_key(base),
        access: RW,
    };
    let bad: [(&str, RegMr); 11] = [
        (
            "another PD's region",
            RegMr {
                key: other | 1,
                ..good
            },
        ),
        (
            "a region that is not a fast one",
            RegMr { key: phys, ..good },
        ),
        (
            "a window's key",
            RegMr {
                key: QHCA_MW_KEY_FLAG | 0x100,
                ..good
            },
        ),
        ("length 0", RegMr { length: 0, ..good }),
        (
            "a wrapping range",
            RegMr {
                iova: u64::MAX - 10,
                length: 100,
                ..good
            },
        ),
        (
            "more pages than it has",
            RegMr {
                length: 4 * PAGE + 1,
                ..good
            },
        ),
        (
            "so with an offset",
            RegMr {
                iova: 0x10001,
                ..good
            },
        ),
        (
            "remote write without local write",
            RegMr {
                access: QHCA_ACCESS_REMOTE_WRITE,
                ..good
            },
        ),
        (
            "an unknown right",
            RegMr {
                access: LW | QHCA_ACCESS_MW_BIND,
                ..good
            },
        ),
        (
            "an unaligned page",
            RegMr {
                length: 16,
                pages_addr: odd,
                ..good
            },
        ),
        (
            "an unreachable list",
            RegMr {
                pages_addr: 1 << 50,
                ..good
            },
        ),
    ];
    for (what, r) in bad {
        let mut l = Link::new(&mut h, &mut k.m, k.uar, k.pdn, &p);
        post_reg(&mut h, &mut l.b, &r, 0x20);
        let c = l.bcq.wait(&mut h);
        assert_eq!(
            (c.wr_id, c.status as u32),
            (0x20, QHCA_WC_LOC_QP_OP_ERR),
            "{what}: {c:?}"
        );
        // Nothing changed: no key of the block reaches memory, and the region takes the
        // good registration on a fresh QP.
        let buf = k.m.alloc(&mut h, 64);
        l.reconnect(&mut h, &p, 0x100);
        l.a.post_send(&mut h, &SendWr::write(buf, 8, k.dma_key, 0x10000, r.key));
        let c = l.acq.wait(&mut h);
        assert_eq!(c.status as u32, QHCA_WC_REM_ACCESS_ERR, "{what}: {c:?}");
        take_events(&mut h);
    }
    // The region is still invalid and free: the good one works now, and again only after an
    // invalidation.
    let mut l = Link::new(&mut h, &mut k.m, k.uar, k.pdn, &p);
    post_reg(&mut h, &mut l.b, &good, 0x21);
    expect(&mut h, &mut l.bcq, 0x21, QHCA_WC_SUCCESS, QHCA_WC_REG_MR);
    post_reg(
        &mut h,
        &mut l.b,
        &RegMr {
            key: inc_key(good.key),
            ..good
        },
        0x22,
    );
    expect(
        &mut h,
        &mut l.bcq,
        0x22,
        QHCA_WC_LOC_QP_OP_ERR,
        QHCA_WC_REG_MR,
    );
    l.reconnect(&mut h, &p, 0x200);
    let buf = k.m.alloc(&mut h, 64);
    l.a.post_send(&mut h, &SendWr::write(buf, 8, k.dma_key, 0x10000, good.key));
    expect(
        &mut h,
        &mut l.acq,
        0x77,
        QHCA_WC_SUCCESS,
        QHCA_WC_RDMA_WRITE,
    );

    // A REG_MR runs in SQ order: behind a failing WQE it is flushed and did nothing.
    l.b.post_send(&mut h, &local_inv(0x43, QHCA_WQE_SIGNALED, good.key));
    expect(&mut h, &mut l.bcq, 0x43, QHCA_WC_SUCCESS, QHCA_WC_LOCAL_INV);
    l.b.post_send(
        &mut h,
        &SendWr::write(buf, 8, k.dma_key, 0x10000, 0x7777_7700),
    );
    post_reg(
        &mut h,
        &mut l.b,
        &RegMr {
            key: inc_key(good.key),
            ..good
        },
        0x23,
    );
    expect(
        &mut h,
        &mut l.bcq,
        0x77,
        QHCA_WC_REM_ACCESS_ERR,
        QHCA_WC_RDMA_WRITE,
    );
    let c = l.bcq.wait(&mut h);
    assert_eq!(
        (c.wr_id, c.status as u32),
        (0x23, QHCA_WC_WR_FLUSH_ERR),
        "{c:?}"
    );
    l.reconnect(&mut h, &p, 0x300);
    l.a.post_send(
        &mut h,
        &SendWr::write(buf, 8, k.dma_key, 0x10000, inc_key(good.key)),
    );
    expect(
        &mut h,
        &mut l.acq,
        0x77,
        QHCA_WC_REM_ACCESS_ERR,
        QHCA_WC_RDMA_WRITE,
    );
}
