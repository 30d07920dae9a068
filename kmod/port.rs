// SPDX-License-Identifier: GPL-2.0

//! The device's one port (`QHCA_CAP_PORT`): its attributes (`QHCA_CMD_QUERY_PORT`, which the
//! core's QUERY_PORT and the driver's own QUERY_PORT method read), and the RDMA core's
//! `add_gid`/`del_gid`, which make the device's GID table follow the core's (the addresses of
//! the port's netdev, [`crate::netdev`]) index for index (`QHCA_CMD_SET_GID`).
//!
//! Neither names an object of a context, so neither needs a doorbell page: the commands are the
//! driver's. What the device answers is checked before user space sees it: the table's length
//! is the ABI's at most, and an entry the device marks invalid, or that lies beyond that length,
//! reads as all zero.

use crate::{cmdq::Cmd, device::QhcaDevice, uapi};
use kernel::{
    dma::{Coherent, CoherentBox},
    io::Io,
    prelude::*,
    transmute::FromBytes,
};

/// Entries in the port's GID table (`QHCA_GID_TABLE_LEN`).
const GID_TABLE_LEN: usize = uapi::QHCA_GID_TABLE_LEN as usize;

/// An IPv4 address's prefix is at most 32 bits.
const IPV4_PREFIX_MAX: u8 = 32;

const _: () = {
    use core::mem::size_of;
    assert!(size_of::<uapi::qhca_gid_entry>() == 24);
    assert!(size_of::<uapi::qhca_port_counters>() == 160);
    assert!(size_of::<uapi::qhca_port_attr>() == 560);
    assert!(GID_TABLE_LEN <= u8::MAX as usize);
    // It overlays `qhca_cmd.in[]`, which must hold all of it.
    assert!(
        size_of::<uapi::qhca_cmd_set_gid>()
            <= size_of::<uapi::qhca_cmd>() - core::mem::offset_of!(uapi::qhca_cmd, in_)
    );
    // Every counter is a u64, reserved ones included: converted as a run of u64s.
    assert!(size_of::<uapi::qhca_port_counters>() % 8 == 0);
};

/// True if `gid` is IPv4-mapped (`::ffff:a.b.c.d`, `QHCA_GID_V4_PREFIX_*`).
fn gid_is_v4(gid: &[u8; 16]) -> bool {
    let mut hi = [0u8; 8];
    let mut lo = [0u8; 8];
    hi.copy_from_slice(&gid[..8]);
    lo.copy_from_slice(&gid[8..]);
    u64::from_be_bytes(hi) == u64::from(uapi::QHCA_GID_V4_PREFIX_HI)
        && u64::from_be_bytes(lo) & 0xffff_ffff_0000_0000 == uapi::QHCA_GID_V4_PREFIX_LO
}

/// What QUERY_PORT answered (little-endian), in CPU byte order and with nothing user space may
/// not see: the table's length at most the ABI's, entries the device does not mark valid (or
/// beyond that length) all zero, reserved fields zero.
fn port_attr_from_le(le: &uapi::qhca_port_attr) -> uapi::qhca_port_attr {
    let mut a = uapi::qhca_port_attr {
        mac: le.mac,
        state: le.state,
        wire: le.wire,
        max_mtu: le.max_mtu,
        gid_tbl_len: le.gid_tbl_len.min(GID_TABLE_LEN as u8),
        ..Default::default()
    };
    let c = &le.counters;
    a.counters = uapi::qhca_port_counters {
        tx_frames: u64::from_le(c.tx_frames),
        tx_bytes: u64::from_le(c.tx_bytes),
        rx_frames: u64::from_le(c.rx_frames),
        rx_bytes: u64::from_le(c.rx_bytes),
        tx_no_route: u64::from_le(c.tx_no_route),
        tx_no_neigh: u64::from_le(c.tx_no_neigh),
        rx_malformed: u64::from_le(c.rx_malformed),
        rx_bad_icrc: u64::from_le(c.rx_bad_icrc),
        rx_not_ours: u64::from_le(c.rx_not_ours),
        rx_oversize: u64::from_le(c.rx_oversize),
        arp_rx: u64::from_le(c.arp_rx),
        arp_tx: u64::from_le(c.arp_tx),
        test_dropped: u64::from_le(c.test_dropped),
        test_duplicated: u64::from_le(c.test_duplicated),
        test_reordered: u64::from_le(c.test_reordered),
        rx_forged: u64::from_le(c.rx_forged),
        eth_tx_frames: u64::from_le(c.eth_tx_frames),
        eth_rx_frames: u64::from_le(c.eth_rx_frames),
        eth_rx_dropped: u64::from_le(c.eth_rx_dropped),
        rsvd: [0; 1],
    };
    let len = usize::from(a.gid_tbl_len);
    for (out, e) in a.gids.iter_mut().zip(le.gids.iter()).take(len) {
        if u32::from(e.flags) & uapi::QHCA_GID_VALID != 0 {
            *out = uapi::qhca_gid_entry {
                gid: e.gid,
                flags: uapi::QHCA_GID_VALID as u8,
                prefix_len: e.prefix_len.min(128),
                rsvd: [0; 6],
            };
        }
    }
    a
}

