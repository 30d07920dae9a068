// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Unreliable datagram from the test side: CREATE_AH/DESTROY_AH, UD QPs (CREATE_QP type
//! `QHCA_QPT_UD`, brought to RTS with a Q_Key), the UD send WQE (a `struct qhca_wqe_ud` at
//! offset 32 of a send WQE), the GRH at the start of a receive buffer, and [`Ud`]: a context
//! with a PD and two CQs to hang UD QPs on.

use core::mem::offset_of;

use qhca_uapi::*;

use crate::hca::Hca;
pub use crate::port::{port_gid, AhAttr};
use crate::verbs::{
    alloc_pd, create_cq, create_qp_typed, in_words, modify_qp, obj_cmd, reg_mr, Cq, Mem, Qp,
    QpAttr, QpCaps, SendWr,
};

/// Where the UD segment sits in a send WQE.
const UD_OFFSET: usize = 32;

const _: () = {
    assert!(size_of::<qhca_wqe_ud>() == 16);
    assert!(offset_of!(qhca_wqe_ud, ah) == 0);
    assert!(offset_of!(qhca_wqe_ud, remote_qpn) == 4);
    assert!(offset_of!(qhca_wqe_ud, remote_qkey) == 8);
    assert!(size_of::<qhca_grh>() == QHCA_GRH_SIZE as usize);
};

pub const GRH: usize = QHCA_GRH_SIZE as usize;

/// `struct qhca_cmd_create_ah` as bytes.
pub fn create_ah_bytes(uar: u32, pdn: u32, a: &AhAttr) -> [u8; 40] {
    let mut b = [0u8; 40];
    b[0..4].copy_from_slice(&uar.to_le_bytes());
    b[4..8].copy_from_slice(&pdn.to_le_bytes());
    b[8..40].copy_from_slice(&a.encode());
    b
}

/// CREATE_AH: (status, AH number).
pub fn create_ah(h: &mut Hca, uar: u32, pdn: u32, a: &AhAttr) -> (u32, u32) {
    let (st, d) = obj_cmd(
        h,
        QHCA_CMD_CREATE_AH,
        in_words(&create_ah_bytes(uar, pdn, a)),
    );
    (st, d as u32)
}

/// DESTROY_AH: status.
pub fn destroy_ah(h: &mut Hca, uar: u32, ah: u32) -> u32 {
    obj_cmd(h, QHCA_CMD_DESTROY_AH, [uar as u64, ah as u64, 0, 0, 0]).0
}

/// MODIFY_QP to `state` with `mask` (STATE added) and `qkey`/`sq_psn`: status.
pub fn ud_modify(h: &mut Hca, qp: &Qp, state: u32, mask: u32, qkey: u32, sq_psn: u32) -> u32 {
    modify_qp(
        h,
        qp.uar,
        qp.qpn,
        &QpAttr {
            mask: mask | QHCA_QP_ATTR_STATE,
            state: state as u8,
            qkey,
            sq_psn,
            ..Default::default()
        },
    )
}

/// RESET -> INIT (Q_Key `qkey`) -> RTR -> RTS (`sq_psn`), each asserted.
pub fn ud_to_rts(h: &mut Hca, qp: &Qp, qkey: u32, sq_psn: u32) {
    let steps = [
        (QHCA_QPS_INIT, QHCA_QP_ATTR_QKEY, qkey, 0),
        (QHCA_QPS_RTR, 0, 0, 0),
        (QHCA_QPS_RTS, QHCA_QP_ATTR_SQ_PSN, 0, sq_psn),
    ];
    for (state, mask, k, psn) in steps {
        let st = ud_modify(h, qp, state, mask, k, psn);
        assert_eq!(st, QHCA_CMD_OK, "UD QP {:#x} to state {state}", qp.qpn);
    }
}

/// A UD send WQE: a [`SendWr`] (opcode, flags, data) plus where it goes.
#[derive(Clone, Debug, Default)]
pub struct UdWr {
    pub wr: SendWr,
    pub ah: u32,
    pub remote_qpn: u32,
    pub qkey: u32,
}

impl UdWr {
    /// A signalled SEND (`wr_id`) of `sges` to `remote_qpn` through `ah` with `qkey`.
    pub fn send(wr_id: u64, ah: u32, remote_qpn: u32, qkey: u32, sges: &[(u64, u32, u32)]) -> UdWr {
        UdWr {
            wr: SendWr {
                wr_id,
                opcode: QHCA_WR_SEND,
                flags: QHCA_WQE_SIGNALED,
                sges: sges.to_vec(),
                ..Default::default()
            },
            ah,
            remote_qpn,
            qkey,
        }
    }

