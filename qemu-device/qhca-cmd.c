/*
 * qhca: an emulated RDMA host channel adapter -- command and event queues
 *
 * The driver writes struct qhca_cmd entries into the command ring and stores
 * the new producer index in CMDQ_PI.  The MMIO handler validates the index
 * and runs the first command right there (QHCA_CMD_INLINE_BUDGET); a bottom
 * half runs the rest.  A run reads each command, executes it and completes
 * it with one QHCA_EQE_CMD_DONE event in the event ring, then raises the
 * event queue's MSI-X vector once, at the end of the run.  A run does a
 * budget of work counted in page-list entries read (QHCA_CMD_BUDGET, the
 * inline run less): a command whose page list is longer than what is left
 * stays at the head of the queue, its list read on the following runs.
 *
 * Who writes what (all indices free-running 32-bit counters):
 *   CMDQ_PI  driver (register)      CMDQ_CI  device
 *   EQ_PI    device                 EQ_CI    driver (register)
 * Command completions are never dropped: when the event ring is full the
 * command queue stalls until an EQ_CI write frees a slot.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/atomic.h"
#include "qemu/bswap.h"
#include "qemu/main-loop.h"
#include "hw/pci/msix.h"
#include "qhca.h"
#include "trace.h"

static void qhca_cmd_run(QhcaState *s, int64_t budget, bool inline_run);

static uint32_t qhca_ring_entries(const QhcaRing *r)
{
    return 1u << r->log_size;
}

/* Entries the producer has published and the consumer not yet taken. */
static uint32_t qhca_ring_used(const QhcaRing *r)
{
    return r->pi - r->ci;
}

/*
 * The DMA address of the slot for index idx.  Only called on rings that
 * qhca_ring_check() accepted, so base + entries * entry_size does not wrap.
 */
static dma_addr_t qhca_ring_slot(const QhcaRing *r, uint32_t idx,
                                 size_t entry_size)
{
    return r->base + (uint64_t)(idx & (qhca_ring_entries(r) - 1)) * entry_size;
}

/* Returns NULL if the ring registers are usable, else what is wrong. */
static const char *qhca_ring_check(const QhcaState *s, const QhcaRing *r,
                                   size_t entry_size)
{
    uint64_t bytes;

    if (r->log_size < QHCA_QUEUE_MIN_LOG || r->log_size > s->max_queue_log) {
        return "log2 size out of range";
    }
    if (!r->base) {
        return "base is zero";
    }
    if (r->base & 63) {
        return "base not 64-byte aligned";
    }
    bytes = (uint64_t)entry_size << r->log_size;
    if (r->base + bytes - 1 < r->base) {
        return "ring wraps the address space";
    }
    return NULL;
}

/* The invariants of a READY device; checked on migration too. */
bool qhca_queues_valid(const QhcaState *s)
{
    return !qhca_ring_check(s, &s->cmdq, sizeof(struct qhca_cmd)) &&
           !qhca_ring_check(s, &s->eq, sizeof(struct qhca_eqe)) &&
           qhca_ring_used(&s->cmdq) <= qhca_ring_entries(&s->cmdq) &&
           qhca_ring_used(&s->eq) <= qhca_ring_entries(&s->eq);
}

