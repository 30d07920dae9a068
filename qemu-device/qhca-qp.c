/*
 * qhca: an emulated RDMA host channel adapter -- queue pairs
 *
 * CREATE_QP, MODIFY_QP (the state machine of the IB spec's QP states, with
 * the attributes each transition requires and allows), QUERY_QP and
 * DESTROY_QP; and reading work queue entries from the rings (a slot, a
 * receive WQE, a send WQE's data), which the RC and UD engines share.  The
 * rest of the verbs objects, and what this file shares with them (lookups,
 * page lists, command helpers), are in qhca-obj.c.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/bswap.h"
#include "qhca.h"
#include "qhca-rc.h"
#include "trace.h"

#define QHCA_WQ_LIMIT_LOG 15    /* QHCA_LIMIT_MAX_QP_WR */

QEMU_BUILD_BUG_ON(QHCA_LIMIT_MAX_QP_WR != 1u << QHCA_WQ_LIMIT_LOG);
QEMU_BUILD_BUG_ON(QHCA_WQ_LIMIT_LOG > QHCA_WQ_MAX_LOG);

/* True if a live RC QP takes packets from qpn as its connected peer. */
static bool qhca_qpn_is_peer(QhcaState *s, uint32_t qpn)
{
    uint32_t i;

    for (i = 0; i < QHCA_LIMIT_MAX_QP; i++) {
        const QhcaQp *q = &s->qp[i];

        if (q->in_use && q->type == QHCA_QPT_RC && q->dest_qpn == qpn &&
            (q->state == QHCA_QPS_RTR || q->state == QHCA_QPS_RTS)) {
            return true;
        }
    }
    return false;
}

/*
 * The number for a new QP in slot qp: its next generation (0 skipped, so no
 * QPN is 0 or QHCA_GSI_QPN), passing over generations that a live RC QP
 * still names as its peer: a QP whose peer was destroyed keeps accepting
 * the peer's QPN until it leaves RTR/RTS, so that number must not come back
 * meanwhile.  At most QHCA_LIMIT_MAX_QP - 1 numbers can be named, fewer
 * than the generations.
 */
static uint32_t qhca_qpn_next(QhcaState *s, const QhcaQp *qp)
{
    uint32_t gen = qp->slot_qpn >> QHCA_QPN_INDEX_BITS, qpn;

    do {
        gen = (gen + 1) & QHCA_QPN_GEN_MASK;
        qpn = MAX(gen, 1) << QHCA_QPN_INDEX_BITS | (uint32_t)(qp - s->qp);
    } while (qhca_qpn_is_peer(s, qpn));
    return qpn;
}

/*
 * A QP of type QHCA_QPT_GSI is the port's QP1, the driver's (a kernel
 * context's only): a UD QP in every way (its type is QHCA_QPT_UD here) but
 * for its number, QHCA_GSI_QPN.  One at a time; it holds a slot as any QP
 * does, without using up one of its generations.  A QP of type
 * QHCA_QPT_ETH is the port's Ethernet QP (qhca-eth.c), also a kernel
 * context's and one at a time, and only on a port with a netdev; its number
 * is an ordinary one, which no packet reaches (qhca_rc_recv() and
 * qhca_ud_recv() take RC and UD QPs only).
 */
