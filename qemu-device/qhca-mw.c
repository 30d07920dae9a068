/*
 * qhca: an emulated RDMA host channel adapter -- memory windows
 *
 * ALLOC_MW and DEALLOC_MW, and what the RC engine does with windows: the
 * BIND_MW and LOCAL_INV WQEs (the requester runs them when it reaches them,
 * in SQ order), SEND_WITH_INV landing on a responder, and the R_Key check
 * that takes a window's key where a region's would go.  The rules are in
 * the ABI header and docs/specs/qhca.rst, "Memory windows".
 *
 * A window's state lives only here.  While it is bound, it holds its region
 * (QhcaMr.nr_mw): DEREG_MR refuses, so the region a bound window points to
 * is always live; unbinding, DEALLOC_MW and the end of the context let go.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qhca-rc.h"
#include "trace.h"

/* A window key's index: generation << QHCA_MW_INDEX_BITS | slot. */
#define QHCA_MW_INDEX_MASK  (~QHCA_MW_KEY_FLAG >> QHCA_KEY_TAG_BITS)
#define QHCA_MW_SLOT_MASK   (QHCA_LIMIT_MAX_MW - 1)

static uint32_t qhca_mw_key(const QhcaMw *mw)
{
    return QHCA_MW_KEY_FLAG | mw->index << QHCA_KEY_TAG_BITS | mw->tag;
}

/* The window whose index (generation included) key names; its tag aside. */
static QhcaMw *qhca_mw_lookup(QhcaState *s, uint64_t key)
{
    uint32_t index = (key >> QHCA_KEY_TAG_BITS) & QHCA_MW_INDEX_MASK;
    QhcaMw *mw = &s->mw[index & QHCA_MW_SLOT_MASK];

    if (key > UINT32_MAX || !(key & QHCA_MW_KEY_FLAG)) {
        return NULL;
    }
    return mw->in_use && mw->index == index ? mw : NULL;
}

static void qhca_mw_unbind(QhcaState *s, QhcaMw *mw)
{
    if (mw->bound) {
        mw->mr->nr_mw--;
        mw->mr = NULL;
        mw->bound = false;
    }
}

static void qhca_mw_free(QhcaState *s, QhcaMw *mw)
{
    trace_qhca_obj("mw", "dealloc", mw->uar, qhca_mw_key(mw));
    qhca_mw_unbind(s, mw);
    s->pd[mw->pdn].nr_mw--;
    mw->in_use = false;
    s->num_mw--;
}

/* ------------------------------------------------------------------------ */
/* commands                                                                 */

static uint8_t qhca_cmd_alloc_mw(QhcaState *s, const struct qhca_cmd *cmd,
                                 uint64_t *data)
{
    uint32_t uar = cmd->in[0], n, gen;
    QhcaPd *pd;

    if (!qhca_cmd_unused_zero(cmd, false, 3) || cmd->in[0] > UINT32_MAX ||
        cmd->in[2] < QHCA_MW_TYPE_1 || cmd->in[2] > QHCA_MW_TYPE_2B) {
        return QHCA_CMD_BAD_PARAM;
    }
    if (!qhca_uar_valid(s, uar)) {
        return QHCA_CMD_BAD_RESOURCE;
    }
    pd = qhca_pd_lookup(s, cmd->in[1]);
    if (!pd || pd->uar != uar) {
        return QHCA_CMD_BAD_RESOURCE;
    }
    for (n = 0; n < QHCA_LIMIT_MAX_MW; n++) {
        uint32_t slot = (s->mw_next + n) & QHCA_MW_SLOT_MASK;
        QhcaMw *mw = &s->mw[slot];

        if (mw->in_use) {
            continue;
        }
        gen = ((mw->index >> QHCA_MW_INDEX_BITS) + 1) &
              (QHCA_MW_INDEX_MASK >> QHCA_MW_INDEX_BITS);
        *mw = (QhcaMw) {
            .in_use = true,
            .type = cmd->in[2],
            .tag = mw->tag,
            .index = gen << QHCA_MW_INDEX_BITS | slot,
            .uar = uar,
            .pdn = cmd->in[1],
        };
        pd->nr_mw++;
        s->num_mw++;
        s->mw_next = (slot + 1) & QHCA_MW_SLOT_MASK;
        data[0] = qhca_mw_key(mw);
        trace_qhca_obj("mw", "alloc", uar, data[0]);
        return QHCA_CMD_OK;
    }
    return QHCA_CMD_NO_RESOURCES;
}

