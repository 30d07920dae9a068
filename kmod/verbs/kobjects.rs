// SPDX-License-Identifier: GPL-2.0

//! The kernel context's objects (see [`crate::kverbs`]): CQs and QPs whose rings are the
//! driver's own memory, the GSI QP, physical regions and fast-registration regions. The same commands as a user
//! context's, the same bookkeeping (each object's entry holds its ring memory until the device
//! forgot the object), and the same checks, less those that only guard user memory.

use super::{
    mr::{Mr, MrMem},
    position, RingMem, Verbs,
};
use crate::{
    cmdq::Cmd,
    kverbs::ring::KRing,
    limits::Pool,
    rdma::{CqEvents, QpEvents, SrqEvents},
    uapi,
};
use kernel::{prelude::*, sync::Arc};

impl Verbs<'_> {
    /// A kernel CQ of `2^log` entries in `ring`, whose events go to the core's CQ `route`: its
    /// number. Only in the kernel context.
    pub(crate) fn create_kernel_cq(
        &self,
        log: u32,
        ring: Arc<KRing>,
        route: CqEvents,
    ) -> Result<u32> {
        if !self.ctx.kernel
            || !(uapi::QHCA_CQ_MIN_LOG..=uapi::QHCA_CQ_MAX_LOG).contains(&log)
            || (1u32 << log) > self.dev.attr()?.max_cqe.max(2)
        {
            return Err(EINVAL);
        }
        self.create_cq_in(log, RingMem::Kernel(ring), route)
    }

    /// A kernel QP as `a` describes it (RC, UD or GSI; its buffer fields ignored) with its rings
    /// in `ring`, whose events go to the core's QP `route`: its number. Only in the kernel
    /// context.
    pub(crate) fn create_kernel_qp(
        &self,
        a: &uapi::qhca_ioc_create_qp,
        ring: Arc<KRing>,
        route: QpEvents,
    ) -> Result<u32> {
        if !self.ctx.kernel
            || !matches!(
                a.type_,
                uapi::QHCA_QPT_RC | uapi::QHCA_QPT_UD | uapi::QHCA_QPT_GSI | uapi::QHCA_QPT_ETH
            )
        {
            return Err(EINVAL);
        }
        let (sq, rq) = self.check_qp(a)?;
        if (ring.npages() as u64) << uapi::QHCA_PAGE_SHIFT < super::page_align(sq) + rq {
            return Err(EINVAL);
        }
        self.create_qp_in(a, RingMem::Kernel(ring), route)
    }

    /// A kernel SRQ of `2^log` slots of `2^stride_log` bytes holding `max_sge` scatter entries
    /// each, in PD `pdn`, with its slots and record in `ring`, whose limit events go to the
    /// core's SRQ `route`: its number. Only in the kernel context.
    pub(crate) fn create_kernel_srq(
        &self,
        pdn: u32,
        log: u8,
        stride_log: u8,
        max_sge: u16,
        ring: Arc<KRing>,
        route: SrqEvents,
    ) -> Result<u32> {
        if !self.ctx.kernel {
            return Err(EINVAL);
        }
        let bytes = self.check_srq(log, stride_log, max_sge)?;
        if ((ring.npages() as u64) << uapi::QHCA_PAGE_SHIFT) < bytes {
            return Err(EINVAL);
        }
        self.create_srq_in(pdn, log, stride_log, max_sge, RingMem::Kernel(ring), route)
    }

    /// A physical region of PD `pdn` over every DMA address, with `access` (`QHCA_ACCESS_*`
    /// rights): its key. Only in the kernel context.
    pub(crate) fn reg_phys_mr(&self, pdn: u32, access: u32) -> Result<u32> {
        let writes = uapi::QHCA_ACCESS_REMOTE_WRITE | uapi::QHCA_ACCESS_REMOTE_ATOMIC;
        if !self.ctx.kernel
            || access & !uapi::QHCA_ACCESS_ALL != 0
            || (access & writes != 0 && access & uapi::QHCA_ACCESS_LOCAL_WRITE == 0)
        {
            return Err(EINVAL);
        }
        let args = uapi::qhca_cmd_reg_mr {
            uar: self.uar.to_le(),
            pdn: pdn.to_le(),
            iova: 0,
            length: u64::MAX.to_le(),
            access: (access | uapi::QHCA_ACCESS_PHYSICAL).to_le(),
            npages: 0,
            pages_addr: 0,
        };
        self.reg_kernel_mr(pdn, &args, MrMem::Physical)
    }

    /// A fast-registration region of PD `pdn` that maps up to `max_pages` pages through the
    /// page list `list` (the ABI header's "Fast registration"): its first key. Only in the
    /// kernel context.
    pub(crate) fn alloc_fast_mr(&self, pdn: u32, max_pages: u32, list: Arc<KRing>) -> Result<u32> {
        if !self.ctx.kernel || max_pages == 0 || max_pages > uapi::QHCA_FAST_REG_MAX_PAGES {
            return Err(EINVAL);
        }
        let args = uapi::qhca_cmd_reg_mr {
            uar: self.uar.to_le(),
            pdn: pdn.to_le(),
            access: uapi::QHCA_ACCESS_FAST_REG.to_le(),
            npages: max_pages.to_le(),
            ..Default::default()
        };
        self.reg_kernel_mr(pdn, &args, MrMem::FastReg(list))
    }

    /// REG_MR `args` of a region of PD `pdn` with no pages of its own to register, whose
    /// memory (held as long as the device may use it) is `mem`: its key.
    fn reg_kernel_mr(&self, pdn: u32, args: &uapi::qhca_cmd_reg_mr, mem: MrMem) -> Result<u32> {
        self.locked(|_, objs| {
            position(&objs.pds, |&p| p == pdn)?;
            objs.mrs.reserve(1, GFP_KERNEL)?;
            let cmd = Cmd::new(uapi::QHCA_CMD_REG_MR).input_struct(args);
            let key = self.charged(Pool::Mrs, || self.create(cmd, "key"))?;
            objs.mrs.push(Mr { key, pdn, mem }, GFP_KERNEL)?;
            Ok(key)
        })
    }
}
