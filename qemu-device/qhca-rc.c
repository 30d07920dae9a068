/*
 * qhca: an emulated RDMA host channel adapter -- the RC engine
 *
 * Requester and responder of reliable-connected QPs.  The engine turns send
 * WQEs into packets and packets into memory accesses, ACKs and completions;
 * it never knows how packets travel: it hands them to s->wire and receives
 * them in qhca_rc_recv() (qhca-wire.h).  This file holds what requester and
 * responder share (QP state, the wire) and the scheduler; the requester is
 * in qhca-rc-req.c, the responder in qhca-rc-resp.c, memory by key in
 * qhca-mr.c, the CQs their completions go to in qhca-cq.c, their shared
 * declarations in qhca-rc.h.
 *
 * Requester: a window of messages in flight per QP (the SQ's depth, at most
 * QHCA_REQ_WINDOW_MAX; READs and atomics at most the QP's max_rd_atomic).
 * Each WQE is read through the QP's page list, validated and copied; its
 * local SGEs are checked against their MRs (PD, rights, byte bounds) on
 * every access.  A message goes out in path-MTU segments with consecutive
 * PSNs, the last one asking for an ACK; ACKs are coalesced and WQEs
 * complete in SQ order.  An RNR NAK pauses the QP on a QEMU timer
 * (the responder's min_rnr_timer) and goes back to the NAKed PSN; a
 * PSN-sequence NAK or a local ACK timeout goes back as well (go-back-N),
 * both counted against retry_cnt (which starts again whenever an answer
 * moves the window); rnr_retry 7 retries for ever, backing off exponentially
 * (QHCA_RNR_FLOOR_NS .. QHCA_RNR_MAX_NS).  Any other NAK, a local error or
 * exhausted retries complete the WQE with an error status, move the QP to
 * ERR (QHCA_EQE_QP_ERR) and flush the rest with WR_FLUSH_ERR.  Every CQE
 * carries the index of the WQE it completes.
 *
 * Every packet carries its source port and QP; a QP takes requests and
 * responses only from the peer it is connected to (dest_qpn, on this port),
 * and drops, counts (QUERY_CTX pkt_foreign) and traces anything else.
 *
 * Responder: checks the PSN (duplicates are re-ACKed, RDMA READs re-read,
 * atomics answered from the result saved in the responder resources), the
 * opcode sequence, the R_Key, a region's or a window's (qhca-mw.c)
 * (exists, same PD as the QP, rights of the MR and of the QP, byte bounds;
 * the rights and the key again on every packet, so that a MODIFY_QP or a
 * DEREG_MR takes effect at the next packet) and executes: receive WQE for
 * SEND and WRITE_WITH_IMM (none posted: RNR NAK), memory for
 * WRITE/READ/atomics.  READ responses and atomic ACKs go out in PSN order,
 * the first packet at once and the rest from the responder QP's own turns
 * in the BH, a budget of packets at a time.
 *
 * The engine runs in its bottom half (guarded against DMA into the device's
 * own BARs), round-robin over the QPs that have work, with a budget per QP
 * and per run, so that one QP cannot starve the others and a paused QP does
 * not hold anyone up; a doorbell also runs one turn inline (qhca_engine_kick)
 * so that a small message completes before the doorbell store returns.
 * Timers only mark the QP and schedule the BH.  A run is a busy section
 * (qhca_busy_enter()): a reset or bottom half reached from inside one of its
 * DMAs waits for the run's end, and so does its interrupt.  Atomics are
 * atomic with respect to the device, not to the guest's CPUs.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/atomic.h"
#include "qemu/bswap.h"
#include "qemu/main-loop.h"
#include "qhca-rc.h"
#include "trace.h"

/*
 * The WQE at the consumer index of the QP's SQ (send), or the receive WQE
 * it took (qp->recv), fails before anything of it left or landed, on a QP
 * that completes its WQEs as it takes them (UD, Ethernet): it completes
 * with status and the WC opcode on its CQ, logged as a guest error of a
 * @kind QP, and the QP goes to ERR.
 */
