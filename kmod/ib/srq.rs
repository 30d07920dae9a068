// SPDX-License-Identifier: GPL-2.0

//! Shared receive queues: the core's requests translated to the context's commands
//! ([`crate::verbs`]), which check them and run them on the device. A user SRQ's ring is the
//! process's memory (`struct qhca_ib_create_srq`), its WQEs posted and rung by the process; a
//! kernel consumer's is the driver's ([`crate::kverbs::srq`], made in [`super::kobjects`]). The
//! limit is the one attribute that changes (no resizing).

use super::{objects::ioc_size, verbs, QhcaPd};
use crate::{context::Ctx, kverbs::srq::KSrq, rdma, uapi};
use kernel::{bindings, prelude::*, sync::Arc};

/// A shared receive queue, with what its creation settled.
pub(crate) struct QhcaSrq {
    ctx: Arc<Ctx>,
    pub(super) srqn: u32,
    max_wr: u32,
    max_sge: u32,
    /// A kernel consumer's: its ring, which the driver posts to.
    k: Option<Arc<KSrq>>,
}

/// A user SRQ of `pd` with the ring the driver input describes; its limit events go to the
/// core's SRQ. `attr.max_wr` and `attr.max_sge` become what the SRQ has.
pub(super) fn create(
    pd: &QhcaPd,
    ev: rdma::SrqEvents,
    attr: &mut bindings::ib_srq_attr,
    udata: &mut rdma::Udata<'_>,
) -> Result<QhcaSrq> {
    let u: uapi::qhca_ib_create_srq = udata.read_in()?;
    if u.comp_mask != 0
        || u.rsvd != 0
        || u.log >= 32
        || attr.max_wr == 0
        || u64::from(attr.max_wr) > 1u64 << u.log
    {
        return Err(EINVAL);
    }
    let max_sge = u16::try_from(attr.max_sge.max(1)).map_err(|_| EINVAL)?;
    let a = uapi::qhca_ioc_create_srq {
        size: ioc_size::<uapi::qhca_ioc_create_srq>(),
        pdn: pd.pdn,
        log: u.log,
        stride_log: u.stride_log,
        max_sge,
        buf_addr: u.buf_addr,
        buf_len: u.buf_len,
        ..Default::default()
    };
    // The PD is the context's (the core looked it up in it), so the context's commands find it.
    let srqn = verbs(&pd.ctx)?.create_srq(&a, ev)?;
    let srq = QhcaSrq {
        ctx: pd.ctx.clone(),
        srqn,
        max_wr: 1 << u.log,
        max_sge: u32::from(max_sge),
        k: None,
    };
    if let Err(e) = udata.respond(&uapi::qhca_ib_create_srq_resp { srqn, rsvd: 0 }) {
        // The core never hears of this SRQ: it goes now.
        srq.destroy()?;
        return Err(e);
    }
    attr.max_wr = srq.max_wr;
    attr.max_sge = srq.max_sge;
    Ok(srq)
}

impl QhcaSrq {
    /// A kernel SRQ of the kernel context `ctx`, number `srqn`, posted to through `k`.
    pub(super) fn kernel(
        ctx: &Arc<Ctx>,
        srqn: u32,
        max_wr: u32,
        max_sge: u32,
        k: Arc<KSrq>,
    ) -> Self {
        Self {
            ctx: ctx.clone(),
            srqn,
            max_wr,
            max_sge,
            k: Some(k),
        }
    }

    /// The ring of a kernel SRQ (`None` for a user's).
    pub(super) fn kernel_srq(&self) -> Option<&Arc<KSrq>> {
        self.k.as_ref()
    }

    /// Whether it is an SRQ of the context `ctx`.
    pub(super) fn is_of(&self, ctx: &Arc<Ctx>) -> bool {
        Arc::ptr_eq(&self.ctx, ctx)
    }

    /// `IB_SRQ_LIMIT` arms the limit (0 disarms); no resizing (`IB_SRQ_MAX_WR`: `EINVAL`, as
    /// devices without `IB_DEVICE_SRQ_RESIZE` answer).
    pub(super) fn modify(&self, attr: &bindings::ib_srq_attr, mask: u32) -> Result {
        if mask != bindings::ib_srq_attr_mask_IB_SRQ_LIMIT || attr.srq_limit > self.max_wr {
            return Err(EINVAL);
        }
        verbs(&self.ctx)?.modify_srq(self.srqn, attr.srq_limit)
    }

    pub(super) fn query(&self, attr: &mut bindings::ib_srq_attr) -> Result {
        attr.srq_limit = verbs(&self.ctx)?.query_srq(self.srqn)?;
        attr.max_wr = self.max_wr;
        attr.max_sge = self.max_sge;
        Ok(())
    }

    /// DESTROY_SRQ; its event route goes with it.
    pub(super) fn destroy(&self) -> Result {
        verbs(&self.ctx)?.destroy_or_stop(uapi::QHCA_CMD_DESTROY_SRQ, self.srqn, 0);
        Ok(())
    }
}
