// SPDX-License-Identifier: GPL-2.0

//! The device as the RDMA core sees it: `qhcaN` in `/sys/class/infiniband`, rdma netlink and the
//! `rdma` tool, with the device's and the port's attributes translated from qhca's to the core's.
//!
//! The `ib_device` is the driver's one control path (`docs/design-ib-device.md`). A user context
//! (an open of the uverbs device) is one of the device's contexts ([`Ctx`]: its doorbell page,
//! charged to its user, offered to `mmap(2)` through the core's entries; its event routes, page
//! faults and objects), and its verbs objects are made by [`Verbs`], which checks them and runs the
//! device's commands: [`objects`] translates the core's requests for CQs, regions, windows and
//! address handles, [`qp`] for QPs, [`srq`] for shared receive queues, [`kobjects`] for the
//! objects of kernel consumers
//! ([`crate::kverbs`]), with which the port carries MADs on QP1 and serves the CM. The port's GIDs are the
//! core's, from the addresses of the port's netdev ([`crate::netdev`]): its default GID is the
//! device's fixed entry 0, and each IPv4 address becomes the same entry of the device's table
//! (`add_gid`); IPv6 addresses other than the link-local one are refused (the device takes
//! IPv4-mapped GIDs only in this version).

mod kobjects;
mod objects;
mod qp;
mod srq;

use crate::{
    context::Ctx, device::QhcaDevice, kverbs::qp::KernelMr, limits::Pool, rdma, uapi, verbs::Verbs,
};
use core::{ffi::c_int, fmt::Write, mem::MaybeUninit};
use kernel::{
    bindings,
    mm::virt::{flags as vmflags, VmaNew},
    prelude::*,
    sync::Arc,
    task::Kuid,
};

/// The driver data of a qhca `ib_device`.
pub(crate) struct QhcaIb {
    dev: Arc<QhcaDevice>,
    /// The kernel context ([`crate::kverbs`]), if the device serves kernel consumers.
    kctx: Option<Arc<Ctx>>,
}

impl QhcaIb {
    /// The driver data for `dev`, with its kernel context open if the device has
    /// `QHCA_CAP_KERNEL`.
    pub(crate) fn new(dev: Arc<QhcaDevice>) -> Result<Self> {
        let kctx = if dev.attr()?.caps & u64::from(uapi::QHCA_CAP_KERNEL) != 0 {
            Some(kobjects::open(&dev)?)
        } else {
            None
        };
        Ok(Self { dev, kctx })
    }

    /// The kernel context, or `EOPNOTSUPP` without one.
    fn kctx(&self) -> Result<&Arc<Ctx>> {
        self.kctx.as_ref().ok_or(EOPNOTSUPP)
    }
}

impl Drop for QhcaIb {
    /// The core is done with the device (unregistered, or never registered): every kernel
    /// consumer destroyed its objects, and the kernel context goes.
    fn drop(&mut self) {
        if let Some(ctx) = self.kctx.take() {
            self.dev.close_context(&ctx, ctx.uar());
        }
    }
}

/// A user context: one of the device's contexts ([`Ctx`], which routes its events and serves its
/// page faults), whose doorbell page is offered to `mmap(2)`.
/// Dropped (or dropped part-way, when creating it fails): no new mapping of the page (the core
/// zapped or the process unmapped every old one before the context goes), then the context
/// closes (its objects, which the core destroyed already, its doorbell page, its charge).
pub(crate) struct QhcaUContext {
    db: Option<rdma::IoMapping>,
    inval: Option<rdma::PageMapping>,
    ctx: Arc<Ctx>,
}

/// The token of a context's invalidation page among its [`rdma::PageMapping`]s (its only one).
const INVAL_PAGE: u64 = 0;

impl Drop for QhcaUContext {
    fn drop(&mut self) {
        drop(self.inval.take());
        drop(self.db.take());
        self.ctx.dev.close_context(&self.ctx, self.ctx.uar());
    }
}

