// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! REVOKE_PAGES: pages of a pinned region the device never reaches again (the driver revokes
//! the pages of a watched region whose mapping changed), while the rest of the region works on.

use qhca_qtest::abi::*;
use qhca_qtest::verbs::*;
use qhca_qtest::Hca;

const ALL: u32 = QHCA_ACCESS_LOCAL_WRITE
    | QHCA_ACCESS_REMOTE_WRITE
    | QHCA_ACCESS_REMOTE_READ
    | QHCA_ACCESS_REMOTE_ATOMIC;

fn start() -> (Hca, Pair) {
    let mut h = Hca::start("num-uars=8");
    h.bring_up(5, 6);
    let p = Pair::new(&mut h, &ConnParams::default());
    (h, p)
}

fn revoke(h: &mut Hca, uar: u32, key: u32, first: u64, count: u64) -> u32 {
    obj_cmd(
        h,
        QHCA_CMD_REVOKE_PAGES,
        [uar as u64, key as u64, first, count, 0],
    )
    .0
}

#[test]
fn revoke_pages_is_checked() {
    let (mut h, mut p) = start();
    let (_, key) = p.buf(&mut h, 3 * PAGE, 0, ALL);
    for (first, count) in [(0, 0), (3, 1), (2, 2), (1, u64::MAX)] {
        assert_eq!(
            revoke(&mut h, p.uar, key, first, count),
            QHCA_CMD_BAD_PARAM,
            "first {first} count {count}"
        );
    }
    let (st, _) = obj_cmd(
        &mut h,
        QHCA_CMD_REVOKE_PAGES,
        [p.uar as u64, key as u64, 0, 1, 1],
    );
    assert_eq!(st, QHCA_CMD_BAD_PARAM, "in[4] is reserved");
    assert_eq!(
        revoke(&mut h, p.uar, key + 1, 0, 1),
        QHCA_CMD_BAD_RESOURCE,
        "a key that does not exist"
    );
    let (st, other) = h.alloc_uar();
    assert_eq!(st, QHCA_CMD_OK);
    assert_eq!(
        revoke(&mut h, other as u32, key, 0, 1),
        QHCA_CMD_BAD_RESOURCE,
        "another context's key"
    );
    let b = reg_mr_bytes(
        p.uar,
        p.pdn,
        0x7f00_0000_0000,
        PAGE,
        ALL | QHCA_ACCESS_ON_DEMAND,
        0,
        0,
    );
    let (st, odp) = obj_cmd(&mut h, QHCA_CMD_REG_MR, in_words(&b));
    assert_eq!(st, QHCA_CMD_OK);
    assert_eq!(
        revoke(&mut h, p.uar, odp as u32, 0, 1),
        QHCA_CMD_BAD_PARAM,
        "an on-demand region"
    );
    assert_eq!(revoke(&mut h, p.uar, key, 0, 3), QHCA_CMD_OK);
    assert_eq!(
        revoke(&mut h, p.uar, key, 1, 1),
        QHCA_CMD_OK,
        "again: harmless"
    );
    assert_eq!(destroy(&mut h, QHCA_CMD_DEREG_MR, p.uar, key), QHCA_CMD_OK);
}

#[test]
fn revoked_pages_fail_and_the_rest_of_the_region_works() {
    let (mut h, mut p) = start();
    let (src, lkey) = p.buf(&mut h, 3 * PAGE, 0, ALL);
    let data = pattern(3 * PAGE as usize, 0x2c);
    h.qt.memwrite(src, &data);
    let (dst, rkey) = p.buf(&mut h, 3 * PAGE, 0, ALL);

    // The source's middle page goes: its neighbours still send, a request touching it fails
    // and sends nothing.
    assert_eq!(revoke(&mut h, p.uar, lkey, 1, 1), QHCA_CMD_OK);
    for pg in [0, 2] {
        let off = pg * PAGE;
        p.a.post_send(
            &mut h,
            &SendWr::write(src + off, 256, lkey, dst + off, rkey),
        );
        assert_eq!(
            p.scq.wait(&mut h).status,
            QHCA_WC_SUCCESS as u8,
            "page {pg}"
        );
        assert_eq!(
            h.qt.memread(dst + off, 256),
            data[off as usize..off as usize + 256]
        );
    }
    p.a.post_send(
        &mut h,
        &SendWr::write(src + PAGE + 8, 64, lkey, dst + PAGE, rkey),
    );
    assert_eq!(
        p.scq.wait(&mut h).status,
        QHCA_WC_LOC_ACCESS_ERR as u8,
        "gathering from a revoked page"
    );
    assert_eq!(h.qt.memread(dst + PAGE, 64), vec![0; 64]);
    p.reconnect(&mut h, &ConnParams::default(), 0x400);

    // The target's first page goes: a WRITE into it is refused and leaves it alone, one into
    // its last page lands.
    h.qt.memset(dst, 3 * PAGE as usize, 0xee);
    assert_eq!(revoke(&mut h, p.uar, rkey, 0, 1), QHCA_CMD_OK);
    p.a.post_send(
        &mut h,
        &SendWr::write(src + 2 * PAGE, 64, lkey, dst + 2 * PAGE, rkey),
    );
    assert_eq!(p.scq.wait(&mut h).status, QHCA_WC_SUCCESS as u8);
    p.a.post_send(&mut h, &SendWr::write(src, 64, lkey, dst + 100, rkey));
    assert_eq!(
        p.scq.wait(&mut h).status,
        QHCA_WC_REM_OP_ERR as u8,
        "writing a revoked page: the responder NAKs"
    );
    assert_eq!(h.qt.memread(dst, PAGE as usize), vec![0xee; PAGE as usize]);
    assert_eq!(
        h.qt.memread(dst + 2 * PAGE, 64),
        data[2 * PAGE as usize..2 * PAGE as usize + 64]
    );
}
