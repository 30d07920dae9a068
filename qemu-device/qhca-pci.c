/*
 * qhca: an emulated RDMA host channel adapter -- PCI and QOM glue
 *
 * A PCIe endpoint with three BARs: 0 registers (qhca-regs.c), 1 MSI-X,
 * 2 doorbell pages (qhca-db.c).  The spec is docs/specs/qhca.rst.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/host-utils.h"
#include "qemu/main-loop.h"
#include "qemu/module.h"
#include "qapi/error.h"
#include "qemu/error-report.h"
#include "hw/pci/msix.h"
#include "hw/pci/pcie.h"
#include "hw/qdev-properties.h"
#include "migration/blocker.h"
#include "migration/vmstate.h"
#include "qhca-wire.h"
#include "trace.h"

/*
 * The full device reset: CTRL.RESET and the Resettable hold phase.  Registers,
 * indices, counters, FATAL state and UAR allocations go back to their reset
 * values; PCI config space and MSI-X belong to the PCI core.
 *
 * A reset that arrives while the device is busy (from inside one of its own
 * DMAs or interrupts, e.g. a bus reset by a bridge whose control register
 * the guest aimed a DMA at) is deferred to the end of the busy section: until
 * then the device does no DMA, sends nothing and raises nothing, and nothing
 * it holds is freed underneath the code that holds it.
 */
static void qhca_reset_now(QhcaState *s)
{
    trace_qhca_reset();
    s->reset_pending = false;
    s->cmd_deferred = false;
    s->engine_deferred = false;
    s->irq_pending = false;
    qemu_bh_cancel(s->cmd_bh);
    qemu_bh_cancel(s->engine_bh);
    qhca_cmd_abandon(s);
    s->wire->ops->reset(s->wire);

    s->ctrl = 0;
    s->status = 0;
    s->intr_ctrl = 0;
    s->cmdq = (QhcaRing) { 0 };
    s->eq = (QhcaRing) { 0 };
    s->guest_errors = 0;
    s->db_violations = 0;
    s->ud_no_qp = 0;
    s->eq_overflows = 0;
    s->fatal_syndrome = QHCA_FATAL_NONE;
    qhca_obj_reset(s);
    qhca_ctx_reset(s);
    qhca_port_reset(s);
    qhca_migration_update(s);
}

void qhca_reset(QhcaState *s)
{
    if (s->busy) {
        trace_qhca_reset_deferred(s->busy);
        s->reset_pending = true;
        return;
    }
    qhca_reset_now(s);
}

/*
 * Around everything that holds object pointers across a DMA or an MSI-X
 * message: the command-queue and engine bottom halves, and a doorbell's
 * inline engine turn.  Sections nest; the outermost exit runs what arrived
 * meanwhile: a reset first (it makes everything else moot), then the bottom
 * halves that were reached re-entrantly, then one interrupt for the events
 * posted.  msix_notify() runs with nothing held, so whatever it reaches may
 * act at once.
 */
void qhca_busy_enter(QhcaState *s)
{
    s->busy++;
}

void qhca_busy_exit(QhcaState *s)
{
    assert(s->busy);
    if (--s->busy) {
        return;
    }
    if (s->reset_pending) {
        qhca_reset_now(s);
        return;
    }
    if (s->cmd_deferred) {
        s->cmd_deferred = false;
        qemu_bh_schedule(s->cmd_bh);
    }
    if (s->engine_deferred) {
        s->engine_deferred = false;
        qemu_bh_schedule(s->engine_bh);
    }
    if (s->irq_pending) {
        s->irq_pending = false;
        qhca_eq_notify(s);
    }
}

/*
 * Every DMA of the device goes through these: none once a reset is pending
 * (the reset is what the device is doing, conceptually, from then on).
 * &s->parent_obj, not PCI_DEVICE(s): several DMAs per message, and the
 * checked QOM cast is a type lookup each time.
 */
MemTxResult qhca_dma_read(QhcaState *s, dma_addr_t addr, void *buf,
                          dma_addr_t len)
{
    if (s->reset_pending) {
        return MEMTX_ERROR;
    }
    return pci_dma_read(&s->parent_obj, addr, buf, len);
}

MemTxResult qhca_dma_write(QhcaState *s, dma_addr_t addr, const void *buf,
                           dma_addr_t len)
{
    if (s->reset_pending) {
        return MEMTX_ERROR;
    }
    return pci_dma_write(&s->parent_obj, addr, buf, len);
}

