/*
 * qhca: an emulated RDMA host channel adapter -- the RC requester
 *
 * Send WQEs to packets, responses to completions: one message in flight per
 * QP, retransmission on NAKs and timeouts, RNR back-off.  See qhca-rc.c for
 * the engine as a whole.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/atomic.h"
#include "qemu/bswap.h"
#include "qemu/main-loop.h"
#include "qhca-rc.h"
#include "trace.h"

/* IBA Table 45, RNR NAK timer field -> nanoseconds. */
static int64_t qhca_rnr_ns(uint8_t timer)
{
    static const uint32_t us100[32] = {
        65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192,
        256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192,
        12288, 16384, 24576, 32768, 49152,
    };

    return (int64_t)us100[timer & 31] * 10000;
}


/* ------------------------------------------------------------------------ */
/* requester                                                                */

/* The current WQE is done: its CQE (if signaled or failed), then the next. */
static void qhca_req_complete(QhcaState *s, QhcaQp *qp, uint8_t status)
{
    QhcaSendWqe *w = &qp->wqe;
    uint32_t len = 0;

    trace_qhca_req_complete(qhca_qpn(s, qp), qp->sq.ci, w->opcode, status);
    if (w->opcode == QHCA_WR_RDMA_READ ||
        w->opcode == QHCA_WR_ATOMIC_CMP_AND_SWP ||
        w->opcode == QHCA_WR_ATOMIC_FETCH_AND_ADD) {
        len = w->length;
    }
    qhca_req_clear(qp);
    qp->sq.ci++;
    if (status != QHCA_WC_SUCCESS || (w->flags & QHCA_WQE_SIGNALED)) {
        qhca_complete(s, qp, qp->scqn, qp->sq.ci - 1, w->wr_id,
                      qhca_wc_opcode(w->opcode), status, len, false, 0);
    }
    if (status != QHCA_WC_SUCCESS) {
        qhca_qp_set_error(s, qp, true);
    }
    qhca_engine_schedule(s, qp);
}

/* A WQE the requester refuses before sending anything. */
static void qhca_req_bad_wqe(QhcaState *s, QhcaQp *qp, uint8_t status,
                             const char *why)
{
    trace_qhca_err_wqe(qhca_qpn(s, qp), qp->sq.ci, why);
    qemu_log_mask(LOG_GUEST_ERROR, "qhca: QP %u send WQE %u: %s\n",
                  qhca_qpn(s, qp), qp->sq.ci, why);
    qhca_req_complete(s, qp, status);
}