/* CTRL.ENABLE 0->1.  On failure set CFG_ERROR and stay disabled. */
bool qhca_queues_start(QhcaState *s)
{
    const char *why;

    why = qhca_ring_check(s, &s->cmdq, sizeof(struct qhca_cmd));
    if (why) {
        s->status |= QHCA_STATUS_CFG_ERROR;
        QHCA_GUEST_ERR(s, qhca_err_enable,
                       "ENABLE rejected: %s %s (base 0x%" PRIx64 " log %u)",
                       "command queue", why, s->cmdq.base, s->cmdq.log_size);
        return false;
    }
    why = qhca_ring_check(s, &s->eq, sizeof(struct qhca_eqe));
    if (why) {
        s->status |= QHCA_STATUS_CFG_ERROR;
        QHCA_GUEST_ERR(s, qhca_err_enable,
                       "ENABLE rejected: %s %s (base 0x%" PRIx64 " log %u)",
                       "event queue", why, s->eq.base, s->eq.log_size);
        return false;
    }

    s->cmdq.pi = s->cmdq.ci = 0;
    s->eq.pi = s->eq.ci = 0;
    s->status &= ~QHCA_STATUS_CFG_ERROR;
    s->status |= QHCA_STATUS_READY;
    trace_qhca_enable(s->cmdq.base, s->cmdq.log_size,
                      s->eq.base, s->eq.log_size);
    return true;
}

/*
 * CTRL.ENABLE 1->0: commands not yet consumed are abandoned, and so is one
 * whose page list is being read (it gets no completion).
 */
void qhca_queues_stop(QhcaState *s)
{
    s->status &= ~QHCA_STATUS_READY;
    qemu_bh_cancel(s->cmd_bh);
    qhca_cmd_abandon(s);
    trace_qhca_disable(s->cmdq.pi, s->cmdq.ci);
}

/* Stop everything until CTRL.RESET. */
/* The command being read, if any, gets no completion; its page list goes. */
void qhca_cmd_abandon(QhcaState *s)
{
    s->cmd_active = false;
    qhca_pl_release(s, &s->pl);
}

/*
 * A DMA of ours failed: the device stops until reset.  Not while a reset is
 * pending: qhca_dma_read() and qhca_dma_write() refuse DMA on purpose then,
 * and the reset about to run clears the device anyway.
 */
static void qhca_fatal(QhcaState *s, uint32_t syndrome, uint64_t addr)
{
    if (s->reset_pending) {
        return;
    }
    s->status &= ~QHCA_STATUS_READY;
    s->status |= QHCA_STATUS_FATAL;
    s->fatal_syndrome = syndrome;
    qemu_bh_cancel(s->cmd_bh);
    qhca_cmd_abandon(s);
    qemu_bh_cancel(s->engine_bh);
    trace_qhca_fatal(syndrome, addr);
    qemu_log_mask(LOG_GUEST_ERROR,
                  "qhca: fatal error %u: DMA to/from 0x%" PRIx64 " failed\n",
                  syndrome, addr);
}

void qhca_cmdq_write_pi(QhcaState *s, uint32_t pi)
{
    QhcaRing *q = &s->cmdq;

    if (!qhca_ready(s)) {
        QHCA_GUEST_ERR(s, qhca_err_cmdq_pi,
                       "CMDQ_PI %u ignored (ci %u): %s",
                       pi, q->ci, "device not ready");
        return;
    }
    if (pi - q->ci > qhca_ring_entries(q)) {
        QHCA_GUEST_ERR(s, qhca_err_cmdq_pi,
                       "CMDQ_PI %u ignored (ci %u): %s",
                       pi, q->ci, "more commands than ring entries");
        return;
    }
    if (pi - q->ci < qhca_ring_used(q)) {
        QHCA_GUEST_ERR(s, qhca_err_cmdq_pi,
                       "CMDQ_PI %u ignored (ci %u): %s",
                       pi, q->ci, "producer index moved backwards");
        return;
    }

    trace_qhca_cmdq_pi(pi, q->ci);
    q->pi = pi;
    if (q->pi != q->ci) {
        /* A short run here; what is left goes to the bottom half. */
        qhca_cmd_run(s, QHCA_CMD_INLINE_BUDGET, true);
    }
}

