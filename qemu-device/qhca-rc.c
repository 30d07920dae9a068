/*
 * qhca: an emulated RDMA host channel adapter -- the RC engine
 *
 * Requester and responder of reliable-connected QPs.  The engine turns send
 * WQEs into packets and packets into memory accesses, ACKs and completions;
 * it never knows how packets travel: it hands them to s->wire and receives
 * them in qhca_rc_recv() (qhca-wire.h).
 *
 * Requester: one message in flight per QP (stop and wait per WQE).  The WQE
 * is read through the QP's page list, validated and copied; its local SGEs
 * are checked against their MRs (PD, rights, byte bounds) on every access.
 * The message goes out in path-MTU segments with consecutive PSNs, the last
 * one asking for an ACK.  An RNR NAK pauses the QP on a QEMU timer
 * (the responder's min_rnr_timer) and retransmits from the NAKed PSN; a
 * PSN-sequence NAK or a local ACK timeout retransmits as well, both counted
 * against retry_cnt; rnr_retry 7 retries for ever, backing off exponentially
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
 * atomics answered from the saved result), the opcode sequence, the R_Key
 * (exists, same PD as the QP, rights of the MR and of the QP, byte bounds;
 * the rights and the key again on every packet, so that a MODIFY_QP or a
 * DEREG_MR takes effect at the next packet) and executes: receive WQE for
 * SEND and WRITE_WITH_IMM (none posted: RNR NAK), memory for
 * WRITE/READ/atomics.  READ responses go out from the responder QP's own
 * turns in the BH, a budget of packets at a time.
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
#include "qhca-wire.h"
#include "trace.h"

#define QHCA_MAX_MSG_SIZE       (1ull << 31)

/* QhcaQp.resp_op: the multi-packet message the responder is in. */
#define QHCA_RESP_NONE          0
#define QHCA_RESP_SEND          1
#define QHCA_RESP_WRITE         2

static uint32_t psn_add(uint32_t psn, uint32_t n)
{
    return (psn + n) & QHCA_PSN_MASK;
}

/* a - b in the 24-bit PSN space, as a signed distance. */
static int32_t psn_diff(uint32_t a, uint32_t b)
{
    return (int32_t)((a - b) << 8) >> 8;
}

static uint32_t qhca_mtu(const QhcaQp *qp)
{
    return 1u << qp->path_mtu;
}

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
/* memory through page lists and keys                                       */

/* [off, off + len) of the buffer described by a page list. */
static bool qhca_pl_rw(QhcaState *s, const uint64_t *pages, uint32_t npages,
                       uint64_t off, void *buf, uint64_t len, bool write)
{
    uint8_t *p = buf;

    while (len) {
        uint64_t pg = off >> QHCA_PAGE_SHIFT;
        uint32_t in = off & (QHCA_PAGE_SIZE - 1);
        uint32_t n = MIN(len, QHCA_PAGE_SIZE - in);
        MemTxResult r;

        if (pg >= npages) {
            return false;
        }
        r = write ? qhca_dma_write(s, pages[pg] + in, p, n)
                  : qhca_dma_read(s, pages[pg] + in, p, n);
        if (r != MEMTX_OK) {
            return false;
        }
        off += n;
        p += n;
        len -= n;
    }
    return true;
}

/*
 * The MR behind key, if it may be used by a QP of PD pdn for [va, va + len)
 * with the rights in access.  Byte granular: one byte outside fails.
 */
static QhcaMr *qhca_mr_check(QhcaState *s, uint32_t key, uint32_t pdn,
                             uint64_t va, uint64_t len, uint32_t access)
{
    QhcaMr *mr = qhca_mr_lookup(s, key);

    if (!mr || mr->pdn != pdn || (mr->access & access) != access) {
        return NULL;
    }
    if (va < mr->iova || len > mr->length || va - mr->iova > mr->length - len) {
        return NULL;
    }
    return mr;
}

