/*
 * qhca: an emulated RDMA host channel adapter -- the RC requester
 *
 * Send WQEs to packets: a window of messages in flight per QP, the slots
 * that track them, go-back-N rewinding, completions.  What comes back
 * (ACKs, NAKs, responses, timeouts, RNR back-off) is in qhca-rc-ack.c; see
 * qhca-rc.c for the engine as a whole.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/atomic.h"
#include "qemu/bswap.h"
#include "qemu/main-loop.h"
#include "qhca-rc.h"
#include "trace.h"

/* ------------------------------------------------------------------------ */
/* requester                                                                */

QhcaReqSlot *qhca_req_slot(QhcaQp *qp, uint16_t idx)
{
    return &qp->req_slots[idx & (qp->req_window - 1)];
}

bool qhca_req_outstanding(const QhcaQp *qp)
{
    return qp->req_head != qp->sq.ci;
}

/* Local ACK timeout: 4.096 us << timeout; 0 waits for ever. */
static void qhca_req_arm_ack_timer(QhcaQp *qp)
{
    if (qp->timeout) {
        qhca_timer_arm(qp, 4096ll << qp->timeout);
    }
}

/*
 * Progress (an ACK or a response moved things on): retry_cnt starts again,
 * and so does the ACK timer while something is outstanding.  An RNR pause
 * keeps its timer.
 */
void qhca_req_progress(QhcaQp *qp)
{
    qp->req_retry_left = qp->retry_cnt;
    qp->req_nak_retry = false;
    if (qp->req_wait) {
        return;
    }
    if (qhca_req_outstanding(qp)) {
        qhca_req_arm_ack_timer(qp);
    } else if (timer_pending(qp->timer)) {
        /* timer_del takes the clock's timer-list lock even for no timer. */
        timer_del(qp->timer);
    }
}

/*
 * A message acknowledged: the slow restart's window opens by one, or by one
 * per window's worth once past the threshold (qhca-rc-ack.c).
 */
static void qhca_req_cwnd_grow(QhcaQp *qp)
{
    if (qp->req_cwnd >= qp->req_window) {
        return;
    }
    if (qp->req_cwnd < qp->req_ssthresh ||
        ++qp->req_cwnd_acked >= qp->req_cwnd) {
        qp->req_cwnd++;
        qp->req_cwnd_acked = 0;
    }
}

/*
 * The oldest message in flight (sq.ci) is done: its CQE if it is signaled or
 * failed (every earlier WQE is complete, so CQEs stay in SQ order), then the
 * window moves on.
 */
void qhca_req_complete(QhcaState *s, QhcaQp *qp, uint8_t status)
{
    QhcaReqSlot *sl = qhca_req_slot(qp, qp->sq.ci);
    QhcaSendWqe *w = &sl->wqe;
    uint32_t len = 0;

    trace_qhca_req_complete(qhca_qpn(s, qp), qp->sq.ci, w->opcode, status);
    if (qhca_wr_rd_atomic(w->opcode)) {
        len = w->length;
        if (!sl->status) {
            qp->req_rd_atomic--;
        }
    }
    qp->sq.ci++;
    if ((int16_t)(qp->req_send - qp->sq.ci) < 0) {
        qp->req_send = qp->sq.ci;
        qp->req_next = 0;
    }
    qhca_req_cwnd_grow(qp);
    qp->req_retry_left = qp->retry_cnt;
    qp->req_rnr_left = qp->rnr_retry;
    qp->req_rnr_naks = 0;
    if (!qhca_req_outstanding(qp)) {
        qp->req_wait = false;
    }
    if (status != QHCA_WC_SUCCESS || (w->flags & QHCA_WQE_SIGNALED)) {
        qhca_complete(s, qp, qp->scqn, qp->sq.ci - 1, w->wr_id,
                      qhca_wc_opcode(w->opcode), status, len, 0, 0);
    }
    if (status != QHCA_WC_SUCCESS) {
        qhca_qp_set_error(s, qp, true);
        return;
    }
    qhca_req_progress(qp);
    /*
     * WQEs to start or packets to send (a turn of its own does both).  Not
     * from inside the QP's own turn (an ACK that came back inside its send,
     * on the loopback wire): qhca_req_run() ends that turn and picks the
     * work up itself, and its return value says whether any is left, so
     * queuing the QP would only wake the bottom half for nothing.
     */
    if (qp != s->turn_qp &&
        (qp->req_head != qp->sq.pi || qp->req_send != qp->req_head)) {
        qhca_engine_schedule(s, qp);
    }
}

