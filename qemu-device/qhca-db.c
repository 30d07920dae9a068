/*
 * qhca: an emulated RDMA host channel adapter -- doorbell (UAR) pages
 *
 * BAR2 holds num-uars doorbell pages of 4 KiB (the BAR is rounded up to a
 * power of two).  ALLOC_UAR hands a page to a context; the page index is the
 * context's id inside the device, so a doorbell's page says which context is
 * ringing.  A doorbell is accepted only if it names a queue that context
 * owns: a QP for SQ/RQ doorbells, a CQ for CQ_ARM, an SRQ for SRQ.
 * Anything else is dropped and counted, device-wide (DB_VIOLATIONS) and for
 * the page's owner (QUERY_CTX).  An accepted doorbell records the index,
 * queues the QP on the engine's run list, and runs one bounded engine turn
 * inline (qhca_engine_kick: at most QHCA_QP_BUDGET packets, as e1000
 * transmits on its TDT write), so that a small message completes before the
 * store returns; the rest stays on the engine's bottom half (qhca-rc.c).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/main-loop.h"
#include "qhca.h"
#include "trace.h"

/* Bits 31..28 of the doorbell word are reserved. */
#define QHCA_DB_RSVD_MASK 0xf0000000ull

/*
 * Lowest free page first, so that a freed page is handed out again first.
 * kernel: the driver's own context (QHCA_UAR_KERNEL), which may also have
 * physical regions and the GSI QP.
 */
int qhca_ctx_alloc(QhcaState *s, bool kernel)
{
    uint32_t i;

    for (i = 0; i < s->num_uars; i++) {
        if (!s->ctx[i].in_use) {
            s->ctx[i] = (QhcaContext) { .in_use = true, .kernel = kernel };
            s->num_ctx++;
            trace_qhca_ctx_alloc(i, kernel);
            return i;
        }
    }
    return -1;
}

bool qhca_ctx_free(QhcaState *s, uint64_t index)
{
    if (index >= s->num_uars || !s->ctx[index].in_use) {
        return false;
    }
    /* Everything the context still owns goes with it. */
    qhca_obj_free_ctx(s, index);
    s->ctx[index].in_use = false;
    s->ctx[index].kernel = false;
    s->num_ctx--;
    trace_qhca_ctx_free(index);
    return true;
}

void qhca_ctx_reset(QhcaState *s)
{
    memset(s->ctx, 0, s->num_uars * sizeof(*s->ctx));
    s->num_ctx = 0;
}

static QhcaContext *qhca_ctx_lookup(QhcaState *s, uint64_t page)
{
    if (page >= s->num_uars || !s->ctx[page].in_use) {
        return NULL;
    }
    return &s->ctx[page];
}

/* Does context page own queue qn of the kind a doorbell of this type rings? */
static bool qhca_ctx_owns_queue(QhcaState *s, uint64_t page, unsigned type,
                                uint32_t qn)
{
    if (type == QHCA_DB_CQ_ARM) {
        QhcaCq *cq = qhca_cq_lookup(s, qn);

        return cq && cq->uar == page;
    } else if (type == QHCA_DB_SRQ) {
        QhcaSrq *srq = qhca_srq_lookup(s, qn);

        return srq && srq->uar == page;
    } else {
        QhcaQp *qp = qhca_qp_lookup(s, qn);

        return qp && qp->uar == page;
    }
}

/*
 * A new producer index for a work queue: free-running 16 bits, forward only,
 * never more than the ring size ahead of the device's consumer index.
 */
static const char *qhca_wq_check_pi(const QhcaWq *wq, uint32_t index)
{
    uint16_t ahead = (uint16_t)index - wq->ci;

    if (index > UINT16_MAX) {
        return "index wider than 16 bits";
    }
    if (ahead > (1u << wq->log)) {
        return "more WQEs than ring slots";
    }
    if (ahead < (uint16_t)(wq->pi - wq->ci)) {
        return "producer index moved backwards";
    }
    return NULL;
}

/*
 * An accepted doorbell (the page's context owns the queue): validate the
 * index, record it, schedule the engine and run its inline turn.
 */
