/*
 * qhca: an emulated RDMA host channel adapter -- verbs objects
 *
 * Protection domains, completion queues and queue pairs (those in
 * qhca-qp.c; memory regions in qhca-mr.c, windows in qhca-mw.c), the page
 * lists objects are created with, and the commands that
 * create, modify, query and destroy them.  Each object belongs to the
 * context (UAR page) named at create time; every later command names that
 * context again and is refused (BAD_RESOURCE) if it is not the owner.
 * Object state lives only here: page lists are copied from guest memory at
 * create time, so the guest cannot change a translation, a bound or an owner
 * behind the device's back.
 *
 * A command that needs a page list runs twice: first it validates everything
 * and asks for the list (QHCA_CMD_PENDING); the command queue then reads the
 * list a budget of entries per run (qhca_pl_load); then the command runs
 * again, validates again and creates the object, which takes the list.  An
 * error at any point leaves nothing behind.
 *
 * Names are never reused soon (regions' keys: qhca-mr.c).  A QPN carries a
 * generation bumped on each use of its
 * index, and is not handed out while a live QP names it as its peer
 * (qhca-qp.c); a type 2 window goes with the QP it is bound to (qhca-mw.c).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/bswap.h"
#include "qhca.h"
#include "trace.h"

QEMU_BUILD_BUG_ON(QHCA_LIMIT_MAX_QP != 1u << QHCA_QPN_INDEX_BITS);
QEMU_BUILD_BUG_ON(QHCA_PL_PAGE_ENTRIES * sizeof(uint64_t) != QHCA_PAGE_SIZE);

void qhca_obj_init(QhcaState *s)
{
    s->pd = g_new0(QhcaPd, QHCA_LIMIT_MAX_PD);
    s->mr = g_new0(QhcaMr, QHCA_LIMIT_MAX_MR);
    s->mw = g_new0(QhcaMw, QHCA_LIMIT_MAX_MW);
    s->ah = g_new0(QhcaAh, QHCA_LIMIT_MAX_AH);
    s->srq = g_new0(QhcaSrq, QHCA_LIMIT_MAX_SRQ);
    s->cq = g_new0(QhcaCq, QHCA_LIMIT_MAX_CQ);
    s->qp = g_new0(QhcaQp, QHCA_LIMIT_MAX_QP);
}

bool qhca_objects_exist(const QhcaState *s)
{
    return s->num_pd || s->num_mr || s->num_cq || s->num_qp || s->num_mw ||
           s->num_ah || s->num_srq;
}

/* ------------------------------------------------------------------------ */
/* lookups                                                                  */

QhcaPd *qhca_pd_lookup(QhcaState *s, uint64_t pdn)
{
    return pdn < QHCA_LIMIT_MAX_PD && s->pd[pdn].in_use ? &s->pd[pdn] : NULL;
}

/*
 * The whole QPN, generation included: a stale QPN names no QP.  The GSI
 * QP's number, QHCA_GSI_QPN, has no generation (no other QP has it, as
 * generations start at 1) and names it wherever its slot is.
 */
QhcaQp *qhca_qp_lookup(QhcaState *s, uint32_t qpn)
{
    QhcaQp *qp = &s->qp[qpn & (QHCA_LIMIT_MAX_QP - 1)];

    if (qpn == QHCA_GSI_QPN) {
        return s->gsi_qp;
    }
    return qp->in_use && qp->qpn == qpn ? qp : NULL;
}

bool qhca_uar_valid(QhcaState *s, uint64_t uar)
{
    return uar < s->num_uars && s->ctx[uar].in_use;
}

/* The context is the driver's own (ALLOC_UAR with QHCA_UAR_KERNEL). */
bool qhca_uar_kernel(QhcaState *s, uint64_t uar)
{
    return qhca_uar_valid(s, uar) && s->ctx[uar].kernel;
}

/* ------------------------------------------------------------------------ */
/* page lists                                                               */

