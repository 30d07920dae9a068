// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! RoCEv2 from the test side, written from IBA Annex A17 and chapter 9 without looking at the
//! device's codec: Ethernet II + IPv4 + UDP (port 4791) + BTH + the extended headers of the
//! opcode + payload padded to 4 bytes + ICRC; ARP (RFC 826) for the neighbours; and [`Peer`],
//! the test process as the far end of a `-netdev dgram` (each UDP datagram on its socket is one
//! Ethernet frame).
//!
//! The ICRC (A17.3.3) is zlib's CRC-32 (IEEE 802.3, reflected) over eight bytes of 0xff (the
//! LRH RoCEv2 does not have), the IPv4 header with TOS, TTL and header checksum set to ones,
//! the UDP header with its checksum set to ones, the BTH with byte 4 set to ones, and the rest
//! of the packet up to the ICRC; stored least significant byte first (as Linux rxe does).

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// The test segment of the RoCE tests: the device's port and the peer the test plays.
pub const DEV_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0xaa, 0x00, 0x01];
pub const PEER_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0xaa, 0x00, 0x02];
pub const DEV_IP: [u8; 4] = [10, 7, 0, 1];
pub const PEER_IP: [u8; 4] = [10, 7, 0, 2];
pub const DEV: ([u8; 6], [u8; 4]) = (DEV_MAC, DEV_IP);
pub const PEER: ([u8; 6], [u8; 4]) = (PEER_MAC, PEER_IP);
/// The QP the test plays.
pub const PEER_QPN: u32 = 0x123;

pub const ETH_P_IPV4: u16 = 0x0800;
pub const ETH_P_ARP: u16 = 0x0806;
pub const ROCE_PORT: u16 = 4791;
pub const ETH_LEN: usize = 14;
pub const IPV4_LEN: usize = 20;
pub const UDP_LEN: usize = 8;
pub const BTH_LEN: usize = 12;
pub const ICRC_LEN: usize = 4;
/// Ethernet + IPv4 + UDP + BTH.
pub const HDRS_LEN: usize = ETH_LEN + IPV4_LEN + UDP_LEN + BTH_LEN;

/// BTH opcodes (IBA Table 38), reliable connection and UD.
pub mod op {
    pub const SEND_FIRST: u8 = 0x00;
    pub const SEND_MIDDLE: u8 = 0x01;
    pub const SEND_LAST: u8 = 0x02;
    pub const SEND_LAST_IMM: u8 = 0x03;
    pub const SEND_ONLY: u8 = 0x04;
    pub const SEND_ONLY_IMM: u8 = 0x05;
    pub const WRITE_FIRST: u8 = 0x06;
    pub const WRITE_MIDDLE: u8 = 0x07;
    pub const WRITE_LAST: u8 = 0x08;
    pub const WRITE_LAST_IMM: u8 = 0x09;
    pub const WRITE_ONLY: u8 = 0x0a;
    pub const WRITE_ONLY_IMM: u8 = 0x0b;
    pub const READ_REQUEST: u8 = 0x0c;
    pub const READ_RESP_FIRST: u8 = 0x0d;
    pub const READ_RESP_MIDDLE: u8 = 0x0e;
    pub const READ_RESP_LAST: u8 = 0x0f;
    pub const READ_RESP_ONLY: u8 = 0x10;
    pub const ACK: u8 = 0x11;
    pub const ATOMIC_ACK: u8 = 0x12;
    pub const CMP_SWAP: u8 = 0x13;
    pub const FETCH_ADD: u8 = 0x14;
    pub const SEND_LAST_INV: u8 = 0x16;
    pub const SEND_ONLY_INV: u8 = 0x17;
    pub const UD_SEND_ONLY: u8 = 0x64;
    pub const UD_SEND_ONLY_IMM: u8 = 0x65;
}

// ------------------------------------------------------------------------------ checksums

