/*
 * qhca: an emulated RDMA host channel adapter -- the wire
 *
 * The RC engine (qhca-rc.c) and the wire it talks over are apart: the
 * engine builds and consumes packets (the header fields of an InfiniBand RC
 * packet, decoded, plus up to one path MTU of payload) and hands them to a
 * QhcaWire; the wire delivers packets to qhca_rc_recv() of the device at the
 * other end.  The loopback wire (qhca-wire.c) delivers to the device itself;
 * a RoCEv2 wire over a QEMU netdev would encode the same fields as
 * BTH/RETH/AETH/AtomicETH/ImmDt/IETH in UDP port 4791 and plug in here without
 * touching the engine.
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

/*
 * A packet, decoded.  Fields the opcode does not carry are zero.  Every
 * packet says where it comes from: the sending port (its node GUID; on
 * RoCEv2 the source GID of the IP header) and the sending QP (on the wire
 * the source QPN is not in the BTH: RC knows it from the connection, and a
 * receiver derives it from the source address and UDP port; here the wire
 * carries it).  A QP accepts packets only from the peer it is connected to.
 * A datagram (UD) also says which port it is for (dest_guid: the GRH's
 * DGID) and carries the GRH fields its address handle gave it and the
 * DETH's Q_Key; its source QPN is the DETH's.
 */
typedef struct QhcaPkt {
    uint64_t src_guid;          /* the sending port */
    uint32_t src_qpn;           /* the sending QP */
    uint64_t dest_guid;         /* UD: the port it is for */
    uint32_t qkey;              /* UD: DETH */
    uint32_t flow_label;        /* UD: GRH */
    uint8_t traffic_class;      /* UD: GRH */
    uint8_t hop_limit;          /* UD: GRH */
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

static inline void qhca_wire_send(QhcaWire *w, const QhcaPkt *pkt)
{
    w->tx_packets++;
    w->tx_bytes += pkt->len;
    w->ops->send(w, pkt);
}

/* qhca-rc.c: a packet arrived for device s. */
void qhca_rc_recv(QhcaState *s, const QhcaPkt *pkt);
/* qhca-ud.c: a datagram arrived for device s. */
void qhca_ud_recv(QhcaState *s, const QhcaPkt *pkt);

#endif /* HW_MISC_QHCA_WIRE_H */