/*
 * Completes, oldest first, every message that is done: SEND and WRITE once
 * req_acked_psn covers their last PSN, READ and atomics once their answer is
 * in, a WQE that failed locally with its status.
 */
void qhca_req_advance(QhcaState *s, QhcaQp *qp)
{
    while (qp->state == QHCA_QPS_RTS && qhca_req_outstanding(qp)) {
        QhcaReqSlot *sl = qhca_req_slot(qp, qp->sq.ci);

        if (sl->status) {
            qhca_req_complete(s, qp, sl->status);
            return;
        }
        if (qhca_wr_rd_atomic(sl->wqe.opcode)) {
            uint32_t last = psn_add(sl->first_psn, sl->npkts - 1);

            if (!sl->done) {
                return;
            }
            /* Its answer came in full: its PSNs are acknowledged too. */
            if (psn_diff(last, qp->req_acked_psn) > 0) {
                qp->req_acked_psn = last;
            }
        } else if (psn_diff(psn_add(sl->first_psn, sl->npkts - 1),
                            qp->req_acked_psn) > 0) {
            return;
        }
        qhca_req_complete(s, qp, QHCA_WC_SUCCESS);
    }
}

/* Every PSN up to psn is acknowledged (a coalesced ACK, or implied). */
void qhca_req_ack_upto(QhcaState *s, QhcaQp *qp, uint32_t psn)
{
    bool moved = psn_diff(psn, qp->req_acked_psn) > 0;

    if (moved) {
        qp->req_acked_psn = psn;
    }
    /* Completions first: the timer is not armed for what they end. */
    qhca_req_advance(s, qp);
    if (moved && qp->state == QHCA_QPS_RTS) {
        qhca_req_progress(qp);
    }
}

/* How far psn is past the first PSN of the oldest message in flight. */
static uint32_t qhca_req_dist(QhcaQp *qp, uint32_t psn)
{
    return (psn - qhca_req_slot(qp, qp->sq.ci)->first_psn) & QHCA_PSN_MASK;
}

/*
 * psn belongs to a message in flight and has gone out (a READ request
 * covers all its responses' PSNs): an answer can be for it.  A PSN that is
 * only assigned (the rest of a message waiting for a page, for its turn)
 * cannot have been received, so nothing about it is believed.  Distances
 * from the oldest message, not psn_diff(): one message alone may span
 * 2^23 PSNs.
 */
bool qhca_req_psn_sent(QhcaQp *qp, uint32_t psn)
{
    return qhca_req_dist(qp, psn) < qhca_req_dist(qp, qp->req_sent_psn);
}

/* psn is acknowledged already (every PSN up to req_acked_psn is). */
bool qhca_req_psn_acked(QhcaQp *qp, uint32_t psn)
{
    return qhca_req_dist(qp, psn) <
           qhca_req_dist(qp, psn_add(qp->req_acked_psn, 1));
}

/* The message in flight that psn belongs to: its SQ index and packet. */
bool qhca_req_find(QhcaQp *qp, uint32_t psn, uint16_t *idx,
                   uint32_t *k)
{
    uint16_t i;

    for (i = qp->sq.ci; i != qp->req_head; i++) {
        QhcaReqSlot *sl = qhca_req_slot(qp, i);
        int32_t d = psn_diff(psn, sl->first_psn);

        if (d >= 0 && d < (int32_t)sl->npkts) {
            *idx = i;
            *k = d;
            return true;
        }
    }
    return false;
}