uint8_t qhca_cmd_create_qp(QhcaState *s, const struct qhca_cmd *cmd,
                           uint64_t *data, QhcaPageList *pl)
{
    struct qhca_cmd_create_qp in;
    uint32_t uar, pdn, scqn, rcqn, npages, n, type, slot_qpn;
    uint16_t max_inline, max_sge;
    uint64_t sq_bytes, rq_off, rq_bytes;
    QhcaPd *pd;
    QhcaCq *scq, *rcq;
    QhcaSrq *srq = NULL;
    QhcaQp *qp = NULL;

    if (!qhca_cmd_unused_zero(cmd, false, 5)) {
        return QHCA_CMD_BAD_PARAM;
    }
    qhca_cmd_in_bytes(cmd, &in, sizeof(in));
    uar = le32_to_cpu(in.uar);
    pdn = le32_to_cpu(in.pdn);
    scqn = le32_to_cpu(in.send_cqn);
    rcqn = le32_to_cpu(in.recv_cqn);
    max_inline = le16_to_cpu(in.max_inline);
    max_sge = le16_to_cpu(in.max_sge);
    npages = le32_to_cpu(in.npages);
    type = le32_to_cpu(in.type);
    if (type != QHCA_QPT_RC && type != QHCA_QPT_UD && type != QHCA_QPT_GSI &&
        (type != QHCA_QPT_ETH || !s->nic)) {
        return QHCA_CMD_BAD_PARAM;
    }
    if (!qhca_uar_valid(s, uar)) {
        return QHCA_CMD_BAD_RESOURCE;
    }
    if ((type == QHCA_QPT_GSI || type == QHCA_QPT_ETH) &&
        !qhca_uar_kernel(s, uar)) {
        return QHCA_CMD_BAD_PARAM;
    }
    pd = qhca_pd_lookup(s, pdn);
    scq = qhca_cq_lookup(s, scqn);
    rcq = qhca_cq_lookup(s, rcqn);
    if (!pd || pd->uar != uar || !scq || scq->uar != uar ||
        !rcq || rcq->uar != uar) {
        return QHCA_CMD_BAD_RESOURCE;
    }
    if (cmd->in_ext) {
        /* An SRQ of its context, for an RC or UD QP with no receive queue. */
        if ((type != QHCA_QPT_RC && type != QHCA_QPT_UD) ||
            in.rq_log || in.rq_stride_log) {
            return QHCA_CMD_BAD_PARAM;
        }
        srq = qhca_srq_lookup(s, cmd->in_ext);
        if (!srq || srq->uar != uar) {
            return QHCA_CMD_BAD_RESOURCE;
        }
    } else if (in.rq_log > QHCA_WQ_LIMIT_LOG ||
               in.rq_stride_log < QHCA_RQ_MIN_STRIDE_LOG ||
               in.rq_stride_log > QHCA_RQ_MAX_STRIDE_LOG ||
               sizeof(struct qhca_rwqe) + max_sge * sizeof(struct qhca_sge) >
                   1u << in.rq_stride_log) {
        return QHCA_CMD_BAD_PARAM;
    }
    if (in.sq_log > QHCA_WQ_LIMIT_LOG ||
        in.sq_stride_log < QHCA_SQ_MIN_STRIDE_LOG ||
        in.sq_stride_log > QHCA_SQ_MAX_STRIDE_LOG ||
        max_sge > QHCA_LIMIT_MAX_SGE || max_inline > QHCA_LIMIT_MAX_INLINE ||
        QHCA_WQE_DATA_OFFSET + max_sge * sizeof(struct qhca_sge) >
            1u << in.sq_stride_log ||
        QHCA_WQE_DATA_OFFSET + max_inline > 1u << in.sq_stride_log) {
        return QHCA_CMD_BAD_PARAM;
    }
    sq_bytes = 1ull << (in.sq_log + in.sq_stride_log);
    rq_off = ROUND_UP(sq_bytes, QHCA_PAGE_SIZE);
    rq_bytes = srq ? 0 : 1ull << (in.rq_log + in.rq_stride_log);
    if (npages != DIV_ROUND_UP(rq_off + rq_bytes, QHCA_PAGE_SIZE)) {
        return QHCA_CMD_BAD_PARAM;
    }
    if ((type == QHCA_QPT_GSI && s->gsi_qp) ||
        (type == QHCA_QPT_ETH && s->eth_qp)) {
        return QHCA_CMD_NO_RESOURCES;
    }
    /* Round-robin, so that a QPN's index comes back as late as possible. */
    for (n = 0; n < QHCA_LIMIT_MAX_QP; n++) {
        if (!s->qp[(s->qp_next + n) % QHCA_LIMIT_MAX_QP].in_use) {
            qp = &s->qp[(s->qp_next + n) % QHCA_LIMIT_MAX_QP];
            break;
        }
    }
    if (!qp) {
        return QHCA_CMD_NO_RESOURCES;
    }
    if (!pl->pages) {
        return qhca_pl_request(s, pl, le64_to_cpu(in.pages_addr), npages);
    }
    slot_qpn = type == QHCA_QPT_GSI ? qp->slot_qpn : qhca_qpn_next(s, qp);
    memset(qp, 0, sizeof(*qp));
    qp->in_use = true;
    qp->slot_qpn = slot_qpn;
    qp->qpn = type == QHCA_QPT_GSI ? QHCA_GSI_QPN : slot_qpn;
    s->qp_next = (qp - s->qp + 1) % QHCA_LIMIT_MAX_QP;
    qp->uar = uar;
    qp->pdn = pdn;
    qp->scqn = scqn;
    qp->rcqn = rcqn;
    qp->type = type == QHCA_QPT_GSI ? QHCA_QPT_UD : type;
    if (type == QHCA_QPT_GSI) {
        s->gsi_qp = qp;
    } else if (type == QHCA_QPT_ETH) {
        s->eth_qp = qp;
    }
    qp->max_inline = max_inline;
    qp->max_sge = max_sge;
    qp->sq = (QhcaWq) { .log = in.sq_log, .stride_log = in.sq_stride_log };
    qp->rq = (QhcaWq) {
        .log = in.rq_log, .stride_log = in.rq_stride_log, .offset = rq_off,
    };
    qp->srq = srq;
    qp->npages = npages;
    qp->pages = qhca_pl_take(pl);
    qp->state = QHCA_QPS_RESET;
    qp->path_mtu = 10;
    qp->timeout = 14;
    qp->retry_cnt = 7;
    qp->rnr_retry = 7;
    qp->max_rd_atomic = QHCA_LIMIT_MAX_RD_ATOMIC;
    qp->max_dest_rd_atomic = QHCA_LIMIT_MAX_RD_ATOMIC;
    qhca_av_default(s, &qp->av);
    qhca_engine_qp_reset(s, qp);
    pd->nr_qp++;
    scq->nr_qp++;
    rcq->nr_qp++;
    if (srq) {
        srq->nr_qp++;
    }
    s->num_qp++;
    data[0] = qp->qpn;
    trace_qhca_obj(type == QHCA_QPT_GSI ? "gsi qp" :
                   type == QHCA_QPT_ETH ? "eth qp" :
                   type == QHCA_QPT_UD ? "ud qp" : "qp", "create", uar,
                   qp->qpn);
    return QHCA_CMD_OK;
}

