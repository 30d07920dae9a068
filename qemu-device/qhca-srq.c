/*
 * qhca: an emulated RDMA host channel adapter -- receive WQEs
 *
 * Where a QP's receive WQEs come from: its own receive queue, or the shared
 * receive queue (IBA 10.2.9) it was created on; and the SRQ object with its
 * commands.  Every receiver (the RC responder, UD, the Ethernet QP) takes a
 * WQE with qhca_recv_take() into qp->recv and says qhca_recv_done() once it
 * completed, whatever the status.
 *
 * A receive queue keeps a taken WQE in its ring until it completes (its
 * consumer index moves then), so a message that must be taken again (a
 * page fault, a dropped datagram) reads it again.  An SRQ lets go of a WQE
 * as it is taken: the device copies it, moves the SRQ's consumer index and
 * tells the owner (struct qhca_srq_dbrec), and the QP holds the copy
 * (recv_held) until its message completes; a retry or the next datagram
 * uses the held copy.  A QP in ERR flushes what it holds and then says
 * QHCA_EQE_QP_LAST_WQE once (qhca_recv_flush()).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/bswap.h"
#include "qhca.h"
#include "qhca-rc.h"
#include "trace.h"

#define QHCA_SRQ_SLOT_MASK  (QHCA_LIMIT_MAX_SRQ - 1)
#define QHCA_SRQ_GEN_MASK   ((1u << (24 - QHCA_SRQ_INDEX_BITS)) - 1)

QEMU_BUILD_BUG_ON(QHCA_LIMIT_MAX_QP_WR != 1u << QHCA_WQ_MAX_LOG);

/* ------------------------------------------------------------------------ */
/* the SRQ object                                                           */

QhcaSrq *qhca_srq_lookup(QhcaState *s, uint64_t srqn)
{
    QhcaSrq *srq = &s->srq[srqn & QHCA_SRQ_SLOT_MASK];

    return srqn && srqn <= QHCA_DB_QN_MASK && srq->in_use &&
           srq->index == srqn ? srq : NULL;
}

/* Bytes of the SRQ's slots: its record follows them. */
static uint64_t qhca_srq_ring_bytes(const QhcaSrq *srq)
{
    return 1ull << (srq->wq.log + srq->wq.stride_log);
}

static uint8_t qhca_cmd_create_srq(QhcaState *s, const struct qhca_cmd *cmd,
                                   uint64_t *data, QhcaPageList *pl)
{
    struct qhca_cmd_create_srq in;
    uint32_t uar, pdn, npages, n, gen;
    uint16_t max_sge;
    uint64_t bytes;
    QhcaSrq *srq = NULL;
    QhcaPd *pd;

    if (!qhca_cmd_unused_zero(cmd, false, 5)) {
        return QHCA_CMD_BAD_PARAM;
    }
    qhca_cmd_in_bytes(cmd, &in, sizeof(in));
    uar = le32_to_cpu(in.uar);
    pdn = le32_to_cpu(in.pdn);
    max_sge = le16_to_cpu(in.max_sge);
    npages = le32_to_cpu(in.npages);
    if (in.rsvd[0] || in.rsvd[1]) {
        return QHCA_CMD_BAD_PARAM;
    }
    if (!qhca_uar_valid(s, uar)) {
        return QHCA_CMD_BAD_RESOURCE;
    }
    pd = qhca_pd_lookup(s, pdn);
    if (!pd || pd->uar != uar) {
        return QHCA_CMD_BAD_RESOURCE;
    }
    if (in.log > QHCA_WQ_MAX_LOG ||
        in.stride_log < QHCA_RQ_MIN_STRIDE_LOG ||
        in.stride_log > QHCA_RQ_MAX_STRIDE_LOG ||
        max_sge > QHCA_LIMIT_MAX_SGE ||
        sizeof(struct qhca_rwqe) + max_sge * sizeof(struct qhca_sge) >
            1u << in.stride_log) {
        return QHCA_CMD_BAD_PARAM;
    }
    bytes = (1ull << (in.log + in.stride_log)) + sizeof(struct qhca_srq_dbrec);
    if (npages != DIV_ROUND_UP(bytes, QHCA_PAGE_SIZE)) {
        return QHCA_CMD_BAD_PARAM;
    }
    /* Round-robin, so that a slot comes back as late as possible. */
    for (n = 0; n < QHCA_LIMIT_MAX_SRQ; n++) {
        QhcaSrq *c = &s->srq[(s->srq_next + n) & QHCA_SRQ_SLOT_MASK];

        if (!c->in_use) {
            srq = c;
            break;
        }
    }
    if (!srq) {
        return QHCA_CMD_NO_RESOURCES;
    }
    if (!pl->pages) {
        return qhca_pl_request(s, pl, le64_to_cpu(in.pages_addr), npages);
    }
    /* Generation 0 is never used: no SRQ number is 0 (no SRQ, in_ext). */
    gen = ((srq->index >> QHCA_SRQ_INDEX_BITS) + 1) & QHCA_SRQ_GEN_MASK;
    *srq = (QhcaSrq) {
        .in_use = true,
        .index = (gen ? gen : 1) << QHCA_SRQ_INDEX_BITS | (srq - s->srq),
        .uar = uar,
        .pdn = pdn,
        .max_sge = max_sge,
        .wq = { .log = in.log, .stride_log = in.stride_log },
        .npages = npages,
        .pages = qhca_pl_take(pl),
    };
    s->srq_next = (srq - s->srq + 1) & QHCA_SRQ_SLOT_MASK;
    pd->nr_srq++;
    s->num_srq++;
    data[0] = srq->index;
    trace_qhca_obj("srq", "create", uar, srq->index);
    return QHCA_CMD_OK;
}