static void qhca_db_ring(QhcaState *s, QhcaContext *ctx, unsigned type,
                         uint32_t qn, uint32_t index)
{
    uint64_t page = ctx - s->ctx;
    const char *why;

    if (type == QHCA_DB_CQ_ARM) {
        QhcaCq *cq = qhca_cq_lookup(s, qn);

        /* The consumer index lies in [pi - entries, pi]. */
        if (cq->pi - index > (1u << cq->log)) {
            QHCA_GUEST_ERR(s, qhca_err_db_index,
                           "doorbell on page %" PRIu64 " queue %u type %u"
                           " index %u: %s", page, qn, type, index,
                           "CQ consumer index out of range");
            return;
        }
        if (index - cq->ci <= cq->pi - cq->ci) {
            cq->ci = index;
        }
        cq->armed = true;
        cq->arm_ci = index;
        if (cq->pi != index && !cq->arm_pending) {
            cq->arm_pending = true;
            s->cq_arm_pending++;
            qemu_bh_schedule(s->engine_bh);
        }
    } else if (type == QHCA_DB_SRQ) {
        QhcaSrq *srq = qhca_srq_lookup(s, qn);

        /* Its QPs take the WQEs as messages come: nothing to schedule. */
        why = qhca_wq_check_pi(&srq->wq, index);
        if (why) {
            QHCA_GUEST_ERR(s, qhca_err_db_index,
                           "doorbell on page %" PRIu64 " queue %u type %u"
                           " index %u: %s", page, qn, type, index, why);
            return;
        }
        srq->wq.pi = index;
    } else {
        QhcaQp *qp = qhca_qp_lookup(s, qn);
        QhcaWq *wq = type == QHCA_DB_SQ ? &qp->sq : &qp->rq;

        why = type == QHCA_DB_RQ && qp->srq ? "the QP receives from an SRQ"
                                            : qhca_wq_check_pi(wq, index);
        if (why) {
            QHCA_GUEST_ERR(s, qhca_err_db_index,
                           "doorbell on page %" PRIu64 " queue %u type %u"
                           " index %u: %s", page, qn, type, index, why);
            return;
        }
        wq->pi = index;
        /* The inline turn's end schedules the bottom half if need be. */
        qhca_engine_enqueue(s, qp);
    }
    ctx->db_accepted++;
    QHCA_TRACE_STEP(QHCA_DB_ACCEPT, qhca_db_accept, page, type, qn, index);
    qhca_engine_kick(s);
    QHCA_TRACE_STEP(QHCA_DB_DONE, qhca_db_done, page, qn);
}

static uint64_t qhca_uar_read(void *opaque, hwaddr addr, unsigned size)
{
    QhcaState *s = opaque;

    QHCA_GUEST_ERR(s, qhca_err_db_access,
                   "%s of %u bytes at BAR2 offset 0x%" PRIx64
                   " (doorbells are aligned 64-bit stores)",
                   "read", size, (uint64_t)addr);
    return 0;
}

static void qhca_uar_write(void *opaque, hwaddr addr, uint64_t val,
                           unsigned size)
{
    QhcaState *s = opaque;
    uint64_t page = addr >> QHCA_UAR_PAGE_SHIFT;
    uint32_t qn = val & QHCA_DB_QN_MASK;
    unsigned type = (val >> QHCA_DB_TYPE_SHIFT) & QHCA_DB_TYPE_MASK;
    uint32_t index = val >> QHCA_DB_INDEX_SHIFT;
    QhcaContext *ctx;

    if (size != 8 || (addr & (QHCA_UAR_PAGE_SIZE - 1)) != QHCA_DB_OFFSET) {
        QHCA_GUEST_ERR(s, qhca_err_db_access,
                       "%s of %u bytes at BAR2 offset 0x%" PRIx64
                       " (doorbells are aligned 64-bit stores)",
                       "write", size, (uint64_t)addr);
        return;
    }

    QHCA_TRACE_STEP(QHCA_DB, qhca_db, page, val);

    ctx = qhca_ctx_lookup(s, page);
    if (!ctx) {
        QHCA_GUEST_ERR(s, qhca_err_db_page,
                       "doorbell 0x%" PRIx64 " on unallocated page %" PRIu64,
                       val, page);
        return;
    }

    if ((val & QHCA_DB_RSVD_MASK) ||
        (type != QHCA_DB_SQ && type != QHCA_DB_RQ && type != QHCA_DB_CQ_ARM &&
         type != QHCA_DB_SRQ)) {
        QHCA_GUEST_ERR(s, qhca_err_db_malformed,
                       "malformed doorbell 0x%" PRIx64 " on page %" PRIu64
                       " (bad type or reserved bits)", val, page);
        return;
    }

    if (!qhca_ctx_owns_queue(s, page, type, qn)) {
        qhca_count(&s->db_violations);
        ctx->db_violations++;
        trace_qhca_db_violation(page, type, qn);
        qemu_log_mask(LOG_GUEST_ERROR,
                      "qhca: doorbell on page %" PRIu64 " names queue %u"
                      " (type %u) that its context does not own\n",
                      page, qn, type);
        return;
    }

    qhca_db_ring(s, ctx, type, qn, index);
}

/*
 * Every access reaches the handlers, whatever its size or alignment, so that
 * anything but a doorbell can be counted in GUEST_ERRORS.
 */
const MemoryRegionOps qhca_uar_ops = {
    .read = qhca_uar_read,
    .write = qhca_uar_write,
    .endianness = DEVICE_LITTLE_ENDIAN,
    .valid = {
        .min_access_size = 1,
        .max_access_size = 8,
        .unaligned = true,
    },
    .impl = {
        .min_access_size = 1,
        .max_access_size = 8,
        .unaligned = true,
    },
};