void qhca_eq_write_ci(QhcaState *s, uint32_t ci)
{
    QhcaRing *eq = &s->eq;

    /* Valid values lie in [ci, pi]: forward, and not past the producer. */
    if (ci - eq->ci > qhca_ring_used(eq)) {
        QHCA_GUEST_ERR(s, qhca_err_eq_ci,
                       "EQ_CI %u ignored: outside [ci %u, pi %u]",
                       ci, eq->ci, eq->pi);
        return;
    }

    trace_qhca_eq_ci(ci, eq->pi);
    if (ci != eq->ci && qhca_ready(s) &&
        (s->cmdq.pi != s->cmdq.ci || s->cmd_active)) {
        /* Freed slots: resume a command queue stalled on a full EQ. */
        qemu_bh_schedule(s->cmd_bh);
    }
    eq->ci = ci;
}

/*
 * Raise the event queue's vector; while busy, only note it: the MSI-X
 * message is a DMA that may come back into the device, so it goes out when
 * the busy section ends (qhca_busy_exit), one per run.
 */
void qhca_eq_notify(QhcaState *s)
{
    PCIDevice *pdev = PCI_DEVICE(s);

    if (s->busy) {
        s->irq_pending = true;
        return;
    }
    if ((s->intr_ctrl & QHCA_INTR_EQ_ENABLE) && msix_enabled(pdev)) {
        QHCA_TRACE_STEP(QHCA_IRQ, qhca_irq, QHCA_MSIX_VEC_EQ);
        msix_notify(pdev, QHCA_MSIX_VEC_EQ);
    }
}

/*
 * Write one event: bytes 0..30 first, then, after a write barrier, the owner
 * byte, so that a driver polling the owner bit on another vCPU never sees a
 * half-written entry.  eqe is little-endian already; owner is filled in here.
 */
static bool qhca_eq_post(QhcaState *s, struct qhca_eqe *eqe)
{
    QhcaRing *eq = &s->eq;
    dma_addr_t addr = qhca_ring_slot(eq, eq->pi, sizeof(*eqe));
    const size_t owner_off = offsetof(struct qhca_eqe, owner);

    eqe->owner = ((eq->pi >> eq->log_size) + 1) & QHCA_EQE_OWNER;

    if (qhca_dma_write(s, addr, eqe, owner_off) != MEMTX_OK) {
        qhca_fatal(s, QHCA_FATAL_EQ_DMA, addr);
        return false;
    }
    /* The entry body must be visible before the owner byte hands it over. */
    smp_wmb();
    if (qhca_dma_write(s, addr + owner_off, &eqe->owner, 1) != MEMTX_OK) {
        qhca_fatal(s, QHCA_FATAL_EQ_DMA, addr + owner_off);
        return false;
    }

    trace_qhca_eqe(eq->pi, eqe->type, eqe->status, eqe->owner);
    eq->pi++;
    return true;
}

/*
 * An event entry (little-endian, owner filled in here), if the device is
 * ready and the ring has room; false if it was not posted.  Not counted as
 * an overflow: a sender that can raise it again later (a page fault) calls
 * this directly.
 */
bool qhca_eq_event_entry(QhcaState *s, struct qhca_eqe *eqe)
{
    if (!qhca_ready(s)) {
        trace_qhca_event_lost(eqe->type, le64_to_cpu(eqe->data[0]),
                              "device not ready");
        return false;
    }
    if (qhca_ring_used(&s->eq) == qhca_ring_entries(&s->eq)) {
        trace_qhca_event_lost(eqe->type, le64_to_cpu(eqe->data[0]),
                              "event queue full");
        return false;
    }
    if (qhca_eq_post(s, eqe)) {
        qhca_eq_notify(s);
    }
    return true;
}

/*
 * An asynchronous event (CQ_COMP, QP_ERR, CQ_ERR).  Unlike command
 * completions these cannot wait: with the event ring full the event is lost
 * and counted in EQ_OVERFLOWS.
 */
void qhca_eq_event(QhcaState *s, uint8_t type, uint64_t data0, uint64_t data1)
{
    struct qhca_eqe eqe = {
        .type = type,
        .data = { cpu_to_le64(data0), cpu_to_le64(data1) },
    };

    if (!qhca_eq_event_entry(s, &eqe) && qhca_ready(s)) {
        qhca_count(&s->eq_overflows);
    }
}