static bool qhca_mr_rw(QhcaState *s, QhcaMr *mr, uint64_t va, void *buf,
                       uint64_t len, bool write)
{
    return qhca_pl_rw(s, mr->pages, mr->npages,
                      (mr->iova & (QHCA_PAGE_SIZE - 1)) + (va - mr->iova),
                      buf, len, write);
}

/*
 * Copy between buf and bytes [off, off + len) of a message laid out over a
 * scatter/gather list.  Returns a qhca_wc_status.
 */
static uint8_t qhca_sge_copy(QhcaState *s, uint32_t pdn,
                             const struct qhca_sge *sge, unsigned n,
                             uint64_t off, void *buf, uint64_t len,
                             bool to_mem)
{
    uint8_t *p = buf;
    unsigned i;

    for (i = 0; i < n && len; i++) {
        uint64_t chunk;
        QhcaMr *mr;

        if (off >= sge[i].length) {
            off -= sge[i].length;
            continue;
        }
        chunk = MIN(len, sge[i].length - off);
        mr = qhca_mr_check(s, sge[i].lkey, pdn, sge[i].addr + off, chunk,
                           to_mem ? QHCA_ACCESS_LOCAL_WRITE : 0);
        if (!mr) {
            return QHCA_WC_LOC_PROT_ERR;
        }
        if (!qhca_mr_rw(s, mr, sge[i].addr + off, p, chunk, to_mem)) {
            return QHCA_WC_LOC_ACCESS_ERR;
        }
        off = 0;
        p += chunk;
        len -= chunk;
    }
    return len ? QHCA_WC_LOC_LEN_ERR : QHCA_WC_SUCCESS;
}

/* Every non-empty SGE usable as a whole; the sum of their lengths. */
static uint8_t qhca_sge_check(QhcaState *s, uint32_t pdn,
                              const struct qhca_sge *sge, unsigned n,
                              bool to_mem, uint64_t *total)
{
    unsigned i;

    *total = 0;
    for (i = 0; i < n; i++) {
        if (!sge[i].length) {
            continue;
        }
        if (!qhca_mr_check(s, sge[i].lkey, pdn, sge[i].addr, sge[i].length,
                           to_mem ? QHCA_ACCESS_LOCAL_WRITE : 0)) {
            return QHCA_WC_LOC_PROT_ERR;
        }
        *total += sge[i].length;
    }
    return *total > QHCA_MAX_MSG_SIZE ? QHCA_WC_LOC_LEN_ERR : QHCA_WC_SUCCESS;
}

static uint64_t qhca_wq_slot(const QhcaWq *wq, uint16_t idx)
{
    return wq->offset +
           ((uint64_t)(idx & ((1u << wq->log) - 1)) << wq->stride_log);
}

static bool qhca_wq_read(QhcaState *s, QhcaQp *qp, const QhcaWq *wq,
                         uint16_t idx, uint64_t off, void *buf, uint64_t len)
{
    return qhca_pl_rw(s, qp->pages, qp->npages, qhca_wq_slot(wq, idx) + off,
                      buf, len, false);
}

/* ------------------------------------------------------------------------ */
/* completion queues                                                        */

static void qhca_cq_error(QhcaState *s, QhcaCq *cq, const char *why)
{
    if (cq->error) {
        return;
    }
    cq->error = true;
    trace_qhca_cq_error(qhca_cqn(s, cq), why);
    qemu_log_mask(LOG_GUEST_ERROR, "qhca: CQ %u: %s\n", qhca_cqn(s, cq), why);
    qhca_eq_event(s, QHCA_EQE_CQ_ERR, qhca_cqn(s, cq), cq->uar);
}

/*
 * Writes one CQE: bytes 0..30, a write barrier, then the owner byte.  false
 * if the CQ is (or now goes) into error: overrun or a ring it cannot reach.
 */