/* Reads and validates the WQE at sq.ci; on success it is in flight. */
bool qhca_req_start(QhcaState *s, QhcaQp *qp)
{
    QhcaSendWqe *w = &qp->wqe;
    struct {
        struct qhca_wqe_ctrl ctrl;
        struct qhca_wqe_raddr raddr;
        struct qhca_wqe_atomic atomic;
    } hdr;
    struct qhca_sge sge[QHCA_LIMIT_MAX_SGE];
    uint64_t total;
    unsigned i;
    uint8_t st;

    QEMU_BUILD_BUG_ON(sizeof(hdr) != QHCA_WQE_DATA_OFFSET);
    memset(w, 0, sizeof(*w));
    if (!qhca_wq_read(s, qp, &qp->sq, qp->sq.ci, 0, &hdr, sizeof(hdr))) {
        qhca_req_bad_wqe(s, qp, QHCA_WC_LOC_QP_OP_ERR, "ring unreachable");
        return false;
    }
    w->wr_id = le64_to_cpu(hdr.ctrl.wr_id);
    w->opcode = hdr.ctrl.opcode;
    w->flags = hdr.ctrl.flags;
    w->num_sge = hdr.ctrl.num_sge;
    w->imm = le32_to_cpu(hdr.ctrl.imm_data);
    w->inline_len = le32_to_cpu(hdr.ctrl.inline_len);
    w->raddr = le64_to_cpu(hdr.raddr.remote_addr);
    w->rkey = le32_to_cpu(hdr.raddr.rkey);
    w->swap_add = le64_to_cpu(hdr.atomic.swap_add);
    w->compare = le64_to_cpu(hdr.atomic.compare);

    if (w->opcode > QHCA_WR_ATOMIC_FETCH_AND_ADD ||
        (w->flags & ~(QHCA_WQE_SIGNALED | QHCA_WQE_SOLICITED |
                      QHCA_WQE_INLINE | QHCA_WQE_FENCE)) ||
        hdr.ctrl.rsvd0 || hdr.ctrl.rsvd1[0] || hdr.ctrl.rsvd1[1] ||
        hdr.ctrl.rsvd1[2] || hdr.raddr.rsvd) {
        qhca_req_bad_wqe(s, qp, QHCA_WC_LOC_QP_OP_ERR,
                         "bad opcode, flags or reserved field");
        return false;
    }

    if (w->flags & QHCA_WQE_INLINE) {
        if (w->opcode == QHCA_WR_RDMA_READ ||
            w->opcode == QHCA_WR_ATOMIC_CMP_AND_SWP ||
            w->opcode == QHCA_WR_ATOMIC_FETCH_AND_ADD || w->num_sge) {
            qhca_req_bad_wqe(s, qp, QHCA_WC_LOC_QP_OP_ERR,
                             "inline data on a READ or atomic, or with SGEs");
            return false;
        }
        if (w->inline_len > qp->max_inline) {
            qhca_req_bad_wqe(s, qp, QHCA_WC_LOC_LEN_ERR,
                             "inline data longer than max_inline");
            return false;
        }
        if (!qhca_wq_read(s, qp, &qp->sq, qp->sq.ci, QHCA_WQE_DATA_OFFSET,
                          w->inline_data, w->inline_len)) {
            qhca_req_bad_wqe(s, qp, QHCA_WC_LOC_QP_OP_ERR, "ring unreachable");
            return false;
        }
        w->length = w->inline_len;
    } else {
        bool to_mem = w->opcode == QHCA_WR_RDMA_READ ||
                      w->opcode == QHCA_WR_ATOMIC_CMP_AND_SWP ||
                      w->opcode == QHCA_WR_ATOMIC_FETCH_AND_ADD;

        if (w->inline_len || w->num_sge > qp->max_sge) {
            qhca_req_bad_wqe(s, qp, QHCA_WC_LOC_QP_OP_ERR,
                             "inline_len without INLINE, or too many SGEs");
            return false;
        }
        if (!qhca_wq_read(s, qp, &qp->sq, qp->sq.ci, QHCA_WQE_DATA_OFFSET,
                          sge, w->num_sge * sizeof(sge[0]))) {
            qhca_req_bad_wqe(s, qp, QHCA_WC_LOC_QP_OP_ERR, "ring unreachable");
            return false;
        }
        for (i = 0; i < w->num_sge; i++) {
            w->sge[i].addr = le64_to_cpu(sge[i].addr);
            w->sge[i].length = le32_to_cpu(sge[i].length);
            w->sge[i].lkey = le32_to_cpu(sge[i].lkey);
        }
        st = qhca_sge_check(s, qp->pdn, w->sge, w->num_sge, to_mem, &total);
        if (st != QHCA_WC_SUCCESS) {
            qhca_req_bad_wqe(s, qp, st, "local SGE refused");
            return false;
        }
        w->length = total;
    }
    if ((w->opcode == QHCA_WR_ATOMIC_CMP_AND_SWP ||
         w->opcode == QHCA_WR_ATOMIC_FETCH_AND_ADD) && w->length != 8) {
        qhca_req_bad_wqe(s, qp, QHCA_WC_LOC_LEN_ERR,
                         "atomic needs one 8-byte local buffer");
        return false;
    }

    qp->req_active = true;
    qp->req_sent = false;
    qp->req_wait = false;
    qp->req_first_psn = qp->sq_psn;
    if (w->opcode == QHCA_WR_ATOMIC_CMP_AND_SWP ||
        w->opcode == QHCA_WR_ATOMIC_FETCH_AND_ADD) {
        qp->req_npkts = 1;
    } else {
        qp->req_npkts = MAX(1, DIV_ROUND_UP(w->length, qhca_mtu(qp)));
    }
    qp->req_next = 0;
    qp->req_resp_next = 0;
    qp->req_retry_left = qp->retry_cnt;
    qp->req_rnr_left = qp->rnr_retry;
    qp->req_rnr_naks = 0;
    qp->sq_psn = psn_add(qp->sq_psn, qp->req_npkts);
    trace_qhca_req_start(qhca_qpn(s, qp), qp->sq.ci, w->opcode, w->length,
                         qp->req_first_psn, qp->req_npkts);
    return true;
}

