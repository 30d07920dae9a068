/*
 * qhca: an emulated RDMA host channel adapter -- doorbell (UAR) pages
 *
 * BAR2 holds num-uars doorbell pages of 4 KiB (the BAR is rounded up to a
 * power of two).  ALLOC_UAR hands a page to a context; the page index is the
 * context's id inside the device, so a doorbell's page says which context is
 * ringing.  A doorbell is accepted only if it names a queue that context
 * owns.  No queue exists in this version, so every doorbell is dropped and
 * counted; queue ownership and the dispatch to the engine plug in at
 * qhca_ctx_owns_queue() and qhca_db_ring().
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qhca.h"
#include "trace.h"

/* Bits 31..28 of the doorbell word are reserved. */
#define QHCA_DB_RSVD_MASK 0xf0000000ull

/* Lowest free page first, so that a freed page is handed out again first. */
int qhca_ctx_alloc(QhcaState *s)
{
    uint32_t i;

    for (i = 0; i < s->num_uars; i++) {
        if (!s->ctx[i].in_use) {
            s->ctx[i].in_use = true;
            trace_qhca_ctx_alloc(i);
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
    /* Later: refuse while the context still owns queues (BAD_STATE). */
    s->ctx[index].in_use = false;
    trace_qhca_ctx_free(index);
    return true;
}

void qhca_ctx_reset(QhcaState *s)
{
    memset(s->ctx, 0, s->num_uars * sizeof(*s->ctx));
}

static QhcaContext *qhca_ctx_lookup(QhcaState *s, uint64_t page)
{
    if (page >= s->num_uars || !s->ctx[page].in_use) {
        return NULL;
    }
    return &s->ctx[page];
}

/* Does ctx own queue qn of the kind a doorbell of this type rings? */
static bool qhca_ctx_owns_queue(QhcaContext *ctx, unsigned type, uint32_t qn)
{
    /* No QP or CQ exists in this version: nobody owns anything. */
    return false;
}

/*
 * An accepted doorbell: the engine will record the index and schedule the
 * queue's bottom half here.  Unreachable while qhca_ctx_owns_queue() says no.
 */
static void qhca_db_ring(QhcaState *s, QhcaContext *ctx, unsigned type,
                         uint32_t qn, uint32_t index)
{
    trace_qhca_db_accept(ctx - s->ctx, type, qn, index);
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

    trace_qhca_db(page, val);

    ctx = qhca_ctx_lookup(s, page);
    if (!ctx) {
        QHCA_GUEST_ERR(s, qhca_err_db_page,
                       "doorbell 0x%" PRIx64 " on unallocated page %" PRIu64,
                       val, page);
        return;
    }

    if ((val & QHCA_DB_RSVD_MASK) ||
        (type != QHCA_DB_SQ && type != QHCA_DB_RQ && type != QHCA_DB_CQ_ARM)) {
        QHCA_GUEST_ERR(s, qhca_err_db_malformed,
                       "malformed doorbell 0x%" PRIx64 " on page %" PRIu64
                       " (bad type or reserved bits)", val, page);
        return;
    }

    if (!qhca_ctx_owns_queue(ctx, type, qn)) {
        qhca_count(&s->db_violations);
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