/* The PSN the next packet to go out carries. */
uint32_t qhca_req_cursor_psn(QhcaQp *qp)
{
    QhcaReqSlot *sl;

    if (qp->req_send == qp->req_head) {
        return qp->sq_psn;
    }
    sl = qhca_req_slot(qp, qp->req_send);
    if (sl->wqe.opcode == QHCA_WR_RDMA_READ) {
        return psn_add(sl->first_psn, MAX(qp->req_next, sl->resp_next));
    }
    return psn_add(sl->first_psn, qp->req_next);
}

/* Go back N: the next packet to go out is psn's, unless it already is. */
void qhca_req_rewind(QhcaState *s, QhcaQp *qp, uint32_t psn)
{
    uint16_t idx;
    uint32_t k;

    /* Whatever the QP was waiting for, it now resends at once. */
    qp->req_wait = false;
    timer_del(qp->timer);
    if (!qhca_req_find(qp, psn, &idx, &k) ||
        psn_diff(qhca_req_cursor_psn(qp), psn) <= 0) {
        return;
    }
    trace_qhca_req_rewind(qhca_qpn(s, qp), psn, idx, k);
    qp->req_send = idx;
    qp->req_next = k;
}

/*
 * A page fault (s->fault) stops the QP where it is: building a packet of
 * the WQE at idx, or (answer) placing a READ response or atomic result for
 * it, which is then dropped and asked for again once the page is in.
 */
void qhca_req_fault(QhcaState *s, QhcaQp *qp, uint16_t idx,
                    bool answer)
{
    if (!qhca_odp_raise(s, qp, false, &qp->req_fault_token)) {
        /* No room for the event: the access faults again in a while. */
        qp->req_wait = true;
        qhca_timer_arm(qp, QHCA_ODP_EQ_RETRY_NS);
        return;
    }
    qp->req_fault = true;
    qp->req_fault_failed = false;
    qp->req_fault_idx = idx;
    qp->req_fault_answer = answer;
}

/* RESUME: the QP's next turn retries the access, or fails its WQE. */
void qhca_req_fault_resume(QhcaState *s, QhcaQp *qp, bool ok)
{
    qp->req_fault = false;
    qp->req_fault_failed = !ok;
    qhca_engine_schedule(s, qp);
}

/*
 * The driver could not make the page present: the WQE that faulted
 * completes with a local protection error (in SQ order), and the QP goes to
 * ERR.  A READ or atomic whose answer could not be placed is the oldest.
 */
static void qhca_req_fault_fail(QhcaState *s, QhcaQp *qp)
{
    qp->req_fault_failed = false;
    trace_qhca_err_wqe(qhca_qpn(s, qp), qp->req_fault_idx,
                       "page fault not resolved");
    if (qp->req_fault_answer) {
        if (qp->sq.ci == qp->req_fault_idx) {
            qhca_req_complete(s, qp, QHCA_WC_LOC_PROT_ERR);
        }
        return;
    }
    qhca_req_slot(qp, qp->req_fault_idx)->status = QHCA_WC_LOC_PROT_ERR;
    qhca_req_advance(s, qp);
}

/*
 * A WQE the requester refuses before sending anything: it completes with
 * status once every WQE before it has.
 */
static void qhca_req_bad_wqe(QhcaState *s, QhcaQp *qp, uint8_t status,
                             const char *why)
{
    QhcaReqSlot *sl = qhca_req_slot(qp, qp->req_head);

    trace_qhca_err_wqe(qhca_qpn(s, qp), qp->req_head, why);
    qemu_log_mask(LOG_GUEST_ERROR, "qhca: QP %u send WQE %u: %s\n",
                  qhca_qpn(s, qp), qp->req_head, why);
    sl->status = status;
    sl->first_psn = qp->sq_psn;
    sl->npkts = 0;
    qp->req_head++;
    qhca_req_advance(s, qp);
}

