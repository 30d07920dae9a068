// SPDX-License-Identifier: GPL-2.0

//! The device as the RDMA core sees it: `qhcaN` in `/sys/class/infiniband`, rdma netlink and the
//! `rdma` tool, with the device's and the port's attributes translated from qhca's to the core's.
//!
//! This is the first step of moving qhca into the RDMA subsystem (issue 26): the `ib_device` is
//! registered beside `/dev/qhcaN`, which still carries every verb. It has no user contexts yet
//! (so no uverbs node: libibverbs does not list it) and no kernel verbs (see
//! [`crate::rdma`]); the port's GID table in the core stays empty until the port has a netdev
//! (the RoCE NIC issue) or the driver takes `add_gid`.

use crate::{device::QhcaDevice, rdma, uapi};
use core::fmt::Write;
use kernel::{bindings, prelude::*, sync::Arc};

/// The driver data of a qhca `ib_device`.
pub(crate) struct QhcaIb {
    dev: Arc<QhcaDevice>,
}

impl QhcaIb {
    pub(crate) fn new(dev: Arc<QhcaDevice>) -> Self {
        Self { dev }
    }
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

    fn fw_version(&self, w: &mut dyn Write) -> core::fmt::Result {
        let Ok(a) = self.dev.attr() else {
            return Ok(());
        };
        let v = a.fw_version;
        write!(w, "{}.{}.{}", v >> 32, (v >> 16) & 0xffff, v & 0xffff)
    }
}
