/*
 * qhca: an emulated RDMA host channel adapter -- completion queues
 *
 * A CQ is a ring of 2^log CQEs in the owner's memory followed by its
 * doorbell record, named by the page list read at CREATE_CQ.  Everything
 * that completes (RC requester and responder, UD, the Ethernet QPs) writes
 * its CQE here (qhca_complete*): the body, a write barrier, then the owner
 * byte.  The device's producer index is free-running; the consumer's is read
 * from the record only when the ring looks full, and an overrun or a ring
 * the device cannot reach moves the CQ to error (QHCA_EQE_CQ_ERR) for good.
 *
 * RESIZE_CQ moves a CQ to a new ring without losing or reordering a CQE: in
 * one command (nothing else runs on the device meanwhile) the CQEs the
 * consumer has not taken are copied to the slots their indices have in the
 * new ring, every other slot gets the owner bit that reads "not yet" for the
 * pass the next index written there is in, and the new record gets the
 * consumer index.  Indices go on counting, so the consumer goes on polling at
 * its own index in the new ring, and an armed CQ stays armed.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/bswap.h"
#include "qemu/log.h"
#include "qhca-rc.h"
#include "trace.h"

#define QHCA_CQ_LIMIT_LOG 16    /* QHCA_LIMIT_MAX_CQE */

QEMU_BUILD_BUG_ON(QHCA_LIMIT_MAX_CQE != 1u << QHCA_CQ_LIMIT_LOG);
QEMU_BUILD_BUG_ON(QHCA_CQ_LIMIT_LOG > QHCA_CQ_MAX_LOG);

QhcaCq *qhca_cq_lookup(QhcaState *s, uint32_t cqn)
{
    return cqn < QHCA_LIMIT_MAX_CQ && s->cq[cqn].in_use ? &s->cq[cqn] : NULL;
}

/* The CQ named by a command's in[0] (context) and in[1] (CQN), or NULL. */
static QhcaCq *qhca_cmd_cq_lookup(QhcaState *s, const struct qhca_cmd *cmd)
{
    QhcaCq *cq;

    cq = cmd->in[1] <= UINT32_MAX ? qhca_cq_lookup(s, cmd->in[1]) : NULL;
    if (!cq || cq->uar != cmd->in[0] || !qhca_uar_valid(s, cmd->in[0])) {
        return NULL;
    }
    return cq;
}

/* Bytes of a ring of 2^log CQEs and its record. */
static uint64_t qhca_cq_bytes(uint32_t log)
{
    return ((uint64_t)QHCA_CQE_SIZE << log) + sizeof(struct qhca_cq_dbrec);
}

/* A ring of 2^log entries in npages pages: a size this device takes. */
static bool qhca_cq_geometry_ok(uint64_t log, uint64_t npages)
{
    return log >= QHCA_CQ_MIN_LOG && log <= QHCA_CQ_LIMIT_LOG &&
           npages == DIV_ROUND_UP(qhca_cq_bytes(log), QHCA_PAGE_SIZE);
}

static uint8_t qhca_cmd_create_cq(QhcaState *s, const struct qhca_cmd *cmd,
                                  uint64_t *data, QhcaPageList *pl)
{
    struct qhca_cmd_create_cq in;
    uint32_t uar, log, npages, i;
    QhcaCq *cq = NULL;

    if (!qhca_cmd_unused_zero(cmd, false, 5)) {
        return QHCA_CMD_BAD_PARAM;
    }
    qhca_cmd_in_bytes(cmd, &in, sizeof(in));
    uar = le32_to_cpu(in.uar);
    log = le32_to_cpu(in.log_entries);
    npages = le32_to_cpu(in.npages);
    if (in.rsvd0 || in.rsvd1[0] || in.rsvd1[1]) {
        return QHCA_CMD_BAD_PARAM;
    }
    if (!qhca_uar_valid(s, uar)) {
        return QHCA_CMD_BAD_RESOURCE;
    }
    if (!qhca_cq_geometry_ok(log, npages)) {
        return QHCA_CMD_BAD_PARAM;
    }
    for (i = 0; i < QHCA_LIMIT_MAX_CQ; i++) {
        if (!s->cq[i].in_use) {
            cq = &s->cq[i];
            break;
        }
    }
    if (!cq) {
        return QHCA_CMD_NO_RESOURCES;
    }
    if (!pl->pages) {
        return qhca_pl_request(s, pl, le64_to_cpu(in.pages_addr), npages);
    }
    *cq = (QhcaCq) {
        .in_use = true,
        .uar = uar,
        .log = log,
        .npages = npages,
        .pages = qhca_pl_take(pl),
    };
    s->num_cq++;
    data[0] = i;
    trace_qhca_obj("cq", "create", uar, i);
    return QHCA_CMD_OK;
}

