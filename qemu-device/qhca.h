/*
 * qhca: an emulated RDMA host channel adapter -- device state
 *
 * The register map, queue entries and doorbell format are the ABI in
 * uapi/include/qhca-abi.h; the behaviour is specified in docs/qhca.rst.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MISC_QHCA_H
#define HW_MISC_QHCA_H

#include "hw/pci/pci_device.h"
#include "qemu/log.h"
#include "qom/object.h"

/*
 * The ABI header, in its QHCA_ABI_NO_LINUX_TYPES form (meson.build sets it).
 * On Linux hosts glibc's <sys/stat.h>, which qemu/osdep.h includes, has
 * already pulled in <linux/types.h>, whose __u64 is unsigned long long; the
 * header's own typedef is uint64_t (unsigned long on LP64 hosts), and C does
 * not allow both.  The header's typedefs therefore get private names while it
 * is parsed; its structures end up with plain <stdint.h> types.
 */
#define __u8 qhca_abi_u8
#define __u16 qhca_abi_u16
#define __u32 qhca_abi_u32
#define __u64 qhca_abi_u64
#include "qhca-abi.h"
#undef __u8
#undef __u16
#undef __u32
#undef __u64

/* The wire layout, as the ABI header's comments promise it. */
QEMU_BUILD_BUG_ON(sizeof(struct qhca_cmd) != 64);
QEMU_BUILD_BUG_ON(offsetof(struct qhca_cmd, in) != 24);
QEMU_BUILD_BUG_ON(sizeof(struct qhca_eqe) != 32);
QEMU_BUILD_BUG_ON(offsetof(struct qhca_eqe, owner) != 31);
QEMU_BUILD_BUG_ON(sizeof(struct qhca_device_attr) != 128);

#define TYPE_QHCA "qhca"
OBJECT_DECLARE_SIMPLE_TYPE(QhcaState, QHCA)

/* Property defaults and limits. */
#define QHCA_DEFAULT_NUM_UARS   64
#define QHCA_MAX_NUM_UARS       1024
#define QHCA_DEFAULT_NODE_GUID  0x5148434100000001ull /* "QHCA" << 32 | 1 */

/* Commands executed per bottom-half run before yielding to the main loop. */
#define QHCA_CMD_BUDGET         64

/*
 * What QUERY_DEVICE reports besides the properties.  Nothing enforces the
 * limits yet: no object they count exists in this version.
 */
#define QHCA_FW_VERSION         ((0ull << 32) | (1ull << 16) | 0) /* 0.1.0 */
#define QHCA_HW_VER             1
#define QHCA_CAPS               QHCA_CAP_UAR_ISOLATION
#define QHCA_LIMIT_MAX_PD       1024
#define QHCA_LIMIT_MAX_CQ       1024
#define QHCA_LIMIT_MAX_CQE      4096
#define QHCA_LIMIT_MAX_QP       1024
#define QHCA_LIMIT_MAX_QP_WR    4096
#define QHCA_LIMIT_MAX_SGE      16
#define QHCA_LIMIT_MAX_INLINE   256
#define QHCA_LIMIT_MAX_MR       4096
#define QHCA_LIMIT_MAX_MR_SIZE  (1ull << 32)
#define QHCA_LIMIT_PAGE_SIZES   4096ull

/*
 * A ring in guest memory: the command queue (the driver produces, the device
 * consumes) or the event queue (the device produces, the driver consumes).
 * Indices are free-running 32-bit counters; the slot is index & (entries - 1).
 * base and log_size hold whatever the driver last wrote to the registers;
 * they are trusted only after qhca_queues_start() has validated them.
 */
typedef struct QhcaRing {
    uint64_t base;
    uint32_t log_size;
    uint32_t pi;
    uint32_t ci;
} QhcaRing;

/*
 * A context: what one driver-side owner (an open /dev/qhcaN) holds in the
 * device.  Contexts are indexed by UAR page: the doorbell page a context was
 * given by ALLOC_UAR *is* its id, so a doorbell's page names the context
 * whose queues it may ring.  Queue ownership will live here.
 */
typedef struct QhcaContext {
    bool in_use;
} QhcaContext;

struct QhcaState {
    PCIDevice parent_obj;

    MemoryRegion regs;          /* BAR0 */
    MemoryRegion uar;           /* BAR2; BAR1 is the MSI-X exclusive BAR */
    QEMUBH *cmd_bh;             /* runs the command queue */

    /* Properties */
    uint32_t num_uars;
    uint64_t node_guid;
    uint32_t max_queue_log;

    /* BAR0 register file */
    uint32_t ctrl;              /* QHCA_CTRL_ENABLE; RESET self-clears */
    uint32_t status;            /* QHCA_STATUS_* */
    uint32_t intr_ctrl;         /* QHCA_INTR_* */
    QhcaRing cmdq;
    QhcaRing eq;
    uint32_t guest_errors;
    uint32_t db_violations;
    uint32_t eq_overflows;
    uint32_t fatal_syndrome;

    /* num_uars contexts, indexed by UAR page */
    QhcaContext *ctx;
};

/* Counters saturate rather than wrap. */
static inline void qhca_count(uint32_t *counter)
{
    if (*counter != UINT32_MAX) {
        (*counter)++;
    }
}

/*
 * Guest misbehaviour: count it in GUEST_ERRORS, trace it and log it, then
 * the caller ignores the access.  trace names a trace event whose arguments
 * match fmt.
 */
#define QHCA_GUEST_ERR(s, trace, fmt, ...)                              \
    do {                                                                \
        qhca_count(&(s)->guest_errors);                                 \
        trace_##trace(__VA_ARGS__);                                     \
        qemu_log_mask(LOG_GUEST_ERROR, "qhca: " fmt "\n", ## __VA_ARGS__); \
    } while (0)

static inline bool qhca_ready(const QhcaState *s)
{
    return s->status & QHCA_STATUS_READY;
}

/* qhca-pci.c */
void qhca_reset(QhcaState *s);

/* qhca-regs.c: BAR0 */
extern const MemoryRegionOps qhca_regs_ops;

/* qhca-cmd.c: command and event queues */
bool qhca_queues_start(QhcaState *s);
void qhca_queues_stop(QhcaState *s);
void qhca_cmdq_write_pi(QhcaState *s, uint32_t pi);
void qhca_eq_write_ci(QhcaState *s, uint32_t ci);
void qhca_eq_notify(QhcaState *s);
void qhca_cmd_bh(void *opaque);
bool qhca_queues_valid(const QhcaState *s);

/* qhca-db.c: BAR2 and the contexts that own its pages */
extern const MemoryRegionOps qhca_uar_ops;
int qhca_ctx_alloc(QhcaState *s);
bool qhca_ctx_free(QhcaState *s, uint64_t index);
void qhca_ctx_reset(QhcaState *s);

#endif /* HW_MISC_QHCA_H */
