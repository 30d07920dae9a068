// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The port from the test side (`qhca-abi.h`, "The port"): QUERY_PORT (`struct
//! qhca_port_attr`, decoded), SET_GID (`struct qhca_cmd_set_gid` in `in[]`), the GIDs the
//! tests use (a node GUID's link-local GID, an IPv4-mapped GID, a MAC's EUI-64), and the
//! address vector `struct qhca_ah_attr` that CREATE_AH and MODIFY_QP (`QHCA_QP_ATTR_AV`) take.

use core::mem::{offset_of, size_of};
use std::time::{Duration, Instant};

use qhca_uapi::*;

use crate::hca::Hca;
use crate::verbs::{in_words, obj_cmd, obj_cmd_out, MAILBOX};

pub const PORT_ATTR_SIZE: usize = size_of::<qhca_port_attr>();
pub const GID_TBL_LEN: usize = QHCA_GID_TABLE_LEN as usize;
const GID_ENTRY_SIZE: usize = size_of::<qhca_gid_entry>();
const COUNTERS: usize = size_of::<qhca_port_counters>() / 8;

const _: () = {
    assert!(PORT_ATTR_SIZE == 560 && GID_ENTRY_SIZE == 24 && COUNTERS == 20);
    assert!(offset_of!(qhca_port_attr, state) == 6);
    assert!(offset_of!(qhca_port_attr, wire) == 7);
    assert!(offset_of!(qhca_port_attr, max_mtu) == 8);
    assert!(offset_of!(qhca_port_attr, gid_tbl_len) == 9);
    assert!(offset_of!(qhca_port_attr, counters) == 16);
    assert!(offset_of!(qhca_port_attr, gids) == 176);
    assert!(offset_of!(qhca_port_counters, tx_no_route) == 32);
    assert!(offset_of!(qhca_port_counters, test_reordered) == 112);
    assert!(offset_of!(qhca_port_counters, rx_forged) == 120);
    assert!(offset_of!(qhca_port_counters, eth_tx_frames) == 128);
    assert!(offset_of!(qhca_port_counters, eth_rx_dropped) == 144);
    assert!(offset_of!(qhca_gid_entry, flags) == 16);
    assert!(offset_of!(qhca_gid_entry, prefix_len) == 17);
    assert!(size_of::<qhca_cmd_set_gid>() == 40);
    assert!(offset_of!(qhca_cmd_set_gid, entry) == 8);
    assert!(offset_of!(qhca_cmd_set_gid, rsvd1) == 32);
    assert!(size_of::<qhca_ah_attr>() == 32);
    assert!(offset_of!(qhca_ah_attr, flow_label) == 16);
    assert!(offset_of!(qhca_ah_attr, port_num) == 23);
    assert!(offset_of!(qhca_ah_attr, sgid_index) == 24);
    assert!(offset_of!(qhca_qp_attr, av) == 32);
};

// ------------------------------------------------------------------------------------- GIDs

/// A port's link-local GID: `QHCA_GID_PREFIX` and its node GUID, big-endian.
pub fn port_gid(guid: u64) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[..8].copy_from_slice(&QHCA_GID_PREFIX.to_be_bytes());
    g[8..].copy_from_slice(&guid.to_be_bytes());
    g
}

/// The IPv4-mapped GID `::ffff:a.b.c.d`.
pub fn v4_gid(ip: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&ip);
    g
}

/// A MAC's modified EUI-64 (ff:fe in the middle, the universal/local bit flipped), as a GUID.
pub fn eui64(mac: [u8; 6]) -> u64 {
    u64::from_be_bytes([
        mac[0] ^ 2,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ])
}

/// The MAC QEMU gives the first NIC without a `mac` property (`qemu_macaddr_default_if_unset`).
pub const DEFAULT_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];