/* Reserved fields must be zero, and so must the ones the opcode ignores. */
bool qhca_cmd_unused_zero(const struct qhca_cmd *cmd, bool uses_out,
                          unsigned nr_in)
{
    unsigned i;

    if ((cmd->flags & ~QHCA_CMD_FLAG_POLLED) ||
        (cmd->in_ext && cmd->opcode != QHCA_CMD_CREATE_QP)) {
        return false;
    }
    if (!uses_out && (cmd->out_addr || cmd->out_len)) {
        return false;
    }
    for (i = nr_in; i < ARRAY_SIZE(cmd->in); i++) {
        if (cmd->in[i]) {
            return false;
        }
    }
    return true;
}

static uint8_t qhca_cmd_query_device(QhcaState *s, const struct qhca_cmd *cmd)
{
    struct qhca_device_attr attr = {
        .abi_version    = cpu_to_le32(QHCA_ABI_VERSION),
        .num_uars       = cpu_to_le32(s->num_uars),
        .caps           = cpu_to_le64(qhca_caps(s)),
        .node_guid      = cpu_to_le64(s->node_guid),
        .fw_version     = cpu_to_le64(QHCA_FW_VERSION),
        .vendor_id      = cpu_to_le32(QHCA_PCI_VENDOR_ID),
        .vendor_part_id = cpu_to_le32(QHCA_PCI_DEVICE_ID),
        .hw_ver         = cpu_to_le32(QHCA_HW_VER),
        .max_pd         = cpu_to_le32(QHCA_LIMIT_MAX_PD),
        .max_cq         = cpu_to_le32(QHCA_LIMIT_MAX_CQ),
        .max_cqe        = cpu_to_le32(QHCA_LIMIT_MAX_CQE),
        .max_qp         = cpu_to_le32(QHCA_LIMIT_MAX_QP),
        .max_qp_wr      = cpu_to_le32(QHCA_LIMIT_MAX_QP_WR),
        .max_sge        = cpu_to_le32(QHCA_LIMIT_MAX_SGE),
        .max_inline     = cpu_to_le32(QHCA_LIMIT_MAX_INLINE),
        .max_mr         = cpu_to_le32(s->max_mr),
        .max_qp_rd_atom = cpu_to_le16(QHCA_LIMIT_MAX_RD_ATOMIC),
        .max_qp_init_rd_atom = cpu_to_le16(QHCA_LIMIT_MAX_RD_ATOMIC),
        .max_mr_size    = cpu_to_le64(QHCA_LIMIT_MAX_MR_SIZE),
        .page_size_cap  = cpu_to_le64(QHCA_LIMIT_PAGE_SIZES),
        .odp_general_caps = cpu_to_le64(QHCA_ODP_GENERAL_CAPS),
        .odp_rc_caps    = cpu_to_le32(QHCA_ODP_RC_CAPS),
        .max_mw         = cpu_to_le32(QHCA_LIMIT_MAX_MW),
        .max_ah         = cpu_to_le32(QHCA_LIMIT_MAX_AH),
        .odp_ud_caps    = cpu_to_le32(QHCA_ODP_UD_CAPS),
        .max_srq        = cpu_to_le32(QHCA_LIMIT_MAX_SRQ),
        .max_srq_wr     = cpu_to_le32(QHCA_LIMIT_MAX_QP_WR),
    };

    if (!qhca_cmd_unused_zero(cmd, true, 0) || !cmd->out_addr ||
        cmd->out_len < sizeof(attr) ||
        cmd->out_addr + sizeof(attr) - 1 < cmd->out_addr) {
        return QHCA_CMD_BAD_PARAM;
    }
    if (qhca_dma_write(s, cmd->out_addr, &attr, sizeof(attr)) != MEMTX_OK) {
        return QHCA_CMD_DMA_ERROR;
    }
    return QHCA_CMD_OK;
}

