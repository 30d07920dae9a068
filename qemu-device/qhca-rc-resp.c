/*
 * qhca: an emulated RDMA host channel adapter -- the RC responder
 *
 * Requests to memory accesses, receive completions and ACKs: PSN and opcode
 * sequence, R_Key and rights on every packet, RDMA READ responses a budget
 * at a time, atomics.  See qhca-rc.c for the engine as a whole.
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
/* responder                                                                */

static void qhca_resp_send(QhcaState *s, QhcaQp *qp, QhcaPkt *pkt)
{
    trace_qhca_resp_send(qhca_qpn(s, qp), pkt->opcode, pkt->psn,
                         pkt->syndrome);
    qhca_rc_send(s, qp, pkt);
}

/*
 * A message is done (IBA 9.7.5.1.2: a SEND or RDMA WRITE placed whole, an
 * RDMA READ or atomic taken): the MSN every later AETH carries.
 */
static void qhca_resp_msg_done(QhcaQp *qp)
{
    qp->resp_msn = (qp->resp_msn + 1) & QHCA_PSN_MASK;
}

static void qhca_resp_ack(QhcaState *s, QhcaQp *qp, uint32_t psn,
                          uint8_t syndrome)
{
    QhcaPkt *pkt = qhca_pkt_new(s);

    pkt->opcode = QHCA_OP_ACK;
    pkt->psn = psn;
    pkt->syndrome = syndrome;
    pkt->msn = qp->resp_msn;
    qhca_resp_send(s, qp, pkt);
    qhca_pkt_free(s, pkt);
}

/* A fatal responder error: NAK it, and the responder QP goes to ERR. */
static void qhca_resp_fail(QhcaState *s, QhcaQp *qp, uint32_t psn,
                           uint8_t nak, const char *why)
{
    trace_qhca_resp_fail(qhca_qpn(s, qp), psn, nak, why);
    qemu_log_mask(LOG_GUEST_ERROR, "qhca: QP 0x%x: request PSN 0x%x: %s,"
                  " NAK %u\n", qhca_qpn(s, qp), psn, why, nak);
    qhca_resp_ack(s, qp, psn, QHCA_AETH_NAK | nak);
    qhca_qp_set_error(s, qp, true);
}

/* Local error while placing a SEND: the receive WQE completes in error too. */
static void qhca_resp_recv_fail(QhcaState *s, QhcaQp *qp, uint32_t psn,
                                uint8_t wc_status, uint8_t nak,
                                const char *why)
{
    qhca_recv_done(qp);
    qhca_complete(s, qp, qp->rcqn, qp->recv.index, qp->recv.wr_id,
                  QHCA_WC_RECV, wc_status, qp->resp_off, 0, 0);
    qhca_resp_fail(s, qp, psn, nak, why);
}

/*
 * A page fault (s->fault) on the request at psn: the packet is dropped and
 * answered with an RNR NAK, so that the requester backs off and sends it
 * again; one event per fault, the retries that come while it is being
 * served get the NAK alone (qhca_resp_recv).
 */
/*
 * Raises the fault in s->fault for the access at psn, unless one is
 * outstanding already (the QP waits on one at a time).  true if raised.
 */
static bool qhca_resp_raise(QhcaState *s, QhcaQp *qp, uint32_t psn)
{
    if (qp->resp_fault ||
        !qhca_odp_raise(s, qp, true, &qp->resp_fault_token)) {
        return false;
    }
    qp->resp_fault = true;
    qp->resp_fault_failed = false;
    qp->resp_fault_psn = psn;
    return true;
}

static void qhca_resp_fault(QhcaState *s, QhcaQp *qp, uint32_t psn)
{
    bool raised = qhca_resp_raise(s, qp, psn);

    s->ctx[qp->uar].odp_fault_rnr_naks++;
    trace_qhca_odp_rnr(qhca_qpn(s, qp), psn, raised);
    qhca_resp_ack(s, qp, psn, QHCA_AETH_RNR_NAK | qp->min_rnr_timer);
}