/// zlib's `crc32(crc, data)`: CRC-32/IEEE, reflected, pre- and post-inverted.
pub fn crc32(crc: u32, data: &[u8]) -> u32 {
    let mut c = !crc;
    for &b in data {
        c ^= b as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xedb8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// The 16-bit ones'-complement sum of `b` (big-endian words, an odd last byte padded with a
/// zero), folded, not complemented (what `QHCA_CQE_CSUM` promises in `imm_data`).
pub fn ones_sum(b: &[u8]) -> u16 {
    let mut s: u64 = b
        .chunks(2)
        .map(|w| u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]) as u64)
        .sum();
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// The Internet checksum of `b` (an IPv4 header: 0 over a header whose checksum is right).
pub fn ip_checksum(b: &[u8]) -> u16 {
    !ones_sum(b)
}

/// The ICRC of an IPv4 RoCEv2 frame (Ethernet header first), over everything from the IP
/// header to the four bytes before the frame's end.
pub fn icrc(frame: &[u8]) -> u32 {
    let mut masked = [0xffu8; 8 + IPV4_LEN + UDP_LEN + BTH_LEN];
    masked[8..].copy_from_slice(&frame[ETH_LEN..HDRS_LEN]);
    let (ip, rest) = masked[8..].split_at_mut(IPV4_LEN);
    ip[1] = 0xff; // TOS
    ip[8] = 0xff; // TTL
    ip[10] = 0xff; // header checksum
    ip[11] = 0xff;
    rest[6] = 0xff; // UDP checksum
    rest[7] = 0xff;
    rest[UDP_LEN + 4] = 0xff; // BTH byte 4 (reserved)
    let crc = crc32(0, &masked);
    crc32(crc, &frame[HDRS_LEN..frame.len() - ICRC_LEN])
}

// ------------------------------------------------------------------------------- packets

/// RETH: where a WRITE or READ goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reth {
    pub va: u64,
    pub rkey: u32,
    pub len: u32,
}

/// AETH: syndrome and MSN.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Aeth {
    pub syndrome: u8,
    pub msn: u32,
}

/// AtomicETH.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AtomicEth {
    pub va: u64,
    pub rkey: u32,
    pub swap_add: u64,
    pub compare: u64,
}

/// Which extended headers an opcode has (IBA 9.2-9.4), in the order they follow the BTH, and
/// whether it carries a payload; `None` for an opcode this codec does not know.
#[derive(Clone, Copy, Debug, Default)]
struct Layout {
    deth: bool,
    reth: bool,
    atomic_eth: bool,
    aeth: bool,
    atomic_ack: bool,
    imm: bool,
    ieth: bool,
    payload: bool,
}

fn layout(opcode: u8) -> Option<Layout> {
    let p = Layout {
        payload: true,
        ..Default::default()
    };
    Some(match opcode {
        op::SEND_FIRST | op::SEND_MIDDLE | op::SEND_LAST | op::SEND_ONLY => p,
        op::WRITE_MIDDLE | op::WRITE_LAST | op::READ_RESP_MIDDLE => p,
        op::SEND_LAST_IMM | op::SEND_ONLY_IMM | op::WRITE_LAST_IMM => Layout { imm: true, ..p },
        op::SEND_LAST_INV | op::SEND_ONLY_INV => Layout { ieth: true, ..p },
        op::WRITE_FIRST | op::WRITE_ONLY => Layout { reth: true, ..p },
        op::WRITE_ONLY_IMM => Layout {
            reth: true,
            imm: true,
            ..p
        },
        op::READ_REQUEST => Layout {
            reth: true,
            ..Default::default()
        },
        op::READ_RESP_FIRST | op::READ_RESP_LAST | op::READ_RESP_ONLY => Layout { aeth: true, ..p },
        op::ACK => Layout {
            aeth: true,
            ..Default::default()
        },
        op::ATOMIC_ACK => Layout {
            aeth: true,
            atomic_ack: true,
            ..Default::default()
        },
        op::CMP_SWAP | op::FETCH_ADD => Layout {
            atomic_eth: true,
            ..Default::default()
        },
        op::UD_SEND_ONLY => Layout { deth: true, ..p },
        op::UD_SEND_ONLY_IMM => Layout {
            deth: true,
            imm: true,
            ..p
        },
        _ => return None,
    })
}

