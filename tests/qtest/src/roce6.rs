// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! RoCEv2 over IPv6 from the test side (IBA Annex A17), the same packets as [`Pkt`] in another
//! IP header: Ethernet II with EtherType 0x86dd, a 40-byte IPv6 header (version 6, the traffic
//! class, flow label 0, the payload length, next header 17, the hop limit, the addresses), the
//! UDP header with its checksum over the RFC 8200 pseudo-header (IPv6 has no UDP without one),
//! and the ICRC: as over IPv4 ([`roce::icrc`](crate::roce::icrc)) but over the IPv6 header
//! with its traffic class, flow label and hop limit set to ones. Also IPv6 neighbour
//! solicitations (RFC 4861), which the port answers for its IPv6 GIDs.

use crate::roce::{crc32, ip_checksum, Pkt, BTH_LEN, ETH_LEN, ICRC_LEN, UDP_LEN};

pub const ETH_P_IPV6: u16 = 0x86dd;
pub const IPV6_LEN: usize = 40;

/// The ICRC of an IPv6 RoCEv2 frame (Ethernet header first), over everything from the IP
/// header to the four bytes before the frame's end.
pub fn icrc6(frame: &[u8]) -> u32 {
    let hdrs = ETH_LEN + IPV6_LEN + UDP_LEN + BTH_LEN;
    let mut masked = [0xffu8; 8 + IPV6_LEN + UDP_LEN + BTH_LEN];
    masked[8..].copy_from_slice(&frame[ETH_LEN..hdrs]);
    let (ip, rest) = masked[8..].split_at_mut(IPV6_LEN);
    ip[0] |= 0x0f; // traffic class, high half
    ip[1..4].fill(0xff); // traffic class, low half; flow label
    ip[7] = 0xff; // hop limit
    rest[6] = 0xff; // UDP checksum
    rest[7] = 0xff;
    rest[UDP_LEN + 4] = 0xff; // BTH byte 4 (reserved)
    let crc = crc32(0, &masked);
    crc32(crc, &frame[hdrs..frame.len() - ICRC_LEN])
}

/// The UDP checksum of `udp` (its checksum field zero) between IPv6 addresses `src` and `dst`;
/// 0xffff for a sum of 0.
pub fn udp6_checksum(src: &[u8; 16], dst: &[u8; 16], udp: &[u8]) -> u16 {
    let mut pseudo = Vec::with_capacity(40 + udp.len());
    pseudo.extend_from_slice(src);
    pseudo.extend_from_slice(dst);
    pseudo.extend_from_slice(&(udp.len() as u32).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 17]);
    pseudo.extend_from_slice(udp);
    match ip_checksum(&pseudo) {
        0 => 0xffff,
        c => c,
    }
}

/// The ICMPv6 checksum of `body` between `src` and `dst` (RFC 8200 8.1); 0 over a body whose
/// checksum is right.
pub fn icmpv6_sum(src: &[u8; 16], dst: &[u8; 16], body: &[u8]) -> u16 {
    let mut pseudo = Vec::with_capacity(40 + body.len());
    pseudo.extend_from_slice(src);
    pseudo.extend_from_slice(dst);
    pseudo.extend_from_slice(&(body.len() as u32).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 58]);
    pseudo.extend_from_slice(body);
    ip_checksum(&pseudo)
}

/// An IPv6 neighbour solicitation (RFC 4861 4.3) for `target` from `from` (a MAC and an IPv6
/// address, all zero for duplicate address detection: then without the source link-layer
/// address option), to the target's solicited-node group or, with `unicast_to`, to that MAC
/// and `target` itself.
pub fn neighbour_solicitation(
    from: ([u8; 6], [u8; 16]),
    target: [u8; 16],
    hop_limit: u8,
    unicast_to: Option<[u8; 6]>,
) -> Vec<u8> {
    let (src_mac, src) = from;
    let mut dst = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 0];
    dst[13..].copy_from_slice(&target[13..]);
    let mut mac = [0x33, 0x33, 0xff, 0, 0, 0];
    mac[3..].copy_from_slice(&target[13..]);
    if let Some(m) = unicast_to {
        (dst, mac) = (target, m);
    }
    let mut icmp = vec![135, 0, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(&target);
    if src != [0; 16] {
        // Source link-layer address.
        icmp.extend_from_slice(&[1, 1]);
        icmp.extend_from_slice(&src_mac);
    }
    let sum = icmpv6_sum(&src, &dst, &icmp);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    let mut f = Vec::new();
    f.extend_from_slice(&mac);
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&ETH_P_IPV6.to_be_bytes());
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(icmp.len() as u16).to_be_bytes());
    f.extend_from_slice(&[58, hop_limit]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&icmp);
    f
}