static uint8_t qhca_cmd_alloc_uar(QhcaState *s, const struct qhca_cmd *cmd,
                                  uint64_t *data)
{
    int index;

    if (!qhca_cmd_unused_zero(cmd, false, 1) ||
        (cmd->in[0] & ~(uint64_t)QHCA_UAR_KERNEL)) {
        return QHCA_CMD_BAD_PARAM;
    }
    index = qhca_ctx_alloc(s, cmd->in[0] & QHCA_UAR_KERNEL);
    if (index < 0) {
        return QHCA_CMD_NO_RESOURCES;
    }
    data[0] = index;
    return QHCA_CMD_OK;
}

static uint8_t qhca_cmd_free_uar(QhcaState *s, const struct qhca_cmd *cmd)
{
    if (!qhca_cmd_unused_zero(cmd, false, 1)) {
        return QHCA_CMD_BAD_PARAM;
    }
    return qhca_ctx_free(s, cmd->in[0]) ? QHCA_CMD_OK
                                         : QHCA_CMD_BAD_RESOURCE;
}

/*
 * cmd is in host byte order.  Returns the status; fills data[] on success.
 * QHCA_CMD_PENDING: the command asked for its page list in pl; once that is
 * read it runs again, with pl holding the list.
 */
static uint8_t qhca_cmd_exec(QhcaState *s, const struct qhca_cmd *cmd,
                             uint64_t *data, QhcaPageList *pl)
{
    switch (cmd->opcode) {
    case QHCA_CMD_NOP:
        return qhca_cmd_unused_zero(cmd, false, 0) ? QHCA_CMD_OK
                                                   : QHCA_CMD_BAD_PARAM;
    case QHCA_CMD_QUERY_DEVICE:
        return qhca_cmd_query_device(s, cmd);
    case QHCA_CMD_ALLOC_UAR:
        return qhca_cmd_alloc_uar(s, cmd, data);
    case QHCA_CMD_FREE_UAR:
        return qhca_cmd_free_uar(s, cmd);
    case QHCA_CMD_ALLOC_PD ... QHCA_CMD_QUERY_CTX:
        return qhca_cmd_obj(s, cmd, data, pl);
    case QHCA_CMD_MAP_ODP ... QHCA_CMD_RESUME:
        return qhca_cmd_odp(s, cmd, data);
    case QHCA_CMD_REVOKE_PAGES:
        return qhca_cmd_obj(s, cmd, data, pl);
    case QHCA_CMD_ALLOC_MW ... QHCA_CMD_DEALLOC_MW:
        return qhca_cmd_mw(s, cmd, data);
    case QHCA_CMD_CREATE_AH ... QHCA_CMD_DESTROY_AH:
        return qhca_cmd_ah(s, cmd, data);
    case QHCA_CMD_QUERY_PORT ... QHCA_CMD_SET_GID:
        return qhca_cmd_port(s, cmd);
    case QHCA_CMD_CREATE_SRQ ... QHCA_CMD_DESTROY_SRQ:
        return qhca_cmd_srq(s, cmd, data, pl);
    case QHCA_CMD_RESIZE_CQ:
        return qhca_cmd_cq(s, cmd, data, pl);
    case QHCA_CMD_MODIFY_MR:
        return qhca_cmd_obj(s, cmd, data, pl);
    default:
        return QHCA_CMD_BAD_OPCODE;
    }
}

static void qhca_cmd_to_cpu(struct qhca_cmd *cmd)
{
    unsigned i;

    cmd->opcode = le16_to_cpu(cmd->opcode);
    cmd->flags = le16_to_cpu(cmd->flags);
    cmd->token = le32_to_cpu(cmd->token);
    cmd->out_addr = le64_to_cpu(cmd->out_addr);
    cmd->out_len = le32_to_cpu(cmd->out_len);
    cmd->in_ext = le32_to_cpu(cmd->in_ext);
    for (i = 0; i < ARRAY_SIZE(cmd->in); i++) {
        cmd->in[i] = le64_to_cpu(cmd->in[i]);
    }
}

