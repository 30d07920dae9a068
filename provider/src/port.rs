// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The device's one port (`QHCA_CAP_PORT`): its MAC address, state, wire, counters and GID
//! table ([`Context::query_port`]). The table is the RDMA core's: the addresses of the port's
//! netdev (`ip addr add 10.0.0.1/24 dev enp0s10` needs `CAP_NET_ADMIN`, as for any network
//! interface), index for index.
//!
//! ```no_run
//! # fn main() -> qhca::Result<()> {
//! let ctx = qhca::devices()?[0].open()?;
//! for e in ctx.query_port()?.gids {
//!     println!("gid {} {}", e.index, e.gid); // gid 0 fe80:..., gid 1 ::ffff:10.0.0.1
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Entry 0 of the table is fixed: the link-local GID (`fe80::/64` and the node GUID,
//! [`Context::gid`]). Entries 1.. hold IPv4 addresses as IPv4-mapped GIDs
//! ([`Gid::from_ipv4`]); an address vector ([`crate::AhAttr`]) names one by its index
//! (`sgid_index`) to send from it.

use std::fmt;
use std::net::Ipv4Addr;

use qhca_uapi::{
    qhca_ioc_query_port, qhca_port_attr, qhca_port_counters, QHCA_GID_VALID, QHCA_PORT_ACTIVE,
    QHCA_PORT_DOWN, QHCA_WIRE_NONE, QHCA_WIRE_ROCEV2,
};

use crate::ah::{Gid, GID_TABLE_LEN};
use crate::context::Context;
use crate::error::Result;
use crate::request::Request;

/// The port's state (`enum qhca_port_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PortState {
    /// The port's netdev has its link down.
    Down,
    /// Up.
    Active,
    /// A value this ABI version does not define.
    Unknown(u8),
}

impl PortState {
    /// Decodes a raw value.
    pub fn from_raw(v: u8) -> PortState {
        match u32::from(v) {
            QHCA_PORT_DOWN => PortState::Down,
            QHCA_PORT_ACTIVE => PortState::Active,
            _ => PortState::Unknown(v),
        }
    }
}

/// As `ibv_devinfo` prints a port's state: `PORT_ACTIVE`, `PORT_DOWN`.
impl fmt::Display for PortState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortState::Down => f.write_str("PORT_DOWN"),
            PortState::Active => f.write_str("PORT_ACTIVE"),
            PortState::Unknown(v) => write!(f, "unknown ({v})"),
        }
    }
}

/// What carries the port's packets off the device (`enum qhca_port_wire`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Wire {
    /// No netdev: only the device's own GIDs are reachable.
    None,
    /// A QEMU netdev carrying RoCEv2 frames.
    RoceV2,
    /// A value this ABI version does not define.
    Unknown(u8),
}

impl Wire {
    /// Decodes a raw value.
    pub fn from_raw(v: u8) -> Wire {
        match u32::from(v) {
            QHCA_WIRE_NONE => Wire::None,
            QHCA_WIRE_ROCEV2 => Wire::RoceV2,
            _ => Wire::Unknown(v),
        }
    }
}

/// `none (loopback only)`, `RoCEv2`.
impl fmt::Display for Wire {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Wire::None => f.write_str("none (loopback only)"),
            Wire::RoceV2 => f.write_str("RoCEv2"),
            Wire::Unknown(v) => write!(f, "unknown ({v})"),
        }
    }
}

/// A valid entry of the port's GID table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GidEntry {
    /// Its index: what an address vector's `sgid_index` names.
    pub index: u8,
    /// The GID.
    pub gid: Gid,
    /// The address's subnet prefix: 64 for the link-local GID, 0..=32 for an IPv4 address
    /// (shown, not routed on).
    pub prefix_len: u8,
}

impl GidEntry {
    /// The IPv4 address of an IPv4 entry.
    pub fn ipv4(&self) -> Option<Ipv4Addr> {
        self.gid.ipv4()
    }
}

