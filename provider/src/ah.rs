// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Unreliable datagram: address handles, GIDs and the global route header (IBA 9.8, 10.2.5,
//! 11.4.1.2; the semantics of `ibv_create_ah`, `ibv_send_wr.wr.ud` and `struct ibv_grh`).
//!
//! ```text
//! let qp = Qp::new_ud(&pd, &cq, &cq, &caps)?;
//! qp.ud_ready(QKEY)?;                                   // RESET -> INIT -> RTR -> RTS
//! let ah = pd.create_ah(&AhAttr::new(peer_gid))?;       // where datagrams go
//! qp.post_recv(&[RecvWr { wr_id: 1, sges: &[mr.sge(0, GRH_SIZE as u32 + 4096)] }])?;
//! qp.post_send(&[SendWr::new(2, WrOp::Send, &sges).to_ud(ah.dest(peer_qpn, QKEY))])?;
//! ...
//! let grh = Grh::parse(&mr.to_vec(0, GRH_SIZE));        // a receive: the sender's GID first
//! ```
//!
//! A datagram lands in the receive request's buffers after a [`Grh`] of [`GRH_SIZE`] bytes
//! (the completion's `byte_len` counts it), so UD receive buffers need that much room more
//! than the largest message ([`UD_MAX_MSG`]).
//!
//! An address handle is a device object of a PD, like a region: the device checks, when it
//! runs a send, that the handle the WQE names is one of the QP's context and PD and still
//! exists. A stale handle in a request fails that request (`LOC_QP_OP_ERR`); it never reaches
//! memory. So a [`UdDest`] is plain numbers and posting stays safe.

use std::fmt;
use std::net::Ipv4Addr;
use std::sync::Arc;

use qhca_uapi::{
    qhca_ah_attr, qhca_grh, qhca_ioc_create_ah, qhca_ioc_handle, QHCA_GID_PREFIX,
    QHCA_GID_TABLE_LEN, QHCA_GID_V4_PREFIX_HI, QHCA_GID_V4_PREFIX_LO, QHCA_GRH_SIZE,
    QHCA_QKEY_CONTROLLED, QHCA_UD_MAX_MSG,
};

use crate::error::{Error, Result};
use crate::pd::{Pd, PdInner};
use crate::request::Request;

/// Bytes of the global route header at the start of every UD receive buffer.
pub const GRH_SIZE: usize = QHCA_GRH_SIZE as usize;
/// The largest datagram (the port's MTU), in bytes, GRH not included.
pub const UD_MAX_MSG: usize = QHCA_UD_MAX_MSG as usize;
/// A remote Q_Key with this bit set means "the sending QP's own Q_Key" (IBA 10.2.5).
pub const QKEY_CONTROLLED: u32 = QHCA_QKEY_CONTROLLED;
/// The port number of the device's only port.
pub const PORT_NUM: u8 = 1;

const _: () = assert!(core::mem::size_of::<qhca_grh>() == GRH_SIZE);

/// A port's global identifier: 16 bytes as on the wire (`union ibv_gid`), a 64-bit subnet
/// prefix then a 64-bit interface identifier, both big-endian. A qhca port's GID 0 is
/// `fe80::/64` with the node GUID as the interface identifier ([`Gid::from_guid`]); its other
/// GIDs are IPv4 addresses, IPv4-mapped (`::ffff:a.b.c.d`, [`Gid::from_ipv4`]), as RoCEv2
/// names them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Gid {
    /// The bytes, in network order.
    pub raw: [u8; 16],
}

impl Gid {
    /// The GID of the port of the device whose node GUID is `guid`: `QHCA_GID_PREFIX`, then the
    /// GUID, both big-endian.
    pub fn from_guid(guid: u64) -> Gid {
        Gid::from_parts(QHCA_GID_PREFIX as u64, guid)
    }

    /// From the subnet prefix and the interface identifier (host integers).
    pub fn from_parts(subnet_prefix: u64, interface_id: u64) -> Gid {
        let mut raw = [0; 16];
        raw[..8].copy_from_slice(&subnet_prefix.to_be_bytes());
        raw[8..].copy_from_slice(&interface_id.to_be_bytes());
        Gid { raw }
    }

    /// The first 8 bytes as a host integer.
    pub fn subnet_prefix(&self) -> u64 {
        u64::from_be_bytes(self.raw[..8].try_into().expect("8 bytes"))
    }