impl QhcaDevice {
    /// `EOPNOTSUPP` unless the device has a port (`QHCA_CAP_PORT`).
    fn check_port_cap(&self) -> Result {
        if self.attr()?.caps & u64::from(uapi::QHCA_CAP_PORT) == 0 {
            return Err(EOPNOTSUPP);
        }
        Ok(())
    }

    /// Runs QUERY_PORT: the port's MAC, state, wire, counters and GID table, checked (see
    /// [`port_attr_from_le`]).
    ///
    /// # Errors
    ///
    /// `EOPNOTSUPP` without a port, `ENODEV` after unbind, `EIO` after a device failure.
    pub(crate) fn query_port(&self) -> Result<uapi::qhca_port_attr> {
        const SIZE: usize = core::mem::size_of::<uapi::qhca_port_attr>();
        self.check_port_cap()?;
        let bytes = self.with_bound(|bound| {
            let out: Coherent<[u8]> =
                CoherentBox::<[u8]>::zeroed_slice(bound, SIZE, GFP_KERNEL)?.into();
            self.exec(Cmd::new(uapi::QHCA_CMD_QUERY_PORT).output(out.dma_address(), SIZE as u32))?;
            let mut bytes = [0u8; SIZE];
            (&out).copy_to_slice(&mut bytes);
            Ok(bytes)
        })?;
        let le = uapi::qhca_port_attr::from_bytes_copy(&bytes).ok_or(EIO)?;
        Ok(port_attr_from_le(&le))
    }

    /// The RDMA core put `gid` at `index` of its GID table (`add_gid`): the device's entry
    /// `index` becomes it, with `prefix` as its subnet prefix. Entry 0 is the device's fixed
    /// link-local GID, which the core's default GID (`fe80::` and the MAC's EUI-64) must be.
    ///
    /// # Errors
    ///
    /// `EINVAL` for an index beyond the table, or a default GID that is not entry 0 (a node
    /// GUID that is not the MAC's EUI-64); `EOPNOTSUPP` for a GID that is not IPv4-mapped (the
    /// device takes no other in this version); what the device answers.
    pub(crate) fn core_add_gid(&self, index: u32, gid: [u8; 16], prefix: u8) -> Result {
        let i = usize::try_from(index).map_err(|_| EINVAL)?;
        if i >= GID_TABLE_LEN {
            return Err(EINVAL);
        }
        let mut core = self.core_gids.lock();
        let port = self.query_port()?;
        let held = u32::from(port.gids[i].flags) & uapi::QHCA_GID_VALID != 0;
        if i == 0 {
            if !held || port.gids[0].gid != gid {
                dev_warn!(
                    self.dev(),
                    "qhca{}: the port's default GID is not the device's GID 0 (node GUID other than the MAC's EUI-64?)\n",
                    self.instance
                );
                return Err(EINVAL);
            }
        } else {
            if !gid_is_v4(&gid) {
                return Err(EOPNOTSUPP);
            }
            let entry = uapi::qhca_gid_entry {
                gid,
                flags: uapi::QHCA_GID_VALID as u8,
                prefix_len: prefix.min(IPV4_PREFIX_MAX),
                rsvd: [0; 6],
            };
            self.set_gid(index, &entry)?;
        }
        *core |= 1 << i;
        Ok(())
    }

    /// The RDMA core took entry `index` out of its table (`del_gid`): the device's entry goes
    /// too (entry 0 stays: it is fixed). Once the device is unbound or stopped there is nothing
    /// left to clear.
    pub(crate) fn core_del_gid(&self, index: u32) -> Result {
        let i = usize::try_from(index).map_err(|_| EINVAL)?;
        if i >= GID_TABLE_LEN {
            return Err(EINVAL);
        }
        let mut core = self.core_gids.lock();
        if *core & (1 << i) == 0 {
            return Ok(());
        }
        if i != 0 {
            match self.set_gid(index, &uapi::qhca_gid_entry::default()) {
                Ok(()) => {}
                Err(e) if e == ENODEV || self.is_stopped() => {}
                Err(e) => return Err(e),
            }
        }
        *core &= !(1 << i);
        Ok(())
    }

    /// Runs SET_GID: entry `index` (1 .. `QHCA_GID_TABLE_LEN` - 1) becomes `entry`. The caller
    /// checked the index, and `entry` is empty or an IPv4-mapped GID with a prefix of at most
    /// 32 bits.
    ///
    /// # Errors
    ///
    /// `EINVAL` for what the device refuses (not a unicast address, already in the table),
    /// `ENODEV` after unbind, `EIO` after a device failure.
    fn set_gid(&self, index: u32, entry: &uapi::qhca_gid_entry) -> Result {
        let args = uapi::qhca_cmd_set_gid {
            index: index.to_le(),
            rsvd0: 0,
            entry: *entry,
            rsvd1: 0,
        };
        self.with_bound(|_| {
            self.exec(Cmd::new(uapi::QHCA_CMD_SET_GID).input_struct(&args))?;
            Ok(())
        })
    }
}