/* DEALLOC_MW: a bound window is unbound first. */
static uint8_t qhca_cmd_dealloc_mw(QhcaState *s, const struct qhca_cmd *cmd)
{
    QhcaMw *mw;

    if (!qhca_cmd_unused_zero(cmd, false, 2)) {
        return QHCA_CMD_BAD_PARAM;
    }
    mw = qhca_mw_lookup(s, cmd->in[1]);
    if (!mw || mw->uar != cmd->in[0] || !qhca_uar_valid(s, cmd->in[0])) {
        return QHCA_CMD_BAD_RESOURCE;
    }
    qhca_mw_free(s, mw);
    return QHCA_CMD_OK;
}

uint8_t qhca_cmd_mw(QhcaState *s, const struct qhca_cmd *cmd, uint64_t *data)
{
    switch (cmd->opcode) {
    case QHCA_CMD_ALLOC_MW:
        return qhca_cmd_alloc_mw(s, cmd, data);
    case QHCA_CMD_DEALLOC_MW:
        return qhca_cmd_dealloc_mw(s, cmd);
    default:
        return QHCA_CMD_BAD_OPCODE;
    }
}

/* The context's windows go before its regions (FREE_UAR, reset). */
void qhca_mw_free_ctx(QhcaState *s, uint32_t uar)
{
    uint32_t i;

    for (i = 0; i < QHCA_LIMIT_MAX_MW; i++) {
        if (s->mw[i].in_use && s->mw[i].uar == uar) {
            qhca_mw_free(s, &s->mw[i]);
        }
    }
}

/* DEREG_MR with QHCA_DEREG_MR_UNBIND_MWS: every window bound to mr lets go. */
void qhca_mw_unbind_mr(QhcaState *s, QhcaMr *mr)
{
    uint32_t i;

    for (i = 0; i < QHCA_LIMIT_MAX_MW && mr->nr_mw; i++) {
        if (s->mw[i].in_use && s->mw[i].mr == mr) {
            trace_qhca_obj("mw", "unbind by dereg", s->mw[i].uar,
                           qhca_mw_key(&s->mw[i]));
            qhca_mw_unbind(s, &s->mw[i]);
        }
    }
}

/*
 * The QP qpn is destroyed: the type 2 windows bound to it are invalidated,
 * so that no QP that gets its number later can use them.
 */
