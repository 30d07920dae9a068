/*
 * qhca: an emulated RDMA host channel adapter -- the RC requester's answers
 *
 * What comes back to a requester: ACKs (coalesced or implied), NAKs (PSN
 * sequence errors and go-back-N, RNR back-off, the fatal kinds), READ
 * responses and atomic ACKs, and the timer for ACK timeouts and the end of an
 * RNR pause.  The send side is qhca-rc-req.c; qhca-rc.c has the engine as a
 * whole.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/bswap.h"
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

/* The timer ran out: the end of an RNR pause, or an ACK timeout. */
void qhca_req_timeout(QhcaState *s, QhcaQp *qp)
{
    QhcaReqSlot *sl;
    int32_t d;

    if (!qhca_req_outstanding(qp)) {
        return;
    }
    if (qp->req_wait) {
        /* End of an RNR backoff. */
        qp->req_wait = false;
        return;
    }
    if (qp->req_fault &&
        psn_diff(qhca_req_cursor_psn(qp), psn_add(qp->req_acked_psn, 1)) <= 0) {
        /* Waiting for a page, with nothing unanswered: not a retry. */
        return;
    }
    trace_qhca_req_retry(qhca_qpn(s, qp), "ack timeout", qp->req_retry_left);
    if (!qp->req_retry_left) {
        qhca_req_complete(s, qp, QHCA_WC_RETRY_EXC_ERR);
        return;
    }
    qp->req_retry_left--;
    /*
     * Slow restart: a responder that fell behind (a software one, or one
     * whose CPU the host took) is not sent the whole window again at once,
     * which it would have to work through as duplicates before anything
     * new, past the next timeout and the next.  Until an ACK comes, only
     * the oldest message goes out; from there the window grows back, fast
     * up to half of what was in flight and slowly beyond.
     */
    qp->req_ssthresh = MAX((uint16_t)(qp->req_head - qp->sq.ci) / 2, 2);
    qp->req_cwnd = 1;
    qp->req_cwnd_acked = 0;
    /*
     * Go back to the oldest message not complete, from its first packet not
     * acknowledged (a READ: its first response not in); whatever follows is
     * sent again, and the responder drops the duplicates.  Not to
     * req_acked_psn + 1: ACKs for later messages may have passed a READ or
     * atomic whose answer was lost.
     */
    sl = qhca_req_slot(qp, qp->sq.ci);
    d = psn_diff(psn_add(qp->req_acked_psn, 1), sl->first_psn);
    qp->req_send = qp->sq.ci;
    qp->req_next = 0;
    if (!qhca_wr_rd_atomic(sl->wqe.opcode) && d > 0 &&
        d < (int32_t)sl->npkts) {
        qp->req_next = d;
    }
    trace_qhca_req_rewind(qhca_qpn(s, qp), qhca_req_cursor_psn(qp),
                          qp->req_send, qp->req_next);
}

/*
 * The oldest WQE in flight fails with BAD_RESP_ERR for a response that no
 * responder following IBA sends (the rest of the window is flushed).
 */
static void qhca_req_bad_resp(QhcaState *s, QhcaQp *qp, const QhcaPkt *pkt,
                              const char *why)
{
    trace_qhca_req_bad_resp(qhca_qpn(s, qp), pkt->opcode, pkt->psn,
                            pkt->syndrome, pkt->len, why);
    qemu_log_mask(LOG_GUEST_ERROR, "qhca: QP 0x%x: response opcode 0x%x PSN"
                  " 0x%x syndrome 0x%x, %u bytes: %s\n", qhca_qpn(s, qp),
                  pkt->opcode, pkt->psn, pkt->syndrome, pkt->len, why);
    qhca_req_complete(s, qp, QHCA_WC_BAD_RESP_ERR);
}