/// The bytes of extended headers opcode `opcode` has after the BTH, and whether it carries a
/// payload; `None` for an opcode this codec does not know.
pub fn ext_len(opcode: u8) -> Option<(usize, bool)> {
    let l = layout(opcode)?;
    let n = [
        (l.deth, 8),
        (l.reth, 16),
        (l.atomic_eth, 28),
        (l.aeth, 4),
        (l.atomic_ack, 8),
        (l.imm, 4),
        (l.ieth, 4),
    ]
    .iter()
    .map(|&(on, n)| if on { n } else { 0 })
    .sum();
    Some((n, l.payload))
}

/// Every opcode [`ext_len`] knows.
pub const OPCODES: [u8; 25] = [
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
    0x10, 0x11, 0x12, 0x13, 0x14, 0x16, 0x17, 0x64, 0x65,
];

/// One RoCEv2 frame over IPv4, every field the test may want to set or check. [`Pkt::new`]
/// fills in what a well-behaved sender puts there. (`Debug` shows the payload's length and
/// first bytes only.)
#[derive(Clone, PartialEq, Eq)]
pub struct Pkt {
    pub dst_mac: [u8; 6],
    pub src_mac: [u8; 6],
    pub src_ip: [u8; 4],
    pub dst_ip: [u8; 4],
    pub tos: u8,
    pub ttl: u8,
    pub ip_id: u16,
    /// Flags and fragment offset (0x4000: DF).
    pub ip_frag: u16,
    pub sport: u16,
    pub dport: u16,
    pub udp_csum: u16,
    pub opcode: u8,
    /// BTH byte 1 bits 7..6: SE and MigReq.
    pub se_m: u8,
    pub tver: u8,
    pub pkey: u16,
    /// BTH byte 4 (FECN/BECN and reserved bits).
    pub bth_b4: u8,
    pub dest_qpn: u32,
    pub ack_req: bool,
    pub psn: u32,
    pub deth: Option<(u32, u32)>,
    pub reth: Option<Reth>,
    pub atomic_eth: Option<AtomicEth>,
    pub aeth: Option<Aeth>,
    pub atomic_ack: Option<u64>,
    pub imm: Option<u32>,
    pub ieth: Option<u32>,
    pub payload: Vec<u8>,
}

impl std::fmt::Debug for Pkt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pkt")
            .field("mac", &(self.src_mac, self.dst_mac))
            .field("ip", &(self.src_ip, self.dst_ip))
            .field(
                "tos_ttl_id_frag",
                &(self.tos, self.ttl, self.ip_id, self.ip_frag),
            )
            .field("udp", &(self.sport, self.dport, self.udp_csum))
            .field("opcode", &format_args!("{:#04x}", self.opcode))
            .field("bth", &(self.se_m, self.tver, self.pkey, self.bth_b4))
            .field("dest_qpn", &format_args!("{:#x}", self.dest_qpn))
            .field("ack_req", &self.ack_req)
            .field("psn", &format_args!("{:#x}", self.psn))
            .field("deth", &self.deth)
            .field("reth", &self.reth)
            .field("atomic_eth", &self.atomic_eth)
            .field("aeth", &self.aeth)
            .field("atomic_ack", &self.atomic_ack)
            .field("imm", &self.imm)
            .field("ieth", &self.ieth)
            .field(
                "payload",
                &format_args!(
                    "{} bytes {:02x?}..",
                    self.payload.len(),
                    &self.payload[..self.payload.len().min(16)]
                ),
            )
            .finish()
    }
}