static void qhca_cq_free(QhcaState *s, QhcaCq *cq)
{
    trace_qhca_obj("cq", "destroy", cq->uar, cq - s->cq);
    if (cq->arm_pending) {
        cq->arm_pending = false;
        s->cq_arm_pending--;
    }
    qhca_page_list_free(s, &cq->pages, &cq->npages);
    cq->in_use = false;
    s->num_cq--;
}

static uint8_t qhca_cmd_destroy_cq(QhcaState *s, const struct qhca_cmd *cmd)
{
    QhcaCq *cq;

    if (!qhca_cmd_unused_zero(cmd, false, 2)) {
        return QHCA_CMD_BAD_PARAM;
    }
    cq = qhca_cmd_cq_lookup(s, cmd);
    if (!cq) {
        return QHCA_CMD_BAD_RESOURCE;
    }
    if (cq->nr_qp) {
        return QHCA_CMD_BAD_STATE;
    }
    qhca_cq_free(s, cq);
    return QHCA_CMD_OK;
}

/* FREE_UAR: the context's CQs (its QPs went first). */
void qhca_cq_free_ctx(QhcaState *s, uint32_t uar)
{
    uint32_t i;

    for (i = 0; i < QHCA_LIMIT_MAX_CQ; i++) {
        if (s->cq[i].in_use && s->cq[i].uar == uar) {
            qhca_cq_free(s, &s->cq[i]);
        }
    }
}

/*
 * Reads the consumer index from the record: cq->ci moves only forward, and
 * never past what the device produced.  false if the record is unreachable.
 */
static bool qhca_cq_read_ci(QhcaState *s, QhcaCq *cq)
{
    uint32_t ci;

    if (!qhca_pl_rw(s, cq->pages, cq->npages, qhca_cq_bytes(cq->log) -
                    sizeof(struct qhca_cq_dbrec), &ci, sizeof(ci), false)) {
        return false;
    }
    ci = le32_to_cpu(ci);
    if (ci - cq->ci <= cq->pi - cq->ci) {
        cq->ci = ci;
    }
    return true;
}

/*
 * RESIZE_CQ: in[2] = log_entries, in[3] = npages, in[4] = the new list.
 * The new ring must hold every CQE not taken yet (BAD_PARAM otherwise); a
 * CQ in error is not moved (BAD_STATE).  Nothing changes unless all of it
 * is written.  out: data[0] = the CQEs moved.
 */
static uint8_t qhca_cmd_resize_cq(QhcaState *s, const struct qhca_cmd *cmd,
                                  uint64_t *data, QhcaPageList *pl)
{
    const size_t owner_off = offsetof(struct qhca_cqe, owner);
    g_autofree uint8_t *ring = NULL;
    uint32_t log, entries, old_mask, moved, j;
    struct qhca_cq_dbrec *rec;
    uint64_t bytes;
    QhcaCq *cq;

    if (!qhca_cmd_unused_zero(cmd, false, 5)) {
        return QHCA_CMD_BAD_PARAM;
    }
    cq = qhca_cmd_cq_lookup(s, cmd);
    if (!cq) {
        return QHCA_CMD_BAD_RESOURCE;
    }
    if (!qhca_cq_geometry_ok(cmd->in[2], cmd->in[3])) {
        return QHCA_CMD_BAD_PARAM;
    }
    if (cq->error) {
        return QHCA_CMD_BAD_STATE;
    }
    if (!pl->pages) {
        return qhca_pl_request(s, pl, cmd->in[4], cmd->in[3]);
    }
    log = cmd->in[2];
    entries = 1u << log;
    if (!qhca_cq_read_ci(s, cq)) {
        return QHCA_CMD_BAD_STATE;
    }
    moved = cq->pi - cq->ci;
    if (moved > entries) {
        return QHCA_CMD_BAD_PARAM;
    }

    bytes = qhca_cq_bytes(log);
    ring = g_malloc0(bytes);
    old_mask = (1u << cq->log) - 1;
    for (j = 0; j < entries; j++) {
        uint8_t *slot = ring + (uint64_t)j * QHCA_CQE_SIZE;
        /* The index slot j holds if it is one not taken, else its next. */
        uint32_t i = cq->ci + ((j - cq->ci) & (entries - 1));

        if (i - cq->ci < moved) {
            if (!qhca_pl_rw(s, cq->pages, cq->npages,
                            (uint64_t)(i & old_mask) * QHCA_CQE_SIZE, slot,
                            QHCA_CQE_SIZE, false)) {
                return QHCA_CMD_BAD_STATE;
            }
            slot[owner_off] = ((i >> log) + 1) & QHCA_CQE_OWNER;
        } else {
            i = cq->pi + ((j - cq->pi) & (entries - 1));
            slot[owner_off] = (i >> log) & QHCA_CQE_OWNER;
        }
    }
    rec = (struct qhca_cq_dbrec *)(ring + ((uint64_t)QHCA_CQE_SIZE << log));
    rec->ci = cpu_to_le32(cq->ci);
    if (!qhca_pl_rw(s, pl->pages, pl->npages, 0, ring, bytes, true)) {
        return QHCA_CMD_DMA_ERROR;
    }

    qhca_page_list_free(s, &cq->pages, &cq->npages);
    cq->npages = pl->npages;
    cq->pages = qhca_pl_take(pl);
    cq->log = log;
    data[0] = moved;
    trace_qhca_cq_resize(qhca_cqn(s, cq), log, cq->ci, cq->pi);
    return QHCA_CMD_OK;
}

