/*
 * qhca: an emulated RDMA host channel adapter -- RoCEv2 frames
 *
 * The codec of the port's wire (IBA Annex A17, RoCEv2): a packet for
 * another port becomes an Ethernet frame, IPv4 (or IPv6) and UDP to port
 * 4791, carrying the BTH, the extended headers of the opcode, the payload
 * padded to 4 bytes and the ICRC; a frame that arrives is checked header by
 * header and decoded only if it is for one of the port's GIDs, from another
 * host's, and its ICRC is right.  Nothing that arrives is trusted: a frame
 * that does not parse, does not add up, is too long, claims to come from the
 * port itself or from no one host (forged: the port's own traffic never
 * reaches the wire), or has a bad ICRC is dropped and counted in struct
 * qhca_port_counters, never acted on.  qhca-net.c moves the frames.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "net/eth.h"
#include "qhca-wire.h"
#include "trace.h"
#include <zlib.h>

/* BTH byte 1 */
#define QHCA_BTH_PAD_SHIFT      4
#define QHCA_BTH_PAD_MASK       0x30
#define QHCA_BTH_TVER_MASK      0x0f
/* BTH byte 8 */
#define QHCA_BTH_ACK_REQ        0x80
#define QHCA_PKEY_DEFAULT       0xffff

/* ------------------------------------------------------------------------ */
/* headers                                                                  */

/* Which extended headers an opcode carries, and whether a payload. */
typedef struct QhcaOpLayout {
    bool valid;
    bool deth, reth, atomic_eth, aeth, atomic_ack, immdt, ieth;
    bool payload;
} QhcaOpLayout;

static QhcaOpLayout qhca_op_layout(uint8_t op)
{
    QhcaOpLayout l = { .valid = true };

    switch (op) {
    case QHCA_OP_SEND_FIRST:
    case QHCA_OP_SEND_MIDDLE:
    case QHCA_OP_SEND_LAST:
    case QHCA_OP_SEND_ONLY:
    case QHCA_OP_WRITE_MIDDLE:
    case QHCA_OP_WRITE_LAST:
    case QHCA_OP_READ_RESP_MIDDLE:
        l.payload = true;
        break;
    case QHCA_OP_SEND_LAST_IMM:
    case QHCA_OP_SEND_ONLY_IMM:
    case QHCA_OP_WRITE_LAST_IMM:
        l.immdt = l.payload = true;
        break;
    case QHCA_OP_SEND_LAST_INV:
    case QHCA_OP_SEND_ONLY_INV:
        l.ieth = l.payload = true;
        break;
    case QHCA_OP_WRITE_FIRST:
    case QHCA_OP_WRITE_ONLY:
        l.reth = l.payload = true;
        break;
    case QHCA_OP_WRITE_ONLY_IMM:
        l.reth = l.immdt = l.payload = true;
        break;
    case QHCA_OP_READ_REQUEST:
        l.reth = true;
        break;
    case QHCA_OP_READ_RESP_FIRST:
    case QHCA_OP_READ_RESP_LAST:
    case QHCA_OP_READ_RESP_ONLY:
        l.aeth = l.payload = true;
        break;
    case QHCA_OP_ACK:
        l.aeth = true;
        break;
    case QHCA_OP_ATOMIC_ACK:
        l.aeth = l.atomic_ack = true;
        break;
    case QHCA_OP_CMP_SWAP:
    case QHCA_OP_FETCH_ADD:
        l.atomic_eth = true;
        break;
    case QHCA_OP_UD_SEND_ONLY:
        l.deth = l.payload = true;
        break;
    case QHCA_OP_UD_SEND_ONLY_IMM:
        l.deth = l.immdt = l.payload = true;
        break;
    default:
        l.valid = false;
    }
    return l;
}

/* Bytes of the extended headers the layout has. */
static uint32_t qhca_ext_size(const QhcaOpLayout *l)
{
    return (l->deth ? QHCA_DETH_SIZE : 0) + (l->reth ? QHCA_RETH_SIZE : 0) +
           (l->atomic_eth ? QHCA_ATOMIC_ETH_SIZE : 0) +
           (l->aeth ? QHCA_AETH_SIZE : 0) +
           (l->atomic_ack ? QHCA_ATOMIC_ACK_SIZE : 0) +
           (l->immdt ? QHCA_IMMDT_SIZE : 0) + (l->ieth ? QHCA_IETH_SIZE : 0);
}