impl Pkt {
    /// A packet from `src` (MAC, IP) to `dst` with BTH `opcode`, `dest_qpn`, `psn`: TTL 64,
    /// DF, UDP source port 0xc000, P_Key 0xffff; extended headers to be filled in.
    pub fn new(
        src: ([u8; 6], [u8; 4]),
        dst: ([u8; 6], [u8; 4]),
        opcode: u8,
        dest_qpn: u32,
        psn: u32,
    ) -> Pkt {
        Pkt {
            dst_mac: dst.0,
            src_mac: src.0,
            src_ip: src.1,
            dst_ip: dst.1,
            tos: 0,
            ttl: 64,
            ip_id: 0,
            ip_frag: 0x4000,
            sport: 0xc000,
            dport: ROCE_PORT,
            udp_csum: 0,
            opcode,
            se_m: 0,
            tver: 0,
            pkey: 0xffff,
            bth_b4: 0,
            dest_qpn,
            ack_req: false,
            psn,
            deth: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack: None,
            imm: None,
            ieth: None,
            payload: Vec::new(),
        }
    }

    /// The pad count the payload needs.
    pub fn pad(&self) -> usize {
        (4 - self.payload.len() % 4) % 4
    }

    /// The frame, with right lengths, IPv4 checksum and ICRC. The extended headers written are
    /// the ones that are `Some`, in IBA order (so a test can also build nonsense).
    pub fn encode(&self) -> Vec<u8> {
        let l4 = self.l4();
        let udp_len = l4.len() as u16;
        let mut f = Vec::with_capacity(ETH_LEN + IPV4_LEN + l4.len());
        f.extend_from_slice(&self.dst_mac);
        f.extend_from_slice(&self.src_mac);
        f.extend_from_slice(&ETH_P_IPV4.to_be_bytes());
        let mut ip = [0u8; IPV4_LEN];
        ip[0] = 0x45;
        ip[1] = self.tos;
        ip[2..4].copy_from_slice(&(IPV4_LEN as u16 + udp_len).to_be_bytes());
        ip[4..6].copy_from_slice(&self.ip_id.to_be_bytes());
        ip[6..8].copy_from_slice(&self.ip_frag.to_be_bytes());
        ip[8] = self.ttl;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&self.src_ip);
        ip[16..20].copy_from_slice(&self.dst_ip);
        let c = ip_checksum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(&l4);
        let n = f.len();
        let crc = icrc(&f);
        f[n - ICRC_LEN..].copy_from_slice(&crc.to_le_bytes());
        f
    }

    /// UDP header (its length right, the checksum as `udp_csum` says), BTH, extended headers,
    /// payload, pad, and four zero bytes where the ICRC goes: what follows the IP header.
    pub(crate) fn l4(&self) -> Vec<u8> {
        let mut l4 = Vec::new();
        // UDP header, its length filled in below.
        l4.extend_from_slice(&self.sport.to_be_bytes());
        l4.extend_from_slice(&self.dport.to_be_bytes());
        l4.extend_from_slice(&[0, 0]);
        l4.extend_from_slice(&self.udp_csum.to_be_bytes());
        // BTH
        l4.push(self.opcode);
        l4.push(self.se_m & 0xc0 | (self.pad() as u8) << 4 | self.tver & 0xf);
        l4.extend_from_slice(&self.pkey.to_be_bytes());
        l4.extend_from_slice(
            &((self.bth_b4 as u32) << 24 | self.dest_qpn & 0xff_ffff).to_be_bytes(),
        );
        l4.extend_from_slice(&((self.ack_req as u32) << 31 | self.psn & 0xff_ffff).to_be_bytes());
        if let Some((qkey, src_qp)) = self.deth {
            l4.extend_from_slice(&qkey.to_be_bytes());
            l4.extend_from_slice(&(src_qp & 0xff_ffff).to_be_bytes());
        }
        if let Some(r) = self.reth {
            l4.extend_from_slice(&r.va.to_be_bytes());
            l4.extend_from_slice(&r.rkey.to_be_bytes());
            l4.extend_from_slice(&r.len.to_be_bytes());
        }
        if let Some(a) = self.atomic_eth {
            l4.extend_from_slice(&a.va.to_be_bytes());
            l4.extend_from_slice(&a.rkey.to_be_bytes());
            l4.extend_from_slice(&a.swap_add.to_be_bytes());
            l4.extend_from_slice(&a.compare.to_be_bytes());
        }
        if let Some(a) = self.aeth {
            l4.extend_from_slice(&((a.syndrome as u32) << 24 | a.msn & 0xff_ffff).to_be_bytes());
        }
        if let Some(o) = self.atomic_ack {
            l4.extend_from_slice(&o.to_be_bytes());
        }
        if let Some(i) = self.imm {
            // Immediate data: bytes the application chose, carried as they are.
            l4.extend_from_slice(&i.to_le_bytes());
        }
        if let Some(k) = self.ieth {
            l4.extend_from_slice(&k.to_be_bytes());
        }
        l4.extend_from_slice(&self.payload);
        l4.resize(l4.len() + self.pad(), 0);
        l4.extend_from_slice(&[0; ICRC_LEN]);
        let udp_len = l4.len() as u16;
        l4[4..6].copy_from_slice(&udp_len.to_be_bytes());
        l4
    }

    /// Takes a frame apart, checking what every RoCEv2 frame must have right: EtherType, a
    /// 20-byte IPv4 header with a right checksum and total length, protocol UDP, the UDP
    /// length, a known opcode, transport version 0, the lengths adding up, the ICRC.
    pub fn parse(f: &[u8]) -> Result<Pkt, String> {
        let be16 = |o: usize| u16::from_be_bytes([f[o], f[o + 1]]);
        let be32 = |o: usize| u32::from_be_bytes(f[o..o + 4].try_into().unwrap());
        let be64 = |o: usize| u64::from_be_bytes(f[o..o + 8].try_into().unwrap());
        if f.len() < HDRS_LEN + ICRC_LEN {
            return Err(format!("{} bytes: too short", f.len()));
        }
        if be16(12) != ETH_P_IPV4 {
            return Err(format!("EtherType {:#06x}", be16(12)));
        }
        let ip = &f[ETH_LEN..ETH_LEN + IPV4_LEN];
        if ip[0] != 0x45 || ip[9] != 17 {
            return Err(format!("IPv4 version/IHL {:#x}, protocol {}", ip[0], ip[9]));
        }
        if ip_checksum(ip) != 0 {
            return Err(format!("IPv4 header checksum: {ip:02x?}"));
        }
        if be16(ETH_LEN + 2) as usize != f.len() - ETH_LEN {
            return Err(format!(
                "IPv4 total length {} in a frame of {}",
                be16(ETH_LEN + 2),
                f.len()
            ));
        }
        let u = ETH_LEN + IPV4_LEN;
        if be16(u + 4) as usize != f.len() - u {
            return Err(format!("UDP length {}", be16(u + 4)));
        }
        let b = u + UDP_LEN;
        let l = layout(f[b]).ok_or_else(|| format!("opcode {:#x}", f[b]))?;
        let pad = (f[b + 1] >> 4 & 3) as usize;
        let mut p = Pkt {
            dst_mac: f[0..6].try_into().unwrap(),
            src_mac: f[6..12].try_into().unwrap(),
            tos: ip[1],
            ip_id: be16(ETH_LEN + 4),
            ip_frag: be16(ETH_LEN + 6),
            ttl: ip[8],
            src_ip: ip[12..16].try_into().unwrap(),
            dst_ip: ip[16..20].try_into().unwrap(),
            sport: be16(u),
            dport: be16(u + 2),
            udp_csum: be16(u + 6),
            opcode: f[b],
            se_m: f[b + 1] & 0xc0,
            tver: f[b + 1] & 0xf,
            pkey: be16(b + 2),
            bth_b4: f[b + 4],
            dest_qpn: be32(b + 4) & 0xff_ffff,
            ack_req: f[b + 8] & 0x80 != 0,
            psn: be32(b + 8) & 0xff_ffff,
            deth: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack: None,
            imm: None,
            ieth: None,
            payload: Vec::new(),
        };
        if p.tver != 0 {
            return Err(format!("transport version {}", p.tver));
        }
        if f[b + 8] & 0x7f != 0 {
            return Err(format!("BTH byte 8 reserved bits {:#x}", f[b + 8]));
        }
        let (ext, _) = ext_len(p.opcode).unwrap();
        let end = f.len() - ICRC_LEN;
        let mut h = b + BTH_LEN;
        if h + ext + pad > end {
            return Err(format!(
                "{} bytes: short for opcode {:#x}",
                f.len(),
                p.opcode
            ));
        }
        if l.deth {
            p.deth = Some((be32(h), be32(h + 4) & 0xff_ffff));
            h += 8;
        }
        if l.reth {
            p.reth = Some(Reth {
                va: be64(h),
                rkey: be32(h + 8),
                len: be32(h + 12),
            });
            h += 16;
        }
        if l.atomic_eth {
            p.atomic_eth = Some(AtomicEth {
                va: be64(h),
                rkey: be32(h + 8),
                swap_add: be64(h + 12),
                compare: be64(h + 20),
            });
            h += 28;
        }
        if l.aeth {
            p.aeth = Some(Aeth {
                syndrome: f[h],
                msn: be32(h) & 0xff_ffff,
            });
            h += 4;
        }
        if l.atomic_ack {
            p.atomic_ack = Some(be64(h));
            h += 8;
        }
        if l.imm {
            p.imm = Some(u32::from_le_bytes(f[h..h + 4].try_into().unwrap()));
            h += 4;
        }
        if l.ieth {
            p.ieth = Some(be32(h));
            h += 4;
        }
        if !l.payload && end - h != 0 {
            return Err(format!(
                "{} payload bytes on opcode {:#x}",
                end - h,
                p.opcode
            ));
        }
        if f[end - pad..end].iter().any(|&x| x != 0) {
            return Err(format!("pad bytes {:02x?}", &f[end - pad..end]));
        }
        p.payload = f[h..end - pad].to_vec();
        let want = icrc(f);
        let got = u32::from_le_bytes(f[end..].try_into().unwrap());
        if got != want {
            return Err(format!("ICRC {got:#010x}, computed {want:#010x}"));
        }
        Ok(p)
    }
}

