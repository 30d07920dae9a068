// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! What `GET_CONTEXT` answers (`struct qhca_ioc_query_device`), as a plain Rust struct.

use qhca_uapi::{qhca_ioc_query_device, CAP_NAMES, CAP_PORT, CAP_SRQ, CAP_UD, QHCA_ABI_VERSION};

use crate::ah::Gid;
use crate::error::{Error, Result};

/// The device's attributes and this context's resources, from `GET_CONTEXT`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DeviceAttr {
    /// The driver's ABI version (checked: equals [`QHCA_ABI_VERSION`]).
    pub abi_version: u32,
    /// The ABI version the device itself reports (`attr.abi_version`).
    pub device_abi_version: u32,
    /// This context's doorbell page in BAR2 (what [`crate::Context::map_doorbell`] maps).
    pub uar_index: u32,
    /// Doorbell pages the device has in total.
    pub num_uars: u32,
    /// `QHCA_CAP_*` bits; see [`DeviceAttr::cap_names`].
    pub caps: u64,
    /// Node GUID, as a native integer; see [`DeviceAttr::node_guid_string`].
    pub node_guid: u64,
    /// Firmware version, `major << 32 | minor << 16 | patch`; see
    /// [`DeviceAttr::fw_version_string`].
    pub fw_version: u64,
    /// PCI vendor ID.
    pub vendor_id: u32,
    /// PCI device ID.
    pub vendor_part_id: u32,
    /// Hardware revision.
    pub hw_ver: u32,
    /// Largest number of protection domains.
    pub max_pd: u32,
    /// Largest number of completion queues.
    pub max_cq: u32,
    /// Largest number of entries in one completion queue.
    pub max_cqe: u32,
    /// Largest number of queue pairs.
    pub max_qp: u32,
    /// Largest number of outstanding work requests on one queue.
    pub max_qp_wr: u32,
    /// Largest number of scatter/gather entries in one work request.
    pub max_sge: u32,
    /// Largest inline data in one send work request, in bytes.
    pub max_inline: u32,
    /// Largest number of memory regions.
    pub max_mr: u32,
    /// Largest number of memory windows (0: the device has none, no `QHCA_CAP_MW`).
    pub max_mw: u32,
    /// Largest number of address handles (0: the device has no UD, no `QHCA_CAP_UD`).
    pub max_ah: u32,
    /// Largest number of shared receive queues (0: the device has none, no `QHCA_CAP_SRQ`).
    pub max_srq: u32,
    /// Largest number of work requests in one shared receive queue (of up to
    /// [`DeviceAttr::max_sge`] SGEs each).
    pub max_srq_wr: u32,
    /// Largest responder resources of one QP (`max_dest_rd_atomic`): RDMA READs and atomics it
    /// accepts in flight.
    pub max_qp_rd_atom: u16,
    /// Largest initiator depth of one QP (`max_rd_atomic`): RDMA READs and atomics it keeps in
    /// flight.
    pub max_qp_init_rd_atom: u16,
    /// Largest memory region, in bytes.
    pub max_mr_size: u64,
    /// Supported page sizes: bit n set means 2^n bytes.
    pub page_size_cap: u64,
    /// On-demand paging, as `ibv_query_device_ex()`'s `odp_caps` (all zero without
    /// `QHCA_CAP_ODP`).
    pub odp_caps: OdpCaps,
}

/// What on-demand paging supports (`struct ibv_odp_caps`): see [`crate::OdpMr`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct OdpCaps {
    /// `QHCA_ODP_SUPPORT` (ODP regions), `QHCA_ODP_SUPPORT_IMPLICIT` (the implicit region).
    pub general_caps: u64,
    /// For RC QPs: `QHCA_ODP_SUPPORT_SEND`, `_RECV`, `_WRITE`, `_READ`, `_ATOMIC`.
    pub rc_odp_caps: u32,
    /// For UD QPs: `QHCA_ODP_SUPPORT_SEND` (on-demand receive buffers are never faulted in).
    pub ud_odp_caps: u32,
}