static void qhca_reset_hold(Object *obj, ResetType type)
{
    qhca_reset(QHCA(obj));
}

static void qhca_exit(PCIDevice *pdev);

static void qhca_realize(PCIDevice *pdev, Error **errp)
{
    QhcaState *s = QHCA(pdev);
    uint64_t uar_bar_size;

    if (s->num_uars < 1 || s->num_uars > QHCA_MAX_NUM_UARS) {
        error_setg(errp, "num-uars must be between 1 and %u, not %u",
                   QHCA_MAX_NUM_UARS, s->num_uars);
        return;
    }
    if (s->max_queue_log < QHCA_QUEUE_MIN_LOG ||
        s->max_queue_log > QHCA_QUEUE_MAX_LOG) {
        error_setg(errp, "max-queue-log must be between %u and %u,"
                   " not %u", QHCA_QUEUE_MIN_LOG, QHCA_QUEUE_MAX_LOG,
                   s->max_queue_log);
        return;
    }
    if (s->max_mr < 1 || s->max_mr > QHCA_LIMIT_MAX_MR) {
        error_setg(errp, "max-mr must be between 1 and %u, not %u",
                   QHCA_LIMIT_MAX_MR, s->max_mr);
        return;
    }
    qemu_macaddr_default_if_unset(&s->conf.macaddr);
    if (!s->node_guid) {
        /* The MAC's EUI-64, as a NIC's link-local address has it. */
        const uint8_t *m = s->conf.macaddr.a;

        s->node_guid = (uint64_t)(m[0] ^ 2) << 56 | (uint64_t)m[1] << 48 |
                       (uint64_t)m[2] << 40 | 0xfffeull << 24 |
                       (uint64_t)m[3] << 16 | (uint64_t)m[4] << 8 | m[5];
    }
    if (s->loss_drop > 1000 || s->loss_dup > 1000 ||
        s->loss_reorder > 1000) {
        error_setg(errp, "x-loss-drop, x-loss-dup and x-loss-reorder are"
                   " per mille: 0..1000");
        return;
    }

    /* No INTx: the event queue interrupt is MSI-X only. */
    pdev->config[PCI_INTERRUPT_PIN] = 0;

    if (pcie_endpoint_cap_init(pdev, 0x80) < 0) {
        error_setg(errp, "cannot add the PCI Express capability");
        return;
    }

    memory_region_init_io(&s->regs, OBJECT(s), &qhca_regs_ops, s,
                          "qhca-regs", QHCA_REGS_SIZE);
    pci_register_bar(pdev, QHCA_BAR_REGS, PCI_BASE_ADDRESS_SPACE_MEMORY,
                     &s->regs);

    if (msix_init_exclusive_bar(pdev, QHCA_MSIX_VECTORS, QHCA_BAR_MSIX,
                                errp)) {
        pcie_cap_exit(pdev);
        return;
    }
    msix_vector_use(pdev, QHCA_MSIX_VEC_EQ);

    uar_bar_size = pow2ceil((uint64_t)s->num_uars << QHCA_UAR_PAGE_SHIFT);
    memory_region_init_io(&s->uar, OBJECT(s), &qhca_uar_ops, s,
                          "qhca-uar", uar_bar_size);
    pci_register_bar(pdev, QHCA_BAR_UAR,
                     PCI_BASE_ADDRESS_SPACE_MEMORY |
                     PCI_BASE_ADDRESS_MEM_TYPE_64 |
                     PCI_BASE_ADDRESS_MEM_PREFETCH, &s->uar);

    s->ctx = g_new0(QhcaContext, s->num_uars);
    s->cmd_bh = qemu_bh_new_guarded(qhca_cmd_bh, s,
                                    &DEVICE(pdev)->mem_reentrancy_guard);
    qhca_obj_init(s);
    qhca_engine_init(s);
    qhca_port_init(s);
    if (!qhca_roce_realize(s, errp)) {
        qhca_exit(pdev);
        return;
    }

    trace_qhca_realize(s->num_uars, s->node_guid, s->max_queue_log);
}