// ------------------------------------------------------------------------------------- ARP

/// An ARP packet for IPv4 over Ethernet, in its Ethernet frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arp {
    pub eth_dst: [u8; 6],
    pub eth_src: [u8; 6],
    /// 1: request, 2: reply.
    pub op: u16,
    pub sha: [u8; 6],
    pub spa: [u8; 4],
    pub tha: [u8; 6],
    pub tpa: [u8; 4],
}

pub const BROADCAST: [u8; 6] = [0xff; 6];

impl Arp {
    /// "Who has `tpa`? Tell `spa` (at `sha`)", broadcast.
    pub fn request(sha: [u8; 6], spa: [u8; 4], tpa: [u8; 4]) -> Arp {
        Arp {
            eth_dst: BROADCAST,
            eth_src: sha,
            op: 1,
            sha,
            spa,
            tha: [0; 6],
            tpa,
        }
    }

    /// The answer to request `q`: `tpa` is at `mac`.
    pub fn reply_to(q: &Arp, mac: [u8; 6]) -> Arp {
        Arp {
            eth_dst: q.sha,
            eth_src: mac,
            op: 2,
            sha: mac,
            spa: q.tpa,
            tha: q.sha,
            tpa: q.spa,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut f = Vec::with_capacity(42);
        f.extend_from_slice(&self.eth_dst);
        f.extend_from_slice(&self.eth_src);
        f.extend_from_slice(&ETH_P_ARP.to_be_bytes());
        f.extend_from_slice(&[0, 1, 0x08, 0x00, 6, 4]);
        f.extend_from_slice(&self.op.to_be_bytes());
        f.extend_from_slice(&self.sha);
        f.extend_from_slice(&self.spa);
        f.extend_from_slice(&self.tha);
        f.extend_from_slice(&self.tpa);
        f
    }

    /// An ARP frame for IPv4 over Ethernet (hardware type 1, protocol 0x0800, lengths 6 and 4).
    pub fn parse(f: &[u8]) -> Result<Arp, String> {
        if f.len() < ETH_LEN + 28 || f[12..14] != ETH_P_ARP.to_be_bytes() {
            return Err(format!("not ARP: {:02x?}", &f[..f.len().min(16)]));
        }
        let a = &f[ETH_LEN..];
        if a[..6] != [0, 1, 0x08, 0x00, 6, 4] {
            return Err(format!("ARP header {:02x?}", &a[..6]));
        }
        Ok(Arp {
            eth_dst: f[0..6].try_into().unwrap(),
            eth_src: f[6..12].try_into().unwrap(),
            op: u16::from_be_bytes([a[6], a[7]]),
            sha: a[8..14].try_into().unwrap(),
            spa: a[14..18].try_into().unwrap(),
            tha: a[18..24].try_into().unwrap(),
            tpa: a[24..28].try_into().unwrap(),
        })
    }
}

// ------------------------------------------------------------------------------------ peer

/// The test as the other end of the port's `-netdev dgram`: a UDP socket on 127.0.0.1 that
/// QEMU sends the port's frames to, and QEMU's own socket that takes ours.
pub struct Peer {
    pub sock: UdpSocket,
    /// Where QEMU's netdev listens.
    pub qemu: SocketAddr,
}

impl Default for Peer {
    fn default() -> Self {
        Self::new()
    }
}

impl Peer {
    /// Binds the test's socket; picks a free port for QEMU's (bound and released here, so that
    /// another process could in theory take it first).
    pub fn new() -> Peer {
        let sock = UdpSocket::bind("127.0.0.1:0").expect("bind the peer's UDP socket");
        let qemu = UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.local_addr())
            .expect("a free UDP port for QEMU");
        Peer { sock, qemu }
    }