/* A NAK for psn: everything before psn was received. */
static void qhca_req_nak(QhcaState *s, QhcaQp *qp, const QhcaPkt *pkt)
{
    uint8_t kind = pkt->syndrome & QHCA_AETH_KIND_MASK;
    uint8_t code = pkt->syndrome & ~QHCA_AETH_KIND_MASK;

    if (qhca_req_psn_acked(qp, pkt->psn)) {
        /*
         * The responder has had this packet since: a NAK that the network
         * held back or repeated.  Resending would cost a retry for nothing.
         */
        trace_qhca_pkt_drop(qhca_qpn(s, qp), pkt->opcode, pkt->psn,
                            "NAK for a PSN acknowledged since");
        return;
    }
    qhca_req_ack_upto(s, qp, psn_add(pkt->psn, QHCA_PSN_MASK));
    if (qp->state != QHCA_QPS_RTS || !qhca_req_outstanding(qp)) {
        return;
    }
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
        /* A resend for a PSN NAK got this far: a later PSN NAK is new. */
        qp->req_nak_retry = false;
        trace_qhca_req_rnr_wait(qhca_qpn(s, qp), qp->req_rnr_naks, ns);
        qhca_req_rewind(s, qp, pkt->psn);
        qp->req_wait = true;
        qhca_timer_arm(qp, ns);
        return;
    }
    switch (code) {
    case QHCA_NAK_PSN_SEQ:
        if (qp->req_wait &&
            psn_diff(pkt->psn, qhca_req_cursor_psn(qp)) >= 0) {
            /*
             * The responder asks for a packet at or after the one the RNR
             * back-off resends from: an answer to the rest of a burst sent
             * before the RNR NAK.  Nothing new; the back-off goes on.
             */
            trace_qhca_pkt_drop(qhca_qpn(s, qp), pkt->opcode, pkt->psn,
                                "PSN NAK during RNR back-off, redundant");
            return;
        }
        if (qp->req_nak_retry) {
            /*
             * The resend an earlier NAK asked for is under way and nothing
             * has been acknowledged since (that would have ended it): this
             * is that NAK again, repeated by the network (a responder NAKs
             * a sequence error once).  As rxe, one retry per sequence
             * error; a resend that is lost again is the ACK timer's.
             */
            trace_qhca_pkt_drop(qhca_qpn(s, qp), pkt->opcode, pkt->psn,
                                "PSN NAK while its resend is under way");
            return;
        }
        trace_qhca_req_retry(qhca_qpn(s, qp), "PSN sequence NAK",
                             qp->req_retry_left);
        if (!qp->req_retry_left) {
            qhca_req_complete(s, qp, QHCA_WC_RETRY_EXC_ERR);
            return;
        }
        qp->req_retry_left--;
        qhca_req_rewind(s, qp, pkt->psn);
        qp->req_nak_retry = true;
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
        qhca_req_bad_resp(s, qp, pkt, "NAK with an unknown code");
        return;
    }
}

/*
 * A READ response or atomic ACK for the message at idx: it implies an ACK
 * of every PSN before the request, and is taken only when every message
 * before it is complete (answers come in PSN order; a gap means one was
 * lost, and the ACK timer asks again).
 */
static QhcaReqSlot *qhca_req_answer(QhcaState *s, QhcaQp *qp,
                                    const QhcaPkt *pkt, uint16_t idx)
{
    QhcaReqSlot *sl = qhca_req_slot(qp, idx);

    qhca_req_ack_upto(s, qp, psn_add(sl->first_psn, QHCA_PSN_MASK));
    if (qp->state != QHCA_QPS_RTS || qp->sq.ci != idx) {
        trace_qhca_pkt_drop(qhca_qpn(s, qp), pkt->opcode, pkt->psn,
                            "answer behind an earlier one still missing");
        return NULL;
    }
    return sl;
}

/*
 * Places len bytes of the answer to the request at idx into its local
 * SGEs at off.  True if they landed.  Else the answer is handled: on a
 * missing on-demand page it is dropped, the requester rewinds to its PSN
 * and raises the fault (the request goes out again after RESUME); on any
 * other error the request completes with it.
 */
static bool qhca_req_place(QhcaState *s, QhcaQp *qp, QhcaReqSlot *sl,
                           const QhcaPkt *pkt, uint16_t idx, uint64_t off,
                           void *data, uint64_t len)
{
    uint8_t st = qhca_sge_copy(s, qp->pdn, sl->wqe.sge, sl->wqe.num_sge, off,
                               data, len, true);

    if (st == QHCA_WC_ODP_FAULT) {
        qhca_req_rewind(s, qp, pkt->psn);
        qhca_req_fault(s, qp, idx, true);
        return false;
    }
    if (st != QHCA_WC_SUCCESS) {
        qhca_req_complete(s, qp, st);
        return false;
    }
    return true;
}

