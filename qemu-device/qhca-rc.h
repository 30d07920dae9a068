/*
 * qhca: an emulated RDMA host channel adapter -- RC engine internals
 *
 * What the parts of the RC engine share: qhca-rc.c (memory through page
 * lists and keys, completion queues, QP state, the wire, the scheduler and
 * its bottom half), qhca-rc-req.c (the requester) and qhca-rc-resp.c (the
 * responder).  The overview is at the top of qhca-rc.c.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MISC_QHCA_RC_H
#define HW_MISC_QHCA_RC_H

#include "qhca-wire.h"

#define QHCA_MAX_MSG_SIZE       (1ull << 31)
/* PSNs a requester keeps in flight over several messages (IBA: < 2^23). */
#define QHCA_PSN_WINDOW         (1u << 22)

/* QhcaQp.resp_op: the multi-packet message the responder is in. */
#define QHCA_RESP_NONE          0
#define QHCA_RESP_SEND          1
#define QHCA_RESP_WRITE         2

static inline uint32_t psn_add(uint32_t psn, uint32_t n)
{
    return (psn + n) & QHCA_PSN_MASK;
}

/* a - b in the 24-bit PSN space, as a signed distance. */
static inline int32_t psn_diff(uint32_t a, uint32_t b)
{
    return (int32_t)((a - b) << 8) >> 8;
}

static inline bool qhca_wr_rd_atomic(uint8_t wr_opcode)
{
    return wr_opcode == QHCA_WR_RDMA_READ ||
           wr_opcode == QHCA_WR_ATOMIC_CMP_AND_SWP ||
           wr_opcode == QHCA_WR_ATOMIC_FETCH_AND_ADD;
}

static inline uint32_t qhca_mtu(const QhcaQp *qp)
{
    return 1u << qp->path_mtu;
}

/*
 * A packet to build: the header fields zeroed, the payload not (nobody
 * reads past len), so that an ACK does not cost 4 KiB of memset.  One the
 * engine freed before if there is one (the engine runs under the BQL, and
 * a packet being built may nest another: an ACK sent while the first is
 * delivered).
 */
static inline QhcaPkt *qhca_pkt_new(QhcaState *s)
{
    QhcaPkt *pkt = s->pkt_cached ? s->pkt_cache[--s->pkt_cached]
                                 : g_new(QhcaPkt, 1);

    memset(pkt, 0, offsetof(QhcaPkt, payload));
    return pkt;
}

/* Gives back a packet of qhca_pkt_new() (kept for the next, or freed). */
static inline void qhca_pkt_free(QhcaState *s, QhcaPkt *pkt)
{
    if (s->pkt_cached < QHCA_PKT_CACHE) {
        s->pkt_cache[s->pkt_cached++] = pkt;
    } else {
        g_free(pkt);
    }
}

/* What a memory access through a key came to. */
typedef enum QhcaMem {
    QHCA_MEM_OK,
    QHCA_MEM_ERROR,             /* a DMA was refused */
    QHCA_MEM_FAULT,             /* on demand: a page is missing (s->fault) */
} QhcaMem;

/*
 * Not an ABI status (never in a CQE): qhca_sge_copy() stopped at a page
 * fault, described in s->fault.
 */
#define QHCA_WC_ODP_FAULT       0xfe

/* qhca-mr.c: memory by key */
bool qhca_pl_rw(QhcaState *s, const uint64_t *pages, uint32_t npages,
                uint64_t off, void *buf, uint64_t len, bool write);
QhcaMr *qhca_mr_check(QhcaState *s, uint32_t key, uint32_t pdn,
                      uint64_t va, uint64_t len, uint32_t access);
QhcaMem qhca_mr_rw(QhcaState *s, QhcaMr *mr, uint64_t va, void *buf,
                   uint64_t len, bool write);
bool qhca_mr_ready(QhcaState *s, QhcaMr *mr, uint64_t va, uint64_t len,
                   bool write);
uint8_t qhca_sge_copy(QhcaState *s, uint32_t pdn, const struct qhca_sge *sge,
                      unsigned n, uint64_t off, void *buf, uint64_t len,
                      bool to_mem);
uint8_t qhca_sge_check(QhcaState *s, uint32_t pdn, const struct qhca_sge *sge,
                       unsigned n, bool to_mem, uint64_t *total);
uint8_t qhca_sge_ready(QhcaState *s, uint32_t pdn, const struct qhca_sge *sge,
                       unsigned n, uint64_t len);
uint8_t qhca_mr_fast_reg(QhcaState *s, QhcaQp *qp,
                         const struct qhca_wqe_reg_mr *r, const char **why);
uint8_t qhca_local_inv(QhcaState *s, QhcaQp *qp, uint32_t key,
                       const char **why);
bool qhca_remote_inv(QhcaState *s, QhcaQp *qp, uint32_t key);

/* qhca-srq.c: receive WQEs, from a QP's receive queue or its SRQ */
bool qhca_recv_posted(const QhcaQp *qp);
bool qhca_recv_take(QhcaState *s, QhcaQp *qp, const char **why);
void qhca_recv_done(QhcaQp *qp);
void qhca_recv_flush(QhcaState *s, QhcaQp *qp, unsigned *budget);