void qhca_wqe_fail(QhcaState *s, QhcaQp *qp, bool send, const char *kind,
                   uint64_t wr_id, uint8_t opcode, uint8_t status,
                   const char *why)
{
    uint16_t idx = send ? qp->sq.ci : qp->recv.index;

    trace_qhca_err_wqe(qhca_qpn(s, qp), idx, why);
    qemu_log_mask(LOG_GUEST_ERROR, "qhca: %s QP %u %s WQE %u: %s\n", kind,
                  qhca_qpn(s, qp), send ? "send" : "receive", idx, why);
    if (send) {
        qp->sq.ci++;
    } else {
        qhca_recv_done(qp);
    }
    qhca_complete(s, qp, send ? qp->scqn : qp->rcqn, idx, wr_id,
                  opcode, status, 0, 0, 0);
    qhca_qp_set_error(s, qp, true);
}

/* ------------------------------------------------------------------------ */
/* QP state                                                                 */

/* qp has work: on the run list (an engine run's end looks at it). */
void qhca_engine_enqueue(QhcaState *s, QhcaQp *qp)
{
    if (!qp->queued) {
        qp->queued = true;
        QTAILQ_INSERT_TAIL(&s->run_list, qp, next);
    }
}

/*
 * qp has work: on the run list, and the bottom half scheduled unless an
 * engine run is under way (its end schedules it for what is left).  Waking
 * the main loop from a vCPU thread is what a doorbell must not pay for when
 * its own turn does the work (a write to an eventfd, after which the main
 * loop thread wants the BQL the vCPU holds).
 */
void qhca_engine_schedule(QhcaState *s, QhcaQp *qp)
{
    qhca_engine_enqueue(s, qp);
    if (!s->engine_running) {
        qemu_bh_schedule(s->engine_bh);
    }
}

static void qhca_engine_unschedule(QhcaState *s, QhcaQp *qp)
{
    if (qp->queued) {
        QTAILQ_REMOVE(&s->run_list, qp, next);
        qp->queued = false;
    }
}

static void qhca_qp_timer_cb(void *opaque)
{
    QhcaQp *qp = opaque;

    /* No DMA here: the BH does the work, under the reentrancy guard. */
    qp->req_timer_fired = true;
    qhca_engine_schedule(qp->s, qp);
}

void qhca_timer_arm(QhcaQp *qp, int64_t ns)
{
    /* A firing that the BH has not acted on yet is for the old deadline. */
    qp->req_timer_fired = false;
    trace_qhca_timer_arm(qp->qpn, ns);
    timer_mod(qp->timer, qemu_clock_get_ns(QEMU_CLOCK_VIRTUAL) + ns);
}

/* Nothing in flight any more: the window starts at sq.ci again. */
void qhca_req_clear(QhcaQp *qp)
{
    qp->req_head = qp->sq.ci;
    qp->req_send = qp->sq.ci;
    qp->req_next = 0;
    qp->req_rd_atomic = 0;
    qp->req_wait = false;
    qp->req_timer_fired = false;
    qp->req_nak_retry = false;
    if (qp->timer) {
        timer_del(qp->timer);
    }
}

void qhca_resp_clear(QhcaQp *qp)
{
    qp->resp_op = QHCA_RESP_NONE;
    qp->resp_have_rwqe = false;
    qp->resp_off = 0;
    qp->resp_left = 0;
    qp->resp_total = 0;
}

/* The responder resources: forgotten (RESET, ERR). */
void qhca_resp_res_clear(QhcaQp *qp)
{
    memset(qp->rd_res, 0, sizeof(qp->rd_res));
    qp->rd_tail = 0;
    qp->rd_active = false;
}

