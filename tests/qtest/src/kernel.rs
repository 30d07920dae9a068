// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The driver's own context as the tests set it up (`qhca-abi.h`, "Kernel verbs"): a kernel
//! context (`QHCA_UAR_KERNEL`) with a PD, a send and a receive CQ and a physical region over
//! every address, the way the kernel's local DMA key is one.

use crate::abi::*;
use crate::hca::status_name;
use crate::port::AhAttr;
use crate::ud::{create_ah, ud_to_rts};
use crate::verbs::*;
use crate::Hca;

/// ALLOC_UAR with `flags` in `in[0]`: (status, page).
pub fn alloc_uar_flags(h: &mut Hca, flags: u64) -> (u32, u64) {
    let mut c = h.cmd(QHCA_CMD_ALLOC_UAR);
    c.in_[0] = flags;
    let e = h.exec(&c);
    (e.status as u32, e.data[0])
}

/// REG_MR of a physical region over `[iova, iova + len)`: (status, key).
pub fn reg_phys(h: &mut Hca, uar: u32, pdn: u32, iova: u64, len: u64, access: u32) -> (u32, u32) {
    reg_mr_raw(h, uar, pdn, iova, len, access | QHCA_ACCESS_PHYSICAL, 0, 0)
}

/// A kernel context: its page, a PD, a send and a receive CQ, and `key`, a physical region of
/// the PD over every address with every right (the kernel's local DMA key). Its QPs get `caps`.
pub struct Kernel {
    pub m: Mem,
    pub uar: u32,
    pub pdn: u32,
    pub scq: Cq,
    pub rcq: Cq,
    pub key: u32,
    pub caps: QpCaps,
}

impl Kernel {
    /// A new kernel context whose QPs have the default sizes.
    pub fn new(h: &mut Hca, m: Mem) -> Kernel {
        Kernel::with_caps(h, m, QpCaps::default())
    }

    /// A new kernel context whose QPs have `caps`.
    pub fn with_caps(h: &mut Hca, mut m: Mem, caps: QpCaps) -> Kernel {
        let (st, uar) = alloc_uar_flags(h, QHCA_UAR_KERNEL as u64);
        assert_eq!(st, QHCA_CMD_OK, "ALLOC_UAR QHCA_UAR_KERNEL");
        let uar = uar as u32;
        let (st, pdn) = alloc_pd(h, uar);
        assert_eq!(st, QHCA_CMD_OK);
        let (st, scq) = create_cq(h, &mut m, uar, 8);
        assert_eq!(st, QHCA_CMD_OK);
        let (st, rcq) = create_cq(h, &mut m, uar, 8);
        assert_eq!(st, QHCA_CMD_OK);
        let (st, key) = reg_phys(h, uar, pdn, 0, u64::MAX, QHCA_ACCESS_ALL);
        assert_eq!(st, QHCA_CMD_OK, "the physical region over everything");
        Kernel {
            m,
            uar,
            pdn,
            scq,
            rcq,
            key,
            caps,
        }
    }

    /// CREATE_QP of type `ty` on the context's CQs: (status, QP).
    pub fn create(&mut self, h: &mut Hca, ty: u32) -> (u32, Qp) {
        let (uar, pdn, scqn, rcqn) = (self.uar, self.pdn, self.scq.cqn, self.rcq.cqn);
        create_qp_typed(h, &mut self.m, uar, pdn, scqn, rcqn, &self.caps, ty)
    }

    /// The GSI QP in RTS with QP1's Q_Key.
    pub fn gsi(&mut self, h: &mut Hca) -> Qp {
        let (st, q) = self.create(h, QHCA_QPT_GSI);
        assert_eq!(st, QHCA_CMD_OK, "CREATE_QP GSI: {}", status_name(st));
        assert_eq!(q.qpn, QHCA_GSI_QPN, "the GSI QP's number");
        ud_to_rts(h, &q, QHCA_GSI_QKEY, 0);
        q
    }

    /// `len` bytes of plain guest memory filled with `fill`: its address, which the physical
    /// key reaches as it is (no registration of its own).
    pub fn buf(&mut self, h: &mut Hca, len: u64, fill: u8) -> u64 {
        let a = self.m.alloc(h, len);
        h.qt.memset(a, len as usize, fill);
        a
    }

    /// CREATE_AH in the context's PD, which must succeed: the AH.
    pub fn ah(&mut self, h: &mut Hca, a: &AhAttr) -> u32 {
        let (st, ah) = create_ah(h, self.uar, self.pdn, a);
        assert_eq!(st, QHCA_CMD_OK, "CREATE_AH {a:?}");
        ah
    }
}