/*
 * A command asks for its two-level page list: the directory at dir holds
 * DIV_ROUND_UP(npages, QHCA_PL_PAGE_ENTRIES) little-endian addresses of
 * page-list pages.  Only checks and an allocation here, no DMA; the list
 * counts against QHCA_LIMIT_TOTAL_PAGES from now on.
 */
uint8_t qhca_pl_request(QhcaState *s, QhcaPageList *pl, uint64_t dir,
                        uint32_t npages)
{
    uint64_t dir_bytes;
    uint64_t *pages;

    if (!npages || npages > QHCA_MAX_PAGE_LIST) {
        return QHCA_CMD_BAD_PARAM;
    }
    dir_bytes = DIV_ROUND_UP(npages, QHCA_PL_PAGE_ENTRIES) * sizeof(uint64_t);
    if (!dir || (dir & 7) || dir + dir_bytes - 1 < dir) {
        return QHCA_CMD_BAD_PARAM;
    }
    if (npages > QHCA_LIMIT_TOTAL_PAGES - s->total_pages) {
        return QHCA_CMD_NO_RESOURCES;
    }
    pages = g_try_new(uint64_t, npages);
    if (!pages) {
        return QHCA_CMD_NO_RESOURCES;
    }
    assert(!pl->pages);
    *pl = (QhcaPageList) { .dir = dir, .npages = npages, .pages = pages };
    s->total_pages += npages;
    return QHCA_CMD_PENDING;
}

/*
 * Reads more of the list, *budget entries at most (a directory entry counts
 * as one).  Returns QHCA_CMD_PENDING while entries remain, QHCA_CMD_OK once
 * the list is complete, or the command's error status.
 */
uint8_t qhca_pl_load(QhcaState *s, QhcaPageList *pl, int64_t *budget)
{
    while (pl->done < pl->npages) {
        uint32_t in = pl->done % QHCA_PL_PAGE_ENTRIES;
        uint64_t *dst = &pl->pages[pl->done];
        uint32_t n, i;

        if (*budget <= 0) {
            return QHCA_CMD_PENDING;
        }
        if (!in) {
            uint64_t e;

            if (qhca_dma_read(s, pl->dir + (uint64_t)(pl->done /
                              QHCA_PL_PAGE_ENTRIES) * sizeof(e), &e,
                              sizeof(e)) != MEMTX_OK) {
                return QHCA_CMD_DMA_ERROR;
            }
            pl->cur = le64_to_cpu(e);
            if (pl->cur & (QHCA_PAGE_SIZE - 1)) {
                return QHCA_CMD_BAD_PARAM;
            }
            (*budget)--;
        }
        n = MIN(QHCA_PL_PAGE_ENTRIES - in, pl->npages - pl->done);
        n = MIN(n, MAX(*budget, 1));
        /* cur is page aligned and in + n <= 512: no wrap. */
        if (qhca_dma_read(s, pl->cur + (uint64_t)in * sizeof(*dst), dst,
                          (dma_addr_t)n * sizeof(*dst)) != MEMTX_OK) {
            return QHCA_CMD_DMA_ERROR;
        }
        for (i = 0; i < n; i++) {
            dst[i] = le64_to_cpu(dst[i]);
            if (dst[i] & (QHCA_PAGE_SIZE - 1)) {
                return QHCA_CMD_BAD_PARAM;
            }
        }
        pl->done += n;
        *budget -= n;
    }
    return QHCA_CMD_OK;
}

/* Drops a list no object took (an error, a reset, the queue disabled). */
void qhca_pl_release(QhcaState *s, QhcaPageList *pl)
{
    if (pl->pages) {
        s->total_pages -= pl->npages;
        g_free(pl->pages);
    }
    *pl = (QhcaPageList) { 0 };
}

/* The object created takes the list that was read for it. */
uint64_t *qhca_pl_take(QhcaPageList *pl)
{
    uint64_t *pages = pl->pages;

    assert(pages && pl->done == pl->npages);
    *pl = (QhcaPageList) { 0 };
    return pages;
}

