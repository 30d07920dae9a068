/*
 * qhca: an emulated RDMA host channel adapter -- on-demand paging
 *
 * An on-demand region (QHCA_ACCESS_ON_DEMAND) has no page list: the device
 * keeps one translation entry per 4 KiB virtual page, a DMA address with a
 * present and a writable bit, and the driver fills them in (MAP_ODP) when
 * the device asks, and empties them (INVALIDATE_ODP) before the pages go
 * away.  Entries live in chunks of QHCA_ODP_CHUNK_PAGES, looked up by
 * virtual page number in a hash table per region, so that an implicit
 * region (one key for a whole address space) costs memory only for what is
 * mapped.
 *
 * An access through such a region checks every page it touches before it
 * moves a byte (qhca_odp_ready()); a page that is not present, or not
 * writable for a write, is a page fault, described in s->fault.  What the
 * engine does then is in the requester (qhca-rc-req.c: the QP stops where
 * it was until RESUME) and the responder (qhca-rc-resp.c: the request is
 * dropped and RNR NAKed).  Here: the event that tells the driver
 * (QHCA_EQE_PAGE_FAULT), its token, and the commands that answer it.
 *
 * All of it runs under the BQL, as do the engine and the command queue, so
 * an INVALIDATE_ODP that completes has no access to those pages behind it
 * or in flight: every access translates each page at the time it touches
 * it.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/bswap.h"
#include "qhca-rc.h"
#include "trace.h"

/*
 * A token names the QP and the side that waits, and a sequence number, so
 * that a RESUME for a fault that was reset, destroyed or answered already
 * is refused rather than taken for a newer one.
 */
#define QHCA_ODP_TOKEN_SIDE     (1u << QHCA_QPN_INDEX_BITS)
#define QHCA_ODP_TOKEN_SEQ_SHIFT (QHCA_QPN_INDEX_BITS + 1)

QEMU_BUILD_BUG_ON(QHCA_LIMIT_MAX_QP > (1u << QHCA_QPN_INDEX_BITS));
QEMU_BUILD_BUG_ON(QHCA_ODP_MAP_MAX != QHCA_ODP_CHUNK_PAGES);

void qhca_odp_mr_init(QhcaMr *mr)
{
    mr->odp = true;
    mr->odp_chunks = g_hash_table_new_full(g_int64_hash, g_int64_equal,
                                           NULL, g_free);
}

void qhca_odp_mr_free(QhcaState *s, QhcaMr *mr)
{
    if (mr->odp_chunks) {
        s->odp_chunks -= g_hash_table_size(mr->odp_chunks);
        g_hash_table_destroy(mr->odp_chunks);
        mr->odp_chunks = NULL;
    }
    mr->odp = false;
}

static QhcaOdpChunk *qhca_odp_chunk(QhcaMr *mr, uint64_t vpn)
{
    uint64_t index = vpn >> QHCA_ODP_CHUNK_SHIFT;

    return g_hash_table_lookup(mr->odp_chunks, &index);
}

static uint64_t qhca_odp_entry(QhcaMr *mr, uint64_t vpn)
{
    QhcaOdpChunk *c = qhca_odp_chunk(mr, vpn);

    return c ? c->e[vpn & (QHCA_ODP_CHUNK_PAGES - 1)] : 0;
}

static bool qhca_odp_usable(uint64_t e, bool write)
{
    return (e & QHCA_ODP_PRESENT) && (!write || (e & QHCA_ODP_WRITABLE));
}

/*
 * Every page of [va, va + len) is present (and writable for a write); if
 * not, s->fault names the first byte that is not, up to the end.  The
 * caller has checked the range against the region's bounds.
 */
bool qhca_odp_ready(QhcaState *s, QhcaMr *mr, uint64_t va, uint64_t len,
                    bool write)
{
    uint64_t end = va + len, a = va;

    while (a < end) {
        uint64_t vpn = a >> QHCA_PAGE_SHIFT;

        if (!qhca_odp_usable(qhca_odp_entry(mr, vpn), write)) {
            s->fault.key = mr->key;
            s->fault.va = a;
            s->fault.len = end - a;
            s->fault.write = write;
            return false;
        }
        a = (vpn + 1) << QHCA_PAGE_SHIFT;
    }
    return true;
}