void qhca_qp_free(QhcaState *s, QhcaQp *qp)
{
    trace_qhca_obj("qp", "destroy", qp->uar, qp->qpn);
    qhca_engine_qp_destroy(s, qp);
    qhca_mw_unbind_qp(s, qp->qpn);
    s->pd[qp->pdn].nr_qp--;
    s->cq[qp->scqn].nr_qp--;
    s->cq[qp->rcqn].nr_qp--;
    if (qp->srq) {
        qp->srq->nr_qp--;
    }
    qhca_page_list_free(s, &qp->pages, &qp->npages);
    qp->in_use = false;
    if (qp == s->gsi_qp) {
        /* QHCA_GSI_QPN names nothing until the next GSI QP. */
        s->gsi_qp = NULL;
    }
    if (qp == s->eth_qp) {
        /* The port answers for its addresses again. */
        s->eth_qp = NULL;
    }
    s->num_qp--;
}

static QhcaQp *qhca_cmd_qp(QhcaState *s, const struct qhca_cmd *cmd)
{
    QhcaQp *qp = cmd->in[1] <= UINT32_MAX ? qhca_qp_lookup(s, cmd->in[1])
                                          : NULL;

    if (!qp || qp->uar != cmd->in[0] || !qhca_uar_valid(s, cmd->in[0])) {
        return NULL;
    }
    return qp;
}

uint8_t qhca_cmd_destroy_qp(QhcaState *s, const struct qhca_cmd *cmd)
{
    QhcaQp *qp;

    if (!qhca_cmd_unused_zero(cmd, false, 2)) {
        return QHCA_CMD_BAD_PARAM;
    }
    qp = qhca_cmd_qp(s, cmd);
    if (!qp) {
        return QHCA_CMD_BAD_RESOURCE;
    }
    qhca_qp_free(s, qp);
    return QHCA_CMD_OK;
}

/*
 * The QP state machine: for each (current, next) transition, the attributes
 * it requires and the ones it also accepts (IBA 11.2.4.2, reduced to what
 * qhca_qp_attr carries), for RC, UD and Ethernet QPs.  Without
 * QHCA_QP_ATTR_STATE a modify is the transition from the current state to
 * itself.
 */
typedef struct QhcaQpTrans {
    uint32_t required;
    uint32_t optional;
} QhcaQpTrans;

#define QHCA_QPS_NR (QHCA_QPS_ERR + 1)

