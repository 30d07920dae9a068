// SPDX-License-Identifier: GPL-2.0

//! The device as the RDMA core sees it: `qhcaN` in `/sys/class/infiniband`, rdma netlink and the
//! `rdma` tool, with the device's and the port's attributes translated from qhca's to the core's.
//!
//! The `ib_device` is registered beside `/dev/qhcaN`, which still carries every verb (issue 26
//! moves them over step by step, `docs/design-ib-device.md`). A user context (an open of the
//! uverbs device) is one of the device's doorbell pages, charged to its user as an open of
//! `/dev/qhcaN` is, and offers that page to `mmap(2)` (`struct qhca_ib_alloc_ucontext_resp`);
//! it creates no verbs objects yet. No kernel verbs either (see [`crate::rdma`]). The port's GIDs
//! are the core's, from the addresses of the port's netdev ([`crate::netdev`]): its default GID
//! is the device's fixed entry 0, and each IPv4 address becomes the same entry of the device's
//! table (`add_gid`); IPv6 addresses other than the link-local one are refused (the device takes
//! IPv4-mapped GIDs only in this version), and the core logs that it could not add them.

use crate::{
    cmdq::Cmd,
    device::QhcaDevice,
    limits::{Pool, Quota},
    rdma, uapi,
    verbs::{destroy_in_device, device_handle},
};
use core::fmt::Write;
use kernel::{bindings, prelude::*, sync::Arc, task::Kuid};

/// The driver data of a qhca `ib_device`.
pub(crate) struct QhcaIb {
    dev: Arc<QhcaDevice>,
}

impl QhcaIb {
    pub(crate) fn new(dev: Arc<QhcaDevice>) -> Self {
        Self { dev }
    }
}

/// A doorbell page of the device, freed when dropped.
struct Uar {
    dev: Arc<QhcaDevice>,
    index: u32,
}

impl Uar {
    fn alloc(dev: &Arc<QhcaDevice>) -> Result<Self> {
        let index = dev.with_bound(|_| dev.alloc_uar())?;
        Ok(Self {
            dev: dev.clone(),
            index,
        })
    }
}

impl Drop for Uar {
    fn drop(&mut self) {
        self.dev.free_uar(self.index);
    }
}

/// A user context: its doorbell page, offered to `mmap(2)`. Dropped in declaration order: no
/// new mapping of the page (the core zapped or the process unmapped every old one before the
/// context goes), then the page goes back to the device, then the user's charge. The core
/// destroys the context's objects before the context.
pub(crate) struct QhcaUContext {
    _db: rdma::IoMapping,
    uar: Uar,
    quota: Quota,
}

/// A protection domain: the device's PD of the context's doorbell page.
pub(crate) struct QhcaPd {
    pdn: u32,
}

/// The only port.
const PORT: u32 = 1;

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

impl rdma::Driver for QhcaIb {
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
        attr.max_pkeys = 1;
        // 4.096 µs × 2^15: the longest an ACK may take under TCG with the engine busy.
        attr.local_ca_ack_delay = 15;
        let mut flags = bindings::ib_device_cap_flags_IB_DEVICE_RC_RNR_NAK_GEN as u64;
        if has(uapi::QHCA_CAP_RC) {
            attr.atomic_cap = bindings::ib_atomic_cap_IB_ATOMIC_HCA;
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
        imm.core_cap_flags = rdma::PORT_CAPS_ROCE_V2;
        imm.max_mad_size = 0;
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
        let uar = Uar::alloc(dev)?;
        // SAFETY: `uar.index` is the page the device just allocated to this context, below
        // `num_uars`, which probe checked against BAR2's length: one page of BAR2, this
        // context's own until `uar` is dropped, which the context does only after its mapping
        // entry is removed and its mappings are gone (`QhcaUContext`'s field order, and
        // `dealloc_ucontext` runs only then). Unbind unregisters the device, which
        // disassociates (zaps) every context's mappings, before the driver lets go of BAR2.
        let db = unsafe {
            rdma::IoMapping::new(
                uctx,
                dev.uar_phys(uar.index),
                uapi::QHCA_UAR_PAGE_SIZE as usize,
            )
        }?;
        udata.respond(&uapi::qhca_ib_alloc_ucontext_resp {
            comp_mask: 0,
            uar_index: uar.index,
            db_mmap_offset: db.offset(),
            rsvd: [0; 2],
        })?;
        Ok(QhcaUContext {
            _db: db,
            uar,
            quota,
        })
    }

    fn dealloc_ucontext(&self, ctx: QhcaUContext) {
        drop(ctx);
    }

    type Pd = QhcaPd;

    fn alloc_pd(&self, uctx: &QhcaUContext, udata: &mut rdma::Udata<'_>) -> Result<QhcaPd> {
        udata.input_zero()?;
        let dev = &*self.dev;
        uctx.quota.charge(dev, Pool::Pds, 1)?;
        let cmd = Cmd::new(uapi::QHCA_CMD_ALLOC_PD).input(0, uctx.uar.index.into());
        let pdn = dev
            .with_bound(|_| {
                let raw = dev.exec(cmd)?.data[0];
                device_handle(dev, "pdn", raw).inspect_err(|_| dev.declare_dead())
            })
            .inspect_err(|_| uctx.quota.uncharge(Pool::Pds, 1))?;
        let pd = QhcaPd { pdn };
        if let Err(e) = udata.respond(&uapi::qhca_ib_alloc_pd_resp { pdn, rsvd: 0 }) {
            // The core never hears of this PD: it goes now.
            let _ = self.dealloc_pd(uctx, &pd);
            return Err(e);
        }
        Ok(pd)
    }

    fn dealloc_pd(&self, uctx: &QhcaUContext, pd: &QhcaPd) -> Result {
        let dev = &*self.dev;
        let r = dev.with_bound(|_| {
            destroy_in_device(dev, uctx.uar.index, uapi::QHCA_CMD_DEALLOC_PD, pd.pdn, 0)
        });
        match r {
            Ok(()) => {}
            // Unbound or stopped: the device forgot every PD.
            Err(e) if e == ENODEV || dev.is_stopped() => {}
            Err(e) => return Err(e),
        }
        uctx.quota.uncharge(Pool::Pds, 1);
        Ok(())
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

    fn fw_version(&self, w: &mut dyn Write) -> core::fmt::Result {
        let Ok(a) = self.dev.attr() else {
            return Ok(());
        };
        let v = a.fw_version;
        write!(w, "{}.{}.{}", v >> 32, (v >> 16) & 0xffff, v & 0xffff)
    }
}
