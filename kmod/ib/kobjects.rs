// SPDX-License-Identifier: GPL-2.0

//! Kernel verbs on qhca's `ib_device` ([`crate::kverbs`]): the core's requests for kernel
//! objects translated to the kernel context's commands, and the data path handed to the rings.
//!
//! What a kernel consumer may have: PDs (with a physical region as local DMA key, which the
//! core asks for through `get_dma_mr`), CQs of up to `max_cqe` entries on completion vector 0,
//! RC and UD QPs, the port's GSI QP (QP1, for the MAD layer and the CM) and its Ethernet QP (a
//! raw packet QP, for the driver's own net_device), AHs, shared receive queues (basic ones, that
//! RC and UD QPs receive from, when the device has `QHCA_CAP_SRQ`) and fast-registration regions
//! (`alloc_mr`, `map_mr_sg`, `IB_WR_REG_MR`, invalidated by `IB_WR_LOCAL_INV` or the peer's
//! `SEND_WITH_INV`) when the device has `QHCA_CAP_FAST_REG`. Not yet: memory windows, resizing
//! an SRQ.

use super::{objects::QhcaCq, qp::QhcaQp, srq::QhcaSrq, QhcaPd, PORT};
use crate::{
    context::Ctx,
    device::QhcaDevice,
    kverbs::{
        cq::KCq,
        mr::KFastMr,
        qp::{KQp, Shape},
        ring::KRing,
        srq::KSrq,
    },
    limits::Pool,
    rdma, uapi,
    verbs::Verbs,
};
use kernel::{bindings, prelude::*, sync::Arc, task::Kuid};

/// Opens the kernel context of `dev`: one of the device's contexts, whose doorbell page the
/// device knows as the kernel's (`QHCA_UAR_KERNEL`), charged without limits to an account of
/// its own (that of the invalid user id, which no process has). Closed with
/// [`QhcaDevice::close_context`].
pub(super) fn open(dev: &Arc<QhcaDevice>) -> Result<Arc<Ctx>> {
    let nobody = Kuid::from_raw(bindings::kuid_t { val: u32::MAX });
    let quota = dev.limits.account(nobody, false)?;
    quota.charge(dev, Pool::Contexts, 1)?;
    let ctx = Ctx::new_kernel(dev, quota)?;
    dev.open_context(ctx.clone())?;
    match dev.with_bound(|_| dev.alloc_uar_with(uapi::QHCA_UAR_KERNEL)) {
        Ok(uar) => {
            ctx.set_uar(uar);
            Ok(ctx)
        }
        Err(e) => {
            dev.close_context(&ctx, None);
            Err(e)
        }
    }
}

/// The kernel context's command view.
fn verbs(ctx: &Arc<Ctx>) -> Result<Verbs<'_>> {
    Ok(Verbs::of(ctx, ctx.uar().ok_or(EIO)?))
}

/// A kernel PD.
pub(super) fn alloc_pd(ctx: &Arc<Ctx>) -> Result<QhcaPd> {
    let pdn = verbs(ctx)?.alloc_pd()?;
    Ok(QhcaPd {
        ctx: ctx.clone(),
        pdn,
    })
}

/// `get_dma_mr` of kernel PD `pd`: a physical region with `access` (`IB_ACCESS_*`, of which
/// the local and remote rights are qhca's).
pub(super) fn get_dma_mr(pd: &QhcaPd, access: u32) -> Result<(super::objects::QhcaMr, u32)> {
    let rights = access & uapi::QHCA_ACCESS_ALL;
    if access & !(rights | bindings::ib_access_flags_IB_ACCESS_OPTIONAL) != 0 {
        return Err(EOPNOTSUPP);
    }
    let key = verbs(&pd.ctx)?.reg_phys_mr(pd.pdn, rights)?;
    Ok((super::objects::QhcaMr::new(&pd.ctx, key), key))
}

/// `alloc_mr` of kernel PD `pd`: a fast-registration region that maps up to `max_pages` pages,
/// through a page list in the driver's coherent memory.
pub(super) fn alloc_mr(pd: &QhcaPd, max_pages: u32) -> Result<(super::objects::QhcaMr, u32)> {
    if max_pages == 0 || max_pages > uapi::QHCA_FAST_REG_MAX_PAGES {
        return Err(EINVAL);
    }
    let ctx = &pd.ctx;
    let list = ctx.dev.with_bound(|bound| {
        Ok(Arc::new(
            KRing::new(bound, KFastMr::list_bytes(max_pages))?,
            GFP_KERNEL,
        )?)
    })?;
    let fast = Arc::new(KFastMr::new(list.clone(), max_pages)?, GFP_KERNEL)?;
    let key = verbs(ctx)?.alloc_fast_mr(pd.pdn, max_pages, list)?;
    Ok((super::objects::QhcaMr::fast(ctx, key, fast), key))
}