/* Creation and the transition to RESET: empty queues, nothing in flight. */
void qhca_engine_qp_reset(QhcaState *s, QhcaQp *qp)
{
    qp->s = s;
    if (!qp->timer) {
        qp->timer = timer_new_ns(QEMU_CLOCK_VIRTUAL, qhca_qp_timer_cb, qp);
    }
    if (!qp->req_slots) {
        /* Sized once per QP: the SQ's size does not change. */
        qp->req_window = MIN(1u << qp->sq.log, QHCA_REQ_WINDOW_MAX);
        qp->req_slots = g_new0(QhcaReqSlot, qp->req_window);
    }
    qp->req_cwnd = qp->req_ssthresh = qp->req_window;
    qp->req_cwnd_acked = 0;
    qhca_engine_unschedule(s, qp);
    qp->sq.pi = qp->sq.ci = 0;
    qp->rq.pi = qp->rq.ci = 0;
    /* A WQE taken from an SRQ is lost (the verbs go through ERR first). */
    qp->recv_held = false;
    qp->last_wqe = false;
    qhca_req_clear(qp);
    qhca_resp_clear(qp);
    qhca_resp_res_clear(qp);
    qhca_odp_clear(qp);
    qp->resp_nak_sent = false;
    qp->resp_msn = 0;
}

void qhca_engine_qp_destroy(QhcaState *s, QhcaQp *qp)
{
    qhca_engine_unschedule(s, qp);
    if (qp->timer) {
        timer_free(qp->timer);
        qp->timer = NULL;
    }
    g_free(qp->req_slots);
    qp->req_slots = NULL;
    qp->req_window = 0;
}

/*
 * Into ERR: nothing more is sent or accepted; the BH flushes both queues.
 * event: the device did it on its own (QHCA_EQE_QP_ERR), not MODIFY_QP.
 */
void qhca_qp_set_error(QhcaState *s, QhcaQp *qp, bool event)
{
    if (qp->state == QHCA_QPS_ERR) {
        return;
    }
    trace_qhca_qp_error(qhca_qpn(s, qp), qp->state, event);
    qp->state = QHCA_QPS_ERR;
    qhca_req_clear(qp);
    qhca_resp_clear(qp);
    qhca_resp_res_clear(qp);
    qhca_odp_clear(qp);
    if (event) {
        qhca_eq_event(s, QHCA_EQE_QP_ERR, qhca_qpn(s, qp), qp->uar);
    }
    qhca_engine_schedule(s, qp);
}

uint8_t qhca_wc_opcode(uint8_t wr_opcode)
{
    switch (wr_opcode) {
    case QHCA_WR_RDMA_WRITE:
    case QHCA_WR_RDMA_WRITE_WITH_IMM:
        return QHCA_WC_RDMA_WRITE;
    case QHCA_WR_RDMA_READ:
        return QHCA_WC_RDMA_READ;
    case QHCA_WR_ATOMIC_CMP_AND_SWP:
        return QHCA_WC_COMP_SWAP;
    case QHCA_WR_ATOMIC_FETCH_AND_ADD:
        return QHCA_WC_FETCH_ADD;
    case QHCA_WR_BIND_MW:
        return QHCA_WC_BIND_MW;
    case QHCA_WR_LOCAL_INV:
        return QHCA_WC_LOCAL_INV;
    case QHCA_WR_REG_MR:
        return QHCA_WC_REG_MR;
    default:
        return QHCA_WC_SEND;
    }
}

/* ------------------------------------------------------------------------ */
/* the wire                                                                 */

/* Sends pkt from qp to its peer, stamped with its source. */
void qhca_rc_send(QhcaState *s, QhcaQp *qp, QhcaPkt *pkt)
{
    if (s->reset_pending) {
        /* The device is being reset: nothing leaves it any more. */
        return;
    }
    memcpy(pkt->sgid, qp->av.sgid, sizeof(pkt->sgid));
    memcpy(pkt->dgid, qp->av.dgid, sizeof(pkt->dgid));
    pkt->traffic_class = qp->av.traffic_class;
    pkt->hop_limit = qp->av.hop_limit;
    pkt->flow_label = qp->av.flow_label;
    pkt->src_qpn = qhca_qpn(s, qp);
    pkt->dest_qpn = qp->dest_qpn;
    qhca_wire_send(s->wire, pkt);
}