/*
 * A READ response that meets a page fault (its page was invalidated since
 * the request was checked): the responses wait until RESUME.  Without room
 * for the event they wait for the requester to ask again (its ACK timer).
 */
static void qhca_resp_read_fault(QhcaState *s, QhcaQp *qp, uint32_t psn)
{
    qhca_resp_raise(s, qp, psn);
    qp->resp_fault_read = true;
}

/*
 * RESUME: READ responses go on; a request's retry is taken, or (not ok)
 * NAKed with a remote access error.
 */
void qhca_resp_fault_resume(QhcaState *s, QhcaQp *qp, bool ok)
{
    qp->resp_fault = false;
    qp->resp_fault_failed = !ok;
    if (qp->resp_fault_read) {
        qp->resp_fault_read = false;
    } else if (ok) {
        qp->resp_fault_ack = true;
    }
    qhca_engine_schedule(s, qp);
}

/*
 * The page is in: an unsolicited ACK of everything before the request that
 * faulted tells a requester in RNR back-off to send it now rather than when
 * its timer runs out (the patent's "unsolicited ACK"; any other requester
 * ignores an ACK it has had already).
 */
void qhca_resp_resume_ack(QhcaState *s, QhcaQp *qp)
{
    qp->resp_fault_ack = false;
    if (qp->state == QHCA_QPS_RTR || qp->state == QHCA_QPS_RTS) {
        qhca_resp_ack(s, qp, psn_add(qp->rq_psn, QHCA_PSN_MASK),
                      QHCA_AETH_ACK | 0x1f);
    }
}

/* Takes the next receive WQE; false if it is malformed (QP to ERR). */
static bool qhca_resp_take_rwqe(QhcaState *s, QhcaQp *qp, uint32_t psn)
{
    const char *why;

    if (!qhca_recv_take(s, qp, &why)) {
        qhca_resp_recv_fail(s, qp, psn, QHCA_WC_LOC_QP_OP_ERR,
                            QHCA_NAK_REM_OP, why);
        return false;
    }
    qp->resp_off = 0;
    qp->resp_have_rwqe = true;
    return true;
}

static bool qhca_op_is_send(uint8_t op)
{
    return op <= QHCA_OP_SEND_ONLY_IMM || op == QHCA_OP_SEND_LAST_INV ||
           op == QHCA_OP_SEND_ONLY_INV;
}

static bool qhca_op_is_write(uint8_t op)
{
    return op >= QHCA_OP_WRITE_FIRST && op <= QHCA_OP_WRITE_ONLY_IMM;
}

static bool qhca_op_starts(uint8_t op)
{
    return op == QHCA_OP_SEND_FIRST || op == QHCA_OP_SEND_ONLY ||
           op == QHCA_OP_SEND_ONLY_IMM || op == QHCA_OP_SEND_ONLY_INV ||
           op == QHCA_OP_WRITE_FIRST ||
           op == QHCA_OP_WRITE_ONLY || op == QHCA_OP_WRITE_ONLY_IMM ||
           op == QHCA_OP_READ_REQUEST || op == QHCA_OP_CMP_SWAP ||
           op == QHCA_OP_FETCH_ADD;
}

static bool qhca_op_ends(uint8_t op)
{
    return op != QHCA_OP_SEND_FIRST && op != QHCA_OP_SEND_MIDDLE &&
           op != QHCA_OP_WRITE_FIRST && op != QHCA_OP_WRITE_MIDDLE;
}

static bool qhca_op_imm(uint8_t op)
{
    return op == QHCA_OP_SEND_LAST_IMM || op == QHCA_OP_SEND_ONLY_IMM ||
           op == QHCA_OP_WRITE_LAST_IMM || op == QHCA_OP_WRITE_ONLY_IMM;
}

/*
 * The responder resources: the last QHCA_LIMIT_MAX_RD_ATOMIC RDMA READs and
 * atomics, oldest first from rd_tail, of which at most the QP's
 * max_dest_rd_atomic are not answered yet.  Their answers go out in PSN
 * order from the QP's turns in the BH, a budget of packets at a time
 * (qhca_resp_read_step), so that a large READ does not hold up the other
 * QPs; an answered one stays for duplicates, whose answers (a replay) go
 * out the same way but count against nothing: a duplicate is no new
 * request, and the network may repeat one after its requester has moved on.
 */