impl Pkt {
    /// The frame over IPv6 from `sgid` to `dgid`: the packet's MACs, its TOS as the traffic
    /// class and its TTL as the hop limit (its IPv4 fields are not used), right lengths, the
    /// ICRC, then the UDP checksum over all of it (`udp_csum` is not used either).
    pub fn encode_v6(&self, sgid: [u8; 16], dgid: [u8; 16]) -> Vec<u8> {
        let mut l4 = self.l4();
        l4[6..8].fill(0);
        let mut f = Vec::with_capacity(ETH_LEN + IPV6_LEN + l4.len());
        f.extend_from_slice(&self.dst_mac);
        f.extend_from_slice(&self.src_mac);
        f.extend_from_slice(&ETH_P_IPV6.to_be_bytes());
        f.extend_from_slice(&(6u32 << 28 | (self.tos as u32) << 20).to_be_bytes());
        f.extend_from_slice(&(l4.len() as u16).to_be_bytes());
        f.extend_from_slice(&[17, self.ttl]);
        f.extend_from_slice(&sgid);
        f.extend_from_slice(&dgid);
        f.extend_from_slice(&l4);
        let n = f.len();
        let crc = icrc6(&f);
        f[n - ICRC_LEN..].copy_from_slice(&crc.to_le_bytes());
        let u = ETH_LEN + IPV6_LEN;
        let sum = udp6_checksum(&sgid, &dgid, &f[u..]);
        f[u + 6..u + 8].copy_from_slice(&sum.to_be_bytes());
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roce::op;

    #[test]
    fn the_ipv6_icrc_covers_what_it_should_and_the_udp_checksum_adds_up() {
        let sgid = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 2, 2, 0xff, 0xfe, 2, 2, 2];
        let dgid = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 6, 4, 4, 0xff, 0xfe, 4, 4, 4];
        let mut p = Pkt::new(([2; 6], [0; 4]), ([4; 6], [0; 4]), op::SEND_ONLY, 0x12, 7);
        p.tos = 0x28;
        p.payload = vec![1, 2, 3, 4, 5];
        let f = p.encode_v6(sgid, dgid);
        assert_eq!(
            f.len(),
            ETH_LEN + IPV6_LEN + UDP_LEN + BTH_LEN + 8 + ICRC_LEN
        );
        assert_eq!((f[12], f[13], f[14], f[15]), (0x86, 0xdd, 0x62, 0x80));
        assert_eq!(
            u16::from_be_bytes([f[18], f[19]]) as usize,
            f.len() - ETH_LEN - IPV6_LEN
        );
        // The checksum over the pseudo-header and the UDP datagram, its own included: 0.
        let u = ETH_LEN + IPV6_LEN;
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&sgid);
        pseudo.extend_from_slice(&dgid);
        pseudo.extend_from_slice(&((f.len() - u) as u32).to_be_bytes());
        pseudo.extend_from_slice(&[0, 0, 0, 17]);
        pseudo.extend_from_slice(&f[u..]);
        assert_eq!(ip_checksum(&pseudo), 0);
        // Traffic class, flow label, hop limit, the UDP checksum and BTH byte 4 are outside.
        for (o, v) in [
            (14, 0x6f),
            (15, 0x12),
            (16, 0x34),
            (21, 3),
            (60, 9),
            (66, 0x80),
        ] {
            let mut g = f.clone();
            g[o] = v;
            assert_eq!(icrc6(&g), icrc6(&f), "byte {o}");
        }
        // The addresses, the payload length, the next header are inside.
        for o in [18, 20, 22, 37, 38, 53, 54, 58, 62, 70, f.len() - 5] {
            let mut g = f.clone();
            g[o] ^= 1;
            assert_ne!(icrc6(&g), icrc6(&f), "byte {o}");
        }
    }
}