/// A kernel CQ of at least `attr.cqe` entries.
pub(super) fn create_cq(
    ctx: &Arc<Ctx>,
    ev: rdma::CqEvents,
    attr: &rdma::CqAttr,
) -> Result<(QhcaCq, u32)> {
    if attr.flags != 0 || attr.comp_vector != 0 {
        return Err(EINVAL);
    }
    let want = attr.cqe.max(2);
    if want > 1 << uapi::QHCA_CQ_MAX_LOG {
        return Err(EINVAL);
    }
    let log = want.next_power_of_two().trailing_zeros();
    let ring = ctx.dev.with_bound(|bound| {
        Ok(Arc::new(
            KRing::new(bound, KCq::ring_bytes(log))?,
            GFP_KERNEL,
        )?)
    })?;
    let v = verbs(ctx)?;
    let cqn = v.create_kernel_cq(log, ring.clone(), ev)?;
    let uar = ctx.uar().ok_or(EIO)?;
    match KCq::new(ctx.dev.clone(), ring, uar, cqn, log) {
        Ok(k) => Ok((QhcaCq::kernel(ctx, cqn, k), 1 << log)),
        Err(e) => {
            v.destroy_or_stop(uapi::QHCA_CMD_DESTROY_CQ, cqn, 0);
            Err(e)
        }
    }
}

/// A kernel SRQ in kernel PD `pd` of at least `attr.max_wr` WQEs of `attr.max_sge` scatter
/// entries (both become what it has; its limit is armed by `modify_srq` only), whose limit
/// events go to the core's SRQ.
pub(super) fn create_srq(
    pd: &QhcaPd,
    ev: rdma::SrqEvents,
    attr: &mut bindings::ib_srq_attr,
) -> Result<QhcaSrq> {
    let ctx = &pd.ctx;
    if !ctx.kernel {
        return Err(EINVAL);
    }
    let dev_attr = ctx.dev.attr()?;
    let want = attr.max_wr.max(1);
    if want > dev_attr.max_srq_wr.min(1 << uapi::QHCA_WQ_MAX_LOG) {
        return Err(EINVAL);
    }
    let log = want.next_power_of_two().trailing_zeros() as u8;
    let max_sge = u16::try_from(attr.max_sge.max(1)).map_err(|_| EINVAL)?;
    // A slot holds the WQE's 16-byte header and the scatter entries.
    let stride = (16 * (1 + u32::from(max_sge))).next_power_of_two();
    let stride_log = stride.trailing_zeros().max(uapi::QHCA_RQ_MIN_STRIDE_LOG);
    let stride_log = u8::try_from(stride_log).map_err(|_| EINVAL)?;
    let ring = ctx.dev.with_bound(|bound| {
        Ok(Arc::new(
            KRing::new(bound, KSrq::ring_bytes(log, stride_log))?,
            GFP_KERNEL,
        )?)
    })?;
    let v = verbs(ctx)?;
    // The shape's limits are checked here (against the device's too).
    let srqn = v.create_kernel_srq(pd.pdn, log, stride_log, max_sge, ring.clone(), ev)?;
    let uar = ctx.uar().ok_or(EIO)?;
    match KSrq::new(ctx.dev.clone(), ring, uar, srqn, log, stride_log, max_sge) {
        Ok(k) => {
            attr.max_wr = 1 << log;
            attr.max_sge = u32::from(max_sge);
            Ok(QhcaSrq::kernel(ctx, srqn, 1 << log, u32::from(max_sge), k))
        }
        Err(e) => {
            v.destroy_or_stop(uapi::QHCA_CMD_DESTROY_SRQ, srqn, 0);
            Err(e)
        }
    }
}