    /// The last 8 bytes as a host integer (a qhca port's node GUID).
    pub fn interface_id(&self) -> u64 {
        u64::from_be_bytes(self.raw[8..].try_into().expect("8 bytes"))
    }

    /// The IPv4-mapped GID of `addr`: `::ffff:a.b.c.d` (`QHCA_GID_V4_PREFIX_*`, RFC 4291
    /// 2.5.5.2), what RoCEv2 names an IPv4 address by.
    pub fn from_ipv4(addr: Ipv4Addr) -> Gid {
        Gid::from_parts(
            QHCA_GID_V4_PREFIX_HI.into(),
            QHCA_GID_V4_PREFIX_LO | u64::from(addr.to_bits()),
        )
    }

    /// The IPv4 address of an IPv4-mapped GID; `None` for any other GID.
    pub fn ipv4(&self) -> Option<Ipv4Addr> {
        let v4 = self.subnet_prefix() == u64::from(QHCA_GID_V4_PREFIX_HI)
            && self.interface_id() & 0xffff_ffff_0000_0000 == QHCA_GID_V4_PREFIX_LO;
        v4.then(|| Ipv4Addr::from_bits(self.interface_id() as u32))
    }

    /// True for the all-zero GID (an empty table entry; "none named" in a connection record).
    pub fn is_zero(&self) -> bool {
        self.raw == [0; 16]
    }
}

/// As `ibv_devinfo -v` prints a GID: eight groups of four hex digits, e.g.
/// `fe80:0000:0000:0000:5254:0012:3456:0001`; an IPv4-mapped GID as its address is written
/// in IPv6 (RFC 4291 2.2), e.g. `::ffff:10.0.0.1`.
impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(v4) = self.ipv4() {
            return write!(f, "::ffff:{v4}");
        }
        for (i, pair) in self.raw.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

impl From<[u8; 16]> for Gid {
    fn from(raw: [u8; 16]) -> Gid {
        Gid { raw }
    }
}

impl From<Ipv4Addr> for Gid {
    fn from(addr: Ipv4Addr) -> Gid {
        Gid::from_ipv4(addr)
    }
}

/// Entries in a port's GID table (`QHCA_GID_TABLE_LEN`): index 0, the link-local GID, and
/// the IPv4 addresses of the port's netdev, which the RDMA core puts there.
pub const GID_TABLE_LEN: usize = QHCA_GID_TABLE_LEN as usize;

/// An address vector (`struct ibv_ah_attr` with its `ibv_global_route`, on the device's one
/// port): where datagrams ([`Pd::create_ah`]) or an RC QP's packets ([`crate::QpAttr::av`])
/// go, the local GID they come from and the GRH fields to send with.
///
/// The device takes it when `sgid_index` names a valid entry of the port's GID table
/// ([`crate::Context::query_port`]) and `dgid` is IPv4-mapped exactly when that entry is
/// (`EINVAL` otherwise). A destination the port cannot reach just loses the packets.
///
/// `Default` is all zero (no destination, hop limit 0): build one with [`AhAttr::new`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AhAttr {
    /// The destination port's GID ([`crate::Context::gid`] on its side, or one of the IPv4
    /// GIDs of its table).
    pub dgid: Gid,
    /// The source: an entry of this port's GID table (0, the link-local GID, by default).
    pub sgid_index: u8,
    /// IPv6-style flow label, 20 bits.
    pub flow_label: u32,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Service level, 0..=15: carried, not acted on.
    pub sl: u8,
}

impl AhAttr {
    /// To `dgid` from GID index 0, with flow label, traffic class and service level 0 and hop
    /// limit 64.
    pub fn new(dgid: Gid) -> AhAttr {
        AhAttr {
            dgid,
            sgid_index: 0,
            flow_label: 0,
            traffic_class: 0,
            hop_limit: 64,
            sl: 0,
        }
    }

    /// The same vector sent from GID index `sgid_index`.
    pub fn from_index(self, sgid_index: u8) -> AhAttr {
        AhAttr { sgid_index, ..self }
    }

    /// Refuses what the ABI cannot carry (a flow label wider than 20 bits, a service level
    /// above 15, a GID index beyond the table).
    pub(crate) fn check(&self) -> Result<()> {
        if self.flow_label >= 1 << 20 || self.sl > 15 || self.sgid_index as usize >= GID_TABLE_LEN {
            return Err(Error::Invalid {
                what: format!(
                    "address vector with flow label {:#x} (20 bits), SL {} (0..=15) and GID \
                     index {} (0..{GID_TABLE_LEN})",
                    self.flow_label, self.sl, self.sgid_index
                ),
            });
        }
        Ok(())
    }