static QhcaRdRes *qhca_resp_res(QhcaQp *qp, uint32_t i)
{
    return &qp->rd_res[i % QHCA_LIMIT_MAX_RD_ATOMIC];
}

/* The oldest resource with answers still to send, or NULL. */
static QhcaRdRes *qhca_resp_res_pending(QhcaQp *qp)
{
    uint32_t i;

    for (i = 0; i < QHCA_LIMIT_MAX_RD_ATOMIC; i++) {
        QhcaRdRes *r = qhca_resp_res(qp, qp->rd_tail + i);

        if (r->valid && r->next < r->n) {
            return r;
        }
    }
    return NULL;
}

/* The newest resource of that kind whose PSNs include psn, or NULL. */
static QhcaRdRes *qhca_resp_res_find(QhcaQp *qp, uint32_t psn, bool atomic)
{
    uint32_t i;

    for (i = 1; i <= QHCA_LIMIT_MAX_RD_ATOMIC; i++) {
        QhcaRdRes *r = qhca_resp_res(qp, qp->rd_tail - i);
        int32_t d = psn_diff(psn, r->psn);

        if (r->valid && r->atomic == atomic && d >= 0 && d < (int32_t)r->n) {
            return r;
        }
    }
    return NULL;
}

/*
 * A new resource for the request at psn; NULL (and the QP in ERR) if the
 * requester has more in flight than the responder accepts (IB: an invalid
 * request).  The answers still to send are the newest resources: they go
 * out in PSN order.
 */
static QhcaRdRes *qhca_resp_res_take(QhcaState *s, QhcaQp *qp, uint32_t psn)
{
    QhcaRdRes *r = qhca_resp_res(qp, qp->rd_tail);
    uint32_t i, busy = 0;

    for (i = 0; i < QHCA_LIMIT_MAX_RD_ATOMIC; i++) {
        QhcaRdRes *o = qhca_resp_res(qp, qp->rd_tail + i);

        busy += o->valid && !o->answered;
    }
    if (busy >= qp->max_dest_rd_atomic) {
        qhca_resp_fail(s, qp, psn, QHCA_NAK_INV_REQ,
                       "more RDMA READs and atomics than max_dest_rd_atomic");
        return NULL;
    }
    /*
     * The oldest resource makes room.  It is answered (at most 15 are not,
     * and those are the newest: answers go in order), but may be replaying
     * for a duplicate: the replay ends here.  Its requester does not wait
     * for it: one that did would have it and the 15 after it outstanding,
     * and could not have sent this request (max_rd_atomic <= 16).  A
     * pause for a page that replay faulted on ends with it.
     */
    if (r->valid && r->next < r->n) {
        trace_qhca_resp_replay_end(qhca_qpn(s, qp), r->psn, r->next, r->n);
        if (qp->resp_fault_read &&
            (uint32_t)psn_diff(qp->resp_fault_psn, r->psn) < r->n) {
            qp->resp_fault_read = false;
        }
    }
    qp->rd_tail++;
    memset(r, 0, sizeof(*r));
    r->valid = true;
    r->psn = psn;
    return r;
}

/*
 * Answers are due: one packet at once (a small READ or an atomic is answered
 * from the request's own delivery), the rest from the QP's turns in the BH.
 */
static void qhca_resp_res_kick(QhcaState *s, QhcaQp *qp)
{
    unsigned budget = 1;

    qp->rd_active = true;
    qhca_resp_read_step(s, qp, &budget);
    if (qp->rd_active) {
        qhca_engine_schedule(s, qp);
    }
}