/*
 * A local operation (BIND_MW, LOCAL_INV, REG_MR) at req_head, every WQE
 * before it complete, runs now: a WQE after it starts only after it, so a
 * message that carries the new key goes out once the window is bound or the
 * region registered.  It sends nothing (no PSN) and completes at once.
 */
static void qhca_req_local(QhcaState *s, QhcaQp *qp, const void *seg)
{
    const struct qhca_wqe_bind *le = seg;
    const struct qhca_wqe_reg_mr *reg = seg;
    QhcaReqSlot *sl = qhca_req_slot(qp, qp->req_head);
    QhcaSendWqe *w = &sl->wqe;
    const char *why = NULL;
    uint8_t st;

    if (w->num_sge || w->inline_len || (w->flags & QHCA_WQE_INLINE)) {
        qhca_req_bad_wqe(s, qp, QHCA_WC_LOC_QP_OP_ERR,
                         "data on a local operation");
        return;
    }
    if (w->opcode == QHCA_WR_BIND_MW) {
        struct qhca_wqe_bind b = {
            .addr = le64_to_cpu(le->addr),
            .length = le64_to_cpu(le->length),
            .mw_key = le32_to_cpu(le->mw_key),
            .new_key = le32_to_cpu(le->new_key),
            .mr_key = le32_to_cpu(le->mr_key),
            .access = le32_to_cpu(le->access),
        };

        st = qhca_mw_bind(s, qp, &b, &why);
    } else if (w->opcode == QHCA_WR_REG_MR) {
        struct qhca_wqe_reg_mr r = {
            .iova = le64_to_cpu(reg->iova),
            .length = le64_to_cpu(reg->length),
            .pages_addr = le64_to_cpu(reg->pages_addr),
            .key = le32_to_cpu(reg->key),
            .access = le32_to_cpu(reg->access),
        };

        st = qhca_mr_fast_reg(s, qp, &r, &why);
    } else {
        st = qhca_local_inv(s, qp, w->imm, &why);
    }
    if (st != QHCA_WC_SUCCESS) {
        qhca_req_bad_wqe(s, qp, st, why);
        return;
    }
    trace_qhca_req_start(qhca_qpn(s, qp), qp->req_head, w->opcode, 0,
                         qp->sq_psn, 0);
    sl->first_psn = qp->sq_psn;
    sl->npkts = 0;
    qp->req_head++;
    qhca_req_advance(s, qp);
}

/*
 * Reads and validates the WQE at req_head into its slot.  false: it may
 * not start yet (READ/atomic limit, fence); nothing changed.
 */