/// What the port counted since the device was reset (`struct qhca_port_counters`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PortCounters {
    /// RoCEv2 frames sent.
    pub tx_frames: u64,
    /// Their bytes, Ethernet header to ICRC.
    pub tx_bytes: u64,
    /// RoCEv2 frames accepted.
    pub rx_frames: u64,
    /// Their bytes.
    pub rx_bytes: u64,
    /// Packets for a GID the wire cannot reach (dropped).
    pub tx_no_route: u64,
    /// Packets dropped waiting for a neighbour's MAC.
    pub tx_no_neigh: u64,
    /// Frames whose headers do not parse or add up.
    pub rx_malformed: u64,
    /// Frames with a bad ICRC.
    pub rx_bad_icrc: u64,
    /// Frames for another MAC or address, or UDP to another port.
    pub rx_not_ours: u64,
    /// Frames whose payload is above the path MTU of 4096.
    pub rx_oversize: u64,
    /// ARP requests and replies, and IPv6 neighbour solicitations answered, received.
    pub arp_rx: u64,
    /// ARP requests and replies, and IPv6 neighbour advertisements, sent.
    pub arp_tx: u64,
    /// Frames the device's test property lost on purpose.
    pub test_dropped: u64,
    /// Frames it duplicated on purpose.
    pub test_duplicated: u64,
    /// Frames it reordered on purpose.
    pub test_reordered: u64,
    /// Frames (ARP too) dropped because they claimed to come from the port itself (its MAC or
    /// one of its addresses) or from no one host (an unspecified, loopback, multicast or
    /// broadcast source): loopback traffic never reaches the wire, so they are forged.
    pub rx_forged: u64,
    /// Frames the port's Ethernet QP (the driver's net_device) sent.
    pub eth_tx_frames: u64,
    /// Frames delivered to it.
    pub eth_rx_frames: u64,
    /// Frames for it that found no receive buffer, or one too small.
    pub eth_rx_dropped: u64,
}

impl PortCounters {
    /// From the ABI struct.
    pub fn from_raw(c: &qhca_port_counters) -> PortCounters {
        PortCounters {
            tx_frames: c.tx_frames,
            tx_bytes: c.tx_bytes,
            rx_frames: c.rx_frames,
            rx_bytes: c.rx_bytes,
            tx_no_route: c.tx_no_route,
            tx_no_neigh: c.tx_no_neigh,
            rx_malformed: c.rx_malformed,
            rx_bad_icrc: c.rx_bad_icrc,
            rx_not_ours: c.rx_not_ours,
            rx_oversize: c.rx_oversize,
            arp_rx: c.arp_rx,
            arp_tx: c.arp_tx,
            test_dropped: c.test_dropped,
            test_duplicated: c.test_duplicated,
            test_reordered: c.test_reordered,
            rx_forged: c.rx_forged,
            eth_tx_frames: c.eth_tx_frames,
            eth_rx_frames: c.eth_rx_frames,
            eth_rx_dropped: c.eth_rx_dropped,
        }
    }

    /// Every counter with its name, in the ABI's order (for tools that list them).
    pub fn named(&self) -> [(&'static str, u64); 19] {
        [
            ("tx_frames", self.tx_frames),
            ("tx_bytes", self.tx_bytes),
            ("rx_frames", self.rx_frames),
            ("rx_bytes", self.rx_bytes),
            ("tx_no_route", self.tx_no_route),
            ("tx_no_neigh", self.tx_no_neigh),
            ("rx_malformed", self.rx_malformed),
            ("rx_bad_icrc", self.rx_bad_icrc),
            ("rx_not_ours", self.rx_not_ours),
            ("rx_oversize", self.rx_oversize),
            ("arp_rx", self.arp_rx),
            ("arp_tx", self.arp_tx),
            ("test_dropped", self.test_dropped),
            ("test_duplicated", self.test_duplicated),
            ("test_reordered", self.test_reordered),
            ("rx_forged", self.rx_forged),
            ("eth_tx_frames", self.eth_tx_frames),
            ("eth_rx_frames", self.eth_rx_frames),
            ("eth_rx_dropped", self.eth_rx_dropped),
        ]
    }
}

/// The port's attributes (`QUERY_PORT`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortAttr {
    /// The MAC address.
    pub mac: [u8; 6],
    /// Up or down.
    pub state: PortState,
    /// What carries packets off the device.
    pub wire: Wire,
    /// The largest path MTU, in bytes (4096).
    pub max_mtu: u32,
    /// Entries in the GID table, valid or not ([`GID_TABLE_LEN`]).
    pub gid_tbl_len: u8,
    /// What the port counted.
    pub counters: PortCounters,
    /// The valid entries of the GID table, by index.
    pub gids: Vec<GidEntry>,
}

impl PortAttr {
    /// From the ABI struct: entries not marked valid, or beyond `gid_tbl_len`, are left out.
    pub fn from_raw(a: &qhca_port_attr) -> PortAttr {
        let len = usize::from(a.gid_tbl_len).min(GID_TABLE_LEN);
        let gids = a
            .gids
            .iter()
            .take(len)
            .enumerate()
            .filter(|(_, e)| u32::from(e.flags) & QHCA_GID_VALID != 0)
            .map(|(i, e)| GidEntry {
                index: i as u8,
                gid: Gid { raw: e.gid },
                prefix_len: e.prefix_len,
            })
            .collect();
        PortAttr {
            mac: a.mac,
            state: PortState::from_raw(a.state),
            wire: Wire::from_raw(a.wire),
            max_mtu: 1u32.checked_shl(a.max_mtu.into()).unwrap_or(0),
            gid_tbl_len: len as u8,
            counters: PortCounters::from_raw(&a.counters),
            gids,
        }
    }