static const QhcaQpTrans *qhca_qp_trans(uint8_t type, uint8_t cur,
                                        uint8_t next)
{
    static const QhcaQpTrans any_to_reset_or_err = { 0, 0 };
    static const QhcaQpTrans ud[QHCA_QPS_NR][QHCA_QPS_NR] = {
        [QHCA_QPS_RESET][QHCA_QPS_INIT] = { .required = QHCA_QP_ATTR_QKEY },
        [QHCA_QPS_INIT][QHCA_QPS_INIT] = { .optional = QHCA_QP_ATTR_QKEY },
        [QHCA_QPS_INIT][QHCA_QPS_RTR] = { .optional = QHCA_QP_ATTR_QKEY },
        [QHCA_QPS_RTR][QHCA_QPS_RTR] = { .optional = QHCA_QP_ATTR_QKEY },
        [QHCA_QPS_RTR][QHCA_QPS_RTS] = {
            .required = QHCA_QP_ATTR_SQ_PSN,
            .optional = QHCA_QP_ATTR_QKEY,
        },
        [QHCA_QPS_RTS][QHCA_QPS_RTS] = { .optional = QHCA_QP_ATTR_QKEY },
    };
    /*
     * UD's transitions without attributes: QHCA_QP_ATTR_STATE, which every
     * mask may have, only marks the valid ones.
     */
    static const QhcaQpTrans eth[QHCA_QPS_NR][QHCA_QPS_NR] = {
        [QHCA_QPS_RESET][QHCA_QPS_INIT] = { .optional = QHCA_QP_ATTR_STATE },
        [QHCA_QPS_INIT][QHCA_QPS_INIT] = { .optional = QHCA_QP_ATTR_STATE },
        [QHCA_QPS_INIT][QHCA_QPS_RTR] = { .optional = QHCA_QP_ATTR_STATE },
        [QHCA_QPS_RTR][QHCA_QPS_RTR] = { .optional = QHCA_QP_ATTR_STATE },
        [QHCA_QPS_RTR][QHCA_QPS_RTS] = { .optional = QHCA_QP_ATTR_STATE },
        [QHCA_QPS_RTS][QHCA_QPS_RTS] = { .optional = QHCA_QP_ATTR_STATE },
    };
    static const QhcaQpTrans rc[QHCA_QPS_NR][QHCA_QPS_NR] = {
        [QHCA_QPS_RESET][QHCA_QPS_INIT] = {
            .optional = QHCA_QP_ATTR_ACCESS,
        },
        [QHCA_QPS_INIT][QHCA_QPS_INIT] = {
            .optional = QHCA_QP_ATTR_ACCESS,
        },
        [QHCA_QPS_INIT][QHCA_QPS_RTR] = {
            .required = QHCA_QP_ATTR_DEST_QPN | QHCA_QP_ATTR_RQ_PSN |
                        QHCA_QP_ATTR_PATH_MTU,
            .optional = QHCA_QP_ATTR_ACCESS | QHCA_QP_ATTR_MIN_RNR_TIMER |
                        QHCA_QP_ATTR_MAX_DEST_RD_ATOMIC | QHCA_QP_ATTR_AV,
        },
        [QHCA_QPS_RTR][QHCA_QPS_RTR] = {
            .optional = QHCA_QP_ATTR_ACCESS | QHCA_QP_ATTR_MIN_RNR_TIMER |
                        QHCA_QP_ATTR_MAX_DEST_RD_ATOMIC,
        },
        [QHCA_QPS_RTR][QHCA_QPS_RTS] = {
            .required = QHCA_QP_ATTR_SQ_PSN | QHCA_QP_ATTR_TIMEOUT |
                        QHCA_QP_ATTR_RETRY_CNT | QHCA_QP_ATTR_RNR_RETRY,
            .optional = QHCA_QP_ATTR_ACCESS | QHCA_QP_ATTR_MIN_RNR_TIMER |
                        QHCA_QP_ATTR_MAX_RD_ATOMIC,
        },
        [QHCA_QPS_RTS][QHCA_QPS_RTS] = {
            .optional = QHCA_QP_ATTR_ACCESS | QHCA_QP_ATTR_MIN_RNR_TIMER |
                        QHCA_QP_ATTR_MAX_RD_ATOMIC,
        },
    };
    const QhcaQpTrans *t;

    if (next == QHCA_QPS_RESET || next == QHCA_QPS_ERR) {
        return &any_to_reset_or_err;
    }
    if (cur >= QHCA_QPS_NR || next >= QHCA_QPS_NR) {
        return NULL;
    }
    t = type == QHCA_QPT_UD ? &ud[cur][next] :
        type == QHCA_QPT_ETH ? &eth[cur][next] : &rc[cur][next];
    /* Every valid transition has a non-zero entry (RC RESET->INIT above). */
    if (!t->required && !t->optional) {
        return NULL;
    }
    return t;
}