/// A protection domain: the device's PD of the context.
pub(crate) struct QhcaPd {
    ctx: Arc<Ctx>,
    pdn: u32,
}

/// The view of context `ctx` that its commands take.
fn verbs(ctx: &Arc<Ctx>) -> Result<Verbs<'_>> {
    // Every user context has its page from creation on.
    Ok(Verbs::of(ctx, ctx.uar().ok_or(EIO)?))
}

/// The only port.
const PORT: u32 = 1;

/// A driver method's answer (`qhca_uverbs.c`): what `f` computes for the calling user context,
/// written to `out`; 0 or a negative errno.
///
/// # Safety
///
/// `uctx` is the user context of a method call on a registered qhca device (the core keeps it
/// for the call), and `out` is valid for writing one `R`.
unsafe fn answer<R>(
    uctx: *mut bindings::ib_ucontext,
    out: *mut R,
    f: impl FnOnce(&Arc<Ctx>) -> Result<R>,
) -> c_int {
    // SAFETY: The function's contract is `method_ucontext`'s.
    let Some(c) = (unsafe { rdma::method_ucontext::<QhcaIb>(uctx) }) else {
        return EINVAL.to_errno();
    };
    match c.ctx.check().and_then(|()| f(&c.ctx)) {
        Ok(r) => {
            // SAFETY: The function's contract.
            unsafe { out.write(r) };
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// `QHCA_IB_METHOD_QUERY_CTX`: the calling context's counters.
///
/// # Safety
///
/// As [`answer`]'s, for one `qhca_ctx_stats`.
#[no_mangle]
unsafe extern "C" fn qhca_ib_query_ctx(
    uctx: *mut bindings::ib_ucontext,
    out: *mut uapi::qhca_ctx_stats,
) -> c_int {
    // SAFETY: The function's contract.
    unsafe { answer(uctx, out, |ctx| verbs(ctx)?.ctx_stats()) }
}

/// `QHCA_IB_METHOD_QUERY_PORT`: the port as the device sees it.
///
/// # Safety
///
/// As [`answer`]'s, for one `qhca_port_attr`.
#[no_mangle]
unsafe extern "C" fn qhca_ib_query_port(
    uctx: *mut bindings::ib_ucontext,
    out: *mut uapi::qhca_port_attr,
) -> c_int {
    // SAFETY: The function's contract.
    unsafe { answer(uctx, out, |ctx| ctx.dev.query_port()) }
}

/// The port's counters (`struct qhca_port_counters`, less its reserved words), by the names
/// `rdma statistic` and `hw_counters/` show, in the struct's order.
static PORT_COUNTERS: rdma::StatNames<19> = rdma::StatNames::new([
    c"tx_frames",
    c"tx_bytes",
    c"rx_frames",
    c"rx_bytes",
    c"tx_no_route",
    c"tx_no_neigh",
    c"rx_malformed",
    c"rx_bad_icrc",
    c"rx_not_ours",
    c"rx_oversize",
    c"arp_rx",
    c"arp_tx",
    c"test_dropped",
    c"test_duplicated",
    c"test_reordered",
    c"rx_forged",
    c"eth_tx_frames",
    c"eth_rx_frames",
    c"eth_rx_dropped",
]);

/// `ib_mtu` of a path MTU of 2^`log` bytes (256 .. 4096), or `None`.
fn ib_mtu(log: u8) -> Option<bindings::ib_mtu> {
    (8..=12)
        .contains(&log)
        .then(|| bindings::ib_mtu::from(log - 7))
}

fn check_port(port: u32) -> Result {
    if port != PORT {
        return Err(EINVAL);
    }
    Ok(())
}

// SAFETY: The event routes are the only holders of a `CqEvents` or `QpEvents`: `Verbs` adds them to
// the context's tables under its state lock and removes them in `Verbs::forget`, under the same
// lock, which every successful destroy, `destroy_or_stop` whatever the device answers, and every
// failed create (on its error paths, the route is dropped before the table has it, or the object
// is destroyed) runs before returning; events are delivered under that lock (`Ctx::cq_event`,
// `Ctx::qp_event`, `Ctx::signal_all_cqs`).
unsafe impl rdma::Driver for QhcaIb {
    fn query_device(&self, attr: &mut bindings::ib_device_attr) -> Result {
        let a = self.dev.attr()?;
        let has = |cap: u32| a.caps & u64::from(cap) != 0;
        attr.fw_ver = a.fw_version;
        attr.sys_image_guid = a.node_guid.to_be();
        attr.max_mr_size = a.max_mr_size;
        attr.page_size_cap = a.page_size_cap;
        attr.vendor_id = a.vendor_id;
        attr.vendor_part_id = a.vendor_part_id;
        attr.hw_ver = a.hw_ver;
        attr.max_qp = a.max_qp;
        attr.max_qp_wr = a.max_qp_wr;
        attr.max_send_sge = a.max_sge;
        attr.max_recv_sge = a.max_sge;
        attr.max_sge_rd = a.max_sge;
        attr.max_cq = a.max_cq;
        attr.max_cqe = a.max_cqe;
        attr.max_mr = a.max_mr;
        attr.max_pd = a.max_pd;
        attr.max_qp_rd_atom = u32::from(a.max_qp_rd_atom);
        attr.max_qp_init_rd_atom = u32::from(a.max_qp_init_rd_atom);
        attr.max_res_rd_atom = u32::from(a.max_qp_rd_atom).saturating_mul(a.max_qp);
        attr.max_mw = a.max_mw;
        attr.max_ah = a.max_ah;
        if has(uapi::QHCA_CAP_SRQ) {
            attr.max_srq = a.max_srq;
            attr.max_srq_wr = a.max_srq_wr;
            attr.max_srq_sge = a.max_sge;
        }
        attr.max_pkeys = 1;
        // 4.096 µs × 2^15: the longest an ACK may take under TCG with the engine busy.
        attr.local_ca_ack_delay = 15;
        let mut flags = bindings::ib_device_cap_flags_IB_DEVICE_RC_RNR_NAK_GEN as u64;
        if has(uapi::QHCA_CAP_RC) {
            attr.atomic_cap = bindings::ib_atomic_cap_IB_ATOMIC_HCA;
        }
        if has(uapi::QHCA_CAP_FAST_REG) && self.kctx.is_some() {
            flags |= bindings::ib_device_cap_flags_IB_DEVICE_MEM_MGT_EXTENSIONS as u64;
            attr.max_fast_reg_page_list_len = uapi::QHCA_FAST_REG_MAX_PAGES;
        }
        if has(uapi::QHCA_CAP_MW) {
            flags |= (bindings::ib_device_cap_flags_IB_DEVICE_MEM_WINDOW
                | bindings::ib_device_cap_flags_IB_DEVICE_MEM_WINDOW_TYPE_2B)
                as u64;
        }
        attr.device_cap_flags = flags;
        if has(uapi::QHCA_CAP_ODP) {
            attr.kernel_cap_flags |= u64::from(bindings::ib_kernel_cap_flags_IBK_ON_DEMAND_PAGING);
            // qhca's values are the verbs' (the ABI header says so).
            attr.odp_caps.general_caps = a.odp_general_caps;
            attr.odp_caps.per_transport_caps.rc_odp_caps = a.odp_rc_caps;
            attr.odp_caps.per_transport_caps.ud_odp_caps = a.odp_ud_caps;
        }
        Ok(())
    }

    fn query_port(&self, port: u32, attr: &mut bindings::ib_port_attr) -> Result {
        check_port(port)?;
        let p = self.dev.query_port()?;
        let active = u32::from(p.state) == uapi::QHCA_PORT_ACTIVE;
        attr.state = if active {
            bindings::ib_port_state_IB_PORT_ACTIVE
        } else {
            bindings::ib_port_state_IB_PORT_DOWN
        };
        attr.phys_state = if active {
            bindings::ib_port_phys_state_IB_PORT_PHYS_STATE_LINK_UP as u8
        } else {
            bindings::ib_port_phys_state_IB_PORT_PHYS_STATE_DISABLED as u8
        };
        let mtu = ib_mtu(p.max_mtu).ok_or(EIO)?;
        attr.max_mtu = mtu;
        attr.active_mtu = mtu;
        attr.phys_mtu = 1 << p.max_mtu;
        attr.gid_tbl_len = i32::from(p.gid_tbl_len);
        attr.pkey_tbl_len = 1;
        attr.max_msg_sz = 1 << 31;
        // The wire is a QEMU netdev, which has no speed: reported as the slowest there is, as
        // the core does for an Ethernet device that reports none.
        attr.active_width = bindings::ib_port_width_IB_WIDTH_1X as u8;
        attr.active_speed = bindings::ib_port_speed_IB_SPEED_SDR as u16;
        Ok(())
    }

    fn port_immutable(&self, port: u32, imm: &mut bindings::ib_port_immutable) -> Result {
        check_port(port)?;
        let p = self.dev.query_port()?;
        imm.pkey_tbl_len = 1;
        imm.gid_tbl_len = i32::from(p.gid_tbl_len);
        if self.kernel_verbs() {
            imm.core_cap_flags = rdma::PORT_CAPS_ROCE_V2_CM;
            imm.max_mad_size = rdma::MAD_SIZE;
        } else {
            imm.core_cap_flags = rdma::PORT_CAPS_ROCE_V2;
            imm.max_mad_size = 0;
        }
        Ok(())
    }

    fn query_pkey(&self, port: u32, index: u16) -> Result<u16> {
        check_port(port)?;
        // RoCE has one P_Key, the default (full membership).
        match index {
            0 => Ok(0xffff),
            _ => Err(EINVAL),
        }
    }

    type UContext = QhcaUContext;

    fn alloc_ucontext(
        &self,
        uctx: &rdma::UContext,
        udata: &mut rdma::Udata<'_>,
    ) -> Result<QhcaUContext> {
        udata.input_zero()?;
        let dev = &self.dev;
        // A user context is one of the device's contexts: charged to its user first.
        let quota = dev
            .limits
            .account(Kuid::current_euid(), !crate::shim::capable_sys_resource())?;
        quota.charge(dev, Pool::Contexts, 1)?;
        let ctx = Ctx::new(dev, quota)?;
        dev.open_context(ctx.clone())?;
        // From here on, dropping `c` closes the context.
        let mut c = QhcaUContext {
            db: None,
            inval: None,
            ctx,
        };
        let uar = dev.with_bound(|_| dev.alloc_uar())?;
        c.ctx.set_uar(uar);
        // SAFETY: `uar` is the page the device just allocated to this context, below
        // `num_uars`, which probe checked against BAR2's length: one page of BAR2, this
        // context's own until it closes, which it does only after its mapping entry is removed
        // and its mappings are gone (`QhcaUContext`'s drop, which `dealloc_ucontext` runs only
        // then). Unbind unregisters the device, which disassociates (zaps) every context's
        // mappings, before the driver lets go of BAR2.
        let db = unsafe {
            rdma::IoMapping::new(uctx, dev.uar_phys(uar), uapi::QHCA_UAR_PAGE_SIZE as usize)
        }?;
        let inval = rdma::PageMapping::new(uctx, INVAL_PAGE)?;
        udata.respond(&uapi::qhca_ib_alloc_ucontext_resp {
            comp_mask: 0,
            uar_index: uar,
            db_mmap_offset: db.offset(),
            inval_mmap_offset: inval.offset(),
            rsvd: 0,
            attr: *dev.attr()?,
        })?;
        c.db = Some(db);
        c.inval = Some(inval);
        Ok(c)
    }

    fn dealloc_ucontext(&self, ctx: QhcaUContext) {
        drop(ctx);
    }

    fn mmap_page(&self, ctx: &QhcaUContext, token: u64, vma: &VmaNew) -> Result {
        if token != INVAL_PAGE || vma.flags() & vmflags::SHARED == 0 || vma.executable() {
            return Err(EINVAL);
        }
        // Read-only (the page refuses a writable mapping), and readable after disassociation
        // too: nothing of the device is in it.
        ctx.ctx.inval.mmap(vma)
    }

    type Pd = QhcaPd;

    fn alloc_pd(&self, uctx: &QhcaUContext, udata: &mut rdma::Udata<'_>) -> Result<QhcaPd> {
        udata.input_zero()?;
        let v = verbs(&uctx.ctx)?;
        let pdn = v.alloc_pd()?;
        let pd = QhcaPd {
            ctx: uctx.ctx.clone(),
            pdn,
        };
        if let Err(e) = udata.respond(&uapi::qhca_ib_alloc_pd_resp { pdn, rsvd: 0 }) {
            // The core never hears of this PD: it goes now.
            v.destroy_or_stop(uapi::QHCA_CMD_DEALLOC_PD, pdn, 0);
            return Err(e);
        }
        Ok(pd)
    }

    fn dealloc_pd(&self, pd: &QhcaPd) -> Result {
        verbs(&pd.ctx)?.destroy_or_stop(uapi::QHCA_CMD_DEALLOC_PD, pd.pdn, 0);
        Ok(())
    }

    type Cq = objects::QhcaCq;

    fn create_cq(
        &self,
        uctx: &QhcaUContext,
        ev: rdma::CqEvents,
        attr: &rdma::CqAttr,
        udata: &mut rdma::Udata<'_>,
    ) -> Result<(objects::QhcaCq, u32)> {
        objects::create_cq(&uctx.ctx, ev, attr, udata)
    }

    fn resize_cq(
        &self,
        cq: &objects::QhcaCq,
        cqe: u32,
        udata: &mut rdma::Udata<'_>,
        moved: &mut dyn FnMut(u32),
    ) -> Result {
        cq.resize(cqe, udata, moved)
    }

    fn destroy_cq(&self, cq: &objects::QhcaCq) -> Result {
        cq.destroy()
    }

    type Srq = srq::QhcaSrq;

    fn create_srq(
        &self,
        pd: &QhcaPd,
        ev: rdma::SrqEvents,
        attr: &mut bindings::ib_srq_attr,
        udata: &mut rdma::Udata<'_>,
    ) -> Result<srq::QhcaSrq> {
        srq::create(pd, ev, attr, udata)
    }

    fn modify_srq(&self, s: &srq::QhcaSrq, attr: &bindings::ib_srq_attr, mask: u32) -> Result {
        s.modify(attr, mask)
    }

    fn query_srq(&self, s: &srq::QhcaSrq, attr: &mut bindings::ib_srq_attr) -> Result {
        s.query(attr)
    }

    fn destroy_srq(&self, s: &srq::QhcaSrq) -> Result {
        s.destroy()
    }

    type Qp = qp::QhcaQp;

    fn create_qp(
        &self,
        pd: &QhcaPd,
        ev: rdma::QpEvents,
        init: &mut bindings::ib_qp_init_attr,
        send_cq: &objects::QhcaCq,
        recv_cq: &objects::QhcaCq,
        srq: Option<&srq::QhcaSrq>,
        udata: &mut rdma::Udata<'_>,
    ) -> Result<(qp::QhcaQp, u32)> {
        qp::create(pd, ev, init, send_cq, recv_cq, srq, udata)
    }

    fn modify_qp(
        &self,
        qp: &qp::QhcaQp,
        attr: &bindings::ib_qp_attr,
        mask: u32,
        udata: Option<&mut rdma::Udata<'_>>,
    ) -> Result {
        qp.modify(attr, mask, udata)
    }

    fn query_qp(
        &self,
        qp: &qp::QhcaQp,
        attr: &mut bindings::ib_qp_attr,
        init: &mut bindings::ib_qp_init_attr,
    ) -> Result {
        qp.query(attr, init)
    }

    fn destroy_qp(&self, qp: &qp::QhcaQp) -> Result {
        qp.destroy()
    }

    type Mr = objects::QhcaMr;

    fn reg_user_mr(
        &self,
        pd: &QhcaPd,
        attr: &rdma::MrAttr,
        udata: &mut rdma::Udata<'_>,
    ) -> Result<(objects::QhcaMr, u32)> {
        objects::reg_mr(pd, attr, udata)
    }

    fn rereg_user_mr(
        &self,
        mr: &objects::QhcaMr,
        pd: &QhcaPd,
        change: &rdma::MrRereg,
        udata: &mut rdma::Udata<'_>,
    ) -> Result<Option<(objects::QhcaMr, u32)>> {
        objects::rereg_mr(mr, pd, change, udata)
    }

    fn dereg_mr(&self, mr: &objects::QhcaMr) -> Result {
        mr.dereg()
    }

    fn advise_mr(
        &self,
        pd: &QhcaPd,
        write: bool,
        flush: bool,
        ranges: &[bindings::ib_sge],
    ) -> Result {
        let v = verbs(&pd.ctx)?;
        for r in ranges {
            v.advise_mr(r.lkey, r.addr, u64::from(r.length), write, flush)?;
        }
        Ok(())
    }

    type Mw = objects::QhcaMw;

    fn alloc_mw(
        &self,
        pd: &QhcaPd,
        kind: bindings::ib_mw_type,
        udata: &mut rdma::Udata<'_>,
    ) -> Result<(objects::QhcaMw, u32)> {
        objects::alloc_mw(pd, kind, udata)
    }

    fn dealloc_mw(&self, mw: &objects::QhcaMw) -> Result {
        mw.dealloc()
    }

    type Ah = objects::QhcaAh;

    fn create_ah(
        &self,
        pd: &QhcaPd,
        av: &rdma::Av,
        udata: &mut rdma::Udata<'_>,
    ) -> Result<objects::QhcaAh> {
        objects::create_ah(pd, av, udata)
    }

    fn destroy_ah(&self, ah: &objects::QhcaAh) -> Result {
        ah.destroy()
    }

    fn kernel_verbs(&self) -> bool {
        self.kctx.is_some()
    }

    fn alloc_kernel_pd(&self) -> Result<QhcaPd> {
        kobjects::alloc_pd(self.kctx()?)
    }

    fn get_dma_mr(&self, pd: &QhcaPd, access: u32) -> Result<(objects::QhcaMr, u32)> {
        kobjects::get_dma_mr(pd, access)
    }

    fn alloc_mr(&self, pd: &QhcaPd, max_pages: u32) -> Result<(objects::QhcaMr, u32)> {
        if self.dev.attr()?.caps & u64::from(uapi::QHCA_CAP_FAST_REG) == 0 {
            return Err(EOPNOTSUPP);
        }
        kobjects::alloc_mr(pd, max_pages)
    }

    fn map_mr_start(&self, mr: &objects::QhcaMr, page_size: u32) -> Result {
        mr.fast_mr().ok_or(EINVAL)?.start(page_size)
    }

    fn map_mr_page(&self, mr: &objects::QhcaMr, addr: u64) -> Result {
        mr.fast_mr().ok_or(EINVAL)?.push(addr)
    }

    fn create_kernel_cq(
        &self,
        ev: rdma::CqEvents,
        attr: &rdma::CqAttr,
    ) -> Result<(objects::QhcaCq, u32)> {
        kobjects::create_cq(self.kctx()?, ev, attr)
    }

    fn create_kernel_srq(
        &self,
        pd: &QhcaPd,
        ev: rdma::SrqEvents,
        attr: &mut bindings::ib_srq_attr,
    ) -> Result<srq::QhcaSrq> {
        kobjects::create_srq(pd, ev, attr)
    }

    fn create_kernel_qp(
        &self,
        pd: &QhcaPd,
        ev: rdma::QpEvents,
        init: &mut bindings::ib_qp_init_attr,
        send_cq: &objects::QhcaCq,
        recv_cq: &objects::QhcaCq,
        srq: Option<&srq::QhcaSrq>,
    ) -> Result<(qp::QhcaQp, u32)> {
        kobjects::create_qp(pd, ev, init, send_cq, recv_cq, srq)
    }

    fn create_kernel_ah(&self, pd: &QhcaPd, av: &rdma::Av) -> Result<objects::QhcaAh> {
        objects::create_kernel_ah(pd, av)
    }

    fn poll_cq(
        &self,
        cq: &objects::QhcaCq,
        wc: &mut [MaybeUninit<bindings::ib_wc>],
    ) -> Result<usize> {
        Ok(cq.kernel_cq().ok_or(EINVAL)?.poll(wc))
    }

    fn req_notify_cq(
        &self,
        cq: &objects::QhcaCq,
        _solicited: bool,
        report_missed: bool,
    ) -> Result<bool> {
        Ok(cq.kernel_cq().ok_or(EINVAL)?.arm(report_missed))
    }

    fn post_send(
        &self,
        qp: &qp::QhcaQp,
        wrs: &mut dyn Iterator<Item = Result<rdma::SendWr<'_, objects::QhcaAh, objects::QhcaMr>>>,
    ) -> core::result::Result<(), (Error, usize)> {
        qp.kernel_qp().ok_or((EINVAL, 0))?.post_send(wrs)
    }

    fn post_recv(
        &self,
        qp: &qp::QhcaQp,
        wrs: &mut dyn Iterator<Item = Result<rdma::RecvWr<'_>>>,
    ) -> core::result::Result<(), (Error, usize)> {
        qp.kernel_qp().ok_or((EINVAL, 0))?.post_recv(wrs)
    }

    fn post_srq_recv(
        &self,
        s: &srq::QhcaSrq,
        wrs: &mut dyn Iterator<Item = Result<rdma::RecvWr<'_>>>,
    ) -> core::result::Result<(), (Error, usize)> {
        s.kernel_srq().ok_or((EINVAL, 0))?.post_recv(wrs)
    }

    fn add_gid(&self, gid: &rdma::GidAttr<'_>) -> Result {
        check_port(gid.port())?;
        if gid.gid_type() != rdma::GidType::RoceV2 {
            return Err(EINVAL);
        }
        let raw = gid.gid();
        let prefix = gid.ipv4_prefix([raw[12], raw[13], raw[14], raw[15]]);
        self.dev.core_add_gid(gid.index(), raw, prefix)
    }

    fn del_gid(&self, gid: &rdma::GidAttr<'_>) -> Result {
        check_port(gid.port())?;
        self.dev.core_del_gid(gid.index())
    }

    fn port_counter_names(&self) -> &'static [bindings::rdma_stat_desc] {
        PORT_COUNTERS.descs()
    }

    fn port_counters(&self, port: u32, out: &mut [u64]) -> Result {
        check_port(port)?;
        let c = self.dev.query_port()?.counters;
        let values = [
            c.tx_frames,
            c.tx_bytes,
            c.rx_frames,
            c.rx_bytes,
            c.tx_no_route,
            c.tx_no_neigh,
            c.rx_malformed,
            c.rx_bad_icrc,
            c.rx_not_ours,
            c.rx_oversize,
            c.arp_rx,
            c.arp_tx,
            c.test_dropped,
            c.test_duplicated,
            c.test_reordered,
            c.rx_forged,
            c.eth_tx_frames,
            c.eth_rx_frames,
            c.eth_rx_dropped,
        ];
        for (o, v) in out.iter_mut().zip(values) {
            *o = v;
        }
        Ok(())
    }

    fn fw_version(&self, w: &mut dyn Write) -> core::fmt::Result {
        let Ok(a) = self.dev.attr() else {
            return Ok(());
        };
        let v = a.fw_version;
        write!(w, "{}.{}.{}", v >> 32, (v >> 16) & 0xffff, v & 0xffff)
    }
}