void qhca_mw_unbind_qp(QhcaState *s, uint32_t qpn)
{
    uint32_t i;

    for (i = 0; i < QHCA_LIMIT_MAX_MW; i++) {
        QhcaMw *mw = &s->mw[i];

        if (mw->in_use && mw->bound && mw->type != QHCA_MW_TYPE_1 &&
            mw->qpn == qpn) {
            trace_qhca_obj("mw", "unbind by QP destroy", mw->uar,
                           qhca_mw_key(mw));
            qhca_mw_unbind(s, mw);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* the engine                                                               */

/*
 * BIND_MW from qp's send queue (b in host order).  Returns a qhca_wc_status;
 * on error, *why says what and nothing has changed.
 */
uint8_t qhca_mw_bind(QhcaState *s, QhcaQp *qp, const struct qhca_wqe_bind *b,
                     const char **why)
{
    QhcaMw *mw = qhca_mw_lookup(s, b->mw_key);
    QhcaMr *mr;

    if (!mw || mw->pdn != qp->pdn) {
        *why = "bind: no such window in the QP's PD";
        return QHCA_WC_MW_BIND_ERR;
    }
    if ((b->new_key ^ qhca_mw_key(mw)) >> QHCA_KEY_TAG_BITS ||
        (b->new_key & QHCA_KEY_TAG_MASK) == mw->tag) {
        *why = "bind: the new key is not the window's with a new tag";
        return QHCA_WC_MW_BIND_ERR;
    }
    if (b->access & ~QHCA_ACCESS_REMOTE) {
        *why = "bind: rights other than remote ones";
        return QHCA_WC_MW_BIND_ERR;
    }
    if (mw->type != QHCA_MW_TYPE_1 && mw->bound) {
        *why = "bind: a type 2 window is bound already";
        return QHCA_WC_MW_BIND_ERR;
    }
    if (mw->type == QHCA_MW_TYPE_1 && !b->length) {
        /* Unbinds: the region is not looked at. */
        qhca_mw_unbind(s, mw);
        mw->tag = b->new_key & QHCA_KEY_TAG_MASK;
        trace_qhca_obj("mw", "unbind", mw->uar, qhca_mw_key(mw));
        return QHCA_WC_SUCCESS;
    }
    mr = qhca_mr_lookup(s, b->mr_key);
    if (!mr || mr->pdn != qp->pdn || !(mr->access & QHCA_ACCESS_MW_BIND)) {
        *why = "bind: the region is not in the PD or has no MW_BIND right";
        return QHCA_WC_MW_BIND_ERR;
    }
    if ((b->access & (QHCA_ACCESS_REMOTE_WRITE | QHCA_ACCESS_REMOTE_ATOMIC)) &&
        !(mr->access & QHCA_ACCESS_LOCAL_WRITE)) {
        *why = "bind: remote write or atomic on a region without local write";
        return QHCA_WC_MW_BIND_ERR;
    }
    if (b->addr < mr->iova || b->length > mr->length ||
        b->addr - mr->iova > mr->length - b->length) {
        *why = "bind: the range is not inside the region";
        return QHCA_WC_MW_BIND_ERR;
    }
    qhca_mw_unbind(s, mw);
    mw->bound = true;
    mw->mr = mr;
    mr->nr_mw++;
    mw->tag = b->new_key & QHCA_KEY_TAG_MASK;
    mw->qpn = mw->type == QHCA_MW_TYPE_1 ? 0 : qhca_qpn(s, qp);
    mw->access = b->access;
    mw->addr = b->addr;
    mw->length = b->length;
    trace_qhca_obj("mw", "bind", mw->uar, qhca_mw_key(mw));
    return QHCA_WC_SUCCESS;
}

/* A bound type 2 window whose key is exactly key. */
static QhcaMw *qhca_mw_bound2(QhcaState *s, uint32_t key)
{
    QhcaMw *mw = qhca_mw_lookup(s, key);

    if (!mw || mw->type == QHCA_MW_TYPE_1 || !mw->bound ||
        mw->tag != (key & QHCA_KEY_TAG_MASK)) {
        return NULL;
    }
    return mw;
}

/* LOCAL_INV from qp's send queue: a qhca_wc_status. */
uint8_t qhca_mw_local_inv(QhcaState *s, QhcaQp *qp, uint32_t key,
                          const char **why)
{
    QhcaMw *mw = qhca_mw_bound2(s, key);

    if (!mw || mw->pdn != qp->pdn) {
        *why = "local invalidate: not a bound type 2 window of the QP's PD";
        return QHCA_WC_LOC_QP_OP_ERR;
    }
    qhca_mw_unbind(s, mw);
    trace_qhca_obj("mw", "invalidate", mw->uar, key);
    return QHCA_WC_SUCCESS;
}

/* SEND_WITH_INV landed on qp: false if key names nothing qp may invalidate. */
bool qhca_mw_remote_inv(QhcaState *s, QhcaQp *qp, uint32_t key)
{
    QhcaMw *mw = qhca_mw_bound2(s, key);

    if (!mw || mw->qpn != qhca_qpn(s, qp) ||
        (mw->type == QHCA_MW_TYPE_2B && mw->pdn != qp->pdn)) {
        return false;
    }
    qhca_mw_unbind(s, mw);
    trace_qhca_obj("mw", "remote invalidate", mw->uar, key);
    return true;
}

/*
 * The region behind an R_Key, if qp may use it for [va, va + len) with the
 * rights in access: a region's key as qhca_mr_check() sees it, or a bound
 * window's exact key within its bounds and rights (type 1: any QP of its
 * PD; 2A: the QP it is bound to; 2B: that QP, in its PD).  The QP's own
 * rights are the caller's to check.
 */
QhcaMr *qhca_rkey_check(QhcaState *s, QhcaQp *qp, uint32_t key, uint64_t va,
                        uint64_t len, uint32_t access)
{
    QhcaMw *mw;

    if (!(key & QHCA_MW_KEY_FLAG)) {
        return qhca_mr_check(s, key, qp->pdn, va, len, access);
    }
    mw = qhca_mw_lookup(s, key);
    if (!mw || !mw->bound || mw->tag != (key & QHCA_KEY_TAG_MASK) ||
        (mw->access & access) != access) {
        return NULL;
    }
    if (mw->type == QHCA_MW_TYPE_1 || mw->type == QHCA_MW_TYPE_2B) {
        if (mw->pdn != qp->pdn) {
            return NULL;
        }
    }
    if (mw->type != QHCA_MW_TYPE_1 && mw->qpn != qhca_qpn(s, qp)) {
        return NULL;
    }
    if (va < mw->addr || len > mw->length || va - mw->addr > mw->length - len) {
        return NULL;
    }
    return mw->mr;
}