void qhca_page_list_free(QhcaState *s, uint64_t **pages,
                         uint32_t *npages)
{
    s->total_pages -= *npages;
    g_free(*pages);
    *pages = NULL;
    *npages = 0;
}

/* ------------------------------------------------------------------------ */
/* command helpers                                                          */

/* The in[] words as the raw little-endian bytes the driver wrote. */
void qhca_cmd_in_bytes(const struct qhca_cmd *cmd, void *dst,
                       size_t len)
{
    uint64_t raw[ARRAY_SIZE(cmd->in)];
    unsigned i;

    for (i = 0; i < ARRAY_SIZE(raw); i++) {
        raw[i] = cpu_to_le64(cmd->in[i]);
    }
    memcpy(dst, raw, MIN(len, sizeof(raw)));
}

uint8_t qhca_cmd_out(QhcaState *s, const struct qhca_cmd *cmd,
                     const void *buf, size_t len)
{
    if (!cmd->out_addr || cmd->out_len < len ||
        cmd->out_addr + len - 1 < cmd->out_addr) {
        return QHCA_CMD_BAD_PARAM;
    }
    if (qhca_dma_write(s, cmd->out_addr, buf, len) != MEMTX_OK) {
        return QHCA_CMD_DMA_ERROR;
    }
    return QHCA_CMD_OK;
}

/* ------------------------------------------------------------------------ */
/* protection domains                                                       */

static uint8_t qhca_cmd_alloc_pd(QhcaState *s, const struct qhca_cmd *cmd,
                                 uint64_t *data)
{
    uint32_t i;

    if (!qhca_cmd_unused_zero(cmd, false, 1)) {
        return QHCA_CMD_BAD_PARAM;
    }
    if (!qhca_uar_valid(s, cmd->in[0])) {
        return QHCA_CMD_BAD_RESOURCE;
    }
    for (i = 0; i < QHCA_LIMIT_MAX_PD; i++) {
        if (!s->pd[i].in_use) {
            s->pd[i] = (QhcaPd) { .in_use = true, .uar = cmd->in[0] };
            s->num_pd++;
            trace_qhca_obj("pd", "alloc", cmd->in[0], i);
            data[0] = i;
            return QHCA_CMD_OK;
        }
    }
    return QHCA_CMD_NO_RESOURCES;
}

static void qhca_pd_free(QhcaState *s, QhcaPd *pd)
{
    trace_qhca_obj("pd", "free", pd->uar, pd - s->pd);
    pd->in_use = false;
    s->num_pd--;
}

static uint8_t qhca_cmd_dealloc_pd(QhcaState *s, const struct qhca_cmd *cmd)
{
    QhcaPd *pd;

    if (!qhca_cmd_unused_zero(cmd, false, 2)) {
        return QHCA_CMD_BAD_PARAM;
    }
    pd = qhca_pd_lookup(s, cmd->in[1]);
    if (!pd || pd->uar != cmd->in[0] || !qhca_uar_valid(s, cmd->in[0])) {
        return QHCA_CMD_BAD_RESOURCE;
    }
    if (pd->nr_mr || pd->nr_mw || pd->nr_qp || pd->nr_ah || pd->nr_srq) {
        return QHCA_CMD_BAD_STATE;
    }
    qhca_pd_free(s, pd);
    return QHCA_CMD_OK;
}

