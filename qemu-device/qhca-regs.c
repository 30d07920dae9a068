/*
 * qhca: an emulated RDMA host channel adapter -- BAR0 register file
 *
 * Decodes the 32-bit registers of qhca-abi.h: identity, control and status,
 * the queue registers and the counters.  The handlers only record and
 * validate; command processing runs in the bottom half (qhca-cmd.c).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/bitops.h"
#include "qhca.h"
#include "trace.h"

static uint32_t qhca_regs_value(QhcaState *s, hwaddr addr, bool *known)
{
    *known = true;

    switch (addr) {
    case QHCA_REG_MAGIC:
        return QHCA_MAGIC;
    case QHCA_REG_ABI_VERSION:
        return QHCA_ABI_VERSION;
    case QHCA_REG_CAPS_LO:
        return extract64(qhca_caps(s), 0, 32);
    case QHCA_REG_CAPS_HI:
        return extract64(qhca_caps(s), 32, 32);
    case QHCA_REG_NUM_UARS:
        return s->num_uars;
    case QHCA_REG_CMDQ_MAX_LOG:
        return s->max_queue_log;
    case QHCA_REG_CTRL:
        return s->ctrl;
    case QHCA_REG_STATUS:
        return s->status;
    case QHCA_REG_CMDQ_BASE_LO:
        return extract64(s->cmdq.base, 0, 32);
    case QHCA_REG_CMDQ_BASE_HI:
        return extract64(s->cmdq.base, 32, 32);
    case QHCA_REG_CMDQ_LOG_SIZE:
        return s->cmdq.log_size;
    case QHCA_REG_CMDQ_PI:
        return s->cmdq.pi;
    case QHCA_REG_CMDQ_CI:
        return s->cmdq.ci;
    case QHCA_REG_EQ_BASE_LO:
        return extract64(s->eq.base, 0, 32);
    case QHCA_REG_EQ_BASE_HI:
        return extract64(s->eq.base, 32, 32);
    case QHCA_REG_EQ_LOG_SIZE:
        return s->eq.log_size;
    case QHCA_REG_EQ_CI:
        return s->eq.ci;
    case QHCA_REG_EQ_PI:
        return s->eq.pi;
    case QHCA_REG_INTR_CTRL:
        return s->intr_ctrl;
    case QHCA_REG_GUEST_ERRORS:
        return s->guest_errors;
    case QHCA_REG_DB_VIOLATIONS:
        return s->db_violations;
    case QHCA_REG_EQ_OVERFLOWS:
        return s->eq_overflows;
    case QHCA_REG_FATAL_SYNDROME:
        return s->fatal_syndrome;
    case QHCA_REG_NUM_CTX:
        return s->num_ctx;
    case QHCA_REG_NUM_PD:
        return s->num_pd;
    case QHCA_REG_NUM_MR:
        return s->num_mr;
    case QHCA_REG_NUM_CQ:
        return s->num_cq;
    case QHCA_REG_NUM_QP:
        return s->num_qp;
    case QHCA_REG_NUM_MW:
        return s->num_mw;
    case QHCA_REG_NUM_AH:
        return s->num_ah;
    case QHCA_REG_UD_NO_QP:
        return s->ud_no_qp;
    default:
        *known = false;
        return 0;
    }
}

static uint64_t qhca_regs_read(void *opaque, hwaddr addr, unsigned size)
{
    QhcaState *s = opaque;
    uint32_t val;
    bool known;

    if (size != 4 || (addr & 3)) {
        QHCA_GUEST_ERR(s, qhca_err_reg_access,
                       "%s of %u bytes at BAR0 offset 0x%" PRIx64
                       " (registers take aligned 32-bit accesses only)",
                       "read", size, (uint64_t)addr);
        return 0;
    }

    val = qhca_regs_value(s, addr, &known);
    if (!known) {
        QHCA_GUEST_ERR(s, qhca_err_reg_unknown,
                       "%s of unknown register 0x%" PRIx64,
                       "read", (uint64_t)addr);
        return 0;
    }

    trace_qhca_reg_read(addr, val);
    return val;
}

/* CTRL: RESET first, then ENABLE transitions; nothing else while FATAL. */
static void qhca_write_ctrl(QhcaState *s, uint32_t val)
{
    if (val & ~(QHCA_CTRL_ENABLE | QHCA_CTRL_RESET)) {
        QHCA_GUEST_ERR(s, qhca_err_reg_bits,
                       "undefined bits in write to register 0x%" PRIx64
                       " (value 0x%x)", (uint64_t)QHCA_REG_CTRL, val);
        return;
    }

    if (val & QHCA_CTRL_RESET) {
        qhca_reset(s);
        return;
    }

    if (s->status & QHCA_STATUS_FATAL) {
        QHCA_GUEST_ERR(s, qhca_err_ctrl_fatal,
                       "CTRL write 0x%x while FATAL: only RESET recovers",
                       val);
        return;
    }

    if ((val & QHCA_CTRL_ENABLE) && !(s->ctrl & QHCA_CTRL_ENABLE)) {
        if (qhca_queues_start(s)) {
            s->ctrl |= QHCA_CTRL_ENABLE;
        }
    } else if (!(val & QHCA_CTRL_ENABLE) && (s->ctrl & QHCA_CTRL_ENABLE)) {
        qhca_queues_stop(s);
        s->ctrl &= ~QHCA_CTRL_ENABLE;
    }
}