    /// The WQE with `av` carried in it (`QHCA_WQE_AV`, kernel contexts): no AH, the address
    /// vector at `QHCA_WQE_DATA_OFFSET`, the data segments from `QHCA_WQE_AV_DATA_OFFSET`.
    pub fn encode_av(&self, av: &crate::port::AhAttr) -> Vec<u8> {
        let plain = self.encode();
        let data = QHCA_WQE_DATA_OFFSET as usize;
        let mut b = plain[..data].to_vec();
        b[9] |= QHCA_WQE_AV as u8;
        b[UD_OFFSET..UD_OFFSET + 4].fill(0);
        b.extend_from_slice(&av.encode());
        assert_eq!(b.len(), QHCA_WQE_AV_DATA_OFFSET as usize);
        b.extend_from_slice(&plain[data..]);
        b
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut b = self.wr.encode();
        b[UD_OFFSET..QHCA_WQE_DATA_OFFSET as usize].fill(0);
        b[UD_OFFSET..UD_OFFSET + 4].copy_from_slice(&self.ah.to_le_bytes());
        b[UD_OFFSET + 4..UD_OFFSET + 8].copy_from_slice(&self.remote_qpn.to_le_bytes());
        b[UD_OFFSET + 8..UD_OFFSET + 12].copy_from_slice(&self.qkey.to_le_bytes());
        b
    }
}

impl Qp {
    pub fn post_ud(&mut self, h: &mut Hca, wr: &UdWr) {
        self.write_send_raw(h, &wr.encode());
        self.ring_sq(h);
    }
}

/// `struct qhca_grh`, decoded (its fields are big-endian).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grh {
    pub version: u8,
    pub traffic_class: u8,
    pub flow_label: u32,
    pub paylen: u16,
    pub next_hdr: u8,
    pub hop_limit: u8,
    pub sgid: [u8; 16],
    pub dgid: [u8; 16],
}

impl Grh {
    pub fn parse(b: &[u8]) -> Grh {
        let vtf = u32::from_be_bytes(b[0..4].try_into().unwrap());
        Grh {
            version: (vtf >> 28) as u8,
            traffic_class: (vtf >> 20) as u8,
            flow_label: vtf & 0xf_ffff,
            paylen: u16::from_be_bytes([b[4], b[5]]),
            next_hdr: b[6],
            hop_limit: b[7],
            sgid: b[8..24].try_into().unwrap(),
            dgid: b[24..40].try_into().unwrap(),
        }
    }
}

/// One context with a PD, a send CQ and a receive CQ that its UD QPs share.
pub struct Ud {
    pub m: Mem,
    pub uar: u32,
    pub pdn: u32,
    pub scq: Cq,
    pub rcq: Cq,
}

impl Ud {
    pub fn new(h: &mut Hca) -> Ud {
        Self::with_mem(h, Mem::default())
    }

    /// In a context of its own, allocating from `m` (another `Ud`'s, so that they do not
    /// overlap).
    pub fn with_mem(h: &mut Hca, mut m: Mem) -> Ud {
        let (st, uar) = h.alloc_uar();
        assert_eq!(st, QHCA_CMD_OK);
        let uar = uar as u32;
        let (st, pdn) = alloc_pd(h, uar);
        assert_eq!(st, QHCA_CMD_OK);
        let (st, scq) = create_cq(h, &mut m, uar, 9);
        assert_eq!(st, QHCA_CMD_OK);
        let (st, rcq) = create_cq(h, &mut m, uar, 9);
        assert_eq!(st, QHCA_CMD_OK);
        Ud {
            m,
            uar,
            pdn,
            scq,
            rcq,
        }
    }

    /// A UD QP with `caps`, not yet out of RESET.
    pub fn qp_reset(&mut self, h: &mut Hca, caps: &QpCaps) -> Qp {
        let (scqn, rcqn) = (self.scq.cqn, self.rcq.cqn);
        let (st, q) = create_qp_typed(
            h,
            &mut self.m,
            self.uar,
            self.pdn,
            scqn,
            rcqn,
            caps,
            QHCA_QPT_UD,
        );
        assert_eq!(st, QHCA_CMD_OK, "CREATE_QP (UD)");
        q
    }

    /// A UD QP in RTS with Q_Key `qkey` and default caps.
    pub fn qp(&mut self, h: &mut Hca, qkey: u32) -> Qp {
        self.qp_with(h, qkey, &QpCaps::default())
    }

    pub fn qp_with(&mut self, h: &mut Hca, qkey: u32, caps: &QpCaps) -> Qp {
        let q = self.qp_reset(h, caps);
        ud_to_rts(h, &q, qkey, 0);
        q
    }

    /// An AH in this context's PD: its number.
    pub fn ah(&mut self, h: &mut Hca, a: &AhAttr) -> u32 {
        let (st, ah) = create_ah(h, self.uar, self.pdn, a);
        assert_eq!(st, QHCA_CMD_OK, "CREATE_AH {a:?}");
        ah
    }

    /// A buffer of `len` bytes filled with `fill`, registered with local write: (addr, key).
    pub fn buf(&mut self, h: &mut Hca, len: u64, fill: u8) -> (u64, u32) {
        let a = self.m.alloc(h, len);
        h.qt.memset(a, len as usize, fill);
        let (st, key) = reg_mr(
            h,
            &mut self.m,
            self.uar,
            self.pdn,
            a,
            len,
            QHCA_ACCESS_LOCAL_WRITE,
        );
        assert_eq!(st, QHCA_CMD_OK, "REG_MR");
        (a, key)
    }
}
