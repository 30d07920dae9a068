/*
 * qhca: an emulated RDMA host channel adapter -- the wire
 *
 * The RC engine (qhca-rc.c) and the wire it talks over are apart: the
 * engine builds and consumes packets (the header fields of an InfiniBand RC
 * packet, decoded, plus up to one path MTU of payload) and hands them to a
 * QhcaWire; the wire delivers packets to qhca_rc_recv() of the device at the
 * other end.  The loopback wire (qhca-wire.c) delivers to the device itself;
 * a packet for another port's GID leaves on the port's netdev as a RoCEv2
 * frame (qhca-roce.c: BTH/RETH/AETH/AtomicETH/ImmDt/IETH in UDP port 4791),
 * and frames that arrive there come back to qhca_rc_recv() the same way.
 *
 * A wire may deliver synchronously, from inside send(): the engine never
 * sends from its receive path of a response, so the nesting stays bounded
 * (request -> response), and it re-checks its state after every send.
 * The engine stamps every packet with its source (qhca_rc_send()).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MISC_QHCA_WIRE_H
#define HW_MISC_QHCA_WIRE_H

#include "qhca.h"

/* BTH opcodes, reliable connected (IBA Table 38). */
enum {
    QHCA_OP_SEND_FIRST              = 0x00,
    QHCA_OP_SEND_MIDDLE             = 0x01,
    QHCA_OP_SEND_LAST               = 0x02,
    QHCA_OP_SEND_LAST_IMM           = 0x03,
    QHCA_OP_SEND_ONLY               = 0x04,
    QHCA_OP_SEND_ONLY_IMM           = 0x05,
    QHCA_OP_WRITE_FIRST             = 0x06,
    QHCA_OP_WRITE_MIDDLE            = 0x07,
    QHCA_OP_WRITE_LAST              = 0x08,
    QHCA_OP_WRITE_LAST_IMM          = 0x09,
    QHCA_OP_WRITE_ONLY              = 0x0a,
    QHCA_OP_WRITE_ONLY_IMM          = 0x0b,
    QHCA_OP_READ_REQUEST            = 0x0c,
    QHCA_OP_READ_RESP_FIRST         = 0x0d,
    QHCA_OP_READ_RESP_MIDDLE        = 0x0e,
    QHCA_OP_READ_RESP_LAST          = 0x0f,
    QHCA_OP_READ_RESP_ONLY          = 0x10,
    QHCA_OP_ACK                     = 0x11,
    QHCA_OP_ATOMIC_ACK              = 0x12,
    QHCA_OP_CMP_SWAP                = 0x13,
    QHCA_OP_FETCH_ADD               = 0x14,
    QHCA_OP_SEND_LAST_INV           = 0x16,
    QHCA_OP_SEND_ONLY_INV           = 0x17,
    /* unreliable datagram (IBA Table 38: transport 011) */
    QHCA_OP_UD_SEND_ONLY            = 0x64,
    QHCA_OP_UD_SEND_ONLY_IMM        = 0x65,
};

/* AETH syndrome (IBA 9.7.5.1): bits 7..5 the kind, 4..0 its value. */
#define QHCA_AETH_ACK           0x00    /* | credits (not used: 0x1f) */
#define QHCA_AETH_RNR_NAK       0x20    /* | RNR timer */
#define QHCA_AETH_NAK           0x60    /* | QHCA_NAK_* */
#define QHCA_AETH_KIND_MASK     0xe0
#define QHCA_NAK_PSN_SEQ        0
#define QHCA_NAK_INV_REQ        1
#define QHCA_NAK_REM_ACCESS     2
#define QHCA_NAK_REM_OP         3

#define QHCA_PSN_MASK           0xffffffu

/* Header sizes (IBA 9.2-9.4; RoCEv2 Annex A17). */
#define QHCA_ETH_SIZE           14
#define QHCA_IPV4_SIZE          20
#define QHCA_IPV6_SIZE          40
#define QHCA_UDP_SIZE           8
#define QHCA_BTH_SIZE           12
#define QHCA_DETH_SIZE          8
#define QHCA_RETH_SIZE          16
#define QHCA_AETH_SIZE          4
#define QHCA_ATOMIC_ETH_SIZE    28
#define QHCA_ATOMIC_ACK_SIZE    8
#define QHCA_IMMDT_SIZE         4
#define QHCA_IETH_SIZE          4
#define QHCA_ICRC_SIZE          4
#define QHCA_ROCE_UDP_PORT      4791
#define QHCA_FRAME_MAX          (QHCA_ETH_SIZE + QHCA_IPV6_SIZE + \
                                 QHCA_UDP_SIZE + QHCA_BTH_SIZE + \
                                 QHCA_ATOMIC_ETH_SIZE + 4096 + \
                                 QHCA_ICRC_SIZE)

#define QHCA_ETH_P_IPV4         0x0800
#define QHCA_ETH_P_ARP          0x0806
#define QHCA_ETH_P_IPV6         0x86dd
#define QHCA_IPPROTO_UDP        17