QhcaMem qhca_odp_rw(QhcaState *s, QhcaMr *mr, uint64_t va, void *buf,
                    uint64_t len, bool write)
{
    uint8_t *p = buf;

    /* All or nothing moves: an atomic or a packet is never half placed. */
    if (!qhca_odp_ready(s, mr, va, len, write)) {
        return QHCA_MEM_FAULT;
    }
    while (len) {
        uint64_t e = qhca_odp_entry(mr, va >> QHCA_PAGE_SHIFT);
        uint32_t in = va & (QHCA_PAGE_SIZE - 1);
        uint32_t n = MIN(len, QHCA_PAGE_SIZE - in);
        dma_addr_t addr = (e & ~(uint64_t)(QHCA_PAGE_SIZE - 1)) + in;
        MemTxResult r;

        r = write ? qhca_dma_write(s, addr, p, n)
                  : qhca_dma_read(s, addr, p, n);
        if (r != MEMTX_OK) {
            return QHCA_MEM_ERROR;
        }
        va += n;
        p += n;
        len -= n;
    }
    return QHCA_MEM_OK;
}

/*
 * Tells the driver about the fault in s->fault, which qp waits on (as
 * requester, or as responder).  false if the event queue had no room: the
 * caller lets the access fault again later.
 */
bool qhca_odp_raise(QhcaState *s, QhcaQp *qp, bool responder,
                    uint32_t *token)
{
    QhcaContext *ctx = &s->ctx[qp->uar];
    struct qhca_eqe_page_fault pf = { .type = QHCA_EQE_PAGE_FAULT };
    struct qhca_eqe eqe;
    uint32_t t;

    s->fault_seq = (s->fault_seq + 1) &
                   ((1u << (32 - QHCA_ODP_TOKEN_SEQ_SHIFT)) - 1);
    t = s->fault_seq << QHCA_ODP_TOKEN_SEQ_SHIFT |
        (responder ? QHCA_ODP_TOKEN_SIDE : 0) | (uint32_t)(qp - s->qp);
    pf.flags = (s->fault.write ? QHCA_PF_WRITE : 0) |
               (responder ? QHCA_PF_RESPONDER : 0);
    pf.token = cpu_to_le32(t);
    pf.va = cpu_to_le64(s->fault.va);
    pf.key = cpu_to_le32(s->fault.key);
    pf.qpn = cpu_to_le32(qhca_qpn(s, qp));
    pf.length = cpu_to_le32(MIN(s->fault.len, UINT32_MAX));
    QEMU_BUILD_BUG_ON(sizeof(pf) != sizeof(eqe));
    memcpy(&eqe, &pf, sizeof(eqe));
    if (!qhca_eq_event_entry(s, &eqe)) {
        trace_qhca_odp_fault_lost(qhca_qpn(s, qp), s->fault.key, s->fault.va);
        return false;
    }
    if (responder) {
        ctx->odp_resp_faults++;
    } else {
        ctx->odp_req_faults++;
    }
    QHCA_TRACE_STEP(QHCA_ODP_FAULT, qhca_odp_fault, qhca_qpn(s, qp),
                    responder, s->fault.key, s->fault.va, s->fault.len,
                    s->fault.write, t);
    *token = t;
    return true;
}

/* RESET, ERR: whatever the QP waited on is forgotten; tokens go stale. */
void qhca_odp_clear(QhcaQp *qp)
{
    qp->req_fault = false;
    qp->req_fault_failed = false;
    qp->req_fault_answer = false;
    qp->resp_fault = false;
    qp->resp_fault_read = false;
    qp->resp_fault_failed = false;
    qp->resp_fault_ack = false;
}

/* [first, first + count) are virtual pages of the region. */
static bool qhca_odp_in_mr(const QhcaMr *mr, uint64_t first, uint64_t count)
{
    uint64_t lo = mr->iova >> QHCA_PAGE_SHIFT;
    uint64_t hi = (mr->iova + mr->length - 1) >> QHCA_PAGE_SHIFT;

    return count && first >= lo && first <= hi && count - 1 <= hi - first;
}

/* The region named by in[0] (uar) and in[1] (key), if it is on demand. */
static uint8_t qhca_odp_cmd_mr(QhcaState *s, const struct qhca_cmd *cmd,
                               QhcaMr **mrp)
{
    QhcaMr *mr = qhca_cmd_mr(s, cmd->in[0], cmd->in[1]);

    if (!mr) {
        return QHCA_CMD_BAD_RESOURCE;
    }
    if (!mr->odp || !qhca_odp_in_mr(mr, cmd->in[2], cmd->in[3])) {
        return QHCA_CMD_BAD_PARAM;
    }
    *mrp = mr;
    return QHCA_CMD_OK;
}

