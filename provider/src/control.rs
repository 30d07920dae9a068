// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The control path's one seam: each verb the objects issue, as a method of [`Context`] that
//! sends the RDMA core's command ([`crate::uverbs`]) on the context's uverbs node. It takes and
//! answers the request struct with the device's numbers, and fails with [`Error::Ioctl`] naming
//! the verb. A context opened without a device (`Context::open_unchecked`, for host tests) has
//! no control path: every verb fails with `ENOTTY`, as an ioctl on an ordinary file does.

use qhca_uapi::{
    qhca_ib_create_cq, qhca_ioc_advise_mr, qhca_ioc_alloc_mw, qhca_ioc_async_event,
    qhca_ioc_create_ah, qhca_ioc_create_cq, qhca_ioc_create_qp, qhca_ioc_create_srq,
    qhca_ioc_handle, qhca_ioc_qp_attr, qhca_ioc_query_ctx, qhca_ioc_query_port, qhca_ioc_reg_mr,
};

use crate::context::Context;
use crate::error::{Errno, Error, Result};
use crate::uverbs::Uverbs;

impl Context {
    /// The context's control path, or the `ENOTTY` of a context opened without a device.
    fn control(&self, op: &'static str) -> Result<&Uverbs> {
        self.uverbs.as_deref().ok_or(Error::Ioctl {
            op,
            source: Errno::ENOTTY,
        })
    }

    /// Runs verb `op` (`f`) on the control path; its errno as the crate reports it.
    fn exec<T>(&self, op: &'static str, f: impl FnOnce(&Uverbs) -> Result<T, Errno>) -> Result<T> {
        let u = self.control(op)?;
        f(u).map_err(|e| {
            let source = u.errno_of(e);
            self.note_errno(source);
            Error::Ioctl { op, source }
        })
    }
}

/// `cmd_VERB: VERB(request type) = "NAME"`: `Uverbs::VERB` on the context's uverbs node.
macro_rules! verbs {
    ($($name:ident: $verb:ident($ty:ty) = $op:literal;)*) => {
        impl Context {$(
            #[doc = concat!("`", $op, "` on `req`.")]
            pub(crate) fn $name(&self, req: &mut $ty) -> Result<()> {
                self.exec($op, |u| u.$verb(req))
            }
        )*}
    };
}

verbs! {
    cmd_alloc_pd: alloc_pd(qhca_ioc_handle) = "ALLOC_PD";
    cmd_dealloc_pd: dealloc_pd(qhca_ioc_handle) = "DEALLOC_PD";
    cmd_reg_mr: reg_mr(qhca_ioc_reg_mr) = "REG_MR";
    cmd_dereg_mr: dereg_mr(qhca_ioc_handle) = "DEREG_MR";
    cmd_alloc_mw: alloc_mw(qhca_ioc_alloc_mw) = "ALLOC_MW";
    cmd_dealloc_mw: dealloc_mw(qhca_ioc_handle) = "DEALLOC_MW";
    cmd_create_ah: create_ah(qhca_ioc_create_ah) = "CREATE_AH";
    cmd_destroy_ah: destroy_ah(qhca_ioc_handle) = "DESTROY_AH";
    cmd_create_cq: create_cq(qhca_ioc_create_cq) = "CREATE_CQ";
    cmd_destroy_cq: destroy_cq(qhca_ioc_handle) = "DESTROY_CQ";
    cmd_create_qp: create_qp(qhca_ioc_create_qp) = "CREATE_QP";
    cmd_modify_qp: modify_qp(qhca_ioc_qp_attr) = "MODIFY_QP";
    cmd_query_qp: query_qp(qhca_ioc_qp_attr) = "QUERY_QP";
    cmd_destroy_qp: destroy_qp(qhca_ioc_handle) = "DESTROY_QP";
    cmd_create_srq: create_srq(qhca_ioc_create_srq) = "CREATE_SRQ";
    cmd_destroy_srq: destroy_srq(qhca_ioc_handle) = "DESTROY_SRQ";
    cmd_advise_mr: advise_mr(qhca_ioc_advise_mr) = "ADVISE_MR";
    cmd_query_ctx: query_ctx(qhca_ioc_query_ctx) = "QUERY_CTX";
    cmd_query_port: query_port(qhca_ioc_query_port) = "QUERY_PORT";
}

/// The verbs that `qhca-abi.h` gives no `qhca_ioc_*` request struct: the core's commands carry no
/// driver data for them, or another verb's.
impl Context {
    /// `MODIFY_SRQ` of SRQ `srqn`: arms `limit` (0 disarms).
    pub(crate) fn cmd_modify_srq(&self, srqn: u32, limit: u32) -> Result<()> {
        self.exec("MODIFY_SRQ", |u| u.modify_srq(srqn, limit))
    }

    /// `RESIZE_CQ` of CQ `cqn` to the ring `ring` names (CREATE_CQ's driver input): the device
    /// moves the CQEs not consumed yet there; returns the CQ's new number of CQEs.
    pub(crate) fn cmd_resize_cq(&self, cqn: u32, ring: &qhca_ib_create_cq) -> Result<u32> {
        self.exec("RESIZE_CQ", |u| u.resize_cq(cqn, ring))
    }

    /// `QUERY_SRQ` of SRQ `srqn`: `(max_wr, max_sge, srq_limit)`.
    pub(crate) fn cmd_query_srq(&self, srqn: u32) -> Result<(u32, u32, u32)> {
        self.exec("QUERY_SRQ", |u| u.query_srq(srqn))
    }
}

impl Context {
    /// `GET_ASYNC_EVENT` on `req` (`EAGAIN`: none queued).
    pub(crate) fn cmd_get_async_event(&self, req: &mut qhca_ioc_async_event) -> Result<()> {
        let u = self.control("GET_ASYNC_EVENT")?;
        let (kind, element) = u.get_async_event().map_err(|source| {
            if source != Errno::EAGAIN {
                self.note_errno(source);
            }
            Error::Ioctl {
                op: "GET_ASYNC_EVENT",
                source,
            }
        })?;
        req.type_ = kind;
        req.element = element;
        Ok(())
    }
}