impl OdpCaps {
    /// ODP regions can be registered.
    pub fn supported(&self) -> bool {
        self.general_caps & u64::from(qhca_uapi::QHCA_ODP_SUPPORT) != 0
    }

    /// The implicit region can be registered.
    pub fn implicit(&self) -> bool {
        self.general_caps & u64::from(qhca_uapi::QHCA_ODP_SUPPORT_IMPLICIT) != 0
    }

    /// The names of the set RC bits (`SEND`, `RECV`, `WRITE`, `READ`, `ATOMIC`).
    pub fn rc_names(&self) -> Vec<&'static str> {
        Self::names(self.rc_odp_caps)
    }

    /// The names of the set UD bits (`SEND`).
    pub fn ud_names(&self) -> Vec<&'static str> {
        Self::names(self.ud_odp_caps)
    }

    fn names(bits: u32) -> Vec<&'static str> {
        [
            (qhca_uapi::QHCA_ODP_SUPPORT_SEND, "SEND"),
            (qhca_uapi::QHCA_ODP_SUPPORT_RECV, "RECV"),
            (qhca_uapi::QHCA_ODP_SUPPORT_WRITE, "WRITE"),
            (qhca_uapi::QHCA_ODP_SUPPORT_READ, "READ"),
            (qhca_uapi::QHCA_ODP_SUPPORT_ATOMIC, "ATOMIC"),
            (qhca_uapi::QHCA_ODP_SUPPORT_SRQ_RECV, "SRQ_RECV"),
        ]
        .into_iter()
        .filter(|(b, _)| bits & b != 0)
        .map(|(_, n)| n)
        .collect()
    }
}

impl DeviceAttr {
    /// Converts the driver's answer, rejecting an ABI version other than this provider's.
    pub fn from_ioctl(resp: &qhca_ioc_query_device) -> Result<Self> {
        if resp.abi_version != QHCA_ABI_VERSION {
            return Err(Error::AbiMismatch {
                driver: resp.abi_version,
                provider: QHCA_ABI_VERSION,
            });
        }
        let a = &resp.attr;
        Ok(Self {
            abi_version: resp.abi_version,
            device_abi_version: a.abi_version,
            uar_index: resp.uar_index,
            num_uars: a.num_uars,
            caps: a.caps,
            node_guid: a.node_guid,
            fw_version: a.fw_version,
            vendor_id: a.vendor_id,
            vendor_part_id: a.vendor_part_id,
            hw_ver: a.hw_ver,
            max_pd: a.max_pd,
            max_cq: a.max_cq,
            max_cqe: a.max_cqe,
            max_qp: a.max_qp,
            max_qp_wr: a.max_qp_wr,
            max_sge: a.max_sge,
            max_inline: a.max_inline,
            max_mr: a.max_mr,
            max_mw: a.max_mw,
            max_ah: a.max_ah,
            max_srq: a.max_srq,
            max_srq_wr: a.max_srq_wr,
            max_qp_rd_atom: a.max_qp_rd_atom,
            max_qp_init_rd_atom: a.max_qp_init_rd_atom,
            max_mr_size: a.max_mr_size,
            page_size_cap: a.page_size_cap,
            odp_caps: OdpCaps {
                general_caps: a.odp_general_caps,
                rc_odp_caps: a.odp_rc_caps,
                ud_odp_caps: a.odp_ud_caps,
            },
        })
    }

    /// True if every bit of `cap` (a `QHCA_CAP_*` value) is set.
    pub fn has_cap(&self, cap: u64) -> bool {
        self.caps & cap == cap
    }

    /// True if the device has UD QPs and address handles (`QHCA_CAP_UD`).
    pub fn supports_ud(&self) -> bool {
        self.has_cap(CAP_UD)
    }