/* RDMA READ request at the expected PSN. */
static void qhca_resp_read(QhcaState *s, QhcaQp *qp, const QhcaPkt *req)
{
    uint32_t n = MAX(1, DIV_ROUND_UP(req->dma_len, qhca_mtu(qp)));
    QhcaRdRes *r;

    if (req->dma_len > QHCA_MAX_MSG_SIZE) {
        /*
         * Longer than IBA's largest message, as real HCAs refuse it.  Its
         * responses would not even fit the PSN space: 2^32 - 1 bytes at
         * MTU 256 are 2^24 of them, the last one on the request's PSN.
         */
        qhca_resp_fail(s, qp, req->psn, QHCA_NAK_INV_REQ,
                       "RDMA READ longer than 2^31 bytes");
        return;
    }
    if (req->dma_len) {
        QhcaMr *mr = qhca_rkey_check(s, qp, req->rkey, req->va,
                                     req->dma_len, QHCA_ACCESS_REMOTE_READ);

        if (!mr || !(qp->access & QHCA_ACCESS_REMOTE_READ)) {
            qhca_resp_fail(s, qp, req->psn, QHCA_NAK_REM_ACCESS,
                           "R_Key refused for RDMA READ");
            return;
        }
        /* Every page present before the first response goes out. */
        if (!qhca_mr_ready(s, mr, req->va, req->dma_len, false)) {
            qhca_resp_fault(s, qp, req->psn);
            return;
        }
    }
    r = qhca_resp_res_take(s, qp, req->psn);
    if (!r) {
        return;
    }
    r->n = n;
    r->va = req->va;
    r->rkey = req->rkey;
    r->len = req->dma_len;
    qhca_resp_msg_done(qp);
    r->msn = qp->resp_msn;
    qp->rq_psn = psn_add(req->psn, n);
    qhca_resp_res_kick(s, qp);
}

/*
 * A duplicate RDMA READ request (the requester went back): answered again
 * from memory, from the packet it asks for, in PSN order with the rest.
 */
static void qhca_resp_read_dup(QhcaState *s, QhcaQp *qp, const QhcaPkt *req)
{
    QhcaRdRes *r = qhca_resp_res_find(qp, req->psn, false);
    uint32_t k;

    if (!r) {
        trace_qhca_pkt_drop(qhca_qpn(s, qp), req->opcode, req->psn,
                            "duplicate READ older than the resources");
        return;
    }
    k = psn_diff(req->psn, r->psn);
    r->next = MIN(r->next, k);
    if (qp->resp_fault_read && !qp->resp_fault) {
        /* Paused for a fault whose event found no room: try again. */
        qp->resp_fault_read = false;
    }
    qhca_resp_res_kick(s, qp);
}

/* A duplicate atomic: its saved result again, executed once only. */
static void qhca_resp_atomic_dup(QhcaState *s, QhcaQp *qp, const QhcaPkt *req)
{
    QhcaRdRes *r = qhca_resp_res_find(qp, req->psn, true);

    if (!r) {
        trace_qhca_pkt_drop(qhca_qpn(s, qp), req->opcode, req->psn,
                            "duplicate atomic older than the resources");
        return;
    }
    r->next = 0;
    qhca_resp_res_kick(s, qp);
}