    /// The ABI struct (`port_num` is the device's only port).
    pub fn to_raw(&self) -> qhca_ah_attr {
        qhca_ah_attr {
            dgid: self.dgid.raw,
            flow_label: self.flow_label,
            traffic_class: self.traffic_class,
            hop_limit: self.hop_limit,
            sl: self.sl,
            port_num: PORT_NUM,
            sgid_index: self.sgid_index,
            rsvd: [0; 7],
        }
    }

    /// From the ABI struct (what QUERY_QP reports of an RC QP).
    pub fn from_raw(a: &qhca_ah_attr) -> AhAttr {
        AhAttr {
            dgid: Gid { raw: a.dgid },
            sgid_index: a.sgid_index,
            flow_label: a.flow_label,
            traffic_class: a.traffic_class,
            hop_limit: a.hop_limit,
            sl: a.sl,
        }
    }
}

/// An address handle of a PD ([`Pd::create_ah`]): names a destination port for the sends of
/// UD QPs of the same PD. Dropping it destroys it in the device; requests still naming it
/// then fail (`LOC_QP_OP_ERR`), and its number names nothing for a long while
/// (`QHCA_AH_INDEX_BITS`: 2^11 creations of the same slot).
///
/// It holds its PD, so the PD outlives it; it holds no memory, so leaking it
/// (`mem::forget`) leaks a device object and nothing else.
#[derive(Debug)]
pub struct Ah {
    pd: Arc<PdInner>,
    handle: u32,
    attr: AhAttr,
}

impl Pd {
    /// `CREATE_AH`: an address handle to `attr.dgid` from GID `attr.sgid_index`
    /// (`EOPNOTSUPP` on a device without UD, [`crate::DeviceAttr::supports_ud`]; `EINVAL` for
    /// a source entry that is not valid or a destination of the other family, see
    /// [`AhAttr`]). Fails with [`Error::Invalid`] before asking the driver if `attr` has a
    /// field out of range.
    pub fn create_ah(&self, attr: &AhAttr) -> Result<Ah> {
        attr.check()?;
        let mut req = qhca_ioc_create_ah::request();
        req.pdn = self.pdn();
        req.attr = attr.to_raw();
        self.context().cmd_create_ah(&mut req)?;
        let handle = req.ah;
        Ok(Ah {
            pd: self.inner.clone(),
            handle,
            attr: *attr,
        })
    }
}

impl Ah {
    /// The device's AH number (what a send WQE names).
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// The PD number it belongs to.
    pub fn pdn(&self) -> u32 {
        self.pd.pdn
    }

    /// What it was created with.
    pub fn attr(&self) -> &AhAttr {
        &self.attr
    }

    /// The destination of a datagram to QP `remote_qpn` of this handle's port, with Q_Key
    /// `remote_qkey` (or [`QKEY_CONTROLLED`]: the sending QP's own): put it on a send request
    /// with [`crate::SendWr::to_ud`].
    pub fn dest(&self, remote_qpn: u32, remote_qkey: u32) -> UdDest {
        UdDest {
            ah: self.handle,
            remote_qpn,
            remote_qkey,
        }
    }
}

impl Drop for Ah {
    fn drop(&mut self) {
        let mut req = qhca_ioc_handle::request();
        req.handle = self.handle;
        // A failure (device gone) leaves nothing of ours reachable: a handle names a port, no
        // memory.
        let _ = self.pd.ctx.cmd_destroy_ah(&mut req);
    }
}

/// The destination of a send on a UD QP (`ibv_send_wr.wr.ud`; `struct qhca_wqe_ud`). Plain
/// numbers: the device checks the handle when it runs the request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct UdDest {
    /// The address handle's number ([`Ah::handle`]).
    pub ah: u32,
    /// The destination QP.
    pub remote_qpn: u32,
    /// The Q_Key the datagram carries; with [`QKEY_CONTROLLED`] set, the sending QP's own.
    pub remote_qkey: u32,
}

