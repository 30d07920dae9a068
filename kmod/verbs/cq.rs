// SPDX-License-Identifier: GPL-2.0

//! Completion queues: CREATE_CQ and RESIZE_CQ of a ring in the process's memory (a kernel
//! CQ's ring: [`super::kobjects`]); DESTROY_CQ goes through [`Verbs::destroy`], which refuses it
//! while a QP of the context completes into the CQ.

use super::{page_align, position, RingMem, Verbs};
use crate::{cmdq::Cmd, limits::Pool, pagelist::span_pages, rdma::CqEvents, shim::Umem, uapi};
use kernel::prelude::*;

/// A CQ: its number and its ring, kept until the device forgot the CQ (or moved it to another
/// ring).
pub(super) struct Cq {
    pub(super) cqn: u32,
    mem: RingMem,
}

impl Verbs<'_> {
    /// Checks a ring of `2^log` CQEs and the record at `buf_addr`, `buf_len` bytes, and pins
    /// it.
    ///
    /// # Errors
    ///
    /// `EINVAL` for a size the device does not take, an address not page aligned or a length
    /// other than the CQEs and the record rounded up to pages.
    fn pin_cq_ring(&self, log: u32, buf_addr: u64, buf_len: u64) -> Result<RingMem> {
        let bytes = page_align((u64::from(uapi::QHCA_CQE_SIZE) << log.min(31)) + 64);
        if !(uapi::QHCA_CQ_MIN_LOG..=uapi::QHCA_CQ_MAX_LOG).contains(&log)
            || (1u32 << log) > self.dev.attr()?.max_cqe.max(2)
            || buf_addr % u64::from(uapi::QHCA_PAGE_SIZE) != 0
            || buf_len != bytes
        {
            return Err(EINVAL);
        }
        span_pages(buf_addr, buf_len)?;
        Ok(RingMem::User(Umem::pin(buf_addr, buf_len, true)?))
    }

    /// A CQ as `a` describes it (its header, eventfd and output fields ignored), whose events
    /// go to the core's CQ `route`: its number.
    pub(crate) fn create_cq(&self, a: &uapi::qhca_ioc_create_cq, route: CqEvents) -> Result<u32> {
        let mem = self.pin_cq_ring(a.log_entries, a.buf_addr, a.buf_len)?;
        self.create_cq_in(a.log_entries, mem, route)
    }

    /// CREATE_CQ of `2^log` entries in `mem`, checked by the caller: its number.
    pub(super) fn create_cq_in(&self, log: u32, mut mem: RingMem, route: CqEvents) -> Result<u32> {
        self.locked(|bound, objs| {
            objs.cqs.reserve(1, GFP_KERNEL)?;
            self.ctx.reserve()?;
            let list = mem.page_list(bound)?;
            let args = uapi::qhca_cmd_create_cq {
                uar: self.uar.to_le(),
                log_entries: log.to_le(),
                npages: list.npages().to_le(),
                pages_addr: list.dma_address().to_le(),
                ..Default::default()
            };
            let cmd = Cmd::new(uapi::QHCA_CMD_CREATE_CQ).input_struct(&args);
            let cqn = self.charged(Pool::Cqs, || self.create(cmd, "cqn"))?;
            // Neither can fail: room was reserved above.
            self.ctx.add_cq(cqn, route)?;
            objs.cqs.push(Cq { cqn, mem }, GFP_KERNEL)?;
            Ok(cqn)
        })
    }

    /// RESIZE_CQ: CQ `cqn` of this context moves to a ring of `2^log` entries at `buf_addr`
    /// (checked as CREATE_CQ's), with the CQEs its owner has not taken; `moved` is told the new
    /// number of entries while the CQ cannot move again. The old ring is unpinned once the
    /// device answered: it no longer touches it.
    ///
    /// # Errors
    ///
    /// As [`Verbs::create_cq`] for the ring; `ENOENT` for a CQ this context did not create;
    /// `EINVAL` if the new ring cannot hold the CQEs not taken yet; `EBUSY` for a CQ in error.
    pub(crate) fn resize_cq(
        &self,
        cqn: u32,
        log: u32,
        buf_addr: u64,
        buf_len: u64,
        moved: impl FnOnce(u32),
    ) -> Result {
        let mut mem = self.pin_cq_ring(log, buf_addr, buf_len)?;
        self.locked(|bound, objs| {
            let i = position(&objs.cqs, |c| c.cqn == cqn)?;
            let list = mem.page_list(bound)?;
            let cmd = Cmd::new(uapi::QHCA_CMD_RESIZE_CQ)
                .input(0, self.uar.into())
                .input(1, cqn.into())
                .input(2, log.into())
                .input(3, list.npages().into())
                .input(4, list.dma_address());
            // An error is the device's refusal (it kept the old ring) or a dead command queue
            // (the device is stopped): either way the new ring may go.
            self.dev.exec(cmd)?;
            // The old ring goes, unpinned.
            objs.cqs[i].mem = mem;
            moved(1 << log);
            Ok(())
        })
    }
}