void qhca_resp_read_step(QhcaState *s, QhcaQp *qp, unsigned *budget)
{
    uint32_t mtu = qhca_mtu(qp);
    QhcaPkt *pkt = qhca_pkt_new(s);

    while (*budget && qp->rd_active && !qp->resp_fault_read &&
           (qp->state == QHCA_QPS_RTR || qp->state == QHCA_QPS_RTS)) {
        /* Again each time: a send may have changed the QP. */
        QhcaRdRes *r = qhca_resp_res_pending(qp);
        uint32_t i;
        uint64_t off;
        QhcaMr *mr;

        if (!r) {
            qp->rd_active = false;
            break;
        }
        i = r->next;
        off = (uint64_t)i * mtu;
        memset(pkt, 0, offsetof(QhcaPkt, payload));
        pkt->psn = psn_add(r->psn, i);
        pkt->syndrome = QHCA_AETH_ACK;
        pkt->msn = r->msn;
        if (r->atomic) {
            pkt->opcode = QHCA_OP_ATOMIC_ACK;
            pkt->orig = r->orig;
        } else if (r->n == 1) {
            pkt->opcode = QHCA_OP_READ_RESP_ONLY;
        } else if (i == 0) {
            pkt->opcode = QHCA_OP_READ_RESP_FIRST;
        } else if (i == r->n - 1) {
            pkt->opcode = QHCA_OP_READ_RESP_LAST;
        } else {
            pkt->opcode = QHCA_OP_READ_RESP_MIDDLE;
        }
        if (!r->atomic) {
            pkt->len = MIN(r->len - off, mtu);
        }
        if (pkt->len) {
            /*
             * Again per packet: the MR may have gone since the request, or
             * MODIFY_QP taken the QP's right away.
             */
            mr = qhca_rkey_check(s, qp, r->rkey, r->va + off, pkt->len,
                                 QHCA_ACCESS_REMOTE_READ);
            if (!mr || !(qp->access & QHCA_ACCESS_REMOTE_READ)) {
                qhca_resp_fail(s, qp, pkt->psn, QHCA_NAK_REM_ACCESS,
                               "R_Key refused for RDMA READ");
                break;
            }
            switch (qhca_mr_rw(s, mr, r->va + off, pkt->payload, pkt->len,
                               false)) {
            case QHCA_MEM_OK:
                break;
            case QHCA_MEM_FAULT:
                if (qp->resp_fault_failed && qp->resp_fault_psn == pkt->psn) {
                    qhca_resp_fail(s, qp, pkt->psn, QHCA_NAK_REM_ACCESS,
                                   "RDMA READ source: page fault not resolved");
                } else {
                    qhca_resp_read_fault(s, qp, pkt->psn);
                }
                goto out;
            default:
                qhca_resp_fail(s, qp, pkt->psn, QHCA_NAK_REM_OP,
                               "RDMA READ source unreachable");
                goto out;
            }
        }
        r->next++;
        if (r->next == r->n) {
            r->answered = true;
        }
        if (!qhca_resp_res_pending(qp)) {
            qp->rd_active = false;
        }
        (*budget)--;
        qhca_resp_send(s, qp, pkt);
    }
out:
    qhca_pkt_free(s, pkt);
}

static void qhca_resp_atomic(QhcaState *s, QhcaQp *qp, const QhcaPkt *req)
{
    uint64_t val, orig;
    QhcaRdRes *r;
    QhcaMr *mr;

    if (req->va & 7) {
        qhca_resp_fail(s, qp, req->psn, QHCA_NAK_INV_REQ,
                       "atomic address not 8-byte aligned");
        return;
    }
    mr = qhca_rkey_check(s, qp, req->rkey, req->va, 8,
                         QHCA_ACCESS_REMOTE_ATOMIC);
    if (!mr || !(qp->access & QHCA_ACCESS_REMOTE_ATOMIC)) {
        qhca_resp_fail(s, qp, req->psn, QHCA_NAK_REM_ACCESS,
                       "R_Key refused for atomic");
        return;
    }
    /* Executed only once its page is there: exactly once. */
    if (!qhca_mr_ready(s, mr, req->va, 8, true)) {
        qhca_resp_fault(s, qp, req->psn);
        return;
    }
    r = qhca_resp_res_take(s, qp, req->psn);
    if (!r) {
        return;
    }
    /* Not executed yet: answers nothing until it is. */
    r->atomic = true;
    r->n = 1;
    r->next = 1;
    if (qhca_mr_rw(s, mr, req->va, &val, 8, false) != QHCA_MEM_OK) {
        qhca_resp_fail(s, qp, req->psn, QHCA_NAK_REM_OP,
                       "atomic target unreachable");
        return;
    }
    orig = le64_to_cpu(val);
    if (req->opcode == QHCA_OP_CMP_SWAP) {
        val = orig == req->compare ? req->swap_add : orig;
    } else {
        val = orig + req->swap_add;
    }
    val = cpu_to_le64(val);
    if (qhca_mr_rw(s, mr, req->va, &val, 8, true) != QHCA_MEM_OK) {
        qhca_resp_fail(s, qp, req->psn, QHCA_NAK_REM_OP,
                       "atomic target unreachable");
        return;
    }
    trace_qhca_resp_atomic(qhca_qpn(s, qp), req->psn, orig);
    r->orig = orig;
    r->next = 0;
    qhca_resp_msg_done(qp);
    r->msn = qp->resp_msn;
    qp->rq_psn = psn_add(req->psn, 1);
    qhca_resp_res_kick(s, qp);
}