static bool qhca_cq_post(QhcaState *s, QhcaCq *cq, struct qhca_cqe *cqe)
{
    uint32_t entries = 1u << cq->log;
    const size_t owner_off = offsetof(struct qhca_cqe, owner);
    uint64_t off;

    if (cq->error) {
        return false;
    }
    if (cq->pi - cq->ci >= entries) {
        uint32_t ci;

        if (!qhca_pl_rw(s, cq->pages, cq->npages,
                        (uint64_t)QHCA_CQE_SIZE << cq->log, &ci, sizeof(ci),
                        false)) {
            qhca_cq_error(s, cq, "doorbell record unreachable");
            return false;
        }
        ci = le32_to_cpu(ci);
        /* Only forward, and never past what the device produced. */
        if (ci - cq->ci <= cq->pi - cq->ci) {
            cq->ci = ci;
        }
        if (cq->pi - cq->ci >= entries) {
            qhca_cq_error(s, cq, "overrun");
            return false;
        }
    }

    off = (uint64_t)(cq->pi & (entries - 1)) * QHCA_CQE_SIZE;
    cqe->owner = ((cq->pi >> cq->log) + 1) & QHCA_CQE_OWNER;
    if (!qhca_pl_rw(s, cq->pages, cq->npages, off, cqe, owner_off, true)) {
        qhca_cq_error(s, cq, "CQE ring unreachable");
        return false;
    }
    /* The body must be visible before the owner byte hands the entry over. */
    smp_wmb();
    if (!qhca_pl_rw(s, cq->pages, cq->npages, off + owner_off, &cqe->owner,
                    1, true)) {
        qhca_cq_error(s, cq, "CQE ring unreachable");
        return false;
    }
    trace_qhca_cqe(qhca_cqn(s, cq), cq->pi, cqe->opcode, cqe->status);
    cq->pi++;
    if (cq->armed) {
        cq->armed = false;
        qhca_eq_event(s, QHCA_EQE_CQ_COMP, qhca_cqn(s, cq), cq->uar);
    }
    return true;
}

/* wqe_index: the SQ or RQ index of the WQE this CQE completes. */
static void qhca_complete(QhcaState *s, QhcaQp *qp, uint32_t cqn,
                          uint16_t wqe_index, uint64_t wr_id, uint8_t opcode,
                          uint8_t status, uint32_t byte_len, bool with_imm,
                          uint32_t imm)
{
    struct qhca_cqe cqe = {
        .wr_id = cpu_to_le64(wr_id),
        .byte_len = cpu_to_le32(byte_len),
        .imm_data = cpu_to_le32(imm),
        .qpn = cpu_to_le32(qhca_qpn(s, qp)),
        .src_qp = cpu_to_le32(opcode & QHCA_WC_RECV ? qp->dest_qpn : 0),
        .opcode = opcode,
        .status = status,
        .flags = with_imm ? QHCA_CQE_WITH_IMM : 0,
        .wqe_index = cpu_to_le16(wqe_index),
    };

    if (!qhca_cq_post(s, &s->cq[cqn], &cqe) && qp->state != QHCA_QPS_ERR) {
        qhca_qp_set_error(s, qp, true);
    }
}

void qhca_cq_arm_check(QhcaState *s, QhcaCq *cq)
{
    if (!cq->arm_pending) {
        return;
    }
    cq->arm_pending = false;
    s->cq_arm_pending--;
    if (cq->armed && cq->pi != cq->arm_ci) {
        cq->armed = false;
        qhca_eq_event(s, QHCA_EQE_CQ_COMP, qhca_cqn(s, cq), cq->uar);
    }
}

/* ------------------------------------------------------------------------ */
/* QP state                                                                 */

