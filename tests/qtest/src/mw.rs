// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Memory windows from the test side: ALLOC_MW/DEALLOC_MW, the BIND_MW WQE (a
//! `struct qhca_wqe_bind` at offset 32 of a send WQE), LOCAL_INV and SEND_WITH_INV WQEs (the
//! key in the control segment's `imm_data`), and [`Link`]: more connected QPs in a PD.

use core::mem::offset_of;

use qhca_uapi::*;

use crate::hca::Hca;
use crate::verbs::{
    bring_to_rts, create_cq, create_qp, obj_cmd, reconnect, ConnParams, Cq, Mem, Qp, QpCaps, SendWr,
};

/// Where the bind segment sits in a send WQE.
const BIND_OFFSET: usize = 32;

const _: () = {
    assert!(size_of::<qhca_wqe_bind>() == 32);
    assert!(offset_of!(qhca_wqe_bind, addr) == 0);
    assert!(offset_of!(qhca_wqe_bind, length) == 8);
    assert!(offset_of!(qhca_wqe_bind, mw_key) == 16);
    assert!(offset_of!(qhca_wqe_bind, new_key) == 20);
    assert!(offset_of!(qhca_wqe_bind, mr_key) == 24);
    assert!(offset_of!(qhca_wqe_bind, access) == 28);
};

/// ALLOC_MW of a window of `ty` (`QHCA_MW_TYPE_*`, or anything) in `pdn`: (status, key).
pub fn alloc_mw(h: &mut Hca, uar: u32, pdn: u32, ty: u32) -> (u32, u32) {
    let (st, d) = obj_cmd(
        h,
        QHCA_CMD_ALLOC_MW,
        [uar as u64, pdn as u64, ty as u64, 0, 0],
    );
    (st, d as u32)
}

/// DEALLOC_MW: status.
pub fn dealloc_mw(h: &mut Hca, uar: u32, key: u32) -> u32 {
    obj_cmd(h, QHCA_CMD_DEALLOC_MW, [uar as u64, key as u64, 0, 0, 0]).0
}

/// The key with the next tag (`ibv_inc_rkey`).
pub fn inc_key(key: u32) -> u32 {
    let tag_mask = (1u32 << QHCA_KEY_TAG_BITS) - 1;
    (key & !tag_mask) | (key.wrapping_add(1) & tag_mask)
}

/// `struct qhca_wqe_bind`, host side.
#[derive(Clone, Copy, Debug, Default)]
pub struct Bind {
    pub addr: u64,
    pub length: u64,
    pub mw_key: u32,
    pub new_key: u32,
    pub mr_key: u32,
    pub access: u32,
}

impl Bind {
    /// A BIND_MW send WQE: the control segment, then the bind segment at offset 32.
    pub fn wqe(&self, wr_id: u64, flags: u32) -> Vec<u8> {
        let mut b = SendWr {
            wr_id,
            opcode: QHCA_WR_BIND_MW,
            flags,
            ..Default::default()
        }
        .encode();
        assert_eq!(b.len(), 64);
        let s = &mut b[BIND_OFFSET..];
        s[0..8].copy_from_slice(&self.addr.to_le_bytes());
        s[8..16].copy_from_slice(&self.length.to_le_bytes());
        s[16..20].copy_from_slice(&self.mw_key.to_le_bytes());
        s[20..24].copy_from_slice(&self.new_key.to_le_bytes());
        s[24..28].copy_from_slice(&self.mr_key.to_le_bytes());
        s[28..32].copy_from_slice(&self.access.to_le_bytes());
        b
    }
}

/// A LOCAL_INV WQE of `key`.
pub fn local_inv(wr_id: u64, flags: u32, key: u32) -> SendWr {
    SendWr {
        wr_id,
        opcode: QHCA_WR_LOCAL_INV,
        flags,
        imm: key,
        ..Default::default()
    }
}

/// A SEND_WITH_INV WQE of `sges` asking the peer to invalidate `key`.
pub fn send_inv(wr_id: u64, flags: u32, key: u32, sges: Vec<(u64, u32, u32)>) -> SendWr {
    SendWr {
        wr_id,
        opcode: QHCA_WR_SEND_WITH_INV,
        flags,
        imm: key,
        sges,
        ..Default::default()
    }
}

impl Qp {
    /// Writes a BIND_MW WQE at the SQ producer index (without ringing).
    pub fn write_bind(&mut self, h: &mut Hca, wr_id: u64, flags: u32, b: &Bind) {
        self.write_send_raw(h, &b.wqe(wr_id, flags));
    }

    /// Posts a BIND_MW WQE and rings.
    pub fn post_bind(&mut self, h: &mut Hca, wr_id: u64, flags: u32, b: &Bind) {
        self.write_bind(h, wr_id, flags, b);
        self.ring_sq(h);
    }
}

/// Two more QPs of a PD connected to each other, each with a CQ of its own (for sends and
/// receives): `a` completes on `acq`, `b` on `bcq`.
pub struct Link {
    pub a: Qp,
    pub acq: Cq,
    pub b: Qp,
    pub bcq: Cq,
}

impl Link {
    pub fn new(h: &mut Hca, m: &mut Mem, uar: u32, pdn: u32, p: &ConnParams) -> Link {
        let caps = QpCaps::default();
        let (st, acq) = create_cq(h, m, uar, 6);
        assert_eq!(st, QHCA_CMD_OK, "CREATE_CQ");
        let (st, bcq) = create_cq(h, m, uar, 6);
        assert_eq!(st, QHCA_CMD_OK, "CREATE_CQ");
        let (st, a) = create_qp(h, m, uar, pdn, acq.cqn, acq.cqn, &caps);
        assert_eq!(st, QHCA_CMD_OK, "CREATE_QP");
        let (st, b) = create_qp(h, m, uar, pdn, bcq.cqn, bcq.cqn, &caps);
        assert_eq!(st, QHCA_CMD_OK, "CREATE_QP");
        bring_to_rts(h, &a, b.qpn, 0x200, p);
        bring_to_rts(h, &b, a.qpn, 0x200, p);
        Link { a, acq, b, bcq }
    }
    /// Both QPs back to RTS after an error (same QPNs), with empty queues and CQs.
    pub fn reconnect(&mut self, h: &mut Hca, p: &ConnParams, psn: u32) {
        reconnect(
            h,
            [&mut self.a, &mut self.b],
            [&mut self.acq, &mut self.bcq],
            p,
            psn,
        );
    }
}