/* A request packet with the expected PSN: SEND or RDMA WRITE. */
static void qhca_resp_data(QhcaState *s, QhcaQp *qp, const QhcaPkt *pkt)
{
    uint8_t op = pkt->opcode;
    uint32_t mtu = qhca_mtu(qp);
    bool starts = qhca_op_starts(op), ends = qhca_op_ends(op);
    bool imm = qhca_op_imm(op);
    uint8_t st;

    if ((!ends && pkt->len != mtu) || pkt->len > mtu) {
        qhca_resp_fail(s, qp, pkt->psn, QHCA_NAK_INV_REQ,
                       "payload length does not fit the opcode");
        return;
    }

    /* A message that consumes a receive WQE needs one before anything. */
    if ((imm || (qhca_op_is_send(op) && starts)) && !qhca_recv_posted(qp)) {
        trace_qhca_resp_rnr(qhca_qpn(s, qp), pkt->psn);
        qhca_resp_ack(s, qp, pkt->psn, QHCA_AETH_RNR_NAK | qp->min_rnr_timer);
        return;
    }

    if (qhca_op_is_send(op)) {
        if (starts) {
            if (!qhca_resp_take_rwqe(s, qp, pkt->psn)) {
                return;
            }
            qp->resp_op = QHCA_RESP_SEND;
        }
        st = qhca_sge_copy(s, qp->recv.pdn, qp->recv.sge, qp->recv.num_sge,
                           qp->resp_off, (void *)pkt->payload, pkt->len, true);
        if (st == QHCA_WC_ODP_FAULT) {
            if (starts) {
                /* The retry takes the receive WQE again (or the held one). */
                qhca_resp_clear(qp);
            }
            qhca_resp_fault(s, qp, pkt->psn);
            return;
        }
        if (st == QHCA_WC_LOC_LEN_ERR) {
            qhca_resp_recv_fail(s, qp, pkt->psn, st, QHCA_NAK_INV_REQ,
                                "message longer than the receive WQE");
            return;
        }
        if (st != QHCA_WC_SUCCESS) {
            qhca_resp_recv_fail(s, qp, pkt->psn, st, QHCA_NAK_REM_OP,
                                "receive SGE refused");
            return;
        }
        qp->resp_off += pkt->len;
        qp->rq_psn = psn_add(pkt->psn, 1);
        QHCA_TRACE_STEP(QHCA_RESP_PLACED, qhca_resp_placed, qhca_qpn(s, qp),
                        pkt->opcode, pkt->psn, pkt->len);
        if (ends) {
            uint8_t flags = imm ? QHCA_CQE_WITH_IMM : 0;
            uint32_t data = pkt->imm;

            if (op == QHCA_OP_SEND_LAST_INV || op == QHCA_OP_SEND_ONLY_INV) {
                /* The message is in; the key goes before its CQE. */
                if (!qhca_remote_inv(s, qp, pkt->ieth)) {
                    qhca_resp_recv_fail(s, qp, pkt->psn,
                                        QHCA_WC_REM_INV_REQ_ERR,
                                        QHCA_NAK_INV_REQ,
                                        "SEND_WITH_INV: nothing to "
                                        "invalidate");
                    return;
                }
                flags = QHCA_CQE_WITH_INV;
                data = pkt->ieth;
            }
            qhca_recv_done(qp);
            qhca_complete(s, qp, qp->rcqn, qp->recv.index, qp->recv.wr_id,
                          QHCA_WC_RECV, QHCA_WC_SUCCESS, qp->resp_off, flags,
                          data);
            qhca_resp_msg_done(qp);
            qhca_resp_clear(qp);
        }
    } else {
        QhcaMr *mr = NULL;

        if (starts) {
            if (pkt->dma_len) {
                mr = qhca_rkey_check(s, qp, pkt->rkey, pkt->va,
                                     pkt->dma_len, QHCA_ACCESS_REMOTE_WRITE);
                if (!mr || !(qp->access & QHCA_ACCESS_REMOTE_WRITE)) {
                    qhca_resp_fail(s, qp, pkt->psn, QHCA_NAK_REM_ACCESS,
                                   "R_Key refused for RDMA WRITE");
                    return;
                }
            }
            qp->resp_op = QHCA_RESP_WRITE;
            qp->resp_va = pkt->va;
            qp->resp_rkey = pkt->rkey;
            qp->resp_left = pkt->dma_len;
            qp->resp_total = pkt->dma_len;
        }
        if (pkt->len > qp->resp_left || (ends && pkt->len != qp->resp_left)) {
            qhca_resp_fail(s, qp, pkt->psn, QHCA_NAK_INV_REQ,
                           "RDMA WRITE payload does not match the RETH");
            return;
        }
        if (pkt->len) {
            /*
             * Again per packet: the MR may have gone since the first, or
             * MODIFY_QP taken the QP's right away.
             */
            mr = qhca_rkey_check(s, qp, qp->resp_rkey, qp->resp_va,
                                 pkt->len, QHCA_ACCESS_REMOTE_WRITE);
            if (!mr || !(qp->access & QHCA_ACCESS_REMOTE_WRITE)) {
                qhca_resp_fail(s, qp, pkt->psn, QHCA_NAK_REM_ACCESS,
                               "R_Key refused for RDMA WRITE");
                return;
            }
            switch (qhca_mr_rw(s, mr, qp->resp_va, (void *)pkt->payload,
                               pkt->len, true)) {
            case QHCA_MEM_OK:
                break;
            case QHCA_MEM_FAULT:
                /* The rest of the message is needed too. */
                s->fault.len = qp->resp_va + qp->resp_left - s->fault.va;
                if (starts) {
                    /* The retry starts the message again. */
                    qhca_resp_clear(qp);
                }
                qhca_resp_fault(s, qp, pkt->psn);
                return;
            default:
                qhca_resp_fail(s, qp, pkt->psn, QHCA_NAK_REM_OP,
                               "RDMA WRITE target unreachable");
                return;
            }
        }
        qp->resp_va += pkt->len;
        qp->resp_left -= pkt->len;
        QHCA_TRACE_STEP(QHCA_RESP_PLACED, qhca_resp_placed, qhca_qpn(s, qp),
                        pkt->opcode, pkt->psn, pkt->len);
        if (imm) {
            if (!qhca_resp_take_rwqe(s, qp, pkt->psn)) {
                return;
            }
            qhca_recv_done(qp);
            qhca_complete(s, qp, qp->rcqn, qp->recv.index, qp->recv.wr_id,
                          QHCA_WC_RECV_RDMA_WITH_IMM, QHCA_WC_SUCCESS,
                          qp->resp_total, QHCA_CQE_WITH_IMM, pkt->imm);
        }
        qp->rq_psn = psn_add(pkt->psn, 1);
        if (ends) {
            qhca_resp_msg_done(qp);
            qhca_resp_clear(qp);
        }
    }
    if (pkt->ack_req && qp->state != QHCA_QPS_ERR) {
        qhca_resp_ack(s, qp, pkt->psn, QHCA_AETH_ACK | 0x1f);
    }
}