static void qhca_write_intr_ctrl(QhcaState *s, uint32_t val)
{
    bool was_enabled = s->intr_ctrl & QHCA_INTR_EQ_ENABLE;

    if (val & ~QHCA_INTR_EQ_ENABLE) {
        QHCA_GUEST_ERR(s, qhca_err_reg_bits,
                       "undefined bits in write to register 0x%" PRIx64
                       " (value 0x%x)", (uint64_t)QHCA_REG_INTR_CTRL, val);
        return;
    }

    s->intr_ctrl = val;
    /* Events that arrived while interrupts were off still get one. */
    if (!was_enabled && (val & QHCA_INTR_EQ_ENABLE) && s->eq.pi != s->eq.ci) {
        qhca_eq_notify(s);
    }
}

/* The queue registers may change only while CTRL.ENABLE is clear. */
static bool qhca_queue_reg_writable(QhcaState *s, hwaddr addr, uint32_t val)
{
    if (s->ctrl & QHCA_CTRL_ENABLE) {
        QHCA_GUEST_ERR(s, qhca_err_reg_enabled,
                       "write to queue register 0x%" PRIx64
                       " while enabled (value 0x%x)", (uint64_t)addr, val);
        return false;
    }
    return true;
}

static void qhca_regs_write(void *opaque, hwaddr addr, uint64_t data,
                            unsigned size)
{
    QhcaState *s = opaque;
    uint32_t val = data;

    if (size != 4 || (addr & 3)) {
        QHCA_GUEST_ERR(s, qhca_err_reg_access,
                       "%s of %u bytes at BAR0 offset 0x%" PRIx64
                       " (registers take aligned 32-bit accesses only)",
                       "write", size, (uint64_t)addr);
        return;
    }

    trace_qhca_reg_write(addr, val);

    switch (addr) {
    case QHCA_REG_CTRL:
        qhca_write_ctrl(s, val);
        break;
    case QHCA_REG_CMDQ_BASE_LO:
        if (qhca_queue_reg_writable(s, addr, val)) {
            s->cmdq.base = deposit64(s->cmdq.base, 0, 32, val);
        }
        break;
    case QHCA_REG_CMDQ_BASE_HI:
        if (qhca_queue_reg_writable(s, addr, val)) {
            s->cmdq.base = deposit64(s->cmdq.base, 32, 32, val);
        }
        break;
    case QHCA_REG_CMDQ_LOG_SIZE:
        if (qhca_queue_reg_writable(s, addr, val)) {
            s->cmdq.log_size = val;
        }
        break;
    case QHCA_REG_CMDQ_PI:
        qhca_cmdq_write_pi(s, val);
        break;
    case QHCA_REG_EQ_BASE_LO:
        if (qhca_queue_reg_writable(s, addr, val)) {
            s->eq.base = deposit64(s->eq.base, 0, 32, val);
        }
        break;
    case QHCA_REG_EQ_BASE_HI:
        if (qhca_queue_reg_writable(s, addr, val)) {
            s->eq.base = deposit64(s->eq.base, 32, 32, val);
        }
        break;
    case QHCA_REG_EQ_LOG_SIZE:
        if (qhca_queue_reg_writable(s, addr, val)) {
            s->eq.log_size = val;
        }
        break;
    case QHCA_REG_EQ_CI:
        qhca_eq_write_ci(s, val);
        break;
    case QHCA_REG_INTR_CTRL:
        qhca_write_intr_ctrl(s, val);
        break;
    case QHCA_REG_MAGIC:
    case QHCA_REG_ABI_VERSION:
    case QHCA_REG_CAPS_LO:
    case QHCA_REG_CAPS_HI:
    case QHCA_REG_NUM_UARS:
    case QHCA_REG_CMDQ_MAX_LOG:
    case QHCA_REG_STATUS:
    case QHCA_REG_CMDQ_CI:
    case QHCA_REG_EQ_PI:
    case QHCA_REG_GUEST_ERRORS:
    case QHCA_REG_DB_VIOLATIONS:
    case QHCA_REG_EQ_OVERFLOWS:
    case QHCA_REG_FATAL_SYNDROME:
    case QHCA_REG_NUM_CTX:
    case QHCA_REG_NUM_PD:
    case QHCA_REG_NUM_MR:
    case QHCA_REG_NUM_CQ:
    case QHCA_REG_NUM_QP:
    case QHCA_REG_NUM_MW:
    case QHCA_REG_NUM_AH:
    case QHCA_REG_UD_NO_QP:
        QHCA_GUEST_ERR(s, qhca_err_reg_ro,
                       "write to read-only register 0x%" PRIx64
                       " (value 0x%x)", (uint64_t)addr, val);
        break;
    default:
        QHCA_GUEST_ERR(s, qhca_err_reg_unknown,
                       "%s of unknown register 0x%" PRIx64,
                       "write", (uint64_t)addr);
        break;
    }
}

/*
 * Every access reaches the handlers, whatever its size or alignment, so that
 * the bad ones can be counted in GUEST_ERRORS as the ABI promises.
 */
const MemoryRegionOps qhca_regs_ops = {
    .read = qhca_regs_read,
    .write = qhca_regs_write,
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