/* An atomic ACK for the atomic at idx. */
static void qhca_req_atomic_ack(QhcaState *s, QhcaQp *qp, const QhcaPkt *pkt,
                                uint16_t idx)
{
    uint64_t orig = cpu_to_le64(pkt->orig);
    QhcaReqSlot *sl = qhca_req_answer(s, qp, pkt, idx);

    if (!sl || sl->done) {
        return;
    }
    if ((pkt->syndrome & QHCA_AETH_KIND_MASK) != QHCA_AETH_ACK) {
        qhca_req_bad_resp(s, qp, pkt, "atomic ACK whose AETH is a NAK");
        return;
    }
    /*
     * On a missing page the atomic goes out again after RESUME and the
     * responder answers it from its saved result.
     */
    if (!qhca_req_place(s, qp, sl, pkt, idx, 0, &orig, 8)) {
        return;
    }
    sl->done = true;
    qhca_req_advance(s, qp);
}

/*
 * What is wrong with READ response packet k of the READ in sl, the one
 * expected next, or NULL.  The opcode follows from k alone (IBA 9.4.3;
 * a duplicate READ request from the middle is answered from there with
 * MIDDLE/LAST, as rxe does), FIRST, LAST and ONLY carry an ACK's AETH, and
 * the length is the path MTU but for the last packet, which has the rest.
 */
static const char *qhca_req_read_resp_bad(const QhcaPkt *pkt,
                                          const QhcaReqSlot *sl, uint32_t k,
                                          uint32_t mtu)
{
    uint64_t left = sl->wqe.length - (uint64_t)k * mtu;
    uint8_t want;

    if (sl->npkts == 1) {
        want = QHCA_OP_READ_RESP_ONLY;
    } else if (k == 0) {
        want = QHCA_OP_READ_RESP_FIRST;
    } else if (k == sl->npkts - 1) {
        want = QHCA_OP_READ_RESP_LAST;
    } else {
        want = QHCA_OP_READ_RESP_MIDDLE;
    }
    if (pkt->opcode != want) {
        return "READ response opcode out of FIRST/MIDDLE/LAST order";
    }
    if (want != QHCA_OP_READ_RESP_MIDDLE &&
        (pkt->syndrome & QHCA_AETH_KIND_MASK) != QHCA_AETH_ACK) {
        return "READ response whose AETH is a NAK";
    }
    if (pkt->len > mtu) {
        return "READ response longer than the path MTU";
    }
    if (pkt->len != MIN(left, mtu)) {
        return "READ response length does not fit the READ";
    }
    return NULL;
}

/* READ response packet k of the READ at idx. */
static void qhca_req_read_resp(QhcaState *s, QhcaQp *qp, const QhcaPkt *pkt,
                               uint16_t idx, uint32_t k)
{
    uint32_t mtu = qhca_mtu(qp);
    QhcaReqSlot *sl = qhca_req_answer(s, qp, pkt, idx);
    const char *why;

    if (!sl) {
        return;
    }
    if (k != sl->resp_next) {
        /*
         * A duplicate, or ahead of one lost: the ACK timer asks again from
         * resp_next.  Not looked at further: it may be a copy of one that
         * came right.
         */
        trace_qhca_pkt_drop(qhca_qpn(s, qp), pkt->opcode, pkt->psn,
                            "read response out of order");
        return;
    }
    why = qhca_req_read_resp_bad(pkt, sl, k, mtu);
    if (why) {
        qhca_req_bad_resp(s, qp, pkt, why);
        return;
    }
    /* On a missing page it is asked for again from this packet. */
    if (!qhca_req_place(s, qp, sl, pkt, idx, (uint64_t)k * mtu,
                        (void *)pkt->payload, pkt->len)) {
        return;
    }
    sl->resp_next++;
    if (sl->resp_next == sl->npkts) {
        sl->done = true;
        qhca_req_advance(s, qp);
    } else {
        /* Progress: the ACK timer starts again. */
        qhca_req_progress(qp);
    }
}