static uint8_t qhca_req_opcode(const QhcaSendWqe *w, uint32_t i, uint32_t n)
{
    bool first = i == 0, last = i == n - 1;
    bool imm = w->opcode == QHCA_WR_SEND_WITH_IMM ||
               w->opcode == QHCA_WR_RDMA_WRITE_WITH_IMM;

    if (w->opcode == QHCA_WR_SEND || w->opcode == QHCA_WR_SEND_WITH_IMM) {
        if (first && last) {
            return imm ? QHCA_OP_SEND_ONLY_IMM : QHCA_OP_SEND_ONLY;
        }
        if (last) {
            return imm ? QHCA_OP_SEND_LAST_IMM : QHCA_OP_SEND_LAST;
        }
        return first ? QHCA_OP_SEND_FIRST : QHCA_OP_SEND_MIDDLE;
    }
    if (first && last) {
        return imm ? QHCA_OP_WRITE_ONLY_IMM : QHCA_OP_WRITE_ONLY;
    }
    if (last) {
        return imm ? QHCA_OP_WRITE_LAST_IMM : QHCA_OP_WRITE_LAST;
    }
    return first ? QHCA_OP_WRITE_FIRST : QHCA_OP_WRITE_MIDDLE;
}

/* Local ACK timeout: 4.096 us << timeout; 0 waits for ever. */
static void qhca_req_arm_ack_timer(QhcaQp *qp)
{
    if (qp->timeout) {
        qhca_timer_arm(qp, 4096ll << qp->timeout);
    }
}

/*
 * Sends the next packet of the message in flight.  The wire may deliver
 * the answer before this returns; callers re-check the QP afterwards.
 */
void qhca_req_send_one(QhcaState *s, QhcaQp *qp)
{
    QhcaSendWqe *w = &qp->wqe;
    uint32_t mtu = qhca_mtu(qp);
    QhcaPkt *pkt = g_new0(QhcaPkt, 1);
    uint32_t i = qp->req_next;
    uint8_t st;

    switch (w->opcode) {
    case QHCA_WR_RDMA_READ: {
        uint64_t off = (uint64_t)qp->req_resp_next * mtu;

        pkt->opcode = QHCA_OP_READ_REQUEST;
        pkt->psn = psn_add(qp->req_first_psn, qp->req_resp_next);
        pkt->va = w->raddr + off;
        pkt->rkey = w->rkey;
        pkt->dma_len = w->length - off;
        pkt->ack_req = true;
        qp->req_next = qp->req_npkts;
        break;
    }
    case QHCA_WR_ATOMIC_CMP_AND_SWP:
    case QHCA_WR_ATOMIC_FETCH_AND_ADD:
        pkt->opcode = w->opcode == QHCA_WR_ATOMIC_CMP_AND_SWP ?
                      QHCA_OP_CMP_SWAP : QHCA_OP_FETCH_ADD;
        pkt->psn = qp->req_first_psn;
        pkt->va = w->raddr;
        pkt->rkey = w->rkey;
        pkt->swap_add = w->swap_add;
        pkt->compare = w->compare;
        pkt->ack_req = true;
        qp->req_next = 1;
        break;
    default: {
        uint64_t off = (uint64_t)i * mtu;

        pkt->opcode = qhca_req_opcode(w, i, qp->req_npkts);
        pkt->psn = psn_add(qp->req_first_psn, i);
        pkt->len = MIN(w->length - off, mtu);
        if (i == 0 && (w->opcode == QHCA_WR_RDMA_WRITE ||
                       w->opcode == QHCA_WR_RDMA_WRITE_WITH_IMM)) {
            pkt->va = w->raddr;
            pkt->rkey = w->rkey;
            pkt->dma_len = w->length;
        }
        pkt->imm = w->imm;
        pkt->ack_req = i == qp->req_npkts - 1;
        if (w->flags & QHCA_WQE_INLINE) {
            memcpy(pkt->payload, w->inline_data + off, pkt->len);
        } else {
            st = qhca_sge_copy(s, qp->pdn, w->sge, w->num_sge, off,
                               pkt->payload, pkt->len, false);
            if (st != QHCA_WC_SUCCESS) {
                g_free(pkt);
                qhca_req_complete(s, qp, st);
                return;
            }
        }
        qp->req_next = i + 1;
        break;
    }
    }

    if (qp->req_next == qp->req_npkts) {
        qp->req_sent = true;
        qhca_req_arm_ack_timer(qp);
    }
    trace_qhca_req_send(qhca_qpn(s, qp), pkt->opcode, pkt->psn, pkt->len);
    qhca_rc_send(s, qp, pkt);
    g_free(pkt);
}