/// The global route header that starts every UD receive buffer (`struct qhca_grh`, as
/// `struct ibv_grh`: big-endian on the wire, host integers here).
///
/// A datagram between IPv4 GIDs has, as RoCEv2 delivers one, 20 zero bytes and then the IPv4
/// header in those [`GRH_SIZE`] bytes: [`Grh::parse`] reads that form too ([`Grh::ip_version`]
/// 4), with the addresses as IPv4-mapped GIDs, the TOS as the traffic class and the TTL as the
/// hop limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Grh {
    /// IP version: 6, or 4 for a datagram between IPv4 GIDs.
    pub ip_version: u8,
    /// The sender's address handle's traffic class (IPv4: the TOS).
    pub traffic_class: u8,
    /// Its flow label (20 bits; IPv4: 0).
    pub flow_label: u32,
    /// Payload length as IBA counts it (BTH, DETH, ImmDt, the message padded to 4, ICRC):
    /// the IPv6 payload length less the UDP header (IPv4: the total length less the IPv4 and
    /// UDP headers), the same bytes.
    pub paylen: u16,
    /// Next header: 17, UDP, as RoCEv2 carries datagrams (IPv4: the protocol, the same).
    pub next_hdr: u8,
    /// Its hop limit (IPv4: the TTL).
    pub hop_limit: u8,
    /// The sending port's GID: who sent the datagram (with [`crate::Wc::src_qp`]).
    pub sgid: Gid,
    /// The destination GID the sender's address handle named.
    pub dgid: Gid,
}

/// Where the IPv4 header starts in the GRH area of a datagram between IPv4 GIDs.
const IPV4_AT: usize = 20;
/// IPv4 and UDP headers: what an IPv4 total length counts beyond the IBA payload.
const IPV4_UDP_LEN: u16 = 20 + 8;
/// The UDP header: what an IPv6 payload length counts beyond the IBA payload.
const UDP_LEN: u16 = 8;

impl Grh {
    /// Decodes the first [`GRH_SIZE`] bytes of a receive buffer; `None` if there are fewer.
    /// 20 zero bytes then an IPv4 header of 20 bytes is the IPv4 form (see [`Grh`]).
    pub fn parse(b: &[u8]) -> Option<Grh> {
        let b: &[u8; GRH_SIZE] = b.get(..GRH_SIZE)?.try_into().ok()?;
        if b[..IPV4_AT].iter().all(|&x| x == 0) && b[IPV4_AT] == 0x45 {
            let ip4 = &b[IPV4_AT..];
            let addr = |at: usize| Ipv4Addr::new(ip4[at], ip4[at + 1], ip4[at + 2], ip4[at + 3]);
            return Some(Grh {
                ip_version: 4,
                traffic_class: ip4[1],
                flow_label: 0,
                paylen: u16::from_be_bytes([ip4[2], ip4[3]]).saturating_sub(IPV4_UDP_LEN),
                next_hdr: ip4[9],
                hop_limit: ip4[8],
                sgid: Gid::from_ipv4(addr(12)),
                dgid: Gid::from_ipv4(addr(16)),
            });
        }
        let vtf = u32::from_be_bytes(b[0..4].try_into().expect("4 bytes"));
        let gid = |at: usize| Gid {
            raw: b[at..at + 16].try_into().expect("16 bytes"),
        };
        Some(Grh {
            ip_version: (vtf >> 28) as u8,
            traffic_class: (vtf >> 20) as u8,
            flow_label: vtf & 0xf_ffff,
            paylen: u16::from_be_bytes([b[4], b[5]]).saturating_sub(UDP_LEN),
            next_hdr: b[6],
            hop_limit: b[7],
            sgid: gid(8),
            dgid: gid(24),
        })
    }