/// `mac=` property syntax.
pub fn mac_str(mac: [u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

// ----------------------------------------------------------------------- the GID table

/// `struct qhca_gid_entry`, host side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GidEntry {
    pub gid: [u8; 16],
    pub flags: u8,
    pub prefix_len: u8,
    pub rsvd: [u8; 6],
}

impl GidEntry {
    /// A valid IPv4 entry.
    pub fn v4(ip: [u8; 4], prefix_len: u8) -> GidEntry {
        GidEntry {
            gid: v4_gid(ip),
            flags: QHCA_GID_VALID as u8,
            prefix_len,
            rsvd: [0; 6],
        }
    }

    pub fn encode(&self) -> [u8; GID_ENTRY_SIZE] {
        let mut b = [0u8; GID_ENTRY_SIZE];
        b[..16].copy_from_slice(&self.gid);
        b[16] = self.flags;
        b[17] = self.prefix_len;
        b[18..].copy_from_slice(&self.rsvd);
        b
    }

    pub fn decode(b: &[u8]) -> GidEntry {
        GidEntry {
            gid: b[..16].try_into().unwrap(),
            flags: b[16],
            prefix_len: b[17],
            rsvd: b[18..24].try_into().unwrap(),
        }
    }
}

/// `struct qhca_port_attr`, decoded; `counters` also as the 20 raw words, in struct order.
#[derive(Clone, Copy, Debug)]
pub struct PortAttr {
    pub mac: [u8; 6],
    pub state: u8,
    pub wire: u8,
    pub max_mtu: u8,
    pub gid_tbl_len: u8,
    pub rsvd0: [u8; 6],
    pub counters: qhca_port_counters,
    pub counter_words: [u64; COUNTERS],
    pub gids: [GidEntry; GID_TBL_LEN],
}

impl PortAttr {
    pub fn decode(b: &[u8]) -> PortAttr {
        assert!(b.len() >= PORT_ATTR_SIZE);
        let mut w = [0u64; COUNTERS];
        for (i, x) in w.iter_mut().enumerate() {
            *x = u64::from_le_bytes(b[16 + 8 * i..24 + 8 * i].try_into().unwrap());
        }
        let counters = qhca_port_counters {
            tx_frames: w[0],
            tx_bytes: w[1],
            rx_frames: w[2],
            rx_bytes: w[3],
            tx_no_route: w[4],
            tx_no_neigh: w[5],
            rx_malformed: w[6],
            rx_bad_icrc: w[7],
            rx_not_ours: w[8],
            rx_oversize: w[9],
            arp_rx: w[10],
            arp_tx: w[11],
            test_dropped: w[12],
            test_duplicated: w[13],
            test_reordered: w[14],
            rx_forged: w[15],
            eth_tx_frames: w[16],
            eth_rx_frames: w[17],
            eth_rx_dropped: w[18],
            rsvd: [w[19]],
        };
        let gids = core::array::from_fn(|i| {
            let o = 176 + GID_ENTRY_SIZE * i;
            GidEntry::decode(&b[o..o + GID_ENTRY_SIZE])
        });
        PortAttr {
            mac: b[0..6].try_into().unwrap(),
            state: b[6],
            wire: b[7],
            max_mtu: b[8],
            gid_tbl_len: b[9],
            rsvd0: b[10..16].try_into().unwrap(),
            counters,
            counter_words: w,
            gids,
        }
    }
}

/// Where QUERY_PORT writes.
const PORT_OUT: u64 = MAILBOX + 0x3000;

/// QUERY_PORT into `out`/`out_len`: status.
pub fn query_port_raw(h: &mut Hca, out: u64, out_len: u32) -> u32 {
    obj_cmd_out(h, QHCA_CMD_QUERY_PORT, [0; 5], out, out_len)
}

/// QUERY_PORT, asserted OK and not written past its 560 bytes.
pub fn query_port(h: &mut Hca) -> PortAttr {
    h.qt.memset(PORT_OUT, PORT_ATTR_SIZE + 64, 0xee);
    let st = query_port_raw(h, PORT_OUT, PORT_ATTR_SIZE as u32 + 64);
    assert_eq!(st, QHCA_CMD_OK, "QUERY_PORT");
    let b = h.qt.memread(PORT_OUT, PORT_ATTR_SIZE + 64);
    assert!(
        b[PORT_ATTR_SIZE..].iter().all(|&x| x == 0xee),
        "QUERY_PORT wrote past struct qhca_port_attr"
    );
    PortAttr::decode(&b)
}

/// QUERY_PORT while the device may post other events (frames arriving from the network):
/// the port, and the events that came before the command's completion.
pub fn query_port_amid_events(h: &mut Hca) -> (PortAttr, Vec<qhca_eqe>) {
    let mut c = h.cmd(QHCA_CMD_QUERY_PORT);
    c.out_addr = PORT_OUT;
    c.out_len = PORT_ATTR_SIZE as u32;
    let (e, others) = h.exec_amid_events(&c);
    assert_eq!(e.status as u32, QHCA_CMD_OK, "QUERY_PORT");
    (
        PortAttr::decode(&h.qt.memread(PORT_OUT, PORT_ATTR_SIZE)),
        others,
    )
}

/// The port's counters as words (QUERY_PORT amid the events that frames may raise).
pub fn counter_words(h: &mut Hca) -> [u64; 20] {
    query_port_amid_events(h).0.counter_words
}

/// Waits (real time, at most `limit`) until counter `i` is above `before[i]`; the counters then.
pub fn wait_counter(h: &mut Hca, i: usize, before: &[u64; 20], limit: Duration) -> [u64; 20] {
    let t0 = Instant::now();
    loop {
        let c = counter_words(h);
        if c[i] > before[i] {
            return c;
        }
        assert!(
            t0.elapsed() < limit,
            "counter {i} stayed at {}: {c:?}",
            before[i]
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `struct qhca_cmd_set_gid` as bytes.
pub fn set_gid_bytes(index: u32, e: &GidEntry) -> [u8; 40] {
    let mut b = [0u8; 40];
    b[0..4].copy_from_slice(&index.to_le_bytes());
    b[8..32].copy_from_slice(&e.encode());
    b
}

/// SET_GID from raw `in[]` bytes: status.
pub fn set_gid_raw(h: &mut Hca, b: &[u8; 40]) -> u32 {
    obj_cmd(h, QHCA_CMD_SET_GID, in_words(b)).0
}

/// SET_GID of entry `index`: status.
pub fn set_gid(h: &mut Hca, index: u32, e: &GidEntry) -> u32 {
    set_gid_raw(h, &set_gid_bytes(index, e))
}

/// Entry `index` becomes IPv4 address `ip` (/24), asserted.
pub fn add_ipv4(h: &mut Hca, index: u32, ip: [u8; 4]) {
    let st = set_gid(h, index, &GidEntry::v4(ip, 24));
    assert_eq!(st, QHCA_CMD_OK, "SET_GID {index} := {ip:?}");
}

// ------------------------------------------------------------------------ address vectors

/// `struct qhca_ah_attr`, host side. The default is all zeros: what MODIFY_QP wants when its
/// mask has no `QHCA_QP_ATTR_AV`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AhAttr {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub traffic_class: u8,
    pub hop_limit: u8,
    pub sl: u8,
    pub port_num: u8,
    pub sgid_index: u8,
}

impl AhAttr {
    /// To the port with GID `dgid`: port 1, hop limit 64, the rest 0 (source: GID 0).
    pub fn to(dgid: [u8; 16]) -> AhAttr {
        AhAttr {
            dgid,
            hop_limit: 64,
            port_num: 1,
            ..Default::default()
        }
    }

    /// To `dgid` from the port's GID entry `sgid_index`.
    pub fn from_to(sgid_index: u8, dgid: [u8; 16]) -> AhAttr {
        AhAttr {
            sgid_index,
            ..Self::to(dgid)
        }
    }

    pub fn encode(&self) -> [u8; 32] {
        let mut b = [0u8; 32];
        b[..16].copy_from_slice(&self.dgid);
        b[16..20].copy_from_slice(&self.flow_label.to_le_bytes());
        b[20] = self.traffic_class;
        b[21] = self.hop_limit;
        b[22] = self.sl;
        b[23] = self.port_num;
        b[24] = self.sgid_index;
        b
    }

    /// Decodes the 32 bytes (the reserved ones are not looked at).
    pub fn decode(b: &[u8]) -> AhAttr {
        AhAttr {
            dgid: b[..16].try_into().unwrap(),
            flow_label: u32::from_le_bytes(b[16..20].try_into().unwrap()),
            traffic_class: b[20],
            hop_limit: b[21],
            sl: b[22],
            port_num: b[23],
            sgid_index: b[24],
        }
    }
}
