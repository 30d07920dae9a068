// SPDX-License-Identifier: GPL-2.0-only OR MIT
/*
 * qhca-verbs-check wire: what wire.c (the connection and the QP) and
 * wire_phase.c (the script of one phase, the requester's and the
 * responder's side of it) share. See wire.c for the subcommand.
 */

#ifndef WIRE_H
#define WIRE_H

#include <stdint.h>

#include "verbs_check.h"

#define MEM_LEN   (4u << 20) /* each side's target region */
#define SRC_LEN   (2u << 20) /* the requester's sources and READ results */
#define SLICE     (128u << 10)
#define BURST_OFF (24u * SLICE) /* the back-to-back writes */
#define ATOM_OFF  (27u * SLICE) /* the atomics' words */
#define ORDER_OFF (28u * SLICE) /* written, then read back */
#define N_SIZES   8
#define N_BURST   48
#define BURST_LEN (4096u + 3)
#define N_RECV    32
#define RECV_SLOT (72u << 10)
#define QP_DEPTH  128
#define MAX_OPS   (N_SIZES * 5 + N_BURST + 8)
#define STEP_MS   120000 /* for any one step of a phase */
#define FILL_BYTE 0x5a   /* READ destinations before the READ */
#define SLOT_BYTE 0xcc   /* receive slots before the receive */

enum op_kind { OP_SEND, OP_SEND_IMM, OP_WRITE, OP_WRITE_IMM, OP_READ, OP_CAS,
               OP_FADD };

struct op {
    enum op_kind kind;
    uint32_t len;
    uint64_t off;     /* in the responder's region */
    uint64_t src;     /* in the requester's src region */
    uint32_t imm;     /* host order */
    uint64_t cmp_add; /* CAS: compare; FADD: add */
    uint64_t swap;
    uint64_t expect;  /* an atomic's returned value */
    uint64_t seed;    /* of the bytes sent */
};

struct peer_info {
    uint32_t qpn, psn, mtu, rd_atom;
    union ibv_gid gid;
    uint64_t addr;
    uint32_t rkey;
};

struct wire {
    struct env e;
    int gidx, sock;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    struct region mem, src, rcv;
    struct peer_info me, peer;
    enum ibv_mtu mtu;
    uint32_t mtu_bytes;
    uint8_t *image; /* what the region that is written must hold */
    uint64_t recv_posted, recv_done; /* receive ids; slot = id % N_RECV */
    struct op ops[MAX_OPS];
    int n_ops;
};

/* wire_phase.c */
uint64_t wire_mix(uint64_t x);
void wire_build_script(struct wire *w, int round, int phase);
int wire_requester(struct wire *w, int round, int phase);
int wire_responder(struct wire *w, int round, int phase);

/* wire.c: the control connection to the peer */
__attribute__((format(printf, 2, 3))) int wire_send_line(struct wire *w,
                                                         const char *fmt, ...);
int wire_expect_line(struct wire *w, const char *want, int ms);

#endif /* WIRE_H */