    /// The wire bytes (what the device writes; for tests and tools that fake a datagram): the
    /// IPv4 form, checksum included, when `ip_version` is 4 (the GIDs' last four bytes are the
    /// addresses).
    pub fn to_bytes(&self) -> [u8; GRH_SIZE] {
        let mut b = [0u8; GRH_SIZE];
        if self.ip_version == 4 {
            let ip4 = &mut b[IPV4_AT..];
            ip4[0] = 0x45;
            ip4[1] = self.traffic_class;
            ip4[2..4].copy_from_slice(&self.paylen.wrapping_add(IPV4_UDP_LEN).to_be_bytes());
            ip4[6] = 0x40; // DF
            ip4[8] = self.hop_limit;
            ip4[9] = self.next_hdr;
            ip4[12..16].copy_from_slice(&self.sgid.raw[12..]);
            ip4[16..20].copy_from_slice(&self.dgid.raw[12..]);
            let sum = ip4
                .chunks_exact(2)
                .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
                .sum::<u32>();
            let sum = (sum & 0xffff) + (sum >> 16);
            let sum = (sum & 0xffff) + (sum >> 16);
            ip4[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
            return b;
        }
        let vtf = (u32::from(self.ip_version & 0xf) << 28)
            | (u32::from(self.traffic_class) << 20)
            | (self.flow_label & 0xf_ffff);
        b[0..4].copy_from_slice(&vtf.to_be_bytes());
        b[4..6].copy_from_slice(&self.paylen.wrapping_add(UDP_LEN).to_be_bytes());
        b[6] = self.next_hdr;
        b[7] = self.hop_limit;
        b[8..24].copy_from_slice(&self.sgid.raw);
        b[24..40].copy_from_slice(&self.dgid.raw);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::offset_of;

    #[test]
    fn gid_is_the_prefix_then_the_guid_big_endian() {
        let g = Gid::from_guid(0x5254_0012_3456_0001);
        assert_eq!(
            g.raw,
            [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x00, 0x01]
        );
        assert_eq!(g.subnet_prefix(), 0xfe80_0000_0000_0000);
        assert_eq!(g.interface_id(), 0x5254_0012_3456_0001);
        assert_eq!(g.to_string(), "fe80:0000:0000:0000:5254:0012:3456:0001");
        assert_eq!(Gid::from(g.raw), g);
        assert_eq!(
            Gid::default().to_string(),
            "0000:0000:0000:0000:0000:0000:0000:0000"
        );
    }

    #[test]
    fn ipv4_gids_are_mapped_and_print_as_addresses() {
        let a = Ipv4Addr::new(10, 7, 0, 3);
        let g = Gid::from_ipv4(a);
        assert_eq!(
            g.raw,
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 7, 0, 3]
        );
        assert_eq!(Gid::from(a), g);
        assert_eq!(g.ipv4(), Some(a));
        assert_eq!(g.to_string(), "::ffff:10.7.0.3");
        assert_eq!(
            Gid::from_ipv4(Ipv4Addr::new(255, 0, 0, 1)).to_string(),
            "::ffff:255.0.0.1"
        );
        // The same address as IPv6 agrees.
        let v6: std::net::Ipv6Addr = "::ffff:10.7.0.3".parse().unwrap();
        assert_eq!(v6.octets(), g.raw);
        assert!(!g.is_zero() && Gid::default().is_zero());
        // Not mapped: the link-local GID, ::ffff:0:0/96 with another prefix, ::a.b.c.d
        // (IPv4-compatible), the zero GID.
        for raw in [
            Gid::from_guid(0x5254_0012_3456_0001).raw,
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 10, 7, 0, 3],
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 7, 0, 3],
            [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 7, 0, 3],
            [0; 16],
        ] {
            let g = Gid { raw };
            assert_eq!(g.ipv4(), None, "{raw:02x?}");
            assert_eq!(g.to_string().len(), 39, "{g}");
        }
    }

    /// Every byte of a GRH as the header lays it out (offsets from the bindings, values
    /// big-endian), spelled out by hand.
    #[test]
    fn grh_parses_network_order() {
        let mut b = vec![0u8; GRH_SIZE + 3];
        // version 6, traffic class 0xab, flow label 0x12345.
        b[0..4].copy_from_slice(&[0x6a, 0xb1, 0x23, 0x45]);
        b[offset_of!(qhca_grh, paylen)..][..2].copy_from_slice(&[0x01, 0x02]);
        b[offset_of!(qhca_grh, next_hdr)] = 17;
        b[offset_of!(qhca_grh, hop_limit)] = 7;
        let sgid = Gid::from_guid(0x1111_2222_3333_4444);
        let dgid = Gid::from_guid(0x5555_6666_7777_8888);
        b[offset_of!(qhca_grh, sgid)..][..16].copy_from_slice(&sgid.raw);
        b[offset_of!(qhca_grh, dgid)..][..16].copy_from_slice(&dgid.raw);
        let g = Grh::parse(&b).unwrap();
        assert_eq!(
            g,
            Grh {
                ip_version: 6,
                traffic_class: 0xab,
                flow_label: 0x1_2345,
                paylen: 0x0102 - 8,
                next_hdr: 17,
                hop_limit: 7,
                sgid,
                dgid,
            }
        );
        assert_eq!(g.to_bytes()[..], b[..GRH_SIZE]);
        assert_eq!(Grh::parse(&b[..GRH_SIZE - 1]), None);
        assert_eq!(Grh::parse(&[]), None);
    }

    /// A datagram between IPv4 GIDs: 20 zero bytes, then the IPv4 header (from 10.7.0.9 to
    /// 10.7.0.3, TOS 0x20, TTL 63, UDP, total length 64: an IBA payload of 36 bytes), checksum
    /// computed by hand (0x4520 + 0x0040 + 0x4000 + 0x3f11 + 0x0a07 + 0x0009 + 0x0a07 + 0x0003
    /// = 0xd88b: 0x2774).
    #[test]
    fn grh_parses_the_ipv4_form() {
        let mut b = [0u8; GRH_SIZE];
        b[20..].copy_from_slice(&[
            0x45, 0x20, 0x00, 0x40, 0x00, 0x00, 0x40, 0x00, 63, 17, 0x27, 0x74, 10, 7, 0, 9, 10, 7,
            0, 3,
        ]);
        let g = Grh::parse(&b).unwrap();
        assert_eq!(
            g,
            Grh {
                ip_version: 4,
                traffic_class: 0x20,
                flow_label: 0,
                paylen: 36,
                next_hdr: 17,
                hop_limit: 63,
                sgid: Gid::from_ipv4(Ipv4Addr::new(10, 7, 0, 9)),
                dgid: Gid::from_ipv4(Ipv4Addr::new(10, 7, 0, 3)),
            }
        );
        assert_eq!(g.to_bytes(), b);
        // Not the IPv4 form: anything in the first 20 bytes, or another header length.
        let mut c = b;
        c[3] = 1;
        assert_eq!(Grh::parse(&c).unwrap().ip_version, 0);
        let mut c = b;
        c[20] = 0x46;
        assert_eq!(Grh::parse(&c).unwrap().ip_version, 0);
    }

    #[test]
    fn ah_attr_to_raw_and_its_limits() {
        let a = AhAttr {
            flow_label: 0xf_ffff,
            traffic_class: 3,
            sl: 15,
            ..AhAttr::new(Gid::from_guid(9))
        };
        a.check().unwrap();
        let r = a.to_raw();
        assert_eq!(r.dgid, Gid::from_guid(9).raw);
        assert_eq!(
            (r.flow_label, r.traffic_class, r.hop_limit, r.sl, r.port_num),
            (0xf_ffff, 3, 64, 15, 1)
        );
        assert!(AhAttr {
            flow_label: 1 << 20,
            ..a
        }
        .check()
        .is_err());
        assert!(AhAttr { sl: 16, ..a }.check().is_err());
        assert_eq!(r.sgid_index, 0);
        let b = a.from_index(15);
        b.check().unwrap();
        assert_eq!((b.to_raw().sgid_index, b.to_raw().rsvd), (15, [0; 7]));
        assert_eq!(AhAttr::from_raw(&b.to_raw()), b);
        assert!(a.from_index(16).check().is_err());
    }

    #[test]
    fn create_ah_checks_then_asks_the_driver() {
        let ctx =
            Arc::new(crate::Context::open_unchecked(std::path::Path::new("/dev/null")).unwrap());
        let pd = Pd::fake(&ctx, 1);
        let bad = AhAttr {
            sl: 16,
            ..AhAttr::new(Gid::default())
        };
        assert!(matches!(pd.create_ah(&bad), Err(Error::Invalid { .. })));
        assert!(matches!(
            pd.create_ah(&AhAttr::new(Gid::default())),
            Err(Error::Ioctl {
                op: "CREATE_AH",
                ..
            })
        ));
    }

    #[test]
    fn dest_names_the_handle() {
        let ctx =
            Arc::new(crate::Context::open_unchecked(std::path::Path::new("/dev/null")).unwrap());
        let ah = Ah {
            pd: Pd::fake(&ctx, 1).inner,
            handle: 0x1003,
            attr: AhAttr::new(Gid::default()),
        };
        assert_eq!(
            ah.dest(0x42, QKEY_CONTROLLED),
            UdDest {
                ah: 0x1003,
                remote_qpn: 0x42,
                remote_qkey: 1 << 31
            }
        );
        assert_eq!((ah.handle(), ah.pdn()), (0x1003, 1));
        // Dropping it asks the driver (which /dev/null is not): the failure is ignored.
        drop(ah);
    }
}