void qhca_rc_recv(QhcaState *s, const QhcaPkt *pkt)
{
    QhcaQp *qp;

    if (pkt->opcode == QHCA_OP_UD_SEND_ONLY ||
        pkt->opcode == QHCA_OP_UD_SEND_ONLY_IMM) {
        qhca_ud_recv(s, pkt);
        return;
    }
    qp = qhca_qp_lookup(s, pkt->dest_qpn);
    if (!qp || qp->type != QHCA_QPT_RC) {
        trace_qhca_pkt_drop(pkt->dest_qpn, pkt->opcode, pkt->psn,
                            "no such QP");
        return;
    }
    /*
     * RC: requests and responses alike come only from the connected peer:
     * its address, to this QP's address, and (when the wire knows it) its
     * QPN.  Anything else (another QP that names this one as its
     * destination, a stale generation of the peer's index, another host)
     * could fail the responder, forge ACKs, READ responses or data:
     * dropped, counted for the QP's owner.
     */
    if ((pkt->src_qpn != QHCA_SRC_QPN_UNKNOWN &&
         pkt->src_qpn != qp->dest_qpn) ||
        memcmp(pkt->sgid, qp->av.dgid, sizeof(pkt->sgid)) ||
        memcmp(pkt->dgid, qp->av.sgid, sizeof(pkt->dgid))) {
        s->ctx[qp->uar].pkt_foreign++;
        trace_qhca_pkt_foreign(qhca_qpn(s, qp), pkt->opcode, pkt->psn,
                               ldq_be_p(pkt->sgid + 8), pkt->src_qpn,
                               qp->dest_qpn);
        qemu_log_mask(LOG_GUEST_ERROR, "qhca: QP 0x%x: packet from GID ..%"
                      PRIx64 " QP 0x%x dropped: its peer is QP 0x%x\n",
                      qhca_qpn(s, qp), ldq_be_p(pkt->sgid + 8),
                      pkt->src_qpn, qp->dest_qpn);
        return;
    }
    if (pkt->opcode >= QHCA_OP_READ_RESP_FIRST &&
        pkt->opcode <= QHCA_OP_ATOMIC_ACK) {
        qhca_req_recv(s, qp, pkt);
    } else if (pkt->opcode <= QHCA_OP_FETCH_ADD ||
               pkt->opcode == QHCA_OP_SEND_LAST_INV ||
               pkt->opcode == QHCA_OP_SEND_ONLY_INV) {
        qhca_resp_recv(s, qp, pkt);
    } else {
        trace_qhca_pkt_drop(pkt->dest_qpn, pkt->opcode, pkt->psn,
                            "unknown opcode");
    }
}

/* ------------------------------------------------------------------------ */
/* the bottom half                                                          */

/* A flushed WQE whose ring cannot be read still completes, with wr_id 0. */
static void qhca_flush_read(QhcaState *s, QhcaQp *qp, QhcaWq *wq, void *buf,
                            size_t len)
{
    if (!qhca_wq_read(s, qp, wq, wq->ci, 0, buf, len)) {
        memset(buf, 0, len);
        QHCA_GUEST_ERR(s, qhca_err_wqe, "QP %u WQE %u: %s", qhca_qpn(s, qp),
                       wq->ci, "ring unreachable while flushing");
    }
}