void qhca_engine_schedule(QhcaState *s, QhcaQp *qp)
{
    if (!qp->queued) {
        qp->queued = true;
        QTAILQ_INSERT_TAIL(&s->run_list, qp, next);
    }
    qemu_bh_schedule(s->engine_bh);
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

static void qhca_timer_arm(QhcaQp *qp, int64_t ns)
{
    timer_mod(qp->timer, qemu_clock_get_ns(QEMU_CLOCK_VIRTUAL) + ns);
}

static void qhca_req_clear(QhcaQp *qp)
{
    qp->req_active = false;
    qp->req_sent = false;
    qp->req_wait = false;
    qp->req_timer_fired = false;
    if (qp->timer) {
        timer_del(qp->timer);
    }
}

static void qhca_resp_clear(QhcaQp *qp)
{
    qp->resp_op = QHCA_RESP_NONE;
    qp->resp_have_rwqe = false;
    qp->resp_off = 0;
    qp->resp_left = 0;
    qp->resp_total = 0;
    qp->rd_active = false;
}

/* Creation and the transition to RESET: empty queues, nothing in flight. */
void qhca_engine_qp_reset(QhcaState *s, QhcaQp *qp)
{
    qp->s = s;
    if (!qp->timer) {
        qp->timer = timer_new_ns(QEMU_CLOCK_VIRTUAL, qhca_qp_timer_cb, qp);
    }
    qhca_engine_unschedule(s, qp);
    qhca_req_clear(qp);
    qhca_resp_clear(qp);
    qp->sq.pi = qp->sq.ci = 0;
    qp->rq.pi = qp->rq.ci = 0;
    qp->atomic_valid = false;
    qp->resp_nak_sent = false;
}

void qhca_engine_qp_destroy(QhcaState *s, QhcaQp *qp)
{
    qhca_engine_unschedule(s, qp);
    if (qp->timer) {
        timer_free(qp->timer);
        qp->timer = NULL;
    }
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
    if (event) {
        qhca_eq_event(s, QHCA_EQE_QP_ERR, qhca_qpn(s, qp), qp->uar);
    }
    qhca_engine_schedule(s, qp);
}

static uint8_t qhca_wc_opcode(uint8_t wr_opcode)
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
    default:
        return QHCA_WC_SEND;
    }
}

/* ------------------------------------------------------------------------ */
/* the wire                                                                 */

/* Sends pkt from qp to its peer, stamped with its source. */
static void qhca_rc_send(QhcaState *s, QhcaQp *qp, QhcaPkt *pkt)
{
    if (s->reset_pending) {
        /* The device is being reset: nothing leaves it any more. */
        return;
    }
    pkt->src_guid = s->node_guid;
    pkt->src_qpn = qhca_qpn(s, qp);
    pkt->dest_qpn = qp->dest_qpn;
    qhca_wire_send(s->wire, pkt);
}

/*
 * The port a QP's peer sits behind.  The loopback wire reaches only this
 * device, so that is every QP's peer port; a wire to other devices will
 * take it from the QP's address vector.
 */