static void qhca_srq_free(QhcaState *s, QhcaSrq *srq)
{
    trace_qhca_obj("srq", "destroy", srq->uar, srq->index);
    s->pd[srq->pdn].nr_srq--;
    qhca_page_list_free(s, &srq->pages, &srq->npages);
    srq->in_use = false;
    s->num_srq--;
}

/* The SRQ in[1] names, if the context in[0] owns it. */
static QhcaSrq *qhca_cmd_srq_of(QhcaState *s, const struct qhca_cmd *cmd)
{
    QhcaSrq *srq = qhca_srq_lookup(s, cmd->in[1]);

    if (!srq || srq->uar != cmd->in[0] || !qhca_uar_valid(s, cmd->in[0])) {
        return NULL;
    }
    return srq;
}

uint8_t qhca_cmd_srq(QhcaState *s, const struct qhca_cmd *cmd, uint64_t *data,
                     QhcaPageList *pl)
{
    QhcaSrq *srq;

    if (cmd->opcode == QHCA_CMD_CREATE_SRQ) {
        return qhca_cmd_create_srq(s, cmd, data, pl);
    }
    if (!qhca_cmd_unused_zero(cmd, false,
                              cmd->opcode == QHCA_CMD_MODIFY_SRQ ? 3 : 2)) {
        return QHCA_CMD_BAD_PARAM;
    }
    srq = qhca_cmd_srq_of(s, cmd);
    if (!srq) {
        return QHCA_CMD_BAD_RESOURCE;
    }
    switch (cmd->opcode) {
    case QHCA_CMD_MODIFY_SRQ:
        /* The verbs' srq_limit: at most max_wr. */
        if (cmd->in[2] > 1u << srq->wq.log) {
            return QHCA_CMD_BAD_PARAM;
        }
        srq->limit = cmd->in[2];
        trace_qhca_srq_limit(srq->index, srq->limit);
        return QHCA_CMD_OK;
    case QHCA_CMD_QUERY_SRQ:
        data[0] = srq->limit;
        data[1] = (uint16_t)(srq->wq.pi - srq->wq.ci);
        return QHCA_CMD_OK;
    case QHCA_CMD_DESTROY_SRQ:
        if (srq->nr_qp) {
            return QHCA_CMD_BAD_STATE;
        }
        qhca_srq_free(s, srq);
        return QHCA_CMD_OK;
    default:
        return QHCA_CMD_BAD_OPCODE;
    }
}