/* A response (ACK, NAK, read response, atomic ACK) for requester qp. */
void qhca_req_recv(QhcaState *s, QhcaQp *qp, const QhcaPkt *pkt)
{
    uint16_t idx;
    uint32_t k;
    uint8_t op;

    if (qp->state != QHCA_QPS_RTS || !qhca_req_outstanding(qp)) {
        trace_qhca_pkt_drop(qhca_qpn(s, qp), pkt->opcode, pkt->psn,
                            "no request in flight");
        return;
    }
    QHCA_TRACE_STEP(QHCA_REQ_RECV, qhca_req_recv, qhca_qpn(s, qp),
                    pkt->opcode, pkt->psn, pkt->syndrome);
    if (qp->req_wait && pkt->opcode == QHCA_OP_ACK &&
        (pkt->syndrome & QHCA_AETH_KIND_MASK) == QHCA_AETH_ACK &&
        psn_add(pkt->psn, 1) == qhca_req_cursor_psn(qp)) {
        /*
         * An ACK of everything before the packet the back-off waits to
         * send: the responder is ready again (it served a page fault).
         */
        trace_qhca_req_retry(qhca_qpn(s, qp), "responder ready, back-off ends",
                             qp->req_rnr_left);
        qp->req_wait = false;
        timer_del(qp->timer);
        qhca_engine_schedule(s, qp);
    }
    if (!qhca_req_psn_sent(qp, pkt->psn)) {
        if (psn_diff(pkt->psn, qhca_req_slot(qp, qp->sq.ci)->first_psn) < 0 ||
            psn_diff(pkt->psn, qp->sq_psn) >= 0) {
            trace_qhca_pkt_drop(qhca_qpn(s, qp), pkt->opcode, pkt->psn,
                                "PSN outside the messages in flight");
            return;
        }
        /*
         * Assigned to a message but not sent: no responder can have seen
         * it.  Taken, it would complete the message or move the requester
         * past packets that never went out.
         */
        trace_qhca_pkt_drop(qhca_qpn(s, qp), pkt->opcode, pkt->psn,
                            "answer for a PSN not sent yet");
        qemu_log_mask(LOG_GUEST_ERROR, "qhca: QP 0x%x: answer (opcode 0x%x)"
                      " for PSN 0x%x, which has not been sent, dropped\n",
                      qhca_qpn(s, qp), pkt->opcode, pkt->psn);
        return;
    }

    if (pkt->opcode == QHCA_OP_ACK) {
        if ((pkt->syndrome & QHCA_AETH_KIND_MASK) != QHCA_AETH_ACK) {
            qhca_req_nak(s, qp, pkt);
            return;
        }
        /* Coalesced: every PSN up to this one. */
        qhca_req_ack_upto(s, qp, pkt->psn);
        return;
    }

    if (pkt->opcode != QHCA_OP_ATOMIC_ACK &&
        (pkt->opcode < QHCA_OP_READ_RESP_FIRST ||
         pkt->opcode > QHCA_OP_READ_RESP_ONLY)) {
        trace_qhca_pkt_drop(qhca_qpn(s, qp), pkt->opcode, pkt->psn,
                            "not a response opcode");
        return;
    }
    if (!qhca_req_find(qp, pkt->psn, &idx, &k)) {
        trace_qhca_pkt_drop(qhca_qpn(s, qp), pkt->opcode, pkt->psn,
                            "PSN in no message in flight");
        return;
    }
    op = qhca_req_slot(qp, idx)->wqe.opcode;
    if (pkt->opcode == QHCA_OP_ATOMIC_ACK) {
        if (op != QHCA_WR_ATOMIC_CMP_AND_SWP &&
            op != QHCA_WR_ATOMIC_FETCH_AND_ADD) {
            qhca_req_bad_resp(s, qp, pkt, "atomic ACK for no atomic");
            return;
        }
        qhca_req_atomic_ack(s, qp, pkt, idx);
    } else {
        if (op != QHCA_WR_RDMA_READ) {
            qhca_req_bad_resp(s, qp, pkt, "READ response for no READ");
            return;
        }
        qhca_req_read_resp(s, qp, pkt, idx, k);
    }
}