static bool qhca_qp_state_valid(uint8_t st)
{
    return st == QHCA_QPS_RESET || st == QHCA_QPS_INIT ||
           st == QHCA_QPS_RTR || st == QHCA_QPS_RTS || st == QHCA_QPS_ERR;
}

uint8_t qhca_cmd_modify_qp(QhcaState *s, const struct qhca_cmd *cmd)
{
    struct qhca_qp_attr a;
    static const struct qhca_ah_attr no_av;
    const QhcaQpTrans *t;
    uint32_t mask, access, dest_qpn, rq_psn, sq_psn, qkey;
    uint8_t next, st;
    QhcaAv av;
    QhcaQp *qp;

    if (!qhca_cmd_unused_zero(cmd, false, 3)) {
        return QHCA_CMD_BAD_PARAM;
    }
    qp = qhca_cmd_qp(s, cmd);
    if (!qp) {
        return QHCA_CMD_BAD_RESOURCE;
    }
    if (!cmd->in[2] || cmd->in[2] + sizeof(a) - 1 < cmd->in[2]) {
        return QHCA_CMD_BAD_PARAM;
    }
    if (qhca_dma_read(s, cmd->in[2], &a, sizeof(a)) != MEMTX_OK) {
        return QHCA_CMD_DMA_ERROR;
    }
    mask = le32_to_cpu(a.mask);
    access = le32_to_cpu(a.access);
    dest_qpn = le32_to_cpu(a.dest_qpn);
    rq_psn = le32_to_cpu(a.rq_psn);
    sq_psn = le32_to_cpu(a.sq_psn);
    qkey = le32_to_cpu(a.qkey);
    if (!mask || (mask & ~QHCA_QP_ATTR_ALL)) {
        return QHCA_CMD_BAD_PARAM;
    }
    /* Fields the mask does not name must be zero, like reserved ones. */
    if ((!(mask & QHCA_QP_ATTR_STATE) && a.state) ||
        (!(mask & QHCA_QP_ATTR_PATH_MTU) && a.path_mtu) ||
        (!(mask & QHCA_QP_ATTR_TIMEOUT) && a.timeout) ||
        (!(mask & QHCA_QP_ATTR_RETRY_CNT) && a.retry_cnt) ||
        (!(mask & QHCA_QP_ATTR_RNR_RETRY) && a.rnr_retry) ||
        (!(mask & QHCA_QP_ATTR_MIN_RNR_TIMER) && a.min_rnr_timer) ||
        (!(mask & QHCA_QP_ATTR_MAX_RD_ATOMIC) && a.max_rd_atomic) ||
        (!(mask & QHCA_QP_ATTR_MAX_DEST_RD_ATOMIC) &&
         a.max_dest_rd_atomic) ||
        (!(mask & QHCA_QP_ATTR_ACCESS) && access) ||
        (!(mask & QHCA_QP_ATTR_DEST_QPN) && dest_qpn) ||
        (!(mask & QHCA_QP_ATTR_RQ_PSN) && rq_psn) ||
        (!(mask & QHCA_QP_ATTR_SQ_PSN) && sq_psn) ||
        (!(mask & QHCA_QP_ATTR_QKEY) && qkey) ||
        (!(mask & QHCA_QP_ATTR_AV) && memcmp(&a.av, &no_av, sizeof(no_av)))) {
        return QHCA_CMD_BAD_PARAM;
    }
    /* Values. */
    if ((mask & QHCA_QP_ATTR_STATE) && !qhca_qp_state_valid(a.state)) {
        return QHCA_CMD_BAD_PARAM;
    }
    if (a.path_mtu && (a.path_mtu < 8 || a.path_mtu > 12)) {
        return QHCA_CMD_BAD_PARAM;
    }
    if ((mask & QHCA_QP_ATTR_PATH_MTU) && !a.path_mtu) {
        return QHCA_CMD_BAD_PARAM;
    }
    if (a.max_rd_atomic > QHCA_LIMIT_MAX_RD_ATOMIC ||
        a.max_dest_rd_atomic > QHCA_LIMIT_MAX_RD_ATOMIC) {
        return QHCA_CMD_BAD_PARAM;
    }
    if (a.timeout > 31 || a.retry_cnt > 7 || a.rnr_retry > 7 ||
        a.min_rnr_timer > 31 ||
        (access & ~QHCA_ACCESS_REMOTE) ||
        dest_qpn > QHCA_DB_QN_MASK || rq_psn > 0xffffff ||
        sq_psn > 0xffffff) {
        return QHCA_CMD_BAD_PARAM;
    }

    if (qp->type == QHCA_QPT_ETH && mask != QHCA_QP_ATTR_STATE) {
        /* The Ethernet QP has no attribute but its state. */
        return QHCA_CMD_BAD_PARAM;
    }

    next = (mask & QHCA_QP_ATTR_STATE) ? a.state : qp->state;
    t = qhca_qp_trans(qp->type, qp->state, next);
    if (!t) {
        return QHCA_CMD_BAD_STATE;
    }
    if ((mask & t->required) != t->required ||
        (mask & ~(t->required | t->optional | QHCA_QP_ATTR_STATE))) {
        return QHCA_CMD_BAD_PARAM;
    }

    if (mask & QHCA_QP_ATTR_AV) {
        st = qhca_av_load(s, &a.av, &av);
        if (st != QHCA_CMD_OK) {
            return st;
        }
    }

    trace_qhca_qp_modify(qhca_qpn(s, qp), qp->state, next, mask);
    if (mask & QHCA_QP_ATTR_AV) {
        qp->av = av;
    }
    if (mask & QHCA_QP_ATTR_ACCESS) {
        qp->access = access;
    }
    if (mask & QHCA_QP_ATTR_DEST_QPN) {
        qp->dest_qpn = dest_qpn;
    }
    if (mask & QHCA_QP_ATTR_RQ_PSN) {
        qp->rq_psn = rq_psn;
    }
    if (mask & QHCA_QP_ATTR_SQ_PSN) {
        qp->sq_psn = sq_psn;
    }
    if (mask & QHCA_QP_ATTR_PATH_MTU) {
        qp->path_mtu = a.path_mtu;
    }
    if (mask & QHCA_QP_ATTR_TIMEOUT) {
        qp->timeout = a.timeout;
    }
    if (mask & QHCA_QP_ATTR_RETRY_CNT) {
        qp->retry_cnt = a.retry_cnt;
    }
    if (mask & QHCA_QP_ATTR_RNR_RETRY) {
        qp->rnr_retry = a.rnr_retry;
    }
    if (mask & QHCA_QP_ATTR_MIN_RNR_TIMER) {
        qp->min_rnr_timer = a.min_rnr_timer;
    }
    if (mask & QHCA_QP_ATTR_MAX_RD_ATOMIC) {
        qp->max_rd_atomic = a.max_rd_atomic;
    }
    if (mask & QHCA_QP_ATTR_MAX_DEST_RD_ATOMIC) {
        qp->max_dest_rd_atomic = a.max_dest_rd_atomic;
    }
    if (mask & QHCA_QP_ATTR_QKEY) {
        qp->qkey = qkey;
    }

    if (next == QHCA_QPS_RESET) {
        qp->state = QHCA_QPS_RESET;
        qhca_engine_qp_reset(s, qp);
    } else if (next == QHCA_QPS_ERR) {
        /* Asked for: no QP_ERR event, but outstanding work is flushed. */
        qhca_qp_set_error(s, qp, false);
    } else {
        qp->state = next;
        qhca_engine_schedule(s, qp);
    }
    return QHCA_CMD_OK;
}