    /// The `-netdev` argument that connects netdev `id` to this peer.
    pub fn netdev(&self, id: &str) -> String {
        format!(
            "dgram,id={id},local.type=inet,local.host=127.0.0.1,local.port={},\
             remote.type=inet,remote.host=127.0.0.1,remote.port={}",
            self.qemu.port(),
            self.sock.local_addr().unwrap().port()
        )
    }

    pub fn send(&self, frame: &[u8]) {
        let n = self
            .sock
            .send_to(frame, self.qemu)
            .expect("send a frame to QEMU");
        assert_eq!(n, frame.len());
    }

    /// The next frame within `timeout` (real time: QEMU's main loop reads and writes the
    /// netdev's socket by itself; the virtual clock does not move).
    pub fn recv(&self, timeout: Duration) -> Option<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        let mut buf = vec![0u8; 65536];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            self.sock.set_read_timeout(Some(left)).unwrap();
            match self.sock.recv_from(&mut buf) {
                Ok((n, from)) if from == self.qemu => return Some(buf[..n].to_vec()),
                Ok(_) => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return None
                }
                Err(e) => panic!("peer socket: {e}"),
            }
        }
    }

    /// Every frame that arrives within `quiet` of the last one.
    pub fn drain(&self, quiet: Duration) -> Vec<Vec<u8>> {
        std::iter::from_fn(|| self.recv(quiet)).collect()
    }

    /// If `f` is the device's (`dev`: MAC and IPv4 address) ARP request for `me` (the host the
    /// test plays), answers it and returns true: the device learns a MAC only by asking.
    pub fn answer_arp(&self, f: &[u8], dev: ([u8; 6], [u8; 4]), me: ([u8; 6], [u8; 4])) -> bool {
        match Arp::parse(f) {
            Ok(q) if q == Arp::request(dev.0, dev.1, me.1) => {
                self.send(&Arp::reply_to(&q, me.0).encode());
                true
            }
            _ => false,
        }
    }

    /// [`Peer::recv`], answering the device's ARP requests for `me` on the way.
    pub fn recv_answering(
        &self,
        timeout: Duration,
        dev: ([u8; 6], [u8; 4]),
        me: ([u8; 6], [u8; 4]),
    ) -> Option<Vec<u8>> {
        std::iter::from_fn(|| self.recv(timeout)).find(|f| !self.answer_arp(f, dev, me))
    }

    /// [`Peer::drain`], answering the device's ARP requests for `me` on the way.
    pub fn drain_answering(
        &self,
        quiet: Duration,
        dev: ([u8; 6], [u8; 4]),
        me: ([u8; 6], [u8; 4]),
    ) -> Vec<Vec<u8>> {
        std::iter::from_fn(|| self.recv_answering(quiet, dev, me)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_is_zlibs() {
        assert_eq!(crc32(0, b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32(crc32(0, b"1234"), b"56789"), 0xcbf4_3926);
        assert_eq!(crc32(0, b""), 0);
    }

    #[test]
    fn ip_checksum_of_rfc1071_example() {
        // The header of RFC 791's usual example, checksum 0xb861.
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(ip_checksum(&h), 0xb861);
        h[10] = 0xb8;
        h[11] = 0x61;
        assert_eq!(ip_checksum(&h), 0);
    }

    #[test]
    fn frames_round_trip_and_the_icrc_covers_what_it_should() {
        let mut p = Pkt::new(
            ([2; 6], [10, 0, 0, 2]),
            ([4; 6], [10, 0, 0, 1]),
            op::WRITE_ONLY_IMM,
            0x12,
            0xabcdef,
        );
        p.reth = Some(Reth {
            va: 0x1122_3344_5566_7788,
            rkey: 0x99,
            len: 5,
        });
        p.imm = Some(0xdead_beef);
        p.ack_req = true;
        p.payload = vec![1, 2, 3, 4, 5];
        let f = p.encode();
        assert_eq!(f.len(), HDRS_LEN + 16 + 4 + 8 + ICRC_LEN);
        assert_eq!(Pkt::parse(&f), Ok(p.clone()));
        // TOS, TTL and the checksums are outside the ICRC; BTH byte 4 too.
        for (o, v) in [(15, 0x20), (22, 7), (40, 0x12), (46, 0x80)] {
            let mut g = f.clone();
            g[o] = v;
            assert_eq!(icrc(&g), icrc(&f), "byte {o}");
        }
        // Everything else from the IP header on is inside; the Ethernet header is not.
        let mut g = f.clone();
        g[0..14].fill(0x5a);
        assert_eq!(icrc(&g), icrc(&f));
        for o in [16, 18, 20, 26, 30, 34, 38, 42, 47, 50, 60, f.len() - 5] {
            let mut g = f.clone();
            g[o] ^= 1;
            assert_ne!(icrc(&g), icrc(&f), "byte {o}");
        }
        let mut g = f.clone();
        let n = g.len();
        g[n - 1] ^= 0x80;
        assert!(Pkt::parse(&g).unwrap_err().contains("ICRC"));
    }

    #[test]
    fn arp_round_trip() {
        let q = Arp::request([2; 6], [10, 0, 0, 2], [10, 0, 0, 1]);
        let f = q.encode();
        assert_eq!(f.len(), 42);
        assert_eq!(Arp::parse(&f), Ok(q));
        let r = Arp::reply_to(&q, [4; 6]);
        assert_eq!(
            (r.eth_dst, r.sha, r.spa, r.tha, r.tpa),
            ([2; 6], [4; 6], [10, 0, 0, 1], [2; 6], [10, 0, 0, 2])
        );
    }
}