    /// True if the device has shared receive queues (`QHCA_CAP_SRQ`): [`crate::Srq`].
    pub fn supports_srq(&self) -> bool {
        self.has_cap(CAP_SRQ)
    }

    /// The device has a port with a GID table (`QHCA_CAP_PORT`): [`crate::Context::query_port`],
    /// IPv4 GIDs, address vectors on RC QPs.
    pub fn has_port(&self) -> bool {
        self.has_cap(CAP_PORT)
    }

    /// The GID of the device's port at index 0, the link-local one: `QHCA_GID_PREFIX` then the
    /// node GUID, big-endian ([`Gid::from_guid`]). What a peer's address handle names to reach
    /// it, unless it names one of the port's IPv4 GIDs ([`crate::Context::query_port`]).
    pub fn port_gid(&self) -> Gid {
        Gid::from_guid(self.node_guid)
    }

    /// The names of the capability bits that are set, lowest bit first; bits this provider does
    /// not know are shown as `BIT<n>`.
    pub fn cap_names(&self) -> Vec<String> {
        cap_names(self.caps)
    }

    /// `major.minor.patch`, e.g. `1.2.3`.
    pub fn fw_version_string(&self) -> String {
        fw_version_string(self.fw_version)
    }

    /// The GUID as InfiniBand tools print it, e.g. `5254:0012:3456:0001`.
    pub fn node_guid_string(&self) -> String {
        guid_string(self.node_guid)
    }
}

/// See [`DeviceAttr::cap_names`].
pub fn cap_names(caps: u64) -> Vec<String> {
    (0..64)
        .map(|bit| 1u64 << bit)
        .filter(|b| caps & b != 0)
        .map(|b| match CAP_NAMES.iter().find(|(v, _)| *v == b) {
            Some((_, name)) => (*name).to_owned(),
            None => format!("BIT{}", b.trailing_zeros()),
        })
        .collect()
}

/// See [`DeviceAttr::fw_version_string`].
pub fn fw_version_string(fw: u64) -> String {
    format!("{}.{}.{}", fw >> 32, (fw >> 16) & 0xffff, fw & 0xffff)
}