/* ERR: every outstanding WQE completes with WR_FLUSH_ERR. */
static bool qhca_qp_flush(QhcaState *s, QhcaQp *qp, unsigned *budget)
{
    while (*budget && qp->sq.ci != qp->sq.pi) {
        struct qhca_wqe_ctrl ctrl;

        qhca_flush_read(s, qp, &qp->sq, &ctrl, sizeof(ctrl));
        qp->sq.ci++;
        qhca_complete(s, qp, qp->scqn, qp->sq.ci - 1, le64_to_cpu(ctrl.wr_id),
                      qhca_wc_opcode(ctrl.opcode), QHCA_WC_WR_FLUSH_ERR, 0,
                      0, 0);
        (*budget)--;
    }
    while (*budget && qp->rq.ci != qp->rq.pi) {
        struct qhca_rwqe rwqe;

        qhca_flush_read(s, qp, &qp->rq, &rwqe, sizeof(rwqe));
        qp->rq.ci++;
        qhca_complete(s, qp, qp->rcqn, qp->rq.ci - 1, le64_to_cpu(rwqe.wr_id),
                      QHCA_WC_RECV, QHCA_WC_WR_FLUSH_ERR, 0, 0, 0);
        (*budget)--;
    }
    if (qp->srq) {
        qhca_recv_flush(s, qp, budget);
        if (qp->recv_held) {
            return true;
        }
    }
    return qp->sq.ci != qp->sq.pi || qp->rq.ci != qp->rq.pi;
}

static bool qhca_qp_turn(QhcaState *s, QhcaQp *qp, unsigned *budget);

/* One turn of one QP; true if it has more work right now. */
static bool qhca_qp_run(QhcaState *s, QhcaQp *qp)
{
    unsigned budget = QHCA_QP_BUDGET;
    bool more;

    QHCA_TRACE_STEP(QHCA_QP_TURN_BEGIN, qhca_qp_turn_begin, qhca_qpn(s, qp),
                    qp->sq.ci, qp->sq.pi);
    more = qhca_qp_turn(s, qp, &budget);
    QHCA_TRACE_STEP(QHCA_QP_TURN_END, qhca_qp_turn_end, qhca_qpn(s, qp),
                    qp->sq.ci, QHCA_QP_BUDGET - budget, more);
    return more;
}

/* The work of one QP turn, a budget of packets or WQEs. */
static bool qhca_qp_turn(QhcaState *s, QhcaQp *qp, unsigned *budget)
{
    if (qp->req_timer_fired) {
        qp->req_timer_fired = false;
        if (qp->type != QHCA_QPT_RC) {
            /* UD: a page fault's event found the EQ full: raise it again. */
            qp->req_wait = false;
        } else if (qp->state == QHCA_QPS_RTS) {
            qhca_req_timeout(s, qp);
        }
    }
    if (qp->state == QHCA_QPS_ERR) {
        return qhca_qp_flush(s, qp, budget);
    }
    if (qp->type == QHCA_QPT_UD) {
        return qp->state == QHCA_QPS_RTS && qhca_ud_run(s, qp, budget);
    }
    if (qp->type == QHCA_QPT_ETH) {
        /* Its receive side is the port's (qhca_eth_poll()). */
        return qp->state == QHCA_QPS_RTS && qhca_eth_run(s, qp, budget);
    }
    if (qp->resp_fault_ack) {
        qhca_resp_resume_ack(s, qp);
    }
    if (qp->rd_active && !qp->resp_fault_read &&
        (qp->state == QHCA_QPS_RTR || qp->state == QHCA_QPS_RTS)) {
        qhca_resp_read_step(s, qp, budget);
        if (qp->rd_active && !qp->resp_fault_read) {
            return true;
        }
    }
    if (qp->state != QHCA_QPS_RTS) {
        return false;
    }
    return qhca_req_run(s, qp, budget);
}

/*
 * Up to @turns QP turns, round-robin; the bottom half takes what is left.
 * A busy section: see qhca_busy_enter().
 */