/*
 * A packet, decoded.  Fields the opcode does not carry are zero.  Every
 * packet says where it comes from and where it goes: the source and
 * destination GIDs (on RoCEv2 the IP header's addresses, on the loopback
 * wire the QP's address vector) and the GRH fields (RoCEv2: the IP header's
 * traffic class, hop limit, flow label).  Between two QPs of one device the
 * packet also carries the sending QP (src_qpn); a frame from the network
 * does not (RC knows its peer from the connection, and a UD datagram's
 * source QPN is the DETH's, also src_qpn): QHCA_SRC_QPN_UNKNOWN.  A QP
 * accepts packets only from the peer it is connected to.  A datagram
 * carries the DETH's Q_Key.
 */
#define QHCA_SRC_QPN_UNKNOWN    UINT32_MAX

typedef struct QhcaPkt {
    uint8_t sgid[16];           /* the sending port's address */
    uint8_t dgid[16];           /* the receiving port's address */
    uint32_t src_qpn;           /* the sending QP, or QHCA_SRC_QPN_UNKNOWN */
    uint32_t qkey;              /* UD: DETH */
    uint32_t flow_label;        /* GRH / IPv6 */
    uint8_t traffic_class;      /* GRH / IP */
    uint8_t hop_limit;          /* GRH / IP */
    uint8_t opcode;             /* BTH */
    bool ack_req;               /* BTH A bit */
    uint32_t dest_qpn;          /* BTH */
    uint32_t psn;               /* BTH, 24 bits */
    uint64_t va;                /* RETH / AtomicETH */
    uint32_t rkey;              /* RETH / AtomicETH */
    uint32_t dma_len;           /* RETH */
    uint8_t syndrome;           /* AETH */
    uint32_t msn;               /* AETH */
    uint32_t imm;               /* ImmDt */
    uint32_t ieth;              /* IETH: the R_Key to invalidate */
    uint64_t swap_add;          /* AtomicETH */
    uint64_t compare;           /* AtomicETH */
    uint64_t orig;              /* AtomicAckETH */
    uint32_t len;               /* payload bytes, <= path MTU */
    uint8_t payload[4096];
} QhcaPkt;

typedef struct QhcaWireOps {
    const char *name;
    /* Transmit one packet; pkt is only borrowed for the call. */
    void (*send)(QhcaWire *w, const QhcaPkt *pkt);
    /*
     * Deliver up to *budget packets that arrived (the engine's bottom half
     * calls it first in every run); true if more are waiting.
     */
    bool (*poll)(QhcaWire *w, unsigned *budget);
    bool (*pending)(QhcaWire *w);
    /* Drop whatever is in flight (device reset). */
    void (*reset)(QhcaWire *w);
    void (*free)(QhcaWire *w);
} QhcaWireOps;

struct QhcaWire {
    const QhcaWireOps *ops;
    QhcaState *s;               /* the device whose engine sends on it */
    uint64_t tx_packets;
    uint64_t tx_bytes;
};

/* qhca-wire.c */
QhcaWire *qhca_wire_loopback_new(QhcaState *s);

/*
 * qhca-net.c: the port's netdev, when it has one.  send() puts a packet
 * for another port on it as a RoCEv2 frame; poll() delivers received frames
 * (a budget of them) and says whether more wait.
 */
void qhca_roce_send(QhcaRoce *r, const QhcaPkt *pkt);
bool qhca_roce_poll(QhcaRoce *r, unsigned *budget);
bool qhca_roce_pending(QhcaRoce *r);
void qhca_roce_reset(QhcaRoce *r);
/* qhca-roce.c: RoCEv2 frames */
size_t qhca_roce_encode(QhcaState *s, const QhcaPkt *pkt, uint8_t *frame);
bool qhca_roce_decode(QhcaState *s, const uint8_t *buf, size_t size,
                      QhcaPkt *pkt);
bool qhca_roce_dropped(const char *why);
/* Count a frame dropped in struct qhca_port_counters' field; false. */
#define QHCA_RX_DROP(s, field, why) \
    ((s)->port.field++, qhca_roce_dropped(why))
/*
 * The IPv4 header (QHCA_IPV4_SIZE bytes at hdr) of a packet between IPv4
 * GIDs whose IP payload is ip_payload bytes (UDP header onwards).
 */
void qhca_ipv4_header(uint8_t *hdr, const QhcaPkt *pkt, uint32_t ip_payload);

static inline void qhca_wire_send(QhcaWire *w, const QhcaPkt *pkt)
{
    w->tx_packets++;
    w->tx_bytes += pkt->len;
    w->ops->send(w, pkt);
}

/* qhca-rc.c: a packet arrived for device s. */
void qhca_rc_recv(QhcaState *s, const QhcaPkt *pkt);
/* qhca-rc.c: the same, from the netdev, outside any run of the engine. */
void qhca_engine_recv(QhcaState *s, const QhcaPkt *pkt);
/* qhca-ud.c: a datagram arrived for device s. */
void qhca_ud_recv(QhcaState *s, const QhcaPkt *pkt);

#endif /* HW_MISC_QHCA_WIRE_H */