/* Retransmit from packet k of the message in flight. */
static void qhca_req_rewind(QhcaQp *qp, uint32_t k)
{
    if (qp->wqe.opcode == QHCA_WR_RDMA_READ) {
        qp->req_resp_next = MIN(k, qp->req_resp_next);
        qp->req_next = 0;
    } else {
        qp->req_next = MIN(k, qp->req_npkts - 1);
    }
    qp->req_sent = false;
    /* Whatever the QP was waiting for, it now resends at once. */
    qp->req_wait = false;
    timer_del(qp->timer);
}

/* The ACK timer ran out: resend, or give up. */
void qhca_req_timeout(QhcaState *s, QhcaQp *qp)
{
    if (!qp->req_active) {
        return;
    }
    if (qp->req_wait) {
        /* End of an RNR backoff. */
        qp->req_wait = false;
        return;
    }
    if (!qp->req_sent) {
        return;
    }
    trace_qhca_req_retry(qhca_qpn(s, qp), "ack timeout", qp->req_retry_left);
    if (!qp->req_retry_left) {
        qhca_req_complete(s, qp, QHCA_WC_RETRY_EXC_ERR);
        return;
    }
    qp->req_retry_left--;
    /* Resend what was not acknowledged; the responder drops duplicates. */
    qhca_req_rewind(qp, 0);
}

static void qhca_req_nak(QhcaState *s, QhcaQp *qp, const QhcaPkt *pkt,
                         uint32_t k)
{
    uint8_t kind = pkt->syndrome & QHCA_AETH_KIND_MASK;
    uint8_t code = pkt->syndrome & ~QHCA_AETH_KIND_MASK;

    if (kind == QHCA_AETH_RNR_NAK) {
        int64_t ns = qhca_rnr_ns(code);

        trace_qhca_req_retry(qhca_qpn(s, qp), "RNR NAK", qp->req_rnr_left);
        if (!qp->req_rnr_left) {
            qhca_req_complete(s, qp, QHCA_WC_RNR_RETRY_EXC_ERR);
            return;
        }
        if (qp->rnr_retry != 7) {
            qp->req_rnr_left--;
        } else {
            /*
             * For ever: back off exponentially, so that QPs facing empty
             * receive queues cannot keep the main loop busy.
             */
            ns = MAX(ns, QHCA_RNR_FLOOR_NS) << MIN(qp->req_rnr_naks, 20);
            ns = MIN(ns, QHCA_RNR_MAX_NS);
        }
        if (qp->req_rnr_naks != UINT8_MAX) {
            qp->req_rnr_naks++;
        }
        s->ctx[qp->uar].rnr_retries++;
        trace_qhca_req_rnr_wait(qhca_qpn(s, qp), qp->req_rnr_naks, ns);
        qhca_req_rewind(qp, k);
        qp->req_wait = true;
        qhca_timer_arm(qp, ns);
        return;
    }
    switch (code) {
    case QHCA_NAK_PSN_SEQ:
        if (qp->req_wait &&
            k >= (int32_t)(qp->wqe.opcode == QHCA_WR_RDMA_READ ?
                           qp->req_resp_next : qp->req_next)) {
            /*
             * The responder asks for a packet at or after the one the RNR
             * back-off resends from: an answer to the rest of a burst sent
             * before the RNR NAK.  Nothing new; the back-off goes on.
             */
            trace_qhca_pkt_drop(qhca_qpn(s, qp), pkt->opcode, pkt->psn,
                                "PSN NAK during RNR back-off, redundant");
            return;
        }
        trace_qhca_req_retry(qhca_qpn(s, qp), "PSN sequence NAK",
                             qp->req_retry_left);
        if (!qp->req_retry_left) {
            qhca_req_complete(s, qp, QHCA_WC_RETRY_EXC_ERR);
            return;
        }
        qp->req_retry_left--;
        qhca_req_rewind(qp, k);
        qhca_engine_schedule(s, qp);
        return;
    case QHCA_NAK_INV_REQ:
        qhca_req_complete(s, qp, QHCA_WC_REM_INV_REQ_ERR);
        return;
    case QHCA_NAK_REM_ACCESS:
        qhca_req_complete(s, qp, QHCA_WC_REM_ACCESS_ERR);
        return;
    case QHCA_NAK_REM_OP:
        qhca_req_complete(s, qp, QHCA_WC_REM_OP_ERR);
        return;
    default:
        qhca_req_complete(s, qp, QHCA_WC_BAD_RESP_ERR);
        return;
    }
}