static void qhca_engine_run(QhcaState *s, unsigned turns, bool poll_wire)
{
    QhcaQp *qp;
    bool more;
    uint32_t i;

    if (s->status & QHCA_STATUS_FATAL) {
        return;
    }
    if (s->busy) {
        /* Reached from inside one of our own DMAs: after this run. */
        s->engine_deferred = true;
        return;
    }
    qhca_busy_enter(s);
    s->engine_running = true;
    QHCA_TRACE_STEP(QHCA_ENGINE_RUN_BEGIN, qhca_engine_run_begin, !poll_wire,
                    turns);
    if (poll_wire && s->wire->ops->poll) {
        unsigned budget = QHCA_WIRE_BUDGET;

        s->wire->ops->poll(s->wire, &budget);
    }
    for (i = 0; s->cq_arm_pending && i < QHCA_LIMIT_MAX_CQ; i++) {
        if (s->cq[i].in_use) {
            qhca_cq_arm_check(s, &s->cq[i]);
        }
    }
    while (turns && !s->reset_pending && (qp = QTAILQ_FIRST(&s->run_list))) {
        turns--;
        QTAILQ_REMOVE(&s->run_list, qp, next);
        qp->queued = false;
        s->turn_qp = qp;
        more = qhca_qp_run(s, qp);
        s->turn_qp = NULL;
        if (more) {
            qhca_engine_schedule(s, qp);
        }
    }
    s->engine_running = false;
    if (!QTAILQ_EMPTY(&s->run_list) ||
        (s->wire->ops->pending && s->wire->ops->pending(s->wire))) {
        qemu_bh_schedule(s->engine_bh);
    }
    QHCA_TRACE_STEP(QHCA_ENGINE_RUN_END, qhca_engine_run_end, !poll_wire,
                    turns);
    qhca_busy_exit(s);
}

void qhca_engine_bh(void *opaque)
{
    qhca_engine_run(opaque, QHCA_ENGINE_BUDGET, true);
}

/*
 * The doorbell fast path: one turn (at most QHCA_QP_BUDGET packets, each at
 * most one MTU) in the thread of the vCPU that rang, as e1000 transmits on
 * its TDT write.  A small message then completes before the store returns
 * instead of after the main loop next gets a host CPU, which under TCG on a
 * busy host is milliseconds away.  Anything longer stays on the bottom half.
 */
void qhca_engine_kick(QhcaState *s)
{
    qhca_engine_run(s, QHCA_INLINE_TURNS, false);
}

/*
 * A packet from the netdev with none queued ahead of it: the engine takes it
 * at once, in the main loop's turn that read it, rather than one turn later
 * in the bottom half (an eventfd written and read and a turn of the main
 * loop fewer per packet), and the work it made (an ACK that opened the
 * window, a READ to answer) gets one turn at once, as a doorbell's does; the
 * bottom half takes what is left.  Not from inside a run of this device's: the
 * caller queues the packet instead.
 */
void qhca_engine_recv(QhcaState *s, const QhcaPkt *pkt)
{
    assert(!s->busy);
    if (s->status & QHCA_STATUS_FATAL) {
        return;
    }
    qhca_busy_enter(s);
    /* What it schedules waits for the turn below, not for the BH. */
    s->engine_running = true;
    qhca_rc_recv(s, pkt);
    s->engine_running = false;
    qhca_busy_exit(s);
    if (!QTAILQ_EMPTY(&s->run_list)) {
        qhca_engine_run(s, QHCA_INLINE_TURNS, false);
    }
}

void qhca_engine_init(QhcaState *s)
{
    QTAILQ_INIT(&s->run_list);
    s->engine_bh = qemu_bh_new_guarded(qhca_engine_bh, s,
                                       &DEVICE(s)->mem_reentrancy_guard);
    s->wire = qhca_wire_loopback_new(s);
}

void qhca_engine_fini(QhcaState *s)
{
    qemu_bh_delete(s->engine_bh);
    s->engine_bh = NULL;
    s->wire->ops->free(s->wire);
    s->wire = NULL;
}