static void qhca_exit(PCIDevice *pdev)
{
    QhcaState *s = QHCA(pdev);

    qhca_roce_unrealize(s);
    qhca_pl_release(s, &s->pl);
    qhca_obj_fini(s);
    qhca_migration_update(s);
    qhca_engine_fini(s);
    while (s->pkt_cached) {
        g_free(s->pkt_cache[--s->pkt_cached]);
    }
    qemu_bh_delete(s->cmd_bh);
    s->cmd_bh = NULL;
    msix_uninit_exclusive_bar(pdev);
    pcie_cap_exit(pdev);
    g_free(s->ctx);
    s->ctx = NULL;
}

/*
 * Migration: device registers plus the UAR allocation table (which pages
 * are allocated, and which of them to kernel contexts); the rings and
 * command buffers are guest memory.  Verbs objects (PDs, MRs, CQs, QPs) are
 * not migrated yet: while the device holds any, a migration blocker says so
 * (qhca_migration_update()), so that `migrate` fails before it starts
 * rather than after RAM has streamed; and a device that holds any when it
 * is saved (objects created while a migration was already under way, when
 * no blocker can be added) refuses, rather than arrive without them.  The
 * loaded state is as untrusted as a guest write, so post_load checks the
 * invariants the device relies on before using it.
 */

/*
 * After every command and reset: a blocker while verbs objects exist, none
 * once the last is gone.  Adding one fails while a migration runs (and with
 * -only-migratable); pre_save refuses then, and the next command tries again.
 */
void qhca_migration_update(QhcaState *s)
{
    bool held = qhca_objects_exist(s);
    const char *name = DEVICE(s)->id ?: object_get_typename(OBJECT(s));

    if (held && !s->migration_blocker) {
        error_setg(&s->migration_blocker,
                   "qhca device '%s' holds RDMA verbs objects (queue pairs, "
                   "regions, ...), which cannot be migrated; close its RDMA "
                   "contexts (or unbind its driver) first", name);
        /* On failure the reason is freed and NULL again. */
        migrate_add_blocker(&s->migration_blocker, NULL);
    } else if (!held && s->migration_blocker) {
        migrate_del_blocker(&s->migration_blocker);
    }
}
static int qhca_pre_save(void *opaque)
{
    QhcaState *s = opaque;

    if (qhca_objects_exist(s)) {
        error_report("qhca: cannot migrate a device that holds verbs objects"
                     " (%u PDs, %u MRs, %u MWs, %u CQs, %u QPs, %u AHs)",
                     s->num_pd, s->num_mr, s->num_mw, s->num_cq, s->num_qp,
                     s->num_ah);
        return -EBUSY;
    }
    if (s->cmd_active) {
        /* Not in the stream: a command whose page list is being read. */
        error_report("qhca: cannot migrate while a command reads its page"
                     " list; try again");
        return -EBUSY;
    }
    return 0;
}

/*
 * The kernel flags arrive in a subsection that a stream without kernel
 * contexts does not have: none until it says otherwise.
 */
static int qhca_pre_load(void *opaque)
{
    QhcaState *s = opaque;
    uint32_t i;

    for (i = 0; i < s->num_uars; i++) {
        s->ctx[i].kernel = false;
    }
    return 0;
}

static int qhca_post_load(void *opaque, int version_id)
{
    QhcaState *s = opaque;
    uint32_t i;

    s->num_ctx = 0;
    for (i = 0; i < s->num_uars; i++) {
        if (s->ctx[i].kernel && !s->ctx[i].in_use) {
            return -EINVAL;
        }
        if (s->ctx[i].in_use) {
            s->num_ctx++;
        }
    }

    if ((s->ctrl & ~QHCA_CTRL_ENABLE) ||
        (s->status & ~(QHCA_STATUS_READY | QHCA_STATUS_FATAL |
                       QHCA_STATUS_CFG_ERROR)) ||
        (s->intr_ctrl & ~QHCA_INTR_EQ_ENABLE)) {
        return -EINVAL;
    }
    if (s->status & QHCA_STATUS_READY) {
        if (!(s->ctrl & QHCA_CTRL_ENABLE) ||
            (s->status & QHCA_STATUS_FATAL) || !qhca_queues_valid(s)) {
            return -EINVAL;
        }
        if (s->cmdq.pi != s->cmdq.ci) {
            qemu_bh_schedule(s->cmd_bh);
        }
    }
    return 0;
}