/*
 * The retry of a request that faulted: while the fault is served it is RNR
 * NAKed again (no new event); once RESUME said the page cannot be had, it
 * fails as an access to memory no key allows would (a SEND's receive WQE
 * completes with a local protection error).
 */
static void qhca_resp_fault_retry(QhcaState *s, QhcaQp *qp,
                                  const QhcaPkt *pkt)
{
    uint8_t op = pkt->opcode;

    if (qp->resp_fault) {
        /* Outstanding: the same RNR NAK, no new event. */
        qhca_resp_fault(s, qp, pkt->psn);
        return;
    }
    qp->resp_fault_failed = false;
    if (qhca_op_is_send(op) && qhca_op_starts(op) && qhca_recv_posted(qp) &&
        !qp->resp_op) {
        if (!qhca_resp_take_rwqe(s, qp, pkt->psn)) {
            return;
        }
    }
    if (qhca_op_is_send(op) && qp->resp_have_rwqe) {
        qhca_resp_recv_fail(s, qp, pkt->psn, QHCA_WC_LOC_PROT_ERR,
                            QHCA_NAK_REM_OP,
                            "receive buffer: page fault not resolved");
        return;
    }
    qhca_resp_fail(s, qp, pkt->psn, QHCA_NAK_REM_ACCESS,
                   "page fault not resolved");
}