static uint8_t qhca_cmd_query_ctx(QhcaState *s, const struct qhca_cmd *cmd)
{
    struct qhca_ctx_stats st = { 0 };
    QhcaContext *ctx;

    if (!qhca_cmd_unused_zero(cmd, true, 1)) {
        return QHCA_CMD_BAD_PARAM;
    }
    if (!qhca_uar_valid(s, cmd->in[0])) {
        return QHCA_CMD_BAD_RESOURCE;
    }
    ctx = &s->ctx[cmd->in[0]];
    st.db_accepted = cpu_to_le64(ctx->db_accepted);
    st.db_violations = cpu_to_le64(ctx->db_violations);
    st.pkt_foreign = cpu_to_le64(ctx->pkt_foreign);
    st.rnr_retries = cpu_to_le64(ctx->rnr_retries);
    st.odp_req_faults = cpu_to_le64(ctx->odp_req_faults);
    st.odp_resp_faults = cpu_to_le64(ctx->odp_resp_faults);
    st.odp_fault_rnr_naks = cpu_to_le64(ctx->odp_fault_rnr_naks);
    st.odp_invalidations = cpu_to_le64(ctx->odp_invalidations);
    st.ud_drop_qkey = cpu_to_le64(ctx->ud_drop_qkey);
    st.ud_drop_no_recv = cpu_to_le64(ctx->ud_drop_no_recv);
    st.ud_drop_too_long = cpu_to_le64(ctx->ud_drop_too_long);
    st.ud_drop_fault = cpu_to_le64(ctx->ud_drop_fault);
    return qhca_cmd_out(s, cmd, &st, sizeof(st));
}

uint8_t qhca_cmd_obj(QhcaState *s, const struct qhca_cmd *cmd, uint64_t *data,
                     QhcaPageList *pl)
{
    switch (cmd->opcode) {
    case QHCA_CMD_ALLOC_PD:
        return qhca_cmd_alloc_pd(s, cmd, data);
    case QHCA_CMD_DEALLOC_PD:
        return qhca_cmd_dealloc_pd(s, cmd);
    case QHCA_CMD_REG_MR:
    case QHCA_CMD_DEREG_MR:
    case QHCA_CMD_REVOKE_PAGES:
    case QHCA_CMD_MODIFY_MR:
        return qhca_cmd_mr_reg(s, cmd, data, pl);
    case QHCA_CMD_CREATE_CQ:
    case QHCA_CMD_DESTROY_CQ:
        return qhca_cmd_cq(s, cmd, data, pl);
    case QHCA_CMD_CREATE_QP:
        return qhca_cmd_create_qp(s, cmd, data, pl);
    case QHCA_CMD_MODIFY_QP:
        return qhca_cmd_modify_qp(s, cmd);
    case QHCA_CMD_QUERY_QP:
        return qhca_cmd_query_qp(s, cmd);
    case QHCA_CMD_DESTROY_QP:
        return qhca_cmd_destroy_qp(s, cmd);
    case QHCA_CMD_QUERY_CTX:
        return qhca_cmd_query_ctx(s, cmd);
    default:
        return QHCA_CMD_BAD_OPCODE;
    }
}

/* FREE_UAR: everything the context owns goes, users before what they use. */
void qhca_obj_free_ctx(QhcaState *s, uint32_t uar)
{
    uint32_t i;

    for (i = 0; i < QHCA_LIMIT_MAX_QP; i++) {
        if (s->qp[i].in_use && s->qp[i].uar == uar) {
            qhca_qp_free(s, &s->qp[i]);
        }
    }
    qhca_srq_free_ctx(s, uar);
    qhca_mw_free_ctx(s, uar);
    qhca_ah_free_ctx(s, uar);
    qhca_mr_free_ctx(s, uar);
    qhca_cq_free_ctx(s, uar);
    for (i = 0; i < QHCA_LIMIT_MAX_PD; i++) {
        if (s->pd[i].in_use && s->pd[i].uar == uar) {
            qhca_pd_free(s, &s->pd[i]);
        }
    }
}

/*
 * Device reset: every object goes; the MR key sequence and QPN generations
 * survive, so that old keys and QPNs stay stale.
 */
void qhca_obj_reset(QhcaState *s)
{
    uint32_t i;

    for (i = 0; i < s->num_uars; i++) {
        if (s->ctx[i].in_use) {
            qhca_obj_free_ctx(s, i);
        }
    }
}

void qhca_obj_fini(QhcaState *s)
{
    qhca_obj_reset(s);
    g_free(s->pd);
    g_free(s->mr);
    g_free(s->mw);
    g_free(s->ah);
    g_free(s->srq);
    g_free(s->cq);
    g_free(s->qp);
}