/// A kernel QP: RC, UD, the port's GSI QP (QP1), or its Ethernet QP (`IB_QPT_RAW_PACKET`,
/// the driver's own Ethernet function's: `qhca_eth.c`); an RC or UD one may receive from
/// kernel SRQ `srq` (then it has no receive queue, and the core's receive capabilities are
/// ignored and reported as 0).
pub(super) fn create_qp(
    pd: &QhcaPd,
    ev: rdma::QpEvents,
    init: &mut bindings::ib_qp_init_attr,
    send_cq: &QhcaCq,
    recv_cq: &QhcaCq,
    srq: Option<&QhcaSrq>,
) -> Result<(QhcaQp, u32)> {
    let (type_, datagram) = match init.qp_type {
        bindings::ib_qp_type_IB_QPT_RC => (uapi::QHCA_QPT_RC, false),
        bindings::ib_qp_type_IB_QPT_UD => (uapi::QHCA_QPT_UD, true),
        bindings::ib_qp_type_IB_QPT_GSI => (uapi::QHCA_QPT_GSI, true),
        bindings::ib_qp_type_IB_QPT_RAW_PACKET => (uapi::QHCA_QPT_ETH, false),
        _ => return Err(EOPNOTSUPP),
    };
    let eth = type_ == uapi::QHCA_QPT_ETH;
    if init.create_flags != 0 || ((datagram || eth) && init.port_num > PORT) {
        return Err(EOPNOTSUPP);
    }
    let (Some(scq), Some(rcq)) = (send_cq.kernel_cq(), recv_cq.kernel_cq()) else {
        return Err(EINVAL);
    };
    let ctx = &pd.ctx;
    let attr = ctx.dev.attr()?;
    if eth && attr.caps & u64::from(uapi::QHCA_CAP_ETH) == 0 {
        return Err(EOPNOTSUPP);
    }
    if let Some(s) = srq {
        if !matches!(type_, uapi::QHCA_QPT_RC | uapi::QHCA_QPT_UD)
            || s.kernel_srq().is_none()
            || !s.is_of(&pd.ctx)
        {
            return Err(EINVAL);
        }
        init.cap.max_recv_wr = 0;
        init.cap.max_recv_sge = 0;
    }
    let mut shape = Shape::for_cap(&init.cap, datagram, attr.max_qp_wr)?;
    if srq.is_some() {
        shape = shape.without_rq();
    }
    if u32::from(shape.max_sge) > attr.max_sge || u32::from(shape.max_inline) > attr.max_inline {
        return Err(EINVAL);
    }
    let ring = ctx
        .dev
        .with_bound(|bound| Ok(Arc::new(KRing::new(bound, shape.bytes())?, GFP_KERNEL)?))?;
    let a = uapi::qhca_ioc_create_qp {
        size: super::objects::ioc_size::<uapi::qhca_ioc_create_qp>(),
        pdn: pd.pdn,
        send_cqn: send_cq.cqn,
        recv_cqn: recv_cq.cqn,
        sq_log: shape.sq_log,
        sq_stride_log: shape.sq_stride_log,
        rq_log: shape.rq_log,
        rq_stride_log: shape.rq_stride_log,
        max_inline: shape.max_inline,
        max_sge: shape.max_sge,
        type_,
        srqn: srq.map_or(0, |s| s.srqn),
        ..Default::default()
    };
    let core_qp = ev.as_raw();
    let v = verbs(ctx)?;
    let qpn = v.create_kernel_qp(&a, ring.clone(), ev)?;
    let uar = ctx.uar().ok_or(EIO)?;
    let signal_all = init.sq_sig_type == bindings::ib_sig_type_IB_SIGNAL_ALL_WR;
    let k = KQp::new(
        ctx.dev.clone(),
        ring,
        uar,
        qpn,
        datagram,
        eth,
        signal_all,
        srq.is_some(),
        shape,
        core_qp,
    )
    .and_then(|k| {
        scq.attach(k.clone())?;
        if !Arc::ptr_eq(scq, rcq) {
            if let Err(e) = rcq.attach(k.clone()) {
                scq.detach(qpn);
                return Err(e);
            }
        }
        Ok(k)
    });
    let k = match k {
        Ok(k) => k,
        Err(e) => {
            v.destroy_or_stop(uapi::QHCA_CMD_DESTROY_QP, qpn, 0);
            return Err(e);
        }
    };
    shape.write_cap(&mut init.cap);
    let qp = QhcaQp::kernel(pd, init, qpn, k, scq.clone(), rcq.clone());
    Ok((qp, qpn))
}