uint8_t qhca_cmd_query_qp(QhcaState *s, const struct qhca_cmd *cmd)
{
    struct qhca_qp_attr a = { 0 };
    QhcaQp *qp;

    if (!qhca_cmd_unused_zero(cmd, true, 2)) {
        return QHCA_CMD_BAD_PARAM;
    }
    qp = qhca_cmd_qp(s, cmd);
    if (!qp) {
        return QHCA_CMD_BAD_RESOURCE;
    }
    a.mask = cpu_to_le32(QHCA_QP_ATTR_ALL);
    a.state = qp->state;
    a.path_mtu = qp->path_mtu;
    a.timeout = qp->timeout;
    a.retry_cnt = qp->retry_cnt;
    a.rnr_retry = qp->rnr_retry;
    a.min_rnr_timer = qp->min_rnr_timer;
    a.max_rd_atomic = qp->max_rd_atomic;
    a.max_dest_rd_atomic = qp->max_dest_rd_atomic;
    a.access = cpu_to_le32(qp->access);
    a.dest_qpn = cpu_to_le32(qp->dest_qpn);
    a.rq_psn = cpu_to_le32(qp->rq_psn);
    a.sq_psn = cpu_to_le32(qp->sq_psn);
    a.qkey = cpu_to_le32(qp->qkey);
    if (qp->type == QHCA_QPT_RC) {
        qhca_av_store(&qp->av, &a.av);
    }
    return qhca_cmd_out(s, cmd, &a, sizeof(a));
}