    /// The MAC address as `52:54:00:12:34:56`.
    pub fn mac_string(&self) -> String {
        let m = &self.mac;
        format!(
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }

    /// The valid entry at `index`.
    pub fn gid(&self, index: u8) -> Option<&GidEntry> {
        self.gids.iter().find(|e| e.index == index)
    }

    /// The entry that holds `gid`.
    pub fn find(&self, gid: &Gid) -> Option<&GidEntry> {
        self.gids.iter().find(|e| e.gid == *gid)
    }

    /// The lowest index an address may be set at that holds none (1 and up; 0 is fixed).
    pub fn free_index(&self) -> Option<u8> {
        (1..self.gid_tbl_len).find(|&i| self.gid(i).is_none())
    }
}

impl Context {
    /// `QUERY_PORT`: the port's MAC, state, wire, counters and valid GIDs. Any context may
    /// ask.
    ///
    /// Fails with [`Error::Ioctl`] (`EOPNOTSUPP`: a device without a port, `ENOTTY`: a driver
    /// from before it).
    pub fn query_port(&self) -> Result<PortAttr> {
        let mut req = qhca_ioc_query_port::request();
        self.cmd_query_port(&mut req)?;
        Ok(PortAttr::from_raw(&req.attr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qhca_uapi::qhca_gid_entry;

    fn entry(gid: Gid, prefix_len: u8) -> qhca_gid_entry {
        qhca_gid_entry {
            gid: gid.raw,
            flags: QHCA_GID_VALID as u8,
            prefix_len,
            rsvd: [0; 6],
        }
    }

    #[test]
    fn port_attr_keeps_the_valid_entries_by_index() {
        let mut raw = qhca_port_attr {
            mac: [0x52, 0x54, 0, 0x12, 0x34, 0x56],
            state: QHCA_PORT_ACTIVE as u8,
            wire: QHCA_WIRE_ROCEV2 as u8,
            max_mtu: 12,
            gid_tbl_len: 16,
            ..Default::default()
        };
        raw.counters.tx_frames = 7;
        raw.counters.test_reordered = 9;
        raw.counters.rx_forged = 11;
        raw.gids[0] = entry(Gid::from_guid(0x5054_00ff_fe12_3456), 64);
        raw.gids[3] = entry(Gid::from_ipv4(Ipv4Addr::new(10, 7, 0, 3)), 24);
        // Not valid: left out whatever it holds.
        raw.gids[4] = qhca_gid_entry {
            flags: 0,
            ..entry(Gid::from_ipv4(Ipv4Addr::new(10, 7, 0, 4)), 24)
        };
        let a = PortAttr::from_raw(&raw);
        assert_eq!(a.mac_string(), "52:54:00:12:34:56");
        assert_eq!(
            (a.state, a.wire, a.max_mtu),
            (PortState::Active, Wire::RoceV2, 4096)
        );
        assert_eq!((a.counters.tx_frames, a.counters.test_reordered), (7, 9));
        assert_eq!(a.counters.named()[0], ("tx_frames", 7));
        assert_eq!(a.counters.named()[15], ("rx_forged", 11));
        assert_eq!(a.gids.len(), 2);
        assert_eq!(a.gid(3).unwrap().ipv4(), Some(Ipv4Addr::new(10, 7, 0, 3)));
        assert_eq!(a.gid(3).unwrap().prefix_len, 24);
        assert_eq!(a.gid(0).unwrap().prefix_len, 64);
        assert!(a.gid(4).is_none());
        assert_eq!(
            a.find(&Gid::from_ipv4(Ipv4Addr::new(10, 7, 0, 3)))
                .map(|e| e.index),
            Some(3)
        );
        assert_eq!(a.free_index(), Some(1));
        // A table longer than the ABI's is cut to it; entries beyond a shorter one are not
        // read.
        raw.gid_tbl_len = 200;
        assert_eq!(PortAttr::from_raw(&raw).gid_tbl_len, 16);
        raw.gid_tbl_len = 2;
        let short = PortAttr::from_raw(&raw);
        assert_eq!(short.gids.len(), 1);
        assert_eq!(short.free_index(), Some(1));
        raw.gid_tbl_len = 1;
        assert_eq!(PortAttr::from_raw(&raw).free_index(), None);
        raw.state = 9;
        raw.wire = 7;
        raw.max_mtu = 200;
        let odd = PortAttr::from_raw(&raw);
        assert_eq!(
            (odd.state, odd.wire),
            (PortState::Unknown(9), Wire::Unknown(7))
        );
        assert_eq!(odd.max_mtu, 0);
        assert_eq!(PortState::Down.to_string(), "PORT_DOWN");
        assert_eq!(Wire::None.to_string(), "none (loopback only)");
    }
}