/* A response (ACK, NAK, read response, atomic ACK) for requester qp. */
void qhca_req_recv(QhcaState *s, QhcaQp *qp, const QhcaPkt *pkt)
{
    QhcaSendWqe *w = &qp->wqe;
    int32_t k;
    uint8_t st;

    if (qp->state != QHCA_QPS_RTS || !qp->req_active) {
        trace_qhca_pkt_drop(qhca_qpn(s, qp), pkt->opcode, pkt->psn,
                            "no request in flight");
        return;
    }
    k = psn_diff(pkt->psn, qp->req_first_psn);
    if (k < 0 || k >= (int32_t)qp->req_npkts) {
        trace_qhca_pkt_drop(qhca_qpn(s, qp), pkt->opcode, pkt->psn,
                            "PSN outside the message in flight");
        return;
    }

    if (pkt->opcode == QHCA_OP_ACK) {
        if ((pkt->syndrome & QHCA_AETH_KIND_MASK) != QHCA_AETH_ACK) {
            qhca_req_nak(s, qp, pkt, k);
            return;
        }
        if (w->opcode <= QHCA_WR_SEND_WITH_IMM &&
            k == (int32_t)qp->req_npkts - 1) {
            qhca_req_complete(s, qp, QHCA_WC_SUCCESS);
        }
        return;
    }

    if (pkt->opcode == QHCA_OP_ATOMIC_ACK) {
        uint64_t orig = cpu_to_le64(pkt->orig);

        if (w->opcode != QHCA_WR_ATOMIC_CMP_AND_SWP &&
            w->opcode != QHCA_WR_ATOMIC_FETCH_AND_ADD) {
            qhca_req_complete(s, qp, QHCA_WC_BAD_RESP_ERR);
            return;
        }
        st = qhca_sge_copy(s, qp->pdn, w->sge, w->num_sge, 0, &orig, 8, true);
        qhca_req_complete(s, qp, st);
        return;
    }

    if (pkt->opcode >= QHCA_OP_READ_RESP_FIRST &&
        pkt->opcode <= QHCA_OP_READ_RESP_ONLY) {
        uint32_t mtu = qhca_mtu(qp);
        uint64_t off = (uint64_t)k * mtu;
        bool last = pkt->opcode == QHCA_OP_READ_RESP_LAST ||
                    pkt->opcode == QHCA_OP_READ_RESP_ONLY;

        if (w->opcode != QHCA_WR_RDMA_READ) {
            qhca_req_complete(s, qp, QHCA_WC_BAD_RESP_ERR);
            return;
        }
        if (k != (int32_t)qp->req_resp_next) {
            /* A gap: the ACK timer will ask again from req_resp_next. */
            trace_qhca_pkt_drop(qhca_qpn(s, qp), pkt->opcode, pkt->psn,
                                "read response out of order");
            return;
        }
        if (pkt->len > w->length - off || (!last && pkt->len != mtu) ||
            (last && off + pkt->len != w->length)) {
            qhca_req_complete(s, qp, QHCA_WC_BAD_RESP_ERR);
            return;
        }
        st = qhca_sge_copy(s, qp->pdn, w->sge, w->num_sge, off,
                           (void *)pkt->payload, pkt->len, true);
        if (st != QHCA_WC_SUCCESS) {
            qhca_req_complete(s, qp, st);
            return;
        }
        qp->req_resp_next++;
        /* Progress: the ACK timer starts again. */
        qhca_req_arm_ack_timer(qp);
        if (last) {
            qhca_req_complete(s, qp, QHCA_WC_SUCCESS);
        }
        return;
    }

    trace_qhca_pkt_drop(qhca_qpn(s, qp), pkt->opcode, pkt->psn,
                        "not a response opcode");
}