static const VMStateDescription qhca_vmstate_ring = {
    .name = "qhca/ring",
    .version_id = 1,
    .minimum_version_id = 1,
    .fields = (const VMStateField[]) {
        VMSTATE_UINT64(base, QhcaRing),
        VMSTATE_UINT32(log_size, QhcaRing),
        VMSTATE_UINT32(pi, QhcaRing),
        VMSTATE_UINT32(ci, QhcaRing),
        VMSTATE_END_OF_LIST()
    },
};

static const VMStateDescription qhca_vmstate_ctx = {
    .name = "qhca/ctx",
    .version_id = 1,
    .minimum_version_id = 1,
    .fields = (const VMStateField[]) {
        VMSTATE_BOOL(in_use, QhcaContext),
        VMSTATE_END_OF_LIST()
    },
};

/*
 * Which contexts are the driver's own (QHCA_UAR_KERNEL), when any is; the
 * GSI QP is a verbs object, so there is none while the device migrates.
 */
static bool qhca_kernel_needed(void *opaque)
{
    QhcaState *s = opaque;
    uint32_t i;

    for (i = 0; i < s->num_uars; i++) {
        if (s->ctx[i].kernel) {
            return true;
        }
    }
    return false;
}

static const VMStateDescription qhca_vmstate_ctx_kernel = {
    .name = "qhca/ctx-kernel",
    .version_id = 1,
    .minimum_version_id = 1,
    .fields = (const VMStateField[]) {
        VMSTATE_BOOL(kernel, QhcaContext),
        VMSTATE_END_OF_LIST()
    },
};

static const VMStateDescription qhca_vmstate_kernel = {
    .name = "qhca/kernel",
    .version_id = 1,
    .minimum_version_id = 1,
    .needed = qhca_kernel_needed,
    .fields = (const VMStateField[]) {
        VMSTATE_STRUCT_VARRAY_POINTER_UINT32(ctx, QhcaState, num_uars,
                                             qhca_vmstate_ctx_kernel,
                                             QhcaContext),
        VMSTATE_END_OF_LIST()
    },
};

/* The GID table, when the driver has set an entry (checked on arrival). */
static bool qhca_port_needed(void *opaque)
{
    QhcaState *s = opaque;
    unsigned i;

    for (i = 1; i < QHCA_GID_TABLE_LEN; i++) {
        if (s->gid[i].flags) {
            return true;
        }
    }
    return false;
}

static int qhca_port_load(void *opaque, int version_id)
{
    return qhca_port_post_load(opaque) ? 0 : -EINVAL;
}

static const VMStateDescription qhca_vmstate_port = {
    .name = "qhca/port",
    .version_id = 1,
    .minimum_version_id = 1,
    .needed = qhca_port_needed,
    .post_load = qhca_port_load,
    .fields = (const VMStateField[]) {
        VMSTATE_BUFFER_UNSAFE(gid, QhcaState, 1, sizeof_field(QhcaState, gid)),
        VMSTATE_END_OF_LIST()
    },
};

static const VMStateDescription qhca_vmstate = {
    .name = "qhca",
    .version_id = 1,
    .minimum_version_id = 1,
    .pre_save = qhca_pre_save,
    .pre_load = qhca_pre_load,
    .post_load = qhca_post_load,
    .fields = (const VMStateField[]) {
        VMSTATE_PCI_DEVICE(parent_obj, QhcaState),
        VMSTATE_MSIX(parent_obj, QhcaState),
        VMSTATE_UINT32_EQUAL(num_uars, QhcaState, "num-uars differs"),
        VMSTATE_UINT32_EQUAL(max_queue_log, QhcaState,
                             "max-queue-log differs"),
        VMSTATE_UINT32(ctrl, QhcaState),
        VMSTATE_UINT32(status, QhcaState),
        VMSTATE_UINT32(intr_ctrl, QhcaState),
        VMSTATE_STRUCT(cmdq, QhcaState, 1, qhca_vmstate_ring, QhcaRing),
        VMSTATE_STRUCT(eq, QhcaState, 1, qhca_vmstate_ring, QhcaRing),
        VMSTATE_UINT32(guest_errors, QhcaState),
        VMSTATE_UINT32(db_violations, QhcaState),
        VMSTATE_UINT32(eq_overflows, QhcaState),
        VMSTATE_UINT32(fatal_syndrome, QhcaState),
        VMSTATE_STRUCT_VARRAY_POINTER_UINT32(ctx, QhcaState, num_uars,
                                             qhca_vmstate_ctx, QhcaContext),
        VMSTATE_END_OF_LIST()
    },
    .subsections = (const VMStateDescription * const []) {
        &qhca_vmstate_port,
        &qhca_vmstate_kernel,
        NULL
    },
};