static void qhca_odp_set(QhcaState *s, QhcaMr *mr, uint64_t vpn, uint64_t e)
{
    uint64_t index = vpn >> QHCA_ODP_CHUNK_SHIFT;
    QhcaOdpChunk *c = g_hash_table_lookup(mr->odp_chunks, &index);
    uint64_t *slot;

    if (!c) {
        if (!e) {
            return;
        }
        c = g_new0(QhcaOdpChunk, 1);
        c->index = index;
        g_hash_table_insert(mr->odp_chunks, &c->index, c);
        s->odp_chunks++;
    }
    slot = &c->e[vpn & (QHCA_ODP_CHUNK_PAGES - 1)];
    c->present += !!(e & QHCA_ODP_PRESENT) - !!(*slot & QHCA_ODP_PRESENT);
    *slot = e;
    if (!c->present) {
        g_hash_table_remove(mr->odp_chunks, &index);
        s->odp_chunks--;
    }
}

/* Chunks that entries [first, first + count) would add. */
static uint32_t qhca_odp_new_chunks(QhcaMr *mr, uint64_t first,
                                    uint64_t count)
{
    uint64_t i = first >> QHCA_ODP_CHUNK_SHIFT;
    uint64_t last = (first + count - 1) >> QHCA_ODP_CHUNK_SHIFT;
    uint32_t n = 0;

    for (; i <= last; i++) {
        n += !g_hash_table_contains(mr->odp_chunks, &i);
    }
    return n;
}

static uint8_t qhca_odp_resume_token(QhcaState *s, uint64_t uar,
                                     uint64_t token, bool ok);

/*
 * MAP_ODP; with QHCA_CMD_FLAG_RESUME, once the pages are in, RESUME (OK) of
 * the token in in_ext, whose status goes to data[0].
 */
static uint8_t qhca_cmd_map_odp(QhcaState *s, const struct qhca_cmd *cmd,
                                uint64_t *data)
{
    uint64_t e[QHCA_ODP_MAP_MAX];
    uint64_t first = cmd->in[2], count = cmd->in[3], addr = cmd->in[4];
    struct qhca_cmd plain = *cmd;
    bool resume = cmd->flags & QHCA_CMD_FLAG_RESUME;
    QhcaMr *mr;
    uint64_t i;
    uint8_t st;

    /* The common rules, for what is left once the resume's fields go. */
    plain.flags &= ~QHCA_CMD_FLAG_RESUME;
    if (resume) {
        plain.in_ext = 0;
    }
    if (!qhca_cmd_unused_zero(&plain, false, 5)) {
        return QHCA_CMD_BAD_PARAM;
    }
    st = qhca_odp_cmd_mr(s, cmd, &mr);
    if (st != QHCA_CMD_OK) {
        return st;
    }
    if (count > QHCA_ODP_MAP_MAX || (addr & 7)) {
        return QHCA_CMD_BAD_PARAM;
    }
    if (qhca_dma_read(s, addr, e, count * sizeof(e[0])) != MEMTX_OK) {
        return QHCA_CMD_DMA_ERROR;
    }
    for (i = 0; i < count; i++) {
        e[i] = le64_to_cpu(e[i]);
        if (e[i] & (QHCA_PAGE_SIZE - 1) &
            ~(QHCA_ODP_PRESENT | QHCA_ODP_WRITABLE)) {
            return QHCA_CMD_BAD_PARAM;
        }
        if (!(e[i] & QHCA_ODP_PRESENT) && e[i]) {
            /* Not present is all zero: no address, no WRITABLE. */
            return QHCA_CMD_BAD_PARAM;
        }
    }
    if (s->odp_chunks + qhca_odp_new_chunks(mr, first, count) >
        QHCA_LIMIT_ODP_CHUNKS) {
        return QHCA_CMD_NO_RESOURCES;
    }
    for (i = 0; i < count; i++) {
        qhca_odp_set(s, mr, first + i, e[i]);
    }
    trace_qhca_odp_map(mr->key, first, count);
    if (resume) {
        data[0] = qhca_odp_resume_token(s, cmd->in[0], cmd->in_ext, true);
    }
    return QHCA_CMD_OK;
}

static void qhca_odp_clear_chunk(QhcaOdpChunk *c, uint64_t first,
                                 uint64_t end)
{
    uint64_t base = c->index << QHCA_ODP_CHUNK_SHIFT;
    uint64_t lo = MAX(first, base) - base;
    uint64_t hi = MIN(end, base + QHCA_ODP_CHUNK_PAGES) - base;

    for (; lo < hi; lo++) {
        c->present -= !!(c->e[lo] & QHCA_ODP_PRESENT);
        c->e[lo] = 0;
    }
}