/* qhca-rc.c */
bool qhca_wq_read(QhcaState *s, QhcaQp *qp, const QhcaWq *wq, uint16_t idx,
                  uint64_t off, void *buf, uint64_t len);
uint8_t qhca_send_wqe_data(QhcaState *s, QhcaQp *qp, uint16_t idx,
                           uint32_t data_off, QhcaSendWqe *w, void *inline_dst,
                           const char **why);
void qhca_complete(QhcaState *s, QhcaQp *qp, uint32_t cqn, uint16_t wqe_index,
                   uint64_t wr_id, uint8_t opcode, uint8_t status,
                   uint32_t byte_len, uint8_t flags, uint32_t imm);
void qhca_complete_src(QhcaState *s, QhcaQp *qp, uint32_t cqn,
                       uint16_t wqe_index, uint64_t wr_id, uint8_t opcode,
                       uint8_t status, uint32_t byte_len, uint8_t flags,
                       uint32_t imm, uint32_t src_qp);
void qhca_wqe_fail(QhcaState *s, QhcaQp *qp, bool send, const char *kind,
                   uint64_t wr_id, uint8_t opcode, uint8_t status,
                   const char *why);
void qhca_timer_arm(QhcaQp *qp, int64_t ns);
void qhca_req_clear(QhcaQp *qp);
void qhca_resp_clear(QhcaQp *qp);
void qhca_resp_res_clear(QhcaQp *qp);
uint8_t qhca_wc_opcode(uint8_t wr_opcode);
void qhca_rc_send(QhcaState *s, QhcaQp *qp, QhcaPkt *pkt);

/* qhca-rc-req.c */
bool qhca_req_run(QhcaState *s, QhcaQp *qp, unsigned *budget);
void qhca_req_fault_resume(QhcaState *s, QhcaQp *qp, bool ok);
void qhca_req_timeout(QhcaState *s, QhcaQp *qp);
void qhca_req_recv(QhcaState *s, QhcaQp *qp, const QhcaPkt *pkt);

/* qhca-rc-req.c, for qhca-rc-ack.c */
void qhca_req_complete(QhcaState *s, QhcaQp *qp, uint8_t status);
void qhca_req_rewind(QhcaState *s, QhcaQp *qp, uint32_t psn);
QhcaReqSlot *qhca_req_slot(QhcaQp *qp, uint16_t idx);
uint32_t qhca_req_cursor_psn(QhcaQp *qp);
bool qhca_req_outstanding(const QhcaQp *qp);
bool qhca_req_psn_sent(QhcaQp *qp, uint32_t psn);
bool qhca_req_psn_acked(QhcaQp *qp, uint32_t psn);
void qhca_req_ack_upto(QhcaState *s, QhcaQp *qp, uint32_t psn);
void qhca_req_fault(QhcaState *s, QhcaQp *qp, uint16_t idx, bool answer);
void qhca_req_advance(QhcaState *s, QhcaQp *qp);
void qhca_req_progress(QhcaQp *qp);
bool qhca_req_find(QhcaQp *qp, uint32_t psn, uint16_t *idx, uint32_t *k);

/* qhca-rc-resp.c */
void qhca_resp_read_step(QhcaState *s, QhcaQp *qp, unsigned *budget);
void qhca_resp_recv(QhcaState *s, QhcaQp *qp, const QhcaPkt *pkt);
void qhca_resp_fault_resume(QhcaState *s, QhcaQp *qp, bool ok);
void qhca_resp_resume_ack(QhcaState *s, QhcaQp *qp);

/* qhca-ud.c */
bool qhca_ud_run(QhcaState *s, QhcaQp *qp, unsigned *budget);

/* qhca-eth.c */
bool qhca_eth_run(QhcaState *s, QhcaQp *qp, unsigned *budget);

/* qhca-mw.c */
uint8_t qhca_mw_bind(QhcaState *s, QhcaQp *qp, const struct qhca_wqe_bind *b,
                     const char **why);
uint8_t qhca_mw_local_inv(QhcaState *s, QhcaQp *qp, uint32_t key,
                          const char **why);
bool qhca_mw_remote_inv(QhcaState *s, QhcaQp *qp, uint32_t key);
QhcaMr *qhca_rkey_check(QhcaState *s, QhcaQp *qp, uint32_t key, uint64_t va,
                        uint64_t len, uint32_t access);

/* qhca-odp.c */
QhcaMem qhca_odp_rw(QhcaState *s, QhcaMr *mr, uint64_t va, void *buf,
                    uint64_t len, bool write);
bool qhca_odp_ready(QhcaState *s, QhcaMr *mr, uint64_t va, uint64_t len,
                    bool write);
bool qhca_odp_raise(QhcaState *s, QhcaQp *qp, bool responder,
                    uint32_t *token);
void qhca_odp_clear(QhcaQp *qp);

#endif /* HW_MISC_QHCA_RC_H */