/* FREE_UAR: the context's SRQs, after its QPs. */
void qhca_srq_free_ctx(QhcaState *s, uint32_t uar)
{
    uint32_t i;

    for (i = 0; i < QHCA_LIMIT_MAX_SRQ; i++) {
        if (s->srq[i].in_use && s->srq[i].uar == uar) {
            assert(!s->srq[i].nr_qp);
            qhca_srq_free(s, &s->srq[i]);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* taking receive WQEs                                                      */

/*
 * The receive WQE at byte off of pages, into r (wr_id 0 if even its header
 * is unreachable); false if the device cannot use it, *why saying why.
 */
static bool qhca_rwqe_parse(QhcaState *s, const uint64_t *pages,
                            uint32_t npages, uint64_t off, uint16_t max_sge,
                            QhcaRecv *r, const char **why)
{
    struct qhca_rwqe hdr;
    unsigned i;

    r->wr_id = 0;
    r->num_sge = 0;
    if (!qhca_pl_rw(s, pages, npages, off, &hdr, sizeof(hdr), false)) {
        *why = "receive ring unreachable";
        return false;
    }
    r->wr_id = le64_to_cpu(hdr.wr_id);
    r->num_sge = le32_to_cpu(hdr.num_sge);
    if (r->num_sge > max_sge || hdr.rsvd ||
        !qhca_pl_rw(s, pages, npages, off + sizeof(hdr), r->sge,
                    r->num_sge * sizeof(r->sge[0]), false)) {
        r->num_sge = 0;
        *why = "malformed receive WQE";
        return false;
    }
    for (i = 0; i < r->num_sge; i++) {
        r->sge[i].addr = le64_to_cpu(r->sge[i].addr);
        r->sge[i].length = le32_to_cpu(r->sge[i].length);
        r->sge[i].lkey = le32_to_cpu(r->sge[i].lkey);
    }
    return true;
}

static uint64_t qhca_wq_slot_off(const QhcaWq *wq, uint16_t idx)
{
    return wq->offset +
           ((uint64_t)(idx & ((1u << wq->log) - 1)) << wq->stride_log);
}

/* Is there a receive WQE for qp (posted, or held from an SRQ already)? */
bool qhca_recv_posted(const QhcaQp *qp)
{
    if (qp->srq) {
        return qp->recv_held || qp->srq->wq.ci != qp->srq->wq.pi;
    }
    return qp->rq.ci != qp->rq.pi;
}

/* An SRQ gave up a WQE: its record says so, its limit may fire. */
static void qhca_srq_taken(QhcaState *s, QhcaSrq *srq, QhcaQp *qp)
{
    uint32_t ci = cpu_to_le32(srq->wq.ci);

    trace_qhca_srq_take(srq->index, qhca_qpn(s, qp), srq->wq.ci - 1);
    if (!qhca_pl_rw(s, srq->pages, srq->npages, qhca_srq_ring_bytes(srq),
                    &ci, sizeof(ci), true)) {
        QHCA_GUEST_ERR(s, qhca_err_wqe, "QP %u WQE %u: %s", qhca_qpn(s, qp),
                       srq->wq.ci - 1, "SRQ record unreachable");
    }
    if (srq->limit && (uint16_t)(srq->wq.pi - srq->wq.ci) < srq->limit) {
        srq->limit = 0;
        qhca_eq_event(s, QHCA_EQE_SRQ_LIMIT, srq->index, srq->uar);
    }
}

/*
 * Takes the next receive WQE (qhca_recv_posted() said there is one) into
 * qp->recv.  false if the device cannot use it, *why saying why: the caller
 * completes it with an error (wr_id as far as it could be read) and the QP
 * goes to ERR.  Either way qhca_recv_done() follows its completion.
 */
bool qhca_recv_take(QhcaState *s, QhcaQp *qp, const char **why)
{
    QhcaSrq *srq = qp->srq;
    bool ok;

    if (!srq) {
        qp->recv.index = qp->rq.ci;
        qp->recv.pdn = qp->pdn;
        return qhca_rwqe_parse(s, qp->pages, qp->npages,
                               qhca_wq_slot_off(&qp->rq, qp->rq.ci),
                               qp->max_sge, &qp->recv, why);
    }
    if (qp->recv_held) {
        /* Taken before for this message, or for a datagram dropped. */
        return true;
    }
    qp->recv.index = srq->wq.ci;
    qp->recv.pdn = srq->pdn;
    ok = qhca_rwqe_parse(s, srq->pages, srq->npages,
                         qhca_wq_slot_off(&srq->wq, srq->wq.ci),
                         srq->max_sge, &qp->recv, why);
    srq->wq.ci++;
    qp->recv_held = true;
    qhca_srq_taken(s, srq, qp);
    return ok;
}

/* The WQE qhca_recv_take() took has completed, whatever its status. */
void qhca_recv_done(QhcaQp *qp)
{
    if (qp->srq) {
        qp->recv_held = false;
    } else {
        qp->rq.ci++;
    }
}

/*
 * ERR, a QP of an SRQ: the WQE it holds completes with WR_FLUSH_ERR, then
 * QHCA_EQE_QP_LAST_WQE says no more will; the SRQ keeps the rest.  Spends
 * *budget per CQE.
 */
void qhca_recv_flush(QhcaState *s, QhcaQp *qp, unsigned *budget)
{
    if (qp->recv_held && *budget) {
        qhca_recv_done(qp);
        qhca_complete(s, qp, qp->rcqn, qp->recv.index, qp->recv.wr_id,
                      QHCA_WC_RECV, QHCA_WC_WR_FLUSH_ERR, 0, 0, 0);
        (*budget)--;
    }
    if (!qp->recv_held && !qp->last_wqe) {
        qp->last_wqe = true;
        qhca_eq_event(s, QHCA_EQE_QP_LAST_WQE, qhca_qpn(s, qp), qp->uar);
    }
}