void qhca_resp_recv(QhcaState *s, QhcaQp *qp, const QhcaPkt *pkt)
{
    int32_t d;
    uint8_t op = pkt->opcode;

    if (qp->state != QHCA_QPS_RTR && qp->state != QHCA_QPS_RTS) {
        trace_qhca_pkt_drop(qhca_qpn(s, qp), op, pkt->psn,
                            "responder not ready");
        return;
    }
    d = psn_diff(pkt->psn, qp->rq_psn);
    if (d > 0) {
        /*
         * A gap: NAK it once (IBA 9.7.5.2.2); the rest of the burst behind
         * it is dropped quietly until the expected PSN arrives.
         */
        if (qp->resp_nak_sent) {
            trace_qhca_pkt_drop(qhca_qpn(s, qp), op, pkt->psn,
                                "PSN ahead, already NAKed");
            return;
        }
        trace_qhca_pkt_drop(qhca_qpn(s, qp), op, pkt->psn, "PSN ahead: NAK");
        qp->resp_nak_sent = true;
        qhca_resp_ack(s, qp, qp->rq_psn, QHCA_AETH_NAK | QHCA_NAK_PSN_SEQ);
        return;
    }
    if (d < 0) {
        /* Duplicate: answer again, execute nothing twice. */
        if (op == QHCA_OP_READ_REQUEST) {
            qhca_resp_read_dup(s, qp, pkt);
        } else if (op == QHCA_OP_CMP_SWAP || op == QHCA_OP_FETCH_ADD) {
            qhca_resp_atomic_dup(s, qp, pkt);
        } else if (pkt->ack_req) {
            qhca_resp_ack(s, qp, psn_add(qp->rq_psn, QHCA_PSN_MASK),
                          QHCA_AETH_ACK | 0x1f);
        }
        return;
    }

    /* The expected PSN: does the opcode continue what is in progress? */
    qp->resp_nak_sent = false;
    if ((qp->resp_fault || qp->resp_fault_failed) &&
        pkt->psn == qp->resp_fault_psn) {
        qhca_resp_fault_retry(s, qp, pkt);
        return;
    }
    if (qp->resp_op) {
        bool ok = (qp->resp_op == QHCA_RESP_SEND && qhca_op_is_send(op) &&
                   !qhca_op_starts(op)) ||
                  (qp->resp_op == QHCA_RESP_WRITE &&
                   qhca_op_is_write(op) && !qhca_op_starts(op));
        if (!ok) {
            qhca_resp_fail(s, qp, pkt->psn, QHCA_NAK_INV_REQ,
                           "opcode out of sequence");
            return;
        }
    } else if (!qhca_op_starts(op)) {
        qhca_resp_fail(s, qp, pkt->psn, QHCA_NAK_INV_REQ,
                       "opcode out of sequence");
        return;
    }

    switch (op) {
    case QHCA_OP_READ_REQUEST:
        qhca_resp_read(s, qp, pkt);
        break;
    case QHCA_OP_CMP_SWAP:
    case QHCA_OP_FETCH_ADD:
        qhca_resp_atomic(s, qp, pkt);
        break;
    default:
        qhca_resp_data(s, qp, pkt);
        break;
    }
}