/*
 * A run of the command queue (inline_run: inside a CMDQ_PI write): commands
 * in order until the ring is empty, the event ring is full (an EQ_CI write
 * resumes it), budget is spent (the bottom half takes the rest), or a DMA
 * failure makes the device FATAL.  The command at the head may be one whose
 * page list is being read (s->cmd_active); it completes before the next is
 * read.
 */
static void qhca_cmd_run(QhcaState *s, int64_t budget, bool inline_run)
{
    QhcaRing *q = &s->cmdq;

    if (s->busy) {
        /* Reached from inside our own DMA (a nested aio_poll): later. */
        s->cmd_deferred = true;
        return;
    }
    qhca_busy_enter(s);
    while (qhca_ready(s) && (s->cmd_active || q->ci != q->pi)) {
        struct qhca_eqe eqe = { .type = QHCA_EQE_CMD_DONE };
        struct qhca_cmd *cmd = &s->cmd_cur;
        uint64_t data[2] = { 0, 0 };
        bool read_here = false;
        uint8_t status;

        if (qhca_ring_used(&s->eq) == qhca_ring_entries(&s->eq)) {
            trace_qhca_eq_full(s->eq.pi, s->eq.ci);
            break;
        }
        if (budget <= 0) {
            qemu_bh_schedule(s->cmd_bh);
            break;
        }

        if (!s->cmd_active) {
            dma_addr_t addr = qhca_ring_slot(q, q->ci, sizeof(*cmd));

            if (qhca_dma_read(s, addr, cmd, sizeof(*cmd)) != MEMTX_OK) {
                qhca_fatal(s, QHCA_FATAL_CMDQ_DMA, addr);
                break;
            }
            qhca_cmd_to_cpu(cmd);
            trace_qhca_cmd(q->ci, cmd->opcode, cmd->token);
            /* The slot is the driver's again once the command is read. */
            q->ci++;
            s->cmd_active = true;
            read_here = true;
            budget -= QHCA_CMD_COST;
            status = qhca_cmd_exec(s, cmd, data, &s->pl);
        } else {
            status = qhca_pl_load(s, &s->pl, &budget);
            if (status == QHCA_CMD_OK) {
                status = qhca_cmd_exec(s, cmd, data, &s->pl);
                /* Ran with its list: it cannot ask again. */
                assert(status != QHCA_CMD_PENDING);
            }
        }
        if (status == QHCA_CMD_PENDING) {
            continue;
        }
        /* Whatever the command did not take (an error) goes now. */
        qhca_pl_release(s, &s->pl);
        s->cmd_active = false;
        if (!qhca_ready(s)) {
            /* It reached a reset, or a failed DMA made the device FATAL. */
            break;
        }
        trace_qhca_cmd_done(cmd->token, status, data[0]);

        eqe.status = status;
        eqe.token = cpu_to_le32(cmd->token);
        eqe.data[0] = cpu_to_le64(data[0]);
        eqe.data[1] = cpu_to_le64(data[1]);
        if (!qhca_eq_post(s, &eqe)) {
            break;
        }
        /*
         * One interrupt per run: the driver drains the ring on each.  None
         * for a polled command read and done inside its CMDQ_PI write: the
         * driver reads the ring when the write returns.
         */
        if (!(inline_run && read_here &&
              (cmd->flags & QHCA_CMD_FLAG_POLLED))) {
            qhca_eq_notify(s);
        }
    }
    qhca_migration_update(s);
    qhca_busy_exit(s);
}

/* The command queue bottom half: a run with the full budget. */
void qhca_cmd_bh(void *opaque)
{
    qhca_cmd_run(opaque, QHCA_CMD_BUDGET, false);
}