/// See [`DeviceAttr::node_guid_string`]: four groups of 16 bits, most significant first.
pub fn guid_string(guid: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        (guid >> 48) & 0xffff,
        (guid >> 32) & 0xffff,
        (guid >> 16) & 0xffff,
        guid & 0xffff
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use qhca_uapi::{qhca_device_attr, CAP_UAR_ISOLATION};

    fn sample() -> qhca_ioc_query_device {
        qhca_ioc_query_device {
            size: 160,
            comp_mask: 0,
            abi_version: QHCA_ABI_VERSION,
            uar_index: 3,
            rsvd_in: [0; 2],
            attr: qhca_device_attr {
                abi_version: QHCA_ABI_VERSION,
                num_uars: 16,
                caps: CAP_UAR_ISOLATION,
                node_guid: 0x5254_0012_3456_0001,
                fw_version: (1 << 32) | (2 << 16) | 3,
                vendor_id: 0x1af4,
                vendor_part_id: 0x10f0,
                hw_ver: 1,
                max_pd: 11,
                max_cq: 12,
                max_cqe: 13,
                max_qp: 14,
                max_qp_wr: 15,
                max_sge: 16,
                max_inline: 17,
                max_mr: 18,
                max_qp_rd_atom: 19,
                max_qp_init_rd_atom: 20,
                max_mr_size: 1 << 40,
                page_size_cap: 0x1000,
                odp_general_caps: 3,
                odp_rc_caps: 0x1f,
                odp_ud_caps: 1,
                max_mw: 21,
                max_ah: 22,
                max_srq: 23,
                max_srq_wr: 24,
            },
        }
    }

    #[test]
    fn converts_every_field() {
        let a = DeviceAttr::from_ioctl(&sample()).unwrap();
        assert_eq!(
            a,
            DeviceAttr {
                abi_version: 2,
                device_abi_version: 2,
                uar_index: 3,
                num_uars: 16,
                caps: 1,
                node_guid: 0x5254_0012_3456_0001,
                fw_version: 0x1_0002_0003,
                vendor_id: 0x1af4,
                vendor_part_id: 0x10f0,
                hw_ver: 1,
                max_pd: 11,
                max_cq: 12,
                max_cqe: 13,
                max_qp: 14,
                max_qp_wr: 15,
                max_sge: 16,
                max_inline: 17,
                max_mr: 18,
                max_mw: 21,
                max_ah: 22,
                max_srq: 23,
                max_srq_wr: 24,
                max_qp_rd_atom: 19,
                max_qp_init_rd_atom: 20,
                max_mr_size: 1 << 40,
                page_size_cap: 0x1000,
                odp_caps: OdpCaps {
                    general_caps: 3,
                    rc_odp_caps: 0x1f,
                    ud_odp_caps: 1,
                },
            }
        );
        assert!(a.odp_caps.supported() && a.odp_caps.implicit());
        assert_eq!(
            a.odp_caps.rc_names(),
            ["SEND", "RECV", "WRITE", "READ", "ATOMIC"]
        );
        assert_eq!(a.odp_caps.ud_names(), ["SEND"]);
        assert!(a.has_cap(CAP_UAR_ISOLATION));
        assert!(!a.supports_ud());
        assert!(!a.supports_srq());
        assert_eq!(
            a.port_gid().to_string(),
            "fe80:0000:0000:0000:5254:0012:3456:0001"
        );
        assert!(!a.has_cap(1 << 5));
    }

    #[test]
    fn rejects_other_abi_versions() {
        let mut r = sample();
        r.abi_version = QHCA_ABI_VERSION + 1;
        match DeviceAttr::from_ioctl(&r) {
            Err(Error::AbiMismatch { driver, provider }) => {
                assert_eq!(driver, QHCA_ABI_VERSION + 1);
                assert_eq!(provider, QHCA_ABI_VERSION);
            }
            other => panic!("expected AbiMismatch, got {other:?}"),
        }
        r.abi_version = 0;
        assert!(matches!(
            DeviceAttr::from_ioctl(&r),
            Err(Error::AbiMismatch { driver: 0, .. })
        ));
    }

    #[test]
    fn formats_fw_version() {
        assert_eq!(fw_version_string(0), "0.0.0");
        assert_eq!(fw_version_string((1 << 32) | (2 << 16) | 3), "1.2.3");
        assert_eq!(
            fw_version_string((10 << 32) | (0xffff << 16) | 0xffff),
            "10.65535.65535"
        );
        assert_eq!(fw_version_string(u64::MAX), "4294967295.65535.65535");
    }

    #[test]
    fn formats_guid_like_ibv_devinfo() {
        assert_eq!(guid_string(0), "0000:0000:0000:0000");
        assert_eq!(guid_string(0x5254_0012_3456_0001), "5254:0012:3456:0001");
        assert_eq!(guid_string(u64::MAX), "ffff:ffff:ffff:ffff");
        assert_eq!(guid_string(0x0002_c903_00a1_b2c3), "0002:c903:00a1:b2c3");
    }

    #[test]
    fn names_capabilities() {
        assert!(cap_names(0).is_empty());
        assert_eq!(cap_names(CAP_UAR_ISOLATION), ["UAR_ISOLATION"]);
        assert_eq!(cap_names(CAP_UD | 8), ["MW", "UD"]);
        assert_eq!(CAP_UD, 1 << 4);
        assert_eq!(
            cap_names(CAP_UAR_ISOLATION | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 63)),
            ["UAR_ISOLATION", "SRQ", "CMD_FLAGS", "BIT11", "BIT63"]
        );
    }
}