static uint16_t qhca_ip_csum(const uint8_t *hdr, size_t len)
{
    uint32_t sum = 0;
    size_t i;

    for (i = 0; i + 1 < len; i += 2) {
        sum += lduw_be_p(hdr + i);
    }
    while (sum >> 16) {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    return ~sum;
}

void qhca_ipv4_header(uint8_t *hdr, const QhcaPkt *pkt, uint32_t ip_payload)
{
    hdr[0] = 0x45;
    hdr[1] = pkt->traffic_class;
    stw_be_p(hdr + 2, QHCA_IPV4_SIZE + ip_payload);
    stw_be_p(hdr + 4, 0);                       /* identification */
    stw_be_p(hdr + 6, 0x4000);                  /* DF */
    hdr[8] = pkt->hop_limit;
    hdr[9] = QHCA_IPPROTO_UDP;
    stw_be_p(hdr + 10, 0);
    memcpy(hdr + 12, pkt->sgid + 12, 4);
    memcpy(hdr + 16, pkt->dgid + 12, 4);
    stw_be_p(hdr + 10, qhca_ip_csum(hdr, QHCA_IPV4_SIZE));
}

static void qhca_ipv6_header(uint8_t *hdr, const QhcaPkt *pkt,
                             uint32_t ip_payload)
{
    stl_be_p(hdr, 6u << 28 | (uint32_t)pkt->traffic_class << 20 |
                  pkt->flow_label);
    stw_be_p(hdr + 4, ip_payload);
    hdr[6] = QHCA_IPPROTO_UDP;
    hdr[7] = pkt->hop_limit;
    memcpy(hdr + 8, pkt->sgid, 16);
    memcpy(hdr + 24, pkt->dgid, 16);
}

/* The UDP checksum over an IPv6 pseudo-header (RFC 8200 8.1). */
static uint16_t qhca_udp6_csum(const uint8_t *ip6, const uint8_t *udp,
                               uint32_t len)
{
    uint32_t sum = 0;
    uint32_t i;

    for (i = 8; i < 40; i += 2) {
        sum += lduw_be_p(ip6 + i);
    }
    sum += len >> 16;
    sum += len & 0xffff;
    sum += QHCA_IPPROTO_UDP;
    for (i = 0; i + 1 < len; i += 2) {
        sum += lduw_be_p(udp + i);
        if (sum >> 31) {
            sum = (sum & 0xffff) + (sum >> 16);
        }
    }
    if (len & 1) {
        sum += udp[len - 1] << 8;
    }
    while (sum >> 16) {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum = ~sum & 0xffff;
    return sum ? sum : 0xffff;
}

/*
 * The ICRC (IBA A17.3.3): CRC-32 over 8 bytes of ones (the LRH a RoCEv2
 * packet does not have), the IP header with its variant fields (IPv4: TOS,
 * TTL, checksum; IPv6: traffic class, flow label, hop limit) set to ones,
 * the UDP header with its checksum set to ones, the BTH with its reserved
 * byte 4 set to ones, and the rest of the packet up to the ICRC.  Stored
 * least significant byte first, as Ethernet's FCS.
 */
static uint32_t qhca_icrc(const uint8_t *ip, bool v4, const uint8_t *l4,
                          uint32_t l4_len)
{
    uint8_t ps[8 + QHCA_IPV6_SIZE + QHCA_UDP_SIZE + QHCA_BTH_SIZE];
    uint32_t iplen = v4 ? QHCA_IPV4_SIZE : QHCA_IPV6_SIZE;
    uint8_t *p = ps + 8;
    uint32_t crc;

    memset(ps, 0xff, 8);
    memcpy(p, ip, iplen);
    if (v4) {
        p[1] = 0xff;
        p[8] = 0xff;
        p[10] = p[11] = 0xff;
    } else {
        p[0] |= 0x0f;
        memset(p + 1, 0xff, 3);
        p[7] = 0xff;
    }
    p += iplen;
    memcpy(p, l4, QHCA_UDP_SIZE + QHCA_BTH_SIZE);
    p[6] = p[7] = 0xff;
    p[QHCA_UDP_SIZE + 4] = 0xff;
    p += QHCA_UDP_SIZE + QHCA_BTH_SIZE;
    crc = crc32(0, ps, p - ps);
    return crc32(crc, l4 + QHCA_UDP_SIZE + QHCA_BTH_SIZE,
                 l4_len - QHCA_UDP_SIZE - QHCA_BTH_SIZE);
}

/* ------------------------------------------------------------------------ */
/* encode                                                                   */

/*
 * The frame of pkt in frame (QHCA_FRAME_MAX bytes), the destination MAC
 * left for the caller; its length, or 0 if the destination GID is not one
 * this port can reach (counted).
 */
size_t qhca_roce_encode(QhcaState *s, const QhcaPkt *pkt, uint8_t *frame)
{
    QhcaOpLayout l = qhca_op_layout(pkt->opcode);
    bool v4 = qhca_gid_is_v4(pkt->sgid);
    uint32_t iplen = v4 ? QHCA_IPV4_SIZE : QHCA_IPV6_SIZE;
    uint32_t pad = (4 - (pkt->len & 3)) & 3;
    uint8_t *ip = frame + QHCA_ETH_SIZE;
    uint8_t *l4 = ip + iplen;
    uint8_t *bth = l4 + QHCA_UDP_SIZE;
    uint8_t *h = bth + QHCA_BTH_SIZE;
    uint32_t l4_len, hash;

    assert(l.valid && pkt->len <= 4096);
    if (!v4 && !qhca_gid_eui64_mac(pkt->dgid, NULL)) {
        /* Not a link-local EUI-64 address: no way to its MAC here. */
        s->port.tx_no_route++;
        trace_qhca_wire_no_route(pkt->opcode, pkt->dest_qpn, pkt->psn);
        return 0;
    }

    /* BTH */
    bth[0] = pkt->opcode;
    bth[1] = pad << QHCA_BTH_PAD_SHIFT;
    stw_be_p(bth + 2, QHCA_PKEY_DEFAULT);
    stl_be_p(bth + 4, pkt->dest_qpn & QHCA_PSN_MASK);
    stl_be_p(bth + 8, (pkt->ack_req ? QHCA_BTH_ACK_REQ << 24 : 0) |
                      (pkt->psn & QHCA_PSN_MASK));
    /* Extended headers, in the order IBA 9.2 gives them. */
    if (l.deth) {
        stl_be_p(h, pkt->qkey);
        stl_be_p(h + 4, pkt->src_qpn & QHCA_PSN_MASK);
        h += QHCA_DETH_SIZE;
    }
    if (l.reth) {
        stq_be_p(h, pkt->va);
        stl_be_p(h + 8, pkt->rkey);
        stl_be_p(h + 12, pkt->dma_len);
        h += QHCA_RETH_SIZE;
    }
    if (l.atomic_eth) {
        stq_be_p(h, pkt->va);
        stl_be_p(h + 8, pkt->rkey);
        stq_be_p(h + 12, pkt->swap_add);
        stq_be_p(h + 20, pkt->compare);
        h += QHCA_ATOMIC_ETH_SIZE;
    }
    if (l.aeth) {
        stl_be_p(h, (uint32_t)pkt->syndrome << 24 |
                    (pkt->msn & QHCA_PSN_MASK));
        h += QHCA_AETH_SIZE;
    }
    if (l.atomic_ack) {
        stq_be_p(h, pkt->orig);
        h += QHCA_ATOMIC_ACK_SIZE;
    }
    if (l.immdt) {
        /* Immediate data is bytes the program chose, in its own order. */
        stl_le_p(h, pkt->imm);
        h += QHCA_IMMDT_SIZE;
    }
    if (l.ieth) {
        stl_be_p(h, pkt->ieth);
        h += QHCA_IETH_SIZE;
    }
    memcpy(h, pkt->payload, pkt->len);
    memset(h + pkt->len, 0, pad);
    h += pkt->len + pad;
    l4_len = h - l4 + QHCA_ICRC_SIZE;

    /* UDP: a source port per QP pair, so that ECMP keeps a QP on one path. */
    hash = (pkt->src_qpn ^ pkt->dest_qpn) * 0x9e3779b1u;
    stw_be_p(l4, 0xc000 | (hash >> 18));
    stw_be_p(l4 + 2, QHCA_ROCE_UDP_PORT);
    stw_be_p(l4 + 4, l4_len);
    stw_be_p(l4 + 6, 0);
    if (v4) {
        qhca_ipv4_header(ip, pkt, l4_len);
    } else {
        qhca_ipv6_header(ip, pkt, l4_len);
    }
    stl_le_p(h, qhca_icrc(ip, v4, l4, l4_len - QHCA_ICRC_SIZE));
    if (!v4) {
        /* IPv6 has no UDP without a checksum; it covers the ICRC too. */
        stw_be_p(l4 + 6, qhca_udp6_csum(ip, l4, l4_len));
    }

    memcpy(frame + ETH_ALEN, s->conf.macaddr.a, ETH_ALEN);
    stw_be_p(frame + 12, v4 ? QHCA_ETH_P_IPV4 : QHCA_ETH_P_IPV6);
    trace_qhca_roce_tx(pkt->opcode, pkt->dest_qpn, pkt->psn,
                       QHCA_ETH_SIZE + iplen + l4_len);
    return QHCA_ETH_SIZE + iplen + l4_len;
}

/* ------------------------------------------------------------------------ */
/* decode                                                                   */

bool qhca_roce_dropped(const char *why)
{
    trace_qhca_roce_rx_drop(why);
    return false;
}


/*
 * A RoCEv2 frame of size bytes (IPv4 or IPv6 by its EtherType, its
 * destination MAC already checked), checked and decoded into pkt; false
 * (counted) if it is not one for this port.
 */
bool qhca_roce_decode(QhcaState *s, const uint8_t *buf, size_t size,
                      QhcaPkt *pkt)
{
    uint16_t type = lduw_be_p(buf + 12);
    const uint8_t *ip = buf + QHCA_ETH_SIZE;
    const uint8_t *l4, *bth, *h;
    uint32_t iplen, l4_len, ext, pad, paylen;
    QhcaOpLayout l;
    bool v4 = type == QHCA_ETH_P_IPV4;

    if (v4) {
        uint32_t tot;

        if (size < QHCA_ETH_SIZE + QHCA_IPV4_SIZE) {
            return QHCA_RX_DROP(s, rx_malformed, "short IPv4");
        }
        tot = lduw_be_p(ip + 2);
        if (ip[0] != 0x45 || tot < QHCA_IPV4_SIZE + QHCA_UDP_SIZE ||
            tot > size - QHCA_ETH_SIZE ||
            (lduw_be_p(ip + 6) & 0x3fff) ||
            qhca_ip_csum(ip, QHCA_IPV4_SIZE)) {
            return QHCA_RX_DROP(s, rx_malformed, "IPv4 header (options,"
                                " fragment, length or checksum)");
        }
        if (ip[9] != QHCA_IPPROTO_UDP ||
            !qhca_ipv4_ours(s, ldl_be_p(ip + 16))) {
            return QHCA_RX_DROP(s, rx_not_ours,
                                "IPv4: not UDP to this port");
        }
        if (qhca_ipv4_forged(s, ldl_be_p(ip + 12))) {
            return QHCA_RX_DROP(s, rx_forged, "IPv4: from the port's own"
                                " address, or from no one host");
        }
        iplen = QHCA_IPV4_SIZE;
        l4_len = tot - QHCA_IPV4_SIZE;
        qhca_gid_from_ipv4(pkt->sgid, ldl_be_p(ip + 12));
        qhca_gid_from_ipv4(pkt->dgid, ldl_be_p(ip + 16));
        pkt->traffic_class = ip[1];
        pkt->hop_limit = ip[8];
        pkt->flow_label = 0;
    } else {
        if (size < QHCA_ETH_SIZE + QHCA_IPV6_SIZE) {
            return QHCA_RX_DROP(s, rx_malformed, "short IPv6");
        }
        l4_len = lduw_be_p(ip + 4);
        if ((ip[0] >> 4) != 6 ||
            l4_len > size - QHCA_ETH_SIZE - QHCA_IPV6_SIZE) {
            return QHCA_RX_DROP(s, rx_malformed, "IPv6 header");
        }
        if (ip[6] != QHCA_IPPROTO_UDP || !qhca_gid_ours(s, ip + 24) ||
            qhca_gid_is_v4(ip + 24)) {
            return QHCA_RX_DROP(s, rx_not_ours,
                                "IPv6: not UDP to this port");
        }
        /* An IPv4-mapped source is an IPv4 host's: not over IPv6. */
        if (qhca_gid_is_v4(ip + 8) || qhca_gid_forged(s, ip + 8)) {
            return QHCA_RX_DROP(s, rx_forged, "IPv6: from the port's own"
                                " address, IPv4-mapped, or from no one host");
        }
        iplen = QHCA_IPV6_SIZE;
        memcpy(pkt->sgid, ip + 8, 16);
        memcpy(pkt->dgid, ip + 24, 16);
        pkt->traffic_class = ldl_be_p(ip) >> 20;
        pkt->flow_label = ldl_be_p(ip) & 0xfffff;
        pkt->hop_limit = ip[7];
    }
    l4 = ip + iplen;
    if (l4_len < QHCA_UDP_SIZE || lduw_be_p(l4 + 4) != l4_len) {
        return QHCA_RX_DROP(s, rx_malformed, "UDP length");
    }
    if (lduw_be_p(l4 + 2) != QHCA_ROCE_UDP_PORT) {
        return QHCA_RX_DROP(s, rx_not_ours, "UDP: not RoCEv2");
    }
    if (l4_len < QHCA_UDP_SIZE + QHCA_BTH_SIZE + QHCA_ICRC_SIZE) {
        return QHCA_RX_DROP(s, rx_malformed, "short BTH");
    }
    bth = l4 + QHCA_UDP_SIZE;
    l = qhca_op_layout(bth[0]);
    ext = qhca_ext_size(&l);
    pad = (bth[1] & QHCA_BTH_PAD_MASK) >> QHCA_BTH_PAD_SHIFT;
    if (!l.valid || (bth[1] & QHCA_BTH_TVER_MASK) ||
        (lduw_be_p(bth + 2) & 0x7fff) != 0x7fff ||
        l4_len < QHCA_UDP_SIZE + QHCA_BTH_SIZE + ext + pad + QHCA_ICRC_SIZE) {
        return QHCA_RX_DROP(s, rx_malformed,
                            "BTH (opcode, version, P_Key or length)");
    }
    paylen = l4_len - QHCA_UDP_SIZE - QHCA_BTH_SIZE - ext - pad -
             QHCA_ICRC_SIZE;
    if (!l.payload && (paylen || pad)) {
        return QHCA_RX_DROP(s, rx_malformed,
                            "payload on an opcode without one");
    }
    if (paylen > sizeof(pkt->payload)) {
        return QHCA_RX_DROP(s, rx_oversize, "payload > 4096");
    }
    if (qhca_icrc(ip, v4, l4, l4_len - QHCA_ICRC_SIZE) !=
        ldl_le_p(l4 + l4_len - QHCA_ICRC_SIZE)) {
        return QHCA_RX_DROP(s, rx_bad_icrc, "ICRC");
    }

    pkt->opcode = bth[0];
    pkt->dest_qpn = ldl_be_p(bth + 4) & QHCA_PSN_MASK;
    pkt->ack_req = bth[8] & QHCA_BTH_ACK_REQ;
    pkt->psn = ldl_be_p(bth + 8) & QHCA_PSN_MASK;
    pkt->src_qpn = QHCA_SRC_QPN_UNKNOWN;
    h = bth + QHCA_BTH_SIZE;
    if (l.deth) {
        pkt->qkey = ldl_be_p(h);
        pkt->src_qpn = ldl_be_p(h + 4) & QHCA_PSN_MASK;
        h += QHCA_DETH_SIZE;
    }
    if (l.reth) {
        pkt->va = ldq_be_p(h);
        pkt->rkey = ldl_be_p(h + 8);
        pkt->dma_len = ldl_be_p(h + 12);
        h += QHCA_RETH_SIZE;
    }
    if (l.atomic_eth) {
        pkt->va = ldq_be_p(h);
        pkt->rkey = ldl_be_p(h + 8);
        pkt->swap_add = ldq_be_p(h + 12);
        pkt->compare = ldq_be_p(h + 20);
        h += QHCA_ATOMIC_ETH_SIZE;
    }
    if (l.aeth) {
        pkt->syndrome = h[0];
        pkt->msn = ldl_be_p(h) & QHCA_PSN_MASK;
        h += QHCA_AETH_SIZE;
    }
    if (l.atomic_ack) {
        pkt->orig = ldq_be_p(h);
        h += QHCA_ATOMIC_ACK_SIZE;
    }
    if (l.immdt) {
        pkt->imm = ldl_le_p(h);
        h += QHCA_IMMDT_SIZE;
    }
    if (l.ieth) {
        pkt->ieth = ldl_be_p(h);
        h += QHCA_IETH_SIZE;
    }
    pkt->len = paylen;
    memcpy(pkt->payload, h, paylen);
    return true;
}