static bool qhca_req_start(QhcaState *s, QhcaQp *qp)
{
    QhcaReqSlot *sl = qhca_req_slot(qp, qp->req_head);
    QhcaSendWqe *w = &sl->wqe;
    uint16_t idx = qp->req_head;
    struct {
        struct qhca_wqe_ctrl ctrl;
        union {
            struct {
                struct qhca_wqe_raddr raddr;
                struct qhca_wqe_atomic atomic;
            };
            struct qhca_wqe_bind bind;
            struct qhca_wqe_reg_mr reg;
        };
    } hdr;
    const char *why;
    uint8_t st;

    QEMU_BUILD_BUG_ON(sizeof(hdr) != QHCA_WQE_DATA_OFFSET);
    memset(sl, 0, sizeof(*sl));
    if (!qhca_wq_read(s, qp, &qp->sq, idx, 0, &hdr, sizeof(hdr))) {
        qhca_req_bad_wqe(s, qp, QHCA_WC_LOC_QP_OP_ERR, "ring unreachable");
        return true;
    }
    w->opcode = hdr.ctrl.opcode;
    w->flags = hdr.ctrl.flags;
    if (qhca_wr_rd_atomic(w->opcode) && !qp->max_rd_atomic) {
        /* An initiator depth of 0: this QP issues no READ or atomic. */
        w->wr_id = le64_to_cpu(hdr.ctrl.wr_id);
        qhca_req_bad_wqe(s, qp, QHCA_WC_LOC_QP_OP_ERR,
                         "READ or atomic with max_rd_atomic 0");
        return true;
    }
    /* Bounded: the QP's max_rd_atomic; a fence waits for them all. */
    if ((qhca_wr_rd_atomic(w->opcode) &&
         qp->req_rd_atomic >= qp->max_rd_atomic) ||
        ((w->flags & QHCA_WQE_FENCE) && qp->req_rd_atomic)) {
        return false;
    }
    if (!qhca_req_outstanding(qp)) {
        /* Nothing in flight: everything before sq_psn is acknowledged. */
        qp->req_acked_psn = psn_add(qp->sq_psn, QHCA_PSN_MASK);
        qp->req_sent_psn = qp->sq_psn;
        qp->req_nak_retry = false;
        qp->req_retry_left = qp->retry_cnt;
        qp->req_rnr_left = qp->rnr_retry;
        qp->req_rnr_naks = 0;
    }
    w->wr_id = le64_to_cpu(hdr.ctrl.wr_id);
    w->num_sge = hdr.ctrl.num_sge;
    w->imm = le32_to_cpu(hdr.ctrl.imm_data);
    w->inline_len = le32_to_cpu(hdr.ctrl.inline_len);
    w->raddr = le64_to_cpu(hdr.raddr.remote_addr);
    w->rkey = le32_to_cpu(hdr.raddr.rkey);
    w->swap_add = le64_to_cpu(hdr.atomic.swap_add);
    w->compare = le64_to_cpu(hdr.atomic.compare);

    if (w->opcode > QHCA_WR_REG_MR ||
        (w->flags & ~(QHCA_WQE_SIGNALED | QHCA_WQE_SOLICITED |
                      QHCA_WQE_INLINE | QHCA_WQE_FENCE)) ||
        hdr.ctrl.rsvd0 || hdr.ctrl.rsvd1[0] || hdr.ctrl.rsvd1[1] ||
        hdr.ctrl.rsvd1[2] ||
        (w->opcode != QHCA_WR_BIND_MW && w->opcode != QHCA_WR_REG_MR &&
         hdr.raddr.rsvd)) {
        qhca_req_bad_wqe(s, qp, QHCA_WC_LOC_QP_OP_ERR,
                         "bad opcode, flags or reserved field");
        return true;
    }
    if (w->opcode == QHCA_WR_BIND_MW || w->opcode == QHCA_WR_LOCAL_INV ||
        w->opcode == QHCA_WR_REG_MR) {
        /*
         * Only once every WQE before it has completed: a bind behind a
         * request that fails is flushed, and must then not have happened.
         */
        if (qhca_req_outstanding(qp)) {
            return false;
        }
        qhca_req_local(s, qp, &hdr.bind);
        return true;
    }

    st = qhca_send_wqe_data(s, qp, idx, QHCA_WQE_DATA_OFFSET, w,
                            w->inline_data, &why);
    if (st != QHCA_WC_SUCCESS) {
        qhca_req_bad_wqe(s, qp, st, why);
        return true;
    }
    if ((w->opcode == QHCA_WR_ATOMIC_CMP_AND_SWP ||
         w->opcode == QHCA_WR_ATOMIC_FETCH_AND_ADD) && w->length != 8) {
        qhca_req_bad_wqe(s, qp, QHCA_WC_LOC_LEN_ERR,
                         "atomic needs one 8-byte local buffer");
        return true;
    }

    sl->first_psn = qp->sq_psn;
    if (w->opcode == QHCA_WR_ATOMIC_CMP_AND_SWP ||
        w->opcode == QHCA_WR_ATOMIC_FETCH_AND_ADD) {
        sl->npkts = 1;
    } else {
        sl->npkts = MAX(1, DIV_ROUND_UP(w->length, qhca_mtu(qp)));
    }
    /*
     * PSNs in flight stay within QHCA_PSN_WINDOW, so that psn_diff() tells
     * old from new across the 24-bit wrap: a large message waits for the
     * window to drain (alone, one message is at most 2^23 packets).
     */
    if (qhca_req_outstanding(qp) &&
        ((qp->sq_psn - qhca_req_slot(qp, qp->sq.ci)->first_psn) &
         QHCA_PSN_MASK) + sl->npkts > QHCA_PSN_WINDOW) {
        return false;
    }
    if (qhca_wr_rd_atomic(w->opcode)) {
        qp->req_rd_atomic++;
    }
    qp->sq_psn = psn_add(qp->sq_psn, sl->npkts);
    qp->req_head++;
    trace_qhca_req_start(qhca_qpn(s, qp), idx, w->opcode, w->length,
                         sl->first_psn, sl->npkts);
    return true;
}