static const Property qhca_properties[] = {
    DEFINE_PROP_UINT32("num-uars", QhcaState, num_uars,
                       QHCA_DEFAULT_NUM_UARS),
    DEFINE_PROP_UINT32("max-mr", QhcaState, max_mr, QHCA_LIMIT_MAX_MR),
    DEFINE_PROP_BOOL("x-wire-queued", QhcaState, wire_queued, false),
    DEFINE_PROP_UINT64("x-wire-drop", QhcaState, wire_drop, 0),
    DEFINE_PROP_UINT64("node-guid", QhcaState, node_guid, 0),
    DEFINE_NIC_PROPERTIES(QhcaState, conf),
    DEFINE_PROP_UINT32("x-loss-drop", QhcaState, loss_drop, 0),
    DEFINE_PROP_UINT32("x-loss-dup", QhcaState, loss_dup, 0),
    DEFINE_PROP_UINT32("x-loss-reorder", QhcaState, loss_reorder, 0),
    DEFINE_PROP_UINT64("x-loss-seed", QhcaState, loss_seed, 1),
    DEFINE_PROP_UINT32("max-queue-log", QhcaState, max_queue_log,
                       QHCA_QUEUE_MAX_LOG),
};

static void qhca_class_init(ObjectClass *oc, void *data)
{
    DeviceClass *dc = DEVICE_CLASS(oc);
    ResettableClass *rc = RESETTABLE_CLASS(oc);
    PCIDeviceClass *pc = PCI_DEVICE_CLASS(oc);

    pc->realize = qhca_realize;
    pc->exit = qhca_exit;
    pc->vendor_id = QHCA_PCI_VENDOR_ID;
    pc->device_id = QHCA_PCI_DEVICE_ID;
    pc->revision = QHCA_PCI_REVISION;
    pc->class_id = QHCA_PCI_CLASS;

    rc->phases.hold = qhca_reset_hold;

    dc->desc = "qhca emulated RDMA host channel adapter";
    dc->vmsd = &qhca_vmstate;
    set_bit(DEVICE_CATEGORY_NETWORK, dc->categories);

    device_class_set_props(dc, qhca_properties);
    object_class_property_set_description(oc, "num-uars",
        "Doorbell (UAR) pages in BAR2, one per driver context (1..1024)");
    object_class_property_set_description(oc, "max-mr",
        "Memory regions held at once (1..4096)");
    object_class_property_set_description(oc, "x-wire-queued",
        "Loopback packets wait for the engine's bottom half instead of"
        " arriving at once (a fabric with latency; for tests)");
    object_class_property_set_description(oc, "node-guid",
        "Node GUID reported by QUERY_DEVICE, and the interface identifier"
        " of GID 0 (default, or 0: the MAC's EUI-64)");
    object_class_property_set_description(oc, "x-loss-drop",
        "RoCEv2 frames the port loses on purpose, per mille (tests)");
    object_class_property_set_description(oc, "x-loss-dup",
        "RoCEv2 frames the port sends twice, per mille (tests)");
    object_class_property_set_description(oc, "x-loss-reorder",
        "RoCEv2 frames the port holds back behind the next one, per mille"
        " (tests)");
    object_class_property_set_description(oc, "x-loss-seed",
        "Seed of the x-loss-* choices, for a repeatable run");
    object_class_property_set_description(oc, "max-queue-log",
        "Largest log2(entries) of the command and event queues,"
        " reported in CMDQ_MAX_LOG (1..12)");
}

static const TypeInfo qhca_info = {
    .name          = TYPE_QHCA,
    .parent        = TYPE_PCI_DEVICE,
    .instance_size = sizeof(QhcaState),
    .class_init    = qhca_class_init,
    .interfaces    = (InterfaceInfo[]) {
        { INTERFACE_PCIE_DEVICE },
        { }
    },
};

static void qhca_register_types(void)
{
    type_register_static(&qhca_info);
}

type_init(qhca_register_types)