static uint8_t qhca_cmd_invalidate_odp(QhcaState *s,
                                       const struct qhca_cmd *cmd)
{
    uint64_t first = cmd->in[2], count = cmd->in[3], end = first + count;
    GHashTableIter it;
    QhcaOdpChunk *c;
    QhcaMr *mr;
    uint64_t i;
    uint8_t st;

    if (!qhca_cmd_unused_zero(cmd, false, 4)) {
        return QHCA_CMD_BAD_PARAM;
    }
    st = qhca_odp_cmd_mr(s, cmd, &mr);
    if (st != QHCA_CMD_OK) {
        return st;
    }
    if (count >> QHCA_ODP_CHUNK_SHIFT < g_hash_table_size(mr->odp_chunks)) {
        /* A small range: its chunks one by one. */
        for (i = first >> QHCA_ODP_CHUNK_SHIFT;
             i <= (end - 1) >> QHCA_ODP_CHUNK_SHIFT; i++) {
            c = g_hash_table_lookup(mr->odp_chunks, &i);
            if (c) {
                qhca_odp_clear_chunk(c, first, end);
                if (!c->present) {
                    g_hash_table_remove(mr->odp_chunks, &i);
                    s->odp_chunks--;
                }
            }
        }
    } else {
        /* A large one (an implicit region's munmap): what is mapped. */
        g_hash_table_iter_init(&it, mr->odp_chunks);
        while (g_hash_table_iter_next(&it, NULL, (gpointer *)&c)) {
            qhca_odp_clear_chunk(c, first, end);
            if (!c->present) {
                g_hash_table_iter_remove(&it);
                s->odp_chunks--;
            }
        }
    }
    s->ctx[mr->uar].odp_invalidations++;
    trace_qhca_odp_invalidate(mr->key, first, count);
    return QHCA_CMD_OK;
}

/*
 * RESUME: the QP that waits on the token goes on (it retries the access,
 * which may fault again) or, QHCA_RESUME_ERROR, fails it.  Only flags
 * change here; the QP's next turn does the work.
 */
static uint8_t qhca_cmd_resume(QhcaState *s, const struct qhca_cmd *cmd)
{
    uint64_t token = cmd->in[1];

    if (!qhca_cmd_unused_zero(cmd, false, 3) || token > UINT32_MAX ||
        cmd->in[2] > QHCA_RESUME_ERROR) {
        return QHCA_CMD_BAD_PARAM;
    }
    return qhca_odp_resume_token(s, cmd->in[0], token,
                                 cmd->in[2] == QHCA_RESUME_OK);
}

/* RESUME of token (< 2^32) for context uar: the command's status. */
static uint8_t qhca_odp_resume_token(QhcaState *s, uint64_t uar,
                                     uint64_t token, bool ok)
{
    uint32_t idx = token & (QHCA_ODP_TOKEN_SIDE - 1);
    bool responder = token & QHCA_ODP_TOKEN_SIDE;
    QhcaQp *qp = idx < QHCA_LIMIT_MAX_QP ? &s->qp[idx] : NULL;

    if (!qp || !qp->in_use || qp->uar != uar) {
        return QHCA_CMD_BAD_RESOURCE;
    }
    if (responder ? !qp->resp_fault || qp->resp_fault_token != token
                  : !qp->req_fault || qp->req_fault_token != token) {
        return QHCA_CMD_BAD_RESOURCE;
    }
    QHCA_TRACE_STEP(QHCA_ODP_RESUME, qhca_odp_resume, qhca_qpn(s, qp), token,
                    ok);
    if (responder) {
        qhca_resp_fault_resume(s, qp, ok);
    } else {
        qhca_req_fault_resume(s, qp, ok);
    }
    return QHCA_CMD_OK;
}

uint8_t qhca_cmd_odp(QhcaState *s, const struct qhca_cmd *cmd,
                     uint64_t *data)
{
    switch (cmd->opcode) {
    case QHCA_CMD_MAP_ODP:
        return qhca_cmd_map_odp(s, cmd, data);
    case QHCA_CMD_INVALIDATE_ODP:
        return qhca_cmd_invalidate_odp(s, cmd);
    case QHCA_CMD_RESUME:
        return qhca_cmd_resume(s, cmd);
    default:
        return QHCA_CMD_BAD_OPCODE;
    }
}
