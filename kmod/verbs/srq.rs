// SPDX-License-Identifier: GPL-2.0

//! Shared receive queues: CREATE_SRQ, MODIFY_SRQ (the limit) and QUERY_SRQ; DESTROY_SRQ goes
//! through [`Verbs::destroy`], which refuses it while a QP of the context receives from it.

use super::{page_align, position, RingMem, Verbs};
use crate::{cmdq::Cmd, limits::Pool, pagelist::span_pages, rdma::SrqEvents, shim::Umem, uapi};
use kernel::prelude::*;

/// A shared receive queue: its number, its PD (busy while it lives) and its ring (a user's,
/// pinned, or the driver's), kept until the device forgot the SRQ.
pub(super) struct Srq {
    pub(super) srqn: u32,
    pub(super) pdn: u32,
    _mem: RingMem,
}

impl Verbs<'_> {
    /// An SRQ as `a` describes it (its header and output fields ignored), whose limit events
    /// go to the core's SRQ `route`: its number.
    ///
    /// # Errors
    ///
    /// `EOPNOTSUPP` without `QHCA_CAP_SRQ`; `EINVAL` for a ring the ABI does not allow (sizes,
    /// alignment, a length other than the slots and the record rounded up to pages); `ENOENT`
    /// for a PD this context did not create; `EDQUOT` past the user's share.
    pub(crate) fn create_srq(
        &self,
        a: &uapi::qhca_ioc_create_srq,
        route: SrqEvents,
    ) -> Result<u32> {
        let bytes = self.check_srq(a.log, a.stride_log, a.max_sge)?;
        if a.buf_addr % u64::from(uapi::QHCA_PAGE_SIZE) != 0 || a.buf_len != bytes {
            return Err(EINVAL);
        }
        span_pages(a.buf_addr, a.buf_len)?;
        // Checked before pinning (a bad handle costs no pin) and again under the lock.
        position(&self.objs.lock().pds, |&p| p == a.pdn)?;
        // Writable: the device writes the record.
        let mem = RingMem::User(Umem::pin(a.buf_addr, a.buf_len, true)?);
        self.create_srq_in(a.pdn, a.log, a.stride_log, a.max_sge, mem, route)
    }

    /// Checks the shape an SRQ asks for: `2^log` slots of `2^stride_log` bytes holding
    /// `max_sge` scatter entries each. Returns the bytes of its ring (the slots and the record,
    /// rounded up to pages).
    ///
    /// # Errors
    ///
    /// `EOPNOTSUPP` without `QHCA_CAP_SRQ`; `EINVAL` for a shape the ABI or the device does not
    /// allow.
    pub(super) fn check_srq(&self, log: u8, stride_log: u8, max_sge: u16) -> Result<u64> {
        let attr = self.dev.attr()?;
        if attr.caps & u64::from(uapi::QHCA_CAP_SRQ) == 0 {
            return Err(EOPNOTSUPP);
        }
        let (log, stride_log) = (u32::from(log), u32::from(stride_log));
        let sge_bytes = 16 * (1 + u32::from(max_sge));
        if log > uapi::QHCA_WQ_MAX_LOG
            || !(uapi::QHCA_RQ_MIN_STRIDE_LOG..=uapi::QHCA_RQ_MAX_STRIDE_LOG).contains(&stride_log)
            || max_sge == 0
            || u32::from(max_sge) > attr.max_sge
            || sge_bytes > 1 << stride_log
            || (1u32 << log) > attr.max_srq_wr
        {
            return Err(EINVAL);
        }
        Ok(page_align((1u64 << (log + stride_log)) + 64))
    }

    /// CREATE_SRQ of the shape the caller checked ([`Verbs::check_srq`]) in PD `pdn`, with its
    /// ring in `mem`: its number.
    pub(super) fn create_srq_in(
        &self,
        pdn: u32,
        log: u8,
        stride_log: u8,
        max_sge: u16,
        mut mem: RingMem,
        route: SrqEvents,
    ) -> Result<u32> {
        self.locked(|bound, objs| {
            position(&objs.pds, |&p| p == pdn)?;
            objs.srqs.reserve(1, GFP_KERNEL)?;
            self.ctx.reserve()?;
            let list = mem.page_list(bound)?;
            let args = uapi::qhca_cmd_create_srq {
                uar: self.uar.to_le(),
                pdn: pdn.to_le(),
                log,
                stride_log,
                max_sge: max_sge.to_le(),
                npages: list.npages().to_le(),
                pages_addr: list.dma_address().to_le(),
                ..Default::default()
            };
            let cmd = Cmd::new(uapi::QHCA_CMD_CREATE_SRQ).input_struct(&args);
            let srqn = self.charged(Pool::Srqs, || self.create(cmd, "srqn"))?;
            // Neither can fail: room was reserved above.
            self.ctx.add_srq(srqn, route)?;
            objs.srqs.push(
                Srq {
                    srqn,
                    pdn,
                    _mem: mem,
                },
                GFP_KERNEL,
            )?;
            Ok(srqn)
        })
    }

    /// MODIFY_SRQ of SRQ `srqn`: arms `limit` (0 disarms).
    ///
    /// # Errors
    ///
    /// `EINVAL` for a limit above the SRQ's size (the device checks it); `ENOENT` for an SRQ
    /// this context did not create.
    pub(crate) fn modify_srq(&self, srqn: u32, limit: u32) -> Result {
        self.locked(|_, objs| {
            position(&objs.srqs, |s| s.srqn == srqn)?;
            self.dev.exec(
                Cmd::new(uapi::QHCA_CMD_MODIFY_SRQ)
                    .input(0, self.uar.into())
                    .input(1, srqn.into())
                    .input(2, limit.into()),
            )?;
            Ok(())
        })
    }

    /// QUERY_SRQ of SRQ `srqn`: its armed limit (0 once it fired, or none).
    pub(crate) fn query_srq(&self, srqn: u32) -> Result<u32> {
        let out = self.locked(|_, objs| {
            position(&objs.srqs, |s| s.srqn == srqn)?;
            self.dev.exec(
                Cmd::new(uapi::QHCA_CMD_QUERY_SRQ)
                    .input(0, self.uar.into())
                    .input(1, srqn.into()),
            )
        })?;
        // Never above the SRQ's size, which fits 16 bits: anything else is a broken device.
        u32::try_from(out.data[0])
            .ok()
            .filter(|&l| l <= 1 << uapi::QHCA_WQ_MAX_LOG)
            .ok_or(EIO)
    }
}