static uint64_t qhca_qp_peer_guid(QhcaState *s, const QhcaQp *qp)
{
    return s->node_guid;
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
static bool qhca_req_start(QhcaState *s, QhcaQp *qp)
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
static void qhca_req_send_one(QhcaState *s, QhcaQp *qp)
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
static void qhca_req_timeout(QhcaState *s, QhcaQp *qp)
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
static void qhca_req_recv(QhcaState *s, QhcaQp *qp, const QhcaPkt *pkt)
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

/* ------------------------------------------------------------------------ */
/* responder                                                                */

static void qhca_resp_send(QhcaState *s, QhcaQp *qp, QhcaPkt *pkt)
{
    trace_qhca_resp_send(qhca_qpn(s, qp), pkt->opcode, pkt->psn,
                         pkt->syndrome);
    qhca_rc_send(s, qp, pkt);
}

static void qhca_resp_ack(QhcaState *s, QhcaQp *qp, uint32_t psn,
                          uint8_t syndrome)
{
    QhcaPkt *pkt = g_new0(QhcaPkt, 1);

    pkt->opcode = QHCA_OP_ACK;
    pkt->psn = psn;
    pkt->syndrome = syndrome;
    qhca_resp_send(s, qp, pkt);
    g_free(pkt);
}

/* A fatal responder error: NAK it, and the responder QP goes to ERR. */
static void qhca_resp_fail(QhcaState *s, QhcaQp *qp, uint32_t psn,
                           uint8_t nak, const char *why)
{
    trace_qhca_resp_fail(qhca_qpn(s, qp), psn, nak, why);
    qhca_resp_ack(s, qp, psn, QHCA_AETH_NAK | nak);
    qhca_qp_set_error(s, qp, true);
}

/* Local error while placing a SEND: the receive WQE completes in error too. */
static void qhca_resp_recv_fail(QhcaState *s, QhcaQp *qp, uint32_t psn,
                                uint8_t wc_status, uint8_t nak,
                                const char *why)
{
    qhca_complete(s, qp, qp->rcqn, qp->rq.ci, qp->resp_wr_id, QHCA_WC_RECV,
                  wc_status, qp->resp_off, false, 0);
    qp->rq.ci++;
    qhca_resp_fail(s, qp, psn, nak, why);
}

/* Takes the receive WQE at rq.ci; false if it is malformed (QP to ERR). */
static bool qhca_resp_take_rwqe(QhcaState *s, QhcaQp *qp, uint32_t psn)
{
    struct qhca_rwqe hdr;
    struct qhca_sge sge[QHCA_LIMIT_MAX_SGE];
    unsigned i;

    if (!qhca_wq_read(s, qp, &qp->rq, qp->rq.ci, 0, &hdr, sizeof(hdr))) {
        qp->resp_wr_id = 0;
        qhca_resp_recv_fail(s, qp, psn, QHCA_WC_LOC_QP_OP_ERR,
                            QHCA_NAK_REM_OP, "receive ring unreachable");
        return false;
    }
    qp->resp_wr_id = le64_to_cpu(hdr.wr_id);
    qp->resp_num_sge = le32_to_cpu(hdr.num_sge);
    qp->resp_off = 0;
    if (qp->resp_num_sge > qp->max_sge || hdr.rsvd ||
        !qhca_wq_read(s, qp, &qp->rq, qp->rq.ci, sizeof(hdr), sge,
                      qp->resp_num_sge * sizeof(sge[0]))) {
        qhca_resp_recv_fail(s, qp, psn, QHCA_WC_LOC_QP_OP_ERR,
                            QHCA_NAK_REM_OP, "malformed receive WQE");
        return false;
    }
    for (i = 0; i < qp->resp_num_sge; i++) {
        qp->resp_sge[i].addr = le64_to_cpu(sge[i].addr);
        qp->resp_sge[i].length = le32_to_cpu(sge[i].length);
        qp->resp_sge[i].lkey = le32_to_cpu(sge[i].lkey);
    }
    qp->resp_have_rwqe = true;
    return true;
}

static bool qhca_op_is_send(uint8_t op)
{
    return op <= QHCA_OP_SEND_ONLY_IMM;
}

static bool qhca_op_is_write(uint8_t op)
{
    return op >= QHCA_OP_WRITE_FIRST && op <= QHCA_OP_WRITE_ONLY_IMM;
}

static bool qhca_op_starts(uint8_t op)
{
    return op == QHCA_OP_SEND_FIRST || op == QHCA_OP_SEND_ONLY ||
           op == QHCA_OP_SEND_ONLY_IMM || op == QHCA_OP_WRITE_FIRST ||
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
 * RDMA READ request (new or duplicate): check it, then answer from the
 * engine BH, a budget of response packets per turn (qhca_resp_read_step), so
 * that a large READ does not hold up the other QPs.  A new request replaces
 * one still being answered (the requester asked again).
 */
static void qhca_resp_read(QhcaState *s, QhcaQp *qp, const QhcaPkt *req,
                           bool dup)
{
    uint32_t n = MAX(1, DIV_ROUND_UP(req->dma_len, qhca_mtu(qp)));

    if (req->dma_len) {
        QhcaMr *mr = qhca_mr_check(s, req->rkey, qp->pdn, req->va,
                                   req->dma_len, QHCA_ACCESS_REMOTE_READ);

        if (!mr || !(qp->access & QHCA_ACCESS_REMOTE_READ)) {
            qhca_resp_fail(s, qp, req->psn, QHCA_NAK_REM_ACCESS,
                           "R_Key refused for RDMA READ");
            return;
        }
    }
    if (!dup) {
        qp->rq_psn = psn_add(req->psn, n);
    }
    qp->rd_active = true;
    qp->rd_va = req->va;
    qp->rd_rkey = req->rkey;
    qp->rd_len = req->dma_len;
    qp->rd_psn = req->psn;
    qp->rd_n = n;
    qp->rd_next = 0;
    qhca_engine_schedule(s, qp);
}

static void qhca_resp_read_step(QhcaState *s, QhcaQp *qp, unsigned *budget)
{
    uint32_t mtu = qhca_mtu(qp);
    QhcaPkt *pkt = g_new(QhcaPkt, 1);

    while (*budget && qp->rd_active) {
        uint32_t i = qp->rd_next;
        uint64_t off = (uint64_t)i * mtu;
        QhcaMr *mr;

        memset(pkt, 0, offsetof(QhcaPkt, payload));
        if (qp->rd_n == 1) {
            pkt->opcode = QHCA_OP_READ_RESP_ONLY;
        } else if (i == 0) {
            pkt->opcode = QHCA_OP_READ_RESP_FIRST;
        } else if (i == qp->rd_n - 1) {
            pkt->opcode = QHCA_OP_READ_RESP_LAST;
        } else {
            pkt->opcode = QHCA_OP_READ_RESP_MIDDLE;
        }
        pkt->psn = psn_add(qp->rd_psn, i);
        pkt->syndrome = QHCA_AETH_ACK;
        pkt->len = MIN(qp->rd_len - off, mtu);
        if (pkt->len) {
            /*
             * Again per packet: the MR may have gone since the request, or
             * MODIFY_QP taken the QP's right away.
             */
            mr = qhca_mr_check(s, qp->rd_rkey, qp->pdn, qp->rd_va + off,
                               pkt->len, QHCA_ACCESS_REMOTE_READ);
            if (!mr || !(qp->access & QHCA_ACCESS_REMOTE_READ)) {
                qhca_resp_fail(s, qp, pkt->psn, QHCA_NAK_REM_ACCESS,
                               "R_Key refused for RDMA READ");
                break;
            }
            if (!qhca_mr_rw(s, mr, qp->rd_va + off, pkt->payload, pkt->len,
                            false)) {
                qhca_resp_fail(s, qp, pkt->psn, QHCA_NAK_REM_OP,
                               "RDMA READ source unreachable");
                break;
            }
        }
        if (++qp->rd_next == qp->rd_n) {
            qp->rd_active = false;
        }
        (*budget)--;
        qhca_resp_send(s, qp, pkt);
    }
    g_free(pkt);
}

static void qhca_resp_atomic(QhcaState *s, QhcaQp *qp, const QhcaPkt *req)
{
    QhcaPkt *pkt;
    uint64_t val, orig;
    QhcaMr *mr;

    if (req->va & 7) {
        qhca_resp_fail(s, qp, req->psn, QHCA_NAK_INV_REQ,
                       "atomic address not 8-byte aligned");
        return;
    }
    mr = qhca_mr_check(s, req->rkey, qp->pdn, req->va, 8,
                       QHCA_ACCESS_REMOTE_ATOMIC);
    if (!mr || !(qp->access & QHCA_ACCESS_REMOTE_ATOMIC)) {
        qhca_resp_fail(s, qp, req->psn, QHCA_NAK_REM_ACCESS,
                       "R_Key refused for atomic");
        return;
    }
    if (!qhca_mr_rw(s, mr, req->va, &val, 8, false)) {
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
    if (!qhca_mr_rw(s, mr, req->va, &val, 8, true)) {
        qhca_resp_fail(s, qp, req->psn, QHCA_NAK_REM_OP,
                       "atomic target unreachable");
        return;
    }
    qp->atomic_valid = true;
    qp->atomic_psn = req->psn;
    qp->atomic_orig = orig;
    qp->rq_psn = psn_add(req->psn, 1);

    pkt = g_new0(QhcaPkt, 1);
    pkt->opcode = QHCA_OP_ATOMIC_ACK;
    pkt->psn = req->psn;
    pkt->syndrome = QHCA_AETH_ACK;
    pkt->orig = orig;
    qhca_resp_send(s, qp, pkt);
    g_free(pkt);
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
    if ((imm || (qhca_op_is_send(op) && starts)) && qp->rq.ci == qp->rq.pi) {
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
        st = qhca_sge_copy(s, qp->pdn, qp->resp_sge, qp->resp_num_sge,
                           qp->resp_off, (void *)pkt->payload, pkt->len, true);
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
        if (ends) {
            qhca_complete(s, qp, qp->rcqn, qp->rq.ci, qp->resp_wr_id,
                          QHCA_WC_RECV, QHCA_WC_SUCCESS, qp->resp_off, imm,
                          pkt->imm);
            qp->rq.ci++;
            qhca_resp_clear(qp);
        }
    } else {
        QhcaMr *mr = NULL;

        if (starts) {
            if (pkt->dma_len) {
                mr = qhca_mr_check(s, pkt->rkey, qp->pdn, pkt->va,
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
            mr = qhca_mr_check(s, qp->resp_rkey, qp->pdn, qp->resp_va,
                               pkt->len, QHCA_ACCESS_REMOTE_WRITE);
            if (!mr || !(qp->access & QHCA_ACCESS_REMOTE_WRITE)) {
                qhca_resp_fail(s, qp, pkt->psn, QHCA_NAK_REM_ACCESS,
                               "R_Key refused for RDMA WRITE");
                return;
            }
            if (!qhca_mr_rw(s, mr, qp->resp_va, (void *)pkt->payload,
                            pkt->len, true)) {
                qhca_resp_fail(s, qp, pkt->psn, QHCA_NAK_REM_OP,
                               "RDMA WRITE target unreachable");
                return;
            }
        }
        qp->resp_va += pkt->len;
        qp->resp_left -= pkt->len;
        if (imm) {
            if (!qhca_resp_take_rwqe(s, qp, pkt->psn)) {
                return;
            }
            qhca_complete(s, qp, qp->rcqn, qp->rq.ci, qp->resp_wr_id,
                          QHCA_WC_RECV_RDMA_WITH_IMM, QHCA_WC_SUCCESS,
                          qp->resp_total, true, pkt->imm);
            qp->rq.ci++;
        }
        qp->rq_psn = psn_add(pkt->psn, 1);
        if (ends) {
            qhca_resp_clear(qp);
        }
    }
    if (pkt->ack_req && qp->state != QHCA_QPS_ERR) {
        qhca_resp_ack(s, qp, pkt->psn, QHCA_AETH_ACK | 0x1f);
    }
}

static void qhca_resp_recv(QhcaState *s, QhcaQp *qp, const QhcaPkt *pkt)
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
            qhca_resp_read(s, qp, pkt, true);
        } else if (op == QHCA_OP_CMP_SWAP || op == QHCA_OP_FETCH_ADD) {
            if (qp->atomic_valid && qp->atomic_psn == pkt->psn) {
                QhcaPkt *ack = g_new0(QhcaPkt, 1);

                ack->opcode = QHCA_OP_ATOMIC_ACK;
                ack->psn = pkt->psn;
                ack->orig = qp->atomic_orig;
                qhca_resp_send(s, qp, ack);
                g_free(ack);
            }
        } else if (pkt->ack_req) {
            qhca_resp_ack(s, qp, psn_add(qp->rq_psn, QHCA_PSN_MASK),
                          QHCA_AETH_ACK | 0x1f);
        }
        return;
    }

    /* The expected PSN: does the opcode continue what is in progress? */
    qp->resp_nak_sent = false;
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
        qhca_resp_read(s, qp, pkt, false);
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

void qhca_rc_recv(QhcaState *s, const QhcaPkt *pkt)
{
    QhcaQp *qp = qhca_qp_lookup(s, pkt->dest_qpn);

    if (!qp) {
        trace_qhca_pkt_drop(pkt->dest_qpn, pkt->opcode, pkt->psn,
                            "no such QP");
        return;
    }
    /*
     * RC: requests and responses alike come only from the connected peer.
     * Anything else (another QP that names this one as its destination, a
     * stale generation of the peer's index) could fail the responder, forge
     * ACKs, READ responses or data: dropped, counted for the QP's owner.
     */
    if (pkt->src_qpn != qp->dest_qpn ||
        pkt->src_guid != qhca_qp_peer_guid(s, qp)) {
        s->ctx[qp->uar].pkt_foreign++;
        trace_qhca_pkt_foreign(qhca_qpn(s, qp), pkt->opcode, pkt->psn,
                               pkt->src_guid, pkt->src_qpn, qp->dest_qpn);
        qemu_log_mask(LOG_GUEST_ERROR, "qhca: QP 0x%x: packet from port 0x%"
                      PRIx64 " QP 0x%x dropped: its peer is QP 0x%x\n",
                      qhca_qpn(s, qp), pkt->src_guid, pkt->src_qpn,
                      qp->dest_qpn);
        return;
    }
    if (pkt->opcode >= QHCA_OP_READ_RESP_FIRST &&
        pkt->opcode <= QHCA_OP_ATOMIC_ACK) {
        qhca_req_recv(s, qp, pkt);
    } else if (pkt->opcode <= QHCA_OP_FETCH_ADD) {
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
                      false, 0);
        (*budget)--;
    }
    while (*budget && qp->rq.ci != qp->rq.pi) {
        struct qhca_rwqe rwqe;

        qhca_flush_read(s, qp, &qp->rq, &rwqe, sizeof(rwqe));
        qp->rq.ci++;
        qhca_complete(s, qp, qp->rcqn, qp->rq.ci - 1, le64_to_cpu(rwqe.wr_id),
                      QHCA_WC_RECV, QHCA_WC_WR_FLUSH_ERR, 0, false, 0);
        (*budget)--;
    }
    return qp->sq.ci != qp->sq.pi || qp->rq.ci != qp->rq.pi;
}

/* One turn of one QP; true if it has more work right now. */
static bool qhca_qp_run(QhcaState *s, QhcaQp *qp)
{
    unsigned budget = QHCA_QP_BUDGET;

    if (qp->req_timer_fired) {
        qp->req_timer_fired = false;
        if (qp->state == QHCA_QPS_RTS) {
            qhca_req_timeout(s, qp);
        }
    }
    if (qp->state == QHCA_QPS_ERR) {
        return qhca_qp_flush(s, qp, &budget);
    }
    if (qp->rd_active &&
        (qp->state == QHCA_QPS_RTR || qp->state == QHCA_QPS_RTS)) {
        qhca_resp_read_step(s, qp, &budget);
        if (qp->rd_active) {
            return true;
        }
    }
    if (qp->state != QHCA_QPS_RTS) {
        return false;
    }
    while (budget && qp->state == QHCA_QPS_RTS) {
        if (qp->req_wait) {
            return false;
        }
        if (qp->req_active) {
            if (qp->req_sent) {
                return false;
            }
            qhca_req_send_one(s, qp);
            budget--;
            continue;
        }
        if (qp->sq.ci == qp->sq.pi) {
            return false;
        }
        qhca_req_start(s, qp);
        budget--;
    }
    return qp->state == QHCA_QPS_ERR || qp->req_active ||
           qp->sq.ci != qp->sq.pi;
}

/*
 * Up to @turns QP turns, round-robin; the bottom half takes what is left.
 * A busy section: see qhca_busy_enter().
 */
static void qhca_engine_run(QhcaState *s, unsigned turns, bool poll_wire)
{
    QhcaQp *qp;
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
        if (qhca_qp_run(s, qp)) {
            qhca_engine_schedule(s, qp);
        }
    }
    if (!QTAILQ_EMPTY(&s->run_list) ||
        (s->wire->ops->pending && s->wire->ops->pending(s->wire))) {
        qemu_bh_schedule(s->engine_bh);
    }
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