uint8_t qhca_cmd_cq(QhcaState *s, const struct qhca_cmd *cmd, uint64_t *data,
                    QhcaPageList *pl)
{
    switch (cmd->opcode) {
    case QHCA_CMD_CREATE_CQ:
        return qhca_cmd_create_cq(s, cmd, data, pl);
    case QHCA_CMD_DESTROY_CQ:
        return qhca_cmd_destroy_cq(s, cmd);
    case QHCA_CMD_RESIZE_CQ:
        return qhca_cmd_resize_cq(s, cmd, data, pl);
    default:
        return QHCA_CMD_BAD_OPCODE;
    }
}

/* ------------------------------------------------------------------------ */
/* completions                                                              */

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
        if (!qhca_cq_read_ci(s, cq)) {
            qhca_cq_error(s, cq, "doorbell record unreachable");
            return false;
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
    QHCA_TRACE_STEP(QHCA_CQE, qhca_cqe, qhca_cqn(s, cq), cq->pi,
                    le32_to_cpu(cqe->qpn), le16_to_cpu(cqe->wqe_index),
                    cqe->opcode, cqe->status);
    cq->pi++;
    if (cq->armed) {
        cq->armed = false;
        qhca_eq_event(s, QHCA_EQE_CQ_COMP, qhca_cqn(s, cq), cq->uar);
    }
    return true;
}

/*
 * wqe_index: the SQ or RQ index of the WQE this CQE completes; src_qp: the
 * QP a received message came from.
 */
void qhca_complete_src(QhcaState *s, QhcaQp *qp, uint32_t cqn,
                       uint16_t wqe_index, uint64_t wr_id, uint8_t opcode,
                       uint8_t status, uint32_t byte_len, uint8_t flags,
                       uint32_t imm, uint32_t src_qp)
{
    struct qhca_cqe cqe = {
        .wr_id = cpu_to_le64(wr_id),
        .byte_len = cpu_to_le32(byte_len),
        .imm_data = cpu_to_le32(imm),
        .qpn = cpu_to_le32(qhca_qpn(s, qp)),
        .src_qp = cpu_to_le32(src_qp),
        .opcode = opcode,
        .status = status,
        .flags = flags,
        .wqe_index = cpu_to_le16(wqe_index),
    };

    if (!qhca_cq_post(s, &s->cq[cqn], &cqe) && qp->state != QHCA_QPS_ERR) {
        qhca_qp_set_error(s, qp, true);
    }
}

/* An RC completion: a received message came from the connected peer. */
void qhca_complete(QhcaState *s, QhcaQp *qp, uint32_t cqn,
                   uint16_t wqe_index, uint64_t wr_id, uint8_t opcode,
                   uint8_t status, uint32_t byte_len, uint8_t flags,
                   uint32_t imm)
{
    qhca_complete_src(s, qp, cqn, wqe_index, wr_id, opcode, status, byte_len,
                      flags, imm, opcode & QHCA_WC_RECV ? qp->dest_qpn : 0);
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
