// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! MODIFY_MR: a region's rights and PD change in place, under the same key, and the next
//! access through the key sees the change; the PDs' use counts follow it; malformed commands,
//! kernel-only rights and another context's PD are refused and change nothing.

use qhca_qtest::abi::*;
use qhca_qtest::verbs::*;
use qhca_qtest::Hca;

const RW: u32 = QHCA_ACCESS_LOCAL_WRITE | QHCA_ACCESS_REMOTE_WRITE | QHCA_ACCESS_REMOTE_READ;

fn modify(h: &mut Hca, uar: u32, key: u32, pdn: u64, access: u64) -> u32 {
    obj_cmd(
        h,
        QHCA_CMD_MODIFY_MR,
        [uar as u64, key as u64, pdn, access, 0],
    )
    .0
}

/// One signalled 8-byte WRITE from QP a through `rkey`: its completion status.
fn write(h: &mut Hca, p: &mut Pair, src: (u64, u32), dst: u64, rkey: u32, id: u64) -> u32 {
    p.a.post_send(
        h,
        &SendWr {
            wr_id: id,
            opcode: QHCA_WR_RDMA_WRITE,
            flags: QHCA_WQE_SIGNALED,
            remote_addr: dst,
            rkey,
            sges: vec![(src.0, 8, src.1)],
            ..Default::default()
        },
    );
    let c = p.scq.wait(h);
    assert_eq!(c.wr_id, id, "CQE {c:?}");
    c.status as u32
}

#[test]
fn rights_and_pd_change_in_place() {
    let mut h = Hca::start("num-uars=8");
    h.bring_up(5, 6);
    let mut p = Pair::new(&mut h, &ConnParams::default());
    let src = p.buf(&mut h, 4096, 7, QHCA_ACCESS_LOCAL_WRITE);
    let (dst, key) = p.buf(&mut h, 4096, 0, RW);
    let uar = p.uar;
    assert_eq!(write(&mut h, &mut p, src, dst, key, 1), QHCA_WC_SUCCESS);

    // Remote write taken away: the same key now refuses a WRITE.
    let ro = QHCA_ACCESS_LOCAL_WRITE | QHCA_ACCESS_REMOTE_READ;
    assert_eq!(
        modify(&mut h, uar, key, p.pdn as u64, ro as u64),
        QHCA_CMD_OK
    );
    assert_eq!(
        write(&mut h, &mut p, src, dst, key, 2),
        QHCA_WC_REM_ACCESS_ERR
    );
    p.reconnect(&mut h, &ConnParams::default(), 0x2000);
    // And given back.
    assert_eq!(
        modify(&mut h, uar, key, p.pdn as u64, RW as u64),
        QHCA_CMD_OK
    );
    assert_eq!(write(&mut h, &mut p, src, dst, key, 3), QHCA_WC_SUCCESS);

    // Another PD: the pair's QPs (of the old one) can no longer use it, and the new PD is
    // busy while the region is in it.
    let (st, pd2) = alloc_pd(&mut h, uar);
    assert_eq!(st, QHCA_CMD_OK);
    assert_eq!(modify(&mut h, uar, key, pd2 as u64, RW as u64), QHCA_CMD_OK);
    assert_eq!(
        write(&mut h, &mut p, src, dst, key, 4),
        QHCA_WC_REM_ACCESS_ERR
    );
    p.reconnect(&mut h, &ConnParams::default(), 0x3000);
    assert_eq!(
        destroy(&mut h, QHCA_CMD_DEALLOC_PD, uar, pd2),
        QHCA_CMD_BAD_STATE
    );
    assert_eq!(
        modify(&mut h, uar, key, p.pdn as u64, RW as u64),
        QHCA_CMD_OK
    );
    assert_eq!(destroy(&mut h, QHCA_CMD_DEALLOC_PD, uar, pd2), QHCA_CMD_OK);
    assert_eq!(write(&mut h, &mut p, src, dst, key, 5), QHCA_WC_SUCCESS);
    assert_eq!(h.qt.memread(dst, 8), vec![7u8; 8]);
}

#[test]
fn refusals_change_nothing() {
    let mut h = Hca::start("num-uars=8");
    h.bring_up(5, 6);
    let mut p = Pair::new(&mut h, &ConnParams::default());
    let src = p.buf(&mut h, 4096, 9, QHCA_ACCESS_LOCAL_WRITE);
    let (dst, key) = p.buf(&mut h, 4096, 0, RW);
    let (uar, pdn) = (p.uar, p.pdn as u64);
    let (st, other) = h.alloc_uar();
    assert_eq!(st, QHCA_CMD_OK);
    let (st, other_pd) = alloc_pd(&mut h, other as u32);
    assert_eq!(st, QHCA_CMD_OK);

    let bad_access = [
        QHCA_ACCESS_REMOTE_WRITE as u64,
        (QHCA_ACCESS_REMOTE_ATOMIC | QHCA_ACCESS_REMOTE_READ) as u64,
        (RW | QHCA_ACCESS_ON_DEMAND) as u64,
        (RW | QHCA_ACCESS_PHYSICAL) as u64,
        (RW | QHCA_ACCESS_FAST_REG) as u64,
        1 << 40,
    ];
    for a in bad_access {
        assert_eq!(
            modify(&mut h, uar, key, pdn, a),
            QHCA_CMD_BAD_PARAM,
            "{a:#x}"
        );
    }
    for (u, k, d) in [
        (other as u32, key, pdn),
        (uar, key ^ 0x100, pdn),
        (uar, key, other_pd as u64),
        (uar, key, 1 << 32),
        (uar, key, 999),
    ] {
        assert_eq!(
            modify(&mut h, u, k, d, RW as u64),
            QHCA_CMD_BAD_RESOURCE,
            "uar {u} key {k:#x} pd {d}"
        );
    }
    let st = obj_cmd(
        &mut h,
        QHCA_CMD_MODIFY_MR,
        [uar as u64, key as u64, pdn, RW as u64, 1],
    )
    .0;
    assert_eq!(st, QHCA_CMD_BAD_PARAM, "in[4] not 0");
    // The region is as it was: writable through its key, the other PD free.
    assert_eq!(write(&mut h, &mut p, src, dst, key, 1), QHCA_WC_SUCCESS);
    assert_eq!(
        destroy(&mut h, QHCA_CMD_DEALLOC_PD, other as u32, other_pd),
        QHCA_CMD_OK
    );
    h.alive();
}