static uint8_t qhca_req_opcode(const QhcaSendWqe *w, uint32_t i, uint32_t n)
{
    bool first = i == 0, last = i == n - 1;
    bool imm = w->opcode == QHCA_WR_SEND_WITH_IMM ||
               w->opcode == QHCA_WR_RDMA_WRITE_WITH_IMM;

    if (w->opcode == QHCA_WR_SEND_WITH_INV && last) {
        return first ? QHCA_OP_SEND_ONLY_INV : QHCA_OP_SEND_LAST_INV;
    }
    if (w->opcode == QHCA_WR_SEND || w->opcode == QHCA_WR_SEND_WITH_IMM ||
        w->opcode == QHCA_WR_SEND_WITH_INV) {
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

/*
 * Sends the packet at the cursor (req_send, req_next) and moves it on.  The
 * wire may deliver the answer before this returns; callers re-check the QP
 * afterwards.
 */
static void qhca_req_send_one(QhcaState *s, QhcaQp *qp)
{
    uint16_t idx = qp->req_send;
    QhcaReqSlot *sl = qhca_req_slot(qp, idx);
    QhcaSendWqe *w = &sl->wqe;
    uint32_t mtu = qhca_mtu(qp);
    QhcaPkt *pkt = qhca_pkt_new(s);
    uint32_t i = qp->req_next;
    uint32_t sent;
    uint8_t st;

    switch (w->opcode) {
    case QHCA_WR_RDMA_READ: {
        /* From the first response packet not in yet. */
        uint32_t k = MAX(i, sl->resp_next);
        uint64_t off = (uint64_t)k * mtu;

        pkt->opcode = QHCA_OP_READ_REQUEST;
        pkt->psn = psn_add(sl->first_psn, k);
        pkt->va = w->raddr + off;
        pkt->rkey = w->rkey;
        pkt->dma_len = w->length - off;
        pkt->ack_req = true;
        i = sl->npkts - 1;
        break;
    }
    case QHCA_WR_ATOMIC_CMP_AND_SWP:
    case QHCA_WR_ATOMIC_FETCH_AND_ADD:
        pkt->opcode = w->opcode == QHCA_WR_ATOMIC_CMP_AND_SWP ?
                      QHCA_OP_CMP_SWAP : QHCA_OP_FETCH_ADD;
        pkt->psn = sl->first_psn;
        pkt->va = w->raddr;
        pkt->rkey = w->rkey;
        pkt->swap_add = w->swap_add;
        pkt->compare = w->compare;
        pkt->ack_req = true;
        break;
    default: {
        uint64_t off = (uint64_t)i * mtu;

        pkt->opcode = qhca_req_opcode(w, i, sl->npkts);
        pkt->psn = psn_add(sl->first_psn, i);
        pkt->len = MIN(w->length - off, mtu);
        if (i == 0 && (w->opcode == QHCA_WR_RDMA_WRITE ||
                       w->opcode == QHCA_WR_RDMA_WRITE_WITH_IMM)) {
            pkt->va = w->raddr;
            pkt->rkey = w->rkey;
            pkt->dma_len = w->length;
        }
        if (pkt->opcode == QHCA_OP_SEND_LAST_INV ||
            pkt->opcode == QHCA_OP_SEND_ONLY_INV) {
            pkt->ieth = w->imm;
        } else if (w->opcode != QHCA_WR_SEND_WITH_INV) {
            pkt->imm = w->imm;
        }
        pkt->ack_req = i == sl->npkts - 1;
        if (w->flags & QHCA_WQE_INLINE) {
            memcpy(pkt->payload, w->inline_data + off, pkt->len);
        } else {
            st = qhca_sge_copy(s, qp->pdn, w->sge, w->num_sge, off,
                               pkt->payload, pkt->len, false);
            if (st == QHCA_WC_ODP_FAULT) {
                /* Not sent; the cursor stays on it. */
                qhca_pkt_free(s, pkt);
                qhca_req_fault(s, qp, idx, false);
                return;
            }
            if (st != QHCA_WC_SUCCESS) {
                /* Nothing more goes out; it completes so, in order. */
                qhca_pkt_free(s, pkt);
                sl->status = st;
                qhca_req_advance(s, qp);
                return;
            }
        }
        break;
    }
    }

    if (i + 1 >= sl->npkts) {
        qp->req_send++;
        qp->req_next = 0;
    } else {
        qp->req_next = i + 1;
    }
    /* Before the send: on the loopback wire the answer comes inside it. */
    sent = psn_add(sl->first_psn, i + 1);
    if (qhca_req_dist(qp, sent) > qhca_req_dist(qp, qp->req_sent_psn)) {
        qp->req_sent_psn = sent;
    }
    QHCA_TRACE_STEP(QHCA_REQ_SEND, qhca_req_send, qhca_qpn(s, qp), idx,
                    pkt->opcode, pkt->psn, pkt->len);
    qhca_rc_send(s, qp, pkt);
    qhca_pkt_free(s, pkt);
    /*
     * The ACK timer, after the send: on the loopback wire the answer has
     * usually come back inside it, and then there is no timer to arm (a
     * timer_mod that would wake the main loop, only to be deleted).
     */
    if (qp->state == QHCA_QPS_RTS && qhca_req_outstanding(qp) &&
        !qp->req_wait && !timer_pending(qp->timer)) {
        qhca_req_arm_ack_timer(qp);
    }
}

/*
 * The requester's part of a QP turn: (re)send packets from the cursor,
 * start WQEs while the window, the READ/atomic limit and the fence allow,
 * one budget unit each.  true if it stopped for the budget alone.
 */
bool qhca_req_run(QhcaState *s, QhcaQp *qp, unsigned *budget)
{
    for (;;) {
        if (qp->state != QHCA_QPS_RTS) {
            return qp->state == QHCA_QPS_ERR;
        }
        if (qp->req_fault_failed) {
            qhca_req_fault_fail(s, qp);
            continue;
        }
        if (qp->req_wait || qp->req_fault) {
            return false;
        }
        if (!*budget) {
            return qp->req_send != qp->req_head || qp->req_head != qp->sq.pi;
        }
        if (qp->req_send != qp->req_head) {
            QhcaReqSlot *sl = qhca_req_slot(qp, qp->req_send);

            if ((uint16_t)(qp->req_send - qp->sq.ci) >= qp->req_cwnd) {
                /* Slow restart: the next message waits for an ACK. */
                return false;
            }

            if (sl->status) {
                /* A WQE that failed: nothing after it goes out. */
                return false;
            }
            if (!sl->npkts) {
                /* A local operation: done when it started. */
                qp->req_send++;
                qp->req_next = 0;
                continue;
            }
            qhca_req_send_one(s, qp);
            (*budget)--;
            continue;
        }
        if (qp->req_head == qp->sq.pi ||
            (uint16_t)(qp->req_head - qp->sq.ci) >= qp->req_cwnd) {
            return false;
        }
        (*budget)--;
        if (!qhca_req_start(s, qp)) {
            return false;
        }
    }
}