/* ------------------------------------------------------------------------ */
/* work queue entries                                                       */

static uint64_t qhca_wq_slot(const QhcaWq *wq, uint16_t idx)
{
    return wq->offset +
           ((uint64_t)(idx & ((1u << wq->log) - 1)) << wq->stride_log);
}

bool qhca_wq_read(QhcaState *s, QhcaQp *qp, const QhcaWq *wq,
                  uint16_t idx, uint64_t off, void *buf, uint64_t len)
{
    return qhca_pl_rw(s, qp->pages, qp->npages, qhca_wq_slot(wq, idx) + off,
                      buf, len, false);
}

/*
 * The data of send WQE @idx, whose control segment is in @w already: its
 * inline bytes into @inline_dst, or its SGEs into w->sge, checked against the
 * QP's PD (for writing, for a READ's or an atomic's results).  Sets
 * w->length.  Returns the completion status, *why saying what was wrong.
 */
uint8_t qhca_send_wqe_data(QhcaState *s, QhcaQp *qp, uint16_t idx,
                           uint32_t data_off, QhcaSendWqe *w, void *inline_dst,
                           const char **why)
{
    struct qhca_sge sge[QHCA_LIMIT_MAX_SGE];
    uint64_t slot = 1ull << qp->sq.stride_log;
    uint64_t total;
    unsigned i;
    uint8_t st;

    if (w->flags & QHCA_WQE_INLINE) {
        if (qhca_wr_rd_atomic(w->opcode) || w->num_sge) {
            *why = "inline data on a READ or atomic, or with SGEs";
            return QHCA_WC_LOC_QP_OP_ERR;
        }
        if (w->inline_len > qp->max_inline) {
            *why = "inline data longer than max_inline";
            return QHCA_WC_LOC_LEN_ERR;
        }
        if (data_off + (uint64_t)w->inline_len > slot) {
            *why = "inline data past the end of the slot";
            return QHCA_WC_LOC_LEN_ERR;
        }
        if (!qhca_wq_read(s, qp, &qp->sq, idx, data_off,
                          inline_dst, w->inline_len)) {
            *why = "ring unreachable";
            return QHCA_WC_LOC_QP_OP_ERR;
        }
        w->length = w->inline_len;
        return QHCA_WC_SUCCESS;
    }
    if (w->inline_len || w->num_sge > qp->max_sge ||
        data_off + w->num_sge * sizeof(sge[0]) > slot) {
        *why = "inline_len without INLINE, or too many SGEs";
        return QHCA_WC_LOC_QP_OP_ERR;
    }
    if (!qhca_wq_read(s, qp, &qp->sq, idx, data_off,
                      sge, w->num_sge * sizeof(sge[0]))) {
        *why = "ring unreachable";
        return QHCA_WC_LOC_QP_OP_ERR;
    }
    for (i = 0; i < w->num_sge; i++) {
        w->sge[i].addr = le64_to_cpu(sge[i].addr);
        w->sge[i].length = le32_to_cpu(sge[i].length);
        w->sge[i].lkey = le32_to_cpu(sge[i].lkey);
    }
    st = qhca_sge_check(s, qp->pdn, w->sge, w->num_sge,
                        qhca_wr_rd_atomic(w->opcode), &total);
    if (st != QHCA_WC_SUCCESS) {
        *why = "local SGE refused";
        return st;
    }
    w->length = total;
    return QHCA_WC_SUCCESS;
}
